/* Type traits and the F16/BF16 <-> F32 conversions, checked exhaustively over all 65,536
 * half and bfloat16 values against references computed independently in double. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "stride/types.h"

static float bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static uint32_t f32_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

/* IEEE binary16 value of h, from its definition. */
static double half_reference(uint16_t h) {
    int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v;
    if (exp == 0x1f) v = mant ? NAN : INFINITY;
    else if (exp == 0) v = ldexp((double)mant, -24);
    else v = ldexp((double)(mant | 0x400), exp - 25);
    return sign ? -v : v;
}

static void test_f16_to_f32_all_values(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        double ref = half_reference((uint16_t)h);
        float got = st_f16_to_f32((uint16_t)h);
        if (isnan(ref)) {
            assert_true(isnan(got));
        } else {
            assert_true((double)got == ref);
            assert_int_equal(signbit(got) != 0, (h >> 15) != 0); /* -0 stays -0 */
        }
    }
}

static void test_f16_round_trip_all_values(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t back = st_f32_to_f16(st_f16_to_f32((uint16_t)h));
        if (((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff)) {
            assert_true(isnan(st_f16_to_f32(back))); /* NaN stays NaN */
            assert_int_equal(back & 0x8000, h & 0x8000);
        } else {
            assert_int_equal(back, h);
        }
    }
}

/* Between every pair of adjacent finite halves (a, a+1): the exact midpoint rounds to the
 * one with an even mantissa, and one f32 ulp either side rounds to the nearer one. */
static void test_f32_to_f16_rounding_all_midpoints(void **state) {
    (void)state;
    for (uint32_t sign = 0; sign <= 0x8000; sign += 0x8000) {
        for (uint32_t a = 0; a < 0x7bff; a++) { /* 0x7bff = 65504, the largest finite */
            uint16_t lo = (uint16_t)(sign | a), hi = (uint16_t)(sign | (a + 1));
            double mid = (half_reference(lo) + half_reference(hi)) / 2.0;
            float m = (float)mid;
            assert_true((double)m == mid); /* a half midpoint needs 12 bits: exact in f32 */
            uint16_t even = (a & 1) ? hi : lo;
            assert_int_equal(st_f32_to_f16(m), even);
            float toward_lo = nextafterf(m, sign ? INFINITY : -INFINITY);
            float toward_hi = nextafterf(m, sign ? -INFINITY : INFINITY);
            assert_int_equal(st_f32_to_f16(toward_lo), lo);
            assert_int_equal(st_f32_to_f16(toward_hi), hi);
        }
    }
}

