/* stride tokenize -m MODEL (-p TEXT | -f FILE) [--ids-only] [--no-bos] [--parse-special] [--json]:
 * the token ids of a text, like llama.cpp's llama-tokenize. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "stride/file_io.h"
#include "stride/gguf.h"
#include "stride/tokenizer.h"

static const char *CMD = "tokenize";

static void usage(FILE *out) {
    fprintf(out,
            "usage: stride tokenize -m MODEL (-p TEXT | -f FILE) [options]\n\n"
            "Prints the tokens of a text with the model's vocabulary, one per line as\n"
            "`id -> 'piece'` (like llama.cpp's llama-tokenize).\n\n"
            "options:\n"
            "  -m, --model FILE     GGUF file whose vocabulary is used (no weights are loaded)\n"
            "  -p, --prompt TEXT    the text\n"
            "  -f, --file FILE      read the text from FILE, byte for byte ('-': standard input)\n"
            "  --ids-only           print only the ids, as [1, 2, 3]\n"
            "  --no-bos             do not add BOS/EOS (otherwise added as the vocabulary says)\n"
            "  --parse-special      turn text like <start_of_turn> into its special token\n"
            "                       (otherwise it is tokenized as plain text)\n"
            "  --json               {\"ids\": [...], \"pieces\": [...], \"text\": ...}: the ids, each\n"
            "                       token's bytes, and the whole sequence decoded back to text\n");
}

static int read_text(const char *path, char **data, size_t *len) {
    FILE *f = stdin;
    st_error err = {0};
    if (strcmp(path, "-") != 0 && st_file_fopen_read(path, "text file", &f, NULL, &err) != ST_OK)
        return cli_fail(CMD, &err); /* a regular file only: a FIFO is refused, never waited on */
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        if (n == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    bool failed = !buf || ferror(f);
    if (f != stdin) fclose(f);
    if (failed) {
        free(buf);
        fprintf(stderr, "stride %s: cannot read %s%s\n", CMD, path, buf ? "" : " (out of memory)");
        return ST_EXIT_FAILURE;
    }
    *data = buf;
    *len = n;
    return ST_EXIT_OK;
}

/* The bytes of token id, whole however long (*buf grown as needed; NULL when out of
 * memory: then nothing). Returns the length. */
static size_t piece_bytes(const st_tokenizer *tok, int32_t id, char **buf, size_t *cap) {
    size_t len = st_tokenizer_token_to_bytes(tok, id, true, *buf, *cap);
    if (len <= *cap) return len;
    char *grown = realloc(*buf, len);
    if (!grown) return 0;
    *buf = grown;
    *cap = len;
    return st_tokenizer_token_to_bytes(tok, id, true, *buf, *cap);
}

static void print_json(const st_tokenizer *tok, const int32_t *ids, int64_t n) {
    printf("{\"ids\": [");
    for (int64_t i = 0; i < n; i++) printf("%s%" PRId32, i ? ", " : "", ids[i]);
    printf("], \"pieces\": [");
    char *piece = NULL;
    size_t piece_cap = 0;
    for (int64_t i = 0; i < n; i++) {
        /* each piece's bytes as a list of numbers: a piece may be part of a UTF-8 character */
        size_t len = piece_bytes(tok, ids[i], &piece, &piece_cap);
        printf("%s[", i ? ", " : "");
        for (size_t k = 0; k < len; k++) printf("%s%u", k ? ", " : "", (unsigned)(unsigned char)piece[k]);
        printf("]");
    }
    free(piece);
    printf("], \"text\": ");
    /* the streaming decoder, as generation uses it */
    size_t cap = 256, total = 0;
    char *text = malloc(cap);
    st_detokenizer d;
    st_detokenizer_init(&d, tok);
    /* a piece's text: its bytes, each at worst a 3-byte U+FFFD, plus the bytes held over */
    size_t longest = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t k = st_tokenizer_token_to_bytes(tok, ids[i], false, NULL, 0);
        if (k > longest) longest = k;
    }
    const size_t chunk_cap = 3 * (longest + sizeof(d.pending)) + 1;
    char *chunk = malloc(chunk_cap);
    if (!chunk) {
        free(text);
        text = NULL;
    }
    for (int64_t i = 0; i <= n && text; i++) {
        size_t k = i < n ? st_detokenizer_push(&d, ids[i], chunk, chunk_cap) : st_detokenizer_flush(&d, chunk, chunk_cap);
        if (total + k + 1 > cap) {
            while (total + k + 1 > cap) cap *= 2;
            char *nt = realloc(text, cap);
            if (!nt) {
                free(text);
                text = NULL;
                break;
            }
            text = nt;
        }
        memcpy(text + total, chunk, k);
        total += k;
    }
    free(chunk);
    if (text) cli_json_string(stdout, text, total);
    else printf("null");
    printf("}\n");
    free(text);
}

