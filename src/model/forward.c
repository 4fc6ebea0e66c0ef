/*
 * The forward pass of every supported architecture, one micro-batch of M tokens at a
 * time, as straight-line code over backend ops. What differs between architectures is
 * data: which weights exist (fused qkv, q/k norms, post norms, experts) and the
 * hyperparameters (rope mode and bases, sliding windows, activation, embedding scale).
 *
 *   x = embd[ids] * embd_scale                                   [D, M]
 *   for each layer:
 *     h = rmsnorm(x) * attn_norm
 *     q, k, v = Wq h, Wk h, Wv h   (or one fused Wqkv h)         [hd, Hq|Hk, M]
 *     q, k = rmsnorm(q) * q_norm, rmsnorm(k) * k_norm            (per head, or whole)
 *     q, k = rope(q, pos), rope(k, pos)
 *     cache[pos] = k, v
 *     a = softmax(scale q.K^T + causal/window mask) V            [Hq, M]
 *     o = Wo a;  o = rmsnorm(o) * post_attn_norm (gemma3);  x += o
 *     h = rmsnorm(x) * ffn_norm
 *     dense: f = Wdown (act(Wgate h) * Wup h)
 *     MoE:   p = softmax(Wrouter h); top-k experts e_j with weights w_j;
 *            f = sum_j w_j Wdown[e_j] (act(Wgate[e_j] h) * Wup[e_j] h)
 *     f = rmsnorm(f) * post_ffn_norm (gemma3);  x += f
 *   logits = Wout (rmsnorm(x) * output_norm)                     [V, n_out]
 */
#include "model/session_internal.h"

#define TRY(expr)                                                                                                  \
    do {                                                                                                           \
        st_status try_s_ = (expr);                                                                                 \
        if (try_s_ != ST_OK) return try_s_;                                                                        \
    } while (0)

/* The first M tokens of a [n, U] activation, as [n, M]. */
static st_tensor cols(const st_tensor *t, int64_t M) {
    st_tensor v = *t;
    v.ne[1] = M;
    v.nb[2] = v.nb[3] = v.nb[1] * (size_t)M;
    return v;
}

/* The first M tokens of a [n, K, U] per-expert-slot activation, as [n, K, M]. */
static st_tensor slots(const st_tensor *t, int64_t M) {
    st_tensor v = *t;
    v.ne[2] = M;
    v.nb[3] = v.nb[2] * (size_t)M;
    return v;
}

/* Rows [row0, row0 + n) of each column of a [R, M] activation, viewed as
 * [head_dim, n / head_dim, M] (heads of q, k or v inside a qkv buffer). */
static st_tensor heads(const st_tensor *t, int64_t row0, int64_t n, int64_t head_dim, int64_t M) {
    st_tensor v = {.type = ST_TYPE_F32};
    v.ne[0] = head_dim;
    v.ne[1] = n / head_dim;
    v.ne[2] = M;
    v.ne[3] = 1;
    v.nb[0] = sizeof(float);
    v.nb[1] = (size_t)head_dim * sizeof(float);
    v.nb[2] = t->nb[1];
    v.nb[3] = v.nb[2] * (size_t)M;
    v.data = (char *)t->data + (size_t)row0 * sizeof(float);
    return v;
}

/* The same rows as a 2D [n, M] view. */
static st_tensor rows(const st_tensor *t, int64_t row0, int64_t n, int64_t M) {
    st_tensor v = cols(t, M);
    v.ne[0] = n;
    v.data = (char *)t->data + (size_t)row0 * sizeof(float);
    return v;
}

/* x += W a, or x += rmsnorm(W a) * post_norm (gemma3); y [N, M] is scratch. With next_norm
 * (one token), the add also forms s->x_w = x * next_norm for the product after it; *x_w_norm
 * says what s->x_w holds afterwards (next_norm, or NULL when it was not formed). */
static st_status project_add(st_session *s, st_tensor *x, const st_tensor *w, const st_tensor *a, st_tensor *y,
                             const st_tensor *post_norm, const st_tensor *next_norm, const st_tensor **x_w_norm,
                             st_error *err) {
    st_backend *b = s->model->backend;
    *x_w_norm = NULL;
    if (post_norm) {
        TRY(b->iface->mul_mat(b, y, w, a, err));
        b->iface->rms_norm(b, y, y, post_norm, s->model->hp.rms_eps);
        b->iface->add(b, x, x, y);
        return ST_OK;
    }
    st_fused_mul_mat op = {.n_w = 1, .w = {w}, .y = {y}, .x = a, .epilogue = ST_FUSED_EPILOGUE_ADD, .out = x};
    if (next_norm) {
        ST_ASSERT(x->ne[1] == 1);
        op.next_norm_w = next_norm;
        op.next_h = &s->x_w;
    }
    TRY(st_backend_mul_mat_fused(b, &op, err));
    *x_w_norm = next_norm;
    return ST_OK;
}

