/*
 * Calibration: the decision rule and the ratio statistics (table-driven, both sides of
 * every threshold), the cache file (round trip; every corrupted byte, every truncation,
 * every key field, another format version, foreign files each detected; atomic save),
 * the shapes of presets and files, STRIDE_CALIBRATE, and a CPU calibration end to end on
 * tiny shapes (its speed is not asserted, only that it measures and decides consistently).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stride/backend.h"
#include "stride/calibrate.h"
#include "stride/gguf.h"
#include "stride/synth.h"

/* ---- helpers ------------------------------------------------------------------------ */

typedef struct env_table {
    const char *kv[4][2];
} env_table;

static const char *table_getenv(const char *name, void *ctx) {
    const env_table *t = ctx;
    for (int i = 0; i < 4 && t->kv[i][0]; i++)
        if (strcmp(t->kv[i][0], name) == 0) return t->kv[i][1];
    return NULL;
}

static st_calib_key test_key(void) {
    st_calib_key k;
    memset(&k, 0, sizeof(k));
    snprintf(k.backend, sizeof(k.backend), "cuda");
    snprintf(k.device, sizeof(k.device), "NVIDIA H200");
    k.driver_version = 13000;
    k.runtime_version = 12080;
    snprintf(k.stride_version, sizeof(k.stride_version), "%s", st_calibrate_stride_version());
    k.alias = 2048;
    k.pad = 128;
    return k;
}

static st_calib_result test_row(st_type type, int64_t n, int64_t k, double dec_ratio, double pre_ratio) {
    st_calib_result r;
    memset(&r, 0, sizeof(r));
    r.shape = (st_calib_shape){type, n, k};
    r.prefill_m = 512;
    r.reps = 15;
    r.dec_packed_us = 5.25;
    r.dec_padded_us = 5.25 * dec_ratio;
    r.dec_ratio = dec_ratio;
    r.dec_noise = 0.002;
    r.pre_packed_us = 40.5;
    r.pre_padded_us = 40.5 * pre_ratio;
    r.pre_ratio = pre_ratio;
    r.pre_noise = 0.003;
    st_calibrate_decide(r.dec_ratio, r.dec_noise, r.pre_ratio, r.pre_noise, &r.verdict);
    return r;
}

/* A table of three shapes, formatted: the caller frees *text. */
static st_calib_table test_table(void) {
    st_calib_key k = test_key();
    st_calib_table t;
    st_calibrate_table_init(&t, &k);
    st_calib_result rows[] = {test_row(ST_TYPE_F16, 2048, 2048, 0.99, 1.0), test_row(ST_TYPE_F16, 8192, 2048, 1.0, 0.89),
                              test_row(ST_TYPE_BF16, 3072, 8192, 1.01, 1.0)};
    for (size_t i = 0; i < 3; i++) assert_int_equal(st_calibrate_table_put(&t, &rows[i], NULL), ST_OK);
    return t;
}

/* The FNV-1a 64 that calibrate.h names for the header, written out here on purpose and not
 * shared with calibrate_cache.c: an independent oracle, so that with_header's files check
 * that the library computes the documented checksum (a shared function would agree with
 * itself even if wrong). */
