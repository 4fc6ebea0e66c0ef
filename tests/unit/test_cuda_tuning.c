/* The CUDA tuning surface (src/cuda/cuda_tuning.h): per-architecture defaults and the
 * STRIDE_CUDA_TUNING parser, every key, both sides of every bound, and the errors. Plain
 * C: runs without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cuda/cuda_tuning.h"

static void test_defaults_by_architecture(void **state) {
    (void)state;
    const st_cuda_tuning h = st_cuda_tuning_default(9), a = st_cuda_tuning_default(8), t = st_cuda_tuning_default(7);
    assert_int_equal(h.rowblock, -1);
    assert_int_equal(h.rowblock_staged, -1);
    assert_int_equal(h.early_launch, CUDA_ROWBLOCK_ADD | CUDA_EARLY_ATTENTION | CUDA_EARLY_NORM_ADD | CUDA_EARLY_ROUTE |
                                         CUDA_EARLY_PARTIAL_ROWS | CUDA_EARLY_MOE_DOWN);
    assert_int_equal(h.norm_prepared, 1);
    assert_int_equal(h.norm_apart_waves, 4);
    assert_int_equal(h.moe_rowblock, CUDA_MOE_ROWBLOCK_ALL);
    assert_int_equal(h.flash_split, 0); /* by the rule */
    assert_int_equal(h.moe_group_waste, 25);
    assert_true(h.graphs);
    assert_int_equal(a.early_launch, 0);      /* programmatic dependent launch: sm_90 */
    assert_int_equal(a.rowblock_staged, -1);  /* cp.async: sm_80 */
    assert_int_equal(t.rowblock_staged, 0);
}

static void test_parse_every_key(void **state) {
    (void)state;
    st_cuda_tuning t = st_cuda_tuning_default(9);
    st_error err = {0};
    assert_int_equal(st_cuda_tuning_parse(&t,
                                          "rowblock=7,rowblock_staged=0,early_launch=31,norm_prepared=2,"
                                          "norm_apart_waves=0,moe_rowblock=2,flash_split=3,moe_group_waste=0,"
                                          "graphs=0",
                                          &err),
                     ST_OK);
    assert_int_equal(t.rowblock, 7);
    assert_int_equal(t.rowblock_staged, 0);
    assert_int_equal(t.early_launch, 31);
    assert_int_equal(t.norm_prepared, 2);
    assert_int_equal(t.norm_apart_waves, 0);
    assert_int_equal(t.moe_rowblock, CUDA_MOE_ROWBLOCK_DOWN);
    assert_int_equal(t.flash_split, 3);
    assert_int_equal(t.moe_group_waste, 0);
    assert_false(t.graphs);
    assert_int_equal(st_cuda_tuning_parse(&t, "", &err), ST_OK); /* nothing to change */
    assert_int_equal(st_cuda_tuning_parse(&t, "rowblock=-1,rowblock_staged=-1,graphs=1", &err), ST_OK);
    assert_int_equal(t.rowblock, -1);
    assert_int_equal(t.rowblock_staged, -1);
    assert_true(t.graphs);
}

static void expect_invalid(const char *spec, const char *needle) {
    st_cuda_tuning t = st_cuda_tuning_default(9);
    st_error err = {0};
    assert_int_equal(st_cuda_tuning_parse(&t, spec, &err), ST_ERROR_INVALID);
    assert_non_null(strstr(err.message, needle));
}

static void test_parse_errors(void **state) {
    (void)state;
    expect_invalid("rowblock=8", "rowblock=8");             /* past the mask */
    expect_invalid("rowblock=-2", "rowblock=-2");
    expect_invalid("rowblock_staged=-2", "rowblock_staged");
    expect_invalid("early_launch=512", "early_launch"); /* past CUDA_EARLY_ALL */
    expect_invalid("norm_prepared=3", "norm_prepared");
    expect_invalid("moe_rowblock=4", "moe_rowblock");
    expect_invalid("flash_split=17", "flash_split"); /* past CUDA_FLASH_MAX_SPLITS */
    expect_invalid("flash_split=-1", "flash_split");
    expect_invalid("moe_group_waste=101", "moe_group_waste"); /* a percentage */
    expect_invalid("moe_group_waste=-1", "moe_group_waste");
    expect_invalid("graphs=2", "graphs");
    expect_invalid("graphs=yes", "graphs");                 /* not an integer */
    expect_invalid("graphs=", "graphs");
    expect_invalid("pdl=10", "unknown key 'pdl'");
    expect_invalid("rowblock", "not key=value");
    expect_invalid("rowblock=3,nope=1", "unknown key 'nope'");
    expect_invalid("norm_apart_waves=99999999999999999999", "norm_apart_waves");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_by_architecture),
        cmocka_unit_test(test_parse_every_key),
        cmocka_unit_test(test_parse_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
