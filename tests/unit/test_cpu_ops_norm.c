/*
 * CPU ops: RMSNorm, RoPE and softmax against a float64 reference, on odd shapes, packed
 * and strided (non-contiguous) operands, 1 and 2 threads (bit-identical).
 *
 * TOLERANCES (per element, u = 2^-24):
 *  - RMSNorm: the sum of squares is in double (error ~1e-16, negligible); then the f32
 *    scale s is rounded once (u), x*s once (u), *w or *(1+w) once or twice (2u):
 *        |y - y_ref| <= 6u * |x * s_ref * w_eff|  (4u needed, 2u margin).
 *  - RoPE: cos and sin rounded to f32 from double (u each, relative), two products and
 *    one sum rounded (3u): |y - y_ref| <= 6u * (|x_a| + |x_b|) * attn_factor.
 *  - softmax: scale*x rounded (u relative to |scale x|), minus the max rounded (u relative
 *    to |scale x| + |max|), expf within 1 ulp, sum in double, final division rounded:
 *        |p - p_ref| <= p_ref * (4u * (|scale x| + |max|) + 4u).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_cpu_ops_common.h"

static void test_rms_norm(void **state) {
    (void)state;
    const int64_t d = 18, n_head = 6, m = 5;
    const float eps = 1e-6f;
    for (int variant = 0; variant < 3; variant++) { /* no weight, w, 1 + w */
        /* per head: x viewed [head_dim, n_head, M], out of rows of a larger buffer */
        tt x = tt_new(ST_TYPE_F32, d, n_head, m, 1, 24);
        tt w = tt_new(ST_TYPE_F32, d, 1, 1, 1, 0);
        tt_fill(&x, -2, 2);
        tt_fill(&w, -1.5, 1.5);
        int64_t rows = n_head * m;
        double *ref = malloc(sizeof(double) * (size_t)(d * rows));
        double *bound = malloc(sizeof(double) * (size_t)(d * rows));
        for (int64_t r = 0; r < rows; r++) {
            double ss = 0;
            for (int64_t i = 0; i < d; i++) ss += tt_get(&x, r * d + i) * tt_get(&x, r * d + i);
            double s = 1.0 / sqrt(ss / (double)d + (double)eps);
            for (int64_t i = 0; i < d; i++) {
                double weff = variant == 0 ? 1.0 : variant == 1 ? tt_get(&w, i) : 1.0 + tt_get(&w, i);
                ref[r * d + i] = tt_get(&x, r * d + i) * s * weff;
                bound[r * d + i] = 6 * TT_U32 * fabs(ref[r * d + i]);
            }
        }
        tt out[2];
        for (int th = 0; th < 2; th++) {
            st_cpu_set_threads(th + 1);
            out[th] = tt_new(ST_TYPE_F32, d, n_head, m, 1, th ? 0 : 40);
            st_cpu_rms_norm(&out[th].t, &x.t, variant ? &w.t : NULL, eps, variant == 2);
            assert_true(tt_close("rms_norm", &out[th], ref, bound));
            assert_true(tt_gaps_untouched(&out[th]));
        }
        assert_true(tt_bit_equal(&out[0], &out[1]));
        /* in place */
        st_cpu_rms_norm(&x.t, &x.t, variant ? &w.t : NULL, eps, variant == 2);
        assert_true(tt_bit_equal(&x, &out[0]));
        tt_free(&out[0]);
        tt_free(&out[1]);
        tt_free(&x);
        tt_free(&w);
        free(ref);
        free(bound);
    }
    st_cpu_set_threads(0);
}

