// Can a thread-block cluster remove the q/k/v -> attention boundary of a decode layer? A
// standalone experiment (no stride library code) for issue 5, on a dense layer's decode step
// (standalone_layer.cuh's products; attention without norms or rope, which both forms
// would do alike):
//
//   qkv = Wqkv x;  a = attention(q, K/V cache + the new k, v);  x += Wo a;
//   g = silu(Wg x) * (Wu x);  x += Wd g
//
// separate: q/k/v as one kernel (one warp a row), then an attention kernel (one block a kv
//     head: q, k, v read back through L2, its cache rows loaded, then the math below), then
//     o, as a decode step records them today.
// cluster:  q/k/v and attention as one kernel: a cluster of CL_CLUSTER blocks a kv head (one
//     block an SM, 1,024 threads); block b of head h computes rows b, b + CL_CLUSTER, ... of
//     that head's q, k and v rows (G q heads, then k, then v: (G + 2) D rows) and stores
//     each into the leader block's shared memory (distributed shared memory); the leader
//     has meanwhile asked for its head's cache rows (cp.async). One cluster barrier, then the
//     leader alone does the attention from shared memory (no write of q/k/v to global
//     memory, no second kernel); then o as a kernel.
// cluster + o: the same grid with more clusters whose blocks take the output projection
//     (layer_front): they copy their rows of Wo into shared memory at once, wait for every
//     head's flag, and add Wo a into x.
// The rest of the layer (gate/up, down) is the same kernels in every form, so that the
// difference is the front in a real sequence of weights streaming from HBM.
//
// Attention math (every form): scores s[g][t] = q_g . k_t / sqrt(D) (one thread a (g, t)),
// softmax a warp a row, a[g][d] = sum_t p[g][t] v_t[d] (one thread a (g, d)); the same code
// and order in every form, so x after a step is the same bits (checked).
//
// Build: nvcc -O3 -std=c++17 -arch=sm_90 bench/kernels/cluster_attention_bench.cu -o cluster_attention_bench
// Run:   cluster_attention_bench   (llama-3.2-1b and qwen3-1.7b shapes, depths 64 and 128;
//        results: bench/cluster-attention-h200.md)
#include <cooperative_groups.h>
#include <math.h>
#include <string.h>

#include "standalone_layer.cuh"

namespace cg = cooperative_groups;

#define CL_THREADS 1024
#define CL_CLUSTER 8 // blocks a cluster (16: only 7 clusters of them were resident at once on the H200)
#define ATT_THREADS 256 // the separate attention kernel's block
#define MAX_KEYS 256    // cache rows a head's attention holds in shared memory
#define REPS 50
#define ROWS_A_WARP 4 // (G + 2) D <= ROWS_A_WARP * CB * 32 (checked on the host)

struct attn_shape {
    const char *name;
    int E, Hq, Hk, D, F, L;
};

// Shared memory of one head's attention: q [G][D], the new k and v [D] (floats), K and V
// rows [n][D] (F16), scores [G][n].
struct attn_smem {
    float *q, *kn, *vn, *p;
    __half *k, *v;
};
__host__ __device__ static size_t attn_smem_bytes(int G, int D, int n) {
    return (size_t)(G * D + 2 * D) * 4 + (size_t)2 * n * D * 2 + (size_t)G * n * 4;
}
__device__ static attn_smem attn_carve(char *base, int G, int D, int n) {
    attn_smem s;
    s.q = (float *)base;
    s.kn = s.q + G * D;
    s.vn = s.kn + D;
    s.k = (__half *)(s.vn + D);
    s.v = s.k + (size_t)n * D;
    s.p = (float *)(s.v + (size_t)n * D);
    return s;
}

