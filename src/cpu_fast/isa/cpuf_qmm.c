/*
 * Products with quantized weights in integers: the activations are quantized per block
 * of 32 values to int8 with an f32 scale (cpuf_qcol), each weight block of 32 is brought
 * to int8 values with f32 scales (per 32 values, or per 16 for q6_K's sub-blocks) and,
 * for the formats with one, a min; then
 *
 *   y = sum over blocks b of  sum_lanes( float(I_b) * (scale_b * dx_b) )  -  sum_b min_b * s_b
 *
 * where I_b holds the 8 int32 lanes of the exact integer dot product of the block (lane j:
 * values 4j..4j+3), scale_b the weight scale of each lane, dx_b the activation's scale
 * and s_b = dx_b * (sum of the activation's int8 values). The first sum accumulates
 * lane-wise in two 8-lane f32 vectors, the even blocks in one and the odd blocks in the
 * other (one 16-lane register on AVX-512: a pair of blocks is the step), which are added
 * and reduced once at the end; the second is min_dot's. Both orders depend only on K, so
 * (as in cpuf_fmm.c) tiling, threads, row strides and M change no bit.
 *
 * Weight formats (layouts in src/quant/): a block's int8 values are its quants minus the
 * format's offset, so every product is signed x signed:
 *   q8_0  q                  scale d
 *   q4_0  nibble - 8         scale d              q4_1  nibble        scale d, min -m
 *   q5_0  5 bits - 16        scale d              q5_1  5 bits        scale d, min -m
 *   q4_K  nibble             scale d*sc_s, min dmin*mn_s  (8 sub-blocks of 32)
 *   q5_K  5 bits             scale d*sc_s, min dmin*mn_s
 *   q6_K  6 bits - 32        scale d*sc per 16 values
 * Decode (M <= 2) reads each block where it lies and unpacks it in registers; a prefill
 * unpacks a block of rows once into the thread's scratch and passes every column tile
 * over it.
 */
#include "cpu_fast/isa/cpuf_internal.h"

#define QT_BLOCK 32
#if CPUF_AVX512 || CPUF_GENERIC
#define QT_R 4 /* rows x columns of a tile: 16 accumulators of 16 lanes */
#define QT_C 4
#else
#define QT_R 2 /* AVX2, NEON: an accumulator is two or four registers */
#define QT_C 2
#endif
#define QT_DIRECT_MAX_COLS 2
#define QT_BLOCK_BYTES (192 * 1024) /* unpacked rows of one block: a share of L2 */
#define QT_MAX_BLOCK_ROWS 64

bool CPUF_FN(st_cpuf_q_type)(st_type type) {
    switch (type) {
    case ST_TYPE_Q8_0:
    case ST_TYPE_Q4_0:
    case ST_TYPE_Q4_1:
    case ST_TYPE_Q5_0:
    case ST_TYPE_Q5_1:
    case ST_TYPE_Q4_K:
    case ST_TYPE_Q5_K:
    case ST_TYPE_Q6_K: return true;
    default: return false;
    }
}

static inline bool has_min(st_type t) {
    return t == ST_TYPE_Q4_1 || t == ST_TYPE_Q5_1 || t == ST_TYPE_Q4_K || t == ST_TYPE_Q5_K;
}

/* ---- activations ------------------------------------------------------------------------ */

void CPUF_FN(st_cpuf_quantize_row)(const float *x, int64_t k, int8_t *q, float *d, float *s) {
    for (int64_t b = 0; b < k / QT_BLOCK; b++) {
        const float amax = cpuf_absmax32(x + QT_BLOCK * b);
        const float db = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
        const cpuf_q32 v = cpuf_q32_quantize(x + QT_BLOCK * b, id);
        cpuf_q32_store(q + QT_BLOCK * b, v);
        d[b] = db;
        s[b] = db * (float)cpuf_q32_sum(v);
    }
}

/* ---- weight blocks ---------------------------------------------------------------------- */

