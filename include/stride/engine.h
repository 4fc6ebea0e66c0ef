/*
 * stride: the engine. Many requests (sequences) at once over one model: a paged KV cache
 * with automatic prefix reuse, continuous batching with chunked prefill, per-request
 * sampling, and tokens streamed back as events. The floor under `stride serve`, and
 * under `stride run --parallel`; one sequence at a time is a session (model.h).
 *
 * Use: st_engine_init, then st_engine_add requests (token ids and their sampling), then
 * call st_engine_step while st_engine_pending is not 0, draining st_engine_poll after
 * each step; st_engine_cancel at any time between calls.
 *
 * Single-threaded by design: an engine and everything it returns belong to one thread,
 * and no call may run concurrently with another on the same engine. A server owns one
 * loop thread that steps the engine and marshals requests, cancellations and events to
 * and from its connections.
 *
 * The KV cache: a pool of n_blocks blocks of ST_KV_BLOCK_TOKENS (64) tokens of every
 * layer (runner.h). A running sequence holds the blocks of its positions. Full blocks of
 * computed tokens (prompt and generated) are registered in a prefix cache under a hash of
 * their whole prefix (hash of the parent block's hash and the block's 64 token ids; a hit
 * is verified by the token ids and by the parent block itself, never by the hash alone);
 * a new request takes the longest cached run of its full blocks instead of computing
 * them. Blocks are reference-counted: a block held by several sequences, or registered in
 * the prefix cache, is copied before a sequence writes into it (copy-on-write). When its
 * last holder ends, a registered block stays cached and is evicted least recently
 * released first (the deepest blocks of a prefix first) when a block is needed.
 *
 * The scheduler (vLLM's continuous batching). Each step builds one batch of at most
 * max_batch_tokens tokens and n_parallel sequences:
 *   1. decode: every running sequence that has one token to feed (its last sampled
 *      token), oldest first. When its next block cannot be had, the newest running
 *      sequence is pre-empted (possibly itself, if it is the newest): its blocks are
 *      given back at once and it goes back to the front of the waiting queue with its
 *      generated tokens appended to its prompt, so that it recomputes them (mostly from
 *      the prefix cache) when it runs again. Its sampler's state is kept: pre-emption
 *      changes no token of any sequence.
 *   2. prefill: running sequences with more than one token to feed (prompts, or
 *      recomputation after pre-emption), oldest first, each a chunk of as many tokens as
 *      the budget and the free blocks allow (chunked prefill: a long prompt takes several
 *      steps and never stalls the decoding sequences). Prefill never pre-empts.
 *   3. admission: if nothing was pre-empted in this step, waiting requests are admitted
 *      first come first served while a row, token budget and blocks remain (a request is
 *      admitted only if its first chunk's blocks leave 1% of the pool free, unless
 *      nothing else runs; the head of the queue waits for room, none overtakes it).
 * The oldest running sequence therefore always advances, and a sequence never needs
 * more than the pool (n_ctx is at most n_blocks * 64), so every request finishes.
 *
 * A sequence's tokens are its prompt and then its generated tokens; it may hold n_ctx of
 * them in the cache. A sequence finishes (an event with `finished` set) when it samples a
 * stop token, reaches max_tokens, or samples a token that would need position n_ctx
 * (context full); or when cancelled, or on an error (the logits held a NaN, the backend
 * failed).
 *
 * Speed in the stats: a step's time is split between prompt and generation in proportion
 * to its prompt-chunk and decode tokens.
 */
#ifndef STRIDE_ENGINE_H
#define STRIDE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stride/model.h"
#include "stride/sample.h"
#include "stride/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_engine st_engine;

/* ---- options and sizing --------------------------------------------------------------- */

typedef struct st_engine_options {
    int64_t n_ctx;            /* tokens one sequence may hold (prompt + generated), >= 1 */
    int32_t n_parallel;       /* sequences running at once (rows of a batch), >= 1 */
    int64_t n_blocks;         /* KV blocks in the pool; 0: from kv_bytes, else enough for
                                 n_parallel full contexts (ceil(n_ctx / 64) * n_parallel) */
    uint64_t kv_bytes;        /* a byte budget for the pool when n_blocks is 0 (0: unused) */
    int64_t max_batch_tokens; /* tokens in one step (the prefill chunk budget); raised to
                                 n_parallel so that every decode token fits */
    st_type kv_type;          /* ST_TYPE_F16 or ST_TYPE_F32 */
    bool prefix_cache;        /* reuse cached prefixes */
} st_engine_options;

/* n_ctx 4096, n_parallel 8, n_blocks and kv_bytes 0, max_batch_tokens 512, F16, prefix
 * cache on. */
