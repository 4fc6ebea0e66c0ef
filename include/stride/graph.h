/*
 * stride: one step of a model as a list of plain ops (ggml's compute graph, without
 * autodiff). The model's forward pass appends the ops it needs in order; a backend
 * computes the list (st_backend_compute). What the forward pass says is only WHAT to
 * compute: how (fusing a norm into the product after it, a residual add into the
 * product before it, recording the step as a CUDA graph and replaying it) is the
 * backend's plan over the list.
 *
 * Operands are st_tensor descriptors in the backend's memory, copied into the graph by
 * value when a node is added (a view built on the stack may be passed), so that a graph
 * stays valid while the memory its tensors describe lives. A graph is reused: built once
 * for a shape of step (a decode step, a micro-batch of M tokens) and computed again and
 * again with new data in that memory (token ids, positions) and a new n_kv; a backend
 * may keep its plan and recordings for the graph until st_graph_clear or st_graph_free.
 *
 * The op contracts are those of cpu_ops.h (each node names its st_cpu_* counterpart);
 * index operands (ids, positions) are I32 tensors in the backend's memory.
 */
#ifndef STRIDE_GRAPH_H
#define STRIDE_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stride/ops.h"
#include "stride/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum st_op {
    ST_OP_GET_ROWS,     /* dst [K, M] = src0 [K, V] rows src1 (ids [M])               st_cpu_get_rows */
    ST_OP_MUL_MAT,      /* dst [N, M] = src0 (weight [K, N]) x src1 [K, M]            st_cpu_mul_mat */
    ST_OP_MUL_MAT_ID,   /* dst [N, k, M] = src0 [K, N, E] experts src2 (ids [k, M]) x src1 */
    ST_OP_RMS_NORM,     /* dst = rmsnorm(src0) * src1 (src1 [D] or NULL), eps         st_cpu_rms_norm */
    ST_OP_ROPE,         /* dst = rope(src0, positions src1), rope                     st_cpu_rope */
    ST_OP_SWIGLU,       /* dst = silu(src0) * src1                                    st_cpu_swiglu */
    ST_OP_GEGLU,        /* dst = gelu_tanh(src0) * src1                               st_cpu_geglu */
    ST_OP_SWIGLU_FUSED, /* dst [F, M] = silu(src0[0:F]) * src0[F:2F] (src0 [2F, M])   st_cpu_swiglu_fused */
    ST_OP_ADD,          /* dst = src0 + src1                                          st_cpu_add */
    ST_OP_MUL,          /* dst = src0 * src1                                          st_cpu_mul */
    ST_OP_SCALE,        /* dst = scale * src0                                         st_cpu_scale */
    ST_OP_KV_STORE,     /* dst (cache [hd, Hkv, slots]) at slots src1 = src0 [hd, Hkv, M]  st_cpu_kv_store */
    ST_OP_ATTENTION,    /* dst [hd, H, M] = attention(q src0, k cache src1, v cache src2,
                           positions src3; paged: the node's pages) over the graph's n_kv
                           keys, attn                                   st_cpu_attention_paged */
    ST_OP_TOPK_ROUTE,   /* dst (ids I32 [k, M]), dst2 (weights [k, M]) from logits src0 [E, M] */
    ST_OP_MOE_COMBINE,  /* dst [D, M] = sum_j src1[j, m] * src0[:, j, m]              st_cpu_moe_combine */
    ST_OP_TOP_K,        /* dst (ids I32 [k, n]), dst2 (vals [k + 1, n]) from logits src0  st_cpu_top_k_logits */
    ST_OP_DRAW,         /* dst (ids I32 [n]), dst2 (drawn logits [n]) from logits src0 [V, n],
                           params src1 [6, n], words src2 (I32 [4, n]), penalized src3
                           (I32 [2 P, n])                                st_cpu_draw_rows */
    ST_OP_COUNT
} st_op;

#define ST_GRAPH_MAX_SRC 4

typedef struct st_node {
    st_op op;
    st_tensor *dst;
    st_tensor *dst2;                        /* TOPK_ROUTE: the weights; TOP_K: the values;
                                               DRAW: the drawn tokens' logits */
    const st_tensor *src[ST_GRAPH_MAX_SRC]; /* unused ones NULL */
    st_kv_pages pages;                      /* ATTENTION over a paged cache (pages.table
                                               set), its tensors kept by the graph */
    union {
        float eps;           /* RMS_NORM */
        float scale;         /* SCALE */
        st_rope_params rope; /* ROPE */
        st_attn_params attn; /* ATTENTION (its n_kv unused: the graph's) */
        struct {
            int32_t k;
            bool softmax_first, normalize;
        } route;             /* TOPK_ROUTE (st_cpu_topk_route) */
        int32_t k;           /* TOP_K */
    } p;
} st_node;