static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline float rdhalf(const uint8_t *p) { return cpuf_half_to_f32(rd16(p)); }
static inline uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4); /* little-endian hosts: the x86 and AArch64 targets of this path */
    return v;
}

/* The 6-bit scales and mins of a q4_K/q5_K super-block, packed in the 12 bytes at p (the
 * layout of k4_scale_min in src/quant/quant_kquants.c), read as little-endian words
 * w0..w2 (bytes 0-3, 4-7, 8-11): scales 0-3 are the low 6 bits of bytes 0-3 and scales
 * 4-7 the low nibbles of bytes 8-11 under the top 2 bits of bytes 0-3; mins 0-3 are the
 * low 6 bits of bytes 4-7 and mins 4-7 the high nibbles of bytes 8-11 under the top 2
 * bits of bytes 4-7. Four bytes a word, so each is one mask-and-shift. */
static inline void k4_unpack(const uint8_t *p, uint8_t sc[8], uint8_t mn[8]) {
    const uint32_t w0 = rd32(p), w1 = rd32(p + 4), w2 = rd32(p + 8);
    const uint32_t s_lo = w0 & 0x3f3f3f3fu, s_hi = (w2 & 0x0f0f0f0fu) | ((w0 >> 2) & 0x30303030u);
    const uint32_t m_lo = w1 & 0x3f3f3f3fu, m_hi = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 2) & 0x30303030u);
    memcpy(sc, &s_lo, 4);
    memcpy(sc + 4, &s_hi, 4);
    memcpy(mn, &m_lo, 4);
    memcpy(mn + 4, &m_hi, 4);
}

/* The lane scales of a K-quant super-block at p, decoded once for its 8 blocks of 32:
 * q4_K/q5_K ks[s] = d * sc_s (s < 8); q6_K ks[j] = d * scales[j] (j < 16, a scale per 16). */
CPUF_INLINE void kq_scales(st_type t, const uint8_t *p, float *ks) {
    if (t == ST_TYPE_Q6_K) {
        const cpuf_f8 d = cpuf_f8_set1(rdhalf(p + 208));
        cpuf_f8_store(ks, cpuf_f8_mul(d, cpuf_f8_from_s8((const int8_t *)p + 192)));
        cpuf_f8_store(ks + 8, cpuf_f8_mul(d, cpuf_f8_from_s8((const int8_t *)p + 200)));
        return;
    }
    uint8_t sc[8], mn[8];
    k4_unpack(p + 4, sc, mn);
    cpuf_f8_store(ks, cpuf_f8_mul(cpuf_f8_set1(rdhalf(p)), cpuf_f8_from_u8(sc)));
}

/* Bytes of one block of the type and values in it. */
static inline size_t block_bytes(st_type t) {
    switch (t) {
    case ST_TYPE_Q8_0: return 34;
    case ST_TYPE_Q4_0: return 18;
    case ST_TYPE_Q4_1: return 20;
    case ST_TYPE_Q5_0: return 22;
    case ST_TYPE_Q5_1: return 24;
    case ST_TYPE_Q4_K: return 144;
    case ST_TYPE_Q5_K: return 176;
    default: return 210; /* q6_K */
    }
}
static inline int block_values(st_type t) {
    return t == ST_TYPE_Q4_K || t == ST_TYPE_Q5_K || t == ST_TYPE_Q6_K ? 256 : 32;
}

/* Block of 32 number b of a weight row: its int8 values and lane scales. For the K-quants
 * ks holds kq_scales of the block's super-block. */
