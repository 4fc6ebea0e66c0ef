/*
 * stride: the CPU reference ops.
 *
 * Plain C11 + OpenMP. These are the ops the model code reaches through the backend's
 * function table; every CUDA op is checked against them. Readable first, then reasonably
 * fast (the matmul blocks and threads; nothing uses intrinsics).
 *
 * CONVENTIONS (see tensor.h for the dimension convention):
 *  - Every operand is an st_tensor descriptor: type, ne[4], nb[4] (byte strides), data.
 *    Every op honours nb[1..3] for every operand: rows may be padded (a weight at its
 *    planned stride) and activations may be views (a slice of heads out of a fused qkv
 *    row). nb[0] must be the element size: the contiguous dimension is contiguous.
 *  - Activations are F32. Weights are F32, F16 or BF16 at any row stride, or quantized
 *    (q4_0, q4_1, q5_0, q5_1, q8_0, q2_K..q6_K, q8_K: see quant.h), packed, with nb[0]
 *    the block size in bytes and K a whole number of blocks. Quantized weights stay
 *    quantized in memory: the products dequantize a block of rows at a time into their
 *    f32 scratch. The KV cache is F16 or F32.
 *  - A weight's type comes from a file: an unsupported one (iq2_xxs, ...) is
 *    ST_ERROR_UNSUPPORTED naming the type, not an assert.
 *  - Shape and type mismatches are programmer errors: they abort through ST_ASSERT at
 *    the op's entry. An op returns st_status only where the input itself can be bad
 *    (token ids, cache positions) or where it allocates scratch memory.
 *  - Results do not depend on the thread count nor on the row stride: every output
 *    element is computed by one thread, in one fixed summation order.
 *  - Index arrays (ids, positions) are plain packed int32 host arrays.
 *  - dst may alias an input only where an op says so.
 */
#ifndef STRIDE_CPU_OPS_H
#define STRIDE_CPU_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "stride/ops.h"
#include "stride/status.h"
#include "stride/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- threads ------------------------------------------------------------------------- */

/* Threads the CPU ops use (OpenMP's team size); n <= 0 restores the default (all cores).
 * Without OpenMP the ops run on one thread and this does nothing. */
void st_cpu_set_threads(int n);
int st_cpu_get_threads(void);

/* ---- row lookup and products --------------------------------------------------------- */

/* dst[:, m] = src[:, ids[m]].
 *   dst F32 [K, M]; src F32/F16/BF16 [K, V] at any row stride (a padded tied embedding
 *   works) or quantized (each row dequantized); ids int32 [M]. ST_ERROR_INVALID when an
 *   id is outside [0, V); ST_ERROR_UNSUPPORTED for a type stride cannot read. */
st_status st_cpu_get_rows(st_tensor *dst, const st_tensor *src, const int32_t *ids, st_error *err);

/* y[n, m] = sum_k W[n, k] * x[m, k]  (ggml's mul_mat; F32 accumulation).
 *   dst F32 [N, M]; w F32/F16/BF16 [K, N] at any row stride nb[1], or quantized (its
 *   rows dequantized to f32 exactly, then the same dot product); x F32 [K, M].
 * Each output is one dot product over the whole row of W in a fixed order (8 interleaved
 * partial sums, combined pairwise, then the tail), so the result is bit-identical for
 * every row stride and every thread count. ST_ERROR_NOMEM when scratch allocation fails;
 * ST_ERROR_UNSUPPORTED for a weight type stride cannot read. */
st_status st_cpu_mul_mat(st_tensor *dst, const st_tensor *w, const st_tensor *x, st_error *err);

/* MoE product over selected experts (ggml's mul_mat_id):
 *   dst[:, j, m] = W[ids[m * n_used + j]] . x_slot(j, m)
 *   dst F32 [N, n_used, M]; w F32/F16/BF16 [K, N, E] at any nb[1], nb[2], or quantized;
 *   ids int32 [n_used, M] packed (ids[m * n_used + j]: slot j of token m);
 *   x F32, either one input per token, shared by its slots: [K, M] (ne = {K, M, 1}) or
 *   [K, 1, M]; or one input per slot: [K, n_used, M] (the down projection, whose input
 *   is each expert's own activation).
 * Each output equals what st_cpu_mul_mat gives for that expert's matrix, bit for bit.
 * Expert ids are checked (ST_ERROR_INVALID outside [0, E)): they come from data.
 * ST_ERROR_UNSUPPORTED for a weight type stride cannot read. */
