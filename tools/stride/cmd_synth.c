/* stride synth: write a GGUF with random weights and the exact shapes of a real model. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "stride/synth.h"

static const char *CMD = "synth";

static void print_presets(FILE *out, st_type type) {
    fprintf(out, "presets (sizes at %s):\n", st_type_name(type));
    for (uint64_t i = 0; i < st_synth_n_presets(); i++) {
        const st_synth_preset *p = st_synth_get_preset(i);
        uint64_t n_tensors = 0, n_bytes = 0;
        st_synth_preset_size(p, type, &n_tensors, &n_bytes);
        if (n_bytes >= 100000000)
            fprintf(out, "  %-14s %7.2f GB  %s\n", p->name, (double)n_bytes / 1e9, p->description);
        else
            fprintf(out, "  %-14s %7.2f MB  %s\n", p->name, (double)n_bytes / 1e6, p->description);
    }
}

static void print_help(FILE *out, st_type type) {
    fprintf(out,
            "usage: stride synth PRESET -o FILE [--type f16|bf16|f32|q8_0] [--seed N]\n"
            "       stride synth --list [--type T]\n\n"
            "Writes a GGUF file with random weights and the exact tensor names, shapes and\n"
            "metadata of a real model (llama.cpp's converter conventions), with a valid\n"
            "synthetic SentencePiece-style vocabulary of the model's size. For benchmarks.\n\n"
            "options:\n"
            "  -o, --output FILE  where to write (required): a new file, or a regular file to\n"
            "                     replace (through a symbolic link, the file it names); the\n"
            "                     file appears only when complete, Ctrl-C leaves nothing\n"
            "  --type T           type of the matrices and embeddings: f16 (default), bf16, f32,\n"
            "                     or q8_0 (8-bit blocks, for quantized benchmarks); norms and\n"
            "                     rope factors are always f32\n"
            "  --seed N           random seed (default 1); the same seed gives the same file\n"
            "  --list             list the presets and exit\n"
            "  -h, --help         this help\n\n");
    print_presets(out, type);
}

static bool parse_type(const char *s, st_type *out) {
    st_type t;
    if (!st_type_from_name(s, &t)) return false;
    if (!st_synth_weight_type_ok(t)) return false;
    *out = t;
    return true;
}

int st_cmd_synth(int argc, char **argv) {
    const char *preset_name = NULL, *out = NULL, *type_s = NULL, *seed_s = NULL;
    bool help = false, list = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool missing = false;
        const char *v = NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            help = true;
        } else if (strcmp(a, "--list") == 0) {
            list = true;
        } else if (cli_take_value(argc, argv, &i, "-o", &v, &missing) ||
                   cli_take_value(argc, argv, &i, "--output", &v, &missing)) {
            if (missing) return cli_usage_error(CMD, "%s needs a file name", a);
            out = v;
        } else if (cli_take_value(argc, argv, &i, "--type", &v, &missing)) {
            if (missing) return cli_usage_error(CMD, "--type needs a value (f16, bf16, f32 or q8_0)");
            type_s = v;
        } else if (cli_take_value(argc, argv, &i, "--seed", &v, &missing)) {
            if (missing) return cli_usage_error(CMD, "--seed needs a value");
            seed_s = v;
        } else if (a[0] == '-' && a[1] != '\0') {
            return cli_usage_error(CMD, "unknown option '%s'", a);
        } else if (preset_name) {
            return cli_usage_error(CMD, "one preset only (got '%s' and '%s')", preset_name, a);
        } else {
            preset_name = a;
        }
    }

    st_type type = ST_TYPE_F16;
    if (type_s && !parse_type(type_s, &type))
        return cli_usage_error(CMD, "bad --type '%s': use f16, bf16, f32 or q8_0", type_s);
    if (help) {
        print_help(stdout, type);
        return ST_EXIT_OK;
    }
    if (list) {
        print_presets(stdout, type);
        return ST_EXIT_OK;
    }
    uint64_t seed = 1;
    if (seed_s && !cli_parse_u64(seed_s, &seed))
        return cli_usage_error(CMD, "bad --seed '%s': use a non-negative integer below 2^64", seed_s);
    if (!preset_name) return cli_usage_error(CMD, "no preset given ('stride synth --list' lists them)");
    const st_synth_preset *p = st_synth_find_preset(preset_name);
    if (!p) {
        fprintf(stderr, "stride synth: unknown preset '%s'; valid presets:", preset_name);
        for (uint64_t i = 0; i < st_synth_n_presets(); i++) fprintf(stderr, " %s", st_synth_get_preset(i)->name);
        fprintf(stderr, "\n");
        return ST_EXIT_USAGE;
    }
    if (!out) return cli_usage_error(CMD, "no output file: give -o FILE");

    cli_progress prog;
    char label[128];
    snprintf(label, sizeof(label), "synth %s %s", p->name, st_type_name(type));
    cli_progress_begin(&prog, label);
    /* Ctrl-C stops the write between chunks and nothing is left at `out` */
    cli_catch_interrupts();
    st_synth_options opt = {.weight_type = type,
                            .seed = seed,
                            .progress = cli_progress_update,
                            .progress_ctx = &prog,
                            .cancel = &cli_interrupted};
    st_error err = {0};
    st_status st = st_synth_write(p, &opt, out, &err);
    cli_progress_end(&prog);
    if (st != ST_OK && cli_interrupted) {
        fprintf(stderr, "stride %s: interrupted: %s is unchanged (nothing was written)\n", CMD, out);
        return ST_EXIT_INTERRUPTED;
    }
    if (st != ST_OK) return cli_fail(CMD, &err);

    uint64_t n_tensors = 0, n_bytes = 0;
    st_synth_preset_size(p, type, &n_tensors, &n_bytes);
    printf("wrote %s: %llu tensors, %.2f GiB in %.1f s\n", out, (unsigned long long)n_tensors,
           (double)n_bytes / (1024.0 * 1024.0 * 1024.0), st_clock_seconds() - prog.start);
    return ST_EXIT_OK;
}
