/*
 * stride: the cache-aware weight layout planner (shared/SPEC.md section 1).
 *
 * THE RULE. A tensor whose role is a GEMM weight (see arch.h) and whose type is a float
 * type (F32, F16, BF16) has its row stride padded when padding is enabled and its packed
 * row size in bytes is a multiple of the cache alias period:
 *     row_bytes % alias == 0  ->  nb[1] = row_bytes + pad     (defaults 2048 and 128)
 *     otherwise               ->  nb[1] = row_bytes
 *     nb[2] = nb[1] * N,  nb[3] = nb[2] * E                    (experts stay packed)
 * Never padded: row lookups (token embeddings, also when the output is tied to them),
 * norms, biases, rope factors, tensors not in the architecture's table, and quantized
 * weights (a 128-byte pad is not a multiple of their block size).
 *
 * THE POLICY. --pad-weights on|off|auto (default auto) on every command that loads a
 * model. Environment: STRIDE_PAD_WEIGHTS=on|off|auto (the flag wins over it);
 * STRIDE_NO_PAD_WEIGHTS=1 or GGML_CUDA_NO_PAD_WEIGHTS=1 is the kill switch and forces
 * off over everything; STRIDE_ROW_ALIAS (power of two) and STRIDE_ROW_PAD (multiple of
 * 16) override the geometry. Invalid values are errors, never ignored.
 *
 * AUTO. `auto` decides per weight shape (dtype, N, K) on the device at hand: a shape that
 * `stride calibrate` (calibrate.h) measured on this device is padded when the calibration
 * found padding faster; every other shape follows the built-in per-device table
 * (st_layout_auto_builtin). The planner does not measure: the caller hands it the
 * decisions as an st_layout_auto_source, and each entry records which one it used.
 */
#ifndef STRIDE_LAYOUT_H
#define STRIDE_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stride/arch.h"
#include "stride/device.h"
#include "stride/gguf.h"
#include "stride/status.h"
#include "stride/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ST_LAYOUT_DEFAULT_ALIAS 2048
#define ST_LAYOUT_DEFAULT_PAD 128

typedef enum st_pad_mode {
    ST_PAD_MODE_AUTO = 0,
    ST_PAD_MODE_ON,
    ST_PAD_MODE_OFF,
} st_pad_mode;

const char *st_pad_mode_name(st_pad_mode mode); /* "auto", "on", "off" */

/* Parses "on", "off", "auto" (exact, lower case). ST_ERROR_INVALID naming `what` (the flag
 * or variable) and the accepted values otherwise. */
st_status st_pad_mode_parse(const char *s, const char *what, st_pad_mode *out, st_error *err);

typedef const char *(*st_getenv_fn)(const char *name, void *ctx);
/* The st_getenv_fn of the process environment (getenv; ctx unused). */
const char *st_getenv_process(const char *name, void *ctx);

typedef struct st_layout_policy {
    st_pad_mode mode;           /* after flag > STRIDE_PAD_WEIGHTS > default */
    const char *mode_source;    /* "--pad-weights", "STRIDE_PAD_WEIGHTS" or "default" */
    bool kill_switch;           /* STRIDE_NO_PAD_WEIGHTS / GGML_CUDA_NO_PAD_WEIGHTS set */
    const char *kill_switch_var;/* the variable that set it, or NULL */
    size_t alias;               /* bytes; power of two */
    size_t pad;                 /* bytes; multiple of 16 */
} st_layout_policy;

/* Resolves the policy from the --pad-weights value (NULL when the flag was not given) and
 * the environment, read through getenv_fn (NULL: the process environment). Kill-switch
 * values: "1", "true", "yes", "on" set it; "0", "false", "no", "off" or empty leave it
 * unset; anything else is an error. */
st_status st_layout_policy_resolve(st_layout_policy *out, const char *flag_value,
                                   st_getenv_fn getenv_fn, void *getenv_ctx, st_error *err);

