/*
 * Writing a synthetic model: the tensor list of each architecture (llama.cpp's names and
 * shapes), its metadata (the keys llama.cpp's converter writes), and random weights
 * streamed in chunks so memory use does not depend on the model's size.
 *
 * Weights. Every tensor has its own random stream: element i of tensor T is a pure
 * function of (seed, name of T, i) (splitmix64 on a counter), so the file does not depend
 * on the tensor order or the chunk size, and a chunk can be filled in parallel.
 *   - matrices (ne = {K, N[, E]}): uniform(-a, a) with a = sqrt(3/K), variance 1/K, so
 *     y = W x of a unit-scale x is unit-scale again;
 *   - token_embd ({n_embd, n_vocab}) and the untied output ({n_embd, n_vocab}) are drawn
 *     the same way with K = n_embd, std 1/sqrt(n_embd) (about what trained models have:
 *     0.022 for n_embd 2048): tied logits h . e come out unit-scale, and gemma3's
 *     sqrt(n_embd) input scaling brings the embeddings to unit scale;
 *   - RMSNorm weights: 1 + uniform(-0.1, 0.1). Also for gemma3: llama.cpp's converter
 *     adds the 1 of Gemma's (1 + w) norm to the stored weight, so a GGUF file holds
 *     values near 1 and the runtime multiplies by them as they are;
 *   - rope factors are computed, not random (see fill_rope_factors).
 * Matrices and embeddings are written in the requested type: f32, f16 or bf16 rounded from
 * those values, or q8_0 quantized from them (st_quant_quantize_row_q8_0), so that a q8_0
 * file holds the f16 file's weights to within half a quantization step.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stride/quant.h"
#include "synth_internal.h"

/* Elements generated per chunk: 4 MiB of floats, at most 4 MiB written per call. */
#define CHUNK_ELEMS ((size_t)1 << 20)

/* ---- tensor list ------------------------------------------------------------------- */

/* The preset's tensors are its architecture's descriptor (arch.h): every entry the forward
 * pass requires (of two alternative forms, the first: phi3's fused attn_qkv), and the
 * optional ones whose feature the preset has, in the descriptor's (the converter's) order,
 * with the shapes the descriptor computes from the preset's sizes. Types: f32 for entries
 * read as f32 (norms, rope factors) and for the MoE router (the converter keeps it f32), the
 * requested weight type for the rest. */

static bool has_feature(const st_synth_preset *p, st_arch_feature f) {
    switch (f) {
    case ST_FEATURE_NONE: return true;
    case ST_FEATURE_UNTIED_OUTPUT: return !p->tied_output;
    case ST_FEATURE_ROPE_FREQS: return p->rope_freqs;
    case ST_FEATURE_LONG_ROPE: return p->long_rope;
    }
    return false;
}

static bool written(const st_synth_preset *p, const st_arch_tensor *e) {
    switch (e->need) {
    case ST_NEED_REQUIRED: return e->alt <= 1;
    case ST_NEED_OPTIONAL: return has_feature(p, e->feature);
    case ST_NEED_UNUSED: return false;
    }
    return false;
}

static st_synth_fill fill_of(const st_arch_tensor *e) {
    switch (e->kind) {
    case ST_TENSOR_ROPE_FREQS: return ST_SYNTH_FILL_ROPE_FREQS;
    case ST_TENSOR_ROPE_FACTORS_LONG: return ST_SYNTH_FILL_ROPE_LONG;
    case ST_TENSOR_ROPE_FACTORS_SHORT: return ST_SYNTH_FILL_ROPE_SHORT;
    default: return e->role == ST_ROLE_NORM ? ST_SYNTH_FILL_NORM : ST_SYNTH_FILL_MATRIX;
    }
}

