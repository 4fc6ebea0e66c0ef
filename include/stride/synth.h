/*
 * stride: synthetic GGUF models with the exact shapes of real ones.
 *
 * A preset names a real model (its tensor names, shapes and metadata as llama.cpp's
 * converter writes them) or a tiny model of the same architecture for tests. Weights are
 * random but scaled so activations stay in a realistic range; the vocabulary is a valid
 * SentencePiece-style one (tokens, scores, token types, byte-fallback tokens) of the
 * model's real size, so that any GGUF runtime loads the file.
 */
#ifndef STRIDE_SYNTH_H
#define STRIDE_SYNTH_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "stride/arch.h"
#include "stride/status.h"
#include "stride/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_synth_preset {
    const char *name;        /* "llama-3.2-1b", "tiny-llama", ... */
    const char *description; /* "Llama-3.2-1B shapes", ... */
    st_arch arch;
    int64_t n_vocab;
    int64_t n_embd;
    int64_t n_layer;
    int64_t n_head;
    int64_t n_head_kv;
    int64_t head_dim;
    int64_t n_ff;            /* dense FFN width; per-expert width for MoE */
    int64_t n_expert;        /* 0 for dense */
    int64_t n_expert_used;
    int64_t n_rot;           /* rotary dimensions (partial rotary when < head_dim) */
    int64_t n_ctx_train;
    double rope_freq_base;
    double rope_freq_base_swa; /* gemma3 sliding-window layers; 0 when unused */
    double rms_eps;
    int64_t sliding_window;    /* 0 when none */
    int64_t sliding_window_pattern; /* every Nth layer is global (gemma3); 0 when none */
    bool tied_output;          /* no output.weight: the output reads token_embd */
    bool rope_freqs;           /* llama3-style rope_freqs.weight factors */
    bool long_rope;            /* phi3 rope_factors_long/short */
    int64_t n_ctx_orig;        /* original context of the rope scaling (llama3 rope_freqs,
                                  phi3 long rope); 0 when unused */
} st_synth_preset;

uint64_t st_synth_n_presets(void);
const st_synth_preset *st_synth_get_preset(uint64_t i);
const st_synth_preset *st_synth_find_preset(const char *name);

/* Tensor count and total tensor bytes (packed, without alignment padding) that
 * st_synth_write produces for p with matrices and embeddings of weight_type. */
void st_synth_preset_size(const st_synth_preset *p, st_type weight_type, uint64_t *n_tensors,
                          uint64_t *n_bytes);

/* Whether st_synth_write writes matrices and embeddings of type t (F32, F16, BF16, Q8_0). */
bool st_synth_weight_type_ok(st_type t);

typedef struct st_synth_options {
    st_type weight_type;  /* F32, F16, BF16 or Q8_0: matrices and embeddings; norms stay F32 */
    uint64_t seed;
    /* Called now and then while writing, for progress display; may be NULL. */
    void (*progress)(void *ctx, uint64_t bytes_done, uint64_t bytes_total);
    void *progress_ctx;
    /* May be NULL. Checked between chunks (every few MiB): once non-zero the write stops,
     * nothing is left at the path (ST_ERROR_IO, "cancelled"). A program's SIGINT handler
     * sets it; the library installs no handlers. */
    const volatile sig_atomic_t *cancel;
} st_synth_options;

/* Writes preset p to path, streaming (memory use is independent of model size). The file
 * appears only when complete (file_io.h): a failure or cancel leaves nothing at path and an
 * existing file there unchanged; a path that is not a regular file (directory, FIFO,
 * device) is refused. */
st_status st_synth_write(const st_synth_preset *p, const st_synth_options *opt, const char *path,
                         st_error *err);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_SYNTH_H */
