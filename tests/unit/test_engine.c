/* The engine (stride/engine.h) on the CPU backend with the transformers fixtures: batch
 * invariance for every architecture (a sequence alone and among 64 others: the same
 * logits, bit for bit, and the same tokens), the engine against a session, prefix reuse
 * and copy-on-write against recomputation, pre-emption under memory pressure losing
 * nothing, every block coming back after cancels and finishes, finish reasons, log-probs
 * and the validation of every input. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "stride/cpu_ops.h"
#include "test_engine_common.h"

#define V_MAX 384 /* the fixtures' vocabulary */

static int64_t vocab(const test_model *tm) { return tm->model->hp.n_vocab; }

static void random_prompt(uint64_t *rng, int32_t *out, int64_t n, int64_t n_vocab) {
    for (int64_t i = 0; i < n; i++) out[i] = (int32_t)(test_rand(rng) % (uint64_t)n_vocab);
}

static st_request_params greedy(const int32_t *prompt, int64_t n, int64_t max_tokens) {
    st_request_params p = st_request_params_default();
    p.prompt = prompt;
    p.n_prompt = n;
    p.sampling.temp = 0.0f;
    p.max_tokens = max_tokens;
    return p;
}

static int64_t add(st_engine *e, const st_request_params *p) {
    int64_t id = 0;
    st_error err = {0};
    if (st_engine_add(e, p, &id, &err) != ST_OK) fail_msg("add: %s", err.message);
    return id;
}

static void assert_all_blocks_back(const st_engine *e) {
    st_engine_stats s;
    st_engine_get_stats(e, &s);
    assert_int_equal(s.blocks_used, 0);
    assert_int_equal(s.blocks_cached + s.blocks_free, s.n_blocks);
    assert_int_equal(s.n_running, 0);
    assert_int_equal(s.n_waiting, 0);
    assert_int_equal(st_engine_check(e, NULL), ST_OK);
}

static void assert_same_run(const test_result *a, const test_result *b, int64_t n_vocab) {
    assert_int_equal(a->n, b->n);
    assert_memory_equal(a->tokens, b->tokens, (size_t)a->n * sizeof(int32_t));
    if (a->logits && b->logits)
        assert_memory_equal(a->logits, b->logits, (size_t)a->n * (size_t)n_vocab * sizeof(float));
}

/* ---- batch invariance ----------------------------------------------------------------- */

/* Sequence X alone, then X added among 64 others (random prompts of 1 to 24 tokens, some
 * greedy, some sampled, generating at least as long as X) in a 65-row engine, where X's prompt
 * is one run of a 65-sequence prefill and its every decode step one of 65 tokens: X's
 * every logits row bit for bit, and its tokens. (Chunks mixed with decode tokens: the
 * pre-emption test.) */
