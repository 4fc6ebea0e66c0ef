// The decode products of a layer read as the read floor reads: a block takes whole rows,
// each of its threads the same columns of every row.
//
//   W_i [K, N_i] F16/BF16 at row stride nb1_i;  x [K] F32;  y_i [N_i] F32   (one column)
//
// Thread t of a block of ROWBLOCK_THREADS owns the 16-byte pieces t, t + 256, ... (P =
// ceil(K / 2,048) of them; those past the row's K / 8 are zeros, read from nowhere) of
// every row. Its x pieces (times norm_w, with a norm) are loaded
// once into registers before any weight, and a norm's sum of squares is one block
// reduction of those registers, formed while the first weights are in flight. Block b takes
// the rows b, b + G, b + 2G, ... of the parts' rows in order (G blocks, one wave at
// ROWBLOCK_MIN_BLOCKS an SM), RB at a time: the RB x P weight loads of a batch (twice that
// for a gated pair) are issued together, then the products, then one block reduction a
// batch (each warp's shuffle tree, then the 8 warp sums added in warp order by the row's
// thread, which applies the epilogue).
//
// Why: as one warp a row, the one-wave products of the 1-2B models stream well above a
// bare read of their bytes: a warp's lanes walk a row in dependent rounds and read x (and
// norm_w) again for every piece. The bare read puts every byte of an 8 MB product in
// flight in one round of loads from the whole GPU; this kernel reads in the same pattern.
// On those products' shapes (without norms) it streams o, down and gate/up faster than
// the warp-a-row kernel, and q/k/v as fast.
//
// gemv_rowblock_staged_kernel reads the same rows into shared memory by cp.async, all of a
// block's rows in flight at once where they fit (44 KiB a block), for the products where that
// is faster (rowblock_staged): q/k/v of the 1-2B models, whose rows then arrive in one round.
//
// The order of additions depends on K alone (thread t's pieces in order, the xor tree, the
// warps in order): the same bits for every run and row stride, not those of the warp-a-row
// kernel. Bytes: N K type_size of weights once; x, norm_w once a block (L2). FLOPs: 2 N K.
// The layout, the batches and the loop over a block's rows are cuda_gemv_rowblock.cuh's,
// shared with the experts' products of one token (cuda_moe_rowblock.cu).
#include "cuda/cuda_gemv_rowblock.cuh"

// The products it takes: at most this many rows a block (so: the layers' products, not an
// output head, which is 15+ waves long and at its read floor already, and whose y may be
// host memory, where this kernel's 4-byte stores a row would each cross the bus).
#define ROWBLOCK_MAX_ROWS_A_BLOCK 16

// The weight row of global row g (the parts' rows in order); its part and row in *p, *n.
__device__ __forceinline__ const char *rowblock_row(const cuda_gemv_decode_args &a, int g, int *p, int64_t *n) {
    int q = 0;
    int64_t r = g;
    while (q + 1 < a.n_parts && r >= a.n[q]) r -= a.n[q], q++;
    *p = q, *n = r;
    return a.w[q] + r * a.nb1[q];
}

// Issues the weight loads of the batch of rows r0, r0 + G, ... (RB of them, those below rows)
// into wq; thread t < RB also the residual of its row (ADD), so that the epilogue, which
// runs after the next batch's loads are issued, reads nothing from memory.
template <int EPI, int P, int RB, int M>
__device__ __forceinline__ void rowblock_issue(const cuda_gemv_decode_args &a, int r0, int rows, uint4 (&wq)[M][RB][P],
                                               float &resid) {
    const int t = threadIdx.x, G = (int)gridDim.x;
#pragma unroll
    for (int i = 0; i < RB; i++) {
        if (r0 + i * G >= rows) break;
        int p;
        int64_t n;
        const uint4 *g = (const uint4 *)rowblock_row(a, r0 + i * G, &p, &n);
        const uint4 *u = M == 2 ? (const uint4 *)(a.w_up + n * a.up_nb1) : g;
#pragma unroll
        for (int j = 0; j < P; j++) {
            const bool in = rowblock_piece_in(j, a.n_vec);
            const uint4 zero = make_uint4(0, 0, 0, 0);
            wq[0][i][j] = in ? st_gpu_load_streaming(g + t + j * ROWBLOCK_THREADS) : zero;
            if (M == 2) wq[M - 1][i][j] = in ? st_gpu_load_streaming(u + t + j * ROWBLOCK_THREADS) : zero;
        }
        if (EPI == ST_FUSED_EPILOGUE_ADD && i == t) resid = a.out[n];
    }
}