st_status st_cpu_mul_mat_id(st_tensor *dst, const st_tensor *w, const st_tensor *x,
                            const int32_t *ids, st_error *err);

/* ---- normalisation ------------------------------------------------------------------- */

/* RMSNorm along ne[0] of every row (any ne[1..3]):
 *   dst = x / sqrt(mean(x^2) + eps) * w           (plus_one false)
 *   dst = x / sqrt(mean(x^2) + eps) * (1 + w)     (plus_one true: Gemma as Hugging Face
 *                                                  stores it; llama.cpp's converter folds
 *                                                  the +1 into gemma GGUF weights instead)
 * x, dst F32 [D, ...] with strides (e.g. [head_dim, n_head, M] for q/k norm); w F32 [D]
 * contiguous, or NULL for no scale (plus_one is then ignored). The sum of squares is
 * accumulated in double. dst may be x. */
void st_cpu_rms_norm(st_tensor *dst, const st_tensor *x, const st_tensor *w, float eps,
                     bool plus_one);

/* ---- rotary position embedding ------------------------------------------------------- */

/* dst, x F32 [head_dim, n_head, M] with strides; positions int32 [M].
 * Angles are computed in double (theta_i = pos * freq_scale * base^(-2i/n_rot) / f_i),
 * then cos/sin rounded to f32. dst may be x. */
void st_cpu_rope(st_tensor *dst, const st_tensor *x, const int32_t *positions,
                 const st_rope_params *p);

/* ---- softmax and activations --------------------------------------------------------- */

/* dst = softmax(scale * x) along ne[0] of every row; max-subtracted, f32 exponentials
 * summed in double. dst may be x. */
void st_cpu_softmax(st_tensor *dst, const st_tensor *x, float scale);

/* Elementwise; dst and x of one shape (any strides). dst may be x. */
void st_cpu_silu(st_tensor *dst, const st_tensor *x);      /* x * sigmoid(x) */
void st_cpu_gelu_tanh(st_tensor *dst, const st_tensor *x); /* 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))) */

/* Gated units: dst = act(gate) * up; dst, gate, up of one shape [F, ...]. dst may be
 * gate or up. */
void st_cpu_swiglu(st_tensor *dst, const st_tensor *gate, const st_tensor *up);
void st_cpu_geglu(st_tensor *dst, const st_tensor *gate, const st_tensor *up);

/* The same over one fused tensor gu [2F, ...]: gate = gu[0:F], up = gu[F:2F] (phi3's
 * gate_up_proj: Hugging Face chunks it as (gate, up), and llama.cpp's ggml_swiglu applies
 * the activation to the first half). dst [F, ...]. */
void st_cpu_swiglu_fused(st_tensor *dst, const st_tensor *gu);
void st_cpu_geglu_fused(st_tensor *dst, const st_tensor *gu);

/* dst = a + b, dst = a * b. b has a's shape or broadcasts: each b->ne[i] is a->ne[i] or 1
 * (a [D] vector over rows, a [D, 1, M] bias over heads, ...). dst may be a. */
void st_cpu_add(st_tensor *dst, const st_tensor *a, const st_tensor *b);
void st_cpu_mul(st_tensor *dst, const st_tensor *a, const st_tensor *b);

/* dst = s * x. dst may be x. */
void st_cpu_scale(st_tensor *dst, const st_tensor *x, float s);

/* ---- attention ----------------------------------------------------------------------- */

/* Causal attention with GQA over a KV cache:
 *   dst F32 [head_dim, n_head, M]; q F32 [head_dim, n_head, M] (strided views welcome);
 *   k_cache, v_cache F16 or F32 [head_dim, n_head_kv, n_ctx] with strides;
 *   positions int32 [M]: query m sees cache entries t <= positions[m] (and t < n_kv,
 *   and inside the window). Query head h reads kv head h / (n_head / n_head_kv).
 * Scores and softmax in f32 with max subtraction; a query that sees no key (impossible
 * when its own position is in the cache) gets zeros. ST_ERROR_NOMEM on scratch failure. */
st_status st_cpu_attention(st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                           const st_tensor *v_cache, const int32_t *positions,
                           const st_attn_params *p, st_error *err);

