/*
 * The calibration cache: the key, the table of results, and the file (format in
 * calibrate.h). Everything read from the file is validated before it is used: header,
 * length and checksum first, then every line, then the key.
 */
#include "stride/calibrate.h"
#include "stride/file_io.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define MAGIC "stride-calibration"
#define MAX_FILE_BYTES ((size_t)4 << 20) /* thousands of shapes; anything larger is not ours */
#define MAX_LINE 1024

#ifndef STRIDE_VERSION
#define STRIDE_VERSION "unknown"
#endif

const char *st_calibrate_stride_version(void) {
#ifdef STRIDE_GIT_COMMIT
    return STRIDE_VERSION "+" STRIDE_GIT_COMMIT;
#else
    return STRIDE_VERSION;
#endif
}

/* ---- key ---------------------------------------------------------------------------- */

/* Copies s into a key field, control characters (which would break the line format)
 * turned into spaces. */
static void copy_field(char *dst, size_t size, const char *s) {
    snprintf(dst, size, "%s", s ? s : "");
    for (char *p = dst; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = ' ';
}

void st_calibrate_key_init(st_calib_key *key, const st_device_info *dev, size_t alias, size_t pad) {
    ST_ASSERT(key != NULL && dev != NULL);
    memset(key, 0, sizeof(*key));
    copy_field(key->backend, sizeof(key->backend), st_backend_name(dev->backend));
    copy_field(key->device, sizeof(key->device), dev->name[0] ? dev->name : "unknown");
    key->driver_version = dev->driver_version;
    key->runtime_version = dev->runtime_version;
    copy_field(key->stride_version, sizeof(key->stride_version), st_calibrate_stride_version());
    key->alias = alias;
    key->pad = pad;
}

/* The first field in which `got` differs from `want`, described for the user; NULL when
 * they are equal. */
static const char *key_difference(const st_calib_key *got, const st_calib_key *want, char *buf, size_t size) {
    if (strcmp(got->backend, want->backend) != 0)
        snprintf(buf, size, "backend %s, not %s", got->backend, want->backend);
    else if (strcmp(got->device, want->device) != 0)
        snprintf(buf, size, "device \"%s\", not \"%s\"", got->device, want->device);
    else if (got->driver_version != want->driver_version)
        snprintf(buf, size, "driver %d, not %d", got->driver_version, want->driver_version);
    else if (got->runtime_version != want->runtime_version)
        snprintf(buf, size, "runtime %d, not %d", got->runtime_version, want->runtime_version);
    else if (strcmp(got->stride_version, want->stride_version) != 0)
        snprintf(buf, size, "stride %s, not %s", got->stride_version, want->stride_version);
    else if (got->alias != want->alias || got->pad != want->pad)
        snprintf(buf, size, "alias %zu / pad %zu, not %zu / %zu", got->alias, got->pad, want->alias, want->pad);
    else
        return NULL;
    return buf;
}

/* ---- table -------------------------------------------------------------------------- */

void st_calibrate_table_init(st_calib_table *t, const st_calib_key *key) {
    memset(t, 0, sizeof(*t));
    if (key) t->key = *key;
}

const st_calib_result *st_calibrate_table_find(const st_calib_table *t, st_type type, int64_t n, int64_t k) {
    for (size_t i = 0; t && i < t->n; i++) {
        const st_calib_shape *s = &t->rows[i].shape;
        if (s->type == type && s->n == n && s->k == k) return &t->rows[i];
    }
    return NULL;
}

st_status st_calibrate_table_put(st_calib_table *t, const st_calib_result *r, st_error *err) {
    for (size_t i = 0; i < t->n; i++) {
        const st_calib_shape *s = &t->rows[i].shape;
        if (s->type == r->shape.type && s->n == r->shape.n && s->k == r->shape.k) {
            t->rows[i] = *r;
            return ST_OK;
        }
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 16;
        st_calib_result *rows = realloc(t->rows, cap * sizeof(*rows));
        if (!rows) return st_error_set(err, ST_ERROR_NOMEM, "calibration table: out of memory");
        t->rows = rows;
        t->cap = cap;
    }
    t->rows[t->n++] = *r;
    return ST_OK;
}

void st_calibrate_table_free(st_calib_table *t) {
    if (!t) return;
    free(t->rows);
    t->rows = NULL;
    t->n = t->cap = 0;
}

/* ---- path --------------------------------------------------------------------------- */

st_status st_calibrate_cache_path(const st_calib_key *key, st_getenv_fn getenv_fn, void *getenv_ctx, char *buf,
                                  size_t size, st_error *err) {
    if (!getenv_fn) getenv_fn = st_getenv_process;
    char dir[1024];
    const char *xdg = getenv_fn("XDG_CACHE_HOME", getenv_ctx);
    const char *home = getenv_fn("HOME", getenv_ctx);
    if (xdg && xdg[0] == '/') snprintf(dir, sizeof(dir), "%s/stride", xdg);
    else if (home && home[0]) snprintf(dir, sizeof(dir), "%s/.cache/stride", home);
    else
        return st_error_set(err, ST_ERROR_INVALID,
                            "no cache directory for the calibration: neither XDG_CACHE_HOME (absolute) nor HOME is "
                            "set");
    char slug[72];
    size_t j = 0;
    for (const char *p = key->device; *p && j < sizeof(slug) - 1; p++) {
        unsigned char c = (unsigned char)*p;
        if (isalnum(c)) slug[j++] = (char)tolower(c);
        else if (j > 0 && slug[j - 1] != '-') slug[j++] = '-';
    }
    while (j > 0 && slug[j - 1] == '-') j--;
    slug[j] = '\0';
    int n = snprintf(buf, size, "%s/calibration-%s-%s-a%zu-p%zu.txt", dir, key->backend, j ? slug : "device",
                     key->alias, key->pad);
    if (n < 0 || (size_t)n >= size)
        return st_error_set(err, ST_ERROR_INVALID, "the calibration cache path is too long (over %zu bytes) under %s",
                            size - 1, dir);
    return ST_OK;
}

/* ---- format ------------------------------------------------------------------------- */

static uint64_t fnv1a64(const char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

typedef struct strbuf {
    char *p;
    size_t len, cap;
    bool nomem;
} strbuf;

static void sb_printf(strbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void sb_printf(strbuf *b, const char *fmt, ...) {
    if (b->nomem) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->nomem = true;
            return;
        }
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap : 1024;
        while (cap <= b->len + (size_t)n) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->nomem = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

st_status st_calibrate_cache_format(const st_calib_table *t, char **out, size_t *len, st_error *err) {
    strbuf body = {0};
    const st_calib_key *k = &t->key;
    sb_printf(&body, "backend %s\ndevice %s\ndriver %d\nruntime %d\nstride %s\nalias %zu\npad %zu\n", k->backend,
              k->device, k->driver_version, k->runtime_version, k->stride_version, k->alias, k->pad);
    sb_printf(&body, "# shape type n k prefill_m reps | decode: packed_us padded_us ratio noise | prefill: "
                     "packed_us padded_us ratio noise | gain noise decision (ratios padded/packed)\n");
    for (size_t i = 0; i < t->n; i++) {
        const st_calib_result *r = &t->rows[i];
        sb_printf(&body, "shape %s %lld %lld %lld %d %.6g %.6g %.6g %.6g %.6g %.6g %.6g %.6g %.6g %.6g %s\n",
                  st_type_name((uint32_t)r->shape.type), (long long)r->shape.n, (long long)r->shape.k,
                  (long long)r->prefill_m, r->reps, r->dec_packed_us, r->dec_padded_us, r->dec_ratio, r->dec_noise,
                  r->pre_packed_us, r->pre_padded_us, r->pre_ratio, r->pre_noise, r->verdict.gain, r->verdict.noise,
                  r->verdict.pad ? "pad" : "packed");
    }
    strbuf file = {0};
    if (!body.nomem)
        sb_printf(&file, "%s %d %zu %016llx\n%.*s", MAGIC, ST_CALIBRATE_FORMAT_VERSION, body.len,
                  (unsigned long long)fnv1a64(body.p, body.len), (int)body.len, body.p);
    free(body.p);
    if (body.nomem || file.nomem) {
        free(file.p);
        return st_error_set(err, ST_ERROR_NOMEM, "calibration cache: out of memory");
    }
    *out = file.p;
    *len = file.len;
    return ST_OK;
}

/* ---- parse -------------------------------------------------------------------------- */

static st_status corrupt(st_calib_cache_state *state, st_error *err, const char *fmt, const char *detail,
                         int line) {
    *state = ST_CALIB_CACHE_CORRUPT;
    char what[160];
    snprintf(what, sizeof(what), fmt, detail ? detail : "");
    if (line > 0) return st_error_set(err, ST_ERROR_FORMAT, "corrupt (line %d: %s)", line, what);
    return st_error_set(err, ST_ERROR_FORMAT, "corrupt (%s)", what);
}

/* Strict numbers: the whole token, in range. */
static bool parse_ll(const char *s, long long lo, long long hi, long long *out) {
    if (!s || !*s) return false;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static bool parse_d(const char *s, double *out) {
    if (!s || !*s) return false;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

/* Splits a line (modified in place) at single spaces into at most max tokens. */
static int split(char *line, char **tok, int max) {
    int n = 0;
    char *p = line;
    while (*p && n < max + 1) {
        if (n == max) return max + 1; /* too many */
        tok[n++] = p;
        char *sp = strchr(p, ' ');
        if (!sp) break;
        *sp = '\0';
        p = sp + 1;
    }
    return n;
}

#define SHAPE_FIELDS 16 /* type n k m reps, 10 numbers, decision */

static bool parse_shape_line(char *rest, st_calib_result *r) {
    char *tok[SHAPE_FIELDS];
    if (split(rest, tok, SHAPE_FIELDS) != SHAPE_FIELDS) return false;
    memset(r, 0, sizeof(*r));
    long long n, k, m, reps;
    if (!st_type_from_name(tok[0], &r->shape.type) || !st_type_get_traits((uint32_t)r->shape.type)->is_float)
        return false;
    if (!parse_ll(tok[1], 1, INT64_C(1) << 40, &n) || !parse_ll(tok[2], 1, INT64_C(1) << 40, &k) ||
        !parse_ll(tok[3], 1, INT64_C(1) << 20, &m) || !parse_ll(tok[4], 1, 1 << 20, &reps))
        return false;
    r->shape.n = n;
    r->shape.k = k;
    r->prefill_m = m;
    r->reps = (int)reps;
    double *d[] = {&r->dec_packed_us, &r->dec_padded_us, &r->dec_ratio, &r->dec_noise,
                   &r->pre_packed_us, &r->pre_padded_us, &r->pre_ratio, &r->pre_noise,
                   &r->verdict.gain,  &r->verdict.noise};
    for (int i = 0; i < 10; i++)
        if (!parse_d(tok[5 + i], d[i])) return false;
    if (strcmp(tok[15], "pad") == 0) r->verdict.pad = true;
    else if (strcmp(tok[15], "packed") == 0) r->verdict.pad = false;
    else return false;
    return r->dec_packed_us > 0 && r->dec_padded_us > 0 && r->pre_packed_us > 0 && r->pre_padded_us > 0 &&
           r->dec_ratio > 0 && r->pre_ratio > 0 && r->dec_noise >= 0 && r->pre_noise >= 0 && r->verdict.noise >= 0;
}

st_status st_calibrate_cache_parse(const char *text, size_t len, const st_calib_key *expect, st_calib_table *out,
                                   st_calib_cache_state *state, st_error *err) {
    ST_ASSERT(text != NULL || len == 0);
    ST_ASSERT(expect != NULL && out != NULL && state != NULL);
    st_calibrate_table_init(out, NULL);
    /* header: "stride-calibration <version> <body bytes> <16 hex>\n" */
    const char *nl = len ? memchr(text, '\n', len < 128 ? len : 128) : NULL;
    if (len < sizeof(MAGIC) || memcmp(text, MAGIC " ", sizeof(MAGIC)) != 0)
        return corrupt(state, err, "not a stride calibration file%s", NULL, 0);
    if (!nl) return corrupt(state, err, "header line is incomplete%s", NULL, 0);
    char header[128];
    size_t hl = (size_t)(nl - text);
    memcpy(header, text, hl);
    header[hl] = '\0';
    char *tok[4];
    long long version, body_len;
    if (split(header, tok, 4) != 4 || !parse_ll(tok[1], 0, 1000000, &version))
        return corrupt(state, err, "malformed header%s", NULL, 1);
    if (version != ST_CALIBRATE_FORMAT_VERSION) {
        *state = ST_CALIB_CACHE_STALE;
        return st_error_set(err, ST_ERROR_FORMAT, "stale (format version %lld, this stride writes %d)", version,
                            ST_CALIBRATE_FORMAT_VERSION);
    }
    if (!parse_ll(tok[2], 0, (long long)MAX_FILE_BYTES, &body_len) || strlen(tok[3]) != 16)
        return corrupt(state, err, "malformed header%s", NULL, 1);
    char *hex_end = NULL;
    unsigned long long sum = strtoull(tok[3], &hex_end, 16);
    if (*hex_end) return corrupt(state, err, "malformed checksum%s", NULL, 1);
    const char *body = nl + 1;
    size_t have = len - hl - 1;
    if (have < (size_t)body_len) return corrupt(state, err, "truncated: the body is shorter than its header says%s", NULL, 0);
    if (have > (size_t)body_len) return corrupt(state, err, "trailing bytes after the body%s", NULL, 0);
    if (fnv1a64(body, have) != sum) return corrupt(state, err, "checksum mismatch%s", NULL, 0);
    if (have == 0 || body[have - 1] != '\n') return corrupt(state, err, "the body does not end with a newline%s", NULL, 0);

    /* the body, line by line: the key in a fixed order, then shapes */
    static const char *const key_names[] = {"backend", "device", "driver", "runtime", "stride", "alias", "pad"};
    const int n_key = (int)(sizeof(key_names) / sizeof(key_names[0]));
    st_calib_key key;
    memset(&key, 0, sizeof(key));
    st_calib_table t;
    st_calibrate_table_init(&t, NULL);
    const char *p = body, *end = body + have;
    int line_no = 1, field = 0;
    st_status s = ST_OK;
    while (p < end) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        size_t ll = (size_t)(e - p);
        line_no++;
        char line[MAX_LINE];
        if (ll >= sizeof(line)) {
            s = corrupt(state, err, "line too long%s", NULL, line_no);
            goto fail;
        }
        memcpy(line, p, ll);
        line[ll] = '\0';
        p = e + 1;
        if (memchr(line, '\0', ll)) {
            s = corrupt(state, err, "NUL byte%s", NULL, line_no);
            goto fail;
        }
        if (line[0] == '#') continue;
        char *sp = strchr(line, ' ');
        if (!sp) {
            s = corrupt(state, err, "expected \"name value\"%s", NULL, line_no);
            goto fail;
        }
        *sp = '\0';
        char *value = sp + 1;
        long long v;
        if (field < n_key) {
            if (strcmp(line, key_names[field]) != 0) {
                s = corrupt(state, err, "expected the key field %s", key_names[field], line_no);
                goto fail;
            }
            bool ok = true;
            switch (field) {
            case 0: ok = strlen(value) < sizeof(key.backend); copy_field(key.backend, sizeof(key.backend), value); break;
            case 1: ok = strlen(value) < sizeof(key.device); copy_field(key.device, sizeof(key.device), value); break;
            case 2: ok = parse_ll(value, 0, 1LL << 31, &v); key.driver_version = (int)v; break;
            case 3: ok = parse_ll(value, 0, 1LL << 31, &v); key.runtime_version = (int)v; break;
            case 4:
                ok = strlen(value) < sizeof(key.stride_version);
                copy_field(key.stride_version, sizeof(key.stride_version), value);
                break;
            case 5: ok = parse_ll(value, 1, 1LL << 30, &v); key.alias = (size_t)v; break;
            case 6: ok = parse_ll(value, 1, 1LL << 30, &v); key.pad = (size_t)v; break;
            }
            if (!ok) {
                s = corrupt(state, err, "bad value for %s", key_names[field], line_no);
                goto fail;
            }
            field++;
            continue;
        }
        st_calib_result r;
        if (strcmp(line, "shape") != 0 || !parse_shape_line(value, &r)) {
            s = corrupt(state, err, "malformed shape line%s", NULL, line_no);
            goto fail;
        }
        /* the phrase is not stored: the rule's, when it agrees with the stored decision */
        st_calib_verdict rule;
        st_calibrate_decide(r.dec_ratio, r.dec_noise, r.pre_ratio, r.pre_noise, &rule);
        r.verdict.why = rule.pad == r.verdict.pad ? rule.why : "cached decision";
        if ((s = st_calibrate_table_put(&t, &r, err)) != ST_OK) goto fail;
    }
    if (field < n_key) {
        s = corrupt(state, err, "the key lacks %s", key_names[field], 0);
        goto fail;
    }
    char diff[640];
    if (key_difference(&key, expect, diff, sizeof(diff))) {
        *state = ST_CALIB_CACHE_STALE;
        s = st_error_set(err, ST_ERROR_FORMAT, "stale (made for %s)", diff);
        goto fail;
    }
    t.key = key;
    *out = t;
    *state = ST_CALIB_CACHE_OK;
    return ST_OK;
fail:
    st_calibrate_table_free(&t);
    return s;
}

/* ---- files -------------------------------------------------------------------------- */

st_status st_calibrate_cache_load(const char *path, const st_calib_key *expect, st_calib_table *out,
                                  st_calib_cache_state *state, st_error *err) {
    st_calibrate_table_init(out, NULL);
    struct stat st;
    if (lstat(path, &st) != 0 && errno == ENOENT) {
        *state = ST_CALIB_CACHE_MISSING;
        return st_error_set(err, ST_ERROR_IO, "missing");
    }
    /* a regular file only: a FIFO placed there must not block the load */
    FILE *f = NULL;
    st_error open_err = {0};
    if (st_file_fopen_read(path, "calibration cache", &f, NULL, &open_err) != ST_OK) {
        *state = ST_CALIB_CACHE_CORRUPT;
        if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
            return st_error_set(err, ST_ERROR_IO, "unusable: it is %s, not a regular file",
                                st_file_kind_name((unsigned)st.st_mode));
        return st_error_set(err, ST_ERROR_IO, "unreadable: %s", strerror(errno ? errno : EIO));
    }
    char *buf = malloc(MAX_FILE_BYTES + 1);
    if (!buf) {
        fclose(f);
        *state = ST_CALIB_CACHE_MISSING;
        return st_error_set(err, ST_ERROR_NOMEM, "out of memory reading the calibration cache");
    }
    errno = 0;
    size_t n = fread(buf, 1, MAX_FILE_BYTES + 1, f);
    bool read_error = ferror(f);
    int read_errno = errno ? errno : EIO;
    fclose(f);
    st_status s;
    if (read_error) {
        *state = ST_CALIB_CACHE_CORRUPT;
        s = st_error_set(err, ST_ERROR_IO, "unreadable: %s", strerror(read_errno));
    } else if (n > MAX_FILE_BYTES) {
        *state = ST_CALIB_CACHE_CORRUPT;
        s = st_error_set(err, ST_ERROR_FORMAT, "corrupt (larger than %zu bytes)", MAX_FILE_BYTES);
    } else {
        s = st_calibrate_cache_parse(buf, n, expect, out, state, err);
    }
    free(buf);
    return s;
}

/* mkdir -p for the directory part of path. */
static st_status make_parent_dirs(const char *path, st_error *err) {
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return ST_OK;
    *slash = '\0';
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST)
            return st_error_set(err, ST_ERROR_IO, "cannot create %s: %s", dir, strerror(errno));
        *p = '/';
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return st_error_set(err, ST_ERROR_IO, "cannot create %s: %s", dir, strerror(errno));
    return ST_OK;
}

st_status st_calibrate_cache_save(const char *path, const st_calib_table *t, st_error *err) {
    st_status s = make_parent_dirs(path, err);
    if (s != ST_OK) return s;
    char *text = NULL;
    size_t len = 0;
    if ((s = st_calibrate_cache_format(t, &text, &len, err)) != ST_OK) return s;
    /* temporary file + rename (file_io.h): readers never see a partial cache */
    st_atomic_file *af = NULL;
    if ((s = st_atomic_file_open(path, &af, err)) != ST_OK) {
        free(text);
        return s;
    }
    bool ok = fwrite(text, 1, len, st_atomic_file_stream(af)) == len;
    int e = errno ? errno : EIO;
    free(text);
    if (!ok) {
        st_atomic_file_abort(af);
        return st_error_set(err, ST_ERROR_IO, "cannot write %s: %s", path, strerror(e));
    }
    return st_atomic_file_commit(af, err);
}
