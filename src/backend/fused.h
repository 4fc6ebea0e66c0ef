/*
 * Fused ops: what a backend's planner forms out of a step's plain nodes (graph.h) when it
 * runs several of them as one kernel, with their meaning as those plain ops (the
 * composites, run through any backend's table: the reference of a fused kernel in the
 * tests, and a planner's fallback for the operands its kernels do not take).
 *
 * Backend-internal: the model code never sees these; it issues plain ops.
 */
#ifndef STRIDE_BACKEND_FUSED_H
#define STRIDE_BACKEND_FUSED_H

#include "stride/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a fused product does with its results (st_fused_mul_mat). */
typedef enum st_fused_epilogue {
    ST_FUSED_EPILOGUE_STORE = 0,  /* y[i] = W_i h                                  */
    ST_FUSED_EPILOGUE_ADD = 1,    /* out += W_0 h            (a residual add)      */
    ST_FUSED_EPILOGUE_SWIGLU = 2, /* out = silu(W_0 h) * (W_1 h)                   */
    ST_FUSED_EPILOGUE_GEGLU = 3,  /* out = gelu_tanh(W_0 h) * (W_1 h)              */
} st_fused_epilogue;

/* A product of a step with what surrounds it: up to three weights applied to
 * one input, the input optionally RMS-normalised first, the results optionally combined
 * by a gated unit or added to a residual. Its meaning is the sequence of plain ops that
 * st_fused_mul_mat_composite runs; a backend that fuses it (one kernel for the
 * decode path) must give the same values up to summation order.
 *
 *   x [K, M] F32;  w[i] [K, N_i];  y[i] [N_i, M] F32
 *   h = norm_w ? rmsnorm(x) * norm_w : x        (h [K, M]: where it goes when formed)
 *   y[i] = W_i h                                 (i < n_w)
 *   ADD: out [N_0, M] += y[0];  SWIGLU/GEGLU: out [N_0, M] = act(y[0]) * y[1]
 *   ADD with next_h: next_h [N_0, M] = out * next_norm_w, after the add
 *
 * next_h is the next product's x * norm_w formed on the way (the residual add's output is
 * that product's x, next_norm_w its norm_w): passed to it as x_w, a backend that fuses the
 * norm into its product may read it instead of forming x * norm_w itself (the sum of
 * squares still comes from x). x_w changes nothing of the meaning (the rounding of the
 * sum of squares may differ: CUDA: st_cuda_prepared_norm_pays).
 *
 * Only STORE promises the contents of y[]; h and, for the other epilogues, y[] are
 * scratch whose contents are unspecified afterwards. */
typedef struct st_fused_mul_mat {
    int n_w;                  /* 1..3 */
    const st_tensor *w[3];
    st_tensor *y[3];
    const st_tensor *x;
    const st_tensor *norm_w;  /* [K] F32, or NULL */
    float eps;
    st_tensor *h;             /* required when norm_w is set */
    st_fused_epilogue epilogue;
    st_tensor *out;           /* ADD, SWIGLU, GEGLU */
    const st_tensor *next_norm_w; /* ADD, optional: [N_0] F32, with next_h */
    st_tensor *next_h;            /* ADD, optional: [N_0, M] F32 out * next_norm_w */
    const st_tensor *x_w;         /* optional with norm_w: [K, M] F32 x * norm_w */
    /* halves: a fused gate_up weight [K, 2F] (gate rows first, phi3) as the gated pair:
     * w[0], w[1] are half_w, its two halves [K, F], and y[0], y[1] half_y, the halves of
     * its product [2F, M] (fuse.h's st_fuse_group_point points them after a copy). */
    bool halves;
    st_tensor half_w[2], half_y[2];
} st_fused_mul_mat;

/* The attention block's step between the projections and attention: RMSNorm of q and k
 * (optional; per head, or over each token's whole q and k), RoPE of q and k, and the store
 * of k and v into the cache. Its meaning is st_fused_rope_store_composite's sequence of
 * plain ops.
 *   q [hd, n_head, M], k and v [hd, n_head_kv, M] F32 (q and k changed in place);
 *   q_norm, k_norm F32 or both NULL: [hd] and [hd] (per head: qwen3, gemma3), or
 *   [hd * n_head] and [hd * n_head_kv] (whole: olmoe), q's and k's heads then packed
 *   (nb[1] = hd floats; st_fused_rope_store_whole_norm);  positions I32 [M] (the rope's);
 *   slots I32 [M]: the cache slot each token's k and v go to (its position in a contiguous
 *   cache; may be the positions tensor);
 *   k_cache, v_cache [hd, n_head_kv, n_slots] F16/F32;
 *   rope_cs: NULL, or [n_rot, >= M] F32, rows packed: row m the (cos, sin) pairs of
 *   positions[m] under these rope parameters (CUDA: st_cuda_rope_table), read instead of
 *   forming the rotations. */
typedef struct st_fused_rope_store {
    st_tensor *q, *k;
    const st_tensor *v;
    const st_tensor *q_norm, *k_norm;
    float eps;
    const st_tensor *positions;
    const st_tensor *slots;
    const st_rope_params *rope;
    st_tensor *k_cache, *v_cache;
    const st_tensor *rope_cs;
} st_fused_rope_store;

