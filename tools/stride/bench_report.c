/* stride bench: the reports. Markdown (llama-bench's table, the TTFT table, the comparison
 * tables of bench_compare.c), CSV (one row per repetition) and JSON (everything: device,
 * parameters, every repetition, the comparisons). With --compare the markdown and CSV give
 * the comparison only, in the seed's form. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

/* The commit the binary was built from (cmake/commit.cmake; absent outside a git checkout
 * without $STRIDE_COMMIT). */
#include "stride_commit.h"
#ifdef STRIDE_GIT_COMMIT
const char *bench_commit(void) { return STRIDE_GIT_COMMIT; }
#else
const char *bench_commit(void) { return NULL; }
#endif

static bool bench_shows_batches(const bench_results *r) {
    return r->n_batches * r->n_ubatches > 1 || r->batches[0] != BENCH_DEFAULT_BATCH ||
           r->ubatches[0] != BENCH_DEFAULT_UBATCH;
}

static void format_count(uint64_t n, char *buf, size_t size) {
    if (n >= 1000000000ull)
        snprintf(buf, size, "%.2f B", (double)n / 1e9);
    else if (n >= 1000000ull)
        snprintf(buf, size, "%.2f M", (double)n / 1e6);
    else if (n >= 1000ull)
        snprintf(buf, size, "%.2f K", (double)n / 1e3);
    else
        snprintf(buf, size, "%" PRIu64, n);
}

static void policy_label(const bench_load *l, char *buf, size_t size) {
    if (strcmp(l->policy, "auto") == 0)
        snprintf(buf, size, "auto (%s)", l->pad_enabled ? "on" : "off");
    else if (strcmp(l->policy, "on") == 0 && !l->pad_enabled)
        snprintf(buf, size, "on (kill switch: off)");
    else
        snprintf(buf, size, "%s", l->policy);
}

static bool has_kind(const bench_results *r, bool ttft) {
    for (int it = 0; it < r->n_tests; it++)
        if ((r->tests[it].kind == BENCH_KIND_TTFT) == ttft) return true;
    return false;
}

/* llama-bench's table: one row per (model, test, setting), rates in t/s. */
static void md_rates(FILE *out, const bench_results *r, double *v) {
    char backend[64];
    if (r->device.backend == ST_BACKEND_CPU)
        snprintf(backend, sizeof(backend), "%s %s, %d threads", r->backend, r->cpu_path ? r->cpu_path : "",
                 r->threads);
    else
        snprintf(backend, sizeof(backend), "%s", r->backend);
    const bool batches = bench_shows_batches(r);
    fprintf(out, "| model | size | params | backend | pad |%s test | t/s |\n", batches ? " n_batch | n_ubatch |" : "");
    fprintf(out, "| --- | ---: | ---: | --- | --- |%s ---: | ---: |\n", batches ? " ---: | ---: |" : "");
    for (int im = 0; im < r->n_models; im++) {
        for (int it = 0; it < r->n_tests; it++) {
            if (r->tests[it].kind == BENCH_KIND_TTFT || !bench_fits(r, im, it)) continue;
            for (int is = 0; is < bench_n_settings(r); is++) {
                const bench_load *l = bench_load_at(r, im, bench_setting_policy(r, is));
                char size[32], params[32], pad[48], test[64], bub[64] = "";
                cli_format_bytes(l->weights_bytes, size, sizeof(size));
                format_count(l->n_params, params, sizeof(params));
                policy_label(l, pad, sizeof(pad));
                bench_test_name(&r->tests[it], test, sizeof(test));
                if (batches)
                    snprintf(bub, sizeof(bub), " %lld | %lld |", (long long)r->batches[bench_setting_batch(r, is)],
                             (long long)r->ubatches[bench_setting_ubatch(r, is)]);
                double mean, sd;
                bench_rates(r, im, is, it, v);
                bench_stats(v, r->reps, &mean, &sd);
                fprintf(out, "| %s | %s | %s | %s | %s |%s %s | %.2f ± %.2f |\n", cli_base_name(r->models[im]),
                        size, params, backend, pad, bub, test, mean, sd);
            }
        }
    }
}

