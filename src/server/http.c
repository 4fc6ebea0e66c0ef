#define _GNU_SOURCE /* POLLRDHUP: the peer closed its end */
/* HTTP through libmicrohttpd (server.h): a thread per connection; bodies gathered under a
 * size limit; routing and the API key; the connections' phases for the watchdog, which
 * closes a connection whose request head and body do not arrive within the request
 * timeout (slow-loris), and the check that a waiting request's client is still there. */
#include <errno.h>
#include <unistd.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "server/server_internal.h"
#include "stride/clock.h"
#include "stride/log.h"

typedef enum conn_phase { CONN_HEAD = 0, CONN_BODY, CONN_BUSY } conn_phase;

typedef struct srv_conn {
    struct srv_conn *next;
    int fd;
    conn_phase phase;
    double deadline;   /* for HEAD and BODY: the watchdog closes the connection past it */
    bool killed;
} srv_conn;

typedef struct http_req {
    st_strbuf body;
    bool too_big;
    int path;
} http_req;


static srv_conn *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void set_phase(srv_server *s, struct MHD_Connection *c, conn_phase phase) {
    srv_conn *k = conn_of(c);
    if (!k) return;
    pthread_mutex_lock(&s->conn_mu);
    k->phase = phase;
    k->deadline = st_clock_seconds() + s->opt.request_timeout_s;
    pthread_mutex_unlock(&s->conn_mu);
}

int64_t srv_http_requests_open(srv_server *s) {
    int64_t n = 0;
    pthread_mutex_lock(&s->conn_mu);
    for (const srv_conn *k = s->conns; k; k = k->next) n += k->phase != CONN_HEAD;
    pthread_mutex_unlock(&s->conn_mu);
    return n;
}

bool srv_conn_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return true;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    srv_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        srv_conn *k = calloc(1, sizeof(*k));
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!k || !ci) {
            free(k);
            return;
        }
        k->fd = ci->connect_fd;
        k->phase = CONN_HEAD;
        k->deadline = st_clock_seconds() + s->opt.request_timeout_s;
        pthread_mutex_lock(&s->conn_mu);
        k->next = s->conns;
        s->conns = k;
        pthread_mutex_unlock(&s->conn_mu);
        pthread_mutex_lock(&s->metrics_mu);
        s->connections_open++;
        pthread_mutex_unlock(&s->metrics_mu);
        *socket_context = k;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
        /* called before libmicrohttpd closes the socket: the watchdog never touches a
         * descriptor that may have been reused */
        srv_conn *k = *socket_context;
        pthread_mutex_lock(&s->conn_mu);
        for (srv_conn **p = &s->conns; *p; p = &(*p)->next) {
            if (*p == k) {
                *p = k->next;
                break;
            }
        }
        pthread_mutex_unlock(&s->conn_mu);
        pthread_mutex_lock(&s->metrics_mu);
        s->connections_open--;
        pthread_mutex_unlock(&s->metrics_mu);
        free(k);
        *socket_context = NULL;
    }
}

static void *watchdog_main(void *arg) {
    srv_server *s = arg;
    pthread_mutex_lock(&s->conn_mu);
    while (s->watchdog_running) {
        const double now = st_clock_seconds();
        for (srv_conn *k = s->conns; k; k = k->next) {
            if (k->phase != CONN_BUSY && !k->killed && now > k->deadline) {
                shutdown(k->fd, SHUT_RDWR); /* its thread sees the end and closes it */
                k->killed = true;
                pthread_mutex_lock(&s->metrics_mu);
                s->slow_closed++;
                pthread_mutex_unlock(&s->metrics_mu);
            }
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->watchdog_cv, &s->conn_mu, &ts);
    }
    pthread_mutex_unlock(&s->conn_mu);
    return NULL;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls, enum MHD_RequestTerminationCode toe) {
    srv_server *s = cls;
    http_req *r = *req_cls;
    if (r) {
        st_strbuf_free(&r->body);
        free(r);
        *req_cls = NULL;
    }
    /* the next request on a kept-alive connection starts its clock now */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned int)(s->opt.request_timeout_s + 1));
    set_phase(s, c, CONN_HEAD);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && msg[n - 1] == '\n') msg[--n] = '\0';
    st_log(ST_LOG_INFO, "serve: http: %s", msg);
}

