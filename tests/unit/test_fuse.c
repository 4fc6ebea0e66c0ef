/* The fused ops a planner finds in each architecture's step (src/backend/fuse.c): the
 * graph the runner builds for a tiny model of each architecture, a decode step of one
 * sequence, a prompt micro-batch, and a paged batch of several sequences, matched group by
 * group. What must fuse: per layer the normed q/k/v product, the rope-attention, the
 * residual adds of o and down and the normed gate/up with its gated unit (a fused gate_up
 * weight, phi3, as the pair of its halves), except where a post-norm (gemma3) keeps the
 * intermediate alive; the liveness rules must refuse those. A post-norm goes into its
 * residual add instead. q/k norms, per head (qwen3, gemma3) or over the whole q and k
 * (olmoe), fold into the rope-attention. An MoE layer's experts form
 * two groups: the gate and up products with their gated unit, the down product with the
 * weighted combination. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend/fuse.h"
#include "stride/graph.h"
#include "model/runner_internal.h"
#include "stride/synth.h"

/* One layer's groups, in order: 'Q' normed product STORE of three weights (q/k/v), 'S' of
 * one (a fused qkv or gate_up, the output head), 'A' rope-attention ('W' with q/k norms
 * over the whole q and k), 'R' residual add, 'G' normed gated pair, 'E' the experts' gated
 * unit, 'D' the experts' down product with its combination (and the residual add after
 * it), 'N' a post-norm into the residual, 'P' two independent norms, 'T' a router's product
 * and its routing (with the FFN norm before them, whose output the experts read), '.' a
 * node alone. */
typedef struct arch_case {
    const char *preset;
    const char *layer;  /* the groups of every layer */
    int qkv_weights;    /* weights of the normed q/k/v product */
} arch_case;

static const arch_case CASES[] = {
    {"tiny-llama", "QARGR", 3},
    {"tiny-qwen3", "QARGR", 3},          /* per-head q/k norms fold into the rope-attention */
    {"tiny-gemma3", "QA.NG.N", 3},        /* post-norms keep o and down apart, fused into the adds */
    {"tiny-phi3", "SARGR", 1},           /* fused qkv; fused gate_up as the gated pair of its halves */
    {"tiny-olmoe", "QWRTED", 3},         /* whole q/k norms in the rope-attention; FFN norm, router, routing */
};

static char group_code(const st_fuse_group *grp) {
    if (grp->kind == ST_FUSE_ROPE_ATTENTION) return st_fused_rope_store_whole_norm(&grp->ra.rs) ? 'W' : 'A';
    if (grp->kind == ST_FUSE_NONE) return '.';
    if (grp->kind == ST_FUSE_MOE) return grp->moe.kind == ST_FUSED_MOE_GLU ? 'E' : 'D';
    if (grp->kind == ST_FUSE_NORM_ADD) return 'N';
    if (grp->kind == ST_FUSE_NORM_PAIR) return 'P';
    if (grp->kind == ST_FUSE_MOE_ROUTE) return grp->mr.norm_w ? 'T' : '?'; /* (always normed here) */
    const st_fused_mul_mat *mm = &grp->mm;
    if (mm->epilogue == ST_FUSED_EPILOGUE_ADD) return mm->norm_w ? '?' : 'R';
    if (!mm->norm_w) return '?'; /* (no such group: a product alone is not fused) */
    if (mm->epilogue != ST_FUSED_EPILOGUE_STORE) return 'G';
    return mm->n_w == 3 ? 'Q' : mm->n_w == 1 ? 'S' : '?';
}

/* The group codes of g: the embedding lookup and the head off, each layer's string. */
static void codes_of(const st_graph *g, char *out, size_t cap, int *qkv_weights) {
    size_t n = 0;
    *qkv_weights = -1;
    for (int i = 0; i < g->n_nodes;) {
        st_fuse_group grp;
        st_fuse_match(g, i, &grp);
        const char c = group_code(&grp);
        if ((c == 'Q' || c == 'S') && *qkv_weights < 0) *qkv_weights = grp.mm.n_w; /* the first: q/k/v */
        if (grp.kind == ST_FUSE_MUL_MAT && grp.mm.halves) { /* the pair: the halves of one weight and product */
            const st_fused_mul_mat *mm = &grp.mm;
            const st_node *prod = &g->nodes[i + 1];
            assert_ptr_equal(mm->w[0], &mm->half_w[0]);
            assert_ptr_equal(mm->y[1], &mm->half_y[1]);
            assert_int_equal(2 * mm->w[0]->ne[1], prod->src[0]->ne[1]);
            assert_ptr_equal(mm->w[1]->data, (char *)prod->src[0]->data + mm->w[0]->ne[1] * prod->src[0]->nb[1]);
            assert_ptr_equal(mm->y[1]->data, (char *)prod->dst->data + mm->y[0]->ne[0] * sizeof(float));
        }
        assert_true(n + 1 < cap);
        out[n++] = c;
        i += grp.n_nodes;
    }
    out[n] = '\0';
}

