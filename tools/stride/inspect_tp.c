#include "inspect_tp.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

#define SCHEME                                                                                                 \
    "attention by whole KV-head groups (q/k/v rows, o input columns), FFN by intermediate columns (gate/up " \
    "rows, down input columns), MoE by each expert's columns, output head by vocabulary rows; embeddings, "   \
    "norms and router replicated; all-reduce after o and after down"

void inspect_format_shape(const int64_t *ne, uint32_t n_dims, char *buf, size_t size) {
    size_t used = 0;
    buf[0] = '\0';
    for (uint32_t d = 0; d < n_dims && used < size; d++)
        used += (size_t)snprintf(buf + used, size - used, d ? " x %" PRId64 : "%" PRId64, ne[d]);
}

/* Whether the model's output head is tied to its token embedding (no output.weight). */
static bool output_tied(const st_tp_plan *p, const st_layout_plan *whole) {
    for (uint64_t i = 0; i < whole->n_entries; i++) {
        int64_t layer;
        const st_arch_tensor *t = st_arch_match(p->arch, whole->entries[i].name, whole->entries[i].name_len, &layer);
        if (t && t->kind == ST_TENSOR_OUTPUT) return false;
    }
    return true;
}

static uint32_t rank_of(const st_tensor *t) { return t->ne[2] > 1 ? 3 : (t->ne[1] > 1 ? 2 : 1); }

/* "cols 0..4096, rows 1024..2048 + 4096..4608": the slice in the whole tensor's numbering
 * (half-open ranges). */
static void format_slice(const st_tp_slice *sl, char *buf, size_t size) {
    int used = snprintf(buf, size, "cols %" PRId64 "..%" PRId64 ", rows ", sl->cols.start,
                        sl->cols.start + sl->cols.n);
    for (int i = 0; i < sl->n_row_ranges && used > 0 && (size_t)used < size; i++)
        used += snprintf(buf + used, size - (size_t)used, "%s%" PRId64 "..%" PRId64, i ? " + " : "",
                         sl->rows[i].start, sl->rows[i].start + sl->rows[i].n);
}

void inspect_tp_print_text(const st_tp_plan *p, const st_tp_layout *l, const st_layout_plan *whole) {
    printf("tensor parallel: -tp %d: %s\n", p->n_shards, SCHEME);
    for (int s = 0; s < p->n_shards; s++) {
        const st_tp_range q = st_tp_q_heads(p, s), kv = st_tp_kv_heads(p, s), ff = st_tp_ff_cols(p, s),
                          v = st_tp_vocab_rows(p, s);
        printf("  shard %d: q heads %" PRId64 "..%" PRId64 ", kv heads %" PRId64 "..%" PRId64
               ", ffn columns %" PRId64 "..%" PRId64 "%s, vocabulary rows %" PRId64 "..%" PRId64 "\n",
               s, q.start, q.start + q.n, kv.start, kv.start + kv.n, ff.start, ff.start + ff.n,
               p->n_expert > 0 ? " of each expert" : "", v.start, v.start + v.n);
    }
    if (output_tied(p, whole))
        printf("  output head tied to token_embd: each shard reads its vocabulary rows of the replicated "
               "embedding (packed, as the whole head does)\n");
    if (l->n_entries > 0)
        printf("  %-5s %-32s %-38s %-5s %-20s %10s %10s %-6s %s\n", "shard", "name", "slice of the whole", "type",
               "shape (ne)", "packed nb1", "nb1", "padded", "why");
    for (uint64_t i = 0; i < l->n_entries; i++) {
        const st_tp_layout_entry *e = &l->entries[i];
        char name[300], slice[160], shape[96], why[256];
        cli_escape(e->entry.name, e->entry.name_len, name, sizeof(name));
        format_slice(&e->slice, slice, sizeof(slice));
        inspect_format_shape(e->entry.tensor.ne, rank_of(&e->entry.tensor), shape, sizeof(shape));
        st_layout_entry_explain(&e->entry, whole->alias, why, sizeof(why));
        printf("  %-5d %-32s %-38s %-5s %-20s %10zu %10zu %-6s %s\n", e->shard, name, slice,
               st_type_name(e->entry.tensor.type), shape, e->entry.packed_row_bytes, e->entry.tensor.nb[1],
               e->entry.padded ? "yes" : "no", why);
    }
    char repl[32], extra[32];
    cli_format_bytes(l->replicated_bytes, repl, sizeof(repl));
    cli_format_bytes(l->total_extra_bytes, extra, sizeof(extra));
    printf("shards:    %" PRIu64 " of %" PRIu64 " shard tensors padded; extra %zu bytes (%s); each shard also holds "
           "the %s replicated\n",
           l->n_padded, l->n_entries, l->total_extra_bytes, extra, repl);
    for (int s = 0; s < l->n_shards; s++) {
        char split[32], total[32];
        cli_format_bytes(l->shard_bytes[s], split, sizeof(split));
        cli_format_bytes(l->shard_bytes[s] + l->replicated_bytes, total, sizeof(total));
        printf("  shard %d: %s split + %s replicated = %s\n", s, split, repl, total);
    }
}

