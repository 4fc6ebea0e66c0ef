// Block-quantized weights on the GPU, kept as stored (never padded; include/stride/quant.h
// has the layouts, src/quant/ the CPU dequantizers these kernels reproduce bit for bit):
//
//   mul_mat, M < ST_CUDA_QGEMM_MIN_M (decode): a dequantizing matrix-vector kernel, a warp
//     a weight row at a time, reading the row once for all M columns through shared memory
//     (16-byte copies, several segments in flight: q_gemv); each chunk's integers summed
//     against x in f32, then scaled once (d sq - m sx: q_dot_chunk).
//   mul_mat_fused, one column (a decode step's q/k/v, gate/up with its gated unit, o and
//     down with the residual add): the norm, then one launch of the same walk with the
//     epilogue in it (q_gemv_fused), instead of the composite's 3-4 kernels.
//   mul_mat, M >= ST_CUDA_QGEMM_MIN_M (prefill): slabs of rows dequantized to F16 in scratch,
//     then cuBLAS (F16 x F16, f32 accumulate) on each slab, x rounded to F16 once.
//   get_rows: the selected rows dequantized to F32 (exact: the CPU's values).
//   mul_mat_id: the matrix-vector kernel per (token, slot) on the slot's expert.
//
// Every type stride's CPU dequantizes runs here: q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K,
// q4_K, q5_K, q6_K, q8_K (a Q4_K_M file holds q4_K, q6_K and, for rows that are not a
// multiple of 256, q5_0/q8_0: Gemma 3 270M has all four).
//
// How a row is read. A row of K values is K / QK blocks; every block is cut into chunks
// of CHUNK consecutive values (8 for the 32-value legacy blocks, 16 for the K-quants, so
// that a chunk never straddles a sub-block scale) and chunk c of the row holds values
// [c * CHUNK, (c + 1) * CHUNK). A thread loads the bytes one chunk needs (its quants and
// the block's scales) and splits them into scale, min and integers (qfmt::split; q_dequant
// turns a split into the CPU's values). Lane l of a warp takes chunks l, l + 32, ...
// so that a warp's loads cover consecutive bytes of the row; each lane issues the loads
// of QMM_UNROLL chunks before it uses any (bytes in flight). q_gemv reads the same chunks
// from a copy of the row in shared memory (see there); the other kernels read them from
// global memory. The widest load a field's alignment allows is used: blocks of q4_K/q5_K
// (144/176 B) are 16-byte multiples, so their quants come in 16-byte loads; q5_1 (24 B) in
// 8-byte, q4_1/q2_K/q8_K (20/84/292 B) in 4-byte loads; q8_0, q4_0, q5_0, q3_K, q6_K
// blocks (34/18/22/110/210 B) are only 2-byte aligned, so their words are assembled from
// 2-byte loads (as ggml does).
//
// Exactness. Dequantization (q_dequant, the scales) is written with __fmul_rn/__fsub_rn:
// nvcc would otherwise contract d1 * q - m1 into an FMA and the values would differ from
// the CPU's (which rounds the product, then the difference) in the last bit.
#include <limits.h>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_common.cuh"
#include "stride/quant.h"

// Columns one pass over a weight row serves (below the GEMM threshold: all of them).
#define QMM_MAX_COLS (ST_CUDA_QGEMM_MIN_M - 1)
// Warps (= weight rows) per block of the matrix-vector kernels.
#define QMM_WARPS 4
// Chunks whose loads a lane issues before it uses the first.
#define QMM_UNROLL 4
// Blocks an SM the one-column matrix-vector kernel is compiled for, and its grid a
// multiprocessor (each block's warps walking groups of rows): 8 for the 32-value types (<=
// 64 registers, no spills), 7 for the K-quants (<= 72: at 64 ptxas spills 64-84 bytes of
// them, at 72 24 bytes of one). Its bytes in flight are in shared memory, not registers.
#ifndef Q_GEMV_MIN_BLOCKS
#define Q_GEMV_MIN_BLOCKS 8
#endif
#ifndef Q_GEMV_MIN_BLOCKS_K
#define Q_GEMV_MIN_BLOCKS_K 7
#endif
// Threads per block of the element-parallel kernels (get_rows, dequantize, pack).
#define QMM_THREADS 256
// The F16 weight slab of the prefill path: rows dequantized per GEMM (bounds scratch; a
// 262144 x 640 output layer is 10 slabs of ~26k rows).
#define QMM_SLAB_BYTES ((size_t)32 << 20)

// ---- loads ----------------------------------------------------------------------------
//
// A format's bytes are read either from global memory, through the read-only path
// (get_rows, the dequantizing prefill, mul_mat_id), or from a window the matrix-vector
// kernel has staged in shared memory (Q_SHARED).
enum q_src { Q_GLOBAL, Q_SHARED };

// u16 at p (2-byte aligned).
template <q_src S> __device__ __forceinline__ uint32_t q_ld16(const uint8_t *p) {
    if constexpr (S == Q_GLOBAL) return __ldg((const unsigned short *)p);
    else return *(const unsigned short *)p;
}

// A little-endian u32 at p, which is A-byte aligned (A >= 2: every block is).
template <q_src S, int A> __device__ __forceinline__ uint32_t q_ld32(const uint8_t *p) {
    if constexpr (A >= 4) {
        if constexpr (S == Q_GLOBAL) return __ldg((const unsigned int *)p);
        else return *(const unsigned int *)p;
    } else {
        return q_ld16<S>(p) | (q_ld16<S>(p + 2) << 16);
    }
}

// NW little-endian u32 words from p (A-byte aligned) with the widest loads A allows. WORDS:
// from shared memory, a 2-byte-aligned run is read as the NW + 1 aligned words around it,
// funnel-shifted into place: NW + 1 loads where halves take 2 NW, one SHF a word more.
// Measured on the H200 (bench/cuda-decode.md, twelfth session, wip/quant-lds): q6_K's head
// -6%, q8_0's and q5_0's +9%, so only q6_K asks for it. The word past the run is read and
// discarded when p is 4-byte aligned: the caller's run must have 4 readable bytes after it
// (q6_K's ql and qh runs are followed, inside their block, by its scales and d).
template <q_src S, int A, int NW, bool WORDS = false>
__device__ __forceinline__ void q_ldw(const uint8_t *p, uint32_t *w) {
    if constexpr (A >= 16 && NW % 4 == 0) {
#pragma unroll
        for (int i = 0; i < NW / 4; i++) {
            const uint4 v = S == Q_GLOBAL ? __ldg((const uint4 *)p + i) : ((const uint4 *)p)[i];
            w[4 * i] = v.x;
            w[4 * i + 1] = v.y;
            w[4 * i + 2] = v.z;
            w[4 * i + 3] = v.w;
        }
    } else if constexpr (A >= 8 && NW % 2 == 0) {
#pragma unroll
        for (int i = 0; i < NW / 2; i++) {
            const uint2 v = S == Q_GLOBAL ? __ldg((const uint2 *)p + i) : ((const uint2 *)p)[i];
            w[2 * i] = v.x;
            w[2 * i + 1] = v.y;
        }
    } else if constexpr (WORDS && S == Q_SHARED && A == 2) {
        const uint32_t *a = (const uint32_t *)((uintptr_t)p & ~(uintptr_t)3);
        const uint32_t sh = ((uint32_t)(uintptr_t)p & 2u) * 8u;
        uint32_t v[NW + 1];
#pragma unroll
        for (int i = 0; i <= NW; i++) v[i] = a[i];
#pragma unroll
        for (int i = 0; i < NW; i++) w[i] = __funnelshift_r(v[i], v[i + 1], sh);
    } else {
#pragma unroll
        for (int i = 0; i < NW; i++) w[i] = q_ld32<S, A>(p + 4 * i);
    }
}

// Byte j of words w (little endian).
__device__ __forceinline__ int q_byte(const uint32_t *w, int j) { return (int)((w[j >> 2] >> (8 * (j & 3))) & 0xffu); }

__device__ __forceinline__ float q_half(uint32_t bits) {
    return st_gpu_half_as_float((unsigned short)(bits & 0xffffu));
}

// Integers as floats without I2F (a conversion runs at a quarter of the FMA rate on sm_90).
// The float 1.5 * 2^23 + u, for an integer 0 <= u < 2^22, has u in its low mantissa bits:
// its bits are Q_BIAS | u, and subtracting 1.5 * 2^23 (+ an offset) is exact.
#define Q_BIAS 0x4B400000u
#define Q_BIAS_F 12582912.0f
__device__ __forceinline__ float q_i2f(int q) { return __fsub_rn(__int_as_float((int)Q_BIAS + q), Q_BIAS_F); }

// Q_BIAS | byte j of w (a byte of every value in w), by one PRMT.
__device__ __forceinline__ uint32_t q_bias_byte(uint32_t w, int j) {
    return __byte_perm(w, Q_BIAS, 0x7650u | (uint32_t)j);
}

// The CPU's roundings, uncontracted: a * b, a * b - c.
__device__ __forceinline__ float q_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float q_mul_sub(float a, float b, float c) { return __fsub_rn(__fmul_rn(a, b), c); }

// ---- the block formats -----------------------------------------------------------------
//
// qfmt<T>: QK values per block of BYTES bytes, A = the alignment every block has (the
// largest power of two dividing BYTES, at most 16), CHUNK values per chunk; raw = the
// bytes one chunk needs; load(blk, ci) reads them for chunk ci of the block at blk;
// split(r, ci, &d, &m, qb) gives the chunk's scale d, its min m (MIN formats; else m is not
// written) and its integers as qb[j] = Q_BIAS | u[j], where the integer is u[j] - OFF: value
// j is d * (u[j] - OFF) - m, each step rounded as the CPU rounds it (q_dequant). A "+ min"
// format gives m = -min: the same bits.

template <st_type T> struct qfmt;

