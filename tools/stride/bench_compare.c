/* stride bench: the comparison tables in the seed's form (rows: shapes such as pp128 ...
 * pp8192, tg128, ttft4096 @ d4096; columns: models; cells: percent with the spread).
 *
 * Every cell comes from paired repetitions: repetition k of setting a ran next to
 * repetition k of setting b (interleaved), so their ratio cancels a slow phase of the
 * machine. Per pair, (time_b / time_a - 1) * 100: for pp and tg that is (t/s a / t/s b - 1),
 * for TTFT (ms b / ms a - 1); positive always means "a is faster". A cell is the mean ± sd
 * of the per-pair values.
 *
 * Two comparisons: padding on vs off, and auto vs the better of on and off (the one with
 * the lower mean time in that cell), which is what SPEC.md §5 bounds at -2%. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

#define AUTO_TOLERANCE_PCT 2.0

bool bench_can_compare(const bench_results *r) {
    return bench_policy_index(r, "on") >= 0 && bench_policy_index(r, "off") >= 0;
}

bool bench_can_compare_auto(const bench_results *r) {
    return bench_can_compare(r) && bench_policy_index(r, "auto") >= 0;
}

/* Per-repetition percentages of policy ip_a over ip_b; pct has reps entries. */
static void compare_pct(const bench_results *r, int im, int it, int ib, int iu, int ip_a, int ip_b, double *pct) {
    const double *a = bench_seconds_at(r, im, bench_setting(r, ip_a, ib, iu), it);
    const double *b = bench_seconds_at(r, im, bench_setting(r, ip_b, ib, iu), it);
    for (int k = 0; k < r->reps; k++) pct[k] = a[k] > 0 ? (b[k] / a[k] - 1.0) * 100.0 : 0.0;
}

static void fill_cell(const bench_results *r, int im, int it, int ib, int iu, int ip_a, int ip_b, bench_cell *c,
                      double *pct) {
    c->ip_a = ip_a;
    c->ip_b = ip_b;
    compare_pct(r, im, it, ib, iu, ip_a, ip_b, pct);
    bench_stats(pct, r->reps, &c->mean, &c->sd);
}

bool bench_cell_on_off(const bench_results *r, int im, int it, int ib, int iu, bench_cell *c, double *pct) {
    if (!bench_can_compare(r) || !bench_fits(r, im, it)) return false;
    fill_cell(r, im, it, ib, iu, bench_policy_index(r, "on"), bench_policy_index(r, "off"), c, pct);
    return true;
}

bool bench_cell_auto_best(const bench_results *r, int im, int it, int ib, int iu, bench_cell *c, double *pct) {
    if (!bench_can_compare_auto(r) || !bench_fits(r, im, it)) return false;
    const int ip_on = bench_policy_index(r, "on"), ip_off = bench_policy_index(r, "off");
    double t_on, t_off, sd;
    bench_stats(bench_seconds_at(r, im, bench_setting(r, ip_on, ib, iu), it), r->reps, &t_on, &sd);
    bench_stats(bench_seconds_at(r, im, bench_setting(r, ip_off, ib, iu), it), r->reps, &t_off, &sd);
    fill_cell(r, im, it, ib, iu, bench_policy_index(r, "auto"), t_on <= t_off ? ip_on : ip_off, c, pct);
    return true;
}

typedef bool (*cell_fn)(const bench_results *r, int im, int it, int ib, int iu, bench_cell *c, double *pct);

static void md_table(FILE *out, const bench_results *r, cell_fn cell, bool name_b, double *pct) {
    fprintf(out, "| shape |");
    for (int im = 0; im < r->n_models; im++) fprintf(out, " %s |", cli_base_name(r->models[im]));
    fprintf(out, "\n| --- |");
    for (int im = 0; im < r->n_models; im++) fprintf(out, " ---: |");
    fprintf(out, "\n");
    for (int it = 0; it < r->n_tests; it++)
        for (int ib = 0; ib < r->n_batches; ib++)
            for (int iu = 0; iu < r->n_ubatches; iu++) {
                char row[96];
                bench_row_name(r, it, ib, iu, row, sizeof(row));
                fprintf(out, "| %s |", row);
                for (int im = 0; im < r->n_models; im++) {
                    bench_cell c;
                    if (!cell(r, im, it, ib, iu, &c, pct)) {
                        fprintf(out, " n/a |");
                        continue;
                    }
                    fprintf(out, " %+.1f%% ± %.1f", c.mean, c.sd);
                    if (name_b) fprintf(out, " (vs %s)", r->policies[c.ip_b]);
                    fprintf(out, " |");
                }
                fprintf(out, "\n");
            }
}

/* SPEC.md §5: auto is never slower than the better of on and off by more than 2%. */
static void md_auto_verdict(FILE *out, const bench_results *r, double *pct) {
    int n_bad = 0;
    double worst = INFINITY;
    char where[160] = "";
    for (int it = 0; it < r->n_tests; it++)
        for (int ib = 0; ib < r->n_batches; ib++)
            for (int iu = 0; iu < r->n_ubatches; iu++)
                for (int im = 0; im < r->n_models; im++) {
                    bench_cell c;
                    if (!bench_cell_auto_best(r, im, it, ib, iu, &c, pct)) continue;
                    if (c.mean < -AUTO_TOLERANCE_PCT) n_bad++;
                    if (c.mean < worst) {
                        char row[96];
                        bench_row_name(r, it, ib, iu, row, sizeof(row));
                        worst = c.mean;
                        snprintf(where, sizeof(where), "%s, %s", row, cli_base_name(r->models[im]));
                    }
                }
    if (isinf(worst)) return; /* every cell skipped */
    fprintf(out, "\nauto within %.0f%% of the better of on and off in every cell: %s (lowest %+.1f%%: %s)\n",
            AUTO_TOLERANCE_PCT, n_bad ? "no" : "yes", worst, where);
    if (n_bad) fprintf(out, "%d cell(s) below -%.0f%%\n", n_bad, AUTO_TOLERANCE_PCT);
}

