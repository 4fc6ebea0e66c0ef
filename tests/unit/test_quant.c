/*
 * Dequantization (src/quant/): every supported type against
 *   - an independent reference (test_quant_common.h: one formula per value index, in
 *     double, rounded to f32 once; exact by construction, so compared bit for bit), on
 *     random blocks, from aligned and unaligned addresses;
 *   - the committed vectors of the `gguf` package's dequantizer (tests/data/quant/, made
 *     and re-checked by tests/python/test_quant_vectors.py), bit for bit.
 * And the type checks that turn a file's unsupported type into a clear error.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "stride/quant.h"
#include "test_quant_common.h"

static void expect_bits_equal(const char *what, const float *got, const float *want, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t a, b;
        memcpy(&a, &got[i], 4);
        memcpy(&b, &want[i], 4);
        if (a != b) fail_msg("%s: value %lld is %.9g (0x%08x), expected %.9g (0x%08x)", what, (long long)i,
                             (double)got[i], a, (double)want[i], b);
    }
}

static void test_supported(void **state) {
    (void)state;
    for (int i = 0; i < TQ_N_TYPES; i++) assert_true(st_quant_supported(tq_types[i]));
    const st_type no[] = {ST_TYPE_F32, ST_TYPE_F16, ST_TYPE_BF16, ST_TYPE_Q8_1, ST_TYPE_IQ2_XXS,
                          ST_TYPE_IQ4_NL, ST_TYPE_TQ1_0, ST_TYPE_MXFP4, ST_TYPE_I32, ST_TYPE_COUNT};
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) assert_false(st_quant_supported(no[i]));
    assert_false(st_quant_supported((st_type)4)); /* a removed ggml id */
}

static void test_check_weight_type(void **state) {
    (void)state;
    st_error err = {0};
    assert_int_equal(st_quant_check_weight_type(ST_TYPE_F16, "mul_mat", &err), ST_OK);
    assert_int_equal(st_quant_check_weight_type(ST_TYPE_BF16, "mul_mat", &err), ST_OK);
    assert_int_equal(st_quant_check_weight_type(ST_TYPE_Q4_K, "mul_mat", &err), ST_OK);
    assert_int_equal(st_quant_check_weight_type(ST_TYPE_IQ2_XXS, "mul_mat", &err), ST_ERROR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "mul_mat"));
    assert_non_null(strstr(err.message, "iq2_xxs"));
    assert_non_null(strstr(err.message, "q4_K")); /* the list of what is supported */
    assert_int_equal(st_quant_check_weight_type(ST_TYPE_I32, "get_rows", &err), ST_ERROR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "i32"));
    assert_int_equal(st_quant_check_weight_type(ST_TYPE_COUNT, "get_rows", NULL), ST_ERROR_UNSUPPORTED);
}

static void test_random_blocks_against_reference(void **state) {
    (void)state;
    for (int ti = 0; ti < TQ_N_TYPES; ti++) {
        const st_type type = tq_types[ti];
        const st_type_traits *tr = st_type_get_traits((uint32_t)type);
        const int64_t n_blocks = 7, n = n_blocks * tr->block_size;
        const size_t bytes = (size_t)n_blocks * tr->block_bytes;
        uint8_t *mem = malloc(bytes + 1);
        float *got = malloc((size_t)n * sizeof(float)), *want = malloc((size_t)n * sizeof(float));
        assert_true(mem && got && want);
        for (int shift = 0; shift < 2; shift++) { /* rows at any address (inside an mmap) */
            uint8_t *blocks = mem + shift;
            for (int rep = 0; rep < 20; rep++) {
                tq_random_blocks(type, blocks, n_blocks);
                tq_ref_row(type, blocks, want, n);
                memset(got, 0xff, (size_t)n * sizeof(float));
                st_quant_dequantize_row(type, blocks, got, n);
                char what[64];
                snprintf(what, sizeof(what), "%s (offset %d, rep %d)", tr->name, shift, rep);
                expect_bits_equal(what, got, want, n);
                /* a row is the concatenation of its blocks */
                st_quant_dequantize_row(type, blocks + 3 * tr->block_bytes, got, tr->block_size);
                expect_bits_equal(what, got, want + 3 * tr->block_size, tr->block_size);
            }
        }
        free(mem);
        free(got);
        free(want);
    }
}

/* Reads a whole file; NULL (and a message) when it is missing. */
static void *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(len > 0 ? (size_t)len : 1);
    if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = (size_t)len;
    return buf;
}

static void test_gguf_package_vectors(void **state) {
    (void)state;
    int checked = 0;
    for (int ti = 0; ti < TQ_N_TYPES; ti++) {
        const st_type type = tq_types[ti];
        if (type == ST_TYPE_Q8_K) continue; /* the gguf package has no q8_K dequantizer */
        const st_type_traits *tr = st_type_get_traits((uint32_t)type);
        char bpath[512], fpath[512];
        snprintf(bpath, sizeof(bpath), "%s/quant/%s.blocks", STRIDE_TEST_DATA, tr->name);
        snprintf(fpath, sizeof(fpath), "%s/quant/%s.f32", STRIDE_TEST_DATA, tr->name);
        size_t nb = 0, nf = 0;
        uint8_t *blocks = read_file(bpath, &nb);
        float *want = read_file(fpath, &nf);
        if (!blocks || !want) fail_msg("missing %s or %s (tests/python/test_quant_vectors.py --write)", bpath, fpath);
        assert_int_equal(nb % tr->block_bytes, 0);
        const int64_t n = (int64_t)(nb / tr->block_bytes) * tr->block_size;
        assert_true(n > 0);
        assert_int_equal(nf, (size_t)n * sizeof(float));
        float *got = malloc(nf);
        assert_non_null(got);
        st_quant_dequantize_row(type, blocks, got, n);
        char what[64];
        snprintf(what, sizeof(what), "%s vs gguf.quants", tr->name);
        expect_bits_equal(what, got, want, n);
        /* and the independent reference agrees with gguf too */
        tq_ref_row(type, blocks, got, n);
        snprintf(what, sizeof(what), "%s reference vs gguf.quants", tr->name);
        expect_bits_equal(what, got, want, n);
        free(got);
        free(blocks);
        free(want);
        checked++;
    }
    assert_int_equal(checked, TQ_N_TYPES - 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_supported),
        cmocka_unit_test(test_check_weight_type),
        cmocka_unit_test(test_random_blocks_against_reference),
        cmocka_unit_test(test_gguf_package_vectors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
