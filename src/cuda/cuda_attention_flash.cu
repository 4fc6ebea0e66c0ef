// Prefill attention over an F16 KV cache on tensor cores (flash attention, FA2-style).
//
// Query rows. A block serves one kv head and FLASH_BM = 64 query ROWS of its GQA group:
// row r = m * group + g is token m, query head kv_head * group + g, so the group's heads
// share every K/V tile the block loads (group-times less K/V traffic than one head per
// block). Rows need not be consecutive positions: each row has its own visible range
// [lo, hi] from positions[m]; the block visits the union of its rows' ranges in tiles of
// BN keys and masks per row only in tiles that some row does not see entirely.
//
// Work split. 4 warps; warp w owns rows 16w .. 16w+15 for the whole key range:
//   S[16 x BN]   = Q[16 x D] K^T          mma.sync m16n8k16, f16 inputs, f32 accumulation
//   online softmax on S in registers (row max over the quad of lanes sharing a row)
//   O[16 x D]   += P[16 x BN] V[BN x D]   P converted from the S accumulators to f16
// Q (converted from f32 to f16 once) and double-buffered K/V tiles live in shared memory;
// K/V tiles arrive by cp.async while the previous tile is computed. Shared rows are padded
// by 16 bytes so that the 8 row addresses of every ldmatrix fall in distinct banks.
//
//   head_dim D   BN   shared memory                registers: O + S (f32)
//   64           64   (64 + 4*64) * 72 * 2 = 45 KiB    32 + 32
//   128          64   (64 + 4*64) * 136 * 2 = 85 KiB   64 + 32
//   256          32   (64 + 4*32) * 264 * 2 = 99 KiB   128 + 16
//
// Split keys. A grid too small to fill the SMs (a short prompt, or few kv heads: gemma3's
// one) splits each block's key range over n_split blocks (grid z): block z walks tiles
// [z * per, min((z + 1) * per, n_tiles)) of its rows' union, per = ceil(n_tiles / n_split),
// and writes its rows' partial result (running max m and sum l in the base-2 domain, the
// unnormalised O) to the partials; attn_flash_combine_kernel then forms each output row as
// sum_z 2^(m_z - m) O_z / sum_z 2^(m_z - m) l_z. n_split depends on the shapes and the
// device's SM count only (flash_splits), never on the positions or n_kv.
//
// Precision: q and P are rounded to f16 (unit roundoff u = 2^-11); K and V are f16 in the
// cache already; products and sums are f32. See TOL_ATTN_FLASH in tests/gpu/test_cuda_ops.c.
//
// Architecture-specific (inline PTX: mma.sync, ldmatrix, cp.async, sm_80+). Without
// ST_ATTN_HAVE_MMA (STRIDE_ATTN_PORTABLE, HIP) this file only says "not supported" and the
// dispatcher takes the portable kernels.
#include <string.h>

#include "cuda/cuda_attention.cuh"

#if ST_ATTN_HAVE_MMA

#define FLASH_BM 64
#define FLASH_THREADS 128
#define FLASH_WARPS (FLASH_THREADS / ST_GPU_WARP_SIZE)

template <int D> struct flash_cfg {
    static constexpr int BN = D <= 128 ? 64 : 32; // keys per tile
    // blocks an SM holds, as the registers are allocated for: 64 rows of head_dim 64 in
    // under 168 registers a thread (3 x 45 KiB of shared memory); the others as they come
    static constexpr int MIN_BLOCKS = D == 64 ? 3 : 1;
    static constexpr int LDS = D + 8;             // halves per shared row (+16 bytes)
    static constexpr size_t smem = (size_t)(FLASH_BM + 4 * BN) * LDS * sizeof(__half);
};

static_assert(FLASH_BM == 16 * FLASH_WARPS, "a warp owns 16 query rows");

__device__ __forceinline__ uint32_t flash_smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

// Four 8x8 b16 matrices; lane l gives the address of row l % 8 of matrix l / 8 and gets,
// of matrix i, row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1 in register i.
__device__ __forceinline__ void flash_ldsm_x4(uint32_t r[4], const __half *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(flash_smem_addr(p)));
}

