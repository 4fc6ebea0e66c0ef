/* The runner: a batch's indices to the backend, its graph (kept per shape of batch), and
 * the logits back (runner.h).
 *
 * Steps run padded to a bucket of shapes, so that the graph of a bucket, built once, serves
 * every step that rounds up to it (a backend records it once and replays it):
 *   decode batches (every token alone in its sequence, every logit wanted): to a bucket of
 *     sizes (DECODE_BUCKETS);
 *   mixed batches of a paged cache (decode tokens beside prompt chunks): the singles to
 *     their decode bucket S, the run tokens to a multiple of a step that grows with them
 *     (run_tokens_bucket), the runs to a power-of-two count of slots, of which the padding
 *     tokens after the runs are one more, the logits rows to S + the slots. The runs are
 *     data uploaded with the indices (st_kv_pages.runs_dev), unused slots empty; the graphs
 *     of the N_PADDED shapes used last are kept.
 * Padding tokens sit at position 0 of the padding row of the block table (every block the
 * pool's padding block); padded logits rows repeat token 0's. Other batches (one sequence's
 * prompt, shapes past the runner's room) keep their graph while the next batch has the
 * same shape.
 *
 * Indices in backend memory, copied from one page-locked host array by the graph's own
 * uploads: for a graph of M tokens, [ids M][positions M][slots M][seq M][out n_out] from
 * offset 0, the runs I32 [3, slots] (m0, n, seq) from offset 5 * G (G the most tokens a
 * graph holds), and the block table [(max_seqs + 1) * max_blocks] (the last row the
 * padding row) after them, at 5 * G + 3 * RS (RS the most run slots). */
#include <stdlib.h>
#include <string.h>

#include "model/runner_internal.h"

static const int64_t DECODE_BUCKETS[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024};
#define N_DECODE_BUCKETS ((int)(sizeof(DECODE_BUCKETS) / sizeof(DECODE_BUCKETS[0])))
#define N_PADDED 32 /* mixed shapes whose graphs are kept */

/* The smallest power of two above n (n >= 0). */
static int32_t pow2_above(int32_t n) {
    int32_t p = 1;
    while (p <= n) p *= 2;
    return p;
}

/* The index of the smallest decode bucket of at least n tokens, or -1 past the last. */
static int decode_bucket(int64_t n) {
    for (int k = 0; k < N_DECODE_BUCKETS; k++)
        if (DECODE_BUCKETS[k] >= n) return k;
    return -1;
}

/* What makes two batches the same shape of graph. */
typedef struct runner_shape {
    int64_t M, n_single, n_out;
    int32_t n_runs;      /* runs; of a replayed graph, run slots */
    bool gather, paged;
    bool replay;         /* the graph is replayed: its runs are data (every other field is its shape) */
} runner_shape;

/* A graph kept for a shape of batch. */
typedef struct runner_graph {
    st_graph g;
    bool built;
    runner_shape sh;
    st_kv_pages pages;
    st_attn_run *runs;   /* [run slots] the runs the graph's pages name (rewritten before each
                            compute of a replayed graph) */
    uint64_t used;       /* the step that used it last (which padded graph goes first) */
} runner_graph;

struct st_runner {
    st_model *model;
    st_kv_pool *pool;
    st_runner_options opt;
    int64_t room;           /* G: the most tokens a graph holds (max_tokens and padding) */
    int32_t run_slots;      /* RS: the most run slots of a graph (> max_seqs) */
    void *scratch;          /* the forward pass's activations */
    st_forward_bufs f;
    int32_t *host_idx;      /* page-locked: the indices of the next step (layout above) */
    void *dev_idx;          /* their backend copy */
    size_t idx_ints;
    float *logits_host;     /* page-locked [V, logits_cap]: the output head writes there, or
                               with candidates the rows asked for are copied there */
    int64_t logits_cap;
    st_tensor logits;       /* what the head writes: logits_host, or with candidates logits_dev */
    void *logits_dev;       /* with candidates: [V, logits_cap] in backend memory */
    int32_t *cand_ids;      /* page-locked [logits_cap][k] */
    float *cand_vals;       /* page-locked [logits_cap][k + 1] */
    st_tensor cand_ids_t, cand_vals_t;
    /* with candidates, the draws from whole rows (st_graph_draw), a graph of their own that
     * runs after the step's only when a row is drawn (or after it, st_runner_draw_rows):
     * page-locked params F32 [6, cap], words I32 [4, cap] and penalized tokens I32
     * [2 ST_DRAW_MAX_PENALIZED, cap] uploaded to draw_dev, the drawn ids and logits [cap]
     * written back */
    float *draw_params;
    int32_t *draw_words, *draw_penalized, *drawn_ids;
    float *drawn_logits;
    void *draw_dev;
    runner_graph draw;
    int64_t last_n_out;     /* logits rows of the last st_runner_eval_out (st_runner_draw_rows) */
    runner_graph decode[N_DECODE_BUCKETS];
    runner_graph padded[N_PADDED];
    runner_graph exact;
    uint64_t steps;         /* prepared so far */
    st_attn_run *runs;      /* [run_slots] this step's runs (in graph order) */
    uint8_t *seen;          /* [max_seqs] a sequence row's place in this step (validation) */
};

/* ---- memory --------------------------------------------------------------------------- */

