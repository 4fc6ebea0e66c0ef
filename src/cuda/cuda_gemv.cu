// The decode-path products (M < ST_CUDA_GEMM_MIN_M columns): mul_mat's matrix-vector
// kernel and the fused products of the backend table (st_fused_mul_mat), which fold the
// RMSNorm before a projection, the gated unit after gate/up and the residual add after
// o/down into the one pass over the weights.
//
//   W_i [K, N_i] F32/F16/BF16 at row stride nb[1];  x [K, M] F32;  y_i [N_i, M] F32
//
// One warp per weight row (cuda_gemv_row: CUDA_GEMV_UNROLL 16-byte loads in flight per
// lane), CUDA_GEMV_WARPS rows per block. The blocks of up to three weights (q, k and v)
// form one grid: block b belongs to the part whose block range holds it. An RMSNorm is
// either folded into the loop of a one-column product (y = s * dot(w, x * norm_w), each
// warp forming s from the x it reads) or, for unaligned rows, x or norm_w (and several
// columns, were ST_CUDA_GEMM_MIN_M above 2), staged by every block as h = rmsnorm(x) *
// norm_w in shared memory ([M][K] floats), the scale formed as st_cuda_rms_norm forms it.
//
// Bytes per decode step: the weights once (N*K*type_size); x (K*M*4) is read per block
// but from L2/L1. FLOPs: 2*N*K*M, far below the tensor-core rate: bandwidth bound.
#include <string.h>

#include "cuda/cuda_gemv.cuh"
#include "cuda/cuda_quant.h"

#define GEMV_THREADS (CUDA_GEMV_WARPS * ST_GPU_WARP_SIZE)
enum { GEMV_NO_NORM, GEMV_NORM_STAGED, GEMV_NORM_IN_LOOP };
// A norm stages [M][K] floats: without an opt-in, dynamic shared memory stops at 48 KiB.
#define GEMV_MAX_STAGED_BYTES ST_GPU_SMEM_BYTES

typedef enum gemv_epilogue {
    GEMV_STORE = ST_FUSED_EPILOGUE_STORE,
    GEMV_ADD = ST_FUSED_EPILOGUE_ADD,
    GEMV_SWIGLU = ST_FUSED_EPILOGUE_SWIGLU,
    GEMV_GEGLU = ST_FUSED_EPILOGUE_GEGLU,
} gemv_epilogue;

typedef struct gemv_part {
    const char *w;      // [K, n] at row stride nb1
    int64_t nb1, n;
    int64_t block0;     // the first block of this part
    st_cuda_view y;     // STORE: [n, M]
} gemv_part;

typedef struct gemv_args {
    gemv_part part[CUDA_GEMV_MAX_PARTS];
    int n_parts;
    int64_t K, M;       // M: the columns of this pass (<= CUDA_GEMV_MAX_COLS)
    int64_t m0;         // its first column: column c is row m0 + c of the x, y and out views
    bool w_vec, x_vec;  // every weight row / every x row (or the staged h) is 16-byte aligned
    st_cuda_view x;     // [K, M]
    const float *norm_w; // [K] or NULL: no norm
    float eps;
    bool norm_in_loop;  // the norm folded into the product (gemv_run decides)
    const char *w_up;   // GLU: the up weight [K, n] (part 0 is the gate)
    int64_t up_nb1;
    st_cuda_view out;   // ADD: out += W x; GLU: out = act(gate) * up
    st_cuda_view out_w; // ADD, when out_norm_w: out * out_norm_w after the add [n, M]
    const float *out_norm_w;
    const float *x_w;   // with norm_w: x * norm_w [K] formed before (one column), or NULL
    const float *x_ss;  // with x_w: [n_ss] partial sums of x . x (the add before wrote them)
    int n_ss;
    float *out_ss;      // ADD with out_w, one column: [ceil(n / 4)] sums of out^2 by 4 rows
                        // (the decode kernel only: gemv_run clears it when another kernel runs)
} gemv_args;

