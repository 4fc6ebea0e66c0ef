/* stride bench: what one benchmark run measured, shared by the runner (cmd_bench.c) and
 * the reports (bench_report.c: markdown, CSV, JSON). */
#ifndef STRIDE_TOOL_BENCH_H
#define STRIDE_TOOL_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "stride/device.h"

typedef enum bench_kind {
    BENCH_KIND_PP = 0, /* prompt: n tokens in one st_session_eval (micro-batched inside) */
    BENCH_KIND_TG,     /* generation: n single-token decode steps */
} bench_kind;

typedef struct bench_test {
    bench_kind kind;
    int64_t n;     /* tokens timed */
    int64_t depth; /* tokens in the cache before the timed part (not timed) */
} bench_test;

/* One model file loaded under one --pad-weights value. */
typedef struct bench_load {
    const char *policy;     /* the list value: "on", "off", "auto" */
    bool pad_enabled;       /* what it resolved to on this device */
    uint64_t n_padded;      /* tensors the plan padded */
    uint64_t weights_bytes; /* planned bytes (padding included) */
    uint64_t n_params;      /* elements of every tensor */
} bench_load;

typedef struct bench_results {
    /* parameters */
    const char **models;
    int n_models;
    const char **policies; /* --pad-weights list */
    int n_policies;
    bench_test *tests;
    int n_tests;
    int reps;
    int64_t n_ubatch;
    int64_t n_ctx; /* KV cache length of every session: the largest depth + n */
    const char *backend;
    int threads;
    const char *kv_type;
    const char *weights; /* "as stored", "f16", "bf16" */
    uint64_t seed;
    st_device_info device;
    /* measurements */
    bench_load *loads; /* [n_models][n_policies] */
    double *seconds;   /* [n_models][n_policies][n_tests][reps] */
} bench_results;

static inline bench_load *bench_load_at(const bench_results *r, int im, int ip) {
    return &r->loads[(size_t)im * (size_t)r->n_policies + (size_t)ip];
}

static inline double *bench_seconds_at(const bench_results *r, int im, int ip, int it) {
    return &r->seconds[(((size_t)im * (size_t)r->n_policies + (size_t)ip) * (size_t)r->n_tests + (size_t)it) *
                       (size_t)r->reps];
}

/* "pp512", "tg128", "pp512 @ d4096" */
void bench_test_name(const bench_test *t, char *buf, size_t size);

/* Mean and sample standard deviation (0 for a single value). */
void bench_stats(const double *x, int n, double *mean, double *sd);

/* Rate of each repetition (tok/s) of one (model, policy, test); rates has reps entries. */
void bench_rates(const bench_results *r, int im, int ip, int it, double *rates);

/* Index of a policy in the list, or -1. */
int bench_policy_index(const bench_results *r, const char *policy);

/* Per-repetition speedup of `on` over `off` in percent, (rate_on / rate_off - 1) * 100,
 * from the paired interleaved repetitions; pct has reps entries. */
void bench_speedup(const bench_results *r, int im, int it, int ip_on, int ip_off, double *pct);

void bench_report_md(FILE *out, const bench_results *r);
void bench_report_csv(FILE *out, const bench_results *r);
void bench_report_json(FILE *out, const bench_results *r);

#endif
