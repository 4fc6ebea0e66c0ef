/* Backend creation, and computing a graph through a backend's plain ops. */
#include "stride/backend.h"

#include <unistd.h>

#include "backend/backend_cpu.h"
#include "backend/op_cost.h"
#include "stride/clock.h"
#ifdef STRIDE_HAVE_CUDA
#include "cuda/cuda_backend.h"
#endif

st_status st_backend_init(st_backend_kind kind, int index, st_backend **out, st_error *err) {
    *out = NULL;
    if (kind == ST_BACKEND_CPU) return st_backend_cpu_init(out, err);
#ifdef STRIDE_HAVE_CUDA
    return st_backend_cuda_init(index, out, err);
#else
    (void)index;
    return st_error_set(err, ST_ERROR_UNSUPPORTED,
                        "this stride was built without the CUDA backend (rebuild with nvcc on PATH)");
#endif
}

void st_backend_free(st_backend *b) {
    if (b) b->iface->free(b);
}

st_status st_backend_memory(st_backend *b, size_t *free_bytes, size_t *total_bytes, st_error *err) {
    if (b->iface->memory) return b->iface->memory(b, free_bytes, total_bytes, err);
    const long page = sysconf(_SC_PAGESIZE), avail = sysconf(_SC_AVPHYS_PAGES), total = sysconf(_SC_PHYS_PAGES);
    if (page <= 0 || avail < 0 || total <= 0)
        return st_error_set(err, ST_ERROR_UNSUPPORTED, "the host's memory size is unknown (sysconf)");
    *free_bytes = (size_t)avail * (size_t)page;
    *total_bytes = (size_t)total * (size_t)page;
    return ST_OK;
}

st_status st_backend_run_node(st_backend *b, const st_node *n, int64_t n_kv, st_error *err) {
    const st_backend_iface *be = b->iface;
    st_tensor *d = n->dst;
    const st_tensor *const *s = n->src;
    switch (n->op) {
    case ST_OP_GET_ROWS: return be->get_rows(b, d, s[0], s[1], err);
    case ST_OP_MUL_MAT: return be->mul_mat(b, d, s[0], s[1], err);
    case ST_OP_MUL_MAT_ID: return be->mul_mat_id(b, d, s[0], s[1], s[2], err);
    case ST_OP_RMS_NORM: be->rms_norm(b, d, s[0], s[1], n->p.eps); return ST_OK;
    case ST_OP_ROPE: be->rope(b, d, s[0], s[1], &n->p.rope); return ST_OK;
    case ST_OP_SWIGLU: be->swiglu(b, d, s[0], s[1]); return ST_OK;
    case ST_OP_GEGLU: be->geglu(b, d, s[0], s[1]); return ST_OK;
    case ST_OP_SWIGLU_FUSED: be->swiglu_fused(b, d, s[0]); return ST_OK;
    case ST_OP_ADD: be->add(b, d, s[0], s[1]); return ST_OK;
    case ST_OP_MUL: be->mul(b, d, s[0], s[1]); return ST_OK;
    case ST_OP_SCALE: be->scale(b, d, s[0], n->p.scale); return ST_OK;
    case ST_OP_KV_STORE: return be->kv_store(b, d, s[0], s[1], err);
    case ST_OP_ATTENTION: {
        st_attn_params p = n->p.attn;
        p.n_kv = n_kv;
        return be->attention(b, d, s[0], s[1], s[2], s[3], n->pages.table ? &n->pages : NULL, &p, err);
    }
    case ST_OP_TOPK_ROUTE:
        be->topk_route(b, d, n->dst2, s[0], n->p.route.k, n->p.route.softmax_first, n->p.route.normalize);
        return ST_OK;
    case ST_OP_MOE_COMBINE: be->moe_combine(b, d, s[0], s[1]); return ST_OK;
    case ST_OP_TOP_K: be->top_k(b, d, n->dst2, s[0], n->p.k); return ST_OK;
    case ST_OP_DRAW: be->draw(b, d, n->dst2, s[0], s[1], s[2], s[3]); return ST_OK;
    case ST_OP_COUNT: break;
    }
    ST_ASSERT(!"unknown op");
    return ST_ERROR_INVALID;
}

st_status st_backend_compute(st_backend *b, st_graph *g, st_error *err) {
    if (g->failed) return st_error_set(err, ST_ERROR_NOMEM, "out of host memory building a step of %d ops", g->n_nodes);
    if (g->owner && g->owner != b) {
        /* another backend's plan: not ours to keep */
        g->owner->iface->graph_release(g->owner, g);
        g->owner = NULL;
        g->backend_state = NULL;
    }
    if (b->profile) b->profile->steps++;
    if (b->iface->graph_compute) return b->iface->graph_compute(b, g, err);
    for (int i = 0; i < g->n_uploads; i++) {
        st_status s = b->iface->write(b, g->uploads[i].dst, g->uploads[i].src, g->uploads[i].n, err);
        if (s != ST_OK) return s;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        /* profiled: the host clock around the node and a wait for it (the backend's one
         * timer may be the caller's, around the whole step) */
        const double t0 = b->profile ? st_clock_seconds() : 0.0;
        st_status s = st_backend_run_node(b, &g->nodes[i], g->n_kv, err);
        if (s == ST_OK && b->profile && (s = b->iface->synchronize(b, err)) == ST_OK) {
            st_op_cost c;
            st_op_cost_node(&g->nodes[i], g->n_kv, &c);
            st_profile_add(b->profile, c.label, st_clock_seconds() - t0, c.bytes, c.flops);
        }
        if (s != ST_OK) {
            st_error_wrap(err, "%s (op %d of the step)", st_op_name(g->nodes[i].op), i);
            return s;
        }
    }
    return ST_OK;
}

void st_backend_set_profile(st_backend *b, st_profile *p) { b->profile = p; }
