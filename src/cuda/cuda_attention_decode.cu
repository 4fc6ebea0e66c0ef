// Split-KV attention for a few query rows (decode): plain CUDA C, f32 math, F16 or F32 cache.
//
// Grid (n_split, n_head_kv). A block serves one kv head and ALL R = M * group query rows
// of its GQA group (row r = m * group + g: token m, query head kv_head * group + g), so
// each K/V row is read from memory once per step. The block walks its split of the keys in
// chunks of C keys (up to 16 KiB of K and 16 KiB of V in shared memory, at most 64 keys:
// head_dim 128 in F16 walks a 64-key split in one chunk; the next chunk is loaded
// into registers while the current one is computed, the first while the queries are
// roped):
//   scores    one key per thread, f32 dot products against the f32 queries in shared memory
//   softmax   one warp per row: running max and sum, the factor for the accumulator
//   P.V       one pair of output dimensions per thread, NR rows (a template bucket)
// and writes its partial result (max, sum, unnormalised acc[head_dim]) per row. A second
// kernel combines the splits of a row: out = sum_s 2^(m_s - m) acc_s / sum_s 2^(m_s - m) l_s.
// When the range is one split (a short cache: up to dec_one_split_keys(C) keys, two chunks),
// that split writes out = acc / l itself and the combine kernel returns after its plan; a
// grid of one split (a bound n_kv of at most that many keys) launches no combine kernel.
//
// CUDA graphs: the launch (grid, block, shared memory, n_split) depends on the head counts,
// head_dim, M, the device's SM count and the bound n_kv (no more splits than n_kv keys can
// fill), NEVER on the positions. The key range is computed on the device from positions[]
// (t <= pos, t < n_kv, the window): the union [L, H] of the M tokens' ranges is cut into
// n_eff <= n_split splits of cl keys (a multiple of C, at least DEC_MIN_SPLIT_KEYS while
// splits remain), and blocks past n_eff leave at once. The same plan is recomputed by the
// combine kernel. n_kv only bounds the range, so a caller may pass any bound past the
// positions (a recorded step: its depth bucket, or the whole context): with n_kv > max(pos)
// the ranges, the splits and every rounding are the same, and so are the results, bit for
// bit. One token over an F16 cache with a bound of up to 128 keys takes the warps kernel
// instead (cuda_attention_decode_warps.cu): the same bits for every bound up to 128, and a
// result within the attention tolerance of this kernel's past it.
#include <string.h>

#include "cuda/cuda_attention_decode.cuh"

#define DEC_THREADS 128
#define DEC_WARPS (DEC_THREADS / ST_GPU_WARP_SIZE)
#define DEC_MAX_SPLITS 128
#define DEC_MIN_SPLIT_KEYS 64
/* One split takes a range of up to this many chunks alone (DEC_MIN_SPLIT_KEYS keys where
 * that is more): at depths 64-127 one block walking a second 64-key chunk is faster than
 * two splits and the combine kernel for head_dim 64 and 128 (F16), and about as fast
 * where a chunk has twice the rows. */
#define DEC_ONE_SPLIT_CHUNKS 2
/* Splits are chosen to put about this many blocks on every SM, and no more than n_kv keys
 * can fill (so a short bucket's grid stays small). The grid is sized for the longest range
 * under n_kv (a recorded step cannot depend on the position; the session records one step
 * per depth bucket), so below the bound most of its blocks leave after the plan. On the
 * H200, 2 an SM is faster than 4 at depths 64 to 4,000 and than 1 from about 4,000 keys. */
#define DEC_BLOCKS_PER_SM 2
#define DEC_SMEM_MAX ST_GPU_SMEM_BYTES
/* K bytes a chunk (and as many of V). 16 KiB rather than 8: head_dim 128 (F16) walks 64
 * keys a chunk instead of 32, faster at depths 64 to 4,000; head_dim 64 holds 64 keys
 * either way. */
#define DEC_CHUNK_BYTES 16384
#define DEC_MAX_NR 16 // rows per thread in P.V (the largest template bucket)
#define DEC_COMBINE_THREADS 128

// Keys a chunk holds: DEC_CHUNK_BYTES of K (and as many of V) in rows of D elements of sz
// bytes, at most 64.
__host__ __device__ constexpr int dec_chunk_keys(int D, int sz) {
    return DEC_CHUNK_BYTES / (D * sz) < 64 ? DEC_CHUNK_BYTES / (D * sz) : 64;
}

// The most keys one split takes alone (dec_make_plan), for chunks of C keys.
__host__ __device__ constexpr int dec_one_split_keys(int C) {
    return DEC_ONE_SPLIT_CHUNKS * C > DEC_MIN_SPLIT_KEYS ? DEC_ONE_SPLIT_CHUNKS * C : DEC_MIN_SPLIT_KEYS;
}