// The same, transposed: of matrix i, elements (row 2 (l % 4), col l / 4) and (row 2 (l % 4) + 1, col l / 4).
__device__ __forceinline__ void flash_ldsm_x4_trans(uint32_t r[4], const __half *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(flash_smem_addr(p)));
}

// c[16x8] += a[16x16] b[16x8]; g = lane / 4, t = lane % 4:
//   a: {(g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)}   b: {(k 2t..2t+1, n g), (k 2t+8.., n g)}
//   c: {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}
__device__ __forceinline__ void flash_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16 bytes global -> shared, asynchronously; zeros instead when !valid (src is not read).
__device__ __forceinline__ void flash_cp_async16(__half *dst, const char *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(flash_smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void flash_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void flash_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ uint32_t flash_pack_half2(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi); // lo in the low 16 bits: the lower column index
    return *reinterpret_cast<uint32_t *>(&h);
}

// Where split z of a launch keeps the partial result of query m, head h (n_split > 1; one
// run of M queries of n_head heads): O at part_o + slot * D, (m, l) at part_ml[slot].
__device__ __forceinline__ int64_t flash_part_slot(int z, int64_t m, int64_t h, int64_t M, int64_t n_head) {
    return ((int64_t)z * M + m) * n_head + h;
}

// PAGED: the queries are a run of one sequence of a paged cache, its keys where pg's row
// of the block table says (attn_pages); or, with runs.n_runs > 0, several runs, the grid's
// row tiles theirs in turn (attn_runs). n_split > 1 (one run only): block z of gridDim.z
// takes its share of the keys and writes partials (the header).
template <int D, bool PAGED>
__global__ void __launch_bounds__(FLASH_THREADS, flash_cfg<D>::MIN_BLOCKS)
    attn_flash_f16_kernel(st_cuda_view dst, st_cuda_view q, st_cuda_view kc, st_cuda_view vc,
                          bool q_vec, const int32_t *__restrict__ positions, int64_t n_kv, int32_t window,
                          float scale, float softcap, const attn_pages pg, const attn_runs runs, int n_split,
                          float *__restrict__ part_o, float2 *__restrict__ part_ml) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap(); // the host launches this only on sm_80+
#else
    constexpr int BN = flash_cfg<D>::BN, LDS = flash_cfg<D>::LDS, BM = FLASH_BM;
    constexpr int CHUNKS = D / 8; // 16-byte pieces of a cache row
    static_assert(BN * CHUNKS % FLASH_THREADS == 0, "a tile is whole 16-byte pieces per thread");
    extern __shared__ __align__(16) unsigned char flash_smem[];
    __half *Qs = (__half *)flash_smem; // [BM][LDS] this block's query rows, f16
    __half *Ks = Qs + BM * LDS;        // [2][BN][LDS] key tiles
    __half *Vs = Ks + 2 * BN * LDS;    // [2][BN][LDS] value tiles
    __shared__ int s_lo, s_hi, s_maxlo, s_minhi;

    const int tid = threadIdx.x, warp = tid / ST_GPU_WARP_SIZE, lane = tid % ST_GPU_WARP_SIZE;
    const int g = lane >> 2, t4 = lane & 3;
    const int group = (int)(q.ne1 / kc.ne1);
    const int64_t kvh = blockIdx.y;
    int tile = (int)(gridDim.x - 1 - blockIdx.x); // the last rows (longest causal ranges) start first
    // this block's run: its first query m0, its rows R (queries x group), its table row
    int64_t m0 = 0;
    int R = (int)q.ne2 * group;
    attn_pages pr = pg;
    if (runs.dev) { // the run whose tiles hold this one; none: a block past every run
        int i = 0, rows = 0;
        for (; i < runs.n_runs; i++) {
            rows = runs.dev[3 * i + 1] * group;
            const int tiles = (rows + BM - 1) / BM;
            if (tile < tiles) break;
            tile -= tiles;
        }
        if (i == runs.n_runs) return;
        m0 = runs.dev[3 * i], R = rows, pr.row = runs.dev[3 * i + 2];
    } else if (runs.n_runs > 0) {
        int i = 0;
        while (i + 1 < runs.n_runs && tile >= runs.first_tile[i + 1]) i++;
        tile -= runs.first_tile[i];
        m0 = runs.m0[i], R = runs.n[i] * group, pr.row = runs.row[i];
    }
    const int r0 = tile * BM;

    // The union of the rows' ranges [s_lo, s_hi], and the intersection [s_maxlo, s_minhi]
    // (a tile inside it needs no mask). An empty row counts as [1, 0] for the latter.
    if (tid == 0) {
        s_lo = INT_MAX;
        s_hi = INT_MIN;
        s_maxlo = INT_MIN;
        s_minhi = INT_MAX;
    }
    __syncthreads();
    if (tid < BM && r0 + tid < R) {
        int lo, hi;
        attn_visible_range(positions[m0 + (r0 + tid) / group], n_kv, window, &lo, &hi);
        if (hi >= lo) {
            atomicMin(&s_lo, lo);
            atomicMax(&s_hi, hi);
        } else {
            lo = 1;
            hi = 0;
        }
        atomicMax(&s_maxlo, lo);
        atomicMin(&s_minhi, hi);
    }
    // Q rows to shared memory as f16, 4 floats a piece: QV pieces a thread, loaded QB at a
    // time before their stores, so that a thread has QB loads in flight (16-byte loads
    // where q_vec says q's rows allow them)
    constexpr int QV = BM * D / 4 / FLASH_THREADS, QB = D < 256 ? 8 : 4; // QV 8, 16, 32 for D 64, 128, 256
    static_assert(QV % QB == 0, "whole batches of pieces");
#pragma unroll
    for (int u0 = 0; u0 < QV; u0 += QB) {
        float4 x[QB];
#pragma unroll
        for (int u = 0; u < QB; u++) {
            const int i = tid + (u0 + u) * FLASH_THREADS, r = i / (D / 4), d = 4 * (i % (D / 4));
            x[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f); // rows past R: zeros, computed and never written
            if (r0 + r < R) {
                const int64_t m = m0 + (r0 + r) / group, h = kvh * group + (r0 + r) % group;
                const float *src = (const float *)(q.data + h * q.nb1 + m * q.nb2) + d;
                x[u] = q_vec ? *(const float4 *)src : make_float4(src[0], src[1], src[2], src[3]);
            }
        }
#pragma unroll
        for (int u = 0; u < QB; u++) {
            const int i = tid + (u0 + u) * FLASH_THREADS, r = i / (D / 4), d = 4 * (i % (D / 4));
            *(uint2 *)(Qs + r * LDS + d) =
                make_uint2(flash_pack_half2(x[u].x, x[u].y), flash_pack_half2(x[u].z, x[u].w));
        }
    }
    // this thread's rows: g and g + 8 of its warp's 16
    int lo_i[2], hi_i[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int r = r0 + warp * 16 + g + 8 * i;
        lo_i[i] = 1;
        hi_i[i] = 0;
        if (r < R) {
            attn_visible_range(positions[m0 + r / group], n_kv, window, &lo_i[i], &hi_i[i]);
            if (hi_i[i] < lo_i[i]) lo_i[i] = 1, hi_i[i] = 0;
        }
    }
    __syncthreads();
    const int Lb = s_lo, Hb = s_hi, maxlo = s_maxlo, minhi = s_minhi;
    const int n_tiles = Hb >= Lb ? (Hb - Lb) / BN + 1 : 0;
    int j_begin = 0, j_end = n_tiles; // this block's tiles of the union
    if (n_split > 1) {
        const int per = (n_tiles + n_split - 1) / n_split;
        j_begin = min(n_tiles, (int)blockIdx.z * per);
        j_end = min(n_tiles, j_begin + per);
    }

    const char *k_head = kc.data + kvh * kc.nb1, *v_head = vc.data + kvh * vc.nb1;
    const int32_t *blocks = PAGED ? attn_blocks(pr, 0) : NULL;
    // keys Lb + j*BN .. +BN-1 into buffer buf; keys past Hb are zeros (never NaN from
    // unwritten cache memory: 0 * NaN would poison P.V)
    auto load_tile = [&](int j, int buf) {
        const int t0 = Lb + j * BN;
        __half *kd = Ks + buf * BN * LDS, *vd = Vs + buf * BN * LDS;
#pragma unroll
        for (int u = 0; u < BN * CHUNKS / FLASH_THREADS; u++) {
            const int i = tid + u * FLASH_THREADS;
            const int key = i / CHUNKS, ch = i % CHUNKS, t = t0 + key;
            const bool ok = t <= Hb;
            const int64_t row = PAGED ? attn_slot(blocks, ok ? t : Lb) : (ok ? t : Lb);
            flash_cp_async16(kd + key * LDS + ch * 8, k_head + row * kc.nb2 + ch * 16, ok);
            flash_cp_async16(vd + key * LDS + ch * 8, v_head + row * vc.nb2 + ch * 16, ok);
        }
    };

    float O[D / 8][4]; // [16 rows x D] of this warp: dims 8j .. 8j+7 in O[j]
#pragma unroll
    for (int j = 0; j < D / 8; j++) O[j][0] = O[j][1] = O[j][2] = O[j][3] = 0.0f;
    float m_i[2] = {-INFINITY, -INFINITY}, l_i[2] = {0.0f, 0.0f}; // l: this thread's columns only
    const float scale_log2 = scale * ST_ATTN_LOG2E;
    const __half *q_warp = Qs + warp * 16 * LDS;

    if (j_begin < j_end) load_tile(j_begin, 0);
    flash_cp_async_commit();
    for (int j = j_begin; j < j_end; j++) {
        const int buf = (j - j_begin) & 1;
        if (j + 1 < j_end) load_tile(j + 1, buf ^ 1); // its buffer was released by the last barrier
        flash_cp_async_commit();
        flash_cp_async_wait<1>(); // every group but the newest: tile j has landed
        __syncthreads();
        const __half *kb = Ks + buf * BN * LDS, *vb = Vs + buf * BN * LDS;
        const int t0 = Lb + j * BN;

        float S[BN / 8][4]; // [16 rows x BN keys]: keys 8n .. 8n+7 in S[n]
#pragma unroll
        for (int n = 0; n < BN / 8; n++) S[n][0] = S[n][1] = S[n][2] = S[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t a[4];
            flash_ldsm_x4(a, q_warp + ((lane & 7) + ((lane >> 3) & 1) * 8) * LDS + kk * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int nn = 0; nn < BN / 16; nn++) {
                uint32_t bk[4]; // b0, b1 of keys 16nn..+7, then of keys 16nn+8..+15
                flash_ldsm_x4(bk, kb + (nn * 16 + (lane & 7) + (lane >> 4) * 8) * LDS + kk * 16 + ((lane >> 3) & 1) * 8);
                flash_mma(S[2 * nn], a, bk[0], bk[1]);
                flash_mma(S[2 * nn + 1], a, bk[2], bk[3]);
            }
        }

        const bool full = t0 >= maxlo && t0 + BN - 1 <= minhi; // every row sees every key of the tile
#pragma unroll
        for (int n = 0; n < BN / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float x = softcap > 0.0f ? attn_score_log2(S[n][e], scale, softcap) : S[n][e] * scale_log2;
                if (!full) {
                    const int t = t0 + n * 8 + 2 * t4 + (e & 1), i = e >> 1;
                    if (t < lo_i[i] || t > hi_i[i]) x = -INFINITY;
                }
                S[n][e] = x;
            }

        // online softmax of rows g (e = 0, 1) and g + 8 (e = 2, 3)
#pragma unroll
        for (int i = 0; i < 2; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int n = 0; n < BN / 8; n++) mx = fmaxf(mx, fmaxf(S[n][2 * i], S[n][2 * i + 1]));
            mx = fmaxf(mx, st_gpu_shfl_xor(mx, 1)); // the quad holding the row
            mx = fmaxf(mx, st_gpu_shfl_xor(mx, 2));
            const float m_new = fmaxf(m_i[i], mx);
            const float m_use = m_new == -INFINITY ? 0.0f : m_new; // nothing seen yet: exp2(-inf) = 0
            const float alpha = exp2f(m_i[i] - m_use);
            m_i[i] = m_new;
            float sum = 0.0f;
#pragma unroll
            for (int n = 0; n < BN / 8; n++) {
                S[n][2 * i] = exp2f(S[n][2 * i] - m_use);
                S[n][2 * i + 1] = exp2f(S[n][2 * i + 1] - m_use);
                sum += S[n][2 * i] + S[n][2 * i + 1];
            }
            l_i[i] = l_i[i] * alpha + sum;
#pragma unroll
            for (int d = 0; d < D / 8; d++) {
                O[d][2 * i] *= alpha;
                O[d][2 * i + 1] *= alpha;
            }
        }

        // O += P V: the accumulators of key groups 2kk and 2kk+1 are the A fragment of
        // keys 16kk .. 16kk+15
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            uint32_t a[4];
            a[0] = flash_pack_half2(S[2 * kk][0], S[2 * kk][1]);
            a[1] = flash_pack_half2(S[2 * kk][2], S[2 * kk][3]);
            a[2] = flash_pack_half2(S[2 * kk + 1][0], S[2 * kk + 1][1]);
            a[3] = flash_pack_half2(S[2 * kk + 1][2], S[2 * kk + 1][3]);
#pragma unroll
            for (int dn = 0; dn < D / 16; dn++) {
                uint32_t bv[4]; // b0, b1 of dims 16dn..+7, then of dims 16dn+8..+15
                flash_ldsm_x4_trans(bv, vb + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LDS + dn * 16 +
                                            (lane >> 4) * 8);
                flash_mma(O[2 * dn], a, bv[0], bv[1]);
                flash_mma(O[2 * dn + 1], a, bv[2], bv[3]);
            }
        }
        __syncthreads(); // buffer buf is refilled by the load issued in the next iteration
    }

