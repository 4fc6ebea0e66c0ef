/* Loading a model: validate it (model_validate.c), plan the layout for the backend's
 * device, allocate one buffer, upload every tensor into its planned layout, and bind the
 * tensors to the block structure by their kind in the architecture's descriptor. */
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/weights_upload.h"
#include "stride/calibrate.h"
#include "stride/model.h"

#define TENSOR_ALIGNMENT 256

static size_t align_up(size_t n) { return (n + TENSOR_ALIGNMENT - 1) / TENSOR_ALIGNMENT * TENSOR_ALIGNMENT; }

/* ---- binding: each tensor to its slot, by its kind in the architecture's descriptor ------- */

/* Where each kind of per-layer tensor lives in st_layer_weights (kinds without a layer slot:
 * bound to st_model's fields in bind_tensor). */
#define SLOT(kind, field) [ST_TENSOR_##kind] = {true, offsetof(st_layer_weights, field)}
static const struct {
    bool in_layer;
    size_t offset;
} layer_slot[ST_TENSOR_KIND_COUNT] = {
    SLOT(ATTN_NORM, attn_norm),          SLOT(ATTN_Q, wq),           SLOT(ATTN_K, wk),
    SLOT(ATTN_V, wv),                    SLOT(ATTN_QKV, wqkv),       SLOT(ATTN_Q_NORM, q_norm),
    SLOT(ATTN_K_NORM, k_norm),           SLOT(ATTN_OUTPUT, wo),      SLOT(POST_ATTN_NORM, post_attn_norm),
    SLOT(FFN_NORM, ffn_norm),            SLOT(FFN_GATE, w_gate),     SLOT(FFN_UP, w_up),
    SLOT(FFN_DOWN, w_down),              SLOT(POST_FFN_NORM, post_ffn_norm),
    SLOT(FFN_GATE_INP, router),          SLOT(FFN_GATE_EXPS, gate_exps),
    SLOT(FFN_UP_EXPS, up_exps),          SLOT(FFN_DOWN_EXPS, down_exps),
};
#undef SLOT

/* Binds t (file tensor `info`, validated by st_model_validate) to the model. */
static void bind_tensor(st_model *m, st_tensor *t, const st_gguf_tensor_info *info, int64_t n_ctx) {
    const st_hparams *hp = &m->hp;
    int64_t layer;
    const st_arch_tensor *e = st_arch_match(hp->arch, info->name.data, (size_t)info->name.len, &layer);
    ST_ASSERT(e != NULL && e->need != ST_NEED_UNUSED && layer < hp->n_layer);
    const bool long_ctx = hp->n_ctx_orig > 0 && n_ctx > hp->n_ctx_orig; /* phi3: which rope factors apply */
    switch (e->kind) {
    case ST_TENSOR_TOKEN_EMBD: m->token_embd = t; return;
    case ST_TENSOR_OUTPUT_NORM: m->output_norm = t; return;
    case ST_TENSOR_OUTPUT: m->output = t; return;
    case ST_TENSOR_ROPE_FREQS: m->rope_factors = t; return;
    case ST_TENSOR_ROPE_FACTORS_LONG:
        if (long_ctx) m->rope_factors = t;
        return;
    case ST_TENSOR_ROPE_FACTORS_SHORT:
        if (!long_ctx) m->rope_factors = t;
        return;
    default: break;
    }
    ST_ASSERT(layer_slot[e->kind].in_layer && layer >= 0);
    *(st_tensor **)((char *)&m->layers[layer] + layer_slot[e->kind].offset) = t;
}

/* ---- placement -------------------------------------------------------------------------------- */

/* Where a layer's tensor stands in the groups placed together: q, k, v (0-2), gate, up
 * (3-4); -1 for the others. */
static int group_slot(st_tensor_kind kind) {
    switch (kind) {
    case ST_TENSOR_ATTN_Q: return 0;
    case ST_TENSOR_ATTN_K: return 1;
    case ST_TENSOR_ATTN_V: return 2;
    case ST_TENSOR_FFN_GATE: return 3;
    case ST_TENSOR_FFN_UP: return 4;
    default: return -1;
    }
}
#define GROUP_SLOTS 5

/* The order the tensors are placed in the weights buffer (order [n_tensors]): the file's,
 * except that a layer's q, k and v, and its gate and up, are placed together in that order
 * where the first of them stands in the file. Whole tensors of a multiple of the alignment
 * then lie back to back, rows at one stride, so that a backend can run their products as
 * one (CUDA: one GEMM over h). A sharded model keeps the file's order (its shards are laid
 * out by tensor index). */
