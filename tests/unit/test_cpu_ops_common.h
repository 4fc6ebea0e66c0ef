/*
 * Shared helpers of the CPU op tests (test_cpu_ops_*.c): tensors with packed or padded
 * strides, random fills rounded to the tensor's type, read-back as double, and the
 * comparison against a float64 reference.
 *
 * Every buffer starts as all-0xFF bytes: NaN in F32, F16 and BF16. So an output element
 * an op forgets to write stays NaN and fails the comparison, and an op that reads a
 * weight's pad bytes (or the gap of a non-contiguous view) picks up NaN and fails too.
 * tt_expect_gaps_untouched checks that nothing was written outside the elements.
 */
#ifndef TEST_CPU_OPS_COMMON_H
#define TEST_CPU_OPS_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stride/cpu_ops.h"
#include "stride/tensor.h"
#include "stride/types.h"

/* 2^-24: the unit roundoff of f32 (half an ulp of 1). Tolerances are multiples of it. */
#define TT_U32 (1.0 / 16777216.0)

/* Bytes added to every row (and every plane) of a "padded" tensor: the planner's
 * default weight pad, not a multiple of any odd row size used here. */
#define TT_PAD 128

typedef struct tt {
    st_tensor t;
    unsigned char *mem;
    size_t bytes;
} tt;

static inline size_t tt_type_size(st_type type) { return type == ST_TYPE_F32 || type == ST_TYPE_I32 ? 4 : 2; }

/* A tensor of (type, ne); pad > 0 adds pad bytes after every row, plane and block. */
static inline tt tt_new(st_type type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, size_t pad) {
    tt x;
    memset(&x, 0, sizeof(x));
    x.t.type = type;
    x.t.ne[0] = ne0;
    x.t.ne[1] = ne1;
    x.t.ne[2] = ne2;
    x.t.ne[3] = ne3;
    x.t.nb[0] = tt_type_size(type);
    x.t.nb[1] = x.t.nb[0] * (size_t)ne0 + pad;
    x.t.nb[2] = x.t.nb[1] * (size_t)ne1 + pad;
    x.t.nb[3] = x.t.nb[2] * (size_t)ne2 + pad;
    x.bytes = x.t.nb[3] * (size_t)ne3 + 16;
    x.mem = malloc(x.bytes);
    if (!x.mem) abort();
    memset(x.mem, 0xff, x.bytes);
    x.t.data = x.mem;
    return x;
}

static inline void tt_free(tt *x) {
    free(x->mem);
    x->mem = NULL;
}

static inline int64_t tt_count(const tt *x) { return x->t.ne[0] * x->t.ne[1] * x->t.ne[2] * x->t.ne[3]; }

/* Element i (flattened, i0 fastest) of a tensor. */
static inline unsigned char *tt_ptr(const tt *x, int64_t i) {
    const int64_t *ne = x->t.ne;
    int64_t i0 = i % ne[0], i1 = (i / ne[0]) % ne[1], i2 = (i / (ne[0] * ne[1])) % ne[2];
    int64_t i3 = i / (ne[0] * ne[1] * ne[2]);
    return (unsigned char *)x->t.data + i0 * x->t.nb[0] + i1 * x->t.nb[1] + i2 * x->t.nb[2] +
           i3 * x->t.nb[3];
}

static inline double tt_get(const tt *x, int64_t i) {
    const unsigned char *p = tt_ptr(x, i);
    uint16_t h;
    float f;
    switch (x->t.type) {
    case ST_TYPE_F32: memcpy(&f, p, 4); return f;
    case ST_TYPE_F16: memcpy(&h, p, 2); return st_f16_to_f32(h);
    case ST_TYPE_BF16: memcpy(&h, p, 2); return st_bf16_to_f32(h);
    default: abort();
    }
}

