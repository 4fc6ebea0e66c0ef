/*
 * Shared by the CUDA backend's files (one op family per .cu file): the backend context,
 * the strided view every kernel addresses its operands through, element loads with a
 * dtype, the device-side error record, and the host entry point of every op family.
 *
 * Error model. Launch and runtime failures return ST_ERROR_DEVICE from the op that hit
 * them (ops with a void signature keep the first one in ctx->sticky and the next
 * write/read/synchronize returns it). Bad DATA seen by a kernel (a token id outside the
 * vocabulary, an expert id outside [0, E), a cache position outside the context) cannot
 * be returned by the op without a host synchronisation, which the decode path must not
 * have: the kernel records the first such error (claimed in ctx->d_op_error, written to
 * its page-locked host record, so that a synchronize reads it without a copy) and skips
 * the bad row, and the next read/synchronize returns ST_ERROR_INVALID with the CPU
 * backend's message.
 */
#ifndef STRIDE_CUDA_COMMON_CUH
#define STRIDE_CUDA_COMMON_CUH

#include <limits.h>
#include <stdint.h>

#include "cuda/cuda_backend.h"
#include "cuda/gpu_runtime.h"
#include "stride/backend.h"

/* ---- the backend context ----------------------------------------------------------- */

/* What a kernel found wrong with its input data (first one wins). */
typedef enum st_cuda_op_error_code {
    ST_CUDA_OP_ERROR_NONE = 0,
    ST_CUDA_OP_ERROR_ROW_ID = 1,      /* get_rows: id outside [0, V) */
    ST_CUDA_OP_ERROR_EXPERT_ID = 2,   /* mul_mat_id: expert id outside [0, E) */
    ST_CUDA_OP_ERROR_KV_POSITION = 3, /* kv_store: position outside [0, n_ctx) */
} st_cuda_op_error_code;

typedef struct st_cuda_op_error {
    int code;       /* st_cuda_op_error_code; claimed by atomicCAS from 0 in device memory */
    int value;      /* the offending id or position */
    long long index; /* where it was: token index (slot for expert ids: token * n_used + j) */
    long long limit; /* the exclusive upper bound it broke */
    struct st_cuda_op_error *host; /* device record only: where the claimant writes the record
                                    * (page-locked, read by the host after a synchronize) */
} st_cuda_op_error;

#define ST_CUDA_PINNED_BUFFERS 2

typedef struct st_cuda_ctx {
    int device;
    st_gpu_stream_t stream;              /* every op, copy and GEMM runs on it, in order */
#if ST_GPU_HAVE_BLAS
    st_gpu_blas_handle_t blas;           /* bound to stream, with its own workspace */
#endif
    void *blas_workspace;
    void *scratch;                       /* GEMM operands: converted x, staged y */
    size_t scratch_bytes;
    void *handoff;                       /* a gated unit's result for the down product [M][F] */
    size_t handoff_bytes;
    int *route_counters;                 /* the fused routing's blocks done a token (zero between launches) */
    size_t route_counters_bytes;
    char *moe_upload;                    /* host: a grouped experts' call's plan upload (cuda_moe.cu); the next
                                          * call rewrites it after its wait for the ids, so after the copy */
    size_t moe_upload_bytes;
    st_cuda_op_error *d_op_error;        /* device: the claim on the first data error of an op */
    st_cuda_op_error *h_op_error;        /* page-locked: its record, written by the kernel */
    st_error sticky;                     /* first failure of a void op */
    void *pinned[ST_CUDA_PINNED_BUFFERS]; /* weight upload staging, double-buffered */
    st_gpu_event_t pinned_free[ST_CUDA_PINNED_BUFFERS]; /* its last copy has finished */
    size_t pinned_bytes;
    int pinned_next;
    st_gpu_event_t timer_start, timer_stop; /* the backend's timer (timer_start/stop) */
    bool timer_running;
    bool capturing;                      /* capture_begin .. capture_end: nothing may allocate or wait */
    void *attn_partials;                 /* split-KV attention: per-split (max, sum, acc[head_dim]) */
    size_t attn_partials_bytes;
    unsigned int flash_smem_opted;       /* flash attention kernels given their shared memory (bits) */
    int sm_count;                        /* multiprocessors of the device */
    void **retired;                      /* buffers st_cuda_grow replaced, freed with the context */
    int n_retired, retired_cap;
    st_cuda_tuning tune;                 /* kernel and schedule choices (cuda_tuning.h), fixed at init */
    float *norm_ss;                      /* the partial sums of x . x the last fused add wrote */
    size_t norm_ss_bytes;
    const void *norm_ss_for;             /* ... for the x * norm_w at this address (NULL: none) */
    int64_t norm_ss_rows;
} st_cuda_ctx;

