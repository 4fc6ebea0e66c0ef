/*
 * The fast path's products (mul_mat, mul_mat_id) in every variant this CPU runs, for
 * F32/F16/BF16 weights and every quantized type, on odd shapes, packed and padded rows,
 * strided activations, M = 1..17 (the decode kernels and the blocked ones), 1 and 3
 * threads.
 *
 * REFERENCE: y*[n, m] = sum_k w[n, k] x[m, k] in double, from the exact weight values (the
 * float element, or the quantized block's value from test_quant_common.h's independent
 * dequantizer, in double: exact there) and the exact f32 inputs. u = 2^-24.
 *
 * TOLERANCES, per kind of product, |y - y*| <= bound:
 *  - float weights (f32 arithmetic): (K + 2) u sum_k |w x|. A dot product of K f32
 *    products in any order, the products exact in the FMA (or rounded once); the
 *    conversions of F16/BF16 to f32 are exact. Same for the quantized types the integer
 *    kernels do not take (q2_K, q3_K, q8_K: dequantized exactly as the reference, then
 *    the same f32 dot), with one more u for the dequantized value's rounding to f32.
 *  - integer kernels (q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K, q6_K) with inputs on the
 *    int8 grid (each block of 32 is d * q with d a power of two and max |q| = 127): the
 *    activation quantization is exact, the integer dot products are exact, the lane
 *    scales (f16 d times a sub-block scale of <= 8 bits) and their products with d are
 *    exact, so only the f32 accumulation rounds: K/32 + 8 roundings over the magnitudes
 *    sum_k W_k |x_k|, W_k = |scale part| + |min part| of the weight (a min and the scaled
 *    quant can cancel; the bound has to count both).
 *  - integer kernels on random inputs: the above plus the activation quantization, by
 *    its definition: |x - dx q| <= dx / 2 (+ 3u |x| for the rounding of dx and 1/dx), dx
 *    = max |x| / 127 of the block, times |w_k|.
 * EXACT, in every variant: padded and packed rows give the same bits; 1 and 3 threads
 * give the same bits; a column of an M-column product equals the product of that column
 * alone (decode and prefill kernels sum alike); mul_mat_id equals mul_mat of each
 * expert's matrix, bit for bit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_cpu_fast_common.h"
#include "test_cpu_ops_common.h"
#include "test_quant_common.h"

/* ---- weights ------------------------------------------------------------------------- */

typedef struct wt {
    st_tensor t;
    uint8_t *mem;
    double *val; /* [E][N][K] exact values */
    double *mag; /* [E][N][K] |scale part| + |min part| */
} wt;

/* The min part b of a quantized value v = a - b (a: the scaled quant). */
static double min_part(st_type type, const uint8_t *blk, int i) {
    switch (type) {
    case ST_TYPE_Q4_1:
    case ST_TYPE_Q5_1: return -tq_half(blk + 2);
    case ST_TYPE_Q4_K:
    case ST_TYPE_Q5_K: {
        int sc, mn;
        tq_k4_scale(blk + 4, i / 32, &sc, &mn);
        return tq_half(blk + 2) * mn;
    }
    case ST_TYPE_Q2_K: return tq_half(blk + 82) * (blk[i / 16] / 16);
    default: return 0.0;
    }
}

/* A weight [K, N, E]; pad > 0 leaves pad bytes (0xFF: NaN halves, garbage blocks) after
 * every row. */