#pragma unroll
    for (int i = 0; i < 2; i++) {
        float l = l_i[i];
        l += st_gpu_shfl_xor(l, 1);
        l += st_gpu_shfl_xor(l, 2);
        const int r = r0 + warp * 16 + g + 8 * i;
        if (r >= R) continue;
        const int64_t m = m0 + r / group, h = kvh * group + r % group;
        if (n_split > 1) { // the partial: (m, l) always; O where this block walked keys (else zeros, unread)
            const int64_t slot = flash_part_slot(blockIdx.z, m, h, q.ne2, q.ne1);
            if (t4 == 0) part_ml[slot] = make_float2(m_i[i], l);
            if (j_begin < j_end) {
                float *po = part_o + slot * D;
#pragma unroll
                for (int d = 0; d < D / 8; d++)
                    *(float2 *)(po + d * 8 + 2 * t4) = make_float2(O[d][2 * i], O[d][2 * i + 1]);
            }
            continue;
        }
        float *out = (float *)(dst.data + h * dst.nb1 + m * dst.nb2);
#pragma unroll
        for (int d = 0; d < D / 8; d++) {
            out[d * 8 + 2 * t4] = l > 0.0f ? O[d][2 * i] / l : 0.0f;
            out[d * 8 + 2 * t4 + 1] = l > 0.0f ? O[d][2 * i + 1] / l : 0.0f;
        }
    }
