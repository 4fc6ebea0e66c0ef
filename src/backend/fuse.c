/* Finding the fused ops in a step's graph (fuse.h). */
#include "backend/fuse.h"

#include <stdint.h>
#include <string.h>

/* ---- which memory a view touches ------------------------------------------------------ */

/* The bytes a view spans: [lo, hi), or lo == hi when it holds nothing. */
static void view_extent(const st_tensor *t, uintptr_t *lo, uintptr_t *hi) {
    *lo = *hi = (uintptr_t)t->data;
    for (int d = 0; d < ST_MAX_DIMS; d++)
        if (t->ne[d] <= 0) return;
    uintptr_t end = (uintptr_t)t->data + t->nb[0];
    for (int d = 0; d < ST_MAX_DIMS; d++) end += (uintptr_t)(t->ne[d] - 1) * t->nb[d];
    *hi = end;
}

/* A view as R rows of w contiguous bytes, row r at data + r * S (dimensions that are
 * contiguous continuations merged into the row); false when it is not one. */
static bool view_rows(const st_tensor *t, size_t *w, size_t *S, int64_t *R) {
    int d = 1;
    size_t width = (size_t)t->ne[0] * t->nb[0];
    while (d < ST_MAX_DIMS && (t->ne[d] == 1 || t->nb[d] == width)) width *= (size_t)t->ne[d], d++;
    int64_t rows = 1;
    size_t stride = width;
    int outer = 0;
    for (; d < ST_MAX_DIMS; d++) {
        if (t->ne[d] == 1) continue;
        if (outer == 0) stride = t->nb[d];
        else if (t->nb[d] != stride * (size_t)rows) return false;
        rows *= t->ne[d];
        outer++;
    }
    *w = width, *S = stride, *R = rows;
    return true;
}

/* Whether two views share a byte: their spans, then, for two views of rows at one stride S
 * (q and k of one qkv buffer over M tokens: interleaved spans, disjoint rows), whether the
 * offset between them, taken mod S, leaves room for both rows side by side. */
static bool views_overlap(const st_tensor *a, const st_tensor *b) {
    uintptr_t alo, ahi, blo, bhi;
    view_extent(a, &alo, &ahi);
    view_extent(b, &blo, &bhi);
    if (!(alo < bhi && blo < ahi)) return false;
    size_t wa, Sa, wb, Sb;
    int64_t Ra, Rb;
    if (!view_rows(a, &wa, &Sa, &Ra) || !view_rows(b, &wb, &Sb, &Rb) || Sa != Sb || wa > Sa || wb > Sb) return true;
    /* the later view starts m bytes into a row of the earlier one: the rows stay apart when
     * the earlier row ends by m and the later one ends by the next row's start */
    const bool a_first = alo <= blo;
    const size_t m = (size_t)((a_first ? blo - alo : alo - blo) % Sa);
    const size_t w_first = a_first ? wa : wb, w_later = a_first ? wb : wa;
    return !(m >= w_first && m + w_later <= Sa);
}

/* Whether every element of t is an element of dst (a write of dst overwrites all of t).
 * Exact for views of rows at one stride; false (not known to) otherwise. */
static bool view_covers(const st_tensor *dst, const st_tensor *t) {
    size_t wd, Sd, wt, St;
    int64_t Rd, Rt;
    if (!view_rows(dst, &wd, &Sd, &Rd) || !view_rows(t, &wt, &St, &Rt)) return false;
    uintptr_t tlo, thi;
    view_extent(t, &tlo, &thi);
    const uintptr_t d0 = (uintptr_t)dst->data;
    if (tlo < d0) return false;
    if (Rd == 1) return thi <= d0 + wd; /* dst is one contiguous span: containment is exact */
    if (Rt > 1 && St != Sd) return false;
    const size_t off = (size_t)(tlo - d0);
    const int64_t r0 = (int64_t)(off / Sd);
    const size_t col = off % Sd;
    return col + wt <= wd && r0 + Rt <= Rd;
}