template <st_type T, int D> struct dec_cfg {
    static constexpr int SZ = T == ST_TYPE_F16 ? 2 : 4;
    static constexpr int C = dec_chunk_keys(D, SZ);
    static constexpr int ROWB = D * SZ + 16;      // shared bytes per K/V row: +16, so that the
                                                  // 16-byte reads of consecutive rows hit distinct banks
    static constexpr int PIECES = D * SZ / 16;    // 16-byte pieces of a cache row
    static constexpr int UPT = C * PIECES / DEC_THREADS; // pieces of K (and of V) per thread per chunk
    static constexpr int QLD = D + 4;             // floats per query row in shared memory
    static constexpr int SRG = DEC_THREADS / C;   // scores: row groups (a key per thread)
    static constexpr int TPR = D / 2;             // P.V: threads per row group (a dim pair each)
    static constexpr int NRG = DEC_THREADS / TPR; // P.V: row groups
    static_assert(C * PIECES % DEC_THREADS == 0 && DEC_THREADS % C == 0, "chunk shape");
    static_assert(DEC_THREADS % TPR == 0 && TPR % ST_GPU_WARP_SIZE == 0, "a warp serves one row group in P.V");

    static size_t smem(int R) { // K, V chunks; Q [R][QLD]; P [R][C]; max, sum, factor, lo, hi [R]
        return (size_t)2 * C * ROWB + (size_t)R * (QLD * 4 + C * 4 + 5 * 4);
    }
    static int max_rows() {
        int r = DEC_MAX_NR * NRG;
        while (r > 0 && smem(r) > DEC_SMEM_MAX) r--;
        return r;
    }
};

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

template <st_type T> __device__ __forceinline__ void dec_load8(const unsigned char *row, int d, float f[8]);
template <> __device__ __forceinline__ void dec_load8<ST_TYPE_F16>(const unsigned char *row, int d, float f[8]) {
    const uint4 u = *(const uint4 *)(row + d * 2);
    const __half2 *h = (const __half2 *)&u;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float2 x = __half22float2(h[j]);
        f[2 * j] = x.x;
        f[2 * j + 1] = x.y;
    }
}
template <> __device__ __forceinline__ void dec_load8<ST_TYPE_F32>(const unsigned char *row, int d, float f[8]) {
    const float4 a = *(const float4 *)(row + d * 4), b = *(const float4 *)(row + d * 4 + 16);
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}

template <st_type T> __device__ __forceinline__ float2 dec_load2(const unsigned char *row, int d);
template <> __device__ __forceinline__ float2 dec_load2<ST_TYPE_F16>(const unsigned char *row, int d) {
    return __half22float2(*(const __half2 *)(row + d * 2));
}
template <> __device__ __forceinline__ float2 dec_load2<ST_TYPE_F32>(const unsigned char *row, int d) {
    return *(const float2 *)(row + d * 4);
}


// The block's queries (kv head kvh's group, token 0) normed and roped into Qs [group][QLD];
// and, by the one block of the kv head that holds the position (split 0 when none does),
// the new key normed, roped and stored with the new value into the cache at the position
// (its cache slot: the position, or where the block table puts it; reported, not stored,
// when it is outside the cache, as st_cuda_rope_store does).
// scratch: the K/V chunk area, free until the first chunk (>= (DEC_WARPS + 1) * D floats);
// the new key stays at dec_rope_new_key(scratch) until then. Returns whether this block
// stored the new key and value.
template <int D> __device__ __forceinline__ float *dec_rope_new_key(float *scratch) { return scratch + DEC_WARPS * D; }