/* A packed tensor of `type` with ne = {n0, n1, n2}, placed at *offset in base. */
static st_tensor place(void *base, size_t *offset, st_type type, int64_t n0, int64_t n1, int64_t n2) {
    st_tensor t = {.type = type, .ne = {n0, n1, n2, 1}};
    const bool ok = st_tensor_set_packed_strides(&t);
    ST_ASSERT(ok);
    t.data = base ? (char *)base + *offset : NULL;
    *offset += (st_tensor_nbytes(&t) + 255) / 256 * 256;
    return t;
}

/* Lays out every scratch tensor; with base NULL it only measures. */
static size_t layout_scratch(const st_model *m, int64_t U, st_forward_bufs *f, void *base) {
    const st_hparams *hp = &m->hp;
    const int64_t D = hp->n_embd, hd = hp->head_dim;
    const int64_t Hq = hp->n_head * hd, Hk = hp->n_head_kv * hd, F = hp->n_ff, K = hp->n_expert_used;
    size_t off = 0;
    f->x = place(base, &off, ST_TYPE_F32, D, U, 1);
    f->h = place(base, &off, ST_TYPE_F32, D, U, 1);
    f->qkv = place(base, &off, ST_TYPE_F32, Hq + 2 * Hk, U, 1);
    f->attn = place(base, &off, ST_TYPE_F32, Hq, U, 1);
    f->proj = place(base, &off, ST_TYPE_F32, D, U, 1);
    f->x_out = place(base, &off, ST_TYPE_F32, D, U, 1);
    if (hp->n_expert > 0) {
        f->ffn_a = place(base, &off, ST_TYPE_F32, F, K, U);
        f->ffn_b = place(base, &off, ST_TYPE_F32, F, K, U);
        f->moe_logits = place(base, &off, ST_TYPE_F32, hp->n_expert, U, 1);
        f->moe_ids = place(base, &off, ST_TYPE_I32, K, U, 1);
        f->moe_weights = place(base, &off, ST_TYPE_F32, K, U, 1);
        f->moe_down = place(base, &off, ST_TYPE_F32, D, K, U);
    } else {
        f->ffn_a = place(base, &off, ST_TYPE_F32, 2 * F, U, 1);
        f->ffn_b = place(base, &off, ST_TYPE_F32, F, U, 1);
    }
    if (m->tp.n_shards > 1) f->partial = place(base, &off, ST_TYPE_F32, D, U, m->tp.n_shards - 1);
    return off;
}

/* Host memory through the backend's host_alloc where it has one (page-locked on CUDA). */
static st_status host_alloc(st_backend *b, size_t nbytes, void **out, st_error *err) {
    if (b->iface->host_alloc) return b->iface->host_alloc(b, nbytes, out, err);
    *out = malloc(nbytes ? nbytes : 1);
    return *out ? ST_OK : st_error_set(err, ST_ERROR_NOMEM, "out of host memory (%zu bytes)", nbytes);
}

static void host_free(st_backend *b, void *ptr) {
    if (!ptr) return;
    if (b->iface->host_free) b->iface->host_free(b, ptr);
    else free(ptr);
}

static bool runs_equal(const st_attn_run *a, const st_attn_run *b, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (a[i].m0 != b[i].m0 || a[i].n != b[i].n || a[i].seq != b[i].seq) return false;
    return true;
}

static void graph_drop(runner_graph *rg) {
    st_graph_clear(&rg->g);
    rg->built = false;
}

static void free_logits(st_runner *r) {
    st_backend *b = r->model->backend;
    host_free(b, r->logits_host);
    host_free(b, r->cand_ids);
    host_free(b, r->cand_vals);
    host_free(b, r->draw_params);
    host_free(b, r->draw_words);
    host_free(b, r->draw_penalized);
    host_free(b, r->drawn_ids);
    host_free(b, r->drawn_logits);
    if (r->logits_dev) b->iface->dealloc(b, r->logits_dev);
    if (r->draw_dev) b->iface->dealloc(b, r->draw_dev);
    r->logits_host = r->logits_dev = r->draw_dev = NULL;
    r->cand_ids = r->draw_words = r->draw_penalized = r->drawn_ids = NULL;
    r->cand_vals = r->draw_params = r->drawn_logits = NULL;
    r->logits_cap = 0;
}

/* The logits buffers for n rows: page-locked host memory the output head writes straight
 * into; with candidates also the head's device buffer, the candidates' page-locked arrays
 * and the draws'. Growing them drops every graph (they write the old ones). */