static void make_tensor(const st_arch_tensor *e, int64_t layer, const int64_t dims[ST_DIM_COUNT], st_type wtype,
                        st_synth_tensor *t) {
    memset(t, 0, sizeof(*t));
    int len = st_arch_tensor_name(e, layer, t->name, sizeof(t->name));
    ST_ASSERT(len > 0 && len < (int)sizeof(t->name));
    t->type = e->types == ST_ARCH_TYPES_F32 || e->role == ST_ROLE_ROUTER ? ST_TYPE_F32 : wtype;
    t->n_dims = e->n_dims;
    for (unsigned d = 0; d < 3; d++) t->ne[d] = d < e->n_dims ? dims[e->ne[d]] : 1;
    t->fill = fill_of(e);
}

static st_status check_preset(const st_synth_preset *p, st_error *err) {
    const char *bad = NULL;
    if (p->arch <= ST_ARCH_UNKNOWN || p->arch >= ST_ARCH_COUNT) bad = "unknown architecture";
    else if (p->n_vocab <= ST_SYNTH_N_FIXED_TOKENS) bad = "n_vocab must exceed the 259 special and byte tokens";
    else if (p->n_embd <= 0 || p->n_layer <= 0 || p->n_ff <= 0 || p->head_dim <= 0) bad = "non-positive size";
    else if (p->n_head <= 0 || p->n_head_kv <= 0 || p->n_head % p->n_head_kv != 0) bad = "bad head counts";
    else if (p->n_rot <= 0 || p->n_rot > p->head_dim || p->n_rot % 2 != 0) bad = "bad rotary dimension count";
    else if ((p->arch == ST_ARCH_OLMOE) != (p->n_expert > 0)) bad = "experts are for olmoe only";
    else if (p->n_expert > 0 && (p->n_expert_used <= 0 || p->n_expert_used > p->n_expert)) bad = "bad expert counts";
    else if ((p->rope_freqs || p->long_rope) && p->n_ctx_orig <= 0) bad = "rope scaling without n_ctx_orig";
    else if (p->arch == ST_ARCH_GEMMA3 && (p->sliding_window <= 0 || p->sliding_window_pattern <= 0))
        bad = "gemma3 needs a sliding window and pattern";
    if (bad) return st_error_set(err, ST_ERROR_INVALID, "synth: preset '%s': %s", p->name, bad);
    return ST_OK;
}

st_status st_synth_build_tensors(const st_synth_preset *p, st_type weight_type,
                                 st_synth_tensor **out, uint64_t *n_out, st_error *err) {
    *out = NULL;
    *n_out = 0;
    st_status st = check_preset(p, err);
    if (st) return st;
    const st_arch_sizes sz = {.n_vocab = p->n_vocab, .n_embd = p->n_embd, .n_head = p->n_head,
                              .n_head_kv = p->n_head_kv, .head_dim = p->head_dim, .n_ff = p->n_ff,
                              .n_expert = p->n_expert, .n_rot = p->n_rot};
    int64_t dims[ST_DIM_COUNT];
    if (!st_arch_dims(&sz, dims))
        return st_error_set(err, ST_ERROR_INVALID, "synth: preset '%s': sizes overflow", p->name);
    size_t n_entries;
    const st_arch_tensor *tab = st_arch_tensors(p->arch, &n_entries);
    size_t first_layer = 0, end_layer = 0; /* the per-layer entries are [first_layer, end_layer) */
    while (first_layer < n_entries && !st_arch_tensor_per_layer(&tab[first_layer])) first_layer++;
    end_layer = first_layer;
    while (end_layer < n_entries && st_arch_tensor_per_layer(&tab[end_layer])) end_layer++;
    uint64_t n_t = 0, per_layer = 0;
    for (size_t i = 0; i < n_entries; i++)
        if (written(p, &tab[i])) {
            if (st_arch_tensor_per_layer(&tab[i])) per_layer++;
            else n_t++;
        }
    n_t += per_layer * (uint64_t)p->n_layer;
    st_synth_tensor *t = malloc((size_t)n_t * sizeof(*t));
    if (!t) return st_error_set(err, ST_ERROR_NOMEM, "synth: out of memory for the tensor list");
    uint64_t k = 0;
    for (size_t i = 0; i < first_layer; i++) /* the converter's computed tensors, token_embd */
        if (written(p, &tab[i])) make_tensor(&tab[i], -1, dims, weight_type, &t[k++]);
    for (int64_t il = 0; il < p->n_layer; il++)
        for (size_t i = first_layer; i < end_layer; i++)
            if (written(p, &tab[i])) make_tensor(&tab[i], il, dims, weight_type, &t[k++]);
    for (size_t i = end_layer; i < n_entries; i++) /* output_norm, output */
        if (written(p, &tab[i])) make_tensor(&tab[i], -1, dims, weight_type, &t[k++]);
    ST_ASSERT(k == n_t); /* the descriptor lists a layer's entries together */
    *out = t;
    *n_out = n_t;
    return ST_OK;
}

