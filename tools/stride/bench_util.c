/* stride bench: the pieces every report shares (bench_report.c, bench_compare.c,
 * bench_chart.c): test and row names, the statistics of a result, and CSV / JSON value
 * writers. The reports call these; nothing here calls a report. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

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