/* Whether a one-token step may have its residual adds prepare the next product's norm: the
 * backend fuses products and has a rule for it (checked before building the next product's
 * descriptor, which only the rule reads). */
static bool norms_preparable(const st_session *s, int64_t M) {
    const st_backend_iface *be = s->model->backend->iface;
    return M == 1 && be->mul_mat_fused && be->prepared_norm_pays;
}

/* Whether the residual add before the normed product op should form its x * norm_w
 * (project_add): where the backend says the product runs faster from it. */
static bool prepare_norm_for(const st_session *s, const st_fused_mul_mat *op) {
    st_backend *b = s->model->backend;
    return op->norm_w && b->iface->prepared_norm_pays(b, op);
}

/* A layer's normed q/k/v product: h = rmsnorm(x) * attn_norm; q, k, v = Wq h, Wk h, Wv h
 * (or Wqkv h). op points into the struct: it stays where it was built. */
typedef struct qkv_product {
    st_tensor x, h, qkv, q, k, v; /* qkv [Hq + 2Hk, M]; q, k, v its rows */
    st_fused_mul_mat op;
} qkv_product;

static void qkv_product_init(const st_session *s, const st_layer_weights *l, int64_t M, qkv_product *p) {
    const st_hparams *hp = &s->model->hp;
    const int64_t hd = hp->head_dim, Hq = hp->n_head * hd, Hk = hp->n_head_kv * hd;
    p->x = cols(&s->x, M), p->h = cols(&s->h, M), p->qkv = cols(&s->qkv, M);
    p->q = rows(&p->qkv, 0, Hq, M), p->k = rows(&p->qkv, Hq, Hk, M), p->v = rows(&p->qkv, Hq + Hk, Hk, M);
    st_fused_mul_mat op = {.x = &p->x, .norm_w = l->attn_norm, .eps = hp->rms_eps, .h = &p->h};
    if (l->wqkv) {
        op.n_w = 1;
        op.w[0] = l->wqkv; /* [K, Hq + 2Hk] */
        op.y[0] = &p->qkv;
    } else {
        op.n_w = 3;
        op.w[0] = l->wq, op.w[1] = l->wk, op.w[2] = l->wv;
        op.y[0] = &p->q, op.y[1] = &p->k, op.y[2] = &p->v;
    }
    p->op = op;
}

/* A dense layer's normed gate/up product: h = rmsnorm(x) * ffn_norm; act = act(Wgate h) *
 * Wup h in the op's epilogue, or, for a fused [K, 2F] gate_up weight (phi3), gate_up = Wgate_up
 * h and the SwiGLU after it (swiglu_after). op points into the struct, as above. */
typedef struct gate_up_product {
    st_tensor x, h, gate, up, gate_up, act; /* act [F, M] */
    bool swiglu_after;
    st_fused_mul_mat op;
} gate_up_product;

static void gate_up_product_init(const st_session *s, const st_layer_weights *l, int64_t M, gate_up_product *p) {
    const st_hparams *hp = &s->model->hp;
    const int64_t F = hp->n_ff;
    p->x = cols(&s->x, M), p->h = cols(&s->h, M);
    p->act = rows(&s->ffn_b, 0, F, M);
    st_fused_mul_mat op = {.x = &p->x, .norm_w = l->ffn_norm, .eps = hp->rms_eps, .h = &p->h};
    p->swiglu_after = !l->w_gate;
    if (l->w_gate) {
        p->gate = rows(&s->ffn_a, 0, F, M), p->up = rows(&s->ffn_a, F, F, M);
        op.n_w = 2;
        op.w[0] = l->w_gate, op.w[1] = l->w_up;
        op.y[0] = &p->gate, op.y[1] = &p->up;
        op.epilogue = hp->ffn_act == ST_FFN_ACT_GELU_TANH ? ST_FUSED_EPILOGUE_GEGLU : ST_FUSED_EPILOGUE_SWIGLU;
        op.out = &p->act;
    } else { /* gate rows first */
        p->gate_up = rows(&s->ffn_a, 0, 2 * F, M);
        op.n_w = 1;
        op.w[0] = l->w_up;
        op.y[0] = &p->gate_up;
    }
    p->op = op;
}