// q8_0 34 B: d f16 @0, qs int8[32] @2. value i = d * qs[i].
template <> struct qfmt<ST_TYPE_Q8_0> {
    static constexpr int QK = 32, BYTES = 34, A = 2, CHUNK = 8, OFF = 128;
    static constexpr bool MIN = false;
    struct raw { uint32_t d, q[2]; };
    template <q_src S = Q_GLOBAL> static __device__ __forceinline__ raw load(const uint8_t *b, int ci) {
        raw r;
        r.d = q_ld16<S>(b);
        q_ldw<S, 2, 2>(b + 2 + 8 * ci, r.q);
        return r;
    }
    static __device__ __forceinline__ void split(const raw &r, int ci, float *d, float *m, uint32_t *qb) {
        *d = q_half(r.d);
#pragma unroll
        for (int j = 0; j < 8; j++) qb[j] = q_bias_byte(r.q[j >> 2] ^ 0x80808080u, j & 3); /* int8 + 128 */
    }
};

// q4_0 18 B: d f16 @0, qs u8[16] @2. value i = d * (nib(i) - 8); byte j holds values j
// (low nibble) and j + 16 (high): chunk ci reads bytes 8 (ci % 2) .. + 8, nibble ci / 2.
template <> struct qfmt<ST_TYPE_Q4_0> {
    static constexpr int QK = 32, BYTES = 18, A = 2, CHUNK = 8, OFF = 8;
    static constexpr bool MIN = false;
    struct raw { uint32_t d, q[2]; };
    template <q_src S = Q_GLOBAL> static __device__ __forceinline__ raw load(const uint8_t *b, int ci) {
        raw r;
        r.d = q_ld16<S>(b);
        q_ldw<S, 2, 2>(b + 2 + 8 * (ci & 1), r.q);
        return r;
    }
    static __device__ __forceinline__ void split(const raw &r, int ci, float *d, float *m, uint32_t *qb) {
        *d = q_half(r.d);
        const int shift = 4 * (ci >> 1);
#pragma unroll
        for (int j = 0; j < 8; j++) qb[j] = q_bias_byte((r.q[j >> 2] >> shift) & 0x0F0F0F0Fu, j & 3);
    }
};

// q4_1 20 B: d f16 @0, m f16 @2, qs @4. value i = d * nib(i) + m.
template <> struct qfmt<ST_TYPE_Q4_1> {
    static constexpr int QK = 32, BYTES = 20, A = 4, CHUNK = 8, OFF = 0;
    static constexpr bool MIN = true;
    struct raw { uint32_t dm, q[2]; };
    template <q_src S = Q_GLOBAL> static __device__ __forceinline__ raw load(const uint8_t *b, int ci) {
        raw r;
        r.dm = q_ld32<S, 4>(b);
        q_ldw<S, 4, 2>(b + 4 + 8 * (ci & 1), r.q);
        return r;
    }
    static __device__ __forceinline__ void split(const raw &r, int ci, float *d, float *m, uint32_t *qb) {
        *d = q_half(r.dm);
        *m = -q_half(r.dm >> 16); /* value = d q + min */
        const int shift = 4 * (ci >> 1);
#pragma unroll
        for (int j = 0; j < 8; j++) qb[j] = q_bias_byte((r.q[j >> 2] >> shift) & 0x0F0F0F0Fu, j & 3);
    }
};

// q5_0 22 B: d f16 @0, qh u32 @2, qs @6. value i = d * ((nib(i) | bit i of qh << 4) - 16).
template <> struct qfmt<ST_TYPE_Q5_0> {
    static constexpr int QK = 32, BYTES = 22, A = 2, CHUNK = 8, OFF = 16;
    static constexpr bool MIN = false;
    struct raw { uint32_t d, qh, q[2]; };
    template <q_src S = Q_GLOBAL> static __device__ __forceinline__ raw load(const uint8_t *b, int ci) {
        raw r;
        r.d = q_ld16<S>(b);
        r.qh = q_ld32<S, 2>(b + 2);
        q_ldw<S, 2, 2>(b + 6 + 8 * (ci & 1), r.q);
        return r;
    }
    static __device__ __forceinline__ void split(const raw &r, int ci, float *d, float *m, uint32_t *qb) {
        *d = q_half(r.d);
        const int shift = 4 * (ci >> 1);
        const uint32_t hi = r.qh >> (8 * ci); /* bits of values 8 ci .. 8 ci + 7 */
#pragma unroll
        for (int j = 0; j < 8; j++)
            qb[j] = q_bias_byte((r.q[j >> 2] >> shift) & 0x0F0F0F0Fu, j & 3) | (((hi >> j) & 1u) << 4);
    }
};

// q5_1 24 B: d f16 @0, m f16 @2, qh u32 @4, qs @8. value i = d * q5(i) + m.
template <> struct qfmt<ST_TYPE_Q5_1> {
    static constexpr int QK = 32, BYTES = 24, A = 8, CHUNK = 8, OFF = 0;
    static constexpr bool MIN = true;
    struct raw { uint32_t dm, qh, q[2]; };
    template <q_src S = Q_GLOBAL> static __device__ __forceinline__ raw load(const uint8_t *b, int ci) {
        raw r;
        uint32_t head[2];
        q_ldw<S, 8, 2>(b, head);
        r.dm = head[0];
        r.qh = head[1];
        q_ldw<S, 8, 2>(b + 8 + 8 * (ci & 1), r.q);
        return r;
    }
    static __device__ __forceinline__ void split(const raw &r, int ci, float *d, float *m, uint32_t *qb) {
        *d = q_half(r.dm);
        *m = -q_half(r.dm >> 16); /* value = d q + min */
        const int shift = 4 * (ci >> 1);
        const uint32_t hi = r.qh >> (8 * ci);
#pragma unroll
        for (int j = 0; j < 8; j++)
            qb[j] = q_bias_byte((r.q[j >> 2] >> shift) & 0x0F0F0F0Fu, j & 3) | (((hi >> j) & 1u) << 4);
    }
};

// q2_K 84 B: scales u8[16] @0, qs u8[64] @16, d f16 @80, dmin f16 @82. Chunk ci = sub-block
// s: scale = scales[s] & 15, min = scales[s] >> 4; its 16 quants are bits 2 ((s % 8) / 2)
// of qs[32 (s / 8) + 16 (s % 2) ..+16]; value = (d * scale) * q - (dmin * min).
template <> struct qfmt<ST_TYPE_Q2_K> {
    static constexpr int QK = 256, BYTES = 84, A = 4, CHUNK = 16, OFF = 0;
    static constexpr bool MIN = true;
    struct raw { uint32_t dd, sc, q[4]; };
    template <q_src S = Q_GLOBAL> static __device__ __forceinline__ raw load(const uint8_t *b, int ci) {
        raw r;
        r.dd = q_ld32<S, 4>(b + 80);
        r.sc = q_ld32<S, 4>(b + (ci & ~3));
        q_ldw<S, 4, 4>(b + 16 + 32 * (ci >> 3) + 16 * (ci & 1), r.q);
        return r;
    }
    static __device__ __forceinline__ void split(const raw &r, int ci, float *d, float *m, uint32_t *qb) {
        const int sc = (int)((r.sc >> (8 * (ci & 3))) & 0xffu);
        *d = q_mul(q_half(r.dd), q_i2f(sc & 15));
        *m = q_mul(q_half(r.dd >> 16), q_i2f(sc >> 4));
        const int shift = 2 * ((ci & 7) >> 1);
#pragma unroll
        for (int j = 0; j < 16; j++) qb[j] = q_bias_byte((r.q[j >> 2] >> shift) & 0x03030303u, j & 3);
    }
};

// q3_K 110 B: hmask u8[32] @0, qs u8[64] @32, scales u8[12] @96, d f16 @108. Chunk ci =
// sub-block s: low 2 bits as q2_K, minus 4 unless bit 4 (s / 8) + (s % 8) / 2 of
// hmask[16 (s % 2) + l] is set; value = (d * (scale6(s) - 32)) * q.
template <> struct qfmt<ST_TYPE_Q3_K> {
    static constexpr int QK = 256, BYTES = 110, A = 2, CHUNK = 16, OFF = 4;
    static constexpr bool MIN = false;
    struct raw { uint32_t d, sc[3], hm[4], q[4]; };
    template <q_src S = Q_GLOBAL> static __device__ __forceinline__ raw load(const uint8_t *b, int ci) {
        raw r;
        r.d = q_ld16<S>(b + 108);
        q_ldw<S, 2, 3>(b + 96, r.sc);
        q_ldw<S, 2, 4>(b + 16 * (ci & 1), r.hm);
        q_ldw<S, 2, 4>(b + 32 + 32 * (ci >> 3) + 16 * (ci & 1), r.q);
        return r;
    }
    static __device__ __forceinline__ void split(const raw &r, int ci, float *d, float *m, uint32_t *qb) {
        /* the 6-bit scale (src/quant/quant_kquants.c, q3k_scale) */
        const uint32_t lw = (ci & 7) < 4 ? r.sc[0] : r.sc[1]; /* byte ci % 8 (no runtime index) */
        const int lb = (int)((lw >> (8 * (ci & 3))) & 0xffu);
        const int low = ci < 8 ? lb & 15 : lb >> 4;
        const int high = (int)((r.sc[2] >> (8 * (ci & 3) + 2 * (ci >> 2))) & 3u);
        *d = q_mul(q_half(r.d), q_i2f((low | (high << 4)) - 32));
        const int shift = 2 * ((ci & 7) >> 1);
        const int hbit = 1 << (4 * (ci >> 3) + ((ci & 7) >> 1));
#pragma unroll
        for (int j = 0; j < 16; j++) /* the 2 low bits, + 4 where the mask bit is set, - 4 */
            qb[j] = q_bias_byte((r.q[j >> 2] >> shift) & 0x03030303u, j & 3) | ((q_byte(r.hm, j) & hbit) ? 4u : 0u);
    }
};