/* Stores v rounded to the tensor's type (round to nearest even). */
static inline void tt_set(tt *x, int64_t i, double v) {
    unsigned char *p = tt_ptr(x, i);
    float f = (float)v;
    uint16_t h;
    switch (x->t.type) {
    case ST_TYPE_F32: memcpy(p, &f, 4); break;
    case ST_TYPE_F16: h = st_f32_to_f16(f); memcpy(p, &h, 2); break;
    case ST_TYPE_BF16: h = st_f32_to_bf16(f); memcpy(p, &h, 2); break;
    default: abort();
    }
}

/* Deterministic uniform numbers (splitmix64). */
static uint64_t tt_rng_state = 0x5eed;
static inline double tt_uniform(double lo, double hi) {
    uint64_t z = (tt_rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return lo + (hi - lo) * (double)(z >> 11) / 9007199254740992.0;
}

static inline void tt_fill(tt *x, double lo, double hi) {
    for (int64_t i = 0; i < tt_count(x); i++) tt_set(x, i, tt_uniform(lo, hi));
}

/* dst's elements := src's (same shape, any types/strides). */
static inline void tt_copy(tt *dst, const tt *src) {
    for (int64_t i = 0; i < tt_count(src); i++) tt_set(dst, i, tt_get(src, i));
}

/* The bytes outside the elements (pads, gaps) are still 0xFF. */
static inline int tt_gaps_untouched(const tt *x) {
    unsigned char *copy = malloc(x->bytes);
    if (!copy) abort();
    memcpy(copy, x->mem, x->bytes);
    size_t es = x->t.nb[0];
    for (int64_t i = 0; i < tt_count(x); i++) memset(copy + (tt_ptr(x, i) - x->mem), 0xff, es);
    int ok = 1;
    for (size_t b = 0; b < x->bytes; b++) ok &= copy[b] == 0xff;
    free(copy);
    return ok;
}

/* Element values of two tensors are bit-identical (same shape). */
static inline int tt_bit_equal(const tt *a, const tt *b) {
    for (int64_t i = 0; i < tt_count(a); i++)
        if (memcmp(tt_ptr(a, i), tt_ptr(b, i), a->t.nb[0]) != 0) return 0;
    return 1;
}

/* Compares out against ref element by element: |out - ref| <= bound[i] (a per-element
 * error bound derived by the caller), never NaN. Prints the normalised error
 * ||out - ref|| / ||ref|| and the worst element. Returns 1 when all pass. */
static inline int tt_close(const char *what, const tt *out, const double *ref, const double *bound) {
    double num = 0, den = 0, worst_ratio = 0, max_abs = 0;
    int64_t worst = -1, bad = 0;
    for (int64_t i = 0; i < tt_count(out); i++) {
        double o = tt_get(out, i), d = fabs(o - ref[i]);
        if (isnan(o) || isnan(ref[i]) || !(d <= bound[i])) bad++;
        num += (o - ref[i]) * (o - ref[i]);
        den += ref[i] * ref[i];
        if (d > max_abs) max_abs = d;
        double ratio = bound[i] > 0 ? d / bound[i] : (d > 0 ? INFINITY : 0);
        if (isnan(o) || ratio > worst_ratio || worst < 0) {
            if (isnan(o)) ratio = INFINITY;
            if (ratio >= worst_ratio) {
                worst_ratio = ratio;
                worst = i;
            }
        }
    }
    if (bad) {
        printf("  %s: %lld of %lld elements out of bound; worst #%lld got %.9g want %.9g "
               "(bound %.3g); normalised error %.3g, max abs %.3g\n",
               what, (long long)bad, (long long)tt_count(out), (long long)worst,
               tt_get(out, worst), ref[worst], bound[worst], den > 0 ? sqrt(num / den) : sqrt(num),
               max_abs);
    }
    return bad == 0;
}

static const st_type tt_weight_types[3] = {ST_TYPE_F32, ST_TYPE_F16, ST_TYPE_BF16};

#endif /* TEST_CPU_OPS_COMMON_H */