/* Built-in `auto` table: whether padding is on for a device kind, and the measurement
 * behind the entry (a short sentence for inspect/--help). */
bool st_layout_auto_builtin(st_device_kind kind, const char **why);

typedef enum st_pad_reason {
    ST_PAD_REASON_PADDED = 0,       /* GEMM weight, float, row_bytes % alias == 0 */
    ST_PAD_REASON_ROW_NOT_ALIASED,  /* GEMM weight, float, row_bytes % alias != 0 */
    ST_PAD_REASON_NOT_GEMM_WEIGHT,  /* role is row lookup / norm / bias / rope factors */
    ST_PAD_REASON_UNKNOWN_TENSOR,   /* not in the architecture's table */
    ST_PAD_REASON_QUANTIZED,        /* block-quantized type */
    ST_PAD_REASON_NOT_FLOAT,        /* integer or f64 type */
    ST_PAD_REASON_POLICY_OFF,       /* --pad-weights off / STRIDE_PAD_WEIGHTS=off */
    ST_PAD_REASON_KILL_SWITCH,      /* STRIDE_NO_PAD_WEIGHTS / GGML_CUDA_NO_PAD_WEIGHTS */
    ST_PAD_REASON_AUTO_OFF,         /* auto resolved to off on this device (or shape) */
    ST_PAD_REASON_COUNT,
} st_pad_reason;

/* Short tag: "padded", "row-not-aliased", "not-gemm-weight", ... */
const char *st_pad_reason_name(st_pad_reason reason);

/* Where an `auto` decision came from, for a tensor the rule could pad (a float GEMM weight
 * whose row is a multiple of the alias period). */
typedef enum st_pad_auto {
    ST_PAD_AUTO_NONE = 0,     /* the policy is not auto (or the kill switch is set), or the
                                 tensor is not one the rule could pad */
    ST_PAD_AUTO_BUILTIN,      /* the built-in per-device table */
    ST_PAD_AUTO_CALIBRATED,   /* a calibration of this (dtype, N, K) on this device */
} st_pad_auto;

/* A per-shape `auto` decision. gain: how much faster padded runs than packed by the
 * calibration's weighted measure, as a fraction (+0.05: 5% faster; negative: slower). */
typedef struct st_layout_shape_choice {
    bool pad;
    double gain;
} st_layout_shape_choice;

/* Per-shape decisions for `auto` (e.g. from a calibration cache, calibrate.h). lookup
 * returns false for a shape it has no decision for: that shape follows the built-in
 * table. n = ne[1] (rows), k = ne[0] (contiguous); for expert stacks the shape of one
 * expert. `what` names the source in the plan's summary ("calibrated on NVIDIA H200"). */
typedef struct st_layout_auto_source {
    bool (*lookup)(void *ctx, st_type type, int64_t n, int64_t k, st_layout_shape_choice *out);
    void *ctx;
    const char *what;
} st_layout_auto_source;

typedef struct st_layout_entry {
    const char *name;        /* into the GGUF mapping; name_len bytes */
    size_t name_len;
    st_tensor_role role;
    st_tensor tensor;        /* type, ne, chosen nb (data NULL) */
    size_t packed_row_bytes; /* nb[1] of the packed layout */
    bool padded;
    st_pad_reason reason;
    size_t extra_bytes;      /* planned size - packed size */
    st_pad_auto auto_source; /* how `auto` decided this tensor (NONE when it did not) */
    double auto_gain;        /* ST_PAD_AUTO_CALIBRATED: the measured gain of padding */
} st_layout_entry;

