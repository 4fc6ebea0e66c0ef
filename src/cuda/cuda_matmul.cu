// Row lookup and the matrix product (ggml's mul_mat): y[n, m] = sum_k W[n, k] x[m, k].
//
//   W [K, N] F32/F16/BF16 at row stride nb[1] (padded or packed; never repacked)
//   x [K, M...] F32, any strides;  y [N, M...] F32, any strides
//
// M < ST_CUDA_GEMM_MIN_M (decode): the own matrix-vector kernel (cuda_gemv.cu), which
// reads each weight row once for all M columns.
// M >= ST_CUDA_GEMM_MIN_M (prefill): cuBLAS. In its column-major terms the row-major W is
// a K x N matrix with leading dimension lda = nb[1] / type_size, so
//   C (N x M) = op(A) B = W^T(N x K) X(K x M),  op(A) = T, ldb = x row stride, ldc = y's;
// F16/BF16 weights take x converted to their type (cuBLAS needs A and B of one type):
// a small kernel writes it packed into scratch; products accumulate in f32 and C is F32.
#include <limits.h>

#include "cuda/cuda_gemv.cuh"
#include "cuda/cuda_quant.h"


// ---- get_rows -----------------------------------------------------------------------------

// dst[:, m] = src[:, ids[m]]; a bad id is recorded and its row left alone.
template <st_type T>
__device__ void get_rows_impl(st_cuda_view dst, const char *__restrict__ src, int64_t src_nb1, int64_t V,
                              const int32_t *__restrict__ ids, st_cuda_op_error *op_err) {
    const int64_t K = dst.ne0;
    for (int64_t m = blockIdx.y; m < dst.ne1; m += gridDim.y) {
        const int32_t id = ids[m];
        if (id < 0 || id >= V) {
            if (blockIdx.x == 0 && threadIdx.x == 0)
                cuda_report_op_error(op_err, ST_CUDA_OP_ERROR_ROW_ID, id, m, V);
            continue;
        }
        const char *row = src + (int64_t)id * src_nb1;
        float *out = (float *)(dst.data + m * dst.nb1);
        for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < K; k += (int64_t)gridDim.x * blockDim.x)
            out[k] = cuda_load_f32<T>(row, k);
    }
}

__global__ void get_rows_f32(st_cuda_view dst, const char *src, int64_t nb1, int64_t V, const int32_t *ids,
                             st_cuda_op_error *e) {
    get_rows_impl<ST_TYPE_F32>(dst, src, nb1, V, ids, e);
}
__global__ void get_rows_f16(st_cuda_view dst, const char *src, int64_t nb1, int64_t V, const int32_t *ids,
                             st_cuda_op_error *e) {
    get_rows_impl<ST_TYPE_F16>(dst, src, nb1, V, ids, e);
}
__global__ void get_rows_bf16(st_cuda_view dst, const char *src, int64_t nb1, int64_t V, const int32_t *ids,
                              st_cuda_op_error *e) {
    get_rows_impl<ST_TYPE_BF16>(dst, src, nb1, V, ids, e);
}