static inline st_cuda_ctx *cuda_ctx(st_backend *b) { return (st_cuda_ctx *)b->ctx; }

/* *buf of at least nbytes on the device. Growing allocates a new buffer (whole MiB, at
 * least twice the old size) and retires the old one until the context goes, without
 * waiting: queued kernels and recorded graphs (a decode step) may still use it. Growing
 * while recording a graph is an error naming `what`. */
st_status st_cuda_grow(st_cuda_ctx *c, void **buf, size_t *cap, size_t nbytes, const char *what, st_error *err);
/* Scratch of at least nbytes on the device (grows as st_cuda_grow). */
st_status st_cuda_scratch(st_cuda_ctx *c, size_t nbytes, void **out, st_error *err);

/* Keeps the first failure of a void op for the next write/read/synchronize. */
void st_cuda_keep_error(st_cuda_ctx *c, st_status s, const st_error *err);

/* ---- strided views ------------------------------------------------------------------ */

/* A tensor as kernels see it: rows of ne0 contiguous elements, row r = (i1, i2, i3)
 * flattened with i1 fastest, at data + i1*nb1 + i2*nb2 + i3*nb3. */
typedef struct st_cuda_view {
    char *data;
    int64_t ne0, ne1, ne2, ne3;
    int64_t nb1, nb2, nb3;
} st_cuda_view;

static inline st_cuda_view cuda_view(const st_tensor *t) {
    st_cuda_view v;
    v.data = (char *)t->data;
    v.ne0 = t->ne[0];
    v.ne1 = t->ne[1];
    v.ne2 = t->ne[2];
    v.ne3 = t->ne[3];
    v.nb1 = (int64_t)t->nb[1];
    v.nb2 = (int64_t)t->nb[2];
    v.nb3 = (int64_t)t->nb[3];
    return v;
}

static inline int64_t cuda_nrows(const st_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }

/* Row r of rows [ne1, ne2, ...] as its indices: i1 = r % ne1, i2 = (r / ne1) % ne2,
 * i3 = r / (ne1 ne2). A 64-bit division is a long software sequence, which in a kernel
 * that takes a row for every few elements costs more than the elements: none for a row
 * of the first plane (r < ne1: every row of a 2-D view), 32-bit ones where the numbers fit. */
__device__ __forceinline__ void cuda_row_split(int64_t r, int64_t ne1, int64_t ne2, int64_t *i1, int64_t *i2, int64_t *i3) {
    if (r < ne1) {
        *i1 = r, *i2 = 0, *i3 = 0;
    } else if ((uint64_t)r <= UINT32_MAX && (uint64_t)ne1 <= UINT32_MAX && (uint64_t)ne2 <= UINT32_MAX) {
        const uint32_t q = (uint32_t)r / (uint32_t)ne1, q2 = q / (uint32_t)ne2;
        *i1 = (uint32_t)r - q * (uint32_t)ne1, *i2 = q - q2 * (uint32_t)ne2, *i3 = q2;
    } else {
        *i1 = r % ne1, *i2 = (r / ne1) % ne2, *i3 = r / (ne1 * ne2);
    }
}

__device__ __forceinline__ char *cuda_row(const st_cuda_view &v, int64_t r) {
    int64_t i1, i2, i3;
    cuda_row_split(r, v.ne1, v.ne2, &i1, &i2, &i3);
    return v.data + i1 * v.nb1 + i2 * v.nb2 + i3 * v.nb3;
}

