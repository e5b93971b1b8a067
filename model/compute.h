/*
 * Per-layer time of one micro-batch on one GPU: compute (per-op roofline with shape-dependent GEMM
 * efficiency), the communication each layer issues (TP/SP, ETP, CP, EP dispatch/combine),
 * recompute, offload copies and host launch time. All times unhidden; model/cost.c decides what
 * overlaps.
 *
 * Op list follows Megatron-Core's transformer layer (norm -> attention -> residual -> norm -> MLP
 * or MoE -> residual) with Transformer Engine kernels; FLOPs per GEMM are 2*m*n*k, attention core
 * is FlashAttention's 4*s_q*s_kv*d forward (causal: half the keys on average) and 2.5x that
 * backward (Dao, "FlashAttention-2", 2023: backward recomputes the scores).
 */
#ifndef MOE_MODEL_COMPUTE_H
#define MOE_MODEL_COMPUTE_H

#include "model/cluster.h"
#include "model/config.h"
#include "model/layout.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One layer (or the loss/embedding extras), one micro-batch, one GPU; seconds unless named. */
struct moe_layer_cost {
    double fwd_compute; /* non-expert GEMMs, attention, elementwise */
    double bwd_compute;
    double fwd_expert; /* routed + shared expert GEMMs and activation */
    double bwd_expert;
    double attn_core_fwd; /* attention core alone (CP overlap window) */
    double attn_core_bwd;
    double fwd_tp, bwd_tp;                                       /* TP/SP and ETP collectives */
    double fwd_cp, bwd_cp;                                       /* CP K/V exchange */
    double fwd_dispatch, fwd_combine, bwd_dispatch, bwd_combine; /* EP incl. permute/unpermute */
    /* Waiting for the busiest EP rank: the exchange after the expert GEMMs (forward combine,
     * backward dispatch) starts when the rank with load_factor x the mean rows is done, while
     * fwd_expert/bwd_expert hold a rank with the mean rows (what every rank does on average).
     * Not in fwd_combine / bwd_dispatch (which stay the transfers, independent of the expert
     * GEMMs' options): the busiest rank's expert time is fwd_expert + fwd_combine_wait. */
    double fwd_combine_wait, bwd_dispatch_wait;
    /* Recompute: the forward work re-run in backward, by the phase of the op re-run (seconds per
     * recomputed layer pass). recompute = rc_compute + rc_expert, the recomputed compute;
     * rc_combine_wait: the re-run forward combine's wait for the busiest EP rank. */
    double recompute;
    double rc_compute, rc_expert;   /* non-expert and expert compute re-run */
    double rc_tp, rc_cp;            /* TP/SP/ETP and CP collectives re-issued */
    double rc_dispatch, rc_combine; /* EP dispatch / combine re-issued (full or moe recompute) */
    double rc_combine_wait;
    double rc_host;            /* host time of the re-run ops */
    double rc_host_sync;       /* host synchronisations of the re-run ops (exposed) */
    double offload_copy;       /* host copies of offloaded activations (each way) */
    double host_fwd, host_bwd; /* CPU launch time */
    double host_sync;          /* exposed host synchronisation (dropless token counts) */
    double host_fwd_post;      /* part of host_fwd launched after that synchronisation */
    double fwd_shared;         /* shared experts' forward, inside fwd_expert */
    double tp_bytes, cp_bytes, ep_bytes, ep_inter_bytes; /* sent per layer pass, fwd+bwd */
};

/* Kind of decoder layer. */
struct moe_layer_kind {
    bool is_moe;
    bool is_windowed;
};

/*
 * Cost of one decoder layer of `kind`. load_factor >= 1 is the busiest EP rank's expert tokens over
 * the mean: expert time is priced at the mean and the difference as the wait of the exchange that
 * follows the expert GEMMs (fwd_combine_wait, bwd_dispatch_wait).
 * offload_bytes: activation bytes this layer moves to host per micro-batch (0 if none).
 */
void moe_compute_layer(const struct moe_model_cfg *cfg,
                       const struct moe_cluster *cl,
                       const struct moe_layout *lay,
                       const struct moe_options *opt,
                       struct moe_layer_kind kind,
                       double load_factor,
                       double offload_bytes,
                       struct moe_layer_cost *out);

/*
 * Host work of one layer's forward pass (model/compute.c host_layer): Python-level calls (py) and
 * kernels launched from C++ inside them (cpp); py_post, cpp_post: the part launched after the
 * dropless token counts' synchronisation; syncs: host synchronisations; moe_py, moe_cpp: the MoE
 * block's part (router onwards), included in py and cpp. Counts per layer pass.
 */
struct moe_host_counts {
    double py, cpp, py_post, cpp_post, syncs, moe_py, moe_cpp;
};

