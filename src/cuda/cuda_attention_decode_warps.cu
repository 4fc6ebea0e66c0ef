// Decode attention of one token, a warp per few keys: F16 cache, head_dim 64 or 128, a GQA
// group of R <= 8 query heads with R * head_dim <= 512 (plain CUDA C, f32 math).
//
// Grid (n_split, n_head_kv) and partials as the split kernel's (cuda_attention_decode.cu),
// whose plan and combine kernel it shares with rounds of RK keys in place of chunks; block
// WK_WARPS warps. A round of the block's split is RK = WK_WARPS * KPW keys: warp w takes keys
// [base + w * KPW, base + (w + 1) * KPW), each lane holding DL = head_dim / 32 contiguous
// dimensions [lane * DL, lane * DL + DL) of every one of those K and V rows in registers, so
// that the whole round's loads are in flight at once (split 0's first round before the
// position is read: keys [0, RK) are the first round of any range that starts at 0).
//   scores   a lane's partial dot products (DL dimensions) of its warp's KPW keys x R rows,
//            summed across the warp by a transposing butterfly (V = KPW * RB values, 31
//            shuffles at V = 32); lane l ends with value l >> (5 - log2 V)
//   softmax  a warp's running (max, sum) of every row over its own keys (no block barrier)
//   P.V      every lane accumulates its DL dimensions of every row over its warp's keys, the
//            weights broadcast through shared memory
// and the warps' (max, sum, acc) combine once through shared memory at the end: the output
// when the range is one split, else the split's partial for the combine kernel.
//
// The sums run in another order than the split kernel's (a result within the attention
// tolerance); the kernel's choice depends on shapes only, never on n_kv, so every bound
// (a recorded step's depth bucket, or the whole context) gives the same plan and the same
// bits, and st_fused_rope_attention gives the bits of rope_store then this kernel: the
// prologue is dec_rope_row's (cuda_attention_decode.cuh), the rows spread over the warps.
#include "cuda/cuda_attention_decode.cuh"

#define WK_WARPS 16
#define WK_THREADS (WK_WARPS * ST_GPU_WARP_SIZE)
#define WK_MAX_ROW_DIMS 512 // RB * head_dim: the warps' accumulators in shared memory (32 KiB)
/* The rope prologue's inputs (a warp's row, its norm weights, the rotations) asked into L1
 * at the kernel's start, so that the prologue's dependent loads (row, then weights after the
 * sum of squares, then rotations) hit L1 instead of going to L2 one after another. A define
 * for the A/B build. */
#ifndef WK_PREFETCH_L1
#define WK_PREFETCH_L1 1
#endif

template <int D, int RB> struct wk_cfg {
    static constexpr int DL = D / ST_GPU_WARP_SIZE;   // dims a lane
    static constexpr int KPW = RB <= 4 ? 8 : 4;       // keys a warp a round
    static constexpr int RK = WK_WARPS * KPW;          // keys a round
    static constexpr int V = KPW * RB;                 // partial scores a lane: value j * RB + r
    static constexpr int LOG2V = V == 32 ? 5 : V == 16 ? 4 : V == 8 ? 3 : V == 4 ? 2 : V == 2 ? 1 : 0;
    static constexpr int LOG2RB = RB == 8 ? 3 : RB == 4 ? 2 : RB == 2 ? 1 : 0;
    static constexpr int S = 5 - LOG2V;                // lane l holds value l >> S
    static_assert(DL == 2 || DL == 4, "head_dim 64 or 128");
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

// src[0..DL) as the cache stores them (cuda_cache_store<F16>: the bits the new row has).
template <int DL> __device__ __forceinline__ typename wk_piece<DL>::type wk_cache_piece(const float *src) {
    typename wk_piece<DL>::type u;
    unsigned short *h = (unsigned short *)&u;
#pragma unroll
    for (int e = 0; e < DL; e++) h[e] = st_gpu_float_to_half_bits(src[e]);
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
            v[i] = keep + __shfl_xor_sync(ST_GPU_WARP_MASK, send, off);
        }
        wk_transpose_stage<V, half>(v, lane);
    }
}

template <int V, int LOG2V> __device__ __forceinline__ float wk_warp_transpose_sum(float (&v)[V], int lane) {
    wk_transpose_stage<V, V>(v, lane);
    float x = v[0];
#pragma unroll
    for (int off = 16 >> LOG2V; off > 0; off >>= 1) x += __shfl_xor_sync(ST_GPU_WARP_MASK, x, off);
    return x;
}

