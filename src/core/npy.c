#include "stride/npy.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "stride/file_io.h"

/* .npy v1.0: magic, version, u16 header length, a Python dict literal padded with spaces
 * and a newline so that the data starts at a multiple of 64 bytes. Written atomically
 * (file_io.h): a failed write leaves nothing at path and an existing file unchanged. */
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
    if (rows < 0 || cols < 0 || (cols > 0 && (uint64_t)rows > SIZE_MAX / sizeof(float) / (uint64_t)cols))
        return st_error_set(err, ST_ERROR_INVALID, "%s: a (%lld, %lld) float32 array does not fit in memory", path,
                            (long long)rows, (long long)cols);
    st_atomic_file *af = NULL;
    st_status s = st_atomic_file_open(path, &af, err);
    if (s != ST_OK) return s;
    FILE *f = st_atomic_file_stream(af);
    size_t count = (size_t)rows * (size_t)cols;
    if (fwrite(header, 1, total, f) != total || fwrite(data, sizeof(float), count, f) != count) {
        int e = errno ? errno : EIO;
        st_atomic_file_abort(af);
        return st_error_set(err, ST_ERROR_IO, "cannot write %s: %s (%s is unchanged)", path, strerror(e),
                            path);
    }
    return st_atomic_file_commit(af, err);
}
