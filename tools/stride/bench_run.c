/* stride bench: the measuring loop. For one model file, one model per --pad-weights value
 * and one session per (policy, micro-batch) are held at once, so that the repetitions of
 * every compared setting interleave (A B A B ...) in one process after an untimed warm-up:
 * a slow phase of a noisy machine then hits every side of a ratio alike.
 *
 * Clocks. pp and tg are timed with the backend's timer (timer_start/timer_stop: CUDA
 * events on the stream, the host clock on the CPU). The events bracket exactly the queued
 * work of the run at the device clock's resolution, and an idle stream between two
 * launches still counts (the events measure the stream's timeline, not a kernel sum), so
 * launch gaps and the per-token logits reads are charged to the run as a user would see
 * them; what they leave out is the host's wake-up after the final synchronisation, which
 * is noise for a throughput. TTFT is defined by the host: the wall time from handing the
 * prompt over until its last logits are in host memory, so it uses the host clock. Both
 * clocks are recorded for every run (`wall` in the reports). */
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"
#include "stride/model.h"

/* One session; `valid` counts the depth tokens at the start of its cache: runs rewind to
 * the depth instead of evaluating it again. */
typedef struct bench_slot {
    st_session *session;
    bool owned; /* settings that differ only in -b share the (policy, micro-batch) session */
    int64_t valid;
} bench_slot;

typedef struct bench_inputs {
    const int32_t *depth_tokens; /* [max depth] */
    const int32_t *tokens;       /* [max n] */
    float *logits;               /* [n_vocab]: the last row, as a real prompt or decode step asks */
} bench_inputs;

/* The prompt in -b sized calls, as an application feeding a long prompt would; only the
 * last call asks for logits (of its last token). */
static st_status eval_prompt(st_session *s, const int32_t *tokens, int64_t n, int64_t n_batch, float *logits,
                             st_error *err) {
    st_status st = ST_OK;
    for (int64_t done = 0; done < n && st == ST_OK; done += n_batch) {
        const int64_t m = n - done < n_batch ? n - done : n_batch;
        st = st_session_eval(s, tokens + done, m, false, done + m == n ? logits : NULL, err);
    }
    return st;
}

static st_status run_once(st_backend *b, bench_slot *slot, const bench_test *t, int64_t n_batch,
                          const bench_inputs *in, double *seconds, double *wall, st_error *err) {
    st_status s;
    if (slot->valid < t->depth) {
        st_session_rewind(slot->session, slot->valid);
        s = st_session_eval(slot->session, in->depth_tokens + slot->valid, t->depth - slot->valid, false, NULL, err);
        if (s != ST_OK) return s;
    } else {
        st_session_rewind(slot->session, t->depth);
    }
    slot->valid = t->depth; /* the timed part overwrites the cache from the depth on */
    if ((s = b->iface->synchronize(b, err)) != ST_OK) return s;
    const bool timer = t->kind != BENCH_KIND_TTFT;
    if (timer && (s = b->iface->timer_start(b, err)) != ST_OK) return s;
    const double t0 = st_clock_seconds();
    if (t->kind == BENCH_KIND_TG) {
        const float *row; /* each step's logits, in host memory as a sampler would read them */
        for (int64_t i = 0; i < t->n && s == ST_OK; i++) s = st_session_decode(slot->session, in->tokens[i], &row, err);
    } else {
        /* st_session_eval's logits read completes before it returns: for a TTFT the host
         * holds the logits when the clock stops */
        s = eval_prompt(slot->session, in->tokens, t->n, n_batch, in->logits, err);
    }
    *wall = st_clock_seconds() - t0;
    double ms = 0.0;
    if (timer) {
        st_error ignored = {0};
        if (s == ST_OK)
            s = b->iface->timer_stop(b, &ms, err);
        else
            b->iface->timer_stop(b, &ms, &ignored); /* leave the timer stopped */
    }
    *seconds = timer ? ms * 1e-3 : *wall;
    return s;
}

