// Causal attention with GQA over the KV cache: the dispatcher, the exact f32 kernel, and
// the store of new keys/values into the cache.
//
// Cache: [head_dim, n_head_kv, n_ctx] F16 or F32 with strides; cache index = position.
// Query m at position p sees keys t with t <= p, t < n_kv and, with a window W > 0,
// p - t < W (cpu_ops.h, st_attn_params).
//
// Three paths (cuda_attention.h): split-KV decode (cuda_attention_decode.cu) for a few
// query rows, the tensor-core prefill over an F16 cache (cuda_attention_flash.cu), and the
// exact kernel here for everything else (an F32 cache in prefill, head_dim not 64/128/256,
// unaligned cache rows, devices or builds without the tensor-core path).
//
// The exact kernel: one block per (query head, token). The query sits in shared memory;
// keys are visited in tiles of ATTN_TILE with an online softmax (running max and sum, the
// accumulator rescaled when the max grows), so any n_kv fits in a fixed amount of shared
// memory. Within a tile each warp scores keys (lanes split head_dim, a shuffle sum), then
// every thread accumulates its own output dimensions over the tile's values. F32
// throughout: with an F32 cache it matches the CPU to f32 summation order.
#include <math.h>

#include "cuda/cuda_attention.cuh"

#define ATTN_THREADS 128
#define ATTN_TILE 64
#define ATTN_MAX_HEAD_DIM 512
#define ATTN_DIMS_PER_THREAD (ATTN_MAX_HEAD_DIM / ATTN_THREADS)

// ---- kv_store ---------------------------------------------------------------------------------

// cache[:, :, positions[m]] = x[:, :, m] converted (cuda_cache_store).

template <st_type T>
__device__ void kv_store_impl(st_cuda_view cache, st_cuda_view x, const int32_t *__restrict__ positions,
                              st_cuda_op_error *op_err) {
    const int64_t head_dim = x.ne0, n_head_kv = x.ne1, M = x.ne2, n_ctx = cache.ne2;
    const int64_t n = head_dim * n_head_kv;
    for (int64_t m = blockIdx.y; m < M; m += gridDim.y) {
        const int32_t pos = positions[m];
        if (pos < 0 || pos >= n_ctx) {
            if (blockIdx.x == 0 && threadIdx.x == 0)
                cuda_report_op_error(op_err, ST_CUDA_OP_ERROR_KV_POSITION, pos, m, n_ctx);
            continue;
        }
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
            const int64_t d = i % head_dim, h = i / head_dim;
            const float v = ((const float *)(x.data + h * x.nb1 + m * x.nb2))[d];
            cuda_cache_store<T>(cache.data + h * cache.nb1 + (int64_t)pos * cache.nb2, d, v);
        }
    }
}

__global__ void kv_store_f32(st_cuda_view cache, st_cuda_view x, const int32_t *positions, st_cuda_op_error *e) {
    kv_store_impl<ST_TYPE_F32>(cache, x, positions, e);
}
__global__ void kv_store_f16(st_cuda_view cache, st_cuda_view x, const int32_t *positions, st_cuda_op_error *e) {
    kv_store_impl<ST_TYPE_F16>(cache, x, positions, e);
}

static bool is_cache_type(st_type t) { return t == ST_TYPE_F16 || t == ST_TYPE_F32; }

st_status st_cuda_kv_store(st_backend *b, st_tensor *cache, const st_tensor *x, const st_tensor *positions,
                           st_error *err) {
    // x F32 [head_dim, n_head_kv, M]; cache F16/F32 [head_dim, n_head_kv, n_ctx]; positions I32 [M].
    // A position outside the context is reported by the next read/synchronize.
    st_cuda_ctx *c = cuda_ctx(b);
    ST_ASSERT(cuda_is_f32_rows(x) && x->ne[3] == 1);
    ST_ASSERT(is_cache_type(cache->type) && cuda_is_float_weight(cache) && cache->ne[3] == 1);
    ST_ASSERT(cache->ne[0] == x->ne[0] && cache->ne[1] == x->ne[1]);
    ST_ASSERT(cuda_is_i32_index(positions) && positions->ne[0] >= x->ne[2]);
    const int64_t n = x->ne[0] * x->ne[1], M = x->ne[2];
    if (n == 0 || M == 0) return ST_OK;
    const int threads = 256;
    unsigned int gx = cuda_blocks(n, threads);
    const dim3 grid(gx < 64 ? gx : 64, cuda_grid_y(M));
    const int32_t *pos = (const int32_t *)positions->data;
    if (cache->type == ST_TYPE_F16)
        kv_store_f16<<<grid, threads, 0, c->stream>>>(cuda_view(cache), cuda_view(x), pos, c->d_op_error);
    else
        kv_store_f32<<<grid, threads, 0, c->stream>>>(cuda_view(cache), cuda_view(x), pos, c->d_op_error);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}

