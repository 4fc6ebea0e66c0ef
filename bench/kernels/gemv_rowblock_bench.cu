// A decode product read the way the read floor reads: a block takes whole rows, each thread
// the same columns of every row. A standalone experiment (no stride library code) for issue
// 5: read_floor_bench's kernel reads an 8 MB product's bytes in one round of loads from
// every thread of the GPU (3.37 us); stride's decode kernel gives each row to a warp (or
// two), whose lanes walk the row in 2-4 dependent rounds, reading x again for every piece
// (o: 4.38 us). Here (rowblock):
//
//   thread t of a block of 256 owns the 16-byte pieces t, t + 256, ... (P of them) of every
//   row, so its x pieces are loaded once, into registers, before any weight load;
//   block b takes rows b, b + G, b + 2G, ... (G blocks, one wave), RB rows at a time: the
//   RB x P weight loads of a batch are issued together, then the products, then one block
//   reduction a batch (a shuffle tree a warp, the 8 warp sums added in order by a thread a
//   row).
//
// against the warp-a-row kernel (standalone_layer.cuh's gemv: 2 loads a lane in flight), for
// the decode products of llama-3.2-1b and qwen3-1.7b (F16, y = W x, gated pairs silu(Wg x)
// * (Wu x)), each shape as KERNELS launches back to back in a graph with weights of their
// own (together far more than L2). Printed: us a product, and the read floor of its bytes
// (bench/read-floor-h200.md). y is checked against the warp-a-row kernel's (another order
// of additions: relative difference, not bits).
//
// Build: nvcc -O3 -std=c++17 -arch=sm_90 bench/kernels/gemv_rowblock_bench.cu -o gemv_rowblock_bench
// Run:   gemv_rowblock_bench
#include <math.h>

#include "standalone_layer.cuh"

#define RB_THREADS 256
#define RB_WARPS (RB_THREADS / 32)
#define KERNELS 24
// Halves of padding after each row of the rowblock kernel's weights (-DROW_PAD=64: stride's
// layout rule for rows of a multiple of 2,048 bytes, one 128-byte line). With padding the
// warp-a-row kernel (packed rows) is not run.
#ifndef ROW_PAD
#define ROW_PAD 0
#endif
#define REPS 20

// y[r] = W[r] . x (GLU: silu(Wg[r] . x) * (Wu[r] . x)) for the rows of this block.
template <int P, int RB, bool GLU, int MIN_BLOCKS>
__global__ void __launch_bounds__(RB_THREADS, MIN_BLOCKS)
    gemv_rowblock(const __half *__restrict__ w, const __half *__restrict__ wu, const float *__restrict__ x,
                  float *__restrict__ y, int N) {
    constexpr int K = P * RB_THREADS * 8, NV = K / 8;
    constexpr int M = GLU ? 2 : 1; // matrices
    __shared__ float part[2][RB_WARPS][RB * M];
    const int t = threadIdx.x, warp = t / 32, lane = t % 32;
    float xf[P][8];
#pragma unroll
    for (int j = 0; j < P; j++) {
        const float4 a = __ldg((const float4 *)(x + (t + j * RB_THREADS) * 8));
        const float4 b = __ldg((const float4 *)(x + (t + j * RB_THREADS) * 8 + 4));
        xf[j][0] = a.x, xf[j][1] = a.y, xf[j][2] = a.z, xf[j][3] = a.w;
        xf[j][4] = b.x, xf[j][5] = b.y, xf[j][6] = b.z, xf[j][7] = b.w;
    }
    int buf = 0;
    for (int r0 = blockIdx.x; r0 < N; r0 += RB * gridDim.x, buf ^= 1) {
        uint4 q[M][RB][P];
#pragma unroll
        for (int i = 0; i < RB; i++) {
            const int r = r0 + i * gridDim.x;
            if (r >= N) break;
#pragma unroll
            for (int j = 0; j < P; j++) {
                q[0][i][j] = __ldcs((const uint4 *)(w + (size_t)r * (K + ROW_PAD)) + t + j * RB_THREADS);
                if (GLU) q[M - 1][i][j] = __ldcs((const uint4 *)(wu + (size_t)r * (K + ROW_PAD)) + t + j * RB_THREADS);
            }
        }
        float acc[M][RB];
#pragma unroll
        for (int m = 0; m < M; m++)
#pragma unroll
            for (int i = 0; i < RB; i++) {
                acc[m][i] = 0.0f;
                if (r0 + i * gridDim.x >= N) continue;
#pragma unroll
                for (int j = 0; j < P; j++) {
                    const __half2 *h = (const __half2 *)&q[m][i][j];
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const float2 f = __half22float2(h[e]);
                        acc[m][i] = fmaf(f.x, xf[j][2 * e], acc[m][i]);
                        acc[m][i] = fmaf(f.y, xf[j][2 * e + 1], acc[m][i]);
                    }
                }
            }
#pragma unroll
        for (int m = 0; m < M; m++)
#pragma unroll
            for (int i = 0; i < RB; i++) {
                const float v = warp_sum(acc[m][i]);
                if (lane == 0) part[buf][warp][m * RB + i] = v;
            }
        __syncthreads(); // (two buffers: the next batch's stores wait for no reader of this one)
        if (t < RB) {
            const int r = r0 + t * gridDim.x;
            if (r < N) {
                float s[M];
#pragma unroll
                for (int m = 0; m < M; m++) {
                    s[m] = 0.0f;
#pragma unroll
                    for (int k = 0; k < RB_WARPS; k++) s[m] += part[buf][k][m * RB + t];
                }
                y[r] = GLU ? silu(s[0]) * s[M - 1] : s[0];
            }
        }
    }
    (void)NV;
}

