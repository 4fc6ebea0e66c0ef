/* Perplexity: log-softmax on hand-made logits, and st_perplexity_eval on a tiny fixture
 * model against the same numbers recomputed here from full-chunk logits (chunking, the
 * scored half, BOS replacement, the uncertainty formula), plus the error cases. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "stride/backend.h"
#include "stride/device.h"
#include "stride/model.h"
#include "stride/perplexity.h"

#define FIXTURE STRIDE_TEST_DATA "/../fixtures/llama-f32.gguf"

static void test_log_softmax(void **state) {
    (void)state;
    const float x[4] = {1.0f, 2.0f, 3.0f, -1.0f};
    double z = exp(1.0) + exp(2.0) + exp(3.0) + exp(-1.0);
    for (int t = 0; t < 4; t++) assert_float_equal(st_log_softmax_at(x, 4, t), (double)x[t] - log(z), 1e-14);
    /* large logits do not overflow */
    const float y[2] = {1000.0f, 1000.0f};
    assert_float_equal(st_log_softmax_at(y, 2, 1), -log(2.0), 1e-14);
}

typedef struct fx {
    st_backend *backend;
    st_model *model;
    st_session *session;
} fx;

static int setup(void **state) {
    fx *f = calloc(1, sizeof(*f));
    st_error err = {0};
    st_model_load_options lo = {0};
    if (st_layout_policy_resolve(&lo.policy, "off", NULL, NULL, &err) != ST_OK ||
        st_backend_init(ST_BACKEND_CPU, 0, &f->backend, &err) != ST_OK ||
        st_model_load(FIXTURE, f->backend, &lo, &f->model, &err) != ST_OK) {
        fprintf(stderr, "setup: %s\n", err.message);
        return -1;
    }
    st_session_options so = st_session_options_default();
    so.n_ctx = 64;
    so.kv_type = ST_TYPE_F32;
    if (st_session_init(f->model, &so, &f->session, &err) != ST_OK) {
        fprintf(stderr, "setup: %s\n", err.message);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fx *f = *state;
    st_session_free(f->session);
    st_model_free(f->model);
    st_backend_free(f->backend);
    free(f);
    return 0;
}

static void make_tokens(int32_t *t, int64_t n, int64_t V) {
    uint32_t x = 12345;
    for (int64_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        t[i] = (int32_t)(3 + (x >> 8) % (uint32_t)(V - 3));
    }
}

/* The reference: every chunk evaluated whole, then NLL over the second half. */
static void reference(fx *f, const int32_t *tokens, int64_t n_ctx, int64_t n_chunks, int32_t bos, double *ppl,
                      double *err_out, double *running) {
    const int64_t V = f->model->hp.n_vocab;
    float *logits = malloc((size_t)(n_ctx * V) * sizeof(float));
    int32_t *chunk = malloc((size_t)n_ctx * sizeof(int32_t));
    double s1 = 0.0, s2 = 0.0;
    int64_t count = 0;
    for (int64_t c = 0; c < n_chunks; c++) {
        memcpy(chunk, tokens + c * n_ctx, (size_t)n_ctx * sizeof(int32_t));
        if (bos >= 0) chunk[0] = bos;
        st_session_rewind(f->session, 0);
        assert_int_equal(st_session_eval(f->session, chunk, n_ctx, true, logits, NULL), ST_OK);
        for (int64_t i = n_ctx / 2; i < n_ctx - 1; i++) {
            double m = -INFINITY, z = 0.0;
            for (int64_t v = 0; v < V; v++) m = fmax(m, logits[i * V + v]);
            for (int64_t v = 0; v < V; v++) z += exp(logits[i * V + v] - m);
            double nll = -(logits[i * V + chunk[i + 1]] - m - log(z));
            s1 += nll;
            s2 += nll * nll;
            count++;
        }
        running[c] = exp(s1 / (double)count);
    }
    double mean = s1 / (double)count, var = s2 / (double)count - mean * mean;
    *ppl = exp(mean);
    *err_out = *ppl * sqrt(var / (double)(count - 1));
    free(logits);
    free(chunk);
}

typedef struct seen {
    int64_t calls;
    double running[16];
    int64_t total;
} seen;

static void on_chunk(void *ctx, int64_t chunk, int64_t total, const st_perplexity_result *r) {
    seen *s = ctx;
    assert_int_equal(chunk, s->calls + 1);
    assert_int_equal(r->n_chunks, chunk);
    s->running[s->calls++] = r->ppl;
    s->total = total;
}

static void test_against_reference(void **state) {
    fx *f = *state;
    const int64_t V = f->model->hp.n_vocab, n_ctx = 32, n = 3 * n_ctx + 11; /* a partial tail */
    int32_t *tokens = malloc((size_t)n * sizeof(int32_t));
    make_tokens(tokens, n, V);
    const int32_t bos_cases[2] = {1, -1};
    const int64_t batches[3] = {0, 5, 1};
    for (int ib = 0; ib < 2; ib++) {
        double want, want_err, running[3];
        reference(f, tokens, n_ctx, 3, bos_cases[ib], &want, &want_err, running);
        for (int jb = 0; jb < 3; jb++) {
            seen s = {0};
            st_perplexity_options o = {.n_ctx = n_ctx, .bos = bos_cases[ib], .n_batch = batches[jb],
                                       .on_chunk = on_chunk, .on_chunk_ctx = &s};
            st_perplexity_result r;
            st_error err = {0};
            assert_int_equal(st_perplexity_eval(f->session, tokens, n, &o, &r, &err), ST_OK);
            assert_int_equal(r.n_chunks, 3);
            assert_int_equal(r.n_scored, 3 * (n_ctx - 1 - n_ctx / 2));
            assert_int_equal(s.calls, 3);
            assert_int_equal(s.total, 3);
            /* The reference evaluates each chunk in one pass, stride in pieces: the float32
             * sums inside the model may round differently, far below 1e-6 relative. */
            assert_float_equal(r.ppl / want, 1.0, 1e-6);
            assert_float_equal(r.ppl_err / want_err, 1.0, 1e-5);
            for (int c = 0; c < 3; c++) assert_float_equal(s.running[c] / running[c], 1.0, 1e-6);
            assert_float_equal(exp(r.nll), r.ppl, 1e-12 * r.ppl);
        }
    }
    /* max_chunks */
    st_perplexity_options o = {.n_ctx = n_ctx, .bos = 1, .max_chunks = 2};
    st_perplexity_result r;
    assert_int_equal(st_perplexity_eval(f->session, tokens, n, &o, &r, NULL), ST_OK);
    assert_int_equal(r.n_chunks, 2);
    free(tokens);
}

static void test_errors(void **state) {
    fx *f = *state;
    int32_t tokens[100];
    make_tokens(tokens, 100, f->model->hp.n_vocab);
    st_perplexity_result r;
    st_error err = {0};
    /* shorter than one chunk: both counts named */
    st_perplexity_options o = {.n_ctx = 32, .bos = 1};
    assert_int_equal(st_perplexity_eval(f->session, tokens, 31, &o, &r, &err), ST_ERROR_INVALID);
    assert_non_null(strstr(err.message, "31 tokens"));
    assert_non_null(strstr(err.message, "32-token chunk"));
    /* exactly one chunk is enough */
    assert_int_equal(st_perplexity_eval(f->session, tokens, 32, &o, &r, &err), ST_OK);
    assert_int_equal(r.n_chunks, 1);
    /* a chunk too short to score anything */
    o.n_ctx = 2;
    assert_int_equal(st_perplexity_eval(f->session, tokens, 100, &o, &r, &err), ST_ERROR_INVALID);
    assert_non_null(strstr(err.message, "at least 3"));
    /* a chunk larger than the session's context */
    o.n_ctx = 80;
    assert_int_equal(st_perplexity_eval(f->session, tokens, 100, &o, &r, &err), ST_ERROR_INVALID);
    assert_non_null(strstr(err.message, "context"));
    /* a token outside the vocabulary: found before anything is evaluated, wherever it is */
    tokens[40] = (int32_t)f->model->hp.n_vocab;
    o.n_ctx = 32;
    o.max_chunks = 0;
    assert_int_equal(st_perplexity_eval(f->session, tokens, 64, &o, &r, &err), ST_ERROR_INVALID);
    assert_non_null(strstr(err.message, "vocabulary"));
    assert_non_null(strstr(err.message, "position 40"));
    assert_int_equal(r.n_chunks, 0);
    /* in the last, scored-only slot of a chunk (a target that is never evaluated) */
    tokens[40] = 5;
    tokens[31] = (int32_t)f->model->hp.n_vocab + 1000;
    assert_int_equal(st_perplexity_eval(f->session, tokens, 64, &o, &r, &err), ST_ERROR_INVALID);
    assert_non_null(strstr(err.message, "position 31"));
    /* a chunk's first slot is BOS when the vocabulary adds one: what the input held there is never read */
    assert_int_equal(st_perplexity_eval(f->session, tokens + 32, 32, &o, &r, &err), ST_OK);
    tokens[31] = 5;
    tokens[32] = -7;
    assert_int_equal(st_perplexity_eval(f->session, tokens + 32, 32, &o, &r, &err), ST_OK);
    o.bos = -1;
    assert_int_equal(st_perplexity_eval(f->session, tokens + 32, 32, &o, &r, &err), ST_ERROR_INVALID);
    assert_non_null(strstr(err.message, "token id -7 at position 0"));
    /* a BOS id beyond the vocabulary names the model's metadata, not the input */
    tokens[32] = 5;
    o.bos = (int32_t)f->model->hp.n_vocab;
    assert_int_equal(st_perplexity_eval(f->session, tokens, 64, &o, &r, &err), ST_ERROR_FORMAT);
    assert_non_null(strstr(err.message, "tokenizer.ggml.bos_token_id"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_log_softmax),
        cmocka_unit_test_setup_teardown(test_against_reference, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
