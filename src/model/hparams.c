/* Hyperparameters from GGUF metadata, with llama.cpp's key names and defaults. */
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

/* Integer key; `def` when absent (required keys pass def < 0). */
static st_status get_int(const reader *r, const char *suffix, int64_t def, int64_t *out) {
    char key[128];
    arch_key(r, suffix, key, sizeof(key));
    if (!st_gguf_find(r->f, key)) {
        if (def < 0) return st_error_set(r->err, ST_ERROR_FORMAT, "missing required metadata key '%s'", key);
        *out = def;
        return ST_OK;
    }
    return st_gguf_get_i64(r->f, key, out, r->err);
}

static st_status get_float(const reader *r, const char *suffix, double def, float *out) {
    char key[128];
    arch_key(r, suffix, key, sizeof(key));
    if (!st_gguf_find(r->f, key)) {
        *out = (float)def;
        return ST_OK;
    }
    double v;
    st_status s = st_gguf_get_f64(r->f, key, &v, r->err);
    if (s == ST_OK) *out = (float)v;
    return s;
}

static int32_t token_id(const st_gguf_file *f, const char *key) {
    int64_t v;
    if (!st_gguf_find(f, key) || st_gguf_get_i64(f, key, &v, NULL) != ST_OK || v < 0 || v > INT32_MAX) return -1;
    return (int32_t)v;
}

#define TRY(expr)                                                                                                  \
    do {                                                                                                           \
        st_status try_s_ = (expr);                                                                                 \
        if (try_s_ != ST_OK) return try_s_;                                                                        \
    } while (0)

st_status st_hparams_from_gguf(const st_gguf_file *f, st_hparams *hp, st_error *err) {
    memset(hp, 0, sizeof(*hp));
    st_gguf_string arch_name;
    TRY(st_gguf_get_str(f, "general.architecture", &arch_name, err));
    hp->arch = st_arch_from_name(arch_name.data, (size_t)arch_name.len);
    if (hp->arch == ST_ARCH_UNKNOWN)
        return st_error_set(err, ST_ERROR_UNSUPPORTED,
                            "architecture '%.*s' is not supported (stride runs llama, qwen3, gemma3, phi3, olmoe)",
                            (int)(arch_name.len > 64 ? 64 : arch_name.len), arch_name.data);
    reader r = {f, st_arch_name(hp->arch), err};

    TRY(get_int(&r, "embedding_length", -1, &hp->n_embd));
    TRY(get_int(&r, "block_count", -1, &hp->n_layer));
    TRY(get_int(&r, "feed_forward_length", -1, &hp->n_ff));
    TRY(get_int(&r, "attention.head_count", -1, &hp->n_head));
    TRY(get_int(&r, "attention.head_count_kv", hp->n_head, &hp->n_head_kv));
    TRY(get_int(&r, "context_length", 4096, &hp->n_ctx_train));
    if (hp->n_embd <= 0 || hp->n_layer <= 0 || hp->n_head <= 0 || hp->n_head_kv <= 0 || hp->n_ff <= 0 ||
        hp->n_head % hp->n_head_kv != 0)
        return st_error_set(err, ST_ERROR_FORMAT,
                            "inconsistent hyperparameters: n_embd %lld, n_layer %lld, n_head %lld, n_head_kv %lld, "
                            "n_ff %lld (n_head must be a positive multiple of n_head_kv)",
                            (long long)hp->n_embd, (long long)hp->n_layer, (long long)hp->n_head,
                            (long long)hp->n_head_kv, (long long)hp->n_ff);
    TRY(get_int(&r, "attention.key_length", hp->n_embd / hp->n_head, &hp->head_dim));
    int64_t value_length;
    TRY(get_int(&r, "attention.value_length", hp->head_dim, &value_length));
    if (value_length != hp->head_dim || hp->head_dim <= 0 || hp->head_dim % 2 != 0)
        return st_error_set(err, ST_ERROR_UNSUPPORTED, "key_length %lld and value_length %lld must be equal and even",
                            (long long)hp->head_dim, (long long)value_length);
    TRY(get_int(&r, "rope.dimension_count", hp->head_dim, &hp->n_rot));
    if (hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0)
        return st_error_set(err, ST_ERROR_FORMAT, "rope.dimension_count %lld must be even and <= head dim %lld",
                            (long long)hp->n_rot, (long long)hp->head_dim);
    TRY(get_float(&r, "rope.freq_base", 10000.0, &hp->rope_freq_base));
    TRY(get_float(&r, "attention.layer_norm_rms_epsilon", 1e-5, &hp->rms_eps));
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
        TRY(get_int(&r, "attention.sliding_window", 0, &hp->sliding_window));
        TRY(get_int(&r, "attention.sliding_window_pattern", 6, &hp->swa_pattern));
        TRY(get_float(&r, "rope.freq_base_swa", 10000.0, &hp->rope_freq_base_swa));
        hp->embd_scale = sqrtf((float)hp->n_embd);
        hp->ffn_act = ST_FFN_ACT_GELU_TANH;
        break;
    case ST_ARCH_OLMOE:
        TRY(get_int(&r, "expert_count", -1, &hp->n_expert));
        TRY(get_int(&r, "expert_used_count", -1, &hp->n_expert_used));
        TRY(get_int(&r, "expert_feed_forward_length", hp->n_ff, &hp->n_ff));
        if (hp->n_expert <= 0 || hp->n_expert_used <= 0 || hp->n_expert_used > hp->n_expert)
            return st_error_set(err, ST_ERROR_FORMAT, "expert_used_count %lld must be in 1..expert_count (%lld)",
                                (long long)hp->n_expert_used, (long long)hp->n_expert);
        hp->expert_weights_norm = false; /* OLMoE is trained with norm_topk_prob = false */
        break;
    case ST_ARCH_PHI3:
        TRY(get_int(&r, "rope.scaling.original_context_length", 0, &hp->n_ctx_orig));
        TRY(get_float(&r, "rope.scaling.attn_factor", 1.0, &hp->rope_attn_factor));
        TRY(get_int(&r, "attention.sliding_window", 0, &hp->sliding_window));
        break;
    default: break;
    }
    if (hp->sliding_window < 0 || hp->swa_pattern < 0)
        return st_error_set(err, ST_ERROR_FORMAT, "negative sliding window (%lld) or pattern (%lld)",
                            (long long)hp->sliding_window, (long long)hp->swa_pattern);

    const st_gguf_tensor_info *embd = st_gguf_find_tensor(f, "token_embd.weight");
    if (!embd) return st_error_set(err, ST_ERROR_FORMAT, "missing tensor 'token_embd.weight'");
    hp->n_vocab = embd->ne[1];
    hp->bos_id = token_id(f, "tokenizer.ggml.bos_token_id");
    hp->eos_id = token_id(f, "tokenizer.ggml.eos_token_id");
    return ST_OK;
}

bool st_hparams_layer_is_swa(const st_hparams *hp, int64_t il) {
    if (hp->sliding_window <= 0) return false;
    if (hp->swa_pattern <= 0) return true; /* every layer slides (phi3 with a window) */
    return (il + 1) % hp->swa_pattern != 0;
}
