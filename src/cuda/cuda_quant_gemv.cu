// The decode matvec on quantized weights: y = W x for fewer than ST_CUDA_QGEMM_MIN_M
// columns (q_gemv), and a decode step's fused product, one column with its epilogue
// (q_gemv_fused). Both walk the rows with the same staged reader (q_walk): a warp copies
// segments of a row into shared memory by cp.async, several in flight, and dequantizes
// each from there (the formats: cuda_quant_formats.cuh).
#include "cuda/cuda_quant.cuh"

// Columns one pass over a weight row serves (below the GEMM threshold: all of them).
constexpr int QMM_MAX_COLS = ST_CUDA_QGEMM_MIN_M - 1;
// Blocks an SM the one-column kernels are compiled for, and their grid a multiprocessor
// (each block's warps walking groups of rows): 8 for the 32-value types (a budget of 64
// registers, no spills), 7 for the K-quants (72 registers: at 64 ptxas spills their split).
// The bytes in flight are in shared memory, not registers.
constexpr int Q_GEMV_MIN_BLOCKS = 8;
constexpr int Q_GEMV_MIN_BLOCKS_K = 7;

// ---- the matrix-vector product, staged -----------------------------------------------------
//
// q_gemv: every warp of the grid walks groups of `rows` consecutive rows (group g, then g +
// the grid's warps, ...; rows = QMM_GROUP when every warp gets a group, else 1), each row
// as segments of its chunks: a segment is q_seg::CHUNKS = 32 Q_SEG_ROUNDS chunks (lane l
// takes chunks l, l + 32, ... of it, as mul_mat_id's q_gemv_row loops), so that a lane sums
// its chunks in the order q_gemv_row does and the bits are the same, whatever the
// segment's length. A segment's bytes (whole blocks) are copied, as the 16-byte-aligned
// window around them, into one of QMM_STAGES shared-memory stages of the warp by cp.async;
// QMM_STAGES - 1 segments are in flight while the warp dequantizes one from shared
// memory. So a warp reads a row in 16-byte loads (the blocks of most types are only 2-byte
// aligned) and keeps several segments in flight (a row of a 640-wide head is 680 bytes:
// one segment). The window overreads at most 15 bytes each side; weights live in buffers
// the backend allocates, 256-byte aligned and sized in 256-byte multiples, so it never
// leaves the allocation.
//
// The group's results leave together: lanes 0..rows-1 hold rows n0.. of every column, and
// lane 0 writes them, in one 16-byte store for a group of 4 where y's row is aligned (y
// may be page-locked host memory, the decode step's logits: every store a PCIe write).
constexpr int QMM_GROUP = 4;
// Rounds of 32 chunks a segment (a lane's chunks of one segment), and the stages of a warp.
constexpr int Q_SEG_ROUNDS = QMM_UNROLL;
constexpr int QMM_STAGES = 3;
static_assert(QMM_GROUP == 4, "a group leaves as one float4");

// Staged x: chunk c's P = CH / 4 16-byte pieces at slots (P + 1) c .. (P + 1) c + P - 1 of
// a float4 array (a 16-byte gap after each chunk). A lane reads its own chunk's pieces, so a
// quarter warp (8 lanes: chunks c .. c + 7) reads piece i of 8 chunks at once. Packed, with
// 16 P bytes between lanes, those fall in 4 (P = 4) or 2 (P = 2) of the 8 16-byte bank
// groups; with the gap, (P + 1) c + i takes all 8 (P + 1 is odd): one wavefront, where the
// global loads of the same pattern touch 16 cache lines. The chunk's slots are at fixed
// offsets from its first, and a lane's chunks at fixed distances from one another, so the
// addresses cost nothing a piece.
template <int CH> struct q_x_staged {
    static constexpr int P = CH / 4;
    const float4 *s; // the chunk's first piece: first(x_s, c)
    __device__ __forceinline__ float4 piece(int i) const { return s[i]; }
    // chunk c's first piece in the staged array x_s (q_stage_x writes there, piece reads)
    template <typename V, typename I> static __device__ __forceinline__ V *first(V *x_s, I c) {
        return x_s + (P + 1) * c;
    }
};

