// Mixture of experts: the product over selected experts (mul_mat_id), the router's top-k
// choice and the weighted combination of the experts' outputs.
//
// mul_mat_id, decode (fewer than ST_CUDA_MOE_GROUPED_MIN_M tokens, or while recording a graph):
// the kernel reads the expert ids from device memory, so the decode path has no host
// synchronisation: block (row group, slot) looks its expert up (cuda_moe.cuh, shared with
// the quantized experts' kernel) and runs the matrix-vector product over that expert's
// slice W + e * nb[2] at the row stride nb[1].
//
// mul_mat_id, prefill: grouped by expert. The ids come to the host (one synchronisation
// per call, as a prompt may have), the slots are laid out by expert in batches of experts
// with similar slot counts (cuda_moe_group.h), their x rows gathered into one packed
// operand in the weight's type, and each batch runs one batched cuBLAS GEMM over its
// experts' slices, at the row stride nb[1] as the leading dimension; the results are
// scattered back to their slots. Each expert's weights are then read once per call
// instead of once per slot, and a prompt's experts run in a few launches, not one each.
#include <math.h>
#include <stdlib.h>

#include "core/moe_route.h"
#include "cuda/cuda_gemv.cuh"
#include "cuda/cuda_moe.cuh"
#include "cuda/cuda_moe_group.h"
#include "cuda/cuda_quant.h"

template <st_type T>
__device__ void mul_mat_id_impl(const char *__restrict__ w, int64_t w_nb1, int64_t w_nb2, int64_t K, int64_t N,
                                int64_t n_expert, bool w_vec, st_cuda_view x, int x_mode, bool x_vec,
                                st_cuda_view y, const int32_t *__restrict__ ids, int64_t ids_nb1,
                                st_cuda_op_error *op_err) {
    const int64_t n = (int64_t)blockIdx.x * CUDA_GEMV_WARPS + threadIdx.x / ST_GPU_WARP_SIZE;
    const int lane = threadIdx.x % ST_GPU_WARP_SIZE;
    moe_for_each_slot(y, ids, ids_nb1, n_expert, op_err, [&](int64_t j, int64_t m, int32_t e) {
        if (n >= N) return;
        const float *xrow = moe_slot_x(x, x_mode, j, m), *xs[CUDA_GEMV_MAX_COLS];
#pragma unroll
        for (int c = 0; c < CUDA_GEMV_MAX_COLS; c++) xs[c] = xrow;
        float acc[CUDA_GEMV_MAX_COLS];
        cuda_gemv_row<T, false, 1>(w + (int64_t)e * w_nb2 + n * w_nb1, K, w_vec, xs, 1, x_vec, acc);
        if (lane == 0) moe_slot_y(y, j, m)[n] = acc[0];
    });
}

#define MUL_MAT_ID_KERNEL(name, T)                                                                                 \
    __global__ void __launch_bounds__(CUDA_GEMV_WARPS *ST_GPU_WARP_SIZE)                                           \
        name(const char *w, int64_t nb1, int64_t nb2, int64_t K, int64_t N, int64_t E, bool w_vec, st_cuda_view x, \
             int x_mode, bool x_vec, st_cuda_view y, const int32_t *__restrict__ ids, int64_t ids_nb1,             \
             st_cuda_op_error *e) {                                                                                \
        mul_mat_id_impl<T>(w, nb1, nb2, K, N, E, w_vec, x, x_mode, x_vec, y, ids, ids_nb1, e);                    \
    }
MUL_MAT_ID_KERNEL(mul_mat_id_f32, ST_TYPE_F32)
MUL_MAT_ID_KERNEL(mul_mat_id_f16, ST_TYPE_F16)
MUL_MAT_ID_KERNEL(mul_mat_id_bf16, ST_TYPE_BF16)

// ---- prefill: slots grouped by expert ----------------------------------------------------

// packed[q * K + k] = x row of slot slot_of_col[q] in T, zeros where it is -1 (padding):
// the batched GEMMs' operand [K, n_cols] (cuda_moe_group.h's layout).
template <st_type T>
__global__ void moe_gather_rows(char *__restrict__ packed, st_cuda_view x, int x_mode, int64_t n_used,
                                const int32_t *__restrict__ slot_of_col, int64_t n_cols) {
    const int64_t K = x.ne0;
    for (int64_t q = blockIdx.y; q < n_cols; q += gridDim.y) {
        const int64_t s = slot_of_col[q];
        const float *row = s >= 0 ? moe_slot_x(x, x_mode, s % n_used, s / n_used) : (const float *)NULL;
        for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < K; k += (int64_t)gridDim.x * blockDim.x)
            cuda_store_as<T>(packed, q * K + k, row ? row[k] : 0.0f);
    }
}

// y[:, j, m] of slot slot_of_col[q] = C[q * N .. q * N + N), or with a gated unit (GLU:
// 1 SwiGLU, 2 GeGLU) act(C) * C_up of the up product's columns, as the unit's kernel
// forms it (cuda_glu_one); padding columns are dropped.
template <int GLU>
__global__ void moe_scatter_rows(st_cuda_view y, const float *__restrict__ C, const float *__restrict__ C_up,
                                 const int32_t *__restrict__ slot_of_col, int64_t n_cols) {
    const int64_t N = y.ne0, n_used = y.ne1;
    for (int64_t q = blockIdx.y; q < n_cols; q += gridDim.y) {
        const int64_t s = slot_of_col[q];
        if (s < 0) continue;
        float *row = moe_slot_y(y, s % n_used, s / n_used);
        for (int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; n < N; n += (int64_t)gridDim.x * blockDim.x)
            row[n] = GLU ? cuda_glu_one<GLU == 2>(C[q * N + n], C_up[q * N + n]) : C[q * N + n];
    }
}

// The experts' down products weighed and summed, a token's slots read from their columns
// (col_of_slot [n_used, M]): out[:, m] = sum over j in slot order of wts[j, m] * C[:, col],
// with moe_combine's roundings (a product, then a sum), or with RESIDUAL dst the residual,
// dst[:, m] += that sum with the add's: the composite's bits (mul_mat_id, moe_combine, add).
template <bool RESIDUAL>
__global__ void moe_combine_cols(st_cuda_view dst, const float *__restrict__ C, const int32_t *__restrict__ col_of_slot,
                                 st_cuda_view wts, int64_t N, int64_t n_used, int64_t M) {
    for (int64_t m = blockIdx.y; m < M; m += gridDim.y) {
        const float *w = (const float *)(wts.data + m * wts.nb1);
        const int32_t *col = col_of_slot + m * n_used;
        float *y = (float *)(dst.data + m * dst.nb1);
        for (int64_t d = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; d < N; d += (int64_t)gridDim.x * blockDim.x) {
            float acc = 0.0f;
            for (int64_t j = 0; j < n_used; j++) acc = __fadd_rn(acc, __fmul_rn(w[j], C[(int64_t)col[j] * N + d]));
            y[d] = RESIDUAL ? __fadd_rn(y[d], acc) : acc;
        }
    }
}