template <st_type T, int D>
__device__ bool dec_rope_prepare(const dec_rope_args &ra, st_cuda_view q, st_cuda_view kc, st_cuda_view vc,
                                 int32_t p, int64_t slot, const dec_plan &pl, int kvh, int s, int group, float *Qs,
                                 int qld, float *scratch) {
    __shared__ float red[DEC_WARPS];
    // whole q/k norms: their sums in scratch, their two scales in red (which only the norms
    // per head use), every thread (the same for the block)
    static_assert(2 * CUDA_NORM_MAX_THREADS / ST_GPU_WARP_SIZE <= (DEC_WARPS + 1) * D && DEC_WARPS >= 2, "room");
    float *whole_sc = red;
    if (ra.whole_norm)
        dec_whole_norm_scales<false>((const float *)q.data, (int)(q.ne1 * D), (const float *)ra.k.data,
                                     (int)(ra.k.ne1 * D), ra.eps, scratch, whole_sc);
    const int64_t n_ctx = kc.ne2;
    const bool store_ok = p >= 0 && slot >= 0 && slot < n_ctx;
    if (s == 0 && kvh == 0 && threadIdx.x == 0 && !store_ok)
        cuda_report_op_error(ra.op_err, ST_CUDA_OP_ERROR_KV_POSITION, (int)slot, 0, n_ctx);
    const int holder = p >= pl.lo && p <= pl.hi ? (p - pl.lo) / pl.cl : 0;
    const bool store = store_ok && s == holder;
    const double pos = (double)p * (double)ra.freq_scale;
    const int n_rows = group + (store ? 1 : 0); // the group's queries, then the new key
    float *k_new = dec_rope_new_key<D>(scratch);
    auto row = [&](int j, int t0, int n_thr, float *tmp) {
        if (j < group) {
            const int64_t h = (int64_t)kvh * group + j;
            dec_rope_row<D>(Qs + j * qld, (const float *)(q.data + h * q.nb1), dec_norm_w(ra.q_norm, ra, h, D),
                            ra.whole_norm ? whole_sc : NULL, tmp, red, t0, n_thr, ra, pos);
        } else {
            dec_rope_row<D>(k_new, (const float *)(ra.k.data + (int64_t)kvh * ra.k.nb1),
                            dec_norm_w(ra.k_norm, ra, kvh, D), ra.whole_norm ? whole_sc + 1 : NULL, tmp, red, t0,
                            n_thr, ra, pos);
        }
    };
    const int warp = threadIdx.x / ST_GPU_WARP_SIZE;
    if (D <= 128) { // a warp per row
        for (int j = warp; j < n_rows; j += DEC_WARPS) row(j, warp * ST_GPU_WARP_SIZE, ST_GPU_WARP_SIZE, scratch + warp * D);
    } else { // the block per row
        for (int j = 0; j < n_rows; j++) row(j, 0, DEC_THREADS, scratch);
    }
    __syncthreads(); // Qs and k_new complete
    if (store) {
        const float *vr = (const float *)(ra.v.data + (int64_t)kvh * ra.v.nb1);
        char *ko = kc.data + (int64_t)kvh * kc.nb1 + slot * kc.nb2;
        char *vo = vc.data + (int64_t)kvh * vc.nb1 + slot * vc.nb2;
        for (int d = threadIdx.x; d < D; d += DEC_THREADS) {
            cuda_cache_store<T>(ko, d, k_new[d]);
            cuda_cache_store<T>(vo, d, vr[d]);
        }
        // (a later chunk that reads the row back is fetched after the chunk loop's barrier)
    }
    return store;
}

// 16-byte piece `piece` of a cache row of T holding src[] as cuda_cache_store stores it.
template <st_type T> __device__ __forceinline__ uint4 dec_cache_piece(const float *src, int piece) {
    constexpr int E = T == ST_TYPE_F16 ? 8 : 4;
    uint4 u;
    char *b = (char *)&u;
#pragma unroll
    for (int e = 0; e < E; e++) cuda_cache_store<T>(b, e, src[piece * E + e]);
    return u;
}