static void batch_invariance(const char *file, uint64_t seed) {
    test_model tm;
    test_model_load(&tm, file);
    const int64_t V = vocab(&tm);
    enum { N_OTHERS = 64, X_GEN = 12 };
    uint64_t rng = seed;
    int32_t x_prompt[37];
    random_prompt(&rng, x_prompt, 37, V);
    st_request_params px = greedy(x_prompt, 37, X_GEN);
    px.logits = ST_REQUEST_LOGITS_EVERY;

    test_result alone = {.logits = calloc((size_t)TEST_MAX_GEN * V, sizeof(float))};
    st_engine *e1 = test_engine_new(tm.model, 128, 1, 0, 512, true);
    add(e1, &px);
    test_run(e1, &alone, 1, V);
    assert_true(alone.finished && alone.reason == ST_FINISH_LENGTH && alone.n == X_GEN);
    st_engine_free(e1);

    st_engine *e2 = test_engine_new(tm.model, 128, N_OTHERS + 1, 0, 4096, true);
    test_result *res = calloc(N_OTHERS + 1, sizeof(test_result));
    int32_t prompts[N_OTHERS][24];
    int64_t x_id = 0;
    for (int i = 0; i < N_OTHERS; i++) {
        if (i == N_OTHERS / 2) x_id = add(e2, &px);
        const int64_t n = 1 + (int64_t)(test_rand(&rng) % 24);
        random_prompt(&rng, prompts[i], n, V);
        st_request_params p = greedy(prompts[i], n, X_GEN + (int64_t)(test_rand(&rng) % 4));
        if (i % 3 == 0) {
            p.sampling = st_sampler_params_default();
            p.sampling.seed = (uint64_t)i;
        }
        add(e2, &p);
    }
    res[x_id - 1].logits = calloc((size_t)TEST_MAX_GEN * V, sizeof(float));
    const int32_t most = test_run(e2, res, N_OTHERS + 1, V);
    assert_int_equal(most, N_OTHERS + 1); /* X decoded among all of them */
    assert_same_run(&alone, &res[x_id - 1], V);
    for (int i = 0; i < N_OTHERS + 1; i++) assert_true(res[i].finished && res[i].reason == ST_FINISH_LENGTH);
    assert_all_blocks_back(e2);
    st_engine_free(e2);
    free(res[x_id - 1].logits);
    free(res);
    free(alone.logits);
    test_model_free(&tm);
}

static void test_batch_invariance_llama(void **state) { (void)state, batch_invariance("llama-f32.gguf", 1); }
static void test_batch_invariance_qwen3(void **state) { (void)state, batch_invariance("qwen3-f16.gguf", 2); }
static void test_batch_invariance_gemma3(void **state) { (void)state, batch_invariance("gemma3-bf16.gguf", 3); }
static void test_batch_invariance_phi3(void **state) { (void)state, batch_invariance("phi3-f32.gguf", 4); }
static void test_batch_invariance_olmoe(void **state) { (void)state, batch_invariance("olmoe-f32.gguf", 5); }

/* The engine's first logits and greedy tokens are the session's (the contiguous cache),
 * bit for bit: one forward pass, two ways of addressing the cache. */
static void test_engine_matches_session(void **state) {
    (void)state;
    test_model tm;
    test_model_load(&tm, "llama-f32.gguf");
    const int64_t V = vocab(&tm);
    const int32_t prompt[12] = {1, 87, 263, 5, 301, 44, 129, 377, 18, 250, 66, 312};
    st_session_options so = st_session_options_default();
    so.n_ctx = 64;
    so.kv_type = ST_TYPE_F32;
    st_session *s = NULL;
    st_error err = {0};
    assert_int_equal(st_session_init(tm.model, &so, &s, &err), ST_OK);
    float *want = malloc((size_t)16 * V * sizeof(float));
    int32_t next = 0;
    assert_int_equal(st_session_eval(s, prompt, 12, false, want, &err), ST_OK);
    int32_t want_tokens[16];
    for (int i = 0; i < 16; i++) {
        const float *row = want + (size_t)i * V;
        int32_t best = 0;
        for (int64_t t = 1; t < V; t++) best = row[t] > row[best] ? (int32_t)t : best;
        want_tokens[i] = next = best;
        if (i + 1 < 16) assert_int_equal(st_session_eval(s, &next, 1, false, want + (size_t)(i + 1) * V, &err), ST_OK);
    }
    st_session_free(s);

    st_engine *e = test_engine_new(tm.model, 64, 2, 0, 512, true);
    st_request_params p = greedy(prompt, 12, 16);
    p.logits = ST_REQUEST_LOGITS_EVERY;
    add(e, &p);
    test_result r = {.logits = calloc((size_t)TEST_MAX_GEN * V, sizeof(float))};
    test_run(e, &r, 1, V);
    assert_int_equal(r.n, 16);
    assert_memory_equal(r.tokens, want_tokens, sizeof(want_tokens));
    assert_memory_equal(r.logits, want, (size_t)16 * V * sizeof(float));
    st_engine_free(e);
    free(r.logits);
    free(want);
    test_model_free(&tm);
}

