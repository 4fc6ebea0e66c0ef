/* Sessions: the KV cache, the scratch activations of one micro-batch, and the eval loop
 * that cuts a token sequence into micro-batches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/session_internal.h"

st_session_options st_session_options_default(void) {
    st_session_options o = {.n_ctx = 4096, .n_ubatch = 512, .kv_type = ST_TYPE_F16};
    return o;
}

/* A packed tensor of `type` with ne = {n0, n1, n2}, placed at *offset in base. */
static st_tensor place(void *base, size_t *offset, st_type type, int64_t n0, int64_t n1, int64_t n2) {
    st_tensor t = {.type = type, .ne = {n0, n1, n2, 1}};
    bool ok = st_tensor_set_packed_strides(&t);
    ST_ASSERT(ok);
    t.data = base ? (char *)base + *offset : NULL;
    *offset += (st_tensor_nbytes(&t) + 255) / 256 * 256;
    return t;
}

/* Lays out every scratch tensor; with base NULL it only measures. */
static size_t layout_scratch(st_session *s, void *base) {
    const st_hparams *hp = &s->model->hp;
    const int64_t U = s->opt.n_ubatch, D = hp->n_embd, hd = hp->head_dim;
    const int64_t Hq = hp->n_head * hd, Hk = hp->n_head_kv * hd, F = hp->n_ff, K = hp->n_expert_used;
    size_t off = 0;
    s->ids = place(base, &off, ST_TYPE_I32, U, 1, 1);
    s->pos = place(base, &off, ST_TYPE_I32, U, 1, 1);
    s->step_ids = place(base, &off, ST_TYPE_I32, 2, 1, 1); /* id, position: step_in's layout */
    s->step_ids.ne[0] = 1;
    s->step_pos = s->step_ids;
    if (base) s->step_pos.data = (int32_t *)s->step_ids.data + 1;
    s->x = place(base, &off, ST_TYPE_F32, D, U, 1);
    s->h = place(base, &off, ST_TYPE_F32, D, U, 1);
    s->qkv = place(base, &off, ST_TYPE_F32, Hq + 2 * Hk, U, 1);
    s->attn = place(base, &off, ST_TYPE_F32, Hq, U, 1);
    s->proj = place(base, &off, ST_TYPE_F32, D, U, 1);
    s->x_w = place(base, &off, ST_TYPE_F32, D, 1, 1);
    for (int i = 0; i < 2; i++) s->rope_cs[i] = place(base, &off, ST_TYPE_F32, hp->n_rot > 0 ? hp->n_rot : 1, 1, 1);
    if (hp->n_expert > 0) {
        s->ffn_a = place(base, &off, ST_TYPE_F32, F, K, U);
        s->ffn_b = place(base, &off, ST_TYPE_F32, F, K, U);
        s->moe_logits = place(base, &off, ST_TYPE_F32, hp->n_expert, U, 1);
        s->moe_ids = place(base, &off, ST_TYPE_I32, K, U, 1);
        s->moe_weights = place(base, &off, ST_TYPE_F32, K, U, 1);
        s->moe_down = place(base, &off, ST_TYPE_F32, D, K, U);
    } else {
        s->ffn_a = place(base, &off, ST_TYPE_F32, 2 * F, U, 1);
        s->ffn_b = place(base, &off, ST_TYPE_F32, F, U, 1);
    }
    return off;
}

/* Host memory through the backend's host_alloc where it has one (page-locked on CUDA). */
static st_status host_alloc(st_backend *b, size_t nbytes, void **out, st_error *err) {
    if (b->iface->host_alloc) return b->iface->host_alloc(b, nbytes, out, err);
    *out = malloc(nbytes ? nbytes : 1);
    return *out ? ST_OK : st_error_set(err, ST_ERROR_NOMEM, "out of memory (%zu bytes)", nbytes);
}

static void host_free(st_backend *b, void *ptr) {
    if (b->iface->host_free) b->iface->host_free(b, ptr);
    else free(ptr);
}

static void drop_decode_graphs(st_session *s) {
    st_backend *b = s->model->backend;
    for (int i = 0; i < ST_DECODE_BUCKETS; i++) {
        if (s->decode_graphs[i]) b->iface->graph_free(b, s->decode_graphs[i]);
        s->decode_graphs[i] = NULL;
    }
}

