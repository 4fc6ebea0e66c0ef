/* stride run: evaluate a prompt and generate greedily, printing token ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "stride/backend.h"
#include "stride/cpu_ops.h"
#include "stride/model.h"
#include "stride/npy.h"

static const char *CMD = "run";

static void usage(FILE *out) {
    fprintf(out,
            "usage: stride run -m MODEL --tokens ID,ID,... [options]\n\n"
            "Evaluates the prompt tokens, then generates greedily and prints the generated ids.\n\n"
            "options:\n"
            "  -m, --model FILE         GGUF model\n"
            "  --tokens LIST            prompt as comma-separated token ids\n"
            "  --decode-tokens LIST     after the prompt, feed these tokens one at a time (teacher\n"
            "                           forcing: the decode path with given tokens), then generate\n"
            "  -n, --n-predict N        tokens to generate (default 16)\n"
            "  --temp T                 sampling temperature; only 0 (greedy) until the sampler lands\n"
            "  -c, --ctx-size N         context length (default: prompt + n, at least 512)\n"
            "  -ub, --ubatch-size N     tokens per forward pass (default 512)\n"
            "  --kv-type f16|f32        KV cache type (default f16)\n"
            "  --backend cpu|cuda       (default: cuda when a GPU is present, else cpu)\n"
            "  -t, --threads N          CPU threads (default: all cores)\n"
            "  --pad-weights on|off|auto  weight layout policy (default auto)\n"
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

static int32_t argmax(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

int st_cmd_run(int argc, char **argv) {
    const char *model_path = NULL, *tokens_arg = NULL, *n_arg = NULL, *temp_arg = NULL, *ctx_arg = NULL,
               *ub_arg = NULL, *kv_arg = NULL, *backend_arg = NULL, *threads_arg = NULL, *pad_arg = NULL,
               *logits_path = NULL, *decode_arg = NULL;
    for (int i = 1; i < argc; i++) {
        bool missing = false;
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return ST_EXIT_OK;
        }
        if (cli_take_value(argc, argv, &i, "-m", &model_path, &missing) ||
            cli_take_value(argc, argv, &i, "--model", &model_path, &missing) ||
            cli_take_value(argc, argv, &i, "--tokens", &tokens_arg, &missing) ||
            cli_take_value(argc, argv, &i, "--decode-tokens", &decode_arg, &missing) ||
            cli_take_value(argc, argv, &i, "-n", &n_arg, &missing) ||
            cli_take_value(argc, argv, &i, "--n-predict", &n_arg, &missing) ||
            cli_take_value(argc, argv, &i, "--temp", &temp_arg, &missing) ||
            cli_take_value(argc, argv, &i, "-c", &ctx_arg, &missing) ||
            cli_take_value(argc, argv, &i, "--ctx-size", &ctx_arg, &missing) ||
            cli_take_value(argc, argv, &i, "-ub", &ub_arg, &missing) ||
            cli_take_value(argc, argv, &i, "--ubatch-size", &ub_arg, &missing) ||
            cli_take_value(argc, argv, &i, "--kv-type", &kv_arg, &missing) ||
            cli_take_value(argc, argv, &i, "--backend", &backend_arg, &missing) ||
            cli_take_value(argc, argv, &i, "-t", &threads_arg, &missing) ||
            cli_take_value(argc, argv, &i, "--threads", &threads_arg, &missing) ||
            cli_take_value(argc, argv, &i, "--pad-weights", &pad_arg, &missing) ||
            cli_take_value(argc, argv, &i, "--logits-out", &logits_path, &missing)) {
            if (missing) return cli_usage_error(CMD, "%s needs a value", a);
        } else if (strcmp(a, "-p") == 0 || strcmp(a, "--prompt") == 0) {
            return cli_usage_error(CMD, "text prompts need the tokenizer, which is not built yet; pass --tokens");
        } else {
            return cli_usage_error(CMD, "unknown argument '%s'", a);
        }
    }
    if (!model_path) return cli_usage_error(CMD, "no model given (-m FILE)");
    if (!tokens_arg) return cli_usage_error(CMD, "no prompt given (--tokens ID,ID,...)");
    uint64_t n_predict = 16, n_ctx = 0, n_ubatch = 512, threads = 0;
    if (n_arg && !cli_parse_u64(n_arg, &n_predict)) return cli_usage_error(CMD, "-n: '%s' is not a count", n_arg);
    if (ctx_arg && (!cli_parse_u64(ctx_arg, &n_ctx) || n_ctx == 0 || n_ctx > INT32_MAX))
        return cli_usage_error(CMD, "-c: '%s' is not a context length", ctx_arg);
    if (ub_arg && (!cli_parse_u64(ub_arg, &n_ubatch) || n_ubatch == 0 || n_ubatch > 65536))
        return cli_usage_error(CMD, "-ub: '%s' is not a micro-batch size (1..65536)", ub_arg);
    if (threads_arg && (!cli_parse_u64(threads_arg, &threads) || threads == 0 || threads > 4096))
        return cli_usage_error(CMD, "-t: '%s' is not a thread count", threads_arg);
    if (temp_arg && strtod(temp_arg, NULL) != 0.0)
        return cli_usage_error(CMD, "--temp %s: only greedy decoding (--temp 0) exists so far", temp_arg);
    st_type kv_type = ST_TYPE_F16;
    if (kv_arg && (!st_type_from_name(kv_arg, &kv_type) || (kv_type != ST_TYPE_F16 && kv_type != ST_TYPE_F32)))
        return cli_usage_error(CMD, "--kv-type: '%s' is not f16 or f32", kv_arg);
    int32_t *prompt = NULL, *forced = NULL;
    int64_t n_prompt = 0, n_forced = 0;
    if (!parse_ids(tokens_arg, &prompt, &n_prompt))
        return cli_usage_error(CMD, "--tokens: '%s' is not a comma-separated list of token ids", tokens_arg);
    if (decode_arg && !parse_ids(decode_arg, &forced, &n_forced)) {
        free(prompt);
        return cli_usage_error(CMD, "--decode-tokens: '%s' is not a comma-separated list of token ids", decode_arg);
    }

    st_error err = {0};
    st_model_load_options lo = {0};
    st_backend_kind kind = st_backend_default();
    if ((backend_arg && st_backend_parse(backend_arg, &kind, &err) != ST_OK) ||
        st_layout_policy_resolve(&lo.policy, pad_arg, NULL, NULL, &err) != ST_OK) {
        free(prompt);
        free(forced);
        return cli_usage_error(CMD, "%s", err.message);
    }
    if (threads) st_cpu_set_threads((int)threads);
    int64_t total = n_prompt + n_forced + (int64_t)n_predict;
    if (n_ctx == 0) n_ctx = (uint64_t)(total > 512 ? total : 512);
    lo.n_ctx = (int64_t)n_ctx;

    int rc = ST_EXIT_FAILURE;
    st_backend *backend = NULL;
    st_model *model = NULL;
    st_session *session = NULL;
    float *logits = NULL;
    double t0 = cli_now_seconds();
    cli_progress progress;
    cli_progress_begin(&progress, "loading");
    lo.progress = cli_progress_update;
    lo.progress_ctx = &progress;
    if (st_backend_init(kind, 0, &backend, &err) != ST_OK || st_model_load(model_path, backend, &lo, &model, &err) != ST_OK)
        goto done;
    cli_progress_end(&progress);
    double t_load = cli_now_seconds() - t0;
    st_session_options so = st_session_options_default();
    so.n_ctx = (int64_t)n_ctx;
    so.n_ubatch = (int64_t)n_ubatch;
    so.kv_type = kv_type;
    if (st_session_init(model, &so, &session, &err) != ST_OK) goto done;
    const int64_t V = model->hp.n_vocab;
    bool keep_all = logits_path != NULL;
    logits = malloc((size_t)(keep_all ? total : 1) * (size_t)V * sizeof(float));
    if (!logits) {
        st_error_set(&err, ST_ERROR_NOMEM, "out of memory for %lld x %lld logits", (long long)total, (long long)V);
        goto done;
    }
    double t1 = cli_now_seconds();
    if (st_session_eval(session, prompt, n_prompt, keep_all, logits, &err) != ST_OK) goto done;
    double t_prompt = cli_now_seconds() - t1;
    for (int64_t i = 0; i < n_forced; i++) {
        float *row = logits + (keep_all ? (n_prompt + i) * V : 0);
        if (st_session_eval(session, &forced[i], 1, false, row, &err) != ST_OK) goto done;
    }
    const int64_t n_fed = n_prompt + n_forced;
    const float *last = logits + (keep_all ? (n_fed - 1) * V : 0);
    int32_t next = argmax(last, V);
    double t2 = cli_now_seconds();
    for (uint64_t i = 0; i < n_predict; i++) {
        printf(i ? " %d" : "%d", next);
        fflush(stdout);
        if (i + 1 == n_predict && !keep_all) break;
        float *row = logits + (keep_all ? (n_fed + (int64_t)i) * V : 0);
        if (st_session_eval(session, &next, 1, false, row, &err) != ST_OK) goto done;
        next = argmax(row, V);
    }
    printf("\n");
    double t_gen = cli_now_seconds() - t2;
    if (keep_all && st_npy_write_f32(logits_path, logits, total, V, &err) != ST_OK) goto done;
    fprintf(stderr, "load %.2f s | prompt %lld tokens, %.1f tok/s | generation %llu tokens, %.1f tok/s | %s, %s\n",
            t_load, (long long)n_prompt, (double)n_prompt / t_prompt, (unsigned long long)n_predict,
            n_predict ? (double)n_predict / t_gen : 0.0, backend->device.name,
            model->plan.pad_enabled ? "padded layout" : "packed layout");
    rc = ST_EXIT_OK;
done:
    if (rc != ST_EXIT_OK) cli_fail(CMD, &err);
    free(logits);
    free(prompt);
    free(forced);
    st_session_free(session);
    st_model_free(model);
    st_backend_free(backend);
    return rc;
}
