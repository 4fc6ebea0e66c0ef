/*
 * stride: models. Hyperparameters from GGUF metadata, weights in the planned layout on a
 * backend, and a session (KV cache + scratch) that evaluates tokens.
 *
 * One forward pass serves every architecture (src/model/forward.c): the differences
 * (fused qkv, q/k norms, post norms, GeGLU, MoE, sliding windows, embedding scale) are
 * data in st_hparams and the presence of weights, not separate code paths.
 */
#ifndef STRIDE_MODEL_H
#define STRIDE_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "stride/arch.h"
#include "stride/backend.h"
#include "stride/gguf.h"
#include "stride/layout.h"
#include "stride/ops.h"
#include "stride/status.h"
#include "stride/tensor.h"
#include "stride/tp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Limits on what a model file may ask for, checked at load (st_model_validate) before
 * anything is allocated. Generous for real models (the widest today is under 2^17), tight
 * enough that every size the model, a session and the ops form from them fits 64-bit
 * arithmetic with room to spare. */
#define ST_MODEL_MAX_DIM ((int64_t)1 << 24)    /* any activation width: n_embd, q/k/v, n_ff, ... */
#define ST_MODEL_MAX_VOCAB ((int64_t)INT32_MAX) /* token ids are int32 */
#define ST_MODEL_MAX_CTX ((int64_t)INT32_MAX)   /* positions are int32 */
#define ST_MODEL_MAX_LAYERS ((int64_t)1 << 16)
#define ST_MODEL_MAX_HEADS ((int64_t)1 << 16)
#define ST_MODEL_MAX_EXPERTS ((int64_t)4096)
/* The head size, and so the rotary dimensions: the rope ops rotate at most
 * ST_ROPE_MAX_ROT dimensions a head. */
#define ST_MODEL_MAX_HEAD_DIM ((int64_t)ST_ROPE_MAX_ROT)

typedef enum st_ffn_act {
    ST_FFN_ACT_SILU = 0, /* SwiGLU: llama, qwen3, phi3, olmoe */
    ST_FFN_ACT_GELU_TANH, /* GeGLU: gemma3 */
} st_ffn_act;

typedef struct st_hparams {
    st_arch arch;
    int64_t n_vocab;
    int64_t n_embd;
    int64_t n_layer;
    int64_t n_head;
    int64_t n_head_kv;
    int64_t head_dim;        /* attention.key_length (== value_length) */
    int64_t n_ff;            /* dense FFN width, or per-expert width for MoE */
    int64_t n_expert;        /* 0 for dense models */
    int64_t n_expert_used;
    bool expert_weights_norm;/* renormalise the chosen experts' weights (norm_topk_prob) */
    int64_t n_rot;           /* rotated dims per head (partial rotary when < head_dim) */
    int64_t n_ctx_train;
    st_rope_mode rope_mode;
    float rope_freq_base;
    float rope_freq_base_swa;/* sliding-window layers (gemma3); = rope_freq_base otherwise */
    float rope_freq_scale;   /* linear scaling of positions; 1 = none */
    float rms_eps;
    int64_t sliding_window;  /* 0 = none */
    int64_t swa_pattern;     /* layer il is sliding iff (il + 1) % swa_pattern != 0; 0 = none */
    float embd_scale;        /* token embeddings are multiplied by this (gemma: sqrt(n_embd)) */
    float attn_scale;        /* scores scale, 1/sqrt(head_dim) */
    st_ffn_act ffn_act;
    int64_t n_ctx_orig;      /* phi3 long-rope: original context (0 = none) */
    float rope_attn_factor;  /* phi3 long-rope cos/sin factor; 1 = none */
    int32_t bos_id, eos_id;  /* -1 when absent */
} st_hparams;

/* Reads and checks the hyperparameters of a GGUF model: every key's type and range
 * (ST_MODEL_MAX_*), floats finite and positive, derived widths in checked arithmetic.
 * ST_ERROR_UNSUPPORTED for an architecture stride does not run; ST_ERROR_FORMAT naming the
 * key, the value and the expected range otherwise. */
