// Sampling from each whole logits row where the logits are (st_cpu_draw_rows), so that a
// request whose chain the row's candidates do not settle brings one token id a row to the
// host instead of V logits: the host sampler's chain (penalties, top-k, top-p, min-p,
// temperature, the draw; greedy as a top-k of 1).
//
//   logits F32 [V, n] (penalized in place and restored); params F32 [6, n] (temperature,
//   min-p, top-p, repeat, frequency and presence penalties; temperature 0: row not drawn);
//   words I32 [4, n] (the uniform's words, st_rng_uniform_words; top-k, 0 off; the number
//   of penalized tokens); penalized I32 [2 P, n] (token id, count in the history: distinct
//   ids); ids I32 [n], drawn F32 [n] (host memory of host_alloc's works: written directly)
//
// One block a row. The penalized tokens' logits are rewritten in the row (their originals
// kept in shared memory, put back at the end), then pass 1 finds the row's maximum and
// whether it holds a NaN or +inf.
//
// Without top-k or top-p the host draws in token id order: thread t sums
// exp(x / temp - max / temp) in double, in id order, over the tokens of its chunk
// [t C, t C + C) whose logit passes min-p (x >= max + log(min-p)); an inclusive scan of the
// threads' sums gives the running sum at each chunk's end, the last one the total. The
// first thread whose end passes u * total walks its chunk from the sum before it, as
// st_sample_draw_at walks a run (each chunk starts exactly where the one before it ends, so
// the first whose end passes the target starts at or before it).
//
// With top-k or top-p the host sorts (logit descending, id ascending among equal logits),
// keeps the first k, then the shortest head whose probability among them reaches top-p,
// and draws from those in that order. The top-k cut, the top-p cut and the draw are each
// "the first token in that order where the running sum of a weight passes a target" (a
// count of 1 a token for top-k), found without sorting by a radix select (select_passing):
// each weight in fixed point (FIXED_ONE to the largest, so a row's sum fits 64 bits and
// every sum is exact, whatever the order of the atomics), four passes over the row's
// 32-bit order keys 8 bits at a time, each a histogram (in shared memory, in copies) of the
// weights of the tokens that match the digits so far, then the tied tokens of the key
// found counted in id order.
//
// The host sums one token after another in double (its top-p probabilities rounded to
// float), so its running sums differ from these in the last bits: the two draws differ
// only where a target lies within that rounding of a boundary between two tokens. Top-k
// and greedy, counts, are exact.
#include <math.h>

#include "cuda/cuda_common.cuh"
#include "stride/sample.h"

#define DRAW_THREADS 1024
#define DRAW_WARPS (DRAW_THREADS / ST_GPU_WARP_SIZE)
#define DRAW_BINS 256 // a radix pass's digit: 8 bits of the 32-bit key
#define BINS_PER_LANE (DRAW_BINS / ST_GPU_WARP_SIZE)
// The histogram's copies, each shared by DRAW_WARPS / DRAW_COPIES warps (so that few threads
// add to one address), each bin a 64-bit sum kept as two 32-bit words (the shared-memory
// atomics that are native: a 64-bit one is a compare-and-swap loop).
#define DRAW_COPIES 16
static_assert(DRAW_WARPS <= ST_GPU_WARP_SIZE, "the warps' sums are scanned by one warp");
static_assert(DRAW_BINS % ST_GPU_WARP_SIZE == 0, "one warp scans the bins");
static_assert(DRAW_WARPS % DRAW_COPIES == 0, "the histogram's copies split the warps evenly");

// A weight of 1 (the row's largest) in fixed point: V < 2^24 weights of at most 2^40 sum
// below 2^64.
#define FIXED_ONE 1099511627776.0 // 2^40