// Whether the grouped path takes the call: cuBLAS's int dimensions, rows at a whole
// number of elements.
static bool moe_grouped_supported(const st_tensor *w, int64_t n_slots) {
    const size_t ts = w->nb[0];
    return w->nb[1] % ts == 0 && w->nb[2] % ts == 0 && (uintptr_t)w->data % ts == 0 && cuda_fits_int(w->ne[0]) &&
           cuda_fits_int(w->ne[1]) && cuda_fits_int(n_slots) && cuda_fits_int((int64_t)(w->nb[1] / ts)) &&
           n_slots <= INT32_MAX && w->ne[0] > 0;
}

// dst [N, n_used, M] = mul_mat_id(w[0], x, ids), or with a gated unit (glu: 1 SwiGLU, 2
// GeGLU; n_w = 2, w[1] the up experts of w[0]'s type and shape) the unit of the two
// products. The ids come to the host and are planned (cuda_moe_group.h: experts in
// batches of similar slot counts, each padded to its batch's widest); one upload carries
// the column map and each expert's three GEMM pointers a weight; the x rows are gathered
// once into the padded operand B [K, n_cols] in the weight's type; each batch runs one
// batched GEMM a weight, member i C_w[:, its columns] = W_w,e^T-as-stored B[:, its
// columns] (cuda_matmul.cu's form, at the row stride nb[1] as the leading dimension), so
// each expert's weights are read once a call and the experts of a batch share a launch;
// the slots' columns are scattered back (through the unit). With down (an experts' down
// product, st_fused_moe DOWN; n_w = 1, glu 0) dst is not written: each token's slots are
// weighed and summed from their columns into down's out, or added to its residual
// (moe_combine_cols).
static st_status moe_grouped(st_cuda_ctx *c, st_tensor *dst, const st_tensor *const *w, int n_w, int glu,
                             const st_fused_moe *down, const st_tensor *x, int x_mode, const st_tensor *ids,
                             st_error *err) {
    const size_t ts = w[0]->nb[0];
    const int64_t K = w[0]->ne[0], N = w[0]->ne[1], E = w[0]->ne[2], n_used = dst->ne[1], M = dst->ne[2];
    const int64_t ids_nb1 = (int64_t)ids->nb[1];
    const size_t ids_bytes = (size_t)((M - 1) * ids_nb1) + (size_t)n_used * sizeof(int32_t);
    int32_t *h_ids = (int32_t *)malloc(ids_bytes);
    st_moe_group_plan plan;
    memset(&plan, 0, sizeof(plan)); // (freed on every way out)
    st_status s = ST_OK;
    st_gpu_error_t rc;
    if (!h_ids) {
        s = st_error_set(err, ST_ERROR_NOMEM, "out of host memory reading %lld expert ids", (long long)(n_used * M));
        goto done;
    }
    rc = st_gpu_memcpy_async(h_ids, ids->data, ids_bytes, st_gpu_memcpy_device_to_host, c->stream);
    if (rc == st_gpu_success) rc = st_gpu_stream_synchronize(c->stream);
    if (rc != st_gpu_success) {
        s = st_error_set(err, ST_ERROR_DEVICE, "mul_mat_id: reading the expert ids: %s", st_gpu_get_error_string(rc));
        goto done;
    }
    if ((s = st_moe_group_plan_build(&plan, h_ids, ids_nb1, n_used, M, E, c->tune.moe_group_waste, err)) != ST_OK)
        goto done;
    {
        // scratch: B [K, n_cols] in the weight's type, C [N, n_cols] f32 a weight, the
        // column map [n_cols] i32 (with down, then each slot's column [n_used, M] i32),
        // then the pointers: A, B and C of each (weight, expert), the experts in batch order
        const int64_t n_cols = plan.n_cols, n_experts = plan.n_experts, n_ptr = n_w * n_experts;
        const size_t b_bytes = ((size_t)K * (size_t)n_cols * ts + 255) / 256 * 256;
        const size_t c_bytes = ((size_t)N * (size_t)n_cols * sizeof(float) + 255) / 256 * 256;
        const size_t cols_bytes = down ? (size_t)(n_used * M) * sizeof(int32_t) : 0;
        const size_t map_bytes = ((size_t)n_cols * sizeof(int32_t) + cols_bytes + 255) / 256 * 256;
        const size_t upload_bytes = map_bytes + 3 * (size_t)n_ptr * sizeof(void *);
        char *scratch = NULL;
        if ((s = st_cuda_scratch(c, b_bytes + n_w * c_bytes + upload_bytes, (void **)&scratch, err)) != ST_OK)
            goto done;
        char *B = scratch;
        float *C = (float *)(scratch + b_bytes), *C_up = (float *)(scratch + b_bytes + (n_w - 1) * c_bytes);
        char *d_upload = scratch + b_bytes + n_w * c_bytes;
        // the upload's host side: the context's, whose last copy ended before the wait above
        if (upload_bytes > c->moe_upload_bytes) {
            char *grown = (char *)realloc(c->moe_upload, upload_bytes);
            if (!grown) {
                s = st_error_set(err, ST_ERROR_NOMEM, "out of host memory planning %lld expert columns",
                                 (long long)n_cols);
                goto done;
            }
            c->moe_upload = grown, c->moe_upload_bytes = upload_bytes;
        }
        char *h_upload = c->moe_upload;
        memcpy(h_upload, plan.slot_of_col, (size_t)n_cols * sizeof(int32_t));
        if (down) {
            int32_t *col_of_slot = (int32_t *)h_upload + n_cols;
            for (int64_t q = 0; q < n_cols; q++)
                if (plan.slot_of_col[q] >= 0) col_of_slot[plan.slot_of_col[q]] = (int32_t)q;
        }
        const void **a_ptr = (const void **)(h_upload + map_bytes), **b_ptr = a_ptr + n_ptr;
        void **c_ptr = (void **)(b_ptr + n_ptr);
        for (int v = 0; v < n_w; v++)
            for (int64_t i = 0; i < n_experts; i++) {
                const int64_t p = v * n_experts + i;
                a_ptr[p] = (const char *)w[v]->data + plan.expert_of[i] * (int64_t)w[v]->nb[2];
                b_ptr[p] = B + plan.col0[i] * K * (int64_t)ts;
                c_ptr[p] = (char *)C + v * c_bytes + plan.col0[i] * N * (int64_t)sizeof(float);
            }
        rc = st_gpu_memcpy_async(d_upload, h_upload, upload_bytes, st_gpu_memcpy_host_to_device, c->stream);
        if (rc != st_gpu_success) {
            s = st_error_set(err, ST_ERROR_DEVICE, "mul_mat_id: uploading the expert plan: %s",
                             st_gpu_get_error_string(rc));
            goto done;
        }
        const int32_t *d_map = (const int32_t *)d_upload;
        const dim3 gather_grid = cuda_rows_grid(K, n_cols);
        const st_cuda_view xv = cuda_view(x);
        switch (w[0]->type) {
        case ST_TYPE_F32:
            moe_gather_rows<ST_TYPE_F32><<<gather_grid, ST_CUDA_ROWS_THREADS, 0, c->stream>>>(B, xv, x_mode, n_used,
                                                                                            d_map, n_cols);
            break;
        case ST_TYPE_F16:
            moe_gather_rows<ST_TYPE_F16><<<gather_grid, ST_CUDA_ROWS_THREADS, 0, c->stream>>>(B, xv, x_mode, n_used,
                                                                                            d_map, n_cols);
            break;
        default:
            moe_gather_rows<ST_TYPE_BF16><<<gather_grid, ST_CUDA_ROWS_THREADS, 0, c->stream>>>(B, xv, x_mode, n_used,
                                                                                             d_map, n_cols);
            break;
        }
        if ((rc = st_gpu_get_last_error()) != st_gpu_success) {
            s = st_error_set(err, ST_ERROR_DEVICE, "mul_mat_id: gather: %s", st_gpu_get_error_string(rc));
            goto done;
        }
#if ST_GPU_HAVE_BLAS
        const void **d_a = (const void **)(d_upload + map_bytes), **d_b = d_a + n_ptr;
        void **d_c = (void **)(d_b + n_ptr);
        const float alpha = 1.0f, beta = 0.0f;
        const st_gpu_blas_data_t t = cuda_blas_type(w[0]->type);
        for (int64_t b = 0; b < plan.n_batches; b++)
            for (int v = 0; v < n_w; v++) {
                const int64_t count = plan.batch_first[b + 1] - plan.batch_first[b];
                const int64_t i0 = v * n_experts + plan.batch_first[b];
                const st_gpu_blas_status_t bs = st_gpu_blas_gemm_batched_ex(
                    c->blas, st_gpu_blas_op_t, st_gpu_blas_op_n, (int)N, (int)plan.batch_cols[b], (int)K, &alpha,
                    d_a + i0, t, (int)(w[v]->nb[1] / ts), d_b + i0, t, (int)K, &beta, d_c + i0, st_gpu_blas_r_32f,
                    (int)N, (int)count, st_gpu_blas_compute_32f, st_gpu_blas_gemm_default);
                if (bs != st_gpu_blas_success) {
                    s = st_error_set(err, ST_ERROR_DEVICE, "mul_mat_id: GEMMs of %lld experts of %lld slots: %s",
                                     (long long)count, (long long)plan.batch_cols[b],
                                     st_gpu_blas_get_status_string(bs));
                    goto done;
                }
            }
#else
        s = st_error_set(err, ST_ERROR_UNSUPPORTED, ST_GPU_NO_BLAS_MESSAGE);
        goto done;
#endif
        const st_cuda_view yv = cuda_view(dst);
        if (down) { // each token's slots weighed and summed from their columns
            const dim3 cg = cuda_rows_grid(N, M);
            const int32_t *cols = d_map + n_cols;
            const st_cuda_view wv = cuda_view(down->wts);
            if (down->residual)
                moe_combine_cols<true><<<cg, ST_CUDA_ROWS_THREADS, 0, c->stream>>>(cuda_view(down->residual), C, cols,
                                                                                  wv, N, n_used, M);
            else
                moe_combine_cols<false><<<cg, ST_CUDA_ROWS_THREADS, 0, c->stream>>>(cuda_view(down->out), C, cols, wv,
                                                                                   N, n_used, M);
        } else { // each slot's column to its row of dst (through the unit)
            const dim3 sg = cuda_rows_grid(N, n_cols);
            if (glu == 0) moe_scatter_rows<0><<<sg, ST_CUDA_ROWS_THREADS, 0, c->stream>>>(yv, C, C, d_map, n_cols);
            else if (glu == 1)
                moe_scatter_rows<1><<<sg, ST_CUDA_ROWS_THREADS, 0, c->stream>>>(yv, C, C_up, d_map, n_cols);
            else moe_scatter_rows<2><<<sg, ST_CUDA_ROWS_THREADS, 0, c->stream>>>(yv, C, C_up, d_map, n_cols);
        }
        if ((rc = st_gpu_get_last_error()) != st_gpu_success)
            s = st_error_set(err, ST_ERROR_DEVICE, "mul_mat_id: %s: %s", down ? "weighted sum" : "scatter",
                             st_gpu_get_error_string(rc));
    }
done:
    free(h_ids);
    st_moe_group_plan_free(&plan);
    return s;
}

