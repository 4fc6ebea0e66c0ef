/* The dispatch over quantized types, and the check that a file's weight type is usable. */
#include "quant/quant_internal.h"

typedef void (*dequantize_row_fn)(const void *src, float *dst, int64_t n);

static dequantize_row_fn dequantizer(st_type type) {
    switch (type) {
    case ST_TYPE_Q8_0: return st_quant_dequantize_row_q8_0;
    case ST_TYPE_Q4_0: return st_quant_dequantize_row_q4_0;
    case ST_TYPE_Q4_1: return st_quant_dequantize_row_q4_1;
    case ST_TYPE_Q5_0: return st_quant_dequantize_row_q5_0;
    case ST_TYPE_Q5_1: return st_quant_dequantize_row_q5_1;
    case ST_TYPE_Q2_K: return st_quant_dequantize_row_q2_k;
    case ST_TYPE_Q3_K: return st_quant_dequantize_row_q3_k;
    case ST_TYPE_Q4_K: return st_quant_dequantize_row_q4_k;
    case ST_TYPE_Q5_K: return st_quant_dequantize_row_q5_k;
    case ST_TYPE_Q6_K: return st_quant_dequantize_row_q6_k;
    case ST_TYPE_Q8_K: return st_quant_dequantize_row_q8_k;
    default: return NULL;
    }
}

bool st_quant_supported(st_type type) { return dequantizer(type) != NULL; }

const char *st_quant_supported_list(void) {
    return "q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K, q8_K";
}

st_status st_quant_check_weight_type(st_type type, const char *what, st_error *err) {
    const st_type_traits *tr = st_type_get_traits((uint32_t)type);
    if (tr && (tr->is_float || st_quant_supported(type))) return ST_OK;
    if (tr && tr->is_quantized)
        return st_error_set(err, ST_ERROR_UNSUPPORTED,
                            "%s: weights of type %s are not supported (quantized types stride reads: %s)",
                            what, tr->name, st_quant_supported_list());
    return st_error_set(err, ST_ERROR_UNSUPPORTED,
                        "%s: type %s cannot be a weight (expected f32, f16, bf16 or a quantized type: %s)",
                        what, st_type_name((uint32_t)type), st_quant_supported_list());
}

void st_quant_dequantize_row(st_type type, const void *src, float *dst, int64_t n) {
    dequantize_row_fn fn = dequantizer(type);
    ST_ASSERT(fn != NULL); /* callers check st_quant_supported: types come from files */
    fn(src, dst, n);
}
