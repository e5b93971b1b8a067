/*
 * Model architectures: built-in presets with their published hyper-parameters, validation of any
 * struct moe_model_cfg, and exact parameter counts.
 *
 * Presets copy each model's public HuggingFace config.json (the matching files are committed under
 * tests/data/hf/ and a test checks that reading them gives these structs). seq_length is the usual
 * training length: 4096 for the MoE models, as in the Megatron-Bridge and ModelZoo runs of
 * reference/published_runs.md, and Llama 3's 8192. Megatron-only fields take Megatron's defaults
 * (make_vocab_size_divisible_by 128); MLA presets set kv_channels = v_head_dim (128), as the
 * Megatron DeepSeek-V3 / Kimi-K2 launch scripts pass --kv-channels 128.
 *
 * Parameter counts follow the module structure of Megatron-Core (and the HF checkpoints, which hold
 * the same tensors): per decoder layer an input RMSNorm, the attention block, a pre-MLP RMSNorm and
 * the MLP (dense, or router + routed experts + shared experts); a final norm; the input embedding
 * and, when untied, the output layer; per MTP layer (Megatron's MultiTokenPredictionLayer) enorm,
 * hnorm, the eh projection [2h -> h], a final norm and one transformer layer shaped like the last
 * decoder layer, sharing the embedding and output layer. The vocabulary is padded as Megatron pads
 * it. Not counted (each under 1e-5 of its model): Qwen2-MoE's q/k/v biases and shared-expert gate,
 * GPT-OSS's per-head attention sinks (one float per head and layer). The router's expert bias
 * (DeepSeek's e_score_correction_bias) is counted; it is a checkpoint tensor.
 *
 * This module does no I/O. Letters: see model/config.h.
 */
#include "model/config.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/*
 * Upper bounds for validation. Each is several times the largest public model's value, so that a
 * typo (an extra zero, a byte count for a token count) is refused instead of producing a plan:
 * hidden 65536 (largest public: 18432, PaLM-540B / 16384, Llama-3-405B), FFN 1 Mi, heads 1024,
 * head dim 4096, vocabulary 4 Mi (largest public: 262144, Gemma 3), sequence 16 Mi tokens
 * (largest public context: 10 Mi, Llama 4 Scout).
 */
enum {
    MOE_CFG_MAX_HIDDEN = 65536,
    MOE_CFG_MAX_FFN = 1 << 20,
    MOE_CFG_MAX_HEADS = 1024,
    MOE_CFG_MAX_HEAD_DIM = 4096,
    MOE_CFG_MAX_VOCAB = 1 << 22,
    MOE_CFG_MAX_SEQ = 1 << 24,
    MOE_CFG_MAX_VOCAB_DIVISOR = 1 << 16,
    MOE_CFG_DEFAULT_VOCAB_DIVISOR = 128, /* Megatron-LM --make-vocab-size-divisible-by default */
};

/* ---------------------------------------------------------------------------------------------- */
/* Preset layer patterns, built at compile time so the preset table can be const. */

#define MOE_M      MOE_LAYER_MOE
#define MOE_WM     (MOE_LAYER_MOE | MOE_LAYER_WINDOWED)
#define MOE_R2(x)  x, x
#define MOE_R4(x)  MOE_R2(x), MOE_R2(x)
#define MOE_R8(x)  MOE_R4(x), MOE_R4(x)
#define MOE_R16(x) MOE_R8(x), MOE_R8(x)
#define MOE_R32(x) MOE_R16(x), MOE_R16(x)
#define MOE_R64(x) MOE_R32(x), MOE_R32(x)
/* GPT-OSS: layer_types starts with sliding_attention and alternates (HF GptOssConfig default). */
#define MOE_ALT2  MOE_WM, MOE_M
#define MOE_ALT4  MOE_ALT2, MOE_ALT2
#define MOE_ALT8  MOE_ALT4, MOE_ALT4
#define MOE_ALT16 MOE_ALT8, MOE_ALT8
#define MOE_ALT36 MOE_ALT16, MOE_ALT16, MOE_ALT4

