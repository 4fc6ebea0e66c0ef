/* The sampling flags `run` and `chat` share (llama.cpp's names), parsed in one place; the
 * ranges are the library's (st_sampler_params_check), so one set of rules and messages. */
#ifndef STRIDE_TOOL_SAMPLING_FLAGS_H
#define STRIDE_TOOL_SAMPLING_FLAGS_H

#include <stdbool.h>

#include "stride/sample.h"

/* The penalty flags, the same defaults in every command (serve's help prints them too). */
#define CLI_PENALTY_FLAGS_HELP                                                                           \
    "  --repeat-penalty X       > 0; divide positive / multiply negative logits of recent\n"             \
    "                           tokens; 1 = off (default 1)\n"                                           \
    "  --frequency-penalty X    in [-2,2]; minus X times its count from a recent token's logit;\n"       \
    "                           0 = off (default 0)\n"                                                   \
    "  --presence-penalty X     in [-2,2]; minus X from a recent token's logit; 0 = off (default 0)\n"   \
    "  --repeat-last-n N        tokens the penalties look back over; 0 = off, -1 = context (default 64)\n"

#define CLI_SAMPLING_FLAGS_HELP                                                                         \
    "sampling (llama.cpp's chain: penalties, top-k, top-p, min-p, temperature):\n"                      \
    "  --temp T                 temperature >= 0; 0 = greedy (default 0.8)\n"                            \
    "  --top-k N                keep the N most likely tokens; 0 = off (default 40)\n"                   \
    "  --top-p P                keep the smallest set with mass >= P, in (0,1]; 1 = off (default 0.95)\n" \
    "  --min-p P                keep tokens with p >= P * p_max, in [0,1); 0 = off (default 0.05)\n"     \
    CLI_PENALTY_FLAGS_HELP                                                                                \
    "  --seed N                 random seed (default: from the clock); PCG32, so a seed\n"               \
    "                           reproduces a run on any platform\n"

typedef struct cli_sampling_flags {
    const char *temp, *top_k, *top_p, *min_p, *repeat_penalty, *frequency_penalty, *presence_penalty, *repeat_last_n,
        *seed;
} cli_sampling_flags;

/* True when argv[*i] is one of the sampling flags: its value is stored and *i advanced
 * (*missing set when the value is absent). */
bool cli_take_sampling_flag(int argc, char **argv, int *i, cli_sampling_flags *f, bool *missing);

/* Applies the given flags over *sp (which holds the command's defaults), draws a seed
 * from the clock when none was given, and checks the result. --repeat-last-n -1 sets
 * *last_n_context (the caller sets sp->repeat_last_n once the context is known; until
 * then it is 0). On a bad value prints the usage error and returns ST_EXIT_USAGE; else
 * ST_EXIT_OK. */
int cli_sampling_resolve(const char *cmd, const cli_sampling_flags *f, st_sampler_params *sp, bool *last_n_context);

#endif
