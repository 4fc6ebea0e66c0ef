/*
 * The tensor parallel plan (tp.h): which heads, FFN columns and vocabulary rows each shard
 * owns, the slice of every kind of weight, the errors when a model does not split, and
 * each shard's layout by the padding rule from its own shape.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stride/model.h"
#include "stride/synth.h"
#include "stride/tp.h"

/* Qwen3-8B's sizes (GQA 32/8, head_dim 128, F 12288, V 151936). */
static st_hparams qwen3_8b(void) {
    return (st_hparams){.arch = ST_ARCH_QWEN3, .n_vocab = 151936, .n_embd = 4096, .n_layer = 36, .n_head = 32,
                        .n_head_kv = 8, .head_dim = 128, .n_ff = 12288, .n_rot = 128};
}

/* The fixtures' tiny shapes: GQA 4/2 (llama), or 4/4 and 8 experts of F 32 (olmoe). */
static st_hparams tiny(st_arch arch) {
    st_hparams hp = {.arch = arch, .n_vocab = 384, .n_embd = 64, .n_layer = 2, .n_head = 4, .n_head_kv = 2,
                     .head_dim = 16, .n_ff = 128, .n_rot = 16};
    if (arch == ST_ARCH_OLMOE) hp.n_head_kv = 4, hp.n_ff = 32, hp.n_expert = 8, hp.n_expert_used = 2;
    return hp;
}

static void expect_error(const st_hparams *hp, int n, const char *fragment) {
    st_tp_plan p;
    st_error err = {0};
    assert_int_equal(st_tp_plan_init(hp, n, &p, &err), ST_ERROR_INVALID);
    if (!strstr(err.message, fragment)) fail_msg("-tp %d: \"%s\" lacks \"%s\"", n, err.message, fragment);
}

static void test_plan_sizes(void **state) {
    (void)state;
    const st_hparams hp = qwen3_8b();
    static const int ns[] = {1, 2, 4, 8};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
        st_tp_plan p;
        st_error err = {0};
        assert_int_equal(st_tp_plan_init(&hp, ns[i], &p, &err), ST_OK);
        assert_int_equal(p.n_shards, ns[i]);
        assert_int_equal(p.shard_n_head, 32 / ns[i]);
        assert_int_equal(p.shard_n_head_kv, 8 / ns[i]);
        assert_int_equal(p.shard_n_ff, 12288 / ns[i]);
    }
}

/* Every shard's ranges tile the whole, in order; each query head sits on the shard that
 * holds the KV head it reads (GQA groups never straddle shards). */
static void test_plan_ranges_tile(void **state) {
    (void)state;
    const st_hparams hp = qwen3_8b();
    for (int n = 1; n <= 8; n *= 2) {
        st_tp_plan p;
        assert_int_equal(st_tp_plan_init(&hp, n, &p, NULL), ST_OK);
        int64_t q = 0, kv = 0, ff = 0, v = 0;
        for (int s = 0; s < n; s++) {
            const st_tp_range rq = st_tp_q_heads(&p, s), rk = st_tp_kv_heads(&p, s), rf = st_tp_ff_cols(&p, s),
                              rv = st_tp_vocab_rows(&p, s);
            assert_int_equal(rq.start, q);
            assert_int_equal(rk.start, kv);
            assert_int_equal(rf.start, ff);
            assert_int_equal(rv.start, v);
            q += rq.n, kv += rk.n, ff += rf.n, v += rv.n;
            const int64_t group = hp.n_head / hp.n_head_kv;
            for (int64_t h = rq.start; h < rq.start + rq.n; h++)
                assert_true(h / group >= rk.start && h / group < rk.start + rk.n);
        }
        assert_int_equal(q, hp.n_head);
        assert_int_equal(kv, hp.n_head_kv);
        assert_int_equal(ff, hp.n_ff);
        assert_int_equal(v, hp.n_vocab);
    }
}

