/* stride chat: a conversation in the terminal, through the model's chat template, on the
 * engine. Each turn renders the whole conversation and queues it as a new request: the
 * engine's prefix cache finds the earlier turns' blocks (prompt and generated) and
 * computes only what is new, so the history stays in the KV cache between turns. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chat_setup.h"
#include "cli.h"
#include "commands.h"
#include "model_flags.h"
#include "sampling_flags.h"
#include "stride/engine.h"

static const char *CMD = "chat";

static void usage(FILE *out) {
    fprintf(out,
            "usage: stride chat -m MODEL [options]\n\n"
            "Chat with a model in the terminal: type a message, the answer streams back. Commands:\n"
            "/clear forgets the conversation, /exit (or end of input) leaves. Ctrl-C stops an answer.\n"
            "On a stdin that is not a terminal, each line is one user turn and each answer is\n"
            "printed on its own line(s), followed by an empty line.\n\n"
            "options:\n"
            "  -m, --model FILE         GGUF model\n"
            "  --system TEXT            a system prompt opening the conversation\n"
            "  --chat-template NAME     the chat template, instead of the model's own: %s\n"
            "  -n, --n-predict N        tokens per answer at most (default -1: until the end of the turn)\n"
            "  -c, --ctx-size N         tokens the conversation may hold (default 4096)\n"
            "  --stats                  after each answer, print its tokens, the prompt tokens found in the\n"
            "                           cache and the speed on stderr\n"
            CLI_SAMPLING_FLAGS_HELP
            CLI_MODEL_FLAGS_HELP,
            st_chat_family_list());
}

static volatile sig_atomic_t interrupted = 0;
static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

typedef struct conversation {
    st_chat_message *msgs;
    size_t n, cap;
} conversation;

static bool conv_add(conversation *c, const char *role, const char *content) {
    if (c->n == c->cap) {
        const size_t cap = c->cap ? 2 * c->cap : 16;
        st_chat_message *grown = realloc(c->msgs, cap * sizeof(*grown));
        if (!grown) return false;
        c->msgs = grown;
        c->cap = cap;
    }
    char *copy = strdup(content);
    if (!copy) return false;
    c->msgs[c->n++] = (st_chat_message){.role = role, .content = copy};
    return true;
}

static void conv_clear(conversation *c, size_t keep) {
    while (c->n > keep) free((char *)c->msgs[--c->n].content);
}

/* One answer: the conversation rendered, tokenized, generated and streamed to stdout.
 * The answer's text is appended to *answer. */
