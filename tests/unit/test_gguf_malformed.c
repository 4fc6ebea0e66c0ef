/*
 * The GGUF reader against hostile input (SPEC.md section 7).
 *
 * - Every file of the committed corpus tests/data/malformed/ (made by
 *   tests/data/make_malformed_gguf.py) is rejected, through st_gguf_open and through
 *   st_gguf_open_memory on an exact-size heap copy (so ASan sees a one-byte over-read),
 *   with the status and message substring listed in EXPECTED.tsv.
 * - The corpus cannot silently shrink: at least 30 entries, every .gguf file in the
 *   directory is listed and every listed file exists.
 * - The valid base file parses, and every proper prefix of it is rejected cleanly.
 * - Every byte of its header, metadata and tensor infos, set to several values, gives
 *   either a file that survives a full walk or a clean error with a message.
 * - Nesting a million arrays deep is refused without exhausting the stack.
 * - The fuzz target (fuzz/fuzz_gguf.c, linked in) replays the seed corpus.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "stride/gguf.h"

#ifndef STRIDE_FUZZ_CORPUS
#error "STRIDE_FUZZ_CORPUS must name fuzz/corpus (set by tests/CMakeLists.txt)"
#endif

/* From fuzz/fuzz_gguf.c. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
void st_fuzz_gguf_walk(const st_gguf_file *f, const uint8_t *base, size_t size);

#define MALFORMED_DIR STRIDE_TEST_DATA "/malformed"
#define MIN_CORPUS 30
#define MAX_ENTRIES 512

typedef struct entry {
    char file[128];
    st_status status;
    char substr[128];
} entry;

static uint8_t *read_file(const char *path, size_t *size) {
    FILE *fp = fopen(path, "rb");
    if (!fp) fail_msg("cannot open %s", path);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    assert_true(n >= 0);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    assert_non_null(buf);
    if (n > 0 && fread(buf, 1, (size_t)n, fp) != (size_t)n) fail_msg("cannot read %s", path);
    fclose(fp);
    *size = (size_t)n;
    return buf;
}

/* dir + "/" + name into buf (cap bytes); fails the test when it does not fit. */
static const char *join_path(char *buf, size_t cap, const char *dir, const char *name) {
    size_t nd = strlen(dir), nn = strlen(name);
    if (nd + 1 + nn + 1 > cap) fail_msg("path too long: %s/%s", dir, name);
    memcpy(buf, dir, nd);
    buf[nd] = '/';
    memcpy(buf + nd + 1, name, nn + 1);
    return buf;
}

/* An exact-size heap copy of data[0..n): nothing readable past its end for ASan. */
static uint8_t *exact_copy(const uint8_t *data, size_t n) {
    uint8_t *p = malloc(n ? n : 1);
    assert_non_null(p);
    if (n) memcpy(p, data, n);
    return p;
}

static int parse_status(const char *s, st_status *out) {
    static const struct {
        const char *name;
        st_status status;
    } names[] = {{"format", ST_ERROR_FORMAT}, {"io", ST_ERROR_IO},
                 {"unsupported", ST_ERROR_UNSUPPORTED}, {"invalid", ST_ERROR_INVALID}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(s, names[i].name) == 0) {
            *out = names[i].status;
            return 1;
        }
    }
    return 0;
}

