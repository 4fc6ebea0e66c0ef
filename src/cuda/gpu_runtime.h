/*
 * The one thin header between stride's GPU code and the vendor runtime.
 *
 * Every runtime and BLAS call in src/cuda goes through these names, so that one source
 * builds for both vendors: the CUDA names below, or (compiled as HIP: -DSTRIDE_GPU=HIP)
 * their HIP and hipBLAS equivalents. The warp size is a named constant for the same
 * reason (RDNA runs wave32 like NVIDIA, CDNA wave64).
 *
 * What only NVIDIA has (inline PTX: cp.async, griddepcontrol, ldmatrix, mma.sync; cache
 * hints; launch attributes) is used under `#if ST_GPU_NVIDIA`, each time beside a
 * portable path that does the same arithmetic with plain loads and stores.
 */
#ifndef STRIDE_GPU_RUNTIME_H
#define STRIDE_GPU_RUNTIME_H

#if defined(__HIP__)
#define ST_GPU_HIP 1
#define ST_GPU_NVIDIA 0
#else
#define ST_GPU_HIP 0
#define ST_GPU_NVIDIA 1
#endif

/* The BLAS part (handle, GEMMs). STRIDE_GPU_NO_BLAS leaves it out: only for compiling the
 * kernels where the BLAS headers are absent (scripts/hip-compile-check.sh); such objects
 * are not a backend, and the ops that need a GEMM fail with ST_ERROR_UNSUPPORTED. */
#if defined(STRIDE_GPU_NO_BLAS)
#define ST_GPU_HAVE_BLAS 0
#define ST_GPU_NO_BLAS_MESSAGE "this build has no BLAS (STRIDE_GPU_NO_BLAS: a compile check, not a backend)"
#else
#define ST_GPU_HAVE_BLAS 1
#endif

/* Dynamic shared memory a kernel plans for: what CUDA gives without an opt-in (48 KiB; only
 * the NVIDIA-only flash attention opts in to more). An AMD workgroup has 64 KiB of LDS, so a
 * kernel within this budget, and its static shared memory within the rest, fits both. */
#define ST_GPU_SMEM_BYTES (48 * 1024)

#if ST_GPU_HIP /* ===================================================== HIP (AMD) */

#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>
#if ST_GPU_HAVE_BLAS
#include <hipblas/hipblas.h>
#endif

/* Lanes of a wavefront. Host code shapes launches with it, so it is one constant for the
 * whole build, from its targets' wavefront (CMake passes 32 for RDNA, 64 for CDNA/GCN),
 * and the device pass for a target of another wavefront stops here rather than computing
 * with the wrong lane count; the backend also checks the device's (cuda_backend.cu). The
 * wavefront comes from the target family (GCN and CDNA, gfx6-gfx9: 64; RDNA, gfx10 on:
 * 32, HIP's default there), since clang deprecates __AMDGCN_WAVEFRONT_SIZE. A kernel
 * written for 32 lanes static_asserts it. */
#ifndef STRIDE_GPU_WARP_SIZE
#define STRIDE_GPU_WARP_SIZE 32
#endif
#define ST_GPU_WARP_SIZE STRIDE_GPU_WARP_SIZE
#if ST_GPU_WARP_SIZE != 32 && ST_GPU_WARP_SIZE != 64
#error "STRIDE_GPU_WARP_SIZE must be 32 or 64"
#endif
#if defined(__HIP_DEVICE_COMPILE__)
#if defined(__GFX9__) || defined(__GFX8__) || defined(__GFX7__) || defined(__GFX6__)
#define ST_GPU_TARGET_WAVEFRONT 64
#else
#define ST_GPU_TARGET_WAVEFRONT 32
#endif
#if ST_GPU_TARGET_WAVEFRONT != ST_GPU_WARP_SIZE
#error "this target's wavefront is not STRIDE_GPU_WARP_SIZE: build wave32 (RDNA) and wave64 (CDNA) targets separately"
#endif
#endif

#define ST_GPU_DEVICE_HINT "rocm-smi and HIP_VISIBLE_DEVICES"

