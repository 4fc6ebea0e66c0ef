// Elementwise ops over strided F32 rows: gated units (SwiGLU, GeGLU; separate gate and up
// or one fused gate_up row), add and mul with broadcast, scale. Arithmetic is written with
// explicit roundings (__fmul_rn, __fadd_rn: no fused multiply-add) in the CPU's order, so
// results differ from the CPU only by the ulps of expf/tanhf.
//
// Launch shape for all of them: grid x over a row's elements (capped; threads stride),
// grid y over rows (capped at 65535; blocks stride).
#include <math.h>

#include "cuda/cuda_common.cuh"

#define EW_THREADS 256
#define EW_MAX_GRID_X 64

static dim3 ew_grid(int64_t ne0, int64_t rows) {
    unsigned int gx = cuda_blocks(ne0, EW_THREADS);
    if (gx == 0) gx = 1;
    return dim3(gx < EW_MAX_GRID_X ? gx : EW_MAX_GRID_X, cuda_grid_y(rows));
}

// ---- gated units ----------------------------------------------------------------------------

// y[i] = act(gate[i]) * up[i]; gate/up rows start gate_off/up_off bytes into their rows
// (the fused form reads both halves of one gate_up row). Rows whose three pointers are
// 16-byte aligned and whose width is a multiple of 4 go four elements a thread (float4
// loads and stores: a thread's element each row is too little to keep memory busy);
// glu_launch sizes the grid for that.
template <bool GELU>
__device__ void glu_impl(st_cuda_view dst, st_cuda_view gate, int64_t gate_off, st_cuda_view up, int64_t up_off) {
    const int64_t n = dst.ne0, rows = dst.ne1 * dst.ne2 * dst.ne3;
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        const float *g = (const float *)(cuda_row(gate, r) + gate_off);
        const float *u = (const float *)(cuda_row(up, r) + up_off);
        float *y = (float *)cuda_row(dst, r);
        if (cuda_vec4_row(g, n) && cuda_vec4_row(u, n) && cuda_vec4_row(y, n)) {
            for (int64_t i = first; i < n / 4; i += step) {
                const float4 a = ((const float4 *)g)[i], b = ((const float4 *)u)[i];
                ((float4 *)y)[i] = make_float4(cuda_glu_one<GELU>(a.x, b.x), cuda_glu_one<GELU>(a.y, b.y),
                                               cuda_glu_one<GELU>(a.z, b.z), cuda_glu_one<GELU>(a.w, b.w));
            }
        } else {
            for (int64_t i = first; i < n; i += step) y[i] = cuda_glu_one<GELU>(g[i], u[i]);
        }
    }
}

__global__ void swiglu_f32(st_cuda_view dst, st_cuda_view gate, int64_t gate_off, st_cuda_view up, int64_t up_off) {
    glu_impl<false>(dst, gate, gate_off, up, up_off);
}
__global__ void geglu_f32(st_cuda_view dst, st_cuda_view gate, int64_t gate_off, st_cuda_view up, int64_t up_off) {
    glu_impl<true>(dst, gate, gate_off, up, up_off);
}

static st_status glu_launch(st_cuda_ctx *c, st_tensor *dst, const st_tensor *gate, int64_t gate_off,
                            const st_tensor *up, int64_t up_off, bool gelu, st_error *err) {
    const int64_t rows = cuda_nrows(dst);
    if (rows == 0 || dst->ne[0] == 0) return ST_OK;
    const dim3 grid = ew_grid(cuda_vec4_threads(dst->ne[0]), rows); // glu_impl's float4s
    if (gelu)
        geglu_f32<<<grid, EW_THREADS, 0, c->stream>>>(cuda_view(dst), cuda_view(gate), gate_off, cuda_view(up), up_off);
    else
        swiglu_f32<<<grid, EW_THREADS, 0, c->stream>>>(cuda_view(dst), cuda_view(gate), gate_off, cuda_view(up), up_off);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}

