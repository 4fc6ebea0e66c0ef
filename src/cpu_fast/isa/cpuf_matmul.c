/*
 * mul_mat and mul_mat_id of the fast path: the contracts of st_cpu_mul_mat and
 * st_cpu_mul_mat_id (cpu_ops.h), the work split over threads, the block kernels of
 * cpuf_fmm.c (f32 arithmetic) and cpuf_qmm.c (integer products for the quantized types
 * that have them; the others are dequantized to f32 a block of rows at a time).
 *
 * Threads: the weight's rows are cut into blocks (the block kernels' sizes) and every
 * thread takes an equal contiguous share of them (a decode then streams one contiguous
 * range of the weight a thread). When there are fewer blocks than twice the threads and
 * several columns, the columns are split too, so a small weight in a prefill still keeps
 * every thread busy. Activations are quantized in the same parallel region, rows split
 * evenly, before the products start.
 */
#include <stdlib.h>

#include "cpu_fast/isa/cpuf_internal.h"

/* Bytes of the quantized copies of n activation rows of K. */
static size_t qx_bytes(int64_t n, int64_t k) {
    return cpuf_round_up((size_t)(n * k)) + 2 * cpuf_round_up((size_t)(n * (k / 32)) * sizeof(float));
}

/* Carves n quantized rows of K from *cur into qx[0..n). */
static void qx_carve(char **cur, int64_t n, int64_t k, cpuf_qcol *qx, int8_t **q, float **d, float **s) {
    *q = cpuf_carve(cur, (size_t)(n * k));
    *d = cpuf_carve(cur, (size_t)(n * (k / 32)) * sizeof(float));
    *s = cpuf_carve(cur, (size_t)(n * (k / 32)) * sizeof(float));
    for (int64_t i = 0; i < n; i++) qx[i] = (cpuf_qcol){*q + i * k, *d + i * (k / 32), *s + i * (k / 32)};
}

typedef struct product {
    st_type type;
    int64_t k, n;
    bool integer;      /* the integer kernels (else f32) */
    int64_t block;     /* rows a task */
    size_t scratch;    /* per thread */
} product;

static product product_plan(st_type type, int64_t k, int64_t n) {
    product p = {type, k, n, CPUF_FN(st_cpuf_q_type)(type), 0, 0};
    p.block = p.integer ? CPUF_FN(st_cpuf_qmm_block_rows)(k) : CPUF_FN(st_cpuf_fmm_block_rows)(type, k);
    p.scratch = cpuf_round_up(p.integer ? CPUF_FN(st_cpuf_qmm_scratch)(k, p.block)
                                        : CPUF_FN(st_cpuf_fmm_scratch)(type, k, p.block));
    return p;
}

static void run_block(const product *p, const char *w_rows, size_t nb1, int64_t n0, const cpuf_cols *cols,
                      void *scratch) {
    const int64_t rows = p->n - n0 < p->block ? p->n - n0 : p->block;
    if (p->integer)
        CPUF_FN(st_cpuf_qmm_block)(p->type, w_rows, nb1, p->k, n0, rows, cols, scratch);
    else
        CPUF_FN(st_cpuf_fmm_block)(p->type, w_rows, nb1, p->k, n0, rows, cols, scratch);
}

