/* The sharding plan (tp.h): whether a model splits into N shards, and which heads, FFN
 * columns and vocabulary rows each shard owns, as ranges of the whole model's. */
#include <stdio.h>
#include <string.h>

#include "stride/model.h"
#include "stride/tp.h"

/* Whether n shards split hp evenly where they must (KV heads, FFN columns) and leave every
 * shard a vocabulary row; *why (when not NULL) names the first thing that does not. */
static bool splits(const st_hparams *hp, int n, char *why, size_t size) {
    const char *arch = st_arch_name(hp->arch);
    if (hp->n_head_kv % n != 0) {
        if (why)
            snprintf(why, size,
                     "the %lld KV head%s of %s do%s not divide into %d shards (a shard takes whole KV-head groups)",
                     (long long)hp->n_head_kv, hp->n_head_kv == 1 ? "" : "s", arch, hp->n_head_kv == 1 ? "es" : "", n);
        return false;
    }
    if (hp->n_ff % n != 0) {
        if (why)
            snprintf(why, size,
                     "the %lld FFN columns%s of %s do not divide into %d shards (gate/up rows and down columns "
                     "split evenly)",
                     (long long)hp->n_ff, hp->n_expert > 0 ? " of each expert" : "", arch, n);
        return false;
    }
    if (hp->n_vocab < n) {
        if (why)
            snprintf(why, size, "the %lld vocabulary rows of %s are fewer than %d shards", (long long)hp->n_vocab,
                     arch, n);
        return false;
    }
    return true;
}

/* "1, 2, 4 or 8": the shard counts hp splits into (at most the KV heads: every shard owns
 * one at least; 1 always). */
static void valid_counts(const st_hparams *hp, char *buf, size_t size) {
    int ok[ST_TP_MAX_SHARDS], n_ok = 0;
    for (int n = 1; n <= ST_TP_MAX_SHARDS && n <= hp->n_head_kv; n++)
        if (splits(hp, n, NULL, 0)) ok[n_ok++] = n;
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n_ok && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%d", i == 0 ? "" : (i == n_ok - 1 ? " or " : ", "),
                                 ok[i]);
}

st_status st_tp_plan_init(const st_hparams *hp, int n_shards, st_tp_plan *out, st_error *err) {
    memset(out, 0, sizeof(*out));
    /* defensive: st_hparams_from_gguf guarantees these, and so every range below fits */
    const st_arch_sizes sz = {.n_vocab = hp->n_vocab, .n_embd = hp->n_embd, .n_head = hp->n_head,
                              .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim, .n_ff = hp->n_ff,
                              .n_expert = hp->n_expert, .n_rot = hp->n_rot};
    int64_t dims[ST_DIM_COUNT];
    if (hp->n_vocab < 1 || hp->n_embd < 1 || hp->n_head < 1 || hp->n_head_kv < 1 || hp->head_dim < 1 ||
        hp->n_ff < 1 || hp->n_expert < 0 || hp->n_head % hp->n_head_kv != 0 || !st_arch_dims(&sz, dims) ||
        dims[ST_DIM_QKV] > ST_MODEL_MAX_DIM || dims[ST_DIM_FF2] > ST_MODEL_MAX_DIM || hp->n_embd > ST_MODEL_MAX_DIM ||
        hp->n_vocab > ST_MODEL_MAX_VOCAB)
        return st_error_set(err, ST_ERROR_INVALID, "-tp %d: the model's sizes are out of range", n_shards);
    if (n_shards < 1 || n_shards > ST_TP_MAX_SHARDS)
        return st_error_set(err, ST_ERROR_INVALID, "-tp %d: the number of shards must be 1 to %d", n_shards,
                            ST_TP_MAX_SHARDS);
    char why[256], counts[256];
    if (!splits(hp, n_shards, why, sizeof(why))) {
        valid_counts(hp, counts, sizeof(counts));
        return st_error_set(err, ST_ERROR_INVALID, "-tp %d: %s; -tp can be %s%s for this model", n_shards, why,
                            counts, strchr(counts, ',') || strstr(counts, " or ") ? "" : " only");
    }
    *out = (st_tp_plan){
        .n_shards = n_shards,
        .arch = hp->arch,
        .n_embd = hp->n_embd,
        .n_head = hp->n_head,
        .n_head_kv = hp->n_head_kv,
        .head_dim = hp->head_dim,
        .n_ff = hp->n_ff,
        .n_expert = hp->n_expert,
        .n_vocab = hp->n_vocab,
        .shard_n_head = hp->n_head / n_shards,
        .shard_n_head_kv = hp->n_head_kv / n_shards,
        .shard_n_ff = hp->n_ff / n_shards,
    };
    return ST_OK;
}

