/*
 * stride: a backend is a small table of function pointers (ggml's habit): memory, the
 * upload of a weight into its planned layout, and the ops the models need. The model code
 * calls ops only through this table, so the same forward pass runs on every backend.
 *
 * Op semantics are those of the CPU reference (cpu_ops.h), which every backend is tested
 * against. Differences here: index arrays (token ids, positions, expert ids) are I32
 * tensors in backend memory, so that a GPU backend never reads them on the host; and the
 * ops that can fail on input return st_status.
 *
 * All tensors handed to a backend's ops live in memory that backend allocated.
 */
#ifndef STRIDE_BACKEND_H
#define STRIDE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stride/cpu_ops.h"
#include "stride/device.h"
#include "stride/status.h"
#include "stride/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_backend st_backend;

/* What a fused product does with its results (st_fused_mul_mat). */
typedef enum st_fused_epilogue {
    ST_FUSED_EPILOGUE_STORE = 0,  /* y[i] = W_i h                                  */
    ST_FUSED_EPILOGUE_ADD = 1,    /* out += W_0 h            (a residual add)      */
    ST_FUSED_EPILOGUE_SWIGLU = 2, /* out = silu(W_0 h) * (W_1 h)                   */
    ST_FUSED_EPILOGUE_GEGLU = 3,  /* out = gelu_tanh(W_0 h) * (W_1 h)              */
} st_fused_epilogue;

/* A product of the forward pass with what surrounds it: up to three weights applied to
 * one input, the input optionally RMS-normalised first, the results optionally combined
 * by a gated unit or added to a residual. Its meaning is the sequence of plain ops that
 * st_backend_mul_mat_fused_composite runs; a backend that fuses it (one kernel for the
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
 * sum of squares may differ: see prepared_norm_pays).
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
} st_fused_mul_mat;
/* The attention block's step between the projections and attention: per-head RMSNorm
 * of q and k (optional), RoPE of q and k, and the store of k and v into the cache. Its
 * meaning is st_backend_rope_store_composite's sequence of plain ops.
 *   q [hd, n_head, M], k and v [hd, n_head_kv, M] F32 (q and k changed in place);
 *   q_norm, k_norm [hd] F32 or both NULL;  positions I32 [M];
 *   k_cache, v_cache [hd, n_head_kv, n_ctx] F16/F32;
 *   rope_cs: NULL, or for one token (M = 1) rope_table's [n_rot] F32 at positions[0] with
 *   these rope parameters, which a backend may read instead of forming the rotations. */
typedef struct st_fused_rope_store {
    st_tensor *q, *k;
    const st_tensor *v;
    const st_tensor *q_norm, *k_norm;
    float eps;
    const st_tensor *positions;
    const st_rope_params *rope;
    st_tensor *k_cache, *v_cache;
    const st_tensor *rope_cs;
} st_fused_rope_store;

/* rope_store, then attention over the cache with the roped q: the whole attention block
 * between the projections and the output projection. Its meaning is
 * st_backend_rope_attention_composite's: st_backend_rope_store(&rs), then attention(out,
 * rs.q, rs.k_cache, rs.v_cache, rs.positions, attn). A backend that fuses it may leave
 * rs.q and rs.k as they came (not normalised or roped); out and the caches are the same.
 *   out [hd, n_head, M] F32 */
typedef struct st_fused_rope_attention {
    st_fused_rope_store rs;
    st_tensor *out;
    const st_attn_params *attn;
} st_fused_rope_attention;

/* A recorded sequence of ops (a CUDA graph), replayed as one unit. */
typedef struct st_backend_graph st_backend_graph;

