/* Tokenizer edge cases at the C level, on the committed small vocabularies of
 * tests/tokenizer (spm-small.gguf: SentencePiece BPE with byte fallback and a space
 * prefix; bpe-llama3.gguf / bpe-qwen2.gguf: byte-level BPE). The reference ids of many
 * strings are checked by tests/python/test_tokenizer_vectors.py; here: empty text, byte
 * fallback, special tokens on and off, BOS/EOS, streaming decode of partial UTF-8,
 * invalid bytes, huge inputs, unsupported vocabularies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stride/gguf.h"
#include "stride/tokenizer.h"

#define VOCAB_DIR STRIDE_TEST_DATA "/../tokenizer/"

typedef struct vocab {
    st_gguf_file *f;
    st_tokenizer *t;
} vocab;

static vocab open_vocab(const char *name) {
    char path[512];
    snprintf(path, sizeof(path), "%s%s", VOCAB_DIR, name);
    vocab v = {0};
    st_error err = {0};
    if (st_gguf_open(path, &v.f, &err) != ST_OK) fail_msg("%s", err.message);
    if (st_tokenizer_from_gguf(v.f, &v.t, &err) != ST_OK) fail_msg("%s", err.message);
    st_gguf_close(v.f); /* the tokenizer copies what it needs */
    v.f = NULL;
    return v;
}

static void close_vocab(vocab *v) { st_tokenizer_free(v->t); }

static int64_t encode(const st_tokenizer *t, const char *s, size_t n, bool add_special, bool parse_special,
                      int32_t **ids) {
    int64_t n_ids = -1;
    st_error err = {0};
    if (st_tokenizer_encode(t, s, n, add_special, parse_special, ids, &n_ids, &err) != ST_OK)
        fail_msg("encode: %s", err.message);
    assert_non_null(*ids);
    return n_ids;
}

static int32_t id_of(const st_tokenizer *t, const char *special) {
    int32_t *ids;
    int64_t n = encode(t, special, strlen(special), false, true, &ids);
    assert_int_equal(n, 1);
    int32_t id = ids[0];
    free(ids);
    return id;
}

/* Decodes ids with the streaming decoder into a malloc'd string. */
static char *decode_all(const st_tokenizer *t, const int32_t *ids, int64_t n, size_t *len) {
    size_t cap = 64, total = 0;
    char *out = malloc(cap);
    char chunk[512];
    st_detokenizer d;
    st_detokenizer_init(&d, t);
    for (int64_t i = 0; i <= n; i++) {
        size_t k = i < n ? st_detokenizer_push(&d, ids[i], chunk, sizeof(chunk)) : st_detokenizer_flush(&d, chunk, sizeof(chunk));
        assert_int_equal(chunk[k], '\0');
        while (total + k + 1 > cap) out = realloc(out, cap *= 2);
        memcpy(out + total, chunk, k);
        total += k;
    }
    out[total] = '\0';
    *len = total;
    return out;
}

static void assert_round_trip(const st_tokenizer *t, const char *s, size_t n) {
    int32_t *ids;
    int64_t n_ids = encode(t, s, n, false, false, &ids);
    size_t len;
    char *back = decode_all(t, ids, n_ids, &len);
    assert_int_equal(len, n);
    assert_memory_equal(back, s, n);
    free(back);
    free(ids);
}

static void test_load_and_ids(void **state) {
    (void)state;
    vocab spm = open_vocab("spm-small.gguf"), bpe = open_vocab("bpe-llama3.gguf");
    assert_int_equal(st_tokenizer_n_vocab(spm.t), 1200);
    assert_int_equal(st_tokenizer_bos(spm.t), 1);
    assert_int_equal(st_tokenizer_eos(spm.t), 2);
    assert_true(st_tokenizer_is_eog(spm.t, 2));
    assert_false(st_tokenizer_is_eog(spm.t, 1));
    /* <end_of_turn> is a control token: end of generation by its name */
    assert_true(st_tokenizer_is_eog(spm.t, id_of(spm.t, "<end_of_turn>")));
    assert_true(st_tokenizer_is_eog(bpe.t, id_of(bpe.t, "<|eot_id|>")));
    assert_true(st_tokenizer_is_eog(bpe.t, st_tokenizer_eos(bpe.t)));
    close_vocab(&spm);
    close_vocab(&bpe);
}

static void test_empty_text(void **state) {
    (void)state;
    const char *names[] = {"spm-small.gguf", "bpe-llama3.gguf", "bpe-qwen2.gguf"};
    for (int k = 0; k < 3; k++) {
        vocab v = open_vocab(names[k]);
        int32_t *ids;
        assert_int_equal(encode(v.t, "", 0, false, true, &ids), 0);
        free(ids);
        assert_int_equal(encode(v.t, NULL, 0, false, false, &ids), 0);
        free(ids);
        int64_t n = encode(v.t, "", 0, true, false, &ids); /* all three say add_bos_token = true */
        assert_int_equal(n, 1);
        assert_int_equal(ids[0], st_tokenizer_bos(v.t));
        free(ids);
        close_vocab(&v);
    }
}

