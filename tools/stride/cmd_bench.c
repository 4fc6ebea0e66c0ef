/* stride bench: prompt and generation speed in the style of llama-bench, with the weight
 * layout policy as a swept parameter. The models of every --pad-weights value of one file
 * are held at once so that their repetitions interleave (A B A B ...) in one process: a
 * slow phase of a noisy machine then hits both sides of the on/off ratio alike. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"
#include "commands.h"
#include "model_flags.h"
#include "stride/backend.h"
#include "stride/cpu_ops.h"
#include "stride/model.h"

static const char *CMD = "bench";

#define BENCH_MAX_LIST 256

static void usage(FILE *out) {
    fprintf(out,
            "usage: stride bench -m MODEL [-m MODEL ...] [options]\n\n"
            "Measures prompt processing (ppN: an N-token prompt in one evaluation) and generation\n"
            "(tgN: N single-token decode steps), each after DEPTH tokens already in the cache\n"
            "(evaluated before, not timed), and reports mean ± sd tok/s over the repetitions.\n"
            "Every list flag takes comma-separated values; every combination is measured.\n\n"
            "Method: the prompt and decode tokens are random valid ids from a fixed seed, the same\n"
            "for every policy. For each model file, one model per --pad-weights value is loaded\n"
            "(all of them at once: the memory cost is that many copies of the weights plus one KV\n"
            "cache of the largest depth + N tokens each), then for each test every policy runs one\n"
            "untimed warm-up, then the timed repetitions interleave the policies (A B A B ...).\n"
            "The backend is synchronised before each clock reading. Between runs the cache is\n"
            "rewound to the depth (st_session_rewind), so the depth tokens are evaluated once per\n"
            "session rather than once per run. With both `on` and `off` in the list, a second table\n"
            "gives the speedup of on over off: the mean ± sd over the paired repetitions of\n"
            "(t/s on / t/s off - 1).\n\n"
            "options:\n"
            "  -m, --model FILE[,FILE]  GGUF model(s); repeatable\n"
            "  -p, --n-prompt LIST      prompt sizes (default 512; 0 = no prompt test)\n"
            "  -n, --n-gen LIST         generated tokens (default 128; 0 = no generation test)\n"
            "  -d, --n-depth LIST       context depth before the timed part (default 0)\n"
            "  -r, --repetitions N      timed repetitions per test and policy (default 5)\n"
            "  -ub, --ubatch-size N     tokens per forward pass (default 512)\n"
            "  --pad-weights LIST       layout policies from on, off, auto (default: the usual\n"
            "                           resolution: STRIDE_PAD_WEIGHTS, else auto)\n"
            "  -o, --output md|csv|json report format on stdout (default md); CSV and JSON carry\n"
            "                           every repetition, the device and all parameters\n"
            "  -oe, --output-err FORMAT also write a report in md, csv or json to stderr (as\n"
            "                           llama-bench does; e.g. -o md -oe json: both of one run)\n"
            "  --seed N                 seed of the random token ids (default 1234)\n"
            "  --kv-type f16|f32        KV cache type (default f16)\n"
            "  --backend cpu|cuda       (default: cuda when a GPU is present, else cpu)\n"
            "  -t, --threads N          CPU threads (default: all cores)\n"
            "  --weights f16|bf16       convert quantized weights to this type at load\n");
}

/* "128,512" -> values in [0, max]; false on anything else (empty items included). */
static bool parse_list(const char *s, uint64_t max, int64_t *out, int *n) {
    *n = 0;
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        uint64_t v = 0;
        if (len == 0 || len >= sizeof(item) || *n >= BENCH_MAX_LIST) return false;
        memcpy(item, p, len);
        item[len] = '\0';
        if (!cli_parse_u64(item, &v) || v > max) return false;
        out[(*n)++] = (int64_t)v;
        if (!comma) return true;
        p = comma + 1;
    }
}

/* Splits s at commas into newly allocated strings appended to list; false on an empty
 * item or when out of memory. */
