/* The engine loop (server.h): one thread owns the engine. Connections hand it jobs and
 * cancellations through a queue under one mutex; it steps the engine and appends each
 * event's token to its job's own queue (under the job's mutex). The connections' threads
 * are woken by a second thread, the waker, which the loop hands the step's jobs to at
 * once: a wake-up is a system call when a connection's thread sleeps, and the engine,
 * which waits for nothing else between steps, should not pay one per sequence. */
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
    int64_t n_ops_add;            /* jobs submitted and not yet in the stats of a step: a
                                     request is always in these or in stats, never between */
    bool stop, closed;
    int64_t active;               /* jobs submitted and not finished */
    st_engine_stats stats;        /* as of the last step */
    st_engine_config cfg;
    /* the loop thread's own */
    route *routes;
    int64_t n_routes, cap_routes;
    int64_t route_hint;           /* where the last event's route was: the next is often after it */
    srv_job **woken;              /* [n_woken] jobs with news in this step, a reference each */
    int64_t n_woken, cap_woken;
    /* the waker thread and its queue (under wake_mu) */
    pthread_t waker;
    pthread_mutex_t wake_mu;
    pthread_cond_t wake_cv;
    srv_job **wake;               /* [n_wake] jobs whose threads to wake, a reference each */
    int64_t n_wake, cap_wake;
    bool wake_stop;
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
    for (int32_t c = 0; c < j->n_choices; c++) free(j->choices[c].tokens);
    free(j->choices);
    free(j->prompt);
    free(j->stop_ids);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

int64_t srv_choice_take(srv_choice *c, srv_token **buf, int64_t *cap) {
    srv_token *mine = *buf;
    const int64_t my_cap = *cap, n = c->n_tokens;
    *buf = c->tokens;
    *cap = c->cap;
    c->tokens = mine;
    c->cap = my_cap;
    c->n_tokens = 0;
    return n;
}

/* ---- the waker thread ----------------------------------------------------------------- */

static void *waker_main(void *arg) {
    srv_loop *l = arg;
    srv_job **mine = NULL;
    int64_t my_cap = 0;
    pthread_mutex_lock(&l->wake_mu);
    for (;;) {
        while (l->n_wake == 0 && !l->wake_stop) pthread_cond_wait(&l->wake_cv, &l->wake_mu);
        if (l->n_wake == 0) break; /* stopping, and nothing left to wake */
        srv_job **batch = l->wake; /* swap the queue for the emptied array of the last round */
        const int64_t n = l->n_wake, cap = l->cap_wake;
        l->wake = mine;
        l->cap_wake = my_cap;
        l->n_wake = 0;
        pthread_mutex_unlock(&l->wake_mu);
        /* the news were appended under each job's mutex before it was queued here: a thread
         * that saw none is in its wait by now and this wakes it */
        for (int64_t i = 0; i < n; i++) {
            pthread_cond_broadcast(&batch[i]->cv);
            srv_job_unref(batch[i]);
        }
        mine = batch;
        my_cap = cap;
        pthread_mutex_lock(&l->wake_mu);
    }
    pthread_mutex_unlock(&l->wake_mu);
    free(mine);
    return NULL;
}

/* Hands the step's jobs to the waker. A job whose reference cannot be queued for lack of
 * memory is woken here. */
