/*
 * The architecture descriptors: for each architecture stride knows, every tensor
 * llama.cpp's converter writes (llama-arch.cpp, llama-model.cpp) with the op that consumes
 * it (its role), whether stride's forward pass reads it, its shape from the
 * hyperparameters and the types it may have (arch.h). The layout planner, the model
 * validator and loader, and synth all read these tables; nothing else lists tensors.
 *
 * A role says which op reads the tensor, so the padding rule can be applied to GEMM
 * weights (src0 of mul_mat / mul_mat_id) and nothing else. A name that is not in its
 * architecture's table is ST_ROLE_UNKNOWN and is left packed.
 *
 * Pattern syntax: literal bytes, except '#', which matches a layer number: one or more
 * decimal digits, no sign, no leading zero unless the number is exactly "0".
 *
 * Entries are in the order the converter writes them, which is the order synth writes
 * them: computed rope factors and token_embd, each layer's tensors, output_norm, output.
 */
#include "stride/arch.h"

#include <stdio.h>
#include <string.h>

#include "stride/status.h"

#define D1(a) 1, {ST_DIM_##a, ST_DIM_NONE, ST_DIM_NONE}
#define D2(a, b) 2, {ST_DIM_##a, ST_DIM_##b, ST_DIM_NONE}
#define D3(a, b, c) 3, {ST_DIM_##a, ST_DIM_##b, ST_DIM_##c}

