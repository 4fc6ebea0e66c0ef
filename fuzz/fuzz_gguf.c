/*
 * libFuzzer target for the GGUF reader (SPEC.md section 7: a hostile file gets a clear
 * error, never a crash or an out-of-bounds read).
 *
 * Each input is parsed with st_gguf_open_memory. A rejected input must come with a
 * failure status and a non-empty message. An accepted one is walked completely: every
 * key/value (strings, string arrays, nested arrays, the last element of every numeric
 * array), every typed getter on every key, every tensor info, and the first and last byte
 * of every tensor's data, so that a pointer or length the reader let through out of range
 * is caught by AddressSanitizer. The walk also checks the reader's promises (tensors
 * aligned, inside the file, not overlapping; lookups find what iteration found) and
 * aborts with a message when one is broken: a logic bug is a finding too.
 *
 * The same file is linked into tests/unit/test_gguf_malformed.c (without libFuzzer), which
 * replays the seed corpus and the malformed corpus through LLVMFuzzerTestOneInput under
 * plain ctest, so the target is exercised in CI even where clang is absent.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stride/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
void st_fuzz_gguf_walk(const st_gguf_file *f, const uint8_t *base, size_t size);

/* Folded into so that the compiler cannot drop the loads the walk makes. */
static volatile uint64_t sink;

static void fuzz_fail(const char *what, unsigned long long a, unsigned long long b) {
    fprintf(stderr, "fuzz_gguf: reader contract broken: %s (%llu, %llu)\n", what, a, b);
    abort();
}

#define FUZZ_CHECK(cond, a, b) ((cond) ? (void)0 : fuzz_fail(#cond, (unsigned long long)(a), \
                                                              (unsigned long long)(b)))

/* Checks that [p, p + n) lies inside the input (base == NULL: a file mapping, unknown). */
static void check_range(const uint8_t *base, size_t size, const void *p, uint64_t n) {
    if (!base || n == 0) return;
    const uint8_t *q = (const uint8_t *)p;
    FUZZ_CHECK(q >= base && q <= base + size, (uintptr_t)q, (uintptr_t)base);
    FUZZ_CHECK(n <= (uint64_t)(base + size - q), n, (uint64_t)(base + size - q));
}

static void touch_string(st_gguf_string s, const uint8_t *base, size_t size) {
    if (s.len == 0) return;
    FUZZ_CHECK(s.data != NULL, s.len, 0);
    check_range(base, size, s.data, s.len);
    sink += (uint8_t)s.data[0] + (uint8_t)s.data[s.len - 1];
}

static void touch_value(const st_gguf_value *v, const uint8_t *base, size_t size, int depth) {
    FUZZ_CHECK((uint32_t)v->type < ST_GGUF_TYPE_COUNT, v->type, 0);
    FUZZ_CHECK(depth < 10000, depth, 0);
    switch (v->type) {
    case ST_GGUF_TYPE_STRING: touch_string(v->v.str, base, size); break;
    case ST_GGUF_TYPE_ARRAY: {
        const st_gguf_array *a = &v->v.arr;
        FUZZ_CHECK((uint32_t)a->elem_type < ST_GGUF_TYPE_COUNT, a->elem_type, 0);
        size_t es = st_gguf_type_size(a->elem_type);
        if (es != 0) {
            if (a->n == 0) break;
            FUZZ_CHECK(a->raw != NULL, a->n, es);
            FUZZ_CHECK(a->n <= UINT64_MAX / es, a->n, es);
            check_range(base, size, a->raw, a->n * es);
            /* first and last element through the public converters */
            int is_float = a->elem_type == ST_GGUF_TYPE_FLOAT32 || a->elem_type == ST_GGUF_TYPE_FLOAT64;
            for (uint64_t i = 0; i < a->n; i += (a->n - 1 > 0 ? a->n - 1 : 1)) {
                if (is_float) {
                    double d = st_gguf_array_get_f64(a, i);
                    uint64_t bits;
                    memcpy(&bits, &d, sizeof(bits));
                    sink += bits;
                } else {
                    sink += (uint64_t)st_gguf_array_get_i64(a, i);
                }
            }
        } else if (a->elem_type == ST_GGUF_TYPE_STRING) {
            FUZZ_CHECK(a->n == 0 || a->strings != NULL, a->n, 0);
            for (uint64_t i = 0; i < a->n; i++) touch_string(a->strings[i], base, size);
        } else {
            FUZZ_CHECK(a->n == 0 || a->arrays != NULL, a->n, 0);
            for (uint64_t i = 0; i < a->n; i++) {
                FUZZ_CHECK(a->arrays[i].type == ST_GGUF_TYPE_ARRAY, a->arrays[i].type, i);
                touch_value(&a->arrays[i], base, size, depth + 1);
            }
        }
        break;
    }
    case ST_GGUF_TYPE_FLOAT32:
    case ST_GGUF_TYPE_FLOAT64: {
        uint64_t bits;
        memcpy(&bits, &v->v.f64, sizeof(bits));
        sink += bits;
        break;
    }
    case ST_GGUF_TYPE_BOOL: sink += v->v.b; break;
    default: sink += v->v.u64; break;
    }
}

