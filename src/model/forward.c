/*
 * The forward pass of every supported architecture over one micro-batch of M tokens, as
 * the plain ops of a graph (stride/graph.h). What differs between architectures is data:
 * which weights exist (fused qkv, q/k norms, post norms, experts) and the hyperparameters
 * (rope mode and bases, sliding windows, activation, embedding scale). How the ops run
 * (fused, recorded, which kernels) is the backend's business.
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
 *
 * Split into N shards (tp.h: the CPU backend simulating N GPUs), each block computes every
 * shard's heads or FFN columns in turn and sums their partial outputs after o and after
 * down (the all-reduces); the output head writes each shard's vocabulary rows.
 */
#include "model/runner_internal.h"

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

/* A view v of t's memory cut to rows [row0, row0 + n) of t's (F32) columns. */
static st_tensor cut_rows(st_tensor v, const st_tensor *t, int64_t row0, int64_t n) {
    v.ne[0] = n;
    v.data = (char *)t->data + (size_t)row0 * sizeof(float);
    return v;
}

/* The same rows as a 2D [n, M] view. */
static st_tensor rows(const st_tensor *t, int64_t row0, int64_t n, int64_t M) {
    return cut_rows(cols(t, M), t, row0, n);
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

/* ---- tensor parallelism (tp.h) ----------------------------------------------------------
 * With N shards each block computes every shard's part in turn, each reading only its own
 * weights, heads, cache slice and FFN columns, and the partial [D] outputs of o and down
 * are summed by plain adds where N GPUs would all-reduce. One shard is the plain model:
 * every view below is then the whole buffer, and no add is issued. */

/* Where shard s's q, k and v rows sit in the qkv buffer [Hq + 2Hk, U]. Separate products
 * write the whole model's order [Q | K | V], each shard its own heads' rows of each, so
 * that the whole q and k are each one range where olmoe normalises them together; a fused
 * product writes one block a shard, [q_s | k_s | v_s]. One shard: [Q | K | V] either way. */
typedef struct qkv_rows {
    int64_t q, k, v;
} qkv_rows;

static qkv_rows shard_qkv(const st_tp_plan *tp, bool fused, int s) {
    const int64_t hd = tp->head_dim, Hq = tp->n_head * hd, Hk = tp->n_head_kv * hd;
    const int64_t hq = tp->shard_n_head * hd, hk = tp->shard_n_head_kv * hd;
    if (fused) {
        const int64_t b = s * (hq + 2 * hk);
        return (qkv_rows){b, b + hq, b + hq + hk};
    }
    return (qkv_rows){s * hq, Hq + s * hk, Hq + Hk + s * hk};
}

/* Shard s's KV heads of a layer's cache [hd, Hkv, S]: its own slice, [hd, Hkv/N, S]. */
static st_tensor cache_heads(const st_tensor *cache, st_tp_range kv) {
    st_tensor v = *cache;
    v.ne[1] = kv.n;
    v.data = (char *)cache->data + (size_t)kv.start * cache->nb[1];
    return v;
}

/* Rows [row0, row0 + n) of each expert slot of a [F, K, U] activation, as [n, K, M]. */
static st_tensor slot_rows(const st_tensor *t, int64_t row0, int64_t n, int64_t M) {
    return cut_rows(slots(t, M), t, row0, n);
}

/* Where shard s's partial output of o or down goes, [D, M]: shard 0's in proj, the others'
 * in partial [D, U, N - 1]. */
static st_tensor shard_out(const st_forward_bufs *f, int s, int64_t M) {
    if (s == 0) return cols(&f->proj, M);
    st_tensor v = f->partial;
    v.ne[1] = M;
    v.ne[2] = 1;
    v.data = (char *)f->partial.data + (size_t)(s - 1) * f->partial.nb[2];
    v.nb[2] = v.nb[3] = v.nb[1] * (size_t)M;
    return v;
}

/* proj = the sum of the shards' partial outputs, in shard order: what an all-reduce over N
 * GPUs leaves on each (NCCL sums in its own order: the results agree to rounding). */
static void all_reduce(const st_model *m, const st_forward_bufs *f, st_graph *g, int64_t M) {
    st_tensor o = cols(&f->proj, M);
    for (int s = 1; s < m->tp.n_shards; s++) {
        st_tensor p = shard_out(f, s, M);
        st_graph_add(g, &o, &o, &p);
    }
}

/* ---- the blocks ---------------------------------------------------------------------------- */

/* x += Wo attention(rope(norm(Wq h)), cache),  h = rmsnorm(x) * attn_norm
 * Shard s: its query heads' q, its KV heads' k and v (its slice of the cache), its heads'
 * attention, and its o input columns: a partial sum, all-reduced. */
static void attention_block(const st_model *m, const st_kv_pool *pool, const st_forward_bufs *f, st_graph *g,
                            int64_t il, const st_forward_io *io) {
    const st_hparams *hp = &m->hp;
    const st_tp_plan *tp = &m->tp;
    const st_layer_weights *l = &m->layers[il]; /* the replicated norms */
    const int64_t hd = hp->head_dim, Hq = hp->n_head * hd, Hk = hp->n_head_kv * hd, M = io->ids.ne[0];
    const int64_t hq = tp->shard_n_head * hd, hk = tp->shard_n_head_kv * hd; /* a shard's rows */
    const float eps = hp->rms_eps;
    st_tensor x = cols(&f->x, M), h = cols(&f->h, M), qkv = cols(&f->qkv, M); /* qkv [Hq + 2Hk, M] */

    st_graph_rms_norm(g, &h, &x, l->attn_norm, eps);
    for (int s = 0; s < tp->n_shards; s++) {
        const st_layer_weights *ls = &m->shards[s].layers[il];
        const qkv_rows at = shard_qkv(tp, ls->wqkv != NULL, s);
        if (ls->wqkv) {
            st_tensor qkv_s = rows(&qkv, at.q, hq + 2 * hk, M);
            st_graph_mul_mat(g, &qkv_s, ls->wqkv, &h); /* [hq + 2hk, M] */
        } else {
            st_tensor q = rows(&qkv, at.q, hq, M), k = rows(&qkv, at.k, hk, M), v = rows(&qkv, at.v, hk, M);
            st_graph_mul_mat(g, &q, ls->wq, &h); /* [hq, M] */
            st_graph_mul_mat(g, &k, ls->wk, &h); /* [hk, M] */
            st_graph_mul_mat(g, &v, ls->wv, &h); /* [hk, M] */
        }
    }
    /* q/k norm per head (qwen3, gemma3: [hd]) or over the whole projection (olmoe: [Hq],
     * [Hk]); the latter reads every shard's q (k): on N GPUs, an all-gather of q and k */
    const bool per_head = l->q_norm && l->q_norm->ne[0] == hd;
    if (l->q_norm && !per_head) {
        ST_ASSERT(tp->n_shards == 1 || !l->wqkv); /* (no fused qkv in such an architecture) */
        st_tensor qn = rows(&qkv, 0, Hq, M), kn = rows(&qkv, Hq, Hk, M);
        st_graph_rms_norm(g, &qn, &qn, l->q_norm, eps);
        st_graph_rms_norm(g, &kn, &kn, l->k_norm, eps);
    }
    const bool swa = st_hparams_layer_is_swa(hp, il);
    const st_rope_params rp = layer_rope(m, swa);
    const st_kv_layer *kv = &pool->layers[il];
    const st_attn_params ap = {.window = swa ? (int32_t)hp->sliding_window : 0, .scale = hp->attn_scale};
    for (int s = 0; s < tp->n_shards; s++) {
        const st_layer_weights *ls = &m->shards[s].layers[il];
        const qkv_rows at = shard_qkv(tp, ls->wqkv != NULL, s);
        st_tensor q = heads(&qkv, at.q, hq, hd, M); /* [hd, n_head / N, M] */
        st_tensor k = heads(&qkv, at.k, hk, hd, M); /* [hd, n_head_kv / N, M] */
        st_tensor v = heads(&qkv, at.v, hk, hd, M); /* [hd, n_head_kv / N, M] */
        if (per_head) {
            st_graph_rms_norm(g, &q, &q, l->q_norm, eps);
            st_graph_rms_norm(g, &k, &k, l->k_norm, eps);
        }
        st_graph_rope(g, &q, &q, &io->pos, &rp);
        st_graph_rope(g, &k, &k, &io->pos, &rp);
        const st_tp_range kvh = st_tp_kv_heads(tp, s);
        st_tensor kc = cache_heads(&kv->k, kvh), vc = cache_heads(&kv->v, kvh); /* [hd, n_head_kv / N, S] */
        st_graph_kv_store(g, &kc, &k, &io->slots);
        st_graph_kv_store(g, &vc, &v, &io->slots);
        st_tensor a = heads(&f->attn, s * hq, hq, hd, M); /* [hd, n_head / N, M] */
        st_graph_attention(g, &a, &q, &kc, &vc, &io->pos, io->pages, &ap);

        st_tensor a2 = rows(&f->attn, s * hq, hq, M), o = shard_out(f, s, M);
        st_graph_mul_mat(g, &o, ls->wo, &a2); /* [D, M] (a partial sum with N > 1) */
    }
    all_reduce(m, f, g, M);
    st_tensor o = cols(&f->proj, M);
    if (l->post_attn_norm) st_graph_rms_norm(g, &o, &o, l->post_attn_norm, eps);
    st_graph_add(g, &x, &x, &o);
}

/* x += Wdown (act(Wgate h) * Wup h),  h = rmsnorm(x) * ffn_norm
 * Shard s: its F/N columns of gate and up (a block [gate_s | up_s] of ffn_a) and of down's
 * input: a partial sum, all-reduced. */
static void ffn_dense(const st_model *m, const st_forward_bufs *f, st_graph *g, int64_t il, int64_t M) {
    const st_hparams *hp = &m->hp;
    const st_layer_weights *l = &m->layers[il];
    const int64_t F = m->tp.shard_n_ff; /* a shard's columns (all of them with one shard) */
    st_tensor x = cols(&f->x, M), h = cols(&f->h, M);
    st_graph_rms_norm(g, &h, &x, l->ffn_norm, hp->rms_eps);
    for (int s = 0; s < m->tp.n_shards; s++) {
        const st_layer_weights *ls = &m->shards[s].layers[il];
        st_tensor act = rows(&f->ffn_b, s * F, F, M), out = shard_out(f, s, M); /* [F/N, M], [D, M] */
        if (ls->w_gate) {
            st_tensor gate = rows(&f->ffn_a, 2 * s * F, F, M), up = rows(&f->ffn_a, 2 * s * F + F, F, M);
            st_graph_mul_mat(g, &gate, ls->w_gate, &h); /* [F/N, M] */
            st_graph_mul_mat(g, &up, ls->w_up, &h);     /* [F/N, M] */
            if (hp->ffn_act == ST_FFN_ACT_GELU_TANH) st_graph_geglu(g, &act, &gate, &up);
            else st_graph_swiglu(g, &act, &gate, &up);
        } else { /* fused [K, 2F/N] gate_up (phi3), gate rows first */
            st_tensor gate_up = rows(&f->ffn_a, 2 * s * F, 2 * F, M);
            st_graph_mul_mat(g, &gate_up, ls->w_up, &h); /* [2F/N, M] */
            st_graph_swiglu_fused(g, &act, &gate_up);
        }
        st_graph_mul_mat(g, &out, ls->w_down, &act); /* [D, M] */
    }
    all_reduce(m, f, g, M);
    st_tensor out = cols(&f->proj, M);
    if (l->post_ffn_norm) st_graph_rms_norm(g, &out, &out, l->post_ffn_norm, hp->rms_eps);
    st_graph_add(g, &x, &x, &out);
}

/* x += sum_j w_j Wdown[e_j] (silu(Wgate[e_j] h) * Wup[e_j] h) over the top-k experts
 * Router and choice replicated; shard s: its F/N columns of every chosen expert, weighted
 * and summed: a partial sum, all-reduced. */
static void ffn_moe(const st_model *m, const st_forward_bufs *f, st_graph *g, int64_t il, int64_t M) {
    const st_hparams *hp = &m->hp;
    const st_layer_weights *l = &m->layers[il];
    const int64_t F = m->tp.shard_n_ff;
    st_tensor x = cols(&f->x, M), h = cols(&f->h, M);
    st_graph_rms_norm(g, &h, &x, l->ffn_norm, hp->rms_eps);
    st_tensor logits = cols(&f->moe_logits, M), ids = cols(&f->moe_ids, M), w = cols(&f->moe_weights, M);
    st_graph_mul_mat(g, &logits, l->router, &h); /* [E, M] */
    st_graph_topk_route(g, &ids, &w, &logits, (int32_t)hp->n_expert_used, true, hp->expert_weights_norm);
    for (int s = 0; s < m->tp.n_shards; s++) {
        const st_layer_weights *ls = &m->shards[s].layers[il];
        st_tensor gate = slot_rows(&f->ffn_a, s * F, F, M), up = slot_rows(&f->ffn_b, s * F, F, M);
        st_tensor down = slots(&f->moe_down, M), out = shard_out(f, s, M); /* (down: one shard at a time) */
        st_graph_mul_mat_id(g, &gate, ls->gate_exps, &h, &ids); /* [F/N, K, M] */
        st_graph_mul_mat_id(g, &up, ls->up_exps, &h, &ids);     /* [F/N, K, M] */
        st_graph_swiglu(g, &up, &gate, &up);
        st_graph_mul_mat_id(g, &down, ls->down_exps, &up, &ids); /* [D, K, M] */
        st_graph_moe_combine(g, &out, &down, &w);                 /* [D, M] */
    }
    all_reduce(m, f, g, M);
    st_tensor out = cols(&f->proj, M);
    if (l->post_ffn_norm) st_graph_rms_norm(g, &out, &out, l->post_ffn_norm, hp->rms_eps);
    st_graph_add(g, &x, &x, &out);
}

void st_forward_build(const st_model *m, const st_kv_pool *pool, const st_forward_bufs *f, st_graph *g,
                      const st_forward_io *io) {
    const st_hparams *hp = &m->hp;
    const int64_t M = io->ids.ne[0], n_out = io->n_out;
    ST_ASSERT(io->pos.ne[0] == M && io->slots.ne[0] == M && n_out <= M);
    ST_ASSERT(n_out == 0 || n_out <= io->logits->ne[1]);
    g->n_tokens = M;
    st_tensor x = cols(&f->x, M);

    st_graph_get_rows(g, &x, m->token_embd, &io->ids); /* [D, M] */
    if (hp->embd_scale != 1.0f) st_graph_scale(g, &x, &x, hp->embd_scale);

    for (int64_t il = 0; il < hp->n_layer; il++) {
        attention_block(m, pool, f, g, il, io);
        if (hp->n_expert > 0) ffn_moe(m, f, g, il, M);
        else ffn_dense(m, f, g, il, M);
    }

    if (n_out == 0) return; /* a batch whose logits nobody reads */
    /* the tokens whose logits are wanted: gathered, or the last n_out as a view */
    st_tensor last = x;
    if (io->out_rows) {
        last = cols(&f->x_out, n_out);
        st_graph_get_rows(g, &last, &x, io->out_rows); /* [D, n_out] */
    } else {
        last.ne[1] = n_out;
        last.data = (char *)x.data + (size_t)(M - n_out) * x.nb[1];
        last.nb[2] = last.nb[3] = last.nb[1] * (size_t)n_out;
    }
    st_tensor hn = cols(&f->h, n_out); /* [D, n_out] */
    st_graph_rms_norm(g, &hn, &last, m->output_norm, hp->rms_eps);
    for (int s = 0; s < m->tp.n_shards; s++) { /* each shard's vocabulary rows: concatenated */
        const st_tp_range v = st_tp_vocab_rows(&m->tp, s);
        st_tensor logits = rows(io->logits, v.start, v.n, n_out); /* [V/N, n_out] of [V, n_out] */
        st_graph_mul_mat(g, &logits, m->shards[s].output, &hn);
    }
}
