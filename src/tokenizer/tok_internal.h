/*
 * Tokenizer internals shared by the files of src/tokenizer.
 *
 *   tok_load.c     the vocabulary from GGUF metadata, special tokens, accessors
 *   tok_map.c      string -> id hash map (piece lookup), pair -> merge hash map
 *   tok_encode.c   st_tokenizer_encode: special-token partition, BOS/EOS, dispatch
 *   tok_spm.c      SentencePiece-style merging by piece score, byte fallback
 *   tok_bpe.c      byte-level BPE: the byte<->unicode mapping, merging by rank
 *   tok_pretok.c   the llama3 / qwen2 pre-tokenizer regexes, by hand
 *   tok_unicode.c  UTF-8 decoding and the Unicode class table (unicode_table.inc)
 *   tok_decode.c   token -> bytes, streaming detokenizer
 */
#ifndef STRIDE_TOK_INTERNAL_H
#define STRIDE_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stride/tokenizer.h"

/* GGUF token types (llama.cpp's llama_token_type). */
enum {
    ST_TOK_TYPE_UNDEFINED = 0,
    ST_TOK_TYPE_NORMAL = 1,
    ST_TOK_TYPE_UNKNOWN = 2,
    ST_TOK_TYPE_CONTROL = 3,
    ST_TOK_TYPE_USER_DEFINED = 4,
    ST_TOK_TYPE_UNUSED = 5,
    ST_TOK_TYPE_BYTE = 6,
};

typedef enum st_tok_kind {
    ST_TOK_KIND_SPM = 0, /* tokenizer.ggml.model = "llama" */
    ST_TOK_KIND_BPE = 1, /* tokenizer.ggml.model = "gpt2" */
} st_tok_kind;

typedef enum st_tok_pre {
    ST_TOK_PRE_NONE = 0,   /* SentencePiece: no regex split */
    ST_TOK_PRE_LLAMA3 = 1, /* digits in groups of 1..3 */
    ST_TOK_PRE_QWEN2 = 2,  /* like llama3, single digits */
} st_tok_pre;

/* ---- hash maps ------------------------------------------------------------------------ */

/* Piece text -> id. Open addressing over (offset, length) into the tokenizer's arena. */
typedef struct st_tok_map {
    int32_t *slots; /* id, or -1 for empty */
    uint64_t mask;  /* capacity - 1, capacity a power of two */
    const char *arena;
    const uint32_t *off;
    const uint32_t *len;
} st_tok_map;

st_status st_tok_map_init(st_tok_map *m, uint64_t n_keys, const char *arena, const uint32_t *off,
                          const uint32_t *len, st_error *err);
void st_tok_map_free(st_tok_map *m);
/* Inserts id (its text is arena+off[id], len[id]); a later id with the same text wins, as
 * in llama.cpp's and transformers' vocabulary maps. */
void st_tok_map_put(st_tok_map *m, int32_t id);
int32_t st_tok_map_get(const st_tok_map *m, const char *s, size_t n); /* -1 when absent */

/* (left id, right id) -> (rank, merged id), for byte-level BPE merges. */
typedef struct st_tok_pair {
    uint64_t key; /* (left << 32 | right) + 1; 0 = empty slot */
    int32_t rank;
    int32_t id;
} st_tok_pair;

typedef struct st_tok_pair_map {
    st_tok_pair *slots;
    uint64_t mask;
} st_tok_pair_map;

st_status st_tok_pair_map_init(st_tok_pair_map *m, uint64_t n_keys, st_error *err);
void st_tok_pair_map_free(st_tok_pair_map *m);
/* Keeps the first (best-ranked) entry for a pair. */
void st_tok_pair_map_put(st_tok_pair_map *m, int32_t left, int32_t right, int32_t rank, int32_t id);
const st_tok_pair *st_tok_pair_map_get(const st_tok_pair_map *m, int32_t left, int32_t right);

/* ---- the tokenizer ---------------------------------------------------------------------- */

#define ST_TOK_MAX_EOG 16

struct st_tokenizer {
    st_tok_kind kind;
    st_tok_pre pre;
    int64_t n_vocab;

    char *arena;   /* every piece's bytes, back to back */
    uint32_t *off; /* (n_vocab) */
    uint32_t *len; /* (n_vocab) */
    float *scores; /* (n_vocab), SPM merge priority; 0 when the file has none */
    int32_t *types; /* (n_vocab), ST_TOK_TYPE_* */
    st_tok_map pieces;

