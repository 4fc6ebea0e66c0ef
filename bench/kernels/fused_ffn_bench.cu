// A decode step's FFN (one token) in one kernel split by columns of g, against the
// copy rate (issue 5; bench/cuda-decode.md, sixth session). No stride library code.
//
//   h = rmsnorm(x) * norm_w                 x, h [E] f32
//   g = silu(Wg h) * (Wu h)                 Wg, Wu [F][ld_gu] F16 (rows of E, padded)
//   x += Wd g                               Wd [E][ld_d] F16 (rows of F, padded)
//
// The engine runs this as two kernels (norm + gate/up + SwiGLU, then down + add), and the
// second waits for all of g. Here block b of nb owns pieces [p0, p1) of 8 columns of g
// (the F/8 pieces shared out evenly): it forms h itself, its slice of g from 2 (p1 - p0) * 8
// rows of Wg and Wu, and multiplies the slice into its columns of Wd (every row of Wd, a
// piece of (p1 - p0) * 16 bytes), writing part[b][0..E) without waiting for any other
// block. ffn_sum then adds the nb partial sums to x in block order (one small kernel).
//
// Each warp walks a list of tasks: first rows of Wg/Wu (one round of FFN_U 16-byte loads a
// lane each), then groups of Wd rows (FFN_U loads a lane, 32 / P rows a load for P pieces),
// with the next task's loads in flight while the current one is reduced; the first task's
// loads are issued before the norm, the first Wd task's before the barrier that completes g.
//
// Build: nvcc -O3 -std=c++17 -arch=sm_90 bench/kernels/fused_ffn_bench.cu -o fused_ffn_bench
// Run:   fused_ffn_bench [E F L]       (default llama-3.2-1b: 2048 8192 16)
//        env BPS: blocks an SM (default 1); REPS (default 200)
#include <math.h>
#include <string.h>

#include "standalone_layer.cuh"

#ifndef FFN_THREADS
#define FFN_THREADS 512
#endif
#define FFN_WARPS (FFN_THREADS / 32)
#ifndef FFN_ONLY
#define FFN_ONLY 0 // 1: only the rows of Wg and Wu are read; 2: only the pieces of Wd (times, not values)
#endif
#define FFN_U 8              // 16-byte loads a lane per task
#define FFN_MAX_PIECES 32    // pieces of g a block may own: one lane each in a Wd load
#define SUM_THREADS 256
#define SUM_COLS 32          // columns of x a sum block adds (8 groups of partials each)
#define PAD_HALVES 64        // one 128-byte line on every row (all rows here are 2 KiB multiples)

// The block's pieces of 8 columns of g.
__device__ __forceinline__ void block_pieces(int F, int *p0, int *p1) {
    const long long n = F / 8;
    *p0 = (int)(n * blockIdx.x / gridDim.x);
    *p1 = (int)(n * (blockIdx.x + 1) / gridDim.x);
}

// What a warp's tasks are, for block-local sizes: nc columns of g (P = nc / 8 pieces),
// rounds R of FFN_U loads a lane per row of E.
struct ffn_plan {
    int c0, nc, P, rows_per_load, R, n_a, n_b;
};

__device__ __forceinline__ ffn_plan make_plan(int E, int F, int warp) {
    ffn_plan p;
    int p0, p1;
    block_pieces(F, &p0, &p1);
    p.c0 = p0 * 8, p.P = p1 - p0, p.nc = p.P * 8;
    p.rows_per_load = 32 / p.P;
    p.R = (E / 8 + 32 * FFN_U - 1) / (32 * FFN_U);
    const int rows_a = 2 * p.nc; // gate rows, then up rows
    p.n_a = (rows_a > warp ? (rows_a - warp + FFN_WARPS - 1) / FFN_WARPS : 0) * p.R;
    const int per_b = FFN_U * p.rows_per_load, groups = (E + per_b - 1) / per_b;
    p.n_b = groups > warp ? (groups - warp + FFN_WARPS - 1) / FFN_WARPS : 0;
    if (FFN_ONLY == 1) p.n_b = 0; // a diagnosis: the Wg/Wu rows alone, or the Wd pieces alone
    if (FFN_ONLY == 2) p.n_a = 0;
    return p;
}

