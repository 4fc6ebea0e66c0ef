// Shared by the attention files: cuda_attention.cu (dispatcher, kv_store, the exact f32
// kernel), cuda_attention_flash.cu (tensor-core prefill), cuda_attention_decode.cu
// (split-KV decode).
//
// Every path computes the contract of cpu_ops.h (st_attn_params): query m at position
// p = positions[m] sees cache entries t with t <= p, t < n_kv and, with a window W > 0,
// p - t < W; scores scale * q.k, soft-capped when softcap > 0; a query that sees nothing
// gets zeros. The fast paths keep scores in the base-2 domain (s * log2 e), so that the
// softmax runs on exp2f; the weights are the same numbers.
#ifndef STRIDE_CUDA_ATTENTION_CUH
#define STRIDE_CUDA_ATTENTION_CUH

#include <limits.h>

#include "cuda/cuda_attention.h"
#include "cuda/cuda_common.cuh"

// The tensor-core prefill is inline PTX (mma.sync, ldmatrix, cp.async: sm_80+). Build with
// -DSTRIDE_ATTN_PORTABLE (a HIP build does so by itself) to leave it out: AUTO then takes
// the split-KV and exact kernels, which are plain CUDA C.
#if !defined(STRIDE_ATTN_PORTABLE) && !defined(__HIP_PLATFORM_AMD__)
#define ST_ATTN_HAVE_MMA 1
#else
#define ST_ATTN_HAVE_MMA 0
#endif

#define ST_ATTN_LOG2E 1.4426950408889634f

// The keys query position pos sees: [*lo, *hi], empty when *hi < *lo. The host asserts
// n_kv <= n_ctx < 2^31, so both fit an int.
__device__ __forceinline__ void attn_visible_range(int32_t pos, int64_t n_kv, int32_t window, int *lo, int *hi) {
    const int64_t h = (int64_t)pos < n_kv - 1 ? (int64_t)pos : n_kv - 1;
    int64_t l = window > 0 ? (int64_t)pos - window + 1 : 0;
    if (l < 0) l = 0;
    *lo = (int)l;
    *hi = (int)(h < -1 ? -1 : h);
}

// Where a launch's queries find their keys in a paged cache (ops.h, st_kv_pages): the
// block table, and per query its row (seq), or one row for the whole launch (a run of one
// sequence's queries: seq NULL). Kernels take it with a PAGED template flag; without it
// key t is at cache slot t (one sequence, contiguous).
typedef struct attn_pages {
    const int32_t *table; // [n_seq][max_blocks]
    const int32_t *seq;   // [M] per query, or NULL: `row` for every query
    int64_t max_blocks;
    int32_t row;
} attn_pages;

// Several runs of one launch (the tensor-core prefill over a step's prompt chunks, one
// grid): run i holds queries m0[i] .. m0[i] + n[i] - 1 of the launch's q, its keys at block
// table row row[i], and the grid's row tiles first_tile[i] .. first_tile[i + 1] - 1. A
// kernel parameter (by value): ATTN_MAX_RUNS runs a launch. Or, with dev set, the runs in
// device memory (a recorded step replays them as the step uploads them): I32 [3, n_runs]
// (m0, n, row) each, n = 0 an unused slot; the grid then has dev_tiles row tiles, at
// least every run's, and a block past them does nothing.
#define ATTN_MAX_RUNS 32
typedef struct attn_runs {
    int n_runs; // 0: one run, the launch's whole q (at pg's row, or contiguous)
    int first_tile[ATTN_MAX_RUNS + 1];
    int m0[ATTN_MAX_RUNS], n[ATTN_MAX_RUNS], row[ATTN_MAX_RUNS];
    const int32_t *dev;
    int dev_tiles;
} attn_runs;

// The block table row of query m.
__device__ __forceinline__ const int32_t *attn_blocks(const attn_pages &pg, int64_t m) {
    return pg.table + (int64_t)(pg.seq ? pg.seq[m] : pg.row) * pg.max_blocks;
}

