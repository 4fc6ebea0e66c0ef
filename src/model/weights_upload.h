/* Uploading a weight, or a part of one, from a file's packed rows into its planned layout
 * (model_load.c for whole tensors that need converting, and every shard of a split one). */
#ifndef STRIDE_MODEL_WEIGHTS_UPLOAD_H
#define STRIDE_MODEL_WEIGHTS_UPLOAD_H

#include "stride/backend.h"
#include "stride/tp.h"

/* Fills t (planned: its type, shape and strides; in backend memory) with the slice sl of a
 * file tensor of type `from` and shape whole (packed rows at data, experts one after
 * another): in every expert, the rows of sl's row ranges in order, the columns of sl.cols.
 * t's type is `from`, or F16/BF16 for a quantized `from` (each source row dequantized, then
 * rounded). Columns of a quantized type kept as stored must be whole blocks (the shard
 * planner checks). Rows are gathered on the host in chunks of a few MiB, each uploaded as
 * a view of t's rows (one strided 2D copy, pads zeroed), so that no whole tensor is held in
 * host memory. */
st_status st_weights_upload_slice(st_backend *b, st_tensor *t, st_type from, const int64_t whole[ST_MAX_DIMS],
                                  const void *data, const st_tp_slice *sl, st_error *err);

/* The slice that is the whole of a tensor of shape ne. */
st_tp_slice st_weights_whole_slice(const int64_t ne[ST_MAX_DIMS]);

#endif
