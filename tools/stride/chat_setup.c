#include "chat_setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void token_text(const st_tokenizer *tok, int32_t id, char *buf, size_t size) {
    buf[0] = '\0';
    if (id < 0) return;
    const size_t n = st_tokenizer_token_to_bytes(tok, id, true, buf, size - 1);
    buf[n < size - 1 ? n : 0] = '\0';
}

/* Whether text is one special token of the vocabulary. */
static bool is_special_token(const st_tokenizer *tok, const char *text) {
    int32_t *ids = NULL;
    int64_t n = 0;
    const bool one = st_tokenizer_encode(tok, text, strlen(text), false, true, &ids, &n, NULL) == ST_OK && n == 1;
    free(ids);
    return one;
}

st_status cli_chat_template(const st_model *m, const st_tokenizer *tok, const char *name, st_chat_template *out,
                            bool *found, st_error *err) {
    char bos[ST_CHAT_TOKEN_MAX], eos[ST_CHAT_TOKEN_MAX];
    token_text(tok, st_tokenizer_bos(tok), bos, sizeof(bos));
    token_text(tok, st_tokenizer_eos(tok), eos, sizeof(eos));
    st_gguf_string s = {0};
    const bool has = st_gguf_find(m->file, "tokenizer.chat_template") != NULL;
    /* A Gemma 3 file without a template (the base models') still has Gemma's turn tokens:
     * its family is not in doubt. */
    if (!has && !name && m->hp.arch == ST_ARCH_GEMMA3 && is_special_token(tok, "<start_of_turn>") &&
        is_special_token(tok, "<end_of_turn>")) {
        fprintf(stderr, "stride: the model carries no chat template; its architecture and turn tokens are Gemma 3's: "
                        "using gemma3 (--chat-template names another)\n");
        name = "gemma3";
    }
    *found = name != NULL || has;
    if (!*found) return ST_OK;
    char *text = NULL;
    if (!name) {
        st_status st = st_gguf_get_str(m->file, "tokenizer.chat_template", &s, err);
        if (st != ST_OK) return st;
        if (!(text = malloc(s.len + 1))) return st_error_set(err, ST_ERROR_NOMEM, "out of memory");
        memcpy(text, s.data, s.len);
        text[s.len] = '\0';
    }
    st_status st = st_chat_template_init(text, name, bos, eos, out, err);
    free(text);
    return st;
}