static st_status ensure_logits(st_runner *r, int64_t n, st_error *err) {
    if (n <= r->logits_cap) return ST_OK;
    st_backend *b = r->model->backend;
    for (int i = 0; i < N_DECODE_BUCKETS; i++) graph_drop(&r->decode[i]);
    for (int i = 0; i < N_PADDED; i++) graph_drop(&r->padded[i]);
    graph_drop(&r->exact);
    graph_drop(&r->draw);
    free_logits(r);
    const int64_t V = r->model->hp.n_vocab;
    const int32_t k = r->opt.n_candidates;
    size_t off = 0;
    st_tensor t = place(NULL, &off, ST_TYPE_F32, V, n, 1);
    st_status s = host_alloc(b, off, (void **)&r->logits_host, err);
    if (s == ST_OK && k > 0) s = b->iface->alloc(b, off, &r->logits_dev, err);
    if (s == ST_OK && k > 0) {
        size_t ioff = 0, voff = 0;
        r->cand_ids_t = place(NULL, &ioff, ST_TYPE_I32, k, n, 1);
        r->cand_vals_t = place(NULL, &voff, ST_TYPE_F32, k + 1, n, 1);
        if ((s = host_alloc(b, ioff, (void **)&r->cand_ids, err)) == ST_OK)
            s = host_alloc(b, voff, (void **)&r->cand_vals, err);
        r->cand_ids_t.data = r->cand_ids;
        r->cand_vals_t.data = r->cand_vals;
        const size_t one = (size_t)n * sizeof(int32_t), pen = 2 * ST_DRAW_MAX_PENALIZED * one;
        if (s == ST_OK) s = host_alloc(b, 6 * one, (void **)&r->draw_params, err);
        if (s == ST_OK) s = host_alloc(b, 4 * one, (void **)&r->draw_words, err);
        if (s == ST_OK) s = host_alloc(b, pen, (void **)&r->draw_penalized, err);
        if (s == ST_OK) s = host_alloc(b, one, (void **)&r->drawn_ids, err);
        if (s == ST_OK) s = host_alloc(b, one, (void **)&r->drawn_logits, err);
        if (s == ST_OK) s = b->iface->alloc(b, 10 * one + pen, &r->draw_dev, err);
    }
    if (s != ST_OK) return st_error_wrap(err, "allocating the logits of %lld tokens", (long long)n), s;
    t.data = k > 0 ? r->logits_dev : (void *)r->logits_host;
    r->logits = t;
    r->logits_cap = n;
    return ST_OK;
}

st_status st_runner_init(st_model *m, st_kv_pool *pool, const st_runner_options *o, st_runner **out,
                         st_error *err) {
    *out = NULL;
    if (o->max_tokens < 1 || o->max_seqs < 1 || o->max_blocks < 1 || o->n_candidates < 0 ||
        o->n_candidates > ST_RUNNER_MAX_CANDIDATES || o->n_candidates > m->hp.n_vocab ||
        o->max_tokens > INT32_MAX / 8 || (int64_t)o->max_seqs * o->max_blocks > INT32_MAX / 8)
        return st_error_set(err, ST_ERROR_INVALID,
                            "runner sizes out of range: %lld tokens, %d sequences, %d blocks a sequence",
                            (long long)o->max_tokens, (int)o->max_seqs, (int)o->max_blocks);
    st_runner *r = calloc(1, sizeof(*r));
    if (!r) return st_error_set(err, ST_ERROR_NOMEM, "out of host memory");
    r->model = m;
    r->pool = pool;
    r->opt = *o;
    st_backend *b = m->backend;
    st_status s = ST_ERROR_NOMEM;
    /* room for the padding of a mixed batch of up to U tokens with up to 128 decode tokens
     * (their bucket adds at most 31) and its run tokens' (at most an eighth of them, or
     * 15); a batch that needs more runs unpadded */
    const int64_t U = o->max_tokens;
    r->room = U + U / 8 + 48;
    r->run_slots = pow2_above(o->max_seqs);
    for (int i = 0; i < N_DECODE_BUCKETS; i++) st_graph_init(&r->decode[i].g);
    for (int i = 0; i < N_PADDED; i++) st_graph_init(&r->padded[i].g);
    st_graph_init(&r->exact.g);
    st_graph_init(&r->draw.g);
    r->runs = calloc((size_t)r->run_slots, sizeof(st_attn_run));
    r->seen = calloc((size_t)o->max_seqs, 1);
    bool ok = r->runs && r->seen;
    for (int i = 0; i < N_PADDED; i++) ok = ok && (r->padded[i].runs = calloc((size_t)r->run_slots, sizeof(st_attn_run)));
    if (!ok || !(r->exact.runs = calloc((size_t)r->run_slots, sizeof(st_attn_run)))) {
        st_error_set(err, ST_ERROR_NOMEM, "out of host memory");
        goto fail;
    }
    const size_t scratch_bytes = layout_scratch(m, r->room, &r->f, NULL);
    if ((s = b->iface->alloc(b, scratch_bytes, &r->scratch, err)) != ST_OK) {
        st_error_wrap(err, "allocating activations for %lld-token batches", (long long)U);
        goto fail;
    }
    layout_scratch(m, r->room, &r->f, r->scratch);
    const size_t table_at = (size_t)(5 * r->room) + 3 * (size_t)r->run_slots;
    r->idx_ints = table_at + (size_t)(o->max_seqs + 1) * (size_t)o->max_blocks;
    if ((s = b->iface->alloc(b, r->idx_ints * sizeof(int32_t), &r->dev_idx, err)) != ST_OK ||
        (s = host_alloc(b, r->idx_ints * sizeof(int32_t), (void **)&r->host_idx, err)) != ST_OK) {
        st_error_wrap(err, "allocating the indices of %lld-token batches", (long long)U);
        goto fail;
    }
    memset(r->host_idx, 0, r->idx_ints * sizeof(int32_t));
    /* the padding row: every block the padding block */
    int32_t *pad_row = r->host_idx + table_at + (size_t)o->max_seqs * (size_t)o->max_blocks;
    for (int32_t i = 0; i < o->max_blocks; i++) pad_row[i] = (int32_t)pool->n_blocks;
    /* logits rows for a decode step of every sequence (its bucket) and a mixed step of up
     * to seven prompt runs beside it (eight run slots), so that the usual steps never grow
     * them (growing drops every graph) */
    int64_t rows = o->max_seqs < U ? o->max_seqs : U;
    const int kb = decode_bucket(rows);
    if (kb >= 0 && DECODE_BUCKETS[kb] <= U) rows = DECODE_BUCKETS[kb];
    if ((s = ensure_logits(r, rows + 8 < r->room ? rows + 8 : r->room, err)) != ST_OK) goto fail;
    *out = r;
    return ST_OK;
fail:
    st_runner_free(r);
    return s;
}

