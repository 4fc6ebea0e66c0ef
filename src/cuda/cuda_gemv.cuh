/*
 * The matrix-vector product shared by mul_mat (decode, M < ST_CUDA_GEMM_MIN_M) and
 * mul_mat_id (every MoE product): one warp per weight row, up to CUDA_GEMV_MAX_COLS
 * input columns at once so that the row is read from memory once for all of them.
 *
 * A lane reads 16 bytes of the row at a time (8 halves or 4 floats), consecutive lanes
 * consecutive 16-byte pieces, so a warp reads 512 contiguous bytes per step. That needs
 * the row start 16-byte aligned, which holds for every row when the base and the row
 * stride nb[1] are multiples of 16 (padded strides always are; a packed row of K halves
 * is when K % 8 == 0). Otherwise, and for the K % 8 tail, lanes read single elements.
 * Accumulation is f32: weights convert exactly, inputs are f32; only the summation order
 * differs from the CPU (lane-strided partial sums, then a shuffle tree).
 */
#ifndef STRIDE_CUDA_GEMV_CUH
#define STRIDE_CUDA_GEMV_CUH

#include "cuda/cuda_backend.h"
#include "cuda/cuda_common.cuh"

/* Columns one pass over a weight row serves (mul_mat_id's slots of a step, and mul_mat
 * when cuBLAS cannot take it). */
#define CUDA_GEMV_MAX_COLS 7
/* Warps (= weight rows) per block. */
#define CUDA_GEMV_WARPS 8
/* Blocks per multiprocessor the one-column kernels are compiled for: 8 x 256 threads, the
 * most an SM holds, at <= 32 registers a thread (with CUDA_GEMV_UNROLL 2, ptxas: no spills
 * for F16; 8-12 bytes for BF16 and 8-40 for F32). */
#define GEMV_DECODE_MIN_BLOCKS 8
/* Blocks per multiprocessor of the kernels with the norm in the loop, which hold x and
 * norm_w pieces beside the weights (at 8, ptxas spills); the decode kernel's other bound
 * (cuda_gemv_decode.cu). */
#define GEMV_NORM_MIN_BLOCKS 6
#define CUDA_GEMV_MAX_PARTS 3

/* cuda_gemv_decode.cu: one column, 16-byte aligned weight rows and x, K % (16 / type
 * size) == 0. Up to three weights of one type sharing x form one grid (q, k, v); a gated
 * pair is part 0 (gate) with w_up. */
/* The most partial sums of x . x a prepared norm reads (four a thread of a block). */
#define GEMV_PREPARED_MAX_SS (CUDA_GEMV_WARPS * ST_GPU_WARP_SIZE * 4)
/* A one-wave normed product from this K on takes its x * norm_w prepared by the add before
 * it (st_cuda_prepared_norm_pays): on the H200 that pays at K = 4,096, not at 2,048. */
#define GEMV_PREPARED_MIN_K 4096
typedef struct cuda_gemv_decode_args {
    const char *w[CUDA_GEMV_MAX_PARTS]; /* [K, n] at row stride nb1 */
    int64_t nb1[CUDA_GEMV_MAX_PARTS], n[CUDA_GEMV_MAX_PARTS];
    float *y[CUDA_GEMV_MAX_PARTS];      /* STORE: [n] */
    int block0[CUDA_GEMV_MAX_PARTS];    /* the first block of each part (set by the launch) */
    int n_parts, epilogue;              /* st_fused_epilogue */
    int64_t K;
    int n_vec;                          /* 16-byte pieces a row (set by the run) */
    const float *x;                     /* [K] */
    const float *norm_w;                /* [K] or NULL: y = s * dot(w, x * norm_w) */
    const float *x_w;                   /* [K] x * norm_w (prepared), or NULL */
    const float *x_ss;                  /* with x_w: [n_ss] partial sums of x . x */
    int n_ss;                           /* <= GEMV_PREPARED_MAX_SS */
    float eps;
    const char *w_up;                   /* GLU: [K, n] */
    int64_t up_nb1;
    float *out;                         /* ADD: out += W x; GLU: out = act(gate) * up */
    float *out_w;                       /* ADD: out * out_norm_w after the add, or NULL */
    const float *out_norm_w;
    float *out_ss;                      /* ADD with out_w, or NULL: [ceil(n / 4)] sums of out^2 by 4 rows */
} cuda_gemv_decode_args;
st_status cuda_gemv_decode_run(st_cuda_ctx *c, cuda_gemv_decode_args *a, st_type type, st_error *err);
/* The warps a row the decode kernel gives the product a: 2 when that keeps its grid within
 * one wave of the SMs at the kernel's blocks an SM, else 1. */
