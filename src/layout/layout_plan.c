/*
 * The layout planner: the padding rule for one tensor (st_layout_decide) and for every
 * tensor of a GGUF file (st_layout_plan_gguf), and the sentence that explains each
 * decision.
 */
#include "stride/layout.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *st_pad_reason_name(st_pad_reason reason) {
    switch (reason) {
    case ST_PAD_REASON_PADDED: return "padded";
    case ST_PAD_REASON_ROW_NOT_ALIASED: return "row-not-aliased";
    case ST_PAD_REASON_NOT_GEMM_WEIGHT: return "not-gemm-weight";
    case ST_PAD_REASON_UNKNOWN_TENSOR: return "unknown-tensor";
    case ST_PAD_REASON_QUANTIZED: return "quantized";
    case ST_PAD_REASON_NOT_FLOAT: return "not-float";
    case ST_PAD_REASON_POLICY_OFF: return "policy-off";
    case ST_PAD_REASON_KILL_SWITCH: return "kill-switch";
    case ST_PAD_REASON_AUTO_OFF: return "auto-off";
    case ST_PAD_REASON_COUNT: break;
    }
    return "unknown";
}

static size_t mul_checked(size_t a, int64_t n) {
    ST_ASSERT(n >= 0);
    ST_ASSERT(n == 0 || a <= SIZE_MAX / (uint64_t)n);
    return a * (size_t)n;
}

/* Why a tensor is not a candidate at all (role or type), or ST_PAD_REASON_COUNT when it
 * is a float GEMM weight that the rule applies to. */
static st_pad_reason exclusion(st_tensor_role role, const st_type_traits *tr) {
    if (role == ST_ROLE_UNKNOWN || (unsigned)role >= ST_ROLE_COUNT) return ST_PAD_REASON_UNKNOWN_TENSOR;
    if (!st_tensor_role_is_gemm_weight(role)) return ST_PAD_REASON_NOT_GEMM_WEIGHT;
    if (tr->is_quantized) return ST_PAD_REASON_QUANTIZED;
    if (!tr->is_float) return ST_PAD_REASON_NOT_FLOAT;
    return ST_PAD_REASON_COUNT;
}

void st_layout_decide(st_tensor_role role, st_type type, const int64_t ne[ST_MAX_DIMS],
                      bool pad_enabled, st_pad_reason disabled_reason, size_t alias, size_t pad,
                      st_layout_entry *out) {
    ST_ASSERT(out != NULL && ne != NULL);
    ST_ASSERT(alias > 0 && (alias & (alias - 1)) == 0);
    ST_ASSERT(pad_enabled || disabled_reason == ST_PAD_REASON_POLICY_OFF ||
              disabled_reason == ST_PAD_REASON_KILL_SWITCH ||
              disabled_reason == ST_PAD_REASON_AUTO_OFF);
    const st_type_traits *tr = st_type_get_traits((uint32_t)type);
    ST_ASSERT(tr != NULL); /* the GGUF reader rejects unknown types */
    size_t row_bytes = 0;
    bool row_ok = st_type_row_bytes(type, ne[0], &row_bytes);
    ST_ASSERT(row_ok); /* ne[0] is a whole number of blocks in a validated file */

    memset(out, 0, sizeof(*out));
    out->role = role;
    out->tensor.type = type;
    for (int i = 0; i < ST_MAX_DIMS; i++) out->tensor.ne[i] = ne[i];
    out->packed_row_bytes = row_bytes;

    st_pad_reason reason = exclusion(role, tr);
    if (reason == ST_PAD_REASON_COUNT) {
        if (!pad_enabled) reason = disabled_reason;
        /* a zero-length row has nothing to alias */
        else if (row_bytes > 0 && row_bytes % alias == 0) reason = ST_PAD_REASON_PADDED;
        else reason = ST_PAD_REASON_ROW_NOT_ALIASED;
    }
    out->reason = reason;
    out->padded = reason == ST_PAD_REASON_PADDED;

    size_t *nb = out->tensor.nb;
    nb[0] = tr->block_bytes;
    nb[1] = out->padded ? row_bytes + pad : row_bytes;
    ST_ASSERT(nb[1] >= row_bytes);
    nb[2] = mul_checked(nb[1], ne[1]); /* experts stay packed one after another */
    nb[3] = mul_checked(nb[2], ne[2]);
    size_t planned = mul_checked(nb[3], ne[3]);
    size_t packed = mul_checked(mul_checked(mul_checked(row_bytes, ne[1]), ne[2]), ne[3]);
    out->extra_bytes = planned - packed;
}

