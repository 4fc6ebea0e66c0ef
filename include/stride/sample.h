/*
 * stride: token sampling.
 *
 * The chain is llama.cpp's (common/sampling defaults), in this order:
 *   penalties -> top-k -> top-p -> min-p -> temperature -> draw
 * so top-k/top-p/min-p see the untempered distribution, and temperature only reshapes
 * what survived. temp == 0 is greedy: the repetition penalty still applies, then the
 * largest logit wins (the lowest id among equal logits).
 *
 * Random numbers come from PCG32 (M. O'Neill, "PCG: A Family of Simple Fast
 * Space-Efficient Statistically Good Algorithms for Random Number Generation", 2014;
 * the pcg32 variant XSH-RR with a 64-bit LCG state, multiplier 6364136223846793005):
 * integer arithmetic only, so a seed gives the same stream on every platform.
 *
 * The filter stages work on an st_candidates array (like llama.cpp's token data array)
 * and are public so that each can be tested on hand-made logits.
 */
#ifndef STRIDE_SAMPLE_H
#define STRIDE_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>

#include "stride/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- PCG32 ---- */

typedef struct st_rng {
    uint64_t state;
    uint64_t inc; /* odd: selects one of 2^63 streams */
} st_rng;

/* pcg32_srandom_r(seed, stream): the reference seeding procedure. */
void st_rng_seed(st_rng *r, uint64_t seed, uint64_t stream);
uint32_t st_rng_u32(st_rng *r);
/* Uniform in [0, 1) with 53 random bits (two draws: high 27 bits, then 26). */
double st_rng_uniform(st_rng *r);
/* The two words st_rng_uniform takes from r (27 and 26 random bits), for a draw made
 * elsewhere (a backend's, st_cpu_draw_rows) from the same stream, and the uniform in
 * [0, 1) they make: (hi * 2^26 + lo) / 2^53, exact in a double. */
void st_rng_uniform_words(st_rng *r, uint32_t words[2]);
double st_uniform_from_words(uint32_t hi, uint32_t lo);

/* ---- candidates ---- */

typedef struct st_token_prob {
    int32_t id;
    float logit;
    float p; /* valid after st_candidates_softmax */
} st_token_prob;

typedef struct st_candidates {
    st_token_prob *data;
    int64_t size;
    bool sorted; /* descending logit, ties by ascending id */
} st_candidates;

/* Fills c (capacity n at least) with ids 0..n-1 and their logits, unsorted. */
void st_candidates_from_logits(st_candidates *c, const float *logits, int64_t n);
/* Sorts the whole array (descending logit, ascending id among equals). */
void st_candidates_sort(st_candidates *c);
/* p = softmax(logit) over the surviving candidates, computed in double; sorts. */
void st_candidates_softmax(st_candidates *c);

/* Each filter keeps at least one candidate. */
/* Logits of the ids in last[0..n_last) (each distinct id once): positive ones divided by
 * penalty, the others multiplied by it (llama.cpp's repeat penalty). penalty 1 = off.
 * Expects c unsorted and complete (c->data[id].id == id), as st_candidates_from_logits
 * leaves it. */
void st_sample_repetition_penalty(st_candidates *c, const int32_t *last, int64_t n_last, float penalty);
/* The penalties of llama.cpp's penalties sampler over the tokens in last[0..n_last): the
 * repetition penalty as above, then each such token's logit lowered by count * frequency
 * + presence (OpenAI's frequency and presence penalties, count its occurrences in last).
 * All three neutral (1, 0, 0) = off. Expects c as st_sample_repetition_penalty does. */
void st_sample_penalties(st_candidates *c, const int32_t *last, int64_t n_last, float repeat, float frequency,
                         float presence);

/* The distinct tokens of ids[0 .. n) with their counts into counted ([n][2] at most:
 * counted[2 i] seen counted[2 i + 1] times, ascending ids); sorts ids. Returns how many. */
int64_t st_sample_count_tokens(int32_t *ids, int64_t n, int32_t *counted);

/* st_sample_penalties on a whole row's unsorted candidates (c->data[id].id == id) from the
 * history's distinct tokens and their counts (st_sample_count_tokens), i < n. */
void st_sample_penalties_counted(st_candidates *c, const int32_t *counted, int64_t n, float repeat, float frequency,
                                 float presence);

/* Keeps the k largest; k <= 0 or k >= size = off. */
void st_sample_top_k(st_candidates *c, int32_t k);
/* Keeps the smallest prefix (by probability) whose mass reaches p; p >= 1 = off. */
void st_sample_top_p(st_candidates *c, float p);
/* Keeps the tokens with probability >= min_p * (largest probability); min_p <= 0 = off. */
void st_sample_min_p(st_candidates *c, float min_p);
/* Divides every logit by temp (> 0). */
void st_sample_temperature(st_candidates *c, float temp);
/* Draws one id from softmax(logits) with one uniform from r. */
int32_t st_sample_draw(st_candidates *c, st_rng *r);
/* The same with the uniform u in [0, 1) given: the first candidate (in array order) where
 * the running sum of exp(logit - max) passes u times the total. */
int32_t st_sample_draw_at(st_candidates *c, double u);

/* ---- the sampler ---- */