/* Reads EXPECTED.tsv (file TAB status TAB substring; '#' starts a comment line). */
static size_t load_expected(entry *e, size_t cap) {
    FILE *fp = fopen(MALFORMED_DIR "/EXPECTED.tsv", "r");
    if (!fp) fail_msg("cannot open %s", MALFORMED_DIR "/EXPECTED.tsv");
    char line[512];
    size_t n = 0, lineno = 0;
    while (fgets(line, sizeof(line), fp)) {
        lineno++;
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] == '#' || line[0] == '\0') continue;
        char *status = strchr(line, '\t');
        char *substr = status ? strchr(status + 1, '\t') : NULL;
        if (!substr) fail_msg("EXPECTED.tsv:%zu: want 3 tab-separated columns: '%s'", lineno, line);
        *status++ = '\0';
        *substr++ = '\0';
        if (n == cap) fail_msg("EXPECTED.tsv: more than %zu entries", cap);
        if (strlen(line) >= sizeof(e[n].file) || strlen(substr) >= sizeof(e[n].substr) || !substr[0])
            fail_msg("EXPECTED.tsv:%zu: file name too long or empty substring", lineno);
        if (!parse_status(status, &e[n].status))
            fail_msg("EXPECTED.tsv:%zu: unknown status '%s'", lineno, status);
        strcpy(e[n].file, line);
        strcpy(e[n].substr, substr);
        n++;
    }
    fclose(fp);
    return n;
}

/* Checks one rejection; returns 0 and prints why when it is not the expected one. */
static int check_rejected(const char *what, const char *file, st_status st, const st_gguf_file *f,
                          const st_error *err, const entry *want) {
    if (st == ST_OK) {
        print_error("%s %s: accepted, want %s error containing '%s'\n", what, file,
                    st_status_name(want->status), want->substr);
        return 0;
    }
    if (f != NULL) {
        print_error("%s %s: failed but left *out non-NULL\n", what, file);
        return 0;
    }
    /* st_gguf_open puts the path first: look past it, so that a file named after its
     * defect cannot match its own expectation */
    const char *msg = err->message, *name = strstr(msg, file);
    if (name) msg = name + strlen(file);
    if (st != want->status || err->status != st || !strstr(msg, want->substr)) {
        print_error("%s %s: got %s '%s', want %s containing '%s'\n", what, file, st_status_name(st),
                    err->message, st_status_name(want->status), want->substr);
        return 0;
    }
    return 1;
}

static void test_corpus_matches_expected(void **state) {
    (void)state;
    static entry e[MAX_ENTRIES];
    size_t n = load_expected(e, MAX_ENTRIES);
    if (n < MIN_CORPUS) fail_msg("EXPECTED.tsv lists %zu files, want at least %d", n, MIN_CORPUS);

    /* every .gguf in the directory is listed (and listed once) */
    DIR *d = opendir(MALFORMED_DIR);
    if (!d) fail_msg("cannot open directory %s", MALFORMED_DIR);
    size_t n_files = 0;
    int unlisted = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        size_t len = strlen(de->d_name);
        if (len < 5 || strcmp(de->d_name + len - 5, ".gguf") != 0) continue;
        n_files++;
        int listed = 0;
        for (size_t i = 0; i < n; i++) listed += strcmp(e[i].file, de->d_name) == 0;
        if (listed != 1) {
            print_error("%s is listed %d times in EXPECTED.tsv (want once)\n", de->d_name, listed);
            unlisted++;
        }
    }
    closedir(d);
    assert_int_equal(unlisted, 0);
    assert_int_equal(n_files, n); /* so every listed file exists */

    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        char path[1024];
        join_path(path, sizeof(path), MALFORMED_DIR, e[i].file);
        st_error err;
        memset(&err, 0, sizeof(err));
        st_gguf_file *f = (st_gguf_file *)&err; /* must come back NULL */
        st_status st = st_gguf_open(path, &f, &err);
        if (!check_rejected("st_gguf_open", e[i].file, st, f, &err, &e[i])) bad++;
        if (st == ST_OK) {
            st_gguf_close(f);
        } else if (!strstr(err.message, e[i].file)) {
            print_error("st_gguf_open %s: the message does not name the file: '%s'\n", e[i].file, err.message);
            bad++;
        }

        size_t size;
        uint8_t *raw = read_file(path, &size);
        uint8_t *copy = exact_copy(raw, size);
        free(raw);
        memset(&err, 0, sizeof(err));
        f = (st_gguf_file *)&err;
        st = st_gguf_open_memory(copy, size, &f, &err);
        if (!check_rejected("st_gguf_open_memory", e[i].file, st, f, &err, &e[i])) bad++;
        if (st == ST_OK) st_gguf_close(f);
        free(copy);
    }
    print_message("malformed corpus: %zu files, %d mismatches\n", n, bad);
    assert_int_equal(bad, 0);
}

