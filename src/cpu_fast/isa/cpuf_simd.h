/*
 * The vector helpers of the fast CPU path: the ONE place that names instruction sets.
 *
 * Every source in src/cpu_fast/isa/ is compiled once per variant (CMake gives each copy
 * its target flags and CPUF_VARIANT); this header then picks the implementation from
 * what the compiler was told it may use:
 *   avx512   AVX-512 F/BW/VL/DQ + VNNI (+ AVX2, FMA, F16C): f32 vectors of 16 lanes,
 *            int8 dot products with VPDPBUSD (two blocks of 32 a 512-bit register). Its
 *            BF16 extension is not used: VDPBF16PS rounds both operands to bf16, and the
 *            float products keep f32 activations; a BF16 weight becomes f32 exactly with
 *            one shift, as on every other target;
 *   avx2     AVX2 + FMA + F16C: f32 vectors of 8, int8 dot products with VPMADDUBSW;
 *   neon     AArch64 Advanced SIMD: f32 vectors of 4, SDOT when the compiler has the
 *            dot-product extension, else widening multiplies;
 *   generic  plain C on small fixed-size arrays that compilers vectorise for any target
 *            (CPUF_PORTABLE selects it whatever the compiler flags allow).
 *
 * Two families of types:
 *   cpuf_vf   CPUF_VF_LANES f32 lanes: the float products, norms, activations, attention;
 *   cpuf_q32  32 int8 values (one quantized block of 32) with cpuf_i8 (8 int32 lanes,
 *             lane j the sum over bytes 4j..4j+3 of a product) and cpuf_f8 (8 f32 lanes):
 *             the quantized products, whose blocks are 32 values on every target.
 *
 * Summation orders are fixed per variant: cpuf_vf_sum and cpuf_f8_sum reduce in one tree
 * that does not depend on the data, so a kernel that accumulates each output in one
 * vector and reduces it with these gives the same bits however its loops are tiled.
 */
#ifndef STRIDE_CPUF_SIMD_H
#define STRIDE_CPUF_SIMD_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu/cpu_internal.h"

#if defined(CPUF_PORTABLE) /* the generic variant, whatever the target offers */
#define CPUF_GENERIC 1
#elif defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && \
    defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define CPUF_AVX512 1
#define CPUF_X86 1
#include <immintrin.h>
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define CPUF_AVX2 1
#define CPUF_X86 1
#include <immintrin.h>
#elif defined(__ARM_NEON) && defined(__aarch64__)
#define CPUF_NEON 1
#include <arm_neon.h>
#else
#define CPUF_GENERIC 1
#endif

#define CPUF_CAT2(a, b) a##_##b
#define CPUF_CAT(a, b) CPUF_CAT2(a, b)
/* The variant's name for a symbol: st_cpuf_mul_mat -> st_cpuf_mul_mat_avx512. */
#define CPUF_FN(name) CPUF_CAT(name, CPUF_VARIANT)

#define CPUF_INLINE static inline __attribute__((always_inline))

/* Unrolls a tile's short loop over rows or columns completely, so that its accumulators
 * live in registers (GCC's own limit leaves the larger tiles rolled, indexed in memory). */
#define CPUF_UNROLL _Pragma("GCC unroll 16")

/* ======================================================================================
 * f32 vectors
 * ====================================================================================== */

#if CPUF_AVX512
#define CPUF_VF_LANES 16
typedef __m512 cpuf_vf;
CPUF_INLINE cpuf_vf cpuf_vf_zero(void) { return _mm512_setzero_ps(); }
CPUF_INLINE cpuf_vf cpuf_vf_set1(float a) { return _mm512_set1_ps(a); }
CPUF_INLINE cpuf_vf cpuf_vf_load(const float *p) { return _mm512_loadu_ps(p); }
CPUF_INLINE void cpuf_vf_store(float *p, cpuf_vf v) { _mm512_storeu_ps(p, v); }
CPUF_INLINE cpuf_vf cpuf_vf_load_n(const float *p, int n) {
    return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1u), p);
}
CPUF_INLINE void cpuf_vf_store_n(float *p, cpuf_vf v, int n) {
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1u), v);
}
CPUF_INLINE cpuf_vf cpuf_vf_load_f16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
CPUF_INLINE cpuf_vf cpuf_vf_load_bf16(const uint16_t *p) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
CPUF_INLINE void cpuf_vf_store_f16(uint16_t *p, cpuf_vf v) {
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
CPUF_INLINE cpuf_vf cpuf_vf_add(cpuf_vf a, cpuf_vf b) { return _mm512_add_ps(a, b); }
CPUF_INLINE cpuf_vf cpuf_vf_sub(cpuf_vf a, cpuf_vf b) { return _mm512_sub_ps(a, b); }
CPUF_INLINE cpuf_vf cpuf_vf_mul(cpuf_vf a, cpuf_vf b) { return _mm512_mul_ps(a, b); }
CPUF_INLINE cpuf_vf cpuf_vf_div(cpuf_vf a, cpuf_vf b) { return _mm512_div_ps(a, b); }
CPUF_INLINE cpuf_vf cpuf_vf_max(cpuf_vf a, cpuf_vf b) { return _mm512_max_ps(a, b); }
CPUF_INLINE cpuf_vf cpuf_vf_min(cpuf_vf a, cpuf_vf b) { return _mm512_min_ps(a, b); }
CPUF_INLINE cpuf_vf cpuf_vf_fma(cpuf_vf a, cpuf_vf b, cpuf_vf c) { return _mm512_fmadd_ps(a, b, c); }
CPUF_INLINE float cpuf_vf_sum(cpuf_vf v) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}
CPUF_INLINE float cpuf_vf_hmax(cpuf_vf v) { return _mm512_reduce_max_ps(v); }
/* 2^n for integral n in [-126, 127], as a vector of the float lanes' n */
CPUF_INLINE cpuf_vf cpuf_vf_pow2i(cpuf_vf n) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
CPUF_INLINE cpuf_vf cpuf_vf_round(cpuf_vf a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
CPUF_INLINE cpuf_vf cpuf_vf_select_lt(cpuf_vf a, cpuf_vf b, cpuf_vf if_lt, cpuf_vf otherwise) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), otherwise, if_lt);
}

