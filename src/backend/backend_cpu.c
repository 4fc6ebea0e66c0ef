/* The CPU backend: host memory and the CPU ops of one path (stride/cpu_path.h): the fast
 * path's variant for this CPU by default, or the reference ops (src/cpu/). Index tensors
 * are I32 tensors in host memory, handed to the ops as plain arrays. */
#include "backend/backend_cpu.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_fast/cpu_fast.h"
#include "stride/clock.h"
#include "stride/cpu_ops.h"
#include "stride/cpu_path.h"

#define CPU_ALIGNMENT 256

typedef struct cpu_ctx {
    double timer_t0_ms;        /* < 0: no timer running */
    const st_cpu_op_table *ops; /* the path's ops */
    st_cpu_ws ws;               /* their scratch, kept between calls */
} cpu_ctx;

#define CPU_OPS(b) (((cpu_ctx *)(b)->ctx)->ops)
#define CPU_WS(b) (&((cpu_ctx *)(b)->ctx)->ws)

static void cpu_free(st_backend *b) {
    if (!b) return;
    if (b->ctx) st_cpu_ws_free(CPU_WS(b));
    free(b->ctx);
    free(b);
}

static st_status cpu_alloc(st_backend *b, size_t nbytes, void **out, st_error *err) {
    (void)b;
    size_t rounded = (nbytes + CPU_ALIGNMENT - 1) / CPU_ALIGNMENT * CPU_ALIGNMENT;
    if (rounded < nbytes) return st_error_set(err, ST_ERROR_NOMEM, "allocation of %zu bytes overflows", nbytes);
    *out = aligned_alloc(CPU_ALIGNMENT, rounded ? rounded : CPU_ALIGNMENT);
    if (!*out)
        return st_error_set(err, ST_ERROR_NOMEM, "out of host memory allocating %zu bytes (%.2f GiB)", nbytes,
                            (double)nbytes / (1 << 30));
    return ST_OK;
}

static void cpu_dealloc(st_backend *b, void *ptr) {
    (void)b;
    free(ptr);
}

static st_status cpu_copy(st_backend *b, void *dst, const void *src, size_t n, st_error *err) {
    (void)b;
    (void)err;
    if (n) memcpy(dst, src, n);
    return ST_OK;
}

/* The CPU's "2D copy": every row of every expert to its padded place, pad bytes zeroed. */
static st_status cpu_upload_weight(st_backend *b, st_tensor *dst, const void *packed, st_error *err) {
    (void)b;
    (void)err;
    ST_ASSERT(st_tensor_has_contiguous_rows(dst));
    size_t row = st_tensor_row_bytes(dst);
    size_t pad = dst->nb[1] - row;
    int64_t rows = dst->ne[1] * dst->ne[2] * dst->ne[3];
    const char *src = packed;
    char *out = dst->data;
    for (int64_t r = 0; r < rows; r++) {
        memcpy(out + (size_t)r * dst->nb[1], src + (size_t)r * row, row);
        if (pad) memset(out + (size_t)r * dst->nb[1] + row, 0, pad);
    }
    return ST_OK;
}

static const int32_t *ids_of(const st_tensor *t) {
    ST_ASSERT(t->type == ST_TYPE_I32 && t->nb[0] == sizeof(int32_t));
    return t->data;
}

static st_status cpu_get_rows(st_backend *b, st_tensor *dst, const st_tensor *src, const st_tensor *ids,
                              st_error *err) {
    return CPU_OPS(b)->get_rows(dst, src, ids_of(ids), err);
}

static st_status cpu_mul_mat(st_backend *b, st_tensor *dst, const st_tensor *w, const st_tensor *x, st_error *err) {
    return CPU_OPS(b)->mul_mat(CPU_WS(b), dst, w, x, err);
}

static st_status cpu_mul_mat_id(st_backend *b, st_tensor *dst, const st_tensor *w, const st_tensor *x,
                                const st_tensor *ids, st_error *err) {
    return CPU_OPS(b)->mul_mat_id(CPU_WS(b), dst, w, x, ids_of(ids), err);
}

static void cpu_rms_norm(st_backend *b, st_tensor *dst, const st_tensor *x, const st_tensor *w, float eps) {
    CPU_OPS(b)->rms_norm(dst, x, w, eps, false);
}

static void cpu_rope(st_backend *b, st_tensor *dst, const st_tensor *x, const st_tensor *positions,
                     const st_rope_params *p) {
    CPU_OPS(b)->rope(dst, x, ids_of(positions), p);
}

static void cpu_swiglu(st_backend *b, st_tensor *dst, const st_tensor *gate, const st_tensor *up) {
    CPU_OPS(b)->swiglu(dst, gate, up);
}

static void cpu_geglu(st_backend *b, st_tensor *dst, const st_tensor *gate, const st_tensor *up) {
    CPU_OPS(b)->geglu(dst, gate, up);
}

static void cpu_swiglu_fused(st_backend *b, st_tensor *dst, const st_tensor *gate_up) {
    CPU_OPS(b)->swiglu_fused(dst, gate_up);
}

static void cpu_add(st_backend *b, st_tensor *dst, const st_tensor *a, const st_tensor *x) {
    CPU_OPS(b)->add(dst, a, x);
}

static void cpu_mul(st_backend *b, st_tensor *dst, const st_tensor *a, const st_tensor *x) {
    CPU_OPS(b)->mul(dst, a, x);
}

static void cpu_scale(st_backend *b, st_tensor *dst, const st_tensor *x, float s) {
    CPU_OPS(b)->scale(dst, x, s);
}