/* The later writes a scan has seen into t's memory: a read inside one of them reads what
 * that write left, not t's value. */
#define READ_LATER_MAX_WRITES 8

bool st_graph_read_later(const st_graph *g, int from, const st_tensor *t) {
    const st_tensor *written[READ_LATER_MAX_WRITES];
    int n_written = 0;
    for (int i = from; i < g->n_nodes; i++) {
        const st_node *n = &g->nodes[i];
        for (int j = 0; j < ST_GRAPH_MAX_SRC; j++) {
            const st_tensor *s = n->src[j];
            if (!s || !views_overlap(s, t)) continue;
            bool rewritten = false;
            for (int w = 0; w < n_written && !rewritten; w++) rewritten = view_covers(written[w], s);
            if (!rewritten) return true;
        }
        if (n->dst2 && views_overlap(n->dst2, t)) return true; /* (written in part: treated as a read) */
        if (!n->dst || n->op == ST_OP_KV_STORE || !views_overlap(n->dst, t)) continue;
        if (view_covers(n->dst, t)) return false;
        if (n_written == READ_LATER_MAX_WRITES) return true; /* (too much to follow: assume a read) */
        written[n_written++] = n->dst;
    }
    return false;
}

/* ---- the groups ----------------------------------------------------------------------- */

/* op's fused gate_up product y <- W [K, 2F] split into the gated pair of its halves (gate
 * rows first): the weight's rows [0, F) and [F, 2F), the product's elements likewise. */
static void split_gate_up(st_fused_mul_mat *op) {
    const st_tensor *w = op->w[0], *y = op->y[0];
    const int64_t F = w->ne[1] / 2;
    for (int i = 0; i < 2; i++) {
        st_tensor hw = *w, hy = *y;
        hw.ne[1] = F;
        hw.nb[2] = hw.nb[3] = w->nb[1] * (size_t)F;
        hw.data = (char *)w->data + (size_t)i * (size_t)F * w->nb[1];
        hy.ne[0] = F;
        hy.data = (char *)y->data + (size_t)i * (size_t)F * y->nb[0];
        op->half_w[i] = hw, op->half_y[i] = hy;
    }
    op->n_w = 2;
    op->halves = true; /* (w and y point at the halves: st_fuse_group_point) */
}

/* rms_norm(h <- x, w) then mul_mats of h [, a gated unit; or one product of a fused gate_up
 * weight and the unit over its halves]: *used nodes. */
static bool match_normed_product(const st_graph *g, int i, st_fused_mul_mat *op, int *used) {
    const st_node *norm = &g->nodes[i];
    if (norm->op != ST_OP_RMS_NORM || !norm->src[1] || st_tensor_same(norm->dst, norm->src[0])) return false;
    int n_w = 0;
    while (n_w < 3 && i + 1 + n_w < g->n_nodes) {
        const st_node *mm = &g->nodes[i + 1 + n_w];
        if (mm->op != ST_OP_MUL_MAT || !st_tensor_same(mm->src[1], norm->dst)) break;
        n_w++;
    }
    if (n_w == 0 || st_graph_read_later(g, i + 1 + n_w, norm->dst)) return false;
    memset(op, 0, sizeof(*op));
    op->n_w = n_w;
    for (int k = 0; k < n_w; k++) {
        op->w[k] = g->nodes[i + 1 + k].src[0];
        op->y[k] = g->nodes[i + 1 + k].dst;
    }
    op->x = norm->src[0];
    op->norm_w = norm->src[1];
    op->eps = norm->p.eps;
    op->h = norm->dst;
    op->epilogue = ST_FUSED_EPILOGUE_STORE;
    *used = 1 + n_w;
    const int a = i + 1 + n_w;
    if (n_w == 1 && a < g->n_nodes) {
        const st_node *glu = &g->nodes[a];
        const st_tensor *w = op->w[0], *y = op->y[0];
        if (glu->op == ST_OP_SWIGLU_FUSED && st_tensor_same(glu->src[0], y) && w->ne[1] % 2 == 0 &&
            y->ne[0] == w->ne[1] && w->ne[2] == 1 && w->ne[3] == 1 && !st_graph_read_later(g, a + 1, y)) {
            split_gate_up(op);
            op->epilogue = ST_FUSED_EPILOGUE_SWIGLU;
            op->out = glu->dst;
            *used += 1;
        }
    }
    if (n_w == 2 && a < g->n_nodes) {
        const st_node *glu = &g->nodes[a];
        if ((glu->op == ST_OP_SWIGLU || glu->op == ST_OP_GEGLU) && st_tensor_same(glu->src[0], op->y[0]) &&
            st_tensor_same(glu->src[1], op->y[1]) && !st_graph_read_later(g, a + 1, op->y[0]) &&
            !st_graph_read_later(g, a + 1, op->y[1])) {
            op->epilogue = glu->op == ST_OP_SWIGLU ? ST_FUSED_EPILOGUE_SWIGLU : ST_FUSED_EPILOGUE_GEGLU;
            op->out = glu->dst;
            *used += 1;
        }
    }
    return true;
}

