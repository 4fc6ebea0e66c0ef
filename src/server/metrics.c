/* /metrics (server.h): Prometheus text, as llama-server and vLLM expose it: the HTTP
 * requests by path and status class, the engine's tokens, queue, KV blocks and speeds. */
#include <string.h>

#include "server/server_internal.h"

static const char *const PATHS[SRV_PATH_COUNT] = {
    "/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics",
    "/tokenize",            "/detokenize",     "/",          "other",
};

int srv_path_index(const char *path) {
    if (strcmp(path, "/chat/completions") == 0) return SRV_P_CHAT; /* the aliases llama-server takes */
    if (strcmp(path, "/completions") == 0) return SRV_P_COMPLETIONS;
    if (strcmp(path, "/models") == 0) return SRV_P_MODELS;
    if (strcmp(path, "/index.html") == 0) return SRV_P_INDEX;
    for (int i = 0; i < SRV_P_OTHER; i++)
        if (strcmp(path, PATHS[i]) == 0) return i;
    return SRV_P_OTHER;
}

const char *srv_path_name(int index) { return index >= 0 && index < SRV_PATH_COUNT ? PATHS[index] : "other"; }

void srv_metrics_count(srv_server *s, int path, int status) {
    const int cls = status >= 200 && status < 600 ? status / 100 - 2 : 4;
    pthread_mutex_lock(&s->metrics_mu);
    s->http_requests[path >= 0 && path < SRV_PATH_COUNT ? path : SRV_P_OTHER][cls]++;
    pthread_mutex_unlock(&s->metrics_mu);
}

static void metric(st_strbuf *b, const char *name, const char *type, const char *help) {
    st_strbuf_printf(b, "# HELP stride_%s %s\n# TYPE stride_%s %s\n", name, help, name, type);
}