typedef hipError_t st_gpu_error_t;
typedef hipStream_t st_gpu_stream_t;
typedef hipDeviceProp_t st_gpu_device_prop_t;

#define st_gpu_success hipSuccess
#define st_gpu_error_no_device hipErrorNoDevice
#define st_gpu_error_insufficient_driver hipErrorInsufficientDriver
#define st_gpu_get_error_string hipGetErrorString
#define st_gpu_get_last_error hipGetLastError
#define st_gpu_peek_at_last_error hipPeekAtLastError
#define st_gpu_get_device_count hipGetDeviceCount
#define st_gpu_get_device_properties hipGetDeviceProperties
#define st_gpu_driver_get_version hipDriverGetVersion
#define st_gpu_runtime_get_version hipRuntimeGetVersion
#define st_gpu_set_device hipSetDevice
#define st_gpu_malloc hipMalloc
#define st_gpu_free hipFree
#define st_gpu_memcpy_2d_async hipMemcpy2DAsync
#define st_gpu_memset_async hipMemsetAsync
#define st_gpu_memcpy_host_to_device hipMemcpyHostToDevice
#define st_gpu_memcpy_device_to_host hipMemcpyDeviceToHost
#define st_gpu_memcpy_device_to_device hipMemcpyDeviceToDevice
#define st_gpu_stream_synchronize hipStreamSynchronize
#define st_gpu_mem_get_info hipMemGetInfo
#define st_gpu_memcpy_async hipMemcpyAsync
#define st_gpu_memset_2d_async hipMemset2DAsync
#define st_gpu_stream_create_with_flags hipStreamCreateWithFlags
#define st_gpu_stream_non_blocking hipStreamNonBlocking
#define st_gpu_stream_destroy hipStreamDestroy
/* (hipHostAlloc and hipFreeHost are deprecated names of these) */
#define st_gpu_host_alloc hipHostMalloc
#define st_gpu_host_alloc_default hipHostMallocDefault
#define st_gpu_free_host hipHostFree
#define st_gpu_get_device hipGetDevice
#define st_gpu_device_get_attribute hipDeviceGetAttribute
#define st_gpu_dev_attr_multiprocessor_count hipDeviceAttributeMultiprocessorCount
#define st_gpu_dev_attr_unified_addressing hipDeviceAttributeUnifiedAddressing
#define st_gpu_dev_attr_cc_major hipDeviceAttributeComputeCapabilityMajor
#define st_gpu_dev_attr_warp_size hipDeviceAttributeWarpSize
#define st_gpu_func_set_attribute(f, attr, v) hipFuncSetAttribute((const void *)(f), attr, v)
#define st_gpu_func_attr_max_dynamic_smem hipFuncAttributeMaxDynamicSharedMemorySize

typedef hipEvent_t st_gpu_event_t;
#define st_gpu_event_create_with_flags hipEventCreateWithFlags
#define st_gpu_event_disable_timing hipEventDisableTiming
#define st_gpu_event_destroy hipEventDestroy
#define st_gpu_event_record hipEventRecord
#define st_gpu_event_synchronize hipEventSynchronize
#define st_gpu_event_create hipEventCreate
#define st_gpu_event_elapsed_time hipEventElapsedTime

typedef hipGraph_t st_gpu_graph_t;
typedef hipGraphExec_t st_gpu_graph_exec_t;
#define st_gpu_stream_begin_capture hipStreamBeginCapture
#define st_gpu_stream_capture_mode_global hipStreamCaptureModeGlobal
#define st_gpu_stream_end_capture hipStreamEndCapture
#define st_gpu_graph_instantiate(exec, graph) hipGraphInstantiate(exec, graph, NULL, NULL, 0)
#define st_gpu_graph_launch hipGraphLaunch
#define st_gpu_graph_destroy hipGraphDestroy
#define st_gpu_graph_exec_destroy hipGraphExecDestroy

/* Plain loads: HIP has no cache-operator loads (__ldcs, __ldcg) in every version. */
#define st_gpu_load_streaming(p) (*(p))
#define st_gpu_load_l2(p) (*(p))