void st_runner_free(st_runner *r) {
    if (!r) return;
    st_backend *b = r->model->backend;
    for (int i = 0; i < N_DECODE_BUCKETS; i++) st_graph_free(&r->decode[i].g);
    for (int i = 0; i < N_PADDED; i++) st_graph_free(&r->padded[i].g);
    st_graph_free(&r->exact.g); /* (before the memory their backend state addresses) */
    st_graph_free(&r->draw.g);
    if (r->scratch) b->iface->dealloc(b, r->scratch);
    if (r->dev_idx) b->iface->dealloc(b, r->dev_idx);
    host_free(b, r->host_idx);
    free_logits(r);
    free(r->runs);
    free(r->seen);
    for (int i = 0; i < N_PADDED; i++) free(r->padded[i].runs);
    free(r->exact.runs);
    free(r);
}

/* ---- a batch -------------------------------------------------------------------------- */

/* The step's runs (after the singles) into r->runs; checks the batch against the rules of
 * runner.h and the runner's sizes. *n_runs: how many. */
static st_status check_batch(st_runner *r, const st_batch *b, int32_t *n_runs, st_error *err) {
    const st_hparams *hp = &r->model->hp;
    const int64_t n = b->n_tokens;
    if (n < 1 || n > r->opt.max_tokens)
        return st_error_set(err, ST_ERROR_INVALID, "a batch of %lld tokens: this runner takes 1 to %lld",
                            (long long)n, (long long)r->opt.max_tokens);
    if (b->n_single < 0 || b->n_single > n)
        return st_error_set(err, ST_ERROR_INVALID, "n_single %lld of a %lld-token batch", (long long)b->n_single,
                            (long long)n);
    const bool paged = b->block_table != NULL;
    const int64_t max_pos = paged ? (int64_t)(b->max_blocks < r->opt.max_blocks ? b->max_blocks : r->opt.max_blocks) *
                                        ST_KV_BLOCK_TOKENS
                                  : r->pool->n_blocks * ST_KV_BLOCK_TOKENS;
    if (paged && (b->n_seq < 1 || b->n_seq > r->opt.max_seqs || b->max_blocks < 1))
        return st_error_set(err, ST_ERROR_INVALID, "a block table of %d sequences (this runner takes 1 to %d)",
                            (int)b->n_seq, (int)r->opt.max_seqs);
    memset(r->seen, 0, (size_t)r->opt.max_seqs);
    int32_t runs = 0;
    for (int64_t i = 0; i < n; i++) {
        if (b->tokens[i] < 0 || b->tokens[i] >= hp->n_vocab)
            return st_error_set(err, ST_ERROR_INVALID, "token id %d at index %lld is outside the vocabulary (0..%lld)",
                                b->tokens[i], (long long)i, (long long)hp->n_vocab - 1);
        if (b->pos[i] < 0 || b->pos[i] >= max_pos)
            return st_error_set(err, ST_ERROR_INVALID,
                                "position %d at index %lld is past the cache this batch can address (%lld tokens)",
                                b->pos[i], (long long)i, (long long)max_pos);
        const int32_t s = b->seq[i];
        if (s < 0 || s >= (paged ? b->n_seq : 1))
            return st_error_set(err, ST_ERROR_INVALID, "sequence row %d at index %lld: the batch has %d", s,
                                (long long)i, paged ? (int)b->n_seq : 1);
        const bool cont = i > b->n_single && b->seq[i - 1] == s;
        if (cont && b->pos[i] != b->pos[i - 1] + 1)
            return st_error_set(err, ST_ERROR_INVALID, "positions of sequence row %d jump from %d to %d at index %lld",
                                s, b->pos[i - 1], b->pos[i], (long long)i);
        if (!cont) { /* a single, or the start of a run: its sequence not seen before */
            if (r->seen[s])
                return st_error_set(err, ST_ERROR_INVALID,
                                    "sequence row %d appears twice in the batch (its tokens must be consecutive)", s);
            r->seen[s] = 1;
            if (i >= b->n_single) {
                r->runs[runs].m0 = i;
                r->runs[runs].n = 0;
                r->runs[runs++].seq = s;
            }
        }
        if (i >= b->n_single) r->runs[runs - 1].n++;
        if (paged) {
            const int32_t blk = b->block_table[(size_t)s * (size_t)b->max_blocks + (size_t)(b->pos[i] / ST_KV_BLOCK_TOKENS)];
            if (blk < 0 || blk >= r->pool->n_blocks)
                return st_error_set(err, ST_ERROR_INVALID, "block %d of sequence row %d is outside the pool (0..%lld)",
                                    blk, s, (long long)r->pool->n_blocks - 1);
        }
    }
    if (paged) /* every block a token can read, not only the ones it writes */
        for (int64_t i = 0; i < n; i++)
            for (int32_t k = 0; k <= b->pos[i] / ST_KV_BLOCK_TOKENS; k++) {
                const int32_t blk = b->block_table[(size_t)b->seq[i] * (size_t)b->max_blocks + (size_t)k];
                if (blk < 0 || blk >= r->pool->n_blocks)
                    return st_error_set(err, ST_ERROR_INVALID,
                                        "block %d of sequence row %d is outside the pool (0..%lld)", blk, b->seq[i],
                                        (long long)r->pool->n_blocks - 1);
            }
    const int64_t n_out = b->out ? b->n_out : n;
    if (n_out < 0 || n_out > n)
        return st_error_set(err, ST_ERROR_INVALID, "%lld logits rows of a %lld-token batch", (long long)n_out,
                            (long long)n);
    for (int64_t i = 0; b->out && i < n_out; i++)
        if (b->out[i] < 0 || b->out[i] >= n || (i > 0 && b->out[i] <= b->out[i - 1]))
            return st_error_set(err, ST_ERROR_INVALID, "logits rows must be ascending token indices of the batch");
    *n_runs = runs;
    return ST_OK;
}

