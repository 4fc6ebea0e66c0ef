/* The CUDA backend: device memory in the planned (padded) layout and every op of the
 * backend table on one stream. Called from src/backend/backend.c in builds with
 * STRIDE_HAVE_CUDA. */
#ifndef STRIDE_CUDA_BACKEND_H
#define STRIDE_CUDA_BACKEND_H

#include "backend/fused.h"
#include "cuda/cuda_tuning.h"
#include "stride/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the products switch from the own matrix-vector kernels to cuBLAS, in columns
 * (tokens), by measurement on the H200:
 *   float weights: cuBLAS from 2 columns (summed over a layer's products, cuBLAS is
 *     faster from M = 2 on llama-3.2-1b and qwen3-8b shapes; only a single 8 MB matrix
 *     keeps the GEMV ahead up to M = 5);
 *   quantized weights (dequantize + GEMM) and MoE prompts grouped by expert (which read
 *     the expert ids on the host): from 8, not re-measured. */
#define ST_CUDA_GEMM_MIN_M 2
#define ST_CUDA_QGEMM_MIN_M 8
#define ST_CUDA_MOE_GROUPED_MIN_M 8

/* The CUDA backend on device `index` with its tuning for that device (cuda_tuning.h: the
 * defaults, then STRIDE_CUDA_TUNING's overrides). */
st_status st_backend_cuda_init(int index, st_backend **out, st_error *err);
/* The same with the given tuning (NULL: as above); what the device cannot run (cp.async
 * before sm_80, early launch before sm_90) is turned off. */
st_status st_backend_cuda_init_tuned(int index, const st_cuda_tuning *tune, st_backend **out, st_error *err);

/* ---- what the planner (cuda_graph.cu) runs; the GPU tests call them directly ---------- */

/* The fused ops (backend/fused.h) on their kernels; where the kernels do not take the
 * operands, their composites. */
st_status st_cuda_mul_mat_fused(st_backend *b, const st_fused_mul_mat *op, st_error *err);
/* A gated unit's result handed to the product that reads it, in the weights' type: whether
 * the cuBLAS path takes both glu (SWIGLU/GEGLU, its weights one GEMM) and next (ADD of W
 * times glu's out, no norm, weights of glu's type). The planner checks that nothing else
 * reads out; then glu runs with hand_over (its unit written into the context's hand-off
 * buffer [M][F], out left unwritten) and next, right after, with handed (its x read from
 * there, not packed). Same values as the two run plainly. */
bool st_cuda_glu_hands_off(const st_fused_mul_mat *glu, const st_fused_mul_mat *next);
st_status st_cuda_mul_mat_fused_handoff(st_backend *b, const st_fused_mul_mat *op, bool hand_over, bool handed,
                                        st_error *err);
st_status st_cuda_rope_store(st_backend *b, const st_fused_rope_store *op, st_error *err);
/* The experts' unit or down product: one kernel each for the decode path's slots (fewer
 * than ST_CUDA_MOE_GROUPED_MIN_M tokens, or while recording), float experts. */
st_status st_cuda_moe_fused(st_backend *b, const st_fused_moe *op, st_error *err);
/* A post-norm into the residual in one pass over each row (h is not written). */
st_status st_cuda_norm_add(st_backend *b, const st_fused_norm_add *op, st_error *err);
/* A router's product and its routing in one launch (decode: the last block of a token
 * routes it); the composite elsewhere. */
st_status st_cuda_moe_route_fused(st_backend *b, const st_fused_moe_route *op, st_error *err);
/* Two independent norms of one width in one launch. */
st_status st_cuda_norm_pair(st_backend *b, const st_fused_norm_pair *op, st_error *err);
/* One token: the rope and the store folded into the decode attention kernel. */
st_status st_cuda_rope_attention(st_backend *b, const st_fused_rope_attention *op, st_error *err);
/* Whether st_cuda_rope_attention's kernels read op's rope_cs: rope_store reads every
 * token's row, the decode kernels one token's (several decode tokens form their own). */
bool st_cuda_rope_attention_reads_table(st_backend *b, const st_fused_rope_attention *op);
/* dst [n_rot, M] F32, rows packed: row m = the (cos, sin) of each rotated pair at
 * positions[m] under p, as RoPE forms them: the rope_cs of a step's fused ops. */
st_status st_cuda_rope_table(st_backend *b, st_tensor *dst, const st_tensor *positions, const st_rope_params *p,
                             st_error *err);
/* Whether a one-token normed product (op, x_w not set) runs faster from the x * norm_w the
 * residual add before it can prepare (st_fused_mul_mat's next_h, then x_w). The answer
 * depends on shapes, not strides, so padding on and off take the same path. */
bool st_cuda_prepared_norm_pays(st_backend *b, const st_fused_mul_mat *op);

/* Recording the backend's stream as a CUDA graph and replaying it. Between begin and end
 * the ops are recorded, not run; nothing may allocate or wait (a buffer that would grow
 * fails the recording, which end reports). end always ends the recording. A recording
 * stays valid while the memory it addresses lives (buffers the backend grows later are
 * retired, not freed, until the backend goes). */
typedef struct st_cuda_recording st_cuda_recording;
st_status st_cuda_record_begin(st_backend *b, st_error *err);
st_status st_cuda_record_end(st_backend *b, st_cuda_recording **out, st_error *err);
st_status st_cuda_record_launch(st_backend *b, const st_cuda_recording *r, st_error *err);
void st_cuda_record_free(st_backend *b, st_cuda_recording *r);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_CUDA_BACKEND_H */
