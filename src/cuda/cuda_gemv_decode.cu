// The decode products' own kernel: one input column, every weight row and x 16-byte
// aligned, K a whole number of 16-byte pieces. That is every dense decode product (q/k/v,
// o, gate/up, down, the output head); cuda_gemv.cu's general kernel takes the rest
// (several columns, unaligned rows or x, a K % 8 tail, a norm staged in shared memory).
//
//   W_i [K, N_i] F32/F16/BF16 at row stride nb1_i;  x [K] F32;  y_i [N_i] F32
//
// The general kernel in this case spends, before its first weight load, the row addresses
// of strided views (64-bit divisions in every thread) and carries the runtime alignment and
// column-count branches through its loop: on the 1-2B models' products a plain
// one-warp-a-row kernel streams measurably faster. Here the host passes plain pointers and
// the loop has no branch but its bound. A gated pair reads its gate and up rows in one
// loop, each x (and norm_w) piece loaded once for both.
//
// One warp per weight row, CUDA_GEMV_WARPS rows a block, lane l owns the 16-byte pieces
// l, l + 32, ... in order, then a shuffle tree: the summation order of cuda_gemv_row and of
// the general kernel's norm in the loop, so the results are the same bits.
//
// A grid that would leave the SMs short of warps (o and down of the 1-2B models: 256
// blocks, 16 warps an SM of the 64 it holds, 16 KiB of loads in flight) splits each row
// over S = 2 warps of a block instead (the S warps as one of 32 * S lanes, lane l owning
// the pieces l, l + 32 S, ...; then each warp's shuffle tree and the S warp sums added in
// warp order): S times the warps and the bytes in flight, the same bytes read. Another
// summation order: the same bits for every run and every stride, not those of S = 1.
// A grid splits only where the split one still fits one wave: one that would take two
// waves (q/k/v) is slower split than not.
//
// Bytes: N*K*type_size of weights once (x, norm_w from L1/L2). FLOPs: 2*N*K.
#include "cuda/cuda_gemv.cuh"

// How a product's norm comes: none; in the loop (each piece's x times norm_w, the sum of
// squares on the way); prepared (x_w = x * norm_w from the product before, the sum of
// squares of x first, then the plain loop over x_w).
enum { DEC_NORM_NONE, DEC_NORM_IN_LOOP, DEC_NORM_PREPARED };

// A gated pair's pieces in flight a lane, from each of its two rows (the loop then has
// 2 x GEMV_DECODE_GLU_PIECES loads in flight, as a single row has CUDA_GEMV_UNROLL).
#define GEMV_DECODE_GLU_PIECES (CUDA_GEMV_UNROLL / 2)
// acc += dot(gate piece, h), up += dot(up piece, h) (GLU) over one 16-byte piece at k0,
// h = x * norm_w (NORM; ss += x . x) or x.
template <st_type T, bool NORM, bool GLU>
__device__ __forceinline__ void gemv_decode_piece(const uint4 &wg, const uint4 &wu, int k0,
                                                  const float *__restrict__ x, const float *__restrict__ nw,
                                                  float &acc, float &up, float &ss) {
    constexpr int VEC = 16 / cuda_elem_bytes<T>::value;
    float gf[VEC], h[VEC];
    cuda_unpack16<T>(wg, gf);
#pragma unroll
    for (int i = 0; i < VEC; i += 4) {
        const float4 q = __ldg((const float4 *)(x + k0 + i));
        h[i] = q.x, h[i + 1] = q.y, h[i + 2] = q.z, h[i + 3] = q.w;
    }
    if (NORM) {
#pragma unroll
        for (int i = 0; i < VEC; i++) ss = fmaf(h[i], h[i], ss);
#pragma unroll
        for (int i = 0; i < VEC; i += 4) {
            const float4 q = __ldg((const float4 *)(nw + k0 + i));
            h[i] *= q.x, h[i + 1] *= q.y, h[i + 2] *= q.z, h[i + 3] *= q.w;
        }
    }
#pragma unroll
    for (int i = 0; i < VEC; i++) acc = fmaf(gf[i], h[i], acc);
    if (GLU) {
        float uf[VEC];
        cuda_unpack16<T>(wu, uf);
#pragma unroll
        for (int i = 0; i < VEC; i++) up = fmaf(uf[i], h[i], up);
    }
}

