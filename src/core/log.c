/* The notice sink (stride/log.h). */
#include "stride/log.h"

#include <stdarg.h>
#include <stdio.h>

static st_log_fn log_fn;
static void *log_ctx;

void st_log_set(st_log_fn fn, void *ctx) {
    log_fn = fn;
    log_ctx = ctx;
}

void st_log(st_log_level level, const char *fmt, ...) {
    if (!log_fn) return;
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    log_fn(level, message, log_ctx);
}
