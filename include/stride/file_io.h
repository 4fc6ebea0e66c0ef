/*
 * stride: opening files safely.
 *
 * READING. Every file stride reads (models, prompt and token files, the calibration
 * cache) is opened with st_file_open_read: O_NONBLOCK, so that a FIFO or a device opens
 * without blocking, then fstat, and anything that is not a regular file is refused with a
 * message saying what it is. The descriptor is switched back to blocking reads.
 *
 * WRITING. Every file stride writes (GGUF models, .npy logits, the calibration cache) goes
 * through st_atomic_file: the bytes go to a temporary file beside the target (same
 * directory, so the same file system), and only a complete, flushed and fsync'ed file is
 * renamed over the target. A failed or cancelled write removes the temporary file and
 * leaves the target as it was: an existing file is never truncated or half-written.
 *   - The target must be absent or a regular file; a directory, FIFO, device node or
 *     socket is refused before anything is created.
 *   - A symbolic link is followed to the file it names, which must be a regular file;
 *     that file is replaced (temporary file beside it, renamed over it), and the link
 *     keeps pointing at the new file. A dangling link is refused.
 *   - A replaced file keeps its permission bits; a new one gets 0666 minus the umask.
 * The library installs no signal handlers: a program that wants Ctrl-C to leave nothing
 * behind removes st_atomic_file_temp_path() in its handler (unlink is async-signal-safe)
 * or stops the writer through the cancel flag its API offers (synth.h).
 */
#ifndef STRIDE_FILE_IO_H
#define STRIDE_FILE_IO_H

#include <stdint.h>
#include <stdio.h>

#include "stride/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opens path read-only (close-on-exec). `what` names the file in messages ("model",
 * "prompt file", ...). *size: its size in bytes (may be NULL). ST_ERROR_IO naming the
 * path, what it is ("a directory", "a FIFO", ...) or the system's reason. */
st_status st_file_open_read(const char *path, const char *what, int *fd, uint64_t *size, st_error *err);

/* The same as a stdio stream ("rb"). */
st_status st_file_fopen_read(const char *path, const char *what, FILE **out, uint64_t *size, st_error *err);

/* What a file mode is, for messages: "a regular file", "a directory", "a FIFO",
 * "a character device", "a block device", "a socket", "a symbolic link", "a special file". */
const char *st_file_kind_name(unsigned int st_mode);

typedef struct st_atomic_file st_atomic_file;

/* Whether st_atomic_file_open would accept path as a target (absent, a regular file or a
 * link to one, in a directory that takes a new file), checked before long work whose
 * result goes there; creates nothing. */
st_status st_atomic_file_check(const char *path, st_error *err);

/* Checks the target (see WRITING above) and creates the temporary file beside it.
 * ST_ERROR_IO naming the path and the reason. */
st_status st_atomic_file_open(const char *path, st_atomic_file **out, st_error *err);

/* The stream to write to (buffered; the caller may setvbuf it before the first write). */
FILE *st_atomic_file_stream(st_atomic_file *a);

/* The target path (as given) and the temporary file's path (valid until commit/abort). */
const char *st_atomic_file_path(const st_atomic_file *a);
const char *st_atomic_file_temp_path(const st_atomic_file *a);

/* Flushes, fsyncs and closes the temporary file and renames it over the target. The
 * object is freed whatever the result; on failure the temporary file is removed and the
 * target is untouched (ST_ERROR_IO with the system's reason). */
st_status st_atomic_file_commit(st_atomic_file *a, st_error *err);

/* Closes and removes the temporary file, frees the object; the target is untouched. */
void st_atomic_file_abort(st_atomic_file *a);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_FILE_IO_H */