static void test_byte_fallback(void **state) {
    (void)state;
    vocab v = open_vocab("spm-small.gguf");
    /* U+1F600 is not among the 1200 pieces: four <0xXX> byte tokens, after the "▁" prefix */
    const char *s = "\xF0\x9F\x98\x80";
    int32_t *ids;
    int64_t n = encode(v.t, s, 4, false, false, &ids);
    assert_int_equal(n, 5);
    char buf[16];
    assert_int_equal(st_tokenizer_token_to_bytes(v.t, ids[0], false, buf, sizeof(buf)), 1);
    assert_int_equal(buf[0], ' ');
    for (int i = 0; i < 4; i++) {
        assert_int_equal(st_tokenizer_token_to_bytes(v.t, ids[1 + i], false, buf, sizeof(buf)), 1);
        assert_int_equal((unsigned char)buf[0], (unsigned char)s[i]);
    }
    free(ids);
    /* invalid UTF-8 input falls back byte by byte too, and decodes to U+FFFD */
    n = encode(v.t, "a\xFF" "b", 3, false, false, &ids);
    size_t len;
    char *back = decode_all(v.t, ids, n, &len);
    assert_string_equal(back, "a\xEF\xBF\xBD" "b");
    free(back);
    free(ids);
    const char *mixed = "caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD";
    assert_round_trip(v.t, mixed, strlen(mixed));
    assert_round_trip(v.t, "a\0b\x01\x7F", 5);
    close_vocab(&v);
}

static bool contains(const int32_t *ids, int64_t n, int32_t id) {
    for (int64_t i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return false;
}

static void test_special_tokens(void **state) {
    (void)state;
    const char *names[] = {"spm-small.gguf", "bpe-llama3.gguf"};
    const char *control[] = {"<start_of_turn>", "<|eot_id|>"};
    for (int k = 0; k < 2; k++) {
        vocab v = open_vocab(names[k]);
        int32_t sot = id_of(v.t, control[k]), tool = id_of(v.t, "<tool>");
        char text[128];
        snprintf(text, sizeof(text), "hi%sthere <tool> x", control[k]);
        int32_t *ids;
        int64_t n = encode(v.t, text, strlen(text), false, true, &ids);
        assert_true(contains(ids, n, sot));
        assert_true(contains(ids, n, tool));
        free(ids);
        /* parse_special off: the control text is plain text; USER_DEFINED pieces still match */
        n = encode(v.t, text, strlen(text), false, false, &ids);
        assert_false(contains(ids, n, sot));
        assert_true(contains(ids, n, tool));
        size_t len;
        char *back = decode_all(v.t, ids, n, &len);
        assert_string_equal(back, text);
        free(back);
        free(ids);
        /* BOS and EOS are rendered only when asked */
        char buf[64];
        assert_int_equal(st_tokenizer_token_to_bytes(v.t, sot, false, buf, sizeof(buf)), 0);
        size_t m = st_tokenizer_token_to_bytes(v.t, sot, true, buf, sizeof(buf));
        assert_int_equal(m, strlen(control[k]));
        assert_memory_equal(buf, control[k], m);
        /* a buffer too small: the full length is returned, nothing written past the end */
        memset(buf, '#', sizeof(buf));
        assert_int_equal(st_tokenizer_token_to_bytes(v.t, sot, true, buf, 3), m);
        assert_int_equal(buf[3], '#');
        assert_int_equal(st_tokenizer_token_to_bytes(v.t, -1, true, buf, sizeof(buf)), 0);
        assert_int_equal(st_tokenizer_token_to_bytes(v.t, (int32_t)st_tokenizer_n_vocab(v.t), true, buf, 8), 0);
        close_vocab(&v);
    }
}

static void test_streaming_partial_utf8(void **state) {
    (void)state;
    vocab v = open_vocab("spm-small.gguf");
    /* U+1F600 -> "▁" <0xF0> <0x9F> <0x98> <0x80>: nothing comes out until the 4th byte */
    int32_t *ids;
    int64_t n = encode(v.t, "\xF0\x9F\x98\x80", 4, false, false, &ids);
    assert_int_equal(n, 5);
    st_detokenizer d;
    st_detokenizer_init(&d, v.t);
    char out[64];
    assert_int_equal(st_detokenizer_push(&d, ids[0], out, sizeof(out)), 0); /* the prefix space is dropped */
    for (int i = 1; i < 4; i++) assert_int_equal(st_detokenizer_push(&d, ids[i], out, sizeof(out)), 0);
    assert_int_equal(st_detokenizer_push(&d, ids[4], out, sizeof(out)), 4);
    assert_string_equal(out, "\xF0\x9F\x98\x80");
    assert_int_equal(st_detokenizer_flush(&d, out, sizeof(out)), 0);
    /* a sequence cut short and then broken: one U+FFFD for the broken part, the next byte kept */
    int32_t e2 = ids[1]; /* <0xF0> */
    int32_t a_ids[2];
    st_detokenizer_init(&d, v.t);
    d.first = false;
    a_ids[0] = e2;
    a_ids[1] = ids[2]; /* <0x9F> */
    size_t k = st_detokenizer_push(&d, a_ids[0], out, sizeof(out));
    k += st_detokenizer_push(&d, a_ids[1], out, sizeof(out));
    assert_int_equal(k, 0);
    k = st_detokenizer_push(&d, e2, out, sizeof(out)); /* F0 9F F0: F0 9F is broken */
    assert_string_equal(out, "\xEF\xBF\xBD");
    k = st_detokenizer_flush(&d, out, sizeof(out)); /* the lone F0 pending */
    assert_string_equal(out, "\xEF\xBF\xBD");
    /* a lone continuation byte */
    st_detokenizer_init(&d, v.t);
    d.first = false;
    k = st_detokenizer_push(&d, ids[4], out, sizeof(out)); /* <0x80> */
    assert_string_equal(out, "\xEF\xBF\xBD");
    (void)k;
    free(ids);

    /* byte-level BPE: a CJK character cut across tokens comes out whole */
    vocab b = open_vocab("bpe-qwen2.gguf");
    const char *s = "\xE4\xB8\xAD\xF0\x9F\x98\x80";
    n = encode(b.t, s, 7, false, false, &ids);
    st_detokenizer_init(&d, b.t);
    size_t total = 0;
    char acc[64];
    for (int64_t i = 0; i < n; i++) {
        k = st_detokenizer_push(&d, ids[i], out, sizeof(out));
        if (k) assert_true(k == 3 || k == 4 || k == 7); /* only whole characters */
        memcpy(acc + total, out, k);
        total += k;
    }
    assert_int_equal(total, 7);
    assert_memory_equal(acc, s, 7);
    free(ids);
    close_vocab(&b);
    close_vocab(&v);
}

static void test_huge_input(void **state) {
    (void)state;
    /* 4 MiB of mixed text and a 1 MiB word: linear-ish time, exact round trip */
    const char *unit = "The quick brown fox, 12345 caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87!\n\t  ";
    size_t un = strlen(unit), n = (4u << 20) / un * un;
    char *text = malloc(n + 1);
    for (size_t i = 0; i < n; i += un) memcpy(text + i, unit, un);
    text[n] = '\0';
    size_t wn = 1u << 20;
    char *word = malloc(wn);
    memset(word, 'a', wn);
    const char *names[] = {"spm-small.gguf", "bpe-llama3.gguf", "bpe-qwen2.gguf"};
    for (int k = 0; k < 3; k++) {
        vocab v = open_vocab(names[k]);
        assert_round_trip(v.t, text, n);
        assert_round_trip(v.t, word, wn);
        close_vocab(&v);
    }
    free(word);
    free(text);
}

/* A GGUF with only tokenizer metadata, written with stride's writer. */
static st_status write_vocab(const char *path, const char *model, const char *pre) {
    st_gguf_writer *w;
    st_error err = {0};
    const char *tokens[] = {"a", "b", "ab"};
    const char *merges[] = {"a b"};
    st_status st = st_gguf_writer_open(path, &w, &err);
    if (st) return st;
    if ((st = st_gguf_writer_set_str(w, "tokenizer.ggml.model", model, &err)) ||
        (pre && (st = st_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre, &err))) ||
        (st = st_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, 3, &err)) ||
        (st = st_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 1, &err)) ||
        (st = st_gguf_writer_write_header(w, &err))) {
        st_gguf_writer_abort(w);
        return st;
    }
    return st_gguf_writer_close(w, &err);
}

