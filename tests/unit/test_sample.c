/* The sampler: PCG32 against the reference stream, each filter on hand-made logits with
 * the exact survivors, the filters on a large vocabulary against a brute-force sort, draw
 * frequencies within binomial bounds, determinism, parameter validation. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "stride/cpu_ops.h"
#include "stride/sample.h"

/* ---- helpers ---- */

static st_candidates make(st_token_prob *buf, const float *logits, int64_t n) {
    st_candidates c = {.data = buf};
    st_candidates_from_logits(&c, logits, n);
    return c;
}

static void assert_ids(const st_candidates *c, const int32_t *want, int64_t n) {
    assert_int_equal(c->size, n);
    for (int64_t i = 0; i < n; i++) assert_int_equal(c->data[i].id, want[i]);
}

/* Sorted (descending logit, ascending id) copy of the candidates' ids, for comparisons
 * that do not depend on the order the filter leaves. */
static int cmp_id(const void *a, const void *b) {
    int32_t x = ((const st_token_prob *)a)->id, y = ((const st_token_prob *)b)->id;
    return (x > y) - (x < y);
}

static void sort_by_id(st_candidates *c) { qsort(c->data, (size_t)c->size, sizeof(st_token_prob), cmp_id); }

/* Deterministic pseudo-random logits with many exact ties (values on a 1/8 grid). */
static void grid_logits(float *x, int64_t n, uint64_t seed) {
    st_rng r;
    st_rng_seed(&r, seed, 7);
    for (int64_t i = 0; i < n; i++) x[i] = (float)((int)(st_rng_u32(&r) % 97) - 60) / 8.0f;
}

static int cmp_ref(const void *a, const void *b) {
    const st_token_prob *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* ---- PCG32 ---- */

static void test_rng_reference_stream(void **state) {
    (void)state;
    /* pcg32-demo.c from pcg-random.org: pcg32_srandom_r(&rng, 42u, 54u), round 1. */
    static const uint32_t want[6] = {0xa15c02b7u, 0x7b47f409u, 0xba1d3330u, 0x83d2f293u, 0xbfa4784bu, 0xcbed606eu};
    st_rng r;
    st_rng_seed(&r, 42, 54);
    for (int i = 0; i < 6; i++) assert_int_equal(st_rng_u32(&r), want[i]);
    /* uniform = (a >> 5, b >> 6) as a 53-bit fraction */
    st_rng_seed(&r, 42, 54);
    double u = st_rng_uniform(&r);
    double expect = ((double)(0xa15c02b7u >> 5) * 67108864.0 + (double)(0x7b47f409u >> 6)) / 9007199254740992.0;
    assert_true(u == expect);
}

static void test_rng_uniform_range(void **state) {
    (void)state;
    st_rng r;
    st_rng_seed(&r, 1, 0);
    double sum = 0.0;
    const int n = 100000;
    for (int i = 0; i < n; i++) {
        double u = st_rng_uniform(&r);
        assert_true(u >= 0.0 && u < 1.0);
        sum += u;
    }
    /* mean of n uniforms: sd = 1/sqrt(12 n) = 9.1e-4; 5 sd */
    assert_true(fabs(sum / n - 0.5) < 5 * 9.2e-4);
}

/* ---- filters on hand-made logits ---- */

static void test_sort_ties_by_id(void **state) {
    (void)state;
    const float logits[6] = {0.5f, 3.0f, 1.0f, 3.0f, -2.0f, 2.0f};
    st_token_prob buf[6];
    st_candidates c = make(buf, logits, 6);
    st_candidates_sort(&c);
    const int32_t want[6] = {1, 3, 5, 2, 0, 4};
    assert_ids(&c, want, 6);
    assert_true(c.sorted);
}

static void test_top_k(void **state) {
    (void)state;
    const float logits[6] = {0.5f, 3.0f, 1.0f, 3.0f, -2.0f, 2.0f};
    st_token_prob buf[6];
    st_candidates c = make(buf, logits, 6);
    st_sample_top_k(&c, 3);
    const int32_t want3[3] = {1, 3, 5};
    assert_ids(&c, want3, 3);
    c = make(buf, logits, 6);
    st_sample_top_k(&c, 1); /* a tie at the top: the lower id wins */
    const int32_t want1[1] = {1};
    assert_ids(&c, want1, 1);
    c = make(buf, logits, 6);
    st_sample_top_k(&c, 0); /* off */
    assert_int_equal(c.size, 6);
    assert_false(c.sorted);
    st_sample_top_k(&c, 6); /* k >= size: off */
    assert_int_equal(c.size, 6);
    st_sample_top_k(&c, 100);
    assert_int_equal(c.size, 6);
}

/* probabilities 0.5, 0.2, 0.15, 0.1, 0.05 in a shuffled id order */
static const float P5[5] = {0.15f, 0.05f, 0.5f, 0.1f, 0.2f};
static void p5_logits(float *x) {
    for (int i = 0; i < 5; i++) x[i] = logf(P5[i]) + 1.25f; /* any shift: softmax ignores it */
}

static void test_softmax(void **state) {
    (void)state;
    float x[5];
    p5_logits(x);
    st_token_prob buf[5];
    st_candidates c = make(buf, x, 5);
    st_candidates_softmax(&c);
    const int32_t want[5] = {2, 4, 0, 3, 1};
    assert_ids(&c, want, 5);
    for (int i = 0; i < 5; i++) assert_float_equal(c.data[i].p, P5[c.data[i].id], 1e-6);
}

static void test_top_p(void **state) {
    (void)state;
    float x[5];
    p5_logits(x);
    st_token_prob buf[5];
    struct {
        float p;
        int64_t kept;
    } cases[] = {
        {0.45f, 1}, /* 0.5 reaches it */
        {0.65f, 2}, /* 0.5 + 0.2 */
        {0.80f, 3}, /* + 0.15 = 0.85 */
        {0.90f, 4}, /* + 0.1 = 0.95 */
        {0.99f, 5},
        {1.00f, 5}, /* off */
        {1e-6f, 1},
    };
    const int32_t order[5] = {2, 4, 0, 3, 1};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        st_candidates c = make(buf, x, 5);
        st_sample_top_p(&c, cases[i].p);
        if (cases[i].p < 1.0f) assert_ids(&c, order, cases[i].kept);
        else assert_int_equal(c.size, 5);
    }
}

