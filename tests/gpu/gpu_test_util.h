/*
 * Helpers of test_cuda_ops.c: buffers that exist in both backends with the same contents,
 * strided tensor descriptors, a reproducible RNG, and the comparison of a CUDA result
 * with the CPU reference by normalised error.
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

#include "stride/backend.h"
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

#endif /* STRIDE_GPU_TEST_UTIL_H */
