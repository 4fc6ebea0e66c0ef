/* Uploading a weight, or a shard's slice of one, into its planned layout (weights_upload.h).
 *
 * Row r of the destination t [K_s, N_s, E] is, in expert e = r / N_s, the (r % N_s)-th row
 * of the slice's row ranges taken in order; its columns are the slice's [c0, c0 + K_s) of
 * that source row. A chunk of destination rows is gathered (and converted) into one packed
 * host buffer and uploaded as a view of those rows: rows are evenly spaced by nb[1], and
 * experts too (nb[2] = nb[1] * N_s), so rows [r0, r0 + n) are a 2D tensor. */
#include <stdlib.h>
#include <string.h>

#include "model/weights_upload.h"
#include "stride/quant.h"

#define CHUNK_BYTES ((size_t)8 << 20) /* host memory gathered (and converted) at once */

st_tp_slice st_weights_whole_slice(const int64_t ne[ST_MAX_DIMS]) {
    return (st_tp_slice){.cols = {0, ne[0]}, .n_row_ranges = 1, .rows = {{0, ne[1]}}};
}

/* The source row (counting experts' rows one after another) of destination row r. */
static int64_t source_row(const st_tp_slice *sl, int64_t rows_per_expert, int64_t whole_rows, int64_t r) {
    const int64_t e = r / rows_per_expert;
    int64_t j = r % rows_per_expert;
    for (int i = 0; i < sl->n_row_ranges; i++) {
        if (j < sl->rows[i].n) return e * whole_rows + sl->rows[i].start + j;
        j -= sl->rows[i].n;
    }
    ST_ASSERT(!"row past the slice's ranges");
    return -1;
}

st_status st_weights_upload_slice(st_backend *b, st_tensor *t, st_type from, const int64_t whole[ST_MAX_DIMS],
                                  const void *data, const st_tp_slice *sl, st_error *err) {
    /* t [K_s, N_s, E] as planned; the source [K, N, E] packed rows of `from` */
    const bool convert = t->type != from;
    const st_type_traits *tr = st_type_get_traits((uint32_t)from);
    ST_ASSERT(!convert || ((t->type == ST_TYPE_F16 || t->type == ST_TYPE_BF16) && tr->is_quantized));
    ST_ASSERT(st_tensor_has_contiguous_rows(t) && t->ne[3] == 1 && whole[3] == 1 && t->ne[2] == whole[2]);
    const int64_t k = whole[0], k_s = t->ne[0], c0 = sl->cols.start;
    ST_ASSERT(k_s == sl->cols.n && c0 >= 0 && c0 + k_s <= k);
    ST_ASSERT(convert || (c0 % tr->block_size == 0 && k_s % tr->block_size == 0));
    size_t src_row = 0;
    const bool row_ok = st_type_row_bytes(from, k, &src_row);
    ST_ASSERT(row_ok); /* the GGUF reader validated the shape */
    const size_t dst_row = st_tensor_row_bytes(t), col_off = (size_t)(c0 / tr->block_size) * tr->block_bytes;
    const int64_t rows = t->ne[1] * t->ne[2];
    if (rows == 0 || k_s == 0) return ST_OK;

    const size_t per_row = convert ? (size_t)k * sizeof(float) + dst_row : dst_row; /* f32 [K] + packed */
    int64_t chunk = (int64_t)(CHUNK_BYTES / per_row);
    if (chunk < 1) chunk = 1;
    if (chunk > rows) chunk = rows;
    char *packed = malloc((size_t)chunk * dst_row);                                   /* [chunk, K_s] of t's type */
    float *f32 = convert ? malloc((size_t)chunk * (size_t)k * sizeof(float)) : NULL; /* [chunk, K] */
    if (!packed || (convert && !f32)) {
        free(packed);
        free(f32);
        return st_error_set(err, ST_ERROR_NOMEM, "no memory to gather %lld rows of %lld values", (long long)chunk,
                            (long long)k);
    }
    st_status s = ST_OK;
    for (int64_t r0 = 0; r0 < rows && s == ST_OK; r0 += chunk) {
        const int64_t n = rows - r0 < chunk ? rows - r0 : chunk;
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < n; r++) {
            const char *src = (const char *)data + (size_t)source_row(sl, t->ne[1], whole[1], r0 + r) * src_row;
            char *dst = packed + (size_t)r * dst_row;
            if (!convert) {
                memcpy(dst, src + col_off, dst_row);
                continue;
            }
            float *row = f32 + r * k;
            st_quant_dequantize_row(from, src, row, k); /* whole rows: blocks need not align with c0 */
            if (t->type == ST_TYPE_F16) st_f32_to_f16_row(row + c0, (uint16_t *)dst, (size_t)k_s);
            else st_f32_to_bf16_row(row + c0, (uint16_t *)dst, (size_t)k_s);
        }
        st_tensor view = *t; /* rows r0 .. r0 + n as one 2D tensor */
        view.ne[1] = n;
        view.ne[2] = view.ne[3] = 1;
        view.nb[2] = view.nb[3] = view.nb[1] * (size_t)n;
        view.data = (char *)t->data + (size_t)r0 * t->nb[1];
        s = b->iface->upload_weight(b, &view, packed, err);
    }
    free(packed);
    free(f32);
    return s;
}
