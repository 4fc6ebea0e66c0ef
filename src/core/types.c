#include "stride/types.h"

#include <ctype.h>
#include <string.h>

/* Block sizes and bytes per block as ggml defines them (ggml's type_traits table). */
static const st_type_traits type_traits[ST_TYPE_COUNT] = {
    [ST_TYPE_F32] = {"f32", 1, 4, true, false},
    [ST_TYPE_F16] = {"f16", 1, 2, true, false},
    [ST_TYPE_Q4_0] = {"q4_0", 32, 18, false, true},
    [ST_TYPE_Q4_1] = {"q4_1", 32, 20, false, true},
    [ST_TYPE_Q5_0] = {"q5_0", 32, 22, false, true},
    [ST_TYPE_Q5_1] = {"q5_1", 32, 24, false, true},
    [ST_TYPE_Q8_0] = {"q8_0", 32, 34, false, true},
    [ST_TYPE_Q8_1] = {"q8_1", 32, 36, false, true},
    [ST_TYPE_Q2_K] = {"q2_K", 256, 84, false, true},
    [ST_TYPE_Q3_K] = {"q3_K", 256, 110, false, true},
    [ST_TYPE_Q4_K] = {"q4_K", 256, 144, false, true},
    [ST_TYPE_Q5_K] = {"q5_K", 256, 176, false, true},
    [ST_TYPE_Q6_K] = {"q6_K", 256, 210, false, true},
    [ST_TYPE_Q8_K] = {"q8_K", 256, 292, false, true},
    [ST_TYPE_IQ2_XXS] = {"iq2_xxs", 256, 66, false, true},
    [ST_TYPE_IQ2_XS] = {"iq2_xs", 256, 74, false, true},
    [ST_TYPE_IQ3_XXS] = {"iq3_xxs", 256, 98, false, true},
    [ST_TYPE_IQ1_S] = {"iq1_s", 256, 50, false, true},
    [ST_TYPE_IQ4_NL] = {"iq4_nl", 32, 18, false, true},
    [ST_TYPE_IQ3_S] = {"iq3_s", 256, 110, false, true},
    [ST_TYPE_IQ2_S] = {"iq2_s", 256, 82, false, true},
    [ST_TYPE_IQ4_XS] = {"iq4_xs", 256, 136, false, true},
    [ST_TYPE_I8] = {"i8", 1, 1, false, false},
    [ST_TYPE_I16] = {"i16", 1, 2, false, false},
    [ST_TYPE_I32] = {"i32", 1, 4, false, false},
    [ST_TYPE_I64] = {"i64", 1, 8, false, false},
    [ST_TYPE_F64] = {"f64", 1, 8, false, false},
    [ST_TYPE_IQ1_M] = {"iq1_m", 256, 56, false, true},
    [ST_TYPE_BF16] = {"bf16", 1, 2, true, false},
    [ST_TYPE_TQ1_0] = {"tq1_0", 256, 54, false, true},
    [ST_TYPE_TQ2_0] = {"tq2_0", 256, 66, false, true},
    [ST_TYPE_MXFP4] = {"mxfp4", 32, 17, false, true},
    [ST_TYPE_NVFP4] = {"nvfp4", 64, 36, false, true},
    [ST_TYPE_Q1_0] = {"q1_0", 128, 18, false, true},
};

const st_type_traits *st_type_get_traits(uint32_t type_id) {
    if (type_id >= ST_TYPE_COUNT || type_traits[type_id].name == NULL) return NULL;
    return &type_traits[type_id];
}

const char *st_type_name(uint32_t type_id) {
    const st_type_traits *t = st_type_get_traits(type_id);
    return t ? t->name : "unknown";
}

bool st_type_from_name(const char *name, st_type *out) {
    for (int i = 0; i < ST_TYPE_COUNT; i++) {
        const char *n = type_traits[i].name;
        if (!n) continue;
        size_t k = 0;
        while (n[k] && name[k] && tolower((unsigned char)n[k]) == tolower((unsigned char)name[k])) k++;
        if (n[k] == '\0' && name[k] == '\0') {
            *out = (st_type)i;
            return true;
        }
    }
    return false;
}

bool st_type_row_bytes(st_type type, int64_t n, size_t *out) {
    const st_type_traits *t = st_type_get_traits((uint32_t)type);
    if (!t || n < 0 || n % t->block_size != 0) return false;
    uint64_t blocks = (uint64_t)(n / t->block_size);
    if (blocks != 0 && t->block_bytes > SIZE_MAX / blocks) return false;
    *out = (size_t)blocks * t->block_bytes;
    return true;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

float st_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (mant << 13)); /* inf, nan */
    if (exp != 0) return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
    if (mant == 0) return f32_from_bits(sign); /* +-0 */
    /* subnormal half: normalise into an f32 */
    int e = -1;
    do {
        mant <<= 1;
        e++;
    } while ((mant & 0x400u) == 0);
    return f32_from_bits(sign | ((uint32_t)(112 - e) << 23) | ((mant & 0x3ffu) << 13));
}

uint16_t st_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x1ffu)); /* quiet nan */
    if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (abs >= 0x38800000u) {
        /* normal half: drop 13 mantissa bits with round-to-nearest-even */
        uint32_t rounded = abs + 0x0fffu + ((abs >> 13) & 1u);
        return (uint16_t)(sign | ((rounded - 0x38000000u) >> 13));
    }
    if (abs < 0x33000000u) return sign; /* below half the smallest subnormal: +-0 */
    /* subnormal half: value = mant * 2^-24; shift the implicit-1 mantissa into place */
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exp; /* 14..24 */
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t mid = 1u << (shift - 1u);
    if (rem > mid || (rem == mid && (half & 1u))) half++;
    return (uint16_t)(sign | half);
}

float st_bf16_to_f32(uint16_t b) { return f32_from_bits((uint32_t)b << 16); }

uint16_t st_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet nan */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

void st_f16_to_f32_row(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = st_f16_to_f32(src[i]);
}

void st_f32_to_f16_row(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = st_f32_to_f16(src[i]);
}

void st_bf16_to_f32_row(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = st_bf16_to_f32(src[i]);
}

void st_f32_to_bf16_row(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = st_f32_to_bf16(src[i]);
}
