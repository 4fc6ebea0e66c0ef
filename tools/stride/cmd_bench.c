/* stride bench: the command line (flags, lists, checks) of the benchmark in the style of
 * llama-bench, with the weight layout policy, -b and -ub as swept parameters. The measuring
 * loop is bench_run.c, the reports bench_report.c, bench_compare.c and bench_chart.c; the
 * batched mode (-np, llama-batched-bench's form) is bench_batched.c and
 * bench_batched_report.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "bench_batched.h"
#include "cli.h"
#include "commands.h"
#include "model_flags.h"
#include "stride/backend.h"
#include "stride/cpu_ops.h"
#include "stride/engine.h"
#include "stride/file_io.h"
#include "stride/model.h"

static const char *CMD = "bench";

#define BENCH_MAX_LIST 256

static void usage(FILE *out) {
    fprintf(out,
            "usage: stride bench -m MODEL [-m MODEL ...] [options]\n\n"
            "Measures prompt processing (ppN: an N-token prompt, fed in -b sized evaluations),\n"
            "generation (tgN: N single-token decode steps) and, with --ttft, the time to first token\n"
            "(ttftN @ dD: the wall time from handing over an N-token prompt until the logits of its\n"
            "last token are on the host), each after DEPTH tokens already in the cache (evaluated\n"
            "before, not timed); pp and tg as mean ± sd tok/s, TTFT as mean ± sd ms over the\n"
            "repetitions. Every list flag takes comma-separated values; every combination runs.\n\n"
            "Method: the prompt and decode tokens are random valid ids from a fixed seed, the same\n"
            "for every setting. A setting is one combination of --pad-weights, -b and -ub. For each\n"
            "model file, one model per --pad-weights value is loaded (all at once: the memory cost\n"
            "is that many copies of the weights, plus one KV cache of the largest depth + N tokens\n"
            "per policy and -ub value), then for each test every setting runs one untimed warm-up,\n"
            "then the timed repetitions interleave the settings (A B A B ...). pp and tg are timed\n"
            "with the backend's timer (CUDA events on the GPU, the host clock on the CPU), TTFT with\n"
            "the host clock. Between runs the cache is rewound to the depth (st_session_rewind),\n"
            "so the depth tokens are evaluated once per session rather than once per run. A test\n"
            "longer than a model's context_length is skipped for that model (n/a in the reports).\n\n"
            "Comparisons: with both `on` and `off` listed, a table gives for every shape (row) and\n"
            "model (column) the speedup of on over off: the mean ± sd over the paired repetitions\n"
            "of (t/s on / t/s off - 1), for TTFT (ms off / ms on - 1). With `auto` too, a second\n"
            "table compares auto with the better of on and off in each cell.\n\n"
            "options:\n"
            "  -m, --model FILE[,FILE]  GGUF model(s); repeatable\n"
            "  -p, --n-prompt LIST      prompt sizes (default 512; 0 = no prompt test)\n"
            "  -n, --n-gen LIST         generated tokens (default 128; 0 = no generation test)\n"
            "  -d, --n-depth LIST       context depth before the timed part (default 0)\n"
            "  -r, --repetitions N      timed repetitions per test and setting (default 5)\n"
            "  -b, --batch-size LIST    logical batch: prompt tokens per evaluation call (default 2048)\n"
            "  -ub, --ubatch-size LIST  micro-batch: tokens per forward pass (default 512; at most -b,\n"
            "                           as in llama.cpp)\n"
            "  --ttft LIST              also measure the time to first token of prompts of these sizes\n"
            "  --ttft-depth LIST        the depths of the TTFT tests (default: the -d list)\n"
            "  --pad-weights LIST       layout policies from on, off, auto (default: the usual\n"
            "                           resolution: STRIDE_PAD_WEIGHTS, else auto)\n"
            "  --compare                report only the comparison, in the seed's form (needs on and\n"
            "                           off in --pad-weights): the markdown gives the on-vs-off (and\n"
            "                           auto-vs-best) tables and TTFT, the CSV one row per cell; the\n"
            "                           JSON carries the comparison with or without this switch\n"
            "  --chart FILE.svg         write the on-vs-off table as an SVG bar chart (needs on and off)\n"
            "  -o, --output md|csv|json report format on stdout (default md); CSV and JSON carry\n"
            "                           every repetition, the device and all parameters\n"
            "  -oe, --output-err FORMAT also write a report in md, csv or json to stderr (as\n"
            "                           llama-bench does; e.g. -o md -oe json: both of one run)\n"
            "  --seed N                 seed of the random token ids (default 1234)\n"
            "  --profile                after the repetitions, one more run of each pp and tg test (each\n"
            "                           -np case) with every op timed on its own: a table per test (per\n"
            "                           phase) of each op's device time, share, GB/s, TFLOP/s and\n"
            "                           (CUDA) roofline time\n"
            "batched mode (llama-batched-bench's form; -p, -n, -d, -b, --ttft, --compare and --chart\n"
            "do not apply): B sequences of PP prompt tokens each are prefilled together, in forward\n"
            "passes of up to max(-ub, B) tokens (one -ub) holding runs of several sequences, then decoded\n"
            "together for TG steps of B tokens. Reported per case: PP, TG, B, N_KV = B x (PP + TG),\n"
            "T_PP s, S_PP t/s, T_TG s, S_TG t/s with the decode steps' roofline (the weights once and\n"
            "every sequence's KV against 4.3 TB/s, or the FLOPs against 790 TFLOP/s: an H200), T s,\n"
            "S t/s; every case and --pad-weights value interleaved as above.\n"
            "  -np LIST                 parallel sequences B (turns the batched mode on)\n"
            "  -npp LIST                prompt tokens of each sequence (default 128)\n"
            "  -ntg LIST                generated tokens of each sequence (default 128)\n"
            "  --logits top|all         how a step's logits come back: top, each sequence's %d largest\n"
            "                           and its log-sum-exp, picked on the device (the engine's and the\n"
            "                           server's sampling); all, every logit to the host (as\n"
            "                           llama-batched-bench). Default: top on a GPU, all on the CPU\n"
            "  --kv-type f16|f32        KV cache type (default f16)\n"
            "  --backend cpu|cuda       (default: cuda when a GPU is present, else cpu)\n"
            "  --exact                  the CPU reference ops instead of the fast path\n"
            "  -t, --threads N          CPU threads (default: all cores)\n"
            "  --weights f16|bf16       convert quantized weights to this type at load\n"
            CLI_TP_FLAG_HELP,
            ST_ENGINE_CANDIDATES);
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

/* A list flag of sizes in [min, max] without repeats (a repeated -b would give two
 * settings with one name). */
