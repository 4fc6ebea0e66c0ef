/* The two generation endpoints, /v1/chat/completions and /v1/completions (server.h): the
 * request is checked and tokenized on the connection's thread, queued to the engine loop,
 * and its events turned into text (stop strings matched there) and written as one JSON
 * body, or as server-sent events from a blocking content reader. A client that goes away
 * cancels the request. */
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server_internal.h"
#include "stride/clock.h"

typedef struct gen_choice {
    srv_text text;
    int64_t n_counted;          /* tokens taken into the text (the usage's completion tokens) */
    bool finished, reported;    /* finished: its finish was seen; reported: its last chunk sent */
    const char *finish_reason;
    json_t *lp;                 /* logprobs gathered since the last chunk (or all, not streaming) */
    json_t *lp_tokens, *lp_values, *lp_top, *lp_offsets; /* completions' arrays, inside lp */
    srv_token *taken;           /* [cap_taken] the tokens last taken from the job (srv_choice_take) */
    int64_t cap_taken;
} gen_choice;

typedef struct gen_state {
    srv_server *s;
    struct MHD_Connection *conn;
    srv_job *job;
    srv_request req;
    gen_choice *choices;
    char id[64];
    int64_t created;
    bool error;                 /* an engine error ended a choice: the message is in error_message */
    char error_message[256];
    char *chunk_head;           /* a chunk's JSON up to its choices' '[' (the same in every chunk) */
    size_t chunk_head_len;
    st_strbuf out;              /* SSE bytes not yet handed to libmicrohttpd */
    size_t out_pos;
    bool role_sent, done;
    bool cancelled;             /* the job was cancelled */
    bool left;                  /* the client went away before the response's end */
    bool ended;                 /* the stream's last byte was handed to libmicrohttpd */
} gen_state;

static const char *finish_name(st_finish_reason r) {
    switch (r) {
    case ST_FINISH_STOP: return "stop";
    case ST_FINISH_LENGTH:
    case ST_FINISH_CONTEXT: return "length";
    case ST_FINISH_CANCELLED: return "cancelled";
    default: return "error";
    }
}

/* ---- logprobs ------------------------------------------------------------------------- */

static json_t *token_json(const srv_server *s, int32_t id) {
    char buf[512];
    size_t n = st_tokenizer_token_to_bytes(s->tok, id, false, buf, sizeof(buf));
    if (n > sizeof(buf)) n = sizeof(buf);
    st_strbuf b = {0};
    srv_utf8_sanitize(&b, buf, n);
    json_t *v = json_stringn(b.data ? b.data : "", b.len);
    st_strbuf_free(&b);
    return v;
}

static json_t *bytes_json(const srv_server *s, int32_t id) {
    unsigned char buf[512];
    size_t n = st_tokenizer_token_to_bytes(s->tok, id, false, (char *)buf, sizeof(buf));
    json_t *a = json_array();
    for (size_t i = 0; i < n && i < sizeof(buf); i++) json_array_append_new(a, json_integer(buf[i]));
    return a;
}

static void lp_reset(gen_state *g, gen_choice *c) {
    json_decref(c->lp);
    if (g->req.kind == SRV_COMPLETION) {
        c->lp = json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
        c->lp_tokens = json_object_get(c->lp, "tokens");
        c->lp_values = json_object_get(c->lp, "token_logprobs");
        c->lp_top = json_object_get(c->lp, "top_logprobs");
        c->lp_offsets = json_object_get(c->lp, "text_offset");
    } else {
        c->lp = json_pack("{s:[]}", "content");
        c->lp_tokens = json_object_get(c->lp, "content");
    }
}

static void lp_add(gen_state *g, gen_choice *c, const srv_token *t, size_t offset) {
    const srv_server *s = g->s;
    if (g->req.kind == SRV_COMPLETION) {
        json_array_append_new(c->lp_tokens, token_json(s, t->id));
        json_array_append_new(c->lp_values, json_real(t->logprob));
        json_t *top = json_object();
        for (int32_t k = 0; k < t->n_top; k++) {
            json_t *name = token_json(s, t->top[k].id);
            if (!json_object_get(top, json_string_value(name))) /* same text: the likelier one stays */
                json_object_set_new(top, json_string_value(name), json_real(t->top[k].logprob));
            json_decref(name);
        }
        json_array_append_new(c->lp_top, top);
        json_array_append_new(c->lp_offsets, json_integer((json_int_t)offset));
        return;
    }
    json_t *top = json_array();
    for (int32_t k = 0; k < t->n_top; k++)
        json_array_append_new(top, json_pack("{s:o,s:f,s:o}", "token", token_json(s, t->top[k].id), "logprob",
                                             (double)t->top[k].logprob, "bytes", bytes_json(s, t->top[k].id)));
    json_array_append_new(c->lp_tokens, json_pack("{s:o,s:f,s:o,s:o}", "token", token_json(s, t->id), "logprob",
                                                  (double)t->logprob, "bytes", bytes_json(s, t->id), "top_logprobs", top));
}

