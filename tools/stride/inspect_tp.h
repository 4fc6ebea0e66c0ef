/* stride inspect --layout -tp N: each shard's part of the model and the layout of its
 * split weights (tp.h), as text and as JSON. */
#ifndef STRIDE_TOOL_INSPECT_TP_H
#define STRIDE_TOOL_INSPECT_TP_H

#include <stddef.h>
#include <stdint.h>

#include "stride/layout.h"
#include "stride/tp.h"

/* "4096 x 1024": the first n_dims of ne. */
void inspect_format_shape(const int64_t *ne, uint32_t n_dims, char *buf, size_t size);

/* The tensor parallel section of the text layout: the scheme, what each shard owns, every
 * shard tensor (slice, shape, packed and chosen row stride, padded or not and why) and each
 * shard's bytes. */
void inspect_tp_print_text(const st_tp_plan *p, const st_tp_layout *l, const st_layout_plan *whole);

/* The same as the value of a JSON key (an object; no trailing newline). */
void inspect_tp_print_json(const st_tp_plan *p, const st_tp_layout *l, const st_layout_plan *whole);

#endif
