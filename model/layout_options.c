/*
 * The training options' rules, each naming its Megatron-LM source (model/layout_internal.h):
 * precision recipes, the optimizer (distributed optimizer, CPU offload, state dtypes), MoE options
 * (dispatchers, EP overlap, capacity, router), recompute (selective modules, full uniform/block),
 * activation offload, CUDA graphs, and the recipe against the cluster's GPU. Each refusal says
 * what to change. The layout's own rules (sizes, batch, sequence, pipeline) are in
 * model/layout.c and model/layout_pp.c.
 */
#include "model/layout.h"
#include "model/layout_internal.h"

#include <math.h>

/* ------------------------------------------------------------------------------------------ */
/* Options                                                                                      */

static enum moe_status check_precision(const struct moe_options *opt, struct moe_diag *diag)
{
    if ((int)opt->recipe < 0 || opt->recipe >= MOE_NUM_RECIPES) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "unknown precision recipe %d", (int)opt->recipe);
    }
    moe_diag_source(diag, "--fp8-param-gather");
    /* [T] fp8_param must be used together with fp8 mode. */
    if (opt->fp8_param_gather && opt->recipe == MOE_RECIPE_BF16) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--fp8-param-gather needs an FP8/FP4 recipe (--fp8-format with "
                            "--fp8-recipe, or --fp4-format)");
    }
    /* [A] --fp8-param-gather only supported with distributed optimizer. */
    if (opt->fp8_param_gather && !opt->use_distributed_optimizer) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--fp8-param-gather needs --use-distributed-optimizer");
    }
    const enum moe_dtype dts[3] = {opt->main_grads_dtype, opt->exp_avg_dtype,
                                   opt->exp_avg_sq_dtype};
    const char *flags[3] = {"--main-grads-dtype", "--exp-avg-dtype", "--exp-avg-sq-dtype"};
    for (int i = 0; i < 3; i++) {
        moe_diag_source(diag, flags[i]);
        if ((int)dts[i] < 0 || dts[i] > MOE_DTYPE_FP8) {
            return moe_diag_set(diag, MOE_ERR_INVALID, "%s: unknown dtype %d", flags[i],
                                (int)dts[i]);
        }
        /* [O] non-fp32 optimizer dtypes only with the precision-aware optimizer. */
        if (dts[i] != MOE_DTYPE_FP32 && !opt->precision_aware_optimizer) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "%s %s needs --use-precision-aware-optimizer (else it must be "
                                "fp32)",
                                flags[i], moe_dtype_name(dts[i]));
        }
    }
    /* [A] --main-grads-dtype choices are fp32 and bf16. */
    if (opt->main_grads_dtype != MOE_DTYPE_FP32 && opt->main_grads_dtype != MOE_DTYPE_BF16) {
        moe_diag_source(diag, "--main-grads-dtype");
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--main-grads-dtype must be fp32 or bf16, not %s",
                            moe_dtype_name(opt->main_grads_dtype));
    }
    return MOE_OK;
}

static enum moe_status check_optimizer(const struct moe_options *opt, struct moe_diag *diag)
{
    moe_diag_source(diag, "--use-precision-aware-optimizer");
    /* [O] precision-aware optimizer only with the distributed optimizer. */
    if (opt->precision_aware_optimizer && !opt->use_distributed_optimizer) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--use-precision-aware-optimizer needs --use-distributed-optimizer");
    }
    moe_diag_source(diag, "--optimizer-cpu-offload");
    /* [A] optimizer CPU offload reuses the precision-aware optimizer's code path. */
    if (opt->optimizer_cpu_offload && !opt->precision_aware_optimizer) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--optimizer-cpu-offload needs --use-precision-aware-optimizer");
    }
    /* [A] with --fp8-param-gather, optimizer CPU offload needs --fp8-recipe delayed. */
    if (opt->optimizer_cpu_offload && opt->fp8_param_gather &&
        opt->recipe != MOE_RECIPE_FP8_DELAYED) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--optimizer-cpu-offload with --fp8-param-gather needs --fp8-recipe "
                            "delayed");
    }
    double f = opt->optimizer_offload_fraction;
    if (!isfinite(f) || f < 0.0 || f > 1.0 || (opt->optimizer_cpu_offload && f <= 0.0)) {
        moe_diag_source(diag, "--optimizer-offload-fraction");
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--optimizer-offload-fraction %g must be in (0, 1] when offloading", f);
    }
    moe_diag_source(diag, "--overlap-param-gather");
    /* [A] --overlap-param-gather needs the distributed optimizer and --overlap-grad-reduce. */
    if (opt->overlap_param_gather && !opt->use_distributed_optimizer) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--overlap-param-gather needs --use-distributed-optimizer");
    }
    if (opt->overlap_param_gather && !opt->overlap_grad_reduce) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--overlap-param-gather needs --overlap-grad-reduce");
    }
    return MOE_OK;
}

