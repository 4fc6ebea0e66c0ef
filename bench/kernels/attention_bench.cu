// Attention kernels on their own: each CUDA path (cuda_attention.h) timed on model shapes,
// printed next to the roofline. Prefill: achieved TFLOP/s (4 * head_dim * n_head flops per
// visible (query, key) pair: Q.K^T and P.V) against the dense F16 tensor-core rate; decode:
// GB/s of K and V read (every visible key of every kv head once) against a device copy.
//
// Build (after the library, from the repository root; build-gpu is run_gpu_tests.sh's):
//   nvcc -O3 -std=c++17 -arch=sm_90 -Iinclude -Isrc -DSTRIDE_HAVE_CUDA=1 bench/kernels/attention_bench.cu \
//        build-gpu/libstride.a -lcublas -lcublasLt -Xcompiler -fopenmp -lm -o build-gpu/attention_bench
// Run: build-gpu/attention_bench [reps]      (default 20 timed repetitions after 3 warm-ups)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_attention.h"
#include "stride/backend.h"
#include "stride/types.h"

#include "kernel_bench.h"

// H200 rooflines (SPEC.md): dense F16 as measured with cuBLAS, and a device copy.
#define ROOF_TFLOPS 756.0
#define ROOF_GBS 4260.0

static st_tensor tensor(void *data, st_type t, int64_t ne0, int64_t ne1, int64_t ne2) {
    st_tensor x;
    memset(&x, 0, sizeof(x));
    const size_t es = t == ST_TYPE_F16 ? 2 : 4;
    x.type = t;
    x.data = data;
    x.ne[0] = ne0, x.ne[1] = ne1, x.ne[2] = ne2, x.ne[3] = 1;
    x.nb[0] = es, x.nb[1] = es * (size_t)ne0, x.nb[2] = x.nb[1] * (size_t)ne1, x.nb[3] = x.nb[2] * (size_t)ne2;
    return x;
}

typedef struct shape {
    const char *model;
    int64_t H, Hkv, D;
} shape;

// Milliseconds per call of one path; < 0 when the path does not take the shape.
static double time_path(st_cuda_attn_path path, st_tensor *y, st_tensor *q, st_tensor *k, st_tensor *v,
                        st_tensor *pos, const st_attn_params *p, int reps) {
    st_error err = {};
    for (int i = 0; i < 3; i++) {
        const st_status s = st_cuda_attention_path(g_b, y, q, k, v, pos, p, path, &err);
        if (s == ST_ERROR_UNSUPPORTED) return -1.0;
        if (s != ST_OK) die("attention", &err);
    }
    if (g_b->iface->synchronize(g_b, &err) != ST_OK) die("synchronize", &err);
    double ms = 0;
    if (g_b->iface->timer_start(g_b, &err) != ST_OK) die("timer", &err);
    for (int i = 0; i < reps; i++)
        if (st_cuda_attention_path(g_b, y, q, k, v, pos, p, path, &err) != ST_OK) die("attention", &err);
    if (g_b->iface->timer_stop(g_b, &ms, &err) != ST_OK) die("timer", &err);
    return ms / reps;
}