static void show_progress(bool on, int im, int n_models, const bench_test *t, int rep, int reps) {
    if (!on) return;
    char name[64];
    bench_test_name(t, name, sizeof(name));
    if (rep < 0)
        fprintf(stderr, "\r\033[Kbench: model %d/%d  %s  warm-up", im + 1, n_models, name);
    else
        fprintf(stderr, "\r\033[Kbench: model %d/%d  %s  repetition %d/%d", im + 1, n_models, name, rep + 1, reps);
    fflush(stderr);
}

st_status bench_load_model(const char *path, const char *policy_name, const st_layout_policy *policy, int64_t n_ctx,
                           st_backend *b, const cli_model_setup *setup, st_model **out, bench_load *l, st_error *err) {
    st_model_load_options lo = setup->load;
    lo.policy = *policy;
    lo.n_ctx = n_ctx;
    cli_progress progress;
    char label[64];
    snprintf(label, sizeof(label), "loading (pad %s)", policy_name);
    cli_progress_begin(&progress, label);
    lo.progress = cli_progress_update;
    lo.progress_ctx = &progress;
    st_status s = st_model_load(path, b, &lo, out, err);
    cli_progress_end(&progress);
    if (s != ST_OK) return st_error_wrap(err, "with --pad-weights %s", policy_name); /* names the path */
    const st_model *m = *out;
    l->policy = policy_name;
    l->arch = st_arch_name(m->hp.arch);
    l->pad_enabled = m->plan.pad_enabled;
    l->n_padded = m->plan.n_padded;
    l->weights_bytes = m->weights_bytes;
    l->n_params = 0;
    for (uint64_t i = 0; i < m->n_tensors; i++) l->n_params += (uint64_t)st_tensor_nelements(&m->tensors[i]);
    return ST_OK;
}

static st_status load_policy(bench_results *r, int im, int ip, int64_t n_ctx, st_backend *b,
                             const cli_model_setup *setup, const st_layout_policy *policy, st_model **out,
                             st_error *err) {
    return bench_load_model(r->models[im], r->policies[ip], policy, n_ctx, b, setup, out, bench_load_at(r, im, ip),
                            err);
}

/* One session per (policy, effective micro-batch); settings that differ only in -b share it. */
static st_status open_sessions(const bench_results *r, int64_t n_ctx, st_model **models,
                               const cli_model_setup *setup, bench_slot *slots, st_error *err) {
    const int n_settings = bench_n_settings(r);
    for (int is = 0; is < n_settings; is++) {
        const int ip = bench_setting_policy(r, is);
        const int64_t ub = bench_setting_n_ubatch(r, is);
        for (int j = 0; j < is; j++)
            if (bench_setting_policy(r, j) == ip && bench_setting_n_ubatch(r, j) == ub) {
                slots[is].session = slots[j].session;
                break;
            }
        if (slots[is].session) continue;
        st_session_options so = st_session_options_default();
        so.n_ctx = n_ctx;
        so.n_ubatch = ub;
        so.kv_type = setup->kv_type;
        st_status s = st_session_init(models[ip], &so, &slots[is].session, err);
        if (s != ST_OK) return s;
        slots[is].owned = true;
    }
    return ST_OK;
}

/* A shared session's cache holds whatever the setting before it left: the depth bookkeeping
 * is per session, so every slot of one session must see the same `valid`. */
static void share_valid(const bench_results *r, bench_slot *slots, int is) {
    for (int j = 0; j < bench_n_settings(r); j++)
        if (j != is && slots[j].session == slots[is].session) slots[j].valid = slots[is].valid;
}

