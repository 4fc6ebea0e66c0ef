/*
 * Row-wise normalisations: RMSNorm (plain and Gemma's 1 + w) and softmax. Both work on
 * every row of a strided tensor of up to four dimensions, so the same call normalises
 * [n_embd, M] hidden states or a [head_dim, n_head, M] view of q or k (qwen3/gemma3 q/k
 * norm, straight out of a fused qkv row).
 */
#include <math.h>

#include "cpu/cpu_internal.h"
#include "stride/cpu_ops.h"

void st_cpu_rms_norm(st_tensor *dst, const st_tensor *x, const st_tensor *w, float eps,
                     bool plus_one) {
    /* x, dst F32 [D, ...]; w F32 [D] or NULL */
    ST_ASSERT(cpu_is_f32_rows(x) && cpu_is_f32_rows(dst) && cpu_same_shape(dst, x));
    const int64_t d = x->ne[0];
    const float *wv = NULL; /* [D] */
    if (w) {
        ST_ASSERT(cpu_is_f32_rows(w) && w->ne[0] == d && cpu_nrows(w) == 1);
        wv = (const float *)w->data;
    }
    ST_ASSERT(d > 0 || cpu_nrows(x) == 0);
    const int64_t n_rows = cpu_nrows(x);

#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n_rows; r++) {
        const float *xr = (const float *)cpu_row(x, r);
        float *yr = (float *)cpu_row(dst, r);
        double ss = 0.0;
        for (int64_t i = 0; i < d; i++) ss += (double)xr[i] * (double)xr[i];
        /* as transformers: y = w * (x * rsqrt(mean(x^2) + eps)), the scale rounded to f32 */
        const float s = (float)(1.0 / sqrt(ss / (double)d + (double)eps));
        if (!wv) {
            for (int64_t i = 0; i < d; i++) yr[i] = xr[i] * s;
        } else if (plus_one) {
            for (int64_t i = 0; i < d; i++) yr[i] = (xr[i] * s) * (1.0f + wv[i]);
        } else {
            for (int64_t i = 0; i < d; i++) yr[i] = (xr[i] * s) * wv[i];
        }
    }
}

void st_cpu_softmax(st_tensor *dst, const st_tensor *x, float scale) {
    /* x, dst F32 [N, ...]: softmax along ne[0] */
    ST_ASSERT(cpu_is_f32_rows(x) && cpu_is_f32_rows(dst) && cpu_same_shape(dst, x));
    const int64_t n = x->ne[0], n_rows = cpu_nrows(x);
    ST_ASSERT(n > 0 || n_rows == 0);

#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n_rows; r++) {
        const float *xr = (const float *)cpu_row(x, r);
        float *yr = (float *)cpu_row(dst, r);
        float max = scale * xr[0];
        for (int64_t i = 1; i < n; i++) max = fmaxf(max, scale * xr[i]);
        double sum = 0.0;
        for (int64_t i = 0; i < n; i++) {
            yr[i] = expf(scale * xr[i] - max); /* <= 1: never overflows */
            sum += (double)yr[i];
        }
        for (int64_t i = 0; i < n; i++) yr[i] = (float)((double)yr[i] / sum);
    }
}