/* s->logits for micro-batches of n tokens (decode steps write to step_logits instead). */
static st_status ensure_logits(st_session *s, int64_t n, st_error *err) {
    if (n <= s->n_logits_cap) return ST_OK;
    st_backend *b = s->model->backend;
    if (s->logits_buffer) b->iface->dealloc(b, s->logits_buffer);
    s->logits_buffer = NULL;
    s->n_logits_cap = 0;
    size_t off = 0;
    st_tensor t = place(NULL, &off, ST_TYPE_F32, s->model->hp.n_vocab, n, 1);
    st_status st = b->iface->alloc(b, off, &s->logits_buffer, err);
    if (st != ST_OK) return st_error_wrap(err, "allocating logits for %lld tokens", (long long)n);
    t.data = s->logits_buffer;
    s->logits = t;
    s->n_logits_cap = n;
    return ST_OK;
}

st_status st_session_init(st_model *m, const st_session_options *opt, st_session **out, st_error *err) {
    *out = NULL;
    const st_hparams *hp = &m->hp;
    if (opt->n_ctx <= 0 || opt->n_ubatch <= 0)
        return st_error_set(err, ST_ERROR_INVALID, "context (%lld) and micro-batch (%lld) must be positive",
                            (long long)opt->n_ctx, (long long)opt->n_ubatch);
    if (opt->kv_type != ST_TYPE_F16 && opt->kv_type != ST_TYPE_F32)
        return st_error_set(err, ST_ERROR_INVALID, "KV cache type must be f16 or f32, not %s",
                            st_type_name(opt->kv_type));
    bool graphs = true;
    const char *no_graphs = getenv("STRIDE_DISABLE_GRAPHS");
    if (no_graphs && *no_graphs) {
        if (strcmp(no_graphs, "0") != 0 && strcmp(no_graphs, "1") != 0)
            return st_error_set(err, ST_ERROR_INVALID, "STRIDE_DISABLE_GRAPHS must be 0 or 1, not '%s'", no_graphs);
        graphs = strcmp(no_graphs, "1") != 0;
    }
    st_session *s = calloc(1, sizeof(*s));
    if (!s) return st_error_set(err, ST_ERROR_NOMEM, "out of memory");
    s->model = m;
    s->graphs_enabled = graphs && m->backend->iface->graph_begin != NULL;
    s->opt = *opt;
    if (s->opt.n_ubatch > s->opt.n_ctx) s->opt.n_ubatch = s->opt.n_ctx;
    st_backend *b = m->backend;
    st_status st;

    s->kv = calloc((size_t)hp->n_layer, sizeof(st_kv_layer));
    if (!s->kv) {
        st = st_error_set(err, ST_ERROR_NOMEM, "out of memory");
        goto fail;
    }
    size_t kv_bytes = 0;
    for (int64_t il = 0; il < hp->n_layer; il++) {
        s->kv[il].k = place(NULL, &kv_bytes, opt->kv_type, hp->head_dim, hp->n_head_kv, opt->n_ctx);
        s->kv[il].v = place(NULL, &kv_bytes, opt->kv_type, hp->head_dim, hp->n_head_kv, opt->n_ctx);
    }
    if ((st = b->iface->alloc(b, kv_bytes, &s->kv_buffer, err)) != ST_OK) {
        st_error_wrap(err, "allocating the KV cache (%lld tokens, %.2f GiB)", (long long)opt->n_ctx,
                      (double)kv_bytes / (1 << 30));
        goto fail;
    }
    size_t off = 0;
    for (int64_t il = 0; il < hp->n_layer; il++) {
        s->kv[il].k = place(s->kv_buffer, &off, opt->kv_type, hp->head_dim, hp->n_head_kv, opt->n_ctx);
        s->kv[il].v = place(s->kv_buffer, &off, opt->kv_type, hp->head_dim, hp->n_head_kv, opt->n_ctx);
    }
    size_t scratch_bytes = layout_scratch(s, NULL);
    if ((st = b->iface->alloc(b, scratch_bytes, &s->scratch, err)) != ST_OK) {
        st_error_wrap(err, "allocating activations for %lld-token micro-batches", (long long)s->opt.n_ubatch);
        goto fail;
    }
    layout_scratch(s, s->scratch);
    for (int64_t il = 0; il < hp->n_layer; il++) s->rope_cs_used[st_hparams_layer_is_swa(hp, il)] = true;
    if ((st = ensure_logits(s, 1, err)) != ST_OK) goto fail;
    if ((st = host_alloc(b, 2 * sizeof(int32_t), (void **)&s->step_in, err)) != ST_OK ||
        (st = host_alloc(b, (size_t)hp->n_vocab * sizeof(float), (void **)&s->step_logits, err)) != ST_OK) {
        st_error_wrap(err, "allocating the decode step's host buffers");
        goto fail;
    }
    size_t step_off = 0;
    s->step_out = place(s->step_logits, &step_off, ST_TYPE_F32, hp->n_vocab, 1, 1);
    s->batch_pos = malloc((size_t)s->opt.n_ubatch * sizeof(int32_t));
    if (!s->batch_pos) {
        st = st_error_set(err, ST_ERROR_NOMEM, "out of memory");
        goto fail;
    }
    *out = s;
    return ST_OK;
fail:
    st_session_free(s);
    return st;
}

