#include "stride/tensor.h"

#include "stride/status.h"

bool st_tensor_set_packed_strides(st_tensor *t) {
    const st_type_traits *tr = st_type_get_traits((uint32_t)t->type);
    if (!tr) return false;
    size_t row;
    if (!st_type_row_bytes(t->type, t->ne[0], &row)) return false;
    t->nb[0] = tr->block_bytes;
    t->nb[1] = row;
    for (int i = 2; i < ST_MAX_DIMS; i++) {
        int64_t n = t->ne[i - 1];
        if (n < 0 || (n > 0 && t->nb[i - 1] > SIZE_MAX / (uint64_t)n)) return false;
        t->nb[i] = t->nb[i - 1] * (size_t)n;
    }
    return true;
}

size_t st_tensor_nbytes(const st_tensor *t) {
    for (int i = 0; i < ST_MAX_DIMS; i++)
        if (t->ne[i] == 0) return 0;
    return t->nb[ST_MAX_DIMS - 1] * (size_t)t->ne[ST_MAX_DIMS - 1];
}

size_t st_tensor_row_bytes(const st_tensor *t) {
    size_t row = 0;
    bool ok = st_type_row_bytes(t->type, t->ne[0], &row);
    ST_ASSERT(ok);
    return row;
}

bool st_tensor_has_contiguous_rows(const st_tensor *t) {
    const st_type_traits *tr = st_type_get_traits((uint32_t)t->type);
    if (!tr || t->nb[0] != tr->block_bytes) return false;
    size_t row;
    if (!st_type_row_bytes(t->type, t->ne[0], &row) || t->nb[1] < row) return false;
    return t->nb[2] == t->nb[1] * (size_t)t->ne[1] && t->nb[3] == t->nb[2] * (size_t)t->ne[2];
}

int64_t st_tensor_nelements(const st_tensor *t) {
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}
