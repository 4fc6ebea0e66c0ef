// A quantized output head for one token (the matrix-vector kernel of cuda_quant.cu), its
// logits written into device memory or into page-locked host memory as a decode step
// writes them (session.c's step_logits): what the stores across PCIe cost the head.
//
//   Q8_0 and Q5_0 [K, N] at gemma-3-270m's head (640 x 262,144: 640 is no multiple of the
//   K-quants' 256), Q6_K at llama-3.2-1b's (2,048 x 128,256). Weight bytes over the 4,260
//   GB/s copy rate is the floor. And one layer's gate and up of llama-3.2-1b as one product
//   (2,048 x 16,384) in Q4_K and Q8_0: a decode product of a quantized model. Blocks are a
//   fixed byte pattern (valid f16 scales): the values do not matter.
//
// Build against a build's library (from the repository root, on the GPU machine):
//   nvcc -O3 -std=c++17 -arch=sm_90 -Iinclude -Isrc -DSTRIDE_HAVE_CUDA=1 bench/kernels/quant_head_bench.cu \
//       build-gpu/libstride.a -lcublas -lcublasLt -Xcompiler -fopenmp -lm -o /tmp/quant_head_bench
#include <stdio.h>
#include <string.h>

#include "stride/backend.h"
#include "stride/quant.h"
#include "stride/types.h"

#include "kernel_bench.h"

#define REPS 50
#define COPY_GBS 4260.0

static st_tensor tensor2d(st_type t, int64_t ne0, int64_t ne1, void *data) {
    st_tensor x = {};
    x.type = t;
    x.ne[0] = ne0, x.ne[1] = ne1, x.ne[2] = x.ne[3] = 1;
    const st_type_traits *tr = st_type_get_traits((uint32_t)t);
    x.nb[0] = tr->block_bytes;
    x.nb[1] = (size_t)(ne0 / tr->block_size) * tr->block_bytes;
    x.nb[2] = x.nb[3] = x.nb[1] * (size_t)ne1;
    x.data = data;
    return x;
}

static double time_head(st_tensor *y, st_tensor *w, st_tensor *x) {
    st_error err = {};
    for (int i = 0; i < 3; i++) check(g_b->iface->mul_mat(g_b, y, w, x, &err), "mul_mat", &err);
    double ms = 0;
    check(g_b->iface->timer_start(g_b, &err), "timer", &err);
    for (int i = 0; i < REPS; i++) check(g_b->iface->mul_mat(g_b, y, w, x, &err), "mul_mat", &err);
    check(g_b->iface->timer_stop(g_b, &ms, &err), "timer", &err);
    return ms * 1e3 / REPS;
}

int main(void) {
    g_bench_name = "quant_head_bench";
    st_error err = {};
    check(st_backend_init(ST_BACKEND_CUDA, 0, &g_b, &err), "CUDA backend", &err);
    struct {
        const char *name;
        st_type t;
        int64_t K, N;
    } heads[] = {{"gemma-3-270m Q8_0", ST_TYPE_Q8_0, 640, 262144},
                 {"gemma-3-270m Q5_0", ST_TYPE_Q5_0, 640, 262144},
                 {"llama-3.2-1b Q6_K", ST_TYPE_Q6_K, 2048, 128256},
                 {"llama-3.2-1b gate+up Q4_K", ST_TYPE_Q4_K, 2048, 16384},
                 {"llama-3.2-1b gate+up Q8_0", ST_TYPE_Q8_0, 2048, 16384}};
    printf("| head | weight MB | floor us | y in device memory us | y in page-locked host memory us |\n");
    printf("|---|---:|---:|---:|---:|\n");
    const char *div_env = getenv("QHB_ROWS_DIV"); // (a probe: the heads' rows divided by this)
    const int64_t div = div_env ? atoll(div_env) : 1;
    for (auto h : heads) {
        h.N /= div;
        st_tensor w = tensor2d(h.t, h.K, h.N, NULL);
        const size_t wbytes = w.nb[1] * (size_t)h.N;
        char *pattern = (char *)malloc(wbytes);
        memset(pattern, 0x11, wbytes);
        w.data = dev_alloc(wbytes);
        dev_write(w.data, pattern, wbytes);
        free(pattern);
        float *xh = (float *)malloc((size_t)h.K * 4);
        for (int64_t k = 0; k < h.K; k++) xh[k] = (float)((k % 7) - 3) * 0.25f;
        st_tensor x = tensor2d(ST_TYPE_F32, h.K, 1, dev_alloc((size_t)h.K * 4));
        dev_write(x.data, xh, (size_t)h.K * 4);
        free(xh);
        st_tensor yd = tensor2d(ST_TYPE_F32, h.N, 1, dev_alloc((size_t)h.N * 4));
        void *host = NULL;
        check(g_b->iface->host_alloc(g_b, (size_t)h.N * 4, &host, &err), "host_alloc", &err);
        st_tensor yh = tensor2d(ST_TYPE_F32, h.N, 1, host);
        const double td = time_head(&yd, &w, &x), th = time_head(&yh, &w, &x);
        printf("| %s | %.1f | %.1f | %.1f | %.1f |\n", h.name, wbytes / 1e6, wbytes / (COPY_GBS * 1e3), td, th);
        g_b->iface->host_free(g_b, host);
        g_b->iface->dealloc(g_b, w.data);
        g_b->iface->dealloc(g_b, x.data);
        g_b->iface->dealloc(g_b, yd.data);
    }
    g_b->iface->free(g_b);
    return 0;
}
