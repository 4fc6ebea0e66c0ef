/* Renders chat templates for tests/python/test_chat_templates.py: reads a JSON array of
 * cases on stdin, each {"template": TEXT|null, "name": NAME|null, "bos", "eos",
 * "add_generation_prompt", "enable_thinking": -1|0|1, "date": TEXT|null,
 * "messages": [{"role", "content", "reasoning_content"?}]}, and writes a JSON array of
 * {"family": NAME} plus {"prompt": TEXT} or {"error": TEXT} on stdout. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "stride/chat.h"

static const char *str_or_null(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

int main(void) {
    json_error_t jerr;
    json_t *cases = json_loadf(stdin, 0, &jerr);
    if (!json_is_array(cases)) {
        fprintf(stderr, "chat_template_render: stdin is not a JSON array: %s\n", jerr.text);
        return 2;
    }
    json_t *results = json_array();
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i), *r = json_object();
        st_chat_template t;
        st_error err = {0};
        st_status st = st_chat_template_init(str_or_null(c, "template"), str_or_null(c, "name"), str_or_null(c, "bos"),
                                             str_or_null(c, "eos"), &t, &err);
        if (st == ST_OK) {
            json_object_set_new(r, "family", json_string(st_chat_family_name(t.family)));
            json_t *msgs = json_object_get(c, "messages");
            const size_t n = json_array_size(msgs);
            st_chat_message *m = calloc(n ? n : 1, sizeof(*m));
            for (size_t k = 0; k < n; k++) {
                json_t *mk = json_array_get(msgs, k);
                m[k] = (st_chat_message){.role = str_or_null(mk, "role"), .content = str_or_null(mk, "content"),
                                         .reasoning = str_or_null(mk, "reasoning_content")};
            }
            st_chat_options o = {.add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt")),
                                 .enable_thinking = (int)json_integer_value(json_object_get(c, "enable_thinking")),
                                 .date = str_or_null(c, "date")};
            char *text = NULL;
            size_t len = 0;
            st = st_chat_template_apply(&t, m, n, &o, &text, &len, &err);
            if (st == ST_OK) json_object_set_new(r, "prompt", json_stringn(text, len));
            free(text);
            free(m);
        }
        if (st != ST_OK) json_object_set_new(r, "error", json_string(err.message));
        json_array_append_new(results, r);
    }
    json_dumpf(results, stdout, JSON_COMPACT);
    json_decref(results);
    json_decref(cases);
    return 0;
}
