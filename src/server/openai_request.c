/* The OpenAI requests (server_internal.h): every field is checked here, where a request
 * enters, and a bad one is a 400 that names it (an unknown model 404). Fields stride does
 * not use are ignored, as OpenAI's own server ignores what it does not know; fields whose
 * effect stride cannot give (tools, echo, penalties other than repeat_penalty) are
 * refused rather than silently dropped. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

#define BAD(...) (st_error_set(err, ST_ERROR_INVALID, __VA_ARGS__), 400)

/* A number field within [lo, hi] (exclusive ends when lo_open / hi_open). */
static int get_number(json_t *o, const char *key, double lo, bool lo_open, double hi, bool hi_open, float *out,
                      st_error *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return BAD("'%s' must be a number", key);
    const double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi || (lo_open && d == lo) || (hi_open && d == hi))
        return BAD("'%s' is %g: it must be in %s%g, %g%s", key, d, lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]");
    *out = (float)d;
    return 0;
}

static int get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, bool *given, st_error *err) {
    json_t *v = json_object_get(o, key);
    if (given) *given = false;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return BAD("'%s' must be an integer", key);
    const long long x = json_integer_value(v);
    if (x < lo || x > hi) return BAD("'%s' is %lld: it must be in [%lld, %lld]", key, x, lo, hi);
    *out = x;
    if (given) *given = true;
    return 0;
}