#elif CPUF_AVX2
#define CPUF_VF_LANES 8
typedef __m256 cpuf_vf;
CPUF_INLINE cpuf_vf cpuf_vf_zero(void) { return _mm256_setzero_ps(); }
CPUF_INLINE cpuf_vf cpuf_vf_set1(float a) { return _mm256_set1_ps(a); }
CPUF_INLINE cpuf_vf cpuf_vf_load(const float *p) { return _mm256_loadu_ps(p); }
CPUF_INLINE void cpuf_vf_store(float *p, cpuf_vf v) { _mm256_storeu_ps(p, v); }
CPUF_INLINE __m256i cpuf_avx2_mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
CPUF_INLINE cpuf_vf cpuf_vf_load_n(const float *p, int n) { return _mm256_maskload_ps(p, cpuf_avx2_mask(n)); }
CPUF_INLINE void cpuf_vf_store_n(float *p, cpuf_vf v, int n) { _mm256_maskstore_ps(p, cpuf_avx2_mask(n), v); }
CPUF_INLINE cpuf_vf cpuf_vf_load_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
CPUF_INLINE cpuf_vf cpuf_vf_load_bf16(const uint16_t *p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
CPUF_INLINE void cpuf_vf_store_f16(uint16_t *p, cpuf_vf v) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
CPUF_INLINE cpuf_vf cpuf_vf_add(cpuf_vf a, cpuf_vf b) { return _mm256_add_ps(a, b); }
CPUF_INLINE cpuf_vf cpuf_vf_sub(cpuf_vf a, cpuf_vf b) { return _mm256_sub_ps(a, b); }
CPUF_INLINE cpuf_vf cpuf_vf_mul(cpuf_vf a, cpuf_vf b) { return _mm256_mul_ps(a, b); }
CPUF_INLINE cpuf_vf cpuf_vf_div(cpuf_vf a, cpuf_vf b) { return _mm256_div_ps(a, b); }
CPUF_INLINE cpuf_vf cpuf_vf_max(cpuf_vf a, cpuf_vf b) { return _mm256_max_ps(a, b); }
CPUF_INLINE cpuf_vf cpuf_vf_min(cpuf_vf a, cpuf_vf b) { return _mm256_min_ps(a, b); }
CPUF_INLINE cpuf_vf cpuf_vf_fma(cpuf_vf a, cpuf_vf b, cpuf_vf c) { return _mm256_fmadd_ps(a, b, c); }
CPUF_INLINE float cpuf_vf_sum(cpuf_vf v) {
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}
CPUF_INLINE float cpuf_vf_hmax(cpuf_vf v) {
    __m128 q = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_max_ps(q, _mm_movehl_ps(q, q));
    q = _mm_max_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}
CPUF_INLINE cpuf_vf cpuf_vf_pow2i(cpuf_vf n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
CPUF_INLINE cpuf_vf cpuf_vf_round(cpuf_vf a) {
    return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
CPUF_INLINE cpuf_vf cpuf_vf_select_lt(cpuf_vf a, cpuf_vf b, cpuf_vf if_lt, cpuf_vf otherwise) {
    return _mm256_blendv_ps(otherwise, if_lt, _mm256_cmp_ps(a, b, _CMP_LT_OQ));
}

#elif CPUF_NEON
#define CPUF_VF_LANES 4
typedef float32x4_t cpuf_vf;
CPUF_INLINE cpuf_vf cpuf_vf_zero(void) { return vdupq_n_f32(0.0f); }
CPUF_INLINE cpuf_vf cpuf_vf_set1(float a) { return vdupq_n_f32(a); }
CPUF_INLINE cpuf_vf cpuf_vf_load(const float *p) { return vld1q_f32(p); }
CPUF_INLINE void cpuf_vf_store(float *p, cpuf_vf v) { vst1q_f32(p, v); }
CPUF_INLINE cpuf_vf cpuf_vf_load_f16(const uint16_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
CPUF_INLINE cpuf_vf cpuf_vf_load_bf16(const uint16_t *p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}
CPUF_INLINE void cpuf_vf_store_f16(uint16_t *p, cpuf_vf v) { vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32(v))); }
CPUF_INLINE cpuf_vf cpuf_vf_add(cpuf_vf a, cpuf_vf b) { return vaddq_f32(a, b); }
CPUF_INLINE cpuf_vf cpuf_vf_sub(cpuf_vf a, cpuf_vf b) { return vsubq_f32(a, b); }
CPUF_INLINE cpuf_vf cpuf_vf_mul(cpuf_vf a, cpuf_vf b) { return vmulq_f32(a, b); }
CPUF_INLINE cpuf_vf cpuf_vf_div(cpuf_vf a, cpuf_vf b) { return vdivq_f32(a, b); }
CPUF_INLINE cpuf_vf cpuf_vf_max(cpuf_vf a, cpuf_vf b) { return vmaxq_f32(a, b); }
CPUF_INLINE cpuf_vf cpuf_vf_min(cpuf_vf a, cpuf_vf b) { return vminq_f32(a, b); }
CPUF_INLINE cpuf_vf cpuf_vf_fma(cpuf_vf a, cpuf_vf b, cpuf_vf c) { return vfmaq_f32(c, a, b); }
CPUF_INLINE float cpuf_vf_sum(cpuf_vf v) {
    float32x2_t h = vadd_f32(vget_low_f32(v), vget_high_f32(v));
    return vget_lane_f32(h, 0) + vget_lane_f32(h, 1);
}
CPUF_INLINE float cpuf_vf_hmax(cpuf_vf v) { return vmaxvq_f32(v); }
CPUF_INLINE cpuf_vf cpuf_vf_pow2i(cpuf_vf n) {
    return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23));
}
CPUF_INLINE cpuf_vf cpuf_vf_round(cpuf_vf a) { return vrndnq_f32(a); }
CPUF_INLINE cpuf_vf cpuf_vf_select_lt(cpuf_vf a, cpuf_vf b, cpuf_vf if_lt, cpuf_vf otherwise) {
    return vbslq_f32(vcltq_f32(a, b), if_lt, otherwise);
}

