// A decode step's kernels on their own, to attribute a step's time (issue 5). One dense
// layer's ops are issued as the forward pass issues them on CUDA:
//
//   qkv   fused RMSNorm + q/k/v products        (st_fused_mul_mat, 3 weights, STORE)
//   rope+attn  per-head q/k norms, RoPE, cache store, attention over the cache
//              (st_fused_rope_attention; n_kv = n_ctx as in a graph), and its two
//              steps on their own for reference (st_fused_rope_store, iface->attention);
//              the rotations from rope_table, formed once before the layers (the
//              forward pass forms them once a step)
//   o     o product + residual add              (st_fused_mul_mat, ADD)
//   ffn   fused RMSNorm + gate/up + SwiGLU      (st_fused_mul_mat, 2 weights, SWIGLU)
//   down  down product + residual add           (st_fused_mul_mat, ADD)
//
// with weights of their own per layer (so that they stream from HBM as in decode),
// recorded for L layers as one graph (iface->graph_begin/end) and replayed; then the
// same with one kind of op only. Each kind's microseconds per layer are printed next to
// its weight bytes and the rate that makes (against a device copy), and the whole step
// against the sum of its parts (the difference is what the kinds gain or lose from
// running back to back). The whole layer runs three ways: unchained (every norm in its
// product), every norm chained (o and down prepare x * norm_w for the next product), and
// as the forward pass chains (only where the backend's prepared_norm_pays says so: the row
// to hold against tg128, n_layer x it + the head). Synthetic F16 weights, packed (or padded with --pad: one
// 128-byte line on rows that are a multiple of 2048 bytes, the layout rule's default).
//
// First, the floor under any decode step: chains of kernels that do (almost) nothing,
// recorded as a graph on a stream of the bench's own and replayed, for the grid shapes of
// the step (1 block; the 1,024 blocks of 256 threads of a full-SM GEMV), each kernel
// reading one word the one before it wrote (the step's dependence), and a GEMV-like chain
// alternating with kernels that reserve the attention's 40 KiB of shared memory (what a
// change of the L1/shared split costs at a boundary). Microseconds per kernel: what a
// kernel boundary costs before any bytes move.
//
// Build (after the library, from the repository root; build-gpu is run_gpu_tests.sh's):
//   nvcc -O3 -std=c++17 -arch=sm_90 -Iinclude -Isrc -DSTRIDE_HAVE_CUDA=1 bench/kernels/decode_step_bench.cu \
//        build-gpu/libstride.a -lcublas -lcublasLt -Xcompiler -fopenmp -lm -o build-gpu/decode_step_bench
// Run: build-gpu/decode_step_bench [--pad] [--depth N] [--n-kv N] [--reps N] [--cache-config C] [MODEL ...]
//   --cache-config shared|equal|l1: cudaDeviceSetCacheConfig first (the L1/shared split
//   every kernel without its own preference asks for)
//   --n-kv: the bound attention gets (default: the one a recorded decode step at that depth
//   passes, its depth bucket's, st_decode_bucket; at most the cache size, 4096)
//   MODEL: llama-3.2-1b, qwen3-1.7b, qwen3-8b (default: all three)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stride/backend.h"
#include "stride/types.h"
extern "C" {
#include "model/session_internal.h" // st_decode_bucket: the bound a recorded decode step passes
}

#include "kernel_bench.h"

// H200 device copy (SPEC.md), the decode roofline's rate.
#define ROOF_GBS 4260.0
#define N_CTX 4096
#define HOST_CHUNK_ELEMS (32u << 20) // upload staging: 64 MiB of f16

typedef struct shape {
    const char *name;
    int64_t n_embd, n_head, n_head_kv, head_dim, n_ff, n_layer;
    bool qk_norm;
    st_rope_mode rope_mode;
} shape;

static const shape SHAPES[] = {
    {"llama-3.2-1b", 2048, 32, 8, 64, 8192, 16, false, ST_ROPE_MODE_NORM},
    {"qwen3-1.7b", 2048, 16, 8, 128, 6144, 28, true, ST_ROPE_MODE_NEOX},
    {"qwen3-8b", 4096, 32, 8, 128, 12288, 36, true, ST_ROPE_MODE_NEOX},
};

