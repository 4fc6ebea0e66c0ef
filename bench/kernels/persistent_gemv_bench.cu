// Is the decode GEMVs' fixed cost per kernel the kernel boundary? A standalone experiment
// (no stride library code) for issue 5: the four products of a dense layer,
//
//   qkv = Wqkv x;  x += Wo qkv[0:Q];  g = silu(Wg x) * (Wu x);  x += Wd g
//
// for L layers with weights of their own (F16, row-major [N][K], streamed from HBM), run
//   separate:    one kernel per product, one warp per row, recorded in a CUDA graph (the
//                shape of stride's decode step today, without norms and attention);
//   persistent:  one cooperative kernel for all layers, the warps of the whole grid taking
//                the rows of a product in turn, grid.sync() between products;
//   prefetch:    persistent, and before each grid.sync() every warp asks L2 for the first
//                2 KiB of its first row of the next product (prefetch.global.L2).
// Printed: microseconds per layer, weight bytes over that time against a device copy, and
// whether each variant's x after one step is bitwise the separate one's (same row loop,
// same summation order: it must be).
//
// Build: nvcc -O3 -std=c++17 -arch=sm_90 bench/kernels/persistent_gemv_bench.cu -o persistent_gemv_bench
// Run:   persistent_gemv_bench [E Q KV F L]   (default llama-3.2-1b: 2048 2048 512 8192 16)
#include <cooperative_groups.h>
#include <string.h>

#include "standalone_layer.cuh"

namespace cg = cooperative_groups;

#define THREADS 256
#define UNROLL 2
#define REPS 20

