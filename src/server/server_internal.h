/* The server's parts (server.h), shared between its files:
 *   engine_loop.c      the engine loop thread, jobs and their event queues
 *   text_stream.c      tokens -> text: streaming detokenizer, stop strings, UTF-8
 *   openai_request.c   parsing and validating the OpenAI requests
 *   openai_response.c  JSON bodies, SSE chunks and errors
 *   http.c             libmicrohttpd: connections, limits, routing, the watchdog
 *   generate.c         /v1/chat/completions and /v1/completions
 *   handlers.c         the other endpoints
 *   server.c           start, drain, stop
 *   metrics.c          /metrics
 *   web.c              the embedded page at / */
#ifndef STRIDE_SERVER_INTERNAL_H
#define STRIDE_SERVER_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "server/strbuf.h"
#include "stride/server.h"

struct MHD_Connection;
struct MHD_Daemon;

/* ---- jobs: one request's sequences and their events (engine_loop.c) --------------------- */

typedef struct srv_token {
    int32_t id;
    float logprob;
    int32_t n_top;
    st_token_logprob top[ST_ENGINE_MAX_TOP_LOGPROBS]; /* [n_top]: no allocation per token */
} srv_token;

typedef struct srv_choice {
    int64_t engine_id;         /* 0 until added */
    srv_token *tokens;         /* [n_tokens] received and not yet taken by the HTTP side */
    int64_t n_tokens, cap;
    bool finished;
    st_finish_reason reason;
    char message[256];         /* ST_FINISH_ERROR */
    int64_t n_prompt, n_cached, n_generated;
    bool cancel;               /* asked to stop (a stop string matched) */
} srv_choice;

typedef struct srv_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;                  /* the HTTP side's and the loop's */
    int32_t n_choices;
    srv_choice *choices;
    int32_t *prompt;           /* [n_prompt] */
    int64_t n_prompt;
    st_request_params params;  /* prompt and stop point into this job */
    int32_t *stop_ids;
    int32_t n_stop_ids;
    bool cancel_all;           /* the client went away */
    double t_submit, t_first;  /* host clock */
    struct srv_job *next_op;   /* in the loop's op queue */
    int op;                    /* SRV_OP_* while queued */
    bool wake_queued;          /* the loop thread's own: in this step's wake-up list */
} srv_job;

enum { SRV_OP_NONE = 0, SRV_OP_ADD, SRV_OP_CANCEL };

typedef struct srv_loop srv_loop;

st_status srv_loop_start(st_engine *e, srv_loop **out, st_error *err);
/* Stops the thread after cancelling everything still running, and frees. */
void srv_loop_free(srv_loop *l);

/* A job for n choices of prompt with params (copied; sampling seeds are seed + choice). */
srv_job *srv_job_new(const int32_t *prompt, int64_t n_prompt, const st_request_params *params, const int32_t *stop_ids,
                     int32_t n_stop_ids, int32_t n_choices);
void srv_job_unref(srv_job *j);
/* Under j->mu: moves the choice's received tokens to the caller, as the array *buf of *cap
 * (the count returned), and keeps the caller's old array, emptied, for the next ones: the
 * lock is held for a swap, not for the tokens' text. */
int64_t srv_choice_take(srv_choice *c, srv_token **buf, int64_t *cap);

/* Queues the job. 429 when the waiting queue holds max_queue requests, 503 when
 * draining: returns the HTTP status, 0 when queued. */
int srv_loop_submit(srv_loop *l, srv_job *j, int32_t max_queue);
/* Asks the loop to cancel the job's unfinished choices (j->cancel_all or choice->cancel set
 * by the caller under j->mu). */
void srv_loop_cancel(srv_loop *l, srv_job *j);
/* Cancels everything and lets the thread end (its queue stays usable until free). */
void srv_loop_abort(srv_loop *l);
/* New submissions answer 503 from now on. */
void srv_loop_close(srv_loop *l);
/* Jobs not yet finished. */
int64_t srv_loop_active(srv_loop *l);
/* The engine's counters as of the last step; n_waiting also counts the jobs submitted
 * and not yet in a step (a request is always running or waiting until it ends). */
void srv_loop_stats(srv_loop *l, st_engine_stats *out, st_engine_config *cfg);

/* ---- text (text_stream.c) ----------------------------------------------------------------- */

#define SRV_MAX_STOP 16
#define SRV_MAX_STOP_BYTES 256

typedef struct srv_text {
    st_detokenizer detok;
    st_strbuf text;            /* every byte produced so far (truncated at a stop string) */
    size_t sent;               /* bytes handed out */
    const char *const *stop;   /* [n_stop] stop strings, not owned */
    int32_t n_stop;
    bool stopped;              /* a stop string matched: text ends before it */
} srv_text;

void srv_text_init(srv_text *t, const st_tokenizer *tok, const char *const *stop, int32_t n_stop);
void srv_text_free(srv_text *t);
/* Appends a token's text; true when a stop string now matches (the text is cut there). */
bool srv_text_push(srv_text *t, int32_t token);
/* End of generation: flushes the detokenizer (unless stopped) and releases what was held. */
void srv_text_finish(srv_text *t);
/* The bytes ready to send (not possibly the start of a stop string), and marks them sent. */
const char *srv_text_take(srv_text *t, bool final, size_t *len);

