/*
 * The CPU backend's op tables: the reference ops (src/cpu/, "exact") and the fast path
 * (src/cpu_fast/isa/, one table per instruction-set variant, picked at run time by what
 * the CPU has). Internal: the backend (src/backend/backend_cpu.c) and the tests use it.
 *
 * Every op has the contract of its reference op in cpu_ops.h (shapes, strides, errors,
 * what may alias), with two differences on the fast path:
 *  - values: products sum in another order (vectors of the variant's width), and
 *    products with quantized weights quantize the activations per block of 32 to int8
 *    with an f32 scale (amax / 127) and multiply in integers, as the formats were
 *    designed for; the exponentials (softmax, SiLU, GELU) use a vector form within a few
 *    ulp of expf.
 *    The unit tests bound each difference (tests/unit/test_cpu_fast_*.c).
 *  - scratch comes from a workspace (st_cpu_ws) that the caller owns and that grows as
 *    needed, instead of an allocation per call.
 * What the reference promises about invariance holds on the fast path too, per variant:
 * every output is computed by one thread in an order that depends only on the shapes,
 * so neither the row stride (padding on or off), nor the thread count, nor the number
 * of columns computed together (M = 1 or a batch) changes a bit of it.
 */
#ifndef STRIDE_CPU_FAST_H
#define STRIDE_CPU_FAST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stride/cpu_ops.h"
#include "stride/status.h"
#include "stride/tensor.h"

/* Instruction-set variants of the fast path. */
typedef enum st_cpu_isa {
    ST_CPU_ISA_GENERIC = 0, /* plain C that the compiler vectorises for the build's baseline */
    ST_CPU_ISA_AVX2,        /* x86-64: AVX2 + FMA + F16C */
    ST_CPU_ISA_AVX512,      /* x86-64: AVX-512 F/BW/VL/DQ + VNNI, with AVX2 + FMA + F16C */
    ST_CPU_ISA_NEON,        /* AArch64 Advanced SIMD */
    ST_CPU_ISA_COUNT,
} st_cpu_isa;

/* Scratch memory of the ops, grown on demand and kept between calls (a prefill's
 * quantized activations, per-thread weight blocks, attention scores). One workspace
 * serves one op at a time. */
typedef struct st_cpu_ws {
    void *buf;
    size_t cap;
} st_cpu_ws;

/* At least nbytes of ws->buf (64-byte aligned); ST_ERROR_NOMEM naming `what` otherwise. */
st_status st_cpu_ws_reserve(st_cpu_ws *ws, size_t nbytes, const char *what, st_error *err);
void st_cpu_ws_free(st_cpu_ws *ws);

/* One path's ops, with the signatures of cpu_ops.h plus the workspace where an op needs
 * scratch. */
typedef struct st_cpu_op_table {
    const char *name; /* "exact", "avx512", "avx2", "generic", "neon" */
    st_status (*get_rows)(st_tensor *dst, const st_tensor *src, const int32_t *ids, st_error *err);
    st_status (*mul_mat)(st_cpu_ws *ws, st_tensor *dst, const st_tensor *w, const st_tensor *x, st_error *err);
    st_status (*mul_mat_id)(st_cpu_ws *ws, st_tensor *dst, const st_tensor *w, const st_tensor *x,
                            const int32_t *ids, st_error *err);
    void (*rms_norm)(st_tensor *dst, const st_tensor *x, const st_tensor *w, float eps, bool plus_one);
    void (*rope)(st_tensor *dst, const st_tensor *x, const int32_t *positions, const st_rope_params *p);
    void (*swiglu)(st_tensor *dst, const st_tensor *gate, const st_tensor *up);
    void (*geglu)(st_tensor *dst, const st_tensor *gate, const st_tensor *up);
    void (*swiglu_fused)(st_tensor *dst, const st_tensor *gu);
    void (*add)(st_tensor *dst, const st_tensor *a, const st_tensor *b);
    void (*mul)(st_tensor *dst, const st_tensor *a, const st_tensor *b);
    void (*scale)(st_tensor *dst, const st_tensor *x, float s);
    st_status (*kv_store)(st_tensor *cache, const st_tensor *x, const int32_t *positions, st_error *err);
    /* st_cpu_attention_paged's contract: table NULL for a contiguous cache */
    st_status (*attention)(st_cpu_ws *ws, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                           const st_tensor *v_cache, const int32_t *positions, const int32_t *seq,
                           const int32_t *table, int32_t max_blocks, const st_attn_params *p, st_error *err);
} st_cpu_op_table;

/* The reference ops (src/cpu/) as a table. */
const st_cpu_op_table *st_cpu_ops_exact(void);

/* The fast path's table for a variant: NULL when this build has no such variant or this
 * CPU lacks what it needs. */
const st_cpu_op_table *st_cpu_ops_fast(st_cpu_isa isa);

/* The best variant this CPU runs (always one: the generic variant runs anywhere). */
st_cpu_isa st_cpu_fast_best_isa(void);

/* The variants' tables, defined by each compiled copy of src/cpu_fast/isa/. */
extern const st_cpu_op_table st_cpuf_table_generic;
extern const st_cpu_op_table st_cpuf_table_avx2;
extern const st_cpu_op_table st_cpuf_table_avx512;
extern const st_cpu_op_table st_cpuf_table_neon;

#endif /* STRIDE_CPU_FAST_H */