// Cache rows [0, pos) of head h into s.k, s.v by 16-byte cp.async (committed, not waited).
__device__ static void attn_fetch_cache(const attn_smem &s, const __half *kc, const __half *vc, int Hk, int h, int D,
                                        int pos) {
    const int pieces = D / 8; // 16-byte pieces a row
    for (int i = threadIdx.x; i < 2 * pos * pieces; i += blockDim.x) {
        const int which = i / (pos * pieces), j = i % (pos * pieces), t = j / pieces, c = j % pieces;
        const __half *src = (which ? vc : kc) + ((size_t)t * Hk + h) * D + c * 8;
        __half *dst = (which ? s.v : s.k) + (size_t)t * D + c * 8;
        const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// With q, kn, vn in shared memory and the cache rows fetched: stores the new row at pos
// (cache and s), then out[g*D + d] for the G query heads of kv head h. Every thread calls it.
__device__ static void attn_math(const attn_smem &s, __half *kc, __half *vc, int Hk, int h, int G, int D, int pos,
                                 float *out) {
    asm volatile("cp.async.wait_all;" ::: "memory");
    const int n = pos + 1;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        const __half k = __float2half_rn(s.kn[d]), v = __float2half_rn(s.vn[d]);
        s.k[(size_t)pos * D + d] = k, s.v[(size_t)pos * D + d] = v;
        kc[((size_t)pos * Hk + h) * D + d] = k, vc[((size_t)pos * Hk + h) * D + d] = v;
    }
    __syncthreads();
    const float scale = rsqrtf((float)D);
    for (int i = threadIdx.x; i < G * n; i += blockDim.x) {
        const int g = i / n, t = i % n;
        const float *q = s.q + g * D;
        const __half2 *k = (const __half2 *)(s.k + (size_t)t * D);
        float acc = 0.0f;
        for (int d = 0; d < D / 2; d++) {
            const float2 kf = __half22float2(k[(d + t) % (D / 2)]); // rotated start: no bank conflicts
            const int dd = 2 * ((d + t) % (D / 2));
            acc = fmaf(q[dd], kf.x, acc), acc = fmaf(q[dd + 1], kf.y, acc);
        }
        s.p[g * n + t] = acc * scale;
    }
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int g = warp; g < G; g += blockDim.x / 32) {
        float m = -INFINITY;
        for (int t = lane; t < n; t += 32) m = fmaxf(m, s.p[g * n + t]);
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        float l = 0.0f;
        for (int t = lane; t < n; t += 32) {
            const float e = __expf(s.p[g * n + t] - m);
            s.p[g * n + t] = e, l += e;
        }
        l = warp_sum(l);
        const float inv = 1.0f / l;
        for (int t = lane; t < n; t += 32) s.p[g * n + t] *= inv;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
        const int g = i / D, d = i % D;
        float acc = 0.0f;
        for (int t = 0; t < n; t++) acc = fmaf(s.p[g * n + t], __half2float(s.v[(size_t)t * D + d]), acc);
        out[(size_t)(h * G + g) * D + d] = acc;
    }
}

// Local row j of kv head h's (G + 2) D rows: its row in Wqkv [Hq D + 2 Hk D][E].
__device__ __forceinline__ int head_row(int j, int h, int G, int D, int Hq, int Hk) {
    if (j < G * D) return h * G * D + j;
    if (j < (G + 1) * D) return Hq * D + h * D + (j - G * D);
    return (Hq + Hk) * D + h * D + (j - (G + 1) * D);
}

struct attn_args {
    const __half *wqkv;
    const float *x;
    float *qkv; // separate: [Hq D + 2 Hk D]
    __half *kc, *vc;
    float *out; // [Hq D]
    const int *pos;
    int E, Hq, Hk, D;
};

// The separate attention kernel: grid Hk, ATT_THREADS threads.
__global__ void __launch_bounds__(ATT_THREADS) attn_separate(attn_args a) {
    extern __shared__ __align__(16) char smem[];
    const int h = blockIdx.x, G = a.Hq / a.Hk, D = a.D, pos = *a.pos;
    const attn_smem s = attn_carve(smem, G, D, pos + 1);
    attn_fetch_cache(s, a.kc, a.vc, a.Hk, h, D, pos);
    for (int j = threadIdx.x; j < (G + 2) * D; j += blockDim.x) {
        const float v = a.qkv[head_row(j, h, G, D, a.Hq, a.Hk)];
        if (j < G * D) s.q[j] = v;
        else if (j < (G + 1) * D) s.kn[j - G * D] = v;
        else s.vn[j - (G + 1) * D] = v;
    }
    __syncthreads();
    attn_math(s, a.kc, a.vc, a.Hk, h, G, D, pos, a.out);
}

