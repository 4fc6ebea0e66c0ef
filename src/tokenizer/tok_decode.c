/* Token ids back to bytes, one token at a time and as a stream of complete UTF-8 text. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

typedef struct sink {
    char *buf;
    size_t size, n; /* n counts every byte, written or not */
} sink;

static void put(sink *s, const char *p, size_t n) {
    if (s->n < s->size) {
        size_t room = s->size - s->n;
        memcpy(s->buf + s->n, p, n < room ? n : room);
    }
    s->n += n;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

size_t st_tokenizer_token_to_bytes(const st_tokenizer *t, int32_t id, bool render_special, char *buf, size_t size) {
    if (id < 0 || id >= t->n_vocab) return 0;
    sink s = {buf, buf ? size : 0, 0};
    const char *p = st_tok_text(t, id);
    size_t n = t->len[id];
    switch (t->types[id]) {
    case ST_TOK_TYPE_CONTROL:
    case ST_TOK_TYPE_UNKNOWN:
        if (render_special) put(&s, p, n);
        return s.n;
    case ST_TOK_TYPE_USER_DEFINED: /* stored as plain text in both families */
        put(&s, p, n);
        return s.n;
    case ST_TOK_TYPE_BYTE:
        if (t->kind == ST_TOK_KIND_SPM && n == 6 && memcmp(p, "<0x", 3) == 0 && p[5] == '>' && hex_digit(p[3]) >= 0 &&
            hex_digit(p[4]) >= 0) {
            char b = (char)(hex_digit(p[3]) * 16 + hex_digit(p[4]));
            put(&s, &b, 1);
            return s.n;
        }
        break;
    default: break;
    }
    if (t->kind == ST_TOK_KIND_SPM) {
        for (size_t i = 0; i < n;) {
            if (i + 3 <= n && memcmp(p + i, "\xE2\x96\x81", 3) == 0) {
                put(&s, " ", 1);
                i += 3;
            } else {
                put(&s, p + i, 1);
                i++;
            }
        }
    } else {
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            size_t k = st_tok_utf8_decode(p + i, n - i, &cp);
            int b = cp == ST_TOK_INVALID_CP ? -1 : st_tok_cp_to_byte(cp);
            if (b >= 0) {
                char c = (char)b;
                put(&s, &c, 1);
            } else {
                put(&s, p + i, k); /* not in the byte alphabet: kept as it is */
            }
            i += k;
        }
    }
    return s.n;
}

/* ---- streaming ------------------------------------------------------------------------------ */

static const char REPLACEMENT[3] = {'\xEF', '\xBF', '\xBD'}; /* U+FFFD */

typedef struct out_buf {
    char *p;
    size_t cap, n; /* cap excludes the NUL */
} out_buf;

static void out_put(out_buf *o, const char *s, size_t n) {
    size_t room = o->cap - o->n;
    if (n > room) n = room;
    memcpy(o->p + o->n, s, n);
    o->n += n;
}

/* Adds one byte to the pending sequence and moves whatever is complete to o. An invalid
 * sequence becomes one U+FFFD per maximal invalid part, as Python's errors="replace". */
static void feed(st_detokenizer *d, unsigned char b, out_buf *o) {
    d->pending[d->n_pending++] = (char)b;
    while (d->n_pending > 0) {
        size_t k = st_tok_utf8_check((const unsigned char *)d->pending, d->n_pending);
        if (k == 0) return; /* a valid prefix: wait for more */
        size_t drop;
        if (k == SIZE_MAX) {
            out_put(o, REPLACEMENT, 3);
            /* the bytes before the last were a valid prefix; the last one starts afresh */
            drop = d->n_pending > 1 ? d->n_pending - 1 : 1;
        } else {
            out_put(o, d->pending, k);
            drop = k;
        }
        memmove(d->pending, d->pending + drop, d->n_pending - drop);
        d->n_pending -= drop;
    }
}

void st_detokenizer_init(st_detokenizer *d, const st_tokenizer *t) {
    memset(d, 0, sizeof(*d));
    d->tok = t;
    d->first = true;
}

size_t st_detokenizer_push(st_detokenizer *d, int32_t id, char *out, size_t size) {
    ST_ASSERT(out && size > 0);
    out_buf o = {out, size - 1, 0};
    char small[256];
    char *piece = small;
    size_t n = st_tokenizer_token_to_bytes(d->tok, id, false, small, sizeof(small));
    if (n > sizeof(small)) {
        piece = malloc(n);
        if (!piece) { /* only the first bytes can be shown */
            piece = small;
            n = sizeof(small);
        } else {
            st_tokenizer_token_to_bytes(d->tok, id, false, piece, n);
        }
    }
    size_t i = 0;
    if (d->first && n > 0) {
        /* the space the encoder put in front of the text is not part of it */
        if (d->tok->add_space_prefix && piece[0] == ' ') i = 1;
        d->first = false;
    }
    for (; i < n; i++) feed(d, (unsigned char)piece[i], &o);
    if (piece != small) free(piece);
    out[o.n] = '\0';
    return o.n;
}

size_t st_detokenizer_flush(st_detokenizer *d, char *out, size_t size) {
    ST_ASSERT(out && size > 0);
    out_buf o = {out, size - 1, 0};
    if (d->n_pending > 0) out_put(&o, REPLACEMENT, 3);
    d->n_pending = 0;
    out[o.n] = '\0';
    return o.n;
}