static void wake_jobs(srv_loop *l) {
    if (l->n_woken == 0) return;
    for (int64_t i = 0; i < l->n_woken; i++) l->woken[i]->wake_queued = false;
    pthread_mutex_lock(&l->wake_mu);
    int64_t queued = 0;
    if (l->n_wake + l->n_woken > l->cap_wake) {
        int64_t cap = l->cap_wake ? l->cap_wake : 64;
        while (cap < l->n_wake + l->n_woken) cap *= 2;
        srv_job **grown = realloc(l->wake, (size_t)cap * sizeof(srv_job *));
        if (grown) {
            l->wake = grown;
            l->cap_wake = cap;
        }
    }
    if (l->n_wake + l->n_woken <= l->cap_wake) {
        memcpy(l->wake + l->n_wake, l->woken, (size_t)l->n_woken * sizeof(srv_job *));
        l->n_wake += l->n_woken;
        queued = l->n_woken;
        pthread_cond_signal(&l->wake_cv);
    }
    pthread_mutex_unlock(&l->wake_mu);
    for (int64_t i = queued; i < l->n_woken; i++) {
        pthread_cond_broadcast(&l->woken[i]->cv);
        srv_job_unref(l->woken[i]);
    }
    l->n_woken = 0;
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

/* A step's events come in about the order the routes were added: the search starts after
 * the last one found. */
static int64_t route_find(srv_loop *l, int64_t id) {
    const int64_t n = l->n_routes;
    for (int64_t k = 0; k < n; k++) {
        const int64_t i = (l->route_hint + k) % n;
        if (l->routes[i].engine_id == id) {
            l->route_hint = i + 1 < n ? i + 1 : 0;
            return i;
        }
    }
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
            t->id = ev->token;
            t->logprob = ev->logprob;
            t->n_top = ev->n_top;
            memcpy(t->top, ev->top, (size_t)ev->n_top * sizeof(st_token_logprob));
        }
        if (j->t_first == 0.0) j->t_first = st_clock_seconds();
    }
    bool queued = j->wake_queued;
    if (!queued && l->n_woken == l->cap_woken) {
        const int64_t cap = l->cap_woken ? 2 * l->cap_woken : 64;
        srv_job **grown = realloc(l->woken, (size_t)cap * sizeof(srv_job *));
        if (grown) {
            l->woken = grown;
            l->cap_woken = cap;
        }
    }
    if (!queued && l->n_woken < l->cap_woken) { /* its thread is woken once the step's events are in */
        l->woken[l->n_woken++] = j;
        j->wake_queued = queued = true;
        j->refs++;
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
    if (!queued) pthread_cond_broadcast(&j->cv); /* no memory to queue it: woken now */
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

        int64_t n_added = 0; /* leave n_ops_add with the step's stats, which hold them */
        while (ops) {
            srv_job *j = ops;
            ops = j->next_op;
            pthread_mutex_lock(&j->mu);
            const int op = j->op;
            j->op = SRV_OP_NONE;
            j->next_op = NULL;
            pthread_mutex_unlock(&j->mu);
            if (op == SRV_OP_ADD) {
                apply_add(l, j);
                n_added++;
            } else {
                apply_cancel(l, j);
            }
            srv_job_unref(j); /* the op's reference */
        }
        if (stop) /* srv_loop_free: everything still running ends now */
            for (int64_t i = 0; i < l->n_routes; i++) st_engine_cancel(l->engine, l->routes[i].engine_id, NULL);
        st_error err = {0};
        if (st_engine_pending(l->engine) > 0 && st_engine_step(l->engine, &err) != ST_OK)
            st_log(ST_LOG_WARN, "serve: an engine step failed (its requests end with an error): %s", err.message);
        st_engine_event ev;
        while (st_engine_poll(l->engine, &ev)) deliver(l, &ev);
        wake_jobs(l);
        pthread_mutex_lock(&l->mu);
        st_engine_get_stats(l->engine, &l->stats);
        l->n_ops_add -= n_added;
        const bool done = l->stop && st_engine_pending(l->engine) == 0 && !l->ops_head;
        pthread_mutex_unlock(&l->mu);
        if (done) break;
    }
    return NULL;
}

/* Ends the waker once it has woken every job queued to it. */
static void stop_waker(srv_loop *l) {
    pthread_mutex_lock(&l->wake_mu);
    l->wake_stop = true;
    pthread_cond_signal(&l->wake_cv);
    pthread_mutex_unlock(&l->wake_mu);
    pthread_join(l->waker, NULL);
}

/* Frees l and what it holds, its threads ended (or never started). */
static void loop_destroy(srv_loop *l) {
    free(l->routes);
    free(l->woken);
    free(l->wake);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->wake_mu);
    pthread_cond_destroy(&l->wake_cv);
    free(l);
}

st_status srv_loop_start(st_engine *e, srv_loop **out, st_error *err) {
    *out = NULL;
    srv_loop *l = calloc(1, sizeof(*l));
    if (!l) return st_error_set(err, ST_ERROR_NOMEM, "out of host memory");
    l->engine = e;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    pthread_mutex_init(&l->wake_mu, NULL);
    pthread_cond_init(&l->wake_cv, NULL);
    st_engine_get_stats(e, &l->stats);
    st_engine_get_config(e, &l->cfg);
    if (pthread_create(&l->waker, NULL, waker_main, l) != 0) {
        loop_destroy(l);
        return st_error_set(err, ST_ERROR_NOMEM, "cannot start the engine loop's waker thread");
    }
    if (pthread_create(&l->thread, NULL, loop_main, l) != 0) {
        stop_waker(l);
        loop_destroy(l);
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
    stop_waker(l);
    while (l->ops_head) { /* queued after the thread's last look: never applied */
        srv_job *j = l->ops_head;
        l->ops_head = j->next_op;
        srv_job_unref(j);
    }
    loop_destroy(l);
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

/* Requests waiting (under l->mu): in the engine's queue as of the last step, or submitted
 * and not yet in a step's stats. */
static int64_t loop_waiting(const srv_loop *l) { return l->stats.n_waiting + l->n_ops_add; }

int srv_loop_submit(srv_loop *l, srv_job *j, int32_t max_queue) {
    pthread_mutex_lock(&l->mu);
    int status = 0;
    if (l->closed) status = 503;
    else if (loop_waiting(l) >= max_queue) status = 429;
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
    out->n_waiting = (int32_t)loop_waiting(l);
    if (cfg) *cfg = l->cfg;
    pthread_mutex_unlock(&l->mu);
}
