// How close can the output head of a decode step come to a bare read of its bytes? A
// standalone experiment (no stride library code) for issue 5. The head is the one decode
// product many waves long (llama-3.2-1b: 128,256 rows of 2,048 F16, 525 MB; qwen3-1.7b:
// 151,936 rows, 622 MB), y = W x with x [K] F32 and y [N] F32, one warp a row as stride's
// decode kernel (lane l owns the 16-byte pieces l, l + 32, ... in order, then a shuffle
// tree), in these forms:
//
//   waves      stride's today: 8 rows a block, one a warp, 2 loads a lane in flight, as many
//              blocks as rows / 8 (15-18 waves of 8 blocks an SM)
//   waves U4   the same with 4 loads a lane in flight
//   stride     one wave of blocks (8 an SM), each warp walking rows w, w + W, ... (W warps)
//   stride pf  the same, the next row's first loads issued before the current row's sum (at
//              8 blocks an SM it spills; also at 6)
//   pairs      one wave, each warp two rows at once (2 loads a lane from each)
//
// Each form is timed as HEADS launches back to back in a graph (the same weights: 525 MB
// is ten times the L2, so every launch streams them from HBM), and every form's y is
// checked against the first's bit for bit (the same order of additions in every form).
// The floor is read_floor_bench's for the same bytes (bench/read-floor-h200.md).
//
// Build: nvcc -O3 -std=c++17 -arch=sm_90 bench/kernels/head_bench.cu -o head_bench
// Run:   head_bench
#include <string.h>

#include "standalone_layer.cuh"

#define HEAD_K 2048
#define HEADS 4
#define REPS 10
#define THREADS 256
#define WARPS (THREADS / 32)

template <int U, int MIN_BLOCKS>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS) head_waves(const __half *w, const float *x, float *y, int N) {
    const int r = blockIdx.x * WARPS + threadIdx.x / 32;
    if (r >= N) return;
    const float acc = row_dot<U, int>(w + (size_t)r * HEAD_K, x, HEAD_K);
    if (threadIdx.x % 32 == 0) y[r] = acc;
}

__global__ void __launch_bounds__(THREADS, 8) head_stride(const __half *w, const float *x, float *y, int N) {
    const int W = gridDim.x * WARPS;
    for (int r = blockIdx.x * WARPS + threadIdx.x / 32; r < N; r += W) {
        const float acc = row_dot<2, int>(w + (size_t)r * HEAD_K, x, HEAD_K);
        if (threadIdx.x % 32 == 0) y[r] = acc;
    }
}

// Rows of HEAD_K: a lane's 8 pieces in 4 rounds of 2; round 0 of the next row is loaded
// before the current row's last round is used.
template <int MIN_BLOCKS>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS) head_stride_pf(const __half *w, const float *x, float *y, int N) {
    constexpr int NV = HEAD_K / 8, ROUNDS = NV / 64;
    const int W = gridDim.x * WARPS, lane = threadIdx.x % 32;
    int r = blockIdx.x * WARPS + threadIdx.x / 32;
    if (r >= N) return;
    const uint4 *row = (const uint4 *)(w + (size_t)r * HEAD_K);
    uint4 a = __ldcs(row + lane), b = __ldcs(row + lane + 32);
    while (true) {
        float acc = 0.0f;
#pragma unroll 1
        for (int k = 0; k < ROUNDS; k++) {
            const int v = k * 64 + lane;
            uint4 na = a, nb = b;
            const int rn = r + W;
            if (k + 1 < ROUNDS) {
                na = __ldcs(row + v + 64), nb = __ldcs(row + v + 96);
            } else if (rn < N) {
                const uint4 *next = (const uint4 *)(w + (size_t)rn * HEAD_K);
                na = __ldcs(next + lane), nb = __ldcs(next + lane + 32);
            }
            const float4 *xa = (const float4 *)(x + v * 8), *xb = (const float4 *)(x + (v + 32) * 8);
            acc = dot8(a, __ldg(xa), __ldg(xa + 1), acc);
            acc = dot8(b, __ldg(xb), __ldg(xb + 1), acc);
            a = na, b = nb;
        }
        acc = warp_sum(acc);
        if (lane == 0) y[r] = acc;
        r += W;
        if (r >= N) return;
        row = (const uint4 *)(w + (size_t)r * HEAD_K);
    }
}