// The norm's scale 1 / rms(x): one block reduction of the pieces in h, which become
// x * norm_w (norm_w from nw when NW, read there with x; else loaded now).
template <int VEC, int P, bool NW>
__device__ __forceinline__ float rowblock_norm(const cuda_gemv_decode_args &a, float (&h)[P][VEC],
                                               const float (&nw)[NW ? P : 1][VEC], float *ss_sums, int warp,
                                               int lane) {
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < P; j++)
#pragma unroll
        for (int i = 0; i < VEC; i++) ss = fmaf(h[j][i], h[j][i], ss);
    ss = cuda_warp_sum(ss);
    if (lane == 0) ss_sums[warp] = ss;
#pragma unroll
    for (int j = 0; j < P; j++) {
        if (!NW && !rowblock_piece_in(j, a.n_vec)) continue; // (h is zeros there)
#pragma unroll
        for (int i = 0; i < VEC; i += 4) {
            const int jn = NW ? j : 0;
            const float4 q = NW ? make_float4(nw[jn][i], nw[jn][i + 1], nw[jn][i + 2], nw[jn][i + 3])
                                : rowblock_f32x4<VEC>(a.norm_w, j, i);
            h[j][i] *= q.x, h[j][i + 1] *= q.y, h[j][i + 2] *= q.z, h[j][i + 3] *= q.w;
        }
    }
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < ROWBLOCK_WARPS; w++) total += ss_sums[w];
    return cuda_rms_scale(total, a.K, a.eps);
}

// Row n of part p from its sums s[M] (times the norm's scale): stored, added to the
// residual (and the next product's x * norm_w formed), or gated.
template <int EPI, int M>
__device__ __forceinline__ void rowblock_epilogue(const cuda_gemv_decode_args &a, int p, int64_t n, const float (&s)[M],
                                                  float resid) {
    if (EPI == ST_FUSED_EPILOGUE_STORE) {
        a.y[p][n] = s[0];
    } else if (EPI == ST_FUSED_EPILOGUE_ADD) {
        const float o = __fadd_rn(resid, s[0]);
        a.out[n] = o;
        if (a.out_w) a.out_w[n] = __fmul_rn(o, a.out_norm_w[n]); // the next product's x * norm_w
    } else {
        const float g = a.epilogue == ST_FUSED_EPILOGUE_GEGLU ? cuda_gelu_tanh_f32(s[0]) : cuda_silu_f32(s[0]);
        a.out[n] = __fmul_rn(g, s[M - 1]);
    }
}

template <st_type T, int EPI, bool NORM, int P>
__global__ void __launch_bounds__(ROWBLOCK_THREADS, ROWBLOCK_MIN_BLOCKS)
    gemv_rowblock_kernel(const cuda_gemv_decode_args a, int rows) {
    constexpr bool GLU = EPI == ST_FUSED_EPILOGUE_SWIGLU;  // (GeGLU too: the activation is a's)
    constexpr int VEC = 16 / cuda_elem_bytes<T>::value, RB = rowblock_rows(P, GLU), M = GLU ? 2 : 1;
    __shared__ float ss_sums[ROWBLOCK_WARPS];
    const int t = threadIdx.x, warp = t / ST_GPU_WARP_SIZE, lane = t % ST_GPU_WARP_SIZE;
    cuda_early_release(); // a product launched early behind this one may take the SMs it leaves
    float h[P][VEC], no_nw[1][VEC];
    rowblock_load_x<VEC, P, false>(a.x, a.norm_w, a.n_vec, h, no_nw);
    uint4 wq[M][RB][P];
    float resid = 0.0f;
    rowblock_issue<EPI, P, RB, M>(a, (int)blockIdx.x, rows, wq, resid);
    float scale = 1.0f;
    if (NORM) scale = rowblock_norm<VEC, P, false>(a, h, no_nw, ss_sums, warp, lane); // the first batch in flight
    rowblock_batches<T, P, RB, M>(
        rows, h, wq, resid, [&](int r0) { rowblock_issue<EPI, P, RB, M>(a, r0, rows, wq, resid); },
        [&](int r, float (&s)[M], float resid_now) {
#pragma unroll
            for (int m = 0; m < M; m++) s[m] *= scale; // (1 without a norm: exact)
            int p;
            int64_t n;
            rowblock_row(a, r, &p, &n);
            rowblock_epilogue<EPI, M>(a, p, n, s, resid_now);
        });
}

