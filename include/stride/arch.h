/*
 * stride: model architectures and the tensors each one has.
 *
 * ONE DESCRIPTOR PER ARCHITECTURE (src/layout/arch_table.c) lists every tensor the
 * architecture has, in the names llama.cpp's converter writes: its role (the op that
 * consumes it), whether the forward pass needs it, its shape as a function of the
 * hyperparameters and the types it may have. Everything that needs to know an
 * architecture's tensors reads this one table:
 *   - the layout planner (the role decides the padding rule; a tensor that is not in its
 *     architecture's table has role ST_ROLE_UNKNOWN and is never padded);
 *   - the model validator and loader (src/model: every tensor checked against its entry
 *     before anything is allocated, then bound to its slot by kind);
 *   - synth (src/synth: a preset writes the entries its architecture requires).
 * Roles are decided from the table, never guessed from a name at run time.
 */
#ifndef STRIDE_ARCH_H
#define STRIDE_ARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum st_arch {
    ST_ARCH_UNKNOWN = 0,
    ST_ARCH_LLAMA,
    ST_ARCH_QWEN3,
    ST_ARCH_GEMMA3,
    ST_ARCH_PHI3,
    ST_ARCH_OLMOE,
    ST_ARCH_COUNT,
} st_arch;

typedef enum st_tensor_role {
    ST_ROLE_UNKNOWN = 0,   /* not in the architecture's table */
    ST_ROLE_GEMM,          /* src0 of a dense matrix product: q/k/v/o, qkv, gate/up/down, output */
    ST_ROLE_GEMM_EXPERTS,  /* 3D expert weights of the MoE product (mul_mat_id) */
    ST_ROLE_ROUTER,        /* MoE router ffn_gate_inp: a dense matrix product */
    ST_ROLE_ROW_LOOKUP,    /* token embeddings, read by row (get_rows), also when tied */
    ST_ROLE_NORM,          /* RMSNorm weights */
    ST_ROLE_BIAS,          /* added biases */
    ST_ROLE_ROPE_FACTORS,  /* rope_freqs / rope_factors_*: per-frequency factors */
    ST_ROLE_COUNT,
} st_tensor_role;

/* Which tensor of the model an entry is: the model loader binds each kind to its slot. */
typedef enum st_tensor_kind {
    ST_TENSOR_TOKEN_EMBD = 0,
    ST_TENSOR_OUTPUT_NORM,
    ST_TENSOR_OUTPUT,
    ST_TENSOR_ROPE_FREQS,         /* llama3 rope scaling factors */
    ST_TENSOR_ROPE_FACTORS_LONG,  /* phi3 long-rope factors (context beyond the original) */
    ST_TENSOR_ROPE_FACTORS_SHORT, /* phi3 long-rope factors (within the original context) */
    /* one of each per layer ("blk.#.") */
    ST_TENSOR_ATTN_NORM,
    ST_TENSOR_ATTN_Q,
    ST_TENSOR_ATTN_K,
    ST_TENSOR_ATTN_V,
    ST_TENSOR_ATTN_QKV,
    ST_TENSOR_ATTN_Q_NORM,
    ST_TENSOR_ATTN_K_NORM,
    ST_TENSOR_ATTN_OUTPUT,
    ST_TENSOR_POST_ATTN_NORM,
    ST_TENSOR_FFN_NORM,
    ST_TENSOR_FFN_GATE,
    ST_TENSOR_FFN_UP,
    ST_TENSOR_FFN_DOWN,
    ST_TENSOR_POST_FFN_NORM,
    ST_TENSOR_FFN_GATE_INP,       /* MoE router */
    ST_TENSOR_FFN_GATE_EXPS,
    ST_TENSOR_FFN_UP_EXPS,
    ST_TENSOR_FFN_DOWN_EXPS,
    ST_TENSOR_BIAS,               /* any added bias (no slot: the forward pass adds none) */
    ST_TENSOR_KIND_COUNT,
} st_tensor_kind;

/* Whether the forward pass reads a tensor. */
typedef enum st_tensor_need {
    ST_NEED_REQUIRED = 0, /* read by every model of the architecture: absent is an error */
    ST_NEED_OPTIONAL,     /* read when present (the entry's feature says when a model has it) */
    ST_NEED_UNUSED,       /* the architecture has it but stride's forward pass does not read
                             it (biases, llama-converted MoE): a file holding it is refused,
                             since the model would compute something else without it */
} st_tensor_need;

/* What an optional tensor's presence means, so that synth knows when to write it. */
typedef enum st_arch_feature {
    ST_FEATURE_NONE = 0,
    ST_FEATURE_UNTIED_OUTPUT, /* output.weight of its own (else the output reads token_embd) */
    ST_FEATURE_ROPE_FREQS,    /* llama3-style rope scaling */
    ST_FEATURE_LONG_ROPE,     /* phi3 long rope, long and short factors */
} st_arch_feature;

