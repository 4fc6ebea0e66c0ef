/* A long random walk of the engine under memory pressure on the CPU backend: requests
 * added (prompts from a few templates that share prefixes, random lengths, greedy or
 * seeded sampling), forked, cancelled at random, steps in between. After every step the
 * engine's invariants hold (every block's reference count is what the running sequences
 * hold); every request gets exactly one finished event; a request that ran to its end
 * produced exactly the tokens every other request with the same prompt and sampling
 * produced (whatever it ran beside, whether it was pre-empted, whether its prefix came
 * from the cache); and at the end every block is back. Sized to run in seconds under
 * AddressSanitizer (CI runs the unit tests there). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "stride/cpu_ops.h"
#include "test_engine_common.h"

enum {
    N_TEMPLATES = 12,
    N_SEEDS = 2,
    MAX_REQUESTS = 1200,
    N_OPS = 240,
    GEN_MAX = 50,
};

typedef struct stress_req {
    int key;       /* template * 2 * N_SEEDS + seed * 2 + sampled, or -1 for a fork */
    int64_t max_tokens;
    test_result r;
} stress_req;

typedef struct memo {
    bool known;
    int32_t tokens[TEST_MAX_GEN];
    int n;
    st_finish_reason reason;
} memo;

static void test_random_walk(void **state) {
    (void)state;
    /* one thread: thousands of steps of a few tiny ops each, where OpenMP's barriers cost
     * more than the work on a loaded machine (the results do not depend on it) */
    st_cpu_set_threads(1);
    test_model tm;
    test_model_load(&tm, "llama-f32.gguf");
    const int64_t V = tm.model->hp.n_vocab;
    /* 12 rows, 8 blocks of 64 (a sequence needs up to 2): pre-emption all the time */
    st_engine *e = test_engine_new(tm.model, 120, 12, 6, 64, true);
    uint64_t rng = 2024;

    /* templates: a third share a 64-token prefix (a system prompt) and add up to 16 tokens,
     * the others 1 to 50 tokens of their own; every request crosses a block boundary while
     * decoding (prompt + generated > 64), where blocks run out */
    int32_t templ[N_TEMPLATES][80];
    int64_t templ_len[N_TEMPLATES], templ_gen[N_TEMPLATES];
    int32_t shared[64];
    for (int i = 0; i < 64; i++) shared[i] = (int32_t)(test_rand(&rng) % (uint64_t)V);
    for (int t = 0; t < N_TEMPLATES; t++) {
        templ_len[t] = t < N_TEMPLATES / 3 ? 65 + (int64_t)(test_rand(&rng) % 16) : 1 + (int64_t)(test_rand(&rng) % 50);
        templ_gen[t] = GEN_MAX / 2 + (int64_t)(test_rand(&rng) % (GEN_MAX / 2));
        for (int64_t i = 0; i < templ_len[t]; i++)
            templ[t][i] = t < N_TEMPLATES / 3 && i < 64 ? shared[i] : (int32_t)(test_rand(&rng) % (uint64_t)V);
    }
    stress_req *reqs = calloc(MAX_REQUESTS, sizeof(stress_req));
    test_result *res = calloc(MAX_REQUESTS, sizeof(test_result));
    memo memos[N_TEMPLATES * N_SEEDS * 2] = {0};
    int64_t n_req = 0, n_checked = 0, n_cancel_calls = 0, n_forks = 0;
    st_error err = {0};

    for (int op = 0; op < N_OPS || st_engine_pending(e) > 0; op++) {
        assert_true(op < 20 * N_OPS);
        const uint64_t x = test_rand(&rng);
        const bool adding = op < N_OPS;
        if (adding && x % 3 == 0 && n_req < MAX_REQUESTS) { /* add one or a few */
            for (int k = 0; k < 1 + (int)((x >> 8) % 3) && n_req < MAX_REQUESTS; k++) {
                const uint64_t y = test_rand(&rng);
                const int t = (int)(y % N_TEMPLATES), seed = (int)((y >> 8) % N_SEEDS), sampled = (int)((y >> 16) & 1);
                st_request_params p = st_request_params_default();
                p.prompt = templ[t];
                p.n_prompt = templ_len[t];
                p.max_tokens = templ_gen[t];
                p.sampling.seed = (uint64_t)seed;
                p.sampling.temp = sampled ? 0.9f : 0.0f;
                p.sampling.repeat_penalty = 1.1f;
                int64_t id = 0;
                assert_int_equal(st_engine_add(e, &p, &id, &err), ST_OK);
                assert_int_equal(id, n_req + 1);
                reqs[n_req++] = (stress_req){.key = (t * N_SEEDS + seed) * 2 + sampled, .max_tokens = templ_gen[t]};
            }
        }
        if (adding && x % 7 == 1 && n_req > 0 && n_req < MAX_REQUESTS) { /* fork someone, maybe finished */
            const int64_t parent = 1 + (int64_t)((x >> 12) % (uint64_t)n_req);
            st_request_params p = st_request_params_default();
            p.sampling.seed = x >> 20;
            p.max_tokens = 1 + (int64_t)((x >> 24) % GEN_MAX);
            int64_t id = 0;
            const st_status s = st_engine_fork(e, parent, &p, &id, &err);
            if (s == ST_OK) {
                assert_int_equal(id, n_req + 1);
                reqs[n_req++] = (stress_req){.key = -1, .max_tokens = p.max_tokens};
                n_forks++;
            } else {
                assert_int_equal(s, ST_ERROR_INVALID); /* the parent had finished */
                assert_true(res[parent - 1].finished);
            }
        }
        if (adding && x % 8 == 2 && n_req > 0) { /* cancel anyone, finished or not */
            const int64_t id = 1 + (int64_t)((x >> 32) % (uint64_t)n_req);
            assert_int_equal(st_engine_cancel(e, id, &err), ST_OK);
            n_cancel_calls++;
        }
        if (st_engine_step(e, &err) != ST_OK) fail_msg("op %d: step: %s", op, err.message);
        if (st_engine_check(e, &err) != ST_OK) fail_msg("op %d: check: %s", op, err.message);
        st_engine_event ev;
        while (st_engine_poll(e, &ev)) {
            test_record(&ev, res, n_req, V);
            if (!ev.finished) continue;
            const stress_req *q = &reqs[ev.id - 1];
            const test_result *r = &res[ev.id - 1];
            if (ev.reason == ST_FINISH_CANCELLED) continue;
            assert_true(ev.reason == ST_FINISH_LENGTH || ev.reason == ST_FINISH_CONTEXT);
            assert_true(r->n <= q->max_tokens);
            if (q->key < 0) continue;
            memo *m = &memos[q->key];
            if (!m->known) {
                m->known = true;
                m->n = r->n;
                m->reason = r->reason;
                memcpy(m->tokens, r->tokens, (size_t)r->n * sizeof(int32_t));
            } else {
                assert_int_equal(m->n, r->n);
                assert_int_equal(m->reason, r->reason);
                assert_memory_equal(m->tokens, r->tokens, (size_t)r->n * sizeof(int32_t));
                n_checked++;
            }
        }
    }
    st_engine_stats s;
    st_engine_get_stats(e, &s);
    int64_t n_tokens = 0;
    for (int64_t i = 0; i < n_req; i++) {
        assert_true(res[i].finished);
        n_tokens += res[i].n;
    }
    assert_int_equal(s.tokens_out, n_tokens);
    assert_int_equal(s.requests_added, n_req);
    assert_int_equal(s.requests_finished, n_req);
    assert_int_equal(s.blocks_used, 0);
    assert_int_equal(s.blocks_cached + s.blocks_free, 6);
    assert_int_equal(st_engine_check(e, &err), ST_OK);
    /* the walk went through what it is meant to exercise */
    printf("stress: %lld forks, %lld cancel calls, %lld requests, %lld compared, %lld steps, %lld pre-emptions, %lld prompt tokens cached (%lld tokens in all), "
           "%lld evictions, %lld copies, %lld prefill + %lld decode tokens\n",
           (long long)n_forks, (long long)n_cancel_calls, (long long)n_req, (long long)n_checked, (long long)s.steps, (long long)s.preemptions,
           (long long)s.prompt_tokens_cached, (long long)s.cache_hit_tokens, (long long)s.evictions, (long long)s.block_copies,
           (long long)s.prefill_tokens, (long long)s.decode_tokens);
    assert_true(s.preemptions > 10);
    assert_true(s.prompt_tokens_cached > 500 && s.cache_hit_tokens > s.prompt_tokens_cached);
    assert_true(s.evictions > 10);
    assert_true(s.block_copies > 0);
    assert_true(n_checked > 30);
    assert_true(n_cancel_calls > 20 && n_forks > 10);
    st_engine_free(e);
    free(reqs);
    free(res);
    test_model_free(&tm);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_walk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
