/*
 * stride: the typed metadata getters of an open GGUF file: a key looked up with
 * st_gguf_find (gguf_read.c), its value converted with the value helpers (gguf_value.c).
 */
#include <inttypes.h>
#include <stdio.h>

#include "gguf/gguf_internal.h"

static st_status find_value(const st_gguf_file *f, const char *key, const st_gguf_value **out,
                            st_error *err) {
    *out = st_gguf_find(f, key);
    if (!*out) return st_error_set(err, ST_ERROR_INVALID, "missing key '%s' in the GGUF metadata", key);
    return ST_OK;
}

static st_status wrong_type(const char *key, const char *expected, const st_gguf_value *v, st_error *err) {
    return st_error_set(err, ST_ERROR_FORMAT, "metadata key '%s' has type %s, expected %s", key,
                        st_gguf_type_name(v->type), expected);
}

st_status st_gguf_get_u64(const st_gguf_file *f, const char *key, uint64_t *out, st_error *err) {
    const st_gguf_value *v;
    st_status s = find_value(f, key, &v, err);
    if (s != ST_OK) return s;
    if (st_gguf_type_is_unsigned(v->type)) {
        *out = v->v.u64;
        return ST_OK;
    }
    if (st_gguf_type_is_signed(v->type)) {
        if (v->v.i64 < 0)
            return st_error_set(err, ST_ERROR_FORMAT,
                                "metadata key '%s' is %" PRId64 " (%s), expected a non-negative integer",
                                key, v->v.i64, st_gguf_type_name(v->type));
        *out = (uint64_t)v->v.i64;
        return ST_OK;
    }
    return wrong_type(key, "an unsigned integer", v, err);
}

st_status st_gguf_get_u32(const st_gguf_file *f, const char *key, uint32_t *out, st_error *err) {
    uint64_t u = 0;
    st_status s = st_gguf_get_u64(f, key, &u, err);
    if (s != ST_OK) return s;
    if (u > UINT32_MAX)
        return st_error_set(err, ST_ERROR_FORMAT,
                            "metadata key '%s' is %" PRIu64 ", which does not fit in a uint32 (max %" PRIu32 ")",
                            key, u, UINT32_MAX);
    *out = (uint32_t)u;
    return ST_OK;
}

st_status st_gguf_get_i64(const st_gguf_file *f, const char *key, int64_t *out, st_error *err) {
    const st_gguf_value *v;
    st_status s = find_value(f, key, &v, err);
    if (s != ST_OK) return s;
    if (st_gguf_type_is_signed(v->type)) {
        *out = v->v.i64;
        return ST_OK;
    }
    if (st_gguf_type_is_unsigned(v->type)) {
        if (v->v.u64 > (uint64_t)INT64_MAX)
            return st_error_set(err, ST_ERROR_FORMAT,
                                "metadata key '%s' is %" PRIu64 ", which does not fit in an int64", key,
                                v->v.u64);
        *out = (int64_t)v->v.u64;
        return ST_OK;
    }
    return wrong_type(key, "an integer", v, err);
}

st_status st_gguf_get_f64(const st_gguf_file *f, const char *key, double *out, st_error *err) {
    const st_gguf_value *v;
    st_status s = find_value(f, key, &v, err);
    if (s != ST_OK) return s;
    if (v->type != ST_GGUF_TYPE_FLOAT32 && v->type != ST_GGUF_TYPE_FLOAT64)
        return wrong_type(key, "float32 or float64", v, err);
    *out = v->v.f64;
    return ST_OK;
}

st_status st_gguf_get_bool(const st_gguf_file *f, const char *key, bool *out, st_error *err) {
    const st_gguf_value *v;
    st_status s = find_value(f, key, &v, err);
    if (s != ST_OK) return s;
    if (v->type != ST_GGUF_TYPE_BOOL) return wrong_type(key, "bool", v, err);
    *out = v->v.b;
    return ST_OK;
}

st_status st_gguf_get_str(const st_gguf_file *f, const char *key, st_gguf_string *out, st_error *err) {
    const st_gguf_value *v;
    st_status s = find_value(f, key, &v, err);
    if (s != ST_OK) return s;
    if (v->type != ST_GGUF_TYPE_STRING) return wrong_type(key, "string", v, err);
    *out = v->v.str;
    return ST_OK;
}

st_status st_gguf_get_arr(const st_gguf_file *f, const char *key, st_gguf_array *out, st_error *err) {
    const st_gguf_value *v;
    st_status s = find_value(f, key, &v, err);
    if (s != ST_OK) return s;
    if (v->type != ST_GGUF_TYPE_ARRAY) return wrong_type(key, "array", v, err);
    *out = v->v.arr;
    return ST_OK;
}