// h[c][k] = (x[c][k] * s_c) * norm_w[k] with s_c = 1 / sqrt(mean(x[c]^2) + eps), in
// shared memory. The sum of squares: per-thread strided partial sums, then a warp and a
// block tree (f32; the CPU sums in f64, hence the tolerance of the tests).
__device__ void gemv_stage_norm(float *h, const gemv_args &a) {
    __shared__ float warp_sums[CUDA_GEMV_WARPS];
    const int warp = threadIdx.x / ST_GPU_WARP_SIZE, lane = threadIdx.x % ST_GPU_WARP_SIZE;
    for (int64_t c = 0; c < a.M; c++) {
        const float *xr = (const float *)cuda_row(a.x, a.m0 + c);
        float ss = 0.0f;
        for (int64_t k = threadIdx.x; k < a.K; k += blockDim.x) ss = fmaf(xr[k], xr[k], ss);
        ss = cuda_warp_sum(ss);
        __syncthreads(); // warp_sums of the previous column have been read
        if (lane == 0) warp_sums[warp] = ss;
        __syncthreads();
        float total = 0.0f;
        for (int i = 0; i < CUDA_GEMV_WARPS; i++) total += warp_sums[i];
        const float s = cuda_rms_scale(total, a.K, a.eps);
        float *hc = h + c * a.K;
        for (int64_t k = threadIdx.x; k < a.K; k += blockDim.x) hc[k] = (xr[k] * s) * a.norm_w[k];
    }
    __syncthreads();
}

// acc += dot(wrow, x * norm_w) and, with SS, ss += dot(x, x): this lane's partial sums
// over the pieces lane, lane + 32, ... (the warp covers every element of x once, so the
// sum of squares comes with the product). One column; wrow, x and norm_w 16-byte aligned.
template <st_type T, bool SS>
__device__ __forceinline__ void gemv_row_normed(const char *__restrict__ wrow, int64_t K, const float *__restrict__ x,
                                                const float *__restrict__ nw, float &acc, float &ss) {
    constexpr int VEC = 16 / cuda_elem_bytes<T>::value, W = ST_GPU_WARP_SIZE;
    const int lane = threadIdx.x % W;
    const cuda_gemv_idx n_vec = (cuda_gemv_idx)K / VEC;
    const uint4 *wv = (const uint4 *)wrow;
    auto piece = [&](const uint4 &wq, cuda_gemv_idx k0) {
        float wf[VEC];
        cuda_unpack16<T>(wq, wf);
#pragma unroll
        for (int i = 0; i < VEC; i += 4) {
            const float4 xq = __ldg((const float4 *)(x + k0 + i)), nq = __ldg((const float4 *)(nw + k0 + i));
            acc = fmaf(wf[i], xq.x * nq.x, acc), acc = fmaf(wf[i + 1], xq.y * nq.y, acc);
            acc = fmaf(wf[i + 2], xq.z * nq.z, acc), acc = fmaf(wf[i + 3], xq.w * nq.w, acc);
            if (SS) {
                ss = fmaf(xq.x, xq.x, ss), ss = fmaf(xq.y, xq.y, ss);
                ss = fmaf(xq.z, xq.z, ss), ss = fmaf(xq.w, xq.w, ss);
            }
        }
    };
    cuda_gemv_idx v = lane;
    for (; v + (CUDA_GEMV_UNROLL - 1) * W < n_vec; v += CUDA_GEMV_UNROLL * W) {
        uint4 wq[CUDA_GEMV_UNROLL];
#pragma unroll
        for (int u = 0; u < CUDA_GEMV_UNROLL; u++) wq[u] = st_gpu_load_streaming(wv + v + u * W);
#pragma unroll
        for (int u = 0; u < CUDA_GEMV_UNROLL; u++) piece(wq[u], (v + u * W) * VEC);
    }
    for (; v < n_vec; v += W) piece(st_gpu_load_streaming(wv + v), v * VEC);
    for (cuda_gemv_idx k = n_vec * VEC + lane; k < (cuda_gemv_idx)K; k += W) {
        const float xk = __ldg(x + k);
        acc = fmaf(cuda_load_f32<T>(wrow, k), xk * __ldg(nw + k), acc);
        if (SS) ss = fmaf(xk, xk, ss);
    }
}

