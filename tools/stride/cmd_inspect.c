/* stride inspect FILE [--layout] [--json]: a GGUF file's metadata and tensors, and with
 * --layout the weight-layout planner's decision for every tensor. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "inspect_tp.h"
#include "stride/calibrate.h"
#include "stride/device.h"
#include "stride/gguf.h"
#include "stride/layout.h"
#include "stride/model.h"
#include "stride/tp.h"

static const char *CMD = "inspect";

static void usage(FILE *out) {
    fprintf(out,
            "usage: stride inspect FILE [options]\n\n"
            "Shows a GGUF file's metadata and tensors.\n\n"
            "options:\n"
            "  --layout                 the planned weight layout of every tensor: role, packed and\n"
            "                           chosen row stride, padded or not and why, extra bytes\n"
            "  --json                   machine-readable output\n"
            "  --pad-weights on|off|auto  padding policy (default: auto, or $STRIDE_PAD_WEIGHTS)\n"
            "  --backend cpu|cuda       device whose `auto` decisions are shown: per weight shape from\n"
            "                           its calibration cache (`stride calibrate`), else the built-in\n"
            "                           table (default: cuda when a GPU is present, else cpu)\n"
            "  --device-kind KIND       plan as if for KIND with the built-in `auto` table: cpu,\n"
            "                           nvidia-hopper, nvidia-other, amd-rdna3.5, amd-other\n"
            "  --weights f16|bf16       plan quantized weights as converted to this type at load\n"
            "                           (as `stride run --weights` does)\n"
            "  -tp, --tensor-parallel N  with --layout: the model split into N shards (as `stride run\n"
            "                           -tp N` splits it): what each shard owns, and every split\n"
            "                           weight's shards, each laid out by the rule from its own shape\n"
            "  --max-array N            array elements shown per metadata value (default 8)\n\n"
            "environment: STRIDE_PAD_WEIGHTS, STRIDE_NO_PAD_WEIGHTS=1 (kill switch; also\n"
            "GGML_CUDA_NO_PAD_WEIGHTS=1), STRIDE_ROW_ALIAS (default 2048), STRIDE_ROW_PAD (default 128)\n");
}

/* ---- metadata values ---------------------------------------------------------------- */

static void print_scalar(FILE *out, const st_gguf_value *v, bool json) {
    switch (v->type) {
    case ST_GGUF_TYPE_UINT8:
    case ST_GGUF_TYPE_UINT16:
    case ST_GGUF_TYPE_UINT32:
    case ST_GGUF_TYPE_UINT64: fprintf(out, "%" PRIu64, v->v.u64); break;
    case ST_GGUF_TYPE_INT8:
    case ST_GGUF_TYPE_INT16:
    case ST_GGUF_TYPE_INT32:
    case ST_GGUF_TYPE_INT64: fprintf(out, "%" PRId64, v->v.i64); break;
    case ST_GGUF_TYPE_FLOAT32:
    case ST_GGUF_TYPE_FLOAT64: fprintf(out, json ? "%.17g" : "%g", v->v.f64); break;
    case ST_GGUF_TYPE_BOOL: fputs(v->v.b ? "true" : "false", out); break;
    case ST_GGUF_TYPE_STRING:
        if (json) {
            cli_json_string(out, v->v.str.data, (size_t)v->v.str.len);
        } else {
            size_t n = v->v.str.len > 120 ? 120 : (size_t)v->v.str.len;
            cli_json_string(out, v->v.str.data, n);
            if (v->v.str.len > 120) fprintf(out, "... (%" PRIu64 " bytes)", v->v.str.len);
        }
        break;
    default: fputs("null", out);
    }
}

static void print_array(FILE *out, const st_gguf_array *a, uint64_t max_items, bool json);

static void print_value(FILE *out, const st_gguf_value *v, uint64_t max_items, bool json) {
    if (v->type == ST_GGUF_TYPE_ARRAY) print_array(out, &v->v.arr, max_items, json);
    else print_scalar(out, v, json);
}