/* The rope of a layer: the sliding-window layers' base where the model has one. */
static st_rope_params layer_rope(const st_model *m, bool swa) {
    const st_hparams *hp = &m->hp;
    st_rope_params rp = st_rope_params_default(hp->rope_mode, (int32_t)hp->n_rot,
                                               swa ? hp->rope_freq_base_swa : hp->rope_freq_base);
    rp.freq_scale = hp->rope_freq_scale;
    rp.attn_factor = hp->rope_attn_factor;
    rp.freq_factors = m->rope_factors ? m->rope_factors->data : NULL;
    return rp;
}

/* tables: s->rope_cs holds this step's rotations (one token, a backend with rope_table).
 * *x_w_norm: what s->x_w holds x times on entry and on return (project_add). */
static st_status attention_block(st_session *s, const st_layer_weights *l, int64_t il, const st_forward_io *io,
                                 bool tables, const st_tensor **x_w_norm, st_error *err) {
    st_model *m = s->model;
    const st_hparams *hp = &m->hp;
    st_backend *b = m->backend;
    const st_backend_iface *be = b->iface;
    const int64_t hd = hp->head_dim, Hq = hp->n_head * hd, Hk = hp->n_head_kv * hd, M = io->ids.ne[0];
    st_tensor pos = io->pos;

    qkv_product p;
    qkv_product_init(s, l, M, &p);
    if (l->attn_norm && *x_w_norm == l->attn_norm) p.op.x_w = &s->x_w;
    TRY(st_backend_mul_mat_fused(b, &p.op, err));
    st_tensor q = heads(&p.qkv, 0, Hq, hd, M);       /* [hd, n_head, M] */
    st_tensor k = heads(&p.qkv, Hq, Hk, hd, M);      /* [hd, n_head_kv, M] */
    st_tensor v = heads(&p.qkv, Hq + Hk, Hk, hd, M); /* [hd, n_head_kv, M] */

    /* q, k = rmsnorm(q) * q_norm, rmsnorm(k) * k_norm: per head (qwen3, gemma3, fused below)
     * or over the whole projection (olmoe, here); then RoPE; then k, v into the cache */
    const bool per_head_norm = l->q_norm && l->q_norm->ne[0] == hd;
    if (l->q_norm && !per_head_norm) {
        be->rms_norm(b, &p.q, &p.q, l->q_norm, hp->rms_eps);
        be->rms_norm(b, &p.k, &p.k, l->k_norm, hp->rms_eps);
    }
    const bool swa = st_hparams_layer_is_swa(hp, il);
    const st_rope_params rp = layer_rope(m, swa);
    st_kv_layer *kv = &s->kv[il];
    st_fused_rope_store rs = {.q = &q, .k = &k, .v = &v, .eps = hp->rms_eps, .positions = &pos, .rope = &rp,
                              .k_cache = &kv->k, .v_cache = &kv->v, .rope_cs = tables ? &s->rope_cs[swa] : NULL};
    if (per_head_norm) rs.q_norm = l->q_norm, rs.k_norm = l->k_norm;
    st_attn_params ap = {.n_kv = io->n_kv, .window = swa ? (int32_t)hp->sliding_window : 0, .scale = hp->attn_scale};
    st_tensor attn = heads(&s->attn, 0, Hq, hd, M); /* [hd, n_head, M] */
    st_fused_rope_attention ra = {.rs = rs, .out = &attn, .attn = &ap};
    TRY(st_backend_rope_attention(b, &ra, err));

    st_tensor a2 = cols(&s->attn, M), o = cols(&s->proj, M);
    /* the dense FFN's fused norm + gate/up may take its x * ffn_norm from the add */
    const st_tensor *next = NULL;
    if (hp->n_expert == 0 && norms_preparable(s, M)) {
        gate_up_product g;
        gate_up_product_init(s, l, M, &g);
        if (prepare_norm_for(s, &g.op)) next = l->ffn_norm;
    }
    return project_add(s, &p.x, l->wo, &a2, &o, l->post_attn_norm, next, x_w_norm, err); /* x += [post-norm] Wo a */
}

/* x += Wdown (act(Wgate h) * Wup h),  h = rmsnorm(x) * ffn_norm  (post-norm on gemma3);
 * next_l: the next layer (NULL after the last), whose q/k/v product may take its x *
 * attn_norm from the add. */
static st_status ffn_dense(st_session *s, const st_layer_weights *l, int64_t M, const st_layer_weights *next_l,
                           const st_tensor **x_w_norm, st_error *err) {
    st_backend *b = s->model->backend;
    st_tensor out = cols(&s->proj, M);
    gate_up_product g;
    gate_up_product_init(s, l, M, &g);
    if (l->ffn_norm && *x_w_norm == l->ffn_norm) g.op.x_w = &s->x_w;
    TRY(st_backend_mul_mat_fused(b, &g.op, err));
    if (g.swiglu_after) b->iface->swiglu_fused(b, &g.act, &g.gate_up);
    const st_tensor *next = NULL;
    if (next_l && norms_preparable(s, M)) {
        qkv_product p;
        qkv_product_init(s, next_l, M, &p);
        if (prepare_norm_for(s, &p.op)) next = next_l->attn_norm;
    }
    return project_add(s, &g.x, l->w_down, &g.act, &out, l->post_ffn_norm, next, x_w_norm, err); /* [D, M] */
}

