/* CUDA device discovery, called from src/device/device.c (C) and implemented in
 * cuda_device.cu. Only compiled into builds with STRIDE_HAVE_CUDA. */
#ifndef STRIDE_CUDA_DEVICE_H
#define STRIDE_CUDA_DEVICE_H

#include "stride/device.h"

#ifdef __cplusplus
extern "C" {
#endif

int st_cuda_runtime_device_count(void);
st_status st_cuda_runtime_query(int index, st_device_info *out, st_error *err);

#ifdef __cplusplus
}
#endif

#endif
