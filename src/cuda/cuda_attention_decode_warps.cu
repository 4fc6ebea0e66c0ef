// Decode attention of one token over a short cache, a warp per few keys: F16 cache,
// head_dim 64, 128 or 256, a GQA group of at most 8 query heads (a block's RB of them, RB *
// head_dim <= 512), a bound n_kv of at most RK keys (plain CUDA C, f32 math).
//
// Grid (n_head_kv, group), block WK_WARPS warps: a block takes one of the group's query
// rows (RB = 1, a block a query head, the faster at short depths; the kernel is written for
// RB rows a block); every block of a kv head forms the new key, the first
// stores it. The keys below the bound are one round of RK = WK_WARPS * KPW keys: warp w
// takes keys [w * KPW, (w + 1) * KPW), each lane holding DL = head_dim / 32 contiguous
// dimensions [lane * DL, lane * DL + DL) of every one of those K and V rows in registers,
// so that all the loads are in flight at once, issued before the position is read (rows
// past the visible range are loaded and left out).
//   scores   a lane's partial dot products (DL dimensions) of its warp's KPW keys x R rows,
//            summed across the warp by a transposing butterfly (V = KPW * RB values, 31
//            shuffles at V = 32); lane l ends with value l >> (5 - log2 V)
//   softmax  a warp's (max, sum) of every row over its own keys (no block barrier)
//   P.V      every lane accumulates its DL dimensions of every row over its warp's keys, the
//            weights broadcast through shared memory
// and the warps' (max, sum, acc) combine once through shared memory, in warp order.
//
// The sums run in another order than the split kernel's (cuda_attention_decode.cu), which
// takes bounds past RK: a result within the attention tolerance of it, and the same bits for
// every bound up to RK. st_fused_rope_attention gives the bits of rope_store then this
// kernel: the prologue is dec_rope_row's (cuda_attention_decode.cuh), the rows spread over
// the warps.
#include <type_traits>

#include "cuda/cuda_attention_decode.cuh"
#include "cuda/cuda_backend.h"

#define WK_WARPS 16
#define WK_THREADS (WK_WARPS * ST_GPU_WARP_SIZE)
#define WK_MAX_ROW_DIMS 512 // RB * head_dim: the warps' accumulators in shared memory (32 KiB)

template <int D, int RB> struct wk_cfg {
    // the transposing butterfly and the shuffles below are written for 32 lanes
    static_assert(ST_GPU_WARP_SIZE == 32, "the warps kernel needs 32-lane warps (wave32)");
    static constexpr int DL = D / ST_GPU_WARP_SIZE;   // dims a lane
    static constexpr int KPW = RB <= 4 ? 8 : 4;       // keys a warp a round
    static constexpr int RK = WK_WARPS * KPW;          // keys a round
    static constexpr int V = KPW * RB;                 // partial scores a lane: value j * RB + r
    static constexpr int LOG2V = V == 32 ? 5 : V == 16 ? 4 : V == 8 ? 3 : V == 4 ? 2 : V == 2 ? 1 : 0;
    static constexpr int LOG2RB = RB == 8 ? 3 : RB == 4 ? 2 : RB == 2 ? 1 : 0;
    static constexpr int S = 5 - LOG2V;                // lane l holds value l >> S
    static_assert(DL == 2 || DL == 4 || DL == 8, "head_dim 64, 128 or 256");
    static_assert(V <= 32 && (1 << LOG2V) == V && (1 << LOG2RB) == RB, "powers of two, a value a lane at most");
    static_assert(RB * D <= WK_MAX_ROW_DIMS, "the warps' accumulators fit shared memory");
};

// A lane's DL halves of a cache row: 4 or 8 bytes.
template <int DL> struct wk_piece;
template <> struct wk_piece<2> {
    typedef uint32_t type;
    static __device__ __forceinline__ void to_f32(type u, float f[2]) {
        const float2 a = __half22float2(*(const __half2 *)&u);
        f[0] = a.x, f[1] = a.y;
    }
};
template <> struct wk_piece<4> {
    typedef uint2 type;
    static __device__ __forceinline__ void to_f32(type u, float f[4]) {
        const float2 a = __half22float2(*(const __half2 *)&u.x), b = __half22float2(*(const __half2 *)&u.y);
        f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
    }
};
template <> struct wk_piece<8> {
    typedef uint4 type;
    static __device__ __forceinline__ void to_f32(type u, float f[8]) {
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 a = __half22float2(*(const __half2 *)&w[i]);
            f[2 * i] = a.x, f[2 * i + 1] = a.y;
        }
    }
};

