/*
 * stride: GGUF v3 reader.
 *
 * The file is mapped read-only and parsed with a cursor that checks every read against
 * the end of the buffer. Counts are checked against the bytes that remain before anything
 * is allocated (count * smallest possible encoding <= remaining), and variable-size array
 * elements (strings, nested arrays) are validated in a first pass before their tables are
 * allocated, so a hostile count can never trigger an allocation larger than a small
 * multiple of the bytes that actually hold the elements.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf_internal.h"
#include "stride/file_io.h"

#define HEADER_BYTES 24 /* magic, version, n_tensors, n_kv */
/* Smallest encodings: a KV is a key of >= 1 byte (8 + 1), a type (4) and a value of >= 1
 * byte; a tensor info is a name of >= 1 byte (8 + 1), n_dims (4), one ne (8), type (4)
 * and offset (8). */
#define MIN_KV_BYTES 14
#define MIN_TENSOR_INFO_BYTES 33
#define MIN_NESTED_ARRAY_BYTES 12 /* element type + count */
#define NAME_BUF 96               /* a key or tensor name, escaped and cut for a message */

typedef struct arena_block {
    struct arena_block *next;
    alignas(max_align_t) unsigned char data[];
} arena_block;

struct st_gguf_file {
    const uint8_t *base;
    uint64_t size;
    void *map; /* non-NULL when the file was mmap'd */
    size_t map_size;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    st_gguf_kv *kvs;
    uint64_t n_kv;
    st_gguf_tensor_info *tensors;
    uint64_t n_tensors;
    uint64_t *by_name; /* tensor indices sorted by (name length, name bytes) */
    arena_block *blocks;  /* string tables and nested-array tables */
};

typedef struct parser {
    st_gguf_file *f;
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
} parser;

static void *arena_alloc(st_gguf_file *f, size_t bytes) {
    if (bytes > SIZE_MAX - sizeof(arena_block)) return NULL;
    arena_block *b = malloc(sizeof(arena_block) + bytes);
    if (!b) return NULL;
    b->next = f->blocks;
    f->blocks = b;
    return b->data;
}

static bool grow(void **arr, uint64_t *cap, uint64_t need, size_t elem) {
    if (need <= *cap) return true;
    uint64_t n = *cap ? *cap : 16;
    while (n < need) n *= 2;
    if (n > SIZE_MAX / elem) return false;
    void *p = realloc(*arr, (size_t)n * elem);
    if (!p) return false;
    *arr = p;
    *cap = n;
    return true;
}

static const char *fmt_name(char *buf, st_gguf_string s) {
    return st_gguf_format_string(buf, NAME_BUF, s.data, s.len);
}

/* ---- cursor reads: every one checks the end of the buffer ---- */

static st_status need(parser *p, uint64_t n, const char *what, const char *ctx, st_error *err) {
    if (n <= p->size - p->pos) return ST_OK;
    return st_error_set(err, ST_ERROR_FORMAT,
                        "truncated file: %s%s%s at byte offset %" PRIu64 " needs %" PRIu64
                        " bytes but only %" PRIu64 " remain (file size %" PRIu64 ")",
                        what, ctx ? " of " : "", ctx ? ctx : "", p->pos, n, p->size - p->pos, p->size);
}

static st_status read_u32(parser *p, uint32_t *out, const char *what, const char *ctx, st_error *err) {
    st_status s = need(p, 4, what, ctx, err);
    if (s != ST_OK) return s;
    *out = st_gguf_load_u32(p->base + p->pos);
    p->pos += 4;
    return ST_OK;
}

static st_status read_u64(parser *p, uint64_t *out, const char *what, const char *ctx, st_error *err) {
    st_status s = need(p, 8, what, ctx, err);
    if (s != ST_OK) return s;
    *out = st_gguf_load_u64(p->base + p->pos);
    p->pos += 8;
    return ST_OK;
}