/* Time to first token in ms: rows (test, setting), columns models. */
static void md_ttft(FILE *out, const bench_results *r, double *v) {
    const bool batches = bench_shows_batches(r);
    fprintf(out, "time to first token, ms (mean ± sd over %d repetitions; host wall time from handing over the "
                 "prompt until its last logits are on the host, after DEPTH tokens in the cache):\n\n", r->reps);
    fprintf(out, "| test | pad |%s", batches ? " n_batch | n_ubatch |" : "");
    for (int im = 0; im < r->n_models; im++) fprintf(out, " %s |", cli_base_name(r->models[im]));
    fprintf(out, "\n| --- | --- |%s", batches ? " ---: | ---: |" : "");
    for (int im = 0; im < r->n_models; im++) fprintf(out, " ---: |");
    fprintf(out, "\n");
    for (int it = 0; it < r->n_tests; it++) {
        if (r->tests[it].kind != BENCH_KIND_TTFT) continue;
        char test[64];
        bench_test_name(&r->tests[it], test, sizeof(test));
        for (int is = 0; is < bench_n_settings(r); is++) {
            fprintf(out, "| %s | %s |", test, r->policies[bench_setting_policy(r, is)]);
            if (batches)
                fprintf(out, " %lld | %lld |", (long long)r->batches[bench_setting_batch(r, is)],
                        (long long)r->ubatches[bench_setting_ubatch(r, is)]);
            for (int im = 0; im < r->n_models; im++) {
                if (!bench_fits(r, im, it)) {
                    fprintf(out, " n/a |");
                    continue;
                }
                const double *sec = bench_seconds_at(r, im, is, it);
                for (int k = 0; k < r->reps; k++) v[k] = sec[k] * 1e3;
                double mean, sd;
                bench_stats(v, r->reps, &mean, &sd);
                fprintf(out, " %.2f ± %.2f |", mean, sd);
            }
            fprintf(out, "\n");
        }
    }
}

/* The tests skipped for a model, one line per model. */
static void md_skipped(FILE *out, const bench_results *r) {
    bool blank = false;
    for (int im = 0; im < r->n_models; im++) {
        int n = 0;
        for (int it = 0; it < r->n_tests; it++) {
            if (bench_fits(r, im, it)) continue;
            char test[64];
            bench_test_name(&r->tests[it], test, sizeof(test));
            if (n++ == 0)
                fprintf(out, "%sn/a for %s (longer than its context_length): %s", blank ? "" : "\n",
                        cli_base_name(r->models[im]), test);
            else
                fprintf(out, ", %s", test);
        }
        if (n) fputc('\n', out);
        blank = blank || n > 0;
    }
}

void bench_report_md(FILE *out, const bench_results *r) {
    double *v = calloc((size_t)r->reps, sizeof(double));
    if (!v) return;
    bool any = false;
    if (!r->compare && has_kind(r, false)) {
        md_rates(out, r, v);
        any = true;
    }
    if (bench_can_compare(r)) {
        if (any) fprintf(out, "\n");
        bench_compare_md(out, r);
        any = true;
    }
    if (has_kind(r, true)) {
        if (any) fprintf(out, "\n");
        md_ttft(out, r, v);
    }
    md_skipped(out, r);
    bench_profile_md(out, r);
    const char *commit = bench_commit();
    fprintf(out, "\ndevice: %s; stride %s%s%s; %s; %d repetitions, interleaved across settings after a warm-up; "
                 "kv %s\n",
            r->device.name, STRIDE_VERSION_STRING, commit ? " " : "", commit ? commit : "", r->date, r->reps,
            r->kv_type);
    free(v);
}

/* One (model, setting, test) result as the report writers see it. */
typedef struct bench_result_view {
    int im, is, it;
    const bench_load *l;
    const bench_test *t;
    char test[64];     /* its name */
    const double *v;   /* [reps] t/s */
    double mean, sd;   /* of v */
    const double *sec; /* [reps] seconds */
    bool first;        /* the first result visited */
} bench_result_view;

typedef void (*bench_result_fn)(FILE *out, const bench_results *r, const bench_result_view *x);

/* Calls fn for every result that ran (models, then settings, then tests, in order). */
static void for_each_result(FILE *out, const bench_results *r, bench_result_fn fn) {
    double *v = calloc((size_t)r->reps, sizeof(double));
    if (!v) return;
    bench_result_view x = {.v = v, .first = true};
    for (x.im = 0; x.im < r->n_models; x.im++)
        for (x.is = 0; x.is < bench_n_settings(r); x.is++) {
            x.l = bench_load_at(r, x.im, bench_setting_policy(r, x.is));
            for (x.it = 0; x.it < r->n_tests; x.it++) {
                x.t = &r->tests[x.it];
                if (!bench_fits(r, x.im, x.it)) continue;
                bench_test_name(x.t, x.test, sizeof(x.test));
                bench_rates(r, x.im, x.is, x.it, v);
                bench_stats(v, r->reps, &x.mean, &x.sd);
                x.sec = bench_seconds_at(r, x.im, x.is, x.it);
                fn(out, r, &x);
                x.first = false;
            }
        }
    free(v);
}

