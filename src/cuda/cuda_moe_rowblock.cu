// The chosen experts' products of one token (MoE decode, M == 1: st_fused_moe's GLU and
// DOWN) read as the dense decode products read (cuda_gemv_rowblock.cuh): a block takes
// whole rows, each thread P 16-byte pieces (8 elements) of every row, its x pieces loaded
// once into registers; one wave of G blocks, block b the rows b, b + G, ..., RB a batch
// (rowblock_batches: a batch's loads issued together, a block reduction a batch).
//
//   GLU:  gate, up [K, F, E] F16/BF16 (row stride nb1, expert stride nb2);  x [K] F32, every
//         slot's;  ids I32 [n_used];  out [F, n_used] F32
//         out[n, j] = act(gate[e_j] row n . x) * (up[e_j] row n . x),  e_j = ids[j]
//   DOWN: down [F, D, E] F16/BF16;  x [F, n_used] F32 (slot j's unit x[:, j]);  wts F32 [n_used]
//         out[d] = sum over j of wts[j] (down[e_j] row d . x[:, j]),  or residual[d] += it
//
// GLU: the rows are the n_used F (slot, row) pairs, g = j F + n, each a gated pair (a gate
// and an up row of K), thread t the pieces t, t + 256, ... (P = K / 2,048) of both, RB =
// rowblock_rows(P, true). A batch looks its rows' experts up in ids in device memory (no
// host synchronisation: the step runs as a recorded graph): rows at W + ids[j] nb2 + n nb1.
//
// DOWN: row d is the slots' rows of F laid end to end, n_used F = 2,048 P elements. Warp w of
// the block takes the w-th of 8 equal spans of it (256 P elements), which lies within one
// slot's part when n_used divides 8 (slot s = w n_used / 8, from element k0 of its row), and
// lane l the pieces k0 + 8 l + 256 p, p < P: one slot, one expert and one address a thread
// for every row, W + ids[s] nb2 + d nb1 + (k0 + 8 l) type_size, its pieces 512 bytes apart
// (each warp load 512 contiguous bytes, a batch's loads the row's whole bytes). The x
// pieces are wts[s] x[k.., s] (the slot's weight folded into x once a block), so the block
// sum of a row is the weighted sum over the slots; thread i's epilogue (row r0 + i G)
// stores it or adds it to the residual.
//
// Why: the warp-a-row kernels (cuda_moe.cu) walk each (row, slot) with one warp in dependent
// rounds and read x again for every piece; here, as in the dense products, one round of
// loads from the whole GPU puts a batch of every block's rows in flight.
//
// An expert id outside [0, E) is recorded (block 0) and its slot left out: GLU stores none
// of its rows, DOWN reads none of its weights and takes its x pieces as 0 (the term left
// out), as the warp-a-row kernels do. The order of additions depends on the shape alone
// (a thread's pieces in order, each warp's xor tree, the warps in order): not the
// composite's (a slot's product, then the weighted sum in slot order), so the results
// differ from the warp-a-row kernels' in the last bits of f32 sums.
//
// Bytes (the chosen experts' weights once): GLU 2 n_used F K type_size, DOWN n_used F D
// type_size; x once a block (L2). FLOPs: GLU 4 n_used F K, DOWN 2 n_used F D. olmoe-1b-7b
// (K = D = 2,048, F = 1,024, n_used = 8, F16): GLU 64 MiB in 8,192 rows of one piece a
// thread for each of gate and up, DOWN 32 MiB in 2,048 rows of four pieces (a warp a slot).
#include <limits.h>

#include "cuda/cuda_gemv_rowblock.cuh"
#include "cuda/cuda_moe.cuh"

// The unit's pieces a thread at most: K up to 4,096 (with 3 or 4 pieces of both gate and up
// a batch's loads and x spill at ROWBLOCK_MIN_BLOCKS' 64 registers).
#define MOE_ROWBLOCK_GLU_PIECES_MAX 2

// The operands of one launch (one token: slot j of ids, wts, x, out is its j-th entry).
typedef struct moe_rowblock_args {
    const char *w[2];       // GLU: gate, up [K, F, E]; DOWN: down [F, D, E]
    int64_t nb1[2], nb2[2]; // their row and expert strides, bytes
    int64_t E;
    int K;                  // elements a weight row: K (GLU), F (DOWN: a slot's part of row d)
    int N;                  // rows an expert: F (GLU), D (DOWN)
    int n_used;
    int rows;               // GLU: n_used F (slot, row) pairs; DOWN: D
    const float *x;         // GLU: [K]; DOWN: slot j's [F] at x + j x_nb1 bytes
    int64_t x_nb1;
    const float *wts;       // DOWN: [n_used]
    char *out;              // GLU: [F, n_used] at out_nb1 bytes a slot; DOWN: [D] (without a residual)
    int64_t out_nb1;
    float *residual;        // DOWN: [D] += the sum, or NULL
    const int32_t *ids;     // [n_used]
    bool gelu;              // GLU: GeGLU, else SwiGLU
    st_cuda_op_error *op_err;
} moe_rowblock_args;