/* One preset per block, fields in struct order, so each reads against its config.json. */
/* clang-format off */
static const struct moe_model_cfg moe_presets[] = {
    /* deepseek-ai/DeepSeek-V3 config.json: 61 layers (first_k_dense_replace 3), MLA, 256 routed
     * experts top-8 + 1 shared (n_shared_experts 1 x moe_intermediate_size 2048), sigmoid router
     * with aux-loss-free bias (topk_method noaux_tc), n_group 8 / topk_group 4, 1 MTP layer. */
    {
        .name = "deepseek-v3",
        .num_layers = 61, .hidden_size = 7168, .ffn_hidden_size = 18432,
        .num_attention_heads = 128, .num_query_groups = 128, .kv_channels = 128,
        .is_swiglu = true, .is_untied_embeddings = true,
        .vocab_size = 129280, .make_vocab_size_divisible_by = 128, .seq_length = 4096,
        .is_mla = true, .q_lora_rank = 1536, .kv_lora_rank = 512, .qk_head_dim = 128,
        .qk_pos_emb_head_dim = 64, .v_head_dim = 128,
        .num_experts = 256, .moe_ffn_hidden_size = 2048, .moe_router_topk = 8,
        .moe_shared_expert_intermediate_size = 2048, .router_score = MOE_ROUTER_SIGMOID,
        .has_router_expert_bias = true, .moe_router_num_groups = 8, .moe_router_group_topk = 4,
        .mtp_num_layers = 1,
        .layer_flags = {0, 0, 0, MOE_R32(MOE_M), MOE_R16(MOE_M), MOE_R8(MOE_M), MOE_R2(MOE_M)},
    },
    /* moonshotai/Kimi-K2-Instruct config.json (DeepseekV3ForCausalLM): 61 layers, first 1 dense,
     * 64 MLA heads, 384 experts top-8 + 1 shared, n_group 1 (no group limit), no MTP layer. */
    {
        .name = "kimi-k2",
        .num_layers = 61, .hidden_size = 7168, .ffn_hidden_size = 18432,
        .num_attention_heads = 64, .num_query_groups = 64, .kv_channels = 128,
        .is_swiglu = true, .is_untied_embeddings = true,
        .vocab_size = 163840, .make_vocab_size_divisible_by = 128, .seq_length = 4096,
        .is_mla = true, .q_lora_rank = 1536, .kv_lora_rank = 512, .qk_head_dim = 128,
        .qk_pos_emb_head_dim = 64, .v_head_dim = 128,
        .num_experts = 384, .moe_ffn_hidden_size = 2048, .moe_router_topk = 8,
        .moe_shared_expert_intermediate_size = 2048, .router_score = MOE_ROUTER_SIGMOID,
        .has_router_expert_bias = true,
        .layer_flags = {0, MOE_R32(MOE_M), MOE_R16(MOE_M), MOE_R8(MOE_M), MOE_R4(MOE_M)},
    },
    /* Qwen/Qwen3-235B-A22B config.json: 94 layers all MoE, 64/4 heads of 128, 128 experts top-8,
     * per-head q/k RMSNorm. */
    {
        .name = "qwen3-235b-a22b",
        .num_layers = 94, .hidden_size = 4096, .ffn_hidden_size = 12288,
        .num_attention_heads = 64, .num_query_groups = 4, .kv_channels = 128,
        .is_swiglu = true, .is_untied_embeddings = true, .has_qk_layernorm = true,
        .vocab_size = 151936, .make_vocab_size_divisible_by = 128, .seq_length = 4096,
        .num_experts = 128, .moe_ffn_hidden_size = 1536, .moe_router_topk = 8,
        .router_score = MOE_ROUTER_SOFTMAX,
        .layer_flags = {MOE_R64(MOE_M), MOE_R16(MOE_M), MOE_R8(MOE_M), MOE_R4(MOE_M),
                        MOE_R2(MOE_M)},
    },
    /* Qwen/Qwen3-30B-A3B config.json: 48 layers all MoE, 32/4 heads of 128, 128 experts top-8. */
    {
        .name = "qwen3-30b-a3b",
        .num_layers = 48, .hidden_size = 2048, .ffn_hidden_size = 6144,
        .num_attention_heads = 32, .num_query_groups = 4, .kv_channels = 128,
        .is_swiglu = true, .is_untied_embeddings = true, .has_qk_layernorm = true,
        .vocab_size = 151936, .make_vocab_size_divisible_by = 128, .seq_length = 4096,
        .num_experts = 128, .moe_ffn_hidden_size = 768, .moe_router_topk = 8,
        .router_score = MOE_ROUTER_SOFTMAX,
        .layer_flags = {MOE_R32(MOE_M), MOE_R16(MOE_M)},
    },
    /* Qwen/Qwen2-57B-A14B config.json: 28 layers all MoE, 28/4 heads, 64 experts top-8 and a
     * shared expert of 20480 (shared_expert_intermediate_size). */
    {
        .name = "qwen2-57b-a14b",
        .num_layers = 28, .hidden_size = 3584, .ffn_hidden_size = 18944,
        .num_attention_heads = 28, .num_query_groups = 4, .kv_channels = 128,
        .is_swiglu = true, .is_untied_embeddings = true,
        .vocab_size = 151936, .make_vocab_size_divisible_by = 128, .seq_length = 4096,
        .num_experts = 64, .moe_ffn_hidden_size = 2560, .moe_router_topk = 8,
        .moe_shared_expert_intermediate_size = 20480, .router_score = MOE_ROUTER_SOFTMAX,
        .layer_flags = {MOE_R16(MOE_M), MOE_R8(MOE_M), MOE_R4(MOE_M)},
    },
    /* mistralai/Mixtral-8x7B-v0.1 config.json: 32 layers, 32/8 heads, 8 experts top-2. */
    {
        .name = "mixtral-8x7b",
        .num_layers = 32, .hidden_size = 4096, .ffn_hidden_size = 14336,
        .num_attention_heads = 32, .num_query_groups = 8, .kv_channels = 128,
        .is_swiglu = true, .is_untied_embeddings = true,
        .vocab_size = 32000, .make_vocab_size_divisible_by = 128, .seq_length = 4096,
        .num_experts = 8, .moe_ffn_hidden_size = 14336, .moe_router_topk = 2,
        .router_score = MOE_ROUTER_SOFTMAX,
        .layer_flags = {MOE_R32(MOE_M)},
    },
    /* mistralai/Mixtral-8x22B-v0.1 config.json: 56 layers, 48/8 heads, 8 experts top-2. */
    {
        .name = "mixtral-8x22b",
        .num_layers = 56, .hidden_size = 6144, .ffn_hidden_size = 16384,
        .num_attention_heads = 48, .num_query_groups = 8, .kv_channels = 128,
        .is_swiglu = true, .is_untied_embeddings = true,
        .vocab_size = 32000, .make_vocab_size_divisible_by = 128, .seq_length = 4096,
        .num_experts = 8, .moe_ffn_hidden_size = 16384, .moe_router_topk = 2,
        .router_score = MOE_ROUTER_SOFTMAX,
        .layer_flags = {MOE_R32(MOE_M), MOE_R16(MOE_M), MOE_R8(MOE_M)},
    },
    /* openai/gpt-oss-120b config.json: 36 layers, 64/8 heads of 64, 128 experts top-4 of 2880,
     * biases on attention and expert linears (and the router), sliding window 128 on every other
     * layer starting with layer 0 (layer_types); the GLU gate is quick-GELU (clamped at
     * swiglu_limit 7, +1 on the linear half), as Megatron-Bridge runs it with --quick-geglu. */
    {
        .name = "gpt-oss-120b",
        .num_layers = 36, .hidden_size = 2880, .ffn_hidden_size = 2880,
        .num_attention_heads = 64, .num_query_groups = 8, .kv_channels = 64,
        .is_swiglu = true, .is_quick_geglu = true, .is_untied_embeddings = true,
        .has_linear_bias = true, .has_attention_sinks = true,
        .vocab_size = 201088, .make_vocab_size_divisible_by = 128, .seq_length = 4096,
        .window_size = 128,
        .num_experts = 128, .moe_ffn_hidden_size = 2880, .moe_router_topk = 4,
        .router_score = MOE_ROUTER_SOFTMAX,
        .layer_flags = {MOE_ALT36},
    },
    /* meta-llama/Meta-Llama-3-8B config.json: 32 layers, 32/8 heads, dense, 8192-token training. */
    {
        .name = "llama3-8b",
        .num_layers = 32, .hidden_size = 4096, .ffn_hidden_size = 14336,
        .num_attention_heads = 32, .num_query_groups = 8, .kv_channels = 128,
        .is_swiglu = true, .is_untied_embeddings = true,
        .vocab_size = 128256, .make_vocab_size_divisible_by = 128, .seq_length = 8192,
    },
    /* meta-llama/Meta-Llama-3-70B config.json: 80 layers, 64/8 heads, dense. */
    {
        .name = "llama3-70b",
        .num_layers = 80, .hidden_size = 8192, .ffn_hidden_size = 28672,
        .num_attention_heads = 64, .num_query_groups = 8, .kv_channels = 128,
        .is_swiglu = true, .is_untied_embeddings = true,
        .vocab_size = 128256, .make_vocab_size_divisible_by = 128, .seq_length = 8192,
    },
    /* moefold's own test models for moefold-train on a CPU (seconds per step, not published
     * models). Byte-level vocabulary (256); make_vocab_size_divisible_by 32 keeps the padded
     * vocabulary at 256 for tp up to 8, so layouts with different TP train the same function.
     * tiny-moe: 4 layers, first dense, GQA 4/2 heads of 16, 8 routed experts top-2 (softmax)
     * plus one shared expert. */
    {
        .name = "tiny-moe",
        .num_layers = 4, .hidden_size = 64, .ffn_hidden_size = 128,
        .num_attention_heads = 4, .num_query_groups = 2, .kv_channels = 16,
        .is_swiglu = true, .is_untied_embeddings = true,
        .vocab_size = 256, .make_vocab_size_divisible_by = 32, .seq_length = 64,
        .num_experts = 8, .moe_ffn_hidden_size = 32, .moe_router_topk = 2,
        .moe_shared_expert_intermediate_size = 32, .router_score = MOE_ROUTER_SOFTMAX,
        .layer_flags = {0, MOE_M, MOE_M, MOE_M},
    },
    /* tiny-dsv3: DeepSeek-V3's structure in miniature (GQA instead of MLA, no MTP): first layer
     * dense, 16 routed experts top-4 in 4 groups with group top-2, sigmoid router with the
     * aux-loss-free expert bias, one shared expert of the routed size. */
    {
        .name = "tiny-dsv3",
        .num_layers = 4, .hidden_size = 64, .ffn_hidden_size = 160,
        .num_attention_heads = 4, .num_query_groups = 4, .kv_channels = 16,
        .is_swiglu = true, .is_untied_embeddings = true,
        .vocab_size = 256, .make_vocab_size_divisible_by = 32, .seq_length = 64,
        .num_experts = 16, .moe_ffn_hidden_size = 16, .moe_router_topk = 4,
        .moe_shared_expert_intermediate_size = 16, .router_score = MOE_ROUTER_SIGMOID,
        .has_router_expert_bias = true, .moe_router_num_groups = 4, .moe_router_group_topk = 2,
        .layer_flags = {0, MOE_M, MOE_M, MOE_M},
    },
};
/* clang-format on */