static uint64_t fnv1a64(const char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* A file of `body` with a correct header (version v): what a well-formed file with that
 * content looks like, so that what is tested is the content, not the checksum. */
static char *with_header(const char *body, int version, size_t *len) {
    size_t n = strlen(body);
    char *out = malloc(n + 128);
    int h = snprintf(out, 128, "stride-calibration %d %zu %016llx\n", version, n, (unsigned long long)fnv1a64(body, n));
    memcpy(out + h, body, n + 1);
    *len = (size_t)h + n;
    return out;
}

static st_calib_cache_state parse_state(const char *text, size_t len, const st_calib_key *key, char *msg,
                                        size_t msg_size) {
    st_calib_table t;
    st_calib_cache_state state = ST_CALIB_CACHE_OK;
    st_error err = {0};
    st_status s = st_calibrate_cache_parse(text, len, key, &t, &state, &err);
    if (s == ST_OK) {
        assert_int_equal(state, ST_CALIB_CACHE_OK);
        st_calibrate_table_free(&t);
    } else {
        assert_int_equal(s, ST_ERROR_FORMAT);
        assert_int_not_equal(state, ST_CALIB_CACHE_OK);
        assert_true(strlen(err.message) > 0);
        assert_null(strchr(err.message, '\n')); /* reported in one line */
    }
    if (msg) snprintf(msg, msg_size, "%s", err.message);
    return state;
}

/* ---- the rule ----------------------------------------------------------------------- */

static void test_decide(void **state) {
    (void)state;
    static const struct {
        double dr, dn, pr, pn;
        bool pad;
        const char *why;
    } cases[] = {
        /* clearly faster in both phases */
        {0.90, 0.005, 0.90, 0.005, true, "beyond noise"},
        /* prefill +11% as measured for 2048x8192 at M = 512 on the H200, decode neutral */
        {1.00, 0.002, 0.90, 0.003, true, "beyond noise"},
        /* no difference */
        {1.00, 0.001, 1.00, 0.001, false, "not faster"},
        {1.01, 0.001, 1.00, 0.001, false, "not faster"},
        /* significant but under the 1% floor (gain 0.75%) */
        {0.99, 0.0005, 0.995, 0.0005, false, "1% floor"},
        /* a 5% gain inside a noisy measurement (2 x noise ~ 7.8%) */
        {0.95, 0.05, 0.95, 0.05, false, "within noise"},
        /* one phase loses more than 2%, however much the other gains */
        {0.80, 0.001, 1.03, 0.001, false, "prefill loses"},
        {1.03, 0.001, 0.80, 0.001, false, "decode loses"},
        /* the 2% cap itself: 1.02 is allowed, just above it is not */
        {1.02, 0.0, 0.90, 0.0, true, "beyond noise"},
        {1.0201, 0.0, 0.90, 0.0, false, "decode loses"},
        {0.90, 0.0, 1.02, 0.0, true, "beyond noise"},
        {0.90, 0.0, 1.0201, 0.0, false, "prefill loses"},
        /* invalid measurements are never padded */
        {NAN, 0.0, 0.9, 0.0, false, "no valid"},
        {0.9, 0.0, 0.0, 0.0, false, "no valid"},
        {0.9, -0.1, 0.9, 0.0, false, "no valid"},
        {0.9, 0.0, INFINITY, 0.0, false, "no valid"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        st_calib_verdict v;
        st_calibrate_decide(cases[i].dr, cases[i].dn, cases[i].pr, cases[i].pn, &v);
        if (v.pad != cases[i].pad || !strstr(v.why, cases[i].why))
            print_error("case %zu: pad %d why \"%s\" gain %g noise %g\n", i, v.pad, v.why, v.gain, v.noise);
        assert_int_equal(v.pad, cases[i].pad);
        assert_non_null(strstr(v.why, cases[i].why));
    }
    /* the formulas: r = mean of the ratios, gain = 1/r - 1, noise = sqrt(dn^2+pn^2)/2/r^2 */
    st_calib_verdict v;
    st_calibrate_decide(0.9, 0.03, 1.0, 0.04, &v);
    assert_float_equal(v.gain, 1.0 / 0.95 - 1.0, 1e-12);
    assert_float_equal(v.noise, 0.5 * 0.05 / (0.95 * 0.95), 1e-12);
}

/* Both sides of the noise threshold: gain just above and just below 2 x noise. */
static void test_decide_noise_boundary(void **state) {
    (void)state;
    const double r = 0.95; /* gain = 5.26% */
    const double gain = 1.0 / r - 1.0;
    for (int above = 0; above < 2; above++) {
        /* noise n per phase gives a combined noise of n * sqrt(2) / 2 / r^2 */
        double combined = gain / 2.0 * (above ? 0.99 : 1.01);
        double n = combined * 2.0 * r * r / sqrt(2.0);
        st_calib_verdict v;
        st_calibrate_decide(r, n, r, n, &v);
        assert_int_equal(v.pad, above == 1);
    }
}

static void test_ratio_stats(void **state) {
    (void)state;
    double med, noise;
    const double odd[] = {1.0, 2.0, 3.0, 4.0, 100.0}; /* MAD 1: the outlier does not move it */
    st_calibrate_ratio_stats(odd, 5, &med, &noise);
    assert_float_equal(med, 3.0, 1e-12);
    assert_float_equal(noise, 1.2533 * 1.4826 / sqrt(5.0), 1e-9);
    const double even[] = {4.0, 1.0, 3.0, 2.0}; /* unsorted on purpose */
    st_calibrate_ratio_stats(even, 4, &med, &noise);
    assert_float_equal(med, 2.5, 1e-12);
    assert_float_equal(noise, 1.2533 * 1.4826 * 1.0 / 2.0, 1e-9);
    const double one[] = {0.97};
    st_calibrate_ratio_stats(one, 1, &med, &noise);
    assert_float_equal(med, 0.97, 1e-12);
    assert_float_equal(noise, 0.0, 0.0);
}

/* ---- the cache ---------------------------------------------------------------------- */

/* The test table formatted as a cache file, and the key it was measured for: where every
 * cache test starts. */
typedef struct cache_file {
    st_calib_table table;
    char *text; /* len bytes and a NUL */
    size_t len;
    st_calib_key key;
} cache_file;

static cache_file cache_file_init(void) {
    cache_file cf = {.table = test_table()};
    assert_int_equal(st_calibrate_cache_format(&cf.table, &cf.text, &cf.len, NULL), ST_OK);
    cf.key = test_key();
    return cf;
}

static void cache_file_free(cache_file *cf) {
    st_calibrate_table_free(&cf->table);
    free(cf->text);
}

static void test_cache_roundtrip(void **state) {
    (void)state;
    cache_file cf = cache_file_init();
    assert_int_equal(strlen(cf.text), cf.len);
    assert_int_equal(strncmp(cf.text, "stride-calibration 1 ", 21), 0);

    st_calib_table back;
    st_calib_cache_state st;
    assert_int_equal(st_calibrate_cache_parse(cf.text, cf.len, &cf.key, &back, &st, NULL), ST_OK);
    assert_int_equal(st, ST_CALIB_CACHE_OK);
    assert_int_equal(back.n, 3);
    for (size_t i = 0; i < 3; i++) {
        const st_calib_result *a = &cf.table.rows[i];
        const st_calib_result *b = st_calibrate_table_find(&back, a->shape.type, a->shape.n, a->shape.k);
        assert_non_null(b);
        assert_int_equal(b->prefill_m, a->prefill_m);
        assert_int_equal(b->reps, a->reps);
        assert_float_equal(b->dec_ratio, a->dec_ratio, 1e-5);
        assert_float_equal(b->pre_padded_us, a->pre_padded_us, 1e-3);
        assert_float_equal(b->verdict.gain, a->verdict.gain, 1e-6);
        assert_int_equal(b->verdict.pad, a->verdict.pad);
        assert_non_null(b->verdict.why);
    }
    /* the row with prefill 0.89 is padded, the others are not */
    assert_true(st_calibrate_table_find(&back, ST_TYPE_F16, 8192, 2048)->verdict.pad);
    assert_false(st_calibrate_table_find(&back, ST_TYPE_F16, 2048, 2048)->verdict.pad);
    assert_null(st_calibrate_table_find(&back, ST_TYPE_F32, 2048, 2048));
    /* put replaces a shape's row */
    st_calib_result r = test_row(ST_TYPE_F16, 2048, 2048, 0.8, 0.8);
    assert_int_equal(st_calibrate_table_put(&back, &r, NULL), ST_OK);
    assert_int_equal(back.n, 3);
    assert_true(st_calibrate_table_find(&back, ST_TYPE_F16, 2048, 2048)->verdict.pad);
    st_calibrate_table_free(&back);
    cache_file_free(&cf);
}

/* Every single flipped bit anywhere in the file is detected: CORRUPT in the body (the
 * checksum), CORRUPT or STALE in the header (a version digit turns into another version). */
static void test_cache_corrupt_byte(void **state) {
    (void)state;
    cache_file cf = cache_file_init();
    size_t body = (size_t)(strchr(cf.text, '\n') - cf.text) + 1;
    for (size_t i = 0; i < cf.len; i++) {
        for (int bit = 0; bit < 8; bit += 3) {
            cf.text[i] ^= (char)(1 << bit);
            char msg[ST_ERROR_MESSAGE_MAX];
            st_calib_cache_state s = parse_state(cf.text, cf.len, &cf.key, msg, sizeof(msg));
            if (i >= body) {
                if (s != ST_CALIB_CACHE_CORRUPT) print_error("byte %zu bit %d: state %d\n", i, bit, s);
                assert_int_equal(s, ST_CALIB_CACHE_CORRUPT);
            } else {
                assert_true(s == ST_CALIB_CACHE_CORRUPT || s == ST_CALIB_CACHE_STALE);
            }
            cf.text[i] ^= (char)(1 << bit);
        }
    }
    /* and the original still parses */
    assert_int_equal(parse_state(cf.text, cf.len, &cf.key, NULL, 0), ST_CALIB_CACHE_OK);
    char msg[ST_ERROR_MESSAGE_MAX];
    cf.text[cf.len - 3] ^= 1;
    assert_int_equal(parse_state(cf.text, cf.len, &cf.key, msg, sizeof(msg)), ST_CALIB_CACHE_CORRUPT);
    assert_non_null(strstr(msg, "checksum"));
    cache_file_free(&cf);
}

/* Every truncation (and trailing bytes) is detected. */
static void test_cache_truncated(void **state) {
    (void)state;
    cache_file cf = cache_file_init();
    for (size_t n = 0; n < cf.len; n++)
        assert_int_equal(parse_state(cf.text, n, &cf.key, NULL, 0), ST_CALIB_CACHE_CORRUPT);
    char msg[ST_ERROR_MESSAGE_MAX];
    assert_int_equal(parse_state(cf.text, cf.len - 10, &cf.key, msg, sizeof(msg)), ST_CALIB_CACHE_CORRUPT);
    assert_non_null(strstr(msg, "truncated"));
    char *longer = malloc(cf.len + 2);
    memcpy(longer, cf.text, cf.len);
    memcpy(longer + cf.len, "x\n", 2);
    assert_int_equal(parse_state(longer, cf.len + 2, &cf.key, NULL, 0), ST_CALIB_CACHE_CORRUPT);
    free(longer);
    cache_file_free(&cf);
}

/* A well-formed file for another key is stale, and the message names the field. */
static void test_cache_wrong_key(void **state) {
    (void)state;
    cache_file cf = cache_file_init();
    for (int field = 0; field < 7; field++) {
        st_calib_key k = test_key();
        const char *name = NULL;
        switch (field) {
        case 0: snprintf(k.backend, sizeof(k.backend), "cpu"); name = "backend"; break;
        case 1: snprintf(k.device, sizeof(k.device), "NVIDIA H100"); name = "device"; break;
        case 2: k.driver_version = 12080; name = "driver"; break;
        case 3: k.runtime_version = 13000; name = "runtime"; break;
        case 4: snprintf(k.stride_version, sizeof(k.stride_version), "0.0.9"); name = "stride"; break;
        case 5: k.alias = 4096; name = "alias"; break;
        case 6: k.pad = 64; name = "pad"; break;
        }
        char msg[ST_ERROR_MESSAGE_MAX];
        assert_int_equal(parse_state(cf.text, cf.len, &k, msg, sizeof(msg)), ST_CALIB_CACHE_STALE);
        if (!strstr(msg, name)) print_error("field %s: \"%s\"\n", name, msg);
        assert_non_null(strstr(msg, name));
        assert_non_null(strstr(msg, "stale"));
    }
    cache_file_free(&cf);
}

/* Another format version is stale; well-checksummed nonsense is corrupt; foreign files
 * are corrupt. */
static void test_cache_versions_and_foreign(void **state) {
    (void)state;
    cache_file cf = cache_file_init();
    const char *body = strchr(cf.text, '\n') + 1;
    size_t n;
    char msg[ST_ERROR_MESSAGE_MAX];

    char *v2 = with_header(body, 2, &n);
    assert_int_equal(parse_state(v2, n, &cf.key, msg, sizeof(msg)), ST_CALIB_CACHE_STALE);
    assert_non_null(strstr(msg, "format version 2"));
    free(v2);
    char *v1 = with_header(body, 1, &n); /* the same body with a header made here: valid */
    assert_int_equal(parse_state(v1, n, &cf.key, NULL, 0), ST_CALIB_CACHE_OK);
    free(v1);

    /* checksummed, but not what the format says */
    static const char *const bad_bodies[] = {
        "",                                                                          /* empty */
        "backend cuda\n",                                                            /* key cut short */
        "device NVIDIA H200\nbackend cuda\n",                                        /* key out of order */
        "backend cuda\ndevice NVIDIA H200\ndriver 13000\nruntime 12080\nstride x\nalias 2048\npad 128", /* no \n */
        "backend cuda\ndevice NVIDIA H200\ndriver -1\nruntime 12080\nstride x\nalias 2048\npad 128\n",
        "backend cuda\ndevice NVIDIA H200\ndriver 13000\nruntime 12080\nstride x\nalias 2048\npad 128\nbogus 1\n",
        "backend cuda\ndevice NVIDIA H200\ndriver 13000\nruntime 12080\nstride x\nalias 2048\npad 128\n"
        "shape f16 2048 2048 512 15 5 5 1 0 40 40 1 0 0 0\n", /* a field short */
        "backend cuda\ndevice NVIDIA H200\ndriver 13000\nruntime 12080\nstride x\nalias 2048\npad 128\n"
        "shape q8_0 2048 2048 512 15 5 5 1 0 40 40 1 0 0 0 packed\n", /* not a float type */
        "backend cuda\ndevice NVIDIA H200\ndriver 13000\nruntime 12080\nstride x\nalias 2048\npad 128\n"
        "shape f16 2048 2048 512 15 5 5 1 0 40 40 1 0 0 0 maybe\n", /* bad decision */
        "backend cuda\ndevice NVIDIA H200\ndriver 13000\nruntime 12080\nstride x\nalias 2048\npad 128\n"
        "shape f16 2048 2048 512 15 5 nan 1 0 40 40 1 0 0 0 packed\n", /* not finite */
        "backend cuda\ndevice NVIDIA H200\ndriver 13000\nruntime 12080\nstride x\nalias 2048\npad 128\n"
        "shape f16 2048 2048 512 15 5 5 1 0 40 40 -1 0 0 0 packed\n", /* negative ratio */
    };
    for (size_t i = 0; i < sizeof(bad_bodies) / sizeof(bad_bodies[0]); i++) {
        char *f = with_header(bad_bodies[i], 1, &n);
        if (parse_state(f, n, &cf.key, msg, sizeof(msg)) != ST_CALIB_CACHE_CORRUPT) print_error("body %zu\n", i);
        assert_int_equal(parse_state(f, n, &cf.key, NULL, 0), ST_CALIB_CACHE_CORRUPT);
        free(f);
    }
    static const char *const foreign[] = {"", "hello\n", "GGUF\3\0\0\0", "stride-calibration", "stride-calibrationX 1\n",
                                          "stride-calibration 1 5 zzzzzzzzzzzzzzzz\nabcd\n"};
    for (size_t i = 0; i < sizeof(foreign) / sizeof(foreign[0]); i++)
        assert_int_equal(parse_state(foreign[i], strlen(foreign[i]) + (i == 2 ? 4 : 0), &cf.key, NULL, 0),
                         ST_CALIB_CACHE_CORRUPT);
    cache_file_free(&cf);
}

static void test_cache_path(void **state) {
    (void)state;
    st_calib_key k = test_key();
    char buf[1100];
    env_table xdg = {{{"XDG_CACHE_HOME", "/x/cache"}, {"HOME", "/home/u"}}};
    assert_int_equal(st_calibrate_cache_path(&k, table_getenv, &xdg, buf, sizeof(buf), NULL), ST_OK);
    assert_string_equal(buf, "/x/cache/stride/calibration-cuda-nvidia-h200-a2048-p128.txt");
    env_table rel = {{{"XDG_CACHE_HOME", "relative"}, {"HOME", "/home/u"}}}; /* ignored, as the XDG spec says */
    assert_int_equal(st_calibrate_cache_path(&k, table_getenv, &rel, buf, sizeof(buf), NULL), ST_OK);
    assert_string_equal(buf, "/home/u/.cache/stride/calibration-cuda-nvidia-h200-a2048-p128.txt");
    env_table none = {{{NULL, NULL}}};
    st_error err = {0};
    assert_int_equal(st_calibrate_cache_path(&k, table_getenv, &none, buf, sizeof(buf), &err), ST_ERROR_INVALID);
    assert_non_null(strstr(err.message, "HOME"));
    /* the geometry is in the name: caches of two geometries do not overwrite each other */
    k.alias = 128;
    k.pad = 64;
    snprintf(k.device, sizeof(k.device), "Intel(R) Xeon(R)  Processor");
    snprintf(k.backend, sizeof(k.backend), "cpu");
    assert_int_equal(st_calibrate_cache_path(&k, table_getenv, &xdg, buf, sizeof(buf), NULL), ST_OK);
    assert_string_equal(buf, "/x/cache/stride/calibration-cpu-intel-r-xeon-r-processor-a128-p64.txt");
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

/* Save creates the directories, writes atomically (no temporary file left), replaces an
 * older file; load reports a missing file as missing. */
static void test_cache_files(void **state) {
    (void)state;
    char root[] = "/tmp/stride_test_calibrate_XXXXXX";
    assert_non_null(mkdtemp(root));
    char path[1100], dir[1100];
    snprintf(dir, sizeof(dir), "%s/a/b/stride", root);
    snprintf(path, sizeof(path), "%.1000s/calibration.txt", dir);
    st_calib_key key = test_key();
    st_calib_table t, back;
    st_calib_cache_state st;
    st_error err = {0};
    assert_int_equal(st_calibrate_cache_load(path, &key, &back, &st, &err), ST_ERROR_IO);
    assert_int_equal(st, ST_CALIB_CACHE_MISSING);

    t = test_table();
    assert_int_equal(st_calibrate_cache_save(path, &t, &err), ST_OK);
    assert_int_equal(count_entries(dir), 1);
    assert_int_equal(st_calibrate_cache_load(path, &key, &back, &st, &err), ST_OK);
    assert_int_equal(back.n, 3);
    st_calibrate_table_free(&back);

    st_calib_result r = test_row(ST_TYPE_F32, 64, 4096, 0.9, 0.9);
    assert_int_equal(st_calibrate_table_put(&t, &r, NULL), ST_OK);
    assert_int_equal(st_calibrate_cache_save(path, &t, &err), ST_OK);
    assert_int_equal(count_entries(dir), 1);
    assert_int_equal(st_calibrate_cache_load(path, &key, &back, &st, &err), ST_OK);
    assert_int_equal(back.n, 4);
    st_calibrate_table_free(&back);

    /* a corrupted file on disk */
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, -5, SEEK_END);
    fputc('#', f);
    fclose(f);
    assert_int_equal(st_calibrate_cache_load(path, &key, &back, &st, &err), ST_ERROR_FORMAT);
    assert_int_equal(st, ST_CALIB_CACHE_CORRUPT);

    st_calibrate_table_free(&t);
    unlink(path);
    rmdir(dir);
    snprintf(dir, sizeof(dir), "%s/a/b", root);
    rmdir(dir);
    snprintf(dir, sizeof(dir), "%s/a", root);
    rmdir(dir);
    rmdir(root);
}

/* ---- shapes and the switch ---------------------------------------------------------- */

static bool has_shape(const st_calib_shape_list *l, st_type t, int64_t n, int64_t k) {
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].type == t && l->v[i].n == n && l->v[i].k == k) return true;
    return false;
}