template <st_type T> struct q_seg {
    using F = qfmt<T>;
    static constexpr int CPB = F::QK / F::CHUNK;                      // chunks a block
    static constexpr int CHUNKS = ST_GPU_WARP_SIZE * Q_SEG_ROUNDS;    // chunks a segment
    static constexpr int BLOCKS = CHUNKS / CPB;                       // blocks a segment
    static constexpr int WINDOW = (BLOCKS * F::BYTES / 16 + 2) * 16;  // bytes a stage holds
    static_assert(CHUNKS % CPB == 0, "a segment is whole blocks");
};

template <st_type T> static constexpr __host__ __device__ size_t q_gemv_smem() {
    return (size_t)QMM_WARPS * QMM_STAGES * q_seg<T>::WINDOW;
}

// The one-column kernels stage x in shared memory after the stages (q_stage_x) when it
// fits in Q_XS_MAX bytes (K up to 2,048 for every type): the bytes, or 0 (x read from
// global memory). K / CHUNK chunks of CHUNK / 4 + 1 pieces (q_x_staged).
constexpr int Q_XS_MAX = 12288;
template <st_type T> static size_t q_xs_bytes(int64_t K) {
    static_assert(q_gemv_smem<T>() + Q_XS_MAX <= ST_GPU_SMEM_BYTES,
                  "the one-column kernel's stages and staged x exceed the 48 KiB of dynamic shared memory a "
                  "kernel gets without opting in: lower Q_XS_MAX, Q_SEG_ROUNDS or QMM_STAGES");
    constexpr int CH = qfmt<T>::CHUNK;
    const size_t bytes = (size_t)(K / CH) * (CH / 4 + 1) * 16;
    return bytes <= Q_XS_MAX ? bytes : 0;
}
__device__ __forceinline__ float4 *q_xs_at(uint4 *smem, size_t stage_bytes) {
    return (float4 *)((uint8_t *)smem + stage_bytes);
}

// x [K] into x_s at q_x_staged's places, by the whole block: every thread of the block must
// call it (it ends with a barrier). K is a multiple of CHUNK.
template <int CH, bool XV> __device__ __forceinline__ void q_stage_x(float4 *x_s, const float *x, int64_t K) {
    constexpr int P = CH / 4;
    for (int p = threadIdx.x; p < (int)(K / 4); p += blockDim.x)
        q_x_staged<CH>::first(x_s, p / P)[p % P] = q_x_global<XV>{x}.piece(p);
    __syncthreads();
}

// 16 bytes global -> shared without waiting (cp.async, sm_80+). dst_s is the destination's
// shared-space address (q_shared_addr), formed once a window rather than once a copy.
// Portable: a plain copy, done when it returns; the warp barrier after the wait still makes
// every lane's copies visible to the warp.
#if ST_GPU_NVIDIA
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "the quantized decode matvec copies with cp.async: build for sm_80 or newer (STRIDE_CUDA_ARCH)"
#endif
typedef uint32_t q_shared_ptr;
__device__ __forceinline__ q_shared_ptr q_shared_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void q_copy16(q_shared_ptr dst_s, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst_s), "l"(src));
}
__device__ __forceinline__ void q_copy_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Every group but the latest N committed has landed (for this lane).
template <int N> __device__ __forceinline__ void q_copy_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
#else
typedef uint8_t *q_shared_ptr;
__device__ __forceinline__ q_shared_ptr q_shared_addr(void *p) { return (uint8_t *)p; }
__device__ __forceinline__ void q_copy16(q_shared_ptr dst, const void *src) { *(uint4 *)dst = *(const uint4 *)src; }
__device__ __forceinline__ void q_copy_commit() {}
template <int N> __device__ __forceinline__ void q_copy_wait() {}
#endif

// Segment s of a row whose bytes start at row: whole blocks, s BLOCKS blocks in.
template <st_type T> __device__ __forceinline__ const uint8_t *q_seg_bytes(const uint8_t *row, int64_t s) {
    return row + s * q_seg<T>::BLOCKS * qfmt<T>::BYTES;
}