struct product {
    const char *name;
    int N, K;
    bool glu;
    double floor_us; // read-floor-h200.md, the same bytes
};

typedef void (*rb_kernel)(const __half *, const __half *, const float *, float *, int);

template <int P, int RB, bool GLU, int MB> static rb_kernel pick() { return gemv_rowblock<P, RB, GLU, MB>; }

// The rowblock kernel for (K, glu) at RB rows a batch and MB blocks an SM, or NULL.
static rb_kernel rowblock_for(int K, bool glu, int RB, int MB) {
#define RB_CASE(P_, RB_, MB_)                                                                                          \
    if (K == P_ * 2048 && RB == RB_ && MB == MB_) return glu ? pick<P_, RB_, true, MB_>() : pick<P_, RB_, false, MB_>();
    RB_CASE(1, 2, 4) RB_CASE(1, 4, 4) RB_CASE(1, 8, 4) RB_CASE(1, 2, 8) RB_CASE(1, 4, 8)
    RB_CASE(3, 1, 4) RB_CASE(3, 2, 4) RB_CASE(3, 4, 4) RB_CASE(3, 1, 8) RB_CASE(3, 2, 8)
    RB_CASE(4, 1, 4) RB_CASE(4, 2, 4) RB_CASE(4, 4, 4) RB_CASE(4, 1, 8) RB_CASE(4, 2, 8)
#undef RB_CASE
    return NULL;
}