static void test_min_p(void **state) {
    (void)state;
    float x[5];
    p5_logits(x);
    st_token_prob buf[5];
    struct {
        float min_p;
        int32_t ids[5];
        int64_t kept;
    } cases[] = {
        {0.35f, {2, 4}, 2},          /* >= 0.175 */
        {0.25f, {0, 2, 4}, 3},       /* >= 0.125 */
        {0.15f, {0, 2, 3, 4}, 4},    /* >= 0.075 */
        {0.05f, {0, 1, 2, 3, 4}, 5}, /* >= 0.025 */
        {0.99f, {2}, 1},
        {0.0f, {0, 1, 2, 3, 4}, 5},  /* off */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        st_candidates c = make(buf, x, 5);
        st_sample_min_p(&c, cases[i].min_p);
        sort_by_id(&c);
        assert_ids(&c, cases[i].ids, cases[i].kept);
    }
}

static void test_repetition_penalty(void **state) {
    (void)state;
    const float logits[6] = {2.0f, -2.0f, 0.0f, 1.0f, 4.0f, -1.0f};
    st_token_prob buf[6];
    st_candidates c = make(buf, logits, 6);
    /* id 0 three times: penalised once; id 1 negative: multiplied; id 2 zero stays 0 */
    const int32_t last[5] = {0, 1, 2, 0, 0};
    st_sample_repetition_penalty(&c, last, 5, 2.0f);
    const float want[6] = {1.0f, -4.0f, 0.0f, 1.0f, 4.0f, -1.0f};
    for (int i = 0; i < 6; i++) {
        assert_int_equal(c.data[i].id, i);
        assert_true(c.data[i].logit == want[i]);
    }
    /* a penalty below 1 rewards: 2/0.5 = 4, -2*0.5 = -1 */
    c = make(buf, logits, 6);
    const int32_t last2[2] = {1, 0};
    st_sample_repetition_penalty(&c, last2, 2, 0.5f);
    assert_true(c.data[0].logit == 4.0f && c.data[1].logit == -1.0f && c.data[3].logit == 1.0f);
    /* penalty 1 and an empty history change nothing */
    c = make(buf, logits, 6);
    st_sample_repetition_penalty(&c, last, 5, 1.0f);
    st_sample_repetition_penalty(&c, last, 0, 2.0f);
    for (int i = 0; i < 6; i++) assert_true(c.data[i].logit == logits[i]);
}

static void test_temperature(void **state) {
    (void)state;
    const float logits[3] = {1.0f, -2.0f, 0.5f};
    st_token_prob buf[3];
    st_candidates c = make(buf, logits, 3);
    st_sample_temperature(&c, 0.5f);
    assert_true(c.data[0].logit == 2.0f && c.data[1].logit == -4.0f && c.data[2].logit == 1.0f);
}

/* ---- filters on a large vocabulary, against a full sort ---- */

