/* stride bench: what one benchmark run measured, shared by the runner (bench_run.c), the
 * command line (cmd_bench.c) and the reports (bench_report.c: markdown, CSV, JSON;
 * bench_compare.c: the comparison tables; bench_chart.c: the SVG chart; bench_util.c: the
 * names, statistics and value writers they share).
 *
 * A "setting" is one compared combination of the swept parameters: (--pad-weights value,
 * -b, -ub). Every setting of one model file runs in one process, interleaved. */
#ifndef STRIDE_TOOL_BENCH_H
#define STRIDE_TOOL_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "model_flags.h"
#include "stride/backend.h"
#include "stride/device.h"
#include "stride/profile.h"

/* The ceilings rooflines are computed against (the batched decode steps', the per-op
 * profile's): an H200's measured device copy bandwidth (4.26 TB/s, bench/README.md) and
 * its dense F16 tensor rate (~790 TFLOP/s). */
#define BENCH_ROOF_BYTES_PER_S 4.3e12
#define BENCH_ROOF_FLOPS_PER_S 790e12

/* llama-bench's defaults: a logical batch of 2048 tokens, micro-batches of 512 */
#define BENCH_DEFAULT_BATCH 2048
#define BENCH_DEFAULT_UBATCH 512

typedef enum bench_kind {
    BENCH_KIND_PP = 0, /* prompt: n tokens in -b sized st_session_eval calls (micro-batched inside) */
    BENCH_KIND_TG,     /* generation: n single-token decode steps */
    BENCH_KIND_TTFT,   /* time to first token: an n-token prompt, host wall time until the
                        * logits of its last token are on the host */
} bench_kind;

typedef struct bench_test {
    bench_kind kind;
    int64_t n;     /* tokens timed */
    int64_t depth; /* tokens in the cache before the timed part (not timed) */
} bench_test;

/* One model file loaded under one --pad-weights value. */
typedef struct bench_load {
    const char *policy;     /* the list value: "on", "off", "auto" */
    const char *arch;       /* "llama", "qwen3", ... */
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
    const int64_t *batches; /* -b list: tokens per st_session_eval call of a prompt */
    int n_batches;
    const int64_t *ubatches; /* -ub list: tokens per forward pass (clamped to -b, as llama.cpp) */
    int n_ubatches;
    bench_test *tests;
    int n_tests;
    int reps;
    int64_t n_ctx; /* KV cache length of every session: the largest depth + n */
    const char *backend;
    const char *cpu_path; /* the CPU backend's ops (stride/cpu_path.h); NULL elsewhere */
    int threads;
    const char *kv_type;
    const char *weights; /* "as stored", "f16", "bf16" */
    uint64_t seed;
    bool compare;      /* --compare: the reports give the comparison only */
    const char *date;  /* UTC, ISO 8601, when the measurement started */
    const char *argv;  /* the command line, for the record */
    st_device_info device;
    bool *fits; /* [n_models][n_tests]: the test fits the model's context (else it is
                 * skipped for that model and reported as n/a) */
    /* measurements */
    bench_load *loads; /* [n_models][n_policies] */
    double *seconds;   /* [n_models][n_settings][n_tests][reps]: the figure reported (backend
                        * timer for pp/tg, host wall time for ttft) */
    double *wall;      /* same shape: host wall time of every run */
    int64_t *order;    /* same shape: when each run happened, counting every run of the model
                        * file from 0, warm-ups included (the record of the interleaving) */
    st_profile *profiles; /* --profile: [n_models][n_settings][n_tests], one extra run of each
                           * pp and tg test with the per-op profile set; NULL otherwise */
} bench_results;

/* Settings are numbered with the policy fastest: s = (ib * n_ubatches + iu) * n_policies + ip,
 * so the interleaved order of one repetition is on, off, auto, on, off, auto, ... */
