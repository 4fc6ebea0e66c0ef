/*
 * stride: tensor parallelism, the sharding plan. How a model splits into N shards
 * (Megatron-LM's column/row scheme, one all-reduce after each block), which weights each
 * shard holds, and how each shard's weights are laid out.
 *
 * THE SCHEME (D = n_embd, hd = head_dim, Hq = n_head * hd, Hk = n_head_kv * hd,
 * F = n_ff, per expert for MoE; shard s of N):
 *   attention    whole KV-head groups: shard s owns KV heads [s Hkv/N, (s+1) Hkv/N) and
 *                the query heads that read them (GQA groups stay on one shard). Its q, k, v
 *                rows are those heads' rows (a fused qkv: its q, k and v rows, in that
 *                order); its attention runs over its heads and its slice of the KV cache.
 *                o is split by its input columns (the shard's query heads), so each shard
 *                computes a partial [D] sum:  ALL-REDUCE after o.
 *   dense FFN    gate and up split by rows (columns of the intermediate: [s F/N, (s+1) F/N);
 *                a fused gate_up: its gate, then its up rows), down by the same input
 *                columns: each shard's down is a partial [D] sum:  ALL-REDUCE after down.
 *   MoE          split the same way inside every expert (each shard holds all E experts,
 *                F/N columns of each), the router and the top-k choice replicated. Not by
 *                expert: a split by columns keeps every shard's work equal whatever the
 *                router picks (by expert, a token whose k experts sit on one shard waits on
 *                that shard alone; decode reads 1/N of each chosen expert on every shard
 *                instead of whole experts on a few), needs the same ids on every shard and
 *                no new ops, and ends in the same one all-reduce after the experts'
 *                weighted sum. (vLLM's default for MoE under -tp is the same.)
 *   output head  vocabulary rows [s V/N, (s+1) V/N) (sizes differ by at most one where N
 *                does not divide V); the shards' logits are concatenated (all-gather). A head
 *                tied to the token embedding reads those rows of the replicated embedding.
 *   replicated   token embeddings, every norm, the MoE router, rope factors. OLMoE's q/k
 *                norm runs over the whole q (k) projection, not per head: there the shards'
 *                q and k are gathered before it (an all-gather of q and k per layer on N
 *                GPUs, as vLLM does for OLMoE), each shard then keeping its own heads.
 *
 * Heads and FFN columns must divide evenly (an error names what does not divide and the
 * shard counts that work); the vocabulary need not. Each shard's weight is a tensor of its
 * own, laid out by the padding rule from its own shape (st_layout_decide_policy): a shard
 * of o or down has rows N times shorter than the whole's, which may stop being a multiple
 * of the alias period (never start: the column splits are even, and R / N a multiple of the
 * period makes R one). The other shards keep the whole row.
 *
 * What runs today: the CPU backend simulates the N shards in one process (the model's
 * forward pass computes each shard's part and sums the partial outputs with plain adds
 * where NCCL would all-reduce), so that the sharding math is tested against the unsplit
 * model without GPUs. Driving N GPUs over NCCL is not built yet: a model loaded with more
 * than one shard on another backend is an error (st_model_load).
 */
#ifndef STRIDE_TP_H
#define STRIDE_TP_H

#include <stdbool.h>
#include <stdint.h>

#include "stride/arch.h"
#include "stride/layout.h"
#include "stride/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ST_TP_MAX_SHARDS 64

struct st_hparams; /* model.h, which includes this header */

/* [start, start + n) of one dimension. */
typedef struct st_tp_range {
    int64_t start, n;
} st_tp_range;

typedef struct st_tp_plan {
    int n_shards;        /* 1: the whole model, unsplit */
    st_arch arch;
    /* the whole model's sizes */
    int64_t n_embd, n_head, n_head_kv, head_dim, n_ff, n_expert, n_vocab;
    /* each shard's (equal splits) */
    int64_t shard_n_head, shard_n_head_kv, shard_n_ff;
} st_tp_plan;

