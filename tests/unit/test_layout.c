/*
 * The layout planner: every rule and every exclusion of st_layout_decide, the sentence
 * st_layout_entry_explain writes for each reason, and st_layout_plan_gguf on small GGUF
 * files written with the GGUF writer (qwen3-like F16 and Q8_0, olmoe-like with 3D
 * experts, unknown and missing architectures). Policy parsing is in test_layout_policy.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stride/gguf.h"
#include "stride/layout.h"

#define A ST_LAYOUT_DEFAULT_ALIAS
#define P ST_LAYOUT_DEFAULT_PAD

/* ---- st_layout_decide: explicit cases with the numbers written out ---- */

typedef struct decide_case {
    const char *what;
    st_tensor_role role;
    st_type type;
    int64_t ne[4];
    bool enabled;
    st_pad_reason disabled_reason;
    size_t alias, pad;
    st_pad_reason reason;
    size_t nb1;
    size_t extra;
} decide_case;

#define ON true, ST_PAD_REASON_POLICY_OFF
#define OFF(r) false, ST_PAD_REASON_##r

static const decide_case decide_cases[] = {
    /* the rule, both sides of the boundary: row = alias, alias +- one element, 2 x alias */
    {"f16 row = alias", ST_ROLE_GEMM, ST_TYPE_F16, {1024, 4, 1, 1}, ON, A, P, ST_PAD_REASON_PADDED, 2176, 4 * 128},
    {"f16 row = alias - 2", ST_ROLE_GEMM, ST_TYPE_F16, {1023, 4, 1, 1}, ON, A, P, ST_PAD_REASON_ROW_NOT_ALIASED, 2046, 0},
    {"f16 row = alias + 2", ST_ROLE_GEMM, ST_TYPE_F16, {1025, 4, 1, 1}, ON, A, P, ST_PAD_REASON_ROW_NOT_ALIASED, 2050, 0},
    {"f16 row = 2 alias", ST_ROLE_GEMM, ST_TYPE_F16, {2048, 3, 1, 1}, ON, A, P, ST_PAD_REASON_PADDED, 4224, 3 * 128},
    {"f16 row = 1.5 alias", ST_ROLE_GEMM, ST_TYPE_F16, {1536, 3, 1, 1}, ON, A, P, ST_PAD_REASON_ROW_NOT_ALIASED, 3072, 0},
    {"f16 6144 wide", ST_ROLE_GEMM, ST_TYPE_F16, {6144, 2, 1, 1}, ON, A, P, ST_PAD_REASON_PADDED, 12416, 2 * 128},
    {"f16 gemma 1152", ST_ROLE_GEMM, ST_TYPE_F16, {1152, 2, 1, 1}, ON, A, P, ST_PAD_REASON_ROW_NOT_ALIASED, 2304, 0},
    {"f16 gemma 6912", ST_ROLE_GEMM, ST_TYPE_F16, {6912, 2, 1, 1}, ON, A, P, ST_PAD_REASON_ROW_NOT_ALIASED, 13824, 0},
    {"f32 row = alias", ST_ROLE_GEMM, ST_TYPE_F32, {512, 2, 1, 1}, ON, A, P, ST_PAD_REASON_PADDED, 2176, 2 * 128},
    {"f32 row = alias - 4", ST_ROLE_GEMM, ST_TYPE_F32, {511, 2, 1, 1}, ON, A, P, ST_PAD_REASON_ROW_NOT_ALIASED, 2044, 0},
    {"f32 row = alias + 4", ST_ROLE_GEMM, ST_TYPE_F32, {513, 2, 1, 1}, ON, A, P, ST_PAD_REASON_ROW_NOT_ALIASED, 2052, 0},
    {"f32 2048 elems", ST_ROLE_GEMM, ST_TYPE_F32, {2048, 2, 1, 1}, ON, A, P, ST_PAD_REASON_PADDED, 8320, 2 * 128},
    {"bf16 like f16", ST_ROLE_GEMM, ST_TYPE_BF16, {2048, 5, 1, 1}, ON, A, P, ST_PAD_REASON_PADDED, 4224, 5 * 128},
    {"bf16 unaliased", ST_ROLE_GEMM, ST_TYPE_BF16, {3072 + 1, 5, 1, 1}, ON, A, P, ST_PAD_REASON_ROW_NOT_ALIASED, 6146, 0},
    {"zero-length row", ST_ROLE_GEMM, ST_TYPE_F16, {0, 4, 1, 1}, ON, A, P, ST_PAD_REASON_ROW_NOT_ALIASED, 0, 0},
    {"zero rows", ST_ROLE_GEMM, ST_TYPE_F16, {2048, 0, 1, 1}, ON, A, P, ST_PAD_REASON_PADDED, 4224, 0},
    /* router and experts follow the same rule; experts stay packed one after another */
    {"router f32", ST_ROLE_ROUTER, ST_TYPE_F32, {2048, 64, 1, 1}, ON, A, P, ST_PAD_REASON_PADDED, 8320, 64 * 128},
    {"router f16 unaliased", ST_ROLE_ROUTER, ST_TYPE_F16, {1000, 64, 1, 1}, ON, A, P, ST_PAD_REASON_ROW_NOT_ALIASED, 2000, 0},
    {"experts f16", ST_ROLE_GEMM_EXPERTS, ST_TYPE_F16, {2048, 8, 4, 1}, ON, A, P, ST_PAD_REASON_PADDED, 4224, 8 * 4 * 128},
    {"experts down f16", ST_ROLE_GEMM_EXPERTS, ST_TYPE_F16, {1024, 16, 64, 1}, ON, A, P, ST_PAD_REASON_PADDED, 2176, 16 * 64 * 128},
    {"experts bf16 unaliased", ST_ROLE_GEMM_EXPERTS, ST_TYPE_BF16, {1408, 8, 4, 1}, ON, A, P, ST_PAD_REASON_ROW_NOT_ALIASED, 2816, 0},
    /* custom geometry */
    {"alias 4096 pad 64", ST_ROLE_GEMM, ST_TYPE_F16, {2048, 4, 1, 1}, ON, 4096, 64, ST_PAD_REASON_PADDED, 4160, 4 * 64},
    {"alias 4096: 2048 B row", ST_ROLE_GEMM, ST_TYPE_F16, {1024, 4, 1, 1}, ON, 4096, 64, ST_PAD_REASON_ROW_NOT_ALIASED, 2048, 0},
    {"alias 1024 pad 256", ST_ROLE_GEMM, ST_TYPE_F16, {1536, 2, 1, 1}, ON, 1024, 256, ST_PAD_REASON_PADDED, 3328, 2 * 256},
    {"alias 256 pad 16", ST_ROLE_GEMM, ST_TYPE_F16, {128, 2, 1, 1}, ON, 256, 16, ST_PAD_REASON_PADDED, 272, 2 * 16},
    {"alias 256: 272 B row", ST_ROLE_GEMM, ST_TYPE_F16, {136, 2, 1, 1}, ON, 256, 16, ST_PAD_REASON_ROW_NOT_ALIASED, 272, 0},
    /* policy: each disabled reason is recorded, aliased or not */
    {"policy off", ST_ROLE_GEMM, ST_TYPE_F16, {2048, 4, 1, 1}, OFF(POLICY_OFF), A, P, ST_PAD_REASON_POLICY_OFF, 4096, 0},
    {"kill switch", ST_ROLE_GEMM, ST_TYPE_F16, {2048, 4, 1, 1}, OFF(KILL_SWITCH), A, P, ST_PAD_REASON_KILL_SWITCH, 4096, 0},
    {"auto off", ST_ROLE_GEMM_EXPERTS, ST_TYPE_F16, {2048, 4, 2, 1}, OFF(AUTO_OFF), A, P, ST_PAD_REASON_AUTO_OFF, 4096, 0},
    {"policy off unaliased", ST_ROLE_GEMM, ST_TYPE_F16, {1000, 4, 1, 1}, OFF(POLICY_OFF), A, P, ST_PAD_REASON_POLICY_OFF, 2000, 0},
    /* exclusions by role, also with an aliased float row */
    {"embeddings", ST_ROLE_ROW_LOOKUP, ST_TYPE_F16, {2048, 16, 1, 1}, ON, A, P, ST_PAD_REASON_NOT_GEMM_WEIGHT, 4096, 0},
    {"embeddings f32", ST_ROLE_ROW_LOOKUP, ST_TYPE_F32, {512, 16, 1, 1}, ON, A, P, ST_PAD_REASON_NOT_GEMM_WEIGHT, 2048, 0},
    {"norm", ST_ROLE_NORM, ST_TYPE_F32, {512, 1, 1, 1}, ON, A, P, ST_PAD_REASON_NOT_GEMM_WEIGHT, 2048, 0},
    {"bias", ST_ROLE_BIAS, ST_TYPE_F32, {2048, 1, 1, 1}, ON, A, P, ST_PAD_REASON_NOT_GEMM_WEIGHT, 8192, 0},
    {"rope factors", ST_ROLE_ROPE_FACTORS, ST_TYPE_F32, {512, 1, 1, 1}, ON, A, P, ST_PAD_REASON_NOT_GEMM_WEIGHT, 2048, 0},
    {"unknown tensor", ST_ROLE_UNKNOWN, ST_TYPE_F16, {2048, 4, 1, 1}, ON, A, P, ST_PAD_REASON_UNKNOWN_TENSOR, 4096, 0},
    {"role out of range", ST_ROLE_COUNT, ST_TYPE_F16, {2048, 4, 1, 1}, ON, A, P, ST_PAD_REASON_UNKNOWN_TENSOR, 4096, 0},
    /* role exclusions win over the policy reason */
    {"embeddings, policy off", ST_ROLE_ROW_LOOKUP, ST_TYPE_F16, {2048, 4, 1, 1}, OFF(POLICY_OFF), A, P, ST_PAD_REASON_NOT_GEMM_WEIGHT, 4096, 0},
    /* exclusions by type: quantized (also when the row would alias) and non-float */
    {"q8_0 2048", ST_ROLE_GEMM, ST_TYPE_Q8_0, {2048, 4, 1, 1}, ON, A, P, ST_PAD_REASON_QUANTIZED, 2176, 0},
    {"q8_0 aliased row", ST_ROLE_GEMM, ST_TYPE_Q8_0, {32768, 2, 1, 1}, ON, A, P, ST_PAD_REASON_QUANTIZED, 34816, 0},
    {"q4_K", ST_ROLE_GEMM, ST_TYPE_Q4_K, {4096, 2, 1, 1}, ON, A, P, ST_PAD_REASON_QUANTIZED, 2304, 0},
    {"q4_K aliased row", ST_ROLE_GEMM, ST_TYPE_Q4_K, {32768, 2, 1, 1}, ON, A, P, ST_PAD_REASON_QUANTIZED, 18432, 0},
    {"q6_K experts", ST_ROLE_GEMM_EXPERTS, ST_TYPE_Q6_K, {2048, 4, 2, 1}, ON, A, P, ST_PAD_REASON_QUANTIZED, 1680, 0},
    {"q4_0 router", ST_ROLE_ROUTER, ST_TYPE_Q4_0, {2048, 4, 1, 1}, ON, A, P, ST_PAD_REASON_QUANTIZED, 1152, 0},
    {"q8_0 policy off", ST_ROLE_GEMM, ST_TYPE_Q8_0, {2048, 4, 1, 1}, OFF(KILL_SWITCH), A, P, ST_PAD_REASON_QUANTIZED, 2176, 0},
    {"i32", ST_ROLE_GEMM, ST_TYPE_I32, {512, 4, 1, 1}, ON, A, P, ST_PAD_REASON_NOT_FLOAT, 2048, 0},
    {"i8", ST_ROLE_GEMM, ST_TYPE_I8, {2048, 4, 1, 1}, ON, A, P, ST_PAD_REASON_NOT_FLOAT, 2048, 0},
    {"i16", ST_ROLE_GEMM, ST_TYPE_I16, {1024, 4, 1, 1}, ON, A, P, ST_PAD_REASON_NOT_FLOAT, 2048, 0},
    {"f64", ST_ROLE_GEMM, ST_TYPE_F64, {256, 4, 1, 1}, ON, A, P, ST_PAD_REASON_NOT_FLOAT, 2048, 0},
};

