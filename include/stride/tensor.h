/*
 * stride: the tensor descriptor and the dimension convention.
 *
 * THE CONVENTION (stated once, relied on everywhere):
 *   ne[0] = K, the contiguous dimension: for a weight, its input features.
 *   ne[1] = N, the rows: for a weight, its output features.
 *   ne[2] = E, experts (MoE expert tensors only); 1 otherwise.
 *   ne[3] = 1 for every weight; activations may use it.
 *   nb[i] = byte stride of dimension i. nb[0] is the element (or block) size and
 *           nb[1] is the ROW STRIDE, which may exceed the packed row size when the
 *           layout planner pads a GEMM weight (see layout.h). Every op takes nb[] and
 *           none may assume nb[1] == row_bytes(ne[0]).
 *
 * This is ggml's order (reversed from PyTorch's): a PyTorch nn.Linear weight of shape
 * (out, in) is ne = {in, out}. The matrix product contract is ggml's mul_mat:
 *   y[n, m] = sum_k W[n, k] * x[m, k]   with W: ne = {K, N}, x: ne = {K, M}, y: ne = {N, M}.
 */
#ifndef STRIDE_TENSOR_H
#define STRIDE_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stride/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ST_MAX_DIMS 4

typedef struct st_tensor {
    st_type type;
    int64_t ne[ST_MAX_DIMS]; /* elements per dimension; unused dimensions are 1 */
    size_t nb[ST_MAX_DIMS];  /* byte strides; nb[1] is the row stride */
    void *data;              /* first element; host or device memory, per its owner */
} st_tensor;

/* Fills nb[] for the packed layout of (type, ne). False if ne[0] is not a whole number
 * of blocks or a stride overflows. */
bool st_tensor_set_packed_strides(st_tensor *t);

/* Bytes spanned by the tensor with its strides: nb[3] * ne[3] when strides nest. */
size_t st_tensor_nbytes(const st_tensor *t);

/* Packed row size in bytes (ne[0] elements of t->type). */
size_t st_tensor_row_bytes(const st_tensor *t);

/* Rows are contiguous inside and nest outward (nb[2] == nb[1]*ne[1], nb[3] == nb[2]*ne[2]),
 * with nb[1] >= the packed row size: the "contiguous rows" shape every weight has, padded
 * or not. */
bool st_tensor_has_contiguous_rows(const st_tensor *t);

int64_t st_tensor_nelements(const st_tensor *t);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_TENSOR_H */
