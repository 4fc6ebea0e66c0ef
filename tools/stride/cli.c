#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stride/gguf.h"

/* A message on one line, whatever it holds: control bytes (a newline, an escape sequence
 * that came from a file) as \xNN. The library escapes what it quotes from files; this is
 * the last guard before the terminal. */
static void put_line_escaped(FILE *out, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p == 0x7f) fprintf(out, "\\x%02x", *p);
        else fputc(*p, out);
    }
}

int cli_fail(const char *cmd, const st_error *err) {
    fprintf(stderr, "stride %s: ", cmd);
    put_line_escaped(stderr, err->message[0] ? err->message : st_status_name(err->status));
    fputc('\n', stderr);
    return ST_EXIT_FAILURE;
}

void cli_escape(const char *data, size_t len, char *buf, size_t cap) {
    st_gguf_format_string(buf, cap, data, len);
}

/* ---- signals ---- */

volatile sig_atomic_t cli_interrupted = 0;

static void on_interrupt(int sig) { cli_interrupted = sig; }

void cli_catch_interrupts(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND; /* a second signal acts as if nothing were caught */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

static void termination_signals(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGHUP);
}

void cli_hold_interrupts(sigset_t *saved) {
    sigset_t set;
    termination_signals(&set);
    sigprocmask(SIG_BLOCK, &set, saved);
}

void cli_release_interrupts(const sigset_t *saved) { sigprocmask(SIG_SETMASK, saved, NULL); }

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "stride %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\ntry 'stride %s --help'\n", cmd);
    va_end(ap);
    return ST_EXIT_USAGE;
}

bool cli_take_value(int argc, char **argv, int *i, const char *name, const char **value,
                    bool *missing) {
    const char *arg = argv[*i];
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0) return false;
    if (arg[n] == '=') { /* --flag=value */
        *value = arg + n + 1;
        return true;
    }
    if (arg[n] != '\0') return false;
    if (*i + 1 >= argc) {
        *missing = true;
        return true;
    }
    *value = argv[++*i];
    return true;
}

bool cli_parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-' || *s == '+') return false;
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0') return false;
    *out = (uint64_t)v;
    return true;
}

const char *cli_base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

void cli_format_bytes(uint64_t bytes, char *buf, int size) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, (size_t)size, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, (size_t)size, "%.2f %s", v, units[u]);
}

void cli_progress_begin(cli_progress *p, const char *label) {
    p->label = label;
    p->enabled = isatty(STDERR_FILENO) == 1;
    p->start = st_clock_seconds();
    p->last_draw = 0.0;
}

void cli_progress_update(void *ctx, uint64_t done, uint64_t total) {
    cli_progress *p = ctx;
    if (!p->enabled) return;
    double now = st_clock_seconds();
    if (done < total && now - p->last_draw < 0.1) return;
    p->last_draw = now;
    char a[32], b[32];
    cli_format_bytes(done, a, sizeof(a));
    cli_format_bytes(total, b, sizeof(b));
    double pct = total ? 100.0 * (double)done / (double)total : 100.0;
    double el = now - p->start;
    double rate = el > 0 ? (double)done / el / (1024.0 * 1024.0) : 0.0;
    fprintf(stderr, "\r%s: %5.1f%% (%s / %s, %.0f MiB/s)   ", p->label, pct, a, b, rate);
    fflush(stderr);
}

void cli_progress_end(cli_progress *p) {
    if (!p->enabled) return;
    fprintf(stderr, "\n");
}

void cli_json_string(FILE *out, const char *s, size_t len) {
    fputc('"', out);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\r': fputs("\\r", out); break;
        case '\t': fputs("\\t", out); break;
        default:
            if (c < 0x20) {
                fprintf(out, "\\u%04x", c);
            } else if (c < 0x80) {
                fputc(c, out);
            } else {
                /* copy a well-formed UTF-8 sequence; anything else becomes U+FFFD */
                size_t n = c >= 0xf0 && c < 0xf5 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
                if (c >= 0xf5) n = 0;
                bool ok = n > 0 && i + n <= len;
                for (size_t k = 1; ok && k < n; k++) ok = ((unsigned char)s[i + k] & 0xc0) == 0x80;
                if (ok) {
                    fwrite(s + i, 1, n, out);
                    i += n - 1;
                } else {
                    fputs("\\ufffd", out);
                }
            }
        }
    }
    fputc('"', out);
}

void cli_json_str(FILE *out, const char *s) { cli_json_string(out, s, strlen(s)); }

void cli_json_ints(FILE *out, const int64_t *x, int n) {
    fputc('[', out);
    for (int i = 0; i < n; i++) fprintf(out, "%s%lld", i ? ", " : "", (long long)x[i]);
    fputc(']', out);
}
