/*
 * Quantized weights on the CUDA backend (cuda_quant_*.cu) against the CPU backend, which
 * dequantizes bit-exactly like the gguf package (tests/python/test_quant_vectors.py):
 * every type stride reads, odd N, K of one block, an odd number of blocks and a model-sized
 * row, M = 1, 2, 3, 7 (the matrix-vector kernel; at M = 1 also more rows than its grid
 * holds at once) and 8, 9, 33, 512 (dequantize-to-F16 + cuBLAS), packed / strided /
 * gapped activations, packed and padded weight row strides;
 * get_rows (exact), mul_mat_id, the fused product of the forward pass, the upload (kept
 * as stored), and the errors (a type CUDA cannot read, rows off the block alignment, a
 * row id outside the table).
 *
 * Weights are random blocks: random bytes for the quants and sub-block scales, and sane
 * f16 super-scales (d ~ 2^-7, either sign; dmin, m ~ 2^-8..2^-4), one block in 16 with a
 * subnormal d so that half -> float of subnormals is exercised.
 *
 * Prints one line per case, a table `op | cases | passed | worst error`, then
 * "N passed, M failed". Exits 1 on any failure or when no case ran, 2 on a setup error,
 * 77 when built without CUDA. STRIDE_TEST_SEED=n reseeds.
 */
#include "gpu_test_util.h"

#include "cuda/cuda_backend.h"
#include "stride/cpu_ops.h"
#include "stride/quant.h"

/* ---- tolerances (normalised error) -------------------------------------------------- */

/* The matrix-vector kernel (M < ST_CUDA_QGEMM_MIN_M) and mul_mat_id: every weight is
 * dequantized to the CPU's f32 value bit for bit (same roundings, no FMA contraction),
 * products and sums are f32: only the summation order differs, u * sqrt(K) relative
 * (u = 2^-24: ~3e-6 at K = 2048 in the worst case, ~1e-7 typically). */
#define TOL_Q_GEMV 1e-5
/* The prefill path rounds BOTH operands to f16 (u = 2^-11) before cuBLAS multiplies them
 * with f32 accumulation. A dequantized weight is NOT exact in f16 in general: d * q takes
 * 11 + 8 significant bits for q8_0, (d * sc) * q - dmin * m up to 24 for q4_K (and the
 * difference can cancel), so each weight carries a relative rounding error of at most
 * 2^-11 (RMS ~2^-11 / sqrt(3) = 2.8e-4), as does each input. For random-signed terms the
 * normalised error of the sum is the RMS relative error per term: sqrt(2) * 2.8e-4 =
 * 4e-4; the tolerance is ~3.75x that. (Weights below 2^-14 become f16 subnormals with an
 * absolute error <= 2^-25: negligible against the rows' norm.) */
#define TOL_Q_GEMM 1.5e-3
/* get_rows, the upload, and the same product read at two row strides: exact. */
#define TOL_EXACT 0.0

st_backend *g_cpu, *g_gpu;
uint64_t g_rng = 0x9a4e5eedull;


static const st_type_traits *traits(st_type t) {
    const st_type_traits *tr = st_type_get_traits((uint32_t)t);
    if (!tr) test_die("unknown type", NULL);
    return tr;
}

/* ---- random quantized weights ---------------------------------------------------------- */

static void put_f16(char *p, float f) {
    uint16_t h = st_f32_to_f16(f);
    memcpy(p, &h, 2);
}

/* A random f16 scale of magnitude ~base (0.5x..1.5x), signed when asked; one block in 16
 * gets a subnormal one instead. */
static float rand_scale(float base, bool sign, bool subnormal) {
    if (subnormal) return (float)(1 + rng_int(1000)) * 5.9604645e-8f; /* k * 2^-24 */
    float f = base * (1.0f + 0.5f * rng_f32());
    return sign && (rng_next() & 1) ? -f : f;
}

/* n_blocks random blocks of type t at dst. */
static void random_blocks(st_type t, char *dst, size_t n_blocks) {
    const size_t bb = traits(t)->block_bytes;
    for (size_t b = 0; b < n_blocks; b++) {
        char *p = dst + b * bb;
        for (size_t i = 0; i < bb; i++) p[i] = (char)(rng_next() & 0xff);
        const bool sub = rng_int(16) == 0;
        const float d = rand_scale(1.0f / 128, true, sub), dmin = rand_scale(1.0f / 256, false, false);
        switch (t) {
        case ST_TYPE_Q8_0:
        case ST_TYPE_Q4_0:
        case ST_TYPE_Q5_0: put_f16(p, d); break;
        case ST_TYPE_Q4_1:
        case ST_TYPE_Q5_1:
            put_f16(p, fabsf(d));
            put_f16(p + 2, -16.0f * dmin); /* m: the block's minimum, ~ -8 d */
            break;
        case ST_TYPE_Q2_K:
            put_f16(p + 80, fabsf(d));
            put_f16(p + 82, dmin);
            break;
        case ST_TYPE_Q3_K: put_f16(p + 108, d / 4); break;
        case ST_TYPE_Q4_K:
        case ST_TYPE_Q5_K:
            put_f16(p, fabsf(d) / 32); /* times a 6-bit scale */
            put_f16(p + 2, dmin / 32);
            break;
        case ST_TYPE_Q6_K: put_f16(p + 208, d / 64); break; /* times an int8 scale */
        case ST_TYPE_Q8_K: {
            const float f = d / 4;
            memcpy(p, &f, 4);
            break;
        }
        default: test_die("random_blocks: no layout for this type", NULL);
        }
    }
}

