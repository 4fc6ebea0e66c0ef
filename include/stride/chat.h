/*
 * stride: chat templates. A conversation (system, user and assistant messages) becomes the
 * prompt text a model was trained on.
 *
 * Models carry their template as Jinja source (`tokenizer.chat_template` in the GGUF).
 * stride runs no Jinja: it recognises the template of each family it supports by its
 * distinctive markers and renders that family with its own C code, which the tests hold
 * to the output of the real templates rendered by Python's jinja2:
 *
 *   name      family                         recognised by
 *   llama3    Llama 3 Instruct               <|start_header_id|> <|eot_id|>
 *   llama3.1  Llama 3.1 / 3.3 (a dated system block, "Today Date: 26 Jul 2024")
 *   llama3.2  Llama 3.2 (the same block with today's date: strftime_now)
 *   chatml    ChatML (<|im_start|>role ... <|im_end|>)
 *   qwen3     Qwen3: ChatML with thinking tags (<think> ... </think>, enable_thinking)
 *   gemma3    Gemma 3 (<start_of_turn>user / model, the system text in the first turn)
 *   phi3      Phi-3 / Phi-3.5 (<|user|>\n ... <|end|>\n)
 *   phi4      Phi-4-mini (<|user|> ... <|end|>, no newlines)
 *   olmoe     OLMoE / Tulu (<|user|>\n ..., EOS after each answer)
 *
 * Recognition is strict: besides the markers, every string the template's source could
 * output (each quoted literal, each piece of text outside a tag) must be one the family's
 * known templates hold. A template that says something else (a default system prompt,
 * another layout) is not recognised, and the caller must name a template itself; never a
 * silently wrong prompt. Tools and tool calls are not rendered.
 */
#ifndef STRIDE_CHAT_H
#define STRIDE_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "stride/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum st_chat_family {
    ST_CHAT_LLAMA3 = 0,
    ST_CHAT_LLAMA31,
    ST_CHAT_LLAMA32,
    ST_CHAT_CHATML,
    ST_CHAT_QWEN3,
    ST_CHAT_GEMMA3,
    ST_CHAT_PHI3,
    ST_CHAT_PHI4,
    ST_CHAT_OLMOE,
    ST_CHAT_FAMILY_COUNT,
} st_chat_family;

#define ST_CHAT_TOKEN_MAX 64

typedef struct st_chat_template {
    st_chat_family family;
    bool phi3_skip_empty_system; /* Phi-3.5 drops a system message with empty content */
    char bos[ST_CHAT_TOKEN_MAX]; /* the text of the vocabulary's BOS and EOS tokens ("" if none) */
    char eos[ST_CHAT_TOKEN_MAX];
} st_chat_template;

/* "llama3", "qwen3", ... */
const char *st_chat_family_name(st_chat_family f);
/* The names --chat-template takes, comma-separated, for messages. */
const char *st_chat_family_list(void);

/* The template to use: `name` when given (a name above; anything else is ST_ERROR_INVALID
 * listing the names), else the one `text` (the model's tokenizer.chat_template) is
 * recognised as. ST_ERROR_UNSUPPORTED when text is not recognised, and ST_ERROR_INVALID
 * when there is neither text nor name; both messages say to pass --chat-template. bos and
 * eos are the vocabulary's token texts (NULL: none). */
st_status st_chat_template_init(const char *text, const char *name, const char *bos, const char *eos,
                                st_chat_template *out, st_error *err);

/* The family recognised in text, or ST_CHAT_FAMILY_COUNT when none; *variant_skip_empty
 * is the Phi-3.5 flag. */
st_chat_family st_chat_template_detect(const char *text, bool *phi3_skip_empty_system);

typedef struct st_chat_message {
    const char *role;      /* "system", "user" or "assistant" */
    const char *content;   /* UTF-8, NUL-terminated */
    const char *reasoning; /* qwen3: an assistant message's reasoning_content, or NULL */
} st_chat_message;

typedef struct st_chat_options {
    bool add_generation_prompt; /* end with the assistant's header, ready to generate */
    int enable_thinking;        /* qwen3: -1 undefined (the model thinks), 0 false, 1 true */
    const char *date;           /* llama3.2's "Today Date" ("26 Jul 2024" form); NULL: today */
} st_chat_options;

/* Renders messages into *out (malloc'd, NUL-terminated; *len its bytes). ST_ERROR_INVALID
 * for a conversation the template rejects (an unknown role, Gemma's roles not
 * alternating, no message), naming the message. */
st_status st_chat_template_apply(const st_chat_template *t, const st_chat_message *msgs, size_t n,
                                 const st_chat_options *opt, char **out, size_t *len, st_error *err);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_CHAT_H */
