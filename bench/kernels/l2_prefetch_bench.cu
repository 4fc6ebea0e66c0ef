// What an L2 prefetch issued while the memory idles is worth to the read after it: the
// question behind a decode step's attention loading the next products' weights (o, then
// gate/up) into L2 (src/cuda/cuda_prefetch.cuh).
//
// Each repetition: L2 flushed (a 256 MiB memset), then
//   ev0  prefetch kernel: P bytes of the buffer, MODE = bulk (cp.async.bulk.prefetch.L2,
//        8 KiB a thread), line (prefetch.global.L2 a 128-byte line) or load (16-byte loads
//        folded into a word: real reads by the same blocks)
//   ev1  idle kernel: 8 blocks spinning T us on %globaltimer (attention's place)
//   ev2  read kernel: the first R bytes of the buffer, one wave of 16-byte streaming loads
//   ev3
// and it prints the means of ev1 - ev0 (does the prefetch kernel wait for its prefetches?)
// and ev3 - ev2 (how much of R came from L2). Standalone CUDA, no stride code.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 bench/kernels/l2_prefetch_bench.cu -o /tmp/l2_prefetch_bench
//   /tmp/l2_prefetch_bench
#include <cuda_runtime.h>

#include "standalone_layer.cuh" // CHECK, COPY_GBS

#define MiB (1ull << 20)
#define CHUNK 8192
#define REPS 30

enum { MODE_BULK, MODE_LINE, MODE_LOAD };

__global__ void prefetch_kernel(const char *p, size_t bytes, int mode, unsigned int *sink) {
    const size_t n_chunks = bytes / CHUNK;
    unsigned int x = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_chunks; i += (size_t)gridDim.x * blockDim.x) {
        const char *c = p + i * CHUNK;
        if (mode == MODE_BULK) {
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(c), "r"((unsigned int)CHUNK) : "memory");
        } else if (mode == MODE_LINE) {
            for (int o = 0; o < CHUNK; o += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(c + o));
        } else {
            for (int o = 0; o < CHUNK; o += 16) {
                const uint4 v = __ldcg((const uint4 *)(c + o));
                x ^= v.x ^ v.w;
            }
        }
    }
    if (x == 0x9e3779b9u) *sink = x;
}

__global__ void idle_kernel(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

__global__ void read_kernel(const uint4 *__restrict__ p, size_t n, unsigned int *sink) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    unsigned int x = 0;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) v[u] = __ldcs(p + i + u * stride);
#pragma unroll
        for (int u = 0; u < 4; u++) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n; i += stride) {
        const uint4 v = __ldcs(p + i);
        x ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (x == 0x9e3779b9u) *sink = x;
}

int main() {
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    int l2 = 0;
    CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    char *buf = NULL, *flush = NULL;
    unsigned int *sink = NULL;
    CHECK(cudaMalloc(&buf, 64 * MiB));
    CHECK(cudaMalloc(&flush, 256 * MiB));
    CHECK(cudaMalloc(&sink, 4));
    CHECK(cudaMemset(buf, 1, 64 * MiB));
    cudaEvent_t ev[4];
    for (int i = 0; i < 4; i++) CHECK(cudaEventCreate(&ev[i]));
    printf("# L2 %d MiB, %d SMs; mean of %d reps, us\n", l2 >> 20, sms, REPS);
    printf("| mode | prefetch MiB | prefetch blocks | idle us | read MiB | prefetch kernel us | read us | read GB/s |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    const char *names[] = {"bulk", "line", "load"};
    struct { int mode; size_t pf, rd; int blocks; int idle; } cases[] = {
        {MODE_BULK, 0, 8, 16, 10},   {MODE_BULK, 8, 8, 16, 10},    {MODE_BULK, 8, 8, 16, 0},
        {MODE_BULK, 32, 8, 16, 10},  {MODE_BULK, 8, 8, 132, 10},   {MODE_LINE, 8, 8, 16, 10},
        {MODE_LINE, 8, 8, 132, 10},  {MODE_LOAD, 8, 8, 132, 10},   {MODE_BULK, 0, 32, 16, 10},
        {MODE_BULK, 16, 32, 32, 10}, {MODE_BULK, 24, 32, 32, 10},  {MODE_BULK, 32, 32, 32, 10},
        {MODE_BULK, 24, 32, 132, 10}, {MODE_LOAD, 24, 32, 132, 10}, {MODE_BULK, 0, 8, 16, 0},
    };
    for (const auto &k : cases) {
        double t_pf = 0, t_rd = 0;
        for (int r = 0; r < REPS + 1; r++) {
            CHECK(cudaMemsetAsync(flush, r & 0xff, 256 * MiB));
            CHECK(cudaEventRecord(ev[0]));
            prefetch_kernel<<<k.blocks, 128>>>(buf, k.pf * MiB, k.mode, sink);
            CHECK(cudaEventRecord(ev[1]));
            if (k.idle) idle_kernel<<<8, 32>>>((unsigned long long)k.idle * 1000);
            CHECK(cudaEventRecord(ev[2]));
            read_kernel<<<sms * 8, 256>>>((const uint4 *)buf, k.rd * MiB / 16, sink);
            CHECK(cudaEventRecord(ev[3]));
            CHECK(cudaEventSynchronize(ev[3]));
            float a = 0, b = 0;
            CHECK(cudaEventElapsedTime(&a, ev[0], ev[1]));
            CHECK(cudaEventElapsedTime(&b, ev[2], ev[3]));
            if (r > 0) t_pf += a * 1e3, t_rd += b * 1e3; // the first is a warm-up
        }
        t_pf /= REPS, t_rd /= REPS;
        printf("| %s | %zu | %d | %d | %zu | %.2f | %.2f | %.0f |\n", names[k.mode], k.pf, k.blocks, k.idle, k.rd, t_pf,
               t_rd, k.rd * MiB / (t_rd * 1e3));
    }
    return 0;
}