/* F32 activation rows: element size in nb[0] (the contract of cpu_ops.h). */
static inline bool cuda_is_f32_rows(const st_tensor *t) {
    return t->type == ST_TYPE_F32 && t->nb[0] == sizeof(float) && t->ne[0] >= 0 && t->ne[1] >= 0 &&
           t->ne[2] >= 0 && t->ne[3] >= 0;
}

static inline bool cuda_is_float_weight(const st_tensor *t) {
    switch (t->type) {
    case ST_TYPE_F32: return t->nb[0] == 4;
    case ST_TYPE_F16:
    case ST_TYPE_BF16: return t->nb[0] == 2;
    default: return false;
    }
}

static inline bool cuda_same_shape(const st_tensor *a, const st_tensor *b) {
    return a->ne[0] == b->ne[0] && a->ne[1] == b->ne[1] && a->ne[2] == b->ne[2] && a->ne[3] == b->ne[3];
}

static inline bool cuda_is_i32_index(const st_tensor *t) {
    return t->type == ST_TYPE_I32 && t->nb[0] == sizeof(int32_t);
}

/* ---- element loads ------------------------------------------------------------------ */

/* One element of a weight/cache row as f32 (exact for all three types). */
template <st_type T> __device__ __forceinline__ float cuda_load_f32(const char *row, int64_t i);
template <> __device__ __forceinline__ float cuda_load_f32<ST_TYPE_F32>(const char *row, int64_t i) {
    return ((const float *)row)[i];
}
template <> __device__ __forceinline__ float cuda_load_f32<ST_TYPE_F16>(const char *row, int64_t i) {
    return st_gpu_half_as_float(((const unsigned short *)row)[i]);
}
template <> __device__ __forceinline__ float cuda_load_f32<ST_TYPE_BF16>(const char *row, int64_t i) {
    return st_gpu_bf16_as_float(((const unsigned short *)row)[i]);
}

/* A KV-cache element from f32 (F16: round to nearest even). */
template <st_type T> __device__ __forceinline__ void cuda_cache_store(char *row, int64_t d, float v);
template <> __device__ __forceinline__ void cuda_cache_store<ST_TYPE_F32>(char *row, int64_t d, float v) {
    ((float *)row)[d] = v;
}
template <> __device__ __forceinline__ void cuda_cache_store<ST_TYPE_F16>(char *row, int64_t d, float v) {
    ((unsigned short *)row)[d] = st_gpu_float_to_half_bits(v);
}

/* A GEMM operand element in the weight's type (F16, BF16: round to nearest even). */
template <st_type T> __device__ __forceinline__ void cuda_store_as(char *out, int64_t i, float v);
template <> __device__ __forceinline__ void cuda_store_as<ST_TYPE_F32>(char *out, int64_t i, float v) {
    ((float *)out)[i] = v;
}
template <> __device__ __forceinline__ void cuda_store_as<ST_TYPE_F16>(char *out, int64_t i, float v) {
    ((unsigned short *)out)[i] = st_gpu_float_to_half_bits(v);
}
template <> __device__ __forceinline__ void cuda_store_as<ST_TYPE_BF16>(char *out, int64_t i, float v) {
    ((unsigned short *)out)[i] = st_gpu_float_to_bf16_bits(v);
}

/* Four consecutive elements i .. i + 3 in the weight's type, one store (i a multiple of 4,
 * out 16-byte aligned): the rounding of cuda_store_as, element i at the lowest address. */
