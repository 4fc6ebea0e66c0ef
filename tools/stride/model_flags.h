/* The flags every command that loads a model shares (backend, threads, layout policy,
 * weight conversion, KV cache type, tensor parallelism), parsed, checked and applied in
 * one place. */
#ifndef STRIDE_TOOL_MODEL_FLAGS_H
#define STRIDE_TOOL_MODEL_FLAGS_H

#include <stdbool.h>

#include "stride/backend.h"
#include "stride/cpu_path.h"
#include "stride/model.h"

#define CLI_MODEL_FLAGS_HELP                                                                           \
    "  --kv-type f16|f32        KV cache type (default f16)\n"                                          \
    "  --backend cpu|cuda       (default: cuda when a GPU is present, else cpu)\n"                      \
    "  --exact                  the CPU reference ops instead of the fast path (f32 activations\n"      \
    "                           throughout; implies --backend cpu)\n"                                   \
    "  -t, --threads N          CPU threads (default: all cores)\n"                                     \
    "  --pad-weights on|off|auto  weight layout policy (default auto)\n"                                \
    "  --weights f16|bf16       convert quantized weights to this type at load (the padded\n"          \
    "                           layout then applies to them; default: keep them quantized)\n"          \
    CLI_TP_FLAG_HELP

/* -tp, shared with bench's own help text. */
#define CLI_TP_FLAG_HELP                                                                               \
    "  -tp, --tensor-parallel N  split the model into N shards (attention heads, FFN columns,\n"        \
    "                           vocabulary rows; default 1). This build simulates the shards on\n"    \
    "                           the CPU backend (their partial outputs summed where GPUs would\n"    \
    "                           all-reduce); N GPUs over NCCL are not driven yet (`stride version`\n" \
    "                           says whether NCCL is linked)\n"

typedef struct cli_model_flags {
    const char *backend, *threads, *pad_weights, *weights, *kv_type, *tensor_parallel;
    bool exact;
} cli_model_flags;

/* True when argv[*i] is one of the shared flags: its value is stored and *i advanced
 * (*missing set when the value is absent). */
bool cli_take_model_flag(int argc, char **argv, int *i, cli_model_flags *f, bool *missing);

typedef struct cli_model_setup {
    st_backend_kind backend;
    st_cpu_path cpu_path; /* the CPU backend's ops: fast, or the reference with --exact */
    st_model_load_options load; /* policy, weight type and shards; the caller sets n_ctx */
    st_type kv_type;
} cli_model_setup;

/* Checks every shared flag (and the environment the policy reads) and applies --threads.
 * On a bad value prints the usage error and returns ST_EXIT_USAGE; else ST_EXIT_OK. */
int cli_model_setup_resolve(const char *cmd, const cli_model_flags *f, cli_model_setup *out);

/* Creates the backend the flags chose (on the CPU: the path too). */
st_status cli_backend_init(const cli_model_setup *setup, st_backend **out, st_error *err);

/* "cpu avx512", "cpu exact", "cuda": the backend and, on the CPU, its ops. */
void cli_backend_label(const st_backend *b, char *buf, size_t size);

/* Creates the backend and loads the model, with progress on a terminal. *seconds is the
 * time both took. On failure *backend and *model are NULL. */
st_status cli_model_open(const char *path, cli_model_setup *setup, st_backend **backend, st_model **model,
                         double *seconds, st_error *err);

#endif
