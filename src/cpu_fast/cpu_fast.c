/* The CPU op tables: the reference ops as a table, the choice of the fast path's variant
 * from what the CPU has, and the workspace. */
#include "cpu_fast/cpu_fast.h"

#include <stdlib.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>

/* F16C (CPUID leaf 1, ECX bit 29) and AVX-512 VNNI (leaf 7, sub-leaf 0, ECX bit 11), read
 * directly: not every compiler's __builtin_cpu_supports knows their names. That the OS
 * saves the AVX and AVX-512 state is what __builtin_cpu_supports("avx2") and ("avx512f")
 * check, and those are required alongside. */
static bool cpuid_ecx_bit(unsigned leaf, unsigned bit) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(leaf, 0, &a, &b, &c, &d)) return false;
    return (c >> bit) & 1u;
}
#endif

/* ---- the reference ops as a table ------------------------------------------------------- */

static st_status exact_mul_mat(st_cpu_ws *ws, st_tensor *dst, const st_tensor *w, const st_tensor *x, st_error *err) {
    (void)ws;
    return st_cpu_mul_mat(dst, w, x, err);
}

static st_status exact_mul_mat_id(st_cpu_ws *ws, st_tensor *dst, const st_tensor *w, const st_tensor *x,
                                  const int32_t *ids, st_error *err) {
    (void)ws;
    return st_cpu_mul_mat_id(dst, w, x, ids, err);
}

static st_status exact_attention(st_cpu_ws *ws, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                                 const st_tensor *v_cache, const int32_t *positions, const int32_t *seq,
                                 const int32_t *table, int32_t max_blocks, const st_attn_params *p, st_error *err) {
    (void)ws;
    return st_cpu_attention_paged(dst, q, k_cache, v_cache, positions, seq, table, max_blocks, p, err);
}

static const st_cpu_op_table exact_table = {
    .name = "exact",
    .get_rows = st_cpu_get_rows,
    .mul_mat = exact_mul_mat,
    .mul_mat_id = exact_mul_mat_id,
    .rms_norm = st_cpu_rms_norm,
    .rope = st_cpu_rope,
    .swiglu = st_cpu_swiglu,
    .geglu = st_cpu_geglu,
    .swiglu_fused = st_cpu_swiglu_fused,
    .add = st_cpu_add,
    .mul = st_cpu_mul,
    .scale = st_cpu_scale,
    .kv_store = st_cpu_kv_store,
    .attention = exact_attention,
};

const st_cpu_op_table *st_cpu_ops_exact(void) { return &exact_table; }

/* ---- variants ---------------------------------------------------------------------------- */

/* What this CPU runs (the build decides which variants exist: CMake defines
 * STRIDE_CPUF_HAVE_<VARIANT> for each compiled copy of src/cpu_fast/isa/). */
static bool isa_runs(st_cpu_isa isa) {
    switch (isa) {
    case ST_CPU_ISA_GENERIC: return true;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    case ST_CPU_ISA_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpuid_ecx_bit(1, 29);
    case ST_CPU_ISA_AVX512:
        __builtin_cpu_init();
        return isa_runs(ST_CPU_ISA_AVX2) && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512dq") && cpuid_ecx_bit(7, 11);
#endif
#if defined(__aarch64__)
    case ST_CPU_ISA_NEON: return true; /* Advanced SIMD is part of AArch64 */
#endif
    default: return false;
    }
}

static const st_cpu_op_table *isa_table(st_cpu_isa isa) {
    switch (isa) {
#ifdef STRIDE_CPUF_HAVE_GENERIC
    case ST_CPU_ISA_GENERIC: return &st_cpuf_table_generic;
#endif
#ifdef STRIDE_CPUF_HAVE_AVX2
    case ST_CPU_ISA_AVX2: return &st_cpuf_table_avx2;
#endif
#ifdef STRIDE_CPUF_HAVE_AVX512
    case ST_CPU_ISA_AVX512: return &st_cpuf_table_avx512;
#endif
#ifdef STRIDE_CPUF_HAVE_NEON
    case ST_CPU_ISA_NEON: return &st_cpuf_table_neon;
#endif
    default: return NULL;
    }
}

const st_cpu_op_table *st_cpu_ops_fast(st_cpu_isa isa) {
    if (isa < 0 || isa >= ST_CPU_ISA_COUNT || !isa_runs(isa)) return NULL;
    return isa_table(isa);
}

st_cpu_isa st_cpu_fast_best_isa(void) {
    static const st_cpu_isa order[] = {ST_CPU_ISA_AVX512, ST_CPU_ISA_AVX2, ST_CPU_ISA_NEON};
    for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++)
        if (st_cpu_ops_fast(order[i])) return order[i];
    return ST_CPU_ISA_GENERIC;
}

/* ---- workspace ------------------------------------------------------------------------------ */

st_status st_cpu_ws_reserve(st_cpu_ws *ws, size_t nbytes, const char *what, st_error *err) {
    if (nbytes <= ws->cap && ws->buf) return ST_OK;
    size_t cap = nbytes < 4096 ? 4096 : nbytes;
    cap += cap / 4; /* room for the next, slightly larger call */
    cap = (cap + 63) / 64 * 64;
    void *buf = aligned_alloc(64, cap);
    if (!buf)
        return st_error_set(err, ST_ERROR_NOMEM, "%s: out of host memory for %zu bytes of scratch", what, nbytes);
    free(ws->buf);
    ws->buf = buf;
    ws->cap = cap;
    return ST_OK;
}

void st_cpu_ws_free(st_cpu_ws *ws) {
    free(ws->buf);
    ws->buf = NULL;
    ws->cap = 0;
}