static st_status read_string(parser *p, st_gguf_string *out, const char *what, const char *ctx, st_error *err) {
    uint64_t at = p->pos, len;
    st_status s = read_u64(p, &len, what, ctx, err);
    if (s != ST_OK) return s;
    if (len > p->size - p->pos)
        return st_error_set(err, ST_ERROR_FORMAT,
                            "%s%s%s at byte offset %" PRIu64 " has length %" PRIu64
                            ", which runs past the end of the file (%" PRIu64 " bytes remain)",
                            what, ctx ? " of " : "", ctx ? ctx : "", at, len, p->size - p->pos);
    if (out) {
        out->len = len;
        out->data = (const char *)(p->base + p->pos);
    }
    p->pos += len;
    return ST_OK;
}

/* ---- metadata values ---- */

static st_status check_bool(parser *p, uint64_t at, uint8_t b, const char *ctx, st_error *err) {
    if (b <= 1) return ST_OK;
    return st_error_set(err, ST_ERROR_FORMAT, "bool of %s at byte offset %" PRIu64 " is %u, must be 0 or 1", ctx,
                        at, b);
}

/* Reads an array body (element type, count, elements) at the cursor. With out == NULL the
 * bytes are only validated and skipped, nothing is allocated. depth 1 = a plain array. */