static bool shape_equal(const runner_shape *a, const runner_shape *b) {
    return a->M == b->M && a->n_single == b->n_single && a->n_out == b->n_out && a->n_runs == b->n_runs &&
           a->gather == b->gather && a->paged == b->paged && a->replay == b->replay;
}

/* The graph of shape sh in rg, the runs r->runs[0 .. sh->n_runs): kept if rg holds that
 * shape (and, unless it is replayed, those runs), else built. */
static st_status graph_for(st_runner *r, runner_graph *rg, const runner_shape *sh, st_graph **out, st_error *err) {
    rg->used = r->steps;
    const bool kept = rg->built && shape_equal(&rg->sh, sh) && (sh->replay || runs_equal(rg->runs, r->runs, sh->n_runs));
    /* the runs the graph's pages name: a replayed graph's are this step's (host launches read them) */
    if (sh->n_runs > 0) memcpy(rg->runs, r->runs, (size_t)sh->n_runs * sizeof(st_attn_run));
    if (kept) {
        *out = &rg->g;
        return ST_OK;
    }
    st_status s = ensure_logits(r, sh->n_out, err); /* (may drop every graph) */
    if (s != ST_OK) return s;
    graph_drop(rg);
    const int64_t M = sh->M, n_out = sh->n_out, G = r->room;
    int32_t *dev = r->dev_idx;
    st_tensor idx = place(NULL, &(size_t){0}, ST_TYPE_I32, M, 1, 1);
    st_forward_io io = {.n_out = n_out, .logits = &r->logits};
    io.ids = idx, io.ids.data = dev;
    io.pos = idx, io.pos.data = dev + M;
    io.slots = idx, io.slots.data = dev + 2 * M;
    st_tensor seq = idx, out_rows = place(NULL, &(size_t){0}, ST_TYPE_I32, n_out > 0 ? n_out : 1, 1, 1);
    seq.data = dev + 3 * M;
    out_rows.data = dev + 4 * M;
    if (sh->gather) io.out_rows = &out_rows;
    st_tensor runs = place(NULL, &(size_t){0}, ST_TYPE_I32, 3, sh->n_runs > 0 ? sh->n_runs : 1, 1);
    runs.data = dev + 5 * G;
    st_tensor table = place(NULL, &(size_t){0}, ST_TYPE_I32, r->opt.max_blocks, r->opt.max_seqs + 1, 1);
    table.data = dev + 5 * G + 3 * r->run_slots;
    rg->pages = (st_kv_pages){.seq = &seq, .table = &table, .n_single = sh->n_single, .n_runs = sh->n_runs,
                              .runs = rg->runs, .runs_dev = sh->replay && sh->n_runs > 0 ? &runs : NULL};
    if (sh->paged) io.pages = &rg->pages;
    st_graph *g = &rg->g;
    g->replay = sh->replay;
    st_graph_upload(g, dev, r->host_idx, (size_t)(4 * M + (sh->gather ? n_out : 0)) * sizeof(int32_t));
    if (rg->pages.runs_dev) st_graph_upload(g, runs.data, r->host_idx + 5 * G, (size_t)(3 * sh->n_runs) * sizeof(int32_t));
    if (sh->paged)
        st_graph_upload(g, table.data, r->host_idx + 5 * G + 3 * r->run_slots,
                        (size_t)(r->opt.max_seqs + 1) * (size_t)r->opt.max_blocks * sizeof(int32_t));
    st_forward_build(r->model, r->pool, &r->f, g, &io);
    if (r->opt.n_candidates > 0 && n_out > 0) { /* each row's candidates straight to the host */
        st_tensor lg = r->logits, ci = r->cand_ids_t, cv = r->cand_vals_t;
        lg.ne[1] = ci.ne[1] = cv.ne[1] = n_out;
        st_graph_top_k(g, &ci, &cv, &lg, r->opt.n_candidates);
    }
    rg->pages.seq = rg->pages.table = rg->pages.runs_dev = NULL; /* (the graph keeps its own copies) */
    rg->sh = *sh;
    rg->built = true;
    *out = g;
    return ST_OK;
}

