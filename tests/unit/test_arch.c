/*
 * Architecture descriptors: every tensor name llama.cpp's converter writes for each
 * architecture resolves to the op that consumes it; near-misses and names of other
 * architectures resolve to ST_ROLE_UNKNOWN; each entry's shape, need and types match
 * llama.cpp's model loader.
 *
 * The expected names below are written out independently of src/layout/arch_table.c
 * (from llama.cpp's llama-arch.cpp), so a typo in either shows up here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stride/arch.h"

typedef struct name_case {
    st_arch arch;
    const char *name;
    st_tensor_role role;
} name_case;

static st_tensor_role role_of(st_arch arch, const char *name) {
    return st_arch_tensor_role(arch, name, strlen(name));
}

#define R_GEMM ST_ROLE_GEMM
#define R_EXP ST_ROLE_GEMM_EXPERTS
#define R_ROUTER ST_ROLE_ROUTER
#define R_ROWS ST_ROLE_ROW_LOOKUP
#define R_NORM ST_ROLE_NORM
#define R_BIAS ST_ROLE_BIAS
#define R_ROPE ST_ROLE_ROPE_FACTORS
#define R_UNK ST_ROLE_UNKNOWN

/* Every tensor of every architecture, at layer 0 and at a multi-digit layer. */
static const name_case known[] = {
    /* llama */
    {ST_ARCH_LLAMA, "token_embd.weight", R_ROWS},
    {ST_ARCH_LLAMA, "output_norm.weight", R_NORM},
    {ST_ARCH_LLAMA, "output.weight", R_GEMM},
    {ST_ARCH_LLAMA, "rope_freqs.weight", R_ROPE},
    {ST_ARCH_LLAMA, "blk.0.attn_norm.weight", R_NORM},
    {ST_ARCH_LLAMA, "blk.0.attn_q.weight", R_GEMM},
    {ST_ARCH_LLAMA, "blk.15.attn_k.weight", R_GEMM},
    {ST_ARCH_LLAMA, "blk.0.attn_v.weight", R_GEMM},
    {ST_ARCH_LLAMA, "blk.10.attn_output.weight", R_GEMM},
    {ST_ARCH_LLAMA, "blk.0.ffn_norm.weight", R_NORM},
    {ST_ARCH_LLAMA, "blk.0.ffn_gate.weight", R_GEMM},
    {ST_ARCH_LLAMA, "blk.0.ffn_up.weight", R_GEMM},
    {ST_ARCH_LLAMA, "blk.127.ffn_down.weight", R_GEMM},
    {ST_ARCH_LLAMA, "blk.0.attn_q.bias", R_BIAS},
    {ST_ARCH_LLAMA, "blk.0.attn_k.bias", R_BIAS},
    {ST_ARCH_LLAMA, "blk.0.attn_v.bias", R_BIAS},
    {ST_ARCH_LLAMA, "blk.0.attn_output.bias", R_BIAS},
    {ST_ARCH_LLAMA, "blk.0.ffn_gate.bias", R_BIAS},
    {ST_ARCH_LLAMA, "blk.0.ffn_up.bias", R_BIAS},
    {ST_ARCH_LLAMA, "blk.0.ffn_down.bias", R_BIAS},
    {ST_ARCH_LLAMA, "blk.3.ffn_gate_inp.weight", R_ROUTER},
    {ST_ARCH_LLAMA, "blk.3.ffn_gate_exps.weight", R_EXP},
    {ST_ARCH_LLAMA, "blk.3.ffn_up_exps.weight", R_EXP},
    {ST_ARCH_LLAMA, "blk.3.ffn_down_exps.weight", R_EXP},
    /* qwen3 */
    {ST_ARCH_QWEN3, "token_embd.weight", R_ROWS},
    {ST_ARCH_QWEN3, "output_norm.weight", R_NORM},
    {ST_ARCH_QWEN3, "output.weight", R_GEMM},
    {ST_ARCH_QWEN3, "blk.0.attn_norm.weight", R_NORM},
    {ST_ARCH_QWEN3, "blk.0.attn_q.weight", R_GEMM},
    {ST_ARCH_QWEN3, "blk.0.attn_k.weight", R_GEMM},
    {ST_ARCH_QWEN3, "blk.0.attn_v.weight", R_GEMM},
    {ST_ARCH_QWEN3, "blk.27.attn_output.weight", R_GEMM},
    {ST_ARCH_QWEN3, "blk.0.attn_q_norm.weight", R_NORM},
    {ST_ARCH_QWEN3, "blk.35.attn_k_norm.weight", R_NORM},
    {ST_ARCH_QWEN3, "blk.0.ffn_norm.weight", R_NORM},
    {ST_ARCH_QWEN3, "blk.0.ffn_gate.weight", R_GEMM},
    {ST_ARCH_QWEN3, "blk.0.ffn_up.weight", R_GEMM},
    {ST_ARCH_QWEN3, "blk.0.ffn_down.weight", R_GEMM},
    /* gemma3 */
    {ST_ARCH_GEMMA3, "token_embd.weight", R_ROWS},
    {ST_ARCH_GEMMA3, "output_norm.weight", R_NORM},
    {ST_ARCH_GEMMA3, "output.weight", R_GEMM},
    {ST_ARCH_GEMMA3, "blk.0.attn_norm.weight", R_NORM},
    {ST_ARCH_GEMMA3, "blk.0.attn_q.weight", R_GEMM},
    {ST_ARCH_GEMMA3, "blk.0.attn_k.weight", R_GEMM},
    {ST_ARCH_GEMMA3, "blk.0.attn_v.weight", R_GEMM},
    {ST_ARCH_GEMMA3, "blk.0.attn_output.weight", R_GEMM},
    {ST_ARCH_GEMMA3, "blk.0.attn_q_norm.weight", R_NORM},
    {ST_ARCH_GEMMA3, "blk.0.attn_k_norm.weight", R_NORM},
    {ST_ARCH_GEMMA3, "blk.25.post_attention_norm.weight", R_NORM},
    {ST_ARCH_GEMMA3, "blk.25.post_ffw_norm.weight", R_NORM},
    {ST_ARCH_GEMMA3, "blk.0.ffn_norm.weight", R_NORM},
    {ST_ARCH_GEMMA3, "blk.0.ffn_gate.weight", R_GEMM},
    {ST_ARCH_GEMMA3, "blk.0.ffn_up.weight", R_GEMM},
    {ST_ARCH_GEMMA3, "blk.0.ffn_down.weight", R_GEMM},
    /* phi3 */
    {ST_ARCH_PHI3, "token_embd.weight", R_ROWS},
    {ST_ARCH_PHI3, "output_norm.weight", R_NORM},
    {ST_ARCH_PHI3, "output.weight", R_GEMM},
    {ST_ARCH_PHI3, "rope_factors_long.weight", R_ROPE},
    {ST_ARCH_PHI3, "rope_factors_short.weight", R_ROPE},
    {ST_ARCH_PHI3, "blk.0.attn_norm.weight", R_NORM},
    {ST_ARCH_PHI3, "blk.0.attn_qkv.weight", R_GEMM},
    {ST_ARCH_PHI3, "blk.31.attn_qkv.weight", R_GEMM},
    {ST_ARCH_PHI3, "blk.0.attn_q.weight", R_GEMM},
    {ST_ARCH_PHI3, "blk.0.attn_k.weight", R_GEMM},
    {ST_ARCH_PHI3, "blk.0.attn_v.weight", R_GEMM},
    {ST_ARCH_PHI3, "blk.0.attn_output.weight", R_GEMM},
    {ST_ARCH_PHI3, "blk.0.ffn_norm.weight", R_NORM},
    {ST_ARCH_PHI3, "blk.0.ffn_up.weight", R_GEMM},
    {ST_ARCH_PHI3, "blk.0.ffn_down.weight", R_GEMM},
    /* olmoe */
    {ST_ARCH_OLMOE, "token_embd.weight", R_ROWS},
    {ST_ARCH_OLMOE, "output_norm.weight", R_NORM},
    {ST_ARCH_OLMOE, "output.weight", R_GEMM},
    {ST_ARCH_OLMOE, "blk.0.attn_norm.weight", R_NORM},
    {ST_ARCH_OLMOE, "blk.0.attn_q.weight", R_GEMM},
    {ST_ARCH_OLMOE, "blk.0.attn_k.weight", R_GEMM},
    {ST_ARCH_OLMOE, "blk.0.attn_v.weight", R_GEMM},
    {ST_ARCH_OLMOE, "blk.0.attn_output.weight", R_GEMM},
    {ST_ARCH_OLMOE, "blk.0.attn_q_norm.weight", R_NORM},
    {ST_ARCH_OLMOE, "blk.0.attn_k_norm.weight", R_NORM},
    {ST_ARCH_OLMOE, "blk.0.ffn_norm.weight", R_NORM},
    {ST_ARCH_OLMOE, "blk.15.ffn_gate_inp.weight", R_ROUTER},
    {ST_ARCH_OLMOE, "blk.15.ffn_gate_exps.weight", R_EXP},
    {ST_ARCH_OLMOE, "blk.15.ffn_up_exps.weight", R_EXP},
    {ST_ARCH_OLMOE, "blk.15.ffn_down_exps.weight", R_EXP},
};

