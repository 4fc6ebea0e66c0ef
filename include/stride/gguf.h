/*
 * stride: GGUF v3 reading and writing.
 *
 * File layout (little-endian):
 *   magic "GGUF" | u32 version (3) | u64 n_tensors | u64 n_kv
 *   n_kv x { string key | u32 value_type | value }
 *   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 type | u64 offset }
 *   padding to general.alignment (default 32)
 *   tensor data; each tensor's offset is relative to the start of this section and is a
 *   multiple of the alignment.
 * A string is u64 length + bytes (no terminator). An array is u32 element type + u64
 * count + elements; elements may themselves be strings or arrays (nested arrays).
 *
 * READER. The file is mmap'd read-only; every count, size and offset is checked with
 * overflow-safe arithmetic before it is used, so a malformed or hostile file yields
 * ST_ERROR_FORMAT with a message that names the problem and its byte offset, never a
 * crash or an out-of-bounds read. Pointers handed out (strings, array elements, tensor
 * data) point into the mapping and live until st_gguf_close(). Strings are NOT
 * NUL-terminated; use their length.
 *
 * WRITER. Metadata and tensor infos are collected in memory, then the header is written
 * and tensor data is streamed in the order the tensors were added, so a model never has
 * to be in memory at once.
 */
#ifndef STRIDE_GGUF_H
#define STRIDE_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stride/status.h"
#include "stride/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ST_GGUF_MAGIC "GGUF"
#define ST_GGUF_VERSION 3
#define ST_GGUF_DEFAULT_ALIGNMENT 32
#define ST_GGUF_MAX_DIMS 4

typedef enum st_gguf_type {
    ST_GGUF_TYPE_UINT8 = 0,
    ST_GGUF_TYPE_INT8 = 1,
    ST_GGUF_TYPE_UINT16 = 2,
    ST_GGUF_TYPE_INT16 = 3,
    ST_GGUF_TYPE_UINT32 = 4,
    ST_GGUF_TYPE_INT32 = 5,
    ST_GGUF_TYPE_FLOAT32 = 6,
    ST_GGUF_TYPE_BOOL = 7,
    ST_GGUF_TYPE_STRING = 8,
    ST_GGUF_TYPE_ARRAY = 9,
    ST_GGUF_TYPE_UINT64 = 10,
    ST_GGUF_TYPE_INT64 = 11,
    ST_GGUF_TYPE_FLOAT64 = 12,
    ST_GGUF_TYPE_COUNT = 13,
} st_gguf_type;

/* "uint32", "string", ...; "unknown" for an invalid id. */
const char *st_gguf_type_name(uint32_t type);

/* Size of a fixed-size scalar type, 0 for STRING/ARRAY/invalid. */
size_t st_gguf_type_size(uint32_t type);

typedef struct st_gguf_string {
    uint64_t len;
    const char *data; /* not NUL-terminated */
} st_gguf_string;

typedef struct st_gguf_value st_gguf_value;

typedef struct st_gguf_array {
    st_gguf_type elem_type;
    uint64_t n;
    /* Fixed-size element types: n packed little-endian elements (may be unaligned in the
     * file: read with memcpy or the st_gguf_array_get_* helpers). */
    const void *raw;
    /* STRING elements: n strings. ARRAY elements: n nested values (each of type ARRAY). */
    const st_gguf_string *strings;
    const st_gguf_value *arrays;
} st_gguf_array;

struct st_gguf_value {
    st_gguf_type type;
    union {
        uint64_t u64;     /* UINT8, UINT16, UINT32, UINT64 (zero-extended) */
        int64_t i64;      /* INT8, INT16, INT32, INT64 (sign-extended) */
        double f64;       /* FLOAT32 (converted exactly), FLOAT64 */
        bool b;           /* BOOL */
        st_gguf_string str;
        st_gguf_array arr;
    } v;
};

typedef struct st_gguf_kv {
    st_gguf_string key;
    st_gguf_value value;
    uint64_t file_offset; /* where the key/value pair starts in the file */
} st_gguf_kv;

typedef struct st_gguf_tensor_info {
    st_gguf_string name;
    uint32_t n_dims;
    int64_t ne[ST_GGUF_MAX_DIMS]; /* unused dimensions are 1 */
    st_type type;
    uint64_t offset;    /* relative to the start of the data section */
    size_t nbytes;      /* packed size */
    const void *data;   /* into the mapping */
} st_gguf_tensor_info;

typedef struct st_gguf_file st_gguf_file;

/* Opens and validates path. On failure *out is NULL and err says why (the message
 * includes the path). */
st_status st_gguf_open(const char *path, st_gguf_file **out, st_error *err);

/* Parses a file image in memory (used by tests and the fuzzer). The buffer must outlive
 * the returned file; it is not copied. */
st_status st_gguf_open_memory(const void *data, size_t size, st_gguf_file **out, st_error *err);

void st_gguf_close(st_gguf_file *f);

uint32_t st_gguf_version(const st_gguf_file *f);
size_t st_gguf_alignment(const st_gguf_file *f);
uint64_t st_gguf_data_offset(const st_gguf_file *f); /* absolute start of tensor data */
uint64_t st_gguf_file_size(const st_gguf_file *f);

uint64_t st_gguf_n_kv(const st_gguf_file *f);
const st_gguf_kv *st_gguf_get_kv(const st_gguf_file *f, uint64_t i);
/* NULL when the key is absent. Lookup is by exact key. */
const st_gguf_value *st_gguf_find(const st_gguf_file *f, const char *key);

