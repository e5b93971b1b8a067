/*
 * Parallel layout (parallel folding) and training options: defaults, the parallel sizes, batch and
 * sequence rules, moe_layout_resolve and the rank mapping. The option names, the pipeline layout
 * string with the chunk placement, and the option rules live in the module's other files
 * (model/layout_internal.h lists them, with the Megatron-LM sources the rules cite as [A] [T] [O]
 * [S] [P] [Y]).
 *
 * moe_layout_resolve derives dp, edp and the micro-batch count, places decoder/MTP layers,
 * embedding and loss on the pp*vpp chunks exactly as Megatron-Core does, and refuses any
 * combination Megatron would refuse, with a message saying what to change. Each check names its
 * source. Hardware rules (FP8, MXFP8/NVFP4) apply only when a cluster is given. This module does
 * not check the model architecture alone (moe_cfg_validate does) nor the GPU count against the
 * cluster (moe_cluster_check_gpus does).
 *
 * Chunk c = v*pp + p lives on pipeline rank p (Megatron's interleaved order); decoder layers are
 * numbered consecutively in chunk order (Megatron's get_transformer_layer_offset).
 */
#include "model/layout.h"

#include "model/layout_internal.h"

#include <limits.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Defaults                                                                                    */

void moe_options_init(struct moe_options *opt)
{
    memset(opt, 0, sizeof(*opt));
    opt->recipe = MOE_RECIPE_BF16;
    opt->optimizer_offload_fraction = 1.0; /* [A] --optimizer-offload-fraction default */
    opt->main_grads_dtype = MOE_DTYPE_FP32;
    opt->exp_avg_dtype = MOE_DTYPE_FP32;
    opt->exp_avg_sq_dtype = MOE_DTYPE_FP32;
    opt->dispatcher = MOE_DISPATCH_ALLTOALL;
    opt->recompute = MOE_RECOMPUTE_NONE;
    opt->recompute_method = MOE_RECOMPUTE_UNIFORM;
    opt->cuda_graph_impl = MOE_CG_NONE;
    opt->moe_imbalance = 1.0;
}

void moe_layout_init(struct moe_layout *lay)
{
    memset(lay, 0, sizeof(*lay));
    lay->tp = 1;
    lay->cp = 1;
    lay->dp = 1;
    lay->pp = 1;
    lay->vpp = 1;
    lay->ep = 1;
    lay->etp = 1;
    lay->edp = 1;
    lay->mbs = 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Parallel sizes, batch, sequence                                                              */

static enum moe_status check_degrees(const struct moe_layout *lay, struct moe_diag *diag)
{
    const struct {
        const char *flag;
        int value;
    } sizes[] = {
        {"--tensor-model-parallel-size", lay->tp},
        {"--context-parallel-size", lay->cp},
        {"--pipeline-model-parallel-size", lay->pp},
        {"--num-virtual-stages-per-pipeline-rank", lay->vpp},
        {"--expert-model-parallel-size", lay->ep},
        {"--expert-tensor-parallel-size", lay->etp},
        {"--micro-batch-size", lay->mbs},
    };
    if (lay->num_gpus < 1) {
        moe_diag_source(diag, "--gpus");
        return moe_diag_set(diag, MOE_ERR_INVALID, "num_gpus=%d: give the GPU count (--gpus N)",
                            lay->num_gpus);
    }
    for (size_t i = 0; i < MOE_ARRAY_LEN(sizes); i++) {
        if (sizes[i].value < 1) {
            moe_diag_source(diag, sizes[i].flag);
            return moe_diag_set(diag, MOE_ERR_INVALID, "%s %d: must be at least 1", sizes[i].flag,
                                sizes[i].value);
        }
    }
    if ((long)lay->pp * lay->vpp > MOE_MAX_PP_CHUNKS) {
        moe_diag_source(diag, "--num-virtual-stages-per-pipeline-rank");
        return moe_diag_set(diag, MOE_ERR_INVALID, "pp*vpp = %d*%d exceeds %d chunks", lay->pp,
                            lay->vpp, MOE_MAX_PP_CHUNKS);
    }
    if (lay->gbs < 0 || lay->seq_length < 0 || lay->first_stage_layers < 0 ||
        lay->last_stage_layers < 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "gbs, seq_length and first/last stage layers must not be negative");
    }
    return MOE_OK;
}