// The cache slot of key t (a position) of a sequence with block table row `blocks`.
__device__ __forceinline__ int64_t attn_slot(const int32_t *blocks, int64_t t) {
    return (int64_t)blocks[t / ST_KV_BLOCK_TOKENS] * ST_KV_BLOCK_TOKENS + t % ST_KV_BLOCK_TOKENS;
}

// A score in the base-2 domain: log2(e) * (softcap > 0 ? softcap * tanh(s / softcap) : s),
// s = scale * dot (the CPU reference's formula, then one multiplication).
__device__ __forceinline__ float attn_score_log2(float dot, float scale, float softcap) {
    float s = dot * scale;
    if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
    return s * ST_ATTN_LOG2E;
}

// Cache rows the fast paths read with 16-byte loads: data, nb1 and nb2 16-byte aligned.
static inline bool attn_cache_rows_aligned(const st_tensor *t) {
    return ((uintptr_t)t->data % 16) == 0 && t->nb[1] % 16 == 0 && t->nb[2] % 16 == 0;
}

static inline bool attn_fast_head_dim(int64_t head_dim) {
    return head_dim == 64 || head_dim == 128 || head_dim == 256;
}

// ---- cuda_attention_flash.cu --------------------------------------------------------------

// Whether the tensor-core prefill takes these operands (F16 cache, head_dim 64/128/256,
// aligned rows, an sm_80+ device, built with ST_ATTN_HAVE_MMA).
bool st_cuda_attn_flash_supported(st_backend *b, const st_tensor *q, const st_tensor *k_cache,
                                  const st_tensor *v_cache);
// pg: NULL for a contiguous cache, else one run of a sequence (pg->seq NULL, pg->row set).
st_status st_cuda_attn_flash(st_backend *b, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                             const st_tensor *v_cache, const st_tensor *positions, const attn_pages *pg,
                             const st_attn_params *p, st_error *err);
// The runs of a paged step (queries of q and dst [head_dim, n_head, M] by their index m,
// positions [M]; pg's table) in launches of up to ATTN_MAX_RUNS runs each; runs with n = 0
// are skipped.
st_status st_cuda_attn_flash_runs(st_backend *b, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                                  const st_tensor *v_cache, const st_tensor *positions, const attn_pages *pg,
                                  const st_attn_run *runs, int32_t n_runs, const st_attn_params *p, st_error *err);
// The same runs read from device memory when the kernel runs (runs_dev I32 [3, n_runs]:
// m0, n, row; the queries m0 .. m0 + n - 1 all at or after n_single), in one launch sized
// for any runs of queries n_single .. M - 1.
st_status st_cuda_attn_flash_runs_dev(st_backend *b, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                                      const st_tensor *v_cache, const st_tensor *positions, const attn_pages *pg,
                                      const st_tensor *runs_dev, int64_t n_single, const st_attn_params *p,
                                      st_error *err);

// ---- cuda_attention_decode.cu -------------------------------------------------------------

// Whether the split-KV kernel takes these operands (head_dim 64/128/256, aligned rows,
// M * group query rows within its shared-memory budget). Independent of n_kv.
bool st_cuda_attn_decode_supported(st_backend *b, const st_tensor *q, const st_tensor *k_cache,
                                   const st_tensor *v_cache);
// pg: NULL for a contiguous cache (the M queries of one sequence in each block), else
// every query its own sequence (pg->seq set): a block a query, the grid's z over them.
st_status st_cuda_attn_decode(st_backend *b, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                              const st_tensor *v_cache, const st_tensor *positions, const attn_pages *pg,
                              const st_attn_params *p, st_error *err);
// st_fused_rope_attention for one token in the split-KV kernel: the queries and the new key
// normed and roped in it, the new key and value stored by the block that needs them (the
// same bits as st_cuda_rope_store then st_cuda_attn_decode); q and k are left as they came.
// Takes what st_cuda_attn_decode_rope_supported (cuda_attention.h) accepts: one token over
// a contiguous cache, or paged decode tokens, each its own sequence.
st_status st_cuda_attn_decode_rope(st_backend *b, const st_fused_rope_attention *op, st_error *err);

#endif /* STRIDE_CUDA_ATTENTION_CUH */