static int get_bool(json_t *o, const char *key, bool *out, st_error *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return BAD("'%s' must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

/* A JSON string as a C string: NUL bytes inside are refused. */
static int plain_string(json_t *v, const char *what, const char **out, st_error *err) {
    if (!json_is_string(v)) return BAD("%s must be a string", what);
    if (strlen(json_string_value(v)) != json_string_length(v)) return BAD("%s holds a NUL character", what);
    *out = json_string_value(v);
    return 0;
}

static int parse_stop(json_t *o, srv_request *r, st_error *err) {
    json_t *v = json_object_get(o, "stop");
    if (!v || json_is_null(v)) return 0;
    json_t *one[1] = {v};
    json_t **items = one;
    size_t n = 1;
    if (json_is_array(v)) {
        n = json_array_size(v);
        if (n > SRV_MAX_STOP) return BAD("'stop' holds %zu strings: at most %d", n, SRV_MAX_STOP);
        items = NULL;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = items ? items[i] : json_array_get(v, i);
        const char *text = NULL;
        int st = plain_string(s, "'stop' (a string or an array of strings)", &text, err);
        if (st) return st;
        const size_t len = strlen(text);
        if (len == 0 || len > SRV_MAX_STOP_BYTES)
            return BAD("a stop string of %zu bytes: expected 1 to %d", len, SRV_MAX_STOP_BYTES);
        if (!(r->stop[r->n_stop] = strdup(text))) return BAD("out of memory");
        r->n_stop++;
    }
    return 0;
}

/* A message's content: a string, or an array of {"type": "text", "text": ...} parts
 * (joined with "\n"). */
static int message_content(json_t *m, size_t i, st_strbuf *out, st_error *err) {
    json_t *c = json_object_get(m, "content");
    if (json_is_string(c)) {
        const char *s = NULL;
        int st = plain_string(c, "a message's content", &s, err);
        if (st) return st;
        st_strbuf_adds(out, s);
        return 0;
    }
    if (!json_is_array(c)) return BAD("messages[%zu].content must be a string or an array of text parts", i);
    for (size_t k = 0; k < json_array_size(c); k++) {
        json_t *part = json_array_get(c, k);
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        const char *s = NULL;
        if (!json_is_string(type) || strcmp(json_string_value(type), "text") != 0 || !json_is_string(text))
            return BAD("messages[%zu].content[%zu]: only parts of type \"text\" are supported", i, k);
        int st = plain_string(text, "a text part", &s, err);
        if (st) return st;
        if (k > 0) st_strbuf_adds(out, "\n");
        st_strbuf_adds(out, s);
    }
    return 0;
}

static int parse_messages(const srv_server *s, json_t *o, srv_request *r, st_error *err) {
    if (!s->has_chat)
        return BAD("this model has no chat template stride recognises: restart the server with --chat-template "
                   "(%s), or use /v1/completions",
                   st_chat_family_list());
    json_t *msgs = json_object_get(o, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) return BAD("'messages' must be a non-empty array");
    const size_t n = json_array_size(msgs);
    if (n > 4096) return BAD("'messages' holds %zu messages: at most 4096", n);
    st_chat_message *cm = calloc(n, sizeof(*cm));
    st_strbuf *texts = calloc(n, sizeof(*texts));
    int st = cm && texts ? 0 : BAD("out of memory");
    for (size_t i = 0; st == 0 && i < n; i++) {
        json_t *m = json_array_get(msgs, i);
        json_t *role = json_object_get(m, "role");
        if (!json_is_object(m) || !json_is_string(role)) {
            st = BAD("messages[%zu] must be an object with a 'role'", i);
            break;
        }
        const char *rs = json_string_value(role);
        if (strcmp(rs, "developer") == 0) rs = "system"; /* OpenAI's newer name for it */
        if (strcmp(rs, "system") != 0 && strcmp(rs, "user") != 0 && strcmp(rs, "assistant") != 0) {
            st = BAD("messages[%zu]: role '%.32s' is not supported (system, user, assistant)", i, rs);
            break;
        }
        if (json_object_get(m, "tool_calls") && !json_is_null(json_object_get(m, "tool_calls"))) {
            st = BAD("messages[%zu]: tool calls are not supported", i);
            break;
        }
        cm[i].role = rs;
        if ((st = message_content(m, i, &texts[i], err)) != 0) break;
        cm[i].content = texts[i].data ? texts[i].data : "";
        json_t *rc = json_object_get(m, "reasoning_content");
        if (json_is_string(rc) && (st = plain_string(rc, "reasoning_content", &cm[i].reasoning, err)) != 0) break;
    }
    if (st == 0) {
        for (size_t i = 0; i < n; i++)
            if (texts[i].failed) st = BAD("out of memory");
    }
    if (st == 0) {
        st_chat_options co = {.add_generation_prompt = true, .enable_thinking = -1};
        json_t *kw = json_object_get(o, "chat_template_kwargs");
        if (kw && !json_is_null(kw)) {
            bool think = true;
            if (!json_is_object(kw)) st = BAD("'chat_template_kwargs' must be an object");
            else if (json_object_get(kw, "enable_thinking") && (st = get_bool(kw, "enable_thinking", &think, err)) == 0)
                co.enable_thinking = think ? 1 : 0;
        }
        size_t len = 0;
        if (st == 0 && st_chat_template_apply(&s->chat, cm, n, &co, &r->prompt_text, &len, err) != ST_OK) st = 400;
    }
    for (size_t i = 0; texts && i < n; i++) st_strbuf_free(&texts[i]);
    free(texts);
    free(cm);
    return st;
}

static int parse_prompt(const srv_server *s, json_t *o, srv_request *r, st_error *err) {
    json_t *p = json_object_get(o, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0))) p = json_array_get(p, 0);
    if (json_is_string(p)) {
        const char *text = NULL;
        int st = plain_string(p, "'prompt'", &text, err);
        if (st) return st;
        if (!(r->prompt_text = strdup(text))) return BAD("out of memory");
        return 0;
    }
    if (!json_is_array(p) || json_array_size(p) == 0)
        return BAD("'prompt' must be a string, or an array of token ids (one prompt per request)");
    const size_t n = json_array_size(p);
    if ((int64_t)n > s->n_ctx) return BAD("the prompt has %zu tokens: the context holds %lld", n, (long long)s->n_ctx);
    if (!(r->prompt_ids = malloc(n * sizeof(int32_t)))) return BAD("out of memory");
    const int64_t V = st_tokenizer_n_vocab(s->tok);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(p, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= V)
            return BAD("prompt[%zu] is not a token id (0 to %lld)", i, (long long)V - 1);
        r->prompt_ids[i] = (int32_t)json_integer_value(v);
    }
    r->n_prompt_ids = (int64_t)n;
    return 0;
}

/* Fields stride refuses rather than ignores: their effect would silently be missing. */
static int refuse_unsupported(json_t *o, srv_kind kind, st_error *err) {
    json_t *v;
    if ((v = json_object_get(o, "tools")) && !json_is_null(v) && !(json_is_array(v) && json_array_size(v) == 0))
        return BAD("'tools' is not supported");
    if (kind == SRV_COMPLETION && (v = json_object_get(o, "echo")) && json_is_true(v))
        return BAD("'echo' is not supported");
    if (kind == SRV_COMPLETION && (v = json_object_get(o, "suffix")) && json_is_string(v) && json_string_length(v) > 0)
        return BAD("'suffix' is not supported");
    long long best_of = 1;
    bool given = false;
    int st = get_int(o, "best_of", 1, 1, &best_of, &given, err);
    return st ? BAD("'best_of' other than 1 is not supported") : 0;
}

