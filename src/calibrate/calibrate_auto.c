/*
 * `auto` and the calibration: the shapes a model (or a synth preset) would pad, the
 * decisions handed to the planner, and what model loading and inspect do when the cache
 * has no answer.
 */
#include "stride/calibrate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stride/clock.h"

#include "synth/synth_internal.h"

/* Model loading measures for at most about this long (plus allocating and filling the
 * pools); SPEC.md asks for a whole model in less than 5 s on a new device. */
#define LOAD_BUDGET_S 3.0

/* ---- shapes ------------------------------------------------------------------------- */

st_status st_calibrate_shapes_add(st_calib_shape_list *l, st_calib_shape s, st_error *err) {
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].type == s.type && l->v[i].n == s.n && l->v[i].k == s.k) return ST_OK;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        st_calib_shape *v = realloc(l->v, cap * sizeof(*v));
        if (!v) return st_error_set(err, ST_ERROR_NOMEM, "calibration: out of memory");
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = s;
    return ST_OK;
}

void st_calibrate_shapes_free(st_calib_shape_list *l) {
    if (!l) return;
    free(l->v);
    memset(l, 0, sizeof(*l));
}

/* The policy under which every shape the rule could pad is padded. */
static st_layout_policy policy_on(size_t alias, size_t pad) {
    return (st_layout_policy){.mode = ST_PAD_MODE_ON, .mode_source = "--pad-weights", .alias = alias, .pad = pad};
}

st_status st_calibrate_shapes_of_gguf(const st_gguf_file *f, size_t alias, size_t pad, st_type quantized_as,
                                      st_calib_shape_list *l, st_error *err) {
    st_layout_policy p = policy_on(alias, pad);
    st_layout_plan plan;
    st_status s = st_layout_plan_gguf_as(f, &p, ST_DEVICE_KIND_CPU, quantized_as, &plan, err);
    if (s != ST_OK) return s;
    for (uint64_t i = 0; i < plan.n_entries && s == ST_OK; i++) {
        const st_layout_entry *e = &plan.entries[i];
        if (e->reason == ST_PAD_REASON_PADDED)
            s = st_calibrate_shapes_add(l, (st_calib_shape){e->tensor.type, e->tensor.ne[1], e->tensor.ne[0]}, err);
    }
    st_layout_plan_free(&plan);
    return s;
}

st_status st_calibrate_shapes_of_preset(const st_synth_preset *p, st_type weight_type, size_t alias, size_t pad,
                                        st_calib_shape_list *l, st_error *err) {
    st_synth_tensor *t = NULL;
    uint64_t n = 0;
    st_status s = st_synth_build_tensors(p, weight_type, &t, &n, err);
    if (s != ST_OK) return s;
    for (uint64_t i = 0; i < n && s == ST_OK; i++) {
        const st_tensor_role role =
            st_layout_role_for_rank(st_arch_tensor_role(p->arch, t[i].name, strlen(t[i].name)), t[i].n_dims);
        int64_t ne[ST_MAX_DIMS] = {1, 1, 1, 1};
        for (uint32_t d = 0; d < t[i].n_dims && d < 3; d++) ne[d] = t[i].ne[d];
        st_layout_entry e;
        st_layout_decide(role, t[i].type, ne, true, ST_PAD_REASON_AUTO_OFF, alias, pad, &e);
        if (e.reason == ST_PAD_REASON_PADDED) s = st_calibrate_shapes_add(l, (st_calib_shape){t[i].type, ne[1], ne[0]}, err);
    }
    free(t);
    return s;
}

/* ---- decisions for the planner ------------------------------------------------------ */

static bool table_lookup(void *ctx, st_type type, int64_t n, int64_t k, st_layout_shape_choice *out) {
    const st_calib_result *r = st_calibrate_table_find(ctx, type, n, k);
    if (!r) return false;
    out->pad = r->verdict.pad;
    out->gain = r->verdict.gain;
    return true;
}

st_layout_auto_source st_calibrate_auto_source(const st_calib_table *t, const char *what) {
    return (st_layout_auto_source){.lookup = table_lookup, .ctx = (void *)t, .what = what};
}

st_status st_calibrate_env_allowed(st_getenv_fn getenv_fn, void *getenv_ctx, bool *allowed, st_error *err) {
    if (!getenv_fn) getenv_fn = st_getenv_process;
    const char *v = getenv_fn("STRIDE_CALIBRATE", getenv_ctx);
    static const char *const yes[] = {"1", "on", "yes", "true", ""};
    static const char *const no[] = {"0", "off", "no", "false"};
    *allowed = true;
    if (!v) return ST_OK;
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        if (strcmp(v, yes[i]) == 0) return ST_OK;
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        if (strcmp(v, no[i]) == 0) {
            *allowed = false;
            return ST_OK;
        }
    return st_error_set(err, ST_ERROR_INVALID,
                        "STRIDE_CALIBRATE: invalid value \"%s\" (accepted: 0, off, no, false to keep model loading "
                        "from measuring; 1, on, yes, true or empty to allow it)",
                        v);
}

/* Loads the device's cache into *table (a fresh one with the key when there is none or
 * it cannot be trusted). *problem gets a phrase for a cache that was there but not used. */
