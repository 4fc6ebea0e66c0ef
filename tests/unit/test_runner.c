/* The runner (stride/runner.h) on the CPU backend: every rule of a batch rejected with a
 * message naming it, decode batches padded to their bucket giving each sequence's logits
 * bit for bit as it gets alone, the three ways of choosing logits rows (all, the last
 * ones, gathered), a runner of candidates' whole rows (asked for, and read after the
 * step) and draws, block copies, and a prompt split across runs of different batches. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "model/runner_internal.h"
#include "stride/cpu_ops.h"
#include "stride/runner.h"
#include "test_engine_common.h"

#define NB 8   /* pool blocks */
#define MB 2   /* blocks a sequence */
#define U 16   /* tokens a batch */
#define S 4    /* sequences a batch */

typedef struct fx {
    test_model tm;
    st_kv_pool *pool;
    st_runner *runner;
    int32_t table[S * MB]; /* sequence s: blocks 2s, 2s + 1 */
} fx;

static void fx_open(fx *f) {
    test_model_load(&f->tm, "llama-f32.gguf");
    st_error err = {0};
    const st_runner_options ro = {.max_tokens = U, .max_seqs = S, .max_blocks = MB};
    if (st_kv_pool_init(f->tm.model, NB, ST_TYPE_F32, &f->pool, &err) != ST_OK ||
        st_runner_init(f->tm.model, f->pool, &ro, &f->runner, &err) != ST_OK)
        fail_msg("setup: %s", err.message);
    for (int i = 0; i < S * MB; i++) f->table[i] = i;
}

static void fx_close(fx *f) {
    st_runner_free(f->runner);
    st_kv_pool_free(f->pool);
    test_model_free(&f->tm);
}

/* tokens of sequence s: a prompt of n at positions 0.., one run */
static st_batch run_batch(const fx *f, int32_t s, const int32_t *tokens, int32_t *pos, int32_t *seq, int32_t n,
                          int32_t p0) {
    for (int32_t i = 0; i < n; i++) pos[i] = p0 + i, seq[i] = s;
    return (st_batch){.n_tokens = n, .tokens = tokens, .pos = pos, .seq = seq, .n_single = n == 1,
                      .block_table = f->table, .n_seq = S, .max_blocks = MB};
}

/* The prompts of sequences 0 .. n-1 into a and b, each as one run. */
static void prefill_both(fx *a, fx *b, const int32_t (*prompts)[6], const int32_t *lens, int n) {
    int32_t pos[U], seq[U];
    st_error err = {0};
    const float *logits = NULL;
    for (int s = 0; s < n; s++) {
        st_batch pb = run_batch(a, s, prompts[s], pos, seq, lens[s], 0);
        assert_int_equal(st_runner_eval(a->runner, &pb, &logits, &err), ST_OK);
        pb.block_table = b->table;
        assert_int_equal(st_runner_eval(b->runner, &pb, &logits, &err), ST_OK);
    }
}

static void expect_invalid(fx *f, const st_batch *b, const char *needle) {
    const float *logits = (const float *)1;
    st_error err = {0};
    assert_int_equal(st_runner_eval(f->runner, b, &logits, &err), ST_ERROR_INVALID);
    assert_null(logits);
    if (!strstr(err.message, needle)) fail_msg("'%s' does not name '%s'", err.message, needle);
}

