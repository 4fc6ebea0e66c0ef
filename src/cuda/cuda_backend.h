/* The CUDA backend: device memory in the planned (padded) layout and every op of the
 * backend table on one stream. Called from src/backend/backend.c in builds with
 * STRIDE_HAVE_CUDA. */
#ifndef STRIDE_CUDA_BACKEND_H
#define STRIDE_CUDA_BACKEND_H

#include "stride/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the products switch from the own matrix-vector kernels to cuBLAS, in columns
 * (tokens), by measurement (bench/gemv-gemm-threshold-h200.md):
 *   float weights: cuBLAS from 2 columns (summed over a layer's products, cuBLAS is
 *     1.2-2x faster at M = 2 on llama-3.2-1b and qwen3-8b shapes, 6x at M = 8; only a
 *     single 8 MB matrix keeps the GEMV ahead up to M = 5);
 *   quantized weights (dequantize + GEMM) and MoE prompts grouped by expert (which read
 *     the expert ids on the host): from 8, not re-measured. */
#define ST_CUDA_GEMM_MIN_M 2
#define ST_CUDA_QGEMM_MIN_M 8
#define ST_CUDA_MOE_GROUPED_MIN_M 8

st_status st_backend_cuda_init(int index, st_backend **out, st_error *err);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_CUDA_BACKEND_H */
