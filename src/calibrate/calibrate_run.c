/*
 * Measuring packed vs padded weights on a backend (the method is in calibrate.h).
 *
 * Memory: two pools (packed, padded) of max(1.25 x LLC, largest weight) bytes each,
 * allocated and filled once for all shapes; a shape's copies are laid one after another
 * in its pool at 256-byte alignment, as the weights of a model are in its one buffer.
 * Consecutive products take consecutive copies (a cursor per pool), so a copy is read
 * again only after the whole pool - more than the LLC - has been read.
 *
 * Asynchronous backends (CUDA): the timer measures device time between two points of
 * the stream, which includes any idle gap while the host is still launching. So before
 * each timed sample a few large "lead-in" products are queued: while the device runs
 * them, the host queues the whole sample, and the device then runs the sample back to
 * back, as a CUDA graph would. The CPU's ops are synchronous and need none of this.
 */
#include "stride/calibrate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stride/clock.h"

#define ALIGN 256
#define DEFAULT_LLC_BYTES ((size_t)64 << 20)  /* when the device does not say */
#define POOL_LLC_FACTOR 1.25                  /* LRU is not perfect; x, y also take cache */
#define POOL_MAX_BYTES ((size_t)4 << 30)
#define FILL_CHUNK_BYTES ((size_t)8 << 20)
#define SAMPLE_US_ASYNC 1000.0   /* per sample: well above the event resolution (~0.5 us) */
#define SAMPLE_US_SYNC 5000.0    /* per sample on the host clock, above scheduler jitter */
#define MAX_OPS_PER_SAMPLE 100000
#define MAX_REPS 255
/* The lead-in product: W [4096, 4096] f16 . x [4096, 2048] f32, ~69 GFLOP (~0.1 ms on an
 * H200): long on the device, one launch on the host. */
#define LEAD_K 4096
#define LEAD_N 4096
#define LEAD_M 2048
#define MAX_LEAD_OPS 1000

enum { PACKED = 0, PADDED = 1 };
enum { DEC = 0, PRE = 1 };

/* Why these prefill batches. GPU: 512 is stride's default micro-batch (the pp512 that
 * SPEC.md section 5 targets) and the batch at which the H200 measurements found cuBLAS's
 * layout-dependent swings (2048x6144 -6% at M = 8..512, 2048x8192 +11% at M = 512): at
 * M = 512 cuBLAS runs the large compute-bound tiles of prefill, whose choice depends on
 * the leading dimension. CPU: the kernel (cpu_matmul.c) converts each block of weight rows
 * once and reuses it for every column, so the layout-dependent part of a prefill - reading
 * the rows at their stride - is the same at M = 32 as at M = 512, and only the
 * layout-independent dot products grow with M; 32 columns already make the product
 * compute-bound, as prefill is, while M = 512 would make a 2-core CPU's calibration of
 * one 1.7B model take minutes (the product is ~100x the decode's). */
int64_t st_calibrate_default_prefill_m(st_backend_kind backend) {
    return backend == ST_BACKEND_CPU ? 32 : 512;
}

static double now_us(void) { return st_clock_seconds() * 1e6; }

static size_t align_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

typedef struct run_ctx {
    st_backend *b;
    bool async;
    size_t pool_bytes;
    void *pool[2];
    void *x, *y;             /* F32 activations, sized for the largest K*M and N*M */
    void *lead_w, *lead_x, *lead_y;
    double lead_us;          /* device time of one lead-in product */
    int64_t m;               /* prefill batch */
} run_ctx;

typedef struct shape_run {
    st_tensor w[2];          /* [K, N] packed / padded; data moves through the pool */
    size_t copy_bytes;       /* spacing of the copies in a buffer: the padded copy's size */
    int64_t n_copies;
    int64_t cursor[2];       /* per buffer */
    int swap;                /* 1: the packed layout uses buffer 1, the padded buffer 0 */
    st_tensor x[2], y[2];    /* x [K, 1] / [K, M], y [N, 1] / [N, M] */
    int ops[2];              /* products per timed sample, per batch */
    int lead[2];             /* lead-in products before a sample, per batch */
} shape_run;

static st_tensor f32_matrix(void *data, int64_t ne0, int64_t ne1) {
    st_tensor t = {.type = ST_TYPE_F32, .ne = {ne0, ne1, 1, 1}, .data = data};
    bool ok = st_tensor_set_packed_strides(&t);
    ST_ASSERT(ok);
    return t;
}