static st_status parse_array(parser *p, int depth, st_gguf_array *out, const char *ctx, st_error *err) {
    uint64_t at = p->pos;
    if (depth > ST_GGUF_MAX_ARRAY_DEPTH)
        return st_error_set(err, ST_ERROR_FORMAT,
                            "%s: arrays nested deeper than %d levels at byte offset %" PRIu64, ctx,
                            ST_GGUF_MAX_ARRAY_DEPTH, at);
    uint32_t et;
    uint64_t n;
    st_status s = read_u32(p, &et, "array element type", ctx, err);
    if (s == ST_OK) s = read_u64(p, &n, "array length", ctx, err);
    if (s != ST_OK) return s;
    if (et >= ST_GGUF_TYPE_COUNT)
        return st_error_set(err, ST_ERROR_FORMAT,
                            "%s: unknown array element type %" PRIu32 " at byte offset %" PRIu64
                            " (valid types are 0..%d)",
                            ctx, et, at, ST_GGUF_TYPE_COUNT - 1);
    uint64_t rem = p->size - p->pos;
    size_t es = st_gguf_type_size(et);
    uint64_t min = es ? es : et == ST_GGUF_TYPE_STRING ? 8 : MIN_NESTED_ARRAY_BYTES;
    if (n > rem / min)
        return st_error_set(err, ST_ERROR_FORMAT,
                            "%s: array of %" PRIu64 " %s elements at byte offset %" PRIu64
                            " cannot fit in the %" PRIu64 " remaining bytes (each takes at least %" PRIu64 ")",
                            ctx, n, st_gguf_type_name(et), at, rem, min);
    if (out) {
        memset(out, 0, sizeof(*out));
        out->elem_type = (st_gguf_type)et;
        out->n = n;
    }
    if (es) {
        const uint8_t *raw = p->base + p->pos;
        if (et == ST_GGUF_TYPE_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if ((s = check_bool(p, p->pos + i, raw[i], ctx, err)) != ST_OK) return s;
        if (out) out->raw = raw;
        p->pos += n * es; /* n * es <= rem: checked above */
        return ST_OK;
    }
    uint64_t start = p->pos;
    for (uint64_t i = 0; i < n; i++) {
        s = et == ST_GGUF_TYPE_STRING ? read_string(p, NULL, "array string", ctx, err)
                                      : parse_array(p, depth + 1, NULL, ctx, err);
        if (s != ST_OK) return s;
    }
    if (!out || n == 0) return ST_OK;
    /* Second pass: the elements are valid and occupy >= min * n bytes of the file, so the
     * table below is at most a few times the size of what it describes. */
    uint64_t end = p->pos;
    p->pos = start;
    size_t elem = et == ST_GGUF_TYPE_STRING ? sizeof(st_gguf_string) : sizeof(st_gguf_value);
    void *table = n <= SIZE_MAX / elem ? arena_alloc(p->f, (size_t)n * elem) : NULL;
    if (!table)
        return st_error_set(err, ST_ERROR_NOMEM, "%s: out of memory for an array of %" PRIu64 " elements", ctx, n);
    if (et == ST_GGUF_TYPE_STRING) {
        st_gguf_string *strs = table;
        for (uint64_t i = 0; i < n; i++)
            if ((s = read_string(p, &strs[i], "array string", ctx, err)) != ST_OK) return s;
        out->strings = strs;
    } else {
        st_gguf_value *vals = table;
        for (uint64_t i = 0; i < n; i++) {
            memset(&vals[i], 0, sizeof(vals[i]));
            vals[i].type = ST_GGUF_TYPE_ARRAY;
            if ((s = parse_array(p, depth + 1, &vals[i].v.arr, ctx, err)) != ST_OK) return s;
        }
        out->arrays = vals;
    }
    ST_ASSERT(p->pos == end);
    return ST_OK;
}

static st_status parse_value(parser *p, uint32_t type, st_gguf_value *out, const char *ctx, st_error *err) {
    memset(out, 0, sizeof(*out));
    out->type = (st_gguf_type)type;
    size_t es = st_gguf_type_size(type);
    if (es) {
        st_status s = need(p, es, "value", ctx, err);
        if (s == ST_OK && type == ST_GGUF_TYPE_BOOL) s = check_bool(p, p->pos, p->base[p->pos], ctx, err);
        if (s != ST_OK) return s;
        st_gguf_decode_scalar(type, p->base + p->pos, out);
        p->pos += es;
        return ST_OK;
    }
    if (type == ST_GGUF_TYPE_STRING) return read_string(p, &out->v.str, "string value", ctx, err);
    return parse_array(p, 1, &out->v.arr, ctx, err);
}

/* ---- duplicate detection: sort (length, bytes, index) and compare neighbours ---- */

typedef struct name_ref {
    st_gguf_string s;
    uint64_t index;
} name_ref;

static int name_cmp(st_gguf_string a, st_gguf_string b) {
    if (a.len != b.len) return a.len < b.len ? -1 : 1;
    return a.len ? memcmp(a.data, b.data, (size_t)a.len) : 0;
}

static int name_ref_cmp(const void *x, const void *y) {
    const name_ref *a = x, *b = y;
    int c = name_cmp(a->s, b->s);
    if (c) return c;
    return a->index < b->index ? -1 : a->index > b->index;
}

/* Sorts refs; returns the index in refs of the first member of a duplicate pair, or n. */
static uint64_t find_duplicate(name_ref *refs, uint64_t n) {
    if (n > 1) qsort(refs, (size_t)n, sizeof(*refs), name_ref_cmp);
    for (uint64_t i = 1; i < n; i++)
        if (name_cmp(refs[i - 1].s, refs[i].s) == 0) return i - 1;
    return n;
}

/* ---- header sections ---- */

static st_status parse_header(parser *p, st_error *err) {
    st_gguf_file *f = p->f;
    if (p->size >= 4 && memcmp(p->base, ST_GGUF_MAGIC, 4) != 0) {
        const uint8_t *m = p->base;
        char shown[5];
        for (int i = 0; i < 4; i++) shown[i] = (m[i] >= 0x20 && m[i] < 0x7f) ? (char)m[i] : '.';
        shown[4] = '\0';
        return st_error_set(err, ST_ERROR_FORMAT,
                            "bad magic at byte offset 0: %02x %02x %02x %02x (\"%s\"), expected 47 47 55 46 "
                            "(\"GGUF\"): not a GGUF file",
                            m[0], m[1], m[2], m[3], shown);
    }
    if (p->size < HEADER_BYTES)
        return st_error_set(err, ST_ERROR_FORMAT,
                            "truncated header: a GGUF header needs %d bytes but the file has only %" PRIu64,
                            HEADER_BYTES, p->size);
    p->pos = 4;
    f->version = st_gguf_load_u32(p->base + 4);
    if (f->version != ST_GGUF_VERSION) {
        if (f->version == 1 || f->version == 2)
            return st_error_set(err, ST_ERROR_FORMAT,
                                "GGUF version %" PRIu32 " at byte offset 4 is not supported: only version 3 is "
                                "(re-convert the model with a current llama.cpp)",
                                f->version);
        if ((f->version & 0xffffu) == 0 && (f->version >> 16) != 0)
            return st_error_set(err, ST_ERROR_FORMAT,
                                "GGUF version field at byte offset 4 is 0x%08" PRIx32
                                ": this looks like a big-endian GGUF file; only little-endian version 3 is "
                                "supported",
                                f->version);
        return st_error_set(err, ST_ERROR_FORMAT,
                            "unsupported GGUF version %" PRIu32 " at byte offset 4: only version 3 is supported",
                            f->version);
    }
    f->n_tensors = st_gguf_load_u64(p->base + 8);
    f->n_kv = st_gguf_load_u64(p->base + 16);
    p->pos = HEADER_BYTES;
    uint64_t rem = p->size - p->pos;
    if (f->n_kv > rem / MIN_KV_BYTES)
        return st_error_set(err, ST_ERROR_FORMAT,
                            "n_kv = %" PRIu64 " at byte offset 16 cannot be right: %" PRIu64
                            " key/value pairs of at least %d bytes each do not fit in the %" PRIu64
                            " bytes after the header",
                            f->n_kv, f->n_kv, MIN_KV_BYTES, rem);
    rem -= f->n_kv * MIN_KV_BYTES;
    if (f->n_tensors > rem / MIN_TENSOR_INFO_BYTES)
        return st_error_set(err, ST_ERROR_FORMAT,
                            "n_tensors = %" PRIu64 " at byte offset 8 cannot be right: %" PRIu64
                            " tensor infos of at least %d bytes each do not fit in the %" PRIu64
                            " bytes left after the header and metadata",
                            f->n_tensors, f->n_tensors, MIN_TENSOR_INFO_BYTES, rem);
    return ST_OK;
}

static st_status parse_kvs(parser *p, st_error *err) {
    st_gguf_file *f = p->f;
    uint64_t cap = 0;
    char ctx[NAME_BUF + 64], name[NAME_BUF];
    for (uint64_t i = 0; i < f->n_kv; i++) {
        st_gguf_kv kv;
        memset(&kv, 0, sizeof(kv));
        kv.file_offset = p->pos;
        snprintf(ctx, sizeof(ctx), "metadata entry %" PRIu64, i);
        st_status s = read_string(p, &kv.key, "key", ctx, err);
        if (s != ST_OK) return s;
        if (kv.key.len == 0)
            return st_error_set(err, ST_ERROR_FORMAT, "metadata entry %" PRIu64 " at byte offset %" PRIu64
                                " has an empty key", i, kv.file_offset);
        if (kv.key.len > ST_GGUF_MAX_KEY)
            return st_error_set(err, ST_ERROR_FORMAT,
                                "metadata entry %" PRIu64 " at byte offset %" PRIu64 " has a key of %" PRIu64
                                " bytes ('%s'); GGUF allows at most %d",
                                i, kv.file_offset, kv.key.len, fmt_name(name, kv.key), ST_GGUF_MAX_KEY);
        snprintf(ctx, sizeof(ctx), "metadata key '%s'", fmt_name(name, kv.key));
        uint64_t type_at = p->pos;
        uint32_t type;
        if ((s = read_u32(p, &type, "value type", ctx, err)) != ST_OK) return s;
        if (type >= ST_GGUF_TYPE_COUNT)
            return st_error_set(err, ST_ERROR_FORMAT,
                                "%s: unknown metadata value type %" PRIu32 " at byte offset %" PRIu64
                                " (valid types are 0..%d)",
                                ctx, type, type_at, ST_GGUF_TYPE_COUNT - 1);
        if ((s = parse_value(p, type, &kv.value, ctx, err)) != ST_OK) return s;
        if (!grow((void **)&f->kvs, &cap, i + 1, sizeof(st_gguf_kv)))
            return st_error_set(err, ST_ERROR_NOMEM, "out of memory reading %" PRIu64 " metadata entries", f->n_kv);
        f->kvs[i] = kv;
    }
    if (f->n_kv == 0) return ST_OK;
    name_ref *refs = malloc((size_t)f->n_kv * sizeof(*refs)); /* n_kv <= size / 14 */
    if (!refs) return st_error_set(err, ST_ERROR_NOMEM, "out of memory checking %" PRIu64 " keys", f->n_kv);
    for (uint64_t i = 0; i < f->n_kv; i++) refs[i] = (name_ref){f->kvs[i].key, i};
    uint64_t d = find_duplicate(refs, f->n_kv);
    st_status s = ST_OK;
    if (d < f->n_kv) {
        const st_gguf_kv *a = &f->kvs[refs[d].index], *b = &f->kvs[refs[d + 1].index];
        s = st_error_set(err, ST_ERROR_FORMAT,
                         "duplicate metadata key '%s' at byte offsets %" PRIu64 " and %" PRIu64,
                         fmt_name(name, a->key), a->file_offset, b->file_offset);
    }
    free(refs);
    return s;
}

static st_status parse_alignment(st_gguf_file *f, st_error *err) {
    f->alignment = ST_GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const st_gguf_kv *kv = &f->kvs[i];
        if (!st_gguf_string_eq(kv->key, "general.alignment")) continue;
        if (kv->value.type != ST_GGUF_TYPE_UINT32)
            return st_error_set(err, ST_ERROR_FORMAT,
                                "general.alignment at byte offset %" PRIu64 " has type %s, must be uint32",
                                kv->file_offset, st_gguf_type_name(kv->value.type));
        uint64_t a = kv->value.v.u64;
        if (a == 0 || (a & (a - 1)) != 0)
            return st_error_set(err, ST_ERROR_FORMAT,
                                "general.alignment = %" PRIu64 " at byte offset %" PRIu64
                                " is not a power of two",
                                a, kv->file_offset);
        f->alignment = a;
        return ST_OK;
    }
    return ST_OK;
}