void bench_compare_md(FILE *out, const bench_results *r) {
    if (!bench_can_compare(r)) return;
    double *pct = calloc((size_t)r->reps, sizeof(double));
    if (!pct) return;
    fprintf(out,
            "padding on vs off, mean ± sd over %d paired repetitions of (t/s on / t/s off - 1), for TTFT of "
            "(ms off / ms on - 1): positive = on is faster:\n\n",
            r->reps);
    md_table(out, r, bench_cell_on_off, false, pct);
    if (bench_can_compare_auto(r)) {
        fprintf(out,
                "\nauto vs the better of on and off (the one with the lower mean time in the cell, named), the "
                "same statistic:\n\n");
        md_table(out, r, bench_cell_auto_best, true, pct);
        md_auto_verdict(out, r, pct);
    }
    free(pct);
}

/* Calls visit for every cell of every comparison the policy list allows. */
typedef void (*cell_visit)(FILE *out, const bench_results *r, const char *comparison, int im, int it, int ib, int iu,
                           const bench_cell *c, const double *pct, bool first);

static void for_each_cell(FILE *out, const bench_results *r, cell_visit visit) {
    double *pct = calloc((size_t)r->reps, sizeof(double));
    if (!pct) return;
    static const struct {
        const char *name;
        cell_fn fn;
        bool (*allowed)(const bench_results *r);
    } comparisons[] = {{"on_vs_off", bench_cell_on_off, bench_can_compare},
                       {"auto_vs_best", bench_cell_auto_best, bench_can_compare_auto}};
    bool first = true;
    for (size_t k = 0; k < sizeof(comparisons) / sizeof(comparisons[0]); k++) {
        if (!comparisons[k].allowed(r)) continue;
        for (int it = 0; it < r->n_tests; it++)
            for (int ib = 0; ib < r->n_batches; ib++)
                for (int iu = 0; iu < r->n_ubatches; iu++)
                    for (int im = 0; im < r->n_models; im++) {
                        bench_cell c;
                        if (!comparisons[k].fn(r, im, it, ib, iu, &c, pct)) continue; /* skipped for im */
                        visit(out, r, comparisons[k].name, im, it, ib, iu, &c, pct, first);
                        first = false;
                    }
    }
    free(pct);
}

static void csv_cell(FILE *out, const bench_results *r, const char *comparison, int im, int it, int ib, int iu,
                     const bench_cell *c, const double *pct, bool first) {
    (void)first;
    const bench_test *t = &r->tests[it];
    char row[96], test[64];
    bench_row_name(r, it, ib, iu, row, sizeof(row));
    bench_test_name(t, test, sizeof(test));
    fprintf(out, "%s,%s,%s,", comparison, r->policies[c->ip_a], r->policies[c->ip_b]);
    bench_csv_field(out, r->models[im]);
    fprintf(out, ",%s,%s,%s,%lld,%lld,%lld,%lld,%.6f,%.6f,%d,\"", row, test, bench_kind_name(t->kind),
            (long long)t->n, (long long)t->depth, (long long)r->batches[ib], (long long)r->ubatches[iu], c->mean,
            c->sd, r->reps);
    for (int k = 0; k < r->reps; k++) fprintf(out, "%s%.6f", k ? ";" : "", pct[k]);
    fprintf(out, "\"\n");
}

void bench_compare_csv(FILE *out, const bench_results *r) {
    fprintf(out, "comparison,a,b,model_file,row,test,kind,n_tokens,depth,n_batch,n_ubatch,pct,sd_pct,reps,"
                 "per_rep_pct\n");
    for_each_cell(out, r, csv_cell);
}

static void json_cell(FILE *out, const bench_results *r, const char *comparison, int im, int it, int ib, int iu,
                      const bench_cell *c, const double *pct, bool first) {
    const bench_test *t = &r->tests[it];
    char row[96], test[64];
    bench_row_name(r, it, ib, iu, row, sizeof(row));
    bench_test_name(t, test, sizeof(test));
    fprintf(out, "%s\n    {\"comparison\": \"%s\", \"a\": \"%s\", \"b\": \"%s\", \"model_file\": ", first ? "" : ",",
            comparison, r->policies[c->ip_a], r->policies[c->ip_b]);
    cli_json_string(out, r->models[im], strlen(r->models[im]));
    fprintf(out,
            ", \"row\": \"%s\", \"test\": \"%s\", \"kind\": \"%s\", \"n_batch\": %lld, \"n_ubatch\": %lld, "
            "\"pct\": %.6f, \"sd_pct\": %.6f, \"per_rep_pct\": ",
            row, test, bench_kind_name(t->kind), (long long)r->batches[ib], (long long)r->ubatches[iu], c->mean, c->sd);
    bench_json_numbers(out, pct, r->reps, "%.6f", 1.0);
    fputc('}', out);
}

void bench_compare_json(FILE *out, const bench_results *r) {
    fputc('[', out);
    for_each_cell(out, r, json_cell);
    fprintf(out, "%s]", bench_can_compare(r) ? "\n  " : "");
}