st_status st_cuda_mul_mat_id(st_backend *b, st_tensor *dst, const st_tensor *w, const st_tensor *x,
                             const st_tensor *ids, st_error *err) {
    // w [K, N, E] F32/F16/BF16, any nb[1], nb[2]; the other operands: cuda_moe.cuh
    if (cuda_is_quantized(w->type)) return st_cuda_mul_mat_id_quant(b, dst, w, x, ids, err); // cuda_quant_mul_mat_id.cu
    st_cuda_ctx *c = cuda_ctx(b);
    ST_ASSERT(cuda_is_float_weight(w));
    const int x_mode = moe_check_operands(dst, w, x, ids);
    const int64_t K = w->ne[0], N = w->ne[1], E = w->ne[2], n_used = dst->ne[1], M = dst->ne[2];
    const int64_t n_slots = n_used * M;
    if (N == 0 || n_slots == 0) return ST_OK;
    if (M >= ST_CUDA_MOE_GROUPED_MIN_M && !c->capturing && moe_grouped_supported(w, n_slots))
        return moe_grouped(c, dst, &w, 1, 0, NULL, x, x_mode, ids, err);

    const bool w_vec = cuda_aligned16(w->data) && w->nb[1] % 16 == 0 && w->nb[2] % 16 == 0;
    const bool x_vec = cuda_aligned16(x->data) && x->nb[1] % 16 == 0 && x->nb[2] % 16 == 0;
    const dim3 grid(cuda_blocks(N, CUDA_GEMV_WARPS), cuda_grid_y(n_slots));
    const dim3 block(CUDA_GEMV_WARPS * ST_GPU_WARP_SIZE);
    const char *wd = (const char *)w->data;
    const int64_t nb1 = (int64_t)w->nb[1], nb2 = (int64_t)w->nb[2], ids_nb1 = (int64_t)ids->nb[1];
    const st_cuda_view xv = cuda_view(x), yv = cuda_view(dst);
    const int32_t *id = (const int32_t *)ids->data;
    switch (w->type) {
    case ST_TYPE_F32:
        mul_mat_id_f32<<<grid, block, 0, c->stream>>>(wd, nb1, nb2, K, N, E, w_vec, xv, x_mode, x_vec, yv, id, ids_nb1,
                                                      c->d_op_error);
        break;
    case ST_TYPE_F16:
        mul_mat_id_f16<<<grid, block, 0, c->stream>>>(wd, nb1, nb2, K, N, E, w_vec, xv, x_mode, x_vec, yv, id, ids_nb1,
                                                      c->d_op_error);
        break;
    default:
        mul_mat_id_bf16<<<grid, block, 0, c->stream>>>(wd, nb1, nb2, K, N, E, w_vec, xv, x_mode, x_vec, yv, id,
                                                       ids_nb1, c->d_op_error);
        break;
    }
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}