static void csv_result(FILE *out, const bench_results *r, const bench_result_view *x) {
    const char *commit = bench_commit();
    const bench_load *l = x->l;
    const bench_test *t = x->t;
    const double *wall = bench_wall_at(r, x->im, x->is, x->it);
    for (int k = 0; k < r->reps; k++) {
        bench_csv_field(out, STRIDE_VERSION_STRING);
        fputc(',', out);
        bench_csv_field(out, commit ? commit : "");
        fprintf(out, ",%s,", r->date);
        bench_csv_field(out, r->device.name);
        fprintf(out, ",%s,%d,%d,%d,", r->backend, r->device.driver_version, r->device.runtime_version, r->threads);
        bench_csv_field(out, r->models[x->im]);
        fprintf(out,
                ",%s,%" PRIu64 ",%" PRIu64 ",%s,%s,%" PRIu64 ",%s,%s,%lld,%lld,%lld,%lld,%lld,%s,%s,%" PRIu64
                ",%d,%.9f,%.9f,%.6f,%.6f,%.6f,",
                l->arch, l->weights_bytes, l->n_params, l->policy, l->pad_enabled ? "true" : "false", l->n_padded,
                x->test, bench_kind_name(t->kind), (long long)t->n, (long long)t->depth,
                (long long)r->batches[bench_setting_batch(r, x->is)],
                (long long)r->ubatches[bench_setting_ubatch(r, x->is)], (long long)r->n_ctx, r->kv_type, r->weights,
                r->seed, k, x->sec[k], wall[k], x->v[k], x->mean, x->sd);
        if (t->kind == BENCH_KIND_TTFT) fprintf(out, "%.6f", x->sec[k] * 1e3);
        fputc('\n', out);
    }
}

void bench_report_csv(FILE *out, const bench_results *r) {
    if (r->compare) {
        bench_compare_csv(out, r);
        return;
    }
    fprintf(out, "stride_version,commit,date,device,backend,driver_version,runtime_version,threads,model_file,arch,"
                 "model_size,model_params,pad_weights,pad_enabled,n_padded,test,kind,n_tokens,depth,n_batch,n_ubatch,"
                 "n_ctx,kv_type,weights,seed,rep,seconds,wall_seconds,t_s,avg_ts,stddev_ts,ttft_ms\n");
    for_each_result(out, r, csv_result);
}


static void json_header(FILE *out, const bench_results *r) {
    const char *commit = bench_commit();
    const st_device_info *d = &r->device;
    fprintf(out, "{\n  \"stride_version\": ");
    cli_json_str(out, STRIDE_VERSION_STRING);
    fprintf(out, ",\n  \"commit\": ");
    if (commit)
        cli_json_str(out, commit);
    else
        fputs("null", out);
    fprintf(out, ",\n  \"date\": ");
    cli_json_str(out, r->date);
    fprintf(out, ",\n  \"command\": ");
    cli_json_str(out, r->argv);
    fprintf(out, ",\n  \"device\": ");
    bench_json_device(out, d, r->backend);
    fprintf(out, ",\n");
    fprintf(out, "  \"params\": {\"models\": [");
    for (int im = 0; im < r->n_models; im++) {
        if (im) fputs(", ", out);
        cli_json_str(out, r->models[im]);
    }
    fprintf(out, "], \"pad_weights\": [");
    for (int ip = 0; ip < r->n_policies; ip++) fprintf(out, "%s\"%s\"", ip ? ", " : "", r->policies[ip]);
    fprintf(out, "], \"n_batch\": ");
    cli_json_ints(out, r->batches, r->n_batches);
    fprintf(out, ", \"n_ubatch\": ");
    cli_json_ints(out, r->ubatches, r->n_ubatches);
    fprintf(out, ", \"tests\": [");
    for (int it = 0; it < r->n_tests; it++) {
        char test[64];
        bench_test_name(&r->tests[it], test, sizeof(test));
        fprintf(out, "%s\"%s\"", it ? ", " : "", test);
    }
    fprintf(out,
            "], \"repetitions\": %d, \"n_ctx\": %lld, \"backend\": \"%s\", \"cpu_path\": %s%s%s, \"threads\": %d, "
            "\"kv_type\": \"%s\", \"weights\": \"%s\", \"seed\": %" PRIu64 ", \"warmup_runs\": 1, \"interleaved\": true, "
            "\"compare\": %s, \"clock\": {\"pp\": \"%s\", \"tg\": \"%s\", \"ttft\": \"host wall clock\"}},\n",
            r->reps, (long long)r->n_ctx, r->backend, r->cpu_path ? "\"" : "", r->cpu_path ? r->cpu_path : "null",
            r->cpu_path ? "\"" : "", r->threads, r->kv_type, r->weights, r->seed,
            r->compare ? "true" : "false",
            d->backend == ST_BACKEND_CUDA ? "backend timer (CUDA events)" : "backend timer (host clock)",
            d->backend == ST_BACKEND_CUDA ? "backend timer (CUDA events)" : "backend timer (host clock)");
}

