/* The KV block manager (src/kv/kv_blocks.h) and sequences' block lists (kv_seq.h), without
 * a model: states and counts, the least recently released order of eviction, the prefix
 * cache under forced hash collisions, parents' identity, copy-on-write, twins, and a
 * random walk against a model of the reference counts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kv/kv_blocks.h"
#include "kv/kv_seq.h"

#define T ST_KV_BLOCK_TOKENS

static void assert_counts(const st_kv_blocks *bm, int64_t used, int64_t cached, int64_t free_) {
    st_kv_blocks_counts c;
    st_kv_blocks_get_counts(bm, &c);
    assert_int_equal(c.used, used);
    assert_int_equal(c.cached, cached);
    assert_int_equal(c.free, free_);
    assert_int_equal(st_kv_blocks_n_available(bm), cached + free_);
    assert_int_equal(st_kv_blocks_check(bm, NULL, NULL), ST_OK);
}

/* tokens of block k of "sequence" s: distinct per (s, k) unless s and k agree */
static void fill(int32_t *t, int s, int k) {
    for (int i = 0; i < T; i++) t[i] = (s * 7919 + k * 131 + i) % 1000;
}

static void test_init_rejects(void **state) {
    (void)state;
    st_kv_blocks *bm = NULL;
    st_error err = {0};
    assert_int_equal(st_kv_blocks_init(0, 64, &bm, &err), ST_ERROR_INVALID);
    assert_int_equal(st_kv_blocks_init(INT32_MAX, 64, &bm, &err), ST_ERROR_INVALID);
    assert_int_equal(st_kv_blocks_init(4, 0, &bm, &err), ST_ERROR_INVALID);
    assert_int_equal(st_kv_blocks_init(4, 65, &bm, &err), ST_ERROR_INVALID);
    assert_null(bm);
}

static void test_alloc_ref_unref(void **state) {
    (void)state;
    st_kv_blocks *bm = NULL;
    assert_int_equal(st_kv_blocks_init(3, 64, &bm, NULL), ST_OK);
    assert_counts(bm, 0, 0, 3);
    int32_t a, b, c, d;
    assert_true(st_kv_blocks_alloc(bm, &a));
    assert_true(st_kv_blocks_alloc(bm, &b));
    assert_true(st_kv_blocks_alloc(bm, &c));
    assert_int_equal(a, 0); /* lowest first on a fresh manager */
    assert_true(a != b && b != c && a != c);
    assert_false(st_kv_blocks_alloc(bm, &d));
    assert_counts(bm, 3, 0, 0);
    st_kv_blocks_ref(bm, b);
    assert_int_equal(st_kv_blocks_refs(bm, b), 2);
    st_kv_blocks_unref(bm, b);
    assert_counts(bm, 3, 0, 0);
    st_kv_blocks_unref(bm, b);
    assert_counts(bm, 2, 0, 1);
    assert_true(st_kv_blocks_alloc(bm, &d));
    assert_int_equal(d, b); /* the block just given back */
    st_kv_blocks_unref(bm, a);
    st_kv_blocks_unref(bm, c);
    st_kv_blocks_unref(bm, d);
    assert_counts(bm, 0, 0, 3);
    st_kv_blocks_free(bm);
}

/* A chain of three registered blocks: cached after release, found again, evicted only when
 * nothing is free, the deepest first; a child stops matching once its parent is evicted. */
