/* The engine (engine.h): sizing, the life cycle of requests (add, fork, cancel, finish,
 * reap), the counters and the invariant check. The step is engine_step.c, the events
 * engine_events.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

#define T ST_KV_BLOCK_TOKENS

st_engine_options st_engine_options_default(void) {
    return (st_engine_options){.n_ctx = 4096, .n_parallel = 8, .max_batch_tokens = 512, .kv_type = ST_TYPE_F16,
                               .prefix_cache = true};
}

st_request_params st_request_params_default(void) {
    return (st_request_params){.sampling = st_sampler_params_default(), .max_tokens = -1};
}

const char *st_finish_reason_name(st_finish_reason r) {
    switch (r) {
    case ST_FINISH_NONE: return "none";
    case ST_FINISH_STOP: return "stop";
    case ST_FINISH_LENGTH: return "length";
    case ST_FINISH_CONTEXT: return "context";
    case ST_FINISH_CANCELLED: return "cancelled";
    case ST_FINISH_ERROR: return "error";
    }
    return "?";
}

/* ---- lists ---------------------------------------------------------------------------- */

void req_list_push_back(req_list *l, engine_req *r) {
    r->prev = l->tail;
    r->next = NULL;
    if (l->tail) l->tail->next = r;
    else l->head = r;
    l->tail = r;
    l->n++;
}

void req_list_push_front(req_list *l, engine_req *r) {
    r->prev = NULL;
    r->next = l->head;
    if (l->head) l->head->prev = r;
    else l->tail = r;
    l->head = r;
    l->n++;
}

void req_list_remove(req_list *l, engine_req *r) {
    if (r->prev) r->prev->next = r->next;
    else l->head = r->next;
    if (r->next) r->next->prev = r->prev;
    else l->tail = r->prev;
    r->prev = r->next = NULL;
    l->n--;
}

/* ---- life cycle ----------------------------------------------------------------------- */

static st_status check_options(const st_engine_options *o, st_error *err) {
    if (o->n_ctx < 1 || o->n_ctx > INT32_MAX / 2)
        return st_error_set(err, ST_ERROR_INVALID, "engine context %lld: expected 1 to %d tokens", (long long)o->n_ctx,
                            INT32_MAX / 2);
    if (o->n_parallel < 1 || o->n_parallel > 65536)
        return st_error_set(err, ST_ERROR_INVALID, "parallel sequences %d: expected 1 to 65536", (int)o->n_parallel);
    if (o->max_batch_tokens < 1 || o->max_batch_tokens > (1 << 20))
        return st_error_set(err, ST_ERROR_INVALID, "tokens per step %lld: expected 1 to %d",
                            (long long)o->max_batch_tokens, 1 << 20);
    if (o->n_blocks < 0 || o->n_blocks > INT32_MAX / T - 1)
        return st_error_set(err, ST_ERROR_INVALID, "KV blocks %lld: expected 0 (automatic) to %d",
                            (long long)o->n_blocks, INT32_MAX / T - 1);
    if (o->kv_type != ST_TYPE_F16 && o->kv_type != ST_TYPE_F32)
        return st_error_set(err, ST_ERROR_INVALID, "KV cache type must be f16 or f32, not %s",
                            st_type_name(o->kv_type));
    return ST_OK;
}

/* The pool size the options ask for, into cfg. */
static st_status size_pool(const st_model *m, const st_engine_options *o, st_engine_config *cfg, st_error *err) {
    cfg->block_tokens = T;
    cfg->block_bytes = st_kv_block_bytes(&m->hp, o->kv_type);
    const int64_t per_seq = (o->n_ctx + T - 1) / T;
    int64_t n = o->n_blocks;
    if (n == 0 && o->kv_bytes > 0) {
        const uint64_t fit = o->kv_bytes / cfg->block_bytes;
        if (fit == 0)
            return st_error_set(err, ST_ERROR_INVALID, "a KV budget of %llu bytes holds no block (one is %zu bytes)",
                                (unsigned long long)o->kv_bytes, cfg->block_bytes);
        n = fit > (uint64_t)(INT32_MAX / T - 1) ? INT32_MAX / T - 1 : (int64_t)fit;
    } else if (n == 0) {
        if (per_seq > (INT32_MAX / T - 1) / o->n_parallel)
            return st_error_set(err, ST_ERROR_INVALID,
                                "%d sequences of %lld tokens need more KV blocks than a pool holds (%d): lower "
                                "the context or the parallel sequences, or give a byte budget",
                                (int)o->n_parallel, (long long)o->n_ctx, INT32_MAX / T - 1);
        n = per_seq * o->n_parallel;
    }
    cfg->n_blocks = n;
    cfg->n_ctx = o->n_ctx < n * T ? o->n_ctx : n * T;
    cfg->n_parallel = o->n_parallel;
    cfg->kv_bytes = (size_t)n * cfg->block_bytes;
    cfg->max_batch_tokens = o->max_batch_tokens > o->n_parallel ? o->max_batch_tokens : o->n_parallel;
    cfg->kv_type = o->kv_type;
    cfg->prefix_cache = o->prefix_cache;
    return ST_OK;
}

