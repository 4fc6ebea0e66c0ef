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
//       scope) and stage the product's input vector in shared memory (two planes, so that a
//       warp's reads are conflict-free); then reduce each stage (R rows over the warps in
//       groups of ROWS_PER_WARP, the rest of the warps splitting a group's K into segments),
//       leave each warp's sums in the stage's slot and move on: no block barrier a stage.
//   epilogue warp: for each stage, once its consumers have left their sums, adds a row's
//       segment sums in order, applies the epilogue (store, += with the residual it read at
//       the product's start, or SwiGLU), stores, releases the stage to the producer, and at a
//       product's end raises its counter.
//   Earlier forms: 284ed76 (x in one plane: 2-way bank conflicts; the residual read from L2
//   inside the stage loop), 732dffa (x in registers and every warp a K-segment of every
//   row: 8 shuffle trees a stage a warp, twice the instructions, half the speed), 9d40ea5
//   (the consumers' own epilogue behind a block barrier every stage: 12% of the stall
//   samples at that barrier, the consumers alone slower than the ring). Not kept either:
//   each warp waiting for and holding in registers only its own segment of the input (16
//   pollers an SM, the staged input spilled: 5-7x slower with flags).
// Block b owns rows [N*b/G, N*(b+1)/G) of each product (G blocks, one an SM). Modes of the
// same kernel: chain (the real dependencies), no-wait (the counters skipped: what the waits
// cost; the values race), stream (consumers release each stage unread: the ring's
// streaming ceiling), compute (the producer copies nothing: the consumers' own rate) and
// flags (no counters: every output is stored as one 8-byte word of value and step flag, and
// the next product's consumers re-read their pieces of it until every flag is current, so
// that a boundary is one store and one read, not a fence, a counter, a poll and a read).
// Printed: microseconds a layer, weight bytes over that time against a device copy, and for
// chain and flags the largest difference from the separate kernels' x after one step
// relative to max |x| (the sums are split differently: not bitwise) and whether two runs
// agree bit for bit (they must: fixed order). Results: bench/stream-chain-h200.md.
//
// Build: nvcc -O3 -std=c++17 -arch=sm_90 bench/kernels/stream_chain_bench.cu -o stream_chain_bench
// Run:   stream_chain_bench [E Q KV F L]   (default llama-3.2-1b: 2048 2048 512 8192 16)
//        STAGES=n caps the ring's stages (default: as many as shared memory holds, at most 8);
//        MODE=m runs that mode only (0 chain, 1 no-wait, 2 stream, 3 compute, 4 flags; for a
//        profiler). Build-time knobs (-D): STAGE_BYTES, CONSUMER_WARPS, ROWS_PER_WARP,
//        PROBE_PIECE_STEP, RETRY_NS, NORMS, TIMELINE (each described where it is defined).
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "standalone_layer.cuh"

#ifndef STAGE_BYTES
#define STAGE_BYTES 32768
#endif
#ifndef CONSUMER_WARPS
#define CONSUMER_WARPS 16 // a power of two (8 and 16 measured: 16 is faster)
#endif
#define CONSUMERS (CONSUMER_WARPS * 32)
#define EPILOGUE_WARP CONSUMER_WARPS
#define PRODUCER_WARP (CONSUMER_WARPS + 1)
#define THREADS (CONSUMERS + 64)
#define MAX_STAGES 8
#define MAX_BLOCK_ROWS 256 // a block's rows of one product
// TIMELINE=1: chain and flags modes record, per product and block, when its consumers began
// to wait for the input, when they had it, and when its epilogue stored its last output
// (globaltimer), and print where a boundary's time goes.
#ifndef TIMELINE
#define TIMELINE 0
#endif
__device__ unsigned long long *g_timeline; // [3][n_prod][G]: wait, start, end

__device__ __forceinline__ void timeline_mark(int what, int p, int n_prod) {
#if TIMELINE
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    g_timeline[((size_t)what * n_prod + p) * gridDim.x + blockIdx.x] = t;
#endif
}