st_status st_hparams_from_gguf(const st_gguf_file *f, st_hparams *out, st_error *err);

/* The model validator: the hyperparameters (st_hparams_from_gguf), then every tensor
 * against the architecture's descriptor (arch.h): each one known and read by the forward
 * pass, in its layer range, of an allowed type, of the shape the hyperparameters give;
 * every required tensor present (fused or separate forms whole); rope factors finite and
 * positive; the vocabulary (tokenizer.ggml.tokens, vocab_size, special token ids)
 * consistent with token_embd's rows. One error naming the tensor or key, the value found
 * and the value expected. A model that passes reaches no assert in the ops: st_model_load
 * runs this before it allocates or computes anything. */
st_status st_model_validate(const st_gguf_file *f, st_hparams *out, st_error *err);

/* Whether layer il uses the sliding window. */
bool st_hparams_layer_is_swa(const st_hparams *hp, int64_t il);

/* The weights of one block. NULL where the architecture has no such tensor. Shapes in
 * ggml order (ne[0] first); D = n_embd, Hq = n_head*head_dim, Hk = n_head_kv*head_dim,
 * F = n_ff, E = n_expert. */
typedef struct st_layer_weights {
    st_tensor *attn_norm;      /* [D] */
    st_tensor *wq, *wk, *wv;   /* [D, Hq], [D, Hk], [D, Hk] */
    st_tensor *wqkv;           /* [D, Hq + 2Hk]   fused (phi3) */
    st_tensor *wo;             /* [Hq, D] */
    st_tensor *q_norm, *k_norm;/* [head_dim] per head (qwen3, gemma3), or [Hq]/[Hk] (olmoe) */
    st_tensor *post_attn_norm; /* [D] gemma3 */
    st_tensor *ffn_norm;       /* [D] */
    st_tensor *w_gate, *w_up;  /* [D, F] */
    st_tensor *w_gate_up;      /* [D, 2F] fused (phi3: gate rows first) */
    st_tensor *w_down;         /* [F, D] */
    st_tensor *post_ffn_norm;  /* [D] gemma3 */
    st_tensor *router;         /* [D, E] */
    st_tensor *gate_exps, *up_exps; /* [D, F, E] */
    st_tensor *down_exps;      /* [F, D, E] */
} st_layer_weights;

/* One shard's weights under tensor parallelism (tp.h). An unsplit model has one shard,
 * which is the model itself (its layers and output). */
typedef struct st_model_shard {
    st_layer_weights *layers; /* [n_layer] the shard's own tensors where split (q/k/v/qkv, o,
                                 gate/up/gate_up, down, experts), the model's where
                                 replicated (norms, router) */
    st_tensor *output;        /* [D, V_s] its vocabulary rows: its own tensor, or when tied
                                 output_view */
    st_tensor output_view;    /* tied: rows [v0, v0 + V_s) of the replicated token_embd */
} st_model_shard;

typedef struct st_model {
    st_hparams hp;
    st_backend *backend;      /* not owned */
    st_layout_plan plan;      /* the layout every weight was placed in */
    st_tensor *tensors;       /* every tensor of the file, in file order, in backend memory;
                                 split into shards (tp), a whole weight holds no data (NULL):
                                 its shards do */
    uint64_t n_tensors;
    void *weights_buffer;     /* one backend allocation holding every tensor (and shard) */
    size_t weights_bytes;
    st_tensor *token_embd;    /* [D, V] row lookup */
    st_tensor *output_norm;   /* [D] */
    st_tensor *output;        /* [D, V]; == token_embd when tied */
    st_tensor *rope_factors;  /* [n_rot/2] llama3 rope_freqs or phi3 short/long; may be NULL */
    st_layer_weights *layers; /* [n_layer] */
    st_tp_plan tp;            /* how the weights are split (tp.n_shards 1: unsplit) */
    st_tp_layout tp_layout;   /* the split weights' shards as planned (empty when unsplit) */
    st_tensor *shard_tensors; /* [tp_layout.n_entries] those shards in backend memory */
    st_model_shard *shards;   /* [tp.n_shards]: what the forward pass reads */
    st_gguf_file *file;       /* kept open: names in plan point into it */
} st_model;

