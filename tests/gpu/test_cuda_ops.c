/*
 * Every op of the CUDA backend against the CPU backend (the reference) on random inputs:
 * odd shapes, F32/F16/BF16 weights, packed and padded row strides (+64 and +128 bytes),
 * strided and misaligned activation views, F16 and F32 KV caches, in-place calls.
 * Compared by normalised error ||cuda - cpu|| / ||cpu|| (and the largest deviation) with
 * per-dtype tolerances stated below; NaN never passes, and bytes outside an output view
 * must be untouched. Also: the upload into the padded layout (pad bytes zeroed), the
 * same product with padded and packed weights on the GPU, and the data errors that a
 * kernel reports through the next synchronize.
 *
 * Prints one line per case, a table `op | cases | passed | worst error`, then
 * "N passed, M failed". Exits 1 on any failure or when no case ran, 2 on a setup error
 * (no GPU, allocation failure), 77 when built without CUDA. STRIDE_TEST_SEED=n reseeds.
 */
#include "gpu_test_util.h"

#include "cuda/cuda_attention.h"
#include "cuda/cuda_backend.h"
#include "core/moe_route.h"
#include "stride/cpu_ops.h"

/* ---- tolerances (normalised error) -------------------------------------------------- */

/* f32 results that differ from the CPU only in summation order (SGEMM, the own GEMV of
 * any weight type: weights convert to f32 exactly, f32 accumulate). Rounding in a sum of
 * K terms grows like u*sqrt(K) relative, u = 2^-24: ~1e-6 at K = 4096. */
#define TOL_F32_SUM 1e-5
/* cuBLAS F16 GEMM: x is rounded to f16 first (u = 2^-11 = 4.9e-4, RMS relative error
 * ~u/sqrt(3) = 2.8e-4 per term, and so for the sum of random-signed terms). 3.5x margin. */
#define TOL_F16_GEMM 1e-3
/* cuBLAS BF16 GEMM: x rounded to bf16 (u = 2^-8 = 3.9e-3, RMS ~2.3e-3). 3.5x margin. */
#define TOL_BF16_GEMM 8e-3
/* Elementwise/norm/rope/routing: the same formula with the same roundings; what differs
 * is expf/tanhf (CUDA: <= 2 ulp) and an f32 block sum instead of a double sum. */
#define TOL_ELEMENTWISE 1e-6
/* Attention on the exact and split-KV paths: f32 dot products in another order, an online
 * softmax (rescaled f32 sums instead of a double sum), splits combined in f32; K and V
 * convert to f32 exactly. The tensor-core path rounds q and P to f16: attn_tol(). */
#define TOL_ATTENTION 1e-5
/* Row lookup, add, scale, the cache store, uploads: one rounding or none: exact. */
#define TOL_EXACT 0.0

st_backend *g_cpu, *g_gpu;
uint64_t g_rng = 0x5eed5eedull;


/* Host f32 values converted to a weight type, packed. */
static void to_type(st_type t, const float *src, char *dst, size_t n) {
    if (t == ST_TYPE_F32) memcpy(dst, src, n * 4);
    else if (t == ST_TYPE_F16) st_f32_to_f16_row(src, (uint16_t *)dst, n);
    else st_f32_to_bf16_row(src, (uint16_t *)dst, n);
}

/* A weight [K, N, E] of type t with row stride row_bytes + pad, uploaded to both backends
 * from one packed host copy (kept, so that the same values can be uploaded again at
 * another stride). */
typedef struct weight {
    view v;
    dual d;
    char *packed;
} weight;

static weight weight_upload(st_type t, int64_t K, int64_t N, int64_t E, size_t pad, const char *packed) {
    weight w;
    size_t row = (size_t)K * type_size(t), nb1 = row + pad, n = (size_t)(K * N * E);
    w.v = mkview(t, K, N, E, nb1, nb1 * (size_t)N, 0);
    w.d = dual_new(nb1 * (size_t)N * (size_t)E);
    w.packed = malloc(n * type_size(t) + 1);
    if (!w.packed) test_die("host malloc", NULL);
    memcpy(w.packed, packed, n * type_size(t));
    st_error err = {0};
    st_tensor tc = on(&w.v, w.d.cpu), tg = on(&w.v, w.d.gpu);
    if (g_cpu->iface->upload_weight(g_cpu, &tc, packed, &err) != ST_OK) test_die("cpu upload", &err);
    if (g_gpu->iface->upload_weight(g_gpu, &tg, packed, &err) != ST_OK) test_die("cuda upload", &err);
    return w;
}

static weight weight_new(st_type t, int64_t K, int64_t N, int64_t E, size_t pad) {
    size_t n = (size_t)(K * N * E);
    float *f = malloc(n * sizeof(float) + 1);
    char *packed = malloc(n * type_size(t) + 1);
    if (!f || !packed) test_die("host malloc", NULL);
    for (size_t i = 0; i < n; i++) f[i] = rng_f32();
    to_type(t, f, packed, n);
    weight w = weight_upload(t, K, N, E, pad, packed);
    free(f);
    free(packed);
    return w;
}

static void weight_free(weight *w) {
    dual_free(&w->d);
    free(w->packed);
    w->packed = NULL;
}


static view ids_view(int64_t ne0, int64_t ne1) { return mkpacked(ST_TYPE_I32, ne0, ne1, 1); }

/* ---- upload ------------------------------------------------------------------------- */

static void test_upload(st_type t, int64_t K, int64_t N, int64_t E, size_t pad) {
    size_t row = (size_t)K * type_size(t), nb1 = row + pad;
    dual d = dual_new(nb1 * (size_t)(N * E));
    memset(d.host, 0xab, d.bytes); /* the pad must come out zeroed, not left as this */
    dual_upload(&d);
    view wv = mkview(t, K, N, E, nb1, nb1 * (size_t)N, 0);
    size_t n = (size_t)(K * N * E);
    float *f = malloc(n * 4);
    char *packed = malloc(n * type_size(t));
    if (!f || !packed) test_die("host malloc", NULL);
    for (size_t i = 0; i < n; i++) f[i] = rng_f32();
    to_type(t, f, packed, n);
    st_error err = {0};
    st_tensor tc = on(&wv, d.cpu), tg = on(&wv, d.gpu);
    if (g_cpu->iface->upload_weight(g_cpu, &tc, packed, &err) != ST_OK) test_die("cpu upload", &err);
    if (g_gpu->iface->upload_weight(g_gpu, &tg, packed, &err) != ST_OK) test_die("cuda upload", &err);
    char *got = dual_fetch(&d);
    cmp_result r = compare_bytes(d.cpu, got, d.bytes);
    for (size_t i = 0; i < (size_t)(N * E) && pad; i++)
        for (size_t j = row; j < nb1; j++) r.bad += got[i * nb1 + j] != 0;
    char desc[128];
    snprintf(desc, sizeof(desc), "%s K=%lld N=%lld E=%lld pad=%zu (%.1f MiB)", tname(t), (long long)K, (long long)N,
             (long long)E, pad, (double)d.bytes / (1 << 20));
    record("upload_weight", desc, &r, TOL_EXACT);
    free(got);
    free(f);
    free(packed);
    dual_free(&d);
}

/* ---- get_rows ------------------------------------------------------------------------ */

static void test_get_rows(st_type t, int64_t K, int64_t M, size_t pad) {
    const int64_t V = 50;
    weight w = weight_new(t, K, V, 1, pad);
    int32_t ids[64];
    for (int64_t m = 0; m < M; m++) ids[m] = rng_int((int32_t)V);
    dual di = ids_new(ids, M);
    view vi = ids_view(M, 1);
    view vy = mkview(ST_TYPE_F32, K, M, 1, (size_t)(K + 3) * 4, (size_t)(K + 3) * 4 * (size_t)M, 8);
    dual dy = dual_new(view_bytes(&vy));
    dual_poison(&dy);
    st_error err = {0};
    st_tensor wc = on(&w.v, w.d.cpu), wg = on(&w.v, w.d.gpu), ic = on(&vi, di.cpu), ig = on(&vi, di.gpu);
    st_tensor yc = on(&vy, dy.cpu), yg = on(&vy, dy.gpu);
    if (g_cpu->iface->get_rows(g_cpu, &yc, &wc, &ic, &err) != ST_OK) test_die("cpu get_rows", &err);
    if (g_gpu->iface->get_rows(g_gpu, &yg, &wg, &ig, &err) != ST_OK) test_die("cuda get_rows", &err);
    char *got = dual_fetch(&dy);
    cmp_result r = compare_f32(&vy, dy.cpu, got, dy.bytes);
    char desc[128];
    snprintf(desc, sizeof(desc), "%s K=%lld V=%lld M=%lld pad=%zu", tname(t), (long long)K, (long long)V,
             (long long)M, pad);
    record("get_rows", desc, &r, TOL_EXACT);
    free(got);
    dual_free(&dy);
    dual_free(&di);
    weight_free(&w);
}

/* ---- mul_mat ------------------------------------------------------------------------- */


static double mm_tol(st_type t, int64_t M) {
    if (M < ST_CUDA_GEMM_MIN_M || t == ST_TYPE_F32) return TOL_F32_SUM; /* own GEMV or SGEMM */
    return t == ST_TYPE_F16 ? TOL_F16_GEMM : TOL_BF16_GEMM;
}

static int g_pad_cases, g_pad_bitwise;
/* a second CUDA backend whose block-a-row kernel holds its rows in registers, while
 * run_fused_products_staged_and_registers runs (test_mul_mat_fused) */
static st_backend *g_gpu_regs;

static void test_mul_mat(st_type t, int64_t K, int64_t N, int64_t M, size_t pad, x_layout xl) {
    weight w = weight_new(t, K, N, 1, pad);
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
    const double tol = mm_tol(t, M);
    cmp_result r = compare_f32(&vy, dy.cpu, got, dy.bytes);
    char desc[128];
    snprintf(desc, sizeof(desc), "%s K=%lld N=%lld M=%lld pad=%zu x=%s %s", tname(t), (long long)K, (long long)N,
             (long long)M, pad, x_layout_name[xl], M < ST_CUDA_GEMM_MIN_M ? "gemv" : "gemm");
    record("mul_mat", desc, &r, tol);

    if (pad) {
        /* the same product on the GPU with the packed weight: equal within the path's
         * tolerance; bitwise equality is counted, not required (cuBLAS may tile a
         * different leading dimension differently; the GEMV changes its load width when
         * only one of the strides is 16-byte aligned). */
        weight wp = weight_upload(t, K, N, 1, 0, w.packed);
        dual dy2 = dual_new(dy.bytes);
        dual_poison(&dy2);
        st_tensor wpg = on(&wp.v, wp.d.gpu), y2g = on(&vy, dy2.gpu);
        if (g_gpu->iface->mul_mat(g_gpu, &y2g, &wpg, &xg, &err) != ST_OK) test_die("cuda mul_mat", &err);
        char *got2 = dual_fetch(&dy2);
        cmp_result r2 = compare_f32(&vy, got, got2, dy.bytes);
        g_pad_cases++;
        g_pad_bitwise += memcmp(got, got2, dy.bytes) == 0;
        record("mul_mat padded~packed", desc, &r2, tol);
        free(got2);
        dual_free(&dy2);
        weight_free(&wp);
    }
    free(got);
    dual_free(&dx);
    dual_free(&dy);
    weight_free(&w);
}

/* ---- fused products (st_fused_mul_mat) ------------------------------------------------ */

static const char *epilogue_name[] = {"store", "add", "swiglu", "geglu"};

/* The fused product of weights back to back in one tensor (as the loader places a layer's
 * q, k, v and gate, up: one GEMM on CUDA from M >= ST_CUDA_GEMM_MIN_M) against the CPU
 * composite. STORE: parts of N, N/4, N/4 rows, their outputs back to back in rows of one
 * buffer (q, k, v of a qkv row); SWIGLU: two halves of N rows, outputs apart. */
static void test_mul_mat_fused_adjacent(st_type t, int64_t K, int64_t N, int64_t M, size_t pad, bool glu) {
    const int n_w = glu ? 2 : 3;
    const int64_t n_i[3] = {N, glu ? N : N / 4, N / 4}, N_all = n_i[0] + n_i[1] + (glu ? 0 : n_i[2]);
    weight w = weight_new(t, K, N_all, 1, pad);
    view vh = mkpacked(ST_TYPE_F32, K, M, 1), vn = mkpacked(ST_TYPE_F32, K, 1, 1);
    view vx = mkview(ST_TYPE_F32, K, M, 1, (size_t)(K + 4) * 4, (size_t)(K + 4) * 4 * (size_t)M, 0);
    const size_t ynb1 = (size_t)(N_all + 3) * 4;
    view vall = mkview(ST_TYPE_F32, N_all + 3, M, 1, ynb1, ynb1 * (size_t)M, 0); /* STORE: the parts' rows */
    view vo = mkpacked(ST_TYPE_F32, N, M, 1), vg = mkpacked(ST_TYPE_F32, N, M, 1);
    dual dx = dual_new(view_bytes(&vx)), dh = dual_new(view_bytes(&vh)), dn = dual_new(view_bytes(&vn));
    dual dall = dual_new(view_bytes(&vall)), dg0 = dual_new(view_bytes(&vg)), dg1 = dual_new(view_bytes(&vg));
    dual dout = dual_new(view_bytes(&vo));
    dual_random_f32(&dx), dual_random_f32(&dn), dual_poison(&dh);
    dual_poison(&dall), dual_poison(&dg0), dual_poison(&dg1), dual_poison(&dout);
    st_tensor wt[2][3], yt[2][3], xt[2], ht[2], nt[2], ot[2];
    st_fused_mul_mat op[2];
    for (int b = 0; b < 2; b++) {
        int64_t row0 = 0;
        for (int i = 0; i < n_w; i++) {
            wt[b][i] = on(&w.v, b ? w.d.gpu : w.d.cpu);
            wt[b][i].ne[1] = n_i[i];
            wt[b][i].data = (char *)wt[b][i].data + row0 * (int64_t)w.v.t.nb[1];
            if (glu) {
                yt[b][i] = on(&vg, i ? (b ? dg1.gpu : dg1.cpu) : (b ? dg0.gpu : dg0.cpu));
            } else {
                yt[b][i] = on(&vall, b ? dall.gpu : dall.cpu);
                yt[b][i].ne[0] = n_i[i];
                yt[b][i].data = (char *)yt[b][i].data + row0 * 4;
            }
            row0 += n_i[i];
        }
        xt[b] = on(&vx, b ? dx.gpu : dx.cpu), ht[b] = on(&vh, b ? dh.gpu : dh.cpu), nt[b] = on(&vn, b ? dn.gpu : dn.cpu);
        ot[b] = on(&vo, b ? dout.gpu : dout.cpu);
        op[b] = (st_fused_mul_mat){.n_w = n_w, .x = &xt[b], .norm_w = &nt[b], .eps = 1e-6f, .h = &ht[b],
                                   .epilogue = glu ? ST_FUSED_EPILOGUE_SWIGLU : ST_FUSED_EPILOGUE_STORE,
                                   .out = glu ? &ot[b] : NULL};
        for (int i = 0; i < n_w; i++) op[b].w[i] = &wt[b][i], op[b].y[i] = &yt[b][i];
    }
    st_error err = {0};
    if (st_fused_mul_mat_composite(g_cpu, &op[0], &err) != ST_OK) test_die("cpu mul_mat_fused", &err);
    if (st_cuda_mul_mat_fused(g_gpu, &op[1], &err) != ST_OK) test_die("cuda mul_mat_fused", &err);
    const double tol = mm_tol(t, M) * (glu ? 2 : 1);
    char desc[128];
    snprintf(desc, sizeof(desc), "%s K=%lld N=%lld M=%lld pad=%zu %s back to back", tname(t), (long long)K,
             (long long)N, (long long)M, pad, glu ? "gate/up swiglu" : "q/k/v store");
    view vparts = vall; /* (the rows' last 3 elements are a gap: compared as bytes) */
    vparts.t.ne[0] = N_all;
    dual *res = glu ? &dout : &dall;
    view *vres = glu ? &vo : &vparts;
    char *got = dual_fetch(res);
    cmp_result r = compare_f32(vres, res->cpu, got, res->bytes);
    record("mul_mat_fused", desc, &r, tol);
    free(got);
    dual_free(&dx), dual_free(&dh), dual_free(&dn), dual_free(&dall), dual_free(&dg0), dual_free(&dg1), dual_free(&dout);
    weight_free(&w);
}

/* The CUDA backend's fused product against the CPU composite (the meaning): n_w weights
 * [K, N] (N_i = N - 3i for STORE, so that parts differ), optional norm, each epilogue.
 * M < ST_CUDA_GEMM_MIN_M takes the fused kernel; M >= it cuBLAS over h packed once
 * (st_cuda_mul_mat_fused_gemm; F32 weights: the composite).
 * chain: an ADD forms next_h = out * next_norm_w as well (compared too); a product with a
 * norm is given x_w = x * norm_w (which the CPU composite does not read). */
