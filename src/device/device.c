#include "stride/device.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cuda/cuda_device.h"

const char *st_backend_name(st_backend_kind backend) {
    return backend == ST_BACKEND_CUDA ? "cuda" : "cpu";
}

bool st_cuda_compiled(void) {
#ifdef STRIDE_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

int st_cuda_device_count(void) {
#ifdef STRIDE_HAVE_CUDA
    return st_cuda_runtime_device_count();
#else
    return 0;
#endif
}

/* CPU model name from /proc/cpuinfo, last-level cache from sysconf where glibc has it. */
static void query_cpu(st_device_info *out) {
    snprintf(out->name, sizeof(out->name), "cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof(line), f)) {
            if (strncmp(line, "model name", 10) != 0) continue;
            const char *colon = strchr(line, ':');
            if (!colon) break;
            colon++;
            while (*colon == ' ' || *colon == '\t') colon++;
            snprintf(out->name, sizeof(out->name), "%s", colon);
            out->name[strcspn(out->name, "\n")] = '\0';
            break;
        }
        fclose(f);
    }
#ifdef _SC_LEVEL3_CACHE_SIZE
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    out->l2_bytes = (size_t)(l3 > 0 ? l3 : (l2 > 0 ? l2 : 0));
#endif
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) out->total_memory = (size_t)pages * (size_t)page;
}

st_status st_device_query(st_backend_kind backend, int index, st_device_info *out, st_error *err) {
    memset(out, 0, sizeof(*out));
    out->backend = backend;
    if (backend == ST_BACKEND_CPU) {
        out->kind = ST_DEVICE_KIND_CPU;
        query_cpu(out);
        return ST_OK;
    }
#ifdef STRIDE_HAVE_CUDA
    return st_cuda_runtime_query(index, out, err);
#else
    return st_error_set(err, ST_ERROR_UNSUPPORTED,
                        "this stride was built without the CUDA backend (rebuild with nvcc on PATH, "
                        "or -DSTRIDE_CUDA=ON)");
#endif
}

st_backend_kind st_backend_default(void) {
    return st_cuda_device_count() > 0 ? ST_BACKEND_CUDA : ST_BACKEND_CPU;
}

st_status st_backend_parse(const char *s, st_backend_kind *out, st_error *err) {
    if (strcmp(s, "cpu") == 0) {
        *out = ST_BACKEND_CPU;
        return ST_OK;
    }
    if (strcmp(s, "cuda") == 0) {
        if (!st_cuda_compiled())
            return st_error_set(err, ST_ERROR_INVALID,
                                "--backend cuda: this stride was built without the CUDA backend");
        *out = ST_BACKEND_CUDA;
        return ST_OK;
    }
    return st_error_set(err, ST_ERROR_INVALID, "unknown backend '%s' (expected cpu or cuda)", s);
}