/* [T] EP all-to-all overlap (1F1B batch-level overlap) and its companion delay-wgrad. */
static enum moe_status check_ep_overlap(const struct moe_model_cfg *cfg,
                                        const struct moe_layout *lay,
                                        const struct moe_options *opt,
                                        struct moe_diag *diag)
{
    moe_diag_source(diag, "--delay-wgrad-compute");
    if (opt->delay_wgrad_compute && !opt->overlap_moe_ep_comm) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--delay-wgrad-compute needs --overlap-moe-expert-parallel-comm");
    }
    if (!opt->overlap_moe_ep_comm) {
        return MOE_OK;
    }
    moe_diag_source(diag, "--overlap-moe-expert-parallel-comm");
    if (!cfg_has_moe(cfg) || lay->ep <= 1) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--overlap-moe-expert-parallel-comm needs a MoE model with ep > 1");
    }
    if (opt->dispatcher == MOE_DISPATCH_ALLGATHER) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--overlap-moe-expert-parallel-comm needs the alltoall or flex "
                            "dispatcher, not allgather");
    }
    if (lay->pp > 1 && lay->vpp == 1) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--overlap-moe-expert-parallel-comm with pp=%d needs virtual "
                            "pipeline stages (vpp > 1)",
                            lay->pp);
    }
    /* Megatron runs full recompute under EP overlap only without a recompute method, which a
     * plan cannot express; selective recompute without "moe" is the supported combination. */
    if (opt->recompute == MOE_RECOMPUTE_FULL) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--overlap-moe-expert-parallel-comm cannot be planned with full "
                            "recompute and a recompute method; use selective recompute");
    }
    if (opt->recompute == MOE_RECOMPUTE_SELECTIVE && (opt->recompute_modules & MOE_RC_MOE)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--overlap-moe-expert-parallel-comm cannot recompute 'moe'; drop it "
                            "from --recompute-modules");
    }
    if (cfg->mtp_num_layers > 1) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--overlap-moe-expert-parallel-comm supports at most 1 MTP layer "
                            "(model has %d)",
                            cfg->mtp_num_layers);
    }
    return MOE_OK;
}

static enum moe_status check_moe_options(const struct moe_model_cfg *cfg,
                                         const struct moe_layout *lay,
                                         const struct moe_options *opt,
                                         struct moe_diag *diag)
{
    bool moe = cfg_has_moe(cfg);
    moe_diag_source(diag, "--moe-token-dispatcher-type");
    if ((int)opt->dispatcher < 0 || opt->dispatcher >= MOE_NUM_DISPATCHERS) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "unknown dispatcher %d", (int)opt->dispatcher);
    }
    if (!moe &&
        (opt->dispatcher == MOE_DISPATCH_DEEPEP || opt->dispatcher == MOE_DISPATCH_HYBRIDEP)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "the %s dispatcher needs a MoE model; this model has no experts",
                            moe_dispatcher_name(opt->dispatcher));
    }
    moe_diag_source(diag, "--moe-expert-capacity-factor");
    if (!isfinite(opt->capacity_factor) || opt->capacity_factor < 0.0) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "capacity factor %g must be >= 0 (0 = dropless)",
                            opt->capacity_factor);
    }
    moe_diag_source(diag, "--moe-imbalance");
    if (!isfinite(opt->moe_imbalance) || (opt->moe_imbalance != 0.0 && opt->moe_imbalance < 1.0)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--moe-imbalance %g: give a max/mean load factor >= 1, or auto",
                            opt->moe_imbalance);
    }
    /*
     * Hot-expert replicas (ECHO): each clone of a hot expert lives on another EP rank, so it
     * needs experts and ep > 1; at most E/ep clones (one extra expert set per rank, i.e. at most
     * doubling expert memory) are planned.
     */
    moe_diag_source(diag, "--moe-hot-expert-replicas");
    int reps = opt->moe_hot_expert_replicas;
    if (reps < 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "--moe-hot-expert-replicas %d must be >= 0",
                            reps);
    }
    if (reps > 0 && (!moe || lay->ep <= 1)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--moe-hot-expert-replicas needs a MoE model with ep > 1 (clones go "
                            "to other EP ranks)");
    }
    if (reps > 0 && reps > cfg->num_experts / lay->ep) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--moe-hot-expert-replicas %d exceeds experts per EP rank (%d/%d = "
                            "%d)",
                            reps, cfg->num_experts, lay->ep, cfg->num_experts / lay->ep);
    }
    return check_ep_overlap(cfg, lay, opt, diag);
}