// ROPE: the queries and the new key come unroped (dec_rope_row), and the block of the split
// that holds the position stores the new key and value (as dec_rope_prepare does).
template <int D, int RB, bool ROPE>
__global__ void __launch_bounds__(WK_THREADS)
    attn_decode_warps_kernel(st_cuda_view q, st_cuda_view kc, st_cuda_view vc, const int32_t *__restrict__ positions,
                             int64_t n_kv, int32_t window, float scale, float softcap, int n_split,
                             float *__restrict__ part_acc, float2 *__restrict__ part_ml, const dec_rope_args ra,
                             st_cuda_view dst) {
    using cfg = wk_cfg<D, RB>;
    using piece = wk_piece<cfg::DL>;
    constexpr int DL = cfg::DL, KPW = cfg::KPW, RK = cfg::RK, V = cfg::V, S = cfg::S;
    __shared__ __align__(16) float Qs[RB * D];                // the group's queries, f32 (rows >= R: zeros)
    __shared__ __align__(16) float k_new[D];                  // the new key, normed and roped
    __shared__ __align__(16) float big[WK_WARPS * RB * D];    // the rope scratch, then the warps' acc
    __shared__ float Pw[WK_WARPS][V];                         // a warp's weights of the round
    __shared__ float2 ml_s[WK_WARPS][RB];                     // the warps' (max, sum)
    const int group = (int)(q.ne1 / kc.ne1), R = group;
    const int kvh = blockIdx.y, s = blockIdx.x, tid = threadIdx.x;
    const int warp = tid / ST_GPU_WARP_SIZE, lane = tid % ST_GPU_WARP_SIZE;
    const char *k_head = kc.data + (int64_t)kvh * kc.nb1, *v_head = vc.data + (int64_t)kvh * vc.nb1;

#if WK_PREFETCH_L1
    if (ROPE && warp <= group) { // the prologue's inputs into L1, under the plan's and the first round's loads
        const int region = lane / 8, line = lane % 8;
        const bool k_row = warp == group;
        const char *base = NULL;
        int bytes = D * 4;
        if (region == 0)
            base = k_row ? ra.k.data + (int64_t)kvh * ra.k.nb1 : q.data + ((int64_t)kvh * group + warp) * q.nb1;
        else if (region == 1)
            base = (const char *)(k_row ? ra.k_norm : ra.q_norm);
        else if (region == 2)
            base = (const char *)ra.cs, bytes = ra.n_rot * 4;
        if (base && line * 128 < bytes) asm volatile("prefetch.global.L1 [%0];" ::"l"(base + line * 128));
    }
#endif

    typename piece::type kr[KPW], vr[KPW];
    auto fetch = [&](int base, int end) { // this warp's keys of the round at base, below end
#pragma unroll
        for (int j = 0; j < KPW; j++) {
            const int t = base + warp * KPW + j;
            if (t < end) {
                kr[j] = *(const typename piece::type *)(k_head + (int64_t)t * kc.nb2 + lane * DL * 2);
                vr[j] = *(const typename piece::type *)(v_head + (int64_t)t * vc.nb2 + lane * DL * 2);
            }
        }
    };
    const int64_t rows = n_kv < kc.ne2 ? n_kv : kc.ne2;
    if (s == 0) fetch(0, (int)(rows < RK ? rows : RK)); // before the position: the plan follows
    const dec_plan pl = dec_make_plan(positions, 1, n_kv, window, n_split, RK);
    if (s >= pl.n_eff) return; // the whole block: the range is short
    const int s_lo = pl.lo + s * pl.cl;
    const int s_end = min(s_lo + pl.cl, pl.hi + 1);
    if (s != 0 || s_lo != 0) fetch(s_lo, min(s_lo + RK, s_end));

    bool store = false;
    int p = 0;
    if (ROPE) { // as dec_rope_prepare, the rows a warp each
        p = positions[0];
        const int64_t n_ctx = kc.ne2;
        const bool store_ok = p >= 0 && p < n_ctx;
        if (s == 0 && kvh == 0 && tid == 0 && !store_ok)
            cuda_report_op_error(ra.op_err, ST_CUDA_OP_ERROR_KV_POSITION, p, 0, n_ctx);
        const int holder = p >= pl.lo && p <= pl.hi ? (p - pl.lo) / pl.cl : 0;
        store = store_ok && s == holder;
        const double pos = (double)p * (double)ra.freq_scale;
        const int n_rows = group + (store ? 1 : 0);
        for (int j = warp; j < n_rows; j += WK_WARPS) {
            float *tmp = big + warp * D;
            if (j < group) {
                const int64_t h = (int64_t)kvh * group + j;
                dec_rope_row<D>(Qs + j * D, (const float *)(q.data + h * q.nb1), ra.q_norm, tmp, NULL, warp * 32,
                                ST_GPU_WARP_SIZE, ra, pos);
            } else {
                dec_rope_row<D>(k_new, (const float *)(ra.k.data + (int64_t)kvh * ra.k.nb1), ra.k_norm, tmp, NULL,
                                warp * 32, ST_GPU_WARP_SIZE, ra, pos);
            }
        }
        for (int i = group * D + tid; i < RB * D; i += WK_THREADS) Qs[i] = 0.0f;
    } else {
        for (int i = tid; i < RB * D; i += WK_THREADS) {
            const int r = i / D, d = i % D;
            Qs[i] = r < R ? ((const float *)(q.data + ((int64_t)kvh * group + r) * q.nb1))[d] : 0.0f;
        }
    }
    __syncthreads(); // Qs and k_new complete
    if (ROPE && store) {
        const float *vrow = (const float *)(ra.v.data + (int64_t)kvh * ra.v.nb1);
        char *ko = kc.data + (int64_t)kvh * kc.nb1 + (int64_t)p * kc.nb2;
        char *vo = vc.data + (int64_t)kvh * vc.nb1 + (int64_t)p * vc.nb2;
        for (int d = tid; d < D; d += WK_THREADS) {
            cuda_cache_store<ST_TYPE_F16>(ko, d, k_new[d]);
            cuda_cache_store<ST_TYPE_F16>(vo, d, vrow[d]);
        }
    }

    float qv[RB][DL];
#pragma unroll
    for (int r = 0; r < RB; r++)
#pragma unroll
        for (int e = 0; e < DL; e++) qv[r][e] = Qs[r * D + lane * DL + e];

    // This lane's value of the scores: key jo of the warp's, row ro.
    const int idx = lane >> S, jo = idx / RB, ro = idx % RB;
    float m[RB], l[RB], acc[RB][DL];
#pragma unroll
    for (int r = 0; r < RB; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int e = 0; e < DL; e++) acc[r][e] = 0.0f;
    }

    for (int base = s_lo; base < s_end; base += RK) {
        if (base != s_lo) fetch(base, min(base + RK, s_end));
        const int end = min(base + RK, s_end), t0 = base + warp * KPW;
        if (ROPE && store && p >= t0 && p < t0 + KPW) { // the key and value the cache now holds
            const float *vrow = (const float *)(ra.v.data + (int64_t)kvh * ra.v.nb1);
#pragma unroll
            for (int j = 0; j < KPW; j++)
                if (t0 + j == p) {
                    kr[j] = wk_cache_piece<DL>(k_new + lane * DL);
                    vr[j] = wk_cache_piece<DL>(vrow + lane * DL);
                }
        }

        float part[V];
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
        const int t = t0 + jo;
        const float x = t < end ? attn_score_log2(dot, scale, softcap) : -INFINITY;

        // the round's max of each row over the warp's keys (the lanes of row ro differ in
        // the key bits of the lane, above S + log2 RB)
        float mx = x;
#pragma unroll
        for (int off = 16; off >= (1 << (S + cfg::LOG2RB)); off >>= 1)
            mx = fmaxf(mx, __shfl_xor_sync(ST_GPU_WARP_MASK, mx, off));
        float alpha[RB], m_own = 0.0f;
#pragma unroll
        for (int r = 0; r < RB; r++) {
            const float mr = __shfl_sync(ST_GPU_WARP_MASK, mx, r << S);
            const float m_new = fmaxf(m[r], mr);
            const float m_use = m_new == -INFINITY ? 0.0f : m_new; // nothing seen yet: exp2(-inf) = 0
            alpha[r] = exp2f(m[r] - m_use);
            m[r] = m_new;
            if (r == ro) m_own = m_use;
        }
        if ((lane & ((1 << S) - 1)) == 0) Pw[warp][idx] = exp2f(x - m_own);
        __syncwarp();
#pragma unroll
        for (int r = 0; r < RB; r++) {
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < KPW; j++) sum += Pw[warp][j * RB + r];
            l[r] = l[r] * alpha[r] + sum;
#pragma unroll
            for (int e = 0; e < DL; e++) acc[r][e] *= alpha[r];
        }
