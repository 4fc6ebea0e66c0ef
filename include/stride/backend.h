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
/* A recorded sequence of ops (a CUDA graph), replayed as one unit. */
typedef struct st_backend_graph st_backend_graph;

typedef struct st_backend_iface {
    void (*free)(st_backend *b);

    /* ---- memory ---- */
    /* nbytes of device memory, aligned to at least 256 bytes. Out of memory is
     * ST_ERROR_NOMEM/ST_ERROR_DEVICE with the sizes involved. */
    st_status (*alloc)(st_backend *b, size_t nbytes, void **out, st_error *err);
    void (*dealloc)(st_backend *b, void *ptr);
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
     * launches). Ops that would allocate or wait while recording fail the recording. */
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

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_BACKEND_H */
