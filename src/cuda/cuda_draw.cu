// A draw from each whole logits row where the logits are (st_cpu_draw_rows), so that a
// request sampling the untruncated distribution (a temperature without top-k or top-p,
// OpenAI's defaults) brings one token id a row to the host instead of V logits.
//
//   logits F32 [V, n]; params F32 [2, n] (temperature, min-p; temperature 0: row not
//   drawn); words I32 [2, n] (the uniform's words, st_rng_uniform_words);
//   ids I32 [n], drawn F32 [n] (host memory of host_alloc's works: written directly)
//
// One block a row. Pass 1: the row's maximum, and whether it holds a NaN or +inf. Pass 2:
// thread t sums exp(x / temp - max / temp) in double, in id order, over the tokens of its
// chunk [t C, t C + C) whose logit passes min-p (x >= max + log(min-p)); an inclusive scan
// of the threads' sums (within a warp by shuffles, across warps one after another) gives
// the running sum at each chunk's end, the last one the total. The first thread whose end
// passes u * total walks its chunk from the sum before it, as st_sample_draw_at walks a
// run (each chunk starts exactly where the one before it ends, so the first whose end
// passes the target starts at or before it). The host sums one token after another, so its
// running sums differ from these in the last bits: the two draws differ only where the
// target lies within that rounding of a boundary between two tokens. The exponentials are
// double, as the host's: V a row.
#include <math.h>

#include "cuda/cuda_common.cuh"

#define DRAW_THREADS 1024
#define DRAW_WARPS (DRAW_THREADS / ST_GPU_WARP_SIZE)
static_assert(DRAW_WARPS <= ST_GPU_WARP_SIZE, "the warps' sums are scanned by one warp");

struct draw_shared {
    float max[DRAW_WARPS];
    int flag[DRAW_WARPS];
    long long index[DRAW_WARPS];
    double warp_end[DRAW_WARPS]; // the running sum at each warp's end
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

__global__ void __launch_bounds__(DRAW_THREADS)
    draw_rows_kernel(st_cuda_view logits, st_cuda_view params, st_cuda_view words, int32_t *ids, float *drawn) {
    __shared__ draw_shared sh;
    const int64_t row = blockIdx.x, V = logits.ne0;
    const float *p = (const float *)cuda_row(params, row);
    const float temp = p[0], min_p = p[1];
    if (!(temp > 0.0f)) return;
    const uint32_t *w = (const uint32_t *)cuda_row(words, row);
    const float *x = (const float *)cuda_row(logits, row);

    float mx = -INFINITY;
    int bad = 0;
    for (int64_t i = threadIdx.x; i < V; i += DRAW_THREADS) {
        const float v = x[i];
        bad |= isnan(v) || v == INFINITY;
        mx = fmaxf(mx, v);
    }
    draw_block_max(&mx, &bad, &sh);
    if (bad || mx == -INFINITY) {
        if (threadIdx.x == 0) ids[row] = bad ? -1 : -2, drawn[row] = NAN;
        return;
    }
    // the host's chain: min-p on the logits, then logit / temp against the largest's
    const double threshold = min_p > 0.0f ? (double)mx + log((double)min_p) : -INFINITY;
    const double m = (double)(mx / temp);

    const int64_t C = (V + DRAW_THREADS - 1) / DRAW_THREADS, lo = threadIdx.x * C, hi = lo + C < V ? lo + C : V;
    double sum = 0.0;
    long long last_nonzero = -1;
    for (int64_t i = lo; i < hi; i++) {
        const float v = x[i];
        if ((double)v < threshold) continue;
        const double e = exp((double)(v / temp) - m);
        sum += e;
        if (e > 0.0) last_nonzero = i;
    }
    // inclusive scan: within the warp, then the warps' ends one after another
    const int lane = threadIdx.x % ST_GPU_WARP_SIZE, warp = threadIdx.x / ST_GPU_WARP_SIZE;
    double in_warp = sum;
#pragma unroll
    for (int off = 1; off < ST_GPU_WARP_SIZE; off <<= 1) {
        const double o = st_gpu_shfl(in_warp, lane >= off ? lane - off : lane);
        if (lane >= off) in_warp += o;
    }
    const double prev_lane = st_gpu_shfl(in_warp, lane > 0 ? lane - 1 : 0);
    if (lane == ST_GPU_WARP_SIZE - 1) sh.warp_end[warp] = in_warp;
    __syncthreads();
    if (threadIdx.x == 0)
        for (int k = 1; k < DRAW_WARPS; k++) sh.warp_end[k] += sh.warp_end[k - 1];
    __syncthreads();
    // warp_end[warp] is warp_end[warp - 1] + the last lane's in_warp: the same sum as that
    // lane's end below, so each chunk starts exactly where the one before it ends
    const double before_warp = warp > 0 ? sh.warp_end[warp - 1] : 0.0;
    const double start = lane > 0 ? before_warp + prev_lane : before_warp, end = before_warp + in_warp;
    const double u = (double)((uint64_t)w[0] * 67108864u + w[1]) * (1.0 / 9007199254740992.0); // st_uniform_from_words
    const double target = u * sh.warp_end[DRAW_WARPS - 1];
    // the row's last token of nonzero weight (the largest has weight 1): where rounding
    // leaves the target at the total, or a walk short of it in a chunk of no weight
    const long long last_any = draw_block_index(last_nonzero, false, &sh);
    const long long first = draw_block_index(target < end ? (long long)threadIdx.x : LLONG_MAX, true, &sh);
    if (first == LLONG_MAX) {
        if (threadIdx.x == 0) ids[row] = (int32_t)last_any, drawn[row] = x[last_any];
        return;
    }
    if (threadIdx.x != first) return;
    double cum = start;
    // (the warp's scan adds in another order than this walk: its end may pass the target
    // where the walk's sum falls short by rounding)
    long long pick = last_nonzero >= 0 ? last_nonzero : last_any;
    for (int64_t i = lo; i < hi; i++) {
        const float v = x[i];
        if ((double)v < threshold) continue;
        cum += exp((double)(v / temp) - m);
        if (target < cum) {
            pick = i;
            break;
        }
    }
    ids[row] = (int32_t)pick;
    drawn[row] = x[pick];
}

st_status st_cuda_draw(st_backend *b, st_tensor *ids, st_tensor *drawn, const st_tensor *logits,
                       const st_tensor *params, const st_tensor *words, st_error *err) {
    st_cuda_ctx *c = cuda_ctx(b);
    const int64_t V = logits->ne[0], n = logits->ne[1];
    ST_ASSERT(cuda_is_f32_rows(logits) && logits->ne[2] == 1 && logits->ne[3] == 1 && V <= INT32_MAX);
    ST_ASSERT(cuda_is_f32_rows(params) && params->ne[0] == 2 && params->ne[1] == n);
    ST_ASSERT(cuda_is_i32_index(words) && words->ne[0] == 2 && words->ne[1] == n);
    ST_ASSERT(cuda_is_i32_index(ids) && ids->ne[0] == n && cuda_is_f32_rows(drawn) && drawn->ne[0] == n);
    ST_ASSERT(n <= INT32_MAX);
    if (n == 0) return ST_OK;
    draw_rows_kernel<<<(unsigned int)n, DRAW_THREADS, 0, c->stream>>>(cuda_view(logits), cuda_view(params),
                                                                      cuda_view(words), (int32_t *)ids->data,
                                                                      (float *)drawn->data);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}
