// RMSNorm and rotary position embedding, over every row of strided F32 views (hidden
// states [D, M], or [head_dim, n_head, M] heads straight out of a qkv row).
#include <math.h>

#include "cuda/cuda_common.cuh"
#include "cuda/cuda_rope.cuh"

// ---- RMSNorm --------------------------------------------------------------------------------

// rope_store keeps one head row in shared memory
#define ROPE_STORE_MAX_HEAD_DIM 512

// Sum over the block (whole warps); every thread gets the total. `shared` holds one float
// per warp.
__device__ __forceinline__ float block_sum_f32(float v, float *shared) {
    __syncthreads(); // shared may still be read by a previous call
    return cuda_group_sum_f32(v, shared, threadIdx.x, blockDim.x);
}

// The scale of row xr [D]: the sum of squares in f32 (each thread its elements t, t +
// blockDim.x, ..., then a block tree), formed as the CPU forms it (1 / sqrt(mean + eps) in
// double, rounded to f32). Every thread of the block calls it; rms_norm_f32 and
// rms_norm_pack share it, and the fused rope's q/k norms sum in the same order, so their
// scales are the same bits. L2: xr read through L2 (a kernel launched early, after its wait).
template <bool L2 = false>
__device__ __forceinline__ float rms_row_scale(const float *xr, int64_t D, float eps, float *shared) {
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
        const float v = L2 ? st_gpu_load_l2(xr + i) : xr[i];
        ss = fmaf(v, v, ss);
    }
    return cuda_rms_scale(block_sum_f32(ss, shared), D, eps);
}

// Row r of dst = (x * s) * w, s = rms_row_scale (every thread of the block calls it).
__device__ __forceinline__ void rms_norm_row(st_cuda_view dst, st_cuda_view x, const float *__restrict__ w, float eps,
                                             int64_t r, float *shared) {
    const int64_t D = x.ne0;
    const float *xr = (const float *)cuda_row(x, r);
    float *yr = (float *)cuda_row(dst, r);
    const float s = rms_row_scale(xr, D, eps, shared);
    if (w && cuda_vec4_row(xr, D) && cuda_vec4_row(yr, D) && cuda_vec4_row(w, D)) {
        for (int64_t i = threadIdx.x; i < D / 4; i += blockDim.x)
            ((float4 *)yr)[i] = cuda_rms_scale4(((const float4 *)xr)[i], s, ((const float4 *)w)[i]);
    } else if (w) {
        for (int64_t i = threadIdx.x; i < D; i += blockDim.x) yr[i] = (xr[i] * s) * w[i];
    } else {
        for (int64_t i = threadIdx.x; i < D; i += blockDim.x) yr[i] = xr[i] * s;
    }
}

// One block per row.
__global__ void rms_norm_f32(st_cuda_view dst, st_cuda_view x, const float *__restrict__ w, float eps) {
    __shared__ float shared[CUDA_NORM_MAX_THREADS / ST_GPU_WARP_SIZE];
    const int64_t rows = x.ne1 * x.ne2 * x.ne3;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) rms_norm_row(dst, x, w, eps, r, shared);
}

// Two norms of one width in one grid: rows [0, rows0) of the first, then the second's;
// each row as rms_norm_f32 forms it (the same block size, the same bits).
__global__ void rms_norm_pair_f32(st_cuda_view d0, st_cuda_view x0, const float *__restrict__ w0, float e0,
                                  st_cuda_view d1, st_cuda_view x1, const float *__restrict__ w1, float e1) {
    __shared__ float shared[CUDA_NORM_MAX_THREADS / ST_GPU_WARP_SIZE];
    const int64_t rows0 = x0.ne1 * x0.ne2 * x0.ne3, rows = rows0 + x1.ne1 * x1.ne2 * x1.ne3;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        if (r < rows0) rms_norm_row(d0, x0, w0, e0, r, shared);
        else rms_norm_row(d1, x1, w1, e1, r - rows0, shared);
    }
}

