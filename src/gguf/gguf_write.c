/*
 * stride: GGUF v3 writer.
 *
 * Metadata (deep-copied) and tensor infos are collected in memory; write_header lays out
 * the data section (each tensor's offset aligned, in declaration order) and writes
 * everything up to the first tensor; write_data then streams tensor bytes through a large
 * stdio buffer, inserting the zero padding between tensors. The bytes go to a temporary
 * file beside the target (st_atomic_file, file_io.h) that close renames over it once
 * everything is written and on disk; any failure, and abort, remove the temporary file, so
 * a half-written model never appears under the final name and an existing file there is
 * never damaged.
 */
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf_internal.h"
#include "stride/file_io.h"

#define WRITER_IO_BUFFER ((size_t)4 << 20) /* 4 MiB: multi-GB files stream at disk speed */

typedef struct writer_kv {
    char *key;
    st_gguf_value value; /* owned deep copy */
} writer_kv;

typedef struct writer_tensor {
    char *name;
    uint32_t n_dims;
    int64_t ne[ST_GGUF_MAX_DIMS];
    st_type type;
    uint64_t nbytes;
    uint64_t offset; /* set by write_header */
} writer_tensor;

struct st_gguf_writer {
    char *path;
    st_atomic_file *file; /* the temporary file, renamed over path by close */
    FILE *fp;             /* its stream */
    char *iobuf;
    writer_kv *kvs;
    size_t n_kv, cap_kv;
    writer_tensor *tensors;
    size_t n_tensors, cap_tensors;
    uint64_t alignment;
    bool header_written;
    bool failed;     /* a write failed: the file is unusable */
    int write_errno; /* errno of the first failed write */
    uint64_t pos;    /* bytes handed to stdio so far */
    uint64_t data_total;   /* sum of tensor nbytes */
    uint64_t data_written; /* tensor bytes received so far */
    size_t cur;            /* tensor currently receiving data */
    uint64_t cur_done;     /* bytes of tensors[cur] received */
};

static const uint8_t zeros[4096];

/* ---- deep copies of values ---- */

static void value_free(st_gguf_value *v) {
    if (v->type == ST_GGUF_TYPE_STRING) {
        free((void *)v->v.str.data);
    } else if (v->type == ST_GGUF_TYPE_ARRAY) {
        st_gguf_array *a = &v->v.arr;
        free((void *)a->raw);
        if (a->strings) {
            for (uint64_t i = 0; i < a->n; i++) free((void *)a->strings[i].data);
            free((void *)a->strings);
        }
        if (a->arrays) {
            for (uint64_t i = 0; i < a->n; i++) value_free((st_gguf_value *)&a->arrays[i]);
            free((void *)a->arrays);
        }
    }
    memset(v, 0, sizeof(*v));
}

static st_status string_copy(st_gguf_string src, st_gguf_string *dst, const char *key, st_error *err) {
    if (src.len > 0 && !src.data)
        return st_error_set(err, ST_ERROR_INVALID, "metadata key '%s': string of %" PRIu64 " bytes has no data",
                            key, src.len);
    if (src.len >= SIZE_MAX)
        return st_error_set(err, ST_ERROR_NOMEM, "metadata key '%s': string of %" PRIu64 " bytes is too large",
                            key, src.len);
    char *p = malloc((size_t)src.len + 1);
    if (!p) return st_error_set(err, ST_ERROR_NOMEM, "metadata key '%s': out of memory copying a string", key);
    if (src.len) memcpy(p, src.data, (size_t)src.len);
    p[src.len] = '\0';
    dst->len = src.len;
    dst->data = p;
    return ST_OK;
}

