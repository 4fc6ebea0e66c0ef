/*
 * stride: a backend is a small table of function pointers (ggml's habit): memory, the
 * upload of a weight into its planned layout, the plain ops the models need, and
 * optionally a planner over a whole step. The model code builds a step as a graph of
 * plain ops (graph.h) and hands it to st_backend_compute; a backend without a planner
 * runs the nodes one by one through its ops, one with a planner (CUDA) fuses, chooses
 * kernels and records as it sees fit. So the same forward pass runs on every backend.
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

#include "stride/device.h"
#include "stride/graph.h"
#include "stride/ops.h"
#include "stride/status.h"
#include "stride/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_backend st_backend;

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
    /* Optional (NULL: the host's available physical memory): the backend's free and total
     * memory in bytes, for sizing a KV cache to what is left after the weights. */
    st_status (*memory)(st_backend *b, size_t *free_bytes, size_t *total_bytes, st_error *err);
    /* Device -> device, n contiguous bytes, in order with the ops (asynchronous). */
    st_status (*copy)(st_backend *b, void *dst, const void *src, size_t n, st_error *err);
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
    /* pages NULL: one sequence, key t at cache slot t (st_cpu_attention); else paged
     * (st_cpu_attention_paged with pages' seq and table). */
    st_status (*attention)(st_backend *b, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                           const st_tensor *v_cache, const st_tensor *positions, const st_kv_pages *pages,
                           const st_attn_params *p, st_error *err);
    void (*topk_route)(st_backend *b, st_tensor *ids, st_tensor *weights, const st_tensor *logits, int32_t k,
                       bool softmax_first, bool normalize);
    /* dst[:, m] (+)= sum_j weights[j, m] * src[:, j, m]: combines the experts' outputs.
     * dst [D, M], src [D, k, M], weights [k, M]. */
    void (*moe_combine)(st_backend *b, st_tensor *dst, const st_tensor *src, const st_tensor *weights);
    /* The k largest logits of each row and the row's log-sum-exp (st_cpu_top_k_logits):
     * ids I32 [k, n], vals F32 [k + 1, n] (may be in host memory of host_alloc's), logits
     * F32 [V, n]. */
    void (*top_k)(st_backend *b, st_tensor *ids, st_tensor *vals, const st_tensor *logits, int32_t k);
    /* A draw from each whole row (st_cpu_draw_rows): ids I32 [n] and drawn F32 [n] (may be
     * in host memory of host_alloc's), logits F32 [V, n] (a backend may rewrite penalized
     * logits while it draws, and puts them back), params F32 [6, n], words I32 [4, n],
     * penalized I32 [2 ST_DRAW_MAX_PENALIZED, n]. */
    void (*draw)(st_backend *b, st_tensor *ids, st_tensor *drawn, const st_tensor *logits, const st_tensor *params,
                 const st_tensor *words, const st_tensor *penalized);

    /* Waits for queued work (a no-op where ops are synchronous). */
    st_status (*synchronize)(st_backend *b, st_error *err);

    /* ---- timing (calibration, benchmarks) ---- */
    /* timer_start marks the current point of the op stream; timer_stop marks it again,
     * waits for the ops queued in between and returns the milliseconds they took on the
     * device (CUDA events; the host clock on the CPU, whose ops are synchronous). One
     * timer per backend; timer_stop without a start is an error. */
    st_status (*timer_start)(st_backend *b, st_error *err);
    st_status (*timer_stop)(st_backend *b, double *ms, st_error *err);

    /* ---- graphs ---- */
    /* Optional: computes g as a whole, planning over its nodes (fusions, kernels, recorded
     * replays), keeping what it plans in g->backend_state (g->owner = b) for the next compute
     * of the same graph. NULL: st_backend_compute runs the nodes one by one through the ops
     * above. */
    st_status (*graph_compute)(st_backend *b, st_graph *g, st_error *err);
    /* Frees g->backend_state (called by st_graph_clear / st_graph_free). */
    void (*graph_release)(st_backend *b, st_graph *g);
} st_backend_iface;

struct st_backend {
    const st_backend_iface *iface;
    st_device_info device;
    void *ctx;
    struct st_profile *profile; /* while set, st_backend_compute times every op into it */
};

/* Creates a backend on device `index` (ignored for the CPU). */
st_status st_backend_init(st_backend_kind kind, int index, st_backend **out, st_error *err);
void st_backend_free(st_backend *b);

/* b's free and total memory in bytes (iface->memory, else the host's). */
st_status st_backend_memory(st_backend *b, size_t *free_bytes, size_t *total_bytes, st_error *err);

/* Computes g on b: its uploads, then its nodes in order (their meaning; a backend may run
 * them fused or replayed). ST_ERROR_NOMEM for a graph whose building failed. */
st_status st_backend_compute(st_backend *b, st_graph *g, st_error *err);

/* Sets (or with NULL clears) the per-op profile that st_backend_compute adds every op it
 * computes on b to (stride/profile.h). A backend with a graph_compute honours it there:
 * it runs each op on its own and times it on the device. */
void st_backend_set_profile(st_backend *b, struct st_profile *p);

/* Runs one node through b's plain ops, its attention over n_kv keys (the reference of
 * every plan; what a backend does with the nodes it does not fuse). */
st_status st_backend_run_node(st_backend *b, const st_node *n, int64_t n_kv, st_error *err);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_BACKEND_H */
