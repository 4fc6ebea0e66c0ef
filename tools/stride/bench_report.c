/* stride bench: the reports. Markdown (llama-bench's table plus the on/off speedup table),
 * CSV (one row per repetition) and JSON (everything: device, parameters, every
 * repetition, the speedups). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

/* The commit is not known to the build (CMake passes only the version); a build that
 * wants it in the reports can add -DSTRIDE_GIT_COMMIT='"<sha>"' to CMAKE_C_FLAGS. */
#ifdef STRIDE_GIT_COMMIT
static const char *bench_commit(void) { return STRIDE_GIT_COMMIT; }
#else
static const char *bench_commit(void) { return NULL; }
#endif

void bench_test_name(const bench_test *t, char *buf, size_t size) {
    const char *k = t->kind == BENCH_KIND_PP ? "pp" : "tg";
    if (t->depth > 0)
        snprintf(buf, size, "%s%lld @ d%lld", k, (long long)t->n, (long long)t->depth);
    else
        snprintf(buf, size, "%s%lld", k, (long long)t->n);
}

void bench_stats(const double *x, int n, double *mean, double *sd) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += x[i];
    *mean = n > 0 ? s / n : 0.0;
    double q = 0.0;
    for (int i = 0; i < n; i++) q += (x[i] - *mean) * (x[i] - *mean);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0.0;
}

void bench_rates(const bench_results *r, int im, int ip, int it, double *rates) {
    const double *sec = bench_seconds_at(r, im, ip, it);
    for (int i = 0; i < r->reps; i++) rates[i] = sec[i] > 0 ? (double)r->tests[it].n / sec[i] : 0.0;
}

int bench_policy_index(const bench_results *r, const char *policy) {
    for (int i = 0; i < r->n_policies; i++)
        if (strcmp(r->policies[i], policy) == 0) return i;
    return -1;
}