/* Range of each integer type, so that a value is never silently truncated on write. */
static st_status check_scalar(const st_gguf_value *v, const char *key, st_error *err) {
    uint64_t umax = 0;
    int64_t imin = 0, imax = 0;
    switch (v->type) {
    case ST_GGUF_TYPE_UINT8: umax = UINT8_MAX; break;
    case ST_GGUF_TYPE_UINT16: umax = UINT16_MAX; break;
    case ST_GGUF_TYPE_UINT32: umax = UINT32_MAX; break;
    case ST_GGUF_TYPE_UINT64: umax = UINT64_MAX; break;
    case ST_GGUF_TYPE_INT8: imin = INT8_MIN, imax = INT8_MAX; break;
    case ST_GGUF_TYPE_INT16: imin = INT16_MIN, imax = INT16_MAX; break;
    case ST_GGUF_TYPE_INT32: imin = INT32_MIN, imax = INT32_MAX; break;
    case ST_GGUF_TYPE_INT64: imin = INT64_MIN, imax = INT64_MAX; break;
    case ST_GGUF_TYPE_FLOAT32:
        if (isfinite(v->v.f64) && fabs(v->v.f64) > FLT_MAX)
            return st_error_set(err, ST_ERROR_INVALID, "metadata key '%s': %g does not fit in a float32", key,
                                v->v.f64);
        return ST_OK;
    default: return ST_OK;
    }
    if (umax && v->v.u64 > umax)
        return st_error_set(err, ST_ERROR_INVALID, "metadata key '%s': %" PRIu64 " does not fit in %s", key,
                            v->v.u64, st_gguf_type_name(v->type));
    if (!umax && (v->v.i64 < imin || v->v.i64 > imax))
        return st_error_set(err, ST_ERROR_INVALID, "metadata key '%s': %" PRId64 " does not fit in %s", key,
                            v->v.i64, st_gguf_type_name(v->type));
    return ST_OK;
}

/* dst must be zeroed; on failure it holds what was copied so far (value_free it). */
static st_status value_copy(const st_gguf_value *src, st_gguf_value *dst, int depth, const char *key,
                            st_error *err) {
    if ((uint32_t)src->type >= ST_GGUF_TYPE_COUNT)
        return st_error_set(err, ST_ERROR_INVALID, "metadata key '%s': unknown value type %u", key,
                            (unsigned)src->type);
    if (src->type == ST_GGUF_TYPE_STRING) {
        dst->type = ST_GGUF_TYPE_STRING;
        return string_copy(src->v.str, &dst->v.str, key, err);
    }
    if (src->type != ST_GGUF_TYPE_ARRAY) {
        st_status s = check_scalar(src, key, err);
        if (s == ST_OK) *dst = *src;
        return s;
    }
    const st_gguf_array *a = &src->v.arr;
    if (depth + 1 > ST_GGUF_MAX_ARRAY_DEPTH)
        return st_error_set(err, ST_ERROR_INVALID, "metadata key '%s': arrays nested deeper than %d levels", key,
                            ST_GGUF_MAX_ARRAY_DEPTH);
    if ((uint32_t)a->elem_type >= ST_GGUF_TYPE_COUNT)
        return st_error_set(err, ST_ERROR_INVALID, "metadata key '%s': unknown array element type %u", key,
                            (unsigned)a->elem_type);
    dst->type = ST_GGUF_TYPE_ARRAY;
    st_gguf_array *d = &dst->v.arr;
    d->elem_type = a->elem_type;
    size_t esize = st_gguf_type_size(a->elem_type);
    if (a->n == 0) return ST_OK;
    if (esize) {
        if (!a->raw)
            return st_error_set(err, ST_ERROR_INVALID, "metadata key '%s': array of %" PRIu64 " %s has no data",
                                key, a->n, st_gguf_type_name(a->elem_type));
        if (a->n > SIZE_MAX / esize)
            return st_error_set(err, ST_ERROR_NOMEM, "metadata key '%s': array of %" PRIu64 " %s is too large",
                                key, a->n, st_gguf_type_name(a->elem_type));
        if (a->elem_type == ST_GGUF_TYPE_BOOL)
            for (uint64_t i = 0; i < a->n; i++)
                if (((const uint8_t *)a->raw)[i] > 1)
                    return st_error_set(err, ST_ERROR_INVALID,
                                        "metadata key '%s': bool array element %" PRIu64 " is %u, not 0 or 1", key,
                                        i, ((const uint8_t *)a->raw)[i]);
        void *raw = malloc((size_t)a->n * esize);
        if (!raw) return st_error_set(err, ST_ERROR_NOMEM, "metadata key '%s': out of memory copying an array", key);
        memcpy(raw, a->raw, (size_t)a->n * esize);
        d->raw = raw;
        d->n = a->n;
        return ST_OK;
    }
    bool strings = a->elem_type == ST_GGUF_TYPE_STRING;
    const void *src_elems = strings ? (const void *)a->strings : (const void *)a->arrays;
    if (!src_elems)
        return st_error_set(err, ST_ERROR_INVALID, "metadata key '%s': array of %" PRIu64 " %s has no elements",
                            key, a->n, st_gguf_type_name(a->elem_type));
    size_t elem = strings ? sizeof(st_gguf_string) : sizeof(st_gguf_value);
    if (a->n > SIZE_MAX / elem)
        return st_error_set(err, ST_ERROR_NOMEM, "metadata key '%s': array of %" PRIu64 " elements is too large",
                            key, a->n);
    void *table = calloc((size_t)a->n, elem);
    if (!table) return st_error_set(err, ST_ERROR_NOMEM, "metadata key '%s': out of memory copying an array", key);
    if (strings) d->strings = table;
    else d->arrays = table;
    d->n = a->n; /* value_free walks all n entries; the zeroed ones are harmless */
    for (uint64_t i = 0; i < a->n; i++) {
        st_status s;
        if (strings) {
            s = string_copy(a->strings[i], (st_gguf_string *)&d->strings[i], key, err);
        } else if (a->arrays[i].type != ST_GGUF_TYPE_ARRAY) {
            s = st_error_set(err, ST_ERROR_INVALID,
                             "metadata key '%s': element %" PRIu64 " of an array of arrays has type %s", key, i,
                             st_gguf_type_name(a->arrays[i].type));
        } else {
            s = value_copy(&a->arrays[i], (st_gguf_value *)&d->arrays[i], depth + 1, key, err);
        }
        if (s != ST_OK) return s;
    }
    return ST_OK;
}