/* The expected string of a whole step: the lookup ('.', and gemma3's scale '.'), the
 * layers, then the head: a gather ('.') when the rows are picked, and the normed output
 * product ('S'). */
static void expected(const arch_case *ac, int64_t n_layer, bool scale, bool gather, char *out, size_t cap) {
    size_t n = 0;
    out[n++] = '.';
    if (scale) out[n++] = '.';
    for (int64_t l = 0; l < n_layer; l++) {
        const size_t len = strlen(ac->layer);
        assert_true(n + len + 3 < cap);
        memcpy(out + n, ac->layer, len);
        n += len;
    }
    if (gather) out[n++] = '.';
    out[n++] = 'S';
    out[n] = '\0';
}

typedef struct fixture {
    st_backend *cpu;
    st_model *model;
    st_kv_pool *pool;
    st_runner *runner;
    char path[128];
} fixture;

static void fixture_init(fixture *f, const char *preset) {
    st_error err = {0};
    snprintf(f->path, sizeof(f->path), "/tmp/stride-fuse-%d-%s.gguf", (int)getpid(), preset);
    const st_synth_options so = {.weight_type = ST_TYPE_F16, .seed = 3};
    assert_int_equal(st_synth_write(st_synth_find_preset(preset), &so, f->path, &err), ST_OK);
    assert_int_equal(st_backend_init(ST_BACKEND_CPU, 0, &f->cpu, &err), ST_OK);
    st_model_load_options lo = {.policy = {.mode = ST_PAD_MODE_OFF, .alias = 2048, .pad = 128}};
    assert_int_equal(st_model_load(f->path, f->cpu, &lo, &f->model, &err), ST_OK);
    assert_int_equal(st_kv_pool_init(f->model, 8, ST_TYPE_F16, &f->pool, &err), ST_OK);
    const st_runner_options ro = {.max_tokens = 16, .max_seqs = 4, .max_blocks = 2};
    assert_int_equal(st_runner_init(f->model, f->pool, &ro, &f->runner, &err), ST_OK);
}

static void fixture_free(fixture *f) {
    st_runner_free(f->runner);
    st_kv_pool_free(f->pool);
    st_model_free(f->model);
    st_backend_free(f->cpu);
    unlink(f->path);
}

static void check_graph(const arch_case *ac, const fixture *f, const st_graph *g, bool gather, const char *what) {
    char got[1024], want[1024];
    int qkv_weights = 0;
    codes_of(g, got, sizeof(got), &qkv_weights);
    expected(ac, f->model->hp.n_layer, f->model->hp.embd_scale != 1.0f, gather, want, sizeof(want));
    if (strcmp(got, want) != 0) fprintf(stderr, "%s %s:\n  got  %s\n  want %s\n", ac->preset, what, got, want);
    assert_string_equal(got, want);
    assert_int_equal(qkv_weights, ac->qkv_weights);
}