/* ---- prefix reuse and copy-on-write --------------------------------------------------- */

/* A 150-token prompt, then the same prompt again (two of its blocks cached), then its
 * first 128 tokens (both blocks cached: the last token is computed again into a copy of
 * the second block): every logits row equals that of an engine without the cache. */
static void test_prefix_reuse_equals_recompute(void **state) {
    (void)state;
    test_model tm;
    test_model_load(&tm, "qwen3-f32.gguf");
    const int64_t V = vocab(&tm);
    uint64_t rng = 77;
    int32_t prompt[150];
    random_prompt(&rng, prompt, 150, V);
    const int64_t lens[3] = {150, 150, 128};
    test_result cached[3], fresh[3];
    for (int pass = 0; pass < 2; pass++) {
        test_result *res = pass == 0 ? cached : fresh;
        memset(res, 0, 3 * sizeof(test_result));
        st_engine *e = test_engine_new(tm.model, 256, 2, 0, 64, pass == 0);
        for (int i = 0; i < 3; i++) { /* one after another, so that each finds the last one's blocks */
            res[i].logits = calloc((size_t)TEST_MAX_GEN * V, sizeof(float));
            st_request_params p = greedy(prompt, lens[i], 6);
            p.logits = ST_REQUEST_LOGITS_EVERY;
            add(e, &p);
            test_result tmp[3] = {0};
            tmp[i] = res[i];
            test_run(e, tmp, 3, V);
            res[i] = tmp[i];
        }
        st_engine_stats s;
        st_engine_get_stats(e, &s);
        if (pass == 0) {
            assert_int_equal(cached[0].n_cached, 0);
            assert_int_equal(cached[1].n_cached, 128);
            assert_int_equal(cached[2].n_cached, 127); /* its last token computed again */
            assert_int_equal(s.prompt_tokens_cached, 255);
            assert_true(s.block_copies >= 1);
            assert_int_equal(s.prefill_tokens, 150 + 22 + 1);
        } else {
            assert_int_equal(s.prompt_tokens_cached, 0);
            assert_int_equal(s.block_copies, 0);
        }
        assert_all_blocks_back(e);
        st_engine_free(e);
    }
    assert_same_run(&cached[0], &cached[1], V);
    for (int i = 0; i < 3; i++) {
        assert_same_run(&cached[i], &fresh[i], V);
        free(cached[i].logits);
        free(fresh[i].logits);
    }
    test_model_free(&tm);
}

/* A fork shares its parent's partial last block; both then write different tokens into
 * that block's next slots, so each must get its own copy first: both runs equal their
 * references computed without sharing. */