// This lane's partial sums over the n_vec 16-byte pieces of the gate row wg (and up row wu).
// S warps to a row: this lane is lane `sub * 32 + lane` of S * 32, its pieces that, + 32 S, ...
template <st_type T, bool NORM, bool GLU, int S>
__device__ __forceinline__ void gemv_decode_row(const char *__restrict__ wg, const char *__restrict__ wu,
                                                int n_vec, int sub, const float *__restrict__ x,
                                                const float *__restrict__ nw, float &acc, float &up, float &ss) {
    constexpr int VEC = 16 / cuda_elem_bytes<T>::value, W = ST_GPU_WARP_SIZE * S;
    constexpr int U = GLU ? GEMV_DECODE_GLU_PIECES : CUDA_GEMV_UNROLL;
    const uint4 *gv = (const uint4 *)wg, *uv = (const uint4 *)wu;
    // A round loads its pieces first (guarded in the last round), then uses them in order.
    for (int v = sub * ST_GPU_WARP_SIZE + threadIdx.x % ST_GPU_WARP_SIZE; v < n_vec; v += U * W) {
        uint4 g[U], u[U];
#pragma unroll
        for (int j = 0; j < U; j++) {
            if (v + j * W >= n_vec) break;
            g[j] = st_gpu_load_streaming(gv + v + j * W);
            if (GLU) u[j] = st_gpu_load_streaming(uv + v + j * W);
        }
#pragma unroll
        for (int j = 0; j < U; j++) {
            if (v + j * W >= n_vec) break;
            gemv_decode_piece<T, NORM, GLU>(g[j], GLU ? u[j] : g[j], (v + j * W) * VEC, x, nw, acc, up, ss);
        }
    }
}

// The partial sums of x . x the add before wrote (a group of 4 rows each; n_ss <=
// GEMV_PREPARED_MAX_SS), copied into shared memory by asynchronous copies issued before
// the row loop (thread t: partials 4t .. 4t + 3), so that their round trip hides under the
// weight loads and no register holds them through the loop.
__device__ __forceinline__ float *gemv_decode_partials(void) {
    __shared__ __align__(16) float parts[GEMV_PREPARED_MAX_SS];
    return parts;
}

__device__ __forceinline__ void gemv_decode_partials_copy(const float *__restrict__ x_ss, int n_ss) {
    float *parts = gemv_decode_partials();
    const int i = threadIdx.x * 4;
#if ST_GPU_NVIDIA
    if (i + 3 < n_ss) {
        const unsigned int dst = (unsigned int)__cvta_generic_to_shared(parts + i);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(x_ss + i) : "memory");
    } else {
        for (int j = i; j < n_ss && j < i + 4; j++) {
            const unsigned int dst = (unsigned int)__cvta_generic_to_shared(parts + j);
            asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(x_ss + j) : "memory");
        }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
#else // portable: plain copies (the thread reads back only its own four)
    if (i + 3 < n_ss) {
        *(float4 *)(parts + i) = *(const float4 *)(x_ss + i);
    } else {
        for (int j = i; j < n_ss && j < i + 4; j++) parts[j] = x_ss[j];
    }
#endif
}

// The block's sum of the partials, in a fixed order (each thread's four, the shuffle tree,
// the warps in order): the same value in every block. Every thread of the block calls it.
__device__ __forceinline__ float gemv_decode_partials_sum(int n_ss) {
    __shared__ float warp_sums[CUDA_GEMV_WARPS];
#if ST_GPU_NVIDIA
    asm volatile("cp.async.wait_all;" ::: "memory"); // this thread's own copies have landed
#endif
    const float *parts = gemv_decode_partials();
    const int i = threadIdx.x * 4;
    float v[4];
#pragma unroll
    for (int j = 0; j < 4; j++) v[j] = i + j < n_ss ? parts[i + j] : 0.0f;
    const float t = cuda_warp_sum((v[0] + v[1]) + (v[2] + v[3]));
    if (threadIdx.x % ST_GPU_WARP_SIZE == 0) warp_sums[threadIdx.x / ST_GPU_WARP_SIZE] = t;
    __syncthreads();
    float ss = 0.0f;
#pragma unroll
    for (int w = 0; w < CUDA_GEMV_WARPS; w++) ss += warp_sums[w];
    return ss;
}

