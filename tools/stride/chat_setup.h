/* The chat template of a loaded model, shared by `stride serve` and `stride chat`: the
 * model's own (tokenizer.chat_template), or the one --chat-template names. */
#ifndef STRIDE_TOOL_CHAT_SETUP_H
#define STRIDE_TOOL_CHAT_SETUP_H

#include <stdbool.h>

#include "stride/chat.h"
#include "stride/model.h"
#include "stride/tokenizer.h"

/* Fills *out. *found is false when the model carries no template and none was named
 * (then ST_OK: the caller decides whether it can do without). A template that is not
 * recognised, or a bad name, is an error saying to pass --chat-template. */
st_status cli_chat_template(const st_model *m, const st_tokenizer *tok, const char *name, st_chat_template *out,
                            bool *found, st_error *err);

#endif
