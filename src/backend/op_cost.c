/* Labels and least costs of a step's ops (op_cost.h). */
#include "backend/op_cost.h"

#include <stdarg.h>
#include <stdio.h>

#include "stride/types.h"

/* Bytes of n elements of t's type (0 for a count that is not whole blocks). */
static double elems_bytes(st_type type, int64_t n) {
    size_t b = 0;
    return st_type_row_bytes(type, n, &b) ? (double)b : 0.0;
}

/* Bytes of an F32 activation's elements. */
static double f32_bytes(const st_tensor *t) { return t ? 4.0 * (double)st_tensor_nelements(t) : 0.0; }

/* c = (label from fmt, bytes, flops). */
static void set(st_op_cost *c, double bytes, double flops, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void set(st_op_cost *c, double bytes, double flops, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->label, sizeof(c->label), fmt, ap);
    va_end(ap);
    c->bytes = bytes;
    c->flops = flops;
}

/* Keys a query reads and keys read from the cache, over n_kv keys for M queries of `seqs`
 * sequences (op_cost.h: bounds). */
static void attention_keys(int64_t n_kv, int64_t M, int32_t window, bool paged, int64_t seqs, double *per_query,
                           double *read) {
    double q = paged || M <= 1 ? (double)n_kv : (double)n_kv - (double)(M - 1) / 2.0;
    double r = (double)n_kv;
    if (window > 0) {
        if (q > window) q = window;
        if (!paged && M <= 1 && r > window) r = window; /* a decode token's window of keys */
    }
    *per_query = q > 0.0 ? q : 0.0;
    *read = r * (double)seqs;
}

/* q [hd, H, M] against a cache [hd, Hkv, slots] of type kv over n_kv keys. */
static void attention_cost(st_op_cost *c, const char *name, const st_tensor *q, const st_tensor *k_cache,
                           const st_kv_pages *pages, const st_attn_params *p, int64_t n_kv) {
    const int64_t hd = q->ne[0], H = q->ne[1], M = q->ne[2], Hkv = k_cache->ne[1];
    const bool paged = pages && pages->table;
    /* the singles and the runs that hold queries (a replayed step's empty slots do not) */
    int64_t seqs = paged ? pages->n_single : 1;
    for (int32_t i = 0; paged && i < pages->n_runs; i++) seqs += pages->runs[i].n > 0;
    double per_query = 0.0, read = 0.0;
    attention_keys(n_kv, M, p->window, paged, seqs, &per_query, &read);
    const double bytes = 2.0 * read * elems_bytes(k_cache->type, hd * Hkv) + 2.0 * f32_bytes(q);
    const double flops = 4.0 * (double)hd * (double)H * (double)M * per_query;
    char window[32] = "";
    if (p->window > 0) snprintf(window, sizeof(window), " window=%d", (int)p->window);
    set(c, bytes, flops, "%s hd=%lld H=%lld/%lld%s%s", name, (long long)hd, (long long)H, (long long)Hkv, window,
        paged ? " paged" : "");
}

