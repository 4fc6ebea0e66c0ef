/*
 * CPU ops on quantized weights: get_rows, mul_mat and mul_mat_id for every supported
 * type, against a float64 reference built from the independent reference dequantizer
 * (test_quant_common.h), for K of several blocks, N not a multiple of 4 (and over
 * several row blocks), M = 1, 5, 16, on 1 and 2 threads.
 *
 * TOLERANCE. The reference weights are the exact dequantized values (checked bit for bit
 * against the dequantizer and the gguf package in test_quant.c), so the weight format
 * adds no error of its own and the bound is the one of an f32 dot product
 * (test_cpu_ops_matmul.c explains it): |y - y_ref| <= (K + 2) * 2^-24 * sum |w x|.
 * Stronger still, and exact: a quantized product equals, bit for bit, the product with
 * an F32 weight holding the dequantized values (the same dot product over the same f32
 * row), and the thread count changes no bit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_cpu_ops_common.h"
#include "test_quant_common.h"

#define MATMUL_BOUND_FACTOR(k) ((double)((k) + 2) * TT_U32)

/* A quantized weight [K, N, E] of random blocks; extra_row_bytes > 0 leaves a gap after
 * every row (a whole number of blocks: the ops take any row stride). */
typedef struct qw {
    st_tensor t;
    uint8_t *mem;
    float *deq; /* [E][N][K] the reference dequantization */
} qw;

static qw qw_new(st_type type, int64_t k, int64_t n, int64_t e, size_t extra_row_bytes) {
    const st_type_traits *tr = st_type_get_traits((uint32_t)type);
    qw w;
    memset(&w, 0, sizeof(w));
    w.t.type = type;
    w.t.ne[0] = k;
    w.t.ne[1] = n;
    w.t.ne[2] = e;
    w.t.ne[3] = 1;
    const size_t row = (size_t)(k / tr->block_size) * tr->block_bytes;
    w.t.nb[0] = tr->block_bytes;
    w.t.nb[1] = row + extra_row_bytes;
    w.t.nb[2] = w.t.nb[1] * (size_t)n;
    w.t.nb[3] = w.t.nb[2] * (size_t)e;
    w.mem = malloc(w.t.nb[3] + 1);
    w.deq = malloc((size_t)(k * n * e) * sizeof(float));
    if (!w.mem || !w.deq) abort();
    memset(w.mem, 0xff, w.t.nb[3] + 1);
    w.t.data = w.mem;
    for (int64_t r = 0; r < n * e; r++) {
        uint8_t *rp = w.mem + (size_t)r * w.t.nb[1];
        tq_random_blocks(type, rp, k / tr->block_size);
        tq_ref_row(type, rp, w.deq + r * k, k);
    }
    return w;
}

static void qw_free(qw *w) {
    free(w->mem);
    free(w->deq);
}

/* An F32 tensor [K, N, E] holding w's dequantized values. */
static tt qw_as_f32(const qw *w) {
    tt f = tt_new(ST_TYPE_F32, w->t.ne[0], w->t.ne[1], w->t.ne[2], 1, 0);
    for (int64_t i = 0; i < tt_count(&f); i++) tt_set(&f, i, w->deq[i]);
    return f;
}

static void ref_dot(const float *wrow, const tt *x, int64_t x_row, int64_t k, double *ref, double *bound) {
    double s = 0, a = 0;
    for (int64_t i = 0; i < k; i++) {
        double p = (double)wrow[i] * tt_get(x, x_row * k + i);
        s += p;
        a += fabs(p);
    }
    *ref = s;
    *bound = MATMUL_BOUND_FACTOR(k) * a;
}