// The expert of slot j, or -1 for an id outside [0, E).
__device__ __forceinline__ int32_t moe_rowblock_expert(const moe_rowblock_args &a, int j) {
    const int32_t e = __ldg(a.ids + j);
    return e >= 0 && e < a.E ? e : -1;
}

// Block 0 records a bad expert id (the first one any kernel meets wins); every block then
// skips that slot without a word.
__device__ __forceinline__ void moe_rowblock_check_ids(const moe_rowblock_args &a) {
    if (blockIdx.x != 0) return;
    for (int j = threadIdx.x; j < a.n_used; j += ROWBLOCK_THREADS) {
        const int32_t e = __ldg(a.ids + j);
        if (e < 0 || e >= a.E) cuda_report_op_error(a.op_err, ST_CUDA_OP_ERROR_EXPERT_ID, e, j, a.E);
    }
}

// ---- the unit: gate and up of the chosen experts, SwiGLU or GeGLU -------------------------

template <st_type T, int P>
__global__ void __launch_bounds__(ROWBLOCK_THREADS, ROWBLOCK_MIN_BLOCKS)
    moe_glu_rowblock_kernel(const moe_rowblock_args a) {
    constexpr int VEC = 16 / cuda_elem_bytes<T>::value, RB = rowblock_rows(P, true), M = 2;
    const int t = threadIdx.x, G = (int)gridDim.x;
    cuda_early_release(); // a kernel launched early behind this one may take the SMs it leaves
    moe_rowblock_check_ids(a);
    float h[P][VEC], no_nw[1][VEC];
    rowblock_load_x<VEC, P, false>(a.x, nullptr, P * ROWBLOCK_THREADS, h, no_nw); // (K = 2,048 P)
    uint4 wq[M][RB][P];
    const float no_carry = 0.0f;
    // the gate and up rows of the batch from pair r0 (pair g: row n of slot j's expert), the
    // batch's experts looked up before any weight load; a pair past the rows or of a bad
    // expert id (recorded) reads nothing and is not stored
    auto issue = [&](int r0) {
        const uint4 *wg[RB], *wu[RB];
        bool ok[RB];
#pragma unroll
        for (int i = 0; i < RB; i++) {
            const int g = r0 + i * G < a.rows ? r0 + i * G : r0, j = g / a.N, n = g - j * a.N;
            const int32_t e = moe_rowblock_expert(a, j);
            ok[i] = r0 + i * G < a.rows && e >= 0;
            const int64_t ev = e >= 0 ? e : 0;
            wg[i] = (const uint4 *)(a.w[0] + ev * a.nb2[0] + n * a.nb1[0]) + t;
            wu[i] = (const uint4 *)(a.w[1] + ev * a.nb2[1] + n * a.nb1[1]) + t;
        }
#pragma unroll
        for (int i = 0; i < RB; i++)
#pragma unroll
            for (int p = 0; p < P; p++) {
                const uint4 zero = make_uint4(0, 0, 0, 0);
                wq[0][i][p] = ok[i] ? st_gpu_load_streaming(wg[i] + p * ROWBLOCK_THREADS) : zero;
                wq[1][i][p] = ok[i] ? st_gpu_load_streaming(wu[i] + p * ROWBLOCK_THREADS) : zero;
            }
    };
    issue((int)blockIdx.x);
    rowblock_batches<T, P, RB, M>(a.rows, h, wq, no_carry, issue, [&](int g, float (&s)[M], float) {
        const int j = g / a.N, n = g - j * a.N;
        if (moe_rowblock_expert(a, j) < 0) return;
        const float act = a.gelu ? cuda_gelu_tanh_f32(s[0]) : cuda_silu_f32(s[0]);
        ((float *)(a.out + j * a.out_nb1))[n] = __fmul_rn(act, s[1]);
    });
}

// ---- down, weighted over the slots (and added to the residual) ----------------------------