struct draw_shared {
    float max[DRAW_WARPS];
    int flag[DRAW_WARPS];
    long long index[DRAW_WARPS];
    double warp_end[DRAW_WARPS]; // the running sum at each warp's end
    unsigned long long warp_total[DRAW_WARPS];
    unsigned int hist_lo[DRAW_COPIES][DRAW_BINS], hist_hi[DRAW_COPIES][DRAW_BINS];
    unsigned long long hist[DRAW_BINS]; // the copies' sums
    unsigned long long target, below, tied_weight; // select_passing's state
    unsigned int bin;
    long long pick;
    float original[ST_DRAW_MAX_PENALIZED]; // the penalized tokens' logits
};

// The block's maximum of v and OR of bad, in every thread.
__device__ __forceinline__ void draw_block_max(float *v, int *bad, draw_shared *sh) {
    const int lane = threadIdx.x % ST_GPU_WARP_SIZE, warp = threadIdx.x / ST_GPU_WARP_SIZE;
#pragma unroll
    for (int off = ST_GPU_WARP_SIZE / 2; off > 0; off >>= 1) {
        *v = fmaxf(*v, st_gpu_shfl_xor(*v, off));
        *bad |= st_gpu_shfl_xor(*bad, off);
    }
    if (lane == 0) sh->max[warp] = *v, sh->flag[warp] = *bad;
    __syncthreads();
    *v = sh->max[0], *bad = sh->flag[0];
    for (int w = 1; w < DRAW_WARPS; w++) *v = fmaxf(*v, sh->max[w]), *bad |= sh->flag[w];
    __syncthreads(); // (sh free again)
}

// The block's minimum (is_min) or maximum of i, in every thread.
__device__ __forceinline__ long long draw_block_index(long long i, bool is_min, draw_shared *sh) {
    const int lane = threadIdx.x % ST_GPU_WARP_SIZE, warp = threadIdx.x / ST_GPU_WARP_SIZE;
#pragma unroll
    for (int off = ST_GPU_WARP_SIZE / 2; off > 0; off >>= 1) {
        const long long o = st_gpu_shfl_xor(i, off);
        i = is_min ? (o < i ? o : i) : (o > i ? o : i);
    }
    if (lane == 0) sh->index[warp] = i;
    __syncthreads();
    long long r = sh->index[0];
    for (int w = 1; w < DRAW_WARPS; w++) r = is_min ? (sh->index[w] < r ? sh->index[w] : r) : (sh->index[w] > r ? sh->index[w] : r);
    __syncthreads();
    return r;
}

// The inclusive sum of v over the threads before and at this one, and the block's total.
__device__ __forceinline__ unsigned long long draw_block_scan(unsigned long long v, unsigned long long *total,
                                                              draw_shared *sh) {
    const int lane = threadIdx.x % ST_GPU_WARP_SIZE, warp = threadIdx.x / ST_GPU_WARP_SIZE;
    v = cuda_warp_inclusive_sum(v);
    if (lane == ST_GPU_WARP_SIZE - 1) sh->warp_total[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0)
        for (int k = 1; k < DRAW_WARPS; k++) sh->warp_total[k] += sh->warp_total[k - 1];
    __syncthreads();
    const unsigned long long r = v + (warp > 0 ? sh->warp_total[warp - 1] : 0ull);
    *total = sh->warp_total[DRAW_WARPS - 1];
    __syncthreads();
    return r;
}

// A logit's place in the host's sorted order as an unsigned key: ascending keys are
// descending logits; -0 and +0 (equal logits) share a key; -inf comes last.
__device__ __forceinline__ uint32_t draw_order_key(float v) { return ~cuda_float_key(v + 0.0f); }

__device__ __forceinline__ unsigned long long fixed_weight(double w) {
    return (unsigned long long)(w * FIXED_ONE + 0.5);
}

// The tokens at or before (key, id) in sorted order: those a cut keeps.
struct kept_before {
    uint32_t key;
    int64_t id;
    __device__ bool holds(uint32_t k, int64_t i) const { return k < key || (k == key && i <= id); }
};
#define KEPT_ALL (kept_before{0xffffffffu, INT64_MAX})

