/*
 * stride: where the library's notices go. The library never prints: what a user should
 * know that is not an error (a fallback taken, a slow path) is handed to the function the
 * application installs; with none installed, notices are dropped.
 */
#ifndef STRIDE_LOG_H
#define STRIDE_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum st_log_level {
    ST_LOG_INFO = 0,
    ST_LOG_WARN = 1,
} st_log_level;

typedef void (*st_log_fn)(st_log_level level, const char *message, void *ctx);

/* Installs fn (NULL: drop notices). Set it once at start, before other threads use stride. */
void st_log_set(st_log_fn fn, void *ctx);

/* Formats a notice and hands it to the installed function. */
void st_log(st_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_LOG_H */
