/*
 * CPU ops: activations, gated units (separate and fused gate_up), add/mul with
 * broadcast, scale, and top-k expert routing, against float64 references, with
 * strided operands and 1 and 2 threads (bit-identical).
 *
 * TOLERANCES (per element, u = 2^-24): the ops evaluate in f32 with expf/tanhf (glibc:
 * within 1-2 ulp) and a handful of roundings:
 *  - silu x/(1+e^-x): exp 2u, add u, divide u -> 8u * |y| (4u needed, 2x margin);
 *  - gelu_tanh: the cubic (3 roundings) feeds tanh, whose derivative is <= 1, so the
 *    argument error moves tanh by <= 5u * |arg|; plus tanh 2u, 1+t, the products:
 *    |y - y_ref| <= 16u * (|y| + 0.5 |x| (|arg| + 1));
 *  - swiglu/geglu: the activation's bound times |up|, plus one product rounding (u |y|);
 *  - add/mul/scale: one rounding: u * |y| (checked exactly against the f32 operation too);
 *  - routing weights: expf 2u, the double sum, one or two divisions: 8u * w;
 *  - moe_combine, an f32 sum of k products: (k + 2) u * sum_j |w_j x_j| (as mul_mat).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_cpu_ops_common.h"

static double ref_silu(double x) { return x / (1.0 + exp(-x)); }
static double silu_bound(double x) { return 8 * TT_U32 * fabs(ref_silu(x)); }
static double gelu_arg(double x) { return sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x); }
static double ref_gelu(double x) { return 0.5 * x * (1.0 + tanh(gelu_arg(x))); }
static double gelu_bound(double x) {
    return 16 * TT_U32 * (fabs(ref_gelu(x)) + 0.5 * fabs(x) * (fabs(gelu_arg(x)) + 1.0));
}

static void test_activations(void **state) {
    (void)state;
    const int64_t f = 37, m = 5;
    tt x = tt_new(ST_TYPE_F32, f, m, 1, 1, 20);
    tt_fill(&x, -9, 9);
    tt_set(&x, 0, -100.0); /* e^100 overflows f32: silu must still be -0, not NaN */
    tt_set(&x, 1, 100.0);
    double *ref = malloc(sizeof(double) * (size_t)(f * m)), *bound = malloc(sizeof(double) * (size_t)(f * m));
    for (int op = 0; op < 2; op++) {
        for (int64_t i = 0; i < f * m; i++) {
            double v = tt_get(&x, i);
            ref[i] = op ? ref_gelu(v) : ref_silu(v);
            bound[i] = (op ? gelu_bound(v) : silu_bound(v)) + 1e-37;
        }
        tt out[2];
        for (int th = 0; th < 2; th++) {
            st_cpu_set_threads(th + 1);
            out[th] = tt_new(ST_TYPE_F32, f, m, 1, 1, th ? 0 : 8);
            if (op) st_cpu_gelu_tanh(&out[th].t, &x.t);
            else st_cpu_silu(&out[th].t, &x.t);
            assert_true(tt_close(op ? "gelu_tanh" : "silu", &out[th], ref, bound));
            assert_true(tt_gaps_untouched(&out[th]));
        }
        assert_true(tt_bit_equal(&out[0], &out[1]));
        tt_free(&out[0]);
        tt_free(&out[1]);
    }
    tt_free(&x);
    free(ref);
    free(bound);
    st_cpu_set_threads(0);
}

static void test_gated_units(void **state) {
    (void)state;
    const int64_t f = 19, m = 5;
    /* fused gate_up [2F, M] (gate first: phi3), and separate strided views of it */
    tt gu = tt_new(ST_TYPE_F32, 2 * f, m, 1, 1, 28);
    tt_fill(&gu, -6, 6);
    st_tensor gate = gu.t, up = gu.t;
    gate.ne[0] = up.ne[0] = f;
    up.data = (char *)gu.t.data + f * sizeof(float);
    double *ref = malloc(sizeof(double) * (size_t)(f * m)), *bound = malloc(sizeof(double) * (size_t)(f * m));
    for (int op = 0; op < 2; op++) { /* 0 swiglu, 1 geglu */
        for (int64_t r = 0; r < m; r++)
            for (int64_t i = 0; i < f; i++) {
                double g = tt_get(&gu, r * 2 * f + i), u = tt_get(&gu, r * 2 * f + f + i);
                double a = op ? ref_gelu(g) : ref_silu(g);
                ref[r * f + i] = a * u;
                bound[r * f + i] = (op ? gelu_bound(g) : silu_bound(g)) * fabs(u) +
                                   TT_U32 * fabs(a * u) + 1e-37;
            }
        tt out[3];
        for (int v = 0; v < 3; v++) { /* split 1 thread, split 2 threads, fused */
            st_cpu_set_threads(v == 1 ? 2 : 1);
            out[v] = tt_new(ST_TYPE_F32, f, m, 1, 1, v == 0 ? 4 : 0);
            if (v < 2) {
                if (op) st_cpu_geglu(&out[v].t, &gate, &up);
                else st_cpu_swiglu(&out[v].t, &gate, &up);
            } else {
                if (op) st_cpu_geglu_fused(&out[v].t, &gu.t);
                else st_cpu_swiglu_fused(&out[v].t, &gu.t);
            }
            assert_true(tt_close(op ? "geglu" : "swiglu", &out[v], ref, bound));
            assert_true(tt_gaps_untouched(&out[v]));
        }
        assert_true(tt_bit_equal(&out[0], &out[1]) && tt_bit_equal(&out[0], &out[2]));
        for (int v = 0; v < 3; v++) tt_free(&out[v]);
    }
    tt_free(&gu);
    free(ref);
    free(bound);
    st_cpu_set_threads(0);
}

