/*
 * The fast path's row-wise ops in every variant this CPU runs: RMSNorm, RoPE, the gated
 * units, add/mul/scale and the KV store, on rows of odd lengths (a partial vector at the
 * end), strided views ([head_dim, n_head, M] with gaps) and in place.
 *
 * TOLERANCES (u = 2^-24), against a double reference or the reference op:
 *  - RMSNorm: ((D + 2) / 2 + 6) u (|x s| (|g| + |w|)), g = w or 1 + w: the sum of squares
 *    in f32 lanes is within (D + 2) u of the exact one (relative), the inverse square
 *    root halves that, and the products x s, (1 + w) and x s g round once each.
 *  - RoPE: 2u (|x_a c| + |x_b s|) against the reference op: the rotations are the same
 *    f32 products and sums; only a fused multiply-add (where a compiler contracts one)
 *    could round once less.
 *  - SiLU and GELU-tanh gates, y = g sigmoid(z) u: (8u (exp within 4 ulp) + 4u |z| (z's
 *    own rounding moves sigmoid(z) by up to |dz| relative) + 6u) |y| + 2u |g u|, the last
 *    term for the double reference's tanh form, whose 1 + tanh(z/2) cancels for z < 0.
 *  - add, mul, scale and the KV store: bit-identical to the reference op (one IEEE
 *    operation or one conversion an element, both rounding to nearest even).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_cpu_fast_common.h"
#include "test_cpu_ops_common.h"

static const int64_t lengths[] = {1, 7, 16, 33, 100, 640};

static void test_rms_norm(void **state) {
    (void)state;
    const tf_variants v = tf_variants_get();
    assert_true(v.n >= 1);
    for (int iv = 0; iv < v.n; iv++) {
        for (size_t il = 0; il < sizeof(lengths) / sizeof(lengths[0]); il++) {
            const int64_t d = lengths[il];
            for (int mode = 0; mode < 3; mode++) { /* w, 1 + w, no w */
                tt x = tt_new(ST_TYPE_F32, d, 3, 2, 1, 8), y = tt_new(ST_TYPE_F32, d, 3, 2, 1, 4);
                tt w = tt_new(ST_TYPE_F32, d, 1, 1, 1, 0);
                tt_fill(&x, -3, 3);
                tt_fill(&w, -1.5, 1.5);
                v.ops[iv]->rms_norm(&y.t, &x.t, mode < 2 ? &w.t : NULL, 1e-6f, mode == 1);
                const int64_t rows = 6;
                double *ref = malloc((size_t)(d * rows) * sizeof(double));
                double *bound = malloc((size_t)(d * rows) * sizeof(double));
                for (int64_t r = 0; r < rows; r++) {
                    double ss = 0;
                    for (int64_t i = 0; i < d; i++) ss += tt_get(&x, r * d + i) * tt_get(&x, r * d + i);
                    const double s = 1.0 / sqrt(ss / (double)d + 1e-6);
                    for (int64_t i = 0; i < d; i++) {
                        const double wv = tt_get(&w, i), g = mode == 0 ? wv : mode == 1 ? 1 + wv : 1;
                        const double xs = tt_get(&x, r * d + i) * s;
                        ref[r * d + i] = xs * g;
                        bound[r * d + i] = ((double)(d + 2) / 2 + 6) * TT_U32 * fabs(xs) * (fabs(g) + fabs(wv));
                    }
                }
                char what[96];
                snprintf(what, sizeof(what), "%s rms_norm D=%lld mode %d", v.ops[iv]->name, (long long)d, mode);
                if (!tt_close(what, &y, ref, bound)) fail_msg("%s: out of bound", what);
                assert_true(tt_gaps_untouched(&y));
                /* in place gives the same bits */
                v.ops[iv]->rms_norm(&x.t, &x.t, mode < 2 ? &w.t : NULL, 1e-6f, mode == 1);
                assert_true(tt_bit_equal(&x, &y));
                free(ref);
                free(bound);
                tt_free(&x);
                tt_free(&y);
                tt_free(&w);
            }
        }
    }
}