static void test_prefix_cache_and_eviction(void **state) {
    (void)state;
    st_kv_blocks *bm = NULL;
    assert_int_equal(st_kv_blocks_init(4, 64, &bm, NULL), ST_OK);
    int32_t tok[3][T], ids[3];
    int32_t parent = -1;
    for (int k = 0; k < 3; k++) {
        fill(tok[k], 1, k);
        assert_true(st_kv_blocks_alloc(bm, &ids[k]));
        assert_int_equal(st_kv_blocks_lookup(bm, parent, tok[k]), -1);
        assert_int_equal(st_kv_blocks_register(bm, ids[k], parent, tok[k]), ids[k]);
        assert_true(st_kv_blocks_is_registered(bm, ids[k]));
        parent = ids[k];
    }
    for (int k = 2; k >= 0; k--) st_kv_blocks_unref(bm, ids[k]); /* deepest first, as kv_seq does */
    assert_counts(bm, 0, 3, 1);
    parent = -1;
    for (int k = 0; k < 3; k++) {
        assert_int_equal(st_kv_blocks_lookup(bm, parent, tok[k]), ids[k]);
        parent = ids[k];
    }
    /* a block with the right tokens but another parent is not a hit */
    assert_int_equal(st_kv_blocks_lookup(bm, ids[0], tok[2]), -1);
    assert_int_equal(st_kv_blocks_lookup(bm, -1, tok[1]), -1);
    /* the free block goes first, then the least recently released: ids[2] */
    int32_t x, y;
    assert_true(st_kv_blocks_alloc(bm, &x));
    assert_true(x != ids[0] && x != ids[1] && x != ids[2]);
    assert_counts(bm, 1, 3, 0);
    assert_true(st_kv_blocks_alloc(bm, &y));
    assert_int_equal(y, ids[2]);
    assert_false(st_kv_blocks_is_registered(bm, y));
    assert_int_equal(st_kv_blocks_lookup(bm, ids[1], tok[2]), -1);
    assert_counts(bm, 2, 2, 0);
    /* taking a cached block up again moves it out of the eviction order */
    st_kv_blocks_ref(bm, ids[0]);
    assert_counts(bm, 3, 1, 0);
    int32_t z;
    assert_true(st_kv_blocks_alloc(bm, &z));
    assert_int_equal(z, ids[1]);
    /* z (ids[1] evicted) registered again, then a child under it; z is released before
     * its child, so z is evicted first and reused for another prefix: the child, still
     * cached, must not match under z's new self */
    int32_t child[T], other[T];
    fill(child, 9, 9);
    fill(other, 8, 8);
    assert_int_equal(st_kv_blocks_register(bm, z, ids[0], tok[1]), z);
    assert_int_equal(st_kv_blocks_register(bm, x, z, child), x);
    st_kv_blocks_unref(bm, z);
    st_kv_blocks_unref(bm, x);
    assert_int_equal(st_kv_blocks_lookup(bm, z, child), x);
    int32_t v;
    assert_true(st_kv_blocks_alloc(bm, &v));
    assert_int_equal(v, z);
    assert_int_equal(st_kv_blocks_register(bm, v, -1, other), v);
    assert_int_equal(st_kv_blocks_lookup(bm, v, child), -1);
    assert_true(st_kv_blocks_is_registered(bm, x));
    assert_counts(bm, 3, 1, 0);
    st_kv_blocks_unref(bm, v);
    st_kv_blocks_unref(bm, y);
    st_kv_blocks_unref(bm, ids[0]);
    assert_counts(bm, 0, 3, 1);
    st_kv_blocks_free(bm);
}

/* One bit of hash: every block collides with half the others. Lookups still return only
 * the block of the same prefix, and registering a prefix twice gives its twin. */
static void test_collisions_verified(void **state) {
    (void)state;
    enum { N = 64 };
    st_kv_blocks *bm = NULL;
    assert_int_equal(st_kv_blocks_init(N, 1, &bm, NULL), ST_OK);
    int32_t tok[N][T], ids[N];
    for (int s = 0; s < N; s++) {
        fill(tok[s], s, 0);
        assert_true(st_kv_blocks_alloc(bm, &ids[s]));
        assert_int_equal(st_kv_blocks_register(bm, ids[s], -1, tok[s]), ids[s]);
    }
    assert_int_equal(st_kv_blocks_check(bm, NULL, NULL), ST_OK);
    for (int s = 0; s < N; s++) assert_int_equal(st_kv_blocks_lookup(bm, -1, tok[s]), ids[s]);
    int32_t other[T];
    memcpy(other, tok[5], sizeof(other));
    other[T - 1] ^= 1; /* one token differs: the same hash bit half the time, never a hit */
    assert_int_equal(st_kv_blocks_lookup(bm, -1, other), -1);
    for (int s = 0; s < N; s++) st_kv_blocks_unref(bm, ids[s]);
    assert_counts(bm, 0, N, 0);
    /* a second computation of prefix 7 registers as its twin */
    st_kv_blocks_free(bm);
    assert_int_equal(st_kv_blocks_init(4, 1, &bm, NULL), ST_OK);
    int32_t a, b;
    assert_true(st_kv_blocks_alloc(bm, &a));
    assert_true(st_kv_blocks_alloc(bm, &b));
    assert_int_equal(st_kv_blocks_register(bm, a, -1, tok[7]), a);
    assert_int_equal(st_kv_blocks_register(bm, b, -1, tok[7]), a);
    assert_false(st_kv_blocks_is_registered(bm, b));
    st_kv_blocks_unref(bm, b);
    st_kv_blocks_unref(bm, a);
    assert_counts(bm, 0, 1, 3);
    st_kv_blocks_free(bm);
}

