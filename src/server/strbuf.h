/* A growing byte buffer (NUL-terminated) for the server's texts. Out of memory sticks: the
 * first failed append sets `failed`, later appends do nothing, and the owner checks once. */
#ifndef STRIDE_SERVER_STRBUF_H
#define STRIDE_SERVER_STRBUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct st_strbuf {
    char *data;
    size_t len, cap;
    bool failed;
} st_strbuf;

static inline bool st_strbuf_reserve(st_strbuf *b, size_t extra) {
    if (b->failed) return false;
    if (b->len + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) {
        if (cap > ((size_t)1 << 40)) {
            b->failed = true;
            return false;
        }
        cap *= 2;
    }
    char *grown = realloc(b->data, cap);
    if (!grown) {
        b->failed = true;
        return false;
    }
    b->data = grown;
    b->cap = cap;
    return true;
}

static inline void st_strbuf_add(st_strbuf *b, const char *s, size_t n) {
    if (!st_strbuf_reserve(b, n)) return;
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static inline void st_strbuf_adds(st_strbuf *b, const char *s) { st_strbuf_add(b, s, strlen(s)); }

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static inline void st_strbuf_printf(st_strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = true;
        return;
    }
    if ((size_t)n < sizeof(small)) {
        st_strbuf_add(b, small, (size_t)n);
        return;
    }
    if (!st_strbuf_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static inline void st_strbuf_free(st_strbuf *b) {
    free(b->data);
    *b = (st_strbuf){0};
}

#endif
