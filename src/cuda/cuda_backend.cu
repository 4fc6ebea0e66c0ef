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
    st_cuda_ctx *c = cuda_ctx(b);
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

static st_status cuda_synchronize(st_backend *b, st_error *err) { return cuda_sync_and_check(cuda_ctx(b), err); }

// ---- graphs: the decode step recorded once and replayed ------------------------------------------

struct st_backend_graph {
    st_gpu_graph_exec_t exec;
};

// Global capture mode: a call that would be unsafe while recording (an allocation, a
// synchronisation) fails the capture instead of silently escaping the graph.
static st_status cuda_graph_begin(st_backend *b, st_error *err) {
    st_cuda_ctx *c = cuda_ctx(b);
    ST_ASSERT(!c->capturing);
    if (c->sticky.status != ST_OK) return cuda_sync_and_check(c, err);
    ST_GPU_CHECK(st_gpu_stream_begin_capture(c->stream, st_gpu_stream_capture_mode_global));
    c->capturing = true;
    return ST_OK;
}

static st_status cuda_graph_end(st_backend *b, st_backend_graph **out, st_error *err) {
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
        st_error_set(err, ST_ERROR_DEVICE, "recording the decode step as a CUDA graph failed: %s",
                     c->sticky.status != ST_OK ? c->sticky.message : st_gpu_get_error_string(rc));
        st_error_clear(&c->sticky);
        return ST_ERROR_DEVICE;
    }
    st_backend_graph *g = (st_backend_graph *)calloc(1, sizeof(*g));
    if (!g) {
        (void)st_gpu_graph_destroy(graph);
        return st_error_set(err, ST_ERROR_NOMEM, "out of host memory");
    }
    rc = st_gpu_graph_instantiate(&g->exec, graph);
    (void)st_gpu_graph_destroy(graph);
    if (rc != st_gpu_success) {
        free(g);
        return st_error_set(err, ST_ERROR_DEVICE, "instantiating the decode graph failed: %s",
                            st_gpu_get_error_string(rc));
    }
    *out = g;
    return ST_OK;
}

static st_status cuda_graph_launch(st_backend *b, st_backend_graph *g, st_error *err) {
    st_cuda_ctx *c = cuda_ctx(b);
    ST_GPU_CHECK(st_gpu_graph_launch(g->exec, c->stream));
    return ST_OK;
}

