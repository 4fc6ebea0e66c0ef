/*
 * stride: per-device calibration of the padded weight layout (shared/SPEC.md section 1,
 * `auto`), its decision rule, and its per-device cache.
 *
 * WHAT IS TIMED. For each distinct weight shape (dtype, N, K) whose packed row is a
 * multiple of the alias period (only those can be padded), the backend's own mul_mat
 *     y [N, M] = W [K, N] . x [K, M]     (W packed: nb[1] = row; padded: nb[1] = row + pad)
 * at M = 1 (decode) and at a prefill batch M (512 on a GPU, 32 on the CPU: see
 * st_calibrate_default_prefill_m), with the backend timer (CUDA events on the GPU).
 * Weights stream from memory, not from the last-level cache: each layout has a pool of
 * copies of W larger than 1.25 x the LLC, and consecutive products walk through the pool
 * cyclically, so a copy is touched again only after more than the whole LLC has been
 * read. Samples alternate packed/padded (A B, then B A), and each pair gives one ratio
 * padded/packed; the median of the ratios is the estimate and its standard error the
 * noise (1.2533 x 1.4826 x MAD / sqrt(reps): the standard error of a median under
 * normal noise, with the spread estimated robustly). Which of the two buffers holds which
 * layout swaps every two pairs, so that the buffers' placement cannot pass for a layout
 * effect. MoE expert stacks are timed as one expert's matrix (mul_mat); the decision
 * applies to the whole stack, whose experts share the row stride.
 *
 * THE RULE (st_calibrate_decide). r_d, r_p: the median paired ratios padded/packed at
 * decode and prefill; n_d, n_p their noise.
 *     r = (r_d + r_p) / 2          decode and prefill weighed equally, each relative to
 *                                  its own packed time (so the weight does not depend on M
 *                                  or on how long a prompt is): the benchmark that judges
 *                                  `auto` (SPEC.md section 5) reports prompt and generation
 *                                  speed as separate cells of equal standing, and serving
 *                                  workloads range from prefill-bound (long prompts) to
 *                                  decode-bound (chat), so neither phase may be sacrificed.
 *     gain = 1/r - 1               speed-up of padded over packed (+: padded faster)
 *     noise = sqrt(n_d^2 + n_p^2) / 2 / r^2
 *     pad  <=>  gain > max(2 x noise, 1%)           significant (2 standard errors) and
 *                                                   worth a layout nobody else uses
 *          and  r_d <= 1.02 and r_p <= 1.02         neither phase loses more than 2%
 *                                                   (SPEC.md: `auto` within 2% of the
 *                                                   better of on and off in every cell)
 * Otherwise the shape stays packed, the layout every other runtime uses.
 *
 * THE CACHE. One text file per (backend, device, geometry) under $XDG_CACHE_HOME/stride/
 * (default ~/.cache/stride/), see st_calibrate_cache_path. The first line is a header
 *     stride-calibration 1 <body bytes> <FNV-1a 64 of the body, 16 hex digits>
 * and the body holds the key (backend, device name, driver and runtime versions, stride
 * version and commit, alias, pad) and one line per shape. A file whose header, length,
 * checksum or syntax is wrong (corrupted, truncated, not ours) or whose key differs from
 * the device at hand (stale: other device, driver, stride version or geometry) is
 * reported in one line and redone, never trusted. Writing is atomic (temporary file in
 * the same directory, then rename).
 *
 * STRIDE_CALIBRATE=0 (also "off", "no", "false") keeps model loading from measuring: a
 * shape the cache lacks then follows the built-in per-device table. Any other value
 * than those and 1/on/yes/true is an error.
 */
#ifndef STRIDE_CALIBRATE_H
#define STRIDE_CALIBRATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stride/backend.h"
#include "stride/gguf.h"
#include "stride/layout.h"
#include "stride/status.h"
#include "stride/synth.h"
#include "stride/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The rule's constants (see above). */
#define ST_CALIBRATE_MIN_GAIN 0.01   /* a gain below 1% is not worth padding */
#define ST_CALIBRATE_MAX_LOSS 0.02   /* neither phase may lose more than 2% */
#define ST_CALIBRATE_SIGMAS 2.0      /* gain must exceed 2 standard errors */
#define ST_CALIBRATE_FORMAT_VERSION 1

/* A weight shape: W has ne = {k, n} (k contiguous). */
typedef struct st_calib_shape {
    st_type type;
    int64_t n, k;
} st_calib_shape;