// Copies the 16-byte-aligned window around a segment (its n_bytes bytes at p) into stage;
// the segment then starts at stage + p % 16. The window's 16-byte pieces are at most
// WINDOW / 16, so a lane's copies are a fixed, unrolled count of predicated ones (a loop
// bounded by n_vec would spend instructions of control on every row).
template <st_type T> __device__ __forceinline__ void q_seg_copy(uint8_t *stage, const uint8_t *p, int n_bytes) {
    constexpr int W = ST_GPU_WARP_SIZE, MAX_VEC = q_seg<T>::WINDOW / 16;
    const uintptr_t lo = (uintptr_t)p & ~(uintptr_t)15;
    const int n_vec = (int)(((uintptr_t)p % 16 + (uint32_t)n_bytes + 15) / 16);
    const int lane = threadIdx.x % W;
    const q_shared_ptr stage_s = q_shared_addr(stage);
#pragma unroll
    for (int i = 0; i < (MAX_VEC + W - 1) / W; i++) {
        const int v = lane + W * i;
        if (v < n_vec) q_copy16(stage_s + 16 * v, (const uint8_t *)lo + 16 * v);
    }
}

// acc[c] += lane's chunks of a segment (staged at seg; its first value is x's k_seg, and it
// has seg_chunks chunks) against xs[c], in q_gemv_row's order. XS (one column): x read from
// its staged copy x_s (q_stage_x) instead of xs[0].
template <st_type T, int NC, bool XV, bool XS>
__device__ __forceinline__ void q_seg_dot(const uint8_t *seg, int64_t k_seg, int seg_chunks, const float *const *xs,
                                          int n_cols, float acc[NC], const float4 *x_s) {
    static_assert(!XS || NC == 1, "one column is staged");
    using F = qfmt<T>;
    using G = q_seg<T>;
    constexpr int W = ST_GPU_WARP_SIZE, CH = F::CHUNK;
    static_assert(W % G::CPB == 0, "a lane's chunks have one index in their blocks");
    const int lane = threadIdx.x % W;
    // chunk lane + u W is chunk ci of block lane / CPB + u W / CPB: one base, fixed offsets
    const int ci = lane % G::CPB;
    const uint8_t *blk = seg + (lane / G::CPB) * F::BYTES;
#pragma unroll
    for (int u = 0; u < Q_SEG_ROUNDS; u++) {
        const int cl = lane + u * W; // chunk in the segment
        if (cl >= seg_chunks) break;
        float d, m = 0.0f;
        uint32_t qb[CH];
        F::split(F::template load<Q_SHARED>(blk + u * (W / G::CPB) * F::BYTES, ci), ci, &d, &m, qb);
#pragma unroll
        for (int c = 0; c < NC; c++) {
            if (c >= n_cols) break;
            if constexpr (XS)
                acc[c] = q_dot_chunk<T>(d, m, qb, q_x_staged<CH>{q_x_staged<CH>::first(x_s, k_seg / CH + cl)}, acc[c]);
            else acc[c] = q_dot_chunk<T>(d, m, qb, q_x_global<XV>{xs[c] + k_seg + cl * CH}, acc[c]);
        }
    }
}

// A warp's place in its items: group g (absolute), row r of it, segment s of the row, and
// the stage the item is copied to.
struct q_cursor {
    int64_t g;
    int r;
    int s;
    int stage;
    __device__ __forceinline__ void next(int n_seg, int rows, int64_t n_warps) {
        stage = stage + 1 == QMM_STAGES ? 0 : stage + 1;
        if (++s < n_seg) return;
        s = 0;
        if (++r < rows) return;
        r = 0;
        g += n_warps;
    }
};

// Blocks an SM the one-column kernel is compiled for.
template <st_type T> static constexpr int q_gemv_min_blocks() {
    return qfmt<T>::QK == 256 ? Q_GEMV_MIN_BLOCKS_K : Q_GEMV_MIN_BLOCKS;
}