// ---- the same products with a block's rows staged in shared memory ------------------------
//
// The kernel above holds a batch of RB rows in registers and issues the next batch only
// when a batch is summed, so a block's rows arrive in ceil(rows / RB) dependent rounds
// (q/k/v of the 1-2B models: 2, down of qwen3-1.7b: 4). Here each thread copies its own
// 16-byte pieces of up to S rows into shared memory by cp.async (S x M x P pieces, 44 KiB a
// block: rowblock_stages), and refills a row's slot as soon as it has summed it; no thread
// reads another's pieces, so the only block barrier is the one before the epilogues, which
// run for all the block's rows at the end (thread i: row i). The sums are those of the
// kernel above, in the same order (thread t's pieces in order, the xor tree, the warps in
// order): the same bits.
//
// Launched early (EARLY: st_cuda_ctx's early_launch), a block issues the copies of its first S
// rows before it waits for the kernel ahead (cuda_early_wait), since weights are written by
// no kernel of the step, and reads x and the residual after the wait, through L2. Its rows
// then stream while the kernel ahead still runs: the decode attention on a few SMs, the
// tail of a product.
#define ROWBLOCK_STAGE_UNITS 11 // 4 KiB units (a piece of every thread) of stage a block

__host__ __device__ constexpr int rowblock_stages(int P, bool glu) {
    return ROWBLOCK_STAGE_UNITS / (P * (glu ? 2 : 1)) < ROWBLOCK_MAX_ROWS_A_BLOCK
               ? ROWBLOCK_STAGE_UNITS / (P * (glu ? 2 : 1))
               : ROWBLOCK_MAX_ROWS_A_BLOCK;
}

// 16 bytes global -> shared, asynchronously, marked first to leave L2 (as the register
// kernel's streaming loads are: the weights are read once a token). Portable: a plain copy,
// done when it returns (a thread reads back only its own pieces, so no barrier is missing).
#if ST_GPU_NVIDIA
__device__ __forceinline__ uint64_t rowblock_evict_first_policy() {
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
}
__device__ __forceinline__ void rowblock_cp_async16(uint4 *dst, const uint4 *src, uint64_t policy) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(
                     (unsigned int)__cvta_generic_to_shared(dst)),
                 "l"(src), "l"(policy)
                 : "memory");
}
__device__ __forceinline__ void rowblock_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void rowblock_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#else
__device__ __forceinline__ uint64_t rowblock_evict_first_policy() { return 0; }
__device__ __forceinline__ void rowblock_cp_async16(uint4 *dst, const uint4 *src, uint64_t) { *dst = *src; }
__device__ __forceinline__ void rowblock_cp_async_commit() {}
template <int N> __device__ __forceinline__ void rowblock_cp_async_wait() {}
#endif

