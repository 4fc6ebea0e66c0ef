/*
 * Architecture tables: for each architecture stride knows, the tensor names llama.cpp's
 * converter writes (llama-arch.cpp) and the op that consumes each one (its role).
 *
 * A role says which op reads the tensor, so the padding rule can be applied to GEMM
 * weights (src0 of mul_mat / mul_mat_id) and nothing else. A name that is not in its
 * architecture's table is ST_ROLE_UNKNOWN and is left packed.
 *
 * Pattern syntax: literal bytes, except '#', which matches a layer number: one or more
 * decimal digits, no sign, no leading zero unless the number is exactly "0".
 */
#include "stride/arch.h"

#include <string.h>

#include "stride/status.h"

typedef struct arch_tensor {
    const char *pattern;
    st_tensor_role role;
} arch_tensor;

/* Tensors every supported decoder has, in the names of llama.cpp's LLM_TENSOR_*. */
#define ARCH_COMMON                                          \
    {"token_embd.weight", ST_ROLE_ROW_LOOKUP},               \
    {"output_norm.weight", ST_ROLE_NORM},                    \
    /* absent when the output is tied to token_embd */       \
    {"output.weight", ST_ROLE_GEMM},                         \
    {"blk.#.attn_norm.weight", ST_ROLE_NORM},                \
    {"blk.#.attn_output.weight", ST_ROLE_GEMM},              \
    {"blk.#.ffn_norm.weight", ST_ROLE_NORM}

#define ARCH_SEPARATE_QKV                                    \
    {"blk.#.attn_q.weight", ST_ROLE_GEMM},                   \
    {"blk.#.attn_k.weight", ST_ROLE_GEMM},                   \
    {"blk.#.attn_v.weight", ST_ROLE_GEMM}

#define ARCH_DENSE_FFN                                       \
    {"blk.#.ffn_gate.weight", ST_ROLE_GEMM},                 \
    {"blk.#.ffn_up.weight", ST_ROLE_GEMM},                   \
    {"blk.#.ffn_down.weight", ST_ROLE_GEMM}

/* Mixture of experts: the router is a dense mul_mat, the experts a mul_mat_id over
 * ne = {K, N, E}. */
#define ARCH_MOE_FFN                                         \
    {"blk.#.ffn_gate_inp.weight", ST_ROLE_ROUTER},           \
    {"blk.#.ffn_gate_exps.weight", ST_ROLE_GEMM_EXPERTS},    \
    {"blk.#.ffn_up_exps.weight", ST_ROLE_GEMM_EXPERTS},      \
    {"blk.#.ffn_down_exps.weight", ST_ROLE_GEMM_EXPERTS}

#define ARCH_QK_NORM                                         \
    {"blk.#.attn_q_norm.weight", ST_ROLE_NORM},              \
    {"blk.#.attn_k_norm.weight", ST_ROLE_NORM}

static const arch_tensor llama_tensors[] = {
    ARCH_COMMON,
    ARCH_SEPARATE_QKV,
    ARCH_DENSE_FFN,
    /* llama3-style rope scaling: one factor per rotary frequency */
    {"rope_freqs.weight", ST_ROLE_ROPE_FACTORS},
    /* llama.cpp loads these optionally (attention_bias / mlp_bias in the HF config) */
    {"blk.#.attn_q.bias", ST_ROLE_BIAS},
    {"blk.#.attn_k.bias", ST_ROLE_BIAS},
    {"blk.#.attn_v.bias", ST_ROLE_BIAS},
    {"blk.#.attn_output.bias", ST_ROLE_BIAS},
    {"blk.#.ffn_gate.bias", ST_ROLE_BIAS},
    {"blk.#.ffn_up.bias", ST_ROLE_BIAS},
    {"blk.#.ffn_down.bias", ST_ROLE_BIAS},
    /* Mixtral-style MoE is converted as arch "llama" */
    ARCH_MOE_FFN,
};

static const arch_tensor qwen3_tensors[] = {
    ARCH_COMMON,
    ARCH_SEPARATE_QKV,
    ARCH_DENSE_FFN,
    ARCH_QK_NORM,
};

static const arch_tensor gemma3_tensors[] = {
    ARCH_COMMON,
    ARCH_SEPARATE_QKV,
    ARCH_DENSE_FFN,
    ARCH_QK_NORM,
    {"blk.#.post_attention_norm.weight", ST_ROLE_NORM},
    {"blk.#.post_ffw_norm.weight", ST_ROLE_NORM},
};