// The walk both matrix-vector kernels share (see the section's head). This warp's items,
// groups gw, gw + n_warps, ... below src.n_groups, of src.rows rows each (at most
// QMM_GROUP), every row in segments: src.row(g, r) is row r of group g, or NULL past the
// rows; x is NC columns xs (n_cols of them). At the end of each group, sink(g, v) gets the
// group's results: v[c][r] for column c and row r (rows past the rows: 0). XV: x_vec. XS
// (one column): the block stages x into x_s (q_xs_bytes) while its first copies fly, so
// every warp of the block must walk, with items or without.
template <st_type T, int NC, bool XV, bool XS, typename Src, typename Sink>
__device__ __forceinline__ void q_walk_x(uint8_t *stages, float4 *x_s, const Src &src, int64_t K,
                                         const float *const *xs, int n_cols, const Sink &sink) {
    using G = q_seg<T>;
    const int warp = threadIdx.x / ST_GPU_WARP_SIZE, lane = threadIdx.x % ST_GPU_WARP_SIZE;
    const int rows = src.rows;
    const int64_t n_blocks = K / qfmt<T>::QK, n_chunks = K / qfmt<T>::CHUNK;
    const int n_seg = (int)((n_chunks + G::CHUNKS - 1) / G::CHUNKS);
    const int64_t gw = (int64_t)blockIdx.x * QMM_WARPS + warp, n_warps = (int64_t)gridDim.x * QMM_WARPS;
    // the bytes of a row's segments: all but the last are BLOCKS whole blocks
    const int seg_bytes = G::BLOCKS * qfmt<T>::BYTES;
    const int last_bytes = (int)(n_blocks - (int64_t)(n_seg - 1) * G::BLOCKS) * qfmt<T>::BYTES;
    // `in` is the next item to copy, `at` the one to reduce (counters, not divisions: a
    // 64-bit division is a long software routine). seg[i]: the bytes of the item i items
    // after `at`, as issued (NULL past the rows), so that `at` does not form its row again.
    q_cursor in = {gw, 0, 0, 0}, at = in;
    const uint8_t *seg[QMM_STAGES];
    auto issue = [&](const q_cursor &c) { // (an empty group past the end keeps cp.async's count)
        const uint8_t *row = c.g < src.n_groups ? src.row(c.g, c.r) : NULL;
        const uint8_t *p = row ? q_seg_bytes<T>(row, c.s) : NULL;
        if (p) q_seg_copy<T>(stages + c.stage * G::WINDOW, p, c.s == n_seg - 1 ? last_bytes : seg_bytes);
        q_copy_commit();
        return p;
    };
#pragma unroll
    for (int i = 0; i < QMM_STAGES - 1; i++) {
        seg[i] = issue(in);
        in.next(n_seg, rows, n_warps);
    }
    if constexpr (XS) q_stage_x<qfmt<T>::CHUNK, XV>(x_s, xs[0], K);
    float acc[NC], mine[NC]; // mine: lane r < rows keeps row r of the group
#pragma unroll
    for (int c = 0; c < NC; c++) mine[c] = 0.0f;
    for (; at.g < src.n_groups; at.next(n_seg, rows, n_warps)) {
        seg[QMM_STAGES - 1] = issue(in);
        in.next(n_seg, rows, n_warps);
        q_copy_wait<QMM_STAGES - 1>();
        st_gpu_syncwarp(); // every lane's copies of item `at` are visible to the warp
        if (at.s == 0) {
#pragma unroll
            for (int c = 0; c < NC; c++) acc[c] = 0.0f;
        }
        const uint8_t *p = seg[0];
#pragma unroll
        for (int i = 0; i < QMM_STAGES - 1; i++) seg[i] = seg[i + 1];
        if (p) {
            const uintptr_t phase = (uintptr_t)p % 16;
            const int64_t c0 = at.s * G::CHUNKS;
            q_seg_dot<T, NC, XV, XS>(stages + at.stage * G::WINDOW + phase, c0 * qfmt<T>::CHUNK,
                                     (int)(n_chunks - c0 < G::CHUNKS ? n_chunks - c0 : G::CHUNKS), xs, n_cols, acc,
                                     x_s);
            if (at.s == n_seg - 1) {
#pragma unroll
                for (int c = 0; c < NC; c++) {
                    const float v = cuda_warp_sum(acc[c]);
                    if (lane == at.r) mine[c] = v;
                }
            }
        }
        if (at.s == n_seg - 1 && at.r == rows - 1) { // the group's results leave
            float v[NC][QMM_GROUP];
#pragma unroll
            for (int c = 0; c < NC; c++)
#pragma unroll
                for (int i = 0; i < QMM_GROUP; i++) v[c][i] = st_gpu_shfl(mine[c], i);
            if (lane == 0) sink(at.g, v);
        }
        st_gpu_syncwarp(); // stage `at` is read: the next issue may overwrite it
    }
    q_copy_wait<0>();
}
template <st_type T, int NC, bool XS, typename Src, typename Sink>
__device__ __forceinline__ void q_walk(uint8_t *stages, float4 *x_s, const Src &src, int64_t K, const float *const *xs,
                                       int n_cols, bool x_vec, const Sink &sink) {
    if (x_vec) q_walk_x<T, NC, true, XS>(stages, x_s, src, K, xs, n_cols, sink);
    else q_walk_x<T, NC, false, XS>(stages, x_s, src, K, xs, n_cols, sink);
}