st_status bench_run_model(bench_results *r, int im, st_backend *b, const cli_model_setup *setup,
                          const st_layout_policy *policies, bool progress, st_error *err) {
    st_status s = ST_OK;
    const int n_settings = bench_n_settings(r);
    st_model **models = calloc((size_t)r->n_policies, sizeof(st_model *));
    bench_slot *slots = calloc((size_t)n_settings, sizeof(bench_slot));
    int64_t max_depth = 0, max_n = 0, n_ctx = 0; /* of the tests that fit this model */
    for (int it = 0; it < r->n_tests; it++) {
        const bench_test *t = &r->tests[it];
        if (!bench_fits(r, im, it)) continue;
        if (t->depth > max_depth) max_depth = t->depth;
        if (t->n > max_n) max_n = t->n;
        if (t->depth + t->n > n_ctx) n_ctx = t->depth + t->n;
    }
    if (n_ctx == 0) { /* no test fits this model's context: nothing to load */
        for (int ip = 0; ip < r->n_policies; ip++)
            *bench_load_at(r, im, ip) = (bench_load){.policy = r->policies[ip], .arch = "?"};
        free(models);
        free(slots);
        return ST_OK;
    }
    int32_t *depth_tokens = malloc((size_t)(max_depth + 1) * sizeof(int32_t));
    int32_t *tokens = malloc((size_t)max_n * sizeof(int32_t));
    float *logits = NULL;
    if (!models || !slots || !depth_tokens || !tokens) {
        s = st_error_set(err, ST_ERROR_NOMEM, "out of memory");
        goto done;
    }
    for (int ip = 0; ip < r->n_policies; ip++)
        if ((s = load_policy(r, im, ip, n_ctx, b, setup, &policies[ip], &models[ip], err)) != ST_OK) goto done;
    if ((s = open_sessions(r, n_ctx, models, setup, slots, err)) != ST_OK) goto done;
    const int64_t V = models[0]->hp.n_vocab;
    logits = malloc((size_t)V * sizeof(float));
    if (!logits) {
        s = st_error_set(err, ST_ERROR_NOMEM, "out of memory");
        goto done;
    }
    uint64_t state = r->seed;
    for (int64_t i = 0; i < max_depth; i++) depth_tokens[i] = (int32_t)(bench_random(&state) % (uint64_t)V);
    for (int64_t i = 0; i < max_n; i++) tokens[i] = (int32_t)(bench_random(&state) % (uint64_t)V);
    const bench_inputs in = {depth_tokens, tokens, logits};

    int64_t n_runs = 0;
    for (int it = 0; it < r->n_tests; it++) {
        const bench_test *t = &r->tests[it];
        if (!bench_fits(r, im, it)) continue;
        show_progress(progress, im, r->n_models, t, -1, r->reps);
        for (int is = 0; is < n_settings; is++) {
            double ignored, ignored_wall;
            const int64_t nb = r->batches[bench_setting_batch(r, is)];
            if ((s = run_once(b, &slots[is], t, nb, &in, &ignored, &ignored_wall, err)) != ST_OK) goto done;
            share_valid(r, slots, is);
            n_runs++;
        }
        for (int rep = 0; rep < r->reps; rep++) {
            show_progress(progress, im, r->n_models, t, rep, r->reps);
            for (int is = 0; is < n_settings; is++) {
                const int64_t nb = r->batches[bench_setting_batch(r, is)];
                s = run_once(b, &slots[is], t, nb, &in, &bench_seconds_at(r, im, is, it)[rep],
                             &bench_wall_at(r, im, is, it)[rep], err);
                if (s != ST_OK) goto done;
                share_valid(r, slots, is);
                bench_order_at(r, im, is, it)[rep] = n_runs++;
            }
        }
        for (int is = 0; r->profiles && t->kind != BENCH_KIND_TTFT && is < n_settings; is++) {
            /* one more run of each setting, every op timed on its own (stride/profile.h) */
            st_profile *p = bench_profile_at(r, im, is, it);
            double ignored, ignored_wall;
            st_backend_set_profile(b, p);
            s = run_once(b, &slots[is], t, r->batches[bench_setting_batch(r, is)], &in, &ignored, &ignored_wall, err);
            st_backend_set_profile(b, NULL);
            if (s != ST_OK) goto done;
            st_profile_sort(p);
            share_valid(r, slots, is);
            n_runs++;
        }
    }
done:
    if (progress) fprintf(stderr, "\r\033[K");
    for (int is = 0; slots && is < n_settings; is++)
        if (slots[is].owned) st_session_free(slots[is].session);
    for (int ip = 0; models && ip < r->n_policies; ip++) st_model_free(models[ip]);
    free(models);
    free(slots);
    free(depth_tokens);
    free(tokens);
    free(logits);
    return s;
}