static st_status placement_order(const st_model *m, uint64_t *order, st_error *err) {
    const uint64_t n = m->n_tensors;
    for (uint64_t i = 0; i < n; i++) order[i] = i;
    if (m->tp_layout.n_entries > 0 || n == 0) return ST_OK;
    const size_t n_slots = (size_t)m->hp.n_layer * GROUP_SLOTS;
    int64_t *member = malloc((n_slots ? n_slots : 1) * sizeof(*member));
    bool *placed = calloc(n, sizeof(*placed));
    int64_t *layer_of = malloc(n * sizeof(*layer_of));
    int *slot_of = malloc(n * sizeof(*slot_of));
    if (!member || !placed || !layer_of || !slot_of) {
        free(member), free(placed), free(layer_of), free(slot_of);
        return st_error_set(err, ST_ERROR_NOMEM, "out of memory ordering %llu tensors", (unsigned long long)n);
    }
    for (size_t k = 0; k < n_slots; k++) member[k] = -1;
    for (uint64_t i = 0; i < n; i++) {
        const st_gguf_tensor_info *info = st_gguf_get_tensor(m->file, i);
        int64_t layer = -1;
        const st_arch_tensor *e = st_arch_match(m->hp.arch, info->name.data, (size_t)info->name.len, &layer);
        slot_of[i] = e && layer >= 0 && layer < m->hp.n_layer ? group_slot(e->kind) : -1;
        layer_of[i] = layer;
        if (slot_of[i] >= 0) member[layer * GROUP_SLOTS + slot_of[i]] = (int64_t)i;
    }
    uint64_t at = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (placed[i]) continue;
        if (slot_of[i] < 0) {
            order[at++] = i, placed[i] = true;
            continue;
        }
        const int first = slot_of[i] < 3 ? 0 : 3, last = slot_of[i] < 3 ? 3 : 5; /* its group's slots */
        for (int k = first; k < last; k++) {
            const int64_t j = member[layer_of[i] * GROUP_SLOTS + k];
            if (j >= 0 && !placed[j]) order[at++] = (uint64_t)j, placed[j] = true;
        }
    }
    ST_ASSERT(at == n);
    free(member), free(placed), free(layer_of), free(slot_of);
    return ST_OK;
}

/* ---- shards (tensor parallelism, tp.h) ------------------------------------------------------ */

/* Places shard entry k of the tensor parallel layout at *offset in the weights buffer and
 * uploads its slice of the file tensor. */
static st_status upload_shard(st_model *m, uint64_t k, const st_gguf_tensor_info *info, size_t *offset,
                              st_error *err) {
    const st_tp_layout_entry *e = &m->tp_layout.entries[k];
    st_tensor *t = &m->shard_tensors[k];
    *t = e->entry.tensor;
    t->data = (char *)m->weights_buffer + *offset;
    *offset += align_up(st_tensor_nbytes(t));
    const int64_t *whole = m->plan.entries[e->tensor].tensor.ne;
    st_status s = st_weights_upload_slice(m->backend, t, info->type, whole, info->data, &e->slice, err);
    if (s != ST_OK) st_error_wrap(err, "shard %d of %.*s", e->shard, (int)e->entry.name_len, e->entry.name);
    return s;
}

/* Each shard's weights: one shard is the model itself; N shards each get the model's layers
 * with the split weights replaced by their own, and their vocabulary rows of the output head
 * (of the replicated embedding when tied: a view of its rows, as the whole head reads it). */
static st_status bind_shards(st_model *m, st_error *err) {
    const int n = m->tp.n_shards;
    m->shards = calloc((size_t)n, sizeof(st_model_shard));
    if (!m->shards) return st_error_set(err, ST_ERROR_NOMEM, "out of memory for %d shards", n);
    if (n == 1) {
        m->shards[0].layers = m->layers;
        m->shards[0].output = m->output;
        return ST_OK;
    }
    const size_t layers_bytes = (size_t)m->hp.n_layer * sizeof(st_layer_weights);
    for (int sh = 0; sh < n; sh++) {
        if (!(m->shards[sh].layers = malloc(layers_bytes)))
            return st_error_set(err, ST_ERROR_NOMEM, "out of memory for the layers of %d shards", n);
        memcpy(m->shards[sh].layers, m->layers, layers_bytes);
        if (m->output == m->token_embd) {
            const st_tp_range v = st_tp_vocab_rows(&m->tp, sh);
            st_tensor *view = &m->shards[sh].output_view;
            *view = *m->token_embd;
            view->ne[1] = v.n;
            view->nb[2] = view->nb[3] = view->nb[1] * (size_t)v.n;
            view->data = (char *)m->token_embd->data + (size_t)v.start * m->token_embd->nb[1];
            m->shards[sh].output = view;
        }
    }
    for (uint64_t k = 0; k < m->tp_layout.n_entries; k++) {
        const st_tp_layout_entry *e = &m->tp_layout.entries[k];
        int64_t layer;
        const st_arch_tensor *a = st_arch_match(m->hp.arch, e->entry.name, e->entry.name_len, &layer);
        ST_ASSERT(a != NULL); /* the shard planner split only tensors of the table */
        st_model_shard *sh = &m->shards[e->shard];
        if (a->kind == ST_TENSOR_OUTPUT) {
            sh->output = &m->shard_tensors[k];
            continue;
        }
        ST_ASSERT(layer_slot[a->kind].in_layer && layer >= 0 && layer < m->hp.n_layer);
        *(st_tensor **)((char *)&sh->layers[layer] + layer_slot[a->kind].offset) = &m->shard_tensors[k];
    }
    return ST_OK;
}