static st_status parse_tensor_info(parser *p, uint64_t i, st_gguf_tensor_info *t, st_error *err) {
    char ctx[NAME_BUF + 64], name[NAME_BUF];
    uint64_t at = p->pos;
    snprintf(ctx, sizeof(ctx), "tensor info %" PRIu64, i);
    st_status s = read_string(p, &t->name, "name", ctx, err);
    if (s != ST_OK) return s;
    if (t->name.len == 0)
        return st_error_set(err, ST_ERROR_FORMAT, "tensor %" PRIu64 " at byte offset %" PRIu64 " has an empty name",
                            i, at);
    fmt_name(name, t->name);
    if (t->name.len > ST_GGUF_MAX_TENSOR_NAME)
        return st_error_set(err, ST_ERROR_FORMAT,
                            "tensor %" PRIu64 " name '%s' at byte offset %" PRIu64 " has %" PRIu64
                            " bytes; ggml allows at most %d",
                            i, name, at, t->name.len, ST_GGUF_MAX_TENSOR_NAME);
    snprintf(ctx, sizeof(ctx), "tensor '%s'", name);
    uint64_t dims_at = p->pos;
    if ((s = read_u32(p, &t->n_dims, "n_dims", ctx, err)) != ST_OK) return s;
    if (t->n_dims < 1 || t->n_dims > ST_GGUF_MAX_DIMS)
        return st_error_set(err, ST_ERROR_FORMAT, "%s: n_dims = %" PRIu32 " at byte offset %" PRIu64 ", must be 1..%d",
                            ctx, t->n_dims, dims_at, ST_GGUF_MAX_DIMS);
    int64_t nel = 1;
    for (uint32_t d = 0; d < ST_GGUF_MAX_DIMS; d++) {
        uint64_t ne = 1, ne_at = p->pos;
        if (d < t->n_dims && (s = read_u64(p, &ne, "shape", ctx, err)) != ST_OK) return s;
        if (ne == 0 || ne > (uint64_t)INT64_MAX)
            return st_error_set(err, ST_ERROR_FORMAT,
                                "%s: ne[%" PRIu32 "] = %" PRId64 " at byte offset %" PRIu64 ", must be > 0", ctx, d,
                                (int64_t)ne, ne_at);
        t->ne[d] = (int64_t)ne;
        if (nel > INT64_MAX / t->ne[d])
            return st_error_set(err, ST_ERROR_FORMAT,
                                "%s: the element count of its shape (byte offset %" PRIu64 ") overflows int64", ctx,
                                dims_at);
        nel *= t->ne[d];
    }
    uint64_t type_at = p->pos;
    uint32_t type;
    if ((s = read_u32(p, &type, "type", ctx, err)) != ST_OK) return s;
    const st_type_traits *tr = st_type_get_traits(type);
    if (!tr)
        return st_error_set(err, ST_ERROR_FORMAT, "%s: unknown tensor type id %" PRIu32 " at byte offset %" PRIu64,
                            ctx, type, type_at);
    t->type = (st_type)type;
    if (t->ne[0] % tr->block_size != 0)
        return st_error_set(err, ST_ERROR_FORMAT,
                            "%s: ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRId64, ctx, t->ne[0],
                            tr->name, tr->block_size);
    size_t bytes;
    bool ok = st_type_row_bytes(t->type, t->ne[0], &bytes);
    for (int d = 1; ok && d < ST_GGUF_MAX_DIMS; d++) {
        if (bytes > SIZE_MAX / (uint64_t)t->ne[d]) ok = false;
        else bytes *= (size_t)t->ne[d];
    }
    if (!ok) return st_error_set(err, ST_ERROR_FORMAT, "%s: its byte size overflows size_t", ctx);
    t->nbytes = bytes;
    uint64_t off_at = p->pos;
    if ((s = read_u64(p, &t->offset, "data offset", ctx, err)) != ST_OK) return s;
    if (t->offset % p->f->alignment != 0)
        return st_error_set(err, ST_ERROR_FORMAT,
                            "%s: data offset %" PRIu64 " at byte offset %" PRIu64
                            " is not a multiple of the alignment %" PRIu64,
                            ctx, t->offset, off_at, p->f->alignment);
    return ST_OK;
}

