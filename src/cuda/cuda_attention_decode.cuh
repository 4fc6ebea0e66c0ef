// Shared by the two decode attention kernels (cuda_attention_decode.cu: the split kernel
// and its combine kernel; cuda_attention_decode_warps.cu: a warp per few keys, one token):
// the plan of a range's splits, which both kernels and the combine make alike, and the rope
// prologue that forms the queries and the new key as rope_store does (the same bits).
#ifndef STRIDE_CUDA_ATTENTION_DECODE_CUH
#define STRIDE_CUDA_ATTENTION_DECODE_CUH

#include "cuda/cuda_attention.cuh"
#include "cuda/cuda_rope.cuh"

#define DEC_MIN_SPLIT_KEYS 64
/* One split takes a range of up to this many chunks alone (DEC_MIN_SPLIT_KEYS keys where
 * that is more): one block walking a second 64-key chunk beat two splits and the combine
 * kernel by 0.5-1.1 us a layer at depths 64-127 for head_dim 64 and 128 (F16), and was
 * within 0.25 us where a chunk has twice the rows (bench/decode-one-split-h200.md). */
#define DEC_ONE_SPLIT_CHUNKS 2

// The most keys one split takes alone (dec_make_plan), for chunks of C keys.
__host__ __device__ constexpr int dec_one_split_keys(int C) {
    return DEC_ONE_SPLIT_CHUNKS * C > DEC_MIN_SPLIT_KEYS ? DEC_ONE_SPLIT_CHUNKS * C : DEC_MIN_SPLIT_KEYS;
}

// Which keys split s of a block covers: [lo + s*cl, min(lo + (s+1)*cl, hi + 1)), s < n_eff.
typedef struct dec_plan {
    int lo, hi, cl, n_eff;
} dec_plan;

__device__ __forceinline__ dec_plan dec_make_plan(const int32_t *__restrict__ positions, int M, int64_t n_kv,
                                                  int32_t window, int n_split, int C) {
    int L = INT_MAX, H = INT_MIN;
    for (int m = 0; m < M; m++) {
        int lo, hi;
        attn_visible_range(positions[m], n_kv, window, &lo, &hi);
        if (hi >= lo) {
            L = min(L, lo);
            H = max(H, hi);
        }
    }
    dec_plan pl;
    if (H < L) { // nothing visible: split 0 writes an empty partial, the output is zeros
        pl.lo = 0;
        pl.hi = -1;
        pl.cl = 0;
        pl.n_eff = 1;
        return pl;
    }
    const int len = H - L + 1;
    const int n =
        len <= dec_one_split_keys(C) ? 1 : min(n_split, (len + DEC_MIN_SPLIT_KEYS - 1) / DEC_MIN_SPLIT_KEYS);
    const int per = (len + n - 1) / n;
    pl.lo = L;
    pl.hi = H;
    pl.cl = (per + C - 1) / C * C;
    pl.n_eff = (len + pl.cl - 1) / pl.cl; // <= n; no split is empty
    return pl;
}

// ---- the rope_store step folded in (st_fused_rope_attention, one token) --------------------

// What rope_store would have done before attention: q and the new k, v as the projections
// left them ([D, n_head(_kv), 1] F32 views), the per-head norms (or NULL) and the RoPE.
typedef struct dec_rope_args {
    st_cuda_view k, v;
    const float *q_norm, *k_norm;
    float eps;
    int mode_neox, n_rot;
    float freq_base, freq_scale, attn_factor;
    const float *freq_factors;
    const float2 *cs;               /* [n_rot/2] the rotations at the position (rope_table), or NULL */
    st_cuda_op_error *op_err;
} dec_rope_args;

// One head row as rope_store forms it: y = rope(w ? rmsnorm(x) * w : x) at position pos,
// by `n_thr` threads starting at thread `t0` (32 for D <= 128, one warp; 128 above: the
// thread count st_cuda_rope_store's norm uses, so the same partial sums and tree give the
// same bits). tmp [D] is shared memory; `red` one float per warp of the group.
template <int D>
__device__ void dec_rope_row(float *y, const float *__restrict__ x, const float *__restrict__ w, float *tmp,
                             float *red, int t0, int n_thr, const dec_rope_args &ra, double pos) {
    const int t = threadIdx.x - t0;
    const float *src = x;
    if (w) {
        float ss = 0.0f;
        for (int i = t; i < D; i += n_thr) ss = fmaf(x[i], x[i], ss);
        ss = cuda_warp_sum(ss);
        float total;
        if (n_thr == ST_GPU_WARP_SIZE) {
            total = 0.0f + ss;
        } else { // the block tree of block_sum_f32: warp sums added in warp order
            if (t % ST_GPU_WARP_SIZE == 0) red[t / ST_GPU_WARP_SIZE] = ss;
            __syncthreads();
            total = 0.0f;
            for (int i = 0; i < n_thr / ST_GPU_WARP_SIZE; i++) total += red[i];
        }
        const float sc = (float)(1.0 / sqrt((double)total / (double)D + (double)ra.eps));
        for (int i = t; i < D; i += n_thr) tmp[i] = (x[i] * sc) * w[i];
        if (n_thr == ST_GPU_WARP_SIZE) __syncwarp(); else __syncthreads();
        src = tmp;
    }
    const int n_work = ra.n_rot / 2 + (D - ra.n_rot);
    for (int i = t; i < n_work; i += n_thr) {
        if (ra.cs) rope_rotate(y, src, i, ra.mode_neox, ra.n_rot, i < ra.n_rot / 2 ? ra.cs[i] : make_float2(0.0f, 0.0f));
        else rope_work(y, src, i, ra.mode_neox, ra.n_rot, pos, ra.freq_base, ra.freq_factors, ra.attn_factor);
    }
    if (n_thr == ST_GPU_WARP_SIZE) __syncwarp(); else __syncthreads(); // tmp and red are free again
}

// ---- cuda_attention_decode_warps.cu ---------------------------------------------------------

// The keys a round of the warps kernel takes for these operands (one token, F16 cache,
// head_dim 64 or 128, a group of at most 8 query heads, group * head_dim <= 512), 0 where it
// does not take them. Shapes only: never n_kv.
int dec_warps_round_keys(const st_tensor *q, const st_tensor *k_cache, const st_tensor *v_cache);
// Launches it over n_split splits of the plan made with C = dec_warps_round_keys (the
// caller launches the combine kernel when n_split > 1); ra: the rope folded in, as the split
// kernel's.
st_status dec_warps_launch(st_cuda_ctx *c, int n_split, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                           const st_tensor *v_cache, const int32_t *pos, const st_attn_params *p, float *part_acc,
                           float2 *part_ml, const dec_rope_args *ra, st_error *err);

#endif /* STRIDE_CUDA_ATTENTION_DECODE_CUH */