size_t moe_cfg_num_presets(void)
{
    return MOE_ARRAY_LEN(moe_presets);
}

const struct moe_model_cfg *moe_cfg_preset_at(size_t idx)
{
    return idx < MOE_ARRAY_LEN(moe_presets) ? &moe_presets[idx] : NULL;
}

/*
 * Structure-faithful miniature of a preset (moe_cfg_shrink): what the architecture is made of
 * stays, the sizes shrink so moefold-train runs a step in well under a second on one CPU core.
 * Kept: attention kind (GQA with its grouping, or MLA with or without the query latent), q/k
 * layernorm, linear biases, attention sinks, sliding windows (16 of 64 tokens), gated or GELU
 * MLPs, untied embeddings, the router (score function, expert bias, group-limited routing), the
 * shared expert, MTP layers, and the layer pattern: the first min(L, 4) layers of the preset's
 * pattern with a leading dense run cut to half of them (DeepSeek-V3's 3 dense layers become 2 of
 * 4), so both layer kinds are present. Sizes: hidden 64, 4 heads of 16 (2 key-value groups under
 * GQA; MLA: key-value latent 32, query latent 48 when the preset has one, dims 16 + 8 rotary, value
 * 16), dense FFN 128, at most 16 experts of 32 with top-k at most 4 (4 groups, group top-k scaled
 * with them), a shared expert of 32 times its preset ratio to a routed expert (at most 4), a
 * byte-level vocabulary (256) and sequences of 64.
 */