/* Progress while uploading: bytes done / total. */
typedef void (*st_progress_fn)(void *ctx, uint64_t done, uint64_t total);

typedef struct st_model_load_options {
    st_layout_policy policy;
    st_progress_fn progress;  /* may be NULL */
    void *progress_ctx;
    int64_t n_ctx;            /* context the model will run at (selects phi3 long/short rope factors); 0 = n_ctx_train */
    st_type weights_type;     /* ST_TYPE_F16 or ST_TYPE_BF16: dequantize every quantized tensor (the GEMM
                                 weights and the token embedding) to that type at load, row by row from
                                 the file, and plan the layout with the converted type, so that the
                                 padding rule applies to them. 0 (zero-initialised options) or
                                 ST_TYPE_COUNT: keep every tensor as stored (quantized weights then run
                                 unpadded, on the CPU and CUDA backends). Anything else is
                                 ST_ERROR_INVALID. */
    int n_shards;             /* tensor parallelism (tp.h): 0 or 1 unsplit; N > 1 splits the weights
                                 into N shards, which the forward pass computes one after another and
                                 sums where NCCL would all-reduce (a simulation of N GPUs, for the
                                 CPU backend: another backend is ST_ERROR_UNSUPPORTED). A model that
                                 does not split into N is ST_ERROR_INVALID naming why. */
} st_model_load_options;

/* Opens path, plans the layout for the backend's device, allocates one buffer and uploads
 * every tensor into its planned layout (converting quantized tensors when
 * opt->weights_type asks). ST_ERROR_UNSUPPORTED for a quantized type stride cannot read,
 * and for quantized weights kept as stored on a backend other than the CPU. */
st_status st_model_load(const char *path, st_backend *backend, const st_model_load_options *opt,
                        st_model **out, st_error *err);
/* The same from a file already open (e.g. from memory, st_gguf_open_memory); the model
 * takes f over (it is closed on failure too). `name` names it in messages. */
st_status st_model_load_gguf(st_gguf_file *f, const char *name, st_backend *backend,
                             const st_model_load_options *opt, st_model **out, st_error *err);
void st_model_free(st_model *m);

/* ---- sessions ---- */

typedef struct st_session st_session;

typedef struct st_session_options {
    int64_t n_ctx;      /* KV cache length in tokens */
    int64_t n_ubatch;   /* tokens per forward pass (micro-batch) */
    st_type kv_type;    /* ST_TYPE_F16 (default) or ST_TYPE_F32 */
} st_session_options;

st_session_options st_session_options_default(void);

st_status st_session_init(st_model *m, const st_session_options *opt, st_session **out, st_error *err);
void st_session_free(st_session *s);

/* Tokens evaluated so far (the next position). */
int64_t st_session_n_past(const st_session *s);
const st_model *st_session_model(const st_session *s);

/* Evaluates n tokens at positions n_past.. (in micro-batches). Logits (host, F32,
 * n_vocab per row) are written for every token when all_logits, else for the last only;
 * logits may be NULL. ST_ERROR_INVALID when the context would overflow or an id is out of
 * range. */
st_status st_session_eval(st_session *s, const int32_t *tokens, int64_t n, bool all_logits, float *logits,
                          st_error *err);

/* Evaluates one token at position n_past (a decode step) and points *logits at its
 * n_vocab logits (host, F32) in a buffer of the session's, valid until the next call on
 * s: no copy beyond the device's, into page-locked memory on CUDA. The same checks and
 * logits as st_session_eval of that one token. */
st_status st_session_decode(st_session *s, int32_t token, const float **logits, st_error *err);

/* Forgets tokens from position n_past on (n_past <= current). */
void st_session_rewind(st_session *s, int64_t n_past);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_MODEL_H */