template <st_type T> __device__ __forceinline__ void cuda_store4_as(char *out, int64_t i, float4 v);
template <> __device__ __forceinline__ void cuda_store4_as<ST_TYPE_F32>(char *out, int64_t i, float4 v) {
    ((float4 *)out)[i / 4] = v;
}
template <> __device__ __forceinline__ void cuda_store4_as<ST_TYPE_F16>(char *out, int64_t i, float4 v) {
    ((uint2 *)out)[i / 4] = make_uint2((uint32_t)st_gpu_float_to_half_bits(v.x) | (uint32_t)st_gpu_float_to_half_bits(v.y) << 16,
                                       (uint32_t)st_gpu_float_to_half_bits(v.z) | (uint32_t)st_gpu_float_to_half_bits(v.w) << 16);
}
template <> __device__ __forceinline__ void cuda_store4_as<ST_TYPE_BF16>(char *out, int64_t i, float4 v) {
    ((uint2 *)out)[i / 4] = make_uint2((uint32_t)st_gpu_float_to_bf16_bits(v.x) | (uint32_t)st_gpu_float_to_bf16_bits(v.y) << 16,
                                       (uint32_t)st_gpu_float_to_bf16_bits(v.z) | (uint32_t)st_gpu_float_to_bf16_bits(v.w) << 16);
}

/* Whether a row of n floats at p can be read as float4s. */
__device__ __forceinline__ bool cuda_vec4_row(const void *p, int64_t n) { return n % 4 == 0 && (uintptr_t)p % 16 == 0; }

#if ST_GPU_HAVE_BLAS
/* The BLAS element type of a float weight type. */
static inline st_gpu_blas_data_t cuda_blas_type(st_type t) {
    switch (t) {
    case ST_TYPE_F32: return st_gpu_blas_r_32f;
    case ST_TYPE_F16: return st_gpu_blas_r_16f;
    default: return st_gpu_blas_r_16bf;
    }
}
#endif

/* The activations of the gated units, with explicit roundings in the CPU's order (no
 * fused multiply-add), so that they differ from the CPU only by the ulps of expf/tanhf. */
__device__ __forceinline__ float cuda_silu_f32(float x) { return __fdiv_rn(x, __fadd_rn(1.0f, expf(-x))); }
__device__ __forceinline__ float cuda_gelu_tanh_f32(float x) {
    const float sqrt_2_over_pi = 0.79788456080286535588f;
    const float cube = __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, x), x), x);
    const float t = tanhf(__fmul_rn(sqrt_2_over_pi, __fadd_rn(x, cube)));
    return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, t));
}
/* A gated unit's output element: act(g) * u, GeGLU's or SwiGLU's act. */
template <bool GELU> __device__ __forceinline__ float cuda_glu_one(float g, float u) {
    return __fmul_rn(GELU ? cuda_gelu_tanh_f32(g) : cuda_silu_f32(g), u);
}

/* Records a data error (first one wins); the kernel then skips the bad row. */
__device__ __forceinline__ void cuda_report_op_error(st_cuda_op_error *e, int code, int value, long long index,
                                                     long long limit) {
    if (atomicCAS(&e->code, 0, code) == 0) { // plain stores to the host: no PCIe atomics needed
        st_cuda_op_error *h = e->host;
        h->value = value;
        h->index = index;
        h->limit = limit;
        h->code = code;
    }
}

/* Grid y is at most 65535: kernels loop over rows with a stride of gridDim.y. */
#define ST_CUDA_MAX_GRID_Y 65535

static inline unsigned int cuda_grid_y(int64_t rows) {
    return (unsigned int)(rows < ST_CUDA_MAX_GRID_Y ? (rows > 0 ? rows : 1) : ST_CUDA_MAX_GRID_Y);
}

static inline unsigned int cuda_blocks(int64_t n, int threads) { return (unsigned int)((n + threads - 1) / threads); }

/* ---- host-side view checks and the row-kernel launch shape ---------------------------- */

static inline bool cuda_aligned16(const void *p) { return ((uintptr_t)p % 16) == 0; }

/* Every row of the view starts 16-byte aligned. */
static inline bool cuda_rows_aligned16(const st_tensor *t) {
    return cuda_aligned16(t->data) && t->nb[1] % 16 == 0 && t->nb[2] % 16 == 0 && t->nb[3] % 16 == 0;
}

