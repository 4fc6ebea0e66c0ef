// Can a decode step keep HBM streaming across the dependencies between its products? A
// standalone experiment (no stride library code) for issue 5: the four products of a dense
// layer (standalone_layer.cuh), for L layers with weights of their own,
//
//   qkv = Wqkv x;  x += Wo qkv[0:Q];  g = silu(Wg x) * (Wu x);  x += Wd g
//
// as separate kernels in a graph (stride's shape today, without norms and attention) vs one
// persistent block an SM in which the weights never wait for a dependency:
//
//   producer warp (lane 0): walks the block's rows of every product of every layer in order
//       and keeps a ring of STAGE_BYTES shared-memory stages filled by cp.async.bulk (whole
//       rows; a stage holds R rows, a power of two, gate and up rows side by side for the
//       gated product); it waits only for a stage to be released.
//   consumer warps (CONSUMER_WARPS): at the start of each product wait until every block has
//       raised the counter of the product before (its outputs written, release/acquire at gpu
//       scope; one poller a warp), load the product's input for their pieces into registers
//       (warp w owns the 16-byte pieces [w * K/64, (w + 1) * K/64) of every row, lane l every
//       32nd of those), then reduce each stage's rows: one partial sum a row and warp into
//       shared memory, added in warp order by one thread a row, which applies the epilogue
//       (store, += with the residual it loaded at the product's start, or SwiGLU).
//   (The first form, 284ed76, staged x in shared memory and split a stage's rows over the
//   warps: its x reads cost twice the weights' shared-memory bandwidth, with bank conflicts,
//   and each += read its residual from L2 inside the stage loop.)
// Block b owns rows [N*b/G, N*(b+1)/G) of each product (G blocks, one an SM). Modes of the
// same kernel: chain (the real dependencies), no-wait (the counters skipped: what the waits
// cost; the values race) and stream (consumers release each stage unread: the ring's
// streaming ceiling). Printed: microseconds a layer, weight bytes over that time against a
// device copy, and for chain the largest difference from the separate kernels' x after one
// step relative to max |x| (the sums are split differently: not bitwise) and whether two
// chain runs agree bit for bit (they must: fixed order).
//
// Build: nvcc -O3 -std=c++17 -arch=sm_90 bench/kernels/stream_chain_bench.cu -o stream_chain_bench
// Run:   stream_chain_bench [E Q KV F L]   (default llama-3.2-1b: 2048 2048 512 8192 16)
//        STAGES=n caps the ring's stages (default: as many as shared memory holds, at most 8);
//        MODE=m runs that mode only (0 chain, 1 no-wait, 2 stream; for a profiler)
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "standalone_layer.cuh"

#ifndef STAGE_BYTES
#define STAGE_BYTES 32768
#endif
#define CONSUMER_WARPS 8
#define CONSUMERS (CONSUMER_WARPS * 32)
#define THREADS (CONSUMERS + 32)
#define MAX_STAGES 8
#define LANE_PIECES 6 // 16-byte pieces of a row a lane holds x for: K <= CONSUMER_WARPS * 32 * 8 * 6
#define REPS 20

enum { MODE_CHAIN, MODE_NO_WAIT, MODE_STREAM, N_MODES };
static const char *MODE_NAME[] = {"chain (dependencies waited)", "no-wait (dependencies skipped)",
                                  "stream (stages released unread)"};

// One product as the kernel walks it: out[n] (epi) W[n] . in, W [N][K] at row stride ld.
struct product {
    const __half *w, *w2; // w2: the up weight of the gated product
    const float *in;
    float *out;
    int N, K, ld, epi;
};

// Rows a stage holds: a power of two, at most CONSUMER_WARPS; 0 if one row does not fit.
__host__ __device__ static int tile_rows(int K, int epi) {
    const int row_bytes = K * 2 * (epi == EPI_GLU ? 2 : 1);
    int r = STAGE_BYTES / row_bytes, p = 1;
    if (r < 1) return 0;
    if (r > CONSUMER_WARPS) r = CONSUMER_WARPS;
    while (p * 2 <= r) p *= 2;
    return p;
}

