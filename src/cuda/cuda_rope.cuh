// RoPE's per-element work, shared by the rope kernels (cuda_norm_rope.cu) and the decode
// attention that ropes its own queries and key (cuda_attention_decode.cu), so that both
// produce the same bits.
#ifndef STRIDE_CUDA_ROPE_CUH
#define STRIDE_CUDA_ROPE_CUH

#include "cuda/cuda_common.cuh"

// Element t of a row's rope work (t < n_rot/2 + head_dim - n_rot): pair t rotated, or a
// pass-through dimension copied. xr may be yr.
__device__ __forceinline__ void rope_work(float *yr, const float *xr, int64_t t, int mode_neox, int n_rot,
                                          double pos, float freq_base, const float *__restrict__ freq_factors,
                                          float attn_factor) {
    const int half = n_rot / 2;
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

#endif /* STRIDE_CUDA_ROPE_CUH */