// One warp per weight row (of a gate and up pair for GLU), CUDA_GEMV_WARPS rows per block.
// NORM: GEMV_NO_NORM; GEMV_NORM_STAGED, h = rmsnorm(x) * norm_w staged in shared memory by
// every block; GEMV_NORM_IN_LOOP (one column), y = s * dot(w, x * norm_w) with the scale s
// from the sum of squares each warp forms on the way (no block barrier, no staging).
template <st_type T, int EPI, int NORM, int NC>
__global__ void __launch_bounds__(GEMV_THREADS, NC > 1                        ? 1
                                                : NORM == GEMV_NORM_IN_LOOP ? GEMV_NORM_MIN_BLOCKS
                                                                            : GEMV_DECODE_MIN_BLOCKS)
    gemv_kernel(const gemv_args a) {
    extern __shared__ float4 gemv_staged[]; // GEMV_NORM_STAGED: h [M][K]
    constexpr bool GLU = EPI == GEMV_SWIGLU || EPI == GEMV_GEGLU;
    int p = 0;
    while (p + 1 < a.n_parts && (int64_t)blockIdx.x >= a.part[p + 1].block0) p++;
    const gemv_part &pt = a.part[p];
    const int64_t n = ((int64_t)blockIdx.x - pt.block0) * CUDA_GEMV_WARPS + threadIdx.x / ST_GPU_WARP_SIZE;
    const float *xs[NC];
    if (NORM == GEMV_NORM_STAGED) {
        float *h = (float *)gemv_staged;
        gemv_stage_norm(h, a);
#pragma unroll
        for (int c = 0; c < NC; c++) xs[c] = h + (c < a.M ? c : 0) * a.K;
    } else {
#pragma unroll
        for (int c = 0; c < NC; c++) xs[c] = (const float *)cuda_row(a.x, a.m0 + (c < a.M ? c : 0));
    }

    if (n >= pt.n) return; // after the only __syncthreads (in the staging)
    const int n_cols = (int)a.M;

    float acc[NC], up[NC];
    if (NORM == GEMV_NORM_IN_LOOP) {
        float ss = 0.0f, unused = 0.0f;
        acc[0] = 0.0f;
        gemv_row_normed<T, true>(pt.w + n * pt.nb1, a.K, xs[0], a.norm_w, acc[0], ss);
        ss = cuda_warp_sum(ss);
        const float s = cuda_rms_scale(ss, a.K, a.eps);
        acc[0] = cuda_warp_sum(acc[0]) * s;
        if (GLU) {
            up[0] = 0.0f;
            gemv_row_normed<T, false>(a.w_up + n * a.up_nb1, a.K, xs[0], a.norm_w, up[0], unused);
            up[0] = cuda_warp_sum(up[0]) * s;
        }
    } else {
        constexpr bool X_SHARED = NORM == GEMV_NORM_STAGED;
        cuda_gemv_row<T, X_SHARED, NC>(pt.w + n * pt.nb1, a.K, a.w_vec, xs, n_cols, a.x_vec, acc);
        if (GLU) cuda_gemv_row<T, X_SHARED, NC>(a.w_up + n * a.up_nb1, a.K, a.w_vec, xs, n_cols, a.x_vec, up);
    }
    if (threadIdx.x % ST_GPU_WARP_SIZE != 0) return;
#pragma unroll
    for (int c = 0; c < NC; c++) {
        if (c >= n_cols) break;
        if (EPI == GEMV_STORE) {
            ((float *)cuda_row(pt.y, a.m0 + c))[n] = acc[c];
        } else if (EPI == GEMV_ADD) {
            float *o = (float *)cuda_row(a.out, a.m0 + c) + n;
            const float sum = __fadd_rn(*o, acc[c]);
            *o = sum;
            if (a.out_norm_w) ((float *)cuda_row(a.out_w, a.m0 + c))[n] = __fmul_rn(sum, a.out_norm_w[n]);
        } else {
            const float g = EPI == GEMV_GEGLU ? cuda_gelu_tanh_f32(acc[c]) : cuda_silu_f32(acc[c]);
            ((float *)cuda_row(a.out, a.m0 + c))[n] = __fmul_rn(g, up[c]);
        }
    }
}