static inline int bench_n_settings(const bench_results *r) { return r->n_policies * r->n_batches * r->n_ubatches; }
static inline int bench_setting(const bench_results *r, int ip, int ib, int iu) {
    return (ib * r->n_ubatches + iu) * r->n_policies + ip;
}
static inline int bench_setting_policy(const bench_results *r, int is) { return is % r->n_policies; }
static inline int bench_setting_ubatch(const bench_results *r, int is) {
    return (is / r->n_policies) % r->n_ubatches;
}
static inline int bench_setting_batch(const bench_results *r, int is) {
    return is / (r->n_policies * r->n_ubatches);
}
/* The micro-batch a setting runs with: -ub, at most -b (llama.cpp clamps it the same way). */
static inline int64_t bench_setting_n_ubatch(const bench_results *r, int is) {
    const int64_t b = r->batches[bench_setting_batch(r, is)], ub = r->ubatches[bench_setting_ubatch(r, is)];
    return ub < b ? ub : b;
}

static inline bool bench_fits(const bench_results *r, int im, int it) {
    return r->fits[(size_t)im * (size_t)r->n_tests + (size_t)it];
}

static inline bench_load *bench_load_at(const bench_results *r, int im, int ip) {
    return &r->loads[(size_t)im * (size_t)r->n_policies + (size_t)ip];
}

static inline size_t bench_sample_offset(const bench_results *r, int im, int is, int it) {
    return (((size_t)im * (size_t)bench_n_settings(r) + (size_t)is) * (size_t)r->n_tests + (size_t)it) *
           (size_t)r->reps;
}
static inline double *bench_seconds_at(const bench_results *r, int im, int is, int it) {
    return &r->seconds[bench_sample_offset(r, im, is, it)];
}
static inline double *bench_wall_at(const bench_results *r, int im, int is, int it) {
    return &r->wall[bench_sample_offset(r, im, is, it)];
}
static inline int64_t *bench_order_at(const bench_results *r, int im, int is, int it) {
    return &r->order[bench_sample_offset(r, im, is, it)];
}

static inline st_profile *bench_profile_at(const bench_results *r, int im, int is, int it) {
    return &r->profiles[((size_t)im * (size_t)bench_n_settings(r) + (size_t)is) * (size_t)r->n_tests + (size_t)it];
}

/* ---- bench_run.c ---- */

/* Loads model file im under every policy, runs every test of every setting (untimed
 * warm-up, then the repetitions interleaved across settings) into r->seconds/r->wall, and
 * frees the models. `progress`: an updating line on stderr. */
st_status bench_run_model(bench_results *r, int im, st_backend *b, const cli_model_setup *setup,
                          const st_layout_policy *policies, bool progress, st_error *err);

/* Loads one model file under one policy (progress on a terminal) and describes it in *l. */
st_status bench_load_model(const char *path, const char *policy_name, const st_layout_policy *policy, int64_t n_ctx,
                           st_backend *b, const cli_model_setup *setup, st_model **out, bench_load *l, st_error *err);

/* ---- bench_util.c: what every report shares; it calls no report ---- */

/* "pp512", "tg128", "pp512 @ d4096", "ttft4096 @ d0" (a TTFT always names its depth) */
void bench_test_name(const bench_test *t, char *buf, size_t size);
const char *bench_kind_name(bench_kind k); /* "pp", "tg", "ttft" */

/* "pp512", or "pp512 b256 ub128" when -b/-ub take more than one value together: the row
 * label of a (test, -b, -ub) in the comparison tables. */
void bench_row_name(const bench_results *r, int it, int ib, int iu, char *buf, size_t size);

/* A CSV field, quoted, with its quotes doubled. */
void bench_csv_field(FILE *out, const char *s);
/* [x0 * scale, x1 * scale, ...] with fmt per number. */
void bench_json_numbers(FILE *out, const double *x, int n, const char *fmt, double scale);

/* splitmix64: token ids reproducible from the seed on any platform. */
uint64_t bench_random(uint64_t *state);