/* ---- answers -------------------------------------------------------------------------- */

static enum MHD_Result send_body(srv_server *s, struct MHD_Connection *c, int path, int status, char *body,
                                 const char *type) {
    if (!body) {
        status = 500;
        body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}");
        type = "application/json";
        if (!body) return MHD_NO;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", type);
    if (status == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    srv_metrics_count(s, path, status);
    const enum MHD_Result r = MHD_queue_response(c, (unsigned int)status, resp);
    MHD_destroy_response(resp);
    return r;
}

static enum MHD_Result send_error(srv_server *s, struct MHD_Connection *c, int path, int status, const char *msg) {
    return send_body(s, c, path, status, srv_error_body(status, msg), "application/json");
}

static bool key_ok(const srv_server *s, struct MHD_Connection *c) {
    if (!s->api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7) != 0) return false;
    /* constant time over the key's length */
    const char *given = h + 7;
    const size_t n = strlen(s->api_key);
    unsigned char diff = strlen(given) != n;
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)(s->api_key[i] ^ (given[i] ? given[i] : 0));
    return diff == 0;
}

static bool is_post_path(int p) { return p == SRV_P_CHAT || p == SRV_P_COMPLETIONS || p == SRV_P_TOKENIZE || p == SRV_P_DETOKENIZE; }