/* ---- events -> text ------------------------------------------------------------------- */

/* Takes the job's new tokens and finishes into the choices' texts. Asks the loop to stop
 * a choice whose text met a stop string. The job's mutex, which the engine loop takes for
 * every token it hands over, is held only to take the tokens, not while they become text
 * and JSON. */
static void pump(gen_state *g) {
    srv_job *j = g->job;
    const int32_t n_choices = j->n_choices;
    bool cancel = false;
    for (int32_t i = 0; i < n_choices; i++) {
        srv_choice *ch = &j->choices[i];
        gen_choice *c = &g->choices[i];
        pthread_mutex_lock(&j->mu);
        const int64_t n = srv_choice_take(ch, &c->taken, &c->cap_taken);
        /* a finish comes after the choice's last token: seen now, all its tokens are taken */
        const bool finished = ch->finished;
        const st_finish_reason reason = ch->reason;
        char message[sizeof(g->error_message)];
        if (finished && reason == ST_FINISH_ERROR)
            snprintf(message, sizeof(message), "generation failed: %.200s", ch->message);
        pthread_mutex_unlock(&j->mu);
        bool stopped = false;
        for (int64_t k = 0; k < n && !c->finished; k++) {
            const srv_token *t = &c->taken[k];
            const size_t offset = c->text.text.len;
            const bool stop = srv_text_push(&c->text, t->id);
            c->n_counted++;
            if (g->req.logprobs) lp_add(g, c, t, offset);
            if (stop) { /* the text ends before the stop string; the sequence is not needed */
                c->finished = true;
                c->finish_reason = "stop";
                stopped = true;
            }
        }
        if (stopped) {
            pthread_mutex_lock(&j->mu);
            ch->cancel = true;
            pthread_mutex_unlock(&j->mu);
            cancel = true;
        }
        if (finished && !c->finished) {
            c->finished = true;
            c->finish_reason = finish_name(reason);
            if (reason == ST_FINISH_ERROR) {
                g->error = true;
                memcpy(g->error_message, message, sizeof(message));
            }
            srv_text_finish(&c->text);
        }
    }
    if (cancel) srv_loop_cancel(g->s->loop, j);
}

/* Under j->mu. */
static bool news(const gen_state *g) {
    const srv_job *j = g->job;
    for (int32_t i = 0; i < j->n_choices; i++)
        if (j->choices[i].n_tokens > 0 || (j->choices[i].finished && !g->choices[i].finished)) return true;
    return false;
}

static bool all_finished(const gen_state *g) {
    for (int32_t i = 0; i < g->job->n_choices; i++)
        if (!g->choices[i].finished) return false;
    return true;
}

/* Waits for the job's next event. False when the client went away (the job is then
 * cancelled). */
static bool wait_news(gen_state *g) {
    srv_job *j = g->job;
    pthread_mutex_lock(&j->mu);
    while (!news(g)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        if (pthread_cond_timedwait(&j->cv, &j->mu, &ts) != 0 && !news(g)) {
            pthread_mutex_unlock(&j->mu);
            if (srv_conn_gone(g->conn)) return false;
            pthread_mutex_lock(&j->mu);
        }
    }
    pthread_mutex_unlock(&j->mu);
    return true;
}

static void cancel_job(gen_state *g) {
    if (g->cancelled) return;
    g->cancelled = true;
    pthread_mutex_lock(&g->job->mu);
    g->job->cancel_all = true;
    pthread_mutex_unlock(&g->job->mu);
    srv_loop_cancel(g->s->loop, g->job);
}

/* The client went away before the response's end: counted once, and the job cancelled
 * unless all of it has already been generated. Counted first: whoever sees the job stop
 * (a /metrics reader waiting for the server to idle) sees the count too. */