static void cuda_graph_free(st_backend *b, st_backend_graph *g) {
    if (!g) return;
    st_cuda_ctx *c = cuda_ctx(b);
    (void)st_gpu_stream_synchronize(c->stream); // a launch in flight still uses it
    (void)st_gpu_graph_exec_destroy(g->exec);
    free(g);
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

// ---- lifetime ------------------------------------------------------------------------------

// Frees what was created; safe on a partly initialised context. Errors are ignored here:
// there is nobody to report them to, and the process may be exiting after a device fault.
static void cuda_ctx_destroy(st_cuda_ctx *c) {
    if (!c) return;
    if (c->stream) (void)st_gpu_stream_synchronize(c->stream);
    if (c->blas) (void)st_gpu_blas_destroy(c->blas);
    if (c->blas_workspace) (void)st_gpu_free(c->blas_workspace);
    if (c->scratch) (void)st_gpu_free(c->scratch);
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
    t.host_alloc = cuda_host_alloc;
    t.host_free = cuda_host_free;
    t.upload_weight = cuda_upload_weight;
    t.get_rows = st_cuda_get_rows;
    t.mul_mat = st_cuda_mul_mat;
    t.mul_mat_id = st_cuda_mul_mat_id;
    t.mul_mat_fused = st_cuda_mul_mat_fused;
    t.prepared_norm_pays = st_cuda_prepared_norm_pays;
    t.rope_store = st_cuda_rope_store;
    t.rope_attention = st_cuda_rope_attention;
    t.rope_table = st_cuda_rope_table;
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
    t.synchronize = cuda_synchronize;
    t.timer_start = cuda_timer_start;
    t.timer_stop = cuda_timer_stop;
    t.graph_begin = cuda_graph_begin;
    t.graph_end = cuda_graph_end;
    t.graph_launch = cuda_graph_launch;
    t.graph_free = cuda_graph_free;
    return t;
}

static const st_backend_iface cuda_iface = cuda_make_iface();

// A tuning override from the environment, for measurements (bench/, scripts/device):
// *value unchanged when `name` is unset, an error naming it when it is not in [lo, hi].
static st_status cuda_env_override(const char *name, long lo, long hi, const char *meaning, long *value,
                                   st_error *err) {
    const char *v = getenv(name);
    if (!v || !*v) return ST_OK;
    char *end = NULL;
    const long x = strtol(v, &end, 10);
    if (*end != '\0' || x < lo || x > hi)
        return st_error_set(err, ST_ERROR_INVALID, "%s=%s: expected %s from %ld to %ld", name, v, meaning, lo, hi);
    *value = x;
    return ST_OK;
}

// The decode tuning, overridable for A/B measurements in one build: the most warps a
// decode GEMV row may take (cuda_gemv_decode.cu), 2, or 1 from STRIDE_CUDA_GEMV_SPLIT=1;
// how many waves long a fused product must be to run its norm apart (cuda_gemv.cu),
// GEMV_NORM_APART_WAVES, or STRIDE_CUDA_NORM_APART_WAVES (0: never); where a normed
// product reads the x * norm_w a residual add prepared (st_fused_mul_mat's x_w) instead of
// forming it in its loop: STRIDE_CUDA_NORM_PREPARED=1 where that pays (the default,
// st_cuda_prepared_norm_pays), 0 never, 2 wherever it can; which of the layers' products
// take the block-a-row kernel (cuda_gemv_rowblock.cu): STRIDE_CUDA_GEMV_ROWBLOCK, a mask of
// 1 (stores: q/k/v), 2 (residual adds: o, down) and 4 (gated pairs), 3 by default, 0 none;
// of which that kernel stages a block's rows in shared memory: STRIDE_CUDA_ROWBLOCK_STAGED,
// a mask of the same kinds (0: rows a batch in registers), by default those measured faster
// (cuda_gemv_rowblock.cu's rowblock_staged); and whether one token's decode attention takes
// the warps kernel where it can (cuda_attention_decode_warps.cu): STRIDE_CUDA_ATTN_WARPS, 1
// by default, 0 the split kernel everywhere, and how many of a group's query rows a block of
// it takes: STRIDE_CUDA_ATTN_ROWS, 1 by default, 2, 4, or 0 the whole group; which decode
// kernels are launched early, their weights' copies (cuda_gemv_rowblock.cu) or K/V rows
// (cuda_attention_decode_warps.cu) issued before they wait for the kernel ahead:
// STRIDE_CUDA_PDL, a mask of the same kinds of staged products (2: residual adds of short
// rows, o), 8 for the warps attention and 16 for residual adds of longer rows (down), by
// default 10 (sm_90 and later only; cuda_backend.h).
static st_status cuda_decode_tuning(st_cuda_ctx *c, st_error *err) {
    long split = 2, apart = GEMV_NORM_APART_WAVES, prepared = 1, rowblock = CUDA_ROWBLOCK_DEFAULT,
         staged = -1, attn_warps = 1, attn_rows = 1, pdl = CUDA_EARLY_DEFAULT;
    st_status s = cuda_env_override("STRIDE_CUDA_GEMV_SPLIT", 1, 2, "warps a row", &split, err);
    if (s == ST_OK)
        s = cuda_env_override("STRIDE_CUDA_GEMV_ROWBLOCK", 0, CUDA_ROWBLOCK_ALL, "a mask of 1, 2 and 4", &rowblock, err);
    if (s == ST_OK) s = cuda_env_override("STRIDE_CUDA_ROWBLOCK_STAGED", 0, CUDA_ROWBLOCK_ALL, "a mask of 1, 2 and 4", &staged,
                                   err);
    if (s == ST_OK) s = cuda_env_override("STRIDE_CUDA_NORM_APART_WAVES", 0, 1000000, "waves", &apart, err);
    if (s == ST_OK) s = cuda_env_override("STRIDE_CUDA_NORM_PREPARED", 0, 2, "0, 1 or 2", &prepared, err);
    if (s == ST_OK) s = cuda_env_override("STRIDE_CUDA_ATTN_WARPS", 0, 1, "0 or 1", &attn_warps, err);
    if (s == ST_OK) s = cuda_env_override("STRIDE_CUDA_ATTN_ROWS", 0, 4, "0, 1, 2 or 4", &attn_rows, err);
    if (s == ST_OK && attn_rows == 3)
        s = st_error_set(err, ST_ERROR_INVALID, "STRIDE_CUDA_ATTN_ROWS=3: expected 0, 1, 2 or 4");
    if (s == ST_OK) s = cuda_env_override("STRIDE_CUDA_PDL", 0, CUDA_EARLY_ALL, "a mask of 1, 2, 4, 8 and 16", &pdl, err);
    if (s != ST_OK) return s;
    c->attn_warps = (int)attn_warps;
    c->attn_rows = (int)attn_rows;
    c->gemv_max_split = (int)split;
    c->gemv_rowblock = (int)rowblock;
    int cc_major = 0; // cp.async: sm_80 and later
    if (st_gpu_device_get_attribute(&cc_major, st_gpu_dev_attr_cc_major, c->device) != st_gpu_success) cc_major = 0;
    c->gemv_rowblock_staged = cc_major >= 8 ? (int)staged : 0;
    c->early_launch = cc_major >= 9 ? (int)pdl : 0; // (griddepcontrol: sm_90)
    c->norm_apart_waves = (int)apart;
    c->norm_prepared = (int)prepared;
    return ST_OK;
}

static st_status cuda_ctx_create(int index, st_cuda_ctx *c, st_error *err) {
    c->device = index;
    ST_GPU_CHECK(st_gpu_set_device(index));
    ST_GPU_CHECK(st_gpu_device_get_attribute(&c->sm_count, st_gpu_dev_attr_multiprocessor_count, index));
    if (c->sm_count < 1) c->sm_count = 1;
    ST_GPU_CHECK(st_gpu_stream_create_with_flags(&c->stream, st_gpu_stream_non_blocking));
    ST_GPU_BLAS_CHECK(st_gpu_blas_create(&c->blas));
    ST_GPU_BLAS_CHECK(st_gpu_blas_set_stream(c->blas, c->stream));
    ST_GPU_CHECK(st_gpu_malloc(&c->blas_workspace, CUDA_BLAS_WORKSPACE_BYTES));
    ST_GPU_BLAS_CHECK(st_gpu_blas_set_workspace(c->blas, c->blas_workspace, CUDA_BLAS_WORKSPACE_BYTES));
    // Default math: F32 GEMMs stay in F32 (no TF32), so they match the CPU to f32 rounding.
    ST_GPU_BLAS_CHECK(st_gpu_blas_set_math_mode(c->blas, st_gpu_blas_default_math));
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
    st_status s = cuda_decode_tuning(c, err);
    if (s != ST_OK) return s;
    ST_GPU_CHECK(st_gpu_stream_synchronize(c->stream));
    return ST_OK;
}

extern "C" st_status st_backend_cuda_init(int index, st_backend **out, st_error *err) {
    *out = NULL;
    st_backend *b = (st_backend *)calloc(1, sizeof(*b));
    st_cuda_ctx *c = (st_cuda_ctx *)calloc(1, sizeof(*c));
    if (!b || !c) {
        free(b);
        free(c);
        return st_error_set(err, ST_ERROR_NOMEM, "out of host memory creating the CUDA backend");
    }
    st_status s = st_device_query(ST_BACKEND_CUDA, index, &b->device, err);
    if (s == ST_OK) s = cuda_ctx_create(index, c, err);
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