static void json_result(FILE *out, const bench_results *r, const bench_result_view *x) {
    const bench_load *l = x->l;
    const bench_test *t = x->t;
    fprintf(out, "%s\n    {\"model_file\": ", x->first ? "" : ",");
    cli_json_str(out, r->models[x->im]);
    fprintf(out,
            ", \"arch\": \"%s\", \"model_size\": %" PRIu64 ", \"model_params\": %" PRIu64
            ", \"pad_weights\": \"%s\", \"pad_enabled\": %s, \"n_padded\": %" PRIu64
            ", \"n_batch\": %lld, \"n_ubatch\": %lld, \"test\": \"%s\", \"kind\": \"%s\", "
            "\"n_tokens\": %lld, \"depth\": %lld, \"avg_ts\": %.6f, \"stddev_ts\": %.6f, ",
            l->arch, l->weights_bytes, l->n_params, l->policy, l->pad_enabled ? "true" : "false", l->n_padded,
            (long long)r->batches[bench_setting_batch(r, x->is)], (long long)r->ubatches[bench_setting_ubatch(r, x->is)],
            x->test, bench_kind_name(t->kind), (long long)t->n, (long long)t->depth, x->mean, x->sd);
    if (t->kind == BENCH_KIND_TTFT) {
        double mean, sd;
        bench_stats(x->sec, r->reps, &mean, &sd);
        fprintf(out, "\"avg_ms\": %.6f, \"stddev_ms\": %.6f, \"ms\": ", mean * 1e3, sd * 1e3);
        bench_json_numbers(out, x->sec, r->reps, "%.6f", 1e3);
        fprintf(out, ", ");
    }
    fprintf(out, "\"seconds\": ");
    bench_json_numbers(out, x->sec, r->reps, "%.12g", 1.0);
    fprintf(out, ", \"wall_seconds\": ");
    bench_json_numbers(out, bench_wall_at(r, x->im, x->is, x->it), r->reps, "%.12g", 1.0);
    fprintf(out, ", \"t_s\": ");
    bench_json_numbers(out, x->v, r->reps, "%.6f", 1.0);
    fprintf(out, ", \"run_order\": ");
    cli_json_ints(out, bench_order_at(r, x->im, x->is, x->it), r->reps);
    fputc('}', out);
}

void bench_report_json(FILE *out, const bench_results *r) {
    json_header(out, r);
    fprintf(out, "  \"results\": [");
    for_each_result(out, r, json_result);
    fprintf(out, "\n  ],\n  \"skipped\": [");
    bool first = true;
    for (int im = 0; im < r->n_models; im++)
        for (int it = 0; it < r->n_tests; it++) {
            if (bench_fits(r, im, it)) continue;
            char test[64];
            bench_test_name(&r->tests[it], test, sizeof(test));
            fprintf(out, "%s{\"model_file\": ", first ? "" : ", ");
            cli_json_str(out, r->models[im]);
            fprintf(out, ", \"test\": \"%s\", \"reason\": \"context_length\"}", test);
            first = false;
        }
    fprintf(out, "],\n  \"compare\": ");
    bench_compare_json(out, r);
    fprintf(out, ",\n  \"profiles\": ");
    bench_profile_json(out, r);
    fprintf(out, "\n}\n");
}