/* rope_store, then attention over the cache with the roped q: the whole attention block
 * between the projections and the output projection. Its meaning is
 * st_fused_rope_attention_composite's: the rope_store composite of rs, then attention(out,
 * rs.q, rs.k_cache, rs.v_cache, rs.positions, pages, attn). A backend that fuses it may
 * leave rs.q and rs.k as they came (not normalised or roped); out and the caches are the
 * same.
 *   out [hd, n_head, M] F32;  pages NULL (contiguous: slots = positions) or paged */
typedef struct st_fused_rope_attention {
    st_fused_rope_store rs;
    st_tensor *out;
    const st_kv_pages *pages;
    const st_attn_params *attn;
} st_fused_rope_attention;

/* A MoE layer's experts over a step's slots: slot (j, m) is token m's j-th chosen expert
 * e = ids[j, m] (mul_mat_id's slots, backend.h: W_e = w + e * nb[2], x as mul_mat_id
 * takes it). Its meaning is st_fused_moe_composite's plain ops:
 *   GLU:  y_gate = W_gate[e] x,  y_up = W_up[e] x  (mul_mat_id, [F, n_used, M]),
 *         out [F, n_used, M] = act(y_gate) * y_up  (swiglu, or geglu when gelu)
 *   DOWN: y_down [D, n_used, M] = W_down[e] x[:, j, m]  (mul_mat_id),
 *         out [D, M] = sum over j in order of wts[j, m] * y_down[:, j, m]  (moe_combine),
 *         then, with residual, residual [D, M] += out  (add; out is then scratch)
 * ids I32 [n_used, M]; wts F32 [n_used, M]. out may be y_up (the unit in place); the y
 * tensors are otherwise scratch whose contents are unspecified afterwards. */
typedef enum st_fused_moe_kind {
    ST_FUSED_MOE_GLU = 0,
    ST_FUSED_MOE_DOWN = 1,
} st_fused_moe_kind;

typedef struct st_fused_moe {
    st_fused_moe_kind kind;
    bool gelu;                      /* GLU: geglu, else swiglu */
    const st_tensor *w[2];          /* GLU: gate, up [K, F, E]; DOWN: down [F, D, E] */
    st_tensor *y[2];                /* GLU: y_gate, y_up; DOWN: y_down */
    const st_tensor *x;
    const st_tensor *ids;
    const st_tensor *wts;           /* DOWN */
    st_tensor *out;
    st_tensor *residual;            /* DOWN, optional: [D, M] F32 += out */
} st_fused_moe;

/* A post-norm into the residual: h = rmsnorm(y) * norm_w (norm_w NULL: no weight), then
 * out = x + h (rms_norm then add, st_fused_norm_add_composite). y, x, h, out F32 of one
 * shape [D, ...]; h may be y, out may be x; h is scratch whose contents are unspecified
 * afterwards. */
typedef struct st_fused_norm_add {
    const st_tensor *y;
    const st_tensor *norm_w; /* [D] F32, or NULL */
    float eps;
    st_tensor *h;
    const st_tensor *x;
    st_tensor *out;
} st_fused_norm_add;

/* A MoE layer's router and routing: logits [E, M] = router a (mul_mat; router [K, E]),
 * then ids I32 [k, M] and wts F32 [k, M] = topk_route(logits)
 * (st_fused_moe_route_composite). a = x [K, M]; or, with norm_w [K], the layer's FFN
 * norm first: h [K, M] = rms_norm(x, norm_w, eps), written (the experts read it), a = h. */
typedef struct st_fused_moe_route {
    const st_tensor *router, *x;
    const st_tensor *norm_w; /* F32 [K], or NULL */
    float eps;
    st_tensor *h;            /* with norm_w */
    st_tensor *logits, *ids, *wts;
    int32_t k;
    bool softmax_first, normalize;
} st_fused_moe_route;

/* Two RMSNorms of one width over independent tensors (olmoe's whole-projection q and k
 * norms): dst[i] = rmsnorm(x[i]) * w[i] (w[i] NULL: no weight), i = 0 then 1 (two
 * rms_norm ops, st_fused_norm_pair_composite). Neither reads what the other writes. */
typedef struct st_fused_norm_pair {
    st_tensor *dst[2];
    const st_tensor *x[2];
    const st_tensor *w[2];
    float eps[2];
} st_fused_norm_pair;

/* Whether op's q/k norms are over each token's whole q and k (weights wider than a head). */
bool st_fused_rope_store_whole_norm(const st_fused_rope_store *op);
/* t [hd, n, M] F32 with packed heads as [hd * n, M]: the rows a whole q/k norm reads. */
st_tensor st_fused_heads_flat(const st_tensor *t);

/* The meaning of each fused op as plain ops of b's table. */
st_status st_fused_mul_mat_composite(st_backend *b, const st_fused_mul_mat *op, st_error *err);
st_status st_fused_rope_store_composite(st_backend *b, const st_fused_rope_store *op, st_error *err);
st_status st_fused_rope_attention_composite(st_backend *b, const st_fused_rope_attention *op, st_error *err);
st_status st_fused_moe_composite(st_backend *b, const st_fused_moe *op, st_error *err);
void st_fused_norm_add_composite(st_backend *b, const st_fused_norm_add *op);
void st_fused_norm_pair_composite(st_backend *b, const st_fused_norm_pair *op);
st_status st_fused_moe_route_composite(st_backend *b, const st_fused_moe_route *op, st_error *err);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_BACKEND_FUSED_H */