void st_op_cost_node(const st_node *n, int64_t n_kv, st_op_cost *c) {
    const st_tensor *const *s = n->src;
    const st_tensor *d = n->dst;
    const char *name = st_op_name(n->op);
    switch (n->op) {
    case ST_OP_GET_ROWS: {
        const int64_t M = s[1]->ne[0];
        set(c, (double)M * elems_bytes(s[0]->type, s[0]->ne[0]) + f32_bytes(d), 0.0, "%s %s K=%lld", name,
            st_type_name(s[0]->type), (long long)s[0]->ne[0]);
        return;
    }
    case ST_OP_MUL_MAT: {
        const int64_t K = s[0]->ne[0], N = s[0]->ne[1], M = s[1]->ne[1] * s[1]->ne[2];
        set(c, (double)N * elems_bytes(s[0]->type, K) + f32_bytes(s[1]) + f32_bytes(d), 2.0 * K * N * (double)M,
            "%s %s K=%lld N=%lld", name, st_type_name(s[0]->type), (long long)K, (long long)N);
        return;
    }
    case ST_OP_MUL_MAT_ID: {
        /* dst [N, k, M]: k experts a token, at most E different ones read */
        const int64_t K = s[0]->ne[0], N = s[0]->ne[1], E = s[0]->ne[2], k = d->ne[1], M = d->ne[2];
        const double experts = (double)(k * M < E ? k * M : E);
        set(c, experts * (double)N * elems_bytes(s[0]->type, K) + f32_bytes(s[1]) + f32_bytes(d),
            2.0 * K * N * (double)(k * M), "%s %s K=%lld N=%lld E=%lld k=%lld", name, st_type_name(s[0]->type),
            (long long)K, (long long)N, (long long)E, (long long)k);
        return;
    }
    case ST_OP_ATTENTION:
        attention_cost(c, name, s[0], s[1], n->pages.table ? &n->pages : NULL, &n->p.attn, n_kv);
        return;
    case ST_OP_KV_STORE: {
        const int64_t elems = st_tensor_nelements(s[0]);
        set(c, f32_bytes(s[0]) + elems_bytes(d->type, elems), 0.0, "%s %s hd=%lld H=%lld", name,
            st_type_name(d->type), (long long)s[0]->ne[0], (long long)s[0]->ne[1]);
        return;
    }
    case ST_OP_ROPE:
        set(c, f32_bytes(s[0]) + f32_bytes(d), 6.0 * (double)st_tensor_nelements(s[0]), "%s hd=%lld H=%lld", name,
            (long long)s[0]->ne[0], (long long)s[0]->ne[1]);
        return;
    case ST_OP_TOPK_ROUTE:
        set(c, f32_bytes(s[0]) + 2.0 * f32_bytes(n->dst2), 0.0, "%s E=%lld k=%d", name, (long long)s[0]->ne[0],
            (int)n->p.route.k);
        return;
    case ST_OP_TOP_K:
        set(c, f32_bytes(s[0]) + 2.0 * f32_bytes(n->dst2), 0.0, "%s V=%lld k=%d", name, (long long)s[0]->ne[0],
            (int)n->p.k);
        return;
    case ST_OP_DRAW: /* the rows read twice: the maximum, then the sums (a top-k or top-p
                        cut reads a row five times more, mostly from L2: not counted) */
        set(c, 2.0 * f32_bytes(s[0]), 0.0, "%s V=%lld", name, (long long)s[0]->ne[0]);
        return;
    case ST_OP_MOE_COMBINE:
        set(c, f32_bytes(s[0]) + f32_bytes(s[1]) + f32_bytes(d), 2.0 * (double)st_tensor_nelements(s[0]),
            "%s D=%lld k=%lld", name, (long long)s[0]->ne[0], (long long)s[0]->ne[1]);
        return;
    default: { /* the element-wise ops and the norm: every operand once */
        double bytes = f32_bytes(d);
        for (int i = 0; i < ST_GRAPH_MAX_SRC; i++) bytes += f32_bytes(s[i]);
        set(c, bytes, 2.0 * (double)st_tensor_nelements(d), "%s D=%lld", name, (long long)d->ne[0]);
        return;
    }
    }
}

void st_op_cost_fused_mul_mat(const st_fused_mul_mat *op, st_op_cost *c) {
    static const char *const epilogues[] = {"", "+add", "+swiglu", "+geglu"};
    const int64_t K = op->w[0]->ne[0], M = op->x->ne[1];
    double bytes = f32_bytes(op->x), flops = 0.0;
    char rows[48] = "";
    int at = 0;
    for (int i = 0; i < op->n_w; i++) {
        const int64_t N = op->w[i]->ne[1];
        bytes += (double)N * elems_bytes(op->w[i]->type, K) + 4.0 * (double)(N * M);
        flops += 2.0 * (double)K * (double)N * (double)M;
        if (at < (int)sizeof(rows))
            at += snprintf(rows + at, sizeof(rows) - (size_t)at, "%s%lld", i ? "+" : "", (long long)N);
    }
    if (op->epilogue == ST_FUSED_EPILOGUE_ADD) bytes += f32_bytes(op->out); /* read and written */
    set(c, bytes, flops, "mul_mat%s%s %s K=%lld N=%s", op->norm_w ? "+norm" : "",
        epilogues[(unsigned)op->epilogue < 4 ? op->epilogue : 0], st_type_name(op->w[0]->type), (long long)K, rows);
}

