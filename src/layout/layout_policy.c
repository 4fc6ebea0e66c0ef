/*
 * The padding policy: --pad-weights, the environment, and the built-in `auto` table.
 *
 * Precedence: the kill switch (STRIDE_NO_PAD_WEIGHTS or GGML_CUDA_NO_PAD_WEIGHTS) forces
 * padding off over everything; otherwise --pad-weights beats STRIDE_PAD_WEIGHTS, which
 * beats the default `auto`. Every variable that is set is validated, also when a higher
 * source overrides it: a typo never passes silently.
 */
#include "stride/layout.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Geometry bounds: a cache line is at least 16 B and no cache aliases beyond 1 MiB. */
#define ALIAS_MIN 16u
#define ALIAS_MAX (1u << 20)

const char *st_pad_mode_name(st_pad_mode mode) {
    switch (mode) {
    case ST_PAD_MODE_AUTO: return "auto";
    case ST_PAD_MODE_ON: return "on";
    case ST_PAD_MODE_OFF: return "off";
    }
    return "unknown";
}

st_status st_pad_mode_parse(const char *s, const char *what, st_pad_mode *out, st_error *err) {
    static const st_pad_mode modes[] = {ST_PAD_MODE_ON, ST_PAD_MODE_OFF, ST_PAD_MODE_AUTO};
    for (size_t i = 0; s && i < sizeof(modes) / sizeof(modes[0]); i++) {
        if (strcmp(s, st_pad_mode_name(modes[i])) == 0) {
            *out = modes[i];
            return ST_OK;
        }
    }
    return st_error_set(err, ST_ERROR_INVALID, "%s: invalid value \"%s\" (accepted: on, off, auto)",
                        what ? what : "pad mode", s ? s : "(null)");
}

static const char *const device_kind_names[ST_DEVICE_KIND_COUNT] = {
    [ST_DEVICE_KIND_CPU] = "cpu",
    [ST_DEVICE_KIND_NVIDIA_HOPPER] = "nvidia-hopper",
    [ST_DEVICE_KIND_NVIDIA_OTHER] = "nvidia-other",
    [ST_DEVICE_KIND_AMD_RDNA35] = "amd-rdna3.5",
    [ST_DEVICE_KIND_AMD_OTHER] = "amd-other",
};

const char *st_device_kind_name(st_device_kind kind) {
    if ((unsigned)kind >= ST_DEVICE_KIND_COUNT) return "unknown";
    return device_kind_names[kind];
}

bool st_device_kind_from_name(const char *s, st_device_kind *out) {
    for (int k = 0; s && k < ST_DEVICE_KIND_COUNT; k++) {
        if (strcmp(s, device_kind_names[k]) == 0) {
            *out = (st_device_kind)k;
            return true;
        }
    }
    return false;
}

/* The built-in `auto` table. Each entry cites the measurement it rests on; where there is
 * none, the entry is off: padding only changes the layout, so leaving it off is the
 * byte-for-byte behaviour of every other runtime. */
typedef struct auto_entry {
    bool on;
    const char *why;
} auto_entry;

static const auto_entry auto_table[ST_DEVICE_KIND_COUNT] = {
    [ST_DEVICE_KIND_CPU] = {false,
        "cpu: off without a calibration: on a 2-core Xeon VM padded rows made stride's decode "
        "+8% faster and its prefill 5% slower (bench/cpu-pad-auto.md; a SIMD GEMV alone was "
        "neutral, bench/cpu-pad-gemv.md), so `stride calibrate` decides per shape and this "
        "fallback keeps the packed layout"},
    [ST_DEVICE_KIND_NVIDIA_HOPPER] = {false,
        "nvidia-hopper: off, measured on an H200 (SPEC.md section 1): GEMV within "
        "-2%..+1% and cuBLAS GEMM mostly within +-2% with shape-specific swings of -6%..+11%"},
    [ST_DEVICE_KIND_NVIDIA_OTHER] = {false,
        "nvidia-other: off, not measured; the nearest measured NVIDIA part (H200) is "
        "neutral, so the packed layout is kept until `stride calibrate` says otherwise"},
    [ST_DEVICE_KIND_AMD_RDNA35] = {true,
        "amd-rdna3.5: on, the seed's rule (alias 2048 B, pad 128 B) as measured on a Radeon "
        "8060S, gfx1151 (seed/pad-gemm-weight-rows.txt): prefill +20%..+169% on F16/BF16 "
        "models whose rows are multiples of 2048 B, decode +5%..+11%"},
    [ST_DEVICE_KIND_AMD_OTHER] = {false,
        "amd-other: off, not measured; the seed's gain is specific to RDNA3.5's cache "
        "geometry, so the packed layout is kept until `stride calibrate` says otherwise"},
};

bool st_layout_auto_builtin(st_device_kind kind, const char **why) {
    if ((unsigned)kind >= ST_DEVICE_KIND_COUNT) {
        if (why) *why = "unknown device kind: off";
        return false;
    }
    if (why) *why = auto_table[kind].why;
    return auto_table[kind].on;
}