/* ---- quantized tensors: converted while uploading ----------------------------------------- */

/* Every quantized type was checked readable by st_model_validate. Kept quantized (no
 * conversion asked for), a tensor is uploaded as stored, unpadded, and every backend
 * computes with it: the CPU dequantizes a block of rows at a time, CUDA in its kernels
 * (src/cuda/cuda_quant_*.cu read every type st_quant_supported names). The plan already
 * holds the converted types when a conversion was asked for (st_layout_plan_gguf_as). */

/* The layout plan for the backend's device, and the shards' under tensor parallelism. With
 * `auto`, each weight shape is decided by the device's calibration (measured now, within a
 * few seconds, when the cache lacks it; calibrate.h); the line saying how lands in
 * plan.auto_notice for the caller to show. */
static st_status plan_layout(st_model *m, st_backend *backend, const st_layout_policy *policy, st_type plan_as,
                             st_error *err) {
    st_calib_table calib;
    st_calibrate_table_init(&calib, NULL);
    char notice[4096] = "";
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
    /* each shard's weights by the same rule and decisions, from its own shape (a shape the
     * calibration did not measure follows the built-in table, and says so) */
    if (s == ST_OK && m->tp.n_shards > 1)
        s = st_tp_layout_plan(&m->tp, &m->plan, policy, backend->device.kind, src, &m->tp_layout, err);
    st_calibrate_table_free(&calib);
    if (s == ST_OK && notice[0]) m->plan.auto_notice = strdup(notice); /* NULL on no memory: only a notice */
    return s;
}

