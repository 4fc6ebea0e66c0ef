/* stride bench -np: the measuring loop (bench_batched.h). Per model file, one model, KV
 * pool and runner per --pad-weights value, held at once so that the repetitions of the
 * policies interleave (A B A B ...) after an untimed warm-up each, as the other tests do.
 *
 * A case (PP, TG, B) runs as llama-batched-bench runs it: sequence s holds its own blocks
 * (its block table row); the prefill feeds the B prompts, in forward passes of up to
 * max(-ub, B) tokens (a decode step is one pass) that hold runs of several sequences,
 * asking for the logits of each sequence's last prompt token; then TG decode steps of B
 * tokens, one per sequence, each sequence's logits wanted. They come back as the engine's
 * sampler takes them (r->all_logits false): each row's ST_ENGINE_CANDIDATES largest
 * logits and its log-sum-exp, picked by the backend, or every logit of every row (true,
 * as llama-batched-bench reads them). Token ids are random and valid (fixed seed). T_PP
 * and T_TG are the backend's timer (CUDA events on the stream, the host clock on the CPU)
 * around each phase, the backend synchronised before the start; the runner returns once
 * the step's logits are on the host, so the time includes that, as for a user. With
 * --profile, one more run of each case and policy times every op of each phase. */
#include <stdlib.h>
#include <string.h>

#include "bench_batched.h"
#include "cli.h"
#include "stride/engine.h"
#include "stride/runner.h"

#define T ST_KV_BLOCK_TOKENS

typedef struct bb_slot {
    st_model *model;
    st_kv_pool *pool;
    st_runner *runner;
} bb_slot;

/* The host side of the batches, sized for the largest case. */
typedef struct bb_work {
    int64_t U;                           /* tokens a forward pass */
    int32_t max_b, max_blocks;
    int32_t *tokens, *pos, *seq, *out;   /* [U] */
    int32_t *table;                      /* [max_b][max_blocks] */
    int32_t *prompts;                    /* [max_b][max_pp] */
    int32_t *gen;                        /* [max_tg][max_b] */
    int64_t max_pp;
} bb_work;

static int64_t blocks_of(const bb_case *k) { return (k->pp + k->tg + T - 1) / T; }

/* The prefill of every sequence's prompt, in passes of up to U tokens. */
static st_status prefill(const bb_slot *sl, const bb_work *w, const bb_case *k, st_error *err) {
    int64_t s = 0, done = 0; /* the next token: sequence s, position done */
    while (s < k->b) {
        int64_t n = 0, n_out = 0;
        while (s < k->b && n < w->U) {
            const int64_t take = k->pp - done < w->U - n ? k->pp - done : w->U - n;
            for (int64_t i = 0; i < take; i++, n++) {
                w->tokens[n] = w->prompts[s * w->max_pp + done + i];
                w->pos[n] = (int32_t)(done + i);
                w->seq[n] = (int32_t)s;
            }
            done += take;
            if (done == k->pp) {
                w->out[n_out++] = (int32_t)(n - 1);
                s++;
                done = 0;
            }
        }
        const st_batch b = {.n_tokens = n, .tokens = w->tokens, .pos = w->pos, .seq = w->seq,
                            .block_table = w->table, .n_seq = (int32_t)k->b, .max_blocks = w->max_blocks,
                            .out = w->out, .n_out = n_out};
        st_runner_output o;
        st_status st = st_runner_eval_out(sl->runner, &b, &o, err);
        if (st != ST_OK) return st;
    }
    return ST_OK;
}

/* TG decode steps of one token per sequence. */
static st_status decode(const bb_slot *sl, const bb_work *w, const bb_case *k, st_error *err) {
    for (int64_t i = 0; i < k->tg; i++) {
        for (int64_t s = 0; s < k->b; s++) {
            w->tokens[s] = w->gen[i * w->max_b + s];
            w->pos[s] = (int32_t)(k->pp + i);
            w->seq[s] = (int32_t)s;
        }
        const st_batch b = {.n_tokens = k->b, .tokens = w->tokens, .pos = w->pos, .seq = w->seq, .n_single = k->b,
                            .block_table = w->table, .n_seq = (int32_t)k->b, .max_blocks = w->max_blocks};
        st_runner_output o;
        st_status st = st_runner_eval_out(sl->runner, &b, &o, err);
        if (st != ST_OK) return st;
    }
    return ST_OK;
}