static st_status load_written(const char *model, const char *pre, st_error *err) {
    char path[] = "/tmp/stride-test-tok-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(write_vocab(path, model, pre), ST_OK);
    st_gguf_file *f;
    st_tokenizer *t = NULL;
    st_status st = st_gguf_open(path, &f, err);
    assert_int_equal(st, ST_OK);
    st = st_tokenizer_from_gguf(f, &t, err);
    if (st == ST_OK) {
        int32_t *ids;
        int64_t n = encode(t, "abab", 4, false, false, &ids);
        assert_int_equal(n, 2); /* "ab" "ab" */
        assert_int_equal(ids[0], 2);
        free(ids);
    }
    st_tokenizer_free(t);
    st_gguf_close(f);
    unlink(path);
    return st;
}

static void test_unsupported(void **state) {
    (void)state;
    st_error err = {0};
    assert_int_equal(load_written("gpt2", "gpt-9000", &err), ST_ERROR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "gpt-9000"));
    assert_int_equal(load_written("gpt2", NULL, &err), ST_ERROR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "tokenizer.ggml.pre"));
    assert_int_equal(load_written("bert", NULL, &err), ST_ERROR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "bert"));
    assert_int_equal(load_written("gpt2", "qwen2", &err), ST_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_and_ids),       cmocka_unit_test(test_empty_text),
        cmocka_unit_test(test_byte_fallback),      cmocka_unit_test(test_special_tokens),
        cmocka_unit_test(test_streaming_partial_utf8), cmocka_unit_test(test_huge_input),
        cmocka_unit_test(test_unsupported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