// The weights select_passing sums, of token i of logit v and order key k.
// Top-k's: a count of one a token.
struct count_weight {
    __device__ unsigned long long operator()(int64_t, float, uint32_t) const { return 1; }
};

// Top-p's: the probability among the tokens top-k kept, unnormalized (exp(x - max)).
struct cut_weight {
    double max;
    kept_before top_k;
    __device__ unsigned long long operator()(int64_t i, float v, uint32_t k) const {
        return top_k.holds(k, i) ? fixed_weight(exp((double)v - max)) : 0;
    }
};

// The draw's: exp(x / temp - max / temp) for the tokens top-k and top-p kept that pass
// min-p, 0 for the rest.
struct draw_weight {
    float temp;
    double max_t, threshold;
    kept_before top_k, top_p;
    __device__ unsigned long long operator()(int64_t i, float v, uint32_t k) const {
        if (!top_k.holds(k, i) || !top_p.holds(k, i) || (double)v < threshold) return 0;
        return fixed_weight(exp((double)(v / temp) - max_t));
    }
};

// Adds w to the bin whose 64-bit sum is hi * 2^32 + lo: the low word's add carries into
// the high one when it wraps (the old value tells), so the sum is exact.
__device__ __forceinline__ void hist_add(unsigned int *lo, unsigned int *hi, unsigned long long w) {
    const unsigned int wl = (unsigned int)w, wh = (unsigned int)(w >> 32);
    const unsigned int old = atomicAdd(lo, wl);
    const unsigned int up = wh + (old + wl < old ? 1u : 0u);
    if (up) atomicAdd(hi, up);
}

// What select_passing looks for: the count-th token (0-based) in order where count >= 0,
// else the first whose running sum reaches ceil(q * total) (reaching: a cut) or passes
// floor(q * total) (a draw); q in [0, 1).
struct select_target {
    long long count;
    double q;
    bool reaching;
};