/* A NUL-terminated copy of s in buf, or NULL when it holds a NUL or does not fit. */
static const char *cstr(st_gguf_string s, char *buf, size_t cap) {
    if (s.len >= cap || (s.len && memchr(s.data, '\0', s.len))) return NULL;
    memcpy(buf, s.data, s.len);
    buf[s.len] = '\0';
    return buf;
}

/* Every typed getter on key: ST_OK, or a failure that says why. */
static int getter_ok(st_status st, const st_error *err) {
    if (st == ST_OK) return 1;
    FUZZ_CHECK(err->status == st && err->message[0] != '\0', st, err->status);
    return 0;
}

static void touch_getters(const st_gguf_file *f, const char *key) {
    st_error e[7];
    uint64_t u64v;
    uint32_t u32v;
    int64_t i64v;
    double f64v;
    bool bv;
    st_gguf_string sv;
    st_gguf_array av;
    memset(e, 0, sizeof(e));
    int n_ok = 0;
    if (getter_ok(st_gguf_get_u64(f, key, &u64v, &e[0]), &e[0])) n_ok++, sink += u64v;
    if (getter_ok(st_gguf_get_u32(f, key, &u32v, &e[1]), &e[1])) n_ok++, sink += u32v;
    if (getter_ok(st_gguf_get_i64(f, key, &i64v, &e[2]), &e[2])) n_ok++, sink += (uint64_t)i64v;
    if (getter_ok(st_gguf_get_f64(f, key, &f64v, &e[3]), &e[3])) n_ok++, sink += f64v != 0.0;
    if (getter_ok(st_gguf_get_bool(f, key, &bv, &e[4]), &e[4])) n_ok++, sink += bv;
    if (getter_ok(st_gguf_get_str(f, key, &sv, &e[5]), &e[5])) {
        n_ok++;
        if (sv.len) sink += (uint8_t)sv.data[sv.len - 1];
    }
    if (getter_ok(st_gguf_get_arr(f, key, &av, &e[6]), &e[6])) n_ok++, sink += av.n;
    /* a key that exists has some type, so at least one getter accepts it */
    FUZZ_CHECK(n_ok >= 1, n_ok, 0);
}