static void test_filters_large_vocab(void **state) {
    (void)state;
    const int64_t V = 5000;
    float *x = malloc((size_t)V * sizeof(float));
    st_token_prob *buf = malloc((size_t)V * sizeof(st_token_prob));
    st_token_prob *ref = malloc((size_t)V * sizeof(st_token_prob));
    assert_non_null(x);
    assert_non_null(buf);
    assert_non_null(ref);
    for (uint64_t seed = 1; seed <= 4; seed++) {
        grid_logits(x, V, seed);
        st_candidates r = make(ref, x, V);
        qsort(ref, (size_t)V, sizeof(st_token_prob), cmp_ref);
        const int32_t ks[] = {1, 7, 100, 999, 4999};
        for (size_t ik = 0; ik < sizeof(ks) / sizeof(ks[0]); ik++) {
            st_candidates c = make(buf, x, V);
            st_sample_top_k(&c, ks[ik]);
            assert_int_equal(c.size, ks[ik]);
            for (int64_t i = 0; i < c.size; i++) assert_int_equal(c.data[i].id, ref[i].id);
        }
        /* top-p: the flat distribution needs far more than the first 256 candidates */
        double m = r.data[0].logit, sum = 0.0;
        for (int64_t i = 0; i < V; i++) sum += exp((double)ref[i].logit - m);
        const float ps[] = {0.3f, 0.9f, 0.999f};
        for (size_t ip = 0; ip < sizeof(ps) / sizeof(ps[0]); ip++) {
            double cum = 0.0;
            int64_t want = V;
            for (int64_t i = 0; i < V; i++) {
                cum += exp((double)ref[i].logit - m) / sum;
                if (cum >= (double)ps[ip]) {
                    want = i + 1;
                    break;
                }
            }
            st_candidates c = make(buf, x, V);
            st_sample_top_p(&c, ps[ip]);
            assert_int_equal(c.size, want);
            for (int64_t i = 0; i < c.size; i++) assert_int_equal(c.data[i].id, ref[i].id);
            if (ip == 1) assert_true(want > 256);
        }
    }
    free(x);
    free(buf);
    free(ref);
}

/* ---- the sampler ---- */

static st_sampler *sampler(float temp, int32_t top_k, float top_p, float min_p, uint64_t seed, int64_t V) {
    st_sampler_params p = st_sampler_params_default();
    p.temp = temp;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = seed;
    st_sampler *s = NULL;
    st_error err = {0};
    assert_int_equal(st_sampler_init(&p, V, &s, &err), ST_OK);
    return s;
}

static void test_greedy(void **state) {
    (void)state;
    const float logits[5] = {1.0f, 3.0f, -1.0f, 3.0f, 2.5f};
    st_sampler *s = sampler(0.0f, 40, 0.95f, 0.05f, 123, 5);
    int32_t id = -1;
    assert_int_equal(st_sampler_sample(s, logits, &id, NULL), ST_OK);
    assert_int_equal(id, 1); /* tie with id 3: the lower id */
    st_sampler_free(s);

    /* greedy still applies the penalty: 3/2 = 1.5 < 2.5 */
    st_sampler_params p = st_sampler_params_default();
    p.temp = 0.0f;
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 2;
    assert_int_equal(st_sampler_init(&p, 5, &s, NULL), ST_OK);
    st_sampler_accept(s, 1);
    st_sampler_accept(s, 3);
    assert_int_equal(st_sampler_sample(s, logits, &id, NULL), ST_OK);
    assert_int_equal(id, 4);
    /* the history holds 2: accepting 0 and 2 pushes 1 and 3 out */
    st_sampler_accept(s, 0);
    st_sampler_accept(s, 2);
    assert_int_equal(st_sampler_sample(s, logits, &id, NULL), ST_OK);
    assert_int_equal(id, 1);
    st_sampler_free(s);
}

/* |count - n p| within 5 standard deviations of the binomial (n, p). */
static void assert_binomial(int64_t count, int64_t n, double p) {
    double mean = (double)n * p, sd = sqrt((double)n * p * (1.0 - p));
    if (fabs((double)count - mean) > 5.0 * sd + 1e-9)
        fail_msg("count %lld, expected %.1f +/- 5 x %.1f", (long long)count, mean, sd);
}

static void frequencies(st_sampler *s, const float *logits, int64_t V, int64_t n, int64_t *counts) {
    memset(counts, 0, (size_t)V * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++) {
        int32_t id = -1;
        assert_int_equal(st_sampler_sample(s, logits, &id, NULL), ST_OK);
        assert_true(id >= 0 && id < V);
        counts[id]++;
    }
}

static void test_draw_frequencies(void **state) {
    (void)state;
    const int64_t V = 4, N = 40000;
    const double p[4] = {0.5, 0.3, 0.15, 0.05};
    float logits[4];
    for (int i = 0; i < 4; i++) logits[i] = (float)log(p[i]);
    int64_t counts[4];

    /* no filters, temperature 1: the distribution itself */
    st_sampler *s = sampler(1.0f, 0, 1.0f, 0.0f, 2024, V);
    frequencies(s, logits, V, N, counts);
    for (int i = 0; i < 4; i++) assert_binomial(counts[i], N, p[i]);
    st_sampler_free(s);

    /* temperature 2: p^(1/2), renormalised */
    double q[4], qs = 0.0;
    for (int i = 0; i < 4; i++) qs += (q[i] = sqrt(p[i]));
    s = sampler(2.0f, 0, 1.0f, 0.0f, 7, V);
    frequencies(s, logits, V, N, counts);
    for (int i = 0; i < 4; i++) assert_binomial(counts[i], N, q[i] / qs);
    st_sampler_free(s);

    /* top-k 2: ids 0 and 1 only, 0.625 / 0.375 */
    s = sampler(1.0f, 2, 1.0f, 0.0f, 8, V);
    frequencies(s, logits, V, N, counts);
    assert_int_equal(counts[2] + counts[3], 0);
    assert_binomial(counts[0], N, 0.625);
    st_sampler_free(s);

    /* top-p 0.9: 0.5 + 0.3 + 0.15 = 0.95 reaches it; id 3 never */
    s = sampler(1.0f, 0, 0.9f, 0.0f, 9, V);
    frequencies(s, logits, V, N, counts);
    assert_int_equal(counts[3], 0);
    for (int i = 0; i < 3; i++) assert_binomial(counts[i], N, p[i] / 0.95);
    st_sampler_free(s);

    /* min-p 0.5: keeps p >= 0.25: ids 0 and 1 */
    s = sampler(1.0f, 0, 1.0f, 0.5f, 10, V);
    frequencies(s, logits, V, N, counts);
    assert_int_equal(counts[2] + counts[3], 0);
    assert_binomial(counts[1], N, 0.375);
    st_sampler_free(s);

    /* filters see the untempered distribution: min-p 0.5 at temperature 10 still keeps
     * only ids 0 and 1, now nearly even: 0.5^0.1 : 0.3^0.1 */
    s = sampler(10.0f, 0, 1.0f, 0.5f, 11, V);
    frequencies(s, logits, V, N, counts);
    assert_int_equal(counts[2] + counts[3], 0);
    double a = pow(0.5, 0.1), b = pow(0.3, 0.1);
    assert_binomial(counts[0], N, a / (a + b));
    st_sampler_free(s);
}

