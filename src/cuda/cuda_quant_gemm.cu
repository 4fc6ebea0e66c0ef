// mul_mat on quantized weights (st_cuda_mul_mat_quant): the decode matvec below
// ST_CUDA_QGEMM_MIN_M columns (cuda_quant_gemv.cu), and from there the prefill path here:
// slabs of weight rows dequantized to F16 in scratch (q_dequant_f16), then cuBLAS (F16 x
// F16, f32 accumulate) on each slab, x rounded to F16 once.
#include "cuda/cuda_quant.cuh"

// The F16 weight slab of the prefill path: rows dequantized per GEMM (bounds scratch; a
// 262144 x 640 output layer is 10 slabs of ~26k rows).
constexpr size_t QMM_SLAB_BYTES = (size_t)32 << 20;

// out [K, rows] F16 packed (row r at out + r K) = rows of w at stride nb1, dequantized
// and rounded to nearest even. K % CHUNK == 0 and K % 8 == 0, so every chunk's halves
// start 16-byte aligned and go out in 16-byte stores.
template <st_type T>
__global__ void q_dequant_f16(uint4 *out, const uint8_t *w, int64_t nb1, int64_t K, int64_t rows) {
    constexpr int CH = qfmt<T>::CHUNK;
    const int64_t n_chunks = K / CH, total = n_chunks * rows;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / n_chunks, c = i % n_chunks;
        const uint8_t *row = w + r * nb1;
        float v[CH];
        q_dequant<T>(qfmt<T>::load(q_chunk_block<T>(row, c), q_chunk_index<T>(c)), q_chunk_index<T>(c), v);
        uint4 *o = out + (r * K + c * CH) / 8;
#pragma unroll
        for (int p = 0; p < CH / 8; p++) {
            uint32_t h[4];
#pragma unroll
            for (int k = 0; k < 4; k++)
                h[k] = (uint32_t)st_gpu_float_to_half_bits(v[8 * p + 2 * k]) |
                       ((uint32_t)st_gpu_float_to_half_bits(v[8 * p + 2 * k + 1]) << 16);
            o[p] = make_uint4(h[0], h[1], h[2], h[3]);
        }
    }
}

struct q_launch_dequant_f16 {
    template <st_type T>
    static void run(st_cuda_ctx *c, uint4 *out, const uint8_t *w, int64_t nb1, int64_t K, int64_t rows) {
        const unsigned int blocks = cuda_blocks(K / qfmt<T>::CHUNK * rows, QMM_THREADS);
        const unsigned int grid = blocks < (1u << 20) ? blocks : (1u << 20); /* the kernel strides over the rest */
        q_dequant_f16<T><<<grid, QMM_THREADS, 0, c->stream>>>(out, w, nb1, K, rows);
    }
};