/* ---- low-level output ---- */

static void put_bytes(st_gguf_writer *w, const void *p, size_t n) {
    if (w->failed || n == 0) return;
    if (fwrite(p, 1, n, w->fp) != n) {
        w->failed = true;
        w->write_errno = errno;
    }
    w->pos += n;
}

static void put_u32(st_gguf_writer *w, uint32_t v) {
    uint8_t b[4];
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
    put_bytes(w, b, sizeof(b));
}

static void put_u64(st_gguf_writer *w, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    put_bytes(w, b, sizeof(b));
}

static void put_zeros(st_gguf_writer *w, uint64_t n) {
    while (n > 0) {
        size_t take = n < sizeof(zeros) ? (size_t)n : sizeof(zeros);
        put_bytes(w, zeros, take);
        n -= take;
    }
}

static void put_string(st_gguf_writer *w, const char *data, uint64_t len) {
    put_u64(w, len);
    put_bytes(w, data, (size_t)len);
}

/* The value without its type tag (the tag is written by the caller: KV or array). */
static void put_payload(st_gguf_writer *w, const st_gguf_value *v) {
    switch (v->type) {
    case ST_GGUF_TYPE_UINT8:
    case ST_GGUF_TYPE_INT8: {
        uint8_t b = (uint8_t)v->v.u64;
        put_bytes(w, &b, 1);
        break;
    }
    case ST_GGUF_TYPE_BOOL: {
        uint8_t b = v->v.b ? 1 : 0;
        put_bytes(w, &b, 1);
        break;
    }
    case ST_GGUF_TYPE_UINT16:
    case ST_GGUF_TYPE_INT16: {
        uint16_t x = (uint16_t)v->v.u64;
        uint8_t b[2] = {(uint8_t)x, (uint8_t)(x >> 8)};
        put_bytes(w, b, 2);
        break;
    }
    case ST_GGUF_TYPE_UINT32:
    case ST_GGUF_TYPE_INT32: put_u32(w, (uint32_t)v->v.u64); break;
    case ST_GGUF_TYPE_UINT64:
    case ST_GGUF_TYPE_INT64: put_u64(w, v->v.u64); break;
    case ST_GGUF_TYPE_FLOAT32: {
        float f = (float)v->v.f64;
        uint32_t bits;
        memcpy(&bits, &f, sizeof(bits));
        put_u32(w, bits);
        break;
    }
    case ST_GGUF_TYPE_FLOAT64: {
        uint64_t bits;
        memcpy(&bits, &v->v.f64, sizeof(bits));
        put_u64(w, bits);
        break;
    }
    case ST_GGUF_TYPE_STRING: put_string(w, v->v.str.data, v->v.str.len); break;
    case ST_GGUF_TYPE_ARRAY: {
        const st_gguf_array *a = &v->v.arr;
        put_u32(w, (uint32_t)a->elem_type);
        put_u64(w, a->n);
        size_t esize = st_gguf_type_size(a->elem_type);
        if (esize) {
            put_bytes(w, a->raw, (size_t)a->n * esize); /* little-endian host, checked at open */
        } else if (a->elem_type == ST_GGUF_TYPE_STRING) {
            for (uint64_t i = 0; i < a->n; i++) put_string(w, a->strings[i].data, a->strings[i].len);
        } else {
            for (uint64_t i = 0; i < a->n; i++) put_payload(w, &a->arrays[i]);
        }
        break;
    }
    default: ST_ASSERT(!"put_payload: value type was validated when it was added");
    }
}