static void print_array(FILE *out, const st_gguf_array *a, uint64_t max_items, bool json) {
    uint64_t shown = a->n < max_items ? a->n : max_items;
    fputc('[', out);
    for (uint64_t i = 0; i < shown; i++) {
        if (i) fputs(", ", out);
        if (a->elem_type == ST_GGUF_TYPE_STRING) {
            cli_json_string(out, a->strings[i].data, (size_t)a->strings[i].len);
        } else if (a->elem_type == ST_GGUF_TYPE_ARRAY) {
            print_value(out, &a->arrays[i], max_items, json);
        } else if (a->elem_type == ST_GGUF_TYPE_BOOL) {
            fputs(st_gguf_array_get_i64(a, i) ? "true" : "false", out);
        } else if (a->elem_type == ST_GGUF_TYPE_FLOAT32 || a->elem_type == ST_GGUF_TYPE_FLOAT64) {
            fprintf(out, json ? "%.17g" : "%g", st_gguf_array_get_f64(a, i));
        } else if (a->elem_type == ST_GGUF_TYPE_UINT64) {
            uint64_t u;
            memcpy(&u, (const uint8_t *)a->raw + i * 8, 8);
            fprintf(out, "%" PRIu64, u);
        } else {
            fprintf(out, "%" PRId64, st_gguf_array_get_i64(a, i));
        }
    }
    if (shown < a->n && !json) fprintf(out, ", ... (%" PRIu64 " total)", a->n);
    fputc(']', out);
}

static const char *value_type_name(const st_gguf_value *v, char *buf, size_t size) {
    if (v->type != ST_GGUF_TYPE_ARRAY) return st_gguf_type_name(v->type);
    snprintf(buf, size, "%s[%" PRIu64 "]", st_gguf_type_name(v->v.arr.elem_type), v->v.arr.n);
    return buf;
}

/* ---- text output -------------------------------------------------------------------- */

static void print_text_summary(const st_gguf_file *f, const char *path, uint64_t max_items) {
    char size[32];
    cli_format_bytes(st_gguf_file_size(f), size, sizeof(size));
    printf("file:      %s (%s)\n", path, size);
    printf("gguf:      v%u, alignment %zu, data at offset %" PRIu64 "\n", st_gguf_version(f),
           st_gguf_alignment(f), st_gguf_data_offset(f));
    printf("metadata:  %" PRIu64 " keys\n", st_gguf_n_kv(f));
    for (uint64_t i = 0; i < st_gguf_n_kv(f); i++) {
        const st_gguf_kv *kv = st_gguf_get_kv(f, i);
        char tbuf[48], key[160];
        cli_escape(kv->key.data, (size_t)kv->key.len, key, sizeof(key)); /* bytes from the file: escaped */
        printf("  %-44s %-14s = ", key, value_type_name(&kv->value, tbuf, sizeof(tbuf)));
        print_value(stdout, &kv->value, max_items, false);
        putchar('\n');
    }
}

static void print_text_tensors(const st_gguf_file *f) {
    printf("tensors:   %" PRIu64 "\n", st_gguf_n_tensors(f));
    printf("  %-36s %-6s %-22s %14s %12s\n", "name", "type", "shape (ne)", "offset", "bytes");
    for (uint64_t i = 0; i < st_gguf_n_tensors(f); i++) {
        const st_gguf_tensor_info *t = st_gguf_get_tensor(f, i);
        char shape[96], name[300];
        inspect_format_shape(t->ne, t->n_dims, shape, sizeof(shape));
        cli_escape(t->name.data, (size_t)t->name.len, name, sizeof(name)); /* a NUL or ESC shows as \xNN */
        printf("  %-36s %-6s %-22s %14" PRIu64 " %12zu\n", name, st_type_name(t->type), shape, t->offset, t->nbytes);
    }
}

static void print_policy_line(const st_layout_policy *pol, const st_layout_plan *plan) {
    printf("layout:    policy %s (from %s)", st_pad_mode_name(pol->mode), pol->mode_source);
    if (pol->kill_switch) printf(", kill switch %s=1", pol->kill_switch_var);
    printf("; device %s; padding %s: %s\n", st_device_kind_name(plan->device),
           plan->pad_enabled ? "enabled" : "disabled", plan->pad_enabled_why);
    printf("           alias %zu B, pad %zu B; architecture %s\n", plan->alias, plan->pad, st_arch_name(plan->arch));
}