static void test_rope(void **state) {
    (void)state;
    const tf_variants v = tf_variants_get();
    const st_cpu_op_table *exact = st_cpu_ops_exact();
    static const float factors[32] = {1.0f, 1.5f, 2.0f, 4.0f, 1.0f, 1.25f, 3.0f, 8.0f, 1.0f, 1.0f, 2.5f,
                                      1.0f, 6.0f, 1.0f, 1.0f, 2.0f, 1.0f, 1.5f, 2.0f, 4.0f, 1.0f, 1.25f,
                                      3.0f, 8.0f, 1.0f, 1.0f, 2.5f, 1.0f, 6.0f, 1.0f, 1.0f, 2.0f};
    static const int64_t hds[][2] = {{64, 64}, {40, 24}, {256, 256}, {6, 2}}; /* head_dim, n_rot */
    const int32_t pos[3] = {0, 17, 30000};
    for (int iv = 0; iv < v.n; iv++)
        for (int ih = 0; ih < 4; ih++)
            for (int mode = 0; mode < 2; mode++) {
                const int64_t hd = hds[ih][0];
                st_rope_params p = st_rope_params_default(mode ? ST_ROPE_MODE_NEOX : ST_ROPE_MODE_NORM,
                                                          (int32_t)hds[ih][1], 10000.0f);
                if (ih == 1) {
                    p.freq_factors = factors;
                    p.attn_factor = 1.1f;
                    p.freq_scale = 0.25f;
                }
                tt x = tt_new(ST_TYPE_F32, hd, 3, 3, 1, 8), y = tt_new(ST_TYPE_F32, hd, 3, 3, 1, 4);
                tt r = tt_new(ST_TYPE_F32, hd, 3, 3, 1, 0);
                tt_fill(&x, -2, 2);
                v.ops[iv]->rope(&y.t, &x.t, pos, &p);
                exact->rope(&r.t, &x.t, pos, &p);
                double *ref = malloc((size_t)tt_count(&x) * sizeof(double));
                double *bound = malloc((size_t)tt_count(&x) * sizeof(double));
                for (int64_t i = 0; i < tt_count(&x); i++) {
                    ref[i] = tt_get(&r, i);
                    /* |x_a c| + |x_b s| <= |x_a| + |x_b| (times the attention factor): bound by
                     * the pair's magnitudes, found through the partner index */
                    const int64_t d = i % hd, base = i - d, half = p.n_rot / 2;
                    int64_t partner = d;
                    if (d < p.n_rot) partner = mode ? (d < half ? d + half : d - half) : (d % 2 ? d - 1 : d + 1);
                    bound[i] = 2 * TT_U32 * 1.1 * (fabs(tt_get(&x, i)) + fabs(tt_get(&x, base + partner)));
                }
                char what[96];
                snprintf(what, sizeof(what), "%s rope hd=%lld n_rot=%lld %s", v.ops[iv]->name, (long long)hd,
                         (long long)p.n_rot, mode ? "neox" : "norm");
                if (!tt_close(what, &y, ref, bound)) fail_msg("%s: out of bound", what);
                assert_true(tt_gaps_untouched(&y));
                v.ops[iv]->rope(&x.t, &x.t, pos, &p); /* in place */
                assert_true(tt_bit_equal(&x, &y));
                free(ref);
                free(bound);
                tt_free(&x);
                tt_free(&y);
                tt_free(&r);
            }
}

static void test_gated(void **state) {
    (void)state;
    const tf_variants v = tf_variants_get();
    for (int iv = 0; iv < v.n; iv++)
        for (size_t il = 0; il < sizeof(lengths) / sizeof(lengths[0]); il++)
            for (int act = 0; act < 3; act++) { /* swiglu, geglu, swiglu over one fused tensor */
                const int64_t f = lengths[il];
                tt gu = tt_new(ST_TYPE_F32, 2 * f, 2, 3, 1, 8);
                tt_fill(&gu, -12, 12);
                st_tensor g = gu.t, u = gu.t; /* the halves as views */
                g.ne[0] = u.ne[0] = f;
                u.data = (char *)gu.t.data + (size_t)f * sizeof(float);
                tt y = tt_new(ST_TYPE_F32, f, 2, 3, 1, 4);
                if (act == 0) v.ops[iv]->swiglu(&y.t, &g, &u);
                else if (act == 1) v.ops[iv]->geglu(&y.t, &g, &u);
                else v.ops[iv]->swiglu_fused(&y.t, &gu.t);
                double *ref = malloc((size_t)tt_count(&y) * sizeof(double));
                double *bound = malloc((size_t)tt_count(&y) * sizeof(double));
                for (int64_t r = 0; r < 6; r++)
                    for (int64_t i = 0; i < f; i++) {
                        const double gv = tt_get(&gu, r * 2 * f + i), uv = tt_get(&gu, r * 2 * f + f + i);
                        double z = gv, a;
                        if (act == 1) {
                            const double t = 0.79788456080286535588 * (gv + 0.044715 * gv * gv * gv);
                            z = 2 * t;
                            a = 0.5 * gv * (1 + tanh(t));
                        } else {
                            a = gv / (1 + exp(-gv));
                        }
                        ref[r * f + i] = a * uv;
                        bound[r * f + i] = (8 + 4 * fabs(z) + 6) * TT_U32 * fabs(a * uv) + 2 * TT_U32 * fabs(gv * uv);
                    }
                char what[96];
                snprintf(what, sizeof(what), "%s %s F=%lld", v.ops[iv]->name,
                         act == 0 ? "swiglu" : act == 1 ? "geglu" : "swiglu_fused", (long long)f);
                if (!tt_close(what, &y, ref, bound)) fail_msg("%s: out of bound", what);
                assert_true(tt_gaps_untouched(&y));
                free(ref);
                free(bound);
                tt_free(&gu);
                tt_free(&y);
            }
}