static int offset_ref_cmp(const void *x, const void *y) {
    const st_gguf_tensor_info *a = *(const st_gguf_tensor_info *const *)x;
    const st_gguf_tensor_info *b = *(const st_gguf_tensor_info *const *)y;
    if (a->offset != b->offset) return a->offset < b->offset ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* Data ranges: inside the file and pairwise disjoint (sorted by offset, neighbours). */
static st_status check_tensor_data(st_gguf_file *f, st_error *err) {
    char a_name[NAME_BUF], b_name[NAME_BUF];
    uint64_t avail = f->size > f->data_offset ? f->size - f->data_offset : 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        st_gguf_tensor_info *t = &f->tensors[i];
        if (t->offset > avail || t->nbytes > avail - t->offset)
            return st_error_set(err, ST_ERROR_FORMAT,
                                "tensor '%s': data at offset %" PRIu64 " (%zu bytes) runs past the end of the file "
                                "(data section starts at byte %" PRIu64 ", file size %" PRIu64 ")",
                                fmt_name(a_name, t->name), t->offset, t->nbytes, f->data_offset, f->size);
        t->data = f->base + f->data_offset + t->offset;
    }
    if (f->n_tensors < 2) return ST_OK;
    const st_gguf_tensor_info **order = malloc((size_t)f->n_tensors * sizeof(*order));
    if (!order) return st_error_set(err, ST_ERROR_NOMEM, "out of memory checking %" PRIu64 " tensors", f->n_tensors);
    for (uint64_t i = 0; i < f->n_tensors; i++) order[i] = &f->tensors[i];
    qsort(order, (size_t)f->n_tensors, sizeof(*order), offset_ref_cmp);
    st_status s = ST_OK;
    for (uint64_t i = 1; i < f->n_tensors && s == ST_OK; i++) {
        const st_gguf_tensor_info *a = order[i - 1], *b = order[i];
        if (a->offset + a->nbytes > b->offset) /* both end inside the file: no overflow */
            s = st_error_set(err, ST_ERROR_FORMAT,
                             "tensors '%s' (offset %" PRIu64 ", %zu bytes) and '%s' (offset %" PRIu64
                             ", %zu bytes) overlap",
                             fmt_name(a_name, a->name), a->offset, a->nbytes, fmt_name(b_name, b->name), b->offset,
                             b->nbytes);
    }
    free(order);
    return s;
}

