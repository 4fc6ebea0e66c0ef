// RMSNorm and rotary position embedding, over every row of strided F32 views (hidden
// states [D, M], or [head_dim, n_head, M] heads straight out of a qkv row).
#include <math.h>

#include "cuda/cuda_common.cuh"

// ---- RMSNorm --------------------------------------------------------------------------------

#define NORM_MAX_THREADS 512

// Sum over the block; every thread gets the total. `shared` holds one float per warp.
__device__ __forceinline__ float block_sum_f32(float v, float *shared) {
#pragma unroll
    for (int off = ST_GPU_WARP_SIZE / 2; off > 0; off >>= 1) v += __shfl_xor_sync(ST_GPU_WARP_MASK, v, off);
    const int warp = threadIdx.x / ST_GPU_WARP_SIZE, lane = threadIdx.x % ST_GPU_WARP_SIZE;
    const int n_warps = (blockDim.x + ST_GPU_WARP_SIZE - 1) / ST_GPU_WARP_SIZE;
    __syncthreads(); // shared may still be read by a previous call
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float total = 0.0f;
    for (int i = 0; i < n_warps; i++) total += shared[i]; // same order in every thread
    return total;
}

// One block per row: the sum of squares in f32 (a block tree), the scale as the CPU forms
// it (1 / sqrt(mean + eps) in double, rounded to f32), then y = (x * s) * w.
__global__ void rms_norm_f32(st_cuda_view dst, st_cuda_view x, const float *__restrict__ w, float eps) {
    __shared__ float shared[NORM_MAX_THREADS / ST_GPU_WARP_SIZE];
    const int64_t D = x.ne0, rows = x.ne1 * x.ne2 * x.ne3;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *xr = (const float *)cuda_row(x, r);
        float *yr = (float *)cuda_row(dst, r);
        float ss = 0.0f;
        for (int64_t i = threadIdx.x; i < D; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
        ss = block_sum_f32(ss, shared);
        const float s = (float)(1.0 / sqrt((double)ss / (double)D + (double)eps));
        if (w) {
            for (int64_t i = threadIdx.x; i < D; i += blockDim.x) yr[i] = (xr[i] * s) * w[i];
        } else {
            for (int64_t i = threadIdx.x; i < D; i += blockDim.x) yr[i] = xr[i] * s;
        }
    }
}

st_status st_cuda_rms_norm(st_backend *b, st_tensor *dst, const st_tensor *x, const st_tensor *w, float eps,
                           st_error *err) {
    // x, dst F32 [D, ...]; w F32 [D] or NULL
    st_cuda_ctx *c = cuda_ctx(b);
    ST_ASSERT(cuda_is_f32_rows(x) && cuda_is_f32_rows(dst) && cuda_same_shape(dst, x));
    const int64_t D = x->ne[0], rows = cuda_nrows(x);
    if (w) ST_ASSERT(cuda_is_f32_rows(w) && w->ne[0] == D && cuda_nrows(w) == 1);
    if (rows == 0) return ST_OK;
    ST_ASSERT(D > 0);
    const int threads = D <= 128 ? 32 : D <= 1024 ? 128 : NORM_MAX_THREADS;
    const unsigned int grid = (unsigned int)(rows < (1 << 30) ? rows : (1 << 30));
    rms_norm_f32<<<grid, threads, 0, c->stream>>>(cuda_view(dst), cuda_view(x),
                                                  w ? (const float *)w->data : (const float *)NULL, eps);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}

// ---- RoPE -----------------------------------------------------------------------------------

// One block per (head, token) row. Thread t < n_rot/2 rotates pair t; the others copy the
// n_rot .. head_dim-1 pass-through dimensions. Angles in double as the CPU computes them
// (theta_i = pos * freq_scale * base^(-2i/n_rot) / factor_i), cos/sin rounded once to f32;
// the rotation with explicit roundings (no fused multiply-add), as the CPU's C does.
__global__ void rope_f32(st_cuda_view dst, st_cuda_view x, const int32_t *__restrict__ positions, int mode_neox,
                         int n_rot, float freq_base, float freq_scale, const float *__restrict__ freq_factors,
                         float attn_factor) {
    const int64_t head_dim = x.ne0, n_head = x.ne1, M = x.ne2;
    const int half = n_rot / 2;
    const int64_t n_work = half + (head_dim - n_rot);
    for (int64_t r = blockIdx.x; r < n_head * M; r += gridDim.x) {
        const int64_t h = r % n_head, m = r / n_head;
        const float *xr = (const float *)(x.data + h * x.nb1 + m * x.nb2);
        float *yr = (float *)(dst.data + h * dst.nb1 + m * dst.nb2);
        const double pos = (double)positions[m] * (double)freq_scale;
        for (int64_t t = threadIdx.x; t < n_work; t += blockDim.x) {
            if (t < half) {
                double inv_freq = pow((double)freq_base, -2.0 * (double)t / (double)n_rot);
                if (freq_factors) inv_freq /= (double)freq_factors[t];
                const double theta = pos * inv_freq;
                const float cs = (float)(cos(theta) * (double)attn_factor);
                const float sn = (float)(sin(theta) * (double)attn_factor);
                const int64_t a = mode_neox ? t : 2 * t, bb = mode_neox ? t + half : 2 * t + 1;
                const float xa = xr[a], xb = xr[bb];
                yr[a] = __fsub_rn(__fmul_rn(xa, cs), __fmul_rn(xb, sn));
                yr[bb] = __fadd_rn(__fmul_rn(xa, sn), __fmul_rn(xb, cs));
            } else {
                const int64_t i = n_rot + (t - half);
                yr[i] = xr[i];
            }
        }
    }
}

st_status st_cuda_rope(st_backend *b, st_tensor *dst, const st_tensor *x, const st_tensor *positions,
                       const st_rope_params *p, st_error *err) {
    // x, dst F32 [head_dim, n_head, M]; positions I32 [M]; p->freq_factors device [n_rot/2]
    st_cuda_ctx *c = cuda_ctx(b);
    ST_ASSERT(cuda_is_f32_rows(x) && cuda_is_f32_rows(dst) && cuda_same_shape(dst, x));
    ST_ASSERT(x->ne[3] == 1 && p != NULL);
    ST_ASSERT(p->mode == ST_ROPE_MODE_NORM || p->mode == ST_ROPE_MODE_NEOX);
    const int64_t head_dim = x->ne[0], n_head = x->ne[1], M = x->ne[2];
    ST_ASSERT(p->n_rot >= 0 && p->n_rot % 2 == 0 && p->n_rot <= head_dim && p->freq_base > 0.0f);
    ST_ASSERT(cuda_is_i32_index(positions) && positions->ne[0] >= M);
    const int64_t rows = n_head * M;
    if (rows == 0 || head_dim == 0) return ST_OK;
    const int64_t n_work = p->n_rot / 2 + (head_dim - p->n_rot);
    const int threads = n_work <= 32 ? 32 : n_work <= 64 ? 64 : 128;
    const unsigned int grid = (unsigned int)(rows < (1 << 30) ? rows : (1 << 30));
    rope_f32<<<grid, threads, 0, c->stream>>>(cuda_view(dst), cuda_view(x), (const int32_t *)positions->data,
                                              p->mode == ST_ROPE_MODE_NEOX ? 1 : 0, p->n_rot, p->freq_base,
                                              p->freq_scale, p->freq_factors, p->attn_factor);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}
