/* The sampler: parameters, the penalty history (a ring of the last repeat_last_n tokens),
 * the candidate buffer (one entry per vocabulary id) and the random stream. */
#include <math.h>
#include <stdlib.h>

#include "stride/sample.h"

/* Fixed PCG32 stream: a seed alone selects the sequence. */
#define ST_SAMPLER_RNG_STREAM 0u

struct st_sampler {
    st_sampler_params p;
    int64_t n_vocab;
    st_token_prob *cand; /* [n_vocab] */
    int32_t *history;    /* ring of [repeat_last_n] */
    int64_t n_history;   /* tokens accepted so far, capped at repeat_last_n */
    int64_t history_head;/* next slot to write */
    int32_t *last;       /* [repeat_last_n] scratch: the ring unrolled */
    int32_t *counted;    /* [repeat_last_n][2] the history's distinct tokens and counts (st_row_draw) */
    st_rng rng;
};

st_sampler_params st_sampler_params_default(void) {
    st_sampler_params p = {.temp = 0.8f,
                           .top_k = 40,
                           .top_p = 0.95f,
                           .min_p = 0.05f,
                           .repeat_penalty = 1.0f,
                           .frequency_penalty = 0.0f,
                           .presence_penalty = 0.0f,
                           .repeat_last_n = 64,
                           .seed = 0};
    return p;
}

