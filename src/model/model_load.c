/* Loading a model: plan the layout for the backend's device, allocate one buffer, upload
 * every tensor into its planned layout, and bind the tensors to the block structure. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stride/calibrate.h"
#include "stride/model.h"
#include "stride/quant.h"

#define TENSOR_ALIGNMENT 256
#define CONVERT_CHUNK_BYTES ((size_t)8 << 20) /* f32 rows dequantized at once when converting */

static size_t align_up(size_t n) { return (n + TENSOR_ALIGNMENT - 1) / TENSOR_ALIGNMENT * TENSOR_ALIGNMENT; }

/* Checks a bound weight's shape: ne0, ne1, ne2 (unused dims 1). */
static st_status expect_shape(const st_tensor *t, const char *what, int64_t il, int64_t ne0, int64_t ne1,
                              int64_t ne2, st_error *err) {
    if (t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == ne2 && t->ne[3] == 1) return ST_OK;
    return st_error_set(err, ST_ERROR_FORMAT,
                        "tensor %s of layer %lld has shape [%lld, %lld, %lld], expected [%lld, %lld, %lld] from the "
                        "hyperparameters",
                        what, (long long)il, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                        (long long)ne0, (long long)ne1, (long long)ne2);
}

/* The slot of a block tensor by its name after "blk.N.". */
static st_tensor **layer_slot(st_layer_weights *l, const char *suffix) {
    static const struct {
        const char *suffix;
        size_t offset;
    } slots[] = {
#define SLOT(s, field) {s, offsetof(st_layer_weights, field)}
        SLOT("attn_norm.weight", attn_norm),       SLOT("attn_q.weight", wq),
        SLOT("attn_k.weight", wk),                 SLOT("attn_v.weight", wv),
        SLOT("attn_qkv.weight", wqkv),             SLOT("attn_output.weight", wo),
        SLOT("attn_q_norm.weight", q_norm),        SLOT("attn_k_norm.weight", k_norm),
        SLOT("post_attention_norm.weight", post_attn_norm), SLOT("ffn_norm.weight", ffn_norm),
        SLOT("ffn_gate.weight", w_gate),           SLOT("ffn_up.weight", w_up),
        SLOT("ffn_down.weight", w_down),           SLOT("post_ffw_norm.weight", post_ffn_norm),
        SLOT("ffn_gate_inp.weight", router),       SLOT("ffn_gate_exps.weight", gate_exps),
        SLOT("ffn_up_exps.weight", up_exps),       SLOT("ffn_down_exps.weight", down_exps),
#undef SLOT
    };
    for (size_t i = 0; i < sizeof(slots) / sizeof(slots[0]); i++)
        if (strcmp(suffix, slots[i].suffix) == 0) return (st_tensor **)((char *)l + slots[i].offset);
    return NULL;
}

static st_status bind_tensor(st_model *m, st_tensor *t, const char *name, int64_t n_ctx, st_error *err) {
    const st_hparams *hp = &m->hp;
    if (strcmp(name, "token_embd.weight") == 0) m->token_embd = t;
    else if (strcmp(name, "output_norm.weight") == 0) m->output_norm = t;
    else if (strcmp(name, "output.weight") == 0) m->output = t;
    else if (strcmp(name, "rope_freqs.weight") == 0) m->rope_factors = t;
    else if (strcmp(name, "rope_factors_long.weight") == 0) {
        if (hp->n_ctx_orig > 0 && n_ctx > hp->n_ctx_orig) m->rope_factors = t;
    } else if (strcmp(name, "rope_factors_short.weight") == 0) {
        if (!(hp->n_ctx_orig > 0 && n_ctx > hp->n_ctx_orig)) m->rope_factors = t;
    } else if (strncmp(name, "blk.", 4) == 0) {
        char *end = NULL;
        long long il = strtoll(name + 4, &end, 10);
        if (end == name + 4 || *end != '.' || il < 0 || il >= hp->n_layer)
            return st_error_set(err, ST_ERROR_FORMAT, "tensor '%s' names a layer outside 0..%lld", name,
                                (long long)hp->n_layer - 1);
        st_tensor **slot = layer_slot(&m->layers[il], end + 1);
        if (!slot)
            return st_error_set(err, ST_ERROR_UNSUPPORTED, "tensor '%s' is not used by stride's %s forward pass", name,
                                st_arch_name(hp->arch));
        *slot = t;
    } else {
        return st_error_set(err, ST_ERROR_UNSUPPORTED, "tensor '%s' is not used by stride's %s forward pass", name,
                            st_arch_name(hp->arch));
    }
    return ST_OK;
}

/* ---- quantized tensors: check, convert while uploading ------------------------------------ */