template <st_type T, int EPI, bool NORM, int P, bool EARLY>
__global__ void __launch_bounds__(ROWBLOCK_THREADS, ROWBLOCK_MIN_BLOCKS)
    gemv_rowblock_staged_kernel(const cuda_gemv_decode_args a, int rows) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    constexpr bool GLU = EPI == ST_FUSED_EPILOGUE_SWIGLU;
    constexpr int VEC = 16 / cuda_elem_bytes<T>::value, M = GLU ? 2 : 1, S = rowblock_stages(P, GLU);
    static_assert(S >= 1, "a row of every weight fits the stage");
    extern __shared__ uint4 stage[]; // [S][M][P][ROWBLOCK_THREADS]
    __shared__ float warp_sums[ROWBLOCK_MAX_ROWS_A_BLOCK * M][ROWBLOCK_WARPS];
    __shared__ float ss_sums[ROWBLOCK_WARPS];
    const int t = threadIdx.x, warp = t / ST_GPU_WARP_SIZE, lane = t % ST_GPU_WARP_SIZE, G = (int)gridDim.x;
    const int mine = (rows - (int)blockIdx.x + G - 1) / G; // rows blockIdx.x + i G, i < mine (<= 16)
    cuda_early_release();
    // x (and at one piece a thread norm_w; at two it slows qwen3-8b's q/k/v, at four it
    // spills) before any weight: behind S rows of copies, a load waits for them. Launched
    // early, after the copies and the wait (by then the copies have had the kernel ahead's time).
    constexpr bool NW_EARLY = NORM && P == 1;
    float h[P][VEC], nw[NW_EARLY ? P : 1][VEC];
    if (!EARLY) rowblock_load_x<VEC, P, NW_EARLY>(a.x, a.norm_w, a.n_vec, h, nw);
    const uint64_t policy = rowblock_evict_first_policy();
    // row i of the block into slot i % S as one group (an empty group past the last row, so
    // that row i's group is always the (S-1)th most recent when it is waited for)
    auto issue = [&](int i) {
        if (i < mine) {
            int p;
            int64_t n;
            const uint4 *g = (const uint4 *)rowblock_row(a, (int)blockIdx.x + i * G, &p, &n);
            const uint4 *u = M == 2 ? (const uint4 *)(a.w_up + n * a.up_nb1) : g;
            uint4 *slot = stage + (i % S) * M * P * ROWBLOCK_THREADS + t;
#pragma unroll
            for (int j = 0; j < P; j++) {
                if (!rowblock_piece_in(j, a.n_vec)) continue; // (zeros in every slot, below)
                rowblock_cp_async16(slot + j * ROWBLOCK_THREADS, g + t + j * ROWBLOCK_THREADS, policy);
                if (M == 2) rowblock_cp_async16(slot + (P + j) * ROWBLOCK_THREADS, u + t + j * ROWBLOCK_THREADS, policy);
            }
        }
        rowblock_cp_async_commit();
    };
    // this thread's pieces past the row: zeros in every slot, written once (only this
    // thread reads them back, so no barrier), never copied over
#pragma unroll
    for (int j = 0; j < P; j++) {
        if (rowblock_piece_in(j, a.n_vec)) continue;
        for (int i = 0; i < S; i++)
#pragma unroll
            for (int m = 0; m < M; m++) stage[((i * M + m) * P + j) * ROWBLOCK_THREADS + t] = make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < S; i++) issue(i);
    if (EARLY) {
        cuda_early_wait();
        rowblock_load_x<VEC, P, NW_EARLY, true>(a.x, a.norm_w, a.n_vec, h, nw);
    }
    float resid = 0.0f;
    if (EPI == ST_FUSED_EPILOGUE_ADD && t < mine) {
        int p;
        int64_t n;
        rowblock_row(a, (int)blockIdx.x + t * G, &p, &n);
        resid = EARLY ? st_gpu_load_l2(a.out + n) : a.out[n];
    }
    float scale = 1.0f;
    if (NORM) scale = rowblock_norm<VEC, P, NW_EARLY>(a, h, nw, ss_sums, warp, lane); // the first rows in flight
    for (int i = 0; i < mine; i++) {
        rowblock_cp_async_wait<S - 1>(); // row i's pieces (this thread's own) have landed
        const uint4 *slot = stage + (i % S) * M * P * ROWBLOCK_THREADS + t;
        float acc[M];
#pragma unroll
        for (int m = 0; m < M; m++) {
            acc[m] = 0.0f;
#pragma unroll
            for (int j = 0; j < P; j++) {
                float wf[VEC];
                cuda_unpack16<T>(slot[(m * P + j) * ROWBLOCK_THREADS], wf);
#pragma unroll
                for (int e = 0; e < VEC; e++) acc[m] = fmaf(wf[e], h[j][e], acc[m]);
            }
        }
        issue(i + S); // into the slot just read (the sums above used every piece of it)
#pragma unroll
        for (int m = 0; m < M; m++) {
            const float s = cuda_warp_sum(acc[m]);
            if (lane == 0) warp_sums[i * M + m][warp] = s;
        }
    }
    __syncthreads();
    if (t >= mine) return;
    float s[M];
#pragma unroll
    for (int m = 0; m < M; m++) {
        s[m] = 0.0f;
#pragma unroll
        for (int w = 0; w < ROWBLOCK_WARPS; w++) s[m] += warp_sums[t * M + m][w];
        s[m] *= scale; // (1 without a norm: exact)
    }
    int p;
    int64_t n;
    rowblock_row(a, (int)blockIdx.x + t * G, &p, &n);
    rowblock_epilogue<EPI, M>(a, p, n, s, resid);
#endif
}

