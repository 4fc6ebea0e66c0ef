/* stride bench -np: the roofline of a batched decode step and the reports (markdown in
 * llama-batched-bench's columns, CSV one row per repetition, JSON with everything).
 *
 * Roofline of one decode step of B sequences at depth d (keys already cached):
 *   bytes = the weights, once (every tensor except an untied token embedding, of which
 *           decode reads B rows; of MoE experts the share B tokens are expected to touch,
 *           1 - (1 - K/E)^B under uniform routing)
 *         + per sequence, its keys and values of every layer (d + 1 positions, the new
 *           one's included; a sliding-window layer at most its window)
 *   flops = per sequence, 2 x the GEMM weight elements a token uses + 4 x n_head x head_dim
 *           per key and layer (q.k and the weighted sum of v)
 *   time  = max(bytes / 4.3 TB/s, flops / 790 TFLOP/s)
 * summed over the TG steps (d = PP .. PP + TG - 1); S_TG's roofline is B x TG over it. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench_batched.h"
#include "cli.h"
#include "stride/runner.h"

void bb_model_cost_of(const st_model *m, st_type kv_type, bb_model_cost *c) {
    const st_hparams *hp = &m->hp;
    memset(c, 0, sizeof(*c));
    const bool tied = m->output == m->token_embd;
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        const st_tensor *t = &m->tensors[i];
        if (t == m->token_embd && !tied) continue;
        st_tensor packed = *t; /* what a step must read: the pad bytes are not */
        st_tensor_set_packed_strides(&packed);
        const double bytes = (double)st_tensor_nbytes(&packed), elems = (double)st_tensor_nelements(t);
        if (t->ne[2] > 1 && hp->n_expert > 0) {
            c->expert_bytes += bytes;
            c->token_flops += 2.0 * elems * (double)hp->n_expert_used / (double)hp->n_expert;
        } else {
            c->dense_bytes += bytes;
            if (t->ne[1] > 1) c->token_flops += 2.0 * elems; /* a matrix: a GEMM weight (norms are vectors) */
        }
    }
    c->n_expert = hp->n_expert;
    c->n_expert_used = hp->n_expert_used;
    c->n_layer = hp->n_layer;
    for (int64_t il = 0; il < hp->n_layer; il++) c->n_swa_layers += st_hparams_layer_is_swa(hp, il);
    c->window = hp->sliding_window;
    c->kv_token_bytes = (double)st_kv_block_bytes(hp, kv_type) / ST_KV_BLOCK_TOKENS / (double)hp->n_layer;
    c->attn_key_flops = 4.0 * (double)hp->n_head * (double)hp->head_dim;
}

double bb_roofline_s_tg(const bb_model_cost *c, const bb_case *k) {
    const double frac = c->n_expert > 0 ? 1.0 - pow(1.0 - (double)c->n_expert_used / (double)c->n_expert, (double)k->b)
                                        : 1.0;
    const double weights = c->dense_bytes + c->expert_bytes * frac;
    double t = 0.0;
    for (int64_t i = 0; i < k->tg; i++) {
        const double full = (double)(k->pp + i + 1);
        const double swa = c->window > 0 && (double)c->window < full ? (double)c->window : full;
        const double keys = (double)(c->n_layer - c->n_swa_layers) * full + (double)c->n_swa_layers * swa;
        const double bytes = weights + (double)k->b * keys * c->kv_token_bytes;
        const double flops = (double)k->b * (c->token_flops + keys * c->attn_key_flops);
        t += fmax(bytes / BENCH_ROOF_BYTES_PER_S, flops / BENCH_ROOF_FLOPS_PER_S);
    }
    return t > 0.0 ? (double)(k->b * k->tg) / t : 0.0;
}

/* ---- one result ----------------------------------------------------------------------- */