/* The layout invariants every decision keeps (SPEC.md section 1). */
static void check_strides(const st_layout_entry *e, const int64_t ne[4]) {
    const st_type_traits *tr = st_type_get_traits((uint32_t)e->tensor.type);
    assert_int_equal(e->tensor.nb[0], tr->block_bytes);
    assert_int_equal(e->tensor.nb[2], e->tensor.nb[1] * (size_t)ne[1]);
    assert_int_equal(e->tensor.nb[3], e->tensor.nb[2] * (size_t)ne[2]);
    for (int d = 0; d < 4; d++) assert_int_equal(e->tensor.ne[d], ne[d]);
    assert_null(e->tensor.data);
    assert_true(st_tensor_has_contiguous_rows(&e->tensor));
}

static void test_decide_cases(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(decide_cases) / sizeof(decide_cases[0]); i++) {
        const decide_case *c = &decide_cases[i];
        st_layout_entry e;
        memset(&e, 0xcd, sizeof(e));
        st_layout_decide(c->role, c->type, c->ne, c->enabled, c->disabled_reason, c->alias, c->pad, &e);
        if (e.reason != c->reason || e.tensor.nb[1] != c->nb1 || e.extra_bytes != c->extra)
            print_error("%s: reason %s nb1 %zu extra %zu, expected %s %zu %zu\n", c->what,
                        st_pad_reason_name(e.reason), e.tensor.nb[1], e.extra_bytes,
                        st_pad_reason_name(c->reason), c->nb1, c->extra);
        assert_int_equal(e.reason, c->reason);
        assert_int_equal(e.padded, c->reason == ST_PAD_REASON_PADDED);
        assert_int_equal(e.tensor.nb[1], c->nb1);
        assert_int_equal(e.extra_bytes, c->extra);
        assert_int_equal(e.role, c->role);
        assert_int_equal(e.tensor.type, c->type);
        size_t row = 0;
        assert_true(st_type_row_bytes(c->type, c->ne[0], &row));
        assert_int_equal(e.packed_row_bytes, row);
        check_strides(&e, c->ne);
    }
}