// Head role: kv head h's q/k/v rows over the CB blocks of its cluster into the leader's
// shared memory, one cluster barrier, then the leader's attention. Returns true in the
// leader (a written).
__device__ static bool head_role(const attn_args &a, char *smem, int h) {
    cg::cluster_group cluster = cg::this_cluster();
    const int CB = (int)cluster.num_blocks(), b = (int)cluster.block_rank();
    const int G = a.Hq / a.Hk, D = a.D, pos = *a.pos;
    const attn_smem s = attn_carve(smem, G, D, pos + 1);
    if (b == 0) attn_fetch_cache(s, a.kc, a.vc, a.Hk, h, D, pos);
    // (a block's shared memory may be written by others only once it runs: every block
    // arrives here and waits before its first remote store, after its rows)
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    float *leader_q = cluster.map_shared_rank(s.q, 0); // q, kn, vn are contiguous: (G + 2) D floats
    const int warp = threadIdx.x / 32, n_warps = blockDim.x / 32, R = (G + 2) * D;
    float vals[ROWS_A_WARP];
    int n_rows = 0;
    for (int j = b + CB * warp; j < R && n_rows < ROWS_A_WARP; j += CB * n_warps)
        vals[n_rows++] = row_dot<2, int>(a.wqkv + (size_t)head_row(j, h, G, D, a.Hq, a.Hk) * a.E, a.x, a.E);
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
    if (threadIdx.x % 32 == 0)
        for (int i = 0; i < n_rows; i++) leader_q[b + CB * (warp + i * n_warps)] = vals[i];
    cluster.sync();
    if (b != 0) return false;
    attn_math(s, a.kc, a.vc, a.Hk, h, G, D, pos, a.out);
    return true;
}

// The cluster kernel: grid CB * Hk, clusters of CB, CL_THREADS threads.
__global__ void __launch_bounds__(CL_THREADS, 1) attn_cluster(attn_args a) {
    extern __shared__ __align__(16) char smem[];
    head_role(a, smem, blockIdx.x / (int)cg::this_cluster().num_blocks());
}

// The fused front of a layer: clusters 0 .. Hk - 1 take the heads (head_role; the leader
// then raises its head's flag to the step's epoch), the other n_ob blocks the output
// projection: block ob copies its rows [r0, r1) of Wo [E][Q] into shared memory (cp.async)
// as soon as it starts, waits for every head's flag, stages a = attention output, and adds
// its rows' Wo a into x. x is read by the head role before any flag is raised, so the
// adds cannot race those reads.
struct front_args {
    attn_args a;
    const __half *wo;
    float *x;
    unsigned *flags; // [Hk] this layer's
    const unsigned *epoch;
    unsigned *timeouts;
};