static bool parse_sizes(const char *s, uint64_t min, uint64_t max, bool unique, int64_t *out, int *n) {
    if (!parse_list(s, max, out, n)) return false;
    for (int i = 0; i < *n; i++) {
        if ((uint64_t)out[i] < min) return false;
        for (int j = 0; unique && j < i; j++)
            if (out[j] == out[i]) return false;
    }
    return true;
}

/* The command line as one string, for the JSON report ("stride bench -m a.gguf ..."). */
static char *join_command(int argc, char **argv) {
    size_t len = strlen("stride") + 1;
    for (int i = 0; i < argc; i++) len += strlen(argv[i]) + 3;
    char *s = malloc(len), *p = s;
    if (!s) return NULL;
    p += sprintf(p, "stride");
    for (int i = 0; i < argc; i++) p += sprintf(p, strpbrk(argv[i], " \t") ? " '%s'" : " %s", argv[i]);
    return s;
}

typedef struct bench_flags {
    const char *p, *n, *d, *r, *b, *ub, *ttft, *ttft_depth, *pad, *o, *oe, *seed, *chart;
    const char *np, *npp, *ntg, *logits; /* the batched mode (-np) */
    bool compare, profile;
    const char *single;         /* a flag of the single-sequence tests, when one was given */
} bench_flags;

