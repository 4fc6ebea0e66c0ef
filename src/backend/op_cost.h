/*
 * What a step's op is called in a profile (stride/profile.h) and what it must cost at the
 * least: the bytes it moves (weights once, activations in and out, the keys and values
 * it attends over) and the FLOPs it does. Labels leave out the token count and depth, so
 * that a layer's op and the same op of every other layer add up in one entry.
 *
 * Attention's figures are bounds from the step's n_kv (the host does not know each
 * query's position): a query of a one-sequence chunk of M tokens sees n_kv - (M - 1) / 2
 * keys on average; a paged step's sequences are counted at n_kv keys each; a sliding
 * window caps the keys at its width.
 */
#ifndef STRIDE_BACKEND_OP_COST_H
#define STRIDE_BACKEND_OP_COST_H

#include "backend/fused.h"
#include "stride/graph.h"
#include "stride/profile.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_op_cost {
    char label[ST_PROFILE_LABEL];
    double bytes, flops;
} st_op_cost;

void st_op_cost_node(const st_node *n, int64_t n_kv, st_op_cost *c);
void st_op_cost_fused_mul_mat(const st_fused_mul_mat *op, st_op_cost *c);
void st_op_cost_rope_attention(const st_fused_rope_attention *op, int64_t n_kv, st_op_cost *c);
void st_op_cost_fused_moe(const st_fused_moe *op, st_op_cost *c);
void st_op_cost_norm_add(const st_fused_norm_add *op, st_op_cost *c);
void st_op_cost_norm_pair(const st_fused_norm_pair *op, st_op_cost *c);
void st_op_cost_moe_route(const st_fused_moe_route *op, st_op_cost *c);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_BACKEND_OP_COST_H */
