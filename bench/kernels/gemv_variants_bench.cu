// What in a decode product kernel costs (issue 5): the plain one-warp-a-row GEMV of
// persistent_gemv_bench streams a layer's four products 9-18% faster than stride's own
// kernels (bench/persistent-gemv-h200.md). This standalone bench (no stride library
// code) times that kernel under the traits where stride's differs, one at a time:
//
//   U       16-byte weight loads a lane has in flight before it uses them (stride: 2)
//   MINB    blocks per SM the kernel is compiled for (__launch_bounds__ minimum; stride's
//           one-column kernels: 8, i.e. <= 32 registers; 1 leaves the compiler free)
//   IDX     index arithmetic in int or int64_t (stride: int64_t)
//
// for each product of a dense layer, with weights of their own per layer (F16, [N][K]
// row-major, streamed from HBM):
//
//   qkv   y = Wqkv x           [QKV][E]   (one matrix here; stride: 3 parts, one launch)
//   o     y += Wo a            [E][Q]
//   ffn   g = silu(Wg x)*(Wu x) [F][E] x 2
//   down  y += Wd g            [E][F]
//
// Each product kind alone, recorded for all L layers as one graph and replayed: us per
// layer and % of a device copy. Every variant's outputs are checked bitwise against the
// first (the summation order depends on K only: lane l owns pieces l, l + 32, ...).
//
// Build: nvcc -O3 -std=c++17 -arch=sm_90 bench/kernels/gemv_variants_bench.cu -o gemv_variants_bench
// Run:   gemv_variants_bench [E Q KV F L]   (default llama-3.2-1b: 2048 2048 512 8192 16)
#include <stdint.h>
#include <string.h>

#include "standalone_layer.cuh"

#define THREADS SEPARATE_THREADS // the block size blocks_for (standalone_layer.cuh) assumes
#define REPS 20

// One warp per row of W [N][K]; GLU: w2 is the up weight (the header's gemv with its traits
// as parameters).
template <int EPI, int U, int MINB, typename IDX>
__global__ void __launch_bounds__(THREADS, MINB)
    gemv_variant(const __half *__restrict__ w, const __half *__restrict__ w2, const float *__restrict__ x, float *y,
                 int N, int K) {
    const IDX r = ((IDX)blockIdx.x * THREADS + threadIdx.x) / 32;
    if (r >= N) return;
    const float a = row_dot<U, IDX>(w + r * (IDX)K, x, (IDX)K);
    if (EPI == EPI_GLU) {
        const float b = row_dot<U, IDX>(w2 + r * (IDX)K, x, (IDX)K);
        if (threadIdx.x % 32 == 0) y[r] = silu(a) * b;
    } else if (threadIdx.x % 32 == 0) {
        y[r] = EPI == EPI_ADD ? y[r] + a : a;
    }
}

struct bufs {
    float *xe, *xq, *xf; // inputs [E], [Q], [F]
    float *yqkv, *yo, *yg, *yd; // outputs
};

typedef void (*kernel_t)(const __half *, const __half *, const float *, float *, int, int);
struct variant {
    const char *name;
    kernel_t store, add, glu;
};
#define VARIANT(name, U, MINB, IDX)                                                                        \
    {                                                                                                      \
        name, gemv_variant<EPI_STORE, U, MINB, IDX>, gemv_variant<EPI_ADD, U, MINB, IDX>,                  \
            gemv_variant<EPI_GLU, U, MINB, IDX>                                                            \
    }
static const variant VARIANTS[] = {
    VARIANT("U2 free int (persistent bench's)", 2, 1, int),
    VARIANT("U2 8/SM int", 2, 8, int),
    VARIANT("U2 8/SM int64 (stride's traits)", 2, 8, int64_t),
    VARIANT("U2 6/SM int", 2, 6, int),
    VARIANT("U4 free int", 4, 1, int),
    VARIANT("U4 4/SM int", 4, 4, int),
    VARIANT("U1 8/SM int", 1, 8, int),
};
#define N_VARIANTS (int)(sizeof(VARIANTS) / sizeof(VARIANTS[0]))

enum { P_QKV, P_O, P_FFN, P_DOWN, N_PRODUCTS };
static const char *PRODUCT_NAME[] = {"qkv", "o + add", "gate/up + SwiGLU", "down + add"};