/* dp from the world size [A]; edp from parallel folding (DESIGN.md). */
static enum moe_status derive_groups(struct moe_layout *lay, struct moe_diag *diag)
{
    long model = (long)lay->tp * lay->cp * lay->pp;
    if (lay->num_gpus % model != 0) {
        moe_diag_source(diag, "--gpus");
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "num_gpus=%d is not divisible by tp*cp*pp = %d*%d*%d = %ld; use a "
                            "multiple of %ld GPUs or change tp/cp/pp",
                            lay->num_gpus, lay->tp, lay->cp, lay->pp, model, model);
    }
    lay->dp = (int)(lay->num_gpus / model);
    long attn = (long)lay->tp * lay->cp * lay->dp;
    long expert = (long)lay->etp * lay->ep;
    if (attn % expert != 0) {
        moe_diag_source(diag, "--expert-model-parallel-size");
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "parallel folding needs tp*cp*dp = %ld divisible by etp*ep = %d*%d = "
                            "%ld; pick ep and etp whose product divides %ld",
                            attn, lay->etp, lay->ep, expert, attn);
    }
    lay->edp = (int)(attn / expert);
    return MOE_OK;
}

/* TP/EP splits of the weights [T], [A]. */
static enum moe_status check_model_split(const struct moe_model_cfg *cfg,
                                         const struct moe_layout *lay,
                                         struct moe_diag *diag)
{
    int tp = lay->tp;
    moe_diag_source(diag, "--tensor-model-parallel-size");
    if (cfg->num_attention_heads <= 0 || cfg->num_attention_heads % tp != 0) {
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "num_attention_heads=%d is not divisible by tp=%d; choose tp from "
                            "the divisors of %d",
                            cfg->num_attention_heads, tp, cfg->num_attention_heads);
    }
    int g = cfg->num_query_groups;
    if (!cfg->is_mla && (g <= 0 || (g % tp != 0 && tp % g != 0))) {
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "num_query_groups=%d must be a multiple or a divisor of tp=%d", g, tp);
    }
    if (cfg_has_dense(cfg) && (cfg->ffn_hidden_size <= 0 || cfg->ffn_hidden_size % tp != 0)) {
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "ffn_hidden_size=%d (dense MLP) is not divisible by tp=%d",
                            cfg->ffn_hidden_size, tp);
    }
    bool moe = cfg_has_moe(cfg);
    if (!moe) {
        if (lay->ep > 1) {
            moe_diag_source(diag, "--expert-model-parallel-size");
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "ep=%d needs a model with experts (this model has none); use "
                                "ep=1",
                                lay->ep);
        }
        return MOE_OK;
    }
    if (cfg->moe_shared_expert_intermediate_size % tp != 0) {
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "moe_shared_expert_intermediate_size=%d (TP-split like a dense MLP) "
                            "is not divisible by tp=%d",
                            cfg->moe_shared_expert_intermediate_size, tp);
    }
    moe_diag_source(diag, "--expert-model-parallel-size");
    if (cfg->num_experts % lay->ep != 0) {
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "num_experts=%d is not divisible by ep=%d; choose ep from the "
                            "divisors of %d",
                            cfg->num_experts, lay->ep, cfg->num_experts);
    }
    moe_diag_source(diag, "--expert-tensor-parallel-size");
    if (cfg->moe_ffn_hidden_size <= 0 || cfg->moe_ffn_hidden_size % lay->etp != 0) {
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "moe_ffn_hidden_size=%d is not divisible by etp=%d",
                            cfg->moe_ffn_hidden_size, lay->etp);
    }
    /* [T] "Bias in Moe is only supported when ETP==1". */
    if (cfg->has_linear_bias && lay->etp > 1) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "experts with linear biases (this model has them) need etp=1; got "
                            "etp=%d",
                            lay->etp);
    }
    return MOE_OK;
}

static enum moe_status
check_sequence(const struct moe_model_cfg *cfg, struct moe_layout *lay, struct moe_diag *diag)
{
    if (lay->seq_length == 0) {
        lay->seq_length = cfg->seq_length;
    }
    int seq = lay->seq_length;
    moe_diag_source(diag, "--seq-length");
    if (seq <= 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "seq_length is not set; give --seq-length");
    }
    /* [A] seq-length should be a multiple of 2 * context-parallel-size if cp > 1. */
    if (lay->cp > 1 && seq % (2 * lay->cp) != 0) {
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "seq_length=%d must be a multiple of 2*cp = %d when cp > 1 (each "
                            "sequence is cut into 2*cp load-balanced pieces)",
                            seq, 2 * lay->cp);
    }
    /* [A] sequence parallelism is switched off when tp == 1. */
    if (lay->tp == 1) {
        lay->sequence_parallel = false;
    }
    moe_diag_source(diag, "--sequence-parallel");
    /* [Y] "When using MoE and tensor parallelism, sequence parallelism must be used." */
    if (cfg_has_moe(cfg) && lay->tp > 1 && !lay->sequence_parallel) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "a MoE model with tp=%d needs --sequence-parallel (Megatron asserts "
                            "it); add the flag or use tp=1",
                            lay->tp);
    }
    if (lay->sequence_parallel && (seq / lay->cp) % lay->tp != 0) {
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "with --sequence-parallel the %d tokens per CP rank must divide over "
                            "tp=%d; change --seq-length",
                            seq / lay->cp, lay->tp);
    }
    return MOE_OK;
}