static st_status parse_tensors(parser *p, st_error *err) {
    st_gguf_file *f = p->f;
    uint64_t cap = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        st_gguf_tensor_info t;
        memset(&t, 0, sizeof(t));
        st_status s = parse_tensor_info(p, i, &t, err);
        if (s != ST_OK) return s;
        if (!grow((void **)&f->tensors, &cap, i + 1, sizeof(t)))
            return st_error_set(err, ST_ERROR_NOMEM, "out of memory reading %" PRIu64 " tensor infos", f->n_tensors);
        f->tensors[i] = t;
    }
    uint64_t rem = p->pos % f->alignment;
    f->data_offset = p->pos;
    if (rem && f->data_offset > UINT64_MAX - (f->alignment - rem))
        return st_error_set(err, ST_ERROR_FORMAT, "the data section offset overflows 64 bits");
    if (rem) f->data_offset += f->alignment - rem;
    if (f->n_tensors == 0) {
        /* A file with no tensors may end without the final padding; keep the invariant
         * data_offset <= size so that size - data_offset never underflows. */
        if (f->data_offset > f->size) f->data_offset = f->size;
        return ST_OK;
    }

    name_ref *refs = malloc((size_t)f->n_tensors * sizeof(*refs));
    f->by_name = malloc((size_t)f->n_tensors * sizeof(*f->by_name));
    if (!refs || !f->by_name) {
        free(refs);
        return st_error_set(err, ST_ERROR_NOMEM, "out of memory indexing %" PRIu64 " tensors", f->n_tensors);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) refs[i] = (name_ref){f->tensors[i].name, i};
    uint64_t d = find_duplicate(refs, f->n_tensors);
    st_status s = ST_OK;
    if (d < f->n_tensors) {
        char name[NAME_BUF];
        s = st_error_set(err, ST_ERROR_FORMAT, "duplicate tensor name '%s' (tensors %" PRIu64 " and %" PRIu64 ")",
                         fmt_name(name, refs[d].s), refs[d].index, refs[d + 1].index);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) f->by_name[i] = refs[i].index;
    free(refs);
    return s == ST_OK ? check_tensor_data(f, err) : s;
}