void moe_cfg_shrink(const struct moe_model_cfg *in, struct moe_model_cfg *out)
{
    struct moe_model_cfg c = *in;
    (void)snprintf(c.name, sizeof(c.name), "tiny-%.*s", MOE_NAME_LEN - 6, in->name);
    int L = in->num_layers < 4 ? in->num_layers : 4;
    int lead = 0;
    while (in->num_experts > 0 && lead < in->num_layers &&
           (in->layer_flags[lead] & MOE_LAYER_MOE) == 0) {
        lead++;
    }
    int keep = lead < L / 2 ? lead : L / 2; /* dense layers kept at the front */
    if (lead >= in->num_layers) {
        keep = 0; /* a dense model: no prefix to cut */
    }
    memset(c.layer_flags, 0, sizeof(c.layer_flags));
    for (int i = 0; i < L; i++) {
        int src = i < keep ? i : (lead >= in->num_layers ? i : lead + (i - keep));
        c.layer_flags[i] = src < in->num_layers ? in->layer_flags[src] : in->layer_flags[i];
    }
    c.num_layers = L;
    c.hidden_size = 64;
    c.ffn_hidden_size = 128;
    c.num_attention_heads = 4;
    int ratio = in->num_query_groups > 0 ? in->num_attention_heads / in->num_query_groups : 1;
    c.num_query_groups = ratio > 1 ? 2 : 4;
    c.kv_channels = 16;
    if (in->is_mla) {
        c.num_query_groups = 4;
        c.q_lora_rank = in->q_lora_rank > 0 ? 48 : 0;
        c.kv_lora_rank = 32;
        c.qk_head_dim = 16;
        c.qk_pos_emb_head_dim = 8;
        c.v_head_dim = 16;
    }
    c.vocab_size = 256;
    c.make_vocab_size_divisible_by = 32;
    c.seq_length = 64;
    c.window_size = in->window_size > 0 ? 16 : 0;
    if (in->num_experts > 0) {
        int experts = in->num_experts < 16 ? in->num_experts : 16;
        int topk = in->moe_router_topk < 4 ? in->moe_router_topk : 4;
        c.num_experts = experts;
        c.moe_router_topk = topk < experts / 2 ? topk : (experts / 2 > 0 ? experts / 2 : 1);
        c.moe_ffn_hidden_size = 32;
        if (in->moe_shared_expert_intermediate_size > 0) {
            int r = in->moe_ffn_hidden_size > 0
                        ? in->moe_shared_expert_intermediate_size / in->moe_ffn_hidden_size
                        : 1;
            r = r < 1 ? 1 : (r > 4 ? 4 : r);
            c.moe_shared_expert_intermediate_size = 32 * r;
        }
        if (in->moe_router_num_groups > 1) {
            c.moe_router_num_groups = 4;
            int g = 4 * in->moe_router_group_topk / in->moe_router_num_groups;
            c.moe_router_group_topk = g < 1 ? 1 : g;
        }
    }
    *out = c;
}

