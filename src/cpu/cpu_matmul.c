/*
 * Row lookup and the matrix product: st_cpu_get_rows, st_cpu_mul_mat and the block
 * kernel that st_cpu_mul_mat_id (cpu_moe.c) shares.
 *
 * The product y[n, m] = sum_k W[n, k] x[m, k] is organised for weight reuse:
 *   - OpenMP splits the rows of W into blocks of R rows (R * K f32 ~ 32 KiB, L1-sized);
 *   - a block is converted to f32 once (F16/BF16 converted, quantized rows dequantized:
 *     the weight stays quantized in memory; F32 rows are read in place at their stride)
 *     and then used for every column m, so a prefill of M tokens converts each weight
 *     once, and a decode (M = 1) streams the weight exactly once;
 *   - each output is cpu_dot_f32 of a row and a column (8 f32 lanes, a loop the
 *     compiler vectorises); the column stays in L1 while the block's rows pass over it.
 *     (Not a 4-row micro-kernel sharing the loads of x: GCC vectorises its outer loop
 *     with shuffles and spills, far slower than this plain dot.)
 * Every output is one full-row dot product in the order of cpu_dot_f32, so neither the
 * row stride nor the thread count nor the block size changes a bit of the result.
 */
#include <stdlib.h>

#include "cpu/cpu_internal.h"
#include "stride/cpu_ops.h"

#define MM_BLOCK_BYTES (32 * 1024)
#define MM_ROW_MULTIPLE 4
#define MM_MAX_BLOCK_ROWS 64

/* ---- get_rows ------------------------------------------------------------------------- */

st_status st_cpu_get_rows(st_tensor *dst, const st_tensor *src, const int32_t *ids, st_error *err) {
    /* dst F32 [K, M]; src [K, V] at any row stride (float or quantized); ids [M] */
    st_status status = st_quant_check_weight_type(src->type, "get_rows", err);
    if (status != ST_OK) return status;
    ST_ASSERT(cpu_is_f32_rows(dst) && cpu_is_weight(src));
    ST_ASSERT(dst->ne[0] == src->ne[0] && dst->ne[2] == 1 && dst->ne[3] == 1);
    ST_ASSERT(src->ne[2] == 1 && src->ne[3] == 1);
    const int64_t k = src->ne[0], v = src->ne[1], m_count = dst->ne[1];
    ST_ASSERT(m_count == 0 || ids != NULL);

    /* all ids are checked before anything is written */
    for (int64_t m = 0; m < m_count; m++) {
        if (ids[m] < 0 || ids[m] >= v)
            return st_error_set(err, ST_ERROR_INVALID,
                                "row id %d (at index %lld) is outside [0, %lld): a token id "
                                "beyond the vocabulary?",
                                (int)ids[m], (long long)m, (long long)v);
    }
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < m_count; m++) {
        const char *row = (const char *)src->data + (size_t)ids[m] * src->nb[1];
        cpu_row_to_f32(src->type, row, (float *)((char *)dst->data + (size_t)m * dst->nb[1]), k);
    }
    return ST_OK;
}

/* ---- the block kernel ----------------------------------------------------------------- */

int64_t st_cpu_mm_block_rows(int64_t k) {
    int64_t rows = MM_BLOCK_BYTES / (int64_t)sizeof(float) / (k > 0 ? k : 1);
    rows -= rows % MM_ROW_MULTIPLE;
    if (rows < MM_ROW_MULTIPLE) rows = MM_ROW_MULTIPLE;
    if (rows > MM_MAX_BLOCK_ROWS) rows = MM_MAX_BLOCK_ROWS;
    return rows;
}

void st_cpu_mm_block(st_type type, const char *w_rows, size_t nb1, int64_t k, int64_t n0,
                     int64_t rows, const st_cpu_mm_cols *cols, float *scratch) {
    ST_ASSERT(rows > 0 && rows <= MM_MAX_BLOCK_ROWS);
    const float *wf[MM_MAX_BLOCK_ROWS]; /* the block's rows as f32, K each */
    for (int64_t r = 0; r < rows; r++) {
        const char *src = w_rows + (size_t)r * nb1;
        if (type == ST_TYPE_F32) {
            wf[r] = (const float *)src;
        } else {
            cpu_row_to_f32(type, src, scratch + r * k, k);
            wf[r] = scratch + r * k;
        }
    }
    for (int64_t c = 0; c < cols->n; c++) {
        const float *x = cols->x[c];
        float *y = cols->y[c] + n0;
        for (int64_t r = 0; r < rows; r++) y[r] = cpu_dot_f32(wf[r], x, k);
    }
}

/* ---- mul_mat -------------------------------------------------------------------------- */

st_status st_cpu_mul_mat(st_tensor *dst, const st_tensor *w, const st_tensor *x, st_error *err) {
    /* w [K, N] any nb[1] (float or quantized); x F32 [K, M...]; dst F32 [N, M...]
     * (M... = ne[1..3] of x) */
    st_status status = st_quant_check_weight_type(w->type, "mul_mat", err);
    if (status != ST_OK) return status;
    ST_ASSERT(cpu_is_weight(w) && w->ne[2] == 1 && w->ne[3] == 1);
    ST_ASSERT(cpu_is_f32_rows(x) && cpu_is_f32_rows(dst));
    ST_ASSERT(x->ne[0] == w->ne[0] && dst->ne[0] == w->ne[1]);
    ST_ASSERT(dst->ne[1] == x->ne[1] && dst->ne[2] == x->ne[2] && dst->ne[3] == x->ne[3]);
    const int64_t k = w->ne[0], n = w->ne[1], m_count = cpu_nrows(x);
    if (n == 0 || m_count == 0) return ST_OK;

    const float **xs = malloc((size_t)m_count * sizeof(*xs)); /* [M] input rows */
    float **ys = malloc((size_t)m_count * sizeof(*ys));       /* [M] output rows */
    if (!xs || !ys) {
        free(xs);
        free(ys);
        return st_error_set(err, ST_ERROR_NOMEM, "mul_mat: no memory for %lld column pointers",
                            (long long)m_count);
    }
    for (int64_t m = 0; m < m_count; m++) {
        xs[m] = (const float *)cpu_row(x, m);
        ys[m] = (float *)cpu_row(dst, m);
    }
    const st_cpu_mm_cols cols = {m_count, xs, ys};
    const int64_t block = st_cpu_mm_block_rows(k);
    const int64_t n_blocks = (n + block - 1) / block;
    const bool convert = w->type != ST_TYPE_F32;
    bool nomem = false;

#pragma omp parallel
    {
        float *scratch = convert ? malloc((size_t)(block * k) * sizeof(float)) : NULL;
        if (convert && !scratch) {
#pragma omp atomic write
            nomem = true;
        }
#pragma omp for schedule(static)
        for (int64_t b = 0; b < n_blocks; b++) {
            if (convert && !scratch) continue;
            int64_t n0 = b * block;
            int64_t rows = n - n0 < block ? n - n0 : block;
            st_cpu_mm_block(w->type, (const char *)w->data + (size_t)n0 * w->nb[1], w->nb[1], k,
                            n0, rows, &cols, scratch);
        }
        free(scratch);
    }
    free(xs);
    free(ys);
    if (nomem)
        return st_error_set(err, ST_ERROR_NOMEM, "mul_mat: no memory for a %lld x %lld f32 block",
                            (long long)block, (long long)k);
    return ST_OK;
}
