// Weights into L2 ahead of the products that read them (the backend's prefetch hint).
//
// A decode step is a chain of kernels, and HBM idles whenever the running one moves few
// bytes: attention over a short cache takes 10-15 us a layer on the 1-2B models (enough
// time to stream 40-60 MB at the copy rate) while reading a few hundred KiB. The model
// hints, before attention, which weights come next (o, then gate and up); a small kernel
// on a second stream, forked from the main stream at that point, asks the memory system
// for their first bytes (cp.async.bulk.prefetch.L2 on sm_90: a fire-and-forget request
// per chunk, nothing comes back to the SM), so that those products start from L2.
//
// The budget: a share of the L2 (ctx->prefetch_budget), split evenly among the weights of
// one hint, a weight smaller than its share leaving the rest to the others (o whole, gate
// and up the same prefix of rows each). The side stream joins the main stream before a
// graph recording ends and before every wait: a recorded step's prefetches are branches of
// its graph, and nothing is left in flight when the host reads results.
//
// Bytes: the prefixes once (the products then read them from L2 instead of HBM, so the
// step's HBM bytes do not change). FLOPs: none.
#include <string.h>

#include "cuda/cuda_common.cuh"

#define PREFETCH_MAX_RANGES 4
#define PREFETCH_THREADS 128
#define PREFETCH_CHUNK_BYTES (16 * 1024) // one request's size

typedef struct prefetch_ranges {
    const char *p[PREFETCH_MAX_RANGES];
    int64_t bytes[PREFETCH_MAX_RANGES]; // multiples of 16, p 16-byte aligned
    int64_t chunk0[PREFETCH_MAX_RANGES + 1]; // the first chunk of each range; [n] the total
    int n;
} prefetch_ranges;

__device__ __forceinline__ void prefetch_l2(const char *p, uint32_t bytes) {
#if __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#else
    for (uint32_t off = 0; off < bytes; off += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(p + off));
#endif
}

// Chunk i of the concatenated ranges, one per thread in turn.
__global__ void __launch_bounds__(PREFETCH_THREADS) prefetch_kernel(const prefetch_ranges r) {
    const int64_t n_chunks = r.chunk0[r.n];
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_chunks; i += (int64_t)gridDim.x * blockDim.x) {
        int k = 0;
        while (k + 1 < r.n && i >= r.chunk0[k + 1]) k++;
        const int64_t off = (i - r.chunk0[k]) * PREFETCH_CHUNK_BYTES;
        const int64_t left = r.bytes[k] - off;
        prefetch_l2(r.p[k] + off, (uint32_t)(left < PREFETCH_CHUNK_BYTES ? left : PREFETCH_CHUNK_BYTES));
    }
}

// How many bytes of each weight the budget covers: equal shares, a weight smaller than its
// share giving the rest to the others (water-filling, smallest first).
static void prefetch_shares(const int64_t *size, int n, int64_t budget, int64_t *take) {
    bool done[PREFETCH_MAX_RANGES] = {false};
    for (int left = n; left > 0; left--) {
        int small = -1;
        for (int i = 0; i < n; i++)
            if (!done[i] && (small < 0 || size[i] < size[small])) small = i;
        const int64_t share = budget / left;
        take[small] = size[small] < share ? size[small] : share;
        budget -= take[small];
        done[small] = true;
    }
}

st_status st_cuda_prefetch(st_backend *b, const st_tensor *const *w, int n, st_error *err) {
    st_cuda_ctx *c = cuda_ctx(b);
    if (c->prefetch_budget == 0 || n <= 0) return ST_OK;
    if (n > PREFETCH_MAX_RANGES) n = PREFETCH_MAX_RANGES;
    int64_t size[PREFETCH_MAX_RANGES], take[PREFETCH_MAX_RANGES];
    for (int i = 0; i < n; i++) // a weight's rows are one block of memory: rows x stride (x experts)
        size[i] = w[i] ? (int64_t)(w[i]->nb[1] * (size_t)(w[i]->ne[1] * w[i]->ne[2] * w[i]->ne[3])) : 0;
    prefetch_shares(size, n, (int64_t)c->prefetch_budget, take);
    prefetch_ranges r;
    memset(&r, 0, sizeof(r));
    for (int i = 0; i < n; i++) {
        const char *p = w[i] ? (const char *)w[i]->data : NULL;
        int64_t bytes = take[i];
        if (p && (uintptr_t)p % 16) { // the bulk request wants 16-byte alignment
            const int64_t skip = 16 - (int64_t)((uintptr_t)p % 16);
            p += skip;
            bytes -= skip;
        }
        bytes = bytes / 16 * 16;
        if (!p || bytes <= 0) continue;
        r.p[r.n] = p;
        r.bytes[r.n] = bytes;
        r.chunk0[r.n + 1] = r.chunk0[r.n] + (bytes + PREFETCH_CHUNK_BYTES - 1) / PREFETCH_CHUNK_BYTES;
        r.n++;
    }
    if (r.n == 0) return ST_OK;
    // fork: the side stream starts where the main stream is now
    ST_GPU_CHECK(st_gpu_event_record(c->prefetch_fork, c->stream));
    ST_GPU_CHECK(st_gpu_stream_wait_event(c->side, c->prefetch_fork, 0));
    const int64_t threads = r.chunk0[r.n];
    int64_t blocks = (threads + PREFETCH_THREADS - 1) / PREFETCH_THREADS;
    if (blocks > c->sm_count) blocks = c->sm_count;
    prefetch_kernel<<<(unsigned int)blocks, PREFETCH_THREADS, 0, c->side>>>(r);
    ST_GPU_CHECK_LAUNCH();
    ST_GPU_CHECK(st_gpu_event_record(c->prefetch_join, c->side));
    c->prefetch_pending = true;
    return ST_OK;
}

st_status st_cuda_prefetch_join(st_cuda_ctx *c, st_error *err) {
    if (!c->prefetch_pending) return ST_OK;
    ST_GPU_CHECK(st_gpu_stream_wait_event(c->stream, c->prefetch_join, 0));
    c->prefetch_pending = false;
    return ST_OK;
}