int st_cmd_tokenize(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *file = NULL;
    bool ids_only = false, no_bos = false, parse_special = false, json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool missing = false;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return ST_EXIT_OK;
        }
        if (cli_take_value(argc, argv, &i, "-m", &model_path, &missing) ||
            cli_take_value(argc, argv, &i, "--model", &model_path, &missing) ||
            cli_take_value(argc, argv, &i, "-p", &prompt, &missing) ||
            cli_take_value(argc, argv, &i, "--prompt", &prompt, &missing) ||
            cli_take_value(argc, argv, &i, "-f", &file, &missing) ||
            cli_take_value(argc, argv, &i, "--file", &file, &missing)) {
            continue;
        }
        if (missing) return cli_usage_error(CMD, "%s needs a value", a);
        if (strcmp(a, "--ids-only") == 0) ids_only = true;
        else if (strcmp(a, "--no-bos") == 0) no_bos = true;
        else if (strcmp(a, "--parse-special") == 0) parse_special = true;
        else if (strcmp(a, "--json") == 0) json = true;
        else return cli_usage_error(CMD, "unknown option '%s'", a);
    }
    if (!model_path) return cli_usage_error(CMD, "no model given (-m MODEL)");
    if (!prompt == !file) return cli_usage_error(CMD, "give the text with exactly one of -p TEXT and -f FILE");

    char *text = NULL;
    size_t len = 0;
    if (file) {
        int rc = read_text(file, &text, &len);
        if (rc != ST_EXIT_OK) return rc;
    }
    st_error err = {0};
    st_gguf_file *f = NULL;
    st_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    int64_t n = 0;
    int rc = ST_EXIT_OK;
    if (st_gguf_open(model_path, &f, &err) || st_tokenizer_from_gguf(f, &tok, &err) ||
        st_tokenizer_encode(tok, file ? text : prompt, file ? len : strlen(prompt), !no_bos, parse_special, &ids,
                            &n, &err)) {
        rc = cli_fail(CMD, &err);
        goto done;
    }
    if (json) {
        print_json(tok, ids, n);
    } else if (ids_only) {
        printf("[");
        for (int64_t i = 0; i < n; i++) printf("%s%" PRId32, i ? ", " : "", ids[i]);
        printf("]\n");
    } else {
        char *piece = NULL;
        size_t cap = 0;
        for (int64_t i = 0; i < n; i++) {
            size_t k = piece_bytes(tok, ids[i], &piece, &cap);
            printf("%6" PRId32 " -> '", ids[i]);
            /* the piece as text; control bytes (a newline, an escape sequence from the
             * vocabulary) shown as \xNN so that each token stays on its line */
            for (size_t j = 0; j < k; j++) {
                unsigned char c = (unsigned char)piece[j];
                if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
                else putchar(c);
            }
            printf("'\n");
        }
        free(piece);
    }
    if (fflush(stdout) != 0) rc = ST_EXIT_FAILURE;
done:
    free(ids);
    st_tokenizer_free(tok);
    st_gguf_close(f);
    free(text);
    return rc;
}
