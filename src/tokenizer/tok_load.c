/*
 * The tokenizer from a GGUF file's tokenizer.ggml.* metadata (llama.cpp's key names):
 *
 *   model            "llama" (SentencePiece-style) or "gpt2" (byte-level BPE)
 *   pre              gpt2 only: the pre-tokenizer ("llama-bpe", "qwen2", ...)
 *   tokens           string[n_vocab]
 *   scores           float[n_vocab]   (SPM merge priority; optional)
 *   token_type       int[n_vocab]     (NORMAL, CONTROL, USER_DEFINED, BYTE, ...; optional)
 *   merges           string[]         (gpt2: "left right", best first)
 *   bos/eos/unknown/eot/eom_token_id, add_bos_token, add_eos_token, add_space_prefix
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

/* Pre-tokenizer names (tokenizer.ggml.pre) stride implements, and their regex family. */
static const struct {
    const char *name;
    st_tok_pre pre;
} PRE_NAMES[] = {
    {"llama-bpe", ST_TOK_PRE_LLAMA3}, {"llama3", ST_TOK_PRE_LLAMA3},  {"llama-v3", ST_TOK_PRE_LLAMA3},
    {"smaug-bpe", ST_TOK_PRE_LLAMA3}, {"qwen2", ST_TOK_PRE_QWEN2}, {"deepseek-r1-qwen", ST_TOK_PRE_QWEN2},
};

/* Control tokens that end a turn in the chat formats of common models (llama.cpp treats
 * the same texts as end-of-generation). */
static const char *const EOG_TEXTS[] = {
    "<end_of_turn>", "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|endoftext|>", "<|end|>", "<|end_of_text|>",
};

static st_status optional_id(const st_gguf_file *f, const char *key, int64_t n_vocab, int32_t *out, st_error *err) {
    *out = -1;
    if (!st_gguf_find(f, key)) return ST_OK;
    uint64_t v;
    st_status st = st_gguf_get_u64(f, key, &v, err);
    if (st) return st;
    if (v >= (uint64_t)n_vocab)
        return st_error_set(err, ST_ERROR_FORMAT, "tokenizer: %s = %llu is outside the vocabulary (%lld tokens)",
                            key, (unsigned long long)v, (long long)n_vocab);
    *out = (int32_t)v;
    return ST_OK;
}

static st_status optional_bool(const st_gguf_file *f, const char *key, bool dflt, bool *out, st_error *err) {
    *out = dflt;
    if (!st_gguf_find(f, key)) return ST_OK;
    return st_gguf_get_bool(f, key, out, err);
}

static st_status load_pieces(st_tokenizer *t, const st_gguf_array *tokens, st_error *err) {
    uint64_t total = 0;
    for (uint64_t i = 0; i < tokens->n; i++) {
        if (tokens->strings[i].len > UINT32_MAX / 2)
            return st_error_set(err, ST_ERROR_FORMAT, "tokenizer: token %llu is %llu bytes long", (unsigned long long)i,
                                (unsigned long long)tokens->strings[i].len);
        total += tokens->strings[i].len;
        if (total > UINT32_MAX)
            return st_error_set(err, ST_ERROR_FORMAT, "tokenizer: the vocabulary's text exceeds 4 GiB");
    }
    size_t n = (size_t)tokens->n;
    t->arena = malloc(total ? (size_t)total : 1);
    t->off = malloc(n * sizeof(*t->off));
    t->len = malloc(n * sizeof(*t->len));
    t->scores = calloc(n, sizeof(*t->scores));
    t->types = malloc(n * sizeof(*t->types));
    if (!t->arena || !t->off || !t->len || !t->scores || !t->types)
        return st_error_set(err, ST_ERROR_NOMEM, "tokenizer: out of memory for %zu tokens", n);
    uint32_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t l = (uint32_t)tokens->strings[i].len;
        if (l) memcpy(t->arena + pos, tokens->strings[i].data, l);
        t->off[i] = pos;
        t->len[i] = l;
        t->types[i] = ST_TOK_TYPE_NORMAL;
        pos += l;
    }
    st_status st = st_tok_map_init(&t->pieces, n, t->arena, t->off, t->len, err);
    if (st) return st;
    for (size_t i = 0; i < n; i++) st_tok_map_put(&t->pieces, (int32_t)i);
    return ST_OK;
}