/* The figures of one (model, policy, case): per repetition and their statistics. */
typedef struct bb_view {
    int im, ip, ic;
    const bb_case *k;
    const bench_load *l;
    const double *t_pp, *t_tg, *wall;
    const int64_t *order;
    double *s_pp, *s_tg, *s; /* [reps] */
    double t_pp_mean, t_tg_mean, t_mean;
    double s_pp_mean, s_pp_sd, s_tg_mean, s_tg_sd, s_mean, s_sd;
    double roof;             /* S_TG's roofline */
    int64_t n_kv;
    bool first;
} bb_view;

typedef void (*bb_view_fn)(FILE *out, const bb_results *r, const bb_view *v);

static void for_each(FILE *out, const bb_results *r, bb_view_fn fn) {
    double *buf = calloc((size_t)r->reps * 6, sizeof(double));
    if (!buf) return;
    bb_view v = {.s_pp = buf, .s_tg = buf + r->reps, .s = buf + 2 * r->reps, .first = true};
    double *tt = buf + 3 * r->reps, *sd = buf + 4 * r->reps;
    for (v.im = 0; v.im < r->n_models; v.im++)
        for (v.ip = 0; v.ip < r->n_policies; v.ip++)
            for (v.ic = 0; v.ic < r->n_cases; v.ic++) {
                if (!bb_fits(r, v.im, v.ic)) continue;
                const size_t at = bb_at(r, v.im, v.ip, v.ic);
                v.k = &r->cases[v.ic];
                v.l = &r->loads[(size_t)v.im * (size_t)r->n_policies + (size_t)v.ip];
                v.t_pp = r->t_pp + at, v.t_tg = r->t_tg + at, v.wall = r->wall + at, v.order = r->order + at;
                v.n_kv = v.k->b * (v.k->pp + v.k->tg);
                for (int i = 0; i < r->reps; i++) {
                    v.s_pp[i] = v.t_pp[i] > 0 ? (double)(v.k->b * v.k->pp) / v.t_pp[i] : 0.0;
                    v.s_tg[i] = v.t_tg[i] > 0 ? (double)(v.k->b * v.k->tg) / v.t_tg[i] : 0.0;
                    tt[i] = v.t_pp[i] + v.t_tg[i];
                    v.s[i] = tt[i] > 0 ? (double)v.n_kv / tt[i] : 0.0;
                }
                bench_stats(v.t_pp, r->reps, &v.t_pp_mean, sd);
                bench_stats(v.t_tg, r->reps, &v.t_tg_mean, sd);
                bench_stats(tt, r->reps, &v.t_mean, sd);
                bench_stats(v.s_pp, r->reps, &v.s_pp_mean, &v.s_pp_sd);
                bench_stats(v.s_tg, r->reps, &v.s_tg_mean, &v.s_tg_sd);
                bench_stats(v.s, r->reps, &v.s_mean, &v.s_sd);
                v.roof = bb_roofline_s_tg(&r->cost[v.im], v.k);
                fn(out, r, &v);
                v.first = false;
            }
    free(buf);
}

/* ---- markdown ------------------------------------------------------------------------- */

static void md_row(FILE *out, const bb_results *r, const bb_view *v) {
    char size[32];
    cli_format_bytes(v->l->weights_bytes, size, sizeof(size));
    fprintf(out,
            "| %s | %s | %s | %lld | %lld | %lld | %lld | %.3f | %.2f ± %.2f | %.3f | %.2f ± %.2f | %.0f | %.1f%% | %.3f "
            "| %.2f ± %.2f |\n",
            cli_base_name(r->models[v->im]), size, v->l->policy, (long long)v->k->pp, (long long)v->k->tg,
            (long long)v->k->b, (long long)v->n_kv, v->t_pp_mean, v->s_pp_mean, v->s_pp_sd, v->t_tg_mean,
            v->s_tg_mean, v->s_tg_sd, v->roof, v->roof > 0 ? 100.0 * v->s_tg_mean / v->roof : 0.0, v->t_mean,
            v->s_mean, v->s_sd);
}

