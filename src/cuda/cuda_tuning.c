/* The CUDA tuning defaults and the STRIDE_CUDA_TUNING parser (cuda_tuning.h). */
#include "cuda/cuda_tuning.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

st_cuda_tuning st_cuda_tuning_default(int cc_major) {
    st_cuda_tuning t = {
        .rowblock = -1,
        .rowblock_staged = -1,
        /* o (a residual add of short rows) and the warps attention: launched early they
         * overlap their loads with the tail of the kernel ahead. The post-norms and the MoE
         * routing: their launch overlaps the product's tail (gemma3: 2 a layer; the
         * router's rows go in flight under it). Products of K = 2,048 multiples (llama,
         * qwen3, olmoe: q/k/v, down) do not gain from it; those of other K (gemma3,
         * phi3: every product) do. The experts' down product does: its rows go in flight
         * under the gated unit, whose one wave leaves it the SMs' spare slots. */
        .early_launch = cc_major >= 9 ? (CUDA_ROWBLOCK_ADD | CUDA_EARLY_ATTENTION | CUDA_EARLY_NORM_ADD |
                                         CUDA_EARLY_ROUTE | CUDA_EARLY_PARTIAL_ROWS | CUDA_EARLY_MOE_DOWN)
                                      : 0,
        .norm_prepared = 1,
        .norm_apart_waves = 4,
        .moe_rowblock = CUDA_MOE_ROWBLOCK_ALL,
        .flash_split = 0,
        .moe_group_waste = 25,
        .graphs = true,
    };
    if (cc_major < 8) t.rowblock_staged = 0; /* (cp.async: sm_80) */
    return t;
}

typedef struct tuning_key {
    const char *name;
    long lo, hi;
    const char *meaning;
} tuning_key;

static const tuning_key KEYS[] = {
    {"rowblock", -1, CUDA_ROWBLOCK_ALL, "-1 (by shape) or a mask of 1 (stores), 2 (residual adds) and 4 (gated pairs)"},
    {"rowblock_staged", -1, CUDA_ROWBLOCK_ALL, "-1 (by shape) or a mask of 1, 2 and 4"},
    {"early_launch", 0, CUDA_EARLY_ALL,
     "a mask of 1, 2, 4, 8 (attention), 16 (long residual adds), 32 (post-norms), 64 (MoE routing), "
     "128 (K no multiple of 2,048) and 256 (the experts' down)"},
    {"norm_prepared", 0, 2, "0 (never), 1 (where it pays) or 2 (wherever it can)"},
    {"norm_apart_waves", 0, 1000000, "waves of blocks (0: never)"},
    {"moe_rowblock", 0, CUDA_MOE_ROWBLOCK_ALL, "a mask of 1 (the experts' gate/up) and 2 (their down)"},
    {"flash_split", 0, CUDA_FLASH_MAX_SPLITS, "0 (by the rule) or the blocks a block's keys are split over"},
    {"moe_group_waste", 0, 100, "a percentage of an expert's columns"},
    {"graphs", 0, 1, "0 or 1"},
};

static void set_field(st_cuda_tuning *t, int key, long v) {
    switch (key) {
    case 0: t->rowblock = (int)v; break;
    case 1: t->rowblock_staged = (int)v; break;
    case 2: t->early_launch = (int)v; break;
    case 3: t->norm_prepared = (int)v; break;
    case 4: t->norm_apart_waves = (int)v; break;
    case 5: t->moe_rowblock = (int)v; break;
    case 6: t->flash_split = (int)v; break;
    case 7: t->moe_group_waste = (int)v; break;
    default: t->graphs = v != 0; break;
    }
}

st_status st_cuda_tuning_parse(st_cuda_tuning *t, const char *spec, st_error *err) {
    const size_t n_keys = sizeof(KEYS) / sizeof(KEYS[0]);
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (!eq)
            return st_error_set(err, ST_ERROR_INVALID, "STRIDE_CUDA_TUNING: '%.*s' is not key=value", (int)len, p);
        const size_t key_len = (size_t)(eq - p);
        size_t k = 0;
        while (k < n_keys && (strlen(KEYS[k].name) != key_len || strncmp(KEYS[k].name, p, key_len) != 0)) k++;
        if (k == n_keys)
            return st_error_set(err, ST_ERROR_INVALID,
                                "STRIDE_CUDA_TUNING: unknown key '%.*s' (keys: rowblock, rowblock_staged, "
                                "early_launch, norm_prepared, norm_apart_waves, moe_rowblock, flash_split, "
                                "moe_group_waste, graphs)",
                                (int)key_len, p);
        char value[32];
        const size_t value_len = len - key_len - 1;
        if (value_len == 0 || value_len >= sizeof(value))
            return st_error_set(err, ST_ERROR_INVALID, "STRIDE_CUDA_TUNING: %s needs %s", KEYS[k].name,
                                KEYS[k].meaning);
        memcpy(value, eq + 1, value_len);
        value[value_len] = '\0';
        char *stop = NULL;
        errno = 0;
        const long v = strtol(value, &stop, 10);
        if (errno != 0 || *stop != '\0' || v < KEYS[k].lo || v > KEYS[k].hi)
            return st_error_set(err, ST_ERROR_INVALID, "STRIDE_CUDA_TUNING: %s=%s: expected %s", KEYS[k].name, value,
                                KEYS[k].meaning);
        set_field(t, (int)k, v);
        p = end ? end + 1 : p + len;
    }
    return ST_OK;
}
