/* OpenAI's response shapes (server_internal.h): the error object and the JSON helpers the
 * endpoints build their bodies and chunks with. */
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

char *srv_json_take(json_t *v) {
    if (!v) return NULL;
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(v);
    return s;
}

/* OpenAI's type and code for a status. */
static void error_kind(int status, const char **type, const char **code) {
    *code = NULL;
    switch (status) {
    case 400: *type = "invalid_request_error"; break;
    case 401: *type = "invalid_request_error"; *code = "invalid_api_key"; break;
    case 404: *type = "invalid_request_error"; break;
    case 405: *type = "invalid_request_error"; *code = "method_not_allowed"; break;
    case 413: *type = "invalid_request_error"; *code = "request_too_large"; break;
    case 429: *type = "rate_limit_error"; *code = "rate_limit_exceeded"; break;
    case 503: *type = "server_error"; *code = "service_unavailable"; break;
    default: *type = status >= 500 ? "server_error" : "invalid_request_error";
    }
}

char *srv_error_body(int status, const char *message) { return srv_error_body_code(status, message, NULL); }

char *srv_error_body_code(int status, const char *message, const char *code_override) {
    const char *type, *code;
    error_kind(status, &type, &code);
    if (code_override) code = code_override;
    st_strbuf m = {0};
    srv_utf8_sanitize(&m, message, strlen(message));
    json_t *e = json_pack("{s:{s:s?,s:s,s:n,s:s?}}", "error", "message", m.data ? m.data : "", "type", type, "param",
                          "code", code);
    st_strbuf_free(&m);
    return srv_json_take(e);
}
