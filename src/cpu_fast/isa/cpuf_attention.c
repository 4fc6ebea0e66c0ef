/*
 * Attention over the KV cache (F16 or F32), contiguous or paged, and the store into it,
 * with the contracts of st_cpu_attention_paged and st_cpu_kv_store. Key t of a query
 * lives at cache slot st_kv_slot(blocks, t): its sequence's block table row, or t itself.
 *
 * A task is one query position and a tile of up to ATT_H query heads that read the same
 * KV head (GQA): each key row is converted once for the whole tile. When the tiles are too
 * few to keep every thread busy twice (a decode step), every head is a task of its own.
 * Tasks interleave positions over the threads (schedule static, 1): under the causal mask
 * late positions see more keys, and interleaving evens the work out.
 *
 * Per query: scores s_t = scale * q.k_t (each one vector accumulator of f32 lanes over
 * head_dim, then cpuf_vf_sum: the order does not depend on the tiling), soft-capping with
 * tanhf when asked, max subtraction, weights e^(s_t - max) from cpuf_vf_exp summed in f32
 * lanes, then out = (sum_t w_t v_t) / sum with the value rows converted a vector at a time.
 */
#include <math.h>

#include "cpu_fast/isa/cpuf_internal.h"

#define ATT_H 4  /* query heads a tile */
#define ATT_KT 2 /* keys scored together (independent accumulator chains) */
#define ATT_DV 8 /* value vectors accumulated together */

CPUF_INLINE cpuf_vf kvload(bool f16, const void *row, int64_t d) {
    return f16 ? cpuf_vf_load_f16((const uint16_t *)row + d) : cpuf_vf_load((const float *)row + d);
}
CPUF_INLINE cpuf_vf kvload_tail(bool f16, const void *row, int64_t d, int n) {
    if (!f16) return cpuf_vf_load_n((const float *)row + d, n);
    float b[CPUF_VF_LANES];
    cpu_row_to_f32(ST_TYPE_F16, (const uint16_t *)row + d, b, n);
    return cpuf_vf_load_n(b, n);
}

/* scores[g][t] = q_g . k_t for KT keys and H heads (compile-time KT and H). */
CPUF_INLINE void qk_tile(bool f16, int KT, int H, const float *const *q, const char *const *k, int64_t hd,
                         float *const *scores, int64_t t0) {
    cpuf_vf acc[ATT_KT][ATT_H];
    CPUF_UNROLL
    for (int i = 0; i < KT; i++)
        CPUF_UNROLL
        for (int g = 0; g < H; g++) acc[i][g] = cpuf_vf_zero();
    const int64_t dv = hd - hd % CPUF_VF_LANES;
    for (int64_t d = 0; d < dv; d += CPUF_VF_LANES) {
        cpuf_vf qv[ATT_H];
        CPUF_UNROLL
        for (int g = 0; g < H; g++) qv[g] = cpuf_vf_load(q[g] + d);
        CPUF_UNROLL
        for (int i = 0; i < KT; i++) {
            const cpuf_vf kv = kvload(f16, k[i], d);
            CPUF_UNROLL
            for (int g = 0; g < H; g++) acc[i][g] = cpuf_vf_fma(qv[g], kv, acc[i][g]);
        }
    }
    if (dv < hd) {
        const int n = (int)(hd - dv);
        cpuf_vf qv[ATT_H];
        CPUF_UNROLL
        for (int g = 0; g < H; g++) qv[g] = cpuf_vf_load_n(q[g] + dv, n);
        CPUF_UNROLL
        for (int i = 0; i < KT; i++) {
            const cpuf_vf kv = kvload_tail(f16, k[i], dv, n);
            CPUF_UNROLL
            for (int g = 0; g < H; g++) acc[i][g] = cpuf_vf_fma(qv[g], kv, acc[i][g]);
        }
    }
    CPUF_UNROLL
    for (int i = 0; i < KT; i++)
        CPUF_UNROLL
        for (int g = 0; g < H; g++) scores[g][t0 + i] = cpuf_vf_sum(acc[i][g]);
}

CPUF_INLINE void qk_all(bool f16, int H, const float *const *q, const st_tensor *kc, int64_t kvh,
                        const int32_t *blocks, int64_t t_lo, int64_t n, float *const *scores) {
    const int64_t hd = kc->ne[0];
    const char *base = (const char *)kc->data + (size_t)kvh * kc->nb[1];
    int64_t t = 0;
    for (; t + ATT_KT <= n; t += ATT_KT) {
        const char *k[ATT_KT];
        for (int i = 0; i < ATT_KT; i++) k[i] = base + (size_t)st_kv_slot(blocks, t_lo + t + i) * kc->nb[2];
        qk_tile(f16, ATT_KT, H, q, k, hd, scores, t);
    }
    for (; t < n; t++) {
        const char *k[1] = {base + (size_t)st_kv_slot(blocks, t_lo + t) * kc->nb[2]};
        qk_tile(f16, 1, H, q, k, hd, scores, t);
    }
}