static void test_rejects_bad_batches(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    const int32_t tok[4] = {1, 2, 3, 4}, pos[4] = {0, 1, 2, 3}, seq0[4] = {0, 0, 0, 0};
    const st_batch ok = {.n_tokens = 4, .tokens = tok, .pos = pos, .seq = seq0, .block_table = f.table,
                         .n_seq = S, .max_blocks = MB};
    st_batch b = ok;
    b.n_tokens = 0;
    expect_invalid(&f, &b, "a batch of 0 tokens");
    b.n_tokens = U + 1;
    expect_invalid(&f, &b, "a batch of 17 tokens");
    b = ok, b.n_single = 5;
    expect_invalid(&f, &b, "n_single");
    b = ok, b.n_seq = S + 1;
    expect_invalid(&f, &b, "a block table of 5 sequences");
    b = ok, b.n_seq = 0;
    expect_invalid(&f, &b, "a block table of 0 sequences");
    const int32_t bad_tok[4] = {1, 2, 384, 4};
    b = ok, b.tokens = bad_tok;
    expect_invalid(&f, &b, "token id 384 at index 2");
    const int32_t far[4] = {125, 126, 127, 128};
    b = ok, b.pos = far;
    expect_invalid(&f, &b, "position 128 at index 3");
    const int32_t neg[4] = {-1, 0, 1, 2};
    b = ok, b.pos = neg;
    expect_invalid(&f, &b, "position -1");
    const int32_t bad_seq[4] = {0, 0, 0, 4};
    b = ok, b.seq = bad_seq;
    expect_invalid(&f, &b, "sequence row 4");
    const int32_t jump[4] = {0, 1, 3, 4};
    b = ok, b.pos = jump;
    expect_invalid(&f, &b, "jump from 1 to 3");
    const int32_t twice[4] = {0, 1, 0, 0}, pos2[4] = {0, 0, 1, 2};
    b = ok, b.seq = twice, b.pos = pos2;
    expect_invalid(&f, &b, "appears twice");
    const int32_t singles_twice[4] = {1, 1, 2, 2}, spos[4] = {5, 6, 0, 1};
    b = ok, b.seq = singles_twice, b.pos = spos, b.n_single = 2;
    expect_invalid(&f, &b, "appears twice"); /* a single's sequence is its only token */
    int32_t table[S * MB];
    memcpy(table, f.table, sizeof(table));
    table[0] = NB; /* the padding block: not the batch's to use */
    b = ok, b.block_table = table;
    expect_invalid(&f, &b, "block 8 of sequence row 0");
    table[0] = 0, table[1] = -1; /* read, not written: position 64's block */
    const int32_t late[1] = {70}, one_tok[1] = {1}, seq1[1] = {0};
    b = (st_batch){.n_tokens = 1, .tokens = one_tok, .pos = late, .seq = seq1, .n_single = 1, .block_table = table,
                   .n_seq = S, .max_blocks = MB};
    expect_invalid(&f, &b, "block -1 of sequence row 0");
    table[1] = 1, table[0] = 99; /* read only: an earlier block */
    expect_invalid(&f, &b, "block 99 of sequence row 0");
    const int32_t out_bad[2] = {2, 1}, out_far[1] = {4};
    b = ok, b.out = out_bad, b.n_out = 2;
    expect_invalid(&f, &b, "ascending");
    b = ok, b.out = out_far, b.n_out = 1;
    expect_invalid(&f, &b, "ascending");
    b = ok, b.out = out_far, b.n_out = 5;
    expect_invalid(&f, &b, "5 logits rows of a 4-token batch");
    /* the runner's own sizes */
    st_runner *r = NULL;
    st_error err = {0};
    const st_runner_options bad[5] = {{0, 1, 1, 0}, {1, 0, 1, 0}, {1, 1, 0, 0}, {1, 1, 1, -1},
                                      {1, 1, 1, ST_RUNNER_MAX_CANDIDATES + 1}};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(st_runner_init(f.tm.model, f.pool, &bad[i], &r, &err), ST_ERROR_INVALID);
        assert_null(r);
    }
    assert_int_equal(st_kv_pool_copy_block(f.pool, NB, 0, &err), ST_ERROR_INVALID);
    assert_int_equal(st_kv_pool_copy_block(f.pool, 0, -1, &err), ST_ERROR_INVALID);
    const float *logits = NULL;
    assert_int_equal(st_runner_eval(f.runner, &ok, &logits, &err), ST_OK); /* and the good one runs */
    fx_close(&f);
}

/* Prompts of three sequences, then decode steps: all three in one batch (3 tokens padded
 * to the bucket of 4; then two of them, a bucket of 2), and on a twin runner each alone
 * (bucket 1): every logits row the same bits. The first runner is warmed up between the
 * prompts and the steps (st_runner_warmup), which must write nothing the sequences read. */