static void json_range(const char *key, st_tp_range r) {
    printf("\"%s\": [%" PRId64 ", %" PRId64 "]", key, r.start, r.start + r.n);
}

void inspect_tp_print_json(const st_tp_plan *p, const st_tp_layout *l, const st_layout_plan *whole) {
    printf("{\"n_shards\": %d, \"scheme\": \"%s\", \"moe_split\": \"columns of each expert\", "
           "\"output_tied\": %s, \"shards\": [",
           p->n_shards, SCHEME, output_tied(p, whole) ? "true" : "false");
    for (int s = 0; s < p->n_shards; s++) {
        printf(s ? ",\n    {\"shard\": %d, " : "\n    {\"shard\": %d, ", s);
        json_range("q_heads", st_tp_q_heads(p, s));
        printf(", ");
        json_range("kv_heads", st_tp_kv_heads(p, s));
        printf(", ");
        json_range("ffn_columns", st_tp_ff_cols(p, s));
        printf(", ");
        json_range("vocab_rows", st_tp_vocab_rows(p, s));
        printf(", \"split_bytes\": %zu, \"bytes\": %zu}", l->shard_bytes[s], l->shard_bytes[s] + l->replicated_bytes);
    }
    printf("],\n  \"entries\": [");
    for (uint64_t i = 0; i < l->n_entries; i++) {
        const st_tp_layout_entry *e = &l->entries[i];
        const st_layout_entry *t = &e->entry;
        char why[256];
        st_layout_entry_explain(t, whole->alias, why, sizeof(why));
        printf(i ? ",\n    {\"name\": " : "\n    {\"name\": ");
        cli_json_string(stdout, t->name, t->name_len);
        printf(", \"shard\": %d, ", e->shard);
        json_range("cols", e->slice.cols);
        printf(", \"rows\": [");
        for (int r = 0; r < e->slice.n_row_ranges; r++)
            printf("%s[%" PRId64 ", %" PRId64 "]", r ? ", " : "", e->slice.rows[r].start,
                   e->slice.rows[r].start + e->slice.rows[r].n);
        printf("], \"type\": \"%s\", \"ne\": [%" PRId64 ", %" PRId64 ", %" PRId64 "], \"packed_nb1\": %zu, "
               "\"nb\": [%zu, %zu, %zu, %zu], \"padded\": %s, \"reason\": \"%s\", \"why\": ",
               st_type_name(t->tensor.type), t->tensor.ne[0], t->tensor.ne[1], t->tensor.ne[2], t->packed_row_bytes,
               t->tensor.nb[0], t->tensor.nb[1], t->tensor.nb[2], t->tensor.nb[3], t->padded ? "true" : "false",
               st_pad_reason_name(t->reason));
        cli_json_string(stdout, why, strlen(why));
        printf(", \"extra_bytes\": %zu, \"auto\": %s}", t->extra_bytes,
               t->auto_source == ST_PAD_AUTO_NONE      ? "null"
               : t->auto_source == ST_PAD_AUTO_BUILTIN ? "\"builtin\""
                                                      : "\"calibrated\"");
    }
    printf("],\n  \"n_padded\": %" PRIu64 ", \"total_planned_bytes\": %zu, \"total_extra_bytes\": %zu, "
           "\"replicated_bytes\": %zu}",
           l->n_padded, l->total_planned_bytes, l->total_extra_bytes, l->replicated_bytes);
}