/* The plain walk st_sample_draw must match token for token: exp(logit - max) summed in
 * candidate order, the first candidate whose running sum passes u * total, the last with a
 * nonzero weight when rounding leaves the target at the total. */
static int32_t draw_walk(const st_candidates *c, double u) {
    double m = c->data[0].logit, total = 0.0, cum = 0.0;
    for (int64_t i = 1; i < c->size; i++) m = c->data[i].logit > m ? c->data[i].logit : m;
    for (int64_t i = 0; i < c->size; i++) total += exp((double)c->data[i].logit - m);
    const double target = u * total;
    int64_t last_nonzero = 0;
    for (int64_t i = 0; i < c->size; i++) {
        const double w = exp((double)c->data[i].logit - m);
        if (w > 0.0) last_nonzero = i;
        cum += w;
        if (target < cum) return c->data[i].id;
    }
    return c->data[last_nonzero].id;
}

/* st_sample_draw starts its walk at a run of candidates found from the first pass's sums:
 * the same token as the whole walk for every draw, at sizes around the runs' boundaries
 * (1,024 runs), with ties, -inf logits and weights that underflow to zero. */
static void test_draw_matches_walk(void **state) {
    (void)state;
    const int64_t sizes[] = {1, 2, 1023, 1024, 1025, 2049, 5000, 131072, 262145};
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        const int64_t n = sizes[si];
        float *x = malloc((size_t)n * sizeof(float));
        st_token_prob *buf = malloc((size_t)n * sizeof(st_token_prob));
        assert_non_null(x);
        assert_non_null(buf);
        grid_logits(x, n, (uint64_t)n);
        for (int64_t i = 0; i < n; i += 7) x[i] = -INFINITY;
        if (n > 3) x[n / 2] = 40.0f, x[n - 1] = -800.0f; /* most weights underflow next to 40 */
        x[0] = 0.0f;
        st_candidates c = make(buf, x, n);
        st_rng r, q;
        st_rng_seed(&r, 99 + (uint64_t)n, 1);
        q = r;
        for (int d = 0; d < 200; d++) {
            const double u = st_rng_uniform(&q);
            assert_int_equal(st_sample_draw(&c, &r), draw_walk(&c, u));
        }
        /* without the spike: a flat-ish distribution, the target anywhere */
        if (n > 3) x[n / 2] = 0.5f;
        c = make(buf, x, n);
        for (int d = 0; d < 200; d++) {
            const double u = st_rng_uniform(&q);
            assert_int_equal(st_sample_draw(&c, &r), draw_walk(&c, u));
        }
        free(x);
        free(buf);
    }
}

/* Which chains a backend can sample: all, but penalties over a history longer than it
 * takes (repeat_last_n over ST_DRAW_MAX_PENALIZED). */
static void test_draws_row(void **state) {
    (void)state;
    const int64_t V = 100;
    struct {
        float temp, top_p, penalty;
        int32_t top_k, last_n;
        bool want;
    } cases[] = {
        {1.0f, 1.0f, 1.0f, 0, 64, true},   {0.0f, 1.0f, 1.0f, 0, 64, true},
        {1.0f, 0.9f, 1.0f, 99, 64, true},  {0.0f, 1.0f, 1.1f, 0, 64, true},
        {0.7f, 0.9f, 1.1f, 40, ST_DRAW_MAX_PENALIZED, true},
        {0.7f, 1.0f, 1.1f, 0, ST_DRAW_MAX_PENALIZED + 1, false},
        {0.7f, 1.0f, 1.0f, 0, ST_DRAW_MAX_PENALIZED + 1, true}, /* no penalty */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        st_sampler_params p = st_sampler_params_default();
        p.temp = cases[i].temp, p.top_k = cases[i].top_k, p.top_p = cases[i].top_p;
        p.repeat_penalty = cases[i].penalty, p.repeat_last_n = cases[i].last_n;
        st_sampler *s = NULL;
        assert_int_equal(st_sampler_init(&p, V, &s, NULL), ST_OK);
        assert_int_equal(st_sampler_draws_row(s), cases[i].want);
        st_sampler_free(s);
    }
}