st_status st_model_load_gguf(st_gguf_file *f, const char *name, st_backend *backend, const st_model_load_options *opt,
                             st_model **out, st_error *err) {
    *out = NULL;
    const st_type to = opt->weights_type;
    const bool keep = to == ST_TYPE_F32 || to == ST_TYPE_COUNT; /* 0: options left zeroed */
    if (!keep && to != ST_TYPE_F16 && to != ST_TYPE_BF16) {
        st_gguf_close(f);
        return st_error_set(err, ST_ERROR_INVALID, "weights can be converted to f16 or bf16, not %s",
                            st_type_name((uint32_t)to));
    }
    st_model *m = calloc(1, sizeof(*m));
    if (!m) {
        st_gguf_close(f);
        return st_error_set(err, ST_ERROR_NOMEM, "out of memory for a model (%zu bytes)", sizeof(*m));
    }
    m->backend = backend;
    m->file = f;
    st_status s;
    uint64_t *order = NULL; /* the placement order (placement_order) */
    /* everything the file says is checked before anything is allocated or measured */
    if ((s = st_model_validate(m->file, &m->hp, err)) != ST_OK) goto fail_wrap;
    if ((s = st_tp_plan_init(&m->hp, opt->n_shards == 0 ? 1 : opt->n_shards, &m->tp, err)) != ST_OK) goto fail_wrap;
    if (m->tp.n_shards > 1 && backend->device.kind != ST_DEVICE_KIND_CPU) {
        s = st_error_set(err, ST_ERROR_UNSUPPORTED,
                         "-tp %d on %s: this build drives one GPU per process; splitting a model over %d GPUs "
                         "needs NCCL communicators, an all-reduce on each GPU's stream after o and after down, and "
                         "N GPUs' weights and KV caches, which are not built yet (the CPU backend simulates the "
                         "shards: --backend cpu)",
                         m->tp.n_shards, backend->device.name, m->tp.n_shards);
        goto fail_wrap;
    }
    if ((s = plan_layout(m, backend, &opt->policy, keep ? ST_TYPE_COUNT : to, err)) != ST_OK) goto fail_wrap;

    m->n_tensors = m->plan.n_entries;
    m->tensors = calloc(m->n_tensors ? m->n_tensors : 1, sizeof(st_tensor));
    m->layers = calloc((size_t)m->hp.n_layer, sizeof(st_layer_weights));
    m->shard_tensors = calloc(m->tp_layout.n_entries ? m->tp_layout.n_entries : 1, sizeof(st_tensor));
    if (!m->tensors || !m->layers || !m->shard_tensors) {
        s = st_error_set(err, ST_ERROR_NOMEM, "out of memory for the descriptors of %llu tensors in %lld layers",
                         (unsigned long long)m->n_tensors, (long long)m->hp.n_layer);
        goto fail_wrap;
    }
    /* the whole tensors, except those split into shards, and the shards */
    size_t total = 0;
    uint64_t next_shard = 0;
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        size_t bytes = 0;
        if (next_shard < m->tp_layout.n_entries && m->tp_layout.entries[next_shard].tensor == i)
            for (; next_shard < m->tp_layout.n_entries && m->tp_layout.entries[next_shard].tensor == i; next_shard++)
                bytes += align_up(st_tensor_nbytes(&m->tp_layout.entries[next_shard].entry.tensor));
        else
            bytes = align_up(st_tensor_nbytes(&m->plan.entries[i].tensor));
        if (bytes > SIZE_MAX - total) {
            s = st_error_set(err, ST_ERROR_NOMEM, "the planned weights do not fit in this host's address space");
            goto fail_wrap;
        }
        total += bytes;
    }
    if ((s = backend->iface->alloc(backend, total, &m->weights_buffer, err)) != ST_OK) {
        st_error_wrap(err, "allocating %.2f GiB for the weights of %s", (double)total / (1 << 30), name);
        goto fail;
    }
    m->weights_bytes = total;

    int64_t n_ctx = opt->n_ctx > 0 ? opt->n_ctx : m->hp.n_ctx_train;
    size_t offset = 0, done = 0;
    next_shard = 0;
    order = malloc((m->n_tensors ? m->n_tensors : 1) * sizeof(*order));
    if (!order) {
        s = st_error_set(err, ST_ERROR_NOMEM, "out of memory ordering %llu tensors", (unsigned long long)m->n_tensors);
        goto fail_wrap;
    }
    if ((s = placement_order(m, order, err)) != ST_OK) goto fail_wrap;
    for (uint64_t at = 0; at < m->n_tensors; at++) {
        const uint64_t i = order[at];
        const st_layout_entry *e = &m->plan.entries[i];
        const st_gguf_tensor_info *info = st_gguf_get_tensor(m->file, i);
        st_tensor *t = &m->tensors[i];
        *t = e->tensor;
        if (next_shard < m->tp_layout.n_entries && m->tp_layout.entries[next_shard].tensor == i) {
            t->data = NULL; /* split: its shards hold it */
            for (; next_shard < m->tp_layout.n_entries && m->tp_layout.entries[next_shard].tensor == i; next_shard++)
                if ((s = upload_shard(m, next_shard, info, &offset, err)) != ST_OK) goto fail_wrap;
        } else {
            t->data = (char *)m->weights_buffer + offset;
            offset += align_up(st_tensor_nbytes(t));
            const st_tp_slice all = st_weights_whole_slice(t->ne);
            if (t->type != info->type) /* planned as f16/bf16 */
                s = st_weights_upload_slice(backend, t, info->type, t->ne, info->data, &all, err);
            else
                s = backend->iface->upload_weight(backend, t, info->data, err);
            if (s != ST_OK) goto fail_wrap;
        }
        done += info->nbytes;
        if (opt->progress) opt->progress(opt->progress_ctx, done, st_gguf_file_size(m->file));
        bind_tensor(m, t, info, n_ctx);
    }
    if (!m->output) m->output = m->token_embd; /* tied: the output reads the packed embedding */
    ST_ASSERT(m->token_embd && m->output_norm); /* required: st_model_validate checked */
    if ((s = bind_shards(m, err)) != ST_OK) goto fail_wrap;
    free(order);
    *out = m;
    return ST_OK;

fail_wrap:
    st_error_wrap(err, "loading %s", name);
fail:
    free(order);
    st_model_free(m);
    return s;
}

st_status st_model_load(const char *path, st_backend *backend, const st_model_load_options *opt, st_model **out,
                        st_error *err) {
    *out = NULL;
    st_gguf_file *f = NULL;
    st_status s = st_gguf_open(path, &f, err);
    if (s != ST_OK) return s;
    return st_model_load_gguf(f, path, backend, opt, out, err);
}

void st_model_free(st_model *m) {
    if (!m) return;
    if (m->weights_buffer) m->backend->iface->dealloc(m->backend, m->weights_buffer);
    st_layout_plan_free(&m->plan); /* entries, summary and notice */
    st_tp_layout_free(&m->tp_layout);
    for (int sh = 0; m->shards && sh < m->tp.n_shards; sh++)
        if (m->shards[sh].layers != m->layers) free(m->shards[sh].layers);
    free(m->shards);
    free(m->shard_tensors);
    free(m->tensors);
    free(m->layers);
    st_gguf_close(m->file);
    free(m);
}