/* A quantized weight [K, N, E] with row stride row_bytes + pad, uploaded to both backends
 * from one packed host copy (kept, for a second upload at another stride). */
typedef struct qweight {
    view v;
    dual d;
    char *packed;
    size_t packed_bytes;
} qweight;

static view qview(st_type t, int64_t K, int64_t N, int64_t E, size_t pad) {
    const st_type_traits *tr = traits(t);
    view v = {.off = 0};
    v.t.type = t;
    v.t.ne[0] = K;
    v.t.ne[1] = N;
    v.t.ne[2] = E;
    v.t.ne[3] = 1;
    v.t.nb[0] = tr->block_bytes;
    v.t.nb[1] = (size_t)(K / tr->block_size) * tr->block_bytes + pad;
    v.t.nb[2] = v.t.nb[1] * (size_t)N;
    v.t.nb[3] = v.t.nb[2] * (size_t)E;
    return v;
}

static qweight qweight_upload(st_type t, int64_t K, int64_t N, int64_t E, size_t pad, const char *packed) {
    qweight w;
    w.v = qview(t, K, N, E, pad);
    w.packed_bytes = (size_t)(K / traits(t)->block_size) * traits(t)->block_bytes * (size_t)(N * E);
    w.d = dual_new(w.v.t.nb[3]);
    w.packed = malloc(w.packed_bytes + 1);
    if (!w.packed) test_die("host malloc", NULL);
    memcpy(w.packed, packed, w.packed_bytes);
    st_error err = {0};
    st_tensor tc = on(&w.v, w.d.cpu), tg = on(&w.v, w.d.gpu);
    if (g_cpu->iface->upload_weight(g_cpu, &tc, packed, &err) != ST_OK) test_die("cpu upload", &err);
    if (g_gpu->iface->upload_weight(g_gpu, &tg, packed, &err) != ST_OK) test_die("cuda upload", &err);
    return w;
}

static qweight qweight_new(st_type t, int64_t K, int64_t N, int64_t E, size_t pad) {
    const size_t n_blocks = (size_t)(K / traits(t)->block_size) * (size_t)(N * E);
    char *packed = malloc(n_blocks * traits(t)->block_bytes + 1);
    if (!packed) test_die("host malloc", NULL);
    random_blocks(t, packed, n_blocks);
    qweight w = qweight_upload(t, K, N, E, pad, packed);
    free(packed);
    return w;
}

static void qweight_free(qweight *w) {
    dual_free(&w->d);
    free(w->packed);
    w->packed = NULL;
}


/* ---- upload: kept as stored ------------------------------------------------------------- */

static void test_upload(st_type t, int64_t K, int64_t N, size_t pad) {
    qweight w = qweight_new(t, K, N, 1, pad);
    char *got = dual_fetch(&w.d);
    char *ref = malloc(w.d.bytes + 1);
    if (!ref) test_die("host malloc", NULL);
    memcpy(ref, w.d.cpu, w.d.bytes);
    cmp_result r = compare_bytes(ref, got, w.d.bytes);
    const size_t row = w.v.t.nb[1] - pad;
    for (int64_t n = 0; n < N; n++) { /* the stored blocks, then zeroed pad bytes */
        r.bad += memcmp(got + (size_t)n * w.v.t.nb[1], w.packed + (size_t)n * row, row) != 0;
        for (size_t j = row; j < w.v.t.nb[1]; j++) r.bad += got[(size_t)n * w.v.t.nb[1] + j] != 0;
    }
    char desc[128];
    snprintf(desc, sizeof(desc), "%s K=%lld N=%lld pad=%zu", tname(t), (long long)K, (long long)N, pad);
    record("upload_weight", desc, &r, TOL_EXACT);
    free(ref);
    free(got);
    qweight_free(&w);
}

/* ---- get_rows: exact --------------------------------------------------------------------- */

