/*
 * gguf_write_sample OUT.gguf
 *
 * Writes, through st_gguf_writer, one GGUF file holding every metadata value type (each
 * scalar type, arrays of every numeric type, an empty array, an array of strings with an
 * empty and UTF-8 strings, nested arrays two and three levels deep), tensors of type F32,
 * F16, BF16, Q8_0 and I32 including a 3D one, and general.alignment = 64.
 *
 * tests/python/test_gguf_writer.py reads the file back with the `gguf` package (PyPI)
 * and checks every key, type, value, tensor shape and data byte against its own copy of
 * the values below: keep the two in step.
 *
 * Tensor data is streamed in 7-byte chunks so that chunks straddle tensor boundaries and
 * the writer's alignment padding.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stride/gguf.h"
#include "stride/types.h"

#define ALIGNMENT 64
#define CHUNK 7

typedef struct sample_tensor {
    const char *name;
    st_type type;
    uint32_t n_dims;
    int64_t ne[4];
} sample_tensor;

/* name, type, shape (ne[0] first: the contiguous dimension) */
static const sample_tensor tensors[] = {
    {"w.f32", ST_TYPE_F32, 2, {5, 3, 1, 1}},
    {"w.f16", ST_TYPE_F16, 2, {7, 2, 1, 1}},
    {"w.bf16", ST_TYPE_BF16, 2, {4, 2, 1, 1}},
    {"w.q8_0", ST_TYPE_Q8_0, 2, {64, 2, 1, 1}},
    {"w.i32", ST_TYPE_I32, 1, {6, 1, 1, 1}},
    {"w.3d", ST_TYPE_F32, 3, {3, 2, 4, 1}},
};
#define N_TENSORS (sizeof(tensors) / sizeof(tensors[0]))

static size_t tensor_nbytes(const sample_tensor *t) {
    size_t row = 0;
    if (!st_type_row_bytes(t->type, t->ne[0], &row)) abort();
    return row * (size_t)(t->ne[1] * t->ne[2] * t->ne[3]);
}

static int64_t n_elements(const sample_tensor *t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }

/* Element i of tensor k; the Python test computes the same values. All are exact in
 * their type (multiples of 1/4 in F16 range, integers in BF16's 8-bit mantissa). */
static void fill_tensor(size_t k, uint8_t *dst) {
    const sample_tensor *t = &tensors[k];
    int64_t n = n_elements(t);
    for (int64_t i = 0; i < n; i++) {
        switch (k) {
        case 0: { float v = (float)i * 0.25f - 1.0f; memcpy(dst + 4 * i, &v, 4); break; }
        case 1: { uint16_t h = st_f32_to_f16((float)i * 0.5f - 2.0f); memcpy(dst + 2 * i, &h, 2); break; }
        case 2: { uint16_t b = st_f32_to_bf16((float)i - 3.5f); memcpy(dst + 2 * i, &b, 2); break; }
        case 4: { int32_t v = (int32_t)i * 1000 - 2500; memcpy(dst + 4 * i, &v, 4); break; }
        case 5: { float v = (float)i + 100.0f; memcpy(dst + 4 * i, &v, 4); break; }
        default: break;
        }
    }
    if (k == 3) /* Q8_0: raw block bytes (f16 scale + 32 int8 per block), a byte pattern */
        for (size_t i = 0; i < tensor_nbytes(t); i++) dst[i] = (uint8_t)(i * 7 + 3);
}

#define TRY(call) \
    do { \
        if ((call) != ST_OK) goto fail; \
    } while (0)