// The part (of a.n_parts) this block's rows belong to.
__device__ __forceinline__ int gemv_decode_part(const cuda_gemv_decode_args &a) {
    int p = 0;
    while (p + 1 < a.n_parts && blockIdx.x >= (unsigned int)a.block0[p + 1]) p++;
    return p;
}

template <st_type T, int EPI, int NORM, int MIN_BLOCKS, int S>
__global__ void __launch_bounds__(CUDA_GEMV_WARPS * ST_GPU_WARP_SIZE, MIN_BLOCKS)
    gemv_decode_kernel(const cuda_gemv_decode_args a) {
    constexpr bool GLU = EPI == ST_FUSED_EPILOGUE_SWIGLU || EPI == ST_FUSED_EPILOGUE_GEGLU;
    constexpr bool STORE = EPI == ST_FUSED_EPILOGUE_STORE;
    constexpr int ROWS = CUDA_GEMV_WARPS / S; // rows a block
    const int warp = threadIdx.x / ST_GPU_WARP_SIZE, sub = warp % S;
    const int p = gemv_decode_part(a);
    const int64_t n = (int64_t)(blockIdx.x - a.block0[p]) * ROWS + warp / S;
    const bool live = n < a.n[p];
    __shared__ unsigned int arrived[CUDA_GEMV_WARPS / 4]; // ADD with sums: rows of a group of 4 done
    if (EPI == ST_FUSED_EPILOGUE_ADD && a.out_ss) { // (a.out_ss is the same in every thread)
        if (threadIdx.x < CUDA_GEMV_WARPS / 4) arrived[threadIdx.x] = 0;
        __syncthreads();
    }
    // (S > 1, a prepared norm or STORE: every warp reaches the barriers below)
    if (S == 1 && NORM != DEC_NORM_PREPARED && !STORE && !live) return;
    float acc = 0.0f, up = 0.0f, ss = 0.0f;
    if (NORM == DEC_NORM_PREPARED) gemv_decode_partials_copy(a.x_ss, a.n_ss);
    if (live)
        gemv_decode_row<T, NORM == DEC_NORM_IN_LOOP, GLU, S>(a.w[p] + n * a.nb1[p], GLU ? a.w_up + n * a.up_nb1 : NULL,
                                                             a.n_vec, sub, NORM == DEC_NORM_PREPARED ? a.x_w : a.x,
                                                             a.norm_w, acc, up, ss);
    acc = cuda_warp_sum(acc);
    if (GLU) up = cuda_warp_sum(up);
    if (NORM == DEC_NORM_IN_LOOP) ss = cuda_warp_sum(ss);
    if (NORM == DEC_NORM_PREPARED) { // the row's first warp holds the whole sum
        const float total = gemv_decode_partials_sum(a.n_ss);
        ss = sub == 0 ? total : 0.0f;
        if (S == 1 && !STORE && !live) return;
    }
    if (S > 1) { // the row's S warp sums, added in warp order by its first warp
        __shared__ float sums[CUDA_GEMV_WARPS][3];
        if (threadIdx.x % ST_GPU_WARP_SIZE == 0) sums[warp][0] = acc, sums[warp][1] = up, sums[warp][2] = ss;
        __syncthreads();
        if (!STORE && (sub != 0 || !live)) return;
        if (sub == 0) // (STORE: every warp goes on to the barrier below)
#pragma unroll
            for (int j = 1; j < S; j++) acc += sums[warp + j][0], up += sums[warp + j][1], ss += sums[warp + j][2];
    }
    if (NORM) { // the scale as cuda_gemv.cu's norm in the loop forms it
        const float s = cuda_rms_scale(ss, a.K, a.eps);
        acc *= s;
        if (GLU) up *= s;
    }
    if (STORE) {
        // The block's rows leave in one contiguous store (32 bytes at S = 1), not one store
        // a warp: y may be page-locked host memory (a decode step's logits, which the output
        // head writes straight to the host), where every store is a PCIe write.
        __shared__ float ys[ROWS];
        if (threadIdx.x % ST_GPU_WARP_SIZE == 0 && sub == 0) ys[warp / S] = acc;
        __syncthreads();
        const int q = gemv_decode_part(a); // (p again: not held through the row loop)
        const int64_t r = (int64_t)(blockIdx.x - a.block0[q]) * ROWS + threadIdx.x;
        if (threadIdx.x < ROWS && r < a.n[q]) a.y[q][r] = ys[threadIdx.x];
        return;
    }
    if (threadIdx.x % ST_GPU_WARP_SIZE != 0) return;
    if (EPI == ST_FUSED_EPILOGUE_ADD) {
        const float o = __fadd_rn(a.out[n], acc);
        a.out[n] = o;
        if (a.out_w) a.out_w[n] = __fmul_rn(o, a.out_norm_w[n]); // the next product's x * norm_w
        if (a.out_ss) { // o^2 of the rows 4g .. 4g + 3, added in row order by the last to finish
            __shared__ float sq[CUDA_GEMV_WARPS];
            const int r = warp / S, lg = r / 4;
            const int64_t g = n / 4;
            const int in_group = (int)(a.n[0] - 4 * g < 4 ? a.n[0] - 4 * g : 4);
            sq[r] = __fmul_rn(o, o);
            __threadfence_block();
            if (atomicAdd(&arrived[lg], 1u) == (unsigned int)in_group - 1) {
                __threadfence_block();
                const volatile float *vs = sq + 4 * lg;
                float t = 0.0f;
                for (int j = 0; j < in_group; j++) t = __fadd_rn(t, vs[j]);
                a.out_ss[g] = t;
            }
        }
    } else {
        const float g = EPI == ST_FUSED_EPILOGUE_GEGLU ? cuda_gelu_tanh_f32(acc) : cuda_silu_f32(acc);
        a.out[n] = __fmul_rn(g, up);
    }
}