static void test_mul_mat_fused(st_type t, int64_t K, int64_t N, int64_t M, size_t pad, int n_w, bool norm,
                               st_fused_epilogue epi, bool chain) {
    const bool glu = epi == ST_FUSED_EPILOGUE_SWIGLU || epi == ST_FUSED_EPILOGUE_GEGLU;
    weight w[3];
    int64_t n_i[3];
    for (int i = 0; i < n_w; i++) {
        n_i[i] = epi == ST_FUSED_EPILOGUE_STORE ? N - 3 * i : N;
        w[i] = weight_new(t, K, n_i[i], 1, pad);
    }
    view vx = mkview(ST_TYPE_F32, K, M, 1, (size_t)(K + 4) * 4, (size_t)(K + 4) * 4 * (size_t)M, 0);
    view vh = mkpacked(ST_TYPE_F32, K, M, 1), vn = mkpacked(ST_TYPE_F32, K, 1, 1);
    view vy[3], vo = mkview(ST_TYPE_F32, N, M, 1, (size_t)(N + 2) * 4, (size_t)(N + 2) * 4 * (size_t)M, 0);
    dual dx = dual_new(view_bytes(&vx)), dh = dual_new(view_bytes(&vh)), dn = dual_new(view_bytes(&vn));
    dual dy[3], dout = dual_new(view_bytes(&vo));
    dual_random_f32(&dx);
    dual_random_f32(&dn);
    dual_poison(&dh);
    if (epi == ST_FUSED_EPILOGUE_ADD) dual_random_f32(&dout); /* the residual */
    else dual_poison(&dout);
    /* chain: the next norm's weight and next_h (ADD), x * norm_w (a norm) */
    view vnn = mkpacked(ST_TYPE_F32, N, 1, 1), vnh = mkpacked(ST_TYPE_F32, N, M, 1);
    dual dnn = dual_new(view_bytes(&vnn)), dnh = dual_new(view_bytes(&vnh)), dxw = dual_new(view_bytes(&vh));
    dual_random_f32(&dnn);
    dual_poison(&dnh);
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) {
            float xv, nv;
            memcpy(&xv, dx.host + vx.off + (size_t)m * vx.t.nb[1] + (size_t)k * 4, 4);
            memcpy(&nv, dn.host + (size_t)k * 4, 4);
            const float xw = xv * nv;
            memcpy(dxw.host + ((size_t)m * (size_t)K + (size_t)k) * 4, &xw, 4);
        }
    dual_upload(&dxw);
    st_fused_mul_mat oc = {.n_w = n_w, .eps = 1e-6f, .epilogue = epi}, og = oc;
    st_tensor wc[3], wg[3], yc[3], yg[3];
    for (int i = 0; i < n_w; i++) {
        vy[i] = mkpacked(ST_TYPE_F32, n_i[i], M, 1);
        dy[i] = dual_new(view_bytes(&vy[i]));
        dual_poison(&dy[i]);
        wc[i] = on(&w[i].v, w[i].d.cpu), wg[i] = on(&w[i].v, w[i].d.gpu);
        yc[i] = on(&vy[i], dy[i].cpu), yg[i] = on(&vy[i], dy[i].gpu);
        oc.w[i] = &wc[i], og.w[i] = &wg[i], oc.y[i] = &yc[i], og.y[i] = &yg[i];
    }
    st_tensor xc = on(&vx, dx.cpu), xg = on(&vx, dx.gpu), hc = on(&vh, dh.cpu), hg = on(&vh, dh.gpu);
    st_tensor nc = on(&vn, dn.cpu), ng = on(&vn, dn.gpu), outc = on(&vo, dout.cpu), outg = on(&vo, dout.gpu);
    oc.x = &xc, og.x = &xg, oc.h = &hc, og.h = &hg;
    if (norm) oc.norm_w = &nc, og.norm_w = &ng;
    if (epi != ST_FUSED_EPILOGUE_STORE) oc.out = &outc, og.out = &outg;
    st_tensor nnc = on(&vnn, dnn.cpu), nng = on(&vnn, dnn.gpu), nhc = on(&vnh, dnh.cpu), nhg = on(&vnh, dnh.gpu);
    st_tensor xwc = on(&vh, dxw.cpu), xwg = on(&vh, dxw.gpu);
    if (chain && epi == ST_FUSED_EPILOGUE_ADD) {
        oc.next_norm_w = &nnc, og.next_norm_w = &nng;
        oc.next_h = &nhc, og.next_h = &nhg;
    }
    if (chain && norm) oc.x_w = &xwc, og.x_w = &xwg;
    st_error err = {0};
    if (st_fused_mul_mat_composite(g_cpu, &oc, &err) != ST_OK) test_die("cpu mul_mat_fused", &err);
    if (st_cuda_mul_mat_fused(g_gpu, &og, &err) != ST_OK) test_die("cuda mul_mat_fused", &err);
    /* the path's tolerance; a GLU's product of two results doubles the relative error */
    const double tol = mm_tol(t, M) * (glu ? 2 : 1);
    char desc[128];
    snprintf(desc, sizeof(desc), "%s K=%lld N=%lld M=%lld pad=%zu w=%d%s %s%s", tname(t), (long long)K, (long long)N,
             (long long)M, pad, n_w, norm ? " norm" : "", epilogue_name[epi], chain ? " chained" : "");
    if (epi == ST_FUSED_EPILOGUE_STORE) {
        for (int i = 0; i < n_w; i++) {
            char *got = dual_fetch(&dy[i]);
            cmp_result r = compare_f32(&vy[i], dy[i].cpu, got, dy[i].bytes);
            record("mul_mat_fused", desc, &r, tol);
            free(got);
        }
    } else {
        char *got = dual_fetch(&dout);
        cmp_result r = compare_f32(&vo, dout.cpu, got, dout.bytes);
        record("mul_mat_fused", desc, &r, tol);
        free(got);
    }
    if (chain && epi == ST_FUSED_EPILOGUE_ADD) { /* next_h: out * next_norm_w */
        char *got = dual_fetch(&dnh);
        cmp_result r = compare_f32(&vnh, dnh.cpu, got, dnh.bytes);
        record("mul_mat_fused next_h", desc, &r, tol);
        free(got);
    }
    if (g_gpu_regs && M == 1) {
        /* the same product on g_gpu_regs, whose block-a-row kernel holds its rows in
         * registers: the same sums in the same order as the staged rows, so the same bits */
        dual *res = epi == ST_FUSED_EPILOGUE_STORE ? dy : &dout;
        const int n_res = epi == ST_FUSED_EPILOGUE_STORE ? n_w : 1;
        char *first[3];
        for (int i = 0; i < n_res; i++) {
            first[i] = dual_fetch(&res[i]);
            dual_upload(&res[i]); /* the poison, or the residual, again */
        }
        if (st_cuda_mul_mat_fused(g_gpu_regs, &og, &err) != ST_OK) test_die("cuda mul_mat_fused (registers)", &err);
        if (g_gpu_regs->iface->synchronize(g_gpu_regs, &err) != ST_OK) test_die("cuda synchronize (registers)", &err);
        for (int i = 0; i < n_res; i++) {
            char *second = dual_fetch(&res[i]);
            cmp_result rb = compare_bytes(first[i], second, res[i].bytes);
            record("mul_mat_fused staged~registers bits", desc, &rb, TOL_EXACT);
            free(second);
            free(first[i]);
        }
    }
    for (int i = 0; i < n_w; i++) {
        dual_free(&dy[i]);
        weight_free(&w[i]);
    }
    dual_free(&dx);
    dual_free(&dh);
    dual_free(&dn);
    dual_free(&dout);
    dual_free(&dnn);
    dual_free(&dnh);
    dual_free(&dxw);
}

/* A layer's FFN on the cuBLAS path: the normed gated pair [K -> 2F] (gate, up back to back,
 * one GEMM) into act [F, M], then the down product [F -> K] adding act's product into the
 * residual. Plainly (act written in F32, packed again by the down product), and with the
 * hand-off the planner makes (st_cuda_glu_hands_off: the unit written in the weights' type
 * into a buffer the down product reads): the same residual, bit for bit. Below
 * ST_CUDA_GEMM_MIN_M columns (the decode kernels) no hand-off is offered, nor for a down
 * product with a norm of its own or weights of another type. */
static void test_glu_handoff(st_type t, int64_t K, int64_t F, int64_t M, size_t pad, bool gelu) {
    weight wgu = weight_new(t, K, 2 * F, 1, pad), wd = weight_new(t, F, K, 1, pad);
    weight wd_other = weight_new(t == ST_TYPE_F16 ? ST_TYPE_BF16 : ST_TYPE_F16, F, K, 1, pad);
    view vx = mkview(ST_TYPE_F32, K, M, 1, (size_t)(K + 4) * 4, (size_t)(K + 4) * 4 * (size_t)M, 0);
    view vh = mkpacked(ST_TYPE_F32, K, M, 1), vn = mkpacked(ST_TYPE_F32, K, 1, 1), vnf = mkpacked(ST_TYPE_F32, F, 1, 1);
    view vf = mkpacked(ST_TYPE_F32, F, M, 1), vr = mkpacked(ST_TYPE_F32, K, M, 1);
    dual dx = dual_new(view_bytes(&vx)), dh = dual_new(view_bytes(&vh)), dn = dual_new(view_bytes(&vn));
    dual dg = dual_new(view_bytes(&vf)), du = dual_new(view_bytes(&vf)), dact = dual_new(view_bytes(&vf));
    dual dyd = dual_new(view_bytes(&vr)), dres = dual_new(view_bytes(&vr)), dnf = dual_new(view_bytes(&vnf));
    dual_random_f32(&dx), dual_random_f32(&dn), dual_random_f32(&dres), dual_random_f32(&dnf);
    dual_poison(&dh), dual_poison(&dg), dual_poison(&du), dual_poison(&dact), dual_poison(&dyd);
    st_tensor wg = on(&wgu.v, wgu.d.gpu), wu = wg, wdg = on(&wd.v, wd.d.gpu), wdo = on(&wd_other.v, wd_other.d.gpu);
    wg.ne[1] = wu.ne[1] = F;
    wu.data = (char *)wu.data + F * (int64_t)wgu.v.t.nb[1];
    st_tensor xg = on(&vx, dx.gpu), hg = on(&vh, dh.gpu), ng = on(&vn, dn.gpu), nfg = on(&vnf, dnf.gpu);
    st_tensor gg = on(&vf, dg.gpu), ug = on(&vf, du.gpu), actg = on(&vf, dact.gpu);
    st_tensor ydg = on(&vr, dyd.gpu), resg = on(&vr, dres.gpu);
    const st_fused_mul_mat glu = {.n_w = 2, .w = {&wg, &wu}, .y = {&gg, &ug}, .x = &xg, .norm_w = &ng, .eps = 1e-6f,
                                  .h = &hg, .epilogue = gelu ? ST_FUSED_EPILOGUE_GEGLU : ST_FUSED_EPILOGUE_SWIGLU,
                                  .out = &actg};
    const st_fused_mul_mat down = {.n_w = 1, .w = {&wdg}, .y = {&ydg}, .x = &actg, .epilogue = ST_FUSED_EPILOGUE_ADD,
                                   .out = &resg};
    st_fused_mul_mat down_normed = down, down_other = down;
    down_normed.norm_w = &nfg, down_normed.h = &actg;
    down_other.w[0] = &wdo;
    char desc[128];
    snprintf(desc, sizeof(desc), "%s K=%lld F=%lld M=%lld pad=%zu %s", tname(t), (long long)K, (long long)F, (long long)M,
             pad, gelu ? "geglu" : "swiglu");
    /* the rule: offered exactly where both products take cuBLAS and the types agree */
    const bool offered = st_cuda_glu_hands_off(&glu, &down);
    const bool rule_ok = offered == (M >= ST_CUDA_GEMM_MIN_M) && !st_cuda_glu_hands_off(&glu, &down_normed) &&
                         !st_cuda_glu_hands_off(&glu, &down_other);
    const cmp_result rule = {.bad = !rule_ok};
    record("glu hand-off rule", desc, &rule, TOL_EXACT);
    if (offered) {
        st_error err = {0};
        char *residual = malloc(dres.bytes);
        if (!residual) test_die("host malloc", NULL);
        memcpy(residual, dres.host, dres.bytes);
        if (st_cuda_mul_mat_fused(g_gpu, &glu, &err) != ST_OK || st_cuda_mul_mat_fused(g_gpu, &down, &err) != ST_OK)
            test_die("cuda ffn (plain)", &err);
        char *plain = dual_fetch(&dres);
        memcpy(dres.host, residual, dres.bytes);
        dual_upload(&dres);
        dual_poison(&dact);
        if (st_cuda_mul_mat_fused_handoff(g_gpu, &glu, true, false, &err) != ST_OK ||
            st_cuda_mul_mat_fused_handoff(g_gpu, &down, false, true, &err) != ST_OK)
            test_die("cuda ffn (handed off)", &err);
        char *handed = dual_fetch(&dres);
        cmp_result r = compare_bytes(plain, handed, dres.bytes);
        record("glu hand-off plain~handed bits", desc, &r, TOL_EXACT);
        free(handed);
        free(plain);
        free(residual);
    }
    dual_free(&dx), dual_free(&dh), dual_free(&dn), dual_free(&dg), dual_free(&du), dual_free(&dact);
    dual_free(&dyd), dual_free(&dres), dual_free(&dnf);
    weight_free(&wgu), weight_free(&wd), weight_free(&wd_other);
}

/* A residual add that prepares the next product's norm, then that product, as the forward
 * pass issues one-token steps: x [N] += W_a a (a [Ka]) forming next_h = x * norm_w, then
 * the normed product of x (weights [N, Nc]; epi STORE over 3 parts or a gated pair) given
 * next_h as x_w. On CUDA the add also leaves the sums of squares of x by 4 rows for the
 * product (cuda_gemv.cu); the CPU runs the composite. Both results against the CPU. */
static void test_fused_chain(st_type t, int64_t Ka, int64_t N, int64_t Nc, size_t pad, st_fused_epilogue epi) {
    const bool glu = epi != ST_FUSED_EPILOGUE_STORE;
    const int n_w = glu ? 2 : 3;
    weight wa = weight_new(t, Ka, N, 1, pad), w[3];
    for (int i = 0; i < n_w; i++) w[i] = weight_new(t, N, glu ? Nc : Nc - 3 * i, 1, pad);
    view va = mkpacked(ST_TYPE_F32, Ka, 1, 1), vx = mkpacked(ST_TYPE_F32, N, 1, 1), vo = mkpacked(ST_TYPE_F32, Nc, 1, 1);
    dual da = dual_new(view_bytes(&va)), dx = dual_new(view_bytes(&vx)), dnw = dual_new(view_bytes(&vx));
    dual dxw = dual_new(view_bytes(&vx)), dh = dual_new(view_bytes(&vx)), dya = dual_new(view_bytes(&vx));
    dual dout = dual_new(view_bytes(&vo)), dy[3];
    view vy[3];
    dual_random_f32(&da);
    dual_random_f32(&dx);
    dual_random_f32(&dnw);
    dual_poison(&dxw);
    dual_poison(&dout);
    st_tensor ac = on(&va, da.cpu), ag = on(&va, da.gpu), xc = on(&vx, dx.cpu), xg = on(&vx, dx.gpu);
    st_tensor nc = on(&vx, dnw.cpu), ng = on(&vx, dnw.gpu), xwc = on(&vx, dxw.cpu), xwg = on(&vx, dxw.gpu);
    st_tensor hc = on(&vx, dh.cpu), hg = on(&vx, dh.gpu), yac = on(&vx, dya.cpu), yag = on(&vx, dya.gpu);
    st_tensor outc = on(&vo, dout.cpu), outg = on(&vo, dout.gpu), wac = on(&wa.v, wa.d.cpu), wag = on(&wa.v, wa.d.gpu);
    st_fused_mul_mat pc = {.n_w = 1, .w = {&wac}, .y = {&yac}, .x = &ac, .epilogue = ST_FUSED_EPILOGUE_ADD, .out = &xc,
                           .next_norm_w = &nc, .next_h = &xwc};
    st_fused_mul_mat pg = {.n_w = 1, .w = {&wag}, .y = {&yag}, .x = &ag, .epilogue = ST_FUSED_EPILOGUE_ADD, .out = &xg,
                           .next_norm_w = &ng, .next_h = &xwg};
    st_fused_mul_mat qc = {.n_w = n_w, .x = &xc, .norm_w = &nc, .eps = 1e-6f, .h = &hc, .epilogue = epi, .x_w = &xwc};
    st_fused_mul_mat qg = {.n_w = n_w, .x = &xg, .norm_w = &ng, .eps = 1e-6f, .h = &hg, .epilogue = epi, .x_w = &xwg};
    st_tensor wc[3], wg[3], yc[3], yg[3];
    for (int i = 0; i < n_w; i++) {
        vy[i] = mkpacked(ST_TYPE_F32, w[i].v.t.ne[1], 1, 1);
        dy[i] = dual_new(view_bytes(&vy[i]));
        dual_poison(&dy[i]);
        wc[i] = on(&w[i].v, w[i].d.cpu), wg[i] = on(&w[i].v, w[i].d.gpu);
        yc[i] = on(&vy[i], dy[i].cpu), yg[i] = on(&vy[i], dy[i].gpu);
        qc.w[i] = &wc[i], qg.w[i] = &wg[i], qc.y[i] = &yc[i], qg.y[i] = &yg[i];
    }
    if (glu) qc.out = &outc, qg.out = &outg;
    st_error err = {0};
    if (st_fused_mul_mat_composite(g_cpu, &pc, &err) != ST_OK || st_fused_mul_mat_composite(g_cpu, &qc, &err) != ST_OK)
        test_die("cpu mul_mat_fused", &err);
    if (st_cuda_mul_mat_fused(g_gpu, &pg, &err) != ST_OK || st_cuda_mul_mat_fused(g_gpu, &qg, &err) != ST_OK)
        test_die("cuda mul_mat_fused", &err);
    char desc[128];
    snprintf(desc, sizeof(desc), "%s Ka=%lld N=%lld Nc=%lld pad=%zu %s", tname(t), (long long)Ka, (long long)N,
             (long long)Nc, pad, epilogue_name[epi]);
    const double tol = mm_tol(t, 1) * (glu ? 2 : 1);
    dual *checked[5] = {&dx, &dxw};
    view *views[5] = {&vx, &vx};
    int n_checked = 2;
    if (glu) checked[n_checked] = &dout, views[n_checked++] = &vo;
    else
        for (int i = 0; i < n_w; i++) checked[n_checked] = &dy[i], views[n_checked++] = &vy[i];
    for (int i = 0; i < n_checked; i++) {
        char *got = dual_fetch(checked[i]);
        cmp_result r = compare_f32(views[i], checked[i]->cpu, got, checked[i]->bytes);
        record(i == 0 ? "fused chain: x" : i == 1 ? "fused chain: x * norm_w" : "fused chain: product", desc, &r, tol);
        free(got);
    }
    for (int i = 0; i < n_w; i++) {
        dual_free(&dy[i]);
        weight_free(&w[i]);
    }
    weight_free(&wa);
    dual *all[] = {&da, &dx, &dnw, &dxw, &dh, &dya, &dout};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) dual_free(all[i]);
}

/* A one-token product whose y is page-locked host memory (host_alloc), as a decode step's
 * output head writes its logits straight to the host: the same bytes as into device
 * memory, the rows outside the view untouched. K = 37 takes the general kernel, K = 2048
 * the decode kernel (N = 45: a last block with dead warps; 40,000: the head's norm apart). */
static void test_mul_mat_to_host(st_type t, int64_t K, int64_t N, bool norm) {
    weight w = weight_new(t, K, N, 1, 0);
    view vx = mkpacked(ST_TYPE_F32, K, 1, 1), vh = vx, vn = vx;
    view vy = mkview(ST_TYPE_F32, N, 1, 1, (size_t)(N + 3) * 4, (size_t)(N + 3) * 4, 4); /* gaps both sides */
    dual dx = dual_new(view_bytes(&vx)), dh = dual_new(view_bytes(&vh)), dn = dual_new(view_bytes(&vn));
    dual dy = dual_new(view_bytes(&vy));
    dual_random_f32(&dx);
    dual_random_f32(&dn);
    dual_poison(&dy);
    st_error err = {0};
    char *host = NULL;
    if (g_gpu->iface->host_alloc(g_gpu, dy.bytes, (void **)&host, &err) != ST_OK) test_die("cuda host_alloc", &err);
    memcpy(host, dy.host, dy.bytes); /* the same poison */
    st_tensor wg = on(&w.v, w.d.gpu), xg = on(&vx, dx.gpu), hg = on(&vh, dh.gpu), ng = on(&vn, dn.gpu);
    st_tensor yd = on(&vy, dy.gpu), yh = on(&vy, host);
    st_fused_mul_mat op = {.n_w = 1, .w = {&wg}, .y = {&yd}, .x = &xg, .h = &hg, .eps = 1e-6f};
    if (norm) op.norm_w = &ng;
    if (st_cuda_mul_mat_fused(g_gpu, &op, &err) != ST_OK) test_die("cuda mul_mat_fused", &err);
    op.y[0] = &yh;
    if (st_cuda_mul_mat_fused(g_gpu, &op, &err) != ST_OK) test_die("cuda mul_mat_fused to host", &err);
    char *want = dual_fetch(&dy); /* synchronizes: host is final too */
    cmp_result r = compare_bytes(want, host, dy.bytes);
    char desc[96];
    snprintf(desc, sizeof(desc), "%s K=%lld N=%lld%s y in page-locked host memory", tname(t), (long long)K,
             (long long)N, norm ? " norm" : "");
    record("mul_mat to host = to device", desc, &r, TOL_EXACT);
    free(want);
    g_gpu->iface->host_free(g_gpu, host);
    dual_free(&dx);
    dual_free(&dh);
    dual_free(&dn);
    dual_free(&dy);
    weight_free(&w);
}

/* ---- mul_mat_id ---------------------------------------------------------------------- */

typedef enum moe_x { MOE_PER_SLOT = 0, MOE_SHARED_2D = 1, MOE_SHARED_3D = 2 } moe_x;
static const char *moe_x_name[] = {"per-slot", "shared-2d", "shared-3d"};

static void test_mul_mat_id(st_type t, int64_t K, int64_t N, int64_t E, int64_t n_used, int64_t M, size_t pad,
                            moe_x xm) {
    weight w = weight_new(t, K, N, E, pad);
    int32_t ids[256];
    for (int64_t i = 0; i < n_used * M; i++) ids[i] = rng_int((int32_t)E);
    dual di = ids_new(ids, n_used * M);
    view vi = ids_view(n_used, M);
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
    snprintf(desc, sizeof(desc), "%s K=%lld N=%lld E=%lld used=%lld M=%lld pad=%zu x=%s", tname(t), (long long)K,
             (long long)N, (long long)E, (long long)n_used, (long long)M, pad, moe_x_name[xm]);
    /* M >= ST_CUDA_MOE_GROUPED_MIN_M: grouped cuBLAS GEMMs; below it the own kernel */
    record("mul_mat_id", desc, &r, M < ST_CUDA_MOE_GROUPED_MIN_M ? TOL_F32_SUM : mm_tol(t, M));
    free(got);
    dual_free(&dx);
    dual_free(&dy);
    dual_free(&di);
    weight_free(&w);
}

/* ---- the experts' fused unit and down product ----------------------------------------- */