template <st_type T, int EPI, int NORM>
static st_status gemv_launch_typed(st_cuda_ctx *c, const gemv_args &a, unsigned int blocks, st_error *err) {
    // Several columns come only from mul_mat's plain product (st_cuda_gemv, when cuBLAS
    // cannot take it): the fused ops stop below ST_CUDA_GEMM_MIN_M (fused_supported) and
    // the norm in the loop at one column (gemv_run). No several-column instance otherwise.
    constexpr bool MULTI = (EPI == GEMV_STORE && NORM == GEMV_NO_NORM) ||
                           (NORM != GEMV_NORM_IN_LOOP && ST_CUDA_GEMM_MIN_M > 2);
    const size_t smem = NORM == GEMV_NORM_STAGED ? (size_t)(a.K * a.M) * sizeof(float) : 0;
    ST_ASSERT(a.M == 1 || MULTI);
    if (a.M == 1)
        gemv_kernel<T, EPI, NORM, 1><<<blocks, GEMV_THREADS, smem, c->stream>>>(a);
    else
        gemv_kernel<T, EPI, NORM, MULTI ? CUDA_GEMV_MAX_COLS : 1><<<blocks, GEMV_THREADS, smem, c->stream>>>(a);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}

template <st_type T, int EPI>
static st_status gemv_launch_norm(st_cuda_ctx *c, const gemv_args &a, unsigned int blocks, st_error *err) {
    if (!a.norm_w) return gemv_launch_typed<T, EPI, GEMV_NO_NORM>(c, a, blocks, err);
    if (a.norm_in_loop) return gemv_launch_typed<T, EPI, GEMV_NORM_IN_LOOP>(c, a, blocks, err);
    return gemv_launch_typed<T, EPI, GEMV_NORM_STAGED>(c, a, blocks, err);
}

template <st_type T>
static st_status gemv_launch_epi(st_cuda_ctx *c, const gemv_args &a, int epi, unsigned int blocks, st_error *err) {
    switch (epi) {
    case GEMV_STORE: return gemv_launch_norm<T, GEMV_STORE>(c, a, blocks, err);
    case GEMV_ADD: return gemv_launch_norm<T, GEMV_ADD>(c, a, blocks, err);
    case GEMV_SWIGLU: return gemv_launch_norm<T, GEMV_SWIGLU>(c, a, blocks, err);
    default: return gemv_launch_norm<T, GEMV_GEGLU>(c, a, blocks, err);
    }
}

static bool weight_rows_aligned16(const st_tensor *w) { return cuda_aligned16(w->data) && w->nb[1] % 16 == 0; }

static int64_t gemv_piece_elems(st_type type) { return type == ST_TYPE_F32 ? 4 : 8; }

// The decode kernel's case: one column, aligned rows and x, whole 16-byte pieces, no norm
// to stage.
static bool gemv_decode_takes(const gemv_args &a, st_type type) {
    return a.M == 1 && a.w_vec && a.x_vec && a.K % gemv_piece_elems(type) == 0 &&
           (!a.norm_w || a.norm_in_loop);
}

// The decode kernel's arguments for a product it takes.
static cuda_gemv_decode_args gemv_decode_args(const gemv_args &a, int epi) {
    ST_ASSERT(a.m0 == 0); // one column: row 0 of each view is its data pointer
    cuda_gemv_decode_args d = {};
    memset(&d, 0, sizeof(d));
    d.n_parts = a.n_parts;
    for (int i = 0; i < a.n_parts; i++) {
        d.w[i] = a.part[i].w;
        d.nb1[i] = a.part[i].nb1;
        d.n[i] = a.part[i].n;
        d.y[i] = (float *)a.part[i].y.data;
    }
    d.epilogue = epi;
    d.K = a.K;
    d.x = (const float *)a.x.data;
    d.norm_w = a.norm_w;
    d.x_w = a.norm_w ? a.x_w : NULL;
    d.x_ss = a.x_ss;
    d.n_ss = a.n_ss;
    d.eps = a.eps;
    d.w_up = a.w_up;
    d.up_nb1 = a.up_nb1;
    d.out = (float *)a.out.data;
    d.out_w = a.out_norm_w ? (float *)a.out_w.data : NULL;
    d.out_norm_w = a.out_norm_w;
    d.out_ss = a.out_norm_w ? a.out_ss : NULL;
    return d;
}