// Prefill: y = W x with W dequantized to F16 a slab of rows at a time and x rounded to F16
// once; cuBLAS accumulates in f32. Scratch: [x F16 K x M | W slab F16 | y staging].
static st_status q_mul_mat_gemm(st_cuda_ctx *c, st_tensor *dst, const st_tensor *w, const st_tensor *x,
                                st_error *err) {
    const int64_t K = w->ne[0], N = w->ne[1], M = cuda_nrows(x);
    const bool y_direct = cuda_rows_uniform(dst) && dst->nb[1] % 4 == 0 && (int64_t)(dst->nb[1] / 4) >= N &&
                          (uintptr_t)dst->data % 4 == 0;
    int64_t slab = (int64_t)(QMM_SLAB_BYTES / ((size_t)K * 2));
    if (slab > 64) slab -= slab % 64; /* each slab's C rows start 256-byte aligned */
    if (slab < 1) slab = 1;
    if (slab > N) slab = N;
    const size_t x_bytes = ((size_t)K * (size_t)M * 2 + 255) / 256 * 256;
    const size_t w_bytes = ((size_t)slab * (size_t)K * 2 + 255) / 256 * 256;
    const size_t y_bytes = y_direct ? 0 : (size_t)N * (size_t)M * sizeof(float);
    char *scratch = NULL;
    st_status s = st_cuda_scratch(c, x_bytes + w_bytes + y_bytes, (void **)&scratch, err);
    if (s != ST_OK) return s;
    unsigned short *xh = (unsigned short *)scratch;
    uint4 *wh = (uint4 *)(scratch + x_bytes);
    float *C = y_direct ? (float *)dst->data : (float *)(scratch + x_bytes + w_bytes);
    const int ldc = y_direct ? (int)(dst->nb[1] / 4) : (int)N;

    pack_rows_f16<<<cuda_pack_rows_grid(K, M), ST_CUDA_ROWS_THREADS, 0, c->stream>>>((char *)xh, cuda_view(x));
    ST_GPU_CHECK_LAUNCH();
    const float alpha = 1.0f, beta = 0.0f;
    for (int64_t n0 = 0; n0 < N; n0 += slab) {
        const int64_t rows = N - n0 < slab ? N - n0 : slab;
        const uint8_t *wrows = (const uint8_t *)w->data + (size_t)n0 * w->nb[1];
        q_dispatch<q_launch_dequant_f16>(w->type, c, wh, wrows, (int64_t)w->nb[1], K, rows);
        ST_GPU_CHECK_LAUNCH();
        // column-major: C[n0.., :] (rows x M) = Wslab^T (rows x K, lda K) X (K x M, ldb K)
#if ST_GPU_HAVE_BLAS
        ST_GPU_BLAS_CHECK(st_gpu_blas_gemm_ex(c->blas, st_gpu_blas_op_t, st_gpu_blas_op_n, (int)rows, (int)M, (int)K,
                                              &alpha, wh, st_gpu_blas_r_16f, (int)K, xh, st_gpu_blas_r_16f, (int)K,
                                              &beta, C + n0, st_gpu_blas_r_32f, ldc, st_gpu_blas_compute_32f,
                                              st_gpu_blas_gemm_default));
#else
        (void)alpha, (void)beta, (void)C, (void)ldc;
        return st_error_set(err, ST_ERROR_UNSUPPORTED, ST_GPU_NO_BLAS_MESSAGE);
#endif
    }
    if (!y_direct) {
        unpack_rows_f32<<<cuda_rows_grid(N, M), ST_CUDA_ROWS_THREADS, 0, c->stream>>>(cuda_view(dst), C);
        ST_GPU_CHECK_LAUNCH();
    }
    return ST_OK;
}

st_status st_cuda_mul_mat_quant(st_backend *b, st_tensor *dst, const st_tensor *w, const st_tensor *x,
                                st_error *err) {
    // w [K, N] quantized, any nb[1] (whole blocks); x F32 [K, M...]; dst F32 [N, M...]
    st_cuda_ctx *c = cuda_ctx(b);
    st_status s = q_check_weight(w, "mul_mat", err);
    if (s != ST_OK) return s;
    ST_ASSERT(w->ne[2] == 1 && w->ne[3] == 1);
    ST_ASSERT(cuda_is_f32_rows(x) && cuda_is_f32_rows(dst));
    ST_ASSERT(x->ne[0] == w->ne[0] && dst->ne[0] == w->ne[1]);
    ST_ASSERT(dst->ne[1] == x->ne[1] && dst->ne[2] == x->ne[2] && dst->ne[3] == x->ne[3]);
    const int64_t K = w->ne[0], N = w->ne[1], M = cuda_nrows(x);
    if (N == 0 || M == 0) return ST_OK;
    const bool gemm_ok =
        K > 0 && cuda_fits_int(K) && cuda_fits_int(N) && cuda_fits_int(M) && cuda_fits_int((int64_t)(dst->nb[1] / 4));
    if (M >= ST_CUDA_QGEMM_MIN_M && gemm_ok) return q_mul_mat_gemm(c, dst, w, x, err);
    return st_cuda_gemv_quant(c, dst, w, x, err);
}