// A waiting thread's pause between two reads of its flagged inputs (0: none).
#ifndef RETRY_NS
#define RETRY_NS 0
#endif
// NORMS=1: q/k/v and gate/up take an RMSNorm of their input first, as in a real layer (the
// consumers square the input as they stage it; the epilogue applies the scale). The
// separate kernels have no norms then: compare chain with flags (bitwise), not with them.
#ifndef NORMS
#define NORMS 0
#endif
#define NORM_EPS 1e-5f
#define MAX_K 12288          // flags mode: a consumer thread holds K / 2 / CONSUMERS 16-byte pieces
#define FLAG_PIECES ((MAX_K / 2 + CONSUMERS - 1) / CONSUMERS)
#ifndef ROWS_PER_WARP
// rows of a stage a consumer warp reduces against one read of x (a power of two; 2 and 4
// measured slower than 1)
#define ROWS_PER_WARP 1
#endif
// A timing probe only: the consumers reduce every PROBE_PIECE_STEP-th round of pieces (the
// values are wrong for a step above 1), to see what faster consumers would make of the
// dependencies.
#ifndef PROBE_PIECE_STEP
#define PROBE_PIECE_STEP 1
#endif
// The time a waiting thread may be suspended before mbarrier.try_wait returns (the hardware
// wakes it when the phase completes), so that a spinning waiter takes fewer issue slots.
#define WAIT_SUSPEND_NS 10000000
#define REPS 20

enum { MODE_CHAIN, MODE_NO_WAIT, MODE_STREAM, MODE_COMPUTE, MODE_FLAGS, N_MODES };
static const char *MODE_NAME[] = {"chain (dependencies waited)", "no-wait (dependencies skipped)",
                                  "stream (stages released unread)", "compute (no copies, no waits)",
                                  "flags (dependencies as flagged values)"};

// One product as the kernel walks it: out[n] (epi) W[n] . in, W [N][K] at row stride ld.
//
// flags mode: the product also writes its outputs as (step flag << 32 | value bits), one
// 8-byte store each (fout), and the next product reads those (fin) instead of `in`.
struct product {
    const __half *w, *w2; // w2: the up weight of the gated product
    const float *in;
    float *out;
    unsigned long long *fout;
    const unsigned long long *fin; // NULL: the step's input, plain
    int N, K, ld, epi;
    // NORMS=1, q/k/v and gate/up: out = epi((W (in * norm_w)) * rsqrt(mean(in^2) + eps))
    const float *norm_w;
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
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(smem_addr(bar)), "r"(parity), "r"(WAIT_SUSPEND_NS)
                     : "memory");
}

__device__ __forceinline__ void bulk_copy(void *dst, const void *src, unsigned bytes, uint64_t *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
}