st_status st_cuda_get_rows(st_backend *b, st_tensor *dst, const st_tensor *src, const st_tensor *ids,
                           st_error *err) {
    // dst F32 [K, M]; src [K, V] at any row stride; ids I32 [M]
    if (cuda_is_quantized(src->type)) return st_cuda_get_rows_quant(b, dst, src, ids, err); // cuda_quant_get_rows.cu
    st_cuda_ctx *c = cuda_ctx(b);
    ST_ASSERT(cuda_is_f32_rows(dst) && cuda_is_float_weight(src) && cuda_is_i32_index(ids));
    ST_ASSERT(dst->ne[0] == src->ne[0] && dst->ne[2] == 1 && dst->ne[3] == 1);
    ST_ASSERT(src->ne[2] == 1 && src->ne[3] == 1 && ids->ne[0] >= dst->ne[1]);
    const int64_t K = dst->ne[0], M = dst->ne[1];
    if (K == 0 || M == 0) return ST_OK;
    const dim3 grid(cuda_blocks(K, ST_CUDA_ROWS_THREADS) < 64 ? cuda_blocks(K, ST_CUDA_ROWS_THREADS) : 64, cuda_grid_y(M));
    const st_cuda_view d = cuda_view(dst);
    const char *s = (const char *)src->data;
    const int64_t nb1 = (int64_t)src->nb[1], V = src->ne[1];
    const int32_t *id = (const int32_t *)ids->data;
    switch (src->type) {
    case ST_TYPE_F32: get_rows_f32<<<grid, ST_CUDA_ROWS_THREADS, 0, c->stream>>>(d, s, nb1, V, id, c->d_op_error); break;
    case ST_TYPE_F16: get_rows_f16<<<grid, ST_CUDA_ROWS_THREADS, 0, c->stream>>>(d, s, nb1, V, id, c->d_op_error); break;
    default: get_rows_bf16<<<grid, ST_CUDA_ROWS_THREADS, 0, c->stream>>>(d, s, nb1, V, id, c->d_op_error); break;
    }
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}

// ---- GEMM operands ----------------------------------------------------------------------

// out[m * K + k] = x row m, element k, in the weight's type (cuda_store_as); out 16-byte
// aligned. A row that is 16-byte aligned, K a multiple of 4, goes four elements a thread
// (a float4 load, one store; cuda_pack_rows_grid sizes the grid for that).
template <st_type T> __device__ void pack_rows_impl(char *__restrict__ out, st_cuda_view x) {
    const int64_t K = x.ne0, M = x.ne1 * x.ne2 * x.ne3;
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t m = blockIdx.y; m < M; m += gridDim.y) {
        const float *row = (const float *)cuda_row(x, m);
        if (cuda_vec4_row(row, K)) {
            for (int64_t k = first; k < K / 4; k += step) cuda_store4_as<T>(out, m * K + 4 * k, ((const float4 *)row)[k]);
        } else {
            for (int64_t k = first; k < K; k += step) cuda_store_as<T>(out, m * K + k, row[k]);
        }
    }
}

__global__ void pack_rows_f32(char *out, st_cuda_view x) { pack_rows_impl<ST_TYPE_F32>(out, x); }
__global__ void pack_rows_f16(char *out, st_cuda_view x) { pack_rows_impl<ST_TYPE_F16>(out, x); }
__global__ void pack_rows_bf16(char *out, st_cuda_view x) { pack_rows_impl<ST_TYPE_BF16>(out, x); }

// y row m = packed[m * N .. m * N + N): a GEMM result staged in scratch, to a strided y.
__global__ void unpack_rows_f32(st_cuda_view y, const float *__restrict__ packed) {
    const int64_t N = y.ne0, M = y.ne1 * y.ne2 * y.ne3;
    for (int64_t m = blockIdx.y; m < M; m += gridDim.y) {
        float *row = (float *)cuda_row(y, m);
        for (int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; n < N; n += (int64_t)gridDim.x * blockDim.x)
            row[n] = packed[m * N + n];
    }
}

// False when cuBLAS cannot take the shape (int dimensions); the caller falls back.
static bool gemm_supported(const st_tensor *dst, const st_tensor *w, const st_tensor *x) {
    const size_t ts = w->nb[0];
    const int64_t K = w->ne[0], N = w->ne[1], M = cuda_nrows(x);
    return w->nb[1] % ts == 0 && (uintptr_t)w->data % ts == 0 && cuda_fits_int(K) && cuda_fits_int(N) && cuda_fits_int(M) &&
           cuda_fits_int((int64_t)(w->nb[1] / ts)) && cuda_fits_int((int64_t)(x->nb[1] / 4)) &&
           cuda_fits_int((int64_t)(dst->nb[1] / 4)) && K > 0;
}

