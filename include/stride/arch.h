/*
 * stride: model architectures and the role of each weight tensor.
 *
 * The role of a tensor is the op that consumes it. It is decided from the
 * architecture's table (the tensor names llama.cpp's converter writes), never guessed
 * from a name at run time: a tensor that is not in its architecture's table has role
 * ST_ROLE_UNKNOWN and is never padded.
 */
#ifndef STRIDE_ARCH_H
#define STRIDE_ARCH_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum st_arch {
    ST_ARCH_UNKNOWN = 0,
    ST_ARCH_LLAMA,
    ST_ARCH_QWEN3,
    ST_ARCH_GEMMA3,
    ST_ARCH_PHI3,
    ST_ARCH_OLMOE,
    ST_ARCH_COUNT,
} st_arch;

typedef enum st_tensor_role {
    ST_ROLE_UNKNOWN = 0,   /* not in the architecture's table */
    ST_ROLE_GEMM,          /* src0 of a dense matrix product: q/k/v/o, qkv, gate/up/down, output */
    ST_ROLE_GEMM_EXPERTS,  /* 3D expert weights of the MoE product (mul_mat_id) */
    ST_ROLE_ROUTER,        /* MoE router ffn_gate_inp: a dense matrix product */
    ST_ROLE_ROW_LOOKUP,    /* token embeddings, read by row (get_rows), also when tied */
    ST_ROLE_NORM,          /* RMSNorm weights */
    ST_ROLE_BIAS,          /* added biases */
    ST_ROLE_ROPE_FACTORS,  /* rope_freqs / rope_factors_*: per-frequency factors */
    ST_ROLE_COUNT,
} st_tensor_role;

/* "llama", "qwen3", ...: the value of general.architecture. "unknown" otherwise. */
const char *st_arch_name(st_arch arch);

/* Parses a general.architecture value (len bytes, not NUL-terminated). */
st_arch st_arch_from_name(const char *name, size_t len);

/* "gemm", "gemm-experts", "router", "row-lookup", "norm", "bias", "rope-factors",
 * "unknown". */
const char *st_tensor_role_name(st_tensor_role role);

/* True for roles whose tensor is the weight (src0) of a matrix product: the padding rule
 * applies to these and only these. */
bool st_tensor_role_is_gemm_weight(st_tensor_role role);

/* Role of tensor `name` (len bytes) in `arch`'s table. Patterns use "blk.#." where '#'
 * matches a layer number (decimal digits, no sign, no leading zeros beyond "0"). */
st_tensor_role st_arch_tensor_role(st_arch arch, const char *name, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_ARCH_H */
