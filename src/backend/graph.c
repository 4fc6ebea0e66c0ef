/* Building a step's graph (stride/graph.h): nodes in a growable array, operand copies in
 * chunks that never move, so that a node's pointers stay valid while more are added. */
#include "stride/graph.h"

#include <stdlib.h>
#include <string.h>

#include "stride/backend.h"

#define GRAPH_CHUNK_TENSORS 512

struct st_graph_chunk {
    st_graph_chunk *next;
    int used;
    st_tensor t[GRAPH_CHUNK_TENSORS];
};

void st_graph_init(st_graph *g) { memset(g, 0, sizeof(*g)); }

static void release_backend_state(st_graph *g) {
    if (g->owner && g->backend_state && g->owner->iface->graph_release) g->owner->iface->graph_release(g->owner, g);
    g->owner = NULL;
    g->backend_state = NULL;
}

void st_graph_clear(st_graph *g) {
    release_backend_state(g);
    g->n_nodes = 0;
    g->n_uploads = 0;
    g->n_tokens = 0;
    g->replay = false;
    g->n_kv = 0;
    g->failed = false;
    for (st_graph_chunk *c = g->tensors; c; c = c->next) c->used = 0;
}

void st_graph_free(st_graph *g) {
    if (!g) return;
    release_backend_state(g);
    free(g->nodes);
    st_graph_chunk *c = g->tensors;
    while (c) {
        st_graph_chunk *next = c->next;
        free(c);
        c = next;
    }
    memset(g, 0, sizeof(*g));
}

/* A copy of t with an address that lasts as long as the graph (NULL for NULL). The chunks
 * form a list that st_graph_clear rewinds: the first chunk with room takes the copy. */
static st_tensor *keep(st_graph *g, const st_tensor *t) {
    if (!t || g->failed) return NULL;
    st_graph_chunk **link = &g->tensors;
    while (*link && (*link)->used == GRAPH_CHUNK_TENSORS) link = &(*link)->next;
    if (!*link) {
        *link = calloc(1, sizeof(st_graph_chunk));
        if (!*link) {
            g->failed = true;
            return NULL;
        }
    }
    st_tensor *copy = &(*link)->t[(*link)->used++];
    *copy = *t;
    return copy;
}

static st_node *add_node(st_graph *g, st_op op, const st_tensor *dst, const st_tensor *s0, const st_tensor *s1,
                         const st_tensor *s2, const st_tensor *s3) {
    if (g->failed) return NULL;
    if (g->n_nodes == g->cap_nodes) {
        const int cap = g->cap_nodes ? 2 * g->cap_nodes : 256;
        st_node *nodes = realloc(g->nodes, (size_t)cap * sizeof(st_node));
        if (!nodes) {
            g->failed = true;
            return NULL;
        }
        g->nodes = nodes;
        g->cap_nodes = cap;
    }
    st_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof(*n));
    n->op = op;
    n->dst = keep(g, dst);
    const st_tensor *src[ST_GRAPH_MAX_SRC] = {s0, s1, s2, s3};
    for (int i = 0; i < ST_GRAPH_MAX_SRC; i++) n->src[i] = keep(g, src[i]);
    if (g->failed) return NULL;
    g->n_nodes++;
    return n;
}

void st_graph_get_rows(st_graph *g, const st_tensor *dst, const st_tensor *src, const st_tensor *ids) {
    add_node(g, ST_OP_GET_ROWS, dst, src, ids, NULL, NULL);
}

void st_graph_mul_mat(st_graph *g, const st_tensor *dst, const st_tensor *w, const st_tensor *x) {
    add_node(g, ST_OP_MUL_MAT, dst, w, x, NULL, NULL);
}

void st_graph_mul_mat_id(st_graph *g, const st_tensor *dst, const st_tensor *w, const st_tensor *x,
                         const st_tensor *ids) {
    add_node(g, ST_OP_MUL_MAT_ID, dst, w, x, ids, NULL);
}

void st_graph_rms_norm(st_graph *g, const st_tensor *dst, const st_tensor *x, const st_tensor *w, float eps) {
    st_node *n = add_node(g, ST_OP_RMS_NORM, dst, x, w, NULL, NULL);
    if (n) n->p.eps = eps;
}

void st_graph_rope(st_graph *g, const st_tensor *dst, const st_tensor *x, const st_tensor *positions,
                   const st_rope_params *p) {
    st_node *n = add_node(g, ST_OP_ROPE, dst, x, positions, NULL, NULL);
    if (n) n->p.rope = *p;
}

void st_graph_swiglu(st_graph *g, const st_tensor *dst, const st_tensor *gate, const st_tensor *up) {
    add_node(g, ST_OP_SWIGLU, dst, gate, up, NULL, NULL);
}

void st_graph_geglu(st_graph *g, const st_tensor *dst, const st_tensor *gate, const st_tensor *up) {
    add_node(g, ST_OP_GEGLU, dst, gate, up, NULL, NULL);
}