static void test_decode_padding_is_invisible(void **state) {
    (void)state;
    fx a, b;
    fx_open(&a);
    fx_open(&b);
    const int64_t V = a.tm.model->hp.n_vocab;
    const int32_t prompts[3][6] = {{1, 5, 9, 13, 17, 21}, {2, 4, 8, 16, 32, 64}, {3, 33, 333, 30, 3, 300}};
    const int32_t lens[3] = {6, 3, 5};
    st_error err = {0};
    const float *logits = NULL;
    prefill_both(&a, &b, prompts, lens, 3);
    assert_int_equal(st_runner_warmup(a.runner, 3, &err), ST_OK);
    float *want = malloc((size_t)3 * V * sizeof(float));
    for (int step = 0; step < 4; step++) {
        const int n = step < 2 ? 3 : 2; /* buckets 4, then 2 */
        int32_t tok[3], p[3], sq[3];
        for (int s = 0; s < n; s++) tok[s] = (int32_t)(7 * step + s + 1), p[s] = lens[s] + step, sq[s] = s;
        for (int s = 0; s < n; s++) { /* alone, on b */
            st_batch one = {.n_tokens = 1, .tokens = &tok[s], .pos = &p[s], .seq = &sq[s], .n_single = 1,
                            .block_table = b.table, .n_seq = S, .max_blocks = MB};
            assert_int_equal(st_runner_eval(b.runner, &one, &logits, &err), ST_OK);
            memcpy(want + (size_t)s * V, logits, (size_t)V * sizeof(float));
        }
        st_batch all = {.n_tokens = n, .tokens = tok, .pos = p, .seq = sq, .n_single = n, .block_table = a.table,
                        .n_seq = S, .max_blocks = MB};
        assert_int_equal(st_runner_eval(a.runner, &all, &logits, &err), ST_OK);
        assert_memory_equal(logits, want, (size_t)n * V * sizeof(float));
    }
    free(want);
    fx_close(&a);
    fx_close(&b);
}

/* Mixed batches padded (runner.c): decode tokens of sequences 0-2 (padded to 4) beside a
 * run of sequence 3 of 2, 4 and 1 tokens over three steps: one graph, kept and replayed
 * with new runs, and every logits row bit for bit the row each sequence gets alone (a
 * decode token alone, a run alone with all its rows); then a step asking for every row. */
static void test_mixed_padding_is_invisible(void **state) {
    (void)state;
    fx a, b;
    fx_open(&a);
    fx_open(&b);
    const int64_t V = a.tm.model->hp.n_vocab;
    const int32_t prompts[4][6] = {{1, 5, 9, 13, 17, 21}, {2, 4, 8}, {3, 33, 333, 30, 3}, {7, 70, 170, 270}};
    int32_t len[4] = {6, 3, 5, 4};
    st_error err = {0};
    const float *logits = NULL;
    prefill_both(&a, &b, prompts, len, 4);
    const int32_t run[3] = {2, 4, 1};
    float *want = malloc((size_t)4 * V * sizeof(float));
    st_graph *first = NULL;
    for (int step = 0; step < 3; step++) {
        int32_t tok[U], p[U], sq[U], out[4], n = 0, n_out = 0;
        for (int s = 0; s < 4; s++) {
            const int32_t take = s < 3 ? 1 : run[step];
            for (int32_t i = 0; i < take; i++) tok[n] = 11 * step + 3 * s + i + 1, p[n] = len[s] + i, sq[n++] = s;
            out[n_out++] = n - 1;
            /* alone, on b: its tokens, the last row's logits */
            int32_t p1[U], s1[U];
            st_batch one = run_batch(&b, s, tok + n - take, p1, s1, take, len[s]);
            assert_int_equal(st_runner_eval(b.runner, &one, &logits, &err), ST_OK);
            memcpy(want + (size_t)s * V, logits + (size_t)(take - 1) * V, (size_t)V * sizeof(float));
            len[s] += take;
        }
        st_batch mixed = {.n_tokens = n, .tokens = tok, .pos = p, .seq = sq, .n_single = 3, .block_table = a.table,
                          .n_seq = S, .max_blocks = MB, .out = out, .n_out = n_out};
        st_graph *g = NULL;
        assert_int_equal(st_runner_prepare(a.runner, &mixed, &g, &err), ST_OK);
        assert_true(g->replay);
        if (step == 0) first = g;
        assert_ptr_equal(g, first);
        assert_int_equal(st_runner_eval(a.runner, &mixed, &logits, &err), ST_OK);
        assert_memory_equal(logits, want, (size_t)4 * V * sizeof(float));
    }
    /* every row asked for (out NULL): a decode token of sequence 0 and a one-token run of 1 */
    int32_t tok[2] = {9, 19}, p[2] = {len[0], len[1]}, sq[2] = {0, 1};
    for (int s = 0; s < 2; s++) {
        st_batch one = {.n_tokens = 1, .tokens = &tok[s], .pos = &p[s], .seq = &sq[s], .n_single = 1,
                        .block_table = b.table, .n_seq = S, .max_blocks = MB};
        assert_int_equal(st_runner_eval(b.runner, &one, &logits, &err), ST_OK);
        memcpy(want + (size_t)s * V, logits, (size_t)V * sizeof(float));
    }
    st_batch both = {.n_tokens = 2, .tokens = tok, .pos = p, .seq = sq, .n_single = 1, .block_table = a.table,
                     .n_seq = S, .max_blocks = MB};
    assert_int_equal(st_runner_eval(a.runner, &both, &logits, &err), ST_OK);
    assert_memory_equal(logits, want, (size_t)2 * V * sizeof(float));
    free(want);
    fx_close(&a);
    fx_close(&b);
}

