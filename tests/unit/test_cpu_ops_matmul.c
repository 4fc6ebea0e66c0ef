/*
 * CPU ops: half conversion, row lookup, mul_mat and mul_mat_id against a float64
 * reference, for F32/F16/BF16 weights, packed and padded strides, 1 and 2 threads.
 *
 * TOLERANCE. The reference uses the very weights the op reads (rounded to their type,
 * then widened to double) and the same f32 inputs, so the weight type adds no error of
 * its own and one bound serves every type. An f32 dot product of K terms, each product
 * rounded and summed in any order, is within gamma_K ~ K * 2^-24 of the exact value
 * relative to sum |w x| (Higham, "Accuracy and Stability of Numerical Algorithms",
 * 3.1); with one more rounding per product the per-element bound used is
 *     |y - y_ref| <= (K + 2) * 2^-24 * sum_k |w[n,k] x[m,k]|.
 * It is a worst case: the observed normalised errors are far below it.
 * Row lookup is a copy: exact.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cpu/cpu_internal.h"
#include "test_cpu_ops_common.h"

#define MATMUL_BOUND_FACTOR(k) ((double)((k) + 2) * TT_U32)

static void test_f16_conversion_exact(void **state) {
    (void)state;
    /* the vectorisable converter of the CPU backend equals core's scalar one everywhere */
    for (uint32_t h = 0; h < 65536; h++) {
        float a = cpu_f16_to_f32((uint16_t)h), b = st_f16_to_f32((uint16_t)h);
        uint32_t ua, ub;
        memcpy(&ua, &a, 4);
        memcpy(&ub, &b, 4);
        if (ua != ub) fail_msg("half 0x%04x: 0x%08x vs 0x%08x", h, ua, ub);
        assert_true(cpu_bf16_to_f32((uint16_t)h) == st_bf16_to_f32((uint16_t)h) ||
                    isnan(st_bf16_to_f32((uint16_t)h)));
    }
}

static void test_get_rows(void **state) {
    (void)state;
    const int64_t k = 37, v = 11, m = 6;
    const int32_t ids[6] = {3, 0, 10, 3, 7, 1};
    for (int ti = 0; ti < 3; ti++) {
        tt packed = tt_new(tt_weight_types[ti], k, v, 1, 1, 0);
        tt padded = tt_new(tt_weight_types[ti], k, v, 1, 1, TT_PAD);
        tt_fill(&packed, -1, 1);
        tt_copy(&padded, &packed);
        tt out[2][2]; /* [packed/padded][threads 1/2] */
        for (int p = 0; p < 2; p++) {
            for (int th = 0; th < 2; th++) {
                st_cpu_set_threads(th + 1);
                out[p][th] = tt_new(ST_TYPE_F32, k, m, 1, 1, p ? 64 : 0);
                assert_int_equal(st_cpu_get_rows(&out[p][th].t, p ? &padded.t : &packed.t, ids, NULL), ST_OK);
                for (int64_t j = 0; j < m; j++)
                    for (int64_t i = 0; i < k; i++)
                        assert_true(tt_get(&out[p][th], j * k + i) == tt_get(&packed, ids[j] * k + i));
                assert_true(tt_gaps_untouched(&out[p][th]));
            }
        }
        assert_true(tt_bit_equal(&out[0][0], &out[1][0]) && tt_bit_equal(&out[0][0], &out[1][1]));
        /* a bad id is an error, and nothing is written */
        tt bad_out = tt_new(ST_TYPE_F32, k, 2, 1, 1, 0);
        const int32_t bad[2][2] = {{0, 11}, {-1, 0}};
        for (int b = 0; b < 2; b++) {
            st_error err = {0};
            assert_int_equal(st_cpu_get_rows(&bad_out.t, &padded.t, bad[b], &err), ST_ERROR_INVALID);
            assert_non_null(strstr(err.message, "outside [0, 11)"));
            assert_true(isnan(tt_get(&bad_out, 0)));
        }
        tt_free(&bad_out);
        for (int p = 0; p < 2; p++)
            for (int th = 0; th < 2; th++) tt_free(&out[p][th]);
        tt_free(&packed);
        tt_free(&padded);
    }
    st_cpu_set_threads(0);
}