static const arch_tensor phi3_tensors[] = {
    ARCH_COMMON,
    /* fused q|k|v: ne = {n_embd, n_embd + 2*n_embd_kv} */
    {"blk.#.attn_qkv.weight", ST_ROLE_GEMM},
    /* llama.cpp's phi3 graph falls back to separate projections when qkv is absent */
    ARCH_SEPARATE_QKV,
    /* fused gate|up: ne = {n_embd, 2*n_ff}; no separate ffn_gate in phi3 */
    {"blk.#.ffn_up.weight", ST_ROLE_GEMM},
    {"blk.#.ffn_down.weight", ST_ROLE_GEMM},
    {"rope_factors_long.weight", ST_ROLE_ROPE_FACTORS},
    {"rope_factors_short.weight", ST_ROLE_ROPE_FACTORS},
};

static const arch_tensor olmoe_tensors[] = {
    ARCH_COMMON,
    ARCH_SEPARATE_QKV,
    /* RMSNorm over the full q and k projections (n_embd and n_embd_kv wide) */
    ARCH_QK_NORM,
    ARCH_MOE_FFN,
};

typedef struct arch_table {
    const char *name; /* general.architecture */
    const arch_tensor *tensors;
    size_t n;
} arch_table;

#define ARCH_TABLE(name, t) {name, t, sizeof(t) / sizeof((t)[0])}

static const arch_table arch_tables[ST_ARCH_COUNT] = {
    [ST_ARCH_UNKNOWN] = {"unknown", NULL, 0},
    [ST_ARCH_LLAMA] = ARCH_TABLE("llama", llama_tensors),
    [ST_ARCH_QWEN3] = ARCH_TABLE("qwen3", qwen3_tensors),
    [ST_ARCH_GEMMA3] = ARCH_TABLE("gemma3", gemma3_tensors),
    [ST_ARCH_PHI3] = ARCH_TABLE("phi3", phi3_tensors),
    [ST_ARCH_OLMOE] = ARCH_TABLE("olmoe", olmoe_tensors),
};

const char *st_arch_name(st_arch arch) {
    if ((unsigned)arch >= ST_ARCH_COUNT) return "unknown";
    return arch_tables[arch].name;
}

st_arch st_arch_from_name(const char *name, size_t len) {
    if (!name) return ST_ARCH_UNKNOWN;
    for (int a = ST_ARCH_UNKNOWN + 1; a < ST_ARCH_COUNT; a++) {
        const char *n = arch_tables[a].name;
        if (strlen(n) == len && memcmp(n, name, len) == 0) return (st_arch)a;
    }
    return ST_ARCH_UNKNOWN;
}

const char *st_tensor_role_name(st_tensor_role role) {
    switch (role) {
    case ST_ROLE_UNKNOWN: return "unknown";
    case ST_ROLE_GEMM: return "gemm";
    case ST_ROLE_GEMM_EXPERTS: return "gemm-experts";
    case ST_ROLE_ROUTER: return "router";
    case ST_ROLE_ROW_LOOKUP: return "row-lookup";
    case ST_ROLE_NORM: return "norm";
    case ST_ROLE_BIAS: return "bias";
    case ST_ROLE_ROPE_FACTORS: return "rope-factors";
    case ST_ROLE_COUNT: break;
    }
    return "unknown";
}

bool st_tensor_role_is_gemm_weight(st_tensor_role role) {
    return role == ST_ROLE_GEMM || role == ST_ROLE_GEMM_EXPERTS || role == ST_ROLE_ROUTER;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* Matches name[0..len) against a NUL-terminated pattern (see the syntax at the top). */
static bool pattern_match(const char *pattern, const char *name, size_t len) {
    size_t i = 0;
    for (const char *p = pattern; *p; p++) {
        if (*p == '#') {
            if (i >= len || !is_digit(name[i])) return false;
            if (name[i] == '0') {
                i++; /* "0" alone; "01" must not match */
                if (i < len && is_digit(name[i])) return false;
                continue;
            }
            while (i < len && is_digit(name[i])) i++;
            continue;
        }
        if (i >= len || name[i] != *p) return false;
        i++;
    }
    return i == len;
}

st_tensor_role st_arch_tensor_role(st_arch arch, const char *name, size_t len) {
    if ((unsigned)arch >= ST_ARCH_COUNT || !name) return ST_ROLE_UNKNOWN;
    const arch_table *t = &arch_tables[arch];
    for (size_t i = 0; i < t->n; i++)
        if (pattern_match(t->tensors[i].pattern, name, len)) return t->tensors[i].role;
    return ST_ROLE_UNKNOWN;
}