typedef struct st_sampler_params {
    float temp;            /* >= 0; 0 = greedy */
    int32_t top_k;         /* >= 0; 0 = off */
    float top_p;           /* (0, 1]; 1 = off */
    float min_p;           /* [0, 1); 0 = off */
    float repeat_penalty;  /* > 0; 1 = off */
    float frequency_penalty; /* [-2, 2]: minus count * this on a recent token's logit; 0 = off */
    float presence_penalty;  /* [-2, 2]: minus this on a recent token's logit; 0 = off */
    int32_t repeat_last_n; /* >= 0 tokens of history the penalties look at; 0 = off */
    uint64_t seed;
} st_sampler_params;

/* llama.cpp's defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05, repeat penalty 1,
 * frequency and presence penalties 0 (off) over the last 64 tokens, seed 0. */
st_sampler_params st_sampler_params_default(void);

/* ST_ERROR_INVALID with a message naming the parameter, its value and the valid range. */
st_status st_sampler_params_check(const st_sampler_params *p, st_error *err);

typedef struct st_sampler st_sampler;

st_status st_sampler_init(const st_sampler_params *p, int64_t n_vocab, st_sampler **out, st_error *err);
void st_sampler_free(st_sampler *s);

/* Records a token in the penalty history (prompt tokens too, as llama.cpp does). */
void st_sampler_accept(st_sampler *s, int32_t id);

/* Picks the next token from n_vocab logits (not modified). ST_ERROR_INVALID when the
 * logits hold a NaN, +inf or no finite value. Does not accept the token. */
st_status st_sampler_sample(st_sampler *s, const float *logits, int32_t *out, st_error *err);

/* Whether the chain needs no more of the logits than their k largest (sorted): no
 * repetition penalty, and greedy or a top-k of at most k. */
bool st_sampler_fits_candidates(const st_sampler *s, int32_t k);

/* st_sampler_sample from a row's k largest logits (ids, vals: decreasing, ties to the
 * lower id; lse the row's log-sum-exp, whose NaN stands for a NaN anywhere in the row), for
 * a chain that st_sampler_fits_candidates allows: the token the whole row would give. */
st_status st_sampler_sample_candidates(st_sampler *s, const int32_t *ids, const float *vals, int32_t k, float lse,
                                       int32_t *out, st_error *err);

/* Whether the chain cuts by top-p with no top-k before it (temperature > 0, no repetition
 * penalty): its cut needs the whole row's probabilities, which a row's largest logits and
 * its log-sum-exp give where the cut falls among them (st_sampler_top_p_keep). */
bool st_sampler_cuts_top_p(const st_sampler *s);

/* For a chain st_sampler_cuts_top_p allows: how many of a row's k largest logits (vals,
 * decreasing; lse the row's log-sum-exp) top-p keeps, or 0 when its cut does not fall
 * among them clear of the rounding by which these probabilities (exp(logit - lse)) may
 * differ from st_sampler_sample's (a NaN included): then only the whole row settles it,
 * on the host or in a backend's draw (st_sampler_next_draw). */
int32_t st_sampler_top_p_keep(const st_sampler *s, const float *vals, int32_t k, float lse);

/* st_sampler_sample's token for a chain st_sampler_cuts_top_p allows, given that top-p
 * keeps exactly the row's n largest logits (ids, vals: st_sampler_top_p_keep's n): the
 * same survivors in the same order, so the same token for the same uniform. */
int32_t st_sampler_sample_top_p_kept(st_sampler *s, const int32_t *ids, const float *vals, int32_t n);

/* The most distinct tokens whose logits a backend's draw penalizes (a request whose history
 * holds more samples from the whole row on the host). */
#define ST_DRAW_MAX_PENALIZED 128

/* A token from a whole logits row that a backend samples where the row is
 * (st_cpu_draw_rows): the chain's parameters, the two words of the uniform it draws with,
 * and the tokens of the penalty history with their counts. Greedy is a top-k of 1. */
typedef struct st_row_draw {
    float temp;  /* > 0 */
    float min_p; /* [0, 1) */
    float top_p; /* (0, 1]; 1: off */
    int32_t top_k; /* 0: off */
    float repeat_penalty, frequency_penalty, presence_penalty;
    uint32_t u[2];
    int32_t n_penalized;      /* <= ST_DRAW_MAX_PENALIZED */
    const int32_t *penalized; /* [n_penalized][2] (token id, count), ids distinct; the
                                 sampler's memory, valid until its next call */
} st_row_draw;

/* Whether a backend can sample the chain's next token from the whole row where the row is
 * (st_sampler_next_draw): every chain, except penalties over a history of more than
 * ST_DRAW_MAX_PENALIZED tokens (repeat_last_n). */
bool st_sampler_draws_row(const st_sampler *s);

/* The next token's parameters for a backend, for a chain st_sampler_draws_row allows: the
 * chain (greedy as a top-k of 1), the history's distinct tokens with their counts where it
 * penalizes, and, where it draws, the uniform taken from the sampler's stream as
 * st_sampler_sample would take it, so that the backend gives the token st_sampler_sample
 * gives on the same row (st_cpu_draw_rows). */
void st_sampler_next_draw(st_sampler *s, st_row_draw *d);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_SAMPLE_H */
