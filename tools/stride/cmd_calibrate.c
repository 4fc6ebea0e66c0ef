/* stride calibrate [-m MODEL ...] [--preset NAME ...] [--all-presets]: times each weight
 * shape packed vs padded on this device, prints the table and writes the cache that
 * `--pad-weights auto` reads (method, rule and cache format: stride/calibrate.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "model_flags.h"
#include "commands.h"
#include "stride/calibrate.h"
#include "stride/cpu_ops.h"
#include "stride/synth.h"

static const char *CMD = "calibrate";

#define MAX_SOURCES 64
#define USED_BY_MAX 96

static void usage(FILE *out) {
    fprintf(out,
            "usage: stride calibrate [-m MODEL ...] [--preset NAME ...] [--all-presets] [options]\n\n"
            "Times every distinct weight shape (dtype, N x K) that the padded layout applies to, packed\n"
            "vs padded, at decode (M = 1) and at a prefill batch, with weights streaming from memory;\n"
            "decides per shape, prints the table and writes the per-device cache that\n"
            "`--pad-weights auto` reads. Without -m or --preset: the shapes of every synth preset\n"
            "(no model file is written).\n\n"
            "options:\n"
            "  -m, --model FILE         a model's shapes (repeatable)\n"
            "  --preset NAME            a synth preset's shapes (repeatable; `stride synth --list`)\n"
            "  --all-presets            every synth preset's shapes\n"
            "  --type f16|bf16|f32      weight type of the preset shapes (default f16)\n"
            "  --weights f16|bf16       plan quantized model weights as converted to this type\n"
            "  --backend cpu|cuda       (default: cuda when a GPU is present, else cpu)\n"
            "  --exact                  time the CPU reference ops instead of the fast path\n"
            "  -t, --threads N          CPU threads (default: all cores)\n"
            "  --prefill-batch M        prefill batch (default 512 on a GPU, 32 on the CPU)\n"
            "  -r, --reps N             packed/padded pairs per batch and shape (default %d)\n"
            "  --budget SECONDS         bound the measuring by lowering the pairs (to %d at least)\n"
            "  --llc MIB                the last-level cache the weight pools must exceed (default:\n"
            "                           the device's; 64 MiB when it does not say)\n"
            "  --no-save                print the table only, leave the cache as it is\n\n"
            "decision per shape: pad when padded is faster by more than max(2 x noise, 1%%) on the\n"
            "mean of the decode and prefill time ratios, and neither loses more than 2%%.\n\n"
            "environment: STRIDE_ROW_ALIAS, STRIDE_ROW_PAD (the geometry, part of the cache key),\n"
            "XDG_CACHE_HOME (the cache goes to $XDG_CACHE_HOME/stride, default ~/.cache/stride);\n"
            "STRIDE_CALIBRATE=0 keeps model loading from measuring (auto then uses the cache or\n"
            "the built-in table).\n",
            ST_CALIBRATE_DEFAULT_REPS, ST_CALIBRATE_MIN_REPS);
}

/* Which models or presets use each shape, for the table. */
typedef struct shape_users {
    char text[USED_BY_MAX];
} shape_users;

static void note_user(shape_users *u, const char *name) {
    size_t len = strlen(u->text);
    if (strstr(u->text, name)) return;
    if (len + strlen(name) + 3 >= sizeof(u->text)) {
        if (len + 4 < sizeof(u->text) && !strstr(u->text, "...")) strcat(u->text, " ...");
        return;
    }
    if (len) strcat(u->text, ", ");
    strcat(u->text, name);
}

/* Adds a model's (or preset's) shapes to the list, noting it as a user of each. */
static st_status merge_source(const char *name, const st_calib_shape_list *mine, st_calib_shape_list *shapes,
                              shape_users **users, st_error *err) {
    size_t before = shapes->n;
    for (size_t k = 0; k < mine->n; k++) {
        st_status s = st_calibrate_shapes_add(shapes, mine->v[k], err);
        if (s != ST_OK) return s;
    }
    shape_users *u = realloc(*users, (shapes->n ? shapes->n : 1) * sizeof(*u));
    if (!u) return st_error_set(err, ST_ERROR_NOMEM, "out of memory");
    *users = u;
    for (size_t k = before; k < shapes->n; k++) u[k].text[0] = '\0';
    for (size_t k = 0; k < mine->n; k++)
        for (size_t j = 0; j < shapes->n; j++)
            if (shapes->v[j].type == mine->v[k].type && shapes->v[j].n == mine->v[k].n && shapes->v[j].k == mine->v[k].k)
                note_user(&u[j], name);
    return ST_OK;
}

