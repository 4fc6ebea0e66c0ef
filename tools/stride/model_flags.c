#include "model_flags.h"

#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "stride/cpu_ops.h"

bool cli_take_model_flag(int argc, char **argv, int *i, cli_model_flags *f, bool *missing) {
    return cli_take_value(argc, argv, i, "--backend", &f->backend, missing) ||
           cli_take_value(argc, argv, i, "-t", &f->threads, missing) ||
           cli_take_value(argc, argv, i, "--threads", &f->threads, missing) ||
           cli_take_value(argc, argv, i, "--pad-weights", &f->pad_weights, missing) ||
           cli_take_value(argc, argv, i, "--weights", &f->weights, missing) ||
           cli_take_value(argc, argv, i, "--kv-type", &f->kv_type, missing);
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
    st_error err = {0};
    out->backend = st_backend_default();
    if ((f->backend && st_backend_parse(f->backend, &out->backend, &err) != ST_OK) ||
        st_layout_policy_resolve(&out->load.policy, f->pad_weights, NULL, NULL, &err) != ST_OK)
        return cli_usage_error(cmd, "%s", err.message);
    if (threads) st_cpu_set_threads((int)threads);
    return ST_EXIT_OK;
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
    st_status s = st_backend_init(setup->backend, 0, backend, err);
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