enum moe_status moe_cfg_preset(const char *name, struct moe_model_cfg *out, struct moe_diag *diag)
{
    if (name != NULL) {
        /* Exact match first, then case-insensitive ("DeepSeek-V3" finds deepseek-v3). */
        for (int pass = 0; pass < 2; pass++) {
            for (size_t i = 0; i < MOE_ARRAY_LEN(moe_presets); i++) {
                const char *pn = moe_presets[i].name;
                if ((pass == 0 && strcmp(pn, name) == 0) ||
                    (pass == 1 && strcasecmp(pn, name) == 0)) {
                    memcpy(out, &moe_presets[i], sizeof(*out)); /* padding too */
                    return MOE_OK;
                }
            }
        }
        /* tiny-<preset>: the preset's miniature. */
        if (strncasecmp(name, "tiny-", 5) == 0) {
            struct moe_model_cfg full;
            struct moe_diag quiet;
            if (moe_cfg_preset(name + 5, &full, &quiet) == MOE_OK &&
                strncmp(full.name, "tiny-", 5) != 0) {
                memset(out, 0, sizeof(*out));
                moe_cfg_shrink(&full, out);
                return MOE_OK;
            }
        }
    }
    char list[512];
    size_t used = 0;
    list[0] = '\0';
    for (size_t i = 0; i < MOE_ARRAY_LEN(moe_presets); i++) {
        int w =
            snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "", moe_presets[i].name);
        if (w < 0 || (size_t)w >= sizeof(list) - used) {
            break;
        }
        used += (size_t)w;
    }
    return moe_diag_set(diag, MOE_ERR_NOT_FOUND,
                        "unknown model preset \"%s\"; built-in presets: %s, and tiny-<preset> for "
                        "a miniature of any of them (or pass --model-config FILE with a "
                        "HuggingFace config.json)",
                        name != NULL ? name : "(null)", list);
}

void moe_cfg_init(struct moe_model_cfg *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->make_vocab_size_divisible_by = MOE_CFG_DEFAULT_VOCAB_DIVISOR;
    cfg->router_score = MOE_ROUTER_SOFTMAX;
}

static int clamp_layers(int n)
{
    if (n < 0) {
        return 0;
    }
    return n > MOE_MAX_LAYERS ? MOE_MAX_LAYERS : n;
}

/* Set or clear the MoE bit of layer i; layers past num_layers are cleared entirely. */
static void set_moe_bit(struct moe_model_cfg *cfg, int i, int n, bool is_moe)
{
    if (i >= n) {
        cfg->layer_flags[i] = 0;
    } else if (is_moe) {
        cfg->layer_flags[i] = (uint8_t)(cfg->layer_flags[i] | MOE_LAYER_MOE);
    } else {
        cfg->layer_flags[i] = (uint8_t)(cfg->layer_flags[i] & ~MOE_LAYER_MOE);
    }
}

void moe_cfg_set_moe_every(struct moe_model_cfg *cfg, int freq)
{
    int n = clamp_layers(cfg->num_layers);
    for (int i = 0; i < MOE_MAX_LAYERS; i++) {
        set_moe_bit(cfg, i, n, freq >= 1 && i % freq == 0);
    }
}

void moe_cfg_set_first_dense(struct moe_model_cfg *cfg, int num_dense)
{
    int n = clamp_layers(cfg->num_layers);
    for (int i = 0; i < MOE_MAX_LAYERS; i++) {
        set_moe_bit(cfg, i, n, i >= num_dense);
    }
}

int moe_cfg_num_moe_layers(const struct moe_model_cfg *cfg)
{
    int n = clamp_layers(cfg->num_layers);
    int count = 0;
    for (int i = 0; i < n; i++) {
        count += (cfg->layer_flags[i] & MOE_LAYER_MOE) != 0;
    }
    return count;
}

bool moe_cfg_is_moe(const struct moe_model_cfg *cfg)
{
    return cfg->num_experts > 0 && moe_cfg_num_moe_layers(cfg) > 0;
}

int moe_cfg_padded_vocab(const struct moe_model_cfg *cfg, int tp)
{
    long div =
        (long)(cfg->make_vocab_size_divisible_by > 0 ? cfg->make_vocab_size_divisible_by : 1) *
        (tp > 0 ? tp : 1);
    long v = cfg->vocab_size > 0 ? cfg->vocab_size : 0;
    long padded = (v + div - 1) / div * div;
    return padded > (long)INT32_MAX ? INT32_MAX : (int)padded;
}

/* ---------------------------------------------------------------------------------------------- */
/* Validation. Every message names the field (and its Megatron flag) and says what to change. */

