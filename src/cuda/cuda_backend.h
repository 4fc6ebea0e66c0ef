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

/* The decode products the block-a-row kernel (cuda_gemv_rowblock.cu) may take, by epilogue:
 * a mask (st_cuda_ctx's gemv_rowblock; STRIDE_CUDA_GEMV_ROWBLOCK, so that one build measures
 * each kind of product apart, and the GPU tests run each kernel). By default the stores
 * (q/k/v) and the residual adds (o, down). tg128 on the H200 against none
 * (bench/decode-rowblock-h200.md), llama-3.2-1b / qwen3-1.7b / qwen3-8b: the stores +1.0 /
 * +0.9 / +1.5%, the adds +2.1 / +1.0 / -0.3%, the gated pairs +0.3 / -1.3 / +0.1%; the
 * default +3.3 / +2.0 / +0.6%, every kind +3.3 / +0.7 / +0.4%. */
enum {
    CUDA_ROWBLOCK_STORE = 1,
    CUDA_ROWBLOCK_ADD = 2,
    CUDA_ROWBLOCK_GLU = 4,
    CUDA_ROWBLOCK_ALL = 7,
    CUDA_ROWBLOCK_DEFAULT = CUDA_ROWBLOCK_STORE | CUDA_ROWBLOCK_ADD
};
/* Decode kernels launched early (st_cuda_ctx's early_launch, STRIDE_CUDA_PDL): the staged
 * products of the CUDA_ROWBLOCK_* kinds above, residual adds only over rows of up to
 * ROWBLOCK_EARLY_SHORT_P pieces a thread (o); those over longer rows (down) by their own
 * bit; and the one-token attention's warps kernel. By default o and the attention: tg128
 * on the H200 against the attention alone (bench/decode-o-early-h200.md, call 27-3),
 * llama-3.2-1b / qwen3-1.7b / qwen3-8b: +0.16 (its o is not this kernel's) / +1.25 /
 * -0.08%; down too lost 2-3% on the 1-2B models (call 26-1). */
enum {
    CUDA_EARLY_ATTENTION = 8,
    CUDA_EARLY_LONG_ADD = 16,
    CUDA_EARLY_ALL = CUDA_ROWBLOCK_ALL | CUDA_EARLY_ATTENTION | CUDA_EARLY_LONG_ADD,
    CUDA_EARLY_DEFAULT = CUDA_ROWBLOCK_ADD | CUDA_EARLY_ATTENTION
};

st_status st_backend_cuda_init(int index, st_backend **out, st_error *err);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_CUDA_BACKEND_H */