/* Tests by depth, prompts before generation; then the TTFT tests by depth. */
static int build_tests(const bench_flags *f, bench_results *r) {
    int64_t p[BENCH_MAX_LIST], n[BENCH_MAX_LIST], d[BENCH_MAX_LIST], tp[BENCH_MAX_LIST], td[BENCH_MAX_LIST];
    int n_p = 0, n_n = 0, n_d = 0, n_tp = 0, n_td = 0;
    const uint64_t max_tokens = 1u << 24;
    if (!parse_list(f->p, max_tokens, p, &n_p))
        return cli_usage_error(CMD, "-p: '%s' is not a comma-separated list of prompt sizes (0..%" PRIu64 ")", f->p,
                               max_tokens);
    if (!parse_list(f->n, max_tokens, n, &n_n))
        return cli_usage_error(CMD, "-n: '%s' is not a comma-separated list of token counts (0..%" PRIu64 ")", f->n,
                               max_tokens);
    if (!parse_list(f->d, max_tokens, d, &n_d))
        return cli_usage_error(CMD, "-d: '%s' is not a comma-separated list of depths (0..%" PRIu64 ")", f->d,
                               max_tokens);
    if (f->ttft && !parse_sizes(f->ttft, 1, max_tokens, false, tp, &n_tp))
        return cli_usage_error(CMD, "--ttft: '%s' is not a comma-separated list of prompt sizes (1..%" PRIu64 ")",
                               f->ttft, max_tokens);
    if (f->ttft_depth && !f->ttft) return cli_usage_error(CMD, "--ttft-depth needs --ttft (the prompt sizes)");
    if (f->ttft_depth && !parse_list(f->ttft_depth, max_tokens, td, &n_td))
        return cli_usage_error(CMD, "--ttft-depth: '%s' is not a comma-separated list of depths (0..%" PRIu64 ")",
                               f->ttft_depth, max_tokens);
    if (f->ttft && !f->ttft_depth) {
        memcpy(td, d, sizeof(d[0]) * (size_t)n_d);
        n_td = n_d;
    }
    r->tests = calloc((size_t)n_d * (size_t)(n_p + n_n) + (size_t)n_td * (size_t)n_tp, sizeof(bench_test));
    if (!r->tests) {
        fprintf(stderr, "stride %s: out of memory\n", CMD);
        return ST_EXIT_FAILURE;
    }
    for (int id = 0; id < n_d; id++) {
        for (int i = 0; i < n_p; i++)
            if (p[i] > 0) r->tests[r->n_tests++] = (bench_test){BENCH_KIND_PP, p[i], d[id]};
        for (int i = 0; i < n_n; i++)
            if (n[i] > 0) r->tests[r->n_tests++] = (bench_test){BENCH_KIND_TG, n[i], d[id]};
    }
    for (int id = 0; id < n_td; id++)
        for (int i = 0; i < n_tp; i++) r->tests[r->n_tests++] = (bench_test){BENCH_KIND_TTFT, tp[i], td[id]};
    if (r->n_tests == 0) return cli_usage_error(CMD, "nothing to measure: every -p and -n value is 0 and no --ttft");
    for (int it = 0; it < r->n_tests; it++)
        if (r->tests[it].depth + r->tests[it].n > r->n_ctx) r->n_ctx = r->tests[it].depth + r->tests[it].n;
    return ST_EXIT_OK;
}

/* Which tests fit each model's context (checked before any weight is loaded). A test that
 * fits no model is an error; one that fits only some is skipped for the others (a
 * multi-model table keeps its rows: OLMoE's 4096-token context next to 8192-token prompts),
 * named in the reports, and with `note` on stderr too (not when -oe writes a report there). */