/* The --logits value the run took. */
static const char *logits_name(const bb_results *r) { return r->all_logits ? "all" : "top"; }

void bb_report_md(FILE *out, const bb_results *r) {
    fprintf(out, "| model | size | pad | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | S_TG roofline t/s "
                 "| of roofline | T s | S t/s |\n");
    fprintf(out, "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
                 "---: |\n");
    for_each(out, r, md_row);
    for (int im = 0; im < r->n_models; im++)
        for (int ic = 0; ic < r->n_cases; ic++)
            if (!bb_fits(r, im, ic))
                fprintf(out, "\nn/a for %s (longer than its context_length): pp%lld tg%lld B%lld",
                        cli_base_name(r->models[im]), (long long)r->cases[ic].pp, (long long)r->cases[ic].tg,
                        (long long)r->cases[ic].b);
    for (int im = 0; r->profiles && im < r->n_models; im++)
        for (int ip = 0; ip < r->n_policies; ip++)
            for (int ic = 0; ic < r->n_cases; ic++)
                for (int phase = 0; phase < 2 && bb_fits(r, im, ic); phase++) {
                    const bb_case *k = &r->cases[ic];
                    char title[256];
                    snprintf(title, sizeof(title), "Per-op profile: %s, pad %s, pp%lld tg%lld B%lld, %s", 
                             cli_base_name(r->models[im]), r->policies[ip], (long long)k->pp, (long long)k->tg,
                             (long long)k->b, phase ? "decode (per step of B tokens)" : "prefill (all B prompts)");
                    const double *t = phase ? &r->t_tg[bb_at(r, im, ip, ic)] : &r->t_pp[bb_at(r, im, ip, ic)];
                    double mean = 0.0, sd = 0.0;
                    bench_stats(t, r->reps, &mean, &sd);
                    bench_profile_table_md(out, title, bb_profile_at(r, im, ip, ic, phase), phase ? (double)k->tg : 1.0,
                                           mean, r->device.backend == ST_BACKEND_CUDA);
                }
    if (r->profiles)
        bench_profile_note_md(out, r->device.backend == ST_BACKEND_CUDA,
                              "per decode step of B tokens, or for the whole prefill");
    const char *commit = bench_commit();
    fprintf(out,
            "\nPP, TG: prompt and generated tokens of each of B sequences; N_KV = B x (PP + TG); S_PP = B x PP / T_PP, "
            "S_TG = B x TG / T_TG, S = N_KV / T; mean ± sd over %d repetitions, interleaved across --pad-weights "
            "after a warm-up; prefill in passes of up to max(-ub %lld, B) tokens.\n"
            "S_TG roofline: a decode step reads the weights once (an untied token embedding not; MoE: the experts "
            "B tokens are expected to touch) and every sequence's keys and values, at %.1f TB/s, or computes its "
            "FLOPs at %.0f TFLOP/s, whichever takes longer (an H200's ceilings).\n"
            "Logits: %s.\n"
            "device: %s; stride %s%s%s; %s; kv %s\n",
            r->reps, (long long)r->n_ubatch, BENCH_ROOF_BYTES_PER_S / 1e12, BENCH_ROOF_FLOPS_PER_S / 1e12,
            r->all_logits ? "every logit of every sequence to the host (--logits all)"
                          : "each sequence's largest logits and its log-sum-exp to the host, picked on the device, "
                            "as the engine samples (--logits top)",
            r->device.name, STRIDE_VERSION_STRING, commit ? " " : "", commit ? commit : "", r->date, r->kv_type);
}

/* ---- CSV -------------------------------------------------------------------------------- */

