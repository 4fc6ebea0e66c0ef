/*
 * Padding policy: --pad-weights, STRIDE_PAD_WEIGHTS, the kill switches, the geometry
 * variables, their precedence and every kind of invalid value; the device-kind names and
 * the built-in `auto` table; per-shape `auto` decisions handed to the planner (and that
 * the kill switch, on and off win over them). The environment is injected through
 * st_getenv_fn from a small table per case, never through setenv().
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "stride/layout.h"
#include "stride/synth.h"

#include <unistd.h>

#define MAX_VARS 4

typedef struct env_table {
    const char *kv[MAX_VARS][2]; /* {name, value}; unused slots are {NULL, NULL} */
} env_table;

static const char *table_getenv(const char *name, void *ctx) {
    const env_table *t = ctx;
    for (int i = 0; i < MAX_VARS && t->kv[i][0]; i++)
        if (strcmp(t->kv[i][0], name) == 0) return t->kv[i][1];
    return NULL;
}

#define PW "STRIDE_PAD_WEIGHTS"
#define KS "STRIDE_NO_PAD_WEIGHTS"
#define KG "GGML_CUDA_NO_PAD_WEIGHTS"
#define RA "STRIDE_ROW_ALIAS"
#define RP "STRIDE_ROW_PAD"

typedef struct ok_case {
    const char *flag;
    env_table env;
    st_pad_mode mode;
    const char *source;
    const char *kill_var; /* NULL: kill switch not set */
    size_t alias, pad;
} ok_case;

static const ok_case ok_cases[] = {
    /* defaults */
    {NULL, {{{0}}}, ST_PAD_MODE_AUTO, "default", NULL, 2048, 128},
    /* STRIDE_PAD_WEIGHTS alone */
    {NULL, {{{PW, "on"}}}, ST_PAD_MODE_ON, PW, NULL, 2048, 128},
    {NULL, {{{PW, "off"}}}, ST_PAD_MODE_OFF, PW, NULL, 2048, 128},
    {NULL, {{{PW, "auto"}}}, ST_PAD_MODE_AUTO, PW, NULL, 2048, 128},
    /* the flag alone */
    {"on", {{{0}}}, ST_PAD_MODE_ON, "--pad-weights", NULL, 2048, 128},
    {"off", {{{0}}}, ST_PAD_MODE_OFF, "--pad-weights", NULL, 2048, 128},
    {"auto", {{{0}}}, ST_PAD_MODE_AUTO, "--pad-weights", NULL, 2048, 128},
    /* the flag beats STRIDE_PAD_WEIGHTS, in both directions */
    {"off", {{{PW, "on"}}}, ST_PAD_MODE_OFF, "--pad-weights", NULL, 2048, 128},
    {"on", {{{PW, "off"}}}, ST_PAD_MODE_ON, "--pad-weights", NULL, 2048, 128},
    {"auto", {{{PW, "off"}}}, ST_PAD_MODE_AUTO, "--pad-weights", NULL, 2048, 128},
    /* kill switches: every accepted "set" spelling, recorded with the variable */
    {NULL, {{{KS, "1"}}}, ST_PAD_MODE_AUTO, "default", KS, 2048, 128},
    {NULL, {{{KS, "true"}}}, ST_PAD_MODE_AUTO, "default", KS, 2048, 128},
    {NULL, {{{KS, "yes"}}}, ST_PAD_MODE_AUTO, "default", KS, 2048, 128},
    {NULL, {{{KS, "on"}}}, ST_PAD_MODE_AUTO, "default", KS, 2048, 128},
    {NULL, {{{KG, "1"}}}, ST_PAD_MODE_AUTO, "default", KG, 2048, 128},
    {NULL, {{{KG, "yes"}}}, ST_PAD_MODE_AUTO, "default", KG, 2048, 128},
    /* the kill switch is kept over --pad-weights on (the plan then forces off) */
    {"on", {{{KS, "1"}}}, ST_PAD_MODE_ON, "--pad-weights", KS, 2048, 128},
    {"on", {{{KG, "1"}, {PW, "on"}}}, ST_PAD_MODE_ON, "--pad-weights", KG, 2048, 128},
    /* both set: the stride name is recorded */
    {NULL, {{{KG, "1"}, {KS, "1"}}}, ST_PAD_MODE_AUTO, "default", KS, 2048, 128},
    /* one set, the other explicitly unset */
    {NULL, {{{KS, "0"}, {KG, "1"}}}, ST_PAD_MODE_AUTO, "default", KG, 2048, 128},
    /* every accepted "unset" spelling */
    {"on", {{{KS, "0"}}}, ST_PAD_MODE_ON, "--pad-weights", NULL, 2048, 128},
    {"on", {{{KS, "false"}}}, ST_PAD_MODE_ON, "--pad-weights", NULL, 2048, 128},
    {"on", {{{KS, "no"}}}, ST_PAD_MODE_ON, "--pad-weights", NULL, 2048, 128},
    {"on", {{{KS, "off"}}}, ST_PAD_MODE_ON, "--pad-weights", NULL, 2048, 128},
    {"on", {{{KS, ""}}}, ST_PAD_MODE_ON, "--pad-weights", NULL, 2048, 128},
    {"on", {{{KG, "0"}}}, ST_PAD_MODE_ON, "--pad-weights", NULL, 2048, 128},
    /* geometry: both ends of each accepted range */
    {NULL, {{{RA, "4096"}}}, ST_PAD_MODE_AUTO, "default", NULL, 4096, 128},
    {NULL, {{{RA, "256"}}}, ST_PAD_MODE_AUTO, "default", NULL, 256, 128},
    {NULL, {{{RA, "1048576"}}}, ST_PAD_MODE_AUTO, "default", NULL, 1048576, 128},
    {NULL, {{{RA, "32"}, {RP, "16"}}}, ST_PAD_MODE_AUTO, "default", NULL, 32, 16},
    {NULL, {{{RP, "16"}}}, ST_PAD_MODE_AUTO, "default", NULL, 2048, 16},
    {NULL, {{{RP, "64"}}}, ST_PAD_MODE_AUTO, "default", NULL, 2048, 64},
    {NULL, {{{RP, "2032"}}}, ST_PAD_MODE_AUTO, "default", NULL, 2048, 2032},
    {NULL, {{{RA, "4096"}, {RP, "2048"}}}, ST_PAD_MODE_AUTO, "default", NULL, 4096, 2048},
};

