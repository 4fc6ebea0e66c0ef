/* A session's state, shared by session.c (allocation, the eval loop) and forward.c (one
 * micro-batch through the model). Shapes: D = n_embd, Hq = n_head*head_dim,
 * Hk = n_head_kv*head_dim, F = n_ff, E = n_expert, K = n_expert_used, V = n_vocab,
 * U = n_ubatch (the most tokens in one forward pass), C = n_ctx. */
#ifndef STRIDE_MODEL_SESSION_INTERNAL_H
#define STRIDE_MODEL_SESSION_INTERNAL_H

#include "stride/model.h"

/* Depth buckets of the recorded decode steps (st_session's decode_graphs). The CUDA decode
 * attention runs the first (64 keys) as one split, and the second (128) too where a chunk
 * is 64 keys (head_dim 64 or 128 in F16): no combine kernel at those depths. */
#define ST_DECODE_BUCKETS 7
#define ST_DECODE_FIRST_BOUND 64

/* The depth bucket of a one-token step at position pos, and the keys its recording attends
 * over (*n_kv > pos): ST_DECODE_FIRST_BOUND doubled per bucket, the last bucket and any
 * bound past the context n_ctx. (bench/kernels/decode_step_bench.cu takes the same bound.) */
int st_decode_bucket(int64_t pos, int64_t n_ctx, int64_t *n_kv);

typedef struct st_kv_layer {
    st_tensor k; /* [head_dim, n_head_kv, C] F16/F32 */
    st_tensor v; /* [head_dim, n_head_kv, C] */
} st_kv_layer;

struct st_session {
    st_model *model;
    st_session_options opt;
    int64_t n_past;
    st_kv_layer *kv;        /* [n_layer] */
    void *kv_buffer;

    /* scratch for one micro-batch of up to U tokens, in backend memory */
    void *scratch;
    st_tensor ids;          /* I32 [U] token ids */
    st_tensor pos;          /* I32 [U] positions */
    st_tensor step_ids;     /* I32 [1] a one-token step's id, and after it ... */
    st_tensor step_pos;     /* I32 [1] ... its position: one copy from step_in fills both */
    st_tensor x;            /* [D, U] residual stream */
    st_tensor h;            /* [D, U] normalised input of a sub-block */
    st_tensor qkv;          /* [Hq + 2Hk, U] q, k, v rows of each token, one after another */
    st_tensor attn;         /* [Hq, U] attention output */
    st_tensor proj;         /* [D, U] output of attn_output / ffn_down */
    st_tensor x_w;          /* [D, 1] one token: x times the next product's norm weight (forward.c) */
    st_tensor ffn_a;        /* [2F, U] gate (or fused gate_up); MoE: [F, K, U] gate */
    st_tensor ffn_b;        /* [F, U] up / activation; MoE: [F, K, U] up, then activation */
    st_tensor moe_logits;   /* [E, U] router logits */
    st_tensor moe_ids;      /* I32 [K, U] chosen experts */
    st_tensor moe_weights;  /* [K, U] their weights */
    st_tensor moe_down;     /* [D, K, U] each chosen expert's output */
    st_tensor rope_cs[2];   /* [n_rot] a decode step's rotations (rope_table): global, sliding-window layers */
    bool rope_cs_used[2];   /* some layer ropes with the global / the sliding-window parameters */
    st_tensor logits;       /* [V, n_logits_cap] */
    int64_t n_logits_cap;
    void *logits_buffer;

    /* A one-token step's host side, in the backend's host memory (page-locked on CUDA,
     * so that the copies are asynchronous DMA): its token id and position (every
     * one-token step), and its logits row, which the output head writes straight into
     * (host_alloc's memory is addressable by the backend's ops) and st_session_decode
     * returns. */
    int32_t *step_in;       /* [2]: id, pos */
    float *step_logits;     /* [V] */
    st_tensor step_out;     /* F32 [V, 1] over step_logits */
    int32_t *batch_pos;     /* [U]: a micro-batch's positions (pageable: its copy completes at once) */

    /* Decode steps (one token, its logits) replay recorded forward passes on backends
     * that record (CUDA graphs): the first step runs plainly over the whole context (lazy
     * allocations happen, at their largest), then each depth bucket is recorded on its
     * first step and replayed for every later one. A recording holds the copy of the id
     * and position from step_in to step_ids/step_pos, writes the logits to step_logits,
     * and attends over n_kv = its bucket's bound (64, 128, 256, 512, 1,024, 2,048 keys,
     * then n_ctx; each query still sees only keys up to its own position), so that the
     * backend sizes attention for the keys there can be at that depth; the results do not
     * depend on the bound. */
    bool graphs_enabled;        /* the backend records and STRIDE_DISABLE_GRAPHS is not set */
    bool decode_warm;           /* a plain decode step has run */
    st_backend_graph *decode_graphs[ST_DECODE_BUCKETS];
};

/* One forward pass: M tokens with their positions (in backend memory), attention over
 * n_kv keys (> the last position), the logits of the batch's last n_out tokens (0: nobody
 * reads them) to the first n_out columns of logits. */
typedef struct st_forward_io {
    st_tensor ids;            /* I32 [M] */
    st_tensor pos;            /* I32 [M] */
    int64_t n_kv, n_out;
    const st_tensor *logits;  /* [V, >= n_out]: s->logits, or a decode step's step_out */
} st_forward_io;

st_status st_forward(st_session *s, const st_forward_io *io, st_error *err);

#endif