/* Whether the CUDA backend in force runs the block-a-row MoE kernels where they take the
 * shapes (st_cuda_tuning's moe_rowblock; set with the tuning by run_moe_fused_*). */
static bool g_moe_rowblock;

/* Whether the block-a-row kernels (cuda_moe_rowblock.cu) take a case's unit or its down
 * product: their rule, restated. F16/BF16 experts, one token, 16-byte aligned rows (the
 * pad a multiple of 16: the cases' other operands are aligned); the unit at K a multiple
 * of 2,048 up to 4,096 (two pieces a thread); down at n_used F a multiple of 2,048 up to
 * 8,192, n_used dividing the 8 warps of a block (32-lane warps). */
static bool moe_rowblock_unit(st_type t, int64_t K, int64_t M, size_t pad) {
    return (t == ST_TYPE_F16 || t == ST_TYPE_BF16) && M == 1 && pad % 16 == 0 && K % 2048 == 0 && K <= 4096;
}
static bool moe_rowblock_down(st_type t, int64_t F, int64_t n_used, int64_t M, size_t pad) {
    return (t == ST_TYPE_F16 || t == ST_TYPE_BF16) && M == 1 && pad % 16 == 0 && (n_used * F) % 2048 == 0 &&
           n_used * F <= 8192 && 8 % n_used == 0;
}

/* A fused op's output against the CUDA composite's from the same input: bitwise where the
 * warp-a-row kernels ran it (the composite's products and roundings in one kernel). The
 * block-a-row kernels add in another order (cuda_moe_rowblock.cu), so there the bits
 * differ, and the row says that they do: the block-a-row kernels ran (a rule that stopped
 * taking the shape would show here, not pass unseen). */
static void moe_fused_vs_composite(const char *op, bool rowblock, const char *desc, const char *comp,
                                   const char *fused, size_t bytes) {
    if (!rowblock) {
        cmp_result r = compare_bytes(comp, fused, bytes);
        record(op, desc, &r, TOL_EXACT);
        return;
    }
    cmp_result r = {.bad = memcmp(comp, fused, bytes) == 0};
    record("moe block-a-row ran", desc, &r, TOL_EXACT);
}

/* An MoE layer's experts: gate, up [K, F, E], down [F, D, E], all at one pad. */
typedef struct moe_experts {
    weight g, u, d;
} moe_experts;

static moe_experts moe_experts_new(st_type t, int64_t K, int64_t F, int64_t D, int64_t E, size_t pad) {
    moe_experts ex = {weight_new(t, K, F, E, pad), weight_new(t, K, F, E, pad), weight_new(t, F, D, E, pad)};
    return ex;
}

static void moe_experts_free(moe_experts *ex) { weight_free(&ex->g), weight_free(&ex->u), weight_free(&ex->d); }

/* M tokens, n_used distinct experts each, as the routing picks them. */
static void moe_random_ids(int32_t *ids, int64_t E, int64_t n_used, int64_t M) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t j = 0; j < n_used; j++) {
            int32_t e;
            bool again;
            do {
                e = rng_int((int32_t)E), again = false;
                for (int64_t i = 0; i < j; i++) again = again || ids[m * n_used + i] == e;
            } while (again);
            ids[m * n_used + j] = e;
        }
}

/* An MoE layer's experts for M tokens, n_used experts each (st_fused_moe): the unit (gate
 * and up products, SwiGLU or GeGLU) over h [K, M], then the down product of the unit's
 * output with the weighted combination into out [D, M] (residual: added to a residual
 * [D, M] instead, out then scratch). The CUDA fused ops against the CPU composite (the
 * meaning, by the GEMV tolerance, on either kernel: f32 sums in another order), and each
 * against the CUDA composite of plain ops on the same input (down: over the fused unit's
 * output), moe_fused_vs_composite: from ST_CUDA_MOE_GROUPED_MIN_M tokens the fused ops run
 * the composite's grouped GEMMs over one plan and form the unit or the weighted sum and
 * residual add from their columns with the composite's roundings, so bitwise there too. */
static void moe_fused_case(const moe_experts *ex, st_type t, int64_t K, int64_t F, int64_t D, int64_t E,
                           int64_t n_used, int64_t M, size_t pad, bool gelu, bool residual) {
    int32_t ids[512];
    moe_random_ids(ids, E, n_used, M);
    dual di = ids_new(ids, n_used * M);
    view vi = ids_view(n_used, M), vh = mkpacked(ST_TYPE_F32, K, M, 1);
    view vw = mkview(ST_TYPE_F32, n_used, M, 1, (size_t)(n_used + 1) * 4, (size_t)(n_used + 1) * 4 * (size_t)M, 0);
    const size_t fnb1 = (size_t)(F + 4) * 4, dnb1 = (size_t)(D + 1) * 4;
    view vf = mkview(ST_TYPE_F32, F, n_used, M, fnb1, fnb1 * (size_t)n_used, 0); /* gate, up (= the unit) */
    view vd = mkview(ST_TYPE_F32, D, n_used, M, dnb1, dnb1 * (size_t)n_used, 0); /* the down products */
    view vo = mkview(ST_TYPE_F32, D, M, 1, (size_t)(D + 2) * 4, (size_t)(D + 2) * 4 * (size_t)M, 0);
    dual dh = dual_new(view_bytes(&vh)), dw = dual_new(view_bytes(&vw));
    dual_random_f32(&dh);
    dual_random_f32(&dw);
    /* three runs: [0] CPU composite, [1] CUDA fused, [2] CUDA composite (its down over [1]'s unit) */
    dual dg[3], du[3], dy[3], dout[3], dres[3];
    st_fused_moe glu[3], down[3];
    st_tensor tg[3], tu[3], ty[3], tout[3], tres[3], th[2], tw[2], ti[2], twg[2], twu[2], twd[2];
    for (int b = 0; b < 2; b++) {
        th[b] = on(&vh, b ? dh.gpu : dh.cpu), tw[b] = on(&vw, b ? dw.gpu : dw.cpu), ti[b] = on(&vi, b ? di.gpu : di.cpu);
        twg[b] = on(&ex->g.v, b ? ex->g.d.gpu : ex->g.d.cpu), twu[b] = on(&ex->u.v, b ? ex->u.d.gpu : ex->u.d.cpu);
        twd[b] = on(&ex->d.v, b ? ex->d.d.gpu : ex->d.d.cpu);
    }
    for (int r = 0; r < 3; r++) {
        const int b = r > 0;
        dg[r] = dual_new(view_bytes(&vf)), du[r] = dual_new(view_bytes(&vf));
        dy[r] = dual_new(view_bytes(&vd)), dout[r] = dual_new(view_bytes(&vo));
        dres[r] = dual_new(view_bytes(&vo));
        dual_poison(&du[r]), dual_poison(&dout[r]);
        if (r == 0) dual_random_f32(&dres[0]);
        else memcpy(dres[r].host, dres[0].host, dres[0].bytes), dual_upload(&dres[r]);
        tres[r] = on(&vo, b ? dres[r].gpu : dres[r].cpu);
        tg[r] = on(&vf, b ? dg[r].gpu : dg[r].cpu), tu[r] = on(&vf, b ? du[r].gpu : du[r].cpu);
        ty[r] = on(&vd, b ? dy[r].gpu : dy[r].cpu), tout[r] = on(&vo, b ? dout[r].gpu : dout[r].cpu);
        glu[r] = (st_fused_moe){.kind = ST_FUSED_MOE_GLU, .gelu = gelu, .w = {&twg[b], &twu[b]},
                                .y = {&tg[r], &tu[r]}, .x = &th[b], .ids = &ti[b], .out = &tu[r]};
        down[r] = (st_fused_moe){.kind = ST_FUSED_MOE_DOWN, .w = {&twd[b]}, .y = {&ty[r]}, .x = &tu[r == 2 ? 1 : r],
                                 .ids = &ti[b], .wts = &tw[b], .out = &tout[r], .residual = residual ? &tres[r] : NULL};
    }
    st_error err = {0};
    if (st_fused_moe_composite(g_cpu, &glu[0], &err) != ST_OK || st_fused_moe_composite(g_cpu, &down[0], &err) != ST_OK)
        test_die("cpu moe composite", &err);
    if (st_cuda_moe_fused(g_gpu, &glu[1], &err) != ST_OK || st_cuda_moe_fused(g_gpu, &down[1], &err) != ST_OK)
        test_die("cuda moe fused", &err);
    if (st_fused_moe_composite(g_gpu, &glu[2], &err) != ST_OK || st_fused_moe_composite(g_gpu, &down[2], &err) != ST_OK)
        test_die("cuda moe composite", &err);
    char *unit[3], *out[3];
    dual *result = residual ? dres : dout; /* (out is scratch with a residual) */
    for (int r = 1; r < 3; r++) unit[r] = dual_fetch(&du[r]), out[r] = dual_fetch(&result[r]);
    const bool unit_rb = g_moe_rowblock && moe_rowblock_unit(t, K, M, pad);
    const bool down_rb = g_moe_rowblock && moe_rowblock_down(t, F, n_used, M, pad);
    char desc[192];
    snprintf(desc, sizeof(desc), "%s K=%lld F=%lld D=%lld E=%lld used=%lld M=%lld pad=%zu %s%s%s%s", tname(t),
             (long long)K, (long long)F, (long long)D, (long long)E, (long long)n_used, (long long)M, pad,
             gelu ? "geglu" : "swiglu", residual ? " +residual" : "", unit_rb ? " unit:block-a-row" : "",
             down_rb ? " down:block-a-row" : "");
    const double tol = M < ST_CUDA_MOE_GROUPED_MIN_M ? TOL_F32_SUM : mm_tol(t, M);
    cmp_result r = compare_f32(&vf, du[0].cpu, unit[1], du[0].bytes);
    record("moe unit fused", desc, &r, tol);
    r = compare_f32(&vo, result[0].cpu, out[1], result[0].bytes);
    record("moe down+combine fused", desc, &r, tol);
    moe_fused_vs_composite("moe unit fused = composite", unit_rb, desc, unit[2], unit[1], du[1].bytes);
    moe_fused_vs_composite("moe down+combine fused = composite", down_rb, desc, out[2], out[1], result[1].bytes);
    for (int k = 1; k < 3; k++) free(unit[k]), free(out[k]);
    for (int k = 0; k < 3; k++)
        dual_free(&dg[k]), dual_free(&du[k]), dual_free(&dy[k]), dual_free(&dout[k]), dual_free(&dres[k]);
    dual_free(&dh), dual_free(&dw), dual_free(&di);
}

/* Whether a case runs under the tuning in force: the run without the block-a-row kernels
 * repeats only the cases whose unit or down they take in the other run (the rest ran on
 * the warp-a-row kernels there already). */
static bool moe_case_runs(st_type t, int64_t K, int64_t F, int64_t n_used, int64_t M, size_t pad) {
    return g_moe_rowblock || moe_rowblock_unit(t, K, M, pad) || moe_rowblock_down(t, F, n_used, M, pad);
}

static void test_moe_fused(st_type t, int64_t K, int64_t F, int64_t D, int64_t E, int64_t n_used, int64_t M,
                           size_t pad, bool gelu, bool residual) {
    if (!moe_case_runs(t, K, F, n_used, M, pad)) return;
    moe_experts ex = moe_experts_new(t, K, F, D, E, pad);
    moe_fused_case(&ex, t, K, F, D, E, n_used, M, pad, gelu, residual);
    moe_experts_free(&ex);
}

/* SwiGLU and GeGLU, each with and without the residual, over one set of experts. */
static void test_moe_fused_forms(st_type t, int64_t K, int64_t F, int64_t D, int64_t E, int64_t n_used, int64_t M,
                                 size_t pad) {
    if (!moe_case_runs(t, K, F, n_used, M, pad)) return;
    moe_experts ex = moe_experts_new(t, K, F, D, E, pad);
    for (int gelu = 0; gelu <= 1; gelu++)
        for (int residual = 0; residual <= 1; residual++)
            moe_fused_case(&ex, t, K, F, D, E, n_used, M, pad, gelu, residual);
    moe_experts_free(&ex);
}

/* ---- rms_norm ------------------------------------------------------------------------ */

/* Two norms in one launch (st_fused_norm_pair): q [D, M] and k [D, M] as two views of one
 * qkv-like buffer of rows (interleaved), each normed in place as olmoe's whole-projection
 * norms are. Against the CPU composite, and bitwise against the CUDA composite. */
static void test_norm_pair(int64_t D, int64_t M, bool with_w) {
    const size_t nb1 = (size_t)(3 * D + 5) * 4; /* q, k, v and a gap a row */
    view vb = mkview(ST_TYPE_F32, 3 * D + 5, M, 1, nb1, nb1 * (size_t)M, 0);
    view vq = mkview(ST_TYPE_F32, D, M, 1, nb1, nb1 * (size_t)M, 0), vk = mkview(ST_TYPE_F32, D, M, 1, nb1, nb1 * (size_t)M, 0);
    view vw = mkpacked(ST_TYPE_F32, D, 1, 1);
    dual dw[2] = {dual_new(view_bytes(&vw)), dual_new(view_bytes(&vw))};
    dual_random_f32(&dw[0]), dual_random_f32(&dw[1]);
    dual db[3]; /* [0] CPU composite, [1] CUDA fused, [2] CUDA composite: the same values */
    st_tensor q[3], k[3], w[2][2];
    st_fused_norm_pair op[3];
    for (int r = 0; r < 3; r++) {
        const int b = r > 0;
        db[r] = dual_new(view_bytes(&vb));
        if (r == 0) dual_random_f32(&db[0]);
        else memcpy(db[r].host, db[0].host, db[0].bytes), dual_upload(&db[r]);
        char *base = b ? db[r].gpu : db[r].cpu;
        q[r] = on(&vq, base), k[r] = on(&vk, base + (size_t)D * 4);
        for (int i = 0; i < 2; i++) w[b][i] = on(&vw, b ? dw[i].gpu : dw[i].cpu);
        op[r] = (st_fused_norm_pair){.dst = {&q[r], &k[r]}, .x = {&q[r], &k[r]},
                                     .w = {with_w ? &w[b][0] : NULL, with_w ? &w[b][1] : NULL}, .eps = {1e-5f, 1e-6f}};
    }
    st_error err = {0};
    st_fused_norm_pair_composite(g_cpu, &op[0]);
    if (st_cuda_norm_pair(g_gpu, &op[1], &err) != ST_OK) test_die("cuda norm_pair", &err);
    st_fused_norm_pair_composite(g_gpu, &op[2]);
    char *got = dual_fetch(&db[1]), *comp = dual_fetch(&db[2]);
    char desc[96];
    snprintf(desc, sizeof(desc), "D=%lld M=%lld%s", (long long)D, (long long)M, with_w ? " w" : "");
    cmp_result r = compare_f32(&vb, db[0].cpu, got, db[0].bytes);
    record("rms_norm pair fused", desc, &r, TOL_ELEMENTWISE);
    r = compare_bytes(comp, got, db[1].bytes);
    record("rms_norm pair fused = composite", desc, &r, TOL_EXACT);
    free(got), free(comp);
    for (int k2 = 0; k2 < 3; k2++) dual_free(&db[k2]);
    dual_free(&dw[0]), dual_free(&dw[1]);
}

/* A post-norm into the residual (st_fused_norm_add): out = x + rmsnorm(y) * w over M rows
 * of D, y and x at padded row strides; out over x (the residual in place) or apart. The
 * CUDA fused op against the CPU composite, and bitwise against the CUDA composite (the
 * norm's scale and the add's rounding in one kernel). */
static void test_norm_add(int64_t D, int64_t M, bool with_w, bool in_place) {
    view vy = mkview(ST_TYPE_F32, D, M, 1, (size_t)(D + 3) * 4, (size_t)(D + 3) * 4 * (size_t)M, 4);
    view vx = mkview(ST_TYPE_F32, D, M, 1, (size_t)(D + 1) * 4, (size_t)(D + 1) * 4 * (size_t)M, 0);
    view vw = mkpacked(ST_TYPE_F32, D, 1, 1);
    dual dy = dual_new(view_bytes(&vy)), dw = dual_new(view_bytes(&vw));
    dual_random_f32(&dy);
    dual_random_f32(&dw);
    /* three runs, each its own x, h and out: [0] CPU composite, [1] CUDA fused, [2] CUDA
     * composite; one set of x values for all */
    dual dx[3], dh[3], dout[3];
    st_tensor tx[3], th[3], tout[3];
    const st_tensor ty[2] = {on(&vy, dy.cpu), on(&vy, dy.gpu)}, tw[2] = {on(&vw, dw.cpu), on(&vw, dw.gpu)};
    st_fused_norm_add op[3];
    for (int r = 0; r < 3; r++) {
        const int b = r > 0;
        dx[r] = dual_new(view_bytes(&vx)), dh[r] = dual_new(view_bytes(&vy));
        if (r == 0) dual_random_f32(&dx[0]);
        else memcpy(dx[r].host, dx[0].host, dx[0].bytes), dual_upload(&dx[r]);
        dual_poison(&dh[r]);
        dout[r] = in_place ? dx[r] : dual_new(view_bytes(&vx));
        if (!in_place) dual_poison(&dout[r]);
        tx[r] = on(&vx, b ? dx[r].gpu : dx[r].cpu), th[r] = on(&vy, b ? dh[r].gpu : dh[r].cpu);
        tout[r] = on(&vx, b ? dout[r].gpu : dout[r].cpu);
        op[r] = (st_fused_norm_add){.y = &ty[b], .norm_w = with_w ? &tw[b] : NULL, .eps = 1e-6f, .h = &th[r],
                                    .x = &tx[r], .out = &tout[r]};
    }
    st_error err = {0};
    st_fused_norm_add_composite(g_cpu, &op[0]);
    if (st_cuda_norm_add(g_gpu, &op[1], &err) != ST_OK) test_die("cuda norm_add", &err);
    st_fused_norm_add_composite(g_gpu, &op[2]);
    char *got = dual_fetch(&dout[1]), *comp = dual_fetch(&dout[2]);
    char desc[96];
    snprintf(desc, sizeof(desc), "D=%lld M=%lld%s%s", (long long)D, (long long)M, with_w ? " w" : "",
             in_place ? " out=x" : "");
    cmp_result r = compare_f32(&vx, dout[0].cpu, got, dout[0].bytes);
    record("rms_norm+add fused", desc, &r, TOL_ELEMENTWISE);
    r = compare_bytes(comp, got, dout[1].bytes);
    record("rms_norm+add fused = composite", desc, &r, TOL_EXACT);
    free(got), free(comp);
    for (int k = 0; k < 3; k++) {
        if (!in_place) dual_free(&dout[k]);
        dual_free(&dx[k]), dual_free(&dh[k]);
    }
    dual_free(&dy), dual_free(&dw);
}

/* heads: x is [D, 6, M] inside a wider (qkv-like) row; else [D, 1, M] packed. */
static void test_rms_norm(int64_t D, int64_t M, bool heads, bool with_w, bool in_place) {
    const int64_t H = heads ? 6 : 1;
    view vx = heads ? mkview(ST_TYPE_F32, D, H, M, (size_t)D * 4, (size_t)(D * H + 2 * D + 7) * 4, 12)
                    : mkview(ST_TYPE_F32, D, 1, M, (size_t)D * 4, (size_t)D * 4, 0); /* [D, 1, M] packed */
    view vy = in_place ? vx : mkview(ST_TYPE_F32, D, H, M, (size_t)(D + 1) * 4, (size_t)(D + 1) * 4 * (size_t)H, 4);
    view vw = mkpacked(ST_TYPE_F32, D, 1, 1);
    dual dx = dual_new(view_bytes(&vx)), dw = dual_new(view_bytes(&vw));
    dual dy = in_place ? dx : dual_new(view_bytes(&vy));
    dual_random_f32(&dx);
    dual_random_f32(&dw);
    if (!in_place) dual_poison(&dy);
    st_tensor xc = on(&vx, dx.cpu), xg = on(&vx, dx.gpu), wc = on(&vw, dw.cpu), wg = on(&vw, dw.gpu);
    st_tensor yc = on(&vy, dy.cpu), yg = on(&vy, dy.gpu);
    g_cpu->iface->rms_norm(g_cpu, &yc, &xc, with_w ? &wc : NULL, 1e-5f);
    g_gpu->iface->rms_norm(g_gpu, &yg, &xg, with_w ? &wg : NULL, 1e-5f);
    char *got = dual_fetch(&dy);
    cmp_result r = compare_f32(&vy, dy.cpu, got, dy.bytes);
    char desc[128];
    snprintf(desc, sizeof(desc), "D=%lld heads=%lld M=%lld w=%s %s", (long long)D, (long long)H, (long long)M,
             with_w ? "yes" : "none", in_place ? "in-place" : "strided-out");
    record("rms_norm", desc, &r, TOL_ELEMENTWISE);
    free(got);
    if (!in_place) dual_free(&dy);
    dual_free(&dx);
    dual_free(&dw);
}