/* st_sampler_next_draw's parameters through st_cpu_draw_rows give the token
 * st_sampler_sample gives on the same row from a sampler of the same seed, token after
 * token (each accepted into both samplers' histories; the uniform taken from the stream
 * the same way), over chains of temperature, min-p, top-p, top-k and the three penalties
 * (negative ones too), greedy with penalties, rows with ties, -inf and a spike; the logit
 * given is the token's before penalties; a row of temperature 0 is left as it was; a NaN
 * or +inf gives -1, no finite logit -2. */
static void test_row_draw_matches_sampler(void **state) {
    (void)state;
    const int64_t sizes[] = {1, 7, 1025, 32007, 128256};
    const struct {
        float temp, min_p, top_p;
        int32_t top_k;
        float repeat, frequency, presence;
    } chains[] = {
        {0.3f, 0.0f, 1.0f, 0, 1.0f, 0.0f, 0.0f},   {1.0f, 0.05f, 0.9f, 0, 1.0f, 0.0f, 0.0f},
        {1.7f, 0.5f, 0.4f, 0, 1.0f, 0.0f, 0.0f},   {1.0f, 0.5f, 1.0f, 0, 1.0f, 0.0f, 0.0f},
        {0.3f, 0.05f, 0.4f, 0, 1.0f, 0.0f, 0.0f},  {1.7f, 0.0f, 0.9f, 0, 1.0f, 0.0f, 0.0f},
        {1.0f, 0.0f, 1.0f, 20, 1.0f, 0.0f, 0.0f},  {0.8f, 0.05f, 0.9f, 40, 1.0f, 0.0f, 0.0f},
        {1.0f, 0.0f, 1.0f, 0, 1.3f, 0.0f, 0.0f},   {0.9f, 0.0f, 0.9f, 0, 1.0f, 0.5f, 0.3f},
        {0.7f, 0.0f, 1.0f, 30, 1.2f, -0.5f, 0.0f}, {0.0f, 0.0f, 1.0f, 0, 1.3f, 0.0f, 0.0f},
        {0.0f, 0.0f, 1.0f, 0, 1.0f, 0.8f, 0.5f},
    };
    enum { ROWS = 4, DRAWS = 12, P = 2 * ST_DRAW_MAX_PENALIZED };
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        const int64_t V = sizes[si];
        float *x = malloc((size_t)(V * ROWS) * sizeof(float));
        assert_non_null(x);
        for (int r = 0; r < ROWS; r++) {
            float *row = x + r * V;
            grid_logits(row, V, (uint64_t)(V * 10 + r));
            for (int64_t i = r; i < V; i += 11) row[i] = -INFINITY;
            row[(r * 37) % V] = 3.0f + (float)r; /* a spike, finite in every row */
        }
        st_tensor lt = {.type = ST_TYPE_F32, .ne = {V, ROWS, 1, 1}, .data = x};
        float params[6 * ROWS], drawn[ROWS];
        int32_t words[4 * ROWS], pen[P * ROWS], ids[ROWS];
        st_tensor pt = {.type = ST_TYPE_F32, .ne = {6, ROWS, 1, 1}, .data = params};
        st_tensor wt = {.type = ST_TYPE_I32, .ne = {4, ROWS, 1, 1}, .data = words};
        st_tensor nt = {.type = ST_TYPE_I32, .ne = {P, ROWS, 1, 1}, .data = pen};
        st_tensor it = {.type = ST_TYPE_I32, .ne = {ROWS, 1, 1, 1}, .data = ids};
        st_tensor dt = {.type = ST_TYPE_F32, .ne = {ROWS, 1, 1, 1}, .data = drawn};
        assert_true(st_tensor_set_packed_strides(&lt) && st_tensor_set_packed_strides(&pt) &&
                    st_tensor_set_packed_strides(&wt) && st_tensor_set_packed_strides(&nt) &&
                    st_tensor_set_packed_strides(&it) && st_tensor_set_packed_strides(&dt));
        for (size_t ci = 0; ci < sizeof(chains) / sizeof(chains[0]); ci++) {
            st_sampler *host[ROWS], *dev[ROWS];
            for (int r = 0; r < ROWS; r++) {
                st_sampler_params sp = st_sampler_params_default();
                sp.temp = chains[ci].temp, sp.min_p = chains[ci].min_p, sp.top_p = chains[ci].top_p;
                sp.top_k = chains[ci].top_k, sp.repeat_penalty = chains[ci].repeat;
                sp.frequency_penalty = chains[ci].frequency, sp.presence_penalty = chains[ci].presence;
                sp.seed = 1000 * si + 10 * ci + 7 * (uint64_t)r;
                assert_int_equal(st_sampler_init(&sp, V, &host[r], NULL), ST_OK);
                assert_int_equal(st_sampler_init(&sp, V, &dev[r], NULL), ST_OK);
                assert_true(st_sampler_draws_row(dev[r]));
            }
            for (int d = 0; d < DRAWS; d++) {
                for (int r = 0; r < ROWS; r++) {
                    st_row_draw rd;
                    st_sampler_next_draw(dev[r], &rd);
                    float *pr = params + 6 * r;
                    int32_t *wr = words + 4 * r;
                    pr[0] = rd.temp, pr[1] = rd.min_p, pr[2] = rd.top_p;
                    pr[3] = rd.repeat_penalty, pr[4] = rd.frequency_penalty, pr[5] = rd.presence_penalty;
                    memcpy(wr, rd.u, sizeof(rd.u));
                    wr[2] = rd.top_k, wr[3] = rd.n_penalized;
                    if (rd.n_penalized > 0)
                        memcpy(pen + P * r, rd.penalized, 2 * (size_t)rd.n_penalized * sizeof(int32_t));
                    ids[r] = -9;
                }
                st_cpu_draw_rows(&it, &dt, &lt, &pt, &wt, &nt);
                for (int r = 0; r < ROWS; r++) {
                    int32_t want = -1;
                    assert_int_equal(st_sampler_sample(host[r], x + r * V, &want, NULL), ST_OK);
                    assert_int_equal(ids[r], want);
                    assert_true(drawn[r] == x[r * V + want]);
                    st_sampler_accept(host[r], want);
                    st_sampler_accept(dev[r], ids[r]);
                }
            }
            for (int r = 0; r < ROWS; r++) st_sampler_free(host[r]), st_sampler_free(dev[r]);
        }
        /* bad rows, and a row not drawn */
        if (V >= 2) {
            for (int r = 0; r < ROWS; r++) {
                float *pr = params + 6 * r;
                pr[0] = 1.0f, pr[1] = 0.0f, pr[2] = r == 1 ? 0.5f : 1.0f, pr[3] = 1.0f, pr[4] = 0.0f, pr[5] = 0.0f;
                words[4 * r + 2] = r == 2 ? 5 : 0, words[4 * r + 3] = 0, ids[r] = -9;
            }
            x[1] = NAN;
            x[V + 1] = INFINITY;
            for (int64_t i = 0; i < V; i++) x[2 * V + i] = -INFINITY;
            params[6 * 3] = 0.0f;
            st_cpu_draw_rows(&it, &dt, &lt, &pt, &wt, &nt);
            assert_int_equal(ids[0], -1);
            assert_int_equal(ids[1], -1);
            assert_int_equal(ids[2], -2);
            assert_int_equal(ids[3], -9);
        }
        free(x);
    }
}

