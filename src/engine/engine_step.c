/* One engine step (engine.h): the scheduler (decode tokens, prefill chunks, admission,
 * pre-emption), the batch it builds for the runner, and the sampling of the logits that
 * come back. The policy is written down in engine.h. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "stride/clock.h"

#define T ST_KV_BLOCK_TOKENS

static st_status copy_block(void *pool, int32_t dst, int32_t src, st_error *err) {
    return st_kv_pool_copy_block(pool, dst, src, err);
}

static int64_t available(const st_engine *e) { return st_kv_blocks_n_available(e->bm); }

/* Back to the front of the queue, its blocks given back; it recomputes what it had (its
 * generated tokens are in r->tokens already). */
static void preempt(st_engine *e, engine_req *r) {
    ST_ASSERT(r->state == REQ_RUNNING && r->step_n == 0);
    e->rows[r->row] = NULL;
    r->row = -1;
    req_list_remove(&e->running, r);
    st_kv_seq_release(e->bm, &r->seq);
    r->n_computed = 0;
    r->state = REQ_WAITING;
    req_list_push_front(&e->waiting, r);
    e->stats.preemptions++;
}

/* The newest running request not scheduled in this step and newer than r, or NULL. */
static engine_req *newest_unscheduled(st_engine *e, const engine_req *r) {
    for (engine_req *c = e->running.tail; c && c != r; c = c->prev)
        if (c->step_n == 0) return c;
    return NULL;
}

/* Makes r's next n tokens writable (new blocks, copies of shared ones) and puts them in
 * this step. */
static st_status schedule(st_engine *e, engine_req *r, int64_t n, bool decode, st_error *err) {
    int64_t copies = 0;
    st_status s = st_kv_seq_prepare(e->bm, &r->seq, r->n_computed, n, copy_block, e->pool, &copies, err);
    e->stats.block_copies += copies;
    if (s != ST_OK) return s;
    r->step_n = n;
    r->step_decode = decode;
    e->sched[e->n_sched++] = r;
    return ST_OK;
}

/* 1. decode tokens, oldest first; the newest running sequence is pre-empted while one
 * cannot have its block. */
static st_status schedule_decode(st_engine *e, bool *preempted, st_error *err) {
    for (engine_req *r = e->running.head; r;) {
        if (r->n_tokens - r->n_computed != 1) {
            r = r->next;
            continue;
        }
        while (st_kv_seq_blocks_needed(e->bm, &r->seq, r->n_computed, 1) > available(e)) {
            engine_req *victim = e->running.tail; /* never scheduled yet: newer than r, or r */
            preempt(e, victim);
            *preempted = true;
            if (victim == r) return ST_OK; /* r was the newest: nothing after it */
        }
        st_status s = schedule(e, r, 1, true, err);
        if (s != ST_OK) return s;
        r = r->next;
    }
    return ST_OK;
}

/* 2. prompt chunks of running sequences, oldest first, within the budget and the blocks;
 * a sequence that gets no block pre-empts newer ones that are not in this step. */
static st_status schedule_prefill(st_engine *e, int64_t *budget, bool *preempted, st_error *err) {
    for (engine_req *r = e->running.head; r && *budget > 0; r = r->next) {
        const int64_t pending = r->n_tokens - r->n_computed;
        if (r->step_n > 0 || pending <= 1) continue;
        const int64_t want = pending < *budget ? pending : *budget;
        int64_t n = st_kv_seq_fit(e->bm, &r->seq, r->n_computed, want, available(e));
        engine_req *victim;
        while (n == 0 && (victim = newest_unscheduled(e, r)) != NULL) {
            preempt(e, victim);
            *preempted = true;
            n = st_kv_seq_fit(e->bm, &r->seq, r->n_computed, want, available(e));
        }
        if (n == 0) continue;
        st_status s = schedule(e, r, n, false, err);
        if (s != ST_OK) return s;
        *budget -= n;
    }
    return ST_OK;
}

/* 3. waiting requests, first come first served, while a row, the budget and blocks allow
 * (keeping 1% of the pool free unless nothing else runs). */