st_status st_engine_warmup(st_engine *e, st_error *err) {
    if (e->model->backend->device.backend == ST_BACKEND_CPU) return ST_OK; /* nothing recorded */
    return st_runner_warmup(e->runner, e->cfg.n_parallel, err);
}

st_status st_engine_init(st_model *m, const st_engine_options *o, st_engine **out, st_error *err) {
    *out = NULL;
    st_status s = check_options(o, err);
    if (s != ST_OK) return s;
    st_engine *e = calloc(1, sizeof(*e));
    if (!e) return st_error_set(err, ST_ERROR_NOMEM, "out of host memory");
    e->model = m;
    e->n_vocab = m->hp.n_vocab;
    e->next_id = 1;
    if ((s = size_pool(m, o, &e->cfg, err)) != ST_OK) goto fail;
    const st_engine_config *c = &e->cfg;
    e->max_blocks = (int32_t)((c->n_ctx + T - 1) / T);
    if ((s = st_kv_pool_init(m, c->n_blocks, c->kv_type, &e->pool, err)) != ST_OK) goto fail;
    /* On a GPU each logits row stays there and its largest logits come to the host (the
     * samplers that need whole rows ask for them); on the CPU the rows are already host
     * memory. */
    e->n_candidates = m->backend->device.backend == ST_BACKEND_CPU ? 0 : st_engine_candidates(m->hp.n_vocab);
    const st_runner_options ro = {.max_tokens = c->max_batch_tokens, .max_seqs = c->n_parallel,
                                  .max_blocks = e->max_blocks, .n_candidates = e->n_candidates};
    if ((s = st_runner_init(m, e->pool, &ro, &e->runner, err)) != ST_OK) goto fail;
    if ((s = st_kv_blocks_init(c->n_blocks, 64, &e->bm, err)) != ST_OK) goto fail;
    const size_t U = (size_t)c->max_batch_tokens, P = (size_t)c->n_parallel;
    e->rows = calloc(P, sizeof(engine_req *));
    e->sched = calloc(P, sizeof(engine_req *));
    e->order = calloc(P, sizeof(engine_req *));
    e->picks = calloc(P, sizeof(engine_pick));
    e->b_tokens = malloc(U * sizeof(int32_t));
    e->b_pos = malloc(U * sizeof(int32_t));
    e->b_seq = malloc(U * sizeof(int32_t));
    e->b_out = malloc(U * sizeof(int32_t));
    e->b_full = malloc(U * sizeof(int32_t));
    e->b_draw = malloc(U * sizeof(st_row_draw));
    e->b_late_draw = malloc(U * sizeof(st_row_draw));
    e->table = malloc(P * (size_t)e->max_blocks * sizeof(int32_t));
    if (!e->rows || !e->sched || !e->order || !e->picks || !e->b_tokens || !e->b_pos || !e->b_seq || !e->b_out ||
        !e->b_full || !e->b_draw || !e->b_late_draw || !e->table) {
        s = st_error_set(err, ST_ERROR_NOMEM, "out of host memory for the engine's batches");
        goto fail;
    }
    e->stats.n_blocks = c->n_blocks;
    *out = e;
    return ST_OK;
fail:
    st_engine_free(e);
    return s;
}

static void req_free(st_engine *e, engine_req *r) {
    if (!r) return;
    if (r->seq.blocks) {
        st_kv_seq_release(e->bm, &r->seq);
        st_kv_seq_free(&r->seq);
    }
    st_sampler_free(r->sampler);
    free(r->tokens);
    free(r->stop);
    free(r);
}

static void free_list(st_engine *e, req_list *l) {
    while (l->head) {
        engine_req *r = l->head;
        req_list_remove(l, r);
        req_free(e, r);
    }
}