/* The plan of hp split into n_shards. ST_ERROR_INVALID, with a message that starts
 * "-tp N: " and names what does not divide and the shard counts this model takes, when
 * n_shards is outside 1..ST_TP_MAX_SHARDS, the KV heads or the FFN columns do not divide
 * into n_shards, or the vocabulary has fewer rows than shards. hp is checked first
 * (defensive: sizes positive and their products within ST_MODEL_MAX_DIM, as
 * st_hparams_from_gguf guarantees). */
st_status st_tp_plan_init(const struct st_hparams *hp, int n_shards, st_tp_plan *out, st_error *err);

/* What shard s owns, in the whole model's numbering: query heads, KV heads (head
 * indices), FFN columns (per expert), vocabulary rows. 0 <= s < n_shards. */
st_tp_range st_tp_q_heads(const st_tp_plan *p, int s);
st_tp_range st_tp_kv_heads(const st_tp_plan *p, int s);
st_tp_range st_tp_ff_cols(const st_tp_plan *p, int s);
st_tp_range st_tp_vocab_rows(const st_tp_plan *p, int s);

/* The part of a weight that shard s holds: input columns (a range of ne[0]) and rows (up to
 * three ranges of ne[1], concatenated in order: a fused qkv's q, k, v rows; a fused
 * gate_up's gate, up rows). The same in every expert of an expert stack (ne[2] whole). */
typedef struct st_tp_slice {
    st_tp_range cols;
    int n_row_ranges;
    st_tp_range rows[3];
} st_tp_slice;

/* Whether the tensor of this entry of the architecture's descriptor (arch.h) is split
 * (false: replicated whole on every shard); when it is and out is not NULL, shard s's
 * slice in *out. With one shard nothing is split. */
bool st_tp_slice_of(const st_tp_plan *p, const st_arch_tensor *t, int s, st_tp_slice *out);

/* The shape of a slice of a tensor of shape whole: ne[0] = cols.n, ne[1] = the rows'
 * total, ne[2..3] as whole. */
void st_tp_slice_shape(const st_tp_slice *sl, const int64_t whole[ST_MAX_DIMS], int64_t out[ST_MAX_DIMS]);

/* ---- each shard's weights, laid out ----------------------------------------------------- */

typedef struct st_tp_layout_entry {
    uint64_t tensor;       /* the file tensor (its index, as in the whole model's plan) */
    int shard;
    st_tp_slice slice;
    st_layout_entry entry; /* the shard's own tensor: shape, chosen nb, padded or not and why;
                              name: the file tensor's */
} st_tp_layout_entry;

typedef struct st_tp_layout {
    int n_shards;
    uint64_t n_entries;
    st_tp_layout_entry *entries;  /* each split tensor's shards, in file order then shard order */
    uint64_t n_padded;            /* shard tensors padded */
    size_t total_planned_bytes;   /* every shard's split weights */
    size_t total_extra_bytes;
    size_t replicated_bytes;      /* what each shard holds whole: the whole plan's tensors that
                                     are not split (a tied output head reads its vocabulary
                                     rows of the replicated embedding) */
    size_t *shard_bytes;          /* [n_shards] split weights planned for each shard */
} st_tp_layout;

/* Plans every split tensor of a whole-model plan (st_layout_plan_gguf_auto of a model that
 * st_model_validate accepted, types as planned) for each shard of p, each by the rule under
 * policy for device (source: `auto` per shape, NULL for the built-in table). With one shard
 * the layout is empty. ST_ERROR_FORMAT (defensive) for a tensor whose shape does not hold
 * its slices. */
st_status st_tp_layout_plan(const st_tp_plan *p, const st_layout_plan *whole,
                            const st_layout_policy *policy, st_device_kind device,
                            const st_layout_auto_source *source, st_tp_layout *out, st_error *err);
void st_tp_layout_free(st_tp_layout *l);

/* ---- NCCL ------------------------------------------------------------------------------ */

/* The NCCL library this build links (ncclGetVersion: e.g. 23206 for 2.32.6), for
 * `stride version`; false when built without NCCL (CUDA off, or no NCCL found by CMake).
 * No communicator is created: multi-GPU driving is not built yet. */
bool st_tp_nccl_version(int *version);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_TP_H */
