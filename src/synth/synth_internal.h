/*
 * synth internals: the tensor list of a preset, the synthetic vocabulary, and the
 * constants of the rope scalings the presets use.
 */
#ifndef STRIDE_SYNTH_INTERNAL_H
#define STRIDE_SYNTH_INTERNAL_H

#include <stdint.h>

#include "stride/gguf.h"
#include "stride/synth.h"

/* Llama 3.x rope scaling ("rope_type": "llama3" in the HF config): the same for every
 * Llama 3.2 model; the original context is the preset's n_ctx_orig. */
#define ST_SYNTH_LLAMA3_FACTOR 32.0
#define ST_SYNTH_LLAMA3_LOW_FREQ_FACTOR 1.0
#define ST_SYNTH_LLAMA3_HIGH_FREQ_FACTOR 4.0

/* Special tokens of the synthetic SentencePiece-style vocabulary, then 256 byte tokens
 * "<0x00>".."<0xFF>", then normal pieces. */
#define ST_SYNTH_TOKEN_UNK 0
#define ST_SYNTH_TOKEN_BOS 1
#define ST_SYNTH_TOKEN_EOS 2
#define ST_SYNTH_TOKEN_FIRST_BYTE 3
#define ST_SYNTH_N_FIXED_TOKENS (ST_SYNTH_TOKEN_FIRST_BYTE + 256)

/* How a tensor's values are drawn. */
typedef enum st_synth_fill {
    ST_SYNTH_FILL_MATRIX,      /* uniform, variance 1/ne[0]: y = W x keeps unit scale */
    ST_SYNTH_FILL_NORM,        /* 1 + uniform(-0.1, 0.1) */
    ST_SYNTH_FILL_ROPE_FREQS,  /* llama3 scaling factors, computed (not random) */
    ST_SYNTH_FILL_ROPE_LONG,   /* phi3 long-context factors, computed */
    ST_SYNTH_FILL_ROPE_SHORT,  /* phi3 short-context factors, computed */
} st_synth_fill;

#define ST_SYNTH_NAME_MAX 64

typedef struct st_synth_tensor {
    char name[ST_SYNTH_NAME_MAX];
    st_type type;
    uint32_t n_dims;
    int64_t ne[3];
    st_synth_fill fill;
} st_synth_tensor;

/* Builds the tensor list of p (llama.cpp's names and shapes) into a malloc'd array that
 * the caller frees. */
st_status st_synth_build_tensors(const st_synth_preset *p, st_type weight_type,
                                 st_synth_tensor **out, uint64_t *n_out, st_error *err);

/* Adds tokenizer.ggml.* metadata for an n_vocab synthetic vocabulary. */
st_status st_synth_write_vocab(st_gguf_writer *w, const st_synth_preset *p, st_error *err);

/* Writes the bytes of piece i (0-based among the normal pieces) into buf (NUL-terminated);
 * returns its length. buf must hold ST_SYNTH_PIECE_MAX bytes. */
#define ST_SYNTH_PIECE_MAX 24
int st_synth_format_piece(uint64_t i, char *buf);

#endif /* STRIDE_SYNTH_INTERNAL_H */