static void test_get_rows(st_type t, int64_t K, int64_t M, size_t pad) {
    const int64_t V = 50;
    qweight w = qweight_new(t, K, V, 1, pad);
    int32_t ids[64];
    for (int64_t m = 0; m < M; m++) ids[m] = m == 0 ? (int32_t)(V - 1) : rng_int((int32_t)V);
    dual di = ids_new(ids, M);
    view vi = mkpacked(ST_TYPE_I32, M, 1, 1);
    view vy = mkview(ST_TYPE_F32, K, M, 1, (size_t)(K + 3) * 4, (size_t)(K + 3) * 4 * (size_t)M, 4);
    dual dy = dual_new(view_bytes(&vy));
    dual_poison(&dy);
    st_error err = {0};
    st_tensor wc = on(&w.v, w.d.cpu), wg = on(&w.v, w.d.gpu), ic = on(&vi, di.cpu), ig = on(&vi, di.gpu);
    st_tensor yc = on(&vy, dy.cpu), yg = on(&vy, dy.gpu);
    if (g_cpu->iface->get_rows(g_cpu, &yc, &wc, &ic, &err) != ST_OK) test_die("cpu get_rows", &err);
    if (g_gpu->iface->get_rows(g_gpu, &yg, &wg, &ig, &err) != ST_OK) test_die("cuda get_rows", &err);
    char *got = dual_fetch(&dy);
    cmp_result r = compare_f32(&vy, dy.cpu, got, dy.bytes);
    r.bad += memcmp(got, dy.cpu, dy.bytes) != 0; /* bit for bit, not only within 0 */
    char desc[128];
    snprintf(desc, sizeof(desc), "%s K=%lld V=%lld M=%lld pad=%zu", tname(t), (long long)K, (long long)V,
             (long long)M, pad);
    record("get_rows", desc, &r, TOL_EXACT);
    free(got);
    dual_free(&dy);
    dual_free(&di);
    qweight_free(&w);
}

/* ---- mul_mat ------------------------------------------------------------------------------ */


static double mm_tol(int64_t M) { return M < ST_CUDA_QGEMM_MIN_M ? TOL_Q_GEMV : TOL_Q_GEMM; }

/* The product with weights at row stride packed + pad, against the CPU; with pad, also the
 * same weights packed on the GPU, which must give the same bits (neither path's order
 * depends on the stride: the GEMV reads the same blocks, the GEMM multiplies a packed F16
 * copy). */
static void test_mul_mat(st_type t, int64_t K, int64_t N, int64_t M, size_t pad, x_layout xl) {
    qweight w = qweight_new(t, K, N, 1, pad);
    view vx, vy;
    mm_views(xl, K, N, M, &vx, &vy);
    dual dx = dual_new(view_bytes(&vx)), dy = dual_new(view_bytes(&vy));
    dual_random_f32(&dx);
    dual_poison(&dy);
    st_error err = {0};
    st_tensor wc = on(&w.v, w.d.cpu), wg = on(&w.v, w.d.gpu), xc = on(&vx, dx.cpu), xg = on(&vx, dx.gpu);
    st_tensor yc = on(&vy, dy.cpu), yg = on(&vy, dy.gpu);
    if (g_cpu->iface->mul_mat(g_cpu, &yc, &wc, &xc, &err) != ST_OK) test_die("cpu mul_mat", &err);
    if (g_gpu->iface->mul_mat(g_gpu, &yg, &wg, &xg, &err) != ST_OK) test_die("cuda mul_mat", &err);
    char *got = dual_fetch(&dy);
    cmp_result r = compare_f32(&vy, dy.cpu, got, dy.bytes);
    char desc[128];
    snprintf(desc, sizeof(desc), "%s K=%lld N=%lld M=%lld pad=%zu x=%s %s", tname(t), (long long)K, (long long)N,
             (long long)M, pad, x_layout_name[xl], M < ST_CUDA_QGEMM_MIN_M ? "gemv" : "gemm");
    record("mul_mat", desc, &r, mm_tol(M));
    if (pad) {
        qweight wp = qweight_upload(t, K, N, 1, 0, w.packed);
        dual dy2 = dual_new(dy.bytes);
        dual_poison(&dy2);
        st_tensor wpg = on(&wp.v, wp.d.gpu), y2g = on(&vy, dy2.gpu);
        if (g_gpu->iface->mul_mat(g_gpu, &y2g, &wpg, &xg, &err) != ST_OK) test_die("cuda mul_mat", &err);
        char *got2 = dual_fetch(&dy2);
        cmp_result r2 = compare_f32(&vy, got, got2, dy.bytes);
        r2.bad += memcmp(got, got2, dy.bytes) != 0;
        record("mul_mat padded=packed", desc, &r2, TOL_EXACT);
        free(got2);
        dual_free(&dy2);
        qweight_free(&wp);
    }
    free(got);
    dual_free(&dx);
    dual_free(&dy);
    qweight_free(&w);
}

/* The matrix-vector product into page-locked host memory (host_alloc), as a decode step's
 * quantized output head writes its logits straight to the host: the same bytes as into
 * device memory, the values outside the view (gaps between and around the columns) left
 * as they were. N = 45 leaves dead warps in the last block. */
