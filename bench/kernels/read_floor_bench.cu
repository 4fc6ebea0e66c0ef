// The floor under a decode product: how long one kernel takes to read N bytes from HBM on
// this device, recorded in a CUDA graph back to back as a decode step records its kernels.
// A decode GEMV cannot be faster than a kernel that only reads its weights, so these times
// are each product's achievable time, against the roofline's bytes / copy rate.
//
// For each size, K kernels each read a slice of their own (together far more than L2, so
// every read comes from HBM) with 16-byte loads, grid-stride, U loads in flight a thread,
// and fold what they read into one word (stored only when it equals a value it never
// takes, so that the loads are not removed). Several grid shapes; the fastest is the floor.
// Standalone CUDA, no stride code.
//
// Build and run (on the GPU machine):
//   nvcc -O3 -std=c++17 -arch=sm_90 bench/kernels/read_floor_bench.cu -o /tmp/read_floor_bench
//   /tmp/read_floor_bench
#include <cuda_runtime.h>

#include "standalone_layer.cuh" // CHECK, COPY_GBS, captured_us

#define POOL_BYTES (2048ull << 20)
#define REPS 20

template <int U>
__global__ void read_kernel(const uint4 *__restrict__ p, size_t n, unsigned int *sink) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    unsigned int x = 0;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (U - 1) * stride < n; i += U * stride) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = __ldcs(p + i + u * stride);
#pragma unroll
        for (int u = 0; u < U; u++) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n; i += stride) {
        const uint4 v = __ldcs(p + i);
        x ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (x == 0x9e3779b9u) *sink = x; // never, for the pattern written below
}

typedef struct shape {
    const char *name;
    int blocks_per_sm, threads, unroll;
} shape;

static const shape SHAPES[] = {
    {"8 x 256 threads an SM, 2 loads", 8, 256, 2},
    {"8 x 256 threads an SM, 4 loads", 8, 256, 4},
    {"4 x 256 threads an SM, 8 loads", 4, 256, 8},
    {"2 x 1024 threads an SM, 4 loads", 2, 1024, 4},
};

static void launch(const shape &s, int sms, const uint4 *p, size_t n, unsigned int *sink, cudaStream_t st) {
    const int grid = sms * s.blocks_per_sm;
    switch (s.unroll) {
    case 2: read_kernel<2><<<grid, s.threads, 0, st>>>(p, n, sink); break;
    case 4: read_kernel<4><<<grid, s.threads, 0, st>>>(p, n, sink); break;
    default: read_kernel<8><<<grid, s.threads, 0, st>>>(p, n, sink); break;
    }
}

// Microseconds a kernel reading `bytes` takes, K of them back to back in a graph.
static double time_read(const shape &s, int sms, const unsigned char *pool, size_t bytes, unsigned int *sink,
                        cudaStream_t st) {
    const size_t slice = (bytes + 4095) / 4096 * 4096;
    int k = (int)(POOL_BYTES / slice);
    if (k > 96) k = 96;
    return captured_us(st, REPS, [&](cudaStream_t c) {
               for (int i = 0; i < k; i++)
                   launch(s, sms, (const uint4 *)(pool + (size_t)i * slice), bytes / 16, sink, c);
           }) /
           k;
}

int main(void) {
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    const int sms = prop.multiProcessorCount;
    unsigned char *pool;
    unsigned int *sink;
    CHECK(cudaMalloc(&pool, POOL_BYTES));
    CHECK(cudaMalloc(&sink, sizeof(unsigned int)));
    CHECK(cudaMemset(pool, 0x5a, POOL_BYTES));
    cudaStream_t st;
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    // the decode products of llama-3.2-1b (o 8.4, q/k/v 12.6, down 33.6, gate/up 67.1 MB),
    // qwen3-1.7b (q/k/v 16.8, down 25.2, gate/up 50.3) and qwen3-8b (o 33.6, q/k/v 50.3,
    // down 100.7, gate/up 201.3), and the heads (525 and 622 MB)
    const double mbs[] = {2.1, 4.2, 8.4, 12.6, 16.8, 25.2, 33.6, 50.3, 67.1, 100.7, 201.3, 525.0};
    printf("%s (%d SMs): one kernel reading N MB from HBM, back to back in a graph (%d replays)\n\n", prop.name,
           sms, REPS);
    printf("| MB | at the copy rate, us |");
    for (const shape &s : SHAPES) printf(" %s, us |", s.name);
    printf(" floor, us | floor, %% of the copy rate |\n|---:|---:|");
    for (size_t i = 0; i < sizeof(SHAPES) / sizeof(SHAPES[0]); i++) printf("---:|");
    printf("---:|---:|\n");
    for (double mb : mbs) {
        const size_t bytes = (size_t)(mb * 1e6) / 16 * 16;
        const double roof = (double)bytes / (COPY_GBS * 1e3);
        double best = 1e30;
        printf("| %.1f | %.2f |", mb, roof);
        for (const shape &s : SHAPES) {
            const double us = time_read(s, sms, pool, bytes, sink, st);
            if (us < best) best = us;
            printf(" %.2f |", us);
        }
        printf(" %.2f | %.0f%% |\n", best, 100.0 * roof / best);
    }
    CHECK(cudaFree(pool));
    CHECK(cudaFree(sink));
    return 0;
}