st_status CPUF_FN(st_cpuf_mul_mat)(st_cpu_ws *ws, st_tensor *dst, const st_tensor *w, const st_tensor *x,
                                   st_error *err) {
    /* w [K, N] any nb[1] (float or quantized); x F32 [K, M...]; dst F32 [N, M...] */
    st_status status = st_quant_check_weight_type(w->type, "mul_mat", err);
    if (status != ST_OK) return status;
    ST_ASSERT(cpu_is_weight(w) && w->ne[2] == 1 && w->ne[3] == 1);
    ST_ASSERT(cpu_is_f32_rows(x) && cpu_is_f32_rows(dst));
    ST_ASSERT(x->ne[0] == w->ne[0] && dst->ne[0] == w->ne[1]);
    ST_ASSERT(dst->ne[1] == x->ne[1] && dst->ne[2] == x->ne[2] && dst->ne[3] == x->ne[3]);
    const int64_t k = w->ne[0], m_count = cpu_nrows(x);
    if (w->ne[1] == 0 || m_count == 0) return ST_OK;
    const product p = product_plan(w->type, k, w->ne[1]);
    const int n_threads = cpuf_threads();
    const int64_t n_blocks = (p.n + p.block - 1) / p.block;
    /* columns in groups when the rows alone cannot feed every thread twice */
    int64_t n_groups = 1;
    if (n_blocks < 2 * n_threads && m_count >= 8) {
        n_groups = (2 * n_threads + n_blocks - 1) / n_blocks;
        if (n_groups > m_count / 4) n_groups = m_count / 4;
    }
    const int64_t group = (m_count + n_groups - 1) / n_groups;

    const size_t bytes = 2 * cpuf_round_up((size_t)m_count * sizeof(void *)) +
                         cpuf_round_up((size_t)m_count * sizeof(cpuf_qcol)) + (p.integer ? qx_bytes(m_count, k) : 0) +
                         (size_t)n_threads * p.scratch;
    if ((status = st_cpu_ws_reserve(ws, bytes, "mul_mat", err)) != ST_OK) return status;
    char *cur = ws->buf;
    const float **xs = cpuf_carve(&cur, (size_t)m_count * sizeof(void *)); /* [M] input rows */
    float **ys = cpuf_carve(&cur, (size_t)m_count * sizeof(void *));       /* [M] output rows */
    cpuf_qcol *qx = cpuf_carve(&cur, (size_t)m_count * sizeof(cpuf_qcol)); /* [M] quantized inputs */
    int8_t *q = NULL;
    float *d = NULL, *s = NULL;
    if (p.integer) qx_carve(&cur, m_count, k, qx, &q, &d, &s);
    char *scratch = cur; /* [threads][p.scratch] */
    for (int64_t m = 0; m < m_count; m++) {
        xs[m] = (const float *)cpu_row(x, m);
        ys[m] = (float *)cpu_row(dst, m);
    }
    const int64_t n_tasks = n_blocks * n_groups;

#pragma omp parallel num_threads(cpuf_threads()) if (k * p.n * m_count >= CPUF_PAR_MIN_MACS)
    {
        if (p.integer) {
#pragma omp for schedule(static)
            for (int64_t m = 0; m < m_count; m++)
                CPUF_FN(st_cpuf_quantize_row)(xs[m], k, q + m * k, d + m * (k / 32), s + m * (k / 32));
        }
        void *mine = scratch + (size_t)cpuf_thread_id() * p.scratch;
#pragma omp for schedule(static)
        for (int64_t t = 0; t < n_tasks; t++) {
            const int64_t b = t % n_blocks, g = t / n_blocks; /* a thread's share: contiguous rows */
            const int64_t c0 = g * group, nc = m_count - c0 < group ? m_count - c0 : group;
            if (nc <= 0) continue;
            const cpuf_cols cols = {nc, xs + c0, qx + c0, ys + c0};
            run_block(&p, (const char *)w->data + (size_t)(b * p.block) * w->nb[1], w->nb[1], b * p.block, &cols,
                      mine);
        }
    }
    return ST_OK;
}

