/* stride bench --profile: the per-op tables (stride/profile.h) of the extra profiled run of
 * each test, in markdown and as the JSON reports' "profiles" member; the table and JSON
 * writers here serve the batched mode's report too.
 *
 * Figures are per token for tg (the run's n decode steps, divided by n), per prompt for
 * pp, per step and per prefill in the batched mode. An op's roofline time is max(bytes / BENCH_ROOF_BYTES_PER_S, flops /
 * BENCH_ROOF_FLOPS_PER_S) from the least bytes and FLOPs the op must move and do
 * (backend/op_cost.h); it is shown for the CUDA backend only (the ceilings are an H200's). */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

/* The profile of (im, is, it) when one was taken. */
static const st_profile *profile_of(const bench_results *r, int im, int is, int it) {
    if (!r->profiles || !bench_fits(r, im, it) || r->tests[it].kind == BENCH_KIND_TTFT) return NULL;
    const st_profile *p = bench_profile_at(r, im, is, it);
    return p->n_entries > 0 ? p : NULL;
}

static double roofline_seconds(double bytes, double flops) {
    const double tb = bytes / BENCH_ROOF_BYTES_PER_S, tf = flops / BENCH_ROOF_FLOPS_PER_S;
    return tb > tf ? tb : tf;
}

void bench_profile_table_md(FILE *out, const char *title, const st_profile *p, double per, double timed_seconds,
                            bool roof) {
    fprintf(out, "\n### %s\n\n", title);
    fprintf(out, "| op | calls | us | share | GB/s | TFLOP/s |%s\n", roof ? " roofline us | of roofline |" : "");
    fprintf(out, "| --- | ---: | ---: | ---: | ---: | ---: |%s\n", roof ? " ---: | ---: |" : "");
    const double total = st_profile_seconds(p);
    double bytes = 0.0, flops = 0.0, roof_total = 0.0;
    for (int i = 0; i < p->n_entries; i++) {
        const st_profile_entry *e = &p->entries[i];
        const double rs = roofline_seconds(e->bytes, e->flops);
        bytes += e->bytes, flops += e->flops, roof_total += rs;
        fprintf(out, "| %s | %.4g | %.1f | %.1f%% | %.0f | %.2f |", e->label, (double)e->calls / per,
                e->seconds / per * 1e6, total > 0 ? 100.0 * e->seconds / total : 0.0,
                e->seconds > 0 ? e->bytes / e->seconds * 1e-9 : 0.0, e->seconds > 0 ? e->flops / e->seconds * 1e-12 : 0.0);
        if (roof) fprintf(out, " %.1f | %.0f%% |", rs / per * 1e6, e->seconds > 0 ? 100.0 * rs / e->seconds : 0.0);
        fputc('\n', out);
    }
    fprintf(out, "| **all ops** | | **%.1f** | 100%% | %.0f | %.2f |", total / per * 1e6,
            total > 0 ? bytes / total * 1e-9 : 0.0, total > 0 ? flops / total * 1e-12 : 0.0);
    if (roof) fprintf(out, " %.1f | %.0f%% |", roof_total / per * 1e6, total > 0 ? 100.0 * roof_total / total : 0.0);
    fputc('\n', out);
    fprintf(out, "| the timed runs (mean) | | %.1f | | | |%s\n", timed_seconds / per * 1e6, roof ? " | |" : "");
    if (p->failed) fprintf(out, "\n(out of memory while profiling: some ops are missing)\n");
}

void bench_profile_note_md(FILE *out, bool cuda, const char *units) {
    fprintf(out, "\nEach op was timed on its own%s. calls and us: %s. GB/s and TFLOP/s: the least bytes and FLOPs of "
                 "the op (weights once, activations, the keys attended over) over its time.",
            cuda ? " (no CUDA graph, a timing event on each side, the host queueing the step ahead of the "
                   "device; the timed runs replay graphs, where ops overlap and launch back to back)"
                 : " (the host clock around it)",
            units);
    if (cuda)
        fprintf(out, " Roofline: max(bytes / %.3g TB/s, FLOPs / %.0f TFLOP/s), an H200's.",
                BENCH_ROOF_BYTES_PER_S / 1e12, BENCH_ROOF_FLOPS_PER_S / 1e12);
    fputc('\n', out);
}

void bench_profile_ops_json(FILE *out, const st_profile *p) {
    fprintf(out, "\"steps\": %lld, \"complete\": %s, \"ops\": [", (long long)p->steps, p->failed ? "false" : "true");
    for (int i = 0; i < p->n_entries; i++) {
        const st_profile_entry *e = &p->entries[i];
        fprintf(out, "%s\n      {\"op\": ", i ? "," : "");
        cli_json_str(out, e->label);
        fprintf(out, ", \"calls\": %lld, \"seconds\": %.9g, \"bytes\": %.6g, \"flops\": %.6g}", (long long)e->calls,
                e->seconds, e->bytes, e->flops);
    }
    fputc(']', out);
}

void bench_profile_md(FILE *out, const bench_results *r) {
    if (!r->profiles) return;
    bool any = false;
    for (int im = 0; im < r->n_models; im++)
        for (int is = 0; is < bench_n_settings(r); is++)
            for (int it = 0; it < r->n_tests; it++) {
                const st_profile *p = profile_of(r, im, is, it);
                if (!p) continue;
                const bench_test *t = &r->tests[it];
                char test[64], title[256];
                bench_test_name(t, test, sizeof(test));
                snprintf(title, sizeof(title), "Per-op profile: %s, pad %s, ub %lld, %s (per %s)",
                         cli_base_name(r->models[im]), r->policies[bench_setting_policy(r, is)],
                         (long long)bench_setting_n_ubatch(r, is), test,
                         t->kind == BENCH_KIND_TG ? "token" : "prompt");
                double mean = 0.0, sd = 0.0;
                bench_stats(bench_seconds_at(r, im, is, it), r->reps, &mean, &sd);
                bench_profile_table_md(out, title, p, t->kind == BENCH_KIND_TG ? (double)t->n : 1.0, mean,
                                       strcmp(r->backend, "cuda") == 0);
                any = true;
            }
    if (any) bench_profile_note_md(out, strcmp(r->backend, "cuda") == 0, "per token (tg) or per prompt (pp)");
}

void bench_profile_json(FILE *out, const bench_results *r) {
    fputc('[', out);
    bool first = true;
    for (int im = 0; r->profiles && im < r->n_models; im++)
        for (int is = 0; is < bench_n_settings(r); is++)
            for (int it = 0; it < r->n_tests; it++) {
                const st_profile *p = profile_of(r, im, is, it);
                if (!p) continue;
                char test[64];
                bench_test_name(&r->tests[it], test, sizeof(test));
                fprintf(out, "%s\n    {\"model_file\": ", first ? "" : ",");
                cli_json_str(out, r->models[im]);
                fprintf(out, ", \"pad_weights\": \"%s\", \"n_ubatch\": %lld, \"test\": \"%s\", ",
                        r->policies[bench_setting_policy(r, is)], (long long)bench_setting_n_ubatch(r, is), test);
                bench_profile_ops_json(out, p);
                fputc('}', out);
                first = false;
            }
    fprintf(out, "%s]", first ? "" : "\n  ");
}
