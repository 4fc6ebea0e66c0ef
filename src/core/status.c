#include "stride/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

st_status st_error_set(st_error *err, st_status status, const char *fmt, ...) {
    if (err) {
        err->status = status;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof(err->message), fmt, ap);
        va_end(ap);
    }
    return status;
}

st_status st_error_wrap(st_error *err, const char *fmt, ...) {
    if (!err) return ST_ERROR_INVALID;
    char prefix[ST_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    /* prefix + ": " + old message, truncated to the buffer */
    char joined[ST_ERROR_MESSAGE_MAX];
    size_t np = strlen(prefix), nm = strlen(err->message), cap = sizeof(joined) - 1;
    size_t n = 0;
    memcpy(joined, prefix, np < cap ? np : cap);
    n = np < cap ? np : cap;
    for (const char *sep = ": "; *sep && n < cap; sep++) joined[n++] = *sep;
    size_t take = nm < cap - n ? nm : cap - n;
    memcpy(joined + n, err->message, take);
    n += take;
    joined[n] = '\0';
    memcpy(err->message, joined, n + 1);
    return err->status;
}

void st_error_clear(st_error *err) {
    if (err) {
        err->status = ST_OK;
        err->message[0] = '\0';
    }
}

const char *st_status_name(st_status status) {
    switch (status) {
    case ST_OK: return "ok";
    case ST_ERROR_IO: return "i/o error";
    case ST_ERROR_FORMAT: return "format error";
    case ST_ERROR_INVALID: return "invalid argument";
    case ST_ERROR_NOMEM: return "out of memory";
    case ST_ERROR_UNSUPPORTED: return "unsupported";
    case ST_ERROR_DEVICE: return "device error";
    }
    return "unknown status";
}

void st_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "stride: assertion failed: %s (%s:%d)\n", expr, file, line);
    fflush(stderr);
    abort();
}
