/*
 * Private to the layout module (model/layout*.c): what its files share. Public API:
 * model/layout.h.
 *
 * The module's files:
 *   layout.c          defaults, the parallel sizes, batch and sequence rules, moe_layout_resolve
 *                     (every check in order) and the rank mapping;
 *   layout_names.c    names of the option enums and module sets, and their parsing;
 *   layout_pp.c       the pipeline layout string [P] (parse, count, format) and the placement of
 *                     decoder/MTP layers, embedding and loss on the pp*vpp chunks;
 *   layout_options.c  the training options' rules (precision, optimizer, MoE, recompute, offload,
 *                     CUDA graphs) and the hardware rules of a cluster.
 * Each rule names its source in Megatron-LM main (2025-26):
 *   [A] megatron/training/arguments.py, validate_args
 *   [T] megatron/core/transformer/transformer_config.py, TransformerConfig.__post_init__
 *   [O] megatron/core/optimizer/optimizer_config.py, OptimizerConfig.__post_init__
 *   [S] megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving
 *   [P] megatron/core/transformer/pipeline_parallel_layer_layout.py
 *   [Y] megatron/training/yaml_arguments.py (MoE with TP needs sequence parallelism)
 */
#ifndef MOE_MODEL_LAYOUT_INTERNAL_H
#define MOE_MODEL_LAYOUT_INTERNAL_H

#include "model/config.h"
#include "model/layout.h"
#include "model/status.h"

#include <stdbool.h>

/* ---- Model predicates (here so the module needs nothing but the config struct) --------------- */

static inline int cfg_layers(const struct moe_model_cfg *cfg)
{
    int n = cfg->num_layers;
    return n < 0 ? 0 : (n > MOE_MAX_LAYERS ? MOE_MAX_LAYERS : n);
}

/* Routed experts on at least one decoder layer. */
static inline bool cfg_has_moe(const struct moe_model_cfg *cfg)
{
    if (cfg->num_experts <= 0) {
        return false;
    }
    for (int i = 0; i < cfg_layers(cfg); i++) {
        if (cfg->layer_flags[i] & MOE_LAYER_MOE) {
            return true;
        }
    }
    return false;
}

/* At least one decoder layer with a dense MLP (or an MTP layer, which copies the last layer). */
static inline bool cfg_has_dense(const struct moe_model_cfg *cfg)
{
    if (!cfg_has_moe(cfg)) {
        return cfg->num_layers > 0;
    }
    for (int i = 0; i < cfg_layers(cfg); i++) {
        if (!(cfg->layer_flags[i] & MOE_LAYER_MOE)) {
            return true;
        }
    }
    return false;
}

static inline bool recipe_is_fp8(enum moe_recipe r)
{
    return r == MOE_RECIPE_FP8_TENSORWISE || r == MOE_RECIPE_FP8_DELAYED ||
           r == MOE_RECIPE_FP8_BLOCKWISE;
}

/* ---- Shared between the files ---------------------------------------------------------------- */

/* Place decoder/MTP layers, embedding and loss on the pp*vpp chunks (layout_pp.c): the custom
 * layout string's chunks, the first/last-stage counts, or an even split (suggesting a balanced
 * layout string when the layers do not divide). MOE_ERR_INVALID with diag. */
MOE_NODISCARD enum moe_status moe_layout_place_chunks(const struct moe_model_cfg *cfg,
                                                      struct moe_layout *lay,
                                                      struct moe_diag *diag);
/* Every training-option rule for cfg on lay (layout_options.c). MOE_ERR_INVALID /
 * MOE_ERR_UNSUPPORTED with diag naming the flag. */
MOE_NODISCARD enum moe_status moe_layout_check_options(const struct moe_model_cfg *cfg,
                                                       const struct moe_layout *lay,
                                                       const struct moe_options *opt,
                                                       struct moe_diag *diag);
/* The recipe against the cluster's GPU (FP8, MX/NV block formats). MOE_ERR_UNSUPPORTED. */
MOE_NODISCARD enum moe_status moe_layout_check_hardware(const struct moe_cluster *cl,
                                                        const struct moe_options *opt,
                                                        struct moe_diag *diag);

#endif /* MOE_MODEL_LAYOUT_INTERNAL_H */
