/*
 * Shared by the quantization tests (test_quant.c, test_cpu_ops_quant.c): random blocks
 * of every supported type and a plain reference dequantizer, written independently of
 * src/quant/ (one formula per value index, straight from the block layouts in quant.h,
 * computed in double).
 *
 * EXACTNESS. With the scales drawn from a moderate range (|d|, |dmin| in [2^-12, 2^-2]),
 * every product the formats form (f16 scale x 6-bit sub-scale x quant, at most 25
 * significant bits) is exact in double, and so is the one subtraction or addition of a
 * min/offset; rounding the double result to f32 once therefore gives the correctly
 * rounded value, which is also what ggml's f32 arithmetic produces (each of its
 * intermediate products is exact in f32 or rounded once). The reference rounded to f32
 * must equal the dequantizer bit for bit.
 */
#ifndef TEST_QUANT_COMMON_H
#define TEST_QUANT_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stride/quant.h"
#include "stride/types.h"

static const st_type tq_types[] = {
    ST_TYPE_Q8_0, ST_TYPE_Q4_0, ST_TYPE_Q4_1, ST_TYPE_Q5_0, ST_TYPE_Q5_1, ST_TYPE_Q2_K,
    ST_TYPE_Q3_K, ST_TYPE_Q4_K, ST_TYPE_Q5_K, ST_TYPE_Q6_K, ST_TYPE_Q8_K,
};
#define TQ_N_TYPES ((int)(sizeof(tq_types) / sizeof(tq_types[0])))

/* splitmix64: deterministic bytes and numbers */
static uint64_t tq_rng = 0x9a7e;
static inline uint64_t tq_next(void) {
    uint64_t z = (tq_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A random f16 scale: sign random, magnitude in [2^-12, 2^-2). */
static inline uint16_t tq_random_scale(void) {
    double mag = ldexp(1.0 + (double)(tq_next() % 1024) / 1024.0, -12 + (int)(tq_next() % 10));
    return st_f32_to_f16((float)((tq_next() & 1) ? -mag : mag));
}

static inline void tq_put_u16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v & 0xff);
    p[1] = (uint8_t)(v >> 8);
}

/* Byte offsets of the f16 scales (d, dmin/m) of a block; -1 where absent. */
static inline void tq_scale_offsets(st_type type, int *d, int *dmin) {
    *d = 0;
    *dmin = -1;
    switch (type) {
    case ST_TYPE_Q4_1: case ST_TYPE_Q5_1: case ST_TYPE_Q4_K: case ST_TYPE_Q5_K: *dmin = 2; break;
    case ST_TYPE_Q2_K: *d = 80; *dmin = 82; break;
    case ST_TYPE_Q3_K: *d = 108; break;
    case ST_TYPE_Q6_K: *d = 208; break;
    default: break;
    }
}

/* n_blocks random blocks of `type`: random bytes, with the scales set to moderate values
 * (random bytes there would make infinities and NaNs). */
static inline void tq_random_blocks(st_type type, uint8_t *dst, int64_t n_blocks) {
    const st_type_traits *tr = st_type_get_traits((uint32_t)type);
    for (int64_t b = 0; b < n_blocks; b++) {
        uint8_t *blk = dst + b * (int64_t)tr->block_bytes;
        for (size_t i = 0; i < tr->block_bytes; i++) blk[i] = (uint8_t)tq_next();
        if (type == ST_TYPE_Q8_K) { /* d is an f32 */
            float d = st_f16_to_f32(tq_random_scale());
            memcpy(blk, &d, 4);
            continue;
        }
        int d_off, m_off;
        tq_scale_offsets(type, &d_off, &m_off);
        tq_put_u16(blk + d_off, tq_random_scale());
        if (m_off >= 0) tq_put_u16(blk + m_off, tq_random_scale());
    }
}

static inline double tq_half(const uint8_t *p) { return st_f16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }
static inline int tq_bit(const uint8_t *bytes, int i) { return (bytes[i / 8] >> (i % 8)) & 1; }