static void test_every_architecture(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof(CASES) / sizeof(CASES[0]); c++) {
        const arch_case *ac = &CASES[c];
        fixture f;
        fixture_init(&f, ac->preset);
        st_error err = {0};
        /* the loader places a layer's q, k, v and its gate, up back to back (rows at one
         * stride), so that the CUDA backend can run each group as one GEMM */
        for (int64_t il = 0; il < f.model->hp.n_layer; il++) {
            const st_layer_weights *l = &f.model->layers[il];
            const st_tensor *group[2][3] = {{l->wq, l->wk, l->wv}, {l->w_gate, l->w_up, NULL}};
            for (int gi = 0; gi < 2; gi++)
                for (int j = 0; j + 1 < 3 && group[gi][j] && group[gi][j + 1]; j++)
                    assert_ptr_equal(group[gi][j + 1]->data,
                                     (char *)group[gi][j]->data + group[gi][j]->ne[1] * group[gi][j]->nb[1]);
        }
        st_graph *g = NULL;
        int32_t tok[16], pos[16], seq[16] = {0}, out_last = 7;
        for (int i = 0; i < 16; i++) tok[i] = i + 1, pos[i] = i;
        /* one sequence, contiguous: a decode step, and a prompt of 8 wanting its last logits */
        st_batch one = {.n_tokens = 1, .tokens = tok, .pos = pos, .seq = seq, .n_single = 1, .n_seq = 1};
        assert_int_equal(st_runner_prepare(f.runner, &one, &g, &err), ST_OK);
        check_graph(ac, &f, g, false, "decode");
        st_batch prompt = {.n_tokens = 8, .tokens = tok, .pos = pos, .seq = seq, .n_seq = 1, .out = &out_last,
                           .n_out = 1};
        assert_int_equal(st_runner_prepare(f.runner, &prompt, &g, &err), ST_OK);
        check_graph(ac, &f, g, false, "prompt");
        /* paged: three decode tokens; then two decode tokens beside a run of four, with the
         * logits of the decode tokens and of the run's second token (gathered) */
        int32_t table[3 * 2] = {5, 1, 0, 2, 4, 3};
        int32_t dpos[3] = {70, 3, 10}, dseq[3] = {0, 1, 2};
        st_batch dec = {.n_tokens = 3, .tokens = tok, .pos = dpos, .seq = dseq, .n_single = 3,
                        .block_table = table, .n_seq = 3, .max_blocks = 2};
        assert_int_equal(st_runner_prepare(f.runner, &dec, &g, &err), ST_OK);
        check_graph(ac, &f, g, false, "paged decode");
        int32_t mpos[6] = {70, 3, 20, 21, 22, 23}, mseq[6] = {0, 1, 2, 2, 2, 2}, out_rows[3] = {0, 1, 3};
        st_batch mixed = {.n_tokens = 6, .tokens = tok, .pos = mpos, .seq = mseq, .n_single = 2,
                          .block_table = table, .n_seq = 3, .max_blocks = 2, .out = out_rows, .n_out = 3};
        assert_int_equal(st_runner_prepare(f.runner, &mixed, &g, &err), ST_OK);
        check_graph(ac, &f, g, true, "paged mixed");
        fixture_free(&f);
    }
}

/* A packed F32 tensor of ne0 x ne1 x ne2 at a fake address (the matcher compares views and
 * their memory, never their contents). */
static st_tensor fake(uintptr_t at, st_type type, int64_t ne0, int64_t ne1, int64_t ne2) {
    st_tensor t = {0};
    const size_t ts = type == ST_TYPE_F16 ? 2 : 4;
    t.type = type;
    t.data = (void *)at;
    t.ne[0] = ne0, t.ne[1] = ne1, t.ne[2] = ne2, t.ne[3] = 1;
    t.nb[0] = ts, t.nb[1] = ts * (size_t)ne0, t.nb[2] = t.nb[1] * (size_t)ne1, t.nb[3] = t.nb[2] * (size_t)ne2;
    return t;
}

/* The experts' groups form only where nothing after them reads what the fused kernels
 * leave unwritten: the gate's products, the up products unless the unit wrote over them,
 * the down products; the residual add after the combination joins the down group when
 * nothing after reads the combination. */
