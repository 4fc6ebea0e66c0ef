/* Sampling from a row's largest logits instead of the whole row: st_cpu_top_k_logits (the
 * k largest in the chain's order and the row's log-sum-exp) against a brute-force sort, and
 * st_sampler_sample_candidates against st_sampler_sample on the whole row: the same token
 * for every chain the candidates allow (greedy, top-k with top-p, min-p, temperature),
 * seed after seed, ties included. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "stride/cpu_ops.h"
#include "stride/sample.h"

static uint64_t rng_state = 0x5a3d1e;
static float rnd(void) { /* uniform in [-4, 4) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 8.0 - 4.0);
}

static st_tensor row_tensor(float *data, int64_t n0, int64_t n1) {
    st_tensor t = {.type = ST_TYPE_F32, .ne = {n0, n1, 1, 1}, .data = data};
    st_tensor_set_packed_strides(&t);
    return t;
}

/* The k largest of row by brute force: descending value, ascending id. */
static int cmp_desc(const void *a, const void *b) {
    const float *x = a, *y = b;
    if (x[0] != y[0]) return x[0] > y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : 1;
}

static void test_top_k_logits(void **state) {
    (void)state;
    enum { V = 997, N = 5 };
    const int32_t ks[] = {1, 7, 64, 997};
    float *logits = malloc(sizeof(float) * V * N), *vals = malloc(sizeof(float) * (V + 1) * N);
    int32_t *ids = malloc(sizeof(int32_t) * V * N);
    float (*pairs)[2] = malloc(sizeof(float) * 2 * V);
    assert_non_null(logits), assert_non_null(vals), assert_non_null(ids), assert_non_null(pairs);
    for (int i = 0; i < V * N; i++) logits[i] = rnd();
    for (int i = 0; i < V; i++) logits[2 * V + i] = (float)(i % 3); /* row 2: ties of three values */
    for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++) {
        const int32_t k = ks[ki];
        st_tensor lt = row_tensor(logits, V, N), vt = row_tensor(vals, k + 1, N);
        st_cpu_top_k_logits(ids, &vt, &lt, k);
        for (int r = 0; r < N; r++) {
            const float *x = logits + r * V;
            double mx = -INFINITY, sum = 0.0;
            for (int t = 0; t < V; t++) pairs[t][0] = x[t], pairs[t][1] = (float)t, mx = x[t] > mx ? x[t] : mx;
            for (int t = 0; t < V; t++) sum += exp((double)x[t] - mx);
            qsort(pairs, V, sizeof(pairs[0]), cmp_desc);
            for (int i = 0; i < k; i++) {
                assert_int_equal(ids[r * k + i], (int32_t)pairs[i][1]);
                assert_true(vals[r * (k + 1) + i] == pairs[i][0]);
            }
            assert_float_equal(vals[r * (k + 1) + k], (float)(mx + log(sum)), 1e-5);
        }
    }
    free(logits), free(vals), free(ids), free(pairs);
}

/* The whole row and its k candidates give the same tokens under p, draw after draw. */
static void same_tokens(const float *x, int64_t V, int32_t k, st_sampler_params p) {
    float *vals = malloc(sizeof(float) * (size_t)(k + 1));
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)k);
    assert_non_null(vals), assert_non_null(ids);
    st_tensor lt = row_tensor((float *)x, V, 1), vt = row_tensor(vals, k + 1, 1);
    st_cpu_top_k_logits(ids, &vt, &lt, k);
    st_error err = {0};
    st_sampler *full = NULL, *cand = NULL;
    assert_int_equal(st_sampler_init(&p, V, &full, &err), ST_OK);
    assert_int_equal(st_sampler_init(&p, V, &cand, &err), ST_OK);
    assert_true(st_sampler_fits_candidates(cand, k));
    for (int draw = 0; draw < 50; draw++) {
        int32_t a = -1, b = -2;
        assert_int_equal(st_sampler_sample(full, x, &a, &err), ST_OK);
        assert_int_equal(st_sampler_sample_candidates(cand, ids, vals, k, vals[k], &b, &err), ST_OK);
        assert_int_equal(a, b);
    }
    st_sampler_free(full), st_sampler_free(cand);
    free(vals), free(ids);
}

static void test_candidates_sample_as_the_row(void **state) {
    (void)state;
    enum { V = 3001 };
    float *x = malloc(sizeof(float) * V);
    assert_non_null(x);
    for (int i = 0; i < V; i++) x[i] = rnd();
    st_sampler_params p = st_sampler_params_default();
    p.seed = 11;
    same_tokens(x, V, 64, p); /* llama.cpp's defaults: top-k 40, top-p 0.95, min-p 0.05, temp 0.8 */
    p.temp = 0.0f;
    same_tokens(x, V, 1, p); /* greedy from one candidate */
    p = st_sampler_params_default();
    p.top_k = 64, p.top_p = 1.0f, p.min_p = 0.0f, p.temp = 1.5f, p.seed = 99;
    same_tokens(x, V, 64, p); /* top-k equal to the candidates */
    p.top_k = 5, p.top_p = 0.5f;
    same_tokens(x, V, 200, p);
    for (int i = 0; i < V; i++) x[i] = (float)(i % 4); /* ties: the lowest ids first */
    p = st_sampler_params_default();
    p.temp = 0.0f;
    same_tokens(x, V, 8, p);
    p.temp = 0.7f, p.top_k = 8;
    same_tokens(x, V, 8, p);
    free(x);
}

static void test_what_fits(void **state) {
    (void)state;
    st_sampler_params p = st_sampler_params_default();
    st_error err = {0};
    st_sampler *s = NULL;
    assert_int_equal(st_sampler_init(&p, 100, &s, &err), ST_OK);
    assert_true(st_sampler_fits_candidates(s, 40));   /* top-k 40 */
    assert_false(st_sampler_fits_candidates(s, 39));
    st_sampler_free(s);
    p.top_k = 0; /* off: the whole row */
    assert_int_equal(st_sampler_init(&p, 100, &s, &err), ST_OK);
    assert_false(st_sampler_fits_candidates(s, 64));
    st_sampler_free(s);
    p.top_k = 10, p.repeat_penalty = 1.1f; /* the penalty moves tokens the candidates may lack */
    assert_int_equal(st_sampler_init(&p, 100, &s, &err), ST_OK);
    assert_false(st_sampler_fits_candidates(s, 64));
    st_sampler_free(s);
    p.temp = 0.0f, p.repeat_penalty = 1.0f, p.top_k = 0; /* greedy: one candidate */
    assert_int_equal(st_sampler_init(&p, 100, &s, &err), ST_OK);
    assert_true(st_sampler_fits_candidates(s, 1));
    st_sampler_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_top_k_logits),
        cmocka_unit_test(test_candidates_sample_as_the_row),
        cmocka_unit_test(test_what_fits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