st_tp_range st_tp_q_heads(const st_tp_plan *p, int s) {
    ST_ASSERT(s >= 0 && s < p->n_shards);
    return (st_tp_range){s * p->shard_n_head, p->shard_n_head};
}

st_tp_range st_tp_kv_heads(const st_tp_plan *p, int s) {
    ST_ASSERT(s >= 0 && s < p->n_shards);
    return (st_tp_range){s * p->shard_n_head_kv, p->shard_n_head_kv};
}

st_tp_range st_tp_ff_cols(const st_tp_plan *p, int s) {
    ST_ASSERT(s >= 0 && s < p->n_shards);
    return (st_tp_range){s * p->shard_n_ff, p->shard_n_ff};
}

st_tp_range st_tp_vocab_rows(const st_tp_plan *p, int s) {
    ST_ASSERT(s >= 0 && s < p->n_shards);
    /* balanced: V * s / N (V <= 2^31 and s <= 64: no overflow) */
    const int64_t lo = p->n_vocab * s / p->n_shards, hi = p->n_vocab * (s + 1) / p->n_shards;
    return (st_tp_range){lo, hi - lo};
}

/* A head range as a range of rows (head_dim each), offset by `base` rows. */
static st_tp_range head_rows(const st_tp_plan *p, st_tp_range heads, int64_t base) {
    return (st_tp_range){base + heads.start * p->head_dim, heads.n * p->head_dim};
}

bool st_tp_slice_of(const st_tp_plan *p, const st_arch_tensor *t, int s, st_tp_slice *out) {
    ST_ASSERT(s >= 0 && s < p->n_shards);
    if (p->n_shards == 1) return false;
    const st_tp_range all_embd = {0, p->n_embd};
    const st_tp_range q = head_rows(p, st_tp_q_heads(p, s), 0), kv = head_rows(p, st_tp_kv_heads(p, s), 0);
    const st_tp_range ff = st_tp_ff_cols(p, s);
    const int64_t Hq = p->n_head * p->head_dim, Hk = p->n_head_kv * p->head_dim;
    st_tp_slice sl = {.cols = all_embd, .n_row_ranges = 1};
    switch (t->kind) {
    case ST_TENSOR_ATTN_Q: sl.rows[0] = q; break;                    /* [D, Hq] rows */
    case ST_TENSOR_ATTN_K:                                           /* [D, Hk] rows */
    case ST_TENSOR_ATTN_V: sl.rows[0] = kv; break;
    case ST_TENSOR_ATTN_QKV:                                         /* [D, Hq + 2Hk]: q | k | v */
        sl.n_row_ranges = 3;
        sl.rows[0] = q;
        sl.rows[1] = (st_tp_range){Hq + kv.start, kv.n};
        sl.rows[2] = (st_tp_range){Hq + Hk + kv.start, kv.n};
        break;
    case ST_TENSOR_ATTN_OUTPUT:                                      /* [Hq, D] input columns */
        sl.cols = q;
        sl.rows[0] = all_embd;
        break;
    case ST_TENSOR_FFN_UP:
        if (t->ne[1] == ST_DIM_FF2) {                                /* [D, 2F] fused: gate | up */
            sl.n_row_ranges = 2;
            sl.rows[0] = ff;
            sl.rows[1] = (st_tp_range){p->n_ff + ff.start, ff.n};
            break;
        }
        sl.rows[0] = ff;
        break;
    case ST_TENSOR_FFN_GATE:                                         /* [D, F] rows */
    case ST_TENSOR_FFN_GATE_EXPS:                                    /* [D, F, E] rows of each expert */
    case ST_TENSOR_FFN_UP_EXPS: sl.rows[0] = ff; break;
    case ST_TENSOR_FFN_DOWN:                                         /* [F, D] input columns */
    case ST_TENSOR_FFN_DOWN_EXPS:                                    /* [F, D, E] */
        sl.cols = ff;
        sl.rows[0] = all_embd;
        break;
    case ST_TENSOR_OUTPUT: sl.rows[0] = st_tp_vocab_rows(p, s); break; /* [D, V] rows */
    default: return false; /* replicated: embeddings, norms, the router, rope factors */
    }
    if (out) *out = sl;
    return true;
}

void st_tp_slice_shape(const st_tp_slice *sl, const int64_t whole[ST_MAX_DIMS], int64_t out[ST_MAX_DIMS]) {
    int64_t rows = 0;
    for (int i = 0; i < sl->n_row_ranges; i++) rows += sl->rows[i].n;
    out[0] = sl->cols.n;
    out[1] = rows;
    out[2] = whole[2];
    out[3] = whole[3];
}
