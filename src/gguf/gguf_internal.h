/*
 * stride: helpers shared by the GGUF reader, writer and value code (not public API).
 */
#ifndef STRIDE_GGUF_INTERNAL_H
#define STRIDE_GGUF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "stride/gguf.h"

/* ggml's GGML_MAX_NAME is 64 bytes including the terminating NUL, and its GGUF reader
 * rejects a name of length >= 64: a tensor name may have at most 63 bytes. */
#define ST_GGUF_MAX_TENSOR_NAME 63

/* The GGUF spec caps metadata keys at 2^16 - 1 bytes. */
#define ST_GGUF_MAX_KEY 65535

/* Nesting limit for arrays of arrays: 1 = a plain array. Bounds the reader's recursion. */
#define ST_GGUF_MAX_ARRAY_DEPTH 8

/* Little-endian loads from possibly unaligned bytes (GGUF is little-endian on disk). */
static inline uint16_t st_gguf_load_u16(const void *p) {
    const uint8_t *b = (const uint8_t *)p;
    return (uint16_t)(b[0] | (b[1] << 8));
}

static inline uint32_t st_gguf_load_u32(const void *p) {
    const uint8_t *b = (const uint8_t *)p;
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
}

static inline uint64_t st_gguf_load_u64(const void *p) {
    const uint8_t *b = (const uint8_t *)p;
    return (uint64_t)st_gguf_load_u32(b) | ((uint64_t)st_gguf_load_u32(b + 4) << 32);
}

static inline bool st_gguf_type_is_unsigned(st_gguf_type t) {
    return t == ST_GGUF_TYPE_UINT8 || t == ST_GGUF_TYPE_UINT16 || t == ST_GGUF_TYPE_UINT32 || t == ST_GGUF_TYPE_UINT64;
}

static inline bool st_gguf_type_is_signed(st_gguf_type t) {
    return t == ST_GGUF_TYPE_INT8 || t == ST_GGUF_TYPE_INT16 || t == ST_GGUF_TYPE_INT32 || t == ST_GGUF_TYPE_INT64;
}

/* True for UINT8..INT32, FLOAT32, BOOL, UINT64..FLOAT64: the fixed-size scalar types. */
static inline int st_gguf_type_is_fixed(uint32_t type) { return st_gguf_type_size(type) != 0; }

/* Decodes one fixed-size element (little-endian bytes at p) of the given type into a
 * value. type must be fixed-size. */
void st_gguf_decode_scalar(uint32_t type, const uint8_t *p, st_gguf_value *out);

#endif /* STRIDE_GGUF_INTERNAL_H */