#endif
}

// One warp per output row (m, h) of a split launch: the splits' partials weighted by
// 2^(m_z - max m_z); a split whose rows saw no key (l = 0, m = -inf) is skipped, its O
// unread. A row that saw nothing at all gets zeros, as unsplit.
#define FLASH_COMBINE_THREADS 128
template <int D>
__global__ void __launch_bounds__(FLASH_COMBINE_THREADS)
    attn_flash_combine_kernel(st_cuda_view dst, int n_split, const float *__restrict__ part_o,
                              const float2 *__restrict__ part_ml) {
    const int warps = FLASH_COMBINE_THREADS / ST_GPU_WARP_SIZE, lane = threadIdx.x % ST_GPU_WARP_SIZE;
    const int64_t n_head = dst.ne1, M = dst.ne2;
    const int64_t row = (int64_t)blockIdx.x * warps + threadIdx.x / ST_GPU_WARP_SIZE; // m * n_head + h
    if (row >= M * n_head) return;
    const int64_t m = row / n_head, h = row % n_head;
    float mx = -INFINITY;
    for (int z = 0; z < n_split; z++) {
        const float2 ml = part_ml[flash_part_slot(z, m, h, M, n_head)];
        if (ml.y > 0.0f) mx = fmaxf(mx, ml.x);
    }
    float acc[D / ST_GPU_WARP_SIZE], l = 0.0f;
#pragma unroll
    for (int k = 0; k < D / ST_GPU_WARP_SIZE; k++) acc[k] = 0.0f;
    for (int z = 0; z < n_split; z++) {
        const int64_t slot = flash_part_slot(z, m, h, M, n_head);
        const float2 ml = part_ml[slot];
        if (!(ml.y > 0.0f)) continue;
        const float w = exp2f(ml.x - mx);
        l = fmaf(w, ml.y, l);
        const float *po = part_o + slot * D;
#pragma unroll
        for (int k = 0; k < D / ST_GPU_WARP_SIZE; k++) acc[k] = fmaf(w, po[lane + k * ST_GPU_WARP_SIZE], acc[k]);
    }
    float *out = (float *)(dst.data + h * dst.nb1 + m * dst.nb2);
#pragma unroll
    for (int k = 0; k < D / ST_GPU_WARP_SIZE; k++) out[lane + k * ST_GPU_WARP_SIZE] = l > 0.0f ? acc[k] / l : 0.0f;
}