// A device tensor [ne0, ne1, ne2] of type t; rows of ne0 elements at row stride nb1
// (0: packed). Never freed: the models measured stay resident until the process ends
// (all three together take ~20 GB).
static st_tensor dev_tensor(st_type t, int64_t ne0, int64_t ne1, int64_t ne2, size_t nb1) {
    st_tensor x;
    memset(&x, 0, sizeof(x));
    const size_t es = t == ST_TYPE_F16 ? 2 : 4;
    x.type = t;
    x.ne[0] = ne0, x.ne[1] = ne1, x.ne[2] = ne2, x.ne[3] = 1;
    x.nb[0] = es;
    x.nb[1] = nb1 ? nb1 : es * (size_t)ne0;
    x.nb[2] = x.nb[1] * (size_t)ne1;
    x.nb[3] = x.nb[2] * (size_t)ne2;
    x.data = dev_alloc(x.nb[3]);
    return x;
}

// Fills a tensor's whole span (pad bytes included) with small f16 or f32 values.
static void fill(st_tensor *x, const uint16_t *f16_pattern, const float *f32_pattern) {
    const size_t bytes = x->nb[3], chunk = (size_t)HOST_CHUNK_ELEMS * 2;
    const char *src = x->type == ST_TYPE_F16 ? (const char *)f16_pattern : (const char *)f32_pattern;
    for (size_t off = 0; off < bytes; off += chunk) {
        const size_t n = bytes - off < chunk ? bytes - off : chunk;
        dev_write((char *)x->data + off, src, n);
    }
}

// The layout rule with its defaults: rows of a multiple of 2048 bytes get one 128-byte line.
static size_t weight_row_stride(int64_t K, bool pad) {
    const size_t row = (size_t)K * 2;
    return pad && row % 2048 == 0 ? row + 128 : row;
}

typedef struct layer {
    st_tensor attn_norm, wq, wk, wv, q_norm, k_norm, wo, ffn_norm, gate, up, down, k_cache, v_cache;
} layer;

typedef struct step {
    const shape *sh;
    layer *layers;
    st_tensor x, h, q, k, v, attn_out, gate, up, ff, pos; // activations, shared by the layers
    st_tensor rope_cs; // [n_rot] the rotations at the position (rope_table, once: as the forward pass, once a step)
    st_tensor x_w;                                        // [E] x * the next norm's weight (OP_CHAINED)
    bool qkv_prepared, ffn_prepared; // whether the forward pass prepares their norms (OP_FORWARD)
    st_rope_params rope;
    st_attn_params attn;
} step;

// OP_ROPE_ATTN: rope_store + attention as the forward pass issues them (one fused op);
// OP_ROPE and OP_ATTN: the two steps on their own (the composite).
enum { OP_QKV = 1, OP_ROPE = 2, OP_ATTN = 4, OP_O = 8, OP_FFN = 16, OP_DOWN = 32, OP_ROPE_ATTN = 128 };
enum { OP_ALL = OP_QKV | OP_ROPE_ATTN | OP_O | OP_FFN | OP_DOWN };
enum { OP_NO_NORM = 64 }; // qkv and ffn without their RMSNorm (what the norm costs)
// Every norm chained: o and down also form x * the next product's norm weight (next_h;
// down forms it with its own layer's attn_norm, the values do not matter here), which qkv
// and gate/up read (x_w) instead of forming it.
enum { OP_CHAINED = 256 };
// As the forward pass issues one-token steps: chained only where the backend's
// prepared_norm_pays says so for the normed product after the add (forward.c's
// prepare_norm_for), as step's qkv_prepared and ffn_prepared hold.
enum { OP_FORWARD = 512 };

// Whether the op before a normed product (qkv: down; gate/up: o) prepares its norm.
static bool chain_qkv(const step *s, int ops) { return (ops & OP_CHAINED) || ((ops & OP_FORWARD) && s->qkv_prepared); }
static bool chain_ffn(const step *s, int ops) { return (ops & OP_CHAINED) || ((ops & OP_FORWARD) && s->ffn_prepared); }

#define NORM_EPS 1e-5f // every RMSNorm's epsilon here

