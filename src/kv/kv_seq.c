/* A sequence's blocks (kv_seq.h): growing, sharing, copy-on-write and prefix caching. */
#include "kv/kv_seq.h"

#include <stdlib.h>

#define T ST_KV_BLOCK_TOKENS

st_status st_kv_seq_init(st_kv_seq *s, int32_t cap, st_error *err) {
    *s = (st_kv_seq){0};
    if (cap < 1) return st_error_set(err, ST_ERROR_INVALID, "a sequence of %d blocks", cap);
    s->blocks = malloc((size_t)cap * sizeof(int32_t));
    if (!s->blocks) return st_error_set(err, ST_ERROR_NOMEM, "out of host memory");
    s->cap = cap;
    return ST_OK;
}

void st_kv_seq_free(st_kv_seq *s) {
    ST_ASSERT(s->n_blocks == 0);
    free(s->blocks);
    *s = (st_kv_seq){0};
}

void st_kv_seq_release(st_kv_blocks *bm, st_kv_seq *s) {
    for (int32_t k = s->n_blocks - 1; k >= 0; k--) st_kv_blocks_unref(bm, s->blocks[k]);
    s->n_blocks = 0;
    s->n_registered = 0;
}

int64_t st_kv_seq_match(st_kv_blocks *bm, st_kv_seq *s, const int32_t *tokens, int64_t n_tokens) {
    ST_ASSERT(s->n_blocks == 0);
    int32_t parent = -1;
    for (int64_t k = 0; (k + 1) * T <= n_tokens && k < s->cap; k++) {
        const int32_t b = st_kv_blocks_lookup(bm, parent, tokens + k * T);
        if (b < 0) break;
        st_kv_blocks_ref(bm, b);
        s->blocks[s->n_blocks++] = b;
        parent = b;
    }
    s->n_registered = s->n_blocks;
    return (int64_t)s->n_blocks * T;
}

void st_kv_seq_share(st_kv_blocks *bm, st_kv_seq *dst, const st_kv_seq *src, int64_t n_tokens) {
    ST_ASSERT(dst->n_blocks == 0 && n_tokens >= 0);
    const int32_t n = (int32_t)((n_tokens + T - 1) / T);
    ST_ASSERT(n <= src->n_blocks && n <= dst->cap);
    for (int32_t k = 0; k < n; k++) {
        st_kv_blocks_ref(bm, src->blocks[k]);
        dst->blocks[k] = src->blocks[k];
    }
    dst->n_blocks = n;
    const int32_t full = (int32_t)(n_tokens / T);
    dst->n_registered = src->n_registered < full ? src->n_registered : full;
}

/* Whether writing into block id needs a copy first. */
static bool needs_copy(const st_kv_blocks *bm, int32_t id) {
    return st_kv_blocks_refs(bm, id) > 1 || st_kv_blocks_is_registered(bm, id);
}

int64_t st_kv_seq_blocks_needed(const st_kv_blocks *bm, const st_kv_seq *s, int64_t pos0, int64_t n) {
    if (n <= 0) return 0;
    const int64_t k0 = pos0 / T, k1 = (pos0 + n - 1) / T;
    int64_t need = 0;
    for (int64_t k = k0; k <= k1; k++) need += k >= s->n_blocks || needs_copy(bm, s->blocks[k]);
    return need;
}

int64_t st_kv_seq_fit(const st_kv_blocks *bm, const st_kv_seq *s, int64_t pos0, int64_t n, int64_t avail) {
    while (n > 0 && st_kv_seq_blocks_needed(bm, s, pos0, n) > avail) {
        const int64_t last = (pos0 + n - 1) / T; /* drop the range's last block */
        n = last * T - pos0;
    }
    return n > 0 ? n : 0;
}

st_status st_kv_seq_prepare(st_kv_blocks *bm, st_kv_seq *s, int64_t pos0, int64_t n, st_kv_copy_fn copy,
                            void *ctx, int64_t *n_copied, st_error *err) {
    if (n <= 0) return ST_OK;
    const int64_t k0 = pos0 / T, k1 = (pos0 + n - 1) / T;
    ST_ASSERT(pos0 >= 0 && k1 < s->cap && k0 <= s->n_blocks);
    for (int64_t k = k0; k <= k1; k++) {
        int32_t fresh = -1;
        if (k < s->n_blocks && !needs_copy(bm, s->blocks[k])) continue;
        const bool ok = st_kv_blocks_alloc(bm, &fresh);
        ST_ASSERT(ok); /* the caller checked st_kv_seq_blocks_needed */
        if (k == s->n_blocks) {
            s->blocks[s->n_blocks++] = fresh;
            continue;
        }
        const int32_t old = s->blocks[k];
        st_status st = copy(ctx, fresh, old, err);
        if (st != ST_OK) {
            st_kv_blocks_unref(bm, fresh);
            return st;
        }
        s->blocks[k] = fresh;
        st_kv_blocks_unref(bm, old);
        if (n_copied) (*n_copied)++;
        if (k < s->n_registered) s->n_registered = (int32_t)k; /* (a private copy is not registered) */
    }
    return ST_OK;
}

void st_kv_seq_commit(st_kv_blocks *bm, st_kv_seq *s, const int32_t *tokens, int64_t n_computed) {
    const int64_t full = n_computed / T;
    ST_ASSERT(full <= s->n_blocks);
    for (int64_t k = s->n_registered; k < full; k++) {
        const int32_t parent = k > 0 ? s->blocks[k - 1] : -1;
        const int32_t b = s->blocks[k];
        if (st_kv_blocks_is_registered(bm, b)) { /* shared with the sequence that registered it */
            s->n_registered = (int32_t)(k + 1);
            continue;
        }
        const int32_t canon = st_kv_blocks_register(bm, b, parent, tokens + k * T);
        if (canon != b) { /* the same prefix is cached: hold that block, give ours back */
            st_kv_blocks_ref(bm, canon);
            st_kv_blocks_unref(bm, b);
            s->blocks[k] = canon;
        }
        s->n_registered = (int32_t)(k + 1);
    }
}
