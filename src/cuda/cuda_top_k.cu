// The k largest logits of each row and its log-sum-exp (st_cpu_top_k_logits), so that a
// batch's sampler needs k candidates a row on the host instead of the vocabulary.
//
//   logits F32 [V, n];  ids I32 [k, n] packed;  vals F32 [k + 1, n] (host memory of
//   host_alloc's works: the block writes it directly)
//
// A block a row. The row's max, then its sum of exp(x - max) (each thread in double, the
// block tree in double), then a radix select of the k-th largest value: floats mapped to
// keys whose unsigned order is the floats' order, 8 bits a pass from the top, each pass a
// shared histogram of the keys that share the prefix found so far; then every key at or
// above it is gathered (up to TOPK_CAP; more only for more than TOPK_CAP exact ties of the
// k-th value, which a single thread then takes in id order), sorted (bitonic, descending
// value, ascending id: the CPU's order) and the first k written.
//
// Bytes: the row read 7 times (mostly from L2 for rows that fit). FLOPs: negligible.
#include "cuda/cuda_common.cuh"

#define TOPK_THREADS 512
#define TOPK_CAP 2048 // candidates sorted in shared memory (a power of two)

// The order-preserving key of a float: larger float, larger unsigned key (NaN above +inf).
__device__ __forceinline__ uint32_t topk_key(float x) {
    const uint32_t u = __float_as_uint(x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// a before b: descending key, ascending id among equal keys.
__device__ __forceinline__ bool topk_before(uint32_t ka, int32_t ia, uint32_t kb, int32_t ib) {
    return ka > kb || (ka == kb && ia < ib);
}

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
    for (int w = 1; w < TOPK_THREADS / ST_GPU_WARP_SIZE; w++) r = is_max ? (shared[w] > r ? shared[w] : r) : r + shared[w];
    return r;
}

__global__ void __launch_bounds__(TOPK_THREADS)
    top_k_logits_kernel(st_cuda_view logits, int k, int32_t *__restrict__ ids, st_cuda_view vals) {
    __shared__ unsigned int hist[256];
    __shared__ uint32_t c_key[TOPK_CAP];
    __shared__ int32_t c_id[TOPK_CAP];
    __shared__ double red_d[TOPK_THREADS / ST_GPU_WARP_SIZE];
    __shared__ float red_f[TOPK_THREADS / ST_GPU_WARP_SIZE];
    __shared__ uint32_t s_digit;
    __shared__ int s_remaining, s_count;
    const int64_t V = logits.ne0, r = blockIdx.x;
    const float *x = (const float *)(logits.data + r * logits.nb1);
    const int tid = threadIdx.x;

    // the log-sum-exp, max-subtracted
    float mx = -INFINITY;
    for (int64_t t = tid; t < V; t += TOPK_THREADS) mx = fmaxf(mx, x[t]);
    mx = topk_block_reduce<float>(mx, red_f, true);
    double sum = 0.0;
    for (int64_t t = tid; t < V; t += TOPK_THREADS) sum += (double)expf(x[t] - mx);
    sum = topk_block_reduce<double>(sum, red_d, false);
    const float lse = (float)((double)mx + log(sum));

    // the k-th largest key, 8 bits a pass
    uint32_t prefix = 0, mask = 0;
    int remaining = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = tid; i < 256; i += TOPK_THREADS) hist[i] = 0;
        __syncthreads();
        for (int64_t t = tid; t < V; t += TOPK_THREADS) {
            const uint32_t key = topk_key(x[t]);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid == 0) {
            int cum = 0;
            for (int d = 255; d >= 0; d--) {
                const int h = (int)hist[d];
                if (cum + h >= remaining) {
                    s_digit = (uint32_t)d;
                    s_remaining = remaining - cum;
                    break;
                }
                cum += h;
            }
        }
        __syncthreads();
        prefix |= s_digit << shift;
        mask |= 255u << shift;
        remaining = s_remaining;
    }
    const uint32_t kth = prefix; // `remaining` of the keys equal to it belong to the top k

    // every key at or above it (all of them unless there are more than TOPK_CAP ties)
    if (tid == 0) s_count = 0;
    __syncthreads();
    for (int64_t t = tid; t < V; t += TOPK_THREADS) {
        const uint32_t key = topk_key(x[t]);
        if (key >= kth) {
            const int i = atomicAdd(&s_count, 1);
            if (i < TOPK_CAP) c_key[i] = key, c_id[i] = (int32_t)t;
        }
    }
    __syncthreads();
    int n = s_count;
    if (n > TOPK_CAP) { // too many ties: the greater ones, then the ties in id order
        __syncthreads();
        if (tid == 0) s_count = 0;
        __syncthreads();
        for (int64_t t = tid; t < V; t += TOPK_THREADS) {
            const uint32_t key = topk_key(x[t]);
            if (key > kth) {
                const int i = atomicAdd(&s_count, 1);
                c_key[i] = key, c_id[i] = (int32_t)t;
            }
        }
        __syncthreads();
        if (tid == 0) {
            int i = s_count;
            for (int64_t t = 0; t < V && i < k; t++)
                if (topk_key(x[t]) == kth) c_key[i] = kth, c_id[i++] = (int32_t)t;
            s_count = i;
        }
        __syncthreads();
        n = s_count;
    }
    // bitonic sort of the first P >= n entries (padding sorts last)
    int P = 1;
    while (P < n) P <<= 1;
    for (int i = n + tid; i < P; i += TOPK_THREADS) c_key[i] = 0, c_id[i] = INT_MAX;
    __syncthreads();
    for (int size = 2; size <= P; size <<= 1) {
        for (int stride = size / 2; stride > 0; stride >>= 1) {
            for (int i = tid; i < P; i += TOPK_THREADS) {
                const int j = i ^ stride;
                if (j > i) {
                    const bool up = (i & size) == 0; // this half sorts in "before" order
                    const bool swap = up ? topk_before(c_key[j], c_id[j], c_key[i], c_id[i])
                                         : topk_before(c_key[i], c_id[i], c_key[j], c_id[j]);
                    if (swap) {
                        const uint32_t tk = c_key[i];
                        const int32_t ti = c_id[i];
                        c_key[i] = c_key[j], c_id[i] = c_id[j];
                        c_key[j] = tk, c_id[j] = ti;
                    }
                }
            }
            __syncthreads();
        }
    }
    float *v = (float *)(vals.data + r * vals.nb1);
    for (int i = tid; i < k; i += TOPK_THREADS) {
        ids[r * k + i] = c_id[i];
        v[i] = x[c_id[i]];
    }
    if (tid == 0) v[k] = lse;
}

st_status st_cuda_top_k(st_backend *b, st_tensor *ids, st_tensor *vals, const st_tensor *logits, int32_t k,
                        st_error *err) {
    st_cuda_ctx *c = cuda_ctx(b);
    const int64_t V = logits->ne[0], n = logits->ne[1];
    ST_ASSERT(cuda_is_f32_rows(logits) && cuda_is_f32_rows(vals) && logits->ne[2] == 1 && logits->ne[3] == 1);
    ST_ASSERT(k >= 1 && k <= V && k <= TOPK_CAP && vals->ne[0] == k + 1 && vals->ne[1] == n);
    ST_ASSERT(cuda_is_i32_index(ids) && ids->ne[0] == k && ids->nb[1] == (size_t)k * sizeof(int32_t));
    ST_ASSERT(V <= INT32_MAX && n <= INT32_MAX);
    if (n == 0) return ST_OK;
    top_k_logits_kernel<<<(unsigned int)n, TOPK_THREADS, 0, c->stream>>>(cuda_view(logits), k, (int32_t *)ids->data,
                                                                        cuda_view(vals));
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}
