/* The engine's events (engine.h): a ring of queued events, the logits buffers some of them
 * carry (reused, not freed, once taken), and the log-probabilities of a sampled token. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

void engine_event_totals(const engine_req *r, st_engine_event *ev) {
    ev->n_prompt = r->n_prompt;
    ev->n_cached = r->n_cached;
    ev->n_generated = r->n_generated;
}

static st_status grow_ring(st_engine *e, st_error *err) {
    const int64_t cap = e->ev_cap ? 2 * e->ev_cap : 64;
    engine_event *ring = malloc((size_t)cap * sizeof(engine_event));
    if (!ring) return st_error_set(err, ST_ERROR_NOMEM, "out of host memory for %lld events", (long long)cap);
    for (int64_t i = 0; i < e->ev_n; i++) ring[i] = e->events[(e->ev_head + i) % e->ev_cap];
    free(e->events);
    e->events = ring;
    e->ev_cap = cap;
    e->ev_head = 0;
    return ST_OK;
}

/* A buffer of n_vocab floats: a spare one, or a new one. */
static float *take_buffer(st_engine *e) {
    if (e->n_spare > 0) return e->spare[--e->n_spare];
    return malloc((size_t)e->n_vocab * sizeof(float));
}

static void give_buffer(st_engine *e, float *buf) {
    if (!buf) return;
    if (e->n_spare == e->spare_cap) {
        const int64_t cap = e->spare_cap ? 2 * e->spare_cap : 16;
        float **grown = realloc(e->spare, (size_t)cap * sizeof(float *));
        if (!grown) { /* keeping it is an optimisation only */
            free(buf);
            return;
        }
        e->spare = grown;
        e->spare_cap = cap;
    }
    e->spare[e->n_spare++] = buf;
}

st_status engine_event_push(st_engine *e, engine_req *r, const st_engine_event *ev, const float *logits,
                            st_error *err) {
    if (e->ev_n == e->ev_cap) {
        st_status s = grow_ring(e, err);
        if (s != ST_OK) return s;
    }
    engine_event q = {.ev = *ev, .req = ev->finished ? r : NULL};
    if (logits) {
        q.buf = take_buffer(e);
        if (!q.buf)
            return st_error_set(err, ST_ERROR_NOMEM, "out of host memory for %lld logits", (long long)e->n_vocab);
        memcpy(q.buf, logits, (size_t)e->n_vocab * sizeof(float));
        q.ev.logits = q.buf;
    }
    e->events[(e->ev_head + e->ev_n) % e->ev_cap] = q;
    e->ev_n++;
    return ST_OK;
}

void engine_events_release_taken(st_engine *e) {
    give_buffer(e, e->taken);
    e->taken = NULL;
}

bool st_engine_poll(st_engine *e, st_engine_event *ev) {
    engine_events_release_taken(e);
    engine_reap(e);
    if (e->ev_n == 0) return false;
    engine_event *q = &e->events[e->ev_head];
    e->ev_head = (e->ev_head + 1) % e->ev_cap;
    e->ev_n--;
    *ev = q->ev;
    e->taken = q->buf;
    if (q->req) q->req->reap = true; /* (freed at the next call: ev.message points into it) */
    return true;
}

void engine_events_free(st_engine *e) {
    engine_events_release_taken(e);
    for (int64_t i = 0; i < e->ev_n; i++) free(e->events[(e->ev_head + i) % e->ev_cap].buf);
    for (int64_t i = 0; i < e->n_spare; i++) free(e->spare[i]);
    free(e->events);
    free(e->spare);
    e->events = NULL;
    e->spare = NULL;
    e->ev_n = e->ev_cap = e->n_spare = e->spare_cap = 0;
}

void engine_logprobs(const float *logits, int64_t n_vocab, int32_t token, int32_t n_top, st_engine_event *ev) {
    float max = -INFINITY;
    for (int64_t i = 0; i < n_vocab; i++) max = logits[i] > max ? logits[i] : max;
    double sum = 0.0;
    for (int64_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - (double)max);
    const double lse = (double)max + log(sum);
    ev->logprob = (float)((double)logits[token] - lse);
    /* the n_top largest, descending, the lower id first among equals */
    int32_t n = 0;
    for (int64_t i = 0; i < n_vocab && n_top > 0; i++) {
        const float v = logits[i];
        if (n == n_top && !(v > ev->top[n - 1].logprob)) continue;
        int32_t at = n < n_top ? n : n - 1;
        while (at > 0 && v > ev->top[at - 1].logprob) {
            ev->top[at] = ev->top[at - 1];
            at--;
        }
        ev->top[at] = (st_token_logprob){.id = (int32_t)i, .logprob = v};
        if (n < n_top) n++;
    }
    for (int32_t j = 0; j < n; j++) ev->top[j].logprob = (float)((double)ev->top[j].logprob - lse);
    ev->n_top = n;
}

void engine_logprobs_candidates(const int32_t *ids, const float *vals, int32_t k, float lse, int32_t token,
                                int32_t n_top, st_engine_event *ev) {
    ST_ASSERT(n_top <= k);
    for (int32_t i = 0; i < k; i++)
        if (ids[i] == token) ev->logprob = (float)((double)vals[i] - (double)lse);
    for (int32_t j = 0; j < n_top; j++)
        ev->top[j] = (st_token_logprob){.id = ids[j], .logprob = (float)((double)vals[j] - (double)lse)};
    ev->n_top = n_top;
}