__device__ __forceinline__ ulonglong2 ld_volatile_v2(const unsigned long long *p) {
    ulonglong2 v;
    asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void st_volatile(unsigned long long *p, unsigned long long v) {
    asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// The consumer warps' barrier (the producer and epilogue warps never join it).
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, %0;" ::"n"(CONSUMERS) : "memory"); }

// Shared memory: full, ready, empty [MAX_STAGES] barriers | sums [MAX_STAGES][2 (gate, up)
// [warps], then the product's norm scale] | residual [MAX_BLOCK_ROWS], the consumers' sums
// of squares [warps] | x [k_max] floats | ring [n_stages][STAGE_BYTES], each part 128-byte
// aligned.
#define BARS_BYTES 256
#define SLOT_SUMS (CONSUMER_WARPS * ROWS_PER_WARP) // a stage's sums of one kind (gate or up)
#define SLOT_FLOATS (2 * SLOT_SUMS + 4)            // and the scale at [2 * SLOT_SUMS]
#define SUMS_BYTES ((MAX_STAGES * SLOT_FLOATS * 4 + 127) / 128 * 128)
#define RESID_BYTES (MAX_BLOCK_ROWS * 4 + 128)
struct smem_plan {
    int n_stages, x_off, ring_off, bytes;
};

static smem_plan plan_smem(int k_max, int optin, int cap) {
    smem_plan p;
    p.x_off = BARS_BYTES + SUMS_BYTES + RESID_BYTES;
    p.ring_off = p.x_off + (k_max * 4 + 127) / 128 * 128;
    p.n_stages = (optin - p.ring_off) / STAGE_BYTES;
    if (p.n_stages > MAX_STAGES) p.n_stages = MAX_STAGES;
    if (cap > 0 && p.n_stages > cap) p.n_stages = cap;
    p.bytes = p.ring_off + p.n_stages * STAGE_BYTES;
    return p;
}

// Block b's rows [r0, r1) of product P (G blocks): every role walks the same ones.
struct row_span {
    int r0, r1;
};
__device__ __forceinline__ row_span block_rows(const product &P, int b, int G) {
    return {(int)((int64_t)P.N * b / G), (int)((int64_t)P.N * (b + 1) / G)};
}

// The ring position a role walks: stage slot, and the parity of its round through the ring.
struct ring_pos {
    int slot, round;
    __device__ void next(int n_stages) {
        if (++slot == n_stages) slot = 0, round++;
    }
};

template <int MODE>
__global__ void __launch_bounds__(THREADS, 1)
    chain_kernel(const product *ps, int n_prod, unsigned *done, unsigned *epoch, smem_plan pl) {
    extern __shared__ __align__(128) unsigned char smem[];
    uint64_t *full = (uint64_t *)smem, *ready = full + MAX_STAGES, *empty = ready + MAX_STAGES;
    float *sums = (float *)(smem + BARS_BYTES), *resid = (float *)(smem + BARS_BYTES + SUMS_BYTES);
    float *sq = resid + MAX_BLOCK_ROWS; // [CONSUMER_WARPS]
    float *xs = (float *)(smem + pl.x_off);
    unsigned char *ring = smem + pl.ring_off;
    const int NS = pl.n_stages, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int G = gridDim.x, b = blockIdx.x;
    if (threadIdx.x == 0) {
        for (int s = 0; s < NS; s++)
            mbar_init(&full[s], 1), mbar_init(&ready[s], CONSUMER_WARPS), mbar_init(&empty[s], 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    ring_pos at = {0, 0};
    // flags mode: this launch's flags are epoch[0] * n_prod + p + 1 (product p's outputs); the
    // last block to finish advances epoch[0]. Every block reads it before any block can
    // finish: a block's last product needs every block's outputs of the one before.
    const unsigned flag0 = MODE == MODE_FLAGS ? *(volatile unsigned *)epoch * (unsigned)n_prod + 1u : 0u;

    if (warp == PRODUCER_WARP) {
        if (lane != 0) return;
        for (int p = 0; p < n_prod; p++) {
            const product P = ps[p];
            const row_span rs = block_rows(P, b, G);
            const int r0 = rs.r0, r1 = rs.r1;
            const int R = tile_rows(P.K, P.epi), row_bytes = P.K * 2;
            for (int r = r0; r < r1; r += R, at.next(NS)) {
                const int nr = min(R, r1 - r);
                if (at.round > 0) mbar_wait(&empty[at.slot], (at.round - 1) & 1);
                if (MODE == MODE_COMPUTE) {
                    mbar_arrive(&full[at.slot]);
                    continue;
                }
                unsigned char *dst = ring + at.slot * STAGE_BYTES;
                mbar_expect(&full[at.slot], nr * row_bytes * (P.epi == EPI_GLU ? 2 : 1));
                for (int i = 0; i < nr; i++) {
                    bulk_copy(dst + i * row_bytes, P.w + (size_t)(r + i) * P.ld, row_bytes, &full[at.slot]);
                    if (P.epi == EPI_GLU)
                        bulk_copy(dst + (R + i) * row_bytes, P.w2 + (size_t)(r + i) * P.ld, row_bytes,
                                  &full[at.slot]);
                }
            }
        }
        return;
    }

    if (warp == EPILOGUE_WARP) {
        // Each stage's rows once its consumers have left their sums: the segments' sums added
        // in order, the epilogue applied and stored, the stage released to the producer; at
        // the end of a product, its counter raised. A += row's residual is this block's own
        // output of an earlier product (o and down split E's rows alike), read at the start.
        for (int p = 0; p < n_prod; p++) {
            const product P = ps[p];
            const row_span rs = block_rows(P, b, G);
            const int r0 = rs.r0, r1 = rs.r1;
            const int R = tile_rows(P.K, P.epi), S = CONSUMER_WARPS / (R / min(ROWS_PER_WARP, R));
            if (MODE != MODE_STREAM && P.epi == EPI_ADD)
                for (int i = lane; i < r1 - r0; i += 32) resid[i] = __ldcg(P.out + r0 + i);
            __syncwarp();
            for (int r = r0; r < r1; r += R, at.next(NS)) {
                mbar_wait(&ready[at.slot], at.round & 1);
                const float *sp = sums + at.slot * SLOT_FLOATS;
                if (MODE != MODE_STREAM && lane < min(R, r1 - r)) {
                    float sa = 0.0f, su = 0.0f;
                    for (int j = 0; j < S; j++) sa += sp[lane * S + j], su += sp[SLOT_SUMS + lane * S + j];
                    if (NORMS && P.norm_w) sa *= sp[2 * SLOT_SUMS], su *= sp[2 * SLOT_SUMS];
                    const float y = P.epi == EPI_GLU   ? silu(sa) * su
                                    : P.epi == EPI_ADD ? resid[r - r0 + lane] + sa
                                                       : sa;
                    P.out[r + lane] = y;
                    if (MODE == MODE_FLAGS)
                        st_volatile(P.fout + r + lane, (unsigned long long)(flag0 + p) << 32 | __float_as_uint(y));
                }
                __syncwarp();
                if (lane == 0) mbar_arrive(&empty[at.slot]);
            }
            if ((MODE == MODE_FLAGS || MODE == MODE_CHAIN) && lane == 0) timeline_mark(2, p, n_prod);
            if (MODE == MODE_CHAIN) {
                __syncwarp();
                if (lane == 0) __threadfence(), atomicAdd(&done[p], 1u);
            }
        }
        if (MODE == MODE_FLAGS && lane == 0 && atomicAdd(&epoch[1], 1u) == (unsigned)G - 1) {
            epoch[1] = 0;
            atomicAdd(&epoch[0], 1u);
        }
        return;
    }

    // The consumers: a stage's R rows in groups of RW = min(ROWS_PER_WARP, R), S =
    // CONSUMER_WARPS / (R / RW) segments a group (warp w: group w / S, segment w % S; lane l
    // the segment's 16-byte pieces l, l + 32, ..., each read of x used for the group's RW
    // rows), x from shared memory in two planes (piece v's elements 0-3 at plane 0 [v], 4-7
    // at plane 1 [v]: a warp's reads of consecutive pieces are conflict-free); each warp
    // leaves its sums in the stage's slot and moves on (no block barrier a stage).
    const int tid = threadIdx.x;
    for (int p = 0; p < n_prod; p++) {
        const product P = ps[p];
        const row_span rs = block_rows(P, b, G);
        const int r0 = rs.r0, r1 = rs.r1;
        const int R = tile_rows(P.K, P.epi), row_bytes = P.K * 2, RW = min(ROWS_PER_WARP, R);
        const int S = CONSUMER_WARPS / (R / RW), row0 = warp / S * RW, seg = warp % S;
        const int n_vec = P.K / 8, seg_vec = (n_vec + S - 1) / S;
        const bool glu = P.epi == EPI_GLU;
        float ss = 0.0f, scale = 1.0f; // norm_w: the sum of squares of the input, the norm's scale
        if (MODE != MODE_STREAM) {
            // every consumer is done with the last product's x (and sq[]); then its input is complete
            if ((MODE == MODE_FLAGS || MODE == MODE_CHAIN) && tid == 0) timeline_mark(0, p, n_prod);
            if (MODE == MODE_CHAIN && p > 0 && tid == 0)
                while (ld_acquire(&done[p - 1]) < (unsigned)G) {
                }
            consumers_sync();
            if (MODE == MODE_FLAGS && P.fin) {
                // every piece (two values) this thread stages, re-read until both carry the
                // flag of the product before: no counter, no fence, one round trip when ready
                const unsigned want = flag0 + p - 1;
                ulonglong2 v[FLAG_PIECES];
                bool all;
                for (int attempt = 0;; attempt++) {
                    if (RETRY_NS && attempt) __nanosleep(RETRY_NS);
                    all = true;
#pragma unroll
                    for (int c = 0; c < FLAG_PIECES; c++)
                        if (tid + c * CONSUMERS < P.K / 2) v[c] = ld_volatile_v2(P.fin + 2 * (tid + c * CONSUMERS));
#pragma unroll
                    for (int c = 0; c < FLAG_PIECES; c++)
                        if (tid + c * CONSUMERS < P.K / 2 &&
                            ((unsigned)(v[c].x >> 32) != want || (unsigned)(v[c].y >> 32) != want))
                            all = false;
                    if (all) break;
                }
#pragma unroll
                for (int c = 0; c < FLAG_PIECES; c++) {
                    const int k = 2 * (tid + c * CONSUMERS);
                    if (k >= P.K) break;
                    float *dst = xs + (k & 4 ? P.K / 2 : 0) + (k >> 3) * 4 + (k & 3);
                    const float e0 = __uint_as_float((unsigned)v[c].x), e1 = __uint_as_float((unsigned)v[c].y);
                    const bool nw = NORMS && P.norm_w;
                    if (NORMS) ss = fmaf(e0, e0, ss), ss = fmaf(e1, e1, ss);
                    dst[0] = nw ? e0 * P.norm_w[k] : e0, dst[1] = nw ? e1 * P.norm_w[k + 1] : e1;
                }
            } else {
                for (int k = tid * 4; k < P.K; k += CONSUMERS * 4) {
                    float4 q = __ldcg((const float4 *)(P.in + k));
                    if (NORMS) {
                        ss = fmaf(q.x, q.x, ss), ss = fmaf(q.y, q.y, ss);
                        ss = fmaf(q.z, q.z, ss), ss = fmaf(q.w, q.w, ss);
                    }
                    if (NORMS && P.norm_w) {
                        const float4 n = *(const float4 *)(P.norm_w + k);
                        q.x *= n.x, q.y *= n.y, q.z *= n.z, q.w *= n.w;
                    }
                    *(float4 *)(xs + (k & 4 ? P.K / 2 : 0) + (k >> 3) * 4) = q;
                }
            }
            if (NORMS && P.norm_w) {
#pragma unroll
                for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
                if (lane == 0) sq[warp] = ss;
            }
            consumers_sync();
            if (NORMS && P.norm_w) { // every consumer the same sum, in warp order
                ss = 0.0f;
                for (int w = 0; w < CONSUMER_WARPS; w++) ss += sq[w];
                scale = rsqrtf(ss / (float)P.K + NORM_EPS);
            }
            if ((MODE == MODE_FLAGS || MODE == MODE_CHAIN) && tid == 0) timeline_mark(1, p, n_prod);
        }
        const float4 *x0 = (const float4 *)xs, *x1 = x0 + n_vec;
        for (int r = r0; r < r1; r += R, at.next(NS)) {
            mbar_wait(&full[at.slot], at.round & 1);
            const int nr = min(R, r1 - r);

            float a[ROWS_PER_WARP], u[ROWS_PER_WARP];
#pragma unroll
            for (int i = 0; i < ROWS_PER_WARP; i++) a[i] = u[i] = 0.0f;
            if (MODE != MODE_STREAM && row0 < nr) {
                const unsigned char *st = ring + at.slot * STAGE_BYTES;
                const int v1 = min(n_vec, (seg + 1) * seg_vec);
#pragma unroll 2
                for (int v = seg * seg_vec + lane; v < v1; v += 32 * PROBE_PIECE_STEP) {
                    const float4 xv[2] = {x0[v], x1[v]};
#pragma unroll
                    for (int i = 0; i < ROWS_PER_WARP; i++) {
                        if (i >= RW || row0 + i >= nr) break;
                        a[i] = dot8(((const uint4 *)(st + (row0 + i) * row_bytes))[v], xv[0], xv[1], a[i]);
                        if (glu) u[i] = dot8(((const uint4 *)(st + (R + row0 + i) * row_bytes))[v], xv[0], xv[1], u[i]);
                    }
                }
#pragma unroll
                for (int i = 0; i < ROWS_PER_WARP; i++) {
#pragma unroll
                    for (int off = 16; off > 0; off >>= 1) a[i] += __shfl_xor_sync(0xffffffffu, a[i], off);
                    if (glu)
#pragma unroll
                        for (int off = 16; off > 0; off >>= 1) u[i] += __shfl_xor_sync(0xffffffffu, u[i], off);
                }
            }
            if (lane == 0) {
                float *sp = sums + at.slot * SLOT_FLOATS;
#pragma unroll
                for (int i = 0; i < ROWS_PER_WARP; i++)
                    if (i < RW) sp[(row0 + i) * S + seg] = a[i], sp[SLOT_SUMS + (row0 + i) * S + seg] = u[i];
                if (NORMS && warp == 0) sp[2 * SLOT_SUMS] = scale;
            }
            __syncwarp();
            if (lane == 0) mbar_arrive(&ready[at.slot]);
        }
    }
}

static int cmp_u64(const void *a, const void *b) {
    const unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return x < y ? -1 : x > y;
}

// From one chain- or flags-mode step's timeline: per kind of product (its position in the layer),
// averaged over the layers but the first: the spread of the blocks' ends of the product
// before (max - median), then from its last end to the median block's wait start and input
// in hand, in microseconds.
static void print_timeline(const unsigned long long *d_tl, int n_prod, int G) {
    const size_t n = 3 * (size_t)n_prod * G;
    unsigned long long *t = (unsigned long long *)malloc(n * sizeof *t);
    unsigned long long *v = (unsigned long long *)malloc(G * sizeof *v);
    CHECK(cudaMemcpy(t, d_tl, n * sizeof *t, cudaMemcpyDeviceToHost));
    static const char *kind[4] = {"qkv (after down)", "o (after qkv)", "gate/up (after o)", "down (after gate/up)"};
    double spread[4] = {0}, to_wait[4] = {0}, to_start[4] = {0}, work[4] = {0};
    int cnt[4] = {0};
    for (int p = 4; p < n_prod; p++) {
        const unsigned long long *wait = t + (size_t)p * G, *start = t + ((size_t)n_prod + p) * G,
                                 *end_prev = t + ((size_t)2 * n_prod + p - 1) * G,
                                 *end = t + ((size_t)2 * n_prod + p) * G;
        unsigned long long last = 0;
        for (int b = 0; b < G; b++) last = end_prev[b] > last ? end_prev[b] : last;
        memcpy(v, end_prev, G * sizeof *v), qsort(v, G, sizeof *v, cmp_u64);
        const unsigned long long med_end_prev = v[G / 2];
        memcpy(v, wait, G * sizeof *v), qsort(v, G, sizeof *v, cmp_u64);
        const unsigned long long med_wait = v[G / 2];
        memcpy(v, start, G * sizeof *v), qsort(v, G, sizeof *v, cmp_u64);
        const unsigned long long med_start = v[G / 2];
        memcpy(v, end, G * sizeof *v), qsort(v, G, sizeof *v, cmp_u64);
        const int k = p % 4;
        spread[k] += (last - med_end_prev) * 1e-3, to_wait[k] += ((double)med_wait - (double)last) * 1e-3;
        to_start[k] += ((double)med_start - (double)last) * 1e-3;
        work[k] += ((double)v[G / 2] - (double)med_start) * 1e-3;
        cnt[k]++;
    }
    printf("| product | blocks' ends before: max - median | last end -> median wait start | last end -> median "
           "input in hand | input in hand -> median end |\n|---|---:|---:|---:|---:|\n");
    for (int k = 0; k < 4; k++)
        printf("| %s | %.2f | %.2f | %.2f | %.2f |\n", kind[k], spread[k] / cnt[k], to_wait[k] / cnt[k],
               to_start[k] / cnt[k],
               work[k] / cnt[k]);
    free(t), free(v);
}

typedef void (*chain_fn)(const product *, int, unsigned *, unsigned *, smem_plan);
static const chain_fn CHAIN_KERNELS[N_MODES] = {chain_kernel<MODE_CHAIN>, chain_kernel<MODE_NO_WAIT>,
                                                chain_kernel<MODE_STREAM>, chain_kernel<MODE_COMPUTE>,
                                                chain_kernel<MODE_FLAGS>};

int main(int argc, char **argv) {
    const dims d = parse_dims(argc, argv, "stream_chain_bench");
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    const double bytes = 2.0 * (double)layer_elems(d) * d.L;
    const int k_max = d.E > d.Q ? (d.E > d.F ? d.E : d.F) : (d.Q > d.F ? d.Q : d.F);
    const int n_max = d.QKV > d.F ? d.QKV : d.F;
    const char *cap = getenv("STAGES");
    const smem_plan pl = plan_smem(k_max, (int)prop.sharedMemPerBlockOptin, cap ? atoi(cap) : 0);
    printf("%s: E=%d Q=%d QKV=%d F=%d, %d layers, %.2f GB of F16 weights a step; %d SMs, ring %d x %d KiB\n",
           prop.name, d.E, d.Q, d.QKV, d.F, d.L, bytes / 1e9, prop.multiProcessorCount, pl.n_stages,
           STAGE_BYTES / 1024);
    if (pl.n_stages < 2 || !tile_rows(d.F, EPI_STORE) || !tile_rows(d.Q, EPI_STORE) || !tile_rows(d.E, EPI_GLU) ||
        n_max / prop.multiProcessorCount + 1 > MAX_BLOCK_ROWS || k_max > MAX_K) {
        fprintf(stderr,
                "stream_chain_bench: a row does not fit a %d-byte stage, the ring has under 2 stages, a block's "
                "rows > %d or K > %d\n",
                STAGE_BYTES, MAX_BLOCK_ROWS, MAX_K);
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
        hp[4 * l + 0] = {hl[l].qkv, NULL, x, qkv, NULL, NULL, d.QKV, d.E, d.E, EPI_STORE};
        hp[4 * l + 1] = {hl[l].o, NULL, qkv, x, NULL, NULL, d.E, d.Q, d.Q, EPI_ADD};
        hp[4 * l + 2] = {hl[l].gate, hl[l].up, x, g, NULL, NULL, d.F, d.E, d.E, EPI_GLU};
        hp[4 * l + 3] = {hl[l].down, NULL, g, x, NULL, NULL, d.E, d.F, d.F, EPI_ADD};
    }
    if (NORMS) { // norm weights near 1, two a layer
        float *hn = (float *)malloc(2 * (size_t)d.L * d.E * sizeof(float)), *dn;
        for (size_t i = 0; i < 2 * (size_t)d.L * d.E; i++) hn[i] = 0.9f + 0.2f * (float)rand() / RAND_MAX;
        CHECK(cudaMalloc(&dn, 2 * (size_t)d.L * d.E * sizeof(float)));
        CHECK(cudaMemcpy(dn, hn, 2 * (size_t)d.L * d.E * sizeof(float), cudaMemcpyHostToDevice));
        for (int l = 0; l < d.L; l++)
            hp[4 * l].norm_w = dn + (size_t)2 * l * d.E, hp[4 * l + 2].norm_w = dn + (size_t)(2 * l + 1) * d.E;
        free(hn);
    }
    // flags mode: each product's outputs flagged in a buffer of their own (zero: no flag yet)
    size_t n_flagged = 0;
    for (int p = 0; p < n_prod; p++) n_flagged += hp[p].N;
    unsigned long long *flagged;
    CHECK(cudaMalloc(&flagged, n_flagged * sizeof(unsigned long long)));
    CHECK(cudaMemset(flagged, 0, n_flagged * sizeof(unsigned long long)));
    for (int p = 0; p < n_prod; p++) {
        hp[p].fout = flagged, flagged += hp[p].N;
        hp[p].fin = p > 0 ? hp[p - 1].fout : NULL;
    }
    unsigned *epoch;
    CHECK(cudaMalloc(&epoch, 2 * sizeof(unsigned)));
    CHECK(cudaMemset(epoch, 0, 2 * sizeof(unsigned)));
    const int G = prop.multiProcessorCount;
    unsigned long long *timeline = NULL;
    if (TIMELINE) {
        CHECK(cudaMalloc(&timeline, 3 * (size_t)n_prod * G * sizeof(unsigned long long)));
        CHECK(cudaMemcpyToSymbol(g_timeline, &timeline, sizeof(timeline)));
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

    const double us_sep = time_separate(s, hl, d, x, qkv, g, x0, x_sep, REPS);
    if (NORMS) printf("NORMS=1: chain's difference is from the separate kernels (no norms); flags' from chain\n");
    printf("| variant | us/layer | GB/s | %% of copy | max |x - x_sep| / max |x_sep| | chain twice bitwise |\n"
           "|---|---:|---:|---:|---:|---|\n");
    printf("| separate (graph of %d kernels) | %.2f | %.0f | %.0f%% | - | - |\n", n_prod, us_sep / d.L,
           bytes / (us_sep * 1e-6) / 1e9, 100.0 * bytes / (us_sep * 1e-6) / 1e9 / COPY_GBS);

    const char *only = getenv("MODE"); // one mode only (for a profiler)
    for (int m = 0; m < N_MODES; m++) {
        if (only && atoi(only) != m) continue;
        CHECK(cudaFuncSetAttribute(CHAIN_KERNELS[m], cudaFuncAttributeMaxDynamicSharedMemorySize, pl.bytes));
        double err = 0.0, scale = 0.0;
        bool same = true;
        const bool checked = m == MODE_CHAIN || m == MODE_FLAGS;
        auto issue = [&](cudaStream_t c) {
            CHECK(cudaMemsetAsync(done, 0, n_prod * sizeof(unsigned), c));
            CHAIN_KERNELS[m]<<<prop.multiProcessorCount, THREADS, pl.bytes, c>>>(dp, n_prod, done, epoch, pl);
            CHECK(cudaGetLastError());
        };
        auto check = [&](cudaGraphExec_t e) { // twice from x0: bitwise repeatable, and against the separate x
            if (!checked) return;
            run_from(e, s, x, x0, x_a, d.E);
            run_from(e, s, x, x0, x_b, d.E);
            same = memcmp(x_a, x_b, d.E * sizeof(float)) == 0;
            for (int i = 0; i < d.E; i++) {
                err = fmax(err, fabs((double)x_a[i] - x_sep[i]));
                scale = fmax(scale, fabs((double)x_sep[i]));
            }
            // NORMS: the separate kernels have none; chain's x becomes the reference for flags
            if (NORMS && m == MODE_CHAIN) memcpy(x_sep, x_a, d.E * sizeof(float));
            if (TIMELINE) print_timeline(timeline, n_prod, G);
        };
        const double us = captured_us(s, REPS, issue, check);
        char err_s[32] = "-";
        if (checked) snprintf(err_s, sizeof err_s, "%.2e", err / scale);
        printf("| %s | %.2f | %.0f | %.0f%% | %s | %s |\n", MODE_NAME[m], us / d.L, bytes / (us * 1e-6) / 1e9,
               100.0 * bytes / (us * 1e-6) / 1e9 / COPY_GBS, err_s, checked ? (same ? "yes" : "NO") : "-");
    }
    return 0;
}
