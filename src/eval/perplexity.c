/* Perplexity over chunks, llama.cpp's method: see include/stride/perplexity.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stride/perplexity.h"


double st_log_softmax_at(const float *logits, int64_t n, int32_t tok) {
    ST_ASSERT(n > 0 && tok >= 0 && tok < n);
    double m = logits[0];
    for (int64_t i = 1; i < n; i++)
        if (logits[i] > m) m = logits[i];
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += exp((double)logits[i] - m);
    return (double)logits[tok] - m - log(sum);
}

static void finish(st_perplexity_result *r, double sum_nll, double sum_nll2) {
    const double n = (double)r->n_scored;
    r->nll = sum_nll / n;
    r->nll2 = sum_nll2 / n;
    r->ppl = exp(r->nll);
    double var = r->nll2 - r->nll * r->nll;
    r->ppl_err = (r->n_scored > 1 && var > 0.0) ? r->ppl * sqrt(var / (n - 1.0)) : 0.0;
}

st_status st_perplexity_eval(st_session *s, const int32_t *tokens, int64_t n_tokens,
                             const st_perplexity_options *opt, st_perplexity_result *out, st_error *err) {
    memset(out, 0, sizeof(*out));
    const int64_t n_ctx = opt->n_ctx;
    if (n_ctx < 3)
        return st_error_set(err, ST_ERROR_INVALID,
                            "a perplexity chunk of %lld tokens is too short: it needs at least 3", (long long)n_ctx);
    if (n_tokens < n_ctx)
        return st_error_set(err, ST_ERROR_INVALID,
                            "the text is %lld tokens, shorter than one %lld-token chunk: use a longer text or a "
                            "smaller context (-c)",
                            (long long)n_tokens, (long long)n_ctx);
    int64_t n_chunks = n_tokens / n_ctx;
    if (opt->max_chunks > 0 && opt->max_chunks < n_chunks) n_chunks = opt->max_chunks;
    const int64_t V = st_session_model(s)->hp.n_vocab;
    /* every id that is evaluated or scored is a token of the model, before anything runs */
    if (opt->bos >= V)
        return st_error_set(err, ST_ERROR_FORMAT,
                            "the BOS token id %d that the model's metadata names (tokenizer.ggml.bos_token_id) is "
                            "outside its vocabulary of %lld tokens",
                            opt->bos, (long long)V);
    for (int64_t i = 0; i < n_chunks * n_ctx; i++) {
        if (opt->bos >= 0 && i % n_ctx == 0) continue; /* replaced by BOS */
        if (tokens[i] < 0 || tokens[i] >= V)
            return st_error_set(err, ST_ERROR_INVALID,
                                "token id %d at position %lld of the input is outside the vocabulary of the model (ids "
                                "0..%lld)",
                                tokens[i], (long long)i, (long long)V - 1);
    }
    const int64_t first = n_ctx / 2, n_score = n_ctx - 1 - first;
    int64_t n_batch = opt->n_batch > 0 ? opt->n_batch : n_ctx;
    if (n_batch > n_score) n_batch = n_score;

    int32_t *chunk = malloc((size_t)n_ctx * sizeof(int32_t));
    float *logits = malloc((size_t)n_batch * (size_t)V * sizeof(float));
    double *nll = malloc((size_t)n_batch * sizeof(double));
    if (!chunk || !logits || !nll) {
        free(chunk);
        free(logits);
        free(nll);
        return st_error_set(err, ST_ERROR_NOMEM, "out of memory for %lld x %lld logits", (long long)n_batch,
                            (long long)V);
    }
    st_status st = ST_OK;
    double sum_nll = 0.0, sum_nll2 = 0.0;
    for (int64_t ic = 0; ic < n_chunks; ic++) {
        memcpy(chunk, tokens + ic * n_ctx, (size_t)n_ctx * sizeof(int32_t));
        if (opt->bos >= 0) chunk[0] = opt->bos;
        st_session_rewind(s, 0);
        /* The first half only builds the cache; the last token is never evaluated, since
         * nothing follows it within the chunk. */
        if ((st = st_session_eval(s, chunk, first, false, NULL, err)) != ST_OK) break;
        for (int64_t done = 0; done < n_score; done += n_batch) {
            int64_t m = n_score - done < n_batch ? n_score - done : n_batch;
            const int64_t p0 = first + done; /* position of the first token of this piece */
            if ((st = st_session_eval(s, chunk + p0, m, true, logits, err)) != ST_OK) break;
            /* The rows' log-softmaxes on every CPU thread (a vocabulary of 262k makes
             * this the bulk of a GPU run's time), summed in row order as before. */
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < m; i++) nll[i] = -st_log_softmax_at(logits + i * V, V, chunk[p0 + i + 1]);
            for (int64_t i = 0; i < m; i++) {
                sum_nll += nll[i];
                sum_nll2 += nll[i] * nll[i];
            }
        }
        if (st != ST_OK) break;
        out->n_chunks = ic + 1;
        out->n_scored += n_score;
        finish(out, sum_nll, sum_nll2);
        if (opt->on_chunk) opt->on_chunk(opt->on_chunk_ctx, ic + 1, n_chunks, out);
    }
    free(chunk);
    free(logits);
    free(nll);
    if (st != ST_OK) return st_error_wrap(err, "perplexity chunk %lld", (long long)out->n_chunks + 1);
    return ST_OK;
}