/* The verdict of the rule. */
typedef struct st_calib_verdict {
    bool pad;
    double gain;   /* weighted speed-up of padded over packed (fraction) */
    double noise;  /* its standard error (fraction) */
    const char *why; /* a short phrase: "faster beyond noise", "within noise", ... */
} st_calib_verdict;

/* The decision rule, a pure function of the measured ratios (padded/packed time) and
 * their standard errors. */
void st_calibrate_decide(double dec_ratio, double dec_noise, double pre_ratio, double pre_noise,
                         st_calib_verdict *out);

/* Median and noise (standard error of the median, robust) of n paired ratios (noise may
 * be NULL: the median only). Sorts a copy; n >= 1. */
void st_calibrate_ratio_stats(const double *ratios, int n, double *median, double *noise);

/* One calibrated shape. Times are microseconds per product (medians). */
typedef struct st_calib_result {
    st_calib_shape shape;
    int64_t prefill_m;
    int reps;
    double dec_packed_us, dec_padded_us, dec_ratio, dec_noise;
    double pre_packed_us, pre_padded_us, pre_ratio, pre_noise;
    st_calib_verdict verdict;
} st_calib_result;

/* ---- the key and the cache ---- */

typedef struct st_calib_key {
    char backend[16];          /* "cpu", "cuda" */
    char device[256];          /* st_device_info.name */
    int driver_version;        /* 0 on the CPU */
    int runtime_version;
    char stride_version[64];   /* "0.1.0" or "0.1.0+<commit>" */
    size_t alias, pad;         /* the geometry the padded layout used */
} st_calib_key;

/* The key for a device and a geometry, with this build's stride version. */
void st_calibrate_key_init(st_calib_key *key, const st_device_info *dev, size_t alias, size_t pad);

/* This build's version string in keys: STRIDE_VERSION, plus "+<commit>" when the build
 * knows the commit (CMake passes it at configure time). */
const char *st_calibrate_stride_version(void);

typedef struct st_calib_table {
    st_calib_key key;
    st_calib_result *rows;
    size_t n, cap;
} st_calib_table;

void st_calibrate_table_init(st_calib_table *t, const st_calib_key *key);
/* Adds r, replacing a row of the same shape. */
st_status st_calibrate_table_put(st_calib_table *t, const st_calib_result *r, st_error *err);
const st_calib_result *st_calibrate_table_find(const st_calib_table *t, st_type type, int64_t n, int64_t k);
void st_calibrate_table_free(st_calib_table *t);

/* The cache file for key: <dir>/calibration-<backend>-<device slug>-a<alias>-p<pad>.txt
 * with <dir> = $XDG_CACHE_HOME/stride or $HOME/.cache/stride (read through getenv_fn;
 * NULL: the process environment). ST_ERROR_INVALID when neither variable is set (or
 * XDG_CACHE_HOME is not absolute, which the XDG spec says to ignore: then $HOME). */
st_status st_calibrate_cache_path(const st_calib_key *key, st_getenv_fn getenv_fn, void *getenv_ctx, char *buf,
                                  size_t size, st_error *err);

/* The file's text (header + body); *out is malloc'd, *len its length. */
st_status st_calibrate_cache_format(const st_calib_table *t, char **out, size_t *len, st_error *err);

typedef enum st_calib_cache_state {
    ST_CALIB_CACHE_OK = 0,
    ST_CALIB_CACHE_MISSING,  /* no file */
    ST_CALIB_CACHE_CORRUPT,  /* not a calibration file, truncated, bad checksum or syntax */
    ST_CALIB_CACHE_STALE,    /* well-formed, for another key (device, driver, version, geometry) */
} st_calib_cache_state;

/* Parses a file's text against the expected key. *state says what was found; out is
 * filled only for ST_CALIB_CACHE_OK (and then must be freed). The message in err names
 * the problem (one line) for every other state. Returns ST_OK for OK, ST_ERROR_FORMAT
 * for CORRUPT and STALE. */
st_status st_calibrate_cache_parse(const char *text, size_t len, const st_calib_key *expect, st_calib_table *out,
                                   st_calib_cache_state *state, st_error *err);

/* Reads and parses a cache file (ST_ERROR_IO and ST_CALIB_CACHE_MISSING when absent). */
st_status st_calibrate_cache_load(const char *path, const st_calib_key *expect, st_calib_table *out,
                                  st_calib_cache_state *state, st_error *err);

/* Writes the table atomically (the directory is created when missing). */
st_status st_calibrate_cache_save(const char *path, const st_calib_table *t, st_error *err);

