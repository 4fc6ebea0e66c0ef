/* Chat templates (chat.h): recognising a model's Jinja template by its markers and the
 * strings it can output, and rendering each family in C. Every renderer follows its
 * family's real template line by line (tests/data/chat_templates/ holds them; the tests
 * compare with jinja2's output). */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "server/strbuf.h"
#include "stride/chat.h"

static const char *const NAMES[ST_CHAT_FAMILY_COUNT] = {
    "llama3", "llama3.1", "llama3.2", "chatml", "qwen3", "gemma3", "phi3", "phi4", "olmoe",
};

const char *st_chat_family_name(st_chat_family f) {
    return f >= 0 && f < ST_CHAT_FAMILY_COUNT ? NAMES[f] : "?";
}

const char *st_chat_family_list(void) { return "llama3, llama3.1, llama3.2, chatml, qwen3, gemma3, phi3, phi4, olmoe"; }

/* ---- recognition ---------------------------------------------------------------------- */

/* Every string literal of the family's known templates (decoded), and the words they test
 * roles and fields with. A template whose output could hold any other text is not one of
 * them. */
static const char *const LIT_LLAMA3[] = {
    "", "\n\n", "\", ", "\"parameters\": ", "%d %b %Y", "26 Jul 2024", "<|end_header_id|>\n\n", "<|eot_id|>",
    "<|start_header_id|>", "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "<|start_header_id|>ipython<|end_header_id|>\n\n", "<|start_header_id|>system<|end_header_id|>\n\n",
    "<|start_header_id|>user<|end_header_id|>\n\n",
    "Cannot put tools in the first user message when there's no first user message!",
    "Cutting Knowledge Date: December 2023\n", "Do not use variables.\n\n", "Environment: ipython\n",
    "Given the following functions, please respond with a JSON for a function call ",
    "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.",
    "This model only supports single tool-calls at once!", "Today Date: ",
    "You have access to the following functions. To call a function, please respond with JSON for a function "
    "call.",
    "content", "ipython", "role", "system", "tool", "tool_calls", "assistant", "user",
    "with its proper arguments that best answers the given prompt.\n\n", "{\"name\": \"", "}", NULL};
static const char *const LIT_CHATML[] = {"\n", "<|im_end|>", "<|im_start|>", "<|im_start|>assistant\n", "<|im_end|>\n",
                                         "content", "role", "system", "user", "assistant", NULL};
static const char *const LIT_QWEN3[] = {
    "", "\n", "\n\n", "\n</think>\n\n", "\n</tool_response>",
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n",
    "\n<think>\n", "\n<tool_response>\n", "\", \"arguments\": ",
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function "
    "signatures within <tools></tools> XML tags:\n<tools>",
    "</think>", "</tool_response>", "<think>", "<think>\n\n</think>\n\n", "<tool_call>\n{\"name\": \"",
    "<tool_response>", "<|im_end|>", "<|im_end|>\n", "<|im_start|>", "<|im_start|>assistant\n",
    "<|im_start|>system\n", "<|im_start|>user", "assistant", "system", "tool", "user", "}\n</tool_call>", NULL};
static const char *const LIT_GEMMA3[] = {"", "\n", "\n\n", "<end_of_turn>\n", "<start_of_image>", "<start_of_turn>",
                                         "<start_of_turn>model\n",
                                         "Conversation roles must alternate user/assistant/user/assistant/...",
                                         "Invalid content type", "assistant", "content", "image", "model", "role",
                                         "system", "text", "type", "user", NULL};
static const char *const LIT_PHI3[] = {"<|assistant|>\n", "<|end|>\n", "<|system|>\n", "<|user|>\n", "assistant",
                                       "content", "role", "system", "user", NULL};
static const char *const LIT_PHI4[] = {"<|", "<|/tool|>", "<|assistant|>", "<|end|>", "<|tool|>", "content", "role",
                                       "system", "tools", "|>", NULL};
static const char *const LIT_OLMOE[] = {"\n", "<|assistant|>\n", "<|system|>\n", "<|user|>\n", "assistant",
                                        "content", "role", "system", "user", NULL};

