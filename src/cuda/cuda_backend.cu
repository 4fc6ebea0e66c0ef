// The CUDA backend: the table of function pointers, device memory, host<->device copies,
// the weight upload into the planned (padded) layout, and error reporting. The ops live
// in one file per family (cuda_matmul.cu, cuda_moe.cu, cuda_norm_rope.cu,
// cuda_elementwise.cu, cuda_attention.cu).
//
// Everything runs on one stream in issue order; cuBLAS is bound to the same stream, so no
// op needs an event or a host synchronisation. Only read() and synchronize() wait.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_common.cuh"
#include "cuda/cuda_gemv.cuh"

// cuBLAS workspace: 32 MiB is what NVIDIA recommends for Hopper (4 MiB before it).
#define CUDA_BLAS_WORKSPACE_BYTES ((size_t)32 << 20)
// Device allocations are rounded to this (the interface promises >= 256-byte alignment).
#define CUDA_ALLOC_ALIGNMENT 256
// Weight upload staging: two pinned buffers of this size. The host copies rows of the
// mmap'd file into one while the DMA engine drains the other, so the upload runs at
// min(file read, PCIe) speed instead of the pageable-copy speed.
#define CUDA_PINNED_CHUNK_BYTES ((size_t)64 << 20)

static const double GIB = 1024.0 * 1024.0 * 1024.0;

// ---- errors ----------------------------------------------------------------------------

void st_cuda_keep_error(st_cuda_ctx *c, st_status s, const st_error *err) {
    if (s == ST_OK || c->sticky.status != ST_OK) return;
    c->sticky.status = s;
    snprintf(c->sticky.message, sizeof(c->sticky.message), "%s", err ? err->message : "CUDA op failed");
}

// The first failure of a void op, then the first data error a kernel recorded (in
// page-locked memory: nothing to copy). Waits for the stream (the caller has queued what it
// needs before).
static st_status cuda_sync_and_check(st_cuda_ctx *c, st_error *err) {
    ST_GPU_CHECK(st_gpu_stream_synchronize(c->stream));
    if (c->sticky.status != ST_OK) {
        st_status s = c->sticky.status;
        st_error_set(err, s, "%s", c->sticky.message);
        st_error_clear(&c->sticky);
        return s;
    }
    st_cuda_op_error e = *c->h_op_error; // written by kernels before the stream finished
    if (e.code == ST_CUDA_OP_ERROR_NONE) return ST_OK;
    ST_GPU_CHECK(st_gpu_memset_async(&c->d_op_error->code, 0, sizeof(int), c->stream)); // free the claim
    memset(c->h_op_error, 0, sizeof(*c->h_op_error));
    switch (e.code) {
    case ST_CUDA_OP_ERROR_ROW_ID:
        return st_error_set(err, ST_ERROR_INVALID,
                            "row id %d (at index %lld) is outside [0, %lld): a token id beyond the vocabulary?",
                            e.value, e.index, e.limit);
    case ST_CUDA_OP_ERROR_EXPERT_ID:
        return st_error_set(err, ST_ERROR_INVALID,
                            "mul_mat_id: expert id %d (slot %lld) is outside [0, %lld)", e.value, e.index,
                            e.limit);
    case ST_CUDA_OP_ERROR_KV_POSITION:
        return st_error_set(err, ST_ERROR_INVALID,
                            "kv cache: position %d is outside the context [0, %lld): the context is full "
                            "(raise the context size)",
                            e.value, e.limit);
    default: return st_error_set(err, ST_ERROR_DEVICE, "unknown CUDA op error code %d", e.code);
    }
}

// ---- memory ----------------------------------------------------------------------------