// ---- attention --------------------------------------------------------------------------------

template <st_type T, bool PAGED>
__device__ void attention_impl(st_cuda_view dst, st_cuda_view q, st_cuda_view kc, st_cuda_view vc,
                               const int32_t *__restrict__ positions, int64_t n_kv, int32_t window, float scale,
                               float softcap, const attn_pages &pg) {
    __shared__ float q_s[ATTN_MAX_HEAD_DIM]; // [head_dim] the query
    __shared__ float p_s[ATTN_TILE];         // [tile] scores, then their exponentials
    const int64_t head_dim = q.ne0, n_head = q.ne1, M = q.ne2;
    const int64_t group = n_head / kc.ne1; // query heads per kv head
    const int warp = threadIdx.x / ST_GPU_WARP_SIZE, lane = threadIdx.x % ST_GPU_WARP_SIZE;
    const int n_warps = blockDim.x / ST_GPU_WARP_SIZE;

    for (int64_t r = blockIdx.x; r < n_head * M; r += gridDim.x) {
        const int64_t h = r % n_head, m = r / n_head, kvh = h / group;
        const float *qr = (const float *)(q.data + h * q.nb1 + m * q.nb2);
        float *out = (float *)(dst.data + h * dst.nb1 + m * dst.nb2);
        const int64_t pos = positions[m];
        const int64_t t_hi = pos < n_kv - 1 ? pos : n_kv - 1;
        int64_t t_lo = window > 0 ? pos - window + 1 : 0;
        if (t_lo < 0) t_lo = 0;
        if (t_hi < t_lo) { // sees nothing: defined as zeros
            for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) out[d] = 0.0f;
            continue;
        }
        __syncthreads(); // q_s and p_s of the previous row are no longer read
        for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) q_s[d] = qr[d];
        __syncthreads();

        float acc[ATTN_DIMS_PER_THREAD];
#pragma unroll
        for (int i = 0; i < ATTN_DIMS_PER_THREAD; i++) acc[i] = 0.0f;
        float run_max = -INFINITY, run_sum = 0.0f;
        const char *k_head = kc.data + kvh * kc.nb1;
        const char *v_head = vc.data + kvh * vc.nb1;
        const int32_t *blocks = PAGED ? attn_blocks(pg, m) : NULL;

        for (int64_t t0 = t_lo; t0 <= t_hi; t0 += ATTN_TILE) {
            const int nt = (int)(t_hi - t0 + 1 < ATTN_TILE ? t_hi - t0 + 1 : ATTN_TILE);
            for (int j = warp; j < nt; j += n_warps) {
                const int64_t t = t0 + j;
                const char *krow = k_head + (PAGED ? attn_slot(blocks, t) : t) * kc.nb2;
                float s = 0.0f;
                for (int64_t d = lane; d < head_dim; d += ST_GPU_WARP_SIZE) s = fmaf(q_s[d], cuda_load_f32<T>(krow, d), s);
                s = cuda_warp_sum(s);
                s *= scale;
                if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
                if (lane == 0) p_s[j] = s;
            }
            __syncthreads();
            float tile_max = -INFINITY;
            for (int j = 0; j < nt; j++) tile_max = fmaxf(tile_max, p_s[j]);
            const float new_max = fmaxf(run_max, tile_max);
            const float factor = expf(run_max - new_max); // 0 on the first tile (run_max = -inf)
            __syncthreads(); // every thread has read the scores
            for (int j = threadIdx.x; j < nt; j += blockDim.x) p_s[j] = expf(p_s[j] - new_max);
            __syncthreads();
            float tile_sum = 0.0f;
            for (int j = 0; j < nt; j++) tile_sum += p_s[j];
            run_sum = run_sum * factor + tile_sum;
#pragma unroll
            for (int i = 0; i < ATTN_DIMS_PER_THREAD; i++) {
                const int64_t d = threadIdx.x + (int64_t)i * blockDim.x;
                if (d >= head_dim) break;
                float a = acc[i] * factor;
                for (int j = 0; j < nt; j++) {
                    const int64_t t = t0 + j;
                    a = fmaf(p_s[j], cuda_load_f32<T>(v_head + (PAGED ? attn_slot(blocks, t) : t) * vc.nb2, d), a);
                }
                acc[i] = a;
            }
            run_max = new_max;
            __syncthreads(); // p_s is rewritten by the next tile
        }