void st_engine_free(st_engine *e) {
    if (!e) return;
    free_list(e, &e->running);
    free_list(e, &e->waiting);
    free_list(e, &e->finished);
    engine_events_free(e);
    st_kv_blocks_free(e->bm);
    st_runner_free(e->runner);
    st_kv_pool_free(e->pool);
    free(e->rows);
    free(e->sched);
    free(e->order);
    free(e->picks);
    free(e->b_tokens);
    free(e->b_pos);
    free(e->b_seq);
    free(e->b_out);
    free(e->b_full);
    free(e->b_draw);
    free(e->b_late_draw);
    free(e->table);
    free(e);
}

void st_engine_get_config(const st_engine *e, st_engine_config *out) { *out = e->cfg; }

/* ---- requests ------------------------------------------------------------------------- */

static st_status check_ids(const st_engine *e, const int32_t *ids, int64_t n, const char *what, st_error *err) {
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= e->n_vocab)
            return st_error_set(err, ST_ERROR_INVALID, "%s token %lld is %d, outside the vocabulary (0..%lld)", what,
                                (long long)i, ids[i], (long long)e->n_vocab - 1);
    return ST_OK;
}

/* Everything of p but the prompt. */
static st_status check_params(const st_engine *e, const st_request_params *p, st_error *err) {
    if (p->max_tokens != -1 && p->max_tokens < 1)
        return st_error_set(err, ST_ERROR_INVALID, "max_tokens %lld: expected -1 (no limit) or at least 1",
                            (long long)p->max_tokens);
    if (p->n_stop < 0 || p->n_stop > (1 << 20) || (p->n_stop > 0 && !p->stop))
        return st_error_set(err, ST_ERROR_INVALID, "%d stop tokens%s", (int)p->n_stop,
                            p->n_stop > 0 && !p->stop ? " without their array" : ": expected 0 to 1048576");
    st_status s = check_ids(e, p->stop, p->n_stop, "stop", err);
    if (s != ST_OK) return s;
    if (p->logits != ST_REQUEST_LOGITS_NONE && p->logits != ST_REQUEST_LOGITS_FIRST &&
        p->logits != ST_REQUEST_LOGITS_EVERY)
        return st_error_set(err, ST_ERROR_INVALID, "logits mode %d is not none, first or every", (int)p->logits);
    if (p->top_logprobs < 0 || p->top_logprobs > ST_ENGINE_MAX_TOP_LOGPROBS || (p->top_logprobs > 0 && !p->logprobs))
        return st_error_set(err, ST_ERROR_INVALID, "top_logprobs %d: expected 0 to %d, with logprobs on",
                            (int)p->top_logprobs, ST_ENGINE_MAX_TOP_LOGPROBS);
    return ST_OK;
}

/* A request of p holding tokens[0 .. n) as its prompt, not yet queued. Its sampler (a
 * vocabulary-sized buffer) waits for its first admission (engine_req_start), so that a
 * long queue costs little memory. */
static st_status req_new(st_engine *e, const st_request_params *p, const int32_t *tokens, int64_t n,
                         engine_req **out, st_error *err) {
    *out = NULL;
    st_status s = st_sampler_params_check(&p->sampling, err);
    if (s != ST_OK) return s;
    engine_req *r = calloc(1, sizeof(*r));
    if (!r) return st_error_set(err, ST_ERROR_NOMEM, "out of host memory");
    r->row = -1;
    const int64_t gen = p->max_tokens > 0 && p->max_tokens < e->cfg.n_ctx ? p->max_tokens : 64;
    r->cap = n + gen < e->cfg.n_ctx + 1 ? n + gen : e->cfg.n_ctx + 1;
    r->tokens = malloc((size_t)r->cap * sizeof(int32_t));
    r->stop = malloc((size_t)(p->n_stop > 0 ? p->n_stop : 1) * sizeof(int32_t));
    s = ST_ERROR_NOMEM;
    if (!r->tokens || !r->stop) {
        st_error_set(err, s, "out of host memory for a request of %lld tokens", (long long)r->cap);
        goto fail;
    }
    if ((s = st_kv_seq_init(&r->seq, e->max_blocks, err)) != ST_OK) goto fail;
    memcpy(r->tokens, tokens, (size_t)n * sizeof(int32_t));
    if (p->n_stop > 0) memcpy(r->stop, p->stop, (size_t)p->n_stop * sizeof(int32_t));
    r->sampling = p->sampling;
    r->n_tokens = r->n_prompt = n;
    r->n_stop = p->n_stop;
    r->max_tokens = p->max_tokens;
    r->logits = p->logits;
    r->logprobs = p->logprobs;
    r->top_logprobs = p->top_logprobs;
    r->id = e->next_id++;
    e->stats.requests_added++;
    e->stats.tokens_in += n;
    *out = r;
    return ST_OK;
fail:
    req_free(e, r);
    return s;
}