static st_status schedule_admit(st_engine *e, int64_t *budget, st_error *err) {
    const int64_t watermark = e->cfg.n_blocks / 100;
    while (*budget > 0 && e->running.n < e->cfg.n_parallel && e->waiting.head) {
        engine_req *r = e->waiting.head;
        int64_t n_computed = 0, n = 0;
        for (int attempt = 0; attempt < 2 && n == 0; attempt++) {
            /* the second attempt, alone in the engine, without the prefix cache: a cached
             * prompt as long as the pool leaves no block to copy its last one into */
            if (attempt == 1 && (r->seq.n_blocks == 0 || e->running.n > 0)) break;
            st_kv_seq_release(e->bm, &r->seq);
            const bool match = e->cfg.prefix_cache && attempt == 0;
            const int64_t matched = match ? st_kv_seq_match(e->bm, &r->seq, r->tokens, r->n_tokens) : 0;
            n_computed = matched < r->n_tokens ? matched : r->n_tokens - 1; /* feeds >= 1 token */
            const int64_t pending = r->n_tokens - n_computed;
            const int64_t avail = available(e) - (e->running.n > 0 ? watermark : 0);
            if (avail > 0)
                n = st_kv_seq_fit(e->bm, &r->seq, n_computed, pending < *budget ? pending : *budget, avail);
        }
        if (n == 0) {
            st_kv_seq_release(e->bm, &r->seq);
            break;
        }
        st_error why = {0};
        if (engine_req_start(e, r, &why) != ST_OK) { /* no memory for its sampler */
            st_kv_seq_release(e->bm, &r->seq);
            st_status s = engine_finish(e, r, ST_FINISH_ERROR, why.message, true, err);
            if (s != ST_OK) return s;
            continue;
        }
        int32_t row = 0;
        while (e->rows[row]) row++;
        req_list_remove(&e->waiting, r);
        r->state = REQ_RUNNING;
        r->row = row;
        e->rows[row] = r;
        req_list_push_back(&e->running, r);
        r->n_computed = n_computed;
        e->stats.cache_hit_tokens += n_computed;
        if (!r->admitted) {
            r->admitted = true;
            r->n_cached = n_computed < r->n_prompt ? n_computed : r->n_prompt;
            e->stats.prompt_tokens_cached += r->n_cached;
        }
        st_status s = schedule(e, r, n, false, err);
        if (s != ST_OK) return s;
        *budget -= n;
    }
    return ST_OK;
}

/* Where r's next token comes from: the whole row where the request keeps it or asks for
 * more top log-probabilities than the candidates hold; else the candidates where its chain
 * needs no more of the row; for top-p alone the candidates where they settle its cut, else
 * the backend after the step; the backend with the step for the other chains it samples,
 * and the whole row on the host for the rest (penalties over a long history). */
static engine_source token_source(const st_engine *e, const engine_req *r) {
    const bool keep = r->logits == ST_REQUEST_LOGITS_EVERY || (r->logits == ST_REQUEST_LOGITS_FIRST && !r->sampled);
    if (e->n_candidates == 0 || keep || (r->logprobs && r->top_logprobs > e->n_candidates)) return SOURCE_WHOLE;
    if (st_sampler_fits_candidates(r->sampler, e->n_candidates)) return SOURCE_CANDIDATES;
    if (st_sampler_cuts_top_p(r->sampler)) return SOURCE_TOP_P;
    return st_sampler_draws_row(r->sampler) ? SOURCE_DRAWN : SOURCE_WHOLE;
}

/* The step's batch from e->sched, reordered to batch order (single tokens, then runs). */
static st_batch build_batch(st_engine *e) {
    const int32_t n = e->n_sched;
    int32_t m = 0;
    for (int kind = 0; kind < 2; kind++) /* a stable partition into e->order */
        for (int32_t i = 0; i < n; i++)
            if ((e->sched[i]->step_n == 1) == (kind == 0)) e->order[m++] = e->sched[i];
    memcpy(e->sched, e->order, (size_t)n * sizeof(engine_req *));
    int64_t k = 0, n_out = 0, n_single = 0, n_full = 0, n_draw = 0;
    int32_t n_seq = 0;
    for (int32_t i = 0; i < n; i++) {
        engine_req *r = e->sched[i];
        for (int64_t j = 0; j < r->step_n; j++, k++) {
            e->b_tokens[k] = r->tokens[r->n_computed + j];
            e->b_pos[k] = (int32_t)(r->n_computed + j);
            e->b_seq[k] = r->row;
        }
        n_single += r->step_n == 1;
        if (r->n_computed + r->step_n == r->n_tokens) {
            r->step_source = token_source(e, r);
            if (e->n_candidates > 0 && r->step_source == SOURCE_WHOLE) e->b_full[n_full++] = (int32_t)n_out;
            e->b_draw[n_out] = (st_row_draw){0};
            if (r->step_source == SOURCE_DRAWN) st_sampler_next_draw(r->sampler, &e->b_draw[n_out]), n_draw++;
            e->b_out[n_out++] = (int32_t)(k - 1);
        }
        if (r->row + 1 > n_seq) n_seq = r->row + 1;
    }
    const int32_t pad = (int32_t)e->cfg.n_blocks; /* the pool's padding block (runner.h) */
    for (int32_t row = 0; row < n_seq; row++) {
        int32_t *dst = e->table + (size_t)row * (size_t)e->max_blocks;
        const engine_req *r = e->rows[row];
        const int32_t have = r && r->step_n > 0 ? r->seq.n_blocks : 0;
        if (have > 0) memcpy(dst, r->seq.blocks, (size_t)have * sizeof(int32_t));
        for (int32_t c = have; c < e->max_blocks; c++) dst[c] = pad;
    }
    return (st_batch){.n_tokens = k, .tokens = e->b_tokens, .pos = e->b_pos, .seq = e->b_seq, .n_single = n_single,
                      .block_table = e->table, .n_seq = n_seq, .max_blocks = e->max_blocks, .out = e->b_out,
                      .n_out = n_out, .full = e->b_full, .n_full = n_full, .draw = n_draw > 0 ? e->b_draw : NULL};
}