// Where a's norm goes: one column with aligned rows, x and norm_w folds it into the loop
// (no block barrier, no h staged in every block), a gated pair too, at every K: the decode
// kernel reads each x and norm_w piece once for both rows. Otherwise it is staged, and the
// staged h is 16-byte aligned when K is a multiple of 4.
static void gemv_route_norm(gemv_args &a) {
    a.norm_in_loop = a.norm_w && a.M == 1 && a.w_vec && a.x_vec && a.K % 4 == 0 && cuda_aligned16(a.norm_w);
    if (a.norm_w && !a.norm_in_loop) a.x_vec = a.K % 4 == 0;
}

// The decode matvec family: which kernel runs a product (below ST_CUDA_GEMM_MIN_M columns;
// from there cuBLAS), by shape class, first match wins:
//
//   class                                                         kernel
//   one column, aligned, F16/BF16, K up to 8,192, a kind in      block a row
//     tune.rowblock, no prepared norm                              (cuda_gemv_rowblock.cu)
//   one column, aligned, whole 16-byte pieces, a norm in the loop  warp a row, 2 warps a row
//     or none; not a residual add of one-warp rows                 for short grids
//                                                                  (cuda_gemv_decode.cu)
//   everything else: several columns, unaligned rows or x, a tail  warp a row, the norm staged
//     of K, a staged norm; residual adds of one-warp rows          in shared memory (here)
//
// (A residual add, o or down, keeps one warp a row here, the faster in a whole step, unless
// the decode kernel splits its rows or must form the sums of squares for the next product.)
typedef enum gemv_kernel_kind { GEMV_KERNEL_ROWBLOCK, GEMV_KERNEL_DECODE, GEMV_KERNEL_GENERAL } gemv_kernel_kind;

static gemv_kernel_kind gemv_kernel_for(const st_cuda_ctx *c, const gemv_args &a, const cuda_gemv_decode_args &d,
                                   st_type type, int epi) {
    if (!gemv_decode_takes(a, type)) return GEMV_KERNEL_GENERAL;
    if (cuda_gemv_rowblock_takes(c, &d, type)) return GEMV_KERNEL_ROWBLOCK;
    if (epi != GEMV_ADD || d.out_ss || cuda_gemv_decode_split(c, &d, type) > 1) return GEMV_KERNEL_DECODE;
    return GEMV_KERNEL_GENERAL;
}

// One launch over n_parts weights of one type sharing x (and, for GLU, w_up).
static st_status gemv_run(st_cuda_ctx *c, gemv_args &a, st_type type, int epi, st_error *err) {
    int64_t blocks = 0;
    for (int i = 0; i < a.n_parts; i++) {
        a.part[i].block0 = blocks;
        blocks += (a.part[i].n + CUDA_GEMV_WARPS - 1) / CUDA_GEMV_WARPS;
    }
    if (blocks == 0 || a.M == 0) return ST_OK;
    ST_ASSERT(blocks <= INT32_MAX);
    gemv_route_norm(a);
    cuda_gemv_decode_args d = {};
    if (gemv_decode_takes(a, type)) d = gemv_decode_args(a, epi);
    switch (gemv_kernel_for(c, a, d, type, epi)) {
    case GEMV_KERNEL_ROWBLOCK: return cuda_gemv_rowblock_run(c, &d, type, err);
    case GEMV_KERNEL_DECODE: return cuda_gemv_decode_run(c, &d, type, err);
    case GEMV_KERNEL_GENERAL: break;
    }
    a.out_ss = NULL; // (this file's kernel does not form the sums of squares)
    switch (type) {
    case ST_TYPE_F32: return gemv_launch_epi<ST_TYPE_F32>(c, a, epi, (unsigned int)blocks, err);
    case ST_TYPE_F16: return gemv_launch_epi<ST_TYPE_F16>(c, a, epi, (unsigned int)blocks, err);
    default: return gemv_launch_epi<ST_TYPE_BF16>(c, a, epi, (unsigned int)blocks, err);
    }
}