static void test_resolve_valid(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(ok_cases) / sizeof(ok_cases[0]); i++) {
        const ok_case *c = &ok_cases[i];
        st_layout_policy p;
        st_error err = {0};
        st_status s = st_layout_policy_resolve(&p, c->flag, table_getenv, (void *)&c->env, &err);
        if (s != ST_OK) print_error("case %zu: %s\n", i, err.message);
        assert_int_equal(s, ST_OK);
        assert_int_equal(p.mode, c->mode);
        assert_string_equal(p.mode_source, c->source);
        assert_int_equal(p.kill_switch, c->kill_var != NULL);
        if (c->kill_var) assert_string_equal(p.kill_switch_var, c->kill_var);
        else assert_null(p.kill_switch_var);
        assert_int_equal(p.alias, c->alias);
        assert_int_equal(p.pad, c->pad);
    }
}

typedef struct bad_case {
    const char *flag;
    env_table env;
    const char *what;  /* must appear in the message */
    const char *value; /* must appear quoted in the message */
} bad_case;

static const bad_case bad_cases[] = {
    /* --pad-weights */
    {"ON", {{{0}}}, "--pad-weights", "ON"},
    {"yes", {{{0}}}, "--pad-weights", "yes"},
    {"", {{{0}}}, "--pad-weights", ""},
    {" on", {{{0}}}, "--pad-weights", " on"},
    {"onn", {{{0}}}, "--pad-weights", "onn"},
    {"1", {{{PW, "on"}}}, "--pad-weights", "1"},
    /* STRIDE_PAD_WEIGHTS: invalid also when the flag overrides it */
    {NULL, {{{PW, "1"}}}, PW, "1"},
    {NULL, {{{PW, "enabled"}}}, PW, "enabled"},
    {NULL, {{{PW, ""}}}, PW, ""},
    {NULL, {{{PW, "Off"}}}, PW, "Off"},
    {"on", {{{PW, "of"}}}, PW, "of"},
    /* kill switches */
    {NULL, {{{KS, "2"}}}, KS, "2"},
    {NULL, {{{KS, "maybe"}}}, KS, "maybe"},
    {NULL, {{{KS, "TRUE"}}}, KS, "TRUE"},
    {NULL, {{{KS, " 1"}}}, KS, " 1"},
    {"off", {{{KG, "-1"}}}, KG, "-1"},
    {NULL, {{{KS, "1"}, {KG, "nope"}}}, KG, "nope"},
    /* STRIDE_ROW_ALIAS: syntax */
    {NULL, {{{RA, "2048x"}}}, RA, "2048x"},
    {NULL, {{{RA, ""}}}, RA, ""},
    {NULL, {{{RA, "-16"}}}, RA, "-16"},
    {NULL, {{{RA, "+2048"}}}, RA, "+2048"},
    {NULL, {{{RA, "0x800"}}}, RA, "0x800"},
    {NULL, {{{RA, " 2048"}}}, RA, " 2048"},
    {NULL, {{{RA, "2048 "}}}, RA, "2048 "},
    {NULL, {{{RA, "02048"}}}, RA, "02048"},
    {NULL, {{{RA, "2k"}}}, RA, "2k"},
    {NULL, {{{RA, "2048.0"}}}, RA, "2048.0"},
    {NULL, {{{RA, "1e3"}}}, RA, "1e3"},
    {NULL, {{{RA, "36893488147419103232"}}}, RA, "36893488147419103232"}, /* 2^65 */
    /* STRIDE_ROW_ALIAS: range and power of two */
    {NULL, {{{RA, "0"}}}, RA, "0"},
    {NULL, {{{RA, "8"}, {RP, "16"}}}, RA, "8"},
    {NULL, {{{RA, "3000"}}}, RA, "3000"},
    {NULL, {{{RA, "2049"}}}, RA, "2049"},
    {NULL, {{{RA, "2097152"}}}, RA, "2097152"},
    /* an alias at or below the default pad needs STRIDE_ROW_PAD */
    {NULL, {{{RA, "128"}}}, RA, "128"},
    {NULL, {{{RA, "16"}}}, RA, "16"},
    /* STRIDE_ROW_PAD */
    {NULL, {{{RP, "0"}}}, RP, "0"},
    {NULL, {{{RP, "8"}}}, RP, "8"},
    {NULL, {{{RP, "24"}}}, RP, "24"},
    {NULL, {{{RP, "2048"}}}, RP, "2048"},
    {NULL, {{{RP, "4096"}}}, RP, "4096"},
    {NULL, {{{RP, "-16"}}}, RP, "-16"},
    {NULL, {{{RP, ""}}}, RP, ""},
    {NULL, {{{RP, "128B"}}}, RP, "128B"},
    {NULL, {{{RP, "0x80"}}}, RP, "0x80"},
    {NULL, {{{RA, "16"}, {RP, "0"}}}, RP, "0"},
    {NULL, {{{RA, "16"}, {RP, "16"}}}, RP, "16"},
    {NULL, {{{RA, "256"}, {RP, "256"}}}, RP, "256"},
};

