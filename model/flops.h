/*
 * Model FLOPs in Megatron-LM's convention, so that TFLOPS/GPU and MFU compare with the figures
 * Megatron prints and NVIDIA publishes.
 *
 * Followed term by term: num_floating_point_operations() -> transformer_flops() in
 * megatron/training/training.py of NVIDIA/Megatron-LM main, as of commit 001b00c2 (the version with
 * moe_latent_size, attention_output_gate and the gated-delta-net variant). For a transformer (not
 * the hybrid/Mamba path) it counts, per token, with a GEMM of m*n by n*k costing 2mnk and x3 for
 * the forward, weight-gradient and data-gradient passes:
 *   - attention (GQA/MHA): QKV projections h*(a*d + 2*g*d), core attention a*d*s/2 for each of
 *     QK^T and PV (causal: half the mask), output projection a*d*h;
 *   - MLA: q LoRA q_lora*(h + a*(qk+rope) + 1) (the +1 is the q norm) or h*a*(qk+rope) without it,
 *     kv LoRA kv_lora*(h + a*(qk+v) + 1), the shared rope key h*rope, output a*v*h, core attention
 *     s/2*a*(qk+rope) + s/2*a*v;
 *   - MLP: h*f*(3 with SwiGLU, else 2) per dense layer; per MoE layer K routed experts of fe and
 * the shared expert of fs; the router GEMM is not counted;
 *   - MTP: each of the mtp_num_layers is one more transformer layer (MoE when the last decoder
 * layer is MoE), plus 3h (enorm, hnorm, final norm) + 2h*h (eh projection), plus one more logits
 * pass;
 *   - logits: h*V_padded per pass, V padded to a multiple of make_vocab_size_divisible_by * TP.
 * Megatron-LM's transformer path has no sliding-window term: windowed layers are counted as full
 * causal layers. moefold follows that for model FLOPs (so MFU matches Megatron's log), and reports
 * separately the core-attention FLOPs a windowed layer really executes (core_attn_exec), for
 * timing. (Megatron-Bridge's flop_utils, which some published TFLOPS use, counts windows
 * differently.) Recompute adds executed FLOPs, not model FLOPs; that is the cost model's business.
 *
 * Pure functions: no I/O, no allocation. The cfg must have passed moe_cfg_validate. Letters: see
 * model/config.h (s = sequence length in tokens).
 */
#ifndef MOE_MODEL_FLOPS_H
#define MOE_MODEL_FLOPS_H

#include "model/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Everything the FLOP count needs from a cfg, reduced to counts and per-token coefficients, so the
 * per-call functions below are a handful of multiply-adds (no loop over layers). Fill it once per
 * model with moe_flops_terms_init; it does not depend on seq or tp.
 */
struct moe_flops_terms {
    int num_attn_layers; /* attention blocks: L + MTP layers */
    int num_dense_mlps; /* dense MLPs, counting an MTP layer when the last decoder layer is dense */
    int num_moe_mlps;   /* MoE MLPs, counting MTP layers when the last decoder layer is MoE */
    int num_windowed;   /* attention blocks with a sliding window (an MTP layer copies the last) */
    int mtp_num_layers; /* extra logits passes and MTP norms / eh projections */
    int hidden_size;    /* h */
    int vocab_size;     /* V before padding */
    int vocab_divisor;  /* make_vocab_size_divisible_by (padded with x tp) */
    int window_size;    /* tokens, 0 = none */
    int moe_router_topk; /* K (0 for a dense model) */
    /* Forward FLOPs per token of one module (multiply by 3 for fwd+bwd). */
    double attn_proj_fwd;         /* one layer's attention GEMMs (incl. MLA norm terms) */
    double core_attn_fwd_per_key; /* one layer's core attention per token per attended key */
    double dense_mlp_fwd;         /* one dense MLP */
    double one_expert_fwd;        /* one routed expert, per token routed to it */
    double routed_fwd;            /* K routed experts of one MoE layer */
    double shared_fwd;            /* the shared expert of one MoE layer */
    double router_fwd;            /* router GEMM of one MoE layer (executed, not in model FLOPs) */
    double mtp_extra_fwd;         /* one MTP layer's norms and eh projection */
};

/* Model FLOPs of one sequence, forward + backward, by part. Sums to `total`. */
struct moe_flops_breakdown {
    double attn_proj;      /* attention projection GEMMs, all layers incl. MTP */
    double core_attn;      /* QK^T and PV, causal half, windowed layers counted full (Megatron) */
    double dense_mlp;      /* dense MLP layers (incl. a dense MTP layer) */
    double routed_experts; /* K routed experts per MoE layer (incl. MoE MTP layers) */
    double shared_experts; /* shared experts per MoE layer */
    double logits;         /* output layer, main + one pass per MTP layer */
    double mtp_extra;      /* MTP norms and eh projections */
    double total;          /* sum of the above = moe_flops_per_sequence */
    double core_attn_exec; /* executed core attention with sliding windows applied (not in total) */
    double router_exec;    /* executed router GEMMs (not in total: Megatron excludes the router) */
};

/* Forward FLOPs per token of one module of each kind, at sequence length s. */
struct moe_flops_layer {
    double attn_proj;        /* attention GEMMs of one layer */
    double core_attn;        /* core attention of one layer, full causal (Megatron's count) */
    double core_attn_window; /* core attention a windowed layer executes (== core_attn if none) */
    double dense_mlp;        /* one dense MLP */
    double one_expert;       /* one routed expert, per token routed to it */
    double routed_experts;   /* K routed experts (per token of the layer) */
    double shared_experts;   /* shared expert of one MoE layer */
    double router;           /* router GEMM of one MoE layer (executed only) */
    double logits;           /* one logits pass (padded vocabulary) */
    double mtp_extra;        /* one MTP layer's norms and eh projection */
};

/* Reduce cfg to terms (one pass over the layer flags). */
void moe_flops_terms_init(const struct moe_model_cfg *cfg, struct moe_flops_terms *terms);

/* Model FLOPs (fwd+bwd) of one sequence of seq tokens at tensor-parallel size tp (pads V).
 * seq <= 0 gives 0; tp < 1 is taken as 1. */
double moe_flops_terms_per_sequence(const struct moe_flops_terms *terms, int seq, int tp);
void moe_flops_terms_breakdown(const struct moe_flops_terms *terms,
                               int seq,
                               int tp,
                               struct moe_flops_breakdown *out);
void moe_flops_terms_layer(const struct moe_flops_terms *terms,
                           int seq,
                           int tp,
                           struct moe_flops_layer *out);

/* The same from a cfg (each call runs moe_flops_terms_init: use the _terms forms in hot loops). */
double moe_flops_per_sequence(const struct moe_model_cfg *cfg, int seq, int tp);
/* Model FLOPs of one global batch of gbs sequences: gbs * per_sequence. */
double moe_flops_per_step(const struct moe_model_cfg *cfg, int seq, int gbs, int tp);
/* Model FLOPs per token (fwd+bwd) = per_sequence / seq. */
double moe_flops_per_token(const struct moe_model_cfg *cfg, int seq, int tp);
void moe_flops_breakdown(const struct moe_model_cfg *cfg,
                         int seq,
                         int tp,
                         struct moe_flops_breakdown *out);
void moe_flops_layer_fwd(const struct moe_model_cfg *cfg,
                         int seq,
                         int tp,
                         struct moe_flops_layer *out);

#ifdef __cplusplus
}
#endif

#endif /* MOE_MODEL_FLOPS_H */
