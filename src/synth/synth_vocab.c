/*
 * The synthetic vocabulary: a valid SentencePiece-style ("llama") tokenizer of the
 * model's real size.
 *
 *   id 0            "<unk>"                 UNKNOWN (2)
 *   id 1, 2         "<s>", "</s>"           CONTROL (3)
 *   id 3..258       "<0x00>".."<0xFF>"      BYTE (6): byte fallback for any text
 *   id 259..        normal pieces           NORMAL (1), scores decreasing
 *
 * The normal pieces are "▁" (the SentencePiece space), then letters and letter groups in
 * bijective base 26 ("a".."z", "aa", ...), each once with and once without a leading
 * "▁": all distinct, deterministic, and plain lower-case text tokenizes into them.
 * Real Gemma vocabularies put <bos>/<eos> elsewhere; every preset uses this one layout,
 * which only needs to be valid.
 */
#include <stdlib.h>
#include <string.h>

#include "synth_internal.h"

/* GGUF token types (llama.cpp's llama_token_type). */
enum { TOKEN_NORMAL = 1, TOKEN_UNKNOWN = 2, TOKEN_CONTROL = 3, TOKEN_BYTE = 6 };

static const char SPACE_MARK[] = "\xE2\x96\x81"; /* U+2581 LOWER ONE EIGHTH BLOCK */

int st_synth_format_piece(uint64_t i, char *buf) {
    if (i == 0) {
        memcpy(buf, SPACE_MARK, sizeof(SPACE_MARK));
        return (int)(sizeof(SPACE_MARK) - 1);
    }
    uint64_t m = i - 1;
    int n = 0;
    if (m % 2 == 0) {
        memcpy(buf, SPACE_MARK, sizeof(SPACE_MARK) - 1);
        n = (int)(sizeof(SPACE_MARK) - 1);
    }
    /* bijective base 26 of m/2: 0 -> "a", 25 -> "z", 26 -> "aa", ... */
    char rev[16];
    int k = 0;
    uint64_t v = m / 2 + 1;
    while (v > 0) {
        v -= 1;
        rev[k++] = (char)('a' + v % 26);
        v /= 26;
    }
    while (k > 0) buf[n++] = rev[--k];
    buf[n] = '\0';
    ST_ASSERT(n < ST_SYNTH_PIECE_MAX);
    return n;
}

st_status st_synth_write_vocab(st_gguf_writer *w, const st_synth_preset *p, st_error *err) {
    ST_ASSERT(p->n_vocab > ST_SYNTH_N_FIXED_TOKENS);
    uint64_t n = (uint64_t)p->n_vocab;
    /* All strings in one arena: at most ST_SYNTH_PIECE_MAX bytes each. */
    char *arena = malloc(n * ST_SYNTH_PIECE_MAX);
    const char **tokens = malloc(n * sizeof(*tokens));
    float *scores = malloc(n * sizeof(*scores));
    int32_t *types = malloc(n * sizeof(*types));
    st_status st = ST_OK;
    if (!arena || !tokens || !scores || !types) {
        st = st_error_set(err, ST_ERROR_NOMEM, "synth: out of memory for a %llu-token vocabulary",
                          (unsigned long long)n);
        goto done;
    }
    for (uint64_t i = 0; i < n; i++) {
        char *s = arena + i * ST_SYNTH_PIECE_MAX;
        tokens[i] = s;
        scores[i] = 0.0f;
        if (i == ST_SYNTH_TOKEN_UNK) {
            strcpy(s, "<unk>");
            types[i] = TOKEN_UNKNOWN;
        } else if (i == ST_SYNTH_TOKEN_BOS) {
            strcpy(s, "<s>");
            types[i] = TOKEN_CONTROL;
        } else if (i == ST_SYNTH_TOKEN_EOS) {
            strcpy(s, "</s>");
            types[i] = TOKEN_CONTROL;
        } else if (i < ST_SYNTH_N_FIXED_TOKENS) {
            static const char hex[] = "0123456789ABCDEF";
            unsigned b = (unsigned)(i - ST_SYNTH_TOKEN_FIRST_BYTE);
            memcpy(s, "<0x", 3);
            s[3] = hex[b >> 4];
            s[4] = hex[b & 15];
            s[5] = '>';
            s[6] = '\0';
            types[i] = TOKEN_BYTE;
        } else {
            uint64_t j = i - ST_SYNTH_N_FIXED_TOKENS;
            st_synth_format_piece(j, s);
            /* like SentencePiece log-probabilities: shorter, earlier pieces score higher */
            scores[i] = -(float)j;
            types[i] = TOKEN_NORMAL;
        }
    }

    if ((st = st_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama", err))) goto done;
    if ((st = st_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, n, err))) goto done;
    if ((st = st_gguf_writer_set_arr(w, "tokenizer.ggml.scores", ST_GGUF_TYPE_FLOAT32, scores, n, err)))
        goto done;
    if ((st = st_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", ST_GGUF_TYPE_INT32, types, n, err)))
        goto done;
    if ((st = st_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", ST_SYNTH_TOKEN_BOS, err))) goto done;
    if ((st = st_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", ST_SYNTH_TOKEN_EOS, err))) goto done;
    if ((st = st_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", ST_SYNTH_TOKEN_UNK, err))) goto done;
    if ((st = st_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", ST_SYNTH_TOKEN_UNK, err))) goto done;
    if ((st = st_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true, err))) goto done;
    if ((st = st_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false, err))) goto done;
    /* Gemma's converter turns the SentencePiece space prefix off. */
    if (p->arch == ST_ARCH_GEMMA3 &&
        (st = st_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", false, err)))
        goto done;

done:
    free(arena);
    free(tokens);
    free(scores);
    free(types);
    return st;
}