/* mul_mat(y <- W, a) then add(x <- x, y). */
static bool match_residual_add(const st_graph *g, int i, st_fused_mul_mat *op) {
    if (i + 1 >= g->n_nodes) return false;
    const st_node *mm = &g->nodes[i], *add = &g->nodes[i + 1];
    if (mm->op != ST_OP_MUL_MAT || add->op != ST_OP_ADD) return false;
    if (!st_tensor_same(add->dst, add->src[0]) || !st_tensor_same(add->src[1], mm->dst)) return false;
    if (st_graph_read_later(g, i + 2, mm->dst)) return false;
    memset(op, 0, sizeof(*op));
    op->n_w = 1;
    op->w[0] = mm->src[0];
    op->y[0] = mm->dst;
    op->x = mm->src[1];
    op->epilogue = ST_FUSED_EPILOGUE_ADD;
    op->out = add->dst;
    return true;
}

static bool rope_same(const st_rope_params *a, const st_rope_params *b) {
    return a->mode == b->mode && a->n_rot == b->n_rot && a->freq_base == b->freq_base &&
           a->freq_scale == b->freq_scale && a->freq_factors == b->freq_factors && a->attn_factor == b->attn_factor;
}

/* Whether n is heads t [hd, n_head, M] (packed heads) as the rows [hd * n_head, M] a
 * whole-projection norm reads: st_fused_heads_flat(t). */
static bool heads_flat_of(const st_tensor *n, const st_tensor *t) {
    if (t->type != ST_TYPE_F32 || t->ne[3] != 1 || t->nb[0] != sizeof(float) ||
        t->nb[1] != (size_t)t->ne[0] * sizeof(float))
        return false;
    const st_tensor flat = st_fused_heads_flat(t);
    return n->type == flat.type && n->data == flat.data && n->ne[0] == flat.ne[0] && n->ne[1] == flat.ne[1] &&
           n->ne[2] == 1 && n->ne[3] == 1 && n->nb[0] == flat.nb[0] && n->nb[1] == flat.nb[1];
}

/* [rms_norm(q), rms_norm(k), per head or over the whole q and k,] rope(q), rope(k),
 * kv_store(k), kv_store(v), attention. */