// The first token in sorted order (ascending key, then id) whose running sum of wf's
// weights passes the target (select_target); every thread gets it.
template <class Weight>
__device__ long long select_passing(const float *x, int64_t V, const Weight &wf, select_target want,
                                    draw_shared *sh) {
    const int lane = threadIdx.x % ST_GPU_WARP_SIZE, warp = threadIdx.x / ST_GPU_WARP_SIZE;
    const int64_t C = (V + DRAW_THREADS - 1) / DRAW_THREADS, lo = threadIdx.x * C, hi = lo + C < V ? lo + C : V;
    const int copy = warp * DRAW_COPIES / DRAW_WARPS;
    unsigned int *hlo = sh->hist_lo[copy], *hhi = sh->hist_hi[copy];
    uint32_t prefix = 0, mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < DRAW_COPIES * DRAW_BINS; b += DRAW_THREADS)
            sh->hist_lo[0][b] = 0, sh->hist_hi[0][b] = 0;
        __syncthreads();
        // a run of one bin's weights is added at once (the row's tokens mostly share the
        // first digits, and one address's atomics wait on each other)
        uint32_t run_bin = 0;
        unsigned long long run = 0;
        for (int64_t i = threadIdx.x; i < V; i += DRAW_THREADS) {
            const float v = x[i];
            const uint32_t k = draw_order_key(v);
            if ((k & mask) != prefix) continue;
            const unsigned long long w = wf(i, v, k);
            if (w == 0) continue;
            const uint32_t bin = (k >> shift) & (DRAW_BINS - 1);
            if (bin != run_bin && run > 0) hist_add(&hlo[run_bin], &hhi[run_bin], run), run = 0;
            run_bin = bin;
            run += w;
        }
        if (run > 0) hist_add(&hlo[run_bin], &hhi[run_bin], run);
        __syncthreads();
        for (int b = threadIdx.x; b < DRAW_BINS; b += DRAW_THREADS) {
            unsigned long long sum = 0;
            for (int c = 0; c < DRAW_COPIES; c++) sum += ((unsigned long long)sh->hist_hi[c][b] << 32) + sh->hist_lo[c][b];
            sh->hist[b] = sum;
        }
        __syncthreads();
        if (warp == 0) { // lane l scans bins [l B, l B + B)
            unsigned long long mine = 0;
            for (int b = 0; b < BINS_PER_LANE; b++) mine += sh->hist[lane * BINS_PER_LANE + b];
            const unsigned long long incl = cuda_warp_inclusive_sum(mine);
            unsigned long long target, below = 0;
            if (shift == 24) { // the first pass sees every weight: the target, in every lane
                const unsigned long long total = st_gpu_shfl(incl, ST_GPU_WARP_SIZE - 1);
                const double t = want.q * (double)total;
                if (want.count >= 0) target = (unsigned long long)want.count;
                else if (want.reaching) target = t >= 1.0 ? (unsigned long long)ceil(t) - 1 : 0;
                else target = (unsigned long long)floor(t);
                if (target >= total) target = total - 1;
                if (lane == 0) sh->target = target;
            } else {
                target = sh->target, below = sh->below;
            }
            int first = below + incl > target ? lane : ST_GPU_WARP_SIZE;
#pragma unroll
            for (int off = ST_GPU_WARP_SIZE / 2; off > 0; off >>= 1) {
                const int o = st_gpu_shfl_xor(first, off);
                first = o < first ? o : first;
            }
            if (lane == first) {
                unsigned long long at = below + incl - mine;
                for (int b = lane * BINS_PER_LANE;; b++) {
                    if (at + sh->hist[b] > target || b == (lane + 1) * BINS_PER_LANE - 1) {
                        sh->bin = (unsigned int)b, sh->below = at;
                        break;
                    }
                    at += sh->hist[b];
                }
            }
        }
        __syncthreads();
        prefix |= sh->bin << shift;
        mask |= (uint32_t)(DRAW_BINS - 1) << shift;
        __syncthreads(); // (sh->bin read by all before the next pass writes it)
    }
    // the key is found: its tokens (equal logits) in id order, each of one weight
    unsigned long long tied = 0;
    for (int64_t i = lo; i < hi; i++) {
        const float v = x[i];
        if (draw_order_key(v) != prefix) continue;
        const unsigned long long w = wf(i, v, prefix);
        if (w > 0) tied++, sh->tied_weight = w; // (every writer writes the same)
    }
    unsigned long long n_tied;
    const unsigned long long end = draw_block_scan(tied, &n_tied, sh);
    const unsigned long long nth = (sh->target - sh->below) / sh->tied_weight; // 0-based, < n_tied
    if (nth >= end - tied && nth < end) {
        unsigned long long seen = end - tied;
        for (int64_t i = lo; i < hi; i++) {
            const float v = x[i];
            if (draw_order_key(v) != prefix || wf(i, v, prefix) == 0) continue;
            if (seen++ == nth) {
                sh->pick = i;
                break;
            }
        }
    }
    __syncthreads();
    const long long pick = sh->pick;
    __syncthreads();
    return pick;
}