/* ---- the cross product: every role x type class x row class x policy ---- */

static void test_decide_cross_product(void **state) {
    (void)state;
    static const st_tensor_role roles[] = {
        ST_ROLE_UNKNOWN, ST_ROLE_GEMM, ST_ROLE_GEMM_EXPERTS, ST_ROLE_ROUTER,
        ST_ROLE_ROW_LOOKUP, ST_ROLE_NORM, ST_ROLE_BIAS, ST_ROLE_ROPE_FACTORS};
    static const st_type types[] = {ST_TYPE_F32, ST_TYPE_F16, ST_TYPE_BF16, ST_TYPE_Q8_0,
                                    ST_TYPE_Q4_K, ST_TYPE_Q6_K, ST_TYPE_I32, ST_TYPE_F64};
    /* multiples of 256 so that every type has whole blocks; for 2-byte types these rows are
     * 2048 (aliased), 2560 (not), 4096 (aliased), 4608 (not) bytes */
    static const int64_t ks[] = {1024, 1280, 2048, 2304};
    static const st_pad_reason offs[] = {ST_PAD_REASON_POLICY_OFF, ST_PAD_REASON_KILL_SWITCH,
                                         ST_PAD_REASON_AUTO_OFF};
    int checked = 0, padded = 0;
    for (size_t r = 0; r < sizeof(roles) / sizeof(roles[0]); r++)
        for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
            for (size_t k = 0; k < sizeof(ks) / sizeof(ks[0]); k++)
                for (int en = 0; en < 4; en++) {
                    bool enabled = en == 3;
                    st_pad_reason off = enabled ? ST_PAD_REASON_POLICY_OFF : offs[en];
                    int64_t ne[4] = {ks[k], 6, roles[r] == ST_ROLE_GEMM_EXPERTS ? 3 : 1, 1};
                    st_layout_entry e;
                    st_layout_decide(roles[r], types[t], ne, enabled, off, A, P, &e);
                    const st_type_traits *tr = st_type_get_traits(types[t]);
                    size_t row = (size_t)ks[k] / (size_t)tr->block_size * tr->block_bytes;
                    bool gemm = roles[r] == ST_ROLE_GEMM || roles[r] == ST_ROLE_GEMM_EXPERTS ||
                                roles[r] == ST_ROLE_ROUTER;
                    bool is_float = types[t] == ST_TYPE_F32 || types[t] == ST_TYPE_F16 ||
                                    types[t] == ST_TYPE_BF16;
                    bool quant = types[t] == ST_TYPE_Q8_0 || types[t] == ST_TYPE_Q4_K ||
                                 types[t] == ST_TYPE_Q6_K;
                    st_pad_reason want;
                    if (roles[r] == ST_ROLE_UNKNOWN) want = ST_PAD_REASON_UNKNOWN_TENSOR;
                    else if (!gemm) want = ST_PAD_REASON_NOT_GEMM_WEIGHT;
                    else if (quant) want = ST_PAD_REASON_QUANTIZED;
                    else if (!is_float) want = ST_PAD_REASON_NOT_FLOAT;
                    else if (!enabled) want = off;
                    else if (row % A == 0) want = ST_PAD_REASON_PADDED;
                    else want = ST_PAD_REASON_ROW_NOT_ALIASED;
                    if (e.reason != want)
                        print_error("%s %s K=%lld enabled=%d: %s, expected %s\n",
                                    st_tensor_role_name(roles[r]), st_type_name(types[t]),
                                    (long long)ks[k], (int)enabled, st_pad_reason_name(e.reason),
                                    st_pad_reason_name(want));
                    assert_int_equal(e.reason, want);
                    size_t nb1 = want == ST_PAD_REASON_PADDED ? row + P : row;
                    assert_int_equal(e.tensor.nb[1], nb1);
                    assert_int_equal(e.extra_bytes, (nb1 - row) * 6 * (size_t)ne[2]);
                    check_strides(&e, ne);
                    checked++;
                    padded += e.padded;
                }
    /* 3 gemm roles x 3 float types x 2 aliased rows, enabled only */
    assert_int_equal(padded, 3 * 3 * 2);
    assert_int_equal(checked, 8 * 8 * 4 * 4);
}

