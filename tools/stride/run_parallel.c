/* stride run --parallel N (run_parallel.h): the requests through the engine, the texts
 * printed one after another once all are done, the engine's sizes and speeds on stderr. */
#include "run_parallel.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "stride/engine.h"

/* One sequence's generated tokens. */
typedef struct seq_out {
    int32_t *ids;
    int64_t n, cap;
    st_finish_reason reason;
} seq_out;

static bool push(seq_out *o, int32_t id) {
    if (o->n == o->cap) {
        const int64_t cap = o->cap ? 2 * o->cap : 64;
        int32_t *grown = realloc(o->ids, (size_t)cap * sizeof(int32_t));
        if (!grown) return false;
        o->ids = grown;
        o->cap = cap;
    }
    o->ids[o->n++] = id;
    return true;
}

/* The vocabulary's end-of-generation tokens (text mode stops at them, as `stride run`). */
static st_status eog_tokens(const st_tokenizer *tok, int32_t **out, int32_t *n, st_error *err) {
    const int64_t V = st_tokenizer_n_vocab(tok);
    *n = 0;
    *out = malloc(sizeof(int32_t) * 16);
    if (!*out) return st_error_set(err, ST_ERROR_NOMEM, "out of memory");
    for (int64_t id = 0; id < V; id++) {
        if (!st_tokenizer_is_eog(tok, (int32_t)id)) continue;
        if (*n % 16 == 0 && *n > 0) {
            int32_t *grown = realloc(*out, (size_t)(*n + 16) * sizeof(int32_t));
            if (!grown) return st_error_set(err, ST_ERROR_NOMEM, "out of memory");
            *out = grown;
        }
        (*out)[(*n)++] = (int32_t)id;
    }
    return ST_OK;
}

static void print_sequence(const run_parallel_args *a, int i, const seq_out *o) {
    const int64_t n = o->reason == ST_FINISH_STOP ? o->n - 1 : o->n; /* the stop token is not text */
    if (!a->tok) {
        for (int64_t k = 0; k < n; k++) printf(k ? " %d" : "%d", o->ids[k]);
        printf("\n");
        return;
    }
    printf("--- sequence %d/%d (seed %" PRIu64 "): %lld tokens, %s ---\n", i + 1, a->n_parallel,
           a->sampling.seed + (uint64_t)i, (long long)n,
           o->reason == ST_FINISH_STOP ? "end of generation" : st_finish_reason_name(o->reason));
    if (a->prompt_text) fwrite(a->prompt_text, 1, a->prompt_len, stdout);
    st_detokenizer d;
    st_detokenizer_init(&d, a->tok);
    char buf[1024];
    for (int64_t k = 0; k < n; k++) fwrite(buf, 1, st_detokenizer_push(&d, o->ids[k], buf, sizeof(buf)), stdout);
    fwrite(buf, 1, st_detokenizer_flush(&d, buf, sizeof(buf)), stdout);
    printf("\n");
}

st_status run_parallel(const run_parallel_args *a, st_error *err) {
    st_status rc = ST_ERROR_NOMEM;
    st_engine *e = NULL;
    int32_t *stop = NULL, n_stop = 0;
    seq_out *outs = calloc((size_t)a->n_parallel, sizeof(seq_out));
    if (!outs) {
        st_error_set(err, ST_ERROR_NOMEM, "out of memory");
        goto done;
    }
    if (a->tok && !a->ignore_eos && eog_tokens(a->tok, &stop, &n_stop, err) != ST_OK) goto done;

    st_engine_options o = st_engine_options_default();
    o.n_ctx = a->n_ctx;
    o.n_parallel = a->n_parallel;
    o.max_batch_tokens = a->n_ubatch;
    o.kv_type = a->kv_type;
    if (st_engine_init(a->model, &o, &e, err) != ST_OK) goto done;
    st_engine_config c;
    st_engine_get_config(e, &c);
    char kv[32];
    cli_format_bytes(c.kv_bytes, kv, sizeof(kv));
    fprintf(stderr,
            "stride run: engine     %d sequences of up to %lld tokens; KV cache %lld blocks of %d tokens (%s, %s); "
            "%lld tokens a step\n",
            c.n_parallel, (long long)c.n_ctx, (long long)c.n_blocks, c.block_tokens, kv, st_type_name(c.kv_type),
            (long long)c.max_batch_tokens);

    for (int32_t i = 0; i < a->n_parallel; i++) {
        st_request_params p = st_request_params_default();
        p.prompt = a->prompt;
        p.n_prompt = a->n_prompt;
        p.sampling = a->sampling;
        p.sampling.seed = a->sampling.seed + (uint64_t)i;
        p.max_tokens = a->n_predict;
        p.stop = stop;
        p.n_stop = n_stop;
        int64_t id = 0;
        if (st_engine_add(e, &p, &id, err) != ST_OK) goto done;
    }
    const double t0 = st_clock_seconds();
    while (st_engine_pending(e) > 0) {
        if (st_engine_step(e, err) != ST_OK) goto done;
        st_engine_event ev;
        while (st_engine_poll(e, &ev)) {
            seq_out *out = &outs[ev.id - 1];
            if (ev.token >= 0 && !push(out, ev.token)) {
                st_error_set(err, ST_ERROR_NOMEM, "out of memory");
                goto done;
            }
            if (ev.finished) out->reason = ev.reason;
            if (ev.reason == ST_FINISH_ERROR) {
                st_error_set(err, ST_ERROR_INVALID, "sequence %lld: %s", (long long)ev.id,
                             ev.message ? ev.message : "failed");
                goto done;
            }
        }
    }
    const double wall = st_clock_seconds() - t0;
    for (int32_t i = 0; i < a->n_parallel; i++) print_sequence(a, i, &outs[i]);
    fflush(stdout);
    st_engine_stats s;
    st_engine_get_stats(e, &s);
    fprintf(stderr, "stride run: load       %8.2f s  (%s, %s)\n", a->t_load, a->device_name,
            a->padded ? "padded layout" : "packed layout");
    fprintf(stderr, "stride run: prompt      %8.2f s  %6lld tokens  %9.2f tok/s  (%lld from the prefix cache)\n",
            s.prompt_seconds, (long long)s.prefill_tokens, s.prompt_tokens_per_s, (long long)s.cache_hit_tokens);
    fprintf(stderr, "stride run: generation  %8.2f s  %6lld tokens  %9.2f tok/s  (%lld sequences, %lld steps)\n",
            s.generation_seconds, (long long)s.decode_tokens, s.generation_tokens_per_s, (long long)a->n_parallel,
            (long long)s.steps);
    fprintf(stderr, "stride run: total       %8.2f s  %6lld tokens out, %lld pre-emptions\n", wall,
            (long long)s.tokens_out, (long long)s.preemptions);
    rc = ST_OK;
done:
    if (rc != ST_OK && err && err->status != ST_OK) rc = err->status;
    for (int32_t i = 0; outs && i < a->n_parallel; i++) free(outs[i].ids);
    free(outs);
    free(stop);
    st_engine_free(e);
    return rc;
}
