/*
 * Elementwise ops: activations (SiLU, GELU-tanh), gated units (SwiGLU, GeGLU, separate
 * or over one fused gate_up tensor), add/mul with broadcast, scale. All in f32, as the
 * models compute them; every operand is walked row by row through its own strides.
 */
#include <math.h>

#include "cpu/cpu_internal.h"
#include "stride/cpu_ops.h"

static inline float silu(float x) { return x / (1.0f + expf(-x)); }

static inline float gelu_tanh(float x) {
    const float sqrt_2_over_pi = 0.79788456080286535588f;
    return 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * (x + 0.044715f * x * x * x)));
}

typedef enum unary_op { UNARY_SILU, UNARY_GELU_TANH } unary_op;

static void unary(st_tensor *dst, const st_tensor *x, unary_op op) {
    ST_ASSERT(cpu_is_f32_rows(x) && cpu_is_f32_rows(dst) && cpu_same_shape(dst, x));
    const int64_t n = x->ne[0], n_rows = cpu_nrows(x);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n_rows; r++) {
        const float *xr = (const float *)cpu_row(x, r);
        float *yr = (float *)cpu_row(dst, r);
        if (op == UNARY_SILU) {
            for (int64_t i = 0; i < n; i++) yr[i] = silu(xr[i]);
        } else {
            for (int64_t i = 0; i < n; i++) yr[i] = gelu_tanh(xr[i]);
        }
    }
}

void st_cpu_silu(st_tensor *dst, const st_tensor *x) { unary(dst, x, UNARY_SILU); }
void st_cpu_gelu_tanh(st_tensor *dst, const st_tensor *x) { unary(dst, x, UNARY_GELU_TANH); }

/* ---- gated units ------------------------------------------------------------------------ */

/* dst[i] = act(gate[i]) * up[i] for every row; gate and up are row pointers + offsets so
 * that the fused form (gate and up halves of one row) shares the loop. */
static void glu(st_tensor *dst, const st_tensor *gate, size_t gate_off, const st_tensor *up,
                size_t up_off, unary_op op) {
    const int64_t n = dst->ne[0], n_rows = cpu_nrows(dst);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n_rows; r++) {
        const float *g = (const float *)(cpu_row(gate, r) + gate_off);
        const float *u = (const float *)(cpu_row(up, r) + up_off);
        float *y = (float *)cpu_row(dst, r);
        if (op == UNARY_SILU) {
            for (int64_t i = 0; i < n; i++) y[i] = silu(g[i]) * u[i];
        } else {
            for (int64_t i = 0; i < n; i++) y[i] = gelu_tanh(g[i]) * u[i];
        }
    }
}

static void glu_split(st_tensor *dst, const st_tensor *gate, const st_tensor *up, unary_op op) {
    /* dst, gate, up F32 [F, ...] */
    ST_ASSERT(cpu_is_f32_rows(dst) && cpu_is_f32_rows(gate) && cpu_is_f32_rows(up));
    ST_ASSERT(cpu_same_shape(dst, gate) && cpu_same_shape(dst, up));
    glu(dst, gate, 0, up, 0, op);
}

static void glu_fused(st_tensor *dst, const st_tensor *gu, unary_op op) {
    /* gu F32 [2F, ...]: gate = gu[0:F], up = gu[F:2F]; dst F32 [F, ...] */
    ST_ASSERT(cpu_is_f32_rows(dst) && cpu_is_f32_rows(gu));
    ST_ASSERT(gu->ne[0] == 2 * dst->ne[0] && gu->ne[1] == dst->ne[1] && gu->ne[2] == dst->ne[2] &&
              gu->ne[3] == dst->ne[3]);
    glu(dst, gu, 0, gu, (size_t)dst->ne[0] * sizeof(float), op);
}

void st_cpu_swiglu(st_tensor *dst, const st_tensor *gate, const st_tensor *up) {
    glu_split(dst, gate, up, UNARY_SILU);
}
void st_cpu_geglu(st_tensor *dst, const st_tensor *gate, const st_tensor *up) {
    glu_split(dst, gate, up, UNARY_GELU_TANH);
}
void st_cpu_swiglu_fused(st_tensor *dst, const st_tensor *gu) { glu_fused(dst, gu, UNARY_SILU); }
void st_cpu_geglu_fused(st_tensor *dst, const st_tensor *gu) {
    glu_fused(dst, gu, UNARY_GELU_TANH);
}

/* ---- add, mul, scale -------------------------------------------------------------------- */

typedef enum binary_op { BINARY_ADD, BINARY_MUL } binary_op;

static void binary(st_tensor *dst, const st_tensor *a, const st_tensor *b, binary_op op) {
    /* dst, a F32 [D, ...]; b F32 with each ne[i] equal to a's or 1 (broadcast) */
    ST_ASSERT(cpu_is_f32_rows(dst) && cpu_is_f32_rows(a) && cpu_is_f32_rows(b));
    ST_ASSERT(cpu_same_shape(dst, a));
    for (int i = 0; i < ST_MAX_DIMS; i++) ST_ASSERT(b->ne[i] == a->ne[i] || b->ne[i] == 1);
    const int64_t n = a->ne[0], n_rows = cpu_nrows(a);
    const int64_t b_step = b->ne[0] == 1 ? 0 : 1; /* a scalar per row broadcasts along it */

#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n_rows; r++) {
        const int64_t i1 = r % a->ne[1], i2 = (r / a->ne[1]) % a->ne[2];
        const int64_t i3 = r / (a->ne[1] * a->ne[2]);
        const float *br = (const float *)((const char *)b->data +
                                          (size_t)(i1 % b->ne[1]) * b->nb[1] +
                                          (size_t)(i2 % b->ne[2]) * b->nb[2] +
                                          (size_t)(i3 % b->ne[3]) * b->nb[3]);
        const float *ar = (const float *)cpu_row(a, r);
        float *yr = (float *)cpu_row(dst, r);
        if (op == BINARY_ADD) {
            for (int64_t i = 0; i < n; i++) yr[i] = ar[i] + br[i * b_step];
        } else {
            for (int64_t i = 0; i < n; i++) yr[i] = ar[i] * br[i * b_step];
        }
    }
}

void st_cpu_add(st_tensor *dst, const st_tensor *a, const st_tensor *b) {
    binary(dst, a, b, BINARY_ADD);
}
void st_cpu_mul(st_tensor *dst, const st_tensor *a, const st_tensor *b) {
    binary(dst, a, b, BINARY_MUL);
}

void st_cpu_scale(st_tensor *dst, const st_tensor *x, float s) {
    ST_ASSERT(cpu_is_f32_rows(x) && cpu_is_f32_rows(dst) && cpu_same_shape(dst, x));
    const int64_t n = x->ne[0], n_rows = cpu_nrows(x);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n_rows; r++) {
        const float *xr = (const float *)cpu_row(x, r);
        float *yr = (float *)cpu_row(dst, r);
        for (int64_t i = 0; i < n; i++) yr[i] = s * xr[i];
    }
}