/* A host-to-backend copy a compute starts with (a decode step's token id and position
 * from page-locked host memory): src must hold the data whenever the graph is computed. */
typedef struct st_graph_input {
    void *dst;       /* backend memory */
    const void *src; /* host memory */
    size_t n;
} st_graph_input;

#define ST_GRAPH_MAX_UPLOADS 4

typedef struct st_graph_chunk st_graph_chunk; /* the tensors' storage (graph.c) */
struct st_backend;

typedef struct st_graph {
    st_node *nodes;
    int n_nodes, cap_nodes;
    st_graph_chunk *tensors;  /* operand copies; their addresses never move */
    st_graph_input uploads[ST_GRAPH_MAX_UPLOADS];
    int n_uploads;
    int64_t n_tokens;         /* tokens the step evaluates (the model's micro-batch M) */
    bool replay;              /* computed again and again with new data in the memory it
                                 uploads (a decode step; a step padded to a bucket whose
                                 runs are in runs_dev, ops.h): a backend may record it once
                                 and replay the recording */
    int64_t n_kv;             /* set before each compute: the attention nodes read cache
                                 entries 0 .. n_kv-1 (each query up to its own position) */
    bool failed;              /* a node could not be added (out of memory): compute refuses */
    /* What the backend that computed the graph keeps for it (its plan, recordings), freed
     * through that backend when the graph is cleared or freed. */
    struct st_backend *owner;
    void *backend_state;
} st_graph;

void st_graph_init(st_graph *g);
/* Drops the nodes, uploads and the backend's state; keeps the memory for the next build. */
void st_graph_clear(st_graph *g);
void st_graph_free(st_graph *g);

/* ---- building (each copies its operands into the graph; on failure g->failed) -------- */
void st_graph_get_rows(st_graph *g, const st_tensor *dst, const st_tensor *src, const st_tensor *ids);
void st_graph_mul_mat(st_graph *g, const st_tensor *dst, const st_tensor *w, const st_tensor *x);
void st_graph_mul_mat_id(st_graph *g, const st_tensor *dst, const st_tensor *w, const st_tensor *x,
                         const st_tensor *ids);
void st_graph_rms_norm(st_graph *g, const st_tensor *dst, const st_tensor *x, const st_tensor *w, float eps);
void st_graph_rope(st_graph *g, const st_tensor *dst, const st_tensor *x, const st_tensor *positions,
                   const st_rope_params *p);
void st_graph_swiglu(st_graph *g, const st_tensor *dst, const st_tensor *gate, const st_tensor *up);
void st_graph_geglu(st_graph *g, const st_tensor *dst, const st_tensor *gate, const st_tensor *up);
void st_graph_swiglu_fused(st_graph *g, const st_tensor *dst, const st_tensor *gate_up);
void st_graph_add(st_graph *g, const st_tensor *dst, const st_tensor *a, const st_tensor *b);
void st_graph_mul(st_graph *g, const st_tensor *dst, const st_tensor *a, const st_tensor *b);
void st_graph_scale(st_graph *g, const st_tensor *dst, const st_tensor *x, float s);
void st_graph_kv_store(st_graph *g, const st_tensor *cache, const st_tensor *x, const st_tensor *positions);
/* pages: NULL for one sequence in a contiguous cache (key t at slot t). Its runs must
 * stay valid while the graph is used. */
void st_graph_attention(st_graph *g, const st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                        const st_tensor *v_cache, const st_tensor *positions, const st_kv_pages *pages,
                        const st_attn_params *p);
void st_graph_topk_route(st_graph *g, const st_tensor *ids, const st_tensor *weights, const st_tensor *logits,
                         int32_t k, bool softmax_first, bool normalize);
void st_graph_moe_combine(st_graph *g, const st_tensor *dst, const st_tensor *src, const st_tensor *weights);
void st_graph_top_k(st_graph *g, const st_tensor *ids, const st_tensor *vals, const st_tensor *logits, int32_t k);
void st_graph_draw(st_graph *g, const st_tensor *ids, const st_tensor *drawn, const st_tensor *logits,
                   const st_tensor *params, const st_tensor *words, const st_tensor *penalized);
void st_graph_upload(st_graph *g, void *dst, const void *src, size_t n);

/* Whether a and b describe the same elements: type, shape, strides and address. */
bool st_tensor_same(const st_tensor *a, const st_tensor *b);

const char *st_op_name(st_op op);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_GRAPH_H */