#pragma unroll
        for (int i = 0; i < ATTN_DIMS_PER_THREAD; i++) {
            const int64_t d = threadIdx.x + (int64_t)i * blockDim.x;
            if (d >= head_dim) break;
            out[d] = acc[i] / run_sum;
        }
    }
}

template <bool PAGED>
__global__ void __launch_bounds__(ATTN_THREADS)
    attention_f32(st_cuda_view dst, st_cuda_view q, st_cuda_view kc, st_cuda_view vc, const int32_t *positions,
                  int64_t n_kv, int32_t window, float scale, float softcap, const attn_pages pg) {
    attention_impl<ST_TYPE_F32, PAGED>(dst, q, kc, vc, positions, n_kv, window, scale, softcap, pg);
}
template <bool PAGED>
__global__ void __launch_bounds__(ATTN_THREADS)
    attention_f16(st_cuda_view dst, st_cuda_view q, st_cuda_view kc, st_cuda_view vc, const int32_t *positions,
                  int64_t n_kv, int32_t window, float scale, float softcap, const attn_pages pg) {
    attention_impl<ST_TYPE_F16, PAGED>(dst, q, kc, vc, positions, n_kv, window, scale, softcap, pg);
}

// ---- the dispatcher ---------------------------------------------------------------------------

extern "C" const char *st_cuda_attn_path_name(st_cuda_attn_path path) {
    switch (path) {
    case ST_CUDA_ATTN_PATH_AUTO: return "auto";
    case ST_CUDA_ATTN_PATH_EXACT: return "exact";
    case ST_CUDA_ATTN_PATH_FLASH: return "flash";
    case ST_CUDA_ATTN_PATH_DECODE: return "decode";
    }
    return "?";
}

// Depends on the shapes, types, strides and the device, never on p->n_kv: a decode step
// recorded in a CUDA graph replays the same kernels at every depth.
extern "C" st_cuda_attn_path st_cuda_attention_choose(st_backend *b, const st_tensor *q, const st_tensor *k_cache,
                                                      const st_tensor *v_cache, const st_attn_params *p) {
    (void)p;
    if (st_cuda_attn_decode_supported(b, q, k_cache, v_cache)) return ST_CUDA_ATTN_PATH_DECODE;
    if (st_cuda_attn_flash_supported(b, q, k_cache, v_cache)) return ST_CUDA_ATTN_PATH_FLASH;
    return ST_CUDA_ATTN_PATH_EXACT;
}

static st_status attention_exact(st_backend *b, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                                 const st_tensor *v_cache, const st_tensor *positions, const attn_pages *pg,
                                 const st_attn_params *p, st_error *err) {
    st_cuda_ctx *c = cuda_ctx(b);
    const int64_t rows = q->ne[1] * q->ne[2];
    const unsigned int grid = (unsigned int)(rows < (1 << 30) ? rows : (1 << 30));
    const int32_t *pos = (const int32_t *)positions->data;
    const attn_pages none = {};
    const bool f16 = k_cache->type == ST_TYPE_F16;
    const st_cuda_view vd = cuda_view(dst), vq = cuda_view(q), vk = cuda_view(k_cache), vv = cuda_view(v_cache);
    if (pg && f16)
        attention_f16<true><<<grid, ATTN_THREADS, 0, c->stream>>>(vd, vq, vk, vv, pos, p->n_kv, p->window, p->scale,
                                                                   p->softcap, *pg);
    else if (pg)
        attention_f32<true><<<grid, ATTN_THREADS, 0, c->stream>>>(vd, vq, vk, vv, pos, p->n_kv, p->window, p->scale,
                                                                   p->softcap, *pg);
    else if (f16)
        attention_f16<false><<<grid, ATTN_THREADS, 0, c->stream>>>(vd, vq, vk, vv, pos, p->n_kv, p->window, p->scale,
                                                                    p->softcap, none);
    else
        attention_f32<false><<<grid, ATTN_THREADS, 0, c->stream>>>(vd, vq, vk, vv, pos, p->n_kv, p->window, p->scale,
                                                                    p->softcap, none);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}

