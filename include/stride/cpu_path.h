/*
 * stride: the CPU backend's two paths.
 *
 *   fast   (the default) vector kernels for the instruction set this CPU has (AVX-512 with
 *          VNNI, AVX2 + FMA + F16C, NEON, or portable C), picked at run time. Products
 *          with quantized weights quantize the activations to int8 per block of 32 and
 *          multiply in integers, as llama.cpp does; float products sum in vector order.
 *   exact  the reference ops (cpu_ops.h): plain C, f32 activations everywhere, the
 *          path every other backend and test is checked against.
 * Both give the same result with padding on and off and for any thread count; they
 * differ from each other by summation order and, with quantized weights, by the
 * activations' quantization (bounded in tests/unit/test_cpu_fast_*.c).
 */
#ifndef STRIDE_CPU_PATH_H
#define STRIDE_CPU_PATH_H

#include "stride/backend.h"
#include "stride/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum st_cpu_path {
    ST_CPU_PATH_FAST = 0,
    ST_CPU_PATH_EXACT = 1,
} st_cpu_path;

/* A CPU backend on the given path (st_backend_init(ST_BACKEND_CPU, ...) takes FAST). */
st_status st_backend_cpu_init_path(st_cpu_path path, st_backend **out, st_error *err);

/* What a backend's CPU ops run: "exact", or the fast path's variant ("avx512", "avx2",
 * "neon", "generic"). NULL for a backend that is not the CPU's. */
const char *st_backend_cpu_path_name(const st_backend *b);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_CPU_PATH_H */
