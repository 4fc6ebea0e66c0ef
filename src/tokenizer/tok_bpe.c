/*
 * Byte-level BPE (tokenizer.ggml.model = "gpt2").
 *
 * The text is cut into pre-tokens by the vocabulary's regex (tok_pretok.c). Each pre-token
 * starts as one symbol per byte, the byte's character in GPT-2's byte alphabet; then the
 * adjacent pair with the best-ranked merge (tokenizer.ggml.merges, best first) is merged,
 * the leftmost on a tie, until no merge applies. With ignore_merges (Llama 3) a pre-token
 * that is itself in the vocabulary becomes that token directly.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves; the other 68 (0x00-0x20,
 * 0x7F-0xA0, 0xAD) take the code points 256, 257, ... in byte order. */
uint32_t st_tok_byte_to_cp(uint8_t b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
    if (b <= 0x20) return 256u + b;
    if (b >= 0x7F && b <= 0xA0) return 256u + 33u + (uint32_t)(b - 0x7F);
    return 256u + 67u; /* 0xAD */
}

int st_tok_cp_to_byte(uint32_t cp) {
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) return (int)cp;
    if (cp < 256 || cp > 256 + 67) return -1;
    uint32_t k = cp - 256;
    if (k < 33) return (int)k;
    if (k < 67) return (int)(0x7F + k - 33);
    return 0xAD;
}

typedef struct bpe_ctx {
    const st_tokenizer *t;
    st_tok_ids *out;
    st_tok_sym *sym;
    size_t sym_cap;
    char *buf; /* a pre-token in the byte alphabet, for ignore_merges */
    size_t buf_cap;
    st_tok_heap heap;
} bpe_ctx;

static st_status try_pair(bpe_ctx *c, int32_t left, int32_t right, st_error *err) {
    if (left < 0 || right < 0) return ST_OK;
    const st_tok_sym *l = &c->sym[left], *r = &c->sym[right];
    if (l->id < 0 || r->id < 0) return ST_OK;
    const st_tok_pair *m = st_tok_pair_map_get(&c->t->merges, l->id, r->id);
    if (!m) return ST_OK;
    st_tok_cand cand = {(double)m->rank, left, right, l->n + r->n};
    return st_tok_heap_push(&c->heap, cand, err);
}

static st_status grow(void **p, size_t *cap, size_t need, size_t elem, st_error *err) {
    if (need <= *cap) return ST_OK;
    size_t n = need * 2;
    void *q = realloc(*p, n * elem);
    if (!q) return st_error_set(err, ST_ERROR_NOMEM, "tokenizer: out of memory for a %zu-byte pre-token", need);
    *p = q;
    *cap = n;
    return ST_OK;
}

static st_status push_or_unk(bpe_ctx *c, int32_t id, unsigned char byte, st_error *err) {
    if (id < 0) id = c->t->unk;
    if (id < 0)
        return st_error_set(err, ST_ERROR_UNSUPPORTED,
                            "tokenizer: byte 0x%02X has no token in this byte-level vocabulary", byte);
    return st_tok_ids_push(c->out, id, err);
}

static st_status bpe_word(void *ctx, const char *s, size_t n, st_error *err) {
    bpe_ctx *c = ctx;
    const st_tokenizer *t = c->t;
    st_status st;
    if (n == 0) return ST_OK;
    if (n > INT32_MAX / 4)
        return st_error_set(err, ST_ERROR_INVALID, "tokenizer: a pre-token of %zu bytes is too long", n);
    if (t->ignore_merges) {
        if ((st = grow((void **)&c->buf, &c->buf_cap, n * 2, 1, err))) return st;
        size_t m = 0;
        for (size_t i = 0; i < n; i++) m += st_tok_utf8_encode(st_tok_byte_to_cp((uint8_t)s[i]), c->buf + m);
        int32_t id = st_tok_map_get(&t->pieces, c->buf, m);
        if (id >= 0) return st_tok_ids_push(c->out, id, err);
    }
    if ((st = grow((void **)&c->sym, &c->sym_cap, n, sizeof(*c->sym), err))) return st;
    st_tok_sym *sym = c->sym;
    for (size_t i = 0; i < n; i++)
        sym[i] = (st_tok_sym){(int32_t)i - 1, (int32_t)i + 1, (uint32_t)i, 1, t->byte_token[(unsigned char)s[i]]};
    sym[n - 1].next = -1;
    c->heap.n = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if ((st = try_pair(c, (int32_t)i, (int32_t)i + 1, err))) return st;
    while (c->heap.n > 0) {
        st_tok_cand cand = st_tok_heap_pop(&c->heap);
        st_tok_sym *l = &sym[cand.left], *r = &sym[cand.right];
        if (l->n == 0 || r->n == 0 || l->next != cand.right || l->n + r->n != cand.size) continue; /* stale */
        const st_tok_pair *m = st_tok_pair_map_get(&t->merges, l->id, r->id);
        ST_ASSERT(m != NULL);
        l->id = m->id;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = cand.left;
        if ((st = try_pair(c, l->prev, cand.left, err))) return st;
        if ((st = try_pair(c, cand.left, l->next, err))) return st;
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next)
        if ((st = push_or_unk(c, sym[i].id, (unsigned char)s[sym[i].start], err))) return st;
    return ST_OK;
}

st_status st_tok_bpe_encode(const st_tokenizer *t, const char *text, size_t len, st_tok_ids *out, st_error *err) {
    bpe_ctx c = {t, out, NULL, 0, NULL, 0, {0}};
    st_status st = st_tok_pretokenize(t->pre, text, len, bpe_word, &c, err);
    free(c.sym);
    free(c.buf);
    st_tok_heap_free(&c.heap);
    return st;
}