static void csv_rows(FILE *out, const bb_results *r, const bb_view *v) {
    const char *commit = bench_commit();
    for (int i = 0; i < r->reps; i++) {
        bench_csv_field(out, STRIDE_VERSION_STRING);
        fputc(',', out);
        bench_csv_field(out, commit ? commit : "");
        fprintf(out, ",%s,", r->date);
        bench_csv_field(out, r->device.name);
        fprintf(out, ",%s,%d,%d,%d,", r->backend, r->device.driver_version, r->device.runtime_version, r->threads);
        bench_csv_field(out, r->models[v->im]);
        fprintf(out,
                ",%s,%" PRIu64 ",%s,%s,%lld,%lld,%lld,%lld,%lld,%s,%s,%s,%" PRIu64 ",%d,%.9f,%.6f,%.9f,%.6f,%.9f,"
                "%.6f,%.9f,%.3f,%lld\n",
                v->l->arch, v->l->weights_bytes, v->l->policy, v->l->pad_enabled ? "true" : "false",
                (long long)v->k->pp, (long long)v->k->tg, (long long)v->k->b, (long long)v->n_kv,
                (long long)r->n_ubatch, logits_name(r), r->kv_type, r->weights, r->seed, i, v->t_pp[i],
                v->s_pp[i], v->t_tg[i], v->s_tg[i], v->t_pp[i] + v->t_tg[i], v->s[i], v->wall[i], v->roof,
                (long long)v->order[i]);
    }
}

void bb_report_csv(FILE *out, const bb_results *r) {
    fprintf(out, "stride_version,commit,date,device,backend,driver_version,runtime_version,threads,model_file,arch,"
                 "model_size,pad_weights,pad_enabled,pp,tg,b,n_kv,n_ubatch,logits,kv_type,weights,seed,rep,t_pp,"
                 "s_pp,t_tg,s_tg,t,s,wall_seconds,s_tg_roofline,run_order\n");
    for_each(out, r, csv_rows);
}

/* ---- JSON ------------------------------------------------------------------------------- */


static void json_row(FILE *out, const bb_results *r, const bb_view *v) {
    fprintf(out, "%s\n    {\"model_file\": ", v->first ? "" : ",");
    cli_json_str(out, r->models[v->im]);
    fprintf(out,
            ", \"arch\": \"%s\", \"model_size\": %" PRIu64 ", \"pad_weights\": \"%s\", \"pad_enabled\": %s, "
            "\"pp\": %lld, \"tg\": %lld, \"b\": %lld, \"n_kv\": %lld, \"avg_s_pp\": %.6f, \"stddev_s_pp\": %.6f, "
            "\"avg_s_tg\": %.6f, \"stddev_s_tg\": %.6f, \"avg_s\": %.6f, \"stddev_s\": %.6f, "
            "\"s_tg_roofline\": %.3f, \"t_pp\": ",
            v->l->arch, v->l->weights_bytes, v->l->policy, v->l->pad_enabled ? "true" : "false", (long long)v->k->pp,
            (long long)v->k->tg, (long long)v->k->b, (long long)v->n_kv, v->s_pp_mean, v->s_pp_sd, v->s_tg_mean,
            v->s_tg_sd, v->s_mean, v->s_sd, v->roof);
    bench_json_numbers(out, v->t_pp, r->reps, "%.12g", 1.0);
    fprintf(out, ", \"t_tg\": ");
    bench_json_numbers(out, v->t_tg, r->reps, "%.12g", 1.0);
    fprintf(out, ", \"wall_seconds\": ");
    bench_json_numbers(out, v->wall, r->reps, "%.12g", 1.0);
    fprintf(out, ", \"run_order\": ");
    cli_json_ints(out, v->order, r->reps);
    fputc('}', out);
}