// The 6-bit scale and min of sub-block s (0..7) of q4_K/q5_K, from the block's first 16
// bytes as words (d, dmin | scales[0..3] | scales[4..7] | scales[8..11]); the packing of
// src/quant/quant_kquants.c, k4_scale_min, with shifts instead of a runtime byte index
// (which would put the words in local memory).
__device__ __forceinline__ void q_k4_scale_min(const uint32_t *head, int s, float *d1, float *m1) {
    int sc, mn;
    if (s < 4) { /* scales[s] & 63, scales[s + 4] & 63 */
        sc = (int)((head[1] >> (8 * s)) & 63u);
        mn = (int)((head[2] >> (8 * s)) & 63u);
    } else { /* low 4 bits from scales[s + 4], high 2 from the top of scales[s - 4] / scales[s] */
        const int t = 8 * (s - 4);
        const uint32_t lo = head[3] >> t;
        sc = (int)((lo & 15u) | (((head[1] >> t) >> 6 & 3u) << 4));
        mn = (int)(((lo >> 4) & 15u) | (((head[2] >> t) >> 6 & 3u) << 4));
    }
    *d1 = q_mul(q_half(head[0]), q_i2f(sc));
    *m1 = q_mul(q_half(head[0] >> 16), q_i2f(mn));
}

// q4_K 144 B: d f16 @0, dmin f16 @2, scales @4, qs u8[128] @16. Chunk ci: sub-block s =
// ci / 2, quants = nibble s % 2 of qs[32 (s / 2) + 16 (ci % 2) ..+16]; value = d1 * q - m1.
template <> struct qfmt<ST_TYPE_Q4_K> {
    static constexpr int QK = 256, BYTES = 144, A = 16, CHUNK = 16, OFF = 0;
    static constexpr bool MIN = true;
    struct raw { uint32_t head[4], q[4]; };
    template <q_src S = Q_GLOBAL> static __device__ __forceinline__ raw load(const uint8_t *b, int ci) {
        raw r;
        q_ldw<S, 16, 4>(b, r.head);
        q_ldw<S, 16, 4>(b + 16 + 32 * (ci >> 2) + 16 * (ci & 1), r.q);
        return r;
    }
    static __device__ __forceinline__ void split(const raw &r, int ci, float *d, float *m, uint32_t *qb) {
        const int s = ci >> 1;
        q_k4_scale_min(r.head, s, d, m);
        const int shift = 4 * (s & 1);
#pragma unroll
        for (int j = 0; j < 16; j++) qb[j] = q_bias_byte((r.q[j >> 2] >> shift) & 0x0F0F0F0Fu, j & 3);
    }
};

// q5_K 176 B: as q4_K with qh u8[32] @16 (bit s of qh[16 (ci % 2) + j] is the fifth bit)
// and qs @48.
template <> struct qfmt<ST_TYPE_Q5_K> {
    static constexpr int QK = 256, BYTES = 176, A = 16, CHUNK = 16, OFF = 0;
    static constexpr bool MIN = true;
    struct raw { uint32_t head[4], qh[4], q[4]; };
    template <q_src S = Q_GLOBAL> static __device__ __forceinline__ raw load(const uint8_t *b, int ci) {
        raw r;
        q_ldw<S, 16, 4>(b, r.head);
        q_ldw<S, 16, 4>(b + 16 + 16 * (ci & 1), r.qh);
        q_ldw<S, 16, 4>(b + 48 + 32 * (ci >> 2) + 16 * (ci & 1), r.q);
        return r;
    }
    static __device__ __forceinline__ void split(const raw &r, int ci, float *d, float *m, uint32_t *qb) {
        const int s = ci >> 1;
        q_k4_scale_min(r.head, s, d, m);
        const int shift = 4 * (s & 1);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const uint32_t hi = ((r.qh[j >> 2] >> s) & 0x01010101u) << 4; /* the fifth bits */
            qb[j] = q_bias_byte(((r.q[j >> 2] >> shift) & 0x0F0F0F0Fu) | hi, j & 3);
        }
    }
};

// q6_K 210 B: ql u8[128] @0, qh u8[64] @128, scales int8[16] @192, d f16 @208. Chunk ci
// (values 16 ci ..): h = ci / 8, t = (ci % 8) / 2, l0 = 16 (ci % 2); quant j = (nibble t / 2
// of ql[64 h + 32 (t % 2) + l0 + j]) | ((qh[32 h + l0 + j] >> 2 t) & 3) << 4, minus 32;
// value = (d * scales[ci]) * q.
template <> struct qfmt<ST_TYPE_Q6_K> {
    static constexpr int QK = 256, BYTES = 210, A = 2, CHUNK = 16, OFF = 32;
    static constexpr bool MIN = false;
    struct raw { uint32_t d, sc, ql[4], qh[4]; };
    template <q_src S = Q_GLOBAL> static __device__ __forceinline__ raw load(const uint8_t *b, int ci) {
        raw r;
        const int h = ci >> 3, t = (ci & 7) >> 1, l0 = 16 * (ci & 1);
        r.d = q_ld16<S>(b + 208);
        r.sc = q_ld16<S>(b + 192 + (ci & ~1));
        q_ldw<S, 2, 4, true>(b + 64 * h + 32 * (t & 1) + l0, r.ql);
        q_ldw<S, 2, 4, true>(b + 128 + 32 * h + l0, r.qh);
        return r;
    }
    static __device__ __forceinline__ void split(const raw &r, int ci, float *d, float *m, uint32_t *qb) {
        const int t = (ci & 7) >> 1;
        *d = q_mul(q_half(r.d), q_i2f((int8_t)((r.sc >> (8 * (ci & 1))) & 0xffu)));
        const int lo_shift = 4 * (t >> 1), hi_shift = 2 * t;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const uint32_t lo = (r.ql[j >> 2] >> lo_shift) & 0x0F0F0F0Fu, hi = (r.qh[j >> 2] >> hi_shift) & 0x03030303u;
            const uint32_t u = lo | (hi << 4);
            qb[j] = q_bias_byte(u, j & 3);
        }
    }
};

// q8_K 292 B: d f32 @0, qs int8[256] @4, bsums (unused). value i = d * qs[i].
template <> struct qfmt<ST_TYPE_Q8_K> {
    static constexpr int QK = 256, BYTES = 292, A = 4, CHUNK = 16, OFF = 128;
    static constexpr bool MIN = false;
    struct raw { uint32_t d, q[4]; };
    template <q_src S = Q_GLOBAL> static __device__ __forceinline__ raw load(const uint8_t *b, int ci) {
        raw r;
        r.d = q_ld32<S, 4>(b);
        q_ldw<S, 4, 4>(b + 4 + 16 * ci, r.q);
        return r;
    }
    static __device__ __forceinline__ void split(const raw &r, int ci, float *d, float *m, uint32_t *qb) {
        *d = __uint_as_float(r.d);
#pragma unroll
        for (int j = 0; j < 16; j++) qb[j] = q_bias_byte(r.q[j >> 2] ^ 0x80808080u, j & 3); /* int8 + 128 */
    }
};

// The integer u[j] - OFF of a split, as a float (exact).
template <st_type T> __device__ __forceinline__ float q_int(uint32_t qb) {
    return __fsub_rn(__uint_as_float(qb), Q_BIAS_F + (float)qfmt<T>::OFF);
}

// The chunk's CHUNK values as the CPU computes them (get_rows, the prefill's F16 slabs).
template <st_type T>
__device__ __forceinline__ void q_dequant(const typename qfmt<T>::raw &r, int ci, float *out) {
    using F = qfmt<T>;
    float d, m = 0.0f;
    uint32_t qb[F::CHUNK];
    F::split(r, ci, &d, &m, qb);
#pragma unroll
    for (int j = 0; j < F::CHUNK; j++) out[j] = F::MIN ? q_mul_sub(d, q_int<T>(qb[j]), m) : q_mul(d, q_int<T>(qb[j]));
}

// Chunk c of a row: its block and its index in the block (CPB = QK / CHUNK chunks per
// block, a power of two); it holds values [c * CHUNK, (c + 1) * CHUNK).
template <st_type T> __device__ __forceinline__ const uint8_t *q_chunk_block(const uint8_t *row, int64_t c) {
    constexpr int CPB = qfmt<T>::QK / qfmt<T>::CHUNK;
    return row + (c / CPB) * qfmt<T>::BYTES;
}
template <st_type T> __device__ __forceinline__ int q_chunk_index(int64_t c) {
    constexpr int CPB = qfmt<T>::QK / qfmt<T>::CHUNK;
    return (int)(c % CPB);
}

// ---- the matrix-vector product ----------------------------------------------------------

// Where a chunk's x comes from: q_x_global, x in global memory at p (16-byte loads where XV:
// x 16-byte aligned; a template argument, so that the other form's loads do not take issue
// slots predicated off); q_x_staged, x staged in shared memory by q_stage_x (s: the
// chunk's first slot). piece(i): x[4 i .. 4 i + 4) of the chunk.
template <bool XV> struct q_x_global {
    const float *p;
    __device__ __forceinline__ float4 piece(int i) const {
        if constexpr (XV) return __ldg((const float4 *)p + i);
        else return make_float4(__ldg(p + 4 * i), __ldg(p + 4 * i + 1), __ldg(p + 4 * i + 2), __ldg(p + 4 * i + 3));
    }
};

// Staged x: chunk c's P = CH / 4 16-byte pieces at slots (P + 1) c .. (P + 1) c + P - 1 of
// a float4 array (a 16-byte gap after each chunk). A lane reads its own chunk's pieces, so a
// quarter warp (8 lanes: chunks c .. c + 7) reads piece i of 8 chunks at once. Packed, with
// 16 P bytes between lanes, those fall in 4 (P = 4) or 2 (P = 2) of the 8 16-byte bank
// groups; with the gap, (P + 1) c + i takes all 8 (P + 1 is odd): one wavefront, where the
// global loads of the same pattern touch 16 cache lines. The chunk's slots are at fixed
// offsets from its first, and a lane's chunks at fixed distances from one another, so the
// addresses cost nothing a piece.
template <int CH> struct q_x_staged {
    static constexpr int P = CH / 4;
    const float4 *s; // the chunk's first piece: first(x_s, c)
    __device__ __forceinline__ float4 piece(int i) const { return s[i]; }
    // chunk c's first piece in the staged array x_s (q_stage_x writes there, piece reads)
    template <typename V, typename I> static __device__ __forceinline__ V *first(V *x_s, I c) {
        return x_s + (P + 1) * c;
    }
};