/* Every quantized tensor's type must be one stride reads. Kept quantized (no conversion
 * asked for), it is uploaded as stored, unpadded, and every backend computes with it: the
 * CPU dequantizes a block of rows at a time, CUDA in its kernels (cuda_quant.cu reads every
 * type st_quant_supported names). The plan already holds the converted types when a
 * conversion was asked for (st_layout_plan_gguf_as). */
static st_status check_quantized(const st_model *m, st_error *err) { /* kept or converted alike */
    for (uint64_t i = 0; i < st_gguf_n_tensors(m->file); i++) {
        const st_gguf_tensor_info *info = st_gguf_get_tensor(m->file, i);
        const st_type_traits *tr = st_type_get_traits((uint32_t)info->type);
        if (!tr || !tr->is_quantized) continue;
        if (!st_quant_supported(info->type))
            return st_error_set(err, ST_ERROR_UNSUPPORTED,
                                "tensor '%.*s' has type %s, which stride cannot read (quantized types it reads: %s)",
                                (int)info->name.len, info->name.data, tr->name, st_quant_supported_list());
    }
    return ST_OK;
}

/* Uploads a quantized tensor from the file (packed rows of type `from`) into t, its
 * planned F16/BF16 layout: chunks of rows are dequantized to f32, rounded to t's type and
 * uploaded as a view of those rows (rows are evenly spaced by nb[1], experts too, since
 * nb[2] = nb[1] * N). The whole tensor is never held converted in host memory. */
static st_status upload_converted(st_backend *backend, st_tensor *t, st_type from, const void *file_data,
                                  st_error *err) {
    ST_ASSERT(t->type == ST_TYPE_F16 || t->type == ST_TYPE_BF16);
    ST_ASSERT(st_tensor_has_contiguous_rows(t));
    const int64_t k = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    size_t src_row = 0;
    const bool row_ok = st_type_row_bytes(from, k, &src_row);
    ST_ASSERT(row_ok); /* the GGUF reader validated the shape */
    const size_t dst_row = st_tensor_row_bytes(t);
    if (rows == 0 || k == 0) return ST_OK;
    int64_t chunk = (int64_t)(CONVERT_CHUNK_BYTES / ((size_t)k * sizeof(float)));
    if (chunk < 1) chunk = 1;
    if (chunk > rows) chunk = rows;
    float *f32 = malloc((size_t)chunk * (size_t)k * sizeof(float)); /* [chunk, K] */
    uint16_t *packed = malloc((size_t)chunk * dst_row);              /* [chunk, K] in t's type */
    if (!f32 || !packed) {
        free(f32);
        free(packed);
        return st_error_set(err, ST_ERROR_NOMEM, "no memory to convert %lld rows of %lld values", (long long)chunk,
                            (long long)k);
    }
    st_status s = ST_OK;
    for (int64_t r0 = 0; r0 < rows && s == ST_OK; r0 += chunk) {
        const int64_t n = rows - r0 < chunk ? rows - r0 : chunk;
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < n; r++) {
            float *row = f32 + r * k;
            st_quant_dequantize_row(from, (const char *)file_data + (size_t)(r0 + r) * src_row, row, k);
            if (t->type == ST_TYPE_F16) st_f32_to_f16_row(row, packed + r * k, (size_t)k);
            else st_f32_to_bf16_row(row, packed + r * k, (size_t)k);
        }
        st_tensor view = *t; /* rows r0 .. r0 + n as one 2D tensor */
        view.ne[1] = n;
        view.ne[2] = view.ne[3] = 1;
        view.nb[2] = view.nb[3] = view.nb[1] * (size_t)n;
        view.data = (char *)t->data + (size_t)r0 * t->nb[1];
        s = backend->iface->upload_weight(backend, &view, packed, err);
    }
    free(f32);
    free(packed);
    return s;
}

