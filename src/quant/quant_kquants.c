/*
 * The K-quants: super-blocks of 256 values with per-sub-block scales, themselves
 * quantized against the super-block's f16 d (and dmin). Layouts (offsets in bytes) and
 * where value i (0..255) of a super-block finds its bits:
 *
 *   q2_K  84 B: scales u8[16] @0, qs u8[64] @16, d f16 @80, dmin f16 @82
 *         sub-block s = i / 16: scale = scales[s] & 15, min = scales[s] >> 4;
 *         q = (qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
 *         value = (d * scale) * q - (dmin * min)
 *   q3_K 110 B: hmask u8[32] @0, qs u8[64] @32, scales u8[12] @96, d f16 @108
 *         q = 2 low bits as in q2_K, minus 4 unless bit (4 * (i / 128) + (i % 128) / 32)
 *         of hmask[i % 32] is set; 16 6-bit scales (see q3k_scale), value =
 *         (d * (scale - 32)) * q
 *   q4_K 144 B: d f16 @0, dmin f16 @2, scales u8[12] @4, qs u8[128] @16
 *         sub-block s = i / 32 with a 6-bit scale and min (see k4_scale_min);
 *         q = nibble of qs[32 * (i / 64) + i % 32], the low one for even s;
 *         value = (d * scale) * q - (dmin * min)
 *   q5_K 176 B: as q4_K with qh u8[32] @16 and qs @48: q gains bit s of qh[i % 32] as
 *         its fifth bit (+16)
 *   q6_K 210 B: ql u8[128] @0, qh u8[64] @128, scales int8[16] @192, d f16 @208
 *         h = i / 128, t = (i % 128) / 32, l = i % 32: q = (nibble of ql[64h + 32(t&1) + l],
 *         the high one for t >= 2) | ((qh[32h + l] >> 2t) & 3) << 4, minus 32;
 *         value = (d * scales[i / 16]) * q
 *   q8_K 292 B: d f32 @0, qs int8[256] @4, bsums int16[16] @260 (unused here);
 *         value = d * qs[i]
 */
#include "quant/quant_internal.h"

#define QK_K 256 /* values per super-block */

/* ---- q2_K ------------------------------------------------------------------------------ */

void st_quant_dequantize_row_q2_k(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    const int64_t nb = quant_blocks(n, QK_K);
    for (int64_t ib = 0; ib < nb; ib++, b += 84, dst += QK_K) {
        const uint8_t *scales = b, *qs = b + 16;
        const float d = quant_half(b + 80), dmin = quant_half(b + 82);
        /* 16 sub-blocks of 16: sub-block s reads bits 2 * ((s % 8) / 2) of 16 bytes */
        for (int s = 0; s < 16; s++) {
            const float dl = d * (float)(scales[s] & 0x0f);
            const float ml = dmin * (float)(scales[s] >> 4);
            const uint8_t *q = qs + 32 * (s / 8) + 16 * (s % 2);
            const int shift = 2 * ((s % 8) / 2);
            float *y = dst + 16 * s;
            for (int l = 0; l < 16; l++) y[l] = dl * (float)((q[l] >> shift) & 3) - ml;
        }
    }
}

/* ---- q3_K ------------------------------------------------------------------------------ */

/* Scale s (0..15) of a q3_K block, 6 bits: the low 4 in bytes 0..7 (low nibbles for
 * s < 8, high nibbles of the same bytes for s >= 8), the high 2 in bytes 8..11 (byte
 * 8 + s % 4, bit pair s / 4). */
static inline int q3k_scale(const uint8_t *scales, int s) {
    const int low = s < 8 ? scales[s] & 0x0f : scales[s - 8] >> 4;
    const int high = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
    return low | (high << 4);
}

void st_quant_dequantize_row_q3_k(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    const int64_t nb = quant_blocks(n, QK_K);
    for (int64_t ib = 0; ib < nb; ib++, b += 110, dst += QK_K) {
        const uint8_t *hmask = b, *qs = b + 32, *scales = b + 96;
        const float d = quant_half(b + 108);
        for (int s = 0; s < 16; s++) {
            const float dl = d * (float)(q3k_scale(scales, s) - 32);
            const int off = 16 * (s % 2);               /* into qs/hmask of this half */
            const uint8_t *q = qs + 32 * (s / 8) + off; /* 2 low bits */
            const uint8_t *hm = hmask + off;            /* third bit, set = no -4 */
            const int shift = 2 * ((s % 8) / 2);
            const uint8_t hbit = (uint8_t)(1u << (4 * (s / 8) + (s % 8) / 2));
            float *y = dst + 16 * s;
            for (int l = 0; l < 16; l++) {
                const int q3 = ((q[l] >> shift) & 3) - ((hm[l] & hbit) ? 0 : 4);
                y[l] = dl * (float)q3;
            }
        }
    }
}