/* Row r of the view is at data + r * nb[1] for every flattened row r. */
static inline bool cuda_rows_uniform(const st_tensor *t) {
    return (t->ne[2] == 1 || t->nb[2] == t->nb[1] * (size_t)t->ne[1]) &&
           (t->ne[3] == 1 || t->nb[3] == t->nb[1] * (size_t)(t->ne[1] * t->ne[2]));
}

/* A dimension cuBLAS takes as int. */
static inline bool cuda_fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

/* Row kernels (grid x over a row's elements, capped; grid y over rows) run this many threads. */
#define ST_CUDA_ROWS_THREADS 256
static inline dim3 cuda_rows_grid(int64_t ne0, int64_t rows) {
    unsigned int gx = cuda_blocks(ne0, ST_CUDA_ROWS_THREADS);
    return dim3(gx < 64 ? (gx ? gx : 1) : 64, cuda_grid_y(rows));
}

/* The threads st_cuda_rms_norm gives a row of D floats, whole warps: one up to 128
 * elements, 128 up to 1,024, else CUDA_NORM_MAX_THREADS. Its sum of squares runs in their
 * order (thread t its elements t, t + G, ...; each warp's xor tree; the warps' sums in
 * order), which every kernel that forms the same norm's scale reproduces. */
#define CUDA_NORM_MAX_THREADS 512
__host__ __device__ constexpr int cuda_norm_threads(int64_t D) {
    return D <= 128 ? ST_GPU_WARP_SIZE : D <= 1024 ? 128 : CUDA_NORM_MAX_THREADS;
}

/* An RMSNorm's scale 1 / sqrt(ss / n + eps) from the sum of squares ss of n values, in
 * double as the CPU backend forms it (so that the f32 result rounds alike). */
__device__ __forceinline__ float cuda_rms_scale(float ss, int64_t n, float eps) {
    return (float)(1.0 / sqrt((double)ss / (double)n + (double)eps));
}

/* An RMSNorm's (x * s) * w of four elements, rounded as the scalar form rounds each. */
__device__ __forceinline__ float4 cuda_rms_scale4(float4 x, float s, float4 w) {
    return make_float4((x.x * s) * w.x, (x.y * s) * w.y, (x.z * s) * w.z, (x.w * s) * w.w);
}

/* Programmatic dependent launch (sm_90 and later; nothing before, nor on HIP). A kernel launched early
 * (st_gpu_launch_early) may run while the kernel ahead of it still runs: until
 * cuda_early_wait returns it may read only what no kernel of the step writes (weights), and
 * it writes nothing. cuda_early_wait returns once the kernel ahead has completed and its
 * writes are visible; what it wrote must then be read through L2 (ld.global.cg), since the
 * SM's read-only cache may hold lines from before. cuda_early_release lets a kernel launched
 * early behind this one take the SM slots this one leaves free (without it: at this one's end). */
__device__ __forceinline__ void cuda_early_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cuda_early_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/* kernel<<<grid, block, smem, stream>>>(args), launched early: it may start once every block
 * of the kernel ahead in the stream has started and released (cuda_early_release) or ended,
 * and must call cuda_early_wait before it reads what that kernel writes. In a captured graph
 * the edge between the two becomes a programmatic one. */
template <typename... Params, typename... Args>
static inline st_gpu_error_t st_gpu_launch_early(void (*kernel)(Params...), dim3 grid, unsigned int block,
                                                 size_t smem, st_gpu_stream_t stream, const Args &...args) {
#if !ST_GPU_NVIDIA // no programmatic dependent launch: a plain launch (the waits above are empty)
    kernel<<<grid, block, smem, stream>>>(args...);
    return st_gpu_peek_at_last_error();
#else
    st_gpu_launch_attribute_t early[1];
    early[0].id = st_gpu_launch_attr_early;
    early[0].val.programmaticStreamSerializationAllowed = 1;
    st_gpu_launch_config_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(block);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = early;
    cfg.numAttrs = 1;
    return st_gpu_launch_kernel_ex(&cfg, kernel, args...);
#endif
}

/* The sum over a warp, in every lane (a fixed xor tree). */
__device__ __forceinline__ float cuda_warp_sum(float v) {
#pragma unroll
    for (int off = ST_GPU_WARP_SIZE / 2; off > 0; off >>= 1) v += st_gpu_shfl_xor(v, off);
    return v;
}

