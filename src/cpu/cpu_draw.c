/* A token from each whole logits row where the logits are: the host sampler's chain
 * (penalties, top-k, top-p, min-p, temperature, the draw) on a row, so that a backend's
 * sampling has a reference that gives st_sampler_sample's token by construction. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_internal.h"
#include "stride/cpu_ops.h"
#include "stride/sample.h"

/* The token from row x [V] (or -1 / -2, st_cpu_draw_rows) for params p [6], words w [4]
 * and the penalized tokens counted [w[3]][2]; cand: [V] scratch. */
static int32_t draw_row(const float *x, int64_t V, const float *p, const int32_t *w, const int32_t *counted,
                        st_token_prob *cand) {
    bool any_finite = false;
    for (int64_t t = 0; t < V; t++) {
        if (isnan(x[t]) || x[t] == INFINITY) return -1;
        any_finite |= isfinite(x[t]) != 0;
    }
    if (!any_finite) return -2;
    st_candidates c = {.data = cand};
    st_candidates_from_logits(&c, x, V);
    st_sample_penalties_counted(&c, counted, w[3], p[3], p[4], p[5]);
    st_sample_top_k(&c, w[2]);
    st_sample_top_p(&c, p[2]);
    st_sample_min_p(&c, p[1]);
    st_sample_temperature(&c, p[0]);
    return st_sample_draw_at(&c, st_uniform_from_words((uint32_t)w[0], (uint32_t)w[1]));
}

void st_cpu_draw_rows(st_tensor *ids, st_tensor *drawn, const st_tensor *logits, const st_tensor *params,
                      const st_tensor *words, const st_tensor *penalized) {
    const int64_t V = logits->ne[0], n = logits->ne[1];
    ST_ASSERT(cpu_is_f32_rows(logits) && logits->ne[2] == 1 && logits->ne[3] == 1 && V <= INT32_MAX);
    ST_ASSERT(params->type == ST_TYPE_F32 && params->ne[0] == 6 && params->ne[1] == n && params->nb[0] == sizeof(float));
    ST_ASSERT(words->type == ST_TYPE_I32 && words->ne[0] == 4 && words->ne[1] == n && words->nb[0] == sizeof(int32_t));
    ST_ASSERT(penalized->type == ST_TYPE_I32 && penalized->ne[0] == 2 * ST_DRAW_MAX_PENALIZED &&
              penalized->ne[1] == n && penalized->nb[0] == sizeof(int32_t));
    ST_ASSERT(ids->type == ST_TYPE_I32 && ids->ne[0] == n && drawn->type == ST_TYPE_F32 && drawn->ne[0] == n);
#pragma omp parallel
    {
        st_token_prob *cand = malloc((size_t)V * sizeof(st_token_prob));
        ST_ASSERT(cand); /* (a reference op: V entries of scratch a thread) */
#pragma omp for schedule(dynamic, 1)
        for (int64_t r = 0; r < n; r++) {
            const float *p = (const float *)((const char *)params->data + (size_t)r * params->nb[1]);
            const int32_t *w = (const int32_t *)((const char *)words->data + (size_t)r * words->nb[1]);
            const int32_t *counted = (const int32_t *)((const char *)penalized->data + (size_t)r * penalized->nb[1]);
            if (!(p[0] > 0.0f)) continue;
            ST_ASSERT(w[3] >= 0 && w[3] <= ST_DRAW_MAX_PENALIZED);
            const float *x = (const float *)((const char *)logits->data + (size_t)r * logits->nb[1]);
            const int32_t id = draw_row(x, V, p, w, counted, cand);
            *(int32_t *)((char *)ids->data + (size_t)r * ids->nb[0]) = id;
            *(float *)((char *)drawn->data + (size_t)r * drawn->nb[0]) = id >= 0 ? x[id] : NAN;
        }
        free(cand);
    }
}