// The block row (of Wg, then Wu) of this warp's row task t (t < n_a), and the first Wd row
// of its Wd task t (t >= n_a): issue and the consumers agree on them here.
__device__ __forceinline__ int task_row(const ffn_plan &p, int t, int warp) { return warp + (t / p.R) * FFN_WARPS; }
__device__ __forceinline__ int task_first_down_row(const ffn_plan &p, int t, int warp) {
    return (warp + (t - p.n_a) * FFN_WARPS) * FFN_U * p.rows_per_load;
}

// Task t of this warp into q: t < n_a a round of a Wg/Wu row, else a group of Wd rows.
__device__ __forceinline__ void issue(const ffn_plan &p, int t, int warp, int lane, const __half *gate,
                                      const __half *up, int ld_gu, const __half *down, int ld_d, int E, uint4 q[FFN_U]) {
    if (t < p.n_a) {
        const int i = task_row(p, t, warp), round = t % p.R;
        const __half *row = i < p.nc ? gate + (size_t)(p.c0 + i) * ld_gu : up + (size_t)(p.c0 + i - p.nc) * ld_gu;
#pragma unroll
        for (int u = 0; u < FFN_U; u++) {
            const int v = lane + 32 * (round * FFN_U + u);
            if (v < E / 8) q[u] = __ldcs((const uint4 *)(row + v * 8));
        }
    } else {
        const int base = task_first_down_row(p, t, warp);
        const int rr = lane / p.P, piece = lane % p.P;
#pragma unroll
        for (int u = 0; u < FFN_U; u++) {
            const int e = base + u * p.rows_per_load + rr;
            if (rr < p.rows_per_load && e < E)
                q[u] = __ldcs((const uint4 *)(down + (size_t)e * ld_d + p.c0 + piece * 8));
        }
    }
}