// Partials: acc [n_head, M, n_split][D] f32, then (max, sum) [n_head, M, n_split] float2.
// ROPE (one token a block): the queries and the new key come unroped (dec_rope_prepare).
// PAGED: every query its own sequence of a paged cache (attn_pages), a block a query
// (grid z); the block's views start at its query, so that the rest reads as M = 1.
template <st_type T, int D, int NR, bool ROPE, bool PAGED>
__global__ void __launch_bounds__(DEC_THREADS)
    attn_decode_split_kernel(st_cuda_view q, st_cuda_view kc, st_cuda_view vc, const int32_t *__restrict__ positions,
                             int64_t n_kv, int32_t window, float scale, float softcap, int n_split,
                             float *__restrict__ part_acc, float2 *__restrict__ part_ml, dec_rope_args ra,
                             st_cuda_view dst, const attn_pages pg) {
    using cfg = dec_cfg<T, D>;
    constexpr int C = cfg::C, ROWB = cfg::ROWB, QLD = cfg::QLD;
    extern __shared__ __align__(16) unsigned char dec_smem[];
    const int M_all = (int)q.ne2, m0 = PAGED ? (int)blockIdx.z : 0;
    const int32_t *blocks = PAGED ? attn_blocks(pg, m0) : NULL;
    if (PAGED) {
        q.data += (int64_t)m0 * q.nb2, q.ne2 = 1;
        dst.data += (int64_t)m0 * dst.nb2, dst.ne2 = 1;
        ra.k.data += (int64_t)m0 * ra.k.nb2;
        ra.v.data += (int64_t)m0 * ra.v.nb2;
        positions += m0;
    }
    const int M = (int)q.ne2, group = (int)(q.ne1 / kc.ne1), R = M * group;
    const int kvh = blockIdx.y, s = blockIdx.x, tid = threadIdx.x;
    const int warp = tid / ST_GPU_WARP_SIZE, lane = tid % ST_GPU_WARP_SIZE;
    const dec_plan pl = dec_make_plan(positions, M, n_kv, window, n_split, C);
    if (s >= pl.n_eff) return; // the whole block: the range is short
    const int s_lo = pl.lo + s * pl.cl;
    const int s_end = min(s_lo + pl.cl, pl.hi + 1);

    unsigned char *Ks = dec_smem, *Vs = Ks + C * ROWB; // [C][ROWB] the chunk's keys and values
    float *Qs = (float *)(Vs + C * ROWB);               // [R][QLD] the queries, f32
    float *Ps = Qs + R * QLD;                           // [R][C] scores, then weights
    float *m_s = Ps + R * C, *l_s = m_s + R, *a_s = l_s + R; // [R] running max, sum, rescale factor
    int *lo_s = (int *)(a_s + R), *hi_s = lo_s + R;          // [R] visible keys

    const char *k_head = kc.data + (int64_t)kvh * kc.nb1, *v_head = vc.data + (int64_t)kvh * vc.nb1;
    uint4 kr[cfg::UPT], vr[cfg::UPT];
    auto fetch = [&](int c0) {
        const int nk = min(C, s_end - c0);
#pragma unroll
        for (int u = 0; u < cfg::UPT; u++) {
            const int i = tid + u * DEC_THREADS, key = i / cfg::PIECES, piece = i % cfg::PIECES;
            if (key < nk) {
                const int64_t row = PAGED ? attn_slot(blocks, c0 + key) : c0 + key;
                kr[u] = *(const uint4 *)(k_head + row * kc.nb2 + piece * 16);
                vr[u] = *(const uint4 *)(v_head + row * vc.nb2 + piece * 16);
            }
        }
    };
    // The first chunk is loaded before the queries are prepared, under their latency. The
    // new key's row in it is stale until the prologue stores it: patched from the prologue.
    if (s_lo < s_end) fetch(s_lo);

    if (ROPE) {
        static_assert(2 * C * ROWB >= (DEC_WARPS + 1) * D * 4, "the rope scratch fits the K/V chunk area");
        const int p = positions[0];
        const int64_t slot = PAGED ? (p >= 0 ? attn_slot(blocks, p) : -1) : p;
        const bool stored = dec_rope_prepare<T, D>(ra, q, kc, vc, p, slot, pl, kvh, s, group, Qs, QLD, (float *)Ks);
        if (stored && p >= s_lo && p < min(s_lo + C, s_end)) { // the bits the cache now holds
            const float *k_new = dec_rope_new_key<D>((float *)Ks);
            const float *v_new = (const float *)(ra.v.data + (int64_t)kvh * ra.v.nb1);
#pragma unroll
            for (int u = 0; u < cfg::UPT; u++) {
                const int i = tid + u * DEC_THREADS, key = i / cfg::PIECES, piece = i % cfg::PIECES;
                if (key == p - s_lo) {
                    kr[u] = dec_cache_piece<T>(k_new, piece);
                    vr[u] = dec_cache_piece<T>(v_new, piece);
                }
            }
        }
    } else {
        for (int i = tid; i < R * D; i += DEC_THREADS) {
            const int r = i / D, d = i % D;
            const int64_t m = r / group, h = (int64_t)kvh * group + r % group;
            Qs[r * QLD + d] = ((const float *)(q.data + h * q.nb1 + m * q.nb2))[d];
        }
    }
    for (int r = tid; r < R; r += DEC_THREADS) {
        attn_visible_range(positions[r / group], n_kv, window, &lo_s[r], &hi_s[r]);
        m_s[r] = -INFINITY;
        l_s[r] = 0.0f;
    }

    const int dp = tid % cfg::TPR, rg = tid / cfg::TPR; // P.V: dims 2dp, 2dp+1 of rows rg + i * NRG
    float2 acc[NR];
#pragma unroll
    for (int i = 0; i < NR; i++) acc[i] = make_float2(0.0f, 0.0f);

    for (int c0 = s_lo; c0 < s_end; c0 += C) {
        const int nk = min(C, s_end - c0);
        __syncthreads(); // the last chunk is consumed (the first time: Qs and the row state are written)
#pragma unroll
        for (int u = 0; u < cfg::UPT; u++) {
            const int i = tid + u * DEC_THREADS, key = i / cfg::PIECES, piece = i % cfg::PIECES;
            if (key < nk) {
                *(uint4 *)(Ks + key * ROWB + piece * 16) = kr[u];
                *(uint4 *)(Vs + key * ROWB + piece * 16) = vr[u];
            }
        }
        __syncthreads();
        if (c0 + C < s_end) fetch(c0 + C); // in flight while this chunk is computed

        const int k = tid % C;
        if (k < nk) {
            const unsigned char *krow = Ks + k * ROWB;
            const int t = c0 + k;
            for (int r = tid / C; r < R; r += cfg::SRG) {
                const float *qr = Qs + r * QLD;
                float dot = 0.0f;
#pragma unroll
                for (int d = 0; d < D; d += 8) {
                    float kf[8];
                    dec_load8<T>(krow, d, kf);
                    const float4 q0 = *(const float4 *)(qr + d), q1 = *(const float4 *)(qr + d + 4);
                    dot = fmaf(q0.x, kf[0], dot);
                    dot = fmaf(q0.y, kf[1], dot);
                    dot = fmaf(q0.z, kf[2], dot);
                    dot = fmaf(q0.w, kf[3], dot);
                    dot = fmaf(q1.x, kf[4], dot);
                    dot = fmaf(q1.y, kf[5], dot);
                    dot = fmaf(q1.z, kf[6], dot);
                    dot = fmaf(q1.w, kf[7], dot);
                }
                float x = attn_score_log2(dot, scale, softcap);
                if (t < lo_s[r] || t > hi_s[r]) x = -INFINITY;
                Ps[r * C + k] = x;
            }
        }
        __syncthreads();

        for (int r = warp; r < R; r += DEC_WARPS) {
            float mx = -INFINITY;
            for (int j = lane; j < nk; j += ST_GPU_WARP_SIZE) mx = fmaxf(mx, Ps[r * C + j]);
            mx = cuda_warp_max(mx);
            const float m_old = m_s[r], m_new = fmaxf(m_old, mx);
            const float m_use = m_new == -INFINITY ? 0.0f : m_new; // nothing seen yet: exp2(-inf) = 0
            float sum = 0.0f;
            for (int j = lane; j < nk; j += ST_GPU_WARP_SIZE) {
                const float w = exp2f(Ps[r * C + j] - m_use);
                Ps[r * C + j] = w;
                sum += w;
            }
            sum = cuda_warp_sum(sum);
            if (lane == 0) {
                const float alpha = exp2f(m_old - m_use);
                a_s[r] = alpha;
                l_s[r] = l_s[r] * alpha + sum;
                m_s[r] = m_new;
            }
        }
        __syncthreads();

#pragma unroll
        for (int i = 0; i < NR; i++) {
            const int r = rg + i * cfg::NRG;
            if (r < R) {
                const float a = a_s[r];
                acc[i].x *= a;
                acc[i].y *= a;
            }
        }
#pragma unroll 4
        for (int j = 0; j < nk; j++) {
            const float2 v = dec_load2<T>(Vs + j * ROWB, 2 * dp);
#pragma unroll
            for (int i = 0; i < NR; i++) {
                const int r = rg + i * cfg::NRG;
                if (r < R) {
                    const float w = Ps[r * C + j];
                    acc[i].x = fmaf(w, v.x, acc[i].x);
                    acc[i].y = fmaf(w, v.y, acc[i].y);
                }
            }
        }
    }
    __syncthreads(); // m_s, l_s final

    if (pl.n_eff == 1) { // the only split: the output itself (a row that sees nothing: zeros)
#pragma unroll
        for (int i = 0; i < NR; i++) {
            const int r = rg + i * cfg::NRG;
            if (r < R) {
                const int64_t m = r / group, h = (int64_t)kvh * group + r % group;
                const float l = l_s[r];
                float *out = (float *)(dst.data + h * dst.nb1 + m * dst.nb2); // rows 4-byte aligned only
                out[2 * dp] = l > 0.0f ? acc[i].x / l : 0.0f;
                out[2 * dp + 1] = l > 0.0f ? acc[i].y / l : 0.0f;
            }
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < NR; i++) {
        const int r = rg + i * cfg::NRG;
        if (r < R) {
            const int64_t m = m0 + r / group, h = (int64_t)kvh * group + r % group;
            const int64_t slot = (h * M_all + m) * n_split + s;
            *(float2 *)(part_acc + slot * D + 2 * dp) = acc[i];
        }
    }
    for (int r = tid; r < R; r += DEC_THREADS) {
        const int64_t m = m0 + r / group, h = (int64_t)kvh * group + r % group;
        part_ml[(h * M_all + m) * n_split + s] = make_float2(m_s[r], l_s[r]);
    }
}

// One block per output row (head h, token m): the splits' partials, weighted by 2^(m_s - max).
// PAGED: each token its own plan, as its block of the split kernel made it.
template <bool PAGED>
__global__ void __launch_bounds__(DEC_COMBINE_THREADS)
    attn_decode_combine_kernel(st_cuda_view dst, const int32_t *__restrict__ positions, int64_t n_kv, int32_t window,
                               int n_split, int C, const float *__restrict__ part_acc,
                               const float2 *__restrict__ part_ml) {
    __shared__ float w_s[DEC_MAX_SPLITS];
    __shared__ float l_sum;
    const int D = (int)dst.ne0, n_head = (int)dst.ne1, M = (int)dst.ne2;
    const int h = blockIdx.x % n_head, m = blockIdx.x / n_head;
    const dec_plan pl = PAGED ? dec_make_plan(positions + m, 1, n_kv, window, n_split, C)
                              : dec_make_plan(positions, M, n_kv, window, n_split, C);
    if (pl.n_eff == 1) return; // the split kernel wrote the output
    const int64_t base = ((int64_t)h * M + m) * n_split;
    if (threadIdx.x < ST_GPU_WARP_SIZE) {
        const int lane = threadIdx.x;
        float mx = -INFINITY;
        for (int s = lane; s < pl.n_eff; s += ST_GPU_WARP_SIZE) mx = fmaxf(mx, part_ml[base + s].x);
        mx = cuda_warp_max(mx);
        float l = 0.0f;
        for (int s = lane; s < pl.n_eff; s += ST_GPU_WARP_SIZE) {
            const float2 ml = part_ml[base + s];
            const float w = mx == -INFINITY ? 0.0f : exp2f(ml.x - mx);
            w_s[s] = w;
            l = fmaf(w, ml.y, l);
        }
        l = cuda_warp_sum(l);
        if (lane == 0) l_sum = l;
    }
    __syncthreads();
    const float l = l_sum;
    float *out = (float *)(dst.data + (int64_t)h * dst.nb1 + (int64_t)m * dst.nb2);
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float a = 0.0f;
        for (int s = 0; s < pl.n_eff; s++) a = fmaf(w_s[s], part_acc[(base + s) * D + d], a);
        out[d] = l > 0.0f ? a / l : 0.0f; // a row that sees nothing: zeros
    }
}