static void test_shapes_of_presets(void **state) {
    (void)state;
    /* qwen3-1.7b: q and o 2048x2048, k/v 1024x2048, gate/up 6144x2048, down 2048x6144
     * (N x K); the output is tied to the embeddings and never padded */
    st_calib_shape_list l = {0};
    assert_int_equal(st_calibrate_shapes_of_preset(st_synth_find_preset("qwen3-1.7b"), ST_TYPE_F16, 2048, 128, &l, NULL),
                     ST_OK);
    assert_int_equal(l.n, 4);
    assert_true(has_shape(&l, ST_TYPE_F16, 2048, 2048));
    assert_true(has_shape(&l, ST_TYPE_F16, 1024, 2048));
    assert_true(has_shape(&l, ST_TYPE_F16, 6144, 2048));
    assert_true(has_shape(&l, ST_TYPE_F16, 2048, 6144));
    st_calibrate_shapes_free(&l);
    /* gemma-3-1b: only attn_output (K = 1024, 2048 B rows) aliases */
    assert_int_equal(st_calibrate_shapes_of_preset(st_synth_find_preset("gemma-3-1b"), ST_TYPE_BF16, 2048, 128, &l, NULL),
                     ST_OK);
    assert_int_equal(l.n, 1);
    assert_true(has_shape(&l, ST_TYPE_BF16, 1152, 1024));
    st_calibrate_shapes_free(&l);
    /* a tiny model at the default geometry: nothing */
    assert_int_equal(st_calibrate_shapes_of_preset(st_synth_find_preset("tiny-qwen3"), ST_TYPE_F16, 2048, 128, &l, NULL),
                     ST_OK);
    assert_int_equal(l.n, 0);

    /* a file's shapes are the preset's shapes */
    char path[128];
    snprintf(path, sizeof(path), "/tmp/stride_test_calibrate_%d.gguf", (int)getpid());
    st_synth_options opt = {.weight_type = ST_TYPE_F16, .seed = 1};
    assert_int_equal(st_synth_write(st_synth_find_preset("tiny-qwen3"), &opt, path, NULL), ST_OK);
    st_gguf_file *f = NULL;
    assert_int_equal(st_gguf_open(path, &f, NULL), ST_OK);
    st_calib_shape_list from_file = {0};
    assert_int_equal(st_calibrate_shapes_of_gguf(f, 128, 64, ST_TYPE_COUNT, &from_file, NULL), ST_OK);
    assert_int_equal(st_calibrate_shapes_of_preset(st_synth_find_preset("tiny-qwen3"), ST_TYPE_F16, 128, 64, &l, NULL),
                     ST_OK);
    assert_int_equal(from_file.n, 4); /* q/o 64x64, k/v 32x64, gate/up 128x64, down 64x128 */
    assert_int_equal(l.n, from_file.n);
    for (size_t i = 0; i < l.n; i++) assert_true(has_shape(&from_file, l.v[i].type, l.v[i].n, l.v[i].k));
    st_calibrate_shapes_free(&l);
    st_calibrate_shapes_free(&from_file);
    st_gguf_close(f);
    unlink(path);
}

