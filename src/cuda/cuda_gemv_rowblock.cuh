// What the block-a-row decode products share (cuda_gemv_rowblock.cu: a layer's dense
// products; cuda_moe_rowblock.cu: the chosen experts' products of one token): the block
// and piece layout, the batch size, the grid, the load of x into registers and the loop
// over a block's rows.
//
// A row of K elements (F16/BF16) is n_pieces = K / 8 16-byte pieces of VEC = 8 elements;
// each thread of a block of ROWBLOCK_THREADS owns P = ceil(K / 2,048) of them in every row,
// with x's matching 8 floats a piece in registers, h[P][VEC]: the pieces t, t + 256, ...
// below n_pieces for thread t (rowblock_load_x's layout), or any others a caller assigns
// (rowblock_batches only pairs a thread's weight piece p with its h[p]). A piece at or past
// n_pieces (K not a multiple of 2,048: gemma-3-1b's 1,152, phi-4-mini's 3,072) is zeros in
// h and in the weights, loaded from nowhere, so it adds exact zeros. Block b takes the rows
// b, b + G, b + 2G, ... (G = gridDim.x: one wave), RB at a time (rowblock_batches).
#ifndef STRIDE_CUDA_GEMV_ROWBLOCK_CUH
#define STRIDE_CUDA_GEMV_ROWBLOCK_CUH

#include "cuda/cuda_gemv.cuh"

#define ROWBLOCK_THREADS 256
#define ROWBLOCK_WARPS (ROWBLOCK_THREADS / ST_GPU_WARP_SIZE)
#define ROWBLOCK_VEC 8 // elements a 16-byte piece (2-byte weights)
#define ROWBLOCK_K_A_ROUND (ROWBLOCK_VEC * ROWBLOCK_THREADS) // elements a round of one piece a thread covers
#define ROWBLOCK_PIECES_A_THREAD_MAX 4 // K up to 8,192 (x, norm_w: 8 floats a piece in registers)
// Blocks an SM (64 registers a thread: P x 8 x values and the batch's loads without spills).
#define ROWBLOCK_MIN_BLOCKS 4

// Pieces a thread of a row of K elements: ceil(K / 2,048).
static inline int64_t rowblock_pieces_a_thread(int64_t K) { return (K + ROWBLOCK_K_A_ROUND - 1) / ROWBLOCK_K_A_ROUND; }

// Rows a batch: the batch's loads in flight a thread (P x RB, twice for a gated pair), at
// most 4 (on the H200, 4 rows of K = 2,048 are faster than 2 or 8; one row of K = 6,144 and
// 8,192 faster than 2).
__host__ __device__ constexpr int rowblock_rows(int P, bool glu) {
    return P >= 3 ? 1 : (4 / P) / (glu ? 2 : 1); // P = 1: 4 (2 for a pair); P = 2: 2 (1)
}

// The grid: one wave at ROWBLOCK_MIN_BLOCKS an SM, or one block a row when there are fewer.
static inline int64_t rowblock_grid(const st_cuda_ctx *c, int64_t rows) {
    const int64_t wave = (int64_t)c->sm_count * ROWBLOCK_MIN_BLOCKS;
    return rows < wave ? rows : wave;
}

// Whether this thread's piece j lies inside a row of n_pieces pieces.
__device__ __forceinline__ bool rowblock_piece_in(int j, int n_pieces) {
    return (int)threadIdx.x + j * ROWBLOCK_THREADS < n_pieces;
}

// Floats i..i+3 of this thread's piece j of a [K] F32 vector (x, norm_w): VEC a piece,
// through the read-only cache, or through L2 (L2: what a kernel launched early reads after
// cuda_early_wait, cuda_common.cuh). The piece must lie inside the vector.
template <int VEC, bool L2 = false>
__device__ __forceinline__ float4 rowblock_f32x4(const float *v, int j, int i) {
    const float4 *q = (const float4 *)(v + ((int)threadIdx.x + j * ROWBLOCK_THREADS) * VEC + i);
    return L2 ? st_gpu_load_l2(q) : __ldg(q);
}