st_engine_options st_engine_options_default(void);

/* Logits candidates a row on a GPU: the backend picks each row's k largest logits and
 * its log-sum-exp (runner.h) and only those come to the host. The default top-k (40) and
 * the most top_logprobs (20) fit: greedy and a top-k of at most k sample from them; top-p
 * without top-k does where its cut falls among them, else the backend draws from the
 * whole row after the step. Every other chain (a temperature alone, OpenAI's defaults; a
 * top-k over k; penalties) is sampled by the backend from the whole row with the step
 * (st_sampler_draws_row), so that only its token comes back; only penalties over a history
 * longer than ST_DRAW_MAX_PENALIZED take the whole row to the host. On the CPU, whose
 * logits are in host memory already, the engine reads whole rows. */
#define ST_ENGINE_CANDIDATES 64

/* How many candidates a runner keeps of each logits row of a model of n_vocab tokens:
 * ST_ENGINE_CANDIDATES, or the whole vocabulary when that is smaller. */
static inline int32_t st_engine_candidates(int64_t n_vocab) {
    return n_vocab < ST_ENGINE_CANDIDATES ? (int32_t)n_vocab : ST_ENGINE_CANDIDATES;
}

/* What an engine chose (for the report at start). */
typedef struct st_engine_config {
    int64_t n_ctx;            /* min(asked, n_blocks * 64): one sequence can always fit */
    int32_t n_parallel;
    int64_t n_blocks;
    int32_t block_tokens;     /* ST_KV_BLOCK_TOKENS */
    size_t block_bytes;       /* one block of every layer's K and V */
    size_t kv_bytes;          /* n_blocks * block_bytes */
    int64_t max_batch_tokens;
    st_type kv_type;
    bool prefix_cache;
} st_engine_config;

/* An engine over m (which must outlive it): the KV pool and a runner in m's backend.
 * ST_ERROR_INVALID naming the option out of range; out of memory names the sizes. */
st_status st_engine_init(st_model *m, const st_engine_options *o, st_engine **out, st_error *err);
void st_engine_free(st_engine *e);
void st_engine_get_config(const st_engine *e, st_engine_config *out);

/* Records the decode steps of every batch size up to n_parallel at every depth before the
 * first request (st_runner_warmup), where the backend records them (CUDA); at once on the
 * CPU. A server calls it at start, so that its first requests do not pay the recordings. */
st_status st_engine_warmup(st_engine *e, st_error *err);

/* ---- requests ------------------------------------------------------------------------- */

typedef enum st_request_logits {
    ST_REQUEST_LOGITS_NONE = 0,
    ST_REQUEST_LOGITS_FIRST, /* the first token's event carries the prompt's last logits */
    ST_REQUEST_LOGITS_EVERY, /* every token's event carries the logits it was sampled from */
} st_request_logits;

#define ST_ENGINE_MAX_TOP_LOGPROBS 20

typedef struct st_request_params {
    const int32_t *prompt;      /* [n_prompt] token ids, copied; 1 <= n_prompt <= n_ctx */
    int64_t n_prompt;
    st_sampler_params sampling; /* the chain and this request's own seed (sample.h) */
    int64_t max_tokens;         /* tokens to generate, >= 1; -1: until a stop token or a
                                   full context */
    const int32_t *stop;        /* [n_stop] token ids that end the generation (e.g. the
                                   vocabulary's end-of-generation tokens), copied */
    int32_t n_stop;
    st_request_logits logits;
    bool logprobs;              /* events carry the token's log-probability under the
                                   model's distribution (the raw logits' softmax, before
                                   penalty and temperature, as OpenAI reports it) */
    int32_t top_logprobs;       /* and the most likely tokens' (0 .. 20); needs logprobs */
} st_request_params;

/* sampling st_sampler_params_default(), max_tokens -1, nothing else. */
st_request_params st_request_params_default(void);

/* Queues a request; *id (from 1, increasing) names it in events. Checks every field
 * (ids in the vocabulary, sizes, the sampling parameters) and returns ST_ERROR_INVALID
 * naming the first bad one. The prompt's tokens enter the sampler's penalty history. A
 * waiting request holds its tokens only: no KV block, and no sampler (whose buffer is
 * vocabulary-sized) until it first runs. */
st_status st_engine_add(st_engine *e, const st_request_params *p, int64_t *id, st_error *err);

/* A new request that continues request parent from where it stands: its prompt is the
 * parent's prompt and generated tokens so far, and if the parent is running (and a row is
 * free) it shares the parent's computed blocks instead of recomputing them. p gives the
 * sampling, limits and outputs (p->prompt must be NULL and n_prompt 0). ST_ERROR_INVALID
 * for an unknown or finished parent. */