/* The k largest logits of each of n rows x [n][V] and their log-sum-exp, as a runner of
 * candidates gives them (st_cpu_top_k_logits): ids [n][k], vals [n][k + 1]. */
static void row_candidates(float *x, int64_t V, int64_t n, int32_t k, int32_t *ids, float *vals) {
    st_tensor lt = {.type = ST_TYPE_F32, .ne = {V, n, 1, 1}, .data = x};
    st_tensor vt = {.type = ST_TYPE_F32, .ne = {k + 1, n, 1, 1}, .data = vals};
    assert_true(st_tensor_set_packed_strides(&lt) && st_tensor_set_packed_strides(&vt));
    st_cpu_top_k_logits(ids, &vt, &lt, k);
}

/* A top-p chain from a row's 64 largest logits and its log-sum-exp (st_cpu_top_k_logits):
 * where st_sampler_top_p_keep settles the cut, it keeps exactly the tokens
 * st_sampler_sample's top-p keeps on the whole row, and st_sampler_sample_top_p_kept draws
 * its token from a sampler of the same seed; rows of both kinds occur (flat rows cut
 * beyond the candidates, peaked ones within). */
static void test_top_p_from_candidates(void **state) {
    (void)state;
    enum { K = 64, ROWS = 24 };
    const int64_t V = 5000;
    const float top_ps[] = {0.5f, 0.9f, 0.95f}, min_ps[] = {0.0f, 0.05f}, temps[] = {0.7f, 1.0f};
    float *x = malloc((size_t)(V * ROWS) * sizeof(float));
    st_token_prob *buf = malloc((size_t)V * sizeof(st_token_prob));
    assert_non_null(x);
    assert_non_null(buf);
    for (int r = 0; r < ROWS; r++) { /* spreads from flat to peaked; half the rows with a head of a few tokens */
        grid_logits(x + r * V, V, 500 + (uint64_t)r);
        for (int64_t t = 0; t < V; t++) x[r * V + t] *= (float)(r + 1) / 4.0f;
        for (int h = 0; r % 2 && h < 1 + r / 4; h++) x[r * V + (r * 131 + h * 977) % V] = 40.0f - 0.5f * (float)h;
    }
    int32_t ids[K * ROWS];
    float vals[(K + 1) * ROWS];
    row_candidates(x, V, ROWS, K, ids, vals);
    int settled = 0, unsettled = 0;
    for (size_t pi = 0; pi < 3; pi++)
        for (size_t mi = 0; mi < 2; mi++)
            for (int r = 0; r < ROWS; r++) {
                const float *row = x + r * V, *v = vals + r * (K + 1);
                const float temp = temps[(r + (int)pi) % 2];
                st_sampler *host = sampler(temp, 0, top_ps[pi], min_ps[mi], 77 + (uint64_t)r, V);
                st_sampler *cand = sampler(temp, 0, top_ps[pi], min_ps[mi], 77 + (uint64_t)r, V);
                assert_true(st_sampler_cuts_top_p(cand));
                const int32_t keep = st_sampler_top_p_keep(cand, v, K, v[K]);
                if (keep == 0) {
                    unsettled++;
                } else {
                    settled++;
                    st_candidates c = make(buf, row, V);
                    st_sample_top_p(&c, top_ps[pi]);
                    assert_int_equal(keep, c.size);
                    for (int d = 0; d < 4; d++) {
                        int32_t want = -1;
                        assert_int_equal(st_sampler_sample(host, row, &want, NULL), ST_OK);
                        assert_int_equal(st_sampler_sample_top_p_kept(cand, ids + r * K, v, keep), want);
                    }
                }
                st_sampler_free(host);
                st_sampler_free(cand);
            }
    assert_true(settled >= 20 && unsettled >= 20);
    /* a NaN among the candidates, or a log-sum-exp of NaN: only the whole row settles it */
    st_sampler *s = sampler(1.0f, 0, 0.9f, 0.0f, 1, V);
    float bad[3] = {2.0f, NAN, 1.0f};
    assert_int_equal(st_sampler_top_p_keep(s, bad, 3, 2.5f), 0);
    float good[3] = {2.0f, 1.5f, 1.0f};
    assert_int_equal(st_sampler_top_p_keep(s, good, 3, NAN), 0);
    st_sampler_free(s);
    free(x);
    free(buf);
}

