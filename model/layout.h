/*
 * Parallel layout (parallel folding) and training options: what a plan fixes besides the model and
 * the cluster. Names and meanings follow Megatron-LM's flags so plans transfer both ways.
 *
 * Folding (DESIGN.md): attention layers use TP x CP x DP x PP, MoE layers ETP x EP x EDP x PP over
 * the same ranks, so TP*CP*DP == ETP*EP*EDP and world = TP*CP*DP*PP. Rank r has stage r / s with
 * s = TP*CP*DP, local l = r % s; tp = l % TP, cp = (l/TP) % CP, dp = l/(TP*CP);
 * etp = l % ETP, ep = (l/ETP) % EP, edp = l/(ETP*EP).
 *
 * The pipeline layout places decoder layers, MTP layers, embedding and loss on the PP*VPP virtual
 * stages ("chunks"); chunk c = v*PP + p lives on pipeline rank p (Megatron's interleaved order).
 */
#ifndef MOE_MODEL_LAYOUT_H
#define MOE_MODEL_LAYOUT_H

#include "model/cluster.h"
#include "model/config.h"
#include "model/status.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_MAX_PP_CHUNKS 512 /* PP x VPP virtual stages */

/* Precision recipe of the GEMMs (Megatron --fp8-recipe / --fp4-recipe). */
enum moe_recipe {
    MOE_RECIPE_BF16 = 0,
    MOE_RECIPE_FP8_TENSORWISE = 1, /* current scaling, per tensor */
    MOE_RECIPE_FP8_DELAYED = 2,    /* delayed scaling (amax history) */
    MOE_RECIPE_FP8_BLOCKWISE = 3,  /* 1x128 activations, 128x128 weights */
    MOE_RECIPE_MXFP8 = 4,          /* 32-element blocks, E8M0 scales (Blackwell) */
    MOE_RECIPE_NVFP4 = 5,          /* 16-element blocks, E4M3 scales + FP32 tensor scale */
    MOE_NUM_RECIPES = 6,
};

enum moe_dispatcher {
    MOE_DISPATCH_ALLTOALL = 0,  /* NCCL all-to-all-v, one copy per (token, expert) */
    MOE_DISPATCH_ALLGATHER = 1, /* all-gather tokens over EP, local experts pick theirs */
    MOE_DISPATCH_DEEPEP = 2,    /* flex/deepep: one copy per remote node, NVLink forwarding */
    MOE_DISPATCH_HYBRIDEP = 3,  /* flex/hybridep: as DeepEP, fewer SMs, NVL72-aware */
    MOE_NUM_DISPATCHERS = 4,
};

enum moe_recompute_granularity {
    MOE_RECOMPUTE_NONE = 0,
    MOE_RECOMPUTE_SELECTIVE = 1,
    MOE_RECOMPUTE_FULL = 2,
};

enum moe_recompute_method {
    MOE_RECOMPUTE_UNIFORM = 0, /* full: every recompute_num_layers layers form a checkpoint chunk */
    MOE_RECOMPUTE_BLOCK = 1,   /* full: first recompute_num_layers layers per stage recomputed */
};

/* --recompute-modules (selective); bit set. */
enum {
    MOE_RC_CORE_ATTN = 1u << 0,
    MOE_RC_MOE_ACT = 1u << 1,
    MOE_RC_LAYERNORM = 1u << 2,
    MOE_RC_MLA_UP_PROJ = 1u << 3,
    MOE_RC_MLP = 1u << 4,
    MOE_RC_MOE = 1u << 5,
    MOE_RC_SHARED_EXPERTS = 1u << 6,
    MOE_RC_ALL = (1u << 7) - 1,
};

/* --offload-modules (fine-grained activation offloading); bit set. */
enum {
    MOE_OFF_ATTN_NORM = 1u << 0,
    MOE_OFF_QKV_LINEAR = 1u << 1,
    MOE_OFF_CORE_ATTN = 1u << 2,
    MOE_OFF_ATTN_PROJ = 1u << 3,
    MOE_OFF_MLP_NORM = 1u << 4,
    MOE_OFF_EXPERT_FC1 = 1u << 5,
    MOE_OFF_MOE_ACT = 1u << 6,
    MOE_OFF_ALL = (1u << 7) - 1,
};

