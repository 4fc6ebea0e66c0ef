#include "stride/npy.h"

#include <errno.h>
#include <stdio.h>
#include <stdbool.h>
#include <string.h>

/* .npy v1.0: magic, version, u16 header length, a Python dict literal padded with spaces
 * and a newline so that the data starts at a multiple of 64 bytes. */
st_status st_npy_write_f32(const char *path, const float *data, int64_t rows, int64_t cols, st_error *err) {
    char dict[128];
    int n = snprintf(dict, sizeof(dict), "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %lld), }",
                     (long long)rows, (long long)cols);
    char header[256];
    size_t prefix = 10, len = (size_t)n;
    size_t total = (prefix + len + 1 + 63) / 64 * 64;
    size_t hlen = total - prefix;
    memcpy(header, "\x93NUMPY\x01\x00", 8);
    header[8] = (char)(hlen & 0xff);
    header[9] = (char)(hlen >> 8);
    memcpy(header + prefix, dict, len);
    memset(header + prefix + len, ' ', hlen - len - 1);
    header[total - 1] = '\n';
    FILE *f = fopen(path, "wb");
    if (!f) return st_error_set(err, ST_ERROR_IO, "cannot create %s: %s", path, strerror(errno));
    size_t count = (size_t)rows * (size_t)cols;
    bool ok = fwrite(header, 1, total, f) == total && fwrite(data, sizeof(float), count, f) == count;
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        remove(path);
        return st_error_set(err, ST_ERROR_IO, "writing %s failed: %s", path, strerror(errno));
    }
    return ST_OK;
}
