/*
 * Products with f32 arithmetic: F32, F16 and BF16 weights at any row stride, and the
 * quantized types the integer kernels do not take (dequantized to f32 a block at a time).
 *
 * Every output y[c][n] is one dot product in one order: a vector accumulator of
 * CPUF_VF_LANES lanes takes w[k..k+L) * x[k..k+L) for k = 0, L, 2L, ..., the last partial
 * vector zero-padded, then cpuf_vf_sum reduces it. The micro-tiles below only decide which
 * outputs share loads, never that order, so an output is the same whatever the tile, the
 * row stride, the thread or the number of columns (M).
 *
 * Two ways to feed the tiles:
 *   direct (M <= 2: decode): weight rows are read where they lie and converted in
 *     registers (F16 with one conversion instruction a vector), so a decode streams each
 *     weight byte once;
 *   blocked (M > 2: prefill): a block of rows is converted to f32 once into the thread's
 *     scratch (F32 rows are read in place) and every column tile passes over it.
 */
#include <stdlib.h>

#include "cpu_fast/isa/cpuf_internal.h"

/* Micro-tile: FT_R weight rows x FT_C columns of accumulators. */
#if CPUF_AVX512 || CPUF_NEON
#define FT_R 4
#define FT_C 4
#elif CPUF_AVX2
#define FT_R 2
#define FT_C 4
#else
#define FT_R 2
#define FT_C 2
#endif
#define FT_DIRECT_MAX_COLS 2
#define FT_BLOCK_BYTES (128 * 1024) /* f32 rows of one block: a share of L2 */
#define FT_MAX_BLOCK_ROWS 64

static inline bool is_float_type(st_type t) { return t == ST_TYPE_F32 || t == ST_TYPE_F16 || t == ST_TYPE_BF16; }

CPUF_INLINE cpuf_vf fload(st_type type, const void *row, int64_t k) {
    if (type == ST_TYPE_F16) return cpuf_vf_load_f16((const uint16_t *)row + k);
    if (type == ST_TYPE_BF16) return cpuf_vf_load_bf16((const uint16_t *)row + k);
    return cpuf_vf_load((const float *)row + k);
}

/* The n < LANES values from k on, zero-padded. */
CPUF_INLINE cpuf_vf fload_tail(st_type type, const void *row, int64_t k, int n) {
    if (type == ST_TYPE_F32) return cpuf_vf_load_n((const float *)row + k, n);
    float b[CPUF_VF_LANES];
    cpu_row_to_f32(type, (const uint16_t *)row + k, b, n);
    return cpuf_vf_load_n(b, n);
}

/* y[c][r] = dot(w[r], x[c]) for r < R, c < C (compile-time R and C at every call). */
CPUF_INLINE void ftile(st_type type, int R, int C, const void *const *w, const float *const *x, int64_t k,
                       float *out[FT_C], int64_t r0) {
    cpuf_vf acc[FT_R][FT_C];
    CPUF_UNROLL
    for (int r = 0; r < R; r++)
        CPUF_UNROLL
        for (int c = 0; c < C; c++) acc[r][c] = cpuf_vf_zero();
    const int64_t kv = k - k % CPUF_VF_LANES;
    for (int64_t i = 0; i < kv; i += CPUF_VF_LANES) {
        cpuf_vf xv[FT_C];
        CPUF_UNROLL
        for (int c = 0; c < C; c++) xv[c] = cpuf_vf_load(x[c] + i);
        CPUF_UNROLL
        for (int r = 0; r < R; r++) {
            const cpuf_vf wv = fload(type, w[r], i);
            CPUF_UNROLL
            for (int c = 0; c < C; c++) acc[r][c] = cpuf_vf_fma(wv, xv[c], acc[r][c]);
        }
    }
    if (kv < k) {
        const int n = (int)(k - kv);
        cpuf_vf xv[FT_C];
        CPUF_UNROLL
        for (int c = 0; c < C; c++) xv[c] = cpuf_vf_load_n(x[c] + kv, n);
        CPUF_UNROLL
        for (int r = 0; r < R; r++) {
            const cpuf_vf wv = fload_tail(type, w[r], kv, n);
            CPUF_UNROLL
            for (int c = 0; c < C; c++) acc[r][c] = cpuf_vf_fma(wv, xv[c], acc[r][c]);
        }
    }
    CPUF_UNROLL
    for (int r = 0; r < R; r++)
        CPUF_UNROLL
        for (int c = 0; c < C; c++) out[c][r0 + r] = cpuf_vf_sum(acc[r][c]);
}

