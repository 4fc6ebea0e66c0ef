/*
 * Row-wise ops of the fast path: RMSNorm, RoPE, the gated units and add/mul/scale, with
 * the contracts of their reference ops (cpu_ops.h), every operand walked row by row
 * through its own strides, rows split evenly over the threads.
 *
 * Differences from the reference, all within f32 rounding:
 *  - RMSNorm sums the squares in f32 vector lanes (the reference: in double);
 *  - SiLU and GELU-tanh are both x * sigmoid(z) with z = x and z = 2 sqrt(2/pi) (x +
 *    0.044715 x^3) (0.5 (1 + tanh(u)) = sigmoid(2u)), the exponential from cpuf_vf_exp.
 * RoPE forms its angles as the reference does (double, rounded once), so it differs only
 * where the compiler contracts a rotation into a fused multiply-add.
 */
#include <math.h>

#include "cpu_fast/isa/cpuf_internal.h"

#define ROPE_MAX_ROT 1024

/* ---- RMSNorm ----------------------------------------------------------------------------- */

void CPUF_FN(st_cpuf_rms_norm)(st_tensor *dst, const st_tensor *x, const st_tensor *w, float eps, bool plus_one) {
    /* x, dst F32 [D, ...]; w F32 [D] or NULL */
    ST_ASSERT(cpu_is_f32_rows(x) && cpu_is_f32_rows(dst) && cpu_same_shape(dst, x));
    const int64_t d = x->ne[0], n_rows = cpu_nrows(x);
    const float *wv = NULL; /* [D] */
    if (w) {
        ST_ASSERT(cpu_is_f32_rows(w) && w->ne[0] == d && cpu_nrows(w) == 1);
        wv = (const float *)w->data;
    }
    ST_ASSERT(d > 0 || n_rows == 0);
    const int64_t dv = d - d % CPUF_VF_LANES;
    const int tail = (int)(d - dv);

#pragma omp parallel for num_threads(cpuf_threads()) schedule(static) if (d * n_rows >= CPUF_PAR_MIN_ELEMS)
    for (int64_t r = 0; r < n_rows; r++) {
        const float *xr = (const float *)cpu_row(x, r);
        float *yr = (float *)cpu_row(dst, r);
        cpuf_vf acc = cpuf_vf_zero();
        for (int64_t i = 0; i < dv; i += CPUF_VF_LANES) {
            const cpuf_vf v = cpuf_vf_load(xr + i);
            acc = cpuf_vf_fma(v, v, acc);
        }
        if (tail) {
            const cpuf_vf v = cpuf_vf_load_n(xr + dv, tail);
            acc = cpuf_vf_fma(v, v, acc);
        }
        const float s = (float)(1.0 / sqrt((double)cpuf_vf_sum(acc) / (double)d + (double)eps));
        const cpuf_vf sv = cpuf_vf_set1(s), one = cpuf_vf_set1(1.0f);
        for (int64_t i = 0; i < d; i += CPUF_VF_LANES) {
            const int n = d - i < CPUF_VF_LANES ? (int)(d - i) : CPUF_VF_LANES;
            cpuf_vf v = cpuf_vf_mul(n == CPUF_VF_LANES ? cpuf_vf_load(xr + i) : cpuf_vf_load_n(xr + i, n), sv);
            if (wv) {
                cpuf_vf g = n == CPUF_VF_LANES ? cpuf_vf_load(wv + i) : cpuf_vf_load_n(wv + i, n);
                if (plus_one) g = cpuf_vf_add(one, g);
                v = cpuf_vf_mul(v, g);
            }
            if (n == CPUF_VF_LANES) cpuf_vf_store(yr + i, v);
            else cpuf_vf_store_n(yr + i, v, n);
        }
    }
}

/* ---- RoPE ------------------------------------------------------------------------------- */