// ---- decode: the experts' unit and down product fused (backend/fused.h st_fused_moe) -------
//
// One token's products are cuda_moe_rowblock.cu's where it takes them (a block a row, as
// the dense decode products read); the kernels below take the others: a warp a (row,
// slot), with the composite's bits.

// out[n, j, m] = act(W_gate[e] x) * (W_up[e] x): a warp a (row n, slot), both rows read by
// it; each product and the unit as mul_mat_id and the unit's kernel form them (the
// composite's bits where gate and up are aligned alike, as a layer's are).
template <st_type T, bool GELU>
__device__ void moe_glu_impl(const char *__restrict__ wg, const char *__restrict__ wu, int64_t g_nb1, int64_t g_nb2,
                             int64_t u_nb1, int64_t u_nb2, int64_t K, int64_t N, int64_t n_expert, bool w_vec,
                             st_cuda_view x, int x_mode, bool x_vec, st_cuda_view out, const int32_t *__restrict__ ids,
                             int64_t ids_nb1, st_cuda_op_error *op_err) {
    const int64_t n = (int64_t)blockIdx.x * CUDA_GEMV_WARPS + threadIdx.x / ST_GPU_WARP_SIZE;
    const int lane = threadIdx.x % ST_GPU_WARP_SIZE;
    moe_for_each_slot(out, ids, ids_nb1, n_expert, op_err, [&](int64_t j, int64_t m, int32_t e) {
        if (n >= N) return;
        const float *xs[1] = {moe_slot_x(x, x_mode, j, m)};
        float g[1], u[1];
        cuda_gemv_row<T, false, 1>(wg + (int64_t)e * g_nb2 + n * g_nb1, K, w_vec, xs, 1, x_vec, g);
        cuda_gemv_row<T, false, 1>(wu + (int64_t)e * u_nb2 + n * u_nb1, K, w_vec, xs, 1, x_vec, u);
        if (lane == 0) moe_slot_y(out, j, m)[n] = cuda_glu_one<GELU>(g[0], u[0]);
    });
}

template <st_type T, bool GELU>
__global__ void __launch_bounds__(CUDA_GEMV_WARPS *ST_GPU_WARP_SIZE)
    moe_glu_kernel(const char *wg, const char *wu, int64_t g_nb1, int64_t g_nb2, int64_t u_nb1, int64_t u_nb2,
                   int64_t K, int64_t N, int64_t E, bool w_vec, st_cuda_view x, int x_mode, bool x_vec,
                   st_cuda_view out, const int32_t *__restrict__ ids, int64_t ids_nb1, st_cuda_op_error *e) {
    moe_glu_impl<T, GELU>(wg, wu, g_nb1, g_nb2, u_nb1, u_nb2, K, N, E, w_vec, x, x_mode, x_vec, out, ids, ids_nb1, e);
}

// The most slots a token of the fused down product (a block's warps take them).
#define MOE_DOWN_MAX_USED 64

// out[d, m] = sum over j in order of wts[j, m] * (W_down[e_j] row d . x[:, j, m]), or with
// RESIDUAL res[d, m] += that sum instead: a block a (group of rows, token), its warps the
// (row, slot) pairs, rows_per_block = max(1, CUDA_GEMV_WARPS / n_used) of them; each product
// as mul_mat_id forms it, the sum with moe_combine's roundings (a product, then a sum, in
// slot order) and the add's: the composite's bits. A bad expert id is recorded and its
// term left out.
template <st_type T, bool RESIDUAL>
__global__ void __launch_bounds__(CUDA_GEMV_WARPS *ST_GPU_WARP_SIZE)
    moe_down_kernel(const char *__restrict__ w, int64_t nb1, int64_t nb2, int64_t K, int64_t D, int64_t n_expert,
                    bool w_vec, st_cuda_view x, bool x_vec, st_cuda_view wts, st_cuda_view out, st_cuda_view res,
                    const int32_t *__restrict__ ids, int64_t ids_nb1, int rows_per_block, st_cuda_op_error *op_err) {
    __shared__ float part[MOE_DOWN_MAX_USED > CUDA_GEMV_WARPS ? MOE_DOWN_MAX_USED : CUDA_GEMV_WARPS];
    const int64_t n_used = x.ne1, M = x.ne2;
    const int warp = threadIdx.x / ST_GPU_WARP_SIZE, lane = threadIdx.x % ST_GPU_WARP_SIZE;
    const int n_tasks = rows_per_block * (int)n_used;
    const int64_t d0 = (int64_t)blockIdx.x * rows_per_block;
    for (int64_t m = blockIdx.y; m < M; m += gridDim.y) {
        const int32_t *id = (const int32_t *)((const char *)ids + m * ids_nb1);
        for (int t = warp; t < n_tasks; t += CUDA_GEMV_WARPS) {
            const int64_t d = d0 + t / n_used, j = t % n_used;
            const int32_t e = id[j];
            float acc[1] = {0.0f};
            if (e < 0 || e >= n_expert) {
                if (blockIdx.x == 0 && lane == 0)
                    cuda_report_op_error(op_err, ST_CUDA_OP_ERROR_EXPERT_ID, e, m * n_used + j, n_expert);
            } else if (d < D) {
                const float *xs[1] = {(const float *)(x.data + j * x.nb1 + m * x.nb2)};
                cuda_gemv_row<T, false, 1>(w + (int64_t)e * nb2 + d * nb1, K, w_vec, xs, 1, x_vec, acc);
            }
            if (lane == 0) part[t] = acc[0];
        }
        __syncthreads();
        if ((int)threadIdx.x < rows_per_block && d0 + threadIdx.x < D) {
            const float *wt = (const float *)(wts.data + m * wts.nb1);
            float sum = 0.0f;
            for (int64_t j = 0; j < n_used; j++) sum = __fadd_rn(sum, __fmul_rn(wt[j], part[threadIdx.x * n_used + j]));
            if (RESIDUAL) {
                float *r = (float *)(res.data + m * res.nb1) + d0 + threadIdx.x;
                *r = __fadd_rn(*r, sum);
            } else {
                ((float *)(out.data + m * out.nb1))[d0 + threadIdx.x] = sum;
            }
        }
        __syncthreads(); // part is free for the next token
    }
}