// The draw in token id order, without top-k or top-p (the scan of the threads' chunk
// sums); every thread gets it.
__device__ long long draw_in_id_order(const float *x, int64_t V, float temp, double threshold, double max_t,
                                      double u, draw_shared *sh) {
    const int64_t C = (V + DRAW_THREADS - 1) / DRAW_THREADS, lo = threadIdx.x * C, hi = lo + C < V ? lo + C : V;
    double sum = 0.0;
    long long last_nonzero = -1;
    for (int64_t i = lo; i < hi; i++) {
        const float v = x[i];
        if ((double)v < threshold) continue;
        const double e = exp((double)(v / temp) - max_t);
        sum += e;
        if (e > 0.0) last_nonzero = i;
    }
    // inclusive scan: within the warp, then the warps' ends one after another
    const int lane = threadIdx.x % ST_GPU_WARP_SIZE, warp = threadIdx.x / ST_GPU_WARP_SIZE;
    const double in_warp = cuda_warp_inclusive_sum(sum);
    const double prev_lane = st_gpu_shfl(in_warp, lane > 0 ? lane - 1 : 0);
    if (lane == ST_GPU_WARP_SIZE - 1) sh->warp_end[warp] = in_warp;
    __syncthreads();
    if (threadIdx.x == 0)
        for (int k = 1; k < DRAW_WARPS; k++) sh->warp_end[k] += sh->warp_end[k - 1];
    __syncthreads();
    // warp_end[warp] is warp_end[warp - 1] + the last lane's in_warp: the same sum as that
    // lane's end below, so each chunk starts exactly where the one before it ends
    const double before_warp = warp > 0 ? sh->warp_end[warp - 1] : 0.0;
    const double start = lane > 0 ? before_warp + prev_lane : before_warp, end = before_warp + in_warp;
    const double target = u * sh->warp_end[DRAW_WARPS - 1];
    // the row's last token of nonzero weight (the largest has weight 1): where rounding
    // leaves the target at the total, or a walk short of it in a chunk of no weight
    const long long last_any = draw_block_index(last_nonzero, false, sh);
    const long long first = draw_block_index(target < end ? (long long)threadIdx.x : LLONG_MAX, true, sh);
    if (first == LLONG_MAX) return last_any;
    if (threadIdx.x == first) {
        double cum = start;
        // (the warp's scan adds in another order than this walk: its end may pass the
        // target where the walk's sum falls short by rounding)
        long long pick = last_nonzero >= 0 ? last_nonzero : last_any;
        for (int64_t i = lo; i < hi; i++) {
            const float v = x[i];
            if ((double)v < threshold) continue;
            cum += exp((double)(v / temp) - max_t);
            if (target < cum) {
                pick = i;
                break;
            }
        }
        sh->pick = pick;
    }
    __syncthreads();
    const long long pick = sh->pick;
    __syncthreads();
    return pick;
}

// st_sample_penalties on one token seen count times (the host's float operations, none
// fused).
__device__ __forceinline__ float draw_penalize(float v, int count, float repeat, float frequency, float presence) {
    if (repeat != 1.0f) v = v <= 0.0f ? __fmul_rn(v, repeat) : __fdiv_rn(v, repeat);
    if (frequency != 0.0f || presence != 0.0f) v = __fsub_rn(v, __fadd_rn(__fmul_rn((float)count, frequency), presence));
    return v;
}

// The host's chain on row x after its penalties (mx its maximum): the token drawn, in
// every thread.
__device__ long long draw_chain(const float *x, int64_t V, float mx, const float *p, const int32_t *w,
                                draw_shared *sh) {
    const float temp = p[0], min_p = p[1], top_p = p[2];
    const int32_t top_k = w[2];
    const double threshold = min_p > 0.0f ? (double)mx + log((double)min_p) : -INFINITY;
    const double max_t = (double)(mx / temp);
    const double u = (double)((uint64_t)(uint32_t)w[0] * 67108864u + (uint32_t)w[1]) *
                     (1.0 / 9007199254740992.0); // st_uniform_from_words
    const bool cuts_k = top_k > 0 && top_k < V, cuts_p = top_p < 1.0f;
    if (!cuts_k && !cuts_p) return draw_in_id_order(x, V, temp, threshold, max_t, u, sh);
    kept_before by_k = KEPT_ALL, by_p = KEPT_ALL;
    if (cuts_k) {
        const long long kth = select_passing(x, V, count_weight{}, select_target{top_k - 1, 0.0, true}, sh);
        if (top_k == 1) return kth; // one token left: greedy, or a draw that can only give it
        by_k = kept_before{draw_order_key(x[kth]), kth};
    }
    if (cuts_p) {
        const long long cut = select_passing(x, V, cut_weight{(double)mx, by_k}, select_target{-1, top_p, true}, sh);
        by_p = kept_before{draw_order_key(x[cut]), cut};
    }
    return select_passing(x, V, draw_weight{temp, max_t, threshold, by_k, by_p}, select_target{-1, u, false}, sh);
}

