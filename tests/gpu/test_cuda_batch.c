/*
 * Many sequences at once on CUDA against the CPU backend (the reference):
 *  - attention over a paged KV cache: decode tokens (each its own sequence) and prompt runs
 *    in one batch, sequences whose blocks are scattered over the pool in random order,
 *    F16 and F32 caches, head_dim 64/128/256 and 96 (the exact kernel), GQA groups, windows;
 *    every path that takes the shapes;
 *  - the one-token rope-attention of paged decode tokens (the rope and the store folded
 *    into the decode kernels) against the CPU composite, outputs and caches;
 *  - the largest logits of each row (top_k), and a draw from each whole row (draw) against
 *    the CPU's, which is the host sampler's chain;
 *  - the runner: batches of several sequences (prompt chunks, then decode steps padded to
 *    their bucket, recorded and replayed) through a tiny model of every architecture,
 *    logits against the CPU runner fed the same batches; draws on the device against the
 *    host sampler on the same rows;
 *  - the engine on CUDA: requests at OpenAI's default sampling (drawn on the device) give
 *    the tokens and log-probabilities the same requests give sampled on the host.
 * Prints one line per case, the table, "N passed, M failed" (gpu_test_util.h); exit 1 on
 * any failure or when nothing ran. STRIDE_TEST_SEED=n reseeds.
 */
#include "gpu_test_util.h"

#include <unistd.h>

#include "cuda/cuda_attention.h"
#include "cuda/cuda_backend.h"
#include "model/runner_internal.h"
#include "stride/engine.h"
#include "stride/runner.h"
#include "stride/sample.h"
#include "stride/synth.h"

/* Attention in f32 on the exact and split-KV paths: the summation order differs from the
 * CPU's (see test_cuda_ops.c). The tensor-core prefill rounds q and P to f16: u/sqrt(3) *
 * sqrt(1 + 1/9) with u = 2^-11, times 3. */
#define TOL_ATTENTION 1e-5
#define TOL_FLASH 9e-4
/* Whole models with F32 weights: cuBLAS SGEMM (no TF32) and the own kernels in f32, the
 * same tolerance as the GPU test script's f32 model rows. */
#define TOL_MODEL_F32 1e-4
/* The same over an F16 cache: the tensor-core prefill rounds q and P to f16 (TOL_FLASH for
 * the attention itself), grown through the layers as in the GPU test script's f16 rows. */
#define TOL_MODEL_F16_KV 3e-3
#define TOL_EXACT 0.0

st_backend *g_cpu, *g_gpu;
uint64_t g_rng = 0xba7c4e5ull;

static view ids_view(int64_t n) { return mkpacked(ST_TYPE_I32, n, 1, 1); }

/* NaN written to the CUDA buffer only (d->host holds dual_poison's pattern). */
static void poison_gpu(dual *d) {
    st_error err = {0};
    const uint32_t nan_bits = 0x7fc00000u;
    for (size_t i = 0; i + 4 <= d->bytes; i += 4) memcpy(d->host + i, &nan_bits, 4);
    if (g_gpu->iface->write(g_gpu, d->gpu, d->host, d->bytes, &err) != ST_OK) test_die("cuda write", &err);
}

/* A cache [hd, n_kv_head, slots] of random values in both backends. */
static dual cache_new(st_type t, int64_t hd, int64_t n_kv_head, int64_t slots, view *v) {
    *v = mkpacked(t, hd, n_kv_head, slots);
    dual d = dual_new(view_bytes(v));
    const size_t n = d.bytes / type_size(t);
    for (size_t i = 0; i < n; i++) {
        const float f = rng_f32();
        if (t == ST_TYPE_F32) memcpy(d.host + 4 * i, &f, 4);
        else {
            const uint16_t h = st_f32_to_f16(f);
            memcpy(d.host + 2 * i, &h, 2);
        }
    }
    dual_upload(&d);
    return d;
}

/* A batch over a paged pool: n_seq sequences of random lengths whose blocks are a random
 * permutation of the pool's; the first n_single sequences contribute their last token
 * (decode), the others a run of their last tokens (a prompt chunk). */
typedef struct paged_batch {
    int64_t M, n_single;
    int32_t n_seq, max_blocks, n_runs;
    int32_t pos[512], seq[512], table[48 * 8];
    st_attn_run runs[48];
} paged_batch;

