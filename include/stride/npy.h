/* stride: writing NumPy .npy files, so that any tool can compare stride's numbers. */
#ifndef STRIDE_NPY_H
#define STRIDE_NPY_H

#include <stdint.h>

#include "stride/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes a float32 array of shape (rows, cols), C order, format version 1.0. */
st_status st_npy_write_f32(const char *path, const float *data, int64_t rows, int64_t cols, st_error *err);

#ifdef __cplusplus
}
#endif

#endif
