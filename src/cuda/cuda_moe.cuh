// What the two mul_mat_id paths share (cuda_moe.cu for float experts,
// cuda_quant_mul_mat_id.cu for quantized ones): the operands' checks, how x is laid out
// relative to the slots, and a slot's expert, x row and y row.
//
// mul_mat_id: w [K, N, E] (any nb[1], nb[2]), ids I32 [n_used, M] (row stride ids->nb[1]),
// dst F32 [N, n_used, M]. Slot s = m * n_used + j is token m's j-th expert, e = ids[j, m];
// it computes dst[:, j, m] = W_e x_s with W_e = w + e * nb[2].
#ifndef STRIDE_CUDA_MOE_CUH
#define STRIDE_CUDA_MOE_CUH

#include "cuda/cuda_common.cuh"

// How x is laid out relative to the slots (cpu_ops.h, st_cpu_mul_mat_id).
typedef enum moe_x_mode {
    MOE_X_PER_SLOT = 0,  // [K, n_used, M]: slot (j, m) reads x[:, j, m]
    MOE_X_SHARED_2D = 1, // [K, M]: every slot of token m reads x[:, m]
    MOE_X_SHARED_3D = 2, // [K, 1, M]: x[:, 0, m]
} moe_x_mode;

// Asserts the shapes of mul_mat_id's operands (the weight's type is the caller's) and
// returns x's layout.
static inline moe_x_mode moe_check_operands(const st_tensor *dst, const st_tensor *w, const st_tensor *x,
                                            const st_tensor *ids) {
    const int64_t K = w->ne[0], N = w->ne[1];
    ST_ASSERT(w->ne[3] == 1);
    ST_ASSERT(cuda_is_f32_rows(dst) && dst->ne[0] == N && dst->ne[3] == 1);
    const int64_t n_used = dst->ne[1], M = dst->ne[2];
    ST_ASSERT(cuda_is_f32_rows(x) && x->ne[0] == K && x->ne[3] == 1);
    ST_ASSERT(cuda_is_i32_index(ids) && ids->ne[0] == n_used && ids->ne[1] >= M);
    const bool per_slot = x->ne[1] == n_used && x->ne[2] == M;
    const bool shared_2d = x->ne[1] == M && x->ne[2] == 1;
    const bool shared_3d = x->ne[1] == 1 && x->ne[2] == M;
    ST_ASSERT(per_slot || shared_2d || shared_3d);
    return per_slot ? MOE_X_PER_SLOT : shared_2d ? MOE_X_SHARED_2D : MOE_X_SHARED_3D;
}

// cuda_moe_rowblock.cu: the experts' unit or down product of one token (st_fused_moe, M ==
// 1) by block-a-row, where st_cuda_tuning's moe_rowblock asks for it and the shapes let it:
// F16/BF16 experts with 16-byte aligned rows; the unit with x shared by the slots and K a
// multiple of 2,048 up to 4,096; down with n_used F a multiple of 2,048 up to 8,192 and
// n_used dividing the 8 warps of a block. op is one that cuda_moe.cu's fused kernels take.
bool cuda_moe_rowblock_takes(const st_cuda_ctx *c, const st_fused_moe *op);
st_status cuda_moe_rowblock_run(st_cuda_ctx *c, const st_fused_moe *op, st_error *err);

// The x row of slot (j, m).
__device__ __forceinline__ const float *moe_slot_x(const st_cuda_view &x, int x_mode, int64_t j, int64_t m) {
    if (x_mode == MOE_X_PER_SLOT) return (const float *)(x.data + j * x.nb1 + m * x.nb2);
    if (x_mode == MOE_X_SHARED_2D) return (const float *)(x.data + m * x.nb1);
    return (const float *)(x.data + m * x.nb2);
}

// The y row [N] of slot (j, m).
__device__ __forceinline__ float *moe_slot_y(const st_cuda_view &y, int64_t j, int64_t m) {
    return (float *)(y.data + j * y.nb1 + m * y.nb2);
}

// The decode kernels' prologue: the slots of y [N, n_used, M] this block takes (blockIdx.y,
// then every gridDim.y-th), each with its expert e read from ids in device memory (no host
// synchronisation). An id outside [0, n_expert) is recorded (by the grid's first thread)
// and its slot skipped; body(j, m, e) runs for the others.
template <typename Body>
__device__ __forceinline__ void moe_for_each_slot(const st_cuda_view &y, const int32_t *ids, int64_t ids_nb1,
                                                  int64_t n_expert, st_cuda_op_error *op_err, const Body &body) {
    const int64_t n_used = y.ne1, M = y.ne2, n_slots = n_used * M;
    for (int64_t s = blockIdx.y; s < n_slots; s += gridDim.y) {
        const int64_t j = s % n_used, m = s / n_used;
        const int32_t e = *(const int32_t *)((const char *)ids + m * ids_nb1 + j * (int64_t)sizeof(int32_t));
        if (e < 0 || e >= n_expert) {
            if (blockIdx.x == 0 && threadIdx.x == 0)
                cuda_report_op_error(op_err, ST_CUDA_OP_ERROR_EXPERT_ID, e, m * n_used + j, n_expert);
            continue;
        }
        body(j, m, e);
    }
}

#endif /* STRIDE_CUDA_MOE_CUH */