/* One run of case k; with `profiles` ([2]: prefill, decode) every op of each phase is
 * timed into them (stride/profile.h). */
static st_status run_case(st_backend *be, const bb_slot *sl, bb_work *w, const bb_case *k, st_profile *profiles,
                          double *t_pp, double *t_tg, double *wall, st_error *err) {
    const int64_t nb = blocks_of(k);
    const int32_t pad = (int32_t)st_kv_pool_n_blocks(sl->pool); /* (never read: past every position) */
    for (int64_t s = 0; s < k->b; s++)
        for (int32_t c = 0; c < w->max_blocks; c++)
            w->table[s * w->max_blocks + c] = c < nb ? (int32_t)(s * nb + c) : pad;
    st_status st = be->iface->synchronize(be, err);
    const double t0 = st_clock_seconds();
    double ms = 0.0;
    if (st == ST_OK) st = be->iface->timer_start(be, err);
    if (profiles) st_backend_set_profile(be, &profiles[0]);
    if (st == ST_OK) st = prefill(sl, w, k, err);
    st_backend_set_profile(be, NULL);
    if (st == ST_OK) st = be->iface->timer_stop(be, &ms, err);
    *t_pp = ms * 1e-3;
    if (st == ST_OK) st = be->iface->timer_start(be, err);
    if (profiles) st_backend_set_profile(be, &profiles[1]);
    if (st == ST_OK) st = decode(sl, w, k, err);
    st_backend_set_profile(be, NULL);
    if (st == ST_OK) st = be->iface->timer_stop(be, &ms, err);
    *t_tg = ms * 1e-3;
    *wall = st_clock_seconds() - t0;
    return st;
}

static void show_progress(bool on, const bb_results *r, int im, const bb_case *k, int rep) {
    if (!on) return;
    fprintf(stderr, "\r\033[Kbench: model %d/%d  pp%lld tg%lld B%lld  ", im + 1, r->n_models, (long long)k->pp,
            (long long)k->tg, (long long)k->b);
    if (rep < 0) fprintf(stderr, "warm-up");
    else fprintf(stderr, "repetition %d/%d", rep + 1, r->reps);
    fflush(stderr);
}

static void work_free(bb_work *w) {
    free(w->tokens);
    free(w->pos);
    free(w->seq);
    free(w->out);
    free(w->table);
    free(w->prompts);
    free(w->gen);
}

static st_status work_init(bb_work *w, const bb_results *r, int im, int64_t n_vocab, st_error *err) {
    int64_t max_tg = 0;
    for (int ic = 0; ic < r->n_cases; ic++) {
        const bb_case *k = &r->cases[ic];
        if (!bb_fits(r, im, ic)) continue;
        if (k->b > w->max_b) w->max_b = (int32_t)k->b;
        if (blocks_of(k) > w->max_blocks) w->max_blocks = (int32_t)blocks_of(k);
        if (k->pp > w->max_pp) w->max_pp = k->pp;
        if (k->tg > max_tg) max_tg = k->tg;
    }
    w->U = r->n_ubatch > w->max_b ? r->n_ubatch : w->max_b;
    const size_t U = (size_t)w->U, B = (size_t)w->max_b;
    w->tokens = malloc(U * sizeof(int32_t));
    w->pos = malloc(U * sizeof(int32_t));
    w->seq = malloc(U * sizeof(int32_t));
    w->out = malloc(U * sizeof(int32_t));
    w->table = malloc(B * (size_t)w->max_blocks * sizeof(int32_t));
    w->prompts = malloc(B * (size_t)w->max_pp * sizeof(int32_t));
    w->gen = malloc((size_t)max_tg * B * sizeof(int32_t));
    if (!w->tokens || !w->pos || !w->seq || !w->out || !w->table || !w->prompts || !w->gen)
        return st_error_set(err, ST_ERROR_NOMEM, "out of memory for batches of %lld sequences", (long long)B);
    uint64_t state = r->seed;
    for (size_t i = 0; i < B * (size_t)w->max_pp; i++) w->prompts[i] = (int32_t)(bench_random(&state) % (uint64_t)n_vocab);
    for (size_t i = 0; i < (size_t)max_tg * B; i++) w->gen[i] = (int32_t)(bench_random(&state) % (uint64_t)n_vocab);
    return ST_OK;
}