#pragma unroll
        for (int j = 0; j < KPW; j++) {
            if (t0 + j >= end) continue; // a row the range does not hold: not even zero times it
            float vf[DL];
            piece::to_f32(vr[j], vf);
#pragma unroll
            for (int r = 0; r < RB; r++) {
                const float w = Pw[warp][j * RB + r];
#pragma unroll
                for (int e = 0; e < DL; e++) acc[r][e] = fmaf(w, vf[e], acc[r][e]);
            }
        }
        __syncwarp(); // Pw is free again
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
    for (int i = tid; i < R * D; i += WK_THREADS) {
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
        const int64_t h = (int64_t)kvh * group + r;
        if (pl.n_eff == 1) {
            ((float *)(dst.data + h * dst.nb1))[d] = lsum > 0.0f ? a / lsum : 0.0f; // a row that sees nothing: zeros
        } else {
            const int64_t slot = h * n_split + s;
            part_acc[slot * D + d] = a;
            if (d == 0) part_ml[slot] = make_float2(mm, lsum);
        }
    }
}

// ---- host side ------------------------------------------------------------------------------

// The rows a lane's scores take for a group of R query heads: R rounded up to a power of two.
static int wk_rows_bucket(int R) { return R <= 1 ? 1 : R <= 2 ? 2 : R <= 4 ? 4 : R <= 8 ? 8 : 0; }