/* The base file's bytes, loaded once per test. */
static uint8_t *load_base(size_t *size) {
    uint8_t *b = read_file(STRIDE_TEST_DATA "/valid_base.gguf", size);
    assert_true(*size > 64);
    return b;
}

static void test_valid_base_parses(void **state) {
    (void)state;
    size_t size;
    uint8_t *raw = load_base(&size);
    uint8_t *buf = exact_copy(raw, size);
    st_error err;
    memset(&err, 0, sizeof(err));
    st_gguf_file *f = NULL;
    if (st_gguf_open_memory(buf, size, &f, &err) != ST_OK) fail_msg("valid_base.gguf: %s", err.message);
    st_fuzz_gguf_walk(f, buf, size);

    /* what make_malformed_gguf.py wrote */
    assert_int_equal(st_gguf_version(f), 3);
    assert_int_equal(st_gguf_n_kv(f), 13);
    assert_int_equal(st_gguf_n_tensors(f), 3);
    assert_int_equal(st_gguf_alignment(f), 32);
    assert_int_equal(st_gguf_file_size(f), size);
    st_gguf_string s;
    assert_int_equal(st_gguf_get_str(f, "general.architecture", &s, &err), ST_OK);
    assert_true(st_gguf_string_eq(s, "llama"));
    int64_t i64;
    assert_int_equal(st_gguf_get_i64(f, "test.scalar.int32", &i64, &err), ST_OK);
    assert_int_equal(i64, -123456);
    uint64_t u64;
    assert_int_equal(st_gguf_get_u64(f, "test.u64", &u64, &err), ST_OK);
    assert_int_equal(u64, (uint64_t)1 << 40);
    st_gguf_array a;
    assert_int_equal(st_gguf_get_arr(f, "test.str_arr", &a, &err), ST_OK);
    assert_int_equal(a.elem_type, ST_GGUF_TYPE_STRING);
    assert_int_equal(a.n, 3);
    assert_true(st_gguf_string_eq(a.strings[0], "a"));
    assert_int_equal(a.strings[1].len, 0);
    assert_true(st_gguf_string_eq(a.strings[2], "a longer string"));
    assert_int_equal(st_gguf_get_arr(f, "test.nested", &a, &err), ST_OK);
    assert_int_equal(a.elem_type, ST_GGUF_TYPE_ARRAY);
    assert_int_equal(a.n, 2);
    assert_int_equal(a.arrays[0].v.arr.elem_type, ST_GGUF_TYPE_INT16);
    assert_int_equal(a.arrays[0].v.arr.n, 2);
    assert_int_equal(st_gguf_array_get_i64(&a.arrays[0].v.arr, 1), -2);
    assert_int_equal(st_gguf_array_get_i64(&a.arrays[1].v.arr, 0), 3);

    const st_gguf_tensor_info *t = st_gguf_find_tensor(f, "t.3d");
    assert_non_null(t);
    assert_int_equal(t->n_dims, 3);
    assert_int_equal(t->ne[0], 2);
    assert_int_equal(t->ne[1], 3);
    assert_int_equal(t->ne[2], 2);
    assert_int_equal(t->ne[3], 1);
    assert_int_equal(t->type, ST_TYPE_F32);
    assert_int_equal(t->offset, 64);
    assert_int_equal(t->nbytes, 48);
    /* the data section holds byte (i * 37 + 11) mod 256 at position i */
    const uint8_t *p = t->data;
    for (size_t i = 0; i < t->nbytes; i++) assert_int_equal(p[i], (uint8_t)((64 + i) * 37 + 11));
    assert_int_equal(st_gguf_find_tensor(f, "t.f16")->type, ST_TYPE_F16);
    st_gguf_close(f);

    /* the same through the file path */
    f = NULL;
    if (st_gguf_open(STRIDE_TEST_DATA "/valid_base.gguf", &f, &err) != ST_OK)
        fail_msg("valid_base.gguf (path): %s", err.message);
    st_fuzz_gguf_walk(f, NULL, size);
    assert_int_equal(st_gguf_n_tensors(f), 3);
    st_gguf_close(f);
    free(buf);
    free(raw);
}

