// The k largest logits of each row and its log-sum-exp (st_cpu_top_k_logits), so that a
// batch's sampler needs k candidates a row on the host instead of the vocabulary.
//
//   logits F32 [V, n];  ids I32 [k, n] packed;  vals F32 [k + 1, n] (host memory of
//   host_alloc's works: the last level writes it directly)
//
// Levels of tiles. A row is cut into tiles of TOPK_TILE logits, a block a (row, tile): it
// holds the tile in registers (TOPK_PER_THREAD a thread), takes the tile's max and its sum
// of exp(x - max) (in double) and keeps the tile's k best in the CPU's order (descending
// value, ascending id among equal values). A row's k best are among its tiles' k best, so
// the next level does the same over the tiles' candidates ((key, id) pairs, k a tile) until
// one tile holds them all; that last level writes the k best in order, their values
// (copies of the logits) and the log-sum-exp (the tiles' maxima and sums combined in double).
// V = 128256, k = 64: 32 tiles, then one of 2048 candidates; V <= TOPK_TILE: one level.
//
// A tile's k best, by ranking: each thread's best key, and in each warp the q-th largest of
// them (q = ceil(k / warps)); the least of those is at or below the tile's k-th best key,
// since each warp holds q distinct entries at or above it. A level over candidates also
// takes the k-th largest of its lists' heads (each list's c best by place, c n_lists about
// 2k): any k of a tile's entries bound its k-th best from below, and the heads of lists in
// order hold nearly all of the tile's k best, so that bound sits close to it, where the
// warps' sits far below (a tile of good candidates: most threads' bests are near the top).
// The larger of the two bounds is taken. The entries at or above that
// bound (for logits, not many more than k) are gathered and each one's rank among
// them is its place in the order. Where more than TOPK_CANDIDATES reach the bound (long
// runs of equal keys), the k-th largest key is found bit by bit from the top instead, each
// bit one block count of the keys at or above a threshold, ties of it cut at the id found
// the same way, and the last level sorts what that keeps.
//
// Bytes: the logits read once; 8 B a candidate written and read once a level. Scratch
// (st_cuda_scratch): the tiles' statistics and candidates of the first two levels.
#include <limits.h>

#include "cuda/cuda_common.cuh"

#define TOPK_THREADS 256
#define TOPK_PER_THREAD 16
#define TOPK_TILE (TOPK_THREADS * TOPK_PER_THREAD) // 4096 entries a block
#define TOPK_WARPS (TOPK_THREADS / ST_GPU_WARP_SIZE)
#define TOPK_MAX_K 256 // ST_RUNNER_MAX_CANDIDATES; a level shrinks its input TOPK_TILE / k >= 16 times
#define TOPK_MAX_LEVELS 8
#define TOPK_CANDIDATES (2 * TOPK_THREADS) // the most entries at or above its bound a ranking takes


// a before b: descending key, ascending id among equal keys.
__device__ __forceinline__ bool topk_before(uint32_t ka, int32_t ia, uint32_t kb, int32_t ib) {
    return ka > kb || (ka == kb && ia < ib);
}

// The block's sum of an int, in every thread, behind one barrier: red holds two rounds of
// the warps' sums and *round flips each call, so a round's slots are rewritten only after
// the next call's barrier, which every thread passes after reading them.
__device__ __forceinline__ int topk_block_count(int v, int *red, int *round) {
#pragma unroll
    for (int off = ST_GPU_WARP_SIZE / 2; off > 0; off >>= 1) v += st_gpu_shfl_xor(v, off);
    int *r = red + *round * TOPK_WARPS;
    *round ^= 1;
    if (threadIdx.x % ST_GPU_WARP_SIZE == 0) r[threadIdx.x / ST_GPU_WARP_SIZE] = v;
    __syncthreads();
    int s = 0;
#pragma unroll
    for (int w = 0; w < TOPK_WARPS; w++) s += r[w];
    return s;
}

