/* The runner's and the KV pool's state, shared by runner.c (buffers, batches, graphs),
 * kv_pool.c and forward.c (one batch through the model). Shapes: D = n_embd,
 * Hq = n_head*head_dim, Hk = n_head_kv*head_dim, F = n_ff, E = n_expert,
 * K = n_expert_used, V = n_vocab, U = the runner's max_tokens, S = the pool's slots
 * ((n_blocks + 1) * ST_KV_BLOCK_TOKENS: the last block is the runner's, for padding). */
#ifndef STRIDE_MODEL_RUNNER_INTERNAL_H
#define STRIDE_MODEL_RUNNER_INTERNAL_H

#include "stride/graph.h"
#include "stride/runner.h"

typedef struct st_kv_layer {
    st_tensor k; /* [head_dim, n_head_kv, S] F16/F32 */
    st_tensor v; /* [head_dim, n_head_kv, S] */
} st_kv_layer;

struct st_kv_pool {
    st_model *model;
    st_type type;
    int64_t n_blocks;   /* blocks handed out; block n_blocks is the padding block */
    void *buffer;
    st_kv_layer *layers; /* [n_layer] */
};

/* The scratch activations of one forward pass of up to U tokens, in backend memory. */
typedef struct st_forward_bufs {
    st_tensor x;            /* [D, U] residual stream */
    st_tensor h;            /* [D, U] normalised input of a sub-block */
    st_tensor qkv;          /* [Hq + 2Hk, U] q, k, v rows of each token, one after another */
    st_tensor attn;         /* [Hq, U] attention output */
    st_tensor proj;         /* [D, U] output of attn_output / ffn_down */
    st_tensor ffn_a;        /* [2F, U] gate (or fused gate_up); MoE: [F, K, U] gate */
    st_tensor ffn_b;        /* [F, U] up / activation; MoE: [F, K, U] up, then activation */
    st_tensor moe_logits;   /* [E, U] router logits */
    st_tensor moe_ids;      /* I32 [K, U] chosen experts */
    st_tensor moe_weights;  /* [K, U] their weights */
    st_tensor moe_down;     /* [D, K, U] each chosen expert's output */
    st_tensor x_out;        /* [D, U] the rows of x whose logits are wanted, gathered */
    st_tensor partial;      /* [D, U, N - 1] split into N > 1 shards (tp.h): the partial outputs
                               of o and down of shards 1 .. N - 1 (shard 0's in proj), summed
                               into proj where N GPUs would all-reduce; absent with one shard */
} st_forward_bufs;

/* One forward pass over M tokens (in backend memory). */
typedef struct st_forward_io {
    st_tensor ids;              /* I32 [M] token ids */
    st_tensor pos;              /* I32 [M] positions */
    st_tensor slots;            /* I32 [M] the cache slot of each token's k and v */
    const st_kv_pages *pages;   /* paged cache (NULL: one sequence, slot = position) */
    const st_tensor *out_rows;  /* I32 [n_out] the tokens whose logits are wanted, or NULL:
                                   the last n_out tokens */
    int64_t n_out;
    const st_tensor *logits;    /* [V, >= n_out] */
} st_forward_io;

/* Checks b, writes its indices for the next compute and returns the graph that computes it
 * (kept by the runner; st_runner_eval is this, then st_backend_compute). For tests that
 * look at the graph a batch makes. */
st_status st_runner_prepare(st_runner *r, const st_batch *b, st_graph **out, st_error *err);

/* Appends the forward pass of io's tokens to g (forward.c); the caller sets g->n_kv. */
void st_forward_build(const st_model *m, const st_kv_pool *pool, const st_forward_bufs *f, st_graph *g,
                      const st_forward_io *io);

#endif