static void print_text_layout(const st_layout_plan *plan, const st_layout_policy *pol) {
    print_policy_line(pol, plan);
    printf("  %-36s %-12s %-5s %-22s %10s %10s %-6s %s\n", "name", "role", "type", "shape (ne)", "packed nb1",
           "nb1", "padded", "why");
    for (uint64_t i = 0; i < plan->n_entries; i++) {
        const st_layout_entry *e = &plan->entries[i];
        char shape[96], why[256], name[300];
        int n_dims = e->tensor.ne[2] > 1 ? 3 : (e->tensor.ne[1] > 1 ? 2 : 1);
        inspect_format_shape(e->tensor.ne, (uint32_t)n_dims, shape, sizeof(shape));
        st_layout_entry_explain(e, plan->alias, why, sizeof(why));
        cli_escape(e->name, e->name_len, name, sizeof(name));
        printf("  %-36s %-12s %-5s %-22s %10zu %10zu %-6s %s\n", name,
               st_tensor_role_name(e->role), st_type_name(e->tensor.type), shape, e->packed_row_bytes,
               e->tensor.nb[1], e->padded ? "yes" : "no", why);
    }
    char extra[32], total[32];
    cli_format_bytes(plan->total_extra_bytes, extra, sizeof(extra));
    cli_format_bytes(plan->total_packed_bytes, total, sizeof(total));
    double pct = plan->total_packed_bytes ? 100.0 * (double)plan->total_extra_bytes / (double)plan->total_packed_bytes : 0.0;
    printf("padded:    %" PRIu64 " of %" PRIu64 " tensors; extra %zu bytes (%s, %.2f%% of %s)\n", plan->n_padded,
           plan->n_entries, plan->total_extra_bytes, extra, pct, total);
}

/* ---- JSON output -------------------------------------------------------------------- */

/* The tensor parallel plan, when -tp was given. */
typedef struct inspect_tp {
    bool on;
    st_tp_plan plan;
    st_tp_layout layout;
} inspect_tp;

static void print_json(const st_gguf_file *f, const char *path, const st_layout_plan *plan,
                       const st_layout_policy *pol, const inspect_tp *tp, uint64_t max_items) {
    printf("{\n  \"file\": ");
    cli_json_string(stdout, path, strlen(path));
    printf(",\n  \"size\": %" PRIu64 ",\n  \"version\": %u,\n  \"alignment\": %zu,\n  \"data_offset\": %" PRIu64 ",\n",
           st_gguf_file_size(f), st_gguf_version(f), st_gguf_alignment(f), st_gguf_data_offset(f));
    printf("  \"metadata\": {");
    for (uint64_t i = 0; i < st_gguf_n_kv(f); i++) {
        const st_gguf_kv *kv = st_gguf_get_kv(f, i);
        char tbuf[48];
        printf(i ? ",\n    " : "\n    ");
        cli_json_string(stdout, kv->key.data, (size_t)kv->key.len);
        printf(": {\"type\": \"%s\", \"value\": ", value_type_name(&kv->value, tbuf, sizeof(tbuf)));
        print_value(stdout, &kv->value, max_items, true);
        printf("}");
    }
    printf("\n  },\n  \"tensors\": [");
    for (uint64_t i = 0; i < st_gguf_n_tensors(f); i++) {
        const st_gguf_tensor_info *t = st_gguf_get_tensor(f, i);
        printf(i ? ",\n    {\"name\": " : "\n    {\"name\": ");
        cli_json_string(stdout, t->name.data, (size_t)t->name.len);
        printf(", \"type\": \"%s\", \"ne\": [", st_type_name(t->type));
        for (uint32_t d = 0; d < t->n_dims; d++) printf(d ? ", %" PRId64 : "%" PRId64, t->ne[d]);
        printf("], \"offset\": %" PRIu64 ", \"bytes\": %zu", t->offset, t->nbytes);
        if (plan) {
            const st_layout_entry *e = &plan->entries[i];
            char why[256];
            st_layout_entry_explain(e, plan->alias, why, sizeof(why));
            printf(", \"planned_type\": \"%s\"", st_type_name(e->tensor.type)); /* differs with --weights */
            printf(", \"role\": \"%s\", \"packed_nb1\": %zu, \"nb\": [%zu, %zu, %zu, %zu], \"padded\": %s, "
                   "\"reason\": \"%s\", \"why\": ",
                   st_tensor_role_name(e->role), e->packed_row_bytes, e->tensor.nb[0], e->tensor.nb[1],
                   e->tensor.nb[2], e->tensor.nb[3], e->padded ? "true" : "false", st_pad_reason_name(e->reason));
            cli_json_string(stdout, why, strlen(why));
            printf(", \"extra_bytes\": %zu, \"auto\": ", e->extra_bytes);
            if (e->auto_source == ST_PAD_AUTO_NONE) printf("null, \"auto_gain\": null");
            else if (e->auto_source == ST_PAD_AUTO_BUILTIN) printf("\"builtin\", \"auto_gain\": null");
            else printf("\"calibrated\", \"auto_gain\": %.6g", e->auto_gain);
        }
        printf("}");
    }
    printf("\n  ]");
    if (plan) {
        printf(",\n  \"layout\": {\"policy\": \"%s\", \"policy_source\": \"%s\", \"kill_switch\": ",
               st_pad_mode_name(pol->mode), pol->mode_source);
        if (pol->kill_switch) cli_json_string(stdout, pol->kill_switch_var, strlen(pol->kill_switch_var));
        else printf("null");
        printf(", \"device_kind\": \"%s\", \"architecture\": \"%s\", \"pad_enabled\": %s, \"pad_enabled_why\": ",
               st_device_kind_name(plan->device), st_arch_name(plan->arch), plan->pad_enabled ? "true" : "false");
        cli_json_string(stdout, plan->pad_enabled_why, strlen(plan->pad_enabled_why));
        printf(", \"alias\": %zu, \"pad\": %zu, \"n_padded\": %" PRIu64 ", \"total_packed_bytes\": %zu, "
               "\"total_planned_bytes\": %zu, \"total_extra_bytes\": %zu, \"n_auto_calibrated\": %" PRIu64
               ", \"n_auto_builtin\": %" PRIu64 "}",
               plan->alias, plan->pad, plan->n_padded, plan->total_packed_bytes, plan->total_planned_bytes,
               plan->total_extra_bytes, plan->n_auto_calibrated, plan->n_auto_builtin);
    }
    if (tp->on) {
        printf(",\n  \"tensor_parallel\": ");
        inspect_tp_print_json(&tp->plan, &tp->layout, plan);
    }
    printf("\n}\n");
}