static bool is_stop(const engine_req *r, int32_t token) {
    for (int32_t i = 0; i < r->n_stop; i++)
        if (r->stop[i] == token) return true;
    return false;
}

/* The token the backend drew for pick j, or why there is none. */
static st_status drawn_token(const st_runner_output *o, int64_t j, int32_t *token, st_error *why) {
    *token = o->drawn[j];
    if (*token == -1) return st_error_set(why, ST_ERROR_INVALID, "the logits hold a NaN or +inf");
    if (*token < 0) return st_error_set(why, ST_ERROR_INVALID, "the logits hold no finite value");
    return ST_OK;
}

/* The token of pick j (logits row j of the step), from its source, and its
 * log-probabilities if asked for. Touches nothing but the pick and its request's sampler,
 * so that the step's choices can run at once. */
static void choose_token(const st_engine *e, int64_t j, const st_runner_output *o) {
    engine_pick *p = &e->picks[j];
    const engine_req *r = p->r;
    const float *row = p->source == SOURCE_WHOLE ? o->logits + j * e->n_vocab : NULL;
    const int32_t *ids = o->k > 0 ? o->ids + j * o->k : NULL;
    const float *vals = o->k > 0 ? o->vals + j * (o->k + 1) : NULL;
    int32_t token = -1;
    p->why = (st_error){0};
    switch (p->source) {
    case SOURCE_WHOLE: p->status = st_sampler_sample(r->sampler, row, &token, &p->why); break;
    case SOURCE_DRAWN: p->status = drawn_token(o, j, &token, &p->why); break;
    case SOURCE_TOP_P:
        token = st_sampler_sample_top_p_kept(r->sampler, ids, vals, p->n_keep);
        p->status = ST_OK;
        break;
    case SOURCE_CANDIDATES:
        p->status = st_sampler_sample_candidates(r->sampler, ids, vals, o->k, vals[o->k], &token, &p->why);
        break;
    }
    p->ev = (st_engine_event){.id = r->id, .token = token};
    if (p->status != ST_OK || !r->logprobs) return;
    if (p->source == SOURCE_WHOLE) {
        engine_logprobs(row, e->n_vocab, token, r->top_logprobs, &p->ev);
        return;
    }
    engine_logprobs_candidates(ids, vals, o->k, vals[o->k], token, r->top_logprobs, &p->ev);
    /* a drawn token may lie outside the candidates: its own logit */
    if (p->source == SOURCE_DRAWN) p->ev.logprob = (float)((double)o->drawn_logits[j] - (double)vals[o->k]);
}

/* Takes pick j's chosen token: queues its event, finishes its request if it ends. */
static st_status sample_next(st_engine *e, int64_t j, const st_runner_output *o, st_error *err) {
    const engine_pick *p = &e->picks[j];
    engine_req *r = p->r;
    st_engine_event ev = p->ev;
    const int32_t token = ev.token;
    const float *row = p->source == SOURCE_WHOLE ? o->logits + j * e->n_vocab : NULL;
    st_error why = p->why;
    if (p->status != ST_OK || engine_req_append(e, r, token, &why) != ST_OK)
        return engine_finish(e, r, ST_FINISH_ERROR, why.message, true, err);
    st_sampler_accept(r->sampler, token);
    const float *keep = r->logits == ST_REQUEST_LOGITS_EVERY || (r->logits == ST_REQUEST_LOGITS_FIRST && !r->sampled)
                            ? row
                            : NULL;
    r->sampled = true;
    r->n_generated++;
    e->stats.tokens_out++;
    if (p->source == SOURCE_WHOLE) e->stats.tokens_from_rows++;
    else if (p->source == SOURCE_DRAWN) e->stats.tokens_drawn++;
    else e->stats.tokens_from_candidates++;
    st_finish_reason reason = ST_FINISH_NONE;
    if (is_stop(r, token)) reason = ST_FINISH_STOP;
    else if (r->max_tokens > 0 && r->n_generated >= r->max_tokens) reason = ST_FINISH_LENGTH;
    else if (r->n_tokens > e->cfg.n_ctx) reason = ST_FINISH_CONTEXT; /* it would need position n_ctx */
    if (reason != ST_FINISH_NONE) {
        ev.finished = true;
        ev.reason = reason;
        engine_event_totals(r, &ev);
    }
    st_status s = engine_event_push(e, r, &ev, keep, err);
    if (reason != ST_FINISH_NONE) {
        st_status f = engine_finish(e, r, reason, NULL, false, err);
        if (s == ST_OK) s = f;
    }
    return s;
}