// Whether a down op's operands have the shapes its weighted sum takes: x [F, n_used, M] a
// row a slot, out [D, M], wts [n_used, >= M], the residual (if any) [D, M], all F32 rows.
static bool moe_down_shapes_ok(const st_fused_moe *op) {
    const st_tensor *w = op->w[0], *r = op->residual;
    const int64_t n_used = op->y[0]->ne[1], M = op->y[0]->ne[2];
    return op->x->ne[1] == n_used && op->x->ne[2] == M && cuda_is_f32_rows(op->out) && op->out->ne[0] == w->ne[1] &&
           op->out->ne[1] == M && cuda_is_f32_rows(op->wts) && op->wts->ne[0] == n_used && op->wts->ne[1] >= M &&
           (!r || (cuda_is_f32_rows(r) && r->ne[0] == w->ne[1] && r->ne[1] == M && r->ne[2] == 1 && r->ne[3] == 1));
}

// Whether the fused kernels take op: float experts of one type (F32/F16/BF16), the decode
// path's slots, the shapes mul_mat_id and moe_combine take.
static bool moe_fused_takes(const st_cuda_ctx *c, const st_fused_moe *op) {
    const st_tensor *w = op->w[0];
    if (!cuda_is_float_weight(w)) return false;
    if (op->kind == ST_FUSED_MOE_GLU && (op->w[1]->type != w->type || op->w[1]->ne[0] != w->ne[0] ||
                                         op->w[1]->ne[1] != w->ne[1] || op->w[1]->ne[2] != w->ne[2]))
        return false;
    const int64_t n_used = op->y[0]->ne[1], M = op->y[0]->ne[2];
    if (M >= ST_CUDA_MOE_GROUPED_MIN_M && !c->capturing && moe_grouped_supported(w, n_used * M)) return false;
    if (op->kind == ST_FUSED_MOE_DOWN) return n_used <= MOE_DOWN_MAX_USED && moe_down_shapes_ok(op);
    return cuda_is_f32_rows(op->out) && op->out->ne[0] == w->ne[1] && op->out->ne[1] == n_used && op->out->ne[2] == M;
}

// Whether a prompt's gated unit runs grouped (moe_grouped: one plan, one gather, the gate
// and up GEMMs, the unit formed in the scatter) instead of as the composite's two grouped
// products and the unit's kernel: float experts of one type and shape, as many tokens as
// the grouped path takes, outside a recording.
static bool moe_grouped_unit_takes(const st_cuda_ctx *c, const st_fused_moe *op) {
    const st_tensor *g = op->w[0], *u = op->w[1];
    const int64_t n_slots = op->out->ne[1] * op->out->ne[2];
    return op->kind == ST_FUSED_MOE_GLU && cuda_is_float_weight(g) && u->type == g->type && u->ne[0] == g->ne[0] &&
           u->ne[1] == g->ne[1] && u->ne[2] == g->ne[2] && op->out->ne[2] >= ST_CUDA_MOE_GROUPED_MIN_M &&
           !c->capturing && moe_grouped_supported(g, n_slots) && moe_grouped_supported(u, n_slots);
}

// Whether a prompt's down product runs grouped with its weighted sum (moe_grouped with
// down: the sum read from the GEMMs' columns, y never written) instead of as the
// composite's grouped product, moe_combine and add: float experts, as many tokens as the
// grouped path takes (a slot a token at least), outside a recording, the sum's shapes.
static bool moe_grouped_down_takes(const st_cuda_ctx *c, const st_fused_moe *op) {
    const st_tensor *w = op->w[0];
    const int64_t M = op->y[0]->ne[2];
    return op->kind == ST_FUSED_MOE_DOWN && cuda_is_float_weight(w) && M >= ST_CUDA_MOE_GROUPED_MIN_M &&
           op->y[0]->ne[1] >= 1 && !c->capturing && moe_grouped_supported(w, op->y[0]->ne[1] * M) &&
           moe_down_shapes_ok(op);
}

st_status st_cuda_moe_fused(st_backend *b, const st_fused_moe *op, st_error *err) {
    st_cuda_ctx *c = cuda_ctx(b);
    if (moe_grouped_unit_takes(c, op)) {
        const st_tensor *const w[2] = {op->w[0], op->w[1]};
        const int x_mode = moe_check_operands(op->out, w[0], op->x, op->ids);
        if (op->out->ne[0] == 0 || op->out->ne[1] == 0) return ST_OK;
        return moe_grouped(c, op->out, w, 2, op->gelu ? 2 : 1, NULL, op->x, x_mode, op->ids, err);
    }
    if (moe_grouped_down_takes(c, op)) {
        const int x_mode = moe_check_operands(op->y[0], op->w[0], op->x, op->ids);
        if (op->y[0]->ne[0] == 0) return ST_OK;
        return moe_grouped(c, op->y[0], op->w, 1, 0, op, op->x, x_mode, op->ids, err);
    }
    if (!moe_fused_takes(c, op)) return st_fused_moe_composite(b, op, err);
    const st_tensor *w = op->w[0], *x = op->x, *ids = op->ids;
    const int64_t K = w->ne[0], N = w->ne[1], E = w->ne[2], n_used = op->y[0]->ne[1], M = op->y[0]->ne[2];
    if (N == 0 || n_used * M == 0) return ST_OK;
    const int x_mode = moe_check_operands(op->y[0], w, x, ids);
    if (cuda_moe_rowblock_takes(c, op)) return cuda_moe_rowblock_run(c, op, err);
    const bool x_vec = cuda_aligned16(x->data) && x->nb[1] % 16 == 0 && x->nb[2] % 16 == 0;
    const int32_t *id = (const int32_t *)ids->data;
    const int64_t ids_nb1 = (int64_t)ids->nb[1];
    const dim3 block(CUDA_GEMV_WARPS * ST_GPU_WARP_SIZE);
    if (op->kind == ST_FUSED_MOE_GLU) {
        const st_tensor *wu = op->w[1];
        const bool w_vec = cuda_aligned16(w->data) && w->nb[1] % 16 == 0 && w->nb[2] % 16 == 0 &&
                           cuda_aligned16(wu->data) && wu->nb[1] % 16 == 0 && wu->nb[2] % 16 == 0;
        const dim3 grid(cuda_blocks(N, CUDA_GEMV_WARPS), cuda_grid_y(n_used * M));
        const char *g = (const char *)w->data, *u = (const char *)wu->data;
        const int64_t gn1 = (int64_t)w->nb[1], gn2 = (int64_t)w->nb[2], un1 = (int64_t)wu->nb[1],
                      un2 = (int64_t)wu->nb[2];
        const st_cuda_view xv = cuda_view(x), ov = cuda_view(op->out);
#define MOE_GLU_LAUNCH(T, GELU)                                                                                 \
    moe_glu_kernel<T, GELU><<<grid, block, 0, c->stream>>>(g, u, gn1, gn2, un1, un2, K, N, E, w_vec, xv, x_mode, x_vec, \
                                                           ov, id, ids_nb1, c->d_op_error)
        switch (w->type) {
        case ST_TYPE_F32: op->gelu ? MOE_GLU_LAUNCH(ST_TYPE_F32, true) : MOE_GLU_LAUNCH(ST_TYPE_F32, false); break;
        case ST_TYPE_F16: op->gelu ? MOE_GLU_LAUNCH(ST_TYPE_F16, true) : MOE_GLU_LAUNCH(ST_TYPE_F16, false); break;
        default: op->gelu ? MOE_GLU_LAUNCH(ST_TYPE_BF16, true) : MOE_GLU_LAUNCH(ST_TYPE_BF16, false); break;
        }
#undef MOE_GLU_LAUNCH
        ST_GPU_CHECK_LAUNCH();
        return ST_OK;
    }
    ST_ASSERT(x_mode == MOE_X_PER_SLOT);
    const bool w_vec = cuda_aligned16(w->data) && w->nb[1] % 16 == 0 && w->nb[2] % 16 == 0;
    const int rows_per_block = n_used >= CUDA_GEMV_WARPS ? 1 : (int)(CUDA_GEMV_WARPS / n_used);
    const dim3 grid(cuda_blocks(N, rows_per_block), cuda_grid_y(M));
    const char *wd = (const char *)w->data;
    const int64_t nb1 = (int64_t)w->nb[1], nb2 = (int64_t)w->nb[2];
    const st_cuda_view xv = cuda_view(x), wv = cuda_view(op->wts), ov = cuda_view(op->out);
    const st_cuda_view rv = op->residual ? cuda_view(op->residual) : ov;
#define MOE_DOWN_LAUNCH(T, R)                                                                                        \
    moe_down_kernel<T, R><<<grid, block, 0, c->stream>>>(wd, nb1, nb2, K, N, E, w_vec, xv, x_vec, wv, ov, rv, id,   \
                                                         ids_nb1, rows_per_block, c->d_op_error)
    const bool res = op->residual != NULL;
    switch (w->type) {
    case ST_TYPE_F32: res ? MOE_DOWN_LAUNCH(ST_TYPE_F32, true) : MOE_DOWN_LAUNCH(ST_TYPE_F32, false); break;
    case ST_TYPE_F16: res ? MOE_DOWN_LAUNCH(ST_TYPE_F16, true) : MOE_DOWN_LAUNCH(ST_TYPE_F16, false); break;
    default: res ? MOE_DOWN_LAUNCH(ST_TYPE_BF16, true) : MOE_DOWN_LAUNCH(ST_TYPE_BF16, false); break;
    }
#undef MOE_DOWN_LAUNCH
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}