/* ---- rope ---------------------------------------------------------------------------- */

static void test_rope(int64_t hd, int32_t n_rot, st_rope_mode mode, bool factors, bool scaled, int64_t M,
                      bool in_place) {
    const int64_t H = 6;
    view vx = mkview(ST_TYPE_F32, hd, H, M, (size_t)hd * 4, (size_t)(hd * (H + 4)) * 4, 0);
    view vy = in_place ? vx : mkpacked(ST_TYPE_F32, hd, H, M);
    view vf = mkpacked(ST_TYPE_F32, n_rot / 2 > 0 ? n_rot / 2 : 1, 1, 1);
    dual dx = dual_new(view_bytes(&vx)), df = dual_new(view_bytes(&vf));
    dual dy = in_place ? dx : dual_new(view_bytes(&vy));
    dual_random_f32(&dx);
    for (int64_t i = 0; i < vf.t.ne[0]; i++) {
        float f = 1.0f + 7.0f * (0.5f + 0.5f * rng_f32()); /* llama3-like factors in [1, 8] */
        memcpy(df.host + i * 4, &f, 4);
    }
    dual_upload(&df);
    if (!in_place) dual_poison(&dy);
    int32_t pos[8];
    for (int64_t m = 0; m < M; m++) pos[m] = rng_int(32768);
    dual dp = ids_new(pos, M);
    view vp = ids_view(M, 1);
    st_rope_params p = st_rope_params_default(mode, n_rot, mode == ST_ROPE_MODE_NORM ? 500000.0f : 10000.0f);
    if (scaled) {
        p.freq_scale = 0.25f;
        p.attn_factor = 1.1f;
    }
    st_rope_params pc = p, pg = p; /* freq_factors live in each backend's memory */
    pc.freq_factors = factors ? (const float *)df.cpu : NULL;
    pg.freq_factors = factors ? (const float *)df.gpu : NULL;
    st_tensor xc = on(&vx, dx.cpu), xg = on(&vx, dx.gpu), yc = on(&vy, dy.cpu), yg = on(&vy, dy.gpu);
    st_tensor ppc = on(&vp, dp.cpu), ppg = on(&vp, dp.gpu);
    g_cpu->iface->rope(g_cpu, &yc, &xc, &ppc, &pc);
    g_gpu->iface->rope(g_gpu, &yg, &xg, &ppg, &pg);
    char *got = dual_fetch(&dy);
    cmp_result r = compare_f32(&vy, dy.cpu, got, dy.bytes);
    char desc[128];
    snprintf(desc, sizeof(desc), "%s hd=%lld n_rot=%d M=%lld factors=%d scaled=%d %s",
             mode == ST_ROPE_MODE_NORM ? "norm" : "neox", (long long)hd, n_rot, (long long)M, factors, scaled,
             in_place ? "in-place" : "out");
    record("rope", desc, &r, TOL_ELEMENTWISE);
    free(got);
    if (!in_place) dual_free(&dy);
    dual_free(&dx);
    dual_free(&df);
    dual_free(&dp);
}

/* ---- gated units, add, scale ---------------------------------------------------------- */

/* form 0: separate packed; 1: strided views; 2: in place (dst = up); 3: fused gate_up */
static void test_glu(bool gelu, int64_t F, int64_t M, int form) {
    view vg = {0}, vu = {0}, vy = {0}, vgu = {0};
    dual dg = {0}, du = {0}, dy = {0}, dgu = {0};
    if (form == 3) {
        vgu = mkview(ST_TYPE_F32, 2 * F, M, 1, (size_t)(2 * F + 3) * 4, (size_t)(2 * F + 3) * 4 * (size_t)M, 4);
        vy = mkview(ST_TYPE_F32, F, M, 1, (size_t)(F + 1) * 4, (size_t)(F + 1) * 4 * (size_t)M, 0);
        dgu = dual_new(view_bytes(&vgu));
        dual_random_f32(&dgu);
    } else {
        size_t pad = form == 1 ? 5 : 0;
        vg = mkview(ST_TYPE_F32, F, M, 1, (size_t)(F + pad) * 4, (size_t)(F + pad) * 4 * (size_t)M, form == 1 ? 4 : 0);
        vu = mkview(ST_TYPE_F32, F, M, 1, (size_t)(F + 2 * pad) * 4, (size_t)(F + 2 * pad) * 4 * (size_t)M, 0);
        vy = form == 2 ? vu : mkview(ST_TYPE_F32, F, M, 1, (size_t)(F + pad) * 4, (size_t)(F + pad) * 4 * (size_t)M, 0);
        dg = dual_new(view_bytes(&vg));
        du = dual_new(view_bytes(&vu));
        dual_random_f32(&dg);
        dual_random_f32(&du);
    }
    if (form == 2) {
        dy = du;
    } else {
        dy = dual_new(view_bytes(&vy));
        dual_poison(&dy);
    }
    st_tensor yc = on(&vy, dy.cpu), yg = on(&vy, dy.gpu);
    if (form == 3) {
        st_tensor guc = on(&vgu, dgu.cpu), gug = on(&vgu, dgu.gpu);
        if (gelu) test_die("no geglu_fused in the backend table", NULL);
        g_cpu->iface->swiglu_fused(g_cpu, &yc, &guc);
        g_gpu->iface->swiglu_fused(g_gpu, &yg, &gug);
    } else {
        st_tensor gc = on(&vg, dg.cpu), gg = on(&vg, dg.gpu), uc = on(&vu, du.cpu), ug = on(&vu, du.gpu);
        if (gelu) {
            g_cpu->iface->geglu(g_cpu, &yc, &gc, &uc);
            g_gpu->iface->geglu(g_gpu, &yg, &gg, &ug);
        } else {
            g_cpu->iface->swiglu(g_cpu, &yc, &gc, &uc);
            g_gpu->iface->swiglu(g_gpu, &yg, &gg, &ug);
        }
    }
    char *got = dual_fetch(&dy);
    cmp_result r = compare_f32(&vy, dy.cpu, got, dy.bytes);
    static const char *forms[] = {"packed", "strided", "in-place", "fused"};
    char desc[128];
    snprintf(desc, sizeof(desc), "F=%lld M=%lld %s", (long long)F, (long long)M, forms[form]);
    record(form == 3 ? "swiglu_fused" : gelu ? "geglu" : "swiglu", desc, &r, TOL_ELEMENTWISE);
    free(got);
    if (form == 3) dual_free(&dgu);
    else {
        dual_free(&dg);
        dual_free(&du);
    }
    if (form != 2) dual_free(&dy);
}

/* dst = a + b (mul: a * b); b: 0 same shape; 1 a row vector [D]; 2 a bias [D, 1, M] over
 * [D, 3, M]; 3 a scalar per row */
static void test_add(int64_t D, int64_t M, int bshape, bool in_place, bool mul) {
    const int64_t H = bshape == 2 ? 3 : 1;
    view va = mkview(ST_TYPE_F32, D, H, M, (size_t)(D + 2) * 4, (size_t)(D + 2) * 4 * (size_t)H + 12, 4);
    view vb;
    if (bshape == 0) vb = mkpacked(ST_TYPE_F32, D, H, M);
    else if (bshape == 1) vb = mkpacked(ST_TYPE_F32, D, 1, 1);
    else if (bshape == 2) vb = mkview(ST_TYPE_F32, D, 1, M, (size_t)D * 4, (size_t)(D + 3) * 4, 0);
    else vb = mkview(ST_TYPE_F32, 1, H, M, 8, 8 * (size_t)H, 0);
    view vy = in_place ? va : mkpacked(ST_TYPE_F32, D, H, M);
    dual da = dual_new(view_bytes(&va)), db = dual_new(view_bytes(&vb));
    dual dy = in_place ? da : dual_new(view_bytes(&vy));
    dual_random_f32(&da);
    dual_random_f32(&db);
    if (!in_place) dual_poison(&dy);
    st_tensor ac = on(&va, da.cpu), ag = on(&va, da.gpu), bc = on(&vb, db.cpu), bg = on(&vb, db.gpu);
    st_tensor yc = on(&vy, dy.cpu), yg = on(&vy, dy.gpu);
    (mul ? g_cpu->iface->mul : g_cpu->iface->add)(g_cpu, &yc, &ac, &bc);
    (mul ? g_gpu->iface->mul : g_gpu->iface->add)(g_gpu, &yg, &ag, &bg);
    char *got = dual_fetch(&dy);
    cmp_result r = compare_f32(&vy, dy.cpu, got, dy.bytes);
    static const char *shapes[] = {"same", "row-vector", "bias-over-heads", "scalar-per-row"};
    char desc[128];
    snprintf(desc, sizeof(desc), "D=%lld H=%lld M=%lld b=%s %s", (long long)D, (long long)H, (long long)M,
             shapes[bshape], in_place ? "in-place" : "out");
    record(mul ? "mul" : "add", desc, &r, TOL_EXACT);
    free(got);
    if (!in_place) dual_free(&dy);
    dual_free(&da);
    dual_free(&db);
}

static void test_scale(int64_t D, int64_t M, bool in_place) {
    view vx = mkview(ST_TYPE_F32, D, M, 1, (size_t)(D + 3) * 4, (size_t)(D + 3) * 4 * (size_t)M, 0);
    view vy = in_place ? vx : mkpacked(ST_TYPE_F32, D, M, 1);
    dual dx = dual_new(view_bytes(&vx));
    dual dy = in_place ? dx : dual_new(view_bytes(&vy));
    dual_random_f32(&dx);
    if (!in_place) dual_poison(&dy);
    st_tensor xc = on(&vx, dx.cpu), xg = on(&vx, dx.gpu), yc = on(&vy, dy.cpu), yg = on(&vy, dy.gpu);
    g_cpu->iface->scale(g_cpu, &yc, &xc, 8.0f / 3.0f);
    g_gpu->iface->scale(g_gpu, &yg, &xg, 8.0f / 3.0f);
    char *got = dual_fetch(&dy);
    cmp_result r = compare_f32(&vy, dy.cpu, got, dy.bytes);
    char desc[128];
    snprintf(desc, sizeof(desc), "D=%lld M=%lld %s", (long long)D, (long long)M, in_place ? "in-place" : "out");
    record("scale", desc, &r, TOL_EXACT);
    free(got);
    if (!in_place) dual_free(&dy);
    dual_free(&dx);
}

/* ---- KV cache and attention ---------------------------------------------------------- */

/* A cache [hd, n_kv_head, n_ctx] of type t (strided between positions when gapped),
 * filled with random values of that type. */
static dual cache_new(st_type t, int64_t hd, int64_t n_kv_head, int64_t n_ctx, bool gapped, view *v) {
    size_t nb1 = (size_t)hd * type_size(t), nb2 = nb1 * (size_t)n_kv_head + (gapped ? 64 : 0);
    *v = mkview(t, hd, n_kv_head, n_ctx, nb1, nb2, 0);
    dual d = dual_new(view_bytes(v));
    size_t n = d.bytes / type_size(t);
    float *f = malloc(n * 4);
    if (!f) test_die("host malloc", NULL);
    for (size_t i = 0; i < n; i++) f[i] = rng_f32();
    to_type(t, f, d.host, n);
    free(f);
    dual_upload(&d);
    return d;
}

static void test_kv_store(st_type t, int64_t hd, int64_t M, bool gapped) {
    const int64_t n_kv_head = 2, n_ctx = 40;
    view vc;
    dual dc = cache_new(t, hd, n_kv_head, n_ctx, gapped, &vc);
    view vx = mkview(ST_TYPE_F32, hd, n_kv_head, M, (size_t)hd * 4, (size_t)(hd * 8) * 4, 4);
    dual dx = dual_new(view_bytes(&vx));
    dual_random_f32(&dx);
    int32_t pos[8];
    for (int64_t m = 0; m < M; m++) pos[m] = (int32_t)(3 + 7 * m); /* distinct, < n_ctx */
    dual dp = ids_new(pos, M);
    view vp = ids_view(M, 1);
    st_error err = {0};
    st_tensor cc = on(&vc, dc.cpu), cg = on(&vc, dc.gpu), xc = on(&vx, dx.cpu), xg = on(&vx, dx.gpu);
    st_tensor pc = on(&vp, dp.cpu), pg = on(&vp, dp.gpu);
    if (g_cpu->iface->kv_store(g_cpu, &cc, &xc, &pc, &err) != ST_OK) test_die("cpu kv_store", &err);
    if (g_gpu->iface->kv_store(g_gpu, &cg, &xg, &pg, &err) != ST_OK) test_die("cuda kv_store", &err);
    char *got = dual_fetch(&dc);
    cmp_result r = compare_bytes(dc.cpu, got, dc.bytes);
    char desc[128];
    snprintf(desc, sizeof(desc), "%s hd=%lld kv_heads=%lld M=%lld %s", tname(t), (long long)hd, (long long)n_kv_head,
             (long long)M, gapped ? "gapped" : "packed");
    record("kv_store", desc, &r, TOL_EXACT);
    free(got);
    dual_free(&dc);
    dual_free(&dx);
    dual_free(&dp);
}

/* ---- rope_store (st_fused_rope_store) ------------------------------------------------------ */

/* A copy of d with the same host contents, in both backends. */
static dual dual_clone(const dual *d) {
    dual c = dual_new(d->bytes);
    memcpy(c.host, d->host, d->bytes);
    dual_upload(&c);
    return c;
}

/* The q/k norms of a rope_store's operands: none, per head ([hd] weights: qwen3, gemma3),
 * or over each token's whole q and k ([hd Hq], [hd Hk]: olmoe). */
enum { QK_NORM_NONE, QK_NORM_HEAD, QK_NORM_WHOLE };
static const char *const qk_norm_desc[] = {"", " qk-norm", " qk-norm whole"};

/* The operands of a rope_store over M tokens, three times: CPU, CUDA, and a CUDA copy for
 * the composite of plain ops. q, k, v are heads of one qkv row per token (as the forward
 * pass has them), rows `row_gap` floats apart beyond the row; norm weights (QK_NORM_*); F16
 * or F32 caches of n_ctx random entries; positions pos[0..M). */
typedef struct rope_operands {
    view vq, vk, vv, vall, vqn, vkn, vkc, vvc, vp;
    dual dqkv, dqkv2, dqn, dkn, dkc, dkc2, dvc, dvc2, dp;
    st_tensor q[3], k[3], v[3], qn[3], kn[3], kc[3], vc[3], p[3]; /* [0] cpu, [1] cuda, [2] cuda copy */
    st_fused_rope_store op[3];
} rope_operands;

static void rope_operands_init(rope_operands *o, st_type ct, int64_t hd, int64_t Hq, int64_t Hk, int64_t M,
                               int64_t n_ctx, int64_t row_gap, int norms, const int32_t *pos, const st_rope_params *rp) {
    const int64_t R = (Hq + 2 * Hk) * hd;
    const size_t row = (size_t)(R + row_gap) * 4;
    o->vq = mkview(ST_TYPE_F32, hd, Hq, M, (size_t)hd * 4, row, 0);
    o->vk = mkview(ST_TYPE_F32, hd, Hk, M, (size_t)hd * 4, row, (size_t)(Hq * hd) * 4);
    o->vv = mkview(ST_TYPE_F32, hd, Hk, M, (size_t)hd * 4, row, (size_t)((Hq + Hk) * hd) * 4);
    o->vall = mkview(ST_TYPE_F32, R, M, 1, row, row * (size_t)M, 0);
    o->vqn = mkpacked(ST_TYPE_F32, norms == QK_NORM_WHOLE ? hd * Hq : hd, 1, 1);
    o->vkn = mkpacked(ST_TYPE_F32, norms == QK_NORM_WHOLE ? hd * Hk : hd, 1, 1);
    o->vp = ids_view(M, 1);
    o->dqkv = dual_new(view_bytes(&o->vall));
    o->dqn = dual_new(view_bytes(&o->vqn)), o->dkn = dual_new(view_bytes(&o->vkn));
    dual_random_f32(&o->dqkv);
    dual_random_f32(&o->dqn);
    dual_random_f32(&o->dkn);
    o->dkc = cache_new(ct, hd, Hk, n_ctx, false, &o->vkc), o->dvc = cache_new(ct, hd, Hk, n_ctx, false, &o->vvc);
    o->dqkv2 = dual_clone(&o->dqkv), o->dkc2 = dual_clone(&o->dkc), o->dvc2 = dual_clone(&o->dvc);
    o->dp = ids_new(pos, M);
    for (int b = 0; b < 3; b++) {
        const dual *qkv = b == 2 ? &o->dqkv2 : &o->dqkv, *kc = b == 2 ? &o->dkc2 : &o->dkc, *vc = b == 2 ? &o->dvc2 : &o->dvc;
        char *qkv_b = b ? qkv->gpu : qkv->cpu, *kc_b = b ? kc->gpu : kc->cpu, *vc_b = b ? vc->gpu : vc->cpu;
        o->q[b] = on(&o->vq, qkv_b), o->k[b] = on(&o->vk, qkv_b), o->v[b] = on(&o->vv, qkv_b);
        o->qn[b] = on(&o->vqn, b ? o->dqn.gpu : o->dqn.cpu), o->kn[b] = on(&o->vkn, b ? o->dkn.gpu : o->dkn.cpu);
        o->kc[b] = on(&o->vkc, kc_b), o->vc[b] = on(&o->vvc, vc_b);
        o->p[b] = on(&o->vp, b ? o->dp.gpu : o->dp.cpu);
    }
    for (int b = 0; b < 3; b++) {
        st_fused_rope_store op = {.q = &o->q[b], .k = &o->k[b], .v = &o->v[b], .eps = 1e-6f, .positions = &o->p[b],
                                  .slots = &o->p[b],
                                  .rope = rp, .k_cache = &o->kc[b], .v_cache = &o->vc[b]};
        if (norms != QK_NORM_NONE) op.q_norm = &o->qn[b], op.k_norm = &o->kn[b];
        o->op[b] = op;
    }
}

/* The two CUDA runs' caches bitwise equal (the fused op against the composite, recorded
 * under op_bits), and an F32 k cache against the CPU's (under op_cpu). */
static void rope_operands_check_caches(const rope_operands *o, const char *op_bits, const char *op_cpu) {
    char *kgot = dual_fetch(&o->dkc), *kgot2 = dual_fetch(&o->dkc2), *vgot = dual_fetch(&o->dvc),
         *vgot2 = dual_fetch(&o->dvc2);
    cmp_result rk = compare_bytes(kgot2, kgot, o->dkc.bytes), rv = compare_bytes(vgot2, vgot, o->dvc.bytes);
    record(op_bits, "k cache", &rk, TOL_EXACT);
    record(op_bits, "v cache", &rv, TOL_EXACT);
    free(kgot2), free(vgot), free(vgot2);
    if (o->kc[0].type == ST_TYPE_F32) {
        cmp_result rkc = compare_f32(&o->vkc, o->dkc.cpu, kgot, o->dkc.bytes);
        record(op_cpu, "f32 k cache vs cpu", &rkc, TOL_ELEMENTWISE);
    }
    free(kgot);
}

static void rope_operands_free(rope_operands *o) {
    dual_free(&o->dqkv), dual_free(&o->dqkv2), dual_free(&o->dqn), dual_free(&o->dkn), dual_free(&o->dp);
    dual_free(&o->dkc), dual_free(&o->dkc2), dual_free(&o->dvc), dual_free(&o->dvc2);
}

/* The CUDA fused op against the CPU composite (q/k by normalised error; an F32 cache too),
 * and against the CUDA composite of plain ops bitwise (the same arithmetic in one kernel). */
