/* The sampling stages on a candidate array: repetition penalty, top-k, top-p, min-p,
 * temperature and the draw. Semantics are llama.cpp's (src/llama-sampling.cpp); every
 * filter keeps at least one candidate. Order among candidates is always deterministic:
 * descending logit, ascending id among equal logits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stride/sample.h"

static int cmp_desc(const st_token_prob *a, const st_token_prob *b) {
    if (a->logit > b->logit) return -1;
    if (a->logit < b->logit) return 1;
    return (a->id > b->id) - (a->id < b->id);
}

static int cmp_desc_void(const void *a, const void *b) { return cmp_desc(a, b); }

static void swap_tp(st_token_prob *a, int64_t i, int64_t j) {
    st_token_prob t = a[i];
    a[i] = a[j];
    a[j] = t;
}

/* Quickselect: afterwards a[0..k) holds the k first elements in cmp_desc order (in no
 * particular order among themselves). O(n) expected; the order is a total order (ids are
 * distinct), so the result does not depend on the pivot choices. */
static void select_top(st_token_prob *a, int64_t n, int64_t k) {
    ST_ASSERT(k >= 1 && k <= n);
    const int64_t t = k - 1;
    int64_t lo = 0, hi = n - 1;
    while (hi > lo) {
        int64_t mid = lo + (hi - lo) / 2;
        if (cmp_desc(&a[mid], &a[lo]) < 0) swap_tp(a, lo, mid);
        if (cmp_desc(&a[hi], &a[lo]) < 0) swap_tp(a, lo, hi);
        if (cmp_desc(&a[hi], &a[mid]) < 0) swap_tp(a, mid, hi);
        st_token_prob pivot = a[mid];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (cmp_desc(&a[i], &pivot) < 0) i++;
            while (cmp_desc(&a[j], &pivot) > 0) j--;
            if (i <= j) {
                swap_tp(a, i, j);
                i++;
                j--;
            }
        }
        if (t <= j)
            hi = j;
        else if (t >= i)
            lo = i;
        else
            break; /* t sits between the partitions: it is the pivot, in place */
    }
}

/* Makes c->data[0..k) the k first candidates, sorted. */
static void sort_prefix(st_candidates *c, int64_t k) {
    if (c->sorted) return;
    if (k >= c->size) {
        st_candidates_sort(c);
        return;
    }
    select_top(c->data, c->size, k);
    qsort(c->data, (size_t)k, sizeof(st_token_prob), cmp_desc_void);
}

void st_candidates_from_logits(st_candidates *c, const float *logits, int64_t n) {
    for (int64_t i = 0; i < n; i++) c->data[i] = (st_token_prob){.id = (int32_t)i, .logit = logits[i], .p = 0.0f};
    c->size = n;
    c->sorted = false;
}

void st_candidates_sort(st_candidates *c) {
    if (!c->sorted) qsort(c->data, (size_t)c->size, sizeof(st_token_prob), cmp_desc_void);
    c->sorted = true;
}

static float max_logit(const st_candidates *c) {
    float m = c->data[0].logit;
    for (int64_t i = 1; i < c->size; i++)
        if (c->data[i].logit > m) m = c->data[i].logit;
    return m;
}

/* Sets p for every candidate (softmax in double, no sorting); returns nothing. */
static void probs_unsorted(st_candidates *c) {
    const double m = max_logit(c);
    double sum = 0.0;
    for (int64_t i = 0; i < c->size; i++) sum += exp((double)c->data[i].logit - m);
    for (int64_t i = 0; i < c->size; i++) c->data[i].p = (float)(exp((double)c->data[i].logit - m) / sum);
}