/* A vocabulary that N does not divide splits into rows that differ by one at most. */
static void test_plan_uneven_vocab(void **state) {
    (void)state;
    st_hparams hp = tiny(ST_ARCH_OLMOE);
    hp.n_vocab = 10;
    st_tp_plan p;
    assert_int_equal(st_tp_plan_init(&hp, 4, &p, NULL), ST_OK);
    static const st_tp_range want[] = {{0, 2}, {2, 3}, {5, 2}, {7, 3}};
    for (int s = 0; s < 4; s++) {
        const st_tp_range r = st_tp_vocab_rows(&p, s);
        assert_int_equal(r.start, want[s].start);
        assert_int_equal(r.n, want[s].n);
    }
}

static void test_plan_errors(void **state) {
    (void)state;
    const st_hparams hp = qwen3_8b();
    expect_error(&hp, 3, "-tp 3: the 8 KV heads of qwen3 do not divide into 3 shards");
    expect_error(&hp, 3, "; -tp can be 1, 2, 4 or 8 for this model");
    expect_error(&hp, 16, "-tp 16: the 8 KV heads of qwen3 do not divide into 16 shards");
    expect_error(&hp, 0, "-tp 0: the number of shards must be 1 to 64");
    expect_error(&hp, -2, "-tp -2: the number of shards must be 1 to 64");
    expect_error(&hp, 65, "-tp 65: the number of shards must be 1 to 64");

    st_hparams odd_ff = hp;
    odd_ff.n_ff = 100; /* divides by 2 and 4, not 8 */
    expect_error(&odd_ff, 8, "-tp 8: the 100 FFN columns of qwen3 do not divide into 8 shards");
    expect_error(&odd_ff, 8, "; -tp can be 1, 2 or 4 for this model");
    st_hparams moe = tiny(ST_ARCH_OLMOE);
    moe.n_ff = 6;
    expect_error(&moe, 4, "the 6 FFN columns of each expert of olmoe do not divide into 4 shards");
    st_hparams mqa = hp;
    mqa.n_head = 4, mqa.n_head_kv = 1;
    expect_error(&mqa, 2, "-tp 2: the 1 KV head of qwen3 does not divide into 2 shards");
    expect_error(&mqa, 2, "; -tp can be 1 only for this model");
    st_hparams few_rows = tiny(ST_ARCH_OLMOE);
    few_rows.n_vocab = 3;
    expect_error(&few_rows, 4, "the 3 vocabulary rows of olmoe are fewer than 4 shards");

    /* defensive: sizes no validated model has */
    st_hparams bad = hp;
    bad.n_head_kv = 0;
    expect_error(&bad, 2, "out of range");
    bad = hp;
    bad.head_dim = INT64_MAX / 2;
    expect_error(&bad, 2, "out of range");
    bad = hp;
    bad.n_head = 12, bad.n_head_kv = 8; /* not whole groups */
    expect_error(&bad, 2, "out of range");
}

/* The descriptor entry of a tensor name. */
static const st_arch_tensor *entry(st_arch arch, const char *name) {
    int64_t layer;
    const st_arch_tensor *t = st_arch_match(arch, name, strlen(name), &layer);
    assert_non_null(t);
    return t;
}

static void expect_range(st_tp_range r, int64_t start, int64_t n) {
    assert_int_equal(r.start, start);
    assert_int_equal(r.n, n);
}