/* Whether padding is on for the device, the reason recorded when it is not, and why. */
static bool resolve_enabled(const st_layout_policy *policy, st_device_kind device,
                            st_pad_reason *disabled_reason, const char **why) {
    if (policy->kill_switch) {
        *disabled_reason = ST_PAD_REASON_KILL_SWITCH;
        *why = policy->kill_switch_var &&
                       strcmp(policy->kill_switch_var, "GGML_CUDA_NO_PAD_WEIGHTS") == 0
                   ? "off: GGML_CUDA_NO_PAD_WEIGHTS is set (kill switch, overrides everything)"
                   : "off: STRIDE_NO_PAD_WEIGHTS is set (kill switch, overrides everything)";
        return false;
    }
    bool from_env = policy->mode_source && strcmp(policy->mode_source, "STRIDE_PAD_WEIGHTS") == 0;
    switch (policy->mode) {
    case ST_PAD_MODE_OFF:
        *disabled_reason = ST_PAD_REASON_POLICY_OFF;
        *why = from_env ? "off: STRIDE_PAD_WEIGHTS=off" : "off: --pad-weights off";
        return false;
    case ST_PAD_MODE_ON:
        *disabled_reason = ST_PAD_REASON_POLICY_OFF; /* unused */
        *why = from_env ? "on: STRIDE_PAD_WEIGHTS=on" : "on: --pad-weights on";
        return true;
    case ST_PAD_MODE_AUTO: break;
    }
    *disabled_reason = ST_PAD_REASON_AUTO_OFF;
    return st_layout_auto_builtin(device, why);
}

st_tensor_role st_layout_role_for_rank(st_tensor_role role, uint32_t n_dims) {
    if ((role == ST_ROLE_GEMM || role == ST_ROLE_ROUTER) && n_dims != 2) return ST_ROLE_UNKNOWN;
    if (role == ST_ROLE_GEMM_EXPERTS && n_dims != 3) return ST_ROLE_UNKNOWN;
    return role;
}

st_status st_layout_plan_gguf(const st_gguf_file *f, const st_layout_policy *policy,
                              st_device_kind device, st_layout_plan *out, st_error *err) {
    return st_layout_plan_gguf_auto(f, policy, device, ST_TYPE_COUNT, NULL, out, err);
}

st_status st_layout_plan_gguf_as(const st_gguf_file *f, const st_layout_policy *policy,
                                 st_device_kind device, st_type quantized_as, st_layout_plan *out,
                                 st_error *err) {
    return st_layout_plan_gguf_auto(f, policy, device, quantized_as, NULL, out, err);
}

bool st_layout_policy_is_auto(const st_layout_policy *policy) {
    return policy->mode == ST_PAD_MODE_AUTO && !policy->kill_switch;
}

/* `auto` for one tensor that the rule could pad (e was decided with padding enabled and
 * came out PADDED): the calibrated decision for its shape when the source has one, the
 * built-in entry otherwise. Re-decides e as packed when the answer is no. */
static void decide_auto(st_layout_entry *e, const st_layout_auto_source *source, bool builtin_on,
                        const st_layout_policy *policy) {
    st_layout_shape_choice choice = {.pad = builtin_on, .gain = 0.0};
    e->auto_source = ST_PAD_AUTO_BUILTIN;
    if (source && source->lookup &&
        source->lookup(source->ctx, e->tensor.type, e->tensor.ne[1], e->tensor.ne[0], &choice))
        e->auto_source = ST_PAD_AUTO_CALIBRATED;
    e->auto_gain = e->auto_source == ST_PAD_AUTO_CALIBRATED ? choice.gain : 0.0;
    if (choice.pad) return;
    st_pad_auto src = e->auto_source;
    double gain = e->auto_gain;
    int64_t ne[ST_MAX_DIMS]; /* decide clears *e first: its inputs must not live there */
    memcpy(ne, e->tensor.ne, sizeof(ne));
    st_layout_decide(e->role, e->tensor.type, ne, false, ST_PAD_REASON_AUTO_OFF, policy->alias, policy->pad, e);
    e->auto_source = src;
    e->auto_gain = gain;
}