static void test_fork_copy_on_write(void **state) {
    (void)state;
    test_model tm;
    test_model_load(&tm, "llama-f32.gguf");
    const int64_t V = vocab(&tm);
    uint64_t rng = 99;
    int32_t prompt[100];
    random_prompt(&rng, prompt, 100, V);
    st_request_params pp = greedy(prompt, 100, 14);
    pp.sampling = st_sampler_params_default();
    pp.sampling.seed = 11;
    pp.logits = ST_REQUEST_LOGITS_EVERY;
    st_request_params pc = st_request_params_default();
    pc.sampling.seed = 12;
    pc.sampling.temp = 1.5f;
    pc.max_tokens = 10;
    pc.logits = ST_REQUEST_LOGITS_EVERY;

    st_engine *e = test_engine_new(tm.model, 128, 4, 0, 512, true);
    test_result res[2] = {{.logits = calloc((size_t)TEST_MAX_GEN * V, sizeof(float))},
                          {.logits = calloc((size_t)TEST_MAX_GEN * V, sizeof(float))}};
    const int64_t parent = add(e, &pp);
    st_error err = {0};
    while (res[0].n < 5) {
        assert_int_equal(st_engine_step(e, &err), ST_OK);
        test_drain(e, res, 2, V);
    }
    int64_t child = 0;
    assert_int_equal(st_engine_fork(e, parent, &pc, &child, &err), ST_OK);
    assert_int_equal(child, 2);
    int32_t child_prompt[105];
    memcpy(child_prompt, prompt, sizeof(prompt));
    memcpy(child_prompt + 100, res[0].tokens, 5 * sizeof(int32_t));
    test_run(e, res, 2, V);
    st_engine_stats s;
    st_engine_get_stats(e, &s);
    assert_true(s.block_copies >= 1);
    assert_int_equal(res[1].n_cached, 104); /* all but the parent's last token, shared */
    assert_all_blocks_back(e);
    st_engine_free(e);

    test_result ref[2] = {{.logits = calloc((size_t)TEST_MAX_GEN * V, sizeof(float))},
                          {.logits = calloc((size_t)TEST_MAX_GEN * V, sizeof(float))}};
    e = test_engine_new(tm.model, 128, 4, 0, 512, false);
    add(e, &pp);
    pc.prompt = child_prompt;
    pc.n_prompt = 105;
    add(e, &pc);
    test_run(e, ref, 2, V);
    st_engine_free(e);
    for (int i = 0; i < 2; i++) {
        assert_same_run(&res[i], &ref[i], V);
        free(res[i].logits);
        free(ref[i].logits);
    }
    test_model_free(&tm);
}

/* ---- pre-emption ---------------------------------------------------------------------- */

/* Twelve requests in an engine of 7 blocks (one 64-token context each would need 24):
 * sequences are pre-empted and recomputed, and every request gives the tokens and logits
 * it gives in an engine with room for all. */
static void test_preemption_loses_nothing(void **state) {
    (void)state;
    test_model tm;
    test_model_load(&tm, "gemma3-f32.gguf");
    const int64_t V = vocab(&tm);
    enum { N = 12 };
    uint64_t rng = 5;
    int32_t prompts[N][70];
    int64_t lens[N];
    for (int i = 0; i < N; i++) {
        lens[i] = 1 + (int64_t)(test_rand(&rng) % 70);
        random_prompt(&rng, prompts[i], lens[i], V);
    }
    test_result res[2][N];
    for (int pass = 0; pass < 2; pass++) {
        memset(res[pass], 0, sizeof(res[pass]));
        st_engine *e = pass == 0 ? test_engine_new(tm.model, 128, 8, 7, 96, pass == 0)
                                 : test_engine_new(tm.model, 128, N, 0, 512, false);
        for (int i = 0; i < N; i++) {
            res[pass][i].logits = calloc((size_t)TEST_MAX_GEN * V, sizeof(float));
            st_request_params p = greedy(prompts[i], lens[i], 40);
            if (i % 2) { /* sampled: the sampler's random stream and history survive pre-emption */
                p.sampling = st_sampler_params_default();
                p.sampling.seed = 100 + (uint64_t)i;
                p.sampling.repeat_penalty = 1.3f;
            }
            p.logits = ST_REQUEST_LOGITS_EVERY;
            add(e, &p);
        }
        test_run(e, res[pass], N, V);
        st_engine_stats s;
        st_engine_get_stats(e, &s);
        if (pass == 0) assert_true(s.preemptions > 0);
        else assert_int_equal(s.preemptions, 0);
        assert_all_blocks_back(e);
        st_engine_free(e);
    }
    for (int i = 0; i < N; i++) {
        assert_true(res[0][i].finished && res[0][i].reason == ST_FINISH_LENGTH);
        assert_same_run(&res[0][i], &res[1][i], V);
        free(res[0][i].logits);
        free(res[1][i].logits);
    }
    test_model_free(&tm);
}

/* ---- finishing ------------------------------------------------------------------------ */

