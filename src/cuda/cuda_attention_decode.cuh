// Shared by the two decode attention kernels (cuda_attention_decode.cu: the split kernel;
// cuda_attention_decode_warps.cu: a warp per few keys, one token over a short cache): the
// rope prologue that forms the queries and the new key as rope_store does (the same bits).
#ifndef STRIDE_CUDA_ATTENTION_DECODE_CUH
#define STRIDE_CUDA_ATTENTION_DECODE_CUH

#include "cuda/cuda_attention.cuh"
#include "cuda/cuda_rope.cuh"

// ---- the rope_store step folded in (st_fused_rope_attention, one token) --------------------

// What rope_store would have done before attention: q and the new k, v as the projections
// left them ([D, n_head(_kv), 1] F32 views), the q/k norms (or NULL) and the RoPE. The norms
// are per head ([D] weights), or with whole_norm over the token's whole q and k (weights
// [D n_head], [D n_head_kv]; heads packed: olmoe).
typedef struct dec_rope_args {
    st_cuda_view k, v;
    const float *q_norm, *k_norm;
    int whole_norm;
    float eps;
    int mode_neox, n_rot;
    float freq_base, freq_scale, attn_factor;
    const float *freq_factors;
    const float2 *cs;               /* [n_rot/2] the rotations at the position (rope_table), or NULL */
    st_cuda_op_error *op_err;
} dec_rope_args;

// The sum of squares of a head row [D] in the order of rope_store's norm over G =
// norm_threads(D) threads (32 up to D = 128, else 128: thread t its elements t, t + G, ...,
// each warp's xor tree, then the warps' sums in order from 0.0f), formed by one warp: lane
// l stands for the G / 32 threads l, l + 32, ... of that group. xv[k] = x[lane + 32 k].
template <int D> __device__ __forceinline__ float dec_sum_sq_warp(const float (&xv)[D / ST_GPU_WARP_SIZE]) {
    constexpr int E = D / ST_GPU_WARP_SIZE, VW = D <= 128 ? 1 : 128 / ST_GPU_WARP_SIZE; // the group's warps
    static_assert(D % ST_GPU_WARP_SIZE == 0 && D <= 1024, "norm_threads(D): 32 or 128");
    float total = 0.0f;
#pragma unroll
    for (int vw = 0; vw < VW; vw++) {
        float ss = 0.0f;
#pragma unroll
        for (int k = vw; k < E; k += VW) ss = fmaf(xv[k], xv[k], ss);
        total += cuda_warp_sum(ss);
    }
    return total;
}

// The scales of whole q/k norms (dec_rope_args.whole_norm): of the token's q [nq] into
// sc[0], of its k [nk] into sc[1] (shared memory), each sum of squares in st_cuda_rms_norm's
// order over cuda_norm_threads(n) threads (warp w of this block standing for its warps w,
// w + warps, ...), so that they are the scales the unfused norms form, bit for bit. Every
// thread of the block calls it. red: shared, 2 CUDA_NORM_MAX_THREADS / 32 floats. L2: q and
// k read through L2 (a kernel launched early, after cuda_early_wait).
template <bool L2>
__device__ void dec_whole_norm_scales(const float *q, int nq, const float *k, int nk, float eps, float *red,
                                      float *sc) {
    constexpr int NW = CUDA_NORM_MAX_THREADS / ST_GPU_WARP_SIZE;
    const int warp = threadIdx.x / ST_GPU_WARP_SIZE, lane = threadIdx.x % ST_GPU_WARP_SIZE;
    const int warps = blockDim.x / ST_GPU_WARP_SIZE;
    for (int v = 0; v < 2; v++) {
        const float *x = v ? k : q;
        const int n = v ? nk : nq, G = cuda_norm_threads(n);
        for (int w = warp; w < G / ST_GPU_WARP_SIZE; w += warps) {
            float ss = 0.0f;
            for (int i = w * ST_GPU_WARP_SIZE + lane; i < n; i += G) {
                const float xi = L2 ? st_gpu_load_l2(x + i) : x[i];
                ss = fmaf(xi, xi, ss);
            }
            ss = cuda_warp_sum(ss);
            if (lane == 0) red[v * NW + w] = ss;
        }
    }
    __syncthreads();
    if (threadIdx.x < 2) {
        const int v = threadIdx.x, n = v ? nk : nq, G = cuda_norm_threads(n);
        float total = 0.0f; // cuda_group_sum_f32's order: the warps' sums from 0.0f
        for (int w = 0; w < G / ST_GPU_WARP_SIZE; w++) total += red[v * NW + w];
        sc[v] = cuda_rms_scale(total, n, eps);
    }
    __syncthreads();
}

// Head h's norm weights [D] of a norm w: per head, w itself; whole, its h-th piece.
__device__ __forceinline__ const float *dec_norm_w(const float *w, const dec_rope_args &ra, int64_t h, int D) {
    return w && ra.whole_norm ? w + h * D : w;
}

