#include "text_input.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stride/file_io.h"

st_status cli_read_file(const char *path, const char *what, char **data, size_t *len, st_error *err) {
    *data = NULL;
    *len = 0;
    FILE *f = NULL;
    st_status open_s = st_file_fopen_read(path, what, &f, NULL, err); /* a regular file only: never a FIFO */
    if (open_s != ST_OK) return open_s;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    st_status st = ST_OK;
    while (buf) {
        if (n + 1 >= cap) {
            char *grown = realloc(buf, cap * 2);
            if (!grown) break;
            buf = grown;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    if (!buf || n + 1 >= cap)
        st = st_error_set(err, ST_ERROR_NOMEM, "out of memory reading %s %s (%zu bytes so far)", what, path, n);
    else if (ferror(f))
        st = st_error_set(err, ST_ERROR_IO, "cannot read %s %s: %s", what, path, strerror(errno));
    fclose(f);
    if (st != ST_OK) {
        free(buf);
        return st;
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return ST_OK;
}

st_status cli_parse_token_ids(const char *text, int32_t **ids, int64_t *n, st_error *err) {
    *ids = NULL;
    *n = 0;
    int64_t cap = 1024, count = 0;
    int32_t *out = malloc((size_t)cap * sizeof(int32_t));
    if (!out) return st_error_set(err, ST_ERROR_NOMEM, "out of memory");
    const char *p = text;
    for (;;) {
        while (*p == ',' || isspace((unsigned char)*p)) p++;
        if (!*p) break;
        char *end = NULL;
        errno = 0;
        long long v = isdigit((unsigned char)*p) ? strtoll(p, &end, 10) : -1;
        if (v < 0 || v > INT32_MAX || errno != 0 || (*end && *end != ',' && !isspace((unsigned char)*end))) {
            int len = 0;
            while (p[len] && p[len] != ',' && !isspace((unsigned char)p[len]) && len < 32) len++;
            free(out);
            return st_error_set(err, ST_ERROR_INVALID, "'%.*s' (entry %lld) is not a token id", len, p,
                                (long long)count + 1);
        }
        if (count == cap) {
            int32_t *grown = realloc(out, (size_t)cap * 2 * sizeof(int32_t));
            if (!grown) {
                free(out);
                return st_error_set(err, ST_ERROR_NOMEM, "out of memory");
            }
            out = grown;
            cap *= 2;
        }
        out[count++] = (int32_t)v;
        p = end;
    }
    if (count == 0) {
        free(out);
        return st_error_set(err, ST_ERROR_INVALID, "no token ids found");
    }
    *ids = out;
    *n = count;
    return ST_OK;
}