int srv_request_parse(const srv_server *s, srv_kind kind, const char *body, size_t len, srv_request *r,
                      st_error *err) {
    memset(r, 0, sizeof(*r));
    r->kind = kind;
    r->n = 1;
    r->sampling = s->opt.sampling; /* the server's defaults (st_server_options) */
    r->sampling.seed = (uint64_t)atomic_fetch_add((atomic_llong *)&s->next_id, 1) * 0x9E3779B97F4A7C15ull;
    r->max_tokens = kind == SRV_COMPLETION ? 16 : -1;
    json_error_t jerr;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!o) return BAD("the body is not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line, jerr.column);
    int st = 0;
    if (!json_is_object(o)) st = BAD("the body must be a JSON object");
    json_t *model = st ? NULL : json_object_get(o, "model");
    if (!st && model && !json_is_null(model)) {
        if (!json_is_string(model)) st = BAD("'model' must be a string");
        else if (strcmp(json_string_value(model), s->model_name) != 0) {
            st_error_set(err, ST_ERROR_INVALID, "The model '%.200s' does not exist (this server serves '%s')",
                         json_string_value(model), s->model_name);
            st = 404;
        }
    }
    if (!st) st = refuse_unsupported(o, kind, err);
    if (!st) st = get_number(o, "temperature", 0.0, false, 2.0, false, &r->sampling.temp, err);
    if (!st) st = get_number(o, "top_p", 0.0, true, 1.0, false, &r->sampling.top_p, err);
    if (!st) st = get_number(o, "min_p", 0.0, false, 1.0, true, &r->sampling.min_p, err);
    if (!st) st = get_number(o, "repeat_penalty", 0.0, true, 10.0, false, &r->sampling.repeat_penalty, err);
    if (!st) st = get_number(o, "frequency_penalty", -2.0, false, 2.0, false, &r->sampling.frequency_penalty, err);
    if (!st) st = get_number(o, "presence_penalty", -2.0, false, 2.0, false, &r->sampling.presence_penalty, err);
    long long x = 0;
    bool given = false;
    if (!st && (st = get_int(o, "top_k", -1, 1 << 30, &x, &given, err)) == 0 && given)
        r->sampling.top_k = x < 0 ? 0 : (int32_t)x;
    if (!st && (st = get_int(o, "seed", INT64_MIN, INT64_MAX, &x, &given, err)) == 0 && given)
        r->sampling.seed = (uint64_t)x;
    if (!st && (st = get_int(o, "n", 1, s->opt.max_n, &x, &given, err)) == 0 && given) r->n = (int32_t)x;
    const char *max_key = json_object_get(o, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (!st && (st = get_int(o, max_key, 1, INT32_MAX, &x, &given, err)) == 0 && given) r->max_tokens = x;
    if (!st) st = get_bool(o, "stream", &r->stream, err);
    if (!st) st = get_bool(o, "ignore_eos", &r->ignore_eos, err);
    json_t *so = st ? NULL : json_object_get(o, "stream_options");
    if (!st && so && !json_is_null(so)) {
        if (!json_is_object(so)) st = BAD("'stream_options' must be an object");
        else st = get_bool(so, "include_usage", &r->include_usage, err);
    }
    if (!st) st = parse_stop(o, r, err);
    if (!st && kind == SRV_COMPLETION) {
        if ((st = get_int(o, "logprobs", 0, ST_ENGINE_MAX_TOP_LOGPROBS, &x, &given, err)) == 0 && given) {
            r->logprobs = true;
            r->top_logprobs = (int32_t)x;
        }
    } else if (!st) {
        if ((st = get_bool(o, "logprobs", &r->logprobs, err)) == 0 &&
            (st = get_int(o, "top_logprobs", 0, ST_ENGINE_MAX_TOP_LOGPROBS, &x, &given, err)) == 0 && given) {
            if (!r->logprobs) st = BAD("'top_logprobs' needs 'logprobs': true");
            r->top_logprobs = (int32_t)x;
        }
    }
    if (!st) st = kind == SRV_CHAT ? parse_messages(s, o, r, err) : parse_prompt(s, o, r, err);
    json_decref(o);
    return st;
}

void srv_request_free(srv_request *r) {
    for (int32_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->prompt_text);
    free(r->prompt_ids);
    memset(r, 0, sizeof(*r));
}