void bb_report_json(FILE *out, const bb_results *r) {
    const char *commit = bench_commit();
    fprintf(out, "{\n  \"stride_version\": ");
    cli_json_str(out, STRIDE_VERSION_STRING);
    fprintf(out, ",\n  \"commit\": ");
    if (commit) cli_json_str(out, commit);
    else fputs("null", out);
    fprintf(out, ",\n  \"date\": ");
    cli_json_str(out, r->date);
    fprintf(out, ",\n  \"command\": ");
    cli_json_str(out, r->argv);
    fprintf(out, ",\n  \"device\": ");
    bench_json_device(out, &r->device, r->backend);
    fprintf(out, ",\n  \"params\": {\"mode\": \"batched\", \"models\": [");
    for (int im = 0; im < r->n_models; im++) {
        if (im) fputs(", ", out);
        cli_json_str(out, r->models[im]);
    }
    fprintf(out, "], \"pad_weights\": [");
    for (int ip = 0; ip < r->n_policies; ip++) fprintf(out, "%s\"%s\"", ip ? ", " : "", r->policies[ip]);
    fprintf(out, "], \"cases\": [");
    for (int ic = 0; ic < r->n_cases; ic++)
        fprintf(out, "%s{\"pp\": %lld, \"tg\": %lld, \"b\": %lld}", ic ? ", " : "", (long long)r->cases[ic].pp,
                (long long)r->cases[ic].tg, (long long)r->cases[ic].b);
    fprintf(out,
            "], \"repetitions\": %d, \"n_ubatch\": %lld, \"logits\": \"%s\", \"backend\": \"%s\", \"threads\": %d, "
            "\"kv_type\": \"%s\", \"weights\": \"%s\", \"seed\": %" PRIu64 ", \"warmup_runs\": 1, "
            "\"interleaved\": true, \"clock\": \"%s\", "
            "\"roofline\": {\"bytes_per_s\": %.4g, \"flops_per_s\": %.4g}},\n",
            r->reps, (long long)r->n_ubatch, logits_name(r), r->backend, r->threads, r->kv_type, r->weights, r->seed,
            r->device.backend == ST_BACKEND_CUDA ? "backend timer (CUDA events)" : "backend timer (host clock)",
            BENCH_ROOF_BYTES_PER_S, BENCH_ROOF_FLOPS_PER_S);
    fprintf(out, "  \"results\": [");
    for_each(out, r, json_row);
    fprintf(out, "\n  ],\n  \"skipped\": [");
    bool first = true;
    for (int im = 0; im < r->n_models; im++)
        for (int ic = 0; ic < r->n_cases; ic++) {
            if (bb_fits(r, im, ic)) continue;
            fprintf(out, "%s{\"model_file\": ", first ? "" : ", ");
            cli_json_str(out, r->models[im]);
            fprintf(out, ", \"pp\": %lld, \"tg\": %lld, \"b\": %lld, \"reason\": \"context_length\"}",
                    (long long)r->cases[ic].pp, (long long)r->cases[ic].tg, (long long)r->cases[ic].b);
            first = false;
        }
    fprintf(out, "],\n  \"profiles\": [");
    first = true;
    for (int im = 0; r->profiles && im < r->n_models; im++)
        for (int ip = 0; ip < r->n_policies; ip++)
            for (int ic = 0; ic < r->n_cases; ic++)
                for (int phase = 0; phase < 2 && bb_fits(r, im, ic); phase++) {
                    fprintf(out, "%s\n    {\"model_file\": ", first ? "" : ",");
                    cli_json_str(out, r->models[im]);
                    fprintf(out, ", \"pad_weights\": \"%s\", \"pp\": %lld, \"tg\": %lld, \"b\": %lld, \"phase\": \"%s\", ",
                            r->policies[ip], (long long)r->cases[ic].pp, (long long)r->cases[ic].tg,
                            (long long)r->cases[ic].b, phase ? "decode" : "prefill");
                    bench_profile_ops_json(out, bb_profile_at(r, im, ip, ic, phase));
                    fputc('}', out);
                    first = false;
                }
    fprintf(out, "%s]\n}\n", first ? "" : "\n  ");
}