CPUF_INLINE void unpack32(st_type t, const uint8_t *row, int64_t b, const float *ks, cpuf_q32 *w, cpuf_f8 *sc) {
    if (block_values(t) == 32) {
        const uint8_t *p = row + (size_t)b * block_bytes(t);
        *sc = cpuf_f8_set1(rdhalf(p));
        switch (t) {
        case ST_TYPE_Q8_0: *w = cpuf_q32_load(p + 2); break;
        case ST_TYPE_Q4_0: *w = cpuf_q32_sub(cpuf_q32_nibbles16(p + 2), 8); break;
        case ST_TYPE_Q4_1: *w = cpuf_q32_nibbles16(p + 4); break;
        case ST_TYPE_Q5_0:
            *w = cpuf_q32_sub(cpuf_q32_or(cpuf_q32_nibbles16(p + 6), cpuf_q32_bits(rd32(p + 2), 16)), 16);
            break;
        default: *w = cpuf_q32_or(cpuf_q32_nibbles16(p + 8), cpuf_q32_bits(rd32(p + 4), 16)); break; /* q5_1 */
        }
        return;
    }
    const uint8_t *p = row + (size_t)(b / 8) * block_bytes(t);
    const int s = (int)(b % 8); /* 32-value sub-block of the super-block */
    if (t == ST_TYPE_Q6_K) {
        const int h = s / 4, q = s % 4; /* half of 128 values, quarter of it */
        const uint8_t *ql = p + 64 * h + 32 * (q % 2), *qh = p + 128 + 32 * h;
        const cpuf_q32 hv = cpuf_q32_load(qh);
        const cpuf_q32 hi = 2 * q <= 4 ? cpuf_q32_shl_and(hv, 4 - 2 * q, 0x30) : cpuf_q32_shr_and(hv, 2 * q - 4, 0x30);
        *w = cpuf_q32_sub(cpuf_q32_or(cpuf_q32_nibbles32(ql, q >= 2), hi), 32);
        *sc = cpuf_f8_halves(ks + 2 * s);
        return;
    }
    /* q4_K, q5_K */
    *sc = cpuf_f8_set1(ks[s]);
    if (t == ST_TYPE_Q4_K) {
        *w = cpuf_q32_nibbles32(p + 16 + 32 * (s / 2), s % 2);
    } else {
        const cpuf_q32 hv = cpuf_q32_load(p + 16);
        const cpuf_q32 hi = s <= 4 ? cpuf_q32_shl_and(hv, 4 - s, 0x10) : cpuf_q32_shr_and(hv, s - 4, 0x10);
        *w = cpuf_q32_or(cpuf_q32_nibbles32(p + 48 + 32 * (s / 2), s % 2), hi);
    }
}

/* The mins of a row's blocks of 32 (types with has_min), into mn [K / 32]. */
static void row_mins(st_type t, const uint8_t *row, int64_t nb, float *mn) {
    if (t == ST_TYPE_Q4_1 || t == ST_TYPE_Q5_1) {
        for (int64_t b = 0; b < nb; b++) mn[b] = -rdhalf(row + (size_t)b * block_bytes(t) + 2);
        return;
    }
    for (int64_t b = 0; b < nb; b += 8) { /* q4_K, q5_K: 8 blocks a super-block */
        const uint8_t *p = row + (size_t)(b / 8) * block_bytes(t);
        uint8_t sc[8], m[8];
        k4_unpack(p + 4, sc, m);
        cpuf_f8_store(mn + b, cpuf_f8_mul(cpuf_f8_set1(rdhalf(p + 2)), cpuf_f8_from_u8(m)));
    }
}

/* sum_b mn[b] * s[b]: 8 lanes over b = 0, 8, 16, ..., reduced, then the rest in order. */
static inline float min_dot(const float *mn, const float *s, int64_t nb) {
    cpuf_f8 acc = cpuf_f8_zero();
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) acc = cpuf_f8_fma(cpuf_f8_load(mn + b), cpuf_f8_load(s + b), acc);
    float sum = cpuf_f8_sum(acc);
    for (; b < nb; b++) sum += mn[b] * s[b];
    return sum;
}

/* ---- tiles ------------------------------------------------------------------------------ */

/* A weight row for the tiles: either where it lies (raw, unpacked block by block) or
 * unpacked in scratch: w [K] int8, sc [K / 32][8] lane scales, mn [K / 32] or NULL. */
typedef struct qrow {
    const uint8_t *raw;
    const uint8_t *ahead; /* raw: the row a tile further on, prefetched in step */
    const int8_t *w;
    const float *sc;
    const float *mn;
} qrow;