__global__ void __launch_bounds__(DRAW_THREADS)
    draw_rows_kernel(st_cuda_view logits, st_cuda_view params, st_cuda_view words, st_cuda_view penalized,
                     int32_t *ids, float *drawn) {
    __shared__ draw_shared sh;
    const int64_t row = blockIdx.x, V = logits.ne0;
    const float *p = (const float *)cuda_row(params, row);
    if (!(p[0] > 0.0f)) return;
    const int32_t *w = (const int32_t *)cuda_row(words, row);
    const int32_t *pen = (const int32_t *)cuda_row(penalized, row);
    const int n_pen = w[3] < ST_DRAW_MAX_PENALIZED ? w[3] : ST_DRAW_MAX_PENALIZED; // (the runner asserts it)
    float *x = (float *)cuda_row(logits, row);
    // (an id outside the row is skipped, as st_sample_penalties_counted skips it)
    for (int j = threadIdx.x; j < n_pen; j += DRAW_THREADS) {
        const int32_t id = pen[2 * j];
        if (id < 0 || id >= V) continue;
        sh.original[j] = x[id];
        x[id] = draw_penalize(x[id], pen[2 * j + 1], p[3], p[4], p[5]);
    }
    __syncthreads();

    float mx = -INFINITY;
    int bad = 0;
    for (int64_t i = threadIdx.x; i < V; i += DRAW_THREADS) {
        const float v = x[i];
        bad |= isnan(v) || v == INFINITY;
        mx = fmaxf(mx, v);
    }
    draw_block_max(&mx, &bad, &sh);
    const long long pick = bad ? -1 : mx == -INFINITY ? -2 : draw_chain(x, V, mx, p, w, &sh);
    __syncthreads();
    for (int j = threadIdx.x; j < n_pen; j += DRAW_THREADS)
        if (pen[2 * j] >= 0 && pen[2 * j] < V) x[pen[2 * j]] = sh.original[j];
    __syncthreads();
    if (threadIdx.x == 0) ids[row] = (int32_t)pick, drawn[row] = pick >= 0 ? x[pick] : NAN;
}

st_status st_cuda_draw(st_backend *b, st_tensor *ids, st_tensor *drawn, const st_tensor *logits,
                       const st_tensor *params, const st_tensor *words, const st_tensor *penalized, st_error *err) {
    st_cuda_ctx *c = cuda_ctx(b);
    const int64_t V = logits->ne[0], n = logits->ne[1];
    ST_ASSERT(cuda_is_f32_rows(logits) && logits->ne[2] == 1 && logits->ne[3] == 1 && V < (1 << 24));
    ST_ASSERT(cuda_is_f32_rows(params) && params->ne[0] == 6 && params->ne[1] == n);
    ST_ASSERT(cuda_is_i32_index(words) && words->ne[0] == 4 && words->ne[1] == n);
    ST_ASSERT(cuda_is_i32_index(penalized) && penalized->ne[0] == 2 * ST_DRAW_MAX_PENALIZED && penalized->ne[1] == n);
    ST_ASSERT(cuda_is_i32_index(ids) && ids->ne[0] == n && cuda_is_f32_rows(drawn) && drawn->ne[0] == n);
    ST_ASSERT(n <= INT32_MAX);
    if (n == 0) return ST_OK;
    draw_rows_kernel<<<(unsigned int)n, DRAW_THREADS, 0, c->stream>>>(cuda_view(logits), cuda_view(params),
                                                                      cuda_view(words), cuda_view(penalized),
                                                                      (int32_t *)ids->data, (float *)drawn->data);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}