typedef struct progress_ctx {
    bool tty;
    const st_calib_shape *shapes;
    double t0;
} progress_ctx;

static void show_progress(void *ctx, uint64_t done, uint64_t total) {
    progress_ctx *p = ctx;
    if (!p->tty) return;
    if (done < total) {
        const st_calib_shape *s = &p->shapes[done];
        fprintf(stderr, "\rcalibrating: shape %" PRIu64 "/%" PRIu64 " (%s %lld x %lld), %.1f s   ", done + 1, total,
                st_type_name((uint32_t)s->type), (long long)s->n, (long long)s->k, st_clock_seconds() - p->t0);
    } else {
        fprintf(stderr, "\rcalibrating: %" PRIu64 " shapes in %.1f s                              \n", total,
                st_clock_seconds() - p->t0);
    }
    fflush(stderr);
}

/* "+3.1%" for a ratio padded/packed: the speed-up of padded. */
static void fmt_speedup(double ratio, char *buf, size_t size) {
    snprintf(buf, size, "%+.1f%%", ratio > 0 ? 100.0 * (1.0 / ratio - 1.0) : 0.0);
}

static void print_table(const st_backend *b, const st_calib_key *key, const st_calib_result *r, const shape_users *u,
                        size_t n, int64_t m, const st_calib_shape *shapes, const st_calib_options *opt) {
    const st_device_info *d = &b->device;
    size_t llc_bytes = 0;
    const char *llc_source = NULL;
    const size_t pool = st_calibrate_pool_bytes(b, key->pad, shapes, n, opt, &llc_bytes, &llc_source);
    char llc[32], pool_str[32];
    cli_format_bytes(llc_bytes, llc, sizeof(llc));
    cli_format_bytes(pool, pool_str, sizeof(pool_str));
    printf("device: %s (%s", d->name, st_backend_name(d->backend));
    if (d->driver_version || d->runtime_version) printf(", driver %d, runtime %d", d->driver_version, d->runtime_version);
    if (d->backend == ST_BACKEND_CPU) printf(", %d thread(s)", st_cpu_get_threads());
    printf("), last-level cache %s (%s); two weight pools of %s each\n", llc, llc_source, pool_str);
    printf("stride %s; alias %zu B, pad %zu B; decode M = 1, prefill M = %lld; times are per product (median)\n\n",
           key->stride_version, key->alias, key->pad, (long long)m);
    printf("| shape (N x K) | type | pairs | decode packed us | decode padded us | decode | prefill packed us | "
           "prefill padded us | prefill | gain +- noise | decision | why | used by |\n");
    printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|\n");
    for (size_t i = 0; i < n; i++) {
        const st_calib_result *x = &r[i];
        char dsp[24], psp[24];
        fmt_speedup(x->dec_ratio, dsp, sizeof(dsp));
        fmt_speedup(x->pre_ratio, psp, sizeof(psp));
        printf("| %lld x %lld | %s | %d | %.2f | %.2f | %s | %.2f | %.2f | %s | %+.1f%% +- %.1f%% | %s | %s | %s |\n",
               (long long)x->shape.n, (long long)x->shape.k, st_type_name((uint32_t)x->shape.type), x->reps,
               x->dec_packed_us,
               x->dec_padded_us, dsp, x->pre_packed_us, x->pre_padded_us, psp, 100.0 * x->verdict.gain,
               100.0 * x->verdict.noise, x->verdict.pad ? "pad" : "packed", x->verdict.why, u[i].text);
    }
    size_t n_pad = 0;
    for (size_t i = 0; i < n; i++) n_pad += r[i].verdict.pad;
    printf("\n%zu of %zu shapes padded. decode, prefill: speed-up of padded over packed (median of the paired "
           "runs); gain: their mean, +- its standard error\n",
           n_pad, n);
}