// The block's max (is_max) or sum of v, in every thread.
template <typename T> __device__ __forceinline__ T topk_block_reduce(T v, T *shared, bool is_max) {
    const int lane = threadIdx.x % ST_GPU_WARP_SIZE, warp = threadIdx.x / ST_GPU_WARP_SIZE;
#pragma unroll
    for (int off = ST_GPU_WARP_SIZE / 2; off > 0; off >>= 1) {
        const T o = st_gpu_shfl_xor(v, off);
        v = is_max ? (o > v ? o : v) : v + o;
    }
    __syncthreads(); // shared is free
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    T r = shared[0];
    for (int w = 1; w < TOPK_WARPS; w++) r = is_max ? (shared[w] > r ? shared[w] : r) : r + shared[w];
    return r;
}

struct topk_shared {
    uint32_t key[TOPK_MAX_K]; // the tile's best (in order when ranked, else sorted by the last level)
    int32_t id[TOPK_MAX_K];
    uint64_t cand[TOPK_CANDIDATES]; // the entries at or above the bound (or the lists' heads), as topk_order
    uint32_t warp_bound[TOPK_WARPS];
    uint32_t head_bound;
    int red[2 * TOPK_WARPS];
    double red_d[TOPK_WARPS];
    float red_f[TOPK_WARPS];
    int n;
};

// The tile's k best slots (id < 0: an empty slot) into sh->key/id [k], in no order; when the
// tile holds fewer than k entries, empty ones (key 0, id -1) fill the rest.
__device__ __forceinline__ void topk_tile_select(const uint32_t (&key)[TOPK_PER_THREAD], const int32_t (&id)[TOPK_PER_THREAD], int k,
                                 topk_shared *sh) {
    int round = 0, c = 0;
#pragma unroll
    for (int i = 0; i < TOPK_PER_THREAD; i++) c += id[i] >= 0;
    const int n_valid = topk_block_count(c, sh->red, &round);
    uint32_t kth = 0;        // keep keys above kth ...
    int32_t last_id = INT_MAX; // ... and keys equal to it with ids up to last_id
    if (n_valid > k) {
        // the largest kth with at least k keys at or above it
        for (int bit = 31; bit >= 0; bit--) {
            const uint32_t t = kth | (1u << bit);
            c = 0;
#pragma unroll
            for (int i = 0; i < TOPK_PER_THREAD; i++) c += id[i] >= 0 && key[i] >= t;
            if (topk_block_count(c, sh->red, &round) >= k) kth = t;
        }
        int gt = 0, eq = 0;
#pragma unroll
        for (int i = 0; i < TOPK_PER_THREAD; i++) {
            gt += id[i] >= 0 && key[i] > kth;
            eq += id[i] >= 0 && key[i] == kth;
        }
        const int want = k - topk_block_count(gt, sh->red, &round); // ties kept: 1..n_eq
        if (topk_block_count(eq, sh->red, &round) > want) {
            // the largest last_id with fewer than `want` tie ids below it: ids are distinct,
            // so exactly `want` of them are at or below it
            last_id = 0;
            for (int bit = 30; bit >= 0; bit--) {
                const int32_t t = last_id | (1 << bit);
                c = 0;
#pragma unroll
                for (int i = 0; i < TOPK_PER_THREAD; i++) c += id[i] >= 0 && key[i] == kth && id[i] < t;
                if (topk_block_count(c, sh->red, &round) < want) last_id = t;
            }
        }
    }
    if (threadIdx.x == 0) sh->n = 0;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < TOPK_PER_THREAD; i++)
        if (id[i] >= 0 && (key[i] > kth || (key[i] == kth && id[i] <= last_id))) {
            const int j = atomicAdd(&sh->n, 1);
            sh->key[j] = key[i], sh->id[j] = id[i];
        }
    __syncthreads();
    for (int j = sh->n + (int)threadIdx.x; j < k; j += TOPK_THREADS) sh->key[j] = 0, sh->id[j] = -1;
    __syncthreads();
}