/* Words valid in all three float types at once: f16 +-[1, 2), bf16 +-[2^-7, 2^-6) ...
 * and, read as f32, a high half with exponent 0x78..0x7F: never a NaN, an infinity or a
 * denormal (which would slow the CPU's float path), and not all-equal bits (which would
 * let a GPU's memory draw less power than real weights). */
static void fill_pattern(uint16_t *w, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint16_t r = (uint16_t)(s >> 40);
        w[i] = (uint16_t)((r & 0x8000u) | 0x3C00u | (r & 0x03FFu));
    }
}

static st_status fill_device(st_backend *b, void *dst, size_t bytes, uint64_t seed, st_error *err) {
    size_t chunk = bytes < FILL_CHUNK_BYTES ? bytes : FILL_CHUNK_BYTES;
    uint16_t *host = malloc(chunk + 2);
    if (!host) return st_error_set(err, ST_ERROR_NOMEM, "calibration: out of host memory");
    fill_pattern(host, chunk / 2 + 1, seed);
    st_status s = ST_OK;
    for (size_t off = 0; off < bytes && s == ST_OK; off += chunk) {
        size_t n = bytes - off < chunk ? bytes - off : chunk;
        s = b->iface->write(b, (char *)dst + off, host, n, err);
    }
    if (s == ST_OK) s = b->iface->synchronize(b, err);
    free(host);
    return s;
}

static st_status fill_activations(st_backend *b, void *dst, size_t n_floats, st_error *err) {
    float *host = malloc(n_floats * sizeof(float));
    if (!host) return st_error_set(err, ST_ERROR_NOMEM, "calibration: out of host memory");
    uint32_t s = 12345;
    for (size_t i = 0; i < n_floats; i++) {
        s = s * 1664525u + 1013904223u;
        host[i] = (float)((int32_t)(s >> 8) - (1 << 23)) / (float)(1 << 23); /* [-1, 1) */
    }
    st_status st = b->iface->write(b, dst, host, n_floats * sizeof(float), err);
    if (st == ST_OK) st = b->iface->synchronize(b, err);
    free(host);
    return st;
}

static st_status run_ops(run_ctx *c, shape_run *r, int layout, int batch, int count, st_error *err) {
    /* Which buffer serves which layout swaps every pair (see measure_shape), so that the
     * buffers' own placement (pages, huge pages, NUMA) cannot pass for a layout effect. */
    const int buf = layout ^ r->swap;
    for (int i = 0; i < count; i++) {
        st_tensor w = r->w[layout];
        w.data = (char *)c->pool[buf] + (size_t)r->cursor[buf] * r->copy_bytes;
        r->cursor[buf] = (r->cursor[buf] + 1) % r->n_copies;
        st_status s = c->b->iface->mul_mat(c->b, &r->y[batch], &w, &r->x[batch], err);
        if (s != ST_OK) return s;
    }
    return ST_OK;
}

static st_status run_lead(run_ctx *c, int count, st_error *err) {
    st_tensor w = {.type = ST_TYPE_F16, .ne = {LEAD_K, LEAD_N, 1, 1}, .data = c->lead_w};
    st_tensor_set_packed_strides(&w);
    st_tensor x = f32_matrix(c->lead_x, LEAD_K, LEAD_M), y = f32_matrix(c->lead_y, LEAD_N, LEAD_M);
    for (int i = 0; i < count; i++) {
        st_status s = c->b->iface->mul_mat(c->b, &y, &w, &x, err);
        if (s != ST_OK) return s;
    }
    return ST_OK;
}

/* One timed sample: microseconds per product. On a synchronous backend the sample ends
 * when its time is up (at most ops[batch] products), so that a product slowed down by the
 * machine's other work cannot stretch a sample without bound. */
static st_status sample(run_ctx *c, shape_run *r, int layout, int batch, double *us, st_error *err) {
    st_status s = ST_OK;
    if (c->async && r->lead[batch] > 0) s = run_lead(c, r->lead[batch], err);
    double ms = 0.0;
    int done = 0;
    if (s == ST_OK) s = c->b->iface->timer_start(c->b, err);
    if (s == ST_OK && c->async) {
        s = run_ops(c, r, layout, batch, r->ops[batch], err);
        done = r->ops[batch];
    } else if (s == ST_OK) {
        double t0 = now_us();
        do {
            s = run_ops(c, r, layout, batch, 1, err);
            done++;
        } while (s == ST_OK && done < r->ops[batch] && now_us() - t0 < SAMPLE_US_SYNC);
    }
    if (s == ST_OK) s = c->b->iface->timer_stop(c->b, &ms, err);
    *us = ms * 1000.0 / (done > 0 ? done : 1);
    return s;
}

