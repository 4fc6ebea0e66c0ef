/* stride run: generate from a prompt. Text in (-p/-f, through the model's tokenizer), text
 * streamed out; or token ids in (--tokens), ids out: the reference mode the tests use. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "stride/backend.h"
#include "stride/model.h"
#include "stride/npy.h"
#include "stride/sample.h"
#include "stride/tokenizer.h"
#include "model_flags.h"
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
            "sampling (llama.cpp's chain: penalty, top-k, top-p, min-p, temperature):\n"
            "  --temp T                 temperature >= 0; 0 = greedy (default 0.8; 0 with --tokens)\n"
            "  --top-k N                keep the N most likely tokens; 0 = off (default 40)\n"
            "  --top-p P                keep the smallest set with mass >= P, in (0,1]; 1 = off (default 0.95)\n"
            "  --min-p P                keep tokens with p >= P * p_max, in [0,1); 0 = off (default 0.05)\n"
            "  --repeat-penalty X       > 0; divide positive / multiply negative logits of recent\n"
            "                           tokens; 1 = off (default 1)\n"
            "  --repeat-last-n N        tokens the penalty looks back over; 0 = off, -1 = context (default 64)\n"
            "  --seed N                 random seed (default: from the clock, printed at the end);\n"
            "                           PCG32, so a seed reproduces a run on any platform\n"
            "model and backend:\n"
            "  -c, --ctx-size N         context length (default: prompt + n, at least 512)\n"
            "  -ub, --ubatch-size N     tokens per forward pass (default 512)\n"
            CLI_MODEL_FLAGS_HELP
            "  --logits-out FILE.npy    write the logits of every evaluated position (prompt and\n"
            "                           generated) as float32 of shape (positions, vocab)\n");
}

/* "1,2,3" -> ids; false on anything else. */
static bool parse_ids(const char *s, int32_t **out, int64_t *n) {
    int64_t cap = 16, count = 0;
    int32_t *ids = malloc((size_t)cap * sizeof(int32_t));
    if (!ids) return false;
    const char *p = s;
    while (*p) {
        char *end = NULL;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX || (*end != ',' && *end != '\0')) {
            free(ids);
            return false;
        }
        if (count == cap) {
            cap *= 2;
            int32_t *grown = realloc(ids, (size_t)cap * sizeof(int32_t));
            if (!grown) {
                free(ids);
                return false;
            }
            ids = grown;
        }
        ids[count++] = (int32_t)v;
        p = *end == ',' ? end + 1 : end;
    }
    *out = ids;
    *n = count;
    return count > 0;
}

/* Whole string, finite. */
static bool parse_float(const char *s, float *out) {
    char *end = NULL;
    float v = strtof(s, &end);
    if (end == s || *end != '\0' || !isfinite(v)) return false;
    *out = v;
    return true;
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
    int64_t n;
} emitter;

static void emit(emitter *e, int32_t id) {
    if (!e->tok) {
        printf(e->n ? " %d" : "%d", id);
    } else {
        char buf[1024];
        size_t len = st_detokenizer_push(&e->detok, id, buf, sizeof(buf));
        fwrite(buf, 1, len, stdout);
    }
    e->n++;
    fflush(stdout);
}