/* Rows [0, rows) of w (pointers at stride nb1) against columns [c0, c0 + C). */
CPUF_INLINE void frows(st_type type, int C, const char *w_rows, size_t nb1, int64_t k, int64_t n0, int64_t rows,
                       const cpuf_cols *cols, int64_t c0) {
    float *out[FT_C];
    CPUF_UNROLL
    for (int c = 0; c < C; c++) out[c] = cols->y[c0 + c] + n0;
    const float *const *x = cols->x + c0;
    int64_t r = 0;
    for (; r + FT_R <= rows; r += FT_R) {
        const void *w[FT_R];
        for (int i = 0; i < FT_R; i++) w[i] = w_rows + (size_t)(r + i) * nb1;
        ftile(type, FT_R, C, w, x, k, out, r);
    }
    for (; r < rows; r++) {
        const void *w[1] = {w_rows + (size_t)r * nb1};
        ftile(type, 1, C, w, x, k, out, r);
    }
}

/* Every column against rows [0, rows), tiles of FT_C columns, then single columns. */
CPUF_INLINE void fcols(st_type type, const char *w_rows, size_t nb1, int64_t k, int64_t n0, int64_t rows,
                       const cpuf_cols *cols) {
    int64_t c = 0;
    for (; c + FT_C <= cols->n; c += FT_C) frows(type, FT_C, w_rows, nb1, k, n0, rows, cols, c);
    for (; c < cols->n; c++) frows(type, 1, w_rows, nb1, k, n0, rows, cols, c);
}

static void direct(st_type type, const char *w_rows, size_t nb1, int64_t k, int64_t n0, int64_t rows,
                   const cpuf_cols *cols) {
    for (int64_t c = 0; c < cols->n;) {
        if (cols->n - c >= 2) {
            switch (type) {
            case ST_TYPE_F16: frows(ST_TYPE_F16, 2, w_rows, nb1, k, n0, rows, cols, c); break;
            case ST_TYPE_BF16: frows(ST_TYPE_BF16, 2, w_rows, nb1, k, n0, rows, cols, c); break;
            default: frows(ST_TYPE_F32, 2, w_rows, nb1, k, n0, rows, cols, c); break;
            }
            c += 2;
        } else {
            switch (type) {
            case ST_TYPE_F16: frows(ST_TYPE_F16, 1, w_rows, nb1, k, n0, rows, cols, c); break;
            case ST_TYPE_BF16: frows(ST_TYPE_BF16, 1, w_rows, nb1, k, n0, rows, cols, c); break;
            default: frows(ST_TYPE_F32, 1, w_rows, nb1, k, n0, rows, cols, c); break;
            }
            c += 1;
        }
    }
}

int64_t CPUF_FN(st_cpuf_fmm_block_rows)(st_type type, int64_t k) {
    (void)type;
    int64_t rows = FT_BLOCK_BYTES / (int64_t)sizeof(float) / (k > 0 ? k : 1);
    rows -= rows % FT_R;
    if (rows < FT_R) rows = FT_R;
    return rows > FT_MAX_BLOCK_ROWS ? FT_MAX_BLOCK_ROWS : rows;
}

size_t CPUF_FN(st_cpuf_fmm_scratch)(st_type type, int64_t k, int64_t rows) {
    return type == ST_TYPE_F32 ? 0 : (size_t)rows * (size_t)k * sizeof(float);
}

void CPUF_FN(st_cpuf_fmm_block)(st_type type, const char *w_rows, size_t nb1, int64_t k, int64_t n0, int64_t rows,
                                const cpuf_cols *cols, void *scratch) {
    if (is_float_type(type) && cols->n <= FT_DIRECT_MAX_COLS) {
        direct(type, w_rows, nb1, k, n0, rows, cols);
        return;
    }
    if (type == ST_TYPE_F32) {
        fcols(ST_TYPE_F32, w_rows, nb1, k, n0, rows, cols);
        return;
    }
    /* rows [rows, K] converted to f32, packed, in the thread's scratch */
    float *wf = scratch;
    for (int64_t r = 0; r < rows; r++) {
        const char *src = w_rows + (size_t)r * nb1;
        float *dst = wf + r * k;
        int64_t i = 0;
        if (type == ST_TYPE_F16 || type == ST_TYPE_BF16) {
            for (; i + CPUF_VF_LANES <= k; i += CPUF_VF_LANES) cpuf_vf_store(dst + i, fload(type, src, i));
        }
        if (i < k) cpu_row_to_f32(type, (const uint16_t *)src + i, dst + i, k - i); /* the tail, or a quantized row */
    }
    fcols(ST_TYPE_F32, (const char *)wf, (size_t)k * sizeof(float), k, n0, rows, cols);
}
