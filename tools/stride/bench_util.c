/* stride bench: the pieces every report shares (bench_report.c, bench_compare.c,
 * bench_chart.c): test and row names, the statistics of a result, and CSV / JSON value
 * writers. The reports call these; nothing here calls a report. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

const char *bench_kind_name(bench_kind k) {
    switch (k) {
    case BENCH_KIND_PP: return "pp";
    case BENCH_KIND_TG: return "tg";
    case BENCH_KIND_TTFT: return "ttft";
    }
    return "?";
}

void bench_test_name(const bench_test *t, char *buf, size_t size) {
    const char *k = bench_kind_name(t->kind);
    if (t->depth > 0 || t->kind == BENCH_KIND_TTFT)
        snprintf(buf, size, "%s%lld @ d%lld", k, (long long)t->n, (long long)t->depth);
    else
        snprintf(buf, size, "%s%lld", k, (long long)t->n);
}

void bench_row_name(const bench_results *r, int it, int ib, int iu, char *buf, size_t size) {
    char test[64];
    bench_test_name(&r->tests[it], test, sizeof(test));
    if (r->n_batches * r->n_ubatches > 1)
        snprintf(buf, size, "%s b%lld ub%lld", test, (long long)r->batches[ib], (long long)r->ubatches[iu]);
    else
        snprintf(buf, size, "%s", test);
}

void bench_stats(const double *x, int n, double *mean, double *sd) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += x[i];
    *mean = n > 0 ? s / n : 0.0;
    double q = 0.0;
    for (int i = 0; i < n; i++) q += (x[i] - *mean) * (x[i] - *mean);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0.0;
}

void bench_rates(const bench_results *r, int im, int is, int it, double *rates) {
    const double *sec = bench_seconds_at(r, im, is, it);
    for (int i = 0; i < r->reps; i++) rates[i] = sec[i] > 0 ? (double)r->tests[it].n / sec[i] : 0.0;
}

int bench_policy_index(const bench_results *r, const char *policy) {
    for (int i = 0; i < r->n_policies; i++)
        if (strcmp(r->policies[i], policy) == 0) return i;
    return -1;
}

void bench_csv_field(FILE *out, const char *s) {
    fputc('"', out);
    for (; *s; s++) {
        if (*s == '"') fputc('"', out);
        fputc(*s, out);
    }
    fputc('"', out);
}

void bench_json_numbers(FILE *out, const double *x, int n, const char *fmt, double scale) {
    fputc('[', out);
    for (int i = 0; i < n; i++) {
        if (i) fputs(", ", out);
        fprintf(out, fmt, x[i] * scale);
    }
    fputc(']', out);
}

void bench_json_device(FILE *out, const st_device_info *d, const char *backend) {
    fprintf(out, "{\"name\": ");
    cli_json_string(out, d->name, strlen(d->name));
    fprintf(out,
            ", \"backend\": \"%s\", \"kind\": \"%s\", \"compute_capability\": \"%d.%d\", \"total_memory\": %zu, "
            "\"l2_bytes\": %zu, \"driver_version\": %d, \"runtime_version\": %d}",
            backend, st_device_kind_name(d->kind), d->compute_major, d->compute_minor, d->total_memory, d->l2_bytes,
            d->driver_version, d->runtime_version);
}

uint64_t bench_random(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