static void test_cancel_returns_blocks(void **state) {
    (void)state;
    test_model tm;
    test_model_load(&tm, "llama-f32.gguf");
    const int64_t V = vocab(&tm);
    st_engine *e = test_engine_new(tm.model, 128, 3, 0, 40, true);
    uint64_t rng = 3;
    int32_t prompt[6][90];
    test_result res[6] = {0};
    for (int i = 0; i < 6; i++) {
        random_prompt(&rng, prompt[i], 90, V);
        st_request_params p = greedy(prompt[i], 90, 30);
        add(e, &p);
    }
    st_error err = {0};
    assert_int_equal(st_engine_step(e, &err), ST_OK); /* a prefill chunk of the first */
    st_engine_stats s;
    st_engine_get_stats(e, &s);
    assert_true(s.blocks_used > 0);
    assert_int_equal(st_engine_cancel(e, 1, &err), ST_OK); /* running, mid-prompt */
    assert_int_equal(st_engine_cancel(e, 6, &err), ST_OK); /* waiting */
    for (int k = 0; k < 8; k++) assert_int_equal(st_engine_step(e, &err), ST_OK);
    assert_int_equal(st_engine_cancel(e, 2, &err), ST_OK); /* running, decoding */
    assert_int_equal(st_engine_cancel(e, 2, &err), ST_OK); /* again: nothing to do */
    assert_int_equal(st_engine_cancel(e, 0, &err), ST_ERROR_INVALID);
    assert_int_equal(st_engine_cancel(e, 7, &err), ST_ERROR_INVALID);
    assert_int_equal(st_engine_check(e, &err), ST_OK);
    test_run(e, res, 6, V);
    for (int i = 0; i < 6; i++) assert_true(res[i].finished);
    assert_int_equal(res[0].reason, ST_FINISH_CANCELLED);
    assert_int_equal(res[5].reason, ST_FINISH_CANCELLED);
    assert_int_equal(res[5].n, 0);
    assert_int_equal(res[1].reason, ST_FINISH_CANCELLED);
    assert_true(res[1].n > 0 && res[1].n < 30);
    for (int i = 2; i < 5; i++) assert_int_equal(res[i].reason, ST_FINISH_LENGTH);
    assert_int_equal(st_engine_cancel(e, 3, &err), ST_OK); /* finished and reaped */
    assert_all_blocks_back(e);
    st_engine_get_stats(e, &s);
    assert_int_equal(s.requests_added, 6);
    assert_int_equal(s.requests_finished, 6);
    assert_int_equal(s.tokens_in, 6 * 90);
    st_engine_free(e);
    test_model_free(&tm);
}

/* Stop token, max tokens and a full context end a request with that reason; the stop
 * token is the finished event's token. */
static void test_finish_reasons(void **state) {
    (void)state;
    test_model tm;
    test_model_load(&tm, "llama-f32.gguf");
    const int64_t V = vocab(&tm);
    st_engine *e = test_engine_new(tm.model, 20, 2, 0, 64, true);
    const int32_t prompt[18] = {1, 87, 263, 5, 301, 44, 129, 377, 18, 250, 66, 312, 9, 8, 7, 6, 5, 4};
    test_result res[3] = {0};
    st_request_params p = greedy(prompt, 12, 5);
    add(e, &p);
    test_run(e, res, 3, V);
    assert_int_equal(res[0].reason, ST_FINISH_LENGTH);
    assert_int_equal(res[0].n, 5);
    int k = 1; /* the first token not seen before it: the stop */
    while (k < 4) {
        bool seen = false;
        for (int j = 0; j < k; j++) seen = seen || res[0].tokens[j] == res[0].tokens[k];
        if (!seen) break;
        k++;
    }
    p.stop = &res[0].tokens[k];
    p.n_stop = 1;
    p.max_tokens = -1;
    add(e, &p);
    test_run(e, res, 3, V);
    assert_int_equal(res[1].reason, ST_FINISH_STOP);
    assert_int_equal(res[1].n, k + 1);
    assert_memory_equal(res[1].tokens, res[0].tokens, (size_t)(k + 1) * sizeof(int32_t));
    p = greedy(prompt, 18, -1); /* positions 18 and 19 fit: 3 tokens, the last one not fed */
    add(e, &p);
    test_run(e, res, 3, V);
    assert_int_equal(res[2].reason, ST_FINISH_CONTEXT);
    assert_int_equal(res[2].n, 3);
    assert_all_blocks_back(e);
    st_engine_free(e);
    test_model_free(&tm);
}