static st_status io_error(st_gguf_writer *w, const char *what, st_error *err) {
    return st_error_set(err, ST_ERROR_IO, "cannot write %s: %s (while %s; %s is unchanged)", w->path,
                        strerror(w->write_errno ? w->write_errno : EIO), what, w->path);
}

/* ---- open / metadata / tensors ---- */

st_status st_gguf_writer_open(const char *path, st_gguf_writer **out, st_error *err) {
    *out = NULL;
    const uint16_t probe = 1;
    if (*(const uint8_t *)&probe != 1)
        return st_error_set(err, ST_ERROR_UNSUPPORTED, "the GGUF writer needs a little-endian host");
    st_gguf_writer *w = calloc(1, sizeof(*w));
    if (!w) return st_error_set(err, ST_ERROR_NOMEM, "out of memory creating a GGUF writer for %s", path);
    w->alignment = ST_GGUF_DEFAULT_ALIGNMENT;
    w->path = strdup(path);
    w->iobuf = malloc(WRITER_IO_BUFFER);
    if (!w->path || !w->iobuf) {
        free(w->path);
        free(w->iobuf);
        free(w);
        return st_error_set(err, ST_ERROR_NOMEM, "out of memory creating a GGUF writer for %s", path);
    }
    st_status s = st_atomic_file_open(path, &w->file, err);
    if (s != ST_OK) {
        free(w->path);
        free(w->iobuf);
        free(w);
        return s;
    }
    w->fp = st_atomic_file_stream(w->file);
    setvbuf(w->fp, w->iobuf, _IOFBF, WRITER_IO_BUFFER);
    *out = w;
    return ST_OK;
}

static bool grow(void **arr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t n = *cap ? *cap : 16;
    while (n < need) {
        if (n > SIZE_MAX / 2 / elem) return false;
        n *= 2;
    }
    void *p = realloc(*arr, n * elem);
    if (!p) return false;
    *arr = p;
    *cap = n;
    return true;
}