static void test_check_catches_wrong_refs(void **state) {
    (void)state;
    st_kv_blocks *bm = NULL;
    assert_int_equal(st_kv_blocks_init(3, 64, &bm, NULL), ST_OK);
    int32_t a;
    assert_true(st_kv_blocks_alloc(bm, &a));
    int32_t refs[3] = {0, 0, 0};
    refs[a] = 1;
    assert_int_equal(st_kv_blocks_check(bm, refs, NULL), ST_OK);
    refs[a] = 2;
    st_error err = {0};
    assert_int_equal(st_kv_blocks_check(bm, refs, &err), ST_ERROR_INVALID);
    assert_non_null(strstr(err.message, "holders"));
    st_kv_blocks_unref(bm, a);
    st_kv_blocks_free(bm);
}

/* ---- sequences ------------------------------------------------------------------------ */

typedef struct copies {
    int n;
    int32_t dst[16], src[16];
    bool fail;
} copies;

static st_status record_copy(void *ctx, int32_t dst, int32_t src, st_error *err) {
    copies *c = ctx;
    if (c->fail) return st_error_set(err, ST_ERROR_DEVICE, "copy failed");
    c->dst[c->n] = dst;
    c->src[c->n++] = src;
    return ST_OK;
}

/* Prompt of 2.5 blocks computed and committed; a second sequence with the same prompt
 * matches the two full blocks; a third with the first 128 tokens matches both and, writing
 * its last token again, copies the second block first. */
