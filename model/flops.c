/*
 * Model FLOPs in Megatron-LM's convention (see model/flops.h for the source and the terms). The
 * cfg is first reduced to layer counts and per-token coefficients (moe_flops_terms_init, one pass
 * over the layer flags); every later call is a few multiply-adds.
 *
 * All per-token coefficients here are forward FLOPs (2 per multiply-add); model FLOPs of a pass
 * over fwd+bwd are 3x forward, as Megatron's forward_backward_expansion_factor. Core attention is
 * written as (FLOPs per attended key) x (average keys a token attends): s/2 for a causal mask as
 * Megatron counts it (the area of the causal triangle per row), and for a causal sliding window
 * of w < s tokens the area of the banded mask per row, w - w^2/(2s), the same continuous
 * approximation (it meets s/2 at w = s; the exact mean, w - w(w-1)/(2s), differs by w/(2s)). No
 * I/O.
 */
#include "model/flops.h"

#include <string.h>

/* Megatron: forward_backward_expansion_factor (fwd, wgrad, dgrad). */
#define MOE_FLOPS_FWD_BWD 3.0
/* Megatron: fma_expansion_factor (a multiply-add is 2 FLOPs). */
#define MOE_FLOPS_FMA 2.0

/* Forward FLOPs per token of one layer's attention GEMMs (Megatron's standard_self_attn_term
 * without the core-attention part, divided by the x3 fwd+bwd factor). */
static double attn_proj_fwd(const struct moe_model_cfg *c)
{
    double h = c->hidden_size;
    double a = c->num_attention_heads;
    if (c->is_mla) {
        double qk = c->qk_head_dim + c->qk_pos_emb_head_dim;
        double q_term = c->q_lora_rank > 0 ? c->q_lora_rank * (h + a * qk + 1.0) : h * a * qk;
        double kv_term = c->kv_lora_rank * (h + a * (c->qk_head_dim + c->v_head_dim) + 1.0);
        double rope_k = h * c->qk_pos_emb_head_dim;
        double out = a * c->v_head_dim * h;
        return MOE_FLOPS_FMA * (q_term + kv_term + rope_k + out);
    }
    double q = a * c->kv_channels;
    double kv = (double)c->num_query_groups * c->kv_channels;
    return MOE_FLOPS_FMA * (h * (q + 2.0 * kv) + q * h);
}

/* Forward FLOPs per token per attended key of one layer's core attention (QK^T and PV). */
static double core_attn_fwd_per_key(const struct moe_model_cfg *c)
{
    double a = c->num_attention_heads;
    if (c->is_mla) {
        return MOE_FLOPS_FMA * a * (c->qk_head_dim + c->qk_pos_emb_head_dim + c->v_head_dim);
    }
    return MOE_FLOPS_FMA * 2.0 * a * c->kv_channels;
}

/* Forward FLOPs per token of an MLP of intermediate f: 2*h*f per GEMM, 3 GEMMs with SwiGLU. */
static double mlp_fwd(const struct moe_model_cfg *c, int f)
{
    double gemms = c->is_swiglu ? 3.0 : 2.0; /* Megatron's ffn_expansion_factor */
    return MOE_FLOPS_FMA * gemms * c->hidden_size * (double)f;
}

void moe_flops_terms_init(const struct moe_model_cfg *cfg, struct moe_flops_terms *t)
{
    memset(t, 0, sizeof(*t));
    int n = cfg->num_layers < 0
                ? 0
                : (cfg->num_layers > MOE_MAX_LAYERS ? MOE_MAX_LAYERS : cfg->num_layers);
    int mtp = cfg->mtp_num_layers > 0 ? cfg->mtp_num_layers : 0;
    int num_moe = 0;
    int num_windowed = 0;
    for (int i = 0; i < n; i++) {
        num_moe += (cfg->layer_flags[i] & MOE_LAYER_MOE) != 0;
        num_windowed += (cfg->layer_flags[i] & MOE_LAYER_WINDOWED) != 0;
    }
    if (cfg->num_experts <= 0) {
        num_moe = 0; /* Megatron: num_experts None -> every MLP dense */
    }
    uint8_t last = n > 0 ? cfg->layer_flags[n - 1] : 0;
    bool last_is_moe = num_moe > 0 && (last & MOE_LAYER_MOE) != 0;
    t->num_attn_layers = n + mtp;
    t->num_moe_mlps = num_moe + (last_is_moe ? mtp : 0);
    t->num_dense_mlps = (n - num_moe) + (last_is_moe ? 0 : mtp);
    t->num_windowed = num_windowed + ((last & MOE_LAYER_WINDOWED) != 0 ? mtp : 0);
    t->mtp_num_layers = mtp;
    t->hidden_size = cfg->hidden_size;
    t->vocab_size = cfg->vocab_size;
    t->vocab_divisor = cfg->make_vocab_size_divisible_by;
    t->window_size = cfg->window_size;

    double h = cfg->hidden_size;
    t->attn_proj_fwd = attn_proj_fwd(cfg);
    t->core_attn_fwd_per_key = core_attn_fwd_per_key(cfg);
    t->dense_mlp_fwd = mlp_fwd(cfg, cfg->ffn_hidden_size);
    if (num_moe > 0) {
        t->moe_router_topk = cfg->moe_router_topk;
        t->one_expert_fwd = mlp_fwd(cfg, cfg->moe_ffn_hidden_size);
        t->routed_fwd = cfg->moe_router_topk * t->one_expert_fwd;
        t->shared_fwd = mlp_fwd(cfg, cfg->moe_shared_expert_intermediate_size);
        t->router_fwd = MOE_FLOPS_FMA * h * cfg->num_experts;
    }
    /* Megatron: 3*h (MTP eh norm + final norm) + 2*h*h (eh proj), as multiply-adds */
    t->mtp_extra_fwd = MOE_FLOPS_FMA * (3.0 * h + 2.0 * h * h);
}