/* ---- explain: one sentence per reason, with the numbers ---- */

static void explain(st_tensor_role role, st_type type, int64_t k, bool enabled, st_pad_reason off,
                    char *buf, size_t n) {
    int64_t ne[4] = {k, 4, role == ST_ROLE_GEMM_EXPERTS ? 2 : 1, 1};
    st_layout_entry e;
    st_layout_decide(role, type, ne, enabled, off, A, P, &e);
    st_layout_entry_explain(&e, A, buf, n);
}

static void test_explain(void **state) {
    (void)state;
    static const struct {
        st_tensor_role role;
        st_type type;
        int64_t k;
        bool enabled;
        st_pad_reason off;
        const char *must[3];
    } cases[] = {
        {ST_ROLE_GEMM, ST_TYPE_F16, 2048, ON,
         {"GEMM weight: row 4096 B is a multiple of the 2048 B alias period", "stride 4096 -> 4224 B", NULL}},
        {ST_ROLE_GEMM_EXPERTS, ST_TYPE_F16, 1024, ON, {"expert", "row 2048 B", "2048 -> 2176 B"}},
        {ST_ROLE_ROUTER, ST_TYPE_F32, 2048, ON, {"router", "8192 -> 8320 B", NULL}},
        {ST_ROLE_GEMM, ST_TYPE_F16, 1152, ON, {"row 2304 B is not a multiple", "remainder 256 B", "stays 2304 B"}},
        {ST_ROLE_ROW_LOOKUP, ST_TYPE_F16, 2048, ON, {"token embeddings are read by row lookup (get_rows), never padded", NULL, NULL}},
        {ST_ROLE_NORM, ST_TYPE_F32, 2048, ON, {"norm", "never padded", NULL}},
        {ST_ROLE_BIAS, ST_TYPE_F32, 2048, ON, {"bias", "never padded", NULL}},
        {ST_ROLE_ROPE_FACTORS, ST_TYPE_F32, 64, ON, {"rope factors", "never padded", NULL}},
        {ST_ROLE_UNKNOWN, ST_TYPE_F16, 2048, ON, {"not in the architecture's tensor table", "4096 B", NULL}},
        {ST_ROLE_GEMM, ST_TYPE_Q4_K, 2048, ON, {"q4_K is block-quantized", "144 B blocks", "never padded"}},
        {ST_ROLE_GEMM, ST_TYPE_Q8_0, 2048, ON, {"q8_0 is block-quantized", "34 B blocks", NULL}},
        {ST_ROLE_GEMM, ST_TYPE_I32, 2048, ON, {"i32 is not a float type", NULL, NULL}},
        {ST_ROLE_GEMM, ST_TYPE_F16, 2048, OFF(POLICY_OFF), {"off by policy", "row 4096 B is a multiple", "stays 4096 B"}},
        {ST_ROLE_GEMM, ST_TYPE_F16, 2048, OFF(KILL_SWITCH), {"kill switch", "STRIDE_NO_PAD_WEIGHTS", "stays 4096 B"}},
        {ST_ROLE_GEMM, ST_TYPE_F16, 1000, OFF(AUTO_OFF), {"`auto` resolved to off", "row 2000 B is not a multiple", "stays 2000 B"}},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char buf[256];
        explain(cases[i].role, cases[i].type, cases[i].k, cases[i].enabled, cases[i].off, buf, sizeof(buf));
        for (int j = 0; j < 3 && cases[i].must[j]; j++) {
            if (!strstr(buf, cases[i].must[j]))
                print_error("case %zu: \"%s\" lacks \"%s\"\n", i, buf, cases[i].must[j]);
            assert_non_null(strstr(buf, cases[i].must[j]));
        }
    }
    /* a short buffer is truncated, never overrun */
    char small[8];
    memset(small, 'x', sizeof(small));
    explain(ST_ROLE_GEMM, ST_TYPE_F16, 2048, ON, small, 5);
    assert_int_equal(strlen(small), 4);
    assert_int_equal(small[5], 'x');
}

static void test_reason_names(void **state) {
    (void)state;
    static const char *const names[ST_PAD_REASON_COUNT] = {
        "padded", "row-not-aliased", "not-gemm-weight", "unknown-tensor", "quantized",
        "not-float", "policy-off", "kill-switch", "auto-off"};
    for (int r = 0; r < ST_PAD_REASON_COUNT; r++)
        assert_string_equal(st_pad_reason_name((st_pad_reason)r), names[r]);
    assert_string_equal(st_pad_reason_name(ST_PAD_REASON_COUNT), "unknown");
}

/* ---- st_layout_plan_gguf on small files ---- */

typedef struct tspec {
    const char *name;
    st_type type;
    uint32_t n_dims;
    int64_t ne[4];
} tspec;

/* Writes a GGUF with general.architecture = arch (NULL: absent; "#u32": a u32 value) and
 * zero-filled tensors. */
static void write_gguf(const char *path, const char *arch, const tspec *t, size_t n) {
    st_error err = {0};
    st_gguf_writer *w = NULL;
    assert_int_equal(st_gguf_writer_open(path, &w, &err), ST_OK);
    if (arch && strcmp(arch, "#u32") == 0)
        assert_int_equal(st_gguf_writer_set_u32(w, "general.architecture", 3, &err), ST_OK);
    else if (arch)
        assert_int_equal(st_gguf_writer_set_str(w, "general.architecture", arch, &err), ST_OK);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(st_gguf_writer_add_tensor(w, t[i].name, t[i].type, t[i].n_dims, t[i].ne, &err), ST_OK);
        size_t row;
        assert_true(st_type_row_bytes(t[i].type, t[i].ne[0], &row));
        size_t rows = 1;
        for (uint32_t d = 1; d < t[i].n_dims; d++) rows *= (size_t)t[i].ne[d];
        total += row * rows;
    }
    assert_int_equal(st_gguf_writer_write_header(w, &err), ST_OK);
    static const uint8_t zero[65536];
    while (total > 0) {
        size_t c = total < sizeof(zero) ? total : sizeof(zero);
        assert_int_equal(st_gguf_writer_write_data(w, zero, c, &err), ST_OK);
        total -= c;
    }
    if (st_gguf_writer_close(w, &err) != ST_OK) print_error("%s\n", err.message);
    assert_int_equal(err.status, ST_OK);
}