/* Every proper prefix of the base file is rejected with a format error, except those
 * that still hold all tensor data (only the trailing alignment padding is missing): those
 * are valid files and must parse and walk cleanly. */
static void test_every_prefix_rejected(void **state) {
    (void)state;
    size_t size;
    uint8_t *raw = load_base(&size);
    st_gguf_file *f = NULL;
    st_error err;
    assert_int_equal(st_gguf_open_memory(raw, size, &f, &err), ST_OK);
    uint64_t data_end = st_gguf_data_offset(f);
    for (uint64_t i = 0; i < st_gguf_n_tensors(f); i++) {
        const st_gguf_tensor_info *t = st_gguf_get_tensor(f, i);
        if (st_gguf_data_offset(f) + t->offset + t->nbytes > data_end)
            data_end = st_gguf_data_offset(f) + t->offset + t->nbytes;
    }
    st_gguf_close(f);
    assert_true(data_end < size); /* the base file ends with padding: both sides tested */

    size_t n_rejected = 0, n_accepted = 0;
    for (size_t len = 0; len < size; len++) {
        uint8_t *buf = exact_copy(raw, len);
        memset(&err, 0, sizeof(err));
        f = (st_gguf_file *)&err;
        st_status st = st_gguf_open_memory(buf, len, &f, &err);
        if (len < data_end) {
            if (st == ST_OK) fail_msg("prefix of %zu of %zu bytes was accepted", len, size);
            if (st != ST_ERROR_FORMAT || f != NULL || err.message[0] == '\0')
                fail_msg("prefix of %zu bytes: status %s, out %p, message '%s'", len, st_status_name(st),
                         (void *)f, err.message);
            n_rejected++;
        } else {
            if (st != ST_OK) fail_msg("prefix of %zu bytes holds all tensor data but: %s", len, err.message);
            st_fuzz_gguf_walk(f, buf, len);
            st_gguf_close(f);
            n_accepted++;
        }
        free(buf);
    }
    print_message("prefixes: %zu rejected, %zu (only padding missing) accepted\n", n_rejected, n_accepted);
    assert_int_equal(n_rejected, data_end);
    assert_int_equal(n_rejected + n_accepted, size);
    free(raw);
}

static void test_byte_flips_are_clean(void **state) {
    (void)state;
    size_t size;
    uint8_t *raw = load_base(&size);
    st_gguf_file *f = NULL;
    st_error err;
    assert_int_equal(st_gguf_open_memory(raw, size, &f, &err), ST_OK);
    size_t header_end = (size_t)st_gguf_data_offset(f);
    st_gguf_close(f);
    assert_true(header_end > 24 && header_end < size);

    size_t n_ok = 0, n_err = 0;
    for (size_t pos = 0; pos < header_end; pos++) {
        const uint8_t orig = raw[pos];
        const uint8_t values[] = {0x00, 0xFF, 0x80, 0x7F, (uint8_t)(orig ^ 0x01), (uint8_t)(orig + 1),
                                  (uint8_t)(orig - 1), (uint8_t)(orig ^ 0x40)};
        for (size_t k = 0; k < sizeof(values); k++) {
            if (values[k] == orig) continue;
            uint8_t *buf = exact_copy(raw, size);
            buf[pos] = values[k];
            memset(&err, 0, sizeof(err));
            f = (st_gguf_file *)&err;
            st_status st = st_gguf_open_memory(buf, size, &f, &err);
            if (st == ST_OK) {
                st_fuzz_gguf_walk(f, buf, size);
                st_gguf_close(f);
                n_ok++;
            } else {
                if (f != NULL || err.status != st || err.message[0] == '\0')
                    fail_msg("byte %zu = 0x%02x: status %s, out %p, message '%s'", pos, values[k],
                             st_status_name(st), (void *)f, err.message);
                n_err++;
            }
            free(buf);
        }
    }
    print_message("byte flips over %zu header bytes: %zu accepted, %zu rejected\n", header_end, n_ok, n_err);
    /* both sides must have happened: flipping a string byte is harmless, the magic is not */
    assert_true(n_ok > 0);
    assert_true(n_err > 0);
    free(raw);
}

