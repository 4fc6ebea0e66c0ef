/* The CUDA backend: device memory in the planned (padded) layout and every op of the
 * backend table on one stream. Called from src/backend/backend.c in builds with
 * STRIDE_HAVE_CUDA. */
#ifndef STRIDE_CUDA_BACKEND_H
#define STRIDE_CUDA_BACKEND_H

#include "stride/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* mul_mat runs cuBLAS for M >= this many columns (tokens) and the own matrix-vector
 * kernel below it, which streams the weight once for all M columns. */
#define ST_CUDA_GEMM_MIN_M 8

st_status st_backend_cuda_init(int index, st_backend **out, st_error *err);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_CUDA_BACKEND_H */