/* The plan's one-sentence summary when calibrated decisions were used. */
static st_status summarise_auto(st_layout_plan *plan, const st_layout_auto_source *source, bool builtin_on,
                                st_error *err) {
    uint64_t cal_padded = 0, builtin_padded = 0;
    for (uint64_t i = 0; i < plan->n_entries; i++) {
        const st_layout_entry *e = &plan->entries[i];
        if (e->auto_source == ST_PAD_AUTO_CALIBRATED) cal_padded += e->padded;
        if (e->auto_source == ST_PAD_AUTO_BUILTIN) builtin_padded += e->padded;
    }
    char buf[512];
    int n = snprintf(buf, sizeof(buf),
                     "auto per shape: %llu tensor(s) decided by calibration%s%s (%llu padded)",
                     (unsigned long long)plan->n_auto_calibrated, source->what ? " " : "",
                     source->what ? source->what : "", (unsigned long long)cal_padded);
    if (plan->n_auto_builtin > 0 && n > 0 && (size_t)n < sizeof(buf))
        snprintf(buf + n, sizeof(buf) - (size_t)n,
                 ", %llu by the built-in table (%s: %llu padded)", (unsigned long long)plan->n_auto_builtin,
                 builtin_on ? "on" : "off", (unsigned long long)builtin_padded);
    plan->auto_summary = malloc(strlen(buf) + 1);
    if (!plan->auto_summary) return st_error_set(err, ST_ERROR_NOMEM, "layout plan: out of memory");
    memcpy(plan->auto_summary, buf, strlen(buf) + 1);
    plan->pad_enabled = plan->n_padded > 0;
    plan->pad_enabled_why = plan->auto_summary;
    return ST_OK;
}

void st_layout_decide_policy(const st_layout_policy *policy, st_device_kind device,
                             const st_layout_auto_source *source, st_tensor_role role, st_type type,
                             const int64_t ne[ST_MAX_DIMS], st_layout_entry *out) {
    st_pad_reason disabled_reason;
    const char *why = NULL;
    const bool enabled = resolve_enabled(policy, device, &disabled_reason, &why);
    if (!st_layout_policy_is_auto(policy)) {
        st_layout_decide(role, type, ne, enabled, disabled_reason, policy->alias, policy->pad, out);
        return;
    }
    /* Per shape: first whether the rule could pad it at all, then auto's answer. A tensor
     * the rule cannot pad keeps the reason it had under the built-in entry (without
     * calibrations), or its own reason (row-not-aliased, ...) with them. */
    st_layout_decide(role, type, ne, true, ST_PAD_REASON_AUTO_OFF, policy->alias, policy->pad, out);
    if (out->reason == ST_PAD_REASON_PADDED) decide_auto(out, source, enabled, policy);
    else if (!source) st_layout_decide(role, type, ne, enabled, disabled_reason, policy->alias, policy->pad, out);
}

