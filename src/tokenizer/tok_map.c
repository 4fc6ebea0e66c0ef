/* Hash maps of the tokenizer: piece text -> id and (left, right) -> merge; the id array and
 * the candidate heap that the merge loops use. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a 64 */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static uint64_t capacity_for(uint64_t n_keys) {
    uint64_t cap = 16;
    while (cap < n_keys * 2) cap <<= 1; /* load factor <= 1/2 */
    return cap;
}

st_status st_tok_map_init(st_tok_map *m, uint64_t n_keys, const char *arena, const uint32_t *off,
                          const uint32_t *len, st_error *err) {
    memset(m, 0, sizeof(*m));
    uint64_t cap = capacity_for(n_keys);
    m->slots = malloc(cap * sizeof(*m->slots));
    if (!m->slots)
        return st_error_set(err, ST_ERROR_NOMEM, "tokenizer: out of memory for a %llu-entry piece map",
                            (unsigned long long)n_keys);
    memset(m->slots, 0xff, cap * sizeof(*m->slots));
    m->mask = cap - 1;
    m->arena = arena;
    m->off = off;
    m->len = len;
    return ST_OK;
}

void st_tok_map_free(st_tok_map *m) {
    free(m->slots);
    m->slots = NULL;
}

void st_tok_map_put(st_tok_map *m, int32_t id) {
    const char *s = m->arena + m->off[id];
    size_t n = m->len[id];
    for (uint64_t i = hash_bytes(s, n) & m->mask;; i = (i + 1) & m->mask) {
        int32_t cur = m->slots[i];
        if (cur < 0 || (m->len[cur] == n && memcmp(m->arena + m->off[cur], s, n) == 0)) {
            m->slots[i] = id;
            return;
        }
    }
}

int32_t st_tok_map_get(const st_tok_map *m, const char *s, size_t n) {
    for (uint64_t i = hash_bytes(s, n) & m->mask;; i = (i + 1) & m->mask) {
        int32_t cur = m->slots[i];
        if (cur < 0) return -1;
        if (m->len[cur] == n && memcmp(m->arena + m->off[cur], s, n) == 0) return cur;
    }
}

/* ---- pair map ---------------------------------------------------------------------------- */

static uint64_t pair_key(int32_t left, int32_t right) {
    return (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
}

static uint64_t hash_u64(uint64_t x) { /* splitmix64 finaliser */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

st_status st_tok_pair_map_init(st_tok_pair_map *m, uint64_t n_keys, st_error *err) {
    uint64_t cap = capacity_for(n_keys);
    m->slots = calloc(cap, sizeof(*m->slots));
    if (!m->slots)
        return st_error_set(err, ST_ERROR_NOMEM, "tokenizer: out of memory for %llu merges",
                            (unsigned long long)n_keys);
    m->mask = cap - 1;
    return ST_OK;
}

void st_tok_pair_map_free(st_tok_pair_map *m) {
    free(m->slots);
    m->slots = NULL;
}

void st_tok_pair_map_put(st_tok_pair_map *m, int32_t left, int32_t right, int32_t rank, int32_t id) {
    uint64_t key = pair_key(left, right);
    for (uint64_t i = hash_u64(key) & m->mask;; i = (i + 1) & m->mask) {
        if (m->slots[i].key == key) return; /* a better-ranked merge of the same pair exists */
        if (m->slots[i].key == 0) {
            m->slots[i] = (st_tok_pair){key, rank, id};
            return;
        }
    }
}

const st_tok_pair *st_tok_pair_map_get(const st_tok_pair_map *m, int32_t left, int32_t right) {
    uint64_t key = pair_key(left, right);
    for (uint64_t i = hash_u64(key) & m->mask;; i = (i + 1) & m->mask) {
        if (m->slots[i].key == key) return &m->slots[i];
        if (m->slots[i].key == 0) return NULL;
    }
}

/* ---- ids, heap ----------------------------------------------------------------------------- */

st_status st_tok_ids_push(st_tok_ids *ids, int32_t id, st_error *err) {
    if (ids->n == ids->cap) {
        int64_t cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *v = realloc(ids->v, (size_t)cap * sizeof(*v));
        if (!v)
            return st_error_set(err, ST_ERROR_NOMEM, "tokenizer: out of memory for %lld token ids",
                                (long long)cap);
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return ST_OK;
}

static bool cand_less(const st_tok_cand *a, const st_tok_cand *b) {
    if (a->key != b->key) return a->key < b->key;
    return a->left < b->left;
}

st_status st_tok_heap_push(st_tok_heap *h, st_tok_cand c, st_error *err) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        st_tok_cand *v = realloc(h->v, cap * sizeof(*v));
        if (!v) return st_error_set(err, ST_ERROR_NOMEM, "tokenizer: out of memory for merge candidates");
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!cand_less(&c, &h->v[parent])) break;
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = c;
    return ST_OK;
}

st_tok_cand st_tok_heap_pop(st_tok_heap *h) {
    ST_ASSERT(h->n > 0);
    st_tok_cand top = h->v[0];
    st_tok_cand last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && cand_less(&h->v[c + 1], &h->v[c])) c++;
        if (!cand_less(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n > 0) h->v[i] = last;
    return top;
}

void st_tok_heap_free(st_tok_heap *h) {
    free(h->v);
    h->v = NULL;
    h->n = h->cap = 0;
}