/* Names that must NOT resolve: malformed layer numbers, near-miss spellings, and tensors
 * that exist only in another architecture. */
static const name_case unknown[] = {
    /* layer-number syntax */
    {ST_ARCH_LLAMA, "blk.01.attn_q.weight", R_UNK},
    {ST_ARCH_LLAMA, "blk.00.attn_q.weight", R_UNK},
    {ST_ARCH_LLAMA, "blk..attn_q.weight", R_UNK},
    {ST_ARCH_LLAMA, "blk.-1.attn_q.weight", R_UNK},
    {ST_ARCH_LLAMA, "blk.+1.attn_q.weight", R_UNK},
    {ST_ARCH_LLAMA, "blk. 1.attn_q.weight", R_UNK},
    {ST_ARCH_LLAMA, "blk.1a.attn_q.weight", R_UNK},
    {ST_ARCH_LLAMA, "blk.x.attn_q.weight", R_UNK},
    {ST_ARCH_LLAMA, "blk.#.attn_q.weight", R_UNK},
    {ST_ARCH_LLAMA, "blk.0attn_q.weight", R_UNK},
    {ST_ARCH_LLAMA, "blk0.attn_q.weight", R_UNK},
    /* trailing and leading garbage, truncation, case */
    {ST_ARCH_LLAMA, "blk.0.attn_q.weight.", R_UNK},
    {ST_ARCH_LLAMA, "blk.0.attn_q.weightx", R_UNK},
    {ST_ARCH_LLAMA, "blk.0.attn_q.weigh", R_UNK},
    {ST_ARCH_LLAMA, "xblk.0.attn_q.weight", R_UNK},
    {ST_ARCH_LLAMA, "token_embd.weight2", R_UNK},
    {ST_ARCH_LLAMA, "token_embd", R_UNK},
    {ST_ARCH_LLAMA, "Token_embd.weight", R_UNK},
    {ST_ARCH_LLAMA, "output.bias", R_UNK},
    {ST_ARCH_LLAMA, "", R_UNK},
    {ST_ARCH_LLAMA, "blk.0.attn_qk.weight", R_UNK},
    {ST_ARCH_LLAMA, "blk.0.ffn_gate_inp.bias", R_UNK},
    /* cross-architecture: exists elsewhere, not here */
    {ST_ARCH_LLAMA, "blk.0.attn_qkv.weight", R_UNK},
    {ST_ARCH_LLAMA, "blk.0.attn_q_norm.weight", R_UNK},
    {ST_ARCH_LLAMA, "blk.0.post_attention_norm.weight", R_UNK},
    {ST_ARCH_LLAMA, "rope_factors_long.weight", R_UNK},
    {ST_ARCH_QWEN3, "blk.0.attn_q.bias", R_UNK},
    {ST_ARCH_QWEN3, "blk.0.attn_qkv.weight", R_UNK},
    {ST_ARCH_QWEN3, "rope_freqs.weight", R_UNK},
    {ST_ARCH_QWEN3, "blk.0.ffn_gate_exps.weight", R_UNK},
    {ST_ARCH_QWEN3, "blk.0.post_ffw_norm.weight", R_UNK},
    {ST_ARCH_GEMMA3, "blk.0.ffn_gate_inp.weight", R_UNK},
    {ST_ARCH_GEMMA3, "blk.0.attn_qkv.weight", R_UNK},
    {ST_ARCH_GEMMA3, "rope_freqs.weight", R_UNK},
    {ST_ARCH_PHI3, "blk.0.ffn_gate.weight", R_UNK},
    {ST_ARCH_PHI3, "blk.0.attn_q_norm.weight", R_UNK},
    {ST_ARCH_PHI3, "rope_freqs.weight", R_UNK},
    {ST_ARCH_PHI3, "blk.0.attn_q.bias", R_UNK},
    {ST_ARCH_OLMOE, "blk.0.ffn_gate.weight", R_UNK},
    {ST_ARCH_OLMOE, "blk.0.ffn_up.weight", R_UNK},
    {ST_ARCH_OLMOE, "blk.0.ffn_down.weight", R_UNK},
    {ST_ARCH_OLMOE, "blk.0.post_attention_norm.weight", R_UNK},
    /* no table at all */
    {ST_ARCH_UNKNOWN, "token_embd.weight", R_UNK},
    {ST_ARCH_UNKNOWN, "blk.0.attn_q.weight", R_UNK},
    {ST_ARCH_COUNT, "blk.0.attn_q.weight", R_UNK},
};