static void load_cache(const st_calib_key *key, st_calib_table *table, char *path, size_t path_size, bool *have_path,
                       char *problem, size_t problem_size) {
    st_error err = {0};
    problem[0] = '\0';
    st_calibrate_table_init(table, key);
    *have_path = st_calibrate_cache_path(key, NULL, NULL, path, path_size, &err) == ST_OK;
    if (!*have_path) {
        snprintf(problem, problem_size, "%s", err.message);
        return;
    }
    st_calib_cache_state state;
    st_calib_table loaded;
    if (st_calibrate_cache_load(path, key, &loaded, &state, &err) == ST_OK) {
        st_calibrate_table_free(table);
        *table = loaded;
        return;
    }
    /* the reason first: a long path must not push it out of a bounded notice */
    if (state != ST_CALIB_CACHE_MISSING) snprintf(problem, problem_size, "%s; file %s", err.message, path);
}

st_status st_calibrate_for_load(st_backend *b, const st_gguf_file *f, const st_layout_policy *policy,
                                st_type quantized_as, st_calib_table *table, char *notice, size_t notice_size) {
    ST_ASSERT(b != NULL && f != NULL && policy != NULL && table != NULL && notice != NULL && notice_size > 0);
    notice[0] = '\0';
    st_calib_key key;
    st_calibrate_key_init(&key, &b->device, policy->alias, policy->pad);
    st_calibrate_table_init(table, &key);
    st_error err = {0};
    bool allowed = true;
    if (st_calibrate_env_allowed(NULL, NULL, &allowed, &err) != ST_OK) {
        snprintf(notice, notice_size, "%s", err.message);
        return ST_ERROR_INVALID;
    }

    st_calib_shape_list shapes = {0};
    if (st_calibrate_shapes_of_gguf(f, policy->alias, policy->pad, quantized_as, &shapes, &err) != ST_OK ||
        shapes.n == 0) {
        st_calibrate_shapes_free(&shapes); /* nothing the rule could pad: nothing to decide */
        return ST_OK;
    }
    char path[1100], problem[1700];
    bool have_path;
    load_cache(&key, table, path, sizeof(path), &have_path, problem, sizeof(problem));

    st_calib_shape_list todo = {0};
    for (size_t i = 0; i < shapes.n; i++)
        if (!st_calibrate_table_find(table, shapes.v[i].type, shapes.v[i].n, shapes.v[i].k) &&
            st_calibrate_shapes_add(&todo, shapes.v[i], &err) != ST_OK)
            break;
    st_calibrate_shapes_free(&shapes);
    const char *builtin_why = NULL;
    bool builtin_on = st_layout_auto_builtin(b->device.kind, &builtin_why);
    char redone[1800] = "";
    if (problem[0]) snprintf(redone, sizeof(redone), " (cache %s)", problem);

    if (todo.n == 0) {
        st_calibrate_shapes_free(&todo);
        return ST_OK;
    }
    if (!allowed) {
        snprintf(notice, notice_size,
                 "auto: %zu weight shape(s) not calibrated on %s and STRIDE_CALIBRATE=0: the built-in table (%s) "
                 "decides them%s",
                 todo.n, b->device.name, builtin_on ? "on" : "off", redone);
        st_calibrate_shapes_free(&todo);
        return ST_OK;
    }
    st_calib_result *res = calloc(todo.n, sizeof(*res));
    st_calib_options opt = {.budget_s = LOAD_BUDGET_S};
    const double t0 = st_clock_seconds();
    st_status s = res ? st_calibrate_shapes(b, policy->alias, policy->pad, todo.v, todo.n, &opt, res, &err)
                      : st_error_set(&err, ST_ERROR_NOMEM, "out of memory");
    const double secs = st_clock_seconds() - t0;
    if (s != ST_OK) {
        snprintf(notice, notice_size, "auto: calibration failed (%s): the built-in table (%s) decides %zu shape(s)",
                 err.message, builtin_on ? "on" : "off", todo.n);
        free(res);
        st_calibrate_shapes_free(&todo);
        return ST_OK;
    }
    size_t n_pad = 0;
    for (size_t i = 0; i < todo.n; i++) {
        n_pad += res[i].verdict.pad;
        if (st_calibrate_table_put(table, &res[i], &err) != ST_OK) break;
    }
    char saved[1800];
    if (!have_path) snprintf(saved, sizeof(saved), "not saved: %s", problem);
    else if (st_calibrate_cache_save(path, table, &err) != ST_OK) snprintf(saved, sizeof(saved), "not saved: %s", err.message);
    else snprintf(saved, sizeof(saved), "saved to %s", path);
    snprintf(notice, notice_size, "auto: calibrated %zu weight shape(s) on %s in %.1f s, %zu padded%s; %s", todo.n,
             b->device.name, secs, n_pad, have_path ? redone : "", saved);
    free(res);
    st_calibrate_shapes_free(&todo);
    return ST_OK;
}

void st_calibrate_for_inspect(const st_device_info *dev, const st_layout_policy *policy, st_calib_table *table,
                              char *notice, size_t notice_size) {
    ST_ASSERT(dev != NULL && policy != NULL && table != NULL && notice != NULL && notice_size > 0);
    notice[0] = '\0';
    st_calib_key key;
    st_calibrate_key_init(&key, dev, policy->alias, policy->pad);
    char path[1100], problem[1700];
    bool have_path;
    load_cache(&key, table, path, sizeof(path), &have_path, problem, sizeof(problem));
    if (table->n > 0) return;
    if (problem[0])
        snprintf(notice, notice_size, "auto: calibration cache not used (%s); inspect does not measure: built-in table",
                 problem);
    else
        snprintf(notice, notice_size,
                 "auto: no calibration for %s yet (%s); inspect does not measure: built-in table (`stride calibrate` "
                 "or loading the model measures)",
                 dev->name, path);
}