static void test_rope_store(st_type ct, int64_t hd, int64_t Hq, int64_t Hk, int32_t n_rot, st_rope_mode mode,
                            int norms, int64_t M) {
    const int64_t n_ctx = 24;
    int32_t pos[16];
    for (int64_t m = 0; m < M; m++) pos[m] = (int32_t)((5 + 3 * m) % n_ctx); /* distinct for M <= 8 */
    st_rope_params rp = st_rope_params_default(mode, n_rot, 10000.0f);
    rope_operands o;
    rope_operands_init(&o, ct, hd, Hq, Hk, M, n_ctx, 4, norms, pos, &rp); /* a gap after each token's row */
    st_error err = {0};
    if (st_fused_rope_store_composite(g_cpu, &o.op[0], &err) != ST_OK) test_die("cpu rope_store", &err);
    if (st_cuda_rope_store(g_gpu, &o.op[1], &err) != ST_OK) test_die("cuda rope_store", &err);
    if (st_fused_rope_store_composite(g_gpu, &o.op[2], &err) != ST_OK) test_die("cuda rope_store composite", &err);
    char desc[128];
    snprintf(desc, sizeof(desc), "%s cache hd=%lld Hq=%lld Hk=%lld n_rot=%d %s%s M=%lld", tname(ct), (long long)hd,
             (long long)Hq, (long long)Hk, n_rot, mode == ST_ROPE_MODE_NORM ? "norm" : "neox",
             qk_norm_desc[norms], (long long)M);
    char *got = dual_fetch(&o.dqkv), *got2 = dual_fetch(&o.dqkv2);
    cmp_result r = compare_f32(&o.vall, o.dqkv.cpu, got, o.dqkv.bytes);
    record("rope_store", desc, &r, TOL_ELEMENTWISE);
    cmp_result rb = compare_bytes(got2, got, o.dqkv.bytes);
    record("rope_store fused=plain", desc, &rb, TOL_EXACT);
    rope_operands_check_caches(&o, "rope_store fused=plain", "rope_store");
    if (n_rot >= 2) {
        /* the rotations from rope_table, a row a token (as a step's plan gives them), instead
         * of formed per block: the same bits, on the inputs again */
        char *kc_formed = dual_fetch(&o.dkc), *vc_formed = dual_fetch(&o.dvc);
        view vt = mkpacked(ST_TYPE_F32, n_rot, M, 1);
        dual dt = dual_new(view_bytes(&vt));
        st_tensor tg = on(&vt, dt.gpu);
        if (st_cuda_rope_table(g_gpu, &tg, o.op[1].positions, o.op[1].rope, &err) != ST_OK)
            test_die("cuda rope_table", &err);
        dual_upload(&o.dqkv), dual_upload(&o.dkc), dual_upload(&o.dvc);
        st_fused_rope_store ot = o.op[1];
        ot.rope_cs = &tg;
        if (st_cuda_rope_store(g_gpu, &ot, &err) != ST_OK) test_die("cuda rope_store (table)", &err);
        char *gt = dual_fetch(&o.dqkv), *kt = dual_fetch(&o.dkc), *vt_got = dual_fetch(&o.dvc);
        cmp_result rt = compare_bytes(got, gt, o.dqkv.bytes), rk = compare_bytes(kc_formed, kt, o.dkc.bytes),
                   rv = compare_bytes(vc_formed, vt_got, o.dvc.bytes);
        record("rope_store table=formed", desc, &rt, TOL_EXACT);
        record("rope_store table=formed", "k cache", &rk, TOL_EXACT);
        record("rope_store table=formed", "v cache", &rv, TOL_EXACT);
        free(kc_formed), free(vc_formed), free(gt), free(kt), free(vt_got);
        dual_free(&dt);
    }
    free(got), free(got2);
    rope_operands_free(&o);
}


/* Attention is checked path by path (cuda_attention.h): the path the backend picks (AUTO,
 * recorded as "attention") and every path forced on the same operands when it takes them,
 * each against the CPU reference with the path's tolerance (attn_tol). Each path then runs
 * again with n_kv = n_ctx (the whole cache, every position still < n_kv): the visible keys
 * are the same, and so must be the output, bit for bit (what a CUDA graph of the decode
 * step relies on, which passes the context size instead of the depth). */
typedef struct attn_case {
    st_type t;          /* cache type */
    int64_t hd, H, Hkv; /* head_dim, query heads, kv heads */
    int64_t n_kv, M;    /* valid cache entries, query tokens */
    int32_t window;     /* 0: full causal */
    float softcap;      /* 0: none */
    float scale_mul;    /* scale = scale_mul / sqrt(hd): 1 gives scores of RMS 1/3 on these
                           inputs (uniform in [-1, 1)); larger makes the softmax peaky */
    int positions;      /* 0: the last M of n_kv (prefill), 1: random in [0, n_kv) */
    int64_t ctx_extra;  /* cache entries past n_kv (random values too) */
    bool q_strided;     /* q heads with gaps, base not 16-byte aligned; else q inside a qkv row */
} attn_case;

static double attn_tol(st_cuda_attn_path path, const attn_case *ac) {
    if (path != ST_CUDA_ATTN_PATH_FLASH) return TOL_ATTENTION;
    /* FLASH rounds q and the softmax weights P to f16 (unit roundoff u = 2^-11, RMS relative
     * error of one rounding ~u/sqrt(3) = 2.8e-4); K, V are f16 in the cache on both sides;
     * products and sums are f32. out = sum_t p_t v_t / sum_t p_t, so
     *  - P: each weight off by ~u/sqrt(3) relative -> the output by ~u/sqrt(3) relative
     *    (random-signed over the keys, against an output of the same random-sum size);
     *  - q: a score s_t = scale * sum_i q_i k_i moves by scale * sqrt(sum_i q_i^2 k_i^2) *
     *    u/sqrt(3) = scale_mul * (1/3) * u/sqrt(3) (E[q^2 k^2] = 1/9 here), and a score
     *    error ds moves the weight by ds relative -> the output by ~ds relative.
     * Together u/sqrt(3) * sqrt(1 + (scale_mul/3)^2): 3.0e-4 at scale_mul = 1. Tolerance 3x
     * that: 8.9e-4 at scale_mul 1, 2.4e-3 at 8. A real bug is far above it: one key too
     * many or too few in the mask moves the output by ~1/sqrt(n_visible) (>= 0.02 for the
     * depths here), a missing rescale of the accumulator by the change of the running max
     * (tens of percent), a wrong head or row mapping by O(1). */
    const double u = 1.0 / 2048.0, m = ac->scale_mul / 3.0;
    return 3.0 * u / sqrt(3.0) * sqrt(1.0 + m * m);
}

/* The poison of dual_poison (still in d->host) written again to the CUDA buffer only: the
 * CPU buffer keeps the reference that every path is compared with. */
static void attn_poison_gpu(dual *d) {
    st_error err = {0};
    if (g_gpu->iface->write(g_gpu, d->gpu, d->host, d->bytes, &err) != ST_OK) test_die("cuda write", &err);
}

static void test_attention_case(const attn_case *ac) {
    const int64_t hd = ac->hd, H = ac->H, Hkv = ac->Hkv, n_kv = ac->n_kv, M = ac->M;
    const int64_t n_ctx = n_kv + ac->ctx_extra;
    view vk, vv;
    const bool gapped = (n_kv % 2) == 1;
    dual dk = cache_new(ac->t, hd, Hkv, n_ctx, gapped, &vk), dv = cache_new(ac->t, hd, Hkv, n_ctx, gapped, &vv);
    view vq = ac->q_strided ? mkview(ST_TYPE_F32, hd, H, M, (size_t)(hd + 3) * 4, (size_t)((hd + 3) * H + 2) * 4, 4)
                            : mkview(ST_TYPE_F32, hd, H, M, (size_t)hd * 4, (size_t)(hd * (H + 2 * Hkv)) * 4, 0);
    view vy = mkview(ST_TYPE_F32, hd, H, M, (size_t)hd * 4, (size_t)(hd * H + 5) * 4, 4);
    dual dq = dual_new(view_bytes(&vq)), dy = dual_new(view_bytes(&vy));
    dual_random_f32(&dq);
    dual_poison(&dy);
    int32_t *pos = malloc((size_t)M * sizeof(int32_t));
    if (!pos) test_die("host malloc", NULL);
    for (int64_t m = 0; m < M; m++)
        pos[m] = ac->positions == 0 ? (int32_t)(n_kv - M + m) : rng_int((int32_t)n_kv);
    dual dp = ids_new(pos, M);
    free(pos);
    view vp = ids_view(M, 1);
    st_attn_params p = {.n_kv = n_kv,
                        .window = ac->window,
                        .scale = ac->scale_mul / sqrtf((float)hd),
                        .softcap = ac->softcap};
    st_error err = {0};
    st_tensor kc = on(&vk, dk.cpu), kg = on(&vk, dk.gpu), vc = on(&vv, dv.cpu), vg = on(&vv, dv.gpu);
    st_tensor qc = on(&vq, dq.cpu), qg = on(&vq, dq.gpu), yc = on(&vy, dy.cpu), yg = on(&vy, dy.gpu);
    st_tensor pc = on(&vp, dp.cpu), pg = on(&vp, dp.gpu);
    if (g_cpu->iface->attention(g_cpu, &yc, &qc, &kc, &vc, &pc, NULL, &p, &err) != ST_OK) test_die("cpu attention", &err);

    const st_cuda_attn_path chosen = st_cuda_attention_choose(g_gpu, &qg, &kg, &vg, &p);
    char base[112];
    snprintf(base, sizeof(base), "%s hd=%lld H=%lld/%lld n_kv=%lld M=%lld win=%d cap=%g x%g pos=%s q=%s", tname(ac->t),
             (long long)hd, (long long)H, (long long)Hkv, (long long)n_kv, (long long)M, ac->window, ac->softcap,
             ac->scale_mul, ac->positions ? "random" : "last", ac->q_strided ? "strided" : "qkv");
    for (int pi = ST_CUDA_ATTN_PATH_AUTO; pi <= ST_CUDA_ATTN_PATH_DECODE; pi++) {
        const st_cuda_attn_path path = (st_cuda_attn_path)pi;
        attn_poison_gpu(&dy);
        st_status s = st_cuda_attention_path(g_gpu, &yg, &qg, &kg, &vg, &pg, NULL, &p, path, &err);
        if (s == ST_ERROR_UNSUPPORTED && path != ST_CUDA_ATTN_PATH_AUTO) continue; /* shape not taken */
        if (s != ST_OK) test_die("cuda attention", &err);
        char *got = dual_fetch(&dy);
        const double tol = attn_tol(path == ST_CUDA_ATTN_PATH_AUTO ? chosen : path, ac);
        cmp_result r = compare_f32(&vy, dy.cpu, got, dy.bytes);
        char desc[160];
        if (path == ST_CUDA_ATTN_PATH_AUTO) snprintf(desc, sizeof(desc), "%s ->%s", base, st_cuda_attn_path_name(chosen));
        else snprintf(desc, sizeof(desc), "%s", base);
        /* record() keeps the op name's pointer: string literals only */
        const char *op_name = path == ST_CUDA_ATTN_PATH_AUTO    ? "attention"
                              : path == ST_CUDA_ATTN_PATH_EXACT ? "attention exact"
                              : path == ST_CUDA_ATTN_PATH_FLASH ? "attention flash"
                                                                : "attention decode";
        record(op_name, desc, &r, tol);

        /* the same call with a larger bound: the same bits. One token's warps kernel takes
         * bounds up to 64 or 128 keys (its round), the split kernel the rest, each with the
         * same bits for every bound it takes: the larger bound stays on n_kv's side of 64 and
         * of 128 (the whole cache past them) */
        const int64_t same_side = n_kv <= 64 ? 64 : n_kv <= 128 ? 128 : n_ctx;
        st_attn_params p_ctx = p;
        p_ctx.n_kv = n_ctx < same_side ? n_ctx : same_side;
        attn_poison_gpu(&dy);
        if (st_cuda_attention_path(g_gpu, &yg, &qg, &kg, &vg, &pg, NULL, &p_ctx, path, &err) != ST_OK)
            test_die("cuda attention (n_kv = n_ctx)", &err);
        char *got2 = dual_fetch(&dy);
        cmp_result rb = compare_bytes(got, got2, dy.bytes);
        snprintf(desc, sizeof(desc), "%s %s bound=%lld", st_cuda_attn_path_name(path), base, (long long)p_ctx.n_kv);
        record("attention larger bound bits", desc, &rb, TOL_EXACT);
        free(got2);
        free(got);
    }
    dual_free(&dk);
    dual_free(&dv);
    dual_free(&dq);
    dual_free(&dy);
    dual_free(&dp);
}

/* A recorded decode step keeps working after its scratch grew: split-KV attention of one
 * token recorded as a graph, then an eager call of more rows that needs a larger partials
 * buffer, then the graph replayed. The replay must give the recorded call's bits, and must
 * not touch freed memory (the memcheck stage). Run before any other attention, so that
 * the eager call is what grows the buffer. */
static void test_graph_outlives_growth(void) {
    const int64_t hd = 64, n_ctx = 1024, n_kv = 1000; /* past the warps kernel's bounds: splits */
    view vk, vv;
    dual dk = cache_new(ST_TYPE_F16, hd, 8, n_ctx, false, &vk), dv = cache_new(ST_TYPE_F16, hd, 8, n_ctx, false, &vv);
    st_tensor kg = on(&vk, dk.gpu), vg = on(&vv, dv.gpu);
    st_attn_params p = {.n_kv = n_kv, .scale = 0.125f};
    /* one token, 32 heads over 8 kv heads (16 splits: partials of ~0.13 MiB); then 3 tokens
     * of 64 heads over 4 (group 16, 48 rows a block, 16 splits: ~0.8 MiB) */
    view vq1 = mkpacked(ST_TYPE_F32, hd, 32, 1), vy1 = mkpacked(ST_TYPE_F32, hd, 32, 1);
    view vq4 = mkpacked(ST_TYPE_F32, hd, 64, 3), vy4 = mkpacked(ST_TYPE_F32, hd, 64, 3);
    dual dq1 = dual_new(view_bytes(&vq1)), dy1 = dual_new(view_bytes(&vy1));
    dual dq4 = dual_new(view_bytes(&vq4)), dy4 = dual_new(view_bytes(&vy4));
    dual_random_f32(&dq1);
    dual_random_f32(&dq4);
    const int32_t pos1 = (int32_t)n_kv - 1, pos4[3] = {997, 998, 999};
    dual dp1 = ids_new(&pos1, 1), dp4 = ids_new(pos4, 3);
    view vp1 = ids_view(1, 1), vp4 = ids_view(3, 1);
    st_tensor q1 = on(&vq1, dq1.gpu), y1 = on(&vy1, dy1.gpu), p1 = on(&vp1, dp1.gpu);
    st_tensor q4 = on(&vq4, dq4.gpu), y4 = on(&vy4, dy4.gpu), p4 = on(&vp4, dp4.gpu);
    st_tensor k4 = kg, v4 = vg; /* the 3-token call reads the first 4 kv heads */
    k4.ne[1] = v4.ne[1] = 4;
    st_error err = {0};
    if (st_cuda_attention_choose(g_gpu, &q1, &kg, &vg, &p) != ST_CUDA_ATTN_PATH_DECODE ||
        st_cuda_attention_choose(g_gpu, &q4, &k4, &v4, &p) != ST_CUDA_ATTN_PATH_DECODE)
        test_die("graph_outlives_growth: the split-KV path does not take these shapes", NULL);

    dual_poison(&dy1);
    if (g_gpu->iface->attention(g_gpu, &y1, &q1, &kg, &vg, &p1, NULL, &p, &err) != ST_OK) test_die("cuda attention", &err);
    char *ref = dual_fetch(&dy1);
    st_cuda_recording *g = NULL;
    if (st_cuda_record_begin(g_gpu, &err) != ST_OK) test_die("cuda record_begin", &err);
    if (g_gpu->iface->attention(g_gpu, &y1, &q1, &kg, &vg, &p1, NULL, &p, &err) != ST_OK)
        test_die("cuda attention (recording)", &err);
    if (st_cuda_record_end(g_gpu, &g, &err) != ST_OK) test_die("cuda record_end", &err);
    if (g_gpu->iface->attention(g_gpu, &y4, &q4, &k4, &v4, &p4, NULL, &p, &err) != ST_OK) /* grows the partials */
        test_die("cuda attention (3 tokens)", &err);
    dual_poison(&dy1);
    if (st_cuda_record_launch(g_gpu, g, &err) != ST_OK) test_die("cuda record_launch", &err);
    char *replayed = dual_fetch(&dy1);
    cmp_result r = compare_bytes(ref, replayed, dy1.bytes);
    record("graph after growth", "split-KV attention recorded, partials grown, replayed", &r, TOL_EXACT);
    st_cuda_record_free(g_gpu, g);
    free(ref), free(replayed);
    dual_free(&dk), dual_free(&dv), dual_free(&dq1), dual_free(&dy1), dual_free(&dq4), dual_free(&dy4);
    dual_free(&dp1), dual_free(&dp4);
}

/* ---- rope_attention (st_fused_rope_attention) -------------------------------------------- */

/* One decode token: rope_store then attention over a cache holding `pos` earlier random
 * entries. The CUDA op (the rope folded into the decode kernel when it takes the shape)
 * against the CUDA composite bitwise (output and both caches: the same arithmetic), and
 * against the CPU composite by the attention tolerance. n_kv: pos + 1, or the whole
 * cache (as a recorded decode step passes it). */
static void test_rope_attention(st_type ct, int64_t hd, int64_t Hq, int64_t Hk, int32_t n_rot, st_rope_mode mode,
                                int norms, int32_t pos, int32_t window, bool n_kv_ctx) {
    const int64_t n_ctx = 800;
    st_rope_params rp = st_rope_params_default(mode, n_rot, 10000.0f);
    rope_operands o;
    rope_operands_init(&o, ct, hd, Hq, Hk, 1, n_ctx, 0, norms, &pos, &rp);
    view vy = mkview(ST_TYPE_F32, hd, Hq, 1, (size_t)hd * 4, (size_t)(hd * Hq) * 4, 0);
    dual dy = dual_new(view_bytes(&vy)), dy2 = dual_new(view_bytes(&vy));
    dual_poison(&dy);
    dual_poison(&dy2);
    st_tensor yc = on(&vy, dy.cpu), yg = on(&vy, dy.gpu), yg2 = on(&vy, dy2.gpu);
    st_attn_params ap = {.n_kv = n_kv_ctx ? n_ctx : pos + 1, .window = window, .scale = 1.0f / sqrtf((float)hd)};
    st_fused_rope_attention oc = {.rs = o.op[0], .out = &yc, .attn = &ap};
    st_fused_rope_attention og = {.rs = o.op[1], .out = &yg, .attn = &ap};
    st_fused_rope_attention og2 = {.rs = o.op[2], .out = &yg2, .attn = &ap};
    st_error err = {0};
    if (st_fused_rope_attention_composite(g_cpu, &oc, &err) != ST_OK) test_die("cpu rope_attention", &err);
    if (st_cuda_rope_attention(g_gpu, &og, &err) != ST_OK) test_die("cuda rope_attention", &err);
    if (st_fused_rope_attention_composite(g_gpu, &og2, &err) != ST_OK) test_die("cuda rope_attention composite", &err);
    char desc[144];
    snprintf(desc, sizeof(desc), "%s cache hd=%lld Hq=%lld Hk=%lld n_rot=%d %s%s pos=%d win=%d n_kv=%s%s", tname(ct),
             (long long)hd, (long long)Hq, (long long)Hk, n_rot, mode == ST_ROPE_MODE_NORM ? "norm" : "neox",
             qk_norm_desc[norms], pos, window, n_kv_ctx ? "ctx" : "pos+1",
             st_cuda_attn_decode_rope_supported(g_gpu, &og) ? " (fused)" : " (composite)");
    char *y = dual_fetch(&dy), *y2 = dual_fetch(&dy2);
    cmp_result r = compare_f32(&vy, dy.cpu, y, dy.bytes);
    record("rope_attention", desc, &r, TOL_ATTENTION);
    cmp_result rb = compare_bytes(y2, y, dy.bytes);
    record("rope_attention fused=plain", desc, &rb, TOL_EXACT);
    if (st_cuda_attn_decode_rope_supported(g_gpu, &og) && n_rot >= 2) {
        /* the rotations from rope_table instead of formed in the kernel: the same bits (the
         * fused op leaves q and k as they came and stores the same k, v again) */
        view vt = mkpacked(ST_TYPE_F32, n_rot, 1, 1);
        dual dt = dual_new(view_bytes(&vt));
        st_tensor tg = on(&vt, dt.gpu);
        if (st_cuda_rope_table(g_gpu, &tg, og.rs.positions, og.rs.rope, &err) != ST_OK)
            test_die("cuda rope_table", &err);
        st_fused_rope_attention og3 = og;
        og3.rs.rope_cs = &tg;
        dual_poison(&dy);
        if (st_cuda_rope_attention(g_gpu, &og3, &err) != ST_OK) test_die("cuda rope_attention (table)", &err);
        char *y3 = dual_fetch(&dy);
        cmp_result rt = compare_bytes(y, y3, dy.bytes);
        record("rope_attention table=formed", desc, &rt, TOL_EXACT);
        free(y3);
        dual_free(&dt);
    }
    free(y), free(y2);
    rope_operands_check_caches(&o, "rope_attention fused=plain", "rope_attention");
    dual_free(&dy), dual_free(&dy2);
    rope_operands_free(&o);
}