static void temp_path(char *buf, size_t n, const char *tag) {
    snprintf(buf, n, "/tmp/stride_test_layout_%d_%s.gguf", (int)getpid(), tag);
}

static const st_layout_entry *find_entry(const st_layout_plan *p, const char *name) {
    for (uint64_t i = 0; i < p->n_entries; i++)
        if (p->entries[i].name_len == strlen(name) && memcmp(p->entries[i].name, name, p->entries[i].name_len) == 0)
            return &p->entries[i];
    fail_msg("no entry %s", name);
    return NULL;
}

typedef struct expect {
    const char *name;
    st_tensor_role role;
    st_pad_reason reason;
    size_t nb1;
} expect;

/* A qwen3-1.7b-like layer: n_embd 2048, 16 q heads and 8 kv heads of 128, n_ff 6144 (the
 * row counts are cut down; the row widths are real). Tied output: no output.weight. */
static tspec qwen3_tensors[] = {
    {"token_embd.weight", ST_TYPE_F16, 2, {2048, 16, 1, 1}},
    {"output_norm.weight", ST_TYPE_F32, 1, {2048, 1, 1, 1}},
    {"blk.0.attn_norm.weight", ST_TYPE_F32, 1, {2048, 1, 1, 1}},
    {"blk.0.attn_q.weight", ST_TYPE_F16, 2, {2048, 8, 1, 1}},
    {"blk.0.attn_k.weight", ST_TYPE_F16, 2, {2048, 4, 1, 1}},
    {"blk.0.attn_v.weight", ST_TYPE_F16, 2, {2048, 4, 1, 1}},
    {"blk.0.attn_output.weight", ST_TYPE_F16, 2, {2048, 8, 1, 1}},
    {"blk.0.attn_q_norm.weight", ST_TYPE_F32, 1, {128, 1, 1, 1}},
    {"blk.0.attn_k_norm.weight", ST_TYPE_F32, 1, {128, 1, 1, 1}},
    {"blk.0.ffn_norm.weight", ST_TYPE_F32, 1, {2048, 1, 1, 1}},
    {"blk.0.ffn_gate.weight", ST_TYPE_F16, 2, {2048, 12, 1, 1}},
    {"blk.0.ffn_up.weight", ST_TYPE_F16, 2, {2048, 12, 1, 1}},
    {"blk.0.ffn_down.weight", ST_TYPE_F16, 2, {6144, 8, 1, 1}},
    /* a GEMM name with the wrong rank: never treated as a GEMM weight */
    {"blk.1.attn_q.weight", ST_TYPE_F16, 1, {2048, 1, 1, 1}},
    /* not in qwen3's table */
    {"blk.0.attn_qkv.weight", ST_TYPE_F16, 2, {2048, 4, 1, 1}},
};
#define QWEN3_N (sizeof(qwen3_tensors) / sizeof(qwen3_tensors[0]))
/* q 8 + k 4 + v 4 + o 8 + gate 12 + up 12 + down 8 rows, 128 B each */
#define QWEN3_EXTRA (56u * 128u)

/* The environment of one plan: up to two variables, injected through getenv_fn. */
typedef struct env_vars {
    const char *name, *value, *name2, *value2;
} env_vars;

static const char *env_vars_getenv(const char *name, void *ctx) {
    const env_vars *v = ctx;
    if (v->name && strcmp(v->name, name) == 0) return v->value;
    if (v->name2 && strcmp(v->name2, name) == 0) return v->value2;
    return NULL;
}

/* Plans path under --pad-weights `flag` (NULL: not given) and one environment variable.
 * Returns the open file: the plan's names point into it. */
static st_gguf_file *plan_file(const char *path, const char *flag, env_vars env, st_device_kind dev,
                               st_layout_plan *plan) {
    st_layout_policy pol;
    st_error err = {0};
    assert_int_equal(st_layout_policy_resolve(&pol, flag, env_vars_getenv, &env, &err), ST_OK);
    st_gguf_file *f = NULL;
    if (st_gguf_open(path, &f, &err) != ST_OK) fail_msg("%s", err.message);
    if (st_layout_plan_gguf(f, &pol, dev, plan, &err) != ST_OK) fail_msg("%s", err.message);
    return f;
}

static void check_expect(const st_layout_plan *p, const expect *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const st_layout_entry *e = find_entry(p, x[i].name);
        if (e->role != x[i].role || e->reason != x[i].reason || e->tensor.nb[1] != x[i].nb1)
            print_error("%s: %s %s nb1 %zu, expected %s %s %zu\n", x[i].name,
                        st_tensor_role_name(e->role), st_pad_reason_name(e->reason), e->tensor.nb[1],
                        st_tensor_role_name(x[i].role), st_pad_reason_name(x[i].reason), x[i].nb1);
        assert_int_equal(e->role, x[i].role);
        assert_int_equal(e->reason, x[i].reason);
        assert_int_equal(e->tensor.nb[1], x[i].nb1);
        assert_int_equal(e->padded, x[i].reason == ST_PAD_REASON_PADDED);
    }
}

