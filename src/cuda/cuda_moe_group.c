/* A prompt's expert slots laid out for batched GEMMs (cuda_moe_group.h). */
#include "cuda/cuda_moe_group.h"

#include <stdlib.h>
#include <string.h>

typedef struct expert_count {
    int64_t count;
    int32_t id;
} expert_count;

/* Largest count first; equal counts by id, so that the plan does not depend on qsort. */
static int by_count_desc(const void *pa, const void *pb) {
    const expert_count *a = (const expert_count *)pa, *b = (const expert_count *)pb;
    if (a->count != b->count) return a->count > b->count ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static int32_t slot_expert(const int32_t *ids, int64_t ids_nb1, int64_t j, int64_t m) {
    return *(const int32_t *)((const char *)ids + m * ids_nb1 + j * (int64_t)sizeof(int32_t));
}

void st_moe_group_plan_free(st_moe_group_plan *plan) {
    free(plan->batch_first);
    free(plan->batch_cols);
    free(plan->expert_of);
    free(plan->col0);
    free(plan->slot_of_col);
    memset(plan, 0, sizeof(*plan));
}

st_status st_moe_group_plan_build(st_moe_group_plan *plan, const int32_t *ids, int64_t ids_nb1, int64_t n_used,
                                  int64_t M, int64_t E, int waste_pct, st_error *err) {
    memset(plan, 0, sizeof(*plan));
    if (waste_pct < 0 || waste_pct > 100 || n_used < 0 || M < 0 || E <= 0)
        return st_error_set(err, ST_ERROR_INVALID, "moe group plan: waste %d%%, %lld slots x %lld tokens, %lld experts",
                            waste_pct, (long long)n_used, (long long)M, (long long)E);
    int64_t *count = (int64_t *)calloc((size_t)E, sizeof(int64_t));
    expert_count *order = (expert_count *)malloc((size_t)E * sizeof(expert_count));
    st_status s = ST_OK;
    if (!count || !order) {
        s = st_error_set(err, ST_ERROR_NOMEM, "out of host memory planning %lld experts", (long long)E);
        goto done;
    }
    for (int64_t m = 0; m < M; m++)
        for (int64_t j = 0; j < n_used; j++) {
            const int32_t e = slot_expert(ids, ids_nb1, j, m);
            if (e < 0 || e >= E) {
                s = st_error_set(err, ST_ERROR_INVALID,
                                 "mul_mat_id: expert id %d (token %lld, slot %lld) is outside [0, %lld)", (int)e,
                                 (long long)m, (long long)j, (long long)E);
                goto done;
            }
            count[e]++;
        }
    int64_t n_active = 0;
    for (int64_t e = 0; e < E; e++)
        if (count[e] > 0) order[n_active++] = (expert_count){count[e], (int32_t)e};
    qsort(order, (size_t)n_active, sizeof(*order), by_count_desc);

    /* (one more entry than the experts: batch_first's end, and never a zero-byte malloc) */
    plan->batch_first = (int64_t *)malloc((size_t)(n_active + 1) * sizeof(int64_t));
    plan->batch_cols = (int64_t *)malloc((size_t)(n_active + 1) * sizeof(int64_t));
    plan->expert_of = (int32_t *)malloc((size_t)(n_active + 1) * sizeof(int32_t));
    plan->col0 = (int64_t *)malloc((size_t)(n_active + 1) * sizeof(int64_t));
    if (!plan->batch_first || !plan->batch_cols || !plan->expert_of || !plan->col0) {
        s = st_error_set(err, ST_ERROR_NOMEM, "out of host memory planning %lld experts", (long long)E);
        goto done;
    }
    plan->n_experts = n_active;
    int64_t width = 0;
    for (int64_t i = 0; i < n_active; i++) {
        const int64_t n = order[i].count;
        const int64_t counted = n > ST_MOE_GROUP_FLOOR_COLS ? n : ST_MOE_GROUP_FLOOR_COLS;
        if (i == 0 || counted * 100 < width * (100 - waste_pct)) { /* padding it to width wastes too much */
            width = n;
            plan->batch_first[plan->n_batches] = i;
            plan->batch_cols[plan->n_batches++] = width;
        }
        plan->expert_of[i] = order[i].id;
        plan->col0[i] = plan->n_cols;
        plan->n_cols += width;
    }
    plan->batch_first[plan->n_batches] = n_active;

    plan->slot_of_col = (int32_t *)malloc((size_t)(plan->n_cols + 1) * sizeof(int32_t));
    if (!plan->slot_of_col) {
        s = st_error_set(err, ST_ERROR_NOMEM, "out of host memory planning %lld expert columns",
                         (long long)plan->n_cols);
        goto done;
    }
    for (int64_t c = 0; c < plan->n_cols; c++) plan->slot_of_col[c] = -1;
    /* count[e] becomes expert e's next free column */
    for (int64_t i = 0; i < n_active; i++) count[plan->expert_of[i]] = plan->col0[i];
    for (int64_t m = 0; m < M; m++)
        for (int64_t j = 0; j < n_used; j++)
            plan->slot_of_col[count[slot_expert(ids, ids_nb1, j, m)]++] = (int32_t)(m * n_used + j);
done:
    free(count);
    free(order);
    if (s != ST_OK) st_moe_group_plan_free(plan);
    return s;
}