/* positions: 0 the last M of n_kv (prefill), 1 random in [0, n_kv) */
static void test_attention(st_type t, int64_t hd, int64_t H, int64_t Hkv, int64_t n_kv, int64_t M, int32_t window,
                           float softcap, int positions) {
    attn_case ac = {.t = t, .hd = hd, .H = H, .Hkv = Hkv, .n_kv = n_kv, .M = M, .window = window,
                    .softcap = softcap, .scale_mul = 1.0f, .positions = positions, .ctx_extra = 3, .q_strided = false};
    test_attention_case(&ac);
}

/* Prefill shapes: head_dim 64/128/256, GQA groups 1/2/4/8, M from 1 to past two 64-row
 * tiles (and not a multiple of them), n_kv = M (a prompt from position 0) or after a prefix
 * (not a multiple of the 64/32-key tiles), windows shorter than M, random positions,
 * soft-capping, peaky softmax (scale x4, x8), strided q. */
static void test_attention_prefill(void) {
    const int64_t Ms[] = {1, 17, 64, 100, 130, 257};
    const int64_t hds[] = {64, 128, 256};
    const int64_t groups[] = {1, 2, 4, 8};
    int k = 0;
    for (int hi = 0; hi < 3; hi++)
        for (int gi = 0; gi < 4; gi++)
            for (int v = 0; v < 4; v++, k++) {
                const int64_t Hkv = groups[gi] == 8 ? 1 : 2, M = Ms[(k + hi) % 6];
                attn_case ac = {.t = ST_TYPE_F16,
                                .hd = hds[hi],
                                .H = Hkv * groups[gi],
                                .Hkv = Hkv,
                                .n_kv = M + (v == 0 ? 0 : 13 + 29 * v),
                                .M = M,
                                .window = v == 1 ? 7 : v == 2 ? 100 : 0,
                                .softcap = v == 3 ? 0.5f : 0.0f,
                                .scale_mul = v == 2 ? 4.0f : v == 3 ? 8.0f : 1.0f,
                                .positions = v == 2,
                                .ctx_extra = 40,
                                .q_strided = (k % 2) == 1};
                test_attention_case(&ac);
                if (v == 0 || v == 3) {
                    ac.t = ST_TYPE_F32;
                    test_attention_case(&ac);
                }
            }
    /* model shapes: llama-3.2-1b pp512; qwen3-8b after a prefix; gemma3 sliding layer */
    attn_case llama = {.t = ST_TYPE_F16, .hd = 64, .H = 32, .Hkv = 8, .n_kv = 512, .M = 512, .window = 0,
                       .softcap = 0.0f, .scale_mul = 1.0f, .positions = 0, .ctx_extra = 64, .q_strided = false};
    test_attention_case(&llama);
    attn_case qwen = {.t = ST_TYPE_F16, .hd = 128, .H = 32, .Hkv = 8, .n_kv = 1100, .M = 200, .window = 0,
                      .softcap = 0.0f, .scale_mul = 1.0f, .positions = 0, .ctx_extra = 100, .q_strided = true};
    test_attention_case(&qwen);
    attn_case gemma = {.t = ST_TYPE_F16, .hd = 256, .H = 4, .Hkv = 1, .n_kv = 700, .M = 600, .window = 512,
                       .softcap = 0.0f, .scale_mul = 1.0f, .positions = 0, .ctx_extra = 10, .q_strided = false};
    test_attention_case(&gemma);
}

/* The tensor-core prefill with each block's keys split over a fixed number of blocks
 * (tuning flash_split; the default's rule splits most of test_attention_prefill's small
 * grids already): head_dim 64/128/256, a prompt after a prefix, a window over random
 * positions with a peaky softmax, soft-capping from position 0, GQA. With 16 splits many
 * blocks walk no key (short ranges): their partials must not count. */
static void run_attention_flash_splits(void) {
    const int64_t hds[] = {64, 128, 256};
    for (int hi = 0; hi < 3; hi++) {
        attn_case ac = {.t = ST_TYPE_F16, .hd = hds[hi], .H = 8, .Hkv = 2, .n_kv = 300, .M = 130, .window = 0,
                        .softcap = 0.0f, .scale_mul = 1.0f, .positions = 0, .ctx_extra = 20, .q_strided = false};
        test_attention_case(&ac);
        ac.window = 100, ac.positions = 1, ac.scale_mul = 4.0f, ac.q_strided = true;
        test_attention_case(&ac);
        ac.n_kv = ac.M = 77, ac.window = 0, ac.positions = 0, ac.softcap = 0.5f, ac.scale_mul = 8.0f, ac.H = 6;
        test_attention_case(&ac);
    }
}

/* Decode shapes: M = 1..4 tokens at depths 1 .. ~5000 with a cache much larger than n_kv
 * (ctx_extra; every path is also run with n_kv = n_ctx), F16 and F32 caches, windows
 * shorter than the depth, soft-capping. n_kv 1, 64, 100 and 128: one token over an F16
 * cache the warps kernel, else a grid of one split (no combine kernel; 100 and 128 where a
 * chunk is 64 keys, two chunks), each against a larger bound on its side bit for bit; 150:
 * three splits. one_token_f16: only the cases of one token over an F16 cache. */
static void test_attention_decode(bool one_token_f16) {
    const int64_t depths[] = {1, 64, 100, 128, 150, 1000, 4999};
    const int64_t hds[] = {64, 128, 256};
    const int64_t groups[] = {1, 2, 4, 8};
    int k = 0;
    for (int hi = 0; hi < 3; hi++)
        for (int gi = 0; gi < 4; gi++)
            for (int di = 0; di < 7; di++, k++) {
                const int64_t Hkv = groups[gi] == 8 ? 1 : 2 + (k % 3 == 0 ? 2 : 0), n_kv = depths[di];
                int64_t M = 1 + k % 4;
                if (M > n_kv) M = n_kv;
                attn_case ac = {.t = k % 3 == 1 ? ST_TYPE_F32 : ST_TYPE_F16,
                                .hd = hds[hi],
                                .H = Hkv * groups[gi],
                                .Hkv = Hkv,
                                .n_kv = n_kv,
                                .M = M,
                                .window = di >= 5 && gi % 2 == 1 ? 300 : 0,
                                .softcap = gi == 3 ? 0.5f : 0.0f,
                                .scale_mul = di == 6 ? 4.0f : 1.0f,
                                .positions = k % 5 == 4,
                                .ctx_extra = 777,
                                .q_strided = (k % 2) == 0};
                if (one_token_f16 && (ac.M != 1 || ac.t != ST_TYPE_F16)) continue;
                test_attention_case(&ac);
            }
}

/* The backend's choice of where a residual add prepares the next product's norm
 * (st_cuda_prepared_norm_pays), on the seed models' q/k/v and gate/up products (F16, one
 * token), under the default tuning. On a 132-SM H200, with the warp-a-row decode kernel
 * the rule picks llama-3.2-1b's gate/up only, neither of qwen3-1.7b's, and qwen3-8b's
 * q/k/v only, the choices that measured fastest there. The block-a-row kernel forms its
 * norm itself, so a product it takes (by default every q/k/v here) is never prepared.
 * The rule reads shapes, types and alignment, so the tensors point at no memory. Other
 * devices: skipped (the table is the H200's). */
static void test_prepared_norm_rule(void) {
    st_device_info info;
    st_error err = {0};
    if (st_device_query(ST_BACKEND_CUDA, 0, &info, &err) != ST_OK) test_die("device query", &err);
    if (info.multiprocessors != 132) {
        printf("skip prepared-norm rule: %d SMs (the table is for 132)\n", info.multiprocessors);
        return;
    }
    const int rowblock = st_cuda_tuning_default(9).rowblock;
    static const struct {
        const char *name;
        int64_t K, n[3];
        int n_w;
        bool want; /* with the decode kernel */
    } cases[] = {
        {"llama-3.2-1b q/k/v", 2048, {2048, 512, 512}, 3, false},
        {"llama-3.2-1b gate/up", 2048, {8192, 8192}, 2, true},
        {"qwen3-1.7b q/k/v", 2048, {2048, 1024, 1024}, 3, false},
        {"qwen3-1.7b gate/up", 2048, {6144, 6144}, 2, false},
        {"qwen3-8b q/k/v", 4096, {4096, 1024, 1024}, 3, true},
        {"qwen3-8b gate/up", 4096, {12288, 12288}, 2, false},
    };
    char *const nowhere = (char *)(uintptr_t)(1u << 20); /* 16-byte aligned, never read */
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const int64_t K = cases[i].K;
        const bool glu = cases[i].n_w == 2;
        view vx = mkpacked(ST_TYPE_F32, K, 1, 1), vn = mkpacked(ST_TYPE_F32, K, 1, 1);
        st_tensor x = on(&vx, nowhere), h = on(&vx, nowhere), nw = on(&vn, nowhere), w[3], y[3], out;
        st_fused_mul_mat op = {.n_w = cases[i].n_w, .x = &x, .norm_w = &nw, .eps = 1e-6f, .h = &h};
        for (int j = 0; j < cases[i].n_w; j++) {
            view vw = mkpacked(ST_TYPE_F16, K, cases[i].n[j], 1), vy = mkpacked(ST_TYPE_F32, cases[i].n[j], 1, 1);
            w[j] = on(&vw, nowhere), y[j] = on(&vy, nowhere);
            op.w[j] = &w[j], op.y[j] = &y[j];
        }
        if (glu) {
            view vo = mkpacked(ST_TYPE_F32, cases[i].n[0], 1, 1);
            out = on(&vo, nowhere);
            op.epilogue = ST_FUSED_EPILOGUE_SWIGLU, op.out = &out;
        }
        const bool got = st_cuda_prepared_norm_pays(g_gpu, &op);
        /* a product the block-a-row kernel may take is never prepared (qwen3-8b's gate/up,
         * which it cannot take, is not prepared with the decode kernel either); its kinds by
         * default (-1): stores and residual adds, gated pairs where K is no multiple of 2,048 */
        const int kinds = rowblock >= 0 ? rowblock
                                        : CUDA_ROWBLOCK_STORE | CUDA_ROWBLOCK_ADD | (K % 2048 ? CUDA_ROWBLOCK_GLU : 0);
        const bool want = cases[i].want && !(kinds & (glu ? CUDA_ROWBLOCK_GLU : CUDA_ROWBLOCK_STORE));
        const cmp_result r = {.bad = got != want};
        char desc[128];
        snprintf(desc, sizeof(desc), "%s: %s (want %s)", cases[i].name, got ? "prepared" : "in the loop",
                 want ? "prepared" : "in the loop");
        record("prepared norm rule", desc, &r, 0.0);
    }
}

/* ---- routing and combination ---------------------------------------------------------- */

/* ties: logits of four values only, so that picks are decided by the lower index. */
static void test_topk(int64_t E, int32_t k, bool softmax_first, bool normalize, int64_t M, bool ties) {
    view vl = mkview(ST_TYPE_F32, E, M, 1, (size_t)(E + 1) * 4, (size_t)(E + 1) * 4 * (size_t)M, 0);
    view vi = ids_view(k, M);
    view vw = mkview(ST_TYPE_F32, k, M, 1, (size_t)(k + 2) * 4, (size_t)(k + 2) * 4 * (size_t)M, 0);
    dual dl = dual_new(view_bytes(&vl)), di = dual_new(view_bytes(&vi)), dw = dual_new(view_bytes(&vw));
    dual_random_f32(&dl);
    if (ties) {
        for (size_t i = 0; i + 4 <= dl.bytes; i += 4) {
            const float f = 0.5f * (float)rng_int(4);
            memcpy(dl.host + i, &f, 4);
        }
        dual_upload(&dl);
    }
    memset(di.host, 0xff, di.bytes);
    dual_upload(&di);
    dual_poison(&dw);
    st_tensor lc = on(&vl, dl.cpu), lg = on(&vl, dl.gpu), ic = on(&vi, di.cpu), ig = on(&vi, di.gpu);
    st_tensor wc = on(&vw, dw.cpu), wg = on(&vw, dw.gpu);
    g_cpu->iface->topk_route(g_cpu, &ic, &wc, &lc, k, softmax_first, normalize);
    g_gpu->iface->topk_route(g_gpu, &ig, &wg, &lg, k, softmax_first, normalize);
    char *got_w = dual_fetch(&dw), *got_i = dual_fetch(&di);
    cmp_result r = compare_f32(&vw, dw.cpu, got_w, dw.bytes);
    cmp_result ri = compare_bytes(di.cpu, got_i, di.bytes);
    r.bad += ri.bad;
    char desc[128];
    snprintf(desc, sizeof(desc), "E=%lld k=%d M=%lld softmax_first=%d normalize=%d%s", (long long)E, k, (long long)M,
             softmax_first, normalize, ties ? " ties" : "");
    record("topk_route", desc, &r, TOL_ELEMENTWISE);
    free(got_w);
    free(got_i);
    dual_free(&dl);
    dual_free(&di);
    dual_free(&dw);
}

/* A router's product and its routing in one launch (st_fused_moe_route) against the CPU
 * composite: logits and (normed: the FFN norm first) h by the GEMV tolerance, the picks
 * exactly (random logits: no near-ties). The weights against the CPU's weights of the
 * GPU's own logits and picks, elementwise: a softmax of random logits of size ~sqrt(K)
 * turns their summation-order differences into relative errors of the same absolute size,
 * which is the product's error, checked above, not the routing's. The router's rows at a
 * padded stride when pad; run twice, so that the second launch finds the blocks' counts
 * reset. */
static void test_moe_route_fused(st_type t, int64_t K, int64_t E, int32_t k, int64_t M, bool softmax_first,
                                 bool normalize, bool normed, size_t pad) {
    weight w = weight_new(t, K, E, 1, pad);
    view vx = mkpacked(ST_TYPE_F32, K, M, 1), vl = mkpacked(ST_TYPE_F32, E, M, 1), vn = mkpacked(ST_TYPE_F32, K, 1, 1);
    view vi = ids_view(k, M), vw = mkpacked(ST_TYPE_F32, k, M, 1);
    dual dx = dual_new(view_bytes(&vx)), dl = dual_new(view_bytes(&vl)), di = dual_new(view_bytes(&vi));
    dual dw = dual_new(view_bytes(&vw)), dn = dual_new(view_bytes(&vn)), dh = dual_new(view_bytes(&vx));
    dual_random_f32(&dx);
    dual_random_f32(&dn);
    st_tensor wt[2], xt[2], lt[2], it[2], wts[2], nt[2], ht[2];
    st_fused_moe_route op[2];
    for (int b = 0; b < 2; b++) {
        wt[b] = on(&w.v, b ? w.d.gpu : w.d.cpu), xt[b] = on(&vx, b ? dx.gpu : dx.cpu);
        lt[b] = on(&vl, b ? dl.gpu : dl.cpu), it[b] = on(&vi, b ? di.gpu : di.cpu), wts[b] = on(&vw, b ? dw.gpu : dw.cpu);
        nt[b] = on(&vn, b ? dn.gpu : dn.cpu), ht[b] = on(&vx, b ? dh.gpu : dh.cpu);
        op[b] = (st_fused_moe_route){.router = &wt[b], .x = &xt[b], .logits = &lt[b], .ids = &it[b], .wts = &wts[b],
                                     .k = k, .softmax_first = softmax_first, .normalize = normalize};
        if (normed) op[b].norm_w = &nt[b], op[b].eps = 1e-5f, op[b].h = &ht[b];
    }
    st_error err = {0};
    dual_poison(&dl), dual_poison(&dw), dual_poison(&dh);
    memset(di.host, 0xff, di.bytes);
    dual_upload(&di);
    if (st_fused_moe_route_composite(g_cpu, &op[0], &err) != ST_OK) test_die("cpu moe route", &err);
    char desc[160];
    snprintf(desc, sizeof(desc), "%s K=%lld E=%lld k=%d M=%lld softmax_first=%d normalize=%d%s pad=%zu", tname(t),
             (long long)K, (long long)E, k, (long long)M, softmax_first, normalize, normed ? " normed" : "", pad);
    for (int run = 0; run < 2; run++) {
        const char *name = run ? "moe route fused (again)" : "moe route fused";
        /* the GPU's outputs poisoned (0xff: NaN, and id -1) before each run */
        dual *outs[4] = {&dl, &dw, &di, &dh};
        for (int o = 0; o < 4; o++) {
            memset(outs[o]->host, 0xff, outs[o]->bytes);
            if (g_gpu->iface->write(g_gpu, outs[o]->gpu, outs[o]->host, outs[o]->bytes, &err) != ST_OK)
                test_die("cuda write", &err);
        }
        if (st_cuda_moe_route_fused(g_gpu, &op[1], &err) != ST_OK) test_die("cuda moe route", &err);
        char *gl = dual_fetch(&dl), *gw = dual_fetch(&dw), *gi = dual_fetch(&di), *gh = dual_fetch(&dh);
        cmp_result r = compare_f32(&vl, dl.cpu, gl, dl.bytes);
        record(name, desc, &r, TOL_F32_SUM);
        float *want_w = malloc(dw.bytes);
        if (!want_w) test_die("host malloc", NULL);
        for (int64_t m = 0; m < M; m++) {
            const int32_t *id = (const int32_t *)gi + m * k;
            bool ids_in = true; /* (an id out of range fails the picks' comparison below) */
            for (int32_t j = 0; j < k; j++) ids_in = ids_in && id[j] >= 0 && id[j] < E;
            if (ids_in) st_moe_route_weights((const float *)gl + m * E, E, k, softmax_first, normalize, id, want_w + m * k);
            else memset(want_w + m * k, 0, (size_t)k * sizeof(float));
        }
        r = compare_f32(&vw, (const char *)want_w, gw, dw.bytes);
        cmp_result ri = compare_bytes(di.cpu, gi, di.bytes);
        r.bad += ri.bad;
        record(name, desc, &r, TOL_ELEMENTWISE);
        free(want_w);
        if (normed) {
            r = compare_f32(&vx, dh.cpu, gh, dh.bytes);
            record(name, desc, &r, TOL_F32_SUM);
        }
        free(gl), free(gw), free(gi), free(gh);
    }
    dual_free(&dx), dual_free(&dl), dual_free(&di), dual_free(&dw), dual_free(&dn), dual_free(&dh);
    weight_free(&w);
}