static void issue(cudaStream_t s, const variant &v, int p, const layer &l, const dims &d, const bufs &b) {
    switch (p) {
    case P_QKV: v.store<<<blocks_for(d.QKV), THREADS, 0, s>>>(l.qkv, NULL, b.xe, b.yqkv, d.QKV, d.E); break;
    case P_O: v.add<<<blocks_for(d.E), THREADS, 0, s>>>(l.o, NULL, b.xq, b.yo, d.E, d.Q); break;
    case P_FFN: v.glu<<<blocks_for(d.F), THREADS, 0, s>>>(l.gate, l.up, b.xe, b.yg, d.F, d.E); break;
    default: v.add<<<blocks_for(d.E), THREADS, 0, s>>>(l.down, NULL, b.xf, b.yd, d.E, d.F); break;
    }
}

static double product_bytes(int p, const dims &d) {
    switch (p) {
    case P_QKV: return 2.0 * d.QKV * d.E;
    case P_O: return 2.0 * d.E * d.Q;
    case P_FFN: return 4.0 * d.F * d.E;
    default: return 2.0 * d.E * d.F;
    }
}

static float *dev_floats(int n, const float *host) {
    float *p;
    CHECK(cudaMalloc(&p, n * sizeof(float)));
    if (host) CHECK(cudaMemcpy(p, host, n * sizeof(float), cudaMemcpyHostToDevice));
    else CHECK(cudaMemset(p, 0, n * sizeof(float)));
    return p;
}

// Outputs of one pass of product p over the first layer (for the bitwise check).
static void first_layer_out(cudaStream_t s, const variant &v, int p, const layer &l, const dims &d, const bufs &b,
                            float *host, int n) {
    float *y = p == P_QKV ? b.yqkv : p == P_O ? b.yo : p == P_FFN ? b.yg : b.yd;
    CHECK(cudaMemsetAsync(y, 0, n * sizeof(float), s));
    issue(s, v, p, l, d, b);
    CHECK(cudaMemcpyAsync(host, y, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
}

int main(int argc, char **argv) {
    const dims d = parse_dims(argc, argv, "gemv_variants_bench");
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("%s: E=%d Q=%d QKV=%d F=%d, %d layers, %.2f GB of F16 weights a step\n", prop.name, d.E, d.Q, d.QKV,
           d.F, d.L, 2.0 * (double)layer_elems(d) * d.L / 1e9);
    const layer *ls = alloc_layers(d);
    const int n_max = d.QKV > d.F ? (d.QKV > d.E ? d.QKV : d.E) : (d.F > d.E ? d.F : d.E);
    float *xh = (float *)malloc(n_max * sizeof(float));
    for (int i = 0; i < n_max; i++) xh[i] = (float)rand() / RAND_MAX - 0.5f;
    bufs b = {dev_floats(d.E, xh),   dev_floats(d.Q, xh),   dev_floats(d.F, xh), dev_floats(d.QKV, NULL),
              dev_floats(d.E, NULL), dev_floats(d.F, NULL), dev_floats(d.E, NULL)};

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float *ref = (float *)malloc(n_max * sizeof(float)), *got = (float *)malloc(n_max * sizeof(float));
    const int n_out[N_PRODUCTS] = {d.QKV, d.E, d.F, d.E};

    printf("\nmicroseconds per layer (each product alone, a graph of %d layers, %d replays); %% of a %.0f GB/s copy\n\n",
           d.L, REPS, COPY_GBS);
    printf("| variant |");
    for (int p = 0; p < N_PRODUCTS; p++) printf(" %s |", PRODUCT_NAME[p]);
    printf(" sum | bitwise = first |\n|---|");
    for (int p = 0; p <= N_PRODUCTS; p++) printf("---:|");
    printf("---|\n");
    for (int vi = 0; vi < N_VARIANTS; vi++) {
        const variant &v = VARIANTS[vi];
        double sum_us = 0, sum_bytes = 0;
        bool same = true;
        printf("| %s |", v.name);
        for (int p = 0; p < N_PRODUCTS; p++) {
            first_layer_out(s, VARIANTS[0], p, ls[0], d, b, ref, n_out[p]); // the reference
            first_layer_out(s, v, p, ls[0], d, b, got, n_out[p]);
            same = same && memcmp(got, ref, n_out[p] * sizeof(float)) == 0;

            const double us = captured_us(s, REPS,
                                          [&](cudaStream_t c) {
                                              for (int l = 0; l < d.L; l++) issue(c, v, p, ls[l], d, b);
                                          }) /
                              d.L,
                         bytes = product_bytes(p, d);
            sum_us += us, sum_bytes += bytes;
            printf(" %.2f (%.0f%%) |", us, 100.0 * bytes / (us * 1e-6) / 1e9 / COPY_GBS);
        }
        printf(" %.2f (%.0f%%) | %s |\n", sum_us, 100.0 * sum_bytes / (sum_us * 1e-6) / 1e9 / COPY_GBS,
               vi == 0 ? "-" : same ? "yes" : "NO");
    }
    return 0;
}