// ---- top-k routing --------------------------------------------------------------------------

#define ROUTE_WARPS 4

// The k picks of one token's logits l [E] by one warp (every lane calls it), lane l holding
// experts l, l + 32, ...: each pick is the warp's best in st_moe_route_before's total order
// among the experts ranked after the previous pick (each lane's best, then a butterfly of
// (value, index) pairs: a total order's maximum, the same in every lane), which is the
// CPU's j-th pick (st_moe_route_pick). Lane 0 writes id [k].
__device__ __forceinline__ void route_warp_pick(const float *l, int64_t E, int32_t k, int32_t *id) {
    const int lane = threadIdx.x % ST_GPU_WARP_SIZE;
    float prev_v = 0.0f;
    int prev_i = -1;
    for (int32_t j = 0; j < k; j++) {
        float best_v = 0.0f;
        int best_i = -1;
        for (int64_t e = lane; e < E; e += ST_GPU_WARP_SIZE) {
            const float v = l[e];
            if (prev_i >= 0 && !st_moe_route_before(prev_v, prev_i, v, e)) continue;
            if (best_i < 0 || st_moe_route_before(v, e, best_v, best_i)) best_v = v, best_i = (int)e;
        }
#pragma unroll
        for (int off = ST_GPU_WARP_SIZE / 2; off > 0; off >>= 1) {
            const float ov = st_gpu_shfl_xor(best_v, off);
            const int oi = st_gpu_shfl_xor(best_i, off);
            if (oi >= 0 && (best_i < 0 || st_moe_route_before(ov, oi, best_v, best_i))) best_v = ov, best_i = oi;
        }
        prev_v = best_v, prev_i = best_i; // found: the order is total and k <= E
        if (lane == 0) id[j] = best_i;
    }
}

// One warp a token: its picks (route_warp_pick, a pass over the logits across the warp a
// pick instead of one thread's pass over all E), then lane 0 weighs them as the CPU does
// (st_moe_route_weights: the same sums in the same order, the same bits).
__global__ void __launch_bounds__(ROUTE_WARPS *ST_GPU_WARP_SIZE)
    topk_route_f32(char *__restrict__ ids, int64_t ids_nb1, st_cuda_view wts, st_cuda_view logits, int32_t k,
                   bool softmax_first, bool normalize) {
    const int64_t E = logits.ne0, M = logits.ne1;
    const int64_t m = (int64_t)blockIdx.x * ROUTE_WARPS + threadIdx.x / ST_GPU_WARP_SIZE;
    if (m >= M) return; // (the whole warp)
    const float *l = (const float *)(logits.data + m * logits.nb1); /* [E] */
    int32_t *id = (int32_t *)(ids + m * ids_nb1);                   /* [k] */
    float *wt = (float *)(wts.data + m * wts.nb1);                   /* [k] */
    route_warp_pick(l, E, k, id);
    if (threadIdx.x % ST_GPU_WARP_SIZE == 0) st_moe_route_weights(l, E, k, softmax_first, normalize, id, wt);
}

st_status st_cuda_topk_route(st_backend *b, st_tensor *ids, st_tensor *weights, const st_tensor *logits, int32_t k,
                             bool softmax_first, bool normalize, st_error *err) {
    // logits F32 [E, M]; ids I32 [k, M]; weights F32 [k, M]
    st_cuda_ctx *c = cuda_ctx(b);
    ST_ASSERT(cuda_is_f32_rows(logits) && logits->ne[2] == 1 && logits->ne[3] == 1);
    ST_ASSERT(cuda_is_f32_rows(weights) && weights->ne[2] == 1 && weights->ne[3] == 1);
    ST_ASSERT(cuda_is_i32_index(ids) && ids->ne[0] == k);
    const int64_t E = logits->ne[0], M = logits->ne[1];
    ST_ASSERT(k >= 1 && k <= E && E <= INT32_MAX && weights->ne[0] == k && weights->ne[1] == M && ids->ne[1] >= M);
    if (M == 0) return ST_OK;
    topk_route_f32<<<cuda_blocks(M, ROUTE_WARPS), ROUTE_WARPS * ST_GPU_WARP_SIZE, 0, c->stream>>>(
        (char *)ids->data, (int64_t)ids->nb[1], cuda_view(weights), cuda_view(logits), k, softmax_first, normalize);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}

// ---- router and routing fused (backend/fused.h st_fused_moe_route) -------------------------

#define ROUTER_THREADS 256                // a block a (router row, token); routing: a thread an expert
#define ROUTER_MAX_EXPERTS ROUTER_THREADS // the routing block holds a token's logits in shared memory
#define ROUTER_LOADS 4                    // 16-byte weight pieces a thread in flight (K up to 4,096 F32 a round)

