/*
 * The CUDA attention paths by name, for the GPU op test, which checks each path on the
 * same shapes. The backend table calls st_cuda_attention
 * (cuda_common.cuh), which is st_cuda_attention_path(..., ST_CUDA_ATTN_PATH_AUTO, ...).
 *
 *   EXACT   one block per (query head, token), f32 math, any head_dim <= 512, F16 or F32
 *           cache: the reference-grade path and the fallback for every other shape.
 *   FLASH   prefill over an F16 cache on tensor cores (mma.sync, sm_80+): q and P rounded
 *           to f16, f32 accumulation; head_dim 64, 128, 256; 16-byte aligned cache rows.
 *   DECODE  split-KV for a few queries (M * group rows <= a per-head_dim limit): f32 math,
 *           F16 or F32 cache; its launch does not depend on n_kv (CUDA-graph replay).
 *
 * AUTO picks DECODE when it takes the shape, else FLASH, else EXACT. A forced path that
 * does not take the shape returns ST_ERROR_UNSUPPORTED and launches nothing.
 */
#ifndef STRIDE_CUDA_ATTENTION_H
#define STRIDE_CUDA_ATTENTION_H

#include "backend/fused.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum st_cuda_attn_path {
    ST_CUDA_ATTN_PATH_AUTO = 0,
    ST_CUDA_ATTN_PATH_EXACT,
    ST_CUDA_ATTN_PATH_FLASH,
    ST_CUDA_ATTN_PATH_DECODE,
} st_cuda_attn_path;

/* "auto", "exact", "flash", "decode" */
const char *st_cuda_attn_path_name(st_cuda_attn_path path);

/* The path AUTO takes for these operands (the arguments of st_cuda_attention). */
st_cuda_attn_path st_cuda_attention_choose(st_backend *b, const st_tensor *q, const st_tensor *k_cache,
                                           const st_tensor *v_cache, const st_attn_params *p);

/* Whether st_fused_rope_attention runs as one kernel (one token, a shape the DECODE path
 * takes, the rope_store preconditions); otherwise the backend runs its composite. */
bool st_cuda_attn_decode_rope_supported(st_backend *b, const st_fused_rope_attention *op);

/* st_cuda_attention on a chosen path. With pages (a paged cache), the decode tokens take
 * it in one launch and each prompt run in one of its own (the DECODE path takes only the
 * decode tokens, FLASH only the runs; AUTO picks per launch). */
st_status st_cuda_attention_path(st_backend *b, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                                 const st_tensor *v_cache, const st_tensor *positions, const st_kv_pages *pages,
                                 const st_attn_params *p, st_cuda_attn_path path, st_error *err);

/* Whether an attention over these operands may be recorded and replayed with new runs
 * (st_kv_pages): it has none, or reads them from runs_dev (the tensor-core prefill). */
bool st_cuda_attention_replays(st_backend *b, const st_tensor *q, const st_tensor *k_cache, const st_tensor *v_cache,
                               const st_kv_pages *pages);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_CUDA_ATTENTION_H */