static enum moe_status check_range(
    const char *field, const char *flag, long value, long lo, long hi, struct moe_diag *diag)
{
    if (value >= lo && value <= hi) {
        return MOE_OK;
    }
    return moe_diag_set(diag, MOE_ERR_INVALID,
                        "%s = %ld is out of range: use a value in [%ld, %ld] (%s)", field, value,
                        lo, hi, flag);
}

static enum moe_status validate_trunk(const struct moe_model_cfg *cfg, struct moe_diag *diag)
{
    if (memchr(cfg->name, '\0', sizeof(cfg->name)) == NULL) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "name is not NUL-terminated: use at most %d characters",
                            MOE_NAME_LEN - 1);
    }
    MOE_TRY(check_range("num_layers", "--num-layers", cfg->num_layers, 1, MOE_MAX_LAYERS, diag));
    MOE_TRY(
        check_range("hidden_size", "--hidden-size", cfg->hidden_size, 1, MOE_CFG_MAX_HIDDEN, diag));
    MOE_TRY(check_range("num_attention_heads", "--num-attention-heads", cfg->num_attention_heads, 1,
                        MOE_CFG_MAX_HEADS, diag));
    MOE_TRY(check_range("num_query_groups", "--num-query-groups", cfg->num_query_groups, 1,
                        cfg->num_attention_heads, diag));
    if (cfg->num_attention_heads % cfg->num_query_groups != 0) {
        return moe_diag_set(
            diag, MOE_ERR_INVALID,
            "num_query_groups = %d does not divide num_attention_heads = %d: pick a "
            "divisor of %d (--num-query-groups)",
            cfg->num_query_groups, cfg->num_attention_heads, cfg->num_attention_heads);
    }
    MOE_TRY(check_range("vocab_size", "--vocab-size", cfg->vocab_size, 1, MOE_CFG_MAX_VOCAB, diag));
    MOE_TRY(check_range("make_vocab_size_divisible_by", "--make-vocab-size-divisible-by",
                        cfg->make_vocab_size_divisible_by, 1, MOE_CFG_MAX_VOCAB_DIVISOR, diag));
    MOE_TRY(check_range("seq_length", "--seq-length", cfg->seq_length, 1, MOE_CFG_MAX_SEQ, diag));
    MOE_TRY(check_range("ffn_hidden_size", "--ffn-hidden-size", cfg->ffn_hidden_size, 0,
                        MOE_CFG_MAX_FFN, diag));
    if (cfg->is_quick_geglu && !cfg->is_swiglu) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "is_quick_geglu = true needs is_swiglu = true: quick-GeGLU is a gated "
                            "MLP (two fc1 halves)");
    }
    return MOE_OK;
}

static enum moe_status validate_attention(const struct moe_model_cfg *cfg, struct moe_diag *diag)
{
    if (!cfg->is_mla) {
        return check_range("kv_channels", "--kv-channels", cfg->kv_channels, 1,
                           MOE_CFG_MAX_HEAD_DIM, diag);
    }
    MOE_TRY(check_range("kv_channels", "--kv-channels", cfg->kv_channels, 0, MOE_CFG_MAX_HEAD_DIM,
                        diag));
    MOE_TRY(check_range("q_lora_rank", "--q-lora-rank (0 = queries not compressed)",
                        cfg->q_lora_rank, 0, MOE_CFG_MAX_HIDDEN, diag));
    MOE_TRY(check_range("kv_lora_rank", "--kv-lora-rank, required with --multi-latent-attention",
                        cfg->kv_lora_rank, 1, MOE_CFG_MAX_HIDDEN, diag));
    MOE_TRY(check_range("qk_head_dim", "--qk-head-dim, required with --multi-latent-attention",
                        cfg->qk_head_dim, 1, MOE_CFG_MAX_HEAD_DIM, diag));
    MOE_TRY(check_range("qk_pos_emb_head_dim",
                        "--qk-pos-emb-head-dim, required with --multi-latent-attention",
                        cfg->qk_pos_emb_head_dim, 1, MOE_CFG_MAX_HEAD_DIM, diag));
    MOE_TRY(check_range("v_head_dim", "--v-head-dim, required with --multi-latent-attention",
                        cfg->v_head_dim, 1, MOE_CFG_MAX_HEAD_DIM, diag));
    if (cfg->num_query_groups != cfg->num_attention_heads) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "num_query_groups = %d with multi-latent attention: MLA has no grouped "
                            "query attention, set it to num_attention_heads = %d",
                            cfg->num_query_groups, cfg->num_attention_heads);
    }
    return MOE_OK;
}