// acc + the chunk's values . x[0..CH) from its split (d, m, qb): the integers' products
// with x summed first, an FMA a value, then scaled once: acc + d sq - m sx,
// with sx the sum of x (MIN formats). Three instructions a value (PRMT, FADD, FFMA) where
// the dequantized values' dot took five or more; it rounds otherwise than that dot, inside
// a product's tolerance. x: a q_x_global or a q_x_staged (the same values, the same bits).
template <st_type T, typename X>
__device__ __forceinline__ float q_dot_chunk(float d, float m, const uint32_t *qb, const X &x, float acc) {
    constexpr int CH = qfmt<T>::CHUNK;
    // four sums, one a component of x's float4s (values j, j + 4, ...), added pairwise at
    // the end: chains of CH / 4 dependent FMAs where one sum made a chain of CH (ncu,
    // thirteenth session: the one-column kernel waits on dependencies more than it issues)
    float sq[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sx[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < CH; i += 4) {
        const float4 v = x.piece(i / 4);
        sq[0] = fmaf(q_int<T>(qb[i]), v.x, sq[0]);
        sq[1] = fmaf(q_int<T>(qb[i + 1]), v.y, sq[1]);
        sq[2] = fmaf(q_int<T>(qb[i + 2]), v.z, sq[2]);
        sq[3] = fmaf(q_int<T>(qb[i + 3]), v.w, sq[3]);
        if (qfmt<T>::MIN) {
            sx[0] = __fadd_rn(sx[0], v.x);
            sx[1] = __fadd_rn(sx[1], v.y);
            sx[2] = __fadd_rn(sx[2], v.z);
            sx[3] = __fadd_rn(sx[3], v.w);
        }
    }
    acc = fmaf(d, __fadd_rn(__fadd_rn(sq[0], sq[1]), __fadd_rn(sq[2], sq[3])), acc);
    return qfmt<T>::MIN ? fmaf(-m, __fadd_rn(__fadd_rn(sx[0], sx[1]), __fadd_rn(sx[2], sx[3])), acc) : acc;
}

// dot(row, x) in every lane of the warp (mul_mat_id's one column): n_chunks chunks of the
// row (K / CHUNK). x_vec: x is 16-byte aligned (CHUNK is a multiple of 4). Lane l sums its
// chunks l, l + 32, ... in order, then a shuffle tree: the order depends on K alone.
template <st_type T>
__device__ __forceinline__ float q_gemv_row(const uint8_t *__restrict__ row, int64_t n_chunks, const float *x,
                                            bool x_vec) {
    using F = qfmt<T>;
    constexpr int W = ST_GPU_WARP_SIZE, CH = F::CHUNK;
    const int lane = threadIdx.x % W;
    float acc = 0.0f;
    for (int64_t c0 = lane; c0 < n_chunks; c0 += (int64_t)W * QMM_UNROLL) {
        typename F::raw r[QMM_UNROLL];
#pragma unroll
        for (int u = 0; u < QMM_UNROLL; u++) {
            const int64_t ch = c0 + (int64_t)u * W;
            if (ch < n_chunks) r[u] = F::load(q_chunk_block<T>(row, ch), q_chunk_index<T>(ch));
        }
#pragma unroll
        for (int u = 0; u < QMM_UNROLL; u++) {
            const int64_t ch = c0 + (int64_t)u * W;
            if (ch >= n_chunks) break;
            float d, m = 0.0f;
            uint32_t qb[CH];
            F::split(r[u], q_chunk_index<T>(ch), &d, &m, qb);
            acc = x_vec ? q_dot_chunk<T>(d, m, qb, q_x_global<true>{x + ch * CH}, acc)
                        : q_dot_chunk<T>(d, m, qb, q_x_global<false>{x + ch * CH}, acc);
        }
    }
    return cuda_warp_sum(acc);
}

// ---- the matrix-vector product, staged -----------------------------------------------------
//
// q_gemv: every warp of the grid walks groups of `rows` consecutive rows (group g, then g +
// the grid's warps, ...; rows = QMM_GROUP when every warp gets a group, else 1), each row
// as segments of its chunks: a segment is q_seg::CHUNKS = 32 Q_SEG_ROUNDS chunks (lane l
// takes chunks l, l + 32, ... of it, as in q_gemv_row's loop), so that a lane sums its
// chunks in the order q_gemv_row does and the bits are the same, whatever the segment's
// length (Q_SEG_ROUNDS and QMM_STAGES are build-time knobs for measuring). A segment's
// bytes (whole blocks) are copied, as the 16-byte-aligned window around them, into one of
// QMM_STAGES shared-memory stages of the warp by cp.async; QMM_STAGES - 1 segments are in
// flight while the warp dequantizes one from shared memory. So a warp reads a row in
// 16-byte loads (the blocks of most types are only 2-byte aligned) and keeps several
// segments in flight (a row of a 640-wide head is 680 bytes: one segment). The window
// overreads at most 15 bytes each side; weights live in buffers the backend allocates,
// 256-byte aligned and sized in 256-byte multiples, so it never leaves the allocation.
//
// The group's results leave together: lanes 0..rows-1 hold rows n0.. of every column, and
// lane 0 writes them, in one 16-byte store for a group of 4 where y's row is aligned (y
// may be page-locked host memory, the decode step's logits: every store a PCIe write).
#define QMM_GROUP 4
#ifndef Q_SEG_ROUNDS
#define Q_SEG_ROUNDS QMM_UNROLL
#endif
#ifndef QMM_STAGES
#define QMM_STAGES 3
#endif
static_assert(QMM_GROUP == 4, "a group leaves as one float4");

template <st_type T> struct q_seg {
    using F = qfmt<T>;
    static constexpr int CPB = F::QK / F::CHUNK;                      // chunks a block
    static constexpr int CHUNKS = ST_GPU_WARP_SIZE * Q_SEG_ROUNDS;    // chunks a segment
    static constexpr int BLOCKS = CHUNKS / CPB;                       // blocks a segment
    static constexpr int WINDOW = (BLOCKS * F::BYTES / 16 + 2) * 16;  // bytes a stage holds
    static_assert(CHUNKS % CPB == 0, "a segment is whole blocks");
};

template <st_type T> static constexpr __host__ __device__ size_t q_gemv_smem() {
    return (size_t)QMM_WARPS * QMM_STAGES * q_seg<T>::WINDOW;
}

// The one-column kernels stage x in shared memory after the stages (q_stage_x) when it
// fits in Q_XS_MAX bytes (K = 2,048 for every type): the bytes, or 0 (x read from global
// memory). K / CHUNK chunks of CHUNK / 4 + 1 pieces (q_x_staged).
#ifndef Q_XS_MAX
#define Q_XS_MAX 12288
#endif
template <st_type T> static size_t q_xs_bytes(int64_t K) {
    static_assert(q_gemv_smem<T>() + Q_XS_MAX <= 48 * 1024,
                  "the one-column kernel's stages and staged x exceed the 48 KiB of dynamic shared memory a "
                  "kernel gets without opting in: lower Q_XS_MAX, Q_SEG_ROUNDS or QMM_STAGES");
    constexpr int CH = qfmt<T>::CHUNK;
    const size_t bytes = (size_t)(K / CH) * (CH / 4 + 1) * 16;
    return bytes <= Q_XS_MAX ? bytes : 0;
}
__device__ __forceinline__ float4 *q_xs_at(uint4 *smem, size_t stage_bytes) {
    return (float4 *)((uint8_t *)smem + stage_bytes);
}

// x [K] into x_s at q_x_staged's places, by the whole block: every thread of the block must
// call it (it ends with a barrier). K is a multiple of CHUNK.
template <int CH, bool XV> __device__ __forceinline__ void q_stage_x(float4 *x_s, const float *x, int64_t K) {
    constexpr int P = CH / 4;
    for (int p = threadIdx.x; p < (int)(K / 4); p += blockDim.x)
        q_x_staged<CH>::first(x_s, p / P)[p % P] = q_x_global<XV>{x}.piece(p);
    __syncthreads();
}

// 16 bytes global -> shared without waiting (sm_80+); a plain copy elsewhere. dst_s is
// dst's shared-space address (q_shared_addr), formed once a window rather than once a copy.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(__HIP_PLATFORM_AMD__)
#define Q_CP_ASYNC 1
#endif
__device__ __forceinline__ uint32_t q_shared_addr(const void *p) {
#ifdef Q_CP_ASYNC
    return (uint32_t)__cvta_generic_to_shared(p);
#else
    return 0;
#endif
}
__device__ __forceinline__ void q_copy16(void *dst, uint32_t dst_s, const void *src) {
#ifdef Q_CP_ASYNC
    (void)dst;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst_s), "l"(src));
#else
    (void)dst_s;
    *(uint4 *)dst = __ldg((const uint4 *)src);
#endif
}
__device__ __forceinline__ void q_copy_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(__HIP_PLATFORM_AMD__)
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Every group but the latest N committed has landed (for this lane).
template <int N> __device__ __forceinline__ void q_copy_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(__HIP_PLATFORM_AMD__)
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// Segment s of a row whose bytes start at row: whole blocks, s BLOCKS blocks in.
template <st_type T> __device__ __forceinline__ const uint8_t *q_seg_bytes(const uint8_t *row, int64_t s) {
    return row + s * q_seg<T>::BLOCKS * qfmt<T>::BYTES;
}

// Copies the 16-byte-aligned window around a segment (its n_bytes bytes at p) into stage;
// the segment then starts at stage + p % 16. The window's 16-byte pieces are at most
// WINDOW / 16, so a lane's copies are a fixed, unrolled count of predicated ones (a loop
// to n_vec cost a row ~60 instructions of control: bench/cuda-decode.md, twelfth session).
template <st_type T> __device__ __forceinline__ void q_seg_copy(uint8_t *stage, const uint8_t *p, int n_bytes) {
    constexpr int W = ST_GPU_WARP_SIZE, MAX_VEC = q_seg<T>::WINDOW / 16;
    const uintptr_t lo = (uintptr_t)p & ~(uintptr_t)15;
    const int n_vec = (int)(((uintptr_t)p % 16 + (uint32_t)n_bytes + 15) / 16);
    const int lane = threadIdx.x % W;
    const uint32_t stage_s = q_shared_addr(stage);
#pragma unroll
    for (int i = 0; i < (MAX_VEC + W - 1) / W; i++) {
        const int v = lane + W * i;
        if (v < n_vec) q_copy16(stage + 16 * v, stage_s + 16 * v, (const uint8_t *)lo + 16 * v);
    }
}

