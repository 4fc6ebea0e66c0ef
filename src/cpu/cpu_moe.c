/*
 * Mixture of experts: the product over selected experts (st_cpu_mul_mat_id) and the
 * router's top-k choice (st_cpu_topk_route).
 *
 * mul_mat_id groups the (token, slot) pairs by expert, so that each expert's weight is
 * converted to f32 once per call however many tokens chose it, and then runs the same
 * block kernel as mul_mat over (expert, row block) tasks. Each output is therefore the
 * very dot product mul_mat computes for that expert's matrix.
 */
#include <math.h>
#include <stdlib.h>

#include "core/moe_route.h"
#include "cpu/cpu_internal.h"
#include "stride/cpu_ops.h"

/* ---- mul_mat_id ----------------------------------------------------------------------- */

st_status st_cpu_mul_mat_id(st_tensor *dst, const st_tensor *w, const st_tensor *x,
                            const int32_t *ids, st_error *err) {
    /* w [K, N, E] any nb[1], nb[2]; dst F32 [N, n_used, M]; ids [n_used, M];
     * x F32 [K, M] or [K, 1, M] (shared by the slots of a token) or [K, n_used, M];
     * w float or quantized */
    st_status status = st_quant_check_weight_type(w->type, "mul_mat_id", err);
    if (status != ST_OK) return status;
    ST_ASSERT(cpu_is_weight(w) && w->ne[3] == 1);
    const int64_t k = w->ne[0], n = w->ne[1], n_expert = w->ne[2];
    ST_ASSERT(cpu_is_f32_rows(dst) && dst->ne[0] == n && dst->ne[3] == 1);
    const int64_t n_used = dst->ne[1], m_count = dst->ne[2];
    ST_ASSERT(cpu_is_f32_rows(x) && x->ne[0] == k && x->ne[3] == 1);
    const bool per_slot = x->ne[1] == n_used && x->ne[2] == m_count;
    const bool shared_2d = x->ne[1] == m_count && x->ne[2] == 1;
    const bool shared_3d = x->ne[1] == 1 && x->ne[2] == m_count;
    ST_ASSERT(per_slot || shared_2d || shared_3d);
    const int64_t n_slots = n_used * m_count;
    if (n == 0 || n_slots == 0) return ST_OK;
    ST_ASSERT(ids != NULL);

    for (int64_t s = 0; s < n_slots; s++) {
        if (ids[s] < 0 || ids[s] >= n_expert)
            return st_error_set(err, ST_ERROR_INVALID,
                                "mul_mat_id: expert id %d (token %lld, slot %lld) is outside "
                                "[0, %lld)",
                                (int)ids[s], (long long)(s / n_used), (long long)(s % n_used),
                                (long long)n_expert);
    }

    /* slots sorted by expert (counting sort): expert e owns xs/ys[first[e] .. first[e+1]) */
    int64_t *first = calloc((size_t)n_expert + 1, sizeof(*first));
    const float **xs = malloc((size_t)n_slots * sizeof(*xs));
    float **ys = malloc((size_t)n_slots * sizeof(*ys));
    int64_t *fill = malloc((size_t)n_expert * sizeof(*fill));
    if (!first || !xs || !ys || !fill) {
        free(first);
        free(xs);
        free(ys);
        free(fill);
        return st_error_set(err, ST_ERROR_NOMEM, "mul_mat_id: no memory to group %lld slots",
                            (long long)n_slots);
    }
    for (int64_t s = 0; s < n_slots; s++) first[ids[s] + 1]++;
    for (int64_t e = 0; e < n_expert; e++) first[e + 1] += first[e];
    for (int64_t e = 0; e < n_expert; e++) fill[e] = first[e];
    for (int64_t m = 0; m < m_count; m++) {
        for (int64_t j = 0; j < n_used; j++) {
            const char *xrow;
            if (per_slot)
                xrow = (const char *)x->data + (size_t)j * x->nb[1] + (size_t)m * x->nb[2];
            else if (shared_2d)
                xrow = (const char *)x->data + (size_t)m * x->nb[1];
            else
                xrow = (const char *)x->data + (size_t)m * x->nb[2];
            int64_t at = fill[ids[m * n_used + j]]++;
            xs[at] = (const float *)xrow;
            ys[at] = (float *)((char *)dst->data + (size_t)j * dst->nb[1] + (size_t)m * dst->nb[2]);
        }
    }
    free(fill);

    const int64_t block = st_cpu_mm_block_rows(k);
    const int64_t n_blocks = (n + block - 1) / block;
    const int64_t n_tasks = n_expert * n_blocks;
    const bool convert = w->type != ST_TYPE_F32;
    bool nomem = false;

#pragma omp parallel
    {
        float *scratch = convert ? malloc((size_t)(block * k) * sizeof(float)) : NULL;
        if (convert && !scratch) {
#pragma omp atomic write
            nomem = true;
        }
        /* dynamic: the experts' loads differ (some chosen by many tokens, most by none) */
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < n_tasks; t++) {
            int64_t e = t / n_blocks, b = t % n_blocks;
            if (first[e + 1] == first[e] || (convert && !scratch)) continue;
            const st_cpu_mm_cols cols = {first[e + 1] - first[e], xs + first[e], ys + first[e]};
            int64_t n0 = b * block;
            int64_t rows = n - n0 < block ? n - n0 : block;
            const char *w_rows =
                (const char *)w->data + (size_t)e * w->nb[2] + (size_t)n0 * w->nb[1];
            st_cpu_mm_block(w->type, w_rows, w->nb[1], k, n0, rows, &cols, scratch);
        }
        free(scratch);
    }
    free(first);
    free(xs);
    free(ys);
    if (nomem)
        return st_error_set(err, ST_ERROR_NOMEM,
                            "mul_mat_id: no memory for a %lld x %lld f32 block", (long long)block,
                            (long long)k);
    return ST_OK;
}

/* ---- top-k routing -------------------------------------------------------------------- */

void st_cpu_topk_route(int32_t *out_ids, st_tensor *out_weights, const st_tensor *logits,
                       int32_t k, bool softmax_first, bool normalize) {
    /* logits F32 [E, M]; out_ids [k, M] packed; out_weights F32 [k, M] */
    ST_ASSERT(cpu_is_f32_rows(logits) && logits->ne[2] == 1 && logits->ne[3] == 1);
    ST_ASSERT(cpu_is_f32_rows(out_weights) && out_weights->ne[2] == 1 && out_weights->ne[3] == 1);
    const int64_t n_expert = logits->ne[0], m_count = logits->ne[1];
    ST_ASSERT(k >= 1 && k <= n_expert);
    ST_ASSERT(out_weights->ne[0] == k && out_weights->ne[1] == m_count && out_ids != NULL);

#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < m_count; m++) {
        const float *l = (const float *)cpu_row(logits, m); /* [E] */
        int32_t *id = out_ids + m * k;                        /* [k] */
        float *wt = (float *)cpu_row(out_weights, m);         /* [k] */

        st_moe_route_token(l, n_expert, k, softmax_first, normalize, id, wt);
    }
}