static gemv_args gemv_args_for(const st_tensor *x) {
    gemv_args a;
    memset(&a, 0, sizeof(a));
    a.K = x->ne[0];
    a.M = cuda_nrows(x);
    a.x = cuda_view(x);
    a.x_vec = cuda_rows_aligned16(x);
    return a;
}

st_status st_cuda_gemv(st_cuda_ctx *c, st_tensor *dst, const st_tensor *w, const st_tensor *x, st_error *err) {
    // w [K, N] any nb[1]; x F32 [K, M...]; dst F32 [N, M...]: passes of CUDA_GEMV_MAX_COLS columns
    const int64_t M = cuda_nrows(x);
    gemv_args a = gemv_args_for(x);
    a.w_vec = weight_rows_aligned16(w);
    a.n_parts = 1;
    a.part[0].w = (const char *)w->data;
    a.part[0].nb1 = (int64_t)w->nb[1];
    a.part[0].n = w->ne[1];
    a.part[0].y = cuda_view(dst);
    for (int64_t m0 = 0; m0 < M; m0 += CUDA_GEMV_MAX_COLS) {
        a.m0 = m0;
        a.M = M - m0 < CUDA_GEMV_MAX_COLS ? M - m0 : CUDA_GEMV_MAX_COLS;
        st_status s = gemv_run(c, a, w->type, GEMV_STORE, err);
        if (s != ST_OK) return s;
    }
    return ST_OK;
}

// A gated pair (SwiGLU/GeGLU): w[0] and w[1] share one grid of rows, a part.
static bool fused_glu(const st_fused_mul_mat *op) {
    return op->epilogue == ST_FUSED_EPILOGUE_SWIGLU || op->epilogue == ST_FUSED_EPILOGUE_GEGLU;
}

// The parts of the product's grid: the gated pair's rows once, else each weight's.
static int fused_parts(const st_fused_mul_mat *op) { return fused_glu(op) ? 1 : op->n_w; }

// The fused kernel takes the op when: M is below ST_CUDA_GEMM_MIN_M (and fits one pass),
// every weight is a float type, one type; a norm's h fits the staging limit; GLU's gate
// and up have one shape and stride (they are read by the same warp).
static bool fused_supported(const st_fused_mul_mat *op) {
    const st_tensor *x = op->x;
    const int64_t K = x->ne[0], M = cuda_nrows(x);
    if (M < 1 || M >= ST_CUDA_GEMM_MIN_M || M > CUDA_GEMV_MAX_COLS || K < 1) return false;
    if (!cuda_is_f32_rows(x)) return false;
    if (op->norm_w && (size_t)(K * M) * sizeof(float) > GEMV_MAX_STAGED_BYTES) return false;
    for (int i = 0; i < op->n_w; i++) {
        const st_tensor *w = op->w[i];
        if (!cuda_is_float_weight(w) || w->type != op->w[0]->type || w->ne[0] != K) return false;
        if (w->ne[2] != 1 || w->ne[3] != 1) return false;
        if (weight_rows_aligned16(w) != weight_rows_aligned16(op->w[0])) return false;
    }
    if (fused_glu(op))
        return op->n_w == 2 && op->w[1]->ne[1] == op->w[0]->ne[1] && op->out->ne[0] == op->w[0]->ne[1];
    if (op->epilogue == ST_FUSED_EPILOGUE_ADD) return op->n_w == 1 && op->out->ne[0] == op->w[0]->ne[1];
    return true;
}

