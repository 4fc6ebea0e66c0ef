/*
 * What the sources of one fast-path variant share (src/cpu_fast/isa/, each compiled once
 * per variant with CPUF_VARIANT naming it): scratch carving, the column lists of the
 * products, and the block kernels that mul_mat and mul_mat_id both run.
 */
#ifndef STRIDE_CPUF_INTERNAL_H
#define STRIDE_CPUF_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu/cpu_internal.h"
#include "cpu_fast/cpu_fast.h"
#include "cpu_fast/isa/cpuf_simd.h"

#ifdef _OPENMP
#include <omp.h>
/* The team of every op: the threads asked for (-t), never more than the processors this
 * process may run on (more would only take turns on them, each join waiting for the
 * thread that is not running). */
static inline int cpuf_threads(void) {
    const int asked = omp_get_max_threads(), procs = omp_get_num_procs();
    return asked < procs ? asked : procs;
}
static inline int cpuf_thread_id(void) { return omp_get_thread_num(); }
#else
static inline int cpuf_threads(void) { return 1; }
static inline int cpuf_thread_id(void) { return 0; }
#endif

/* Work below which an op runs on the calling thread alone: forking and joining the team
 * costs microseconds, more than that much work takes, and every join waits for the slowest
 * thread (on a busy machine, one that was descheduled). Rows ops count f32 elements,
 * products and attention multiply-adds. */
#define CPUF_PAR_MIN_ELEMS ((int64_t)1 << 15)
#define CPUF_PAR_MIN_MACS ((int64_t)1 << 18)

/* ---- scratch ------------------------------------------------------------------------- */

#define CPUF_ALIGN 64

static inline size_t cpuf_round_up(size_t n) { return (n + CPUF_ALIGN - 1) / CPUF_ALIGN * CPUF_ALIGN; }

/* Takes n bytes (64-byte aligned) from *cursor. */
static inline void *cpuf_carve(char **cursor, size_t n) {
    void *p = *cursor;
    *cursor += cpuf_round_up(n);
    return p;
}

/* ---- quantized activations ------------------------------------------------------------- */

/* One activation row quantized per block of 32: value i = d[i / 32] * q[i], with
 * d = max |x| / 127 of its block and q = round(x / d) in [-127, 127]; s[b] = d[b] * (sum of
 * the block's q) for the weight formats with a min or an offset. */
typedef struct cpuf_qcol {
    const int8_t *q; /* [K] */
    const float *d;  /* [K / 32] */
    const float *s;  /* [K / 32] */
} cpuf_qcol;

/* The columns of one product: n inputs and their outputs; the block kernels write
 * y[c][n0 .. n0 + rows). x[c] are the f32 inputs (float weights), qx[c] the quantized
 * ones (quantized weights that the integer kernels take); the other may be NULL. */
typedef struct cpuf_cols {
    int64_t n;
    const float *const *x;
    const cpuf_qcol *qx;
    float *const *y;
} cpuf_cols;

/* Quantizes x [K] (K a multiple of 32) into q [K], d and s [K / 32]. */
void CPUF_FN(st_cpuf_quantize_row)(const float *x, int64_t k, int8_t *q, float *d, float *s);

/* Whether the integer kernels take weights of this type (the others run as f32). */
bool CPUF_FN(st_cpuf_q_type)(st_type type);

/* ---- block kernels: rows [n0, n0 + rows) of one weight against every column ------------ */

/* Per-thread scratch (bytes) that one call of a block kernel needs for `rows` rows of K. */
size_t CPUF_FN(st_cpuf_fmm_scratch)(st_type type, int64_t k, int64_t rows);
size_t CPUF_FN(st_cpuf_qmm_scratch)(int64_t k, int64_t rows);

/* Row blocks: how many weight rows a task takes (a multiple of the micro-tile rows). */
int64_t CPUF_FN(st_cpuf_fmm_block_rows)(st_type type, int64_t k);
int64_t CPUF_FN(st_cpuf_qmm_block_rows)(int64_t k);

/* w_rows: row n0 of a weight of `type` (row stride nb1, K values a row). */
void CPUF_FN(st_cpuf_fmm_block)(st_type type, const char *w_rows, size_t nb1, int64_t k, int64_t n0, int64_t rows,
                                const cpuf_cols *cols, void *scratch);
void CPUF_FN(st_cpuf_qmm_block)(st_type type, const char *w_rows, size_t nb1, int64_t k, int64_t n0, int64_t rows,
                                const cpuf_cols *cols, void *scratch);

#endif /* STRIDE_CPUF_INTERNAL_H */