static bool match_rope_attention(const st_graph *g, int i, st_fuse_group *out) {
    int j = i;
    const st_node *qn = NULL, *kn = NULL;
    if (j + 1 < g->n_nodes && g->nodes[j].op == ST_OP_RMS_NORM && g->nodes[j + 1].op == ST_OP_RMS_NORM) {
        qn = &g->nodes[j], kn = &g->nodes[j + 1];
        j += 2;
    }
    if (j + 5 > g->n_nodes) return false;
    const st_node *rq = &g->nodes[j], *rk = &g->nodes[j + 1], *sk = &g->nodes[j + 2], *sv = &g->nodes[j + 3],
                  *at = &g->nodes[j + 4];
    if (rq->op != ST_OP_ROPE || rk->op != ST_OP_ROPE || sk->op != ST_OP_KV_STORE || sv->op != ST_OP_KV_STORE ||
        at->op != ST_OP_ATTENTION)
        return false;
    const st_tensor *q = rq->dst, *k = rk->dst, *pos = rq->src[1], *slots = sk->src[1];
    if (!st_tensor_same(rq->src[0], q) || !st_tensor_same(rk->src[0], k) || !st_tensor_same(rk->src[1], pos) ||
        !rope_same(&rq->p.rope, &rk->p.rope))
        return false;
    if (!st_tensor_same(sk->src[0], k) || !st_tensor_same(sv->src[1], slots)) return false;
    if (!st_tensor_same(at->src[0], q) || !st_tensor_same(at->src[1], sk->dst) || !st_tensor_same(at->src[2], sv->dst) ||
        !st_tensor_same(at->src[3], pos))
        return false;
    if (qn) { /* norms of q and k in place: per head (weights [head_dim]) or whole (olmoe) */
        if (!qn->src[1] || !kn->src[1] || qn->p.eps != kn->p.eps || !st_tensor_same(qn->dst, qn->src[0]) ||
            !st_tensor_same(kn->dst, kn->src[0]))
            return false;
        const bool per_head = st_tensor_same(qn->dst, q) && st_tensor_same(kn->dst, k) &&
                              qn->src[1]->ne[0] == q->ne[0] && kn->src[1]->ne[0] == k->ne[0];
        const bool whole = heads_flat_of(qn->dst, q) && heads_flat_of(kn->dst, k) &&
                           qn->src[1]->ne[0] == qn->dst->ne[0] && kn->src[1]->ne[0] == kn->dst->ne[0];
        if (!per_head && !whole) return false;
    }
    /* a fused rope-attention may leave q and k unroped: nothing after may read them */
    if (st_graph_read_later(g, j + 5, q) || st_graph_read_later(g, j + 5, k)) return false;
    st_fused_rope_store *rs = &out->ra.rs;
    rs->q = rq->dst;
    rs->k = rk->dst;
    rs->v = sv->src[0];
    rs->q_norm = qn ? qn->src[1] : NULL;
    rs->k_norm = kn ? kn->src[1] : NULL;
    rs->eps = qn ? qn->p.eps : 0.0f;
    rs->positions = pos;
    rs->slots = slots;
    rs->rope = &rq->p.rope;
    rs->k_cache = sk->dst;
    rs->v_cache = sv->dst;
    out->ra.out = at->dst;
    out->ra.pages = at->pages.table ? &at->pages : NULL;
    out->attn = at->p.attn;
    out->n_nodes = j + 5 - i;
    return true;
}

/* mul_mat_id(g <- W_gate, x, ids), mul_mat_id(u <- W_up, x, ids), swiglu/geglu(out <- g, u):
 * nothing after reads g, nor u unless the unit wrote out over it. */
static bool match_moe_glu(const st_graph *g, int i, st_fused_moe *op) {
    if (i + 2 >= g->n_nodes) return false;
    const st_node *mg = &g->nodes[i], *mu = &g->nodes[i + 1], *glu = &g->nodes[i + 2];
    if (mg->op != ST_OP_MUL_MAT_ID || mu->op != ST_OP_MUL_MAT_ID || (glu->op != ST_OP_SWIGLU && glu->op != ST_OP_GEGLU))
        return false;
    if (!st_tensor_same(mg->src[1], mu->src[1]) || !st_tensor_same(mg->src[2], mu->src[2]) ||
        mg->src[0]->type != mu->src[0]->type || !st_tensor_same(glu->src[0], mg->dst) ||
        !st_tensor_same(glu->src[1], mu->dst))
        return false;
    if (st_graph_read_later(g, i + 3, mg->dst) ||
        (!st_tensor_same(glu->dst, mu->dst) && st_graph_read_later(g, i + 3, mu->dst)))
        return false;
    memset(op, 0, sizeof(*op));
    op->kind = ST_FUSED_MOE_GLU;
    op->gelu = glu->op == ST_OP_GEGLU;
    op->w[0] = mg->src[0], op->w[1] = mu->src[0];
    op->y[0] = mg->dst, op->y[1] = mu->dst;
    op->x = mg->src[1];
    op->ids = mg->src[2];
    op->out = glu->dst;
    return true;
}