// src[0..DL) as the cache stores them (cuda_cache_store: the bits the new row has).
template <int DL> __device__ __forceinline__ typename wk_piece<DL>::type wk_cache_piece(const float *src) {
    typename wk_piece<DL>::type u;
#pragma unroll
    for (int e = 0; e < DL; e++) cuda_cache_store<ST_TYPE_F16>((char *)&u, e, src[e]);
    return u;
}

// The sum over the warp of each of v[0..V), transposed: lane l returns the sum of value
// l >> (5 - log2 V). A fixed tree: every lane's operands in a fixed order. A stage halves the
// C values a lane holds: the lanes with bit 16 C / V keep the upper half and take their
// partner's, the others the lower.
template <int V, int C> __device__ __forceinline__ void wk_transpose_stage(float (&v)[V], int lane) {
    if constexpr (C > 1) {
        constexpr int half = C / 2, off = 16 * C / V;
        const bool up = (lane & off) != 0;
#pragma unroll
        for (int i = 0; i < half; i++) {
            const float keep = up ? v[i + half] : v[i], send = up ? v[i] : v[i + half];
            v[i] = keep + st_gpu_shfl_xor(send, off);
        }
        wk_transpose_stage<V, half>(v, lane);
    }
}

template <int V, int LOG2V> __device__ __forceinline__ float wk_warp_transpose_sum(float (&v)[V], int lane) {
    wk_transpose_stage<V, V>(v, lane);
    float x = v[0];
#pragma unroll
    for (int off = 16 >> LOG2V; off > 0; off >>= 1) x += st_gpu_shfl_xor(x, off);
    return x;
}

// The prologue's rows with their loads first, taken where the rows have a qk-norm and their
// rotations come from rope_table: each row's x, norm weights and rotations are issued
// together and before the position is read, and the new key is formed whether or not the
// block will store it, so that nothing of the prologue waits for the position (three
// dependent L2 round trips become one). Rows without a qk-norm (llama-3.2-1b's) keep
// dec_rope_row: there the early loads save little and the layer is no faster. The same
// arithmetic in the same order as dec_rope_row: the same bits.

// dec_rope_row<D, true, L2> with a norm (w; whole_sc as there), by one warp (D <= 256),
// every load issued first.
template <int D, bool L2>
__device__ __forceinline__ void wk_rope_row_early(float *y, const float *__restrict__ x, const float *__restrict__ w,
                                                  const float *whole_sc, float *tmp, int lane, const dec_rope_args &ra) {
    constexpr int E = D / ST_GPU_WARP_SIZE;
    const int half = ra.n_rot / 2, n_work = half + (D - ra.n_rot);
    float xv[E], wv[E];
    float2 csv[E];
#pragma unroll
    for (int k = 0; k < E; k++) {
        const int i = lane + k * ST_GPU_WARP_SIZE;
        xv[k] = L2 ? st_gpu_load_l2(x + i) : x[i];
        wv[k] = w[i];
        csv[k] = i < half ? ra.cs[i] : make_float2(0.0f, 0.0f);
    }
    // rope_store's order (128 threads' above D = 128), or the whole q's or k's scale
    const float sc = whole_sc ? *whole_sc : cuda_rms_scale(dec_sum_sq_warp<D>(xv), D, ra.eps);
#pragma unroll
    for (int k = 0; k < E; k++) tmp[lane + k * ST_GPU_WARP_SIZE] = (xv[k] * sc) * wv[k];
    st_gpu_syncwarp();
#pragma unroll
    for (int k = 0; k < E; k++) {
        const int i = lane + k * ST_GPU_WARP_SIZE;
        if (i < n_work) rope_rotate(y, tmp, i, ra.mode_neox, ra.n_rot, csv[k]);
    }
    st_gpu_syncwarp(); // tmp is free again
}