/* ---- open / close ---- */

static st_status parse_file(st_gguf_file *f, st_error *err) {
    parser p = {.f = f, .base = f->base, .size = f->size, .pos = 0};
    st_status s = parse_header(&p, err);
    if (s == ST_OK) s = parse_kvs(&p, err);
    if (s == ST_OK) s = parse_alignment(f, err);
    if (s == ST_OK) s = parse_tensors(&p, err);
    return s;
}

st_status st_gguf_open_memory(const void *data, size_t size, st_gguf_file **out, st_error *err) {
    *out = NULL;
    if (!data && size > 0) return st_error_set(err, ST_ERROR_INVALID, "st_gguf_open_memory: data is NULL");
    if (size == 0) return st_error_set(err, ST_ERROR_FORMAT, "empty buffer (0 bytes): not a GGUF file");
    st_gguf_file *f = calloc(1, sizeof(*f));
    if (!f) return st_error_set(err, ST_ERROR_NOMEM, "out of memory opening a GGUF buffer");
    f->base = data;
    f->size = size;
    st_status s = parse_file(f, err);
    if (s != ST_OK) {
        st_gguf_close(f);
        return s;
    }
    *out = f;
    return ST_OK;
}

st_status st_gguf_open(const char *path, st_gguf_file **out, st_error *err) {
    *out = NULL;
    int fd;
    uint64_t file_size;
    st_status s = st_file_open_read(path, "GGUF file", &fd, &file_size, err);
    if (s != ST_OK) return s;
    if (file_size == 0) {
        close(fd);
        return st_error_set(err, ST_ERROR_FORMAT, "%s is empty (0 bytes), not a GGUF file", path);
    }
    if (file_size > SIZE_MAX) {
        close(fd);
        return st_error_set(err, ST_ERROR_UNSUPPORTED, "%s is too large to map on this host", path);
    }
    size_t size = (size_t)file_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED) return st_error_set(err, ST_ERROR_IO, "cannot mmap %s (%zu bytes): %s", path, size, strerror(e));
    st_gguf_file *f = calloc(1, sizeof(*f));
    if (!f) {
        munmap(map, size);
        return st_error_set(err, ST_ERROR_NOMEM, "out of memory opening %s", path);
    }
    f->map = map;
    f->map_size = size;
    f->base = map;
    f->size = size;
    s = parse_file(f, err);
    if (s != ST_OK) {
        st_gguf_close(f);
        return st_error_wrap(err, "%s", path);
    }
    *out = f;
    return ST_OK;
}