/* Every kind's slice at -tp 2 of the tiny shapes (D 64, hd 16, Hq 64, Hk 32, F 128, V 384). */
static void test_slices(void **state) {
    (void)state;
    st_hparams hp = tiny(ST_ARCH_PHI3);
    st_tp_plan p;
    assert_int_equal(st_tp_plan_init(&hp, 2, &p, NULL), ST_OK);
    st_tp_slice sl;
    assert_true(st_tp_slice_of(&p, entry(ST_ARCH_PHI3, "blk.0.attn_qkv.weight"), 1, &sl)); /* [64, 128] */
    expect_range(sl.cols, 0, 64);
    assert_int_equal(sl.n_row_ranges, 3);
    expect_range(sl.rows[0], 32, 32);      /* q heads 2, 3 */
    expect_range(sl.rows[1], 64 + 16, 16); /* k head 1 */
    expect_range(sl.rows[2], 96 + 16, 16); /* v head 1 */
    assert_true(st_tp_slice_of(&p, entry(ST_ARCH_PHI3, "blk.1.ffn_up.weight"), 1, &sl)); /* fused [64, 256] */
    assert_int_equal(sl.n_row_ranges, 2);
    expect_range(sl.rows[0], 64, 64);       /* gate columns 64.. */
    expect_range(sl.rows[1], 128 + 64, 64); /* up columns 64.. */
    assert_true(st_tp_slice_of(&p, entry(ST_ARCH_PHI3, "blk.0.attn_output.weight"), 1, &sl)); /* [64, 64] */
    expect_range(sl.cols, 32, 32);
    expect_range(sl.rows[0], 0, 64);
    assert_true(st_tp_slice_of(&p, entry(ST_ARCH_PHI3, "blk.0.ffn_down.weight"), 0, &sl)); /* [128, 64] */
    expect_range(sl.cols, 0, 64);
    expect_range(sl.rows[0], 0, 64);
    assert_true(st_tp_slice_of(&p, entry(ST_ARCH_PHI3, "output.weight"), 1, &sl)); /* [64, 384] */
    expect_range(sl.rows[0], 192, 192);
    int64_t ne[4];
    st_tp_slice_shape(&sl, (const int64_t[4]){64, 384, 1, 1}, ne);
    assert_int_equal(ne[0], 64);
    assert_int_equal(ne[1], 192);

    hp = tiny(ST_ARCH_LLAMA);
    assert_int_equal(st_tp_plan_init(&hp, 2, &p, NULL), ST_OK);
    assert_true(st_tp_slice_of(&p, entry(ST_ARCH_LLAMA, "blk.0.attn_q.weight"), 1, &sl));
    expect_range(sl.rows[0], 32, 32);
    assert_true(st_tp_slice_of(&p, entry(ST_ARCH_LLAMA, "blk.0.attn_v.weight"), 1, &sl));
    expect_range(sl.rows[0], 16, 16);
    assert_true(st_tp_slice_of(&p, entry(ST_ARCH_LLAMA, "blk.0.ffn_gate.weight"), 1, &sl));
    assert_int_equal(sl.n_row_ranges, 1);
    expect_range(sl.rows[0], 64, 64);
    static const char *const replicated[] = {"token_embd.weight", "output_norm.weight", "blk.0.attn_norm.weight",
                                             "blk.0.ffn_norm.weight", "rope_freqs.weight"};
    for (size_t i = 0; i < sizeof(replicated) / sizeof(replicated[0]); i++)
        assert_false(st_tp_slice_of(&p, entry(ST_ARCH_LLAMA, replicated[i]), 0, &sl));

    hp = tiny(ST_ARCH_OLMOE);
    assert_int_equal(st_tp_plan_init(&hp, 4, &p, NULL), ST_OK);
    assert_true(st_tp_slice_of(&p, entry(ST_ARCH_OLMOE, "blk.0.ffn_gate_exps.weight"), 3, &sl)); /* [64, 32, 8] */
    expect_range(sl.rows[0], 24, 8);
    assert_true(st_tp_slice_of(&p, entry(ST_ARCH_OLMOE, "blk.0.ffn_down_exps.weight"), 3, &sl)); /* [32, 64, 8] */
    expect_range(sl.cols, 24, 8);
    st_tp_slice_shape(&sl, (const int64_t[4]){32, 64, 8, 1}, ne);
    assert_int_equal(ne[0], 8);
    assert_int_equal(ne[1], 64);
    assert_int_equal(ne[2], 8);
    assert_false(st_tp_slice_of(&p, entry(ST_ARCH_OLMOE, "blk.0.ffn_gate_inp.weight"), 0, &sl)); /* router */
    assert_false(st_tp_slice_of(&p, entry(ST_ARCH_OLMOE, "blk.0.attn_q_norm.weight"), 0, &sl));

    /* one shard splits nothing */
    assert_int_equal(st_tp_plan_init(&hp, 1, &p, NULL), ST_OK);
    assert_false(st_tp_slice_of(&p, entry(ST_ARCH_OLMOE, "blk.0.attn_q.weight"), 0, &sl));
}

/* Over the shards, the slices of every split kind cover each element of the whole exactly
 * once (tried on every architecture's descriptor, at each shard count that divides). */