__device__ __forceinline__ unsigned ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__global__ void __launch_bounds__(CL_THREADS, 1) layer_front(front_args f) {
    extern __shared__ __align__(16) char smem[];
    const int CB = (int)cg::this_cluster().num_blocks(), c = blockIdx.x / CB;
    const unsigned epoch = *f.epoch;
    if (c < f.a.Hk) {
        if (head_role(f.a, smem, c)) {
            __syncthreads();
            if (threadIdx.x == 0) {
                __threadfence();
                asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(f.flags + c), "r"(epoch) : "memory");
            }
        }
        return;
    }
    const int E = f.a.E, Q = f.a.Hq * f.a.D, n_ob = gridDim.x - f.a.Hk * CB, ob = blockIdx.x - f.a.Hk * CB;
    const int r0 = (int)((long)E * ob / n_ob), r1 = (int)((long)E * (ob + 1) / n_ob);
    __half *w = (__half *)smem;
    float *as = (float *)(w + (size_t)(r1 - r0) * Q);
    const int pieces = Q / 8;
    for (int i = threadIdx.x; i < (r1 - r0) * pieces; i += blockDim.x) {
        const unsigned d = (unsigned)__cvta_generic_to_shared(w + (size_t)i * 8);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(f.wo + (size_t)r0 * Q + (size_t)i * 8)
                     : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    if (threadIdx.x < f.a.Hk) {
        long spins = 0;
        while (ld_acquire(f.flags + threadIdx.x) != epoch)
            if (++spins > (1L << 26)) {
                atomicAdd(f.timeouts, 1u);
                break;
            }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < Q; i += blockDim.x) as[i] = __ldcg(f.a.out + i);
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int r = r0 + warp; r < r1; r += blockDim.x / 32) {
        const uint4 *wr = (const uint4 *)(w + (size_t)(r - r0) * Q);
        float acc = 0.0f;
        for (int v = lane; v < pieces; v += 32) {
            const float4 *xv = (const float4 *)(as + v * 8);
            acc = dot8(wr[v], xv[0], xv[1], acc);
        }
        acc = warp_sum(acc);
        if (lane == 0) f.x[r] += acc;
    }
}

__global__ void next_epoch(unsigned *epoch) { *epoch += 1; }

struct setup {
    attn_shape sh;
    dims d;
    layer *ls;
    __half *kc, *vc; // per layer [MAX_KEYS][Hk][D]
    float *x, *qkv, *a, *g;
    int *pos;
    unsigned *flags, *epoch, *timeouts; // flags [L][Hk]
    int n_o_clusters;                   // FUSED: clusters of the output projection
};

enum { SEPARATE, CLUSTER, FUSED }; // the forms
static const char *const FORM_NAMES[] = {"separate", "cluster", "cluster + o"};

static cudaLaunchConfig_t cluster_config(cudaStream_t st, int clusters, size_t smem, cudaLaunchAttribute *at) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(CL_CLUSTER * clusters);
    cfg.blockDim = dim3(CL_THREADS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = CL_CLUSTER, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
    cfg.attrs = at, cfg.numAttrs = 1;
    return cfg;
}

static size_t attn_smem(const attn_shape &h) { return attn_smem_bytes(h.Hq / h.Hk, h.D, MAX_KEYS); }

// FUSED's shared memory: the larger of a head's attention and an o block's rows and a.
static size_t front_smem(const attn_shape &h, int n_o_clusters) {
    const int n_ob = n_o_clusters * CL_CLUSTER, rows = (h.E + n_ob - 1) / n_ob, Q = h.Hq * h.D;
    const size_t o = (size_t)rows * Q * 2 + (size_t)Q * 4;
    return o > attn_smem(h) ? o : attn_smem(h);
}

// One step of L layers in the given form. full: the FFN too (the same kernels in every form).
static void step(cudaStream_t st, const setup &S, int form, bool full) {
    const attn_shape &h = S.sh;
    const int QKV = (h.Hq + 2 * h.Hk) * h.D, Q = h.Hq * h.D;
    if (form == FUSED) next_epoch<<<1, 1, 0, st>>>(S.epoch);
    for (int l = 0; l < h.L; l++) {
        const size_t cache = (size_t)MAX_KEYS * h.Hk * h.D;
        attn_args a = {S.ls[l].qkv, S.x, S.qkv, S.kc + cache * l, S.vc + cache * l, S.a, S.pos, h.E, h.Hq, h.Hk, h.D};
        cudaLaunchAttribute at[1];
        if (form == SEPARATE) {
            gemv<EPI_STORE><<<blocks_for(QKV), SEPARATE_THREADS, 0, st>>>(S.ls[l].qkv, NULL, S.x, S.qkv, QKV, h.E);
            attn_separate<<<h.Hk, ATT_THREADS, attn_smem(h), st>>>(a);
        } else if (form == CLUSTER) {
            cudaLaunchConfig_t cfg = cluster_config(st, h.Hk, attn_smem(h), at);
            CHECK(cudaLaunchKernelEx(&cfg, attn_cluster, a));
        } else {
            front_args f = {a, S.ls[l].o, S.x, S.flags + (size_t)l * h.Hk, S.epoch, S.timeouts};
            cudaLaunchConfig_t cfg = cluster_config(st, h.Hk + S.n_o_clusters, front_smem(h, S.n_o_clusters), at);
            CHECK(cudaLaunchKernelEx(&cfg, layer_front, f));
        }
        if (form != FUSED) gemv<EPI_ADD><<<blocks_for(h.E), SEPARATE_THREADS, 0, st>>>(S.ls[l].o, NULL, S.a, S.x, h.E, Q);
        if (!full) continue;
        gemv<EPI_GLU><<<blocks_for(h.F), SEPARATE_THREADS, 0, st>>>(S.ls[l].gate, S.ls[l].up, S.x, S.g, h.F, h.E);
        gemv<EPI_ADD><<<blocks_for(h.E), SEPARATE_THREADS, 0, st>>>(S.ls[l].down, NULL, S.g, S.x, h.E, h.F);
    }
}