static st_status ffn_moe(st_session *s, const st_layer_weights *l, int64_t M, st_error *err) {
    st_model *m = s->model;
    const st_hparams *hp = &m->hp;
    st_backend *b = m->backend;
    const st_backend_iface *be = b->iface;
    st_tensor x = cols(&s->x, M), h = cols(&s->h, M), out = cols(&s->proj, M);
    be->rms_norm(b, &h, &x, l->ffn_norm, hp->rms_eps);
    st_tensor logits = cols(&s->moe_logits, M), ids = cols(&s->moe_ids, M), w = cols(&s->moe_weights, M);
    TRY(be->mul_mat(b, &logits, l->router, &h, err)); /* [E, M] */
    be->topk_route(b, &ids, &w, &logits, (int32_t)hp->n_expert_used, true, hp->expert_weights_norm);
    st_tensor gate = slots(&s->ffn_a, M), up = slots(&s->ffn_b, M), down = slots(&s->moe_down, M);
    TRY(be->mul_mat_id(b, &gate, l->gate_exps, &h, &ids, err)); /* [F, K, M] */
    TRY(be->mul_mat_id(b, &up, l->up_exps, &h, &ids, err));     /* [F, K, M] */
    be->swiglu(b, &up, &gate, &up);
    TRY(be->mul_mat_id(b, &down, l->down_exps, &up, &ids, err)); /* [D, K, M] */
    be->moe_combine(b, &out, &down, &w);                          /* [D, M] */
    if (l->post_ffn_norm) be->rms_norm(b, &out, &out, l->post_ffn_norm, hp->rms_eps);
    be->add(b, &x, &x, &out);
    return ST_OK;
}

st_status st_forward(st_session *s, const st_forward_io *io, st_error *err) {
    st_model *m = s->model;
    const st_hparams *hp = &m->hp;
    st_backend *b = m->backend;
    const st_backend_iface *be = b->iface;
    const int64_t M = io->ids.ne[0], n_out = io->n_out;
    ST_ASSERT(io->pos.ne[0] == M && n_out <= M && (n_out == 0 || n_out <= io->logits->ne[1]));
    st_tensor x = cols(&s->x, M);

    TRY(be->get_rows(b, &x, m->token_embd, &io->ids, err)); /* [D, M] */
    if (hp->embd_scale != 1.0f) be->scale(b, &x, &x, hp->embd_scale);

    /* one token: its rotations once for the layers of each rope (global, sliding-window) */
    const bool tables = M == 1 && be->rope_table && hp->n_rot >= 2;
    if (tables) {
        for (int swa = 0; swa < 2; swa++) {
            if (!s->rope_cs_used[swa]) continue;
            const st_rope_params rp = layer_rope(m, swa);
            TRY(be->rope_table(b, &s->rope_cs[swa], &io->pos, &rp, err));
        }
    }

    const st_tensor *x_w_norm = NULL; /* s->x_w holds x times this norm weight (project_add) */
    for (int64_t il = 0; il < hp->n_layer; il++) {
        const st_layer_weights *l = &m->layers[il];
        TRY(attention_block(s, l, il, io, tables, &x_w_norm, err));
        if (hp->n_expert > 0) {
            TRY(ffn_moe(s, l, M, err));
            x_w_norm = NULL;
        } else {
            TRY(ffn_dense(s, l, M, il + 1 < hp->n_layer ? &m->layers[il + 1] : NULL, &x_w_norm, err));
        }
    }

    if (n_out == 0) return ST_OK; /* a micro-batch whose logits nobody reads */
    /* the last n_out tokens: final norm, then the output head */
    st_tensor last = x;
    last.ne[1] = n_out;
    last.data = (char *)x.data + (size_t)(M - n_out) * x.nb[1];
    last.nb[2] = last.nb[3] = last.nb[1] * (size_t)n_out;
    st_tensor hn = cols(&s->h, n_out), logits = cols(io->logits, n_out); /* [V, n_out] */
    st_fused_mul_mat head = {.n_w = 1, .w = {m->output}, .y = {&logits}, .x = &last, .norm_w = m->output_norm,
                             .eps = hp->rms_eps, .h = &hn};
    return st_backend_mul_mat_fused(b, &head, err);
}
