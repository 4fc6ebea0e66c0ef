/*
 * stride: the OpenAI-compatible HTTP server (`stride serve`), on the engine (engine.h).
 *
 * Threads: one engine loop thread owns the engine (which is single-threaded): it takes
 * requests and cancellations from a mutex-protected queue, steps the engine, and hands
 * each event to its request's own queue (a mutex and a condition variable). HTTP runs on
 * libmicrohttpd with a thread per connection: a connection's thread parses and validates
 * its request, tokenizes it, queues it, and then blocks on its request's queue, writing a
 * whole JSON body or, for `stream`, server-sent events through a blocking content reader.
 * While it waits it watches its socket: a client that goes away cancels its sequences,
 * whose KV blocks the engine gives back at once. A watchdog thread closes a connection
 * whose request head and body do not arrive in time (slow-loris).
 *
 * Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,
 * GET /metrics (Prometheus text), POST /tokenize, POST /detokenize, GET / (the web chat
 * page). Errors are OpenAI's JSON shape: 400 malformed JSON or parameters, 401 a missing
 * or wrong API key, 404 an unknown model or path, 405 a wrong method, 413 a body over the
 * limit, 429 the waiting queue full, 503 shutting down. README.md lists the limits.
 *
 * The library prints nothing: libmicrohttpd's messages go to st_log.
 */
#ifndef STRIDE_SERVER_H
#define STRIDE_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stride/chat.h"
#include "stride/engine.h"
#include "stride/model.h"
#include "stride/sample.h"
#include "stride/status.h"
#include "stride/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_server_options {
    const char *host;            /* address to bind (IPv4 or IPv6 literal); "127.0.0.1" */
    uint16_t port;               /* 8080; 0 picks a free port (st_server_port) */
    const char *api_key;         /* requests must carry "Authorization: Bearer KEY"; NULL: none */
    const char *model_name;      /* the id /v1/models lists and requests may name */
    const st_chat_template *chat;/* copied; NULL: chat completions answer 400 saying so */
    size_t max_body_bytes;       /* a request body over this is 413 (1 MiB) */
    int32_t max_connections;     /* connections (threads) at once (256) */
    int32_t max_queue;           /* requests waiting for a row; beyond, 429 (256) */
    int32_t max_n;               /* choices per request (`n`), 1.. (8) */
    double request_timeout_s;    /* a request's head and body must arrive within this, and an
                                    idle connection is closed after it (10) */
    double drain_timeout_s;      /* at shutdown, in-flight requests may finish within this;
                                    then they are cancelled (30) */
    st_sampler_params sampling;  /* what a request's sampling is where it names nothing
                                    (OpenAI's: temperature 1, top-p 1, no top-k, min-p or
                                    repetition penalty); its seed is not used: a request
                                    without a "seed" gets a fresh one */
} st_server_options;

st_server_options st_server_options_default(void);

typedef struct st_server st_server;

/* Starts listening and the engine loop. The server drives e (it must not be used by the
 * caller until st_server_free) and reads m and tok (which must outlive it). */
st_status st_server_start(st_engine *e, const st_model *m, const st_tokenizer *tok, const st_server_options *o,
                          st_server **out, st_error *err);

/* The port it listens on. */
uint16_t st_server_port(const st_server *s);

/* Graceful stop: new requests get 503, in-flight ones finish (cancelled after the drain
 * timeout), then the listener and every connection close. */
void st_server_shutdown(st_server *s);

/* Shuts down if not yet, stops the threads and frees. */
void st_server_free(st_server *s);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_SERVER_H */