// The normed products' descriptors, before any chaining (what prepared_norm_pays is asked about).
static st_fused_mul_mat qkv_op(step *s, layer *l, int ops) {
    st_fused_mul_mat op = {};
    op.n_w = 3;
    op.w[0] = &l->wq, op.w[1] = &l->wk, op.w[2] = &l->wv;
    op.y[0] = &s->q, op.y[1] = &s->k, op.y[2] = &s->v;
    op.x = &s->x, op.norm_w = ops & OP_NO_NORM ? NULL : &l->attn_norm, op.eps = NORM_EPS, op.h = &s->h;
    op.epilogue = ST_FUSED_EPILOGUE_STORE;
    return op;
}
static st_fused_mul_mat ffn_op(step *s, layer *l, int ops) {
    st_fused_mul_mat op = {};
    op.n_w = 2, op.w[0] = &l->gate, op.w[1] = &l->up, op.y[0] = &s->gate, op.y[1] = &s->up;
    op.x = &s->x, op.norm_w = ops & OP_NO_NORM ? NULL : &l->ffn_norm, op.eps = NORM_EPS, op.h = &s->h;
    op.epilogue = ST_FUSED_EPILOGUE_SWIGLU, op.out = &s->ff;
    return op;
}

static void issue_layer(step *s, layer *l, int ops) {
    st_error err = {};
    const shape *sh = s->sh;
    if (ops & OP_QKV) {
        st_fused_mul_mat op = qkv_op(s, l, ops);
        op.x_w = chain_qkv(s, ops) ? &s->x_w : NULL;
        check(st_backend_mul_mat_fused(g_b, &op, &err), "qkv", &err);
    }
    // q, k, v as heads: [head_dim, n_head(_kv), 1] views of the product rows
    st_tensor qh = s->q, kh = s->k, vh = s->v;
    qh.ne[0] = sh->head_dim, qh.ne[1] = sh->n_head, qh.ne[2] = 1;
    kh.ne[0] = vh.ne[0] = sh->head_dim, kh.ne[1] = vh.ne[1] = sh->n_head_kv, kh.ne[2] = vh.ne[2] = 1;
    qh.nb[1] = kh.nb[1] = vh.nb[1] = (size_t)sh->head_dim * 4;
    qh.nb[2] = s->q.nb[1], kh.nb[2] = s->k.nb[1], vh.nb[2] = s->v.nb[1];
    qh.nb[3] = qh.nb[2], kh.nb[3] = kh.nb[2], vh.nb[3] = vh.nb[2];
    st_fused_rope_store rs = {};
    rs.q = &qh, rs.k = &kh, rs.v = &vh;
    rs.q_norm = sh->qk_norm ? &l->q_norm : NULL, rs.k_norm = sh->qk_norm ? &l->k_norm : NULL;
    rs.eps = NORM_EPS, rs.positions = &s->pos, rs.rope = &s->rope, rs.k_cache = &l->k_cache, rs.v_cache = &l->v_cache;
    rs.rope_cs = &s->rope_cs;
    st_tensor out = s->attn_out;
    out.ne[0] = sh->head_dim, out.ne[1] = sh->n_head, out.ne[2] = 1;
    out.nb[1] = (size_t)sh->head_dim * 4, out.nb[2] = out.nb[3] = s->attn_out.nb[1];
    if (ops & OP_ROPE) check(st_backend_rope_store(g_b, &rs, &err), "rope_store", &err);
    if (ops & OP_ATTN)
        check(g_b->iface->attention(g_b, &out, &qh, &l->k_cache, &l->v_cache, &s->pos, &s->attn, &err), "attention",
              &err);
    if (ops & OP_ROPE_ATTN) {
        st_fused_rope_attention op = {};
        op.rs = rs, op.out = &out, op.attn = &s->attn;
        check(st_backend_rope_attention(g_b, &op, &err), "rope_attention", &err);
    }
    if (ops & OP_O) {
        st_fused_mul_mat op = {};
        op.n_w = 1, op.w[0] = &l->wo, op.y[0] = &s->h, op.x = &s->attn_out;
        op.epilogue = ST_FUSED_EPILOGUE_ADD, op.out = &s->x;
        if (chain_ffn(s, ops)) op.next_norm_w = &l->ffn_norm, op.next_h = &s->x_w;
        check(st_backend_mul_mat_fused(g_b, &op, &err), "o", &err);
    }
    if (ops & OP_FFN) {
        st_fused_mul_mat op = ffn_op(s, l, ops);
        op.x_w = chain_ffn(s, ops) ? &s->x_w : NULL;
        check(st_backend_mul_mat_fused(g_b, &op, &err), "gate/up", &err);
    }
    if (ops & OP_DOWN) {
        st_fused_mul_mat op = {};
        op.n_w = 1, op.w[0] = &l->down, op.y[0] = &s->h, op.x = &s->ff;
        op.epilogue = ST_FUSED_EPILOGUE_ADD, op.out = &s->x;
        if (chain_qkv(s, ops)) op.next_norm_w = &l->attn_norm, op.next_h = &s->x_w;
        check(st_backend_mul_mat_fused(g_b, &op, &err), "down", &err);
    }
}