static wt wt_new(st_type type, int64_t k, int64_t n, int64_t e, size_t pad) {
    const st_type_traits *tr = st_type_get_traits((uint32_t)type);
    wt w;
    memset(&w, 0, sizeof(w));
    w.t.type = type;
    w.t.ne[0] = k;
    w.t.ne[1] = n;
    w.t.ne[2] = e;
    w.t.ne[3] = 1;
    const size_t row = (size_t)(k / tr->block_size) * tr->block_bytes;
    w.t.nb[0] = tr->block_bytes;
    w.t.nb[1] = row + pad;
    w.t.nb[2] = w.t.nb[1] * (size_t)n;
    w.t.nb[3] = w.t.nb[2] * (size_t)e;
    w.mem = malloc(w.t.nb[3] + 64);
    w.val = malloc((size_t)(k * n * e) * sizeof(double));
    w.mag = malloc((size_t)(k * n * e) * sizeof(double));
    if (!w.mem || !w.val || !w.mag) abort();
    memset(w.mem, 0xff, w.t.nb[3] + 64);
    w.t.data = w.mem;
    for (int64_t r = 0; r < n * e; r++) {
        uint8_t *rp = w.mem + (size_t)r * w.t.nb[1];
        double *v = w.val + r * k, *m = w.mag + r * k;
        if (tr->is_quantized) {
            tq_random_blocks(type, rp, k / tr->block_size);
            for (int64_t i = 0; i < k; i++) {
                const uint8_t *blk = rp + (i / tr->block_size) * (int64_t)tr->block_bytes;
                const int j = (int)(i % tr->block_size);
                v[i] = tq_ref_value(type, blk, j);
                const double b = min_part(type, blk, j);
                m[i] = fabs(v[i] + b) + fabs(b);
            }
        } else {
            for (int64_t i = 0; i < k; i++) {
                const float f = (float)tt_uniform(-1, 1);
                uint16_t h;
                if (type == ST_TYPE_F32) {
                    memcpy(rp + 4 * i, &f, 4);
                    v[i] = f;
                } else if (type == ST_TYPE_F16) {
                    h = st_f32_to_f16(f);
                    memcpy(rp + 2 * i, &h, 2);
                    v[i] = st_f16_to_f32(h);
                } else {
                    h = st_f32_to_bf16(f);
                    memcpy(rp + 2 * i, &h, 2);
                    v[i] = st_bf16_to_f32(h);
                }
                m[i] = fabs(v[i]);
            }
        }
    }
    return w;
}

static void wt_free(wt *w) {
    free(w->mem);
    free(w->val);
    free(w->mag);
}

/* The same weight with another row padding (the values copied row by row). */
static wt wt_repad(const wt *w, size_t pad) {
    wt c = *w;
    const size_t row = st_tensor_row_bytes(&w->t);
    c.t.nb[1] = row + pad;
    c.t.nb[2] = c.t.nb[1] * (size_t)w->t.ne[1];
    c.t.nb[3] = c.t.nb[2] * (size_t)w->t.ne[2];
    c.mem = malloc(c.t.nb[3] + 64);
    if (!c.mem) abort();
    memset(c.mem, 0xff, c.t.nb[3] + 64);
    c.t.data = c.mem;
    for (int64_t r = 0; r < w->t.ne[1] * w->t.ne[2]; r++) memcpy(c.mem + r * c.t.nb[1], w->mem + r * w->t.nb[1], row);
    c.val = NULL;
    c.mag = NULL;
    return c;
}

/* ---- inputs -------------------------------------------------------------------------- */

/* x F32 [K, M] (rows padded by pad bytes). grid: every block of 32 is d * q exactly, d a
 * power of two, max |q| = 127 (K a multiple of 32). */
static tt x_new(int64_t k, int64_t m, size_t pad, bool grid) {
    tt x = tt_new(ST_TYPE_F32, k, m, 1, 1, pad);
    for (int64_t c = 0; c < m; c++) {
        for (int64_t b = 0; b < (k + 31) / 32; b++) {
            const double d = ldexp(1.0, -4 + (int)(tq_next() % 9));
            const int64_t peak = b * 32 + (int64_t)(tq_next() % 32);
            for (int64_t i = b * 32; i < k && i < b * 32 + 32; i++) {
                double v = tt_uniform(-2, 2);
                if (grid) v = d * (i == peak ? ((tq_next() & 1) ? 127 : -127) : (int)(tq_next() % 255) - 127);
                tt_set(&x, c * k + i, v);
            }
        }
    }
    return x;
}

/* ---- checks -------------------------------------------------------------------------- */

typedef enum kind { KIND_FLOAT, KIND_INT_GRID, KIND_INT_RANDOM } kind;

static bool int_kernel_type(st_type t) {
    return t == ST_TYPE_Q8_0 || t == ST_TYPE_Q4_0 || t == ST_TYPE_Q4_1 || t == ST_TYPE_Q5_0 || t == ST_TYPE_Q5_1 ||
           t == ST_TYPE_Q4_K || t == ST_TYPE_Q5_K || t == ST_TYPE_Q6_K;
}