/* y[n, m] reference and its per-element bound. */
static void matmul_ref(const tt *w, int64_t expert, const tt *x, int64_t x_row, double *ref,
                       double *bound, int64_t n_rows) {
    const int64_t k = w->t.ne[0];
    for (int64_t n = 0; n < n_rows; n++) {
        double s = 0, a = 0;
        for (int64_t i = 0; i < k; i++) {
            double wv = tt_get(w, (expert * n_rows + n) * k + i), xv = tt_get(x, x_row * k + i);
            s += wv * xv;
            a += fabs(wv * xv);
        }
        ref[n] = s;
        bound[n] = MATMUL_BOUND_FACTOR(k) * a;
    }
}

static void check_mul_mat(int64_t k, int64_t n, int64_t m) {
    double *ref = malloc(sizeof(double) * (size_t)(n * m));
    double *bound = malloc(sizeof(double) * (size_t)(n * m));
    for (int ti = 0; ti < 3; ti++) {
        tt w_packed = tt_new(tt_weight_types[ti], k, n, 1, 1, 0);
        tt w_padded = tt_new(tt_weight_types[ti], k, n, 1, 1, TT_PAD);
        tt_fill(&w_packed, -1, 1);
        tt_copy(&w_padded, &w_packed);
        tt x_packed = tt_new(ST_TYPE_F32, k, m, 1, 1, 0);
        tt x_strided = tt_new(ST_TYPE_F32, k, m, 1, 1, 36); /* a non-contiguous view */
        tt_fill(&x_packed, -1, 1);
        tt_copy(&x_strided, &x_packed);
        for (int64_t j = 0; j < m; j++) matmul_ref(&w_packed, 0, &x_packed, j, ref + j * n, bound + j * n, n);

        tt out[2][2];
        for (int p = 0; p < 2; p++) {
            for (int th = 0; th < 2; th++) {
                st_cpu_set_threads(th + 1);
                out[p][th] = tt_new(ST_TYPE_F32, n, m, 1, 1, p ? 8 : 0);
                assert_int_equal(st_cpu_mul_mat(&out[p][th].t, p ? &w_padded.t : &w_packed.t,
                                                p ? &x_strided.t : &x_packed.t, NULL), ST_OK);
                char what[96];
                snprintf(what, sizeof(what), "mul_mat %s K=%lld N=%lld M=%lld %s %d threads",
                         st_type_name(tt_weight_types[ti]), (long long)k, (long long)n,
                         (long long)m, p ? "padded" : "packed", th + 1);
                assert_true(tt_close(what, &out[p][th], ref, bound));
                assert_true(tt_gaps_untouched(&out[p][th]));
            }
        }
        /* padding and threads change no bit */
        assert_true(tt_bit_equal(&out[0][0], &out[0][1]));
        assert_true(tt_bit_equal(&out[0][0], &out[1][0]));
        assert_true(tt_bit_equal(&out[0][0], &out[1][1]));
        for (int p = 0; p < 2; p++)
            for (int th = 0; th < 2; th++) tt_free(&out[p][th]);
        tt_free(&w_packed);
        tt_free(&w_padded);
        tt_free(&x_packed);
        tt_free(&x_strided);
    }
    st_cpu_set_threads(0);
    free(ref);
    free(bound);
}

static void test_mul_mat_odd(void **state) {
    (void)state;
    check_mul_mat(37, 13, 5); /* the odd shape: 4 lane blocks + a tail of 5 */
}

static void test_mul_mat_blocks(void **state) {
    (void)state;
    check_mul_mat(37, 131, 3); /* several row blocks (64 rows for K=37), a partial last one */
    check_mul_mat(600, 70, 2); /* K large: 12-row blocks, 5 full + a partial */
    check_mul_mat(5, 3, 1);    /* K below one lane block: the tail alone */
}

