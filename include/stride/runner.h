/*
 * stride: a model's forward pass over a batch of tokens from many sequences, each at its
 * own position, against a paged KV cache. The floor under the engine (engine.h), which
 * decides which tokens run together and which cache blocks each sequence owns; a session
 * (model.h) is one sequence over a contiguous cache through the same runner.
 *
 * The KV cache is a pool of blocks of ST_KV_BLOCK_TOKENS tokens (ops.h) for every layer
 * at once: block b holds the keys and values of ST_KV_BLOCK_TOKENS positions of one
 * sequence in every layer. A sequence's block table lists its blocks in position order.
 */
#ifndef STRIDE_RUNNER_H
#define STRIDE_RUNNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stride/model.h"
#include "stride/ops.h"
#include "stride/sample.h"
#include "stride/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the KV pool ---------------------------------------------------------------------- */

typedef struct st_kv_pool st_kv_pool;

/* n_blocks blocks of cache in m's backend, F16 or F32: per layer K and V
 * [head_dim, n_head_kv, n_blocks * ST_KV_BLOCK_TOKENS]. Out of memory names the sizes. */
st_status st_kv_pool_init(st_model *m, int64_t n_blocks, st_type kv_type, st_kv_pool **out, st_error *err);
void st_kv_pool_free(st_kv_pool *p);
int64_t st_kv_pool_n_blocks(const st_kv_pool *p);
st_type st_kv_pool_type(const st_kv_pool *p);
/* Bytes one block takes in the backend (every layer's K and V). */
size_t st_kv_block_bytes(const st_hparams *hp, st_type kv_type);
/* Copies block src's keys and values of every layer into block dst (copy-on-write of a
 * block two sequences share, before one of them writes into it). Queued on the backend
 * in order with the steps. */
st_status st_kv_pool_copy_block(st_kv_pool *p, int32_t dst, int32_t src, st_error *err);

/* ---- a batch -------------------------------------------------------------------------- */

/* One step's tokens. A sequence's tokens are consecutive and at consecutive positions; the
 * first n_single tokens are each the only token of their sequence (decode tokens), the
 * rest form runs of one sequence each (prompt chunks). */
typedef struct st_batch {
    int64_t n_tokens;
    const int32_t *tokens;      /* [n_tokens] token ids */
    const int32_t *pos;         /* [n_tokens] positions in their sequences */
    const int32_t *seq;         /* [n_tokens] each token's row in block_table */
    int64_t n_single;
    /* The cache: block_table [n_seq][max_blocks] (row-major) of the pool's block ids, or
     * NULL for one sequence over a contiguous cache (seq all 0: position p at slot p). */
    const int32_t *block_table;
    int32_t n_seq, max_blocks;
    /* The tokens whose logits are wanted, ascending: out[0 .. n_out) (NULL: every token). */
    const int32_t *out;
    int64_t n_out;
    /* A runner of candidates (st_runner_options.n_candidates): the logits rows (indices into
     * out's rows, ascending) whose whole logits are wanted on the host too. */
    const int32_t *full;
    int64_t n_full;
    /* A runner of candidates: draw[j] a draw from logits row j made on the backend
     * (st_cpu_draw_rows; temp 0: row j is not drawn), or NULL: no row is. */
    const st_row_draw *draw;
} st_batch;

/* ---- the runner ----------------------------------------------------------------------- */

#define ST_RUNNER_MAX_CANDIDATES 256

typedef struct st_runner_options {
    int64_t max_tokens;     /* tokens in one batch (and one forward pass) */
    int32_t max_seqs;       /* sequences in one batch (rows of its block table) */
    int32_t max_blocks;     /* blocks of one sequence (its longest context / ST_KV_BLOCK_TOKENS) */
    int32_t n_candidates;   /* 0: every logits row to the host; k (<= ST_RUNNER_MAX_CANDIDATES):
                               the backend picks each row's k largest logits and its
                               log-sum-exp, and only those come to the host (a sampler whose
                               chain keeps at most k tokens needs no more), whole rows only
                               where st_batch.full asks */
} st_runner_options;

typedef struct st_runner st_runner;

/* A runner of m's forward pass over pool: scratch for batches up to o's sizes in m's
 * backend, and the graphs of the batch shapes it has seen (a backend may record them). */
st_status st_runner_init(st_model *m, st_kv_pool *pool, const st_runner_options *o, st_runner **out,
                         st_error *err);
void st_runner_free(st_runner *r);

/* Evaluates b: every token's keys and values go to its cache slot, and the logits of the
 * tokens b->out names go to *logits: [n_out][n_vocab] F32 in host memory of the runner's,
 * valid until the next call. ST_ERROR_INVALID naming the field for a batch that breaks
 * the rules above or the runner's sizes (ids outside the vocabulary, positions past the
 * blocks, block ids outside the pool). */
st_status st_runner_eval(st_runner *r, const st_batch *b, const float **logits, st_error *err);

/* What st_runner_eval_out returns, in host memory of the runner's, valid until its next call. */
typedef struct st_runner_output {
    int64_t n_out, n_vocab;
    const float *logits;  /* [n_out][n_vocab]; with candidates only the rows b->full names */
    int32_t k;            /* candidates a row (the runner's n_candidates; 0: none) */
    const int32_t *ids;   /* [n_out][k] the k largest logits' token ids, by decreasing logit
                             (ties to the lower id) */
    const float *vals;    /* [n_out][k + 1] those logits, then the row's log-sum-exp (a
                             token's log-probability is its logit minus it) */
    const int32_t *drawn; /* [n_out] with st_batch.draw: the token drawn from each drawn row
                             (-1: the row holds a NaN or +inf, -2: no finite logit) */
    const float *drawn_logits; /* [n_out] the drawn tokens' logits */
} st_runner_output;

/* st_runner_eval for any runner: with candidates, each row's candidates, whole rows for
 * b->full and the draws b->draw asks for. */
st_status st_runner_eval_out(st_runner *r, const st_batch *b, st_runner_output *out, st_error *err);

/* Decode steps of padding tokens (each the only token of the padding row, whose blocks are
 * all the pool's padding block: no other block is written) for every batch size of the
 * runner's buckets up to n sequences, each over 64, 128, ... keys up to the longest
 * context, so that a backend that records decode steps (CUDA graphs, by batch size and
 * depth) has recorded them before the first real step instead of during it. */
st_status st_runner_warmup(st_runner *r, int32_t n, st_error *err);

/* A runner of candidates, after st_runner_eval_out and before the next evaluation: the
 * draws draw[0 .. n_out) ask for (as st_batch.draw) from its logits rows, still on the
 * backend, into out (that evaluation's output): out->drawn[j] for every row drawn here,
 * the rows drawn with the step kept as they were. For a sampler that finds it needs the
 * whole row only once it has seen the candidates (st_sampler_top_p_keep). */
st_status st_runner_draw_rows(st_runner *r, const st_row_draw *draw, st_runner_output *out, st_error *err);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_RUNNER_H */
