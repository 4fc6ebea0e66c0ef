/*
 * Helpers shared by the dequantizers (src/quant/): blocks are read as bytes, never cast
 * to structs, so that a row may start at any address (a weight inside an mmap'd file)
 * and the little-endian fields read the same on every host.
 */
#ifndef STRIDE_QUANT_INTERNAL_H
#define STRIDE_QUANT_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "stride/quant.h"
#include "stride/status.h"
#include "stride/types.h"

/* A little-endian u16 / u32 at p. */
static inline uint16_t quant_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static inline uint32_t quant_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* An f16 field (d, dmin, m) at p, as f32. */
static inline float quant_half(const uint8_t *p) { return st_f16_to_f32(quant_u16(p)); }

/* Blocks in a row of n values; n must be a whole number of blocks. */
static inline int64_t quant_blocks(int64_t n, int64_t block_size) {
    ST_ASSERT(n >= 0 && n % block_size == 0);
    return n / block_size;
}

#endif /* STRIDE_QUANT_INTERNAL_H */