static void emit_end(emitter *e) {
    if (e->tok) {
        char buf[64];
        size_t len = st_detokenizer_flush(&e->detok, buf, sizeof(buf));
        fwrite(buf, 1, len, stdout);
    }
    printf("\n");
    fflush(stdout);
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
    const char *model_path = NULL, *tokens_arg = NULL, *n_arg = NULL, *temp_arg = NULL, *ctx_arg = NULL,
               *ub_arg = NULL, *logits_path = NULL, *decode_arg = NULL, *prompt_arg = NULL, *file_arg = NULL, *top_k_arg = NULL,
               *top_p_arg = NULL, *min_p_arg = NULL, *penalty_arg = NULL, *last_n_arg = NULL, *seed_arg = NULL;
    bool ignore_eos = false, echo = false;
    cli_model_flags mf = {0};
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
                   cli_take_value(argc, argv, &i, "--temp", &temp_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--top-k", &top_k_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--top-p", &top_p_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--min-p", &min_p_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--repeat-penalty", &penalty_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--repeat-last-n", &last_n_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--seed", &seed_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "-c", &ctx_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--ctx-size", &ctx_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "-ub", &ub_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--ubatch-size", &ub_arg, &missing) ||
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

    /* Sampling: parsed here, ranges checked by the library (one set of rules and messages). */
    st_sampler_params sp = st_sampler_params_default();
    if (!text_mode) sp.temp = 0.0f; /* the id mode is a reference: greedy unless asked */
    long long top_k = sp.top_k, last_n = sp.repeat_last_n;
    if (temp_arg && !parse_float(temp_arg, &sp.temp)) return cli_usage_error(CMD, "--temp: '%s' is not a number", temp_arg);
    if (top_p_arg && !parse_float(top_p_arg, &sp.top_p))
        return cli_usage_error(CMD, "--top-p: '%s' is not a number", top_p_arg);
    if (min_p_arg && !parse_float(min_p_arg, &sp.min_p))
        return cli_usage_error(CMD, "--min-p: '%s' is not a number", min_p_arg);
    if (penalty_arg && !parse_float(penalty_arg, &sp.repeat_penalty))
        return cli_usage_error(CMD, "--repeat-penalty: '%s' is not a number", penalty_arg);
    if (top_k_arg && !parse_int(top_k_arg, INT32_MIN, INT32_MAX, &top_k))
        return cli_usage_error(CMD, "--top-k: '%s' is not an integer", top_k_arg);
    if (last_n_arg && !parse_int(last_n_arg, INT32_MIN, INT32_MAX, &last_n))
        return cli_usage_error(CMD, "--repeat-last-n: '%s' is not an integer", last_n_arg);
    if (last_n < -1) return cli_usage_error(CMD, "--repeat-last-n %lld is invalid: it must be >= -1", last_n);
    sp.top_k = (int32_t)top_k;
    sp.repeat_last_n = last_n == -1 ? 0 : (int32_t)last_n; /* -1 is resolved once the context is known */
    bool seed_given = seed_arg != NULL;
    if (seed_arg && !cli_parse_u64(seed_arg, &sp.seed))
        return cli_usage_error(CMD, "--seed: '%s' is not a non-negative integer", seed_arg);
    if (!seed_given) sp.seed = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid();
    st_error err = {0};
    if (st_sampler_params_check(&sp, &err) != ST_OK) return cli_usage_error(CMD, "%s", err.message);

    cli_model_setup setup;
    int usage_rc = cli_model_setup_resolve(CMD, &mf, &setup);
    if (usage_rc != ST_EXIT_OK) return usage_rc;
    int32_t *prompt = NULL, *forced = NULL;
    int64_t n_prompt = 0, n_forced = 0;
    if (tokens_arg && !parse_ids(tokens_arg, &prompt, &n_prompt))
        return cli_usage_error(CMD, "--tokens: '%s' is not a comma-separated list of token ids", tokens_arg);
    if (decode_arg && !parse_ids(decode_arg, &forced, &n_forced)) {
        free(prompt);
        return cli_usage_error(CMD, "--decode-tokens: '%s' is not a comma-separated list of token ids", decode_arg);
    }


    int rc = ST_EXIT_FAILURE;
    char *prompt_text = NULL;
    size_t prompt_len = 0;
    st_backend *backend = NULL;
    st_model *model = NULL;
    st_tokenizer *tok = NULL;
    st_session *session = NULL;
    st_sampler *sampler = NULL;
    float *logits = NULL;
    if (file_arg && cli_read_file(file_arg, &prompt_text, &prompt_len, &err) != ST_OK) goto done;
    if (prompt_arg) {
        prompt_len = strlen(prompt_arg);
        prompt_text = malloc(prompt_len + 1);
        if (!prompt_text) {
            st_error_set(&err, ST_ERROR_NOMEM, "out of memory");
            goto done;
        }
        memcpy(prompt_text, prompt_arg, prompt_len + 1);
    }
    /* The text prompt is tokenized before the weights load: a vocabulary stride cannot
     * read fails fast, and the prompt's length sizes the default context, which the model
     * needs at load time (phi3 picks its rope factors by it). */
    if (text_mode) {
        st_gguf_file *gf = NULL;
        st_status st = st_gguf_open(model_path, &gf, &err);
        if (st == ST_OK) st = st_tokenizer_from_gguf(gf, &tok, &err);
        st_gguf_close(gf);
        if (st != ST_OK || st_tokenizer_encode(tok, prompt_text, prompt_len, true, true, &prompt, &n_prompt, &err) != ST_OK) {
            if (st == ST_OK) st_error_wrap(&err, "tokenizing the prompt");
            goto done;
        }
        if (n_prompt == 0) {
            st_error_set(&err, ST_ERROR_INVALID, "the prompt is empty (no tokens) and the vocabulary adds no BOS");
            goto done;
        }
    }
    const int64_t n_predict_req = n_predict_ll < 0 ? -1 : (int64_t)n_predict_ll;
    if (n_ctx == 0) {
        int64_t want = n_prompt + n_forced + (n_predict_req > 0 ? n_predict_req : 0);
        n_ctx = (uint64_t)(want > 512 ? want : 512);
    }
    setup.load.n_ctx = (int64_t)n_ctx;

    double t_load = 0.0;
    if (cli_model_open(model_path, &setup, &backend, &model, &t_load, &err) != ST_OK) goto done;
    const int64_t n_fed = n_prompt + n_forced;
    if (n_fed > (int64_t)n_ctx) {
        st_error_set(&err, ST_ERROR_INVALID, "prompt is %lld tokens, context is %llu: raise -c", (long long)n_fed,
                     (unsigned long long)n_ctx);
        goto done;
    }
    /* Generated tokens that still fit: the last one needs no slot unless its logits are kept. */
    const bool keep_all = logits_path != NULL;
    int64_t n_room = (int64_t)n_ctx - n_fed + (keep_all ? 0 : 1);
    int64_t n_predict = n_predict_req < 0 || n_predict_req > n_room ? n_room : n_predict_req;
    if (last_n == -1) sp.repeat_last_n = (int32_t)n_ctx;

    st_session_options so = st_session_options_default();
    so.n_ctx = (int64_t)n_ctx;
    so.n_ubatch = (int64_t)n_ubatch;
    so.kv_type = setup.kv_type;
    if (st_session_init(model, &so, &session, &err) != ST_OK) goto done;
    const int64_t V = model->hp.n_vocab;
    if (st_sampler_init(&sp, V, &sampler, &err) != ST_OK) goto done;
    const int64_t rows = keep_all ? n_fed + n_predict : 1;
    logits = malloc((size_t)rows * (size_t)V * sizeof(float));
    if (!logits) {
        st_error_set(&err, ST_ERROR_NOMEM, "out of memory for %lld x %lld logits", (long long)rows, (long long)V);
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

    emitter out = {.tok = tok};
    if (tok) st_detokenizer_init(&out.detok, tok);
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
    if (keep_all && st_npy_write_f32(logits_path, logits, n_rows, V, &err) != ST_OK) goto done;
    fprintf(stderr, "stride run: load       %8.2f s  (%s, %s)\n", t_load, backend->device.name,
            model->plan.pad_enabled ? "padded layout" : "packed layout");
    fprintf(stderr, "stride run: prompt      %8.2f s  %6lld tokens  %9.2f tok/s\n", t_prompt, (long long)n_prompt,
            t_prompt > 0 ? (double)n_prompt / t_prompt : 0.0);
    /* The rate counts decode steps: n tokens take n - 1 forward passes (the first comes
     * from the prompt's logits), as llama-bench's tg counts its evaluations. */
    fprintf(stderr, "stride run: generation  %8.2f s  %6lld tokens  %9.2f tok/s%s%s%s\n", t_gen, (long long)out.n,
            t_gen > 0 && n_decoded > 0 ? (double)n_decoded / t_gen : 0.0, stop ? " (stopped: " : "",
            stop ? stop : "", stop ? ")" : "");
    if (sp.temp > 0.0f)
        fprintf(stderr, "stride run: sampling    temp %g, top-k %d, top-p %g, min-p %g, repeat penalty %g over %d, seed %" PRIu64 "\n",
                (double)sp.temp, sp.top_k, (double)sp.top_p, (double)sp.min_p, (double)sp.repeat_penalty,
                sp.repeat_last_n, sp.seed);
    else
        fprintf(stderr, "stride run: sampling    greedy%s\n", sp.repeat_penalty != 1.0f ? " with repeat penalty" : "");
    rc = ST_EXIT_OK;
done:
    if (rc != ST_EXIT_OK) cli_fail(CMD, &err);
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