void st_graph_swiglu_fused(st_graph *g, const st_tensor *dst, const st_tensor *gate_up) {
    add_node(g, ST_OP_SWIGLU_FUSED, dst, gate_up, NULL, NULL, NULL);
}

void st_graph_add(st_graph *g, const st_tensor *dst, const st_tensor *a, const st_tensor *b) {
    add_node(g, ST_OP_ADD, dst, a, b, NULL, NULL);
}

void st_graph_mul(st_graph *g, const st_tensor *dst, const st_tensor *a, const st_tensor *b) {
    add_node(g, ST_OP_MUL, dst, a, b, NULL, NULL);
}

void st_graph_scale(st_graph *g, const st_tensor *dst, const st_tensor *x, float s) {
    st_node *n = add_node(g, ST_OP_SCALE, dst, x, NULL, NULL, NULL);
    if (n) n->p.scale = s;
}

void st_graph_kv_store(st_graph *g, const st_tensor *cache, const st_tensor *x, const st_tensor *positions) {
    add_node(g, ST_OP_KV_STORE, cache, x, positions, NULL, NULL);
}

void st_graph_attention(st_graph *g, const st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                        const st_tensor *v_cache, const st_tensor *positions, const st_kv_pages *pages,
                        const st_attn_params *p) {
    st_node *n = add_node(g, ST_OP_ATTENTION, dst, q, k_cache, v_cache, positions);
    if (!n) return;
    n->p.attn = *p;
    if (pages) {
        n->pages = *pages;
        n->pages.seq = keep(g, pages->seq); /* (a failure marks the graph failed) */
        n->pages.table = keep(g, pages->table);
        if (pages->runs_dev) n->pages.runs_dev = keep(g, pages->runs_dev);
    }
}

void st_graph_topk_route(st_graph *g, const st_tensor *ids, const st_tensor *weights, const st_tensor *logits,
                         int32_t k, bool softmax_first, bool normalize) {
    st_node *n = add_node(g, ST_OP_TOPK_ROUTE, ids, logits, NULL, NULL, NULL);
    if (!n) return;
    n->dst2 = keep(g, weights); /* (a failure marks the graph failed) */
    n->p.route.k = k;
    n->p.route.softmax_first = softmax_first;
    n->p.route.normalize = normalize;
}

void st_graph_moe_combine(st_graph *g, const st_tensor *dst, const st_tensor *src, const st_tensor *weights) {
    add_node(g, ST_OP_MOE_COMBINE, dst, src, weights, NULL, NULL);
}

void st_graph_top_k(st_graph *g, const st_tensor *ids, const st_tensor *vals, const st_tensor *logits, int32_t k) {
    st_node *n = add_node(g, ST_OP_TOP_K, ids, logits, NULL, NULL, NULL);
    if (!n) return;
    n->dst2 = keep(g, vals); /* (a failure marks the graph failed) */
    n->p.k = k;
}

void st_graph_draw(st_graph *g, const st_tensor *ids, const st_tensor *drawn, const st_tensor *logits,
                   const st_tensor *params, const st_tensor *words, const st_tensor *penalized) {
    st_node *n = add_node(g, ST_OP_DRAW, ids, logits, params, words, penalized);
    if (n) n->dst2 = keep(g, drawn); /* (a failure marks the graph failed) */
}

void st_graph_upload(st_graph *g, void *dst, const void *src, size_t n) {
    if (g->failed) return;
    if (g->n_uploads == ST_GRAPH_MAX_UPLOADS) {
        g->failed = true;
        return;
    }
    g->uploads[g->n_uploads++] = (st_graph_input){.dst = dst, .src = src, .n = n};
}

bool st_tensor_same(const st_tensor *a, const st_tensor *b) {
    if (a == b) return true;
    if (!a || !b || a->type != b->type || a->data != b->data) return false;
    for (int i = 0; i < ST_MAX_DIMS; i++)
        if (a->ne[i] != b->ne[i] || a->nb[i] != b->nb[i]) return false;
    return true;
}

const char *st_op_name(st_op op) {
    static const char *const names[ST_OP_COUNT] = {
        [ST_OP_GET_ROWS] = "get_rows",     [ST_OP_MUL_MAT] = "mul_mat",       [ST_OP_MUL_MAT_ID] = "mul_mat_id",
        [ST_OP_RMS_NORM] = "rms_norm",     [ST_OP_ROPE] = "rope",             [ST_OP_SWIGLU] = "swiglu",
        [ST_OP_GEGLU] = "geglu",           [ST_OP_SWIGLU_FUSED] = "swiglu_fused", [ST_OP_ADD] = "add",
        [ST_OP_MUL] = "mul",               [ST_OP_SCALE] = "scale",           [ST_OP_KV_STORE] = "kv_store",
        [ST_OP_ATTENTION] = "attention",   [ST_OP_TOPK_ROUTE] = "topk_route", [ST_OP_MOE_COMBINE] = "moe_combine",
        [ST_OP_TOP_K] = "top_k",           [ST_OP_DRAW] = "draw",
    };
    return (unsigned)op < ST_OP_COUNT ? names[op] : "?";
}