static void test_resolve_invalid(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        const bad_case *c = &bad_cases[i];
        st_layout_policy p;
        memset(&p, 0xab, sizeof(p));
        st_layout_policy before = p;
        st_error err = {0};
        st_status s = st_layout_policy_resolve(&p, c->flag, table_getenv, (void *)&c->env, &err);
        char quoted[128];
        snprintf(quoted, sizeof(quoted), "\"%s\"", c->value);
        bool ok = s == ST_ERROR_INVALID && err.status == ST_ERROR_INVALID &&
                  strstr(err.message, c->what) && strstr(err.message, quoted) &&
                  strstr(err.message, "accepted");
        if (!ok)
            print_error("case %zu (%s=%s): status %d, message \"%s\"\n", i, c->what, c->value,
                        (int)s, err.message);
        assert_true(ok);
        /* nothing half-resolved is handed back */
        assert_memory_equal(&p, &before, sizeof(p));
    }
}

/* Only the documented variable names are policy. */
static void test_resolve_ignores_other_variables(void **state) {
    (void)state;
    env_table env = {{{"STRIDE_PAD", "on"}, {"PAD_WEIGHTS", "off"}, {"stride_pad_weights", "bogus"}}};
    st_layout_policy p;
    st_error err = {0};
    assert_int_equal(st_layout_policy_resolve(&p, NULL, table_getenv, &env, &err), ST_OK);
    assert_int_equal(p.mode, ST_PAD_MODE_AUTO);
    assert_false(p.kill_switch);
}

