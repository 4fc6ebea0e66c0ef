/*
 * The model validator (model.h): after the hyperparameters, every tensor of the file is
 * checked against its architecture's descriptor (arch.h, src/layout/arch_table.c) and the
 * vocabulary against token_embd. Nothing is allocated beyond a message; nothing runs. What
 * passes here is what the forward pass and the ops assert on, so that no file can reach
 * one of their asserts:
 *   - norms f32 of exactly their width (cpu_norm.c), q/k norms per head or per
 *     projection as the architecture has them;
 *   - products of a readable type with K = the input width and N = the output width
 *     (cpu_matmul.c, cpu_moe.c), experts [K, N, n_expert];
 *   - rope factors f32 [n_rot / 2], finite and positive (a zero factor divides), rope
 *     bases finite and positive, n_rot <= head_dim <= 1024 (hparams.c; cpu_rope.c);
 *   - token ids below token_embd's rows wherever the file names one.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "stride/model.h"
#include "stride/quant.h"

#define NAME_BUF 96

#define TRY(expr)                                                                                                  \
    do {                                                                                                           \
        st_status try_s_ = (expr);                                                                                 \
        if (try_s_ != ST_OK) return try_s_;                                                                        \
    } while (0)

static const char *tensor_name(const st_gguf_tensor_info *t, char *buf) {
    return st_gguf_format_string(buf, NAME_BUF, t->name.data, t->name.len);
}

/* "[64, 512]" */
static void format_found(const st_gguf_tensor_info *t, char *buf, size_t size) {
    size_t n = (size_t)snprintf(buf, size, "[");
    for (uint32_t d = 0; d < t->n_dims && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, d ? ", %lld" : "%lld", (long long)t->ne[d]);
    if (n < size) snprintf(buf + n, size - n, "]");
}

/* "[64 = n_embd, 512 = n_vocab]" */
static void format_expected(const st_arch_tensor *e, const int64_t dims[ST_DIM_COUNT], char *buf, size_t size) {
    size_t n = (size_t)snprintf(buf, size, "[");
    for (unsigned d = 0; d < e->n_dims && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld = %s", d ? ", " : "", (long long)dims[e->ne[d]],
                              st_arch_dim_name(e->ne[d]));
    if (n < size) snprintf(buf + n, size - n, "]");
}

static const char *role_phrase(st_tensor_role role) {
    switch (role) {
    case ST_ROLE_NORM: return "norm weights are read as f32";
    case ST_ROLE_ROPE_FACTORS: return "rope factors are read as f32";
    case ST_ROLE_BIAS: return "biases are read as f32";
    default: return "read as f32";
    }
}

static st_status check_type(const st_gguf_tensor_info *t, const st_arch_tensor *e, st_error *err) {
    char name[NAME_BUF];
    const st_type_traits *tr = st_type_get_traits((uint32_t)t->type); /* non-NULL: the reader checked */
    if (e->types == ST_ARCH_TYPES_F32) {
        if (t->type == ST_TYPE_F32) return ST_OK;
        return st_error_set(err, ST_ERROR_FORMAT, "tensor '%s' has type %s, expected f32 (%s)", tensor_name(t, name),
                            tr->name, role_phrase(e->role));
    }
    if (t->type == ST_TYPE_F32 || t->type == ST_TYPE_F16 || t->type == ST_TYPE_BF16) return ST_OK;
    if (tr->is_quantized && st_quant_supported(t->type)) return ST_OK;
    return st_error_set(err, ST_ERROR_UNSUPPORTED,
                        "tensor '%s' has type %s, which stride cannot read (it reads f32, f16, bf16 and the quantized "
                        "types %s)",
                        tensor_name(t, name), tr->name, st_quant_supported_list());
}

static st_status check_shape(const st_gguf_tensor_info *t, const st_arch_tensor *e, const int64_t dims[ST_DIM_COUNT],
                             st_error *err) {
    bool ok = true;
    for (unsigned d = 0; d < ST_GGUF_MAX_DIMS; d++) {
        int64_t want = d < e->n_dims && d < 3 ? dims[e->ne[d]] : 1;
        if (t->ne[d] != want) ok = false;
    }
    if (ok) return ST_OK;
    char name[NAME_BUF], found[128], expected[256];
    format_found(t, found, sizeof(found));
    format_expected(e, dims, expected, sizeof(expected));
    return st_error_set(err, ST_ERROR_FORMAT, "tensor '%s' has shape %s, expected %s", tensor_name(t, name), found,
                        expected);
}

/* Rope factors divide the rotary frequencies: each must be finite and positive. */
static st_status check_rope_factors(const st_gguf_tensor_info *t, st_error *err) {
    const unsigned char *p = t->data;
    for (int64_t i = 0; i < t->ne[0]; i++) {
        float v;
        memcpy(&v, p + (size_t)i * sizeof(float), sizeof(v)); /* f32, checked before */
        if (!isfinite(v) || !(v > 0.0f)) {
            char name[NAME_BUF];
            return st_error_set(err, ST_ERROR_FORMAT,
                                "tensor '%s' holds %g at index %lld: rope factors must be finite and positive",
                                tensor_name(t, name), (double)v, (long long)i);
        }
    }
    return ST_OK;
}