/*
 * moe_compute_layer in two steps, for a caller that costs one layer under many recompute and
 * activation-offload values (model/cost.c keeps the first step per workspace).
 * moe_compute_layer_base reads neither knob, nor the offload bytes; moe_compute_layer_finish adds
 * what they change: the rc_* terms, recompute, the offload copy and the host times.
 * moe_compute_layer is the two in turn, so a base reused for options that differ only in
 * recompute or offload (and in knobs neither step reads) gives its results bit for bit.
 */
struct moe_layer_base {
    struct moe_layer_cost lc;    /* the layer without recompute, offload or host terms */
    double moe_compute_f;        /* MoE block's non-expert forward compute (router, permutes) */
    double moe_tp_f;             /* MoE block's TP-group collectives, forward */
    double expert_act_f;         /* routed experts' activation, forward */
    double shared_f;             /* shared experts' forward (inside lc.fwd_expert) */
    double mlp_f, mlp_tp;        /* dense MLP: GEMMs forward; TP collectives per pass */
    double core_f, norm_f, up_f; /* forward: attention core, one norm, MLA's up projections */
    struct moe_host_counts hc;   /* host work of the forward */
    double param_tensors;        /* parameter tensors with a backward hook (host work) */
};
void moe_compute_layer_base(const struct moe_model_cfg *cfg,
                            const struct moe_cluster *cl,
                            const struct moe_layout *lay,
                            const struct moe_options *opt,
                            struct moe_layer_kind kind,
                            double load_factor,
                            struct moe_layer_base *base);
/*
 * moe_compute_layer_base is itself two steps: moe_compute_layer_attn (attention, its collectives,
 * context parallelism; of the options it reads only the recipe, FP32 training and the
 * main-gradient type) fills *base, then moe_compute_layer_block adds the dense MLP or MoE block and
 * the host call counts to it. A caller costing one layer kind under options that differ elsewhere
 * (grouped GEMM, dispatcher: the planner's bounds) runs the first once and the second on copies.
 */
void moe_compute_layer_attn(const struct moe_model_cfg *cfg,
                            const struct moe_cluster *cl,
                            const struct moe_layout *lay,
                            const struct moe_options *opt,
                            struct moe_layer_kind kind,
                            struct moe_layer_base *base);
void moe_compute_layer_block(const struct moe_model_cfg *cfg,
                             const struct moe_cluster *cl,
                             const struct moe_layout *lay,
                             const struct moe_options *opt,
                             struct moe_layer_kind kind,
                             double load_factor,
                             struct moe_layer_base *base);
void moe_compute_layer_finish(const struct moe_model_cfg *cfg,
                              const struct moe_cluster *cl,
                              const struct moe_layout *lay,
                              const struct moe_options *opt,
                              struct moe_layer_kind kind,
                              const struct moe_layer_base *base,
                              double offload_bytes,
                              struct moe_layer_cost *out);

/* Host seconds of the pipeline schedule's own work outside the layers for `chunks` model-chunk
 * passes of one micro-batch (forward or backward) with `transfers` pipeline transfers received or
 * sent (model/compute.c host_ops); none under a full-iteration CUDA graph. */
double moe_compute_sched_host_s(const struct moe_cluster *cl,
                                const struct moe_options *opt,
                                int chunks,
                                int transfers,
                                bool backward);

/* Seconds to copy `bytes` of activations to host memory over the host link (offload). */
double moe_compute_offload_copy_s(const struct moe_cluster *cl, double bytes);

/* Output layer + cross-entropy (one logits pass) and, per MTP layer, its eh projection. */
void moe_compute_loss(const struct moe_model_cfg *cfg,
                      const struct moe_cluster *cl,
                      const struct moe_layout *lay,
                      const struct moe_options *opt,
                      struct moe_layer_cost *out);
void moe_compute_mtp_extra(const struct moe_model_cfg *cfg,
                           const struct moe_cluster *cl,
                           const struct moe_layout *lay,
                           const struct moe_options *opt,
                           struct moe_layer_cost *out);
void moe_compute_embedding(const struct moe_model_cfg *cfg,
                           const struct moe_cluster *cl,
                           const struct moe_layout *lay,
                           const struct moe_options *opt,
                           struct moe_layer_cost *out);

/*
 * Time of one GEMM (m x k) . (k x n) at math precision `math` on this GPU: max of FLOPs at the
 * shape-dependent efficiency (times eff_scale, the recipe's kernel factor; 1 for BF16) and bytes at
 * achieved HBM bandwidth. in_bytes per input element.
 */
double moe_compute_gemm_s(const struct moe_gpu *gpu,
                          enum moe_math math,
                          double eff_scale,
                          double m,
                          double n,
                          double k,
                          double in_bytes);

#ifdef __cplusplus
}
#endif

#endif /* MOE_MODEL_COMPUTE_H */