static int clamp_int(double v, int lo, int hi) {
    if (!(v >= lo)) return lo;
    if (v > hi) return hi;
    return (int)v;
}

static double median_of(const double *v, int n) {
    double med;
    st_calibrate_ratio_stats(v, n, &med, NULL);
    return med;
}

/* Warm-up (first calls: library heuristics, page faults), then the per-product time of
 * each batch and the host's launch time, from which the sample sizes and lead-ins. */
static st_status plan_samples(run_ctx *c, shape_run *r, double *rep_us, st_error *err) {
    st_status s = ST_OK;
    for (int l = 0; l < 2 && s == ST_OK; l++)
        for (int bt = 0; bt < 2 && s == ST_OK; bt++) s = run_ops(c, r, l, bt, 1, err);
    if (s == ST_OK) s = c->b->iface->synchronize(c->b, err);
    if (s != ST_OK) return s;

    double t[2], host_us = 0.0;
    const int probe = r->n_copies < 4 ? (int)r->n_copies : 4;
    for (int bt = 0; bt < 2; bt++) {
        r->ops[bt] = probe;
        r->lead[bt] = 0;
        double us = 0.0, h0 = now_us();
        if ((s = c->b->iface->timer_start(c->b, err)) != ST_OK) return s;
        if ((s = run_ops(c, r, PACKED, bt, probe, err)) != ST_OK) return s;
        if (bt == DEC) host_us = (now_us() - h0) / probe; /* launch cost per product */
        double ms = 0.0;
        if ((s = c->b->iface->timer_stop(c->b, &ms, err)) != ST_OK) return s;
        us = ms * 1000.0 / probe;
        t[bt] = us > 0.05 ? us : 0.05;
    }
    const double target = c->async ? SAMPLE_US_ASYNC : SAMPLE_US_SYNC;
    *rep_us = 0.0;
    for (int bt = 0; bt < 2; bt++) {
        r->ops[bt] = clamp_int(ceil(target / t[bt]), 1, MAX_OPS_PER_SAMPLE);
        r->lead[bt] = 0;
        if (c->async) /* the device must stay busy while the host queues the sample */
            r->lead[bt] = clamp_int(ceil((1.2 * host_us * r->ops[bt] + 50.0) / c->lead_us), 1, MAX_LEAD_OPS);
        *rep_us += 2.0 * (r->ops[bt] * t[bt] + r->lead[bt] * c->lead_us);
    }
    return ST_OK;
}