#else /* generic */
#define CPUF_VF_LANES 8
typedef struct cpuf_vf {
    float v[8];
} cpuf_vf;
#define CPUF_GEN_MAP(expr)                                                                                   \
    cpuf_vf r;                                                                                               \
    for (int i = 0; i < 8; i++) r.v[i] = (expr);                                                             \
    return r
CPUF_INLINE cpuf_vf cpuf_vf_zero(void) { CPUF_GEN_MAP(0.0f); }
CPUF_INLINE cpuf_vf cpuf_vf_set1(float a) { CPUF_GEN_MAP(a); }
/* through memcpy: rows of any alignment (an F32 cache row may sit at any byte stride) */
CPUF_INLINE cpuf_vf cpuf_vf_load(const float *p) {
    cpuf_vf r;
    memcpy(r.v, p, sizeof(r.v));
    return r;
}
CPUF_INLINE void cpuf_vf_store(float *p, cpuf_vf v) { memcpy(p, v.v, sizeof(v.v)); }
CPUF_INLINE cpuf_vf cpuf_vf_load_f16(const uint16_t *p) { CPUF_GEN_MAP(cpu_f16_to_f32(p[i])); }
CPUF_INLINE cpuf_vf cpuf_vf_load_bf16(const uint16_t *p) { CPUF_GEN_MAP(cpu_bf16_to_f32(p[i])); }
CPUF_INLINE void cpuf_vf_store_f16(uint16_t *p, cpuf_vf v) { st_f32_to_f16_row(v.v, p, 8); }
CPUF_INLINE cpuf_vf cpuf_vf_add(cpuf_vf a, cpuf_vf b) { CPUF_GEN_MAP(a.v[i] + b.v[i]); }
CPUF_INLINE cpuf_vf cpuf_vf_sub(cpuf_vf a, cpuf_vf b) { CPUF_GEN_MAP(a.v[i] - b.v[i]); }
CPUF_INLINE cpuf_vf cpuf_vf_mul(cpuf_vf a, cpuf_vf b) { CPUF_GEN_MAP(a.v[i] * b.v[i]); }
CPUF_INLINE cpuf_vf cpuf_vf_div(cpuf_vf a, cpuf_vf b) { CPUF_GEN_MAP(a.v[i] / b.v[i]); }
CPUF_INLINE cpuf_vf cpuf_vf_max(cpuf_vf a, cpuf_vf b) { CPUF_GEN_MAP(a.v[i] > b.v[i] ? a.v[i] : b.v[i]); }
CPUF_INLINE cpuf_vf cpuf_vf_min(cpuf_vf a, cpuf_vf b) { CPUF_GEN_MAP(a.v[i] < b.v[i] ? a.v[i] : b.v[i]); }
CPUF_INLINE cpuf_vf cpuf_vf_fma(cpuf_vf a, cpuf_vf b, cpuf_vf c) { CPUF_GEN_MAP(fmaf(a.v[i], b.v[i], c.v[i])); }
CPUF_INLINE float cpuf_vf_sum(cpuf_vf v) {
    return ((v.v[0] + v.v[4]) + (v.v[2] + v.v[6])) + ((v.v[1] + v.v[5]) + (v.v[3] + v.v[7]));
}
CPUF_INLINE float cpuf_vf_hmax(cpuf_vf v) {
    float m = v.v[0];
    for (int i = 1; i < 8; i++) m = v.v[i] > m ? v.v[i] : m;
    return m;
}
CPUF_INLINE cpuf_vf cpuf_vf_pow2i(cpuf_vf n) {
    CPUF_GEN_MAP(cpu_f32_from_bits((uint32_t)((int32_t)n.v[i] + 127) << 23));
}
CPUF_INLINE cpuf_vf cpuf_vf_round(cpuf_vf a) { CPUF_GEN_MAP(nearbyintf(a.v[i])); }
CPUF_INLINE cpuf_vf cpuf_vf_select_lt(cpuf_vf a, cpuf_vf b, cpuf_vf if_lt, cpuf_vf otherwise) {
    CPUF_GEN_MAP(a.v[i] < b.v[i] ? if_lt.v[i] : otherwise.v[i]);
}
#endif

#if !CPUF_AVX512 && !CPUF_AVX2
/* Partial vectors through a zeroed buffer: the same arithmetic as a whole vector. */
CPUF_INLINE cpuf_vf cpuf_vf_load_n(const float *p, int n) {
    float b[CPUF_VF_LANES] = {0};
    memcpy(b, p, (size_t)n * sizeof(float));
    return cpuf_vf_load(b);
}
CPUF_INLINE void cpuf_vf_store_n(float *p, cpuf_vf v, int n) {
    float b[CPUF_VF_LANES];
    cpuf_vf_store(b, v);
    memcpy(p, b, (size_t)n * sizeof(float));
}
#endif

/* e^x for every lane: x = n ln2 + r with |r| <= ln2/2 (ln2 split in two so that n ln2 is
 * exact), e^r from its degree-7 Taylor polynomial (truncation (ln2/2)^8 / 8! < 2^-27
 * relative, so the result is within a few ulp of expf), times 2^n. Lanes below -87.3 give 0 (expf
 * would give a subnormal under 1.2e-38); lanes above 88.7 give +inf. */