// Microseconds per replay of a graph of every layer's `ops`.
static double time_ops(step *s, int ops, int reps) {
    st_error err = {};
    st_backend_graph *g = NULL;
    // One eager pass first: scratch (the split-KV partials) grows outside the recording.
    for (int64_t i = 0; i < s->sh->n_layer; i++) issue_layer(s, &s->layers[i], ops);
    check(g_b->iface->graph_begin(g_b, &err), "graph_begin", &err);
    for (int64_t i = 0; i < s->sh->n_layer; i++) issue_layer(s, &s->layers[i], ops);
    check(g_b->iface->graph_end(g_b, &g, &err), "graph_end", &err);
    for (int i = 0; i < 3; i++) check(g_b->iface->graph_launch(g_b, g, &err), "graph_launch", &err);
    double ms = 0;
    check(g_b->iface->timer_start(g_b, &err), "timer", &err);
    for (int i = 0; i < reps; i++) check(g_b->iface->graph_launch(g_b, g, &err), "graph_launch", &err);
    check(g_b->iface->timer_stop(g_b, &ms, &err), "timer", &err);
    g_b->iface->graph_free(g_b, g);
    return ms * 1e3 / reps;
}

// ---- the graph floor -------------------------------------------------------------------------

// Adds 1 to the word the kernel before wrote (block 0, thread 0); every other thread exits.
__global__ void floor_kernel(int *word) {
    if (blockIdx.x == 0 && threadIdx.x == 0) *word += 1;
}

// floor_kernel through the dynamic shared memory the launch reserves (the decode
// attention's split kernel takes 20-40 KiB a block; the products a few hundred bytes).
__global__ void floor_smem_kernel(int *word) {
    extern __shared__ int floor_smem[];
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        floor_smem[0] = *word;
        *word = floor_smem[0] + 1;
    }
}

static void cuda_check(cudaError_t rc, const char *what) {
    if (rc != cudaSuccess) {
        fprintf(stderr, "%s: %s: %s\n", g_bench_name, what, cudaGetErrorString(rc));
        exit(1);
    }
}

// Both floor kernels' preferred shared memory carveout (percent of the unified L1/shared; -1:
// the default).
static void floor_carveout(int percent) {
    cuda_check(cudaFuncSetAttribute(floor_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent), "carveout");
    cuda_check(cudaFuncSetAttribute(floor_smem_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent),
               "carveout");
}

// One kernel of a floor chain: its grid and the dynamic shared memory it reserves.
typedef struct floor_launch {
    unsigned int blocks, threads;
    size_t smem;
} floor_launch;

// Microseconds per kernel of a graph of n dependent floor kernels, alternating a and b (the
// same launch twice for a uniform chain). carveout >= 0: both kernels' preferred shared
// memory carveout (percent of the unified L1/shared), restored to the default after.
static double floor_us(int n, floor_launch a, floor_launch b, int carveout, int reps) {
    cudaStream_t st;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaEvent_t t0, t1;
    int *word;
    if (carveout >= 0) floor_carveout(carveout);
    cuda_check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream");
    cuda_check(cudaMalloc(&word, sizeof(int)), "malloc");
    cuda_check(cudaMemsetAsync(word, 0, sizeof(int), st), "memset");
    cuda_check(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal), "begin capture");
    for (int i = 0; i < n; i++) {
        const floor_launch *l = i % 2 ? &b : &a;
        if (l->smem) floor_smem_kernel<<<l->blocks, l->threads, l->smem, st>>>(word);
        else floor_kernel<<<l->blocks, l->threads, 0, st>>>(word);
    }
    cuda_check(cudaStreamEndCapture(st, &graph), "end capture");
    cuda_check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    cuda_check(cudaEventCreate(&t0), "event");
    cuda_check(cudaEventCreate(&t1), "event");
    for (int i = 0; i < 3; i++) cuda_check(cudaGraphLaunch(exec, st), "launch");
    cuda_check(cudaEventRecord(t0, st), "record");
    for (int i = 0; i < reps; i++) cuda_check(cudaGraphLaunch(exec, st), "launch");
    cuda_check(cudaEventRecord(t1, st), "record");
    cuda_check(cudaEventSynchronize(t1), "sync");
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, t0, t1), "elapsed");
    cudaEventDestroy(t0), cudaEventDestroy(t1), cudaGraphExecDestroy(exec), cudaGraphDestroy(graph);
    cudaFree(word), cudaStreamDestroy(st);
    if (carveout >= 0) floor_carveout(-1);
    return (double)ms * 1e3 / reps / n;
}

