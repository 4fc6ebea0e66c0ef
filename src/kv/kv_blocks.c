/* The KV block manager (kv_blocks.h): reference counts, a free stack, the least recently
 * released list of cached blocks, and the prefix cache as a chained hash table over the
 * registered blocks. Every operation is O(1) except a lookup (O(bucket chain)). */
#include "kv/kv_blocks.h"

#include <stdlib.h>
#include <string.h>

#define T ST_KV_BLOCK_TOKENS

struct st_kv_blocks {
    int64_t n;
    int32_t *ref;          /* [n] holders */
    uint8_t *registered;   /* [n] in the prefix cache */
    uint64_t *hash;        /* [n] of a registered block: its prefix's chained hash */
    int32_t *parent;       /* [n] of a registered block: the registered block before it, or -1 */
    uint32_t *parent_gen;  /* [n] the parent's generation when this block was registered */
    uint32_t *gen;         /* [n] bumped whenever a block leaves the prefix cache */
    int32_t *tokens;       /* [n][T] of a registered block: its token ids */
    int32_t *chain;        /* [n] next registered block in the same bucket, or -1 */
    int32_t *bucket;       /* [n_buckets] first registered block of each bucket, or -1 */
    uint64_t bucket_mask;  /* n_buckets - 1 */
    uint64_t hash_mask;    /* the hash bits kept */
    int32_t *lru_prev, *lru_next; /* [n] cached blocks, least recently released first */
    int32_t lru_head, lru_tail;
    int32_t *free_stack;   /* [n] free blocks; the top is handed out first */
    int64_t n_free, n_used, n_cached, evictions;
};

/* The hash of a prefix: its parent's hash chained with each token id (splitmix64's
 * finaliser per step, so every bit of every token reaches every bit of the result). */
