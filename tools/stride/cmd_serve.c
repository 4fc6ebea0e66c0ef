/* stride serve: the OpenAI-compatible HTTP server (server.h) on the engine. Runs until
 * SIGINT or SIGTERM, then drains the requests in flight and exits. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_setup.h"
#include "cli.h"
#include "commands.h"
#include "model_flags.h"
#include "sampling_flags.h"
#include "stride/engine.h"
#include "stride/server.h"

static const char *CMD = "serve";

static void usage(FILE *out) {
    fprintf(out,
            "usage: stride serve -m MODEL [options]\n\n"
            "An OpenAI-compatible HTTP server: POST /v1/chat/completions and /v1/completions (streaming\n"
            "with \"stream\": true), GET /v1/models, /health, /metrics (Prometheus), POST /tokenize and\n"
            "/detokenize, and a web chat page at /. Many requests run at once on the engine (continuous\n"
            "batching, prefix reuse). SIGINT or SIGTERM finish the requests in flight, then exit.\n\n"
            "options:\n"
            "  -m, --model FILE         GGUF model\n"
            "  --host ADDR              address to listen on (default 127.0.0.1: this machine only)\n"
            "  --port N                 port (default 8080; 0 picks a free one, printed at start)\n"
            "  -np, --parallel N        sequences generated at once (default 8)\n"
            "  -c, --ctx-size N         tokens one sequence may hold, prompt and answer (default 4096,\n"
            "                           at most the model's training context)\n"
            "  -b, --batch-size N       tokens per engine step: the prefill chunk budget (default 512)\n"
            "  --kv-blocks N            KV cache blocks of 64 tokens (default: enough for every sequence's\n"
            "                           full context)\n"
            "  --no-prefix-cache        do not reuse cached prompt prefixes\n"
            "  --api-key KEY            require 'Authorization: Bearer KEY' (default: $STRIDE_API_KEY if set)\n"
            "  --chat-template NAME     the chat template, instead of the model's own: %s\n"
            "  --alias NAME             the model id /v1/models lists (default: the file name)\n"
            "  --queue N                requests that may wait for a row; beyond, 429 (default 256)\n"
            "  --max-connections N      connections at once, a thread each (default 256)\n"
            "  --max-body BYTES         request body limit; beyond, 413 (default 1048576)\n"
            "  --timeout S              a request's head and body must arrive within S seconds; an idle\n"
            "                           connection is closed after S (default 10)\n"
            "  --drain-timeout S        at shutdown, requests in flight may finish within S (default 30)\n"
            CLI_MODEL_FLAGS_HELP
            "sampling where a request names none (llama.cpp's flags; the defaults are OpenAI's):\n"
            "  --temp T                 temperature >= 0; 0 = greedy (default 1)\n"
            "  --top-k N                keep the N most likely tokens; 0 = off (default 0). On a GPU a\n"
            "                           top-k of at most 64 samples from the candidates the device\n"
            "                           picks, and every other chain is sampled on the device; only\n"
            "                           penalties over a --repeat-last-n above 128 bring each token's\n"
            "                           whole logits row to the host, many times slower with many streams\n"
            "  --top-p P                keep the smallest set with mass >= P, in (0,1]; 1 = off (default 1)\n"
            "  --min-p P                keep tokens with p >= P * p_max, in [0,1); 0 = off (default 0)\n"
            CLI_PENALTY_FLAGS_HELP,
            st_chat_family_list());
}

static bool parse_count(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
    return cli_parse_u64(s, out) && *out >= lo && *out <= hi;
}

static bool parse_seconds(const char *s, double lo, double hi, double *out) {
    char *end = NULL;
    const double v = strtod(s, &end);
    if (end == s || *end != '\0' || !(v >= lo && v <= hi)) return false;
    *out = v;
    return true;
}

int st_cmd_serve(int argc, char **argv) {
    const char *model_path = NULL, *host = "127.0.0.1", *port_arg = NULL, *np_arg = NULL, *ctx_arg = NULL,
               *batch_arg = NULL, *blocks_arg = NULL, *key = getenv("STRIDE_API_KEY"), *template_name = NULL,
               *alias = NULL, *queue_arg = NULL, *conn_arg = NULL, *body_arg = NULL, *timeout_arg = NULL,
               *drain_arg = NULL;
    bool prefix_cache = true;
    cli_model_flags mf = {0};
    cli_sampling_flags sf = {0};
    for (int i = 1; i < argc; i++) {
        bool missing = false;
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return ST_EXIT_OK;
        }
        if (strcmp(a, "--no-prefix-cache") == 0) {
            prefix_cache = false;
        } else if (cli_take_value(argc, argv, &i, "-m", &model_path, &missing) ||
                   cli_take_value(argc, argv, &i, "--model", &model_path, &missing) ||
                   cli_take_value(argc, argv, &i, "--host", &host, &missing) ||
                   cli_take_value(argc, argv, &i, "--port", &port_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "-np", &np_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--parallel", &np_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "-c", &ctx_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--ctx-size", &ctx_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "-b", &batch_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--batch-size", &batch_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--kv-blocks", &blocks_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--api-key", &key, &missing) ||
                   cli_take_value(argc, argv, &i, "--chat-template", &template_name, &missing) ||
                   cli_take_value(argc, argv, &i, "--alias", &alias, &missing) ||
                   cli_take_value(argc, argv, &i, "--queue", &queue_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--max-connections", &conn_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--max-body", &body_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--timeout", &timeout_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--drain-timeout", &drain_arg, &missing) ||
                   cli_take_sampling_flag(argc, argv, &i, &sf, &missing) ||
                   cli_take_model_flag(argc, argv, &i, &mf, &missing)) {
            if (missing) return cli_usage_error(CMD, "%s needs a value", a);
        } else {
            return cli_usage_error(CMD, "unknown argument '%s'", a);
        }
    }
    if (!model_path) return cli_usage_error(CMD, "no model given (-m FILE)");
    st_engine_options eo = st_engine_options_default();
    eo.prefix_cache = prefix_cache;
    st_server_options so = st_server_options_default();
    so.host = host;
    so.api_key = key && *key ? key : NULL;
    uint64_t v = 0;
    double d = 0;
    if (port_arg && !parse_count(port_arg, 0, 65535, &v)) return cli_usage_error(CMD, "--port: '%s' is not a port", port_arg);
    so.port = port_arg ? (uint16_t)v : 8080;
    if (np_arg && !parse_count(np_arg, 1, 4096, &v)) return cli_usage_error(CMD, "-np: '%s' is not 1 to 4096", np_arg);
    if (np_arg) eo.n_parallel = (int32_t)v;
    if (ctx_arg && !parse_count(ctx_arg, 1, INT32_MAX / 2, &v))
        return cli_usage_error(CMD, "-c: '%s' is not a context length", ctx_arg);
    if (ctx_arg) eo.n_ctx = (int64_t)v;
    if (batch_arg && !parse_count(batch_arg, 1, 1 << 20, &v))
        return cli_usage_error(CMD, "-b: '%s' is not 1 to %d tokens", batch_arg, 1 << 20);
    if (batch_arg) eo.max_batch_tokens = (int64_t)v;
    if (blocks_arg && !parse_count(blocks_arg, 1, INT32_MAX / 64 - 1, &v))
        return cli_usage_error(CMD, "--kv-blocks: '%s' is not a block count", blocks_arg);
    if (blocks_arg) eo.n_blocks = (int64_t)v;
    if (queue_arg && !parse_count(queue_arg, 0, 1 << 20, &v)) return cli_usage_error(CMD, "--queue: '%s' is not 0 to %d", queue_arg, 1 << 20);
    if (queue_arg) so.max_queue = (int32_t)v;
    if (conn_arg && !parse_count(conn_arg, 1, 65536, &v))
        return cli_usage_error(CMD, "--max-connections: '%s' is not 1 to 65536", conn_arg);
    if (conn_arg) so.max_connections = (int32_t)v;
    if (body_arg && !parse_count(body_arg, 1024, 1 << 30, &v))
        return cli_usage_error(CMD, "--max-body: '%s' is not 1024 to %d bytes", body_arg, 1 << 30);
    if (body_arg) so.max_body_bytes = (size_t)v;
    if (timeout_arg && !parse_seconds(timeout_arg, 0.1, 3600, &d))
        return cli_usage_error(CMD, "--timeout: '%s' is not 0.1 to 3600 seconds", timeout_arg);
    if (timeout_arg) so.request_timeout_s = d;
    if (drain_arg && !parse_seconds(drain_arg, 0, 86400, &d))
        return cli_usage_error(CMD, "--drain-timeout: '%s' is not 0 to 86400 seconds", drain_arg);
    if (drain_arg) so.drain_timeout_s = d;
    if (sf.seed)
        return cli_usage_error(CMD, "--seed: a request names its own (\"seed\"); one without gets a fresh seed");
    bool last_n_context = false;
    int sampling_rc = cli_sampling_resolve(CMD, &sf, &so.sampling, &last_n_context);
    if (sampling_rc != ST_EXIT_OK) return sampling_rc;
    cli_model_setup setup;
    int rc = cli_model_setup_resolve(CMD, &mf, &setup);
    if (rc != ST_EXIT_OK) return rc;
    eo.kv_type = setup.kv_type;

    /* SIGINT and SIGTERM are taken by sigwait below: blocked before any thread starts, so
     * every thread inherits the mask and none is interrupted by them. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    st_error err = {0};
    st_backend *backend = NULL;
    st_model *model = NULL;
    st_tokenizer *tok = NULL;
    st_engine *engine = NULL;
    st_server *server = NULL;
    rc = ST_EXIT_FAILURE;
    double t_load = 0;
    setup.load.n_ctx = eo.n_ctx;
    if (cli_model_open(model_path, &setup, &backend, &model, &t_load, &err) != ST_OK) goto done;
    if (!ctx_arg && model->hp.n_ctx_train > 0 && eo.n_ctx > model->hp.n_ctx_train) eo.n_ctx = model->hp.n_ctx_train;
    if (last_n_context) so.sampling.repeat_last_n = (int32_t)eo.n_ctx;
    if (st_tokenizer_from_gguf(model->file, &tok, &err) != ST_OK) goto done;
    st_chat_template chat;
    bool has_chat = false;
    if (cli_chat_template(model, tok, template_name, &chat, &has_chat, &err) != ST_OK) goto done;
    if (!has_chat)
        fprintf(stderr, "stride serve: the model carries no chat template: /v1/chat/completions answers 400 "
                        "(name one with --chat-template: %s)\n", st_chat_family_list());
    so.chat = has_chat ? &chat : NULL;
    char name[256];
    snprintf(name, sizeof(name), "%s", alias ? alias : cli_base_name(model_path));
    so.model_name = name;
    if (st_engine_init(model, &eo, &engine, &err) != ST_OK) goto done;
    st_engine_config cfg;
    st_engine_get_config(engine, &cfg);
    const double t_warm = st_clock_seconds();
    if (st_engine_warmup(engine, &err) != ST_OK) goto done;
    const double warm_s = st_clock_seconds() - t_warm;
    if (st_server_start(engine, model, tok, &so, &server, &err) != ST_OK) goto done;
    char kv[32];
    cli_format_bytes(cfg.kv_bytes, kv, sizeof(kv));
    fprintf(stderr,
            "stride serve: model %s (%s), chat template %s; %d sequences of up to %lld tokens, %lld KV blocks "
            "(%s), %lld tokens a step; loaded in %.2f s, decode steps warmed up in %.2f s\n",
            name, backend->device.name, has_chat ? st_chat_family_name(chat.family) : "none", (int)cfg.n_parallel,
            (long long)cfg.n_ctx, (long long)cfg.n_blocks, kv, (long long)cfg.max_batch_tokens, t_load, warm_s);
    fprintf(stderr,
            "stride serve: a request's sampling where it names none: temperature %g, top-k %d, top-p %g, min-p %g, "
            "repeat / frequency / presence penalties %g / %g / %g over %d tokens\n",
            (double)so.sampling.temp, (int)so.sampling.top_k, (double)so.sampling.top_p, (double)so.sampling.min_p,
            (double)so.sampling.repeat_penalty, (double)so.sampling.frequency_penalty,
            (double)so.sampling.presence_penalty, (int)so.sampling.repeat_last_n);
    const bool v6 = strchr(host, ':') != NULL;
    fprintf(stderr, "stride serve: listening on http://%s%s%s:%u\n", v6 ? "[" : "", host, v6 ? "]" : "",
            (unsigned)st_server_port(server));
    fflush(stderr);
    int sig = 0;
    sigwait(&stop_signals, &sig);
    fprintf(stderr, "stride serve: %s: finishing the requests in flight\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    st_server_shutdown(server);
    fprintf(stderr, "stride serve: stopped\n");
    rc = ST_EXIT_OK;
done:
    if (rc != ST_EXIT_OK) cli_fail(CMD, &err);
    st_server_free(server);
    st_engine_free(engine);
    st_tokenizer_free(tok);
    st_model_free(model);
    st_backend_free(backend);
    return rc;
}