__device__ __forceinline__ unsigned smem_addr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(uint64_t *bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_expect(uint64_t *bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t *bar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(smem_addr(bar)), "r"(parity)
                     : "memory");
}

__device__ __forceinline__ void bulk_copy(void *dst, const void *src, unsigned bytes, uint64_t *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// The consumer warps' barrier (the producer warp never joins it).
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, %0;" ::"n"(CONSUMERS) : "memory"); }

// acc + the 8 products of piece q (F16) with x[0..8), in order.
__device__ __forceinline__ float dot8(uint4 q, const float4 *x, float acc) {
    const __half2 *h = (const __half2 *)&q;
    const float4 a = x[0], b = x[1];
    const float2 h0 = __half22float2(h[0]), h1 = __half22float2(h[1]), h2 = __half22float2(h[2]),
                 h3 = __half22float2(h[3]);
    acc = fmaf(h0.x, a.x, acc), acc = fmaf(h0.y, a.y, acc), acc = fmaf(h1.x, a.z, acc);
    acc = fmaf(h1.y, a.w, acc), acc = fmaf(h2.x, b.x, acc), acc = fmaf(h2.y, b.y, acc);
    acc = fmaf(h3.x, b.z, acc), acc = fmaf(h3.y, b.w, acc);
    return acc;
}

// Shared memory: full[MAX_STAGES], empty[MAX_STAGES] | sums [2 parities][2 (gate, up)]
// [MAX_TILE_ROWS rows][warps] | ring [n_stages][STAGE_BYTES], each part 128-byte aligned.
#define SUMS_BYTES (2 * 2 * CONSUMER_WARPS * CONSUMER_WARPS * 4)
struct smem_plan {
    int n_stages, ring_off, bytes;
};

static smem_plan plan_smem(int optin, int cap) {
    smem_plan p;
    p.ring_off = 128 + SUMS_BYTES;
    p.n_stages = (optin - p.ring_off) / STAGE_BYTES;
    if (p.n_stages > MAX_STAGES) p.n_stages = MAX_STAGES;
    if (cap > 0 && p.n_stages > cap) p.n_stages = cap;
    p.bytes = p.ring_off + p.n_stages * STAGE_BYTES;
    return p;
}

template <int MODE>
__global__ void __launch_bounds__(THREADS, 1)
    chain_kernel(const product *ps, int n_prod, unsigned *done, smem_plan pl) {
    extern __shared__ __align__(128) unsigned char smem[];
    uint64_t *full = (uint64_t *)smem, *empty = full + MAX_STAGES;
    float *sums = (float *)(smem + 128);
    unsigned char *ring = smem + pl.ring_off;
    const int NS = pl.n_stages, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int G = gridDim.x, b = blockIdx.x;
    if (threadIdx.x == 0) {
        for (int s = 0; s < NS; s++) mbar_init(&full[s], 1), mbar_init(&empty[s], CONSUMER_WARPS);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp == CONSUMER_WARPS) { // the producer
        if (lane != 0) return;
        int it = 0;
        for (int p = 0; p < n_prod; p++) {
            const product P = ps[p];
            const int r0 = (int)((int64_t)P.N * b / G), r1 = (int)((int64_t)P.N * (b + 1) / G);
            const int R = tile_rows(P.K, P.epi), row_bytes = P.K * 2;
            for (int r = r0; r < r1; r += R, it++) {
                const int slot = it % NS, use = it / NS, nr = min(R, r1 - r);
                if (use > 0) mbar_wait(&empty[slot], (use - 1) & 1);
                unsigned char *dst = ring + slot * STAGE_BYTES;
                mbar_expect(&full[slot], nr * row_bytes * (P.epi == EPI_GLU ? 2 : 1));
                for (int i = 0; i < nr; i++) {
                    bulk_copy(dst + i * row_bytes, P.w + (size_t)(r + i) * P.ld, row_bytes, &full[slot]);
                    if (P.epi == EPI_GLU)
                        bulk_copy(dst + (R + i) * row_bytes, P.w2 + (size_t)(r + i) * P.ld, row_bytes, &full[slot]);
                }
            }
        }
        return;
    }

    // The consumers: warp w owns the 16-byte pieces [w * wv, (w + 1) * wv) of every row of a
    // product, lane l the pieces l, l + 32, ... of those, whose x it holds in registers for
    // the whole product; a stage's rows each give one partial sum a warp, added in warp order
    // by the thread of the block's row (which also holds the row's residual for +=).
    const int tid = threadIdx.x;
    int it = 0, parity = 0;
    product P = ps[0];
    for (int p = 0; p < n_prod; p++) {
        const product next = ps[p + 1 < n_prod ? p + 1 : p];
        const int r0 = (int)((int64_t)P.N * b / G), r1 = (int)((int64_t)P.N * (b + 1) / G);
        const int R = tile_rows(P.K, P.epi), row_bytes = P.K * 2;
        const int n_vec = P.K / 8, wv = (n_vec + CONSUMER_WARPS - 1) / CONSUMER_WARPS, v0 = warp * wv + lane,
                  v1 = min(n_vec, (warp + 1) * wv);
        const bool glu = P.epi == EPI_GLU;
        float4 xr[2 * LANE_PIECES];
        float res = 0.0f;
        if (MODE != MODE_STREAM) {
            if (MODE == MODE_CHAIN && p > 0) {
                if (lane == 0)
                    while (ld_acquire(&done[p - 1]) < (unsigned)G) {
                    }
                __syncwarp();
            }
#pragma unroll
            for (int j = 0; j < LANE_PIECES; j++)
                if (v0 + 32 * j < v1) {
                    xr[2 * j] = __ldcg((const float4 *)P.in + 2 * (v0 + 32 * j));
                    xr[2 * j + 1] = __ldcg((const float4 *)P.in + 2 * (v0 + 32 * j) + 1);
                }
            if (P.epi == EPI_ADD && tid < r1 - r0) res = __ldcg(P.out + r0 + tid);
        }
        for (int r = r0; r < r1; r += R, it++) {
            const int slot = it % NS, nr = min(R, r1 - r);
            float *sp = sums + parity * 2 * CONSUMER_WARPS * CONSUMER_WARPS;
            mbar_wait(&full[slot], (it / NS) & 1);
            if (MODE != MODE_STREAM) {
                const unsigned char *st = ring + slot * STAGE_BYTES;
                float a[CONSUMER_WARPS], u[CONSUMER_WARPS];
#pragma unroll
                for (int i = 0; i < CONSUMER_WARPS; i++) {
                    a[i] = u[i] = 0.0f;
                    if (i >= nr) continue;
                    const uint4 *wg = (const uint4 *)(st + i * row_bytes), *wu = (const uint4 *)(st + (R + i) * row_bytes);
#pragma unroll
                    for (int j = 0; j < LANE_PIECES; j++)
                        if (v0 + 32 * j < v1) {
                            a[i] = dot8(wg[v0 + 32 * j], &xr[2 * j], a[i]);
                            if (glu) u[i] = dot8(wu[v0 + 32 * j], &xr[2 * j], u[i]);
                        }
                }
#pragma unroll
                for (int i = 0; i < CONSUMER_WARPS; i++) {
                    if (i >= nr) continue;
#pragma unroll
                    for (int off = 16; off > 0; off >>= 1) {
                        a[i] += __shfl_xor_sync(0xffffffffu, a[i], off);
                        if (glu) u[i] += __shfl_xor_sync(0xffffffffu, u[i], off);
                    }
                    if (lane == 0) sp[i * CONSUMER_WARPS + warp] = a[i], sp[(CONSUMER_WARPS + i) * CONSUMER_WARPS + warp] = u[i];
                }
            }
            __syncwarp();
            if (lane == 0) mbar_arrive(&empty[slot]);
            if (MODE == MODE_STREAM) continue;
            consumers_sync();
            const int i = tid - (r - r0);
            if (i >= 0 && i < nr) {
                float sa = 0.0f, su = 0.0f;
                for (int w = 0; w < CONSUMER_WARPS; w++)
                    sa += sp[i * CONSUMER_WARPS + w], su += sp[(CONSUMER_WARPS + i) * CONSUMER_WARPS + w];
                P.out[r + i] = glu ? silu(sa) * su : P.epi == EPI_ADD ? res + sa : sa;
            }
            parity ^= 1;
        }
        if (MODE == MODE_CHAIN) {
            __threadfence();
            consumers_sync();
            if (tid == 0) atomicAdd(&done[p], 1u);
        }
        P = next;
    }
}

typedef void (*chain_fn)(const product *, int, unsigned *, smem_plan);
static const chain_fn CHAIN_KERNELS[N_MODES] = {chain_kernel<MODE_CHAIN>, chain_kernel<MODE_NO_WAIT>,
                                                chain_kernel<MODE_STREAM>};

int main(int argc, char **argv) {
    const dims d = parse_dims(argc, argv, "stream_chain_bench");
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    const double bytes = 2.0 * (double)layer_elems(d) * d.L;
    const int k_max = d.E > d.Q ? (d.E > d.F ? d.E : d.F) : (d.Q > d.F ? d.Q : d.F);
    const int n_max = d.QKV > d.F ? d.QKV : d.F;
    const char *cap = getenv("STAGES");
    const smem_plan pl = plan_smem((int)prop.sharedMemPerBlockOptin, cap ? atoi(cap) : 0);
    printf("%s: E=%d Q=%d QKV=%d F=%d, %d layers, %.2f GB of F16 weights a step; %d SMs, ring %d x %d KiB\n",
           prop.name, d.E, d.Q, d.QKV, d.F, d.L, bytes / 1e9, prop.multiProcessorCount, pl.n_stages,
           STAGE_BYTES / 1024);
    if (pl.n_stages < 2 || !tile_rows(d.F, EPI_STORE) || !tile_rows(d.Q, EPI_STORE) || !tile_rows(d.E, EPI_GLU) ||
        k_max > CONSUMER_WARPS * 32 * 8 * LANE_PIECES || n_max / prop.multiProcessorCount + 1 > CONSUMERS) {
        fprintf(stderr,
                "stream_chain_bench: a row does not fit a %d-byte stage, the ring has under 2 stages, K > %d or a "
                "block's rows > %d\n",
                STAGE_BYTES, CONSUMER_WARPS * 32 * 8 * LANE_PIECES, CONSUMERS);
        return 1;
    }
    layer *hl = alloc_layers(d);
    float *x, *qkv, *g;
    CHECK(cudaMalloc(&x, d.E * sizeof(float)));
    CHECK(cudaMalloc(&qkv, d.QKV * sizeof(float)));
    CHECK(cudaMalloc(&g, d.F * sizeof(float)));
    const int n_prod = 4 * d.L;
    product *hp = (product *)malloc(sizeof(product) * n_prod), *dp;
    for (int l = 0; l < d.L; l++) {
        hp[4 * l + 0] = {hl[l].qkv, NULL, x, qkv, d.QKV, d.E, d.E, EPI_STORE};
        hp[4 * l + 1] = {hl[l].o, NULL, qkv, x, d.E, d.Q, d.Q, EPI_ADD};
        hp[4 * l + 2] = {hl[l].gate, hl[l].up, x, g, d.F, d.E, d.E, EPI_GLU};
        hp[4 * l + 3] = {hl[l].down, NULL, g, x, d.E, d.F, d.F, EPI_ADD};
    }
    CHECK(cudaMalloc(&dp, sizeof(product) * n_prod));
    CHECK(cudaMemcpy(dp, hp, sizeof(product) * n_prod, cudaMemcpyHostToDevice));
    unsigned *done;
    CHECK(cudaMalloc(&done, n_prod * sizeof(unsigned)));
    float *x0 = (float *)malloc(d.E * sizeof(float)), *x_sep = (float *)malloc(d.E * sizeof(float)),
          *x_a = (float *)malloc(d.E * sizeof(float)), *x_b = (float *)malloc(d.E * sizeof(float));
    for (int i = 0; i < d.E; i++) x0[i] = (float)rand() / RAND_MAX - 0.5f;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    step_separate(s, hl, d, x, qkv, g);
    CHECK(cudaStreamEndCapture(s, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaMemcpy(x, x0, d.E * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaMemcpyAsync(x_sep, x, d.E * sizeof(float), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    const double us_sep = graph_us(exec, s, REPS);
    printf("| variant | us/layer | GB/s | %% of copy | max |x - x_sep| / max |x_sep| | chain twice bitwise |\n"
           "|---|---:|---:|---:|---:|---|\n");
    printf("| separate (graph of %d kernels) | %.2f | %.0f | %.0f%% | - | - |\n", n_prod, us_sep / d.L,
           bytes / (us_sep * 1e-6) / 1e9, 100.0 * bytes / (us_sep * 1e-6) / 1e9 / COPY_GBS);

    const char *only = getenv("MODE"); // one mode only (for a profiler)
    for (int m = 0; m < N_MODES; m++) {
        if (only && atoi(only) != m) continue;
        CHECK(cudaFuncSetAttribute(CHAIN_KERNELS[m], cudaFuncAttributeMaxDynamicSharedMemorySize, pl.bytes));
        CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        CHECK(cudaMemsetAsync(done, 0, n_prod * sizeof(unsigned), s));
        CHAIN_KERNELS[m]<<<prop.multiProcessorCount, THREADS, pl.bytes, s>>>(dp, n_prod, done, pl);
        CHECK(cudaGetLastError());
        CHECK(cudaStreamEndCapture(s, &graph));
        CHECK(cudaGraphInstantiate(&exec, graph, 0));
        double err = 0.0, scale = 0.0;
        bool same = true;
        if (m == MODE_CHAIN) {
            float *runs[2] = {x_a, x_b};
            for (int rep = 0; rep < 2; rep++) {
                CHECK(cudaMemcpy(x, x0, d.E * sizeof(float), cudaMemcpyHostToDevice));
                CHECK(cudaGraphLaunch(exec, s));
                CHECK(cudaMemcpyAsync(runs[rep], x, d.E * sizeof(float), cudaMemcpyDeviceToHost, s));
                CHECK(cudaStreamSynchronize(s));
            }
            same = memcmp(x_a, x_b, d.E * sizeof(float)) == 0;
            for (int i = 0; i < d.E; i++) {
                err = fmax(err, fabs((double)x_a[i] - x_sep[i]));
                scale = fmax(scale, fabs((double)x_sep[i]));
            }
        }
        const double us = graph_us(exec, s, REPS);
        char err_s[32] = "-";
        if (m == MODE_CHAIN) snprintf(err_s, sizeof err_s, "%.2e", err / scale);
        printf("| %s | %.2f | %.0f | %.0f%% | %s | %s |\n", MODE_NAME[m], us / d.L, bytes / (us * 1e-6) / 1e9,
               100.0 * bytes / (us * 1e-6) / 1e9 / COPY_GBS, err_s, m == MODE_CHAIN ? (same ? "yes" : "NO") : "-");
    }
    return 0;
}
