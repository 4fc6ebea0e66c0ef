/* Each shard's weights laid out (tp.h): every split tensor of a whole-model plan becomes N
 * tensors of their own shapes, each decided by the padding rule under the model's policy
 * (st_layout_decide_policy), so that a shard's row stride follows its own row size. */
#include <stdlib.h>
#include <string.h>

#include "stride/tp.h"

/* The slice fits the whole tensor's shape (defensive: a validated model's does). */
static bool slice_fits(const st_tp_slice *sl, const int64_t ne[ST_MAX_DIMS]) {
    if (sl->cols.start < 0 || sl->cols.n < 1 || sl->cols.start > ne[0] - sl->cols.n) return false;
    for (int i = 0; i < sl->n_row_ranges; i++)
        if (sl->rows[i].start < 0 || sl->rows[i].n < 1 || sl->rows[i].start > ne[1] - sl->rows[i].n) return false;
    return true;
}

/* The architecture's entry of a planned tensor, or NULL (not in its table). */
static const st_arch_tensor *arch_entry(const st_tp_plan *p, const st_layout_entry *e) {
    int64_t layer;
    return st_arch_match(p->arch, e->name, e->name_len, &layer);
}

st_status st_tp_layout_plan(const st_tp_plan *p, const st_layout_plan *whole, const st_layout_policy *policy,
                            st_device_kind device, const st_layout_auto_source *source, st_tp_layout *out,
                            st_error *err) {
    memset(out, 0, sizeof(*out));
    out->n_shards = p->n_shards;
    out->shard_bytes = calloc((size_t)p->n_shards, sizeof(size_t));
    if (!out->shard_bytes) return st_error_set(err, ST_ERROR_NOMEM, "out of memory for a plan of %d shards", p->n_shards);
    uint64_t n_split = 0;
    for (uint64_t i = 0; i < whole->n_entries; i++) {
        const st_arch_tensor *t = arch_entry(p, &whole->entries[i]);
        if (t && st_tp_slice_of(p, t, 0, NULL)) n_split++;
        else out->replicated_bytes += st_tensor_nbytes(&whole->entries[i].tensor);
    }
    if (n_split == 0) return ST_OK;
    /* n_split <= the file's tensors and n_shards <= ST_TP_MAX_SHARDS: the count fits */
    out->entries = calloc((size_t)n_split * (size_t)p->n_shards, sizeof(*out->entries));
    if (!out->entries) {
        st_tp_layout_free(out);
        return st_error_set(err, ST_ERROR_NOMEM, "out of memory for the shard plans of %llu tensors",
                            (unsigned long long)n_split);
    }
    for (uint64_t i = 0; i < whole->n_entries; i++) {
        const st_layout_entry *w = &whole->entries[i];
        const st_arch_tensor *t = arch_entry(p, w);
        if (!t || !st_tp_slice_of(p, t, 0, NULL)) continue;
        for (int s = 0; s < p->n_shards; s++) {
            st_tp_layout_entry *e = &out->entries[out->n_entries++];
            e->tensor = i;
            e->shard = s;
            st_tp_slice_of(p, t, s, &e->slice);
            const st_tp_range cols = e->slice.cols;
            const st_type_traits *tr = st_type_get_traits((uint32_t)w->tensor.type);
            st_status bad = ST_OK;
            if (!slice_fits(&e->slice, w->tensor.ne))
                bad = st_error_set(err, ST_ERROR_FORMAT, "%.*s: its shape does not hold shard %d's slice",
                                   (int)w->name_len, w->name, s);
            else if (cols.start % tr->block_size != 0 || cols.n % tr->block_size != 0)
                bad = st_error_set(err, ST_ERROR_UNSUPPORTED,
                                   "-tp %d: %.*s is %s, and shard %d's input columns [%lld, %lld) are not whole "
                                   "blocks of %lld values: convert it at load (--weights f16 or bf16) or use fewer "
                                   "shards",
                                   p->n_shards, (int)w->name_len, w->name, st_type_name(w->tensor.type), s,
                                   (long long)cols.start, (long long)(cols.start + cols.n), (long long)tr->block_size);
            if (bad != ST_OK) {
                st_tp_layout_free(out); /* (e points into it) */
                return bad;
            }
            int64_t ne[ST_MAX_DIMS];
            st_tp_slice_shape(&e->slice, w->tensor.ne, ne);
            st_layout_decide_policy(policy, device, source, w->role, w->tensor.type, ne, &e->entry);
            e->entry.name = w->name;
            e->entry.name_len = w->name_len;
            const size_t bytes = st_tensor_nbytes(&e->entry.tensor);
            out->n_padded += e->entry.padded;
            out->total_planned_bytes += bytes;
            out->total_extra_bytes += e->entry.extra_bytes;
            out->shard_bytes[s] += bytes;
        }
    }
    return ST_OK;
}

void st_tp_layout_free(st_tp_layout *l) {
    if (!l) return;
    free(l->entries);
    free(l->shard_bytes);
    memset(l, 0, sizeof(*l));
}
