// Where cuBLAS overtakes the own matrix-vector kernel as the batch grows (issue 5: "choose,
// by measurement, what serves batches of 2 to 16, and document the thresholds"). For
// model shapes, F16 and BF16, packed and padded, M = 1 .. 16 columns: the two paths of
// mul_mat timed on their own (st_cuda_gemv, which takes up to CUDA_GEMV_MAX_COLS columns
// a pass, and st_cuda_mul_mat_gemm), the weights rotating through copies that together
// exceed the L2 several times, so that every product streams its weight from HBM as in
// decode. Printed: microseconds per product for both, and per shape the smallest M from
// which cuBLAS is faster at every larger M measured (ST_CUDA_GEMM_MIN_M, set from this measurement).
//
// Build (after the library, from the repository root; build-gpu is run_gpu_tests.sh's):
//   nvcc -O3 -std=c++17 -arch=sm_90 -Iinclude -Isrc -DSTRIDE_HAVE_CUDA=1 bench/kernels/gemv_gemm_threshold_bench.cu \
//        build-gpu/libstride.a -lcublas -lcublasLt -Xcompiler -fopenmp -lm -o build-gpu/gemv_gemm_threshold_bench
// Run: build-gpu/gemv_gemm_threshold_bench [reps]   (default 30 products per timing)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_common.cuh"
#include "kernel_bench.h"

#define MAX_M 16
#define POOL_BYTES ((size_t)512 << 20) // the weight copies together: ~8x the H200's L2

// Fills n bytes of device memory with small values of type t (2-byte types only).
static void dev_fill16(void *dst, size_t n, st_type t) {
    const size_t chunk = (size_t)16 << 20;
    uint16_t *h = (uint16_t *)malloc(chunk);
    float *f = (float *)malloc(chunk / 2 * sizeof(float));
    if (!h || !f) die("host malloc", NULL);
    for (size_t i = 0; i < chunk / 2; i++) f[i] = ((float)rand() / RAND_MAX - 0.5f) / 16.0f;
    if (t == ST_TYPE_F16) {
        st_f32_to_f16_row(f, h, chunk / 2);
    } else {
        for (size_t i = 0; i < chunk / 2; i++) { // bf16: the top half of the f32 bits
            uint32_t u;
            memcpy(&u, &f[i], 4);
            h[i] = (uint16_t)(u >> 16);
        }
    }
    for (size_t off = 0; off < n; off += chunk) dev_write((char *)dst + off, h, n - off < chunk ? n - off : chunk);
    free(h);
    free(f);
}

typedef struct shape {
    const char *what;
    int64_t N, K;
} shape;

static const shape SHAPES[] = {
    {"llama-3.2-1b q/o", 2048, 2048},   {"llama-3.2-1b gate/up", 8192, 2048},
    {"llama-3.2-1b down", 2048, 8192},  {"qwen3-8b q/o", 4096, 4096},
    {"qwen3-8b gate/up", 12288, 4096},  {"qwen3-8b down", 4096, 12288},
};

// Microseconds per product of one path over the rotating copies.
static double time_path(bool gemm, st_tensor *w, int n_copies, size_t copy_bytes, void *base, st_tensor *x,
                        st_tensor *y, int reps) {
    st_cuda_ctx *c = cuda_ctx(g_b);
    st_error err = {};
    for (int i = 0; i < reps + 2; i++) {
        if (i == 2) check(g_b->iface->timer_start(g_b, &err), "timer", &err);
        w->data = (char *)base + (size_t)(i % n_copies) * copy_bytes;
        check(gemm ? st_cuda_mul_mat_gemm(c, y, w, x, &err) : st_cuda_gemv(c, y, w, x, &err),
              gemm ? "cuBLAS" : "GEMV", &err);
    }
    double ms = 0;
    check(g_b->iface->timer_stop(g_b, &ms, &err), "timer", &err);
    return ms * 1e3 / reps;
}