/* y (F32 [N, M]) against y* for expert 0 of w, with the bound of `kd`. */
static int check_product(const char *what, const wt *w, const tt *x, const tt *y, kind kd) {
    const int64_t k = w->t.ne[0], n = w->t.ne[1], m = x->t.ne[1];
    const bool quantized = st_type_get_traits((uint32_t)w->t.type)->is_quantized;
    double *ref = malloc((size_t)(n * m) * sizeof(double)), *bound = malloc((size_t)(n * m) * sizeof(double));
    if (!ref || !bound) abort();
    for (int64_t c = 0; c < m; c++) {
        for (int64_t r = 0; r < n; r++) {
            double s = 0, a = 0, aq = 0, q = 0;
            for (int64_t b = 0; b * 32 < k; b++) {
                double amax = 0;
                for (int64_t i = b * 32; i < k && i < b * 32 + 32; i++) amax = fmax(amax, fabs(tt_get(x, c * k + i)));
                const double dx = amax / 127;
                for (int64_t i = b * 32; i < k && i < b * 32 + 32; i++) {
                    const double xv = tt_get(x, c * k + i), wv = w->val[r * k + i], wm = w->mag[r * k + i];
                    s += wv * xv;
                    a += wm * fabs(xv);
                    aq += wm * (fabs(xv) + dx);
                    q += fabs(wv) * (0.5001 * dx + 3 * TT_U32 * fabs(xv));
                }
            }
            ref[c * n + r] = s;
            const double nb = (double)(k / 32);
            switch (kd) {
            case KIND_FLOAT: bound[c * n + r] = (double)(k + 2 + quantized) * TT_U32 * a; break;
            case KIND_INT_GRID: bound[c * n + r] = (nb + 8) * TT_U32 * a; break;
            case KIND_INT_RANDOM: bound[c * n + r] = q + (nb + 8) * TT_U32 * aq; break;
            }
        }
    }
    int ok = tt_close(what, y, ref, bound);
    free(ref);
    free(bound);
    return ok;
}

static tt run_mul_mat(const st_cpu_op_table *ops, st_cpu_ws *ws, const wt *w, const tt *x, size_t y_pad) {
    tt y = tt_new(ST_TYPE_F32, w->t.ne[1], x->t.ne[1], 1, 1, y_pad);
    st_tensor w2d = w->t;
    w2d.ne[2] = 1;
    w2d.nb[3] = w2d.nb[2];
    st_error err = {0};
    assert_int_equal(ops->mul_mat(ws, &y.t, &w2d, &x->t, &err), ST_OK);
    return y;
}

/* Everything for one variant, one type and one shape. */
static void product_case(const st_cpu_op_table *ops, st_type type, int64_t k, int64_t n, int64_t m, kind kd) {
    char what[160];
    snprintf(what, sizeof(what), "%s %s K=%lld N=%lld M=%lld %s", ops->name, st_type_name(type), (long long)k,
             (long long)n, (long long)m, kd == KIND_INT_GRID ? "grid" : kd == KIND_INT_RANDOM ? "random" : "float");
    const st_type_traits *tr = st_type_get_traits((uint32_t)type);
    const size_t pad = tr->is_quantized ? tr->block_bytes : TT_PAD;
    st_cpu_ws ws = tf_ws();
    wt w = wt_new(type, k, n, 1, 0);
    wt wp = wt_repad(&w, pad);
    tt x = x_new(k, m, 3 * sizeof(float), kd == KIND_INT_GRID);

    st_cpu_set_threads(3);
    tt y = run_mul_mat(ops, &ws, &w, &x, 0);
    if (!check_product(what, &w, &x, &y, kd)) fail_msg("%s: out of bound", what);
    assert_true(tt_gaps_untouched(&y));
    /* padded rows, a padded output, one thread: the same bits */
    st_cpu_set_threads(1);
    tt yp = run_mul_mat(ops, &ws, &wp, &x, 8);
    if (!tt_bit_equal(&y, &yp)) fail_msg("%s: padded rows or 1 thread changed the result", what);
    assert_true(tt_gaps_untouched(&yp));
    st_cpu_set_threads(0);
    /* each column alone (the decode kernels when M > 2) */
    for (int64_t c = 0; c < m; c += (m > 4 ? 3 : 1)) {
        tt xc = tt_new(ST_TYPE_F32, k, 1, 1, 1, 0);
        for (int64_t i = 0; i < k; i++) tt_set(&xc, i, tt_get(&x, c * k + i));
        tt yc = run_mul_mat(ops, &ws, &w, &xc, 0);
        for (int64_t r = 0; r < n; r++)
            if (memcmp(tt_ptr(&yc, r), tt_ptr(&y, c * n + r), 4) != 0)
                fail_msg("%s: column %lld alone differs at row %lld", what, (long long)c, (long long)r);
        tt_free(&xc);
        tt_free(&yc);
    }
    tt_free(&y);
    tt_free(&yp);
    tt_free(&x);
    wt_free(&w);
    free(wp.mem);
    st_cpu_ws_free(&ws);
}

