/*
 * Loading quantized models (src/model/model_load.c): weights kept quantized, or converted
 * to f16/bf16 at load (st_model_load_options.weights_type) and then planned, and padded,
 * like float weights; unsupported types and backends as clear errors.
 *
 * The model is the llama fixture (tests/fixtures/llama-f32.gguf) with every matrix
 * quantized to q8_0 by a small quantizer here, written with stride's GGUF writer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include <cmocka.h>

#include "stride/backend.h"
#include "stride/cpu_path.h"
#include "stride/gguf.h"
#include "stride/model.h"
#include "stride/quant.h"
#include "test_quant_common.h"

#define FIXTURE STRIDE_TEST_DATA "/../fixtures/llama-f32.gguf"

static char model_path[256], bad_path[256];
static const int32_t prompt[5] = {1, 87, 263, 5, 301};

/* q8_0 of one row (k a multiple of 32): d = max|x| / 127, q = round(x / d). */
static void quantize_q8_0(const float *x, uint8_t *out, int64_t k) {
    for (int64_t b = 0; b < k / 32; b++, x += 32, out += 34) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
        tq_put_u16(out, st_f32_to_f16(d));
        for (int i = 0; i < 32; i++) out[2 + i] = (uint8_t)(int8_t)lrintf(x[i] * id);
    }
}

static bool is_matrix(const st_gguf_tensor_info *ti) {
    return ti->n_dims >= 2 && ti->type == ST_TYPE_F32 && ti->ne[0] % 32 == 0;
}

/* The fixture with its matrices in q8_0; bad_name (if not NULL) gets iq4_nl instead. */
static void write_quantized(const char *out_path, const char *bad_name) {
    st_error err = {0};
    st_gguf_file *f = NULL;
    st_gguf_writer *w = NULL;
    if (st_gguf_open(FIXTURE, &f, &err) != ST_OK) fail_msg("%s", err.message);
    assert_int_equal(st_gguf_writer_open(out_path, &w, &err), ST_OK);
    for (uint64_t i = 0; i < st_gguf_n_kv(f); i++) {
        const st_gguf_kv *kv = st_gguf_get_kv(f, i);
        char key[256];
        snprintf(key, sizeof(key), "%.*s", (int)kv->key.len, kv->key.data);
        if (strcmp(key, "general.alignment") == 0) continue;
        assert_int_equal(st_gguf_writer_set_value(w, key, &kv->value, &err), ST_OK);
    }
    for (uint64_t i = 0; i < st_gguf_n_tensors(f); i++) {
        const st_gguf_tensor_info *ti = st_gguf_get_tensor(f, i);
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)ti->name.len, ti->name.data);
        st_type type = is_matrix(ti) ? ST_TYPE_Q8_0 : ti->type;
        if (bad_name && strcmp(name, bad_name) == 0) type = ST_TYPE_IQ4_NL;
        assert_int_equal(st_gguf_writer_add_tensor(w, name, type, ti->n_dims, ti->ne, &err), ST_OK);
    }
    assert_int_equal(st_gguf_writer_write_header(w, &err), ST_OK);
    for (uint64_t i = 0; i < st_gguf_n_tensors(f); i++) {
        const st_gguf_tensor_info *ti = st_gguf_get_tensor(f, i);
        if (!is_matrix(ti)) {
            assert_int_equal(st_gguf_writer_write_data(w, ti->data, ti->nbytes, &err), ST_OK);
            continue;
        }
        const int64_t k = ti->ne[0], rows = (int64_t)(ti->nbytes / sizeof(float)) / k;
        uint8_t *q = malloc((size_t)(rows * (k / 32) * 34)); /* iq4_nl blocks are 18 B: a prefix */
        float *row = malloc((size_t)k * sizeof(float));
        assert_true(q && row);
        for (int64_t r = 0; r < rows; r++) {
            memcpy(row, (const float *)ti->data + r * k, (size_t)k * sizeof(float));
            quantize_q8_0(row, q + r * (k / 32) * 34, k);
        }
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)ti->name.len, ti->name.data);
        size_t n = (bad_name && strcmp(name, bad_name) == 0) ? (size_t)(rows * (k / 32) * 18)
                                                             : (size_t)(rows * (k / 32) * 34);
        assert_int_equal(st_gguf_writer_write_data(w, q, n, &err), ST_OK);
        free(q);
        free(row);
    }
    assert_int_equal(st_gguf_writer_close(w, &err), ST_OK);
    st_gguf_close(f);
}

static int setup(void **state) {
    (void)state;
    snprintf(model_path, sizeof(model_path), "/tmp/stride_test_quant_load_%d.gguf", (int)getpid());
    snprintf(bad_path, sizeof(bad_path), "/tmp/stride_test_quant_load_bad_%d.gguf", (int)getpid());
    write_quantized(model_path, NULL);
    write_quantized(bad_path, "blk.0.ffn_up.weight");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    remove(model_path);
    remove(bad_path);
    return 0;
}