/* mul_mat_id(y <- W_down, a, ids), moe_combine(out <- y, wts) [, add(x <- x, out)]: nothing
 * after reads y [nor out]. The nodes it takes, or 0. */
static int match_moe_down(const st_graph *g, int i, st_fused_moe *op) {
    if (i + 1 >= g->n_nodes) return 0;
    const st_node *mm = &g->nodes[i], *comb = &g->nodes[i + 1];
    if (mm->op != ST_OP_MUL_MAT_ID || comb->op != ST_OP_MOE_COMBINE || !st_tensor_same(comb->src[0], mm->dst))
        return 0;
    const st_node *add = i + 2 < g->n_nodes ? &g->nodes[i + 2] : NULL;
    const bool residual = add && add->op == ST_OP_ADD && st_tensor_same(add->src[1], comb->dst) &&
                          st_tensor_same(add->dst, add->src[0]) && !st_tensor_same(add->dst, comb->dst) &&
                          add->dst->ne[0] == comb->dst->ne[0] && add->dst->ne[1] == comb->dst->ne[1] &&
                          add->dst->ne[2] == 1 && add->dst->ne[3] == 1 && !st_graph_read_later(g, i + 3, comb->dst) &&
                          !st_graph_read_later(g, i + 3, mm->dst);
    if (!residual && st_graph_read_later(g, i + 2, mm->dst)) return 0;
    memset(op, 0, sizeof(*op));
    op->kind = ST_FUSED_MOE_DOWN;
    op->w[0] = mm->src[0];
    op->y[0] = mm->dst;
    op->x = mm->src[1];
    op->ids = mm->src[2];
    op->wts = comb->src[1];
    op->out = comb->dst;
    op->residual = residual ? add->dst : NULL;
    return residual ? 3 : 2;
}

static bool same_shape(const st_tensor *a, const st_tensor *b) {
    for (int d = 0; d < ST_MAX_DIMS; d++)
        if (a->ne[d] != b->ne[d]) return false;
    return true;
}

/* rms_norm(h <- y, w), add(out <- x, h) with x, y, h and out of one shape, x not h:
 * nothing after reads h. */
static bool match_norm_add(const st_graph *g, int i, st_fused_norm_add *op) {
    if (i + 1 >= g->n_nodes) return false;
    const st_node *norm = &g->nodes[i], *add = &g->nodes[i + 1];
    if (norm->op != ST_OP_RMS_NORM || add->op != ST_OP_ADD || !st_tensor_same(add->src[1], norm->dst) ||
        st_tensor_same(add->src[0], norm->dst))
        return false;
    if (!same_shape(norm->dst, norm->src[0]) || !same_shape(add->src[0], norm->dst) || !same_shape(add->dst, norm->dst))
        return false;
    if (st_graph_read_later(g, i + 2, norm->dst)) return false;
    memset(op, 0, sizeof(*op));
    op->y = norm->src[0];
    op->norm_w = norm->src[1];
    op->eps = norm->p.eps;
    op->h = norm->dst;
    op->x = add->src[0];
    op->out = add->dst;
    return true;
}

/* rms_norm(a <- x, w), rms_norm(b <- y, u) with rows of one width, where neither norm's
 * output overlaps what the other reads (they may run at once). */
