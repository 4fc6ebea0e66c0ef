/* Shared by the engine tests (test_engine.c, test_engine_stress.c): the fixture model on
 * the CPU backend, and a loop that steps an engine to the end collecting each request's
 * tokens, logits and finish. Include after cmocka.h. */
#ifndef STRIDE_TEST_ENGINE_COMMON_H
#define STRIDE_TEST_ENGINE_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stride/backend.h"
#include "stride/engine.h"
#include "stride/model.h"

#define FIXTURE_DIR STRIDE_TEST_DATA "/../fixtures/"

typedef struct test_model {
    st_backend *backend;
    st_model *model;
} test_model;

static inline void test_model_load(test_model *tm, const char *file) {
    char path[512];
    snprintf(path, sizeof(path), "%s%s", FIXTURE_DIR, file);
    st_error err = {0};
    st_model_load_options lo = {0};
    if (st_backend_init(ST_BACKEND_CPU, 0, &tm->backend, &err) != ST_OK ||
        st_layout_policy_resolve(&lo.policy, "on", NULL, NULL, &err) != ST_OK ||
        st_model_load(path, tm->backend, &lo, &tm->model, &err) != ST_OK)
        fail_msg("loading %s: %s", path, err.message);
}

static inline void test_model_free(test_model *tm) {
    st_model_free(tm->model);
    st_backend_free(tm->backend);
}

static inline st_engine *test_engine_new(st_model *m, int64_t n_ctx, int32_t n_parallel, int64_t n_blocks,
                                         int64_t max_batch_tokens, bool prefix_cache) {
    st_engine_options o = st_engine_options_default();
    o.n_ctx = n_ctx;
    o.n_parallel = n_parallel;
    o.n_blocks = n_blocks;
    o.max_batch_tokens = max_batch_tokens;
    o.kv_type = ST_TYPE_F32;
    o.prefix_cache = prefix_cache;
    st_engine *e = NULL;
    st_error err = {0};
    if (st_engine_init(m, &o, &e, &err) != ST_OK) fail_msg("engine: %s", err.message);
    return e;
}

/* What one request produced. */
#define TEST_MAX_GEN 64

typedef struct test_result {
    int32_t tokens[TEST_MAX_GEN];
    int n;
    float *logits;           /* [TEST_MAX_GEN][n_vocab] when the request asked for every row */
    bool finished;
    st_finish_reason reason;
    int64_t n_cached, n_generated;
    int n_events;
} test_result;

/* Records one event into res[ev->id - 1] (ids 1 .. n_res), checking its shape. */
static inline void test_record(const st_engine_event *ev, test_result *res, int64_t n_res, int64_t n_vocab) {
    assert_true(ev->id >= 1 && ev->id <= n_res);
    test_result *r = &res[ev->id - 1];
    assert_false(r->finished); /* nothing after the finished event */
    r->n_events++;
    if (ev->token >= 0) {
        assert_true(ev->token < n_vocab);
        assert_true(r->n < TEST_MAX_GEN);
        if (ev->logits && r->logits) memcpy(r->logits + (size_t)r->n * (size_t)n_vocab, ev->logits,
                                            (size_t)n_vocab * sizeof(float));
        r->tokens[r->n++] = ev->token;
    } else {
        assert_true(ev->finished);
        assert_true(ev->reason == ST_FINISH_CANCELLED || ev->reason == ST_FINISH_ERROR);
    }
    if (ev->finished) {
        r->finished = true;
        r->reason = ev->reason;
        r->n_cached = ev->n_cached;
        r->n_generated = ev->n_generated;
        assert_int_equal(ev->n_generated, r->n);
    }
}

static inline void test_drain(st_engine *e, test_result *res, int64_t n_res, int64_t n_vocab) {
    st_engine_event ev;
    while (st_engine_poll(e, &ev)) test_record(&ev, res, n_res, n_vocab);
}

/* Steps e until no request is pending, checking its invariants after every step; returns
 * the most requests that ran at once. */
static inline int32_t test_run(st_engine *e, test_result *res, int64_t n_res, int64_t n_vocab) {
    int32_t most = 0;
    st_error err = {0};
    for (int guard = 0; st_engine_pending(e) > 0; guard++) {
        assert_true(guard < 100000);
        if (st_engine_step(e, &err) != ST_OK) fail_msg("step: %s", err.message);
        st_engine_stats s;
        st_engine_get_stats(e, &s);
        if (s.n_running > most) most = s.n_running;
        if (st_engine_check(e, &err) != ST_OK) fail_msg("check: %s", err.message);
        test_drain(e, res, n_res, n_vocab);
    }
    test_drain(e, res, n_res, n_vocab);
    return most;
}

/* splitmix64 */
static inline uint64_t test_rand(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#endif