st_status st_layout_plan_gguf_auto(const st_gguf_file *f, const st_layout_policy *policy,
                                   st_device_kind device, st_type quantized_as,
                                   const st_layout_auto_source *source, st_layout_plan *out,
                                   st_error *err) {
    ST_ASSERT(f != NULL && policy != NULL && out != NULL);
    ST_ASSERT(quantized_as == ST_TYPE_COUNT || quantized_as == ST_TYPE_F16 || quantized_as == ST_TYPE_BF16);
    memset(out, 0, sizeof(*out));

    const st_gguf_value *v = st_gguf_find(f, "general.architecture");
    st_arch arch = ST_ARCH_UNKNOWN;
    if (v) {
        if (v->type != ST_GGUF_TYPE_STRING)
            return st_error_set(err, ST_ERROR_FORMAT,
                                "general.architecture has type %s (expected string)",
                                st_gguf_type_name(v->type));
        arch = st_arch_from_name(v->v.str.data, (size_t)v->v.str.len);
    }

    st_pad_reason disabled_reason;
    const char *why = NULL;
    bool enabled = resolve_enabled(policy, device, &disabled_reason, &why);
    const bool is_auto = st_layout_policy_is_auto(policy);

    uint64_t n = st_gguf_n_tensors(f);
    st_layout_entry *entries = NULL;
    if (n > 0) {
        if (n > SIZE_MAX / sizeof(*entries))
            return st_error_set(err, ST_ERROR_NOMEM, "layout plan: %llu tensors do not fit in memory",
                                (unsigned long long)n);
        entries = calloc((size_t)n, sizeof(*entries));
        if (!entries)
            return st_error_set(err, ST_ERROR_NOMEM, "layout plan: cannot allocate %llu entries",
                                (unsigned long long)n);
    }

    *out = (st_layout_plan){
        .arch = arch,
        .device = device,
        .pad_enabled = enabled,
        .pad_enabled_why = why,
        .alias = policy->alias,
        .pad = policy->pad,
        .n_entries = n,
        .entries = entries,
    };
    for (uint64_t i = 0; i < n; i++) {
        const st_gguf_tensor_info *ti = st_gguf_get_tensor(f, i);
        int64_t ne[ST_MAX_DIMS] = {1, 1, 1, 1};
        for (uint32_t d = 0; d < ti->n_dims && d < ST_MAX_DIMS; d++) ne[d] = ti->ne[d];
        st_tensor_role role = st_arch_tensor_role(arch, ti->name.data, (size_t)ti->name.len);
        role = st_layout_role_for_rank(role, ti->n_dims);

        st_type type = ti->type;
        if (quantized_as != ST_TYPE_COUNT && st_type_get_traits((uint32_t)type)->is_quantized) type = quantized_as;

        st_layout_entry *e = &entries[i];
        st_layout_decide_policy(policy, device, source, role, type, ne, e);
        if (e->auto_source == ST_PAD_AUTO_CALIBRATED) out->n_auto_calibrated++;
        if (e->auto_source == ST_PAD_AUTO_BUILTIN) out->n_auto_builtin++;
        e->name = ti->name.data;
        e->name_len = (size_t)ti->name.len;

        size_t planned = st_tensor_nbytes(&e->tensor);
        out->n_padded += e->padded ? 1 : 0;
        out->total_planned_bytes += planned;
        out->total_packed_bytes += planned - e->extra_bytes;
        out->total_extra_bytes += e->extra_bytes;
    }
    if (is_auto && out->n_auto_calibrated > 0) {
        st_status s = summarise_auto(out, source, enabled, err);
        if (s != ST_OK) {
            st_layout_plan_free(out);
            return s;
        }
    }
    return ST_OK;
}

void st_layout_plan_free(st_layout_plan *plan) {
    if (!plan) return;
    if (plan->auto_summary && plan->pad_enabled_why == plan->auto_summary) plan->pad_enabled_why = NULL;
    free(plan->entries);
    free(plan->auto_summary);
    free(plan->auto_notice);
    plan->entries = NULL;
    plan->auto_summary = NULL;
    plan->auto_notice = NULL;
    plan->n_entries = 0;
}

static const char *gemm_kind(st_tensor_role role) {
    switch (role) {
    case ST_ROLE_GEMM_EXPERTS: return "MoE expert GEMM weight";
    case ST_ROLE_ROUTER: return "MoE router (GEMM weight)";
    default: return "GEMM weight";
    }
}