static void print_floor(int reps) {
    const int n = 96; // about a llama-3.2-1b step's kernels (6 a layer, 16 layers)
    const floor_launch one = {1, 32, 0}, wave = {132, 256, 0}, gemv = {1024, 256, 0}, big = {4096, 256, 0};
    const floor_launch attn = {32, 128, 40 << 10}; // the split kernel's grid at depth 64 (n_kv 256), its shared memory
    printf("\ngraph floor: %d dependent kernels that do nothing, us a kernel (%d replays)\n", n, reps);
    printf("| grid | us/kernel |\n|---|---:|\n");
    printf("| 1 block of 32 threads | %.2f |\n", floor_us(n, one, one, -1, reps));
    printf("| 132 blocks of 256 threads | %.2f |\n", floor_us(n, wave, wave, -1, reps));
    printf("| 1,024 blocks of 256 threads | %.2f |\n", floor_us(n, gemv, gemv, -1, reps));
    printf("| 4,096 blocks of 256 threads | %.2f |\n", floor_us(n, big, big, -1, reps));
    printf("| 32 blocks of 128 threads, 40 KiB shared each | %.2f |\n", floor_us(n, attn, attn, -1, reps));
    printf("| 1,024 x 256 (no shared) and 32 x 128 (40 KiB), alternating | %.2f |\n", floor_us(n, gemv, attn, -1, reps));
    printf("| the same, both carveouts 25%% | %.2f |\n", floor_us(n, gemv, attn, 25, reps));
    printf("| the same, both carveouts 100%% | %.2f |\n", floor_us(n, gemv, attn, 100, reps));
    fflush(stdout);
}