static st_status add_kv(st_gguf_writer *w, const char *key, const st_gguf_value *v, st_error *err) {
    if (!key || !key[0]) return st_error_set(err, ST_ERROR_INVALID, "GGUF metadata key is empty");
    if (w->header_written)
        return st_error_set(err, ST_ERROR_INVALID, "cannot add metadata key '%s' after the GGUF header was written",
                            key);
    size_t klen = strlen(key);
    if (klen > ST_GGUF_MAX_KEY)
        return st_error_set(err, ST_ERROR_INVALID, "GGUF metadata key of %zu bytes is longer than the %d allowed",
                            klen, ST_GGUF_MAX_KEY);
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kvs[i].key, key) == 0)
            return st_error_set(err, ST_ERROR_INVALID, "duplicate GGUF metadata key '%s'", key);
    uint64_t alignment = 0;
    if (strcmp(key, "general.alignment") == 0) {
        if (v->type != ST_GGUF_TYPE_UINT32)
            return st_error_set(err, ST_ERROR_INVALID, "general.alignment must be a uint32, not a %s",
                                st_gguf_type_name(v->type));
        alignment = v->v.u64;
        if (alignment == 0 || (alignment & (alignment - 1)) != 0)
            return st_error_set(err, ST_ERROR_INVALID, "general.alignment = %" PRIu64 " is not a power of two",
                                alignment);
    }
    if (!grow((void **)&w->kvs, &w->cap_kv, w->n_kv + 1, sizeof(writer_kv)))
        return st_error_set(err, ST_ERROR_NOMEM, "out of memory adding metadata key '%s'", key);
    writer_kv *kv = &w->kvs[w->n_kv];
    memset(kv, 0, sizeof(*kv));
    st_status s = value_copy(v, &kv->value, 0, key, err);
    if (s == ST_OK && !(kv->key = strdup(key)))
        s = st_error_set(err, ST_ERROR_NOMEM, "out of memory adding metadata key '%s'", key);
    if (s != ST_OK) {
        value_free(&kv->value);
        return s;
    }
    if (alignment) w->alignment = alignment;
    w->n_kv++;
    return ST_OK;
}

#define DEFINE_SETTER(fn, ctype, gtype, field)                                                      \
    st_status fn(st_gguf_writer *w, const char *key, ctype x, st_error *err) {                      \
        st_gguf_value v;                                                                            \
        memset(&v, 0, sizeof(v));                                                                   \
        v.type = gtype;                                                                             \
        v.v.field = x;                                                                              \
        return add_kv(w, key, &v, err);                                                             \
    }

DEFINE_SETTER(st_gguf_writer_set_u8, uint8_t, ST_GGUF_TYPE_UINT8, u64)
DEFINE_SETTER(st_gguf_writer_set_i8, int8_t, ST_GGUF_TYPE_INT8, i64)
DEFINE_SETTER(st_gguf_writer_set_u16, uint16_t, ST_GGUF_TYPE_UINT16, u64)
DEFINE_SETTER(st_gguf_writer_set_i16, int16_t, ST_GGUF_TYPE_INT16, i64)
DEFINE_SETTER(st_gguf_writer_set_u32, uint32_t, ST_GGUF_TYPE_UINT32, u64)
DEFINE_SETTER(st_gguf_writer_set_i32, int32_t, ST_GGUF_TYPE_INT32, i64)
DEFINE_SETTER(st_gguf_writer_set_u64, uint64_t, ST_GGUF_TYPE_UINT64, u64)
DEFINE_SETTER(st_gguf_writer_set_i64, int64_t, ST_GGUF_TYPE_INT64, i64)
DEFINE_SETTER(st_gguf_writer_set_f32, float, ST_GGUF_TYPE_FLOAT32, f64)
DEFINE_SETTER(st_gguf_writer_set_f64, double, ST_GGUF_TYPE_FLOAT64, f64)
DEFINE_SETTER(st_gguf_writer_set_bool, bool, ST_GGUF_TYPE_BOOL, b)