static bool split_append(const char *s, char **list, int *n, int cap) {
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0 || *n >= cap) return false;
        char *item = malloc(len + 1);
        if (!item) return false;
        memcpy(item, p, len);
        item[len] = '\0';
        list[(*n)++] = item;
        if (!comma) return true;
        p = comma + 1;
    }
}

typedef void (*bench_report_fn)(FILE *out, const bench_results *r);

static bench_report_fn report_by_name(const char *name) {
    if (strcmp(name, "md") == 0) return bench_report_md;
    if (strcmp(name, "csv") == 0) return bench_report_csv;
    if (strcmp(name, "json") == 0) return bench_report_json;
    return NULL;
}

/* splitmix64: token ids reproducible from the seed on any platform. */
static uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* One model under one policy, with its session. `valid` counts the depth tokens at the
 * start of the cache: runs rewind to the depth instead of evaluating it again. */
typedef struct bench_slot {
    st_model *model;
    st_session *session;
    int64_t valid;
} bench_slot;

typedef struct bench_inputs {
    const int32_t *depth_tokens; /* [max depth] */
    const int32_t *tokens;       /* [max n] */
    float *logits;               /* [n_vocab]: the last row, as a real prompt or decode step asks */
} bench_inputs;

static st_status run_once(st_backend *b, bench_slot *slot, const bench_test *t, const bench_inputs *in,
                          double *seconds, st_error *err) {
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
    double t0 = cli_now_seconds();
    if (t->kind == BENCH_KIND_PP) {
        s = st_session_eval(slot->session, in->tokens, t->n, false, in->logits, err);
    } else {
        for (int64_t i = 0; i < t->n && s == ST_OK; i++)
            s = st_session_eval(slot->session, &in->tokens[i], 1, false, in->logits, err);
    }
    if (s == ST_OK) s = b->iface->synchronize(b, err);
    *seconds = cli_now_seconds() - t0;
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

/* Loads one model file under every policy, measures every test, frees them. */
static st_status bench_model(bench_results *r, int im, st_backend *b, const cli_model_setup *setup,
                             const st_layout_policy *policies, bool tty, st_error *err) {
    st_status s = ST_OK;
    bench_slot *slots = calloc((size_t)r->n_policies, sizeof(bench_slot));
    int64_t max_depth = 0, max_n = 0;
    for (int it = 0; it < r->n_tests; it++) {
        if (r->tests[it].depth > max_depth) max_depth = r->tests[it].depth;
        if (r->tests[it].n > max_n) max_n = r->tests[it].n;
    }
    int32_t *depth_tokens = malloc((size_t)(max_depth + 1) * sizeof(int32_t));
    int32_t *tokens = malloc((size_t)max_n * sizeof(int32_t));
    float *logits = NULL;
    if (!slots || !depth_tokens || !tokens) {
        s = st_error_set(err, ST_ERROR_NOMEM, "out of memory");
        goto done;
    }
    for (int ip = 0; ip < r->n_policies; ip++) {
        st_model_load_options lo = setup->load;
        lo.policy = policies[ip];
        lo.n_ctx = r->n_ctx;
        cli_progress progress;
        char label[64];
        snprintf(label, sizeof(label), "loading (pad %s)", r->policies[ip]);
        cli_progress_begin(&progress, label);
        lo.progress = cli_progress_update;
        lo.progress_ctx = &progress;
        s = st_model_load(r->models[im], b, &lo, &slots[ip].model, err);
        cli_progress_end(&progress);
        if (s != ST_OK) {
            st_error_wrap(err, "loading %s with --pad-weights %s", r->models[im], r->policies[ip]);
            goto done;
        }
        const st_model *m = slots[ip].model;
        bench_load *l = bench_load_at(r, im, ip);
        l->policy = r->policies[ip];
        l->pad_enabled = m->plan.pad_enabled;
        l->n_padded = m->plan.n_padded;
        l->weights_bytes = m->weights_bytes;
        l->n_params = 0;
        for (uint64_t i = 0; i < m->n_tensors; i++) l->n_params += (uint64_t)st_tensor_nelements(&m->tensors[i]);
        st_session_options so = st_session_options_default();
        so.n_ctx = r->n_ctx;
        so.n_ubatch = r->n_ubatch;
        so.kv_type = setup->kv_type;
        if ((s = st_session_init(slots[ip].model, &so, &slots[ip].session, err)) != ST_OK) goto done;
    }
    const int64_t V = slots[0].model->hp.n_vocab;
    logits = malloc((size_t)V * sizeof(float));
    if (!logits) {
        s = st_error_set(err, ST_ERROR_NOMEM, "out of memory");
        goto done;
    }
    uint64_t state = r->seed;
    for (int64_t i = 0; i < max_depth; i++) depth_tokens[i] = (int32_t)(next_random(&state) % (uint64_t)V);
    for (int64_t i = 0; i < max_n; i++) tokens[i] = (int32_t)(next_random(&state) % (uint64_t)V);
    const bench_inputs in = {depth_tokens, tokens, logits};

    for (int it = 0; it < r->n_tests; it++) {
        const bench_test *t = &r->tests[it];
        show_progress(tty, im, r->n_models, t, -1, r->reps);
        for (int ip = 0; ip < r->n_policies; ip++) {
            double ignored;
            if ((s = run_once(b, &slots[ip], t, &in, &ignored, err)) != ST_OK) goto done;
        }
        for (int rep = 0; rep < r->reps; rep++) {
            show_progress(tty, im, r->n_models, t, rep, r->reps);
            for (int ip = 0; ip < r->n_policies; ip++)
                if ((s = run_once(b, &slots[ip], t, &in, &bench_seconds_at(r, im, ip, it)[rep], err)) != ST_OK)
                    goto done;
        }
    }
done:
    if (tty) fprintf(stderr, "\r\033[K");
    for (int ip = 0; slots && ip < r->n_policies; ip++) {
        st_session_free(slots[ip].session);
        st_model_free(slots[ip].model);
    }
    free(slots);
    free(depth_tokens);
    free(tokens);
    free(logits);
    return s;
}

int st_cmd_bench(int argc, char **argv) {
    char *models[BENCH_MAX_LIST], *policy_names[BENCH_MAX_LIST];
    int n_models = 0, n_policy_names = 0;
    const char *p_arg = "512", *n_arg = "128", *d_arg = "0", *r_arg = "5", *ub_arg = "512", *pad_arg = NULL,
               *o_arg = "md", *oe_arg = NULL,
               *seed_arg = NULL;
    cli_model_flags mf = {0};
    int rc = ST_EXIT_USAGE;
    bench_results r = {0};
    st_backend *backend = NULL;
    st_layout_policy *policies = NULL;
    st_error err = {0};
    for (int i = 1; i < argc; i++) {
        bool missing = false;
        const char *a = argv[i], *m_arg = NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            rc = ST_EXIT_OK;
            goto done;
        }
        if (cli_take_value(argc, argv, &i, "-m", &m_arg, &missing) ||
            cli_take_value(argc, argv, &i, "--model", &m_arg, &missing)) {
            if (missing) {
                rc = cli_usage_error(CMD, "%s needs a value", a);
                goto done;
            }
            if (!split_append(m_arg, models, &n_models, BENCH_MAX_LIST)) {
                rc = cli_usage_error(CMD, "-m: '%s' is not a comma-separated list of files", m_arg);
                goto done;
            }
        } else if (cli_take_value(argc, argv, &i, "-p", &p_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--n-prompt", &p_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "-n", &n_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--n-gen", &n_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "-d", &d_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--n-depth", &d_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "-r", &r_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--repetitions", &r_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "-ub", &ub_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--ubatch-size", &ub_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--pad-weights", &pad_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "-o", &o_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--output", &o_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "-oe", &oe_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--output-err", &oe_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--seed", &seed_arg, &missing) ||
                   cli_take_model_flag(argc, argv, &i, &mf, &missing)) {
            if (missing) {
                rc = cli_usage_error(CMD, "%s needs a value", a);
                goto done;
            }
        } else {
            rc = cli_usage_error(CMD, "unknown argument '%s'", a);
            goto done;
        }
    }
    if (n_models == 0) {
        rc = cli_usage_error(CMD, "no model given (-m FILE)");
        goto done;
    }

    /* ---- lists and numbers ---- */
    int64_t p_list[BENCH_MAX_LIST], n_list[BENCH_MAX_LIST], d_list[BENCH_MAX_LIST], one[BENCH_MAX_LIST];
    int n_p = 0, n_n = 0, n_d = 0, n_one = 0;
    const uint64_t max_tokens = 1u << 24;
    if (!parse_list(p_arg, max_tokens, p_list, &n_p)) {
        rc = cli_usage_error(CMD, "-p: '%s' is not a comma-separated list of prompt sizes (0..%" PRIu64 ")", p_arg,
                             max_tokens);
        goto done;
    }
    if (!parse_list(n_arg, max_tokens, n_list, &n_n)) {
        rc = cli_usage_error(CMD, "-n: '%s' is not a comma-separated list of token counts (0..%" PRIu64 ")", n_arg,
                             max_tokens);
        goto done;
    }
    if (!parse_list(d_arg, max_tokens, d_list, &n_d)) {
        rc = cli_usage_error(CMD, "-d: '%s' is not a comma-separated list of depths (0..%" PRIu64 ")", d_arg,
                             max_tokens);
        goto done;
    }
    if (!parse_list(r_arg, 100000, one, &n_one) || n_one != 1 || one[0] < 1) {
        rc = cli_usage_error(CMD, "-r: '%s' is not a repetition count (1..100000)", r_arg);
        goto done;
    }
    r.reps = (int)one[0];
    if (!parse_list(ub_arg, 65536, one, &n_one) || n_one != 1 || one[0] < 1) {
        rc = cli_usage_error(CMD, "-ub: '%s' is not a micro-batch size (1..65536)", ub_arg);
        goto done;
    }
    r.n_ubatch = one[0];
    r.seed = 1234;
    if (seed_arg && !cli_parse_u64(seed_arg, &r.seed)) {
        rc = cli_usage_error(CMD, "--seed: '%s' is not a non-negative integer", seed_arg);
        goto done;
    }
    bench_report_fn report = report_by_name(o_arg), report_err = oe_arg ? report_by_name(oe_arg) : NULL;
    if (!report) {
        rc = cli_usage_error(CMD, "-o: '%s' is not md, csv or json", o_arg);
        goto done;
    }
    if (oe_arg && !report_err) {
        rc = cli_usage_error(CMD, "-oe: '%s' is not md, csv or json", oe_arg);
        goto done;
    }

    /* ---- tests: by depth, prompts before generation ---- */
    r.tests = calloc((size_t)n_d * (size_t)(n_p + n_n), sizeof(bench_test));
    if (!r.tests) {
        st_error_set(&err, ST_ERROR_NOMEM, "out of memory");
        rc = cli_fail(CMD, &err);
        goto done;
    }
    for (int id = 0; id < n_d; id++) {
        for (int i = 0; i < n_p; i++)
            if (p_list[i] > 0) r.tests[r.n_tests++] = (bench_test){BENCH_KIND_PP, p_list[i], d_list[id]};
        for (int i = 0; i < n_n; i++)
            if (n_list[i] > 0) r.tests[r.n_tests++] = (bench_test){BENCH_KIND_TG, n_list[i], d_list[id]};
    }
    if (r.n_tests == 0) {
        rc = cli_usage_error(CMD, "nothing to measure: every -p and -n value is 0");
        goto done;
    }
    for (int it = 0; it < r.n_tests; it++)
        if (r.tests[it].depth + r.tests[it].n > r.n_ctx) r.n_ctx = r.tests[it].depth + r.tests[it].n;

    /* ---- shared model flags, then one layout policy per --pad-weights value ---- */
    cli_model_setup setup;
    if ((rc = cli_model_setup_resolve(CMD, &mf, &setup)) != ST_EXIT_OK) goto done;
    rc = ST_EXIT_USAGE;
    if (pad_arg) {
        if (!split_append(pad_arg, policy_names, &n_policy_names, BENCH_MAX_LIST)) {
            rc = cli_usage_error(CMD, "--pad-weights: '%s' is not a comma-separated list of on, off, auto", pad_arg);
            goto done;
        }
    } else {
        /* The usual resolution (STRIDE_PAD_WEIGHTS, else auto), labelled by its mode. */
        if (!split_append(st_pad_mode_name(setup.load.policy.mode), policy_names, &n_policy_names, BENCH_MAX_LIST)) {
            rc = cli_usage_error(CMD, "out of memory");
            goto done;
        }
    }
    policies = calloc((size_t)n_policy_names, sizeof(st_layout_policy));
    if (!policies) {
        st_error_set(&err, ST_ERROR_NOMEM, "out of memory");
        rc = cli_fail(CMD, &err);
        goto done;
    }
    for (int ip = 0; ip < n_policy_names; ip++) {
        for (int j = 0; j < ip; j++)
            if (strcmp(policy_names[j], policy_names[ip]) == 0) {
                rc = cli_usage_error(CMD, "--pad-weights: '%s' is listed twice", policy_names[ip]);
                goto done;
            }
        if (st_layout_policy_resolve(&policies[ip], policy_names[ip], NULL, NULL, &err) != ST_OK) {
            rc = cli_usage_error(CMD, "%s", err.message);
            goto done;
        }
    }
    r.models = (const char **)models;
    r.n_models = n_models;
    r.policies = (const char **)policy_names;
    r.n_policies = n_policy_names;

    /* ---- every model allows the longest test (before any weight is loaded) ---- */
    for (int im = 0; im < n_models; im++) {
        st_gguf_file *gf = NULL;
        st_hparams hp;
        st_status s = st_gguf_open(models[im], &gf, &err);
        if (s == ST_OK) s = st_hparams_from_gguf(gf, &hp, &err);
        st_gguf_close(gf);
        if (s != ST_OK) {
            rc = cli_fail(CMD, &err);
            goto done;
        }
        for (int it = 0; it < r.n_tests; it++) {
            const bench_test *t = &r.tests[it];
            if (t->depth + t->n > hp.n_ctx_train) {
                char name[64];
                bench_test_name(t, name, sizeof(name));
                rc = cli_usage_error(CMD,
                                     "%s needs a context of %lld tokens (depth %lld + %lld), but %s allows %lld "
                                     "(its context_length): lower -d, -p or -n",
                                     name, (long long)(t->depth + t->n), (long long)t->depth, (long long)t->n,
                                     models[im], (long long)hp.n_ctx_train);
                goto done;
            }
        }
    }

    /* ---- measure ---- */
    rc = ST_EXIT_FAILURE;
    r.loads = calloc((size_t)n_models * (size_t)n_policy_names, sizeof(bench_load));
    r.seconds = calloc((size_t)n_models * (size_t)n_policy_names * (size_t)r.n_tests * (size_t)r.reps, sizeof(double));
    if (!r.loads || !r.seconds) {
        st_error_set(&err, ST_ERROR_NOMEM, "out of memory");
        cli_fail(CMD, &err);
        goto done;
    }
    if (st_backend_init(setup.backend, 0, &backend, &err) != ST_OK) {
        cli_fail(CMD, &err);
        goto done;
    }
    r.device = backend->device;
    r.backend = st_backend_name(setup.backend);
    r.threads = setup.backend == ST_BACKEND_CPU ? st_cpu_get_threads() : 0;
    r.kv_type = st_type_name(setup.kv_type);
    r.weights = setup.load.weights_type == ST_TYPE_COUNT ? "as stored" : st_type_name(setup.load.weights_type);
    const bool tty = isatty(STDERR_FILENO) == 1;
    for (int im = 0; im < n_models; im++) {
        if (bench_model(&r, im, backend, &setup, policies, tty, &err) != ST_OK) {
            cli_fail(CMD, &err);
            goto done;
        }
    }
    report(stdout, &r);
    fflush(stdout);
    if (report_err) {
        report_err(stderr, &r);
        fflush(stderr);
    }
    rc = ST_EXIT_OK;
done:
    st_backend_free(backend);
    free(policies);
    free(r.tests);
    free(r.loads);
    free(r.seconds);
    for (int i = 0; i < n_models; i++) free(models[i]);
    for (int i = 0; i < n_policy_names; i++) free(policy_names[i]);
    return rc;
}