char *srv_metrics_text(srv_server *s) {
    st_engine_stats st;
    st_engine_config cfg;
    srv_loop_stats(s->loop, &st, &cfg);
    st_strbuf b = {0};
    static const char *const CLASSES[5] = {"2xx", "3xx", "4xx", "5xx", "other"};
    pthread_mutex_lock(&s->metrics_mu);
    metric(&b, "http_requests_total", "counter", "HTTP requests answered, by path and status class.");
    for (int p = 0; p < SRV_PATH_COUNT; p++)
        for (int c = 0; c < 5; c++)
            if (s->http_requests[p][c])
                st_strbuf_printf(&b, "stride_http_requests_total{path=\"%s\",code=\"%s\"} %lld\n", PATHS[p],
                                 CLASSES[c], (long long)s->http_requests[p][c]);
    metric(&b, "http_connections", "gauge", "Open HTTP connections.");
    st_strbuf_printf(&b, "stride_http_connections %lld\n", (long long)s->connections_open);
    metric(&b, "http_slow_connections_closed_total", "counter",
           "Connections closed because their request did not arrive within the request timeout.");
    st_strbuf_printf(&b, "stride_http_slow_connections_closed_total %lld\n", (long long)s->slow_closed);
    metric(&b, "requests_disconnected_total", "counter", "Requests whose client went away before the end of the response.");
    st_strbuf_printf(&b, "stride_requests_disconnected_total %lld\n", (long long)s->disconnect_cancels);
    metric(&b, "time_to_first_token_seconds", "summary", "From queueing a request to its first token.");
    st_strbuf_printf(&b, "stride_time_to_first_token_seconds_sum %.6f\nstride_time_to_first_token_seconds_count %lld\n",
                     s->ttft_sum, (long long)s->ttft_count);
    pthread_mutex_unlock(&s->metrics_mu);

    metric(&b, "requests_total", "counter", "Engine requests added (one per choice).");
    st_strbuf_printf(&b, "stride_requests_total %lld\n", (long long)st.requests_added);
    metric(&b, "requests_finished_total", "counter", "Engine requests finished.");
    st_strbuf_printf(&b, "stride_requests_finished_total %lld\n", (long long)st.requests_finished);
    metric(&b, "requests_running", "gauge", "Sequences running (holding a row of the batch).");
    st_strbuf_printf(&b, "stride_requests_running %d\n", (int)st.n_running);
    metric(&b, "requests_waiting", "gauge", "Sequences waiting for a row: the queue length.");
    st_strbuf_printf(&b, "stride_requests_waiting %d\n", (int)st.n_waiting);
    metric(&b, "prompt_tokens_total", "counter", "Prompt tokens of the requests added.");
    st_strbuf_printf(&b, "stride_prompt_tokens_total %lld\n", (long long)st.tokens_in);
    metric(&b, "generation_tokens_total", "counter", "Tokens generated.");
    st_strbuf_printf(&b, "stride_generation_tokens_total %lld\n", (long long)st.tokens_out);
    metric(&b, "sampled_tokens_total", "counter",
           "Tokens generated, by where they were sampled: from a row's candidates on the host, drawn on the "
           "device from the whole row, or from the whole row on the host (on a GPU, the slow way).");
    st_strbuf_printf(&b, "stride_sampled_tokens_total{where=\"candidates\"} %lld\n"
                         "stride_sampled_tokens_total{where=\"device\"} %lld\nstride_sampled_tokens_total{where=\"row\"} %lld\n",
                     (long long)st.tokens_from_candidates, (long long)st.tokens_drawn, (long long)st.tokens_from_rows);
    metric(&b, "logits_rows_drawn_late_total", "counter",
           "Logits rows drawn from on the device after a step because the candidates did not settle a request's "
           "top-p.");
    st_strbuf_printf(&b, "stride_logits_rows_drawn_late_total %lld\n", (long long)st.rows_drawn_late);
    metric(&b, "prompt_tokens_cached_total", "counter", "Prompt tokens found in the prefix cache.");
    st_strbuf_printf(&b, "stride_prompt_tokens_cached_total %lld\n", (long long)st.prompt_tokens_cached);
    metric(&b, "kv_blocks", "gauge",
           "KV cache blocks by state: used (held by sequences), cached (free, kept for prefix reuse), free.");
    st_strbuf_printf(&b, "stride_kv_blocks{state=\"used\"} %lld\nstride_kv_blocks{state=\"cached\"} %lld\n"
                         "stride_kv_blocks{state=\"free\"} %lld\n",
                     (long long)st.blocks_used, (long long)st.blocks_cached, (long long)st.blocks_free);
    metric(&b, "kv_blocks_total", "gauge", "KV cache blocks in the pool.");
    st_strbuf_printf(&b, "stride_kv_blocks_total %lld\n", (long long)st.n_blocks);
    metric(&b, "preemptions_total", "counter", "Sequences pre-empted for want of KV blocks.");
    st_strbuf_printf(&b, "stride_preemptions_total %lld\n", (long long)st.preemptions);
    metric(&b, "engine_steps_total", "counter", "Engine steps (forward passes).");
    st_strbuf_printf(&b, "stride_engine_steps_total %lld\n", (long long)st.steps);
    metric(&b, "prompt_tokens_per_second", "gauge", "Prompt (prefill) speed over the engine's busy time.");
    st_strbuf_printf(&b, "stride_prompt_tokens_per_second %.3f\n", st.prompt_tokens_per_s);
    metric(&b, "generation_tokens_per_second", "gauge", "Generation (decode) speed over the engine's busy time.");
    st_strbuf_printf(&b, "stride_generation_tokens_per_second %.3f\n", st.generation_tokens_per_s);
    metric(&b, "context_tokens", "gauge", "Tokens one sequence may hold.");
    st_strbuf_printf(&b, "stride_context_tokens %lld\n", (long long)cfg.n_ctx);
    if (b.failed) {
        st_strbuf_free(&b);
        return NULL;
    }
    return b.data;
}