CPUF_INLINE cpuf_vf cpuf_vf_exp(cpuf_vf x) {
    const cpuf_vf lo = cpuf_vf_set1(-87.33654f), hi = cpuf_vf_set1(88.72283f);
    const cpuf_vf xc = cpuf_vf_min(cpuf_vf_max(x, lo), hi);
    const cpuf_vf n = cpuf_vf_round(cpuf_vf_mul(xc, cpuf_vf_set1(1.44269504088896341f)));
    cpuf_vf r = cpuf_vf_fma(n, cpuf_vf_set1(-0.693145751953125f), xc); /* ln2 high bits: n*c exact */
    r = cpuf_vf_fma(n, cpuf_vf_set1(-1.428606765330187e-06f), r);
    cpuf_vf p = cpuf_vf_set1(1.0f / 5040.0f);
    p = cpuf_vf_fma(p, r, cpuf_vf_set1(1.0f / 720.0f));
    p = cpuf_vf_fma(p, r, cpuf_vf_set1(1.0f / 120.0f));
    p = cpuf_vf_fma(p, r, cpuf_vf_set1(1.0f / 24.0f));
    p = cpuf_vf_fma(p, r, cpuf_vf_set1(1.0f / 6.0f));
    p = cpuf_vf_fma(p, r, cpuf_vf_set1(0.5f));
    p = cpuf_vf_fma(p, r, cpuf_vf_set1(1.0f));
    p = cpuf_vf_fma(p, r, cpuf_vf_set1(1.0f));
    /* n in [-126, 128]: 2^n as two factors so that n = 128 (x near 88.7) does not overflow
     * the exponent field */
    const cpuf_vf half_n = cpuf_vf_round(cpuf_vf_mul(n, cpuf_vf_set1(0.5f)));
    cpuf_vf e = cpuf_vf_mul(cpuf_vf_mul(p, cpuf_vf_pow2i(half_n)), cpuf_vf_pow2i(cpuf_vf_sub(n, half_n)));
    e = cpuf_vf_select_lt(x, lo, cpuf_vf_zero(), e);
    return cpuf_vf_select_lt(hi, x, cpuf_vf_set1(INFINITY), e);
}

/* ======================================================================================
 * int8 blocks of 32 (the quantized products)
 * ====================================================================================== */

#if CPUF_X86
typedef __m256i cpuf_q32; /* 32 x int8 (or uint8) */
typedef __m256i cpuf_i8;  /* 8 x int32 */
typedef __m256 cpuf_f8;   /* 8 x f32 */
CPUF_INLINE cpuf_q32 cpuf_q32_load(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
CPUF_INLINE void cpuf_q32_store(void *p, cpuf_q32 v) { _mm256_storeu_si256((__m256i *)p, v); }
/* 16 bytes of a legacy block -> its 32 values: low nibbles are values 0..15, high 16..31 */
CPUF_INLINE cpuf_q32 cpuf_q32_nibbles16(const uint8_t *p) {
    __m128i b = _mm_loadu_si128((const __m128i *)p);
    __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(b), _mm_srli_epi16(b, 4), 1);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}
/* 32 bytes -> their low (high == 0) or high nibbles: the K-quants' layout */
CPUF_INLINE cpuf_q32 cpuf_q32_nibbles32(const uint8_t *p, int high) {
    __m256i b = _mm256_loadu_si256((const __m256i *)p);
    return _mm256_and_si256(high ? _mm256_srli_epi16(b, 4) : b, _mm256_set1_epi8(0x0f));
}
/* byte i = (v_i >> shift) & mask, shift in 0..7 */
CPUF_INLINE cpuf_q32 cpuf_q32_shr_and(cpuf_q32 v, int shift, uint8_t mask) {
    return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8((char)mask));
}
/* byte i = (v_i << shift) & mask, shift in 0..7 */
CPUF_INLINE cpuf_q32 cpuf_q32_shl_and(cpuf_q32 v, int shift, uint8_t mask) {
    return _mm256_and_si256(_mm256_sll_epi16(v, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8((char)mask));
}
CPUF_INLINE cpuf_q32 cpuf_q32_or(cpuf_q32 a, cpuf_q32 b) { return _mm256_or_si256(a, b); }
CPUF_INLINE cpuf_q32 cpuf_q32_sub(cpuf_q32 a, int8_t c) { return _mm256_sub_epi8(a, _mm256_set1_epi8(c)); }
#if CPUF_AVX512
/* byte i = bit i of bits ? val : 0 */
CPUF_INLINE cpuf_q32 cpuf_q32_bits(uint32_t bits, uint8_t val) {
    return _mm256_maskz_mov_epi8((__mmask32)bits, _mm256_set1_epi8((char)val));
}
#else
CPUF_INLINE cpuf_q32 cpuf_q32_bits(uint32_t bits, uint8_t val) {
    /* byte i takes byte i / 8 of bits, then tests bit i % 8 */
    const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202,
                                            0x0303030303030303);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    b = _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit);
    return _mm256_and_si256(b, _mm256_set1_epi8((char)val));
}
#endif
CPUF_INLINE cpuf_i8 cpuf_i8_zero(void) { return _mm256_setzero_si256(); }
/* acc_j + sum over bytes 4j..4j+3 of w * x; exact for w in [-128, 127], x in [-127, 127]:
 * the unsigned operand is |w| (<= 128) and x takes w's sign (never -128 negated). */
