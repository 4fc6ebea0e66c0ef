/*
 * stride: status codes and error reporting.
 *
 * Library functions never print and never exit(). A function that can fail returns an
 * st_status and, when it fails, writes a human-readable message into the caller's
 * st_error (which may be NULL when the caller does not care). Messages name the problem
 * and, where it helps, what the user can do about it.
 *
 * Programmer errors (broken invariants, not bad input) abort through ST_ASSERT, which
 * prints the expression, file and line.
 */
#ifndef STRIDE_STATUS_H
#define STRIDE_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum st_status {
    ST_OK = 0,
    ST_ERROR_IO,          /* open/read/write/mmap failed */
    ST_ERROR_FORMAT,      /* a file is malformed (bad magic, truncated, inconsistent) */
    ST_ERROR_INVALID,     /* a bad argument, flag or environment value */
    ST_ERROR_NOMEM,       /* host allocation failed */
    ST_ERROR_UNSUPPORTED, /* well-formed, but not something stride handles */
    ST_ERROR_DEVICE,      /* a GPU runtime or library call failed (incl. out of memory) */
} st_status;

#define ST_ERROR_MESSAGE_MAX 512

typedef struct st_error {
    st_status status;
    char message[ST_ERROR_MESSAGE_MAX];
} st_error;

/* Records status + formatted message in err (if non-NULL) and returns status, so that
 * callers can write `return st_error_set(err, ST_ERROR_FORMAT, "...", ...);`. */
st_status st_error_set(st_error *err, st_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Prefixes the message already in err with more context ("loading x.gguf: ..."). */
st_status st_error_wrap(st_error *err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

void st_error_clear(st_error *err);

const char *st_status_name(st_status status);

/* Aborts with the expression, file and line. For invariants only, never for input. */
void st_assert_fail(const char *expr, const char *file, int line);

#define ST_ASSERT(expr) ((expr) ? (void)0 : st_assert_fail(#expr, __FILE__, __LINE__))

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_STATUS_H */