void st_session_free(st_session *s) {
    if (!s) return;
    st_backend *b = s->model->backend;
    drop_decode_graphs(s);
    if (s->kv_buffer) b->iface->dealloc(b, s->kv_buffer);
    if (s->scratch) b->iface->dealloc(b, s->scratch);
    if (s->step_in) host_free(b, s->step_in);
    if (s->step_logits) host_free(b, s->step_logits);
    if (s->logits_buffer) b->iface->dealloc(b, s->logits_buffer);
    free(s->batch_pos);
    free(s->kv);
    free(s);
}

int64_t st_session_n_past(const st_session *s) { return s->n_past; }

void st_session_rewind(st_session *s, int64_t n_past) {
    ST_ASSERT(n_past >= 0 && n_past <= s->n_past);
    s->n_past = n_past;
}

int st_decode_bucket(int64_t pos, int64_t n_ctx, int64_t *n_kv) {
    int k = 0;
    int64_t bound = ST_DECODE_FIRST_BOUND;
    while (k < ST_DECODE_BUCKETS - 1 && pos >= bound) k++, bound *= 2;
    *n_kv = k == ST_DECODE_BUCKETS - 1 || bound > n_ctx ? n_ctx : bound;
    return k;
}

/* A decode step run as plain ops: the copy of step_in, then the forward pass. */
static st_status plain_step(st_session *s, st_forward_io *io, st_error *err) {
    st_backend *b = s->model->backend;
    st_status st = b->iface->write(b, s->step_ids.data, s->step_in, 2 * sizeof(int32_t), err);
    return st == ST_OK ? st_forward(s, io, err) : st;
}

/* One token at position n_past through the model, its logits to step_logits: the id and
 * position go through the page-locked step_in, then the recorded decode step of its depth
 * bucket is replayed where the backend records (session_internal.h). The copy out of
 * step_in and the logits are asynchronous: the caller synchronizes before it reads
 * step_logits or the next call rewrites step_in. */
static st_status decode_token(st_session *s, int32_t token, st_error *err) {
    st_backend *b = s->model->backend;
    s->step_in[0] = token;
    s->step_in[1] = (int32_t)s->n_past;
    st_forward_io io = {.ids = s->step_ids, .pos = s->step_pos, .n_kv = s->n_past + 1, .n_out = 1,
                        .logits = &s->step_out};
    if (!s->graphs_enabled) return plain_step(s, &io, err);
    const int k = st_decode_bucket(s->n_past, s->opt.n_ctx, &io.n_kv);
    if (!s->decode_graphs[k]) {
        if (!s->decode_warm) {
            s->decode_warm = true;
            io.n_kv = s->opt.n_ctx;
            return plain_step(s, &io, err);
        }
        st_status st = b->iface->graph_begin(b, err);
        if (st != ST_OK) return st;
        st_error fwd_err = {0}, end_err = {0};
        st_status fs = plain_step(s, &io, &fwd_err); /* recorded, the copy included */
        st_status es = b->iface->graph_end(b, &s->decode_graphs[k], &end_err); /* always ends the recording */
        if (fs != ST_OK || es != ST_OK) {
            /* Not recordable here: run plainly from now on (correct, only slower). */
            fprintf(stderr, "stride: decode graphs disabled: %s\n", fs != ST_OK ? fwd_err.message : end_err.message);
            s->graphs_enabled = false;
            drop_decode_graphs(s);
            io.n_kv = s->opt.n_ctx;
            return plain_step(s, &io, err);
        }
    }
    return b->iface->graph_launch(b, s->decode_graphs[k], err);
}