st_status CPUF_FN(st_cpuf_mul_mat_id)(st_cpu_ws *ws, st_tensor *dst, const st_tensor *w, const st_tensor *x,
                                      const int32_t *ids, st_error *err) {
    /* w [K, N, E] any nb[1], nb[2]; dst F32 [N, n_used, M]; ids [n_used, M];
     * x F32 [K, M] or [K, 1, M] (shared by the slots of a token) or [K, n_used, M] */
    st_status status = st_quant_check_weight_type(w->type, "mul_mat_id", err);
    if (status != ST_OK) return status;
    ST_ASSERT(cpu_is_weight(w) && w->ne[3] == 1);
    const int64_t k = w->ne[0], n_expert = w->ne[2];
    ST_ASSERT(cpu_is_f32_rows(dst) && dst->ne[0] == w->ne[1] && dst->ne[3] == 1);
    const int64_t n_used = dst->ne[1], m_count = dst->ne[2];
    ST_ASSERT(cpu_is_f32_rows(x) && x->ne[0] == k && x->ne[3] == 1);
    const bool per_slot = x->ne[1] == n_used && x->ne[2] == m_count;
    const bool shared_2d = x->ne[1] == m_count && x->ne[2] == 1;
    const bool shared_3d = x->ne[1] == 1 && x->ne[2] == m_count;
    ST_ASSERT(per_slot || shared_2d || shared_3d);
    const int64_t n_slots = n_used * m_count;
    if (w->ne[1] == 0 || n_slots == 0) return ST_OK;
    ST_ASSERT(ids != NULL);
    for (int64_t sl = 0; sl < n_slots; sl++) {
        if (ids[sl] < 0 || ids[sl] >= n_expert)
            return st_error_set(err, ST_ERROR_INVALID,
                                "mul_mat_id: expert id %d (token %lld, slot %lld) is outside [0, %lld)", (int)ids[sl],
                                (long long)(sl / n_used), (long long)(sl % n_used), (long long)n_expert);
    }
    const product p = product_plan(w->type, k, w->ne[1]);
    const int n_threads = cpuf_threads();
    const int64_t n_inputs = per_slot ? n_slots : m_count; /* distinct input rows */
    const size_t bytes = cpuf_round_up((size_t)(n_expert + 1) * sizeof(int64_t)) * 2 +
                         cpuf_round_up((size_t)n_inputs * sizeof(void *)) +
                         2 * cpuf_round_up((size_t)n_slots * sizeof(void *)) +
                         cpuf_round_up((size_t)n_inputs * sizeof(cpuf_qcol)) +
                         cpuf_round_up((size_t)n_slots * sizeof(cpuf_qcol)) + (p.integer ? qx_bytes(n_inputs, k) : 0) +
                         (size_t)n_threads * p.scratch;
    if ((status = st_cpu_ws_reserve(ws, bytes, "mul_mat_id", err)) != ST_OK) return status;
    char *cur = ws->buf;
    int64_t *first = cpuf_carve(&cur, (size_t)(n_expert + 1) * sizeof(int64_t)); /* expert e: [first[e], first[e+1]) */
    int64_t *fill = cpuf_carve(&cur, (size_t)(n_expert + 1) * sizeof(int64_t));
    const float **in = cpuf_carve(&cur, (size_t)n_inputs * sizeof(void *));  /* [inputs] rows of x */
    const float **xs = cpuf_carve(&cur, (size_t)n_slots * sizeof(void *));   /* [slots] by expert */
    float **ys = cpuf_carve(&cur, (size_t)n_slots * sizeof(void *));         /* [slots] by expert */
    cpuf_qcol *qin = cpuf_carve(&cur, (size_t)n_inputs * sizeof(cpuf_qcol)); /* [inputs] quantized */
    cpuf_qcol *qx = cpuf_carve(&cur, (size_t)n_slots * sizeof(cpuf_qcol));   /* [slots] by expert */
    int8_t *q = NULL;
    float *d = NULL, *s = NULL;
    if (p.integer) qx_carve(&cur, n_inputs, k, qin, &q, &d, &s);
    char *scratch = cur;

    for (int64_t i = 0; i < n_inputs; i++) {
        const int64_t m = per_slot ? i / n_used : i, j = per_slot ? i % n_used : 0;
        in[i] = (const float *)((const char *)x->data +
                                (per_slot    ? (size_t)j * x->nb[1] + (size_t)m * x->nb[2]
                                 : shared_2d ? (size_t)m * x->nb[1]
                                             : (size_t)m * x->nb[2]));
    }
    /* slots sorted by expert (counting sort) */
    memset(first, 0, (size_t)(n_expert + 1) * sizeof(int64_t));
    for (int64_t sl = 0; sl < n_slots; sl++) first[ids[sl] + 1]++;
    for (int64_t e = 0; e < n_expert; e++) first[e + 1] += first[e];
    memcpy(fill, first, (size_t)(n_expert + 1) * sizeof(int64_t));
    for (int64_t m = 0; m < m_count; m++) {
        for (int64_t j = 0; j < n_used; j++) {
            const int64_t input = per_slot ? m * n_used + j : m, at = fill[ids[m * n_used + j]]++;
            xs[at] = in[input];
            qx[at] = qin[input]; /* its rows are filled below, before the products */
            ys[at] = (float *)((char *)dst->data + (size_t)j * dst->nb[1] + (size_t)m * dst->nb[2]);
        }
    }
    const int64_t n_blocks = (p.n + p.block - 1) / p.block, n_tasks = n_expert * n_blocks;

#pragma omp parallel num_threads(cpuf_threads()) if (k * p.n * n_slots >= CPUF_PAR_MIN_MACS)
    {
        if (p.integer) {
#pragma omp for schedule(static)
            for (int64_t i = 0; i < n_inputs; i++)
                CPUF_FN(st_cpuf_quantize_row)(in[i], k, q + i * k, d + i * (k / 32), s + i * (k / 32));
        }
        void *mine = scratch + (size_t)cpuf_thread_id() * p.scratch;
        /* dynamic: the experts' loads differ (some chosen by many tokens, most by none) */
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < n_tasks; t++) {
            const int64_t e = t / n_blocks, b = t % n_blocks;
            if (first[e + 1] == first[e]) continue;
            const cpuf_cols cols = {first[e + 1] - first[e], xs + first[e], qx + first[e], ys + first[e]};
            const char *w_rows = (const char *)w->data + (size_t)e * w->nb[2] + (size_t)(b * p.block) * w->nb[1];
            run_block(&p, w_rows, w->nb[1], b * p.block, &cols, mine);
        }
    }
    return ST_OK;
}