/* The tokens of a padded bucket of n run tokens: a multiple of a step of an eighth of
 * them (a power of two, at least 16), so that at most an eighth is padding. */
static int64_t run_tokens_bucket(int64_t n) {
    int64_t step = 16;
    while (step * 16 <= n) step *= 2;
    return (n + step - 1) / step * step;
}

/* The padded shape of a mixed batch of a paged cache: n tokens, n_single singles, n_runs
 * runs, n_out logits rows; false when it does not fit the runner's room or asks for more
 * rows than one a single and a run. */
static bool padded_shape(const st_runner *r, int64_t n, int64_t n_single, int32_t n_runs, int64_t n_out,
                         runner_shape *sh) {
    const int kb = n_single > 0 ? decode_bucket(n_single) : -1;
    if (n_single > 0 && kb < 0) return false;
    const int64_t S = kb >= 0 ? DECODE_BUCKETS[kb] : 0;
    const int32_t slots = pow2_above(n_runs); /* the runs and the padding's */
    const int64_t M = S + run_tokens_bucket(n - n_single);
    /* logits rows: none, or room for a row of each single and each run's last token */
    if (M > r->room || slots > r->run_slots || n_out > n_single + n_runs) return false;
    const int64_t rows = n_out == 0 ? 0 : S + slots < M ? S + slots : M;
    *sh = (runner_shape){.M = M, .n_single = S, .n_out = rows, .n_runs = slots, .gather = true, .paged = true,
                         .replay = true};
    return true;
}

/* The padded graph of shape sh: the one kept for it, else the least recently used slot's. */
static runner_graph *padded_graph(st_runner *r, const runner_shape *sh) {
    runner_graph *oldest = &r->padded[0];
    for (int i = 0; i < N_PADDED; i++) {
        runner_graph *rg = &r->padded[i];
        if (rg->built && shape_equal(&rg->sh, sh)) return rg;
        if (!rg->built || (oldest->built && rg->used < oldest->used)) oldest = rg;
    }
    return oldest;
}

st_status st_runner_prepare(st_runner *r, const st_batch *b, st_graph **out, st_error *err) {
    *out = NULL;
    int32_t n_runs = 0;
    st_status s = check_batch(r, b, &n_runs, err);
    if (s != ST_OK) return s;
    r->steps++;
    const int64_t n = b->n_tokens, U = r->opt.max_tokens, G = r->room;
    const bool paged = b->block_table != NULL;
    const int64_t n_out = b->out ? b->n_out : n;
    bool all_out = n_out == n;
    for (int64_t i = 0; b->out && all_out && i < n; i++) all_out = b->out[i] == i;
    /* logits: every token's, the last n_out as a view, or gathered rows */
    bool suffix = true;
    for (int64_t i = 0; b->out && i < n_out; i++) suffix = suffix && b->out[i] == n - n_out + i;
    const bool gather = !all_out && !suffix;
    /* the shape: decode batches padded to their bucket (a contiguous cache holds one
     * sequence), mixed ones of a paged cache padded (padded_shape), the rest exact */
    runner_shape sh = {.M = n, .n_single = b->n_single, .n_out = n_out, .n_runs = n_runs, .gather = gather,
                       .paged = paged};
    runner_graph *rg = &r->exact;
    const bool decode = all_out && (paged ? b->n_single == n : n == 1);
    const int kb = decode ? decode_bucket(n) : -1;
    if (kb >= 0 && DECODE_BUCKETS[kb] <= U) {
        const int64_t M = DECODE_BUCKETS[kb];
        sh = (runner_shape){.M = M, .n_single = M, .n_out = M, .paged = paged, .replay = true};
        rg = &r->decode[kb];
    }
    const bool mixed = !decode && paged && padded_shape(r, n, b->n_single, n_runs, n_out, &sh);
    if (mixed) rg = padded_graph(r, &sh);
    const int64_t M = sh.M;
    /* batch token i is graph token i, or after the padded singles i + shift */
    const int64_t n_single = b->n_single, shift = mixed ? sh.n_single - n_single : 0;

    /* the indices, in the layout of a graph of M tokens */
    int32_t *h = r->host_idx;
    const int64_t pad_slot = r->pool->n_blocks * ST_KV_BLOCK_TOKENS;
    for (int64_t j = 0; j < M; j++) {
        const int64_t i = j < n_single ? j : j - shift; /* its batch token, if in [n_single, n) */
        const bool real = j < n_single || (j >= n_single + shift && i < n);
        h[j] = real ? b->tokens[i] : 0;
        h[M + j] = real ? b->pos[i] : 0;
        int64_t slot = pad_slot;
        if (real && paged) {
            const int32_t *row = b->block_table + (size_t)b->seq[i] * (size_t)b->max_blocks;
            slot = st_kv_slot(row, b->pos[i]);
        } else if (real) {
            slot = b->pos[i];
        }
        h[2 * M + j] = (int32_t)slot;
        h[3 * M + j] = real ? b->seq[i] : r->opt.max_seqs; /* the padding row */
    }
    for (int64_t k = 0; sh.gather && k < sh.n_out; k++) { /* padded rows: token 0's */
        const int64_t t = k >= n_out ? 0 : b->out ? b->out[k] : k;
        h[4 * M + k] = (int32_t)(t < n_single ? t : t + shift);
    }
    if (mixed) { /* the runs moved past the padded singles, the padding's, empty slots */
        for (int32_t k = 0; k < n_runs; k++) r->runs[k].m0 += shift;
        const int64_t end = n + shift;
        for (int32_t k = n_runs; k < sh.n_runs; k++)
            r->runs[k] = (st_attn_run){.m0 = k == n_runs && end < M ? end : 0, .n = k == n_runs ? M - end : 0,
                                       .seq = r->opt.max_seqs};
        int32_t *hr = h + 5 * G;
        for (int32_t k = 0; k < sh.n_runs; k++)
            hr[3 * k] = (int32_t)r->runs[k].m0, hr[3 * k + 1] = (int32_t)r->runs[k].n, hr[3 * k + 2] = r->runs[k].seq;
    }
    if (paged) {
        const int32_t cols = b->max_blocks < r->opt.max_blocks ? b->max_blocks : r->opt.max_blocks;
        for (int32_t sq = 0; sq < b->n_seq; sq++) {
            int32_t *dst = h + 5 * G + 3 * r->run_slots + (size_t)sq * (size_t)r->opt.max_blocks;
            const int32_t *src = b->block_table + (size_t)sq * (size_t)b->max_blocks;
            for (int32_t c = 0; c < r->opt.max_blocks; c++) dst[c] = c < cols ? src[c] : (int32_t)r->pool->n_blocks;
        }
    }
    int64_t max_pos = 0;
    for (int64_t i = 0; i < n; i++)
        if (b->pos[i] > max_pos) max_pos = b->pos[i];

    st_graph *g = NULL;
    if ((s = graph_for(r, rg, &sh, &g, err)) != ST_OK) return s;
    g->n_kv = max_pos + 1;
    *out = g;
    return ST_OK;
}

