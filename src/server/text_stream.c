/* Tokens to text for a response (server_internal.h): the streaming detokenizer, stop
 * strings matched on the text (a match cuts the text where the stop string begins), and
 * the text held back while it may still become a stop string. */
#include <string.h>

#include "server/server_internal.h"

void srv_text_init(srv_text *t, const st_tokenizer *tok, const char *const *stop, int32_t n_stop) {
    memset(t, 0, sizeof(*t));
    st_detokenizer_init(&t->detok, tok);
    t->stop = stop;
    t->n_stop = n_stop;
}

void srv_text_free(srv_text *t) { st_strbuf_free(&t->text); }

/* Cuts the text at the earliest stop string that begins at or after `from`. */
static bool match_stop(srv_text *t, size_t from) {
    size_t best = SIZE_MAX;
    for (int32_t i = 0; i < t->n_stop; i++) {
        const size_t k = strlen(t->stop[i]);
        for (size_t p = from; p + k <= t->text.len; p++) {
            if (p >= best) break;
            if (memcmp(t->text.data + p, t->stop[i], k) == 0) {
                best = p;
                break;
            }
        }
    }
    if (best == SIZE_MAX) return false;
    t->text.len = best;
    t->text.data[best] = '\0';
    t->stopped = true;
    return true;
}

bool srv_text_push(srv_text *t, int32_t token) {
    if (t->stopped) return true;
    char piece[1024];
    const size_t n = st_detokenizer_push(&t->detok, token, piece, sizeof(piece));
    const size_t before = t->text.len;
    st_strbuf_add(&t->text, piece, n);
    if (t->n_stop == 0 || n == 0) return false;
    /* a stop string that ends in the new bytes begins at most its length before them */
    size_t longest = 0;
    for (int32_t i = 0; i < t->n_stop; i++) longest = strlen(t->stop[i]) > longest ? strlen(t->stop[i]) : longest;
    const size_t from = before > longest ? before - longest : 0;
    return match_stop(t, from);
}

void srv_text_finish(srv_text *t) {
    if (t->stopped) return;
    char tail[64];
    const size_t n = st_detokenizer_flush(&t->detok, tail, sizeof(tail));
    const size_t before = t->text.len;
    st_strbuf_add(&t->text, tail, n);
    if (n > 0 && t->n_stop > 0) match_stop(t, before > SRV_MAX_STOP_BYTES ? before - SRV_MAX_STOP_BYTES : 0);
}

/* Bytes at the end of the text that are the start of some stop string (held back). */
static size_t held(const srv_text *t) {
    size_t hold = 0;
    for (int32_t i = 0; i < t->n_stop; i++) {
        const size_t k = strlen(t->stop[i]);
        for (size_t m = k - 1; m > hold; m--) { /* the longest proper prefix that ends the text */
            if (m <= t->text.len && memcmp(t->text.data + t->text.len - m, t->stop[i], m) == 0) {
                hold = m;
                break;
            }
        }
    }
    return hold;
}

const char *srv_text_take(srv_text *t, bool final, size_t *len) {
    size_t end = t->text.len;
    if (!final && !t->stopped) {
        const size_t h = held(t);
        end = end > h ? end - h : 0;
    }
    if (end < t->sent) end = t->sent;
    const char *p = t->text.data ? t->text.data + t->sent : "";
    *len = end - t->sent;
    t->sent = end;
    return p;
}

void srv_utf8_sanitize(st_strbuf *b, const char *s, size_t n) {
    static const char REPLACEMENT[] = "\xEF\xBF\xBD";
    size_t i = 0;
    while (i < n) {
        const unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xc2 && c < 0xe0 ? 2 : c >= 0xe0 && c < 0xf0 ? 3 : c >= 0xf0 && c < 0xf5 ? 4 : 0;
        bool ok = k > 0 && i + k <= n;
        for (size_t j = 1; ok && j < k; j++) ok = ((unsigned char)s[i + j] & 0xc0) == 0x80;
        if (ok && k == 3) { /* no overlongs, no surrogates */
            const unsigned char d = (unsigned char)s[i + 1];
            ok = !(c == 0xe0 && d < 0xa0) && !(c == 0xed && d >= 0xa0);
        }
        if (ok && k == 4) {
            const unsigned char d = (unsigned char)s[i + 1];
            ok = !(c == 0xf0 && d < 0x90) && !(c == 0xf4 && d >= 0x90);
        }
        if (ok && c == 0) ok = false; /* JSON strings carry no NUL here */
        if (ok) {
            st_strbuf_add(b, s + i, k);
            i += k;
        } else {
            st_strbuf_add(b, REPLACEMENT, 3);
            i++;
        }
    }
}
