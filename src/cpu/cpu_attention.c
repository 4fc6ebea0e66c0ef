/*
 * Causal attention over a KV cache (GQA, sliding window, optional logit soft-capping)
 * and the store of new keys/values into the cache.
 *
 * Cache layout: [head_dim, n_head_kv, n_slots] with strides, F16 or F32. Key t (a
 * position) of query m is at cache slot t (one sequence, contiguous), or, paged, at the slot
 * its sequence's block table gives (ops.h, st_kv_slot). Query m at position p sees keys
 *     t <= p,  t < n_kv,  and (window > 0) p - t < window
 * (a window of W keys counting the query's own: llama.cpp masks p1 - p0 >= n_swa,
 * transformers keeps kv_idx > q_idx - sliding_window; the same boundary).
 *
 * One (head, query) pair per task: scores into a scratch row, max subtraction, f32
 * exponentials (their sum in double), then the weighted sum of value rows in f32 and one
 * division. Keys and values are converted to f32 a row at a time.
 */
#include <math.h>
#include <stdlib.h>

#include "cpu/cpu_internal.h"
#include "stride/cpu_ops.h"
#include "stride/types.h"

st_status st_cpu_attention(st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                           const st_tensor *v_cache, const int32_t *positions,
                           const st_attn_params *p, st_error *err) {
    return st_cpu_attention_paged(dst, q, k_cache, v_cache, positions, NULL, NULL, 0, p, err);
}

st_status st_cpu_attention_paged(st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                                 const st_tensor *v_cache, const int32_t *positions,
                                 const int32_t *seq, const int32_t *table, int32_t max_blocks,
                                 const st_attn_params *p, st_error *err) {
    cpu_attention_check(dst, q, k_cache, v_cache, positions, seq, table, max_blocks, p);
    const int64_t head_dim = q->ne[0], n_head = q->ne[1], m_count = q->ne[2];
    const int64_t n_head_kv = k_cache->ne[1];
    const int64_t group = n_head / n_head_kv; /* query heads per kv head */
    const int64_t n_tasks = n_head * m_count;
    bool nomem = false;

#pragma omp parallel
    {
        /* scratch: scores [n_kv], one key/value row [head_dim], the output sum [head_dim] */
        float *scores = malloc((size_t)(p->n_kv + 2 * head_dim + 1) * sizeof(float));
        if (!scores) {
#pragma omp atomic write
            nomem = true;
        }
        float *row = scores ? scores + p->n_kv : NULL;
        float *acc = scores ? row + head_dim : NULL;

#pragma omp for schedule(static)
        for (int64_t task = 0; task < n_tasks; task++) {
            if (!scores) continue;
            const int64_t h = task % n_head, m = task / n_head, kvh = h / group;
            const float *qr = (const float *)((const char *)q->data + (size_t)h * q->nb[1] +
                                              (size_t)m * q->nb[2]);
            float *out = (float *)((char *)dst->data + (size_t)h * dst->nb[1] +
                                   (size_t)m * dst->nb[2]);
            const int64_t pos = positions[m];
            const int32_t *blocks = table ? table + (size_t)seq[m] * (size_t)max_blocks : NULL;
            int64_t t_hi = pos < p->n_kv - 1 ? pos : p->n_kv - 1;
            int64_t t_lo = p->window > 0 ? pos - p->window + 1 : 0;
            if (t_lo < 0) t_lo = 0;

            if (t_hi < t_lo) { /* sees nothing: defined as zeros */
                for (int64_t d = 0; d < head_dim; d++) out[d] = 0.0f;
                continue;
            }
            float max = -INFINITY;
            for (int64_t t = t_lo; t <= t_hi; t++) {
                const char *kr = (const char *)k_cache->data + (size_t)kvh * k_cache->nb[1] +
                                 (size_t)st_kv_slot(blocks, t) * k_cache->nb[2];
                cpu_row_to_f32(k_cache->type, kr, row, head_dim);
                float s = p->scale * cpu_dot_f32(qr, row, head_dim);
                if (p->softcap > 0.0f) s = p->softcap * tanhf(s / p->softcap);
                scores[t] = s;
                max = fmaxf(max, s);
            }
            double sum = 0.0;
            for (int64_t d = 0; d < head_dim; d++) acc[d] = 0.0f;
            for (int64_t t = t_lo; t <= t_hi; t++) {
                const float w = expf(scores[t] - max); /* <= 1 */
                sum += (double)w;
                const char *vr = (const char *)v_cache->data + (size_t)kvh * v_cache->nb[1] +
                                 (size_t)st_kv_slot(blocks, t) * v_cache->nb[2];
                cpu_row_to_f32(v_cache->type, vr, row, head_dim);
                for (int64_t d = 0; d < head_dim; d++) acc[d] += w * row[d];
            }
            for (int64_t d = 0; d < head_dim; d++) out[d] = (float)((double)acc[d] / sum);
        }
        free(scores);
    }
    if (nomem)
        return st_error_set(err, ST_ERROR_NOMEM, "attention: no memory for %lld scores",
                            (long long)p->n_kv);
    return ST_OK;
}

st_status st_cpu_kv_store(st_tensor *cache, const st_tensor *x, const int32_t *positions,
                          st_error *err) {
    /* x F32 [head_dim, n_head_kv, M]; cache F16/F32 [head_dim, n_head_kv, n_slots];
     * positions: the cache slot of each token */
    ST_ASSERT(cpu_is_f32_rows(x) && x->ne[3] == 1);
    ST_ASSERT(cpu_is_kv_cache(cache->type) && cpu_is_float_weight(cache) && cache->ne[3] == 1);
    ST_ASSERT(cache->ne[0] == x->ne[0] && cache->ne[1] == x->ne[1]);
    const int64_t head_dim = x->ne[0], n_head_kv = x->ne[1], m_count = x->ne[2];
    const int64_t n_ctx = cache->ne[2];
    ST_ASSERT(m_count == 0 || positions != NULL);
    for (int64_t m = 0; m < m_count; m++) {
        if (positions[m] < 0 || positions[m] >= n_ctx)
            return st_error_set(err, ST_ERROR_INVALID,
                                "kv cache: position %d is outside the context [0, %lld): "
                                "the context is full (raise the context size)",
                                (int)positions[m], (long long)n_ctx);
    }
    const int64_t n_rows = n_head_kv * m_count;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n_rows; r++) {
        const int64_t h = r % n_head_kv, m = r / n_head_kv;
        const float *src = (const float *)((const char *)x->data + (size_t)h * x->nb[1] +
                                           (size_t)m * x->nb[2]);
        char *to = (char *)cache->data + (size_t)h * cache->nb[1] +
                   (size_t)positions[m] * cache->nb[2];
        if (cache->type == ST_TYPE_F16)
            st_f32_to_f16_row(src, (uint16_t *)to, (size_t)head_dim);
        else
            memcpy(to, src, (size_t)head_dim * sizeof(float));
    }
    return ST_OK;
}