// EARLY: launched early (CUDA_EARLY_MOE_DOWN), behind the gated unit: the first batch of
// weight rows (and residuals) goes in flight before the block waits for the unit, whose
// output (x) it then reads through L2. The ids and weights of the slots, and the residual,
// come from kernels that ended before the unit began.
template <st_type T, bool RESIDUAL, int P, bool EARLY>
__global__ void __launch_bounds__(ROWBLOCK_THREADS, ROWBLOCK_MIN_BLOCKS)
    moe_down_rowblock_kernel(const moe_rowblock_args a) {
    constexpr int VEC = 16 / cuda_elem_bytes<T>::value, RB = rowblock_rows(P, false), M = 1;
    constexpr int STEP = ST_GPU_WARP_SIZE * VEC, SPAN = P * STEP; // elements: a warp load's (256), a warp's
    const int t = threadIdx.x, G = (int)gridDim.x, warp = t / ST_GPU_WARP_SIZE, lane = t % ST_GPU_WARP_SIZE;
    cuda_early_release(); // (the next layer's q/k/v, launched early, may take the SMs it leaves)
    moe_rowblock_check_ids(a);
    // this warp's span of every row: slot s's elements k0 .. k0 + SPAN; this lane's piece p
    // the elements k + STEP p .. + VEC (k = k0 + VEC lane), at w + d nb1 + STEP p type_size
    // (not ok: s's expert id is bad, the pieces read nothing and their x is 0)
    const int s = warp * SPAN / a.K, k = warp * SPAN - s * a.K + VEC * lane;
    const int32_t e = moe_rowblock_expert(a, s);
    const bool ok = e >= 0;
    const char *w = a.w[0] + (ok ? e : 0) * a.nb2[0] + (int64_t)k * cuda_elem_bytes<T>::value;
    const float wt = __ldg(a.wts + s);
    const float4 *xs = (const float4 *)((const char *)a.x + s * a.x_nb1) + k / 4;
    uint4 wq[M][RB][P];
    float resid = 0.0f;
    // the batch's rows from r0; thread i also row r0 + i G's residual (read with the loads)
    auto issue = [&](int r0) {
#pragma unroll
        for (int i = 0; i < RB; i++) {
            const int d = r0 + i * G;
            if (d >= a.rows) break;
            const uint4 *row = (const uint4 *)(w + (int64_t)d * a.nb1[0]);
#pragma unroll
            for (int p = 0; p < P; p++)
                wq[0][i][p] = ok ? st_gpu_load_streaming(row + p * STEP / VEC) : make_uint4(0, 0, 0, 0);
            if (RESIDUAL && i == t) resid = a.residual[d];
        }
    };
    issue((int)blockIdx.x);
    if (EARLY) cuda_early_wait();
    float h[P][VEC];
#pragma unroll
    for (int p = 0; p < P; p++)
#pragma unroll
        for (int i = 0; i < VEC; i += 4) {
            const float4 v = EARLY ? st_gpu_load_l2(xs + (p * STEP + i) / 4) : __ldg(xs + (p * STEP + i) / 4);
            h[p][i] = ok ? __fmul_rn(wt, v.x) : 0.0f;
            h[p][i + 1] = ok ? __fmul_rn(wt, v.y) : 0.0f;
            h[p][i + 2] = ok ? __fmul_rn(wt, v.z) : 0.0f;
            h[p][i + 3] = ok ? __fmul_rn(wt, v.w) : 0.0f;
        }
    rowblock_batches<T, P, RB, M>(a.rows, h, wq, resid, issue, [&](int d, float (&sum)[M], float resid_now) {
        if (RESIDUAL) a.residual[d] = __fadd_rn(resid_now, sum[0]);
        else ((float *)a.out)[d] = sum[0];
    });
}

// ---- host ---------------------------------------------------------------------------------

// The elements of the row a thread's pieces cover: GLU a weight row (K), DOWN the slots'
// rows end to end (n_used F).
static int64_t moe_rowblock_row_elems(const st_fused_moe *op) {
    const int64_t K = op->w[0]->ne[0], n_used = op->y[0]->ne[1];
    return op->kind == ST_FUSED_MOE_GLU ? K : n_used * K;
}