/* Storage dtype for main grads and Adam moments (precision-aware optimizer). */
enum moe_dtype {
    MOE_DTYPE_FP32 = 0,
    MOE_DTYPE_BF16 = 1,
    MOE_DTYPE_FP16 = 2,
    MOE_DTYPE_FP8 = 3,
};

enum moe_cuda_graph_impl {
    MOE_CG_NONE = 0,
    MOE_CG_LOCAL = 1,
    MOE_CG_TE = 2, /* transformer_engine */
};

/* --cuda-graph-modules; bit set. FULL_ITERATION graphs the whole step. */
enum {
    MOE_CGM_ATTN = 1u << 0,
    MOE_CGM_MLP = 1u << 1,
    MOE_CGM_MOE = 1u << 2,
    MOE_CGM_MOE_ROUTER = 1u << 3,
    MOE_CGM_MOE_PREPROCESS = 1u << 4,
    MOE_CGM_FULL_ITERATION = 1u << 5,
};

/* One virtual pipeline stage (chunk) of the pipeline layout. */
struct moe_pp_chunk {
    uint16_t first_layer; /* index of its first decoder layer (valid when num_layers > 0) */
    uint16_t num_layers;  /* decoder layers in this chunk */
    uint8_t num_mtp;      /* MTP layers in this chunk */
    uint8_t has_embedding;
    uint8_t has_loss; /* output layer + loss */
    uint8_t pad_;
};

struct moe_layout {
    int num_gpus;         /* world size = tp*cp*dp*pp */
    int tp;               /* tensor parallel */
    int cp;               /* context parallel */
    int dp;               /* data parallel (attention side) */
    int pp;               /* pipeline stages */
    int vpp;              /* virtual stages per pipeline rank (1 = no interleaving) */
    int ep;               /* expert parallel */
    int etp;              /* expert tensor parallel */
    int edp;              /* expert data parallel = tp*cp*dp / (etp*ep) */
    int mbs;              /* micro-batch size, sequences */
    int gbs;              /* global batch size, sequences */
    int num_microbatches; /* gbs / (mbs*dp) */
    int seq_length;       /* tokens per sequence for this run */
    bool sequence_parallel;

    /* Pipeline layout: chunks[pp*vpp] in Megatron's chunk order, filled by moe_layout_resolve. */
    int first_stage_layers;    /* --decoder-first-pipeline-num-layers, 0 = even split */
    int last_stage_layers;     /* --decoder-last-pipeline-num-layers, 0 = even split */
    bool has_custom_pp_layout; /* chunks[] came from a --pipeline-model-parallel-layout string */
    int num_chunks;            /* pp*vpp once resolved */
    struct moe_pp_chunk chunks[MOE_MAX_PP_CHUNKS];
};

struct moe_options {
    enum moe_recipe recipe;
    bool is_fp32_training;          /* weights and activations in FP32 (moefold's CPU engine);
                                       false: BF16 mixed precision (Megatron --bf16) */
    bool fp8_param_gather;          /* FP8 (or MX) weights all-gathered for DP */
    bool use_distributed_optimizer; /* ZeRO-1 style sharding over DP / EDP */
    bool overlap_grad_reduce;
    bool overlap_param_gather;
    bool tp_comm_overlap;     /* userbuffers TP overlap */
    bool overlap_moe_ep_comm; /* --overlap-moe-expert-parallel-comm (1F1B A2A overlap) */
    bool delay_wgrad_compute;
    bool moe_grouped_gemm;
    bool force_load_balancing; /* --moe-router-force-load-balancing */
    bool precision_aware_optimizer;
    bool optimizer_cpu_offload;
    double optimizer_offload_fraction; /* of optimizer state on host when offloaded, (0,1] */
    enum moe_dtype main_grads_dtype;
    enum moe_dtype exp_avg_dtype;
    enum moe_dtype exp_avg_sq_dtype;
    enum moe_dispatcher dispatcher;
    bool is_unfused_dispatch; /* DeepEP/HybridEP ran as separate passes (moefold's CPU engine):
                                 the permutes, and on the hierarchical path each node's token
                                 copies, their sums and the proxy's forwarding copy, each a
                                 memory pass; false: fused into the exchange kernels */
    double capacity_factor;   /* 0 = dropless */
    /* Router load-balancing losses (--moe-router-load-balancing-type / --moe-aux-loss-coeff),
     * each coefficient 0 when off. Each sums the step's token counts per expert with one
     * all-reduce per MoE layer forward: aux_loss (Switch / GShard, per batch) and seq_aux_loss
     * (DeepSeek-V2, per sequence) over the TP x CP group, global_aux_loss over TP x DP x CP. */
    double aux_loss_coeff;
    double seq_aux_loss_coeff;
    double global_aux_loss_coeff;

