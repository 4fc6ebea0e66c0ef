/*
 * SentencePiece-style encoding of one fragment of text (tokenizer.ggml.model = "llama").
 *
 * Spaces become U+2581 ("▁"), with one more in front when the vocabulary adds a space
 * prefix. The text starts as one symbol per UTF-8 character; then, as SentencePiece's BPE
 * and llama.cpp do, the adjacent pair whose concatenation is a piece with the highest score
 * is merged (the leftmost on a tie), until no pair forms a piece. A final symbol that is no
 * piece (a character outside the vocabulary) falls back to its bytes as <0xXX> tokens.
 * Only NORMAL and USER_DEFINED pieces take part in merges: control and byte tokens are
 * never produced from plain text (text like "<0x41>" or "<bos>" stays text).
 */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

static const char SPACE_MARK[3] = {'\xE2', '\x96', '\x81'}; /* U+2581 */

typedef struct spm_state {
    const st_tokenizer *t;
    const char *s; /* escaped text */
    st_tok_sym *sym;
    st_tok_heap heap;
} spm_state;

static bool mergeable(const st_tokenizer *t, int32_t id) {
    int32_t type = t->types[id];
    return type == ST_TOK_TYPE_NORMAL || type == ST_TOK_TYPE_USER_DEFINED;
}

static st_status try_pair(spm_state *g, int32_t left, int32_t right, st_error *err) {
    if (left < 0 || right < 0) return ST_OK;
    const st_tok_sym *l = &g->sym[left], *r = &g->sym[right];
    uint32_t size = l->n + r->n;
    int32_t id = st_tok_map_get(&g->t->pieces, g->s + l->start, size);
    if (id < 0 || !mergeable(g->t, id)) return ST_OK;
    st_tok_cand c = {-(double)g->t->scores[id], left, right, size};
    return st_tok_heap_push(&g->heap, c, err);
}

static st_status emit_symbol(const st_tokenizer *t, const char *s, uint32_t n, st_tok_ids *out, st_error *err) {
    int32_t id = st_tok_map_get(&t->pieces, s, n);
    if (id >= 0) return st_tok_ids_push(out, id, err);
    for (uint32_t i = 0; i < n; i++) { /* byte fallback */
        int32_t b = t->byte_token[(unsigned char)s[i]];
        if (b < 0) b = t->unk;
        if (b < 0)
            return st_error_set(err, ST_ERROR_UNSUPPORTED,
                                "tokenizer: byte 0x%02X is not in the vocabulary, which has neither <0x%02X> "
                                "nor an unknown token", (unsigned char)s[i], (unsigned char)s[i]);
        st_status st = st_tok_ids_push(out, b, err);
        if (st) return st;
        if (b == t->unk) break; /* one <unk> for the whole character, as SentencePiece does */
    }
    return ST_OK;
}

st_status st_tok_spm_encode(const st_tokenizer *t, const char *text, size_t len, bool space_prefix,
                            st_tok_ids *out, st_error *err) {
    if (len == 0 && !space_prefix) return ST_OK;
    if (len > (UINT32_MAX - 3) / 3 || len > INT32_MAX / 4)
        return st_error_set(err, ST_ERROR_INVALID, "tokenizer: a text fragment of %zu bytes is too long", len);
    st_status st = ST_OK;
    spm_state g = {t, NULL, NULL, {0}};
    char *s = malloc(len * 3 + 3);
    st_tok_sym *sym = malloc((len + 1) * sizeof(*sym));
    if (!s || !sym) {
        st = st_error_set(err, ST_ERROR_NOMEM, "tokenizer: out of memory for %zu bytes of text", len);
        goto done;
    }
    size_t n = 0;
    if (space_prefix) {
        memcpy(s, SPACE_MARK, 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(s + n, SPACE_MARK, 3);
            n += 3;
        } else {
            s[n++] = text[i];
        }
    }
    int32_t n_sym = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = st_tok_utf8_decode(s + i, n - i, &cp);
        sym[n_sym] = (st_tok_sym){n_sym - 1, n_sym + 1, (uint32_t)i, (uint32_t)k, -1};
        n_sym++;
        i += k;
    }
    sym[n_sym - 1].next = -1;
    g.s = s;
    g.sym = sym;
    for (int32_t i = 0; i + 1 < n_sym; i++)
        if ((st = try_pair(&g, i, i + 1, err))) goto done;
    while (g.heap.n > 0) {
        st_tok_cand c = st_tok_heap_pop(&g.heap);
        st_tok_sym *l = &sym[c.left], *r = &sym[c.right];
        if (l->n == 0 || r->n == 0 || l->next != c.right || l->n + r->n != c.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = c.left;
        if ((st = try_pair(&g, l->prev, c.left, err))) goto done;
        if ((st = try_pair(&g, c.left, l->next, err))) goto done;
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next)
        if ((st = emit_symbol(t, s + sym[i].start, sym[i].n, out, err))) goto done;
done:
    st_tok_heap_free(&g.heap);
    free(s);
    free(sym);
    return st;
}
