/* The engine loop (server.h): one thread owns the engine. Connections hand it jobs and
 * cancellations through a queue under one mutex; it steps the engine and hands each event
 * to its job's own queue (the job's mutex and condition variable). */
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"
#include "stride/clock.h"
#include "stride/log.h"

/* Where an engine request's events go. */
typedef struct route {
    int64_t engine_id;
    srv_job *job;
    int32_t choice;
} route;

struct srv_loop {
    st_engine *engine;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_job *ops_head, *ops_tail; /* jobs with an op queued, first in first out */
    int64_t n_ops_add;
    bool stop, closed;
    int64_t active;               /* jobs submitted and not finished */
    st_engine_stats stats;        /* as of the last step */
    st_engine_config cfg;
    /* the loop thread's own */
    route *routes;
    int64_t n_routes, cap_routes;
};

srv_job *srv_job_new(const int32_t *prompt, int64_t n_prompt, const st_request_params *params, const int32_t *stop_ids,
                     int32_t n_stop_ids, int32_t n_choices) {
    srv_job *j = calloc(1, sizeof(*j));
    if (!j) return NULL;
    j->choices = calloc((size_t)n_choices, sizeof(srv_choice));
    j->prompt = malloc((size_t)n_prompt * sizeof(int32_t));
    j->stop_ids = malloc((size_t)(n_stop_ids > 0 ? n_stop_ids : 1) * sizeof(int32_t));
    if (!j->choices || !j->prompt || !j->stop_ids) {
        free(j->choices);
        free(j->prompt);
        free(j->stop_ids);
        free(j);
        return NULL;
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->n_choices = n_choices;
    memcpy(j->prompt, prompt, (size_t)n_prompt * sizeof(int32_t));
    j->n_prompt = n_prompt;
    if (n_stop_ids > 0) memcpy(j->stop_ids, stop_ids, (size_t)n_stop_ids * sizeof(int32_t));
    j->n_stop_ids = n_stop_ids;
    j->params = *params;
    j->params.prompt = j->prompt;
    j->params.n_prompt = n_prompt;
    j->params.stop = j->stop_ids;
    j->params.n_stop = n_stop_ids;
    return j;
}

void srv_job_unref(srv_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    const int refs = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (refs > 0) return;
    for (int32_t c = 0; c < j->n_choices; c++) {
        for (int64_t k = 0; k < j->choices[c].n_tokens; k++) free(j->choices[c].tokens[k].top);
        free(j->choices[c].tokens);
    }
    free(j->choices);
    free(j->prompt);
    free(j->stop_ids);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* ---- the loop thread ------------------------------------------------------------------ */

static bool route_add(srv_loop *l, int64_t id, srv_job *j, int32_t choice) {
    if (l->n_routes == l->cap_routes) {
        const int64_t cap = l->cap_routes ? 2 * l->cap_routes : 64;
        route *grown = realloc(l->routes, (size_t)cap * sizeof(route));
        if (!grown) return false;
        l->routes = grown;
        l->cap_routes = cap;
    }
    l->routes[l->n_routes++] = (route){.engine_id = id, .job = j, .choice = choice};
    return true;
}

static int64_t route_find(const srv_loop *l, int64_t id) {
    for (int64_t i = 0; i < l->n_routes; i++)
        if (l->routes[i].engine_id == id) return i;
    return -1;
}

/* Marks a choice finished (under j->mu); the job leaves the loop when its last one does. */
static void finish_choice(srv_loop *l, srv_job *j, srv_choice *c, st_finish_reason reason, const char *message) {
    c->finished = true;
    c->reason = reason;
    if (message) snprintf(c->message, sizeof(c->message), "%.200s", message);
    bool all = true;
    for (int32_t k = 0; k < j->n_choices; k++) all = all && j->choices[k].finished;
    if (all) {
        pthread_mutex_lock(&l->mu);
        l->active--;
        pthread_mutex_unlock(&l->mu);
    }
}

static void apply_add(srv_loop *l, srv_job *j) {
    pthread_mutex_lock(&l->mu);
    l->n_ops_add--;
    pthread_mutex_unlock(&l->mu);
    bool any = false;
    for (int32_t c = 0; c < j->n_choices; c++) {
        st_request_params p = j->params;
        p.sampling.seed = j->params.sampling.seed + (uint64_t)c;
        st_error err = {0};
        int64_t id = 0;
        st_status s = j->cancel_all ? ST_ERROR_INVALID : st_engine_add(l->engine, &p, &id, &err);
        pthread_mutex_lock(&j->mu);
        if (s == ST_OK && route_add(l, id, j, c)) {
            j->choices[c].engine_id = id;
            j->refs++;
            any = true;
        } else {
            if (s == ST_OK) st_engine_cancel(l->engine, id, NULL); /* no room to route it */
            finish_choice(l, j, &j->choices[c], j->cancel_all ? ST_FINISH_CANCELLED : ST_FINISH_ERROR,
                          j->cancel_all ? NULL : (s == ST_OK ? "out of host memory" : err.message));
        }
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
    }
    if (any && j->cancel_all) {
        for (int32_t c = 0; c < j->n_choices; c++)
            if (j->choices[c].engine_id) st_engine_cancel(l->engine, j->choices[c].engine_id, NULL);
    }
}

static void apply_cancel(srv_loop *l, srv_job *j) {
    int64_t ids[64];
    int32_t n = 0;
    pthread_mutex_lock(&j->mu);
    for (int32_t c = 0; c < j->n_choices && n < 64; c++) {
        srv_choice *ch = &j->choices[c];
        if (!ch->finished && ch->engine_id && (j->cancel_all || ch->cancel)) ids[n++] = ch->engine_id;
    }
    pthread_mutex_unlock(&j->mu);
    for (int32_t i = 0; i < n; i++) st_engine_cancel(l->engine, ids[i], NULL);
}

static void deliver(srv_loop *l, const st_engine_event *ev) {
    const int64_t r = route_find(l, ev->id);
    if (r < 0) return;
    srv_job *j = l->routes[r].job;
    srv_choice *c = &j->choices[l->routes[r].choice];
    pthread_mutex_lock(&j->mu);
    if (ev->token >= 0) {
        if (c->n_tokens == c->cap) {
            const int64_t cap = c->cap ? 2 * c->cap : 32;
            srv_token *grown = realloc(c->tokens, (size_t)cap * sizeof(srv_token));
            if (grown) {
                c->tokens = grown;
                c->cap = cap;
            }
        }
        if (c->n_tokens < c->cap) {
            srv_token *t = &c->tokens[c->n_tokens++];
            *t = (srv_token){.id = ev->token, .logprob = ev->logprob};
            if (ev->n_top > 0 && (t->top = malloc((size_t)ev->n_top * sizeof(st_token_logprob))) != NULL) {
                memcpy(t->top, ev->top, (size_t)ev->n_top * sizeof(st_token_logprob));
                t->n_top = ev->n_top;
            }
        }
        if (j->t_first == 0.0) j->t_first = st_clock_seconds();
    }
    bool release = false;
    if (ev->finished) {
        c->n_prompt = ev->n_prompt;
        c->n_cached = ev->n_cached;
        c->n_generated = ev->n_generated;
        finish_choice(l, j, c, ev->reason, ev->message);
        l->routes[r] = l->routes[--l->n_routes];
        release = true;
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (release) srv_job_unref(j);
}

static void *loop_main(void *arg) {
    srv_loop *l = arg;
    for (;;) {
        pthread_mutex_lock(&l->mu);
        while (!l->ops_head && !l->stop && st_engine_pending(l->engine) == 0) pthread_cond_wait(&l->cv, &l->mu);
        srv_job *ops = l->ops_head;
        l->ops_head = l->ops_tail = NULL;
        const bool stop = l->stop;
        pthread_mutex_unlock(&l->mu);

        while (ops) {
            srv_job *j = ops;
            ops = j->next_op;
            pthread_mutex_lock(&j->mu);
            const int op = j->op;
            j->op = SRV_OP_NONE;
            j->next_op = NULL;
            pthread_mutex_unlock(&j->mu);
            if (op == SRV_OP_ADD) apply_add(l, j);
            else apply_cancel(l, j);
            srv_job_unref(j); /* the op's reference */
        }
        if (stop) /* srv_loop_free: everything still running ends now */
            for (int64_t i = 0; i < l->n_routes; i++) st_engine_cancel(l->engine, l->routes[i].engine_id, NULL);
        st_error err = {0};
        if (st_engine_pending(l->engine) > 0 && st_engine_step(l->engine, &err) != ST_OK)
            st_log(ST_LOG_WARN, "serve: an engine step failed (its requests end with an error): %s", err.message);
        st_engine_event ev;
        while (st_engine_poll(l->engine, &ev)) deliver(l, &ev);
        pthread_mutex_lock(&l->mu);
        st_engine_get_stats(l->engine, &l->stats);
        const bool done = l->stop && st_engine_pending(l->engine) == 0 && !l->ops_head;
        pthread_mutex_unlock(&l->mu);
        if (done) break;
    }
    return NULL;
}

st_status srv_loop_start(st_engine *e, srv_loop **out, st_error *err) {
    *out = NULL;
    srv_loop *l = calloc(1, sizeof(*l));
    if (!l) return st_error_set(err, ST_ERROR_NOMEM, "out of host memory");
    l->engine = e;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    st_engine_get_stats(e, &l->stats);
    st_engine_get_config(e, &l->cfg);
    if (pthread_create(&l->thread, NULL, loop_main, l) != 0) {
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->cv);
        free(l);
        return st_error_set(err, ST_ERROR_NOMEM, "cannot start the engine loop thread");
    }
    *out = l;
    return ST_OK;
}

void srv_loop_free(srv_loop *l) {
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    l->closed = true;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    while (l->ops_head) { /* queued after the thread's last look: never applied */
        srv_job *j = l->ops_head;
        l->ops_head = j->next_op;
        srv_job_unref(j);
    }
    free(l->routes);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l);
}

/* Queues op for j (j->mu held by nobody). */
static void queue_op(srv_loop *l, srv_job *j, int op) {
    pthread_mutex_lock(&j->mu);
    if (j->op != SRV_OP_NONE) { /* already queued: an add also applies later cancels */
        pthread_mutex_unlock(&j->mu);
        return;
    }
    j->op = op;
    j->refs++;
    pthread_mutex_unlock(&j->mu);
    j->next_op = NULL;
    if (l->ops_tail) l->ops_tail->next_op = j;
    else l->ops_head = j;
    l->ops_tail = j;
    pthread_cond_signal(&l->cv);
}

int srv_loop_submit(srv_loop *l, srv_job *j, int32_t max_queue) {
    pthread_mutex_lock(&l->mu);
    int status = 0;
    if (l->closed) status = 503;
    else if (l->stats.n_waiting + l->n_ops_add >= max_queue) status = 429;
    if (status == 0) {
        j->t_submit = st_clock_seconds();
        l->active++;
        l->n_ops_add++;
        queue_op(l, j, SRV_OP_ADD);
    }
    pthread_mutex_unlock(&l->mu);
    return status;
}

void srv_loop_cancel(srv_loop *l, srv_job *j) {
    pthread_mutex_lock(&l->mu);
    if (!l->stop) queue_op(l, j, SRV_OP_CANCEL);
    pthread_mutex_unlock(&l->mu);
}

void srv_loop_abort(srv_loop *l) {
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    l->closed = true;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

void srv_loop_close(srv_loop *l) {
    pthread_mutex_lock(&l->mu);
    l->closed = true;
    pthread_mutex_unlock(&l->mu);
}

int64_t srv_loop_active(srv_loop *l) {
    pthread_mutex_lock(&l->mu);
    const int64_t n = l->active;
    pthread_mutex_unlock(&l->mu);
    return n;
}

void srv_loop_stats(srv_loop *l, st_engine_stats *out, st_engine_config *cfg) {
    pthread_mutex_lock(&l->mu);
    *out = l->stats;
    if (cfg) *cfg = l->cfg;
    pthread_mutex_unlock(&l->mu);
}