static void test_moe_combine(int64_t D, int64_t k, int64_t M) {
    size_t snb1 = (size_t)(D + 1) * 4;
    view vs = mkview(ST_TYPE_F32, D, k, M, snb1, snb1 * (size_t)k + 8, 0);
    view vw = mkview(ST_TYPE_F32, k, M, 1, (size_t)(k + 1) * 4, (size_t)(k + 1) * 4 * (size_t)M, 4);
    view vy = mkview(ST_TYPE_F32, D, M, 1, (size_t)(D + 2) * 4, (size_t)(D + 2) * 4 * (size_t)M, 0);
    dual ds = dual_new(view_bytes(&vs)), dw = dual_new(view_bytes(&vw)), dy = dual_new(view_bytes(&vy));
    dual_random_f32(&ds);
    dual_random_f32(&dw);
    dual_poison(&dy);
    st_tensor sc = on(&vs, ds.cpu), sg = on(&vs, ds.gpu), wc = on(&vw, dw.cpu), wg = on(&vw, dw.gpu);
    st_tensor yc = on(&vy, dy.cpu), yg = on(&vy, dy.gpu);
    g_cpu->iface->moe_combine(g_cpu, &yc, &sc, &wc);
    g_gpu->iface->moe_combine(g_gpu, &yg, &sg, &wg);
    char *got = dual_fetch(&dy);
    cmp_result r = compare_f32(&vy, dy.cpu, got, dy.bytes);
    char desc[128];
    snprintf(desc, sizeof(desc), "D=%lld k=%lld M=%lld", (long long)D, (long long)k, (long long)M);
    record("moe_combine", desc, &r, TOL_ELEMENTWISE);
    free(got);
    dual_free(&ds);
    dual_free(&dw);
    dual_free(&dy);
}

/* ---- data errors: reported by the next synchronize, then cleared ---------------------- */

static void expect_data_error(const char *what) {
    st_error err = {0};
    st_status s1 = g_gpu->iface->synchronize(g_gpu, &err);
    st_error err2 = {0};
    st_status s2 = g_gpu->iface->synchronize(g_gpu, &err2);
    cmp_result r = {.bad = (s1 != ST_ERROR_INVALID) + (s2 != ST_OK)};
    char desc[160];
    snprintf(desc, sizeof(desc), "%s -> %s \"%.60s\"", what, st_status_name(s1), err.message);
    record("data errors", desc, &r, TOL_EXACT);
}

static void test_errors(void) {
    st_error err = {0};
    /* get_rows with an id == V */
    weight w = weight_new(ST_TYPE_F16, 16, 10, 1, 0);
    int32_t ids[2] = {3, 10};
    dual di = ids_new(ids, 2);
    view vi = ids_view(2, 1), vy = mkpacked(ST_TYPE_F32, 16, 2, 1);
    dual dy = dual_new(view_bytes(&vy));
    st_tensor wg = on(&w.v, w.d.gpu), ig = on(&vi, di.gpu), yg = on(&vy, dy.gpu);
    if (g_gpu->iface->get_rows(g_gpu, &yg, &wg, &ig, &err) != ST_OK) test_die("cuda get_rows", &err);
    expect_data_error("get_rows id 10 of V=10");
    weight_free(&w);
    dual_free(&dy);
    dual_free(&di);

    /* mul_mat_id with expert id -1 */
    w = weight_new(ST_TYPE_BF16, 16, 8, 4, 0);
    int32_t eids[2] = {1, -1};
    di = ids_new(eids, 2);
    vi = ids_view(2, 1);
    view vx = mkpacked(ST_TYPE_F32, 16, 1, 1);
    vy = mkpacked(ST_TYPE_F32, 8, 2, 1);
    dual dx = dual_new(view_bytes(&vx));
    dy = dual_new(view_bytes(&vy));
    dual_random_f32(&dx);
    st_tensor xg = on(&vx, dx.gpu);
    wg = on(&w.v, w.d.gpu);
    ig = on(&vi, di.gpu);
    yg = on(&vy, dy.gpu);
    if (g_gpu->iface->mul_mat_id(g_gpu, &yg, &wg, &xg, &ig, &err) != ST_OK) test_die("cuda mul_mat_id", &err);
    expect_data_error("mul_mat_id expert -1 of E=4");
    weight_free(&w);
    dual_free(&dx);
    dual_free(&dy);
    dual_free(&di);

    /* mul_mat_id of a prompt (the grouped path reads the ids on the host): the op itself
     * returns the CPU backend's error, and nothing is left for the next synchronize */
    {
        weight wm = weight_new(ST_TYPE_F16, 16, 8, 4, 0);
        int32_t pids[16];
        for (int i = 0; i < 16; i++) pids[i] = i % 4;
        pids[13] = 4;
        dual dpi = ids_new(pids, 16);
        view vpi = ids_view(2, 8), vpx = mkpacked(ST_TYPE_F32, 16, 8, 1), vpy = mkpacked(ST_TYPE_F32, 8, 2, 8);
        dual dpx = dual_new(view_bytes(&vpx)), dpy = dual_new(view_bytes(&vpy));
        dual_random_f32(&dpx);
        st_tensor pwg = on(&wm.v, wm.d.gpu), pxg = on(&vpx, dpx.gpu), pyg = on(&vpy, dpy.gpu), pig = on(&vpi, dpi.gpu);
        st_error e1 = {0}, e2 = {0};
        st_status s1 = g_gpu->iface->mul_mat_id(g_gpu, &pyg, &pwg, &pxg, &pig, &e1);
        st_status s2 = g_gpu->iface->synchronize(g_gpu, &e2);
        cmp_result r = {.bad = (s1 != ST_ERROR_INVALID) + (strstr(e1.message, "expert id 4") == NULL) + (s2 != ST_OK)};
        char desc[160];
        snprintf(desc, sizeof(desc), "mul_mat_id M=8 expert 4 of E=4 -> %s \"%.60s\"", st_status_name(s1), e1.message);
        record("data errors", desc, &r, TOL_EXACT);
        weight_free(&wm);
        dual_free(&dpx);
        dual_free(&dpy);
        dual_free(&dpi);
    }

    /* kv_store at position n_ctx */
    view vc;
    dual dc = cache_new(ST_TYPE_F16, 16, 2, 8, false, &vc);
    vx = mkpacked(ST_TYPE_F32, 16, 2, 1);
    dx = dual_new(view_bytes(&vx));
    dual_random_f32(&dx);
    int32_t pos[1] = {8};
    dual dp = ids_new(pos, 1);
    view vp = ids_view(1, 1);
    st_tensor cg = on(&vc, dc.gpu), pg = on(&vp, dp.gpu);
    xg = on(&vx, dx.gpu);
    if (g_gpu->iface->kv_store(g_gpu, &cg, &xg, &pg, &err) != ST_OK) test_die("cuda kv_store", &err);
    expect_data_error("kv_store position 8 of n_ctx=8");
    dual_free(&dc);
    dual_free(&dx);
    dual_free(&dp);
}

/* One token whose slots 2 and 5 hold the expert ids E and -1 (a shape the block-a-row
 * kernels take; under either tuning): each fused op leaves the data error for the next
 * synchronize and the bad slots out, reading nothing outside the experts. The unit: the
 * bad slots' rows not written (still the poison), the others the CPU's with valid ids in
 * the bad slots; down, over that unit (NaN in the bad slots' rows): the CPU's with the bad
 * slots' weights 0 (the terms left out). */
static void test_moe_fused_bad_ids(st_type t, bool residual) {
    const int64_t K = 2048, F = 256, D = 512, E = 8, n_used = 8;
    moe_experts ex = moe_experts_new(t, K, F, D, E, 0);
    int32_t good[8], bad[8];
    for (int j = 0; j < 8; j++) good[j] = bad[j] = (int32_t)((3 * j + 1) % 8); /* distinct */
    bad[2] = (int32_t)E, bad[5] = -1;
    dual di_good = ids_new(good, n_used), di_bad = ids_new(bad, n_used);
    view vi = ids_view(n_used, 1), vh = mkpacked(ST_TYPE_F32, K, 1, 1), vw = mkpacked(ST_TYPE_F32, n_used, 1, 1);
    const size_t fnb1 = (size_t)(F + 4) * 4;
    view vf = mkview(ST_TYPE_F32, F, n_used, 1, fnb1, fnb1 * (size_t)n_used, 0);
    view vd = mkpacked(ST_TYPE_F32, D, n_used, 1), vo = mkpacked(ST_TYPE_F32, D, 1, 1);
    dual dh = dual_new(view_bytes(&vh)), dw = dual_new(view_bytes(&vw)), dw_left = dual_new(view_bytes(&vw));
    dual_random_f32(&dh);
    dual_random_f32(&dw);
    memcpy(dw_left.host, dw.host, dw.bytes);
    const float zero = 0.0f;
    memcpy(dw_left.host + 2 * 4, &zero, 4), memcpy(dw_left.host + 5 * 4, &zero, 4);
    dual_upload(&dw_left);
    dual dg = dual_new(view_bytes(&vf)), du = dual_new(view_bytes(&vf)), dy = dual_new(view_bytes(&vd));
    dual dout = dual_new(view_bytes(&vo)), dres = dual_new(view_bytes(&vo));
    dual_poison(&du), dual_poison(&dout), dual_random_f32(&dres);
    /* the CPU with valid ids and the bad slots' weights 0; the GPU with the bad ids */
    st_tensor tg[2], tu[2], ty[2], tout[2], tres[2], th[2], tw[2], ti[2], twg[2], twu[2], twd[2];
    st_fused_moe glu[2], down[2];
    for (int b = 0; b < 2; b++) {
        th[b] = on(&vh, b ? dh.gpu : dh.cpu), tw[b] = on(&vw, b ? dw.gpu : dw_left.cpu);
        ti[b] = on(&vi, b ? di_bad.gpu : di_good.cpu);
        twg[b] = on(&ex.g.v, b ? ex.g.d.gpu : ex.g.d.cpu), twu[b] = on(&ex.u.v, b ? ex.u.d.gpu : ex.u.d.cpu);
        twd[b] = on(&ex.d.v, b ? ex.d.d.gpu : ex.d.d.cpu);
        tg[b] = on(&vf, b ? dg.gpu : dg.cpu), tu[b] = on(&vf, b ? du.gpu : du.cpu), ty[b] = on(&vd, b ? dy.gpu : dy.cpu);
        tout[b] = on(&vo, b ? dout.gpu : dout.cpu), tres[b] = on(&vo, b ? dres.gpu : dres.cpu);
        glu[b] = (st_fused_moe){.kind = ST_FUSED_MOE_GLU, .w = {&twg[b], &twu[b]}, .y = {&tg[b], &tu[b]}, .x = &th[b],
                                .ids = &ti[b], .out = &tu[b]};
        down[b] = (st_fused_moe){.kind = ST_FUSED_MOE_DOWN, .w = {&twd[b]}, .y = {&ty[b]}, .x = &tu[b], .ids = &ti[b],
                                 .wts = &tw[b], .out = &tout[b], .residual = residual ? &tres[b] : NULL};
    }
    st_error err = {0};
    if (st_fused_moe_composite(g_cpu, &glu[0], &err) != ST_OK || st_fused_moe_composite(g_cpu, &down[0], &err) != ST_OK)
        test_die("cpu moe composite", &err);
    char desc[160];
    snprintf(desc, sizeof(desc), "%s K=%lld F=%lld D=%lld E=%lld slots 2, 5: experts 8, -1%s%s", tname(t),
             (long long)K, (long long)F, (long long)D, (long long)E, residual ? " +residual" : "",
             g_moe_rowblock ? " block-a-row" : "");
    if (st_cuda_moe_fused(g_gpu, &glu[1], &err) != ST_OK) test_die("cuda moe fused", &err);
    char what[200];
    snprintf(what, sizeof(what), "moe unit fused %s", desc);
    expect_data_error(what);
    if (st_cuda_moe_fused(g_gpu, &down[1], &err) != ST_OK) test_die("cuda moe fused", &err);
    snprintf(what, sizeof(what), "moe down+combine fused %s", desc);
    expect_data_error(what);
    /* the unit: the bad slots' rows still the poison, then the CPU's values there */
    char *unit = dual_fetch(&du);
    int64_t untouched_bad = 0;
    for (int64_t j = 2; j <= 5; j += 3)
        for (int64_t n = 0; n < F; n++) {
            const size_t o = (size_t)j * fnb1 + (size_t)n * 4;
            untouched_bad += memcmp(unit + o, du.host + o, 4) != 0;
            memcpy(unit + o, du.cpu + o, 4);
        }
    cmp_result r = compare_f32(&vf, du.cpu, unit, du.bytes);
    r.bad += untouched_bad;
    record("moe unit fused", desc, &r, TOL_F32_SUM);
    dual *result = residual ? &dres : &dout;
    char *got = dual_fetch(result);
    r = compare_f32(&vo, result->cpu, got, result->bytes);
    record("moe down+combine fused", desc, &r, TOL_F32_SUM);
    free(unit), free(got);
    dual_free(&dg), dual_free(&du), dual_free(&dy), dual_free(&dout), dual_free(&dres);
    dual_free(&dh), dual_free(&dw), dual_free(&dw_left), dual_free(&di_good), dual_free(&di_bad);
    moe_experts_free(&ex);
}

/* ---- the suite ---------------------------------------------------------------------- */

/* A CUDA backend with the default tuning, then spec's fields (cuda_tuning.h: "key=value,..."). */
static st_backend *cuda_tuned(const char *spec) {
    st_error err = {0};
    st_device_info info;
    if (st_device_query(ST_BACKEND_CUDA, 0, &info, &err) != ST_OK) test_die("device query", &err);
    st_cuda_tuning t = st_cuda_tuning_default(info.compute_major);
    if (st_cuda_tuning_parse(&t, spec, &err) != ST_OK) test_die("tuning", &err);
    st_backend *b = NULL;
    if (st_backend_cuda_init_tuned(0, &t, &b, &err) != ST_OK) test_die("CUDA backend", &err);
    return b;
}

/* Runs fn with g_gpu created again under the tuning spec, then restores the default. */
static void with_cuda_tuning(const char *spec, void (*fn)(void)) {
    st_error err = {0};
    st_backend_free(g_gpu);
    g_gpu = cuda_tuned(spec);
    printf("tuning %s\n", spec);
    fn();
    st_backend_free(g_gpu);
    if (st_backend_init(ST_BACKEND_CUDA, 0, &g_gpu, &err) != ST_OK) test_die("CUDA backend", &err);
}

/* Every kind of one-column product by the block-a-row kernel (g_gpu, tuned by the
 * caller: its rows staged in shared memory, or staged and launched early), each also by
 * the same kernel with its rows in registers, launched plainly (g_gpu_regs):
 * test_mul_mat_fused compares the two bitwise. */
static void run_fused_products(void);
static void run_fused_products_staged_and_registers(void) {
    g_gpu_regs = cuda_tuned("rowblock=7,rowblock_staged=0,early_launch=0"); /* (a product launched early is staged) */
    run_fused_products();
    st_backend_free(g_gpu_regs);
    g_gpu_regs = NULL;
}

/* rope_attention (one decode token): head_dim 64/128/256, GQA groups 1-8, NORM/NEOX,
 * partial rotary, qk-norms per head, whole or none, short and long context (one split and
 * several), a
 * window, n_kv = pos + 1 or the whole cache, both caches; and a shape the fused kernel does
 * not take (head_dim 96: the composite). short_f16: only the cases of an F16 cache and a
 * bound of at most 128 keys (where the warps kernel can take the shape). */
static void rope_attention_case(bool short_f16, st_type ct, int64_t hd, int64_t Hq, int64_t Hk, int32_t n_rot,
                                st_rope_mode mode, int norms, int32_t pos, int32_t window, bool n_kv_ctx) {
    if (short_f16 && (ct != ST_TYPE_F16 || n_kv_ctx || pos + 1 > 128)) return;
    test_rope_attention(ct, hd, Hq, Hk, n_rot, mode, norms, pos, window, n_kv_ctx);
}
static void run_rope_attention(bool short_f16) {
    for (int ci = 0; ci < 2; ci++) {
        const st_type ct = ci ? ST_TYPE_F32 : ST_TYPE_F16;
        for (int norms = QK_NORM_NONE; norms <= QK_NORM_WHOLE; norms++) {
            rope_attention_case(short_f16, ct, 64, 32, 8, 64, ST_ROPE_MODE_NORM, norms, 0, 0, false);
            rope_attention_case(short_f16, ct, 64, 32, 8, 64, ST_ROPE_MODE_NORM, norms, 64, 0, true);
            rope_attention_case(short_f16, ct, 128, 16, 8, 128, ST_ROPE_MODE_NEOX, norms, 130, 0, false);
            rope_attention_case(short_f16, ct, 128, 32, 4, 64, ST_ROPE_MODE_NEOX, norms, 700, 0, true); /* partial, 8 a group */
            rope_attention_case(short_f16, ct, 128, 8, 8, 128, ST_ROPE_MODE_NORM, norms, 333, 100, true); /* window */
            rope_attention_case(short_f16, ct, 256, 8, 4, 256, ST_ROPE_MODE_NEOX, norms, 517, 0, false);
            rope_attention_case(short_f16, ct, 96, 4, 2, 32, ST_ROPE_MODE_NEOX, norms, 40, 0, true);
            rope_attention_case(short_f16, ct, 64, 12, 4, 64, ST_ROPE_MODE_NORM, norms, 90, 0, false); /* a group of 3 */
            /* head_dim 256 within one round of keys (the warps kernel, one warp a row summing
             * the norm in rope_store's 128 threads' order): gemma-3-1b's 4 heads on one kv
             * head, and a window */
            rope_attention_case(short_f16, ct, 256, 4, 1, 256, ST_ROPE_MODE_NEOX, norms, 100, 0, false);
            rope_attention_case(short_f16, ct, 256, 8, 2, 256, ST_ROPE_MODE_NEOX, norms, 127, 64, false);
            /* llama-3.2-1b's, qwen3-1.7b's and qwen3-8b's shapes at tg128's depths (bounds up
             * to 128 keys: the warps kernel with an F16 cache), one with a window, and past
             * them (the split kernel) */
            rope_attention_case(short_f16, ct, 64, 32, 8, 64, ST_ROPE_MODE_NORM, norms, 100, 0, false);
            rope_attention_case(short_f16, ct, 128, 16, 8, 128, ST_ROPE_MODE_NEOX, norms, 63, 0, false);
            rope_attention_case(short_f16, ct, 128, 32, 8, 128, ST_ROPE_MODE_NEOX, norms, 127, 0, false);
            rope_attention_case(short_f16, ct, 128, 8, 8, 128, ST_ROPE_MODE_NORM, norms, 120, 50, false); /* window */
            rope_attention_case(short_f16, ct, 128, 16, 8, 128, ST_ROPE_MODE_NEOX, norms, 700, 0, true);
            /* olmoe-1b-7b's 16 heads on 16 kv heads, at tg128's depths and past them */
            rope_attention_case(short_f16, ct, 128, 16, 16, 128, ST_ROPE_MODE_NEOX, norms, 63, 0, false);
            rope_attention_case(short_f16, ct, 128, 16, 16, 128, ST_ROPE_MODE_NEOX, norms, 127, 0, false);
            rope_attention_case(short_f16, ct, 128, 16, 16, 128, ST_ROPE_MODE_NEOX, norms, 700, 0, true);
        }
    }
}

/* The short F16 rope_attention cases with the warps kernel launched plainly (by default
 * it is launched early where it takes the rotations from a rope table): the
 * "table=formed" rows compare the two launches bitwise, the kernel launched early forming
 * them from the table, the one launched plainly forming them itself. */
static void run_one_token_attention_plain(void) { run_rope_attention(true); }

/* The weight types every op is tested in. */
static const st_type types[] = {ST_TYPE_F32, ST_TYPE_F16, ST_TYPE_BF16};

/* The experts fused, under the tuning in force (g_moe_rowblock): odd rows (unaligned, the
 * element tail), a token's slots more than a block's warps and fewer, several tokens and
 * the grouped path (none of them the block-a-row kernels'); olmoe-1b-7b's shape in every
 * form; the other widths the block-a-row kernels take (qwen3-30b-a3b's: down of 3 pieces a
 * thread; K = 4,096: the unit of 2 pieces, down of 4 slots, a slot over 2 warps); and at
 * their boundaries: down taken where the unit is not (K = 256) and the reverse (6 slots,
 * which do not divide the warps), the unit of 3 pieces a thread, rows not 16-byte aligned;
 * packed and padded; bad expert ids. */