/* The logits of a 6-token prompt: all rows, the last two (a suffix), rows 1 and 4
 * (gathered), and the prompt split over two batches as a run of each (2 + 4 tokens, the
 * second batch with a decode token of another sequence in front): the same rows. */
static void test_logits_rows_and_split_runs(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    const int64_t V = f.tm.model->hp.n_vocab;
    const int32_t prompt[6] = {1, 10, 100, 200, 300, 383};
    int32_t pos[U], seq[U];
    st_error err = {0};
    const float *logits = NULL;
    float *all = malloc((size_t)6 * V * sizeof(float));
    st_batch b = run_batch(&f, 0, prompt, pos, seq, 6, 0);
    assert_int_equal(st_runner_eval(f.runner, &b, &logits, &err), ST_OK);
    memcpy(all, logits, (size_t)6 * V * sizeof(float));
    const int32_t last2[2] = {4, 5}, gather[2] = {1, 4};
    b.out = last2, b.n_out = 2;
    assert_int_equal(st_runner_eval(f.runner, &b, &logits, &err), ST_OK);
    assert_memory_equal(logits, all + 4 * V, (size_t)2 * V * sizeof(float));
    b.out = gather;
    assert_int_equal(st_runner_eval(f.runner, &b, &logits, &err), ST_OK);
    assert_memory_equal(logits, all + 1 * V, (size_t)V * sizeof(float));
    assert_memory_equal(logits + V, all + 4 * V, (size_t)V * sizeof(float));
    b.n_out = 0;
    assert_int_equal(st_runner_eval(f.runner, &b, &logits, &err), ST_OK);

    /* a runner of candidates asked for whole rows 0, 1, 3 and 4 (two runs of consecutive
     * rows, one read each): those rows as the plain runner gives them, each row's first
     * candidate its largest logit */
    st_runner *rc = NULL;
    const st_runner_options co = {.max_tokens = U, .max_seqs = S, .max_blocks = MB, .n_candidates = 4};
    assert_int_equal(st_runner_init(f.tm.model, f.pool, &co, &rc, &err), ST_OK);
    const int32_t full[4] = {0, 1, 3, 4};
    b = run_batch(&f, 0, prompt, pos, seq, 6, 0);
    b.full = full, b.n_full = 4;
    st_runner_output o;
    assert_int_equal(st_runner_eval_out(rc, &b, &o, &err), ST_OK);
    assert_int_equal(o.n_out, 6);
    for (int i = 0; i < 4; i++)
        assert_memory_equal(o.logits + (size_t)full[i] * V, all + (size_t)full[i] * V, (size_t)V * sizeof(float));
    for (int64_t row = 0; row < 6; row++) {
        int64_t best = 0;
        for (int64_t t = 1; t < V; t++)
            if (all[row * V + t] > all[row * V + best]) best = t;
        assert_int_equal(o.ids[row * o.k], best);
    }
    assert_null(o.drawn);

    /* draws on the backend from rows 1, 2 and 5 (one with min-p), three steps running, then
     * rows 1 and 4 gathered (a graph of two rows): the tokens a sampler of the same seed
     * draws from the whole rows on the host, and each drawn token's logit */
    const float temps[6] = {0.0f, 1.0f, 0.6f, 0.0f, 2.0f, 1.3f}, min_ps[6] = {0, 0, 0.1f, 0, 0, 0};
    st_sampler *host[6] = {0}, *dev[6] = {0};
    for (int row = 0; row < 6; row++) {
        if (temps[row] == 0.0f) continue;
        st_sampler_params sp = st_sampler_params_default();
        sp.temp = temps[row], sp.top_k = 0, sp.top_p = 1.0f, sp.min_p = min_ps[row], sp.seed = 5 + (uint64_t)row;
        assert_int_equal(st_sampler_init(&sp, V, &host[row], &err), ST_OK);
        assert_int_equal(st_sampler_init(&sp, V, &dev[row], &err), ST_OK);
    }
    st_row_draw draws[6];
    for (int step = 0; step < 4; step++) {
        const bool gathered = step == 3;
        const int32_t rows[2] = {1, 4};
        const int n_rows = gathered ? 2 : 6;
        b = run_batch(&f, 0, prompt, pos, seq, 6, 0);
        if (gathered) b.out = rows, b.n_out = 2;
        for (int j = 0; j < n_rows; j++) {
            const int row = gathered ? rows[j] : j;
            draws[j] = (st_row_draw){0};
            if (!(gathered || row != 4) || temps[row] == 0.0f) continue;
            st_sampler_next_draw(dev[row], &draws[j]);
        }
        b.draw = draws;
        assert_int_equal(st_runner_eval_out(rc, &b, &o, &err), ST_OK);
        assert_non_null(o.drawn);
        for (int j = 0; j < n_rows; j++) {
            const int row = gathered ? rows[j] : j;
            if (draws[j].temp == 0.0f) continue;
            int32_t want = -1;
            assert_int_equal(st_sampler_sample(host[row], all + (size_t)row * V, &want, &err), ST_OK);
            assert_int_equal(o.drawn[j], want);
            assert_true(o.drawn_logits[j] == all[(size_t)row * V + (size_t)want]);
        }
    }
    for (int row = 0; row < 6; row++) st_sampler_free(host[row]), st_sampler_free(dev[row]);

    /* tokens sampled after the step from the rows still on the backend: rows 2 and 5 with
     * top-p, row 4 greedy with a repetition penalty on its largest logit's token (which
     * turns it away), row 1 drawn with the step and kept as it drew it; the tokens a sampler
     * of the same seed draws from the whole rows on the host */
    {
        const int drawn_rows[4] = {1, 2, 4, 5};
        st_sampler *h[6] = {0}, *d[6] = {0};
        for (int i = 0; i < 4; i++) {
            const int row = drawn_rows[i];
            st_sampler_params sp = st_sampler_params_default();
            sp.temp = row == 4 ? 0.0f : 0.9f, sp.top_k = 0, sp.top_p = row == 1 || row == 4 ? 1.0f : 0.6f;
            sp.min_p = 0.0f, sp.repeat_penalty = row == 4 ? 50.0f : 1.0f, sp.seed = 50 + (uint64_t)row;
            assert_int_equal(st_sampler_init(&sp, V, &h[row], &err), ST_OK);
            assert_int_equal(st_sampler_init(&sp, V, &d[row], &err), ST_OK);
        }
        int64_t best = 0;
        for (int64_t t = 1; t < V; t++)
            if (all[4 * V + t] > all[4 * V + best]) best = t;
        st_sampler_accept(h[4], (int32_t)best), st_sampler_accept(d[4], (int32_t)best);
        st_row_draw with_step[6] = {{0}}, after_step[6] = {{0}};
        st_sampler_next_draw(d[1], &with_step[1]);
        b = run_batch(&f, 0, prompt, pos, seq, 6, 0);
        b.draw = with_step;
        assert_int_equal(st_runner_eval_out(rc, &b, &o, &err), ST_OK);
        st_sampler_next_draw(d[2], &after_step[2]);
        st_sampler_next_draw(d[4], &after_step[4]);
        st_sampler_next_draw(d[5], &after_step[5]);
        assert_int_equal(st_runner_draw_rows(rc, after_step, &o, &err), ST_OK);
        for (int i = 0; i < 4; i++) {
            const int row = drawn_rows[i];
            int32_t want = -1;
            assert_int_equal(st_sampler_sample(h[row], all + (size_t)row * V, &want, &err), ST_OK);
            if (row == 4) assert_int_not_equal(want, best);
            assert_int_equal(o.drawn[row], want);
            assert_true(o.drawn_logits[row] == all[(size_t)row * V + (size_t)want]);
        }
        for (int row = 0; row < 6; row++) st_sampler_free(h[row]), st_sampler_free(d[row]);
        assert_int_equal(st_runner_draw_rows(f.runner, after_step, &o, &err), ST_ERROR_INVALID);
    }
    st_runner_free(rc);
    b = run_batch(&f, 0, prompt, pos, seq, 6, 0);
    b.draw = draws;
    draws[0].temp = 1.0f;
    const st_status no_candidates = st_runner_eval_out(f.runner, &b, &o, &err);
    assert_int_equal(no_candidates, ST_ERROR_INVALID);
    assert_non_null(strstr(err.message, "runner of candidates"));

    /* sequence 1 has one token; then [its decode token | sequence 2's prompt 0..1], then
     * [its next decode token | sequence 2's prompt 2..5] */
    const int32_t first = 42;
    b = run_batch(&f, 1, &first, pos, seq, 1, 0);
    assert_int_equal(st_runner_eval(f.runner, &b, &logits, &err), ST_OK);
    for (int part = 0; part < 2; part++) {
        const int32_t n = part == 0 ? 2 : 4, p0 = part == 0 ? 0 : 2;
        int32_t tok[5] = {(int32_t)(50 + part)}, p[5] = {1 + part}, sq[5] = {1};
        for (int32_t i = 0; i < n; i++) tok[1 + i] = prompt[p0 + i], p[1 + i] = p0 + i, sq[1 + i] = 2;
        int32_t out[5];
        for (int32_t i = 0; i < n; i++) out[i] = 1 + i;
        b = (st_batch){.n_tokens = 1 + n, .tokens = tok, .pos = p, .seq = sq, .n_single = 1, .block_table = f.table,
                       .n_seq = S, .max_blocks = MB, .out = out, .n_out = n};
        assert_int_equal(st_runner_eval(f.runner, &b, &logits, &err), ST_OK);
        assert_memory_equal(logits, all + (size_t)p0 * V, (size_t)n * V * sizeof(float));
    }
    free(all);
    fx_close(&f);
}

