/* Helpers shared by the subcommands: argument parsing, errors, progress display. */
#ifndef STRIDE_TOOL_CLI_H
#define STRIDE_TOOL_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stddef.h>

#include "stride/clock.h"
#include "stride/status.h"

#define ST_EXIT_OK 0
#define ST_EXIT_FAILURE 1
#define ST_EXIT_USAGE 2

#define ST_EXIT_INTERRUPTED 130 /* 128 + SIGINT, as shells report it */

/* Prints "stride <cmd>: <message>" for a library error on one line (control bytes
 * escaped) and returns ST_EXIT_FAILURE. */
int cli_fail(const char *cmd, const st_error *err);

/* Prints "stride <cmd>: <formatted>" plus "try 'stride <cmd> --help'" and returns
 * ST_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* True when arg is "--name" and stores the following argument in *value, advancing *i.
 * A missing value is a usage error reported through *missing. */
bool cli_take_value(int argc, char **argv, int *i, const char *name, const char **value,
                    bool *missing);

/* Strict integer parsing: the whole string, in range. */
bool cli_parse_u64(const char *s, uint64_t *out);

/* Progress on a terminal: a single updating line on stderr, only when stderr is a tty. */
typedef struct cli_progress {
    const char *label;
    bool enabled;
    double start;
    double last_draw;
} cli_progress;

void cli_progress_begin(cli_progress *p, const char *label);
/* Suits st_synth_options.progress and similar callbacks (ctx is the cli_progress). */
void cli_progress_update(void *ctx, uint64_t done, uint64_t total);
void cli_progress_end(cli_progress *p);

/* A string from a file, safe for the terminal (st_gguf_format_string: printable ASCII kept,
 * other bytes as \xNN, cut with "..."). */
void cli_escape(const char *data, size_t len, char *buf, size_t cap);

/* Ctrl-C (SIGINT), SIGTERM and SIGHUP while a long write runs: cli_catch_interrupts makes
 * the first one set cli_interrupted (the signal number) instead of killing the process, so
 * that the writer can stop and remove its temporary file (st_synth_options.cancel); a
 * second one acts as usual. Short writes hold the signals instead (cli_hold_interrupts ...
 * cli_release_interrupts): one that arrives meanwhile takes effect after the file is
 * complete or removed. */
extern volatile sig_atomic_t cli_interrupted;
void cli_catch_interrupts(void);
void cli_hold_interrupts(sigset_t *saved);
void cli_release_interrupts(const sigset_t *saved);

/* The file name of a path (what follows its last '/'). */
const char *cli_base_name(const char *path);

/* "1.50 GiB", "12.0 MiB", "640 B" */
void cli_format_bytes(uint64_t bytes, char *buf, int size);

#endif

/* Writes s (len bytes) as a JSON string literal, quotes included. */
void cli_json_string(FILE *out, const char *s, size_t len);
/* The same for a NUL-terminated string. */
void cli_json_str(FILE *out, const char *s);
/* A JSON array of integers: [a, b, ...]. */
void cli_json_ints(FILE *out, const int64_t *x, int n);