st_status st_gguf_writer_set_str(st_gguf_writer *w, const char *key, const char *x, st_error *err) {
    if (!x) return st_error_set(err, ST_ERROR_INVALID, "metadata key '%s': string value is NULL", key ? key : "");
    st_gguf_value v;
    memset(&v, 0, sizeof(v));
    v.type = ST_GGUF_TYPE_STRING;
    v.v.str.len = strlen(x);
    v.v.str.data = x;
    return add_kv(w, key, &v, err);
}

st_status st_gguf_writer_set_arr(st_gguf_writer *w, const char *key, st_gguf_type elem_type, const void *data,
                                 uint64_t n, st_error *err) {
    if (st_gguf_type_size(elem_type) == 0)
        return st_error_set(err, ST_ERROR_INVALID,
                            "metadata key '%s': st_gguf_writer_set_arr takes a fixed-size element type, not %s "
                            "(use set_arr_str or set_value)",
                            key ? key : "", st_gguf_type_name(elem_type));
    st_gguf_value v;
    memset(&v, 0, sizeof(v));
    v.type = ST_GGUF_TYPE_ARRAY;
    v.v.arr.elem_type = elem_type;
    v.v.arr.n = n;
    v.v.arr.raw = data;
    return add_kv(w, key, &v, err);
}

st_status st_gguf_writer_set_arr_str(st_gguf_writer *w, const char *key, const char *const *strs, uint64_t n,
                                     st_error *err) {
    if (n > SIZE_MAX / sizeof(st_gguf_string))
        return st_error_set(err, ST_ERROR_NOMEM, "metadata key '%s': %" PRIu64 " strings are too many",
                            key ? key : "", n);
    if (n > 0 && !strs)
        return st_error_set(err, ST_ERROR_INVALID, "metadata key '%s': string array is NULL", key ? key : "");
    st_gguf_string *table = calloc(n ? (size_t)n : 1, sizeof(*table));
    if (!table) return st_error_set(err, ST_ERROR_NOMEM, "out of memory adding metadata key '%s'", key ? key : "");
    for (uint64_t i = 0; i < n; i++) {
        if (!strs[i]) {
            free(table);
            return st_error_set(err, ST_ERROR_INVALID, "metadata key '%s': string %" PRIu64 " is NULL",
                                key ? key : "", i);
        }
        table[i].len = strlen(strs[i]);
        table[i].data = strs[i];
    }
    st_gguf_value v;
    memset(&v, 0, sizeof(v));
    v.type = ST_GGUF_TYPE_ARRAY;
    v.v.arr.elem_type = ST_GGUF_TYPE_STRING;
    v.v.arr.n = n;
    v.v.arr.strings = table;
    st_status s = add_kv(w, key, &v, err);
    free(table);
    return s;
}

st_status st_gguf_writer_set_value(st_gguf_writer *w, const char *key, const st_gguf_value *v, st_error *err) {
    if (!v) return st_error_set(err, ST_ERROR_INVALID, "metadata key '%s': value is NULL", key ? key : "");
    return add_kv(w, key, v, err);
}

