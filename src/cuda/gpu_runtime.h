/*
 * The one thin header between stride's GPU code and the vendor runtime.
 *
 * Every runtime and BLAS call in src/cuda goes through these names, so that a HIP build
 * is a mechanical step: map st_gpu* to hip* (and cuBLAS to hipBLAS) here and nowhere
 * else. The warp size is a named constant for the same reason (RDNA runs wave32 like
 * NVIDIA, CDNA wave64).
 */
#ifndef STRIDE_GPU_RUNTIME_H
#define STRIDE_GPU_RUNTIME_H

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define ST_GPU_WARP_SIZE 32
/* All lanes of a warp, for the *_sync shuffles (a 64-bit mask under HIP's wave64). */
#define ST_GPU_WARP_MASK 0xffffffffu

typedef cudaError_t st_gpu_error_t;
typedef cudaStream_t st_gpu_stream_t;
typedef struct cudaDeviceProp st_gpu_device_prop_t;

#define st_gpu_success cudaSuccess
#define st_gpu_error_no_device cudaErrorNoDevice
#define st_gpu_error_insufficient_driver cudaErrorInsufficientDriver
#define st_gpu_get_error_string cudaGetErrorString
#define st_gpu_get_last_error cudaGetLastError
#define st_gpu_get_device_count cudaGetDeviceCount
#define st_gpu_get_device_properties cudaGetDeviceProperties
#define st_gpu_driver_get_version cudaDriverGetVersion
#define st_gpu_runtime_get_version cudaRuntimeGetVersion
#define st_gpu_set_device cudaSetDevice
#define st_gpu_malloc cudaMalloc
#define st_gpu_free cudaFree
#define st_gpu_memcpy_2d_async cudaMemcpy2DAsync
#define st_gpu_memset_async cudaMemsetAsync
#define st_gpu_memcpy_host_to_device cudaMemcpyHostToDevice
#define st_gpu_memcpy_device_to_host cudaMemcpyDeviceToHost
#define st_gpu_stream_synchronize cudaStreamSynchronize
#define st_gpu_mem_get_info cudaMemGetInfo
#define st_gpu_memcpy_async cudaMemcpyAsync
#define st_gpu_memset_2d_async cudaMemset2DAsync
#define st_gpu_stream_create_with_flags cudaStreamCreateWithFlags
#define st_gpu_stream_non_blocking cudaStreamNonBlocking
#define st_gpu_stream_destroy cudaStreamDestroy
#define st_gpu_host_alloc cudaHostAlloc
#define st_gpu_host_alloc_default cudaHostAllocDefault
#define st_gpu_free_host cudaFreeHost
#define st_gpu_get_device cudaGetDevice
#define st_gpu_device_get_attribute cudaDeviceGetAttribute
#define st_gpu_dev_attr_multiprocessor_count cudaDevAttrMultiProcessorCount
#define st_gpu_dev_attr_unified_addressing cudaDevAttrUnifiedAddressing
#define st_gpu_dev_attr_cc_major cudaDevAttrComputeCapabilityMajor
/* kernels that need more than 48 KiB of dynamic shared memory opt in per kernel */
#define st_gpu_func_set_attribute cudaFuncSetAttribute
#define st_gpu_func_attr_max_dynamic_smem cudaFuncAttributeMaxDynamicSharedMemorySize

/* launches with attributes: programmatic stream serialization (a kernel that may start
 * before the one ahead of it ends; cuda_common.cuh's st_gpu_launch_early) */
typedef cudaLaunchConfig_t st_gpu_launch_config_t;
typedef cudaLaunchAttribute st_gpu_launch_attribute_t;
#define st_gpu_launch_attr_early cudaLaunchAttributeProgrammaticStreamSerialization
#define st_gpu_launch_kernel_ex cudaLaunchKernelEx

typedef cudaEvent_t st_gpu_event_t;
#define st_gpu_event_create_with_flags cudaEventCreateWithFlags
#define st_gpu_event_disable_timing cudaEventDisableTiming
#define st_gpu_event_destroy cudaEventDestroy
#define st_gpu_event_record cudaEventRecord
#define st_gpu_event_synchronize cudaEventSynchronize
#define st_gpu_event_create cudaEventCreate
#define st_gpu_event_elapsed_time cudaEventElapsedTime