// ROPE: the queries and the new key come unroped (dec_rope_row), and the block stores the
// new key and value (as dec_rope_prepare does for a range of one split); TABLE: with their
// rotations from rope_table (ra.cs), as the forward pass gives them. EARLY: launched early
// (st_cuda_ctx's early_launch), the block loads its K/V rows while the kernel ahead (q/k/v)
// still runs, and waits for it before it reads anything that kernel writes; the cache rows
// the step has not written yet are the ones the prologue replaces (the new position's) or
// masks (later positions), as without the early launch.
// PAGED: every token its own sequence of a paged cache (attn_pages), a token a z of the
// grid; the block's views start at its token. A warp's KPW keys (t0 a multiple of KPW,
// which divides ST_KV_BLOCK_TOKENS) lie in one block of the cache, so only the first
// key's slot comes from the table.
template <int D, int RB, bool ROPE, bool TABLE, bool EARLY, bool PAGED>
__global__ void __launch_bounds__(WK_THREADS, 1)
    attn_decode_warps_kernel(st_cuda_view q, st_cuda_view kc, st_cuda_view vc, const int32_t *__restrict__ positions,
                             int64_t n_kv, int32_t window, float scale, float softcap, dec_rope_args ra,
                             st_cuda_view dst, const attn_pages pg) {
    static_assert(ST_KV_BLOCK_TOKENS % wk_cfg<D, RB>::KPW == 0, "a warp's keys in one block of a paged cache");
    using cfg = wk_cfg<D, RB>;
    using piece = wk_piece<cfg::DL>;
    constexpr int DL = cfg::DL, KPW = cfg::KPW, V = cfg::V, S = cfg::S;
    __shared__ __align__(16) float Qs[RB * D];                // the block's queries, f32 (rows >= nr: zeros)
    __shared__ __align__(16) float k_new[D];                  // the new key, normed and roped
    __shared__ __align__(16) float big[WK_WARPS * RB * D];    // the rope scratch, then the warps' acc
    __shared__ float Pw[WK_WARPS][V];                         // a warp's weights
    __shared__ float2 ml_s[WK_WARPS][RB];                     // the warps' (max, sum)
    cuda_early_release(); // the output projection, launched early, may take the other SMs now
    const int m0 = PAGED ? (int)blockIdx.z : 0;
    const int32_t *blocks = PAGED ? attn_blocks(pg, m0) : NULL;
    if (PAGED) {
        q.data += (int64_t)m0 * q.nb2;
        dst.data += (int64_t)m0 * dst.nb2;
        ra.k.data += (int64_t)m0 * ra.k.nb2;
        ra.v.data += (int64_t)m0 * ra.v.nb2;
        positions += m0;
    }
    const int group = (int)(q.ne1 / kc.ne1);
    const int kvh = blockIdx.x, tid = threadIdx.x;
    const int r0 = blockIdx.y * RB, nr = min(RB, group - r0); // this block's query rows of the group
    const int64_t h0 = (int64_t)kvh * group + r0;             // ... the first one's head
    const int warp = tid / ST_GPU_WARP_SIZE, lane = tid % ST_GPU_WARP_SIZE;
    const char *k_head = kc.data + (int64_t)kvh * kc.nb1, *v_head = vc.data + (int64_t)kvh * vc.nb1;

    // this warp's keys [t0, t0 + KPW), those below the bound loaded before the position is read,
    // by row pointers stepped a position at a time: where all of the warp's keys are below the
    // bound (every warp, when the bound is a round: the recorded decode step's), no branch and
    // no 64-bit multiply a key
    const int t0 = warp * KPW;
    const int rows = (int)(PAGED || n_kv < kc.ne2 ? n_kv : kc.ne2);
    const int64_t k_step = kc.nb2, v_step = vc.nb2;
    const int64_t slot0 = PAGED ? attn_slot(blocks, t0) : t0;
    const char *kp = k_head + slot0 * k_step + lane * DL * 2, *vp = v_head + slot0 * v_step + lane * DL * 2;
    typename piece::type kr[KPW], vr[KPW];
    auto load_keys = [&](auto checked) {
#pragma unroll
        for (int j = 0; j < KPW; j++, kp += k_step, vp += v_step) {
            if (!decltype(checked)::value || t0 + j < rows) {
                kr[j] = *(const typename piece::type *)kp;
                vr[j] = *(const typename piece::type *)vp;
            }
        }
    };
    if (t0 + KPW <= rows) load_keys(std::false_type{});
    else load_keys(std::true_type{});
    // launched early: q/k/v written and visible from here, read through L2 (the rows below);
    // the position and the rotations keep the read-only path: written at the step's start,
    // before any kernel of the step reads them, no SM holds a line of them from before
    if (EARLY) cuda_early_wait();
    __shared__ float whole_red[2 * CUDA_NORM_MAX_THREADS / ST_GPU_WARP_SIZE], whole_sc[2];
    if (ROPE && ra.whole_norm) // (every thread: the same for the block)
        dec_whole_norm_scales<EARLY>((const float *)q.data, (int)(q.ne1 * D), (const float *)ra.k.data,
                                     (int)(ra.k.ne1 * D), ra.eps, whole_red, whole_sc);
    const bool early = ROPE && TABLE && ra.q_norm != NULL && ra.k_norm != NULL;
    if (early) { // the block's queries and the new key, a warp each
        for (int j = warp; j < nr + 1; j += WK_WARPS) {
            const bool q_row = j < nr;
            const float *x = q_row ? (const float *)(q.data + (h0 + j) * q.nb1)
                                   : (const float *)(ra.k.data + (int64_t)kvh * ra.k.nb1);
            const float *w = q_row ? dec_norm_w(ra.q_norm, ra, h0 + j, D) : dec_norm_w(ra.k_norm, ra, kvh, D);
            const float *sc = ra.whole_norm ? whole_sc + (q_row ? 0 : 1) : NULL;
            wk_rope_row_early<D, EARLY>(q_row ? Qs + j * D : k_new, x, w, sc, big + warp * D, lane, ra);
        }
    }
    const int p = positions[0];
    int lo, hi;
    attn_visible_range(p, n_kv, window, &lo, &hi);
    if (hi >= rows) hi = rows - 1;

    bool store = false;
    const int64_t slot = PAGED ? (p >= 0 ? attn_slot(blocks, p) : -1) : p; // where the new key goes
    if (ROPE) { // as dec_rope_prepare, the rows a warp each (formed above when they were early)
        const int64_t n_ctx = kc.ne2;
        store = p >= 0 && slot >= 0 && slot < n_ctx;
        if (kvh == 0 && blockIdx.y == 0 && tid == 0 && !store)
            cuda_report_op_error(ra.op_err, ST_CUDA_OP_ERROR_KV_POSITION, (int)slot, 0, n_ctx);
        const double pos = (double)p * (double)ra.freq_scale;
        const int n_rows = early ? 0 : nr + (store ? 1 : 0);
        for (int j = warp; j < n_rows; j += WK_WARPS) {
            float *tmp = big + warp * D;
            if (j < nr) {
                const int64_t h = h0 + j;
                dec_rope_row<D, TABLE, EARLY>(Qs + j * D, (const float *)(q.data + h * q.nb1),
                                              dec_norm_w(ra.q_norm, ra, h, D), ra.whole_norm ? whole_sc : NULL, tmp,
                                              NULL, warp * ST_GPU_WARP_SIZE, ST_GPU_WARP_SIZE, ra, pos);
            } else {
                dec_rope_row<D, TABLE, EARLY>(k_new, (const float *)(ra.k.data + (int64_t)kvh * ra.k.nb1),
                                              dec_norm_w(ra.k_norm, ra, kvh, D), ra.whole_norm ? whole_sc + 1 : NULL,
                                              tmp, NULL, warp * ST_GPU_WARP_SIZE, ST_GPU_WARP_SIZE, ra, pos);
            }
        }
        for (int i = nr * D + tid; i < RB * D; i += WK_THREADS) Qs[i] = 0.0f;
    } else {
        for (int i = tid; i < RB * D; i += WK_THREADS) {
            const int r = i / D, d = i % D;
            Qs[i] = r < nr ? ((const float *)(q.data + (h0 + r) * q.nb1))[d] : 0.0f;
        }
    }
    __syncthreads(); // Qs and k_new complete
    if (ROPE && store) {
        const float *vrow = (const float *)(ra.v.data + (int64_t)kvh * ra.v.nb1);
        char *ko = kc.data + (int64_t)kvh * kc.nb1 + slot * kc.nb2;
        char *vo = vc.data + (int64_t)kvh * vc.nb1 + slot * vc.nb2;
        for (int d = tid; d < D && blockIdx.y == 0; d += WK_THREADS) { // (the group's first block)
            cuda_cache_store<ST_TYPE_F16>(ko, d, k_new[d]);
            cuda_cache_store<ST_TYPE_F16>(vo, d, EARLY ? st_gpu_load_l2(vrow + d) : vrow[d]);
        }
        if (p >= t0 && p < t0 + KPW) { // the key and value the cache now holds
            float v_lane[DL]; // (launched early: through L2, as the rows above)
#pragma unroll
            for (int e = 0; e < DL; e++) v_lane[e] = EARLY ? st_gpu_load_l2(vrow + lane * DL + e) : 0.0f;
#pragma unroll
            for (int j = 0; j < KPW; j++)
                if (t0 + j == p) {
                    kr[j] = wk_cache_piece<DL>(k_new + lane * DL);
                    vr[j] = wk_cache_piece<DL>(EARLY ? v_lane : vrow + lane * DL);
                }
        }
    }

    float qv[RB][DL];
#pragma unroll
    for (int r = 0; r < RB; r++)
#pragma unroll
        for (int e = 0; e < DL; e++) qv[r][e] = Qs[r * D + lane * DL + e];

    float part[V]; // value j * RB + r: key t0 + j, row r
#pragma unroll
    for (int j = 0; j < KPW; j++) {
        float kf[DL];
        piece::to_f32(kr[j], kf);
#pragma unroll
        for (int r = 0; r < RB; r++) {
            float d = 0.0f;
#pragma unroll
            for (int e = 0; e < DL; e++) d = fmaf(qv[r][e], kf[e], d);
            part[j * RB + r] = d;
        }
    }
    const float dot = wk_warp_transpose_sum<V, cfg::LOG2V>(part, lane);
    const int idx = lane >> S, jo = idx / RB, ro = idx % RB; // this lane's score: key t0 + jo, row ro
    const bool seen = t0 + jo >= lo && t0 + jo <= hi;
    const float x = seen ? attn_score_log2(dot, scale, softcap) : -INFINITY;

    // each row's max over the warp's keys (the lanes of row ro differ in the key bits of the
    // lane, above S + log2 RB), then the weights through shared memory
    float mx = x;
#pragma unroll
    for (int off = 16; off >= (1 << (S + cfg::LOG2RB)); off >>= 1)
        mx = fmaxf(mx, st_gpu_shfl_xor(mx, off));
    float m[RB], m_own = 0.0f;
#pragma unroll
    for (int r = 0; r < RB; r++) {
        m[r] = st_gpu_shfl(mx, r << S);
        const float m_use = m[r] == -INFINITY ? 0.0f : m[r]; // nothing seen: exp2(-inf) = 0
        if (r == ro) m_own = m_use;
    }
    if ((lane & ((1 << S) - 1)) == 0) Pw[warp][idx] = exp2f(x - m_own);
    st_gpu_syncwarp();
    float l[RB], acc[RB][DL];
#pragma unroll
    for (int r = 0; r < RB; r++) {
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < KPW; j++) sum += Pw[warp][j * RB + r];
        l[r] = sum;
#pragma unroll
        for (int e = 0; e < DL; e++) acc[r][e] = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < KPW; j++) {
        if (t0 + j < lo || t0 + j > hi) continue; // a row the range does not hold: not even zero times it
        float vf[DL];
        piece::to_f32(vr[j], vf);
#pragma unroll
        for (int r = 0; r < RB; r++) {
            const float w = Pw[warp][j * RB + r];
#pragma unroll
            for (int e = 0; e < DL; e++) acc[r][e] = fmaf(w, vf[e], acc[r][e]);
        }
    }

    // the warps' states, combined in warp order
    __syncthreads(); // the rope scratch in big is free