st_status st_engine_fork(st_engine *e, int64_t parent, const st_request_params *p, int64_t *id, st_error *err);

/* Ends a waiting or running request now: its blocks are given back before this returns
 * and a CANCELLED event follows. A request that already finished is left alone (ST_OK);
 * an id never given out is ST_ERROR_INVALID. */
st_status st_engine_cancel(st_engine *e, int64_t id, st_error *err);

/* Requests not finished (waiting or running). */
int64_t st_engine_pending(const st_engine *e);

/* ---- stepping and events -------------------------------------------------------------- */

/* One step: schedule, one forward pass, sample, queue the events. Nothing to do is ST_OK.
 * A backend failure finishes the step's requests with ST_FINISH_ERROR and returns its
 * status; the engine stays usable. */
st_status st_engine_step(st_engine *e, st_error *err);

typedef enum st_finish_reason {
    ST_FINISH_NONE = 0,
    ST_FINISH_STOP,      /* sampled a stop token (the event's token) */
    ST_FINISH_LENGTH,    /* generated max_tokens */
    ST_FINISH_CONTEXT,   /* the next token would not fit n_ctx */
    ST_FINISH_CANCELLED,
    ST_FINISH_ERROR,     /* message says why */
} st_finish_reason;

const char *st_finish_reason_name(st_finish_reason r); /* "stop", "length", ... */

typedef struct st_token_logprob {
    int32_t id;
    float logprob;
} st_token_logprob;

typedef struct st_engine_event {
    int64_t id;                 /* the request */
    int32_t token;              /* the generated token, or -1 (cancelled, error) */
    bool finished;
    st_finish_reason reason;    /* when finished */
    float logprob;              /* of token, when the request asked */
    int32_t n_top;
    st_token_logprob top[ST_ENGINE_MAX_TOP_LOGPROBS]; /* descending */
    const float *logits;        /* [n_vocab] or NULL (st_request_params.logits) */
    const char *message;        /* ST_FINISH_ERROR: why; else NULL */
    /* on a finished event: the request's totals */
    int64_t n_prompt;           /* its prompt's tokens */
    int64_t n_cached;           /* of those, found in the prefix cache at its first admission */
    int64_t n_generated;
} st_engine_event;

/* The oldest event not yet taken into *ev, or false when none. The pointers in *ev stay
 * valid until the next st_engine_poll, st_engine_step or st_engine_free. A request's
 * memory is released once its finished event has been taken. */
bool st_engine_poll(st_engine *e, st_engine_event *ev);

/* ---- counters ------------------------------------------------------------------------- */

typedef struct st_engine_stats {
    int32_t n_running, n_waiting;
    int64_t n_blocks;
    int64_t blocks_used;         /* held by sequences */
    int64_t blocks_cached;       /* held by nobody, kept for the prefix cache (evictable) */
    int64_t blocks_free;
    int64_t requests_added, requests_finished;
    int64_t tokens_in;           /* prompt tokens of the requests added */
    int64_t tokens_out;          /* tokens generated */
    /* where they were sampled: from a row's candidates on the host (greedy, top-k of at
     * most the candidates, and top-p the candidates settle), by the backend from the whole
     * row (the other chains), or from the whole row on the host (the CPU's way; on a GPU,
     * the slow one) */
    int64_t tokens_from_candidates, tokens_drawn, tokens_from_rows;
    int64_t rows_drawn_late;     /* rows drawn from on the backend after a step: candidates
                                    that did not settle a top-p cut (those tokens count as
                                    drawn) */
    int64_t prompt_tokens_cached;/* prompt tokens taken from the prefix cache (first admissions) */
    int64_t cache_hit_tokens;    /* tokens taken from the prefix cache at every admission
                                    (re-admissions after pre-emption included) */
    int64_t prefill_tokens;      /* tokens computed in prompt chunks (recomputation included) */
    int64_t decode_tokens;       /* tokens computed as decode tokens */
    int64_t preemptions, block_copies, evictions, steps;
    double prompt_seconds, generation_seconds; /* busy time, split by tokens */
    double prompt_tokens_per_s, generation_tokens_per_s;
} st_engine_stats;

void st_engine_get_stats(const st_engine *e, st_engine_stats *out);

/* Checks the engine's invariants: every block's reference count equals the number of
 * running sequences that hold it, the manager's lists and counts agree, rows and queues
 * are consistent. ST_ERROR_INVALID naming the first broken one. For tests and debugging:
 * O(n_blocks + requests). */
st_status st_engine_check(const st_engine *e, st_error *err);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_ENGINE_H */
