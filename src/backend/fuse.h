/*
 * Finding the fused ops (fused.h) in a step's graph: the groups of consecutive plain
 * nodes that a backend's kernels can run as one, where the intermediate a group leaves
 * unwritten (a normed input folded into its products, a product folded into the residual
 * add, q and k left unroped) is read by no later node. Backend-neutral, so that the
 * matching is tested on every architecture's graph without a GPU; the CUDA planner
 * (cuda_graph.cu) runs what it finds.
 *
 *   normed product   rms_norm(h <- x, w), then 1-3 mul_mat(y_i <- W_i, h) (q/k/v, a fused
 *                    qkv, an output head), or 2 of them and swiglu/geglu(out <- y_0, y_1)
 *   residual add     mul_mat(y <- W, a), then add(x <- x, y)
 *   rope-attention   [rms_norm(q), rms_norm(k), per head or over the whole q and k,]
 *                    rope(q), rope(k), kv_store(k), kv_store(v), attention
 *   experts' unit    mul_mat_id(g <- W_gate, x), mul_mat_id(u <- W_up, x) with one ids,
 *                    swiglu/geglu(out <- g, u)
 *   experts' down    mul_mat_id(y <- W_down, a), moe_combine(out <- y, wts) with its ids[,
 *                    add(x <- x, out): the residual]
 *   post-norm add    rms_norm(h <- y, w), add(out <- x, h): a post-norm into the residual
 *   norm pair        rms_norm(a <- x, w), rms_norm(b <- y, u) of one width, independent
 *   MoE routing      [rms_norm(h <- x, w),] mul_mat(logits <- router, h or x),
 *                    topk_route(ids, wts <- logits): the norm's h is written (the experts
 *                    read it)
 */
#ifndef STRIDE_BACKEND_FUSE_H
#define STRIDE_BACKEND_FUSE_H

#include "backend/fused.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum st_fuse_kind {
    ST_FUSE_NONE = 0,       /* the node alone */
    ST_FUSE_MUL_MAT,        /* a normed product or a residual add: mm */
    ST_FUSE_ROPE_ATTENTION, /* ra (ra.attn points at attn; its n_kv is set per compute) */
    ST_FUSE_MOE,            /* an experts' unit or down product: moe */
    ST_FUSE_NORM_ADD,       /* a post-norm into the residual: na */
    ST_FUSE_NORM_PAIR,      /* two independent norms of one width: np */
    ST_FUSE_MOE_ROUTE,      /* [a norm,] a router's product and its routing: mr */
} st_fuse_kind;

typedef struct st_fuse_group {
    st_fuse_kind kind;
    int first, n_nodes;       /* the group's nodes of the graph */
    st_fused_mul_mat mm;
    st_fused_rope_attention ra;
    st_attn_params attn;
    st_fused_moe moe;
    st_fused_norm_add na;
    st_fused_norm_pair np;
    st_fused_moe_route mr;
} st_fuse_group;

/* The group that starts at node i of g. Its descriptors point into g's nodes (valid while
 * g is not rebuilt) and into the group itself (ra.attn, a halves product's w and y): a
 * copy of the group is pointed at its own with st_fuse_group_point. */
void st_fuse_match(const st_graph *g, int i, st_fuse_group *out);

/* Points the group's pointers into itself (ra.attn at attn; a halves product's w and y at
 * its halves) at this copy of it. */
void st_fuse_group_point(st_fuse_group *grp);

/* Whether a node from `from` on reads any of t's memory before a node overwrites all of t
 * (conservative: overlapping memory counts as a read). */
bool st_graph_read_later(const st_graph *g, int from, const st_tensor *t);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_BACKEND_FUSE_H */