// The rows of one weight [K, N] at row stride nb1, in groups of `rows`.
struct q_rows_plain {
    const uint8_t *w;
    int64_t nb1, N, n_groups;
    int rows;
    __device__ __forceinline__ const uint8_t *row(int64_t g, int r) const {
        const int64_t n = g * rows + r;
        return n < N ? w + n * nb1 : NULL;
    }
};

// y[:, m] = W x[:, m]; grid y: groups of NC columns. Dynamic shared memory: q_gemv_smem<T>(),
// then for XS (NC = 1) x staged, q_xs_bytes<T>(K).
template <st_type T, int NC, bool XS>
__global__ void __launch_bounds__(QMM_WARPS *ST_GPU_WARP_SIZE, NC == 1 ? q_gemv_min_blocks<T>() : 1)
    q_gemv(const uint8_t *w, int64_t nb1, int64_t K, int64_t N, st_cuda_view x, st_cuda_view y, int64_t M,
           bool x_vec, int rows) {
    extern __shared__ uint4 q_stages[]; // [QMM_WARPS][QMM_STAGES][WINDOW], then XS's x
    uint8_t *stages = (uint8_t *)q_stages + (size_t)(threadIdx.x / ST_GPU_WARP_SIZE) * QMM_STAGES * q_seg<T>::WINDOW;
    float4 *x_s = q_xs_at(q_stages, q_gemv_smem<T>());
    const q_rows_plain src = {w, nb1, N, (N + rows - 1) / rows, rows};
    // a warp without rows leaves, unless the block stages x together (a barrier)
    if (!XS && (int64_t)blockIdx.x * QMM_WARPS + threadIdx.x / ST_GPU_WARP_SIZE >= src.n_groups) return;
    for (int64_t m0 = (int64_t)blockIdx.y * NC; m0 < M; m0 += (int64_t)gridDim.y * NC) {
        const int n_cols = (int)(M - m0 < NC ? M - m0 : NC);
        const float *xs[NC];
#pragma unroll
        for (int c = 0; c < NC; c++) xs[c] = (const float *)cuda_row(x, m0 + (c < n_cols ? c : 0));
        q_walk<T, NC, XS>(stages, x_s, src, K, xs, n_cols, x_vec, [&](int64_t g, const float (&v)[NC][QMM_GROUP]) {
            const int64_t n0 = g * rows;
#pragma unroll
            for (int c = 0; c < NC; c++) {
                if (c >= n_cols) break;
                float *yr = (float *)cuda_row(y, m0 + c) + n0;
                if (rows == QMM_GROUP && n0 + QMM_GROUP <= N && (uintptr_t)yr % 16 == 0) {
                    *(float4 *)yr = make_float4(v[c][0], v[c][1], v[c][2], v[c][3]);
                } else {
#pragma unroll
                    for (int i = 0; i < QMM_GROUP; i++)
                        if (i < rows && n0 + i < N) yr[i] = v[c][i];
                }
            }
        });
    }
}