void bench_speedup(const bench_results *r, int im, int it, int ip_on, int ip_off, double *pct) {
    const double *on = bench_seconds_at(r, im, ip_on, it), *off = bench_seconds_at(r, im, ip_off, it);
    /* rate_on / rate_off = t_off / t_on for the same token count */
    for (int i = 0; i < r->reps; i++) pct[i] = on[i] > 0 ? (off[i] / on[i] - 1.0) * 100.0 : 0.0;
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
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

void bench_report_md(FILE *out, const bench_results *r) {
    char backend[64];
    if (r->device.backend == ST_BACKEND_CPU)
        snprintf(backend, sizeof(backend), "%s, %d threads", r->backend, r->threads);
    else
        snprintf(backend, sizeof(backend), "%s", r->backend);
    double *v = calloc((size_t)r->reps, sizeof(double));
    if (!v) return;
    fprintf(out, "| model | size | params | backend | pad | test | t/s |\n");
    fprintf(out, "| --- | ---: | ---: | --- | --- | ---: | ---: |\n");
    for (int im = 0; im < r->n_models; im++) {
        for (int it = 0; it < r->n_tests; it++) {
            for (int ip = 0; ip < r->n_policies; ip++) {
                const bench_load *l = bench_load_at(r, im, ip);
                char size[32], params[32], pad[48], test[64];
                cli_format_bytes(l->weights_bytes, size, sizeof(size));
                format_count(l->n_params, params, sizeof(params));
                policy_label(l, pad, sizeof(pad));
                bench_test_name(&r->tests[it], test, sizeof(test));
                double mean, sd;
                bench_rates(r, im, ip, it, v);
                bench_stats(v, r->reps, &mean, &sd);
                fprintf(out, "| %s | %s | %s | %s | %s | %s | %.2f ± %.2f |\n", base_name(r->models[im]), size,
                        params, backend, pad, test, mean, sd);
            }
        }
    }
    const int ip_on = bench_policy_index(r, "on"), ip_off = bench_policy_index(r, "off");
    if (ip_on >= 0 && ip_off >= 0) {
        fprintf(out, "\npadding on vs off (mean ± sd over %d paired repetitions of (t/s on / t/s off - 1)):\n\n",
                r->reps);
        fprintf(out, "| test |");
        for (int im = 0; im < r->n_models; im++) fprintf(out, " %s |", base_name(r->models[im]));
        fprintf(out, "\n| --- |");
        for (int im = 0; im < r->n_models; im++) fprintf(out, " ---: |");
        fprintf(out, "\n");
        for (int it = 0; it < r->n_tests; it++) {
            char test[64];
            bench_test_name(&r->tests[it], test, sizeof(test));
            fprintf(out, "| %s |", test);
            for (int im = 0; im < r->n_models; im++) {
                double mean, sd;
                bench_speedup(r, im, it, ip_on, ip_off, v);
                bench_stats(v, r->reps, &mean, &sd);
                fprintf(out, " %+.1f%% ± %.1f |", mean, sd);
            }
            fprintf(out, "\n");
        }
    }
    const char *commit = bench_commit();
    fprintf(out, "\ndevice: %s; stride %s%s%s; %d repetitions, interleaved across policies; -ub %lld, kv %s\n",
            r->device.name, STRIDE_VERSION_STRING, commit ? " " : "", commit ? commit : "", r->reps,
            (long long)r->n_ubatch, r->kv_type);
    free(v);
}

static void csv_field(FILE *out, const char *s) {
    fputc('"', out);
    for (; *s; s++) {
        if (*s == '"') fputc('"', out);
        fputc(*s, out);
    }
    fputc('"', out);
}

void bench_report_csv(FILE *out, const bench_results *r) {
    const char *commit = bench_commit();
    double *v = calloc((size_t)r->reps, sizeof(double));
    if (!v) return;
    fprintf(out, "stride_version,commit,device,backend,driver_version,runtime_version,threads,model_file,"
                 "model_size,model_params,pad_weights,pad_enabled,n_padded,test,kind,n_tokens,depth,n_ubatch,"
                 "n_ctx,kv_type,weights,seed,rep,seconds,t_s,avg_ts,stddev_ts\n");
    for (int im = 0; im < r->n_models; im++) {
        for (int ip = 0; ip < r->n_policies; ip++) {
            const bench_load *l = bench_load_at(r, im, ip);
            for (int it = 0; it < r->n_tests; it++) {
                const bench_test *t = &r->tests[it];
                char test[64];
                bench_test_name(t, test, sizeof(test));
                double mean, sd;
                bench_rates(r, im, ip, it, v);
                bench_stats(v, r->reps, &mean, &sd);
                const double *sec = bench_seconds_at(r, im, ip, it);
                for (int k = 0; k < r->reps; k++) {
                    csv_field(out, STRIDE_VERSION_STRING);
                    fputc(',', out);
                    csv_field(out, commit ? commit : "");
                    fputc(',', out);
                    csv_field(out, r->device.name);
                    fprintf(out, ",%s,%d,%d,%d,", r->backend, r->device.driver_version, r->device.runtime_version,
                            r->threads);
                    csv_field(out, r->models[im]);
                    fprintf(out,
                            ",%" PRIu64 ",%" PRIu64 ",%s,%s,%" PRIu64 ",%s,%s,%lld,%lld,%lld,%lld,%s,%s,%" PRIu64
                            ",%d,%.9f,%.6f,%.6f,%.6f\n",
                            l->weights_bytes, l->n_params, l->policy, l->pad_enabled ? "true" : "false", l->n_padded,
                            test, t->kind == BENCH_KIND_PP ? "pp" : "tg", (long long)t->n, (long long)t->depth,
                            (long long)r->n_ubatch, (long long)r->n_ctx, r->kv_type, r->weights, r->seed, k, sec[k],
                            v[k], mean, sd);
                }
            }
        }
    }
    free(v);
}

static void json_str(FILE *out, const char *s) { cli_json_string(out, s, strlen(s)); }

static void json_numbers(FILE *out, const double *x, int n, const char *fmt) {
    fputc('[', out);
    for (int i = 0; i < n; i++) {
        if (i) fputs(", ", out);
        fprintf(out, fmt, x[i]);
    }
    fputc(']', out);
}

void bench_report_json(FILE *out, const bench_results *r) {
    const char *commit = bench_commit();
    double *v = calloc((size_t)r->reps, sizeof(double));
    if (!v) return;
    const st_device_info *d = &r->device;
    fprintf(out, "{\n  \"stride_version\": ");
    json_str(out, STRIDE_VERSION_STRING);
    fprintf(out, ",\n  \"commit\": ");
    if (commit)
        json_str(out, commit);
    else
        fputs("null", out);
    fprintf(out, ",\n  \"device\": {\"name\": ");
    json_str(out, d->name);
    fprintf(out,
            ", \"backend\": \"%s\", \"kind\": \"%s\", \"compute_capability\": \"%d.%d\", \"total_memory\": %zu, "
            "\"l2_bytes\": %zu, \"driver_version\": %d, \"runtime_version\": %d},\n",
            r->backend, st_device_kind_name(d->kind), d->compute_major, d->compute_minor, d->total_memory,
            d->l2_bytes, d->driver_version, d->runtime_version);
    fprintf(out, "  \"params\": {\"models\": [");
    for (int im = 0; im < r->n_models; im++) {
        if (im) fputs(", ", out);
        json_str(out, r->models[im]);
    }
    fprintf(out, "], \"pad_weights\": [");
    for (int ip = 0; ip < r->n_policies; ip++) fprintf(out, "%s\"%s\"", ip ? ", " : "", r->policies[ip]);
    fprintf(out, "], \"tests\": [");
    for (int it = 0; it < r->n_tests; it++) {
        char test[64];
        bench_test_name(&r->tests[it], test, sizeof(test));
        fprintf(out, "%s\"%s\"", it ? ", " : "", test);
    }
    fprintf(out,
            "], \"repetitions\": %d, \"n_ubatch\": %lld, \"n_ctx\": %lld, \"threads\": %d, \"kv_type\": \"%s\", "
            "\"weights\": \"%s\", \"seed\": %" PRIu64 ", \"warmup_runs\": 1, \"interleaved\": true},\n",
            r->reps, (long long)r->n_ubatch, (long long)r->n_ctx, r->threads, r->kv_type, r->weights, r->seed);
    fprintf(out, "  \"results\": [");
    bool first = true;
    for (int im = 0; im < r->n_models; im++) {
        for (int ip = 0; ip < r->n_policies; ip++) {
            const bench_load *l = bench_load_at(r, im, ip);
            for (int it = 0; it < r->n_tests; it++) {
                const bench_test *t = &r->tests[it];
                char test[64];
                bench_test_name(t, test, sizeof(test));
                double mean, sd;
                bench_rates(r, im, ip, it, v);
                bench_stats(v, r->reps, &mean, &sd);
                fprintf(out, "%s\n    {\"model_file\": ", first ? "" : ",");
                first = false;
                json_str(out, r->models[im]);
                fprintf(out,
                        ", \"model_size\": %" PRIu64 ", \"model_params\": %" PRIu64 ", \"pad_weights\": \"%s\", "
                        "\"pad_enabled\": %s, \"n_padded\": %" PRIu64 ", \"test\": \"%s\", \"kind\": \"%s\", "
                        "\"n_tokens\": %lld, \"depth\": %lld, \"avg_ts\": %.6f, \"stddev_ts\": %.6f, \"seconds\": ",
                        l->weights_bytes, l->n_params, l->policy, l->pad_enabled ? "true" : "false", l->n_padded,
                        test, t->kind == BENCH_KIND_PP ? "pp" : "tg", (long long)t->n, (long long)t->depth, mean, sd);
                json_numbers(out, bench_seconds_at(r, im, ip, it), r->reps, "%.9f");
                fprintf(out, ", \"t_s\": ");
                json_numbers(out, v, r->reps, "%.6f");
                fputc('}', out);
            }
        }
    }
    fprintf(out, "\n  ],\n  \"speedup\": [");
    const int ip_on = bench_policy_index(r, "on"), ip_off = bench_policy_index(r, "off");
    first = true;
    for (int im = 0; ip_on >= 0 && ip_off >= 0 && im < r->n_models; im++) {
        for (int it = 0; it < r->n_tests; it++) {
            char test[64];
            bench_test_name(&r->tests[it], test, sizeof(test));
            double mean, sd;
            bench_speedup(r, im, it, ip_on, ip_off, v);
            bench_stats(v, r->reps, &mean, &sd);
            fprintf(out, "%s\n    {\"model_file\": ", first ? "" : ",");
            first = false;
            json_str(out, r->models[im]);
            fprintf(out, ", \"test\": \"%s\", \"on_vs_off_pct\": %.6f, \"sd_pct\": %.6f, \"per_rep_pct\": ", test, mean,
                    sd);
            json_numbers(out, v, r->reps, "%.6f");
            fputc('}', out);
        }
    }
    fprintf(out, "%s]\n}\n", first ? "" : "\n  ");
    free(v);
}