/* ---- command ------------------------------------------------------------------------ */

/* The model split into n shards, each split weight laid out by the rule as `whole` was (the
 * file validated as a model first: the plan needs its hyperparameters). */
static st_status plan_shards(const st_gguf_file *f, int n, const st_layout_plan *whole, const st_layout_policy *pol,
                             st_device_kind kind, const st_layout_auto_source *src, inspect_tp *tp, st_error *err) {
    st_hparams hp;
    st_status s = st_model_validate(f, &hp, err);
    if (s == ST_OK) s = st_tp_plan_init(&hp, n, &tp->plan, err);
    if (s == ST_OK) s = st_tp_layout_plan(&tp->plan, whole, pol, kind, src, &tp->layout, err);
    tp->on = s == ST_OK;
    return s;
}

int st_cmd_inspect(int argc, char **argv) {
    const char *path = NULL, *pad_flag = NULL, *backend_name = NULL, *kind_name = NULL, *max_array = NULL,
               *weights = NULL, *tp_arg = NULL;
    bool layout = false, json = false;
    for (int i = 1; i < argc; i++) {
        bool missing = false;
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return ST_EXIT_OK;
        } else if (strcmp(a, "--layout") == 0) {
            layout = true;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (cli_take_value(argc, argv, &i, "--pad-weights", &pad_flag, &missing) ||
                   cli_take_value(argc, argv, &i, "--backend", &backend_name, &missing) ||
                   cli_take_value(argc, argv, &i, "--device-kind", &kind_name, &missing) ||
                   cli_take_value(argc, argv, &i, "--max-array", &max_array, &missing) ||
                   cli_take_value(argc, argv, &i, "--weights", &weights, &missing) ||
                   cli_take_value(argc, argv, &i, "-tp", &tp_arg, &missing) ||
                   cli_take_value(argc, argv, &i, "--tensor-parallel", &tp_arg, &missing)) {
            if (missing) return cli_usage_error(CMD, "%s needs a value", a);
        } else if (a[0] == '-' && a[1] != '\0') {
            return cli_usage_error(CMD, "unknown option '%s'", a);
        } else if (path) {
            return cli_usage_error(CMD, "one file at a time ('%s' and '%s' given)", path, a);
        } else {
            path = a;
        }
    }
    if (!path) return cli_usage_error(CMD, "no GGUF file given");
    uint64_t max_items = 8;
    if (max_array && !cli_parse_u64(max_array, &max_items))
        return cli_usage_error(CMD, "--max-array: '%s' is not a non-negative integer", max_array);
    uint64_t shards = 1;
    if (tp_arg && (!cli_parse_u64(tp_arg, &shards) || shards < 1 || shards > ST_TP_MAX_SHARDS))
        return cli_usage_error(CMD, "-tp: '%s' is not a number of shards (1 to %d)", tp_arg, ST_TP_MAX_SHARDS);
    if (tp_arg && !layout) return cli_usage_error(CMD, "-tp shows each shard's layout: it needs --layout");

    st_type quantized_as = ST_TYPE_COUNT; /* as stored */
    if (weights && (!st_type_from_name(weights, &quantized_as) ||
                    (quantized_as != ST_TYPE_F16 && quantized_as != ST_TYPE_BF16)))
        return cli_usage_error(CMD, "--weights: '%s' is not f16 or bf16", weights);
    st_error err = {0};
    st_layout_policy policy;
    if (st_layout_policy_resolve(&policy, pad_flag, NULL, NULL, &err) != ST_OK) return cli_usage_error(CMD, "%s", err.message);
    st_device_kind kind = ST_DEVICE_KIND_CPU;
    st_device_info info;
    bool have_device = false;
    if (kind_name) {
        if (!st_device_kind_from_name(kind_name, &kind))
            return cli_usage_error(CMD, "--device-kind: unknown kind '%s' (cpu, nvidia-hopper, nvidia-other, "
                                   "amd-rdna3.5, amd-other)", kind_name);
    } else {
        st_backend_kind backend = st_backend_default();
        if (backend_name && st_backend_parse(backend_name, &backend, &err) != ST_OK)
            return cli_usage_error(CMD, "%s", err.message);
        if (st_device_query(backend, 0, &info, &err) != ST_OK) return cli_fail(CMD, &err);
        kind = info.kind;
        have_device = true;
    }

    st_gguf_file *f = NULL;
    if (st_gguf_open(path, &f, &err) != ST_OK) return cli_fail(CMD, &err);
    st_layout_plan plan;
    bool have_plan = false;
    inspect_tp tp = {0};
    if (layout) {
        /* `auto` on a real device: the per-shape decisions of its calibration cache (inspect
         * never measures); the built-in table for shapes the cache lacks, said in one line */
        st_calib_table calib;
        st_calibrate_table_init(&calib, NULL);
        st_layout_auto_source source;
        const st_layout_auto_source *src = NULL;
        char notice[4096] = "";
        if (have_device && st_layout_policy_is_auto(&policy)) {
            st_calibrate_for_inspect(&info, &policy, &calib, notice, sizeof(notice));
            source = st_calibrate_auto_source(&calib, "from the cache");
            src = &source;
        }
        st_status s = st_layout_plan_gguf_auto(f, &policy, kind, quantized_as, src, &plan, &err);
        have_plan = s == ST_OK;
        if (s == ST_OK && tp_arg) s = plan_shards(f, (int)shards, &plan, &policy, kind, src, &tp, &err);
        st_calibrate_table_free(&calib);
        if (s != ST_OK) {
            if (have_plan) st_layout_plan_free(&plan);
            st_gguf_close(f);
            return cli_fail(CMD, &err);
        }
        if (src && plan.n_auto_builtin > 0) {
            if (!notice[0])
                snprintf(notice, sizeof(notice),
                         "auto: %" PRIu64 " tensor(s) have shapes that %s's calibration cache lacks: built-in table "
                         "for them (`stride calibrate -m %s` measures them)",
                         plan.n_auto_builtin, info.name, path);
            fprintf(stderr, "stride %s: %s\n", CMD, notice);
        }
    }
    if (json) {
        print_json(f, path, layout ? &plan : NULL, &policy, &tp, max_items);
    } else {
        print_text_summary(f, path, max_items);
        if (layout) print_text_layout(&plan, &policy);
        else print_text_tensors(f);
        if (tp.on) inspect_tp_print_text(&tp.plan, &tp.layout, &plan);
    }
    st_tp_layout_free(&tp.layout);
    if (have_plan) st_layout_plan_free(&plan);
    st_gguf_close(f);
    return ST_EXIT_OK;
}
