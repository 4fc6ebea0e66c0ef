/*
 * The fast path's attention in every variant this CPU runs: GQA groups of 1, 3, 4 and 6
 * query heads (tiles of 4 and their remainders), head_dim 40 (not a whole number of
 * vectors), 64 and 256, F16 and F32 caches with padded strides, q and the output as
 * strided views, causal and sliding-window masks, soft-capping, M = 1 and a batch.
 *
 * REFERENCE in double from the values as stored (q in f32, the cache as rounded):
 * s_t = scale q.k_t (soft-capped), p_t = e^(s_t - max) / sum, out_d = sum_t p_t v_t,d.
 * TOLERANCE |out_d - out*_d| <= (4 delta + (n + 28) u) sum_t p_t |v_t,d|, where
 *   delta = (head_dim + 2) u scale max_t sum_i |q_i k_t,i| (+ 4u |s_t| with a soft cap):
 *     how far an f32 score (a dot product of head_dim terms in any order) may be from
 *     the exact one; a difference delta in s_t - max changes a weight by a factor of at
 *     most e^(2 delta) ~ 1 + 2 delta, twice (the weight and the normalising sum);
 *   the vector exponential is within 4 ulp (8u) of e^x, twice again; the f32 sum of n
 *   weights and of n weighted values adds n u; the division and conversions 4u more.
 * EXACT: 1 and 3 threads give the same bits, and a query evaluated alone (decode: a
 * head a task) gives the bits it gets in a batch (heads tiled four at a time). Over a
 * paged cache (blocks of ST_KV_BLOCK_TOKENS in any order, two sequences in one batch)
 * every query gets the bits it gets over its sequence's contiguous cache, on every path.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_cpu_fast_common.h"
#include "test_cpu_ops_common.h"

typedef struct acase {
    int64_t hd, n_head, n_head_kv, m, p0;
    int32_t window;
    float softcap;
    st_type cache;
} acase;

/* out* and its bound for query row (h, m) */
static void reference(const acase *c, const tt *q, const tt *kc, const tt *vc, const int32_t *pos, int64_t n_kv,
                      float scale, double *ref, double *bound) {
    const int64_t group = c->n_head / c->n_head_kv;
    double *s = malloc((size_t)n_kv * sizeof(double)), *p = malloc((size_t)n_kv * sizeof(double));
    if (!s || !p) abort();
    for (int64_t m = 0; m < c->m; m++) {
        for (int64_t h = 0; h < c->n_head; h++) {
            const int64_t kvh = h / group, t_hi = pos[m] < n_kv - 1 ? pos[m] : n_kv - 1;
            int64_t t_lo = c->window > 0 ? pos[m] - c->window + 1 : 0;
            if (t_lo < 0) t_lo = 0;
            double max = -INFINITY, delta = 0, sum = 0;
            for (int64_t t = t_lo; t <= t_hi; t++) {
                double dot = 0, mag = 0;
                for (int64_t i = 0; i < c->hd; i++) {
                    const double a = tt_get(q, (m * c->n_head + h) * c->hd + i);
                    const double b = tt_get(kc, (t * c->n_head_kv + kvh) * c->hd + i);
                    dot += a * b;
                    mag += fabs(a * b);
                }
                double sv = scale * dot, d = (double)(c->hd + 2) * TT_U32 * scale * mag;
                if (c->softcap > 0) {
                    sv = c->softcap * tanh(sv / c->softcap);
                    d += 4 * TT_U32 * fabs(sv);
                }
                s[t] = sv;
                delta = fmax(delta, d);
                max = fmax(max, sv);
            }
            for (int64_t t = t_lo; t <= t_hi; t++) sum += (p[t] = exp(s[t] - max));
            const double n = (double)(t_hi - t_lo + 1);
            for (int64_t d = 0; d < c->hd; d++) {
                double o = 0, mag = 0;
                for (int64_t t = t_lo; t <= t_hi; t++) {
                    const double v = tt_get(vc, (t * c->n_head_kv + kvh) * c->hd + d);
                    o += p[t] / sum * v;
                    mag += p[t] / sum * fabs(v);
                }
                const int64_t i = (m * c->n_head + h) * c->hd + d;
                ref[i] = o;
                bound[i] = (4 * delta + (n + 28) * TT_U32) * mag + 1e-30;
            }
        }
    }
    free(s);
    free(p);
}