static uint64_t tensor_nelements(const st_synth_tensor *t) {
    return (uint64_t)t->ne[0] * (uint64_t)t->ne[1] * (uint64_t)t->ne[2];
}

/* Bytes of a tensor in its type (whole blocks: a q8_0 row is a multiple of 32 values). */
static uint64_t tensor_bytes(const st_synth_tensor *t) {
    const st_type_traits *tr = st_type_get_traits((uint32_t)t->type);
    return tensor_nelements(t) / (uint64_t)tr->block_size * (uint64_t)tr->block_bytes;
}

void st_synth_preset_size(const st_synth_preset *p, st_type weight_type, uint64_t *n_tensors,
                          uint64_t *n_bytes) {
    st_synth_tensor *t = NULL;
    uint64_t n = 0, bytes = 0;
    if (st_synth_build_tensors(p, weight_type, &t, &n, NULL) == ST_OK)
        for (uint64_t i = 0; i < n; i++) bytes += tensor_bytes(&t[i]);
    free(t);
    if (n_tensors) *n_tensors = n;
    if (n_bytes) *n_bytes = bytes;
}

/* ---- metadata ---------------------------------------------------------------------- */

static uint32_t file_type_of(st_type t) {
    switch (t) {
    case ST_TYPE_F16: return 1;   /* LLAMA_FTYPE_MOSTLY_F16 */
    case ST_TYPE_BF16: return 32; /* LLAMA_FTYPE_MOSTLY_BF16 */
    case ST_TYPE_Q8_0: return 7;  /* LLAMA_FTYPE_MOSTLY_Q8_0 */
    default: return 0;            /* LLAMA_FTYPE_ALL_F32 */
    }
}

#define TRY(expr)                                                                              \
    do {                                                                                       \
        st_status st_ = (expr);                                                                \
        if (st_ != ST_OK) return st_;                                                          \
    } while (0)

static st_status set_u32(st_gguf_writer *w, const char *arch, const char *key, int64_t v, st_error *err) {
    char k[128];
    snprintf(k, sizeof(k), "%s.%s", arch, key);
    ST_ASSERT(v >= 0 && v <= UINT32_MAX);
    return st_gguf_writer_set_u32(w, k, (uint32_t)v, err);
}

static st_status set_f32(st_gguf_writer *w, const char *arch, const char *key, double v, st_error *err) {
    char k[128];
    snprintf(k, sizeof(k), "%s.%s", arch, key);
    return st_gguf_writer_set_f32(w, k, (float)v, err);
}

/* The keys of llama.cpp's converter (gguf-py Keys). Notes per architecture:
 * - gemma3: llama.cpp hard-codes the pattern (6) and the local rope base (10000); we also
 *   write gguf-py's generic keys attention.sliding_window_pattern (u32: every Nth layer is
 *   global) and rope.freq_base_swa so that a reader needs no per-model table.
 * - phi3: rope.scaling.attn_factor = sqrt(1 + ln(s) / ln(n_ctx_orig)), s = n_ctx / n_ctx_orig,
 *   as the converter computes it for longrope.
 * - olmoe: the per-expert width is feed_forward_length (llama.cpp reads n_ff for olmoe's
 *   expert tensors). */