static void client_left(gen_state *g) {
    if (g->left) return;
    g->left = true;
    pthread_mutex_lock(&g->s->metrics_mu);
    g->s->disconnect_cancels++;
    pthread_mutex_unlock(&g->s->metrics_mu);
    if (!all_finished(g)) cancel_job(g);
}

/* ---- bodies --------------------------------------------------------------------------- */

static json_t *usage_json(const gen_state *g) {
    int64_t completion = 0;
    for (int32_t i = 0; i < g->job->n_choices; i++) completion += g->choices[i].n_counted;
    const int64_t cached = g->job->n_choices > 0 ? g->job->choices[0].n_cached : 0;
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)g->job->n_prompt, "completion_tokens",
                     (json_int_t)completion, "total_tokens", (json_int_t)(g->job->n_prompt + completion),
                     "prompt_tokens_details", "cached_tokens", (json_int_t)cached);
}

static json_t *text_json(const char *s, size_t n) {
    st_strbuf b = {0};
    srv_utf8_sanitize(&b, s, n);
    json_t *v = json_stringn(b.data ? b.data : "", b.len);
    st_strbuf_free(&b);
    return v;
}

static json_t *envelope(const gen_state *g, bool chunk) {
    const bool chat = g->req.kind == SRV_CHAT;
    const char *object = chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    return json_pack("{s:s,s:s,s:I,s:s,s:[]}", "id", g->id, "object", object, "created", (json_int_t)g->created,
                     "model", g->s->model_name, "choices");
}

static char *full_body(gen_state *g) {
    json_t *o = envelope(g, false);
    json_t *choices = json_object_get(o, "choices");
    for (int32_t i = 0; i < g->job->n_choices; i++) {
        gen_choice *c = &g->choices[i];
        size_t n = 0;
        const char *text = srv_text_take(&c->text, true, &n);
        json_t *lp = g->req.logprobs ? json_incref(c->lp) : json_null();
        json_t *ch;
        if (g->req.kind == SRV_CHAT)
            ch = json_pack("{s:i,s:{s:s,s:o},s:o,s:s}", "index", (int)i, "message", "role", "assistant", "content",
                           text_json(text, n), "logprobs", lp, "finish_reason", c->finish_reason);
        else
            ch = json_pack("{s:i,s:o,s:o,s:s}", "index", (int)i, "text", text_json(text, n), "logprobs", lp,
                           "finish_reason", c->finish_reason);
        json_array_append_new(choices, ch);
    }
    json_object_set_new(o, "usage", usage_json(g));
    return srv_json_take(o);
}

static void sse(gen_state *g, json_t *o) {
    char *s = srv_json_take(o);
    if (!s) {
        g->out.failed = true;
        return;
    }
    st_strbuf_adds(&g->out, "data: ");
    st_strbuf_adds(&g->out, s);
    st_strbuf_adds(&g->out, "\n\n");
    free(s);
}

/* The chunk envelope's JSON up to the '[' that opens its choices, dumped once: a chunk is
 * that head, its one choice and "]}", the bytes jansson writes for the whole object (the
 * choices are its last member). */
static bool chunk_head(gen_state *g) {
    if (g->chunk_head) return true;
    char *e = srv_json_take(envelope(g, true));
    const size_t n = e ? strlen(e) : 0;
    if (n < 3 || strcmp(e + n - 3, "[]}") != 0) {
        free(e);
        return false;
    }
    e[n - 2] = '\0';
    g->chunk_head = e;
    g->chunk_head_len = n - 2;
    return true;
}

/* One chunk for choice i: its new text (and logprobs), and its finish reason if final. */
static void chunk(gen_state *g, int32_t i, const char *text, size_t n, const char *finish, bool role) {
    gen_choice *c = &g->choices[i];
    if (!chunk_head(g)) {
        g->out.failed = true;
        return;
    }
    json_t *lp = g->req.logprobs ? json_incref(c->lp) : json_null();
    json_t *fin = finish ? json_string(finish) : json_null();
    json_t *ch;
    if (g->req.kind == SRV_CHAT) {
        json_t *delta = json_object();
        if (role) json_object_set_new(delta, "role", json_string("assistant"));
        if (n > 0 || role) json_object_set_new(delta, "content", text_json(text, n));
        ch = json_pack("{s:i,s:o,s:o,s:o}", "index", (int)i, "delta", delta, "logprobs", lp, "finish_reason", fin);
    } else {
        ch = json_pack("{s:i,s:o,s:o,s:o}", "index", (int)i, "text", text_json(text, n), "logprobs", lp,
                       "finish_reason", fin);
    }
    char *body = srv_json_take(ch);
    if (!body) {
        g->out.failed = true;
        return;
    }
    st_strbuf_adds(&g->out, "data: ");
    st_strbuf_add(&g->out, g->chunk_head, g->chunk_head_len);
    st_strbuf_adds(&g->out, body);
    st_strbuf_adds(&g->out, "]}\n\n");
    free(body);
    if (g->req.logprobs) lp_reset(g, c);
}