    /* Special tokens (CONTROL, USER_DEFINED, UNKNOWN) matched in the text, leftmost-longest.
     * special_lens[b] lists, longest first, the distinct lengths of the special tokens whose
     * text starts with byte b; special_map looks a candidate up. */
    st_tok_map special_map;
    uint32_t *special_lens[256];
    uint32_t n_special_lens[256];

    /* SPM: id of "<0xXX>". BPE: id of the single byte-level character of byte XX. -1: none. */
    int32_t byte_token[256];

    st_tok_pair_map merges; /* BPE only */
    bool ignore_merges;     /* BPE: a whole pre-token that is in the vocabulary is one token */

    int32_t bos, eos, unk;
    int32_t eog[ST_TOK_MAX_EOG];
    int n_eog;
    bool add_bos, add_eos, add_space_prefix;
};

static inline const char *st_tok_text(const st_tokenizer *t, int32_t id) { return t->arena + t->off[id]; }

/* A growing id array. */
typedef struct st_tok_ids {
    int32_t *v;
    int64_t n, cap;
} st_tok_ids;

st_status st_tok_ids_push(st_tok_ids *ids, int32_t id, st_error *err);

/* Encoders of one fragment of raw text (no special tokens in it). */
st_status st_tok_spm_encode(const st_tokenizer *t, const char *text, size_t len, bool space_prefix,
                            st_tok_ids *out, st_error *err);
st_status st_tok_bpe_encode(const st_tokenizer *t, const char *text, size_t len, st_tok_ids *out,
                            st_error *err);

/* Byte-level BPE alphabet (GPT-2's bytes_to_unicode): byte -> code point, and back (-1 for
 * a code point that is no byte's character). */
uint32_t st_tok_byte_to_cp(uint8_t b);
int st_tok_cp_to_byte(uint32_t cp);

/* Pre-tokenizer: calls piece(ctx, start, len) for each pre-token of text, in order; stops
 * at the first non-OK status. */
typedef st_status (*st_tok_piece_fn)(void *ctx, const char *s, size_t n, st_error *err);
st_status st_tok_pretokenize(st_tok_pre pre, const char *text, size_t len, st_tok_piece_fn piece, void *ctx,
                             st_error *err);

/* ---- Unicode ---------------------------------------------------------------------------- */

enum {
    ST_TOK_U_LETTER = 1,
    ST_TOK_U_NUMBER = 2,
    ST_TOK_U_WHITESPACE = 4,
    ST_TOK_U_PUNCT = 8,
};

typedef struct st_tok_urange {
    uint32_t first, last;
    uint8_t flags;
} st_tok_urange;

/* ST_TOK_U_* flags of a code point (0 for anything else, incl. invalid code points). */
unsigned st_tok_unicode_flags(uint32_t cp);

/* Decodes one UTF-8 sequence at s (n > 0 bytes available). Returns its length (1..4) and
 * sets *cp; an invalid or truncated sequence yields length 1 and *cp = 0xFFFD-like marker
 * ST_TOK_INVALID_CP, so that every byte of any input is consumed exactly once. */
#define ST_TOK_INVALID_CP 0xFFFFFFFFu
size_t st_tok_utf8_decode(const char *s, size_t n, uint32_t *cp);
/* Length of a complete, valid UTF-8 sequence starting at s, 0 when s[0..n) is a valid but
 * incomplete prefix, or SIZE_MAX when invalid. */
size_t st_tok_utf8_check(const unsigned char *s, size_t n);
/* Writes cp as UTF-8 into buf (4 bytes room); returns its length. */
size_t st_tok_utf8_encode(uint32_t cp, char *buf);

/* ---- a binary min-heap of merge candidates -------------------------------------------- */

typedef struct st_tok_cand {
    double key;    /* smaller first: -score (SPM) or rank (BPE) */
    int32_t left;  /* symbol index; ties go to the leftmost */
    int32_t right;
    uint32_t size; /* merged length in bytes when queued: stale entries are skipped */
} st_tok_cand;

typedef struct st_tok_heap {
    st_tok_cand *v;
    size_t n, cap;
} st_tok_heap;

st_status st_tok_heap_push(st_tok_heap *h, st_tok_cand c, st_error *err);
st_tok_cand st_tok_heap_pop(st_tok_heap *h); /* h->n > 0 */
void st_tok_heap_free(st_tok_heap *h);

/* A doubly linked run of symbols over a text, as both merge algorithms use it. */
typedef struct st_tok_sym {
    int32_t prev, next; /* -1 at the ends */
    uint32_t start, n;  /* bytes in the text; n == 0 once merged into its left neighbour */
    int32_t id;         /* BPE: the symbol's token id */
} st_tok_sym;

#endif /* STRIDE_TOK_INTERNAL_H */