// ---- host side ------------------------------------------------------------------------------

static int dec_max_rows(st_type t, int64_t D) {
    const bool f16 = t == ST_TYPE_F16;
    switch (D) {
    case 64: return f16 ? dec_cfg<ST_TYPE_F16, 64>::max_rows() : dec_cfg<ST_TYPE_F32, 64>::max_rows();
    case 128: return f16 ? dec_cfg<ST_TYPE_F16, 128>::max_rows() : dec_cfg<ST_TYPE_F32, 128>::max_rows();
    case 256: return f16 ? dec_cfg<ST_TYPE_F16, 256>::max_rows() : dec_cfg<ST_TYPE_F32, 256>::max_rows();
    default: return 0;
    }
}

bool st_cuda_attn_decode_supported(st_backend *b, const st_tensor *q, const st_tensor *k_cache,
                                   const st_tensor *v_cache) {
    (void)b;
    const int64_t D = q->ne[0], group = q->ne[1] / k_cache->ne[1], R = q->ne[2] * group;
    return (k_cache->type == ST_TYPE_F16 || k_cache->type == ST_TYPE_F32) && k_cache->type == v_cache->type &&
           attn_fast_head_dim(D) && attn_cache_rows_aligned(k_cache) && attn_cache_rows_aligned(v_cache) &&
           k_cache->ne[1] <= 65535 && R >= 1 && R <= dec_max_rows(k_cache->type, D);
}