/* The draws draw[0 .. n_out) ask for (temp 0: none), a graph after the step's (logits rows
 * already in logits_dev): the rows' params, words and penalized tokens uploaded, the
 * drawn ids and logits written to host memory. The graph is kept while the steps have as
 * many logits rows. *any: whether a row is drawn. */
static st_status queue_draws(st_runner *r, const st_row_draw *draw, int64_t n_out, bool *any, st_error *err) {
    *any = false;
    for (int64_t j = 0; draw && j < n_out; j++) *any |= draw[j].temp > 0.0f;
    if (!*any) return ST_OK;
    if (r->opt.n_candidates == 0)
        return st_error_set(err, ST_ERROR_INVALID, "draws on the backend need a runner of candidates");
    const int64_t P = 2 * ST_DRAW_MAX_PENALIZED; /* a row's penalized pairs */
    for (int64_t j = 0; j < n_out; j++) {
        const st_row_draw *d = &draw[j];
        const bool drawn = d->temp > 0.0f;
        float *p = r->draw_params + 6 * j;
        int32_t *w = r->draw_words + 4 * j;
        p[0] = drawn ? d->temp : 0.0f, p[1] = d->min_p, p[2] = d->top_p;
        p[3] = d->repeat_penalty, p[4] = d->frequency_penalty, p[5] = d->presence_penalty;
        memcpy(w, d->u, sizeof(d->u));
        w[2] = d->top_k, w[3] = drawn ? d->n_penalized : 0;
        ST_ASSERT(w[3] >= 0 && w[3] <= ST_DRAW_MAX_PENALIZED);
        if (w[3] > 0) memcpy(r->draw_penalized + P * j, d->penalized, 2 * (size_t)w[3] * sizeof(int32_t));
    }
    runner_graph *rg = &r->draw;
    if (!rg->built || rg->sh.n_out != n_out) {
        graph_drop(rg);
        const size_t one = (size_t)n_out * sizeof(int32_t);
        st_tensor lg = r->logits, params = place(NULL, &(size_t){0}, ST_TYPE_F32, 6, n_out, 1);
        st_tensor words = place(NULL, &(size_t){0}, ST_TYPE_I32, 4, n_out, 1);
        st_tensor pen = place(NULL, &(size_t){0}, ST_TYPE_I32, P, n_out, 1);
        st_tensor ids = place(NULL, &(size_t){0}, ST_TYPE_I32, n_out, 1, 1);
        st_tensor drawn = place(NULL, &(size_t){0}, ST_TYPE_F32, n_out, 1, 1);
        lg.ne[1] = n_out;
        params.data = r->draw_dev;
        words.data = (char *)r->draw_dev + 6 * one;
        pen.data = (char *)r->draw_dev + 10 * one;
        ids.data = r->drawn_ids;
        drawn.data = r->drawn_logits;
        st_graph_upload(&rg->g, params.data, r->draw_params, 6 * one);
        st_graph_upload(&rg->g, words.data, r->draw_words, 4 * one);
        st_graph_upload(&rg->g, pen.data, r->draw_penalized, (size_t)P * one);
        st_graph_draw(&rg->g, &ids, &drawn, &lg, &params, &words, &pen);
        rg->sh.n_out = n_out;
        rg->built = true;
    }
    return st_backend_compute(r->model->backend, &rg->g, err);
}

/* Whole logits rows (indices into the step's logits rows, ascending) from logits_dev into
 * logits_host, a read per run of consecutive rows (a step's rows are often all of them:
 * one copy, not one wait a row). Queued: valid after the backend's synchronize. */
