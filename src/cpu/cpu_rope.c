/*
 * Rotary position embedding, NORM (adjacent pairs) and NEOX (halves), with partial
 * rotary (n_rot < head_dim), per-dimension frequency factors and a cos/sin scale.
 *
 * For pair i < n_rot/2 of a head at position p:
 *   theta_i = p * freq_scale * base^(-2i/n_rot) / factor_i
 *   (x_a, x_b) -> (x_a cos - x_b sin, x_a sin + x_b cos) * attn_factor
 * with (a, b) = (2i, 2i+1) in NORM mode and (i, i + n_rot/2) in NEOX mode; dimensions
 * n_rot .. head_dim-1 pass through. Angles are computed in double and rounded once, so
 * the reference is exact to f32 at every position (transformers forms pos * inv_freq in
 * f32, which differs from this by up to pos * 2^-24 radians).
 */
#include <math.h>

#include "cpu/cpu_internal.h"
#include "stride/cpu_ops.h"

void st_cpu_rope(st_tensor *dst, const st_tensor *x, const int32_t *positions,
                 const st_rope_params *p) {
    /* x, dst F32 [head_dim, n_head, M]; positions [M] */
    ST_ASSERT(cpu_is_f32_rows(x) && cpu_is_f32_rows(dst) && cpu_same_shape(dst, x));
    ST_ASSERT(x->ne[3] == 1 && p != NULL);
    ST_ASSERT(p->mode == ST_ROPE_MODE_NORM || p->mode == ST_ROPE_MODE_NEOX);
    const int64_t head_dim = x->ne[0], n_head = x->ne[1], m_count = x->ne[2];
    const int64_t half = p->n_rot / 2;
    ST_ASSERT(p->n_rot >= 0 && p->n_rot % 2 == 0 && p->n_rot <= head_dim);
    ST_ASSERT(p->n_rot <= ST_ROPE_MAX_ROT && p->freq_base > 0.0f);
    ST_ASSERT(m_count == 0 || positions != NULL);

    double inv_freq[ST_ROPE_MAX_ROT / 2]; /* [n_rot/2]: base^(-2i/n_rot) / factor_i */
    for (int64_t i = 0; i < half; i++) {
        inv_freq[i] = pow((double)p->freq_base, -2.0 * (double)i / (double)p->n_rot);
        if (p->freq_factors) inv_freq[i] /= (double)p->freq_factors[i];
    }
    /* NORM rotates (2i, 2i+1); NEOX rotates (i, i + n_rot/2) */
    const int64_t step = p->mode == ST_ROPE_MODE_NORM ? 2 : 1;
    const int64_t partner = p->mode == ST_ROPE_MODE_NORM ? 1 : half;

#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < m_count; m++) {
        float c[ST_ROPE_MAX_ROT / 2], s[ST_ROPE_MAX_ROT / 2]; /* [n_rot/2] */
        const double pos = (double)positions[m] * (double)p->freq_scale;
        for (int64_t i = 0; i < half; i++) {
            double theta = pos * inv_freq[i];
            c[i] = (float)(cos(theta) * (double)p->attn_factor);
            s[i] = (float)(sin(theta) * (double)p->attn_factor);
        }
        for (int64_t h = 0; h < n_head; h++) {
            const float *xr = (const float *)((const char *)x->data + (size_t)h * x->nb[1] +
                                              (size_t)m * x->nb[2]);
            float *yr = (float *)((char *)dst->data + (size_t)h * dst->nb[1] +
                                  (size_t)m * dst->nb[2]);
            for (int64_t i = 0; i < half; i++) {
                const int64_t a = i * step, b = a + partner;
                const float xa = xr[a], xb = xr[b];
                yr[a] = xa * c[i] - xb * s[i];
                yr[b] = xa * s[i] + xb * c[i];
            }
            for (int64_t i = p->n_rot; i < head_dim; i++) yr[i] = xr[i];
        }
    }
}
