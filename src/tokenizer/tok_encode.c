/*
 * st_tokenizer_encode: special tokens are cut out of the text first, then each fragment
 * of plain text between them goes to the vocabulary's encoder.
 *
 * Special tokens are matched leftmost-longest, as Hugging Face `tokenizers` matches added
 * tokens: scanning left to right, at each byte the longest special piece that starts there
 * wins. USER_DEFINED pieces (Gemma's "\n\n", "<h1>", runs of spaces) are always matched;
 * CONTROL and UNKNOWN pieces ("<start_of_turn>", "<bos>") only with parse_special, so that
 * user text cannot inject them.
 *
 * SentencePiece vocabularies with a space prefix (add_space_prefix) get one "▁" in front of
 * the text when it starts with plain text, also when that text starts with a space, as
 * SentencePiece (and Llama 2's tokenizer.json) do. Unlike llama.cpp, which also puts one
 * after every special token, text after a special token gets none: SentencePiece and
 * transformers agree on that.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

/* Length of the special token matched at text[i], 0 when none; sets *id. */
static size_t match_special(const st_tokenizer *t, const char *text, size_t len, size_t i, bool parse_special,
                            int32_t *id) {
    unsigned char b = (unsigned char)text[i];
    for (uint32_t k = 0; k < t->n_special_lens[b]; k++) {
        size_t l = t->special_lens[b][k];
        if (l > len - i) continue;
        int32_t s = st_tok_map_get(&t->special_map, text + i, l);
        if (s < 0) continue;
        if (!parse_special && t->types[s] != ST_TOK_TYPE_USER_DEFINED) continue;
        *id = s;
        return l;
    }
    return 0;
}

static st_status encode_fragment(const st_tokenizer *t, const char *s, size_t n, bool at_start, st_tok_ids *out,
                                 st_error *err) {
    if (n == 0) return ST_OK;
    if (t->kind == ST_TOK_KIND_SPM) return st_tok_spm_encode(t, s, n, t->add_space_prefix && at_start, out, err);
    return st_tok_bpe_encode(t, s, n, out, err);
}

st_status st_tokenizer_encode(const st_tokenizer *t, const char *text, size_t len, bool add_special,
                              bool parse_special, int32_t **ids, int64_t *n_ids, st_error *err) {
    ST_ASSERT(t && ids && n_ids);
    *ids = NULL;
    *n_ids = 0;
    if (!text && len > 0) return st_error_set(err, ST_ERROR_INVALID, "tokenizer: NULL text of %zu bytes", len);
    st_tok_ids out = {0};
    st_status st = ST_OK;
    if (add_special && t->add_bos && (st = st_tok_ids_push(&out, t->bos, err))) goto fail;
    size_t frag = 0;
    for (size_t i = 0; i < len;) {
        int32_t id;
        size_t l = match_special(t, text, len, i, parse_special, &id);
        if (l == 0) {
            i++;
            continue;
        }
        if ((st = encode_fragment(t, text + frag, i - frag, frag == 0, &out, err))) goto fail;
        if ((st = st_tok_ids_push(&out, id, err))) goto fail;
        i += l;
        frag = i;
    }
    /* text may be NULL when len is 0: no pointer arithmetic on it then */
    if ((st = encode_fragment(t, len ? text + frag : text, len - frag, frag == 0, &out, err))) goto fail;
    if (add_special && t->add_eos && (st = st_tok_ids_push(&out, t->eos, err))) goto fail;
    if (out.n == 0) { /* a valid, empty result: still hand back a buffer the caller may free */
        out.v = malloc(sizeof(int32_t));
        if (!out.v) return st_error_set(err, ST_ERROR_NOMEM, "tokenizer: out of memory");
    }
    *ids = out.v;
    *n_ids = out.n;
    return ST_OK;
fail:
    free(out.v);
    return st;
}