// An entry as one number that is larger exactly when the entry comes first in the order
// (descending key, ascending id; id >= 0).
__device__ __forceinline__ uint64_t topk_order(uint32_t key, int32_t id) {
    return ((uint64_t)key << 32) | (uint32_t)(INT_MAX - id);
}

// The places a level before the last rotates tile p's k best by (see the kernel).
__device__ __forceinline__ int topk_rotate(uint32_t p, int k) { return (int)((p * 2654435761u) % (uint32_t)k); }

// A bound at or below the tile's k-th best key from the candidate lists it holds (a level
// after the first): the k-th largest of each list's heads, the entries whose place in their
// list holds one of its c best (the level before wrote rank r of its tile p at place
// (r + rotate_p) mod k, rotate_p = topk_rotate(p, k)); pos the row-input position of this
// thread's first entry. Any k of the tile's entries bound its k-th best from below, so the
// bound holds whatever the lists' order; 0 (no bound) when fewer than k or more than
// TOPK_CANDIDATES heads are here. The same value in every thread.
__device__ __forceinline__ uint32_t topk_heads_bound(const uint32_t (&key)[TOPK_PER_THREAD],
                                                     const int32_t (&id)[TOPK_PER_THREAD], int64_t pos, int k, int c,
                                                     topk_shared *sh) {
    if (threadIdx.x == 0) sh->n = 0, sh->head_bound = 0;
    __syncthreads();
    // entry i at pos + i TOPK_THREADS: list p, place pl, stepped without a division each
    const uint32_t uk = (uint32_t)k, dp = TOPK_THREADS / uk, dpl = TOPK_THREADS % uk;
    uint32_t p = (uint32_t)pos / uk, pl = (uint32_t)pos % uk;
#pragma unroll
    for (int i = 0; i < TOPK_PER_THREAD; i++) {
        int rank = (int)pl - topk_rotate(p, k); // its rank in its list
        if (rank < 0) rank += k;
        if (id[i] >= 0 && rank < c) {
            const int j = atomicAdd(&sh->n, 1);
            if (j < TOPK_CANDIDATES) sh->cand[j] = topk_order(key[i], id[i]);
        }
        pl += dpl, p += dp;
        if (pl >= uk) pl -= uk, p++;
    }
    __syncthreads();
    const int n = sh->n;
    if (n >= k && n <= TOPK_CANDIDATES)
        for (int e = threadIdx.x; e < n; e += TOPK_THREADS) {
            const uint64_t o = sh->cand[e];
            int rank = 0;
            for (int j = 0; j < n; j++) rank += sh->cand[j] > o;
            if (rank == k - 1) sh->head_bound = (uint32_t)(o >> 32);
        }
    __syncthreads();
    return sh->head_bound;
}