static int check_contexts(bench_results *r, char **models, int n_models, bool note) {
    int64_t *n_ctx_train = calloc((size_t)n_models, sizeof(int64_t));
    r->fits = calloc((size_t)n_models * (size_t)r->n_tests, sizeof(bool));
    if (!n_ctx_train || !r->fits) {
        free(n_ctx_train);
        fprintf(stderr, "stride %s: out of memory\n", CMD);
        return ST_EXIT_FAILURE;
    }
    int rc = ST_EXIT_OK;
    for (int im = 0; im < n_models && rc == ST_EXIT_OK; im++) {
        st_error err = {0};
        st_gguf_file *gf = NULL;
        st_hparams hp;
        st_status s = st_gguf_open(models[im], &gf, &err);
        if (s == ST_OK) s = st_hparams_from_gguf(gf, &hp, &err);
        st_gguf_close(gf);
        if (s != ST_OK) rc = cli_fail(CMD, &err);
        n_ctx_train[im] = hp.n_ctx_train;
        for (int it = 0; s == ST_OK && it < r->n_tests; it++)
            r->fits[(size_t)im * (size_t)r->n_tests + (size_t)it] =
                r->tests[it].depth + r->tests[it].n <= hp.n_ctx_train;
    }
    for (int it = 0; it < r->n_tests && rc == ST_EXIT_OK; it++) {
        const bench_test *t = &r->tests[it];
        int n_fit = 0, im_no = -1;
        for (int im = 0; im < n_models; im++) {
            if (bench_fits(r, im, it)) n_fit++;
            else if (im_no < 0) im_no = im;
        }
        if (n_fit > 0) continue;
        char name[64];
        bench_test_name(t, name, sizeof(name));
        rc = cli_usage_error(CMD,
                             "%s needs a context of %lld tokens (depth %lld + %lld), but %s allows %lld "
                             "(its context_length): lower -d, --ttft-depth, -p, -n or --ttft",
                             name, (long long)(t->depth + t->n), (long long)t->depth, (long long)t->n,
                             models[im_no], (long long)n_ctx_train[im_no]);
    }
    for (int im = 0; im < n_models && rc == ST_EXIT_OK && note; im++) {
        bool first = true;
        for (int it = 0; it < r->n_tests; it++) {
            if (bench_fits(r, im, it)) continue;
            char name[64];
            bench_test_name(&r->tests[it], name, sizeof(name));
            if (first)
                fprintf(stderr, "stride %s: note: %s allows %lld tokens of context (its context_length): skipping",
                        CMD, models[im], (long long)n_ctx_train[im]);
            fprintf(stderr, "%s %s", first ? "" : ",", name);
            first = false;
        }
        if (!first) fprintf(stderr, " (n/a in the reports)\n");
    }
    free(n_ctx_train);
    return rc;
}

/* ---- the batched mode (-np) ---------------------------------------------------------- */

typedef void (*bb_report_fn)(FILE *out, const bb_results *r);

static bb_report_fn bb_report_by_name(const char *name) {
    if (strcmp(name, "md") == 0) return bb_report_md;
    if (strcmp(name, "csv") == 0) return bb_report_csv;
    if (strcmp(name, "json") == 0) return bb_report_json;
    return NULL;
}

/* Which cases fit each model's context (PP + TG); a case no model fits is an error. */
static int bb_check_contexts(bb_results *b, char **models) {
    for (int im = 0; im < b->n_models; im++) {
        st_error err = {0};
        st_gguf_file *gf = NULL;
        st_hparams hp;
        st_status s = st_gguf_open(models[im], &gf, &err);
        if (s == ST_OK) s = st_hparams_from_gguf(gf, &hp, &err);
        st_gguf_close(gf);
        if (s != ST_OK) return cli_fail(CMD, &err);
        for (int ic = 0; ic < b->n_cases; ic++)
            b->fits[(size_t)im * (size_t)b->n_cases + (size_t)ic] = b->cases[ic].pp + b->cases[ic].tg <= hp.n_ctx_train;
    }
    for (int ic = 0; ic < b->n_cases; ic++) {
        bool any = false;
        for (int im = 0; im < b->n_models; im++) any = any || bb_fits(b, im, ic);
        if (!any)
            return cli_usage_error(CMD, "pp%lld tg%lld needs a context of %lld tokens, longer than every model's "
                                        "context_length: lower -npp or -ntg",
                                   (long long)b->cases[ic].pp, (long long)b->cases[ic].tg,
                                   (long long)(b->cases[ic].pp + b->cases[ic].tg));
    }
    return ST_EXIT_OK;
}