static void test_slices_cover(void **state) {
    (void)state;
    for (st_arch arch = ST_ARCH_LLAMA; arch < ST_ARCH_COUNT; arch++) {
        st_hparams hp = tiny(arch);
        if (arch == ST_ARCH_OLMOE) hp.n_vocab = 383; /* uneven rows too */
        const st_arch_sizes sz = {hp.n_vocab, hp.n_embd, hp.n_head, hp.n_head_kv, hp.head_dim,
                                  hp.n_ff,    hp.n_expert, hp.n_rot};
        int64_t dims[ST_DIM_COUNT];
        assert_true(st_arch_dims(&sz, dims));
        size_t n_t;
        const st_arch_tensor *ts = st_arch_tensors(arch, &n_t);
        for (int n = 2; n <= hp.n_head_kv; n *= 2) {
            st_tp_plan p;
            assert_int_equal(st_tp_plan_init(&hp, n, &p, NULL), ST_OK);
            for (size_t i = 0; i < n_t; i++) {
                if (!st_tp_slice_of(&p, &ts[i], 0, NULL)) continue;
                const int64_t K = dims[ts[i].ne[0]], N = dims[ts[i].ne[1]];
                unsigned char *seen = calloc((size_t)(K * N), 1);
                assert_non_null(seen);
                for (int s = 0; s < n; s++) {
                    st_tp_slice sl;
                    assert_true(st_tp_slice_of(&p, &ts[i], s, &sl));
                    for (int r = 0; r < sl.n_row_ranges; r++)
                        for (int64_t row = sl.rows[r].start; row < sl.rows[r].start + sl.rows[r].n; row++)
                            for (int64_t c = sl.cols.start; c < sl.cols.start + sl.cols.n; c++) {
                                assert_true(row >= 0 && row < N && c >= 0 && c < K);
                                seen[row * K + c]++;
                            }
                }
                for (int64_t e = 0; e < K * N; e++)
                    if (seen[e] != 1) fail_msg("%s -tp %d: %s element %lld taken %d times", st_arch_name(arch), n,
                                               ts[i].pattern, (long long)e, seen[e]);
                free(seen);
            }
        }
    }
}

/* ---- each shard's layout ---------------------------------------------------------------- */

static st_layout_policy policy_on(void) {
    return (st_layout_policy){.mode = ST_PAD_MODE_ON, .mode_source = "--pad-weights", .alias = 2048, .pad = 128};
}

/* A whole-model plan of the given entries, each decided with padding on. */
static st_layout_plan whole_plan(st_layout_entry *entries, const char *const *names, const st_tensor_role *roles,
                                 const st_type *types, const int64_t (*ne)[4], size_t n) {
    for (size_t i = 0; i < n; i++) {
        st_layout_decide(roles[i], types[i], ne[i], true, ST_PAD_REASON_POLICY_OFF, 2048, 128, &entries[i]);
        entries[i].name = names[i];
        entries[i].name_len = strlen(names[i]);
    }
    return (st_layout_plan){.arch = ST_ARCH_QWEN3, .n_entries = n, .entries = entries, .alias = 2048, .pad = 128};
}

/* o [2048, 4096] F16: a whole row of 4096 B pads; at -tp 4 a shard's row is 1024 B and does
 * not. q [4096, 2048] keeps its rows (8192 B) and pads in every shard. */