st_status st_cuda_norm_pair(st_backend *b, const st_fused_norm_pair *op, st_error *err) {
    // x[i], dst[i] F32 [D, ...] of one shape each, one D; w[i] F32 [D] or NULL
    st_cuda_ctx *c = cuda_ctx(b);
    const int64_t D = op->x[0]->ne[0];
    bool ok = true;
    for (int i = 0; i < 2; i++) {
        const st_tensor *x = op->x[i], *w = op->w[i];
        ok = ok && cuda_is_f32_rows(x) && cuda_is_f32_rows(op->dst[i]) && cuda_same_shape(op->dst[i], x) &&
             x->ne[0] == D && (!w || (cuda_is_f32_rows(w) && w->ne[0] == D && cuda_nrows(w) == 1));
    }
    if (!ok) {
        st_fused_norm_pair_composite(b, op); // (its ops keep their errors in the context, as plain nodes do)
        return ST_OK;
    }
    const int64_t rows = cuda_nrows(op->x[0]) + cuda_nrows(op->x[1]);
    if (rows == 0 || D == 0) return ST_OK;
    const unsigned int grid = (unsigned int)(rows < (1 << 30) ? rows : (1 << 30));
    const float *w0 = op->w[0] ? (const float *)op->w[0]->data : NULL, *w1 = op->w[1] ? (const float *)op->w[1]->data : NULL;
    rms_norm_pair_f32<<<grid, cuda_norm_threads(D), 0, c->stream>>>(cuda_view(op->dst[0]), cuda_view(op->x[0]), w0,
                                                                    op->eps[0], cuda_view(op->dst[1]),
                                                                    cuda_view(op->x[1]), w1, op->eps[1]);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}

st_status st_cuda_rms_norm(st_backend *b, st_tensor *dst, const st_tensor *x, const st_tensor *w, float eps,
                           st_error *err) {
    // x, dst F32 [D, ...]; w F32 [D] or NULL
    st_cuda_ctx *c = cuda_ctx(b);
    ST_ASSERT(cuda_is_f32_rows(x) && cuda_is_f32_rows(dst) && cuda_same_shape(dst, x));
    const int64_t D = x->ne[0], rows = cuda_nrows(x);
    if (w) ST_ASSERT(cuda_is_f32_rows(w) && w->ne[0] == D && cuda_nrows(w) == 1);
    if (rows == 0) return ST_OK;
    ST_ASSERT(D > 0);
    const int threads = cuda_norm_threads(D);
    const unsigned int grid = (unsigned int)(rows < (1 << 30) ? rows : (1 << 30));
    rms_norm_f32<<<grid, threads, 0, c->stream>>>(cuda_view(dst), cuda_view(x),
                                                  w ? (const float *)w->data : (const float *)NULL, eps);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}

// One block per row: out = x + (y * s) * w, s = rms_row_scale(y): rms_norm_f32's values
// added as the add kernel adds them (the composite's bits, one pass). EARLY: launched early
// (st_cuda_ctx's early_launch, CUDA_EARLY_NORM_ADD), it waits for the product ahead before
// it reads y and x, through L2; its own launch then overlaps that product's tail.
template <bool EARLY>
__global__ void rms_norm_add_f32(st_cuda_view out, st_cuda_view x, st_cuda_view y, const float *__restrict__ w,
                                 float eps) {
    __shared__ float shared[CUDA_NORM_MAX_THREADS / ST_GPU_WARP_SIZE];
    cuda_early_release(); // a kernel launched early behind this one may take the SMs it leaves
    if (EARLY) cuda_early_wait();
    const int64_t D = y.ne0, rows = y.ne1 * y.ne2 * y.ne3;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *yr = (const float *)cuda_row(y, r), *xr = (const float *)cuda_row(x, r);
        float *o = (float *)cuda_row(out, r);
        const float s = rms_row_scale<EARLY>(yr, D, eps, shared);
        for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
            const float yi = EARLY ? st_gpu_load_l2(yr + i) : yr[i], xi = EARLY ? st_gpu_load_l2(xr + i) : xr[i];
            o[i] = __fadd_rn(xi, w ? (yi * s) * w[i] : yi * s);
        }
    }
}

