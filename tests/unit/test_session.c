/* Sessions: st_session_decode (the decode step returning the session's own logits row)
 * against st_session_eval of the same tokens, bit for bit, and its error cases. On the CPU
 * backend always; on CUDA too where a device is present (the GPU machine's ctest run),
 * where both go through the recorded decode graph and the page-locked step buffers. */
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

#define FIXTURE STRIDE_TEST_DATA "/../fixtures/llama-f32.gguf"
#define N_CTX 16

typedef struct fx {
    st_backend *backend;
    st_model *model;
    st_session *eval, *decode; /* the same tokens through each entry point */
} fx;

static int setup_on(void **state, st_backend_kind kind) {
    fx *f = calloc(1, sizeof(*f));
    st_error err = {0};
    st_model_load_options lo = {0};
    if (st_backend_init(kind, 0, &f->backend, &err) != ST_OK) {
        free(f);
        *state = NULL; /* no such device here: the test says so and skips */
        return 0;
    }
    st_session_options so = st_session_options_default();
    so.n_ctx = N_CTX;
    if (st_layout_policy_resolve(&lo.policy, "on", NULL, NULL, &err) != ST_OK ||
        st_model_load(FIXTURE, f->backend, &lo, &f->model, &err) != ST_OK ||
        st_session_init(f->model, &so, &f->eval, &err) != ST_OK ||
        st_session_init(f->model, &so, &f->decode, &err) != ST_OK) {
        fprintf(stderr, "setup: %s\n", err.message);
        return -1;
    }
    *state = f;
    return 0;
}

static int setup_cpu(void **state) { return setup_on(state, ST_BACKEND_CPU); }
static int setup_cuda(void **state) { return setup_on(state, ST_BACKEND_CUDA); }

static int teardown(void **state) {
    fx *f = *state;
    if (!f) return 0;
    st_session_free(f->eval);
    st_session_free(f->decode);
    st_model_free(f->model);
    st_backend_free(f->backend);
    free(f);
    return 0;
}

/* A prompt, then decode steps (the first runs plainly, the second records the graph, the
 * rest replay it), then a rewind and the same steps again: every row the same bits. */
static void test_decode_matches_eval(void **state) {
    fx *f = *state;
    if (!f) skip();
    st_error err = {0};
    const int64_t V = f->model->hp.n_vocab;
    const int32_t prompt[3] = {1, 7, 3};
    const int32_t steps[6] = {5, 2, 9, 4, 4, 8};
    float *want = malloc((size_t)V * sizeof(float));
    assert_non_null(want);
    assert_int_equal(st_session_eval(f->eval, prompt, 3, false, want, &err), ST_OK);
    assert_int_equal(st_session_eval(f->decode, prompt, 3, false, NULL, &err), ST_OK);
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < 6; i++) {
            const float *got = NULL;
            assert_int_equal(st_session_eval(f->eval, &steps[i], 1, false, want, &err), ST_OK);
            assert_int_equal(st_session_decode(f->decode, steps[i], &got, &err), ST_OK);
            assert_non_null(got);
            assert_memory_equal(got, want, (size_t)V * sizeof(float));
            assert_int_equal(st_session_n_past(f->decode), st_session_n_past(f->eval));
            assert_int_equal(st_session_n_past(f->decode), 3 + i + 1);
        }
        st_session_rewind(f->eval, 3);
        st_session_rewind(f->decode, 3);
    }
    free(want);
}

/* One-token evals that read no logits, then a decode step: the same bits as decode steps
 * all along (each step's id and position pass through the same page-locked buffer). */
static void test_eval_without_logits(void **state) {
    fx *f = *state;
    if (!f) skip();
    st_error err = {0};
    const int32_t steps[5] = {3, 1, 6, 2, 7};
    const float *want = NULL, *got = NULL;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(st_session_eval(f->eval, &steps[i], 1, false, NULL, &err), ST_OK);
        assert_int_equal(st_session_decode(f->decode, steps[i], &want, &err), ST_OK);
    }
    assert_int_equal(st_session_decode(f->decode, steps[4], &want, &err), ST_OK);
    assert_int_equal(st_session_decode(f->eval, steps[4], &got, &err), ST_OK);
    assert_memory_equal(got, want, (size_t)f->model->hp.n_vocab * sizeof(float));
}

/* Decode steps (recorded), then an eval of several tokens (which may grow backend scratch
 * the recording addresses: the session records again), then decode steps: the same bits
 * as one-token evals of the same tokens. */
