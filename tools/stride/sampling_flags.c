#include "sampling_flags.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

bool cli_take_sampling_flag(int argc, char **argv, int *i, cli_sampling_flags *f, bool *missing) {
    return cli_take_value(argc, argv, i, "--temp", &f->temp, missing) ||
           cli_take_value(argc, argv, i, "--top-k", &f->top_k, missing) ||
           cli_take_value(argc, argv, i, "--top-p", &f->top_p, missing) ||
           cli_take_value(argc, argv, i, "--min-p", &f->min_p, missing) ||
           cli_take_value(argc, argv, i, "--repeat-penalty", &f->repeat_penalty, missing) ||
           cli_take_value(argc, argv, i, "--repeat-last-n", &f->repeat_last_n, missing) ||
           cli_take_value(argc, argv, i, "--frequency-penalty", &f->frequency_penalty, missing) ||
           cli_take_value(argc, argv, i, "--presence-penalty", &f->presence_penalty, missing) ||
           cli_take_value(argc, argv, i, "--seed", &f->seed, missing);
}

/* Whole string, finite. */
static bool parse_float(const char *s, float *out) {
    char *end = NULL;
    const float v = strtof(s, &end);
    if (end == s || *end != '\0' || !isfinite(v)) return false;
    *out = v;
    return true;
}

/* Whole string, an int32. */
static bool parse_i32(const char *s, int32_t *out) {
    char *end = NULL;
    const long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || v < INT32_MIN || v > INT32_MAX) return false;
    *out = (int32_t)v;
    return true;
}

int cli_sampling_resolve(const char *cmd, const cli_sampling_flags *f, st_sampler_params *sp, bool *last_n_context) {
    const struct {
        const char *flag, *value;
        float *out;
    } floats[] = {{"--temp", f->temp, &sp->temp},
                  {"--top-p", f->top_p, &sp->top_p},
                  {"--min-p", f->min_p, &sp->min_p},
                  {"--repeat-penalty", f->repeat_penalty, &sp->repeat_penalty},
                  {"--frequency-penalty", f->frequency_penalty, &sp->frequency_penalty},
                  {"--presence-penalty", f->presence_penalty, &sp->presence_penalty}};
    for (size_t k = 0; k < sizeof(floats) / sizeof(floats[0]); k++)
        if (floats[k].value && !parse_float(floats[k].value, floats[k].out))
            return cli_usage_error(cmd, "%s: '%s' is not a number", floats[k].flag, floats[k].value);
    if (f->top_k && !parse_i32(f->top_k, &sp->top_k))
        return cli_usage_error(cmd, "--top-k: '%s' is not an integer", f->top_k);
    int32_t last_n = sp->repeat_last_n;
    if (f->repeat_last_n && !parse_i32(f->repeat_last_n, &last_n))
        return cli_usage_error(cmd, "--repeat-last-n: '%s' is not an integer", f->repeat_last_n);
    if (last_n < -1) return cli_usage_error(cmd, "--repeat-last-n %d is invalid: it must be >= -1", (int)last_n);
    *last_n_context = last_n == -1;
    sp->repeat_last_n = last_n == -1 ? 0 : last_n;
    if (f->seed && !cli_parse_u64(f->seed, &sp->seed))
        return cli_usage_error(cmd, "--seed: '%s' is not a non-negative integer", f->seed);
    if (!f->seed) sp->seed = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid();
    st_error err = {0};
    if (st_sampler_params_check(sp, &err) != ST_OK) return cli_usage_error(cmd, "%s", err.message);
    return ST_EXIT_OK;
}