static const char *not_gemm_sentence(st_tensor_role role) {
    switch (role) {
    case ST_ROLE_ROW_LOOKUP:
        return "token embeddings are read by row lookup (get_rows), never padded "
               "(also when the output layer is tied to them)";
    case ST_ROLE_NORM: return "norm weights are read elementwise, never padded";
    case ST_ROLE_BIAS: return "biases are added elementwise, never padded";
    case ST_ROLE_ROPE_FACTORS: return "rope factors scale rotary frequencies elementwise, never padded";
    default: return "not the weight of a matrix product, never padded";
    }
}

static void explain_rule(const st_layout_entry *e, size_t alias, char *buf, size_t size) {
    size_t row = e->packed_row_bytes, stride = e->tensor.nb[1];
    const char *type = st_type_name((uint32_t)e->tensor.type);
    const st_type_traits *tr = st_type_get_traits((uint32_t)e->tensor.type);
    bool aliased = alias > 0 && row > 0 && row % alias == 0;
    const char *off_by = NULL;

    switch (e->reason) {
    case ST_PAD_REASON_PADDED:
        snprintf(buf, size, "%s: row %zu B is a multiple of the %zu B alias period, stride %zu -> %zu B",
                 gemm_kind(e->role), row, alias, row, stride);
        return;
    case ST_PAD_REASON_ROW_NOT_ALIASED:
        snprintf(buf, size,
                 "%s: row %zu B is not a multiple of the %zu B alias period (remainder %zu B), "
                 "stride stays %zu B",
                 gemm_kind(e->role), row, alias, alias ? row % alias : 0, stride);
        return;
    case ST_PAD_REASON_NOT_GEMM_WEIGHT:
        snprintf(buf, size, "%s", not_gemm_sentence(e->role));
        return;
    case ST_PAD_REASON_UNKNOWN_TENSOR:
        snprintf(buf, size,
                 "not in the architecture's tensor table (or its rank does not fit its role): "
                 "its consuming op is unknown, so it stays packed at %zu B rows",
                 stride);
        return;
    case ST_PAD_REASON_QUANTIZED:
        snprintf(buf, size,
                 "%s is block-quantized (%zu B blocks of %lld values): a cache-line pad would "
                 "misalign the block-indexed kernels, never padded",
                 type, tr ? tr->block_bytes : 0, tr ? (long long)tr->block_size : 0LL);
        return;
    case ST_PAD_REASON_NOT_FLOAT:
        snprintf(buf, size, "%s is not a float type (the rule covers f32, f16 and bf16), never padded", type);
        return;
    case ST_PAD_REASON_POLICY_OFF: off_by = "padding is off by policy (--pad-weights / STRIDE_PAD_WEIGHTS)"; break;
    case ST_PAD_REASON_KILL_SWITCH:
        off_by = "the kill switch (STRIDE_NO_PAD_WEIGHTS / GGML_CUDA_NO_PAD_WEIGHTS) forces padding off";
        break;
    case ST_PAD_REASON_AUTO_OFF:
        off_by = e->auto_source == ST_PAD_AUTO_CALIBRATED ? "`auto` resolved to off for this shape on this device"
                                                          : "`auto` resolved to off for this device";
        break;
    case ST_PAD_REASON_COUNT: break;
    }
    if (!off_by) {
        snprintf(buf, size, "unknown reason %d", (int)e->reason);
        return;
    }
    snprintf(buf, size, "%s: row %zu B is %sa multiple of the %zu B alias period; %s, stride stays %zu B",
             gemm_kind(e->role), row, aliased ? "" : "not ", alias, off_by, stride);
}

void st_layout_entry_explain(const st_layout_entry *e, size_t alias, char *buf, size_t size) {
    ST_ASSERT(e != NULL && buf != NULL && size > 0);
    explain_rule(e, alias, buf, size);
    size_t used = strlen(buf);
    if (used + 1 >= size) return;
    switch (e->auto_source) {
    case ST_PAD_AUTO_CALIBRATED:
        snprintf(buf + used, size - used, "; auto: calibrated (%+.1f%%)%s", 100.0 * e->auto_gain,
                 e->padded ? "" : ", packed kept");
        break;
    case ST_PAD_AUTO_BUILTIN: snprintf(buf + used, size - used, "; auto: built-in table"); break;
    case ST_PAD_AUTO_NONE: break;
    }
}
