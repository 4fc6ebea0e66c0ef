/*
 * The model loader's fuzz target (fuzz/fuzz_model.c, linked in) under plain ctest, and the
 * validator's agreement with synth:
 * - every seed of fuzz/corpus-model (a valid micro model per architecture) loads and runs;
 * - deterministic mutations of the seeds' hyperparameters and tensor table (bytes of the
 *   metadata and tensor infos set to random or boundary values) go through the target: each
 *   is refused with a one-line message or loads and runs, never aborts; both outcomes
 *   occur, so the mutations reach past the reader;
 * - every synth preset small enough to write here passes st_model_validate (synth and the
 *   validator read the same descriptor; this checks they read it alike).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stride/model.h"
#include "stride/synth.h"

#ifndef STRIDE_FUZZ_MODEL_CORPUS
#error "STRIDE_FUZZ_MODEL_CORPUS must name fuzz/corpus-model (set by tests/CMakeLists.txt)"
#endif

/* From fuzz/fuzz_model.c. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
typedef struct st_fuzz_model_stats {
    unsigned long inputs, not_gguf, refused, ran;
} st_fuzz_model_stats;
st_fuzz_model_stats st_fuzz_model_stats_get(void);

#define N_ARCHS 5
#define MUTATIONS_PER_SEED 400

typedef struct seed {
    uint8_t *data;
    size_t size;
    char name[256];
} seed;

static size_t load_seeds(seed *out, size_t cap) {
    DIR *d = opendir(STRIDE_FUZZ_MODEL_CORPUS);
    if (!d) fail_msg("cannot open %s", STRIDE_FUZZ_MODEL_CORPUS);
    size_t n = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        if (de->d_name[0] == '.') continue;
        if (n == cap) fail_msg("more than %zu seeds", cap);
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", STRIDE_FUZZ_MODEL_CORPUS, de->d_name);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fseek(f, 0, SEEK_SET);
        out[n].data = malloc((size_t)size);
        assert_non_null(out[n].data);
        assert_int_equal(fread(out[n].data, 1, (size_t)size, f), (size_t)size);
        fclose(f);
        out[n].size = (size_t)size;
        snprintf(out[n].name, sizeof(out[n].name), "%s", de->d_name);
        n++;
    }
    closedir(d);
    return n;
}

static void test_seeds_load_and_run(void **state) {
    (void)state;
    seed seeds[16];
    size_t n = load_seeds(seeds, 16);
    assert_int_equal(n, N_ARCHS);
    for (size_t i = 0; i < n; i++) {
        st_fuzz_model_stats before = st_fuzz_model_stats_get();
        assert_int_equal(LLVMFuzzerTestOneInput(seeds[i].data, seeds[i].size), 0);
        st_fuzz_model_stats after = st_fuzz_model_stats_get();
        if (after.ran != before.ran + 1) fail_msg("seed %s did not load and run", seeds[i].name);
        free(seeds[i].data);
    }
}

static uint64_t rng_next(uint64_t *s) { /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

/* Values a hostile field takes: zero, one, small, sign bits, all ones, powers of two. */
static void put_boundary(uint8_t *p, size_t room, uint64_t r) {
    static const uint64_t values[] = {0, 1, 2, 3, 7, 0x80, 0xFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
                                      0x400, 0x402, 0x1000000, 0x4000000000000004ULL, UINT64_MAX};
    uint64_t v = values[r % (sizeof(values) / sizeof(values[0]))];
    size_t width = (r >> 8) % 2 ? 8 : 4;
    if (width > room) width = room;
    for (size_t k = 0; k < width; k++) p[k] = (uint8_t)(v >> (8 * k));
}

static void test_mutations_are_clean(void **state) {
    (void)state;
    seed seeds[16];
    size_t n = load_seeds(seeds, 16);
    st_fuzz_model_stats before = st_fuzz_model_stats_get();
    uint64_t rng = 0x9E3779B97F4A7C15ULL;
    for (size_t i = 0; i < n; i++) {
        /* the metadata and tensor infos: everything before the data section */
        st_gguf_file *f = NULL;
        assert_int_equal(st_gguf_open_memory(seeds[i].data, seeds[i].size, &f, NULL), ST_OK);
        const size_t header = (size_t)st_gguf_data_offset(f);
        st_gguf_close(f);
        uint8_t *buf = malloc(seeds[i].size);
        assert_non_null(buf);
        for (int m = 0; m < MUTATIONS_PER_SEED; m++) {
            memcpy(buf, seeds[i].data, seeds[i].size);
            int edits = 1 + (int)(rng_next(&rng) % 3);
            for (int e = 0; e < edits; e++) {
                uint64_t r = rng_next(&rng);
                size_t at = 24 + (size_t)(r % (header - 24)); /* past magic, version and counts */
                if ((r >> 32) % 2) put_boundary(buf + at, header - at, r >> 33);
                else buf[at] = (uint8_t)(r >> 40);
            }
            assert_int_equal(LLVMFuzzerTestOneInput(buf, seeds[i].size), 0);
        }
        free(buf);
        free(seeds[i].data);
    }
    st_fuzz_model_stats after = st_fuzz_model_stats_get();
    unsigned long total = after.inputs - before.inputs, refused = after.refused - before.refused,
                  ran = after.ran - before.ran, not_gguf = after.not_gguf - before.not_gguf;
    print_message("%lu mutated models: %lu refused by the validator, %lu loaded and ran, %lu refused by the reader\n",
                  total, refused, ran, not_gguf);
    assert_int_equal(total, n * MUTATIONS_PER_SEED);
    assert_true(refused > total / 20); /* the mutations reach the validator ... */
    assert_true(ran > 0);              /* ... and some still make a model that runs */
}

/* Every preset synth can write in a moment validates (the tiny ones: the real shapes are
 * GBs); the validator and synth read one descriptor. */
static void test_synth_presets_validate(void **state) {
    (void)state;
    char path[] = "/tmp/stride-validate-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    int n_checked = 0;
    for (uint64_t i = 0; i < st_synth_n_presets(); i++) {
        const st_synth_preset *p = st_synth_get_preset(i);
        if (strncmp(p->name, "tiny-", 5) != 0) continue;
        for (int t = 0; t < 2; t++) {
            st_synth_options o = {.weight_type = t ? ST_TYPE_Q8_0 : ST_TYPE_F16, .seed = 1};
            st_error err = {0};
            if (st_synth_write(p, &o, path, &err) != ST_OK) fail_msg("synth %s: %s", p->name, err.message);
            st_gguf_file *f = NULL;
            assert_int_equal(st_gguf_open(path, &f, &err), ST_OK);
            st_hparams hp;
            if (st_model_validate(f, &hp, &err) != ST_OK) fail_msg("%s does not validate: %s", p->name, err.message);
            assert_int_equal(hp.arch, p->arch);
            assert_int_equal(hp.n_vocab, p->n_vocab);
            assert_int_equal(hp.bos_id, 1);
            st_gguf_close(f);
            n_checked++;
        }
    }
    unlink(path);
    assert_true(n_checked >= 2 * N_ARCHS);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seeds_load_and_run),
        cmocka_unit_test(test_mutations_are_clean),
        cmocka_unit_test(test_synth_presets_validate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