// Block (e, m) of the grid (E, M): logits[e, m] = router row e . a[:, m], the row's 16-byte
// pieces spread over the block (thread t the pieces t, t + 256, ..., ROUTER_LOADS loads in
// flight, then a block sum), so that a row arrives in one round of loads rather than in a
// warp's dependent rounds (olmoe: 64 rows of 2,048 F32, 8 KiB a row, 2 pieces a thread).
// VEC: every row 16-byte aligned (weights, x, norm_w, h), else element by element.
// NORM: a = h = rms_norm(x) * norm_w. Every block forms the token's scale s (its sum of
// squares, then cuda_rms_scale) and uses h's elements as rms_norm forms them, (x * s) * w;
// block e stores h's pieces p with p % E == e (the experts read h). EARLY: launched early
// (st_cuda_ctx's early_launch, CUDA_EARLY_ROUTE), the first round of weight loads is issued
// before the wait for the kernel ahead; x is read through L2 either way.
// Each block then counts itself done for its token (after a fence, so that its writes are
// visible); the last of the token's blocks reads the logits past the L1 cache into shared
// memory and ranks them: thread e counts the experts st_moe_route_before puts ahead of e,
// and the expert of rank j is the j-th pick, as st_moe_route_pick's. Thread 0 weighs the
// picks (st_moe_route_weights: the CPU's sums in its order) and sets the count back to zero
// for the next launch (a recorded graph replays it).
template <st_type T, bool VEC, bool NORM, bool EARLY>
__global__ void __launch_bounds__(ROUTER_THREADS)
    moe_route_kernel(const char *__restrict__ w, int64_t nb1, int64_t K, st_cuda_view x,
                     const float *__restrict__ norm_w, float eps, st_cuda_view h, st_cuda_view logits,
                     char *__restrict__ ids, int64_t ids_nb1, st_cuda_view wts, int32_t k, bool softmax_first,
                     bool normalize, int *__restrict__ counters) {
    constexpr int PV = 16 / cuda_elem_bytes<T>::value; // elements a piece
    __shared__ float partial[ROUTER_THREADS / ST_GPU_WARP_SIZE];
    __shared__ float l[ROUTER_MAX_EXPERTS];
    __shared__ int32_t pick[ROUTER_MAX_EXPERTS];
    __shared__ bool last;
    const int t = threadIdx.x;
    const int64_t e = blockIdx.x, m = blockIdx.y, E = gridDim.x;
    const char *wrow = w + e * nb1;
    const uint4 *wv = (const uint4 *)wrow;
    const int64_t n_vec = VEC ? K / PV : 0; // pieces; the tail element by element
    uint4 wq[ROUTER_LOADS];
    auto issue = [&](int64_t p0) {
#pragma unroll
        for (int u = 0; u < ROUTER_LOADS; u++)
            if (p0 + u * ROUTER_THREADS < n_vec) wq[u] = st_gpu_load_streaming(wv + p0 + u * ROUTER_THREADS);
    };
    issue(t);
    cuda_early_release(); // the experts' product behind may take the SMs this grid leaves
    if (EARLY) cuda_early_wait();
    const float *xr = (const float *)(x.data + m * x.nb1);
    float *hr = (float *)(h.data + m * h.nb1);
    float *lm = (float *)(logits.data + m * logits.nb1);

    float s = 1.0f;
    if (NORM) {
        float ss = 0.0f;
        if (VEC) {
            for (int64_t i = t; i < K / 4; i += ROUTER_THREADS) {
                const float4 v = st_gpu_load_l2((const float4 *)xr + i);
                ss = fmaf(v.x, v.x, ss), ss = fmaf(v.y, v.y, ss), ss = fmaf(v.z, v.z, ss), ss = fmaf(v.w, v.w, ss);
            }
        } else {
            for (int64_t i = t; i < K; i += ROUTER_THREADS) {
                const float v = st_gpu_load_l2(xr + i);
                ss = fmaf(v, v, ss);
            }
        }
        s = cuda_rms_scale(cuda_group_sum_f32(ss, partial, t, ROUTER_THREADS), K, eps);
        __syncthreads(); // (partial is summed again below)
    }

    float acc = 0.0f;
    for (int64_t p0 = t; p0 < n_vec; p0 += ROUTER_LOADS * ROUTER_THREADS) {
        if (p0 != t) issue(p0);
#pragma unroll
        for (int u = 0; u < ROUTER_LOADS; u++) {
            const int64_t p = p0 + u * ROUTER_THREADS;
            if (p >= n_vec) break;
            float wf[PV];
            cuda_unpack16<T>(wq[u], wf);
#pragma unroll
            for (int i = 0; i < PV; i += 4) {
                float4 a = st_gpu_load_l2((const float4 *)(xr + p * PV + i));
                if (NORM) {
                    a = cuda_rms_scale4(a, s, __ldg((const float4 *)(norm_w + p * PV + i)));
                    if ((int)p % (int)E == (int)e) *(float4 *)(hr + p * PV + i) = a;
                }
                acc = fmaf(wf[i], a.x, acc), acc = fmaf(wf[i + 1], a.y, acc);
                acc = fmaf(wf[i + 2], a.z, acc), acc = fmaf(wf[i + 3], a.w, acc);
            }
        }
    }
    for (int64_t i = n_vec * PV + t; i < K; i += ROUTER_THREADS) {
        float a = st_gpu_load_l2(xr + i);
        if (NORM) {
            a = (a * s) * norm_w[i];
            if ((int)i % (int)E == (int)e) hr[i] = a;
        }
        acc = fmaf(cuda_load_f32<T>(wrow, i), a, acc);
    }
    acc = cuda_group_sum_f32(acc, partial, t, ROUTER_THREADS);
    if (t == 0) lm[e] = acc;

    __threadfence();
    __syncthreads();
    if (t == 0) last = atomicAdd(&counters[m], 1) == (int)E - 1;
    __syncthreads();
    if (!last) return;
    const volatile float *lv = lm; // (volatile: read from L2, not a stale L1 line)
    if (t < E) l[t] = lv[t];
    __syncthreads();
    if (t < E) {
        const float v = l[t];
        int rank = 0;
        for (int j = 0; j < (int)E; j++) rank += st_moe_route_before(l[j], j, v, t) ? 1 : 0;
        if (rank < k) pick[rank] = t;
    }
    __syncthreads();
    int32_t *id = (int32_t *)(ids + m * ids_nb1);
    if (t < k) id[t] = pick[t];
    if (t == 0) {
        st_moe_route_weights(l, E, k, softmax_first, normalize, pick, (float *)(wts.data + m * wts.nb1));
        counters[m] = 0;
    }
}