/* Answers a request whose body (if any) is complete. */
static enum MHD_Result dispatch(srv_server *s, struct MHD_Connection *c, http_req *r) {
    srv_reply out = {0};
    const char *body = r->body.data ? r->body.data : "";
    switch (r->path) {
    case SRV_P_CHAT: srv_handle_generate(s, c, SRV_CHAT, body, r->body.len, &out); break;
    case SRV_P_COMPLETIONS: srv_handle_generate(s, c, SRV_COMPLETION, body, r->body.len, &out); break;
    case SRV_P_TOKENIZE: srv_handle_tokenize(s, body, r->body.len, &out); break;
    case SRV_P_DETOKENIZE: srv_handle_detokenize(s, body, r->body.len, &out); break;
    case SRV_P_MODELS: srv_handle_models(s, &out); break;
    case SRV_P_HEALTH:
        out.status = atomic_load(&s->draining) ? 503 : 200;
        out.body = strdup(out.status == 200 ? "{\"status\":\"ok\"}" : "{\"status\":\"shutting down\"}");
        break;
    case SRV_P_METRICS:
        out.status = 200;
        out.body = srv_metrics_text(s);
        out.content_type = "text/plain; version=0.0.4; charset=utf-8";
        break;
    case SRV_P_INDEX: {
        out.status = 200;
        out.body = malloc(st_server_web_index_len + 1);
        if (out.body) {
            memcpy(out.body, st_server_web_index, st_server_web_index_len);
            out.body[st_server_web_index_len] = '\0';
        }
        out.content_type = "text/html; charset=utf-8";
        break;
    }
    default: break;
    }
    if (out.response) {
        srv_metrics_count(s, r->path, out.status);
        const enum MHD_Result res = MHD_queue_response(c, (unsigned int)out.status, out.response);
        MHD_destroy_response(out.response); /* a failed queue frees the stream (and cancels it) */
        return res;
    }
    if (out.status == 0) { /* the client went away */
        free(out.body);
        return MHD_NO;
    }
    return send_body(s, c, r->path, out.status, out.body, out.content_type ? out.content_type : "application/json");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **req_cls) {
    srv_server *s = cls;
    http_req *r = *req_cls;
    if (!r) { /* the head is complete */
        r = calloc(1, sizeof(*r));
        if (!r) return MHD_NO;
        *req_cls = r;
        r->path = srv_path_index(url);
        set_phase(s, c, CONN_BODY);
        const bool post = strcmp(method, "POST") == 0, get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
        if (r->path == SRV_P_OTHER) return send_error(s, c, r->path, 404, "no such endpoint");
        if (is_post_path(r->path) ? !post : !get)
            return send_error(s, c, r->path, 405, is_post_path(r->path) ? "use POST" : "use GET");
        if (r->path != SRV_P_INDEX && r->path != SRV_P_HEALTH && !key_ok(s, c))
            return send_error(s, c, r->path, 401, "a missing or wrong API key: send 'Authorization: Bearer KEY'");
        if (atomic_load(&s->draining) && r->path != SRV_P_HEALTH && r->path != SRV_P_METRICS)
            return send_error(s, c, r->path, 503, "the server is shutting down");
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->opt.max_body_bytes) {
            char msg[128];
            snprintf(msg, sizeof(msg), "the body is over the limit of %zu bytes", s->opt.max_body_bytes);
            return send_error(s, c, r->path, 413, msg);
        }
        return MHD_YES;
    }
    if (*upload_size > 0) {
        if (!r->too_big && r->body.len + *upload_size > s->opt.max_body_bytes) {
            r->too_big = true;
            st_strbuf_free(&r->body);
        }
        if (!r->too_big) st_strbuf_add(&r->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    set_phase(s, c, CONN_BUSY);
    if (r->too_big) {
        char msg[128];
        snprintf(msg, sizeof(msg), "the body is over the limit of %zu bytes", s->opt.max_body_bytes);
        return send_error(s, c, r->path, 413, msg);
    }
    if (r->body.failed) return send_error(s, c, r->path, 500, "out of memory");
    return dispatch(s, c, r);
}

/* ---- the daemon ----------------------------------------------------------------------- */

st_status srv_http_start(srv_server *s, st_error *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *ai = NULL;
    char port[16];
    snprintf(port, sizeof(port), "%u", (unsigned)s->opt.port);
    const int g = getaddrinfo(s->host, port, &hints, &ai);
    if (g != 0 || !ai)
        return st_error_set(err, ST_ERROR_INVALID, "--host %s: %s", s->host, g ? gai_strerror(g) : "no address");
    unsigned int flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    pthread_mutex_lock(&s->conn_mu);
    s->watchdog_running = true;
    pthread_mutex_unlock(&s->conn_mu);
    if (pthread_create(&s->watchdog, NULL, watchdog_main, s) != 0) {
        s->watchdog_running = false;
        freeaddrinfo(ai);
        return st_error_set(err, ST_ERROR_NOMEM, "cannot start the watchdog thread");
    }
    s->daemon = MHD_start_daemon(
        flags, s->opt.port, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned int)s->opt.max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned int)(s->opt.request_timeout_s + 1), MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)64 * 1024,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u, MHD_OPTION_END);
    const int eno = errno;
    freeaddrinfo(ai);
    if (!s->daemon)
        return st_error_set(err, ST_ERROR_IO, "cannot listen on %s port %u (%s): is the port in use?", s->host,
                            (unsigned)s->opt.port, strerror(eno));
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->opt.port;
    return ST_OK;
}

void srv_http_quiesce(srv_server *s) {
    if (!s->daemon) return;
    const MHD_socket fd = MHD_quiesce_daemon(s->daemon);
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

void srv_http_stop(srv_server *s) {
    if (s->daemon) MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
    pthread_mutex_lock(&s->conn_mu);
    const bool running = s->watchdog_running;
    s->watchdog_running = false;
    pthread_cond_signal(&s->watchdog_cv);
    pthread_mutex_unlock(&s->conn_mu);
    if (running) pthread_join(s->watchdog, NULL);
}