/* The environment of a padded run: alias 64 B, so that the fixture's 128 B f16 rows pad. */
static const char *small_alias_env(const char *name, void *ctx) {
    (void)ctx;
    if (strcmp(name, "STRIDE_ROW_ALIAS") == 0) return "64";
    if (strcmp(name, "STRIDE_ROW_PAD") == 0) return "32";
    return NULL;
}

static st_model_load_options options(const char *pad, st_type weights_type) {
    st_model_load_options o;
    memset(&o, 0, sizeof(o));
    st_error err = {0};
    if (st_layout_policy_resolve(&o.policy, pad, small_alias_env, NULL, &err) != ST_OK) fail_msg("%s", err.message);
    o.weights_type = weights_type;
    return o;
}

/* Logits of the prompt's last position (n_vocab floats, caller frees). */
static float *eval_last(st_model *m) {
    st_error err = {0};
    st_session *s = NULL;
    st_session_options so = st_session_options_default();
    so.n_ctx = 64;
    so.kv_type = ST_TYPE_F32;
    assert_int_equal(st_session_init(m, &so, &s, &err), ST_OK);
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof(float));
    assert_non_null(logits);
    if (st_session_eval(s, prompt, 5, false, logits, &err) != ST_OK) fail_msg("%s", err.message);
    st_session_free(s);
    for (int64_t i = 0; i < m->hp.n_vocab; i++) assert_true(isfinite(logits[i]));
    return logits;
}

static st_model *load(st_backend *b, const char *path, const st_model_load_options *o) {
    st_error err = {0};
    st_model *m = NULL;
    if (st_model_load(path, b, o, &m, &err) != ST_OK) fail_msg("%s", err.message);
    return m;
}

/* The plan's totals are the sums over its entries. */
static void expect_totals_consistent(const st_layout_plan *p) {
    uint64_t n_padded = 0;
    size_t planned = 0, extra = 0;
    for (uint64_t i = 0; i < p->n_entries; i++) {
        n_padded += p->entries[i].padded;
        planned += st_tensor_nbytes(&p->entries[i].tensor);
        extra += p->entries[i].extra_bytes;
    }
    assert_int_equal(n_padded, p->n_padded);
    assert_int_equal(planned, p->total_planned_bytes);
    assert_int_equal(extra, p->total_extra_bytes);
    assert_int_equal(planned - extra, p->total_packed_bytes);
}

static void test_keep_quantized(void **state) {
    (void)state;
    st_backend *b = NULL;
    assert_int_equal(st_backend_init(ST_BACKEND_CPU, 0, &b, NULL), ST_OK);
    st_model_load_options o = options("on", ST_TYPE_COUNT);
    st_model *m = load(b, model_path, &o);
    int n_quant = 0;
    for (uint64_t i = 0; i < m->plan.n_entries; i++) {
        const st_layout_entry *e = &m->plan.entries[i];
        if (e->tensor.type != ST_TYPE_Q8_0) continue;
        n_quant++;
        assert_false(e->padded); /* quantized weights are never padded */
        assert_int_equal(m->tensors[i].nb[1], e->packed_row_bytes);
    }
    assert_true(n_quant > 5);
    assert_int_equal(m->plan.n_padded, 0);
    assert_int_equal(m->token_embd->type, ST_TYPE_Q8_0);
    free(eval_last(m));
    st_model_free(m);
    st_backend_free(b);
}

static void check_converted(st_type to) {
    /* the reference ops: the comparison below is of weight rounding alone (the fast
     * path would add the activations' int8 quantization to the quantized model's side) */
    st_backend *b = NULL;
    assert_int_equal(st_backend_cpu_init_path(ST_CPU_PATH_EXACT, &b, NULL), ST_OK);
    st_model_load_options o_keep = options("on", ST_TYPE_COUNT), o_on = options("on", to), o_off = options("off", to);
    st_model *keep = load(b, model_path, &o_keep), *on = load(b, model_path, &o_on), *off = load(b, model_path, &o_off);

    /* every quantized tensor became `to`; the GEMM weights pad, the embedding does not */
    assert_true(on->plan.n_padded > 0);
    assert_int_equal(off->plan.n_padded, 0);
    expect_totals_consistent(&on->plan);
    expect_totals_consistent(&off->plan);
    assert_int_equal(on->token_embd->type, to);
    int n_converted = 0;
    for (uint64_t i = 0; i < on->plan.n_entries; i++) {
        const st_layout_entry *e = &on->plan.entries[i];
        const st_tensor *t = &on->tensors[i];
        if (keep->tensors[i].type != ST_TYPE_Q8_0) {
            assert_int_equal(t->type, keep->tensors[i].type);
            continue;
        }
        n_converted++;
        assert_int_equal(t->type, to);
        const bool gemm = st_tensor_role_is_gemm_weight(e->role);
        assert_int_equal(e->padded, gemm); /* 128 B rows, alias 64 */
        assert_int_equal(t->nb[1], e->packed_row_bytes + (gemm ? 32 : 0));
        /* the uploaded rows are the dequantized file rows rounded to `to`; pads are zero */
        const int64_t k = t->ne[0], rows = t->ne[1] * t->ne[2];
        float *deq = malloc((size_t)k * sizeof(float));
        assert_non_null(deq);
        for (int64_t r = 0; r < rows; r++) {
            st_quant_dequantize_row(ST_TYPE_Q8_0, (const char *)keep->tensors[i].data + r * keep->tensors[i].nb[1],
                                    deq, k);
            const uint16_t *got = (const uint16_t *)((const char *)t->data + r * t->nb[1]);
            for (int64_t j = 0; j < k; j++)
                assert_int_equal(got[j], to == ST_TYPE_F16 ? st_f32_to_f16(deq[j]) : st_f32_to_bf16(deq[j]));
            for (size_t p = e->packed_row_bytes; p < t->nb[1]; p++) assert_int_equal(((const uint8_t *)got)[p], 0);
        }
        free(deq);
    }
    assert_true(n_converted > 5);

    /* padding is a pure layout change; the conversion only rounds the weights */
    float *l_keep = eval_last(keep), *l_on = eval_last(on), *l_off = eval_last(off);
    const int64_t V = keep->hp.n_vocab;
    assert_memory_equal(l_on, l_off, (size_t)V * sizeof(float));
    double num = 0, den = 0;
    for (int64_t i = 0; i < V; i++) {
        num += ((double)l_on[i] - l_keep[i]) * ((double)l_on[i] - l_keep[i]);
        den += (double)l_keep[i] * l_keep[i];
    }
    /* rounding to f16 (2^-11) / bf16 (2^-8) relative per weight, through 2 layers */
    const double tol = to == ST_TYPE_F16 ? 5e-3 : 3e-2;
    printf("  %s vs q8_0: normalised logit difference %.2e (tolerance %.0e)\n", st_type_name(to), sqrt(num / den), tol);
    assert_true(sqrt(num / den) < tol);
    free(l_keep);
    free(l_on);
    free(l_off);
    st_model_free(keep);
    st_model_free(on);
    st_model_free(off);
    st_backend_free(b);
}