/* The sum of v over a group of G threads, in every thread of it; t the thread's index in
 * the group, G a multiple of the warp size or at most one warp. Each warp's xor tree, then
 * the group's warp sums added in warp order from 0.0f: the one order of every norm's sum
 * of squares, so that a norm fused into another kernel keeps the plain norm's bits.
 * partial [G / warp size] is the group's own; a group of several warps passes one block
 * barrier (every thread of the block must reach it), and the caller passes another before
 * partial is written again. */
__device__ __forceinline__ float cuda_group_sum_f32(float v, float *partial, int t, int G) {
    v = cuda_warp_sum(v);
    if (G <= ST_GPU_WARP_SIZE) return 0.0f + v;
    if (t % ST_GPU_WARP_SIZE == 0) partial[t / ST_GPU_WARP_SIZE] = v;
    __syncthreads();
    float total = 0.0f;
    for (int i = 0; i < G / ST_GPU_WARP_SIZE; i++) total += partial[i];
    return total;
}

/* The threads an elementwise kernel over rows of n floats takes a row: four floats a
 * thread (float4) where n allows, else one. */
static inline int64_t cuda_vec4_threads(int64_t n) { return n % 4 == 0 ? n / 4 : n; }

/* The order-preserving key of a float: larger float, larger unsigned key (NaN above +inf;
 * -0 below +0). */