// grid nb blocks, FFN_THREADS; part [nb][E]. STREAM: the loads only (their sum to a sink).
template <bool STREAM>
__global__ void __launch_bounds__(FFN_THREADS) ffn_split(const float *__restrict__ x, const float *__restrict__ norm_w,
                                                        float eps, const __half *gate, const __half *up, int ld_gu,
                                                        const __half *down, int ld_d, int E, int F,
                                                        float *__restrict__ part) {
    extern __shared__ __align__(16) float sm[];
    float *xn = sm;                              // [E] h
    float *res = xn + E;                         // [2 * FFN_MAX_PIECES * 8] the rows of Wg, Wu against h
    float *g = res + 2 * FFN_MAX_PIECES * 8;     // [FFN_MAX_PIECES * 8] the block's slice of g
    float *seg = g + FFN_MAX_PIECES * 8;         // [FFN_WARPS][FFN_U * 32] Wd piece sums
    __shared__ float red[FFN_WARPS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const ffn_plan p = make_plan(E, F, warp);
    const int total = p.n_a + p.n_b;
    uint4 q0[FFN_U], q1[FFN_U]; // task t's loads land in q0 when t is even, else in q1
    if (total > 0) issue(p, 0, warp, lane, gate, up, ld_gu, down, ld_d, E, q0);

    float ss = 0.0f; // h, while the first loads fly
    for (int k = threadIdx.x; k < E; k += FFN_THREADS) ss = fmaf(x[k], x[k], ss);
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (lane == 0) red[warp] = ss;
    __syncthreads();
    float tot = 0.0f;
    for (int i = 0; i < FFN_WARPS; i++) tot += red[i];
    const float sc = (float)(1.0 / sqrt((double)tot / (double)E + (double)eps));
    for (int k = threadIdx.x; k < E; k += FFN_THREADS) xn[k] = (x[k] * sc) * norm_w[k];
    __syncthreads();

    float acc = 0.0f, sink = 0.0f;
    auto row_round = [&](int t, const uint4 (&cur)[FFN_U], uint4 (&nxt)[FFN_U]) { // a round of a Wg/Wu row
        if (t + 1 < total) issue(p, t + 1, warp, lane, gate, up, ld_gu, down, ld_d, E, nxt);
        const int round = t % p.R;
#pragma unroll
        for (int u = 0; u < FFN_U; u++) {
            const int v = lane + 32 * (round * FFN_U + u);
            if (v < E / 8) {
                if (STREAM) sink += __uint_as_float(cur[u].x ^ cur[u].w);
                else acc += dot8(cur[u], ((const float4 *)xn)[2 * v], ((const float4 *)xn)[2 * v + 1], 0.0f);
            }
        }
        if (round == p.R - 1) {
            for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
            if (lane == 0) res[task_row(p, t, warp)] = acc;
            acc = 0.0f;
        }
    };
    for (int t = 0; t < p.n_a; t++) {
        if (t % 2 == 0) row_round(t, q0, q1);
        else row_round(t, q1, q0);
    }
    __syncthreads();
    for (int j = threadIdx.x; j < p.nc; j += FFN_THREADS) g[j] = silu(res[j]) * res[p.nc + j];
    __syncthreads();

    float *my_seg = seg + warp * FFN_U * 32;
    auto down_group = [&](int t, const uint4 (&cur)[FFN_U], uint4 (&nxt)[FFN_U]) { // this block's pieces of Wd rows
        if (t + 1 < total) issue(p, t + 1, warp, lane, gate, up, ld_gu, down, ld_d, E, nxt);
        const int base = task_first_down_row(p, t, warp);
        const int rr = lane / p.P, piece = lane % p.P;
#pragma unroll
        for (int u = 0; u < FFN_U; u++) {
            const int e = base + u * p.rows_per_load + rr;
            float s = 0.0f;
            if (rr < p.rows_per_load && e < E) {
                if (STREAM) sink += __uint_as_float(cur[u].x ^ cur[u].w);
                else s = dot8(cur[u], ((const float4 *)g)[2 * piece], ((const float4 *)g)[2 * piece + 1], 0.0f);
            }
            my_seg[u * 32 + lane] = s;
        }
        __syncwarp();
        for (int l = lane; l < FFN_U * p.rows_per_load; l += 32) { // one row's P piece sums, in piece order
            const int u = l / p.rows_per_load, r = l % p.rows_per_load, e = base + u * p.rows_per_load + r;
            float s = 0.0f;
            for (int k = 0; k < p.P; k++) s += my_seg[u * 32 + r * p.P + k];
            if (e < E) part[(size_t)blockIdx.x * E + e] = STREAM ? s + sink : s;
        }
        __syncwarp();
    };
    for (int t = p.n_a; t < total; t++) {
        if (t % 2 == 0) down_group(t, q0, q1);
        else down_group(t, q1, q0);
    }
}

// x[e] += sum over b in order of part[b][e]; grid E / SUM_COLS, SUM_THREADS: 8 groups of
// blocks' partials (b = grp, grp + 8, ...) summed apart, then the groups in order.
__global__ void __launch_bounds__(SUM_THREADS) ffn_sum(float *x, const float *__restrict__ part, int nb, int E) {
    constexpr int GROUPS = SUM_THREADS / SUM_COLS;
    __shared__ float red[GROUPS][SUM_COLS];
    const int c = threadIdx.x % SUM_COLS, grp = threadIdx.x / SUM_COLS, e = blockIdx.x * SUM_COLS + c;
    float s = 0.0f;
    if (e < E)
        for (int b = grp; b < nb; b += GROUPS) s += part[(size_t)b * E + e];
    red[grp][c] = s;
    __syncthreads();
    if (grp == 0 && e < E) {
        float t = 0.0f;
        for (int k = 0; k < GROUPS; k++) t += red[k][c];
        x[e] += t;
    }
}

// ffn_split's dynamic shared memory: h [E], the rows of Wg and Wu, the slice of g, each
// warp's Wd piece sums.
static size_t ffn_smem(int E) { return ((size_t)E + 3 * FFN_MAX_PIECES * 8 + FFN_WARPS * FFN_U * 32) * sizeof(float); }

struct ffn_layer {
    __half *gate, *up, *down;
};

#define PATTERN ((size_t)1 << 24)
#define UP_SHIFT 12345

// A weight filled from one random pattern (seed 7): element i of its padded rows is
// pattern[(i + shift) % PATTERN] (Wu shifted against Wg, so that a mix-up shows).
static void fill(__half *dst, size_t n, const __half *pat, size_t shift) {
    for (size_t off = 0; off < n;) {
        const size_t at = (off + shift) % PATTERN, k = n - off < PATTERN - at ? n - off : PATTERN - at;
        CHECK(cudaMemcpy(dst + off, pat + at, k * sizeof(__half), cudaMemcpyHostToDevice));
        off += k;
    }
}

static float pat_at(const __half *pat, size_t i) { return __half2float(pat[i % PATTERN]); }

// One layer in double on the host: x + Wd (silu(Wg h) * (Wu h)) into out.
static void reference(const float *x, const float *nw, float eps, const __half *pat, int E, int F, double *out) {
    const int ld_gu = E + PAD_HALVES, ld_d = F + PAD_HALVES;
    double ss = 0;
    for (int k = 0; k < E; k++) ss += (double)x[k] * x[k];
    const double sc = 1.0 / sqrt(ss / E + eps);
    double *h = (double *)malloc(sizeof(double) * E), *g = (double *)malloc(sizeof(double) * F);
    for (int k = 0; k < E; k++) h[k] = x[k] * sc * nw[k];
    for (int j = 0; j < F; j++) {
        double a = 0, b = 0;
        for (int k = 0; k < E; k++) {
            a += pat_at(pat, (size_t)j * ld_gu + k) * h[k];
            b += pat_at(pat, (size_t)j * ld_gu + k + UP_SHIFT) * h[k];
        }
        g[j] = a / (1.0 + exp(-a)) * b;
    }
    for (int e = 0; e < E; e++) {
        double s = 0;
        for (int j = 0; j < F; j++) s += pat_at(pat, (size_t)e * ld_d + j) * g[j];
        out[e] = x[e] + s;
    }
    free(h);
    free(g);
}

static void step(cudaStream_t s, const ffn_layer *ls, int L, int E, int F, int nb, float *x, const float *nw,
                 float *part, bool stream, bool sum) {
    const int ld_gu = E + PAD_HALVES, ld_d = F + PAD_HALVES;
    for (int l = 0; l < L; l++) {
        if (stream)
            ffn_split<true><<<nb, FFN_THREADS, ffn_smem(E), s>>>(x, nw, 1e-5f, ls[l].gate, ls[l].up, ld_gu, ls[l].down,
                                                                 ld_d, E, F, part);
        else
            ffn_split<false><<<nb, FFN_THREADS, ffn_smem(E), s>>>(x, nw, 1e-5f, ls[l].gate, ls[l].up, ld_gu,
                                                                  ls[l].down, ld_d, E, F, part);
        if (sum) ffn_sum<<<(E + SUM_COLS - 1) / SUM_COLS, SUM_THREADS, 0, s>>>(x, part, nb, E);
    }
}

static double time_step(cudaStream_t s, const ffn_layer *ls, int L, int E, int F, int nb, float *x, const float *nw,
                        float *part, bool stream, bool sum, int reps) {
    return captured_us(s, reps, [&](cudaStream_t c) { step(c, ls, L, E, F, nb, x, nw, part, stream, sum); }) / L;
}

int main(int argc, char **argv) {
    int E = 2048, F = 8192, L = 16;
    if (argc == 4) E = atoi(argv[1]), F = atoi(argv[2]), L = atoi(argv[3]);
    else if (argc != 1) {
        fprintf(stderr, "usage: %s [E F L]\n", argv[0]);
        return 2;
    }
    const int bps = getenv("BPS") ? atoi(getenv("BPS")) : 1, reps = getenv("REPS") ? atoi(getenv("REPS")) : 200;
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int nb = sms * bps;
    if (E % 8 || F % 8 || L < 1 || F / 8 > nb * FFN_MAX_PIECES || F / 8 < 4 * nb) {
        fprintf(stderr, "%s: E, F multiples of 8; F / 8 between 4 and %d pieces a block\n", argv[0], FFN_MAX_PIECES);
        return 2;
    }
    CHECK(cudaFuncSetAttribute(ffn_split<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ffn_smem(E)));
    CHECK(cudaFuncSetAttribute(ffn_split<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ffn_smem(E)));

    const int ld_gu = E + PAD_HALVES, ld_d = F + PAD_HALVES;
    __half *pat = (__half *)malloc(PATTERN * sizeof(__half));
    srand(7);
    for (size_t i = 0; i < PATTERN; i++) pat[i] = __float2half(((float)rand() / RAND_MAX - 0.5f) / 64.0f);
    ffn_layer *ls = (ffn_layer *)malloc(sizeof(ffn_layer) * L);
    for (int l = 0; l < L; l++) {
        CHECK(cudaMalloc(&ls[l].gate, (size_t)F * ld_gu * 2));
        CHECK(cudaMalloc(&ls[l].up, (size_t)F * ld_gu * 2));
        CHECK(cudaMalloc(&ls[l].down, (size_t)E * ld_d * 2));
        fill(ls[l].gate, (size_t)F * ld_gu, pat, 0);
        fill(ls[l].up, (size_t)F * ld_gu, pat, UP_SHIFT);
        fill(ls[l].down, (size_t)E * ld_d, pat, 0);
    }
    float *hx = (float *)malloc(sizeof(float) * E), *hnw = (float *)malloc(sizeof(float) * E);
    for (int k = 0; k < E; k++) hx[k] = (float)rand() / RAND_MAX - 0.5f, hnw[k] = 0.5f + (float)rand() / RAND_MAX;
    float *x, *nw, *part;
    CHECK(cudaMalloc(&x, E * sizeof(float)));
    CHECK(cudaMalloc(&nw, E * sizeof(float)));
    CHECK(cudaMalloc(&part, (size_t)nb * E * sizeof(float)));
    CHECK(cudaMemcpy(nw, hnw, E * sizeof(float), cudaMemcpyHostToDevice));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    // One layer against the host's double reference, twice (bitwise the same).
    double *want = (double *)malloc(sizeof(double) * E);
    float *got[2] = {(float *)malloc(sizeof(float) * E), (float *)malloc(sizeof(float) * E)};
    reference(hx, hnw, 1e-5f, pat, E, F, want);
    for (int r = 0; r < 2; r++) {
        CHECK(cudaMemcpy(x, hx, E * sizeof(float), cudaMemcpyHostToDevice));
        step(s, ls, 1, E, F, nb, x, nw, part, false, true);
        CHECK(cudaMemcpyAsync(got[r], x, E * sizeof(float), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
    }
    double max_err = 0, max_d = 0;
    for (int e = 0; e < E; e++) {
        max_err = fmax(max_err, fabs(got[0][e] - want[e]));
        max_d = fmax(max_d, fabs(want[e] - hx[e]));
    }
    const bool same = memcmp(got[0], got[1], sizeof(float) * E) == 0;

    CHECK(cudaMemcpy(x, hx, E * sizeof(float), cudaMemcpyHostToDevice));
    const double us_both = time_step(s, ls, L, E, F, nb, x, nw, part, false, true, reps);
    const double us_split = time_step(s, ls, L, E, F, nb, x, nw, part, false, false, reps);
    const double us_stream = time_step(s, ls, L, E, F, nb, x, nw, part, true, false, reps);
    const double mb = (FFN_ONLY ? FFN_ONLY == 1 ? 2.0 : 1.0 : 3.0) * E * F * 2 / 1e6, roof = mb / COPY_GBS * 1e3;
    printf("E %d F %d L %d: %d blocks (%d an SM) x %d threads, %.1f-%.1f columns of g a block, Wd pieces of %d-%d "
           "bytes\n",
           E, F, L, nb, bps, FFN_THREADS, (double)(F / 8 / nb) * 8, (double)((F / 8 + nb - 1) / nb) * 8,
           F / 8 / nb * 16, (F / 8 + nb - 1) / nb * 16);
    printf("  weights %.1f MB a layer, %.2f us at the copy rate (%.0f GB/s)\n", mb, roof, COPY_GBS);
    printf("  ffn_split + ffn_sum  %7.2f us a layer  %5.1f%% of the copy rate\n", us_both, 100 * roof / us_both);
    printf("  ffn_split alone      %7.2f us a layer  %5.1f%%\n", us_split, 100 * roof / us_split);
    printf("  loads only (STREAM)  %7.2f us a layer  %5.1f%%\n", us_stream, 100 * roof / us_stream);
    printf("  one layer vs double reference: max |err| %.3g = %.3g of max |Wd g|; two runs bitwise %s\n", max_err,
           max_err / max_d, same ? "the same" : "DIFFERENT");
    return same && (FFN_ONLY || max_err / max_d < 1e-4) ? 0 : 1;
}
