/* stride: one binary, git-style subcommands. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "stride/device.h"
#include "stride/log.h"
#include "stride/tp.h"

typedef struct command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
} command;

static const command commands[] = {
    {"synth", "write a GGUF with random weights and the shapes of a real model", st_cmd_synth},
    {"inspect", "show a GGUF file's metadata, tensors and weight layout", st_cmd_inspect},
    {"run", "generate text from a prompt (sampling or greedy), streaming it out", st_cmd_run},
    {"chat", "chat with a model in the terminal, through its chat template", st_cmd_chat},
    {"serve", "an OpenAI-compatible HTTP server with a web chat page", st_cmd_serve},
    {"perplexity", "perplexity of a model over a text file (llama.cpp's method)", st_cmd_perplexity},
    {"bench", "prompt and generation speed, llama-bench style, padding on vs off", st_cmd_bench},
    {"calibrate", "time each weight shape packed vs padded; the per-device cache `auto` reads", st_cmd_calibrate},
    {"tokenize", "print the token ids of a text with a model's vocabulary", st_cmd_tokenize},
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void print_help(FILE *out) {
    fprintf(out,
            "stride %s: LLM inference for float-weight GGUF models, with a cache-aware weight layout\n\n"
            "usage: stride <command> [options]\n\ncommands:\n",
            STRIDE_VERSION_STRING);
    for (size_t i = 0; i < N_COMMANDS; i++) fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "  %-10s %s\n", "help", "show this help, or a command's: stride help <command>");
    fprintf(out, "\n'stride <command> --help' shows a command's options.\n");
}

/* The version, and what this build can drive: the CUDA backend, and NCCL for tensor
 * parallelism (asked of the linked library, so a broken link shows here). */
static void print_version(void) {
    printf("stride %s\n", STRIDE_VERSION_STRING);
    printf("CUDA backend: %s\n", st_cuda_compiled() ? "built" : "not built");
    int v = 0;
    if (st_tp_nccl_version(&v))
        printf("NCCL: %d.%d.%d linked (no communicator yet: -tp N simulates its shards on the CPU backend; "
               "driving N GPUs is not built)\n",
               v / 10000, v / 100 % 100, v % 100);
    else
        printf("NCCL: not linked (needs the CUDA backend and NVIDIA's nvidia-nccl-cu<CUDA major> wheel: "
               "scripts/install-deps.sh); -tp N simulates its shards on the CPU backend\n");
}

/* The library's notices (a fallback it took) go to stderr, after the command's output. */
static void log_to_stderr(st_log_level level, const char *message, void *ctx) {
    (void)ctx;
    fprintf(stderr, "stride: %s%s\n", level == ST_LOG_WARN ? "warning: " : "", message);
}

int main(int argc, char **argv) {
    st_log_set(log_to_stderr, NULL);
    /* A write past the file size limit (ulimit -f) then fails with EFBIG like a full disk,
     * and the writer removes its temporary file, instead of the process dying mid-write. */
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2) {
        print_help(stderr);
        return ST_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "help") == 0 || strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        if (argc >= 3 && strcmp(name, "help") == 0) {
            for (size_t i = 0; i < N_COMMANDS; i++) {
                if (strcmp(argv[2], commands[i].name) == 0) {
                    char *sub[] = {argv[2], "--help", NULL};
                    return commands[i].run(2, sub);
                }
            }
            fprintf(stderr, "stride: no command '%s'; 'stride help' lists them\n", argv[2]);
            return ST_EXIT_USAGE;
        }
        print_help(stdout);
        return ST_EXIT_OK;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "version") == 0) {
        print_version();
        return ST_EXIT_OK;
    }
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(name, commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "stride: no command '%s'; 'stride help' lists them\n", name);
    return ST_EXIT_USAGE;
}