st_status st_cuda_norm_add(st_backend *b, const st_fused_norm_add *op, st_error *err) {
    // y, x, out F32 [D, ...] of one shape; norm_w F32 [D] or NULL; h (not written) as y
    st_cuda_ctx *c = cuda_ctx(b);
    const st_tensor *y = op->y, *x = op->x, *w = op->norm_w;
    if (!cuda_is_f32_rows(y) || !cuda_is_f32_rows(x) || !cuda_is_f32_rows(op->out) || !cuda_same_shape(x, y) ||
        !cuda_same_shape(op->out, y) || (w && !(cuda_is_f32_rows(w) && w->ne[0] == y->ne[0] && cuda_nrows(w) == 1))) {
        st_fused_norm_add_composite(b, op); // (its ops keep their errors in the context, as plain nodes do)
        return ST_OK;
    }
    const int64_t D = y->ne[0], rows = cuda_nrows(y);
    if (rows == 0 || D == 0) return ST_OK;
    const unsigned int grid = (unsigned int)(rows < (1 << 30) ? rows : (1 << 30));
    const float *wd = w ? (const float *)w->data : (const float *)NULL;
    if (c->tune.early_launch & CUDA_EARLY_NORM_ADD)
        (void)st_gpu_launch_early(rms_norm_add_f32<true>, dim3(grid), (unsigned int)cuda_norm_threads(D), 0,
                                  c->stream, cuda_view(op->out), cuda_view(x), cuda_view(y), wd,
                                  op->eps); // (its error: ST_GPU_CHECK_LAUNCH)
    else
        rms_norm_add_f32<false><<<grid, cuda_norm_threads(D), 0, c->stream>>>(cuda_view(op->out), cuda_view(x),
                                                                              cuda_view(y), wd, op->eps);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}

// out[r * D + i] = (x[r, i] * s_r) * w[i] in the weight type T (cuda_store_as): the rows
// of rms_norm_f32 packed as a GEMM's B operand (same scale, same product), each value
// rounded once to T as pack_rows rounds rms_norm's output.
template <st_type T> __global__ void rms_norm_pack(char *__restrict__ out, st_cuda_view x, const float *__restrict__ w,
                                                   float eps) {
    __shared__ float shared[CUDA_NORM_MAX_THREADS / ST_GPU_WARP_SIZE];
    const int64_t D = x.ne0, rows = x.ne1 * x.ne2 * x.ne3;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *xr = (const float *)cuda_row(x, r);
        const float s = rms_row_scale(xr, D, eps, shared);
        if (cuda_vec4_row(xr, D) && cuda_vec4_row(w, D)) { // out + r * D 16-byte aligned: D a multiple of 4
            for (int64_t i = threadIdx.x; i < D / 4; i += blockDim.x)
                cuda_store4_as<T>(out, r * D + 4 * i, cuda_rms_scale4(((const float4 *)xr)[i], s, ((const float4 *)w)[i]));
        } else {
            for (int64_t i = threadIdx.x; i < D; i += blockDim.x) cuda_store_as<T>(out, r * D + i, (xr[i] * s) * w[i]);
        }
    }
}

st_status st_cuda_rms_norm_pack(st_cuda_ctx *c, char *out, st_type type, const st_tensor *x, const st_tensor *w,
                                float eps, st_error *err) {
    // x F32 [D, M...]; w F32 [D]; out [M][D] of type F16 or BF16
    (void)err;
    ST_ASSERT(cuda_is_f32_rows(x) && cuda_is_f32_rows(w) && w->ne[0] == x->ne[0] && cuda_nrows(w) == 1);
    ST_ASSERT(type == ST_TYPE_F16 || type == ST_TYPE_BF16);
    const int64_t D = x->ne[0], rows = cuda_nrows(x);
    if (rows == 0 || D == 0) return ST_OK;
    const unsigned int grid = (unsigned int)(rows < (1 << 30) ? rows : (1 << 30));
    if (type == ST_TYPE_F16)
        rms_norm_pack<ST_TYPE_F16><<<grid, cuda_norm_threads(D), 0, c->stream>>>(out, cuda_view(x),
                                                                                 (const float *)w->data, eps);
    else
        rms_norm_pack<ST_TYPE_BF16><<<grid, cuda_norm_threads(D), 0, c->stream>>>(out, cuda_view(x),
                                                                                  (const float *)w->data, eps);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}