/* Every block has what the forward pass needs, in the shapes the hyperparameters say. */
static st_status check_layers(const st_model *m, st_error *err) {
    const st_hparams *hp = &m->hp;
    const int64_t D = hp->n_embd, Hq = hp->n_head * hp->head_dim, Hk = hp->n_head_kv * hp->head_dim, F = hp->n_ff;
    if (!m->token_embd || !m->output_norm) return st_error_set(err, ST_ERROR_FORMAT, "missing token_embd or output_norm");
    if (m->token_embd->ne[0] != D)
        return st_error_set(err, ST_ERROR_FORMAT, "token_embd has %lld columns, n_embd is %lld",
                            (long long)m->token_embd->ne[0], (long long)D);
    if (m->output && (m->output->ne[0] != D || m->output->ne[1] != hp->n_vocab))
        return st_error_set(err, ST_ERROR_FORMAT, "output.weight shape does not match [n_embd, n_vocab]");
    if (m->rope_factors && m->rope_factors->ne[0] != hp->n_rot / 2)
        return st_error_set(err, ST_ERROR_FORMAT, "rope factors have %lld entries, expected n_rot/2 = %lld",
                            (long long)m->rope_factors->ne[0], (long long)hp->n_rot / 2);
    if (m->rope_factors && m->rope_factors->type != ST_TYPE_F32)
        return st_error_set(err, ST_ERROR_UNSUPPORTED, "rope factors must be f32");
    for (int64_t il = 0; il < hp->n_layer; il++) {
        const st_layer_weights *l = &m->layers[il];
        st_status s = ST_OK;
        if (!l->attn_norm || !l->wo || !l->ffn_norm)
            return st_error_set(err, ST_ERROR_FORMAT, "layer %lld lacks attn_norm, attn_output or ffn_norm", (long long)il);
        if (l->wqkv) s = expect_shape(l->wqkv, "attn_qkv", il, D, Hq + 2 * Hk, 1, err);
        else if (l->wq && l->wk && l->wv) {
            if ((s = expect_shape(l->wq, "attn_q", il, D, Hq, 1, err)) != ST_OK) return s;
            if ((s = expect_shape(l->wk, "attn_k", il, D, Hk, 1, err)) != ST_OK) return s;
            s = expect_shape(l->wv, "attn_v", il, D, Hk, 1, err);
        } else {
            return st_error_set(err, ST_ERROR_FORMAT, "layer %lld lacks attn_q/k/v (or a fused attn_qkv)", (long long)il);
        }
        if (s != ST_OK || (s = expect_shape(l->wo, "attn_output", il, Hq, D, 1, err)) != ST_OK) return s;
        if (l->q_norm && l->q_norm->ne[0] != hp->head_dim && l->q_norm->ne[0] != Hq)
            return st_error_set(err, ST_ERROR_FORMAT, "layer %lld attn_q_norm has %lld entries (head dim %lld or %lld)",
                                (long long)il, (long long)l->q_norm->ne[0], (long long)hp->head_dim, (long long)Hq);
        if (l->k_norm && l->k_norm->ne[0] != hp->head_dim && l->k_norm->ne[0] != Hk)
            return st_error_set(err, ST_ERROR_FORMAT, "layer %lld attn_k_norm has %lld entries", (long long)il,
                                (long long)l->k_norm->ne[0]);
        if (!l->q_norm != !l->k_norm)
            return st_error_set(err, ST_ERROR_FORMAT, "layer %lld has only one of attn_q_norm and attn_k_norm", (long long)il);
        if (hp->n_expert > 0) {
            if (!l->router || !l->gate_exps || !l->up_exps || !l->down_exps)
                return st_error_set(err, ST_ERROR_FORMAT, "MoE layer %lld lacks its router or expert tensors", (long long)il);
            const int64_t E = hp->n_expert;
            if ((s = expect_shape(l->router, "ffn_gate_inp", il, D, E, 1, err)) != ST_OK ||
                (s = expect_shape(l->gate_exps, "ffn_gate_exps", il, D, F, E, err)) != ST_OK ||
                (s = expect_shape(l->up_exps, "ffn_up_exps", il, D, F, E, err)) != ST_OK ||
                (s = expect_shape(l->down_exps, "ffn_down_exps", il, F, D, E, err)) != ST_OK)
                return s;
        } else if (l->w_gate && l->w_up && l->w_down) {
            if ((s = expect_shape(l->w_gate, "ffn_gate", il, D, F, 1, err)) != ST_OK ||
                (s = expect_shape(l->w_up, "ffn_up", il, D, F, 1, err)) != ST_OK ||
                (s = expect_shape(l->w_down, "ffn_down", il, F, D, 1, err)) != ST_OK)
                return s;
        } else if (l->w_up && l->w_down && hp->arch == ST_ARCH_PHI3) {
            if ((s = expect_shape(l->w_up, "ffn_up (fused gate_up)", il, D, 2 * F, 1, err)) != ST_OK ||
                (s = expect_shape(l->w_down, "ffn_down", il, F, D, 1, err)) != ST_OK)
                return s;
        } else {
            return st_error_set(err, ST_ERROR_FORMAT, "layer %lld lacks its FFN tensors", (long long)il);
        }
    }
    return ST_OK;
}

/* The layout plan for the backend's device. With `auto`, each weight shape is decided by
 * the device's calibration (measured now, within a few seconds, when the cache lacks it;
 * calibrate.h); the line saying how lands in plan.auto_notice for the caller to show. */