int main(int argc, char **argv) {
    g_bench_name = "gemv_gemm_threshold_bench";
    const int reps = argc > 1 ? atoi(argv[1]) : 30;
    if (reps < 1) die("reps must be >= 1", NULL);
    st_error err = {};
    check(st_backend_init(ST_BACKEND_CUDA, 0, &g_b, &err), "CUDA backend", &err);
    printf("mul_mat paths by batch on %s; %d products per timing, weights streamed from HBM\n", g_b->device.name,
           reps);
    void *pool = dev_alloc(POOL_BYTES);
    float *xd = (float *)dev_alloc((size_t)12288 * MAX_M * sizeof(float));
    float *yd = (float *)dev_alloc((size_t)12288 * MAX_M * sizeof(float));
    {
        float *h = (float *)malloc((size_t)12288 * MAX_M * sizeof(float));
        if (!h) die("host malloc", NULL);
        for (size_t i = 0; i < (size_t)12288 * MAX_M; i++) h[i] = (float)rand() / RAND_MAX - 0.5f;
        dev_write(xd, h, (size_t)12288 * MAX_M * sizeof(float));
        free(h);
    }
    const st_type types[] = {ST_TYPE_F16, ST_TYPE_BF16};
    printf("| shape | N x K | type | row stride | M | GEMV us | cuBLAS us | faster |\n");
    printf("|---|---|---|---|---:|---:|---:|---|\n");
    struct outcome {
        const shape *sh;
        st_type type;
        bool padded;
        int from; // the smallest M from which cuBLAS is faster at every larger M; -1: none
    } outcomes[64];
    int n_outcomes = 0;
    for (size_t si = 0; si < sizeof(SHAPES) / sizeof(SHAPES[0]); si++)
        for (int ti = 0; ti < 2; ti++)
            for (int padded = 0; padded < 2; padded++) {
                const shape *sh = &SHAPES[si];
                const size_t row = (size_t)sh->K * 2, nb1 = padded ? row + 128 : row;
                const size_t copy_bytes = (nb1 * (size_t)sh->N + 255) / 256 * 256;
                const int n_copies = (int)(POOL_BYTES / copy_bytes);
                if (n_copies < 2) die("the weight pool holds fewer than two copies", NULL);
                dev_fill16(pool, POOL_BYTES, types[ti]);
                st_tensor w;
                memset(&w, 0, sizeof(w));
                w.type = types[ti];
                w.ne[0] = sh->K, w.ne[1] = sh->N, w.ne[2] = w.ne[3] = 1;
                w.nb[0] = 2, w.nb[1] = nb1, w.nb[2] = w.nb[3] = nb1 * (size_t)sh->N;
                int from = -1;
                for (int M = 1; M <= MAX_M; M++) {
                    st_tensor x, y;
                    memset(&x, 0, sizeof(x));
                    memset(&y, 0, sizeof(y));
                    x.type = y.type = ST_TYPE_F32;
                    x.data = xd, y.data = yd;
                    x.ne[0] = sh->K, y.ne[0] = sh->N, x.ne[1] = y.ne[1] = M, x.ne[2] = y.ne[2] = x.ne[3] = y.ne[3] = 1;
                    x.nb[0] = y.nb[0] = 4, x.nb[1] = (size_t)sh->K * 4, y.nb[1] = (size_t)sh->N * 4;
                    x.nb[2] = x.nb[3] = x.nb[1] * (size_t)M, y.nb[2] = y.nb[3] = y.nb[1] * (size_t)M;
                    const double gemv = time_path(false, &w, n_copies, copy_bytes, pool, &x, &y, reps);
                    const double gemm = time_path(true, &w, n_copies, copy_bytes, pool, &x, &y, reps);
                    if (gemm >= gemv) from = -1;
                    else if (from < 0) from = M;
                    printf("| %s | %lld x %lld | %s | %s | %d | %.2f | %.2f | %s |\n", sh->what, (long long)sh->N,
                           (long long)sh->K, st_type_name((uint32_t)types[ti]), padded ? "padded" : "packed", M, gemv,
                           gemm, gemm < gemv ? "cuBLAS" : "GEMV");
                }
                outcomes[n_outcomes++] = {sh, types[ti], padded != 0, from};
            }
    printf("\ncuBLAS faster at every measured M from (ST_CUDA_GEMM_MIN_M is %d):\n\n", ST_CUDA_GEMM_MIN_M);
    printf("| shape | type | row stride | from |\n|---|---|---|---|\n");
    for (int i = 0; i < n_outcomes; i++) {
        const outcome *o = &outcomes[i];
        if (o->from > 0)
            printf("| %s | %s | %s | M >= %d |\n", o->sh->what, st_type_name((uint32_t)o->type),
                   o->padded ? "padded" : "packed", o->from);
        else
            printf("| %s | %s | %s | never up to %d |\n", o->sh->what, st_type_name((uint32_t)o->type),
                   o->padded ? "padded" : "packed", MAX_M);
    }
    st_backend_free(g_b);
    return 0;
}