static enum moe_status validate_groups(const struct moe_model_cfg *cfg, struct moe_diag *diag)
{
    int groups = cfg->moe_router_num_groups;
    int gtopk = cfg->moe_router_group_topk;
    if (groups == 0 && gtopk == 0) {
        return MOE_OK;
    }
    MOE_TRY(check_range("moe_router_num_groups", "--moe-router-num-groups", groups, 1,
                        cfg->num_experts, diag));
    if (cfg->num_experts % groups != 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "moe_router_num_groups = %d does not divide num_experts = %d: pick a "
                            "divisor of %d (--moe-router-num-groups)",
                            groups, cfg->num_experts, cfg->num_experts);
    }
    MOE_TRY(
        check_range("moe_router_group_topk", "--moe-router-group-topk", gtopk, 1, groups, diag));
    long reachable = (long)gtopk * (cfg->num_experts / groups);
    if (cfg->moe_router_topk > reachable) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "moe_router_topk = %d exceeds the %ld experts in the %d chosen groups "
                            "(moe_router_group_topk x num_experts / moe_router_num_groups): raise "
                            "--moe-router-group-topk or lower --moe-router-topk",
                            cfg->moe_router_topk, reachable, gtopk);
    }
    return MOE_OK;
}

static enum moe_status validate_moe(const struct moe_model_cfg *cfg, struct moe_diag *diag)
{
    int num_moe = moe_cfg_num_moe_layers(cfg);
    MOE_TRY(check_range("num_experts", "--num-experts (0 = dense model)", cfg->num_experts, 0,
                        MOE_MAX_EXPERTS, diag));
    if (cfg->num_experts == 0) {
        if (num_moe > 0) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "%d layers are flagged MoE but num_experts = 0: set --num-experts "
                                "or mark every layer dense (--moe-layer-freq)",
                                num_moe);
        }
        return MOE_OK;
    }
    if (num_moe == 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "num_experts = %d but no layer is flagged MoE: set --moe-layer-freq "
                            "(e.g. 1, or ([0]*3+[1]*58)) or --num-experts 0 for a dense model",
                            cfg->num_experts);
    }
    MOE_TRY(check_range("moe_ffn_hidden_size", "--moe-ffn-hidden-size", cfg->moe_ffn_hidden_size, 1,
                        MOE_CFG_MAX_FFN, diag));
    MOE_TRY(check_range("moe_router_topk", "--moe-router-topk (at most --num-experts)",
                        cfg->moe_router_topk, 1, cfg->num_experts, diag));
    MOE_TRY(check_range("moe_shared_expert_intermediate_size",
                        "--moe-shared-expert-intermediate-size (0 = none)",
                        cfg->moe_shared_expert_intermediate_size, 0, MOE_CFG_MAX_FFN, diag));
    if (cfg->router_score != MOE_ROUTER_SOFTMAX && cfg->router_score != MOE_ROUTER_SIGMOID) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "router_score = %d is not a known score function: use softmax or "
                            "sigmoid (--moe-router-score-function)",
                            (int)cfg->router_score);
    }
    return validate_groups(cfg, diag);
}

static enum moe_status validate_layers(const struct moe_model_cfg *cfg, struct moe_diag *diag)
{
    int num_windowed = 0;
    for (int i = 0; i < cfg->num_layers; i++) {
        if ((cfg->layer_flags[i] & ~(MOE_LAYER_MOE | MOE_LAYER_WINDOWED)) != 0) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "layer_flags[%d] = 0x%x has unknown bits: only MoE (1) and "
                                "windowed (2) are defined",
                                i, (unsigned)cfg->layer_flags[i]);
        }
        num_windowed += (cfg->layer_flags[i] & MOE_LAYER_WINDOWED) != 0;
    }
    MOE_TRY(check_range("window_size", "--window-size (0 = no sliding window)", cfg->window_size, 0,
                        MOE_CFG_MAX_SEQ, diag));
    if (num_windowed > 0 && cfg->window_size == 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "%d layers use sliding-window attention but window_size = 0: set "
                            "--window-size or clear the windowed layers",
                            num_windowed);
    }
    if (num_windowed == 0 && cfg->window_size > 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "window_size = %d but no layer is flagged windowed: flag the "
                            "sliding-window layers or set window_size 0",
                            cfg->window_size);
    }
    /* Dense MLPs (and an MTP layer copying a dense last layer) need a dense FFN size. */
    int num_dense = cfg->num_layers - moe_cfg_num_moe_layers(cfg);
    if (num_dense > 0 && cfg->ffn_hidden_size <= 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "ffn_hidden_size = %d but %d layers have a dense MLP: set "
                            "--ffn-hidden-size",
                            cfg->ffn_hidden_size, num_dense);
    }
    return check_range("mtp_num_layers", "--mtp-num-layers", cfg->mtp_num_layers, 0, MOE_MAX_MTP,
                       diag);
}

enum moe_status moe_cfg_validate(const struct moe_model_cfg *cfg, struct moe_diag *diag)
{
    if (cfg == NULL) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "no model configuration given");
    }
    MOE_TRY(validate_trunk(cfg, diag));
    MOE_TRY(validate_attention(cfg, diag));
    MOE_TRY(validate_moe(cfg, diag));
    return validate_layers(cfg, diag);
}

/* ---------------------------------------------------------------------------------------------- */
/* Parameter counts (elements, in double: the largest is ~1e12, exact in a double). */