static st_status write_metadata(st_gguf_writer *w, st_error *err) {
    TRY(st_gguf_writer_set_u32(w, "general.alignment", ALIGNMENT, err));
    TRY(st_gguf_writer_set_str(w, "general.architecture", "sample", err));
    TRY(st_gguf_writer_set_u8(w, "s.u8", 250, err));
    TRY(st_gguf_writer_set_i8(w, "s.i8", -100, err));
    TRY(st_gguf_writer_set_u16(w, "s.u16", 65000, err));
    TRY(st_gguf_writer_set_i16(w, "s.i16", -32000, err));
    TRY(st_gguf_writer_set_u32(w, "s.u32", 4000000000u, err));
    TRY(st_gguf_writer_set_i32(w, "s.i32", -2000000000, err));
    TRY(st_gguf_writer_set_f32(w, "s.f32", 3.25f, err));
    TRY(st_gguf_writer_set_bool(w, "s.bool_true", true, err));
    TRY(st_gguf_writer_set_bool(w, "s.bool_false", false, err));
    TRY(st_gguf_writer_set_str(w, "s.str", "h\xc3\xa9llo w\xc3\xb6rld \xe2\x9c\x93", err));
    TRY(st_gguf_writer_set_str(w, "s.str_empty", "", err));
    TRY(st_gguf_writer_set_u64(w, "s.u64", ((uint64_t)1 << 63) + 5, err));
    TRY(st_gguf_writer_set_i64(w, "s.i64", -((int64_t)1 << 62) - 7, err));
    TRY(st_gguf_writer_set_f64(w, "s.f64", 1.0 / 3.0, err));

    static const uint8_t a_u8[] = {0, 1, 255};
    static const int8_t a_i8[] = {-128, 0, 127};
    static const uint16_t a_u16[] = {0, 65535};
    static const int16_t a_i16[] = {-32768, 32767, -1};
    static const uint32_t a_u32[] = {1, 2, 4294967295u};
    static const int32_t a_i32[] = {-2147483647 - 1, 2147483647};
    static const float a_f32[] = {1.5f, -2.25f, 0.0f};
    static const uint8_t a_bool[] = {1, 0, 1};
    static const uint64_t a_u64[] = {0, UINT64_MAX};
    static const int64_t a_i64[] = {INT64_MIN, INT64_MAX};
    static const double a_f64[] = {0.1, -1e300};
    TRY(st_gguf_writer_set_arr(w, "a.u8", ST_GGUF_TYPE_UINT8, a_u8, 3, err));
    TRY(st_gguf_writer_set_arr(w, "a.i8", ST_GGUF_TYPE_INT8, a_i8, 3, err));
    TRY(st_gguf_writer_set_arr(w, "a.u16", ST_GGUF_TYPE_UINT16, a_u16, 2, err));
    TRY(st_gguf_writer_set_arr(w, "a.i16", ST_GGUF_TYPE_INT16, a_i16, 3, err));
    TRY(st_gguf_writer_set_arr(w, "a.u32", ST_GGUF_TYPE_UINT32, a_u32, 3, err));
    TRY(st_gguf_writer_set_arr(w, "a.i32", ST_GGUF_TYPE_INT32, a_i32, 2, err));
    TRY(st_gguf_writer_set_arr(w, "a.f32", ST_GGUF_TYPE_FLOAT32, a_f32, 3, err));
    TRY(st_gguf_writer_set_arr(w, "a.bool", ST_GGUF_TYPE_BOOL, a_bool, 3, err));
    TRY(st_gguf_writer_set_arr(w, "a.u64", ST_GGUF_TYPE_UINT64, a_u64, 2, err));
    TRY(st_gguf_writer_set_arr(w, "a.i64", ST_GGUF_TYPE_INT64, a_i64, 2, err));
    TRY(st_gguf_writer_set_arr(w, "a.f64", ST_GGUF_TYPE_FLOAT64, a_f64, 2, err));
    TRY(st_gguf_writer_set_arr(w, "a.empty_u32", ST_GGUF_TYPE_UINT32, a_u32, 0, err));
    static const char *const strs[] = {"alpha", "", "\xc3\xbcn\xc3\xaf" "c\xc3\xb6" "d\xc3\xa9",
                                       "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e"};
    TRY(st_gguf_writer_set_arr_str(w, "a.str", strs, 4, err));

    /* [[1, 2, 3], [], [4]] of int32 */
    static const int32_t n0[] = {1, 2, 3}, n2[] = {4};
    st_gguf_value inner[3];
    memset(inner, 0, sizeof(inner));
    const int32_t *parts[3] = {n0, NULL, n2};
    const uint64_t counts[3] = {3, 0, 1};
    for (int i = 0; i < 3; i++) {
        inner[i].type = ST_GGUF_TYPE_ARRAY;
        inner[i].v.arr.elem_type = ST_GGUF_TYPE_INT32;
        inner[i].v.arr.n = counts[i];
        inner[i].v.arr.raw = parts[i];
    }
    st_gguf_value outer;
    memset(&outer, 0, sizeof(outer));
    outer.type = ST_GGUF_TYPE_ARRAY;
    outer.v.arr.elem_type = ST_GGUF_TYPE_ARRAY;
    outer.v.arr.n = 3;
    outer.v.arr.arrays = inner;
    TRY(st_gguf_writer_set_value(w, "a.nested_i32", &outer, err));

    /* [["x", "yz"], ["\u00e9"]] */
    st_gguf_string s0[] = {{1, "x"}, {2, "yz"}}, s1[] = {{2, "\xc3\xa9"}};
    st_gguf_value sin[2];
    memset(sin, 0, sizeof(sin));
    for (int i = 0; i < 2; i++) {
        sin[i].type = ST_GGUF_TYPE_ARRAY;
        sin[i].v.arr.elem_type = ST_GGUF_TYPE_STRING;
        sin[i].v.arr.n = i == 0 ? 2 : 1;
        sin[i].v.arr.strings = i == 0 ? s0 : s1;
    }
    outer.v.arr.n = 2;
    outer.v.arr.arrays = sin;
    TRY(st_gguf_writer_set_value(w, "a.nested_str", &outer, err));

    /* [[[7], [8, 9]]] of uint8: three levels */
    static const uint8_t d0[] = {7}, d1[] = {8, 9};
    st_gguf_value leaf[2], mid;
    memset(leaf, 0, sizeof(leaf));
    memset(&mid, 0, sizeof(mid));
    for (int i = 0; i < 2; i++) {
        leaf[i].type = ST_GGUF_TYPE_ARRAY;
        leaf[i].v.arr.elem_type = ST_GGUF_TYPE_UINT8;
        leaf[i].v.arr.n = (uint64_t)i + 1;
        leaf[i].v.arr.raw = i == 0 ? (const void *)d0 : (const void *)d1;
    }
    mid.type = ST_GGUF_TYPE_ARRAY;
    mid.v.arr.elem_type = ST_GGUF_TYPE_ARRAY;
    mid.v.arr.n = 2;
    mid.v.arr.arrays = leaf;
    outer.v.arr.n = 1;
    outer.v.arr.arrays = &mid;
    TRY(st_gguf_writer_set_value(w, "a.nested3_u8", &outer, err));
    return ST_OK;
fail:
    return err->status;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT.gguf\n", argv[0]);
        return 2;
    }
    st_error err;
    memset(&err, 0, sizeof(err));
    st_gguf_writer *w = NULL;
    uint8_t *data = NULL;
    if (st_gguf_writer_open(argv[1], &w, &err) != ST_OK) goto fail;
    if (write_metadata(w, &err) != ST_OK) goto fail;
    size_t total = 0;
    for (size_t k = 0; k < N_TENSORS; k++) {
        TRY(st_gguf_writer_add_tensor(w, tensors[k].name, tensors[k].type, tensors[k].n_dims,
                                      tensors[k].ne, &err));
        total += tensor_nbytes(&tensors[k]);
    }
    TRY(st_gguf_writer_write_header(w, &err));

    /* all tensors back to back (the file pads between them, the stream does not) */
    data = malloc(total);
    if (!data) {
        fprintf(stderr, "gguf_write_sample: out of memory\n");
        st_gguf_writer_abort(w);
        return 1;
    }
    for (size_t k = 0, off = 0; k < N_TENSORS; off += tensor_nbytes(&tensors[k]), k++) fill_tensor(k, data + off);
    for (size_t off = 0; off < total; off += CHUNK)
        TRY(st_gguf_writer_write_data(w, data + off, total - off < CHUNK ? total - off : CHUNK, &err));
    free(data);
    data = NULL;
    st_gguf_writer *done = w;
    w = NULL; /* close frees it whatever the result */
    if (st_gguf_writer_close(done, &err) != ST_OK) goto fail;
    printf("wrote %s: %zu tensors, %zu data bytes\n", argv[1], (size_t)N_TENSORS, total);
    return 0;
fail:
    fprintf(stderr, "gguf_write_sample: %s\n", err.message);
    if (w) st_gguf_writer_abort(w);
    free(data);
    return 1;
}
