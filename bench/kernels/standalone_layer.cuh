// Shared by the standalone decode-product benchmarks (persistent_gemv_bench.cu,
// stream_chain_bench.cu, gemv_variants_bench.cu, read_floor_bench.cu, fused_ffn_bench.cu,
// cluster_attention_bench.cu, head_bench.cu, gemv_rowblock_bench.cu: CHECK, COPY_GBS,
// graph_us, captured_us, run_from, dot8, warp_sum, upload_random_half; no stride library code): a
// dense layer's F16 product weights for L layers in one allocation, the dims from the
// command line, and the plain one-warp-a-row dot product they time.
//
//   qkv [QKV][E], o [E][Q], gate [F][E], up [F][E], down [E][F]   (row-major, per layer)
#ifndef STRIDE_BENCH_STANDALONE_LAYER_CUH
#define STRIDE_BENCH_STANDALONE_LAYER_CUH

#include <cuda_fp16.h>
#include <stdio.h>
#include <stdlib.h>

#define COPY_GBS 4260.0 // H200 device copy (SPEC.md), the decode roofline's rate

#define CHECK(call)                                                                                 \
    do {                                                                                            \
        cudaError_t rc_ = (call);                                                                   \
        if (rc_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s failed: %s (%s:%d)\n", #call, cudaGetErrorString(rc_), __FILE__, __LINE__); \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

struct layer {
    const __half *qkv, *o, *gate, *up, *down;
};
struct dims {
    int E, Q, QKV, F, L;
};

// dims from [E Q KV F L] (default llama-3.2-1b: 2048 2048 512 8192 16); exits on bad input.
static dims parse_dims(int argc, char **argv, const char *prog) {
    dims d = {2048, 2048, 2048 + 2 * 512, 8192, 16};
    if (argc == 6) {
        d.E = atoi(argv[1]), d.Q = atoi(argv[2]), d.QKV = d.Q + 2 * atoi(argv[3]), d.F = atoi(argv[4]);
        d.L = atoi(argv[5]);
    } else if (argc != 1) {
        fprintf(stderr, "usage: %s [E Q KV F L]\n", prog);
        exit(2);
    }
    if (d.E <= 0 || d.Q <= 0 || d.F <= 0 || d.E % 8 || d.Q % 8 || d.F % 8 || d.QKV % 8 || d.Q > d.QKV || d.L < 1) {
        fprintf(stderr, "%s: E, Q, KV, F must be positive multiples of 8, L >= 1\n", prog);
        exit(2);
    }
    return d;
}

static size_t layer_elems(const dims &d) {
    return (size_t)d.QKV * d.E + (size_t)d.E * d.Q + 2 * (size_t)d.F * d.E + (size_t)d.E * d.F;
}

// n halves of (rand() / RAND_MAX - 0.5) * scale from srand(seed), written to w on the device in
// chunks of 2^24 (a pattern repeating every chunk).
static void upload_random_half(__half *w, size_t n, unsigned seed, float scale) {
    const size_t chunk = (size_t)1 << 24;
    __half *h = (__half *)malloc(chunk * sizeof(__half));
    if (!h) {
        fprintf(stderr, "host malloc failed\n");
        exit(1);
    }
    srand(seed);
    for (size_t i = 0; i < chunk; i++) h[i] = __float2half(((float)rand() / RAND_MAX - 0.5f) * scale);
    for (size_t off = 0; off < n; off += chunk)
        CHECK(cudaMemcpy(w + off, h, (n - off < chunk ? n - off : chunk) * sizeof(__half), cudaMemcpyHostToDevice));
    free(h);
}

// All layers' weights on the device (small random values, seed 7); host array of L layers.
static layer *alloc_layers(const dims &d) {
    const size_t per_layer = layer_elems(d), total = per_layer * d.L;
    __half *wall;
    CHECK(cudaMalloc(&wall, total * sizeof(__half)));
    layer *ls = (layer *)malloc(sizeof(layer) * d.L);
    if (!ls) {
        fprintf(stderr, "host malloc failed\n");
        exit(1);
    }
    upload_random_half(wall, total, 7, 1.0f / 64.0f);
    for (int l = 0; l < d.L; l++) {
        const __half *p = wall + per_layer * l;
        ls[l].qkv = p, p += (size_t)d.QKV * d.E;
        ls[l].o = p, p += (size_t)d.E * d.Q;
        ls[l].gate = p, p += (size_t)d.F * d.E;
        ls[l].up = p, p += (size_t)d.F * d.E;
        ls[l].down = p;
    }
    return ls;
}

// acc + the 8 products of piece q (F16) with x[0..8) = (a, b), in order.
__device__ __forceinline__ float dot8(uint4 q, float4 a, float4 b, float acc) {
    const __half2 *h = (const __half2 *)&q;
    const float2 h0 = __half22float2(h[0]), h1 = __half22float2(h[1]), h2 = __half22float2(h[2]),
                 h3 = __half22float2(h[3]);
    acc = fmaf(h0.x, a.x, acc), acc = fmaf(h0.y, a.y, acc), acc = fmaf(h1.x, a.z, acc);
    acc = fmaf(h1.y, a.w, acc), acc = fmaf(h2.x, b.x, acc), acc = fmaf(h2.y, b.y, acc);
    acc = fmaf(h3.x, b.z, acc), acc = fmaf(h3.y, b.w, acc);
    return acc;
}

// The sum over a warp, in every lane (a fixed xor tree: the same bits whatever the lane).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// dot(w[0..K), x[0..K)) in every lane of the warp: lane l owns the 16-byte pieces l, l + 32,
// ... in order (U of them in flight), then a shuffle tree; K % 8 == 0, rows 16-byte aligned.
template <int U, typename IDX>
__device__ __forceinline__ float row_dot(const __half *__restrict__ w, const float *__restrict__ x, IDX K) {
    const int lane = threadIdx.x % 32;
    const IDX n_vec = K / 8;
    const uint4 *wv = (const uint4 *)w;
    float acc = 0.0f;
    for (IDX v = lane; v < n_vec; v += 32 * U) {
        uint4 q[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (v + u * 32 < n_vec) q[u] = __ldcs(wv + v + u * 32);
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (v + u * 32 >= n_vec) break;
            const float4 *xv = (const float4 *)(x + (v + u * 32) * 8);
            acc = dot8(q[u], __ldg(xv), __ldg(xv + 1), acc);
        }
    }
    return warp_sum(acc);
}

// Microseconds per launch of a recorded graph: 3 untimed launches, then reps timed with
// events on stream s.
static double graph_us(cudaGraphExec_t exec, cudaStream_t s, int reps) {
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++) CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaEventRecord(e0, s));
    for (int i = 0; i < reps; i++) CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaEventRecord(e1, s));
    CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    CHECK(cudaEventDestroy(e0));
    CHECK(cudaEventDestroy(e1));
    return ms * 1e3 / reps;
}