/* The JSON object of a device: {"name": ..., "backend": ..., ...}. */
void bench_json_device(FILE *out, const st_device_info *d, const char *backend);

/* Mean and sample standard deviation (0 for a single value). */
void bench_stats(const double *x, int n, double *mean, double *sd);

/* Rate of each repetition (tok/s) of one (model, setting, test); rates has reps entries. */
void bench_rates(const bench_results *r, int im, int is, int it, double *rates);

/* Index of a policy in the list, or -1. */
int bench_policy_index(const bench_results *r, const char *policy);

/* ---- bench_compare.c: the comparison tables (uses bench_util.c) ---- */

/* One comparison: setting a against setting b (same model, test, -b, -ub), per paired
 * repetition (time_b / time_a - 1) * 100, which is (t/s a / t/s b - 1) for a rate and
 * "a is that much faster" for a latency. */
typedef struct bench_cell {
    int ip_a, ip_b;   /* policies compared */
    double mean, sd;  /* percent */
} bench_cell;

/* on vs off (false when either is not swept, or the test was skipped for the model). */
bool bench_cell_on_off(const bench_results *r, int im, int it, int ib, int iu, bench_cell *c, double *pct);
/* auto vs the better (by mean time) of on and off (false unless all three are swept, or
 * when the test was skipped for the model). */
bool bench_cell_auto_best(const bench_results *r, int im, int it, int ib, int iu, bench_cell *c, double *pct);

/* Which comparisons the policy list allows. */
bool bench_can_compare(const bench_results *r);      /* on and off */
bool bench_can_compare_auto(const bench_results *r); /* on, off and auto */

/* The on-vs-off and auto-vs-best tables (rows: tests x -b x -ub; columns: models), in
 * markdown; nothing when on and off are not both swept. */
void bench_compare_md(FILE *out, const bench_results *r);
/* One CSV line per (comparison, row, model). */
void bench_compare_csv(FILE *out, const bench_results *r);
/* The "compare" member of the JSON report: a list of cells with their repetitions. */
void bench_compare_json(FILE *out, const bench_results *r);

/* ---- bench_report.c: the reports (uses bench_compare.c and bench_util.c) ---- */

/* The commit the build was configured at, or NULL. */
const char *bench_commit(void);

void bench_report_md(FILE *out, const bench_results *r);
void bench_report_csv(FILE *out, const bench_results *r);
void bench_report_json(FILE *out, const bench_results *r);

/* ---- bench_profile.c: the per-op profiles of --profile (uses bench_util.c) ---- */

/* A profile's table under "### title": every op's calls and device time divided by `per`
 * (the tokens or steps the profile covers), its share, GB/s, TFLOP/s and, with `roof`,
 * its roofline time; then the sum, and timed_seconds / per of the timed runs beside it. */
void bench_profile_table_md(FILE *out, const char *title, const st_profile *p, double per, double timed_seconds,
                            bool roof);
/* The paragraph under the tables: how ops were timed, what `units` the figures are in. */
void bench_profile_note_md(FILE *out, bool cuda, const char *units);
/* "steps": n, "complete": b, "ops": [{op, calls, seconds, bytes, flops}, ...] */
void bench_profile_ops_json(FILE *out, const st_profile *p);

/* A table per profiled (model, setting, test), per token (tg) or per prompt (pp). */
void bench_profile_md(FILE *out, const bench_results *r);
/* The "profiles" member of the JSON report: a list of {model, setting, test, ops: [...]}. */
void bench_profile_json(FILE *out, const bench_results *r);

/* ---- bench_chart.c: the SVG chart (uses bench_compare.c and bench_util.c) ---- */

/* The on-vs-off table as an SVG bar chart: a group of bars per row, a colour per model,
 * a zero line, sd whiskers and the value on every bar. Written through st_atomic_file:
 * the file appears complete or not at all. */
st_status bench_chart_svg(const char *path, const bench_results *r, st_error *err);

#endif
