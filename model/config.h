/*
 * Model architecture: the shape of a transformer (dense or mixture-of-experts), with the fields
 * Megatron-LM's model flags set, and what is derived from them (parameter counts, padded vocab).
 *
 * Dimension letters used across model/: h hidden, f dense FFN hidden, fe expert FFN hidden,
 * fs shared-expert FFN hidden, E routed experts, K top-k, a attention heads, g query groups,
 * d head dim, V vocabulary, s sequence length, L decoder layers.
 *
 * Presets carry the published hyper-parameters (see each preset's comment in config.c); this module
 * does no I/O: HuggingFace config.json files are read in topologies/model_file.c and Megatron flags
 * are parsed in model/megatron_args.c, both into this struct.
 */
#ifndef MOE_MODEL_CONFIG_H
#define MOE_MODEL_CONFIG_H

#include "model/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_MAX_LAYERS  512 /* decoder layers; more is refused as absurd */
#define MOE_MAX_EXPERTS 4096
#define MOE_MAX_MTP     8
#define MOE_NAME_LEN    64

/* Per-decoder-layer flags (struct moe_model_cfg.layer_flags). */
enum {
    MOE_LAYER_MOE = 1u << 0,      /* the MLP is a routed MoE block (else dense MLP) */
    MOE_LAYER_WINDOWED = 1u << 1, /* attention uses a sliding window of window_size tokens */
};

enum moe_router_score {
    MOE_ROUTER_SOFTMAX = 0,
    MOE_ROUTER_SIGMOID = 1,
};

struct moe_model_cfg {
    char name[MOE_NAME_LEN]; /* preset or file name, for tables */

    /* Trunk */
    int num_layers;            /* L decoder layers, MTP layers excluded */
    int hidden_size;           /* h */
    int ffn_hidden_size;       /* f, dense MLP intermediate (dense layers only) */
    int num_attention_heads;   /* a */
    int num_query_groups;      /* g, KV heads (== a without GQA) */
    int kv_channels;           /* d, per-head dim of Q/K/V for GQA/MHA */
    bool is_swiglu;            /* gated linear unit: 3 GEMMs per MLP instead of 2 */
    bool is_quick_geglu;       /* the gate is quick-GELU, not SiLU (GPT-OSS; Megatron --quick-geglu;
                                  needs is_swiglu) */
    bool is_untied_embeddings; /* separate output layer (untie-embeddings-and-output-weights) */
    bool has_qk_layernorm;     /* per-head RMSNorm on q and k (Qwen3) */
    bool has_linear_bias;      /* bias on attention/MLP linears (GPT-OSS) */
    bool has_attention_sinks;  /* a learned sink logit per attention head (GPT-OSS) */
    int vocab_size;            /* V, tokenizer vocabulary before padding */
    int make_vocab_size_divisible_by; /* Megatron pads V to a multiple of this x TP */
    int seq_length;                   /* s, default training sequence length (tokens) */

    /* Multi-latent attention (DeepSeek-V2/V3, Kimi-K2); used when is_mla */
    bool is_mla;
    int q_lora_rank;         /* 0 = queries not compressed */
    int kv_lora_rank;        /* compressed KV latent width */
    int qk_head_dim;         /* per-head q/k dim without rope part */
    int qk_pos_emb_head_dim; /* per-head rope dim (shared k rope) */
    int v_head_dim;          /* per-head v dim */

    /* Sliding-window attention on layers flagged MOE_LAYER_WINDOWED */
    int window_size; /* tokens; 0 = none */

    /* Mixture of experts (num_experts == 0: dense model) */
    int num_experts;                         /* E */
    int moe_ffn_hidden_size;                 /* fe */
    int moe_router_topk;                     /* K */
    int moe_shared_expert_intermediate_size; /* fs, 0 = no shared expert */
    enum moe_router_score router_score;      /* softmax or sigmoid scores */
    bool has_router_expert_bias;             /* aux-loss-free balancing bias (DeepSeek-V3) */
    int moe_router_num_groups;               /* expert groups for group-limited routing, 0 = off */
    int moe_router_group_topk;               /* groups a token may use, 0 = off */

