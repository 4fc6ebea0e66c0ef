/* The tensor descriptor: packed strides, byte sizes, and the contiguous-rows shape that
 * every weight has, padded or not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "stride/tensor.h"

static st_tensor make(st_type type, int64_t k, int64_t n, int64_t e) {
    st_tensor t = {.type = type, .ne = {k, n, e, 1}};
    return t;
}

static void test_packed_strides(void **state) {
    (void)state;
    st_tensor t = make(ST_TYPE_F16, 2048, 6144, 1);
    assert_true(st_tensor_set_packed_strides(&t));
    assert_int_equal(t.nb[0], 2);
    assert_int_equal(t.nb[1], 4096);
    assert_int_equal(t.nb[2], 4096 * 6144);
    assert_int_equal(t.nb[3], 4096 * 6144);
    assert_int_equal(st_tensor_nbytes(&t), 4096 * 6144);
    assert_int_equal(st_tensor_row_bytes(&t), 4096);
    assert_true(st_tensor_has_contiguous_rows(&t));
    assert_int_equal(st_tensor_nelements(&t), 2048 * 6144);

    st_tensor q = make(ST_TYPE_Q4_K, 512, 3, 2); /* 2 blocks per row */
    assert_true(st_tensor_set_packed_strides(&q));
    assert_int_equal(q.nb[0], 144);
    assert_int_equal(q.nb[1], 288);
    assert_int_equal(q.nb[2], 288 * 3);
    assert_int_equal(st_tensor_nbytes(&q), 288 * 3 * 2);

    st_tensor bad = make(ST_TYPE_Q4_K, 500, 3, 1); /* not whole blocks */
    assert_false(st_tensor_set_packed_strides(&bad));
    st_tensor huge = make(ST_TYPE_F32, INT64_C(1) << 40, INT64_C(1) << 40, 1);
    assert_false(st_tensor_set_packed_strides(&huge)); /* nb[2] overflows */
}

static void test_contiguous_rows_padded(void **state) {
    (void)state;
    /* a padded 3D expert tensor: rows padded by 128 B, experts packed one after another */
    st_tensor t = make(ST_TYPE_BF16, 1024, 2048, 4);
    assert_true(st_tensor_set_packed_strides(&t));
    t.nb[1] = 2048 + 128;
    t.nb[2] = t.nb[1] * 2048;
    t.nb[3] = t.nb[2] * 4;
    assert_true(st_tensor_has_contiguous_rows(&t));
    assert_int_equal(st_tensor_nbytes(&t), (2048 + 128) * 2048 * 4);

    st_tensor gap = t;
    gap.nb[2] += 64; /* a gap between experts is not the weight shape */
    assert_false(st_tensor_has_contiguous_rows(&gap));
    st_tensor overlap = t;
    overlap.nb[1] = 2046; /* rows overlapping */
    overlap.nb[2] = overlap.nb[1] * 2048;
    overlap.nb[3] = overlap.nb[2] * 4;
    assert_false(st_tensor_has_contiguous_rows(&overlap));
    st_tensor strided_elems = t;
    strided_elems.nb[0] = 4;
    assert_false(st_tensor_has_contiguous_rows(&strided_elems));
}

static void test_empty_tensor(void **state) {
    (void)state;
    st_tensor t = make(ST_TYPE_F32, 16, 0, 1);
    assert_true(st_tensor_set_packed_strides(&t));
    assert_int_equal(st_tensor_nbytes(&t), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_packed_strides),
        cmocka_unit_test(test_contiguous_rows_padded),
        cmocka_unit_test(test_empty_tensor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