static tt run(const st_cpu_op_table *ops, st_cpu_ws *ws, const tt *q, const tt *kc, const tt *vc,
              const int32_t *pos, const st_attn_params *p) {
    tt out = tt_new(ST_TYPE_F32, q->t.ne[0], q->t.ne[1], q->t.ne[2], 1, 12);
    st_error err = {0};
    assert_int_equal(ops->attention(ws, &out.t, &q->t, &kc->t, &vc->t, pos, NULL, NULL, 0, p, &err), ST_OK);
    assert_true(tt_gaps_untouched(&out));
    return out;
}

static void attention_case(const st_cpu_op_table *ops, const acase *c) {
    char what[160];
    snprintf(what, sizeof(what), "%s attention hd=%lld heads=%lld/%lld M=%lld p0=%lld window=%d softcap=%g %s",
             ops->name, (long long)c->hd, (long long)c->n_head, (long long)c->n_head_kv, (long long)c->m,
             (long long)c->p0, c->window, c->softcap, st_type_name(c->cache));
    const int64_t n_ctx = c->p0 + c->m + 3, n_kv = c->p0 + c->m;
    st_cpu_ws ws = tf_ws();
    /* q: a view with a gap after every head (as out of a fused qkv row) */
    tt q = tt_new(ST_TYPE_F32, c->hd, c->n_head, c->m, 1, 8);
    tt kc = tt_new(c->cache, c->hd, c->n_head_kv, n_ctx, 1, 6), vc = tt_new(c->cache, c->hd, c->n_head_kv, n_ctx, 1, 6);
    tt_fill(&q, -1.5, 1.5);
    tt_fill(&kc, -1.5, 1.5);
    tt_fill(&vc, -2, 2);
    int32_t pos[16];
    for (int64_t m = 0; m < c->m; m++) pos[m] = (int32_t)(c->p0 + m);
    const st_attn_params p = {.n_kv = n_kv, .window = c->window, .scale = 1.0f / sqrtf((float)c->hd),
                              .softcap = c->softcap};
    double *ref = malloc((size_t)tt_count(&q) * sizeof(double)), *bound = malloc((size_t)tt_count(&q) * sizeof(double));
    if (!ref || !bound) abort();
    reference(c, &q, &kc, &vc, pos, n_kv, p.scale, ref, bound);

    st_cpu_set_threads(3);
    tt out = run(ops, &ws, &q, &kc, &vc, pos, &p);
    if (!tt_close(what, &out, ref, bound)) fail_msg("%s: out of bound", what);
    st_cpu_set_threads(1);
    tt out1 = run(ops, &ws, &q, &kc, &vc, pos, &p);
    if (!tt_bit_equal(&out, &out1)) fail_msg("%s: 1 thread changed the result", what);
    st_cpu_set_threads(0);
    /* the last query alone */
    st_tensor ql = q.t;
    ql.ne[2] = 1;
    ql.data = (char *)q.t.data + (size_t)(c->m - 1) * q.t.nb[2];
    tt alone = tt_new(ST_TYPE_F32, c->hd, c->n_head, 1, 1, 0);
    st_error err = {0};
    assert_int_equal(ops->attention(&ws, &alone.t, &ql, &kc.t, &vc.t, pos + c->m - 1, NULL, NULL, 0, &p, &err), ST_OK);
    for (int64_t i = 0; i < c->hd * c->n_head; i++)
        if (memcmp(tt_ptr(&alone, i), tt_ptr(&out, (c->m - 1) * c->hd * c->n_head + i), 4) != 0)
            fail_msg("%s: the last query alone differs at %lld", what, (long long)i);
    tt_free(&alone);
    tt_free(&out);
    tt_free(&out1);
    tt_free(&q);
    tt_free(&kc);
    tt_free(&vc);
    free(ref);
    free(bound);
    st_cpu_ws_free(&ws);
}