#pragma unroll
    for (int r = 0; r < RB; r++)
#pragma unroll
        for (int e = 0; e < DL; e++) big[(warp * RB + r) * D + lane * DL + e] = acc[r][e];
    if (lane < RB) {
#pragma unroll
        for (int r = 0; r < RB; r++)
            if (r == lane) ml_s[warp][r] = make_float2(m[r], l[r]);
    }
    __syncthreads();
    for (int i = tid; i < nr * D; i += WK_THREADS) {
        const int r = i / D, d = i % D;
        float mm = -INFINITY;
        for (int w = 0; w < WK_WARPS; w++) mm = fmaxf(mm, ml_s[w][r].x);
        float a = 0.0f, lsum = 0.0f;
        if (mm != -INFINITY)
            for (int w = 0; w < WK_WARPS; w++) {
                const float2 ml = ml_s[w][r];
                const float f = exp2f(ml.x - mm); // a warp that saw nothing: 0
                a = fmaf(f, big[(w * RB + r) * D + d], a);
                lsum = fmaf(f, ml.y, lsum);
            }
        ((float *)(dst.data + (h0 + r) * dst.nb1))[d] = lsum > 0.0f ? a / lsum : 0.0f; // a row that sees nothing: zeros
    }
}

// ---- host side ------------------------------------------------------------------------------

