/* Hyperparameters from GGUF metadata, with llama.cpp's key names and defaults. Every value
 * is checked as it is read: its type, its range (ST_MODEL_MAX_* in model.h), floats finite,
 * and every product the model forms from them in checked 64-bit arithmetic, so that the
 * tensor checks (model_validate.c) and everything after them can trust st_hparams. An
 * error names the key, the value found and the range expected. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "stride/model.h"

typedef struct reader {
    const st_gguf_file *f;
    const char *arch; /* key prefix */
    st_error *err;
} reader;

static const char *arch_key(const reader *r, const char *suffix, char *buf, size_t size) {
    snprintf(buf, size, "%s.%s", r->arch, suffix);
    return buf;
}

/* Integer key `<arch>.<suffix>` in [lo, hi]; `def` when absent (required keys pass
 * required = true). *present says whether the file has it (may be NULL). */
static st_status get_int(const reader *r, const char *suffix, bool required, int64_t def, int64_t lo, int64_t hi,
                         int64_t *out, bool *present) {
    char key[128];
    arch_key(r, suffix, key, sizeof(key));
    if (present) *present = st_gguf_find(r->f, key) != NULL;
    if (!st_gguf_find(r->f, key)) {
        if (required) return st_error_set(r->err, ST_ERROR_FORMAT, "missing required metadata key '%s'", key);
        *out = def;
        return ST_OK;
    }
    int64_t v;
    st_status s = st_gguf_get_i64(r->f, key, &v, r->err);
    if (s != ST_OK) return s;
    if (v < lo || v > hi)
        return st_error_set(r->err, ST_ERROR_FORMAT, "metadata key '%s' is %lld, expected %lld..%lld", key,
                            (long long)v, (long long)lo, (long long)hi);
    *out = v;
    return ST_OK;
}

/* Float key, finite and in (lo, hi] (lo exclusive: every float key stride reads must be
 * positive); `def` when absent. */
static st_status get_float(const reader *r, const char *suffix, double def, double lo, double hi, float *out) {
    char key[128];
    arch_key(r, suffix, key, sizeof(key));
    if (!st_gguf_find(r->f, key)) {
        *out = (float)def;
        return ST_OK;
    }
    double v;
    st_status s = st_gguf_get_f64(r->f, key, &v, r->err);
    if (s != ST_OK) return s;
    if (!isfinite(v) || !(v > lo) || v > hi)
        return st_error_set(r->err, ST_ERROR_FORMAT, "metadata key '%s' is %g, expected a finite value in (%g, %g]",
                            key, v, lo, hi);
    *out = (float)v; /* in range: the conversion is defined */
    /* the model computes with the f32 value: a float64 that rounds to the bound is out of
     * range too (an epsilon of 1e-60 is 0 in f32, and a norm of a zero row then divides by 0) */
    if (!((double)*out > lo))
        return st_error_set(r->err, ST_ERROR_FORMAT,
                            "metadata key '%s' is %g, which is %g as the float32 the model computes with; "
                            "expected a value in (%g, %g]",
                            key, v, (double)*out, lo, hi);
    return ST_OK;
}

#define TRY(expr)                                                                                                  \
    do {                                                                                                           \
        st_status try_s_ = (expr);                                                                                 \
        if (try_s_ != ST_OK) return try_s_;                                                                        \
    } while (0)

/* The widths the model forms from the head counts: in checked arithmetic, each within
 * ST_MODEL_MAX_DIM. */
static st_status check_widths(const reader *r, const st_hparams *hp) {
    st_arch_sizes sz = {.n_vocab = hp->n_vocab, .n_embd = hp->n_embd, .n_head = hp->n_head,
                        .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim, .n_ff = hp->n_ff,
                        .n_expert = hp->n_expert, .n_rot = hp->n_rot};
    int64_t dims[ST_DIM_COUNT];
    if (!st_arch_dims(&sz, dims))
        return st_error_set(r->err, ST_ERROR_FORMAT, "the %s hyperparameters overflow 64-bit sizes", r->arch);
    const st_arch_dim wide[] = {ST_DIM_Q, ST_DIM_KV, ST_DIM_QKV, ST_DIM_FF2};
    for (size_t i = 0; i < sizeof(wide) / sizeof(wide[0]); i++)
        if (dims[wide[i]] > ST_MODEL_MAX_DIM)
            return st_error_set(r->err, ST_ERROR_FORMAT,
                                "%s = %lld (head_count %lld, head_count_kv %lld, key_length %lld, "
                                "feed_forward_length %lld) exceeds %lld, the widest activation stride runs",
                                st_arch_dim_name(wide[i]), (long long)dims[wide[i]], (long long)hp->n_head,
                                (long long)hp->n_head_kv, (long long)hp->head_dim, (long long)hp->n_ff,
                                (long long)ST_MODEL_MAX_DIM);
    if (hp->n_expert > 0 && hp->n_ff * hp->n_expert_used > ST_MODEL_MAX_DIM) /* both <= 2^24: no overflow */
        return st_error_set(r->err, ST_ERROR_FORMAT,
                            "feed_forward_length %lld times expert_used_count %lld exceeds %lld, the widest "
                            "activation stride runs",
                            (long long)hp->n_ff, (long long)hp->n_expert_used, (long long)ST_MODEL_MAX_DIM);
    return ST_OK;
}