static void test_add_mul_scale(void **state) {
    (void)state;
    const tf_variants v = tf_variants_get();
    const st_cpu_op_table *exact = st_cpu_ops_exact();
    for (int iv = 0; iv < v.n; iv++)
        for (size_t il = 0; il < sizeof(lengths) / sizeof(lengths[0]); il++) {
            const int64_t d = lengths[il];
            tt a = tt_new(ST_TYPE_F32, d, 3, 2, 1, 8);
            tt_fill(&a, -4, 4);
            /* b: the full shape, a row vector, one vector per M (broadcast over heads), a scalar a row */
            const int64_t shapes[4][3] = {{d, 3, 2}, {d, 1, 1}, {d, 1, 2}, {1, 3, 2}};
            for (int ib = 0; ib < 4; ib++) {
                tt b = tt_new(ST_TYPE_F32, shapes[ib][0], shapes[ib][1], shapes[ib][2], 1, 4);
                tt_fill(&b, -4, 4);
                for (int op = 0; op < 2; op++) {
                    tt y = tt_new(ST_TYPE_F32, d, 3, 2, 1, 4), r = tt_new(ST_TYPE_F32, d, 3, 2, 1, 4);
                    (op ? v.ops[iv]->mul : v.ops[iv]->add)(&y.t, &a.t, &b.t);
                    (op ? exact->mul : exact->add)(&r.t, &a.t, &b.t);
                    if (!tt_bit_equal(&y, &r))
                        fail_msg("%s %s D=%lld b shape %d differs from the reference", v.ops[iv]->name,
                                 op ? "mul" : "add", (long long)d, ib);
                    assert_true(tt_gaps_untouched(&y));
                    tt_free(&y);
                    tt_free(&r);
                }
                tt_free(&b);
            }
            tt y = tt_new(ST_TYPE_F32, d, 3, 2, 1, 4), r = tt_new(ST_TYPE_F32, d, 3, 2, 1, 4);
            v.ops[iv]->scale(&y.t, &a.t, 0.3f);
            exact->scale(&r.t, &a.t, 0.3f);
            assert_true(tt_bit_equal(&y, &r));
            tt_free(&y);
            tt_free(&r);
            tt_free(&a);
        }
}

static void test_kv_store(void **state) {
    (void)state;
    const tf_variants v = tf_variants_get();
    const st_cpu_op_table *exact = st_cpu_ops_exact();
    const int32_t pos[3] = {4, 0, 9};
    for (int iv = 0; iv < v.n; iv++)
        for (int ct = 0; ct < 2; ct++)
            for (size_t il = 0; il < sizeof(lengths) / sizeof(lengths[0]); il++) {
                const int64_t hd = lengths[il];
                const st_type type = ct ? ST_TYPE_F32 : ST_TYPE_F16;
                tt x = tt_new(ST_TYPE_F32, hd, 2, 3, 1, 8);
                tt_fill(&x, -70000, 70000); /* overflows f16 at the ends: infinities both ways */
                tt c = tt_new(type, hd, 2, 10, 1, 6), r = tt_new(type, hd, 2, 10, 1, 6);
                st_error err = {0};
                assert_int_equal(v.ops[iv]->kv_store(&c.t, &x.t, pos, &err), ST_OK);
                assert_int_equal(exact->kv_store(&r.t, &x.t, pos, &err), ST_OK);
                assert_memory_equal(c.mem, r.mem, c.bytes); /* written rows, untouched rows and gaps */
                tt_free(&x);
                tt_free(&c);
                tt_free(&r);
            }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rms_norm),      cmocka_unit_test(test_rope), cmocka_unit_test(test_gated),
        cmocka_unit_test(test_add_mul_scale), cmocka_unit_test(test_kv_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
