/*
 * A prompt's expert slots laid out for batched GEMMs (plain C: built and tested without a
 * GPU; cuda_moe.cu's grouped mul_mat_id runs the plan).
 *
 * mul_mat_id over M tokens with n_used slots each gives expert e the n_e slots that chose
 * it. One GEMM an expert runs each over few columns (a 512-token prompt over 64 experts:
 * about 64), each a handful of tiles on a GPU of 132 SMs, one after another. A batched
 * GEMM runs many experts' products in one launch, but at one shape: so the experts are
 * sorted by n_e, largest first, and cut into batches whose members all pad to the batch's
 * widest, an expert joining while padding it wastes at most waste_pct of its columns
 * (counting every expert as at least ST_MOE_GROUP_FLOOR_COLS wide: a product over fewer
 * columns reads the whole expert all the same).
 *
 * The padded layout: expert expert_of[i] (i in batch order) owns the columns col0[i] ..
 * col0[i] + width of its batch; its slots fill the first n_e of them in token order, the
 * rest are padding (slot_of_col -1). Slot s is token s / n_used, its position s % n_used.
 */
#ifndef STRIDE_CUDA_MOE_GROUP_H
#define STRIDE_CUDA_MOE_GROUP_H

#include <stdint.h>

#include "stride/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Narrower experts pad to this many columns without counting as waste. */
#define ST_MOE_GROUP_FLOOR_COLS 16

typedef struct st_moe_group_plan {
    int64_t n_experts;     /* experts with at least one slot */
    int64_t n_batches;     /* batches of them */
    int64_t n_cols;        /* columns of the padded layout */
    int64_t *batch_first;  /* [n_batches + 1]: batch b holds expert_of[batch_first[b] .. batch_first[b + 1]) */
    int64_t *batch_cols;   /* [n_batches]: the columns each member of batch b owns */
    int32_t *expert_of;    /* [n_experts]: expert ids in batch order */
    int64_t *col0;         /* [n_experts]: the first column of expert_of[i] */
    int32_t *slot_of_col;  /* [n_cols]: the slot a column holds, or -1 (padding) */
} st_moe_group_plan;

/* Plans the slots of ids [n_used, M] (int32, row stride ids_nb1 bytes) over E experts with
 * at most waste_pct percent of an expert's columns padding (0: only experts of equal
 * counts share a batch). ST_ERROR_INVALID for an id outside [0, E) (the CPU backend's
 * error, naming the token and slot); ST_ERROR_NOMEM. The plan owns its arrays. */
st_status st_moe_group_plan_build(st_moe_group_plan *plan, const int32_t *ids, int64_t ids_nb1, int64_t n_used,
                                  int64_t M, int64_t E, int waste_pct, st_error *err);
void st_moe_group_plan_free(st_moe_group_plan *plan);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_CUDA_MOE_GROUP_H */