/* The same over a paged cache (ops.h): query m belongs to the sequence whose block table
 * row is seq[m]; table int32 [n_seq][max_blocks] (row-major); key t of query m lives at
 * st_kv_slot(table + seq[m] * max_blocks, t). n_kv bounds the positions (<= max_blocks *
 * ST_KV_BLOCK_TOKENS). table NULL: st_cpu_attention (seq and max_blocks unused). */
st_status st_cpu_attention_paged(st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                                 const st_tensor *v_cache, const int32_t *positions,
                                 const int32_t *seq, const int32_t *table, int32_t max_blocks,
                                 const st_attn_params *p, st_error *err);

/* cache[:, :, positions[m]] = convert(x[:, :, m]): x F32 [head_dim, n_head_kv, M],
 * cache F16 or F32 [head_dim, n_head_kv, n_slots] (F16: round to nearest even);
 * positions are cache slots (a token's position in a contiguous cache, its paged slot
 * otherwise). ST_ERROR_INVALID when a slot is outside [0, n_slots) (the context is full). */
st_status st_cpu_kv_store(st_tensor *cache, const st_tensor *x, const int32_t *positions,
                          st_error *err);

/* ---- MoE routing --------------------------------------------------------------------- */

/* Chooses k experts per token from router logits F32 [E, M] (strided).
 *   softmax_first true:  p = softmax(logits over all E); the k largest p are chosen and
 *                        their weights are p (OLMoE, Qwen-MoE, Mixtral as trained);
 *   softmax_first false: the k largest logits are chosen and their weights are the
 *                        softmax over those k logits only.
 *   normalize: the k weights are then divided by their sum (HF's norm_topk_prob; OLMoE's
 *              released config has it false, Qwen3-MoE true).
 * out_ids int32 [k, M] packed (out_ids[m * k + j]), in decreasing order of weight, ties
 * to the lower expert index; out_weights F32 [k, M] with strides. */
void st_cpu_topk_route(int32_t *out_ids, st_tensor *out_weights, const st_tensor *logits,
                       int32_t k, bool softmax_first, bool normalize);

/* ---- sampling support ------------------------------------------------------------------ */

/* The k largest logits of each row, for a sampler that needs no more of the row:
 *   logits F32 [V, n]; ids int32 [k, n] packed; vals F32 [k + 1, n]: the k logits in
 *   decreasing order (ties to the lower id, the sampler's candidate order), then the row's
 *   log-sum-exp (log sum_t exp(logit_t), summed in double: a token's log-probability is
 *   its logit minus it). 1 <= k <= V. */
void st_cpu_top_k_logits(int32_t *ids, st_tensor *vals, const st_tensor *logits, int32_t k);

/* A token from each whole row, where the logits are (st_sampler_next_draw's parameters):
 *   logits F32 [V, n]; params F32 [6, n]: temperature (> 0; 0: the row is not drawn and
 *   its outputs are left as they are), min-p, top-p (1: off), the repeat, frequency and
 *   presence penalties; words I32 [4, n]: the uniform's two words (st_rng_uniform_words),
 *   top-k (0: off), the number of penalized tokens; penalized I32
 *   [2 ST_DRAW_MAX_PENALIZED, n]: (token id, count) pairs, distinct ids; ids I32 [n]: the
 *   token, -1 when the row holds a NaN or +inf, -2 when it holds no finite value; drawn
 *   F32 [n]: the token's logit (before penalties).
 * The token is st_sampler_sample's for the chain st_sampler_next_draw describes: the
 * penalties, top-k, top-p (without either the tokens stay in id order; with them the
 * sorted row's first k, then the shortest head whose probability reaches top-p, in that
 * order), the tokens whose logit is at least max + log(min-p), logit / temperature, the
 * draw at the uniform (st_sample_draw_at). */
void st_cpu_draw_rows(st_tensor *ids, st_tensor *drawn, const st_tensor *logits, const st_tensor *params,
                      const st_tensor *words, const st_tensor *penalized);

/* Combines the chosen experts' outputs: dst[:, m] = sum_j weights[j, m] * src[:, j, m],
 * summed in slot order j = 0, 1, ... (a fixed order: results do not depend on threads).
 *   dst F32 [D, M]; src F32 [D, k, M]; weights F32 [k, M]; all with strides. */
void st_cpu_moe_combine(st_tensor *dst, const st_tensor *src, const st_tensor *weights);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_CPU_OPS_H */