static void test_mul_mat_to_host(st_type t, int64_t K, int64_t N, int64_t M) {
    qweight w = qweight_new(t, K, N, 1, 0);
    view vx, vy;
    mm_views(X_GAPPED, K, N, M, &vx, &vy);
    dual dx = dual_new(view_bytes(&vx)), dy = dual_new(view_bytes(&vy));
    dual_random_f32(&dx);
    dual_poison(&dy);
    st_error err = {0};
    char *host = NULL;
    if (g_gpu->iface->host_alloc(g_gpu, dy.bytes, (void **)&host, &err) != ST_OK) test_die("cuda host_alloc", &err);
    memcpy(host, dy.host, dy.bytes); /* the same poison */
    st_tensor wg = on(&w.v, w.d.gpu), xg = on(&vx, dx.gpu), yd = on(&vy, dy.gpu), yh = on(&vy, host);
    if (g_gpu->iface->mul_mat(g_gpu, &yd, &wg, &xg, &err) != ST_OK) test_die("cuda mul_mat", &err);
    if (g_gpu->iface->mul_mat(g_gpu, &yh, &wg, &xg, &err) != ST_OK) test_die("cuda mul_mat to host", &err);
    char *want = dual_fetch(&dy); /* synchronizes: host is final too */
    cmp_result r = compare_bytes(want, host, dy.bytes);
    char desc[96];
    snprintf(desc, sizeof(desc), "%s K=%lld N=%lld M=%lld y in page-locked host memory", tname(t), (long long)K,
             (long long)N, (long long)M);
    record("mul_mat to host = to device", desc, &r, TOL_EXACT);
    free(want);
    g_gpu->iface->host_free(g_gpu, host);
    dual_free(&dx);
    dual_free(&dy);
    qweight_free(&w);
}

/* One column alone (the one-column kernel) and the same column among M - 1 others (the
 * kernel for several): the same bits, since a lane's chunks and the warp's sum follow K
 * alone. x packed [K, M]; x[:, 0] is the single column's input. */
static void test_mul_mat_columns_agree(st_type t, int64_t K, int64_t N, int64_t M) {
    qweight w = qweight_new(t, K, N, 1, 16);
    view vx = mkpacked(ST_TYPE_F32, K, M, 1), vx1 = mkpacked(ST_TYPE_F32, K, 1, 1);
    view vy = mkpacked(ST_TYPE_F32, N, M, 1), vy1 = mkpacked(ST_TYPE_F32, N, 1, 1);
    dual dx = dual_new(view_bytes(&vx)), dy = dual_new(view_bytes(&vy)), dy1 = dual_new(view_bytes(&vy1));
    dual_random_f32(&dx);
    dual_poison(&dy);
    dual_poison(&dy1);
    st_error err = {0};
    st_tensor wg = on(&w.v, w.d.gpu), xg = on(&vx, dx.gpu), x1g = on(&vx1, dx.gpu);
    st_tensor yg = on(&vy, dy.gpu), y1g = on(&vy1, dy1.gpu);
    if (g_gpu->iface->mul_mat(g_gpu, &yg, &wg, &xg, &err) != ST_OK) test_die("cuda mul_mat", &err);
    if (g_gpu->iface->mul_mat(g_gpu, &y1g, &wg, &x1g, &err) != ST_OK) test_die("cuda mul_mat", &err);
    char *all = dual_fetch(&dy), *one = dual_fetch(&dy1);
    cmp_result r = compare_bytes(all, one, dy1.bytes); /* column 0 of all = the single column */
    char desc[96];
    snprintf(desc, sizeof(desc), "%s K=%lld N=%lld column 0 of M=%lld = M=1", tname(t), (long long)K, (long long)N,
             (long long)M);
    record("mul_mat one column = among several", desc, &r, TOL_EXACT);
    free(all);
    free(one);
    dual_free(&dx);
    dual_free(&dy);
    dual_free(&dy1);
    qweight_free(&w);
}

/* ---- mul_mat_id ----------------------------------------------------------------------------- */

typedef enum moe_x { MOE_PER_SLOT = 0, MOE_SHARED_2D = 1, MOE_SHARED_3D = 2 } moe_x;
static const char *moe_x_name[] = {"per-slot", "shared-2d", "shared-3d"};

static void test_mul_mat_id(st_type t, int64_t K, int64_t N, int64_t E, int64_t n_used, int64_t M, moe_x xm) {
    qweight w = qweight_new(t, K, N, E, 0);
    int32_t ids[64];
    for (int64_t i = 0; i < n_used * M; i++) ids[i] = rng_int((int32_t)E);
    dual di = ids_new(ids, n_used * M);
    view vi = mkpacked(ST_TYPE_I32, n_used, M, 1);
    view vx;
    if (xm == MOE_PER_SLOT) {
        size_t nb1 = (size_t)(K + 3) * 4;
        vx = mkview(ST_TYPE_F32, K, n_used, M, nb1, nb1 * (size_t)n_used + 16, 4);
    } else if (xm == MOE_SHARED_2D) {
        vx = mkpacked(ST_TYPE_F32, K, M, 1);
    } else {
        vx = mkview(ST_TYPE_F32, K, 1, M, (size_t)K * 4, (size_t)(K + 4) * 4, 0);
    }
    size_t ynb1 = (size_t)(N + 1) * 4;
    view vy = mkview(ST_TYPE_F32, N, n_used, M, ynb1, ynb1 * (size_t)n_used + 8, 0);
    dual dx = dual_new(view_bytes(&vx)), dy = dual_new(view_bytes(&vy));
    dual_random_f32(&dx);
    dual_poison(&dy);
    st_error err = {0};
    st_tensor wc = on(&w.v, w.d.cpu), wg = on(&w.v, w.d.gpu), xc = on(&vx, dx.cpu), xg = on(&vx, dx.gpu);
    st_tensor yc = on(&vy, dy.cpu), yg = on(&vy, dy.gpu), ic = on(&vi, di.cpu), ig = on(&vi, di.gpu);
    if (g_cpu->iface->mul_mat_id(g_cpu, &yc, &wc, &xc, &ic, &err) != ST_OK) test_die("cpu mul_mat_id", &err);
    if (g_gpu->iface->mul_mat_id(g_gpu, &yg, &wg, &xg, &ig, &err) != ST_OK) test_die("cuda mul_mat_id", &err);
    char *got = dual_fetch(&dy);
    cmp_result r = compare_f32(&vy, dy.cpu, got, dy.bytes);
    char desc[128];
    snprintf(desc, sizeof(desc), "%s K=%lld N=%lld E=%lld used=%lld M=%lld x=%s", tname(t), (long long)K,
             (long long)N, (long long)E, (long long)n_used, (long long)M, moe_x_name[xm]);
    record("mul_mat_id", desc, &r, TOL_Q_GEMV);
    free(got);
    dual_free(&dx);
    dual_free(&dy);
    dual_free(&di);
    qweight_free(&w);
}

