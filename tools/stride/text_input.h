/* Text inputs of the commands: whole files (prompts, corpora) and lists of token ids. */
#ifndef STRIDE_TOOL_TEXT_INPUT_H
#define STRIDE_TOOL_TEXT_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include "stride/status.h"

/* Reads a whole regular file (st_file_open_read: a FIFO or device is refused, never waited
 * on) into a malloc'd, NUL-terminated buffer (*len excludes the NUL). `what` names it in
 * messages ("prompt file"). ST_ERROR_IO naming the path and the reason. */
st_status cli_read_file(const char *path, const char *what, char **data, size_t *len, st_error *err);

/* Token ids separated by commas and/or whitespace ("1,2 3\n4"). *ids is malloc'd.
 * ST_ERROR_INVALID naming the first bad entry; an empty list is an error too. */
st_status cli_parse_token_ids(const char *text, int32_t **ids, int64_t *n, st_error *err);

#endif