/* A required entry of the given role and type class; shape through D1/D2/D3. */
#define ENTRY(pat, kind, role, types, shape) \
    {pat, ST_TENSOR_##kind, ST_ROLE_##role, ST_NEED_REQUIRED, ST_FEATURE_NONE, 0, ST_ARCH_TYPES_##types, shape}
/* RMSNorm weights, f32 [n] */
#define NORM(pat, kind, n) ENTRY(pat, kind, NORM, F32, D1(n))
/* dense product weights [K, N] */
#define MAT(pat, kind, k, n) ENTRY(pat, kind, GEMM, WEIGHT, D2(k, n))
/* the same, one of two alternative forms of a layer's computation (alt 1 or 2) */
#define MAT_ALT(pat, kind, k, n, alt) \
    {pat, ST_TENSOR_##kind, ST_ROLE_GEMM, ST_NEED_REQUIRED, ST_FEATURE_NONE, alt, ST_ARCH_TYPES_WEIGHT, D2(k, n)}
/* an optional tensor, present in the models that have `feature` */
#define OPTIONAL(pat, kind, role, types, feature, shape) \
    {pat, ST_TENSOR_##kind, ST_ROLE_##role, ST_NEED_OPTIONAL, ST_FEATURE_##feature, 0, ST_ARCH_TYPES_##types, shape}
/* a tensor of the architecture that stride's forward pass does not read */
#define UNUSED(pat, kind, role, types, shape) \
    {pat, ST_TENSOR_##kind, ST_ROLE_##role, ST_NEED_UNUSED, ST_FEATURE_NONE, 0, ST_ARCH_TYPES_##types, shape}

/* Token embeddings [n_embd, n_vocab]: read by row, also by the output when tied. */
#define TOKEN_EMBD ENTRY("token_embd.weight", TOKEN_EMBD, ROW_LOOKUP, WEIGHT, D2(EMBD, VOCAB))

/* The final norm, and the output head (absent when it is tied to token_embd). */
#define OUTPUT                                                     \
    NORM("output_norm.weight", OUTPUT_NORM, EMBD),                 \
    OPTIONAL("output.weight", OUTPUT, GEMM, WEIGHT, UNTIED_OUTPUT, D2(EMBD, VOCAB))

#define ATTN_NORM NORM("blk.#.attn_norm.weight", ATTN_NORM, EMBD)

#define SEPARATE_QKV                                               \
    MAT("blk.#.attn_q.weight", ATTN_Q, EMBD, Q),                   \
    MAT("blk.#.attn_k.weight", ATTN_K, EMBD, KV),                  \
    MAT("blk.#.attn_v.weight", ATTN_V, EMBD, KV)

/* q/k RMSNorm per head [head_dim] (qwen3, gemma3) */
#define QK_NORM_PER_HEAD                                           \
    NORM("blk.#.attn_q_norm.weight", ATTN_Q_NORM, HEAD),           \
    NORM("blk.#.attn_k_norm.weight", ATTN_K_NORM, HEAD)

#define ATTN_OUTPUT MAT("blk.#.attn_output.weight", ATTN_OUTPUT, Q, EMBD)
#define FFN_NORM NORM("blk.#.ffn_norm.weight", FFN_NORM, EMBD)

#define DENSE_FFN                                                  \
    MAT("blk.#.ffn_gate.weight", FFN_GATE, EMBD, FF),              \
    MAT("blk.#.ffn_up.weight", FFN_UP, EMBD, FF),                  \
    MAT("blk.#.ffn_down.weight", FFN_DOWN, FF, EMBD)

/* Mixture of experts: the router is a dense mul_mat [n_embd, n_expert], the experts a
 * mul_mat_id over ne = {K, N, E}. */
#define MOE_FFN                                                                        \
    ENTRY("blk.#.ffn_gate_inp.weight", FFN_GATE_INP, ROUTER, WEIGHT, D2(EMBD, EXPERT)), \
    ENTRY("blk.#.ffn_gate_exps.weight", FFN_GATE_EXPS, GEMM_EXPERTS, WEIGHT, D3(EMBD, FF, EXPERT)), \
    ENTRY("blk.#.ffn_up_exps.weight", FFN_UP_EXPS, GEMM_EXPERTS, WEIGHT, D3(EMBD, FF, EXPERT)), \
    ENTRY("blk.#.ffn_down_exps.weight", FFN_DOWN_EXPS, GEMM_EXPERTS, WEIGHT, D3(FF, EMBD, EXPERT))

static const st_arch_tensor llama_tensors[] = {
    /* llama3-style rope scaling: one factor per rotary frequency */
    OPTIONAL("rope_freqs.weight", ROPE_FREQS, ROPE_FACTORS, F32, ROPE_FREQS, D1(ROT_HALF)),
    TOKEN_EMBD,
    ATTN_NORM,
    SEPARATE_QKV,
    ATTN_OUTPUT,
    FFN_NORM,
    DENSE_FFN,
    /* llama.cpp loads these optionally (attention_bias / mlp_bias in the HF config);
     * stride's forward pass adds no biases */
    UNUSED("blk.#.attn_q.bias", BIAS, BIAS, F32, D1(Q)),
    UNUSED("blk.#.attn_k.bias", BIAS, BIAS, F32, D1(KV)),
    UNUSED("blk.#.attn_v.bias", BIAS, BIAS, F32, D1(KV)),
    UNUSED("blk.#.attn_output.bias", BIAS, BIAS, F32, D1(EMBD)),
    UNUSED("blk.#.ffn_gate.bias", BIAS, BIAS, F32, D1(FF)),
    UNUSED("blk.#.ffn_up.bias", BIAS, BIAS, F32, D1(FF)),
    UNUSED("blk.#.ffn_down.bias", BIAS, BIAS, F32, D1(EMBD)),
    /* Mixtral-style MoE is converted as arch "llama"; stride runs MoE as olmoe only */
    UNUSED("blk.#.ffn_gate_inp.weight", FFN_GATE_INP, ROUTER, WEIGHT, D2(EMBD, EXPERT)),
    UNUSED("blk.#.ffn_gate_exps.weight", FFN_GATE_EXPS, GEMM_EXPERTS, WEIGHT, D3(EMBD, FF, EXPERT)),
    UNUSED("blk.#.ffn_up_exps.weight", FFN_UP_EXPS, GEMM_EXPERTS, WEIGHT, D3(EMBD, FF, EXPERT)),
    UNUSED("blk.#.ffn_down_exps.weight", FFN_DOWN_EXPS, GEMM_EXPERTS, WEIGHT, D3(FF, EMBD, EXPERT)),
    OUTPUT,
};

static const st_arch_tensor qwen3_tensors[] = {
    TOKEN_EMBD,
    ATTN_NORM,
    SEPARATE_QKV,
    QK_NORM_PER_HEAD,
    ATTN_OUTPUT,
    FFN_NORM,
    DENSE_FFN,
    OUTPUT,
};

static const st_arch_tensor gemma3_tensors[] = {
    TOKEN_EMBD,
    ATTN_NORM,
    SEPARATE_QKV,
    QK_NORM_PER_HEAD,
    ATTN_OUTPUT,
    NORM("blk.#.post_attention_norm.weight", POST_ATTN_NORM, EMBD),
    FFN_NORM,
    DENSE_FFN,
    NORM("blk.#.post_ffw_norm.weight", POST_FFN_NORM, EMBD),
    OUTPUT,
};

static const st_arch_tensor phi3_tensors[] = {
    /* long rope: one factor per rotary frequency for each regime */
    OPTIONAL("rope_factors_long.weight", ROPE_FACTORS_LONG, ROPE_FACTORS, F32, LONG_ROPE, D1(ROT_HALF)),
    OPTIONAL("rope_factors_short.weight", ROPE_FACTORS_SHORT, ROPE_FACTORS, F32, LONG_ROPE, D1(ROT_HALF)),
    TOKEN_EMBD,
    ATTN_NORM,
    /* fused q|k|v; llama.cpp's phi3 graph falls back to separate projections when it is
     * absent */
    MAT_ALT("blk.#.attn_qkv.weight", ATTN_QKV, EMBD, QKV, 1),
    MAT_ALT("blk.#.attn_q.weight", ATTN_Q, EMBD, Q, 2),
    MAT_ALT("blk.#.attn_k.weight", ATTN_K, EMBD, KV, 2),
    MAT_ALT("blk.#.attn_v.weight", ATTN_V, EMBD, KV, 2),
    ATTN_OUTPUT,
    FFN_NORM,
    /* fused gate|up, gate rows first; no separate ffn_gate in phi3 */
    MAT("blk.#.ffn_up.weight", FFN_UP, EMBD, FF2),
    MAT("blk.#.ffn_down.weight", FFN_DOWN, FF, EMBD),
    OUTPUT,
};

static const st_arch_tensor olmoe_tensors[] = {
    TOKEN_EMBD,
    ATTN_NORM,
    SEPARATE_QKV,
    /* RMSNorm over the full q and k projections */
    NORM("blk.#.attn_q_norm.weight", ATTN_Q_NORM, Q),
    NORM("blk.#.attn_k_norm.weight", ATTN_K_NORM, KV),
    ATTN_OUTPUT,
    FFN_NORM,
    MOE_FFN,
    OUTPUT,
};

typedef struct arch_table {
    const char *name; /* general.architecture */
    const st_arch_tensor *tensors;
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

/* Matches name[0..len) against a NUL-terminated pattern (see the syntax at the top);
 * *layer gets the number '#' matched (saturated), -1 when the pattern has none. */
static bool pattern_match(const char *pattern, const char *name, size_t len, int64_t *layer) {
    size_t i = 0;
    *layer = -1;
    for (const char *p = pattern; *p; p++) {
        if (*p == '#') {
            if (i >= len || !is_digit(name[i])) return false;
            if (name[i] == '0') {
                i++; /* "0" alone; "01" must not match */
                if (i < len && is_digit(name[i])) return false;
                *layer = 0;
                continue;
            }
            int64_t v = 0;
            while (i < len && is_digit(name[i])) {
                int d = name[i] - '0';
                v = v > (INT64_MAX - d) / 10 ? INT64_MAX : v * 10 + d;
                i++;
            }
            *layer = v;
            continue;
        }
        if (i >= len || name[i] != *p) return false;
        i++;
    }
    return i == len;
}

const st_arch_tensor *st_arch_tensors(st_arch arch, size_t *n) {
    if ((unsigned)arch >= ST_ARCH_COUNT || arch == ST_ARCH_UNKNOWN) {
        *n = 0;
        return NULL;
    }
    *n = arch_tables[arch].n;
    return arch_tables[arch].tensors;
}

const st_arch_tensor *st_arch_match(st_arch arch, const char *name, size_t len, int64_t *layer) {
    *layer = -1;
    size_t n;
    const st_arch_tensor *t = st_arch_tensors(arch, &n);
    if (!name) return NULL;
    for (size_t i = 0; i < n; i++)
        if (pattern_match(t[i].pattern, name, len, layer)) return &t[i];
    *layer = -1;
    return NULL;
}

st_tensor_role st_arch_tensor_role(st_arch arch, const char *name, size_t len) {
    int64_t layer;
    const st_arch_tensor *t = st_arch_match(arch, name, len, &layer);
    return t ? t->role : ST_ROLE_UNKNOWN;
}

bool st_arch_tensor_per_layer(const st_arch_tensor *t) { return strncmp(t->pattern, "blk.#.", 6) == 0; }

int st_arch_tensor_name(const st_arch_tensor *t, int64_t layer, char *buf, size_t size) {
    if (!st_arch_tensor_per_layer(t)) return snprintf(buf, size, "%s", t->pattern);
    return snprintf(buf, size, "blk.%lld.%s", (long long)layer, t->pattern + 6);
}

const char *st_arch_dim_name(st_arch_dim dim) {
    switch (dim) {
    case ST_DIM_NONE: return "1";
    case ST_DIM_EMBD: return "n_embd";
    case ST_DIM_VOCAB: return "n_vocab";
    case ST_DIM_HEAD: return "head_dim";
    case ST_DIM_Q: return "n_head*head_dim";
    case ST_DIM_KV: return "n_head_kv*head_dim";
    case ST_DIM_QKV: return "(n_head+2*n_head_kv)*head_dim";
    case ST_DIM_FF: return "n_ff";
    case ST_DIM_FF2: return "2*n_ff";
    case ST_DIM_EXPERT: return "n_expert";
    case ST_DIM_ROT_HALF: return "n_rot/2";
    case ST_DIM_COUNT: break;
    }
    return "?";
}

static bool mul_ok(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0 || (a != 0 && b > INT64_MAX / a)) return false;
    *out = a * b;
    return true;
}

static bool add_ok(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0 || a > INT64_MAX - b) return false;
    *out = a + b;
    return true;
}

bool st_arch_dims(const st_arch_sizes *s, int64_t dims[ST_DIM_COUNT]) {
    int64_t kv2;
    dims[ST_DIM_NONE] = 1;
    dims[ST_DIM_EMBD] = s->n_embd;
    dims[ST_DIM_VOCAB] = s->n_vocab;
    dims[ST_DIM_HEAD] = s->head_dim;
    dims[ST_DIM_FF] = s->n_ff;
    dims[ST_DIM_EXPERT] = s->n_expert;
    dims[ST_DIM_ROT_HALF] = s->n_rot / 2;
    return mul_ok(s->n_head, s->head_dim, &dims[ST_DIM_Q]) && mul_ok(s->n_head_kv, s->head_dim, &dims[ST_DIM_KV]) &&
           mul_ok(2, dims[ST_DIM_KV], &kv2) && add_ok(dims[ST_DIM_Q], kv2, &dims[ST_DIM_QKV]) &&
           mul_ok(2, s->n_ff, &dims[ST_DIM_FF2]);
}
