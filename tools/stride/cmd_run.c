/* stride run: generate from a prompt. Text in (-p/-f, through the model's tokenizer), text
 * streamed out; or token ids in (--tokens), ids out: the reference mode the tests use. */
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "stride/backend.h"
#include "stride/file_io.h"
#include "stride/model.h"
#include "stride/npy.h"
#include "stride/sample.h"
#include "stride/tokenizer.h"
#include "model_flags.h"
#include "run_parallel.h"
#include "sampling_flags.h"
#include "text_input.h"

static const char *CMD = "run";

static void usage(FILE *out) {
    fprintf(out,
            "usage: stride run -m MODEL -p PROMPT [options]\n"
            "       stride run -m MODEL --tokens ID,ID,... [options]\n\n"
            "Evaluates the prompt, then generates. A text prompt is tokenized with the model's\n"
            "vocabulary and the generated text is streamed to stdout; with --tokens the prompt is\n"
            "token ids and the generated ids are printed. Timings go to stderr.\n\n"
            "options:\n"
            "  -m, --model FILE         GGUF model\n"
            "  -p, --prompt TEXT        text prompt (BOS added as the vocabulary says; special\n"
            "                           tokens such as <start_of_turn> are recognised)\n"
            "  -f, --file FILE          read the text prompt from a file\n"
            "  --tokens LIST            prompt as comma-separated token ids\n"
            "  --decode-tokens LIST     after the prompt, feed these tokens one at a time (teacher\n"
            "                           forcing: the decode path with given tokens), then generate\n"
            "  -n, --n-predict N        tokens to generate (default 16 with --tokens, 128 with text;\n"
            "                           -1: until end of generation or a full context)\n"
            "  --ignore-eos             keep generating after an end-of-generation token (text mode;\n"
            "                           --tokens mode always generates N)\n"
            "  --echo                   print the prompt text before the generated text\n"
            "  -np, --parallel N        N copies of the prompt at once through the batched engine, seeds\n"
            "                           seed, seed + 1, ...; printed one after another (a smoke test of\n"
            "                           the batch path; without it one sequence runs on a session)\n"
            CLI_SAMPLING_FLAGS_HELP
            "                           (with --tokens the default is greedy: --temp 0; the seed\n"
            "                           used is printed at the end)\n"
            "model and backend:\n"
            "  -c, --ctx-size N         context length (default: prompt + n, at least 512, at most the\n"
            "                           model's trained context, which a longer prompt needs -c to\n"
            "                           exceed; a -c beyond it warns)\n"
            "  -ub, --ubatch-size N     tokens per forward pass (default 512)\n"
            CLI_MODEL_FLAGS_HELP
            "  --logits-out FILE.npy    write the logits of every evaluated position (prompt and\n"
            "                           generated) as float32 of shape (positions, vocab); the file\n"
            "                           appears complete or not at all\n");
}

/* Whole string, signed, within [lo, hi]. */
static bool parse_int(const char *s, long long lo, long long hi, long long *out) {
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || v < lo || v > hi) return false;
    *out = v;
    return true;
}

/* Where the generated tokens go: ids, or text through the streaming detokenizer. */
typedef struct emitter {
    const st_tokenizer *tok; /* NULL: ids */
    st_detokenizer detok;
    char *buf;               /* room for the longest piece (emitter_init) */
    size_t cap;
    int64_t n;
} emitter;

/* The text of one token can be its longest piece's bytes, each turned into U+FFFD (3
 * bytes) when invalid, plus the bytes held from the token before: the buffer holds that
 * for every piece of the vocabulary, so that no piece is ever cut. */
static st_status emitter_init(emitter *e, const st_tokenizer *tok, st_error *err) {
    memset(e, 0, sizeof(*e));
    e->tok = tok;
    if (!tok) return ST_OK;
    size_t longest = 0;
    for (int64_t id = 0; id < st_tokenizer_n_vocab(tok); id++) {
        size_t n = st_tokenizer_token_to_bytes(tok, (int32_t)id, false, NULL, 0);
        if (n > longest) longest = n;
    }
    e->cap = 3 * (longest + sizeof(e->detok.pending)) + 1;
    e->buf = malloc(e->cap);
    if (!e->buf) return st_error_set(err, ST_ERROR_NOMEM, "out of memory for a %zu-byte output buffer", e->cap);
    st_detokenizer_init(&e->detok, tok);
    return ST_OK;
}

