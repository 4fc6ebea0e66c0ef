/* The batched layout of a prompt's expert slots (src/cuda/cuda_moe_group.h): hand-checked
 * plans, the invariants cuda_moe.cu's gather, batched GEMMs and scatter rely on over random
 * routings, and the errors. Plain C: runs without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cuda/cuda_moe_group.h"

static void expect_batches(const st_moe_group_plan *p, int64_t n, const int64_t *cols, const int64_t *first) {
    assert_int_equal(p->n_batches, n);
    for (int64_t b = 0; b < n; b++) {
        assert_int_equal(p->batch_cols[b], cols[b]);
        assert_int_equal(p->batch_first[b], first[b]);
    }
    assert_int_equal(p->batch_first[n], p->n_experts);
}

/* 5 tokens x 2 slots over 4 experts: counts 5, 3, 1, 1, all under the floor: one batch of
 * width 5, experts by count (ties by id), each one's slots in token order, then padding. */
static void test_small_counts_share_a_batch(void **state) {
    (void)state;
    const int32_t ids[] = {0, 1, 0, 2, 0, 1, 3, 0, 0, 1};
    st_moe_group_plan p;
    st_error err = {0};
    assert_int_equal(st_moe_group_plan_build(&p, ids, 2 * sizeof(int32_t), 2, 5, 4, 0, &err), ST_OK);
    assert_int_equal(p.n_experts, 4);
    expect_batches(&p, 1, (const int64_t[]){5}, (const int64_t[]){0});
    const int32_t experts[] = {0, 1, 2, 3};
    const int64_t col0[] = {0, 5, 10, 15};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(p.expert_of[i], experts[i]);
        assert_int_equal(p.col0[i], col0[i]);
    }
    const int32_t slots[20] = {0, 2, 4, 7, 8, 1, 5, 9, -1, -1, 3, -1, -1, -1, -1, 6, -1, -1, -1, -1};
    assert_int_equal(p.n_cols, 20);
    for (int c = 0; c < 20; c++) assert_int_equal(p.slot_of_col[c], slots[c]);
    st_moe_group_plan_free(&p);
}

/* 40 tokens of one slot: 20 to expert 0, 17 to expert 1, 3 to expert 2 (counted as the
 * floor, 16). 25% waste: one batch of 20; 10%: 17 and 16 within 10% of 17, not of 20; 0%:
 * a batch each (the ids strided: a row of 2 ints, the second ignored). */