static st_status load_numeric(st_tokenizer *t, const st_gguf_file *f, st_error *err) {
    st_gguf_array a;
    st_status st;
    if (st_gguf_find(f, "tokenizer.ggml.scores")) {
        if ((st = st_gguf_get_arr(f, "tokenizer.ggml.scores", &a, err))) return st;
        if (a.n != (uint64_t)t->n_vocab ||
            (a.elem_type != ST_GGUF_TYPE_FLOAT32 && a.elem_type != ST_GGUF_TYPE_FLOAT64))
            return st_error_set(err, ST_ERROR_FORMAT,
                                "tokenizer: tokenizer.ggml.scores must be %lld floats (it is %llu of type %s)",
                                (long long)t->n_vocab, (unsigned long long)a.n, st_gguf_type_name(a.elem_type));
        for (int64_t i = 0; i < t->n_vocab; i++) t->scores[i] = (float)st_gguf_array_get_f64(&a, (uint64_t)i);
    }
    if (st_gguf_find(f, "tokenizer.ggml.token_type")) {
        if ((st = st_gguf_get_arr(f, "tokenizer.ggml.token_type", &a, err))) return st;
        bool numeric = a.elem_type != ST_GGUF_TYPE_STRING && a.elem_type != ST_GGUF_TYPE_ARRAY &&
                       a.elem_type != ST_GGUF_TYPE_FLOAT32 && a.elem_type != ST_GGUF_TYPE_FLOAT64;
        if (a.n != (uint64_t)t->n_vocab || !numeric)
            return st_error_set(err, ST_ERROR_FORMAT,
                                "tokenizer: tokenizer.ggml.token_type must be %lld integers (it is %llu of type %s)",
                                (long long)t->n_vocab, (unsigned long long)a.n, st_gguf_type_name(a.elem_type));
        for (int64_t i = 0; i < t->n_vocab; i++) t->types[i] = (int32_t)st_gguf_array_get_i64(&a, (uint64_t)i);
    }
    return ST_OK;
}

static bool is_special_type(int32_t type) {
    return type == ST_TOK_TYPE_CONTROL || type == ST_TOK_TYPE_USER_DEFINED || type == ST_TOK_TYPE_UNKNOWN;
}

/* The special-token matcher: a map of the special pieces and, per first byte, the
 * distinct lengths, longest first. */
static st_status build_specials(st_tokenizer *t, st_error *err) {
    int64_t n_special = 0;
    for (int64_t i = 0; i < t->n_vocab; i++)
        if (is_special_type(t->types[i]) && t->len[i] > 0) n_special++;
    st_status st = st_tok_map_init(&t->special_map, (uint64_t)n_special, t->arena, t->off, t->len, err);
    if (st) return st;
    for (int64_t i = 0; i < t->n_vocab; i++) {
        if (!is_special_type(t->types[i]) || t->len[i] == 0) continue;
        /* the first id wins for a special text listed twice */
        if (st_tok_map_get(&t->special_map, st_tok_text(t, (int32_t)i), t->len[i]) < 0)
            st_tok_map_put(&t->special_map, (int32_t)i);
        unsigned char b = (unsigned char)st_tok_text(t, (int32_t)i)[0];
        uint32_t l = t->len[i], k = 0, n = t->n_special_lens[b];
        while (k < n && t->special_lens[b][k] > l) k++;
        if (k < n && t->special_lens[b][k] == l) continue;
        uint32_t *v = realloc(t->special_lens[b], (n + 1) * sizeof(*v));
        if (!v) return st_error_set(err, ST_ERROR_NOMEM, "tokenizer: out of memory");
        memmove(v + k + 1, v + k, (n - k) * sizeof(*v));
        v[k] = l;
        t->special_lens[b] = v;
        t->n_special_lens[b] = n + 1;
    }
    return ST_OK;
}

static void find_byte_tokens(st_tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        char buf[8];
        size_t n;
        if (t->kind == ST_TOK_KIND_SPM) n = (size_t)snprintf(buf, sizeof(buf), "<0x%02X>", b);
        else n = st_tok_utf8_encode(st_tok_byte_to_cp((uint8_t)b), buf);
        t->byte_token[b] = st_tok_map_get(&t->pieces, buf, n);
    }
}