/* [T] recompute_granularity / method / num_layers / modules. */
static enum moe_status check_selective(const struct moe_model_cfg *cfg,
                                       const struct moe_options *opt,
                                       struct moe_diag *diag)
{
    unsigned mods = opt->recompute_modules;
    moe_diag_source(diag, "--recompute-modules");
    if (mods == 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "selective recompute needs --recompute-modules (Megatron's default "
                            "is core_attn)");
    }
    if (mods & ~(unsigned)MOE_RC_ALL) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "unknown recompute module bits 0x%x",
                            mods & ~(unsigned)MOE_RC_ALL);
    }
    if (opt->recompute_num_layers != 0) {
        moe_diag_source(diag, "--recompute-num-layers");
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--recompute-num-layers applies only to full recompute; drop it for "
                            "selective");
    }
    if ((mods & MOE_RC_MLA_UP_PROJ) && !cfg->is_mla) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "recompute module mla_up_proj needs multi-latent attention");
    }
    if ((mods & (MOE_RC_MOE_ACT | MOE_RC_MOE | MOE_RC_SHARED_EXPERTS)) && !cfg_has_moe(cfg)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "recompute modules moe_act, moe and shared_experts need a MoE model");
    }
    if ((mods & MOE_RC_SHARED_EXPERTS) && cfg->moe_shared_expert_intermediate_size <= 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "recompute module shared_experts needs shared experts "
                            "(moe_shared_expert_intermediate_size > 0)");
    }
    if ((mods & MOE_RC_MOE_ACT) && !opt->moe_grouped_gemm) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "recompute module moe_act needs --moe-grouped-gemm");
    }
    if ((mods & (MOE_RC_MOE_ACT | MOE_RC_LAYERNORM)) && opt->recipe == MOE_RECIPE_FP8_DELAYED) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "FP8 delayed scaling cannot recompute moe_act or layernorm; use "
                            "another --fp8-recipe or drop those modules");
    }
    return MOE_OK;
}

static enum moe_status check_recompute(const struct moe_model_cfg *cfg,
                                       const struct moe_layout *lay,
                                       const struct moe_options *opt,
                                       struct moe_diag *diag)
{
    moe_diag_source(diag, "--recompute-granularity");
    if ((int)opt->recompute < 0 || opt->recompute > MOE_RECOMPUTE_FULL ||
        (int)opt->recompute_method < 0 || opt->recompute_method > MOE_RECOMPUTE_BLOCK) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "unknown recompute granularity or method");
    }
    switch (opt->recompute) {
    case MOE_RECOMPUTE_NONE:
        if (opt->recompute_num_layers != 0 || opt->recompute_modules != 0) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "recompute layers/modules are set but recompute is off; give "
                                "--recompute-granularity or drop them");
        }
        return MOE_OK;
    case MOE_RECOMPUTE_SELECTIVE:
        return check_selective(cfg, opt, diag);
    case MOE_RECOMPUTE_FULL:
        break;
    }
    int per_rank = cfg->num_layers / lay->pp;
    moe_diag_source(diag, "--recompute-num-layers");
    if (opt->recompute_num_layers < 1 || opt->recompute_num_layers > per_rank) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "full recompute needs --recompute-method and --recompute-num-layers "
                            "between 1 and num_layers/pp = %d (got %d)",
                            per_rank, opt->recompute_num_layers);
    }
    if (opt->recompute_modules != 0) {
        moe_diag_source(diag, "--recompute-modules");
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--recompute-modules applies to selective recompute only");
    }
    return MOE_OK;
}

