/*
 * The CUDA backend's one tuning surface: every choice of kernel or schedule that is not
 * fixed by the shapes, with its defaults per device architecture. The backend takes it
 * at init (st_backend_cuda_init_tuned); the GPU tests set its fields directly to run each
 * kernel on the same shapes; STRIDE_CUDA_TUNING=key=value,... overrides fields for a
 * measurement without a rebuild (an unknown key or a value out of range is an error).
 *
 * Compile-time choices (blocks an SM a kernel is compiled for, loads in flight a lane)
 * are constants beside their kernels: they shape register allocation, not a schedule.
 */
#ifndef STRIDE_CUDA_TUNING_H
#define STRIDE_CUDA_TUNING_H

#include <stdbool.h>

#include "stride/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kinds of one-token decode product, by what follows the product (the masks below). */
enum {
    CUDA_ROWBLOCK_STORE = 1, /* q/k/v and other plain stores */
    CUDA_ROWBLOCK_ADD = 2,   /* residual adds: o, down */
    CUDA_ROWBLOCK_GLU = 4,   /* gated pairs: gate/up with SwiGLU or GeGLU */
    CUDA_ROWBLOCK_ALL = 7
};
/* Decode kernels launched early beside the product kinds above (early_launch): the
 * one-token warps attention, residual adds of rows longer than two pieces a thread (down;
 * the ADD bit alone covers o), post-norms into the residual (gemma3's, after o and down),
 * MoE routing (the router's product with its norm and the top-k), every block-a-row
 * product whose K is no multiple of 2,048 (its rows end in a partial round of pieces), and
 * the chosen experts' down product (its weight rows in flight under the gated unit). */
enum {
    CUDA_EARLY_ATTENTION = 8,
    CUDA_EARLY_LONG_ADD = 16,
    CUDA_EARLY_NORM_ADD = 32,
    CUDA_EARLY_ROUTE = 64,
    CUDA_EARLY_PARTIAL_ROWS = 128,
    CUDA_EARLY_MOE_DOWN = 256,
    CUDA_EARLY_ALL = CUDA_ROWBLOCK_ALL | CUDA_EARLY_ATTENTION | CUDA_EARLY_LONG_ADD | CUDA_EARLY_NORM_ADD |
                     CUDA_EARLY_ROUTE | CUDA_EARLY_PARTIAL_ROWS | CUDA_EARLY_MOE_DOWN
};

/* Kinds of one-token MoE expert product (the moe_rowblock mask). */
enum {
    CUDA_MOE_ROWBLOCK_GLU = 1,  /* the unit: gate and up of the chosen experts, SwiGLU or GeGLU */
    CUDA_MOE_ROWBLOCK_DOWN = 2, /* down of the chosen experts, weighted and summed (+ residual) */
    CUDA_MOE_ROWBLOCK_ALL = 3
};

/* The most blocks a prefill attention block's keys are split over (flash_split). */
#define CUDA_FLASH_MAX_SPLITS 16

typedef struct st_cuda_tuning {
    /* Which one-token F16/BF16 products read a block a weight row (cuda_gemv_rowblock.cu)
     * instead of a warp a row (cuda_gemv_decode.cu), by kind (a CUDA_ROWBLOCK_* mask; -1:
     * the rule by shape in cuda_gemv_rowblock.cu). */
    int rowblock;
    /* Of those, which stage a block's rows in shared memory by cp.async (a mask; -1: the
     * rule by shape in cuda_gemv_rowblock.cu; sm_80 and later). */
    int rowblock_staged;
    /* Which decode kernels are launched early (programmatic dependent launch, sm_90 and
     * later): their weight or K/V rows in flight before they wait for the kernel ahead. A
     * CUDA_ROWBLOCK_* / CUDA_EARLY_* mask. */
    int early_launch;
    /* Whether a one-token normed product reads the x * norm_w that the residual add before
     * it prepared: 0 never, 1 where st_cuda_prepared_norm_pays says it pays, 2 wherever
     * the decode kernel can (the results agree to f32 rounding). */
    int norm_prepared;
    /* A one-token normed product whose grid takes at least this many waves of the SMs
     * (an output head) runs its norm as a kernel of its own first; 0 never. */
    int norm_apart_waves;
    /* Which one-token MoE expert products (backend/fused.h st_fused_moe) read a block a
     * weight row (cuda_moe_rowblock.cu) instead of a warp a (row, slot) (cuda_moe.cu), by
     * kind (CUDA_MOE_ROWBLOCK_* mask), where the shapes let it. */
    int moe_rowblock;
    /* Prefill attention over one sequence (cuda_attention_flash.cu): every block of query
     * rows has its keys split over this many blocks, whose partial results a second kernel
     * combines. 0: the rule there (a grid of fewer blocks than SMs split to about one
     * block an SM, at most CUDA_FLASH_MAX_SPLITS ways); 1: never split. */
    int flash_split;
    /* Prefill's experts (mul_mat_id over many tokens) run as batched GEMMs of experts with
     * similar slot counts, each padded to its batch's widest: an expert joins a batch while
     * at most this percentage of its columns would be padding (cuda_moe_group.h). */
    int moe_group_waste;
    /* Steps of few tokens are recorded as CUDA graphs (per depth bucket) and replayed. */
    bool graphs;
} st_cuda_tuning;

/* The defaults for a device of compute capability cc_major.x. */
st_cuda_tuning st_cuda_tuning_default(int cc_major);

/* Applies "key=value,key=value" (the field names above, integer values; graphs 0 or 1)
 * to t. ST_ERROR_INVALID naming the key for an unknown key or a value out of range. */
st_status st_cuda_tuning_parse(st_cuda_tuning *t, const char *spec, st_error *err);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_CUDA_TUNING_H */
