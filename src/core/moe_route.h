/*
 * MoE routing of one token, shared by the CPU op (src/cpu/cpu_moe.c) and the CUDA kernel
 * (src/cuda/cuda_moe.cu) so that both choose and weigh experts the same way.
 *
 *   l [E] router logits -> id [k] the chosen experts, in decreasing order of logit (ties
 *   to the lower index; selection by logit is selection by probability, since softmax is
 *   monotonic), and wt [k] their weights:
 *     softmax_first: the softmax over all E logits at the chosen experts;
 *     otherwise:     the softmax over the k chosen logits;
 *     normalize:     the k weights are then divided by their sum.
 * Exponentials are taken relative to the largest logit in f32, their sums kept in double.
 * A NaN logit ranks below every number (NaNs among themselves by index), so the order is
 * total and k experts are always chosen: a NaN logit is chosen only when fewer than k
 * are numbers, and a NaN in the softmax's sum makes every weight NaN, so a broken router
 * gives a NaN output (as a dense layer's NaN weights would) instead of stopping the run.
 */
#ifndef STRIDE_CORE_MOE_ROUTE_H
#define STRIDE_CORE_MOE_ROUTE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIP__)
#define ST_HOST_DEVICE __host__ __device__
#else
#define ST_HOST_DEVICE
#endif

/* (a, ia) ranks before (b, ib): larger value first, the lower index on ties, NaN last. */
static inline ST_HOST_DEVICE bool st_moe_route_before(float a, int64_t ia, float b, int64_t ib) {
    if (isnan(a) || isnan(b)) return isnan(b) && (!isnan(a) || ia < ib);
    return a > b || (a == b && ia < ib);
}

/* The k picks: the j-th is the best expert ranked after the (j-1)-th (no scratch needed). */
static inline ST_HOST_DEVICE void st_moe_route_pick(const float *l, int64_t n_expert, int32_t k, int32_t *id) {
    for (int32_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < n_expert; e++) {
            if (j > 0 && !st_moe_route_before(l[id[j - 1]], id[j - 1], l[e], e)) continue;
            if (best < 0 || st_moe_route_before(l[e], e, l[best], best)) best = e;
        }
        id[j] = (int32_t)best; /* found: the order is total and k <= n_expert */
    }
}

/* The weights of the k picks id [k] (in decreasing order of logit, as st_moe_route_pick
 * leaves them). A kernel that picks another way calls this for the same bits. */
static inline ST_HOST_DEVICE void st_moe_route_weights(const float *l, int64_t n_expert, int32_t k,
                                                       bool softmax_first, bool normalize, const int32_t *id,
                                                       float *wt) {
    const float top = l[id[0]];
    double denom = 0.0;
    if (softmax_first) {
        for (int64_t e = 0; e < n_expert; e++) denom += (double)expf(l[e] - top);
    } else {
        for (int32_t j = 0; j < k; j++) denom += (double)expf(l[id[j]] - top);
    }
    double sum = 0.0;
    for (int32_t j = 0; j < k; j++) {
        wt[j] = (float)((double)expf(l[id[j]] - top) / denom);
        sum += (double)wt[j];
    }
    if (normalize) {
        for (int32_t j = 0; j < k; j++) wt[j] = (float)((double)wt[j] / sum);
    }
}

static inline ST_HOST_DEVICE void st_moe_route_token(const float *l, int64_t n_expert, int32_t k,
                                                     bool softmax_first, bool normalize, int32_t *id,
                                                     float *wt) {
    st_moe_route_pick(l, n_expert, k, id);
    st_moe_route_weights(l, n_expert, k, softmax_first, normalize, id, wt);
}

#endif /* STRIDE_CORE_MOE_ROUTE_H */
