/* The small endpoints (server.h): /tokenize, /detokenize (llama-server's shapes) and
 * /v1/models. */
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

static void reply_error(srv_reply *out, int status, const char *message) {
    out->status = status;
    out->body = srv_error_body(status, message);
}

static json_t *load_object(const char *body, size_t len, srv_reply *out) {
    json_error_t jerr;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    char msg[300];
    if (!o) {
        snprintf(msg, sizeof(msg), "the body is not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line,
                 jerr.column);
        reply_error(out, 400, msg);
    } else if (!json_is_object(o)) {
        json_decref(o);
        o = NULL;
        reply_error(out, 400, "the body must be a JSON object");
    }
    return o;
}

void srv_handle_tokenize(srv_server *s, const char *body, size_t len, srv_reply *out) {
    json_t *o = load_object(body, len, out);
    if (!o) return;
    json_t *content = json_object_get(o, "content"), *add = json_object_get(o, "add_special"),
           *pieces = json_object_get(o, "with_pieces");
    if (!json_is_string(content) || strlen(json_string_value(content)) != json_string_length(content) ||
        (add && !json_is_boolean(add)) || (pieces && !json_is_boolean(pieces))) {
        json_decref(o);
        return reply_error(out, 400, "expected {\"content\": string, \"add_special\"?: bool, \"with_pieces\"?: bool}");
    }
    int32_t *ids = NULL;
    int64_t n = 0;
    st_error err = {0};
    if (st_tokenizer_encode(s->tok, json_string_value(content), json_string_length(content), json_is_true(add), true,
                            &ids, &n, &err) != ST_OK) {
        json_decref(o);
        return reply_error(out, 400, err.message);
    }
    json_t *arr = json_array();
    for (int64_t i = 0; i < n; i++) {
        if (json_is_true(pieces)) {
            char buf[512];
            size_t k = st_tokenizer_token_to_bytes(s->tok, ids[i], true, buf, sizeof(buf));
            st_strbuf b = {0};
            srv_utf8_sanitize(&b, buf, k < sizeof(buf) ? k : sizeof(buf));
            json_array_append_new(arr, json_pack("{s:i,s:s%}", "id", (int)ids[i], "piece", b.data ? b.data : "", b.len));
            st_strbuf_free(&b);
        } else {
            json_array_append_new(arr, json_integer(ids[i]));
        }
    }
    free(ids);
    json_decref(o);
    out->status = 200;
    out->body = srv_json_take(json_pack("{s:o}", "tokens", arr));
}

void srv_handle_detokenize(srv_server *s, const char *body, size_t len, srv_reply *out) {
    json_t *o = load_object(body, len, out);
    if (!o) return;
    json_t *tokens = json_object_get(o, "tokens");
    const int64_t V = st_tokenizer_n_vocab(s->tok);
    if (!json_is_array(tokens)) {
        json_decref(o);
        return reply_error(out, 400, "expected {\"tokens\": [token ids]}");
    }
    st_detokenizer d;
    st_detokenizer_init(&d, s->tok);
    st_strbuf text = {0};
    for (size_t i = 0; i < json_array_size(tokens); i++) {
        json_t *v = json_array_get(tokens, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= V) {
            char msg[128];
            snprintf(msg, sizeof(msg), "tokens[%zu] is not a token id (0 to %lld)", i, (long long)V - 1);
            st_strbuf_free(&text);
            json_decref(o);
            return reply_error(out, 400, msg);
        }
        char piece[1024];
        st_strbuf_add(&text, piece, st_detokenizer_push(&d, (int32_t)json_integer_value(v), piece, sizeof(piece)));
    }
    char tail[64];
    st_strbuf_add(&text, tail, st_detokenizer_flush(&d, tail, sizeof(tail)));
    st_strbuf clean = {0};
    srv_utf8_sanitize(&clean, text.data ? text.data : "", text.len);
    out->status = 200;
    out->body = srv_json_take(json_pack("{s:s%}", "content", clean.data ? clean.data : "", clean.len));
    st_strbuf_free(&text);
    st_strbuf_free(&clean);
    json_decref(o);
}

void srv_handle_models(srv_server *s, srv_reply *out) {
    st_engine_stats st;
    st_engine_config cfg;
    srv_loop_stats(s->loop, &st, &cfg);
    out->status = 200;
    out->body = srv_json_take(json_pack(
        "{s:s,s:[{s:s,s:s,s:I,s:s,s:{s:I,s:I,s:s?,s:I}}]}", "object", "list", "data", "id", s->model_name, "object",
        "model", "created", (json_int_t)s->created, "owned_by", "stride", "meta", "n_ctx", (json_int_t)cfg.n_ctx,
        "n_vocab", (json_int_t)st_tokenizer_n_vocab(s->tok), "chat_template",
        s->has_chat ? st_chat_family_name(s->chat.family) : NULL, "n_parallel", (json_int_t)cfg.n_parallel));
}
