/*
 * A sequence's blocks: the list of pool blocks that hold its positions in order (its row
 * of a batch's block table, runner.h), over the block manager (kv_blocks.h).
 *
 * Rules that keep shared blocks correct:
 *   - a sequence writes only into blocks it alone holds and that are not in the prefix
 *     cache; st_kv_seq_prepare copies any other block of the range to be written into a
 *     fresh one first (copy-on-write);
 *   - a block is registered in the prefix cache only once it is full and computed
 *     (st_kv_seq_commit), so cached blocks are never written again.
 */
#ifndef STRIDE_KV_SEQ_H
#define STRIDE_KV_SEQ_H

#include <stdint.h>

#include "kv/kv_blocks.h"

typedef struct st_kv_seq {
    int32_t *blocks;      /* [cap] pool block ids of positions 0 .. n_blocks * ST_KV_BLOCK_TOKENS - 1 */
    int32_t n_blocks, cap;
    int32_t n_registered; /* leading blocks that are in the prefix cache (full and computed) */
} st_kv_seq;

/* Copies block src's contents into block dst (st_kv_pool_copy_block in the engine). */
typedef st_status (*st_kv_copy_fn)(void *ctx, int32_t dst, int32_t src, st_error *err);

/* An empty sequence of at most cap blocks. */
st_status st_kv_seq_init(st_kv_seq *s, int32_t cap, st_error *err);
/* Frees the list; its blocks must have been released. */
void st_kv_seq_free(st_kv_seq *s);

/* Gives back every block, the last first (so that a prefix's deepest blocks are the first
 * evicted: a block is no use to a lookup without the ones before it). */
void st_kv_seq_release(st_kv_blocks *bm, st_kv_seq *s);

/* Takes (references) the longest run of full blocks of tokens[0 .. n_tokens) found in the
 * prefix cache into the empty sequence s; returns the tokens they cover. */
int64_t st_kv_seq_match(st_kv_blocks *bm, st_kv_seq *s, const int32_t *tokens, int64_t n_tokens);

/* The empty sequence dst shares src's blocks of positions [0, n_tokens) (a fork: src
 * holds at least that many computed tokens). */
void st_kv_seq_share(st_kv_blocks *bm, st_kv_seq *dst, const st_kv_seq *src, int64_t n_tokens);

/* Blocks that writing positions [pos0, pos0 + n) needs from the manager: the ones to
 * append plus the copies of shared or cached blocks in the range. */
int64_t st_kv_seq_blocks_needed(const st_kv_blocks *bm, const st_kv_seq *s, int64_t pos0, int64_t n);
/* The most tokens m <= n from pos0 on whose blocks_needed is at most avail (0: none). */
int64_t st_kv_seq_fit(const st_kv_blocks *bm, const st_kv_seq *s, int64_t pos0, int64_t n, int64_t avail);

/* Makes positions [pos0, pos0 + n) writable: appends blocks up to the last one and
 * replaces every shared or cached block of the range by a copy (copy(ctx, new, old)).
 * The caller has checked blocks_needed against st_kv_blocks_n_available. *n_copied
 * (may be NULL) counts the copies. On a failed copy s is unchanged for that block. */
st_status st_kv_seq_prepare(st_kv_blocks *bm, st_kv_seq *s, int64_t pos0, int64_t n, st_kv_copy_fn copy,
                            void *ctx, int64_t *n_copied, st_error *err);

/* Registers the blocks that positions [0, n_computed) filled since the last call
 * (tokens: the sequence's token ids). A block whose prefix is already cached in another
 * block is replaced by that one (the same keys and values) and given back. */
void st_kv_seq_commit(st_kv_blocks *bm, st_kv_seq *s, const int32_t *tokens, int64_t n_computed);

#endif