st_status st_cuda_grow(st_cuda_ctx *c, void **buf, size_t *cap, size_t nbytes, const char *what, st_error *err) {
    if (nbytes <= *cap) return ST_OK;
    if (c->capturing)
        return st_error_set(err, ST_ERROR_DEVICE,
                            "%s would grow from %zu to %zu bytes while recording a CUDA graph (run the step "
                            "once before recording it)",
                            what, *cap, nbytes);
    // The old buffer stays until the context goes: kernels still queued and graphs recorded
    // earlier (the decode step, whose attention partials an eval of a few tokens may outgrow)
    // address it. Doubling bounds what is retired by the size of the live buffer.
    if (*buf && c->n_retired == c->retired_cap) {
        const int n = c->retired_cap ? 2 * c->retired_cap : 8;
        void **r = (void **)realloc(c->retired, (size_t)n * sizeof(void *));
        if (!r) return st_error_set(err, ST_ERROR_NOMEM, "out of host memory growing %s", what);
        c->retired = r;
        c->retired_cap = n;
    }
    size_t rounded = (nbytes + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
    if (rounded < 2 * *cap) rounded = 2 * *cap;
    void *fresh = NULL;
    ST_GPU_CHECK(st_gpu_malloc(&fresh, rounded));
    if (*buf) c->retired[c->n_retired++] = *buf;
    *buf = fresh;
    *cap = rounded;
    return ST_OK;
}

st_status st_cuda_scratch(st_cuda_ctx *c, size_t nbytes, void **out, st_error *err) {
    st_status s = st_cuda_grow(c, &c->scratch, &c->scratch_bytes, nbytes, "GEMM scratch", err);
    *out = c->scratch;
    return s;
}

static st_status cuda_alloc(st_backend *b, size_t nbytes, void **out, st_error *err) {
    *out = NULL;
    size_t rounded = (nbytes + CUDA_ALLOC_ALIGNMENT - 1) / CUDA_ALLOC_ALIGNMENT * CUDA_ALLOC_ALIGNMENT;
    if (rounded < nbytes) return st_error_set(err, ST_ERROR_NOMEM, "allocation of %zu bytes overflows", nbytes);
    if (rounded == 0) rounded = CUDA_ALLOC_ALIGNMENT;
    st_gpu_error_t rc = st_gpu_malloc(out, rounded);
    if (rc != st_gpu_success) {
        (void)st_gpu_get_last_error(); // an allocation failure is not sticky; clear it
        *out = NULL;
        size_t free_b = 0, total_b = 0;
        if (st_gpu_mem_get_info(&free_b, &total_b) != st_gpu_success) (void)st_gpu_get_last_error();
        return st_error_set(err, ST_ERROR_DEVICE,
                            "out of GPU memory on %s: allocating %zu bytes (%.2f GiB) with %.2f GiB free of "
                            "%.2f GiB (%s); use a smaller context or a smaller model",
                            b->device.name, nbytes, (double)nbytes / GIB, (double)free_b / GIB,
                            (double)total_b / GIB, st_gpu_get_error_string(rc));
    }
    return ST_OK;
}

static void cuda_dealloc(st_backend *b, void *ptr) {
    if (!ptr) return;
    st_cuda_ctx *c = cuda_ctx(b);
    st_error err = {};
    // queued work that reads ptr finishes first
    st_gpu_error_t rc = st_gpu_stream_synchronize(c->stream);
    if (rc == st_gpu_success) rc = st_gpu_free(ptr);
    if (rc != st_gpu_success) {
        st_error_set(&err, ST_ERROR_DEVICE, "freeing device memory failed: %s", st_gpu_get_error_string(rc));
        st_cuda_keep_error(c, ST_ERROR_DEVICE, &err);
    }
}

static st_status cuda_host_alloc(st_backend *b, size_t nbytes, void **out, st_error *err) {
    (void)b;
    *out = NULL;
    st_gpu_error_t rc = st_gpu_host_alloc(out, nbytes ? nbytes : 1, st_gpu_host_alloc_default);
    if (rc != st_gpu_success) {
        (void)st_gpu_get_last_error();
        *out = NULL;
        return st_error_set(err, ST_ERROR_NOMEM, "page-locked host allocation of %zu bytes failed: %s", nbytes,
                            st_gpu_get_error_string(rc));
    }
    return ST_OK;
}

static void cuda_host_free(st_backend *b, void *ptr) {
    if (!ptr) return;
    // queued copies that read ptr finish first
    if (st_gpu_stream_synchronize(cuda_ctx(b)->stream) != st_gpu_success) (void)st_gpu_get_last_error();
    (void)st_gpu_free_host(ptr);
}

static st_status cuda_write(st_backend *b, void *dst, const void *src, size_t n, st_error *err) {
    st_cuda_ctx *c = cuda_ctx(b);
    if (c->sticky.status != ST_OK) return cuda_sync_and_check(c, err);
    // From pageable memory the call returns once src has been staged: the caller may
    // reuse or free src right away. From cuda_host_alloc's memory it returns at once.
    if (n) ST_GPU_CHECK(st_gpu_memcpy_async(dst, src, n, st_gpu_memcpy_host_to_device, c->stream));
    return ST_OK;
}

static st_status cuda_read(st_backend *b, void *dst, const void *src, size_t n, st_error *err) {
    st_cuda_ctx *c = cuda_ctx(b);
    if (n) ST_GPU_CHECK(st_gpu_memcpy_async(dst, src, n, st_gpu_memcpy_device_to_host, c->stream));
    return cuda_sync_and_check(c, err);
}

static st_status cuda_memory(st_backend *b, size_t *free_bytes, size_t *total_bytes, st_error *err) {
    ST_GPU_CHECK(st_gpu_set_device(cuda_ctx(b)->device));
    ST_GPU_CHECK(st_gpu_mem_get_info(free_bytes, total_bytes));
    return ST_OK;
}

static st_status cuda_copy(st_backend *b, void *dst, const void *src, size_t n, st_error *err) {
    if (n) ST_GPU_CHECK(st_gpu_memcpy_async(dst, src, n, st_gpu_memcpy_device_to_device, cuda_ctx(b)->stream));
    return ST_OK;
}

static st_status cuda_synchronize(st_backend *b, st_error *err) { return cuda_sync_and_check(cuda_ctx(b), err); }

// ---- recording --------------------------------------------------------------------------------

struct st_cuda_recording {
    st_gpu_graph_exec_t exec;
};

// Global capture mode: a call that would be unsafe while recording (an allocation, a
// synchronisation) fails the capture instead of silently escaping the graph.
extern "C" st_status st_cuda_record_begin(st_backend *b, st_error *err) {
    st_cuda_ctx *c = cuda_ctx(b);
    ST_ASSERT(!c->capturing);
    if (c->sticky.status != ST_OK) return cuda_sync_and_check(c, err);
    ST_GPU_CHECK(st_gpu_stream_begin_capture(c->stream, st_gpu_stream_capture_mode_global));
    c->capturing = true;
    return ST_OK;
}

extern "C" st_status st_cuda_record_end(st_backend *b, st_cuda_recording **out, st_error *err) {
    st_cuda_ctx *c = cuda_ctx(b);
    ST_ASSERT(c->capturing);
    *out = NULL;
    c->capturing = false;
    st_gpu_graph_t graph = NULL;
    st_gpu_error_t rc = st_gpu_stream_end_capture(c->stream, &graph);
    if (c->sticky.status != ST_OK || rc != st_gpu_success) {
        // an op failed while recording (the failure is the recording's, not the data's)
        if (graph) (void)st_gpu_graph_destroy(graph);
        (void)st_gpu_get_last_error();
        st_error_set(err, ST_ERROR_DEVICE, "recording a step as a CUDA graph failed: %s",
                     c->sticky.status != ST_OK ? c->sticky.message : st_gpu_get_error_string(rc));
        st_error_clear(&c->sticky);
        return ST_ERROR_DEVICE;
    }
    st_cuda_recording *r = (st_cuda_recording *)calloc(1, sizeof(*r));
    if (!r) {
        (void)st_gpu_graph_destroy(graph);
        return st_error_set(err, ST_ERROR_NOMEM, "out of host memory");
    }
    rc = st_gpu_graph_instantiate(&r->exec, graph);
    (void)st_gpu_graph_destroy(graph);
    if (rc != st_gpu_success) {
        free(r);
        return st_error_set(err, ST_ERROR_DEVICE, "instantiating a recorded step failed: %s",
                            st_gpu_get_error_string(rc));
    }
    *out = r;
    return ST_OK;
}

extern "C" st_status st_cuda_record_launch(st_backend *b, const st_cuda_recording *r, st_error *err) {
    ST_GPU_CHECK(st_gpu_graph_launch(r->exec, cuda_ctx(b)->stream));
    return ST_OK;
}

extern "C" void st_cuda_record_free(st_backend *b, st_cuda_recording *r) {
    if (!r) return;
    (void)st_gpu_stream_synchronize(cuda_ctx(b)->stream); // a launch in flight still uses it
    (void)st_gpu_graph_exec_destroy(r->exec);
    free(r);
}

// ---- timing ----------------------------------------------------------------------------------

static st_status cuda_timer_start(st_backend *b, st_error *err) {
    st_cuda_ctx *c = cuda_ctx(b);
    ST_GPU_CHECK(st_gpu_event_record(c->timer_start, c->stream));
    c->timer_running = true;
    return ST_OK;
}

static st_status cuda_timer_stop(st_backend *b, double *ms, st_error *err) {
    st_cuda_ctx *c = cuda_ctx(b);
    if (!c->timer_running) return st_error_set(err, ST_ERROR_INVALID, "timer_stop without timer_start");
    c->timer_running = false;
    ST_GPU_CHECK(st_gpu_event_record(c->timer_stop, c->stream));
    st_status s = cuda_sync_and_check(c, err);
    if (s != ST_OK) return s;
    float elapsed = 0.0f;
    ST_GPU_CHECK(st_gpu_event_elapsed_time(&elapsed, c->timer_start, c->timer_stop));
    *ms = (double)elapsed;
    return ST_OK;
}

// ---- the weight upload -------------------------------------------------------------------

static st_status cuda_pinned_init(st_cuda_ctx *c, st_error *err) {
    if (c->pinned[0]) return ST_OK;
    for (int i = 0; i < ST_CUDA_PINNED_BUFFERS; i++) {
        ST_GPU_CHECK(st_gpu_host_alloc(&c->pinned[i], CUDA_PINNED_CHUNK_BYTES, st_gpu_host_alloc_default));
        ST_GPU_CHECK(st_gpu_event_create_with_flags(&c->pinned_free[i], st_gpu_event_disable_timing));
    }
    c->pinned_bytes = CUDA_PINNED_CHUNK_BYTES;
    return ST_OK;
}

// Packed host rows -> dst's planned layout: 2D copies with source pitch = the packed row
// and destination pitch = nb[1], staged through the pinned buffers in chunks of whole
// rows (one copy per tensor when it fits a chunk), then the pad columns zeroed by one 2D
// memset. Returns with the copies queued; the host source has been read completely.
static st_status cuda_upload_weight(st_backend *b, st_tensor *dst, const void *packed, st_error *err) {
    st_cuda_ctx *c = cuda_ctx(b);
    ST_ASSERT(st_tensor_has_contiguous_rows(dst));
    const size_t row = st_tensor_row_bytes(dst);
    const size_t pitch = dst->nb[1];
    const size_t pad = pitch - row;
    const size_t rows = (size_t)(dst->ne[1] * dst->ne[2] * dst->ne[3]);
    if (rows == 0 || row == 0) return ST_OK;
    char *out = (char *)dst->data;
    const char *src = (const char *)packed;

    st_status s = cuda_pinned_init(c, err);
    if (s != ST_OK) return s;
    const size_t chunk_rows = c->pinned_bytes / row;
    if (chunk_rows == 0) {
        // a single row larger than a staging buffer: copy from pageable memory directly
        ST_GPU_CHECK(st_gpu_memcpy_2d_async(out, pitch, src, row, row, rows, st_gpu_memcpy_host_to_device,
                                            c->stream));
    } else {
        for (size_t r0 = 0; r0 < rows; r0 += chunk_rows) {
            const size_t n = rows - r0 < chunk_rows ? rows - r0 : chunk_rows;
            const int i = c->pinned_next;
            c->pinned_next = (i + 1) % ST_CUDA_PINNED_BUFFERS;
            ST_GPU_CHECK(st_gpu_event_synchronize(c->pinned_free[i])); // its previous copy is done
            memcpy(c->pinned[i], src + r0 * row, n * row);
            ST_GPU_CHECK(st_gpu_memcpy_2d_async(out + r0 * pitch, pitch, c->pinned[i], row, row, n,
                                                st_gpu_memcpy_host_to_device, c->stream));
            ST_GPU_CHECK(st_gpu_event_record(c->pinned_free[i], c->stream));
        }
    }
    if (pad) ST_GPU_CHECK(st_gpu_memset_2d_async(out + row, pitch, 0, pad, rows, c->stream));
    return ST_OK;
}

// ---- the void ops: failures kept for the next write/read/synchronize --------------------

static void cuda_rms_norm(st_backend *b, st_tensor *dst, const st_tensor *x, const st_tensor *w, float eps) {
    st_error err = {};
    st_cuda_keep_error(cuda_ctx(b), st_cuda_rms_norm(b, dst, x, w, eps, &err), &err);
}

static void cuda_rope(st_backend *b, st_tensor *dst, const st_tensor *x, const st_tensor *positions,
                      const st_rope_params *p) {
    st_error err = {};
    st_cuda_keep_error(cuda_ctx(b), st_cuda_rope(b, dst, x, positions, p, &err), &err);
}

static void cuda_swiglu(st_backend *b, st_tensor *dst, const st_tensor *gate, const st_tensor *up) {
    st_error err = {};
    st_cuda_keep_error(cuda_ctx(b), st_cuda_glu(b, dst, gate, up, false, &err), &err);
}

static void cuda_geglu(st_backend *b, st_tensor *dst, const st_tensor *gate, const st_tensor *up) {
    st_error err = {};
    st_cuda_keep_error(cuda_ctx(b), st_cuda_glu(b, dst, gate, up, true, &err), &err);
}

static void cuda_swiglu_fused(st_backend *b, st_tensor *dst, const st_tensor *gate_up) {
    st_error err = {};
    st_cuda_keep_error(cuda_ctx(b), st_cuda_glu_fused(b, dst, gate_up, false, &err), &err);
}

static void cuda_add(st_backend *b, st_tensor *dst, const st_tensor *a, const st_tensor *x) {
    st_error err = {};
    st_cuda_keep_error(cuda_ctx(b), st_cuda_add(b, dst, a, x, &err), &err);
}

static void cuda_mul(st_backend *b, st_tensor *dst, const st_tensor *a, const st_tensor *x) {
    st_error err = {};
    st_cuda_keep_error(cuda_ctx(b), st_cuda_mul(b, dst, a, x, &err), &err);
}

static void cuda_scale(st_backend *b, st_tensor *dst, const st_tensor *x, float s) {
    st_error err = {};
    st_cuda_keep_error(cuda_ctx(b), st_cuda_scale(b, dst, x, s, &err), &err);
}

static void cuda_topk_route(st_backend *b, st_tensor *ids, st_tensor *weights, const st_tensor *logits, int32_t k,
                            bool softmax_first, bool normalize) {
    st_error err = {};
    st_cuda_keep_error(cuda_ctx(b), st_cuda_topk_route(b, ids, weights, logits, k, softmax_first, normalize, &err),
                       &err);
}

static void cuda_moe_combine(st_backend *b, st_tensor *dst, const st_tensor *src, const st_tensor *weights) {
    st_error err = {};
    st_cuda_keep_error(cuda_ctx(b), st_cuda_moe_combine(b, dst, src, weights, &err), &err);
}

static void cuda_top_k(st_backend *b, st_tensor *ids, st_tensor *vals, const st_tensor *logits, int32_t k) {
    st_error err = {};
    st_cuda_keep_error(cuda_ctx(b), st_cuda_top_k(b, ids, vals, logits, k, &err), &err);
}

static void cuda_draw(st_backend *b, st_tensor *ids, st_tensor *drawn, const st_tensor *logits, const st_tensor *params,
                      const st_tensor *words, const st_tensor *penalized) {
    st_error err = {};
    st_cuda_keep_error(cuda_ctx(b), st_cuda_draw(b, ids, drawn, logits, params, words, penalized, &err), &err);
}

// ---- lifetime ------------------------------------------------------------------------------

// Frees what was created; safe on a partly initialised context. Errors are ignored here:
// there is nobody to report them to, and the process may be exiting after a device fault.
static void cuda_ctx_destroy(st_cuda_ctx *c) {
    if (!c) return;
    if (c->stream) (void)st_gpu_stream_synchronize(c->stream);
#if ST_GPU_HAVE_BLAS
    if (c->blas) (void)st_gpu_blas_destroy(c->blas);
#endif
    if (c->blas_workspace) (void)st_gpu_free(c->blas_workspace);
    if (c->scratch) (void)st_gpu_free(c->scratch);
    if (c->handoff) (void)st_gpu_free(c->handoff);
    if (c->route_counters) (void)st_gpu_free(c->route_counters);
    free(c->moe_upload);
    if (c->attn_partials) (void)st_gpu_free(c->attn_partials);
    if (c->norm_ss) (void)st_gpu_free(c->norm_ss);
    for (int i = 0; i < c->n_retired; i++) (void)st_gpu_free(c->retired[i]);
    free(c->retired);
    if (c->d_op_error) (void)st_gpu_free(c->d_op_error);
    if (c->timer_start) (void)st_gpu_event_destroy(c->timer_start);
    if (c->timer_stop) (void)st_gpu_event_destroy(c->timer_stop);
    if (c->h_op_error) (void)st_gpu_free_host(c->h_op_error);
    for (int i = 0; i < ST_CUDA_PINNED_BUFFERS; i++) {
        if (c->pinned[i]) (void)st_gpu_free_host(c->pinned[i]);
        if (c->pinned_free[i]) (void)st_gpu_event_destroy(c->pinned_free[i]);
    }
    if (c->stream) (void)st_gpu_stream_destroy(c->stream);
    (void)st_gpu_get_last_error();
    free(c);
}

static void cuda_free(st_backend *b) {
    if (!b) return;
    cuda_ctx_destroy(cuda_ctx(b));
    free(b);
}

static st_backend_iface cuda_make_iface(void) {
    st_backend_iface t;
    memset(&t, 0, sizeof(t));
    t.free = cuda_free;
    t.alloc = cuda_alloc;
    t.dealloc = cuda_dealloc;
    t.write = cuda_write;
    t.read = cuda_read;
    t.copy = cuda_copy;
    t.memory = cuda_memory;
    t.host_alloc = cuda_host_alloc;
    t.host_free = cuda_host_free;
    t.upload_weight = cuda_upload_weight;
    t.get_rows = st_cuda_get_rows;
    t.mul_mat = st_cuda_mul_mat;
    t.mul_mat_id = st_cuda_mul_mat_id;
    t.rms_norm = cuda_rms_norm;
    t.rope = cuda_rope;
    t.swiglu = cuda_swiglu;
    t.geglu = cuda_geglu;
    t.swiglu_fused = cuda_swiglu_fused;
    t.add = cuda_add;
    t.mul = cuda_mul;
    t.scale = cuda_scale;
    t.kv_store = st_cuda_kv_store;
    t.attention = st_cuda_attention;
    t.topk_route = cuda_topk_route;
    t.moe_combine = cuda_moe_combine;
    t.top_k = cuda_top_k;
    t.draw = cuda_draw;
    t.synchronize = cuda_synchronize;
    t.timer_start = cuda_timer_start;
    t.timer_stop = cuda_timer_stop;
    t.graph_compute = st_cuda_graph_compute;
    t.graph_release = st_cuda_graph_release;
    return t;
}

static const st_backend_iface cuda_iface = cuda_make_iface();

static st_status cuda_ctx_create(int index, const st_cuda_tuning *tune, st_cuda_ctx *c, st_error *err) {
    c->device = index;
    ST_GPU_CHECK(st_gpu_set_device(index));
    ST_GPU_CHECK(st_gpu_device_get_attribute(&c->sm_count, st_gpu_dev_attr_multiprocessor_count, index));
    if (c->sm_count < 1) c->sm_count = 1;
    ST_GPU_CHECK(st_gpu_stream_create_with_flags(&c->stream, st_gpu_stream_non_blocking));
#if ST_GPU_HAVE_BLAS
    ST_GPU_BLAS_CHECK(st_gpu_blas_create(&c->blas));
    ST_GPU_BLAS_CHECK(st_gpu_blas_set_stream(c->blas, c->stream));
    ST_GPU_CHECK(st_gpu_malloc(&c->blas_workspace, CUDA_BLAS_WORKSPACE_BYTES));
    ST_GPU_BLAS_CHECK(st_gpu_blas_set_workspace(c->blas, c->blas_workspace, CUDA_BLAS_WORKSPACE_BYTES));
    // Default math: F32 GEMMs stay in F32 (no TF32), so they match the CPU to f32 rounding.
    ST_GPU_BLAS_CHECK(st_gpu_blas_set_math_mode(c->blas, st_gpu_blas_default_math));
#endif
    // Kernels write page-locked host memory through its host address (the op-error record, a
    // decode step's logits): unified addressing maps it into the device's address space.
    int unified = 0;
    ST_GPU_CHECK(st_gpu_device_get_attribute(&unified, st_gpu_dev_attr_unified_addressing, index));
    if (!unified)
        return st_error_set(err, ST_ERROR_DEVICE,
                            "CUDA device %d has no unified addressing, which stride needs (kernels write "
                            "page-locked host memory): use a 64-bit build on a supported platform",
                            index);
    ST_GPU_CHECK(st_gpu_host_alloc((void **)&c->h_op_error, sizeof(st_cuda_op_error), st_gpu_host_alloc_default));
    memset(c->h_op_error, 0, sizeof(*c->h_op_error));
    st_cuda_op_error claim = {};
    claim.host = c->h_op_error;
    ST_GPU_CHECK(st_gpu_malloc((void **)&c->d_op_error, sizeof(st_cuda_op_error)));
    ST_GPU_CHECK(st_gpu_memcpy_async(c->d_op_error, &claim, sizeof(claim), st_gpu_memcpy_host_to_device, c->stream));
    ST_GPU_CHECK(st_gpu_event_create(&c->timer_start));
    ST_GPU_CHECK(st_gpu_event_create(&c->timer_stop));
    int warp = 0;
    ST_GPU_CHECK(st_gpu_device_get_attribute(&warp, st_gpu_dev_attr_warp_size, index));
    if (warp != ST_GPU_WARP_SIZE)
        return st_error_set(err, ST_ERROR_UNSUPPORTED,
                            "GPU device %d runs warps of %d lanes; this build's kernels are for %d "
                            "(STRIDE_GPU_WARP_SIZE, from the build's GPU targets)",
                            index, warp, ST_GPU_WARP_SIZE);
    int cc_major = 0;
    ST_GPU_CHECK(st_gpu_device_get_attribute(&cc_major, st_gpu_dev_attr_cc_major, index));
    if (tune) {
        c->tune = *tune;
    } else { // the defaults for this device, with STRIDE_CUDA_TUNING's overrides
        c->tune = st_cuda_tuning_default(cc_major);
        const char *spec = getenv("STRIDE_CUDA_TUNING");
        if (spec && *spec) {
            const st_status s = st_cuda_tuning_parse(&c->tune, spec, err);
            if (s != ST_OK) return s;
        }
    }
    if (cc_major < 8) c->tune.rowblock_staged = 0; // (cp.async: sm_80)
    if (cc_major < 9 || !ST_GPU_NVIDIA) c->tune.early_launch = 0; // (griddepcontrol: sm_90; none on HIP)
    ST_GPU_CHECK(st_gpu_stream_synchronize(c->stream));
    return ST_OK;
}

extern "C" st_status st_backend_cuda_init_tuned(int index, const st_cuda_tuning *tune, st_backend **out,
                                               st_error *err) {
    *out = NULL;
    st_backend *b = (st_backend *)calloc(1, sizeof(*b));
    st_cuda_ctx *c = (st_cuda_ctx *)calloc(1, sizeof(*c));
    if (!b || !c) {
        free(b);
        free(c);
        return st_error_set(err, ST_ERROR_NOMEM, "out of host memory creating the CUDA backend");
    }
    st_status s = st_device_query(ST_BACKEND_CUDA, index, &b->device, err);
    if (s == ST_OK) s = cuda_ctx_create(index, tune, c, err);
    if (s != ST_OK) {
        cuda_ctx_destroy(c);
        free(b);
        if (err) st_error_wrap(err, "creating the CUDA backend on device %d", index);
        return s;
    }
    b->iface = &cuda_iface;
    b->ctx = c;
    *out = b;
    return ST_OK;
}

extern "C" st_status st_backend_cuda_init(int index, st_backend **out, st_error *err) {
    return st_backend_cuda_init_tuned(index, NULL, out, err);
}
