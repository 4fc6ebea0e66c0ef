// The block formats of quantized weights on the GPU: how a kernel reads a chunk of a row
// (qfmt<T>::load), splits it into scale, min and integers (qfmt<T>::split), and turns the
// split into the CPU's values (q_dequant) or into its dot product with x (q_dot_chunk).
// include/stride/quant.h has the layouts, src/quant/ the CPU dequantizers these reproduce
// bit for bit. Used by every quantized kernel (cuda_quant_*.cu).
//
// How a row is read. A row of K values is K / QK blocks; every block is cut into chunks
// of CHUNK consecutive values (8 for the 32-value legacy blocks, 16 for the K-quants, so
// that a chunk never straddles a sub-block scale) and chunk c of the row holds values
// [c * CHUNK, (c + 1) * CHUNK). A thread loads the bytes one chunk needs (its quants and
// the block's scales) and splits them into scale, min and integers (qfmt::split; q_dequant
// turns a split into the CPU's values). Lane l of a warp takes chunks l, l + 32, ...
// so that a warp's loads cover consecutive bytes of the row; each lane issues the loads
// of several chunks before it uses any (bytes in flight). The decode matvec (q_gemv) reads
// the chunks from a copy of the row in shared memory; the other kernels read them from
// global memory. The widest load a field's alignment allows is used: blocks of q4_K/q5_K
// (144/176 B) are 16-byte multiples, so their quants come in 16-byte loads; q5_1 (24 B) in
// 8-byte, q4_1/q2_K/q8_K (20/84/292 B) in 4-byte loads; q8_0, q4_0, q5_0, q3_K, q6_K
// blocks (34/18/22/110/210 B) are only 2-byte aligned, so their words are assembled from
// 2-byte loads (as ggml does).
//
// Exactness. Dequantization (q_dequant, the scales) is written with __fmul_rn/__fsub_rn:
// nvcc would otherwise contract d1 * q - m1 into an FMA and the values would differ from
// the CPU's (which rounds the product, then the difference) in the last bit.
#ifndef STRIDE_CUDA_QUANT_FORMATS_CUH
#define STRIDE_CUDA_QUANT_FORMATS_CUH

#include <stdint.h>

#include "cuda/cuda_common.cuh"

// ---- loads ----------------------------------------------------------------------------
//
// A format's bytes are read either from global memory, through the read-only path
// (get_rows, the dequantizing prefill, mul_mat_id), or from a window the decode matvec
// has staged in shared memory (Q_SHARED).
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
// That is faster for q6_K's 16-byte runs and slower for q8_0's and q5_0's 8-byte runs, so
// only q6_K asks for it. The word past the run is read and discarded when p is 4-byte
// aligned: the caller's run must have 4 readable bytes after it (q6_K's ql and qh runs are
// followed, inside their block, by its scales and d).
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
constexpr uint32_t Q_BIAS = 0x4B400000u;
constexpr float Q_BIAS_F = 12582912.0f;
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

// ---- a chunk against x ------------------------------------------------------------------

// Where a chunk's x comes from: q_x_global, x in global memory at p (16-byte loads where XV:
// x 16-byte aligned; a template argument, so that the other form's loads do not take issue
// slots predicated off); the decode matvec's q_x_staged, x staged in shared memory
// (cuda_quant_gemv.cu). piece(i): x[4 i .. 4 i + 4) of the chunk.
template <bool XV> struct q_x_global {
    const float *p;
    __device__ __forceinline__ float4 piece(int i) const {
        if constexpr (XV) return __ldg((const float4 *)p + i);
        else return make_float4(__ldg(p + 4 * i), __ldg(p + 4 * i + 1), __ldg(p + 4 * i + 2), __ldg(p + 4 * i + 3));
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
    // the end: chains of CH / 4 dependent FMAs where one sum made a chain of CH (the
    // one-column kernel stalls on dependencies more than on issue)
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

#endif /* STRIDE_CUDA_QUANT_FORMATS_CUH */