static void check_rope(st_rope_mode mode, int32_t n_rot, bool factors, float attn_factor) {
    const int64_t hd = 18, n_head = 6, m = 5;
    const int32_t pos[5] = {0, 1, 7, 300, 4097};
    float ff[16];
    for (int i = 0; i < n_rot / 2; i++) ff[i] = 1.0f + 0.37f * (float)i;
    st_rope_params p = st_rope_params_default(mode, n_rot, 10000.0f);
    p.freq_factors = factors ? ff : NULL;
    p.attn_factor = attn_factor;
    p.freq_scale = factors ? 0.5f : 1.0f;

    tt x = tt_new(ST_TYPE_F32, hd, n_head, m, 1, 16);
    tt_fill(&x, -1, 1);
    double *ref = malloc(sizeof(double) * (size_t)(hd * n_head * m));
    double *bound = malloc(sizeof(double) * (size_t)(hd * n_head * m));
    for (int64_t t = 0; t < m; t++)
        for (int64_t h = 0; h < n_head; h++) {
            int64_t base = (t * n_head + h) * hd;
            for (int64_t i = n_rot; i < hd; i++) {
                ref[base + i] = tt_get(&x, base + i);
                bound[base + i] = 0;
            }
            for (int64_t i = 0; i < n_rot / 2; i++) {
                /* NORM pairs (2i, 2i+1); NEOX pairs (i, i + n_rot/2) */
                int64_t a = mode == ST_ROPE_MODE_NORM ? 2 * i : i;
                int64_t b = mode == ST_ROPE_MODE_NORM ? 2 * i + 1 : i + n_rot / 2;
                double theta = pos[t] * (double)p.freq_scale * pow(10000.0, -2.0 * (double)i / n_rot);
                if (factors) theta /= ff[i];
                double xa = tt_get(&x, base + a), xb = tt_get(&x, base + b);
                ref[base + a] = (xa * cos(theta) - xb * sin(theta)) * attn_factor;
                ref[base + b] = (xa * sin(theta) + xb * cos(theta)) * attn_factor;
                bound[base + a] = bound[base + b] = 6 * TT_U32 * (fabs(xa) + fabs(xb)) * attn_factor;
            }
        }
    tt out[2];
    for (int th = 0; th < 2; th++) {
        st_cpu_set_threads(th + 1);
        out[th] = tt_new(ST_TYPE_F32, hd, n_head, m, 1, th ? 0 : 8);
        st_cpu_rope(&out[th].t, &x.t, pos, &p);
        char what[80];
        snprintf(what, sizeof(what), "rope mode %d n_rot %d factors %d", (int)mode, (int)n_rot, (int)factors);
        assert_true(tt_close(what, &out[th], ref, bound));
        assert_true(tt_gaps_untouched(&out[th]));
    }
    assert_true(tt_bit_equal(&out[0], &out[1]));
    st_cpu_rope(&x.t, &x.t, pos, &p); /* in place */
    assert_true(tt_bit_equal(&x, &out[0]));
    tt_free(&out[0]);
    tt_free(&out[1]);
    tt_free(&x);
    free(ref);
    free(bound);
    st_cpu_set_threads(0);
}

static void test_rope_norm(void **state) {
    (void)state;
    check_rope(ST_ROPE_MODE_NORM, 18, false, 1.0f);
    check_rope(ST_ROPE_MODE_NORM, 10, true, 1.0f); /* partial rotary + llama3-style factors */
}

static void test_rope_neox(void **state) {
    (void)state;
    check_rope(ST_ROPE_MODE_NEOX, 18, false, 1.0f);
    check_rope(ST_ROPE_MODE_NEOX, 12, true, 1.19f); /* phi3: partial, long factors, mscale */
    check_rope(ST_ROPE_MODE_NEOX, 0, false, 1.0f);  /* nothing rotated: a copy */
}

static void test_softmax(void **state) {
    (void)state;
    const int64_t n = 37, m = 5;
    const float scale = 0.7f;
    tt x = tt_new(ST_TYPE_F32, n, m, 1, 1, 12);
    tt_fill(&x, -8, 8);
    tt_set(&x, 3, 80.0); /* a large logit: exp would overflow without max subtraction */
    double *ref = malloc(sizeof(double) * (size_t)(n * m));
    double *bound = malloc(sizeof(double) * (size_t)(n * m));
    for (int64_t r = 0; r < m; r++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t i = 0; i < n; i++) mx = fmax(mx, scale * tt_get(&x, r * n + i));
        for (int64_t i = 0; i < n; i++) sum += exp(scale * tt_get(&x, r * n + i) - mx);
        for (int64_t i = 0; i < n; i++) {
            double v = scale * tt_get(&x, r * n + i);
            ref[r * n + i] = exp(v - mx) / sum;
            bound[r * n + i] = ref[r * n + i] * (4 * TT_U32 * (fabs(v) + fabs(mx)) + 4 * TT_U32) + 1e-300;
        }
    }
    tt out[2];
    for (int th = 0; th < 2; th++) {
        st_cpu_set_threads(th + 1);
        out[th] = tt_new(ST_TYPE_F32, n, m, 1, 1, th ? 0 : 4);
        st_cpu_softmax(&out[th].t, &x.t, scale);
        assert_true(tt_close("softmax", &out[th], ref, bound));
        assert_true(tt_gaps_untouched(&out[th]));
    }
    assert_true(tt_bit_equal(&out[0], &out[1]));
    tt_free(&out[0]);
    tt_free(&out[1]);
    tt_free(&x);
    free(ref);
    free(bound);
    st_cpu_set_threads(0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rms_norm),
        cmocka_unit_test(test_rope_norm),
        cmocka_unit_test(test_rope_neox),
        cmocka_unit_test(test_softmax),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