static void test_decode_after_batch_eval(void **state) {
    fx *f = *state;
    if (!f) skip();
    st_error err = {0};
    const int64_t V = f->model->hp.n_vocab;
    const int32_t before[3] = {2, 8, 5}, batch[4] = {1, 1, 6, 3}, after[3] = {7, 0, 4};
    float *want = malloc((size_t)V * sizeof(float));
    assert_non_null(want);
    const float *got = NULL;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(st_session_eval(f->eval, &before[i], 1, false, want, &err), ST_OK);
        assert_int_equal(st_session_decode(f->decode, before[i], &got, &err), ST_OK);
    }
    assert_int_equal(st_session_eval(f->eval, batch, 4, false, NULL, &err), ST_OK);
    assert_int_equal(st_session_eval(f->decode, batch, 4, false, NULL, &err), ST_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(st_session_eval(f->eval, &after[i], 1, false, want, &err), ST_OK);
        assert_int_equal(st_session_decode(f->decode, after[i], &got, &err), ST_OK);
        assert_memory_equal(got, want, (size_t)V * sizeof(float));
    }
    assert_int_equal(st_session_n_past(f->decode), 10);
    free(want);
}

/* Decode steps through every depth bucket of the recorded steps (a context of 600 keys:
 * buckets of 64, 128, 256, 512 and 600) against a session that runs every step plainly
 * (STRIDE_DISABLE_GRAPHS=1 when it was made): the same bits at every position, the
 * bucket edges included. */
static void test_decode_across_buckets(void **state) {
    fx *f = *state;
    if (!f) skip();
    st_error err = {0};
    const int64_t n_ctx = 600, V = f->model->hp.n_vocab;
    st_session_options so = st_session_options_default();
    so.n_ctx = n_ctx;
    st_session *plain = NULL, *recorded = NULL;
    const char *was = getenv("STRIDE_DISABLE_GRAPHS"); /* restored afterwards */
    char *saved = was ? strdup(was) : NULL;
    assert_int_equal(setenv("STRIDE_DISABLE_GRAPHS", "1", 1), 0);
    assert_int_equal(st_session_init(f->model, &so, &plain, &err), ST_OK);
    assert_int_equal(unsetenv("STRIDE_DISABLE_GRAPHS"), 0);
    assert_int_equal(st_session_init(f->model, &so, &recorded, &err), ST_OK);
    if (saved) assert_int_equal(setenv("STRIDE_DISABLE_GRAPHS", saved, 1), 0);
    free(saved);
    float *want = malloc((size_t)V * sizeof(float));
    assert_non_null(want);
    for (int64_t i = 0; i < n_ctx; i++) {
        const int32_t token = (int32_t)((i * 7 + 3) % V);
        const float *w = NULL, *got = NULL;
        assert_int_equal(st_session_decode(plain, token, &w, &err), ST_OK);
        memcpy(want, w, (size_t)V * sizeof(float));
        assert_int_equal(st_session_decode(recorded, token, &got, &err), ST_OK);
        assert_memory_equal(got, want, (size_t)V * sizeof(float));
    }
    free(want);
    st_session_free(plain);
    st_session_free(recorded);
}

static void test_decode_errors(void **state) {
    fx *f = *state;
    if (!f) skip();
    st_error err = {0};
    const int32_t V = (int32_t)f->model->hp.n_vocab;
    const float *got = (const float *)&err; /* not NULL: an error must clear it */
    assert_int_equal(st_session_decode(f->decode, V, &got, &err), ST_ERROR_INVALID);
    assert_null(got);
    assert_non_null(strstr(err.message, "outside the vocabulary"));
    assert_int_equal(st_session_decode(f->decode, -1, &got, &err), ST_ERROR_INVALID);
    assert_int_equal(st_session_n_past(f->decode), 0);
    /* the context full: N_CTX steps fit, the next one does not */
    for (int i = 0; i < N_CTX; i++) assert_int_equal(st_session_decode(f->decode, i % 5, &got, &err), ST_OK);
    assert_int_equal(st_session_decode(f->decode, 1, &got, &err), ST_ERROR_INVALID);
    assert_null(got);
    assert_non_null(strstr(err.message, "do not fit"));
    assert_int_equal(st_session_n_past(f->decode), N_CTX);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_decode_matches_eval, setup_cpu, teardown),
        cmocka_unit_test_setup_teardown(test_eval_without_logits, setup_cpu, teardown),
        cmocka_unit_test_setup_teardown(test_decode_after_batch_eval, setup_cpu, teardown),
        cmocka_unit_test_setup_teardown(test_decode_across_buckets, setup_cpu, teardown),
        cmocka_unit_test_setup_teardown(test_decode_errors, setup_cpu, teardown),
        cmocka_unit_test_setup_teardown(test_decode_matches_eval, setup_cuda, teardown),
        cmocka_unit_test_setup_teardown(test_eval_without_logits, setup_cuda, teardown),
        cmocka_unit_test_setup_teardown(test_decode_after_batch_eval, setup_cuda, teardown),
        cmocka_unit_test_setup_teardown(test_decode_across_buckets, setup_cuda, teardown),
        cmocka_unit_test_setup_teardown(test_decode_errors, setup_cuda, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