// Queries m0 .. m0 + n - 1 of a [head_dim, n_head, M] view.
static st_tensor attn_queries(const st_tensor *t, int64_t m0, int64_t n) {
    st_tensor v = *t;
    v.data = (char *)t->data + (size_t)m0 * t->nb[2];
    v.ne[2] = n;
    v.nb[3] = v.nb[2] * (size_t)n;
    return v;
}

// Entries m0 .. m0 + n - 1 of an I32 [M] index.
static st_tensor attn_indices(const st_tensor *t, int64_t m0, int64_t n) {
    st_tensor v = *t;
    v.data = (char *)t->data + (size_t)m0 * t->nb[0];
    v.ne[0] = n;
    return v;
}

// One launch's worth of a path for the queries of q (all of one kind: contiguous, paged
// singles, or a paged run).
static st_status attention_launch(st_backend *b, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                                  const st_tensor *v_cache, const st_tensor *positions, const attn_pages *pg,
                                  const st_attn_params *p, st_cuda_attn_path path, st_error *err) {
    const int64_t head_dim = q->ne[0];
    st_tensor q1 = *q; // paged singles: the split-KV kernel takes them a block each
    if (pg && pg->seq) q1.ne[2] = 1;
    const bool decode_ok = (!pg || pg->seq) && st_cuda_attn_decode_supported(b, &q1, k_cache, v_cache);
    if (path == ST_CUDA_ATTN_PATH_AUTO) {
        if (pg && pg->seq) path = decode_ok ? ST_CUDA_ATTN_PATH_DECODE : ST_CUDA_ATTN_PATH_EXACT;
        else if (pg) // a run of one sequence: the tensor-core prefill, or the exact kernel
            path = st_cuda_attn_flash_supported(b, q, k_cache, v_cache) ? ST_CUDA_ATTN_PATH_FLASH
                                                                        : ST_CUDA_ATTN_PATH_EXACT;
        else path = st_cuda_attention_choose(b, q, k_cache, v_cache, p);
    }
    switch (path) {
    case ST_CUDA_ATTN_PATH_DECODE:
        if (!decode_ok) break;
        return st_cuda_attn_decode(b, dst, q, k_cache, v_cache, positions, pg, p, err);
    case ST_CUDA_ATTN_PATH_FLASH:
        if (!st_cuda_attn_flash_supported(b, q, k_cache, v_cache) || (pg && pg->seq)) break;
        return st_cuda_attn_flash(b, dst, q, k_cache, v_cache, positions, pg, p, err);
    case ST_CUDA_ATTN_PATH_EXACT:
        if (head_dim > ATTN_MAX_HEAD_DIM) break;
        return attention_exact(b, dst, q, k_cache, v_cache, positions, pg, p, err);
    case ST_CUDA_ATTN_PATH_AUTO: break;
    }
    return st_error_set(err, ST_ERROR_UNSUPPORTED,
                        "attention: the %s path does not take head_dim %lld, %lld/%lld heads, M %lld, %s cache%s",
                        st_cuda_attn_path_name(path), (long long)head_dim, (long long)q->ne[1],
                        (long long)k_cache->ne[1], (long long)q->ne[2], st_type_name(k_cache->type),
                        pg ? (pg->seq ? ", paged singles" : ", a paged run") : "");
}

