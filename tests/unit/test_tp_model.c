/*
 * A model loaded as N shards (st_model_load_options.n_shards, tp.h): the shards' own
 * tensors (shapes, data, the whole split tensors left empty), a tied output head as row
 * views of the embedding, the scratch of the partial sums, and the refusals: a model that
 * does not split, and a backend other than the CPU's. The numbers (logits against the
 * unsplit model) are tests/python/test_tensor_parallel.py's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "stride/backend.h"
#include "stride/model.h"

/* GQA 4/2, head_dim 16, D 64, F 128, V 384, tied output; phi3 with fused qkv and gate_up */
#define QWEN3 STRIDE_TEST_DATA "/../fixtures/qwen3-f16.gguf"
#define PHI3 STRIDE_TEST_DATA "/../fixtures/phi3-f32.gguf"

static st_model *load(st_backend *b, const char *path, int n_shards, st_status want, const char *fragment) {
    st_model_load_options lo = {.n_shards = n_shards};
    st_error err = {0};
    assert_int_equal(st_layout_policy_resolve(&lo.policy, "off", NULL, NULL, &err), ST_OK);
    st_model *m = NULL;
    const st_status s = st_model_load(path, b, &lo, &m, &err);
    if (s != want) fail_msg("loading %s at -tp %d: %s (%s)", path, n_shards, st_status_name(s), err.message);
    if (fragment && !strstr(err.message, fragment)) fail_msg("\"%s\" lacks \"%s\"", err.message, fragment);
    return m;
}

static void test_shards_of_qwen3(void **state) {
    (void)state;
    st_backend *b = NULL;
    assert_int_equal(st_backend_init(ST_BACKEND_CPU, 0, &b, NULL), ST_OK);
    st_model *m = load(b, QWEN3, 2, ST_OK, NULL);
    assert_int_equal(m->tp.n_shards, 2);
    assert_null(m->layers[0].wq->data); /* split: its shards hold it */
    assert_non_null(m->layers[0].attn_norm->data);
    for (int s = 0; s < 2; s++) {
        const st_model_shard *sh = &m->shards[s];
        const st_layer_weights *l = &sh->layers[1];
        assert_ptr_equal(l->attn_norm, m->layers[1].attn_norm); /* replicated */
        assert_ptr_equal(l->q_norm, m->layers[1].q_norm);
        assert_int_equal(l->wq->ne[0], 64);
        assert_int_equal(l->wq->ne[1], 32); /* 2 query heads of 16 */
        assert_int_equal(l->wk->ne[1], 16); /* 1 KV head */
        assert_int_equal(l->wo->ne[0], 32); /* its heads' input columns */
        assert_int_equal(l->wo->ne[1], 64);
        assert_int_equal(l->w_gate->ne[1], 64);
        assert_int_equal(l->w_down->ne[0], 64);
        assert_non_null(l->wq->data);
        /* tied: rows [192 s, 192 (s + 1)) of the replicated embedding, at its stride */
        assert_ptr_equal(sh->output, &sh->output_view);
        assert_int_equal(sh->output->ne[1], 192);
        assert_ptr_equal(sh->output->data, (char *)m->token_embd->data + (size_t)(192 * s) * m->token_embd->nb[1]);
    }
    /* a shard's weights are its slice of the whole: q rows 32.. of the file are shard 1's */
    const st_gguf_tensor_info *q = st_gguf_find_tensor(m->file, "blk.0.attn_q.weight");
    assert_non_null(q);
    assert_memory_equal(m->shards[1].layers[0].wq->data, (const char *)q->data + 32 * 64 * 2, 32 * 64 * 2);
    /* ... and o's input columns 32..63 of each row */
    const st_gguf_tensor_info *o = st_gguf_find_tensor(m->file, "blk.0.attn_output.weight");
    const st_tensor *o1 = m->shards[1].layers[0].wo;
    for (int r = 0; r < 64; r++)
        assert_memory_equal((const char *)o1->data + (size_t)r * o1->nb[1], (const char *)o->data + (r * 64 + 32) * 2,
                            32 * 2);

    st_session_options so = st_session_options_default();
    so.n_ctx = 16;
    st_session *sess = NULL;
    assert_int_equal(st_session_init(m, &so, &sess, NULL), ST_OK);
    const int32_t toks[3] = {1, 87, 263};
    float *logits = malloc(384 * sizeof(float));
    assert_int_equal(st_session_eval(sess, toks, 3, false, logits, NULL), ST_OK);
    for (int i = 0; i < 384; i++) assert_true(logits[i] == logits[i]);
    free(logits);
    st_session_free(sess);
    st_model_free(m);

    m = load(b, QWEN3, 1, ST_OK, NULL); /* one shard: the model itself */
    assert_ptr_equal(m->shards[0].layers, m->layers);
    assert_ptr_equal(m->shards[0].output, m->output);
    assert_int_equal(m->tp_layout.n_entries, 0);
    st_model_free(m);
    st_backend_free(b);
}