static void emit(emitter *e, int32_t id) {
    if (!e->tok) {
        printf(e->n ? " %d" : "%d", id);
    } else {
        size_t len = st_detokenizer_push(&e->detok, id, e->buf, e->cap);
        fwrite(e->buf, 1, len, stdout);
    }
    e->n++;
    fflush(stdout);
}

static void emit_end(emitter *e) {
    if (e->tok) {
        size_t len = st_detokenizer_flush(&e->detok, e->buf, e->cap);
        fwrite(e->buf, 1, len, stdout);
    }
    printf("\n");
    fflush(stdout);
}

/* Every id of a list the user gave is a token of the model. */
static st_status check_ids(const char *flag, const int32_t *ids, int64_t n, int64_t n_vocab, st_error *err) {
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab)
            return st_error_set(err, ST_ERROR_INVALID,
                                "%s: token id %d (entry %lld) is outside the vocabulary of this model (ids 0..%lld)",
                                flag, ids[i], (long long)i + 1, (long long)n_vocab - 1);
    return ST_OK;
}

/* One decode step of token: its logits into row when the run keeps every row (*last =
 * row), else read in place from the session's buffer (*last points there, valid until
 * the next step). */
static st_status step(st_session *session, int32_t token, float *row, const float **last, st_error *err) {
    if (!row) return st_session_decode(session, token, last, err);
    st_status st = st_session_eval(session, &token, 1, false, row, err);
    if (st == ST_OK) *last = row;
    return st;
}