st_status bb_run_model(bb_results *r, int im, st_backend *be, const cli_model_setup *setup,
                       const st_layout_policy *policies, bool progress, st_error *err) {
    int64_t n_ctx = 0, n_blocks = 0;
    for (int ic = 0; ic < r->n_cases; ic++) {
        const bb_case *k = &r->cases[ic];
        if (!bb_fits(r, im, ic)) continue;
        if (k->pp + k->tg > n_ctx) n_ctx = k->pp + k->tg;
        if (k->b * blocks_of(k) > n_blocks) n_blocks = k->b * blocks_of(k);
    }
    if (n_ctx == 0) { /* no case fits this model's context */
        for (int ip = 0; ip < r->n_policies; ip++)
            r->loads[(size_t)im * (size_t)r->n_policies + (size_t)ip] = (bench_load){.policy = r->policies[ip], .arch = "?"};
        return ST_OK;
    }
    bb_slot *slots = calloc((size_t)r->n_policies, sizeof(bb_slot));
    bb_work w = {0};
    st_status s = ST_OK;
    if (!slots) return st_error_set(err, ST_ERROR_NOMEM, "out of memory");
    for (int ip = 0; ip < r->n_policies && s == ST_OK; ip++) {
        bb_slot *sl = &slots[ip];
        s = bench_load_model(r->models[im], r->policies[ip], &policies[ip], n_ctx, be, setup, &sl->model,
                             &r->loads[(size_t)im * (size_t)r->n_policies + (size_t)ip], err);
        if (s == ST_OK && ip == 0) {
            bb_model_cost_of(sl->model, setup->kv_type, &r->cost[im]);
            s = work_init(&w, r, im, sl->model->hp.n_vocab, err);
        }
        if (s == ST_OK) s = st_kv_pool_init(sl->model, n_blocks, setup->kv_type, &sl->pool, err);
        if (s == ST_OK) {
            const int32_t k = r->all_logits ? 0 : st_engine_candidates(sl->model->hp.n_vocab);
            const st_runner_options ro = {.max_tokens = w.U, .max_seqs = w.max_b, .max_blocks = w.max_blocks,
                                          .n_candidates = k};
            s = st_runner_init(sl->model, sl->pool, &ro, &sl->runner, err);
        }
    }
    int64_t n_runs = 0;
    for (int ic = 0; ic < r->n_cases && s == ST_OK; ic++) {
        const bb_case *k = &r->cases[ic];
        if (!bb_fits(r, im, ic)) continue;
        show_progress(progress, r, im, k, -1);
        for (int ip = 0; ip < r->n_policies && s == ST_OK; ip++, n_runs++) {
            double pp, tg, wall;
            s = run_case(be, &slots[ip], &w, k, NULL, &pp, &tg, &wall, err);
        }
        for (int rep = 0; rep < r->reps && s == ST_OK; rep++) {
            show_progress(progress, r, im, k, rep);
            for (int ip = 0; ip < r->n_policies && s == ST_OK; ip++, n_runs++) {
                const size_t at = bb_at(r, im, ip, ic) + (size_t)rep;
                s = run_case(be, &slots[ip], &w, k, NULL, &r->t_pp[at], &r->t_tg[at], &r->wall[at], err);
                r->order[at] = n_runs;
            }
        }
        for (int ip = 0; r->profiles && ip < r->n_policies && s == ST_OK; ip++, n_runs++) {
            st_profile *prof = bb_profile_at(r, im, ip, ic, 0);
            double pp, tg, wall;
            s = run_case(be, &slots[ip], &w, k, prof, &pp, &tg, &wall, err);
            st_profile_sort(&prof[0]);
            st_profile_sort(&prof[1]);
        }
    }
    if (progress) fprintf(stderr, "\r\033[K");
    for (int ip = 0; ip < r->n_policies; ip++) {
        st_runner_free(slots[ip].runner);
        st_kv_pool_free(slots[ip].pool);
        st_model_free(slots[ip].model);
    }
    free(slots);
    work_free(&w);
    return s;
}