/* The plan's totals agree with its entries, and every entry keeps the invariants. */
static void check_totals(const st_layout_plan *p, uint64_t n_padded, size_t extra) {
    size_t packed = 0, planned = 0, sum_extra = 0;
    uint64_t np = 0;
    for (uint64_t i = 0; i < p->n_entries; i++) {
        const st_layout_entry *e = &p->entries[i];
        size_t row = e->packed_row_bytes;
        size_t rows = (size_t)(e->tensor.ne[1] * e->tensor.ne[2] * e->tensor.ne[3]);
        packed += row * rows;
        planned += st_tensor_nbytes(&e->tensor);
        sum_extra += e->extra_bytes;
        np += e->padded;
        check_strides(e, e->tensor.ne);
    }
    assert_int_equal(p->n_padded, n_padded);
    assert_int_equal(np, n_padded);
    assert_int_equal(p->total_extra_bytes, extra);
    assert_int_equal(sum_extra, extra);
    assert_int_equal(p->total_packed_bytes, packed);
    assert_int_equal(p->total_planned_bytes, planned);
    assert_int_equal(planned - packed, extra);
}

#define NO_ENV ((env_vars){NULL, NULL, NULL, NULL})

static void test_plan_qwen3_f16(void **state) {
    (void)state;
    char path[256];
    temp_path(path, sizeof(path), "qwen3_f16");
    write_gguf(path, "qwen3", qwen3_tensors, QWEN3_N);
    static const expect want[] = {
        {"token_embd.weight", ST_ROLE_ROW_LOOKUP, ST_PAD_REASON_NOT_GEMM_WEIGHT, 4096},
        {"output_norm.weight", ST_ROLE_NORM, ST_PAD_REASON_NOT_GEMM_WEIGHT, 8192},
        {"blk.0.attn_norm.weight", ST_ROLE_NORM, ST_PAD_REASON_NOT_GEMM_WEIGHT, 8192},
        {"blk.0.attn_q.weight", ST_ROLE_GEMM, ST_PAD_REASON_PADDED, 4224},
        {"blk.0.attn_k.weight", ST_ROLE_GEMM, ST_PAD_REASON_PADDED, 4224},
        {"blk.0.attn_v.weight", ST_ROLE_GEMM, ST_PAD_REASON_PADDED, 4224},
        {"blk.0.attn_output.weight", ST_ROLE_GEMM, ST_PAD_REASON_PADDED, 4224},
        {"blk.0.attn_q_norm.weight", ST_ROLE_NORM, ST_PAD_REASON_NOT_GEMM_WEIGHT, 512},
        {"blk.0.attn_k_norm.weight", ST_ROLE_NORM, ST_PAD_REASON_NOT_GEMM_WEIGHT, 512},
        {"blk.0.ffn_norm.weight", ST_ROLE_NORM, ST_PAD_REASON_NOT_GEMM_WEIGHT, 8192},
        {"blk.0.ffn_gate.weight", ST_ROLE_GEMM, ST_PAD_REASON_PADDED, 4224},
        {"blk.0.ffn_up.weight", ST_ROLE_GEMM, ST_PAD_REASON_PADDED, 4224},
        {"blk.0.ffn_down.weight", ST_ROLE_GEMM, ST_PAD_REASON_PADDED, 12416},
        {"blk.1.attn_q.weight", ST_ROLE_UNKNOWN, ST_PAD_REASON_UNKNOWN_TENSOR, 4096},
        {"blk.0.attn_qkv.weight", ST_ROLE_UNKNOWN, ST_PAD_REASON_UNKNOWN_TENSOR, 4096},
    };
    /* --pad-weights on; also auto on the device whose table entry is on */
    static const struct {
        const char *flag;
        st_device_kind dev;
    } on_cases[] = {{"on", ST_DEVICE_KIND_CPU}, {"on", ST_DEVICE_KIND_NVIDIA_HOPPER},
                    {NULL, ST_DEVICE_KIND_AMD_RDNA35}, {"auto", ST_DEVICE_KIND_AMD_RDNA35}};
    for (size_t c = 0; c < sizeof(on_cases) / sizeof(on_cases[0]); c++) {
        st_layout_plan plan;
        st_gguf_file *f = plan_file(path, on_cases[c].flag, NO_ENV, on_cases[c].dev, &plan);
        assert_int_equal(plan.arch, ST_ARCH_QWEN3);
        assert_int_equal(plan.device, on_cases[c].dev);
        assert_true(plan.pad_enabled);
        assert_non_null(plan.pad_enabled_why);
        assert_int_equal(plan.alias, 2048);
        assert_int_equal(plan.pad, 128);
        assert_int_equal(plan.n_entries, QWEN3_N);
        /* entries are in file order */
        for (size_t i = 0; i < QWEN3_N; i++)
            assert_memory_equal(plan.entries[i].name, qwen3_tensors[i].name, strlen(qwen3_tensors[i].name));
        check_expect(&plan, want, sizeof(want) / sizeof(want[0]));
        check_totals(&plan, 7, QWEN3_EXTRA);
        st_layout_plan_free(&plan);
        assert_null(plan.entries);
        st_gguf_close(f);
    }
    unlink(path);
}

