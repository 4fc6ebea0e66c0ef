/*
 * Helpers of the GPU test programs (test_cuda_ops.c, test_cuda_quant.c): buffers that exist in both backends with the same contents,
 * strided tensor descriptors, a reproducible RNG, and the comparison of a CUDA result
 * with the CPU reference by normalised error, the per-op bookkeeping and main().
 *
 * A "dual" buffer is allocated in the CPU backend and in the CUDA backend; inputs are
 * written to both with the backends' own write/upload_weight. Outputs are poisoned with
 * NaN in both before an op; after it, the CUDA buffer is read back and compared with the
 * CPU buffer: inside the output view by normalised error, OUTSIDE it byte for byte (an
 * op must not write past its view, and in-place ops must leave the rest alone).
 */
#ifndef STRIDE_GPU_TEST_UTIL_H
#define STRIDE_GPU_TEST_UTIL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_backend.h"
#include "stride/backend.h"
#include "stride/cpu_path.h"
#include "stride/device.h"
#include "stride/types.h"

/* The largest deviation, divided by the largest |reference|, may be this many times the
 * normalised-error tolerance: a maximum over N*M outputs sits ~3-4 sigma out, but is
 * divided by the largest reference (itself ~3 RMS), so the ratio stays near 1. */
#define TEST_MAX_ERR_FACTOR 2.0

extern st_backend *g_cpu, *g_gpu;

/* ---- reproducible random numbers ---------------------------------------------------- */

extern uint64_t g_rng;