static st_status answer_turn(st_engine *e, const st_tokenizer *tok, const st_chat_template *t, const conversation *c,
                             st_request_params p, const int32_t *stop, int32_t n_stop, bool stats, char **answer,
                             st_error *err) {
    char *text = NULL;
    size_t len = 0;
    const st_chat_options co = {.add_generation_prompt = true, .enable_thinking = -1};
    st_status st = st_chat_template_apply(t, c->msgs, c->n, &co, &text, &len, err);
    int32_t *ids = NULL;
    int64_t n = 0;
    if (st == ST_OK) st = st_tokenizer_encode(tok, text, len, true, true, &ids, &n, err);
    free(text);
    if (st != ST_OK) return st;
    const int32_t bos = st_tokenizer_bos(tok);
    if (n >= 2 && bos >= 0 && ids[0] == bos && ids[1] == bos) { /* the template wrote BOS itself */
        memmove(ids, ids + 1, (size_t)(n - 1) * sizeof(int32_t));
        n--;
    }
    p.prompt = ids;
    p.n_prompt = n;
    p.stop = stop;
    p.n_stop = n_stop;
    int64_t id = 0;
    st = st_engine_add(e, &p, &id, err);
    free(ids);
    if (st != ST_OK) return st;
    st_detokenizer d;
    st_detokenizer_init(&d, tok);
    size_t cap = 256, used = 0;
    char *out = malloc(cap);
    if (!out) return st_error_set(err, ST_ERROR_NOMEM, "out of memory");
    out[0] = '\0';
    bool cancelled = false;
    const double t0 = st_clock_seconds();
    st_engine_event ev = {0};
    bool finished = false;
    while (!finished && st == ST_OK) {
        if (interrupted && !cancelled) {
            st_engine_cancel(e, id, NULL);
            cancelled = true;
        }
        if ((st = st_engine_step(e, err)) != ST_OK) break;
        while (st_engine_poll(e, &ev)) {
            char piece[1024];
            size_t k = 0;
            if (ev.token >= 0 && !(ev.finished && ev.reason == ST_FINISH_STOP))
                k = st_detokenizer_push(&d, ev.token, piece, sizeof(piece));
            if (ev.finished) k += st_detokenizer_flush(&d, piece + k, sizeof(piece) - k);
            fwrite(piece, 1, k, stdout);
            fflush(stdout);
            if (used + k + 1 > cap) {
                while (used + k + 1 > cap) cap *= 2;
                char *grown = realloc(out, cap);
                if (!grown) {
                    free(out);
                    return st_error_set(err, ST_ERROR_NOMEM, "out of memory");
                }
                out = grown;
            }
            memcpy(out + used, piece, k);
            used += k;
            out[used] = '\0';
            if (ev.finished) {
                finished = true;
                if (ev.reason == ST_FINISH_ERROR) st = st_error_set(err, ST_ERROR_DEVICE, "%s", ev.message);
                if (stats) {
                    const double dt = st_clock_seconds() - t0;
                    fprintf(stderr, "[%lld prompt tokens, %lld from the cache; %lld generated in %.2f s (%s)]\n",
                            (long long)ev.n_prompt, (long long)ev.n_cached, (long long)ev.n_generated, dt,
                            st_finish_reason_name(ev.reason));
                }
            }
        }
    }
    printf("\n");
    fflush(stdout);
    *answer = out;
    return st;
}

