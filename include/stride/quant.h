/*
 * stride: block-quantized weights (ggml's formats), dequantized to f32.
 *
 * A quantized row of n elements is n / block_size blocks laid out one after another,
 * each block_bytes long (types.h has both numbers). The layouts are ggml's, byte for
 * byte, as GGUF files store them (little-endian; "f16" is an IEEE half):
 *
 *   legacy, 32 values per block, value = d * q (+ m):
 *     q8_0  {f16 d; int8 qs[32]}                         q in -128..127
 *     q4_0  {f16 d; u8 qs[16]}                           q = nibble - 8
 *     q4_1  {f16 d, m; u8 qs[16]}                        q = nibble, value d*q + m
 *     q5_0  {f16 d; u8 qh[4]; u8 qs[16]}                 q = (nibble | bit << 4) - 16
 *     q5_1  {f16 d, m; u8 qh[4]; u8 qs[16]}              q = nibble | bit << 4, d*q + m
 *     Nibbles: byte j holds value j (low nibble) and value j + 16 (high nibble); the
 *     fifth bit of value i is bit i of the little-endian u32 qh.
 *
 *   K-quants, 256 values per super-block in sub-blocks of 16 or 32 values:
 *     q2_K  {u8 scales[16]; u8 qs[64]; f16 d, dmin}      16 x 16: 4-bit scale, 4-bit min
 *     q3_K  {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}   16 x 16: 6-bit scales - 32
 *     q4_K  {f16 d, dmin; u8 scales[12]; u8 qs[128]}     8 x 32: 6-bit scale and min
 *     q5_K  {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}  as q4_K plus a 5th bit
 *     q6_K  {u8 ql[128]; u8 qh[64]; int8 scales[16]; f16 d}   16 x 16: q in -32..31
 *     q8_K  {f32 d; int8 qs[256]; int16 bsums[16]}       value = d * q
 *   The exact bit positions are written down next to each dequantizer (src/quant/).
 *
 * Dequantization computes in f32 in ggml's order (d * scale first, then times q, minus
 * dmin * min), so the values are bit-identical to ggml's and the gguf package's.
 *
 * Where this is used: the CPU ops dequantize a block of weight rows at a time into their
 * f32 scratch (never the whole model), and model loading can convert quantized weights
 * to f16/bf16 row by row (st_model_load_options.weights_type).
 */
#ifndef STRIDE_QUANT_H
#define STRIDE_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "stride/status.h"
#include "stride/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether stride can dequantize `type`: q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K,
 * q5_K, q6_K, q8_K. False for the float types (they need no dequantization), for every
 * other quantized type (iq*, tq*, mxfp4, ...) and for invalid ids. */
bool st_quant_supported(st_type type);

/* "q4_0, q4_1, ..., q8_K": the supported types, for error messages. */
const char *st_quant_supported_list(void);

/* ST_OK when a tensor of `type` can be read as a weight (a float type or a supported
 * quantized one); ST_ERROR_UNSUPPORTED naming the type and `what` (the op or tensor)
 * otherwise. Types come from files, so this is the check to make before using one. */
st_status st_quant_check_weight_type(st_type type, const char *what, st_error *err);

/* Dequantizes one row: n values (a multiple of the type's block size) from src (packed
 * blocks, any alignment) into dst (f32). The type must be supported (a programmer error
 * otherwise: check with st_quant_supported or st_quant_check_weight_type first). */
void st_quant_dequantize_row(st_type type, const void *src, float *dst, int64_t n);

/* Quantizes one row to q8_0 (n a multiple of 32): each block's d = max |x| / 127 (stored as
 * f16), q = round(x / d) from the f32 d, as ggml's reference quantizer does. For synthetic
 * models (stride synth --type q8_0); dst holds n / 32 blocks of 34 bytes. */
void st_quant_quantize_row_q8_0(const float *src, void *dst, int64_t n);

/* The per-family dequantizers behind the dispatch; n is a multiple of the block size. */
void st_quant_dequantize_row_q8_0(const void *src, float *dst, int64_t n);
void st_quant_dequantize_row_q4_0(const void *src, float *dst, int64_t n);
void st_quant_dequantize_row_q4_1(const void *src, float *dst, int64_t n);
void st_quant_dequantize_row_q5_0(const void *src, float *dst, int64_t n);
void st_quant_dequantize_row_q5_1(const void *src, float *dst, int64_t n);
void st_quant_dequantize_row_q2_k(const void *src, float *dst, int64_t n);
void st_quant_dequantize_row_q3_k(const void *src, float *dst, int64_t n);
void st_quant_dequantize_row_q4_k(const void *src, float *dst, int64_t n);
void st_quant_dequantize_row_q5_k(const void *src, float *dst, int64_t n);
void st_quant_dequantize_row_q6_k(const void *src, float *dst, int64_t n);
void st_quant_dequantize_row_q8_k(const void *src, float *dst, int64_t n);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_QUANT_H */