static const int64_t shapes_n[] = {1, 7, 67, 130};
static const int64_t shapes_m[] = {1, 2, 3, 5, 17};

static void test_float_products(void **state) {
    (void)state;
    const tf_variants v = tf_variants_get();
    assert_true(v.n >= 1);
    static const int64_t ks[] = {1, 15, 16, 17, 100, 257};
    for (int iv = 0; iv < v.n; iv++)
        for (int it = 0; it < 3; it++)
            for (size_t ik = 0; ik < sizeof(ks) / sizeof(ks[0]); ik++)
                for (size_t in = 0; in < sizeof(shapes_n) / sizeof(shapes_n[0]); in++)
                    for (size_t im = 0; im < sizeof(shapes_m) / sizeof(shapes_m[0]); im++)
                        product_case(v.ops[iv], tt_weight_types[it], ks[ik], shapes_n[in], shapes_m[im], KIND_FLOAT);
}

static void quant_products(kind kd) {
    const tf_variants v = tf_variants_get();
    assert_true(v.n >= 1);
    int n_int = 0;
    for (int iv = 0; iv < v.n; iv++) {
        for (int it = 0; it < TQ_N_TYPES; it++) {
            const st_type type = tq_types[it];
            const bool ik = int_kernel_type(type);
            n_int += ik;
            const int64_t bs = st_type_get_traits((uint32_t)type)->block_size;
            const int64_t ks[2] = {bs == 32 ? 96 : 256, bs == 32 ? 640 : 768};
            for (int kk = 0; kk < 2; kk++)
                for (size_t in = 0; in < sizeof(shapes_n) / sizeof(shapes_n[0]); in++)
                    for (size_t im = 0; im < sizeof(shapes_m) / sizeof(shapes_m[0]); im += (kk ? 2 : 1))
                        product_case(v.ops[iv], type, ks[kk], shapes_n[in], shapes_m[im], ik ? kd : KIND_FLOAT);
        }
    }
    assert_int_equal(n_int, 8 * v.n);
}

static void test_quant_products_grid(void **state) {
    (void)state;
    quant_products(KIND_INT_GRID);
}

static void test_quant_products_random(void **state) {
    (void)state;
    quant_products(KIND_INT_RANDOM);
}