/* Every request of the step ends with an error: the step could not run. */
static void fail_step(st_engine *e, const char *message) {
    for (int32_t i = 0; i < e->n_sched; i++) {
        engine_req *r = e->sched[i];
        r->step_n = 0;
        if (r->state == REQ_RUNNING) engine_finish(e, r, ST_FINISH_ERROR, message, true, NULL);
    }
    e->n_sched = 0;
}

st_status st_engine_step(st_engine *e, st_error *err) {
    engine_events_release_taken(e);
    engine_reap(e);
    if (st_engine_pending(e) == 0) return ST_OK;
    st_error local = {0};
    if (!err) err = &local;
    e->n_sched = 0;
    bool preempted = false;
    int64_t budget = e->cfg.max_batch_tokens;
    st_status s = schedule_decode(e, &preempted, err);
    budget -= e->n_sched;
    if (s == ST_OK) s = schedule_prefill(e, &budget, &preempted, err);
    if (s == ST_OK && !preempted) s = schedule_admit(e, &budget, err);
    if (s != ST_OK) {
        fail_step(e, err->message);
        return s;
    }
    ST_ASSERT(e->n_sched > 0); /* the oldest request can always advance (engine.h) */

    const st_batch b = build_batch(e);
    st_runner_output out;
    const double t0 = st_clock_seconds();
    s = st_runner_eval_out(e->runner, &b, &out, err);
    const double dt = st_clock_seconds() - t0;
    if (s != ST_OK) {
        fail_step(e, err->message);
        return s;
    }
    int64_t n_decode = 0;
    for (int32_t i = 0; i < e->n_sched; i++) n_decode += e->sched[i]->step_decode;
    e->stats.steps++;
    e->stats.decode_tokens += n_decode;
    e->stats.prefill_tokens += b.n_tokens - n_decode;
    e->stats.generation_seconds += dt * (double)n_decode / (double)b.n_tokens;
    e->stats.prompt_seconds += dt * (double)(b.n_tokens - n_decode) / (double)b.n_tokens;

    /* The requests that sample, with their logits rows (in batch order). Each sampler is its
     * request's own, so the choices run in parallel where some scan a whole row (n_vocab
     * logits each); the tokens are then taken in batch order. */
    int32_t n_pick = 0, n_whole = 0, n_late_draws = 0;
    for (int32_t i = 0; i < e->n_sched; i++) {
        engine_req *r = e->sched[i];
        if (r->n_computed + r->step_n < r->n_tokens) continue;
        engine_pick *p = &e->picks[n_pick];
        *p = (engine_pick){.r = r, .source = r->step_source};
        e->b_late_draw[n_pick] = (st_row_draw){0};
        /* top-p: the candidates settle its cut, or the backend draws from the whole row now */
        if (p->source == SOURCE_TOP_P) {
            const float *vals = out.vals + (size_t)n_pick * (size_t)(out.k + 1);
            p->n_keep = st_sampler_top_p_keep(r->sampler, vals, out.k, vals[out.k]);
            if (p->n_keep == 0) {
                p->source = SOURCE_DRAWN;
                st_sampler_next_draw(r->sampler, &e->b_late_draw[n_pick]);
                n_late_draws++;
            }
        }
        n_whole += p->source == SOURCE_WHOLE;
        n_pick++;
    }
    ST_ASSERT(n_pick == b.n_out);
    e->stats.rows_drawn_late += n_late_draws;
    if (n_late_draws > 0 && (s = st_runner_draw_rows(e->runner, e->b_late_draw, &out, err)) != ST_OK) {
        fail_step(e, err->message);
        return s;
    }
#pragma omp parallel for schedule(dynamic, 1) if (n_whole > 1)
    for (int32_t i = 0; i < n_pick; i++) choose_token(e, i, &out);
    for (int32_t i = 0, k = 0; i < e->n_sched; i++) {
        engine_req *r = e->sched[i];
        r->n_computed += r->step_n;
        r->step_n = 0;
        if (e->cfg.prefix_cache) st_kv_seq_commit(e->bm, &r->seq, r->tokens, r->n_computed);
        if (r->n_computed < r->n_tokens) continue;
        ST_ASSERT(e->picks[k].r == r);
        st_status si = sample_next(e, k++, &out, err);
        if (s == ST_OK) s = si;
    }
    e->n_sched = 0;
    return s;
}
