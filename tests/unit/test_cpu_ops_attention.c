/*
 * CPU ops: the KV cache store and causal GQA attention (full and sliding window,
 * optional soft-capping) over F16 and F32 caches with padded strides, against a float64
 * reference, with both sides of the causal and window boundaries checked by changing
 * the key and value just inside and just outside them.
 *
 * TOLERANCE (per element, u = 2^-24). The reference reads the cache as stored (F16
 * values widened exactly), so the cache type adds no error of its own. A score is an f32
 * dot over D = head_dim terms then scaled: |ds| <= (D + 3) u * S, S = scale * max over
 * visible keys of sum_d |q_d k_d| (soft-capping's tanh has slope <= 1 and adds a
 * couple of roundings, covered by the +3). exp turns |ds| into a relative error of each
 * weight, twice that after normalisation; the weighted sum of n visible values and the
 * final division add (n + 6) u. So
 *     |o - o_ref| <= (2 (D + 3) u S + (n + 6) u) * max |v|.
 * The store is exact: F32 copies, F16 is round-to-nearest-even (core's st_f32_to_f16).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_cpu_ops_common.h"

enum { HD = 18, NH = 6, NKV = 2, NCTX = 16, M = 5 };

static void test_kv_store(void **state) {
    (void)state;
    const int32_t pos[3] = {4, 0, 15};
    for (int ct = 0; ct < 2; ct++) {
        st_type type = ct ? ST_TYPE_F16 : ST_TYPE_F32;
        tt cache = tt_new(type, HD, NKV, NCTX, 1, TT_PAD);
        tt x = tt_new(ST_TYPE_F32, HD, NKV, 3, 1, 12);
        tt_fill(&x, -3, 3);
        assert_int_equal(st_cpu_kv_store(&cache.t, &x.t, pos, NULL), ST_OK);
        for (int64_t m = 0; m < 3; m++)
            for (int64_t h = 0; h < NKV; h++)
                for (int64_t d = 0; d < HD; d++) {
                    float v = (float)tt_get(&x, (m * NKV + h) * HD + d);
                    double want = ct ? st_f16_to_f32(st_f32_to_f16(v)) : v;
                    assert_true(tt_get(&cache, (pos[m] * NKV + h) * HD + d) == want);
                }
        /* the other positions are untouched (still the NaN poison) */
        assert_true(isnan(tt_get(&cache, 1 * NKV * HD)));
        const int32_t bad[3] = {4, 16, 0};
        st_error err = {0};
        assert_int_equal(st_cpu_kv_store(&cache.t, &x.t, bad, &err), ST_ERROR_INVALID);
        assert_non_null(strstr(err.message, "position 16"));
        tt_free(&cache);
        tt_free(&x);
    }
}

static bool visible(int64_t t, int32_t pos, int64_t n_kv, int32_t window) {
    return t <= pos && t < n_kv && (window == 0 || pos - t < window);
}

/* Reference attention for every (head, query); fills ref and bound [HD, NH, M]. */
static void attn_ref(const tt *q, const tt *k, const tt *v, const int32_t *pos,
                     const st_attn_params *p, double *ref, double *bound) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t h = 0; h < NH; h++) {
            int64_t kvh = h / (NH / NKV), n_vis = 0;
            double s[NCTX], mx = -INFINITY, sum = 0, smax = 0, vmax = 0;
            for (int64_t t = 0; t < p->n_kv; t++) {
                if (!visible(t, pos[m], p->n_kv, p->window)) continue;
                double dot = 0, mag = 0;
                for (int64_t d = 0; d < HD; d++) {
                    double qv = tt_get(q, (m * NH + h) * HD + d), kv = tt_get(k, (t * NKV + kvh) * HD + d);
                    dot += qv * kv;
                    mag += fabs(qv * kv);
                    vmax = fmax(vmax, fabs(tt_get(v, (t * NKV + kvh) * HD + d)));
                }
                s[t] = p->scale * dot;
                if (p->softcap > 0) s[t] = p->softcap * tanh(s[t] / p->softcap);
                smax = fmax(smax, p->scale * mag);
                mx = fmax(mx, s[t]);
                n_vis++;
            }
            for (int64_t d = 0; d < HD; d++) {
                double o = 0;
                sum = 0;
                for (int64_t t = 0; t < p->n_kv; t++) {
                    if (!visible(t, pos[m], p->n_kv, p->window)) continue;
                    double w = exp(s[t] - mx);
                    sum += w;
                    o += w * tt_get(v, (t * NKV + kvh) * HD + d);
                }
                int64_t i = (m * NH + h) * HD + d;
                ref[i] = n_vis ? o / sum : 0.0;
                bound[i] = (2 * (HD + 3) * TT_U32 * smax + (double)(n_vis + 6) * TT_U32) * vmax;
            }
        }
}