// A long one-column product with a norm (an output head: 15-20 waves of blocks) runs the
// norm on its own first, into op->h, and streams its weights without it: the decode kernel
// then holds GEMV_DECODE_MIN_BLOCKS blocks an SM instead of the norm's GEMV_NORM_MIN_BLOCKS
// and loads no norm_w. Products of a wave or two (every layer's) keep the norm in their
// loop, where the extra kernel costs more than it saves.
static bool fused_norm_apart(const st_cuda_ctx *c, const st_fused_mul_mat *op) {
    if (!op->norm_w || !op->h || c->tune.norm_apart_waves == 0 || cuda_nrows(op->x) != 1) return false;
    int64_t rows = 0;
    for (int i = 0; i < fused_parts(op); i++) rows += op->w[i]->ne[1];
    const int64_t blocks = (rows + CUDA_GEMV_WARPS - 1) / CUDA_GEMV_WARPS;
    return blocks >= (int64_t)c->tune.norm_apart_waves * c->sm_count * GEMV_DECODE_MIN_BLOCKS;
}

// The kernel arguments of a fused op fused_supported takes (apart: its norm already formed
// into op->h, the product reads h).
static gemv_args fused_gemv_args(const st_fused_mul_mat *op, bool apart) {
    gemv_args a = gemv_args_for(apart ? op->h : op->x);
    a.w_vec = weight_rows_aligned16(op->w[0]);
    a.norm_w = op->norm_w && !apart ? (const float *)op->norm_w->data : NULL;
    a.eps = op->eps;
    if (op->norm_w) ST_ASSERT(cuda_is_f32_rows(op->norm_w) && op->norm_w->ne[0] == a.K);
    a.n_parts = fused_parts(op);
    for (int i = 0; i < a.n_parts; i++) {
        a.part[i].w = (const char *)op->w[i]->data;
        a.part[i].nb1 = (int64_t)op->w[i]->nb[1];
        a.part[i].n = op->w[i]->ne[1];
        if (op->epilogue == ST_FUSED_EPILOGUE_STORE) {
            ST_ASSERT(cuda_is_f32_rows(op->y[i]) && op->y[i]->ne[0] == a.part[i].n);
            ST_ASSERT(cuda_nrows(op->y[i]) == a.M);
            a.part[i].y = cuda_view(op->y[i]);
        }
    }
    if (fused_glu(op)) {
        a.w_up = (const char *)op->w[1]->data;
        a.up_nb1 = (int64_t)op->w[1]->nb[1];
    }
    if (op->epilogue != ST_FUSED_EPILOGUE_STORE) {
        ST_ASSERT(cuda_is_f32_rows(op->out) && cuda_nrows(op->out) == a.M);
        a.out = cuda_view(op->out);
    }
    return a;
}

// Whether a one-column product with its norm in the loop (op, as the forward pass issues it,
// x_w not yet given) runs faster from the x * norm_w that the residual add before it can
// prepare (st_fused_mul_mat's next_h). Its loop is then the plain one, at
// GEMV_DECODE_MIN_BLOCKS blocks an SM instead of GEMV_NORM_MIN_BLOCKS, while the add pays a
// multiply, a store and the sums of squares. On the H200 it pays where the higher
// occupancy takes a wave off the grid (llama-3.2-1b's gate/up, 2 waves -> 1) and where a
// one-wave grid has K >= GEMV_PREPARED_MIN_K (qwen3-8b's q/k/v); it loses elsewhere
// (qwen3-1.7b; qwen3-8b's two-wave gate/up). The results agree to f32 rounding, not bit
// for bit: the prepared sum of squares adds by groups of 4 rows, the loop by lanes.
// st_cuda_tuning's norm_prepared 0: never, 2: wherever the decode kernel can (tests: the
// chained forward pass on tiny models).
bool st_cuda_prepared_norm_pays(st_backend *b, const st_fused_mul_mat *op) {
    const st_cuda_ctx *c = cuda_ctx(b);
    if (c->tune.norm_prepared == 0 || !op->norm_w || !op->h || op->x_w || !fused_supported(op) || cuda_nrows(op->x) != 1 ||
        fused_norm_apart(c, op))
        return false;
    gemv_args a = fused_gemv_args(op, false);
    const int epi = (int)op->epilogue;
    const st_type type = op->w[0]->type;
    gemv_route_norm(a);
    if (!gemv_decode_takes(a, type) || (a.K + 3) / 4 > GEMV_PREPARED_MAX_SS) return false;
    if (c->tune.norm_prepared == 2) return true;
    cuda_gemv_decode_args d = gemv_decode_args(a, epi);
    if (cuda_gemv_rowblock_takes(c, &d, type)) return false; // (its norm costs one block reduction)
    const int in_loop = cuda_gemv_decode_waves(c, &d, type);
    d.x_w = d.x; // (any: the prepared kernel's grid)
    return cuda_gemv_decode_waves(c, &d, type) < in_loop || (in_loop == 1 && a.K >= GEMV_PREPARED_MIN_K);
}