void st_op_cost_rope_attention(const st_fused_rope_attention *op, int64_t n_kv, st_op_cost *c) {
    attention_cost(c, op->rs.q_norm ? "norm+rope+attention" : "rope+attention", op->rs.q, op->rs.k_cache, op->pages,
                   op->attn, n_kv);
    /* the store of the new keys and values, and the output */
    c->bytes += 2.0 * f32_bytes(op->rs.k) + f32_bytes(op->out);
}

void st_op_cost_fused_moe(const st_fused_moe *op, st_op_cost *c) {
    /* y [N, n_used, M]: each token's experts, at most E different ones read */
    const st_tensor *w = op->w[0];
    const int64_t K = w->ne[0], N = w->ne[1], E = w->ne[2], k = op->y[0]->ne[1], M = op->y[0]->ne[2];
    const double experts = (double)(k * M < E ? k * M : E), n_w = op->kind == ST_FUSED_MOE_GLU ? 2.0 : 1.0;
    set(c, n_w * experts * (double)N * elems_bytes(w->type, K) + f32_bytes(op->x) + f32_bytes(op->out) +
               2.0 * f32_bytes(op->residual),
        n_w * 2.0 * (double)K * (double)N * (double)(k * M), "%s %s K=%lld N=%lld E=%lld k=%lld",
        op->kind == ST_FUSED_MOE_GLU ? (op->gelu ? "mul_mat_id+geglu" : "mul_mat_id+swiglu")
        : op->residual               ? "mul_mat_id+combine+add"
                                     : "mul_mat_id+combine",
        st_type_name(w->type), (long long)K, (long long)N, (long long)E, (long long)k);
}

void st_op_cost_norm_add(const st_fused_norm_add *op, st_op_cost *c) {
    /* y and x read, out written, the weight */
    set(c, 3.0 * f32_bytes(op->y) + f32_bytes(op->norm_w), 4.0 * (double)st_tensor_nelements(op->y),
        "rms_norm+add D=%lld", (long long)op->y->ne[0]);
}

void st_op_cost_norm_pair(const st_fused_norm_pair *op, st_op_cost *c) {
    double bytes = 0.0, flops = 0.0;
    for (int i = 0; i < 2; i++) {
        bytes += 2.0 * f32_bytes(op->x[i]) + f32_bytes(op->w[i]);
        flops += 3.0 * (double)st_tensor_nelements(op->x[i]);
    }
    set(c, bytes, flops, "rms_norm x2 D=%lld", (long long)op->x[0]->ne[0]);
}

void st_op_cost_moe_route(const st_fused_moe_route *op, st_op_cost *c) {
    const st_tensor *w = op->router;
    const int64_t K = w->ne[0], E = w->ne[1], M = op->x->ne[1];
    double bytes = (double)E * elems_bytes(w->type, K) + f32_bytes(op->x) + f32_bytes(op->logits) + f32_bytes(op->wts);
    double flops = 2.0 * (double)K * (double)E * (double)M;
    if (op->norm_w) {
        bytes += f32_bytes(op->norm_w) + f32_bytes(op->h);
        flops += 3.0 * (double)K * (double)M;
    }
    set(c, bytes, flops, "mul_mat+%stopk_route %s K=%lld E=%lld k=%d", op->norm_w ? "norm+" : "",
        st_type_name(w->type), (long long)K, (long long)E, op->k);
}