// ---- RoPE -----------------------------------------------------------------------------------

// One block per (head, token) row. Thread t < n_rot/2 rotates pair t; the others copy the
// n_rot .. head_dim-1 pass-through dimensions. Angles in double as the CPU computes them
// (theta_i = pos * freq_scale * base^(-2i/n_rot) / factor_i), cos/sin rounded once to f32;
// the rotation with explicit roundings (no fused multiply-add), as the CPU's C does.
__global__ void rope_f32(st_cuda_view dst, st_cuda_view x, const int32_t *__restrict__ positions, int mode_neox,
                         int n_rot, float freq_base, float freq_scale, const float *__restrict__ freq_factors,
                         float attn_factor) {
    const int64_t head_dim = x.ne0, n_head = x.ne1, M = x.ne2;
    const int64_t n_work = n_rot / 2 + (head_dim - n_rot);
    for (int64_t r = blockIdx.x; r < n_head * M; r += gridDim.x) {
        const int64_t h = r % n_head, m = r / n_head;
        const float *xr = (const float *)(x.data + h * x.nb1 + m * x.nb2);
        float *yr = (float *)(dst.data + h * dst.nb1 + m * dst.nb2);
        const double pos = (double)positions[m] * (double)freq_scale;
        for (int64_t t = threadIdx.x; t < n_work; t += blockDim.x)
            rope_work(yr, xr, t, mode_neox, n_rot, pos, freq_base, freq_factors, attn_factor);
    }
}

static int rope_threads(int64_t n_work) { return n_work <= 32 ? 32 : n_work <= 64 ? 64 : 128; }

// The rotations of a step's positions, for its kernels to read instead of forming them
// (every layer of a step has the same positions): cs[m * n_rot/2 + t] = rope_cos_sin(t) at
// positions[m]. Block m: token m.
__global__ void rope_table_kernel(float2 *cs, const int32_t *__restrict__ positions, int n_rot, float freq_base,
                                  float freq_scale, const float *__restrict__ freq_factors, float attn_factor) {
    const int64_t m = blockIdx.x;
    const double pos = (double)positions[m] * (double)freq_scale;
    for (int t = threadIdx.x; t < n_rot / 2; t += blockDim.x)
        cs[m * (n_rot / 2) + t] = rope_cos_sin(t, n_rot, pos, freq_base, freq_factors, attn_factor);
}

st_status st_cuda_rope_table(st_backend *b, st_tensor *dst, const st_tensor *positions, const st_rope_params *p,
                             st_error *err) {
    // dst F32 [n_rot, M] packed; positions I32 [>= M]
    st_cuda_ctx *c = cuda_ctx(b);
    const int64_t M = dst->ne[1];
    ST_ASSERT(cuda_is_f32_rows(dst) && dst->ne[0] == p->n_rot && (uintptr_t)dst->data % 8 == 0 &&
              dst->nb[1] == (size_t)p->n_rot * sizeof(float) && dst->ne[2] == 1 && dst->ne[3] == 1);
    ST_ASSERT(cuda_is_i32_index(positions) && positions->ne[0] >= M && M >= 1 && M <= INT_MAX);
    if (p->n_rot < 2) return ST_OK;
    rope_table_kernel<<<(unsigned int)M, rope_threads(p->n_rot / 2), 0, c->stream>>>(
        (float2 *)dst->data, (const int32_t *)positions->data, p->n_rot, p->freq_base, p->freq_scale,
        p->freq_factors, p->attn_factor);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}