/* Every tensor of the file: known, read by the forward pass, in range, typed and shaped
 * as its entry says. *max_layer: the highest layer any tensor belongs to (-1: none). */
static st_status check_each_tensor(const st_gguf_file *f, const st_hparams *hp, const int64_t dims[ST_DIM_COUNT],
                                   int64_t *max_layer, st_error *err) {
    const char *arch = st_arch_name(hp->arch);
    *max_layer = -1;
    for (uint64_t i = 0; i < st_gguf_n_tensors(f); i++) {
        const st_gguf_tensor_info *t = st_gguf_get_tensor(f, i);
        char name[NAME_BUF];
        int64_t layer;
        const st_arch_tensor *e = st_arch_match(hp->arch, t->name.data, (size_t)t->name.len, &layer);
        if (!e)
            return st_error_set(err, ST_ERROR_UNSUPPORTED,
                                "tensor '%s' is not a tensor of the %s architecture: stride does not know what "
                                "computes with it",
                                tensor_name(t, name), arch);
        if (e->need == ST_NEED_UNUSED)
            return st_error_set(err, ST_ERROR_UNSUPPORTED,
                                "tensor '%s' (%s) is not read by stride's %s forward pass, which would compute "
                                "another model without it",
                                tensor_name(t, name), st_tensor_role_name(e->role), arch);
        if (layer >= hp->n_layer)
            return st_error_set(err, ST_ERROR_FORMAT, "tensor '%s' belongs to layer %lld, but %s.block_count is %lld",
                                tensor_name(t, name), (long long)layer, arch, (long long)hp->n_layer);
        if (layer > *max_layer) *max_layer = layer;
        TRY(check_type(t, e, err));
        TRY(check_shape(t, e, dims, err));
        if (e->role == ST_ROLE_ROPE_FACTORS) TRY(check_rope_factors(t, err));
    }
    return ST_OK;
}

static bool has(const st_gguf_file *f, const st_arch_tensor *e, int64_t layer) {
    char name[96];
    st_arch_tensor_name(e, layer, name, sizeof(name));
    return st_gguf_find_tensor(f, name) != NULL;
}

static st_status missing(const st_arch_tensor *e, int64_t layer, const st_hparams *hp, int64_t max_layer,
                         const int64_t dims[ST_DIM_COUNT], st_error *err) {
    char name[96], expected[256];
    st_arch_tensor_name(e, layer, name, sizeof(name));
    format_expected(e, dims, expected, sizeof(expected));
    if (layer > max_layer)
        return st_error_set(err, ST_ERROR_FORMAT,
                            "missing tensor '%s': %s.block_count is %lld but the file holds tensors of %lld layer(s)",
                            name, st_arch_name(hp->arch), (long long)hp->n_layer, (long long)max_layer + 1);
    return st_error_set(err, ST_ERROR_FORMAT, "missing tensor '%s' (%s %s, which the %s forward pass reads)", name,
                        st_tensor_role_name(e->role), expected, st_arch_name(hp->arch));
}

/* Every tensor the forward pass needs is there; of two alternative forms (alt 1 / 2),
 * exactly one, whole. */
static st_status check_required(const st_gguf_file *f, const st_hparams *hp, int64_t max_layer,
                                const int64_t dims[ST_DIM_COUNT], st_error *err) {
    size_t n;
    const st_arch_tensor *tab = st_arch_tensors(hp->arch, &n);
    for (size_t i = 0; i < n; i++)
        if (!st_arch_tensor_per_layer(&tab[i]) && tab[i].need == ST_NEED_REQUIRED && !has(f, &tab[i], -1))
            return missing(&tab[i], -1, hp, max_layer, dims, err);
    for (int64_t il = 0; il < hp->n_layer; il++) {
        bool alt1 = false, alt2 = false;
        for (size_t i = 0; i < n; i++) {
            if (!st_arch_tensor_per_layer(&tab[i]) || tab[i].alt == 0) continue;
            if (!has(f, &tab[i], il)) continue;
            if (tab[i].alt == 1) alt1 = true;
            else alt2 = true;
        }
        if (alt1 && alt2)
            return st_error_set(err, ST_ERROR_FORMAT,
                                "layer %lld holds both the fused and the separate form of a projection (e.g. "
                                "attn_qkv and attn_q): a layer holds one of them",
                                (long long)il);
        const unsigned want_alt = alt1 ? 1 : 2; /* neither: the separate form is missing */
        for (size_t i = 0; i < n; i++) {
            const st_arch_tensor *e = &tab[i];
            if (!st_arch_tensor_per_layer(e) || e->need != ST_NEED_REQUIRED) continue;
            if (e->alt != 0 && e->alt != want_alt) continue;
            if (!has(f, e, il)) return missing(e, il, hp, max_layer, dims, err);
        }
    }
    /* phi3 long rope picks one of the two sets by context length: both or neither */
    const st_gguf_tensor_info *lng = st_gguf_find_tensor(f, "rope_factors_long.weight");
    const st_gguf_tensor_info *shrt = st_gguf_find_tensor(f, "rope_factors_short.weight");
    if (!lng != !shrt)
        return st_error_set(err, ST_ERROR_FORMAT, "the file has %s but not %s: long rope needs both sets of factors",
                            lng ? "rope_factors_long.weight" : "rope_factors_short.weight",
                            lng ? "rope_factors_short.weight" : "rope_factors_long.weight");
    return ST_OK;
}

