// mul_mat_id on quantized experts, one launch with no host synchronisation (decode and
// prefill alike): block (row group, slot) looks the slot's expert e up in device memory
// (cuda_moe.cuh) and its warps run the dequantizing matrix-vector product over rows of
// W + e * nb[2], a warp a row, reading the blocks straight from global memory.
#include "cuda/cuda_moe.cuh"
#include "cuda/cuda_quant.cuh"

// dot(row, x) in every lane of the warp (mul_mat_id's one column): n_chunks chunks of the
// row (K / CHUNK). x_vec: x is 16-byte aligned (CHUNK is a multiple of 4). Lane l sums its
// chunks l, l + 32, ... in order, then a shuffle tree: the order depends on K alone.
template <st_type T>
__device__ __forceinline__ float q_gemv_row(const uint8_t *__restrict__ row, int64_t n_chunks, const float *x,
                                            bool x_vec) {
    using F = qfmt<T>;
    constexpr int W = ST_GPU_WARP_SIZE, CH = F::CHUNK;
    const int lane = threadIdx.x % W;
    float acc = 0.0f;
    for (int64_t c0 = lane; c0 < n_chunks; c0 += (int64_t)W * QMM_UNROLL) {
        typename F::raw r[QMM_UNROLL];
#pragma unroll
        for (int u = 0; u < QMM_UNROLL; u++) {
            const int64_t ch = c0 + (int64_t)u * W;
            if (ch < n_chunks) r[u] = F::load(q_chunk_block<T>(row, ch), q_chunk_index<T>(ch));
        }
#pragma unroll
        for (int u = 0; u < QMM_UNROLL; u++) {
            const int64_t ch = c0 + (int64_t)u * W;
            if (ch >= n_chunks) break;
            float d, m = 0.0f;
            uint32_t qb[CH];
            F::split(r[u], q_chunk_index<T>(ch), &d, &m, qb);
            acc = x_vec ? q_dot_chunk<T>(d, m, qb, q_x_global<true>{x + ch * CH}, acc)
                        : q_dot_chunk<T>(d, m, qb, q_x_global<false>{x + ch * CH}, acc);
        }
    }
    return cuda_warp_sum(acc);
}

// Block (row group, slot): row n of the slot's expert; x and y as cuda_moe.cuh lays them out.
template <st_type T>
__global__ void __launch_bounds__(QMM_WARPS *ST_GPU_WARP_SIZE)
    q_gemv_id(const uint8_t *w, int64_t nb1, int64_t nb2, int64_t K, int64_t N, int64_t n_expert, st_cuda_view x,
              int x_mode, bool x_vec, st_cuda_view y, const int32_t *ids, int64_t ids_nb1, st_cuda_op_error *op_err) {
    const int64_t n = (int64_t)blockIdx.x * QMM_WARPS + threadIdx.x / ST_GPU_WARP_SIZE;
    const int lane = threadIdx.x % ST_GPU_WARP_SIZE;
    moe_for_each_slot(y, ids, ids_nb1, n_expert, op_err, [&](int64_t j, int64_t m, int32_t e) {
        if (n >= N) return;
        const float *xrow = moe_slot_x(x, x_mode, j, m);
        const float acc = q_gemv_row<T>(w + (int64_t)e * nb2 + n * nb1, K / qfmt<T>::CHUNK, xrow, x_vec);
        if (lane == 0) moe_slot_y(y, j, m)[n] = acc;
    });
}

struct q_launch_gemv_id {
    template <st_type T>
    static void run(st_cuda_ctx *c, const st_tensor *dst, const st_tensor *w, const st_tensor *x, int x_mode,
                    const st_tensor *ids) {
        const int64_t N = w->ne[1], n_slots = dst->ne[1] * dst->ne[2];
        const dim3 grid(cuda_blocks(N, QMM_WARPS), cuda_grid_y(n_slots));
        q_gemv_id<T><<<grid, QMM_WARPS * ST_GPU_WARP_SIZE, 0, c->stream>>>(
            (const uint8_t *)w->data, (int64_t)w->nb[1], (int64_t)w->nb[2], w->ne[0], N, w->ne[2], cuda_view(x),
            x_mode, cuda_rows_aligned16(x), cuda_view(dst), (const int32_t *)ids->data, (int64_t)ids->nb[1],
            c->d_op_error);
    }
};

st_status st_cuda_mul_mat_id_quant(st_backend *b, st_tensor *dst, const st_tensor *w, const st_tensor *x,
                                   const st_tensor *ids, st_error *err) {
    // w [K, N, E] quantized, any nb[1], nb[2] (whole blocks); the other operands: cuda_moe.cuh
    st_cuda_ctx *c = cuda_ctx(b);
    st_status s = q_check_weight(w, "mul_mat_id", err);
    if (s != ST_OK) return s;
    const moe_x_mode x_mode = moe_check_operands(dst, w, x, ids);
    if (w->ne[1] == 0 || dst->ne[1] * dst->ne[2] == 0) return ST_OK;
    q_dispatch<q_launch_gemv_id>(w->type, c, dst, w, x, (int)x_mode, ids);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}