/* Attention block of one layer: its input RMSNorm, projections, biases and q/k norms. */
static double attn_params(const struct moe_model_cfg *c)
{
    double h = c->hidden_size;
    double a = c->num_attention_heads;
    double p = h; /* input_layernorm */
    if (c->is_mla) {
        double qk = c->qk_head_dim + c->qk_pos_emb_head_dim;
        if (c->q_lora_rank > 0) {
            /* linear_q_down_proj [h -> q_lora], q_layernorm, linear_q_up_proj [q_lora -> a*qk] */
            p += h * c->q_lora_rank + c->q_lora_rank + (double)c->q_lora_rank * a * qk;
        } else {
            p += h * a * qk; /* linear_q_proj */
        }
        /* linear_kv_down_proj [h -> kv_lora + rope], kv_layernorm, linear_kv_up_proj
         * [kv_lora -> a*(qk_head_dim + v_head_dim)], linear_proj [a*v -> h] */
        p += h * (c->kv_lora_rank + c->qk_pos_emb_head_dim) + c->kv_lora_rank;
        p += (double)c->kv_lora_rank * a * (c->qk_head_dim + c->v_head_dim);
        p += a * c->v_head_dim * h;
        return p;
    }
    double q = a * c->kv_channels;
    double kv = (double)c->num_query_groups * c->kv_channels;
    p += h * (q + 2.0 * kv) + q * h;
    if (c->has_linear_bias) {
        p += q + 2.0 * kv + h;
    }
    if (c->has_qk_layernorm) {
        p += 2.0 * c->kv_channels; /* q_layernorm, k_layernorm over the head dim */
    }
    return p;
}

/* One MLP of intermediate size f (weights, and biases when has_linear_bias); no norm. */
static double mlp_params(const struct moe_model_cfg *c, int f)
{
    double h = c->hidden_size;
    double up = c->is_swiglu ? 2.0 * f : (double)f;
    double p = h * up + (double)f * h;
    if (c->has_linear_bias) {
        p += up + h;
    }
    return p;
}

/* The MoE part of one MoE layer a token touches: router + shared + `experts` routed experts. */
static double moe_mlp_params(const struct moe_param_counts *o, int experts)
{
    return o->router + o->shared_expert + (double)experts * o->expert;
}

void moe_cfg_param_counts(const struct moe_model_cfg *cfg, int tp, struct moe_param_counts *out)
{
    memset(out, 0, sizeof(*out));
    double h = cfg->hidden_size;
    double vp = moe_cfg_padded_vocab(cfg, tp);
    out->embedding = vp * h;
    out->output = cfg->is_untied_embeddings ? vp * h : 0.0;
    out->attn_per_layer = attn_params(cfg);
    out->dense_mlp = h + mlp_params(cfg, cfg->ffn_hidden_size); /* pre_mlp_layernorm + MLP */
    if (cfg->num_experts > 0) {
        out->expert = mlp_params(cfg, cfg->moe_ffn_hidden_size);
        out->shared_expert = cfg->moe_shared_expert_intermediate_size > 0
                                 ? mlp_params(cfg, cfg->moe_shared_expert_intermediate_size)
                                 : 0.0;
        /* router weight [E, h]; GPT-OSS's router has a bias; DeepSeek's expert bias [E] */
        out->router = (double)cfg->num_experts * h + (cfg->has_linear_bias ? cfg->num_experts : 0) +
                      (cfg->has_router_expert_bias ? cfg->num_experts : 0);
    }
    out->mtp_extra = 2.0 * h * h + 3.0 * h; /* eh_proj [2h -> h], enorm, hnorm, final norm */

    int num_layers = clamp_layers(cfg->num_layers);
    int num_moe = cfg->num_experts > 0 ? moe_cfg_num_moe_layers(cfg) : 0;
    int num_dense = num_layers - num_moe;
    /* A MoE layer's pre-MLP norm is in neither per-module field; it is added here. */
    double moe_total = h + moe_mlp_params(out, cfg->num_experts);
    double moe_active = h + moe_mlp_params(out, cfg->moe_router_topk);
    double head = out->embedding + out->output + h; /* + final_layernorm */
    out->total_no_mtp =
        head + num_layers * out->attn_per_layer + num_dense * out->dense_mlp + num_moe * moe_total;
    out->active_no_mtp =
        head + num_layers * out->attn_per_layer + num_dense * out->dense_mlp + num_moe * moe_active;

    bool last_is_moe =
        num_layers > 0 && num_moe > 0 && (cfg->layer_flags[num_layers - 1] & MOE_LAYER_MOE) != 0;
    double mtp = cfg->mtp_num_layers > 0 ? cfg->mtp_num_layers : 0;
    double mtp_layer = out->attn_per_layer + out->mtp_extra;
    out->total = out->total_no_mtp + mtp * (mtp_layer + (last_is_moe ? moe_total : out->dense_mlp));
    out->active =
        out->active_no_mtp + mtp * (mtp_layer + (last_is_moe ? moe_active : out->dense_mlp));
}