static void paged_batch_make(paged_batch *b, int32_t n_seq, int32_t n_single, int32_t n_blocks, int32_t max_blocks) {
    memset(b, 0, sizeof(*b));
    b->n_seq = n_seq, b->max_blocks = max_blocks, b->n_single = n_single;
    int32_t perm[128];
    for (int32_t i = 0; i < n_blocks; i++) perm[i] = i;
    for (int32_t i = n_blocks - 1; i > 0; i--) { /* Fisher-Yates */
        const int32_t j = rng_int(i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    int32_t next = 0;
    for (int32_t s = 0; s < n_seq; s++) {
        const int32_t len = 1 + rng_int(max_blocks * ST_KV_BLOCK_TOKENS - 1); /* 1 .. the row's capacity */
        const int32_t used = (len + ST_KV_BLOCK_TOKENS - 1) / ST_KV_BLOCK_TOKENS;
        for (int32_t k = 0; k < max_blocks; k++) /* past the sequence: the pool's last block, as the runner pads */
            b->table[s * max_blocks + k] = k < used ? perm[next++] : n_blocks - 1;
        const int32_t n_tok = s < n_single ? 1 : 1 + rng_int(len < 9 ? len : 9);
        if (s >= n_single) b->runs[b->n_runs++] = (st_attn_run){.m0 = b->M, .n = n_tok, .seq = s};
        for (int32_t i = 0; i < n_tok; i++) {
            b->pos[b->M] = len - n_tok + i;
            b->seq[b->M++] = s;
        }
    }
}

/* many: 40 sequences of up to 2 blocks (more runs than one flash launch takes) over 120
 * blocks; else up to 16 of up to 6 blocks over 40. */
static void test_attention_paged(st_type ct, int64_t hd, int64_t H, int64_t Hkv, int32_t n_seq, int32_t n_single,
                                 int32_t window, bool many) {
    const int32_t n_blocks = many ? 120 : 40, max_blocks = many ? 2 : 6;
    paged_batch pb;
    paged_batch_make(&pb, n_seq, n_single, n_blocks - 1, max_blocks);
    const int64_t M = pb.M, slots = (int64_t)n_blocks * ST_KV_BLOCK_TOKENS;
    view vk, vv;
    dual dk = cache_new(ct, hd, Hkv, slots, &vk), dv = cache_new(ct, hd, Hkv, slots, &vv);
    view vq = mkview(ST_TYPE_F32, hd, H, M, (size_t)hd * 4, (size_t)(hd * (H + 2 * Hkv)) * 4, 0);
    view vy = mkpacked(ST_TYPE_F32, hd, H, M);
    dual dq = dual_new(view_bytes(&vq)), dy = dual_new(view_bytes(&vy));
    dual_random_f32(&dq);
    dual_poison(&dy);
    dual dp = ids_new(pb.pos, M), ds = ids_new(pb.seq, M), dt = ids_new(pb.table, (int64_t)n_seq * max_blocks);
    view vp = ids_view(M), vt = mkpacked(ST_TYPE_I32, max_blocks, n_seq, 1);
    int32_t max_pos = 0;
    for (int64_t m = 0; m < M; m++) max_pos = pb.pos[m] > max_pos ? pb.pos[m] : max_pos;
    st_attn_params p = {.n_kv = max_pos + 1, .window = window, .scale = 1.0f / sqrtf((float)hd)};
    st_tensor kc = on(&vk, dk.cpu), kg = on(&vk, dk.gpu), vcc = on(&vv, dv.cpu), vg = on(&vv, dv.gpu);
    st_tensor qc = on(&vq, dq.cpu), qg = on(&vq, dq.gpu), yc = on(&vy, dy.cpu), yg = on(&vy, dy.gpu);
    st_tensor pc = on(&vp, dp.cpu), pgp = on(&vp, dp.gpu), sc = on(&vp, ds.cpu), sg = on(&vp, ds.gpu);
    st_tensor tc = on(&vt, dt.cpu), tg = on(&vt, dt.gpu);
    st_kv_pages pages_c = {.seq = &sc, .table = &tc, .n_single = n_single, .n_runs = pb.n_runs, .runs = pb.runs};
    st_kv_pages pages_g = pages_c;
    pages_g.seq = &sg, pages_g.table = &tg;
    st_error err = {0};
    if (g_cpu->iface->attention(g_cpu, &yc, &qc, &kc, &vcc, &pc, &pages_c, &p, &err) != ST_OK)
        test_die("cpu paged attention", &err);
    const bool flash_runs = ct == ST_TYPE_F16 && hd != 96 && g_gpu->device.compute_major >= 8;
    char desc[128];
    snprintf(desc, sizeof(desc), "%s hd=%lld H=%lld/%lld seqs=%d singles=%d M=%lld win=%d n_kv=%lld", tname(ct),
             (long long)hd, (long long)H, (long long)Hkv, n_seq, n_single, (long long)M, window, (long long)p.n_kv);
    /* pass 2: the runs as a replayed step gives them, in device memory (runs_dev) after the
     * padding's slot and empty ones, a power-of-two count of slots; the host's copy too */
    int32_t run_slots = 1, runs_dev[3 * 64] = {0};
    while (run_slots < pb.n_runs + 1) run_slots *= 2;
    st_attn_run runs_slots[64] = {{0}};
    memcpy(runs_slots, pb.runs, (size_t)pb.n_runs * sizeof(st_attn_run));
    for (int32_t i = 0; i < pb.n_runs; i++)
        runs_dev[3 * i] = (int32_t)pb.runs[i].m0, runs_dev[3 * i + 1] = (int32_t)pb.runs[i].n,
                  runs_dev[3 * i + 2] = pb.runs[i].seq;
    dual dr = ids_new(runs_dev, 3 * run_slots);
    view vr = mkpacked(ST_TYPE_I32, 3, run_slots, 1);
    st_tensor rg = on(&vr, dr.gpu);
    for (int pi = 0; pi < 3; pi++) {
        if (pi == 2 && !(flash_runs && pb.n_runs > 0)) break;
        const st_cuda_attn_path path = pi == 1 ? ST_CUDA_ATTN_PATH_EXACT : ST_CUDA_ATTN_PATH_AUTO;
        st_kv_pages pages = pages_g;
        if (pi == 2) pages.runs = runs_slots, pages.n_runs = run_slots, pages.runs_dev = &rg;
        poison_gpu(&dy); /* (the CPU buffer keeps the reference) */
        if (st_cuda_attention_path(g_gpu, &yg, &qg, &kg, &vg, &pgp, &pages, &p, path, &err) != ST_OK)
            test_die("cuda paged attention", &err);
        char *got = dual_fetch(&dy);
        /* the decode tokens (f32 paths) and the runs (the tensor-core prefill under AUTO) apart:
         * y is packed, the singles' rows first */
        const size_t split = (size_t)n_single * vy.t.nb[2];
        view v_single = vy, v_runs = vy;
        v_single.t.ne[2] = n_single;
        v_runs.t.ne[2] = M - n_single;
        const char *name = pi == 1 ? "paged attention exact" : pi == 2 ? "paged attention runs_dev" : "paged attention";
        if (n_single > 0) {
            cmp_result r = compare_f32(&v_single, dy.cpu, got, split);
            record(name, desc, &r, TOL_ATTENTION);
        }
        if (M > n_single) {
            cmp_result r = compare_f32(&v_runs, dy.cpu + split, got + split, dy.bytes - split);
            record(name, desc, &r, pi == 1 || !flash_runs ? TOL_ATTENTION : TOL_FLASH);
        }
        free(got);
    }
    dual_free(&dk), dual_free(&dv), dual_free(&dq), dual_free(&dy), dual_free(&dp), dual_free(&ds), dual_free(&dt);
    dual_free(&dr);
}

/* Decode tokens of n_seq paged sequences through the fused rope-attention (the rope, the
 * per-head norms and the store of the new k, v folded into the decode kernels) against the
 * CPU composite: outputs by the attention tolerance, F32 caches by the element tolerance
 * (the new rows), every other cache row untouched. */
static void test_rope_attention_paged(st_type ct, int64_t hd, int64_t Hq, int64_t Hk, bool norms, int32_t n_seq) {
    const int32_t n_blocks = 24, max_blocks = 4;
    paged_batch pb;
    paged_batch_make(&pb, n_seq, n_seq, n_blocks - 1, max_blocks);
    const int64_t M = pb.M, slots = (int64_t)n_blocks * ST_KV_BLOCK_TOKENS, R = (Hq + 2 * Hk) * hd;
    view vq = mkview(ST_TYPE_F32, hd, Hq, M, (size_t)hd * 4, (size_t)R * 4, 0);
    view vk = mkview(ST_TYPE_F32, hd, Hk, M, (size_t)hd * 4, (size_t)R * 4, (size_t)(Hq * hd) * 4);
    view vv = mkview(ST_TYPE_F32, hd, Hk, M, (size_t)hd * 4, (size_t)R * 4, (size_t)((Hq + Hk) * hd) * 4);
    view vall = mkpacked(ST_TYPE_F32, R, M, 1), vn = mkpacked(ST_TYPE_F32, hd, 1, 1), vy = mkpacked(ST_TYPE_F32, hd, Hq, M);
    dual dqkv = dual_new(view_bytes(&vall)), dqn = dual_new(view_bytes(&vn)), dkn = dual_new(view_bytes(&vn));
    dual dy = dual_new(view_bytes(&vy));
    dual_random_f32(&dqkv), dual_random_f32(&dqn), dual_random_f32(&dkn), dual_poison(&dy);
    view vkc, vvc;
    dual dkc = cache_new(ct, hd, Hk, slots, &vkc), dvc = cache_new(ct, hd, Hk, slots, &vvc);
    int32_t slot_of[64];
    for (int64_t m = 0; m < M; m++)
        slot_of[m] = (int32_t)st_kv_slot(pb.table + pb.seq[m] * max_blocks, pb.pos[m]);
    dual dp = ids_new(pb.pos, M), dsl = ids_new(slot_of, M), ds = ids_new(pb.seq, M);
    dual dt = ids_new(pb.table, (int64_t)n_seq * max_blocks);
    view vp = ids_view(M), vt = mkpacked(ST_TYPE_I32, max_blocks, n_seq, 1);
    st_rope_params rp = st_rope_params_default(ST_ROPE_MODE_NEOX, (int32_t)hd, 10000.0f);
    int32_t max_pos = 0;
    for (int64_t m = 0; m < M; m++) max_pos = pb.pos[m] > max_pos ? pb.pos[m] : max_pos;
    st_attn_params ap = {.n_kv = max_pos + 1, .scale = 1.0f / sqrtf((float)hd)};
    st_tensor q[2], k[2], v[2], qn[2], kn[2], kc[2], vc[2], pos[2], sl[2], sq[2], tb[2], y[2];
    st_kv_pages pages[2];
    st_fused_rope_attention op[2];
    for (int b = 0; b < 2; b++) {
        char *qkv = b ? dqkv.gpu : dqkv.cpu;
        q[b] = on(&vq, qkv), k[b] = on(&vk, qkv), v[b] = on(&vv, qkv);
        qn[b] = on(&vn, b ? dqn.gpu : dqn.cpu), kn[b] = on(&vn, b ? dkn.gpu : dkn.cpu);
        kc[b] = on(&vkc, b ? dkc.gpu : dkc.cpu), vc[b] = on(&vvc, b ? dvc.gpu : dvc.cpu);
        pos[b] = on(&vp, b ? dp.gpu : dp.cpu), sl[b] = on(&vp, b ? dsl.gpu : dsl.cpu);
        sq[b] = on(&vp, b ? ds.gpu : ds.cpu), tb[b] = on(&vt, b ? dt.gpu : dt.cpu);
        y[b] = on(&vy, b ? dy.gpu : dy.cpu);
        pages[b] = (st_kv_pages){.seq = &sq[b], .table = &tb[b], .n_single = M};
        st_fused_rope_store rs = {.q = &q[b], .k = &k[b], .v = &v[b], .eps = 1e-6f, .positions = &pos[b],
                                  .slots = &sl[b], .rope = &rp, .k_cache = &kc[b], .v_cache = &vc[b]};
        if (norms) rs.q_norm = &qn[b], rs.k_norm = &kn[b];
        op[b] = (st_fused_rope_attention){.rs = rs, .out = &y[b], .pages = &pages[b], .attn = &ap};
    }
    st_error err = {0};
    if (st_fused_rope_attention_composite(g_cpu, &op[0], &err) != ST_OK) test_die("cpu rope_attention", &err);
    const bool fused = st_cuda_attn_decode_rope_supported(g_gpu, &op[1]);
    if (st_cuda_rope_attention(g_gpu, &op[1], &err) != ST_OK) test_die("cuda paged rope_attention", &err);
    char desc[112];
    snprintf(desc, sizeof(desc), "%s hd=%lld Hq=%lld Hk=%lld%s seqs=%d n_kv=%lld %s", tname(ct), (long long)hd,
             (long long)Hq, (long long)Hk, norms ? " qk-norm" : "", n_seq, (long long)ap.n_kv,
             fused ? "(fused)" : "(composite)");
    char *got = dual_fetch(&dy);
    cmp_result r = compare_f32(&vy, dy.cpu, got, dy.bytes);
    record("paged rope_attention", desc, &r, TOL_ATTENTION);
    free(got);
    if (ct == ST_TYPE_F32) { /* the stored rows (roped k exactly as the CPU rounds it, to f32 order) */
        char *kg = dual_fetch(&dkc), *vgot = dual_fetch(&dvc);
        cmp_result rk = compare_f32(&vkc, dkc.cpu, kg, dkc.bytes), rv = compare_bytes(dvc.cpu, vgot, dvc.bytes);
        record("paged rope_attention k cache", desc, &rk, 1e-6);
        record("paged rope_attention v cache", desc, &rv, TOL_EXACT);
        free(kg), free(vgot);
    }
    dual_free(&dqkv), dual_free(&dqn), dual_free(&dkn), dual_free(&dy), dual_free(&dkc), dual_free(&dvc);
    dual_free(&dp), dual_free(&dsl), dual_free(&ds), dual_free(&dt);
}

/* ---- the largest logits of a row ------------------------------------------------------ */

/* The k largest logits of n rows of V and their log-sum-exp, CUDA against the CPU: the same
 * ids in the same order and the same values (they are copies); the log-sum-exp to the
 * rounding of a double sum taken in another order. The values go to page-locked host
 * memory, as the runner has them. levels: 0 for random logits, else rows of that many
 * distinct values: with 4, long runs of equal logits (more than the kernel's ranking
 * gathers: its bit-by-bit path); with thousands, ties among the entries it ranks. */
static void test_top_k(int64_t V, int64_t n, int32_t k, int levels) {
    view vl = mkpacked(ST_TYPE_F32, V, n, 1), vi = mkpacked(ST_TYPE_I32, k, n, 1), vv = mkpacked(ST_TYPE_F32, k + 1, n, 1);
    dual dl = dual_new(view_bytes(&vl)), di = dual_new(view_bytes(&vi)), dv = dual_new(view_bytes(&vv));
    if (levels > 0) {
        for (int64_t i = 0; i < V * n; i++) {
            const float f = (float)(rng_int(levels)) / (float)levels;
            memcpy(dl.host + 4 * i, &f, 4);
        }
        dual_upload(&dl);
    } else {
        dual_random_f32(&dl);
    }
    st_error err = {0};
    float *host_vals = NULL;
    if (g_gpu->iface->host_alloc(g_gpu, dv.bytes, (void **)&host_vals, &err) != ST_OK) test_die("host_alloc", &err);
    st_tensor lc = on(&vl, dl.cpu), lg = on(&vl, dl.gpu), ic = on(&vi, di.cpu), ig = on(&vi, di.gpu);
    st_tensor vc = on(&vv, dv.cpu), vg = on(&vv, (char *)host_vals);
    g_cpu->iface->top_k(g_cpu, &ic, &vc, &lc, k);
    g_gpu->iface->top_k(g_gpu, &ig, &vg, &lg, k);
    char *ids = dual_fetch(&di); /* (synchronizes: host_vals is written) */
    char desc[96];
    if (levels > 0) snprintf(desc, sizeof(desc), "V=%lld n=%lld k=%d, %d values", (long long)V, (long long)n, k, levels);
    else snprintf(desc, sizeof(desc), "V=%lld n=%lld k=%d", (long long)V, (long long)n, k);
    cmp_result ri = compare_bytes(di.cpu, ids, di.bytes);
    record("top_k ids", desc, &ri, TOL_EXACT);
    cmp_result rv = {0}, rl = {0};
    for (int64_t r = 0; r < n; r++) {
        const float *a = (const float *)(dv.cpu + r * vv.t.nb[1]), *b = host_vals + r * (k + 1);
        for (int32_t i = 0; i < k; i++) rv.bad += a[i] != b[i];
        const double e = fabs((double)a[k] - (double)b[k]) / fmax(1.0, fabs((double)a[k]));
        if (!(e <= rl.nerr)) rl.nerr = isnan(e) ? INFINITY : e;
    }
    rl.maxerr = rl.nerr;
    record("top_k values", desc, &rv, TOL_EXACT);
    record("top_k log-sum-exp", desc, &rl, 1e-6);
    free(ids);
    g_gpu->iface->host_free(g_gpu, host_vals);
    dual_free(&dl), dual_free(&di), dual_free(&dv);
}

/* ---- a draw from each whole row -------------------------------------------------------- */

/* Whether token g is a right draw at u from the n tokens order[0 .. n) (NULL: ids 0 .. n)
 * whose weights are w[token] (0 for a token the chain leaves out): g's interval of the
 * host's running sum in that order (one token after another, as st_sample_draw_at) holds
 * the target, widened by eps. */
static bool draw_lands(const double *w, const int32_t *order, int64_t n, double u, double eps, int32_t g) {
    double total = 0.0, before = 0.0, after = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t t = order ? order[i] : i;
        if (t == g) before = total, after = total + w[t];
        total += w[t];
    }
    const double target = u * total;
    return after > before && before - eps <= target && target < after + eps;
}

static const float *g_sort_row; /* the row sort_desc orders by */

static int sort_desc(const void *a, const void *b) {
    const int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    const float x = g_sort_row[i], y = g_sort_row[j];
    return x > y ? -1 : x < y ? 1 : (i > j) - (i < j);
}

/* Whether token g is a right draw from row x [V] for d to the rounding of the sums:
 * draw_lands for the host's chain (the penalties, then in sorted order the top-k), the
 * target widened by 1e-12 of the total and, where the device sums fixed-point weights (a
 * top-k or top-p), by their rounding (2^-40 of the largest weight a token), for any top-p
 * cut whose probability lies within 1e-6 of top-p (the host rounds each probability to
 * float). The device sums in another order, so it may land on a neighbour only where the
 * target (or the cut) lies that close to a boundary. */
static bool draw_is_right(const float *x, int64_t V, const st_row_draw *d, int32_t g) {
    st_token_prob *c = malloc((size_t)V * sizeof(st_token_prob));
    double *w = malloc((size_t)V * sizeof(double)), *kept = calloc((size_t)V, sizeof(double));
    int32_t *order = malloc((size_t)V * sizeof(int32_t));
    float *y = malloc((size_t)V * sizeof(float));
    if (!c || !w || !kept || !order || !y) test_die("out of memory", NULL);
    st_candidates cand = {.data = c};
    st_candidates_from_logits(&cand, x, V);
    st_sample_penalties_counted(&cand, d->penalized, d->n_penalized, d->repeat_penalty, d->frequency_penalty,
                                d->presence_penalty);
    float mx = -INFINITY;
    for (int64_t t = 0; t < V; t++) y[t] = c[t].logit, mx = y[t] > mx ? y[t] : mx;
    const float temp = d->temp;
    const double threshold = d->min_p > 0.0f ? (double)mx + log((double)d->min_p) : -INFINITY, m = (double)(mx / temp);
    const double u = st_uniform_from_words(d->u[0], d->u[1]);
    double total = 0.0;
    for (int64_t t = 0; t < V; t++) {
        w[t] = (double)y[t] >= threshold ? exp((double)(y[t] / temp) - m) : 0.0;
        total += w[t];
    }
    const int64_t n_k = d->top_k > 0 && d->top_k < V ? d->top_k : V;
    bool right = false;
    if (n_k == V && !(d->top_p < 1.0f)) {
        right = draw_lands(w, NULL, V, u, 1e-12 * total, g);
    } else {
        for (int64_t t = 0; t < V; t++) order[t] = (int32_t)t;
        g_sort_row = y;
        qsort(order, (size_t)V, sizeof(int32_t), sort_desc);
        const double eps = (double)V * 0x1p-40;
        if (!(d->top_p < 1.0f)) {
            double kept_total = 0.0;
            for (int64_t i = 0; i < n_k; i++) kept_total += w[order[i]];
            right = draw_lands(w, order, n_k, u, 1e-12 * kept_total + eps, g);
        } else {
            double psum = 0.0, cum = 0.0;
            for (int64_t i = 0; i < n_k; i++) psum += exp((double)y[order[i]] - (double)mx);
            for (int64_t n = 0; n < n_k && !right; n++) { /* the cut keeping n + 1 tokens */
                if (n > 0 && cum > (double)d->top_p + 1e-6) break; /* an earlier cut clearly reached top-p */
                const int32_t t = order[n];
                kept[t] = w[t];
                cum += exp((double)y[t] - (double)mx) / psum;
                if (cum < (double)d->top_p - 1e-6) continue;
                double kept_total = 0.0;
                for (int64_t i = 0; i <= n; i++) kept_total += kept[order[i]];
                right = draw_lands(kept, order, n + 1, u, 1e-12 * kept_total + eps, g);
            }
        }
    }
    free(c), free(w), free(kept), free(order), free(y);
    return right;
}

/* Row r's draw in a round: temperatures, min-p, top-p (off, 0.9, 0.5), top-k (off, 50,
 * 1 = greedy) and penalties on 24 tokens (counts 1-3, every fourth row; negative
 * frequency on some) in turn; counted: [2 ST_DRAW_MAX_PENALIZED] the row's pairs. */
static st_row_draw row_draw(int64_t V, int64_t r, int round, int32_t *counted) {
    const float temps[] = {1.0f, 0.7f, 1.5f}, min_ps[] = {0.0f, 0.05f, 0.3f}, top_ps[] = {1.0f, 0.9f, 0.5f};
    const int32_t top_ks[] = {0, 0, 50, 0, 1};
    st_row_draw d = {.temp = temps[(r + round) % 3], .min_p = min_ps[(r / 3 + round) % 3],
                     .top_p = top_ps[(r / 9 + round) % 3], .top_k = top_ks[(r / 2 + round) % 5],
                     .repeat_penalty = 1.0f};
    d.u[0] = (uint32_t)(rng_next() >> 37), d.u[1] = (uint32_t)(rng_next() >> 38);
    if ((r + round) % 4 == 3 && V >= 24) {
        d.repeat_penalty = 1.3f, d.frequency_penalty = r % 8 == 3 ? -0.4f : 0.4f, d.presence_penalty = 0.2f;
        const int64_t step = V / 24;
        for (int i = 0; i < 24; i++) counted[2 * i] = (int32_t)(i * step + rng_int((int32_t)step)), counted[2 * i + 1] = 1 + i % 3;
        d.n_penalized = 24, d.penalized = counted;
    }
    return d;
}

/* n rows of V logits (uniform in [-spread, spread), a few rows of -inf runs; with ties,
 * rounded to quarters, so that most logits equal many others) sampled on CUDA and on the
 * CPU (the host sampler's chain), rounds times with fresh uniforms, over row_draw's chains
 * (top-k and top-p cut and draw in sorted order): the same token, or (counted as bad
 * otherwise) a right draw by draw_is_right; the logit given the token's before penalties;
 * the rows as they were (the device puts penalized logits back); a row holding a NaN or
 * +inf -1, one of -inf only -2, a row of temperature 0 left as it was. The outputs in
 * page-locked host memory, as the runner has them. */
static void test_draw(int64_t V, int64_t n, float spread, bool ties, int rounds) {
    const int64_t P = 2 * ST_DRAW_MAX_PENALIZED;
    view vl = mkpacked(ST_TYPE_F32, V, n, 1), vp = mkpacked(ST_TYPE_F32, 6, n, 1), vw = mkpacked(ST_TYPE_I32, 4, n, 1);
    view vn = mkpacked(ST_TYPE_I32, P, n, 1), vi = mkpacked(ST_TYPE_I32, n, 1, 1), vd = mkpacked(ST_TYPE_F32, n, 1, 1);
    dual dl = dual_new(view_bytes(&vl)), dp = dual_new(view_bytes(&vp)), dw = dual_new(view_bytes(&vw));
    dual dn = dual_new(view_bytes(&vn)), di = dual_new(view_bytes(&vi)), dd = dual_new(view_bytes(&vd));
    float *x = (float *)dl.host;
    for (int64_t i = 0; i < V * n; i++) x[i] = ties ? roundf(4.0f * spread * rng_f32()) / 4.0f : spread * rng_f32();
    for (int64_t r = 1; r < n; r += 5) /* runs of -inf */
        for (int64_t t = rng_int((int32_t)V); t < V; t += 1 + rng_int(3)) x[r * V + t] = -INFINITY;
    const bool special = n >= 8 && V >= 4;
    if (special) {
        x[2 * V + V / 2] = NAN;
        x[3 * V + V - 1] = INFINITY;
        for (int64_t t = 0; t < V; t++) x[4 * V + t] = -INFINITY;
    }
    dual_upload(&dl);
    st_error err = {0};
    int32_t *ids_g = NULL;
    float *drawn_g = NULL;
    st_row_draw *d = malloc((size_t)n * sizeof(st_row_draw));
    if (!d) test_die("out of memory", NULL);
    if (g_gpu->iface->host_alloc(g_gpu, di.bytes, (void **)&ids_g, &err) != ST_OK ||
        g_gpu->iface->host_alloc(g_gpu, dd.bytes, (void **)&drawn_g, &err) != ST_OK)
        test_die("host_alloc", &err);
    cmp_result rid = {0}, rlogit = {0}, rcode = {0};
    int64_t differ = 0, drawn_rows = 0;
    for (int round = 0; round < rounds; round++) {
        float *pp = (float *)dp.host;
        int32_t *ww = (int32_t *)dw.host, *nn = (int32_t *)dn.host;
        for (int64_t r = 0; r < n; r++) {
            d[r] = row_draw(V, r, round, nn + P * r);
            if (r == 6 && n > 6) d[r].temp = 0.0f; /* row 6 not drawn */
            float *pr = pp + 6 * r;
            int32_t *wr = ww + 4 * r;
            pr[0] = d[r].temp, pr[1] = d[r].min_p, pr[2] = d[r].top_p;
            pr[3] = d[r].repeat_penalty, pr[4] = d[r].frequency_penalty, pr[5] = d[r].presence_penalty;
            memcpy(wr, d[r].u, sizeof(d[r].u));
            wr[2] = d[r].top_k, wr[3] = d[r].n_penalized;
        }
        dual_upload(&dp), dual_upload(&dw), dual_upload(&dn);
        dual_poison(&di), dual_poison(&dd);
        for (int64_t r = 0; r < n; r++) ids_g[r] = -7, drawn_g[r] = -7.0f;
        st_tensor lc = on(&vl, dl.cpu), lg = on(&vl, dl.gpu), pc = on(&vp, dp.cpu), pg = on(&vp, dp.gpu);
        st_tensor wc = on(&vw, dw.cpu), wg = on(&vw, dw.gpu), nc = on(&vn, dn.cpu), ng = on(&vn, dn.gpu);
        st_tensor ic = on(&vi, di.cpu), dc = on(&vd, dd.cpu);
        st_tensor ig = on(&vi, (char *)ids_g), dg = on(&vd, (char *)drawn_g);
        g_cpu->iface->draw(g_cpu, &ic, &dc, &lc, &pc, &wc, &nc);
        g_gpu->iface->draw(g_gpu, &ig, &dg, &lg, &pg, &wg, &ng);
        if (g_gpu->iface->synchronize(g_gpu, &err) != ST_OK) test_die("cuda synchronize after draw", &err);
        const int32_t *ids_c = (const int32_t *)di.cpu;
        const float *drawn_c = (const float *)dd.cpu;
        for (int64_t r = 0; r < n; r++) {
            const float *row = x + r * V;
            if (!(d[r].temp > 0.0f)) { /* untouched */
                rcode.bad += ids_g[r] != -7 || drawn_g[r] != -7.0f;
                continue;
            }
            if (ids_c[r] < 0 || ids_g[r] < 0) {
                rcode.bad += ids_c[r] != ids_g[r];
                continue;
            }
            drawn_rows++;
            if (ids_g[r] != ids_c[r]) {
                differ++;
                rid.bad += !draw_is_right(row, V, &d[r], ids_g[r]);
            }
            rlogit.bad += drawn_g[r] != row[ids_g[r]] || drawn_c[r] != row[ids_c[r]];
        }
        /* the rows on the device as they were: every penalized logit put back */
        char *back = dual_fetch(&dl);
        rcode.bad += memcmp(back, x, dl.bytes) != 0;
        free(back);
    }
    if (special) { /* the codes, once more by hand: the CPU's are tested in test_sample */
        rcode.bad += d[2].temp > 0.0f && ids_g[2] != -1;
        rcode.bad += d[3].temp > 0.0f && ids_g[3] != -1;
        rcode.bad += d[4].temp > 0.0f && ids_g[4] != -2;
    }
    char desc[128];
    snprintf(desc, sizeof(desc), "V=%lld n=%lld spread %g%s x%d: %lld draws, %lld differ", (long long)V, (long long)n,
             (double)spread, ties ? " ties" : "", rounds, (long long)drawn_rows, (long long)differ);
    rid.nerr = rid.maxerr = drawn_rows > 0 ? (double)differ / (double)drawn_rows : 1.0;
    rid.bad += drawn_rows == 0;
    /* The share of draws that differ (each one checked right above). The host rounds each
     * top-p probability to float: where a row's tokens share a few logits, the roundings
     * of a class are all alike, so its running sum drifts by up to 2^-24 of the mass at
     * the cut instead of averaging out, and a cut in a flat class of tokens of probability
     * ~1e-6 moves by one token in a few rows in a hundred (the draw after it then lands
     * on a neighbour about half the time). */
    record("draw ids", desc, &rid, ties ? 5e-2 : 1e-3);
    record("draw logits", desc, &rlogit, TOL_EXACT);
    record("draw codes", desc, &rcode, TOL_EXACT);
    g_gpu->iface->host_free(g_gpu, ids_g);
    g_gpu->iface->host_free(g_gpu, drawn_g);
    free(d);
    dual_free(&dl), dual_free(&dp), dual_free(&dw), dual_free(&dn), dual_free(&di), dual_free(&dd);
}

/* ---- the runner ------------------------------------------------------------------------ */

typedef struct runner_pair {
    st_model *m[2];      /* [0] CPU, [1] CUDA */
    st_kv_pool *pool[2];
    st_runner *r[2];
    st_kv_pool *pool_c;  /* a CUDA runner of candidates, fed the same batches */
    st_runner *r_c;
} runner_pair;

#define RUNNER_CANDIDATES 16

static void runner_pair_init(runner_pair *rp, const char *path, st_type kv, int32_t n_blocks, int32_t max_seqs,
                             int32_t max_blocks) {
    st_error err = {0};
    st_backend *be[2] = {g_cpu, g_gpu};
    for (int b = 0; b < 2; b++) {
        st_model_load_options lo = {.policy = {.mode = ST_PAD_MODE_ON, .alias = 128, .pad = 64}};
        if (st_model_load(path, be[b], &lo, &rp->m[b], &err) != ST_OK) test_die("model load", &err);
        if (st_kv_pool_init(rp->m[b], n_blocks, kv, &rp->pool[b], &err) != ST_OK) test_die("kv pool", &err);
        const st_runner_options ro = {.max_tokens = 64, .max_seqs = max_seqs, .max_blocks = max_blocks};
        if (st_runner_init(rp->m[b], rp->pool[b], &ro, &rp->r[b], &err) != ST_OK) test_die("runner", &err);
    }
    const st_runner_options rc = {.max_tokens = 64, .max_seqs = max_seqs, .max_blocks = max_blocks,
                                  .n_candidates = RUNNER_CANDIDATES};
    if (st_kv_pool_init(rp->m[1], n_blocks, kv, &rp->pool_c, &err) != ST_OK) test_die("kv pool", &err);
    if (st_runner_init(rp->m[1], rp->pool_c, &rc, &rp->r_c, &err) != ST_OK) test_die("runner (candidates)", &err);
}

static void runner_pair_free(runner_pair *rp) {
    st_runner_free(rp->r_c);
    st_kv_pool_free(rp->pool_c);
    for (int b = 0; b < 2; b++) {
        st_runner_free(rp->r[b]);
        st_kv_pool_free(rp->pool[b]);
        st_model_free(rp->m[b]);
    }
}

/* One batch through both runners: the logits of its n_out rows compared (to tol), and
 * their argmax. */
static void runner_step(runner_pair *rp, const st_batch *b, const char *name, const char *what, double tol) {
    st_error err = {0};
    const float *lc = NULL, *lg = NULL;
    if (st_runner_eval(rp->r[0], b, &lc, &err) != ST_OK) test_die("cpu runner", &err);
    if (st_runner_eval(rp->r[1], b, &lg, &err) != ST_OK) test_die("cuda runner", &err);
    const int64_t V = rp->m[0]->hp.n_vocab, n_out = b->out ? b->n_out : b->n_tokens;
    view vl = mkpacked(ST_TYPE_F32, V, n_out, 1);
    cmp_result r = compare_f32(&vl, (const char *)lc, (const char *)lg, (size_t)(V * n_out) * 4);
    int64_t argmax_diff = 0;
    for (int64_t i = 0; i < n_out; i++) {
        int64_t ac = 0, ag = 0;
        for (int64_t t = 1; t < V; t++) {
            if (lc[i * V + t] > lc[i * V + ac]) ac = t;
            if (lg[i * V + t] > lg[i * V + ag]) ag = t;
        }
        argmax_diff += ac != ag;
    }
    char desc[128];
    snprintf(desc, sizeof(desc), "%s %s: %lld tokens, %lld singles, %lld logits rows, argmax differs in %lld", name,
             what, (long long)b->n_tokens, (long long)b->n_single, (long long)n_out, (long long)argmax_diff);
    record("runner logits", desc, &r, tol);
    /* the runner of candidates (its whole rows asked for the first logits row): each row's
     * first candidate is its argmax on the CPU, every candidate's value is the CPU logit of
     * its id to the model tolerance, and the whole row asked for matches */
    st_batch bc = *b;
    const int32_t first = 0;
    bc.full = &first, bc.n_full = n_out > 0 ? 1 : 0;
    st_runner_output o;
    if (st_runner_eval_out(rp->r_c, &bc, &o, &err) != ST_OK) test_die("cuda runner (candidates)", &err);
    cmp_result rc = {0};
    double worst = 0.0, scale = 0.0;
    for (int64_t i = 0; i < n_out; i++) {
        int64_t ac = 0;
        for (int64_t t = 1; t < V; t++)
            if (lc[i * V + t] > lc[i * V + ac]) ac = t;
        for (int64_t t = 0; t < V; t++) scale = fmax(scale, fabs(lc[i * V + t]));
        rc.bad += o.ids[i * o.k] != ac;
        for (int32_t j = 0; j < o.k; j++)
            worst = fmax(worst, fabs((double)o.vals[i * (o.k + 1) + j] - lc[i * V + o.ids[i * o.k + j]]));
    }
    rc.nerr = rc.maxerr = scale > 0 ? worst / scale : worst;
    record("runner candidates", desc, &rc, tol);
    view v1 = mkpacked(ST_TYPE_F32, V, 1, 1);
    cmp_result rf = compare_f32(&v1, (const char *)lc, (const char *)o.logits, (size_t)V * 4);
    if (n_out > 0) record("runner candidates full row", desc, &rf, tol);

    /* the same batch again with every row drawn on the device (temperature 0.9, every other
     * row with min-p 0.05, every third with top-p 0.8) and every whole row asked for: each token the one a sampler of the
     * same seed draws on the host from the row that came back (draw_is_right where not) */
    if (n_out == 0) return;
    int32_t full[64];
    st_row_draw draws[64];
    st_sampler *host[64];
    for (int64_t i = 0; i < n_out; i++) {
        st_sampler_params sp = st_sampler_params_default();
        sp.temp = 0.9f, sp.top_k = 0, sp.top_p = i % 3 == 2 ? 0.8f : 1.0f, sp.min_p = i % 2 ? 0.05f : 0.0f;
        sp.seed = 100 + (uint64_t)i;
        st_sampler *dev = NULL;
        if (st_sampler_init(&sp, V, &host[i], &err) != ST_OK || st_sampler_init(&sp, V, &dev, &err) != ST_OK)
            test_die("sampler", &err);
        st_sampler_next_draw(dev, &draws[i]);
        st_sampler_free(dev);
        full[i] = (int32_t)i;
    }
    bc.full = full, bc.n_full = n_out, bc.draw = draws;
    if (st_runner_eval_out(rp->r_c, &bc, &o, &err) != ST_OK) test_die("cuda runner (draws)", &err);
    cmp_result rd = {0};
    for (int64_t i = 0; i < n_out; i++) {
        int32_t want = -1;
        if (st_sampler_sample(host[i], o.logits + i * V, &want, &err) != ST_OK) test_die("host sample", &err);
        rd.bad += o.drawn[i] != want && !draw_is_right(o.logits + i * V, V, &draws[i], o.drawn[i]);
        rd.bad += o.drawn[i] >= 0 && o.drawn_logits[i] != o.logits[i * V + o.drawn[i]];
        st_sampler_free(host[i]);
    }
    record("runner draws", desc, &rd, TOL_EXACT);
}

/* Six sequences of a tiny model over a cache of type kv: prompts in chunks (some rows
 * wanting logits, some not, and decode tokens beside them), then four mixed steps of one
 * padded shape (four decode tokens beside runs of two sequences, 10 tokens in all, split
 * differently each step: the graph kept, and on CUDA recorded and replayed with new runs
 * where the tensor-core prefill reads them from the device), then decode steps of all six
 * (padded to 8) and of five. */
static void test_runner(const char *preset, st_type kv) {
    char path[256];
    snprintf(path, sizeof(path), "/tmp/stride-batch-%d-%s.gguf", (int)getpid(), preset);
    st_error err = {0};
    const st_synth_options so = {.weight_type = ST_TYPE_F32, .seed = 7};
    if (st_synth_write(st_synth_find_preset(preset), &so, path, &err) != ST_OK) test_die("synth", &err);
    enum { N_SEQ = 6, MAX_BLOCKS = 3 };
    runner_pair rp;
    runner_pair_init(&rp, path, kv, 24, N_SEQ, MAX_BLOCKS);
    const double tol = kv == ST_TYPE_F16 ? TOL_MODEL_F16_KV : TOL_MODEL_F32;
    char name[64];
    snprintf(name, sizeof(name), "%s %s cache", preset, tname(kv));
    const int64_t V = rp.m[0]->hp.n_vocab;
    int32_t table[N_SEQ * MAX_BLOCKS], len[N_SEQ] = {0};
    for (int i = 0; i < N_SEQ * MAX_BLOCKS; i++) table[i] = 23 - i; /* every sequence its own blocks, descending */
    const int32_t prompt[N_SEQ] = {70, 5, 33, 1, 90, 12};
    int32_t tok[64], pos[64], seq[64], out[64];
    /* step 1: every prompt's first up-to-20 tokens; logits of the rows that end a prompt */
    /* steps 2-3: the rest of the prompts, with the finished ones decoding beside them */
    for (int step = 0; step < 6; step++) {
        int64_t n = 0, n_single = 0, n_out = 0;
        /* decode tokens first: the sequences whose prompt is done */
        for (int s = 0; s < N_SEQ && step > 0; s++)
            if (len[s] >= prompt[s] && len[s] < MAX_BLOCKS * ST_KV_BLOCK_TOKENS) {
                tok[n] = rng_int((int32_t)V), pos[n] = len[s]++, seq[n] = s, out[n_out++] = (int32_t)n, n++, n_single++;
            }
        for (int s = 0; s < N_SEQ; s++) {
            if (len[s] >= prompt[s]) continue;
            const int32_t take = prompt[s] - len[s] < 20 ? prompt[s] - len[s] : 20;
            for (int32_t i = 0; i < take && n < 64; i++) {
                tok[n] = rng_int((int32_t)V), pos[n] = len[s]++, seq[n] = s;
                if (len[s] == prompt[s]) out[n_out++] = (int32_t)n;
                n++;
            }
        }
        if (n == 0) break;
        st_batch b = {.n_tokens = n, .tokens = tok, .pos = pos, .seq = seq, .n_single = n_single,
                      .block_table = table, .n_seq = N_SEQ, .max_blocks = MAX_BLOCKS, .out = out, .n_out = n_out};
        char what[32];
        snprintf(what, sizeof(what), "step %d", step + 1);
        runner_step(&rp, &b, name, what, tol);
    }
    /* mixed steps of one padded shape: sequences 0-3 decode, 4 and 5 take runs of a and
     * 10 - a tokens */
    const int32_t split[4] = {3, 6, 2, 5};
    st_graph *first = NULL;
    cmp_result kept = {0};
    for (int step = 0; step < 4; step++) {
        int64_t n = 0, n_out = 0;
        for (int s = 0; s < 4; s++)
            tok[n] = rng_int((int32_t)V), pos[n] = len[s]++, seq[n] = s, out[n_out++] = (int32_t)n, n++;
        for (int s = 4; s < 6; s++) {
            const int32_t take = s == 4 ? split[step] : 10 - split[step];
            for (int32_t i = 0; i < take; i++) tok[n] = rng_int((int32_t)V), pos[n] = len[s]++, seq[n] = s, n++;
            out[n_out++] = (int32_t)(n - 1);
        }
        st_batch b = {.n_tokens = n, .tokens = tok, .pos = pos, .seq = seq, .n_single = 4,
                      .block_table = table, .n_seq = N_SEQ, .max_blocks = MAX_BLOCKS, .out = out, .n_out = n_out};
        st_graph *g = NULL; /* the CUDA runner's graph for it: one, replayed */
        if (st_runner_prepare(rp.r[1], &b, &g, &err) != ST_OK) test_die("cuda runner (prepare)", &err);
        if (step == 0) first = g;
        kept.bad += g != first || !g->replay;
        char what[32];
        snprintf(what, sizeof(what), "mixed %d", step + 1);
        runner_step(&rp, &b, name, what, tol);
    }
    record("runner mixed steps one graph", name, &kept, TOL_EXACT);
    /* decode steps only: six sequences (a bucket of 8: two padding tokens), then five */
    for (int step = 0; step < 4; step++) {
        const int n_seq = step < 2 ? N_SEQ : N_SEQ - 1;
        int64_t n = 0;
        for (int s = 0; s < n_seq; s++) tok[n] = rng_int((int32_t)V), pos[n] = len[s]++, seq[n] = s, n++;
        st_batch b = {.n_tokens = n, .tokens = tok, .pos = pos, .seq = seq, .n_single = n,
                      .block_table = table, .n_seq = N_SEQ, .max_blocks = MAX_BLOCKS};
        char what[32];
        snprintf(what, sizeof(what), "decode %d", step + 1);
        runner_step(&rp, &b, name, what, tol);
    }
    runner_pair_free(&rp);
    unlink(path);
}

/* ---- the engine ------------------------------------------------------------------------ */

/* What the requests of one engine run generated. */
#define ENGINE_REQS 8

typedef struct engine_run {
    int32_t tokens[ENGINE_REQS][24];
    float logprob[ENGINE_REQS][24];
    int n[ENGINE_REQS];
    st_engine_stats stats; /* at the end */
} engine_run;

/* Eight requests through an engine of four rows on CUDA to the end: three at temperature 1
 * without top-k or top-p (drawn on the device; one with min-p, one with
 * log-probabilities), two with top-p 0.9 and 0.3 (their candidates where they settle the
 * cut, else sampled on the device after the step), two with penalties (greedy with a
 * repetition penalty, top-k 20 with frequency and presence penalties) and one at
 * temperature 0.8 with a frequency penalty and no top-k (the three sampled on the device
 * with the step); host: the same requests
 * keeping every logits row, which samples them on the host. warm: the engine warmed up
 * first. */
static void engine_generate(st_model *m, bool host, bool warm, engine_run *out) {
    st_engine_options eo = st_engine_options_default();
    eo.n_ctx = 256, eo.n_parallel = 4, eo.n_blocks = 24, eo.max_batch_tokens = 64, eo.kv_type = ST_TYPE_F32;
    st_engine *e = NULL;
    st_error err = {0};
    if (st_engine_init(m, &eo, &e, &err) != ST_OK) test_die("engine", &err);
    if (warm && st_engine_warmup(e, &err) != ST_OK) test_die("engine warm-up", &err);
    int32_t prompt[64];
    for (int i = 0; i < 64; i++) prompt[i] = (int32_t)((7 * i + 3) % m->hp.n_vocab);
    for (int q = 0; q < ENGINE_REQS; q++) {
        st_request_params rp = st_request_params_default();
        rp.prompt = prompt + q, rp.n_prompt = 20 + 4 * q;
        rp.sampling.temp = 1.0f, rp.sampling.top_k = 0, rp.sampling.top_p = 1.0f;
        rp.sampling.min_p = q == 2 ? 0.05f : 0.0f, rp.sampling.seed = 31 + (uint64_t)q;
        if (q == 3 || q == 4) rp.sampling.top_p = q == 3 ? 0.9f : 0.3f;
        if (q == 5) rp.sampling.temp = 0.0f, rp.sampling.repeat_penalty = 1.3f;
        if (q == 6) rp.sampling.top_k = 20, rp.sampling.frequency_penalty = 0.5f, rp.sampling.presence_penalty = 0.3f;
        if (q == 7) rp.sampling.temp = 0.8f, rp.sampling.frequency_penalty = 0.5f;
        rp.max_tokens = 24;
        rp.logprobs = q == 1;
        rp.logits = host ? ST_REQUEST_LOGITS_EVERY : ST_REQUEST_LOGITS_NONE;
        int64_t id = 0;
        if (st_engine_add(e, &rp, &id, &err) != ST_OK) test_die("engine add", &err);
    }
    memset(out, 0, sizeof(*out));
    while (st_engine_pending(e) > 0) {
        if (st_engine_step(e, &err) != ST_OK) test_die("engine step", &err);
        st_engine_event ev;
        while (st_engine_poll(e, &ev)) {
            if (ev.token < 0) test_die(ev.message ? ev.message : "engine request failed", NULL);
            const int q = (int)ev.id - 1;
            out->logprob[q][out->n[q]] = ev.logprob;
            out->tokens[q][out->n[q]++] = ev.token;
        }
    }
    st_engine_get_stats(e, &out->stats);
    st_engine_free(e);
}

/* The engine on CUDA samples on the device for requests at OpenAI's default sampling and
 * with penalties, and cuts top-p on the candidates where they settle it (else on the
 * device after the step): the same tokens as the host sampler gives them from the same
 * rows (a request keeping every row samples on the host), and the log-probability of each
 * drawn token (which may lie outside the candidates) the host's to f32 rounding. An engine warmed up first (its decode steps
 * recorded over padding tokens) gives the same tokens as one that was not. */
static void test_engine_draws(const char *preset) {
    char path[256];
    snprintf(path, sizeof(path), "/tmp/stride-batch-%d-%s.gguf", (int)getpid(), preset);
    st_error err = {0};
    const st_synth_options so = {.weight_type = ST_TYPE_F32, .seed = 9};
    if (st_synth_write(st_synth_find_preset(preset), &so, path, &err) != ST_OK) test_die("synth", &err);
    st_model_load_options lo = {.policy = {.mode = ST_PAD_MODE_ON, .alias = 128, .pad = 64}};
    st_model *m = NULL;
    if (st_model_load(path, g_gpu, &lo, &m, &err) != ST_OK) test_die("model load", &err);
    engine_run dev, host, warm;
    engine_generate(m, false, false, &dev);
    engine_generate(m, true, false, &host);
    engine_generate(m, false, true, &warm);
    cmp_result rt = {0}, rl = {0}, rw = {0};
    int64_t n = 0;
    for (int q = 0; q < ENGINE_REQS; q++) {
        rt.bad += dev.n[q] != host.n[q] || dev.n[q] != 24;
        rw.bad += warm.n[q] != dev.n[q];
        for (int i = 0; i < dev.n[q] && i < host.n[q]; i++, n++) {
            rt.bad += dev.tokens[q][i] != host.tokens[q][i];
            rw.bad += dev.tokens[q][i] != warm.tokens[q][i];
            const double d = fabs((double)dev.logprob[q][i] - (double)host.logprob[q][i]);
            if (q == 1 && !(d <= rl.nerr)) rl.nerr = rl.maxerr = isnan(d) ? INFINITY : d;
        }
    }
    char desc[96];
    snprintf(desc, sizeof(desc), "%s: 8 requests (drawn, top-p, penalties), %lld tokens", preset, (long long)n);
    record("engine draws tokens", desc, &rt, TOL_EXACT);
    record("engine draws logprobs", desc, &rl, 1e-5);
    record("engine warmed up", desc, &rw, TOL_EXACT);
    /* where the tokens were sampled: each kind on the device run (the drawn requests on the
     * device with the step: the three at temperature 1 and the three penalized; the two
     * top-p from their candidates, or drawn on the device after the step where the
     * candidates do not settle the cut: top-p 0.9 on the synthetic model's flat rows never),
     * every one from rows on the host run */
    const st_engine_stats *sd = &dev.stats, *sh = &host.stats;
    cmp_result rs = {0};
    rs.bad += sd->tokens_drawn != 6 * 24 + sd->rows_drawn_late || sd->rows_drawn_late < 24 ||
              sd->tokens_from_candidates != 2 * 24 - sd->rows_drawn_late || sd->tokens_from_rows != 0;
    rs.bad += sh->tokens_from_rows != sh->tokens_out || sh->tokens_drawn != 0 || sh->rows_drawn_late != 0;
    char where[192];
    snprintf(where, sizeof(where), "%s: device run %lld candidates / %lld drawn (%lld after the step) / %lld rows",
             preset, (long long)sd->tokens_from_candidates, (long long)sd->tokens_drawn,
             (long long)sd->rows_drawn_late, (long long)sd->tokens_from_rows);
    record("engine token sources", where, &rs, TOL_EXACT);
    st_model_free(m);
    unlink(path);
}

static void run_all(void) {
    for (int ci = 0; ci < 2; ci++) {
        const st_type ct = ci ? ST_TYPE_F32 : ST_TYPE_F16;
        test_attention_paged(ct, 64, 8, 2, 6, 3, 0, false);
        test_attention_paged(ct, 64, 32, 8, 9, 9, 0, false);    /* decode only: the warps kernel where bounds allow */
        test_attention_paged(ct, 128, 16, 8, 7, 0, 0, false);   /* runs only */
        test_attention_paged(ct, 128, 32, 4, 8, 4, 100, false); /* a window */
        test_attention_paged(ct, 256, 8, 1, 5, 2, 0, false);
        test_attention_paged(ct, 96, 6, 2, 5, 2, 0, false);     /* the exact kernel */
        test_attention_paged(ct, 64, 32, 8, 40, 2, 0, true);    /* 38 runs: two flash launches */
        for (int norms = 0; norms <= 1; norms++) {
            test_rope_attention_paged(ct, 64, 32, 8, norms, 7);
            test_rope_attention_paged(ct, 128, 16, 8, norms, 5);
            test_rope_attention_paged(ct, 256, 8, 4, norms, 3);
        }
    }
    test_top_k(1000, 3, 1, 0);
    test_top_k(1000, 3, 64, 0);
    test_top_k(128256, 5, 40, 0);
    test_top_k(262144, 2, 256, 0);
    test_top_k(5003, 4, 64, 4);
    test_top_k(5003, 2, 1, 4);
    test_top_k(20000, 2, 32, 4);      /* thousands of ties of the k-th value in every tile */
    test_top_k(128256, 3, 64, 5000);  /* ties among the ranked entries of every level */
    test_top_k(4096 + 10, 3, 64, 0);  /* a last tile of fewer entries than k */
    test_top_k(128256, 130, 64, 0);   /* the engine's decode step at B = 130 */
    test_top_k(262144 + 7, 1, 256, 4); /* three levels of tiles, ties */
    test_draw(1, 1, 1.0f, false, 4);
    test_draw(1000, 64, 1.0f, false, 8);
    test_draw(1000, 64, 12.0f, false, 8);
    test_draw(1000, 64, 3.0f, true, 8);
    test_draw(128256, 130, 4.0f, false, 3); /* the engine's decode step at B = 130 */
    test_draw(128256, 40, 2.0f, true, 3);
    test_draw(128256, 8, 30.0f, false, 3);  /* a peaked row: most weights underflow */
    test_draw(262144 + 7, 9, 2.0f, false, 2);
    const char *const presets[] = {"tiny-llama", "tiny-qwen3", "tiny-gemma3", "tiny-phi3", "tiny-olmoe"};
    for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++) test_runner(presets[i], ST_TYPE_F32);
    /* F16 caches at head_dim 64 and 128: the runs through the tensor-core prefill */
    test_runner("tiny-llama-hd64", ST_TYPE_F16);
    test_runner("tiny-qwen3-hd128", ST_TYPE_F16);
    test_engine_draws("tiny-llama");
    test_engine_draws("tiny-olmoe");
}

int main(void) { return gpu_test_main("test_cuda_batch", run_all, NULL); }