int dec_warps_round_keys(const st_tensor *q, const st_tensor *k_cache, const st_tensor *v_cache) {
    const int64_t D = q->ne[0], M = q->ne[2], group = q->ne[1] / k_cache->ne[1];
    const int rb = wk_rows_bucket((int)group);
    if (M != 1 || k_cache->type != ST_TYPE_F16 || v_cache->type != ST_TYPE_F16 || (D != 64 && D != 128) || rb == 0 ||
        rb * D > WK_MAX_ROW_DIMS)
        return 0;
    return WK_WARPS * (rb <= 4 ? 8 : 4);
}

template <int D, int RB>
static void wk_launch(st_cuda_ctx *c, int n_split, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                      const st_tensor *v_cache, const int32_t *pos, const st_attn_params *p, float *part_acc,
                      float2 *part_ml, const dec_rope_args *ra) {
    const dim3 grid((unsigned int)n_split, (unsigned int)k_cache->ne[1]);
    if (ra)
        attn_decode_warps_kernel<D, RB, true><<<grid, WK_THREADS, 0, c->stream>>>(
            cuda_view(q), cuda_view(k_cache), cuda_view(v_cache), pos, p->n_kv, p->window, p->scale, p->softcap,
            n_split, part_acc, part_ml, *ra, cuda_view(dst));
    else
        attn_decode_warps_kernel<D, RB, false><<<grid, WK_THREADS, 0, c->stream>>>(
            cuda_view(q), cuda_view(k_cache), cuda_view(v_cache), pos, p->n_kv, p->window, p->scale, p->softcap,
            n_split, part_acc, part_ml, dec_rope_args{}, cuda_view(dst));
}

st_status dec_warps_launch(st_cuda_ctx *c, int n_split, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                           const st_tensor *v_cache, const int32_t *pos, const st_attn_params *p, float *part_acc,
                           float2 *part_ml, const dec_rope_args *ra, st_error *err) {
    const int64_t D = q->ne[0];
    const int rb = wk_rows_bucket((int)(q->ne[1] / k_cache->ne[1]));
    ST_ASSERT(dec_warps_round_keys(q, k_cache, v_cache) > 0);
#define WK_CASE(d, r)                                                                                             \
    if (D == d && rb == r) wk_launch<d, r>(c, n_split, dst, q, k_cache, v_cache, pos, p, part_acc, part_ml, ra);
    WK_CASE(64, 1) WK_CASE(64, 2) WK_CASE(64, 4) WK_CASE(64, 8) WK_CASE(128, 1) WK_CASE(128, 2) WK_CASE(128, 4)
#undef WK_CASE
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}