static void test_waste_cuts_batches(void **state) {
    (void)state;
    int32_t ids[80];
    for (int m = 0; m < 40; m++) ids[2 * m] = m < 20 ? 0 : m < 37 ? 1 : 2, ids[2 * m + 1] = 99;
    const struct {
        int waste;
        int64_t n_batches, cols[3], first[3], n_cols;
    } cases[] = {
        {25, 1, {20}, {0}, 60},
        {10, 2, {20, 17}, {0, 1}, 54},
        {0, 3, {20, 17, 3}, {0, 1, 2}, 40},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        st_moe_group_plan p;
        st_error err = {0};
        assert_int_equal(st_moe_group_plan_build(&p, ids, 2 * sizeof(int32_t), 1, 40, 3, cases[k].waste, &err), ST_OK);
        expect_batches(&p, cases[k].n_batches, cases[k].cols, cases[k].first);
        assert_int_equal(p.n_cols, cases[k].n_cols);
        st_moe_group_plan_free(&p);
    }
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rng_next(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}

/* Random routings (uniform, and skewed towards a few experts): every slot in exactly one
 * column, inside its expert's columns, in token order, first; padding after; batches of
 * non-increasing width led by an expert of that count, each member within the waste. */
static void check_plan(const int32_t *ids, int64_t n_used, int64_t M, int64_t E, int waste) {
    st_moe_group_plan p;
    st_error err = {0};
    assert_int_equal(st_moe_group_plan_build(&p, ids, n_used * (int64_t)sizeof(int32_t), n_used, M, E, waste, &err),
                     ST_OK);
    int64_t *count = calloc((size_t)E, sizeof(int64_t)), *seen = calloc((size_t)(n_used * M), sizeof(int64_t));
    assert_non_null(count);
    assert_non_null(seen);
    for (int64_t s = 0; s < n_used * M; s++) count[ids[s]]++;
    int64_t active = 0, cols = 0;
    for (int64_t e = 0; e < E; e++) active += count[e] > 0;
    assert_int_equal(p.n_experts, active);
    for (int64_t b = 0; b < p.n_batches; b++) {
        const int64_t w = p.batch_cols[b];
        if (b > 0) assert_true(w < p.batch_cols[b - 1]);
        assert_int_equal(count[p.expert_of[p.batch_first[b]]], w);
        for (int64_t i = p.batch_first[b]; i < p.batch_first[b + 1]; i++) {
            const int32_t e = p.expert_of[i];
            const int64_t n = count[e], counted = n > ST_MOE_GROUP_FLOOR_COLS ? n : ST_MOE_GROUP_FLOOR_COLS;
            assert_true(n >= 1 && n <= w);
            assert_true(counted * 100 >= w * (100 - waste));
            assert_int_equal(p.col0[i], cols);
            int64_t last = -1;
            for (int64_t c = cols; c < cols + w; c++) {
                const int32_t s = p.slot_of_col[c];
                if (c - cols >= n) {
                    assert_int_equal(s, -1);
                    continue;
                }
                assert_true(s > last && s < n_used * M);
                assert_int_equal(ids[s], e);
                seen[s]++;
                last = s;
            }
            cols += w;
        }
    }
    assert_int_equal(p.n_cols, cols);
    for (int64_t s = 0; s < n_used * M; s++) assert_int_equal(seen[s], 1);
    free(count);
    free(seen);
    st_moe_group_plan_free(&p);
}

static void test_random_routings(void **state) {
    (void)state;
    static int32_t ids[8 * 512];
    const int64_t Ms[] = {8, 9, 33, 512}, Es[] = {8, 60, 64};
    const int wastes[] = {0, 25, 100};
    for (int mi = 0; mi < 4; mi++)
        for (int ei = 0; ei < 3; ei++)
            for (int skew = 0; skew < 2; skew++) {
                const int64_t M = Ms[mi], E = Es[ei], n_used = 8;
                for (int64_t s = 0; s < n_used * M; s++) {
                    const uint32_t r = rng_next();
                    ids[s] = (int32_t)(skew && r % 2 ? r / 2 % 3 : r % (uint32_t)E); /* skewed: half to 0-2 */
                }
                for (int wi = 0; wi < 3; wi++) check_plan(ids, n_used, M, E, wastes[wi]);
            }
}

static void test_errors_and_empty(void **state) {
    (void)state;
    st_moe_group_plan p;
    st_error err = {0};
    const int32_t bad[] = {0, 1, 2, 4};
    assert_int_equal(st_moe_group_plan_build(&p, bad, 2 * sizeof(int32_t), 2, 2, 4, 25, &err), ST_ERROR_INVALID);
    assert_non_null(strstr(err.message, "expert id 4 (token 1, slot 1) is outside [0, 4)"));
    assert_null(p.slot_of_col);
    const int32_t neg[] = {-1};
    assert_int_equal(st_moe_group_plan_build(&p, neg, sizeof(int32_t), 1, 1, 4, 25, &err), ST_ERROR_INVALID);
    assert_int_equal(st_moe_group_plan_build(&p, bad, 2 * sizeof(int32_t), 2, 2, 8, 101, &err), ST_ERROR_INVALID);
    assert_int_equal(st_moe_group_plan_build(&p, bad, 2 * sizeof(int32_t), 2, 0, 4, 25, &err), ST_OK);
    assert_int_equal(p.n_experts, 0);
    assert_int_equal(p.n_batches, 0);
    assert_int_equal(p.n_cols, 0);
    st_moe_group_plan_free(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_counts_share_a_batch),
        cmocka_unit_test(test_waste_cuts_batches),
        cmocka_unit_test(test_random_routings),
        cmocka_unit_test(test_errors_and_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