// The rows a lane's scores take for a group of R query heads: R rounded up to a power of two.
static int wk_rows_bucket(int R) { return R <= 1 ? 1 : R <= 2 ? 2 : R <= 4 ? 4 : R <= 8 ? 8 : 0; }

// The query rows of a group a block takes: one (a block a query head).
#define WK_BLOCK_ROWS 1

// A batch of this many paged tokens or more takes the split kernel instead: its blocks of
// (token, kv head, split), each reading its keys once for the group's query heads, fill the
// SMs; the warps kernel's block a query head would read them once a head.
#define WK_PAGED_MAX_TOKENS 8

int dec_warps_round_keys(const st_cuda_ctx *c, const st_tensor *q, const st_tensor *k_cache, const st_tensor *v_cache,
                         bool paged) {
    const int64_t D = q->ne[0], M = q->ne[2], group = q->ne[1] / k_cache->ne[1];
    const int rb = WK_BLOCK_ROWS;
    if ((M != 1 && !(paged && M < WK_PAGED_MAX_TOKENS)) || k_cache->type != ST_TYPE_F16 ||
        v_cache->type != ST_TYPE_F16 || (D != 64 && D != 128 && D != 256) || wk_rows_bucket((int)group) == 0 ||
        rb * D > WK_MAX_ROW_DIMS)
        return 0;
    return WK_WARPS * (rb <= 4 ? 8 : 4);
}