/* The SSE bytes for what the pump brought. */
static void stream_news(gen_state *g) {
    if (!g->role_sent && g->req.kind == SRV_CHAT)
        for (int32_t i = 0; i < g->job->n_choices; i++) chunk(g, i, "", 0, NULL, true);
    g->role_sent = true;
    for (int32_t i = 0; i < g->job->n_choices; i++) {
        gen_choice *c = &g->choices[i];
        if (c->reported) continue;
        size_t n = 0;
        const char *text = srv_text_take(&c->text, c->finished, &n);
        if (c->finished) {
            if (g->error) continue;
            chunk(g, i, text, n, c->finish_reason, false);
            c->reported = true;
        } else if (n > 0 || (g->req.logprobs && json_array_size(c->lp_tokens) > 0)) {
            chunk(g, i, text, n, NULL, false);
        }
    }
    if (g->error) {
        char *e = srv_error_body(500, g->error_message);
        st_strbuf_adds(&g->out, "data: ");
        st_strbuf_adds(&g->out, e ? e : "{}");
        st_strbuf_adds(&g->out, "\n\n");
        free(e);
        for (int32_t i = 0; i < g->job->n_choices; i++) g->choices[i].reported = true;
    }
    bool all = true;
    for (int32_t i = 0; i < g->job->n_choices; i++) all = all && g->choices[i].reported;
    if (all && !g->done) {
        if (g->req.include_usage) {
            json_t *o = envelope(g, true);
            json_object_set_new(o, "usage", usage_json(g));
            sse(g, o);
        }
        st_strbuf_adds(&g->out, "data: [DONE]\n\n");
        g->done = true;
    }
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    gen_state *g = cls;
    (void)pos;
    while (g->out_pos == g->out.len) {
        g->out.len = g->out_pos = 0;
        if (g->out.failed) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (g->done) {
            g->ended = true;
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (g->role_sent && !wait_news(g)) {
            client_left(g);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        pump(g);
        stream_news(g);
    }
    const size_t n = g->out.len - g->out_pos < max ? g->out.len - g->out_pos : max;
    memcpy(buf, g->out.data + g->out_pos, n);
    g->out_pos += n;
    return (ssize_t)n;
}

static void gen_free(gen_state *g) {
    if (!g) return;
    for (int32_t i = 0; g->choices && g->job && i < g->job->n_choices; i++) {
        srv_text_free(&g->choices[i].text);
        json_decref(g->choices[i].lp);
        free(g->choices[i].taken);
    }
    free(g->choices);
    if (g->job) {
        pthread_mutex_lock(&g->s->metrics_mu);
        if (g->job->t_first > 0) {
            g->s->ttft_sum += g->job->t_first - g->job->t_submit;
            g->s->ttft_count++;
        }
        pthread_mutex_unlock(&g->s->metrics_mu);
    }
    srv_job_unref(g->job);
    srv_request_free(&g->req);
    free(g->chunk_head);
    st_strbuf_free(&g->out);
    free(g);
}

static void stream_free(void *cls) {
    gen_state *g = cls;
    if (!g->ended && !g->out.failed) client_left(g); /* the response ends before its last byte */
    else if (!all_finished(g)) cancel_job(g);
    gen_free(g);
}

/* ---- the endpoint --------------------------------------------------------------------- */

static void reply_error(srv_reply *out, int status, const char *message) {
    out->status = status;
    out->body = srv_error_body_code(status, message, status == 404 ? "model_not_found" : NULL);
}

/* The prompt's tokens: chat prompts carry the BOS text themselves, so one added by the
 * vocabulary is not doubled. */
static st_status tokenize(const srv_server *s, const srv_request *r, int32_t **ids, int64_t *n, st_error *err) {
    if (r->prompt_ids) {
        *ids = malloc((size_t)r->n_prompt_ids * sizeof(int32_t));
        if (!*ids) return st_error_set(err, ST_ERROR_NOMEM, "out of memory");
        memcpy(*ids, r->prompt_ids, (size_t)r->n_prompt_ids * sizeof(int32_t));
        *n = r->n_prompt_ids;
        return ST_OK;
    }
    st_status st = st_tokenizer_encode(s->tok, r->prompt_text, strlen(r->prompt_text), true, true, ids, n, err);
    const int32_t bos = st_tokenizer_bos(s->tok);
    if (st == ST_OK && *n >= 2 && bos >= 0 && (*ids)[0] == bos && (*ids)[1] == bos) {
        memmove(*ids, *ids + 1, (size_t)(*n - 1) * sizeof(int32_t));
        (*n)--;
    }
    return st;
}

void srv_handle_generate(srv_server *s, struct MHD_Connection *c, srv_kind kind, const char *body, size_t len,
                         srv_reply *out) {
    gen_state *g = calloc(1, sizeof(*g));
    if (!g) return reply_error(out, 500, "out of memory");
    g->s = s;
    g->conn = c;
    st_error err = {0};
    int status = srv_request_parse(s, kind, body, len, &g->req, &err);
    if (status) {
        reply_error(out, status, err.message);
        gen_free(g);
        return;
    }
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    if (tokenize(s, &g->req, &ids, &n_ids, &err) != ST_OK) {
        reply_error(out, 400, err.message);
        gen_free(g);
        return;
    }
    char msg[256];
    if (n_ids < 1 || n_ids >= s->n_ctx || (g->req.max_tokens > 0 && n_ids + g->req.max_tokens > s->n_ctx)) {
        if (g->req.max_tokens > 0)
            snprintf(msg, sizeof(msg),
                     "this model's context holds %lld tokens, but %lld were asked for (%lld in the prompt, %lld "
                     "to generate): shorten the prompt or lower max_tokens",
                     (long long)s->n_ctx, (long long)(n_ids + g->req.max_tokens), (long long)n_ids,
                     (long long)g->req.max_tokens);
        else
            snprintf(msg, sizeof(msg), "the prompt has %lld tokens: this model's context holds %lld", (long long)n_ids,
                     (long long)s->n_ctx);
        free(ids);
        reply_error(out, 400, n_ids < 1 ? "the prompt is empty" : msg);
        gen_free(g);
        return;
    }
    st_request_params p = st_request_params_default();
    p.sampling = g->req.sampling;
    p.max_tokens = g->req.max_tokens;
    p.logprobs = g->req.logprobs;
    p.top_logprobs = g->req.top_logprobs;
    g->job = srv_job_new(ids, n_ids, &p, s->eog_ids, g->req.ignore_eos ? 0 : s->n_eog, g->req.n);
    free(ids);
    g->choices = calloc((size_t)g->req.n, sizeof(gen_choice));
    if (!g->job || !g->choices) {
        reply_error(out, 500, "out of memory");
        gen_free(g);
        return;
    }
    for (int32_t i = 0; i < g->req.n; i++) {
        srv_text_init(&g->choices[i].text, s->tok, (const char *const *)g->req.stop, g->req.n_stop);
        if (g->req.logprobs) lp_reset(g, &g->choices[i]);
    }
    snprintf(g->id, sizeof(g->id), "%s-%llx", kind == SRV_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)atomic_fetch_add(&s->next_id, 1));
    g->created = (int64_t)time(NULL);
    if ((status = srv_loop_submit(s->loop, g->job, s->opt.max_queue)) != 0) {
        reply_error(out, status,
                    status == 429 ? "the server's queue is full: retry later" : "the server is shutting down");
        gen_free(g);
        return;
    }
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u); /* generation may take long */
    if (g->req.stream) {
        out->response = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, g, stream_free);
        if (!out->response) {
            cancel_job(g);
            gen_free(g);
            return reply_error(out, 500, "out of memory");
        }
        MHD_add_response_header(out->response, "Content-Type", "text/event-stream");
        MHD_add_response_header(out->response, "Cache-Control", "no-cache");
        out->status = 200;
        return;
    }
    while (!all_finished(g)) {
        if (!wait_news(g)) {
            client_left(g);
            gen_free(g);
            out->status = 0; /* nobody to answer */
            return;
        }
        pump(g);
    }
    if (g->error) reply_error(out, 500, g->error_message);
    else if (!(out->body = full_body(g))) reply_error(out, 500, "out of memory");
    else out->status = 200;
    gen_free(g);
}
