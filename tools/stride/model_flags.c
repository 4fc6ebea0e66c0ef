#include "model_flags.h"

#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "stride/cpu_ops.h"

bool cli_take_model_flag(int argc, char **argv, int *i, cli_model_flags *f, bool *missing) {
    if (strcmp(argv[*i], "--exact") == 0) {
        f->exact = true;
        return true;
    }
    return cli_take_value(argc, argv, i, "--backend", &f->backend, missing) ||
           cli_take_value(argc, argv, i, "-t", &f->threads, missing) ||
           cli_take_value(argc, argv, i, "--threads", &f->threads, missing) ||
           cli_take_value(argc, argv, i, "--pad-weights", &f->pad_weights, missing) ||
           cli_take_value(argc, argv, i, "--weights", &f->weights, missing) ||
           cli_take_value(argc, argv, i, "--kv-type", &f->kv_type, missing) ||
           cli_take_value(argc, argv, i, "-tp", &f->tensor_parallel, missing) ||
           cli_take_value(argc, argv, i, "--tensor-parallel", &f->tensor_parallel, missing);
}

int cli_model_setup_resolve(const char *cmd, const cli_model_flags *f, cli_model_setup *out) {
    memset(out, 0, sizeof(*out));
    uint64_t threads = 0;
    if (f->threads && (!cli_parse_u64(f->threads, &threads) || threads == 0 || threads > 4096))
        return cli_usage_error(cmd, "-t: '%s' is not a thread count", f->threads);
    out->kv_type = ST_TYPE_F16;
    if (f->kv_type && (!st_type_from_name(f->kv_type, &out->kv_type) ||
                       (out->kv_type != ST_TYPE_F16 && out->kv_type != ST_TYPE_F32)))
        return cli_usage_error(cmd, "--kv-type: '%s' is not f16 or f32", f->kv_type);
    out->load.weights_type = ST_TYPE_COUNT; /* keep as stored */
    if (f->weights && (!st_type_from_name(f->weights, &out->load.weights_type) ||
                       (out->load.weights_type != ST_TYPE_F16 && out->load.weights_type != ST_TYPE_BF16)))
        return cli_usage_error(cmd, "--weights: '%s' is not f16 or bf16", f->weights);
    uint64_t shards = 1;
    if (f->tensor_parallel && (!cli_parse_u64(f->tensor_parallel, &shards) || shards < 1 || shards > ST_TP_MAX_SHARDS))
        return cli_usage_error(cmd, "-tp: '%s' is not a number of shards (1 to %d)", f->tensor_parallel,
                               ST_TP_MAX_SHARDS);
    out->load.n_shards = (int)shards; /* whether the model splits so is checked when it loads */
    st_error err = {0};
    out->backend = st_backend_default();
    if ((f->backend && st_backend_parse(f->backend, &out->backend, &err) != ST_OK) ||
        st_layout_policy_resolve(&out->load.policy, f->pad_weights, NULL, NULL, &err) != ST_OK)
        return cli_usage_error(cmd, "%s", err.message);
    if (f->exact && f->backend && out->backend != ST_BACKEND_CPU)
        return cli_usage_error(cmd, "--exact runs the CPU reference ops: it cannot go with --backend %s", f->backend);
    if (f->exact) out->backend = ST_BACKEND_CPU;
    out->cpu_path = f->exact ? ST_CPU_PATH_EXACT : ST_CPU_PATH_FAST;
    if (threads) st_cpu_set_threads((int)threads);
    return ST_EXIT_OK;
}

st_status cli_backend_init(const cli_model_setup *setup, st_backend **out, st_error *err) {
    if (setup->backend == ST_BACKEND_CPU) return st_backend_cpu_init_path(setup->cpu_path, out, err);
    return st_backend_init(setup->backend, 0, out, err);
}

void cli_backend_label(const st_backend *b, char *buf, size_t size) {
    const char *path = st_backend_cpu_path_name(b);
    if (path)
        snprintf(buf, size, "%s %s", st_backend_name(b->device.backend), path);
    else
        snprintf(buf, size, "%s", st_backend_name(b->device.backend));
}

st_status cli_model_open(const char *path, cli_model_setup *setup, st_backend **backend, st_model **model,
                         double *seconds, st_error *err) {
    *backend = NULL;
    *model = NULL;
    double t0 = st_clock_seconds();
    cli_progress progress;
    cli_progress_begin(&progress, "loading");
    setup->load.progress = cli_progress_update;
    setup->load.progress_ctx = &progress;
    st_status s = cli_backend_init(setup, backend, err);
    if (s == ST_OK) s = st_model_load(path, *backend, &setup->load, model, err);
    cli_progress_end(&progress);
    if (s == ST_OK && (*model)->plan.auto_notice) fprintf(stderr, "stride: %s\n", (*model)->plan.auto_notice);
    setup->load.progress = NULL;
    setup->load.progress_ctx = NULL;
    if (s != ST_OK) {
        st_backend_free(*backend);
        *backend = NULL;
    }
    *seconds = st_clock_seconds() - t0;
    return s;
}