/* [T] cpu_offloading and fine_grained_activation_offloading. */
static enum moe_status check_offload(const struct moe_model_cfg *cfg,
                                     const struct moe_layout *lay,
                                     const struct moe_options *opt,
                                     struct moe_diag *diag)
{
    int n = opt->cpu_offloading_num_layers;
    moe_diag_source(diag, "--cpu-offloading-num-layers");
    if (n < 0 || (n > 0 && n >= cfg->num_layers)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--cpu-offloading-num-layers %d must be below num_layers=%d", n,
                            cfg->num_layers);
    }
    if (n > 0 && lay->pp > 1) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "CPU offloading does not support pipeline parallelism (pp=%d)",
                            lay->pp);
    }
    if (n > 0 && opt->recompute != MOE_RECOMPUTE_NONE) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "CPU offloading does not work with activation recompute");
    }
    unsigned mods = opt->offload_modules;
    moe_diag_source(diag, "--offload-modules");
    if (!opt->fine_grained_offload) {
        if (mods != 0) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "--offload-modules needs --fine-grained-activation-offloading");
        }
        return MOE_OK;
    }
    if (n > 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--fine-grained-activation-offloading cannot be combined with "
                            "--cpu-offloading-num-layers");
    }
    if (mods == 0 || (mods & ~(unsigned)MOE_OFF_ALL)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--fine-grained-activation-offloading needs --offload-modules");
    }
    if ((mods & MOE_OFF_ATTN_PROJ) && !(mods & MOE_OFF_CORE_ATTN)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "offload module attn_proj needs core_attn too (its input is "
                            "core_attn's output)");
    }
    if (opt->recompute == MOE_RECOMPUTE_SELECTIVE && (opt->recompute_modules & MOE_RC_MOE) &&
        (mods & (MOE_OFF_MOE_ACT | MOE_OFF_EXPERT_FC1))) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "cannot offload moe_act/expert_fc1 while recomputing the whole MoE "
                            "layer; drop one");
    }
    return MOE_OK;
}