extern "C" st_status st_cuda_attention_path(st_backend *b, st_tensor *dst, const st_tensor *q,
                                            const st_tensor *k_cache, const st_tensor *v_cache,
                                            const st_tensor *positions, const st_kv_pages *pages,
                                            const st_attn_params *p, st_cuda_attn_path path, st_error *err) {
    // q, dst F32 [head_dim, n_head, M]; k_cache, v_cache [head_dim, n_head_kv, n_slots] (one type)
    ST_ASSERT(cuda_is_f32_rows(q) && cuda_is_f32_rows(dst) && cuda_same_shape(dst, q));
    ST_ASSERT(q->ne[3] == 1 && p != NULL);
    ST_ASSERT(is_cache_type(k_cache->type) && k_cache->type == v_cache->type);
    ST_ASSERT(cuda_is_float_weight(k_cache) && cuda_is_float_weight(v_cache));
    ST_ASSERT(cuda_same_shape(k_cache, v_cache) && k_cache->ne[3] == 1);
    const int64_t head_dim = q->ne[0], n_head = q->ne[1], M = q->ne[2], n_head_kv = k_cache->ne[1];
    ST_ASSERT(k_cache->ne[0] == head_dim && n_head_kv > 0 && n_head % n_head_kv == 0);
    ST_ASSERT(p->n_kv >= 0 && p->window >= 0 && (pages || p->n_kv <= k_cache->ne[2]));
    ST_ASSERT(k_cache->ne[2] < INT_MAX && n_head * M < INT_MAX); // positions and rows fit an int on the device
    ST_ASSERT(cuda_is_i32_index(positions) && positions->ne[0] >= M);
    if (n_head * M == 0 || head_dim == 0) return ST_OK;
    if (!pages) return attention_launch(b, dst, q, k_cache, v_cache, positions, NULL, p, path, err);

    ST_ASSERT(cuda_is_i32_index(pages->table) && cuda_is_i32_index(pages->seq) && pages->seq->ne[0] >= M);
    ST_ASSERT(p->n_kv <= pages->table->ne[0] * ST_KV_BLOCK_TOKENS && pages->table->ne[0] < INT_MAX);
    attn_pages pg = {};
    pg.table = (const int32_t *)pages->table->data;
    pg.max_blocks = pages->table->ne[0];
    if (pages->n_single > 0) { // decode tokens, each its own sequence: one launch
        pg.seq = (const int32_t *)pages->seq->data;
        st_tensor qs = attn_queries(q, 0, pages->n_single), ds = attn_queries(dst, 0, pages->n_single);
        st_tensor ps = attn_indices(positions, 0, pages->n_single);
        const st_status s = attention_launch(b, &ds, &qs, k_cache, v_cache, &ps, &pg, p, path, err);
        if (s != ST_OK) return s;
    }
    pg.seq = NULL;
    for (int32_t i = 0; i < pages->n_runs; i++) {
        const st_attn_run *r = &pages->runs[i];
        ST_ASSERT(r->n == 0 || (r->m0 >= pages->n_single && r->n >= 1 && r->m0 + r->n <= M));
    }
    // prompt chunks: on the tensor-core prefill, many runs a launch (read from the device
    // where the runs are there too); else a launch each
    if (pages->n_runs > 0 && (path == ST_CUDA_ATTN_PATH_AUTO || path == ST_CUDA_ATTN_PATH_FLASH) &&
        st_cuda_attn_flash_supported(b, q, k_cache, v_cache)) {
        if (pages->runs_dev)
            return st_cuda_attn_flash_runs_dev(b, dst, q, k_cache, v_cache, positions, &pg, pages->runs_dev,
                                               pages->n_single, p, err);
        return st_cuda_attn_flash_runs(b, dst, q, k_cache, v_cache, positions, &pg, pages->runs, pages->n_runs, p, err);
    }
    for (int32_t i = 0; i < pages->n_runs; i++) {
        const st_attn_run *r = &pages->runs[i];
        if (r->n == 0) continue;
        pg.row = r->seq;
        st_tensor qs = attn_queries(q, r->m0, r->n), ds = attn_queries(dst, r->m0, r->n);
        st_tensor ps = attn_indices(positions, r->m0, r->n);
        const st_status s = attention_launch(b, &ds, &qs, k_cache, v_cache, &ps, &pg, p, path, err);
        if (s != ST_OK) return s;
    }
    return ST_OK;
}

bool st_cuda_attention_replays(st_backend *b, const st_tensor *q, const st_tensor *k_cache, const st_tensor *v_cache,
                               const st_kv_pages *pages) {
    return !pages || pages->n_runs == 0 || (pages->runs_dev && st_cuda_attn_flash_supported(b, q, k_cache, v_cache));
}

bool st_cuda_rope_attention_reads_table(st_backend *b, const st_fused_rope_attention *op) {
    return op->rs.rope->n_rot >= 2 && (op->rs.q->ne[2] == 1 || !st_cuda_attn_decode_rope_supported(b, op));
}

st_status st_cuda_rope_attention(st_backend *b, const st_fused_rope_attention *op, st_error *err) {
    if (st_cuda_attn_decode_rope_supported(b, op)) return st_cuda_attn_decode_rope(b, op, err);
    const st_fused_rope_store *rs = &op->rs;
    const st_status s = st_cuda_rope_store(b, rs, err);
    if (s != ST_OK) return s;
    return st_cuda_attention(b, op->out, rs->q, rs->k_cache, rs->v_cache, rs->positions, op->pages, op->attn, err);
}

st_status st_cuda_attention(st_backend *b, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                            const st_tensor *v_cache, const st_tensor *positions, const st_kv_pages *pages,
                            const st_attn_params *p, st_error *err) {
    return st_cuda_attention_path(b, dst, q, k_cache, v_cache, positions, pages, p, ST_CUDA_ATTN_PATH_AUTO, err);
}