static st_status write_metadata(st_gguf_writer *w, const st_synth_preset *p, st_type wtype, st_error *err) {
    const char *a = st_arch_name(p->arch);
    TRY(st_gguf_writer_set_str(w, "general.architecture", a, err));
    TRY(st_gguf_writer_set_str(w, "general.name", p->name, err));
    TRY(set_u32(w, a, "context_length", p->n_ctx_train, err));
    TRY(set_u32(w, a, "embedding_length", p->n_embd, err));
    TRY(set_u32(w, a, "block_count", p->n_layer, err));
    TRY(set_u32(w, a, "feed_forward_length", p->n_ff, err));
    TRY(set_u32(w, a, "attention.head_count", p->n_head, err));
    TRY(set_u32(w, a, "attention.head_count_kv", p->n_head_kv, err));
    TRY(set_f32(w, a, "rope.freq_base", p->rope_freq_base, err));
    TRY(set_f32(w, a, "attention.layer_norm_rms_epsilon", p->rms_eps, err));
    TRY(set_u32(w, a, "attention.key_length", p->head_dim, err));
    TRY(set_u32(w, a, "attention.value_length", p->head_dim, err));
    TRY(set_u32(w, a, "rope.dimension_count", p->n_rot, err));
    TRY(set_u32(w, a, "vocab_size", p->n_vocab, err));
    if (p->arch == ST_ARCH_GEMMA3) {
        TRY(set_u32(w, a, "attention.sliding_window", p->sliding_window, err));
        TRY(set_u32(w, a, "attention.sliding_window_pattern", p->sliding_window_pattern, err));
        TRY(set_f32(w, a, "rope.freq_base_swa", p->rope_freq_base_swa, err));
    }
    if (p->arch == ST_ARCH_PHI3) {
        TRY(set_u32(w, a, "attention.sliding_window", p->sliding_window, err));
        if (p->long_rope) {
            double s = (double)p->n_ctx_train / (double)p->n_ctx_orig;
            double attn_factor = s > 1.0 ? sqrt(1.0 + log(s) / log((double)p->n_ctx_orig)) : 1.0;
            TRY(set_u32(w, a, "rope.scaling.original_context_length", p->n_ctx_orig, err));
            TRY(set_f32(w, a, "rope.scaling.attn_factor", attn_factor, err));
        }
    }
    if (p->n_expert > 0) {
        TRY(set_u32(w, a, "expert_count", p->n_expert, err));
        TRY(set_u32(w, a, "expert_used_count", p->n_expert_used, err));
    }
    TRY(st_gguf_writer_set_u32(w, "general.file_type", file_type_of(wtype), err));
    return st_synth_write_vocab(w, p, err);
}

/* ---- values ------------------------------------------------------------------------ */

