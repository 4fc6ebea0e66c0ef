// The CUDA backend's plan of a step (stride/graph.h): the forward pass issues plain ops;
// this file runs the groups backend/fuse.h finds in them (normed products, residual adds,
// rope-attention, MoE routing, the experts' unit and down product, post-norm adds, norm
// pairs) as their fused ops and every other node through the backend's plain
// ops, decides the schedule of a one-token step, and records decode steps as CUDA graphs.
// The fused ops fall back to their composites for the operands their kernels do not take,
// so every group means exactly its nodes.
//
// A step's rotations are formed once per distinct rope (st_cuda_rope_table: cos and sin of
// every token's position, in double), read by every rope-attention of that rope instead of
// forming them per layer and per block of rows. A one-token step also gets a prepared
// norm: a residual add followed by a normed product of its output forms the product's
// x * norm_w on the way where st_cuda_prepared_norm_pays says it pays. A step of many
// tokens hands a gated unit's result to the down projection after it in the weights'
// type (st_cuda_glu_hands_off) where nothing else reads it: the unit's F32 rows are never
// written, nor read back to be packed.
// Every step computed again and again (g->replay: decode steps, and steps padded to a
// bucket whose prompt runs the attention reads from runs_dev) is recorded: the first
// compute runs plainly over the whole context (every lazy buffer grows to its largest),
// then each depth bucket (a bound on the keys: 64, 128, ..., 2,048, then the context) is
// recorded on its first step and replayed after. A recording's attention is sized for its
// bucket's bound; each query still sees only keys up to its own position, so the results
// do not depend on the bound.
//
// While a profile is set on the backend (stride/profile.h), a step runs plainly, never
// from a recording: a hold kernel first keeps the device busy while the host queues the
// whole step, with a timing event between every two items, so that each item's time is
// its kernels' time on the device and not the host's launches.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_backend.h"
#include "backend/fuse.h"
#include "backend/op_cost.h"
#include "cuda/cuda_attention.h"
#include "cuda/cuda_common.cuh"
#include "stride/log.h"

#define GRAPH_BUCKETS 7
#define GRAPH_FIRST_BOUND 64
#define GRAPH_MAX_ROPES 4

// A plan item: a group of the step's nodes (st_fuse_kind: a node alone or a fused op), or
// the rotations of a rope table.
#define ITEM_ROPE_TABLE (-1)

typedef struct plan_item {
    int kind;            // st_fuse_kind, or ITEM_ROPE_TABLE
    int node;            // the group's first node
    st_fuse_group grp;   // the group (st_fuse_group_point: pointed at this item's own copy)
    int table;           // ITEM_ROPE_TABLE, ST_FUSE_ROPE_ATTENTION: which of the plan's tables (-1 none)
    bool prepares_next;  // ST_FUSE_MUL_MAT (ADD): forms the next item's x * norm_w
    bool packs_next;     // ST_FUSE_MUL_MAT (a gated unit): hands its out to the next item, packed
    bool reads_packed;   // ST_FUSE_MUL_MAT (ADD): its x handed over by the item before
} plan_item;

typedef struct rope_table {
    st_rope_params rope;
    const st_tensor *positions; // [>= n_tokens] the step's positions
    int64_t n_tokens;           // the most tokens a rope-attention of the table rotates
    st_tensor cs;               // [n_rot, n_tokens] F32: (cos, sin) pairs, a row a token
} rope_table;

typedef struct cuda_plan {
    plan_item *items;
    int n_items;
    rope_table tables[GRAPH_MAX_ROPES];
    int n_tables;
    void *device_mem; // the tables and x_w
    st_tensor x_w;    // [D, 1] a prepared norm's x * norm_w
    bool record;      // a one-token step, recorded while recordings succeed
    bool warm;        // it has run plainly once
    int64_t n_ctx;    // the longest cache an attention of the step reads
    st_cuda_recording *exec[GRAPH_BUCKETS];
    st_gpu_event_t *marks; // profiled runs: [n_items + 1] events, mark k before item k
} cuda_plan;

// ---- planning -------------------------------------------------------------------------------

static bool rope_same(const st_rope_params *a, const st_rope_params *b) {
    return a->mode == b->mode && a->n_rot == b->n_rot && a->freq_base == b->freq_base &&
           a->freq_scale == b->freq_scale && a->freq_factors == b->freq_factors && a->attn_factor == b->attn_factor;
}

