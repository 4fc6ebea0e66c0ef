/* The engine's state, shared by engine.c (life cycle, requests, counters), engine_step.c
 * (the scheduler and one step) and engine_events.c (the event queue, logits buffers,
 * log-probabilities). */
#ifndef STRIDE_ENGINE_INTERNAL_H
#define STRIDE_ENGINE_INTERNAL_H

#include "kv/kv_blocks.h"
#include "kv/kv_seq.h"
#include "stride/engine.h"
#include "stride/runner.h"

typedef enum req_state {
    REQ_WAITING = 0,
    REQ_RUNNING,
    REQ_FINISHED, /* its finished event is queued or was taken (then it is reaped) */
} req_state;

typedef struct engine_req engine_req;

/* A doubly linked list of requests through their prev/next. */
typedef struct req_list {
    engine_req *head, *tail;
    int64_t n;
} req_list;

/* Where a request's next token comes from in a step. */
typedef enum engine_source {
    SOURCE_CANDIDATES, /* its logits row's largest logits (st_sampler_sample_candidates) */
    SOURCE_TOP_P,      /* its candidates where they settle its top-p cut, else a draw the
                          backend makes after the step (st_sampler_top_p_keep) */
    SOURCE_DRAWN,      /* the token the backend sampled from the whole row
                          (st_sampler_next_draw) */
    SOURCE_WHOLE,      /* the whole row, on the host (st_sampler_sample) */
} engine_source;

struct engine_req {
    int64_t id;
    req_state state;
    engine_req *prev, *next;   /* in waiting, running or finished */
    int32_t *tokens;           /* [cap] the prompt, then the generated tokens */
    int64_t n_tokens, cap;     /* cap grows to at most n_ctx + 1 */
    int64_t n_prompt;          /* the prompt as added */
    int64_t n_computed;        /* tokens whose keys and values are in the cache (running) */
    int64_t n_generated;
    int64_t n_cached;          /* prompt tokens found in the prefix cache at first admission */
    bool admitted;             /* has run once */
    bool sampled;              /* has sampled its first token */
    int64_t max_tokens;
    int32_t *stop;             /* [n_stop] */
    int32_t n_stop;
    st_request_logits logits;
    bool logprobs;
    int32_t top_logprobs;
    st_sampler_params sampling;
    st_sampler *sampler;       /* from the first admission on */
    st_kv_seq seq;
    int32_t row;               /* its row of the block table while running, else -1 */
    int64_t step_n;            /* tokens scheduled in this step (0: none) */
    bool step_decode;          /* scheduled as a decode token */
    engine_source step_source; /* where this step's token comes from (build_batch) */
    bool reap;                 /* its finished event was taken */
    char message[ST_ERROR_MESSAGE_MAX];
};

/* A request that samples in the step (picks[j]: logits row j), where its token comes from,
 * and the token it chose with its log-probabilities. */
typedef struct engine_pick {
    engine_req *r;
    engine_source source;
    int32_t n_keep;     /* SOURCE_TOP_P: the candidates its top-p keeps */
    st_engine_event ev; /* id, token and (asked for) log-probabilities */
    st_status status;   /* of the choice; why says what failed */
    st_error why;
} engine_pick;

/* A queued event: the public one, and the logits buffer it owns. */
typedef struct engine_event {
    st_engine_event ev;
    float *buf;       /* ev.logits, or NULL */
    engine_req *req;  /* of a finished event: reaped after it is taken */
} engine_event;

struct st_engine {
    st_model *model;
    st_kv_pool *pool;
    st_runner *runner;
    st_kv_blocks *bm;
    st_engine_config cfg;
    int32_t max_blocks;        /* blocks of one sequence: ceil(n_ctx / 64) */
    int64_t n_vocab;
    int64_t next_id;
    req_list waiting, running, finished;
    engine_req **rows;         /* [n_parallel] the running request of each row, or NULL */
    /* one step's batch */
    int32_t *b_tokens, *b_pos, *b_seq, *b_out; /* [max_batch_tokens] */
    int32_t *b_full;        /* [max_batch_tokens] logits rows whose whole row the step needs */
    st_row_draw *b_draw;    /* [max_batch_tokens] the backend's draws, by logits row */
    st_row_draw *b_late_draw; /* [max_batch_tokens] the draws after the step, by logits row */
    int32_t n_candidates;   /* the runner's candidates a row (0: whole rows only) */
    int32_t *table;            /* [n_parallel][max_blocks] */
    engine_req **sched;        /* [n_parallel] the step's requests (in batch order once built) */
    engine_req **order;        /* [n_parallel] scratch for the reordering */
    int32_t n_sched;
    engine_pick *picks;        /* [n_parallel] the step's sampling requests, in batch order */
    /* events */
    engine_event *events;      /* ring of ev_cap */
    int64_t ev_head, ev_n, ev_cap;
    float **spare;             /* logits buffers to reuse */
    int64_t n_spare, spare_cap;
    float *taken;              /* the buffer of the event last polled */
    /* counters */
    st_engine_stats stats;
};

/* ---- engine.c ---- */

void req_list_push_back(req_list *l, engine_req *r);
void req_list_push_front(req_list *l, engine_req *r);
void req_list_remove(req_list *l, engine_req *r);

/* Takes r off its queue and gives its blocks and row back; with `event`, queues its
 * finished event without a token (token -1), else the caller queued one. */
st_status engine_finish(st_engine *e, engine_req *r, st_finish_reason reason, const char *message, bool event,
                        st_error *err);
/* Frees the finished requests whose finished event was taken. */
void engine_reap(st_engine *e);
/* Creates r's sampler (its prompt in the penalty history) unless it has one. */
st_status engine_req_start(st_engine *e, engine_req *r, st_error *err);
/* Appends a generated token to r->tokens, growing it. */
st_status engine_req_append(st_engine *e, engine_req *r, int32_t token, st_error *err);

/* ---- engine_events.c ---- */

/* Queues ev of request r; with logits ([n_vocab], or NULL) a copy travels with it. */
st_status engine_event_push(st_engine *e, engine_req *r, const st_engine_event *ev, const float *logits,
                            st_error *err);
/* The totals of a finished event. */
void engine_event_totals(const engine_req *r, st_engine_event *ev);
/* log p(token) and the top n of the softmax of logits [n_vocab] into ev. */
void engine_logprobs(const float *logits, int64_t n_vocab, int32_t token, int32_t n_top, st_engine_event *ev);
/* The same from a row's k largest logits (descending, ties to the lower id) and its
 * log-sum-exp; token must be one of them and n_top <= k. */
void engine_logprobs_candidates(const int32_t *ids, const float *vals, int32_t k, float lse, int32_t token,
                                int32_t n_top, st_engine_event *ev);
/* Gives back the buffer of the event last polled. */
void engine_events_release_taken(st_engine *e);
void engine_events_free(st_engine *e);

#endif