static void test_pad_mode_parse_and_name(void **state) {
    (void)state;
    static const struct {
        const char *s;
        st_pad_mode mode;
    } ok[] = {{"on", ST_PAD_MODE_ON}, {"off", ST_PAD_MODE_OFF}, {"auto", ST_PAD_MODE_AUTO}};
    for (size_t i = 0; i < 3; i++) {
        st_pad_mode m = (st_pad_mode)-1;
        assert_int_equal(st_pad_mode_parse(ok[i].s, "--pad-weights", &m, NULL), ST_OK);
        assert_int_equal(m, ok[i].mode);
        assert_string_equal(st_pad_mode_name(ok[i].mode), ok[i].s);
    }
    st_error err = {0};
    st_pad_mode m = ST_PAD_MODE_OFF;
    assert_int_equal(st_pad_mode_parse("Auto", "--pad-weights", &m, &err), ST_ERROR_INVALID);
    assert_int_equal(m, ST_PAD_MODE_OFF);
    assert_non_null(strstr(err.message, "--pad-weights"));
    assert_non_null(strstr(err.message, "\"Auto\""));
    assert_non_null(strstr(err.message, "on, off, auto"));
    assert_int_equal(st_pad_mode_parse(NULL, "X", &m, &err), ST_ERROR_INVALID);
    assert_string_equal(st_pad_mode_name((st_pad_mode)7), "unknown");
}

static void test_device_kinds(void **state) {
    (void)state;
    static const char *const names[ST_DEVICE_KIND_COUNT] = {
        "cpu", "nvidia-hopper", "nvidia-other", "amd-rdna3.5", "amd-other"};
    for (int k = 0; k < ST_DEVICE_KIND_COUNT; k++) {
        assert_string_equal(st_device_kind_name((st_device_kind)k), names[k]);
        st_device_kind out = ST_DEVICE_KIND_COUNT;
        assert_true(st_device_kind_from_name(names[k], &out));
        assert_int_equal(out, k);
    }
    static const char *const bad[] = {"", "CPU", "gpu", "nvidia", "amd-rdna3", "cpu ", "unknown"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        st_device_kind out = ST_DEVICE_KIND_AMD_OTHER;
        assert_false(st_device_kind_from_name(bad[i], &out));
        assert_int_equal(out, ST_DEVICE_KIND_AMD_OTHER);
    }
    assert_false(st_device_kind_from_name(NULL, NULL));
    assert_string_equal(st_device_kind_name(ST_DEVICE_KIND_COUNT), "unknown");
}

/* The built-in table: the measured entries are what SPEC.md and the seed say, the CPU
 * entry cites its benchmark, and every entry explains itself. */
