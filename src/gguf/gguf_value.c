/*
 * stride: GGUF metadata values on their own, without a file: type names and sizes, string
 * comparison and escaping, scalar decoding and array element access. The reader
 * (gguf_read.c) and the getters (gguf_meta.c) build on this file; it depends on neither.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gguf/gguf_internal.h"

static const char *const type_names[ST_GGUF_TYPE_COUNT] = {
    [ST_GGUF_TYPE_UINT8] = "uint8",     [ST_GGUF_TYPE_INT8] = "int8",
    [ST_GGUF_TYPE_UINT16] = "uint16",   [ST_GGUF_TYPE_INT16] = "int16",
    [ST_GGUF_TYPE_UINT32] = "uint32",   [ST_GGUF_TYPE_INT32] = "int32",
    [ST_GGUF_TYPE_FLOAT32] = "float32", [ST_GGUF_TYPE_BOOL] = "bool",
    [ST_GGUF_TYPE_STRING] = "string",   [ST_GGUF_TYPE_ARRAY] = "array",
    [ST_GGUF_TYPE_UINT64] = "uint64",   [ST_GGUF_TYPE_INT64] = "int64",
    [ST_GGUF_TYPE_FLOAT64] = "float64",
};

static const size_t type_sizes[ST_GGUF_TYPE_COUNT] = {
    [ST_GGUF_TYPE_UINT8] = 1,   [ST_GGUF_TYPE_INT8] = 1,   [ST_GGUF_TYPE_UINT16] = 2,
    [ST_GGUF_TYPE_INT16] = 2,   [ST_GGUF_TYPE_UINT32] = 4, [ST_GGUF_TYPE_INT32] = 4,
    [ST_GGUF_TYPE_FLOAT32] = 4, [ST_GGUF_TYPE_BOOL] = 1,   [ST_GGUF_TYPE_STRING] = 0,
    [ST_GGUF_TYPE_ARRAY] = 0,   [ST_GGUF_TYPE_UINT64] = 8, [ST_GGUF_TYPE_INT64] = 8,
    [ST_GGUF_TYPE_FLOAT64] = 8,
};

const char *st_gguf_type_name(uint32_t type) {
    return type < ST_GGUF_TYPE_COUNT ? type_names[type] : "unknown";
}

size_t st_gguf_type_size(uint32_t type) { return type < ST_GGUF_TYPE_COUNT ? type_sizes[type] : 0; }

bool st_gguf_string_eq(st_gguf_string s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.data, c, n) == 0);
}

const char *st_gguf_format_string(char *buf, size_t cap, const char *data, uint64_t len) {
    ST_ASSERT(cap >= 8);
    size_t n = 0;
    for (uint64_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)data[i];
        size_t need = (c >= 0x20 && c < 0x7f) ? 1 : 4;
        if (n + need + 4 > cap) { /* keep room for "..." and the NUL */
            memcpy(buf + n, "...", 4);
            return buf;
        }
        if (need == 1) {
            buf[n++] = (char)c;
        } else {
            snprintf(buf + n, 5, "\\x%02x", c);
            n += 4;
        }
    }
    buf[n] = '\0';
    return buf;
}

void st_gguf_decode_scalar(uint32_t type, const uint8_t *p, st_gguf_value *out) {
    out->type = (st_gguf_type)type;
    switch (type) {
    case ST_GGUF_TYPE_UINT8: out->v.u64 = p[0]; break;
    case ST_GGUF_TYPE_INT8: out->v.i64 = (int8_t)p[0]; break;
    case ST_GGUF_TYPE_UINT16: out->v.u64 = st_gguf_load_u16(p); break;
    case ST_GGUF_TYPE_INT16: out->v.i64 = (int16_t)st_gguf_load_u16(p); break;
    case ST_GGUF_TYPE_UINT32: out->v.u64 = st_gguf_load_u32(p); break;
    case ST_GGUF_TYPE_INT32: out->v.i64 = (int32_t)st_gguf_load_u32(p); break;
    case ST_GGUF_TYPE_UINT64: out->v.u64 = st_gguf_load_u64(p); break;
    case ST_GGUF_TYPE_INT64: out->v.i64 = (int64_t)st_gguf_load_u64(p); break;
    case ST_GGUF_TYPE_BOOL: out->v.b = p[0] != 0; break;
    case ST_GGUF_TYPE_FLOAT32: {
        uint32_t bits = st_gguf_load_u32(p);
        float f;
        memcpy(&f, &bits, sizeof(f));
        out->v.f64 = (double)f;
        break;
    }
    case ST_GGUF_TYPE_FLOAT64: {
        uint64_t bits = st_gguf_load_u64(p);
        memcpy(&out->v.f64, &bits, sizeof(out->v.f64));
        break;
    }
    default: ST_ASSERT(!"st_gguf_decode_scalar: not a fixed-size type");
    }
}

/* Saturating double -> int64 (NaN -> 0): a plain cast of an out-of-range double is UB. */
static int64_t f64_to_i64_saturated(double d) {
    if (isnan(d)) return 0;
    if (d >= 9223372036854775808.0) return INT64_MAX;
    if (d < -9223372036854775808.0) return INT64_MIN;
    return (int64_t)d;
}

static st_gguf_value array_element(const st_gguf_array *a, uint64_t i) {
    ST_ASSERT(i < a->n);
    size_t size = st_gguf_type_size(a->elem_type);
    ST_ASSERT(size != 0); /* only fixed-size element types have raw elements */
    st_gguf_value v;
    st_gguf_decode_scalar(a->elem_type, (const uint8_t *)a->raw + i * size, &v);
    return v;
}

/* Integers convert exactly; a uint64 above INT64_MAX saturates; floats truncate toward
 * zero (saturating); bool is 0/1. */
int64_t st_gguf_array_get_i64(const st_gguf_array *a, uint64_t i) {
    st_gguf_value v = array_element(a, i);
    if (st_gguf_type_is_unsigned(v.type)) return v.v.u64 > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v.v.u64;
    if (st_gguf_type_is_signed(v.type)) return v.v.i64;
    if (v.type == ST_GGUF_TYPE_BOOL) return v.v.b ? 1 : 0;
    return f64_to_i64_saturated(v.v.f64);
}

double st_gguf_array_get_f64(const st_gguf_array *a, uint64_t i) {
    st_gguf_value v = array_element(a, i);
    if (st_gguf_type_is_unsigned(v.type)) return (double)v.v.u64;
    if (st_gguf_type_is_signed(v.type)) return (double)v.v.i64;
    if (v.type == ST_GGUF_TYPE_BOOL) return v.v.b ? 1.0 : 0.0;
    return v.v.f64;
}