// ---- a decode step's fused product (st_fused_mul_mat, one column) ---------------------------
//
// After the norm (st_cuda_rms_norm into h, as the composite runs it), one launch for the
// products and what follows them: q, k and v as one space of rows (STORE), gate and up as
// pairs of rows whose results meet in the gated unit (SWIGLU, GEGLU: a group of 2, row 0 of
// gate, row 1 of up), o and down with the residual add and the next product's x * norm_w
// (ADD). Each value rounds as the composite's ops round it (q_gemv's sums, then the add,
// the multiply, the gated unit), so the fused product gives the composite's bits.

struct q_fused_args {
    const uint8_t *w[3];
    int64_t nb1[3];
    int64_t n_end[3];      // STORE: the rows of w[0..i] together; otherwise n_end[0] = N_0
    float *y[3];           // STORE
    float *out;            // ADD, SWIGLU, GEGLU: [N_0]
    float *next_h;         // ADD, optional: [N_0] out * next_norm_w
    const float *next_norm_w;
    int64_t n_groups;
    int rows;              // 2 for a gated unit, else 1
};

// Element i < 3 of a kernel argument's array, chosen without indexing it (an index known
// only at run time would copy the arguments to local memory).
template <typename V> __device__ __forceinline__ V q_pick(const V (&v)[3], int i) {
    return i == 0 ? v[0] : i == 1 ? v[1] : v[2];
}

// STORE's weight of row g of the space of rows, and the row's index in it.
__device__ __forceinline__ int q_fused_weight(const q_fused_args &a, int64_t g, int64_t *n) {
    const int i = g < a.n_end[0] ? 0 : g < a.n_end[1] ? 1 : 2;
    *n = g - (i == 0 ? 0 : i == 1 ? a.n_end[0] : a.n_end[1]);
    return i;
}

// The walk's source of rows: the arguments' n_groups and rows, and row(g, r).
template <int EPI> struct q_rows_fused : q_fused_args {
    __device__ __forceinline__ const uint8_t *row(int64_t g, int r) const {
        if (EPI == ST_FUSED_EPILOGUE_STORE) {
            int64_t n;
            const int i = q_fused_weight(*this, g, &n);
            return q_pick(w, i) + n * q_pick(nb1, i);
        }
        return q_pick(w, r) + g * q_pick(nb1, r); // ADD: r = 0; a gated unit: gate, then up
    }
};

template <st_type T, int EPI, bool XS>
__global__ void __launch_bounds__(QMM_WARPS *ST_GPU_WARP_SIZE, q_gemv_min_blocks<T>())
    q_gemv_fused(q_fused_args a, int64_t K, const float *x, bool x_vec) {
    extern __shared__ uint4 q_stages[]; // [QMM_WARPS][QMM_STAGES][WINDOW], then XS's x
    uint8_t *stages = (uint8_t *)q_stages + (size_t)(threadIdx.x / ST_GPU_WARP_SIZE) * QMM_STAGES * q_seg<T>::WINDOW;
    const q_rows_fused<EPI> src = {a};
    const float *xs[1] = {x};
    q_walk<T, 1, XS>(stages, q_xs_at(q_stages, q_gemv_smem<T>()), src, K, xs, 1, x_vec,
                     [&](int64_t g, const float (&v)[1][QMM_GROUP]) {
        if (EPI == ST_FUSED_EPILOGUE_STORE) {
            int64_t n;
            const int i = q_fused_weight(a, g, &n);
            q_pick(a.y, i)[n] = v[0][0];
        } else if (EPI == ST_FUSED_EPILOGUE_ADD) {
            const float o = __fadd_rn(a.out[g], v[0][0]);
            a.out[g] = o;
            if (a.next_h) a.next_h[g] = __fmul_rn(o, a.next_norm_w[g]);
        } else {
            const float act = EPI == ST_FUSED_EPILOGUE_GEGLU ? cuda_gelu_tanh_f32(v[0][0]) : cuda_silu_f32(v[0][0]);
            a.out[g] = __fmul_rn(act, v[0][1]);
        }
    });
}

// ---- host side ------------------------------------------------------------------------------