/* A value of a million arrays, each holding the next: the reader must refuse it by its
 * nesting limit, without recursing a million frames deep. */
static void test_deep_nesting_refused(void **state) {
    (void)state;
    const size_t depth = 1000000;
    const char key[] = "test.deep";
    size_t klen = sizeof(key) - 1;
    size_t size = 24 + 8 + klen + 4 + depth * 12 + 12;
    uint8_t *buf = malloc(size);
    assert_non_null(buf);
    uint8_t *p = buf;
#define PUT(v, n) \
    do { \
        uint64_t v_ = (uint64_t)(v); \
        for (int b_ = 0; b_ < (n); b_++) *p++ = (uint8_t)(v_ >> (8 * b_)); \
    } while (0)
    memcpy(p, "GGUF", 4);
    p += 4;
    PUT(3, 4);        /* version */
    PUT(0, 8);        /* n_tensors */
    PUT(1, 8);        /* n_kv */
    PUT(klen, 8);
    memcpy(p, key, klen);
    p += klen;
    PUT(ST_GGUF_TYPE_ARRAY, 4);
    for (size_t i = 0; i < depth; i++) {
        PUT(ST_GGUF_TYPE_ARRAY, 4);
        PUT(1, 8);
    }
    PUT(ST_GGUF_TYPE_UINT8, 4);
    PUT(0, 8);
#undef PUT
    assert_int_equal((size_t)(p - buf), size);
    st_error err;
    memset(&err, 0, sizeof(err));
    st_gguf_file *f = NULL;
    st_status st = st_gguf_open_memory(buf, size, &f, &err);
    assert_int_equal(st, ST_ERROR_FORMAT);
    assert_null(f);
    print_message("deep nesting: %s\n", err.message);
    assert_non_null(strstr(err.message, "nest"));
    free(buf);
}

/* The fuzz target on its seeds and on the malformed corpus: it must not abort. */
static void test_fuzz_target_replays_corpus(void **state) {
    (void)state;
    const char *dirs[] = {STRIDE_FUZZ_CORPUS, MALFORMED_DIR};
    size_t n = 0;
    for (size_t k = 0; k < 2; k++) {
        DIR *d = opendir(dirs[k]);
        if (!d) fail_msg("cannot open directory %s", dirs[k]);
        for (struct dirent *de; (de = readdir(d)) != NULL;) {
            if (de->d_name[0] == '.' || strcmp(de->d_name, "EXPECTED.tsv") == 0) continue;
            char path[1024];
            join_path(path, sizeof(path), dirs[k], de->d_name);
            size_t size;
            uint8_t *buf = read_file(path, &size);
            assert_int_equal(LLVMFuzzerTestOneInput(buf, size), 0);
            free(buf);
            n++;
        }
        closedir(d);
    }
    print_message("fuzz target replayed %zu inputs\n", n);
    assert_true(n >= MIN_CORPUS + 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_base_parses),
        cmocka_unit_test(test_corpus_matches_expected),
        cmocka_unit_test(test_every_prefix_rejected),
        cmocka_unit_test(test_byte_flips_are_clean),
        cmocka_unit_test(test_deep_nesting_refused),
        cmocka_unit_test(test_fuzz_target_replays_corpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