static void test_layout_per_shard(void **state) {
    (void)state;
    st_hparams hp = {.arch = ST_ARCH_QWEN3, .n_vocab = 1000, .n_embd = 4096, .n_layer = 1, .n_head = 16,
                     .n_head_kv = 8, .head_dim = 128, .n_ff = 1024, .n_rot = 128};
    st_tp_plan p;
    assert_int_equal(st_tp_plan_init(&hp, 4, &p, NULL), ST_OK);
    static const char *const names[] = {"token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_output.weight",
                                        "blk.0.attn_norm.weight"};
    static const st_tensor_role roles[] = {ST_ROLE_ROW_LOOKUP, ST_ROLE_GEMM, ST_ROLE_GEMM, ST_ROLE_NORM};
    static const st_type types[] = {ST_TYPE_F16, ST_TYPE_F16, ST_TYPE_F16, ST_TYPE_F32};
    static const int64_t ne[][4] = {{4096, 1000, 1, 1}, {4096, 2048, 1, 1}, {2048, 4096, 1, 1}, {4096, 1, 1, 1}};
    st_layout_entry entries[4];
    st_layout_plan whole = whole_plan(entries, names, roles, types, ne, 4);
    assert_true(entries[2].padded);
    const st_layout_policy pol = policy_on();
    st_tp_layout l;
    st_error err = {0};
    assert_int_equal(st_tp_layout_plan(&p, &whole, &pol, ST_DEVICE_KIND_CPU, NULL, &l, &err), ST_OK);
    assert_int_equal(l.n_shards, 4);
    assert_int_equal(l.n_entries, 8); /* q and o, 4 shards each */
    for (int s = 0; s < 4; s++) {
        const st_tp_layout_entry *q = &l.entries[s], *o = &l.entries[4 + s];
        assert_int_equal(q->tensor, 1);
        assert_int_equal(q->shard, s);
        assert_int_equal(q->entry.tensor.ne[0], 4096);
        assert_int_equal(q->entry.tensor.ne[1], 512);
        assert_true(q->entry.padded);
        assert_int_equal(q->entry.tensor.nb[1], 8192 + 128);
        assert_string_equal(q->entry.name, "blk.0.attn_q.weight");
        assert_int_equal(o->tensor, 2);
        assert_int_equal(o->entry.tensor.ne[0], 512);
        assert_int_equal(o->entry.tensor.ne[1], 4096);
        assert_false(o->entry.padded);
        assert_int_equal(o->entry.reason, ST_PAD_REASON_ROW_NOT_ALIASED);
        assert_int_equal(o->entry.tensor.nb[1], 1024);
        assert_int_equal(l.shard_bytes[s], 512 * (8192 + 128) + 4096 * 1024);
    }
    assert_int_equal(l.n_padded, 4);
    assert_int_equal(l.total_extra_bytes, 4 * 512 * 128);
    assert_int_equal(l.replicated_bytes, 4096 * 1000 * 2 + 4096 * 4);
    st_tp_layout_free(&l);

    /* with padding off every shard stays packed, for the policy's reason */
    const st_layout_policy off = {.mode = ST_PAD_MODE_OFF, .mode_source = "--pad-weights", .alias = 2048, .pad = 128};
    assert_int_equal(st_tp_layout_plan(&p, &whole, &off, ST_DEVICE_KIND_CPU, NULL, &l, &err), ST_OK);
    assert_int_equal(l.n_padded, 0);
    assert_int_equal(l.entries[0].entry.reason, ST_PAD_REASON_POLICY_OFF);
    st_tp_layout_free(&l);

    /* one shard: nothing to plan */
    assert_int_equal(st_tp_plan_init(&hp, 1, &p, NULL), ST_OK);
    assert_int_equal(st_tp_layout_plan(&p, &whole, &pol, ST_DEVICE_KIND_CPU, NULL, &l, &err), ST_OK);
    assert_int_equal(l.n_entries, 0);
    st_tp_layout_free(&l);
}

/* A quantized weight kept as stored splits its input columns only at whole blocks. */
static void test_layout_quantized_columns(void **state) {
    (void)state;
    st_hparams hp = {.arch = ST_ARCH_QWEN3, .n_vocab = 1000, .n_embd = 64, .n_layer = 1, .n_head = 4,
                     .n_head_kv = 4, .head_dim = 16, .n_ff = 96, .n_rot = 16};
    static const char *const names[] = {"blk.0.ffn_down.weight"};
    static const st_tensor_role roles[] = {ST_ROLE_GEMM};
    static const st_type types[] = {ST_TYPE_Q8_0};
    static const int64_t ne[][4] = {{96, 64, 1, 1}};
    st_layout_entry entries[1];
    st_layout_plan whole = whole_plan(entries, names, roles, types, ne, 1);
    const st_layout_policy pol = policy_on();
    st_tp_plan p;
    st_tp_layout l;
    st_error err = {0};
    assert_int_equal(st_tp_plan_init(&hp, 2, &p, NULL), ST_OK); /* 48 columns a shard: not whole 32s */
    assert_int_equal(st_tp_layout_plan(&p, &whole, &pol, ST_DEVICE_KIND_CPU, NULL, &l, &err), ST_ERROR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "-tp 2: blk.0.ffn_down.weight is q8_0, and shard 0's input columns [0, 48) "
                                        "are not whole blocks of 32 values"));
    assert_non_null(strstr(err.message, "--weights f16"));
    assert_null(l.entries);
    hp.n_ff = 128, entries[0].tensor.ne[0] = 128;
    whole = whole_plan(entries, names, roles, types, (const int64_t[][4]){{128, 64, 1, 1}}, 1);
    assert_int_equal(st_tp_plan_init(&hp, 4, &p, NULL), ST_OK); /* 32 columns a shard */
    assert_int_equal(st_tp_layout_plan(&p, &whole, &pol, ST_DEVICE_KIND_CPU, NULL, &l, &err), ST_OK);
    assert_int_equal(l.entries[3].entry.tensor.ne[0], 32);
    assert_int_equal(l.entries[3].entry.reason, ST_PAD_REASON_QUANTIZED);
    st_tp_layout_free(&l);
}