/* ---- the fused product of the forward pass (st_fused_mul_mat) ------------------------------- */

static const char *epilogue_name[] = {"store", "add", "swiglu", "geglu"};

/* A fused product's buffers on both backends: y[] (STORE), h (the normed x), out (the
 * residual of ADD, or a gated unit's result) and next_h (ADD's out * next_norm_w). */
typedef struct fused_bufs {
    dual dy[3], dh, dout, dnext;
} fused_bufs;

/* resid: ADD's starting out (host bytes), else NULL (poisoned). */
static fused_bufs fused_bufs_new(const view *vy, int n_w, const view *vh, const view *vo, const char *resid) {
    fused_bufs f = {.dh = dual_new(view_bytes(vh)), .dout = dual_new(view_bytes(vo)), .dnext = dual_new(view_bytes(vo))};
    for (int i = 0; i < n_w; i++) {
        f.dy[i] = dual_new(view_bytes(&vy[i]));
        dual_poison(&f.dy[i]);
    }
    dual_poison(&f.dh);
    dual_poison(&f.dnext);
    if (resid) {
        memcpy(f.dout.host, resid, f.dout.bytes);
        dual_upload(&f.dout);
    } else {
        dual_poison(&f.dout);
    }
    return f;
}

static void fused_bufs_free(fused_bufs *f, int n_w) {
    for (int i = 0; i < n_w; i++) dual_free(&f->dy[i]);
    dual_free(&f->dh);
    dual_free(&f->dout);
    dual_free(&f->dnext);
}

/* op's outputs in f's memory of one backend (gpu: the CUDA side, else the CPU side). */
static void fused_bind(st_fused_mul_mat *op, fused_bufs *f, const view *vy, const view *vh, const view *vo, bool gpu,
                       st_tensor y[3], st_tensor *h, st_tensor *out, st_tensor *next) {
    for (int i = 0; i < op->n_w; i++) {
        y[i] = on(&vy[i], gpu ? f->dy[i].gpu : f->dy[i].cpu);
        op->y[i] = &y[i];
    }
    *h = on(vh, gpu ? f->dh.gpu : f->dh.cpu);
    *out = on(vo, gpu ? f->dout.gpu : f->dout.cpu);
    *next = on(vo, gpu ? f->dnext.gpu : f->dnext.cpu);
    op->h = h;
    if (op->epilogue != ST_FUSED_EPILOGUE_STORE) op->out = out;
    if (op->next_norm_w) op->next_h = next;
}

/* What the forward pass runs on a quantized model's qkv (3 weights, norm, STORE), FFN
 * (gate/up, norm, GEGLU/SWIGLU) and output projection (1 weight, ADD, with the next
 * product's x * norm_w when next): the CUDA backend (its fused kernel for one column, else
 * the composite) against the CPU composite, and, for one column, the CUDA fused kernel
 * against the CUDA composite, which it must match bit for bit (the same sums, the same
 * roundings of the add, the multiply and the gated unit). */
