/*
 * Helpers shared by the CPU ops (src/cpu/): strided row addressing, weight row
 * conversion to f32, the dot product every product uses, and the matmul kernel that
 * mul_mat and mul_mat_id share. Internal: not part of the public API.
 */
#ifndef STRIDE_CPU_INTERNAL_H
#define STRIDE_CPU_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "stride/cpu_ops.h"
#include "stride/quant.h"
#include "stride/status.h"
#include "stride/tensor.h"

/* ---- strided addressing ---------------------------------------------------------------- */

/* Rows of a tensor: every (i1, i2, i3), flattened with i1 fastest. */
static inline int64_t cpu_nrows(const st_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }

/* Address of row r (flattened (i1, i2, i3)), honouring nb[1..3]. */
static inline char *cpu_row(const st_tensor *t, int64_t r) {
    int64_t i1 = r % t->ne[1];
    int64_t i2 = (r / t->ne[1]) % t->ne[2];
    int64_t i3 = r / (t->ne[1] * t->ne[2]);
    return (char *)t->data + (size_t)i1 * t->nb[1] + (size_t)i2 * t->nb[2] +
           (size_t)i3 * t->nb[3];
}

static inline bool cpu_same_shape(const st_tensor *a, const st_tensor *b) {
    return a->ne[0] == b->ne[0] && a->ne[1] == b->ne[1] && a->ne[2] == b->ne[2] &&
           a->ne[3] == b->ne[3];
}

/* An F32 activation: element size in nb[0], no negative extents. Rows may be anywhere. */
static inline bool cpu_is_f32_rows(const st_tensor *t) {
    return t->type == ST_TYPE_F32 && t->nb[0] == sizeof(float) && t->ne[0] >= 0 &&
           t->ne[1] >= 0 && t->ne[2] >= 0 && t->ne[3] >= 0;
}

/* A float weight (F32, F16, BF16) whose elements are contiguous within a row. */
static inline bool cpu_is_float_weight(const st_tensor *t) {
    switch (t->type) {
    case ST_TYPE_F32: return t->nb[0] == 4;
    case ST_TYPE_F16:
    case ST_TYPE_BF16: return t->nb[0] == 2;
    default: return false;
    }
}

/* A weight the products and row lookups read: a float weight, or a quantized one of a
 * type src/quant/ dequantizes, whose nb[0] is the block size in bytes (rows are whole
 * blocks). The type itself comes from a file: ops check it with
 * st_quant_check_weight_type (an error, not an assert) before asserting this. */
static inline bool cpu_is_weight(const st_tensor *t) {
    if (cpu_is_float_weight(t)) return true;
    const st_type_traits *tr = st_type_get_traits((uint32_t)t->type);
    return tr != NULL && st_quant_supported(t->type) && t->nb[0] == tr->block_bytes &&
           t->ne[0] % tr->block_size == 0;
}

/* ---- conversion to f32 ------------------------------------------------------------------ */

static inline float cpu_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline uint32_t cpu_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

/* IEEE half -> float, exact, and written with all-ones masks instead of branches or
 * ternaries so that GCC vectorises the row loop (a ternary version stayed scalar at
 * 0.15 Gelem/s; this one runs ~1.2 Gelem/s with SSE2). Identical to core's scalar
 * st_f16_to_f32 for all 65536 halves (test_cpu_ops_matmul checks).
 *   normal (exponent 1..30): shift into place, rebias the exponent by 127 - 15 = 112;
 *   inf/NaN (exponent 31): rebias by 112 twice, to 255, keeping the payload;
 *   zero/subnormal (exponent 0): form 2^-14 * (1 + m/1024) and subtract 2^-14, which
 *   leaves m * 2^-24 exactly, with no subnormal arithmetic (safe under FTZ/DAZ). */
static inline float cpu_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t em = h & 0x7fffu;
    const uint32_t inf_nan = 0u - (uint32_t)(em >= 0x7c00u); /* all ones or zero */
    const uint32_t small = 0u - (uint32_t)(em < 0x0400u);
    const uint32_t normal = (em << 13) + (112u << 23) + (inf_nan & (112u << 23));
    const uint32_t sub = cpu_f32_bits(cpu_f32_from_bits((em << 13) + (113u << 23)) -
                                      cpu_f32_from_bits(113u << 23));
    return cpu_f32_from_bits(((small & sub) | (~small & normal)) | sign);
}

static inline float cpu_bf16_to_f32(uint16_t b) { return cpu_f32_from_bits((uint32_t)b << 16); }

/* n elements of a weight row (F32/F16/BF16, or a supported quantized type with n a
 * multiple of its block size) to f32. */
