/*
 * Architecture tables: every tensor name llama.cpp's converter writes for each
 * architecture resolves to the op that consumes it; near-misses and names of other
 * architectures resolve to ST_ROLE_UNKNOWN.
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_names),
        cmocka_unit_test(test_unknown_names),
        cmocka_unit_test(test_layer_numbers_and_length),
        cmocka_unit_test(test_arch_names),
        cmocka_unit_test(test_role_names_and_gemm_flag),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