int st_cmd_run(int argc, char **argv) {
    const char *model_path = NULL, *tokens_arg = NULL, *n_arg = NULL, *ctx_arg = NULL,
               *ub_arg = NULL, *logits_path = NULL, *decode_arg = NULL, *prompt_arg = NULL, *file_arg = NULL,
               *parallel_arg = NULL;
    bool ignore_eos = false, echo = false;
    cli_model_flags mf = {0};
    cli_sampling_flags sf = {0};
    for (int i = 1; i < argc; i++) {
        bool missing = false;
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return ST_EXIT_OK;
        }
        if (strcmp(a, "--ignore-eos") == 0) {
            ignore_eos = true;
        } else if (strcmp(a, "--echo") == 0) {
            echo = true;
        } else if (cli_take_value(argc, argv, &i, "-m", &model_path, &missing) ||
                   cli_take_value(argc, argv, &i, "--model", &model_path, &missing) ||
                   cli_take_value(argc, argv, &i, "-p", &prompt_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--prompt", &prompt_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "-f", &file_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--file", &file_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--tokens", &tokens_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--decode-tokens", &decode_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "-n", &n_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--n-predict", &n_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "-np", &parallel_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--parallel", &parallel_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "-c", &ctx_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--ctx-size", &ctx_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "-ub", &ub_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--ubatch-size", &ub_arg, &missing) ||
                   cli_take_sampling_flag(argc, argv, &i, &sf, &missing) ||
                   cli_take_model_flag(argc, argv, &i, &mf, &missing) ||
                   cli_take_value(argc, argv, &i, "--logits-out", &logits_path, &missing)) {
            if (missing) return cli_usage_error(CMD, "%s needs a value", a);
        } else {
            return cli_usage_error(CMD, "unknown argument '%s'", a);
        }
    }
    if (!model_path) return cli_usage_error(CMD, "no model given (-m FILE)");
    int n_sources = (prompt_arg != NULL) + (file_arg != NULL) + (tokens_arg != NULL);
    if (n_sources == 0) return cli_usage_error(CMD, "no prompt given (-p TEXT, -f FILE or --tokens ID,ID,...)");
    if (n_sources > 1) return cli_usage_error(CMD, "give one prompt: -p, -f or --tokens");
    const bool text_mode = tokens_arg == NULL;
    if (echo && !text_mode) return cli_usage_error(CMD, "--echo needs a text prompt (-p or -f)");

    long long n_predict_ll = text_mode ? 128 : 16;
    uint64_t n_ctx = 0, n_ubatch = 512;
    if (n_arg && !parse_int(n_arg, -1, INT32_MAX, &n_predict_ll))
        return cli_usage_error(CMD, "-n: '%s' is not a count (or -1)", n_arg);
    if (ctx_arg && (!cli_parse_u64(ctx_arg, &n_ctx) || n_ctx == 0 || n_ctx > INT32_MAX))
        return cli_usage_error(CMD, "-c: '%s' is not a context length", ctx_arg);
    if (ub_arg && (!cli_parse_u64(ub_arg, &n_ubatch) || n_ubatch == 0 || n_ubatch > 65536))
        return cli_usage_error(CMD, "-ub: '%s' is not a micro-batch size (1..65536)", ub_arg);
    uint64_t n_parallel = 0;
    if (parallel_arg && (!cli_parse_u64(parallel_arg, &n_parallel) || n_parallel == 0 || n_parallel > 65536))
        return cli_usage_error(CMD, "--parallel: '%s' is not a number of sequences (1..65536)", parallel_arg);
    if (parallel_arg && (logits_path || decode_arg))
        return cli_usage_error(CMD, "--parallel runs the engine: --logits-out and --decode-tokens need one sequence");
    if (parallel_arg && n_predict_ll == 0) return cli_usage_error(CMD, "--parallel with -n 0 generates nothing");

    /* Sampling (sampling_flags.c); the id mode is a reference, greedy unless asked. */
    st_sampler_params sp = st_sampler_params_default();
    if (!text_mode) sp.temp = 0.0f;
    bool last_n_context = false;
    int usage_rc = cli_sampling_resolve(CMD, &sf, &sp, &last_n_context);
    if (usage_rc != ST_EXIT_OK) return usage_rc;
    st_error err = {0};

    cli_model_setup setup;
    usage_rc = cli_model_setup_resolve(CMD, &mf, &setup);
    if (usage_rc != ST_EXIT_OK) return usage_rc;
    int32_t *prompt = NULL, *forced = NULL;
    int64_t n_prompt = 0, n_forced = 0;
    if (tokens_arg && cli_parse_token_ids(tokens_arg, &prompt, &n_prompt, &err) != ST_OK)
        return cli_usage_error(CMD, "--tokens: %s", err.message);
    if (decode_arg && cli_parse_token_ids(decode_arg, &forced, &n_forced, &err) != ST_OK) {
        free(prompt);
        return cli_usage_error(CMD, "--decode-tokens: %s", err.message);
    }

    int rc = ST_EXIT_FAILURE;
    char *prompt_text = NULL;
    size_t prompt_len = 0;
    st_gguf_file *gf = NULL;
    st_backend *backend = NULL;
    st_model *model = NULL;
    st_tokenizer *tok = NULL;
    st_session *session = NULL;
    st_sampler *sampler = NULL;
    float *logits = NULL;
    emitter out = {0};
    /* where the logits go is checked before the work that makes them */
    if (logits_path && st_atomic_file_check(logits_path, &err) != ST_OK) goto done;
    if (file_arg && cli_read_file(file_arg, "prompt file", &prompt_text, &prompt_len, &err) != ST_OK) goto done;
    if (prompt_arg) {
        prompt_len = strlen(prompt_arg);
        prompt_text = malloc(prompt_len + 1);
        if (!prompt_text) {
            st_error_set(&err, ST_ERROR_NOMEM, "out of memory for a prompt of %zu bytes", prompt_len);
            goto done;
        }
        memcpy(prompt_text, prompt_arg, prompt_len + 1);
    }
    /* The model's metadata is checked and the text prompt tokenized before the weights
     * load: a model or vocabulary stride cannot run fails fast, and the prompt's length
     * sizes the default context, which the model needs at load time (phi3 picks its rope
     * factors by it). */
    st_hparams hp;
    if (st_gguf_open(model_path, &gf, &err) != ST_OK) goto done;
    if (st_model_validate(gf, &hp, &err) != ST_OK) {
        st_error_wrap(&err, "loading %s", model_path);
        goto done;
    }
    if (text_mode) {
        if (st_tokenizer_from_gguf(gf, &tok, &err) != ST_OK) goto done;
        if (st_tokenizer_encode(tok, prompt_text, prompt_len, true, true, &prompt, &n_prompt, &err) != ST_OK) {
            st_error_wrap(&err, "tokenizing the prompt");
            goto done;
        }
        if (n_prompt == 0) {
            st_error_set(&err, ST_ERROR_INVALID, "the prompt is empty (no tokens) and the vocabulary adds no BOS");
            goto done;
        }
    }
    st_gguf_close(gf);
    gf = NULL;
    if (check_ids("--tokens", prompt, tokens_arg ? n_prompt : 0, hp.n_vocab, &err) != ST_OK ||
        check_ids("--decode-tokens", forced, n_forced, hp.n_vocab, &err) != ST_OK)
        goto done;
    const int64_t n_predict_req = n_predict_ll < 0 ? -1 : (int64_t)n_predict_ll;
    const int64_t n_fed = n_prompt + n_forced;
    const char *arch = st_arch_name(hp.arch);
    if (n_ctx == 0) {
        /* prompt + generation, at least 512, but within the trained context: a prompt
         * longer than that runs only when -c asks for it */
        if (n_fed > hp.n_ctx_train) {
            st_error_set(&err, ST_ERROR_INVALID,
                         "the prompt is %lld tokens, longer than the %lld-token context the model was trained on "
                         "(%s.context_length): shorten it, or give -c to run it past that context anyway",
                         (long long)n_fed, (long long)hp.n_ctx_train, arch);
            goto done;
        }
        int64_t want = n_fed + (n_predict_req > 0 ? n_predict_req : 0), cap = hp.n_ctx_train > 512 ? hp.n_ctx_train : 512;
        n_ctx = (uint64_t)(want < 512 ? 512 : want > cap ? cap : want);
    } else if ((int64_t)n_ctx > hp.n_ctx_train) {
        fprintf(stderr,
                "stride %s: warning: the context of %llu tokens (-c) exceeds the %lld the model was trained on "
                "(%s.context_length): output past them may degrade\n",
                CMD, (unsigned long long)n_ctx, (long long)hp.n_ctx_train, arch);
    }
    setup.load.n_ctx = (int64_t)n_ctx;
    if (n_fed > (int64_t)n_ctx) {
        st_error_set(&err, ST_ERROR_INVALID, "prompt is %lld tokens, context is %llu: raise -c", (long long)n_fed,
                     (unsigned long long)n_ctx);
        goto done;
    }

    double t_load = 0.0;
    if (cli_model_open(model_path, &setup, &backend, &model, &t_load, &err) != ST_OK) goto done;
    if (last_n_context) sp.repeat_last_n = (int32_t)n_ctx;
    if (parallel_arg) {
        const run_parallel_args pa = {
            .model = model, .tok = tok, .prompt = prompt, .n_prompt = n_prompt,
            .prompt_text = echo ? prompt_text : NULL, .prompt_len = prompt_len, .n_parallel = (int32_t)n_parallel,
            .n_predict = n_predict_req, .ignore_eos = ignore_eos, .sampling = sp, .n_ctx = (int64_t)n_ctx,
            .n_ubatch = (int64_t)n_ubatch, .kv_type = setup.kv_type, .t_load = t_load,
            .device_name = backend->device.name, .padded = model->plan.pad_enabled};
        if (run_parallel(&pa, &err) == ST_OK) rc = ST_EXIT_OK;
        goto done;
    }
    /* Generated tokens that still fit: the last one needs no slot unless its logits are kept. */
    const bool keep_all = logits_path != NULL;
    int64_t n_room = (int64_t)n_ctx - n_fed + (keep_all ? 0 : 1);
    int64_t n_predict = n_predict_req < 0 || n_predict_req > n_room ? n_room : n_predict_req;

    st_session_options so = st_session_options_default();
    so.n_ctx = (int64_t)n_ctx;
    so.n_ubatch = (int64_t)n_ubatch;
    so.kv_type = setup.kv_type;
    if (st_session_init(model, &so, &session, &err) != ST_OK) goto done;
    const int64_t V = model->hp.n_vocab;
    if (st_sampler_init(&sp, V, &sampler, &err) != ST_OK) goto done;
    const int64_t rows = keep_all ? n_fed + n_predict : 1; /* <= n_ctx + 1 */
    if ((uint64_t)rows > SIZE_MAX / sizeof(float) / (uint64_t)V ||
        !(logits = malloc((size_t)rows * (size_t)V * sizeof(float)))) {
        st_error_set(&err, ST_ERROR_NOMEM, "out of memory for %lld x %lld logits (%.2f GiB)", (long long)rows,
                     (long long)V, (double)rows * (double)V * 4.0 / (1 << 30));
        goto done;
    }
    if (echo) {
        fwrite(prompt_text, 1, prompt_len, stdout);
        fflush(stdout);
    }

    double t1 = st_clock_seconds();
    if (st_session_eval(session, prompt, n_prompt, keep_all, logits, &err) != ST_OK) goto done;
    double t_prompt = st_clock_seconds() - t1;
    const float *last = logits + (keep_all ? (n_fed - 1) * V : 0);
    for (int64_t i = 0; i < n_forced; i++)
        if (step(session, forced[i], keep_all ? logits + (n_prompt + i) * V : NULL, &last, &err) != ST_OK) goto done;
    for (int64_t i = 0; i < n_prompt; i++) st_sampler_accept(sampler, prompt[i]);
    for (int64_t i = 0; i < n_forced; i++) st_sampler_accept(sampler, forced[i]);

    if (emitter_init(&out, tok, &err) != ST_OK) goto done;
    int64_t n_rows = n_fed; /* logits rows written */
    const char *stop = NULL;
    int64_t n_decoded = 0; /* one-token forward passes: what the generation rate counts */
    double t2 = st_clock_seconds();
    for (int64_t i = 0; i < n_predict; i++) {
        int32_t next;
        if (st_sampler_sample(sampler, last, &next, &err) != ST_OK) goto done;
        st_sampler_accept(sampler, next);
        if (tok && !ignore_eos && st_tokenizer_is_eog(tok, next)) {
            stop = "end of generation";
            break;
        }
        emit(&out, next);
        if (i + 1 == n_predict && !keep_all) break;
        if (step(session, next, keep_all ? logits + n_rows * V : NULL, &last, &err) != ST_OK) goto done;
        n_decoded++;
        n_rows++;
    }
    emit_end(&out);
    double t_gen = st_clock_seconds() - t2;
    if (!stop && (n_predict_req < 0 || out.n < n_predict_req)) stop = "context full: raise -c";
    if (keep_all) {
        /* a Ctrl-C meanwhile takes effect once the file is complete or removed */
        sigset_t saved;
        cli_hold_interrupts(&saved);
        st_status ws = st_npy_write_f32(logits_path, logits, n_rows, V, &err);
        cli_release_interrupts(&saved);
        if (ws != ST_OK) goto done;
    }
    char label[64];
    cli_backend_label(backend, label, sizeof(label));
    fprintf(stderr, "stride run: load       %8.2f s  (%s, %s, %s)\n", t_load, backend->device.name, label,
            model->plan.pad_enabled ? "padded layout" : "packed layout");
    fprintf(stderr, "stride run: prompt      %8.2f s  %6lld tokens  %9.2f tok/s\n", t_prompt, (long long)n_prompt,
            t_prompt > 0 ? (double)n_prompt / t_prompt : 0.0);
    /* The rate counts decode steps: n tokens take n - 1 forward passes (the first comes
     * from the prompt's logits), as llama-bench's tg counts its evaluations. */
    fprintf(stderr, "stride run: generation  %8.2f s  %6lld tokens  %9.2f tok/s%s%s%s\n", t_gen, (long long)out.n,
            t_gen > 0 && n_decoded > 0 ? (double)n_decoded / t_gen : 0.0, stop ? " (stopped: " : "",
            stop ? stop : "", stop ? ")" : "");
    if (sp.temp > 0.0f)
        fprintf(stderr,
                "stride run: sampling    temp %g, top-k %d, top-p %g, min-p %g, penalties %g / %g / %g over %d, seed %" PRIu64
                "\n",
                (double)sp.temp, sp.top_k, (double)sp.top_p, (double)sp.min_p, (double)sp.repeat_penalty,
                (double)sp.frequency_penalty, (double)sp.presence_penalty, sp.repeat_last_n, sp.seed);
    else
        fprintf(stderr, "stride run: sampling    greedy%s\n",
                sp.repeat_penalty != 1.0f || sp.frequency_penalty != 0.0f || sp.presence_penalty != 0.0f
                    ? " with penalties"
                    : "");
    rc = ST_EXIT_OK;
done:
    if (rc != ST_EXIT_OK) cli_fail(CMD, &err);
    free(out.buf);
    st_gguf_close(gf);
    free(logits);
    free(prompt);
    free(forced);
    free(prompt_text);
    st_sampler_free(sampler);
    st_session_free(session);
    st_tokenizer_free(tok);
    st_model_free(model);
    st_backend_free(backend);
    return rc;
}