/* Kill-switch values: set, unset (also empty), or an error. */
static st_status parse_kill_switch(const char *name, const char *v, bool *set, st_error *err) {
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off", ""};
    *set = false;
    if (!v) return ST_OK;
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        if (strcmp(v, yes[i]) == 0) {
            *set = true;
            return ST_OK;
        }
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        if (strcmp(v, no[i]) == 0) return ST_OK;
    return st_error_set(err, ST_ERROR_INVALID,
                        "%s: invalid value \"%s\" (accepted: 1, true, yes, on to disable padding; "
                        "0, false, no, off or empty to leave it enabled)",
                        name, v);
}

/* Strict unsigned decimal: digits only, no sign, no spaces, no leading zeros, no
 * suffixes, no overflow. */
static bool parse_size(const char *s, size_t *out) {
    if (!s || !*s) return false;
    if (s[0] == '0' && s[1] != '\0') return false;
    size_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return false;
        unsigned d = (unsigned)(*p - '0');
        if (v > (SIZE_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

static st_status parse_alias(const char *v, size_t *alias, st_error *err) {
    size_t a;
    if (!parse_size(v, &a) || a < ALIAS_MIN || a > ALIAS_MAX || (a & (a - 1)) != 0)
        return st_error_set(err, ST_ERROR_INVALID,
                            "STRIDE_ROW_ALIAS: invalid value \"%s\" (accepted: a power of two "
                            "in bytes from %u to %u, written in decimal, e.g. 2048)",
                            v, ALIAS_MIN, ALIAS_MAX);
    *alias = a;
    return ST_OK;
}

static st_status parse_pad(const char *v, size_t alias, const char *alias_source, size_t *pad,
                           st_error *err) {
    size_t p;
    if (!parse_size(v, &p) || p == 0 || p % 16 != 0 || p >= alias)
        return st_error_set(err, ST_ERROR_INVALID,
                            "STRIDE_ROW_PAD: invalid value \"%s\" (accepted: a positive multiple "
                            "of 16 bytes below the alias period %zu of %s, written in decimal, "
                            "e.g. 128)",
                            v, alias, alias_source);
    *pad = p;
    return ST_OK;
}

const char *st_getenv_process(const char *name, void *ctx) {
    (void)ctx;
    return getenv(name);
}

st_status st_layout_policy_resolve(st_layout_policy *out, const char *flag_value,
                                   st_getenv_fn getenv_fn, void *getenv_ctx, st_error *err) {
    ST_ASSERT(out != NULL);
    if (!getenv_fn) getenv_fn = st_getenv_process;
    st_layout_policy p = {
        .mode = ST_PAD_MODE_AUTO,
        .mode_source = "default",
        .kill_switch = false,
        .kill_switch_var = NULL,
        .alias = ST_LAYOUT_DEFAULT_ALIAS,
        .pad = ST_LAYOUT_DEFAULT_PAD,
    };
    st_status s;

    const char *env_mode = getenv_fn("STRIDE_PAD_WEIGHTS", getenv_ctx);
    st_pad_mode m = ST_PAD_MODE_AUTO;
    if (env_mode) {
        if ((s = st_pad_mode_parse(env_mode, "STRIDE_PAD_WEIGHTS", &m, err)) != ST_OK) return s;
        p.mode = m;
        p.mode_source = "STRIDE_PAD_WEIGHTS";
    }
    if (flag_value) {
        if ((s = st_pad_mode_parse(flag_value, "--pad-weights", &m, err)) != ST_OK) return s;
        p.mode = m;
        p.mode_source = "--pad-weights";
    }

    static const char *const kill_vars[] = {"STRIDE_NO_PAD_WEIGHTS", "GGML_CUDA_NO_PAD_WEIGHTS"};
    for (size_t i = 0; i < sizeof(kill_vars) / sizeof(kill_vars[0]); i++) {
        bool set;
        s = parse_kill_switch(kill_vars[i], getenv_fn(kill_vars[i], getenv_ctx), &set, err);
        if (s != ST_OK) return s;
        if (set && !p.kill_switch) {
            p.kill_switch = true;
            p.kill_switch_var = kill_vars[i];
        }
    }

    const char *env_alias = getenv_fn("STRIDE_ROW_ALIAS", getenv_ctx);
    if (env_alias && (s = parse_alias(env_alias, &p.alias, err)) != ST_OK) return s;
    const char *env_pad = getenv_fn("STRIDE_ROW_PAD", getenv_ctx);
    if (env_pad) {
        const char *src = env_alias ? "STRIDE_ROW_ALIAS" : "the default";
        if ((s = parse_pad(env_pad, p.alias, src, &p.pad, err)) != ST_OK) return s;
    } else if (p.pad >= p.alias) {
        return st_error_set(err, ST_ERROR_INVALID,
                            "STRIDE_ROW_ALIAS: invalid value \"%s\" with the default pad of %zu B "
                            "(accepted: an alias above the pad, i.e. at least %u, or set "
                            "STRIDE_ROW_PAD to a multiple of 16 below the alias)",
                            env_alias, p.pad, 2u * ST_LAYOUT_DEFAULT_PAD);
    }
    *out = p;
    return ST_OK;
}