static int rope_table_for(cuda_plan *p, const st_rope_params *r, const st_tensor *positions, int64_t n_tokens) {
    for (int t = 0; t < p->n_tables; t++)
        if (rope_same(&p->tables[t].rope, r) && st_tensor_same(p->tables[t].positions, positions)) {
            if (n_tokens > p->tables[t].n_tokens) p->tables[t].n_tokens = n_tokens;
            return t;
        }
    if (p->n_tables == GRAPH_MAX_ROPES) return -1;
    p->tables[p->n_tables].rope = *r;
    p->tables[p->n_tables].positions = positions;
    p->tables[p->n_tables].n_tokens = n_tokens;
    return p->n_tables++;
}

// The rope tables and the prepared-norm buffer in one device allocation.
static st_status plan_device_memory(st_cuda_ctx *c, cuda_plan *p, int64_t x_w_rows, st_error *err) {
    size_t bytes = 0, offs[GRAPH_MAX_ROPES + 1];
    for (int t = 0; t < p->n_tables; t++) {
        offs[t] = bytes;
        bytes += ((size_t)p->tables[t].rope.n_rot * (size_t)p->tables[t].n_tokens * sizeof(float) + 255) / 256 * 256;
    }
    offs[p->n_tables] = bytes;
    bytes += ((size_t)x_w_rows * sizeof(float) + 255) / 256 * 256;
    if (bytes == 0) return ST_OK;
    ST_GPU_CHECK(st_gpu_malloc(&p->device_mem, bytes));
    for (int t = 0; t < p->n_tables; t++) {
        st_tensor cs = {};
        cs.type = ST_TYPE_F32;
        cs.ne[0] = p->tables[t].rope.n_rot, cs.ne[1] = p->tables[t].n_tokens, cs.ne[2] = cs.ne[3] = 1;
        cs.nb[0] = sizeof(float), cs.nb[1] = (size_t)cs.ne[0] * sizeof(float);
        cs.nb[2] = cs.nb[3] = cs.nb[1] * (size_t)cs.ne[1];
        cs.data = (char *)p->device_mem + offs[t];
        p->tables[t].cs = cs;
    }
    st_tensor xw = {};
    xw.type = ST_TYPE_F32;
    xw.ne[0] = x_w_rows, xw.ne[1] = xw.ne[2] = xw.ne[3] = 1;
    xw.nb[0] = sizeof(float), xw.nb[1] = xw.nb[2] = xw.nb[3] = (size_t)x_w_rows * sizeof(float);
    xw.data = (char *)p->device_mem + offs[p->n_tables];
    p->x_w = xw;
    return ST_OK;
}