CPUF_INLINE cpuf_i8 cpuf_i8_dot(cpuf_i8 acc, cpuf_q32 w, cpuf_q32 x) {
    const __m256i u = _mm256_abs_epi8(w), s = _mm256_sign_epi8(x, w);
#if CPUF_AVX512
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    /* pairs of |w| x fit int16: 2 * 128 * 127 < 32768 */
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}
CPUF_INLINE cpuf_f8 cpuf_f8_zero(void) { return _mm256_setzero_ps(); }
CPUF_INLINE cpuf_f8 cpuf_f8_set1(float a) { return _mm256_set1_ps(a); }
CPUF_INLINE cpuf_f8 cpuf_f8_load(const float *p) { return _mm256_loadu_ps(p); }
CPUF_INLINE void cpuf_f8_store(float *p, cpuf_f8 v) { _mm256_storeu_ps(p, v); }
CPUF_INLINE cpuf_f8 cpuf_f8_from_i8(cpuf_i8 v) { return _mm256_cvtepi32_ps(v); }
CPUF_INLINE cpuf_f8 cpuf_f8_mul(cpuf_f8 a, cpuf_f8 b) { return _mm256_mul_ps(a, b); }
CPUF_INLINE cpuf_f8 cpuf_f8_add(cpuf_f8 a, cpuf_f8 b) { return _mm256_add_ps(a, b); }
CPUF_INLINE cpuf_f8 cpuf_f8_fma(cpuf_f8 a, cpuf_f8 b, cpuf_f8 c) { return _mm256_fmadd_ps(a, b, c); }
CPUF_INLINE float cpuf_f8_sum(cpuf_f8 v) {
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}
/* max |x_i| over 32 floats */
CPUF_INLINE float cpuf_absmax32(const float *x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_andnot_ps(sign, _mm256_loadu_ps(x));
    for (int i = 8; i < 32; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
    __m128 q = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    q = _mm_max_ps(q, _mm_movehl_ps(q, q));
    q = _mm_max_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}
/* round(x_i * id) to int8 for 32 floats (|x_i * id| <= 127 by the caller's choice of id),
 * ties to even */
CPUF_INLINE cpuf_q32 cpuf_q32_quantize(const float *x, float id) {
    const __m256 s = _mm256_set1_ps(id);
    __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), s));
    __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), s));
    __m256i c = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), s));
    __m256i d = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), s));
    /* the packs interleave 128-bit lanes: 0 4 1 5 2 6 3 7 puts the dwords back in order */
    __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    __m256i v = _mm256_packs_epi16(ab, cd);
    return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
/* sum of the 32 int8 values */
CPUF_INLINE int32_t cpuf_q32_sum(cpuf_q32 v) {
    __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), v), _mm256_set1_epi16(1));
    __m128i q = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    q = _mm_add_epi32(q, _mm_shuffle_epi32(q, 0x4e));
    q = _mm_add_epi32(q, _mm_shuffle_epi32(q, 0xb1));
    return _mm_cvtsi128_si32(q);
}