uint64_t st_gguf_n_tensors(const st_gguf_file *f);
const st_gguf_tensor_info *st_gguf_get_tensor(const st_gguf_file *f, uint64_t i);
const st_gguf_tensor_info *st_gguf_find_tensor(const st_gguf_file *f, const char *name);

/* Typed metadata getters: ST_OK and *out set when the key exists with a compatible type
 * (any integer type that fits for the integer getters; FLOAT32/FLOAT64 for the float
 * getter); ST_ERROR_FORMAT naming key, expected and actual type when it exists with
 * another type; ST_ERROR_INVALID (message "missing key ...") when absent. */
st_status st_gguf_get_u64(const st_gguf_file *f, const char *key, uint64_t *out, st_error *err);
st_status st_gguf_get_u32(const st_gguf_file *f, const char *key, uint32_t *out, st_error *err);
st_status st_gguf_get_i64(const st_gguf_file *f, const char *key, int64_t *out, st_error *err);
st_status st_gguf_get_f64(const st_gguf_file *f, const char *key, double *out, st_error *err);
st_status st_gguf_get_bool(const st_gguf_file *f, const char *key, bool *out, st_error *err);
st_status st_gguf_get_str(const st_gguf_file *f, const char *key, st_gguf_string *out, st_error *err);
st_status st_gguf_get_arr(const st_gguf_file *f, const char *key, st_gguf_array *out, st_error *err);

/* Element i of a fixed-size numeric array, converted. i < a->n is the caller's duty. */
int64_t st_gguf_array_get_i64(const st_gguf_array *a, uint64_t i);
double st_gguf_array_get_f64(const st_gguf_array *a, uint64_t i);

/* True when s equals the NUL-terminated c. */
bool st_gguf_string_eq(st_gguf_string s, const char *c);

/* Writes data[0..len) into buf (capacity cap >= 8), NUL-terminated, for a message or a
 * terminal: printable ASCII kept, every other byte (control characters, escape sequences,
 * NUL, non-ASCII) as \xNN, cut with "..." when it does not fit. Every string that came
 * from a file goes through this before it is printed. Returns buf. */
const char *st_gguf_format_string(char *buf, size_t cap, const char *data, uint64_t len);

/* ---- writer ---- */

typedef struct st_gguf_writer st_gguf_writer;

st_status st_gguf_writer_open(const char *path, st_gguf_writer **out, st_error *err);

/* Metadata, in the order it will be written. Keys must be unique (duplicate: error).
 * Values are copied. "general.alignment" set here (u32, power of two) is honoured. */
st_status st_gguf_writer_set_u8(st_gguf_writer *w, const char *key, uint8_t v, st_error *err);
st_status st_gguf_writer_set_i8(st_gguf_writer *w, const char *key, int8_t v, st_error *err);
st_status st_gguf_writer_set_u16(st_gguf_writer *w, const char *key, uint16_t v, st_error *err);
st_status st_gguf_writer_set_i16(st_gguf_writer *w, const char *key, int16_t v, st_error *err);
st_status st_gguf_writer_set_u32(st_gguf_writer *w, const char *key, uint32_t v, st_error *err);
st_status st_gguf_writer_set_i32(st_gguf_writer *w, const char *key, int32_t v, st_error *err);
st_status st_gguf_writer_set_u64(st_gguf_writer *w, const char *key, uint64_t v, st_error *err);
st_status st_gguf_writer_set_i64(st_gguf_writer *w, const char *key, int64_t v, st_error *err);
st_status st_gguf_writer_set_f32(st_gguf_writer *w, const char *key, float v, st_error *err);
st_status st_gguf_writer_set_f64(st_gguf_writer *w, const char *key, double v, st_error *err);
st_status st_gguf_writer_set_bool(st_gguf_writer *w, const char *key, bool v, st_error *err);
st_status st_gguf_writer_set_str(st_gguf_writer *w, const char *key, const char *v, st_error *err);
/* Array of a fixed-size element type: n elements of st_gguf_type_size(elem_type) bytes
 * each, host order (little-endian hosts only). */
st_status st_gguf_writer_set_arr(st_gguf_writer *w, const char *key, st_gguf_type elem_type,
                                 const void *data, uint64_t n, st_error *err);
st_status st_gguf_writer_set_arr_str(st_gguf_writer *w, const char *key, const char *const *v,
                                     uint64_t n, st_error *err);
/* Any value, including nested arrays (e.g. copied from a file being read). */
st_status st_gguf_writer_set_value(st_gguf_writer *w, const char *key, const st_gguf_value *v,
                                   st_error *err);

/* Declares a tensor; data comes later, in declaration order. n_dims 1..4. */
st_status st_gguf_writer_add_tensor(st_gguf_writer *w, const char *name, st_type type,
                                    uint32_t n_dims, const int64_t *ne, st_error *err);

/* Writes header, metadata and tensor infos. No metadata or tensors may be added after. */
st_status st_gguf_writer_write_header(st_gguf_writer *w, st_error *err);

/* Streams tensor bytes, in declaration order, in chunks of any size (a chunk may span
 * tensors). Alignment padding between tensors is inserted automatically. */
st_status st_gguf_writer_write_data(st_gguf_writer *w, const void *data, size_t n, st_error *err);

/* Checks that every tensor's bytes were written, flushes and closes. The writer is
 * freed whatever the result; on failure the partial file is removed. */
st_status st_gguf_writer_close(st_gguf_writer *w, st_error *err);

/* Frees without finishing (on an error path); removes the partial file. */
void st_gguf_writer_abort(st_gguf_writer *w);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_GGUF_H */