static void check_cases(const name_case *cases, size_t n) {
    int failures = 0;
    for (size_t i = 0; i < n; i++) {
        st_tensor_role got = role_of(cases[i].arch, cases[i].name);
        if (got != cases[i].role) {
            print_error("%s \"%s\": role %s, expected %s\n", st_arch_name(cases[i].arch),
                        cases[i].name, st_tensor_role_name(got), st_tensor_role_name(cases[i].role));
            failures++;
        }
    }
    assert_int_equal(failures, 0);
}

static void test_known_names(void **state) {
    (void)state;
    check_cases(known, sizeof(known) / sizeof(known[0]));
}

static void test_unknown_names(void **state) {
    (void)state;
    check_cases(unknown, sizeof(unknown) / sizeof(unknown[0]));
}

/* Layer numbers: any digit count without a leading zero; the length is honoured (the
 * name need not be NUL-terminated). */
static void test_layer_numbers_and_length(void **state) {
    (void)state;
    char buf[64];
    static const int layers[] = {0, 1, 9, 10, 99, 100, 12345, 2147483647};
    for (size_t i = 0; i < sizeof(layers) / sizeof(layers[0]); i++) {
        snprintf(buf, sizeof(buf), "blk.%d.ffn_up.weight", layers[i]);
        assert_int_equal(role_of(ST_ARCH_QWEN3, buf), ST_ROLE_GEMM);
    }
    /* a longer digit run than any int: still a layer number, never overflowing */
    assert_int_equal(role_of(ST_ARCH_QWEN3, "blk.123456789012345678901234567890.ffn_up.weight"),
                     ST_ROLE_GEMM);
    const char *s = "blk.2.attn_v.weightXYZ";
    size_t n = strlen("blk.2.attn_v.weight");
    assert_int_equal(st_arch_tensor_role(ST_ARCH_LLAMA, s, n), ST_ROLE_GEMM);
    assert_int_equal(st_arch_tensor_role(ST_ARCH_LLAMA, s, n + 1), ST_ROLE_UNKNOWN);
    assert_int_equal(st_arch_tensor_role(ST_ARCH_LLAMA, s, n - 1), ST_ROLE_UNKNOWN);
    assert_int_equal(st_arch_tensor_role(ST_ARCH_LLAMA, NULL, 0), ST_ROLE_UNKNOWN);
}

