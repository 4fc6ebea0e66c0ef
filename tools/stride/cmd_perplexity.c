/* stride perplexity: llama.cpp's method over a text file (or a file of token ids); the
 * computation is st_perplexity_eval, this file reads, tokenizes and prints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "stride/backend.h"
#include "stride/model.h"
#include "stride/perplexity.h"
#include "stride/tokenizer.h"
#include "model_flags.h"
#include "text_input.h"

static const char *CMD = "perplexity";

static void usage(FILE *out) {
    fprintf(out,
            "usage: stride perplexity -m MODEL -f TEXT [options]\n"
            "       stride perplexity -m MODEL --tokens IDS_FILE [options]\n\n"
            "Perplexity as llama.cpp's llama-perplexity computes it: the whole text is tokenized\n"
            "(BOS first when the vocabulary adds one) and cut into chunks of CTX tokens; each chunk\n"
            "is evaluated from an empty cache with its first token replaced by BOS (when the\n"
            "vocabulary adds one) and scored on its second half. Prints the running value after\n"
            "each chunk, then the final value with its uncertainty (from the variance of the\n"
            "per-token negative log-likelihood). Needs at least one chunk of text.\n\n"
            "options:\n"
            "  -m, --model FILE         GGUF model\n"
            "  -f, --file FILE          UTF-8 text\n"
            "  --tokens FILE            token ids (separated by commas or whitespace), used as the\n"
            "                           tokenized text\n"
            "  -c, --ctx-size N         chunk length in tokens (default 512)\n"
            "  -b, --batch-size N       tokens per forward pass (default 512); scoring keeps\n"
            "                           min(N, CTX/2) x vocabulary logits in memory\n"
            "  --chunks N               score only the first N chunks (default: all)\n"
            CLI_MODEL_FLAGS_HELP);
}

typedef struct chunk_printer {
    double start;
    bool eta_shown;
} chunk_printer;

static void on_chunk(void *ctx, int64_t chunk, int64_t total, const st_perplexity_result *r) {
    chunk_printer *p = ctx;
    if (!p->eta_shown) {
        double per = st_clock_seconds() - p->start;
        fprintf(stderr, "stride perplexity: %.2f s per chunk, ETA %.1f min\n", per, per * (double)(total - 1) / 60.0);
        p->eta_shown = true;
    }
    printf("[%lld]%.4f,", (long long)chunk, r->ppl);
    fflush(stdout);
}

/* Whether the vocabulary puts BOS first: asked of the tokenizer (an empty text encoded
 * with specials), or, when stride cannot build it, read from tokenizer.ggml.add_bos_token
 * (st_model_validate checked that tokenizer.ggml.bos_token_id is inside the vocabulary). */
static int32_t chunk_bos(const st_gguf_file *f, const st_tokenizer *tok) {
    if (tok) {
        int32_t *ids = NULL;
        int64_t n = 0;
        int32_t bos = st_tokenizer_bos(tok), out = -1;
        if (bos >= 0 && st_tokenizer_encode(tok, "", 0, true, false, &ids, &n, NULL) == ST_OK && n >= 1 && ids[0] == bos)
            out = bos;
        free(ids);
        return out;
    }
    bool add = false;
    uint32_t bos = 0;
    if (st_gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &add, NULL) != ST_OK || !add) return -1;
    if (st_gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &bos, NULL) != ST_OK) return -1;
    return (int32_t)bos;
}