/* The 6-bit scale (sc) and min (mn) of sub-block j (0..7) of q4_K/q5_K, as
 * ggml's get_scale_min_k4 packs them into 12 bytes. */
static inline void tq_k4_scale(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] % 64;
        *mn = s[j + 4] % 64;
    } else {
        *sc = s[j + 4] % 16 + 16 * (s[j - 4] / 64);
        *mn = s[j + 4] / 16 + 16 * (s[j] / 64);
    }
}

/* Value i of one block, in double (exact: see the top of this file). */
static inline double tq_ref_value(st_type type, const uint8_t *b, int i) {
    switch (type) {
    case ST_TYPE_Q8_0: return tq_half(b) * (int8_t)b[2 + i];
    case ST_TYPE_Q4_0: {
        int q = i < 16 ? b[2 + i] % 16 : b[2 + i - 16] / 16;
        return tq_half(b) * (q - 8);
    }
    case ST_TYPE_Q4_1: {
        int q = i < 16 ? b[4 + i] % 16 : b[4 + i - 16] / 16;
        return tq_half(b) * q + tq_half(b + 2);
    }
    case ST_TYPE_Q5_0: {
        int q = (i < 16 ? b[6 + i] % 16 : b[6 + i - 16] / 16) + 16 * tq_bit(b + 2, i);
        return tq_half(b) * (q - 16);
    }
    case ST_TYPE_Q5_1: {
        int q = (i < 16 ? b[8 + i] % 16 : b[8 + i - 16] / 16) + 16 * tq_bit(b + 4, i);
        return tq_half(b) * q + tq_half(b + 2);
    }
    case ST_TYPE_Q2_K: {
        int sub = i / 16, q = (b[16 + 32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) % 4;
        return tq_half(b + 80) * (b[sub] % 16) * q - tq_half(b + 82) * (b[sub] / 16);
    }
    case ST_TYPE_Q3_K: {
        int sub = i / 16;
        int low = sub < 8 ? b[96 + sub] % 16 : b[96 + sub - 8] / 16;
        int high = (b[96 + 8 + sub % 4] >> (2 * (sub / 4))) % 4;
        int q = (b[32 + 32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) % 4;
        int hbit = tq_bit(b + (i % 32), 4 * (i / 128) + (i % 128) / 32);
        return tq_half(b + 108) * (low + 16 * high - 32) * (q - (hbit ? 0 : 4));
    }
    case ST_TYPE_Q4_K:
    case ST_TYPE_Q5_K: {
        int sub = i / 32, sc, mn;
        tq_k4_scale(b + 4, sub, &sc, &mn);
        const uint8_t *qs = b + (type == ST_TYPE_Q4_K ? 16 : 48);
        int byte = qs[32 * (i / 64) + i % 32];
        int q = sub % 2 ? byte / 16 : byte % 16;
        if (type == ST_TYPE_Q5_K) q += 16 * tq_bit(b + 16 + i % 32, sub);
        return tq_half(b) * sc * q - tq_half(b + 2) * mn;
    }
    case ST_TYPE_Q6_K: {
        int h = i / 128, t = (i % 128) / 32, l = i % 32;
        int lo_byte = b[64 * h + 32 * (t % 2) + l];
        int lo = t >= 2 ? lo_byte / 16 : lo_byte % 16;
        int hi = (b[128 + 32 * h + l] >> (2 * t)) % 4;
        return tq_half(b + 208) * (int8_t)b[192 + i / 16] * (lo + 16 * hi - 32);
    }
    case ST_TYPE_Q8_K: {
        float d;
        memcpy(&d, b, 4);
        return (double)d * (int8_t)b[4 + i];
    }
    default: abort();
    }
}

/* A row of n values (whole blocks) through the reference, rounded to f32 once. */
static inline void tq_ref_row(st_type type, const uint8_t *src, float *dst, int64_t n) {
    const st_type_traits *tr = st_type_get_traits((uint32_t)type);
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *blk = src + (i / tr->block_size) * (int64_t)tr->block_bytes;
        dst[i] = (float)tq_ref_value(type, blk, (int)(i % tr->block_size));
    }
}

#endif /* TEST_QUANT_COMMON_H */
