/* The op table of one fast-path variant (this file is compiled once per variant, like
 * every source in src/cpu_fast/isa/): the fast ops where the variant has them, the
 * reference ops for the row lookup (a handful of rows, dequantized exactly). */
#include "cpu_fast/isa/cpuf_internal.h"

st_status CPUF_FN(st_cpuf_mul_mat)(st_cpu_ws *ws, st_tensor *dst, const st_tensor *w, const st_tensor *x,
                                   st_error *err);
st_status CPUF_FN(st_cpuf_mul_mat_id)(st_cpu_ws *ws, st_tensor *dst, const st_tensor *w, const st_tensor *x,
                                      const int32_t *ids, st_error *err);
void CPUF_FN(st_cpuf_rms_norm)(st_tensor *dst, const st_tensor *x, const st_tensor *w, float eps, bool plus_one);
void CPUF_FN(st_cpuf_rope)(st_tensor *dst, const st_tensor *x, const int32_t *positions, const st_rope_params *p);
void CPUF_FN(st_cpuf_swiglu)(st_tensor *dst, const st_tensor *gate, const st_tensor *up);
void CPUF_FN(st_cpuf_geglu)(st_tensor *dst, const st_tensor *gate, const st_tensor *up);
void CPUF_FN(st_cpuf_swiglu_fused)(st_tensor *dst, const st_tensor *gu);
void CPUF_FN(st_cpuf_add)(st_tensor *dst, const st_tensor *a, const st_tensor *b);
void CPUF_FN(st_cpuf_mul)(st_tensor *dst, const st_tensor *a, const st_tensor *b);
void CPUF_FN(st_cpuf_scale)(st_tensor *dst, const st_tensor *x, float s);
st_status CPUF_FN(st_cpuf_kv_store)(st_tensor *cache, const st_tensor *x, const int32_t *positions, st_error *err);
st_status CPUF_FN(st_cpuf_attention)(st_cpu_ws *ws, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                                     const st_tensor *v_cache, const int32_t *positions, const int32_t *seq,
                                     const int32_t *table, int32_t max_blocks, const st_attn_params *p,
                                     st_error *err);

#define CPUF_STR2(x) #x
#define CPUF_STR(x) CPUF_STR2(x)

const st_cpu_op_table CPUF_FN(st_cpuf_table) = {
    .name = CPUF_STR(CPUF_VARIANT),
    .get_rows = st_cpu_get_rows,
    .mul_mat = CPUF_FN(st_cpuf_mul_mat),
    .mul_mat_id = CPUF_FN(st_cpuf_mul_mat_id),
    .rms_norm = CPUF_FN(st_cpuf_rms_norm),
    .rope = CPUF_FN(st_cpuf_rope),
    .swiglu = CPUF_FN(st_cpuf_swiglu),
    .geglu = CPUF_FN(st_cpuf_geglu),
    .swiglu_fused = CPUF_FN(st_cpuf_swiglu_fused),
    .add = CPUF_FN(st_cpuf_add),
    .mul = CPUF_FN(st_cpuf_mul),
    .scale = CPUF_FN(st_cpuf_scale),
    .kv_store = CPUF_FN(st_cpuf_kv_store),
    .attention = CPUF_FN(st_cpuf_attention),
};
