/* Fused ops (backend/fused.h): their meaning as sequences of plain backend ops. */
#include "backend/fused.h"

st_status st_fused_mul_mat_composite(st_backend *b, const st_fused_mul_mat *op, st_error *err) {
    const st_backend_iface *be = b->iface;
    ST_ASSERT(op->n_w >= 1 && op->n_w <= 3);
    ST_ASSERT(op->epilogue == ST_FUSED_EPILOGUE_STORE || op->out != NULL);
    ST_ASSERT(op->epilogue == ST_FUSED_EPILOGUE_STORE || op->epilogue == ST_FUSED_EPILOGUE_ADD || op->n_w == 2);
    ST_ASSERT((op->next_h == NULL) == (op->next_norm_w == NULL));
    ST_ASSERT(!op->next_h || op->epilogue == ST_FUSED_EPILOGUE_ADD);
    const st_tensor *in = op->x; /* (x_w, a hint, is not needed here) */
    if (op->norm_w) {
        ST_ASSERT(op->h != NULL);
        be->rms_norm(b, op->h, op->x, op->norm_w, op->eps);
        in = op->h;
    }
    for (int i = 0; i < op->n_w; i++) {
        st_status s = be->mul_mat(b, op->y[i], op->w[i], in, err);
        if (s != ST_OK) return s;
    }
    switch (op->epilogue) {
    case ST_FUSED_EPILOGUE_STORE: break;
    case ST_FUSED_EPILOGUE_ADD:
        be->add(b, op->out, op->out, op->y[0]);
        if (op->next_h) be->mul(b, op->next_h, op->out, op->next_norm_w);
        break;
    case ST_FUSED_EPILOGUE_SWIGLU: be->swiglu(b, op->out, op->y[0], op->y[1]); break;
    case ST_FUSED_EPILOGUE_GEGLU: be->geglu(b, op->out, op->y[0], op->y[1]); break;
    }
    return ST_OK;
}

bool st_fused_rope_store_whole_norm(const st_fused_rope_store *op) {
    return op->q_norm && op->q_norm->ne[0] != op->q->ne[0];
}

st_tensor st_fused_heads_flat(const st_tensor *t) {
    ST_ASSERT(t->type == ST_TYPE_F32 && t->ne[3] == 1 && t->nb[0] == sizeof(float) &&
              t->nb[1] == (size_t)t->ne[0] * sizeof(float));
    st_tensor v = *t;
    v.ne[0] = t->ne[0] * t->ne[1];
    v.ne[1] = t->ne[2];
    v.ne[2] = v.ne[3] = 1;
    v.nb[1] = t->nb[2];
    v.nb[2] = v.nb[3] = t->nb[2] * (size_t)t->ne[2];
    return v;
}

st_status st_fused_rope_store_composite(st_backend *b, const st_fused_rope_store *op, st_error *err) {
    const st_backend_iface *be = b->iface;
    ST_ASSERT((op->q_norm == NULL) == (op->k_norm == NULL));
    if (st_fused_rope_store_whole_norm(op)) {
        st_tensor q = st_fused_heads_flat(op->q), k = st_fused_heads_flat(op->k); /* [hd n_head(_kv), M] */
        ST_ASSERT(op->q_norm->ne[0] == q.ne[0] && op->k_norm->ne[0] == k.ne[0]);
        be->rms_norm(b, &q, &q, op->q_norm, op->eps);
        be->rms_norm(b, &k, &k, op->k_norm, op->eps);
    } else if (op->q_norm) {
        be->rms_norm(b, op->q, op->q, op->q_norm, op->eps);
        be->rms_norm(b, op->k, op->k, op->k_norm, op->eps);
    }
    be->rope(b, op->q, op->q, op->positions, op->rope);
    be->rope(b, op->k, op->k, op->positions, op->rope);
    st_status s = be->kv_store(b, op->k_cache, op->k, op->slots, err);
    if (s != ST_OK) return s;
    return be->kv_store(b, op->v_cache, op->v, op->slots, err);
}

st_status st_fused_rope_attention_composite(st_backend *b, const st_fused_rope_attention *op, st_error *err) {
    const st_fused_rope_store *rs = &op->rs;
    st_status s = st_fused_rope_store_composite(b, rs, err);
    if (s != ST_OK) return s;
    return b->iface->attention(b, op->out, rs->q, rs->k_cache, rs->v_cache, rs->positions, op->pages, op->attn, err);
}

st_status st_fused_moe_composite(st_backend *b, const st_fused_moe *op, st_error *err) {
    const st_backend_iface *be = b->iface;
    if (op->kind == ST_FUSED_MOE_DOWN) {
        st_status s = be->mul_mat_id(b, op->y[0], op->w[0], op->x, op->ids, err);
        if (s != ST_OK) return s;
        be->moe_combine(b, op->out, op->y[0], op->wts);
        if (op->residual) be->add(b, op->residual, op->residual, op->out);
        return ST_OK;
    }
    for (int i = 0; i < 2; i++) {
        st_status s = be->mul_mat_id(b, op->y[i], op->w[i], op->x, op->ids, err);
        if (s != ST_OK) return s;
    }
    if (op->gelu) be->geglu(b, op->out, op->y[0], op->y[1]);
    else be->swiglu(b, op->out, op->y[0], op->y[1]);
    return ST_OK;
}

void st_fused_norm_add_composite(st_backend *b, const st_fused_norm_add *op) {
    b->iface->rms_norm(b, op->h, op->y, op->norm_w, op->eps);
    b->iface->add(b, op->out, op->x, op->h);
}

void st_fused_norm_pair_composite(st_backend *b, const st_fused_norm_pair *op) {
    for (int i = 0; i < 2; i++) b->iface->rms_norm(b, op->dst[i], op->x[i], op->w[i], op->eps[i]);
}

st_status st_fused_moe_route_composite(st_backend *b, const st_fused_moe_route *op, st_error *err) {
    const st_tensor *a = op->x;
    if (op->norm_w) {
        ST_ASSERT(op->h != NULL);
        b->iface->rms_norm(b, op->h, op->x, op->norm_w, op->eps);
        a = op->h;
    }
    st_status s = b->iface->mul_mat(b, op->logits, op->router, a, err);
    if (s != ST_OK) return s;
    b->iface->topk_route(b, op->ids, op->wts, op->logits, op->k, op->softmax_first, op->normalize);
    return ST_OK;
}