/* scores [n] -> weights e^(scale s - max) in place; returns their sum. */
static float softmax_weights(float *scores, int64_t n, float scale, float softcap) {
    float max = -INFINITY;
    for (int64_t t = 0; t < n; t++) {
        float s = scale * scores[t];
        if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
        scores[t] = s;
        max = fmaxf(max, s);
    }
    const cpuf_vf mv = cpuf_vf_set1(max);
    cpuf_vf acc = cpuf_vf_zero();
    for (int64_t t = 0; t < n; t += CPUF_VF_LANES) {
        const int k = n - t < CPUF_VF_LANES ? (int)(n - t) : CPUF_VF_LANES;
        const cpuf_vf e = cpuf_vf_exp(cpuf_vf_sub(cpuf_vf_load_n(scores + t, k), mv));
        if (k == CPUF_VF_LANES) {
            cpuf_vf_store(scores + t, e);
            acc = cpuf_vf_add(acc, e);
        } else {
            cpuf_vf_store_n(scores + t, e, k);
            acc = cpuf_vf_add(acc, cpuf_vf_load_n(scores + t, k)); /* zero lanes past n */
        }
    }
    return cpuf_vf_sum(acc);
}

/* out[d] = sum_t w[t] v_t[d] / sum for one head, DV vectors of d at a time. */
static void pv(bool f16, const float *w, const st_tensor *vc, int64_t kvh, const int32_t *blocks, int64_t t_lo,
               int64_t n, float inv_sum, float *out) {
    const int64_t hd = vc->ne[0];
    const char *base = (const char *)vc->data + (size_t)kvh * vc->nb[1];
    const cpuf_vf is = cpuf_vf_set1(inv_sum);
    int64_t d = 0;
    for (; d + ATT_DV * CPUF_VF_LANES <= hd; d += ATT_DV * CPUF_VF_LANES) {
        cpuf_vf acc[ATT_DV];
        for (int j = 0; j < ATT_DV; j++) acc[j] = cpuf_vf_zero();
        for (int64_t t = 0; t < n; t++) {
            const char *v = base + (size_t)st_kv_slot(blocks, t_lo + t) * vc->nb[2];
            const cpuf_vf wt = cpuf_vf_set1(w[t]);
            for (int j = 0; j < ATT_DV; j++) acc[j] = cpuf_vf_fma(wt, kvload(f16, v, d + j * CPUF_VF_LANES), acc[j]);
        }
        for (int j = 0; j < ATT_DV; j++) cpuf_vf_store(out + d + j * CPUF_VF_LANES, cpuf_vf_mul(acc[j], is));
    }
    for (; d < hd; d += CPUF_VF_LANES) {
        const int k = hd - d < CPUF_VF_LANES ? (int)(hd - d) : CPUF_VF_LANES;
        cpuf_vf acc = cpuf_vf_zero();
        for (int64_t t = 0; t < n; t++) {
            const char *v = base + (size_t)st_kv_slot(blocks, t_lo + t) * vc->nb[2];
            const cpuf_vf vv = k == CPUF_VF_LANES ? kvload(f16, v, d) : kvload_tail(f16, v, d, k);
            acc = cpuf_vf_fma(cpuf_vf_set1(w[t]), vv, acc);
        }
        cpuf_vf_store_n(out + d, cpuf_vf_mul(acc, is), k);
    }
}