st_status st_hparams_from_gguf(const st_gguf_file *f, st_hparams *hp, st_error *err) {
    memset(hp, 0, sizeof(*hp));
    st_gguf_string arch_name;
    TRY(st_gguf_get_str(f, "general.architecture", &arch_name, err));
    hp->arch = st_arch_from_name(arch_name.data, (size_t)arch_name.len);
    if (hp->arch == ST_ARCH_UNKNOWN) {
        char shown[96];
        return st_error_set(err, ST_ERROR_UNSUPPORTED,
                            "architecture '%s' is not supported (stride runs llama, qwen3, gemma3, phi3, olmoe)",
                            st_gguf_format_string(shown, sizeof(shown), arch_name.data, arch_name.len));
    }
    reader r = {f, st_arch_name(hp->arch), err};

    /* the vocabulary is token_embd's rows (llama.cpp: the tokenizer's size, which must
     * match them; model_validate.c checks that) */
    const st_gguf_tensor_info *embd = st_gguf_find_tensor(f, "token_embd.weight");
    if (!embd)
        return st_error_set(err, ST_ERROR_FORMAT, "missing tensor 'token_embd.weight' (the token embeddings, "
                                                  "[n_embd, n_vocab])");
    if (embd->n_dims != 2 || embd->ne[1] > ST_MODEL_MAX_VOCAB)
        return st_error_set(err, ST_ERROR_FORMAT,
                            "tensor 'token_embd.weight' has %u dimensions and %lld rows; expected 2 dimensions and "
                            "at most %lld rows (token ids are 32-bit)",
                            embd->n_dims, (long long)embd->ne[1], (long long)ST_MODEL_MAX_VOCAB);
    hp->n_vocab = embd->ne[1];

    TRY(get_int(&r, "embedding_length", true, 0, 1, ST_MODEL_MAX_DIM, &hp->n_embd, NULL));
    TRY(get_int(&r, "block_count", true, 0, 1, ST_MODEL_MAX_LAYERS, &hp->n_layer, NULL));
    TRY(get_int(&r, "feed_forward_length", true, 0, 1, ST_MODEL_MAX_DIM, &hp->n_ff, NULL));
    TRY(get_int(&r, "attention.head_count", true, 0, 1, ST_MODEL_MAX_HEADS, &hp->n_head, NULL));
    TRY(get_int(&r, "attention.head_count_kv", false, hp->n_head, 1, hp->n_head, &hp->n_head_kv, NULL));
    if (hp->n_head % hp->n_head_kv != 0)
        return st_error_set(err, ST_ERROR_FORMAT,
                            "%s.attention.head_count %lld is not a multiple of attention.head_count_kv %lld (each "
                            "key/value head serves a whole group of query heads)",
                            r.arch, (long long)hp->n_head, (long long)hp->n_head_kv);
    TRY(get_int(&r, "context_length", false, 4096, 1, ST_MODEL_MAX_CTX, &hp->n_ctx_train, NULL));

    /* head size: attention.key_length, or n_embd / n_head as llama.cpp derives it */
    bool have_key_length = false, have_value_length = false;
    TRY(get_int(&r, "attention.key_length", false, 0, 2, ST_MODEL_MAX_HEAD_DIM, &hp->head_dim, &have_key_length));
    if (!have_key_length) {
        if (hp->n_embd % hp->n_head != 0 || hp->n_embd / hp->n_head < 2)
            return st_error_set(err, ST_ERROR_FORMAT,
                                "%s.attention.key_length is absent and embedding_length %lld / head_count %lld "
                                "gives no whole head size of at least 2: the file must state the head size",
                                r.arch, (long long)hp->n_embd, (long long)hp->n_head);
        hp->head_dim = hp->n_embd / hp->n_head;
        if (hp->head_dim > ST_MODEL_MAX_HEAD_DIM)
            return st_error_set(err, ST_ERROR_FORMAT,
                                "the head size embedding_length %lld / head_count %lld = %lld (%s.attention.key_length "
                                "is absent) exceeds %lld, the largest stride runs",
                                (long long)hp->n_embd, (long long)hp->n_head, (long long)hp->head_dim, r.arch,
                                (long long)ST_MODEL_MAX_HEAD_DIM);
    }
    int64_t value_length;
    TRY(get_int(&r, "attention.value_length", false, hp->head_dim, 1, ST_MODEL_MAX_HEAD_DIM, &value_length,
                &have_value_length));
    if (value_length != hp->head_dim)
        return st_error_set(err, ST_ERROR_UNSUPPORTED,
                            "%s.attention.value_length %lld differs from the key head size %lld (%s): stride needs "
                            "equal key and value head sizes",
                            r.arch, (long long)value_length, (long long)hp->head_dim,
                            have_key_length ? "attention.key_length" : "embedding_length / head_count");
    if (hp->head_dim % 2 != 0)
        return st_error_set(err, ST_ERROR_UNSUPPORTED, "the head size %lld (%s) is odd: rotary embeddings need pairs",
                            (long long)hp->head_dim,
                            have_key_length ? "attention.key_length" : "embedding_length / head_count");
    TRY(get_int(&r, "rope.dimension_count", false, hp->head_dim, 2, hp->head_dim, &hp->n_rot, NULL));
    if (hp->n_rot % 2 != 0)
        return st_error_set(err, ST_ERROR_FORMAT, "%s.rope.dimension_count %lld is odd: rotary dimensions come in pairs",
                            r.arch, (long long)hp->n_rot);
    TRY(get_float(&r, "rope.freq_base", 10000.0, 0.0, FLT_MAX, &hp->rope_freq_base));
    TRY(get_float(&r, "attention.layer_norm_rms_epsilon", 1e-5, 0.0, 1.0, &hp->rms_eps));
    hp->rope_freq_scale = 1.0f;
    hp->rope_freq_base_swa = hp->rope_freq_base;
    hp->embd_scale = 1.0f;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->rope_attn_factor = 1.0f;
    hp->ffn_act = ST_FFN_ACT_SILU;
    hp->rope_mode = hp->arch == ST_ARCH_LLAMA ? ST_ROPE_MODE_NORM : ST_ROPE_MODE_NEOX;

    switch (hp->arch) {
    case ST_ARCH_GEMMA3:
        /* llama.cpp hard-codes the pattern (6) and the local base (10000); stride reads
         * them from metadata when present so that test models can use other values. */
        TRY(get_int(&r, "attention.sliding_window", false, 0, 0, INT32_MAX, &hp->sliding_window, NULL));
        TRY(get_int(&r, "attention.sliding_window_pattern", false, 6, 0, INT32_MAX, &hp->swa_pattern, NULL));
        TRY(get_float(&r, "rope.freq_base_swa", 10000.0, 0.0, FLT_MAX, &hp->rope_freq_base_swa));
        hp->embd_scale = sqrtf((float)hp->n_embd);
        hp->ffn_act = ST_FFN_ACT_GELU_TANH;
        break;
    case ST_ARCH_OLMOE:
        TRY(get_int(&r, "expert_count", true, 0, 1, ST_MODEL_MAX_EXPERTS, &hp->n_expert, NULL));
        TRY(get_int(&r, "expert_used_count", true, 0, 1, hp->n_expert, &hp->n_expert_used, NULL));
        TRY(get_int(&r, "expert_feed_forward_length", false, hp->n_ff, 1, ST_MODEL_MAX_DIM, &hp->n_ff, NULL));
        hp->expert_weights_norm = false; /* OLMoE is trained with norm_topk_prob = false */
        break;
    case ST_ARCH_PHI3:
        TRY(get_int(&r, "rope.scaling.original_context_length", false, 0, 0, ST_MODEL_MAX_CTX, &hp->n_ctx_orig, NULL));
        TRY(get_float(&r, "rope.scaling.attn_factor", 1.0, 0.0, 1e6, &hp->rope_attn_factor));
        TRY(get_int(&r, "attention.sliding_window", false, 0, 0, INT32_MAX, &hp->sliding_window, NULL));
        break;
    default: break;
    }
    return check_widths(&r, hp);
}

bool st_hparams_layer_is_swa(const st_hparams *hp, int64_t il) {
    if (hp->sliding_window <= 0) return false;
    if (hp->swa_pattern <= 0) return true; /* every layer slides (phi3 with a window) */
    return (il + 1) % hp->swa_pattern != 0;
}