/* ---- q4_K and q5_K --------------------------------------------------------------------- */

/* Scale and min of sub-block s (0..7), 6 bits each, packed in 12 bytes: s < 4 keeps them
 * in the low 6 bits of bytes s and s + 4; s >= 4 takes 4 bits from byte s + 4 (low nibble
 * scale, high nibble min) and the top 2 bits of bytes s - 4 (scale) and s (min). */
static inline void k4_scale_min(const uint8_t *scales, int s, int *sc, int *mn) {
    if (s < 4) {
        *sc = scales[s] & 63;
        *mn = scales[s + 4] & 63;
    } else {
        *sc = (scales[s + 4] & 0x0f) | ((scales[s - 4] >> 6) << 4);
        *mn = (scales[s + 4] >> 4) | ((scales[s] >> 6) << 4);
    }
}

/* q4_K and q5_K share everything but the fifth bit: qh is NULL for q4_K. */
static void dequantize_k4_k5(const uint8_t *b, const uint8_t *qh, const uint8_t *qs, float *dst) {
    const float d = quant_half(b), dmin = quant_half(b + 2);
    const uint8_t *scales = b + 4;
    for (int s = 0; s < 8; s++) {
        int sc, mn;
        k4_scale_min(scales, s, &sc, &mn);
        const float d1 = d * (float)sc, m1 = dmin * (float)mn;
        const uint8_t *q = qs + 32 * (s / 2); /* sub-blocks 2c and 2c+1 share 32 bytes */
        const int shift = 4 * (s % 2);
        float *y = dst + 32 * s;
        if (qh) {
            for (int l = 0; l < 32; l++) {
                const int q5 = ((q[l] >> shift) & 0x0f) | (((qh[l] >> s) & 1) << 4);
                y[l] = d1 * (float)q5 - m1;
            }
        } else {
            for (int l = 0; l < 32; l++) y[l] = d1 * (float)((q[l] >> shift) & 0x0f) - m1;
        }
    }
}

void st_quant_dequantize_row_q4_k(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    const int64_t nb = quant_blocks(n, QK_K);
    for (int64_t ib = 0; ib < nb; ib++, b += 144, dst += QK_K) dequantize_k4_k5(b, NULL, b + 16, dst);
}

void st_quant_dequantize_row_q5_k(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    const int64_t nb = quant_blocks(n, QK_K);
    for (int64_t ib = 0; ib < nb; ib++, b += 176, dst += QK_K) dequantize_k4_k5(b, b + 16, b + 48, dst);
}

/* ---- q6_K ------------------------------------------------------------------------------ */

void st_quant_dequantize_row_q6_k(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    const int64_t nb = quant_blocks(n, QK_K);
    for (int64_t ib = 0; ib < nb; ib++, b += 210, dst += QK_K) {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *scales = (const int8_t *)(b + 192);
        const float d = quant_half(b + 208);
        for (int h = 0; h < 2; h++) {     /* halves of 128 values */
            for (int t = 0; t < 4; t++) { /* quarters of 32 values */
                const uint8_t *lo = ql + 64 * h + 32 * (t % 2);
                const uint8_t *hi = qh + 32 * h;
                const int lo_shift = 4 * (t / 2), hi_shift = 2 * t;
                float *y = dst + 128 * h + 32 * t;
                for (int l = 0; l < 32; l++) {
                    const int q6 = (((lo[l] >> lo_shift) & 0x0f) | (((hi[l] >> hi_shift) & 3) << 4)) - 32;
                    const float dl = d * (float)scales[8 * h + 2 * t + l / 16];
                    y[l] = dl * (float)q6;
                }
            }
        }
    }
}

/* ---- q8_K ------------------------------------------------------------------------------ */

void st_quant_dequantize_row_q8_k(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    const int64_t nb = quant_blocks(n, QK_K);
    for (int64_t ib = 0; ib < nb; ib++, b += 292, dst += QK_K) {
        float d;
        uint32_t bits = quant_u32(b);
        memcpy(&d, &bits, sizeof(d));
        const int8_t *qs = (const int8_t *)(b + 4);
        for (int i = 0; i < QK_K; i++) dst[i] = d * (float)qs[i];
    }
}