__global__ void __launch_bounds__(THREADS, 8) head_pairs(const __half *w, const float *x, float *y, int N) {
    constexpr int NV = HEAD_K / 8;
    const int W = gridDim.x * WARPS, lane = threadIdx.x % 32;
    for (int r = blockIdx.x * WARPS + threadIdx.x / 32; r < N; r += 2 * W) {
        const int r2 = r + W;
        const uint4 *p = (const uint4 *)(w + (size_t)r * HEAD_K), *p2 = (const uint4 *)(w + (size_t)(r2 < N ? r2 : r) * HEAD_K);
        float acc = 0.0f, acc2 = 0.0f;
        for (int v = lane; v < NV; v += 64) {
            const uint4 a = __ldcs(p + v), b = __ldcs(p + v + 32), c = __ldcs(p2 + v), d = __ldcs(p2 + v + 32);
            const float4 *xa = (const float4 *)(x + v * 8), *xb = (const float4 *)(x + (v + 32) * 8);
            const float4 xa0 = __ldg(xa), xa1 = __ldg(xa + 1), xb0 = __ldg(xb), xb1 = __ldg(xb + 1);
            acc = dot8(a, xa0, xa1, acc), acc = dot8(b, xb0, xb1, acc);
            acc2 = dot8(c, xa0, xa1, acc2), acc2 = dot8(d, xb0, xb1, acc2);
        }
        acc = warp_sum(acc), acc2 = warp_sum(acc2);
        if (lane == 0) {
            y[r] = acc;
            if (r2 < N) y[r2] = acc2;
        }
    }
}

enum { WAVES, WAVES_U4, WAVES_U4_6, STRIDE, STRIDE_PF, STRIDE_PF_6, PAIRS, N_FORMS };
static const char *const NAMES[] = {"waves (stride today)", "waves, U4", "waves, U4, 6 blocks an SM", "stride",
                                    "stride, next row early", "stride, next row early, 6 blocks an SM", "pairs"};

static void launch(int form, cudaStream_t s, const __half *w, const float *x, float *y, int N, int sms) {
    const unsigned all = (unsigned)((N + WARPS - 1) / WARPS), wave = (unsigned)sms * 8;
    switch (form) {
    case WAVES: head_waves<2, 8><<<all, THREADS, 0, s>>>(w, x, y, N); break;
    case WAVES_U4: head_waves<4, 8><<<all, THREADS, 0, s>>>(w, x, y, N); break;
    case WAVES_U4_6: head_waves<4, 6><<<all, THREADS, 0, s>>>(w, x, y, N); break;
    case STRIDE: head_stride<<<wave, THREADS, 0, s>>>(w, x, y, N); break;
    case STRIDE_PF: head_stride_pf<8><<<wave, THREADS, 0, s>>>(w, x, y, N); break;
    case STRIDE_PF_6: head_stride_pf<6><<<(unsigned)sms * 6, THREADS, 0, s>>>(w, x, y, N); break;
    default: head_pairs<<<wave, THREADS, 0, s>>>(w, x, y, N); break;
    }
}

int main(void) {
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    const int sms = prop.multiProcessorCount;
    struct { const char *name; int N; double floor_us; } heads[] = {
        {"llama-3.2-1b", 128256, 114.58}, // read-floor-h200.md: 525 MB
        {"qwen3-1.7b", 151936, 0},       // 622 MB: at the 525 MB read's rate
    };
    heads[1].floor_us = heads[0].floor_us * 151936.0 / 128256.0;
    cudaStream_t st;
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    printf("%s (%d SMs): the output head, K = %d F16, y = W x; %d heads back to back in a graph, %d replays\n\n",
           prop.name, sms, HEAD_K, HEADS, REPS);
    printf("| head | form | us | GB/s | against the floor | y = waves |\n|---|---|---:|---:|---:|---|\n");
    for (const auto &h : heads) {
        const size_t n_w = (size_t)h.N * HEAD_K;
        __half *w;
        float *x, *y;
        CHECK(cudaMalloc(&w, n_w * 2));
        CHECK(cudaMalloc(&x, HEAD_K * 4));
        CHECK(cudaMalloc(&y, (size_t)h.N * 4));
        {
            upload_random_half(w, n_w, 3, 1.0f / 16.0f);
            float hx[HEAD_K];
            for (int i = 0; i < HEAD_K; i++) hx[i] = (float)rand() / RAND_MAX - 0.5f;
            CHECK(cudaMemcpy(x, hx, sizeof(hx), cudaMemcpyHostToDevice));
        }
        float *y0 = (float *)malloc((size_t)h.N * 4), *y1 = (float *)malloc((size_t)h.N * 4);
        for (int form = 0; form < N_FORMS; form++) {
            CHECK(cudaMemset(y, 0, (size_t)h.N * 4));
            launch(form, st, w, x, y, h.N, sms);
            CHECK(cudaStreamSynchronize(st));
            CHECK(cudaMemcpy(form ? y1 : y0, y, (size_t)h.N * 4, cudaMemcpyDeviceToHost));
            const bool same = form == 0 || memcmp(y0, y1, (size_t)h.N * 4) == 0;
            const double us = captured_us(st, REPS, [&](cudaStream_t s) {
                for (int i = 0; i < HEADS; i++) launch(form, s, w, x, y, h.N, sms);
            }) / HEADS;
            printf("| %s | %s | %.2f | %.0f | %.0f%% | %s |\n", h.name, NAMES[form], us, (double)n_w * 2 / us / 1e3,
                   100.0 * h.floor_us / us, same ? "yes" : "NO");
        }
        free(y0), free(y1);
        CHECK(cudaFree(w));
        CHECK(cudaFree(x));
        CHECK(cudaFree(y));
    }
    return 0;
}