// B [M][K] = x's rows converted to type (a GEMM's B operand in the weight's type), packed.
static st_status pack_b(st_cuda_ctx *c, char *B, st_type type, const st_tensor *x, st_error *err) {
    const dim3 grid = cuda_pack_rows_grid(x->ne[0], cuda_nrows(x));
    const st_cuda_view xv = cuda_view(x);
    switch (type) {
    case ST_TYPE_F32: pack_rows_f32<<<grid, ST_CUDA_ROWS_THREADS, 0, c->stream>>>(B, xv); break;
    case ST_TYPE_F16: pack_rows_f16<<<grid, ST_CUDA_ROWS_THREADS, 0, c->stream>>>(B, xv); break;
    default: pack_rows_bf16<<<grid, ST_CUDA_ROWS_THREADS, 0, c->stream>>>(B, xv); break;
    }
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}

// C [M][ldc] F32 = W B + beta C: W [K, N] at row stride nb[1] (cuBLAS's A, op T, lda =
// nb[1] / type size), B [M][ldb] of W's type.
static st_status gemm_call(st_cuda_ctx *c, const st_tensor *w, int64_t M, const void *B, int ldb, float *C, int ldc,
                           float beta, st_error *err) {
#if ST_GPU_HAVE_BLAS
    (void)err;
    const size_t ts = w->nb[0];
    const float alpha = 1.0f;
    const st_gpu_blas_data_t t = cuda_blas_type(w->type);
    ST_GPU_BLAS_CHECK(st_gpu_blas_gemm_ex(c->blas, st_gpu_blas_op_t, st_gpu_blas_op_n, (int)w->ne[1], (int)M,
                                          (int)w->ne[0], &alpha, w->data, t, (int)(w->nb[1] / ts), B, t, ldb, &beta, C,
                                          st_gpu_blas_r_32f, ldc, st_gpu_blas_compute_32f, st_gpu_blas_gemm_default));
    return ST_OK;
#else
    (void)c, (void)w, (void)M, (void)B, (void)ldb, (void)C, (void)ldc, (void)beta;
    return st_error_set(err, ST_ERROR_UNSUPPORTED, ST_GPU_NO_BLAS_MESSAGE);
#endif
}

st_status st_cuda_mul_mat_gemm(st_cuda_ctx *c, st_tensor *dst, const st_tensor *w, const st_tensor *x,
                               st_error *err) {
    const size_t ts = w->nb[0];
    const int64_t K = w->ne[0], N = w->ne[1], M = cuda_nrows(x);

    // B: x in place when cuBLAS can read it (F32 weights, rows at one stride), else packed
    const bool x_direct = w->type == ST_TYPE_F32 && cuda_rows_uniform(x) && x->nb[1] % 4 == 0 &&
                          (int64_t)(x->nb[1] / 4) >= K && (uintptr_t)x->data % 4 == 0;
    // C: y in place when its rows are at one stride, else staged and scattered
    const bool y_direct = cuda_rows_uniform(dst) && dst->nb[1] % 4 == 0 && (int64_t)(dst->nb[1] / 4) >= N &&
                          (uintptr_t)dst->data % 4 == 0;
    const size_t x_bytes = x_direct ? 0 : ((size_t)K * (size_t)M * ts + 255) / 256 * 256;
    const size_t y_bytes = y_direct ? 0 : (size_t)N * (size_t)M * sizeof(float);
    char *scratch = NULL;
    if (x_bytes + y_bytes) {
        st_status s = st_cuda_scratch(c, x_bytes + y_bytes, (void **)&scratch, err);
        if (s != ST_OK) return s;
    }

    const void *B = x->data;
    int ldb = (int)(x->nb[1] / 4);
    if (!x_direct) {
        st_status s = pack_b(c, scratch, w->type, x, err);
        if (s != ST_OK) return s;
        B = scratch;
        ldb = (int)K;
    }
    float *C = y_direct ? (float *)dst->data : (float *)(scratch + x_bytes);
    const int ldc = y_direct ? (int)(dst->nb[1] / 4) : (int)N;
    const st_status s = gemm_call(c, w, M, B, ldb, C, ldc, 0.0f, err);
    if (s != ST_OK) return s;
    if (!y_direct) {
        unpack_rows_f32<<<cuda_rows_grid(N, M), ST_CUDA_ROWS_THREADS, 0, c->stream>>>(cuda_view(dst), C);
        ST_GPU_CHECK_LAUNCH();
    }
    return ST_OK;
}