struct q_launch_gemv {
    template <st_type T>
    static void run(st_cuda_ctx *c, const st_tensor *dst, const st_tensor *w, const st_tensor *x, int64_t M) {
        const int64_t K = w->ne[0], N = w->ne[1];
        const unsigned int threads = QMM_WARPS * ST_GPU_WARP_SIZE;
        const uint8_t *wd = (const uint8_t *)w->data;
        const size_t smem = q_gemv_smem<T>();
        // One wave of blocks, their warps walking groups of rows, for every NC columns. A
        // group is QMM_GROUP rows when every warp of the wave gets one; a product with fewer
        // rows (k and v of a decode step: 512) gives each warp one row at a time, so that
        // more warps read at once.
        const unsigned int wave = (unsigned int)c->sm_count * (M == 1 ? q_gemv_min_blocks<T>() : 4);
        const int rows = (N + QMM_GROUP - 1) / QMM_GROUP >= (int64_t)wave * QMM_WARPS ? QMM_GROUP : 1;
        const unsigned int blocks = cuda_blocks(N, QMM_WARPS * rows), grid_x = blocks < wave ? blocks : wave;
        if (M == 1) {
            const size_t xs = q_xs_bytes<T>(K); // 0: x stays in global memory
            const auto kernel = xs ? q_gemv<T, 1, true> : q_gemv<T, 1, false>;
            kernel<<<grid_x, threads, smem + xs, c->stream>>>(wd, (int64_t)w->nb[1], K, N, cuda_view(x), cuda_view(dst),
                                                             M, cuda_rows_aligned16(x), rows);
        } else {
            const dim3 grid(grid_x, cuda_grid_y((M + QMM_MAX_COLS - 1) / QMM_MAX_COLS));
            q_gemv<T, QMM_MAX_COLS, false><<<grid, threads, smem, c->stream>>>(
                wd, (int64_t)w->nb[1], K, N, cuda_view(x), cuda_view(dst), M, cuda_rows_aligned16(x), rows);
        }
    }
};

// y [N, M] = W x on the decode matvec (M < ST_CUDA_QGEMM_MIN_M; a checked weight).
st_status st_cuda_gemv_quant(st_cuda_ctx *c, st_tensor *dst, const st_tensor *w, const st_tensor *x, st_error *err) {
    q_dispatch<q_launch_gemv>(w->type, c, dst, w, x, cuda_nrows(x));
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}

struct q_launch_fused {
    template <st_type T, bool XS>
    static void launch(st_cuda_ctx *c, const q_fused_args &a, int epi, int64_t K, const float *x, bool x_vec,
                       size_t smem) {
        const unsigned int wave = (unsigned int)c->sm_count * q_gemv_min_blocks<T>();
        const unsigned int blocks = cuda_blocks(a.n_groups, QMM_WARPS), grid = blocks < wave ? blocks : wave;
        const unsigned int threads = QMM_WARPS * ST_GPU_WARP_SIZE;
        switch (epi) {
        case ST_FUSED_EPILOGUE_STORE:
            q_gemv_fused<T, ST_FUSED_EPILOGUE_STORE, XS><<<grid, threads, smem, c->stream>>>(a, K, x, x_vec);
            break;
        case ST_FUSED_EPILOGUE_ADD:
            q_gemv_fused<T, ST_FUSED_EPILOGUE_ADD, XS><<<grid, threads, smem, c->stream>>>(a, K, x, x_vec);
            break;
        case ST_FUSED_EPILOGUE_SWIGLU:
            q_gemv_fused<T, ST_FUSED_EPILOGUE_SWIGLU, XS><<<grid, threads, smem, c->stream>>>(a, K, x, x_vec);
            break;
        default:
            q_gemv_fused<T, ST_FUSED_EPILOGUE_GEGLU, XS><<<grid, threads, smem, c->stream>>>(a, K, x, x_vec);
            break;
        }
    }
    template <st_type T>
    static void run(st_cuda_ctx *c, const q_fused_args &a, int epi, int64_t K, const float *x, bool x_vec) {
        const size_t xs = q_xs_bytes<T>(K);
        if (xs) launch<T, true>(c, a, epi, K, x, x_vec, q_gemv_smem<T>() + xs);
        else launch<T, false>(c, a, epi, K, x, x_vec, q_gemv_smem<T>());
    }
};

