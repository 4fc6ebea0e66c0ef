// Block-quantized weights on the GPU, kept as stored (never padded): what the files of the
// family share. Which file runs what:
//
//   cuda_quant_gemv.cu     mul_mat, M < ST_CUDA_QGEMM_MIN_M (decode): a dequantizing
//     matrix-vector kernel, a warp a weight row at a time, reading the row once for all M
//     columns through shared memory (16-byte copies, several segments in flight: q_gemv);
//     each chunk's integers summed against x in f32, then scaled once (d sq - m sx:
//     q_dot_chunk). And mul_mat_fused, one column (a decode step's q/k/v, gate/up with its
//     gated unit, o and down with the residual add): the norm, then one launch of the same
//     walk with the epilogue in it (q_gemv_fused), instead of the composite's 3-4 kernels.
//   cuda_quant_gemm.cu     mul_mat's entry, and from M >= ST_CUDA_QGEMM_MIN_M (prefill):
//     slabs of rows dequantized to F16 in scratch, then cuBLAS (F16 x F16, f32 accumulate)
//     on each slab, x rounded to F16 once.
//   cuda_quant_get_rows.cu  get_rows: the selected rows dequantized to F32 (exact: the
//     CPU's values).
//   cuda_quant_mul_mat_id.cu  mul_mat_id: a matrix-vector product per (token, slot) on the
//     slot's expert.
//   cuda_quant_formats.cuh  the block formats all of them read.
//
// Every type stride's CPU dequantizes runs here: q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K,
// q4_K, q5_K, q6_K, q8_K (a Q4_K_M file holds q4_K, q6_K and, for rows that are not a
// multiple of 256, q5_0/q8_0: Gemma 3 270M has all four).
#ifndef STRIDE_CUDA_QUANT_CUH
#define STRIDE_CUDA_QUANT_CUH

#include "cuda/cuda_backend.h"
#include "cuda/cuda_common.cuh"
#include "cuda/cuda_quant.h"
#include "cuda/cuda_quant_formats.cuh"
#include "stride/quant.h"

// Warps (= weight rows) per block of the matrix-vector kernels (q_gemv, q_gemv_fused,
// q_gemv_id).
constexpr int QMM_WARPS = 4;
// Chunks whose loads a lane issues before it uses the first.
constexpr int QMM_UNROLL = 4;
// Threads per block of the element-parallel kernels (get_rows, dequantize).
constexpr int QMM_THREADS = 256;

// The types these kernels read: every type st_quant_supported names.
#define QMM_TYPES(X)                                                                                                \
    X(ST_TYPE_Q8_0) X(ST_TYPE_Q4_0) X(ST_TYPE_Q4_1) X(ST_TYPE_Q5_0) X(ST_TYPE_Q5_1) X(ST_TYPE_Q2_K)                 \
    X(ST_TYPE_Q3_K) X(ST_TYPE_Q4_K) X(ST_TYPE_Q5_K) X(ST_TYPE_Q6_K) X(ST_TYPE_Q8_K)

// Calls F::run<T>(args...) with T = t when t is one of them; false otherwise.
template <typename F, typename... Args> static bool q_dispatch(st_type t, Args &&...args) {
    switch (t) {
#define QMM_CASE(TY)                                                                                                \
    case TY: F::template run<TY>(args...); return true;
        QMM_TYPES(QMM_CASE)
#undef QMM_CASE
    default: return false;
    }
}

// The block alignment A of a type.
struct q_align_of {
    template <st_type T> static void run(int *a) { *a = qfmt<T>::A; }
};

// Checks what every quantized entry point needs: a type these kernels read, a shape of
// whole blocks with nb[0] = the block size, and rows (and expert slices) that start at
// the type's block alignment (the loads assume it; a packed or model-loaded weight
// always has it: buffers are 256-byte aligned and strides are whole blocks).
static inline st_status q_check_weight(const st_tensor *w, const char *op, st_error *err) {
    const st_type_traits *tr = st_type_get_traits((uint32_t)w->type);
    int a = 0;
    if (!tr || !q_dispatch<q_align_of>(w->type, &a))
        return st_error_set(err, ST_ERROR_UNSUPPORTED,
                            "%s: quantized weights of type %s do not run on the CUDA backend (it reads %s)", op,
                            st_type_name((uint32_t)w->type), st_quant_supported_list());
    ST_ASSERT(w->nb[0] == tr->block_bytes && w->ne[0] % tr->block_size == 0);
    ST_ASSERT(w->nb[1] >= (size_t)(w->ne[0] / tr->block_size) * tr->block_bytes);
    if ((uintptr_t)w->data % (uintptr_t)a != 0 || w->nb[1] % (size_t)a != 0 || (w->ne[2] > 1 && w->nb[2] % (size_t)a))
        return st_error_set(err, ST_ERROR_UNSUPPORTED,
                            "%s: rows of a %s weight must start at %d-byte boundaries on the CUDA backend (data %p, "
                            "row stride %zu bytes)",
                            op, tr->name, a, w->data, w->nb[1]);
    return ST_OK;
}

// y [N, M] = W x on the decode matvec (cuda_quant_gemv.cu), M < ST_CUDA_QGEMM_MIN_M, w
// checked by q_check_weight.
st_status st_cuda_gemv_quant(st_cuda_ctx *c, st_tensor *dst, const st_tensor *w, const st_tensor *x, st_error *err);

#endif /* STRIDE_CUDA_QUANT_CUH */