void CPUF_FN(st_cpuf_rope)(st_tensor *dst, const st_tensor *x, const int32_t *positions, const st_rope_params *p) {
    /* x, dst F32 [head_dim, n_head, M]; positions [M] */
    ST_ASSERT(cpu_is_f32_rows(x) && cpu_is_f32_rows(dst) && cpu_same_shape(dst, x));
    ST_ASSERT(x->ne[3] == 1 && p != NULL);
    ST_ASSERT(p->mode == ST_ROPE_MODE_NORM || p->mode == ST_ROPE_MODE_NEOX);
    const int64_t head_dim = x->ne[0], n_head = x->ne[1], m_count = x->ne[2];
    const int64_t half = p->n_rot / 2;
    ST_ASSERT(p->n_rot >= 0 && p->n_rot % 2 == 0 && p->n_rot <= head_dim);
    ST_ASSERT(p->n_rot <= ROPE_MAX_ROT && p->freq_base > 0.0f);
    ST_ASSERT(m_count == 0 || positions != NULL);

    double inv_freq[ROPE_MAX_ROT / 2]; /* [n_rot/2]: base^(-2i/n_rot) / factor_i */
    for (int64_t i = 0; i < half; i++) {
        inv_freq[i] = pow((double)p->freq_base, -2.0 * (double)i / (double)p->n_rot);
        if (p->freq_factors) inv_freq[i] /= (double)p->freq_factors[i];
    }
    const bool neox = p->mode == ST_ROPE_MODE_NEOX;

#pragma omp parallel for num_threads(cpuf_threads()) schedule(static) \
    if (m_count * n_head * head_dim >= CPUF_PAR_MIN_ELEMS)
    for (int64_t m = 0; m < m_count; m++) {
        float c[ROPE_MAX_ROT / 2], s[ROPE_MAX_ROT / 2]; /* [n_rot/2] */
        const double pos = (double)positions[m] * (double)p->freq_scale;
        for (int64_t i = 0; i < half; i++) {
            const double theta = pos * inv_freq[i];
            c[i] = (float)(cos(theta) * (double)p->attn_factor);
            s[i] = (float)(sin(theta) * (double)p->attn_factor);
        }
        for (int64_t h = 0; h < n_head; h++) {
            const float *xr = (const float *)((const char *)x->data + (size_t)h * x->nb[1] + (size_t)m * x->nb[2]);
            float *yr = (float *)((char *)dst->data + (size_t)h * dst->nb[1] + (size_t)m * dst->nb[2]);
            int64_t i = 0;
            if (neox) { /* pairs (i, i + half): two contiguous halves */
                for (; i + CPUF_VF_LANES <= half; i += CPUF_VF_LANES) {
                    const cpuf_vf a = cpuf_vf_load(xr + i), b = cpuf_vf_load(xr + half + i);
                    const cpuf_vf cv = cpuf_vf_load(c + i), sv = cpuf_vf_load(s + i);
                    cpuf_vf_store(yr + i, cpuf_vf_sub(cpuf_vf_mul(a, cv), cpuf_vf_mul(b, sv)));
                    cpuf_vf_store(yr + half + i, cpuf_vf_add(cpuf_vf_mul(a, sv), cpuf_vf_mul(b, cv)));
                }
            }
            const int64_t step = neox ? 1 : 2, partner = neox ? half : 1;
            for (; i < half; i++) {
                const int64_t a = i * step, b = a + partner;
                const float xa = xr[a], xb = xr[b];
                yr[a] = xa * c[i] - xb * s[i];
                yr[b] = xa * s[i] + xb * c[i];
            }
            for (int64_t j = p->n_rot; j < head_dim; j++) yr[j] = xr[j];
        }
    }
}

/* ---- gated units -------------------------------------------------------------------------- */

typedef enum act { ACT_SILU, ACT_GELU_TANH } act;

/* act(g) = g * sigmoid(z): z = g for SiLU, z = 2 sqrt(2/pi) (g + 0.044715 g^3) for GELU-tanh */
CPUF_INLINE cpuf_vf activate(act a, cpuf_vf g) {
    cpuf_vf z = g;
    if (a == ACT_GELU_TANH) {
        const cpuf_vf g3 = cpuf_vf_mul(cpuf_vf_mul(g, g), g);
        z = cpuf_vf_mul(cpuf_vf_set1(2.0f * 0.79788456080286535588f), cpuf_vf_fma(cpuf_vf_set1(0.044715f), g3, g));
    }
    const cpuf_vf e = cpuf_vf_exp(cpuf_vf_sub(cpuf_vf_zero(), z));
    return cpuf_vf_div(g, cpuf_vf_add(cpuf_vf_set1(1.0f), e));
}

CPUF_INLINE void glu_row(act a, const float *g, const float *u, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += CPUF_VF_LANES) {
        const int k = n - i < CPUF_VF_LANES ? (int)(n - i) : CPUF_VF_LANES;
        if (k == CPUF_VF_LANES) {
            cpuf_vf_store(y + i, cpuf_vf_mul(activate(a, cpuf_vf_load(g + i)), cpuf_vf_load(u + i)));
        } else {
            cpuf_vf_store_n(y + i, cpuf_vf_mul(activate(a, cpuf_vf_load_n(g + i, k)), cpuf_vf_load_n(u + i, k)), k);
        }
    }
}

static void glu(st_tensor *dst, const st_tensor *gate, size_t gate_off, const st_tensor *up, size_t up_off, act a) {
    const int64_t n = dst->ne[0], n_rows = cpu_nrows(dst);
#pragma omp parallel for num_threads(cpuf_threads()) schedule(static) if (n * n_rows >= CPUF_PAR_MIN_ELEMS)
    for (int64_t r = 0; r < n_rows; r++) {
        const float *g = (const float *)(cpu_row(gate, r) + gate_off);
        const float *u = (const float *)(cpu_row(up, r) + up_off);
        float *y = (float *)cpu_row(dst, r);
        if (a == ACT_SILU) glu_row(ACT_SILU, g, u, y, n);
        else glu_row(ACT_GELU_TANH, g, u, y, n);
    }
}

static void glu_split(st_tensor *dst, const st_tensor *gate, const st_tensor *up, act a) {
    /* dst, gate, up F32 [F, ...] */
    ST_ASSERT(cpu_is_f32_rows(dst) && cpu_is_f32_rows(gate) && cpu_is_f32_rows(up));
    ST_ASSERT(cpu_same_shape(dst, gate) && cpu_same_shape(dst, up));
    glu(dst, gate, 0, up, 0, a);
}