// The tile's k best slots into sh->key/id [k] in order, then empty ones (key 0, id -1) when
// the tile holds fewer than k entries, the order rotated by `rotate` places (place (rank +
// rotate) mod k); by ranking the entries at or above a bound of the k-th best (see the
// top; lower: another bound at or below the k-th best, 0 for none). Returns false, having
// written nothing topk_tile_select reads, when more than TOPK_CANDIDATES entries reach the
// bound. The same value in every thread.
__device__ __forceinline__ bool topk_tile_rank(const uint32_t (&key)[TOPK_PER_THREAD], const int32_t (&id)[TOPK_PER_THREAD], int k,
                                               int rotate, uint32_t lower, topk_shared *sh) {
    const int lane = threadIdx.x % ST_GPU_WARP_SIZE, warp = threadIdx.x / ST_GPU_WARP_SIZE;
    uint32_t best = 0; // 0 (no entry) is at or below every key
#pragma unroll
    for (int i = 0; i < TOPK_PER_THREAD; i++)
        if (id[i] >= 0 && key[i] > best) best = key[i];
    // the warp's q-th largest best: the lane whose best has fewer than q above it and at
    // least q at or above it (every lane holding that value writes it)
    const int q = (k + TOPK_WARPS - 1) / TOPK_WARPS;
    int above = 0, at_or_above = 0;
    for (int j = 0; j < ST_GPU_WARP_SIZE; j++) {
        const uint32_t o = st_gpu_shfl(best, j);
        above += o > best;
        at_or_above += o >= best;
    }
    if (above < q && q <= at_or_above) sh->warp_bound[warp] = best;
    if (threadIdx.x == 0) sh->n = 0;
    __syncthreads();
    uint32_t bound = sh->warp_bound[0];
#pragma unroll
    for (int w = 1; w < TOPK_WARPS; w++) bound = min(bound, sh->warp_bound[w]);
    bound = max(bound, lower);
    // gather: a warp's places by a scan of its lanes' counts, one atomic a warp
    int c = 0;
#pragma unroll
    for (int i = 0; i < TOPK_PER_THREAD; i++) c += id[i] >= 0 && key[i] >= bound;
    const int incl = cuda_warp_inclusive_sum(c);
    int base = 0;
    if (lane == ST_GPU_WARP_SIZE - 1) base = atomicAdd(&sh->n, incl);
    int pos = st_gpu_shfl(base, ST_GPU_WARP_SIZE - 1) + incl - c;
#pragma unroll
    for (int i = 0; i < TOPK_PER_THREAD; i++)
        if (id[i] >= 0 && key[i] >= bound) {
            if (pos < TOPK_CANDIDATES) sh->cand[pos] = topk_order(key[i], id[i]);
            pos++;
        }
    __syncthreads();
    const int n = sh->n;
    if (n > TOPK_CANDIDATES) return false;
    // an entry's rank among the gathered is its place: they are distinct (ids are)
    for (int e = threadIdx.x; e < n; e += TOPK_THREADS) {
        const uint64_t o = sh->cand[e];
        int rank = 0;
        for (int j = 0; j < n; j++) rank += sh->cand[j] > o;
        if (rank < k) {
            const int j = (rank + rotate) % k;
            sh->key[j] = (uint32_t)(o >> 32), sh->id[j] = INT_MAX - (int32_t)(uint32_t)o;
        }
    }
    for (int j = n + (int)threadIdx.x; j < k; j += TOPK_THREADS) sh->key[(j + rotate) % k] = 0, sh->id[(j + rotate) % k] = -1;
    __syncthreads();
    return true;
}

// sh->key/id [k] sorted in place (bitonic over the next power of two; k <= TOPK_MAX_K).
__device__ void topk_sort(int k, topk_shared *sh) {
    int P = 1;
    while (P < k) P <<= 1;
    for (int i = k + (int)threadIdx.x; i < P; i += TOPK_THREADS) sh->key[i] = 0, sh->id[i] = INT_MAX;
    __syncthreads();
    for (int size = 2; size <= P; size <<= 1) {
        for (int stride = size / 2; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < P; i += TOPK_THREADS) {
                const int j = i ^ stride;
                if (j > i) {
                    const bool up = (i & size) == 0; // this half sorts in "before" order
                    const bool swap = up ? topk_before(sh->key[j], sh->id[j], sh->key[i], sh->id[i])
                                         : topk_before(sh->key[i], sh->id[i], sh->key[j], sh->id[j]);
                    if (swap) {
                        const uint32_t tk = sh->key[i];
                        const int32_t ti = sh->id[i];
                        sh->key[i] = sh->key[j], sh->id[i] = sh->id[j];
                        sh->key[j] = tk, sh->id[j] = ti;
                    }
                }
            }
            __syncthreads();
        }
    }
}