/* The types a tensor may have. */
typedef enum st_arch_types {
    ST_ARCH_TYPES_F32 = 0, /* read as f32 values: norms, rope factors, biases */
    ST_ARCH_TYPES_WEIGHT,  /* f32, f16, bf16 or a block-quantized type the products read */
} st_arch_types;

/* A dimension of an expected shape, as a function of the hyperparameters. */
typedef enum st_arch_dim {
    ST_DIM_NONE = 0,  /* no such dimension (the shape's rank ends before it) */
    ST_DIM_EMBD,      /* n_embd */
    ST_DIM_VOCAB,     /* n_vocab */
    ST_DIM_HEAD,      /* head_dim */
    ST_DIM_Q,         /* n_head * head_dim */
    ST_DIM_KV,        /* n_head_kv * head_dim */
    ST_DIM_QKV,       /* n_head * head_dim + 2 * n_head_kv * head_dim (fused q|k|v) */
    ST_DIM_FF,        /* n_ff (per expert in a MoE) */
    ST_DIM_FF2,       /* 2 * n_ff (fused gate|up) */
    ST_DIM_EXPERT,    /* n_expert */
    ST_DIM_ROT_HALF,  /* n_rot / 2: one factor per rotary frequency */
    ST_DIM_COUNT,
} st_arch_dim;

/* One tensor of an architecture. alt: 0, or which of two alternative forms of the same
 * computation the tensor belongs to (1: phi3's fused attn_qkv, 2: separate q/k/v); a
 * layer holds exactly one form, whole. */
typedef struct st_arch_tensor {
    const char *pattern;   /* llama.cpp's name, "blk.#." for a layer's tensor */
    st_tensor_kind kind;
    st_tensor_role role;
    st_tensor_need need;
    st_arch_feature feature; /* for ST_NEED_OPTIONAL */
    unsigned alt;
    st_arch_types types;
    unsigned n_dims;         /* 1..3 */
    st_arch_dim ne[3];       /* ne[0] first (ggml order); ST_DIM_NONE past n_dims */
} st_arch_tensor;

/* The sizes the dimensions derive from (st_hparams' or a synth preset's). */
typedef struct st_arch_sizes {
    int64_t n_vocab, n_embd, n_head, n_head_kv, head_dim, n_ff, n_expert, n_rot;
} st_arch_sizes;

/* "llama", "qwen3", ...: the value of general.architecture. "unknown" otherwise. */
const char *st_arch_name(st_arch arch);

/* Parses a general.architecture value (len bytes, not NUL-terminated). */
st_arch st_arch_from_name(const char *name, size_t len);

/* "gemm", "gemm-experts", "router", "row-lookup", "norm", "bias", "rope-factors",
 * "unknown". */
const char *st_tensor_role_name(st_tensor_role role);

/* True for roles whose tensor is the weight (src0) of a matrix product: the padding rule
 * applies to these and only these. */
bool st_tensor_role_is_gemm_weight(st_tensor_role role);

/* Role of tensor `name` (len bytes) in `arch`'s table. Patterns use "blk.#." where '#'
 * matches a layer number (decimal digits, no sign, no leading zeros beyond "0"). */
st_tensor_role st_arch_tensor_role(st_arch arch, const char *name, size_t len);

/* The descriptor of arch: its entries in the order a converter writes them (the global
 * tensors before the first layer's, the layer's in order, then the global ones after);
 * NULL and *n = 0 for ST_ARCH_UNKNOWN. */
const st_arch_tensor *st_arch_tensors(st_arch arch, size_t *n);

/* The entry `name` (len bytes) matches in arch's table, or NULL; *layer: its layer
 * number (saturated at INT64_MAX for absurdly long numbers), -1 for a global tensor. */
const st_arch_tensor *st_arch_match(st_arch arch, const char *name, size_t len, int64_t *layer);

/* Whether the entry is one per layer ("blk.#."). */
bool st_arch_tensor_per_layer(const st_arch_tensor *t);

/* The tensor's name for a layer (ignored for a global one) into buf. Returns the length
 * snprintf would give (>= size: cut). */
int st_arch_tensor_name(const st_arch_tensor *t, int64_t layer, char *buf, size_t size);

/* "n_embd", "n_head*head_dim", ... for messages. */
const char *st_arch_dim_name(st_arch_dim dim);

/* The value of every dimension (dims[ST_DIM_NONE] = 1); false when one overflows int64. */
bool st_arch_dims(const st_arch_sizes *s, int64_t dims[ST_DIM_COUNT]);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_ARCH_H */