void st_gguf_close(st_gguf_file *f) {
    if (!f) return;
    while (f->blocks) {
        arena_block *next = f->blocks->next;
        free(f->blocks);
        f->blocks = next;
    }
    free(f->kvs);
    free(f->tensors);
    free(f->by_name);
    if (f->map) munmap(f->map, f->map_size);
    free(f);
}

/* ---- accessors ---- */

uint32_t st_gguf_version(const st_gguf_file *f) { return f->version; }
size_t st_gguf_alignment(const st_gguf_file *f) { return (size_t)f->alignment; }
uint64_t st_gguf_data_offset(const st_gguf_file *f) { return f->data_offset; }
uint64_t st_gguf_file_size(const st_gguf_file *f) { return f->size; }
uint64_t st_gguf_n_kv(const st_gguf_file *f) { return f->n_kv; }
uint64_t st_gguf_n_tensors(const st_gguf_file *f) { return f->n_tensors; }

const st_gguf_kv *st_gguf_get_kv(const st_gguf_file *f, uint64_t i) { return i < f->n_kv ? &f->kvs[i] : NULL; }

const st_gguf_tensor_info *st_gguf_get_tensor(const st_gguf_file *f, uint64_t i) {
    return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const st_gguf_value *st_gguf_find(const st_gguf_file *f, const char *key) {
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (st_gguf_string_eq(f->kvs[i].key, key)) return &f->kvs[i].value;
    return NULL;
}

const st_gguf_tensor_info *st_gguf_find_tensor(const st_gguf_file *f, const char *name) {
    st_gguf_string want = {strlen(name), name};
    uint64_t lo = 0, hi = f->n_tensors;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        const st_gguf_tensor_info *t = &f->tensors[f->by_name[mid]];
        int c = name_cmp(t->name, want);
        if (c == 0) return t;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}