// Blocks an SM: GEMV_DECODE_MIN_BLOCKS (<= 32 registers); a norm in the loop, and a gated
// pair of other than F16 rows (ptxas: 68-132 bytes of spills at 32 registers), take
// GEMV_NORM_MIN_BLOCKS' registers. A prepared norm's loop is the plain one (its sum of
// squares comes from the add's partials, loaded before the loop and summed after it).
static constexpr int gemv_decode_min_blocks(st_type t, int epi, int norm) {
    return norm == DEC_NORM_IN_LOOP ||
                   ((epi == ST_FUSED_EPILOGUE_SWIGLU || epi == ST_FUSED_EPILOGUE_GEGLU) && t != ST_TYPE_F16)
               ? GEMV_NORM_MIN_BLOCKS
               : GEMV_DECODE_MIN_BLOCKS;
}

static int gemv_decode_norm(const cuda_gemv_decode_args *a) {
    return !a->norm_w ? DEC_NORM_NONE : a->x_w ? DEC_NORM_PREPARED : DEC_NORM_IN_LOOP;
}

// The blocks of a grid at S warps a row; with block0, each part's first block is set there.
static int64_t gemv_decode_blocks(const cuda_gemv_decode_args *a, int S, int *block0) {
    int64_t blocks = 0;
    for (int i = 0; i < a->n_parts; i++) {
        ST_ASSERT(blocks <= INT32_MAX);
        if (block0) block0[i] = (int)blocks;
        blocks += (a->n[i] + CUDA_GEMV_WARPS / S - 1) / (CUDA_GEMV_WARPS / S);
    }
    return blocks;
}