/* OpenAI's frequency and presence penalties after the repetition penalty, as llama.cpp's
 * penalties sampler: each token of the history lowered by count * frequency + presence,
 * once per distinct token; the sampler applies them (greedy turns away from a token seen). */
static void test_frequency_presence(void **state) {
    (void)state;
    float logits[6] = {1.0f, 2.0f, -1.0f, 3.0f, 0.5f, 4.0f};
    st_token_prob buf[6];
    const int32_t last[5] = {3, 1, 3, 3, 5};
    st_candidates c = make(buf, logits, 6);
    st_sample_penalties(&c, last, 5, 1.0f, 0.5f, 0.25f);
    const float want[6] = {1.0f, 2.0f - 0.75f, -1.0f, 3.0f - 1.75f, 0.5f, 4.0f - 0.75f};
    for (int i = 0; i < 6; i++) assert_true(c.data[i].logit == want[i]);
    c = make(buf, logits, 6); /* the repetition penalty first: 3 / 2 - 1.75 */
    st_sample_penalties(&c, last, 5, 2.0f, 0.5f, 0.25f);
    assert_true(c.data[3].logit == 1.5f - 1.75f && c.data[2].logit == -1.0f && c.data[5].logit == 2.0f - 0.75f);
    st_sampler_params p = st_sampler_params_default();
    p.temp = 0.0f, p.presence_penalty = 2.0f;
    st_sampler *s = NULL;
    assert_int_equal(st_sampler_init(&p, 6, &s, NULL), ST_OK);
    int32_t id = -1;
    assert_int_equal(st_sampler_sample(s, logits, &id, NULL), ST_OK);
    assert_int_equal(id, 5);
    st_sampler_accept(s, 5); /* 4 - 2 < 3 */
    assert_int_equal(st_sampler_sample(s, logits, &id, NULL), ST_OK);
    assert_int_equal(id, 3);
    assert_false(st_sampler_fits_candidates(s, 6)); /* penalties: only the whole row, or a backend's sampling */
    assert_true(st_sampler_draws_row(s));
    st_sampler_free(s);
}

static void test_determinism(void **state) {
    (void)state;
    const int64_t V = 8;
    float logits[8];
    for (int i = 0; i < 8; i++) logits[i] = 0.1f * (float)i;
    int32_t a[200], b[200], c[200];
    st_sampler *s1 = sampler(1.0f, 0, 1.0f, 0.0f, 42, V), *s2 = sampler(1.0f, 0, 1.0f, 0.0f, 42, V),
               *s3 = sampler(1.0f, 0, 1.0f, 0.0f, 43, V);
    for (int i = 0; i < 200; i++) {
        assert_int_equal(st_sampler_sample(s1, logits, &a[i], NULL), ST_OK);
        assert_int_equal(st_sampler_sample(s2, logits, &b[i], NULL), ST_OK);
        assert_int_equal(st_sampler_sample(s3, logits, &c[i], NULL), ST_OK);
    }
    assert_memory_equal(a, b, sizeof(a));
    assert_memory_not_equal(a, c, sizeof(a));
    /* Pinned: the first draws for seed 42 (PCG32 stream 0, 53-bit uniforms, the
     * cumulative walk in id order). A change here changes every seeded run. */
    st_rng r;
    st_rng_seed(&r, 42, 0);
    double m = logits[7], total = 0.0;
    for (int i = 0; i < 8; i++) total += exp((double)logits[i] - m);
    for (int k = 0; k < 5; k++) {
        double t = st_rng_uniform(&r) * total, cum = 0.0;
        int32_t want = 7;
        for (int i = 0; i < 8; i++) {
            cum += exp((double)logits[i] - m);
            if (t < cum) {
                want = i;
                break;
            }
        }
        assert_int_equal(a[k], want);
    }
    st_sampler_free(s1);
    st_sampler_free(s2);
    st_sampler_free(s3);
}