st_status engine_req_start(st_engine *e, engine_req *r, st_error *err) {
    if (r->sampler) return ST_OK;
    st_status s = st_sampler_init(&r->sampling, e->n_vocab, &r->sampler, err);
    if (s != ST_OK) return s;
    for (int64_t i = 0; i < r->n_prompt; i++) st_sampler_accept(r->sampler, r->tokens[i]);
    return ST_OK;
}

st_status engine_req_append(st_engine *e, engine_req *r, int32_t token, st_error *err) {
    if (r->n_tokens == r->cap) {
        ST_ASSERT(r->cap < e->cfg.n_ctx + 1);
        const int64_t cap = 2 * r->cap < e->cfg.n_ctx + 1 ? 2 * r->cap : e->cfg.n_ctx + 1;
        int32_t *grown = realloc(r->tokens, (size_t)cap * sizeof(int32_t));
        if (!grown) return st_error_set(err, ST_ERROR_NOMEM, "out of host memory for %lld tokens", (long long)cap);
        r->tokens = grown;
        r->cap = cap;
    }
    r->tokens[r->n_tokens++] = token;
    return ST_OK;
}

st_status st_engine_add(st_engine *e, const st_request_params *p, int64_t *id, st_error *err) {
    *id = 0;
    if (p->n_prompt < 1 || p->n_prompt > e->cfg.n_ctx || !p->prompt)
        return st_error_set(err, ST_ERROR_INVALID, "a prompt of %lld tokens: expected 1 to %lld (the context)",
                            (long long)p->n_prompt, (long long)e->cfg.n_ctx);
    st_status s = check_ids(e, p->prompt, p->n_prompt, "prompt", err);
    if (s == ST_OK) s = check_params(e, p, err);
    engine_req *r = NULL;
    if (s == ST_OK) s = req_new(e, p, p->prompt, p->n_prompt, &r, err);
    if (s != ST_OK) return s;
    req_list_push_back(&e->waiting, r);
    *id = r->id;
    return ST_OK;
}

/* The waiting or running request id, or NULL. */
static engine_req *find_active(st_engine *e, int64_t id) {
    for (engine_req *r = e->running.head; r; r = r->next)
        if (r->id == id) return r;
    for (engine_req *r = e->waiting.head; r; r = r->next)
        if (r->id == id) return r;
    return NULL;
}

st_status st_engine_fork(st_engine *e, int64_t parent, const st_request_params *p, int64_t *id, st_error *err) {
    *id = 0;
    engine_req *from = find_active(e, parent);
    if (!from)
        return st_error_set(err, ST_ERROR_INVALID, "fork: request %lld is not waiting or running", (long long)parent);
    if (p->prompt || p->n_prompt != 0)
        return st_error_set(err, ST_ERROR_INVALID, "fork: the prompt is the parent's (give none)");
    st_status s = check_params(e, p, err);
    engine_req *r = NULL;
    if (s == ST_OK) s = req_new(e, p, from->tokens, from->n_tokens, &r, err);
    if (s != ST_OK) return s;
    int32_t row = -1;
    for (int32_t i = 0; i < e->cfg.n_parallel && row < 0 && from->state == REQ_RUNNING && from->n_computed > 0; i++)
        if (!e->rows[i]) row = i;
    if (row < 0) {
        req_list_push_back(&e->waiting, r);
    } else { /* running at once, on the parent's blocks; it feeds at least its last token */
        const int64_t n = from->n_computed < r->n_tokens - 1 ? from->n_computed : r->n_tokens - 1;
        if ((s = engine_req_start(e, r, err)) != ST_OK) {
            req_free(e, r);
            return s;
        }
        st_kv_seq_share(e->bm, &r->seq, &from->seq, n);
        r->n_computed = n;
        r->n_cached = n;
        r->admitted = true;
        r->state = REQ_RUNNING;
        r->row = row;
        e->rows[row] = r;
        req_list_push_back(&e->running, r);
    }
    *id = r->id;
    return ST_OK;
}

st_status engine_finish(st_engine *e, engine_req *r, st_finish_reason reason, const char *message, bool event,
                        st_error *err) {
    if (r->state == REQ_RUNNING) {
        e->rows[r->row] = NULL;
        r->row = -1;
        req_list_remove(&e->running, r);
        st_kv_seq_release(e->bm, &r->seq);
    } else {
        ST_ASSERT(r->state == REQ_WAITING && r->seq.n_blocks == 0);
        req_list_remove(&e->waiting, r);
    }
    r->state = REQ_FINISHED;
    req_list_push_back(&e->finished, r);
    e->stats.requests_finished++;
    if (message) snprintf(r->message, sizeof(r->message), "%s", message);
    if (!event) return ST_OK;
    st_engine_event ev = {.id = r->id, .token = -1, .finished = true, .reason = reason,
                          .message = message ? r->message : NULL};
    engine_event_totals(r, &ev);
    return engine_event_push(e, r, &ev, NULL, err);
}