static void test_auto_builtin(void **state) {
    (void)state;
    static const struct {
        st_device_kind kind;
        bool on;
        const char *evidence; /* must appear in `why` */
    } cases[] = {
        {ST_DEVICE_KIND_CPU, false, "bench/cpu-pad-auto.md"},
        {ST_DEVICE_KIND_NVIDIA_HOPPER, false, "H200"},
        {ST_DEVICE_KIND_NVIDIA_OTHER, false, "not measured"},
        {ST_DEVICE_KIND_AMD_RDNA35, true, "alias 2048 B, pad 128 B) as measured on a Radeon 8060S"},
        {ST_DEVICE_KIND_AMD_OTHER, false, "not measured"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *why = NULL;
        assert_int_equal(st_layout_auto_builtin(cases[i].kind, &why), cases[i].on);
        assert_non_null(why);
        assert_non_null(strstr(why, cases[i].evidence));
        assert_non_null(strstr(why, st_device_kind_name(cases[i].kind)));
        assert_non_null(strstr(why, cases[i].on ? ": on" : ": off"));
    }
    const char *why = NULL;
    assert_false(st_layout_auto_builtin(ST_DEVICE_KIND_COUNT, &why));
    assert_non_null(why);
    assert_false(st_layout_auto_builtin(ST_DEVICE_KIND_CPU, NULL));
}

/* Only the policy `auto` without a kill switch consults per-shape decisions. */
static void test_policy_is_auto(void **state) {
    (void)state;
    static const struct {
        const char *flag;
        env_table env;
        bool is_auto;
    } cases[] = {
        {NULL, {{{0}}}, true},
        {"auto", {{{PW, "off"}}}, true},
        {NULL, {{{PW, "auto"}}}, true},
        {"on", {{{0}}}, false},
        {"off", {{{0}}}, false},
        {NULL, {{{PW, "on"}}}, false},
        {NULL, {{{KS, "1"}}}, false},
        {"auto", {{{KG, "1"}}}, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        st_layout_policy p;
        env_table env = cases[i].env;
        assert_int_equal(st_layout_policy_resolve(&p, cases[i].flag, table_getenv, &env, NULL), ST_OK);
        assert_int_equal(st_layout_policy_is_auto(&p), cases[i].is_auto);
    }
}

/* Per-shape decisions, as a calibration cache would give them: (N, K) -> pad, gain. */
typedef struct shape_decision {
    int64_t n, k;
    bool pad;
    double gain;
} shape_decision;

static const shape_decision DECISIONS[] = {
    {64, 64, true, 0.05},   /* attn_q, attn_output */
    {32, 64, false, -0.01}, /* attn_k, attn_v */
    /* gate/up (128 x 64) and down (64 x 128) are not calibrated: the built-in table */
};

static bool decision_lookup(void *ctx, st_type type, int64_t n, int64_t k, st_layout_shape_choice *out) {
    (void)ctx;
    if (type != ST_TYPE_F16) return false;
    for (size_t i = 0; i < sizeof(DECISIONS) / sizeof(DECISIONS[0]); i++)
        if (DECISIONS[i].n == n && DECISIONS[i].k == k) {
            out->pad = DECISIONS[i].pad;
            out->gain = DECISIONS[i].gain;
            return true;
        }
    return false;
}

static const st_layout_entry *entry_named(const st_layout_plan *p, const char *name) {
    for (uint64_t i = 0; i < p->n_entries; i++)
        if (p->entries[i].name_len == strlen(name) && memcmp(p->entries[i].name, name, p->entries[i].name_len) == 0)
            return &p->entries[i];
    fail_msg("no entry %s", name);
    return NULL;
}

static void test_plan_auto_per_shape(void **state) {
    (void)state;
    char path[128];
    snprintf(path, sizeof(path), "/tmp/stride_test_layout_policy_%d.gguf", (int)getpid());
    st_synth_options opt = {.weight_type = ST_TYPE_F16, .seed = 3};
    assert_int_equal(st_synth_write(st_synth_find_preset("tiny-qwen3"), &opt, path, NULL), ST_OK);
    st_gguf_file *f = NULL;
    assert_int_equal(st_gguf_open(path, &f, NULL), ST_OK);
    const st_layout_auto_source src = {.lookup = decision_lookup, .ctx = NULL, .what = "in the test"};

    /* auto with decisions, alias 128 (tiny-qwen3's f16 rows are 128 and 256 B) */
    env_table geo = {{{RA, "128"}, {RP, "64"}}};
    st_layout_policy pol;
    assert_int_equal(st_layout_policy_resolve(&pol, NULL, table_getenv, &geo, NULL), ST_OK);
    st_layout_plan plan;
    assert_int_equal(st_layout_plan_gguf_auto(f, &pol, ST_DEVICE_KIND_AMD_OTHER, ST_TYPE_COUNT, &src, &plan, NULL),
                     ST_OK);
    const bool builtin_on = st_layout_auto_builtin(ST_DEVICE_KIND_AMD_OTHER, NULL);
    assert_false(builtin_on); /* so that the built-in shapes below stay packed */
    static const struct {
        const char *name;
        bool padded;
        st_pad_auto source;
        st_pad_reason reason;
        const char *explain;
    } want[] = {
        {"blk.0.attn_q.weight", true, ST_PAD_AUTO_CALIBRATED, ST_PAD_REASON_PADDED, "auto: calibrated (+5.0%)"},
        {"blk.1.attn_output.weight", true, ST_PAD_AUTO_CALIBRATED, ST_PAD_REASON_PADDED, "auto: calibrated (+5.0%)"},
        {"blk.0.attn_k.weight", false, ST_PAD_AUTO_CALIBRATED, ST_PAD_REASON_AUTO_OFF, "auto: calibrated (-1.0%)"},
        {"blk.0.ffn_gate.weight", false, ST_PAD_AUTO_BUILTIN, ST_PAD_REASON_AUTO_OFF, "auto: built-in table"},
        {"blk.0.ffn_down.weight", false, ST_PAD_AUTO_BUILTIN, ST_PAD_REASON_AUTO_OFF, "auto: built-in table"},
        {"token_embd.weight", false, ST_PAD_AUTO_NONE, ST_PAD_REASON_NOT_GEMM_WEIGHT, "row lookup"},
        {"blk.0.attn_norm.weight", false, ST_PAD_AUTO_NONE, ST_PAD_REASON_NOT_GEMM_WEIGHT, "never padded"},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const st_layout_entry *e = entry_named(&plan, want[i].name);
        char why[320];
        st_layout_entry_explain(e, plan.alias, why, sizeof(why));
        if (e->padded != want[i].padded || e->auto_source != want[i].source || !strstr(why, want[i].explain))
            print_error("%s: padded %d source %d why \"%s\"\n", want[i].name, e->padded, e->auto_source, why);
        assert_int_equal(e->padded, want[i].padded);
        assert_int_equal(e->auto_source, want[i].source);
        assert_int_equal(e->reason, want[i].reason);
        assert_non_null(strstr(why, want[i].explain));
        size_t row = 0; /* the shape survives re-deciding */
        assert_true(e->tensor.ne[0] > 1 && st_type_row_bytes(e->tensor.type, e->tensor.ne[0], &row));
        assert_int_equal(row, e->packed_row_bytes);
        assert_int_equal(e->tensor.nb[1], e->packed_row_bytes + (e->padded ? 64 : 0));
    }
    /* 2 layers x (q, o) padded; (q, k, v, o) calibrated, (gate, up, down) built-in per layer */
    assert_int_equal(plan.n_padded, 4);
    assert_int_equal(plan.n_auto_calibrated, 8);
    assert_int_equal(plan.n_auto_builtin, 6);
    assert_true(plan.pad_enabled);
    assert_non_null(strstr(plan.pad_enabled_why, "calibration in the test"));
    assert_non_null(strstr(plan.pad_enabled_why, "built-in table"));
    st_layout_plan_free(&plan);

    /* the kill switch, on and off win over the decisions; auto without them is the table */
    static const struct {
        const char *flag;
        env_table env;
        bool with_source;
        uint64_t n_padded;
    } over[] = {
        {NULL, {{{RA, "128"}, {RP, "64"}, {KS, "1"}}}, true, 0},
        {"auto", {{{RA, "128"}, {RP, "64"}, {KG, "1"}}}, true, 0},
        {"off", {{{RA, "128"}, {RP, "64"}}}, true, 0},
        {"on", {{{RA, "128"}, {RP, "64"}}}, true, 14},
        {NULL, {{{RA, "128"}, {RP, "64"}}}, false, 0},
    };
    for (size_t i = 0; i < sizeof(over) / sizeof(over[0]); i++) {
        env_table env = over[i].env;
        assert_int_equal(st_layout_policy_resolve(&pol, over[i].flag, table_getenv, &env, NULL), ST_OK);
        assert_int_equal(st_layout_plan_gguf_auto(f, &pol, ST_DEVICE_KIND_AMD_OTHER, ST_TYPE_COUNT,
                                                  over[i].with_source ? &src : NULL, &plan, NULL),
                         ST_OK);
        assert_int_equal(plan.n_padded, over[i].n_padded);
        assert_int_equal(plan.n_auto_calibrated, 0);
        assert_null(plan.auto_summary);
        for (uint64_t j = 0; j < plan.n_entries; j++)
            if (over[i].with_source) assert_int_equal(plan.entries[j].auto_source, ST_PAD_AUTO_NONE);
        st_layout_plan_free(&plan);
    }
    st_gguf_close(f);
    unlink(path);
}

/* auto with no calibration on each device kind: the built-in table alone. On RDNA3.5 the
 * seed's rule pads every aliased float GEMM weight by 128 B at the default geometry
 * (alias 2048); every other kind keeps the packed layout until a calibration says otherwise. */
static void test_plan_auto_builtin_per_device(void **state) {
    (void)state;
    char path[128];
    snprintf(path, sizeof(path), "/tmp/stride_test_layout_policy_dev_%d.gguf", (int)getpid());
    /* F32 tiny-llama-hd64: attn_output (K = 8 x 64) and ffn_down (K = 512) have rows of
     * 2048 B; q/k/v, gate/up (K = 256) and the output head rows of 1024 B */
    st_synth_options opt = {.weight_type = ST_TYPE_F32, .seed = 5};
    assert_int_equal(st_synth_write(st_synth_find_preset("tiny-llama-hd64"), &opt, path, NULL), ST_OK);
    st_gguf_file *f = NULL;
    assert_int_equal(st_gguf_open(path, &f, NULL), ST_OK);
    env_table none = {{{0}}};
    st_layout_policy pol;
    assert_int_equal(st_layout_policy_resolve(&pol, NULL, table_getenv, &none, NULL), ST_OK);
    assert_int_equal(pol.mode, ST_PAD_MODE_AUTO);
    for (int kind = 0; kind < ST_DEVICE_KIND_COUNT; kind++) {
        const bool rdna35 = kind == ST_DEVICE_KIND_AMD_RDNA35;
        st_layout_plan plan;
        assert_int_equal(st_layout_plan_gguf_auto(f, &pol, (st_device_kind)kind, ST_TYPE_COUNT, NULL, &plan, NULL),
                         ST_OK);
        assert_int_equal(plan.alias, 2048);
        assert_int_equal(plan.n_padded, rdna35 ? 4 : 0); /* 2 layers x (attn_output, ffn_down) */
        assert_int_equal(plan.n_auto_builtin, 4);
        assert_int_equal(plan.n_auto_calibrated, 0);
        static const char *const aliased[] = {"blk.0.attn_output.weight", "blk.1.ffn_down.weight"};
        for (size_t i = 0; i < sizeof(aliased) / sizeof(aliased[0]); i++) {
            const st_layout_entry *e = entry_named(&plan, aliased[i]);
            char why[320];
            st_layout_entry_explain(e, plan.alias, why, sizeof(why));
            assert_int_equal(e->packed_row_bytes, 2048);
            assert_int_equal(e->padded, rdna35);
            assert_int_equal(e->tensor.nb[1], 2048 + (rdna35 ? 128 : 0));
            assert_int_equal(e->auto_source, ST_PAD_AUTO_BUILTIN);
            assert_int_equal(e->reason, rdna35 ? ST_PAD_REASON_PADDED : ST_PAD_REASON_AUTO_OFF);
            assert_non_null(strstr(why, "auto: built-in table"));
        }
        /* a row of 1024 B is never padded (without calibrations it keeps the device's reason) */
        const st_layout_entry *q = entry_named(&plan, "blk.0.attn_q.weight");
        assert_false(q->padded);
        assert_int_equal(q->reason, rdna35 ? ST_PAD_REASON_ROW_NOT_ALIASED : ST_PAD_REASON_AUTO_OFF);
        st_layout_plan_free(&plan);
    }
    st_gguf_close(f);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_auto_builtin_per_device),
        cmocka_unit_test(test_policy_is_auto),
        cmocka_unit_test(test_plan_auto_per_shape),
        cmocka_unit_test(test_resolve_valid),
        cmocka_unit_test(test_resolve_invalid),
        cmocka_unit_test(test_resolve_ignores_other_variables),
        cmocka_unit_test(test_pad_mode_parse_and_name),
        cmocka_unit_test(test_device_kinds),
        cmocka_unit_test(test_auto_builtin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
