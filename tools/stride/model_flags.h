/* The flags every command that loads a model shares (backend, threads, layout policy,
 * weight conversion, KV cache type), parsed, checked and applied in one place. */
#ifndef STRIDE_TOOL_MODEL_FLAGS_H
#define STRIDE_TOOL_MODEL_FLAGS_H

#include <stdbool.h>

#include "stride/backend.h"
#include "stride/model.h"

#define CLI_MODEL_FLAGS_HELP                                                                           \
    "  --kv-type f16|f32        KV cache type (default f16)\n"                                          \
    "  --backend cpu|cuda       (default: cuda when a GPU is present, else cpu)\n"                      \
    "  -t, --threads N          CPU threads (default: all cores)\n"                                     \
    "  --pad-weights on|off|auto  weight layout policy (default auto)\n"                                \
    "  --weights f16|bf16       convert quantized weights to this type at load (the padded\n"          \
    "                           layout then applies to them; default: keep them quantized)\n"

typedef struct cli_model_flags {
    const char *backend, *threads, *pad_weights, *weights, *kv_type;
} cli_model_flags;

/* True when argv[*i] is one of the shared flags: its value is stored and *i advanced
 * (*missing set when the value is absent). */
bool cli_take_model_flag(int argc, char **argv, int *i, cli_model_flags *f, bool *missing);

typedef struct cli_model_setup {
    st_backend_kind backend;
    st_model_load_options load; /* policy and weight type; the caller sets n_ctx */
    st_type kv_type;
} cli_model_setup;

/* Checks every shared flag (and the environment the policy reads) and applies --threads.
 * On a bad value prints the usage error and returns ST_EXIT_USAGE; else ST_EXIT_OK. */
int cli_model_setup_resolve(const char *cmd, const cli_model_flags *f, cli_model_setup *out);

/* Creates the backend and loads the model, with progress on a terminal. *seconds is the
 * time both took. On failure *backend and *model are NULL. */
st_status cli_model_open(const char *path, cli_model_setup *setup, st_backend **backend, st_model **model,
                         double *seconds, st_error *err);

#endif