__device__ __forceinline__ void prefetch_l2(const void *p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// The first 2 KiB of row `first_row` of W [N][K] (if the warp has one), into L2.
__device__ __forceinline__ void prefetch_row(const __half *w, int first_row, int N, int K) {
    if (first_row >= N) return;
    const char *row = (const char *)(w + (size_t)first_row * K);
    const int lane = threadIdx.x % 32, bytes = K * 2 < 2048 ? K * 2 : 2048;
    for (int off = lane * 128; off < bytes; off += 32 * 128) prefetch_l2(row + off);
}

template <bool PREFETCH>
__global__ void __launch_bounds__(THREADS, 5)
    layers_persistent(const layer *ls, dims d, float *x, float *qkv, float *g) {
    cg::grid_group grid = cg::this_grid();
    const int gw = (blockIdx.x * THREADS + threadIdx.x) / 32, nw = gridDim.x * THREADS / 32;
    const bool lead = threadIdx.x % 32 == 0;
    for (int l = 0; l < d.L; l++) {
        const layer w = ls[l];
        for (int r = gw; r < d.QKV; r += nw) {
            const float v = row_dot<UNROLL, int>(w.qkv + (size_t)r * d.E, x, d.E);
            if (lead) qkv[r] = v;
        }
        if (PREFETCH) prefetch_row(w.o, gw, d.E, d.Q);
        grid.sync();
        for (int r = gw; r < d.E; r += nw) {
            const float v = row_dot<UNROLL, int>(w.o + (size_t)r * d.Q, qkv, d.Q);
            if (lead) x[r] += v;
        }
        if (PREFETCH) prefetch_row(w.gate, gw, d.F, d.E), prefetch_row(w.up, gw, d.F, d.E);
        grid.sync();
        for (int r = gw; r < d.F; r += nw) {
            const float a = row_dot<UNROLL, int>(w.gate + (size_t)r * d.E, x, d.E);
            const float b = row_dot<UNROLL, int>(w.up + (size_t)r * d.E, x, d.E);
            if (lead) g[r] = silu(a) * b;
        }
        if (PREFETCH) prefetch_row(w.down, gw, d.E, d.F);
        grid.sync();
        for (int r = gw; r < d.E; r += nw) {
            const float v = row_dot<UNROLL, int>(w.down + (size_t)r * d.F, g, d.F);
            if (lead) x[r] += v;
        }
        if (PREFETCH && l + 1 < d.L) prefetch_row(ls[l + 1].qkv, gw, d.QKV, d.E);
        grid.sync();
    }
}

int main(int argc, char **argv) {
    const dims d = parse_dims(argc, argv, "persistent_gemv_bench");
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    const double bytes = 2.0 * (double)layer_elems(d) * d.L;
    printf("%s: E=%d Q=%d QKV=%d F=%d, %d layers, %.2f GB of F16 weights a step\n", prop.name, d.E, d.Q, d.QKV,
           d.F, d.L, bytes / 1e9);
    layer *hl = alloc_layers(d);
    layer *dl;
    CHECK(cudaMalloc(&dl, sizeof(layer) * d.L));
    CHECK(cudaMemcpy(dl, hl, sizeof(layer) * d.L, cudaMemcpyHostToDevice));
    float *x, *qkv, *g;
    CHECK(cudaMalloc(&x, d.E * sizeof(float)));
    CHECK(cudaMalloc(&qkv, d.QKV * sizeof(float)));
    CHECK(cudaMalloc(&g, d.F * sizeof(float)));
    float *x0 = (float *)malloc(d.E * sizeof(float)), *x_sep = (float *)malloc(d.E * sizeof(float)),
          *x_var = (float *)malloc(d.E * sizeof(float));
    for (int i = 0; i < d.E; i++) x0[i] = (float)rand() / RAND_MAX - 0.5f;

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));

    const double us_sep = time_separate(s, hl, d, x, qkv, g, x0, x_sep, REPS); // separate, as a graph
    float ms = 0;
    printf("| variant | grid | us/layer | GB/s | %% of copy | x bitwise = separate |\n|---|---|---:|---:|---:|---|\n");
    printf("| separate (graph of %d kernels) | one warp a row | %.2f | %.0f | %.0f%% | - |\n", 4 * d.L, us_sep / d.L,
           bytes / (us_sep * 1e-6) / 1e9, 100.0 * bytes / (us_sep * 1e-6) / 1e9 / COPY_GBS);

    for (int variant = 0; variant < 2; variant++) {
        void (*kernel)(const layer *, dims, float *, float *, float *) =
            variant ? layers_persistent<true> : layers_persistent<false>;
        int per_sm = 0;
        CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, THREADS, 0));
        const unsigned grid = (unsigned)(per_sm * prop.multiProcessorCount);
        void *args[] = {(void *)&dl, (void *)&d, (void *)&x, (void *)&qkv, (void *)&g};
        CHECK(cudaMemcpy(x, x0, d.E * sizeof(float), cudaMemcpyHostToDevice));
        CHECK(cudaLaunchCooperativeKernel((void *)kernel, grid, THREADS, args, 0, s));
        CHECK(cudaMemcpyAsync(x_var, x, d.E * sizeof(float), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        const bool same = memcmp(x_var, x_sep, d.E * sizeof(float)) == 0;
        for (int i = 0; i < 3; i++) CHECK(cudaLaunchCooperativeKernel((void *)kernel, grid, THREADS, args, 0, s));
        CHECK(cudaEventRecord(e0, s));
        for (int i = 0; i < REPS; i++) CHECK(cudaLaunchCooperativeKernel((void *)kernel, grid, THREADS, args, 0, s));
        CHECK(cudaEventRecord(e1, s));
        CHECK(cudaEventSynchronize(e1));
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        const double us = ms * 1e3 / REPS;
        printf("| %s | %u blocks (%d an SM) | %.2f | %.0f | %.0f%% | %s |\n",
               variant ? "persistent + L2 prefetch" : "persistent, grid.sync", grid, per_sm, us / d.L,
               bytes / (us * 1e-6) / 1e9, 100.0 * bytes / (us * 1e-6) / 1e9 / COPY_GBS, same ? "yes" : "NO");
    }
    return 0;
}