st_status CPUF_FN(st_cpuf_attention)(st_cpu_ws *ws, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                                     const st_tensor *v_cache, const int32_t *positions, const int32_t *seq,
                                     const int32_t *table, int32_t max_blocks, const st_attn_params *p,
                                     st_error *err) {
    cpu_attention_check(dst, q, k_cache, v_cache, positions, seq, table, max_blocks, p);
    const int64_t head_dim = q->ne[0], n_head = q->ne[1], m_count = q->ne[2];
    const int64_t n_head_kv = k_cache->ne[1];
    if (m_count == 0 || n_head == 0) return ST_OK;
    const int64_t group = n_head / n_head_kv; /* query heads per kv head */
    const int n_threads = cpuf_threads();
    int64_t tile = group < ATT_H ? group : ATT_H;
    if (n_head_kv * m_count * ((group + tile - 1) / tile) < 2 * n_threads) tile = 1;
    const int64_t tiles = (group + tile - 1) / tile; /* per kv head */
    const int64_t n_tasks = m_count * n_head_kv * tiles;
    const size_t per_thread = cpuf_round_up((size_t)(ATT_H * (p->n_kv > 0 ? p->n_kv : 1)) * sizeof(float));
    st_status status = st_cpu_ws_reserve(ws, (size_t)n_threads * per_thread, "attention", err);
    if (status != ST_OK) return status;
    const bool kf16 = k_cache->type == ST_TYPE_F16, vf16 = v_cache->type == ST_TYPE_F16;
    const int64_t work = m_count * n_head * p->n_kv * head_dim; /* at most: masks see less */

#pragma omp parallel num_threads(cpuf_threads()) if (work >= CPUF_PAR_MIN_MACS)
    {
        float *scratch = (float *)((char *)ws->buf + (size_t)cpuf_thread_id() * per_thread); /* [ATT_H][n_kv] */
#pragma omp for schedule(static, 1)
        for (int64_t task = 0; task < n_tasks; task++) {
            const int64_t m = task / (n_head_kv * tiles), kvh = (task / tiles) % n_head_kv, ti = task % tiles;
            const int64_t h0 = kvh * group + ti * tile, nh = group - ti * tile < tile ? group - ti * tile : tile;
            const int64_t pos = positions[m];
            const int32_t *blocks = table ? table + (size_t)seq[m] * (size_t)max_blocks : NULL;
            const int64_t t_hi = pos < p->n_kv - 1 ? pos : p->n_kv - 1;
            int64_t t_lo = p->window > 0 ? pos - p->window + 1 : 0;
            if (t_lo < 0) t_lo = 0;
            const float *qr[ATT_H];
            float *out[ATT_H], *sc[ATT_H];
            for (int64_t g = 0; g < nh; g++) {
                qr[g] = (const float *)((const char *)q->data + (size_t)(h0 + g) * q->nb[1] + (size_t)m * q->nb[2]);
                out[g] = (float *)((char *)dst->data + (size_t)(h0 + g) * dst->nb[1] + (size_t)m * dst->nb[2]);
                sc[g] = scratch + g * p->n_kv;
            }
            if (t_hi < t_lo) { /* sees nothing: defined as zeros */
                for (int64_t g = 0; g < nh; g++) memset(out[g], 0, (size_t)head_dim * sizeof(float));
                continue;
            }
            const int64_t n = t_hi - t_lo + 1;
            switch (nh) {
            case 1: qk_all(kf16, 1, qr, k_cache, kvh, blocks, t_lo, n, sc); break;
            case 2: qk_all(kf16, 2, qr, k_cache, kvh, blocks, t_lo, n, sc); break;
            case 3: qk_all(kf16, 3, qr, k_cache, kvh, blocks, t_lo, n, sc); break;
            default: qk_all(kf16, 4, qr, k_cache, kvh, blocks, t_lo, n, sc); break;
            }
            for (int64_t g = 0; g < nh; g++) {
                const float sum = softmax_weights(sc[g], n, p->scale, p->softcap);
                pv(vf16, sc[g], v_cache, kvh, blocks, t_lo, n, 1.0f / sum, out[g]);
            }
        }
    }
    return ST_OK;
}

st_status CPUF_FN(st_cpuf_kv_store)(st_tensor *cache, const st_tensor *x, const int32_t *positions, st_error *err) {
    /* x F32 [head_dim, n_head_kv, M]; cache F16/F32 [head_dim, n_head_kv, n_ctx] */
    ST_ASSERT(cpu_is_f32_rows(x) && x->ne[3] == 1);
    ST_ASSERT(cpu_is_kv_cache(cache->type) && cpu_is_float_weight(cache) && cache->ne[3] == 1);
    ST_ASSERT(cache->ne[0] == x->ne[0] && cache->ne[1] == x->ne[1]);
    const int64_t head_dim = x->ne[0], n_head_kv = x->ne[1], m_count = x->ne[2], n_ctx = cache->ne[2];
    ST_ASSERT(m_count == 0 || positions != NULL);
    for (int64_t m = 0; m < m_count; m++) {
        if (positions[m] < 0 || positions[m] >= n_ctx)
            return st_error_set(err, ST_ERROR_INVALID,
                                "kv cache: position %d is outside the context [0, %lld): "
                                "the context is full (raise the context size)",
                                (int)positions[m], (long long)n_ctx);
    }
    const int64_t n_rows = n_head_kv * m_count;
    const int64_t dv = head_dim - head_dim % CPUF_VF_LANES;
#pragma omp parallel for num_threads(cpuf_threads()) schedule(static) \
    if (n_rows * head_dim >= CPUF_PAR_MIN_ELEMS)
    for (int64_t r = 0; r < n_rows; r++) {
        const int64_t h = r % n_head_kv, m = r / n_head_kv;
        const float *src = (const float *)((const char *)x->data + (size_t)h * x->nb[1] + (size_t)m * x->nb[2]);
        char *to = (char *)cache->data + (size_t)h * cache->nb[1] + (size_t)positions[m] * cache->nb[2];
        if (cache->type == ST_TYPE_F16) {
            uint16_t *o = (uint16_t *)to;
            for (int64_t d = 0; d < dv; d += CPUF_VF_LANES) cpuf_vf_store_f16(o + d, cpuf_vf_load(src + d));
            if (dv < head_dim) st_f32_to_f16_row(src + dv, o + dv, (size_t)(head_dim - dv));
        } else {
            memcpy(to, src, (size_t)head_dim * sizeof(float));
        }
    }
    return ST_OK;
}
