/*
 * The preset table: the shapes of real models as their Hugging Face config.json states
 * them (hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
 * head_dim, intermediate_size, rope_theta, rms_norm_eps, max_position_embeddings,
 * tie_word_embeddings, ...), and tiny models of each architecture for tests.
 */
#include <string.h>

#include "stride/synth.h"

/* clang-format off */
static const st_synth_preset presets[] = {
    /* meta-llama/Llama-3.2-1B: rope_scaling llama3 (factor 32, low 1, high 4, original
     * 8192) -> rope_freqs.weight [32] */
    {.name = "llama-3.2-1b", .description = "Llama-3.2-1B shapes (llama, GQA 32/8, tied output)",
     .arch = ST_ARCH_LLAMA, .n_vocab = 128256, .n_embd = 2048, .n_layer = 16, .n_head = 32,
     .n_head_kv = 8, .head_dim = 64, .n_ff = 8192, .n_rot = 64, .n_ctx_train = 131072,
     .rope_freq_base = 500000.0, .rms_eps = 1e-5, .tied_output = true, .rope_freqs = true,
     .n_ctx_orig = 8192},
    /* Qwen/Qwen3-1.7B */
    {.name = "qwen3-1.7b", .description = "Qwen3-1.7B shapes (qwen3, q/k norm, tied output)",
     .arch = ST_ARCH_QWEN3, .n_vocab = 151936, .n_embd = 2048, .n_layer = 28, .n_head = 16,
     .n_head_kv = 8, .head_dim = 128, .n_ff = 6144, .n_rot = 128, .n_ctx_train = 40960,
     .rope_freq_base = 1000000.0, .rms_eps = 1e-6, .tied_output = true},
    /* Qwen/Qwen3-8B */
    {.name = "qwen3-8b", .description = "Qwen3-8B shapes (qwen3, q/k norm, own output.weight)",
     .arch = ST_ARCH_QWEN3, .n_vocab = 151936, .n_embd = 4096, .n_layer = 36, .n_head = 32,
     .n_head_kv = 8, .head_dim = 128, .n_ff = 12288, .n_rot = 128, .n_ctx_train = 40960,
     .rope_freq_base = 1000000.0, .rms_eps = 1e-6, .tied_output = false},
    /* Qwen/Qwen3-32B (published in BF16): more than one H200 decodes at once, the shape the
     * tensor parallel benchmark splits (stride synth qwen3-32b --type bf16: about 65.5 GB) */
    {.name = "qwen3-32b", .description = "Qwen3-32B shapes (qwen3, GQA 64/8, q/k norm, own output.weight; BF16 upstream)",
     .arch = ST_ARCH_QWEN3, .n_vocab = 151936, .n_embd = 5120, .n_layer = 64, .n_head = 64,
     .n_head_kv = 8, .head_dim = 128, .n_ff = 25600, .n_rot = 128, .n_ctx_train = 40960,
     .rope_freq_base = 1000000.0, .rms_eps = 1e-6, .tied_output = false},
    /* google/gemma-3-1b-pt: sliding_window 512, sliding_window_pattern 6,
     * rope_local_base_freq 10000 */
    {.name = "gemma-3-1b", .description = "Gemma-3-1B shapes (gemma3, MQA, 5 sliding : 1 global)",
     .arch = ST_ARCH_GEMMA3, .n_vocab = 262144, .n_embd = 1152, .n_layer = 26, .n_head = 4,
     .n_head_kv = 1, .head_dim = 256, .n_ff = 6912, .n_rot = 256, .n_ctx_train = 32768,
     .rope_freq_base = 1000000.0, .rope_freq_base_swa = 10000.0, .rms_eps = 1e-6,
     .sliding_window = 512, .sliding_window_pattern = 6, .tied_output = true},
    /* google/gemma-3-270m */
    {.name = "gemma-3-270m", .description = "Gemma-3-270M shapes (gemma3, MQA, 5 sliding : 1 global)",
     .arch = ST_ARCH_GEMMA3, .n_vocab = 262144, .n_embd = 640, .n_layer = 18, .n_head = 4,
     .n_head_kv = 1, .head_dim = 256, .n_ff = 2048, .n_rot = 256, .n_ctx_train = 32768,
     .rope_freq_base = 1000000.0, .rope_freq_base_swa = 10000.0, .rms_eps = 1e-6,
     .sliding_window = 512, .sliding_window_pattern = 6, .tied_output = true},
    /* microsoft/Phi-4-mini-instruct (published in BF16): partial_rotary_factor 0.75 ->
     * 96 rotary dims, longrope factors [48], original context 4096. Its config's
     * sliding_window (262144) is what the converter writes; llama.cpp ignores it for phi3,
     * and it exceeds the context, so every layer is effectively global. */
    {.name = "phi-4-mini", .description = "Phi-4-mini shapes (phi3, fused qkv and gate_up, partial rotary; BF16 upstream)",
     .arch = ST_ARCH_PHI3, .n_vocab = 200064, .n_embd = 3072, .n_layer = 32, .n_head = 24,
     .n_head_kv = 8, .head_dim = 128, .n_ff = 8192, .n_rot = 96, .n_ctx_train = 131072,
     .rope_freq_base = 10000.0, .rms_eps = 1e-5, .sliding_window = 262144,
     .tied_output = true, .long_rope = true, .n_ctx_orig = 4096},
    /* allenai/OLMoE-1B-7B-0924: 64 experts, 8 used, intermediate_size 1024 per expert */
    {.name = "olmoe-1b-7b", .description = "OLMoE-1B-7B shapes (olmoe, 64 experts top-8, own output.weight)",
     .arch = ST_ARCH_OLMOE, .n_vocab = 50304, .n_embd = 2048, .n_layer = 16, .n_head = 16,
     .n_head_kv = 16, .head_dim = 128, .n_ff = 1024, .n_expert = 64, .n_expert_used = 8,
     .n_rot = 128, .n_ctx_train = 4096, .rope_freq_base = 10000.0, .rms_eps = 1e-5,
     .tied_output = false},

    /* Tiny models for tests: GQA where the architecture allows it, every feature of the
     * real preset present (rope_freqs with all three llama3 regimes, sliding and global
     * layers, partial rotary with long rope, experts). */
    {.name = "tiny-llama", .description = "tiny llama for tests (GQA 4/2, rope_freqs, own output.weight)",
     .arch = ST_ARCH_LLAMA, .n_vocab = 512, .n_embd = 64, .n_layer = 2, .n_head = 4,
     .n_head_kv = 2, .head_dim = 16, .n_ff = 128, .n_rot = 16, .n_ctx_train = 16384,
     .rope_freq_base = 500000.0, .rms_eps = 1e-5, .tied_output = false, .rope_freqs = true,
     .n_ctx_orig = 1024},
    {.name = "tiny-qwen3", .description = "tiny qwen3 for tests (GQA 4/2, q/k norm, tied output)",
     .arch = ST_ARCH_QWEN3, .n_vocab = 512, .n_embd = 64, .n_layer = 2, .n_head = 4,
     .n_head_kv = 2, .head_dim = 16, .n_ff = 128, .n_rot = 16, .n_ctx_train = 4096,
     .rope_freq_base = 1000000.0, .rms_eps = 1e-6, .tied_output = true},
    {.name = "tiny-gemma3", .description = "tiny gemma3 for tests (GQA 4/2, window 32, every 2nd layer global)",
     .arch = ST_ARCH_GEMMA3, .n_vocab = 512, .n_embd = 64, .n_layer = 4, .n_head = 4,
     .n_head_kv = 2, .head_dim = 16, .n_ff = 128, .n_rot = 16, .n_ctx_train = 256,
     .rope_freq_base = 1000000.0, .rope_freq_base_swa = 10000.0, .rms_eps = 1e-6,
     .sliding_window = 32, .sliding_window_pattern = 2, .tied_output = true},
    {.name = "tiny-phi3", .description = "tiny phi3 for tests (GQA 4/2, fused qkv/gate_up, 12 of 16 dims rotary, long rope)",
     .arch = ST_ARCH_PHI3, .n_vocab = 512, .n_embd = 64, .n_layer = 2, .n_head = 4,
     .n_head_kv = 2, .head_dim = 16, .n_ff = 128, .n_rot = 12, .n_ctx_train = 4096,
     .rope_freq_base = 10000.0, .rms_eps = 1e-5, .tied_output = true, .long_rope = true,
     .n_ctx_orig = 512},
    /* The real models' head_dim (64, 128) at test size: the split-KV decode kernel and the
     * tensor-core prefill take only 64, 128 and 256, which the tiny presets above (16) do
     * not reach, so the GPU models stage runs those kernels whole through these. */
    {.name = "tiny-llama-hd64", .description = "tiny llama for tests with head_dim 64 (GQA 8/2)",
     .arch = ST_ARCH_LLAMA, .n_vocab = 512, .n_embd = 256, .n_layer = 2, .n_head = 8,
     .n_head_kv = 2, .head_dim = 64, .n_ff = 512, .n_rot = 64, .n_ctx_train = 4096,
     .rope_freq_base = 500000.0, .rms_eps = 1e-5, .tied_output = false},
    {.name = "tiny-qwen3-hd128", .description = "tiny qwen3 for tests with head_dim 128 (GQA 4/2, q/k norm)",
     .arch = ST_ARCH_QWEN3, .n_vocab = 512, .n_embd = 256, .n_layer = 2, .n_head = 4,
     .n_head_kv = 2, .head_dim = 128, .n_ff = 512, .n_rot = 128, .n_ctx_train = 4096,
     .rope_freq_base = 1000000.0, .rms_eps = 1e-6, .tied_output = true},
    /* The decode products' widths (rows of 2,048 elements): the block-a-row kernels
     * (cuda_gemv_rowblock.cu) take only K a multiple of 2,048, which no preset above reaches,
     * so the GPU models stage runs them (the q/k/v, o and down products of each decode
     * step) through this one. */
    {.name = "tiny-qwen3-wide", .description = "tiny qwen3 for tests with rows of 2,048 (GQA 16/8, q/k norm)",
     .arch = ST_ARCH_QWEN3, .n_vocab = 512, .n_embd = 2048, .n_layer = 2, .n_head = 16,
     .n_head_kv = 8, .head_dim = 128, .n_ff = 2048, .n_rot = 128, .n_ctx_train = 4096,
     .rope_freq_base = 1000000.0, .rms_eps = 1e-6, .tied_output = true},
    /* Four KV heads (GQA 8/4, n_embd = 8 heads of 16, as llama.cpp's phi3 graph assumes), so
     * that -tp 2 and -tp 4 split them (tensor parallelism takes whole KV heads): the tests
     * compare each split with the whole model. */
    {.name = "tiny-llama-kv4", .description = "tiny llama for -tp tests (GQA 8/4, rope_freqs, own output.weight)",
     .arch = ST_ARCH_LLAMA, .n_vocab = 512, .n_embd = 128, .n_layer = 2, .n_head = 8,
     .n_head_kv = 4, .head_dim = 16, .n_ff = 256, .n_rot = 16, .n_ctx_train = 16384,
     .rope_freq_base = 500000.0, .rms_eps = 1e-5, .tied_output = false, .rope_freqs = true,
     .n_ctx_orig = 1024},
    {.name = "tiny-qwen3-kv4", .description = "tiny qwen3 for -tp tests (GQA 8/4, q/k norm, tied output)",
     .arch = ST_ARCH_QWEN3, .n_vocab = 512, .n_embd = 128, .n_layer = 2, .n_head = 8,
     .n_head_kv = 4, .head_dim = 16, .n_ff = 256, .n_rot = 16, .n_ctx_train = 4096,
     .rope_freq_base = 1000000.0, .rms_eps = 1e-6, .tied_output = true},
    {.name = "tiny-gemma3-kv4", .description = "tiny gemma3 for -tp tests (GQA 8/4, window 32, every 2nd layer global)",
     .arch = ST_ARCH_GEMMA3, .n_vocab = 512, .n_embd = 128, .n_layer = 4, .n_head = 8,
     .n_head_kv = 4, .head_dim = 16, .n_ff = 256, .n_rot = 16, .n_ctx_train = 256,
     .rope_freq_base = 1000000.0, .rope_freq_base_swa = 10000.0, .rms_eps = 1e-6,
     .sliding_window = 32, .sliding_window_pattern = 2, .tied_output = true},
    {.name = "tiny-phi3-kv4", .description = "tiny phi3 for -tp tests (GQA 8/4, fused qkv/gate_up, 12 of 16 dims rotary, long rope)",
     .arch = ST_ARCH_PHI3, .n_vocab = 512, .n_embd = 128, .n_layer = 2, .n_head = 8,
     .n_head_kv = 4, .head_dim = 16, .n_ff = 256, .n_rot = 12, .n_ctx_train = 4096,
     .rope_freq_base = 10000.0, .rms_eps = 1e-5, .tied_output = true, .long_rope = true,
     .n_ctx_orig = 512},
    /* llama.cpp's olmoe creates attn_k_norm with n_embd elements, so K/V heads must
     * equal Q heads (as in OLMoE itself) for the file to load there. */
    {.name = "tiny-olmoe", .description = "tiny olmoe for tests (8 experts top-2, own output.weight)",
     .arch = ST_ARCH_OLMOE, .n_vocab = 512, .n_embd = 64, .n_layer = 2, .n_head = 4,
     .n_head_kv = 4, .head_dim = 16, .n_ff = 32, .n_expert = 8, .n_expert_used = 2,
     .n_rot = 16, .n_ctx_train = 4096, .rope_freq_base = 10000.0, .rms_eps = 1e-5,
     .tied_output = false},
    /* rows of 2,048 and an expert unit of 1,024: one token's expert products take the
     * block-a-row kernels (cuda_moe_rowblock.cu), as olmoe-1b-7b's do */
    {.name = "tiny-olmoe-wide", .description = "tiny olmoe for tests with rows of 2,048 (4 experts top-2)",
     .arch = ST_ARCH_OLMOE, .n_vocab = 512, .n_embd = 2048, .n_layer = 2, .n_head = 16,
     .n_head_kv = 16, .head_dim = 128, .n_ff = 1024, .n_expert = 4, .n_expert_used = 2,
     .n_rot = 128, .n_ctx_train = 4096, .rope_freq_base = 10000.0, .rms_eps = 1e-5,
     .tied_output = false},
};
/* clang-format on */

#define N_PRESETS (sizeof(presets) / sizeof(presets[0]))

uint64_t st_synth_n_presets(void) { return N_PRESETS; }

const st_synth_preset *st_synth_get_preset(uint64_t i) { return i < N_PRESETS ? &presets[i] : NULL; }

const st_synth_preset *st_synth_find_preset(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < N_PRESETS; i++)
        if (strcmp(presets[i].name, name) == 0) return &presets[i];
    return NULL;
}