static bool in_list(const char *const *list, const char *s, size_t n) {
    for (; *list; list++)
        if (strlen(*list) == n && memcmp(*list, s, n) == 0) return true;
    return false;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* Whether every literal of text (quoted strings inside {{ }} and {% %}, with \n \t \\ \'
 * \" decoded) and every non-blank piece outside the tags is in `allowed`. Comments are
 * skipped. An unterminated tag or string fails. */
static bool literals_allowed(const char *text, const char *const *allowed) {
    const size_t n = strlen(text);
    char *lit = malloc(n + 1);
    if (!lit) return false;
    bool ok = true;
    size_t i = 0;
    while (ok && i < n) {
        if (text[i] == '{' && i + 1 < n && text[i + 1] == '#') {
            const char *end = strstr(text + i + 2, "#}");
            if (!end) ok = false;
            else i = (size_t)(end - text) + 2;
        } else if (text[i] == '{' && i + 1 < n && (text[i + 1] == '{' || text[i + 1] == '%')) {
            const char close = text[i + 1] == '{' ? '}' : '%';
            size_t j = i + 2;
            for (;;) {
                if (j + 1 >= n) {
                    ok = false;
                    break;
                }
                const char c = text[j];
                if (c == '"' || c == '\'') {
                    size_t k = j + 1, m = 0;
                    while (k < n && text[k] != c) {
                        if (text[k] == '\\' && k + 1 < n) {
                            const char e = text[k + 1];
                            lit[m++] = e == 'n' ? '\n' : e == 't' ? '\t' : e;
                            if (e != 'n' && e != 't' && e != '\\' && e != '\'' && e != '"') {
                                lit[m - 1] = '\\';
                                lit[m++] = e;
                            }
                            k += 2;
                        } else {
                            lit[m++] = text[k++];
                        }
                    }
                    if (k >= n || !in_list(allowed, lit, m)) {
                        ok = false;
                        break;
                    }
                    j = k + 1;
                    continue;
                }
                if (c == close && text[j + 1] == '}') break;
                j++;
            }
            i = j + 2;
        } else {
            size_t j = i;
            bool blank = true;
            while (j < n && !(text[j] == '{' && j + 1 < n && (text[j + 1] == '{' || text[j + 1] == '%' || text[j + 1] == '#'))) {
                blank = blank && is_space(text[j]);
                j++;
            }
            if (!blank) ok = false;
            i = j;
        }
    }
    free(lit);
    return ok;
}

static bool has(const char *text, const char *s) { return strstr(text, s) != NULL; }

st_chat_family st_chat_template_detect(const char *text, bool *phi3_skip_empty_system) {
    *phi3_skip_empty_system = false;
    if (!text) return ST_CHAT_FAMILY_COUNT;
    st_chat_family f = ST_CHAT_FAMILY_COUNT;
    const char *const *allowed = NULL;
    if (has(text, "<|start_header_id|>") && has(text, "<|eot_id|>")) {
        allowed = LIT_LLAMA3;
        if (!has(text, "Cutting Knowledge Date")) f = ST_CHAT_LLAMA3;
        else f = has(text, "strftime_now") ? ST_CHAT_LLAMA32 : ST_CHAT_LLAMA31;
    } else if (has(text, "<|im_start|>") && has(text, "<|im_end|>")) {
        const bool thinks = has(text, "<think>") || has(text, "</think>");
        f = thinks ? ST_CHAT_QWEN3 : ST_CHAT_CHATML;
        allowed = thinks ? LIT_QWEN3 : LIT_CHATML;
        /* the thinking rules (last query, reasoning split, enable_thinking) are qwen3's */
        if (thinks && !(has(text, "last_query_index") && has(text, "reasoning_content") && has(text, "enable_thinking")))
            return ST_CHAT_FAMILY_COUNT;
    } else if (has(text, "<start_of_turn>") && has(text, "<end_of_turn>")) {
        if (!has(text, "first_user_prefix")) return ST_CHAT_FAMILY_COUNT; /* gemma 1/2: no system turn */
        f = ST_CHAT_GEMMA3;
        allowed = LIT_GEMMA3;
    } else if (has(text, "<|end|>") && has(text, "<|assistant|>")) {
        if (has(text, "<|assistant|>\\n") || has(text, "<|assistant|>\n")) {
            f = ST_CHAT_PHI3;
            allowed = LIT_PHI3;
            *phi3_skip_empty_system = has(text, "message['role'] == 'system' and message['content']");
        } else {
            f = ST_CHAT_PHI4;
            allowed = LIT_PHI4;
        }
    } else if (has(text, "<|user|>") && has(text, "<|assistant|>") && has(text, "eos_token")) {
        f = ST_CHAT_OLMOE;
        allowed = LIT_OLMOE;
    }
    if (f == ST_CHAT_FAMILY_COUNT || !literals_allowed(text, allowed)) return ST_CHAT_FAMILY_COUNT;
    return f;
}

static void copy_token(char *dst, const char *src) {
    dst[0] = '\0';
    if (src && strlen(src) < ST_CHAT_TOKEN_MAX) strcpy(dst, src);
}

st_status st_chat_template_init(const char *text, const char *name, const char *bos, const char *eos,
                                st_chat_template *out, st_error *err) {
    memset(out, 0, sizeof(*out));
    copy_token(out->bos, bos);
    copy_token(out->eos, eos);
    if (name) {
        for (int f = 0; f < ST_CHAT_FAMILY_COUNT; f++) {
            if (strcmp(name, NAMES[f]) == 0) {
                out->family = (st_chat_family)f;
                out->phi3_skip_empty_system = f == ST_CHAT_PHI3;
                return ST_OK;
            }
        }
        return st_error_set(err, ST_ERROR_INVALID, "--chat-template: '%s' is not a template stride renders (%s)", name,
                            st_chat_family_list());
    }
    if (!text)
        return st_error_set(err, ST_ERROR_INVALID,
                            "the model carries no chat template (tokenizer.chat_template): name one with "
                            "--chat-template (%s)",
                            st_chat_family_list());
    out->family = st_chat_template_detect(text, &out->phi3_skip_empty_system);
    if (out->family == ST_CHAT_FAMILY_COUNT)
        return st_error_set(err, ST_ERROR_UNSUPPORTED,
                            "the model's chat template is not one stride recognises; if the model follows one "
                            "of these, name it with --chat-template (%s)",
                            st_chat_family_list());
    return ST_OK;
}

/* ---- Python's str.strip ----------------------------------------------------------------- */

/* Length of the whitespace character at s (Python's str.isspace set), or 0. */
static size_t space_at(const char *s, size_t n) {
    const unsigned char c = (unsigned char)s[0];
    if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return 1;
    if (n >= 2 && c == 0xc2 && ((unsigned char)s[1] == 0x85 || (unsigned char)s[1] == 0xa0)) return 2;
    if (n >= 3) {
        const uint32_t cp = ((uint32_t)(c & 0x0f) << 12) | ((uint32_t)((unsigned char)s[1] & 0x3f) << 6) |
                            ((unsigned char)s[2] & 0x3f);
        if ((c & 0xf0) == 0xe0 && (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
                                   cp == 0x202f || cp == 0x205f || cp == 0x3000))
            return 3;
    }
    return 0;
}

/* jinja2's trim (str.strip()): [*b, *e) narrowed to drop leading and trailing whitespace. */
static void py_strip(const char **b, const char **e) {
    size_t k;
    while (*b < *e && (k = space_at(*b, (size_t)(*e - *b))) > 0) *b += k;
    for (;;) { /* trailing: find the last character's start */
        const char *p = *e;
        if (p == *b) break;
        do p--;
        while (p > *b && ((unsigned char)*p & 0xc0) == 0x80);
        if (space_at(p, (size_t)(*e - p)) != (size_t)(*e - p)) break;
        *e = p;
    }
}

static void add_trimmed(st_strbuf *b, const char *s) {
    const char *a = s, *e = s + strlen(s);
    py_strip(&a, &e);
    st_strbuf_add(b, a, (size_t)(e - a));
}

/* ---- the renderers -------------------------------------------------------------------- */

static bool role_is(const st_chat_message *m, const char *r) { return strcmp(m->role, r) == 0; }

static void render_llama3(const st_chat_template *t, const st_chat_message *m, size_t n, const st_chat_options *o,
                          st_strbuf *b) {
    size_t i = 0;
    st_strbuf_adds(b, t->bos);
    if (t->family != ST_CHAT_LLAMA3) {
        char today[32] = "26 Jul 2024";
        if (o->date) {
            snprintf(today, sizeof(today), "%s", o->date);
        } else if (t->family == ST_CHAT_LLAMA32) {
            const time_t now = time(NULL);
            struct tm tm;
            if (localtime_r(&now, &tm)) strftime(today, sizeof(today), "%d %b %Y", &tm);
        }
        st_strbuf_adds(b, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n");
        st_strbuf_printf(b, "Today Date: %s\n\n", today);
        if (n > 0 && role_is(&m[0], "system")) add_trimmed(b, m[i++].content);
        st_strbuf_adds(b, "<|eot_id|>");
    }
    for (; i < n; i++) {
        st_strbuf_printf(b, "<|start_header_id|>%s<|end_header_id|>\n\n", m[i].role);
        add_trimmed(b, m[i].content);
        st_strbuf_adds(b, "<|eot_id|>");
    }
    if (o->add_generation_prompt) st_strbuf_adds(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void render_chatml(const st_chat_message *m, size_t n, const st_chat_options *o, st_strbuf *b) {
    for (size_t i = 0; i < n; i++) st_strbuf_printf(b, "<|im_start|>%s\n%s<|im_end|>\n", m[i].role, m[i].content);
    if (o->add_generation_prompt) st_strbuf_adds(b, "<|im_start|>assistant\n");
}

static bool starts_with(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }
static bool ends_with(const char *s, const char *p) {
    const size_t n = strlen(s), k = strlen(p);
    return n >= k && memcmp(s + n - k, p, k) == 0;
}

/* Qwen3: the reasoning of assistant turns after the last user query is kept in <think>
 * tags; earlier turns keep their answer only. */
static void render_qwen3(const st_chat_message *m, size_t n, const st_chat_options *o, st_strbuf *b) {
    if (n > 0 && role_is(&m[0], "system")) st_strbuf_printf(b, "<|im_start|>system\n%s<|im_end|>\n", m[0].content);
    size_t last_query = n - 1;
    for (size_t k = n; k-- > 0;) {
        if (role_is(&m[k], "user") &&
            !(starts_with(m[k].content, "<tool_response>") && ends_with(m[k].content, "</tool_response>"))) {
            last_query = k;
            break;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (role_is(&m[i], "user") || (role_is(&m[i], "system") && i > 0)) {
            st_strbuf_printf(b, "<|im_start|>%s\n%s<|im_end|>\n", m[i].role, m[i].content);
            continue;
        }
        if (!role_is(&m[i], "assistant")) continue;
        const char *c = m[i].content, *ce = c + strlen(c); /* content */
        const char *r = "", *re = r;                         /* reasoning_content */
        if (m[i].reasoning) {
            r = m[i].reasoning;
            re = r + strlen(r);
        } else {
            const char *close = strstr(c, "</think>");
            if (close) {
                const char *last = close, *p;
                while ((p = strstr(last + 8, "</think>")) != NULL) last = p;
                /* content.split('</think>')[-1].lstrip('\n') */
                const char *nc = last + 8;
                while (*nc == '\n') nc++;
                /* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
                r = c;
                re = close;
                while (re > r && re[-1] == '\n') re--;
                for (const char *q = r; q + 7 <= re; q++)
                    if (memcmp(q, "<think>", 7) == 0) r = q + 7;
                while (r < re && *r == '\n') r++;
                c = nc;
            }
        }
        if (i > last_query && (i == n - 1 || re > r)) {
            while (r < re && *r == '\n') r++; /* reasoning_content.strip('\n') */
            while (re > r && re[-1] == '\n') re--;
            while (*c == '\n') c++;           /* content.lstrip('\n') */
            st_strbuf_printf(b, "<|im_start|>%s\n<think>\n", m[i].role);
            st_strbuf_add(b, r, (size_t)(re - r));
            st_strbuf_adds(b, "\n</think>\n\n");
            st_strbuf_add(b, c, (size_t)(ce - c));
        } else {
            st_strbuf_printf(b, "<|im_start|>%s\n", m[i].role);
            st_strbuf_add(b, c, (size_t)(ce - c));
        }
        st_strbuf_adds(b, "<|im_end|>\n");
    }
    if (o->add_generation_prompt) {
        st_strbuf_adds(b, "<|im_start|>assistant\n");
        if (o->enable_thinking == 0) st_strbuf_adds(b, "<think>\n\n</think>\n\n");
    }
}

static st_status render_gemma3(const st_chat_template *t, const st_chat_message *m, size_t n,
                               const st_chat_options *o, st_strbuf *b, st_error *err) {
    st_strbuf_adds(b, t->bos);
    const char *prefix = "";
    size_t first = 0;
    if (n > 0 && role_is(&m[0], "system")) {
        prefix = m[0].content;
        first = 1;
    }
    for (size_t i = first; i < n; i++) {
        const size_t k = i - first; /* loop.index0 */
        if (role_is(&m[i], "user") != (k % 2 == 0))
            return st_error_set(err, ST_ERROR_INVALID,
                                "message %zu (%s): Gemma's template needs the roles to alternate user/assistant/"
                                "user/assistant/... (after an optional system message)",
                                i, m[i].role);
        st_strbuf_printf(b, "<start_of_turn>%s\n", role_is(&m[i], "assistant") ? "model" : m[i].role);
        if (k == 0 && first == 1) {
            st_strbuf_adds(b, prefix);
            st_strbuf_adds(b, "\n\n");
        }
        add_trimmed(b, m[i].content);
        st_strbuf_adds(b, "<end_of_turn>\n");
    }
    if (o->add_generation_prompt) st_strbuf_adds(b, "<start_of_turn>model\n");
    return ST_OK;
}

static void render_phi3(const st_chat_template *t, const st_chat_message *m, size_t n, const st_chat_options *o,
                        st_strbuf *b) {
    for (size_t i = 0; i < n; i++) {
        if (role_is(&m[i], "system") && (m[i].content[0] || !t->phi3_skip_empty_system))
            st_strbuf_printf(b, "<|system|>\n%s<|end|>\n", m[i].content);
        else if (role_is(&m[i], "user") || role_is(&m[i], "assistant"))
            st_strbuf_printf(b, "<|%s|>\n%s<|end|>\n", m[i].role, m[i].content);
    }
    st_strbuf_adds(b, o->add_generation_prompt ? "<|assistant|>\n" : t->eos);
}

static void render_phi4(const st_chat_template *t, const st_chat_message *m, size_t n, const st_chat_options *o,
                        st_strbuf *b) {
    for (size_t i = 0; i < n; i++) st_strbuf_printf(b, "<|%s|>%s<|end|>", m[i].role, m[i].content);
    st_strbuf_adds(b, o->add_generation_prompt ? "<|assistant|>" : t->eos);
}

static void render_olmoe(const st_chat_template *t, const st_chat_message *m, size_t n, const st_chat_options *o,
                         st_strbuf *b) {
    st_strbuf_adds(b, t->bos);
    for (size_t i = 0; i < n; i++) {
        const bool last = i == n - 1;
        if (role_is(&m[i], "system") || role_is(&m[i], "user")) {
            st_strbuf_printf(b, "<|%s|>\n%s\n", m[i].role, m[i].content);
        } else if (role_is(&m[i], "assistant")) {
            st_strbuf_printf(b, "<|assistant|>\n%s%s%s", m[i].content, t->eos, last ? "" : "\n");
        }
        if (last && o->add_generation_prompt) st_strbuf_adds(b, "<|assistant|>\n");
    }
}

st_status st_chat_template_apply(const st_chat_template *t, const st_chat_message *msgs, size_t n,
                                 const st_chat_options *opt, char **out, size_t *len, st_error *err) {
    *out = NULL;
    *len = 0;
    if (n == 0) return st_error_set(err, ST_ERROR_INVALID, "a conversation needs at least one message");
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content)
            return st_error_set(err, ST_ERROR_INVALID, "message %zu has no role or content", i);
        if (!role_is(&msgs[i], "system") && !role_is(&msgs[i], "user") && !role_is(&msgs[i], "assistant"))
            return st_error_set(err, ST_ERROR_INVALID, "message %zu: role '%.32s' is not system, user or assistant", i,
                                msgs[i].role);
    }
    st_strbuf b = {0};
    st_status s = ST_OK;
    switch (t->family) {
    case ST_CHAT_LLAMA3:
    case ST_CHAT_LLAMA31:
    case ST_CHAT_LLAMA32: render_llama3(t, msgs, n, opt, &b); break;
    case ST_CHAT_CHATML: render_chatml(msgs, n, opt, &b); break;
    case ST_CHAT_QWEN3: render_qwen3(msgs, n, opt, &b); break;
    case ST_CHAT_GEMMA3: s = render_gemma3(t, msgs, n, opt, &b, err); break;
    case ST_CHAT_PHI3: render_phi3(t, msgs, n, opt, &b); break;
    case ST_CHAT_PHI4: render_phi4(t, msgs, n, opt, &b); break;
    case ST_CHAT_OLMOE: render_olmoe(t, msgs, n, opt, &b); break;
    default: s = st_error_set(err, ST_ERROR_INVALID, "no chat template family %d", (int)t->family);
    }
    if (s == ST_OK && (b.failed || !st_strbuf_reserve(&b, 0)))
        s = st_error_set(err, ST_ERROR_NOMEM, "out of memory rendering a conversation");
    if (s != ST_OK) {
        st_strbuf_free(&b);
        return s;
    }
    *out = b.data;
    *len = b.len;
    return ST_OK;
}
