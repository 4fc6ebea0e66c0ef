// get_rows of a quantized table (a token embedding kept as stored): the selected rows
// dequantized to F32, exactly the CPU's values.
#include "cuda/cuda_quant.cuh"

// dst[:, m] = src[:, ids[m]] as f32; a bad id is recorded and its row left alone.
template <st_type T>
__global__ void q_get_rows(st_cuda_view dst, const uint8_t *src, int64_t nb1, int64_t V, const int32_t *ids,
                           st_cuda_op_error *op_err) {
    constexpr int CH = qfmt<T>::CHUNK;
    const int64_t n_chunks = dst.ne0 / CH;
    for (int64_t m = blockIdx.y; m < dst.ne1; m += gridDim.y) {
        const int32_t id = ids[m];
        if (id < 0 || id >= V) {
            if (blockIdx.x == 0 && threadIdx.x == 0) cuda_report_op_error(op_err, ST_CUDA_OP_ERROR_ROW_ID, id, m, V);
            continue;
        }
        const uint8_t *row = src + (int64_t)id * nb1;
        float *out = (float *)(dst.data + m * dst.nb1);
        for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < n_chunks;
             c += (int64_t)gridDim.x * blockDim.x) {
            float v[CH];
            q_dequant<T>(qfmt<T>::load(q_chunk_block<T>(row, c), q_chunk_index<T>(c)), q_chunk_index<T>(c), v);
#pragma unroll
            for (int i = 0; i < CH; i++) out[c * CH + i] = v[i];
        }
    }
}

struct q_launch_get_rows {
    template <st_type T>
    static void run(st_cuda_ctx *c, const st_tensor *dst, const st_tensor *src, const st_tensor *ids) {
        const int64_t n_chunks = dst->ne[0] / qfmt<T>::CHUNK;
        const unsigned int gx = cuda_blocks(n_chunks, QMM_THREADS);
        const dim3 grid(gx < 64 ? gx : 64, cuda_grid_y(dst->ne[1]));
        q_get_rows<T><<<grid, QMM_THREADS, 0, c->stream>>>(cuda_view(dst), (const uint8_t *)src->data,
                                                           (int64_t)src->nb[1], src->ne[1], (const int32_t *)ids->data,
                                                           c->d_op_error);
    }
};

st_status st_cuda_get_rows_quant(st_backend *b, st_tensor *dst, const st_tensor *src, const st_tensor *ids,
                                 st_error *err) {
    // dst F32 [K, M]; src [K, V] quantized; ids I32 [M]
    st_cuda_ctx *c = cuda_ctx(b);
    st_status s = q_check_weight(src, "get_rows", err);
    if (s != ST_OK) return s;
    ST_ASSERT(cuda_is_f32_rows(dst) && cuda_is_i32_index(ids));
    ST_ASSERT(dst->ne[0] == src->ne[0] && dst->ne[2] == 1 && dst->ne[3] == 1);
    ST_ASSERT(src->ne[2] == 1 && src->ne[3] == 1 && ids->ne[0] >= dst->ne[1]);
    if (dst->ne[0] == 0 || dst->ne[1] == 0) return ST_OK;
    q_dispatch<q_launch_get_rows>(src->type, c, dst, src, ids);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}
