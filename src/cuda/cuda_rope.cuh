// RoPE's per-element work, shared by the rope kernels (cuda_norm_rope.cu) and the decode
// attention that ropes its own queries and key (cuda_attention_decode.cu), so that both
// produce the same bits.
#ifndef STRIDE_CUDA_ROPE_CUH
#define STRIDE_CUDA_ROPE_CUH

#include "cuda/cuda_common.cuh"

// Pair t's (cos, sin) at position pos (already times freq_scale): the angle in double,
// cos and sin times attn_factor rounded once to f32.
__device__ __forceinline__ float2 rope_cos_sin(int64_t t, int n_rot, double pos, float freq_base,
                                               const float *__restrict__ freq_factors, float attn_factor) {
    double inv_freq = pow((double)freq_base, -2.0 * (double)t / (double)n_rot);
    if (freq_factors) inv_freq /= (double)freq_factors[t];
    const double theta = pos * inv_freq;
    return make_float2((float)(cos(theta) * (double)attn_factor), (float)(sin(theta) * (double)attn_factor));
}

// Element t of a row's rope work (t < n_rot/2 + head_dim - n_rot): pair t rotated by cs
// (its cos, sin), or a pass-through dimension copied (cs unused). xr may be yr.
__device__ __forceinline__ void rope_rotate(float *yr, const float *xr, int64_t t, int mode_neox, int n_rot,
                                            float2 cs) {
    const int half = n_rot / 2;
    if (t < half) {
        const int64_t a = mode_neox ? t : 2 * t, bb = mode_neox ? t + half : 2 * t + 1;
        const float xa = xr[a], xb = xr[bb];
        yr[a] = __fsub_rn(__fmul_rn(xa, cs.x), __fmul_rn(xb, cs.y));
        yr[bb] = __fadd_rn(__fmul_rn(xa, cs.y), __fmul_rn(xb, cs.x));
    } else {
        const int64_t i = n_rot + (t - half);
        yr[i] = xr[i];
    }
}

// rope_rotate with the angle formed here.
__device__ __forceinline__ void rope_work(float *yr, const float *xr, int64_t t, int mode_neox, int n_rot,
                                          double pos, float freq_base, const float *__restrict__ freq_factors,
                                          float attn_factor) {
    const float2 cs = t < n_rot / 2 ? rope_cos_sin(t, n_rot, pos, freq_base, freq_factors, attn_factor)
                                    : make_float2(0.0f, 0.0f);
    rope_rotate(yr, xr, t, mode_neox, n_rot, cs);
}

#endif /* STRIDE_CUDA_ROPE_CUH */
