/*
 * stride: perplexity, computed the way llama.cpp's llama-perplexity does, so that the
 * numbers can be compared:
 *   - the token stream (the whole text, tokenized once, BOS first when the vocabulary
 *     adds one) is cut into n_chunks = n_tokens / n_ctx chunks of n_ctx tokens; the tail
 *     that does not fill a chunk is dropped;
 *   - each chunk is evaluated from an empty KV cache, its first token replaced by BOS
 *     when the vocabulary adds one;
 *   - only the second half is scored: the logits at positions first = n_ctx / 2 ..
 *     n_ctx - 2 predict tokens first + 1 .. n_ctx - 1 (n_ctx - 1 - first per chunk), so
 *     every scored token sees at least n_ctx / 2 tokens of context;
 *   - NLL = -log_softmax(logits)[next token], accumulated in double; PPL = exp(mean NLL);
 *     the uncertainty is PPL * sqrt((mean(NLL^2) - mean(NLL)^2) / (N - 1)), the standard
 *     error of the mean NLL carried through exp to first order.
 * llama.cpp refuses texts shorter than 2 * n_ctx tokens; stride needs one chunk.
 */
#ifndef STRIDE_PERPLEXITY_H
#define STRIDE_PERPLEXITY_H

#include <stdint.h>

#include "stride/model.h"
#include "stride/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_perplexity_result {
    int64_t n_chunks;  /* chunks evaluated */
    int64_t n_scored;  /* tokens scored */
    double nll;        /* mean negative log-likelihood, nats per token */
    double nll2;       /* mean of its square */
    double ppl;        /* exp(nll) */
    double ppl_err;    /* the uncertainty above; 0 when fewer than 2 tokens were scored */
} st_perplexity_result;

/* Called after every chunk with the running result (n_chunks = chunks done so far). */
typedef void (*st_perplexity_chunk_fn)(void *ctx, int64_t chunk, int64_t n_chunks_total,
                                       const st_perplexity_result *running);

typedef struct st_perplexity_options {
    int64_t n_ctx;        /* chunk length in tokens, >= 3; the session's context must hold it */
    int32_t bos;          /* >= 0: the first token of every chunk becomes this id; -1: as given */
    int64_t n_batch;      /* tokens per eval call while scoring; the logits buffer holds
                             n_batch x n_vocab floats. 0 = n_ctx */
    int64_t max_chunks;   /* 0 = every chunk */
    st_perplexity_chunk_fn on_chunk; /* may be NULL */
    void *on_chunk_ctx;
} st_perplexity_options;

/* log p(tok) under softmax(logits[0..n)), in double. */
double st_log_softmax_at(const float *logits, int64_t n, int32_t tok);

/* Scores tokens with the session's model (its cache is cleared for each chunk).
 * ST_ERROR_INVALID when the tokens do not fill one chunk, naming both counts. */
st_status st_perplexity_eval(st_session *s, const int32_t *tokens, int64_t n_tokens,
                             const st_perplexity_options *opt, st_perplexity_result *out, st_error *err);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_PERPLEXITY_H */