static void test_f32_to_f16_edges(void **state) {
    (void)state;
    assert_int_equal(st_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(st_f32_to_f16(nextafterf(65520.0f, 0.0f)), 0x7bff);
    assert_int_equal(st_f32_to_f16(65520.0f), 0x7c00); /* ties to even: 65536 = inf */
    assert_int_equal(st_f32_to_f16(1e10f), 0x7c00);
    assert_int_equal(st_f32_to_f16(-1e10f), 0xfc00);
    assert_int_equal(st_f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(st_f32_to_f16(-INFINITY), 0xfc00);
    assert_true(isnan(st_f16_to_f32(st_f32_to_f16(NAN))));
    assert_int_equal(st_f32_to_f16(-0.0f), 0x8000);
    /* smallest subnormal 2^-24; half of it (2^-25) ties to even = 0; just above rounds up */
    assert_int_equal(st_f32_to_f16(ldexpf(1.0f, -24)), 0x0001);
    assert_int_equal(st_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);
    assert_int_equal(st_f32_to_f16(nextafterf(ldexpf(1.0f, -25), 1.0f)), 0x0001);
    assert_int_equal(st_f32_to_f16(ldexpf(1.0f, -26)), 0x0000);
    assert_int_equal(st_f32_to_f16(1e-30f), 0x0000);
    assert_int_equal(st_f32_to_f16(ldexpf(1.0f, -14)), 0x0400); /* smallest normal */
}

static void test_bf16_all_values(void **state) {
    (void)state;
    for (uint32_t b = 0; b < 65536; b++) {
        float f = st_bf16_to_f32((uint16_t)b);
        assert_int_equal(f32_to_bits(f), b << 16);
        uint16_t back = st_f32_to_bf16(f);
        if (isnan(f)) assert_true(isnan(st_bf16_to_f32(back)));
        else assert_int_equal(back, b);
    }
}

static void test_f32_to_bf16_rounding_all_midpoints(void **state) {
    (void)state;
    for (uint32_t b = 0; b < 0xffff; b++) {
        uint32_t e = (b >> 7) & 0xff;
        if (e == 0xff || (((b + 1) >> 7) & 0xff) == 0xff) continue; /* inf/nan neighbours */
        if ((b & 0x7fff) == 0x7fff) continue;                       /* crosses the sign */
        uint32_t mid_bits = (b << 16) | 0x8000u; /* exact midpoint of b and b+1 */
        uint16_t even = (b & 1) ? (uint16_t)(b + 1) : (uint16_t)b;
        assert_int_equal(st_f32_to_bf16(bits_to_f32(mid_bits)), even);
        assert_int_equal(st_f32_to_bf16(bits_to_f32(mid_bits - 1)), b);
        assert_int_equal(st_f32_to_bf16(bits_to_f32(mid_bits + 1)), b + 1);
    }
    assert_int_equal(st_f32_to_bf16(bits_to_f32(0x7f7fffffu)), 0x7f80); /* max f32 -> inf */
    assert_true(isnan(st_bf16_to_f32(st_f32_to_bf16(NAN))));
}

static void test_row_conversions(void **state) {
    (void)state;
    float src[7] = {0.0f, 1.0f, -2.5f, 3.140625f, 65504.0f, -1e-3f, 1e6f};
    uint16_t h[7], b[7];
    float back[7];
    st_f32_to_f16_row(src, h, 7);
    st_f32_to_bf16_row(src, b, 7);
    for (int i = 0; i < 7; i++) {
        assert_int_equal(h[i], st_f32_to_f16(src[i]));
        assert_int_equal(b[i], st_f32_to_bf16(src[i]));
    }
    st_f16_to_f32_row(h, back, 7);
    for (int i = 0; i < 7; i++) assert_true(back[i] == st_f16_to_f32(h[i]));
    st_bf16_to_f32_row(b, back, 7);
    for (int i = 0; i < 7; i++) assert_true(back[i] == st_bf16_to_f32(b[i]));
}

static void test_traits(void **state) {
    (void)state;
    struct { uint32_t id; const char *name; int64_t block; size_t bytes; bool is_float; } cases[] = {
        {ST_TYPE_F32, "f32", 1, 4, true},      {ST_TYPE_F16, "f16", 1, 2, true},
        {ST_TYPE_BF16, "bf16", 1, 2, true},    {ST_TYPE_Q8_0, "q8_0", 32, 34, false},
        {ST_TYPE_Q4_K, "q4_K", 256, 144, false}, {ST_TYPE_Q6_K, "q6_K", 256, 210, false},
        {ST_TYPE_Q5_K, "q5_K", 256, 176, false}, {ST_TYPE_I32, "i32", 1, 4, false},
        {ST_TYPE_F64, "f64", 1, 8, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const st_type_traits *t = st_type_get_traits(cases[i].id);
        assert_non_null(t);
        assert_string_equal(t->name, cases[i].name);
        assert_int_equal(t->block_size, cases[i].block);
        assert_int_equal(t->block_bytes, cases[i].bytes);
        assert_int_equal(t->is_float, cases[i].is_float);
        st_type parsed;
        assert_true(st_type_from_name(cases[i].name, &parsed));
        assert_int_equal(parsed, cases[i].id);
    }
    /* removed and out-of-range ids are unknown */
    uint32_t invalid[] = {4, 5, 31, 32, 33, 36, 37, 38, ST_TYPE_COUNT, 1000, UINT32_MAX};
    for (size_t i = 0; i < sizeof(invalid) / sizeof(invalid[0]); i++) {
        assert_null(st_type_get_traits(invalid[i]));
        assert_string_equal(st_type_name(invalid[i]), "unknown");
    }
    st_type parsed;
    assert_true(st_type_from_name("BF16", &parsed));
    assert_int_equal(parsed, ST_TYPE_BF16);
    assert_false(st_type_from_name("f1", &parsed));
    assert_false(st_type_from_name("f166", &parsed));
    assert_false(st_type_from_name("", &parsed));
}

static void test_row_bytes(void **state) {
    (void)state;
    size_t n;
    assert_true(st_type_row_bytes(ST_TYPE_F16, 2048, &n));
    assert_int_equal(n, 4096);
    assert_true(st_type_row_bytes(ST_TYPE_Q4_K, 2048, &n));
    assert_int_equal(n, 8 * 144);
    assert_false(st_type_row_bytes(ST_TYPE_Q4_K, 2047, &n)); /* not whole blocks */
    assert_false(st_type_row_bytes(ST_TYPE_Q8_0, 33, &n));
    assert_true(st_type_row_bytes(ST_TYPE_Q8_0, 0, &n));
    assert_int_equal(n, 0);
    assert_false(st_type_row_bytes(ST_TYPE_F32, -1, &n));
    assert_false(st_type_row_bytes(ST_TYPE_F64, INT64_MAX, &n)); /* overflows size_t */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_to_f32_all_values),
        cmocka_unit_test(test_f16_round_trip_all_values),
        cmocka_unit_test(test_f32_to_f16_rounding_all_midpoints),
        cmocka_unit_test(test_f32_to_f16_edges),
        cmocka_unit_test(test_bf16_all_values),
        cmocka_unit_test(test_f32_to_bf16_rounding_all_midpoints),
        cmocka_unit_test(test_row_conversions),
        cmocka_unit_test(test_traits),
        cmocka_unit_test(test_row_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
