#include "stride/backend.h"

#include "backend/backend_cpu.h"
#ifdef STRIDE_HAVE_CUDA
#include "cuda/cuda_backend.h"
#endif

st_status st_backend_init(st_backend_kind kind, int index, st_backend **out, st_error *err) {
    *out = NULL;
    if (kind == ST_BACKEND_CPU) return st_backend_cpu_init(out, err);
#ifdef STRIDE_HAVE_CUDA
    return st_backend_cuda_init(index, out, err);
#else
    (void)index;
    return st_error_set(err, ST_ERROR_UNSUPPORTED,
                        "this stride was built without the CUDA backend (rebuild with nvcc on PATH)");
#endif
}

void st_backend_free(st_backend *b) {
    if (b) b->iface->free(b);
}
