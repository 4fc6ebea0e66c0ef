// GPU device discovery (CUDA or HIP): count, properties, and the device kind that keys `auto`.
#include <stdio.h>
#include <string.h>

#include "cuda/cuda_device.h"
#include "cuda/gpu_runtime.h"

extern "C" int st_cuda_runtime_device_count(void) {
    int n = 0;
    // No driver, no device: the CUDA backend is simply not usable. Clear the sticky error.
    if (st_gpu_get_device_count(&n) != st_gpu_success) {
        (void)st_gpu_get_last_error();
        return 0;
    }
    return n;
}

static st_device_kind classify(const st_gpu_device_prop_t *prop) {
#if ST_GPU_HIP
    // by the ISA: gcnArchName is "gfx1151", or with target features ("gfx90a:sramecc+:xnack-")
    const char *arch = prop->gcnArchName;
    const size_t n = strcspn(arch, ":");
    if (n == 7 && (strncmp(arch, "gfx1150", 7) == 0 || strncmp(arch, "gfx1151", 7) == 0))
        return ST_DEVICE_KIND_AMD_RDNA35;
    return ST_DEVICE_KIND_AMD_OTHER;
#else
    if (prop->major == 9) return ST_DEVICE_KIND_NVIDIA_HOPPER;
    return ST_DEVICE_KIND_NVIDIA_OTHER;
#endif
}

extern "C" st_status st_cuda_runtime_query(int index, st_device_info *out, st_error *err) {
    int n = st_cuda_runtime_device_count();
    if (index < 0 || index >= n)
        return st_error_set(err, ST_ERROR_DEVICE,
                            "GPU device %d requested but %d device(s) found (check " ST_GPU_DEVICE_HINT ")",
                            index, n);
    st_gpu_device_prop_t prop;
    ST_GPU_CHECK(st_gpu_get_device_properties(&prop, index));
    memset(out, 0, sizeof(*out));
    out->backend = ST_BACKEND_CUDA;
    out->kind = classify(&prop);
    snprintf(out->name, sizeof(out->name), "%s", prop.name);
    out->compute_major = prop.major;
    out->compute_minor = prop.minor;
    out->total_memory = prop.totalGlobalMem;
    out->l2_bytes = (size_t)prop.l2CacheSize;
    out->multiprocessors = prop.multiProcessorCount;
    ST_GPU_CHECK(st_gpu_driver_get_version(&out->driver_version));
    ST_GPU_CHECK(st_gpu_runtime_get_version(&out->runtime_version));
    return ST_OK;
}
