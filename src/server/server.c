/* The server's life (server.h): start (engine loop, then HTTP), drain, stop. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server_internal.h"
#include "stride/clock.h"
#include "stride/log.h"

st_server_options st_server_options_default(void) {
    st_server_options o = {.host = "127.0.0.1", .port = 8080, .model_name = "stride", .max_body_bytes = 1 << 20,
                           .max_connections = 256, .max_queue = 256, .max_n = 8, .request_timeout_s = 10.0,
                           .drain_timeout_s = 30.0, .sampling = st_sampler_params_default()};
    o.sampling.temp = 1.0f; /* OpenAI's defaults: temperature 1, top_p 1, nothing else */
    o.sampling.top_k = 0;
    o.sampling.top_p = 1.0f;
    o.sampling.min_p = 0.0f; /* (the repetition penalty is off by default already) */
    return o;
}

static st_status check_options(const st_server_options *o, st_error *err) {
    if (o->max_body_bytes < 1024 || o->max_body_bytes > ((size_t)1 << 30))
        return st_error_set(err, ST_ERROR_INVALID, "body limit %zu: expected 1 KiB to 1 GiB", o->max_body_bytes);
    if (o->max_connections < 1 || o->max_connections > 65536)
        return st_error_set(err, ST_ERROR_INVALID, "connections %d: expected 1 to 65536", (int)o->max_connections);
    if (o->max_queue < 0 || o->max_queue > 1 << 20)
        return st_error_set(err, ST_ERROR_INVALID, "queue %d: expected 0 to %d", (int)o->max_queue, 1 << 20);
    if (o->max_n < 1 || o->max_n > 128)
        return st_error_set(err, ST_ERROR_INVALID, "choices per request %d: expected 1 to 128", (int)o->max_n);
    if (!(o->request_timeout_s >= 0.1 && o->request_timeout_s <= 3600))
        return st_error_set(err, ST_ERROR_INVALID, "request timeout %g s: expected 0.1 to 3600", o->request_timeout_s);
    if (!(o->drain_timeout_s >= 0 && o->drain_timeout_s <= 86400))
        return st_error_set(err, ST_ERROR_INVALID, "drain timeout %g s: expected 0 to 86400", o->drain_timeout_s);
    if (o->api_key && (strlen(o->api_key) == 0 || strlen(o->api_key) > 512))
        return st_error_set(err, ST_ERROR_INVALID, "the API key must hold 1 to 512 characters");
    return st_sampler_params_check(&o->sampling, err); /* (names the parameter) */
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

st_status st_server_start(st_engine *e, const st_model *m, const st_tokenizer *tok, const st_server_options *o,
                          st_server **out, st_error *err) {
    *out = NULL;
    st_status st = check_options(o, err);
    if (st != ST_OK) return st;
    st_server *srv = calloc(1, sizeof(*srv));
    if (!srv) return st_error_set(err, ST_ERROR_NOMEM, "out of host memory");
    srv_server *s = &srv->s;
    s->opt = *o;
    s->model = m;
    s->tok = tok;
    s->created = (int64_t)time(NULL);
    atomic_init(&s->next_id, (long long)s->created);
    atomic_init(&s->draining, false);
    atomic_init(&s->stopped, false);
    pthread_mutex_init(&s->conn_mu, NULL);
    pthread_mutex_init(&s->metrics_mu, NULL);
    pthread_cond_init(&s->watchdog_cv, NULL);
    s->host = dup_or_null(o->host ? o->host : "127.0.0.1");
    s->model_name = dup_or_null(o->model_name ? o->model_name : "stride");
    s->api_key = dup_or_null(o->api_key);
    s->opt.host = s->host;
    s->opt.model_name = s->model_name;
    s->opt.api_key = s->api_key;
    if (o->chat) {
        s->chat = *o->chat;
        s->has_chat = true;
    }
    const int64_t V = st_tokenizer_n_vocab(tok);
    s->eog_ids = malloc(64 * sizeof(int32_t));
    for (int64_t id = 0; s->eog_ids && id < V && s->n_eog < 64; id++)
        if (st_tokenizer_is_eog(tok, (int32_t)id)) s->eog_ids[s->n_eog++] = (int32_t)id;
    st_engine_config cfg;
    st_engine_get_config(e, &cfg);
    s->n_ctx = cfg.n_ctx;
    if (!s->host || !s->model_name || (o->api_key && !s->api_key) || !s->eog_ids) {
        st = st_error_set(err, ST_ERROR_NOMEM, "out of host memory");
        goto fail;
    }
    if ((st = srv_loop_start(e, &s->loop, err)) != ST_OK) goto fail;
    if ((st = srv_http_start(s, err)) != ST_OK) goto fail;
    *out = srv;
    return ST_OK;
fail:
    st_server_free(srv);
    return st;
}

uint16_t st_server_port(const st_server *srv) { return srv->s.port; }

void st_server_shutdown(st_server *srv) {
    srv_server *s = &srv->s;
    if (atomic_exchange(&s->stopped, true)) return;
    atomic_store(&s->draining, true);
    if (s->loop) srv_loop_close(s->loop);
    srv_http_quiesce(s);
    /* in flight: the engine's jobs, then the answers still to be sent (a job that has ended
     * is answered by its connection's thread a moment later; stopping the daemon before
     * that would close the connection unanswered) */
    const double until = st_clock_seconds() + s->opt.drain_timeout_s;
    int64_t active = s->loop ? srv_loop_active(s->loop) : 0;
    if (active > 0) st_log(ST_LOG_INFO, "serve: finishing %lld request(s) in flight", (long long)active);
    int64_t open = srv_http_requests_open(s);
    while ((active > 0 || open > 0) && st_clock_seconds() < until) {
        nanosleep(&(struct timespec){.tv_nsec = 20 * 1000 * 1000}, NULL);
        active = s->loop ? srv_loop_active(s->loop) : 0;
        open = srv_http_requests_open(s);
    }
    if (active > 0 || open > 0)
        st_log(ST_LOG_WARN, "serve: %lld request(s) still running after %g s: cancelled",
               (long long)(active > open ? active : open), s->opt.drain_timeout_s);
    /* the loop cancels what still runs and ends; the connections then answer and close */
    if (s->loop) srv_loop_abort(s->loop);
    srv_http_stop(s);
    srv_loop_free(s->loop);
    s->loop = NULL;
}

void st_server_free(st_server *srv) {
    if (!srv) return;
    srv_server *s = &srv->s;
    if (s->daemon) st_server_shutdown(srv);
    srv_loop_free(s->loop);
    srv_http_stop(s);
    free(s->eog_ids);
    free(s->host);
    free(s->model_name);
    free(s->api_key);
    pthread_mutex_destroy(&s->conn_mu);
    pthread_mutex_destroy(&s->metrics_mu);
    pthread_cond_destroy(&s->watchdog_cv);
    free(srv);
}