static void test_convert_f16(void **state) {
    (void)state;
    check_converted(ST_TYPE_F16);
}

static void test_convert_bf16(void **state) {
    (void)state;
    check_converted(ST_TYPE_BF16);
}

static void test_invalid_weights_type(void **state) {
    (void)state;
    st_backend *b = NULL;
    assert_int_equal(st_backend_init(ST_BACKEND_CPU, 0, &b, NULL), ST_OK);
    st_model_load_options o = options("off", ST_TYPE_Q4_K);
    st_model *m = NULL;
    st_error err = {0};
    assert_int_equal(st_model_load(model_path, b, &o, &m, &err), ST_ERROR_INVALID);
    assert_null(m);
    assert_non_null(strstr(err.message, "f16 or bf16"));
    st_backend_free(b);
}

static void test_unsupported_quant_type(void **state) {
    (void)state;
    st_backend *b = NULL;
    assert_int_equal(st_backend_init(ST_BACKEND_CPU, 0, &b, NULL), ST_OK);
    const st_type modes[2] = {ST_TYPE_COUNT, ST_TYPE_F16};
    for (int i = 0; i < 2; i++) {
        st_model_load_options o = options("off", modes[i]);
        st_model *m = NULL;
        st_error err = {0};
        assert_int_equal(st_model_load(bad_path, b, &o, &m, &err), ST_ERROR_UNSUPPORTED);
        assert_null(m);
        assert_non_null(strstr(err.message, "blk.0.ffn_up.weight"));
        assert_non_null(strstr(err.message, "iq4_nl"));
    }
    st_backend_free(b);
}

/* A backend that is not the CPU: the CPU's functions under another name, so that the
 * check runs without a GPU. Quantized weights load kept as stored (CUDA computes with
 * them, cuda_quant_*.cu) and converted alike; the unreadable type is refused as on the CPU. */
static void test_quantized_loads_on_other_backend(void **state) {
    (void)state;
    st_backend *cpu = NULL;
    assert_int_equal(st_backend_init(ST_BACKEND_CPU, 0, &cpu, NULL), ST_OK);
    st_backend other = *cpu;
    other.device.backend = ST_BACKEND_CUDA;
    st_model_load_options o = options("off", ST_TYPE_COUNT);
    st_model *m = NULL;
    st_error err = {0};
    assert_int_equal(st_model_load(model_path, &other, &o, &m, &err), ST_OK);
    st_model_free(m);
    m = NULL;
    o.weights_type = ST_TYPE_F16;
    assert_int_equal(st_model_load(model_path, &other, &o, &m, &err), ST_OK);
    st_model_free(m);
    m = NULL;
    o.weights_type = ST_TYPE_COUNT;
    assert_int_equal(st_model_load(bad_path, &other, &o, &m, &err), ST_ERROR_UNSUPPORTED);
    assert_null(m);
    assert_non_null(strstr(err.message, "iq4_nl"));
    st_backend_free(cpu);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keep_quantized),
        cmocka_unit_test(test_convert_f16),
        cmocka_unit_test(test_convert_bf16),
        cmocka_unit_test(test_invalid_weights_type),
        cmocka_unit_test(test_unsupported_quant_type),
        cmocka_unit_test(test_quantized_loads_on_other_backend),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