void engine_reap(st_engine *e) {
    engine_req *r = e->finished.head;
    while (r) {
        engine_req *next = r->next;
        if (r->reap) {
            req_list_remove(&e->finished, r);
            req_free(e, r);
        }
        r = next;
    }
}

st_status st_engine_cancel(st_engine *e, int64_t id, st_error *err) {
    if (id < 1 || id >= e->next_id) return st_error_set(err, ST_ERROR_INVALID, "no request %lld", (long long)id);
    engine_req *r = find_active(e, id);
    if (!r) return ST_OK; /* finished already */
    return engine_finish(e, r, ST_FINISH_CANCELLED, NULL, true, err);
}

int64_t st_engine_pending(const st_engine *e) { return e->running.n + e->waiting.n; }

/* ---- counters ------------------------------------------------------------------------- */

void st_engine_get_stats(const st_engine *e, st_engine_stats *out) {
    *out = e->stats;
    st_kv_blocks_counts c;
    st_kv_blocks_get_counts(e->bm, &c);
    out->n_running = (int32_t)e->running.n;
    out->n_waiting = (int32_t)e->waiting.n;
    out->n_blocks = c.n_blocks;
    out->blocks_used = c.used;
    out->blocks_cached = c.cached;
    out->blocks_free = c.free;
    out->evictions = c.evictions;
    out->prompt_tokens_per_s = out->prompt_seconds > 0 ? (double)out->prefill_tokens / out->prompt_seconds : 0.0;
    out->generation_tokens_per_s =
        out->generation_seconds > 0 ? (double)out->decode_tokens / out->generation_seconds : 0.0;
}

st_status st_engine_check(const st_engine *e, st_error *err) {
    int32_t *refs = calloc((size_t)e->cfg.n_blocks, sizeof(int32_t));
    if (!refs) return st_error_set(err, ST_ERROR_NOMEM, "out of host memory");
    st_status s = ST_ERROR_INVALID;
    int64_t n_rows = 0;
    for (int32_t i = 0; i < e->cfg.n_parallel; i++) n_rows += e->rows[i] != NULL;
    if (n_rows != e->running.n || e->running.n > e->cfg.n_parallel) {
        st_error_set(err, s, "%lld rows taken, %lld requests running", (long long)n_rows, (long long)e->running.n);
        goto done;
    }
    const req_list *lists[3] = {&e->waiting, &e->running, &e->finished};
    const req_state states[3] = {REQ_WAITING, REQ_RUNNING, REQ_FINISHED};
    for (int l = 0; l < 3; l++) {
        int64_t n = 0;
        for (const engine_req *r = lists[l]->head; r; r = r->next, n++) {
            const bool running = states[l] == REQ_RUNNING;
            if (r->state != states[l] || (running && (r->row < 0 || e->rows[r->row] != r)) ||
                (!running && (r->row != -1 || r->seq.n_blocks != 0))) {
                st_error_set(err, s, "request %lld: state %d, row %d and list %d disagree", (long long)r->id,
                             (int)r->state, r->row, l);
                goto done;
            }
            if (r->n_computed > r->n_tokens || r->n_tokens > e->cfg.n_ctx + 1 ||
                (running && (int64_t)r->seq.n_blocks * T < r->n_computed) ||
                (states[l] == REQ_WAITING && r->n_computed != 0)) {
                st_error_set(err, s, "request %lld: %lld tokens, %lld computed, %d blocks", (long long)r->id,
                             (long long)r->n_tokens, (long long)r->n_computed, r->seq.n_blocks);
                goto done;
            }
            for (int32_t k = 0; k < r->seq.n_blocks; k++) {
                const int32_t b = r->seq.blocks[k];
                if (b < 0 || b >= e->cfg.n_blocks) {
                    st_error_set(err, s, "request %lld holds block %d", (long long)r->id, b);
                    goto done;
                }
                refs[b]++;
            }
        }
        if (n != lists[l]->n) {
            st_error_set(err, s, "list %d holds %lld requests, counts %lld", l, (long long)n, (long long)lists[l]->n);
            goto done;
        }
    }
    s = st_kv_blocks_check(e->bm, refs, err);
done:
    free(refs);
    return s;
}