static st_status plan_build(st_backend *b, const st_graph *g, cuda_plan *p, st_error *err) {
    st_cuda_ctx *c = cuda_ctx(b);
    p->items = (plan_item *)calloc((size_t)g->n_nodes + GRAPH_MAX_ROPES + 1, sizeof(plan_item));
    if (!p->items) return st_error_set(err, ST_ERROR_NOMEM, "out of host memory planning a step of %d ops", g->n_nodes);
    const bool one_token = g->n_tokens == 1;
    int first_layer_item = -1; // where the rope tables go: after the embedding lookup
    for (int i = 0; i < g->n_nodes;) {
        plan_item *it = &p->items[p->n_items];
        st_fuse_match(g, i, &it->grp);
        it->kind = it->grp.kind;
        it->node = i;
        it->table = -1;
        const int used = it->grp.n_nodes;
        const st_op op = g->nodes[i].op;
        if (first_layer_item < 0 && !(it->kind == ST_FUSE_NONE && (op == ST_OP_GET_ROWS || op == ST_OP_SCALE)))
            first_layer_item = p->n_items;
        p->n_items++;
        i += used;
    }
    // the most keys an attention of the step can read: the cache, or the table's blocks
    bool grouped_moe = false, runs_replay = true;
    for (int i = 0; i < g->n_nodes; i++) {
        const st_node *n = &g->nodes[i];
        if (n->op == ST_OP_ATTENTION) {
            const int64_t keys = n->pages.table ? n->pages.table->ne[0] * ST_KV_BLOCK_TOKENS : n->src[1]->ne[2];
            if (keys > p->n_ctx) p->n_ctx = keys;
            if (n->pages.table && !st_cuda_attention_replays(b, n->src[0], n->src[1], n->src[2], &n->pages))
                runs_replay = false;
        }
        if (n->op == ST_OP_MUL_MAT_ID && g->n_tokens >= ST_CUDA_MOE_GROUPED_MIN_M) grouped_moe = true;
    }

    // one rope table per distinct rope of the step's rope-attentions
    for (int k = 0; k < p->n_items; k++) {
        plan_item *it = &p->items[k];
        if (it->kind == ST_FUSE_ROPE_ATTENTION && st_cuda_rope_attention_reads_table(b, &it->grp.ra))
            it->table = rope_table_for(p, it->grp.ra.rs.rope, it->grp.ra.rs.positions, it->grp.ra.rs.q->ne[2]);
    }
    int64_t x_w_rows = 0;
    if (one_token) {
        // a residual add whose output the next normed product reads: prepare its x * norm_w
        for (int k = 0; k + 1 < p->n_items; k++) {
            plan_item *add = &p->items[k], *next = &p->items[k + 1];
            if (add->kind != ST_FUSE_MUL_MAT || add->grp.mm.epilogue != ST_FUSED_EPILOGUE_ADD) continue;
            if (next->kind != ST_FUSE_MUL_MAT || !next->grp.mm.norm_w || !st_tensor_same(next->grp.mm.x, add->grp.mm.out)) continue;
            if (!st_cuda_prepared_norm_pays(b, &next->grp.mm)) continue;
            if (add->grp.mm.out->ne[0] > x_w_rows) x_w_rows = add->grp.mm.out->ne[0];
            add->prepares_next = true;
        }
    }
    // a gated unit whose out only the next product reads (its down projection): handed
    // over in the weights' type, rows packed, instead of written in F32 and packed again
    for (int k = 0; k + 1 < p->n_items; k++) {
        plan_item *glu = &p->items[k], *next = &p->items[k + 1];
        if (glu->kind != ST_FUSE_MUL_MAT || next->kind != ST_FUSE_MUL_MAT) continue;
        if (!st_cuda_glu_hands_off(&glu->grp.mm, &next->grp.mm)) continue;
        if (st_graph_read_later(g, next->node + next->grp.n_nodes, glu->grp.mm.out)) continue;
        glu->packs_next = next->reads_packed = true;
    }
    st_status s = plan_device_memory(c, p, x_w_rows, err);
    if (s != ST_OK) return s;
    if (one_token) {
        for (int k = 0; k + 1 < p->n_items; k++) {
            plan_item *add = &p->items[k], *next = &p->items[k + 1];
            if (!add->prepares_next) continue;
            add->grp.mm.next_norm_w = next->grp.mm.norm_w;
            add->grp.mm.next_h = &p->x_w;
            next->grp.mm.x_w = &p->x_w;
        }
    }
    for (int k = 0; k < p->n_items; k++)
        if (p->items[k].kind == ST_FUSE_ROPE_ATTENTION && p->items[k].table >= 0)
            p->items[k].grp.ra.rs.rope_cs = &p->tables[p->items[k].table].cs;
    // the tables' items, before the first layer's
    if (p->n_tables > 0) {
        const int at = first_layer_item < 0 ? p->n_items : first_layer_item;
        memmove(&p->items[at + p->n_tables], &p->items[at], (size_t)(p->n_items - at) * sizeof(plan_item));
        for (int t = 0; t < p->n_tables; t++) {
            memset(&p->items[at + t], 0, sizeof(plan_item));
            p->items[at + t].kind = ITEM_ROPE_TABLE;
            p->items[at + t].table = t;
        }
        p->n_items += p->n_tables;
    }
    for (int k = 0; k < p->n_items; k++) st_fuse_group_point(&p->items[k].grp); // (the items have moved)
    // replayed steps are recorded; not one whose experts are grouped on the host (it
    // waits), nor one whose prompt runs are launched from the host's copy
    p->record = g->replay && runs_replay && !grouped_moe && c->tune.graphs;
    return ST_OK;
}

// ---- running --------------------------------------------------------------------------------