int cuda_gemv_decode_split(const st_cuda_ctx *c, const cuda_gemv_decode_args *a, st_type type);
/* The waves of SMs the decode kernel's grid for a takes, at that split and its blocks an SM
 * (a norm in the loop holds fewer than a prepared one or none). */
int cuda_gemv_decode_waves(const st_cuda_ctx *c, const cuda_gemv_decode_args *a, st_type type);
/* cuda_gemv_rowblock.cu: a block a row, each thread the same columns of every row (F16 and
 * BF16; K a multiple of 8 up to 8,192; no prepared norm, no sums of squares for the next;
 * at most a few rows a block: a layer's products, not an output head). The products it may
 * take: CUDA_ROWBLOCK_* (cuda_tuning.h). */
bool cuda_gemv_rowblock_takes(const st_cuda_ctx *c, const cuda_gemv_decode_args *a, st_type type);
/* The kinds of product it may take at row length K: st_cuda_tuning's rowblock mask, or
 * (-1, the default) stores and residual adds at every K, and gated pairs where K is not a
 * multiple of 2,048 (gemma-3-1b's 1,152, phi-4-mini's 3,072: there the block a row is the
 * faster on an H100; at 2,048 and 4,096 the warp-a-row kernel is). */
int cuda_rowblock_kinds(const st_cuda_ctx *c, int64_t K);
st_status cuda_gemv_rowblock_run(st_cuda_ctx *c, const cuda_gemv_decode_args *a, st_type type, st_error *err);
/* Index arithmetic within a row (pieces, elements), 64-bit like the row offsets (n * nb1). */
typedef int64_t cuda_gemv_idx;

template <st_type T> struct cuda_elem_bytes;
template <> struct cuda_elem_bytes<ST_TYPE_F32> { static constexpr int value = 4; };
template <> struct cuda_elem_bytes<ST_TYPE_F16> { static constexpr int value = 2; };
template <> struct cuda_elem_bytes<ST_TYPE_BF16> { static constexpr int value = 2; };

/* 16 bytes of a row as floats: 4 (F32) or 8 (F16, BF16; element 2i in the low half of
 * word i, little endian). */
template <st_type T> __device__ __forceinline__ void cuda_unpack16(const uint4 &u, float *out);
template <> __device__ __forceinline__ void cuda_unpack16<ST_TYPE_F32>(const uint4 &u, float *out) {
    out[0] = __uint_as_float(u.x);
    out[1] = __uint_as_float(u.y);
    out[2] = __uint_as_float(u.z);
    out[3] = __uint_as_float(u.w);
}
template <> __device__ __forceinline__ void cuda_unpack16<ST_TYPE_F16>(const uint4 &u, float *out) {
    const unsigned int w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        out[2 * i] = st_gpu_half_as_float((unsigned short)(w[i] & 0xffffu));
        out[2 * i + 1] = st_gpu_half_as_float((unsigned short)(w[i] >> 16));
    }
}
template <> __device__ __forceinline__ void cuda_unpack16<ST_TYPE_BF16>(const uint4 &u, float *out) {
    const unsigned int w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        out[2 * i] = __uint_as_float(w[i] << 16);
        out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}


/* Loads of the input columns: from shared memory (a block staged them there) or through
 * the read-only cache (every warp of the SM reads the same x, so it stays in L1). */
template <bool X_SHARED> __device__ __forceinline__ float4 cuda_gemv_x4(const float *p) {
    return X_SHARED ? *(const float4 *)p : __ldg((const float4 *)p);
}
template <bool X_SHARED> __device__ __forceinline__ float cuda_gemv_x1(const float *p) {
    return X_SHARED ? *p : __ldg(p);
}

/* Adds the products of one 16-byte piece of the weight row (elements k0 .. k0 + VEC) to
 * acc[c] for every column. */
template <st_type T, bool X_SHARED, int NC>
__device__ __forceinline__ void cuda_gemv_piece(const uint4 &wq, cuda_gemv_idx k0, const float *const *xs, int n_cols,
                                                bool x_vec, float *acc) {
    constexpr int VEC = 16 / cuda_elem_bytes<T>::value;
    float wf[VEC];
    cuda_unpack16<T>(wq, wf);
#pragma unroll
    for (int c = 0; c < NC; c++) {
        if (c >= n_cols) break;
        float xf[VEC];
        if (x_vec) {
#pragma unroll
            for (int i = 0; i < VEC; i += 4) {
                const float4 q = cuda_gemv_x4<X_SHARED>(xs[c] + k0 + i);
                xf[i] = q.x, xf[i + 1] = q.y, xf[i + 2] = q.z, xf[i + 3] = q.w;
            }
        } else {
#pragma unroll
            for (int i = 0; i < VEC; i++) xf[i] = cuda_gemv_x1<X_SHARED>(xs[c] + k0 + i);
        }
        float s = acc[c];
#pragma unroll
        for (int i = 0; i < VEC; i++) s = fmaf(wf[i], xf[i], s);
        acc[c] = s;
    }
}