static st_status load_merges(st_tokenizer *t, const st_gguf_file *f, st_error *err) {
    st_gguf_array a;
    if (!st_gguf_find(f, "tokenizer.ggml.merges"))
        return st_error_set(err, ST_ERROR_FORMAT, "tokenizer: a gpt2 (byte-level BPE) vocabulary needs "
                                                  "tokenizer.ggml.merges, which this file lacks");
    st_status st = st_gguf_get_arr(f, "tokenizer.ggml.merges", &a, err);
    if (st) return st;
    if (a.elem_type != ST_GGUF_TYPE_STRING)
        return st_error_set(err, ST_ERROR_FORMAT, "tokenizer: tokenizer.ggml.merges must be strings (it is %s)",
                            st_gguf_type_name(a.elem_type));
    if (a.n > INT32_MAX) return st_error_set(err, ST_ERROR_FORMAT, "tokenizer: %llu merges", (unsigned long long)a.n);
    if ((st = st_tok_pair_map_init(&t->merges, a.n, err))) return st;
    char *buf = NULL;
    size_t cap = 0;
    for (uint64_t i = 0; i < a.n; i++) {
        const char *s = a.strings[i].data;
        size_t n = (size_t)a.strings[i].len;
        /* "left right": the separator is the first space after the first byte (a byte-level
         * piece never holds a real space; a piece may be a lone space in other spellings) */
        const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
        if (!sp) {
            free(buf);
            char shown[96];
            return st_error_set(err, ST_ERROR_FORMAT, "tokenizer: merge %llu (\"%s\") has no space separator",
                                (unsigned long long)i, st_gguf_format_string(shown, sizeof(shown), s, n));
        }
        size_t nl = (size_t)(sp - s), nr = n - nl - 1;
        int32_t left = st_tok_map_get(&t->pieces, s, nl);
        int32_t right = st_tok_map_get(&t->pieces, sp + 1, nr);
        if (nl + nr > cap) {
            cap = (nl + nr) * 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                return st_error_set(err, ST_ERROR_NOMEM, "tokenizer: out of memory");
            }
            buf = nb;
        }
        memcpy(buf, s, nl);
        memcpy(buf + nl, sp + 1, nr);
        int32_t merged = st_tok_map_get(&t->pieces, buf, nl + nr);
        /* A merge whose parts or result are not tokens can never apply: skipped, as llama.cpp does. */
        if (left >= 0 && right >= 0 && merged >= 0) st_tok_pair_map_put(&t->merges, left, right, (int32_t)i, merged);
    }
    free(buf);
    return ST_OK;
}

static void add_eog(st_tokenizer *t, int32_t id) {
    if (id < 0) return;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return;
    if (t->n_eog < ST_TOK_MAX_EOG) t->eog[t->n_eog++] = id;
}

static st_status load_special_ids(st_tokenizer *t, const st_gguf_file *f, st_error *err) {
    st_status st;
    int32_t eot, eom;
    if ((st = optional_id(f, "tokenizer.ggml.bos_token_id", t->n_vocab, &t->bos, err))) return st;
    if ((st = optional_id(f, "tokenizer.ggml.eos_token_id", t->n_vocab, &t->eos, err))) return st;
    if ((st = optional_id(f, "tokenizer.ggml.unknown_token_id", t->n_vocab, &t->unk, err))) return st;
    if ((st = optional_id(f, "tokenizer.ggml.eot_token_id", t->n_vocab, &eot, err))) return st;
    if ((st = optional_id(f, "tokenizer.ggml.eom_token_id", t->n_vocab, &eom, err))) return st;
    add_eog(t, t->eos);
    add_eog(t, eot);
    add_eog(t, eom);
    for (size_t i = 0; i < sizeof(EOG_TEXTS) / sizeof(EOG_TEXTS[0]); i++) {
        int32_t id = st_tok_map_get(&t->pieces, EOG_TEXTS[i], strlen(EOG_TEXTS[i]));
        if (id >= 0 && t->types[id] == ST_TOK_TYPE_CONTROL) add_eog(t, id);
    }
    /* llama.cpp's defaults: SentencePiece vocabularies add BOS and a space prefix unless told
     * otherwise; among the BPE pre-tokenizers Llama 3 adds BOS, Qwen 2 does not. */
    bool spm = t->kind == ST_TOK_KIND_SPM;
    if ((st = optional_bool(f, "tokenizer.ggml.add_bos_token", spm || t->pre == ST_TOK_PRE_LLAMA3, &t->add_bos, err)))
        return st;
    if ((st = optional_bool(f, "tokenizer.ggml.add_eos_token", false, &t->add_eos, err))) return st;
    if ((st = optional_bool(f, "tokenizer.ggml.add_space_prefix", spm, &t->add_space_prefix, err))) return st;
    if (!spm) t->add_space_prefix = false;
    if (t->add_bos && t->bos < 0) t->add_bos = false;
    if (t->add_eos && t->eos < 0) t->add_eos = false;
    return ST_OK;
}