template <st_type T, bool VEC, bool NORM>
static void moe_route_launch(st_cuda_ctx *c, bool early, dim3 grid, const st_fused_moe_route *op) {
    const st_tensor *w = op->router;
    const float *nw = NORM ? (const float *)op->norm_w->data : (const float *)NULL;
    const st_cuda_view hv = cuda_view(NORM ? op->h : op->x); // (without a norm: never written)
    const char *wd = (const char *)w->data;
    char *id = (char *)op->ids->data;
#define ROUTE_ARGS                                                                                                     \
    wd, (int64_t)w->nb[1], (int64_t)w->ne[0], cuda_view(op->x), nw, op->eps, hv, cuda_view(op->logits), id,           \
        (int64_t)op->ids->nb[1], cuda_view(op->wts), op->k, op->softmax_first, op->normalize, c->route_counters
    if (early)
        (void)st_gpu_launch_early(moe_route_kernel<T, VEC, NORM, true>, grid, ROUTER_THREADS, 0, c->stream, ROUTE_ARGS);
    else
        moe_route_kernel<T, VEC, NORM, false><<<grid, ROUTER_THREADS, 0, c->stream>>>(ROUTE_ARGS);
#undef ROUTE_ARGS
}

template <st_type T>
static void moe_route_launch_type(st_cuda_ctx *c, bool early, bool vec, dim3 grid, const st_fused_moe_route *op) {
    const bool norm = op->norm_w != NULL;
    if (vec && norm) moe_route_launch<T, true, true>(c, early, grid, op);
    else if (vec) moe_route_launch<T, true, false>(c, early, grid, op);
    else if (norm) moe_route_launch<T, false, true>(c, early, grid, op);
    else moe_route_launch<T, false, false>(c, early, grid, op);
}

st_status st_cuda_moe_route_fused(st_backend *b, const st_fused_moe_route *op, st_error *err) {
    // router [K, E] F32/F16/BF16; x F32 [K, M]; norm_w F32 [K] and h F32 [K, M], or none;
    // logits F32 [E, M]; ids I32 [k, M]; wts F32 [k, M]
    st_cuda_ctx *c = cuda_ctx(b);
    const st_tensor *w = op->router, *x = op->x;
    const int64_t K = w->ne[0], E = w->ne[1], M = cuda_nrows(x);
    const bool norm_ok = !op->norm_w || (cuda_is_f32_rows(op->norm_w) && op->norm_w->ne[0] == K &&
                                         cuda_nrows(op->norm_w) == 1 && op->h && cuda_is_f32_rows(op->h) &&
                                         op->h->ne[0] == K && cuda_nrows(op->h) == M);
    const bool takes = cuda_is_float_weight(w) && w->ne[2] == 1 && w->ne[3] == 1 && E <= ROUTER_MAX_EXPERTS &&
                       op->k >= 1 && op->k <= E && M >= 1 && M <= 65535 &&
                       (M < ST_CUDA_MOE_GROUPED_MIN_M || c->capturing) && cuda_is_f32_rows(x) && x->ne[0] == K &&
                       norm_ok && cuda_is_f32_rows(op->logits) && op->logits->ne[0] == E &&
                       cuda_nrows(op->logits) == M && cuda_is_f32_rows(op->wts) && op->wts->ne[0] == op->k &&
                       op->wts->ne[1] == M && cuda_is_i32_index(op->ids) && op->ids->ne[0] == op->k &&
                       op->ids->ne[1] >= M;
    if (!takes) return st_fused_moe_route_composite(b, op, err);
    // a count a token, zero between launches (it grows outside any recording, zeroed once)
    const size_t bytes = (size_t)M * sizeof(int);
    if (bytes > c->route_counters_bytes) {
        void *before = c->route_counters;
        st_status s = st_cuda_grow(c, (void **)&c->route_counters, &c->route_counters_bytes, bytes, "routing counts", err);
        if (s != ST_OK) return s;
        if (c->route_counters != before)
            ST_GPU_CHECK(st_gpu_memset_async(c->route_counters, 0, c->route_counters_bytes, c->stream));
    }
    const bool vec = cuda_aligned16(w->data) && w->nb[1] % 16 == 0 && K % 4 == 0 && cuda_aligned16(x->data) &&
                     x->nb[1] % 16 == 0 &&
                     (!op->norm_w || (cuda_aligned16(op->norm_w->data) && cuda_aligned16(op->h->data) &&
                                      op->h->nb[1] % 16 == 0));
    const bool early = (c->tune.early_launch & CUDA_EARLY_ROUTE) != 0;
    const dim3 grid((unsigned int)E, (unsigned int)M);
    switch (w->type) {
    case ST_TYPE_F32: moe_route_launch_type<ST_TYPE_F32>(c, early, vec, grid, op); break;
    case ST_TYPE_F16: moe_route_launch_type<ST_TYPE_F16>(c, early, vec, grid, op); break;
    default: moe_route_launch_type<ST_TYPE_BF16>(c, early, vec, grid, op); break;
    }
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}

// ---- combination ----------------------------------------------------------------------------

// dst[:, m] = sum_j weights[j, m] * src[:, j, m] in slot order; __fmul_rn/__fadd_rn keep
// the CPU's rounding (a product, then a sum: no fused multiply-add).
__global__ void moe_combine_f32(st_cuda_view dst, st_cuda_view src, st_cuda_view wts) {
    const int64_t D = src.ne0, k = src.ne1, M = src.ne2;
    for (int64_t m = blockIdx.y; m < M; m += gridDim.y) {
        const float *w = (const float *)(wts.data + m * wts.nb1);
        float *y = (float *)(dst.data + m * dst.nb1);
        for (int64_t d = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; d < D; d += (int64_t)gridDim.x * blockDim.x) {
            float acc = 0.0f;
            for (int64_t j = 0; j < k; j++) {
                const float *x = (const float *)(src.data + j * src.nb1 + m * src.nb2);
                acc = __fadd_rn(acc, __fmul_rn(w[j], x[d]));
            }
            y[d] = acc;
        }
    }
}

st_status st_cuda_moe_combine(st_backend *b, st_tensor *dst, const st_tensor *src, const st_tensor *weights,
                              st_error *err) {
    // dst F32 [D, M]; src F32 [D, k, M]; weights F32 [k, M]
    st_cuda_ctx *c = cuda_ctx(b);
    const int64_t D = src->ne[0], k = src->ne[1], M = src->ne[2];
    ST_ASSERT(cuda_is_f32_rows(dst) && cuda_is_f32_rows(src) && cuda_is_f32_rows(weights));
    ST_ASSERT(dst->ne[0] == D && dst->ne[1] == M && weights->ne[0] == k && weights->ne[1] == M);
    if (D == 0 || M == 0) return ST_OK;
    const int threads = 256;
    unsigned int gx = cuda_blocks(D, threads);
    const dim3 grid(gx < 64 ? gx : 64, cuda_grid_y(M));
    moe_combine_f32<<<grid, threads, 0, c->stream>>>(cuda_view(dst), cuda_view(src), cuda_view(weights));
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}