static st_status cpu_kv_store(st_backend *b, st_tensor *cache, const st_tensor *x, const st_tensor *positions,
                              st_error *err) {
    return CPU_OPS(b)->kv_store(cache, x, ids_of(positions), err);
}

static st_status cpu_attention(st_backend *b, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                               const st_tensor *v_cache, const st_tensor *positions, const st_kv_pages *pages,
                               const st_attn_params *p, st_error *err) {
    if (!pages) return CPU_OPS(b)->attention(CPU_WS(b), dst, q, k_cache, v_cache, ids_of(positions), NULL, NULL, 0, p, err);
    ST_ASSERT(pages->table->ne[0] <= INT32_MAX);
    return CPU_OPS(b)->attention(CPU_WS(b), dst, q, k_cache, v_cache, ids_of(positions), ids_of(pages->seq),
                                 ids_of(pages->table), (int32_t)pages->table->ne[0], p, err);
}

static void cpu_topk_route(st_backend *b, st_tensor *ids, st_tensor *weights, const st_tensor *logits, int32_t k,
                           bool softmax_first, bool normalize) {
    (void)b;
    ST_ASSERT(ids->type == ST_TYPE_I32 && ids->ne[0] == k);
    st_cpu_topk_route(ids->data, weights, logits, k, softmax_first, normalize);
}

static void cpu_moe_combine(st_backend *b, st_tensor *dst, const st_tensor *src, const st_tensor *weights) {
    (void)b;
    st_cpu_moe_combine(dst, src, weights);
}

static void cpu_top_k(st_backend *b, st_tensor *ids, st_tensor *vals, const st_tensor *logits, int32_t k) {
    (void)b;
    ST_ASSERT(ids->type == ST_TYPE_I32 && ids->ne[0] == k && ids->nb[1] == (size_t)k * sizeof(int32_t));
    st_cpu_top_k_logits(ids->data, vals, logits, k);
}

static void cpu_draw(st_backend *b, st_tensor *ids, st_tensor *drawn, const st_tensor *logits, const st_tensor *params,
                     const st_tensor *words, const st_tensor *penalized) {
    (void)b;
    st_cpu_draw_rows(ids, drawn, logits, params, words, penalized);
}

static st_status cpu_synchronize(st_backend *b, st_error *err) {
    (void)b;
    (void)err;
    return ST_OK;
}

/* The ops are synchronous: the host's monotonic clock times them. */
static double cpu_now_ms(void) { return st_clock_seconds() * 1e3; }

static st_status cpu_timer_start(st_backend *b, st_error *err) {
    (void)err;
    ((cpu_ctx *)b->ctx)->timer_t0_ms = cpu_now_ms();
    return ST_OK;
}

static st_status cpu_timer_stop(st_backend *b, double *ms, st_error *err) {
    cpu_ctx *c = b->ctx;
    if (c->timer_t0_ms < 0) return st_error_set(err, ST_ERROR_INVALID, "timer_stop without timer_start");
    *ms = cpu_now_ms() - c->timer_t0_ms;
    c->timer_t0_ms = -1.0;
    return ST_OK;
}

static const st_backend_iface cpu_iface = {
    .free = cpu_free,
    .alloc = cpu_alloc,
    .dealloc = cpu_dealloc,
    .write = cpu_copy,
    .read = cpu_copy,
    .copy = cpu_copy,
    .upload_weight = cpu_upload_weight,
    .get_rows = cpu_get_rows,
    .mul_mat = cpu_mul_mat,
    .mul_mat_id = cpu_mul_mat_id,
    .rms_norm = cpu_rms_norm,
    .rope = cpu_rope,
    .swiglu = cpu_swiglu,
    .geglu = cpu_geglu,
    .swiglu_fused = cpu_swiglu_fused,
    .add = cpu_add,
    .mul = cpu_mul,
    .scale = cpu_scale,
    .kv_store = cpu_kv_store,
    .attention = cpu_attention,
    .topk_route = cpu_topk_route,
    .moe_combine = cpu_moe_combine,
    .top_k = cpu_top_k,
    .draw = cpu_draw,
    .synchronize = cpu_synchronize,
    .timer_start = cpu_timer_start,
    .timer_stop = cpu_timer_stop,
};

st_status st_backend_cpu_init_path(st_cpu_path path, st_backend **out, st_error *err) {
    st_backend *b = calloc(1, sizeof(*b));
    cpu_ctx *c = calloc(1, sizeof(*c));
    if (!b || !c) {
        free(b);
        free(c);
        return st_error_set(err, ST_ERROR_NOMEM, "out of host memory creating the CPU backend");
    }
    c->timer_t0_ms = -1.0;
    c->ops = path == ST_CPU_PATH_EXACT ? st_cpu_ops_exact() : st_cpu_ops_fast(st_cpu_fast_best_isa());
    if (!c->ops) {
        free(c);
        free(b);
        return st_error_set(err, ST_ERROR_UNSUPPORTED,
                            "the CPU fast path has no variant for this CPU in this build (run with --exact)");
    }
    b->iface = &cpu_iface;
    b->ctx = c;
    st_status s = st_device_query(ST_BACKEND_CPU, 0, &b->device, err);
    if (s != ST_OK) {
        free(c);
        free(b);
        return s;
    }
    *out = b;
    return ST_OK;
}

st_status st_backend_cpu_init(st_backend **out, st_error *err) {
    return st_backend_cpu_init_path(ST_CPU_PATH_FAST, out, err);
}

const char *st_backend_cpu_path_name(const st_backend *b) {
    return b && b->iface == &cpu_iface ? CPU_OPS(b)->name : NULL;
}
