/*
 * Block-quantized weights on the CUDA backend, kept as stored (include/stride/quant.h): the
 * entry points st_cuda_get_rows, st_cuda_mul_mat, st_cuda_mul_mat_id and the fused decode
 * products hand quantized weights to. A type these kernels do not read, or rows off the
 * type's block alignment, is ST_ERROR_UNSUPPORTED. For the backend's .cu files (C++
 * linkage, as cuda_common.cuh); cuda_quant.cuh says which file runs what.
 */
#ifndef STRIDE_CUDA_QUANT_H
#define STRIDE_CUDA_QUANT_H

#include "backend/fused.h"
#include "stride/types.h"

/* Whether t is a block-quantized type (stride/quant.h). */
static inline bool cuda_is_quantized(st_type t) {
    const st_type_traits *tr = st_type_get_traits((uint32_t)t);
    return tr != NULL && tr->is_quantized;
}

/* cuda_quant_get_rows.cu: dst F32 [K, M] = rows ids [M] of src [K, V] */
st_status st_cuda_get_rows_quant(st_backend *b, st_tensor *dst, const st_tensor *src, const st_tensor *ids,
                                 st_error *err);
/* cuda_quant_gemm.cu: dst F32 [N, M...] = w [K, N] x F32 [K, M...] (the decode matvec below
 * ST_CUDA_QGEMM_MIN_M columns, dequantize + GEMM from there) */
st_status st_cuda_mul_mat_quant(st_backend *b, st_tensor *dst, const st_tensor *w, const st_tensor *x,
                                st_error *err);
/* cuda_quant_gemv.cu: a decode step's fused product on quantized weights in one launch after
 * its norm; *ran false (and ST_OK) when it is not one this path runs (the caller runs the
 * composite). */
st_status st_cuda_mul_mat_fused_quant(st_backend *b, const st_fused_mul_mat *op, bool *ran, st_error *err);
/* cuda_quant_mul_mat_id.cu: dst F32 [N, n_used, M] = the slots' experts of w [K, N, E]
 * times x F32 [K, M], [K, 1, M] (shared by a token's slots) or [K, n_used, M] */
st_status st_cuda_mul_mat_id_quant(st_backend *b, st_tensor *dst, const st_tensor *w, const st_tensor *x,
                                   const st_tensor *ids, st_error *err);

#endif /* STRIDE_CUDA_QUANT_H */