// One head row as rope_store forms it: y = rope(w ? rmsnorm(x) * w : x) at position pos,
// by `n_thr` threads starting at thread `t0` (one warp for D <= 128; 128 above: the
// thread count st_cuda_rope_store's norm uses, so the same partial sums and tree give the
// same bits; or one warp above 128 too, summing in those 128 threads' order). whole_sc:
// the scale of a whole q/k norm (dec_whole_norm_scales; w then this head's weights), or
// NULL for a norm per head. tmp [D] is shared memory; `red` one float per warp of the
// group. TABLE: the caller guarantees ra.cs (the rotations from rope_table), so that the
// angles' double math, which the kernel would call out to, is not compiled in. L2: x is
// read through L2 (a kernel launched early, after cuda_early_wait: cuda_common.cuh), and
// without a norm copied into tmp first, so that the rotation reads it there.
template <int D, bool TABLE = false, bool L2 = false>
__device__ void dec_rope_row(float *y, const float *__restrict__ x, const float *__restrict__ w,
                             const float *whole_sc, float *tmp, float *red, int t0, int n_thr, const dec_rope_args &ra,
                             double pos) {
    const int t = threadIdx.x - t0;
    const float *src = x;
    if (L2 && !w) {
        for (int i = t; i < D; i += n_thr) tmp[i] = st_gpu_load_l2(x + i);
        if (n_thr == ST_GPU_WARP_SIZE) st_gpu_syncwarp(); else __syncthreads();
        src = tmp;
    }
    if (w && whole_sc) {
        const float sc = *whole_sc;
        for (int i = t; i < D; i += n_thr) tmp[i] = ((L2 ? st_gpu_load_l2(x + i) : x[i]) * sc) * w[i];
        if (n_thr == ST_GPU_WARP_SIZE) st_gpu_syncwarp(); else __syncthreads();
        src = tmp;
    } else if (w) {
        float total;
        if (D > 128 && n_thr == ST_GPU_WARP_SIZE) { // one warp as the norm's 128 threads
            float xv[D / ST_GPU_WARP_SIZE];
#pragma unroll
            for (int k = 0; k < D / ST_GPU_WARP_SIZE; k++)
                xv[k] = L2 ? st_gpu_load_l2(x + t + k * ST_GPU_WARP_SIZE) : x[t + k * ST_GPU_WARP_SIZE];
            total = dec_sum_sq_warp<D>(xv);
        } else {
            float ss = 0.0f;
            for (int i = t; i < D; i += n_thr) {
                const float xi = L2 ? st_gpu_load_l2(x + i) : x[i];
                ss = fmaf(xi, xi, ss);
            }
            total = cuda_group_sum_f32(ss, red, t, n_thr); // block_sum_f32's order
        }
        const float sc = cuda_rms_scale(total, D, ra.eps);
        for (int i = t; i < D; i += n_thr) tmp[i] = ((L2 ? st_gpu_load_l2(x + i) : x[i]) * sc) * w[i];
        if (n_thr == ST_GPU_WARP_SIZE) st_gpu_syncwarp(); else __syncthreads();
        src = tmp;
    }
    const int n_work = ra.n_rot / 2 + (D - ra.n_rot);
    for (int i = t; i < n_work; i += n_thr) {
        if (TABLE || ra.cs) rope_rotate(y, src, i, ra.mode_neox, ra.n_rot, i < ra.n_rot / 2 ? ra.cs[i] : make_float2(0.0f, 0.0f));
        else rope_work(y, src, i, ra.mode_neox, ra.n_rot, pos, ra.freq_base, ra.freq_factors, ra.attn_factor);
    }
    if (n_thr == ST_GPU_WARP_SIZE) st_gpu_syncwarp(); else __syncthreads(); // tmp and red are free again
}

// ---- cuda_attention_decode_warps.cu ---------------------------------------------------------

// The most keys (a bound n_kv) the warps kernel takes for these operands (one token, F16
// cache, head_dim 64, 128 or 256, a group of at most 8 query heads): 128; 0 where it does not
// take them.
// paged: the tokens of q are each their own sequence of a paged cache (a block each).
int dec_warps_round_keys(const st_cuda_ctx *c, const st_tensor *q, const st_tensor *k_cache, const st_tensor *v_cache,
                         bool paged);
// Launches it (p->n_kv <= dec_warps_round_keys); ra: the rope folded in, as the split kernel's;
// pg: paged (every token its own sequence), or NULL.
st_status dec_warps_launch(st_cuda_ctx *c, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                           const st_tensor *v_cache, const int32_t *pos, const attn_pages *pg, const st_attn_params *p,
                           const dec_rope_args *ra, st_error *err);

#endif /* STRIDE_CUDA_ATTENTION_DECODE_CUH */