/* Blocks b (and b + 1 when pair) of R rows against C columns, into acc. A last, unpaired
 * block goes through the same arithmetic with only the low lanes kept. */
CPUF_INLINE void qstep(st_type t, bool raw, bool pair, int R, int C, const qrow *rows, const cpuf_qcol *x,
                       int64_t b, float ks[QT_R][16], cpuf_f16 acc[QT_R][QT_C]) {
    const int64_t b1 = pair ? b + 1 : b;
    if (raw && block_values(t) == 256 && b % 8 == 0)
        CPUF_UNROLL
        for (int r = 0; r < R; r++) kq_scales(t, rows[r].raw + (size_t)(b / 8) * block_bytes(t), ks[r]);
    cpuf_q64 xq[QT_C];
    cpuf_f16 dx[QT_C];
    CPUF_UNROLL
    for (int c = 0; c < C; c++) {
        xq[c] = pair ? cpuf_q64_load(x[c].q + QT_BLOCK * b)
                     : cpuf_q64_join(cpuf_q32_load(x[c].q + QT_BLOCK * b), cpuf_q32_load(x[c].q + QT_BLOCK * b));
        dx[c] = cpuf_f16_join(cpuf_f8_set1(x[c].d[b]), cpuf_f8_set1(x[c].d[b1]));
    }
    CPUF_UNROLL
    for (int r = 0; r < R; r++) {
        cpuf_q64 w;
        cpuf_f16 sc;
        if (raw) {
            /* short rows (q8_0 of K = 640: 680 B) interleaved four at a time defeat the
             * hardware's stream detection: the next tile's rows are fetched in step */
            const size_t per32 = block_bytes(t) * 32 / (size_t)block_values(t);
            cpuf_prefetch(rows[r].ahead + (size_t)b * per32);
            cpuf_prefetch(rows[r].ahead + (size_t)b1 * per32);
            cpuf_q32 w0, w1;
            cpuf_f8 s0, s1;
            unpack32(t, rows[r].raw, b, ks[r], &w0, &s0);
            if (pair) {
                unpack32(t, rows[r].raw, b1, ks[r], &w1, &s1);
            } else {
                w1 = w0;
                s1 = s0;
            }
            w = cpuf_q64_join(w0, w1);
            sc = cpuf_f16_join(s0, s1);
        } else if (pair) {
            w = cpuf_q64_load(rows[r].w + QT_BLOCK * b);
            sc = cpuf_f16_load(rows[r].sc + 8 * b);
        } else {
            w = cpuf_q64_join(cpuf_q32_load(rows[r].w + QT_BLOCK * b), cpuf_q32_load(rows[r].w + QT_BLOCK * b));
            sc = cpuf_f16_join(cpuf_f8_load(rows[r].sc + 8 * b), cpuf_f8_load(rows[r].sc + 8 * b));
        }
        CPUF_UNROLL
        for (int c = 0; c < C; c++) {
            const cpuf_f16 dot = cpuf_f16_dot(w, xq[c]), scale = cpuf_f16_mul(sc, dx[c]);
            acc[r][c] = pair ? cpuf_f16_fma(dot, scale, acc[r][c]) : cpuf_f16_fma_lo(dot, scale, acc[r][c]);
        }
    }
}

CPUF_INLINE void qtile(st_type t, bool raw, int R, int C, const qrow *rows, const cpuf_qcol *x, int64_t nb,
                       float *out[QT_C], int64_t r0) {
    cpuf_f16 acc[QT_R][QT_C];
    float ks[QT_R][16]; /* raw K-quants: each row's decoded scales of the current super-block */
    CPUF_UNROLL
    for (int r = 0; r < R; r++)
        CPUF_UNROLL
        for (int c = 0; c < C; c++) acc[r][c] = cpuf_f16_zero();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) qstep(t, raw, true, R, C, rows, x, b, ks, acc);
    if (b < nb) qstep(t, raw, false, R, C, rows, x, b, ks, acc);
    CPUF_UNROLL
    for (int r = 0; r < R; r++)
        CPUF_UNROLL
        for (int c = 0; c < C; c++) {
            float y = cpuf_f8_sum(cpuf_f16_fold(acc[r][c]));
            if (rows[r].mn) y -= min_dot(rows[r].mn, x[c].s, nb);
            out[c][r0 + r] = y;
        }
}