/* bench -np: the cases, the measurement and the reports (bench_batched.h). r carries the
 * parsed common numbers (repetitions, -ub, seed). */
static int bench_batched(const bench_flags *f, const bench_results *r, char **models, int n_models,
                         char **policy_names, int n_policies, const st_layout_policy *policies,
                         const cli_model_setup *setup, const char *command) {
    int64_t np[BENCH_MAX_LIST], npp[BENCH_MAX_LIST], ntg[BENCH_MAX_LIST];
    int n_np = 0, n_npp = 0, n_ntg = 0;
    if (!parse_sizes(f->np, 1, 65536, true, np, &n_np))
        return cli_usage_error(CMD, "-np: '%s' is not a comma-separated list of distinct sequence counts (1..65536)",
                               f->np);
    if (!parse_sizes(f->npp ? f->npp : "128", 1, 1u << 20, true, npp, &n_npp))
        return cli_usage_error(CMD, "-npp: '%s' is not a comma-separated list of distinct prompt sizes (1..%u)",
                               f->npp, 1u << 20);
    if (!parse_sizes(f->ntg ? f->ntg : "128", 1, 1u << 20, true, ntg, &n_ntg))
        return cli_usage_error(CMD, "-ntg: '%s' is not a comma-separated list of distinct token counts (1..%u)",
                               f->ntg, 1u << 20);
    if (r->n_ubatches != 1) return cli_usage_error(CMD, "-ub: the batched mode takes one value");
    if (f->logits && strcmp(f->logits, "top") != 0 && strcmp(f->logits, "all") != 0)
        return cli_usage_error(CMD, "--logits: '%s' is neither top nor all", f->logits);
    bb_report_fn report = bb_report_by_name(f->o), report_err = f->oe ? bb_report_by_name(f->oe) : NULL;
    bb_results b = {.models = (const char **)models, .n_models = n_models, .policies = (const char **)policy_names,
                    .n_policies = n_policies, .reps = r->reps, .n_ubatch = r->ubatches[0], .seed = r->seed,
                    .argv = command};
    char date[32];
    st_backend *backend = NULL;
    st_error err = {0};
    int rc = ST_EXIT_FAILURE;
    b.cases = calloc((size_t)(n_np * n_npp * n_ntg), sizeof(bb_case));
    b.fits = calloc((size_t)(n_np * n_npp * n_ntg) * (size_t)n_models, sizeof(bool));
    if (!b.cases || !b.fits || !command) {
        st_error_set(&err, ST_ERROR_NOMEM, "out of memory");
        cli_fail(CMD, &err);
        goto done;
    }
    for (int i = 0; i < n_npp; i++) /* llama-batched-bench's order: PP, then TG, then B */
        for (int j = 0; j < n_ntg; j++)
            for (int k = 0; k < n_np; k++) b.cases[b.n_cases++] = (bb_case){.pp = npp[i], .tg = ntg[j], .b = np[k]};
    if ((rc = bb_check_contexts(&b, models)) != ST_EXIT_OK) goto done;
    rc = ST_EXIT_FAILURE;
    const size_t n_samples = (size_t)n_models * (size_t)n_policies * (size_t)b.n_cases * (size_t)b.reps;
    b.loads = calloc((size_t)n_models * (size_t)n_policies, sizeof(bench_load));
    b.cost = calloc((size_t)n_models, sizeof(bb_model_cost));
    b.t_pp = calloc(n_samples, sizeof(double));
    b.t_tg = calloc(n_samples, sizeof(double));
    b.wall = calloc(n_samples, sizeof(double));
    b.order = calloc(n_samples, sizeof(int64_t));
    const size_t n_profiles = (size_t)n_models * (size_t)n_policies * (size_t)b.n_cases * 2;
    if (f->profile) b.profiles = calloc(n_profiles, sizeof(st_profile)); /* zeroed: empty */
    if (!b.loads || !b.cost || !b.t_pp || !b.t_tg || !b.wall || !b.order || (f->profile && !b.profiles)) {
        st_error_set(&err, ST_ERROR_NOMEM, "out of memory");
        cli_fail(CMD, &err);
        goto done;
    }
    const time_t now = time(NULL);
    struct tm utc;
    strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &utc));
    b.date = date;
    if (cli_backend_init(setup, &backend, &err) != ST_OK) {
        cli_fail(CMD, &err);
        goto done;
    }
    b.device = backend->device;
    b.backend = st_backend_name(setup->backend);
    b.threads = setup->backend == ST_BACKEND_CPU ? st_cpu_get_threads() : 0;
    b.kv_type = st_type_name(setup->kv_type);
    b.all_logits = f->logits ? strcmp(f->logits, "all") == 0 : setup->backend == ST_BACKEND_CPU;
    b.weights = setup->load.weights_type == ST_TYPE_COUNT ? "as stored" : st_type_name(setup->load.weights_type);
    const bool tty = isatty(STDERR_FILENO) == 1;
    for (int im = 0; im < n_models; im++)
        if (bb_run_model(&b, im, backend, setup, policies, tty, &err) != ST_OK) {
            cli_fail(CMD, &err);
            goto done;
        }
    report(stdout, &b);
    fflush(stdout);
    if (report_err) {
        report_err(stderr, &b);
        fflush(stderr);
    }
    rc = ST_EXIT_OK;