static void check_attention(st_type cache_type, int32_t window, float softcap) {
    const int32_t pos[M] = {0, 3, 7, 9, 12}; /* 12 >= n_kv: sees up to n_kv - 1 */
    st_attn_params p = {.n_kv = 11, .window = window, .scale = 1.0f / sqrtf((float)HD), .softcap = softcap};
    tt k = tt_new(cache_type, HD, NKV, NCTX, 1, TT_PAD);
    tt v = tt_new(cache_type, HD, NKV, NCTX, 1, TT_PAD);
    tt kn = tt_new(ST_TYPE_F32, HD, NKV, NCTX, 1, 0);
    tt vn = tt_new(ST_TYPE_F32, HD, NKV, NCTX, 1, 0);
    tt_fill(&kn, -2, 2);
    tt_fill(&vn, -2, 2);
    int32_t all_pos[NCTX];
    for (int i = 0; i < NCTX; i++) all_pos[i] = i;
    /* positions n_kv .. NCTX-1 hold data too: "future" keys the mask must hide */
    assert_int_equal(st_cpu_kv_store(&k.t, &kn.t, all_pos, NULL), ST_OK);
    assert_int_equal(st_cpu_kv_store(&v.t, &vn.t, all_pos, NULL), ST_OK);
    /* q: a strided view, as sliced out of a fused qkv row */
    tt q = tt_new(ST_TYPE_F32, HD, NH, M, 1, 44);
    tt_fill(&q, -2, 2);

    double ref[HD * NH * M], bound[HD * NH * M];
    attn_ref(&q, &k, &v, pos, &p, ref, bound);
    tt out[2];
    for (int th = 0; th < 2; th++) {
        st_cpu_set_threads(th + 1);
        out[th] = tt_new(ST_TYPE_F32, HD, NH, M, 1, th ? 0 : 20);
        assert_int_equal(st_cpu_attention(&out[th].t, &q.t, &k.t, &v.t, pos, &p, NULL), ST_OK);
        char what[80];
        snprintf(what, sizeof(what), "attention %s window %d softcap %g", st_type_name(cache_type),
                 (int)window, (double)softcap);
        assert_true(tt_close(what, &out[th], ref, bound));
        assert_true(tt_gaps_untouched(&out[th]));
    }
    assert_true(tt_bit_equal(&out[0], &out[1]));

    /* boundaries, both sides: for query m = 3 (position 9), change the key just outside
     * (position 10: future; position 9 - window: out of the window) and the key just
     * inside (position 9; position 9 - window + 1); only the inside ones may matter. */
    const int64_t mq = 3;
    int64_t outside[2] = {10, window ? 9 - window : -1};
    int64_t inside[2] = {9, window ? 9 - window + 1 : 0};
    for (int side = 0; side < 2; side++) {
        for (int which = 0; which < 2; which++) {
            int64_t t = side ? inside[which] : outside[which];
            if (t < 0) continue;
            /* change both key and value (with one visible key the key alone cannot matter) */
            tt k2 = tt_new(cache_type, HD, NKV, NCTX, 1, TT_PAD);
            tt v2 = tt_new(cache_type, HD, NKV, NCTX, 1, TT_PAD);
            tt_copy(&k2, &k);
            tt_copy(&v2, &v);
            for (int64_t h = 0; h < NKV; h++)
                for (int64_t d = 0; d < HD; d++) {
                    tt_set(&k2, (t * NKV + h) * HD + d, 1.5 * (d % 3) - 1.0);
                    tt_set(&v2, (t * NKV + h) * HD + d, 3.0 - 0.25 * (double)d);
                }
            tt o2 = tt_new(ST_TYPE_F32, HD, NH, M, 1, 0);
            assert_int_equal(st_cpu_attention(&o2.t, &q.t, &k2.t, &v2.t, pos, &p, NULL), ST_OK);
            int same = memcmp(tt_ptr(&o2, mq * NH * HD), tt_ptr(&out[1], mq * NH * HD),
                              NH * HD * sizeof(float)) == 0;
            if (side == 0 && !same) fail_msg("key at %lld (outside) changed query at 9, window %d", (long long)t, (int)window);
            if (side == 1 && same) fail_msg("key at %lld (inside) ignored by query at 9, window %d", (long long)t, (int)window);
            tt_free(&o2);
            tt_free(&k2);
            tt_free(&v2);
        }
    }
    tt_free(&out[0]);
    tt_free(&out[1]);
    tt_free(&k);
    tt_free(&v);
    tt_free(&kn);
    tt_free(&vn);
    tt_free(&q);
    st_cpu_set_threads(0);
}

static void test_attention_full(void **state) {
    (void)state;
    check_attention(ST_TYPE_F32, 0, 0.0f);
    check_attention(ST_TYPE_F16, 0, 0.0f);
}

static void test_attention_window(void **state) {
    (void)state;
    check_attention(ST_TYPE_F32, 4, 0.0f);
    check_attention(ST_TYPE_F16, 4, 0.0f);
    check_attention(ST_TYPE_F16, 1, 0.0f); /* only the query's own key */
}

static void test_attention_softcap(void **state) {
    (void)state;
    check_attention(ST_TYPE_F32, 0, 1.5f);
    check_attention(ST_TYPE_F16, 5, 1.5f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_store),
        cmocka_unit_test(test_attention_full),
        cmocka_unit_test(test_attention_window),
        cmocka_unit_test(test_attention_softcap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