/* ---- measuring ---- */

typedef struct st_calib_options {
    int64_t prefill_m;  /* 0: st_calibrate_default_prefill_m(backend) */
    int reps;           /* pairs per batch; 0: 15. With budget_s > 0, the most */
    double budget_s;    /* > 0: bound the whole run (all shapes) to about this many seconds
                           by lowering the repetitions, down to ST_CALIBRATE_MIN_REPS */
    size_t llc_bytes;   /* 0: the device's (st_device_info.l2_bytes), 64 MiB when unknown */
    /* progress: called after each shape with (shapes done, shapes total); may be NULL */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
} st_calib_options;

#define ST_CALIBRATE_MIN_REPS 5
#define ST_CALIBRATE_DEFAULT_REPS 15

/* 512 on a GPU, 32 on the CPU (see calibrate_run.c for why). */
int64_t st_calibrate_default_prefill_m(st_backend_kind backend);

/* The weight pools a run over these shapes allocates (two, alternated so that weights
 * stream from memory): 1.25 x the last-level cache (opt->llc_bytes, else the
 * device's, else 64 MiB, *llc_source saying which: "--llc", "device", "assumed"), at
 * least the largest padded copy of a shape, at most 4 GiB. *llc gets the cache size. */
size_t st_calibrate_pool_bytes(const st_backend *b, size_t pad, const st_calib_shape *shapes, size_t n,
                               const st_calib_options *opt, size_t *llc, const char **llc_source);

/* Measures each shape on b (packed vs padded with the geometry alias/pad) and fills
 * results[i] (caller-allocated, n entries). Shapes whose row is not a multiple of alias
 * are an error (ST_ERROR_INVALID): they cannot be padded. */
st_status st_calibrate_shapes(st_backend *b, size_t alias, size_t pad, const st_calib_shape *shapes, size_t n,
                              const st_calib_options *opt, st_calib_result *results, st_error *err);

/* ---- the shapes of a model ---- */

typedef struct st_calib_shape_list {
    st_calib_shape *v;
    size_t n, cap;
} st_calib_shape_list;

/* Adds s unless already present. */
st_status st_calibrate_shapes_add(st_calib_shape_list *l, st_calib_shape s, st_error *err);
void st_calibrate_shapes_free(st_calib_shape_list *l);

/* The distinct shapes of f's tensors that the rule could pad with this alias (planned with
 * quantized tensors as quantized_as, ST_TYPE_COUNT: as stored), appended to l. */
st_status st_calibrate_shapes_of_gguf(const st_gguf_file *f, size_t alias, size_t pad, st_type quantized_as,
                                      st_calib_shape_list *l, st_error *err);

/* The same for a synth preset written with weight_type, without writing it. */
st_status st_calibrate_shapes_of_preset(const st_synth_preset *p, st_type weight_type, size_t alias, size_t pad,
                                        st_calib_shape_list *l, st_error *err);

/* ---- `auto` at model load ---- */

/* Whether STRIDE_CALIBRATE allows measuring at load (read through getenv_fn; NULL: the
 * process environment). ST_ERROR_INVALID for a value that is not a switch. */
st_status st_calibrate_env_allowed(st_getenv_fn getenv_fn, void *getenv_ctx, bool *allowed, st_error *err);

/* Decisions for `auto` from a calibration table (the source's ctx is the table). */
st_layout_auto_source st_calibrate_auto_source(const st_calib_table *t, const char *what);

/* For loading f on b with `auto`: loads the device's cache; measures the shapes of f it
 * lacks (bounded to a few seconds) unless STRIDE_CALIBRATE=0 and saves the cache again.
 * Fails only for an invalid STRIDE_CALIBRATE (ST_ERROR_INVALID, the message in notice):
 * whatever else goes wrong (no cache directory, a device error while measuring) leaves
 * those shapes to the built-in table. *table gets the decisions (free it, also on
 * failure); notice gets one line for the user (empty when there is nothing to say:
 * every shape was in a valid cache, or none can be padded). */
st_status st_calibrate_for_load(st_backend *b, const st_gguf_file *f, const st_layout_policy *policy,
                           st_type quantized_as, st_calib_table *table, char *notice, size_t notice_size);

/* For planning without a backend (inspect): the device's cache if it is valid (in
 * *table), and a notice line when it is missing, stale or corrupt. */
void st_calibrate_for_inspect(const st_device_info *dev, const st_layout_policy *policy, st_calib_table *table,
                              char *notice, size_t notice_size);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_CALIBRATE_H */