// ---- the fused product on cuBLAS ----------------------------------------------------------

// C of a GEMM written in place: rows at one stride of at least N floats, 4-byte aligned.
static bool gemm_direct_c(const st_tensor *y, int64_t N, int64_t M) {
    return cuda_is_f32_rows(y) && y->ne[0] == N && cuda_nrows(y) == M && cuda_rows_uniform(y) && y->nb[1] % 4 == 0 &&
           (int64_t)(y->nb[1] / 4) >= N && cuda_fits_int((int64_t)(y->nb[1] / 4)) && (uintptr_t)y->data % 4 == 0;
}

// Whether op's weights lie back to back, rows at one stride: w[i + 1] starts where w[i]'s
// rows end.
static bool weights_adjacent(const st_fused_mul_mat *op) {
    for (int i = 0; i + 1 < op->n_w; i++) {
        const st_tensor *a = op->w[i], *b = op->w[i + 1];
        if (b->nb[1] != a->nb[1] || (const char *)b->data != (const char *)a->data + a->ne[1] * (int64_t)a->nb[1])
            return false;
    }
    return true;
}

// Whether op's outputs lie back to back in every row: y[i + 1] starts where y[i]'s row
// ends, one row stride, wide enough for all of them.
static bool outputs_adjacent(const st_fused_mul_mat *op) {
    int64_t n = op->y[0]->ne[0];
    for (int i = 0; i + 1 < op->n_w; i++) {
        const st_tensor *a = op->y[i], *b = op->y[i + 1];
        if (b->nb[1] != a->nb[1] || (const char *)b->data != (const char *)a->data + a->ne[0] * (int64_t)sizeof(float))
            return false;
        n += b->ne[0];
    }
    return (int64_t)(op->y[0]->nb[1] / sizeof(float)) >= n;
}

// Whether st_cuda_mul_mat_fused_gemm takes op: M >= ST_CUDA_GEMM_MIN_M columns of F32 x,
// F16/BF16 weights of one type and width, every result written in place.
static bool fused_gemm_takes(const st_fused_mul_mat *op) {
    const st_tensor *x = op->x, *w0 = op->w[0];
    const int64_t K = x->ne[0], M = cuda_nrows(x);
    const bool add = op->epilogue == ST_FUSED_EPILOGUE_ADD;
    if (M < ST_CUDA_GEMM_MIN_M || !cuda_is_f32_rows(x) || (w0->type != ST_TYPE_F16 && w0->type != ST_TYPE_BF16))
        return false;
    if (op->norm_w && !(cuda_is_f32_rows(op->norm_w) && op->norm_w->ne[0] == K && cuda_nrows(op->norm_w) == 1))
        return false;
    for (int i = 0; i < op->n_w; i++) {
        const st_tensor *w = op->w[i];
        const st_tensor *y = add ? op->out : op->y[i];
        if (w->type != w0->type || w->ne[0] != K || w->ne[2] != 1 || w->ne[3] != 1 || !gemm_supported(y, w, x) ||
            !gemm_direct_c(y, w->ne[1], M))
            return false;
    }
    return !add || op->n_w == 1;
}

static bool fused_glu(const st_fused_mul_mat *op) {
    return op->epilogue == ST_FUSED_EPILOGUE_SWIGLU || op->epilogue == ST_FUSED_EPILOGUE_GEGLU;
}

// Whether op's weights run as one GEMM over the rows of all (fused_gemm_takes op): back to
// back at one stride (the loader places a layer's q, k, v and its gate, up so; a fused
// gate_up's halves are), into outputs back to back (q, k, v in the qkv rows) or, a gated
// pair, into scratch [M][2F] for the unit over its halves.
static bool fused_gemm_one(const st_fused_mul_mat *op, int64_t *N_all) {
    *N_all = 0;
    for (int i = 0; i < op->n_w; i++) *N_all += op->w[i]->ne[1];
    return op->n_w >= 2 && cuda_fits_int(*N_all) && weights_adjacent(op) &&
           ((op->epilogue == ST_FUSED_EPILOGUE_STORE && outputs_adjacent(op)) || fused_glu(op));
}