typedef struct st_layout_plan {
    st_arch arch;
    st_device_kind device;
    bool pad_enabled;         /* policy resolved for this device; with per-shape `auto`
                                 decisions: whether any tensor ended up padded */
    const char *pad_enabled_why;
    uint64_t n_auto_calibrated; /* entries decided by a calibration / by the built-in table */
    uint64_t n_auto_builtin;
    char *auto_summary;       /* owned; what pad_enabled_why points to when per-shape
                                 decisions were used, else NULL */
    char *auto_notice;        /* owned, set by the caller (model loading): one line on how
                                 `auto` was decided (calibrated now, fallback, ...), or NULL */
    size_t alias, pad;
    uint64_t n_entries;
    st_layout_entry *entries; /* in file order */
    uint64_t n_padded;
    size_t total_packed_bytes;
    size_t total_planned_bytes;
    size_t total_extra_bytes;
} st_layout_plan;

/* A table role only fits a tensor of the matching rank: 2-D for dense products, 3-D for
 * expert stacks. Anything else is malformed for its name: ST_ROLE_UNKNOWN (left packed). */
st_tensor_role st_layout_role_for_rank(st_tensor_role role, uint32_t n_dims);

/* Decides one tensor. `pad_enabled` is the resolved policy for the device (see
 * st_layout_plan_gguf); `disabled_reason` is the reason recorded when it is false. */
void st_layout_decide(st_tensor_role role, st_type type, const int64_t ne[ST_MAX_DIMS],
                      bool pad_enabled, st_pad_reason disabled_reason, size_t alias, size_t pad,
                      st_layout_entry *out);

/* Decides one tensor under a policy for a device, as the planners below decide each of a
 * file's: the rule with padding as the policy resolves for the device (kill switch, on,
 * off, or `auto`: per shape from source, NULL for the built-in table). For a tensor that
 * is not a file's, such as one shard of a weight (tp.h), which is planned by its own
 * shape. The caller sets name. */
void st_layout_decide_policy(const st_layout_policy *policy, st_device_kind device,
                             const st_layout_auto_source *source, st_tensor_role role, st_type type,
                             const int64_t ne[ST_MAX_DIMS], st_layout_entry *out);

/* Plans every tensor of an open GGUF file for a device. The plan's names point into f,
 * which must outlive it. ST_ERROR_UNSUPPORTED for an architecture stride has no table for
 * is NOT an error: tensors are then ST_ROLE_UNKNOWN and left packed. */
st_status st_layout_plan_gguf(const st_gguf_file *f, const st_layout_policy *policy,
                              st_device_kind device, st_layout_plan *out, st_error *err);

/* The same, planning every block-quantized tensor as if it were stored in `quantized_as`
 * (ST_TYPE_F16 or ST_TYPE_BF16: weights converted to that type at load, to which the
 * padding rule then applies). ST_TYPE_COUNT plans the types as stored. */
st_status st_layout_plan_gguf_as(const st_gguf_file *f, const st_layout_policy *policy,
                                 st_device_kind device, st_type quantized_as, st_layout_plan *out,
                                 st_error *err);

/* The same, with per-shape `auto` decisions from `source` (NULL: the built-in table for
 * every shape). The source is consulted only when the policy resolves to `auto` and no
 * kill switch is set: the kill switches, on and off win over any calibration. */
st_status st_layout_plan_gguf_auto(const st_gguf_file *f, const st_layout_policy *policy,
                                   st_device_kind device, st_type quantized_as,
                                   const st_layout_auto_source *source, st_layout_plan *out,
                                   st_error *err);

/* Whether the policy leaves the decision to `auto` (mode auto, no kill switch). */
bool st_layout_policy_is_auto(const st_layout_policy *policy);

void st_layout_plan_free(st_layout_plan *plan);

/* One sentence on why an entry is (not) padded, e.g. "row 4096 B is a multiple of the
 * 2048 B alias period" or "token embeddings are read by row lookup"; for an `auto`
 * decision it ends with "auto: calibrated (+x.x%)" or "auto: built-in table". */
void st_layout_entry_explain(const st_layout_entry *e, size_t alias, char *buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_LAYOUT_H */