int main(void) {
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    const int sms = prop.multiProcessorCount;
    const product prods[] = {
        {"o (both)", 2048, 2048, false, 3.37},
        {"q/k/v llama-3.2-1b", 3072, 2048, false, 4.42},
        {"q/k/v qwen3-1.7b", 4096, 2048, false, 5.22},
        {"down qwen3-1.7b", 2048, 6144, false, 7.06},
        {"down llama-3.2-1b", 2048, 8192, false, 8.97},
        {"gate/up qwen3-1.7b", 6144, 2048, true, 12.64},
        {"gate/up llama-3.2-1b", 8192, 2048, true, 16.28},
    };
    cudaStream_t st;
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    printf("%s (%d SMs): decode products, warp a row against block a row (rowblock: RB rows a batch, MB blocks "
           "an SM, one wave); %d kernels back to back in a graph, %d replays; us a product\n\n",
           prop.name, sms, KERNELS, REPS);
    printf("| product | MB | read floor | warp a row | rowblock RB x MB: us (max rel. diff.) |\n|---|---:|---:|---:|---|\n");
    for (const product &p : prods) {
        const int M = p.glu ? 2 : 1;
        const size_t per = (size_t)p.N * (p.K + ROW_PAD) * M;
        __half *w;
        float *x, *y;
        CHECK(cudaMalloc(&w, per * KERNELS * 2));
        CHECK(cudaMalloc(&x, (size_t)p.K * 4));
        CHECK(cudaMalloc(&y, (size_t)p.N * 4 * KERNELS));
        {
            upload_random_half(w, per * KERNELS, 9, 1.0f / 16.0f);
            float *hx = (float *)malloc((size_t)p.K * 4);
            for (int i = 0; i < p.K; i++) hx[i] = (float)rand() / RAND_MAX - 0.5f;
            CHECK(cudaMemcpy(x, hx, (size_t)p.K * 4, cudaMemcpyHostToDevice));
            free(hx);
        }
        const __half *wk[KERNELS];
        for (int k = 0; k < KERNELS; k++) wk[k] = w + per * k;
        auto warp_row = [&](cudaStream_t s) {
            for (int k = 0; k < KERNELS; k++) {
                if (p.glu)
                    gemv<EPI_GLU><<<blocks_for(p.N), SEPARATE_THREADS, 0, s>>>(wk[k], wk[k] + (size_t)p.N * p.K, x,
                                                                             y + (size_t)p.N * k, p.N, p.K);
                else
                    gemv<EPI_STORE><<<blocks_for(p.N), SEPARATE_THREADS, 0, s>>>(wk[k], NULL, x, y + (size_t)p.N * k,
                                                                               p.N, p.K);
            }
        };
        float *ref = (float *)malloc((size_t)p.N * 4), *got = (float *)malloc((size_t)p.N * 4);
        warp_row(st);
        CHECK(cudaStreamSynchronize(st));
        CHECK(cudaMemcpy(ref, y, (size_t)p.N * 4, cudaMemcpyDeviceToHost));
        const double us_warp = ROW_PAD ? 0.0 : captured_us(st, REPS, warp_row) / KERNELS;
        printf("| %s | %.1f | %.2f | %.2f |", p.name, per * 2 / 1e6, p.floor_us, us_warp);
        for (int MB : {4, 8})
            for (int RB : {1, 2, 4, 8}) {
                rb_kernel kern = rowblock_for(p.K, p.glu, RB, MB);
                if (!kern) continue;
                const unsigned grid = (unsigned)(sms * MB < p.N ? sms * MB : p.N);
                auto issue = [&](cudaStream_t s) {
                    for (int k = 0; k < KERNELS; k++)
                        kern<<<grid, RB_THREADS, 0, s>>>(wk[k], wk[k] + (size_t)p.N * (p.K + ROW_PAD), x,
                                                         y + (size_t)p.N * k, p.N);
                };
                CHECK(cudaMemset(y, 0, (size_t)p.N * 4));
                issue(st);
                CHECK(cudaStreamSynchronize(st));
                CHECK(cudaGetLastError());
                CHECK(cudaMemcpy(got, y, (size_t)p.N * 4, cudaMemcpyDeviceToHost));
                double md = 0, mx = 0;
                for (int i = 0; i < p.N; i++) {
                    md = fmax(md, fabs((double)got[i] - ref[i]));
                    mx = fmax(mx, fabs((double)ref[i]));
                }
                const double us = captured_us(st, REPS, issue) / KERNELS;
                printf(" %dx%d: %.2f (%.0e)", RB, MB, us, md / (mx > 0 ? mx : 1));
            }
        printf(" |\n");
        fflush(stdout);
        free(ref), free(got);
        CHECK(cudaFree(w));
        CHECK(cudaFree(x));
        CHECK(cudaFree(y));
    }
    return 0;
}