/* The 32B preset that the two-GPU benchmark splits: its numbers are Qwen/Qwen3-32B's
 * config.json (num_hidden_layers 64, hidden_size 5120, num_attention_heads 64,
 * num_key_value_heads 8, head_dim 128, intermediate_size 25600, vocab_size 151936,
 * max_position_embeddings 40960, rope_theta 1e6, rms_norm_eps 1e-6, tie_word_embeddings
 * false, torch_dtype bfloat16), 32.76 B parameters, and it splits into 2, 4 and 8 shards. */
static void test_qwen3_32b_preset(void **state) {
    (void)state;
    const st_synth_preset *p = st_synth_find_preset("qwen3-32b");
    assert_non_null(p);
    assert_int_equal(p->arch, ST_ARCH_QWEN3);
    assert_int_equal(p->n_layer, 64);
    assert_int_equal(p->n_embd, 5120);
    assert_int_equal(p->n_head, 64);
    assert_int_equal(p->n_head_kv, 8);
    assert_int_equal(p->head_dim, 128);
    assert_int_equal(p->n_ff, 25600);
    assert_int_equal(p->n_vocab, 151936);
    assert_int_equal(p->n_ctx_train, 40960);
    assert_true(p->rope_freq_base == 1e6 && p->rms_eps == 1e-6 && !p->tied_output);
    /* parameters: embeddings and output 2 x 151936 x 5120; a layer's q, k, v, o, gate, up,
     * down and its norms (2 x 5120 + 2 x 128); the output norm. In BF16: 2 bytes a matrix
     * element, the norms f32. */
    const uint64_t norms = 64 * (2 * 5120 + 2 * 128) + 5120;
    const uint64_t matrices = 2ull * 151936 * 5120 +
                              64ull * (5120 * 8192 + 2 * 5120 * 1024 + 8192 * 5120 + 3ull * 5120 * 25600);
    assert_int_equal(matrices + norms, 32762123264ull);
    uint64_t n_tensors = 0, n_bytes = 0;
    st_synth_preset_size(p, ST_TYPE_BF16, &n_tensors, &n_bytes);
    assert_int_equal(n_tensors, 3 + 64 * 11);
    assert_int_equal(n_bytes, 2 * matrices + 4 * norms);

    const st_hparams hp = {.arch = p->arch, .n_vocab = p->n_vocab, .n_embd = p->n_embd, .n_layer = p->n_layer,
                           .n_head = p->n_head, .n_head_kv = p->n_head_kv, .head_dim = p->head_dim,
                           .n_ff = p->n_ff, .n_rot = p->n_rot};
    for (int n = 2; n <= 8; n *= 2) {
        st_tp_plan tp;
        assert_int_equal(st_tp_plan_init(&hp, n, &tp, NULL), ST_OK);
        assert_int_equal(tp.shard_n_ff, 25600 / n);
    }
    expect_error(&hp, 3, "-tp 3: the 8 KV heads of qwen3 do not divide into 3 shards");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_sizes),      cmocka_unit_test(test_plan_ranges_tile),
        cmocka_unit_test(test_plan_uneven_vocab), cmocka_unit_test(test_plan_errors),
        cmocka_unit_test(test_slices),          cmocka_unit_test(test_slices_cover),
        cmocka_unit_test(test_layout_per_shard), cmocka_unit_test(test_layout_quantized_columns),
        cmocka_unit_test(test_qwen3_32b_preset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