st_status st_cuda_mul_mat_fused(st_backend *b, const st_fused_mul_mat *op, st_error *err) {
    st_cuda_ctx *c = cuda_ctx(b);
    // the sums of squares the fused op just before wrote, for its next_h: valid for this op only
    const void *ss_for = c->norm_ss_for;
    const int64_t ss_rows = c->norm_ss_rows;
    c->norm_ss_for = NULL;
    if (!fused_supported(op)) { // quantized weights or many columns: their own path, else the composite
        bool ran = false;
        st_status s = st_cuda_mul_mat_fused_quant(b, op, &ran, err);
        if (s == ST_OK && !ran) s = st_cuda_mul_mat_fused_gemm(b, op, NULL, NULL, &ran, err);
        return s != ST_OK || ran ? s : st_fused_mul_mat_composite(b, op, err);
    }
    const bool apart = fused_norm_apart(c, op);
    if (apart) { // h = rmsnorm(x) * norm_w [K, 1], then the product of h
        const st_status s = st_cuda_rms_norm(b, op->h, op->x, op->norm_w, op->eps, err);
        if (s != ST_OK) return s;
    }
    gemv_args a = fused_gemv_args(op, apart);
    if (op->next_h) { // out * next_norm_w, in the epilogue
        ST_ASSERT(op->epilogue == ST_FUSED_EPILOGUE_ADD && cuda_is_f32_rows(op->next_h) &&
                  cuda_same_shape(op->next_h, op->out));
        ST_ASSERT(cuda_is_f32_rows(op->next_norm_w) && op->next_norm_w->ne[0] == op->out->ne[0]);
        a.out_w = cuda_view(op->next_h);
        a.out_norm_w = (const float *)op->next_norm_w->data;
        // and the sums of squares of out by 4 rows, for the product after (one column)
        const int64_t n_ss = (op->out->ne[0] + 3) / 4;
        const size_t bytes = (size_t)n_ss * sizeof(float);
        if (a.M == 1 && !c->capturing && bytes > c->norm_ss_bytes) {
            const st_status s = st_cuda_grow(c, (void **)&c->norm_ss, &c->norm_ss_bytes, bytes, "norm partials", err);
            if (s != ST_OK) return s;
        }
        if (a.M == 1 && bytes <= c->norm_ss_bytes) a.out_ss = c->norm_ss;
    }
    // x * norm_w and the sums of squares of x formed by the add before: the decode kernel's
    // loop reads x_w instead of x and norm_w
    const st_tensor *xw = op->x_w;
    if (c->tune.norm_prepared && a.norm_w && xw && xw->data == ss_for && ss_rows == a.K && a.M == 1 &&
        (a.K + 3) / 4 <= GEMV_PREPARED_MAX_SS && cuda_is_f32_rows(xw) && xw->ne[0] == a.K &&
        cuda_aligned16(xw->data)) {
        a.x_w = (const float *)xw->data;
        a.x_ss = c->norm_ss;
        a.n_ss = (int)((a.K + 3) / 4);
    }
    const st_status s = gemv_run(c, a, op->w[0]->type, (int)op->epilogue, err);
    if (s == ST_OK && a.out_ss) {
        c->norm_ss_for = op->next_h->data;
        c->norm_ss_rows = op->out->ne[0];
    }
    return s;
}