st_status st_cuda_rope(st_backend *b, st_tensor *dst, const st_tensor *x, const st_tensor *positions,
                       const st_rope_params *p, st_error *err) {
    // x, dst F32 [head_dim, n_head, M]; positions I32 [M]; p->freq_factors device [n_rot/2]
    st_cuda_ctx *c = cuda_ctx(b);
    ST_ASSERT(cuda_is_f32_rows(x) && cuda_is_f32_rows(dst) && cuda_same_shape(dst, x));
    ST_ASSERT(x->ne[3] == 1 && p != NULL);
    ST_ASSERT(p->mode == ST_ROPE_MODE_NORM || p->mode == ST_ROPE_MODE_NEOX);
    const int64_t head_dim = x->ne[0], n_head = x->ne[1], M = x->ne[2];
    ST_ASSERT(p->n_rot >= 0 && p->n_rot % 2 == 0 && p->n_rot <= head_dim && p->freq_base > 0.0f);
    ST_ASSERT(cuda_is_i32_index(positions) && positions->ne[0] >= M);
    const int64_t rows = n_head * M;
    if (rows == 0 || head_dim == 0) return ST_OK;
    const int64_t n_work = p->n_rot / 2 + (head_dim - p->n_rot);
    const int threads = rope_threads(n_work);
    const unsigned int grid = (unsigned int)(rows < (1 << 30) ? rows : (1 << 30));
    rope_f32<<<grid, threads, 0, c->stream>>>(cuda_view(dst), cuda_view(x), (const int32_t *)positions->data,
                                              p->mode == ST_ROPE_MODE_NEOX ? 1 : 0, p->n_rot, p->freq_base,
                                              p->freq_scale, p->freq_factors, p->attn_factor);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}

// ---- rope_store: per-head norms, RoPE and the cache store in one launch ------------------------

// Rows of token m: q heads 0 .. n_head-1, then k heads, then v heads. A row takes G threads
// (cuda_norm_threads(head_dim): the partial sums and tree of st_cuda_rms_norm's block), a block
// ROPE_STORE_THREADS / G rows of one token, whose rotations its rows read from shared
// memory: the step's table row of the token (rope_table), or formed once by the block
// (rope_cos_sin; the same bits either way, and as st_cuda_rope's).
#define ROPE_STORE_THREADS 256
#define ROPE_STORE_ROW_FLOATS 1024 // rows a block x head_dim: 8 x 128 (G 32) or 2 x 512 (G 128)