    enum moe_recompute_granularity recompute;
    enum moe_recompute_method recompute_method;
    int recompute_num_layers;   /* full: layers per chunk (uniform) or per stage (block) */
    unsigned recompute_modules; /* MOE_RC_* for selective */

    int cpu_offloading_num_layers; /* layers whose activations go to host (0 = off) */
    bool fine_grained_offload;     /* --fine-grained-activation-offloading */
    unsigned offload_modules;      /* MOE_OFF_* for fine-grained offloading */

    enum moe_cuda_graph_impl cuda_graph_impl;
    unsigned cuda_graph_modules; /* MOE_CGM_* */

    double moe_imbalance; /* max/mean expert load factor >= 1; 0 = auto (Monte Carlo) */
    /* Share of a rank's local experts that hold rows in a grouped GEMM call, in (0, 1]; 0 = all
     * of them (balanced routing). A router that sends a micro-batch's tokens to a few experts
     * runs fewer, larger GEMMs: compare sets it from the run (run.json expert_active_fraction). */
    double moe_active_expert_frac;
    int moe_hot_expert_replicas; /* hottest experts cloned onto other EP ranks (ECHO);
                                    0 .. E/EP and only with ep > 1 (moe_layout_resolve) */
};

/* Megatron-LM's defaults: BF16, no overlap, alltoall, no recompute, vpp 1, imbalance 1. */
void moe_options_init(struct moe_options *opt);
/* Zero the layout and set tp=cp=dp=pp=vpp=ep=etp=edp=mbs=1. */
void moe_layout_init(struct moe_layout *lay);

/* Short names (for tables and files): "bf16", "fp8-tensorwise", ...; "alltoall", ...; */
const char *moe_recipe_name(enum moe_recipe r);
const char *moe_dispatcher_name(enum moe_dispatcher d);
/* Parse those names; MOE_ERR_PARSE with diag listing the accepted names. */
MOE_NODISCARD enum moe_status
moe_recipe_parse(const char *s, enum moe_recipe *out, struct moe_diag *diag);
MOE_NODISCARD enum moe_status
moe_dispatcher_parse(const char *s, enum moe_dispatcher *out, struct moe_diag *diag);
/* Math precision the recipe's GEMMs run at (FP8 recipes -> MOE_MATH_FP8, NVFP4 -> FP4). */
enum moe_math moe_recipe_math(enum moe_recipe r);

/*
 * Complete a layout for num_gpus: derive dp = N/(tp*cp*pp), edp = tp*cp*dp/(etp*ep) and
 * num_microbatches, and, unless has_custom_pp_layout, fill chunks[] by Megatron's rule (even split,
 * or first/last stage counts with the rest even; embedding on chunk 0, loss and MTP on the last).
 * Every Megatron validity rule is checked here with a message saying what to change; when layers do
 * not divide over pp*vpp the message suggests a balanced --pipeline-model-parallel-layout string.
 */
MOE_NODISCARD enum moe_status moe_layout_resolve(const struct moe_model_cfg *cfg,
                                                 const struct moe_cluster *cl,
                                                 const struct moe_options *opt,
                                                 struct moe_layout *lay,
                                                 struct moe_diag *diag);