/* [T], [A] CUDA graphs. */
static enum moe_status check_cuda_graphs(const struct moe_model_cfg *cfg,
                                         const struct moe_options *opt,
                                         struct moe_diag *diag)
{
    unsigned m = opt->cuda_graph_modules;
    moe_diag_source(diag, "--cuda-graph-modules");
    if ((int)opt->cuda_graph_impl < 0 || opt->cuda_graph_impl > MOE_CG_TE) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "unknown CUDA graph implementation %d",
                            (int)opt->cuda_graph_impl);
    }
    if (opt->cuda_graph_impl == MOE_CG_NONE) {
        if (m != 0) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "--cuda-graph-modules needs --cuda-graph-impl local or "
                                "transformer_engine");
        }
        return MOE_OK;
    }
    bool full_iter = (m & MOE_CGM_FULL_ITERATION) != 0;
    if (full_iter && (opt->cuda_graph_impl != MOE_CG_LOCAL || m != MOE_CGM_FULL_ITERATION)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "full_iteration graphs are local graphs of the whole step; use "
                            "--cuda-graph-impl full_iteration with no other modules");
    }
    if (opt->recompute == MOE_RECOMPUTE_FULL && !full_iter) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "full recompute is not supported with per-layer CUDA graphs; use "
                            "selective recompute or full_iteration graphs");
    }
    if (opt->cpu_offloading_num_layers > 0 && !full_iter) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "CUDA graphs do not support CPU offloading");
    }
    if ((m & MOE_CGM_MOE) && (m & MOE_CGM_MOE_ROUTER)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "CUDA graph modules moe and moe_router are exclusive");
    }
    if ((m & MOE_CGM_MOE_PREPROCESS) && !(m & MOE_CGM_MOE_ROUTER)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "CUDA graph module moe_preprocess needs moe_router");
    }
    if ((m & (MOE_CGM_MOE | MOE_CGM_MOE_ROUTER)) && !cfg_has_moe(cfg)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "moe CUDA graphs need a MoE model");
    }
    if ((m & MOE_CGM_MLP) && !cfg_has_dense(cfg)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "the mlp CUDA graph needs dense layers; this model has none");
    }
    if ((m & MOE_CGM_MOE) && opt->capacity_factor <= 0.0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "the moe CUDA graph needs drop-and-pad routing "
                            "(--moe-expert-capacity-factor); dropless token counts vary");
    }
    if ((m & MOE_CGM_MOE_PREPROCESS) && opt->dispatcher == MOE_DISPATCH_ALLTOALL &&
        opt->capacity_factor > 0.0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "moe_preprocess graphs cannot capture the alltoall dispatcher's "
                            "host sync with a capacity factor");
    }
    if (opt->fine_grained_offload) {
        unsigned local_ok = MOE_OFF_EXPERT_FC1 | MOE_OFF_MOE_ACT;
        if (m & MOE_CGM_MOE) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "activation offloading does not support the moe CUDA graph");
        }
        if (opt->cuda_graph_impl == MOE_CG_LOCAL && !full_iter &&
            ((opt->offload_modules & ~local_ok) != 0 || m == 0)) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "local CUDA graphs support offloading only expert_fc1/moe_act "
                                "with per-module graphs; use --cuda-graph-impl "
                                "transformer_engine");
        }
    }
    if (opt->overlap_moe_ep_comm && opt->cuda_graph_impl == MOE_CG_TE &&
        (m & (MOE_CGM_MOE | MOE_CGM_MLP))) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "moe and mlp CUDA graphs are not supported with "
                            "--overlap-moe-expert-parallel-comm");
    }
    return MOE_OK;
}

enum moe_status moe_layout_check_options(const struct moe_model_cfg *cfg,
                                         const struct moe_layout *lay,
                                         const struct moe_options *opt,
                                         struct moe_diag *diag)
{
    MOE_TRY(check_precision(opt, diag));
    MOE_TRY(check_optimizer(opt, diag));
    moe_diag_source(diag, "--tp-comm-overlap");
    /* [A] TP communication overlap needs sequence parallelism (off when tp == 1). */
    if (opt->tp_comm_overlap && !lay->sequence_parallel) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--tp-comm-overlap needs --sequence-parallel with tp > 1");
    }
    MOE_TRY(check_moe_options(cfg, lay, opt, diag));
    MOE_TRY(check_recompute(cfg, lay, opt, diag));
    MOE_TRY(check_offload(cfg, lay, opt, diag));
    return check_cuda_graphs(cfg, opt, diag);
}

enum moe_status moe_layout_check_hardware(const struct moe_cluster *cl,
                                          const struct moe_options *opt,
                                          struct moe_diag *diag)
{
    moe_diag_source(diag, "--fp8-recipe");
    if ((recipe_is_fp8(opt->recipe) || opt->recipe == MOE_RECIPE_MXFP8) && !cl->gpu.has_fp8) {
        return moe_diag_set(diag, MOE_ERR_UNSUPPORTED,
                            "recipe %s needs FP8 tensor cores, which %s (%s) does not have; use "
                            "bf16",
                            moe_recipe_name(opt->recipe), cl->name, cl->gpu.name);
    }
    if ((opt->recipe == MOE_RECIPE_MXFP8 || opt->recipe == MOE_RECIPE_NVFP4) && !cl->gpu.has_mx) {
        return moe_diag_set(diag, MOE_ERR_UNSUPPORTED,
                            "recipe %s needs block-scaled MX/NV formats (Blackwell); %s (%s) "
                            "lacks them, use --fp8-recipe blockwise or tensorwise",
                            moe_recipe_name(opt->recipe), cl->name, cl->gpu.name);
    }
    return MOE_OK;
}