static st_status measure_shape(run_ctx *c, size_t pad, const st_calib_shape *sh, int reps_max, double budget_us,
                               st_calib_result *out, st_error *err) {
    const double start = now_us();
    size_t row = 0;
    bool ok = st_type_row_bytes(sh->type, sh->k, &row);
    ST_ASSERT(ok);
    shape_run r;
    memset(&r, 0, sizeof(r));
    for (int l = 0; l < 2; l++) {
        st_tensor *w = &r.w[l];
        *w = (st_tensor){.type = sh->type, .ne = {sh->k, sh->n, 1, 1}};
        st_tensor_set_packed_strides(w);
        w->nb[1] = row + (l == PADDED ? pad : 0);
        w->nb[2] = w->nb[1] * (size_t)sh->n;
        w->nb[3] = w->nb[2];
    }
    r.copy_bytes = align_up(r.w[PADDED].nb[2]);
    r.n_copies = (int64_t)(c->pool_bytes / r.copy_bytes);
    ST_ASSERT(r.n_copies >= 1);
    r.x[DEC] = f32_matrix(c->x, sh->k, 1);
    r.x[PRE] = f32_matrix(c->x, sh->k, c->m);
    r.y[DEC] = f32_matrix(c->y, sh->n, 1);
    r.y[PRE] = f32_matrix(c->y, sh->n, c->m);

    double rep_us = 0.0;
    st_status s = plan_samples(c, &r, &rep_us, err);
    if (s != ST_OK) return s;
    int reps = reps_max;
    if (budget_us > 0.0) reps = clamp_int(floor(budget_us / rep_us), ST_CALIBRATE_MIN_REPS, reps_max);

    double times[2][2][MAX_REPS], ratios[2][MAX_REPS];
    for (int i = 0; i < reps; i++) {
        /* The bound is hard: past the budget after 3 pairs (a median and a spread), or
         * past twice the budget after 1, the shape is done with what it has. */
        double spent = now_us() - start;
        if (budget_us > 0.0 && ((i >= 3 && spent > budget_us) || (i >= 1 && spent > 2.0 * budget_us))) {
            reps = i;
            break;
        }
        r.swap = (i / 2) % 2; /* buffers: 0 1 0 1 for pairs 0, 1, then 1 0 1 0 for pairs 2, 3, ... */
        for (int bt = 0; bt < 2; bt++) {
            int first = i % 2 == 0 ? PACKED : PADDED; /* A B, then B A */
            for (int j = 0; j < 2; j++) {
                int l = j == 0 ? first : 1 - first;
                if ((s = sample(c, &r, l, bt, &times[l][bt][i], err)) != ST_OK) return s;
            }
            double packed = times[PACKED][bt][i];
            ratios[bt][i] = packed > 0.0 ? times[PADDED][bt][i] / packed : 1.0;
        }
    }
    memset(out, 0, sizeof(*out));
    out->shape = *sh;
    out->prefill_m = c->m;
    out->reps = reps;
    out->dec_packed_us = median_of(times[PACKED][DEC], reps);
    out->dec_padded_us = median_of(times[PADDED][DEC], reps);
    out->pre_packed_us = median_of(times[PACKED][PRE], reps);
    out->pre_padded_us = median_of(times[PADDED][PRE], reps);
    st_calibrate_ratio_stats(ratios[DEC], reps, &out->dec_ratio, &out->dec_noise);
    st_calibrate_ratio_stats(ratios[PRE], reps, &out->pre_ratio, &out->pre_noise);
    st_calibrate_decide(out->dec_ratio, out->dec_noise, out->pre_ratio, out->pre_noise, &out->verdict);
    return ST_OK;
}

static void ctx_free(run_ctx *c) {
    void *bufs[] = {c->pool[0], c->pool[1], c->x, c->y, c->lead_w, c->lead_x, c->lead_y};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        if (bufs[i]) c->b->iface->dealloc(c->b, bufs[i]);
}

static st_status alloc_fill(st_backend *b, size_t bytes, void **out, uint64_t seed, bool floats, st_error *err) {
    st_status s = b->iface->alloc(b, bytes, out, err);
    if (s != ST_OK) return s;
    return floats ? fill_activations(b, *out, bytes / sizeof(float), err) : fill_device(b, *out, bytes, seed, err);
}

/* Device time of one lead-in product (median of a few, after a warm-up). */
static st_status time_lead(run_ctx *c, st_error *err) {
    st_status s = run_lead(c, 1, err);
    if (s == ST_OK) s = c->b->iface->synchronize(c->b, err);
    double t[5];
    for (int i = 0; i < 5 && s == ST_OK; i++) {
        double ms = 0.0;
        s = c->b->iface->timer_start(c->b, err);
        if (s == ST_OK) s = run_lead(c, 1, err);
        if (s == ST_OK) s = c->b->iface->timer_stop(c->b, &ms, err);
        t[i] = ms * 1000.0;
    }
    if (s == ST_OK) {
        const double lead = median_of(t, 5);
        c->lead_us = lead > 1.0 ? lead : 1.0;
    }
    return s;
}

size_t st_calibrate_pool_bytes(const st_backend *b, size_t pad, const st_calib_shape *shapes, size_t n,
                               const st_calib_options *opt, size_t *llc, const char **llc_source) {
    const size_t cache =
        opt && opt->llc_bytes ? opt->llc_bytes : b->device.l2_bytes ? b->device.l2_bytes : DEFAULT_LLC_BYTES;
    if (llc) *llc = cache;
    if (llc_source) *llc_source = opt && opt->llc_bytes ? "--llc" : b->device.l2_bytes ? "device" : "assumed";
    size_t pool = (size_t)(POOL_LLC_FACTOR * (double)cache);
    if (pool > POOL_MAX_BYTES) pool = POOL_MAX_BYTES;
    for (size_t i = 0; i < n; i++) {
        size_t row = 0;
        if (!st_type_row_bytes(shapes[i].type, shapes[i].k, &row) || shapes[i].n <= 0) continue;
        const size_t copy = align_up((row + pad) * (size_t)shapes[i].n);
        if (copy > pool) pool = copy;
    }
    return pool;
}

