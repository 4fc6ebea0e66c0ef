/*
 * stride: the devices a model can run on, and what kind each is.
 *
 * The kind keys the built-in `auto` padding table (layout.h): the effect of padding
 * depends on the cache geometry, so the answer is per device.
 */
#ifndef STRIDE_DEVICE_H
#define STRIDE_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "stride/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The kind of device that will hold the weights: the key of the
 * built-in `auto` padding table (layout.h). */
typedef enum st_device_kind {
    ST_DEVICE_KIND_CPU = 0,
    ST_DEVICE_KIND_NVIDIA_HOPPER,  /* sm_90 */
    ST_DEVICE_KIND_NVIDIA_OTHER,
    ST_DEVICE_KIND_AMD_RDNA35,     /* gfx1150/gfx1151 */
    ST_DEVICE_KIND_AMD_OTHER,
    ST_DEVICE_KIND_COUNT,
} st_device_kind;

const char *st_device_kind_name(st_device_kind kind); /* "cpu", "nvidia-hopper", ... */
bool st_device_kind_from_name(const char *s, st_device_kind *out);

typedef enum st_backend_kind {
    ST_BACKEND_CPU = 0,
    ST_BACKEND_CUDA,
} st_backend_kind;

const char *st_backend_name(st_backend_kind backend); /* "cpu", "cuda" */

typedef struct st_device_info {
    st_backend_kind backend;
    st_device_kind kind;
    char name[256];          /* "NVIDIA H200", or the CPU model name */
    int compute_major;       /* CUDA compute capability; 0 on the CPU */
    int compute_minor;
    size_t total_memory;     /* bytes; 0 when unknown */
    size_t l2_bytes;         /* last-level cache (L2 on GPUs); 0 when unknown */
    int multiprocessors;     /* SMs of a CUDA device; 0 on the CPU */
    int driver_version;      /* CUDA driver/runtime versions (e.g. 13000); 0 on the CPU */
    int runtime_version;
} st_device_info;

/* True when stride was built with the CUDA backend. */
bool st_cuda_compiled(void);

/* Number of usable CUDA devices (0 when built without CUDA or when none is present; a
 * missing driver is not an error here). */
int st_cuda_device_count(void);

/* Describes device `index` of `backend` (index is ignored for the CPU). */
st_status st_device_query(st_backend_kind backend, int index, st_device_info *out, st_error *err);

/* The backend a command uses when none is asked for: CUDA when a device is present. */
st_backend_kind st_backend_default(void);

/* Parses "cpu" / "cuda"; ST_ERROR_INVALID otherwise, or when "cuda" is asked of a build
 * without it. */
st_status st_backend_parse(const char *s, st_backend_kind *out, st_error *err);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_DEVICE_H */