static void test_attention(void **state) {
    (void)state;
    const tf_variants v = tf_variants_get();
    assert_true(v.n >= 1);
    static const int64_t heads[][2] = {{4, 1}, {8, 2}, {3, 3}, {6, 1}};
    static const int64_t hds[] = {40, 64, 256};
    int n = 0;
    for (int iv = 0; iv < v.n; iv++)
        for (int ih = 0; ih < 4; ih++)
            for (int id = 0; id < 3; id++)
                for (int cache = 0; cache < 2; cache++)
                    for (int var = 0; var < 3; var++) {
                        acase c = {.hd = hds[id], .n_head = heads[ih][0], .n_head_kv = heads[ih][1],
                                   .m = var == 0 ? 1 : 5, .p0 = var == 2 ? 37 : 0, .window = var == 2 ? 9 : 0,
                                   .softcap = var == 1 && ih == 0 ? 30.0f : 0.0f,
                                   .cache = cache ? ST_TYPE_F32 : ST_TYPE_F16};
                        attention_case(v.ops[iv], &c);
                        n++;
                    }
    assert_int_equal(n, v.n * 72);
}

/* Two sequences' keys in contiguous caches [hd, n_head_kv, n_ctx] and scattered over a
 * pool of blocks in reverse order; queries of both in one batch over the pool give the
 * bits each gets over its own contiguous cache. */
static void paged_case(const st_cpu_op_table *ops, st_type cache, int32_t window) {
    enum { HD = 64, NH = 8, NKV = 2, NCTX = 200, NSEQ = 2, MAXB = (NCTX + ST_KV_BLOCK_TOKENS - 1) / ST_KV_BLOCK_TOKENS };
    enum { NBLK = NSEQ * MAXB, M = 6 };
    char what[96];
    snprintf(what, sizeof(what), "%s paged attention %s window=%d", ops->name, st_type_name(cache), window);
    st_cpu_ws ws = tf_ws();
    tt kc[NSEQ], vc[NSEQ];
    tt kp = tt_new(cache, HD, NKV, NBLK * ST_KV_BLOCK_TOKENS, 1, 6), vp = tt_new(cache, HD, NKV, NBLK * ST_KV_BLOCK_TOKENS, 1, 6);
    tt_fill(&kp, -1.5, 1.5);
    tt_fill(&vp, -2, 2);
    int32_t table[NSEQ][MAXB];
    for (int sq = 0; sq < NSEQ; sq++) {
        kc[sq] = tt_new(cache, HD, NKV, NCTX, 1, 6);
        vc[sq] = tt_new(cache, HD, NKV, NCTX, 1, 6);
        tt_fill(&kc[sq], -1.5, 1.5);
        tt_fill(&vc[sq], -2, 2);
        for (int b = 0; b < MAXB; b++) table[sq][b] = NBLK - 1 - (sq * MAXB + b);
        const size_t es = tt_type_size(cache);
        for (int64_t t = 0; t < NCTX; t++)
            for (int64_t i = 0; i < (int64_t)HD * NKV; i++) {
                const int64_t slot = st_kv_slot(table[sq], t);
                memcpy(tt_ptr(&kp, slot * HD * NKV + i), tt_ptr(&kc[sq], t * HD * NKV + i), es);
                memcpy(tt_ptr(&vp, slot * HD * NKV + i), tt_ptr(&vc[sq], t * HD * NKV + i), es);
            }
    }
    /* queries alternate between the sequences, at positions in every block */
    const int32_t pos[M] = {3, 70, 130, 199, 64, 150}, seq[M] = {0, 1, 0, 1, 1, 0};
    tt q = tt_new(ST_TYPE_F32, HD, NH, M, 1, 8), out = tt_new(ST_TYPE_F32, HD, NH, M, 1, 0);
    tt_fill(&q, -1.5, 1.5);
    const st_attn_params p = {.n_kv = NCTX, .window = window, .scale = 0.125f, .softcap = 0};
    st_error err = {0};
    assert_int_equal(ops->attention(&ws, &out.t, &q.t, &kp.t, &vp.t, pos, seq, &table[0][0], MAXB, &p, &err), ST_OK);
    for (int m = 0; m < M; m++) {
        st_tensor qm = q.t;
        qm.ne[2] = 1;
        qm.data = (char *)q.t.data + (size_t)m * q.t.nb[2];
        tt one = tt_new(ST_TYPE_F32, HD, NH, 1, 1, 0);
        assert_int_equal(ops->attention(&ws, &one.t, &qm, &kc[seq[m]].t, &vc[seq[m]].t, pos + m, NULL, NULL, 0, &p, &err),
                         ST_OK);
        for (int64_t i = 0; i < (int64_t)HD * NH; i++)
            if (memcmp(tt_ptr(&one, i), tt_ptr(&out, (int64_t)m * HD * NH + i), 4) != 0)
                fail_msg("%s: query %d differs from its contiguous cache at %lld", what, m, (long long)i);
        tt_free(&one);
    }
    for (int sq = 0; sq < NSEQ; sq++) {
        tt_free(&kc[sq]);
        tt_free(&vc[sq]);
    }
    tt_free(&kp);
    tt_free(&vp);
    tt_free(&q);
    tt_free(&out);
    st_cpu_ws_free(&ws);
}