static double padded_vocab(const struct moe_flops_terms *t, int tp)
{
    long div = (long)(t->vocab_divisor > 0 ? t->vocab_divisor : 1) * (tp > 0 ? tp : 1);
    long v = t->vocab_size > 0 ? t->vocab_size : 0;
    return (double)((v + div - 1) / div * div);
}

/* Average keys a token attends: s/2 causal (Megatron); w - w^2/(2s) for a window w < s. */
static double attended_keys(int seq, int window)
{
    double s = seq;
    if (window <= 0 || window >= seq) {
        return s / 2.0;
    }
    double w = window;
    return w - w * w / (2.0 * s);
}

void moe_flops_terms_layer(const struct moe_flops_terms *t,
                           int seq,
                           int tp,
                           struct moe_flops_layer *out)
{
    memset(out, 0, sizeof(*out));
    if (seq <= 0) {
        return;
    }
    out->attn_proj = t->attn_proj_fwd;
    out->core_attn = t->core_attn_fwd_per_key * attended_keys(seq, 0);
    out->core_attn_window = t->core_attn_fwd_per_key * attended_keys(seq, t->window_size);
    out->dense_mlp = t->dense_mlp_fwd;
    out->routed_experts = t->routed_fwd;
    out->shared_experts = t->shared_fwd;
    out->router = t->router_fwd;
    out->logits = MOE_FLOPS_FMA * t->hidden_size * padded_vocab(t, tp);
    out->mtp_extra = t->mtp_extra_fwd;
    out->one_expert = t->one_expert_fwd;
}

void moe_flops_terms_breakdown(const struct moe_flops_terms *t,
                               int seq,
                               int tp,
                               struct moe_flops_breakdown *out)
{
    memset(out, 0, sizeof(*out));
    if (seq <= 0) {
        return;
    }
    struct moe_flops_layer l;
    moe_flops_terms_layer(t, seq, tp, &l);
    /* Per sequence, fwd+bwd: every per-token forward term x 3 x s. */
    double k = MOE_FLOPS_FWD_BWD * (double)seq;
    int num_full = t->num_attn_layers - t->num_windowed;
    out->attn_proj = k * t->num_attn_layers * l.attn_proj;
    out->core_attn = k * t->num_attn_layers * l.core_attn;
    out->dense_mlp = k * t->num_dense_mlps * l.dense_mlp;
    out->routed_experts = k * t->num_moe_mlps * l.routed_experts;
    out->shared_experts = k * t->num_moe_mlps * l.shared_experts;
    out->logits = k * (1 + t->mtp_num_layers) * l.logits;
    out->mtp_extra = k * t->mtp_num_layers * l.mtp_extra;
    out->total = out->attn_proj + out->core_attn + out->dense_mlp + out->routed_experts +
                 out->shared_experts + out->logits + out->mtp_extra;
    out->core_attn_exec = k * (num_full * l.core_attn + t->num_windowed * l.core_attn_window);
    out->router_exec = k * t->num_moe_mlps * l.router;
}

double moe_flops_terms_per_sequence(const struct moe_flops_terms *t, int seq, int tp)
{
    struct moe_flops_breakdown b;
    moe_flops_terms_breakdown(t, seq, tp, &b);
    return b.total;
}

double moe_flops_per_sequence(const struct moe_model_cfg *cfg, int seq, int tp)
{
    struct moe_flops_terms t;
    moe_flops_terms_init(cfg, &t);
    return moe_flops_terms_per_sequence(&t, seq, tp);
}

double moe_flops_per_step(const struct moe_model_cfg *cfg, int seq, int gbs, int tp)
{
    if (gbs <= 0) {
        return 0.0;
    }
    return (double)gbs * moe_flops_per_sequence(cfg, seq, tp);
}

double moe_flops_per_token(const struct moe_model_cfg *cfg, int seq, int tp)
{
    if (seq <= 0) {
        return 0.0;
    }
    return moe_flops_per_sequence(cfg, seq, tp) / (double)seq;
}

void moe_flops_breakdown(const struct moe_model_cfg *cfg,
                         int seq,
                         int tp,
                         struct moe_flops_breakdown *out)
{
    struct moe_flops_terms t;
    moe_flops_terms_init(cfg, &t);
    moe_flops_terms_breakdown(&t, seq, tp, out);
}

void moe_flops_layer_fwd(const struct moe_model_cfg *cfg,
                         int seq,
                         int tp,
                         struct moe_flops_layer *out)
{
    struct moe_flops_terms t;
    moe_flops_terms_init(cfg, &t);
    moe_flops_terms_layer(&t, seq, tp, out);
}
