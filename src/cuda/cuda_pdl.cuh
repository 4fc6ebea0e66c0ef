/*
 * Programmatic dependent launch (sm_90+) for the decode path's kernels.
 *
 * A kernel launched with cuda_launch_pdl may be launched before the kernel ahead of it in
 * the stream has finished: once every block of that kernel has called cuda_pdl_release
 * (or exited), so that the launch and the block scheduling of the next kernel overlap the
 * tail of the one before. Inside a CUDA graph this becomes a programmatic edge between the
 * two kernel nodes.
 *
 * The contract, for every kernel launched this way:
 *   - cuda_pdl_wait() before its first access to global memory that an earlier op of the
 *     stream writes or reads (and before any write). It returns when every earlier kernel
 *     has finished and its writes are visible, so the ordering stays transitive along the
 *     stream whatever the release points are.
 *   - cuda_pdl_release() somewhere after that wait, at most once a thread.
 * Where the release goes decides which SM slots the next kernel's blocks get: released at
 * the start of a grid of several waves, the next grid's blocks fill the slots its last
 * wave frees first, crowded onto a few SMs (measured: tg128 -3% to -8%,
 * bench/decode-pdl-h200.md). CUDA_PDL_RELEASE_LATE (default 1) releases after a GEMV's row
 * loop, when only the reduction and the store are left; 0 right after the wait.
 *
 * ST_CUDA_PDL = 0 launches plainly, for A/B builds; before sm_90 the instructions are
 * absent and the attribute is not set (st_cuda_ctx's `pdl`).
 */
#ifndef STRIDE_CUDA_PDL_CUH
#define STRIDE_CUDA_PDL_CUH

#include <utility>

#include "cuda/cuda_common.cuh"

#ifndef ST_CUDA_PDL
#define ST_CUDA_PDL 1
#endif
#ifndef CUDA_PDL_RELEASE_LATE
#define CUDA_PDL_RELEASE_LATE 1
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