// Block (g, m): rows g R .. g R + R - 1 of token m (R = blockDim.x / G); token m's k and v go
// to cache slot slots[m] (its position in a contiguous cache); cs_table [M][n_rot/2] or
// NULL. The same arithmetic as st_cuda_rms_norm, st_cuda_rope and st_cuda_kv_store, in one
// kernel: a q/k row is normalised into shared memory, then roped from there in place.
template <st_type C>
__global__ void __launch_bounds__(ROPE_STORE_THREADS)
    rope_store_kernel(st_cuda_view q, st_cuda_view k, st_cuda_view v, const float *__restrict__ q_norm,
                      const float *__restrict__ k_norm, float eps, const int32_t *__restrict__ positions,
                      const int32_t *__restrict__ slots, int mode_neox, int n_rot, float freq_base,
                      float freq_scale, const float *__restrict__ freq_factors, float attn_factor,
                      const float2 *__restrict__ cs_table, int G, st_cuda_view kc, st_cuda_view vc,
                      st_cuda_op_error *op_err) {
    __shared__ float2 cs[ROPE_STORE_MAX_HEAD_DIM / 2];
    __shared__ float partial[ROPE_STORE_THREADS / ST_GPU_WARP_SIZE];
    __shared__ float rows_s[ROPE_STORE_ROW_FLOATS];
    const int64_t hd = q.ne0, n_head = q.ne1, n_head_kv = k.ne1, n_ctx = kc.ne2;
    const int64_t m = blockIdx.y, R = blockDim.x / G;
    const int64_t r = blockIdx.x * R + threadIdx.x / G, lane = threadIdx.x % G;
    const int32_t slot = slots[m];
    const bool store_ok = slot >= 0 && slot < n_ctx;
    if (blockIdx.x == 0 && threadIdx.x == 0 && !store_ok)
        cuda_report_op_error(op_err, ST_CUDA_OP_ERROR_KV_POSITION, slot, m, n_ctx);
    if (cs_table) {
        for (int t = threadIdx.x; t < n_rot / 2; t += blockDim.x) cs[t] = cs_table[m * (n_rot / 2) + t];
    } else {
        const double pos = (double)positions[m] * (double)freq_scale;
        for (int t = threadIdx.x; t < n_rot / 2; t += blockDim.x)
            cs[t] = rope_cos_sin(t, n_rot, pos, freq_base, freq_factors, attn_factor);
    }
    // every thread reaches each barrier below: a row past the last, or a v row, works on none
    const bool is_q = r < n_head, is_k = !is_q && r < n_head + n_head_kv, is_v = !is_q && !is_k && r < n_head + 2 * n_head_kv;
    const int64_t h = is_q ? r : is_k ? r - n_head : r - n_head - n_head_kv;
    float *xr = is_q ? (float *)(q.data + h * q.nb1 + m * q.nb2) : is_k ? (float *)(k.data + h * k.nb1 + m * k.nb2) : NULL;
    float *row_s = rows_s + (threadIdx.x / G) * hd;
    if (is_v && store_ok) {
        const float *vr = (const float *)(v.data + h * v.nb1 + m * v.nb2);
        char *out = vc.data + h * vc.nb1 + (int64_t)slot * vc.nb2;
        for (int64_t d = lane; d < hd; d += G) cuda_cache_store<C>(out, d, vr[d]);
    }
    const float *w = is_q ? q_norm : k_norm;
    if (w) { // (both norms or neither: the same in every thread)
        float ss = 0.0f;
        if (xr)
            for (int64_t i = lane; i < hd; i += G) ss = fmaf(xr[i], xr[i], ss);
        // the row's sum as block_sum_f32 forms it, over its group of G threads
        ss = cuda_group_sum_f32(ss, partial + (threadIdx.x / G) * (G / ST_GPU_WARP_SIZE), (int)lane, G);
        const float s = cuda_rms_scale(ss, hd, eps);
        if (xr)
            for (int64_t i = lane; i < hd; i += G) row_s[i] = (xr[i] * s) * w[i];
    } else if (xr) {
        for (int64_t i = lane; i < hd; i += G) row_s[i] = xr[i];
    }
    __syncthreads(); // the rotations and the rows in shared memory are complete
    const int64_t n_work = n_rot / 2 + (hd - n_rot);
    if (xr)
        for (int64_t t = lane; t < n_work; t += G)
            rope_rotate(xr, row_s, t, mode_neox, n_rot, t < n_rot / 2 ? cs[t] : make_float2(0.0f, 0.0f));
    __syncthreads(); // the roped k rows are complete (written by other threads)
    if (!is_k || !store_ok) return;
    char *out = kc.data + h * kc.nb1 + (int64_t)slot * kc.nb2;
    for (int64_t d = lane; d < hd; d += G) cuda_cache_store<C>(out, d, xr[d]);
}