static void check_mul_mat(st_type type, int64_t blocks_per_row, int64_t n, int64_t m, size_t extra) {
    const st_type_traits *tr = st_type_get_traits((uint32_t)type);
    const int64_t k = blocks_per_row * tr->block_size;
    qw w = qw_new(type, k, n, 1, extra);
    tt wf = qw_as_f32(&w);
    tt x = tt_new(ST_TYPE_F32, k, m, 1, 1, m > 1 ? 36 : 0);
    tt_fill(&x, -1, 1);
    double *ref = malloc(sizeof(double) * (size_t)(n * m)), *bound = malloc(sizeof(double) * (size_t)(n * m));
    assert_true(ref && bound);
    for (int64_t j = 0; j < m; j++)
        for (int64_t r = 0; r < n; r++) ref_dot(w.deq + r * k, &x, j, k, &ref[j * n + r], &bound[j * n + r]);

    tt out[2], out_f32 = tt_new(ST_TYPE_F32, n, m, 1, 1, 0);
    for (int th = 0; th < 2; th++) {
        st_cpu_set_threads(th + 1);
        out[th] = tt_new(ST_TYPE_F32, n, m, 1, 1, 8);
        assert_int_equal(st_cpu_mul_mat(&out[th].t, &w.t, &x.t, NULL), ST_OK);
        char what[96];
        snprintf(what, sizeof(what), "mul_mat %s K=%lld N=%lld M=%lld stride+%zu %d threads", tr->name,
                 (long long)k, (long long)n, (long long)m, extra, th + 1);
        assert_true(tt_close(what, &out[th], ref, bound));
        assert_true(tt_gaps_untouched(&out[th]));
    }
    assert_true(tt_bit_equal(&out[0], &out[1]));
    assert_int_equal(st_cpu_mul_mat(&out_f32.t, &wf.t, &x.t, NULL), ST_OK);
    assert_true(tt_bit_equal(&out[0], &out_f32)); /* dequantized in the loop == f32 weight */
    st_cpu_set_threads(0);
    for (int th = 0; th < 2; th++) tt_free(&out[th]);
    tt_free(&out_f32);
    tt_free(&wf);
    tt_free(&x);
    qw_free(&w);
    free(ref);
    free(bound);
}

static void test_mul_mat_quant(void **state) {
    (void)state;
    static const int64_t ms[] = {1, 5, 16};
    for (int ti = 0; ti < TQ_N_TYPES; ti++) {
        const st_type type = tq_types[ti];
        const size_t block_bytes = st_type_get_traits((uint32_t)type)->block_bytes;
        for (int mi = 0; mi < 3; mi++) {
            check_mul_mat(type, 3, 13, ms[mi], 0); /* several blocks per row, N odd */
            check_mul_mat(type, 1, 3, ms[mi], 0);  /* one block, fewer rows than a group */
        }
        /* many row blocks with a partial last one (the 32 KiB block holds <= 64 rows) */
        check_mul_mat(type, 2, 70, 5, 0);
        /* a row stride beyond the packed row: never planned for quantized weights, but
         * the op honours nb[1] like for every other weight */
        check_mul_mat(type, 2, 7, 5, block_bytes);
    }
}

static void test_get_rows_quant(void **state) {
    (void)state;
    const int32_t ids[6] = {3, 0, 10, 3, 7, 1};
    for (int ti = 0; ti < TQ_N_TYPES; ti++) {
        const st_type type = tq_types[ti];
        const int64_t k = 2 * st_type_get_traits((uint32_t)type)->block_size, v = 11, m = 6;
        qw w = qw_new(type, k, v, 1, 0);
        tt out[2];
        for (int th = 0; th < 2; th++) {
            st_cpu_set_threads(th + 1);
            out[th] = tt_new(ST_TYPE_F32, k, m, 1, 1, 64);
            assert_int_equal(st_cpu_get_rows(&out[th].t, &w.t, ids, NULL), ST_OK);
            for (int64_t j = 0; j < m; j++)
                for (int64_t i = 0; i < k; i++) {
                    float got = (float)tt_get(&out[th], j * k + i), want = w.deq[ids[j] * k + i];
                    assert_memory_equal(&got, &want, sizeof(float));
                }
            assert_true(tt_gaps_untouched(&out[th]));
        }
        assert_true(tt_bit_equal(&out[0], &out[1]));
        st_error err = {0};
        const int32_t bad[1] = {11};
        tt one = tt_new(ST_TYPE_F32, k, 1, 1, 1, 0);
        assert_int_equal(st_cpu_get_rows(&one.t, &w.t, bad, &err), ST_ERROR_INVALID);
        tt_free(&one);
        for (int th = 0; th < 2; th++) tt_free(&out[th]);
        qw_free(&w);
    }
    st_cpu_set_threads(0);
}