static void test_paged(void **state) {
    (void)state;
    const tf_variants v = tf_variants_get();
    int n = 0;
    for (int iv = 0; iv < v.n; iv++)
        for (int cache = 0; cache < 2; cache++)
            for (int w = 0; w < 2; w++, n++) paged_case(v.ops[iv], cache ? ST_TYPE_F32 : ST_TYPE_F16, w ? 70 : 0);
    for (int cache = 0; cache < 2; cache++, n++) paged_case(st_cpu_ops_exact(), cache ? ST_TYPE_F32 : ST_TYPE_F16, 0);
    assert_int_equal(n, v.n * 4 + 2);
}

/* A query that sees no key gets zeros; kv_store refuses a position outside the cache. */
static void test_edges(void **state) {
    (void)state;
    const tf_variants v = tf_variants_get();
    for (int iv = 0; iv < v.n; iv++) {
        st_cpu_ws ws = tf_ws();
        tt q = tt_new(ST_TYPE_F32, 16, 2, 1, 1, 0), kc = tt_new(ST_TYPE_F16, 16, 1, 8, 1, 0);
        tt vc = tt_new(ST_TYPE_F16, 16, 1, 8, 1, 0), out = tt_new(ST_TYPE_F32, 16, 2, 1, 1, 0);
        tt_fill(&q, -1, 1);
        const int32_t pos[1] = {5};
        const st_attn_params p = {.n_kv = 0, .window = 0, .scale = 0.25f, .softcap = 0};
        st_error err = {0};
        assert_int_equal(v.ops[iv]->attention(&ws, &out.t, &q.t, &kc.t, &vc.t, pos, NULL, NULL, 0, &p, &err), ST_OK);
        for (int64_t i = 0; i < 32; i++) assert_true(tt_get(&out, i) == 0.0);
        const int32_t bad[1] = {8};
        tt x = tt_new(ST_TYPE_F32, 16, 1, 1, 1, 0);
        tt_fill(&x, -1, 1);
        assert_int_equal(v.ops[iv]->kv_store(&kc.t, &x.t, bad, &err), ST_ERROR_INVALID);
        tt_free(&q);
        tt_free(&kc);
        tt_free(&vc);
        tt_free(&out);
        tt_free(&x);
        st_cpu_ws_free(&ws);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_paged),
        cmocka_unit_test(test_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
