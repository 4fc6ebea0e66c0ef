/*
 * libFuzzer target for the model loader past the GGUF reader: the hyperparameters and the
 * tensor table (SPEC.md section 7; model.h's st_model_validate promises that a model it
 * accepts reaches no assert in the ops).
 *
 * Each input is parsed with st_gguf_open_memory (the reader has its own target,
 * fuzz_gguf.c; inputs it rejects are only checked for a message here) and loaded with
 * st_model_load_gguf on the CPU backend, the padded layout on for even-sized inputs and
 * off for odd ones, so both layouts are planned and uploaded. A refused model must come
 * with a failure status and a one-line message. An accepted one must run: its weights
 * are then set to zero (rope factors to one, since they divide), which keeps every value
 * of the forward pass finite whatever the file held, and a session evaluates a prompt of
 * three tokens with all logits and one decode step, which must succeed with finite logits.
 * An abort anywhere (an assert in the ops, a sanitizer report) is a finding: the validator
 * let through a model the forward pass cannot handle.
 *
 * Seeds: fuzz/corpus-model, valid micro models of the five architectures
 * (tests/data/make_hostile_models.py --seeds). The same file is linked into
 * tests/unit/test_model_fuzz.c, which replays the seeds and deterministic mutations of
 * them through LLVMFuzzerTestOneInput under plain ctest.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stride/backend.h"
#include "stride/cpu_path.h"
#include "stride/cpu_ops.h"
#include "stride/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What the target saw, for the unit test that replays it. */
typedef struct st_fuzz_model_stats {
    unsigned long inputs, not_gguf, refused, ran;
} st_fuzz_model_stats;
st_fuzz_model_stats st_fuzz_model_stats_get(void);

static st_fuzz_model_stats stats;

st_fuzz_model_stats st_fuzz_model_stats_get(void) { return stats; }

static void fuzz_fail(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_model: loader contract broken: %s (%s)\n", what, detail ? detail : "");
    abort();
}

#define FUZZ_CHECK(cond, detail) ((cond) ? (void)0 : fuzz_fail(#cond, detail))

static st_backend *cpu_backend(void) {
    static st_backend *b = NULL;
    if (!b) {
        st_cpu_set_threads(1); /* one input at a time is the fuzzer's parallelism */
        st_error err = {0};
        /* the reference ops: the fuzzer's target is the loader and what it lets through; the
         * fast path's ops are checked against them, under ASan/UBSan, by the unit tests */
        if (st_backend_cpu_init_path(ST_CPU_PATH_EXACT, &b, &err) != ST_OK) fuzz_fail("CPU backend init", err.message);
    }
    return b;
}

static void check_refusal(st_status st, const st_error *err) {
    FUZZ_CHECK(st != ST_OK, err->message);
    FUZZ_CHECK(err->status == st, err->message);
    FUZZ_CHECK(err->message[0] != '\0', "empty message");
    FUZZ_CHECK(memchr(err->message, '\0', sizeof(err->message)) != NULL, "unterminated message");
    FUZZ_CHECK(strchr(err->message, '\n') == NULL, err->message);
}

/* Zero weights, unit rope factors: every activation stays finite. */
static void neutralise_weights(st_model *m) {
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        st_tensor *t = &m->tensors[i];
        memset(t->data, 0, st_tensor_nbytes(t));
        if (m->plan.entries[i].role == ST_ROLE_ROPE_FACTORS) {
            float *v = t->data; /* f32 [n_rot/2], validated */
            for (int64_t k = 0; k < t->ne[0]; k++) v[k] = 1.0f;
        }
    }
}

static void run_model(st_model *m) {
    st_session_options so = st_session_options_default();
    so.n_ctx = 4;
    so.n_ubatch = 2;
    st_session *s = NULL;
    st_error err = {0};
    if (st_session_init(m, &so, &s, &err) != ST_OK) {
        check_refusal(err.status, &err); /* only a clean allocation failure is acceptable */
        return;
    }
    const int64_t V = m->hp.n_vocab;
    const int32_t prompt[3] = {0, (int32_t)(1 % V), (int32_t)(V - 1)};
    float *logits = malloc((size_t)3 * (size_t)V * sizeof(float));
    FUZZ_CHECK(logits != NULL, "logits");
    if (st_session_eval(s, prompt, 3, true, logits, &err) != ST_OK) fuzz_fail("eval of a validated model", err.message);
    for (int64_t i = 0; i < 3 * V; i++) FUZZ_CHECK(isfinite(logits[i]), "a logit is not finite");
    const float *step = NULL;
    if (st_session_decode(s, (int32_t)(2 % V), &step, &err) != ST_OK)
        fuzz_fail("decode step of a validated model", err.message);
    for (int64_t i = 0; i < V; i++) FUZZ_CHECK(isfinite(step[i]), "a decode logit is not finite");
    free(logits);
    st_session_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    stats.inputs++;
    /* exact-size heap copy, so that a read past the end is an ASan report */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    st_error err = {0};
    st_gguf_file *f = NULL;
    st_status st = st_gguf_open_memory(copy, size, &f, &err);
    if (st != ST_OK) {
        check_refusal(st, &err);
        stats.not_gguf++;
        free(copy);
        return 0;
    }
    st_model_load_options o = {
        .policy = {.mode = size % 2 == 0 ? ST_PAD_MODE_ON : ST_PAD_MODE_OFF,
                   .mode_source = "fuzz",
                   .alias = ST_LAYOUT_DEFAULT_ALIAS,
                   .pad = ST_LAYOUT_DEFAULT_PAD},
        .n_ctx = 4,
        .weights_type = ST_TYPE_COUNT,
    };
    st_model *m = NULL;
    st = st_model_load_gguf(f, "fuzz input", cpu_backend(), &o, &m, &err); /* takes f over */
    if (st != ST_OK) {
        FUZZ_CHECK(m == NULL, "a model on failure");
        check_refusal(st, &err);
        stats.refused++;
    } else {
        neutralise_weights(m);
        run_model(m);
        st_model_free(m);
        stats.ran++;
    }
    free(copy);
    return 0;
}