// The partials buffer grows (st_cuda_grow: the old one stays for the kernels and graphs
// that address it) only outside a graph recording; its size does not depend on n_kv, so a
// decode step that ran once before the recording never grows in it.
static st_status dec_partials(st_cuda_ctx *c, size_t bytes, void **out, st_error *err) {
    st_status s = st_cuda_grow(c, &c->attn_partials, &c->attn_partials_bytes, bytes,
                               "attention: the split-KV partials", err);
    *out = c->attn_partials;
    return s;
}

template <st_type T, int D, int NR, bool PAGED>
static void dec_launch_split(st_cuda_ctx *c, int n_split, int R, st_tensor *dst, const st_tensor *q,
                             const st_tensor *k_cache, const st_tensor *v_cache, const int32_t *pos,
                             const st_attn_params *p, float *part_acc, float2 *part_ml, const dec_rope_args *ra,
                             const attn_pages &pg) {
    using cfg = dec_cfg<T, D>;
    const dim3 grid((unsigned int)n_split, (unsigned int)k_cache->ne[1], PAGED ? (unsigned int)q->ne[2] : 1u);
    if (ra)
        attn_decode_split_kernel<T, D, NR, true, PAGED><<<grid, DEC_THREADS, cfg::smem(R), c->stream>>>(
            cuda_view(q), cuda_view(k_cache), cuda_view(v_cache), pos, p->n_kv, p->window, p->scale, p->softcap,
            n_split, part_acc, part_ml, *ra, cuda_view(dst), pg);
    else
        attn_decode_split_kernel<T, D, NR, false, PAGED><<<grid, DEC_THREADS, cfg::smem(R), c->stream>>>(
            cuda_view(q), cuda_view(k_cache), cuda_view(v_cache), pos, p->n_kv, p->window, p->scale, p->softcap,
            n_split, part_acc, part_ml, dec_rope_args{}, cuda_view(dst), pg);
}

// R: the query rows a block takes (a block a query with pages: the group).
template <st_type T, int D, int NR>
static st_status dec_launch(st_cuda_ctx *c, int n_split, int R, st_tensor *dst, const st_tensor *q,
                            const st_tensor *k_cache, const st_tensor *v_cache, const int32_t *pos,
                            const attn_pages *pg, const st_attn_params *p, float *part_acc, float2 *part_ml,
                            const dec_rope_args *ra, st_error *err) {
    using cfg = dec_cfg<T, D>;
    ST_ASSERT((R + cfg::NRG - 1) / cfg::NRG <= NR && cfg::smem(R) <= DEC_SMEM_MAX);
    ST_ASSERT(!pg || (pg->seq && q->ne[2] <= 65535)); // (grid z)
    const attn_pages none = {};
    if (pg) dec_launch_split<T, D, NR, true>(c, n_split, R, dst, q, k_cache, v_cache, pos, p, part_acc, part_ml, ra, *pg);
    else dec_launch_split<T, D, NR, false>(c, n_split, R, dst, q, k_cache, v_cache, pos, p, part_acc, part_ml, ra, none);
    ST_GPU_CHECK_LAUNCH();
    if (n_split == 1) return ST_OK; // the only split wrote the output (n_eff = 1)
    const unsigned int rows = (unsigned int)(q->ne[1] * q->ne[2]);
    if (pg)
        attn_decode_combine_kernel<true><<<rows, DEC_COMBINE_THREADS, 0, c->stream>>>(
            cuda_view(dst), pos, p->n_kv, p->window, n_split, cfg::C, part_acc, part_ml);
    else
        attn_decode_combine_kernel<false><<<rows, DEC_COMBINE_THREADS, 0, c->stream>>>(
            cuda_view(dst), pos, p->n_kv, p->window, n_split, cfg::C, part_acc, part_ml);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}