st_status st_gguf_writer_add_tensor(st_gguf_writer *w, const char *name, st_type type, uint32_t n_dims,
                                    const int64_t *ne, st_error *err) {
    if (!name || !name[0]) return st_error_set(err, ST_ERROR_INVALID, "tensor name is empty");
    if (w->header_written)
        return st_error_set(err, ST_ERROR_INVALID, "cannot add tensor '%s' after the GGUF header was written", name);
    size_t len = strlen(name);
    if (len > ST_GGUF_MAX_TENSOR_NAME)
        return st_error_set(err, ST_ERROR_INVALID, "tensor name '%s' has %zu bytes; ggml allows at most %d", name,
                            len, ST_GGUF_MAX_TENSOR_NAME);
    if (n_dims < 1 || n_dims > ST_GGUF_MAX_DIMS)
        return st_error_set(err, ST_ERROR_INVALID, "tensor '%s': n_dims = %" PRIu32 ", must be 1..%d", name, n_dims,
                            ST_GGUF_MAX_DIMS);
    if (!ne) return st_error_set(err, ST_ERROR_INVALID, "tensor '%s': shape is NULL", name);
    const st_type_traits *tr = st_type_get_traits((uint32_t)type);
    if (!tr) return st_error_set(err, ST_ERROR_INVALID, "tensor '%s': unknown type id %u", name, (unsigned)type);
    writer_tensor t;
    memset(&t, 0, sizeof(t));
    t.n_dims = n_dims;
    t.type = type;
    int64_t nel = 1;
    for (uint32_t i = 0; i < ST_GGUF_MAX_DIMS; i++) {
        t.ne[i] = i < n_dims ? ne[i] : 1;
        if (t.ne[i] <= 0)
            return st_error_set(err, ST_ERROR_INVALID, "tensor '%s': ne[%" PRIu32 "] = %" PRId64 ", must be > 0",
                                name, i, t.ne[i]);
        if (nel > INT64_MAX / t.ne[i])
            return st_error_set(err, ST_ERROR_INVALID, "tensor '%s': element count overflows int64", name);
        nel *= t.ne[i];
    }
    if (t.ne[0] % tr->block_size != 0)
        return st_error_set(err, ST_ERROR_INVALID,
                            "tensor '%s': ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRId64, name,
                            t.ne[0], tr->name, tr->block_size);
    size_t row;
    if (!st_type_row_bytes(type, t.ne[0], &row))
        return st_error_set(err, ST_ERROR_INVALID, "tensor '%s': row size overflows", name);
    uint64_t bytes = row;
    for (int i = 1; i < ST_GGUF_MAX_DIMS; i++) {
        if (bytes > UINT64_MAX / (uint64_t)t.ne[i] || bytes * (uint64_t)t.ne[i] > SIZE_MAX)
            return st_error_set(err, ST_ERROR_INVALID, "tensor '%s': byte size overflows", name);
        bytes *= (uint64_t)t.ne[i];
    }
    t.nbytes = bytes;
    for (size_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return st_error_set(err, ST_ERROR_INVALID, "duplicate tensor name '%s'", name);
    if (!grow((void **)&w->tensors, &w->cap_tensors, w->n_tensors + 1, sizeof(writer_tensor)) ||
        !(t.name = strdup(name)))
        return st_error_set(err, ST_ERROR_NOMEM, "out of memory adding tensor '%s'", name);
    w->tensors[w->n_tensors++] = t;
    return ST_OK;
}

/* ---- header and data ---- */

static bool align_up(uint64_t x, uint64_t alignment, uint64_t *out) {
    uint64_t rem = x % alignment;
    if (rem == 0) {
        *out = x;
        return true;
    }
    if (x > UINT64_MAX - (alignment - rem)) return false;
    *out = x + (alignment - rem);
    return true;
}

st_status st_gguf_writer_write_header(st_gguf_writer *w, st_error *err) {
    if (w->header_written)
        return st_error_set(err, ST_ERROR_INVALID, "%s: the GGUF header was already written", w->path);
    if (w->failed) return io_error(w, "writing an earlier part", err);
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        writer_tensor *t = &w->tensors[i];
        t->offset = off;
        if (off > UINT64_MAX - t->nbytes || !align_up(off + t->nbytes, w->alignment, &off))
            return st_error_set(err, ST_ERROR_INVALID, "%s: the tensor data section overflows 64 bits at '%s'",
                                w->path, t->name);
        w->data_total += t->nbytes; /* <= off, so it cannot overflow */
    }
    put_bytes(w, ST_GGUF_MAGIC, 4);
    put_u32(w, ST_GGUF_VERSION);
    put_u64(w, (uint64_t)w->n_tensors);
    put_u64(w, (uint64_t)w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        put_string(w, w->kvs[i].key, strlen(w->kvs[i].key));
        put_u32(w, (uint32_t)w->kvs[i].value.type);
        put_payload(w, &w->kvs[i].value);
    }
    for (size_t i = 0; i < w->n_tensors; i++) {
        const writer_tensor *t = &w->tensors[i];
        put_string(w, t->name, strlen(t->name));
        put_u32(w, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) put_u64(w, (uint64_t)t->ne[d]);
        put_u32(w, (uint32_t)t->type);
        put_u64(w, t->offset);
    }
    uint64_t end;
    if (!align_up(w->pos, w->alignment, &end))
        return st_error_set(err, ST_ERROR_INVALID, "%s: the header size overflows 64 bits", w->path);
    put_zeros(w, end - w->pos);
    w->header_written = true;
    if (w->failed) return io_error(w, "writing the header", err);
    return ST_OK;
}