static st_status run_uploads(st_cuda_ctx *c, const st_graph *g, st_error *err) {
    for (int i = 0; i < g->n_uploads; i++)
        ST_GPU_CHECK(st_gpu_memcpy_async(g->uploads[i].dst, g->uploads[i].src, g->uploads[i].n,
                                         st_gpu_memcpy_host_to_device, c->stream));
    return ST_OK;
}

// One item, attention over n_kv keys.
static st_status run_item(st_backend *b, const st_graph *g, cuda_plan *p, plan_item *it, int64_t n_kv, st_error *err) {
    switch (it->kind) {
    case ST_FUSE_NONE: return st_backend_run_node(b, &g->nodes[it->node], n_kv, err);
    case ST_FUSE_MUL_MAT:
        return st_cuda_mul_mat_fused_handoff(b, &it->grp.mm, it->packs_next, it->reads_packed, err);
    case ST_FUSE_ROPE_ATTENTION: it->grp.attn.n_kv = n_kv; return st_cuda_rope_attention(b, &it->grp.ra, err);
    case ST_FUSE_MOE: return st_cuda_moe_fused(b, &it->grp.moe, err);
    case ST_FUSE_NORM_ADD: return st_cuda_norm_add(b, &it->grp.na, err);
    case ST_FUSE_NORM_PAIR: return st_cuda_norm_pair(b, &it->grp.np, err);
    case ST_FUSE_MOE_ROUTE: return st_cuda_moe_route_fused(b, &it->grp.mr, err);
    default: {
        rope_table *t = &p->tables[it->table];
        return st_cuda_rope_table(b, &t->cs, t->positions, &t->rope, err);
    }
    }
}

// The step's uploads, then its items, attention over n_kv keys.
static st_status plan_run(st_backend *b, const st_graph *g, cuda_plan *p, int64_t n_kv, st_error *err) {
    st_status s = run_uploads(cuda_ctx(b), g, err);
    for (int k = 0; k < p->n_items && s == ST_OK; k++) s = run_item(b, g, p, &p->items[k], n_kv, err);
    return s;
}

// ---- profiled runs --------------------------------------------------------------------------

// SM clock cycles a profiled step's hold kernel spins: 20-40 ms at 1-2 GHz, longer than
// the host takes to queue a step of a few thousand launches. (Should the host block on
// a full launch queue, the hold ends anyway and the times after it include launch gaps.)
#define PROFILE_HOLD_CYCLES 40000000LL

