/*
 * Per-GPU memory by category for one pipeline stage: weights, gradients, optimizer states,
 * activations (module by module, MoE-aware, times micro-batches in flight), buffers.
 *
 * Conventions (each cited where computed in memory.c): Megatron-LM mixed precision (BF16 weights,
 * FP32 main grads, FP32 master + Adam moments; distributed optimizer shards optimizer state over
 * DP x CP for dense parameters and over EDP for experts -- Megatron docs "distributed optimizer");
 * activations after Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
 * Models" (2022), extended to MLA, routed and shared experts; micro-batches in flight from
 * Megatron's 1F1B / interleaved warm-up counts. Pure functions; no I/O.
 */
#ifndef MOE_MODEL_MEMORY_H
#define MOE_MODEL_MEMORY_H

#include "model/cluster.h"
#include "model/config.h"
#include "model/cost.h"
#include "model/layout.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What one pipeline rank holds (counted over its chunks). */
struct moe_stage_contents {
    int num_dense;    /* dense decoder layers */
    int num_moe;      /* MoE decoder layers */
    int num_windowed; /* of those, sliding-window attention layers */
    int num_mtp;      /* MTP layers (each a layer of the last decoder layer's kind + projections) */
    bool has_embedding;
    bool has_loss;          /* output layer + loss */
    bool has_output_weight; /* holds an output weight (untied, or tied copy when pp > 1, or MTP) */
    int num_chunks;         /* virtual stages on this rank (vpp) */
    int max_chunk_layers;   /* largest chunk, layers incl. MTP */
};

/* Fill what pipeline rank `stage` holds from the resolved layout's chunks. */
void moe_mem_stage_contents(const struct moe_model_cfg *cfg,
                            const struct moe_layout *lay,
                            int stage,
                            struct moe_stage_contents *out);

/* Decoder layers of one chunk by kind: n[is_moe][is_windowed]. */
struct moe_chunk_kinds {
    int n[2][2];
};

void moe_mem_chunk_kinds(const struct moe_model_cfg *cfg,
                         const struct moe_pp_chunk *ch,
                         struct moe_chunk_kinds *out);

/* moe_mem_stage_contents from precomputed kinds[num_chunks] (the hot path). */
void moe_mem_stage_contents_from(const struct moe_model_cfg *cfg,
                                 const struct moe_layout *lay,
                                 int stage,
                                 const struct moe_chunk_kinds *kinds,
                                 struct moe_stage_contents *out);

/* Parameters held by one GPU of a stage, split by how the optimizer shards them (elements). */
struct moe_gpu_params {
    double dense;  /* sharded over DP x CP by the distributed optimizer */
    double expert; /* routed experts: sharded over EDP */
    double gemm;   /* of dense+expert, weights used as GEMM operands (FP8 caches apply) */
};

/* Per-layer parameter counts on one GPU after TP/EP/ETP splits (elements), computed once. */
struct moe_param_units {
    double attn_gemm, attn_other;     /* attention block GEMM weights; norms (and biases) */
    double dense_mlp, dense_other;    /* dense MLP weights; its norm and bias */
    double shared, moe_other;         /* shared expert weights; MoE norm, router, expert bias */
    double experts_gemm, experts_all; /* local routed experts: GEMM weights; with biases */
    double embed;                     /* one V_padded x h / tp table */
    double mtp_gemm, mtp_other;       /* per MTP layer: eh_proj; three norms */
    double final_norm;
    bool last_is_moe; /* MTP layers copy the last decoder layer's kind */
    bool is_tied;     /* tied embeddings (the output copy doubles as MTP's embedding) */
};

void moe_mem_param_units(const struct moe_model_cfg *cfg,
                         const struct moe_layout *lay,
                         struct moe_param_units *u);
void moe_mem_gpu_params_from(const struct moe_param_units *u,
                             const struct moe_stage_contents *sc,
                             struct moe_gpu_params *out);

void moe_mem_gpu_params(const struct moe_model_cfg *cfg,
                        const struct moe_layout *lay,
                        const struct moe_stage_contents *sc,
                        struct moe_gpu_params *out);

/* What moe_mem_layer_activations applies (bit set). */
enum {
    MOE_MEM_APPLY_RECOMPUTE = 1u << 0, /* selective recompute modules drop their tensors */
    MOE_MEM_APPLY_OFFLOAD = 1u << 1,   /* fine-grained offload modules move to host */
};

/*
 * Saved activations of one layer for one micro-batch on one GPU (bytes), after recompute, offload
 * and precision options. is_moe selects the MoE block; load_factor scales the tokens the busiest
 * EP rank receives. apply is a MOE_MEM_APPLY_* set (0: everything a layer would save).
 */
void moe_mem_layer_activations(const struct moe_model_cfg *cfg,
                               const struct moe_layout *lay,
                               const struct moe_options *opt,
                               bool is_moe,
                               double load_factor,
                               unsigned apply,
                               struct moe_act_bytes *out);