typedef struct st_backend_iface {
    void (*free)(st_backend *b);

    /* ---- memory ---- */
    /* nbytes of device memory, aligned to at least 256 bytes. Out of memory is
     * ST_ERROR_NOMEM/ST_ERROR_DEVICE with the sizes involved. */
    st_status (*alloc)(st_backend *b, size_t nbytes, void **out, st_error *err);
    void (*dealloc)(st_backend *b, void *ptr);
    /* Optional (NULL: malloc/free serve): host memory the backend copies to and from
     * fastest (page-locked on CUDA). write() from it is asynchronous: the source must not
     * change until the next read or synchronize. Ops may also write into it directly (a
     * decode step's output head writes its logits there; CUDA maps page-locked memory
     * into the device's unified address space); the host reads it after synchronize. */
    st_status (*host_alloc)(st_backend *b, size_t nbytes, void **out, st_error *err);
    void (*host_free)(st_backend *b, void *ptr);
    /* Host -> device, n contiguous bytes. */
    st_status (*write)(st_backend *b, void *dst, const void *src, size_t n, st_error *err);
    /* Device -> host, n contiguous bytes; completes before returning. */
    st_status (*read)(st_backend *b, void *dst, const void *src, size_t n, st_error *err);
    /* Copies a weight from packed host rows (row size st_tensor_row_bytes(dst), rows one
     * after another, experts one after another) into dst's planned layout (dst->nb[1] >=
     * the packed row size) in ONE strided 2D copy, and zeroes the pad bytes. */
    st_status (*upload_weight)(st_backend *b, st_tensor *dst, const void *packed, st_error *err);

    /* ---- ops (see cpu_ops.h for each contract) ---- */
    st_status (*get_rows)(st_backend *b, st_tensor *dst, const st_tensor *src, const st_tensor *ids,
                          st_error *err);
    st_status (*mul_mat)(st_backend *b, st_tensor *dst, const st_tensor *w, const st_tensor *x,
                         st_error *err);
    st_status (*mul_mat_id)(st_backend *b, st_tensor *dst, const st_tensor *w, const st_tensor *x,
                            const st_tensor *ids, st_error *err);
    void (*rms_norm)(st_backend *b, st_tensor *dst, const st_tensor *x, const st_tensor *w, float eps);
    void (*rope)(st_backend *b, st_tensor *dst, const st_tensor *x, const st_tensor *positions,
                 const st_rope_params *p);
    void (*swiglu)(st_backend *b, st_tensor *dst, const st_tensor *gate, const st_tensor *up);
    void (*geglu)(st_backend *b, st_tensor *dst, const st_tensor *gate, const st_tensor *up);
    void (*swiglu_fused)(st_backend *b, st_tensor *dst, const st_tensor *gate_up);
    void (*add)(st_backend *b, st_tensor *dst, const st_tensor *a, const st_tensor *x);
    void (*mul)(st_backend *b, st_tensor *dst, const st_tensor *a, const st_tensor *x);
    void (*scale)(st_backend *b, st_tensor *dst, const st_tensor *x, float s);
    st_status (*kv_store)(st_backend *b, st_tensor *cache, const st_tensor *x, const st_tensor *positions,
                          st_error *err);
    st_status (*attention)(st_backend *b, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                           const st_tensor *v_cache, const st_tensor *positions, const st_attn_params *p,
                           st_error *err);
    void (*topk_route)(st_backend *b, st_tensor *ids, st_tensor *weights, const st_tensor *logits, int32_t k,
                       bool softmax_first, bool normalize);
    /* dst[:, m] (+)= sum_j weights[j, m] * src[:, j, m]: combines the experts' outputs.
     * dst [D, M], src [D, k, M], weights [k, M]. */
    void (*moe_combine)(st_backend *b, st_tensor *dst, const st_tensor *src, const st_tensor *weights);

    /* Optional (NULL: none). The rotations of position positions[0] under p, as RoPE forms
     * them: dst [n_rot] F32 = (cos, sin) of each pair, for the rope_cs of the fused ops
     * (every layer of a decode step shares its position). */
    st_status (*rope_table)(st_backend *b, st_tensor *dst, const st_tensor *positions, const st_rope_params *p,
                            st_error *err);

    /* Optional: a backend's fused version of op (NULL: the composite of plain ops). */
    st_status (*mul_mat_fused)(st_backend *b, const st_fused_mul_mat *op, st_error *err);
    /* Optional, with mul_mat_fused: whether the one-token fused product op (a norm in it,
     * x_w not set) runs faster from the x * norm_w the residual add before it can prepare
     * (next_h, then x_w) than forming it itself. NULL: never. The meaning is the same
     * either way; a backend may sum x . x in another order on the prepared path (CUDA:
     * within f32 rounding). The answer depends on shapes, not strides, so padding on and
     * off take the same path. */
    bool (*prepared_norm_pays)(st_backend *b, const st_fused_mul_mat *op);
    st_status (*rope_store)(st_backend *b, const st_fused_rope_store *op, st_error *err);
    st_status (*rope_attention)(st_backend *b, const st_fused_rope_attention *op, st_error *err);

    /* Waits for queued work (a no-op where ops are synchronous). */
    st_status (*synchronize)(st_backend *b, st_error *err);

    /* ---- timing (calibration, benchmarks) ---- */
    /* timer_start marks the current point of the op stream; timer_stop marks it again,
     * waits for the ops queued in between and returns the milliseconds they took on the
     * device (CUDA events; the host clock on the CPU, whose ops are synchronous). One
     * timer per backend; timer_stop without a start is an error. */
    st_status (*timer_start)(st_backend *b, st_error *err);
    st_status (*timer_stop)(st_backend *b, double *ms, st_error *err);

    /* ---- op recording (optional: NULL where the backend has none) ---- */
    /* graph_begin starts recording: the ops called until graph_end are not run but kept
     * in *out, which graph_launch replays with the same arguments (the same tensors and
     * scalars; data in memory, such as positions and token ids, may change between
     * launches). Ops that would allocate or wait while recording fail the recording. A
     * recording stays valid while its tensors live: scratch the backend grows for later ops
     * does not free what a recording addresses. */
    st_status (*graph_begin)(st_backend *b, st_error *err);
    st_status (*graph_end)(st_backend *b, st_backend_graph **out, st_error *err);
    st_status (*graph_launch)(st_backend *b, st_backend_graph *g, st_error *err);
    void (*graph_free)(st_backend *b, st_backend_graph *g);
} st_backend_iface;

struct st_backend {
    const st_backend_iface *iface;
    st_device_info device;
    void *ctx;
};

/* Creates a backend on device `index` (ignored for the CPU). */
st_status st_backend_init(st_backend_kind kind, int index, st_backend **out, st_error *err);
void st_backend_free(st_backend *b);

/* Runs op: the backend's fused version when it has one, else the composite. */
st_status st_backend_mul_mat_fused(st_backend *b, const st_fused_mul_mat *op, st_error *err);
/* The meaning of a fused product, as plain ops of b's table (the reference, and the
 * fallback of a backend for the cases its fused kernels do not take). */
st_status st_backend_mul_mat_fused_composite(st_backend *b, const st_fused_mul_mat *op, st_error *err);
/* The same pair for st_fused_rope_store. */
st_status st_backend_rope_store(st_backend *b, const st_fused_rope_store *op, st_error *err);
st_status st_backend_rope_store_composite(st_backend *b, const st_fused_rope_store *op, st_error *err);
/* And for st_fused_rope_attention. */
st_status st_backend_rope_attention(st_backend *b, const st_fused_rope_attention *op, st_error *err);
st_status st_backend_rope_attention_composite(st_backend *b, const st_fused_rope_attention *op, st_error *err);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_BACKEND_H */