__device__ __forceinline__ uint32_t cuda_float_key(float x) {
    const uint32_t u = __float_as_uint(x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* The inclusive sum over lanes 0 .. this one of a warp (a shuffle scan). */
template <class T> __device__ __forceinline__ T cuda_warp_inclusive_sum(T v) {
    const int lane = threadIdx.x % ST_GPU_WARP_SIZE;
#pragma unroll
    for (int off = 1; off < ST_GPU_WARP_SIZE; off <<= 1) {
        const T o = st_gpu_shfl(v, lane >= off ? lane - off : lane);
        if (lane >= off) v += o;
    }
    return v;
}

/* The maximum over a warp, in every lane. */
__device__ __forceinline__ float cuda_warp_max(float v) {
#pragma unroll
    for (int off = ST_GPU_WARP_SIZE / 2; off > 0; off >>= 1) v = fmaxf(v, st_gpu_shfl_xor(v, off));
    return v;
}

/* ---- the op families (one .cu file each) -------------------------------------------- */

/* cuda_graph.cu: the backend table's graph_compute and graph_release. */
st_status st_cuda_graph_compute(st_backend *b, st_graph *g, st_error *err);
void st_cuda_graph_release(st_backend *b, st_graph *g);

/* cuda_matmul.cu */
/* A GEMM's operands, launched with ST_CUDA_ROWS_THREADS: x rows packed as F16 (round to
 * nearest even), out[m * K + k] (16-byte aligned; grid cuda_pack_rows_grid: four elements a
 * thread where the rows allow); a result staged packed [N][M] back to a strided y (grid
 * cuda_rows_grid). */
static inline dim3 cuda_pack_rows_grid(int64_t K, int64_t M) { return cuda_rows_grid(cuda_vec4_threads(K), M); }
__global__ void pack_rows_f16(char *out, st_cuda_view x);
__global__ void unpack_rows_f32(st_cuda_view y, const float *__restrict__ packed);
st_status st_cuda_get_rows(st_backend *b, st_tensor *dst, const st_tensor *src, const st_tensor *ids,
                           st_error *err);
st_status st_cuda_mul_mat(st_backend *b, st_tensor *dst, const st_tensor *w, const st_tensor *x, st_error *err);
/* mul_mat's cuBLAS path on its own, for any M (mul_mat takes it from ST_CUDA_GEMM_MIN_M
 * columns). */
st_status st_cuda_mul_mat_gemm(st_cuda_ctx *c, st_tensor *dst, const st_tensor *w, const st_tensor *x,
                               st_error *err);
/* A fused product (backend/fused.h) on cuBLAS: F16/BF16 weights, M >= ST_CUDA_GEMM_MIN_M.
 * *ran false (and nothing done) when it does not take the operands. out_packed (a gated
 * unit) and x_packed (the product of its out): the hand-off of st_cuda_glu_hands_off, NULL
 * otherwise. */
st_status st_cuda_mul_mat_fused_gemm(st_backend *b, const st_fused_mul_mat *op, void *out_packed,
                                     const void *x_packed, bool *ran, st_error *err);

/* cuda_gemv.cu */
/* The matrix-vector product (any M; one pass per CUDA_GEMV_MAX_COLS columns). */
st_status st_cuda_gemv(st_cuda_ctx *c, st_tensor *dst, const st_tensor *w, const st_tensor *x, st_error *err);

/* cuda_moe.cu */
st_status st_cuda_mul_mat_id(st_backend *b, st_tensor *dst, const st_tensor *w, const st_tensor *x,
                             const st_tensor *ids, st_error *err);
st_status st_cuda_topk_route(st_backend *b, st_tensor *ids, st_tensor *weights, const st_tensor *logits, int32_t k,
                             bool softmax_first, bool normalize, st_error *err);
st_status st_cuda_moe_combine(st_backend *b, st_tensor *dst, const st_tensor *src, const st_tensor *weights,
                              st_error *err);

/* cuda_norm_rope.cu */
st_status st_cuda_rms_norm(st_backend *b, st_tensor *dst, const st_tensor *x, const st_tensor *w, float eps,
                           st_error *err);
/* rms_norm's rows (w required) written packed [M][D] as F16 or BF16: a GEMM's B operand. */
st_status st_cuda_rms_norm_pack(st_cuda_ctx *c, char *out, st_type type, const st_tensor *x, const st_tensor *w,
                                float eps, st_error *err);
st_status st_cuda_rope(st_backend *b, st_tensor *dst, const st_tensor *x, const st_tensor *positions,
                       const st_rope_params *p, st_error *err);

/* cuda_top_k.cu */
st_status st_cuda_top_k(st_backend *b, st_tensor *ids, st_tensor *vals, const st_tensor *logits, int32_t k,
                        st_error *err);

/* cuda_draw.cu */
st_status st_cuda_draw(st_backend *b, st_tensor *ids, st_tensor *drawn, const st_tensor *logits,
                       const st_tensor *params, const st_tensor *words, const st_tensor *penalized, st_error *err);

/* cuda_elementwise.cu */
st_status st_cuda_glu(st_backend *b, st_tensor *dst, const st_tensor *gate, const st_tensor *up, bool gelu,
                      st_error *err);
st_status st_cuda_glu_fused(st_backend *b, st_tensor *dst, const st_tensor *gate_up, bool gelu, st_error *err);
/* The gated unit of gate_up F32 [2F, M] (rows at one stride, F a row's first half) into
 * out [M][F] in a GEMM weight type (cuda_store_as), rows packed: the operand of the product
 * that reads the unit (st_cuda_glu_hands_off). */
st_status st_cuda_glu_packed(st_cuda_ctx *c, void *out, st_type type, const st_tensor *gate_up, bool gelu,
                             st_error *err);
st_status st_cuda_add(st_backend *b, st_tensor *dst, const st_tensor *a, const st_tensor *x, st_error *err);
st_status st_cuda_mul(st_backend *b, st_tensor *dst, const st_tensor *a, const st_tensor *x, st_error *err);
st_status st_cuda_scale(st_backend *b, st_tensor *dst, const st_tensor *x, float s, st_error *err);

/* cuda_attention.cu */
st_status st_cuda_kv_store(st_backend *b, st_tensor *cache, const st_tensor *x, const st_tensor *positions,
                           st_error *err);
st_status st_cuda_attention(st_backend *b, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                            const st_tensor *v_cache, const st_tensor *positions, const st_kv_pages *pages,
                            const st_attn_params *p, st_error *err);

#endif /* STRIDE_CUDA_COMMON_CUH */