    int mtp_num_layers; /* multi-token-prediction layers after the trunk (same MLP as last layer) */

    uint8_t layer_flags[MOE_MAX_LAYERS]; /* MOE_LAYER_* per decoder layer [L] */
};

/* Parameter counts (elements). Embedding and output layer counted separately. */
struct moe_param_counts {
    double total;     /* every parameter, MTP included, output layer counted once if tied */
    double active;    /* parameters a token touches: routed experts count K of E; MTP included */
    double embedding; /* V_padded x h (input embedding) */
    double output;    /* V_padded x h when untied, else 0 */
    double attn_per_layer; /* attention block incl. its norms, one layer */
    double dense_mlp;      /* one dense MLP incl. norm */
    double expert;         /* one routed expert */
    double shared_expert;  /* the shared expert(s) of one MoE layer */
    double router;         /* router of one MoE layer (weights + bias) */
    double mtp_extra;      /* per MTP layer: projections and norms beyond its transformer layer */
    double total_no_mtp;   /* total without MTP layers */
    double active_no_mtp;  /* active without MTP layers (the figure model cards publish) */
};

/* Number of built-in presets, and preset i (0-based); NULL past the end. */
size_t moe_cfg_num_presets(void);
const struct moe_model_cfg *moe_cfg_preset_at(size_t idx);

/* Copy the named preset into *out; "tiny-<preset>" gives moe_cfg_shrink of that preset.
 * MOE_ERR_NOT_FOUND (diag lists the names) if unknown. */
MOE_NODISCARD enum moe_status
moe_cfg_preset(const char *name, struct moe_model_cfg *out, struct moe_diag *diag);

/* A structure-faithful miniature of a preset (named tiny-<name>): the same architecture features
 * and layer pattern at a size that trains in seconds on a CPU (rules in config.c). */
void moe_cfg_shrink(const struct moe_model_cfg *in, struct moe_model_cfg *out);

/* Zero the struct and set Megatron-LM's defaults for fields with defaults (vocab divisor 128). */
void moe_cfg_init(struct moe_model_cfg *cfg);

/* Mark decoder layers as MoE: layer i is MoE when i % freq == 0 (Megatron's int moe_layer_freq). */
void moe_cfg_set_moe_every(struct moe_model_cfg *cfg, int freq);
/* First `num_dense` layers dense, the rest MoE (DeepSeek's first_k_dense_replace). */
void moe_cfg_set_first_dense(struct moe_model_cfg *cfg, int num_dense);

/* Number of decoder layers flagged MoE. */
int moe_cfg_num_moe_layers(const struct moe_model_cfg *cfg);
/* True when the model has routed experts on at least one layer. */
bool moe_cfg_is_moe(const struct moe_model_cfg *cfg);

/* Vocabulary padded as Megatron does: multiple of make_vocab_size_divisible_by * tp. */
int moe_cfg_padded_vocab(const struct moe_model_cfg *cfg, int tp);

/*
 * Check the architecture alone (positive sizes, head/group divisibility, top-k <= E, MLA fields,
 * sizes under the MOE_MAX_* limits). Returns MOE_ERR_INVALID with diag naming the field.
 */
MOE_NODISCARD enum moe_status moe_cfg_validate(const struct moe_model_cfg *cfg,
                                               struct moe_diag *diag);

/* Parameter counts with the vocabulary padded for tp (tp=1 for the canonical count). */
void moe_cfg_param_counts(const struct moe_model_cfg *cfg, int tp, struct moe_param_counts *out);

#ifdef __cplusplus
}
#endif

#endif /* MOE_MODEL_CONFIG_H */