/* mul_mat_id against the reference and, bit for bit, against mul_mat on each expert. */
static void check_mul_mat_id(int x_form) {
    const int64_t k = 37, n = 13, e = 5, n_used = 3, m = 4;
    /* token 0..3 choose 3 experts each; expert 2 is never chosen, expert 4 by every token */
    const int32_t ids[4 * 3] = {4, 0, 1, 3, 4, 0, 4, 1, 3, 0, 3, 4};
    const int64_t x_rows = x_form == 0 ? n_used * m : m; /* per slot, or shared per token */
    double *ref = malloc(sizeof(double) * (size_t)(n * n_used * m));
    double *bound = malloc(sizeof(double) * (size_t)(n * n_used * m));
    for (int ti = 0; ti < 3; ti++) {
        tt w_packed = tt_new(tt_weight_types[ti], k, n, e, 1, 0);
        tt w_padded = tt_new(tt_weight_types[ti], k, n, e, 1, TT_PAD);
        tt_fill(&w_packed, -1, 1);
        tt_copy(&w_padded, &w_packed);
        /* x_form 0: [K, n_used, M]; 1: [K, M]; 2: [K, 1, M] */
        tt x = x_form == 0   ? tt_new(ST_TYPE_F32, k, n_used, m, 1, 20)
               : x_form == 1 ? tt_new(ST_TYPE_F32, k, m, 1, 1, 20)
                             : tt_new(ST_TYPE_F32, k, 1, m, 1, 20);
        tt_fill(&x, -1, 1);
        for (int64_t t = 0; t < m; t++)
            for (int64_t j = 0; j < n_used; j++) {
                int64_t xr = x_form == 0 ? t * n_used + j : t;
                matmul_ref(&w_packed, ids[t * n_used + j], &x, xr, ref + (t * n_used + j) * n,
                           bound + (t * n_used + j) * n, n);
            }
        (void)x_rows;
        tt out[2][2];
        for (int p = 0; p < 2; p++) {
            for (int th = 0; th < 2; th++) {
                st_cpu_set_threads(th + 1);
                out[p][th] = tt_new(ST_TYPE_F32, n, n_used, m, 1, p ? 12 : 0);
                assert_int_equal(st_cpu_mul_mat_id(&out[p][th].t, p ? &w_padded.t : &w_packed.t,
                                                   &x.t, ids, NULL), ST_OK);
                char what[96];
                snprintf(what, sizeof(what), "mul_mat_id %s x form %d %s %d threads",
                         st_type_name(tt_weight_types[ti]), x_form, p ? "padded" : "packed", th + 1);
                assert_true(tt_close(what, &out[p][th], ref, bound));
                assert_true(tt_gaps_untouched(&out[p][th]));
            }
        }
        assert_true(tt_bit_equal(&out[0][0], &out[0][1]));
        assert_true(tt_bit_equal(&out[0][0], &out[1][0]));
        assert_true(tt_bit_equal(&out[0][0], &out[1][1]));

        /* each slot equals mul_mat with that expert's matrix (a view of the padded tensor) */
        for (int64_t t = 0; t < m; t++)
            for (int64_t j = 0; j < n_used; j++) {
                st_tensor we = w_padded.t;
                we.ne[2] = 1;
                we.data = (char *)w_padded.t.data + (size_t)ids[t * n_used + j] * w_padded.t.nb[2];
                int64_t xr = x_form == 0 ? t * n_used + j : t;
                st_tensor xv = x.t;
                xv.ne[1] = xv.ne[2] = 1;
                xv.data = tt_ptr(&x, xr * k);
                tt y = tt_new(ST_TYPE_F32, n, 1, 1, 1, 0);
                assert_int_equal(st_cpu_mul_mat(&y.t, &we, &xv, NULL), ST_OK);
                assert_memory_equal(y.t.data, tt_ptr(&out[0][0], (t * n_used + j) * n), n * sizeof(float));
                tt_free(&y);
            }

        /* an expert id out of range is an error */
        int32_t bad_ids[4 * 3];
        memcpy(bad_ids, ids, sizeof(bad_ids));
        bad_ids[7] = 5;
        st_error err = {0};
        assert_int_equal(st_cpu_mul_mat_id(&out[0][0].t, &w_packed.t, &x.t, bad_ids, &err),
                         ST_ERROR_INVALID);
        assert_non_null(strstr(err.message, "expert id 5"));

        for (int p = 0; p < 2; p++)
            for (int th = 0; th < 2; th++) tt_free(&out[p][th]);
        tt_free(&w_packed);
        tt_free(&w_padded);
        tt_free(&x);
    }
    st_cpu_set_threads(0);
    free(ref);
    free(bound);
}

static void test_mul_mat_id_per_slot(void **state) {
    (void)state;
    check_mul_mat_id(0);
}

static void test_mul_mat_id_shared(void **state) {
    (void)state;
    check_mul_mat_id(1);
    check_mul_mat_id(2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_conversion_exact),
        cmocka_unit_test(test_get_rows),
        cmocka_unit_test(test_mul_mat_odd),
        cmocka_unit_test(test_mul_mat_blocks),
        cmocka_unit_test(test_mul_mat_id_per_slot),
        cmocka_unit_test(test_mul_mat_id_shared),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