/* acc[c] = dot(wrow[0..K), xs[c][0..K)) for c < n_cols, in every lane of the warp.
 *   w_vec: wrow is 16-byte aligned; x_vec: every xs[c] is 16-byte aligned;
 *   X_SHARED: xs point into shared memory; NC: the most columns (a compile-time bound, so
 *   that a one-column product keeps one accumulator in registers, not seven).
 * Bytes in flight: each lane issues CUDA_GEMV_UNROLL 16-byte weight loads before it uses
 * any of them (a warp: 32 x 16 x CUDA_GEMV_UNROLL = 1 KiB); HBM is kept busy by many warps
 * rather than deep unrolling: the one-column kernels are compiled for 8 blocks of 8 warps
 * per SM (GEMV_DECODE_MIN_BLOCKS, <= 32 registers), 64 KiB in flight per SM. The weights
 * are streamed past the caches (read once per token) so that x stays in L1. The summation
 * order is fixed by K alone: lane l owns the pieces l, l + 32, ... in order, then a
 * shuffle tree, whatever CUDA_GEMV_UNROLL is.
 *
 * On the H200, 2 loads a lane at 64 warps an SM stream faster than deeper unrolling at
 * fewer warps (8 loads at 32 warps, 4 at 48) or at as many (4 at 64 spills). Splitting a
 * row over several warps is the decode kernel's, for grids short of a wave
 * (cuda_gemv_decode.cu). (An RMSNorm is folded into this loop by cuda_gemv.cu's own
 * one-column variant.) */
#define CUDA_GEMV_UNROLL 2
template <st_type T, bool X_SHARED = false, int NC = CUDA_GEMV_MAX_COLS>
__device__ __forceinline__ void cuda_gemv_row(const char *__restrict__ wrow, int64_t K, bool w_vec,
                                              const float *const *xs, int n_cols, bool x_vec, float *acc) {
    constexpr int VEC = 16 / cuda_elem_bytes<T>::value; /* elements per 16-byte load */
    constexpr int W = ST_GPU_WARP_SIZE;
    const int lane = threadIdx.x % W;
#pragma unroll
    for (int c = 0; c < NC; c++) acc[c] = 0.0f;

    cuda_gemv_idx k_done = 0;
    if (w_vec) {
        const cuda_gemv_idx n_vec = (cuda_gemv_idx)K / VEC;
        const uint4 *wv = (const uint4 *)wrow;
        cuda_gemv_idx v = lane;
        for (; v + (CUDA_GEMV_UNROLL - 1) * W < n_vec; v += CUDA_GEMV_UNROLL * W) {
            uint4 wq[CUDA_GEMV_UNROLL];
#pragma unroll
            for (int u = 0; u < CUDA_GEMV_UNROLL; u++) wq[u] = st_gpu_load_streaming(wv + v + u * W);
#pragma unroll
            for (int u = 0; u < CUDA_GEMV_UNROLL; u++)
                cuda_gemv_piece<T, X_SHARED, NC>(wq[u], (v + u * W) * VEC, xs, n_cols, x_vec, acc);
        }
        for (; v < n_vec; v += W)
            cuda_gemv_piece<T, X_SHARED, NC>(st_gpu_load_streaming(wv + v), v * VEC, xs, n_cols, x_vec, acc);
        k_done = n_vec * VEC;
    }
    /* the tail (or the whole row when it is not 16-byte aligned), one element per lane */
    for (cuda_gemv_idx k = k_done + lane; k < (cuda_gemv_idx)K; k += W) {
        const float wk = cuda_load_f32<T>(wrow, k);
#pragma unroll
        for (int c = 0; c < NC; c++) {
            if (c >= n_cols) break;
            acc[c] = fmaf(wk, cuda_gemv_x1<X_SHARED>(xs[c] + k), acc[c]);
        }
    }
#pragma unroll
    for (int c = 0; c < NC; c++) {
        if (c >= n_cols) break;
        acc[c] = cuda_warp_sum(acc[c]);
    }
}

#endif /* STRIDE_CUDA_GEMV_CUH */