/* ---- graphs (stream capture) ---- */
typedef cudaGraph_t st_gpu_graph_t;
typedef cudaGraphExec_t st_gpu_graph_exec_t;
#define st_gpu_stream_begin_capture cudaStreamBeginCapture
#define st_gpu_stream_capture_mode_global cudaStreamCaptureModeGlobal
#define st_gpu_stream_end_capture cudaStreamEndCapture
#define st_gpu_graph_instantiate(exec, graph) cudaGraphInstantiate(exec, graph, 0)
#define st_gpu_graph_launch cudaGraphLaunch
#define st_gpu_graph_destroy cudaGraphDestroy
#define st_gpu_graph_exec_destroy cudaGraphExecDestroy

/* A 16-byte load of data read once (weights during decode): evict-first in the caches. */
#define st_gpu_load_streaming(p) __ldcs(p)

/* ---- element types in kernels ---- */
typedef __half st_gpu_half_t;
typedef __nv_bfloat16 st_gpu_bf16_t;
#define st_gpu_half_as_float(bits) __half2float(__ushort_as_half(bits))
#define st_gpu_float_to_half_bits(f) __half_as_ushort(__float2half_rn(f))
#define st_gpu_float_to_bf16_bits(f) __bfloat16_as_ushort(__float2bfloat16_rn(f))
/* bf16 -> f32 is exact: the 16 bits are the top half of the float */
#define st_gpu_bf16_as_float(bits) __uint_as_float((unsigned int)(bits) << 16)

/* ---- BLAS (cuBLAS; hipBLAS in a HIP build) ---- */
typedef cublasHandle_t st_gpu_blas_handle_t;
typedef cublasStatus_t st_gpu_blas_status_t;
typedef cudaDataType_t st_gpu_blas_data_t;
#define st_gpu_blas_success CUBLAS_STATUS_SUCCESS
#define st_gpu_blas_create cublasCreate
#define st_gpu_blas_destroy cublasDestroy
#define st_gpu_blas_set_stream cublasSetStream
#define st_gpu_blas_set_workspace cublasSetWorkspace
#define st_gpu_blas_set_math_mode cublasSetMathMode
#define st_gpu_blas_default_math CUBLAS_DEFAULT_MATH
#define st_gpu_blas_gemm_ex cublasGemmEx
#define st_gpu_blas_op_n CUBLAS_OP_N
#define st_gpu_blas_op_t CUBLAS_OP_T
#define st_gpu_blas_r_32f CUDA_R_32F
#define st_gpu_blas_r_16f CUDA_R_16F
#define st_gpu_blas_r_16bf CUDA_R_16BF
#define st_gpu_blas_compute_32f CUBLAS_COMPUTE_32F
#define st_gpu_blas_gemm_default CUBLAS_GEMM_DEFAULT
#define st_gpu_blas_get_status_string cublasGetStatusString

/* Checks a runtime call; on failure records where and what in err and returns
 * ST_ERROR_DEVICE from the enclosing function (which must have an `st_error *err`). */
#define ST_GPU_CHECK(call)                                                                         \
    do {                                                                                           \
        st_gpu_error_t st_gpu_check_rc_ = (call);                                                  \
        if (st_gpu_check_rc_ != st_gpu_success)                                                    \
            return st_error_set(err, ST_ERROR_DEVICE, "%s failed: %s (%s:%d)", #call,            \
                                st_gpu_get_error_string(st_gpu_check_rc_), __FILE__, __LINE__);   \
    } while (0)

/* The same for a BLAS call. */
#define ST_GPU_BLAS_CHECK(call)                                                                    \
    do {                                                                                           \
        st_gpu_blas_status_t st_gpu_blas_rc_ = (call);                                             \
        if (st_gpu_blas_rc_ != st_gpu_blas_success)                                                \
            return st_error_set(err, ST_ERROR_DEVICE, "%s failed: %s (%s:%d)", #call,            \
                                st_gpu_blas_get_status_string(st_gpu_blas_rc_), __FILE__,          \
                                __LINE__);                                                         \
    } while (0)

/* After every kernel launch. */
#define ST_GPU_CHECK_LAUNCH() ST_GPU_CHECK(st_gpu_get_last_error())

#endif /* STRIDE_GPU_RUNTIME_H */