/* [A] global batch defaults to mbs*dp and must be a multiple of it. */
static enum moe_status derive_batch(struct moe_layout *lay, struct moe_diag *diag)
{
    long step = (long)lay->mbs * lay->dp;
    if (step > INT_MAX) {
        moe_diag_source(diag, "--micro-batch-size");
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "micro-batch %d x dp %d = %ld sequences per step is over %d; lower "
                            "--micro-batch-size or the GPU count",
                            lay->mbs, lay->dp, step, INT_MAX);
    }
    if (lay->gbs == 0) {
        lay->gbs = (int)step;
    }
    if (lay->gbs % step != 0) {
        moe_diag_source(diag, "--global-batch-size");
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "global batch %d is not divisible by micro-batch %d x dp %d = %ld; "
                            "use a global batch that is a multiple of %ld",
                            lay->gbs, lay->mbs, lay->dp, step, step);
    }
    lay->num_microbatches = (int)(lay->gbs / step);
    return MOE_OK;
}

static enum moe_status check_pipeline(struct moe_layout *lay, struct moe_diag *diag)
{
    moe_diag_source(diag, "--num-virtual-stages-per-pipeline-rank");
    /* [A] interleaving needs pp > 1 (pp > 2 without p2p overlap, which is on by default). */
    if (lay->vpp > 1 && lay->pp == 1) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "vpp=%d needs pp > 1 (virtual stages interleave pipeline ranks); "
                            "use vpp=1 or raise pp",
                            lay->vpp);
    }
    /*
     * [S] The interleaved schedule groups microbatch_group_size_per_vp_stage (default pp)
     * micro-batches per virtual stage and refuses a remainder between 0 and pp: M % pp == 0.
     */
    if (lay->vpp > 1 && lay->num_microbatches % lay->pp != 0) {
        long step = (long)lay->mbs * lay->dp * lay->pp;
        moe_diag_source(diag, "--global-batch-size");
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "the interleaved schedule (vpp=%d) needs num_microbatches=%d to be a "
                            "multiple of pp=%d; use a global batch that is a multiple of %ld",
                            lay->vpp, lay->num_microbatches, lay->pp, step);
    }
    if ((lay->first_stage_layers > 0 || lay->last_stage_layers > 0) && lay->pp == 1) {
        moe_diag_source(diag, "--decoder-first-pipeline-num-layers");
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "first/last pipeline stage layer counts need pp > 1");
    }
    return MOE_OK;
}

/* ------------------------------------------------------------------------------------------ */

enum moe_status moe_layout_resolve(const struct moe_model_cfg *cfg,
                                   const struct moe_cluster *cl,
                                   const struct moe_options *opt,
                                   struct moe_layout *lay,
                                   struct moe_diag *diag)
{
    if (cfg->num_layers < 1 || cfg->num_layers > MOE_MAX_LAYERS || cfg->mtp_num_layers < 0 ||
        cfg->mtp_num_layers > MOE_MAX_MTP) {
        moe_diag_source(diag, "--num-layers");
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "model num_layers=%d / mtp_num_layers=%d out of range", cfg->num_layers,
                            cfg->mtp_num_layers);
    }
    MOE_TRY(check_degrees(lay, diag));
    MOE_TRY(derive_groups(lay, diag));
    MOE_TRY(check_model_split(cfg, lay, diag));
    MOE_TRY(check_sequence(cfg, lay, diag));
    MOE_TRY(derive_batch(lay, diag));
    MOE_TRY(check_pipeline(lay, diag));
    MOE_TRY(moe_layout_place_chunks(cfg, lay, diag));
    if (opt != NULL) {
        MOE_TRY(moe_layout_check_options(cfg, lay, opt, diag));
        if (cl != NULL) {
            MOE_TRY(moe_layout_check_hardware(cl, opt, diag));
        }
    }
    if (diag != NULL) {
        diag->source[0] = '\0';
        diag->column = 0;
    }
    return MOE_OK;
}

void moe_layout_rank_coords(const struct moe_layout *lay, int rank, struct moe_rank_coords *out)
{
    int s = lay->tp * lay->cp * lay->dp;
    int l = rank % s;
    out->stage = rank / s;
    out->tp = l % lay->tp;
    out->cp = (l / lay->tp) % lay->cp;
    out->dp = l / (lay->tp * lay->cp);
    out->etp = l % lay->etp;
    out->ep = (l / lay->etp) % lay->ep;
    out->edp = l / (lay->etp * lay->ep);
}