static void test_seq_match_commit_cow(void **state) {
    (void)state;
    st_kv_blocks *bm = NULL;
    assert_int_equal(st_kv_blocks_init(8, 64, &bm, NULL), ST_OK);
    int32_t prompt[3 * T];
    for (int i = 0; i < 3 * T; i++) prompt[i] = (i * 37) % 500;
    st_kv_seq a, b, c;
    assert_int_equal(st_kv_seq_init(&a, 4, NULL), ST_OK);
    assert_int_equal(st_kv_seq_init(&b, 4, NULL), ST_OK);
    assert_int_equal(st_kv_seq_init(&c, 4, NULL), ST_OK);
    copies cp = {0};
    assert_int_equal(st_kv_seq_match(bm, &a, prompt, 160), 0);
    assert_int_equal(st_kv_seq_blocks_needed(bm, &a, 0, 160), 3);
    assert_int_equal(st_kv_seq_fit(bm, &a, 0, 160, 2), 128);
    assert_int_equal(st_kv_seq_fit(bm, &a, 0, 160, 0), 0);
    assert_int_equal(st_kv_seq_prepare(bm, &a, 0, 100, record_copy, &cp, NULL, NULL), ST_OK);
    assert_int_equal(a.n_blocks, 2);
    st_kv_seq_commit(bm, &a, prompt, 100); /* one full block */
    assert_int_equal(a.n_registered, 1);
    assert_int_equal(st_kv_seq_prepare(bm, &a, 100, 60, record_copy, &cp, NULL, NULL), ST_OK);
    st_kv_seq_commit(bm, &a, prompt, 160);
    assert_int_equal(a.n_blocks, 3);
    assert_int_equal(a.n_registered, 2);
    assert_int_equal(cp.n, 0);

    assert_int_equal(st_kv_seq_match(bm, &b, prompt, 160), 128);
    assert_int_equal(b.blocks[0], a.blocks[0]);
    assert_int_equal(b.blocks[1], a.blocks[1]);
    assert_int_equal(st_kv_blocks_refs(bm, a.blocks[1]), 2);
    assert_int_equal(st_kv_seq_blocks_needed(bm, &b, 128, 32), 1); /* a new third block, no copy */

    assert_int_equal(st_kv_seq_match(bm, &c, prompt, 128), 128);
    assert_int_equal(st_kv_seq_blocks_needed(bm, &c, 127, 1), 1); /* the shared block is copied */
    int64_t n_copied = 0;
    const int32_t shared = c.blocks[1];
    assert_int_equal(st_kv_seq_prepare(bm, &c, 127, 1, record_copy, &cp, &n_copied, NULL), ST_OK);
    assert_int_equal(n_copied, 1);
    assert_int_equal(cp.n, 1);
    assert_int_equal(cp.src[0], shared);
    assert_int_equal(cp.dst[0], c.blocks[1]);
    assert_true(c.blocks[1] != shared);
    assert_int_equal(c.n_registered, 1);
    assert_int_equal(st_kv_blocks_refs(bm, shared), 2); /* a and b */
    /* computing it again finds the cached twin: c holds the shared block again */
    const int32_t copy = c.blocks[1];
    st_kv_seq_commit(bm, &c, prompt, 128);
    assert_int_equal(c.blocks[1], shared);
    assert_int_equal(st_kv_blocks_refs(bm, copy), 0);
    assert_false(st_kv_blocks_is_registered(bm, copy));
    assert_int_equal(st_kv_blocks_refs(bm, shared), 3);

    /* a failed copy leaves the sequence as it was */
    st_kv_seq_release(bm, &c);
    assert_int_equal(st_kv_seq_match(bm, &c, prompt, 128), 128);
    cp.fail = true;
    st_error err = {0};
    assert_int_equal(st_kv_seq_prepare(bm, &c, 127, 1, record_copy, &cp, NULL, &err), ST_ERROR_DEVICE);
    assert_int_equal(c.blocks[1], shared);
    assert_int_equal(st_kv_blocks_check(bm, NULL, NULL), ST_OK);

    st_kv_seq_release(bm, &a);
    st_kv_seq_release(bm, &b);
    st_kv_seq_release(bm, &c);
    assert_counts(bm, 0, 2, 6);
    st_kv_seq_free(&a);
    st_kv_seq_free(&b);
    st_kv_seq_free(&c);
    st_kv_blocks_free(bm);
}

/* A fork shares the partial last block; the first of the two to write copies it, the
 * other then writes its own in place. */
static void test_seq_share_partial(void **state) {
    (void)state;
    st_kv_blocks *bm = NULL;
    assert_int_equal(st_kv_blocks_init(6, 64, &bm, NULL), ST_OK);
    int32_t toks[2 * T];
    for (int i = 0; i < 2 * T; i++) toks[i] = i;
    st_kv_seq a, b;
    assert_int_equal(st_kv_seq_init(&a, 2, NULL), ST_OK);
    assert_int_equal(st_kv_seq_init(&b, 2, NULL), ST_OK);
    copies cp = {0};
    assert_int_equal(st_kv_seq_prepare(bm, &a, 0, 90, record_copy, &cp, NULL, NULL), ST_OK);
    st_kv_seq_commit(bm, &a, toks, 90);
    st_kv_seq_share(bm, &b, &a, 90);
    assert_int_equal(b.n_blocks, 2);
    assert_int_equal(b.n_registered, 1);
    assert_int_equal(st_kv_blocks_refs(bm, a.blocks[1]), 2);
    assert_int_equal(st_kv_seq_blocks_needed(bm, &b, 90, 1), 1);
    assert_int_equal(st_kv_seq_prepare(bm, &b, 90, 1, record_copy, &cp, NULL, NULL), ST_OK);
    assert_int_equal(cp.n, 1);
    assert_true(b.blocks[1] != a.blocks[1]);
    assert_int_equal(b.blocks[0], a.blocks[0]);
    assert_int_equal(st_kv_seq_blocks_needed(bm, &a, 90, 1), 0);
    assert_int_equal(st_kv_seq_prepare(bm, &a, 90, 1, record_copy, &cp, NULL, NULL), ST_OK);
    assert_int_equal(cp.n, 1);
    st_kv_seq_release(bm, &a);
    st_kv_seq_release(bm, &b);
    assert_counts(bm, 0, 1, 5);
    st_kv_seq_free(&a);
    st_kv_seq_free(&b);
    st_kv_blocks_free(bm);
}

