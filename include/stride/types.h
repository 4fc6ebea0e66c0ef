/*
 * stride: element types.
 *
 * The ids are ggml's (the values GGUF files store in their tensor infos), so that any
 * GGUF file can be described. stride computes with F32, F16 and BF16; the quantized
 * types are described here so that `inspect` can show any file and the planner can tell
 * them apart (they are never padded: a 128-byte pad is not a multiple of their blocks).
 */
#ifndef STRIDE_TYPES_H
#define STRIDE_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum st_type {
    ST_TYPE_F32 = 0,
    ST_TYPE_F16 = 1,
    ST_TYPE_Q4_0 = 2,
    ST_TYPE_Q4_1 = 3,
    /* 4 and 5 (Q4_2, Q4_3) were removed from ggml and never appear in GGUF files */
    ST_TYPE_Q5_0 = 6,
    ST_TYPE_Q5_1 = 7,
    ST_TYPE_Q8_0 = 8,
    ST_TYPE_Q8_1 = 9,
    ST_TYPE_Q2_K = 10,
    ST_TYPE_Q3_K = 11,
    ST_TYPE_Q4_K = 12,
    ST_TYPE_Q5_K = 13,
    ST_TYPE_Q6_K = 14,
    ST_TYPE_Q8_K = 15,
    ST_TYPE_IQ2_XXS = 16,
    ST_TYPE_IQ2_XS = 17,
    ST_TYPE_IQ3_XXS = 18,
    ST_TYPE_IQ1_S = 19,
    ST_TYPE_IQ4_NL = 20,
    ST_TYPE_IQ3_S = 21,
    ST_TYPE_IQ2_S = 22,
    ST_TYPE_IQ4_XS = 23,
    ST_TYPE_I8 = 24,
    ST_TYPE_I16 = 25,
    ST_TYPE_I32 = 26,
    ST_TYPE_I64 = 27,
    ST_TYPE_F64 = 28,
    ST_TYPE_IQ1_M = 29,
    ST_TYPE_BF16 = 30,
    /* 31..33 (Q4_0_4_4, Q4_0_4_8, Q4_0_8_8) were removed from ggml */
    ST_TYPE_TQ1_0 = 34,
    ST_TYPE_TQ2_0 = 35,
    /* 36..38 (IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8) were removed from ggml */
    ST_TYPE_MXFP4 = 39,
    ST_TYPE_NVFP4 = 40,
    ST_TYPE_Q1_0 = 41,
    ST_TYPE_COUNT = 42,
} st_type;

typedef struct st_type_traits {
    const char *name;     /* ggml's name, e.g. "f16", "q4_K" */
    int64_t block_size;   /* elements per block (1 for plain types) */
    size_t block_bytes;   /* bytes per block */
    bool is_float;        /* F32, F16, BF16: the types the padding rule applies to */
    bool is_quantized;    /* block-quantized */
} st_type_traits;

/* Traits of a type id, or NULL for an id that is not a (current) ggml type. */
const st_type_traits *st_type_get_traits(uint32_t type_id);

/* "f16" etc., or "unknown" for an invalid id. */
const char *st_type_name(uint32_t type_id);

/* Parses "f32", "f16", "bf16" (case-insensitive) and every other traits name. */
bool st_type_from_name(const char *name, st_type *out);

/* Bytes of one row of n elements; false if n is not a multiple of the block size or the
 * result overflows. */
bool st_type_row_bytes(st_type type, int64_t n, size_t *out);

/* Scalar conversions. F32 -> F16/BF16 rounds to nearest even; NaN stays NaN (quiet),
 * overflow goes to infinity. */
float st_f16_to_f32(uint16_t h);
uint16_t st_f32_to_f16(float f);
float st_bf16_to_f32(uint16_t b);
uint16_t st_f32_to_bf16(float f);

/* Row conversions, n elements. */
void st_f16_to_f32_row(const uint16_t *src, float *dst, size_t n);
void st_f32_to_f16_row(const float *src, uint16_t *dst, size_t n);
void st_bf16_to_f32_row(const uint16_t *src, float *dst, size_t n);
void st_f32_to_bf16_row(const float *src, uint16_t *dst, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_TYPES_H */