st_status st_calibrate_shapes(st_backend *b, size_t alias, size_t pad, const st_calib_shape *shapes, size_t n,
                              const st_calib_options *opt, st_calib_result *results, st_error *err) {
    ST_ASSERT(b != NULL && (n == 0 || (shapes != NULL && results != NULL)));
    static const st_calib_options defaults = {0};
    if (!opt) opt = &defaults;
    if (n == 0) return ST_OK;
    if (!b->iface->timer_start || !b->iface->timer_stop)
        return st_error_set(err, ST_ERROR_UNSUPPORTED, "calibration: the %s backend has no timer",
                            st_backend_name(b->device.backend));
    run_ctx c = {.b = b, .async = b->device.backend != ST_BACKEND_CPU};
    c.m = opt->prefill_m > 0 ? opt->prefill_m : st_calibrate_default_prefill_m(b->device.backend);
    int reps_max = opt->reps > 0 ? opt->reps : ST_CALIBRATE_DEFAULT_REPS;
    if (reps_max > MAX_REPS) reps_max = MAX_REPS;
    if (reps_max < ST_CALIBRATE_MIN_REPS && opt->budget_s > 0) reps_max = ST_CALIBRATE_MIN_REPS;

    size_t max_x = 0, max_y = 0;
    for (size_t i = 0; i < n; i++) {
        const st_calib_shape *sh = &shapes[i];
        size_t row = 0;
        const st_type_traits *tr = st_type_get_traits((uint32_t)sh->type);
        if (!tr || !tr->is_float || sh->n <= 0 || sh->k <= 0 || !st_type_row_bytes(sh->type, sh->k, &row) ||
            row % alias != 0)
            return st_error_set(err, ST_ERROR_INVALID,
                                "calibration: shape %s %lld x %lld cannot be padded (rows must be float and a "
                                "multiple of the %zu B alias period)",
                                tr ? st_type_name((uint32_t)sh->type) : "?", (long long)sh->n, (long long)sh->k,
                                alias);
        size_t xb = (size_t)sh->k * (size_t)c.m * sizeof(float), yb = (size_t)sh->n * (size_t)c.m * sizeof(float);
        if (xb > max_x) max_x = xb;
        if (yb > max_y) max_y = yb;
    }
    const size_t pool = st_calibrate_pool_bytes(b, pad, shapes, n, opt, NULL, NULL);
    c.pool_bytes = pool;

    st_status s = ST_OK;
    for (int l = 0; l < 2 && s == ST_OK; l++) s = alloc_fill(b, pool, &c.pool[l], (uint64_t)l + 1, false, err);
    if (s == ST_OK) s = alloc_fill(b, max_x, &c.x, 0, true, err);
    if (s == ST_OK) s = b->iface->alloc(b, max_y, &c.y, err);
    if (s == ST_OK && c.async) {
        s = alloc_fill(b, (size_t)LEAD_K * LEAD_N * 2, &c.lead_w, 7, false, err);
        if (s == ST_OK) s = alloc_fill(b, (size_t)LEAD_K * LEAD_M * sizeof(float), &c.lead_x, 0, true, err);
        if (s == ST_OK) s = b->iface->alloc(b, (size_t)LEAD_N * LEAD_M * sizeof(float), &c.lead_y, err);
        if (s == ST_OK) s = time_lead(&c, err);
    }
    double t0 = now_us();
    for (size_t i = 0; i < n && s == ST_OK; i++) {
        double budget_us = 0.0;
        if (opt->budget_s > 0) { /* what is left, shared among the shapes left */
            double left = opt->budget_s * 1e6 - (now_us() - t0);
            budget_us = left > 0 ? left / (double)(n - i) : 1.0;
        }
        s = measure_shape(&c, pad, &shapes[i], reps_max, budget_us, &results[i], err);
        if (s == ST_OK && opt->progress) opt->progress(opt->progress_ctx, i + 1, n);
    }
    if (s != ST_OK) st_error_wrap(err, "calibrating on %s", b->device.name);
    ctx_free(&c);
    return s;
}