static void test_moe_liveness(void **state) {
    (void)state;
    const int64_t K = 8, F = 4, D = 8, E = 4, k = 2, M = 1;
    st_tensor wg = fake(0x100000, ST_TYPE_F16, K, F, E), wu = fake(0x200000, ST_TYPE_F16, K, F, E);
    st_tensor wd = fake(0x300000, ST_TYPE_F16, F, D, E), x = fake(0x400000, ST_TYPE_F32, K, M, 1);
    st_tensor ids = fake(0x500000, ST_TYPE_I32, k, M, 1), wts = fake(0x600000, ST_TYPE_F32, k, M, 1);
    st_tensor gate = fake(0x700000, ST_TYPE_F32, F, k, M), up = fake(0x800000, ST_TYPE_F32, F, k, M);
    st_tensor down = fake(0x900000, ST_TYPE_F32, D, k, M), out = fake(0xa00000, ST_TYPE_F32, D, M, 1);
    st_tensor sum = fake(0xb00000, ST_TYPE_F32, D, M, 1);
    for (int reader = 0; reader < 4; reader++) { /* 0 none; then a later add reading gate, up, down */
        st_graph g;
        st_graph_init(&g);
        st_graph_mul_mat_id(&g, &gate, &wg, &x, &ids);
        st_graph_mul_mat_id(&g, &up, &wu, &x, &ids);
        st_graph_swiglu(&g, &up, &gate, &up);
        st_graph_mul_mat_id(&g, &down, &wd, &up, &ids);
        st_graph_moe_combine(&g, &out, &down, &wts);
        const st_tensor *read = reader == 1 ? &gate : reader == 2 ? &up : reader == 3 ? &down : &out;
        st_graph_add(&g, &sum, &sum, read);
        st_fuse_group grp;
        st_fuse_match(&g, 0, &grp);
        /* the unit wrote up in place: reading up after it reads the unit's output */
        assert_int_equal(grp.kind, reader == 1 ? ST_FUSE_NONE : ST_FUSE_MOE);
        if (reader != 1) {
            assert_int_equal(grp.n_nodes, 3);
            assert_int_equal(grp.moe.kind, ST_FUSED_MOE_GLU);
            assert_ptr_equal(grp.moe.out->data, up.data);
        }
        st_fuse_match(&g, 3, &grp);
        assert_int_equal(grp.kind, reader == 3 ? ST_FUSE_NONE : ST_FUSE_MOE);
        if (reader != 3) { /* reading out: the residual add joins the group */
            assert_int_equal(grp.n_nodes, reader == 0 ? 3 : 2);
            assert_int_equal(grp.moe.kind, ST_FUSED_MOE_DOWN);
            assert_ptr_equal(grp.moe.wts->data, wts.data);
            assert_ptr_equal(grp.moe.residual ? grp.moe.residual->data : NULL, reader == 0 ? sum.data : NULL);
        }
        st_graph_free(&g);
    }
    /* out read again after the residual add: the add stays apart */
    {
        st_graph g;
        st_graph_init(&g);
        st_graph_mul_mat_id(&g, &down, &wd, &up, &ids);
        st_graph_moe_combine(&g, &out, &down, &wts);
        st_graph_add(&g, &sum, &sum, &out);
        st_graph_add(&g, &x, &x, &out);
        st_fuse_group grp;
        st_fuse_match(&g, 0, &grp);
        assert_int_equal(grp.kind, ST_FUSE_MOE);
        assert_int_equal(grp.n_nodes, 2);
        assert_null(grp.moe.residual);
        st_graph_free(&g);
    }
    /* the unit into another tensor: then reading up after it is a read of the products */
    st_graph g;
    st_graph_init(&g);
    st_graph_mul_mat_id(&g, &gate, &wg, &x, &ids);
    st_graph_mul_mat_id(&g, &up, &wu, &x, &ids);
    st_graph_swiglu(&g, &down, &gate, &up);
    st_graph_add(&g, &sum, &sum, &up);
    st_fuse_group grp;
    st_fuse_match(&g, 0, &grp);
    assert_int_equal(grp.kind, ST_FUSE_NONE);
    st_graph_free(&g);
}

/* Reads of views of one [12, M] buffer of rows: q its elements [0, 4) of every row, k
 * [4, 8), v [8, 12). Interleaved spans over M rows, disjoint elements: a node reading k
 * or v does not read q; one reading the elements [3, 5), or q's own, does. */
static void test_row_views(void **state) {
    (void)state;
    const int64_t M = 5;
    st_tensor buf = fake(0x100000, ST_TYPE_F32, 12, M, 1);
    st_tensor q = buf, k = buf, v = buf, mid = buf, sum = fake(0x200000, ST_TYPE_F32, 4, M, 1);
    q.ne[0] = k.ne[0] = v.ne[0] = 4;
    k.data = (char *)buf.data + 16, v.data = (char *)buf.data + 32;
    mid.ne[0] = 2, mid.data = (char *)buf.data + 12;
    const st_tensor *reads[] = {&k, &v, &mid, &buf};
    const bool want[] = {false, false, true, true};
    for (int r = 0; r < 4; r++) {
        st_tensor part = *reads[r];
        if (reads[r] == &buf) part.ne[0] = 4; /* (q's elements) */
        st_graph g;
        st_graph_init(&g);
        st_tensor out = sum;
        out.ne[0] = part.ne[0];
        st_graph_add(&g, &out, &out, &part);
        assert_int_equal(st_graph_read_later(&g, 0, &q), want[r]);
        st_graph_free(&g);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_views),
        cmocka_unit_test(test_every_architecture),
        cmocka_unit_test(test_moe_liveness),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