// One shape: M queries at positions depth - M .. depth - 1 over a cache of n_ctx entries.
static void run_case(const shape *sh, int64_t M, int64_t depth, int64_t n_ctx, int reps) {
    const int64_t D = sh->D, H = sh->H, Hkv = sh->Hkv;
    const size_t cache_elems = (size_t)(D * Hkv * n_ctx), q_elems = (size_t)(D * H * M);
    uint16_t *hc = (uint16_t *)malloc(cache_elems * 2);
    float *hq = (float *)malloc(q_elems * 4);
    int32_t *hp = (int32_t *)malloc((size_t)M * 4);
    if (!hc || !hq || !hp) die("host malloc", NULL);
    srand(1234);
    float *tmp = (float *)malloc(cache_elems * 4);
    if (!tmp) die("host malloc", NULL);
    for (size_t i = 0; i < cache_elems; i++) tmp[i] = (float)rand() / RAND_MAX * 2.0f - 1.0f;
    st_f32_to_f16_row(tmp, hc, cache_elems);
    free(tmp);
    for (size_t i = 0; i < q_elems; i++) hq[i] = (float)rand() / RAND_MAX * 2.0f - 1.0f;
    for (int64_t m = 0; m < M; m++) hp[m] = (int32_t)(depth - M + m);

    void *dk = dev_alloc(cache_elems * 2), *dv = dev_alloc(cache_elems * 2);
    void *dq = dev_alloc(q_elems * 4), *dy = dev_alloc(q_elems * 4), *dp = dev_alloc((size_t)M * 4);
    dev_write(dk, hc, cache_elems * 2);
    dev_write(dv, hc, cache_elems * 2);
    dev_write(dq, hq, q_elems * 4);
    dev_write(dp, hp, (size_t)M * 4);
    st_tensor k = tensor(dk, ST_TYPE_F16, D, Hkv, n_ctx), v = tensor(dv, ST_TYPE_F16, D, Hkv, n_ctx);
    st_tensor q = tensor(dq, ST_TYPE_F32, D, H, M), y = tensor(dy, ST_TYPE_F32, D, H, M);
    st_tensor pos = tensor(dp, ST_TYPE_I32, M, 1, 1);
    st_attn_params p;
    memset(&p, 0, sizeof(p));
    p.n_kv = depth;
    p.scale = 1.0f / sqrtf((float)D);

    // visible (query, key) pairs and the K/V bytes a pass must read at least
    double pairs = 0;
    for (int64_t m = 0; m < M; m++) pairs += (double)(hp[m] + 1);
    const double flops = 4.0 * (double)D * (double)H * pairs;
    const double kv_bytes = 2.0 * (double)depth * (double)Hkv * (double)D * 2.0;
    const bool prefill = M > 4;
    const st_cuda_attn_path chosen = st_cuda_attention_choose(g_b, &q, &k, &v, &p);

    for (int pi = ST_CUDA_ATTN_PATH_EXACT; pi <= ST_CUDA_ATTN_PATH_DECODE; pi++) {
        const st_cuda_attn_path path = (st_cuda_attn_path)pi;
        const double ms = time_path(path, &y, &q, &k, &v, &pos, &p, reps);
        if (ms < 0) continue;
        const double tflops = flops / (ms * 1e-3) / 1e12, gbs = kv_bytes / (ms * 1e-3) / 1e9;
        printf("| %-16s | %-7s | %5lld | %5lld | %-6s%s | %9.1f | %7.1f (%4.1f%% of %.0f) | %7.0f (%4.1f%% of %.0f) |\n",
               sh->model, prefill ? "prefill" : "decode", (long long)M, (long long)depth, st_cuda_attn_path_name(path),
               path == chosen ? "*" : " ", ms * 1e3, tflops, 100.0 * tflops / ROOF_TFLOPS, ROOF_TFLOPS, gbs,
               100.0 * gbs / ROOF_GBS, ROOF_GBS);
    }
    if (!prefill) { // the graph form: n_kv = the whole context; same work, same time expected
        p.n_kv = n_ctx;
        const double ms = time_path(chosen, &y, &q, &k, &v, &pos, &p, reps);
        printf("| %-16s | %-7s | %5lld | %5lld | %-6s* | %9.1f | (n_kv = n_ctx = %lld)%*s| %7.0f (%4.1f%% of %.0f) |\n",
               sh->model, "decode", (long long)M, (long long)depth, st_cuda_attn_path_name(chosen), ms * 1e3,
               (long long)n_ctx, 8, "", kv_bytes / (ms * 1e-3) / 1e9, 100.0 * kv_bytes / (ms * 1e-3) / 1e9 / ROOF_GBS,
               ROOF_GBS);
    }
    g_b->iface->dealloc(g_b, dk);
    g_b->iface->dealloc(g_b, dv);
    g_b->iface->dealloc(g_b, dq);
    g_b->iface->dealloc(g_b, dy);
    g_b->iface->dealloc(g_b, dp);
    free(hc);
    free(hq);
    free(hp);
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 20;
    g_bench_name = "attention_bench";
    st_error err = {};
    if (st_backend_init(ST_BACKEND_CUDA, 0, &g_b, &err) != ST_OK) die("CUDA backend", &err);
    printf("attention kernels on %s (sm_%d%d); F16 KV cache; %d reps; * = the path AUTO picks\n", g_b->device.name,
           g_b->device.compute_major, g_b->device.compute_minor, reps);
    printf("| model            | phase   |     M | depth | path    | time (us) | TFLOP/s (roofline)       | K+V GB/s (roofline)      |\n");
    printf("|------------------|---------|-------|-------|---------|-----------|--------------------------|--------------------------|\n");
    const shape llama = {"llama-3.2-1b", 32, 8, 64};
    const shape qwen8 = {"qwen3-8b", 32, 8, 128};
    const shape gemma = {"gemma-3-1b", 4, 1, 256};
    const int64_t n_ctx = 8192 + 256;
    run_case(&llama, 512, 512, n_ctx, reps);
    run_case(&llama, 2048, 2048, n_ctx, reps);
    run_case(&qwen8, 512, 512, n_ctx, reps);
    run_case(&gemma, 512, 512, n_ctx, reps);
    const int64_t depths[] = {512, 4096, 8192};
    for (int i = 0; i < 3; i++) run_case(&llama, 1, depths[i], n_ctx, reps);
    for (int i = 0; i < 3; i++) run_case(&qwen8, 1, depths[i], n_ctx, reps);
    for (int i = 0; i < 3; i++) run_case(&gemma, 1, depths[i], n_ctx, reps);
    st_backend_free(g_b);
    return 0;
}