void st_candidates_softmax(st_candidates *c) {
    ST_ASSERT(c->size > 0);
    st_candidates_sort(c);
    probs_unsorted(c);
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

void st_sample_repetition_penalty(st_candidates *c, const int32_t *last, int64_t n_last, float penalty) {
    st_sample_penalties(c, last, n_last, penalty, 0.0f, 0.0f);
}

/* One token's penalties, seen count times in the history. */
static void penalize(st_token_prob *t, int64_t count, float repeat, float frequency, float presence) {
    if (repeat != 1.0f) t->logit = t->logit <= 0.0f ? t->logit * repeat : t->logit / repeat;
    if (frequency != 0.0f || presence != 0.0f) t->logit -= (float)count * frequency + presence;
}

void st_sample_penalties(st_candidates *c, const int32_t *last, int64_t n_last, float repeat, float frequency,
                         float presence) {
    if ((repeat == 1.0f && frequency == 0.0f && presence == 0.0f) || n_last <= 0) return;
    ST_ASSERT(!c->sorted);
    int32_t *ids = malloc(3 * (size_t)n_last * sizeof(int32_t)); /* [n_last] ids, then [n_last][2] counted */
    if (!ids) { /* defensive: count each distinct id by a quadratic scan */
        for (int64_t i = 0; i < n_last; i++) {
            bool seen = false;
            int64_t count = 1;
            for (int64_t j = 0; j < i && !seen; j++) seen = last[j] == last[i];
            for (int64_t j = i + 1; j < n_last; j++) count += last[j] == last[i];
            if (seen || last[i] < 0 || last[i] >= c->size) continue;
            penalize(&c->data[last[i]], count, repeat, frequency, presence);
        }
        return;
    }
    int32_t *counted = ids + n_last;
    memcpy(ids, last, (size_t)n_last * sizeof(int32_t));
    st_sample_penalties_counted(c, counted, st_sample_count_tokens(ids, n_last, counted), repeat, frequency, presence);
    free(ids);
}

int64_t st_sample_count_tokens(int32_t *ids, int64_t n, int32_t *counted) {
    qsort(ids, (size_t)n, sizeof(int32_t), cmp_i32);
    int64_t m = 0;
    for (int64_t i = 0, j; i < n; i = j, m++) {
        for (j = i + 1; j < n && ids[j] == ids[i];) j++; /* ids[i .. j): one token, j - i times */
        counted[2 * m] = ids[i], counted[2 * m + 1] = (int32_t)(j - i);
    }
    return m;
}

void st_sample_penalties_counted(st_candidates *c, const int32_t *counted, int64_t n, float repeat, float frequency,
                                 float presence) {
    if (repeat == 1.0f && frequency == 0.0f && presence == 0.0f) return;
    ST_ASSERT(!c->sorted);
    for (int64_t i = 0; i < n; i++) {
        const int32_t id = counted[2 * i];
        if (id < 0 || id >= c->size) continue;
        ST_ASSERT(c->data[id].id == id);
        penalize(&c->data[id], counted[2 * i + 1], repeat, frequency, presence);
    }
}

void st_sample_top_k(st_candidates *c, int32_t k) {
    if (k <= 0 || k >= c->size) return;
    sort_prefix(c, k);
    c->size = k;
    c->sorted = true;
}

void st_sample_top_p(st_candidates *c, float p) {
    if (p >= 1.0f || c->size <= 1) return;
    probs_unsorted(c); /* probabilities over every candidate, before any cut */
    /* Only the head of the distribution is ever needed: sort a growing prefix until its
     * mass reaches p, instead of the whole (vocabulary-sized) array. */
    int64_t have = 0;
    double cum = 0.0;
    for (int64_t m = 256;; m *= 8) {
        if (m > c->size) m = c->size;
        sort_prefix(c, m);
        for (int64_t i = have; i < m; i++) {
            cum += c->data[i].p;
            if (cum >= (double)p) {
                c->size = i + 1;
                c->sorted = true;
                return;
            }
        }
        have = m;
        if (m == c->size) break;
    }
    c->sorted = true; /* rounding left the total just under p: keep everything */
}

void st_sample_min_p(st_candidates *c, float min_p) {
    if (min_p <= 0.0f || c->size <= 1) return;
    /* p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p) */
    const double threshold = (double)max_logit(c) + log((double)min_p);
    int64_t kept = 0;
    for (int64_t i = 0; i < c->size; i++)
        if ((double)c->data[i].logit >= threshold) c->data[kept++] = c->data[i];
    ST_ASSERT(kept >= 1); /* the maximum always passes */
    c->size = kept;       /* compaction keeps the order, sorted or not */
}

void st_sample_temperature(st_candidates *c, float temp) {
    ST_ASSERT(temp > 0.0f);
    for (int64_t i = 0; i < c->size; i++) c->data[i].logit /= temp;
}

/* Draws from the candidates' softmax: the running sum of exp(logit - max) in candidate
 * order, the first candidate where it passes u * total. The total's pass keeps the running
 * sum at the start of each of at most DRAW_RUNS runs of candidates (the same doubles the
 * walk adds), so the walk starts at the run whose end passes the target and computes one
 * run's exponentials, not the whole array's again. */
#define DRAW_RUNS 1024

int32_t st_sample_draw(st_candidates *c, st_rng *r) { return st_sample_draw_at(c, st_rng_uniform(r)); }

int32_t st_sample_draw_at(st_candidates *c, double u) {
    ST_ASSERT(c->size > 0 && u >= 0.0 && u < 1.0);
    const int64_t n = c->size, span = n <= DRAW_RUNS ? 1 : (n + DRAW_RUNS - 1) / DRAW_RUNS;
    const double m = max_logit(c);
    double start[DRAW_RUNS + 1]; /* start[b]: the sum before run b */
    double total = 0.0;
    int64_t last_nonzero = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i % span == 0) start[i / span] = total;
        const double w = exp((double)c->data[i].logit - m);
        if (w > 0.0) last_nonzero = i;
        total += w;
    }
    const int64_t n_runs = (n + span - 1) / span;
    start[n_runs] = total;
    const double target = u * total;
    int64_t b = 0; /* the first run whose end passes the target: no earlier sum did */
    while (b < n_runs && !(target < start[b + 1])) b++;
    if (b == n_runs) return c->data[last_nonzero].id; /* target == total after rounding */
    double cum = start[b];
    const int64_t end = (b + 1) * span < n ? (b + 1) * span : n;
    for (int64_t i = b * span; i < end; i++) {
        cum += exp((double)c->data[i].logit - m);
        if (target < cum) return c->data[i].id;
    }
    return c->data[last_nonzero].id; /* not reached: the run's end passes the target */
}