static void test_params_check(void **state) {
    (void)state;
    st_error err = {0};
    st_sampler_params ok = st_sampler_params_default();
    assert_int_equal(st_sampler_params_check(&ok, &err), ST_OK);
    struct {
        const char *field, *needle;
        float value;
    } bad[] = {
        {"temp", "temperature", -0.1f}, {"temp", "temperature", NAN}, {"temp", "temperature", INFINITY},
        {"top_p", "top-p", 0.0f},       {"top_p", "top-p", 1.01f},    {"top_p", "top-p", -1.0f},
        {"top_p", "top-p", NAN},        {"min_p", "min-p", 1.0f},     {"min_p", "min-p", -0.01f},
        {"min_p", "min-p", NAN},        {"pen", "penalty", 0.0f},     {"pen", "penalty", -1.0f},
        {"pen", "penalty", NAN},        {"freq", "frequency penalty", 2.01f}, {"freq", "frequency penalty", NAN},
        {"pres", "presence penalty", -2.5f}, {"pres", "presence penalty", INFINITY},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        st_sampler_params p = ok;
        if (strcmp(bad[i].field, "temp") == 0) p.temp = bad[i].value;
        if (strcmp(bad[i].field, "top_p") == 0) p.top_p = bad[i].value;
        if (strcmp(bad[i].field, "min_p") == 0) p.min_p = bad[i].value;
        if (strcmp(bad[i].field, "pen") == 0) p.repeat_penalty = bad[i].value;
        if (strcmp(bad[i].field, "freq") == 0) p.frequency_penalty = bad[i].value;
        if (strcmp(bad[i].field, "pres") == 0) p.presence_penalty = bad[i].value;
        st_error_clear(&err);
        assert_int_equal(st_sampler_params_check(&p, &err), ST_ERROR_INVALID);
        assert_non_null(strstr(err.message, bad[i].needle));
        st_sampler *s = (st_sampler *)&err; /* must be reset to NULL */
        assert_int_equal(st_sampler_init(&p, 10, &s, NULL), ST_ERROR_INVALID);
        assert_null(s);
    }
    st_sampler_params p = ok;
    p.top_k = -1;
    assert_int_equal(st_sampler_params_check(&p, &err), ST_ERROR_INVALID);
    assert_non_null(strstr(err.message, "top-k"));
    p = ok;
    p.repeat_last_n = -1;
    assert_int_equal(st_sampler_params_check(&p, &err), ST_ERROR_INVALID);
    /* the edges of the valid ranges */
    p = ok;
    p.temp = 0.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1e-3f;
    p.repeat_last_n = 0;
    assert_int_equal(st_sampler_params_check(&p, &err), ST_OK);
}

static void test_bad_logits(void **state) {
    (void)state;
    st_sampler *s = sampler(1.0f, 40, 0.95f, 0.05f, 1, 3);
    float x[3] = {0.0f, NAN, 1.0f};
    int32_t id;
    st_error err = {0};
    assert_int_equal(st_sampler_sample(s, x, &id, &err), ST_ERROR_INVALID);
    assert_non_null(strstr(err.message, "NaN"));
    float w[3] = {0.0f, 1.0f, INFINITY};
    assert_int_equal(st_sampler_sample(s, w, &id, &err), ST_ERROR_INVALID);
    assert_non_null(strstr(err.message, "+inf (token 2)"));
    float y[3] = {-INFINITY, -INFINITY, -INFINITY};
    assert_int_equal(st_sampler_sample(s, y, &id, &err), ST_ERROR_INVALID);
    /* -inf entries are fine next to finite ones and are never drawn */
    float z[3] = {-INFINITY, 0.0f, -INFINITY};
    for (int i = 0; i < 100; i++) {
        assert_int_equal(st_sampler_sample(s, z, &id, &err), ST_OK);
        assert_int_equal(id, 1);
    }
    st_sampler_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rng_reference_stream),
        cmocka_unit_test(test_rng_uniform_range),
        cmocka_unit_test(test_sort_ties_by_id),
        cmocka_unit_test(test_top_k),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_top_p),
        cmocka_unit_test(test_min_p),
        cmocka_unit_test(test_repetition_penalty),
        cmocka_unit_test(test_temperature),
        cmocka_unit_test(test_filters_large_vocab),
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_draw_frequencies),
        cmocka_unit_test(test_draw_matches_walk),
        cmocka_unit_test(test_draws_row),
        cmocka_unit_test(test_row_draw_matches_sampler),
        cmocka_unit_test(test_top_p_from_candidates),
        cmocka_unit_test(test_frequency_presence),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_params_check),
        cmocka_unit_test(test_bad_logits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