static inline uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1), never exactly 0. */
static inline float rng_f32(void) {
    float f = (float)((double)(rng_next() >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
    return f == 0.0f ? 0.5f : f;
}

static inline int32_t rng_int(int32_t n) { return (int32_t)(rng_next() % (uint64_t)n); }

/* ---- fatal setup errors (not test failures: the harness itself broke) ---------------- */

static inline void test_die(const char *what, const st_error *err) {
    fprintf(stderr, "test_cuda_ops: %s: %s\n", what, err ? err->message : "");
    exit(2);
}

/* ---- dual buffers ------------------------------------------------------------------- */

typedef struct dual {
    size_t bytes;
    char *host; /* what was written to both backends */
    char *cpu;  /* CPU backend memory (host addressable) */
    char *gpu;  /* CUDA backend memory */
} dual;

static inline dual dual_new(size_t bytes) {
    dual d = {.bytes = bytes};
    st_error err = {0};
    d.host = malloc(bytes ? bytes : 1);
    if (!d.host) test_die("host malloc", NULL);
    if (g_cpu->iface->alloc(g_cpu, bytes, (void **)&d.cpu, &err) != ST_OK) test_die("cpu alloc", &err);
    if (g_gpu->iface->alloc(g_gpu, bytes, (void **)&d.gpu, &err) != ST_OK) test_die("cuda alloc", &err);
    return d;
}

static inline void dual_upload(dual *d) {
    st_error err = {0};
    if (g_cpu->iface->write(g_cpu, d->cpu, d->host, d->bytes, &err) != ST_OK) test_die("cpu write", &err);
    if (g_gpu->iface->write(g_gpu, d->gpu, d->host, d->bytes, &err) != ST_OK) test_die("cuda write", &err);
}

/* Random f32 everywhere, gaps between rows included (so that a stray read shows). */
static inline void dual_random_f32(dual *d) {
    for (size_t i = 0; i + 4 <= d->bytes; i += 4) {
        float f = rng_f32();
        memcpy(d->host + i, &f, 4);
    }
    dual_upload(d);
}

static inline void dual_poison(dual *d) {
    const uint32_t nan_bits = 0x7fc00000u;
    for (size_t i = 0; i + 4 <= d->bytes; i += 4) memcpy(d->host + i, &nan_bits, 4);
    for (size_t i = d->bytes / 4 * 4; i < d->bytes; i++) d->host[i] = (char)0xff;
    dual_upload(d);
}

static inline void dual_free(dual *d) {
    g_cpu->iface->dealloc(g_cpu, d->cpu);
    g_gpu->iface->dealloc(g_gpu, d->gpu);
    free(d->host);
    memset(d, 0, sizeof(*d));
}

/* The CUDA buffer's contents (after a synchronize that must succeed). */
static inline char *dual_fetch(const dual *d) {
    st_error err = {0};
    char *out = malloc(d->bytes ? d->bytes : 1);
    if (!out) test_die("host malloc", NULL);
    if (g_gpu->iface->synchronize(g_gpu, &err) != ST_OK) test_die("cuda synchronize after an op", &err);
    if (g_gpu->iface->read(g_gpu, out, d->gpu, d->bytes, &err) != ST_OK) test_die("cuda read", &err);
    return out;
}

/* ---- descriptors -------------------------------------------------------------------- */

static inline size_t type_size(st_type t) { return t == ST_TYPE_F32 || t == ST_TYPE_I32 ? 4 : 2; }

/* A descriptor with explicit strides, placed `off` bytes into a buffer later (on()). */
typedef struct view {
    st_tensor t;
    size_t off;
} view;

static inline view mkview(st_type type, int64_t ne0, int64_t ne1, int64_t ne2, size_t nb1, size_t nb2, size_t off) {
    view v = {.off = off};
    v.t.type = type;
    v.t.ne[0] = ne0;
    v.t.ne[1] = ne1;
    v.t.ne[2] = ne2;
    v.t.ne[3] = 1;
    v.t.nb[0] = type_size(type);
    v.t.nb[1] = nb1;
    v.t.nb[2] = nb2;
    v.t.nb[3] = nb2 * (size_t)ne2;
    return v;
}

static inline view mkpacked(st_type type, int64_t ne0, int64_t ne1, int64_t ne2) {
    size_t nb1 = (size_t)ne0 * type_size(type);
    return mkview(type, ne0, ne1, ne2, nb1, nb1 * (size_t)ne1, 0);
}

/* Bytes a buffer needs to hold the view. */
static inline size_t view_bytes(const view *v) {
    const st_tensor *t = &v->t;
    if (t->ne[0] == 0 || t->ne[1] == 0 || t->ne[2] == 0) return v->off + 16;
    return v->off + (size_t)(t->ne[0] - 1) * t->nb[0] + (size_t)(t->ne[1] - 1) * t->nb[1] +
           (size_t)(t->ne[2] - 1) * t->nb[2] + t->nb[0];
}

static inline st_tensor on(const view *v, char *base) {
    st_tensor t = v->t;
    t.data = base + v->off;
    return t;
}

/* ---- results ------------------------------------------------------------------------ */

typedef struct cmp_result {
    double nerr;   /* ||got - ref|| / ||ref|| over the view */
    double maxerr; /* max |got - ref| / max |ref| */
    int64_t bad;   /* non-finite results, plus bytes outside the view that differ */
} cmp_result;

/* F32 view of `ref` (CPU buffer) vs `got` (CUDA buffer read back), both `bytes` long. */
static inline cmp_result compare_f32(const view *v, const char *ref, const char *got, size_t bytes) {
    cmp_result r = {0};
    unsigned char *mask = calloc(bytes ? bytes : 1, 1);
    if (!mask) test_die("host calloc", NULL);
    double sd = 0, sr = 0, maxd = 0, maxr = 0;
    const st_tensor *t = &v->t;
    for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
        for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
            for (int64_t i0 = 0; i0 < t->ne[0]; i0++) {
                size_t o = v->off + (size_t)i0 * 4 + (size_t)i1 * t->nb[1] + (size_t)i2 * t->nb[2];
                memset(mask + o, 1, 4);
                float a, b;
                memcpy(&a, ref + o, 4);
                memcpy(&b, got + o, 4);
                if (!isfinite(a) || !isfinite(b)) {
                    r.bad++;
                    continue;
                }
                double d = fabs((double)b - (double)a);
                sd += d * d;
                sr += (double)a * (double)a;
                if (d > maxd) maxd = d;
                if (fabs((double)a) > maxr) maxr = fabs((double)a);
            }
    for (size_t i = 0; i < bytes; i++)
        if (!mask[i] && ref[i] != got[i]) r.bad++;
    free(mask);
    r.nerr = sr > 0 ? sqrt(sd / sr) : sqrt(sd);
    r.maxerr = maxr > 0 ? maxd / maxr : maxd;
    return r;
}

/* Byte-exact comparison of whole buffers (caches, uploads, index outputs). */
static inline cmp_result compare_bytes(const char *ref, const char *got, size_t bytes) {
    cmp_result r = {0};
    for (size_t i = 0; i < bytes; i++)
        if (ref[i] != got[i]) r.bad++;
    r.nerr = r.bad ? 1.0 : 0.0;
    r.maxerr = r.nerr;
    return r;
}

static inline bool cmp_pass(const cmp_result *r, double tol) {
    return r->bad == 0 && r->nerr <= tol && r->maxerr <= (tol > 0 ? TEST_MAX_ERR_FACTOR * tol : 0.0);
}

static inline const char *tname(st_type t) { return st_type_name(t); }

/* I32 [n] in both backends. */
static inline dual ids_new(const int32_t *ids, int64_t n) {
    dual d = dual_new((size_t)n * 4);
    memcpy(d.host, ids, (size_t)n * 4);
    dual_upload(&d);
    return d;
}

/* The activation layouts every product is tested with. */
typedef enum x_layout {
    X_PACKED = 0,  /* x [K, M], y [N, M] packed */
    X_STRIDED = 1, /* rows padded by a few floats, bases not 16-byte aligned */
    X_GAPPED = 2,  /* x [K, 1, M], y [N, 1, M] with gaps between tokens: not one stride */
} x_layout;

static const char *const x_layout_name[] = {"packed", "strided", "gapped"};

static inline void mm_views(x_layout xl, int64_t K, int64_t N, int64_t M, view *vx, view *vy) {
    if (xl == X_PACKED) {
        *vx = mkpacked(ST_TYPE_F32, K, M, 1);
        *vy = mkpacked(ST_TYPE_F32, N, M, 1);
    } else if (xl == X_STRIDED) {
        *vx = mkview(ST_TYPE_F32, K, M, 1, (size_t)(K + 5) * 4, (size_t)(K + 5) * 4 * (size_t)M, 4);
        *vy = mkview(ST_TYPE_F32, N, M, 1, (size_t)(N + 3) * 4, (size_t)(N + 3) * 4 * (size_t)M, 8);
    } else {
        *vx = mkview(ST_TYPE_F32, K, 1, M, (size_t)K * 4, (size_t)K * 4 + 16, 0);
        *vy = mkview(ST_TYPE_F32, N, 1, M, (size_t)N * 4, (size_t)N * 4 + 32, 0);
    }
}

/* ---- bookkeeping: one line per case, a table per op ---------------------------------- */

#define TEST_MAX_OPS 96

typedef struct op_stats {
    const char *op;
    int cases, passed;
    double worst;
} op_stats;

static op_stats g_stats[TEST_MAX_OPS];
static int g_n_ops;

static inline void record(const char *op, const char *desc, const cmp_result *r, double tol) {
    op_stats *s = NULL;
    for (int i = 0; i < g_n_ops; i++)
        if (strcmp(g_stats[i].op, op) == 0) s = &g_stats[i];
    if (!s) {
        if (g_n_ops == TEST_MAX_OPS) test_die("more distinct ops than TEST_MAX_OPS (raise it)", NULL);
        s = &g_stats[g_n_ops++];
        s->op = op;
    }
    const bool pass = cmp_pass(r, tol);
    s->cases++;
    s->passed += pass;
    double e = r->bad ? INFINITY : r->nerr;
    if (e > s->worst) s->worst = e;
    printf("%-4s %-18s %-62s nerr %.2e max %.2e bad %lld (tol %.0e)\n", pass ? "ok" : "FAIL", op, desc, r->nerr,
           r->maxerr, (long long)r->bad, tol);
    fflush(stdout);
}

/* The whole program: seed, backends, run_all, the table, "N passed, M failed". Exit 0
 * only when cases ran and all passed; 77 when built without CUDA; 1 without a device (a
 * run that tests nothing is a failure). `extra` (may be NULL) prints more summary lines. */
static inline int gpu_test_main(const char *name, void (*run_all)(void), void (*extra)(void)) {
    st_error err = {0};
    const char *seed = getenv("STRIDE_TEST_SEED");
    if (seed) g_rng = strtoull(seed, NULL, 0);
    printf("%s: seed 0x%llx, GEMM for M >= %d\n", name, (unsigned long long)g_rng, ST_CUDA_GEMM_MIN_M);
    if (!st_cuda_compiled()) {
        printf("built without CUDA: nothing to test\n");
        return 77;
    }
    if (st_cuda_device_count() == 0) {
        printf("no CUDA device: nothing ran (a failure: run this on the GPU machine)\n");
        return 1;
    }
    /* the reference ops: every CUDA op is checked against them */
    if (st_backend_cpu_init_path(ST_CPU_PATH_EXACT, &g_cpu, &err) != ST_OK) test_die("CPU backend", &err);
    if (st_backend_init(ST_BACKEND_CUDA, 0, &g_gpu, &err) != ST_OK) test_die("CUDA backend", &err);
    printf("device: %s (sm_%d%d), runtime %d, driver %d\n", g_gpu->device.name, g_gpu->device.compute_major,
           g_gpu->device.compute_minor, g_gpu->device.runtime_version, g_gpu->device.driver_version);

    run_all();

    int total = 0, passed = 0;
    printf("\n%-22s | %6s | %6s | %s\n", "op", "cases", "passed", "worst error");
    printf("-----------------------+--------+--------+------------\n");
    for (int i = 0; i < g_n_ops; i++) {
        printf("%-22s | %6d | %6d | %.2e\n", g_stats[i].op, g_stats[i].cases, g_stats[i].passed, g_stats[i].worst);
        total += g_stats[i].cases;
        passed += g_stats[i].passed;
    }
    if (extra) extra();
    st_backend_free(g_gpu);
    st_backend_free(g_cpu);
    printf("%d passed, %d failed\n", passed, total - passed);
    return total > 0 && passed == total ? 0 : 1;
}

#endif /* STRIDE_GPU_TEST_UTIL_H */