/*
 * Parse a Megatron pipeline layout string ("Et|(tt|)*30mL": E embedding, t decoder layer, m MTP
 * layer, L loss, | between chunks, (...)*N repeats) into lay->chunks for pp*vpp chunks. Sets
 * has_custom_pp_layout. Errors name the column.
 */
MOE_NODISCARD enum moe_status moe_layout_parse_pp_string(const char *s,
                                                         const struct moe_model_cfg *cfg,
                                                         struct moe_layout *lay,
                                                         struct moe_diag *diag);

/* Write the chunks of lay as a compact layout string into buf[len] (for plans and suggestions). */
void moe_layout_format_pp_string(const struct moe_layout *lay, char *buf, int len);

/*
 * Balanced chunks over lay->num_chunks (pp x vpp) when the layers do not divide: every chunk gets
 * ceil((L + mtp) / chunks) layers counting an MTP layer as one, the excess taken away from the
 * first, the last and the middle chunks from the back, round-robin (Megatron's suggestion;
 * DeepSeek-V3 on pp 16 x vpp 2 gives "Et|(tt|)*30mL"). Fills chunks[] with the embedding, loss
 * and MTP marks; leaves has_custom_pp_layout to the caller.
 */
void moe_layout_balanced_chunks(const struct moe_model_cfg *cfg, struct moe_layout *lay);

/*
 * Count the chunks (virtual pipeline stages) a layout string describes, as Megatron's
 * PipelineParallelLayerLayout.get_num_stages_from_str does, so a caller can derive
 * vpp = chunks / pp before parsing. MOE_ERR_PARSE naming the column on malformed text.
 */
MOE_NODISCARD enum moe_status
moe_layout_count_pp_chunks(const char *s, int *num_chunks, struct moe_diag *diag);

/*
 * Names of the other option enums, spelled as Megatron-LM's flags spell them: "none" /
 * "selective" / "full", "uniform" / "block", "fp32" / "bf16" / "fp16" / "fp8", "none" / "local" /
 * "transformer_engine". The parsers return MOE_ERR_PARSE with diag listing the accepted names.
 */
const char *moe_recompute_name(enum moe_recompute_granularity g);
const char *moe_recompute_method_name(enum moe_recompute_method m);
const char *moe_dtype_name(enum moe_dtype d);
const char *moe_cuda_graph_impl_name(enum moe_cuda_graph_impl impl);
MOE_NODISCARD enum moe_status
moe_recompute_parse(const char *s, enum moe_recompute_granularity *out, struct moe_diag *diag);
MOE_NODISCARD enum moe_status
moe_recompute_method_parse(const char *s, enum moe_recompute_method *out, struct moe_diag *diag);
MOE_NODISCARD enum moe_status
moe_dtype_parse(const char *s, enum moe_dtype *out, struct moe_diag *diag);
MOE_NODISCARD enum moe_status
moe_cuda_graph_impl_parse(const char *s, enum moe_cuda_graph_impl *out, struct moe_diag *diag);

/* The three module bit sets: --recompute-modules, --offload-modules, --cuda-graph-modules. */
enum moe_module_set {
    MOE_MODSET_RECOMPUTE = 0,  /* MOE_RC_* */
    MOE_MODSET_OFFLOAD = 1,    /* MOE_OFF_* */
    MOE_MODSET_CUDA_GRAPH = 2, /* MOE_CGM_* */
};
/* Megatron's name of one bit of a set ("core_attn", "expert_fc1", "moe_router", ...); NULL if the
 * value is not a single known bit. */
const char *moe_module_name(enum moe_module_set set, unsigned bit);
/* Parse one module name into its bit; MOE_ERR_PARSE listing the accepted names. */
MOE_NODISCARD enum moe_status
moe_module_parse(enum moe_module_set set, const char *name, unsigned *bit, struct moe_diag *diag);

/* Rank-mapping coordinates of global rank r (DESIGN.md order). */
struct moe_rank_coords {
    int stage, tp, cp, dp, etp, ep, edp;
};
void moe_layout_rank_coords(const struct moe_layout *lay, int rank, struct moe_rank_coords *out);

#ifdef __cplusplus
}
#endif

#endif /* MOE_MODEL_LAYOUT_H */