int st_cmd_chat(int argc, char **argv) {
    const char *model_path = NULL, *system = NULL, *template_name = NULL, *n_arg = NULL, *ctx_arg = NULL;
    bool stats = false;
    cli_model_flags mf = {0};
    cli_sampling_flags sf = {0};
    for (int i = 1; i < argc; i++) {
        bool missing = false;
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return ST_EXIT_OK;
        }
        if (strcmp(a, "--stats") == 0) {
            stats = true;
        } else if (cli_take_value(argc, argv, &i, "-m", &model_path, &missing) ||
                   cli_take_value(argc, argv, &i, "--model", &model_path, &missing) ||
                   cli_take_value(argc, argv, &i, "--system", &system, &missing) ||
                   cli_take_value(argc, argv, &i, "--chat-template", &template_name, &missing) ||
                   cli_take_value(argc, argv, &i, "-n", &n_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--n-predict", &n_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "-c", &ctx_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--ctx-size", &ctx_arg, &missing) ||
                   cli_take_sampling_flag(argc, argv, &i, &sf, &missing) ||
                   cli_take_model_flag(argc, argv, &i, &mf, &missing)) {
            if (missing) return cli_usage_error(CMD, "%s needs a value", a);
        } else {
            return cli_usage_error(CMD, "unknown argument '%s'", a);
        }
    }
    if (!model_path) return cli_usage_error(CMD, "no model given (-m FILE)");
    st_request_params p = st_request_params_default();
    uint64_t v = 0;
    if (n_arg && strcmp(n_arg, "-1") != 0) {
        if (!cli_parse_u64(n_arg, &v) || v == 0 || v > INT32_MAX) return cli_usage_error(CMD, "-n: '%s' is not a count (or -1)", n_arg);
        p.max_tokens = (int64_t)v;
    }
    st_engine_options eo = st_engine_options_default();
    eo.n_parallel = 1;
    if (ctx_arg && (!cli_parse_u64(ctx_arg, &v) || v == 0 || v > INT32_MAX / 2))
        return cli_usage_error(CMD, "-c: '%s' is not a context length", ctx_arg);
    if (ctx_arg) eo.n_ctx = (int64_t)v;
    bool last_n_context = false;
    int rc = cli_sampling_resolve(CMD, &sf, &p.sampling, &last_n_context);
    if (rc != ST_EXIT_OK) return rc;
    if (last_n_context) p.sampling.repeat_last_n = (int32_t)eo.n_ctx;
    st_error err = {0};
    cli_model_setup setup;
    rc = cli_model_setup_resolve(CMD, &mf, &setup);
    if (rc != ST_EXIT_OK) return rc;
    eo.kv_type = setup.kv_type;

    const bool tty = isatty(STDIN_FILENO) == 1;
    rc = ST_EXIT_FAILURE;
    st_backend *backend = NULL;
    st_model *model = NULL;
    st_tokenizer *tok = NULL;
    st_engine *engine = NULL;
    int32_t *stop = NULL;
    int32_t n_stop = 0;
    conversation conv = {0};
    char *line = NULL;
    size_t line_cap = 0;
    double t_load = 0;
    setup.load.n_ctx = eo.n_ctx;
    if (cli_model_open(model_path, &setup, &backend, &model, &t_load, &err) != ST_OK) goto done;
    if (st_tokenizer_from_gguf(model->file, &tok, &err) != ST_OK) goto done;
    st_chat_template chat;
    bool has_chat = false;
    if (cli_chat_template(model, tok, template_name, &chat, &has_chat, &err) != ST_OK) goto done;
    if (!has_chat) {
        st_error_set(&err, ST_ERROR_INVALID, "the model carries no chat template: name one with --chat-template (%s)",
                     st_chat_family_list());
        goto done;
    }
    if (st_engine_init(model, &eo, &engine, &err) != ST_OK) goto done;
    const int64_t V = st_tokenizer_n_vocab(tok);
    if (!(stop = malloc(64 * sizeof(int32_t)))) goto done;
    for (int64_t id = 0; id < V && n_stop < 64; id++)
        if (st_tokenizer_is_eog(tok, (int32_t)id)) stop[n_stop++] = (int32_t)id;
    if (system && !conv_add(&conv, "system", system)) goto done;
    const size_t keep = conv.n;
    struct sigaction sa = {0};
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    if (tty)
        fprintf(stderr, "stride chat: %s, template %s. /clear forgets, /exit leaves; Ctrl-C stops an answer.\n",
                cli_base_name(model_path), st_chat_family_name(chat.family));
    for (;;) {
        if (tty) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        interrupted = 0;
        errno = 0;
        ssize_t got = getline(&line, &line_cap, stdin);
        if (got < 0) {
            if (errno == EINTR && interrupted) { /* Ctrl-C at the prompt leaves */
                if (tty) printf("\n");
                break;
            }
            break;
        }
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = '\0';
        if (strcmp(line, "/exit") == 0 || strcmp(line, "/quit") == 0) break;
        if (strcmp(line, "/clear") == 0) {
            conv_clear(&conv, keep);
            if (tty) fprintf(stderr, "(conversation cleared)\n");
            continue;
        }
        if (got == 0) continue;
        if (!conv_add(&conv, "user", line)) goto done;
        char *answer = NULL;
        if (answer_turn(engine, tok, &chat, &conv, p, stop, n_stop, stats, &answer, &err) != ST_OK) {
            free(answer);
            if (err.status != ST_ERROR_INVALID) goto done;
            fprintf(stderr, "stride chat: %s\n", err.message); /* e.g. the conversation outgrew the context */
            conv_clear(&conv, conv.n - 1);
            continue;
        }
        const bool ok = conv_add(&conv, "assistant", answer);
        free(answer);
        if (!ok) goto done;
        if (!tty) {
            printf("\n");
            fflush(stdout);
        }
        p.sampling.seed++; /* each answer its own draws, reproducible from the first seed */
    }
    rc = ST_EXIT_OK;
done:
    if (rc != ST_EXIT_OK) {
        if (err.message[0] == '\0') st_error_set(&err, ST_ERROR_NOMEM, "out of memory");
        cli_fail(CMD, &err);
    }
    free(line);
    conv_clear(&conv, 0);
    free(conv.msgs);
    free(stop);
    st_engine_free(engine);
    st_tokenizer_free(tok);
    st_model_free(model);
    st_backend_free(backend);
    return rc;
}