static bool match_norm_pair(const st_graph *g, int i, st_fused_norm_pair *op) {
    if (i + 1 >= g->n_nodes) return false;
    const st_node *n[2] = {&g->nodes[i], &g->nodes[i + 1]};
    if (n[0]->op != ST_OP_RMS_NORM || n[1]->op != ST_OP_RMS_NORM || n[0]->dst->ne[0] != n[1]->dst->ne[0])
        return false;
    for (int a = 0; a < 2; a++) {
        const st_node *other = n[1 - a];
        for (int j = 0; j < 2; j++)
            if (other->src[j] && views_overlap(n[a]->dst, other->src[j])) return false;
        if (!same_shape(n[a]->dst, n[a]->src[0])) return false;
    }
    memset(op, 0, sizeof(*op));
    for (int a = 0; a < 2; a++) {
        op->dst[a] = n[a]->dst;
        op->x[a] = n[a]->src[0];
        op->w[a] = n[a]->src[1];
        op->eps[a] = n[a]->p.eps;
    }
    return true;
}

/* [rms_norm(h <- x, w),] mul_mat(logits <- router, h or x), topk_route(ids, wts <- logits):
 * the routing reads only the product, and the fused op writes the logits and h too, so
 * nothing after is refused. Returns the nodes taken, 0 when no match. */
static int match_moe_route(const st_graph *g, int i, st_fused_moe_route *op) {
    const st_node *norm = &g->nodes[i];
    const bool normed = norm->op == ST_OP_RMS_NORM && norm->src[1] && !st_tensor_same(norm->dst, norm->src[0]);
    const int at = normed ? i + 1 : i;
    if (at + 1 >= g->n_nodes) return 0;
    const st_node *mm = &g->nodes[at], *route = &g->nodes[at + 1];
    if (mm->op != ST_OP_MUL_MAT || route->op != ST_OP_TOPK_ROUTE || !st_tensor_same(route->src[0], mm->dst)) return 0;
    if (normed && !st_tensor_same(mm->src[1], norm->dst)) return 0;
    memset(op, 0, sizeof(*op));
    op->router = mm->src[0];
    op->x = normed ? norm->src[0] : mm->src[1];
    if (normed) {
        op->norm_w = norm->src[1];
        op->eps = norm->p.eps;
        op->h = norm->dst;
    }
    op->logits = mm->dst;
    op->ids = route->dst;
    op->wts = route->dst2;
    op->k = route->p.route.k;
    op->softmax_first = route->p.route.softmax_first;
    op->normalize = route->p.route.normalize;
    return at + 2 - i;
}

void st_fuse_match(const st_graph *g, int i, st_fuse_group *out) {
    memset(out, 0, sizeof(*out));
    out->first = i;
    out->n_nodes = 1;
    int used = 1;
    if (match_rope_attention(g, i, out)) {
        out->kind = ST_FUSE_ROPE_ATTENTION;
    } else if ((used = match_moe_route(g, i, &out->mr)) > 0) { /* (before a normed product: its norm) */
        out->kind = ST_FUSE_MOE_ROUTE;
        out->n_nodes = used;
    } else if (match_normed_product(g, i, &out->mm, &used)) {
        out->kind = ST_FUSE_MUL_MAT;
        out->n_nodes = used;
    } else if (match_residual_add(g, i, &out->mm)) {
        out->kind = ST_FUSE_MUL_MAT;
        out->n_nodes = 2;
    } else if (match_moe_glu(g, i, &out->moe)) {
        out->kind = ST_FUSE_MOE;
        out->n_nodes = 3;
    } else if ((used = match_moe_down(g, i, &out->moe)) > 0) {
        out->kind = ST_FUSE_MOE;
        out->n_nodes = used;
    } else if (match_norm_add(g, i, &out->na)) {
        out->kind = ST_FUSE_NORM_ADD;
        out->n_nodes = 2;
    } else if (match_norm_pair(g, i, &out->np)) {
        out->kind = ST_FUSE_NORM_PAIR;
        out->n_nodes = 2;
    }
    st_fuse_group_point(out);
}

void st_fuse_group_point(st_fuse_group *grp) {
    if (grp->kind == ST_FUSE_ROPE_ATTENTION) grp->ra.attn = &grp->attn;
    if (grp->kind == ST_FUSE_MUL_MAT && grp->mm.halves)
        for (int i = 0; i < 2; i++) grp->mm.w[i] = &grp->mm.half_w[i], grp->mm.y[i] = &grp->mm.half_y[i];
}