/* Micro-batches (or chunk-micro-batches when vpp > 1) whose activations stage p holds at peak. */
int moe_mem_inflight(const struct moe_layout *lay, int stage);

/*
 * Full memory of pipeline rank `stage`: fills *out (capacity from the cluster) and returns the
 * bytes moved to host memory in out->host_offload.
 */
void moe_mem_stage(const struct moe_model_cfg *cfg,
                   const struct moe_cluster *cl,
                   const struct moe_layout *lay,
                   const struct moe_options *opt,
                   int stage,
                   double load_factor,
                   struct moe_mem_bytes *out);

/* One layer's activations per kind, computed once per prediction: [0] as saved without options,
 * [1] after recompute, [2] after recompute and fine-grained offload. */
struct moe_mem_layer_set {
    struct moe_act_bytes dense[3];
    struct moe_act_bytes moe[3];
    double load_factor;
    /* Backward working set of one layer (gradients live at once, freed after the layer's
     * backward): [0] dense layer, [1] MoE layer. */
    double bwd_working[2];
    /* Per MTP layer, beyond its transformer layer: what the MTP block saves around it (bytes of one
     * micro-batch); and once per stage with MTP layers, the final norm's output they start from. */
    double mtp_extra;
    double mtp_input;
};

void moe_mem_layer_set_init(const struct moe_model_cfg *cfg,
                            const struct moe_layout *lay,
                            const struct moe_options *opt,
                            double load_factor,
                            struct moe_mem_layer_set *set);

/* moe_mem_stage from precomputed contents, parameters and layer activations (the hot path). */
void moe_mem_stage_with(const struct moe_model_cfg *cfg,
                        const struct moe_cluster *cl,
                        const struct moe_layout *lay,
                        const struct moe_options *opt,
                        int stage,
                        const struct moe_stage_contents *sc,
                        const struct moe_gpu_params *params,
                        const struct moe_mem_layer_set *set,
                        struct moe_mem_bytes *out);

/* The terms of moe_mem_stage_with that no stage changes, for one option set, layer set and layout
 * (bytes per element or parameter, shards, the loss stage's logits, a MoE stage's EP buffers). */
struct moe_mem_stage_terms {
    double ab;                        /* BF16 (or FP32) weight bytes */
    double gemm_weight_bytes;         /* a GEMM weight: its copy plus the recipe's cached copies */
    double grad_bytes;                /* main gradient bytes per parameter */
    double per_param_opt;             /* master weight and moments, bytes per parameter */
    double dense_shard, expert_shard; /* distributed optimizer's shards (1 without) */
    double offload_frac;              /* optimizer state on host (with optimizer_cpu_offload) */
    double chunk_share;               /* a chunk-micro-batch's share of a stage's layers */
    double logits;                    /* logits elements of one micro-batch (loss stage) */
    double ep_buffers;                /* EP / ETP buffers of a stage with MoE layers, bytes */
};
/* The same figures as moe_mem_stage_with in two steps, for the stages of one option set: the
 * terms once, then each stage. */
void moe_mem_stage_terms_init(const struct moe_model_cfg *cfg,
                              const struct moe_cluster *cl,
                              const struct moe_layout *lay,
                              const struct moe_options *opt,
                              const struct moe_mem_layer_set *set,
                              struct moe_mem_stage_terms *terms);
void moe_mem_stage_with_terms(const struct moe_model_cfg *cfg,
                              const struct moe_cluster *cl,
                              const struct moe_layout *lay,
                              const struct moe_options *opt,
                              int stage,
                              const struct moe_stage_contents *sc,
                              const struct moe_gpu_params *params,
                              const struct moe_mem_layer_set *set,
                              const struct moe_mem_stage_terms *terms,
                              struct moe_mem_bytes *out);

/*
 * Every option the memory model reads (moe_mem_stage_with and the layer views), in canonical form:
 * two option sets with equal keys (memcmp) have equal memory for one model, cluster, layout and
 * load factor. Options it does not read (overlaps, grouped GEMM, CUDA graphs, the dispatcher beyond
 * the kind of buffer it allocates) and fields of a disabled feature (the modules of a recompute
 * that is not selective, the offload fraction of an optimizer kept on the GPU) are left out, so a
 * caller can share one memory figure among option sets that differ only there (the planner does).
 */
struct moe_mem_opt_key {
    uint64_t bits[2];
    double optimizer_offload_fraction;
};

void moe_mem_opt_key(const struct moe_cluster *cl,
                     const struct moe_options *opt,
                     struct moe_mem_opt_key *key);

/*
 * Bytes per element of a tensor stored in the recipe's GEMM-input format, scales included (BF16 2;
 * FP8 1; blockwise adds an FP32 scale per 128, MXFP8 an E8M0 scale per 32, NVFP4 half a byte plus
 * an E4M3 scale per 16).
 */
double moe_mem_recipe_elem_bytes(enum moe_recipe r);

/* Bytes of one element in a storage dtype. */
double moe_dtype_bytes(enum moe_dtype d);

#ifdef __cplusplus
}
#endif

#endif /* MOE_MODEL_MEMORY_H */