/* A token id named by the metadata: absent (-1), or an integer below n_vocab. */
static st_status token_id(const st_gguf_file *f, const char *key, int64_t n_vocab, int32_t *out, st_error *err) {
    *out = -1;
    if (!st_gguf_find(f, key)) return ST_OK;
    int64_t v;
    TRY(st_gguf_get_i64(f, key, &v, err));
    if (v < 0 || v >= n_vocab)
        return st_error_set(err, ST_ERROR_FORMAT,
                            "metadata key '%s' is %lld, outside the model's vocabulary of %lld tokens "
                            "(token_embd.weight's rows)",
                            key, (long long)v, (long long)n_vocab);
    *out = (int32_t)v;
    return ST_OK;
}

/* The tokenizer's vocabulary, where the file has one, is the model's: the same size as
 * token_embd's rows (as llama.cpp requires), so that every id the model can produce has a
 * piece and every id the tokenizer produces has an embedding. */
static st_status check_vocabulary(const st_gguf_file *f, st_hparams *hp, st_error *err) {
    const st_gguf_value *tokens = st_gguf_find(f, "tokenizer.ggml.tokens");
    if (tokens) {
        if (tokens->type != ST_GGUF_TYPE_ARRAY || tokens->v.arr.elem_type != ST_GGUF_TYPE_STRING)
            return st_error_set(err, ST_ERROR_FORMAT, "metadata key 'tokenizer.ggml.tokens' has type %s, expected an "
                                "array of strings", st_gguf_type_name(tokens->type == ST_GGUF_TYPE_ARRAY
                                                                          ? tokens->v.arr.elem_type
                                                                          : tokens->type));
        if ((int64_t)tokens->v.arr.n != hp->n_vocab || tokens->v.arr.n > (uint64_t)ST_MODEL_MAX_VOCAB)
            return st_error_set(err, ST_ERROR_FORMAT,
                                "the vocabulary has %" PRIu64 " tokens (tokenizer.ggml.tokens) but token_embd.weight "
                                "has %lld rows: they must match",
                                tokens->v.arr.n, (long long)hp->n_vocab);
    }
    char key[128];
    snprintf(key, sizeof(key), "%s.vocab_size", st_arch_name(hp->arch));
    if (st_gguf_find(f, key)) {
        int64_t v;
        TRY(st_gguf_get_i64(f, key, &v, err));
        if (v != hp->n_vocab)
            return st_error_set(err, ST_ERROR_FORMAT,
                                "metadata key '%s' is %lld but token_embd.weight has %lld rows: they must match", key,
                                (long long)v, (long long)hp->n_vocab);
    }
    int32_t id;
    TRY(token_id(f, "tokenizer.ggml.bos_token_id", hp->n_vocab, &hp->bos_id, err));
    TRY(token_id(f, "tokenizer.ggml.eos_token_id", hp->n_vocab, &hp->eos_id, err));
    TRY(token_id(f, "tokenizer.ggml.unknown_token_id", hp->n_vocab, &id, err));
    TRY(token_id(f, "tokenizer.ggml.eot_token_id", hp->n_vocab, &id, err));
    TRY(token_id(f, "tokenizer.ggml.eom_token_id", hp->n_vocab, &id, err));
    return ST_OK;
}

st_status st_model_validate(const st_gguf_file *f, st_hparams *hp, st_error *err) {
    TRY(st_hparams_from_gguf(f, hp, err));
    const st_arch_sizes sz = {.n_vocab = hp->n_vocab, .n_embd = hp->n_embd, .n_head = hp->n_head,
                              .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim, .n_ff = hp->n_ff,
                              .n_expert = hp->n_expert, .n_rot = hp->n_rot};
    int64_t dims[ST_DIM_COUNT];
    if (!st_arch_dims(&sz, dims)) /* hparams.c checked every product */
        return st_error_set(err, ST_ERROR_FORMAT, "the hyperparameters overflow 64-bit sizes");
    int64_t max_layer;
    TRY(check_each_tensor(f, hp, dims, &max_layer, err));
    TRY(check_required(f, hp, max_layer, dims, err));
    return check_vocabulary(f, hp, err);
}