/* Every way padding ends up off, and the reason recorded on the GEMM weights. */
static void test_plan_qwen3_disabled(void **state) {
    (void)state;
    char path[256];
    temp_path(path, sizeof(path), "qwen3_off");
    write_gguf(path, "qwen3", qwen3_tensors, QWEN3_N);
    const char *cpu_why = NULL;
    bool cpu_on = st_layout_auto_builtin(ST_DEVICE_KIND_CPU, &cpu_why);
    static const struct {
        const char *flag;
        env_vars env;
        st_device_kind dev;
        st_pad_reason reason;
        const char *why; /* must appear in plan.pad_enabled_why */
    } cases[] = {
        {"off", {NULL, NULL, NULL, NULL}, ST_DEVICE_KIND_AMD_RDNA35, ST_PAD_REASON_POLICY_OFF, "--pad-weights off"},
        {NULL, {"STRIDE_PAD_WEIGHTS", "off", NULL, NULL}, ST_DEVICE_KIND_AMD_RDNA35, ST_PAD_REASON_POLICY_OFF, "STRIDE_PAD_WEIGHTS=off"},
        {"on", {"STRIDE_NO_PAD_WEIGHTS", "1", NULL, NULL}, ST_DEVICE_KIND_AMD_RDNA35, ST_PAD_REASON_KILL_SWITCH, "STRIDE_NO_PAD_WEIGHTS"},
        {"on", {"GGML_CUDA_NO_PAD_WEIGHTS", "1", NULL, NULL}, ST_DEVICE_KIND_CPU, ST_PAD_REASON_KILL_SWITCH, "GGML_CUDA_NO_PAD_WEIGHTS"},
        {NULL, {NULL, NULL, NULL, NULL}, ST_DEVICE_KIND_NVIDIA_HOPPER, ST_PAD_REASON_AUTO_OFF, "H200"},
        {"auto", {NULL, NULL, NULL, NULL}, ST_DEVICE_KIND_AMD_OTHER, ST_PAD_REASON_AUTO_OFF, "amd-other"},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        st_layout_plan plan;
        st_gguf_file *f = plan_file(path, cases[c].flag, cases[c].env, cases[c].dev, &plan);
        assert_false(plan.pad_enabled);
        assert_non_null(strstr(plan.pad_enabled_why, cases[c].why));
        check_totals(&plan, 0, 0);
        const st_layout_entry *q = find_entry(&plan, "blk.0.attn_q.weight");
        assert_int_equal(q->reason, cases[c].reason);
        assert_int_equal(q->tensor.nb[1], 4096);
        assert_int_equal(find_entry(&plan, "token_embd.weight")->reason, ST_PAD_REASON_NOT_GEMM_WEIGHT);
        st_layout_plan_free(&plan);
        st_gguf_close(f);
    }
    /* auto on the CPU follows the built-in table entry */
    st_layout_plan plan;
    st_gguf_file *f = plan_file(path, NULL, NO_ENV, ST_DEVICE_KIND_CPU, &plan);
    assert_int_equal(plan.pad_enabled, cpu_on);
    assert_string_equal(plan.pad_enabled_why, cpu_why);
    check_totals(&plan, cpu_on ? 7 : 0, cpu_on ? QWEN3_EXTRA : 0);
    st_layout_plan_free(&plan);
    st_gguf_close(f);
    unlink(path);
}

/* The same model quantized: nothing is padded, whatever the policy. */
static void test_plan_qwen3_q8_0(void **state) {
    (void)state;
    tspec t[QWEN3_N];
    memcpy(t, qwen3_tensors, sizeof(t));
    for (size_t i = 0; i < QWEN3_N; i++)
        if (t[i].type == ST_TYPE_F16) t[i].type = ST_TYPE_Q8_0;
    char path[256];
    temp_path(path, sizeof(path), "qwen3_q8_0");
    write_gguf(path, "qwen3", t, QWEN3_N);
    st_layout_plan plan;
    st_gguf_file *f = plan_file(path, "on", NO_ENV, ST_DEVICE_KIND_AMD_RDNA35, &plan);
    assert_true(plan.pad_enabled);
    static const expect want[] = {
        {"token_embd.weight", ST_ROLE_ROW_LOOKUP, ST_PAD_REASON_NOT_GEMM_WEIGHT, 2176},
        {"blk.0.attn_q.weight", ST_ROLE_GEMM, ST_PAD_REASON_QUANTIZED, 2176},
        {"blk.0.attn_output.weight", ST_ROLE_GEMM, ST_PAD_REASON_QUANTIZED, 2176},
        {"blk.0.ffn_down.weight", ST_ROLE_GEMM, ST_PAD_REASON_QUANTIZED, 6528},
        {"blk.0.ffn_norm.weight", ST_ROLE_NORM, ST_PAD_REASON_NOT_GEMM_WEIGHT, 8192},
    };
    check_expect(&plan, want, sizeof(want) / sizeof(want[0]));
    check_totals(&plan, 0, 0);
    st_layout_plan_free(&plan);
    st_gguf_close(f);
    unlink(path);
}

/* OLMoE-like: 3D experts {K, N, E} padded per row with experts packed one after another,
 * an F32 router padded by the same rule, an untied output padded. */
static void test_plan_olmoe_experts(void **state) {
    (void)state;
    static const tspec t[] = {
        {"token_embd.weight", ST_TYPE_F16, 2, {2048, 16, 1, 1}},
        {"output.weight", ST_TYPE_F16, 2, {2048, 16, 1, 1}},
        {"output_norm.weight", ST_TYPE_F32, 1, {2048, 1, 1, 1}},
        {"blk.0.attn_q.weight", ST_TYPE_F16, 2, {2048, 8, 1, 1}},
        {"blk.0.attn_q_norm.weight", ST_TYPE_F32, 1, {2048, 1, 1, 1}},
        {"blk.0.ffn_gate_inp.weight", ST_TYPE_F32, 2, {2048, 8, 1, 1}},
        {"blk.0.ffn_gate_exps.weight", ST_TYPE_F16, 3, {2048, 4, 8, 1}},
        {"blk.0.ffn_up_exps.weight", ST_TYPE_F16, 3, {2048, 4, 8, 1}},
        {"blk.0.ffn_down_exps.weight", ST_TYPE_F16, 3, {1024, 8, 8, 1}},
        /* an expert name with the wrong rank */
        {"blk.1.ffn_up_exps.weight", ST_TYPE_F16, 2, {2048, 4, 1, 1}},
        /* dense FFN names are not olmoe's */
        {"blk.0.ffn_up.weight", ST_TYPE_F16, 2, {2048, 4, 1, 1}},
    };
    char path[256];
    temp_path(path, sizeof(path), "olmoe");
    write_gguf(path, "olmoe", t, sizeof(t) / sizeof(t[0]));
    st_layout_plan plan;
    st_gguf_file *f = plan_file(path, "on", NO_ENV, ST_DEVICE_KIND_CPU, &plan);
    assert_int_equal(plan.arch, ST_ARCH_OLMOE);
    static const expect want[] = {
        {"token_embd.weight", ST_ROLE_ROW_LOOKUP, ST_PAD_REASON_NOT_GEMM_WEIGHT, 4096},
        {"output.weight", ST_ROLE_GEMM, ST_PAD_REASON_PADDED, 4224},
        {"blk.0.attn_q.weight", ST_ROLE_GEMM, ST_PAD_REASON_PADDED, 4224},
        {"blk.0.attn_q_norm.weight", ST_ROLE_NORM, ST_PAD_REASON_NOT_GEMM_WEIGHT, 8192},
        {"blk.0.ffn_gate_inp.weight", ST_ROLE_ROUTER, ST_PAD_REASON_PADDED, 8320},
        {"blk.0.ffn_gate_exps.weight", ST_ROLE_GEMM_EXPERTS, ST_PAD_REASON_PADDED, 4224},
        {"blk.0.ffn_up_exps.weight", ST_ROLE_GEMM_EXPERTS, ST_PAD_REASON_PADDED, 4224},
        {"blk.0.ffn_down_exps.weight", ST_ROLE_GEMM_EXPERTS, ST_PAD_REASON_PADDED, 2176},
        {"blk.1.ffn_up_exps.weight", ST_ROLE_UNKNOWN, ST_PAD_REASON_UNKNOWN_TENSOR, 4096},
        {"blk.0.ffn_up.weight", ST_ROLE_UNKNOWN, ST_PAD_REASON_UNKNOWN_TENSOR, 4096},
    };
    check_expect(&plan, want, sizeof(want) / sizeof(want[0]));
    const st_layout_entry *g = find_entry(&plan, "blk.0.ffn_gate_exps.weight");
    assert_int_equal(g->tensor.nb[2], 4224 * 4);     /* one expert: N padded rows */
    assert_int_equal(g->tensor.nb[3], 4224 * 4 * 8); /* E experts back to back */
    assert_int_equal(g->extra_bytes, 128 * 4 * 8);
    const st_layout_entry *d = find_entry(&plan, "blk.0.ffn_down_exps.weight");
    assert_int_equal(d->tensor.nb[2], 2176 * 8);
    /* output 16 + q 8 + router 8 + gate 32 + up 32 + down 64 rows, 128 B each */
    check_totals(&plan, 6, (16 + 8 + 8 + 32 + 32 + 64) * 128);
    st_layout_plan_free(&plan);
    st_gguf_close(f);
    unlink(path);
}