static void run_model(const shape *sh, bool pad, int64_t depth, int64_t n_kv, int reps, const uint16_t *f16p,
                      const float *f32p) {
    const int64_t E = sh->n_embd, Q = sh->n_head * sh->head_dim, KV = sh->n_head_kv * sh->head_dim, F = sh->n_ff;
    step s;
    memset(&s, 0, sizeof(s));
    s.sh = sh;
    s.layers = (layer *)calloc((size_t)sh->n_layer, sizeof(layer));
    if (!s.layers) die("host calloc", NULL);
    for (int64_t i = 0; i < sh->n_layer; i++) {
        layer *l = &s.layers[i];
        l->attn_norm = dev_tensor(ST_TYPE_F32, E, 1, 1, 0), l->ffn_norm = dev_tensor(ST_TYPE_F32, E, 1, 1, 0);
        l->q_norm = dev_tensor(ST_TYPE_F32, sh->head_dim, 1, 1, 0);
        l->k_norm = dev_tensor(ST_TYPE_F32, sh->head_dim, 1, 1, 0);
        l->wq = dev_tensor(ST_TYPE_F16, E, Q, 1, weight_row_stride(E, pad));
        l->wk = dev_tensor(ST_TYPE_F16, E, KV, 1, weight_row_stride(E, pad));
        l->wv = dev_tensor(ST_TYPE_F16, E, KV, 1, weight_row_stride(E, pad));
        l->wo = dev_tensor(ST_TYPE_F16, Q, E, 1, weight_row_stride(Q, pad));
        l->gate = dev_tensor(ST_TYPE_F16, E, F, 1, weight_row_stride(E, pad));
        l->up = dev_tensor(ST_TYPE_F16, E, F, 1, weight_row_stride(E, pad));
        l->down = dev_tensor(ST_TYPE_F16, F, E, 1, weight_row_stride(F, pad));
        l->k_cache = dev_tensor(ST_TYPE_F16, sh->head_dim, sh->n_head_kv, N_CTX, 0);
        l->v_cache = dev_tensor(ST_TYPE_F16, sh->head_dim, sh->n_head_kv, N_CTX, 0);
        st_tensor *all[] = {&l->attn_norm, &l->ffn_norm, &l->q_norm, &l->k_norm, &l->wq,    &l->wk,     &l->wv,
                            &l->wo,        &l->gate,     &l->up,     &l->down,   &l->k_cache, &l->v_cache};
        for (size_t j = 0; j < sizeof(all) / sizeof(all[0]); j++) fill(all[j], f16p, f32p);
    }
    s.x = dev_tensor(ST_TYPE_F32, E, 1, 1, 0), s.h = dev_tensor(ST_TYPE_F32, F > E ? F : E, 1, 1, 0);
    s.x_w = dev_tensor(ST_TYPE_F32, E, 1, 1, 0);
    s.h.ne[0] = E; // the normed input [E]; also big enough as the scratch y of o/down
    s.q = dev_tensor(ST_TYPE_F32, Q, 1, 1, 0), s.k = dev_tensor(ST_TYPE_F32, KV, 1, 1, 0);
    s.v = dev_tensor(ST_TYPE_F32, KV, 1, 1, 0), s.attn_out = dev_tensor(ST_TYPE_F32, Q, 1, 1, 0);
    s.ff = dev_tensor(ST_TYPE_F32, F, 1, 1, 0), s.gate = dev_tensor(ST_TYPE_F32, F, 1, 1, 0);
    s.up = dev_tensor(ST_TYPE_F32, F, 1, 1, 0);
    s.pos = dev_tensor(ST_TYPE_I32, 1, 1, 1, 0);
    st_tensor *acts[] = {&s.x, &s.h, &s.q, &s.k, &s.v, &s.attn_out, &s.gate, &s.up, &s.ff};
    for (size_t j = 0; j < sizeof(acts) / sizeof(acts[0]); j++) fill(acts[j], f16p, f32p);
    const int32_t p = (int32_t)depth;
    dev_write(s.pos.data, &p, sizeof(p));
    s.rope = st_rope_params_default(sh->rope_mode, (int32_t)sh->head_dim, 500000.0f);
    s.rope_cs = dev_tensor(ST_TYPE_F32, sh->head_dim, 1, 1, 0);
    {
        st_error err = {};
        check(g_b->iface->rope_table(g_b, &s.rope_cs, &s.pos, &s.rope, &err), "rope_table", &err);
    }
    memset(&s.attn, 0, sizeof(s.attn));
    s.attn.n_kv = n_kv; // as a recorded decode step (its depth bucket): the range comes from the position
    s.attn.scale = 1.0f / sqrtf((float)sh->head_dim);
    { // forward.c's rule, asked as it asks (the normed products without x_w)
        const st_fused_mul_mat q = qkv_op(&s, &s.layers[0], 0), f = ffn_op(&s, &s.layers[0], 0);
        s.qkv_prepared = g_b->iface->prepared_norm_pays(g_b, &q);
        s.ffn_prepared = g_b->iface->prepared_norm_pays(g_b, &f);
    }

    const double wb = 2.0; // bytes per weight element
    struct kind {
        const char *name;
        int ops;
        double bytes; // weight bytes per layer
    } kinds[] = {
        {"qkv (norm + q/k/v)", OP_QKV, wb * (double)E * (double)(Q + 2 * KV)},
        {"rope_store", OP_ROPE, 0},
        {"attention", OP_ATTN, 0},
        {"rope_store + attention, one op", OP_ROPE_ATTN, 0},
        {"o + residual", OP_O, wb * (double)Q * (double)E},
        {"norm + gate/up + SwiGLU", OP_FFN, wb * 2.0 * (double)E * (double)F},
        {"down + residual", OP_DOWN, wb * (double)F * (double)E},
        {"(qkv without its norm)", OP_QKV | OP_NO_NORM, wb * (double)E * (double)(Q + 2 * KV)},
        {"(gate/up + SwiGLU without the norm)", OP_FFN | OP_NO_NORM, wb * 2.0 * (double)E * (double)F},
        {"qkv, x * norm_w from the add before", OP_QKV | OP_CHAINED, wb * (double)E * (double)(Q + 2 * KV)},
        {"o + residual, forming the next x * norm_w", OP_O | OP_CHAINED, wb * (double)Q * (double)E},
        {"gate/up + SwiGLU, x * norm_w from the add", OP_FFN | OP_CHAINED, wb * 2.0 * (double)E * (double)F},
        {"down + residual, forming the next x * norm_w", OP_DOWN | OP_CHAINED, wb * (double)F * (double)E},
    };
    printf("\n%s: %lld layers, %s weights, depth %lld, n_kv %lld; microseconds per layer (graph of all layers, %d "
           "replays)\n",
           sh->name, (long long)sh->n_layer, pad ? "padded" : "packed", (long long)depth, (long long)n_kv, reps);
    printf("| op | us/layer | weight MB/layer | GB/s | %% of copy (%.0f GB/s) | roofline us |\n", ROOF_GBS);
    printf("|---|---:|---:|---:|---:|---:|\n");
    double sum_us = 0, sum_bytes = 0;
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        const double us = time_ops(&s, kinds[i].ops, reps) / (double)sh->n_layer;
        if ((kinds[i].ops & ~OP_ALL) == 0) sum_us += us, sum_bytes += kinds[i].bytes; // the forward pass's ops
        if (kinds[i].bytes > 0) {
            const double gbs = kinds[i].bytes / (us * 1e-6) / 1e9;
            printf("| %s | %.2f | %.1f | %.0f | %.0f%% | %.2f |\n", kinds[i].name, us, kinds[i].bytes / 1e6, gbs,
                   100.0 * gbs / ROOF_GBS, kinds[i].bytes / (ROOF_GBS * 1e3));
        } else {
            printf("| %s | %.2f | - | - | - | - |\n", kinds[i].name, us);
        }
    }
    const double all_us = time_ops(&s, OP_ALL, reps) / (double)sh->n_layer;
    const double gemv_us = time_ops(&s, OP_QKV | OP_O | OP_FFN | OP_DOWN, reps) / (double)sh->n_layer;
    const double all_ch_us = time_ops(&s, OP_ALL | OP_CHAINED, reps) / (double)sh->n_layer;
    const double all_fw_us = time_ops(&s, OP_ALL | OP_FORWARD, reps) / (double)sh->n_layer;
    const double gemv_ch_us = time_ops(&s, OP_QKV | OP_O | OP_FFN | OP_DOWN | OP_CHAINED, reps) / (double)sh->n_layer;
    printf("| sum of the kinds, each run alone | %.2f | %.1f | | | %.2f |\n", sum_us, sum_bytes / 1e6,
           sum_bytes / (ROOF_GBS * 1e3));
    printf("| the four products back to back | %.2f | %.1f | %.0f | %.0f%% | |\n", gemv_us, sum_bytes / 1e6,
           sum_bytes / (gemv_us * 1e-6) / 1e9, 100.0 * sum_bytes / (gemv_us * 1e-6) / 1e9 / ROOF_GBS);
    printf("| the whole layer back to back | %.2f | %.1f | %.0f | %.0f%% | |\n", all_us, sum_bytes / 1e6,
           sum_bytes / (all_us * 1e-6) / 1e9, 100.0 * sum_bytes / (all_us * 1e-6) / 1e9 / ROOF_GBS);
    printf("| the four products back to back, chained | %.2f | %.1f | %.0f | %.0f%% | |\n", gemv_ch_us,
           sum_bytes / 1e6, sum_bytes / (gemv_ch_us * 1e-6) / 1e9,
           100.0 * sum_bytes / (gemv_ch_us * 1e-6) / 1e9 / ROOF_GBS);
    printf("| the whole layer back to back, every norm chained | %.2f | %.1f | %.0f | %.0f%% | |\n", all_ch_us,
           sum_bytes / 1e6, sum_bytes / (all_ch_us * 1e-6) / 1e9, 100.0 * sum_bytes / (all_ch_us * 1e-6) / 1e9 / ROOF_GBS);
    printf("| the whole layer back to back, as the forward pass (q/k/v norm %s, gate/up norm %s) | %.2f | %.1f | %.0f | "
           "%.0f%% | |\n",
           s.qkv_prepared ? "prepared" : "in the loop", s.ffn_prepared ? "prepared" : "in the loop", all_fw_us,
           sum_bytes / 1e6, sum_bytes / (all_fw_us * 1e-6) / 1e9, 100.0 * sum_bytes / (all_fw_us * 1e-6) / 1e9 / ROOF_GBS);
    free(s.layers);
}