bool st_cuda_glu_hands_off(const st_fused_mul_mat *glu, const st_fused_mul_mat *next) {
    int64_t N_all = 0;
    if (!fused_glu(glu) || !fused_gemm_takes(glu) || !fused_gemm_one(glu, &N_all)) return false;
    if (next->epilogue != ST_FUSED_EPILOGUE_ADD || next->norm_w || !fused_gemm_takes(next)) return false;
    return st_tensor_same(next->x, glu->out) && next->w[0]->type == glu->w[0]->type;
}

// The fused product (fused.h) for M >= ST_CUDA_GEMM_MIN_M columns of F16/BF16 weights:
//   B [M][K] = h in the weights' type, packed once for all n_w products (the norm and the
//     conversion one kernel: st_cuda_rms_norm_pack; without a norm pack_rows), or x_packed
//     where the gated unit before handed it over (st_cuda_glu_hands_off)
//   STORE: y[i] = W_i B;  SWIGLU/GEGLU: y[0], y[1], then the gated unit into out, or into
//     out_packed in the weights' type [M][F] for the product after;
//   ADD: out = W_0 B + out (beta 1: cuBLAS adds in its epilogue; no y[0], no add kernel)
// The composite's values: h rounds to the weights' type once either way, the products and
// the add are f32 (the add's rounding is the same one, in the GEMM's epilogue); a unit
// handed over rounds to the weights' type as the next product's packing would. Weights
// back to back (fused_gemm_one) run as one GEMM.
st_status st_cuda_mul_mat_fused_gemm(st_backend *b, const st_fused_mul_mat *op, void *out_packed,
                                     const void *x_packed, bool *ran, st_error *err) {
    st_cuda_ctx *c = cuda_ctx(b);
    *ran = false;
    if (!fused_gemm_takes(op)) return ST_OK;
    *ran = true;
    const st_tensor *x = op->x, *w0 = op->w[0];
    const int64_t K = x->ne[0], M = cuda_nrows(x);
    const bool glu = fused_glu(op), add = op->epilogue == ST_FUSED_EPILOGUE_ADD;
    int64_t N_all = 0;
    const bool one_gemm = fused_gemm_one(op, &N_all);
    ST_ASSERT(!out_packed || (glu && one_gemm));
    ST_ASSERT(!x_packed || (add && !op->norm_w));
    const size_t ts = w0->nb[0];
    const size_t b_bytes = x_packed ? 0 : ((size_t)K * (size_t)M * ts + 255) / 256 * 256;
    const size_t c_bytes = one_gemm && glu ? (size_t)M * (size_t)N_all * sizeof(float) : 0;
    char *scratch = NULL;
    st_status s = b_bytes + c_bytes ? st_cuda_scratch(c, b_bytes + c_bytes, (void **)&scratch, err) : ST_OK;
    if (s != ST_OK) return s;
    const void *B = x_packed ? x_packed : scratch;
    if (!x_packed) {
        s = op->norm_w ? st_cuda_rms_norm_pack(c, scratch, w0->type, x, op->norm_w, op->eps, err)
                       : pack_b(c, scratch, w0->type, x, err);
        if (s != ST_OK) return s;
    }
    if (one_gemm) {
        st_tensor wm = *w0;
        wm.ne[1] = N_all;
        if (!glu)
            return gemm_call(c, &wm, M, B, (int)K, (float *)op->y[0]->data, (int)(op->y[0]->nb[1] / 4), 0.0f, err);
        float *C = (float *)(scratch + b_bytes);
        if ((s = gemm_call(c, &wm, M, B, (int)K, C, (int)N_all, 0.0f, err)) != ST_OK) return s;
        st_tensor gu = {};
        gu.type = ST_TYPE_F32;
        gu.data = C;
        gu.ne[0] = N_all, gu.ne[1] = M, gu.ne[2] = gu.ne[3] = 1;
        gu.nb[0] = sizeof(float), gu.nb[1] = (size_t)N_all * sizeof(float);
        gu.nb[2] = gu.nb[3] = gu.nb[1] * (size_t)M;
        const bool gelu = op->epilogue == ST_FUSED_EPILOGUE_GEGLU;
        if (out_packed) return st_cuda_glu_packed(c, out_packed, w0->type, &gu, gelu, err);
        return st_cuda_glu_fused(b, op->out, &gu, gelu, err);
    }
    for (int i = 0; i < op->n_w; i++) {
        st_tensor *y = add ? op->out : op->y[i];
        s = gemm_call(c, op->w[i], M, B, (int)K, (float *)y->data, (int)(y->nb[1] / 4), add ? 1.0f : 0.0f, err);
        if (s != ST_OK) return s;
    }
    if (glu) return st_cuda_glu(b, op->out, op->y[0], op->y[1], op->epilogue == ST_FUSED_EPILOGUE_GEGLU, err);
    if (add && op->next_h) return st_cuda_mul(b, op->next_h, op->out, op->next_norm_w, err);
    return ST_OK;
}