static void test_mul_mat_id_quant(void **state) {
    (void)state;
    const int64_t n = 13, e = 5, n_used = 3, m = 4;
    const int32_t ids[4 * 3] = {4, 0, 1, 3, 4, 0, 4, 1, 3, 0, 3, 4};
    for (int ti = 0; ti < TQ_N_TYPES; ti++) {
        const st_type type = tq_types[ti];
        const int64_t k = 2 * st_type_get_traits((uint32_t)type)->block_size;
        qw w = qw_new(type, k, n, e, 0);
        tt x = tt_new(ST_TYPE_F32, k, n_used, m, 1, 20); /* one input per slot */
        tt_fill(&x, -1, 1);
        double ref[13 * 3 * 4], bound[13 * 3 * 4];
        for (int64_t t = 0; t < m; t++)
            for (int64_t j = 0; j < n_used; j++)
                for (int64_t r = 0; r < n; r++) {
                    int64_t at = (t * n_used + j) * n + r;
                    ref_dot(w.deq + (ids[t * n_used + j] * n + r) * k, &x, t * n_used + j, k, &ref[at], &bound[at]);
                }
        tt out[2];
        for (int th = 0; th < 2; th++) {
            st_cpu_set_threads(th + 1);
            out[th] = tt_new(ST_TYPE_F32, n, n_used, m, 1, 12);
            assert_int_equal(st_cpu_mul_mat_id(&out[th].t, &w.t, &x.t, ids, NULL), ST_OK);
            char what[96];
            snprintf(what, sizeof(what), "mul_mat_id %s %d threads", st_type_name(type), th + 1);
            assert_true(tt_close(what, &out[th], ref, bound));
            assert_true(tt_gaps_untouched(&out[th]));
        }
        assert_true(tt_bit_equal(&out[0], &out[1]));
        /* each slot equals mul_mat with that expert's quantized matrix, bit for bit */
        for (int64_t s = 0; s < n_used * m; s++) {
            st_tensor we = w.t;
            we.ne[2] = 1;
            we.data = (char *)w.t.data + (size_t)ids[s] * w.t.nb[2];
            st_tensor xv = x.t;
            xv.ne[1] = xv.ne[2] = 1;
            xv.data = tt_ptr(&x, s * k);
            tt y = tt_new(ST_TYPE_F32, n, 1, 1, 1, 0);
            assert_int_equal(st_cpu_mul_mat(&y.t, &we, &xv, NULL), ST_OK);
            assert_memory_equal(y.t.data, tt_ptr(&out[0], s * n), n * sizeof(float));
            tt_free(&y);
        }
        for (int th = 0; th < 2; th++) tt_free(&out[th]);
        tt_free(&x);
        qw_free(&w);
    }
    st_cpu_set_threads(0);
}

/* A weight type stride cannot read comes from a file: an error naming it, not an abort. */
static void test_unsupported_type_is_an_error(void **state) {
    (void)state;
    const st_type bad_types[] = {ST_TYPE_IQ2_XXS, ST_TYPE_Q8_1, ST_TYPE_TQ2_0};
    for (size_t i = 0; i < sizeof(bad_types) / sizeof(bad_types[0]); i++) {
        const st_type_traits *tr = st_type_get_traits((uint32_t)bad_types[i]);
        uint8_t blocks[4 * 300] = {0};
        st_tensor w = {.type = bad_types[i], .ne = {tr->block_size, 2, 2, 1}, .data = blocks};
        w.nb[0] = tr->block_bytes;
        w.nb[1] = tr->block_bytes;
        w.nb[2] = 2 * w.nb[1];
        w.nb[3] = 2 * w.nb[2];
        st_tensor w2 = w;
        w2.ne[2] = 1;
        tt x = tt_new(ST_TYPE_F32, tr->block_size, 1, 1, 1, 0);
        tt_fill(&x, -1, 1);
        tt y = tt_new(ST_TYPE_F32, 2, 1, 1, 1, 0);
        tt rows = tt_new(ST_TYPE_F32, tr->block_size, 1, 1, 1, 0);
        tt y_id = tt_new(ST_TYPE_F32, 2, 1, 1, 1, 0);
        const int32_t ids[1] = {1};
        st_error err = {0};
        assert_int_equal(st_cpu_mul_mat(&y.t, &w2, &x.t, &err), ST_ERROR_UNSUPPORTED);
        assert_non_null(strstr(err.message, tr->name));
        assert_int_equal(st_cpu_get_rows(&rows.t, &w2, ids, &err), ST_ERROR_UNSUPPORTED);
        assert_non_null(strstr(err.message, tr->name));
        assert_int_equal(st_cpu_mul_mat_id(&y_id.t, &w, &x.t, ids, &err), ST_ERROR_UNSUPPORTED);
        assert_non_null(strstr(err.message, tr->name));
        assert_true(isnan(tt_get(&y, 0)) && isnan(tt_get(&rows, 0))); /* nothing written */
        tt_free(&x);
        tt_free(&y);
        tt_free(&rows);
        tt_free(&y_id);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mul_mat_quant),
        cmocka_unit_test(test_get_rows_quant),
        cmocka_unit_test(test_mul_mat_id_quant),
        cmocka_unit_test(test_unsupported_type_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