static void test_fused(st_type t, int64_t K, int64_t N, int64_t M, int n_w, bool norm, st_fused_epilogue epi,
                       bool next) {
    const bool glu = epi == ST_FUSED_EPILOGUE_SWIGLU || epi == ST_FUSED_EPILOGUE_GEGLU;
    qweight w[3];
    int64_t n_i[3];
    for (int i = 0; i < n_w; i++) {
        n_i[i] = epi == ST_FUSED_EPILOGUE_STORE ? N - 2 * i : N;
        w[i] = qweight_new(t, K, n_i[i], 1, 0);
    }
    view vx = mkview(ST_TYPE_F32, K, M, 1, (size_t)(K + 4) * 4, (size_t)(K + 4) * 4 * (size_t)M, 0);
    view vh = mkpacked(ST_TYPE_F32, K, M, 1), vn = mkpacked(ST_TYPE_F32, K, 1, 1);
    view vnn = mkpacked(ST_TYPE_F32, N, 1, 1), vy[3];
    view vo = mkview(ST_TYPE_F32, N, M, 1, (size_t)(N + 2) * 4, (size_t)(N + 2) * 4 * (size_t)M, 0);
    for (int i = 0; i < n_w; i++) vy[i] = mkpacked(ST_TYPE_F32, n_i[i], M, 1);
    dual dx = dual_new(view_bytes(&vx)), dn = dual_new(view_bytes(&vn)), dnn = dual_new(view_bytes(&vnn));
    dual dres = dual_new(view_bytes(&vo)); /* the residual (its host bytes) */
    dual_random_f32(&dx);
    dual_random_f32(&dn);
    dual_random_f32(&dnn);
    dual_random_f32(&dres);
    const char *resid = epi == ST_FUSED_EPILOGUE_ADD ? dres.host : NULL;
    fused_bufs f = fused_bufs_new(vy, n_w, &vh, &vo, resid), fc = fused_bufs_new(vy, n_w, &vh, &vo, resid);
    st_fused_mul_mat oc = {.n_w = n_w, .eps = 1e-6f, .epilogue = epi}, og = oc, ogc = oc;
    st_tensor wc[3], wg[3], yc[3], yg[3], ygc[3], hc, hg, hgc, outc, outg, outgc, nextc, nextg, nextgc;
    for (int i = 0; i < n_w; i++) {
        wc[i] = on(&w[i].v, w[i].d.cpu), wg[i] = on(&w[i].v, w[i].d.gpu);
        oc.w[i] = &wc[i], og.w[i] = &wg[i], ogc.w[i] = &wg[i];
    }
    st_tensor xc = on(&vx, dx.cpu), xg = on(&vx, dx.gpu), nc = on(&vn, dn.cpu), ng = on(&vn, dn.gpu);
    st_tensor nnc = on(&vnn, dnn.cpu), nng = on(&vnn, dnn.gpu);
    oc.x = &xc, og.x = ogc.x = &xg;
    if (norm) oc.norm_w = &nc, og.norm_w = ogc.norm_w = &ng;
    if (next) oc.next_norm_w = &nnc, og.next_norm_w = ogc.next_norm_w = &nng;
    fused_bind(&oc, &f, vy, &vh, &vo, false, yc, &hc, &outc, &nextc);
    fused_bind(&og, &f, vy, &vh, &vo, true, yg, &hg, &outg, &nextg);
    fused_bind(&ogc, &fc, vy, &vh, &vo, true, ygc, &hgc, &outgc, &nextgc);
    st_error err = {0};
    if (st_fused_mul_mat_composite(g_cpu, &oc, &err) != ST_OK) test_die("cpu mul_mat_fused", &err);
    if (st_cuda_mul_mat_fused(g_gpu, &og, &err) != ST_OK) test_die("cuda mul_mat_fused", &err);
    if (st_fused_mul_mat_composite(g_gpu, &ogc, &err) != ST_OK) test_die("cuda composite", &err);
    /* the path's tolerance; a GLU's product of two results doubles the relative error */
    const double tol = mm_tol(M) * (glu ? 2 : 1);
    char desc[128];
    snprintf(desc, sizeof(desc), "%s K=%lld N=%lld M=%lld w=%d%s %s%s", tname(t), (long long)K, (long long)N,
             (long long)M, n_w, norm ? " norm" : "", epilogue_name[epi], next ? "+next" : "");
    /* what the op promises: y[] for STORE, else out (and next_h) */
    const dual *got_d[4], *comp_d[4];
    const view *got_v[4];
    int n_out = 0;
    if (epi == ST_FUSED_EPILOGUE_STORE) {
        for (int i = 0; i < n_w; i++) got_d[n_out] = &f.dy[i], comp_d[n_out] = &fc.dy[i], got_v[n_out++] = &vy[i];
    } else {
        got_d[n_out] = &f.dout, comp_d[n_out] = &fc.dout, got_v[n_out++] = &vo;
        if (next) got_d[n_out] = &f.dnext, comp_d[n_out] = &fc.dnext, got_v[n_out++] = &vo;
    }
    for (int i = 0; i < n_out; i++) {
        char *got = dual_fetch(got_d[i]), *comp = dual_fetch(comp_d[i]);
        cmp_result r = compare_f32(got_v[i], got_d[i]->cpu, got, got_d[i]->bytes);
        record("mul_mat_fused", desc, &r, tol);
        if (M == 1) {
            cmp_result rb = compare_bytes(comp, got, got_d[i]->bytes);
            record("mul_mat_fused = cuda composite", desc, &rb, TOL_EXACT);
        }
        free(got);
        free(comp);
    }
    for (int i = 0; i < n_w; i++) qweight_free(&w[i]);
    fused_bufs_free(&f, n_w);
    fused_bufs_free(&fc, n_w);
    dual_free(&dx);
    dual_free(&dn);
    dual_free(&dnn);
    dual_free(&dres);
}