typedef struct span {
    uint64_t begin, end;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

void st_fuzz_gguf_walk(const st_gguf_file *f, const uint8_t *base, size_t size) {
    char key[256];
    const uint64_t n_kv = st_gguf_n_kv(f), n_t = st_gguf_n_tensors(f);
    const uint64_t data_off = st_gguf_data_offset(f);
    const size_t align = st_gguf_alignment(f);
    FUZZ_CHECK(st_gguf_version(f) == ST_GGUF_VERSION, st_gguf_version(f), 0);
    FUZZ_CHECK(align != 0 && (align & (align - 1)) == 0, align, 0);
    if (base) FUZZ_CHECK(st_gguf_file_size(f) == size, st_gguf_file_size(f), size);
    /* The data section never starts past the end, also for a file with no tensors that
     * ends before the alignment padding (fuzz/corpus/regress_no_tensors_short_padding.gguf). */
    FUZZ_CHECK(data_off <= st_gguf_file_size(f), data_off, st_gguf_file_size(f));

    for (uint64_t i = 0; i < n_kv; i++) {
        const st_gguf_kv *kv = st_gguf_get_kv(f, i);
        FUZZ_CHECK(kv != NULL, i, n_kv);
        touch_string(kv->key, base, size);
        FUZZ_CHECK(kv->file_offset < st_gguf_file_size(f), kv->file_offset, i);
        touch_value(&kv->value, base, size, 0);
        const char *k = cstr(kv->key, key, sizeof(key));
        if (k) {
            const st_gguf_value *found = st_gguf_find(f, k);
            FUZZ_CHECK(found != NULL && found->type == kv->value.type, i, found ? found->type : 99);
            touch_getters(f, k);
        }
    }

    span *spans = n_t ? calloc((size_t)n_t, sizeof(*spans)) : NULL;
    FUZZ_CHECK(n_t == 0 || spans != NULL, n_t, 0);
    for (uint64_t i = 0; i < n_t; i++) {
        const st_gguf_tensor_info *t = st_gguf_get_tensor(f, i);
        FUZZ_CHECK(t != NULL, i, n_t);
        touch_string(t->name, base, size);
        FUZZ_CHECK(t->n_dims >= 1 && t->n_dims <= ST_GGUF_MAX_DIMS, t->n_dims, i);
        FUZZ_CHECK(st_type_get_traits((uint32_t)t->type) != NULL, t->type, i);
        uint64_t nrows = 1;
        for (uint32_t d = 0; d < ST_GGUF_MAX_DIMS; d++) {
            FUZZ_CHECK(t->ne[d] >= 1, t->ne[d], d);
            if (d >= t->n_dims) FUZZ_CHECK(t->ne[d] == 1, t->ne[d], d);
            if (d >= 1) {
                FUZZ_CHECK((uint64_t)t->ne[d] <= UINT64_MAX / nrows, t->ne[d], nrows);
                nrows *= (uint64_t)t->ne[d];
            }
        }
        size_t row = 0;
        FUZZ_CHECK(st_type_row_bytes(t->type, t->ne[0], &row), t->ne[0], t->type);
        FUZZ_CHECK(row == 0 || nrows <= UINT64_MAX / row, nrows, row);
        FUZZ_CHECK(t->nbytes == row * nrows, t->nbytes, row * nrows);
        FUZZ_CHECK(t->offset % align == 0, t->offset, align);
        FUZZ_CHECK(t->offset <= st_gguf_file_size(f) - data_off, t->offset, data_off);
        FUZZ_CHECK(t->nbytes <= st_gguf_file_size(f) - data_off - t->offset, t->nbytes, t->offset);
        if (base) FUZZ_CHECK((const uint8_t *)t->data == base + data_off + t->offset, i, t->offset);
        check_range(base, size, t->data, t->nbytes);
        if (t->nbytes) {
            const uint8_t *p = t->data;
            sink += p[0] + p[t->nbytes - 1];
        }
        spans[i].begin = t->offset;
        spans[i].end = t->offset + t->nbytes;
        const char *name = cstr(t->name, key, sizeof(key));
        if (name) FUZZ_CHECK(st_gguf_find_tensor(f, name) == t, i, 0);
    }
    if (n_t > 1) {
        qsort(spans, (size_t)n_t, sizeof(*spans), span_cmp);
        for (uint64_t i = 1; i < n_t; i++) {
            /* empty tensors may share an offset; anything else must not overlap */
            if (spans[i].begin == spans[i].end || spans[i - 1].begin == spans[i - 1].end) continue;
            FUZZ_CHECK(spans[i].begin >= spans[i - 1].end, spans[i].begin, spans[i - 1].end);
        }
    }
    free(spans);
    /* absent names: longer than any name or key the file can hold */
    size_t absent_len = (size_t)st_gguf_file_size(f) + 1;
    char *absent = malloc(absent_len + 1);
    FUZZ_CHECK(absent != NULL, absent_len, 0);
    memset(absent, 'x', absent_len);
    absent[absent_len] = '\0';
    FUZZ_CHECK(st_gguf_find_tensor(f, absent) == NULL, absent_len, 0);
    FUZZ_CHECK(st_gguf_find(f, absent) == NULL, absent_len, 0);
    free(absent);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* Exact-size heap copy: a read one byte past the end is an ASan report, even when the
     * fuzzer's own buffer happens to be followed by readable memory. */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    st_gguf_file *f = (st_gguf_file *)(uintptr_t)1; /* must be reset to NULL on failure */
    st_error err;
    memset(&err, 0, sizeof(err));
    st_status st = st_gguf_open_memory(copy, size, &f, &err);
    if (st == ST_OK) {
        FUZZ_CHECK(f != NULL, 0, 0);
        st_fuzz_gguf_walk(f, copy, size);
        st_gguf_close(f);
    } else {
        FUZZ_CHECK(f == NULL, st, 0);
        FUZZ_CHECK(err.status == st, err.status, st);
        FUZZ_CHECK(err.message[0] != '\0', st, 0);
        FUZZ_CHECK(memchr(err.message, '\0', sizeof(err.message)) != NULL, st, 0);
    }
    free(copy);
    return 0;
}