int main(int argc, char **argv) {
    g_bench_name = "decode_step_bench";
    bool pad = false;
    int64_t depth = 64, n_kv = 0; // (0: the depth's bucket bound)
    int reps = 20, n_models = 0;
    const char *cache_config = NULL;
    const shape *models[3];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--pad")) {
            pad = true;
        } else if (!strcmp(argv[i], "--depth") && i + 1 < argc) {
            depth = atoll(argv[++i]);
        } else if (!strcmp(argv[i], "--n-kv") && i + 1 < argc) {
            n_kv = atoll(argv[++i]);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--cache-config") && i + 1 < argc && (!strcmp(argv[i + 1], "shared") ||
                                                                          !strcmp(argv[i + 1], "equal") ||
                                                                          !strcmp(argv[i + 1], "l1"))) {
            cache_config = argv[++i];
        } else {
            const shape *found = NULL;
            for (size_t j = 0; j < sizeof(SHAPES) / sizeof(SHAPES[0]); j++)
                if (!strcmp(argv[i], SHAPES[j].name)) found = &SHAPES[j];
            if (!found || n_models == 3) {
                fprintf(stderr, "usage: decode_step_bench [--pad] [--depth N] [--n-kv N] [--reps N] "
                                "[--cache-config shared|equal|l1] [llama-3.2-1b|qwen3-1.7b|qwen3-8b]...\n");
                return 2;
            }
            models[n_models++] = found;
        }
    }
    if (n_kv == 0 && depth >= 0) st_decode_bucket(depth, N_CTX, &n_kv);
    if (depth < 0 || depth >= n_kv || n_kv > N_CTX || reps < 1)
        die("--depth must be in [0, n_kv), --n-kv in (depth, 4096], --reps >= 1", NULL);
    if (n_models == 0)
        for (n_models = 0; n_models < 3; n_models++) models[n_models] = &SHAPES[n_models];
    st_error err = {};
    check(st_backend_init(ST_BACKEND_CUDA, 0, &g_b, &err), "CUDA backend", &err);
    printf("decode step kernels on %s (sm_%d%d)\n", g_b->device.name, g_b->device.compute_major,
           g_b->device.compute_minor);
    if (cache_config) { // the device's default L1/shared preference for every kernel without its own
        const cudaFuncCache cfg = !strcmp(cache_config, "shared") ? cudaFuncCachePreferShared
                                  : !strcmp(cache_config, "equal") ? cudaFuncCachePreferEqual
                                                                   : cudaFuncCachePreferL1;
        cuda_check(cudaDeviceSetCacheConfig(cfg), "cudaDeviceSetCacheConfig");
        printf("cudaDeviceSetCacheConfig: prefer %s\n", cache_config);
    }
    print_floor(reps);
    // small values (|v| < 1/64) so that nothing overflows through the layers
    uint16_t *f16p = (uint16_t *)malloc((size_t)HOST_CHUNK_ELEMS * 2);
    float *f32p = (float *)malloc((size_t)HOST_CHUNK_ELEMS * 2);
    float *tmp = (float *)malloc((size_t)HOST_CHUNK_ELEMS * 4);
    if (!f16p || !f32p || !tmp) die("host malloc", NULL);
    srand(1234);
    for (size_t i = 0; i < HOST_CHUNK_ELEMS; i++) tmp[i] = ((float)rand() / RAND_MAX - 0.5f) / 32.0f;
    st_f32_to_f16_row(tmp, f16p, HOST_CHUNK_ELEMS);
    memcpy(f32p, tmp, (size_t)HOST_CHUNK_ELEMS * 2); // the first half: 64 MiB of f32
    free(tmp);
    for (int i = 0; i < n_models; i++) run_model(models[i], pad, depth, n_kv, reps, f16p, f32p);
    st_backend_free(g_b);
    free(f16p);
    free(f32p);
    return 0;
}