__global__ void profile_hold(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

// What item `it` is called in a profile and its least bytes and FLOPs (op_cost.h).
static void item_cost(const st_graph *g, const plan_item *it, int64_t n_kv, st_op_cost *cost) {
    switch (it->kind) {
    case ST_FUSE_NONE: st_op_cost_node(&g->nodes[it->node], n_kv, cost); return;
    case ST_FUSE_MUL_MAT: st_op_cost_fused_mul_mat(&it->grp.mm, cost); return;
    case ST_FUSE_ROPE_ATTENTION: st_op_cost_rope_attention(&it->grp.ra, n_kv, cost); return;
    case ST_FUSE_MOE: st_op_cost_fused_moe(&it->grp.moe, cost); return;
    case ST_FUSE_NORM_ADD: st_op_cost_norm_add(&it->grp.na, cost); return;
    case ST_FUSE_NORM_PAIR: st_op_cost_norm_pair(&it->grp.np, cost); return;
    case ST_FUSE_MOE_ROUTE: st_op_cost_moe_route(&it->grp.mr, cost); return;
    default: snprintf(cost->label, sizeof(cost->label), "rope_table"), cost->bytes = cost->flops = 0.0;
    }
}

static st_status plan_run_profiled(st_backend *b, const st_graph *g, cuda_plan *p, st_error *err) {
    st_cuda_ctx *c = cuda_ctx(b);
    if (!p->marks) {
        p->marks = (st_gpu_event_t *)calloc((size_t)p->n_items + 1, sizeof(*p->marks));
        if (!p->marks) return st_error_set(err, ST_ERROR_NOMEM, "out of host memory profiling a step");
        for (int k = 0; k <= p->n_items; k++) ST_GPU_CHECK(st_gpu_event_create(&p->marks[k]));
    }
    st_status s = run_uploads(c, g, err);
    if (s != ST_OK) return s;
    profile_hold<<<1, 1, 0, c->stream>>>(PROFILE_HOLD_CYCLES);
    ST_GPU_CHECK(st_gpu_get_last_error());
    ST_GPU_CHECK(st_gpu_event_record(p->marks[0], c->stream));
    for (int k = 0; k < p->n_items; k++) {
        if ((s = run_item(b, g, p, &p->items[k], g->n_kv, err)) != ST_OK) return s;
        ST_GPU_CHECK(st_gpu_event_record(p->marks[k + 1], c->stream));
    }
    ST_GPU_CHECK(st_gpu_event_synchronize(p->marks[p->n_items]));
    for (int k = 0; k < p->n_items; k++) {
        float ms = 0.0f;
        ST_GPU_CHECK(st_gpu_event_elapsed_time(&ms, p->marks[k], p->marks[k + 1]));
        st_op_cost cost;
        item_cost(g, &p->items[k], g->n_kv, &cost);
        st_profile_add(b->profile, cost.label, (double)ms * 1e-3, cost.bytes, cost.flops);
    }
    return ST_OK;
}

// The depth bucket of a step over n_kv keys, and the bound its recording attends over.
static int depth_bucket(int64_t n_kv, int64_t n_ctx, int64_t *bound) {
    int k = 0;
    int64_t b = GRAPH_FIRST_BOUND;
    while (k < GRAPH_BUCKETS - 1 && n_kv > b) k++, b *= 2;
    *bound = k == GRAPH_BUCKETS - 1 || b > n_ctx ? n_ctx : b;
    return k;
}

static void plan_free(st_backend *b, cuda_plan *p) {
    st_cuda_ctx *c = cuda_ctx(b);
    if (!p) return;
    (void)st_gpu_stream_synchronize(c->stream); // a replay in flight still reads what goes
    for (int k = 0; k < GRAPH_BUCKETS; k++) st_cuda_record_free(b, p->exec[k]);
    if (p->marks)
        for (int k = 0; k <= p->n_items; k++)
            if (p->marks[k]) (void)st_gpu_event_destroy(p->marks[k]);
    free(p->marks);
    if (p->device_mem) (void)st_gpu_free(p->device_mem);
    free(p->items);
    free(p);
}

static void drop_recordings(st_backend *b, cuda_plan *p) {
    for (int k = 0; k < GRAPH_BUCKETS; k++) {
        st_cuda_record_free(b, p->exec[k]);
        p->exec[k] = NULL;
    }
}

st_status st_cuda_graph_compute(st_backend *b, st_graph *g, st_error *err) {
    cuda_plan *p = (cuda_plan *)g->backend_state;
    if (!p) {
        p = (cuda_plan *)calloc(1, sizeof(*p));
        if (!p) return st_error_set(err, ST_ERROR_NOMEM, "out of host memory planning a step");
        st_status s = plan_build(b, g, p, err);
        if (s != ST_OK) {
            plan_free(b, p);
            return s;
        }
        g->backend_state = p;
        g->owner = b;
    }
    if (b->profile) return plan_run_profiled(b, g, p, err);
    if (!p->record) return plan_run(b, g, p, g->n_kv, err);
    int64_t bound = 0;
    const int k = depth_bucket(g->n_kv, p->n_ctx, &bound);
    if (!p->exec[k]) {
        if (!p->warm) { // lazy buffers grow to their largest outside any recording
            p->warm = true;
            return plan_run(b, g, p, p->n_ctx, err);
        }
        st_status s = st_cuda_record_begin(b, err);
        if (s != ST_OK) return s;
        st_error run_err = {}, end_err = {};
        const st_status rs = plan_run(b, g, p, bound, &run_err);
        const st_status es = st_cuda_record_end(b, &p->exec[k], &end_err); // always ends the recording
        if (rs != ST_OK || es != ST_OK) {
            // not recordable here: plain steps from now on (correct, only slower)
            st_log(ST_LOG_WARN, "CUDA graphs disabled for this step: %s",
                   rs != ST_OK ? run_err.message : end_err.message);
            p->record = false;
            drop_recordings(b, p);
            return plan_run(b, g, p, g->n_kv, err);
        }
    }
    return st_cuda_record_launch(b, p->exec[k], err);
}

void st_cuda_graph_release(st_backend *b, st_graph *g) {
    plan_free(b, (cuda_plan *)g->backend_state);
    g->backend_state = NULL;
}