static inline void cpu_row_to_f32(st_type type, const void *src, float *dst, int64_t n) {
    if (type == ST_TYPE_F16) {
        const uint16_t *s = (const uint16_t *)src;
        for (int64_t i = 0; i < n; i++) dst[i] = cpu_f16_to_f32(s[i]);
    } else if (type == ST_TYPE_BF16) {
        const uint16_t *s = (const uint16_t *)src;
        for (int64_t i = 0; i < n; i++) dst[i] = cpu_bf16_to_f32(s[i]);
    } else if (type == ST_TYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else {
        st_quant_dequantize_row(type, src, dst, n); /* asserts the type is supported */
    }
}

/* ---- the dot product -------------------------------------------------------------------- */

/* THE summation order of every product in this backend (mul_mat, mul_mat_id, attention):
 * 8 interleaved partial sums over k = 0, 8, 16, ... (so that the compiler vectorises the
 * lane loop without reassociating anything), combined as ((0+4)+(2+6)) + ((1+5)+(3+7)),
 * then the tail k >= 8*floor(n/8) added in order. It depends on n only: never on the
 * thread, the row stride or the number of rows computed together. */
#define CPU_DOT_LANES 8

static inline float cpu_dot_combine(const float acc[CPU_DOT_LANES]) {
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

static inline float cpu_dot_f32(const float *a, const float *b, int64_t n) {
    float acc[CPU_DOT_LANES] = {0};
    int64_t k = 0;
    for (; k + CPU_DOT_LANES <= n; k += CPU_DOT_LANES)
        for (int l = 0; l < CPU_DOT_LANES; l++) acc[l] += a[k + l] * b[k + l];
    float s = cpu_dot_combine(acc);
    for (; k < n; k++) s += a[k] * b[k];
    return s;
}

/* ---- the matmul kernel (cpu_matmul.c), shared with mul_mat_id (cpu_moe.c) --------------- */

/* Columns of one product: n inputs x[c] (K floats each) and outputs y[c] (the kernel
 * writes y[c][n0 .. n0 + rows) for the block of weight rows it computes). */
typedef struct st_cpu_mm_cols {
    int64_t n;
    const float *const *x;
    float *const *y;
} st_cpu_mm_cols;

/* Rows of a weight converted to f32 at once: enough to fill about 32 KiB (the L1 data
 * cache of current cores), a multiple of 4 rows. */
int64_t st_cpu_mm_block_rows(int64_t k);

/* A KV cache element type: F16 or F32. */
static inline bool cpu_is_kv_cache(st_type t) { return t == ST_TYPE_F16 || t == ST_TYPE_F32; }

/* The arguments of st_cpu_attention_paged, as every CPU path's attention checks them:
 * q, dst F32 [head_dim, n_head, M]; k_cache, v_cache F16/F32 [head_dim, n_head_kv, n_slots]
 * with n_head a multiple of n_head_kv; table int32 [n_seq][max_blocks] or NULL. */
static inline void cpu_attention_check(const st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                                       const st_tensor *v_cache, const int32_t *positions, const int32_t *seq,
                                       const int32_t *table, int32_t max_blocks, const st_attn_params *p) {
    ST_ASSERT(cpu_is_f32_rows(q) && cpu_is_f32_rows(dst) && cpu_same_shape(dst, q));
    ST_ASSERT(q->ne[3] == 1 && p != NULL);
    ST_ASSERT(cpu_is_kv_cache(k_cache->type) && cpu_is_kv_cache(v_cache->type));
    ST_ASSERT(cpu_is_float_weight(k_cache) && cpu_is_float_weight(v_cache));
    ST_ASSERT(cpu_same_shape(k_cache, v_cache) && k_cache->ne[3] == 1);
    ST_ASSERT(k_cache->ne[0] == q->ne[0] && k_cache->ne[1] > 0 && q->ne[1] % k_cache->ne[1] == 0);
    ST_ASSERT(p->n_kv >= 0 && p->window >= 0);
    ST_ASSERT(table ? seq != NULL && p->n_kv <= (int64_t)max_blocks * ST_KV_BLOCK_TOKENS
                    : p->n_kv <= k_cache->ne[2]);
    ST_ASSERT(q->ne[2] == 0 || positions != NULL);
}

/* y[c][n0 + r] = dot(W row n0 + r, x[c]) for r < rows, c < cols->n.
 * w_rows points at row n0 of a weight (type, row stride nb1, K elements per row);
 * scratch holds rows * K floats (unused for F32 weights, which are read in place;
 * F16/BF16 rows are converted and quantized rows dequantized into it, block by block). */
void st_cpu_mm_block(st_type type, const char *w_rows, size_t nb1, int64_t k, int64_t n0,
                     int64_t rows, const st_cpu_mm_cols *cols, float *scratch);

#endif /* STRIDE_CPU_INTERNAL_H */