/* Random sequences over a small pool and a small alphabet (so prefixes repeat), with 4
 * hash bits (so they collide): after every operation the manager's reference counts are
 * those the sequences hold, and every block a sequence holds below its registered mark
 * is registered with exactly its tokens after its predecessor. */
static void test_seq_random_walk(void **state) {
    (void)state;
    enum { NB = 24, NS = 6, CAP = 6 };
    st_kv_blocks *bm = NULL;
    assert_int_equal(st_kv_blocks_init(NB, 4, &bm, NULL), ST_OK);
    st_kv_seq seq[NS];
    int32_t toks[NS][CAP * T];
    int64_t len[NS] = {0}, computed[NS] = {0};
    for (int s = 0; s < NS; s++) assert_int_equal(st_kv_seq_init(&seq[s], CAP, NULL), ST_OK);
    uint64_t rng = 12345;
    copies cp = {0};
    int64_t n_hit = 0, n_copied = 0;
    for (int step = 0; step < 4000; step++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        const uint32_t x = (uint32_t)(rng >> 33);
        const int s = (int)(x % NS);
        if (len[s] == 0) { /* start: a prompt from a 2-letter alphabet, in whole blocks of one letter */
            len[s] = 1 + (int64_t)((x >> 8) % (CAP * T));
            for (int64_t i = 0; i < len[s]; i++) toks[s][i] = (int32_t)(((x >> (12 + (i / T) % 16)) & 1) * 3 + 1);
            const int64_t hit = st_kv_seq_match(bm, &seq[s], toks[s], len[s]);
            computed[s] = hit < len[s] ? hit : len[s] - 1;
            n_hit += hit;
        } else if ((x >> 8) % 8 == 0 || computed[s] == len[s]) { /* end */
            st_kv_seq_release(bm, &seq[s]);
            len[s] = computed[s] = 0;
        } else { /* compute a chunk, if the blocks allow */
            const int64_t want = 1 + (int64_t)((x >> 12) % 100), n0 = len[s] - computed[s];
            const int64_t n = st_kv_seq_fit(bm, &seq[s], computed[s], want < n0 ? want : n0,
                                            st_kv_blocks_n_available(bm));
            cp.n = 0;
            assert_int_equal(st_kv_seq_prepare(bm, &seq[s], computed[s], n, record_copy, &cp, &n_copied, NULL), ST_OK);
            computed[s] += n;
            st_kv_seq_commit(bm, &seq[s], toks[s], computed[s]);
        }
        int32_t refs[NB] = {0};
        for (int q = 0; q < NS; q++) {
            for (int32_t k = 0; k < seq[q].n_blocks; k++) refs[seq[q].blocks[k]]++;
            for (int32_t k = 0; k < seq[q].n_registered; k++) {
                const int32_t parent = k > 0 ? seq[q].blocks[k - 1] : -1;
                assert_int_equal(st_kv_blocks_lookup(bm, parent, toks[q] + (size_t)k * T), seq[q].blocks[k]);
            }
        }
        st_error err = {0};
        if (st_kv_blocks_check(bm, refs, &err) != ST_OK) fail_msg("step %d: %s", step, err.message);
    }
    for (int s = 0; s < NS; s++) {
        st_kv_seq_release(bm, &seq[s]);
        st_kv_seq_free(&seq[s]);
    }
    st_kv_blocks_counts c;
    st_kv_blocks_get_counts(bm, &c);
    assert_int_equal(c.used, 0);
    assert_true(c.cached > 0);
    assert_true(n_hit > 100 * T && n_copied > 10); /* the walk did reuse prefixes and copy blocks */
    st_kv_blocks_free(bm);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_rejects),
        cmocka_unit_test(test_alloc_ref_unref),
        cmocka_unit_test(test_prefix_cache_and_eviction),
        cmocka_unit_test(test_collisions_verified),
        cmocka_unit_test(test_check_catches_wrong_refs),
        cmocka_unit_test(test_seq_match_commit_cow),
        cmocka_unit_test(test_seq_share_partial),
        cmocka_unit_test(test_seq_random_walk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