// This thread's pieces of x [K] (floats i..i+3 of piece j at h[j][i..]; through L2 when
// EARLY) and, when NW, of norm_w [K] into nw, loaded together; zeros for pieces at or past
// n_pieces = K / VEC. x, norm_w 16-byte aligned.
template <int VEC, int P, bool NW, bool EARLY = false>
__device__ __forceinline__ void rowblock_load_x(const float *x, const float *norm_w, int n_pieces,
                                                float (&h)[P][VEC], float (&nw)[NW ? P : 1][VEC]) {
#pragma unroll
    for (int j = 0; j < P; j++) {
        const bool in = rowblock_piece_in(j, n_pieces);
#pragma unroll
        for (int i = 0; i < VEC; i += 4) {
            const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            const float4 q = in ? rowblock_f32x4<VEC, EARLY>(x, j, i) : zero;
            h[j][i] = q.x, h[j][i + 1] = q.y, h[j][i + 2] = q.z, h[j][i + 3] = q.w;
            if (NW) {
                const float4 w = in ? rowblock_f32x4<VEC>(norm_w, j, i) : zero;
                const int jn = NW ? j : 0;
                nw[jn][i] = w.x, nw[jn][i + 1] = w.y, nw[jn][i + 2] = w.z, nw[jn][i + 3] = w.w;
            }
        }
    }
}

// The block's rows r0 = blockIdx.x, r0 + G, r0 + 2G, ... below rows, RB a batch, M weights a
// row (2: a gated pair), wq [M][RB][P] a batch's pieces of this thread. The caller has
// issued the first batch (issue(blockIdx.x)); issue(r0) issues the loads of the batch from
// row r0 (its rows r0 + i G below rows) into wq and may set carry, what thread i's epilogue
// needs from memory (read with the loads, so that the epilogue reads nothing). Each batch:
// this thread's products of its pieces with h (in piece order), each warp's xor tree, one
// block barrier, then the next batch's loads, and under them thread i < RB sums row
// r0 + i G's warp sums in warp order from 0 and runs epilogue(row, s[M], carry as it was
// for this batch). The order of additions depends on K alone.
template <st_type T, int P, int RB, int M, typename Issue, typename Epilogue>
__device__ __forceinline__ void rowblock_batches(int rows, const float (&h)[P][16 / cuda_elem_bytes<T>::value],
                                                 const uint4 (&wq)[M][RB][P], const float &carry, const Issue &issue,
                                                 const Epilogue &epilogue) {
    constexpr int VEC = 16 / cuda_elem_bytes<T>::value;
    __shared__ float warp_sums[2][ROWBLOCK_WARPS][M * RB]; // two: a batch's writes never meet the last one's reads
    const int t = threadIdx.x, warp = t / ST_GPU_WARP_SIZE, lane = t % ST_GPU_WARP_SIZE, G = (int)gridDim.x;
    for (int r0 = (int)blockIdx.x, buf = 0; r0 < rows; r0 += RB * G, buf ^= 1) {
#pragma unroll
        for (int m = 0; m < M; m++)
#pragma unroll
            for (int i = 0; i < RB; i++) {
                float acc = 0.0f;
                if (r0 + i * G < rows) {
#pragma unroll
                    for (int j = 0; j < P; j++) {
                        float wf[VEC];
                        cuda_unpack16<T>(wq[m][i][j], wf);
#pragma unroll
                        for (int e = 0; e < VEC; e++) acc = fmaf(wf[e], h[j][e], acc);
                    }
                }
                acc = cuda_warp_sum(acc);
                if (lane == 0) warp_sums[buf][warp][m * RB + i] = acc;
            }
        __syncthreads();
        // the next batch's loads first, then this batch's epilogue under them
        const float carry_now = carry;
        if (r0 + RB * G < rows) issue(r0 + RB * G);
        if (t >= RB || r0 + t * G >= rows) continue;
        float s[M];
#pragma unroll
        for (int m = 0; m < M; m++) {
            s[m] = 0.0f;
#pragma unroll
            for (int w = 0; w < ROWBLOCK_WARPS; w++) s[m] += warp_sums[buf][w][m * RB + t];
        }
        epilogue(r0 + t * G, s, carry_now);
    }
}

#endif /* STRIDE_CUDA_GEMV_ROWBLOCK_CUH */
