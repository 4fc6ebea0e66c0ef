/* PCG32 (XSH-RR, 64-bit state): see include/stride/sample.h for the reference. Integer
 * arithmetic only, so a seed reproduces the same stream on every platform. */
#include "stride/sample.h"

#define PCG32_MULT 6364136223846793005ULL

static void rng_step(st_rng *r) { r->state = r->state * PCG32_MULT + r->inc; }

void st_rng_seed(st_rng *r, uint64_t seed, uint64_t stream) {
    r->state = 0;
    r->inc = (stream << 1) | 1u;
    rng_step(r);
    r->state += seed;
    rng_step(r);
}

uint32_t st_rng_u32(st_rng *r) {
    uint64_t old = r->state;
    rng_step(r);
    uint32_t xorshifted = (uint32_t)(((old >> 18) ^ old) >> 27);
    uint32_t rot = (uint32_t)(old >> 59);
    return (xorshifted >> rot) | (xorshifted << ((32u - rot) & 31u));
}

void st_rng_uniform_words(st_rng *r, uint32_t words[2]) {
    words[0] = st_rng_u32(r) >> 5;
    words[1] = st_rng_u32(r) >> 6;
}

double st_uniform_from_words(uint32_t hi, uint32_t lo) {
    /* 27 + 26 = 53 bits, the mantissa of a double: every value k / 2^53 is exact. */
    return (double)((uint64_t)hi * 67108864u + lo) * (1.0 / 9007199254740992.0);
}

double st_rng_uniform(st_rng *r) {
    uint32_t w[2];
    st_rng_uniform_words(r, w);
    return st_uniform_from_words(w[0], w[1]);
}