st_status st_cuda_glu(st_backend *b, st_tensor *dst, const st_tensor *gate, const st_tensor *up, bool gelu,
                      st_error *err) {
    // dst, gate, up F32 [F, ...]; dst may be gate or up (each element is read, then written)
    ST_ASSERT(cuda_is_f32_rows(dst) && cuda_is_f32_rows(gate) && cuda_is_f32_rows(up));
    ST_ASSERT(cuda_same_shape(dst, gate) && cuda_same_shape(dst, up));
    return glu_launch(cuda_ctx(b), dst, gate, 0, up, 0, gelu, err);
}

st_status st_cuda_glu_fused(st_backend *b, st_tensor *dst, const st_tensor *gu, bool gelu, st_error *err) {
    // gu F32 [2F, ...]: gate = gu[0:F], up = gu[F:2F]; dst F32 [F, ...]
    ST_ASSERT(cuda_is_f32_rows(dst) && cuda_is_f32_rows(gu));
    ST_ASSERT(gu->ne[0] == 2 * dst->ne[0] && gu->ne[1] == dst->ne[1] && gu->ne[2] == dst->ne[2] &&
              gu->ne[3] == dst->ne[3]);
    return glu_launch(cuda_ctx(b), dst, gu, 0, gu, dst->ne[0] * (int64_t)sizeof(float), gelu, err);
}

// out[m * F + i] = act(gate) * up of gate_up row m (gate = row[0:F], up = row[F:2F]) in the
// weights' type T: the unit as the next product's packed operand, rounded as pack_rows
// would round its F32 out. Rows whose two halves are 16-byte aligned, F a multiple of 4,
// go four elements a thread (two float4 loads, one store).
template <bool GELU, st_type T> __global__ void glu_packed_kernel(char *__restrict__ out, st_cuda_view gu, int64_t F) {
    const int64_t rows = gu.ne1 * gu.ne2 * gu.ne3;
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        const float *g = (const float *)cuda_row(gu, r), *u = g + F;
        if (cuda_vec4_row(g, F) && cuda_vec4_row(u, F)) {
            for (int64_t i = first; i < F / 4; i += step) {
                const float4 a = ((const float4 *)g)[i], b = ((const float4 *)u)[i];
                cuda_store4_as<T>(out, r * F + 4 * i,
                                  make_float4(cuda_glu_one<GELU>(a.x, b.x), cuda_glu_one<GELU>(a.y, b.y),
                                              cuda_glu_one<GELU>(a.z, b.z), cuda_glu_one<GELU>(a.w, b.w)));
            }
        } else {
            for (int64_t i = first; i < F; i += step) cuda_store_as<T>(out, r * F + i, cuda_glu_one<GELU>(g[i], u[i]));
        }
    }
}

st_status st_cuda_glu_packed(st_cuda_ctx *c, void *out, st_type type, const st_tensor *gu, bool gelu, st_error *err) {
    // gu F32 [2F, M...]; out [M...][F] F16/BF16, 16-byte aligned
    ST_ASSERT(cuda_is_f32_rows(gu) && gu->ne[0] % 2 == 0 && (uintptr_t)out % 16 == 0);
    ST_ASSERT(type == ST_TYPE_F16 || type == ST_TYPE_BF16);
    const int64_t F = gu->ne[0] / 2, rows = cuda_nrows(gu);
    if (rows == 0 || F == 0) return ST_OK;
    const dim3 grid = ew_grid(cuda_vec4_threads(F), rows);
    const st_cuda_view v = cuda_view(gu);
    char *o = (char *)out;
    if (type == ST_TYPE_F16) {
        if (gelu) glu_packed_kernel<true, ST_TYPE_F16><<<grid, EW_THREADS, 0, c->stream>>>(o, v, F);
        else glu_packed_kernel<false, ST_TYPE_F16><<<grid, EW_THREADS, 0, c->stream>>>(o, v, F);
    } else {
        if (gelu) glu_packed_kernel<true, ST_TYPE_BF16><<<grid, EW_THREADS, 0, c->stream>>>(o, v, F);
        else glu_packed_kernel<false, ST_TYPE_BF16><<<grid, EW_THREADS, 0, c->stream>>>(o, v, F);
    }
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}