static void test_add_mul_scale(void **state) {
    (void)state;
    const int64_t d = 18, h = 3, m = 5;
    tt a = tt_new(ST_TYPE_F32, d, h, m, 1, 12);
    tt_fill(&a, -4, 4);
    /* b shapes: same shape; a [D] vector; [D, 1, M] (per token, over heads) */
    const int64_t bshape[3][3] = {{d, h, m}, {d, 1, 1}, {d, 1, m}};
    for (int bs = 0; bs < 3; bs++) {
        tt b = tt_new(ST_TYPE_F32, bshape[bs][0], bshape[bs][1], bshape[bs][2], 1, 8);
        tt_fill(&b, -4, 4);
        for (int op = 0; op < 2; op++) {
            tt out = tt_new(ST_TYPE_F32, d, h, m, 1, 0);
            if (op) st_cpu_mul(&out.t, &a.t, &b.t);
            else st_cpu_add(&out.t, &a.t, &b.t);
            for (int64_t t = 0; t < m; t++)
                for (int64_t j = 0; j < h; j++)
                    for (int64_t i = 0; i < d; i++) {
                        int64_t ia = (t * h + j) * d + i;
                        int64_t ib = ((t % bshape[bs][2]) * bshape[bs][1] + (j % bshape[bs][1])) * d + i;
                        float fa = (float)tt_get(&a, ia), fb = (float)tt_get(&b, ib);
                        float want = op ? fa * fb : fa + fb; /* one f32 rounding, exactly */
                        assert_true(tt_get(&out, ia) == (double)want);
                    }
            assert_true(tt_gaps_untouched(&out));
            tt_free(&out);
        }
        tt_free(&b);
    }
    tt out = tt_new(ST_TYPE_F32, d, h, m, 1, 4);
    st_cpu_scale(&out.t, &a.t, -0.37f);
    for (int64_t i = 0; i < d * h * m; i++) assert_true(tt_get(&out, i) == (double)(-0.37f * (float)tt_get(&a, i)));
    st_cpu_scale(&a.t, &a.t, -0.37f); /* in place */
    assert_true(tt_bit_equal(&a, &out));
    tt_free(&out);
    tt_free(&a);
}

static void test_topk_route(void **state) {
    (void)state;
    const int64_t e = 13, m = 5;
    const int32_t k = 4;
    tt logits = tt_new(ST_TYPE_F32, e, m, 1, 1, 8);
    tt_fill(&logits, -3, 3);
    for (int64_t i = 0; i < e; i++) tt_set(&logits, 2 * e + i, -1.0 - 0.1 * (double)i);
    tt_set(&logits, 2 * e + 5, 1.25); /* a tie in token 2: the lower index ranks first */
    tt_set(&logits, 2 * e + 9, 1.25);
    tt_set(&logits, 2 * e + 0, 2.5);
    tt_set(&logits, 2 * e + 1, 2.0);
    for (int mode = 0; mode < 4; mode++) {
        bool softmax_first = mode & 1, normalize = mode & 2;
        int32_t ids[2][5 * 4];
        tt w[2];
        for (int th = 0; th < 2; th++) {
            st_cpu_set_threads(th + 1);
            w[th] = tt_new(ST_TYPE_F32, k, m, 1, 1, th ? 0 : 4);
            st_cpu_topk_route(ids[th], &w[th].t, &logits.t, k, softmax_first, normalize);
            assert_true(tt_gaps_untouched(&w[th]));
        }
        assert_memory_equal(ids[0], ids[1], sizeof(ids[0]));
        /* token 2: 2.5 (expert 0), 2.0 (1), then the tie 1.25 at experts 5 and 9 */
        assert_int_equal(ids[0][2 * k + 0], 0);
        assert_int_equal(ids[0][2 * k + 1], 1);
        assert_int_equal(ids[0][2 * k + 2], 5);
        assert_int_equal(ids[0][2 * k + 3], 9);
        assert_true(tt_bit_equal(&w[0], &w[1]));
        for (int64_t t = 0; t < m; t++) {
            /* reference: rank all experts (value desc, index asc) */
            int32_t order[13];
            for (int32_t i = 0; i < e; i++) order[i] = i;
            for (int32_t i = 0; i < e; i++)
                for (int32_t j = i + 1; j < e; j++) {
                    double li = tt_get(&logits, t * e + order[i]), lj = tt_get(&logits, t * e + order[j]);
                    if (lj > li || (lj == li && order[j] < order[i])) {
                        int32_t s = order[i];
                        order[i] = order[j];
                        order[j] = s;
                    }
                }
            double mx = tt_get(&logits, t * e + order[0]), all = 0, top = 0, wref[4], wsum = 0;
            for (int32_t i = 0; i < e; i++) all += exp(tt_get(&logits, t * e + i) - mx);
            for (int32_t j = 0; j < k; j++) top += exp(tt_get(&logits, t * e + order[j]) - mx);
            for (int32_t j = 0; j < k; j++) {
                wref[j] = exp(tt_get(&logits, t * e + order[j]) - mx) / (softmax_first ? all : top);
                wsum += wref[j];
            }
            for (int32_t j = 0; j < k; j++) {
                if (normalize) wref[j] /= wsum;
                assert_int_equal(ids[0][t * k + j], order[j]);
                double got = tt_get(&w[0], t * k + j);
                if (!(fabs(got - wref[j]) <= 8 * TT_U32 * wref[j]))
                    fail_msg("route mode %d token %lld slot %d: %.9g vs %.9g", mode, (long long)t, j, got, wref[j]);
            }
        }
        tt_free(&w[0]);
        tt_free(&w[1]);
    }
    tt_free(&logits);
    st_cpu_set_threads(0);
}