int st_cmd_calibrate(int argc, char **argv) {
    const char *models[MAX_SOURCES], *presets[MAX_SOURCES];
    int n_models = 0, n_presets = 0;
    cli_model_flags mf = {0}; /* --backend, -t, --weights (the layout, KV and -tp flags do not apply) */
    const char *type_name = NULL, *prefill = NULL, *reps_s = NULL, *budget_s = NULL, *llc_s = NULL;
    bool all_presets = false, save = true;
    for (int i = 1; i < argc; i++) {
        bool missing = false;
        const char *a = argv[i], *v = NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return ST_EXIT_OK;
        } else if (strcmp(a, "--all-presets") == 0) {
            all_presets = true;
        } else if (strcmp(a, "--no-save") == 0) {
            save = false;
        } else if (cli_take_value(argc, argv, &i, "-m", &v, &missing) ||
                   cli_take_value(argc, argv, &i, "--model", &v, &missing)) {
            if (missing) return cli_usage_error(CMD, "%s needs a value", a);
            if (n_models == MAX_SOURCES) return cli_usage_error(CMD, "at most %d models", MAX_SOURCES);
            models[n_models++] = v;
        } else if (cli_take_value(argc, argv, &i, "--preset", &v, &missing)) {
            if (missing) return cli_usage_error(CMD, "%s needs a value", a);
            if (n_presets == MAX_SOURCES) return cli_usage_error(CMD, "at most %d presets", MAX_SOURCES);
            presets[n_presets++] = v;
        } else if ((strcmp(a, "--pad-weights") != 0 && strcmp(a, "--kv-type") != 0 && strcmp(a, "-tp") != 0 &&
                    strcmp(a, "--tensor-parallel") != 0 && cli_take_model_flag(argc, argv, &i, &mf, &missing)) ||
                   cli_take_value(argc, argv, &i, "--type", &type_name, &missing) ||
                   cli_take_value(argc, argv, &i, "--prefill-batch", &prefill, &missing) ||
                   cli_take_value(argc, argv, &i, "-r", &reps_s, &missing) ||
                   cli_take_value(argc, argv, &i, "--reps", &reps_s, &missing) ||
                   cli_take_value(argc, argv, &i, "--budget", &budget_s, &missing) ||
                   cli_take_value(argc, argv, &i, "--llc", &llc_s, &missing)) {
            if (missing) return cli_usage_error(CMD, "%s needs a value", a);
        } else {
            return cli_usage_error(CMD, "unknown argument '%s'", a);
        }
    }
    if (n_models == 0 && n_presets == 0) all_presets = true;

    /* values */
    uint64_t u = 0;
    st_calib_options opt = {0};
    if (prefill) {
        if (!cli_parse_u64(prefill, &u) || u < 2 || u > 65536)
            return cli_usage_error(CMD, "--prefill-batch: '%s' is not a batch of 2..65536", prefill);
        opt.prefill_m = (int64_t)u;
    }
    if (reps_s) {
        if (!cli_parse_u64(reps_s, &u) || u < 1 || u > 255)
            return cli_usage_error(CMD, "-r: '%s' is not a repetition count of 1..255", reps_s);
        opt.reps = (int)u;
    }
    if (budget_s) {
        char *end = NULL;
        double s = strtod(budget_s, &end);
        if (!*budget_s || *end || !(s > 0.0) || s > 86400.0)
            return cli_usage_error(CMD, "--budget: '%s' is not a number of seconds", budget_s);
        opt.budget_s = s;
    }
    if (llc_s) {
        if (!cli_parse_u64(llc_s, &u) || u < 1 || u > 65536)
            return cli_usage_error(CMD, "--llc: '%s' is not a size of 1..65536 MiB", llc_s);
        opt.llc_bytes = (size_t)u << 20;
    }
    st_type preset_type = ST_TYPE_F16;
    if (type_name && (!st_type_from_name(type_name, &preset_type) ||
                      (preset_type != ST_TYPE_F16 && preset_type != ST_TYPE_BF16 && preset_type != ST_TYPE_F32)))
        return cli_usage_error(CMD, "--type: '%s' is not f16, bf16 or f32", type_name);
    cli_model_setup setup;
    int src = cli_model_setup_resolve(CMD, &mf, &setup);
    if (src != ST_EXIT_OK) return src;
    const st_type quantized_as = setup.load.weights_type;
    const st_layout_policy policy = setup.load.policy;
    st_error err = {0};
    for (int i = 0; i < n_presets; i++)
        if (!st_synth_find_preset(presets[i]))
            return cli_usage_error(CMD, "--preset: unknown preset '%s' (`stride synth --list`)", presets[i]);

    /* the shapes, and who uses them */
    st_calib_shape_list shapes = {0};
    shape_users *users = NULL;
    int rc = ST_EXIT_FAILURE;
    st_backend *b = NULL;
    st_calib_result *res = NULL;
    st_calib_table table = {0};

    for (int i = 0; i < n_models; i++) {
        st_gguf_file *f = NULL;
        if (st_gguf_open(models[i], &f, &err) != ST_OK) {
            rc = cli_fail(CMD, &err);
            goto done;
        }
        st_calib_shape_list mine = {0};
        st_status s = st_calibrate_shapes_of_gguf(f, policy.alias, policy.pad, quantized_as, &mine, &err);
        st_gguf_close(f);
        if (s == ST_OK) s = merge_source(cli_base_name(models[i]), &mine, &shapes, &users, &err);
        st_calibrate_shapes_free(&mine);
        if (s != ST_OK) {
            rc = cli_fail(CMD, &err);
            goto done;
        }
    }
    for (uint64_t i = 0; i < st_synth_n_presets(); i++) {
        const st_synth_preset *p = st_synth_get_preset(i);
        bool wanted = all_presets;
        for (int j = 0; j < n_presets; j++) wanted = wanted || strcmp(presets[j], p->name) == 0;
        if (!wanted) continue;
        st_calib_shape_list mine = {0};
        st_status s = st_calibrate_shapes_of_preset(p, preset_type, policy.alias, policy.pad, &mine, &err);
        if (s == ST_OK) s = merge_source(p->name, &mine, &shapes, &users, &err);
        st_calibrate_shapes_free(&mine);
        if (s != ST_OK) {
            rc = cli_fail(CMD, &err);
            goto done;
        }
    }
    if (shapes.n == 0) {
        fprintf(stderr,
                "stride %s: no weight shape has rows that are a multiple of the %zu B alias period: nothing can be "
                "padded, nothing to calibrate\n",
                CMD, policy.alias);
        rc = ST_EXIT_OK;
        goto done;
    }

    /* measure */
    if (cli_backend_init(&setup, &b, &err) != ST_OK) {
        rc = cli_fail(CMD, &err);
        goto done;
    }
    res = calloc(shapes.n, sizeof(*res));
    if (!res) {
        st_error_set(&err, ST_ERROR_NOMEM, "out of memory");
        rc = cli_fail(CMD, &err);
        goto done;
    }
    progress_ctx prog = {.tty = isatty(STDERR_FILENO) == 1, .shapes = shapes.v, .t0 = st_clock_seconds()};
    opt.progress = show_progress;
    opt.progress_ctx = &prog;
    show_progress(&prog, 0, shapes.n);
    if (st_calibrate_shapes(b, policy.alias, policy.pad, shapes.v, shapes.n, &opt, res, &err) != ST_OK) {
        if (prog.tty) fprintf(stderr, "\n");
        rc = cli_fail(CMD, &err);
        goto done;
    }
    st_calib_key key;
    st_calibrate_key_init(&key, &b->device, policy.alias, policy.pad);
    int64_t m = opt.prefill_m > 0 ? opt.prefill_m : st_calibrate_default_prefill_m(b->device.backend);
    print_table(b, &key, res, users, shapes.n, m, shapes.v, &opt);

    /* the cache: what a valid one holds, updated with these shapes */
    if (save) {
        char path[1100];
        if (st_calibrate_cache_path(&key, NULL, NULL, path, sizeof(path), &err) != ST_OK) {
            rc = cli_fail(CMD, &err);
            goto done;
        }
        st_calib_cache_state state;
        if (st_calibrate_cache_load(path, &key, &table, &state, &err) != ST_OK) {
            if (state != ST_CALIB_CACHE_MISSING)
                fprintf(stderr, "stride %s: cache %s: %s; rewritten\n", CMD, path, err.message);
            st_calibrate_table_init(&table, &key);
        }
        for (size_t i = 0; i < shapes.n; i++)
            if (st_calibrate_table_put(&table, &res[i], &err) != ST_OK) {
                rc = cli_fail(CMD, &err);
                goto done;
            }
        if (st_calibrate_cache_save(path, &table, &err) != ST_OK) {
            rc = cli_fail(CMD, &err);
            goto done;
        }
        printf("cache: %s (%zu shapes)\n", path, table.n);
    }
    rc = ST_EXIT_OK;
done:
    st_calibrate_table_free(&table);
    free(res);
    free(users);
    st_calibrate_shapes_free(&shapes);
    st_backend_free(b);
    return rc;
}
