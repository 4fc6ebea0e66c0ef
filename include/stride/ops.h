/*
 * stride: the parameters of the ops that carry more than tensors (rotary embedding,
 * attention), shared by the model code that issues the ops and every backend that runs
 * them. Backend-neutral: no backend header is needed to describe an op.
 */
#ifndef STRIDE_OPS_H
#define STRIDE_OPS_H

#include <stdint.h>

#include "stride/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- rotary position embedding ------------------------------------------------------- */

typedef enum st_rope_mode {
    ST_ROPE_MODE_NORM = 0, /* rotate adjacent pairs (2i, 2i+1): llama's GGUF layout */
    ST_ROPE_MODE_NEOX = 2, /* rotate pairs (i, i + n_rot/2): qwen3, gemma3, phi3, olmoe */
} st_rope_mode;

/* The most rotated dimensions a head may have (every backend's rope holds n_rot / 2
 * angles of one head at a time). */
#define ST_ROPE_MAX_ROT 1024

typedef struct st_rope_params {
    st_rope_mode mode;
    int32_t n_rot;              /* rotated dims, even, <= head_dim and ST_ROPE_MAX_ROT; the
                                   rest pass through */
    float freq_base;            /* theta_i = pos * base^(-2i/n_rot); finite, > 0 */
    float freq_scale;           /* linear position scaling (pos * freq_scale); 1 = none */
    const float *freq_factors;  /* [n_rot/2]: theta_i /= factor_i (llama3 rope_freqs,
                                   phi3 long/short factors), in the backend's memory;
                                   NULL = none */
    float attn_factor;          /* multiplies cos and sin (phi3 long-rope / YaRN mscale);
                                   1 = none */
} st_rope_params;

/* Parameters with defaults: freq_scale 1, attn_factor 1, no factors. */
st_rope_params st_rope_params_default(st_rope_mode mode, int32_t n_rot, float freq_base);

/* ---- attention ----------------------------------------------------------------------- */

/* A paged KV cache holds a sequence's keys in blocks of this many tokens: key t (its
 * position) of a sequence whose block table row is `blocks` lives at cache slot
 * blocks[t / ST_KV_BLOCK_TOKENS] * ST_KV_BLOCK_TOKENS + t % ST_KV_BLOCK_TOKENS. A power of
 * two, and a multiple of every attention kernel's chunk of keys, so that a chunk never
 * straddles two blocks. */
#define ST_KV_BLOCK_TOKENS 64

/* The cache slot of key t of a sequence with block table row blocks (NULL: one sequence
 * in a contiguous cache, slot = t). */
static inline int64_t st_kv_slot(const int32_t *blocks, int64_t t) {
    return blocks ? (int64_t)blocks[t / ST_KV_BLOCK_TOKENS] * ST_KV_BLOCK_TOKENS + t % ST_KV_BLOCK_TOKENS : t;
}

/* A run of consecutive queries of one sequence in a batch. */
typedef struct st_attn_run {
    int64_t m0, n; /* queries m0 .. m0 + n - 1 */
    int32_t seq;   /* their block table row */
} st_attn_run;

/* Where a batch's keys live in a paged cache, for attention over it. The tensors are in
 * the backend's memory; the grouping is on the host, for backends that launch per group
 * (every query of a batch belongs to exactly one of the singles or the runs). A graph
 * replayed with new runs (graph.h) rewrites the runs in place before each compute, on the
 * host and in runs_dev: its runs are slots, n = 0 an unused one. */
typedef struct st_kv_pages {
    const st_tensor *seq;      /* I32 [M]: the block table row of each query's sequence */
    const st_tensor *table;    /* I32 [max_blocks, n_seq]: row s = sequence s's blocks */
    int64_t n_single;          /* queries 0 .. n_single - 1 are each their sequence's only
                                  query in the batch (decode tokens) */
    int32_t n_runs;            /* then these runs (prompt chunks), in order */
    const st_attn_run *runs;   /* [n_runs] */
    const st_tensor *runs_dev; /* NULL, or I32 [3, n_runs]: the runs again in backend
                                  memory, (m0, n, seq) each, for backends that read them
                                  when the step runs rather than when it is queued */
} st_kv_pages;

typedef struct st_attn_params {
    int64_t n_kv;   /* valid cache entries: keys 0 .. n_kv-1 (cache index = position). In a
                       graph node this is ignored: the graph's n_kv applies (graph.h) */
    int32_t window; /* 0: full causal; else sliding: key t visible iff pos - t < window,
                       i.e. window keys counting the query's own (llama.cpp's
                       LLAMA_SWA_TYPE_STANDARD `p1 - p0 >= n_swa` masks; transformers'
                       sliding_window_overlay keeps `kv_idx > q_idx - sliding_window`) */
    float scale;    /* scores = scale * q.k (usually 1/sqrt(head_dim)) */
    float softcap;  /* 0: none; else scores = softcap * tanh(scores / softcap) */
} st_attn_params;

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_OPS_H */