// The blocks a launch of `blocks` blocks splits each block's keys over: the tuning's
// flash_split, else as many as give every SM one block (at most CUDA_FLASH_MAX_SPLITS). A
// block keeps an SM busy enough alone: more blocks an SM (the split of a grid that has
// one an SM already) cost more in partials than they gain; fewer blocks than SMs leave
// SMs idle (gemma3's one kv head: 32 blocks for a 512-token ubatch, split 4 ways).
static int flash_splits(const st_cuda_ctx *c, int64_t blocks) {
    if (c->tune.flash_split > 0) return c->tune.flash_split;
    const int64_t n = blocks > 0 ? c->sm_count / blocks : 1;
    return (int)(n < 1 ? 1 : n > CUDA_FLASH_MAX_SPLITS ? CUDA_FLASH_MAX_SPLITS : n);
}

template <int D, bool PAGED>
static st_status flash_launch(st_cuda_ctx *c, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                              const st_tensor *v_cache, const int32_t *pos, const attn_pages &pg,
                              const attn_runs &runs, const st_attn_params *p, st_error *err) {
    const size_t smem = flash_cfg<D>::smem;
    // more than 48 KiB of dynamic shared memory needs an opt-in, once per kernel and context
    const unsigned int opted = 1u << (D / 64 + (PAGED ? 4 : 0)); // D = 64, 128, 256, paged or not: distinct bits
    if (smem > 48 * 1024 && !(c->flash_smem_opted & opted)) {
        ST_GPU_CHECK(st_gpu_func_set_attribute(attn_flash_f16_kernel<D, PAGED>, st_gpu_func_attr_max_dynamic_smem,
                                               (int)smem));
        c->flash_smem_opted |= opted;
    }
    const int64_t rows = q->ne[2] * (q->ne[1] / k_cache->ne[1]); // M * group per kv head
    const int64_t tiles = runs.dev          ? runs.dev_tiles
                          : runs.n_runs > 0 ? runs.first_tile[runs.n_runs]
                                            : (rows + FLASH_BM - 1) / FLASH_BM;
    if (tiles == 0) return ST_OK;
    // a split needs one run whose queries index the partials (several runs: never split)
    const int n_split = runs.dev || runs.n_runs > 0 ? 1 : flash_splits(c, tiles * k_cache->ne[1]);
    float *part_o = NULL;
    float2 *part_ml = NULL;
    if (n_split > 1) {
        const size_t slots = (size_t)n_split * (size_t)q->ne[2] * (size_t)q->ne[1];
        const st_status s = st_cuda_grow(c, &c->attn_partials, &c->attn_partials_bytes,
                                         slots * (D + 2) * sizeof(float), "attention: the split partials", err);
        if (s != ST_OK) return s;
        part_o = (float *)c->attn_partials;
        part_ml = (float2 *)(part_o + slots * D);
    }
    const dim3 grid((unsigned int)tiles, (unsigned int)k_cache->ne[1], (unsigned int)n_split);
    attn_flash_f16_kernel<D, PAGED><<<grid, FLASH_THREADS, smem, c->stream>>>(
        cuda_view(dst), cuda_view(q), cuda_view(k_cache), cuda_view(v_cache), cuda_rows_aligned16(q), pos,
        p->n_kv, p->window, p->scale, p->softcap, pg, runs, n_split, part_o, part_ml);
    ST_GPU_CHECK_LAUNCH();
    if (n_split == 1) return ST_OK;
    const int64_t out_rows = q->ne[2] * q->ne[1], warps = FLASH_COMBINE_THREADS / ST_GPU_WARP_SIZE;
    attn_flash_combine_kernel<D><<<(unsigned int)((out_rows + warps - 1) / warps), FLASH_COMBINE_THREADS, 0,
                                   c->stream>>>(cuda_view(dst), n_split, part_o, part_ml);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}