st_status st_cuda_mul_mat_fused_handoff(st_backend *b, const st_fused_mul_mat *op, bool hand_over, bool handed,
                                        st_error *err) {
    if (!hand_over && !handed) return st_cuda_mul_mat_fused(b, op, err);
    st_cuda_ctx *c = cuda_ctx(b);
    c->norm_ss_for = NULL;
    // the context's hand-off buffer: the unit's [M][F] in the weights' type, grown by the
    // unit (outside recordings: a step runs plainly before it is recorded), read by the
    // product right after it
    const size_t ts = op->w[0]->nb[0];
    if (hand_over) {
        const size_t bytes = (size_t)op->out->ne[0] * (size_t)cuda_nrows(op->out) * ts;
        const st_status g = st_cuda_grow(c, &c->handoff, &c->handoff_bytes, bytes, "gated unit hand-off", err);
        if (g != ST_OK) return g;
    }
    if (handed) ST_ASSERT(c->handoff_bytes >= (size_t)op->x->ne[0] * (size_t)cuda_nrows(op->x) * ts);
    bool ran = false;
    const st_status s = st_cuda_mul_mat_fused_gemm(b, op, hand_over ? c->handoff : NULL, handed ? c->handoff : NULL,
                                                   &ran, err);
    ST_ASSERT(ran); // st_cuda_glu_hands_off planned it for the cuBLAS path
    return s;
}

st_status st_cuda_mul_mat(st_backend *b, st_tensor *dst, const st_tensor *w, const st_tensor *x, st_error *err) {
    // w [K, N] any nb[1]; x F32 [K, M...]; dst F32 [N, M...] (M... = ne[1..3] of x)
    if (cuda_is_quantized(w->type)) return st_cuda_mul_mat_quant(b, dst, w, x, err); // cuda_quant_gemm.cu
    st_cuda_ctx *c = cuda_ctx(b);
    ST_ASSERT(cuda_is_float_weight(w) && w->ne[2] == 1 && w->ne[3] == 1);
    ST_ASSERT(cuda_is_f32_rows(x) && cuda_is_f32_rows(dst));
    ST_ASSERT(x->ne[0] == w->ne[0] && dst->ne[0] == w->ne[1]);
    ST_ASSERT(dst->ne[1] == x->ne[1] && dst->ne[2] == x->ne[2] && dst->ne[3] == x->ne[3]);
    const int64_t N = w->ne[1], M = cuda_nrows(x);
    if (N == 0 || M == 0) return ST_OK;
    if (M >= ST_CUDA_GEMM_MIN_M && gemm_supported(dst, w, x)) return st_cuda_mul_mat_gemm(c, dst, w, x, err);
    return st_cuda_gemv(c, dst, w, x, err);
}