/* NaN router logits (a model with NaN weights) rank below every number: they are chosen
 * only when fewer than k logits are numbers, the softmax over all experts turns every
 * weight NaN, and nothing aborts. */
static void test_topk_route_nan(void **state) {
    (void)state;
    const int64_t e = 6, m = 2;
    const int32_t k = 2;
    tt logits = tt_new(ST_TYPE_F32, e, m, 1, 1, 0);
    const double l0[6] = {NAN, 1.0, NAN, 0.5, -1.0, 2.0};
    for (int64_t i = 0; i < e; i++) {
        tt_set(&logits, i, l0[i]);
        tt_set(&logits, e + i, i == 4 ? 3.0 : NAN); /* token 1: one number */
    }
    for (int softmax_first = 0; softmax_first < 2; softmax_first++) {
        tt w = tt_new(ST_TYPE_F32, k, m, 1, 1, 0);
        int32_t ids[2 * 2];
        st_cpu_topk_route(ids, &w.t, &logits.t, k, softmax_first, true);
        assert_int_equal(ids[0], 5); /* token 0: 2.0, 1.0 */
        assert_int_equal(ids[1], 1);
        assert_int_equal(ids[2], 4); /* token 1: 3.0, then the first NaN */
        assert_int_equal(ids[3], 0);
        assert_true(softmax_first ? isnan(tt_get(&w, 0)) && isnan(tt_get(&w, 1))
                                  : !isnan(tt_get(&w, 0)) && !isnan(tt_get(&w, 1)));
        assert_true(isnan(tt_get(&w, 2)) && isnan(tt_get(&w, 3)));
        tt_free(&w);
    }
    tt_free(&logits);
}

static void test_moe_combine(void **state) {
    (void)state;
    const int64_t d = 18, k = 3, m = 5;
    tt src = tt_new(ST_TYPE_F32, d, k, m, 1, 16); /* [D, k, M]: mul_mat_id's output */
    tt w = tt_new(ST_TYPE_F32, k, m, 1, 1, 4);   /* [k, M]: the routing weights */
    tt_fill(&src, -3, 3);
    tt_fill(&w, 0, 1);
    double *ref = malloc(sizeof(double) * (size_t)(d * m)), *bound = malloc(sizeof(double) * (size_t)(d * m));
    for (int64_t t = 0; t < m; t++)
        for (int64_t i = 0; i < d; i++) {
            double s = 0, a = 0;
            for (int64_t j = 0; j < k; j++) {
                double p = tt_get(&w, t * k + j) * tt_get(&src, (t * k + j) * d + i);
                s += p;
                a += fabs(p);
            }
            ref[t * d + i] = s;
            bound[t * d + i] = (double)(k + 2) * TT_U32 * a + 1e-37;
        }
    tt out[2];
    for (int th = 0; th < 2; th++) {
        st_cpu_set_threads(th + 1);
        out[th] = tt_new(ST_TYPE_F32, d, m, 1, 1, th ? 0 : 8);
        st_cpu_moe_combine(&out[th].t, &src.t, &w.t);
        assert_true(tt_close("moe_combine", &out[th], ref, bound));
        assert_true(tt_gaps_untouched(&out[th]));
    }
    assert_true(tt_bit_equal(&out[0], &out[1]));
    tt_free(&out[0]);
    tt_free(&out[1]);
    tt_free(&src);
    tt_free(&w);
    free(ref);
    free(bound);
    st_cpu_set_threads(0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_gated_units),
        cmocka_unit_test(test_add_mul_scale),
        cmocka_unit_test(test_topk_route),
        cmocka_unit_test(test_topk_route_nan),
        cmocka_unit_test(test_moe_combine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