// ---- add, mul, scale -------------------------------------------------------------------------

// dst = a + x (MUL: a * x), x broadcasting where its ne[i] is 1 (a scalar per row when
// x->ne[0] == 1).
template <bool MUL> __global__ void binary_f32(st_cuda_view dst, st_cuda_view a, st_cuda_view x) {
    const int64_t n = a.ne0, rows = a.ne1 * a.ne2 * a.ne3;
    const int64_t x_step = x.ne0 == 1 ? 0 : 1;
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        int64_t i1, i2, i3;
        cuda_row_split(r, a.ne1, a.ne2, &i1, &i2, &i3);
        // x's index in a broadcast dimension (its ne 1) is 0, else a's
        const float *xr = (const float *)(x.data + (x.ne1 == 1 ? 0 : i1) * x.nb1 + (x.ne2 == 1 ? 0 : i2) * x.nb2 +
                                          (x.ne3 == 1 ? 0 : i3) * x.nb3);
        const float *ar = (const float *)(a.data + i1 * a.nb1 + i2 * a.nb2 + i3 * a.nb3);
        float *yr = (float *)cuda_row(dst, r);
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
            yr[i] = MUL ? __fmul_rn(ar[i], xr[i * x_step]) : __fadd_rn(ar[i], xr[i * x_step]);
    }
}

template <bool MUL>
static st_status binary_launch(st_backend *b, st_tensor *dst, const st_tensor *a, const st_tensor *x, st_error *err) {
    // dst, a F32 [D, ...]; x F32 with each ne[i] equal to a's or 1; dst may be a
    st_cuda_ctx *c = cuda_ctx(b);
    ST_ASSERT(cuda_is_f32_rows(dst) && cuda_is_f32_rows(a) && cuda_is_f32_rows(x));
    ST_ASSERT(cuda_same_shape(dst, a));
    for (int i = 0; i < ST_MAX_DIMS; i++) ST_ASSERT(x->ne[i] == a->ne[i] || x->ne[i] == 1);
    const int64_t rows = cuda_nrows(a);
    if (rows == 0 || a->ne[0] == 0) return ST_OK;
    binary_f32<MUL><<<ew_grid(a->ne[0], rows), EW_THREADS, 0, c->stream>>>(cuda_view(dst), cuda_view(a), cuda_view(x));
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}

st_status st_cuda_add(st_backend *b, st_tensor *dst, const st_tensor *a, const st_tensor *x, st_error *err) {
    return binary_launch<false>(b, dst, a, x, err);
}

st_status st_cuda_mul(st_backend *b, st_tensor *dst, const st_tensor *a, const st_tensor *x, st_error *err) {
    return binary_launch<true>(b, dst, a, x, err);
}

__global__ void scale_f32(st_cuda_view dst, st_cuda_view x, float s) {
    const int64_t n = x.ne0, rows = x.ne1 * x.ne2 * x.ne3;
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        const float *xr = (const float *)cuda_row(x, r);
        float *yr = (float *)cuda_row(dst, r);
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
            yr[i] = s * xr[i];
    }
}

st_status st_cuda_scale(st_backend *b, st_tensor *dst, const st_tensor *x, float s, st_error *err) {
    // dst, x F32 [D, ...]; dst may be x
    st_cuda_ctx *c = cuda_ctx(b);
    ST_ASSERT(cuda_is_f32_rows(x) && cuda_is_f32_rows(dst) && cuda_same_shape(dst, x));
    const int64_t rows = cuda_nrows(x);
    if (rows == 0 || x->ne[0] == 0) return ST_OK;
    scale_f32<<<ew_grid(x->ne[0], rows), EW_THREADS, 0, c->stream>>>(cuda_view(dst), cuda_view(x), s);
    ST_GPU_CHECK_LAUNCH();
    return ST_OK;
}
