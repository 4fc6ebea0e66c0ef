/* stride run --parallel N: N copies of the prompt through the engine (stride/engine.h),
 * seeds seed, seed + 1, ..., printed one after another: a smoke test of the batch path. */
#ifndef STRIDE_TOOL_RUN_PARALLEL_H
#define STRIDE_TOOL_RUN_PARALLEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stride/model.h"
#include "stride/sample.h"
#include "stride/tokenizer.h"

typedef struct run_parallel_args {
    st_model *model;
    const st_tokenizer *tok;  /* text mode; NULL: ids in and out */
    const int32_t *prompt;
    int64_t n_prompt;
    const char *prompt_text;  /* --echo: printed before each sequence's text, else NULL */
    size_t prompt_len;
    int32_t n_parallel;
    int64_t n_predict;        /* -1: until end of generation or a full context */
    bool ignore_eos;
    st_sampler_params sampling; /* sequence i gets seed sampling.seed + i */
    int64_t n_ctx;            /* per sequence */
    int64_t n_ubatch;         /* tokens a step */
    st_type kv_type;
    double t_load;
    const char *device_name;
    bool padded;
} run_parallel_args;

/* Runs the sequences and prints them; timings and the engine's sizes on stderr. */
st_status run_parallel(const run_parallel_args *a, st_error *err);

#endif