/* Unpacks row `row` (raw) into w, sc and (types with a min) mn. */
CPUF_INLINE void unpack_row_t(st_type t, const uint8_t *row, int64_t nb, int8_t *w, float *sc) {
    float ks[16];
    for (int64_t b = 0; b < nb; b++) {
        if (block_values(t) == 256 && b % 8 == 0) kq_scales(t, row + (size_t)(b / 8) * block_bytes(t), ks);
        cpuf_q32 v;
        cpuf_f8 s;
        unpack32(t, row, b, ks, &v, &s);
        cpuf_q32_store(w + QT_BLOCK * b, v);
        cpuf_f8_store(sc + 8 * b, s);
    }
}

static void unpack_row(st_type t, const uint8_t *row, int64_t nb, int8_t *w, float *sc, float *mn) {
    switch (t) { /* constant types, so that each unpack32 is specialised */
    case ST_TYPE_Q8_0: unpack_row_t(ST_TYPE_Q8_0, row, nb, w, sc); break;
    case ST_TYPE_Q4_0: unpack_row_t(ST_TYPE_Q4_0, row, nb, w, sc); break;
    case ST_TYPE_Q4_1: unpack_row_t(ST_TYPE_Q4_1, row, nb, w, sc); break;
    case ST_TYPE_Q5_0: unpack_row_t(ST_TYPE_Q5_0, row, nb, w, sc); break;
    case ST_TYPE_Q5_1: unpack_row_t(ST_TYPE_Q5_1, row, nb, w, sc); break;
    case ST_TYPE_Q4_K: unpack_row_t(ST_TYPE_Q4_K, row, nb, w, sc); break;
    case ST_TYPE_Q5_K: unpack_row_t(ST_TYPE_Q5_K, row, nb, w, sc); break;
    default: unpack_row_t(ST_TYPE_Q6_K, row, nb, w, sc); break;
    }
    if (has_min(t)) row_mins(t, row, nb, mn);
}

/* Rows [0, rows) (given as qrow) against columns [c0, c0 + C). */
CPUF_INLINE void qrows(st_type t, bool raw, int C, const qrow *rows, int64_t n_rows, int64_t nb, int64_t n0,
                       const cpuf_cols *cols, int64_t c0) {
    float *out[QT_C];
    CPUF_UNROLL
    for (int c = 0; c < C; c++) out[c] = cols->y[c0 + c] + n0;
    const cpuf_qcol *x = cols->qx + c0;
    int64_t r = 0;
    for (; r + QT_R <= n_rows; r += QT_R) qtile(t, raw, QT_R, C, rows + r, x, nb, out, r);
    for (; r < n_rows; r++) qtile(t, raw, 1, C, rows + r, x, nb, out, r);
}

/* Decode: rows read where they lie, a row tile at a time (mins decoded per tile). */
CPUF_INLINE void qdirect(st_type t, const char *w_rows, size_t nb1, int64_t nb, int64_t n0, int64_t rows,
                         const cpuf_cols *cols, float *mins) {
    for (int64_t r = 0; r < rows; r += QT_R) {
        const int64_t n = rows - r < QT_R ? rows - r : QT_R;
        qrow q[QT_R];
        for (int64_t i = 0; i < n; i++) {
            q[i].raw = (const uint8_t *)w_rows + (size_t)(r + i) * nb1;
            q[i].ahead = q[i].raw + QT_R * nb1;
            q[i].w = NULL;
            q[i].sc = NULL;
            q[i].mn = NULL;
            if (has_min(t)) {
                row_mins(t, q[i].raw, nb, mins + i * nb);
                q[i].mn = mins + i * nb;
            }
        }
        for (int64_t c = 0; c < cols->n;) {
            const int C = cols->n - c >= 2 ? 2 : 1;
            if (C == 2) qrows(t, true, 2, q, n, nb, n0 + r, cols, c);
            else qrows(t, true, 1, q, n, nb, n0 + r, cols, c);
            c += C;
        }
    }
}