bool st_cuda_attn_flash_supported(st_backend *b, const st_tensor *q, const st_tensor *k_cache,
                                  const st_tensor *v_cache) {
    return b->device.compute_major >= 8 && k_cache->type == ST_TYPE_F16 && v_cache->type == ST_TYPE_F16 &&
           attn_fast_head_dim(q->ne[0]) && attn_cache_rows_aligned(k_cache) && attn_cache_rows_aligned(v_cache) &&
           k_cache->ne[1] <= 65535; // grid y
}

// The kernel of q's head_dim (64, 128, 256) over one run (runs.n_runs 0: q's queries, at
// pg's row or contiguous) or several.
static st_status flash_dispatch(st_cuda_ctx *c, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                                const st_tensor *v_cache, const int32_t *pos, const attn_pages *pg,
                                const attn_runs &runs, const st_attn_params *p, st_error *err) {
    const attn_pages none = {};
#define FLASH_CASE(d)                                                                                                \
    case d:                                                                                                        \
        return pg ? flash_launch<d, true>(c, dst, q, k_cache, v_cache, pos, *pg, runs, p, err)                     \
                  : flash_launch<d, false>(c, dst, q, k_cache, v_cache, pos, none, runs, p, err);
    switch (q->ne[0]) {
        FLASH_CASE(64)
        FLASH_CASE(128)
        FLASH_CASE(256)
    default: ST_ASSERT(!"flash attention: head_dim not supported (st_cuda_attn_flash_supported)");
    }
#undef FLASH_CASE
    return ST_OK;
}