/* n tokens that fit the context and the vocabulary. */
static st_status check_tokens(const st_session *s, const int32_t *tokens, int64_t n, st_error *err) {
    const st_hparams *hp = &s->model->hp;
    if (n <= 0) return st_error_set(err, ST_ERROR_INVALID, "no tokens to evaluate");
    if (n > s->opt.n_ctx - s->n_past)
        return st_error_set(err, ST_ERROR_INVALID,
                            "%lld tokens do not fit: %lld of the %lld-token context are used (raise the context "
                            "size)",
                            (long long)n, (long long)s->n_past, (long long)s->opt.n_ctx);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= hp->n_vocab)
            return st_error_set(err, ST_ERROR_INVALID, "token id %d at index %lld is outside the vocabulary (0..%lld)",
                                tokens[i], (long long)i, (long long)hp->n_vocab - 1);
    return ST_OK;
}

st_status st_session_decode(st_session *s, int32_t token, const float **logits, st_error *err) {
    *logits = NULL;
    st_status st = check_tokens(s, &token, 1, err);
    if (st != ST_OK) return st;
    st_backend *b = s->model->backend;
    if ((st = decode_token(s, token, err)) != ST_OK || (st = b->iface->synchronize(b, err)) != ST_OK) return st;
    s->n_past++;
    *logits = s->step_logits;
    return ST_OK;
}

st_status st_session_eval(st_session *s, const int32_t *tokens, int64_t n, bool all_logits, float *logits,
                          st_error *err) {
    const st_hparams *hp = &s->model->hp;
    st_backend *b = s->model->backend;
    st_status st = check_tokens(s, tokens, n, err);
    if (st != ST_OK) return st;
    const int64_t U = s->opt.n_ubatch;
    if (all_logits && (st = ensure_logits(s, U < n ? U : n, err)) != ST_OK) return st;
    const size_t row_bytes = (size_t)hp->n_vocab * sizeof(float);
    int32_t *pos = s->batch_pos;
    for (int64_t done = 0; done < n; done += U) {
        int64_t M = n - done < U ? n - done : U;
        bool last_batch = done + M == n;
        int64_t n_out = all_logits ? M : (last_batch ? 1 : 0);
        float *dst = logits && (all_logits || last_batch) ? logits + (all_logits ? done : 0) * hp->n_vocab : NULL;
        if (M == 1 && n_out == 1) {
            /* a decode step; synchronized either way: step_in is free again, step_logits final */
            if ((st = decode_token(s, tokens[done], err)) == ST_OK && (st = b->iface->synchronize(b, err)) == ST_OK &&
                dst)
                memcpy(dst, s->step_logits, row_bytes);
        } else {
            for (int64_t i = 0; i < M; i++) pos[i] = (int32_t)(s->n_past + i);
            st_forward_io io = {.ids = s->ids, .pos = s->pos, .n_kv = s->n_past + M, .n_out = n_out,
                                .logits = &s->logits};
            io.ids.ne[0] = io.pos.ne[0] = M;
            if ((st = b->iface->write(b, s->ids.data, tokens + done, (size_t)M * sizeof(int32_t), err)) == ST_OK &&
                (st = b->iface->write(b, s->pos.data, pos, (size_t)M * sizeof(int32_t), err)) == ST_OK &&
                (st = st_forward(s, &io, err)) == ST_OK && dst)
                st = b->iface->read(b, dst, s->logits.data, (size_t)n_out * row_bytes, err);
        }
        if (st != ST_OK) break;
        s->n_past += M;
    }
    return st;
}