// The longest rows (pieces a thread, K / 2,048) of a residual add that early_launch's
// CUDA_ROWBLOCK_ADD launches early: o (1-2 pieces, K = 2,048 or 4,096); longer ones, down
// (3-4 on the 1-2B models; qwen3-8b's is not this kernel's), go early by
// CUDA_EARLY_LONG_ADD (cuda_tuning.h: launched early, o is faster, down is not).
// llama-3.2-1b's o, which prepares gate/up's norm, is the warp-a-row kernel's and never
// goes early.
#define ROWBLOCK_EARLY_SHORT_P 2

// Whether a product of this kind and rows of K elements (P pieces a thread) is launched
// early (then staged): by its kind's bit, or by CUDA_EARLY_PARTIAL_ROWS where K is no
// multiple of 2,048 (the rows end in a partial round of pieces: gemma-3-1b's 1,152 and
// 6,912, phi-4-mini's 3,072).
static bool rowblock_early(const st_cuda_ctx *c, int kind, int64_t K) {
    const int P = (int)rowblock_pieces_a_thread(K);
    const int bit = kind == CUDA_ROWBLOCK_ADD && P > ROWBLOCK_EARLY_SHORT_P ? CUDA_EARLY_LONG_ADD : kind;
    const bool partial = K % ROWBLOCK_K_A_ROUND != 0 && (c->tune.early_launch & CUDA_EARLY_PARTIAL_ROWS);
    return (c->tune.early_launch & bit) != 0 || partial;
}

static int64_t rowblock_rows_total(const cuda_gemv_decode_args *a) {
    int64_t rows = 0;
    for (int i = 0; i < a->n_parts; i++) rows += a->n[i];
    return rows;
}

int cuda_rowblock_kinds(const st_cuda_ctx *c, int64_t K) {
    if (c->tune.rowblock >= 0) return c->tune.rowblock;
    return CUDA_ROWBLOCK_STORE | CUDA_ROWBLOCK_ADD | (K % ROWBLOCK_K_A_ROUND != 0 ? CUDA_ROWBLOCK_GLU : 0);
}

bool cuda_gemv_rowblock_takes(const st_cuda_ctx *c, const cuda_gemv_decode_args *a, st_type type) {
    const int kind = a->epilogue == ST_FUSED_EPILOGUE_STORE ? CUDA_ROWBLOCK_STORE
                     : a->epilogue == ST_FUSED_EPILOGUE_ADD ? CUDA_ROWBLOCK_ADD
                                                              : CUDA_ROWBLOCK_GLU;
    if (!(cuda_rowblock_kinds(c, a->K) & kind) || (type != ST_TYPE_F16 && type != ST_TYPE_BF16)) return false;
    if (a->x_w || a->out_ss) return false; // (a prepared norm: the decode kernel)
    if (a->K < 1 || a->K % ROWBLOCK_VEC != 0) return false; // whole 16-byte pieces
    const int64_t P = rowblock_pieces_a_thread(a->K), rows = rowblock_rows_total(a);
    if (P > ROWBLOCK_PIECES_A_THREAD_MAX || rows < 1) return false;
    return rows <= rowblock_grid(c, rows) * ROWBLOCK_MAX_ROWS_A_BLOCK; // (so rows fit an int: a wave x 16)
}

template <st_type T, int EPI, bool NORM, int P>
static void rowblock_launch_staged(st_cuda_ctx *c, const cuda_gemv_decode_args &a, unsigned int grid, int rows,
                                   bool early) {
    constexpr bool GLU = EPI == ST_FUSED_EPILOGUE_SWIGLU;
    const size_t smem = (size_t)rowblock_stages(P, GLU) * (GLU ? 2 : 1) * P * ROWBLOCK_THREADS * sizeof(uint4);
    if (early) (void)st_gpu_launch_early(gemv_rowblock_staged_kernel<T, EPI, NORM, P, true>, grid, ROWBLOCK_THREADS, smem,
                                         c->stream, a, rows); // (its error: the caller's ST_GPU_CHECK_LAUNCH)
    else gemv_rowblock_staged_kernel<T, EPI, NORM, P, false><<<grid, ROWBLOCK_THREADS, smem, c->stream>>>(a, rows);
}