#elif CPUF_NEON
typedef int8x16x2_t cpuf_q32;
typedef int32x4x2_t cpuf_i8;
typedef float32x4x2_t cpuf_f8;
CPUF_INLINE cpuf_q32 cpuf_q32_load(const void *p) {
    cpuf_q32 r = {{vld1q_s8((const int8_t *)p), vld1q_s8((const int8_t *)p + 16)}};
    return r;
}
CPUF_INLINE void cpuf_q32_store(void *p, cpuf_q32 v) {
    vst1q_s8((int8_t *)p, v.val[0]);
    vst1q_s8((int8_t *)p + 16, v.val[1]);
}
CPUF_INLINE cpuf_q32 cpuf_q32_nibbles16(const uint8_t *p) {
    uint8x16_t b = vld1q_u8(p);
    cpuf_q32 r = {{vreinterpretq_s8_u8(vandq_u8(b, vdupq_n_u8(0x0f))), vreinterpretq_s8_u8(vshrq_n_u8(b, 4))}};
    return r;
}
CPUF_INLINE cpuf_q32 cpuf_q32_nibbles32(const uint8_t *p, int high) {
    uint8x16_t a = vld1q_u8(p), b = vld1q_u8(p + 16);
    if (high) {
        a = vshrq_n_u8(a, 4);
        b = vshrq_n_u8(b, 4);
    } else {
        a = vandq_u8(a, vdupq_n_u8(0x0f));
        b = vandq_u8(b, vdupq_n_u8(0x0f));
    }
    cpuf_q32 r = {{vreinterpretq_s8_u8(a), vreinterpretq_s8_u8(b)}};
    return r;
}
CPUF_INLINE cpuf_q32 cpuf_q32_shr_and(cpuf_q32 v, int shift, uint8_t mask) {
    const int8x16_t sh = vdupq_n_s8((int8_t)-shift);
    const uint8x16_t m = vdupq_n_u8(mask);
    cpuf_q32 r = {{vreinterpretq_s8_u8(vandq_u8(vshlq_u8(vreinterpretq_u8_s8(v.val[0]), sh), m)),
                   vreinterpretq_s8_u8(vandq_u8(vshlq_u8(vreinterpretq_u8_s8(v.val[1]), sh), m))}};
    return r;
}
CPUF_INLINE cpuf_q32 cpuf_q32_shl_and(cpuf_q32 v, int shift, uint8_t mask) {
    const int8x16_t sh = vdupq_n_s8((int8_t)shift);
    const uint8x16_t m = vdupq_n_u8(mask);
    cpuf_q32 r = {{vreinterpretq_s8_u8(vandq_u8(vshlq_u8(vreinterpretq_u8_s8(v.val[0]), sh), m)),
                   vreinterpretq_s8_u8(vandq_u8(vshlq_u8(vreinterpretq_u8_s8(v.val[1]), sh), m))}};
    return r;
}
CPUF_INLINE cpuf_q32 cpuf_q32_or(cpuf_q32 a, cpuf_q32 b) {
    cpuf_q32 r = {{vorrq_s8(a.val[0], b.val[0]), vorrq_s8(a.val[1], b.val[1])}};
    return r;
}
CPUF_INLINE cpuf_q32 cpuf_q32_sub(cpuf_q32 a, int8_t c) {
    cpuf_q32 r = {{vsubq_s8(a.val[0], vdupq_n_s8(c)), vsubq_s8(a.val[1], vdupq_n_s8(c))}};
    return r;
}
CPUF_INLINE cpuf_q32 cpuf_q32_bits(uint32_t bits, uint8_t val) {
    static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t m = vld1q_u8(bit);
    uint8x8_t b0 = vdup_n_u8((uint8_t)bits), b1 = vdup_n_u8((uint8_t)(bits >> 8));
    uint8x8_t b2 = vdup_n_u8((uint8_t)(bits >> 16)), b3 = vdup_n_u8((uint8_t)(bits >> 24));
    uint8x16_t lo = vtstq_u8(vcombine_u8(b0, b1), m), hi = vtstq_u8(vcombine_u8(b2, b3), m);
    cpuf_q32 r = {{vreinterpretq_s8_u8(vandq_u8(lo, vdupq_n_u8(val))),
                   vreinterpretq_s8_u8(vandq_u8(hi, vdupq_n_u8(val)))}};
    return r;
}
CPUF_INLINE cpuf_i8 cpuf_i8_zero(void) {
    cpuf_i8 r = {{vdupq_n_s32(0), vdupq_n_s32(0)}};
    return r;
}
CPUF_INLINE int32x4_t cpuf_neon_dot16(int32x4_t acc, int8x16_t w, int8x16_t x) {
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(acc, w, x);
#else
    /* lane j: bytes 4j..4j+3, as SDOT: pairwise sums of the widened products */
    int16x8_t lo = vmull_s8(vget_low_s8(w), vget_low_s8(x)), hi = vmull_high_s8(w, x);
    int32x4_t l = vpaddlq_s16(lo), h = vpaddlq_s16(hi);
    return vaddq_s32(acc, vpaddq_s32(l, h));
#endif
}
CPUF_INLINE cpuf_i8 cpuf_i8_dot(cpuf_i8 acc, cpuf_q32 w, cpuf_q32 x) {
    cpuf_i8 r = {{cpuf_neon_dot16(acc.val[0], w.val[0], x.val[0]), cpuf_neon_dot16(acc.val[1], w.val[1], x.val[1])}};
    return r;
}
CPUF_INLINE cpuf_f8 cpuf_f8_zero(void) {
    cpuf_f8 r = {{vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}};
    return r;
}
CPUF_INLINE cpuf_f8 cpuf_f8_set1(float a) {
    cpuf_f8 r = {{vdupq_n_f32(a), vdupq_n_f32(a)}};
    return r;
}
CPUF_INLINE cpuf_f8 cpuf_f8_load(const float *p) {
    cpuf_f8 r = {{vld1q_f32(p), vld1q_f32(p + 4)}};
    return r;
}
CPUF_INLINE void cpuf_f8_store(float *p, cpuf_f8 v) {
    vst1q_f32(p, v.val[0]);
    vst1q_f32(p + 4, v.val[1]);
}
CPUF_INLINE cpuf_f8 cpuf_f8_from_i8(cpuf_i8 v) {
    cpuf_f8 r = {{vcvtq_f32_s32(v.val[0]), vcvtq_f32_s32(v.val[1])}};
    return r;
}
CPUF_INLINE cpuf_f8 cpuf_f8_mul(cpuf_f8 a, cpuf_f8 b) {
    cpuf_f8 r = {{vmulq_f32(a.val[0], b.val[0]), vmulq_f32(a.val[1], b.val[1])}};
    return r;
}
CPUF_INLINE cpuf_f8 cpuf_f8_add(cpuf_f8 a, cpuf_f8 b) {
    cpuf_f8 r = {{vaddq_f32(a.val[0], b.val[0]), vaddq_f32(a.val[1], b.val[1])}};
    return r;
}
CPUF_INLINE cpuf_f8 cpuf_f8_fma(cpuf_f8 a, cpuf_f8 b, cpuf_f8 c) {
    cpuf_f8 r = {{vfmaq_f32(c.val[0], a.val[0], b.val[0]), vfmaq_f32(c.val[1], a.val[1], b.val[1])}};
    return r;
}
CPUF_INLINE float cpuf_f8_sum(cpuf_f8 v) { return cpuf_vf_sum(vaddq_f32(v.val[0], v.val[1])); }
CPUF_INLINE float cpuf_absmax32(const float *x) {
    float32x4_t m = vabsq_f32(vld1q_f32(x));
    for (int i = 4; i < 32; i += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x + i)));
    return vmaxvq_f32(m);
}
CPUF_INLINE cpuf_q32 cpuf_q32_quantize(const float *x, float id) {
    int8x16_t h[2];
    for (int j = 0; j < 2; j++) {
        int32x4_t a = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 16 * j), id));
        int32x4_t b = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 16 * j + 4), id));
        int32x4_t c = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 16 * j + 8), id));
        int32x4_t d = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 16 * j + 12), id));
        int16x8_t ab = vcombine_s16(vqmovn_s32(a), vqmovn_s32(b)), cd = vcombine_s16(vqmovn_s32(c), vqmovn_s32(d));
        h[j] = vcombine_s8(vqmovn_s16(ab), vqmovn_s16(cd));
    }
    cpuf_q32 r = {{h[0], h[1]}};
    return r;
}
CPUF_INLINE int32_t cpuf_q32_sum(cpuf_q32 v) {
    return vaddlvq_s8(v.val[0]) + vaddlvq_s8(v.val[1]);
}