// A one-column row of F32 values: [n] at data, contiguous.
static bool q_is_f32_vector(const st_tensor *t, int64_t n) {
    return t && cuda_is_f32_rows(t) && t->ne[0] == n && cuda_nrows(t) == 1;
}

// Whether st_cuda_mul_mat_fused_quant runs op: one column (a decode step's product) on
// quantized weights of one type and K, more than a lone stored product (that one, an
// output head, is the norm and mul_mat: q_gemv's groups of 4 leave in 16-byte stores).
static bool q_fused_takes(const st_fused_mul_mat *op) {
    const int64_t K = op->x->ne[0];
    const st_type t = op->w[0]->type;
    if (!q_is_f32_vector(op->x, K) || K < 1) return false;
    if (op->norm_w && !q_is_f32_vector(op->h, K)) return false;
    int a = 0;
    if (!q_dispatch<q_align_of>(t, &a)) return false; // (also: not a float weight)
    for (int i = 0; i < op->n_w; i++) {
        const st_tensor *w = op->w[i];
        if (w->type != t || w->ne[0] != K || w->ne[2] != 1 || w->ne[3] != 1) return false;
    }
    const int64_t N0 = op->w[0]->ne[1];
    switch (op->epilogue) {
    case ST_FUSED_EPILOGUE_STORE:
        if (op->n_w == 1) return false;
        for (int i = 0; i < op->n_w; i++)
            if (!q_is_f32_vector(op->y[i], op->w[i]->ne[1])) return false;
        return true;
    case ST_FUSED_EPILOGUE_ADD:
        return op->n_w == 1 && q_is_f32_vector(op->out, N0) &&
               (!op->next_h || (q_is_f32_vector(op->next_h, N0) && q_is_f32_vector(op->next_norm_w, N0)));
    default: // a gated unit
        return op->n_w == 2 && op->w[1]->ne[1] == N0 && q_is_f32_vector(op->out, N0);
    }
}

st_status st_cuda_mul_mat_fused_quant(st_backend *b, const st_fused_mul_mat *op, bool *ran, st_error *err) {
    *ran = false;
    if (!q_fused_takes(op)) return ST_OK;
    st_cuda_ctx *c = cuda_ctx(b);
    for (int i = 0; i < op->n_w; i++) {
        const st_status s = q_check_weight(op->w[i], "mul_mat_fused", err);
        if (s != ST_OK) return s;
    }
    const st_tensor *in = op->x;
    if (op->norm_w) { // h = rmsnorm(x) * norm_w, as the composite forms it
        const st_status s = st_cuda_rms_norm(b, op->h, op->x, op->norm_w, op->eps, err);
        if (s != ST_OK) return s;
        in = op->h;
    }
    q_fused_args a = {};
    const bool glu = op->epilogue == ST_FUSED_EPILOGUE_SWIGLU || op->epilogue == ST_FUSED_EPILOGUE_GEGLU;
    int64_t rows_so_far = 0;
    for (int i = 0; i < op->n_w; i++) {
        a.w[i] = (const uint8_t *)op->w[i]->data;
        a.nb1[i] = (int64_t)op->w[i]->nb[1];
        rows_so_far += op->w[i]->ne[1];
        a.n_end[i] = rows_so_far;
        if (op->epilogue == ST_FUSED_EPILOGUE_STORE) a.y[i] = (float *)op->y[i]->data;
    }
    if (op->epilogue != ST_FUSED_EPILOGUE_STORE) a.out = (float *)op->out->data;
    if (op->next_h) {
        a.next_h = (float *)op->next_h->data;
        a.next_norm_w = (const float *)op->next_norm_w->data;
    }
    a.rows = glu ? 2 : 1;
    a.n_groups = op->epilogue == ST_FUSED_EPILOGUE_STORE ? rows_so_far : op->w[0]->ne[1];
    if (a.n_groups == 0) {
        *ran = true;
        return ST_OK;
    }
    q_dispatch<q_launch_fused>(op->w[0]->type, c, a, (int)op->epilogue, op->x->ne[0], (const float *)in->data,
                               cuda_aligned16(in->data));
    ST_GPU_CHECK_LAUNCH();
    *ran = true;
    return ST_OK;
}