// x after one full step from x0 at depth pos (the caches restored first: the step writes row pos).
static void one_step(cudaStream_t st, const setup &S, int form, const float *x0, const __half *k0, const __half *v0,
                     size_t cache_elems, float *x_out) {
    CHECK(cudaMemcpy(S.kc, k0, cache_elems * 2, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpy(S.vc, v0, cache_elems * 2, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpy(S.x, x0, S.sh.E * sizeof(float), cudaMemcpyHostToDevice));
    step(st, S, form, true);
    CHECK(cudaStreamSynchronize(st));
    CHECK(cudaMemcpy(x_out, S.x, S.sh.E * sizeof(float), cudaMemcpyDeviceToHost));
}

int main(void) {
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    const attn_shape shapes[] = {{"llama-3.2-1b", 2048, 32, 8, 64, 8192, 16}, {"qwen3-1.7b", 2048, 16, 8, 128, 6144, 28}};
    cudaStream_t st;
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    printf("%s (%d SMs): a decode layer's q/k/v, attention and o as separate kernels, q/k/v + attention as one "
           "kernel of clusters of %d, and q/k/v + attention + o as one; L layers in a graph (%d replays), us a "
           "layer\n\n",
           prop.name, prop.multiProcessorCount, CL_CLUSTER, REPS);
    printf("| shape | depth | form | clusters | q/k/v + attention + o, us | whole layer, us | x = separate |\n");
    printf("|---|---:|---|---:|---:|---:|---|\n");
    for (const attn_shape &sh : shapes) {
        setup S = {};
        S.sh = sh;
        S.d = {sh.E, sh.Hq * sh.D, sh.Hk * sh.D, sh.F, sh.L};
        S.d.QKV = (sh.Hq + 2 * sh.Hk) * sh.D;
        S.ls = alloc_layers(S.d);
        const size_t cache_elems = (size_t)MAX_KEYS * sh.Hk * sh.D * sh.L;
        CHECK(cudaMalloc(&S.kc, cache_elems * 2));
        CHECK(cudaMalloc(&S.vc, cache_elems * 2));
        __half *k0, *v0;
        CHECK(cudaMalloc(&k0, cache_elems * 2));
        CHECK(cudaMalloc(&v0, cache_elems * 2));
        upload_random_half(k0, cache_elems, 11, 1.0f);
        upload_random_half(v0, cache_elems, 13, 1.0f);
        CHECK(cudaMalloc(&S.x, sh.E * 4));
        CHECK(cudaMalloc(&S.qkv, (size_t)S.d.QKV * 4));
        CHECK(cudaMalloc(&S.a, (size_t)sh.Hq * sh.D * 4));
        CHECK(cudaMalloc(&S.g, (size_t)sh.F * 4));
        CHECK(cudaMalloc(&S.pos, sizeof(int)));
        CHECK(cudaMalloc(&S.flags, (size_t)sh.L * sh.Hk * 4));
        CHECK(cudaMemset(S.flags, 0, (size_t)sh.L * sh.Hk * 4));
        CHECK(cudaMalloc(&S.epoch, 4));
        CHECK(cudaMemset(S.epoch, 0, 4));
        CHECK(cudaMalloc(&S.timeouts, 4));
        CHECK(cudaMemset(S.timeouts, 0, 4));
        if ((sh.Hq / sh.Hk + 2) * sh.D > ROWS_A_WARP * CL_CLUSTER * (CL_THREADS / 32)) {
            fprintf(stderr, "%s: a head's rows exceed ROWS_A_WARP a warp\n", sh.name);
            return 1;
        }
        // the most clusters of the fused kernel that are resident at once: every block must be
        // (the o blocks wait for the heads); its shared memory depends on the o clusters
        CHECK(cudaFuncSetAttribute(attn_separate, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)attn_smem(sh)));
        CHECK(cudaFuncSetAttribute(attn_cluster, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)attn_smem(sh)));
        for (int no = 1; no <= 16; no++) {
            const size_t smem = front_smem(sh, no);
            if (smem > (size_t)prop.sharedMemPerBlockOptin) continue;
            CHECK(cudaFuncSetAttribute(layer_front, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            cudaLaunchAttribute at[1];
            cudaLaunchConfig_t cfg = cluster_config(st, sh.Hk + no, smem, at);
            int co = 0;
            CHECK(cudaOccupancyMaxActiveClusters(&co, layer_front, &cfg));
            if (co >= sh.Hk + no) S.n_o_clusters = no;
        }
        if (S.n_o_clusters == 0) {
            fprintf(stderr, "%s: no fused grid fits at once\n", sh.name);
            return 1;
        }
        CHECK(cudaFuncSetAttribute(layer_front, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)front_smem(sh, S.n_o_clusters)));
        float *x0 = (float *)malloc(sh.E * 4), *xs = (float *)malloc(sh.E * 4), *xf = (float *)malloc(sh.E * 4);
        srand(5);
        for (int i = 0; i < sh.E; i++) x0[i] = (float)rand() / RAND_MAX - 0.5f;
        for (int depth : {64, 128}) {
            CHECK(cudaMemcpy(S.pos, &depth, sizeof(int), cudaMemcpyHostToDevice));
            one_step(st, S, SEPARATE, x0, k0, v0, cache_elems, xs);
            for (int form : {SEPARATE, CLUSTER, FUSED}) {
                if (form != SEPARATE) one_step(st, S, form, x0, k0, v0, cache_elems, xf);
                // (the timed replays rewrite row depth of the caches with the same values each time)
                const double front = captured_us(st, REPS, [&](cudaStream_t s) { step(s, S, form, false); }) / sh.L;
                const double whole = captured_us(st, REPS, [&](cudaStream_t s) { step(s, S, form, true); }) / sh.L;
                const bool same = form == SEPARATE || memcmp(xs, xf, sh.E * 4) == 0;
                const int clusters = form == SEPARATE ? 0 : sh.Hk + (form == FUSED ? S.n_o_clusters : 0);
                printf("| %s | %d | %s | %d | %.2f | %.2f | %s |\n", sh.name, depth, FORM_NAMES[form], clusters, front,
                       whole, same ? "yes" : "NO");
            }
        }
        unsigned timeouts = 0;
        CHECK(cudaMemcpy(&timeouts, S.timeouts, 4, cudaMemcpyDeviceToHost));
        if (timeouts) printf("\n%s: %u o blocks gave up waiting for a flag: the fused rows are invalid\n", sh.name, timeouts);
        free(x0), free(xs), free(xf);
        for (void *p : {(void *)k0, (void *)v0, (void *)S.kc, (void *)S.vc, (void *)S.x, (void *)S.qkv, (void *)S.a,
                        (void *)S.g, (void *)S.pos, (void *)S.flags, (void *)S.epoch, (void *)S.timeouts})
            CHECK(cudaFree(p));
    }
    return 0;
}