/* bytes -> valid UTF-8 (invalid sequences become U+FFFD) appended to b. */
void srv_utf8_sanitize(st_strbuf *b, const char *s, size_t n);

/* ---- requests (openai_request.c) ------------------------------------------------------------ */

typedef enum srv_kind { SRV_CHAT = 0, SRV_COMPLETION } srv_kind;

typedef struct srv_request {
    srv_kind kind;
    bool stream, include_usage;
    int32_t n;
    int64_t max_tokens;        /* -1: until the context is full */
    st_sampler_params sampling;
    char *stop[SRV_MAX_STOP];  /* malloc'd */
    int32_t n_stop;
    bool logprobs;             /* completions: logprobs >= 0 given; chat: logprobs true */
    int32_t top_logprobs;
    bool ignore_eos;
    char *prompt_text;         /* malloc'd: the rendered conversation or the prompt */
    int32_t *prompt_ids;       /* completions given token ids: malloc'd */
    int64_t n_prompt_ids;
} srv_request;

struct srv_server;
/* Parses body into r. On failure returns the HTTP status (400, 404) with the message in
 * err; 0 on success. */
int srv_request_parse(const struct srv_server *s, srv_kind kind, const char *body, size_t len, srv_request *r,
                      st_error *err);
void srv_request_free(srv_request *r);

/* ---- responses (openai_response.c) ---------------------------------------------------------- */

/* {"error": {...}} for status, as a malloc'd string. */
char *srv_error_body(int status, const char *message);
/* The same with OpenAI's `code` given (e.g. "model_not_found"). */
char *srv_error_body_code(int status, const char *message, const char *code);
/* Dumps and frees the JSON value, NULL on out of memory. */
char *srv_json_take(json_t *v);

/* ---- the server ----------------------------------------------------------------------------- */

enum {
    SRV_P_CHAT = 0, SRV_P_COMPLETIONS, SRV_P_MODELS, SRV_P_HEALTH, SRV_P_METRICS, SRV_P_TOKENIZE, SRV_P_DETOKENIZE,
    SRV_P_INDEX, SRV_P_OTHER, SRV_PATH_COUNT
};

typedef struct srv_server {
    st_server_options opt;
    st_chat_template chat;
    bool has_chat;
    char *model_name, *host, *api_key;
    const st_model *model;
    const st_tokenizer *tok;
    int32_t *eog_ids;          /* the vocabulary's end-of-generation tokens */
    int32_t n_eog;
    int64_t n_ctx;
    srv_loop *loop;
    struct MHD_Daemon *daemon;
    uint16_t port;
    atomic_bool draining;
    atomic_bool stopped;
    int64_t created;           /* unix time, for /v1/models and ids */
    atomic_llong next_id;
    /* connections, for the watchdog (http.c) */
    pthread_mutex_t conn_mu;
    struct srv_conn *conns;
    pthread_t watchdog;
    bool watchdog_running;
    pthread_cond_t watchdog_cv;
    /* counters for /metrics (metrics.c) */
    pthread_mutex_t metrics_mu;
    int64_t http_requests[SRV_PATH_COUNT][6]; /* by path and status class 2xx..5xx, other */
    int64_t connections_open;
    int64_t slow_closed;       /* connections closed by the watchdog */
    int64_t disconnect_cancels;/* requests whose client went away before the response's end */
    double ttft_sum;
    int64_t ttft_count;
} srv_server;

struct st_server {
    srv_server s;
};

/* A handler's answer. */
typedef struct srv_reply {
    int status;
    char *body;                /* malloc'd */
    const char *content_type;
    struct MHD_Response *response; /* instead of body (streams) */
} srv_reply;

/* The endpoints (handlers.c), called on a connection's thread with the complete body. */
void srv_handle_generate(srv_server *s, struct MHD_Connection *c, srv_kind kind, const char *body, size_t len,
                         srv_reply *out);
void srv_handle_tokenize(srv_server *s, const char *body, size_t len, srv_reply *out);
void srv_handle_detokenize(srv_server *s, const char *body, size_t len, srv_reply *out);
void srv_handle_models(srv_server *s, srv_reply *out);

/* libmicrohttpd (http.c): listen (s->port set), stop accepting, stop everything. */
st_status srv_http_start(srv_server *s, st_error *err);
void srv_http_quiesce(srv_server *s);
void srv_http_stop(srv_server *s);
/* Requests whose head has come and whose answer is not yet sent (a connection past its
 * HEAD phase: libmicrohttpd's completion puts it back), for a drain to wait on (http.c). */
int64_t srv_http_requests_open(srv_server *s);
/* Whether the client of c has closed its end (http.c). */
bool srv_conn_gone(struct MHD_Connection *c);
/* Path index for the counters (metrics.c) and the counters. */
int srv_path_index(const char *path);
const char *srv_path_name(int index);
void srv_metrics_count(srv_server *s, int path_index, int status);
char *srv_metrics_text(srv_server *s);

/* The web page (web.c). */
extern const unsigned char st_server_web_index[];
extern const size_t st_server_web_index_len;

#endif
