/*
 * The KV block manager: which of a pool's blocks (runner.h, ST_KV_BLOCK_TOKENS tokens of
 * every layer's keys and values each) are free, held by sequences, or kept as a prefix
 * cache. Host bookkeeping only: it never touches the blocks' contents (the caller copies
 * them, kv_seq.h), so it is tested without a model.
 *
 * Every block is in exactly one of three states:
 *   used    ref > 0: held by ref sequences (more than one: shared, read-only for each);
 *   cached  ref = 0, registered: its contents are a known prefix, kept for reuse and
 *           evicted least recently released first when a block is needed;
 *   free    ref = 0, not registered.
 * A used block may be registered too (a full block of a running sequence that others
 * may share).
 *
 * The prefix cache (vLLM's automatic prefix caching): a full block of computed tokens is
 * registered under a hash of (its parent's hash, its ST_KV_BLOCK_TOKENS token ids), where
 * the parent is the registered block before it in the sequence (none for the first). A
 * lookup finds a block only if the hash matches AND the token ids are equal AND its
 * parent is the very block the caller matched before it (the same id, not evicted and
 * reused since: a generation counter per block), so a hit is the same whole prefix, never
 * a hash collision. Keys and values at a position depend only on the tokens up to it, so
 * equal prefixes have equal blocks.
 */
#ifndef STRIDE_KV_BLOCKS_H
#define STRIDE_KV_BLOCKS_H

#include <stdbool.h>
#include <stdint.h>

#include "stride/ops.h"
#include "stride/status.h"

typedef struct st_kv_blocks st_kv_blocks;

typedef struct st_kv_blocks_counts {
    int64_t n_blocks;
    int64_t used;      /* ref > 0 */
    int64_t cached;    /* ref = 0, registered (evictable) */
    int64_t free;      /* ref = 0, not registered */
    int64_t evictions; /* cached blocks handed out again since init */
} st_kv_blocks_counts;

/* A manager of blocks 0 .. n_blocks-1, all free. hash_bits (1..64) keeps that many bits
 * of every hash: 64 in use; tests pass a few to force collisions. */
st_status st_kv_blocks_init(int64_t n_blocks, int hash_bits, st_kv_blocks **out, st_error *err);
void st_kv_blocks_free(st_kv_blocks *bm);

/* Blocks an allocation can take now: free + cached. */
int64_t st_kv_blocks_n_available(const st_kv_blocks *bm);
void st_kv_blocks_get_counts(const st_kv_blocks *bm, st_kv_blocks_counts *out);

/* A block with ref 1 into *id: a free one, else the least recently released cached one
 * (evicted from the prefix cache). False when every block is used. */
bool st_kv_blocks_alloc(st_kv_blocks *bm, int32_t *id);
/* One more holder of a used or cached block. */
void st_kv_blocks_ref(st_kv_blocks *bm, int32_t id);
/* One holder fewer; at 0 the block becomes cached (registered) or free. */
void st_kv_blocks_unref(st_kv_blocks *bm, int32_t id);
int32_t st_kv_blocks_refs(const st_kv_blocks *bm, int32_t id);
bool st_kv_blocks_is_registered(const st_kv_blocks *bm, int32_t id);

/* The registered block holding tokens[0 .. ST_KV_BLOCK_TOKENS) right after block parent
 * (-1: at the start of a sequence; else a registered block), or -1. Takes no reference. */
int32_t st_kv_blocks_lookup(const st_kv_blocks *bm, int32_t parent, const int32_t *tokens);
/* Registers used block id (full, computed, not registered) as tokens after parent (-1 or
 * a registered block). Returns id, or the registered block that already holds the same
 * prefix (its twin: then id stays unregistered; the caller may hold the twin instead). */
int32_t st_kv_blocks_register(st_kv_blocks *bm, int32_t id, int32_t parent, const int32_t *tokens);

/* Checks every invariant of the manager (states, counts, lists, hash chains) and, when
 * refs is not NULL, that block b has exactly refs[b] holders. ST_ERROR_INVALID naming the
 * first broken one: for tests and debugging, O(n_blocks). */
st_status st_kv_blocks_check(const st_kv_blocks *bm, const int32_t *refs, st_error *err);

#endif