int64_t CPUF_FN(st_cpuf_qmm_block_rows)(int64_t k) {
    const int64_t per_row = k + (k / QT_BLOCK) * (8 + 1) * (int64_t)sizeof(float);
    int64_t rows = QT_BLOCK_BYTES / (per_row > 0 ? per_row : 1);
    rows -= rows % QT_R;
    if (rows < QT_R) rows = QT_R;
    return rows > QT_MAX_BLOCK_ROWS ? QT_MAX_BLOCK_ROWS : rows;
}

size_t CPUF_FN(st_cpuf_qmm_scratch)(int64_t k, int64_t rows) {
    const int64_t nb = k / QT_BLOCK;
    return cpuf_round_up((size_t)(rows * k)) + cpuf_round_up((size_t)(rows * nb * 8) * sizeof(float)) +
           cpuf_round_up((size_t)(rows * nb) * sizeof(float)) + rows * sizeof(qrow) + CPUF_ALIGN;
}

void CPUF_FN(st_cpuf_qmm_block)(st_type t, const char *w_rows, size_t nb1, int64_t k, int64_t n0, int64_t rows,
                                const cpuf_cols *cols, void *scratch) {
    const int64_t nb = k / QT_BLOCK;
    char *cur = scratch;
    int8_t *w = cpuf_carve(&cur, (size_t)(rows * k));
    float *sc = cpuf_carve(&cur, (size_t)(rows * nb * 8) * sizeof(float));
    float *mn = cpuf_carve(&cur, (size_t)(rows * nb) * sizeof(float));
    qrow *q = cpuf_carve(&cur, (size_t)rows * sizeof(qrow));
    if (cols->n <= QT_DIRECT_MAX_COLS) {
        switch (t) {
        case ST_TYPE_Q8_0: qdirect(ST_TYPE_Q8_0, w_rows, nb1, nb, n0, rows, cols, mn); break;
        case ST_TYPE_Q4_0: qdirect(ST_TYPE_Q4_0, w_rows, nb1, nb, n0, rows, cols, mn); break;
        case ST_TYPE_Q4_1: qdirect(ST_TYPE_Q4_1, w_rows, nb1, nb, n0, rows, cols, mn); break;
        case ST_TYPE_Q5_0: qdirect(ST_TYPE_Q5_0, w_rows, nb1, nb, n0, rows, cols, mn); break;
        case ST_TYPE_Q5_1: qdirect(ST_TYPE_Q5_1, w_rows, nb1, nb, n0, rows, cols, mn); break;
        case ST_TYPE_Q4_K: qdirect(ST_TYPE_Q4_K, w_rows, nb1, nb, n0, rows, cols, mn); break;
        case ST_TYPE_Q5_K: qdirect(ST_TYPE_Q5_K, w_rows, nb1, nb, n0, rows, cols, mn); break;
        default: qdirect(ST_TYPE_Q6_K, w_rows, nb1, nb, n0, rows, cols, mn); break;
        }
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        unpack_row(t, (const uint8_t *)w_rows + (size_t)r * nb1, nb, w + r * k, sc + r * nb * 8, mn + r * nb);
        q[r] = (qrow){NULL, NULL, w + r * k, sc + r * nb * 8, has_min(t) ? mn + r * nb : NULL};
    }
    int64_t c = 0;
    for (; c + QT_C <= cols->n; c += QT_C) qrows(ST_TYPE_COUNT, false, QT_C, q, rows, nb, n0, cols, c);
    for (; c < cols->n; c++) qrows(ST_TYPE_COUNT, false, 1, q, rows, nb, n0, cols, c);
}