static void test_env_switch(void **state) {
    (void)state;
    static const struct {
        const char *value; /* NULL: unset */
        st_status status;
        bool allowed;
    } cases[] = {
        {NULL, ST_OK, true},   {"1", ST_OK, true},    {"on", ST_OK, true},    {"yes", ST_OK, true},
        {"true", ST_OK, true}, {"", ST_OK, true},     {"0", ST_OK, false},    {"off", ST_OK, false},
        {"no", ST_OK, false},  {"false", ST_OK, false}, {"2", ST_ERROR_INVALID, true}, {"OFF", ST_ERROR_INVALID, true},
        {" 0", ST_ERROR_INVALID, true},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        env_table env = {{{cases[i].value ? "STRIDE_CALIBRATE" : NULL, cases[i].value}}};
        bool allowed = false;
        st_error err = {0};
        assert_int_equal(st_calibrate_env_allowed(table_getenv, &env, &allowed, &err), cases[i].status);
        if (cases[i].status == ST_OK) assert_int_equal(allowed, cases[i].allowed);
        else assert_non_null(strstr(err.message, "STRIDE_CALIBRATE"));
    }
}

/* ---- measuring on the CPU ----------------------------------------------------------- */

static void test_cpu_calibrate(void **state) {
    (void)state;
    st_backend *b = NULL;
    st_error err = {0};
    assert_int_equal(st_backend_init(ST_BACKEND_CPU, 0, &b, &err), ST_OK);
    /* rows of 128 B (f16 x 64, f32 x 32) with a 128 B alias period: padded by 64 B */
    const st_calib_shape shapes[] = {{ST_TYPE_F16, 48, 64}, {ST_TYPE_F32, 40, 64}, {ST_TYPE_BF16, 16, 128}};
    st_calib_result res[3];
    st_calib_options opt = {.reps = 3, .llc_bytes = (size_t)1 << 20, .prefill_m = 8};
    assert_int_equal(st_calibrate_shapes(b, 128, 64, shapes, 3, &opt, res, &err), ST_OK);
    for (int i = 0; i < 3; i++) {
        const st_calib_result *r = &res[i];
        assert_int_equal(r->shape.n, shapes[i].n);
        assert_int_equal(r->reps, 3);
        assert_int_equal(r->prefill_m, 8);
        assert_true(r->dec_packed_us > 0 && r->dec_padded_us > 0 && r->pre_packed_us > 0 && r->pre_padded_us > 0);
        assert_true(r->dec_ratio > 0 && r->pre_ratio > 0 && r->dec_noise >= 0 && r->pre_noise >= 0);
        st_calib_verdict v;
        st_calibrate_decide(r->dec_ratio, r->dec_noise, r->pre_ratio, r->pre_noise, &v);
        assert_int_equal(v.pad, r->verdict.pad);
        assert_float_equal(v.gain, r->verdict.gain, 1e-12);
    }
    /* a budget bounds the repetitions (at least 1 pair, at most reps) */
    opt.reps = 50;
    opt.budget_s = 0.05;
    assert_int_equal(st_calibrate_shapes(b, 128, 64, shapes, 1, &opt, res, &err), ST_OK);
    assert_true(res[0].reps >= 1 && res[0].reps <= 50);
    /* shapes that cannot be padded are refused */
    const st_calib_shape bad[] = {{ST_TYPE_F16, 48, 60}, {ST_TYPE_Q8_0, 48, 128}, {ST_TYPE_F16, 0, 64}};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(st_calibrate_shapes(b, 128, 64, &bad[i], 1, &opt, res, &err), ST_ERROR_INVALID);
        assert_non_null(strstr(err.message, "cannot be padded"));
    }
    st_backend_free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decide),
        cmocka_unit_test(test_decide_noise_boundary),
        cmocka_unit_test(test_ratio_stats),
        cmocka_unit_test(test_cache_roundtrip),
        cmocka_unit_test(test_cache_corrupt_byte),
        cmocka_unit_test(test_cache_truncated),
        cmocka_unit_test(test_cache_wrong_key),
        cmocka_unit_test(test_cache_versions_and_foreign),
        cmocka_unit_test(test_cache_path),
        cmocka_unit_test(test_cache_files),
        cmocka_unit_test(test_shapes_of_presets),
        cmocka_unit_test(test_env_switch),
        cmocka_unit_test(test_cpu_calibrate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
