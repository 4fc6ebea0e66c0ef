/*
 * Programmatic dependent launch (sm_90+) for the decode path's kernels.
 *
 * A kernel launched with cuda_launch_pdl may begin while the kernel before it in the
 * stream is still running: its blocks take the SM slots that the earlier kernel's last
 * wave frees, and work that does not depend on earlier kernels (an L2 prefetch of the
 * weights it will stream) runs in that kernel's tail instead of after it. Inside a CUDA
 * graph the same overlap becomes a programmatic edge between the two kernel nodes.
 *
 * The contract, for every kernel launched this way:
 *   - cuda_pdl_wait() before its first access to global memory that an earlier op of the
 *     stream writes or reads (activations, the KV cache, partials; also before any
 *     write). It returns when every earlier kernel has finished and its writes are
 *     visible, so the ordering stays transitive along the stream.
 *   - cuda_pdl_release() after that wait, so that the next kernel is launched only once
 *     this one is past its own wait (never two kernels ahead).
 * Weights are written by uploads (copies, never a kernel of the stream), and an L2
 * prefetch is a hint served by the device-coherent L2: both may come before the wait.
 *
 * ST_CUDA_PDL (default 1) = 0 launches plainly, for A/B builds; before sm_90 the
 * instructions are absent and the attribute is not set (cuda_ctx's `pdl`).
 */
#ifndef STRIDE_CUDA_PDL_CUH
#define STRIDE_CUDA_PDL_CUH

#include <utility>

#include "cuda/cuda_common.cuh"

#ifndef ST_CUDA_PDL
#define ST_CUDA_PDL 1
#endif

__device__ __forceinline__ void cuda_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void cuda_pdl_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* A 128-byte line of p into L2 (a hint; no register, no wait). */
__device__ __forceinline__ void cuda_prefetch_l2(const void *p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

/* kernel<<<grid, block, smem, c->stream>>>(args...), allowed to overlap the kernel before
 * it when c->pdl. Returns the launch's error code. */
template <typename... Params, typename... Args>
static inline st_gpu_error_t cuda_launch_pdl(st_cuda_ctx *c, void (*kernel)(Params...), dim3 grid, dim3 block,
                                             size_t smem, Args &&...args) {
    st_gpu_launch_config_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = c->stream;
    st_gpu_launch_attribute_t attr[1];
    attr[0].id = st_gpu_launch_attribute_programmatic_serialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = ST_CUDA_PDL && c->pdl ? 1 : 0;
    return st_gpu_launch_kernel_ex(&cfg, kernel, std::forward<Args>(args)...);
}

#endif /* STRIDE_CUDA_PDL_CUH */