// Microseconds a replay of what issue(s) issues on s: captured into a graph once, check(exec)
// run between instantiation and timing (a launch whose result the caller inspects), then
// timed as graph_us does.
template <typename ISSUE, typename CHECK_RUN>
static double captured_us(cudaStream_t s, int reps, ISSUE issue, CHECK_RUN check) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    issue(s);
    CHECK(cudaStreamEndCapture(s, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    check(exec);
    const double us = graph_us(exec, s, reps);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    return us;
}
template <typename ISSUE> static double captured_us(cudaStream_t s, int reps, ISSUE issue) {
    return captured_us(s, reps, issue, [](cudaGraphExec_t) {});
}

// One launch of exec on s from x = x0 ([E] floats on the host); x after it into x_out.
static void run_from(cudaGraphExec_t exec, cudaStream_t s, float *x, const float *x0, float *x_out, int E) {
    CHECK(cudaMemcpy(x, x0, E * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaMemcpyAsync(x_out, x, E * sizeof(float), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
}

__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }

// The separate baseline: one kernel a product, one warp a row of W [N][K] (2 loads a lane
// in flight), recorded by the caller in a graph.
#define SEPARATE_THREADS 256
enum { EPI_STORE, EPI_ADD, EPI_GLU };

template <int EPI>
__global__ void __launch_bounds__(SEPARATE_THREADS) gemv(const __half *w, const __half *w2, const float *x, float *y,
                                                         int N, int K) {
    const int r = (blockIdx.x * SEPARATE_THREADS + threadIdx.x) / 32;
    if (r >= N) return;
    const float a = row_dot<2, int>(w + (size_t)r * K, x, K);
    if (EPI == EPI_GLU) {
        const float b = row_dot<2, int>(w2 + (size_t)r * K, x, K);
        if (threadIdx.x % 32 == 0) y[r] = silu(a) * b;
    } else if (threadIdx.x % 32 == 0) {
        y[r] = EPI == EPI_ADD ? y[r] + a : a;
    }
}

static unsigned blocks_for(int rows) { return (unsigned)((rows * 32 + SEPARATE_THREADS - 1) / SEPARATE_THREADS); }

// One step of L layers as separate kernels on s: qkv = Wqkv x; x += Wo qkv[0:Q];
// g = silu(Wg x) * (Wu x); x += Wd g.
static void step_separate(cudaStream_t s, const layer *hl, const dims &d, float *x, float *qkv, float *g) {
    for (int l = 0; l < d.L; l++) {
        gemv<EPI_STORE><<<blocks_for(d.QKV), SEPARATE_THREADS, 0, s>>>(hl[l].qkv, NULL, x, qkv, d.QKV, d.E);
        gemv<EPI_ADD><<<blocks_for(d.E), SEPARATE_THREADS, 0, s>>>(hl[l].o, NULL, qkv, x, d.E, d.Q);
        gemv<EPI_GLU><<<blocks_for(d.F), SEPARATE_THREADS, 0, s>>>(hl[l].gate, hl[l].up, x, g, d.F, d.E);
        gemv<EPI_ADD><<<blocks_for(d.E), SEPARATE_THREADS, 0, s>>>(hl[l].down, NULL, g, x, d.E, d.F);
    }
}

// The separate step recorded in a graph on s: run once from x0 (x_out: x after it), then
// timed over reps launches; microseconds a step.
static double time_separate(cudaStream_t s, const layer *hl, const dims &d, float *x, float *qkv, float *g,
                            const float *x0, float *x_out, int reps) {
    return captured_us(s, reps, [&](cudaStream_t c) { step_separate(c, hl, d, x, qkv, g); },
                       [&](cudaGraphExec_t e) { run_from(e, s, x, x0, x_out, d.E); });
}

#endif /* STRIDE_BENCH_STANDALONE_LAYER_CUH */
