/* Sessions: one sequence over a contiguous KV cache (a pool whose blocks it owns in
 * order, so that position p sits at slot p), run through the runner in micro-batches. */
#include <stdlib.h>
#include <string.h>

#include "stride/runner.h"

struct st_session {
    st_model *model;
    st_session_options opt;
    int64_t n_past;
    st_kv_pool *pool;
    st_runner *runner;
    int32_t *pos;   /* [n_ubatch] a micro-batch's positions */
    int32_t *seq;   /* [n_ubatch] zeros: the one sequence */
};

st_session_options st_session_options_default(void) {
    st_session_options o = {.n_ctx = 4096, .n_ubatch = 512, .kv_type = ST_TYPE_F16};
    return o;
}

st_status st_session_init(st_model *m, const st_session_options *opt, st_session **out, st_error *err) {
    *out = NULL;
    if (opt->n_ctx <= 0 || opt->n_ubatch <= 0)
        return st_error_set(err, ST_ERROR_INVALID, "context (%lld) and micro-batch (%lld) must be positive",
                            (long long)opt->n_ctx, (long long)opt->n_ubatch);
    if (opt->n_ctx > (int64_t)(INT32_MAX / 2))
        return st_error_set(err, ST_ERROR_INVALID, "a context of %lld tokens: at most %d", (long long)opt->n_ctx,
                            INT32_MAX / 2);
    st_session *s = calloc(1, sizeof(*s));
    if (!s) return st_error_set(err, ST_ERROR_NOMEM, "out of host memory for a session");
    s->model = m;
    s->opt = *opt;
    if (s->opt.n_ubatch > s->opt.n_ctx) s->opt.n_ubatch = s->opt.n_ctx;
    const int64_t blocks = (opt->n_ctx + ST_KV_BLOCK_TOKENS - 1) / ST_KV_BLOCK_TOKENS;
    st_status st = st_kv_pool_init(m, blocks, opt->kv_type, &s->pool, err);
    if (st == ST_OK) {
        const st_runner_options ro = {.max_tokens = s->opt.n_ubatch, .max_seqs = 1, .max_blocks = (int32_t)blocks};
        st = st_runner_init(m, s->pool, &ro, &s->runner, err);
    }
    if (st == ST_OK) {
        s->pos = malloc((size_t)s->opt.n_ubatch * sizeof(int32_t));
        s->seq = calloc((size_t)s->opt.n_ubatch, sizeof(int32_t));
        if (!s->pos || !s->seq)
            st = st_error_set(err, ST_ERROR_NOMEM, "out of host memory for the positions of a %lld-token micro-batch",
                              (long long)s->opt.n_ubatch);
    }
    if (st != ST_OK) {
        st_session_free(s);
        return st;
    }
    *out = s;
    return ST_OK;
}

void st_session_free(st_session *s) {
    if (!s) return;
    st_runner_free(s->runner);
    st_kv_pool_free(s->pool);
    free(s->pos);
    free(s->seq);
    free(s);
}

int64_t st_session_n_past(const st_session *s) { return s->n_past; }

const st_model *st_session_model(const st_session *s) { return s->model; }

void st_session_rewind(st_session *s, int64_t n_past) {
    ST_ASSERT(n_past >= 0 && n_past <= s->n_past);
    s->n_past = n_past;
}

/* n tokens that fit the context (the runner checks the vocabulary). */
static st_status check_fits(const st_session *s, int64_t n, st_error *err) {
    if (n <= 0) return st_error_set(err, ST_ERROR_INVALID, "no tokens to evaluate");
    if (n > s->opt.n_ctx - s->n_past)
        return st_error_set(err, ST_ERROR_INVALID,
                            "%lld tokens do not fit: %lld of the %lld-token context are used (raise the context "
                            "size)",
                            (long long)n, (long long)s->n_past, (long long)s->opt.n_ctx);
    return ST_OK;
}

/* M tokens at positions n_past..; the logits of the last n_out of them. */
static st_status eval_micro_batch(st_session *s, const int32_t *tokens, int64_t M, int64_t n_out, const float **logits,
                                  st_error *err) {
    for (int64_t i = 0; i < M; i++) s->pos[i] = (int32_t)(s->n_past + i);
    int32_t last = (int32_t)(M - 1);
    st_batch b = {.n_tokens = M, .tokens = tokens, .pos = s->pos, .seq = s->seq, .n_single = M == 1,
                  .n_seq = 1, .max_blocks = 0};
    if (n_out == 1 && M > 1) b.out = &last, b.n_out = 1;
    else if (n_out == 0) b.out = &last, b.n_out = 0;
    return st_runner_eval(s->runner, &b, logits, err);
}

st_status st_session_decode(st_session *s, int32_t token, const float **logits, st_error *err) {
    *logits = NULL;
    st_status st = check_fits(s, 1, err);
    if (st == ST_OK) st = eval_micro_batch(s, &token, 1, 1, logits, err);
    if (st == ST_OK) s->n_past++;
    return st;
}

st_status st_session_eval(st_session *s, const int32_t *tokens, int64_t n, bool all_logits, float *logits,
                          st_error *err) {
    st_status st = check_fits(s, n, err);
    if (st != ST_OK) return st;
    const int64_t U = s->opt.n_ubatch, V = s->model->hp.n_vocab;
    for (int64_t done = 0; done < n; done += U) {
        const int64_t M = n - done < U ? n - done : U;
        const bool last_batch = done + M == n;
        const int64_t n_out = all_logits ? M : (last_batch ? 1 : 0);
        const float *rows = NULL;
        if ((st = eval_micro_batch(s, tokens + done, M, n_out, &rows, err)) != ST_OK) return st;
        if (logits && n_out > 0)
            memcpy(logits + (all_logits ? done * V : 0), rows, (size_t)(n_out * V) * sizeof(float));
        s->n_past += M;
    }
    return ST_OK;
}