st_status st_cuda_rope_store(st_backend *b, const st_fused_rope_store *op, st_error *err) {
    const st_tensor *q = op->q, *k = op->k, *v = op->v;
    const st_rope_params *p = op->rope;
    const int64_t hd = q->ne[0], M = q->ne[2];
    // the fused kernel holds a head row in shared memory; one grid row per token
    if (hd > ROPE_STORE_MAX_HEAD_DIM || M > ST_CUDA_MAX_GRID_Y) return st_fused_rope_store_composite(b, op, err);
    st_cuda_ctx *c = cuda_ctx(b);
    ST_ASSERT(cuda_is_f32_rows(q) && cuda_is_f32_rows(k) && cuda_is_f32_rows(v) && cuda_same_shape(k, v));
    ST_ASSERT(q->ne[3] == 1 && k->ne[0] == hd && k->ne[2] == M);
    ST_ASSERT((op->q_norm == NULL) == (op->k_norm == NULL));
    const bool whole = st_fused_rope_store_whole_norm(op);
    if (op->q_norm && !whole) ST_ASSERT(op->q_norm->ne[0] == hd && op->k_norm->ne[0] == hd);
    ST_ASSERT(p->mode == ST_ROPE_MODE_NORM || p->mode == ST_ROPE_MODE_NEOX);
    ST_ASSERT(p->n_rot >= 0 && p->n_rot % 2 == 0 && p->n_rot <= hd && p->freq_base > 0.0f);
    ST_ASSERT(cuda_is_i32_index(op->positions) && op->positions->ne[0] >= M);
    ST_ASSERT(cuda_is_i32_index(op->slots) && op->slots->ne[0] >= M);
    const st_tensor *kc = op->k_cache, *vc = op->v_cache;
    ST_ASSERT(kc->type == vc->type && (kc->type == ST_TYPE_F16 || kc->type == ST_TYPE_F32));
    ST_ASSERT(cuda_is_float_weight(kc) && cuda_same_shape(kc, vc) && kc->ne[0] == hd && kc->ne[1] == k->ne[1]);
    const int64_t rows = q->ne[1] + 2 * k->ne[1];
    if (M == 0 || hd == 0 || rows == 0) return ST_OK;
    if (whole) { // each token's whole q and k normalised first, as the composite does (the same bits)
        st_tensor qf = st_fused_heads_flat(q), kf = st_fused_heads_flat(k); // [hd n_head(_kv), M]
        const st_fused_norm_pair np = {{&qf, &kf}, {&qf, &kf}, {op->q_norm, op->k_norm}, {op->eps, op->eps}};
        const st_status s = st_cuda_norm_pair(b, &np, err);
        if (s != ST_OK) return s;
    }
    // a row's threads: the norm's, so that its partial sums are st_cuda_rms_norm's
    const int G = cuda_norm_threads(hd), R = ROPE_STORE_THREADS / G;
    ST_ASSERT(R * hd <= ROPE_STORE_ROW_FLOATS);
    const int threads = (int)(rows < R ? rows : R) * G;
    const dim3 grid((unsigned int)((rows + R - 1) / R), (unsigned int)M);
    const float *qn = op->q_norm && !whole ? (const float *)op->q_norm->data : NULL;
    const float *kn = op->k_norm && !whole ? (const float *)op->k_norm->data : NULL;
    const int neox = p->mode == ST_ROPE_MODE_NEOX ? 1 : 0;
    const int32_t *pos = (const int32_t *)op->positions->data, *slots = (const int32_t *)op->slots->data;
    const float2 *cs = NULL; // the step's rotations (rope_table), else formed per block
    if (op->rope_cs && p->n_rot >= 2) {
        ST_ASSERT(cuda_is_f32_rows(op->rope_cs) && op->rope_cs->ne[0] == p->n_rot && op->rope_cs->ne[1] >= M &&
                  op->rope_cs->nb[1] == (size_t)p->n_rot * sizeof(float) && (uintptr_t)op->rope_cs->data % 8 == 0);
        cs = (const float2 *)op->rope_cs->data;
    }
    if (kc->type == ST_TYPE_F16)
        rope_store_kernel<ST_TYPE_F16><<<grid, threads, 0, c->stream>>>(
            cuda_view(q), cuda_view(k), cuda_view(v), qn, kn, op->eps, pos, slots, neox, p->n_rot, p->freq_base,
            p->freq_scale, p->freq_factors, p->attn_factor, cs, G, cuda_view(kc), cuda_view(vc), c->d_op_error);
    else
        rope_store_kernel<ST_TYPE_F32><<<grid, threads, 0, c->stream>>>(
            cuda_view(q), cuda_view(k), cuda_view(v), qn, kn, op->eps, pos, slots, neox, p->n_rot, p->freq_base,
            p->freq_scale, p->freq_factors, p->attn_factor, cs, G, cuda_view(kc), cuda_view(vc), c->d_op_error);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}
