/* stride bench -np: batched throughput in llama-batched-bench's form. B sequences of PP
 * prompt tokens each are prefilled together, then decoded together for TG steps of B
 * tokens (their logits as the engine samples them, or all of them: --logits); the report
 * gives llama-batched-bench's columns (PP, TG, B, N_KV, T_PP s, S_PP t/s, T_TG s, S_TG
 * t/s, T s, S t/s) per model, --pad-weights value and case, and the roofline of the
 * decode steps next to S_TG. The measuring loop is bench_batched.c,
 * the roofline and the reports bench_batched_report.c. */
#ifndef STRIDE_TOOL_BENCH_BATCHED_H
#define STRIDE_TOOL_BENCH_BATCHED_H

#include "bench.h"

typedef struct bb_case {
    int64_t pp, tg; /* prompt and generated tokens of each sequence */
    int64_t b;      /* sequences */
} bb_case;

/* What a decode step of a model reads and computes, for the roofline (bench_batched_report.c). */
typedef struct bb_model_cost {
    double dense_bytes;     /* weights every step reads: all but the experts and an untied token embedding */
    double expert_bytes;    /* all expert tensors */
    double token_flops;     /* 2 x the GEMM weight elements one token uses (its experts only) */
    int64_t n_expert, n_expert_used;
    int64_t n_layer, n_swa_layers, window;
    double kv_token_bytes;  /* one token's keys and values of one layer in the cache */
    double attn_key_flops;  /* one query's attention FLOPs per key of one layer (4 x n_head x head_dim) */
} bb_model_cost;

typedef struct bb_results {
    const char **models;
    int n_models;
    const char **policies;
    int n_policies;
    bb_case *cases;
    int n_cases;
    int reps;
    int64_t n_ubatch;   /* tokens of one forward pass of the prefill */
    bool all_logits;    /* every logit of a step to the host, not each row's candidates */
    const char *backend;
    int threads;
    const char *kv_type;
    const char *weights;
    uint64_t seed;
    const char *date;
    const char *argv;
    st_device_info device;
    bool *fits;          /* [n_models][n_cases]: PP + TG within the model's context_length */
    bench_load *loads;   /* [n_models][n_policies] */
    bb_model_cost *cost; /* [n_models] */
    double *t_pp, *t_tg, *wall; /* [n_models][n_policies][n_cases][reps]: backend timer, host clock */
    int64_t *order;      /* same shape: the place of each run in the interleaved order */
    st_profile *profiles; /* --profile: [n_models][n_policies][n_cases][2], the prefill's and the
                           * decode steps' per-op profiles of one more run; NULL otherwise */
} bb_results;

static inline size_t bb_at(const bb_results *r, int im, int ip, int ic) {
    return (((size_t)im * (size_t)r->n_policies + (size_t)ip) * (size_t)r->n_cases + (size_t)ic) * (size_t)r->reps;
}
/* phase 0: the prefill, 1: the decode steps */
static inline st_profile *bb_profile_at(const bb_results *r, int im, int ip, int ic, int phase) {
    return &r->profiles[(((size_t)im * (size_t)r->n_policies + (size_t)ip) * (size_t)r->n_cases + (size_t)ic) * 2 +
                        (size_t)phase];
}
static inline bool bb_fits(const bb_results *r, int im, int ic) {
    return r->fits[(size_t)im * (size_t)r->n_cases + (size_t)ic];
}

/* ---- bench_batched.c ---- */

/* Loads model file im under every policy and runs every case (an untimed warm-up, then the
 * repetitions interleaved across policies). `progress`: an updating line on stderr. */
st_status bb_run_model(bb_results *r, int im, st_backend *b, const cli_model_setup *setup,
                       const st_layout_policy *policies, bool progress, st_error *err);

/* ---- bench_batched_report.c ---- */

/* A model's decode-step costs, from its loaded weights. */
void bb_model_cost_of(const st_model *m, st_type kv_type, bb_model_cost *out);
/* The roofline of the case's TG phase: the fastest S_TG (tokens/s) the ceilings allow. */
double bb_roofline_s_tg(const bb_model_cost *c, const bb_case *k);

void bb_report_md(FILE *out, const bb_results *r);
void bb_report_csv(FILE *out, const bb_results *r);
void bb_report_json(FILE *out, const bb_results *r);

#endif