/* ---- errors ---------------------------------------------------------------------------------- */

static void expect_status(const char *what, st_status got, st_status want, const st_error *err) {
    cmp_result r = {.bad = got != want};
    char desc[200];
    snprintf(desc, sizeof(desc), "%s -> %s \"%.70s\"", what, st_status_name(got), err->message);
    record("errors", desc, &r, TOL_EXACT);
}

static void test_errors(void) {
    st_error err = {0};
    view vx = mkpacked(ST_TYPE_F32, 64, 1, 1), vy = mkpacked(ST_TYPE_F32, 8, 1, 1);
    dual dx = dual_new(view_bytes(&vx)), dy = dual_new(view_bytes(&vy));
    dual_random_f32(&dx);
    st_tensor xg = on(&vx, dx.gpu), yg = on(&vy, dy.gpu);

    /* a quantized type stride does not read: refused, nothing launched */
    view vw = qview(ST_TYPE_IQ4_NL, 64, 8, 1, 0);
    dual dw = dual_new(vw.t.nb[3]);
    st_tensor wg = on(&vw, dw.gpu);
    st_status s = g_gpu->iface->mul_mat(g_gpu, &yg, &wg, &xg, &err);
    expect_status("mul_mat iq4_nl", s, ST_ERROR_UNSUPPORTED, &err);
    dual_free(&dw);

    /* q4_K rows 8 bytes off the 16-byte block alignment its loads need */
    vx = mkpacked(ST_TYPE_F32, 256, 1, 1);
    dual_free(&dx);
    dx = dual_new(view_bytes(&vx));
    dual_random_f32(&dx);
    xg = on(&vx, dx.gpu);
    vw = qview(ST_TYPE_Q4_K, 256, 8, 1, 8);
    dw = dual_new(vw.t.nb[3]);
    wg = on(&vw, dw.gpu);
    err = (st_error){0};
    s = g_gpu->iface->mul_mat(g_gpu, &yg, &wg, &xg, &err);
    expect_status("mul_mat q4_K row stride 152", s, ST_ERROR_UNSUPPORTED, &err);
    dual_free(&dw);
    s = g_gpu->iface->synchronize(g_gpu, &err);
    expect_status("synchronize after the refusals", s, ST_OK, &err);

    /* get_rows with an id == V: recorded by the kernel, returned by the next synchronize */
    qweight w = qweight_new(ST_TYPE_Q8_0, 64, 10, 1, 0);
    int32_t ids[2] = {3, 10};
    dual di = ids_new(ids, 2);
    view vi = mkpacked(ST_TYPE_I32, 2, 1, 1), vr = mkpacked(ST_TYPE_F32, 64, 2, 1);
    dual dr = dual_new(view_bytes(&vr));
    st_tensor qg = on(&w.v, w.d.gpu), ig = on(&vi, di.gpu), rg = on(&vr, dr.gpu);
    if (g_gpu->iface->get_rows(g_gpu, &rg, &qg, &ig, &err) != ST_OK) test_die("cuda get_rows", &err);
    err = (st_error){0};
    s = g_gpu->iface->synchronize(g_gpu, &err);
    expect_status("get_rows q8_0 id 10 of V=10", s, ST_ERROR_INVALID, &err);
    err = (st_error){0};
    s = g_gpu->iface->synchronize(g_gpu, &err);
    expect_status("the next synchronize", s, ST_OK, &err);
    qweight_free(&w);
    dual_free(&di);
    dual_free(&dr);
    dual_free(&dx);
    dual_free(&dy);
}

/* ---- the suite ----------------------------------------------------------------------------- */

/* K for rows of several segments of the one-column kernel (a segment is 128 chunks: 1,024
 * values of a legacy type, 2,048 of a K-quant), the last one partial: 65 legacy blocks or
 * 17 K-quant blocks. */
static int64_t k_several_segments(st_type t) {
    const int64_t QK = traits(t)->block_size;
    return QK == 32 ? 65 * QK : 17 * QK;
}