/* mul_mat_id: each output equals mul_mat of its expert's matrix, bit for bit. */
static void moe_case(const st_cpu_op_table *ops, st_type type, int64_t k, int x_form) {
    const int64_t n = 37, e = 5, n_used = 3, m = 6;
    st_cpu_ws ws = tf_ws();
    wt w = wt_new(type, k, n, e, st_type_get_traits((uint32_t)type)->is_quantized ? 0 : TT_PAD);
    int32_t ids[3 * 6];
    for (int i = 0; i < n_used * m; i++) ids[i] = (int32_t)(tq_next() % 4); /* expert 4 never chosen */
    ids[0] = ids[1];                                                       /* a repeated expert */
    tt x = x_form == 2 ? x_new(k, n_used * m, 4, false) : x_new(k, m, 4, false);
    st_tensor xv = x.t; /* [K, M], [K, 1, M] or [K, n_used, M] */
    if (x_form == 1) {
        xv.ne[1] = 1;
        xv.ne[2] = m;
        xv.nb[2] = x.t.nb[1];
    } else if (x_form == 2) {
        xv.ne[1] = n_used;
        xv.ne[2] = m;
        xv.nb[2] = x.t.nb[1] * n_used;
    }
    tt y = tt_new(ST_TYPE_F32, n, n_used, m, 1, 8);
    st_error err = {0};
    assert_int_equal(ops->mul_mat_id(&ws, &y.t, &w.t, &xv, ids, &err), ST_OK);
    for (int64_t tok = 0; tok < m; tok++) {
        for (int64_t j = 0; j < n_used; j++) {
            st_tensor we = w.t; /* the expert's matrix */
            we.ne[2] = 1;
            we.data = (char *)w.t.data + (size_t)ids[tok * n_used + j] * w.t.nb[2];
            tt xc = tt_new(ST_TYPE_F32, k, 1, 1, 1, 0);
            const int64_t row = x_form == 2 ? tok * n_used + j : tok;
            for (int64_t i = 0; i < k; i++) tt_set(&xc, i, tt_get(&x, row * k + i));
            tt yc = tt_new(ST_TYPE_F32, n, 1, 1, 1, 0);
            assert_int_equal(ops->mul_mat(&ws, &yc.t, &we, &xc.t, &err), ST_OK);
            for (int64_t r = 0; r < n; r++)
                if (memcmp(tt_ptr(&yc, r), tt_ptr(&y, (tok * n_used + j) * n + r), 4) != 0)
                    fail_msg("%s %s mul_mat_id: token %lld slot %lld row %lld differs from mul_mat", ops->name,
                             st_type_name(type), (long long)tok, (long long)j, (long long)r);
            tt_free(&xc);
            tt_free(&yc);
        }
    }
    assert_true(tt_gaps_untouched(&y));
    ids[5] = 5; /* outside [0, E) */
    assert_int_equal(ops->mul_mat_id(&ws, &y.t, &w.t, &xv, ids, &err), ST_ERROR_INVALID);
    tt_free(&y);
    tt_free(&x);
    wt_free(&w);
    st_cpu_ws_free(&ws);
}

static void test_mul_mat_id(void **state) {
    (void)state;
    const tf_variants v = tf_variants_get();
    const st_type types[] = {ST_TYPE_F16, ST_TYPE_BF16, ST_TYPE_F32, ST_TYPE_Q8_0, ST_TYPE_Q4_K, ST_TYPE_Q6_K,
                             ST_TYPE_Q3_K};
    for (int iv = 0; iv < v.n; iv++)
        for (size_t it = 0; it < sizeof(types) / sizeof(types[0]); it++)
            for (int form = 0; form < 3; form++) {
                const bool kq = types[it] == ST_TYPE_Q4_K || types[it] == ST_TYPE_Q6_K || types[it] == ST_TYPE_Q3_K;
                moe_case(v.ops[iv], types[it], kq ? 256 : 96, form);
            }
}

/* A type stride cannot read is an error naming it, as on the reference path. */
static void test_unsupported_type(void **state) {
    (void)state;
    const tf_variants v = tf_variants_get();
    for (int iv = 0; iv < v.n; iv++) {
        st_cpu_ws ws = tf_ws();
        uint8_t blocks[18 * 2] = {0};
        st_tensor w = {.type = ST_TYPE_IQ4_NL, .ne = {32, 2, 1, 1}, .nb = {18, 18, 36, 36}, .data = blocks};
        tt x = x_new(32, 1, 0, false), y = tt_new(ST_TYPE_F32, 2, 1, 1, 1, 0);
        st_error err = {0};
        assert_int_equal(v.ops[iv]->mul_mat(&ws, &y.t, &w, &x.t, &err), ST_ERROR_UNSUPPORTED);
        assert_non_null(strstr(err.message, "iq4_nl"));
        tt_free(&x);
        tt_free(&y);
        st_cpu_ws_free(&ws);
    }
}

int main(void) {
    const tf_variants v = tf_variants_get();
    printf("fast-path variants on this CPU:");
    for (int i = 0; i < v.n; i++) printf(" %s", v.ops[i]->name);
    printf("\n");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_float_products),      cmocka_unit_test(test_quant_products_grid),
        cmocka_unit_test(test_quant_products_random), cmocka_unit_test(test_mul_mat_id),
        cmocka_unit_test(test_unsupported_type),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