st_status st_sampler_params_check(const st_sampler_params *p, st_error *err) {
    /* Written as !(valid) so that NaN is rejected too. */
    if (!(p->temp >= 0.0f) || isinf(p->temp))
        return st_error_set(err, ST_ERROR_INVALID, "temperature %g is invalid: it must be >= 0 (0 = greedy)",
                            (double)p->temp);
    if (p->top_k < 0)
        return st_error_set(err, ST_ERROR_INVALID, "top-k %d is invalid: it must be >= 0 (0 = off)", p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return st_error_set(err, ST_ERROR_INVALID, "top-p %g is invalid: it must be in (0, 1] (1 = off)",
                            (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p < 1.0f))
        return st_error_set(err, ST_ERROR_INVALID, "min-p %g is invalid: it must be in [0, 1) (0 = off)",
                            (double)p->min_p);
    if (!(p->repeat_penalty > 0.0f) || isinf(p->repeat_penalty))
        return st_error_set(err, ST_ERROR_INVALID, "repeat penalty %g is invalid: it must be > 0 (1 = off)",
                            (double)p->repeat_penalty);
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return st_error_set(err, ST_ERROR_INVALID, "frequency penalty %g is invalid: it must be in [-2, 2] (0 = off)",
                            (double)p->frequency_penalty);
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return st_error_set(err, ST_ERROR_INVALID, "presence penalty %g is invalid: it must be in [-2, 2] (0 = off)",
                            (double)p->presence_penalty);
    if (p->repeat_last_n < 0)
        return st_error_set(err, ST_ERROR_INVALID, "repeat-last-n %d is invalid: it must be >= 0 (0 = off)",
                            p->repeat_last_n);
    return ST_OK;
}

st_status st_sampler_init(const st_sampler_params *p, int64_t n_vocab, st_sampler **out, st_error *err) {
    *out = NULL;
    st_status st = st_sampler_params_check(p, err);
    if (st != ST_OK) return st;
    if (n_vocab <= 0 || n_vocab > INT32_MAX)
        return st_error_set(err, ST_ERROR_INVALID, "vocabulary size %lld is invalid", (long long)n_vocab);
    st_sampler *s = calloc(1, sizeof(*s));
    if (!s) return st_error_set(err, ST_ERROR_NOMEM, "out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->cand = malloc((size_t)n_vocab * sizeof(st_token_prob));
    size_t nh = p->repeat_last_n > 0 ? (size_t)p->repeat_last_n : 1;
    s->history = malloc(nh * sizeof(int32_t));
    s->last = malloc(nh * sizeof(int32_t));
    s->counted = malloc(2 * nh * sizeof(int32_t));
    if (!s->cand || !s->history || !s->last || !s->counted) {
        st_sampler_free(s);
        return st_error_set(err, ST_ERROR_NOMEM, "out of memory for a %lld-token sampler", (long long)n_vocab);
    }
    st_rng_seed(&s->rng, p->seed, ST_SAMPLER_RNG_STREAM);
    *out = s;
    return ST_OK;
}

void st_sampler_free(st_sampler *s) {
    if (!s) return;
    free(s->cand);
    free(s->history);
    free(s->last);
    free(s->counted);
    free(s);
}

void st_sampler_accept(st_sampler *s, int32_t id) {
    const int64_t cap = s->p.repeat_last_n;
    if (cap <= 0) return;
    s->history[s->history_head] = id;
    s->history_head = (s->history_head + 1) % cap;
    if (s->n_history < cap) s->n_history++;
}

/* The history, oldest first, into s->last. */
static int64_t unroll_history(st_sampler *s) {
    const int64_t cap = s->p.repeat_last_n, n = s->n_history;
    int64_t start = (s->history_head - n + cap) % (cap > 0 ? cap : 1);
    for (int64_t i = 0; i < n; i++) s->last[i] = s->history[(start + i) % cap];
    return n;
}

static bool no_penalty(const st_sampler *s) {
    const bool neutral = s->p.repeat_penalty == 1.0f && s->p.frequency_penalty == 0.0f && s->p.presence_penalty == 0.0f;
    return neutral || s->p.repeat_last_n == 0;
}

/* The history's distinct tokens and their counts into s->counted; returns how many. */
static int64_t count_history(st_sampler *s) { return st_sample_count_tokens(s->last, unroll_history(s), s->counted); }

/* The chain after its penalties, on c, with a draw: top-k, top-p, min-p, temperature. */
static int32_t draw_after_penalties(st_sampler *s, st_candidates *c) {
    st_sample_top_k(c, s->p.top_k);
    st_sample_top_p(c, s->p.top_p);
    st_sample_min_p(c, s->p.min_p);
    st_sample_temperature(c, s->p.temp);
    return st_sample_draw(c, &s->rng);
}

/* Candidates ids[0 .. n), vals[0 .. n) (a row's largest, in the chain's order) in the
 * sampler's buffer. */
static st_candidates load_candidates(st_sampler *s, const int32_t *ids, const float *vals, int32_t n) {
    for (int32_t i = 0; i < n; i++) s->cand[i] = (st_token_prob){.id = ids[i], .logit = vals[i]};
    return (st_candidates){.data = s->cand, .size = n, .sorted = true};
}

st_status st_sampler_sample(st_sampler *s, const float *logits, int32_t *out, st_error *err) {
    const int64_t V = s->n_vocab;
    bool any_finite = false;
    for (int64_t i = 0; i < V; i++) {
        if (isnan(logits[i]))
            return st_error_set(err, ST_ERROR_INVALID, "the logits hold a NaN (token %lld)", (long long)i);
        if (logits[i] == INFINITY)
            return st_error_set(err, ST_ERROR_INVALID, "the logits hold +inf (token %lld)", (long long)i);
        any_finite |= isfinite(logits[i]) != 0;
    }
    if (!any_finite) return st_error_set(err, ST_ERROR_INVALID, "the logits hold no finite value");
    st_candidates c = {.data = s->cand};
    st_candidates_from_logits(&c, logits, V);
    if (!no_penalty(s))
        st_sample_penalties_counted(&c, s->counted, count_history(s), s->p.repeat_penalty, s->p.frequency_penalty,
                                    s->p.presence_penalty);
    if (s->p.temp == 0.0f) {
        int64_t best = 0; /* the first (lowest id) of equal maxima */
        for (int64_t i = 1; i < V; i++)
            if (c.data[i].logit > c.data[best].logit) best = i;
        *out = c.data[best].id;
        return ST_OK;
    }
    *out = draw_after_penalties(s, &c);
    return ST_OK;
}

/* A temperature with no penalty and no top-k before top-p: what reads the whole row's
 * distribution and can still be sampled away from the host. */
static bool untruncated(const st_sampler *s) {
    return no_penalty(s) && s->p.temp > 0.0f && (s->p.top_k == 0 || s->p.top_k >= s->n_vocab);
}

/* Greedy, or a top-k of at most k: the chain keeps no more than a row's k largest. */
static bool keeps_at_most(const st_sampler *s, int32_t k) {
    return k >= 1 && (s->p.temp == 0.0f || (s->p.top_k >= 1 && s->p.top_k <= k));
}

bool st_sampler_fits_candidates(const st_sampler *s, int32_t k) { return no_penalty(s) && keeps_at_most(s, k); }

/* ST_ERROR_INVALID where st_sampler_sample would refuse the row: a NaN (lse NaN: anywhere
 * in the row), +inf, or no finite value among the candidates (none in the row). */
static st_status check_candidates(const int32_t *ids, const float *vals, int32_t k, float lse, st_error *err) {
    if (isnan(lse)) return st_error_set(err, ST_ERROR_INVALID, "the logits hold a NaN");
    bool any_finite = false;
    for (int32_t i = 0; i < k; i++) {
        if (isnan(vals[i])) return st_error_set(err, ST_ERROR_INVALID, "the logits hold a NaN (token %d)", ids[i]);
        if (vals[i] == INFINITY)
            return st_error_set(err, ST_ERROR_INVALID, "the logits hold +inf (token %d)", ids[i]);
        any_finite |= isfinite(vals[i]) != 0;
    }
    return any_finite ? ST_OK : st_error_set(err, ST_ERROR_INVALID, "the logits hold no finite value");
}

st_status st_sampler_sample_candidates(st_sampler *s, const int32_t *ids, const float *vals, int32_t k, float lse,
                                       int32_t *out, st_error *err) {
    ST_ASSERT(st_sampler_fits_candidates(s, k) && k <= s->n_vocab);
    st_status st = check_candidates(ids, vals, k, lse, err);
    if (st != ST_OK) return st;
    if (s->p.temp == 0.0f) { /* the largest, the lowest id among equals: the first candidate */
        *out = ids[0];
        return ST_OK;
    }
    /* the candidates are the row's k largest in the chain's order: top-k of at most k keeps
     * what it would keep of the whole row, and the later stages see the same tokens */
    st_candidates c = load_candidates(s, ids, vals, k);
    *out = draw_after_penalties(s, &c);
    return ST_OK;
}

bool st_sampler_cuts_top_p(const st_sampler *s) { return untruncated(s) && s->p.top_p < 1.0f; }

/* How far the top-p sums from the candidates may lie from st_sampler_sample's: its
 * probabilities are each rounded to float and summed in double; these are exp(logit - lse)
 * with lse a float (its rounding, |lse| 2^-24, scales every probability alike). */
static double top_p_margin(float lse) { return 1e-5 + 1e-6 * fabs((double)lse); }

int32_t st_sampler_top_p_keep(const st_sampler *s, const float *vals, int32_t k, float lse) {
    ST_ASSERT(st_sampler_cuts_top_p(s));
    if (!isfinite(lse)) return 0;
    const double p = (double)s->p.top_p, eps = top_p_margin(lse);
    double cum = 0.0;
    for (int32_t i = 0; i < k; i++) {
        if (!isfinite(vals[i]) && !(vals[i] == -INFINITY)) return 0; /* NaN, +inf */
        cum += exp((double)vals[i] - (double)lse);
        if (cum >= p - eps) return cum >= p + eps ? i + 1 : 0; /* the cut here, or too close to tell */
    }
    return 0;
}

int32_t st_sampler_sample_top_p_kept(st_sampler *s, const int32_t *ids, const float *vals, int32_t n) {
    ST_ASSERT(st_sampler_cuts_top_p(s) && n >= 1 && n <= s->n_vocab);
    st_candidates c = load_candidates(s, ids, vals, n);
    st_sample_min_p(&c, s->p.min_p);
    st_sample_temperature(&c, s->p.temp);
    return st_sample_draw(&c, &s->rng);
}

bool st_sampler_draws_row(const st_sampler *s) {
    return no_penalty(s) || s->p.repeat_last_n <= ST_DRAW_MAX_PENALIZED;
}

void st_sampler_next_draw(st_sampler *s, st_row_draw *d) {
    ST_ASSERT(st_sampler_draws_row(s));
    const bool greedy = s->p.temp == 0.0f;
    *d = (st_row_draw){.temp = greedy ? 1.0f : s->p.temp,
                       .min_p = greedy ? 0.0f : s->p.min_p,
                       .top_p = greedy ? 1.0f : s->p.top_p,
                       .top_k = greedy ? 1 : s->p.top_k < s->n_vocab ? s->p.top_k : 0,
                       .repeat_penalty = s->p.repeat_penalty,
                       .frequency_penalty = s->p.frequency_penalty,
                       .presence_penalty = s->p.presence_penalty};
    if (!no_penalty(s)) {
        const int64_t m = count_history(s);
        ST_ASSERT(m <= ST_DRAW_MAX_PENALIZED);
        d->n_penalized = (int32_t)m, d->penalized = s->counted;
    }
    if (!greedy) st_rng_uniform_words(&s->rng, d->u); /* greedy takes no uniform */
}