/* No limit but the context: the request's token list grows past its first size (64
 * generated tokens) up to n_ctx + 1 tokens, the last one sampled but not fed. */
static void test_generation_to_full_context(void **state) {
    (void)state;
    test_model tm;
    test_model_load(&tm, "llama-f32.gguf");
    st_engine *e = test_engine_new(tm.model, 200, 1, 0, 64, true);
    const int32_t prompt[5] = {1, 7, 3, 9, 4};
    st_request_params p = greedy(prompt, 5, -1);
    add(e, &p);
    st_error err = {0};
    int64_t n = 0;
    st_engine_event ev = {0};
    while (st_engine_pending(e) > 0) {
        assert_int_equal(st_engine_step(e, &err), ST_OK);
        while (st_engine_poll(e, &ev)) {
            assert_true(ev.token >= 0);
            n++;
            if (ev.finished) {
                assert_int_equal(ev.reason, ST_FINISH_CONTEXT);
                assert_int_equal(ev.n_generated, n);
            }
        }
    }
    assert_int_equal(n, 200 - 5 + 1);
    assert_all_blocks_back(e);
    st_engine_free(e);
    test_model_free(&tm);
}

/* Log-probabilities are the raw logits' log-softmax; the top list is sorted, led by the
 * greedy token. The FIRST logits arrive with the first token only. */
static void test_logprobs(void **state) {
    (void)state;
    test_model tm;
    test_model_load(&tm, "olmoe-f32.gguf");
    const int64_t V = vocab(&tm);
    st_engine *e = test_engine_new(tm.model, 64, 2, 0, 64, true);
    const int32_t prompt[5] = {1, 2, 3, 4, 5};
    st_request_params p = greedy(prompt, 5, 4);
    p.logprobs = true;
    p.top_logprobs = 5;
    p.logits = ST_REQUEST_LOGITS_FIRST;
    add(e, &p);
    st_error err = {0};
    int n = 0;
    while (st_engine_pending(e) > 0) {
        assert_int_equal(st_engine_step(e, &err), ST_OK);
        st_engine_event ev;
        while (st_engine_poll(e, &ev)) {
            assert_int_equal(ev.n_top, 5);
            assert_int_equal(ev.top[0].id, ev.token);
            assert_true(ev.logprob == ev.top[0].logprob);
            assert_true(ev.logprob <= 0.0f);
            double mass = 0.0;
            for (int k = 0; k < 5; k++) {
                mass += exp(ev.top[k].logprob);
                if (k) assert_true(ev.top[k].logprob <= ev.top[k - 1].logprob);
            }
            assert_true(mass <= 1.0 + 1e-6);
            if (n == 0) {
                assert_non_null(ev.logits);
                double m = ev.logits[0], sum = 0.0;
                for (int64_t t = 1; t < V; t++) m = ev.logits[t] > m ? ev.logits[t] : m;
                for (int64_t t = 0; t < V; t++) sum += exp((double)ev.logits[t] - m);
                const double want = (double)ev.logits[ev.token] - m - log(sum);
                assert_true(fabs(want - (double)ev.logprob) < 1e-5);
            } else {
                assert_null(ev.logits);
            }
            n++;
        }
    }
    assert_int_equal(n, 4);
    st_engine_free(e);
    test_model_free(&tm);
}

/* ---- validation ----------------------------------------------------------------------- */