/* A copied block serves the copy's table as the original served its own: a prompt's last
 * logits through blocks {0, 1} and through {6, 7} after copying 0 -> 6 and 1 -> 7, with the
 * last token written again into block 7. */
static void test_copy_block(void **state) {
    (void)state;
    fx f;
    fx_open(&f);
    const int64_t V = f.tm.model->hp.n_vocab;
    int32_t prompt[70];
    for (int i = 0; i < 70; i++) prompt[i] = (i * 31 + 7) % 384;
    int32_t pos[U], seq[U];
    st_error err = {0};
    const float *logits = NULL;
    float *want = malloc((size_t)V * sizeof(float));
    for (int32_t p0 = 0; p0 < 70; p0 += U) {
        const int32_t n = 70 - p0 < U ? 70 - p0 : U;
        st_batch b = run_batch(&f, 0, prompt + p0, pos, seq, n, p0);
        assert_int_equal(st_runner_eval(f.runner, &b, &logits, &err), ST_OK);
        memcpy(want, logits + (size_t)(n - 1) * V, (size_t)V * sizeof(float)); /* (every row came back) */
    }
    assert_int_equal(st_kv_pool_copy_block(f.pool, 6, 0, &err), ST_OK);
    assert_int_equal(st_kv_pool_copy_block(f.pool, 7, 1, &err), ST_OK);
    f.table[3 * MB] = 6, f.table[3 * MB + 1] = 7;
    st_batch b = run_batch(&f, 3, prompt + 69, pos, seq, 1, 69);
    assert_int_equal(st_runner_eval(f.runner, &b, &logits, &err), ST_OK);
    assert_memory_equal(logits, want, (size_t)V * sizeof(float));
    free(want);
    fx_close(&f);
}

int main(void) {
    st_cpu_set_threads(1); /* (small ops; no result depends on the thread count) */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rejects_bad_batches),
        cmocka_unit_test(test_decode_padding_is_invisible),
        cmocka_unit_test(test_mixed_padding_is_invisible),
        cmocka_unit_test(test_logits_rows_and_split_runs),
        cmocka_unit_test(test_copy_block),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