// blocks: the blocks a kv head (its group's rows, RB a block).
template <int D, int RB, bool PAGED>
static void wk_launch(st_cuda_ctx *c, int blocks, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                      const st_tensor *v_cache, const int32_t *pos, const attn_pages &pg, const st_attn_params *p,
                      const dec_rope_args *ra) {
    const dim3 grid((unsigned int)k_cache->ne[1], (unsigned int)blocks,
                    PAGED ? (unsigned int)q->ne[2] : 1u); // (kv head, rows, token)
    const st_cuda_view vq = cuda_view(q), vk = cuda_view(k_cache), vv = cuda_view(v_cache), vd = cuda_view(dst);
    if (ra && ra->cs && (c->tune.early_launch & CUDA_EARLY_ATTENTION))
        (void)st_gpu_launch_early(attn_decode_warps_kernel<D, RB, true, true, true, PAGED>, grid, WK_THREADS, 0,
                                  c->stream, vq, vk, vv, pos, p->n_kv, p->window, p->scale, p->softcap, *ra, vd,
                                  pg); // (its error: ST_GPU_CHECK_LAUNCH)
    else if (ra && ra->cs)
        attn_decode_warps_kernel<D, RB, true, true, false, PAGED><<<grid, WK_THREADS, 0, c->stream>>>(
            vq, vk, vv, pos, p->n_kv, p->window, p->scale, p->softcap, *ra, vd, pg);
    else if (ra)
        attn_decode_warps_kernel<D, RB, true, false, false, PAGED><<<grid, WK_THREADS, 0, c->stream>>>(
            vq, vk, vv, pos, p->n_kv, p->window, p->scale, p->softcap, *ra, vd, pg);
    else
        attn_decode_warps_kernel<D, RB, false, false, false, PAGED><<<grid, WK_THREADS, 0, c->stream>>>(
            vq, vk, vv, pos, p->n_kv, p->window, p->scale, p->softcap, dec_rope_args{}, vd, pg);
}

st_status dec_warps_launch(st_cuda_ctx *c, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                           const st_tensor *v_cache, const int32_t *pos, const attn_pages *pg, const st_attn_params *p,
                           const dec_rope_args *ra, st_error *err) {
    const int64_t D = q->ne[0];
    const int group = (int)(q->ne[1] / k_cache->ne[1]), rows = WK_BLOCK_ROWS, rb = wk_rows_bucket(rows);
    const int rk = dec_warps_round_keys(c, q, k_cache, v_cache, pg != NULL);
    ST_ASSERT(rk > 0 && p->n_kv <= rk);
    ST_ASSERT(rows == group || rows == rb); // a block's first row is blockIdx.y * RB
    ST_ASSERT(!pg || pg->seq);              // paged: every token its own sequence
    const int blocks = (group + rows - 1) / rows;
    const attn_pages none = {};
#define WK_CASE(d, r)                                                                                             \
    if (D == d && rb == r) {                                                                                      \
        if (pg) wk_launch<d, r, true>(c, blocks, dst, q, k_cache, v_cache, pos, *pg, p, ra);                      \
        else wk_launch<d, r, false>(c, blocks, dst, q, k_cache, v_cache, pos, none, p, ra);                       \
    }
    WK_CASE(64, WK_BLOCK_ROWS) WK_CASE(128, WK_BLOCK_ROWS) WK_CASE(256, WK_BLOCK_ROWS)
#undef WK_CASE
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}