static uint64_t chain_hash(uint64_t h, const int32_t *tokens) {
    for (int i = 0; i < T; i++) {
        uint64_t z = h ^ ((uint64_t)(uint32_t)tokens[i] + 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        h = z ^ (z >> 31);
    }
    return h;
}

#define ROOT_HASH 0x243F6A8885A308D3ull /* the parent hash of a sequence's first block */

st_status st_kv_blocks_init(int64_t n_blocks, int hash_bits, st_kv_blocks **out, st_error *err) {
    *out = NULL;
    if (n_blocks < 1 || n_blocks > INT32_MAX / T)
        return st_error_set(err, ST_ERROR_INVALID, "a block manager of %lld blocks: expected 1 to %d",
                            (long long)n_blocks, INT32_MAX / T);
    if (hash_bits < 1 || hash_bits > 64)
        return st_error_set(err, ST_ERROR_INVALID, "hash bits %d: expected 1 to 64", hash_bits);
    st_kv_blocks *bm = calloc(1, sizeof(*bm));
    if (!bm) return st_error_set(err, ST_ERROR_NOMEM, "out of host memory");
    const size_t n = (size_t)n_blocks;
    uint64_t n_buckets = 1;
    while (n_buckets < (uint64_t)n) n_buckets <<= 1;
    bm->n = n_blocks;
    bm->ref = calloc(n, sizeof(int32_t));
    bm->registered = calloc(n, 1);
    bm->hash = calloc(n, sizeof(uint64_t));
    bm->parent = calloc(n, sizeof(int32_t));
    bm->parent_gen = calloc(n, sizeof(uint32_t));
    bm->gen = calloc(n, sizeof(uint32_t));
    bm->tokens = calloc(n * T, sizeof(int32_t));
    bm->chain = calloc(n, sizeof(int32_t));
    bm->bucket = malloc((size_t)n_buckets * sizeof(int32_t));
    bm->lru_prev = calloc(n, sizeof(int32_t));
    bm->lru_next = calloc(n, sizeof(int32_t));
    bm->free_stack = calloc(n, sizeof(int32_t));
    if (!bm->ref || !bm->registered || !bm->hash || !bm->parent || !bm->parent_gen || !bm->gen || !bm->tokens ||
        !bm->chain || !bm->bucket || !bm->lru_prev || !bm->lru_next || !bm->free_stack) {
        st_kv_blocks_free(bm);
        return st_error_set(err, ST_ERROR_NOMEM, "out of host memory for a manager of %lld blocks",
                            (long long)n_blocks);
    }
    bm->bucket_mask = n_buckets - 1;
    bm->hash_mask = hash_bits == 64 ? ~0ull : (1ull << hash_bits) - 1;
    for (uint64_t b = 0; b < n_buckets; b++) bm->bucket[b] = -1;
    for (int64_t i = 0; i < n_blocks; i++) { /* block 0 on top */
        bm->free_stack[i] = (int32_t)(n_blocks - 1 - i);
        bm->lru_prev[i] = bm->lru_next[i] = -1;
        bm->chain[i] = -1;
    }
    bm->n_free = n_blocks;
    bm->lru_head = bm->lru_tail = -1;
    *out = bm;
    return ST_OK;
}

void st_kv_blocks_free(st_kv_blocks *bm) {
    if (!bm) return;
    free(bm->ref);
    free(bm->registered);
    free(bm->hash);
    free(bm->parent);
    free(bm->parent_gen);
    free(bm->gen);
    free(bm->tokens);
    free(bm->chain);
    free(bm->bucket);
    free(bm->lru_prev);
    free(bm->lru_next);
    free(bm->free_stack);
    free(bm);
}

int64_t st_kv_blocks_n_available(const st_kv_blocks *bm) { return bm->n_free + bm->n_cached; }

void st_kv_blocks_get_counts(const st_kv_blocks *bm, st_kv_blocks_counts *out) {
    *out = (st_kv_blocks_counts){.n_blocks = bm->n, .used = bm->n_used, .cached = bm->n_cached,
                                 .free = bm->n_free, .evictions = bm->evictions};
}

static void check_id(const st_kv_blocks *bm, int32_t id) { ST_ASSERT(id >= 0 && id < bm->n); }

/* ---- the least recently released list ------------------------------------------------- */

static void lru_append(st_kv_blocks *bm, int32_t id) {
    bm->lru_prev[id] = bm->lru_tail;
    bm->lru_next[id] = -1;
    if (bm->lru_tail >= 0) bm->lru_next[bm->lru_tail] = id;
    else bm->lru_head = id;
    bm->lru_tail = id;
}

static void lru_remove(st_kv_blocks *bm, int32_t id) {
    const int32_t p = bm->lru_prev[id], n = bm->lru_next[id];
    if (p >= 0) bm->lru_next[p] = n;
    else bm->lru_head = n;
    if (n >= 0) bm->lru_prev[n] = p;
    else bm->lru_tail = p;
    bm->lru_prev[id] = bm->lru_next[id] = -1;
}

/* ---- the hash table ------------------------------------------------------------------- */

static uint64_t prefix_hash(const st_kv_blocks *bm, int32_t parent, const int32_t *tokens) {
    return chain_hash(parent >= 0 ? bm->hash[parent] : ROOT_HASH, tokens) & bm->hash_mask;
}

/* Takes a registered block out of the prefix cache: its children (registered after it)
 * stop matching, since their parent's generation no longer agrees. */
static void unregister(st_kv_blocks *bm, int32_t id) {
    int32_t *link = &bm->bucket[bm->hash[id] & bm->bucket_mask];
    while (*link != id) {
        ST_ASSERT(*link >= 0);
        link = &bm->chain[*link];
    }
    *link = bm->chain[id];
    bm->chain[id] = -1;
    bm->registered[id] = 0;
    bm->gen[id]++;
}

int32_t st_kv_blocks_lookup(const st_kv_blocks *bm, int32_t parent, const int32_t *tokens) {
    ST_ASSERT(parent == -1 || (parent >= 0 && parent < bm->n && bm->registered[parent]));
    const uint64_t h = prefix_hash(bm, parent, tokens);
    for (int32_t b = bm->bucket[h & bm->bucket_mask]; b >= 0; b = bm->chain[b]) {
        if (bm->hash[b] != h || bm->parent[b] != parent) continue;
        if (parent >= 0 && bm->parent_gen[b] != bm->gen[parent]) continue;
        if (memcmp(bm->tokens + (size_t)b * T, tokens, T * sizeof(int32_t)) == 0) return b;
    }
    return -1;
}

int32_t st_kv_blocks_register(st_kv_blocks *bm, int32_t id, int32_t parent, const int32_t *tokens) {
    check_id(bm, id);
    ST_ASSERT(bm->ref[id] > 0 && !bm->registered[id]);
    const int32_t twin = st_kv_blocks_lookup(bm, parent, tokens);
    if (twin >= 0) return twin;
    const uint64_t h = prefix_hash(bm, parent, tokens);
    bm->hash[id] = h;
    bm->parent[id] = parent;
    bm->parent_gen[id] = parent >= 0 ? bm->gen[parent] : 0;
    memcpy(bm->tokens + (size_t)id * T, tokens, T * sizeof(int32_t));
    int32_t *head = &bm->bucket[h & bm->bucket_mask];
    bm->chain[id] = *head;
    *head = id;
    bm->registered[id] = 1;
    return id;
}

/* ---- references ----------------------------------------------------------------------- */

bool st_kv_blocks_alloc(st_kv_blocks *bm, int32_t *id) {
    int32_t b;
    if (bm->n_free > 0) {
        b = bm->free_stack[--bm->n_free];
    } else if (bm->lru_head >= 0) {
        b = bm->lru_head;
        lru_remove(bm, b);
        unregister(bm, b);
        bm->n_cached--;
        bm->evictions++;
    } else {
        return false;
    }
    ST_ASSERT(bm->ref[b] == 0);
    bm->ref[b] = 1;
    bm->n_used++;
    *id = b;
    return true;
}

void st_kv_blocks_ref(st_kv_blocks *bm, int32_t id) {
    check_id(bm, id);
    if (bm->ref[id] == 0) { /* only a cached block can be taken up again */
        ST_ASSERT(bm->registered[id]);
        lru_remove(bm, id);
        bm->n_cached--;
        bm->n_used++;
    }
    bm->ref[id]++;
}

void st_kv_blocks_unref(st_kv_blocks *bm, int32_t id) {
    check_id(bm, id);
    ST_ASSERT(bm->ref[id] > 0);
    if (--bm->ref[id] > 0) return;
    bm->n_used--;
    if (bm->registered[id]) {
        lru_append(bm, id);
        bm->n_cached++;
    } else {
        bm->free_stack[bm->n_free++] = id;
    }
}

int32_t st_kv_blocks_refs(const st_kv_blocks *bm, int32_t id) {
    check_id(bm, id);
    return bm->ref[id];
}

bool st_kv_blocks_is_registered(const st_kv_blocks *bm, int32_t id) {
    check_id(bm, id);
    return bm->registered[id] != 0;
}

/* ---- the invariants ------------------------------------------------------------------- */

st_status st_kv_blocks_check(const st_kv_blocks *bm, const int32_t *refs, st_error *err) {
    const int64_t n = bm->n;
    uint8_t *seen = calloc((size_t)n, 1); /* 1: on the free stack, 2: on the LRU list, 4: in a chain */
    if (!seen) return st_error_set(err, ST_ERROR_NOMEM, "out of host memory");
    st_status s = ST_ERROR_INVALID;
    int64_t used = 0, n_lru = 0, n_chained = 0, n_registered = 0;
    for (int64_t i = 0; i < bm->n_free; i++) {
        const int32_t b = bm->free_stack[i];
        if (b < 0 || b >= n || seen[b]) {
            st_error_set(err, s, "free stack entry %lld: block %d is invalid or listed twice", (long long)i, b);
            goto done;
        }
        seen[b] |= 1;
    }
    int32_t prev = -1;
    for (int32_t b = bm->lru_head; b >= 0; prev = b, b = bm->lru_next[b]) {
        if (b >= n || (seen[b] & 3) || bm->lru_prev[b] != prev || ++n_lru > n) {
            st_error_set(err, s, "cached list: block %d is invalid, listed twice or badly linked", b);
            goto done;
        }
        seen[b] |= 2;
    }
    if (bm->lru_tail != prev) {
        st_error_set(err, s, "cached list: the tail is %d, the walk ends at %d", bm->lru_tail, prev);
        goto done;
    }
    for (uint64_t k = 0; k <= bm->bucket_mask; k++)
        for (int32_t b = bm->bucket[k]; b >= 0; b = bm->chain[b]) {
            if (b >= n || (seen[b] & 4) || !bm->registered[b] || (bm->hash[b] & bm->bucket_mask) != k ||
                ++n_chained > n) {
                st_error_set(err, s, "hash bucket %llu: block %d is invalid, unregistered or chained twice",
                             (unsigned long long)k, b);
                goto done;
            }
            seen[b] |= 4;
        }
    for (int64_t b = 0; b < n; b++) {
        const bool reg = bm->registered[b] != 0, on_free = seen[b] & 1, on_lru = seen[b] & 2;
        n_registered += reg;
        if (bm->ref[b] < 0 || (bm->ref[b] > 0 && (on_free || on_lru)) ||
            (bm->ref[b] == 0 && on_free == (reg || on_lru)) || (bm->ref[b] == 0 && reg != on_lru) ||
            reg != ((seen[b] & 4) != 0)) {
            st_error_set(err, s, "block %lld: ref %d, registered %d, free %d, cached %d disagree", (long long)b,
                         bm->ref[b], reg, on_free, on_lru);
            goto done;
        }
        if (refs && refs[b] != bm->ref[b]) {
            st_error_set(err, s, "block %lld has %d holders, the sequences hold it %d times", (long long)b,
                         bm->ref[b], refs[b]);
            goto done;
        }
        const int32_t par = bm->parent[b];
        const bool live = reg && (par < 0 || (bm->registered[par] && bm->parent_gen[b] == bm->gen[par]));
        if (live && bm->hash[b] != prefix_hash(bm, par, bm->tokens + (size_t)b * T)) {
            st_error_set(err, s, "block %lld: its hash is not that of its parent and tokens", (long long)b);
            goto done;
        }
        used += bm->ref[b] > 0;
    }
    if (used != bm->n_used || n_lru != bm->n_cached || used + n_lru + bm->n_free != n || n_registered != n_chained) {
        st_error_set(err, s,
                     "counts: %lld used (counted %lld), %lld cached (%lld), %lld free, %lld blocks, %lld registered "
                     "(%lld in the hash table)",
                     (long long)bm->n_used, (long long)used, (long long)bm->n_cached, (long long)n_lru,
                     (long long)bm->n_free, (long long)n, (long long)n_registered, (long long)n_chained);
        goto done;
    }
    s = ST_OK;
done:
    free(seen);
    return s;
}