// NR: the rows a thread accumulates in P.V, rounded up to a bucket (2, 4 or 16), so that a
// decode step of one token (R = group <= 8) does not run 16 predicated rows per key.
template <st_type T, int D>
static st_status dec_launch_rows(st_cuda_ctx *c, int n_split, int R, st_tensor *dst, const st_tensor *q,
                                 const st_tensor *k_cache, const st_tensor *v_cache, const int32_t *pos,
                                 const attn_pages *pg, const st_attn_params *p, float *part_acc, float2 *part_ml,
                                 const dec_rope_args *ra, st_error *err) {
    const int nr = (R + dec_cfg<T, D>::NRG - 1) / dec_cfg<T, D>::NRG;
    if (nr <= 2)
        return dec_launch<T, D, 2>(c, n_split, R, dst, q, k_cache, v_cache, pos, pg, p, part_acc, part_ml, ra, err);
    if (nr <= 4)
        return dec_launch<T, D, 4>(c, n_split, R, dst, q, k_cache, v_cache, pos, pg, p, part_acc, part_ml, ra, err);
    return dec_launch<T, D, DEC_MAX_NR>(c, n_split, R, dst, q, k_cache, v_cache, pos, pg, p, part_acc, part_ml, ra,
                                        err);
}

// The split-KV attention; with ra, its queries and new key roped in the kernel (one token a
// block); with pg, every query its own paged sequence.
static st_status dec_run(st_backend *b, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                         const st_tensor *v_cache, const st_tensor *positions, const attn_pages *pg,
                         const st_attn_params *p, const dec_rope_args *ra, st_error *err) {
    st_cuda_ctx *c = cuda_ctx(b);
    // One token over a short F16 cache (a bound of up to 128 keys: tg128's depth buckets):
    // the warps kernel (cuda_attention_decode_warps.cu), the faster there; past it this
    // kernel, which is the faster at depths of 1,000 and more.
    if (p->n_kv <= dec_warps_round_keys(c, q, k_cache, v_cache, pg != NULL))
        return dec_warps_launch(c, dst, q, k_cache, v_cache, (const int32_t *)positions->data, pg, p, ra, err);
    const int64_t D = q->ne[0], n_head = q->ne[1], M = q->ne[2], n_head_kv = k_cache->ne[1];
    const int R = (int)((pg ? 1 : M) * (n_head / n_head_kv));
    // splits enough to fill the SMs: over the kv heads, and over a paged batch's sequences
    const int64_t n_pairs = n_head_kv * (pg ? M : 1);
    int64_t n_split = ((int64_t)DEC_BLOCKS_PER_SM * c->sm_count + n_pairs - 1) / n_pairs;
    if (n_split > DEC_MAX_SPLITS) n_split = DEC_MAX_SPLITS;
    // A split past ceil(n_kv / DEC_MIN_SPLIT_KEYS) never works (dec_make_plan: its count is
    // at most ceil(len / DEC_MIN_SPLIT_KEYS), len <= n_kv, and 1 up to dec_one_split_keys):
    // the same plan from a smaller grid.
    const int C = dec_chunk_keys((int)D, k_cache->type == ST_TYPE_F16 ? 2 : 4);
    const int64_t n_useful =
        p->n_kv <= dec_one_split_keys(C) ? 1 : (p->n_kv + DEC_MIN_SPLIT_KEYS - 1) / DEC_MIN_SPLIT_KEYS;
    if (n_split > n_useful) n_split = n_useful;
    if (n_split < 1) n_split = 1;
    const int64_t slots = n_head * M * n_split;
    void *buf = NULL;
    const st_status st = dec_partials(c, (size_t)slots * ((size_t)D * sizeof(float) + sizeof(float2)), &buf, err);
    if (st != ST_OK) return st;
    float *part_acc = (float *)buf;
    float2 *part_ml = (float2 *)(part_acc + slots * D); // 8-byte aligned: D is even
    const int32_t *pos = (const int32_t *)positions->data;
    const int ns = (int)n_split;
    const bool f16 = k_cache->type == ST_TYPE_F16;
#define DEC_CASE(d)                                                                                                \
    case d:                                                                                                        \
        return f16 ? dec_launch_rows<ST_TYPE_F16, d>(c, ns, R, dst, q, k_cache, v_cache, pos, pg, p, part_acc,       \
                                                     part_ml, ra, err)                                             \
                   : dec_launch_rows<ST_TYPE_F32, d>(c, ns, R, dst, q, k_cache, v_cache, pos, pg, p, part_acc,       \
                                                     part_ml, ra, err);
    switch (D) {
        DEC_CASE(64)
        DEC_CASE(128)
        DEC_CASE(256)
    default: ST_ASSERT(!"split-KV attention: head_dim not supported (st_cuda_attn_decode_supported)");
    }
#undef DEC_CASE
    return ST_OK;
}

