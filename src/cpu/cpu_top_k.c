/* The largest logits of each row, for sampling without the whole row on the host. */
#include <math.h>
#include <stdlib.h>

#include "cpu/cpu_internal.h"
#include "stride/cpu_ops.h"

/* Descending value, ascending id among equal values (the sampler's candidate order). */
static bool before(float va, int32_t ia, float vb, int32_t ib) { return va > vb || (va == vb && ia < ib); }

void st_cpu_top_k_logits(int32_t *ids, st_tensor *vals, const st_tensor *logits, int32_t k) {
    /* logits F32 [V, n]; vals F32 [k + 1, n]; ids int32 [k, n] packed */
    const int64_t V = logits->ne[0], n = logits->ne[1];
    ST_ASSERT(cpu_is_f32_rows(logits) && cpu_is_f32_rows(vals) && logits->ne[2] == 1 && logits->ne[3] == 1);
    ST_ASSERT(k >= 1 && k <= V && vals->ne[0] == k + 1 && vals->ne[1] == n);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; r++) {
        const float *x = (const float *)((const char *)logits->data + (size_t)r * logits->nb[1]);
        float *v = (float *)((char *)vals->data + (size_t)r * vals->nb[1]);
        int32_t *id = ids + (size_t)r * (size_t)k;
        /* insertion into a sorted run of k: k is small (tens) next to V */
        int32_t have = 0;
        double mx = -INFINITY;
        for (int64_t t = 0; t < V; t++) {
            const float xt = x[t];
            if (xt > mx) mx = xt;
            if (have == k && !before(xt, (int32_t)t, v[k - 1], id[k - 1])) continue;
            int32_t j = have < k ? have++ : k - 1;
            while (j > 0 && before(xt, (int32_t)t, v[j - 1], id[j - 1])) {
                v[j] = v[j - 1];
                id[j] = id[j - 1];
                j--;
            }
            v[j] = xt;
            id[j] = (int32_t)t;
        }
        double sum = 0.0;
        for (int64_t t = 0; t < V; t++) sum += exp((double)x[t] - mx);
        v[k] = (float)(mx + log(sum));
    }
}