st_status st_cuda_attn_flash(st_backend *b, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                             const st_tensor *v_cache, const st_tensor *positions, const attn_pages *pg,
                             const st_attn_params *p, st_error *err) {
    ST_ASSERT(!pg || !pg->seq); // a run of one sequence
    attn_runs one;
    one.n_runs = 0;
    one.dev = NULL;
    return flash_dispatch(cuda_ctx(b), dst, q, k_cache, v_cache, (const int32_t *)positions->data, pg, one, p, err);
}

st_status st_cuda_attn_flash_runs(st_backend *b, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                                  const st_tensor *v_cache, const st_tensor *positions, const attn_pages *pg,
                                  const st_attn_run *runs, int32_t n_runs, const st_attn_params *p, st_error *err) {
    const int64_t group = q->ne[1] / k_cache->ne[1];
    ST_ASSERT(pg && !pg->seq);
    for (int32_t r0 = 0; r0 < n_runs; r0 += ATTN_MAX_RUNS) { // a launch of up to ATTN_MAX_RUNS runs
        attn_runs ar;
        memset(&ar, 0, sizeof(ar));
        ar.n_runs = n_runs - r0 < ATTN_MAX_RUNS ? n_runs - r0 : ATTN_MAX_RUNS;
        for (int i = 0; i < ar.n_runs; i++) {
            const st_attn_run *r = &runs[r0 + i];
            ST_ASSERT(r->m0 + r->n <= q->ne[2] && r->n * group < INT_MAX);
            ar.m0[i] = (int)r->m0, ar.n[i] = (int)r->n, ar.row[i] = r->seq;
            ar.first_tile[i + 1] = ar.first_tile[i] + (int)((r->n * group + FLASH_BM - 1) / FLASH_BM);
        }
        const st_status s =
            flash_dispatch(cuda_ctx(b), dst, q, k_cache, v_cache, (const int32_t *)positions->data, pg, ar, p, err);
        if (s != ST_OK) return s;
    }
    return ST_OK;
}