// One level, a block a (row, tile): FROM_LOGITS reads the tile from the logits and takes its
// statistics (to stats [n_tiles, n] (max, sum of exp(x - max)), or straight to the log-sum-exp
// when the row is one tile); otherwise it reads candidates in [n_in, n]. LAST (one tile a
// row) sorts the k best and writes ids [k, n] and vals [k + 1, n]; otherwise the k best go
// to out [k * n_tiles, n].
template <bool FROM_LOGITS, bool LAST>
__global__ void __launch_bounds__(TOPK_THREADS, 4)
    top_k_level_kernel(st_cuda_view logits, const uint2 *__restrict__ in, int64_t n_in, int k, double2 *stats,
                       int n_stats, uint2 *__restrict__ out, int32_t *__restrict__ ids, st_cuda_view vals) {
    __shared__ topk_shared sh;
    const int64_t row = blockIdx.x, tile = blockIdx.y, n_tiles = gridDim.y;
    const int64_t base = tile * TOPK_TILE + threadIdx.x;
    const float *x = (const float *)(logits.data + row * logits.nb1);
    uint32_t key[TOPK_PER_THREAD];
    int32_t id[TOPK_PER_THREAD];
    float lse = 0.0f;
    if (FROM_LOGITS) {
        float v[TOPK_PER_THREAD], mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < TOPK_PER_THREAD; i++) {
            const int64_t t = base + i * TOPK_THREADS;
            v[i] = t < n_in ? x[t] : -INFINITY;
            id[i] = t < n_in ? (int32_t)t : -1;
            mx = fmaxf(mx, v[i]);
        }
        mx = topk_block_reduce<float>(mx, sh.red_f, true);
        double sum = 0.0;
#pragma unroll
        for (int i = 0; i < TOPK_PER_THREAD; i++) {
            if (id[i] >= 0) sum += (double)expf(v[i] - mx);
            key[i] = cuda_float_key(v[i]);
        }
        sum = topk_block_reduce<double>(sum, sh.red_d, false);
        if (LAST) lse = (float)((double)mx + log(sum));
        else if (threadIdx.x == 0) stats[row * n_tiles + tile] = make_double2((double)mx, sum);
    } else {
        const uint2 *p = in + row * n_in;
#pragma unroll
        for (int i = 0; i < TOPK_PER_THREAD; i++) {
            const int64_t t = base + i * TOPK_THREADS;
            const uint2 e = t < n_in ? p[t] : make_uint2(0u, 0xffffffffu);
            key[i] = e.x, id[i] = (int32_t)e.y;
        }
        if (LAST) { // the row's tiles' statistics combined
            const double2 *s = stats + row * n_stats;
            double mx = -INFINITY, sum = 0.0;
            for (int i = threadIdx.x; i < n_stats; i += TOPK_THREADS) mx = fmax(mx, s[i].x);
            mx = topk_block_reduce<double>(mx, sh.red_d, true);
            for (int i = threadIdx.x; i < n_stats; i += TOPK_THREADS) sum += s[i].y * exp(s[i].x - mx);
            sum = topk_block_reduce<double>(sum, sh.red_d, false);
            lse = (float)(mx + log(sum));
        }
    }
    // a level before the last rotates its tile's k best by a hash of the tile: the next level's
    // thread takes every TOPK_THREADS-th candidate, which in tiles all in order would be one
    // place of every tile (its best far below the row's k-th, the ranking's bound with it)
    const int rotate = LAST ? 0 : topk_rotate((uint32_t)tile, k);
    uint32_t lower = 0;
    if (!FROM_LOGITS) { // the heads: c of each of the tile's lists, about 2k in all
        const int64_t len = min((int64_t)TOPK_TILE, n_in - tile * TOPK_TILE);
        const int64_t lists = (len + k - 1) / k, c = min((int64_t)k, (2 * (int64_t)k + lists - 1) / lists);
        lower = topk_heads_bound(key, id, tile * TOPK_TILE + threadIdx.x, k, (int)c, &sh);
    }
    const bool in_order = topk_tile_rank(key, id, k, rotate, lower, &sh);
    if (!in_order) topk_tile_select(key, id, k, &sh);
    if (!LAST) {
        uint2 *o = out + (row * n_tiles + tile) * k;
        for (int j = threadIdx.x; j < k; j += TOPK_THREADS) o[j] = make_uint2(sh.key[j], (uint32_t)sh.id[j]);
        return;
    }
    if (!in_order) topk_sort(k, &sh);
    float *v = (float *)(vals.data + row * vals.nb1);
    for (int j = threadIdx.x; j < k; j += TOPK_THREADS) {
        ids[row * k + j] = sh.id[j];
        v[j] = x[sh.id[j]];
    }
    if (threadIdx.x == 0) v[k] = lse;
}

