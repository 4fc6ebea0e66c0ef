/* GGUF v3: writer -> reader round trips of every value type, tensor layout and data;
 * typed getters; writer errors; reader errors on hand-built malformed buffers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stride/gguf.h"

static char tmp_dir[64];

static int group_setup(void **state) {
    (void)state;
    strcpy(tmp_dir, "/tmp/stride-test-gguf-XXXXXX");
    return mkdtemp(tmp_dir) ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    return rmdir(tmp_dir); /* fails (and the group fails) if a test left a file behind */
}

static void tmp_path(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", tmp_dir, name); }

static bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

#define ASSERT_OK(expr)                                                                   \
    do {                                                                                  \
        st_error e_ = {0};                                                                \
        st_status s_ = (expr);                                                            \
        if (s_ != ST_OK) fail_msg("%s failed: %s", #expr, e_.message);                    \
    } while (0)

/* Expression must take `&err`; checks the status and a fragment of the message. */
#define ASSERT_ERR(expr, status, fragment)                                                \
    do {                                                                                  \
        st_status s_ = (expr);                                                            \
        assert_int_equal(s_, status);                                                     \
        if (!strstr(err.message, fragment))                                               \
            fail_msg("message \"%s\" lacks \"%s\"", err.message, fragment);               \
    } while (0)

/* Deterministic tensor bytes: byte j of tensor t. */
static uint8_t pattern(int t, uint64_t j) { return (uint8_t)(j * 131u + (uint64_t)t * 17u + 7u); }

/* ---- round trip ---- */

typedef struct tensor_spec {
    const char *name;
    st_type type;
    uint32_t n_dims;
    int64_t ne[4];
    size_t nbytes;
} tensor_spec;

static const tensor_spec specs[] = {
    {"token_embd.weight", ST_TYPE_F16, 2, {8, 5, 1, 1}, 8 * 5 * 2},
    {"output_norm.weight", ST_TYPE_F32, 1, {7, 1, 1, 1}, 7 * 4},
    {"blk.0.ffn_up_exps.weight", ST_TYPE_BF16, 3, {6, 3, 4, 1}, 6 * 3 * 4 * 2},
    {"blk.0.attn_q.weight", ST_TYPE_Q8_0, 2, {64, 3, 1, 1}, 2 * 34 * 3},
    {"ids", ST_TYPE_I32, 4, {2, 1, 3, 2}, 2 * 3 * 2 * 4},
};
#define N_SPECS (sizeof(specs) / sizeof(specs[0]))

static void write_roundtrip_file(const char *path, uint32_t alignment) {
    st_gguf_writer *w = NULL;
    ASSERT_OK(st_gguf_writer_open(path, &w, &e_));
    ASSERT_OK(st_gguf_writer_set_str(w, "general.architecture", "llama", &e_));
    if (alignment) ASSERT_OK(st_gguf_writer_set_u32(w, "general.alignment", alignment, &e_));
    ASSERT_OK(st_gguf_writer_set_u8(w, "t.u8", 250, &e_));
    ASSERT_OK(st_gguf_writer_set_i8(w, "t.i8", -100, &e_));
    ASSERT_OK(st_gguf_writer_set_u16(w, "t.u16", 65000, &e_));
    ASSERT_OK(st_gguf_writer_set_i16(w, "t.i16", -32000, &e_));
    ASSERT_OK(st_gguf_writer_set_u32(w, "t.u32", 4000000000u, &e_));
    ASSERT_OK(st_gguf_writer_set_i32(w, "t.i32", -2000000000, &e_));
    ASSERT_OK(st_gguf_writer_set_f32(w, "t.f32", 0.1f, &e_));
    ASSERT_OK(st_gguf_writer_set_bool(w, "t.bool", true, &e_));
    ASSERT_OK(st_gguf_writer_set_str(w, "t.str", "h\xc3\xa9llo", &e_));
    ASSERT_OK(st_gguf_writer_set_str(w, "t.empty_str", "", &e_));
    ASSERT_OK(st_gguf_writer_set_u64(w, "t.u64", UINT64_MAX, &e_));
    ASSERT_OK(st_gguf_writer_set_i64(w, "t.i64", INT64_MIN, &e_));
    ASSERT_OK(st_gguf_writer_set_f64(w, "t.f64", 1e300, &e_));

    uint8_t a_u8[] = {0, 1, 255};
    int8_t a_i8[] = {-128, 0, 127};
    uint16_t a_u16[] = {0, 65535};
    int16_t a_i16[] = {-32768, 32767, -1};
    uint32_t a_u32[] = {0, 4294967295u};
    int32_t a_i32[] = {INT32_MIN, -1, INT32_MAX};
    float a_f32[] = {1.5f, -2.25f, 3e38f};
    bool a_bool[] = {true, false, true, true};
    uint64_t a_u64[] = {UINT64_MAX, 1};
    int64_t a_i64[] = {INT64_MIN, INT64_MAX};
    double a_f64[] = {-0.5, 1e-300};
    ASSERT_OK(st_gguf_writer_set_arr(w, "a.u8", ST_GGUF_TYPE_UINT8, a_u8, 3, &e_));
    ASSERT_OK(st_gguf_writer_set_arr(w, "a.i8", ST_GGUF_TYPE_INT8, a_i8, 3, &e_));
    ASSERT_OK(st_gguf_writer_set_arr(w, "a.u16", ST_GGUF_TYPE_UINT16, a_u16, 2, &e_));
    ASSERT_OK(st_gguf_writer_set_arr(w, "a.i16", ST_GGUF_TYPE_INT16, a_i16, 3, &e_));
    ASSERT_OK(st_gguf_writer_set_arr(w, "a.u32", ST_GGUF_TYPE_UINT32, a_u32, 2, &e_));
    ASSERT_OK(st_gguf_writer_set_arr(w, "a.i32", ST_GGUF_TYPE_INT32, a_i32, 3, &e_));
    ASSERT_OK(st_gguf_writer_set_arr(w, "a.f32", ST_GGUF_TYPE_FLOAT32, a_f32, 3, &e_));
    ASSERT_OK(st_gguf_writer_set_arr(w, "a.bool", ST_GGUF_TYPE_BOOL, a_bool, 4, &e_));
    ASSERT_OK(st_gguf_writer_set_arr(w, "a.u64", ST_GGUF_TYPE_UINT64, a_u64, 2, &e_));
    ASSERT_OK(st_gguf_writer_set_arr(w, "a.i64", ST_GGUF_TYPE_INT64, a_i64, 2, &e_));
    ASSERT_OK(st_gguf_writer_set_arr(w, "a.f64", ST_GGUF_TYPE_FLOAT64, a_f64, 2, &e_));
    ASSERT_OK(st_gguf_writer_set_arr(w, "a.empty", ST_GGUF_TYPE_INT32, NULL, 0, &e_));
    const char *strs[] = {"<s>", "", "\xe2\x96\x81the"};
    ASSERT_OK(st_gguf_writer_set_arr_str(w, "a.str", strs, 3, &e_));

    /* nested: [[1, 2, 3], [], [["x", "yz"]]] */
    int32_t inner_i[] = {1, 2, 3};
    st_gguf_string inner_s[] = {{1, "x"}, {2, "yz"}};
    st_gguf_value deep = {.type = ST_GGUF_TYPE_ARRAY,
                          .v.arr = {.elem_type = ST_GGUF_TYPE_STRING, .n = 2, .strings = inner_s}};
    st_gguf_value kids[3] = {
        {.type = ST_GGUF_TYPE_ARRAY, .v.arr = {.elem_type = ST_GGUF_TYPE_INT32, .n = 3, .raw = inner_i}},
        {.type = ST_GGUF_TYPE_ARRAY, .v.arr = {.elem_type = ST_GGUF_TYPE_FLOAT32, .n = 0}},
        {.type = ST_GGUF_TYPE_ARRAY, .v.arr = {.elem_type = ST_GGUF_TYPE_ARRAY, .n = 1, .arrays = &deep}},
    };
    st_gguf_value nested = {.type = ST_GGUF_TYPE_ARRAY,
                            .v.arr = {.elem_type = ST_GGUF_TYPE_ARRAY, .n = 3, .arrays = kids}};
    ASSERT_OK(st_gguf_writer_set_value(w, "a.nested", &nested, &e_));

    size_t total = 0;
    for (size_t i = 0; i < N_SPECS; i++) {
        ASSERT_OK(st_gguf_writer_add_tensor(w, specs[i].name, specs[i].type, specs[i].n_dims, specs[i].ne, &e_));
        total += specs[i].nbytes;
    }
    ASSERT_OK(st_gguf_writer_write_header(w, &e_));
    /* all tensor bytes back to back, streamed in 7-byte chunks that straddle tensors */
    uint8_t *all = malloc(total);
    assert_non_null(all);
    for (size_t i = 0, k = 0; i < N_SPECS; i++)
        for (size_t j = 0; j < specs[i].nbytes; j++) all[k++] = pattern((int)i, j);
    for (size_t k = 0; k < total; k += 7)
        ASSERT_OK(st_gguf_writer_write_data(w, all + k, total - k < 7 ? total - k : 7, &e_));
    free(all);
    ASSERT_OK(st_gguf_writer_close(w, &e_));
}

static void check_roundtrip_file(const char *path, size_t alignment) {
    st_gguf_file *f = NULL;
    ASSERT_OK(st_gguf_open(path, &f, &e_));
    assert_int_equal(st_gguf_version(f), 3);
    assert_int_equal(st_gguf_alignment(f), alignment);
    assert_int_equal(st_gguf_data_offset(f) % alignment, 0);
    assert_int_equal(st_gguf_n_tensors(f), N_SPECS);
    assert_int_equal(st_gguf_n_kv(f), alignment == 32 ? 28 : 29);
    assert_true(st_gguf_string_eq(st_gguf_get_kv(f, 0)->key, "general.architecture"));
    assert_int_equal(st_gguf_get_kv(f, 0)->file_offset, 24);
    assert_null(st_gguf_get_kv(f, st_gguf_n_kv(f)));

    const st_gguf_value *v;
    assert_non_null(v = st_gguf_find(f, "t.u8"));
    assert_int_equal(v->type, ST_GGUF_TYPE_UINT8);
    assert_int_equal(v->v.u64, 250);
    assert_int_equal((v = st_gguf_find(f, "t.i8"))->v.i64, -100);
    assert_int_equal(v->type, ST_GGUF_TYPE_INT8);
    assert_int_equal(st_gguf_find(f, "t.u16")->v.u64, 65000);
    assert_int_equal(st_gguf_find(f, "t.i16")->v.i64, -32000);
    assert_int_equal(st_gguf_find(f, "t.u32")->v.u64, 4000000000u);
    assert_int_equal(st_gguf_find(f, "t.i32")->v.i64, -2000000000);
    assert_true(st_gguf_find(f, "t.f32")->v.f64 == (double)0.1f);
    assert_true(st_gguf_find(f, "t.bool")->v.b);
    assert_true(st_gguf_string_eq(st_gguf_find(f, "t.str")->v.str, "h\xc3\xa9llo"));
    assert_true(st_gguf_string_eq(st_gguf_find(f, "t.empty_str")->v.str, ""));
    assert_true(st_gguf_find(f, "t.u64")->v.u64 == UINT64_MAX);
    assert_true(st_gguf_find(f, "t.i64")->v.i64 == INT64_MIN);
    assert_true(st_gguf_find(f, "t.f64")->v.f64 == 1e300);
    assert_int_equal(st_gguf_find(f, "t.f64")->type, ST_GGUF_TYPE_FLOAT64);
    assert_null(st_gguf_find(f, "t.missing"));
    assert_null(st_gguf_find(f, "t.u")); /* a prefix of a key is not the key */

    const st_gguf_array *a = &st_gguf_find(f, "a.u8")->v.arr;
    assert_int_equal(a->elem_type, ST_GGUF_TYPE_UINT8);
    assert_int_equal(a->n, 3);
    assert_int_equal(st_gguf_array_get_i64(a, 2), 255);
    a = &st_gguf_find(f, "a.i8")->v.arr;
    assert_int_equal(st_gguf_array_get_i64(a, 0), -128);
    assert_int_equal(st_gguf_array_get_i64(a, 2), 127);
    assert_int_equal(st_gguf_array_get_i64(&st_gguf_find(f, "a.u16")->v.arr, 1), 65535);
    assert_int_equal(st_gguf_array_get_i64(&st_gguf_find(f, "a.i16")->v.arr, 0), -32768);
    assert_int_equal(st_gguf_array_get_i64(&st_gguf_find(f, "a.i16")->v.arr, 2), -1);
    assert_int_equal(st_gguf_array_get_i64(&st_gguf_find(f, "a.u32")->v.arr, 1), 4294967295u);
    assert_int_equal(st_gguf_array_get_i64(&st_gguf_find(f, "a.i32")->v.arr, 0), INT32_MIN);
    a = &st_gguf_find(f, "a.f32")->v.arr;
    assert_true(st_gguf_array_get_f64(a, 1) == -2.25);
    assert_true(st_gguf_array_get_f64(a, 2) == (double)3e38f);
    assert_int_equal(st_gguf_array_get_i64(a, 0), 1);          /* truncates */
    assert_true(st_gguf_array_get_i64(a, 2) == INT64_MAX);     /* saturates */
    a = &st_gguf_find(f, "a.bool")->v.arr;
    assert_int_equal(a->n, 4);
    assert_int_equal(st_gguf_array_get_i64(a, 0) + st_gguf_array_get_i64(a, 1), 1);
    a = &st_gguf_find(f, "a.u64")->v.arr;
    assert_true(st_gguf_array_get_i64(a, 0) == INT64_MAX); /* saturates */
    assert_true(st_gguf_array_get_f64(a, 1) == 1.0);
    a = &st_gguf_find(f, "a.i64")->v.arr;
    assert_true(st_gguf_array_get_i64(a, 0) == INT64_MIN);
    assert_true(st_gguf_array_get_i64(a, 1) == INT64_MAX);
    a = &st_gguf_find(f, "a.f64")->v.arr;
    assert_true(st_gguf_array_get_f64(a, 0) == -0.5 && st_gguf_array_get_f64(a, 1) == 1e-300);
    assert_int_equal(st_gguf_find(f, "a.empty")->v.arr.n, 0);

    a = &st_gguf_find(f, "a.str")->v.arr;
    assert_int_equal(a->elem_type, ST_GGUF_TYPE_STRING);
    assert_int_equal(a->n, 3);
    assert_true(st_gguf_string_eq(a->strings[0], "<s>"));
    assert_true(st_gguf_string_eq(a->strings[1], ""));
    assert_true(st_gguf_string_eq(a->strings[2], "\xe2\x96\x81the"));

    a = &st_gguf_find(f, "a.nested")->v.arr;
    assert_int_equal(a->elem_type, ST_GGUF_TYPE_ARRAY);
    assert_int_equal(a->n, 3);
    const st_gguf_array *k0 = &a->arrays[0].v.arr, *k1 = &a->arrays[1].v.arr, *k2 = &a->arrays[2].v.arr;
    assert_int_equal(a->arrays[0].type, ST_GGUF_TYPE_ARRAY);
    assert_int_equal(k0->elem_type, ST_GGUF_TYPE_INT32);
    assert_int_equal(k0->n, 3);
    assert_int_equal(st_gguf_array_get_i64(k0, 2), 3);
    assert_int_equal(k1->elem_type, ST_GGUF_TYPE_FLOAT32);
    assert_int_equal(k1->n, 0);
    assert_int_equal(k2->elem_type, ST_GGUF_TYPE_ARRAY);
    assert_int_equal(k2->n, 1);
    assert_int_equal(k2->arrays[0].v.arr.elem_type, ST_GGUF_TYPE_STRING);
    assert_true(st_gguf_string_eq(k2->arrays[0].v.arr.strings[1], "yz"));

    uint64_t prev_end = 0;
    for (size_t i = 0; i < N_SPECS; i++) {
        const st_gguf_tensor_info *t = st_gguf_get_tensor(f, i);
        assert_true(st_gguf_string_eq(t->name, specs[i].name));
        assert_ptr_equal(st_gguf_find_tensor(f, specs[i].name), t);
        assert_int_equal(t->type, specs[i].type);
        assert_int_equal(t->n_dims, specs[i].n_dims);
        for (int d = 0; d < 4; d++) assert_int_equal(t->ne[d], specs[i].ne[d]);
        assert_int_equal(t->nbytes, specs[i].nbytes);
        assert_int_equal(t->offset % alignment, 0);
        assert_true(t->offset >= prev_end && t->offset < prev_end + alignment);
        prev_end = t->offset + t->nbytes;
        const uint8_t *d = t->data;
        assert_ptr_equal(d, (const uint8_t *)st_gguf_get_tensor(f, 0)->data + t->offset);
        for (size_t j = 0; j < t->nbytes; j++)
            if (d[j] != pattern((int)i, j)) fail_msg("tensor %zu byte %zu differs", i, j);
        if (i + 1 < N_SPECS) /* the padding between tensors is zeros */
            for (const uint8_t *z = d + t->nbytes; z < d + (st_gguf_get_tensor(f, i + 1)->offset - t->offset); z++)
                assert_int_equal(*z, 0);
    }
    assert_null(st_gguf_get_tensor(f, N_SPECS));
    assert_null(st_gguf_find_tensor(f, "token_embd.weigh"));
    assert_null(st_gguf_find_tensor(f, "zzz"));
    assert_null(st_gguf_find_tensor(f, ""));
    st_gguf_close(f);
}

static void test_roundtrip_default_alignment(void **state) {
    (void)state;
    char path[128];
    tmp_path(path, sizeof(path), "rt32.gguf");
    write_roundtrip_file(path, 0);
    check_roundtrip_file(path, 32);
    assert_int_equal(unlink(path), 0);
}

static void test_roundtrip_alignment_64(void **state) {
    (void)state;
    char path[128];
    tmp_path(path, sizeof(path), "rt64.gguf");
    write_roundtrip_file(path, 64);
    check_roundtrip_file(path, 64);
    /* the same bytes parse from memory too */
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    static uint8_t image[1 << 16];
    size_t n = fread(image, 1, sizeof(image), fp);
    fclose(fp);
    assert_true(n > 0 && n < sizeof(image));
    assert_int_equal(n % 64, 0); /* the last tensor is padded too */
    st_gguf_file *f = NULL;
    ASSERT_OK(st_gguf_open_memory(image, n, &f, &e_));
    assert_int_equal(st_gguf_alignment(f), 64);
    assert_int_equal(st_gguf_file_size(f), n);
    st_gguf_close(f);
    assert_int_equal(unlink(path), 0);
}

/* ---- typed getters ---- */

static void test_typed_getters(void **state) {
    (void)state;
    char path[128];
    tmp_path(path, sizeof(path), "getters.gguf");
    write_roundtrip_file(path, 0);
    st_gguf_file *f = NULL;
    st_error err = {0};
    ASSERT_OK(st_gguf_open(path, &f, &e_));
    uint32_t u32 = 0;
    uint64_t u64 = 0;
    int64_t i64 = 0;
    double f64 = 0;
    bool b = false;
    st_gguf_string s;
    st_gguf_array arr;
    ASSERT_OK(st_gguf_get_u32(f, "t.u8", &u32, &e_));
    assert_int_equal(u32, 250);
    ASSERT_OK(st_gguf_get_u32(f, "t.u32", &u32, &e_));
    assert_int_equal(u32, 4000000000u);
    ASSERT_ERR(st_gguf_get_u32(f, "t.u64", &u32, &err), ST_ERROR_FORMAT, "does not fit in a uint32");
    ASSERT_ERR(st_gguf_get_u32(f, "t.i8", &u32, &err), ST_ERROR_FORMAT, "-100");
    ASSERT_ERR(st_gguf_get_u64(f, "t.i32", &u64, &err), ST_ERROR_FORMAT, "non-negative");
    ASSERT_OK(st_gguf_get_u64(f, "t.u64", &u64, &e_));
    assert_true(u64 == UINT64_MAX);
    ASSERT_OK(st_gguf_get_i64(f, "t.i16", &i64, &e_));
    assert_int_equal(i64, -32000);
    ASSERT_OK(st_gguf_get_i64(f, "t.u32", &i64, &e_));
    assert_int_equal(i64, 4000000000);
    ASSERT_ERR(st_gguf_get_i64(f, "t.u64", &i64, &err), ST_ERROR_FORMAT, "does not fit in an int64");
    ASSERT_ERR(st_gguf_get_i64(f, "t.f32", &i64, &err), ST_ERROR_FORMAT, "'t.f32' has type float32, expected");
    ASSERT_OK(st_gguf_get_f64(f, "t.f32", &f64, &e_));
    assert_true(f64 == (double)0.1f);
    ASSERT_OK(st_gguf_get_f64(f, "t.f64", &f64, &e_));
    assert_true(f64 == 1e300);
    ASSERT_ERR(st_gguf_get_f64(f, "t.u8", &f64, &err), ST_ERROR_FORMAT, "has type uint8, expected float32");
    ASSERT_OK(st_gguf_get_bool(f, "t.bool", &b, &e_));
    assert_true(b);
    ASSERT_ERR(st_gguf_get_bool(f, "t.u8", &b, &err), ST_ERROR_FORMAT, "expected bool");
    ASSERT_ERR(st_gguf_get_u32(f, "t.bool", &u32, &err), ST_ERROR_FORMAT, "has type bool");
    ASSERT_OK(st_gguf_get_str(f, "general.architecture", &s, &e_));
    assert_true(st_gguf_string_eq(s, "llama"));
    ASSERT_ERR(st_gguf_get_str(f, "a.str", &s, &err), ST_ERROR_FORMAT, "has type array, expected string");
    ASSERT_OK(st_gguf_get_arr(f, "a.str", &arr, &e_));
    assert_int_equal(arr.n, 3);
    ASSERT_ERR(st_gguf_get_arr(f, "t.str", &arr, &err), ST_ERROR_FORMAT, "expected array");
    ASSERT_ERR(st_gguf_get_u32(f, "llama.block_count", &u32, &err), ST_ERROR_INVALID,
               "missing key 'llama.block_count'");
    ASSERT_ERR(st_gguf_get_str(f, "nope", &s, &err), ST_ERROR_INVALID, "missing key");
    st_gguf_close(f);
    assert_int_equal(unlink(path), 0);

    assert_string_equal(st_gguf_type_name(ST_GGUF_TYPE_FLOAT64), "float64");
    assert_string_equal(st_gguf_type_name(ST_GGUF_TYPE_COUNT), "unknown");
    assert_int_equal(st_gguf_type_size(ST_GGUF_TYPE_UINT16), 2);
    assert_int_equal(st_gguf_type_size(ST_GGUF_TYPE_STRING), 0);
    assert_int_equal(st_gguf_type_size(99), 0);
    st_gguf_string hello = {5, "hello world"};
    assert_true(st_gguf_string_eq(hello, "hello"));
    assert_false(st_gguf_string_eq(hello, "hello "));
    assert_false(st_gguf_string_eq(hello, "hell"));
}

/* ---- writer errors ---- */

static st_gguf_writer *open_writer(const char *name, char *path) {
    tmp_path(path, 128, name);
    st_gguf_writer *w = NULL;
    ASSERT_OK(st_gguf_writer_open(path, &w, &e_));
    return w;
}

static void test_writer_metadata_errors(void **state) {
    (void)state;
    char path[128];
    st_error err = {0};
    st_gguf_writer *w = open_writer("meta.gguf", path);
    ASSERT_OK(st_gguf_writer_set_u32(w, "a.b", 1, &e_));
    ASSERT_ERR(st_gguf_writer_set_str(w, "a.b", "x", &err), ST_ERROR_INVALID, "duplicate GGUF metadata key 'a.b'");
    ASSERT_ERR(st_gguf_writer_set_u32(w, "", 1, &err), ST_ERROR_INVALID, "empty");
    ASSERT_ERR(st_gguf_writer_set_u32(w, "general.alignment", 48, &err), ST_ERROR_INVALID, "48 is not a power of two");
    ASSERT_ERR(st_gguf_writer_set_u32(w, "general.alignment", 0, &err), ST_ERROR_INVALID, "not a power of two");
    ASSERT_ERR(st_gguf_writer_set_i32(w, "general.alignment", 64, &err), ST_ERROR_INVALID, "must be a uint32");
    ASSERT_OK(st_gguf_writer_set_u32(w, "general.alignment", 1, &e_)); /* 2^0 is a power of two */
    uint8_t bools[] = {0, 1, 2};
    ASSERT_ERR(st_gguf_writer_set_arr(w, "b", ST_GGUF_TYPE_BOOL, bools, 3, &err), ST_ERROR_INVALID,
               "element 2 is 2");
    ASSERT_ERR(st_gguf_writer_set_arr(w, "s", ST_GGUF_TYPE_STRING, bools, 1, &err), ST_ERROR_INVALID,
               "fixed-size element type");
    st_gguf_value big = {.type = ST_GGUF_TYPE_UINT8, .v.u64 = 256};
    ASSERT_ERR(st_gguf_writer_set_value(w, "big", &big, &err), ST_ERROR_INVALID, "256 does not fit in uint8");
    st_gguf_value neg = {.type = ST_GGUF_TYPE_INT16, .v.i64 = -32769};
    ASSERT_ERR(st_gguf_writer_set_value(w, "neg", &neg, &err), ST_ERROR_INVALID, "-32769 does not fit in int16");
    st_gguf_value bad_type = {.type = (st_gguf_type)13};
    ASSERT_ERR(st_gguf_writer_set_value(w, "bt", &bad_type, &err), ST_ERROR_INVALID, "unknown value type 13");
    /* nesting: 8 levels are accepted, 9 are not */
    st_gguf_value levels[9];
    memset(levels, 0, sizeof(levels));
    levels[0] = (st_gguf_value){.type = ST_GGUF_TYPE_ARRAY, .v.arr = {.elem_type = ST_GGUF_TYPE_UINT8}};
    for (int i = 1; i < 9; i++)
        levels[i] = (st_gguf_value){.type = ST_GGUF_TYPE_ARRAY,
                                    .v.arr = {.elem_type = ST_GGUF_TYPE_ARRAY, .n = 1, .arrays = &levels[i - 1]}};
    ASSERT_OK(st_gguf_writer_set_value(w, "deep8", &levels[7], &e_));
    ASSERT_ERR(st_gguf_writer_set_value(w, "deep9", &levels[8], &err), ST_ERROR_INVALID, "deeper than 8");
    st_gguf_value not_arr = {.type = ST_GGUF_TYPE_UINT8};
    st_gguf_value holder = {.type = ST_GGUF_TYPE_ARRAY,
                            .v.arr = {.elem_type = ST_GGUF_TYPE_ARRAY, .n = 1, .arrays = &not_arr}};
    ASSERT_ERR(st_gguf_writer_set_value(w, "h", &holder, &err), ST_ERROR_INVALID, "has type uint8");
    const char *strs[] = {"a", NULL};
    ASSERT_ERR(st_gguf_writer_set_arr_str(w, "ss", strs, 2, &err), ST_ERROR_INVALID, "string 1 is NULL");
    ASSERT_OK(st_gguf_writer_write_header(w, &e_));
    ASSERT_ERR(st_gguf_writer_set_u8(w, "late", 1, &err), ST_ERROR_INVALID, "after the GGUF header");
    ASSERT_ERR(st_gguf_writer_write_header(w, &err), ST_ERROR_INVALID, "already written");
    ASSERT_ERR(st_gguf_writer_write_data(w, "x", 1, &err), ST_ERROR_INVALID, "only 0 remain");
    ASSERT_OK(st_gguf_writer_close(w, &e_));
    /* the file holds what was accepted */
    st_gguf_file *f = NULL;
    ASSERT_OK(st_gguf_open(path, &f, &e_));
    assert_int_equal(st_gguf_n_kv(f), 3);
    assert_int_equal(st_gguf_alignment(f), 1);
    assert_int_equal(st_gguf_find(f, "deep8")->v.arr.arrays[0].v.arr.n, 1);
    st_gguf_close(f);
    assert_int_equal(unlink(path), 0);
}

static void test_writer_tensor_errors(void **state) {
    (void)state;
    char path[128];
    st_error err = {0};
    st_gguf_writer *w = open_writer("tensors.gguf", path);
    int64_t ne[4] = {32, 2, 1, 1};
    char name63[64], name64[65];
    memset(name63, 'n', 63);
    name63[63] = '\0';
    memset(name64, 'n', 64);
    name64[64] = '\0';
    ASSERT_OK(st_gguf_writer_add_tensor(w, name63, ST_TYPE_F32, 2, ne, &e_));
    ASSERT_ERR(st_gguf_writer_add_tensor(w, name64, ST_TYPE_F32, 2, ne, &err), ST_ERROR_INVALID,
               "64 bytes; ggml allows at most 63");
    ASSERT_ERR(st_gguf_writer_add_tensor(w, name63, ST_TYPE_F16, 1, ne, &err), ST_ERROR_INVALID,
               "duplicate tensor name");
    ASSERT_ERR(st_gguf_writer_add_tensor(w, "", ST_TYPE_F16, 1, ne, &err), ST_ERROR_INVALID, "empty");
    ASSERT_ERR(st_gguf_writer_add_tensor(w, "d0", ST_TYPE_F16, 0, ne, &err), ST_ERROR_INVALID, "n_dims = 0");
    ASSERT_ERR(st_gguf_writer_add_tensor(w, "d5", ST_TYPE_F16, 5, ne, &err), ST_ERROR_INVALID, "n_dims = 5");
    int64_t zero[2] = {4, 0};
    ASSERT_ERR(st_gguf_writer_add_tensor(w, "z", ST_TYPE_F16, 2, zero, &err), ST_ERROR_INVALID, "ne[1] = 0");
    int64_t odd[1] = {33};
    ASSERT_ERR(st_gguf_writer_add_tensor(w, "q", ST_TYPE_Q8_0, 1, odd, &err), ST_ERROR_INVALID,
               "not a multiple of the q8_0 block size 32");
    ASSERT_ERR(st_gguf_writer_add_tensor(w, "u", (st_type)4, 1, odd, &err), ST_ERROR_INVALID, "unknown type id 4");
    int64_t huge[2] = {INT64_C(1) << 62, 8};
    ASSERT_ERR(st_gguf_writer_add_tensor(w, "h", ST_TYPE_F32, 2, huge, &err), ST_ERROR_INVALID, "overflows");
    int64_t small[1] = {3};
    ASSERT_OK(st_gguf_writer_add_tensor(w, "b", ST_TYPE_F16, 1, small, &e_));
    ASSERT_ERR(st_gguf_writer_write_data(w, "x", 1, &err), ST_ERROR_INVALID, "before the header");
    ASSERT_OK(st_gguf_writer_write_header(w, &e_));
    ASSERT_ERR(st_gguf_writer_add_tensor(w, "late", ST_TYPE_F16, 1, small, &err), ST_ERROR_INVALID,
               "after the GGUF header");
    uint8_t bytes[512] = {0};
    ASSERT_ERR(st_gguf_writer_write_data(w, bytes, 256 + 6 + 1, &err), ST_ERROR_INVALID,
               "263 bytes of tensor data given but only 262 remain");
    ASSERT_OK(st_gguf_writer_write_data(w, bytes, 256 + 2, &e_)); /* first tensor + 2 of 6 bytes */
    assert_false(file_exists(path)); /* the bytes go to a temporary file until close */
    ASSERT_ERR(st_gguf_writer_close(w, &err), ST_ERROR_INVALID, "tensor 'b' (index 1 of 2) received 2 of its 6 bytes");
    assert_false(file_exists(path)); /* the partial file is removed */

    w = open_writer("noheader.gguf", path);
    ASSERT_ERR(st_gguf_writer_close(w, &err), ST_ERROR_INVALID, "before the GGUF header was written");
    assert_false(file_exists(path));

    w = open_writer("aborted.gguf", path);
    ASSERT_OK(st_gguf_writer_write_header(w, &e_));
    st_gguf_writer_abort(w);
    assert_false(file_exists(path));

    ASSERT_ERR(st_gguf_writer_open("/nonexistent-dir/x.gguf", &w, &err), ST_ERROR_IO, "/nonexistent-dir/x.gguf");
    assert_null(w);
}

/* ---- reader errors on hand-built buffers ---- */

typedef struct buf {
    uint8_t p[4096];
    size_t n;
} buf;

static void b_bytes(buf *b, const void *p, size_t n) {
    assert_true(b->n + n <= sizeof(b->p));
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void b_u32(buf *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    b_bytes(b, x, 4);
}
static void b_u64(buf *b, uint64_t v) {
    b_u32(b, (uint32_t)v);
    b_u32(b, (uint32_t)(v >> 32));
}
static void b_str(buf *b, const char *s) {
    b_u64(b, strlen(s));
    b_bytes(b, s, strlen(s));
}
static void b_header(buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b->n = 0;
    b_bytes(b, "GGUF", 4);
    b_u32(b, version);
    b_u64(b, n_tensors);
    b_u64(b, n_kv);
}
static void b_tensor(buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off) {
    b_str(b, name);
    b_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) b_u64(b, ne[i]);
    b_u32(b, type);
    b_u64(b, off);
}
static void b_pad(buf *b, size_t align, size_t extra) {
    while (b->n % align) b->p[b->n++] = 0;
    assert_true(b->n + extra <= sizeof(b->p));
    memset(b->p + b->n, 0xab, extra);
    b->n += extra;
}

static void expect_format(const buf *b, const char *fragment) {
    st_error err = {0};
    st_gguf_file *f = (st_gguf_file *)1;
    st_status s = st_gguf_open_memory(b->p, b->n, &f, &err);
    if (s != ST_ERROR_FORMAT) fail_msg("expected a format error with \"%s\", got %d: %s", fragment, s, err.message);
    assert_null(f);
    if (!strstr(err.message, fragment)) fail_msg("message \"%s\" lacks \"%s\"", err.message, fragment);
}

static void expect_ok(const buf *b) {
    st_gguf_file *f = NULL;
    ASSERT_OK(st_gguf_open_memory(b->p, b->n, &f, &e_));
    st_gguf_close(f);
}

/* A valid file: one kv, two f32 tensors of 4 elements at offsets 0 and 32. */
static void b_valid(buf *b, uint64_t off0, uint64_t off1) {
    static const uint64_t ne[1] = {4};
    b_header(b, 3, 2, 1);
    b_str(b, "general.name");
    b_u32(b, ST_GGUF_TYPE_STRING);
    b_str(b, "tiny");
    b_tensor(b, "a", 1, ne, ST_TYPE_F32, off0);
    b_tensor(b, "b", 1, ne, ST_TYPE_F32, off1);
    b_pad(b, 32, 48);
}

static void test_reader_header_errors(void **state) {
    (void)state;
    buf b;
    b_valid(&b, 0, 32);
    expect_ok(&b);
    memcpy(b.p, "GGML", 4);
    expect_format(&b, "bad magic at byte offset 0: 47 47 4d 4c (\"GGML\")");
    b_valid(&b, 0, 32);
    b.p[4] = 2;
    expect_format(&b, "GGUF version 2 at byte offset 4 is not supported: only version 3");
    b.p[4] = 1;
    expect_format(&b, "version 1");
    b.p[4] = 4;
    expect_format(&b, "unsupported GGUF version 4 at byte offset 4: only version 3 is supported");
    b.p[4] = 0;
    b.p[7] = 3;
    expect_format(&b, "big-endian");
    b_valid(&b, 0, 32);
    b.n = 10;
    expect_format(&b, "truncated header: a GGUF header needs 24 bytes but the file has only 10");
    b.n = 3;
    expect_format(&b, "only 3");
    /* every proper prefix of a valid file is rejected cleanly */
    buf full;
    b_valid(&full, 0, 32);
    for (size_t n = 1; n < full.n; n++) {
        b = full;
        b.n = n;
        st_gguf_file *f = NULL;
        st_error err = {0};
        if (st_gguf_open_memory(b.p, b.n, &f, &err) != ST_ERROR_FORMAT) fail_msg("prefix of %zu bytes accepted", n);
    }
    b_header(&b, 3, 0, UINT64_MAX);
    expect_format(&b, "n_kv = 18446744073709551615 at byte offset 16 cannot be right");
    b_valid(&b, 0, 32);
    b.p[8] = 0xff, b.p[9] = 0xff, b.p[10] = 0xff; /* n_tensors = 16M */
    expect_format(&b, "n_tensors = 16777215 at byte offset 8 cannot be right");
    b_header(&b, 3, 0, 0); /* a file with nothing in it is valid */
    expect_ok(&b);
    st_error err = {0};
    st_gguf_file *f = NULL;
    ASSERT_ERR(st_gguf_open_memory(b.p, 0, &f, &err), ST_ERROR_FORMAT, "empty");
}

static void kv_file(buf *b, const char *key, uint32_t type) {
    b_header(b, 3, 0, 1);
    b_str(b, key);
    b_u32(b, type);
}

static void test_reader_metadata_errors(void **state) {
    (void)state;
    buf b;
    kv_file(&b, "x", 13);
    b_u32(&b, 0);
    expect_format(&b, "metadata key 'x': unknown metadata value type 13 at byte offset 33");
    /* the smallest possible entry (14 bytes) passes the count check, 13 bytes do not */
    kv_file(&b, "x", ST_GGUF_TYPE_UINT8);
    b_bytes(&b, "\x05", 1);
    assert_int_equal(b.n, 24 + 14);
    expect_ok(&b);
    kv_file(&b, "", ST_GGUF_TYPE_UINT8);
    b_bytes(&b, "\0", 1);
    expect_format(&b, "n_kv = 1 at byte offset 16 cannot be right: 1 key/value pairs of at least 14 bytes each do "
                      "not fit in the 13 bytes after the header");
    b_bytes(&b, "\0", 1);
    expect_format(&b, "metadata entry 0 at byte offset 24 has an empty key");
    kv_file(&b, "k", ST_GGUF_TYPE_STRING);
    b_u64(&b, 1000);
    b_bytes(&b, "abc", 3);
    expect_format(&b, "string value of metadata key 'k' at byte offset 37 has length 1000, which runs past the end");
    kv_file(&b, "k", ST_GGUF_TYPE_BOOL);
    b_bytes(&b, "\x02", 1);
    expect_format(&b, "is 2, must be 0 or 1");
    kv_file(&b, "k", ST_GGUF_TYPE_ARRAY);
    b_u32(&b, 42);
    b_u64(&b, 0);
    expect_format(&b, "metadata key 'k': unknown array element type 42 at byte offset 37");
    kv_file(&b, "k", ST_GGUF_TYPE_ARRAY);
    b_u32(&b, ST_GGUF_TYPE_UINT32);
    b_u64(&b, 3);
    b_u32(&b, 1);
    b_u32(&b, 2);
    expect_format(&b, "array of 3 uint32 elements at byte offset 37 cannot fit in the 8 remaining bytes");
    kv_file(&b, "k", ST_GGUF_TYPE_ARRAY);
    b_u32(&b, ST_GGUF_TYPE_STRING);
    b_u64(&b, UINT64_MAX / 2);
    expect_format(&b, "cannot fit");
    kv_file(&b, "k", ST_GGUF_TYPE_ARRAY); /* 2 strings, the second runs past the end */
    b_u32(&b, ST_GGUF_TYPE_STRING);
    b_u64(&b, 2);
    b_str(&b, "ok");
    b_u64(&b, 5);
    b_bytes(&b, "abcd", 4);
    expect_format(&b, "array string of metadata key 'k'");
    /* nesting: depth 8 parses, depth 9 is refused */
    for (int depth = 8; depth <= 9; depth++) {
        kv_file(&b, "deep", ST_GGUF_TYPE_ARRAY);
        for (int i = 1; i < depth; i++) {
            b_u32(&b, ST_GGUF_TYPE_ARRAY);
            b_u64(&b, 1);
        }
        b_u32(&b, ST_GGUF_TYPE_INT8);
        b_u64(&b, 1);
        b_bytes(&b, "\xff", 1);
        if (depth == 8) {
            st_gguf_file *f = NULL;
            ASSERT_OK(st_gguf_open_memory(b.p, b.n, &f, &e_));
            const st_gguf_array *a = &st_gguf_find(f, "deep")->v.arr;
            for (int i = 1; i < depth; i++) a = &a->arrays[0].v.arr;
            assert_int_equal(st_gguf_array_get_i64(a, 0), -1);
            st_gguf_close(f);
        } else {
            expect_format(&b, "metadata key 'deep': arrays nested deeper than 8 levels");
        }
    }
    b_header(&b, 3, 0, 2);
    b_str(&b, "dup");
    b_u32(&b, ST_GGUF_TYPE_UINT8);
    b_bytes(&b, "\x01", 1);
    b_str(&b, "dup");
    b_u32(&b, ST_GGUF_TYPE_UINT8);
    b_bytes(&b, "\x02", 1);
    expect_format(&b, "duplicate metadata key 'dup' at byte offsets 24 and 40");
    kv_file(&b, "general.alignment", ST_GGUF_TYPE_UINT64);
    b_u64(&b, 32);
    expect_format(&b, "general.alignment at byte offset 24 has type uint64, must be uint32");
    kv_file(&b, "general.alignment", ST_GGUF_TYPE_UINT32);
    b_u32(&b, 0);
    expect_format(&b, "general.alignment = 0 at byte offset 24 is not a power of two");
    kv_file(&b, "general.alignment", ST_GGUF_TYPE_UINT32);
    b_u32(&b, 96);
    expect_format(&b, "general.alignment = 96");
    kv_file(&b, "bad\x01key", 13); /* non-printable bytes are escaped in messages */
    b_u32(&b, 0);
    expect_format(&b, "metadata key 'bad\\x01key'");
}

static void one_tensor(buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off) {
    b_header(b, 3, 1, 0);
    b_tensor(b, name, n_dims, ne, type, off);
    b_pad(b, 32, 64);
}

static void test_reader_tensor_errors(void **state) {
    (void)state;
    buf b;
    const uint64_t ne4[1] = {4};
    char name63[64], name64[65];
    memset(name63, 't', 63);
    name63[63] = '\0';
    memset(name64, 't', 64);
    name64[64] = '\0';
    one_tensor(&b, name63, 1, ne4, ST_TYPE_F32, 0);
    expect_ok(&b);
    one_tensor(&b, name64, 1, ne4, ST_TYPE_F32, 0);
    expect_format(&b, "has 64 bytes; ggml allows at most 63");
    one_tensor(&b, "", 1, ne4, ST_TYPE_F32, 0);
    expect_format(&b, "tensor 0 at byte offset 24 has an empty name");
    one_tensor(&b, "t", 0, ne4, ST_TYPE_F32, 0);
    expect_format(&b, "tensor 't': n_dims = 0 at byte offset 33");
    const uint64_t ne5[5] = {1, 1, 1, 1, 1};
    one_tensor(&b, "t", 5, ne5, ST_TYPE_F32, 0);
    expect_format(&b, "n_dims = 5");
    const uint64_t ne_zero[2] = {4, 0};
    one_tensor(&b, "t", 2, ne_zero, ST_TYPE_F32, 0);
    expect_format(&b, "tensor 't': ne[1] = 0 at byte offset 45, must be > 0");
    const uint64_t ne_neg[2] = {4, UINT64_MAX};
    one_tensor(&b, "t", 2, ne_neg, ST_TYPE_F32, 0);
    expect_format(&b, "ne[1] = -1");
    const uint64_t ne_big[3] = {UINT64_C(1) << 40, UINT64_C(1) << 20, UINT64_C(1) << 3};
    one_tensor(&b, "t", 3, ne_big, ST_TYPE_F32, 0);
    expect_format(&b, "element count of its shape (byte offset 33) overflows int64");
    const uint64_t ne_bytes[1] = {UINT64_C(1) << 62}; /* 2^62 elements fit int64, 2^64 bytes do not */
    one_tensor(&b, "t", 1, ne_bytes, ST_TYPE_F32, 0);
    expect_format(&b, "byte size overflows");
    one_tensor(&b, "t", 1, ne4, 99, 0);
    expect_format(&b, "tensor 't': unknown tensor type id 99 at byte offset 45");
    one_tensor(&b, "t", 1, ne4, 4, 0); /* a removed ggml type */
    expect_format(&b, "unknown tensor type id 4");
    const uint64_t ne48[1] = {48};
    one_tensor(&b, "t", 1, ne48, ST_TYPE_Q4_K, 0);
    expect_format(&b, "ne[0] = 48 is not a multiple of the q4_K block size 256");
    one_tensor(&b, "t", 1, ne4, ST_TYPE_F32, 16);
    expect_format(&b, "data offset 16 at byte offset 49 is not a multiple of the alignment 32");
    one_tensor(&b, "t", 1, ne4, ST_TYPE_F32, 64); /* 64 + 16 > 64 bytes of data */
    expect_format(&b, "tensor 't': data at offset 64 (16 bytes) runs past the end of the file (data section starts at "
                      "byte 64, file size 128)");
    one_tensor(&b, "t", 1, ne4, ST_TYPE_F32, 48 & ~UINT64_C(31)); /* offset 32: ends at 48 <= 64 */
    expect_ok(&b);
    one_tensor(&b, "t", 1, ne4, ST_TYPE_F32, UINT64_MAX & ~UINT64_C(31));
    expect_format(&b, "runs past the end");
    /* the smallest tensor info (33 bytes) passes the count check, 32 bytes do not; the
     * data section would then start past the end of the file */
    b_header(&b, 3, 1, 0);
    b_tensor(&b, "t", 1, ne4, ST_TYPE_F32, 0);
    assert_int_equal(b.n, 24 + 33);
    expect_format(&b, "runs past the end");
    b.n--;
    expect_format(&b, "n_tensors = 1 at byte offset 8 cannot be right");

    b_valid(&b, 32, 0);
    expect_ok(&b); /* order of offsets need not follow the order of infos */
    b_valid(&b, 0, 0);
    expect_format(&b, "tensors 'a' (offset 0, 16 bytes) and 'b' (offset 0, 16 bytes) overlap");
    b_header(&b, 3, 3, 0);
    const uint64_t ne16[1] = {16}; /* 64 bytes: covers offsets 0..63 */
    b_tensor(&b, "big", 1, ne16, ST_TYPE_F32, 0);
    b_tensor(&b, "x", 1, ne4, ST_TYPE_F32, 64);
    b_tensor(&b, "inner", 1, ne4, ST_TYPE_F32, 32);
    b_pad(&b, 32, 96);
    expect_format(&b, "tensors 'big' (offset 0, 64 bytes) and 'inner' (offset 32, 16 bytes) overlap");
    b_header(&b, 3, 2, 0);
    b_tensor(&b, "same", 1, ne4, ST_TYPE_F32, 0);
    b_tensor(&b, "same", 1, ne4, ST_TYPE_F32, 32);
    b_pad(&b, 32, 64);
    expect_format(&b, "duplicate tensor name 'same' (tensors 0 and 1)");
}

static void test_open_errors(void **state) {
    (void)state;
    st_error err = {0};
    st_gguf_file *f = (st_gguf_file *)1;
    char path[128];
    ASSERT_ERR(st_gguf_open(tmp_dir, &f, &err), ST_ERROR_IO, "is a directory");
    assert_null(f);
    tmp_path(path, sizeof(path), "missing.gguf");
    ASSERT_ERR(st_gguf_open(path, &f, &err), ST_ERROR_IO, "missing.gguf");
    tmp_path(path, sizeof(path), "empty.gguf");
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    fclose(fp);
    ASSERT_ERR(st_gguf_open(path, &f, &err), ST_ERROR_FORMAT, "is empty (0 bytes)");
    fp = fopen(path, "wb");
    assert_non_null(fp);
    fputs("GGUF\x03", fp);
    fclose(fp);
    ASSERT_ERR(st_gguf_open(path, &f, &err), ST_ERROR_FORMAT, "empty.gguf: truncated header");
    assert_int_equal(unlink(path), 0);
}

/* A file with no tensors that ends before the data section's alignment padding is
 * accepted, and its data section is clamped to the end of the file (never past it). */
static void test_no_tensors_short_padding(void **state) {
    (void)state;
    unsigned char short_file[28] = {'G', 'G', 'U', 'F', 3, 0, 0, 0}; /* n_tensors 0, n_kv 0 */
    st_gguf_file *f = NULL;
    st_error err = {0};
    assert_int_equal(st_gguf_open_memory(short_file, sizeof(short_file), &f, &err), ST_OK);
    assert_int_equal(st_gguf_data_offset(f), 28); /* header end 24, padded to 32 > size: clamped */
    assert_true(st_gguf_data_offset(f) <= st_gguf_file_size(f));
    st_gguf_close(f);
    unsigned char full[32] = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
    assert_int_equal(st_gguf_open_memory(full, sizeof(full), &f, &err), ST_OK);
    assert_int_equal(st_gguf_data_offset(f), 32);
    st_gguf_close(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_default_alignment),
        cmocka_unit_test(test_roundtrip_alignment_64),
        cmocka_unit_test(test_typed_getters),
        cmocka_unit_test(test_writer_metadata_errors),
        cmocka_unit_test(test_writer_tensor_errors),
        cmocka_unit_test(test_reader_header_errors),
        cmocka_unit_test(test_reader_metadata_errors),
        cmocka_unit_test(test_reader_tensor_errors),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_no_tensors_short_padding),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
