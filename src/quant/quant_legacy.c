/*
 * The legacy formats: 32 values per block, one scale d (and for the _1 types an offset
 * m), value = d * q (+ m). Layouts (offsets in bytes):
 *
 *   q8_0  34 B: d f16 @0, qs int8[32] @2               value i = d * qs[i]
 *   q4_0  18 B: d f16 @0, qs u8[16] @2                 value i = d * (nib(i) - 8)
 *   q4_1  20 B: d f16 @0, m f16 @2, qs u8[16] @4       value i = d * nib(i) + m
 *   q5_0  22 B: d f16 @0, qh u32 @2, qs u8[16] @6      value i = d * ((nib(i) | hi(i)) - 16)
 *   q5_1  24 B: d f16 @0, m f16 @2, qh u32 @4, qs @8   value i = d * (nib(i) | hi(i)) + m
 *
 *   nib(i) = qs[i] & 15 for i < 16, qs[i - 16] >> 4 for i >= 16 (byte j packs values j
 *   and j + 16); hi(i) = bit i of the little-endian u32 qh, moved to bit 4.
 */
#include <math.h>

#include "quant/quant_internal.h"

#define QK 32 /* values per block */

/* The 4-bit part of value i of a block's 16 nibble bytes. */
static inline int nibble(const uint8_t *qs, int i) {
    return i < QK / 2 ? qs[i] & 0x0f : qs[i - QK / 2] >> 4;
}

void st_quant_dequantize_row_q8_0(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    const int64_t nb = quant_blocks(n, QK);
    for (int64_t ib = 0; ib < nb; ib++, b += 34, dst += QK) {
        const float d = quant_half(b);
        const int8_t *qs = (const int8_t *)(b + 2);
        for (int i = 0; i < QK; i++) dst[i] = d * (float)qs[i];
    }
}

void st_quant_quantize_row_q8_0(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    const int64_t nb = quant_blocks(n, QK);
    for (int64_t ib = 0; ib < nb; ib++, b += 34, src += QK) {
        float amax = 0.0f;
        for (int i = 0; i < QK; i++) amax = fmaxf(amax, fabsf(src[i]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t dh = st_f32_to_f16(d);
        b[0] = (uint8_t)(dh & 0xff);
        b[1] = (uint8_t)(dh >> 8);
        for (int i = 0; i < QK; i++) ((int8_t *)(b + 2))[i] = (int8_t)roundf(src[i] * id);
    }
}

void st_quant_dequantize_row_q4_0(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    const int64_t nb = quant_blocks(n, QK);
    for (int64_t ib = 0; ib < nb; ib++, b += 18, dst += QK) {
        const float d = quant_half(b);
        const uint8_t *qs = b + 2;
        for (int i = 0; i < QK; i++) dst[i] = d * (float)(nibble(qs, i) - 8);
    }
}

void st_quant_dequantize_row_q4_1(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    const int64_t nb = quant_blocks(n, QK);
    for (int64_t ib = 0; ib < nb; ib++, b += 20, dst += QK) {
        const float d = quant_half(b), m = quant_half(b + 2);
        const uint8_t *qs = b + 4;
        for (int i = 0; i < QK; i++) dst[i] = d * (float)nibble(qs, i) + m;
    }
}

/* Value i of a q5 block: its nibble with bit i of qh as the fifth bit. */
static inline int five_bits(const uint8_t *qs, uint32_t qh, int i) {
    return nibble(qs, i) | (int)(((qh >> i) & 1u) << 4);
}

void st_quant_dequantize_row_q5_0(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    const int64_t nb = quant_blocks(n, QK);
    for (int64_t ib = 0; ib < nb; ib++, b += 22, dst += QK) {
        const float d = quant_half(b);
        const uint32_t qh = quant_u32(b + 2);
        const uint8_t *qs = b + 6;
        for (int i = 0; i < QK; i++) dst[i] = d * (float)(five_bits(qs, qh, i) - 16);
    }
}

void st_quant_dequantize_row_q5_1(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    const int64_t nb = quant_blocks(n, QK);
    for (int64_t ib = 0; ib < nb; ib++, b += 24, dst += QK) {
        const float d = quant_half(b), m = quant_half(b + 2);
        const uint32_t qh = quant_u32(b + 4);
        const uint8_t *qs = b + 8;
        for (int i = 0; i < QK; i++) dst[i] = d * (float)five_bits(qs, qh, i) + m;
    }
}