// acc[c] += lane's chunks of a segment (staged at seg; its first value is x's k_seg, and it
// has seg_chunks chunks) against xs[c], in q_gemv_row's order. XS (one column): x read from
// its staged copy x_s (q_stage_x) instead of xs[0].
template <st_type T, int NC, bool XV, bool XS>
__device__ __forceinline__ void q_seg_dot(const uint8_t *seg, int64_t k_seg, int seg_chunks, const float *const *xs,
                                          int n_cols, float acc[NC], const float4 *x_s) {
    static_assert(!XS || NC == 1, "one column is staged");
    using F = qfmt<T>;
    using G = q_seg<T>;
    constexpr int W = ST_GPU_WARP_SIZE, CH = F::CHUNK;
    static_assert(W % G::CPB == 0, "a lane's chunks have one index in their blocks");
    const int lane = threadIdx.x % W;
    // chunk lane + u W is chunk ci of block lane / CPB + u W / CPB: one base, fixed offsets
    const int ci = lane % G::CPB;
    const uint8_t *blk = seg + (lane / G::CPB) * F::BYTES;
#pragma unroll
    for (int u = 0; u < Q_SEG_ROUNDS; u++) {
        const int cl = lane + u * W; // chunk in the segment
        if (cl >= seg_chunks) break;
        float d, m = 0.0f;
        uint32_t qb[CH];
        F::split(F::template load<Q_SHARED>(blk + u * (W / G::CPB) * F::BYTES, ci), ci, &d, &m, qb);
#pragma unroll
        for (int c = 0; c < NC; c++) {
            if (c >= n_cols) break;
            if constexpr (XS)
                acc[c] = q_dot_chunk<T>(d, m, qb, q_x_staged<CH>{q_x_staged<CH>::first(x_s, k_seg / CH + cl)}, acc[c]);
            else acc[c] = q_dot_chunk<T>(d, m, qb, q_x_global<XV>{xs[c] + k_seg + cl * CH}, acc[c]);
        }
    }
}

// A warp's place in its items: group g (absolute), row r of it, segment s of the row, and
// the stage the item is copied to.
struct q_cursor {
    int64_t g;
    int r;
    int s;
    int stage;
    __device__ __forceinline__ void next(int n_seg, int rows, int64_t n_warps) {
        stage = stage + 1 == QMM_STAGES ? 0 : stage + 1;
        if (++s < n_seg) return;
        s = 0;
        if (++r < rows) return;
        r = 0;
        g += n_warps;
    }
};

// Blocks an SM the one-column kernel is compiled for.
template <st_type T> static constexpr int q_gemv_min_blocks() {
    return qfmt<T>::QK == 256 ? Q_GEMV_MIN_BLOCKS_K : Q_GEMV_MIN_BLOCKS;
}

// The walk both matrix-vector kernels share (see the section's head). This warp's items,
// groups gw, gw + n_warps, ... below src.n_groups, of src.rows rows each (at most
// QMM_GROUP), every row in segments: src.row(g, r) is row r of group g, or NULL past the
// rows; x is NC columns xs (n_cols of them). At the end of each group, sink(g, v) gets the
// group's results: v[c][r] for column c and row r (rows past the rows: 0). XV: x_vec. XS
// (one column): the block stages x into x_s (q_xs_bytes) while its first copies fly, so
// every warp of the block must walk, with items or without.
template <st_type T, int NC, bool XV, bool XS, typename Src, typename Sink>
__device__ __forceinline__ void q_walk_x(uint8_t *stages, float4 *x_s, const Src &src, int64_t K,
                                         const float *const *xs, int n_cols, const Sink &sink) {
    using G = q_seg<T>;
    const int warp = threadIdx.x / ST_GPU_WARP_SIZE, lane = threadIdx.x % ST_GPU_WARP_SIZE;
    const int rows = src.rows;
    const int64_t n_blocks = K / qfmt<T>::QK, n_chunks = K / qfmt<T>::CHUNK;
    const int n_seg = (int)((n_chunks + G::CHUNKS - 1) / G::CHUNKS);
    const int64_t gw = (int64_t)blockIdx.x * QMM_WARPS + warp, n_warps = (int64_t)gridDim.x * QMM_WARPS;
    // the bytes of a row's segments: all but the last are BLOCKS whole blocks
    const int seg_bytes = G::BLOCKS * qfmt<T>::BYTES;
    const int last_bytes = (int)(n_blocks - (int64_t)(n_seg - 1) * G::BLOCKS) * qfmt<T>::BYTES;
    // `in` is the next item to copy, `at` the one to reduce (counters, not divisions: a
    // 64-bit division is a long software routine). seg[i]: the bytes of the item i items
    // after `at`, as issued (NULL past the rows), so that `at` does not form its row again.
    q_cursor in = {gw, 0, 0, 0}, at = in;
    const uint8_t *seg[QMM_STAGES];
    auto issue = [&](const q_cursor &c) { // (an empty group past the end keeps cp.async's count)
        const uint8_t *row = c.g < src.n_groups ? src.row(c.g, c.r) : NULL;
        const uint8_t *p = row ? q_seg_bytes<T>(row, c.s) : NULL;
        if (p) q_seg_copy<T>(stages + c.stage * G::WINDOW, p, c.s == n_seg - 1 ? last_bytes : seg_bytes);
        q_copy_commit();
        return p;
    };
#pragma unroll
    for (int i = 0; i < QMM_STAGES - 1; i++) {
        seg[i] = issue(in);
        in.next(n_seg, rows, n_warps);
    }
    if constexpr (XS) q_stage_x<qfmt<T>::CHUNK, XV>(x_s, xs[0], K);
    float acc[NC], mine[NC]; // mine: lane r < rows keeps row r of the group
#pragma unroll
    for (int c = 0; c < NC; c++) mine[c] = 0.0f;
    for (; at.g < src.n_groups; at.next(n_seg, rows, n_warps)) {
        seg[QMM_STAGES - 1] = issue(in);
        in.next(n_seg, rows, n_warps);
        q_copy_wait<QMM_STAGES - 1>();
        __syncwarp(); // every lane's copies of item `at` are visible to the warp
        if (at.s == 0) {
#pragma unroll
            for (int c = 0; c < NC; c++) acc[c] = 0.0f;
        }
        const uint8_t *p = seg[0];
#pragma unroll
        for (int i = 0; i < QMM_STAGES - 1; i++) seg[i] = seg[i + 1];
        if (p) {
            const uintptr_t phase = (uintptr_t)p % 16;
            const int64_t c0 = at.s * G::CHUNKS;
            q_seg_dot<T, NC, XV, XS>(stages + at.stage * G::WINDOW + phase, c0 * qfmt<T>::CHUNK,
                                     (int)(n_chunks - c0 < G::CHUNKS ? n_chunks - c0 : G::CHUNKS), xs, n_cols, acc,
                                     x_s);
            if (at.s == n_seg - 1) {
#pragma unroll
                for (int c = 0; c < NC; c++) {
                    const float v = cuda_warp_sum(acc[c]);
                    if (lane == at.r) mine[c] = v;
                }
            }
        }
        if (at.s == n_seg - 1 && at.r == rows - 1) { // the group's results leave
            float v[NC][QMM_GROUP];
#pragma unroll
            for (int c = 0; c < NC; c++)
#pragma unroll
                for (int i = 0; i < QMM_GROUP; i++) v[c][i] = __shfl_sync(ST_GPU_WARP_MASK, mine[c], i);
            if (lane == 0) sink(at.g, v);
        }
        __syncwarp(); // stage `at` is read: the next issue may overwrite it
    }
    q_copy_wait<0>();
}
template <st_type T, int NC, bool XS, typename Src, typename Sink>
__device__ __forceinline__ void q_walk(uint8_t *stages, float4 *x_s, const Src &src, int64_t K, const float *const *xs,
                                       int n_cols, bool x_vec, const Sink &sink) {
    if (x_vec) q_walk_x<T, NC, true, XS>(stages, x_s, src, K, xs, n_cols, sink);
    else q_walk_x<T, NC, false, XS>(stages, x_s, src, K, xs, n_cols, sink);
}

// The rows of one weight [K, N] at row stride nb1, in groups of `rows`.
struct q_rows_plain {
    const uint8_t *w;
    int64_t nb1, N, n_groups;
    int rows;
    __device__ __forceinline__ const uint8_t *row(int64_t g, int r) const {
        const int64_t n = g * rows + r;
        return n < N ? w + n * nb1 : NULL;
    }
};