static st_status read_rows(st_runner *r, const int32_t *rows, int64_t n, st_error *err) {
    st_backend *be = r->model->backend;
    const size_t row = (size_t)r->model->hp.n_vocab * sizeof(float);
    for (int64_t i = 0, j; i < n; i = j + 1) {
        for (j = i; j + 1 < n && rows[j + 1] == rows[j] + 1;) j++;
        const size_t at = (size_t)rows[i] * row, bytes = (size_t)(j - i + 1) * row;
        st_status s = be->iface->read(be, (char *)r->logits_host + at, (char *)r->logits_dev + at, bytes, err);
        if (s != ST_OK) return s;
    }
    return ST_OK;
}

/* Whether rows[0 .. n) are ascending indices below n_out. */
static bool rows_ascending(const int32_t *rows, int64_t n, int64_t n_out) {
    for (int64_t i = 0; i < n; i++)
        if (!rows || rows[i] < 0 || rows[i] >= n_out || (i > 0 && rows[i] <= rows[i - 1])) return false;
    return true;
}

st_status st_runner_eval_out(st_runner *r, const st_batch *b, st_runner_output *out, st_error *err) {
    memset(out, 0, sizeof(*out));
    r->last_n_out = 0;
    const int64_t n_out = b->out ? b->n_out : b->n_tokens, V = r->model->hp.n_vocab;
    if (!rows_ascending(b->full, b->n_full, n_out))
        return st_error_set(err, ST_ERROR_INVALID, "full logits rows must be ascending indices of the logits rows");
    st_graph *g = NULL;
    st_status s = st_runner_prepare(r, b, &g, err);
    if (s != ST_OK) return s;
    st_backend *be = r->model->backend;
    bool drawn = false;
    if ((s = st_backend_compute(be, g, err)) != ST_OK || (s = queue_draws(r, b->draw, n_out, &drawn, err)) != ST_OK)
        return s;
    const int32_t k = r->opt.n_candidates;
    if (k > 0 && (s = read_rows(r, b->full, b->n_full, err)) != ST_OK) return s;
    if ((s = be->iface->synchronize(be, err)) != ST_OK) return s;
    r->last_n_out = n_out;
    out->n_out = n_out;
    out->n_vocab = V;
    out->logits = r->logits_host;
    out->k = k;
    out->ids = k > 0 ? r->cand_ids : NULL;
    out->vals = k > 0 ? r->cand_vals : NULL;
    out->drawn = drawn ? r->drawn_ids : NULL;
    out->drawn_logits = drawn ? r->drawn_logits : NULL;
    return ST_OK;
}

st_status st_runner_warmup(st_runner *r, int32_t n, st_error *err) {
    const int64_t U = r->opt.max_tokens, pad_slot = r->pool->n_blocks * ST_KV_BLOCK_TOKENS;
    const int64_t max_kv = (int64_t)r->opt.max_blocks * ST_KV_BLOCK_TOKENS;
    st_backend *be = r->model->backend;
    for (int k = 0; k < N_DECODE_BUCKETS; k++) {
        const int64_t M = DECODE_BUCKETS[k];
        if (M > U || (k > 0 && DECODE_BUCKETS[k - 1] >= n)) break;
        int32_t *h = r->host_idx;
        for (int64_t i = 0; i < M; i++)
            h[i] = 0, h[M + i] = 0, h[2 * M + i] = (int32_t)pad_slot, h[3 * M + i] = r->opt.max_seqs;
        const runner_shape sh = {.M = M, .n_single = M, .n_out = M, .paged = true, .replay = true};
        st_graph *g = NULL;
        st_status s = graph_for(r, &r->decode[k], &sh, &g, err);
        for (int64_t n_kv = 1; s == ST_OK; n_kv = n_kv < 64 ? 64 : 2 * n_kv) {
            g->n_kv = n_kv < max_kv ? n_kv : max_kv;
            s = st_backend_compute(be, g, err);
            if (n_kv >= max_kv) break;
        }
        if (s != ST_OK) return st_error_wrap(err, "warming up the decode step of %lld sequences", (long long)M), s;
    }
    return be->iface->synchronize(be, err);
}

st_status st_runner_draw_rows(st_runner *r, const st_row_draw *draw, st_runner_output *out, st_error *err) {
    if (r->opt.n_candidates == 0 || r->last_n_out == 0)
        return st_error_set(err, ST_ERROR_INVALID, "draws after a step come from a runner of candidates that ran one");
    st_backend *be = r->model->backend;
    bool any = false;
    st_status s = queue_draws(r, draw, r->last_n_out, &any, err);
    if (s != ST_OK || (s = be->iface->synchronize(be, err)) != ST_OK) return s;
    if (any) out->drawn = r->drawn_ids, out->drawn_logits = r->drawn_logits;
    return ST_OK;
}

st_status st_runner_eval(st_runner *r, const st_batch *b, const float **logits, st_error *err) {
    *logits = NULL;
    if (r->opt.n_candidates > 0)
        return st_error_set(err, ST_ERROR_INVALID, "a runner of candidates returns them: st_runner_eval_out");
    st_graph *g = NULL;
    st_status s = st_runner_prepare(r, b, &g, err);
    if (s != ST_OK) return s;
    st_backend *be = r->model->backend;
    if ((s = st_backend_compute(be, g, err)) != ST_OK || (s = be->iface->synchronize(be, err)) != ST_OK) return s;
    *logits = r->logits_host;
    return ST_OK;
}
