/*
 * stride: tokenizers built from a GGUF vocabulary.
 *
 * tokenizer.ggml.model selects the family: "llama" (SentencePiece-style: scores, byte
 * fallback, space prefix) or "gpt2" (byte-level BPE: merges, with the pre-tokenizer
 * splitting selected by tokenizer.ggml.pre: llama3 ("llama-bpe"), qwen2, ...).
 * Special tokens are matched in the text leftmost-longest (as Hugging Face tokenizers
 * matches added tokens): USER_DEFINED pieces always, CONTROL/UNKNOWN ones only with
 * parse_special. BOS/EOS handling follows the metadata (add_bos_token, add_eos_token).
 * SentencePiece vocabularies with add_space_prefix get one U+2581 in front of text that
 * starts with plain text (none after a special token). Implementation: src/tokenizer/.
 */
#ifndef STRIDE_TOKENIZER_H
#define STRIDE_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stride/gguf.h"
#include "stride/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_tokenizer st_tokenizer;

/* Builds the tokenizer; the strings are copied, f may be closed afterwards.
 * ST_ERROR_UNSUPPORTED for a tokenizer family or pre-tokenizer stride does not know. */
st_status st_tokenizer_from_gguf(const st_gguf_file *f, st_tokenizer **out, st_error *err);
void st_tokenizer_free(st_tokenizer *t);

int64_t st_tokenizer_n_vocab(const st_tokenizer *t);
int32_t st_tokenizer_bos(const st_tokenizer *t); /* -1 when none */
int32_t st_tokenizer_eos(const st_tokenizer *t); /* -1 when none */
/* End of generation: EOS, EOT and the like (e.g. gemma's <end_of_turn>). */
bool st_tokenizer_is_eog(const st_tokenizer *t, int32_t id);

/* Encodes len bytes of UTF-8 text. add_special: add BOS/EOS as the metadata says.
 * parse_special: text like "<start_of_turn>" becomes its special token (otherwise it is
 * tokenized as plain text). *ids is malloc'd; the caller frees it. */
st_status st_tokenizer_encode(const st_tokenizer *t, const char *text, size_t len, bool add_special,
                              bool parse_special, int32_t **ids, int64_t *n_ids, st_error *err);

/* The bytes of one token (byte tokens decoded, the SentencePiece space marker turned back
 * into a space, byte-level BPE characters mapped back to bytes). Control tokens give ""
 * unless render_special. Returns the number of bytes, which may exceed size (then nothing
 * beyond size is written). A piece may be a partial UTF-8 sequence. */
size_t st_tokenizer_token_to_bytes(const st_tokenizer *t, int32_t id, bool render_special, char *buf,
                                   size_t size);

/* Streaming decode: feed token ids, get back only complete UTF-8 characters, holding an
 * incomplete sequence until the token that completes it (invalid bytes become U+FFFD). */
typedef struct st_detokenizer {
    const st_tokenizer *tok;
    bool first;         /* strip the SentencePiece leading space of the first piece when the
                           vocabulary adds a space prefix */
    char pending[8];
    size_t n_pending;
} st_detokenizer;

void st_detokenizer_init(st_detokenizer *d, const st_tokenizer *t);
/* Appends the text of `id` to out (NUL-terminated, at most size-1 bytes); returns the bytes
 * written. Give room for the longest piece plus 8 bytes (held bytes and U+FFFD); what does
 * not fit is dropped. */
size_t st_detokenizer_push(st_detokenizer *d, int32_t id, char *out, size_t size);
/* Flushes what is pending (an incomplete sequence becomes U+FFFD). */
size_t st_detokenizer_flush(st_detokenizer *d, char *out, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_TOKENIZER_H */