// y[:, m] = W x[:, m]; grid y: groups of NC columns. Dynamic shared memory: q_gemv_smem<T>(),
// then for XS (NC = 1) x staged, q_xs_bytes<T>(K).
template <st_type T, int NC, bool XS>
__global__ void __launch_bounds__(QMM_WARPS *ST_GPU_WARP_SIZE, NC == 1 ? q_gemv_min_blocks<T>() : 1)
    q_gemv(const uint8_t *w, int64_t nb1, int64_t K, int64_t N, st_cuda_view x, st_cuda_view y, int64_t M,
           bool x_vec, int rows) {
    extern __shared__ uint4 q_stages[]; // [QMM_WARPS][QMM_STAGES][WINDOW], then XS's x
    uint8_t *stages = (uint8_t *)q_stages + (size_t)(threadIdx.x / ST_GPU_WARP_SIZE) * QMM_STAGES * q_seg<T>::WINDOW;
    float4 *x_s = q_xs_at(q_stages, q_gemv_smem<T>());
    const q_rows_plain src = {w, nb1, N, (N + rows - 1) / rows, rows};
    // a warp without rows leaves, unless the block stages x together (a barrier)
    if (!XS && (int64_t)blockIdx.x * QMM_WARPS + threadIdx.x / ST_GPU_WARP_SIZE >= src.n_groups) return;
    for (int64_t m0 = (int64_t)blockIdx.y * NC; m0 < M; m0 += (int64_t)gridDim.y * NC) {
        const int n_cols = (int)(M - m0 < NC ? M - m0 : NC);
        const float *xs[NC];
#pragma unroll
        for (int c = 0; c < NC; c++) xs[c] = (const float *)cuda_row(x, m0 + (c < n_cols ? c : 0));
        q_walk<T, NC, XS>(stages, x_s, src, K, xs, n_cols, x_vec, [&](int64_t g, const float (&v)[NC][QMM_GROUP]) {
            const int64_t n0 = g * rows;
#pragma unroll
            for (int c = 0; c < NC; c++) {
                if (c >= n_cols) break;
                float *yr = (float *)cuda_row(y, m0 + c) + n0;
                if (rows == QMM_GROUP && n0 + QMM_GROUP <= N && (uintptr_t)yr % 16 == 0) {
                    *(float4 *)yr = make_float4(v[c][0], v[c][1], v[c][2], v[c][3]);
                } else {
#pragma unroll
                    for (int i = 0; i < QMM_GROUP; i++)
                        if (i < rows && n0 + i < N) yr[i] = v[c][i];
                }
            }
        });
    }
}

// ---- a decode step's fused product (st_fused_mul_mat, one column) ---------------------------
//
// After the norm (st_cuda_rms_norm into h, as the composite runs it), one launch for the
// products and what follows them: q, k and v as one space of rows (STORE), gate and up as
// pairs of rows whose results meet in the gated unit (SWIGLU, GEGLU: a group of 2, row 0 of
// gate, row 1 of up), o and down with the residual add and the next product's x * norm_w
// (ADD). Each value rounds as the composite's ops round it (q_gemv's sums, then the add,
// the multiply, the gated unit), so the fused product gives the composite's bits.

struct q_fused_args {
    const uint8_t *w[3];
    int64_t nb1[3];
    int64_t n_end[3];      // STORE: the rows of w[0..i] together; otherwise n_end[0] = N_0
    float *y[3];           // STORE
    float *out;            // ADD, SWIGLU, GEGLU: [N_0]
    float *next_h;         // ADD, optional: [N_0] out * next_norm_w
    const float *next_norm_w;
    int64_t n_groups;
    int rows;              // 2 for a gated unit, else 1
};

// Element i < 3 of a kernel argument's array, chosen without indexing it (an index known
// only at run time would copy the arguments to local memory).
template <typename V> __device__ __forceinline__ V q_pick(const V (&v)[3], int i) {
    return i == 0 ? v[0] : i == 1 ? v[1] : v[2];
}

// STORE's weight of row g of the space of rows, and the row's index in it.
__device__ __forceinline__ int q_fused_weight(const q_fused_args &a, int64_t g, int64_t *n) {
    const int i = g < a.n_end[0] ? 0 : g < a.n_end[1] ? 1 : 2;
    *n = g - (i == 0 ? 0 : i == 1 ? a.n_end[0] : a.n_end[1]);
    return i;
}

// The walk's source of rows: the arguments' n_groups and rows, and row(g, r).
template <int EPI> struct q_rows_fused : q_fused_args {
    __device__ __forceinline__ const uint8_t *row(int64_t g, int r) const {
        if (EPI == ST_FUSED_EPILOGUE_STORE) {
            int64_t n;
            const int i = q_fused_weight(*this, g, &n);
            return q_pick(w, i) + n * q_pick(nb1, i);
        }
        return q_pick(w, r) + g * q_pick(nb1, r); // ADD: r = 0; a gated unit: gate, then up
    }
};

template <st_type T, int EPI, bool XS>
__global__ void __launch_bounds__(QMM_WARPS *ST_GPU_WARP_SIZE, q_gemv_min_blocks<T>())
    q_gemv_fused(q_fused_args a, int64_t K, const float *x, bool x_vec) {
    extern __shared__ uint4 q_stages[]; // [QMM_WARPS][QMM_STAGES][WINDOW], then XS's x
    uint8_t *stages = (uint8_t *)q_stages + (size_t)(threadIdx.x / ST_GPU_WARP_SIZE) * QMM_STAGES * q_seg<T>::WINDOW;
    const q_rows_fused<EPI> src = {a};
    const float *xs[1] = {x};
    q_walk<T, 1, XS>(stages, q_xs_at(q_stages, q_gemv_smem<T>()), src, K, xs, 1, x_vec,
                     [&](int64_t g, const float (&v)[1][QMM_GROUP]) {
        if (EPI == ST_FUSED_EPILOGUE_STORE) {
            int64_t n;
            const int i = q_fused_weight(a, g, &n);
            q_pick(a.y, i)[n] = v[0][0];
        } else if (EPI == ST_FUSED_EPILOGUE_ADD) {
            const float o = __fadd_rn(a.out[g], v[0][0]);
            a.out[g] = o;
            if (a.next_h) a.next_h[g] = __fmul_rn(o, a.next_norm_w[g]);
        } else {
            const float act = EPI == ST_FUSED_EPILOGUE_GEGLU ? cuda_gelu_tanh_f32(v[0][0]) : cuda_silu_f32(v[0][0]);
            a.out[g] = __fmul_rn(act, v[0][1]);
        }
    });
}

// mul_mat_id: block (row group, slot): the slot's expert e, then row n of W + e * nb2.
// x_mode: 0 [K, n_used, M] per slot, 1 [K, M] shared by a token's slots, 2 [K, 1, M].
template <st_type T>
__global__ void __launch_bounds__(QMM_WARPS *ST_GPU_WARP_SIZE)
    q_gemv_id(const uint8_t *w, int64_t nb1, int64_t nb2, int64_t K, int64_t N, int64_t n_expert, st_cuda_view x,
              int x_mode, bool x_vec, st_cuda_view y, const int32_t *ids, int64_t ids_nb1, st_cuda_op_error *op_err) {
    const int64_t n_used = y.ne1, M = y.ne2, n_slots = n_used * M;
    const int64_t n = (int64_t)blockIdx.x * QMM_WARPS + threadIdx.x / ST_GPU_WARP_SIZE;
    const int lane = threadIdx.x % ST_GPU_WARP_SIZE;
    for (int64_t s = blockIdx.y; s < n_slots; s += gridDim.y) {
        const int64_t j = s % n_used, m = s / n_used;
        const int32_t e = *(const int32_t *)((const char *)ids + m * ids_nb1 + j * (int64_t)sizeof(int32_t));
        if (e < 0 || e >= n_expert) {
            if (blockIdx.x == 0 && threadIdx.x == 0)
                cuda_report_op_error(op_err, ST_CUDA_OP_ERROR_EXPERT_ID, e, m * n_used + j, n_expert);
            continue;
        }
        if (n >= N) continue;
        const char *xrow = x_mode == 0 ? x.data + j * x.nb1 + m * x.nb2 : x_mode == 1 ? x.data + m * x.nb1
                                                                                     : x.data + m * x.nb2;
        const float acc = q_gemv_row<T>(w + (int64_t)e * nb2 + n * nb1, K / qfmt<T>::CHUNK, (const float *)xrow, x_vec);
        if (lane == 0) ((float *)(y.data + j * y.nb1 + m * y.nb2))[n] = acc;
    }
}

// ---- element-parallel kernels: get_rows, dequantize to F16 ------------------------------

// dst[:, m] = src[:, ids[m]] as f32; a bad id is recorded and its row left alone.
template <st_type T>
__global__ void q_get_rows(st_cuda_view dst, const uint8_t *src, int64_t nb1, int64_t V, const int32_t *ids,
                           st_cuda_op_error *op_err) {
    constexpr int CH = qfmt<T>::CHUNK;
    const int64_t n_chunks = dst.ne0 / CH;
    for (int64_t m = blockIdx.y; m < dst.ne1; m += gridDim.y) {
        const int32_t id = ids[m];
        if (id < 0 || id >= V) {
            if (blockIdx.x == 0 && threadIdx.x == 0) cuda_report_op_error(op_err, ST_CUDA_OP_ERROR_ROW_ID, id, m, V);
            continue;
        }
        const uint8_t *row = src + (int64_t)id * nb1;
        float *out = (float *)(dst.data + m * dst.nb1);
        for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < n_chunks;
             c += (int64_t)gridDim.x * blockDim.x) {
            float v[CH];
            q_dequant<T>(qfmt<T>::load(q_chunk_block<T>(row, c), q_chunk_index<T>(c)), q_chunk_index<T>(c), v);
#pragma unroll
            for (int i = 0; i < CH; i++) out[c * CH + i] = v[i];
        }
    }
}

// out [K, rows] F16 packed (row r at out + r K) = rows of w at stride nb1, dequantized
// and rounded to nearest even. K % CHUNK == 0 and K % 8 == 0, so every chunk's halves
// start 16-byte aligned and go out in 16-byte stores.
template <st_type T>
__global__ void q_dequant_f16(uint4 *out, const uint8_t *w, int64_t nb1, int64_t K, int64_t rows) {
    constexpr int CH = qfmt<T>::CHUNK;
    const int64_t n_chunks = K / CH, total = n_chunks * rows;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / n_chunks, c = i % n_chunks;
        const uint8_t *row = w + r * nb1;
        float v[CH];
        q_dequant<T>(qfmt<T>::load(q_chunk_block<T>(row, c), q_chunk_index<T>(c)), q_chunk_index<T>(c), v);
        uint4 *o = out + (r * K + c * CH) / 8;
#pragma unroll
        for (int p = 0; p < CH / 8; p++) {
            uint32_t h[4];
#pragma unroll
            for (int k = 0; k < 4; k++)
                h[k] = (uint32_t)st_gpu_float_to_half_bits(v[8 * p + 2 * k]) |
                       ((uint32_t)st_gpu_float_to_half_bits(v[8 * p + 2 * k + 1]) << 16);
            o[p] = make_uint4(h[0], h[1], h[2], h[3]);
        }
    }
}

// ---- host side ------------------------------------------------------------------------------