bool cuda_moe_rowblock_takes(const st_cuda_ctx *c, const st_fused_moe *op) {
    const st_tensor *w = op->w[0], *x = op->x;
    const bool glu = op->kind == ST_FUSED_MOE_GLU;
    if (!(c->tune.moe_rowblock & (glu ? CUDA_MOE_ROWBLOCK_GLU : CUDA_MOE_ROWBLOCK_DOWN))) return false;
    if (w->type != ST_TYPE_F16 && w->type != ST_TYPE_BF16) return false;
    const int64_t N = w->ne[1], n_used = op->y[0]->ne[1], M = op->y[0]->ne[2];
    if (M != 1 || n_used < 1 || N < 1) return false;
    if ((glu ? n_used * N : N) > INT_MAX / 2) return false; // (rows and r0 + RB G are ints)
    // the same whole number of pieces a thread, every piece 16-byte aligned
    const int64_t elems = moe_rowblock_row_elems(op);
    const int64_t max_p = glu ? MOE_ROWBLOCK_GLU_PIECES_MAX : ROWBLOCK_PIECES_A_THREAD_MAX;
    if (elems % ROWBLOCK_K_A_ROUND != 0 || elems / ROWBLOCK_K_A_ROUND > max_p) return false;
    if (!cuda_rows_aligned16(w) || (glu && !cuda_rows_aligned16(op->w[1])) || !cuda_aligned16(x->data)) return false;
    if (glu) return x->ne[1] == 1 && x->ne[2] == 1;            // x shared by the slots
    return ROWBLOCK_WARPS % n_used == 0 && x->nb[1] % 16 == 0; // a warp's span within one slot
}

template <st_type T, bool RESIDUAL, int P>
static void moe_down_rowblock_launch_as(st_cuda_ctx *c, const moe_rowblock_args &a, unsigned int grid) {
    if (c->tune.early_launch & CUDA_EARLY_MOE_DOWN)
        (void)st_gpu_launch_early(moe_down_rowblock_kernel<T, RESIDUAL, P, true>, dim3(grid), ROWBLOCK_THREADS, 0,
                                  c->stream, a); // (its error: ST_GPU_CHECK_LAUNCH)
    else moe_down_rowblock_kernel<T, RESIDUAL, P, false><<<grid, ROWBLOCK_THREADS, 0, c->stream>>>(a);
}

template <st_type T, int P>
static void moe_down_rowblock_launch(st_cuda_ctx *c, const moe_rowblock_args &a, unsigned int grid) {
    if (a.residual) moe_down_rowblock_launch_as<T, true, P>(c, a, grid);
    else moe_down_rowblock_launch_as<T, false, P>(c, a, grid);
}

template <st_type T>
static void moe_rowblock_launch(st_cuda_ctx *c, bool glu, const moe_rowblock_args &a, int P, unsigned int grid) {
    if (glu) { // (P <= MOE_ROWBLOCK_GLU_PIECES_MAX)
        if (P == 1) moe_glu_rowblock_kernel<T, 1><<<grid, ROWBLOCK_THREADS, 0, c->stream>>>(a);
        else moe_glu_rowblock_kernel<T, 2><<<grid, ROWBLOCK_THREADS, 0, c->stream>>>(a);
        return;
    }
    switch (P) {
    case 1: moe_down_rowblock_launch<T, 1>(c, a, grid); break;
    case 2: moe_down_rowblock_launch<T, 2>(c, a, grid); break;
    case 3: moe_down_rowblock_launch<T, 3>(c, a, grid); break;
    default: moe_down_rowblock_launch<T, 4>(c, a, grid); break;
    }
}

st_status cuda_moe_rowblock_run(st_cuda_ctx *c, const st_fused_moe *op, st_error *err) {
    ST_ASSERT(cuda_moe_rowblock_takes(c, op));
    const bool glu = op->kind == ST_FUSED_MOE_GLU;
    const st_tensor *w = op->w[0], *x = op->x;
    const int64_t N = w->ne[1], n_used = op->y[0]->ne[1];
    moe_rowblock_args a = {};
    for (int i = 0; i < (glu ? 2 : 1); i++) {
        a.w[i] = (const char *)op->w[i]->data;
        a.nb1[i] = (int64_t)op->w[i]->nb[1], a.nb2[i] = (int64_t)op->w[i]->nb[2];
    }
    a.E = w->ne[2];
    a.K = (int)w->ne[0];
    a.N = (int)N;
    a.n_used = (int)n_used;
    a.rows = (int)(glu ? n_used * N : N);
    a.x = (const float *)x->data;
    a.x_nb1 = (int64_t)x->nb[1];
    a.wts = glu ? NULL : (const float *)op->wts->data;
    a.out = (char *)op->out->data;
    a.out_nb1 = (int64_t)op->out->nb[1];
    a.residual = glu || !op->residual ? NULL : (float *)op->residual->data;
    a.ids = (const int32_t *)op->ids->data;
    a.gelu = op->gelu;
    a.op_err = c->d_op_error;
    const int P = (int)(moe_rowblock_row_elems(op) / ROWBLOCK_K_A_ROUND);
    const unsigned int grid = (unsigned int)rowblock_grid(c, a.rows);
    if (w->type == ST_TYPE_F16) moe_rowblock_launch<ST_TYPE_F16>(c, glu, a, P, grid);
    else moe_rowblock_launch<ST_TYPE_BF16>(c, glu, a, P, grid);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}