/* Lanes of a wavefront exchanging values; a barrier of the wavefront that also orders its
 * lanes' shared-memory writes before the reads after it (what __syncwarp does on CUDA). */
#define st_gpu_shfl_xor(v, lane_mask) __shfl_xor(v, lane_mask)
#define st_gpu_shfl(v, src_lane) __shfl(v, src_lane)
__device__ __forceinline__ void st_gpu_syncwarp(void) {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
    __builtin_amdgcn_wave_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
}

typedef __half st_gpu_half_t;
#define st_gpu_half_as_float(bits) __half2float(__ushort_as_half(bits))
#define st_gpu_float_to_half_bits(f) __half_as_ushort(__float2half_rn(f))
/* f32 -> bf16 bits, round to nearest even, NaN kept quiet: st_f32_to_bf16's arithmetic
 * (src/core/types.c), since hip_bf16.h is not in every HIP */
__device__ __forceinline__ unsigned short st_gpu_float_to_bf16_bits(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

#if ST_GPU_HAVE_BLAS
/* hipBLAS. Its GEMM takes hipDataType and hipblasComputeType_t from ROCm 6.5 (the V2 API,
 * the only one from 7.0), hipblasDatatype_t before. No math mode: hipBLAS keeps F32 GEMMs in
 * F32 by default, as st_gpu_blas_default_math asks; rocBLAS keeps its own workspace. */
typedef hipblasHandle_t st_gpu_blas_handle_t;
typedef hipblasStatus_t st_gpu_blas_status_t;
#define st_gpu_blas_success HIPBLAS_STATUS_SUCCESS
#define st_gpu_blas_create hipblasCreate
#define st_gpu_blas_destroy hipblasDestroy
#define st_gpu_blas_set_stream hipblasSetStream
#define st_gpu_blas_set_workspace(h, ws, bytes) ((void)(h), (void)(ws), (void)(bytes), HIPBLAS_STATUS_SUCCESS)
#define st_gpu_blas_set_math_mode(h, mode) ((void)(h), (void)(mode), HIPBLAS_STATUS_SUCCESS)
#define st_gpu_blas_default_math 0
#define st_gpu_blas_gemm_ex hipblasGemmEx
#define st_gpu_blas_gemm_batched_ex hipblasGemmBatchedEx
#define st_gpu_blas_op_n HIPBLAS_OP_N
#define st_gpu_blas_op_t HIPBLAS_OP_T
#if HIP_VERSION >= 60500000
typedef hipDataType st_gpu_blas_data_t;
#define st_gpu_blas_r_32f HIP_R_32F
#define st_gpu_blas_r_16f HIP_R_16F
#define st_gpu_blas_r_16bf HIP_R_16BF
#define st_gpu_blas_compute_32f HIPBLAS_COMPUTE_32F
#else
typedef hipblasDatatype_t st_gpu_blas_data_t;
#define st_gpu_blas_r_32f HIPBLAS_R_32F
#define st_gpu_blas_r_16f HIPBLAS_R_16F
#define st_gpu_blas_r_16bf HIPBLAS_R_16B
#define st_gpu_blas_compute_32f HIPBLAS_R_32F
#endif
#define st_gpu_blas_gemm_default HIPBLAS_GEMM_DEFAULT
#define st_gpu_blas_get_status_string hipblasStatusToString
#endif /* ST_GPU_HAVE_BLAS */

#else /* ================================================================ CUDA */

#if ST_GPU_HAVE_BLAS
#include <cublas_v2.h>
#endif
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define ST_GPU_WARP_SIZE 32
/* All lanes of a warp, for the *_sync shuffles. */
#define ST_GPU_WARP_MASK 0xffffffffu

#define ST_GPU_DEVICE_HINT "nvidia-smi and CUDA_VISIBLE_DEVICES"

typedef cudaError_t st_gpu_error_t;
typedef cudaStream_t st_gpu_stream_t;
typedef struct cudaDeviceProp st_gpu_device_prop_t;

#define st_gpu_success cudaSuccess
#define st_gpu_error_no_device cudaErrorNoDevice
#define st_gpu_error_insufficient_driver cudaErrorInsufficientDriver
#define st_gpu_get_error_string cudaGetErrorString
#define st_gpu_get_last_error cudaGetLastError
#define st_gpu_peek_at_last_error cudaPeekAtLastError
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
#define st_gpu_memcpy_device_to_device cudaMemcpyDeviceToDevice
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
#define st_gpu_dev_attr_warp_size cudaDevAttrWarpSize
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
/* A load through L2, past the SM's read-only cache (ld.global.cg): what a kernel launched
 * early reads of its predecessor's writes (cuda_common.cuh, cuda_early_wait). */
#define st_gpu_load_l2(p) __ldcg(p)

/* Lanes of a warp exchanging values; a barrier of the warp (orders its shared memory). */
#define st_gpu_shfl_xor(v, lane_mask) __shfl_xor_sync(ST_GPU_WARP_MASK, v, lane_mask)
#define st_gpu_shfl(v, src_lane) __shfl_sync(ST_GPU_WARP_MASK, v, src_lane)
#define st_gpu_syncwarp() __syncwarp()

/* ---- element types in kernels ---- */
typedef __half st_gpu_half_t;
#define st_gpu_half_as_float(bits) __half2float(__ushort_as_half(bits))
#define st_gpu_float_to_half_bits(f) __half_as_ushort(__float2half_rn(f))
#define st_gpu_float_to_bf16_bits(f) __bfloat16_as_ushort(__float2bfloat16_rn(f))

#if ST_GPU_HAVE_BLAS
/* ---- BLAS (cuBLAS) ---- */
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
#define st_gpu_blas_gemm_batched_ex cublasGemmBatchedEx
#define st_gpu_blas_op_n CUBLAS_OP_N
#define st_gpu_blas_op_t CUBLAS_OP_T
#define st_gpu_blas_r_32f CUDA_R_32F
#define st_gpu_blas_r_16f CUDA_R_16F
#define st_gpu_blas_r_16bf CUDA_R_16BF
#define st_gpu_blas_compute_32f CUBLAS_COMPUTE_32F
#define st_gpu_blas_gemm_default CUBLAS_GEMM_DEFAULT
#define st_gpu_blas_get_status_string cublasGetStatusString
#endif /* ST_GPU_HAVE_BLAS */

#endif /* ST_GPU_HIP */

/* bf16 -> f32 is exact: the 16 bits are the top half of the float */
#define st_gpu_bf16_as_float(bits) __uint_as_float((unsigned int)(bits) << 16)

/* Checks a runtime call; on failure records where and what in err and returns
 * ST_ERROR_DEVICE from the enclosing function (which must have an `st_error *err`). */
#define ST_GPU_CHECK(call)                                                                         \
    do {                                                                                           \
        st_gpu_error_t st_gpu_check_rc_ = (call);                                                  \
        if (st_gpu_check_rc_ != st_gpu_success)                                                    \
            return st_error_set(err, ST_ERROR_DEVICE, "%s failed: %s (%s:%d)", #call,            \
                                st_gpu_get_error_string(st_gpu_check_rc_), __FILE__, __LINE__);   \
    } while (0)

#if ST_GPU_HAVE_BLAS
/* The same for a BLAS call. */
#define ST_GPU_BLAS_CHECK(call)                                                                    \
    do {                                                                                           \
        st_gpu_blas_status_t st_gpu_blas_rc_ = (call);                                             \
        if (st_gpu_blas_rc_ != st_gpu_blas_success)                                                \
            return st_error_set(err, ST_ERROR_DEVICE, "%s failed: %s (%s:%d)", #call,            \
                                st_gpu_blas_get_status_string(st_gpu_blas_rc_), __FILE__,          \
                                __LINE__);                                                         \
    } while (0)
#endif

/* After every kernel launch. */
#define ST_GPU_CHECK_LAUNCH() ST_GPU_CHECK(st_gpu_get_last_error())

#endif /* STRIDE_GPU_RUNTIME_H */