static uint64_t mix64(uint64_t z) { /* splitmix64's finalizer */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static uint64_t tensor_key(uint64_t seed, const char *name) {
    uint64_t h = 0xCBF29CE484222325ULL; /* FNV-1a */
    for (const char *c = name; *c; c++) h = (h ^ (uint8_t)*c) * 0x100000001B3ULL;
    return mix64(seed ^ mix64(h));
}

/* Uniform in [-1, 1): 24 random bits, exact in float. */
static inline float uniform_pm1(uint64_t key, uint64_t i) {
    uint64_t r = mix64(key + (i + 1) * 0x9E3779B97F4A7C15ULL);
    return (float)(r >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

/* llama3 factors, as llama.cpp's converter computes them from the HF rope_scaling:
 * wavelengths shorter than n_ctx_orig/high_freq_factor keep 1, longer than
 * n_ctx_orig/low_freq_factor get the full factor, and the band between is interpolated. */
static float llama3_factor(const st_synth_preset *p, int64_t i) {
    double freq = 1.0 / pow(p->rope_freq_base, (double)(2 * i) / (double)p->n_rot);
    double wavelen = 2.0 * 3.14159265358979323846 / freq;
    double orig = (double)p->n_ctx_orig;
    double low_wavelen = orig / ST_SYNTH_LLAMA3_LOW_FREQ_FACTOR;
    double high_wavelen = orig / ST_SYNTH_LLAMA3_HIGH_FREQ_FACTOR;
    if (wavelen < high_wavelen) return 1.0f;
    if (wavelen > low_wavelen) return (float)ST_SYNTH_LLAMA3_FACTOR;
    double smooth = (orig / wavelen - ST_SYNTH_LLAMA3_LOW_FREQ_FACTOR) /
                    (ST_SYNTH_LLAMA3_HIGH_FREQ_FACTOR - ST_SYNTH_LLAMA3_LOW_FREQ_FACTOR);
    return (float)(1.0 / ((1.0 - smooth) / ST_SYNTH_LLAMA3_FACTOR + smooth));
}

/* Phi long-rope factors are learned per model; these are plausible stand-ins: short
 * factors 1 (no change inside the original context), long factors rising geometrically
 * from 1 at the highest frequency to s = n_ctx / n_ctx_orig at the lowest. */
static float phi3_factor(const st_synth_preset *p, st_synth_fill fill, int64_t i) {
    if (fill == ST_SYNTH_FILL_ROPE_SHORT) return 1.0f;
    int64_t n = p->n_rot / 2;
    double s = (double)p->n_ctx_train / (double)p->n_ctx_orig;
    if (s < 1.0) s = 1.0;
    return (float)pow(s, n > 1 ? (double)i / (double)(n - 1) : 1.0);
}

/* Fills dst[0..n) with elements [first, first + n) of tensor t. */
static void fill_values(const st_synth_preset *p, const st_synth_tensor *t, uint64_t key,
                        uint64_t first, size_t n, float *dst) {
    switch (t->fill) {
    case ST_SYNTH_FILL_MATRIX: {
        const float a = (float)sqrt(3.0 / (double)t->ne[0]);
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
        for (int64_t j = 0; j < (int64_t)n; j++) dst[j] = a * uniform_pm1(key, first + (uint64_t)j);
        break;
    }
    case ST_SYNTH_FILL_NORM:
        for (size_t j = 0; j < n; j++) dst[j] = 1.0f + 0.1f * uniform_pm1(key, first + j);
        break;
    case ST_SYNTH_FILL_ROPE_FREQS:
        for (size_t j = 0; j < n; j++) dst[j] = llama3_factor(p, (int64_t)(first + j));
        break;
    case ST_SYNTH_FILL_ROPE_LONG:
    case ST_SYNTH_FILL_ROPE_SHORT:
        for (size_t j = 0; j < n; j++) dst[j] = phi3_factor(p, t->fill, (int64_t)(first + j));
        break;
    }
}

/* ---- writing ----------------------------------------------------------------------- */

typedef struct stream {
    float *vals;     /* CHUNK_ELEMS */
    uint16_t *half;  /* CHUNK_ELEMS, for F16/BF16; CHUNK_ELEMS / 32 q8_0 blocks (34 B < 64 B) */
    uint64_t done, total;
    const st_synth_options *opt;
} stream;

static st_status write_tensor(st_gguf_writer *w, const st_synth_preset *p, const st_synth_tensor *t,
                              stream *s, st_error *err) {
    const uint64_t key = tensor_key(s->opt->seed, t->name);
    const uint64_t n = tensor_nelements(t);
    for (uint64_t first = 0; first < n; first += CHUNK_ELEMS) {
        if (s->opt->cancel && *s->opt->cancel) return st_error_set(err, ST_ERROR_IO, "cancelled");
        size_t m = (size_t)(n - first < CHUNK_ELEMS ? n - first : CHUNK_ELEMS);
        fill_values(p, t, key, first, m, s->vals);
        const void *bytes = s->vals;
        size_t nbytes = m * sizeof(float);
        if (t->type == ST_TYPE_F16) {
            st_f32_to_f16_row(s->vals, s->half, m);
            bytes = s->half;
            nbytes = m * sizeof(uint16_t);
        } else if (t->type == ST_TYPE_BF16) {
            st_f32_to_bf16_row(s->vals, s->half, m);
            bytes = s->half;
            nbytes = m * sizeof(uint16_t);
        } else if (t->type == ST_TYPE_Q8_0) { /* m: a multiple of 32 (CHUNK_ELEMS and the rows are) */
            st_quant_quantize_row_q8_0(s->vals, s->half, (int64_t)m);
            bytes = s->half;
            const st_type_traits *q8 = st_type_get_traits((uint32_t)ST_TYPE_Q8_0);
            nbytes = m / (size_t)q8->block_size * q8->block_bytes;
        }
        TRY(st_gguf_writer_write_data(w, bytes, nbytes, err));
        s->done += nbytes;
        if (s->opt->progress) s->opt->progress(s->opt->progress_ctx, s->done, s->total);
    }
    return ST_OK;
}

static st_status write_all(st_gguf_writer *w, const st_synth_preset *p, const st_synth_options *opt,
                           const st_synth_tensor *t, uint64_t n_t, st_error *err) {
    TRY(write_metadata(w, p, opt->weight_type, err));
    for (uint64_t i = 0; i < n_t; i++) {
        TRY(st_gguf_writer_add_tensor(w, t[i].name, t[i].type, t[i].n_dims, t[i].ne, err));
    }
    TRY(st_gguf_writer_write_header(w, err));

    stream s = {.opt = opt};
    for (uint64_t i = 0; i < n_t; i++) s.total += tensor_bytes(&t[i]);
    s.vals = malloc(CHUNK_ELEMS * sizeof(float));
    s.half = malloc(CHUNK_ELEMS * sizeof(uint16_t));
    st_status st = ST_OK;
    if (!s.vals || !s.half) st = st_error_set(err, ST_ERROR_NOMEM, "synth: out of memory for the write buffers");
    for (uint64_t i = 0; st == ST_OK && i < n_t; i++) st = write_tensor(w, p, &t[i], &s, err);
    free(s.vals);
    free(s.half);
    return st;
}

bool st_synth_weight_type_ok(st_type t) {
    return t == ST_TYPE_F32 || t == ST_TYPE_F16 || t == ST_TYPE_BF16 || t == ST_TYPE_Q8_0;
}

st_status st_synth_write(const st_synth_preset *p, const st_synth_options *opt, const char *path,
                         st_error *err) {
    ST_ASSERT(p && opt && path);
    st_type wt = opt->weight_type;
    if (!st_synth_weight_type_ok(wt))
        return st_error_set(err, ST_ERROR_INVALID, "synth: weight type %s is not f32, f16, bf16 or q8_0",
                            st_type_name(wt));
    st_synth_tensor *t = NULL;
    uint64_t n_t = 0;
    TRY(st_synth_build_tensors(p, wt, &t, &n_t, err));
    for (uint64_t i = 0; i < n_t; i++) {
        const int64_t block = st_type_get_traits((uint32_t)t[i].type)->block_size;
        if (t[i].ne[0] % block != 0) {
            st_error_set(err, ST_ERROR_INVALID,
                         "synth: preset %s: %s has rows of %lld values, not a multiple of %s's block of %lld",
                         p->name, t[i].name, (long long)t[i].ne[0], st_type_name(t[i].type), (long long)block);
            free(t);
            return ST_ERROR_INVALID;
        }
    }

    st_gguf_writer *w = NULL;
    st_status st = st_gguf_writer_open(path, &w, err);
    if (st == ST_OK) {
        st = write_all(w, p, opt, t, n_t, err);
        if (st == ST_OK)
            st = st_gguf_writer_close(w, err);
        else
            st_gguf_writer_abort(w);
    }
    free(t);
    if (st != ST_OK) st_error_wrap(err, "preset %s", p->name);
    return st;
}