// The blocks one wave of the SMs holds for a's kernel.
static int64_t gemv_decode_wave(const st_cuda_ctx *c, const cuda_gemv_decode_args *a, st_type type) {
    return (int64_t)c->sm_count * gemv_decode_min_blocks(type, a->epilogue, gemv_decode_norm(a));
}

int cuda_gemv_decode_split(const st_cuda_ctx *c, const cuda_gemv_decode_args *a, st_type type) {
    return gemv_decode_blocks(a, 1, NULL) * 2 <= gemv_decode_wave(c, a, type) ? 2 : 1;
}

int cuda_gemv_decode_waves(const st_cuda_ctx *c, const cuda_gemv_decode_args *a, st_type type) {
    const int64_t wave = gemv_decode_wave(c, a, type);
    const int64_t blocks = gemv_decode_blocks(a, cuda_gemv_decode_split(c, a, type), NULL);
    return (int)((blocks + wave - 1) / wave);
}

template <st_type T, int EPI, int NORM>
static void gemv_decode_launch(st_cuda_ctx *c, cuda_gemv_decode_args &a) {
    constexpr int MIN_BLOCKS = gemv_decode_min_blocks(T, EPI, NORM);
    const int S = cuda_gemv_decode_split(c, &a, T);
    const int64_t blocks = gemv_decode_blocks(&a, S, a.block0);
    ST_ASSERT(blocks <= INT32_MAX);
    const unsigned int grid = (unsigned int)blocks, threads = CUDA_GEMV_WARPS * ST_GPU_WARP_SIZE;
    if (S == 2) gemv_decode_kernel<T, EPI, NORM, MIN_BLOCKS, 2><<<grid, threads, 0, c->stream>>>(a);
    else gemv_decode_kernel<T, EPI, NORM, MIN_BLOCKS, 1><<<grid, threads, 0, c->stream>>>(a);
}

template <st_type T, int EPI>
static void gemv_decode_launch_norm(st_cuda_ctx *c, cuda_gemv_decode_args &a) {
    switch (gemv_decode_norm(&a)) {
    case DEC_NORM_NONE: gemv_decode_launch<T, EPI, DEC_NORM_NONE>(c, a); break;
    case DEC_NORM_IN_LOOP: gemv_decode_launch<T, EPI, DEC_NORM_IN_LOOP>(c, a); break;
    default: gemv_decode_launch<T, EPI, DEC_NORM_PREPARED>(c, a); break;
    }
}

template <st_type T>
static void gemv_decode_launch_epi(st_cuda_ctx *c, cuda_gemv_decode_args &a) {
    switch (a.epilogue) {
    case ST_FUSED_EPILOGUE_STORE: gemv_decode_launch_norm<T, ST_FUSED_EPILOGUE_STORE>(c, a); break;
    case ST_FUSED_EPILOGUE_ADD: gemv_decode_launch_norm<T, ST_FUSED_EPILOGUE_ADD>(c, a); break;
    case ST_FUSED_EPILOGUE_SWIGLU: gemv_decode_launch_norm<T, ST_FUSED_EPILOGUE_SWIGLU>(c, a); break;
    default: gemv_decode_launch_norm<T, ST_FUSED_EPILOGUE_GEGLU>(c, a); break;
    }
}

st_status cuda_gemv_decode_run(st_cuda_ctx *c, cuda_gemv_decode_args *a, st_type type, st_error *err) {
    const int64_t blocks = gemv_decode_blocks(a, 1, NULL);
    if (blocks == 0) return ST_OK;
    const int64_t vec = type == ST_TYPE_F32 ? 4 : 8; // elements a 16-byte piece
    ST_ASSERT(blocks <= INT32_MAX && a->K % vec == 0 && a->K <= INT32_MAX - 64 * vec); // int element offsets
    a->n_vec = (int)(a->K / vec);
    switch (type) {
    case ST_TYPE_F32: gemv_decode_launch_epi<ST_TYPE_F32>(c, *a); break;
    case ST_TYPE_F16: gemv_decode_launch_epi<ST_TYPE_F16>(c, *a); break;
    default: gemv_decode_launch_epi<ST_TYPE_BF16>(c, *a); break;
    }
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}
