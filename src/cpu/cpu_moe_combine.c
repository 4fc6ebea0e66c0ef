/* Weighted sum of the experts' outputs (the last step of an MoE FFN). */
#include "stride/cpu_ops.h"

#include "cpu/cpu_internal.h"

void st_cpu_moe_combine(st_tensor *dst, const st_tensor *src, const st_tensor *weights) {
    const int64_t D = src->ne[0], k = src->ne[1], M = src->ne[2];
    ST_ASSERT(cpu_is_f32_rows(dst) && cpu_is_f32_rows(src) && cpu_is_f32_rows(weights));
    ST_ASSERT(dst->ne[0] == D && dst->ne[1] == M && weights->ne[0] == k && weights->ne[1] == M);
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < M; m++) {
        float *y = (float *)((char *)dst->data + (size_t)m * dst->nb[1]);
        const float *w = (const float *)((const char *)weights->data + (size_t)m * weights->nb[1]);
        for (int64_t d = 0; d < D; d++) y[d] = 0.0f;
        for (int64_t j = 0; j < k; j++) {
            const float *x = (const float *)((const char *)src->data + (size_t)j * src->nb[1] + (size_t)m * src->nb[2]);
            for (int64_t d = 0; d < D; d++) y[d] += w[j] * x[d];
        }
    }
}