#else /* generic */
typedef struct cpuf_q32 {
    int8_t v[32];
} cpuf_q32;
typedef struct cpuf_i8 {
    int32_t v[8];
} cpuf_i8;
typedef cpuf_vf cpuf_f8; /* 8 lanes too */
CPUF_INLINE cpuf_q32 cpuf_q32_load(const void *p) {
    cpuf_q32 r;
    memcpy(r.v, p, 32);
    return r;
}
CPUF_INLINE void cpuf_q32_store(void *p, cpuf_q32 v) { memcpy(p, v.v, 32); }
CPUF_INLINE cpuf_q32 cpuf_q32_nibbles16(const uint8_t *p) {
    cpuf_q32 r;
    for (int i = 0; i < 16; i++) {
        r.v[i] = (int8_t)(p[i] & 0x0f);
        r.v[i + 16] = (int8_t)(p[i] >> 4);
    }
    return r;
}
CPUF_INLINE cpuf_q32 cpuf_q32_nibbles32(const uint8_t *p, int high) {
    cpuf_q32 r;
    for (int i = 0; i < 32; i++) r.v[i] = (int8_t)(high ? p[i] >> 4 : p[i] & 0x0f);
    return r;
}
CPUF_INLINE cpuf_q32 cpuf_q32_shr_and(cpuf_q32 v, int shift, uint8_t mask) {
    cpuf_q32 r;
    for (int i = 0; i < 32; i++) r.v[i] = (int8_t)(((uint8_t)v.v[i] >> shift) & mask);
    return r;
}
CPUF_INLINE cpuf_q32 cpuf_q32_shl_and(cpuf_q32 v, int shift, uint8_t mask) {
    cpuf_q32 r;
    for (int i = 0; i < 32; i++) r.v[i] = (int8_t)(((unsigned)(uint8_t)v.v[i] << shift) & mask);
    return r;
}
CPUF_INLINE cpuf_q32 cpuf_q32_or(cpuf_q32 a, cpuf_q32 b) {
    cpuf_q32 r;
    for (int i = 0; i < 32; i++) r.v[i] = (int8_t)(a.v[i] | b.v[i]);
    return r;
}
CPUF_INLINE cpuf_q32 cpuf_q32_sub(cpuf_q32 a, int8_t c) {
    cpuf_q32 r;
    for (int i = 0; i < 32; i++) r.v[i] = (int8_t)(uint8_t)((unsigned)(uint8_t)a.v[i] - (unsigned)(uint8_t)c);
    return r;
}
CPUF_INLINE cpuf_q32 cpuf_q32_bits(uint32_t bits, uint8_t val) {
    cpuf_q32 r;
    for (int i = 0; i < 32; i++) r.v[i] = (int8_t)(((bits >> i) & 1u) ? val : 0);
    return r;
}
CPUF_INLINE cpuf_i8 cpuf_i8_zero(void) {
    cpuf_i8 r = {{0}};
    return r;
}
CPUF_INLINE cpuf_i8 cpuf_i8_dot(cpuf_i8 acc, cpuf_q32 w, cpuf_q32 x) {
    for (int j = 0; j < 8; j++) {
        int32_t s = 0;
        for (int i = 0; i < 4; i++) s += (int32_t)w.v[4 * j + i] * (int32_t)x.v[4 * j + i];
        acc.v[j] += s;
    }
    return acc;
}
CPUF_INLINE cpuf_f8 cpuf_f8_zero(void) { return cpuf_vf_zero(); }
CPUF_INLINE cpuf_f8 cpuf_f8_set1(float a) { return cpuf_vf_set1(a); }
CPUF_INLINE cpuf_f8 cpuf_f8_load(const float *p) { return cpuf_vf_load(p); }
CPUF_INLINE void cpuf_f8_store(float *p, cpuf_f8 v) { cpuf_vf_store(p, v); }
CPUF_INLINE cpuf_f8 cpuf_f8_from_i8(cpuf_i8 v) { CPUF_GEN_MAP((float)v.v[i]); }
CPUF_INLINE cpuf_f8 cpuf_f8_mul(cpuf_f8 a, cpuf_f8 b) { return cpuf_vf_mul(a, b); }
CPUF_INLINE cpuf_f8 cpuf_f8_add(cpuf_f8 a, cpuf_f8 b) { return cpuf_vf_add(a, b); }
CPUF_INLINE cpuf_f8 cpuf_f8_fma(cpuf_f8 a, cpuf_f8 b, cpuf_f8 c) { return cpuf_vf_fma(a, b, c); }
CPUF_INLINE float cpuf_f8_sum(cpuf_f8 v) { return cpuf_vf_sum(v); }
CPUF_INLINE float cpuf_absmax32(const float *x) {
    float m = 0.0f;
    for (int i = 0; i < 32; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}
CPUF_INLINE cpuf_q32 cpuf_q32_quantize(const float *x, float id) {
    cpuf_q32 r;
    for (int i = 0; i < 32; i++) r.v[i] = (int8_t)nearbyintf(x[i] * id);
    return r;
}
CPUF_INLINE int32_t cpuf_q32_sum(cpuf_q32 v) {
    int32_t s = 0;
    for (int i = 0; i < 32; i++) s += v.v[i];
    return s;
}
#endif

/* Asks for the cache line at p ahead of its use (never faults, whatever p). */
CPUF_INLINE void cpuf_prefetch(const void *p) { __builtin_prefetch(p, 0, 3); }

/* One IEEE half (a block's scale) as f32, exact. */
#if CPUF_X86
CPUF_INLINE float cpuf_half_to_f32(uint16_t h) { return _cvtsh_ss(h); }
#elif CPUF_NEON
CPUF_INLINE float cpuf_half_to_f32(uint16_t h) {
    __fp16 f;
    memcpy(&f, &h, sizeof(f));
    return (float)f;
}
#else
CPUF_INLINE float cpuf_half_to_f32(uint16_t h) { return cpu_f16_to_f32(h); }
#endif

/* Lane scales of a block of 32 in two halves of 16 (lanes 0..3 cover values 0..15):
 * two[0] for the first half, two[1] for the second. */
#if CPUF_X86
CPUF_INLINE cpuf_f8 cpuf_f8_halves(const float *two) {
    return _mm256_set_m128(_mm_broadcast_ss(two + 1), _mm_broadcast_ss(two));
}
/* 8 bytes as 8 floats, unsigned or signed */
CPUF_INLINE cpuf_f8 cpuf_f8_from_u8(const uint8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
CPUF_INLINE cpuf_f8 cpuf_f8_from_s8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
#elif CPUF_NEON
CPUF_INLINE cpuf_f8 cpuf_f8_halves(const float *two) {
    cpuf_f8 r = {{vld1q_dup_f32(two), vld1q_dup_f32(two + 1)}};
    return r;
}
CPUF_INLINE cpuf_f8 cpuf_f8_from_u8(const uint8_t *p) {
    uint16x8_t h = vmovl_u8(vld1_u8(p));
    cpuf_f8 r = {{vcvtq_f32_u32(vmovl_u16(vget_low_u16(h))), vcvtq_f32_u32(vmovl_u16(vget_high_u16(h)))}};
    return r;
}
CPUF_INLINE cpuf_f8 cpuf_f8_from_s8(const int8_t *p) {
    int16x8_t h = vmovl_s8(vld1_s8(p));
    cpuf_f8 r = {{vcvtq_f32_s32(vmovl_s16(vget_low_s16(h))), vcvtq_f32_s32(vmovl_s16(vget_high_s16(h)))}};
    return r;
}
#else
CPUF_INLINE cpuf_f8 cpuf_f8_halves(const float *two) { CPUF_GEN_MAP(two[i / 4]); }
CPUF_INLINE cpuf_f8 cpuf_f8_from_u8(const uint8_t *p) { CPUF_GEN_MAP((float)p[i]); }
CPUF_INLINE cpuf_f8 cpuf_f8_from_s8(const int8_t *p) { CPUF_GEN_MAP((float)p[i]); }
#endif

/* ---- pairs of blocks (the quantized products' step) ------------------------------------
 * Two blocks of 32 side by side: cpuf_q64 (64 int8), cpuf_i16 (16 int32 lanes), cpuf_f16
 * (16 f32 lanes, the low 8 for the first block). One 512-bit register on AVX-512, two
 * of the block types elsewhere; the arithmetic is the same either way, lane for lane. */
#if CPUF_AVX512
typedef __m512i cpuf_q64;
typedef __m512 cpuf_f16;
CPUF_INLINE cpuf_q64 cpuf_q64_load(const void *p) { return _mm512_loadu_si512(p); }
CPUF_INLINE cpuf_q64 cpuf_q64_join(cpuf_q32 a, cpuf_q32 b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}
/* float(int32 lanes of the exact dot products of the two blocks), as cpuf_i8_dot: |w| is the
 * unsigned operand and x takes w's sign (AVX-512 has no 512-bit VPSIGNB: a masked negate) */
CPUF_INLINE cpuf_f16 cpuf_f16_dot(cpuf_q64 w, cpuf_q64 x) {
    const __m512i z = _mm512_setzero_si512();
    const __m512i s = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), z, x);
    return _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(z, _mm512_abs_epi8(w), s));
}
CPUF_INLINE cpuf_f16 cpuf_f16_zero(void) { return _mm512_setzero_ps(); }
CPUF_INLINE cpuf_f16 cpuf_f16_load(const float *p) { return _mm512_loadu_ps(p); }
CPUF_INLINE cpuf_f16 cpuf_f16_join(cpuf_f8 a, cpuf_f8 b) { return _mm512_insertf32x8(_mm512_castps256_ps512(a), b, 1); }
CPUF_INLINE cpuf_f16 cpuf_f16_mul(cpuf_f16 a, cpuf_f16 b) { return _mm512_mul_ps(a, b); }
CPUF_INLINE cpuf_f16 cpuf_f16_fma(cpuf_f16 a, cpuf_f16 b, cpuf_f16 c) { return _mm512_fmadd_ps(a, b, c); }
/* the low 8 lanes only (a last, unpaired block); the high 8 keep c's bits */
CPUF_INLINE cpuf_f16 cpuf_f16_fma_lo(cpuf_f16 a, cpuf_f16 b, cpuf_f16 c) {
    return _mm512_mask3_fmadd_ps(a, b, c, 0x00ff);
}
CPUF_INLINE cpuf_f8 cpuf_f16_fold(cpuf_f16 v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
}
#else
typedef struct cpuf_q64 {
    cpuf_q32 lo, hi;
} cpuf_q64;
typedef struct cpuf_f16 {
    cpuf_f8 lo, hi;
} cpuf_f16;
CPUF_INLINE cpuf_q64 cpuf_q64_load(const void *p) {
    cpuf_q64 r = {cpuf_q32_load(p), cpuf_q32_load((const int8_t *)p + 32)};
    return r;
}
CPUF_INLINE cpuf_q64 cpuf_q64_join(cpuf_q32 a, cpuf_q32 b) {
    cpuf_q64 r = {a, b};
    return r;
}
CPUF_INLINE cpuf_f16 cpuf_f16_dot(cpuf_q64 w, cpuf_q64 x) {
    cpuf_f16 r = {cpuf_f8_from_i8(cpuf_i8_dot(cpuf_i8_zero(), w.lo, x.lo)),
                  cpuf_f8_from_i8(cpuf_i8_dot(cpuf_i8_zero(), w.hi, x.hi))};
    return r;
}
CPUF_INLINE cpuf_f16 cpuf_f16_zero(void) {
    cpuf_f16 r = {cpuf_f8_zero(), cpuf_f8_zero()};
    return r;
}
CPUF_INLINE cpuf_f16 cpuf_f16_load(const float *p) {
    cpuf_f16 r = {cpuf_f8_load(p), cpuf_f8_load(p + 8)};
    return r;
}
CPUF_INLINE cpuf_f16 cpuf_f16_join(cpuf_f8 a, cpuf_f8 b) {
    cpuf_f16 r = {a, b};
    return r;
}
CPUF_INLINE cpuf_f16 cpuf_f16_mul(cpuf_f16 a, cpuf_f16 b) {
    cpuf_f16 r = {cpuf_f8_mul(a.lo, b.lo), cpuf_f8_mul(a.hi, b.hi)};
    return r;
}
CPUF_INLINE cpuf_f16 cpuf_f16_fma(cpuf_f16 a, cpuf_f16 b, cpuf_f16 c) {
    cpuf_f16 r = {cpuf_f8_fma(a.lo, b.lo, c.lo), cpuf_f8_fma(a.hi, b.hi, c.hi)};
    return r;
}
CPUF_INLINE cpuf_f16 cpuf_f16_fma_lo(cpuf_f16 a, cpuf_f16 b, cpuf_f16 c) {
    cpuf_f16 r = {cpuf_f8_fma(a.lo, b.lo, c.lo), c.hi};
    return r;
}
CPUF_INLINE cpuf_f8 cpuf_f16_fold(cpuf_f16 v) { return cpuf_f8_add(v.lo, v.hi); }
#endif

#endif /* STRIDE_CPUF_SIMD_H */