st_status st_cuda_top_k(st_backend *b, st_tensor *ids, st_tensor *vals, const st_tensor *logits, int32_t k,
                        st_error *err) {
    st_cuda_ctx *c = cuda_ctx(b);
    const int64_t V = logits->ne[0], n = logits->ne[1];
    ST_ASSERT(cuda_is_f32_rows(logits) && cuda_is_f32_rows(vals) && logits->ne[2] == 1 && logits->ne[3] == 1);
    ST_ASSERT(k >= 1 && k <= V && k <= TOPK_MAX_K && vals->ne[0] == k + 1 && vals->ne[1] == n);
    ST_ASSERT(cuda_is_i32_index(ids) && ids->ne[0] == k && ids->nb[1] == (size_t)k * sizeof(int32_t));
    ST_ASSERT(V <= INT32_MAX && n <= INT32_MAX);
    if (n == 0) return ST_OK;
    // the inputs of each level: V logits, then k candidates a tile of the level before
    int64_t n_in[TOPK_MAX_LEVELS], tiles[TOPK_MAX_LEVELS];
    int levels = 0;
    for (int64_t m = V;; m = tiles[levels - 1] * k) {
        ST_ASSERT(levels < TOPK_MAX_LEVELS);
        n_in[levels] = m;
        tiles[levels] = (m + TOPK_TILE - 1) / TOPK_TILE;
        ST_ASSERT(tiles[levels] <= 65535); // gridDim.y
        levels++;
        if (tiles[levels - 1] == 1) break;
    }
    const st_cuda_view lv = cuda_view(logits), vv = cuda_view(vals);
    int32_t *id_out = (int32_t *)ids->data;
    if (levels == 1) {
        top_k_level_kernel<true, true><<<dim3((unsigned int)n, 1), TOPK_THREADS, 0, c->stream>>>(
            lv, NULL, V, k, NULL, 0, NULL, id_out, vv);
        ST_GPU_CHECK_LAUNCH();
        return ST_OK;
    }
    // scratch: stats [tiles0, n], then candidates of even levels at a, of odd ones at bb
    const size_t stats_bytes = (size_t)(tiles[0] * n) * sizeof(double2);
    const size_t a_bytes = (size_t)(tiles[0] * k * n) * sizeof(uint2);
    const size_t b_bytes = levels > 2 ? (size_t)(tiles[1] * k * n) * sizeof(uint2) : 0;
    char *scratch = NULL;
    st_status s = st_cuda_scratch(c, stats_bytes + a_bytes + b_bytes, (void **)&scratch, err);
    if (s != ST_OK) return s;
    double2 *stats = (double2 *)scratch;
    uint2 *buf[2] = {(uint2 *)(scratch + stats_bytes), (uint2 *)(scratch + stats_bytes + a_bytes)};
    top_k_level_kernel<true, false><<<dim3((unsigned int)n, (unsigned int)tiles[0]), TOPK_THREADS, 0, c->stream>>>(
        lv, NULL, V, k, stats, 0, buf[0], NULL, vv);
    ST_GPU_CHECK_LAUNCH();
    for (int l = 1; l < levels - 1; l++) {
        top_k_level_kernel<false, false><<<dim3((unsigned int)n, (unsigned int)tiles[l]), TOPK_THREADS, 0, c->stream>>>(
            lv, buf[(l - 1) & 1], n_in[l], k, NULL, 0, buf[l & 1], NULL, vv);
        ST_GPU_CHECK_LAUNCH();
    }
    top_k_level_kernel<false, true><<<dim3((unsigned int)n, 1), TOPK_THREADS, 0, c->stream>>>(
        lv, buf[(levels - 2) & 1], n_in[levels - 1], k, stats, (int)tiles[0], NULL, id_out, vv);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}
