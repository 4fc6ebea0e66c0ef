/* UTF-8 and the Unicode classes of the pre-tokenizer regexes. */
#include "tok_internal.h"

#include "unicode_table.inc"

unsigned st_tok_unicode_flags(uint32_t cp) {
    size_t lo = 0, hi = sizeof(ST_TOK_URANGES) / sizeof(ST_TOK_URANGES[0]);
    while (lo < hi) { /* first range with last >= cp */
        size_t mid = lo + (hi - lo) / 2;
        if (ST_TOK_URANGES[mid].last < cp) lo = mid + 1;
        else hi = mid;
    }
    if (lo < sizeof(ST_TOK_URANGES) / sizeof(ST_TOK_URANGES[0]) && ST_TOK_URANGES[lo].first <= cp)
        return ST_TOK_URANGES[lo].flags;
    return 0;
}

size_t st_tok_utf8_check(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF; /* bounds of the second byte (no overlongs, surrogates) */
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return SIZE_MAX;
    for (size_t i = 1; i < need; i++) {
        if (i >= n) return 0; /* a valid prefix so far */
        unsigned char b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return SIZE_MAX;
    }
    return need;
}

size_t st_tok_utf8_decode(const char *s, size_t n, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    size_t k = st_tok_utf8_check(u, n);
    if (k == 0 || k == SIZE_MAX) {
        *cp = ST_TOK_INVALID_CP;
        return 1;
    }
    switch (k) {
    case 1: *cp = u[0]; break;
    case 2: *cp = ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F); break;
    case 3: *cp = ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F); break;
    default:
        *cp = ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) | ((uint32_t)(u[2] & 0x3F) << 6) |
              (u[3] & 0x3F);
    }
    return k;
}

size_t st_tok_utf8_encode(uint32_t cp, char *buf) {
    unsigned char *b = (unsigned char *)buf;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        b[0] = (unsigned char)(0xC0 | (cp >> 6));
        b[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | (cp >> 12));
        b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    ST_ASSERT(cp < 0x110000);
    b[0] = (unsigned char)(0xF0 | (cp >> 18));
    b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    b[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}