st_status st_gguf_writer_write_data(st_gguf_writer *w, const void *data, size_t n, st_error *err) {
    if (!w->header_written)
        return st_error_set(err, ST_ERROR_INVALID,
                            "%s: tensor data written before the header (call st_gguf_writer_write_header first)",
                            w->path);
    if (w->failed) return io_error(w, "writing an earlier part", err);
    uint64_t left = w->data_total - w->data_written;
    if ((uint64_t)n > left)
        return st_error_set(err, ST_ERROR_INVALID,
                            "%s: %zu bytes of tensor data given but only %" PRIu64
                            " remain to be written for the declared tensors",
                            w->path, n, left);
    const uint8_t *p = data;
    while (n > 0) {
        writer_tensor *t = &w->tensors[w->cur];
        uint64_t want = t->nbytes - w->cur_done;
        size_t take = (uint64_t)n < want ? n : (size_t)want;
        put_bytes(w, p, take);
        p += take;
        n -= take;
        w->cur_done += take;
        w->data_written += take;
        if (w->cur_done == t->nbytes) {
            uint64_t end = t->offset + t->nbytes, next;
            if (!align_up(end, w->alignment, &next)) next = end; /* checked in write_header */
            put_zeros(w, next - end);
            w->cur++;
            w->cur_done = 0;
        }
    }
    if (w->failed) return io_error(w, "writing tensor data", err);
    return ST_OK;
}

static void writer_free(st_gguf_writer *w) {
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        value_free(&w->kvs[i].value);
    }
    free(w->kvs);
    for (size_t i = 0; i < w->n_tensors; i++) free(w->tensors[i].name);
    free(w->tensors);
    free(w->iobuf);
    free(w->path);
    free(w);
}

st_status st_gguf_writer_close(st_gguf_writer *w, st_error *err) {
    if (!w) return st_error_set(err, ST_ERROR_INVALID, "st_gguf_writer_close: writer is NULL");
    st_status s = ST_OK;
    if (!w->header_written) {
        s = st_error_set(err, ST_ERROR_INVALID, "%s: closed before the GGUF header was written", w->path);
    } else if (w->failed) {
        s = io_error(w, "writing an earlier part", err);
    } else if (w->cur < w->n_tensors) {
        const writer_tensor *t = &w->tensors[w->cur];
        s = st_error_set(err, ST_ERROR_INVALID,
                         "%s: tensor '%s' (index %zu of %zu) received %" PRIu64 " of its %" PRIu64
                         " bytes; all tensor data must be written before close",
                         w->path, t->name, w->cur, w->n_tensors, w->cur_done, t->nbytes);
    }
    if (s == ST_OK && (fflush(w->fp) != 0 || ferror(w->fp))) {
        w->write_errno = errno;
        s = io_error(w, "writing the last buffered bytes", err);
    }
    if (s == ST_OK) s = st_atomic_file_commit(w->file, err); /* fsync + rename over the target */
    else st_atomic_file_abort(w->file);
    writer_free(w);
    return s;
}

void st_gguf_writer_abort(st_gguf_writer *w) {
    if (!w) return;
    st_atomic_file_abort(w->file);
    writer_free(w);
}