static void test_rejects_bad_input(void **state) {
    (void)state;
    test_model tm;
    test_model_load(&tm, "llama-f32.gguf");
    st_error err = {0};
    st_engine *e = NULL;
    st_engine_options o = st_engine_options_default();
    st_engine_options bad[6] = {o, o, o, o, o, o};
    bad[0].n_ctx = 0;
    bad[1].n_parallel = 0;
    bad[2].max_batch_tokens = 0;
    bad[3].n_blocks = -1;
    bad[4].kv_type = ST_TYPE_BF16;
    bad[5].n_blocks = 0, bad[5].kv_bytes = 100; /* smaller than a block */
    for (int i = 0; i < 6; i++) {
        assert_int_equal(st_engine_init(tm.model, &bad[i], &e, &err), ST_ERROR_INVALID);
        assert_null(e);
    }
    o.n_ctx = 1000;
    o.n_blocks = 3; /* the context shrinks to what the pool holds */
    assert_int_equal(st_engine_init(tm.model, &o, &e, &err), ST_OK);
    st_engine_config c;
    st_engine_get_config(e, &c);
    assert_int_equal(c.n_ctx, 192);
    assert_int_equal(c.n_blocks, 3);
    assert_int_equal(c.max_batch_tokens, 512);
    assert_int_equal(c.kv_bytes, 3 * c.block_bytes);

    const int32_t ok[3] = {1, 2, 3}, out_of_vocab[2] = {1, 384}, negative[1] = {-1};
    int64_t id = 0;
    st_request_params p = greedy(ok, 3, 4);
    st_request_params cases[10] = {p, p, p, p, p, p, p, p, p, p};
    cases[0].n_prompt = 0;
    cases[1].prompt = out_of_vocab, cases[1].n_prompt = 2;
    cases[2].prompt = NULL;
    cases[3].n_prompt = 193;
    cases[4].max_tokens = 0;
    cases[5].stop = negative, cases[5].n_stop = 1;
    cases[6].n_stop = 2, cases[6].stop = NULL;
    cases[7].top_logprobs = 3; /* without logprobs */
    cases[8].logprobs = true, cases[8].top_logprobs = 21;
    cases[9].sampling.top_p = 0.0f;
    for (int i = 0; i < 10; i++) {
        if (st_engine_add(e, &cases[i], &id, &err) != ST_ERROR_INVALID) fail_msg("case %d accepted", i);
        assert_int_equal(id, 0);
    }
    assert_int_equal(st_engine_fork(e, 1, &p, &id, &err), ST_ERROR_INVALID); /* no request 1 */
    assert_int_equal(st_engine_add(e, &p, &id, &err), ST_OK);
    assert_int_equal(st_engine_fork(e, id, &p, &id, &err), ST_ERROR_INVALID); /* a prompt given */
    st_engine_stats s;
    st_engine_get_stats(e, &s);
    assert_int_equal(s.requests_added, 1);
    st_engine_free(e); /* with a request waiting: freed too */
    test_model_free(&tm);
}

int main(void) {
    /* one thread: many small steps, where OpenMP's barriers cost more than the work on a
     * loaded machine (no result depends on the thread count) */
    st_cpu_set_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_invariance_llama),
        cmocka_unit_test(test_batch_invariance_qwen3),
        cmocka_unit_test(test_batch_invariance_gemma3),
        cmocka_unit_test(test_batch_invariance_phi3),
        cmocka_unit_test(test_batch_invariance_olmoe),
        cmocka_unit_test(test_engine_matches_session),
        cmocka_unit_test(test_prefix_reuse_equals_recompute),
        cmocka_unit_test(test_fork_copy_on_write),
        cmocka_unit_test(test_preemption_loses_nothing),
        cmocka_unit_test(test_cancel_returns_blocks),
        cmocka_unit_test(test_finish_reasons),
        cmocka_unit_test(test_generation_to_full_context),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_rejects_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