st_status st_cuda_attn_flash_runs_dev(st_backend *b, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                                      const st_tensor *v_cache, const st_tensor *positions, const attn_pages *pg,
                                      const st_tensor *runs_dev, int64_t n_single, const st_attn_params *p,
                                      st_error *err) {
    ST_ASSERT(pg && !pg->seq && runs_dev->ne[0] == 3 && runs_dev->ne[1] <= INT_MAX);
    ST_ASSERT(n_single >= 0 && n_single < q->ne[2]);
    const int64_t group = q->ne[1] / k_cache->ne[1], rows = (q->ne[2] - n_single) * group;
    ST_ASSERT(rows < INT_MAX);
    attn_runs ar;
    memset(&ar, 0, sizeof(ar));
    ar.n_runs = (int)runs_dev->ne[1];
    ar.dev = (const int32_t *)runs_dev->data;
    // runs of these rows fill their tiles but for at most one partial tile each
    ar.dev_tiles = (int)((rows + FLASH_BM - 1) / FLASH_BM + ar.n_runs);
    return flash_dispatch(cuda_ctx(b), dst, q, k_cache, v_cache, (const int32_t *)positions->data, pg, ar, p, err);
}

#else // !ST_ATTN_HAVE_MMA: the portable build

bool st_cuda_attn_flash_supported(st_backend *b, const st_tensor *q, const st_tensor *k_cache,
                                  const st_tensor *v_cache) {
    (void)b, (void)q, (void)k_cache, (void)v_cache;
    return false;
}

st_status st_cuda_attn_flash(st_backend *b, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                             const st_tensor *v_cache, const st_tensor *positions, const attn_pages *pg,
                             const st_attn_params *p, st_error *err) {
    (void)b, (void)dst, (void)q, (void)k_cache, (void)v_cache, (void)positions, (void)pg, (void)p;
    return st_error_set(err, ST_ERROR_UNSUPPORTED, "flash attention is not in this build (STRIDE_ATTN_PORTABLE)");
}

st_status st_cuda_attn_flash_runs(st_backend *b, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                                  const st_tensor *v_cache, const st_tensor *positions, const attn_pages *pg,
                                  const st_attn_run *runs, int32_t n_runs, const st_attn_params *p, st_error *err) {
    (void)b, (void)dst, (void)q, (void)k_cache, (void)v_cache, (void)positions, (void)pg, (void)runs, (void)n_runs,
        (void)p;
    return st_error_set(err, ST_ERROR_UNSUPPORTED, "flash attention is not in this build (STRIDE_ATTN_PORTABLE)");
}

st_status st_cuda_attn_flash_runs_dev(st_backend *b, st_tensor *dst, const st_tensor *q, const st_tensor *k_cache,
                                      const st_tensor *v_cache, const st_tensor *positions, const attn_pages *pg,
                                      const st_tensor *runs_dev, int64_t n_single, const st_attn_params *p,
                                      st_error *err) {
    (void)b, (void)dst, (void)q, (void)k_cache, (void)v_cache, (void)positions, (void)pg, (void)runs_dev,
        (void)n_single, (void)p;
    return st_error_set(err, ST_ERROR_UNSUPPORTED, "flash attention is not in this build (STRIDE_ATTN_PORTABLE)");
}

#endif