int st_cmd_perplexity(int argc, char **argv) {
    const char *model_path = NULL, *text_path = NULL, *ids_path = NULL, *ctx_arg = NULL, *batch_arg = NULL,
               *chunks_arg = NULL;
    cli_model_flags mf = {0};
    for (int i = 1; i < argc; i++) {
        bool missing = false;
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return ST_EXIT_OK;
        }
        if (cli_take_value(argc, argv, &i, "-m", &model_path, &missing) ||
            cli_take_value(argc, argv, &i, "--model", &model_path, &missing) ||
            cli_take_value(argc, argv, &i, "-f", &text_path, &missing) ||
            cli_take_value(argc, argv, &i, "--file", &text_path, &missing) ||
            cli_take_value(argc, argv, &i, "--tokens", &ids_path, &missing) ||
            cli_take_value(argc, argv, &i, "-c", &ctx_arg, &missing) ||
            cli_take_value(argc, argv, &i, "--ctx-size", &ctx_arg, &missing) ||
            cli_take_value(argc, argv, &i, "-b", &batch_arg, &missing) ||
            cli_take_value(argc, argv, &i, "--batch-size", &batch_arg, &missing) ||
            cli_take_value(argc, argv, &i, "--chunks", &chunks_arg, &missing) ||
            cli_take_model_flag(argc, argv, &i, &mf, &missing)) {
            if (missing) return cli_usage_error(CMD, "%s needs a value", a);
        } else {
            return cli_usage_error(CMD, "unknown argument '%s'", a);
        }
    }
    if (!model_path) return cli_usage_error(CMD, "no model given (-m FILE)");
    if (!text_path && !ids_path) return cli_usage_error(CMD, "no text given (-f FILE or --tokens FILE)");
    if (text_path && ids_path) return cli_usage_error(CMD, "give -f or --tokens, not both");
    uint64_t n_ctx = 512, n_batch = 512, max_chunks = 0;
    if (ctx_arg && (!cli_parse_u64(ctx_arg, &n_ctx) || n_ctx < 3 || n_ctx > INT32_MAX))
        return cli_usage_error(CMD, "-c: '%s' is not a chunk length (at least 3 tokens)", ctx_arg);
    if (batch_arg && (!cli_parse_u64(batch_arg, &n_batch) || n_batch == 0 || n_batch > 65536))
        return cli_usage_error(CMD, "-b: '%s' is not a batch size (1..65536)", batch_arg);
    if (chunks_arg && (!cli_parse_u64(chunks_arg, &max_chunks) || max_chunks == 0 || max_chunks > INT32_MAX))
        return cli_usage_error(CMD, "--chunks: '%s' is not a positive count", chunks_arg);
    cli_model_setup setup;
    int usage_rc = cli_model_setup_resolve(CMD, &mf, &setup);
    if (usage_rc != ST_EXIT_OK) return usage_rc;
    setup.load.n_ctx = (int64_t)n_ctx;
    st_error err = {0};

    int rc = ST_EXIT_FAILURE;
    char *text = NULL;
    size_t text_len = 0;
    int32_t *tokens = NULL;
    int64_t n_tokens = 0;
    st_gguf_file *gf = NULL;
    st_tokenizer *tok = NULL;
    st_backend *backend = NULL;
    st_model *model = NULL;
    st_session *session = NULL;
    int32_t bos = -1;

    /* Input and tokenization first: a missing file or a text shorter than a chunk fails
     * before the weights load. */
    if (cli_read_file(text_path ? text_path : ids_path, text_path ? "text file" : "token file", &text, &text_len,
                      &err) != ST_OK)
        goto done;
    if (st_gguf_open(model_path, &gf, &err) != ST_OK) goto done;
    st_hparams hp; /* the model's metadata checked first: the BOS id below comes from it */
    if (st_model_validate(gf, &hp, &err) != ST_OK) {
        st_error_wrap(&err, "loading %s", model_path);
        goto done;
    }
    double t0 = st_clock_seconds();
    if (text_path) {
        if (st_tokenizer_from_gguf(gf, &tok, &err) != ST_OK) goto done;
        if (st_tokenizer_encode(tok, text, text_len, true, false, &tokens, &n_tokens, &err) != ST_OK) {
            st_error_wrap(&err, "tokenizing %s", text_path);
            goto done;
        }
        fprintf(stderr, "stride perplexity: %s: %zu bytes, %lld tokens (%.2f s to tokenize)\n", text_path, text_len,
                (long long)n_tokens, st_clock_seconds() - t0);
    } else {
        if (cli_parse_token_ids(text, &tokens, &n_tokens, &err) != ST_OK) {
            st_error_wrap(&err, "%s", ids_path);
            goto done;
        }
        st_error_clear(&err);
        if (st_tokenizer_from_gguf(gf, &tok, &err) != ST_OK) tok = NULL; /* ids need no tokenizer */
        st_error_clear(&err);
    }
    bos = chunk_bos(gf, tok);
    if (n_tokens < (int64_t)n_ctx) {
        st_error_set(&err, ST_ERROR_INVALID,
                     "the text is %lld tokens, shorter than one %llu-token chunk: use a longer text or a smaller -c",
                     (long long)n_tokens, (unsigned long long)n_ctx);
        goto done;
    }

    double t_load = 0.0;
    if (cli_model_open(model_path, &setup, &backend, &model, &t_load, &err) != ST_OK) goto done;
    if ((int64_t)n_ctx > model->hp.n_ctx_train)
        fprintf(stderr, "stride perplexity: warning: -c %llu exceeds the %lld tokens the model was trained on\n",
                (unsigned long long)n_ctx, (long long)model->hp.n_ctx_train);
    st_session_options so = st_session_options_default();
    so.n_ctx = (int64_t)n_ctx;
    so.n_ubatch = (int64_t)(n_batch < n_ctx ? n_batch : n_ctx);
    so.kv_type = setup.kv_type;
    if (st_session_init(model, &so, &session, &err) != ST_OK) goto done;
    int64_t n_chunks = n_tokens / (int64_t)n_ctx;
    if (max_chunks && (int64_t)max_chunks < n_chunks) n_chunks = (int64_t)max_chunks;
    char label[64];
    cli_backend_label(backend, label, sizeof(label));
    fprintf(stderr,
            "stride perplexity: loaded in %.2f s (%s, %s, %s); %lld chunks of %llu tokens, scoring the last %llu of "
            "each, BOS per chunk: %s\n",
            t_load, backend->device.name, label, model->plan.pad_enabled ? "padded layout" : "packed layout",
            (long long)n_chunks, (unsigned long long)n_ctx, (unsigned long long)(n_ctx - 1 - n_ctx / 2),
            bos >= 0 ? "yes" : "no");

    chunk_printer printer = {.start = st_clock_seconds()};
    st_perplexity_options po = {.n_ctx = (int64_t)n_ctx,
                                .bos = bos,
                                .n_batch = (int64_t)n_batch,
                                .max_chunks = (int64_t)max_chunks,
                                .on_chunk = on_chunk,
                                .on_chunk_ctx = &printer};
    st_perplexity_result r;
    st_status st = st_perplexity_eval(session, tokens, n_tokens, &po, &r, &err);
    printf("\n");
    if (st != ST_OK) goto done;
    double t_eval = st_clock_seconds() - printer.start;
    printf("Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_err);
    fprintf(stderr, "stride perplexity: %lld tokens scored in %.2f s (%.1f tokens evaluated per second)\n",
            (long long)r.n_scored, t_eval, t_eval > 0 ? (double)(r.n_chunks * (int64_t)(n_ctx - 1)) / t_eval : 0.0);
    rc = ST_EXIT_OK;
done:
    if (rc != ST_EXIT_OK) cli_fail(CMD, &err);
    free(text);
    free(tokens);
    st_session_free(session);
    st_model_free(model);
    st_backend_free(backend);
    st_tokenizer_free(tok);
    st_gguf_close(gf);
    return rc;
}