static void test_arch_names(void **state) {
    (void)state;
    static const struct {
        const char *name;
        st_arch arch;
    } cases[] = {
        {"llama", ST_ARCH_LLAMA}, {"qwen3", ST_ARCH_QWEN3}, {"gemma3", ST_ARCH_GEMMA3},
        {"phi3", ST_ARCH_PHI3},   {"olmoe", ST_ARCH_OLMOE},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(st_arch_from_name(cases[i].name, strlen(cases[i].name)), cases[i].arch);
        assert_string_equal(st_arch_name(cases[i].arch), cases[i].name);
    }
    static const char *const bad[] = {"", "llam", "llamas", "LLAMA", "qwen2", "qwen3moe", "gemma",
                                      "gemma2", "phi2", "olmo", "olmoe ", "unknown"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(st_arch_from_name(bad[i], strlen(bad[i])), ST_ARCH_UNKNOWN);
    /* length-delimited, as GGUF strings are */
    assert_int_equal(st_arch_from_name("qwen3moe", 5), ST_ARCH_QWEN3);
    assert_int_equal(st_arch_from_name(NULL, 0), ST_ARCH_UNKNOWN);
    assert_string_equal(st_arch_name(ST_ARCH_UNKNOWN), "unknown");
    assert_string_equal(st_arch_name(ST_ARCH_COUNT), "unknown");
}

static void test_role_names_and_gemm_flag(void **state) {
    (void)state;
    static const struct {
        st_tensor_role role;
        const char *name;
        bool gemm;
    } cases[] = {
        {ST_ROLE_UNKNOWN, "unknown", false},     {ST_ROLE_GEMM, "gemm", true},
        {ST_ROLE_GEMM_EXPERTS, "gemm-experts", true}, {ST_ROLE_ROUTER, "router", true},
        {ST_ROLE_ROW_LOOKUP, "row-lookup", false}, {ST_ROLE_NORM, "norm", false},
        {ST_ROLE_BIAS, "bias", false},           {ST_ROLE_ROPE_FACTORS, "rope-factors", false},
        {ST_ROLE_COUNT, "unknown", false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_string_equal(st_tensor_role_name(cases[i].role), cases[i].name);
        assert_int_equal(st_tensor_role_is_gemm_weight(cases[i].role), cases[i].gemm);
    }
}

/* ---- the descriptors: what each architecture's forward pass needs, in which shape ---- */

/* Sizes whose every product differs, so that a wrong dimension cannot pass by accident:
 * n_embd 40, n_vocab 300, head_dim 6, n_head 4 (q 24), n_head_kv 2 (kv 12), n_ff 56,
 * n_expert 5, n_rot 4. */
static const st_arch_sizes SIZES = {.n_vocab = 300, .n_embd = 40, .n_head = 4, .n_head_kv = 2, .head_dim = 6,
                                    .n_ff = 56, .n_expert = 5, .n_rot = 4};

typedef struct shape_case {
    st_arch arch;
    const char *name;
    st_tensor_need need;
    int64_t ne[3]; /* 0: no such dimension */
} shape_case;

/* Written out from llama.cpp's llama-model.cpp (create_tensor calls), not from the table. */
static const shape_case shapes[] = {
    {ST_ARCH_LLAMA, "token_embd.weight", ST_NEED_REQUIRED, {40, 300, 0}},
    {ST_ARCH_LLAMA, "output.weight", ST_NEED_OPTIONAL, {40, 300, 0}},
    {ST_ARCH_LLAMA, "output_norm.weight", ST_NEED_REQUIRED, {40, 0, 0}},
    {ST_ARCH_LLAMA, "rope_freqs.weight", ST_NEED_OPTIONAL, {2, 0, 0}},
    {ST_ARCH_LLAMA, "blk.3.attn_q.weight", ST_NEED_REQUIRED, {40, 24, 0}},
    {ST_ARCH_LLAMA, "blk.3.attn_k.weight", ST_NEED_REQUIRED, {40, 12, 0}},
    {ST_ARCH_LLAMA, "blk.3.attn_output.weight", ST_NEED_REQUIRED, {24, 40, 0}},
    {ST_ARCH_LLAMA, "blk.3.ffn_down.weight", ST_NEED_REQUIRED, {56, 40, 0}},
    {ST_ARCH_LLAMA, "blk.3.attn_q.bias", ST_NEED_UNUSED, {24, 0, 0}},
    {ST_ARCH_LLAMA, "blk.3.ffn_gate_exps.weight", ST_NEED_UNUSED, {40, 56, 5}},
    {ST_ARCH_QWEN3, "blk.0.attn_q_norm.weight", ST_NEED_REQUIRED, {6, 0, 0}},
    {ST_ARCH_QWEN3, "blk.0.attn_k_norm.weight", ST_NEED_REQUIRED, {6, 0, 0}},
    {ST_ARCH_QWEN3, "blk.0.ffn_gate.weight", ST_NEED_REQUIRED, {40, 56, 0}},
    {ST_ARCH_GEMMA3, "blk.1.post_attention_norm.weight", ST_NEED_REQUIRED, {40, 0, 0}},
    {ST_ARCH_GEMMA3, "blk.1.post_ffw_norm.weight", ST_NEED_REQUIRED, {40, 0, 0}},
    {ST_ARCH_GEMMA3, "blk.1.attn_k_norm.weight", ST_NEED_REQUIRED, {6, 0, 0}},
    {ST_ARCH_PHI3, "blk.0.attn_qkv.weight", ST_NEED_REQUIRED, {40, 48, 0}},
    {ST_ARCH_PHI3, "blk.0.ffn_up.weight", ST_NEED_REQUIRED, {40, 112, 0}},
    {ST_ARCH_PHI3, "blk.0.ffn_down.weight", ST_NEED_REQUIRED, {56, 40, 0}},
    {ST_ARCH_PHI3, "rope_factors_long.weight", ST_NEED_OPTIONAL, {2, 0, 0}},
    {ST_ARCH_PHI3, "rope_factors_short.weight", ST_NEED_OPTIONAL, {2, 0, 0}},
    {ST_ARCH_OLMOE, "blk.2.attn_q_norm.weight", ST_NEED_REQUIRED, {24, 0, 0}},
    {ST_ARCH_OLMOE, "blk.2.attn_k_norm.weight", ST_NEED_REQUIRED, {12, 0, 0}},
    {ST_ARCH_OLMOE, "blk.2.ffn_gate_inp.weight", ST_NEED_REQUIRED, {40, 5, 0}},
    {ST_ARCH_OLMOE, "blk.2.ffn_up_exps.weight", ST_NEED_REQUIRED, {40, 56, 5}},
    {ST_ARCH_OLMOE, "blk.2.ffn_down_exps.weight", ST_NEED_REQUIRED, {56, 40, 5}},
};

static void test_descriptor_shapes(void **state) {
    (void)state;
    int64_t dims[ST_DIM_COUNT];
    assert_true(st_arch_dims(&SIZES, dims));
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        const shape_case *c = &shapes[i];
        int64_t layer;
        const st_arch_tensor *e = st_arch_match(c->arch, c->name, strlen(c->name), &layer);
        if (!e) fail_msg("%s: %s not in the table", st_arch_name(c->arch), c->name);
        assert_int_equal(layer, strncmp(c->name, "blk.", 4) == 0 ? atoi(c->name + 4) : -1);
        assert_int_equal(e->need, c->need);
        for (unsigned d = 0; d < 3; d++) {
            int64_t got = d < e->n_dims ? dims[e->ne[d]] : 0;
            if (got != c->ne[d])
                fail_msg("%s %s ne[%u]: table %lld, llama.cpp %lld", st_arch_name(c->arch), c->name, d,
                         (long long)got, (long long)c->ne[d]);
        }
        /* the name formats back from the entry */
        char name[96];
        st_arch_tensor_name(e, layer, name, sizeof(name));
        assert_string_equal(name, c->name);
    }
}

/* What each architecture's forward pass reads (st_tensor_kind of the required entries),
 * and that every entry is consistent: norms and rope factors f32, products any weight
 * type, alternatives only in phi3, optional entries with a feature. */
static void test_descriptor_requirements(void **state) {
    (void)state;
    static const struct {
        st_arch arch;
        st_tensor_kind kinds[16];
    } req[] = {
        {ST_ARCH_LLAMA, {ST_TENSOR_TOKEN_EMBD, ST_TENSOR_OUTPUT_NORM, ST_TENSOR_ATTN_NORM, ST_TENSOR_ATTN_Q,
                         ST_TENSOR_ATTN_K, ST_TENSOR_ATTN_V, ST_TENSOR_ATTN_OUTPUT, ST_TENSOR_FFN_NORM,
                         ST_TENSOR_FFN_GATE, ST_TENSOR_FFN_UP, ST_TENSOR_FFN_DOWN, ST_TENSOR_KIND_COUNT}},
        {ST_ARCH_QWEN3, {ST_TENSOR_TOKEN_EMBD, ST_TENSOR_OUTPUT_NORM, ST_TENSOR_ATTN_NORM, ST_TENSOR_ATTN_Q,
                         ST_TENSOR_ATTN_K, ST_TENSOR_ATTN_V, ST_TENSOR_ATTN_Q_NORM, ST_TENSOR_ATTN_K_NORM,
                         ST_TENSOR_ATTN_OUTPUT, ST_TENSOR_FFN_NORM, ST_TENSOR_FFN_GATE, ST_TENSOR_FFN_UP,
                         ST_TENSOR_FFN_DOWN, ST_TENSOR_KIND_COUNT}},
        {ST_ARCH_GEMMA3, {ST_TENSOR_TOKEN_EMBD, ST_TENSOR_OUTPUT_NORM, ST_TENSOR_ATTN_NORM, ST_TENSOR_ATTN_Q,
                          ST_TENSOR_ATTN_K, ST_TENSOR_ATTN_V, ST_TENSOR_ATTN_Q_NORM, ST_TENSOR_ATTN_K_NORM,
                          ST_TENSOR_ATTN_OUTPUT, ST_TENSOR_POST_ATTN_NORM, ST_TENSOR_FFN_NORM, ST_TENSOR_FFN_GATE,
                          ST_TENSOR_FFN_UP, ST_TENSOR_FFN_DOWN, ST_TENSOR_POST_FFN_NORM, ST_TENSOR_KIND_COUNT}},
        {ST_ARCH_PHI3, {ST_TENSOR_TOKEN_EMBD, ST_TENSOR_OUTPUT_NORM, ST_TENSOR_ATTN_NORM, ST_TENSOR_ATTN_QKV,
                        ST_TENSOR_ATTN_Q, ST_TENSOR_ATTN_K, ST_TENSOR_ATTN_V, ST_TENSOR_ATTN_OUTPUT,
                        ST_TENSOR_FFN_NORM, ST_TENSOR_FFN_UP, ST_TENSOR_FFN_DOWN, ST_TENSOR_KIND_COUNT}},
        {ST_ARCH_OLMOE, {ST_TENSOR_TOKEN_EMBD, ST_TENSOR_OUTPUT_NORM, ST_TENSOR_ATTN_NORM, ST_TENSOR_ATTN_Q,
                         ST_TENSOR_ATTN_K, ST_TENSOR_ATTN_V, ST_TENSOR_ATTN_Q_NORM, ST_TENSOR_ATTN_K_NORM,
                         ST_TENSOR_ATTN_OUTPUT, ST_TENSOR_FFN_NORM, ST_TENSOR_FFN_GATE_INP,
                         ST_TENSOR_FFN_GATE_EXPS, ST_TENSOR_FFN_UP_EXPS, ST_TENSOR_FFN_DOWN_EXPS,
                         ST_TENSOR_KIND_COUNT}},
    };
    for (size_t a = 0; a < sizeof(req) / sizeof(req[0]); a++) {
        size_t n, n_required = 0, n_want = 0;
        const st_arch_tensor *t = st_arch_tensors(req[a].arch, &n);
        assert_non_null(t);
        while (req[a].kinds[n_want] != ST_TENSOR_KIND_COUNT) n_want++;
        bool seen_layer = false, after_layer = false;
        for (size_t i = 0; i < n; i++) {
            const st_arch_tensor *e = &t[i];
            /* a layer's entries together: the global ones before them, then after */
            if (st_arch_tensor_per_layer(e)) {
                assert_false(after_layer);
                seen_layer = true;
            } else if (seen_layer) {
                after_layer = true;
            }
            assert_true(e->n_dims >= 1 && e->n_dims <= 3);
            for (unsigned d = 0; d < 3; d++) assert_true((d < e->n_dims) == (e->ne[d] != ST_DIM_NONE));
            const bool f32 = e->role == ST_ROLE_NORM || e->role == ST_ROLE_ROPE_FACTORS || e->role == ST_ROLE_BIAS;
            assert_int_equal(e->types, f32 ? ST_ARCH_TYPES_F32 : ST_ARCH_TYPES_WEIGHT);
            assert_true(e->alt == 0 || req[a].arch == ST_ARCH_PHI3);
            assert_true((e->need == ST_NEED_OPTIONAL) == (e->feature != ST_FEATURE_NONE));
            assert_true(e->need != ST_NEED_UNUSED || req[a].arch == ST_ARCH_LLAMA);
            if (e->need != ST_NEED_REQUIRED) continue;
            n_required++;
            bool listed = false;
            for (size_t k = 0; k < n_want; k++) listed |= req[a].kinds[k] == e->kind;
            if (!listed) fail_msg("%s: %s is required by the table only", st_arch_name(req[a].arch), e->pattern);
        }
        assert_int_equal(n_required, n_want);
    }
    size_t n = 1;
    assert_null(st_arch_tensors(ST_ARCH_UNKNOWN, &n));
    assert_int_equal(n, 0);
    int64_t layer = 7;
    assert_null(st_arch_match(ST_ARCH_QWEN3, "blk.0.attn_qkv.weight", 21, &layer));
    assert_int_equal(layer, -1);
    assert_non_null(st_arch_match(ST_ARCH_QWEN3, "blk.123456789012345678901234567890.ffn_up.weight", 48, &layer));
    assert_int_equal(layer, INT64_MAX); /* saturated: no overflow, and beyond any block_count */
}

/* The dimensions in checked arithmetic: a product past int64 is refused, not wrapped. */
static void test_descriptor_dims_overflow(void **state) {
    (void)state;
    int64_t dims[ST_DIM_COUNT];
    assert_true(st_arch_dims(&SIZES, dims));
    assert_int_equal(dims[ST_DIM_NONE], 1);
    assert_int_equal(dims[ST_DIM_QKV], 24 + 2 * 12);
    assert_int_equal(dims[ST_DIM_FF2], 112);
    assert_int_equal(dims[ST_DIM_ROT_HALF], 2);
    st_arch_sizes s = SIZES;
    s.head_dim = (INT64_C(1) << 62) + 4; /* n_head 4 times this wraps to 16 in 64 bits */
    assert_false(st_arch_dims(&s, dims));
    s = SIZES;
    s.n_head_kv = INT64_C(1) << 60;
    assert_false(st_arch_dims(&s, dims)); /* q + 2 kv */
    s = SIZES;
    s.n_ff = INT64_MAX / 2 + 1;
    assert_false(st_arch_dims(&s, dims)); /* 2 n_ff */
    s = SIZES;
    s.n_head = -1;
    assert_false(st_arch_dims(&s, dims));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_descriptor_shapes),
        cmocka_unit_test(test_descriptor_requirements),
        cmocka_unit_test(test_descriptor_dims_overflow),
        cmocka_unit_test(test_known_names),
        cmocka_unit_test(test_unknown_names),
        cmocka_unit_test(test_layer_numbers_and_length),
        cmocka_unit_test(test_arch_names),
        cmocka_unit_test(test_role_names_and_gemm_flag),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