done:
    st_backend_free(backend);
    free(b.cases);
    free(b.fits);
    free(b.loads);
    free(b.cost);
    free(b.t_pp);
    free(b.t_tg);
    free(b.wall);
    free(b.order);
    for (size_t i = 0; b.profiles && i < (size_t)n_models * (size_t)n_policies * (size_t)b.n_cases * 2; i++)
        st_profile_free(&b.profiles[i]);
    free(b.profiles);
    return rc;
}

int st_cmd_bench(int argc, char **argv) {
    char *models[BENCH_MAX_LIST], *policy_names[BENCH_MAX_LIST];
    int n_models = 0, n_policy_names = 0;
    bench_flags f = {.p = "512", .n = "128", .d = "0", .r = "5", .b = "2048", .ub = "512", .o = "md"};
    cli_model_flags mf = {0};
    int rc = ST_EXIT_USAGE;
    bench_results r = {0};
    int64_t batches[BENCH_MAX_LIST], ubatches[BENCH_MAX_LIST];
    char date[32] = "";
    char *command = NULL;
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
        if (strcmp(a, "--compare") == 0) {
            f.compare = true;
            f.single = a;
        } else if (strcmp(a, "--profile") == 0) {
            f.profile = true;
        } else if (cli_take_value(argc, argv, &i, "-p", &f.p, &missing) ||
                   cli_take_value(argc, argv, &i, "--n-prompt", &f.p, &missing) ||
                   cli_take_value(argc, argv, &i, "-n", &f.n, &missing) ||
                   cli_take_value(argc, argv, &i, "--n-gen", &f.n, &missing) ||
                   cli_take_value(argc, argv, &i, "-d", &f.d, &missing) ||
                   cli_take_value(argc, argv, &i, "--n-depth", &f.d, &missing) ||
                   cli_take_value(argc, argv, &i, "-b", &f.b, &missing) ||
                   cli_take_value(argc, argv, &i, "--batch-size", &f.b, &missing) ||
                   cli_take_value(argc, argv, &i, "--ttft", &f.ttft, &missing) ||
                   cli_take_value(argc, argv, &i, "--ttft-depth", &f.ttft_depth, &missing) ||
                   cli_take_value(argc, argv, &i, "--chart", &f.chart, &missing)) {
            if (missing) {
                rc = cli_usage_error(CMD, "%s needs a value", a);
                goto done;
            }
            f.single = a;
        } else if (cli_take_value(argc, argv, &i, "-m", &m_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--model", &m_arg, &missing)) {
            if (missing) {
                rc = cli_usage_error(CMD, "%s needs a value", a);
                goto done;
            }
            if (!split_append(m_arg, models, &n_models, BENCH_MAX_LIST)) {
                rc = cli_usage_error(CMD, "-m: '%s' is not a comma-separated list of files", m_arg);
                goto done;
            }
        } else if (cli_take_value(argc, argv, &i, "-r", &f.r, &missing) ||
                   cli_take_value(argc, argv, &i, "--repetitions", &f.r, &missing) ||
                   cli_take_value(argc, argv, &i, "-ub", &f.ub, &missing) ||
                   cli_take_value(argc, argv, &i, "--ubatch-size", &f.ub, &missing) ||
                   cli_take_value(argc, argv, &i, "-np", &f.np, &missing) ||
                   cli_take_value(argc, argv, &i, "-npp", &f.npp, &missing) ||
                   cli_take_value(argc, argv, &i, "-ntg", &f.ntg, &missing) ||
                   cli_take_value(argc, argv, &i, "--logits", &f.logits, &missing) ||
                   cli_take_value(argc, argv, &i, "--pad-weights", &f.pad, &missing) ||
                   cli_take_value(argc, argv, &i, "-o", &f.o, &missing) ||
                   cli_take_value(argc, argv, &i, "--output", &f.o, &missing) ||
                   cli_take_value(argc, argv, &i, "-oe", &f.oe, &missing) ||
                   cli_take_value(argc, argv, &i, "--output-err", &f.oe, &missing) ||
                   cli_take_value(argc, argv, &i, "--seed", &f.seed, &missing) ||
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
    int64_t one[BENCH_MAX_LIST];
    int n_one = 0;
    if (!parse_list(f.r, 100000, one, &n_one) || n_one != 1 || one[0] < 1) {
        rc = cli_usage_error(CMD, "-r: '%s' is not a repetition count (1..100000)", f.r);
        goto done;
    }
    r.reps = (int)one[0];
    if (!parse_sizes(f.b, 1, 1u << 24, true, batches, &r.n_batches)) {
        rc = cli_usage_error(CMD, "-b: '%s' is not a comma-separated list of distinct batch sizes (1..%u)", f.b,
                             1u << 24);
        goto done;
    }
    if (!parse_sizes(f.ub, 1, 65536, true, ubatches, &r.n_ubatches)) {
        rc = cli_usage_error(CMD, "-ub: '%s' is not a comma-separated list of distinct micro-batch sizes (1..65536)",
                             f.ub);
        goto done;
    }
    r.batches = batches;
    r.ubatches = ubatches;
    r.seed = 1234;
    if (f.seed && !cli_parse_u64(f.seed, &r.seed)) {
        rc = cli_usage_error(CMD, "--seed: '%s' is not a non-negative integer", f.seed);
        goto done;
    }
    bench_report_fn report = report_by_name(f.o), report_err = f.oe ? report_by_name(f.oe) : NULL;
    if (!report) {
        rc = cli_usage_error(CMD, "-o: '%s' is not md, csv or json", f.o);
        goto done;
    }
    if (f.oe && !report_err) {
        rc = cli_usage_error(CMD, "-oe: '%s' is not md, csv or json", f.oe);
        goto done;
    }
    if (f.np && f.single) {
        rc = cli_usage_error(CMD, "%s is a flag of the single-sequence tests, not of the batched mode (-np)", f.single);
        goto done;
    }
    if (!f.np && (f.npp || f.ntg || f.logits)) {
        rc = cli_usage_error(CMD, "%s needs -np (the parallel sequences of the batched mode)",
                             f.npp ? "-npp" : f.ntg ? "-ntg" : "--logits");
        goto done;
    }
    if (!f.np && (rc = build_tests(&f, &r)) != ST_EXIT_OK) goto done;
    rc = ST_EXIT_USAGE;

    /* ---- shared model flags, then one layout policy per --pad-weights value ---- */
    cli_model_setup setup;
    if ((rc = cli_model_setup_resolve(CMD, &mf, &setup)) != ST_EXIT_OK) goto done;
    rc = ST_EXIT_USAGE;
    if (f.pad) {
        if (!split_append(f.pad, policy_names, &n_policy_names, BENCH_MAX_LIST)) {
            rc = cli_usage_error(CMD, "--pad-weights: '%s' is not a comma-separated list of on, off, auto", f.pad);
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
    if (f.np) {
        command = join_command(argc, argv);
        rc = bench_batched(&f, &r, models, n_models, policy_names, n_policy_names, policies, &setup, command);
        goto done;
    }
    r.models = (const char **)models;
    r.n_models = n_models;
    r.policies = (const char **)policy_names;
    r.n_policies = n_policy_names;
    r.compare = f.compare;
    if ((f.compare || f.chart) && !bench_can_compare(&r)) {
        rc = cli_usage_error(CMD, "%s compares padding on with off: list both (--pad-weights on,off or on,off,auto)",
                             f.compare ? "--compare" : "--chart");
        goto done;
    }
    /* the chart is written after the measurement: a target it cannot replace is reported first */
    if (f.chart && st_atomic_file_check(f.chart, &err) != ST_OK) {
        rc = cli_usage_error(CMD, "--chart: %s", err.message);
        goto done;
    }
    if ((rc = check_contexts(&r, models, n_models, !f.oe)) != ST_EXIT_OK) goto done;

    /* ---- measure ---- */
    rc = ST_EXIT_FAILURE;
    const size_t n_samples =
        (size_t)n_models * (size_t)bench_n_settings(&r) * (size_t)r.n_tests * (size_t)r.reps;
    r.loads = calloc((size_t)n_models * (size_t)n_policy_names, sizeof(bench_load));
    r.seconds = calloc(n_samples, sizeof(double));
    r.wall = calloc(n_samples, sizeof(double));
    r.order = calloc(n_samples, sizeof(int64_t));
    if (f.profile) /* zeroed: empty profiles */
        r.profiles = calloc((size_t)n_models * (size_t)bench_n_settings(&r) * (size_t)r.n_tests, sizeof(st_profile));
    command = join_command(argc, argv);
    if (!r.loads || !r.seconds || !r.wall || !r.order || !command || (f.profile && !r.profiles)) {
        st_error_set(&err, ST_ERROR_NOMEM, "out of memory");
        cli_fail(CMD, &err);
        goto done;
    }
    r.argv = command;
    const time_t now = time(NULL);
    struct tm utc;
    strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &utc));
    r.date = date;
    if (cli_backend_init(&setup, &backend, &err) != ST_OK) {
        cli_fail(CMD, &err);
        goto done;
    }
    r.device = backend->device;
    r.backend = st_backend_name(setup.backend);
    r.cpu_path = st_backend_cpu_path_name(backend);
    r.threads = setup.backend == ST_BACKEND_CPU ? st_cpu_get_threads() : 0;
    r.kv_type = st_type_name(setup.kv_type);
    r.weights = setup.load.weights_type == ST_TYPE_COUNT ? "as stored" : st_type_name(setup.load.weights_type);
    const bool tty = isatty(STDERR_FILENO) == 1;
    for (int im = 0; im < n_models; im++) {
        if (bench_run_model(&r, im, backend, &setup, policies, tty, &err) != ST_OK) {
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
    if (f.chart && bench_chart_svg(f.chart, &r, &err) != ST_OK) {
        fprintf(stderr, "stride %s: writing the chart: %s\n", CMD, err.message);
        goto done;
    }
    rc = ST_EXIT_OK;
done:
    st_backend_free(backend);
    free(policies);
    free(command);
    free(r.tests);
    free(r.loads);
    free(r.seconds);
    free(r.wall);
    free(r.order);
    for (size_t i = 0; r.profiles && i < (size_t)n_models * (size_t)bench_n_settings(&r) * (size_t)r.n_tests; i++)
        st_profile_free(&r.profiles[i]);
    free(r.profiles);
    free(r.fits);
    for (int i = 0; i < n_models; i++) free(models[i]);
    for (int i = 0; i < n_policy_names; i++) free(policy_names[i]);
    return rc;
}