// Whether a product's rows are staged: st_cuda_tuning's rowblock_staged, a mask of kinds,
// or (-1, the default) where staging is faster on the H200 at depth 64: q/k/v of the 1-2B
// models (2 register batches -> 1) and o at K = 4,096 (qwen3-8b). Not o at K = 2,048 (one
// register batch: no gain), down at K = 6,144 / 8,192 or gated pairs; so a store of 3 or
// 4 pieces a thread (gemma-3-1b's down, K = 6,912, stored for its post-norm) is not either.
static bool rowblock_staged(const st_cuda_ctx *c, int kind, int P) {
    if (c->tune.rowblock_staged >= 0) return (c->tune.rowblock_staged & kind) != 0;
    return (kind == CUDA_ROWBLOCK_STORE && P <= 2) || (kind == CUDA_ROWBLOCK_ADD && P == 2);
}

template <st_type T, int EPI, bool NORM>
static void rowblock_launch_p(st_cuda_ctx *c, const cuda_gemv_decode_args &a, int P, unsigned int grid, int rows) {
    const int kind = EPI == ST_FUSED_EPILOGUE_STORE ? CUDA_ROWBLOCK_STORE
                     : EPI == ST_FUSED_EPILOGUE_ADD ? CUDA_ROWBLOCK_ADD
                                                    : CUDA_ROWBLOCK_GLU;
    const bool early = rowblock_early(c, kind, a.K); // (staged: its copies go early)
    if (early || rowblock_staged(c, kind, P)) {
        switch (P) {
        case 1: rowblock_launch_staged<T, EPI, NORM, 1>(c, a, grid, rows, early); break;
        case 2: rowblock_launch_staged<T, EPI, NORM, 2>(c, a, grid, rows, early); break;
        case 3: rowblock_launch_staged<T, EPI, NORM, 3>(c, a, grid, rows, early); break;
        default: rowblock_launch_staged<T, EPI, NORM, 4>(c, a, grid, rows, early); break;
        }
        return;
    }
    switch (P) {
    case 1: gemv_rowblock_kernel<T, EPI, NORM, 1><<<grid, ROWBLOCK_THREADS, 0, c->stream>>>(a, rows); break;
    case 2: gemv_rowblock_kernel<T, EPI, NORM, 2><<<grid, ROWBLOCK_THREADS, 0, c->stream>>>(a, rows); break;
    case 3: gemv_rowblock_kernel<T, EPI, NORM, 3><<<grid, ROWBLOCK_THREADS, 0, c->stream>>>(a, rows); break;
    default: gemv_rowblock_kernel<T, EPI, NORM, 4><<<grid, ROWBLOCK_THREADS, 0, c->stream>>>(a, rows); break;
    }
}

template <st_type T, int EPI>
static void rowblock_launch_norm(st_cuda_ctx *c, const cuda_gemv_decode_args &a, int P, unsigned int grid, int rows) {
    if (a.norm_w) rowblock_launch_p<T, EPI, true>(c, a, P, grid, rows);
    else rowblock_launch_p<T, EPI, false>(c, a, P, grid, rows);
}

template <st_type T>
static void rowblock_launch_epi(st_cuda_ctx *c, const cuda_gemv_decode_args &a, int P, unsigned int grid, int rows) {
    switch (a.epilogue) {
    case ST_FUSED_EPILOGUE_STORE: rowblock_launch_norm<T, ST_FUSED_EPILOGUE_STORE>(c, a, P, grid, rows); break;
    case ST_FUSED_EPILOGUE_ADD: rowblock_launch_norm<T, ST_FUSED_EPILOGUE_ADD>(c, a, P, grid, rows); break;
    default: rowblock_launch_norm<T, ST_FUSED_EPILOGUE_SWIGLU>(c, a, P, grid, rows); break; // SwiGLU, GeGLU
    }
}

st_status cuda_gemv_rowblock_run(st_cuda_ctx *c, const cuda_gemv_decode_args *a, st_type type, st_error *err) {
    ST_ASSERT(cuda_gemv_rowblock_takes(c, a, type));
    const int64_t rows = rowblock_rows_total(a);
    const int P = (int)rowblock_pieces_a_thread(a->K);
    const unsigned int grid = (unsigned int)rowblock_grid(c, rows);
    cuda_gemv_decode_args args = *a;
    args.n_vec = (int)(a->K / ROWBLOCK_VEC);
    if (type == ST_TYPE_F16) rowblock_launch_epi<ST_TYPE_F16>(c, args, P, grid, (int)rows);
    else rowblock_launch_epi<ST_TYPE_BF16>(c, args, P, grid, (int)rows);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}