static void run_all(void) {
    const st_type types[] = {ST_TYPE_Q8_0, ST_TYPE_Q4_0, ST_TYPE_Q4_1, ST_TYPE_Q5_0, ST_TYPE_Q5_1, ST_TYPE_Q2_K,
                             ST_TYPE_Q3_K, ST_TYPE_Q4_K, ST_TYPE_Q5_K, ST_TYPE_Q6_K, ST_TYPE_Q8_K};
    const int n_types = (int)(sizeof(types) / sizeof(types[0]));

    for (int ti = 0; ti < n_types; ti++) {
        const st_type t = types[ti];
        if (!st_quant_supported(t)) test_die("a type the CPU reference cannot read", NULL);
        const int64_t QK = traits(t)->block_size;
        /* one block; an odd number of blocks; a model-sized row (gemma-3-270m: 640 for the
         * legacy types, 2048 for the K-quants) */
        const int64_t Ks[3] = {QK, 3 * QK, QK == 32 ? 640 : 2048};

        test_upload(t, Ks[1], 13, 0);
        test_upload(t, Ks[1], 13, 16);
        for (size_t pad = 0; pad <= 16; pad += 16) {
            test_get_rows(t, Ks[0], 1, pad);
            test_get_rows(t, Ks[1], 7, pad);
            test_get_rows(t, Ks[2], 33, pad);
        }

        const int64_t gemv_M[] = {1, 2, 3, 7};
        for (int ki = 0; ki < 3; ki++)
            for (int mi = 0; mi < 4; mi++) {
                const int64_t M = gemv_M[mi];
                test_mul_mat(t, Ks[ki], 37, M, 0, X_PACKED);
                if (M == 1 || M == 7) test_mul_mat(t, Ks[ki], 37, M, 16, X_PACKED);
                if (M == 1 || M == 2) test_mul_mat(t, Ks[ki], 37, M, 0, X_STRIDED); /* x 4-byte aligned */
                if (M == 3) test_mul_mat(t, Ks[ki], 37, M, 0, X_GAPPED);
            }
        test_mul_mat(t, Ks[2], 1001, 1, 0, X_PACKED);
        /* one column: more row groups than the grid's blocks (132 SMs x 5-8 blocks x 4
         * rows), so that blocks walk several */
        test_mul_mat(t, Ks[1], 5003, 1, 16, X_PACKED);
        test_mul_mat_to_host(t, Ks[1], 45, 1);
        test_mul_mat_to_host(t, Ks[1], 5003, 1);
        test_mul_mat_to_host(t, Ks[2], 1001, 3);
        /* rows of several segments, at rows of every 16-byte phase (pad 16 on a row of 65 x
         * 34 bytes, ...) */
        const int64_t K_long = k_several_segments(t);
        test_mul_mat(t, K_long, 77, 1, 16, X_PACKED);
        test_mul_mat(t, K_long, 77, 5, 16, X_STRIDED);
        test_mul_mat_columns_agree(t, K_long, 77, 5);
        test_mul_mat_columns_agree(t, Ks[2], 1001, 7);

        const int64_t gemm_M[] = {8, 9, 33, 512};
        for (int ki = 1; ki < 3; ki++)
            for (int mi = 0; mi < 4; mi++) {
                const int64_t M = gemm_M[mi];
                test_mul_mat(t, Ks[ki], 301, M, 0, X_PACKED);
                if (M == 8) test_mul_mat(t, Ks[ki], 301, M, 16, X_PACKED);
                if (M == 9) test_mul_mat(t, Ks[ki], 301, M, 0, X_STRIDED);
                if (M == 33) test_mul_mat(t, Ks[ki], 301, M, 0, X_GAPPED);
            }

        for (int xm = 0; xm < 3; xm++) {
            test_mul_mat_id(t, Ks[1], 13, 4, 2, 1, (moe_x)xm);
            test_mul_mat_id(t, Ks[1], 13, 4, 2, 5, (moe_x)xm);
        }
    }

    /* more than one F16 slab (32 MiB = 8192 rows of 2048 halves): 8192 + 1 rows */
    test_mul_mat(ST_TYPE_Q4_K, 2048, 8193, 9, 0, X_PACKED);
    test_mul_mat(ST_TYPE_Q8_0, 2048, 8193, 16, 0, X_GAPPED);

    /* the forward pass's fused products on the Q4_K_M types */
    const st_type model_types[] = {ST_TYPE_Q4_K, ST_TYPE_Q6_K, ST_TYPE_Q5_0, ST_TYPE_Q8_0};
    for (int ti = 0; ti < 4; ti++) {
        const int64_t K = traits(model_types[ti])->block_size == 32 ? 640 : 1024;
        for (int64_t M = 1; M <= 9; M += 8) {
            test_fused(model_types[ti], K, 67, M, 3, true, ST_FUSED_EPILOGUE_STORE, false);
            test_fused(model_types[ti], K, 67, M, 2, true, ST_FUSED_EPILOGUE_GEGLU, false);
            test_fused(model_types[ti], K, 67, M, 2, false, ST_FUSED_EPILOGUE_SWIGLU, false);
            test_fused(model_types[ti], K, 67, M, 1, false, ST_FUSED_EPILOGUE_ADD, false);
            test_fused(model_types[ti], K, 67, M, 1, false, ST_FUSED_EPILOGUE_ADD, true);
        }
        /* one column: rows of several segments, and more groups than the wave has warps
         * (132 SMs x 7-8 blocks x 4 warps), so that warps walk several */
        const int64_t K_long = k_several_segments(model_types[ti]);
        test_fused(model_types[ti], K_long, 301, 1, 3, true, ST_FUSED_EPILOGUE_STORE, false);
        test_fused(model_types[ti], K, 5003, 1, 3, true, ST_FUSED_EPILOGUE_STORE, false);
        test_fused(model_types[ti], K, 5003, 1, 2, true, ST_FUSED_EPILOGUE_SWIGLU, false);
        test_fused(model_types[ti], K_long, 5003, 1, 1, false, ST_FUSED_EPILOGUE_ADD, true);
    }

    test_errors();
}

int main(void) { return gpu_test_main("test_cuda_quant", run_all, NULL); }