st_status st_cuda_attn_decode(st_backend *b, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                              const st_tensor *v_cache, const st_tensor *positions, const attn_pages *pg,
                              const st_attn_params *p, st_error *err) {
    return dec_run(b, dst, q, k_cache, v_cache, positions, pg, p, NULL, err);
}

bool st_cuda_attn_decode_rope_supported(st_backend *b, const st_fused_rope_attention *op) {
    const st_fused_rope_store *rs = &op->rs;
    const st_rope_params *r = rs->rope;
    const int64_t hd = rs->q->ne[0], M = rs->q->ne[2];
    // one token, or decode tokens of a paged cache, each its own sequence: a block a token
    const bool one_each = op->pages ? op->pages->n_single == M && op->pages->n_runs == 0 : M == 1;
    st_tensor q1 = *rs->q;
    q1.ne[2] = 1;
    // norms over each token's whole q and k: packed heads, one block's sums of n_head * hd floats
    const bool whole = st_fused_rope_store_whole_norm(rs) && rs->k_norm &&
                       rs->q_norm->ne[0] == hd * rs->q->ne[1] && rs->k_norm->ne[0] == hd * rs->k->ne[1] &&
                       rs->q->nb[1] == (size_t)hd * sizeof(float) && rs->k->nb[1] == (size_t)hd * sizeof(float) &&
                       rs->q_norm->ne[0] <= INT_MAX && rs->k_norm->ne[0] <= INT_MAX;
    return one_each && M <= 65535 && st_cuda_attn_decode_supported(b, &q1, rs->k_cache, rs->v_cache) &&
           cuda_is_f32_rows(rs->q) && cuda_is_f32_rows(rs->k) && cuda_is_f32_rows(rs->v) && cuda_same_shape(rs->k, rs->v) &&
           rs->k->ne[0] == hd && rs->k->ne[1] == rs->k_cache->ne[1] && rs->k->ne[2] == M &&
           (r->mode == ST_ROPE_MODE_NORM || r->mode == ST_ROPE_MODE_NEOX) && r->n_rot >= 0 && r->n_rot % 2 == 0 &&
           r->n_rot <= hd && r->freq_base > 0.0f && (rs->q_norm == NULL) == (rs->k_norm == NULL) &&
           (!rs->q_norm || (rs->q_norm->ne[0] == hd && rs->k_norm->ne[0] == hd) || whole) &&
           cuda_is_i32_index(rs->positions) && rs->positions->ne[0] >= M && cuda_same_shape(rs->k_cache, rs->v_cache) &&
           rs->k_cache->ne[0] == hd;
}

st_status st_cuda_attn_decode_rope(st_backend *b, const st_fused_rope_attention *op, st_error *err) {
    const st_fused_rope_store *rs = &op->rs;
    const st_rope_params *r = rs->rope;
    ST_ASSERT(st_cuda_attn_decode_rope_supported(b, op));
    dec_rope_args ra;
    memset(&ra, 0, sizeof(ra));
    ra.k = cuda_view(rs->k);
    ra.v = cuda_view(rs->v);
    ra.q_norm = rs->q_norm ? (const float *)rs->q_norm->data : NULL;
    ra.k_norm = rs->k_norm ? (const float *)rs->k_norm->data : NULL;
    ra.whole_norm = st_fused_rope_store_whole_norm(rs) ? 1 : 0;
    ra.eps = rs->eps;
    ra.mode_neox = r->mode == ST_ROPE_MODE_NEOX ? 1 : 0;
    ra.n_rot = r->n_rot;
    ra.freq_base = r->freq_base;
    ra.freq_scale = r->freq_scale;
    ra.attn_factor = r->attn_factor;
    ra.freq_factors = r->freq_factors;
    if (rs->rope_cs && rs->q->ne[2] == 1) { // the kernels read one token's rotations; several form theirs
        ST_ASSERT(cuda_is_f32_rows(rs->rope_cs) && rs->rope_cs->ne[0] == r->n_rot && (uintptr_t)rs->rope_cs->data % 8 == 0);
        ra.cs = (const float2 *)rs->rope_cs->data;
    }
    ra.op_err = cuda_ctx(b)->d_op_error;
    attn_pages pg = {};
    if (op->pages) {
        ST_ASSERT(cuda_is_i32_index(op->pages->table) && cuda_is_i32_index(op->pages->seq));
        pg.table = (const int32_t *)op->pages->table->data;
        pg.seq = (const int32_t *)op->pages->seq->data;
        pg.max_blocks = op->pages->table->ne[0];
    }
    return dec_run(b, op->out, rs->q, rs->k_cache, rs->v_cache, rs->positions, op->pages ? &pg : NULL, op->attn, &ra,
                   err);
}