/* No table (unknown or missing architecture): every tensor unknown and packed. A
 * general.architecture of the wrong type is a format error. */
static void test_plan_unknown_arch(void **state) {
    (void)state;
    static const tspec t[] = {
        {"token_embd.weight", ST_TYPE_F16, 2, {2048, 4, 1, 1}},
        {"blk.0.attn_q.weight", ST_TYPE_F16, 2, {2048, 4, 1, 1}},
    };
    static const char *const archs[] = {"mamba", "llama2", "", NULL};
    for (size_t a = 0; a < sizeof(archs) / sizeof(archs[0]); a++) {
        char path[256];
        temp_path(path, sizeof(path), "unknown_arch");
        write_gguf(path, archs[a], t, 2);
        st_layout_plan plan;
        st_gguf_file *f = plan_file(path, "on", NO_ENV, ST_DEVICE_KIND_AMD_RDNA35, &plan);
        assert_int_equal(plan.arch, ST_ARCH_UNKNOWN);
        assert_true(plan.pad_enabled);
        for (uint64_t i = 0; i < plan.n_entries; i++) {
            assert_int_equal(plan.entries[i].role, ST_ROLE_UNKNOWN);
            assert_int_equal(plan.entries[i].reason, ST_PAD_REASON_UNKNOWN_TENSOR);
        }
        check_totals(&plan, 0, 0);
        st_layout_plan_free(&plan);
        st_gguf_close(f);
        unlink(path);
    }
    char path[256];
    temp_path(path, sizeof(path), "arch_u32");
    write_gguf(path, "#u32", t, 2);
    st_gguf_file *f = NULL;
    st_error err = {0};
    assert_int_equal(st_gguf_open(path, &f, &err), ST_OK);
    st_layout_policy pol = {ST_PAD_MODE_ON, "--pad-weights", false, NULL, 2048, 128};
    st_layout_plan plan;
    assert_int_equal(st_layout_plan_gguf(f, &pol, ST_DEVICE_KIND_CPU, &plan, &err), ST_ERROR_FORMAT);
    assert_non_null(strstr(err.message, "general.architecture"));
    assert_non_null(strstr(err.message, "uint32"));
    assert_null(plan.entries);
    st_layout_plan_free(&plan);
    st_gguf_close(f);
    unlink(path);
}

/* A custom geometry from the policy reaches every entry. */
static void test_plan_custom_geometry(void **state) {
    (void)state;
    char path[256];
    temp_path(path, sizeof(path), "geometry");
    write_gguf(path, "qwen3", qwen3_tensors, QWEN3_N);
    env_vars env = {"STRIDE_ROW_ALIAS", "4096", "STRIDE_ROW_PAD", "64"};
    st_layout_plan plan;
    st_gguf_file *f = plan_file(path, "on", env, ST_DEVICE_KIND_CPU, &plan);
    assert_int_equal(plan.alias, 4096);
    assert_int_equal(plan.pad, 64);
    static const expect want[] = {
        {"blk.0.attn_q.weight", ST_ROLE_GEMM, ST_PAD_REASON_PADDED, 4160},
        {"blk.0.ffn_down.weight", ST_ROLE_GEMM, ST_PAD_REASON_PADDED, 12352},
        {"token_embd.weight", ST_ROLE_ROW_LOOKUP, ST_PAD_REASON_NOT_GEMM_WEIGHT, 4096},
    };
    check_expect(&plan, want, sizeof(want) / sizeof(want[0]));
    check_totals(&plan, 7, 56 * 64);
    st_layout_plan_free(&plan);
    st_gguf_close(f);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decide_cases),
        cmocka_unit_test(test_decide_cross_product),
        cmocka_unit_test(test_explain),
        cmocka_unit_test(test_reason_names),
        cmocka_unit_test(test_plan_qwen3_f16),
        cmocka_unit_test(test_plan_qwen3_disabled),
        cmocka_unit_test(test_plan_qwen3_q8_0),
        cmocka_unit_test(test_plan_olmoe_experts),
        cmocka_unit_test(test_plan_unknown_arch),
        cmocka_unit_test(test_plan_custom_geometry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