st_status st_tokenizer_from_gguf(const st_gguf_file *f, st_tokenizer **out, st_error *err) {
    ST_ASSERT(f && out);
    *out = NULL;
    st_gguf_string model;
    st_status st = st_gguf_get_str(f, "tokenizer.ggml.model", &model, err);
    if (st) return st_error_wrap(err, "tokenizer");
    st_tokenizer *t = calloc(1, sizeof(*t));
    if (!t) return st_error_set(err, ST_ERROR_NOMEM, "tokenizer: out of memory");
    t->bos = t->eos = t->unk = -1;

    if (st_gguf_string_eq(model, "llama")) {
        t->kind = ST_TOK_KIND_SPM;
        t->pre = ST_TOK_PRE_NONE;
    } else if (st_gguf_string_eq(model, "gpt2")) {
        t->kind = ST_TOK_KIND_BPE;
        st_gguf_string pre = {0, NULL};
        if (st_gguf_find(f, "tokenizer.ggml.pre") && (st = st_gguf_get_str(f, "tokenizer.ggml.pre", &pre, err)))
            goto fail;
        t->pre = ST_TOK_PRE_NONE;
        for (size_t i = 0; i < sizeof(PRE_NAMES) / sizeof(PRE_NAMES[0]); i++)
            if (st_gguf_string_eq(pre, PRE_NAMES[i].name)) t->pre = PRE_NAMES[i].pre;
        if (t->pre == ST_TOK_PRE_NONE) {
            if (!pre.data)
                st = st_error_set(err, ST_ERROR_UNSUPPORTED,
                                  "tokenizer: a gpt2 vocabulary without tokenizer.ggml.pre is not supported "
                                  "(stride knows the llama-bpe and qwen2 pre-tokenizers)");
            else {
                char shown[96];
                st = st_error_set(err, ST_ERROR_UNSUPPORTED,
                                  "tokenizer: pre-tokenizer \"%s\" (tokenizer.ggml.pre) is not supported; stride "
                                  "knows llama-bpe (llama3, llama-v3, smaug-bpe) and qwen2 (deepseek-r1-qwen)",
                                  st_gguf_format_string(shown, sizeof(shown), pre.data, pre.len));
            }
            goto fail;
        }
        t->ignore_merges = t->pre == ST_TOK_PRE_LLAMA3; /* as Llama 3's tokenizer.json says */
    } else {
        char shown[96];
        st = st_error_set(err, ST_ERROR_UNSUPPORTED,
                          "tokenizer: tokenizer family \"%s\" (tokenizer.ggml.model) is not supported; stride "
                          "knows \"llama\" (SentencePiece) and \"gpt2\" (byte-level BPE)",
                          st_gguf_format_string(shown, sizeof(shown), model.data, model.len));
        goto fail;
    }

    st_gguf_array tokens;
    if ((st = st_gguf_get_arr(f, "tokenizer.ggml.tokens", &tokens, err))) {
        st_error_wrap(err, "tokenizer");
        goto fail;
    }
    if (tokens.elem_type != ST_GGUF_TYPE_STRING || tokens.n == 0 || tokens.n > INT32_MAX) {
        st = st_error_set(err, ST_ERROR_FORMAT, "tokenizer: tokenizer.ggml.tokens must be 1..%d strings (it is %llu of type %s)",
                          INT32_MAX, (unsigned long long)tokens.n, st_gguf_type_name(tokens.elem_type));
        goto fail;
    }
    t->n_vocab = (int64_t)tokens.n;
    if ((st = load_pieces(t, &tokens, err))) goto fail;
    if ((st = load_numeric(t, f, err))) goto fail;
    if ((st = build_specials(t, err))) goto fail;
    find_byte_tokens(t);
    if (t->kind == ST_TOK_KIND_BPE && (st = load_merges(t, f, err))) goto fail;
    if ((st = load_special_ids(t, f, err))) goto fail;
    *out = t;
    return ST_OK;
fail:
    st_tokenizer_free(t);
    return st;
}

void st_tokenizer_free(st_tokenizer *t) {
    if (!t) return;
    st_tok_map_free(&t->pieces);
    st_tok_map_free(&t->special_map);
    st_tok_pair_map_free(&t->merges);
    for (int b = 0; b < 256; b++) free(t->special_lens[b]);
    free(t->arena);
    free(t->off);
    free(t->len);
    free(t->scores);
    free(t->types);
    free(t);
}

int64_t st_tokenizer_n_vocab(const st_tokenizer *t) { return t->n_vocab; }
int32_t st_tokenizer_bos(const st_tokenizer *t) { return t->bos; }
int32_t st_tokenizer_eos(const st_tokenizer *t) { return t->eos; }

bool st_tokenizer_is_eog(const st_tokenizer *t, int32_t id) {
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return true;
    return false;
}