void CPUF_FN(st_cpuf_swiglu)(st_tensor *dst, const st_tensor *gate, const st_tensor *up) {
    glu_split(dst, gate, up, ACT_SILU);
}
void CPUF_FN(st_cpuf_geglu)(st_tensor *dst, const st_tensor *gate, const st_tensor *up) {
    glu_split(dst, gate, up, ACT_GELU_TANH);
}
void CPUF_FN(st_cpuf_swiglu_fused)(st_tensor *dst, const st_tensor *gu) {
    /* gu F32 [2F, ...]: gate = gu[0:F], up = gu[F:2F]; dst F32 [F, ...] */
    ST_ASSERT(cpu_is_f32_rows(dst) && cpu_is_f32_rows(gu));
    ST_ASSERT(gu->ne[0] == 2 * dst->ne[0] && gu->ne[1] == dst->ne[1] && gu->ne[2] == dst->ne[2] &&
              gu->ne[3] == dst->ne[3]);
    glu(dst, gu, 0, gu, (size_t)dst->ne[0] * sizeof(float), ACT_SILU);
}

/* ---- add, mul, scale ---------------------------------------------------------------------- */

typedef enum binop { BIN_ADD, BIN_MUL } binop;

CPUF_INLINE cpuf_vf bin(binop op, cpuf_vf a, cpuf_vf b) {
    return op == BIN_ADD ? cpuf_vf_add(a, b) : cpuf_vf_mul(a, b);
}

CPUF_INLINE void bin_row(binop op, const float *a, const float *b, bool b_scalar, float *y, int64_t n) {
    const cpuf_vf bs = cpuf_vf_set1(b[0]);
    for (int64_t i = 0; i < n; i += CPUF_VF_LANES) {
        const int k = n - i < CPUF_VF_LANES ? (int)(n - i) : CPUF_VF_LANES;
        if (k == CPUF_VF_LANES) {
            cpuf_vf_store(y + i, bin(op, cpuf_vf_load(a + i), b_scalar ? bs : cpuf_vf_load(b + i)));
        } else {
            cpuf_vf_store_n(y + i, bin(op, cpuf_vf_load_n(a + i, k), b_scalar ? bs : cpuf_vf_load_n(b + i, k)), k);
        }
    }
}

static void binary(st_tensor *dst, const st_tensor *a, const st_tensor *b, binop op) {
    /* dst, a F32 [D, ...]; b F32 with each ne[i] equal to a's or 1 (broadcast) */
    ST_ASSERT(cpu_is_f32_rows(dst) && cpu_is_f32_rows(a) && cpu_is_f32_rows(b));
    ST_ASSERT(cpu_same_shape(dst, a));
    for (int i = 0; i < ST_MAX_DIMS; i++) ST_ASSERT(b->ne[i] == a->ne[i] || b->ne[i] == 1);
    const int64_t n = a->ne[0], n_rows = cpu_nrows(a);
    const bool b_scalar = b->ne[0] == 1; /* a scalar per row broadcasts along it */
    if (n == 0) return;

#pragma omp parallel for num_threads(cpuf_threads()) schedule(static) if (n * n_rows >= CPUF_PAR_MIN_ELEMS)
    for (int64_t r = 0; r < n_rows; r++) {
        const int64_t i1 = r % a->ne[1], i2 = (r / a->ne[1]) % a->ne[2], i3 = r / (a->ne[1] * a->ne[2]);
        const float *br = (const float *)((const char *)b->data + (size_t)(i1 % b->ne[1]) * b->nb[1] +
                                          (size_t)(i2 % b->ne[2]) * b->nb[2] + (size_t)(i3 % b->ne[3]) * b->nb[3]);
        const float *ar = (const float *)cpu_row(a, r);
        float *yr = (float *)cpu_row(dst, r);
        if (op == BIN_ADD) bin_row(BIN_ADD, ar, br, b_scalar, yr, n);
        else bin_row(BIN_MUL, ar, br, b_scalar, yr, n);
    }
}

void CPUF_FN(st_cpuf_add)(st_tensor *dst, const st_tensor *a, const st_tensor *b) { binary(dst, a, b, BIN_ADD); }
void CPUF_FN(st_cpuf_mul)(st_tensor *dst, const st_tensor *a, const st_tensor *b) { binary(dst, a, b, BIN_MUL); }

void CPUF_FN(st_cpuf_scale)(st_tensor *dst, const st_tensor *x, float s) {
    ST_ASSERT(cpu_is_f32_rows(x) && cpu_is_f32_rows(dst) && cpu_same_shape(dst, x));
    const int64_t n = x->ne[0], n_rows = cpu_nrows(x);
    if (n == 0) return;
#pragma omp parallel for num_threads(cpuf_threads()) schedule(static) if (n * n_rows >= CPUF_PAR_MIN_ELEMS)
    for (int64_t r = 0; r < n_rows; r++)
        bin_row(BIN_MUL, (const float *)cpu_row(x, r), &s, true, (float *)cpu_row(dst, r), n);
}