static st_status plan_layout(st_model *m, st_backend *backend, const st_layout_policy *policy, st_type plan_as,
                             st_error *err) {
    st_calib_table calib;
    st_calibrate_table_init(&calib, NULL);
    char notice[1536] = "";
    st_layout_auto_source source;
    const st_layout_auto_source *src = NULL;
    if (st_layout_policy_is_auto(policy)) {
        st_status s = st_calibrate_for_load(backend, m->file, policy, plan_as, &calib, notice, sizeof(notice));
        if (s != ST_OK) {
            st_calibrate_table_free(&calib);
            return st_error_set(err, s, "%s", notice);
        }
        source = st_calibrate_auto_source(&calib, "on this device");
        src = &source;
    }
    st_status s = st_layout_plan_gguf_auto(m->file, policy, backend->device.kind, plan_as, src, &m->plan, err);
    st_calibrate_table_free(&calib);
    if (s == ST_OK && notice[0]) m->plan.auto_notice = strdup(notice); /* NULL on no memory: only a notice */
    return s;
}

st_status st_model_load(const char *path, st_backend *backend, const st_model_load_options *opt, st_model **out,
                        st_error *err) {
    *out = NULL;
    const st_type to = opt->weights_type;
    const bool keep = to == ST_TYPE_F32 || to == ST_TYPE_COUNT; /* 0: options left zeroed */
    if (!keep && to != ST_TYPE_F16 && to != ST_TYPE_BF16)
        return st_error_set(err, ST_ERROR_INVALID, "weights can be converted to f16 or bf16, not %s",
                            st_type_name((uint32_t)to));
    st_model *m = calloc(1, sizeof(*m));
    if (!m) return st_error_set(err, ST_ERROR_NOMEM, "out of memory");
    m->backend = backend;
    st_status s = st_gguf_open(path, &m->file, err);
    if (s != ST_OK) goto fail;
    if ((s = st_hparams_from_gguf(m->file, &m->hp, err)) != ST_OK) goto fail_wrap;
    if ((s = plan_layout(m, backend, &opt->policy, keep ? ST_TYPE_COUNT : to, err)) != ST_OK) goto fail_wrap;

    m->n_tensors = m->plan.n_entries;
    m->tensors = calloc(m->n_tensors ? m->n_tensors : 1, sizeof(st_tensor));
    m->layers = calloc((size_t)m->hp.n_layer, sizeof(st_layer_weights));
    if (!m->tensors || !m->layers) {
        s = st_error_set(err, ST_ERROR_NOMEM, "out of memory");
        goto fail;
    }
    if ((s = check_quantized(m, err)) != ST_OK) goto fail_wrap;
    size_t total = 0;
    for (uint64_t i = 0; i < m->n_tensors; i++) total += align_up(st_tensor_nbytes(&m->plan.entries[i].tensor));
    if ((s = backend->iface->alloc(backend, total, &m->weights_buffer, err)) != ST_OK) {
        st_error_wrap(err, "allocating %.2f GiB for the weights of %s", (double)total / (1 << 30), path);
        goto fail;
    }
    m->weights_bytes = total;

    int64_t n_ctx = opt->n_ctx > 0 ? opt->n_ctx : m->hp.n_ctx_train;
    size_t offset = 0, done = 0;
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        const st_layout_entry *e = &m->plan.entries[i];
        const st_gguf_tensor_info *info = st_gguf_get_tensor(m->file, i);
        st_tensor *t = &m->tensors[i];
        *t = e->tensor;
        t->data = (char *)m->weights_buffer + offset;
        offset += align_up(st_tensor_nbytes(t));
        if (t->type != info->type) s = upload_converted(backend, t, info->type, info->data, err); /* planned as f16/bf16 */
        else s = backend->iface->upload_weight(backend, t, info->data, err);
        if (s != ST_OK) goto fail_wrap;
        done += info->nbytes;
        if (opt->progress) opt->progress(opt->progress_ctx, done, st_gguf_file_size(m->file));
        char name[96];
        snprintf(name, sizeof(name), "%.*s", (int)(info->name.len < 95 ? info->name.len : 95), info->name.data);
        if ((s = bind_tensor(m, t, name, n_ctx, err)) != ST_OK) goto fail_wrap;
    }
    if (!m->output) m->output = m->token_embd; /* tied: the output reads the packed embedding */
    if ((s = check_layers(m, err)) != ST_OK) goto fail_wrap;
    *out = m;
    return ST_OK;

fail_wrap:
    st_error_wrap(err, "loading %s", path);
fail:
    st_model_free(m);
    return s;
}

void st_model_free(st_model *m) {
    if (!m) return;
    if (m->weights_buffer) m->backend->iface->dealloc(m->backend, m->weights_buffer);
    st_layout_plan_free(&m->plan); /* entries, summary and notice */
    free(m->tensors);
    free(m->layers);
    st_gguf_close(m->file);
    free(m);
}