/* Fused qkv and gate_up: a shard's rows are its q, k, v (gate, up) rows, concatenated. */
static void test_shards_of_phi3(void **state) {
    (void)state;
    st_backend *b = NULL;
    assert_int_equal(st_backend_init(ST_BACKEND_CPU, 0, &b, NULL), ST_OK);
    st_model *m = load(b, PHI3, 2, ST_OK, NULL);
    const st_gguf_tensor_info *qkv = st_gguf_find_tensor(m->file, "blk.0.attn_qkv.weight"); /* [64, 128] f32 */
    const st_tensor *t = m->shards[1].layers[0].wqkv;
    assert_int_equal(t->ne[1], 32 + 16 + 16);
    const size_t row = 64 * sizeof(float);
    static const int src_rows[3][2] = {{32, 32}, {64 + 16, 16}, {96 + 16, 16}}; /* q, k, v of shard 1 */
    int at = 0;
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < src_rows[r][1]; i++, at++)
            assert_memory_equal((const char *)t->data + (size_t)at * t->nb[1],
                                (const char *)qkv->data + (size_t)(src_rows[r][0] + i) * row, row);
    const st_tensor *gu = m->shards[0].layers[1].w_up; /* fused [64, 256] -> [64, 128]: gate 0..63, up 128..191 */
    const st_gguf_tensor_info *gu_f = st_gguf_find_tensor(m->file, "blk.1.ffn_up.weight");
    assert_int_equal(gu->ne[1], 128);
    assert_memory_equal((const char *)gu->data + 64 * gu->nb[1], (const char *)gu_f->data + 128 * row, row);
    assert_null(m->shards[0].layers[1].w_gate);
    st_model_free(m);
    st_backend_free(b);
}

static void test_refusals(void **state) {
    (void)state;
    st_backend *b = NULL;
    assert_int_equal(st_backend_init(ST_BACKEND_CPU, 0, &b, NULL), ST_OK);
    load(b, QWEN3, 4, ST_ERROR_INVALID, "-tp 4: the 2 KV heads of qwen3 do not divide into 4 shards");
    load(b, QWEN3, 65, ST_ERROR_INVALID, "-tp 65: the number of shards must be 1 to 64");
    /* A GPU backend (the CPU's table under a GPU's name: no GPU in CI) refuses N > 1 shards,
     * saying what is missing, rather than falling back; one shard loads as ever. */
    st_backend gpu = *b;
    gpu.device.kind = ST_DEVICE_KIND_NVIDIA_HOPPER;
    snprintf(gpu.device.name, sizeof(gpu.device.name), "NVIDIA H200");
    load(&gpu, QWEN3, 2, ST_ERROR_UNSUPPORTED, "-tp 2 on NVIDIA H200: this build drives one GPU per process");
    load(&gpu, QWEN3, 2, ST_ERROR_UNSUPPORTED, "NCCL communicators");
    st_model_free(load(&gpu, QWEN3, 1, ST_OK, NULL));
    st_backend_free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shards_of_qwen3),
        cmocka_unit_test(test_shards_of_phi3),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