// The types these kernels read: every type st_quant_supported names.
#define QMM_TYPES(X)                                                                                                \
    X(ST_TYPE_Q8_0) X(ST_TYPE_Q4_0) X(ST_TYPE_Q4_1) X(ST_TYPE_Q5_0) X(ST_TYPE_Q5_1) X(ST_TYPE_Q2_K)                 \
    X(ST_TYPE_Q3_K) X(ST_TYPE_Q4_K) X(ST_TYPE_Q5_K) X(ST_TYPE_Q6_K) X(ST_TYPE_Q8_K)

// Calls F::run<T>(args...) with T = t when t is one of them; false otherwise.
template <typename F, typename... Args> static bool q_dispatch(st_type t, Args &&...args) {
    switch (t) {
#define QMM_CASE(TY)                                                                                                \
    case TY: F::template run<TY>(args...); return true;
        QMM_TYPES(QMM_CASE)
#undef QMM_CASE
    default: return false;
    }
}

// The block alignment A of a type.
struct q_align_of {
    template <st_type T> static void run(int *a) { *a = qfmt<T>::A; }
};

// Checks what every quantized entry point needs: a type these kernels read, a shape of
// whole blocks with nb[0] = the block size, and rows (and expert slices) that start at
// the type's block alignment (the loads assume it; a packed or model-loaded weight
// always has it: buffers are 256-byte aligned and strides are whole blocks).
static st_status q_check_weight(const st_tensor *w, const char *op, st_error *err) {
    const st_type_traits *tr = st_type_get_traits((uint32_t)w->type);
    int a = 0;
    if (!tr || !q_dispatch<q_align_of>(w->type, &a))
        return st_error_set(err, ST_ERROR_UNSUPPORTED,
                            "%s: quantized weights of type %s do not run on the CUDA backend (it reads %s)", op,
                            st_type_name((uint32_t)w->type), st_quant_supported_list());
    ST_ASSERT(w->nb[0] == tr->block_bytes && w->ne[0] % tr->block_size == 0);
    ST_ASSERT(w->nb[1] >= (size_t)(w->ne[0] / tr->block_size) * tr->block_bytes);
    if ((uintptr_t)w->data % (uintptr_t)a != 0 || w->nb[1] % (size_t)a != 0 || (w->ne[2] > 1 && w->nb[2] % (size_t)a))
        return st_error_set(err, ST_ERROR_UNSUPPORTED,
                            "%s: rows of a %s weight must start at %d-byte boundaries on the CUDA backend (data %p, "
                            "row stride %zu bytes)",
                            op, tr->name, a, w->data, w->nb[1]);
    return ST_OK;
}

struct q_launch_gemv {
    template <st_type T>
    static void run(st_cuda_ctx *c, const st_tensor *dst, const st_tensor *w, const st_tensor *x, int64_t M) {
        const int64_t K = w->ne[0], N = w->ne[1];
        const unsigned int threads = QMM_WARPS * ST_GPU_WARP_SIZE;
        const uint8_t *wd = (const uint8_t *)w->data;
        const size_t smem = q_gemv_smem<T>();
        // One wave of blocks, their warps walking groups of rows, for every NC columns. A
        // group is QMM_GROUP rows when every warp of the wave gets one; a product with fewer
        // rows (k and v of a decode step: 512) gives each warp one row at a time, so that
        // more warps read at once.
        const unsigned int wave = (unsigned int)c->sm_count * (M == 1 ? q_gemv_min_blocks<T>() : 4);
        const int rows = (N + QMM_GROUP - 1) / QMM_GROUP >= (int64_t)wave * QMM_WARPS ? QMM_GROUP : 1;
        const unsigned int blocks = cuda_blocks(N, QMM_WARPS * rows), grid_x = blocks < wave ? blocks : wave;
        if (M == 1) {
            const size_t xs = q_xs_bytes<T>(K); // 0: x stays in global memory
            const auto kernel = xs ? q_gemv<T, 1, true> : q_gemv<T, 1, false>;
            kernel<<<grid_x, threads, smem + xs, c->stream>>>(wd, (int64_t)w->nb[1], K, N, cuda_view(x), cuda_view(dst),
                                                             M, cuda_rows_aligned16(x), rows);
        } else {
            const dim3 grid(grid_x, cuda_grid_y((M + QMM_MAX_COLS - 1) / QMM_MAX_COLS));
            q_gemv<T, QMM_MAX_COLS, false><<<grid, threads, smem, c->stream>>>(
                wd, (int64_t)w->nb[1], K, N, cuda_view(x), cuda_view(dst), M, cuda_rows_aligned16(x), rows);
        }
    }
};

struct q_launch_fused {
    template <st_type T, bool XS>
    static void launch(st_cuda_ctx *c, const q_fused_args &a, int epi, int64_t K, const float *x, bool x_vec,
                       size_t smem) {
        const unsigned int wave = (unsigned int)c->sm_count * q_gemv_min_blocks<T>();
        const unsigned int blocks = cuda_blocks(a.n_groups, QMM_WARPS), grid = blocks < wave ? blocks : wave;
        const unsigned int threads = QMM_WARPS * ST_GPU_WARP_SIZE;
        switch (epi) {
        case ST_FUSED_EPILOGUE_STORE:
            q_gemv_fused<T, ST_FUSED_EPILOGUE_STORE, XS><<<grid, threads, smem, c->stream>>>(a, K, x, x_vec);
            break;
        case ST_FUSED_EPILOGUE_ADD:
            q_gemv_fused<T, ST_FUSED_EPILOGUE_ADD, XS><<<grid, threads, smem, c->stream>>>(a, K, x, x_vec);
            break;
        case ST_FUSED_EPILOGUE_SWIGLU:
            q_gemv_fused<T, ST_FUSED_EPILOGUE_SWIGLU, XS><<<grid, threads, smem, c->stream>>>(a, K, x, x_vec);
            break;
        default:
            q_gemv_fused<T, ST_FUSED_EPILOGUE_GEGLU, XS><<<grid, threads, smem, c->stream>>>(a, K, x, x_vec);
            break;
        }
    }
    template <st_type T>
    static void run(st_cuda_ctx *c, const q_fused_args &a, int epi, int64_t K, const float *x, bool x_vec) {
        const size_t xs = q_xs_bytes<T>(K);
        if (xs) launch<T, true>(c, a, epi, K, x, x_vec, q_gemv_smem<T>() + xs);
        else launch<T, false>(c, a, epi, K, x, x_vec, q_gemv_smem<T>());
    }
};

struct q_launch_dequant_f16 {
    template <st_type T>
    static void run(st_cuda_ctx *c, uint4 *out, const uint8_t *w, int64_t nb1, int64_t K, int64_t rows) {
        const unsigned int blocks = cuda_blocks(K / qfmt<T>::CHUNK * rows, QMM_THREADS);
        const unsigned int grid = blocks < (1u << 20) ? blocks : (1u << 20); /* the kernel strides over the rest */
        q_dequant_f16<T><<<grid, QMM_THREADS, 0, c->stream>>>(out, w, nb1, K, rows);
    }
};

// Prefill: y = W x with W dequantized to F16 a slab of rows at a time and x rounded to F16
// once; cuBLAS accumulates in f32. Scratch: [x F16 K x M | W slab F16 | y staging].
static st_status q_mul_mat_gemm(st_cuda_ctx *c, st_tensor *dst, const st_tensor *w, const st_tensor *x,
                                st_error *err) {
    const int64_t K = w->ne[0], N = w->ne[1], M = cuda_nrows(x);
    const bool y_direct = cuda_rows_uniform(dst) && dst->nb[1] % 4 == 0 && (int64_t)(dst->nb[1] / 4) >= N &&
                          (uintptr_t)dst->data % 4 == 0;
    int64_t slab = (int64_t)(QMM_SLAB_BYTES / ((size_t)K * 2));
    if (slab > 64) slab -= slab % 64; /* each slab's C rows start 256-byte aligned */
    if (slab < 1) slab = 1;
    if (slab > N) slab = N;
    const size_t x_bytes = ((size_t)K * (size_t)M * 2 + 255) / 256 * 256;
    const size_t w_bytes = ((size_t)slab * (size_t)K * 2 + 255) / 256 * 256;
    const size_t y_bytes = y_direct ? 0 : (size_t)N * (size_t)M * sizeof(float);
    char *scratch = NULL;
    st_status s = st_cuda_scratch(c, x_bytes + w_bytes + y_bytes, (void **)&scratch, err);
    if (s != ST_OK) return s;
    unsigned short *xh = (unsigned short *)scratch;
    uint4 *wh = (uint4 *)(scratch + x_bytes);
    float *C = y_direct ? (float *)dst->data : (float *)(scratch + x_bytes + w_bytes);
    const int ldc = y_direct ? (int)(dst->nb[1] / 4) : (int)N;

    pack_rows_f16<<<cuda_rows_grid(K, M), ST_CUDA_ROWS_THREADS, 0, c->stream>>>((char *)xh, cuda_view(x));
    ST_GPU_CHECK_LAUNCH();
    const float alpha = 1.0f, beta = 0.0f;
    for (int64_t n0 = 0; n0 < N; n0 += slab) {
        const int64_t rows = N - n0 < slab ? N - n0 : slab;
        const uint8_t *wrows = (const uint8_t *)w->data + (size_t)n0 * w->nb[1];
        q_dispatch<q_launch_dequant_f16>(w->type, c, wh, wrows, (int64_t)w->nb[1], K, rows);
        ST_GPU_CHECK_LAUNCH();
        // column-major: C[n0.., :] (rows x M) = Wslab^T (rows x K, lda K) X (K x M, ldb K)
        ST_GPU_BLAS_CHECK(st_gpu_blas_gemm_ex(c->blas, st_gpu_blas_op_t, st_gpu_blas_op_n, (int)rows, (int)M, (int)K,
                                              &alpha, wh, st_gpu_blas_r_16f, (int)K, xh, st_gpu_blas_r_16f, (int)K,
                                              &beta, C + n0, st_gpu_blas_r_32f, ldc, st_gpu_blas_compute_32f,
                                              st_gpu_blas_gemm_default));
    }
    if (!y_direct) {
        unpack_rows_f32<<<cuda_rows_grid(N, M), ST_CUDA_ROWS_THREADS, 0, c->stream>>>(cuda_view(dst), C);
        ST_GPU_CHECK_LAUNCH();
    }
    return ST_OK;
}