static void run_moe_fused(void) {
    for (int ti = 0; ti < 3; ti++)
        for (size_t pad = 0; pad <= 128; pad += 128) {
            test_moe_fused(types[ti], 37, 13, 29, 8, 3, 1, pad, false, false);
            test_moe_fused(types[ti], 64, 24, 40, 16, 12, 2, pad, ti == 1, true);
            test_moe_fused(types[ti], 256, 128, 192, 64, 8, 5, pad, false, false);
            test_moe_fused(types[ti], 256, 128, 192, 64, 8, 9, pad, false, true);
            test_moe_fused_forms(types[ti], 2048, 1024, 2048, 64, 8, 1, pad);
            test_moe_fused_forms(types[ti], 2048, 768, 2048, 16, 8, 1, pad);
            test_moe_fused(types[ti], 4096, 512, 4096, 8, 4, 1, pad, true, false);
            test_moe_fused(types[ti], 256, 1024, 300, 8, 2, 1, pad, false, true);
            test_moe_fused(types[ti], 2048, 1024, 256, 8, 6, 1, pad, true, true);
            test_moe_fused(types[ti], 6144, 64, 96, 4, 2, 1, pad, false, false);
        }
    test_moe_fused(ST_TYPE_F16, 2048, 256, 512, 8, 8, 1, 8, false, true);
    test_moe_fused_bad_ids(ST_TYPE_F16, true);
    test_moe_fused_bad_ids(ST_TYPE_BF16, false);
}
static void run_moe_fused_rowblock(void) {
    g_moe_rowblock = true;
    run_moe_fused();
}
static void run_moe_fused_warps(void) {
    g_moe_rowblock = false;
    run_moe_fused();
}

/* The fused one-column products (and their composites for M > 1). */
static void run_fused_products(void) {
    /* fused products: every epilogue with and without the norm; K = 37 (scalar tail, the
     * norm staged), 256 and 2048 (the unrolled 16-byte path; the norm in the loop for
     * q/k/v-like products, staged for gated pairs) and 4096 (gated pairs in the loop too);
     * M = 1 fused (packed and padded), 2 and 8 the composite (cuBLAS). At K = 2048 and
     * M = 1, N = 300, 2500 and 4500 rows: on an H200 (132 SMs) the decode kernel splits the
     * rows of the first two over 2 warps, of the last not (cuda_gemv_decode_split) */
    const int64_t fused_Ks[] = {37, 256, 2048, 4096};
    const int64_t fused_Ms[] = {1, 1, 2, 8};
    const int64_t split_Ns[] = {300, 2500, 4500};
    for (int ti = 0; ti < 3; ti++)
        for (int ki = 0; ki < 4; ki++)
            for (int mi = 0; mi < 4; mi++)
                for (int ni = 0; ni < 3; ni++)
                    for (int norm = 0; norm <= 1; norm++) {
                        const int64_t K = fused_Ks[ki], M = fused_Ms[mi];
                        const int64_t N = K >= 2048 ? split_Ns[ni] : 45;
                        if (ni > 0 && (K != 2048 || M != 1)) continue;
                        const size_t pad = (size_t)(mi % 2) * 64;
                        for (int chain = 0; chain <= 1; chain++) {
                            test_mul_mat_fused(types[ti], K, N, M, pad, 3, norm, ST_FUSED_EPILOGUE_STORE, chain);
                            test_mul_mat_fused(types[ti], K, N, M, pad, 1, norm, ST_FUSED_EPILOGUE_ADD, chain);
                            test_mul_mat_fused(types[ti], K, N, M, pad, 2, norm, ST_FUSED_EPILOGUE_SWIGLU, chain);
                            test_mul_mat_fused(types[ti], K, N, M, pad, 2, norm, ST_FUSED_EPILOGUE_GEGLU, chain);
                        }
                    }
    /* one-token products at the block-a-row kernel's other widths, packed and padded, with a
     * norm and without: 3 and 4 pieces a thread (the down products of qwen3-1.7b and
     * llama-3.2-1b; 2 above at K = 4096; residual adds of 3 and 4 pieces are the ones
     * early_launch launches early by CUDA_EARLY_LONG_ADD, not CUDA_ROWBLOCK_ADD); and rows of
     * K no multiple of 2,048, where a thread's last piece lies past some rows' end (zeros,
     * read from nowhere): gemma-3-270m's 640, gemma-3-1b's 1,152 (q/k/v, gate/up), 1,024 (o)
     * and 6,912 (down, stored for the post-norm), phi-4-mini's 3,072 (q/k/v, o, gate/up) */
    static const struct {
        int64_t K, N;
        int n_w;
        st_fused_epilogue epi;
    } widths[] = {
        {6144, 2048, 1, ST_FUSED_EPILOGUE_ADD},   {8192, 500, 1, ST_FUSED_EPILOGUE_ADD},
        {8192, 700, 2, ST_FUSED_EPILOGUE_SWIGLU}, {8192, 300, 3, ST_FUSED_EPILOGUE_STORE},
        {640, 300, 3, ST_FUSED_EPILOGUE_STORE},   {1152, 300, 3, ST_FUSED_EPILOGUE_STORE},
        {1152, 700, 2, ST_FUSED_EPILOGUE_GEGLU},  {1024, 1152, 1, ST_FUSED_EPILOGUE_STORE},
        {6912, 500, 1, ST_FUSED_EPILOGUE_STORE},  {3072, 500, 1, ST_FUSED_EPILOGUE_ADD},
        {3072, 700, 2, ST_FUSED_EPILOGUE_SWIGLU},
    };
    for (int ti = 0; ti < 3; ti++)
        for (size_t pad = 0; pad <= 64; pad += 64)
            for (int norm = 0; norm <= 1; norm++)
                for (size_t i = 0; i < sizeof(widths) / sizeof(widths[0]); i++)
                    test_mul_mat_fused(types[ti], widths[i].K, widths[i].N, 1, pad, widths[i].n_w, norm, widths[i].epi,
                                       0);
}

/* The router and routing fused: olmoe's shape (F32 router, as converters keep it; its FFN
 * norm first, as the layer runs it), others; rows 16-byte aligned (by pieces) and not
 * (K = 37: element by element), packed and padded. */
static void run_moe_route_fused(void) {
    for (int ti = 0; ti < 3; ti++)
        for (int normed = 0; normed < 2; normed++) {
            test_moe_route_fused(types[ti], 2048, 64, 8, 1, true, false, normed, 0);
            test_moe_route_fused(types[ti], 2048, 64, 8, 3, true, true, normed, 128);
            test_moe_route_fused(types[ti], 100, 60, 4, 7, false, true, normed, 0);
            test_moe_route_fused(types[ti], 512, 128, 8, 2, true, false, normed, 64);
            test_moe_route_fused(types[ti], 37, 24, 3, 2, true, true, normed, 0);
            test_moe_route_fused(types[ti], 8192, 256, 8, 1, true, false, normed, 0); /* several rounds of loads */
        }
}

static void run_all(void) {
    for (int ti = 0; ti < 3; ti++)
        for (int e = 1; e <= 3; e += 2)
            for (size_t pad = 0; pad <= 128; pad += 64) {
                test_upload(types[ti], 37, 13, e, pad);
                test_upload(types[ti], 64, 9, e, pad);
            }
    test_upload(ST_TYPE_F32, 4096, 5200, 1, 128); /* 81 MiB: more than one staging chunk */

    for (int ti = 0; ti < 3; ti++)
        for (size_t pad = 0; pad <= 128; pad += 64) {
            test_get_rows(types[ti], 37, 1, pad);
            test_get_rows(types[ti], 37, 33, pad);
            test_get_rows(types[ti], 64, 5, pad);
        }

    const int64_t Ms[] = {1, 2, 5, 7, 8, 9, 33};
    for (int ti = 0; ti < 3; ti++)
        for (int64_t K = 37; K <= 256; K += 219)
            for (int64_t N = 13; N <= 64; N += 51)
                for (int mi = 0; mi < 7; mi++)
                    for (size_t pad = 0; pad <= 128; pad += 64)
                        for (int xl = 0; xl < 3; xl++) {
                            const int64_t M = Ms[mi];
                            const bool boundary = M == 2 || M == 7 || M == 8;
                            if (xl != X_PACKED && (boundary || pad == 64)) continue;
                            test_mul_mat(types[ti], K, N, M, pad, (x_layout)xl);
                        }
    for (int ti = 0; ti < 3; ti++)
        for (size_t pad = 0; pad <= 128; pad += 128) {
            test_mul_mat(types[ti], 2048, 512, 1, pad, X_PACKED);
            test_mul_mat(types[ti], 2048, 512, 4, pad, X_PACKED);
            test_mul_mat(types[ti], 2048, 512, 16, pad, X_PACKED);
            test_mul_mat(types[ti], 4096, 96, 64, pad, X_STRIDED);
            test_mul_mat(types[ti], 1024, 1152, 1, pad, X_PACKED); /* gemma-3-1b's o: a plain product */
            test_mul_mat(types[ti], 6912, 300, 1, pad, X_PACKED);
        }

    test_graph_outlives_growth(); /* before any other attention: see there */

    run_rope_attention(false);
    with_cuda_tuning("early_launch=0", run_one_token_attention_plain);

    /* rope_store: norms per head, whole or none, NORM/NEOX, partial rotary, GQA, both
     * caches; a block holds 8 rows of head_dim <= 128 or 2 of 256: llama's 48 rows of a token
     * in 6 blocks, and a last block left partly idle (12 rows of 128, 5 rows of 256); olmoe's
     * 16 + 16 heads of 128 */
    for (int ci = 0; ci < 2; ci++)
        for (int norms = QK_NORM_NONE; norms <= QK_NORM_WHOLE; norms++) {
            const st_type ct = ci ? ST_TYPE_F32 : ST_TYPE_F16;
            test_rope_store(ct, 64, 4, 2, 64, ST_ROPE_MODE_NORM, norms, 1);
            test_rope_store(ct, 128, 8, 2, 128, ST_ROPE_MODE_NEOX, norms, 3);
            test_rope_store(ct, 96, 3, 1, 32, ST_ROPE_MODE_NEOX, norms, 8); /* partial rotary */
            test_rope_store(ct, 256, 4, 1, 256, ST_ROPE_MODE_NEOX, norms, 2);
            test_rope_store(ct, 256, 3, 1, 256, ST_ROPE_MODE_NEOX, norms, 3);
            test_rope_store(ct, 64, 32, 8, 64, ST_ROPE_MODE_NORM, norms, 5);
            test_rope_store(ct, 128, 16, 16, 128, ST_ROPE_MODE_NEOX, norms, 4);
        }

    /* the one-column products under each decode kernel: the block-a-row kernel wherever it
     * can take them (a mask of every kind of product), then the warp-a-row kernel alone */
    with_cuda_tuning("rowblock=7,rowblock_staged=7", run_fused_products_staged_and_registers);
    /* ... staged and launched early (sm_90; plain launches before): the same bits */
    with_cuda_tuning("rowblock=7,early_launch=23", run_fused_products_staged_and_registers);
    with_cuda_tuning("rowblock=0", run_fused_products);
    /* weights back to back (one GEMM from M = 2; one column: the decode kernels) */
    for (int ti = 1; ti < 3; ti++)
        for (size_t pad = 0; pad <= 128; pad += 128)
            for (int64_t M = 1; M <= 64; M = M == 1 ? 2 : M == 2 ? 13 : M == 13 ? 64 : 65) {
                test_mul_mat_fused_adjacent(types[ti], 2048, 2048, M, pad, false);
                test_mul_mat_fused_adjacent(types[ti], 256, 1024, M, pad, true);
            }
    /* a gated unit handed to its down product: llama-3.2-1b's FFN, widths off the float4
     * path (F % 4 != 0), one column (no hand-off) and several */
    for (int ti = 1; ti < 3; ti++)
        for (size_t pad = 0; pad <= 64; pad += 64) {
            test_glu_handoff(types[ti], 2048, 8192, 64, pad, false);
            test_glu_handoff(types[ti], 256, 1002, 13, pad, true);
            test_glu_handoff(types[ti], 256, 1000, 2, pad, false);
            test_glu_handoff(types[ti], 256, 1000, 1, pad, false);
        }
    /* a residual add preparing the next product's norm, then that product: model shapes
     * (llama-3.2-1b's o then q/k/v or gate/up; qwen3-8b's down then q/k/v) and rows that
     * end a group of 4 early (N = 1002) */
    for (int ti = 0; ti < 3; ti++)
        for (size_t pad = 0; pad <= 64; pad += 64) {
            test_fused_chain(types[ti], 2048, 2048, 3072, pad, ST_FUSED_EPILOGUE_STORE);
            test_fused_chain(types[ti], 2048, 2048, 8192, pad, ST_FUSED_EPILOGUE_SWIGLU);
            test_fused_chain(types[ti], 12288, 4096, 6144, pad, ST_FUSED_EPILOGUE_STORE);
            test_fused_chain(types[ti], 256, 1002, 300, pad, ST_FUSED_EPILOGUE_GEGLU);
            test_fused_chain(types[ti], 256, 1002, 300, pad, ST_FUSED_EPILOGUE_STORE);
        }
    test_prepared_norm_rule();
    /* an output head's shape, 40,000 rows at K = 2048 and M = 1: at least norm_apart_waves
     * (st_cuda_tuning) waves of blocks on an H200, so its norm runs apart (cuda_gemv.cu);
     * packed and padded */
    for (int ti = 0; ti < 3; ti++)
        for (size_t pad = 0; pad <= 64; pad += 64)
            test_mul_mat_fused(types[ti], 2048, 40000, 1, pad, 1, 1, ST_FUSED_EPILOGUE_STORE, pad > 0);
    for (int ti = 0; ti < 3; ti++) {
        test_mul_mat_to_host(types[ti], 37, 45, false);
        test_mul_mat_to_host(types[ti], 2048, 45, true);
        test_mul_mat_to_host(types[ti], 2048, 40000, true);
    }

    for (int ti = 0; ti < 3; ti++)
        for (int64_t K = 37; K <= 64; K += 27)
            for (int shape = 0; shape < 2; shape++)
                for (int64_t M = 1; M <= 33; M += M < 9 ? 4 : 24) /* 1, 5: GEMV; 9, 33: grouped */
                    for (size_t pad = 0; pad <= 128; pad += 128)
                        for (int xm = 0; xm < 3; xm++) {
                            const int64_t N = shape ? 24 : 13, E = shape ? 8 : 4, used = shape ? 3 : 2;
                            test_mul_mat_id(types[ti], K, N, E, used, M, pad, (moe_x)xm);
                        }

    /* the experts fused: one token's products by the block-a-row kernels where they take
     * them (launched plainly, then every kernel that can launched early: the down product
     * too), then by the warp-a-row kernels alone */
    with_cuda_tuning("moe_rowblock=3,early_launch=0", run_moe_fused_rowblock);
    with_cuda_tuning("moe_rowblock=3,early_launch=511", run_moe_fused_rowblock);
    with_cuda_tuning("moe_rowblock=0", run_moe_fused_warps);

    for (int64_t M = 1; M <= 33; M += 32)
        for (int w = 0; w < 2; w++) {
            test_norm_pair(2048, M, w); /* olmoe-1b-7b's q/k norms */
            test_norm_pair(40, M, w);
            test_norm_add(1152, M, w, true); /* gemma-3-1b's post-norms */
            test_norm_add(37, M, w, false);
            test_norm_add(4096, M, w, M == 1);
        }

    const int64_t Ds[] = {18, 64, 128, 1000, 4096};
    for (int di = 0; di < 5; di++)
        for (int64_t M = 1; M <= 33; M = M == 1 ? 5 : M == 5 ? 33 : 34)
            for (int w = 0; w < 2; w++) {
                test_rms_norm(Ds[di], M, false, w, false);
                test_rms_norm(Ds[di], M, false, w, true);
                if (Ds[di] <= 128) test_rms_norm(Ds[di], M, true, w, true);
            }

    const int64_t hds[] = {18, 64, 128};
    const int32_t partial[] = {12, 32, 96};
    for (int hi = 0; hi < 3; hi++)
        for (int full = 0; full < 2; full++)
            for (int mode = 0; mode < 2; mode++)
                for (int f = 0; f < 2; f++)
                    for (int sc = 0; sc < 2; sc++)
                        for (int64_t M = 1; M <= 5; M += 4)
                            test_rope(hds[hi], full ? (int32_t)hds[hi] : partial[hi],
                                      mode ? ST_ROPE_MODE_NEOX : ST_ROPE_MODE_NORM, f, sc, M, (f + sc + M) % 2 == 0);

    for (int64_t F = 37; F <= 128; F += 91)
        for (int64_t M = 1; M <= 33; M = M == 1 ? 7 : M == 7 ? 33 : 34)
            for (int form = 0; form < 4; form++) {
                test_glu(false, F, M, form);
                if (form < 3) test_glu(true, F, M, form);
            }

    for (int64_t D = 37; D <= 128; D += 91)
        for (int64_t M = 1; M <= 5; M += 4) {
            for (int b = 0; b < 4; b++)
                for (int ip = 0; ip < 2; ip++)
                    for (int mul = 0; mul < 2; mul++) test_add(D, M, b, ip, mul);
            test_scale(D, M, false);
            test_scale(D, M, true);
        }

    for (int hi = 0; hi < 3; hi++)
        for (int64_t M = 1; M <= 5; M += 4)
            for (int g = 0; g < 2; g++) {
                test_kv_store(ST_TYPE_F16, hds[hi], M, g);
                test_kv_store(ST_TYPE_F32, hds[hi], M, g);
            }

    const int64_t n_kvs[] = {1, 7, 64, 65, 300};
    for (int hi = 0; hi < 3; hi++)
        for (int ci = 0; ci < 2; ci++)
            for (int ni = 0; ni < 5; ni++)
                for (int64_t M = 1; M <= 5; M += 4) {
                    const st_type ct = ci ? ST_TYPE_F32 : ST_TYPE_F16;
                    const int64_t n_kv = n_kvs[ni];
                    if (M > n_kv) continue;
                    test_attention(ct, hds[hi], 6, 2, n_kv, M, 0, 0.0f, 0);
                    test_attention(ct, hds[hi], 6, 2, n_kv, M, 16, 0.0f, 0);
                    test_attention(ct, hds[hi], 6, 2, n_kv, M, 1, 0.0f, 1);
                    test_attention(ct, hds[hi], 6, 2, n_kv, M, 0, 30.0f, 1);
                }
    test_attention(ST_TYPE_F16, 64, 6, 6, 65, 5, 0, 0.0f, 0);
    test_attention(ST_TYPE_F16, 64, 6, 1, 65, 5, 0, 0.0f, 1);
    test_attention(ST_TYPE_F32, 64, 6, 1, 300, 9, 32, 0.0f, 0);
    test_attention(ST_TYPE_F16, 256, 4, 1, 100, 3, 0, 0.0f, 0);
    test_attention(ST_TYPE_F16, 128, 4, 2, 2000, 2, 0, 0.0f, 0);
    test_attention(ST_TYPE_F32, 128, 4, 2, 2000, 2, 512, 50.0f, 1);
    test_attention_prefill();
    with_cuda_tuning("flash_split=1", run_attention_flash_splits);
    with_cuda_tuning("flash_split=3", run_attention_flash_splits);
    with_cuda_tuning("flash_split=16", run_attention_flash_splits);
    test_attention_decode(false);

    const int32_t ks[] = {1, 2, 8};
    for (int64_t E = 8; E <= 64; E += 56)
        for (int ki = 0; ki < 3; ki++)
            for (int sf = 0; sf < 2; sf++)
                for (int nz = 0; nz < 2; nz++)
                    for (int64_t M = 1; M <= 33; M = M == 1 ? 5 : M == 5 ? 33 : 34) test_topk(E, ks[ki], sf, nz, M, false);
    /* experts not a multiple of the warp, more than two a lane; ties broken by index */
    test_topk(60, 4, true, true, 7, false);
    test_topk(128, 8, true, false, 9, false);
    test_topk(64, 8, true, false, 5, true);
    test_topk(60, 6, false, true, 3, true);
    run_moe_route_fused(); /* (launched early on sm_90, by default) */
    with_cuda_tuning("early_launch=0", run_moe_route_fused);

    for (int64_t D = 37; D <= 64; D += 27)
        for (int64_t k = 2; k <= 8; k += 6)
            for (int64_t M = 1; M <= 5; M += 4) test_moe_combine(D, k, M);

    test_errors();
}

static void print_pad_summary(void) {
    printf("padded vs packed weights on CUDA: %d of %d products bitwise equal\n", g_pad_bitwise, g_pad_cases);
}

int main(void) { return gpu_test_main("test_cuda_ops", run_all, print_pad_summary); }
