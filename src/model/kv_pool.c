/* The KV pool: every layer's K and V as blocks of ST_KV_BLOCK_TOKENS slots in one backend
 * allocation, plus one block past the ones handed out (the runner's padding tokens write
 * there). */
#include <stdlib.h>

#include "model/runner_internal.h"

/* A packed cache tensor [head_dim, n_head_kv, slots] of type at base + *offset. */
static st_tensor cache_tensor(void *base, size_t *offset, st_type type, const st_hparams *hp, int64_t slots) {
    st_tensor t = {.type = type, .ne = {hp->head_dim, hp->n_head_kv, slots, 1}};
    const bool ok = st_tensor_set_packed_strides(&t);
    ST_ASSERT(ok);
    t.data = base ? (char *)base + *offset : NULL;
    *offset += (st_tensor_nbytes(&t) + 255) / 256 * 256;
    return t;
}

size_t st_kv_block_bytes(const st_hparams *hp, st_type kv_type) {
    const size_t row = (size_t)hp->head_dim * (size_t)hp->n_head_kv * st_type_get_traits(kv_type)->block_bytes;
    return 2 * (size_t)hp->n_layer * row * ST_KV_BLOCK_TOKENS;
}

st_status st_kv_pool_init(st_model *m, int64_t n_blocks, st_type kv_type, st_kv_pool **out, st_error *err) {
    *out = NULL;
    const st_hparams *hp = &m->hp;
    if (kv_type != ST_TYPE_F16 && kv_type != ST_TYPE_F32)
        return st_error_set(err, ST_ERROR_INVALID, "KV cache type must be f16 or f32, not %s", st_type_name(kv_type));
    if (n_blocks < 1 || n_blocks > (INT32_MAX / ST_KV_BLOCK_TOKENS) - 1)
        return st_error_set(err, ST_ERROR_INVALID, "a KV pool of %lld blocks: expected 1 to %d", (long long)n_blocks,
                            INT32_MAX / ST_KV_BLOCK_TOKENS - 1);
    st_kv_pool *p = calloc(1, sizeof(*p));
    if (!p) return st_error_set(err, ST_ERROR_NOMEM, "out of host memory");
    p->model = m;
    p->type = kv_type;
    p->n_blocks = n_blocks;
    p->layers = calloc((size_t)hp->n_layer, sizeof(st_kv_layer));
    if (!p->layers) {
        free(p);
        return st_error_set(err, ST_ERROR_NOMEM, "out of host memory");
    }
    const int64_t slots = (n_blocks + 1) * ST_KV_BLOCK_TOKENS;
    size_t bytes = 0;
    for (int64_t il = 0; il < hp->n_layer; il++) {
        p->layers[il].k = cache_tensor(NULL, &bytes, kv_type, hp, slots);
        p->layers[il].v = cache_tensor(NULL, &bytes, kv_type, hp, slots);
    }
    st_backend *b = m->backend;
    st_status s = b->iface->alloc(b, bytes, &p->buffer, err);
    if (s != ST_OK) {
        st_error_wrap(err, "allocating the KV cache (%lld blocks of %d tokens, %.2f GiB)", (long long)n_blocks,
                      ST_KV_BLOCK_TOKENS, (double)bytes / (1 << 30));
        st_kv_pool_free(p);
        return s;
    }
    size_t off = 0;
    for (int64_t il = 0; il < hp->n_layer; il++) {
        p->layers[il].k = cache_tensor(p->buffer, &off, kv_type, hp, slots);
        p->layers[il].v = cache_tensor(p->buffer, &off, kv_type, hp, slots);
    }
    *out = p;
    return ST_OK;
}

void st_kv_pool_free(st_kv_pool *p) {
    if (!p) return;
    if (p->buffer) p->model->backend->iface->dealloc(p->model->backend, p->buffer);
    free(p->layers);
    free(p);
}

int64_t st_kv_pool_n_blocks(const st_kv_pool *p) { return p->n_blocks; }

st_type st_kv_pool_type(const st_kv_pool *p) { return p->type; }

st_status st_kv_pool_copy_block(st_kv_pool *p, int32_t dst, int32_t src, st_error *err) {
    if (dst < 0 || src < 0 || dst >= p->n_blocks || src >= p->n_blocks)
        return st_error_set(err, ST_ERROR_INVALID, "copying KV block %d to %d: blocks are 0 to %lld", (int)src,
                            (int)dst, (long long)p->n_blocks - 1);
    if (dst == src) return ST_OK;
    st_backend *b = p->model->backend;
    for (int64_t il = 0; il < p->model->hp.n_layer; il++) {
        const st_tensor *t[2] = {&p->layers[il].k, &p->layers[il].v};
        for (int i = 0; i < 2; i++) {
            const size_t block = t[i]->nb[2] * ST_KV_BLOCK_TOKENS; /* a block's slots are contiguous */
            st_status s = b->iface->copy(b, (char *)t[i]->data + (size_t)dst * block,
                                         (const char *)t[i]->data + (size_t)src * block, block, err);
            if (s != ST_OK) return s;
        }
    }
    return ST_OK;
}