st_status st_cuda_mul_mat_quant(st_backend *b, st_tensor *dst, const st_tensor *w, const st_tensor *x,
                                st_error *err) {
    // w [K, N] quantized, any nb[1] (whole blocks); x F32 [K, M...]; dst F32 [N, M...]
    st_cuda_ctx *c = cuda_ctx(b);
    st_status s = q_check_weight(w, "mul_mat", err);
    if (s != ST_OK) return s;
    ST_ASSERT(w->ne[2] == 1 && w->ne[3] == 1);
    ST_ASSERT(cuda_is_f32_rows(x) && cuda_is_f32_rows(dst));
    ST_ASSERT(x->ne[0] == w->ne[0] && dst->ne[0] == w->ne[1]);
    ST_ASSERT(dst->ne[1] == x->ne[1] && dst->ne[2] == x->ne[2] && dst->ne[3] == x->ne[3]);
    const int64_t K = w->ne[0], N = w->ne[1], M = cuda_nrows(x);
    if (N == 0 || M == 0) return ST_OK;
    const bool gemm_ok =
        K > 0 && cuda_fits_int(K) && cuda_fits_int(N) && cuda_fits_int(M) && cuda_fits_int((int64_t)(dst->nb[1] / 4));
    if (M >= ST_CUDA_QGEMM_MIN_M && gemm_ok) return q_mul_mat_gemm(c, dst, w, x, err);
    q_dispatch<q_launch_gemv>(w->type, c, dst, w, x, M);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}

// A one-column row of F32 values: [n] at data, contiguous.
static bool q_is_f32_vector(const st_tensor *t, int64_t n) {
    return t && cuda_is_f32_rows(t) && t->ne[0] == n && cuda_nrows(t) == 1;
}

// Whether st_cuda_mul_mat_fused_quant runs op: one column (a decode step's product) on
// quantized weights of one type and K, more than a lone stored product (that one, an
// output head, is the norm and mul_mat: q_gemv's groups of 4 leave in 16-byte stores).
static bool q_fused_takes(const st_fused_mul_mat *op) {
    const int64_t K = op->x->ne[0];
    const st_type t = op->w[0]->type;
    if (!q_is_f32_vector(op->x, K) || K < 1) return false;
    if (op->norm_w && !q_is_f32_vector(op->h, K)) return false;
    int a = 0;
    if (!q_dispatch<q_align_of>(t, &a)) return false; // (also: not a float weight)
    for (int i = 0; i < op->n_w; i++) {
        const st_tensor *w = op->w[i];
        if (w->type != t || w->ne[0] != K || w->ne[2] != 1 || w->ne[3] != 1) return false;
    }
    const int64_t N0 = op->w[0]->ne[1];
    switch (op->epilogue) {
    case ST_FUSED_EPILOGUE_STORE:
        if (op->n_w == 1) return false;
        for (int i = 0; i < op->n_w; i++)
            if (!q_is_f32_vector(op->y[i], op->w[i]->ne[1])) return false;
        return true;
    case ST_FUSED_EPILOGUE_ADD:
        return op->n_w == 1 && q_is_f32_vector(op->out, N0) &&
               (!op->next_h || (q_is_f32_vector(op->next_h, N0) && q_is_f32_vector(op->next_norm_w, N0)));
    default: // a gated unit
        return op->n_w == 2 && op->w[1]->ne[1] == N0 && q_is_f32_vector(op->out, N0);
    }
}

st_status st_cuda_mul_mat_fused_quant(st_backend *b, const st_fused_mul_mat *op, bool *ran, st_error *err) {
    *ran = false;
    if (!q_fused_takes(op)) return ST_OK;
    st_cuda_ctx *c = cuda_ctx(b);
    for (int i = 0; i < op->n_w; i++) {
        const st_status s = q_check_weight(op->w[i], "mul_mat_fused", err);
        if (s != ST_OK) return s;
    }
    const st_tensor *in = op->x;
    if (op->norm_w) { // h = rmsnorm(x) * norm_w, as the composite forms it
        const st_status s = st_cuda_rms_norm(b, op->h, op->x, op->norm_w, op->eps, err);
        if (s != ST_OK) return s;
        in = op->h;
    }
    q_fused_args a = {};
    const bool glu = op->epilogue == ST_FUSED_EPILOGUE_SWIGLU || op->epilogue == ST_FUSED_EPILOGUE_GEGLU;
    int64_t rows_so_far = 0;
    for (int i = 0; i < op->n_w; i++) {
        a.w[i] = (const uint8_t *)op->w[i]->data;
        a.nb1[i] = (int64_t)op->w[i]->nb[1];
        rows_so_far += op->w[i]->ne[1];
        a.n_end[i] = rows_so_far;
        if (op->epilogue == ST_FUSED_EPILOGUE_STORE) a.y[i] = (float *)op->y[i]->data;
    }
    if (op->epilogue != ST_FUSED_EPILOGUE_STORE) a.out = (float *)op->out->data;
    if (op->next_h) {
        a.next_h = (float *)op->next_h->data;
        a.next_norm_w = (const float *)op->next_norm_w->data;
    }
    a.rows = glu ? 2 : 1;
    a.n_groups = op->epilogue == ST_FUSED_EPILOGUE_STORE ? rows_so_far : op->w[0]->ne[1];
    if (a.n_groups == 0) {
        *ran = true;
        return ST_OK;
    }
    q_dispatch<q_launch_fused>(op->w[0]->type, c, a, (int)op->epilogue, op->x->ne[0], (const float *)in->data,
                               cuda_aligned16(in->data));
    ST_GPU_CHECK_LAUNCH();
    *ran = true;
    return ST_OK;
}

struct q_launch_get_rows {
    template <st_type T>
    static void run(st_cuda_ctx *c, const st_tensor *dst, const st_tensor *src, const st_tensor *ids) {
        const int64_t n_chunks = dst->ne[0] / qfmt<T>::CHUNK;
        const unsigned int gx = cuda_blocks(n_chunks, QMM_THREADS);
        const dim3 grid(gx < 64 ? gx : 64, cuda_grid_y(dst->ne[1]));
        q_get_rows<T><<<grid, QMM_THREADS, 0, c->stream>>>(cuda_view(dst), (const uint8_t *)src->data,
                                                           (int64_t)src->nb[1], src->ne[1], (const int32_t *)ids->data,
                                                           c->d_op_error);
    }
};

st_status st_cuda_get_rows_quant(st_backend *b, st_tensor *dst, const st_tensor *src, const st_tensor *ids,
                                 st_error *err) {
    // dst F32 [K, M]; src [K, V] quantized; ids I32 [M]
    st_cuda_ctx *c = cuda_ctx(b);
    st_status s = q_check_weight(src, "get_rows", err);
    if (s != ST_OK) return s;
    ST_ASSERT(cuda_is_f32_rows(dst) && cuda_is_i32_index(ids));
    ST_ASSERT(dst->ne[0] == src->ne[0] && dst->ne[2] == 1 && dst->ne[3] == 1);
    ST_ASSERT(src->ne[2] == 1 && src->ne[3] == 1 && ids->ne[0] >= dst->ne[1]);
    if (dst->ne[0] == 0 || dst->ne[1] == 0) return ST_OK;
    q_dispatch<q_launch_get_rows>(src->type, c, dst, src, ids);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}

struct q_launch_gemv_id {
    template <st_type T>
    static void run(st_cuda_ctx *c, const st_tensor *dst, const st_tensor *w, const st_tensor *x, int x_mode,
                    const st_tensor *ids) {
        const int64_t N = w->ne[1], n_slots = dst->ne[1] * dst->ne[2];
        const dim3 grid(cuda_blocks(N, QMM_WARPS), cuda_grid_y(n_slots));
        q_gemv_id<T><<<grid, QMM_WARPS * ST_GPU_WARP_SIZE, 0, c->stream>>>(
            (const uint8_t *)w->data, (int64_t)w->nb[1], (int64_t)w->nb[2], w->ne[0], N, w->ne[2], cuda_view(x),
            x_mode, cuda_rows_aligned16(x), cuda_view(dst), (const int32_t *)ids->data, (int64_t)ids->nb[1],
            c->d_op_error);
    }
};

st_status st_cuda_mul_mat_id_quant(st_backend *b, st_tensor *dst, const st_tensor *w, const st_tensor *x,
                                   const st_tensor *ids, st_error *err) {
    // w [K, N, E] quantized, any nb[1], nb[2]; dst F32 [N, n_used, M]; ids I32 [n_used, M];
    // x F32 [K, M] or [K, 1, M] (shared by the slots of a token) or [K, n_used, M]
    st_cuda_ctx *c = cuda_ctx(b);
    st_status s = q_check_weight(w, "mul_mat_id", err);
    if (s != ST_OK) return s;
    const int64_t K = w->ne[0], N = w->ne[1];
    ST_ASSERT(w->ne[3] == 1);
    ST_ASSERT(cuda_is_f32_rows(dst) && dst->ne[0] == N && dst->ne[3] == 1);
    const int64_t n_used = dst->ne[1], M = dst->ne[2];
    ST_ASSERT(cuda_is_f32_rows(x) && x->ne[0] == K && x->ne[3] == 1);
    ST_ASSERT(cuda_is_i32_index(ids) && ids->ne[0] == n_used && ids->ne[1] >= M);
    const bool per_slot = x->ne[1] == n_used && x->ne[2] == M;
    const bool shared_2d = x->ne[1] == M && x->ne[2] == 1;
    const bool shared_3d = x->ne[1] == 1 && x->ne[2] == M;
    ST_ASSERT(per_slot || shared_2d || shared_3d);
    if (N == 0 || n_used * M == 0) return ST_OK;
    q_dispatch<q_launch_gemv_id>(w->type, c, dst, w, x, per_slot ? 0 : shared_2d ? 1 : 2, ids);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}
