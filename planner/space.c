/*
 * The planner's search space (planner/space.h): value lists per dimension, conversion of knob
 * tuples to the model's structs, the tie-breaking order and the per-class validity cache.
 *
 * Canonical values (each equivalence is checked by tests/planner/test_search against the cost
 * model): a selective set holding "moe" is listed without moe_act / shared_experts (the moe bit
 * recomputes and frees the whole MoE block, so they add nothing); "mlp" only when a dense layer
 * exists, "mla_up_proj" only with MLA, MoE modules only with experts; fine-grained offload sets
 * name attn_proj only with core_attn (Megatron's rule) and MoE modules only with experts;
 * CUDA-graph module sets respect Megatron's exclusions (moe vs moe_router, moe_preprocess needs
 * moe_router); at EP=1 alltoall stands for allgather and deepep for hybridep (no EP traffic, same
 * permute).
 */
#include "planner/space.h"

#include <stdlib.h>
#include <string.h>

const double moe_plan_offload_fracs[MOE_PLAN_NUM_FRACS] = {0.0, 0.5, 1.0};

static const char *const knob_names[MOE_PK_COUNT] = {
    "tp",
    "cp",
    "pp",
    "vpp",
    "pp_layout",
    "ep",
    "etp",
    "mbs",
    "sp",
    "recipe",
    "fp8_param_gather",
    "dist_opt",
    "overlap_grad_reduce",
    "overlap_param_gather",
    "tp_comm_overlap",
    "ep_overlap",
    "grouped_gemm",
    "dispatcher",
    "opt_offload",
    "recompute",
    "act_offload",
    "cuda_graph",
};

const char *moe_plan_knob_name(enum moe_plan_knob k)
{
    if ((int)k < 0 || k >= MOE_PK_COUNT) {
        return "unknown";
    }
    return knob_names[k];
}

bool moe_plan_space_fixed(const struct moe_plan_space *sp, enum moe_plan_knob k)
{
    return (sp->req->fixed & (1u << k)) != 0;
}

uint8_t moe_plan_space_fp8_param_gather(const struct moe_plan_space *sp,
                                        int recipe,
                                        int dist_opt,
                                        int opt_offload)
{
    if (sp->fp8_param_gather_fixed) {
        return sp->req->opt.fp8_param_gather ? 1 : 0;
    }
    if (recipe == MOE_RECIPE_BF16 || !dist_opt) {
        return 0; /* Megatron: needs an FP8/FP4 recipe and the distributed optimizer */
    }
    if (opt_offload && recipe != MOE_RECIPE_FP8_DELAYED) {
        return 0; /* Megatron: with optimizer CPU offload only under delayed scaling */
    }
    return 1;
}

static bool cfg_has_moe(const struct moe_model_cfg *cfg)
{
    return moe_cfg_is_moe(cfg);
}

static bool cfg_has_dense(const struct moe_model_cfg *cfg)
{
    if (!cfg_has_moe(cfg)) {
        return true;
    }
    for (int i = 0; i < cfg->num_layers && i < MOE_MAX_LAYERS; i++) {
        if (!(cfg->layer_flags[i] & MOE_LAYER_MOE)) {
            return true;
        }
    }
    return false;
}

static bool recipe_supported(const struct moe_cluster *cl, enum moe_recipe r)
{
    switch (r) {
    case MOE_RECIPE_BF16:
        return true;
    case MOE_RECIPE_FP8_TENSORWISE:
    case MOE_RECIPE_FP8_DELAYED:
    case MOE_RECIPE_FP8_BLOCKWISE:
        return cl->gpu.has_fp8;
    case MOE_RECIPE_MXFP8:
        return cl->gpu.has_fp8 && cl->gpu.has_mx;
    case MOE_RECIPE_NVFP4:
        return cl->gpu.has_mx;
    case MOE_NUM_RECIPES:
        break;
    }
    return false;
}

static bool opt_dtypes_fp32(const struct moe_options *o)
{
    return o->main_grads_dtype == MOE_DTYPE_FP32 && o->exp_avg_dtype == MOE_DTYPE_FP32 &&
           o->exp_avg_sq_dtype == MOE_DTYPE_FP32;
}

static void list_statics(struct moe_plan_space *sp)
{
    const struct moe_plan_request *req = sp->req;
    int dist_vals[2] = {0, 1};
    int num_dist = 2;
    if (moe_plan_space_fixed(sp, MOE_PK_DIST_OPT)) {
        dist_vals[0] = req->opt.use_distributed_optimizer ? 1 : 0;
        num_dist = 1;
    }
    sp->num_statics = 0;
    for (int i = 0; i < num_dist; i++) {
        int d = dist_vals[i];
        if (moe_plan_space_fixed(sp, MOE_PK_OPT_OFFLOAD)) {
            /* The request's own setting (applied field by field in okey_apply). */
            sp->statics[sp->num_statics++] =
                (struct moe_plan_static){(uint8_t)d, req->opt.optimizer_cpu_offload ? 1 : 0};
            continue;
        }
        sp->statics[sp->num_statics++] = (struct moe_plan_static){(uint8_t)d, 0};
        if (d == 1) {
            for (int f = 1; f < MOE_PLAN_NUM_FRACS; f++) {
                sp->statics[sp->num_statics++] = (struct moe_plan_static){1, (uint8_t)f};
            }
        }
    }
}

static void list_dispatchers(struct moe_plan_space *sp)
{
    const struct moe_plan_request *req = sp->req;
    unsigned allowed = req->dispatchers != 0 ? req->dispatchers : (1u << MOE_NUM_DISPATCHERS) - 1;
    if (moe_plan_space_fixed(sp, MOE_PK_DISPATCHER)) {
        allowed = 1u << req->opt.dispatcher;
    }
    if (!sp->is_moe) {
        /* No experts: the dispatcher is never used; flex dispatchers are refused. */
        allowed &= (1u << MOE_DISPATCH_ALLTOALL) | (1u << MOE_DISPATCH_ALLGATHER);
    }
    sp->num_dispatchers = 0;
    for (int d = 0; d < MOE_NUM_DISPATCHERS; d++) {
        if (allowed & (1u << d)) {
            sp->dispatchers[sp->num_dispatchers++] = (uint8_t)d;
        }
    }
    /* EP = 1: alltoall == allgather and deepep == hybridep (no EP traffic, same permutes). */
    sp->num_dispatchers_ep1 = 0;
    const int pairs[2][2] = {{MOE_DISPATCH_ALLTOALL, MOE_DISPATCH_ALLGATHER},
                             {MOE_DISPATCH_DEEPEP, MOE_DISPATCH_HYBRIDEP}};
    for (int i = 0; i < 2; i++) {
        for (int j = 0; j < 2; j++) {
            if (allowed & (1u << pairs[i][j])) {
                sp->dispatchers_ep1[sp->num_dispatchers_ep1++] = (uint8_t)pairs[i][j];
                break;
            }
        }
    }
}

static void list_graphs(struct moe_plan_space *sp)
{
    const struct moe_plan_request *req = sp->req;
    sp->num_graphs = 0;
    sp->graph_full_iter = -1;
    if (moe_plan_space_fixed(sp, MOE_PK_CUDA_GRAPH)) {
        sp->graphs[sp->num_graphs++] = (struct moe_plan_graph){
            (uint8_t)req->opt.cuda_graph_impl, (uint8_t)req->opt.cuda_graph_modules};
        if (req->opt.cuda_graph_impl == MOE_CG_LOCAL &&
            req->opt.cuda_graph_modules == MOE_CGM_FULL_ITERATION) {
            sp->graph_full_iter = 0;
        }
        return;
    }
    /* Full-iteration graphs first: they dominate every other value (no host launches, no dropless
     * sync), and a dominant value must sort first for ties to break its way. */
    sp->graph_full_iter = sp->num_graphs;
    sp->graphs[sp->num_graphs++] = (struct moe_plan_graph){MOE_CG_LOCAL, MOE_CGM_FULL_ITERATION};
    sp->graphs[sp->num_graphs++] = (struct moe_plan_graph){MOE_CG_NONE, 0};
    /* Per-module sets: attn, mlp (dense layers only), and one of {-, moe, moe_router,
     * moe_router + moe_preprocess} (MoE only); local, then transformer_engine (identical in the
     * model, listed for their different validity). */
    const unsigned moe_sets[4] = {0u, MOE_CGM_MOE, MOE_CGM_MOE_ROUTER,
                                  MOE_CGM_MOE_ROUTER | MOE_CGM_MOE_PREPROCESS};
    for (int impl = MOE_CG_LOCAL; impl <= MOE_CG_TE; impl++) {
        for (int attn = 0; attn < 2; attn++) {
            for (int mlp = 0; mlp < (sp->has_dense ? 2 : 1); mlp++) {
                for (int m = 0; m < (sp->is_moe ? 4 : 1); m++) {
                    unsigned mods =
                        (attn ? MOE_CGM_ATTN : 0u) | (mlp ? MOE_CGM_MLP : 0u) | moe_sets[m];
                    if (mods == 0) {
                        continue;
                    }
                    sp->graphs[sp->num_graphs++] =
                        (struct moe_plan_graph){(uint8_t)impl, (uint8_t)mods};
                }
            }
        }
    }
}

static void list_recompute(struct moe_plan_space *sp)
{
    const struct moe_plan_request *req = sp->req;
    const struct moe_model_cfg *cfg = req->cfg;
    sp->num_rc = 0;
    if (moe_plan_space_fixed(sp, MOE_PK_RECOMPUTE)) {
        const struct moe_options *o = &req->opt;
        sp->rcs[sp->num_rc++] =
            (struct moe_plan_rc){(uint8_t)o->recompute, (uint8_t)o->recompute_method,
                                 (uint8_t)o->recompute_modules, (uint16_t)o->recompute_num_layers};
        return;
    }
    sp->rcs[sp->num_rc++] = (struct moe_plan_rc){MOE_RECOMPUTE_NONE, 0, 0, 0};
    unsigned avail = MOE_RC_CORE_ATTN | MOE_RC_LAYERNORM;
    if (cfg->is_mla) {
        avail |= MOE_RC_MLA_UP_PROJ;
    }
    if (sp->has_dense) {
        avail |= MOE_RC_MLP;
    }
    if (sp->is_moe) {
        avail |= MOE_RC_MOE_ACT | MOE_RC_MOE;
        if (sp->has_shared) {
            avail |= MOE_RC_SHARED_EXPERTS;
        }
    }
    for (unsigned mods = 1; mods <= MOE_RC_ALL; mods++) {
        if ((mods & ~avail) != 0) {
            continue;
        }
        if ((mods & MOE_RC_MOE) && (mods & (MOE_RC_MOE_ACT | MOE_RC_SHARED_EXPERTS))) {
            continue; /* redundant: moe recomputes and frees the whole block */
        }
        if (sp->num_rc < MOE_PLAN_MAX_RC - 2) {
            sp->rcs[sp->num_rc++] =
                (struct moe_plan_rc){MOE_RECOMPUTE_SELECTIVE, 0, (uint8_t)mods, 0};
        }
    }
    sp->rcs[sp->num_rc++] = (struct moe_plan_rc){MOE_RECOMPUTE_FULL, MOE_RECOMPUTE_UNIFORM, 0, 0};
    sp->rcs[sp->num_rc++] = (struct moe_plan_rc){MOE_RECOMPUTE_FULL, MOE_RECOMPUTE_BLOCK, 0, 0};
}

static void list_offload(struct moe_plan_space *sp)
{
    const struct moe_plan_request *req = sp->req;
    sp->num_off = 0;
    if (moe_plan_space_fixed(sp, MOE_PK_ACT_OFFLOAD)) {
        const struct moe_options *o = &req->opt;
        uint8_t kind = o->cpu_offloading_num_layers > 0 ? 2 : (o->fine_grained_offload ? 1 : 0);
        sp->offs[sp->num_off++] = (struct moe_plan_off){kind, (uint8_t)o->offload_modules,
                                                        (uint16_t)o->cpu_offloading_num_layers};
        return;
    }
    sp->offs[sp->num_off++] = (struct moe_plan_off){0, 0, 0};
    unsigned avail = MOE_OFF_ATTN_NORM | MOE_OFF_QKV_LINEAR | MOE_OFF_CORE_ATTN |
                     MOE_OFF_ATTN_PROJ | MOE_OFF_MLP_NORM;
    if (sp->is_moe) {
        avail |= MOE_OFF_EXPERT_FC1 | MOE_OFF_MOE_ACT;
    }
    sp->fine_all = avail;
    if (req->all_offload_sets) {
        for (unsigned mods = 1; mods <= MOE_OFF_ALL; mods++) {
            if ((mods & ~avail) != 0) {
                continue;
            }
            if ((mods & MOE_OFF_ATTN_PROJ) && !(mods & MOE_OFF_CORE_ATTN)) {
                continue; /* Megatron: attn_proj's input is core_attn's output */
            }
            if (sp->num_off < MOE_PLAN_MAX_OFF - 1) {
                sp->offs[sp->num_off++] = (struct moe_plan_off){1, (uint8_t)mods, 0};
            }
        }
    } else {
        /* Every union of four module groups: the model prices each offloaded byte alike (one
         * copy over the host link, one byte less on the GPU), so finer sets only change the
         * granularity of the same trade. */
        const unsigned groups[4] = {MOE_OFF_EXPERT_FC1 | MOE_OFF_MOE_ACT,
                                    MOE_OFF_CORE_ATTN | MOE_OFF_ATTN_PROJ, MOE_OFF_QKV_LINEAR,
                                    MOE_OFF_ATTN_NORM | MOE_OFF_MLP_NORM};
        unsigned list[16];
        int n = 0;
        for (unsigned u = 1; u < 16; u++) {
            unsigned mods = 0;
            for (int g = 0; g < 4; g++) {
                mods |= (u & (1u << g)) ? groups[g] : 0u;
            }
            mods &= avail;
            bool dup = mods == 0;
            for (int i = 0; i < n && !dup; i++) {
                dup = list[i] == mods;
            }
            if (!dup) {
                list[n++] = mods;
            }
        }
        /* Knob order: ascending module bits. */
        for (int i = 1; i < n; i++) {
            for (int j = i; j > 0 && list[j - 1] > list[j]; j--) {
                unsigned t = list[j];
                list[j] = list[j - 1];
                list[j - 1] = t;
            }
        }
        for (int i = 0; i < n; i++) {
            sp->offs[sp->num_off++] = (struct moe_plan_off){1, (uint8_t)list[i], 0};
        }
    }
    sp->offs[sp->num_off++] = (struct moe_plan_off){2, 0, 0};
}

enum moe_status moe_plan_space_init(struct moe_plan_space *sp,
                                    const struct moe_plan_request *req,
                                    struct moe_diag *diag)
{
    memset(sp, 0, sizeof(*sp));
    sp->req = req;
    const struct moe_model_cfg *cfg = req->cfg;
    sp->is_moe = cfg_has_moe(cfg);
    sp->has_dense = cfg_has_dense(cfg);
    sp->has_shared = sp->is_moe && cfg->moe_shared_expert_intermediate_size > 0;

    unsigned allowed = req->recipes != 0 ? req->recipes : (1u << MOE_NUM_RECIPES) - 1;
    if (moe_plan_space_fixed(sp, MOE_PK_RECIPE)) {
        allowed = 1u << req->opt.recipe;
    }
    for (int r = 0; r < MOE_NUM_RECIPES; r++) {
        if ((allowed & (1u << r)) && recipe_supported(req->cl, (enum moe_recipe)r)) {
            sp->recipes[sp->num_recipes++] = (uint8_t)r;
        }
    }
    if (sp->num_recipes == 0) {
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "none of the allowed precision recipes runs on %s (%s); allow bf16",
                            req->cl->name, req->cl->gpu.name);
    }
    list_statics(sp);
    list_dispatchers(sp);
    if (sp->num_dispatchers == 0) {
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "no allowed dispatcher applies to this model (dense models use "
                            "alltoall or allgather)");
    }
    sp->num_grouped = 0;
    if (moe_plan_space_fixed(sp, MOE_PK_GROUPED_GEMM) || !sp->is_moe) {
        sp->grouped[sp->num_grouped++] = req->opt.moe_grouped_gemm ? 1 : 0;
    } else {
        sp->grouped[sp->num_grouped++] = 1;
        sp->grouped[sp->num_grouped++] = 0;
    }
    sp->num_ep_overlap = 0;
    if (moe_plan_space_fixed(sp, MOE_PK_EP_OVERLAP) || !sp->is_moe) {
        sp->ep_overlap[sp->num_ep_overlap++] = req->opt.overlap_moe_ep_comm ? 1 : 0;
    } else {
        sp->ep_overlap[sp->num_ep_overlap++] = 0;
        sp->ep_overlap[sp->num_ep_overlap++] = 1;
    }
    sp->num_tp_overlap = 0;
    if (moe_plan_space_fixed(sp, MOE_PK_TP_COMM_OVERLAP)) {
        sp->tp_overlap[sp->num_tp_overlap++] = req->opt.tp_comm_overlap ? 1 : 0;
    } else {
        sp->tp_overlap[sp->num_tp_overlap++] = 1; /* dominant first (with SP) */
        sp->tp_overlap[sp->num_tp_overlap++] = 0;
    }
    list_graphs(sp);
    sp->graph_neutral = -1;
    for (int i = 0; i < sp->num_graphs; i++) {
        if (sp->graphs[i].impl == MOE_CG_NONE) {
            sp->graph_neutral = i;
        }
    }
    if (sp->graph_neutral < 0) {
        sp->graph_neutral = sp->num_graphs; /* a fixed graph setting: keep "none" for tests */
        sp->graphs[sp->num_graphs] = (struct moe_plan_graph){MOE_CG_NONE, 0};
    }
    list_recompute(sp);
    list_offload(sp);
    memset(sp->rc_index, 0xff, sizeof(sp->rc_index));
    memset(sp->off_index, 0xff, sizeof(sp->off_index));
    for (int i = 0; i < sp->num_rc; i++) {
        const struct moe_plan_rc *r = &sp->rcs[i];
        sp->rc_index[r->rc % 3][r->method & 1][r->mods & 127] = (int16_t)i;
    }
    for (int i = 0; i < sp->num_off; i++) {
        const struct moe_plan_off *f = &sp->offs[i];
        sp->off_index[f->off % 3][f->mods & 127] = (int16_t)i;
    }
    sp->overlap_grad_fixed = moe_plan_space_fixed(sp, MOE_PK_OVERLAP_GRAD_REDUCE);
    sp->overlap_param_fixed = moe_plan_space_fixed(sp, MOE_PK_OVERLAP_PARAM_GATHER);
    sp->fp8_param_gather_fixed = moe_plan_space_fixed(sp, MOE_PK_FP8_PARAM_GATHER);
    return MOE_OK;
}

void moe_plan_okey_apply(const struct moe_plan_space *sp,
                         const struct moe_plan_okey *k,
                         struct moe_options *opt)
{
    const struct moe_plan_request *req = sp->req;
    *opt = req->opt;
    opt->recipe = (enum moe_recipe)k->recipe;
    opt->use_distributed_optimizer = k->dist_opt != 0;
    if (!moe_plan_space_fixed(sp, MOE_PK_OPT_OFFLOAD)) {
        opt->optimizer_cpu_offload = k->opt_offload != 0;
        opt->optimizer_offload_fraction =
            k->opt_offload != 0 ? moe_plan_offload_fracs[k->opt_offload] : 1.0;
        opt->precision_aware_optimizer = k->opt_offload != 0 || !opt_dtypes_fp32(&req->opt);
    }
    opt->fp8_param_gather = k->fp8_param_gather != 0;
    opt->overlap_grad_reduce = k->overlap_grad != 0;
    opt->overlap_param_gather = k->overlap_param != 0;
    opt->tp_comm_overlap = k->tp_overlap != 0;
    opt->overlap_moe_ep_comm = k->ep_overlap != 0;
    if (!moe_plan_space_fixed(sp, MOE_PK_EP_OVERLAP)) {
        opt->delay_wgrad_compute = k->ep_overlap != 0; /* not priced: follows the overlap */
    }
    opt->moe_grouped_gemm = k->grouped != 0;
    opt->dispatcher = (enum moe_dispatcher)k->dispatcher;
    const struct moe_plan_graph *g = &sp->graphs[k->graph <= sp->num_graphs ? k->graph : 0];
    opt->cuda_graph_impl = (enum moe_cuda_graph_impl)g->impl;
    opt->cuda_graph_modules = g->modules;
    opt->recompute = (enum moe_recompute_granularity)k->rc;
    opt->recompute_method = (enum moe_recompute_method)k->rc_method;
    opt->recompute_modules = k->rc_mods;
    opt->recompute_num_layers = k->rc_layers;
    opt->cpu_offloading_num_layers = k->off == 2 ? k->off_layers : 0;
    opt->fine_grained_offload = k->off == 1;
    opt->offload_modules = k->off == 1 ? k->off_mods : 0u;
}

void moe_plan_okey_from_options(const struct moe_plan_space *sp,
                                const struct moe_options *opt,
                                struct moe_plan_okey *k)
{
    memset(k, 0, sizeof(*k));
    k->recipe = (uint8_t)opt->recipe;
    k->dist_opt = opt->use_distributed_optimizer;
    k->opt_offload = 0;
    if (opt->optimizer_cpu_offload) {
        k->opt_offload = MOE_PLAN_NUM_FRACS - 1;
        for (int f = 1; f < MOE_PLAN_NUM_FRACS; f++) {
            if (opt->optimizer_offload_fraction == moe_plan_offload_fracs[f]) {
                k->opt_offload = (uint8_t)f;
            }
        }
    }
    k->fp8_param_gather = opt->fp8_param_gather;
    k->dispatcher = (uint8_t)opt->dispatcher;
    k->grouped = opt->moe_grouped_gemm;
    k->ep_overlap = opt->overlap_moe_ep_comm;
    k->tp_overlap = opt->tp_comm_overlap;
    k->overlap_grad = opt->overlap_grad_reduce;
    k->overlap_param = opt->overlap_param_gather;
    k->graph = 0xff;
    for (int i = 0; i < sp->num_graphs; i++) {
        if (sp->graphs[i].impl == (uint8_t)opt->cuda_graph_impl &&
            sp->graphs[i].modules == (uint8_t)opt->cuda_graph_modules) {
            k->graph = (uint8_t)i;
            break;
        }
    }
    k->rc = (uint8_t)opt->recompute;
    k->rc_method = (uint8_t)opt->recompute_method;
    k->rc_mods = (uint8_t)opt->recompute_modules;
    k->rc_layers = (uint16_t)opt->recompute_num_layers;
    k->off = opt->cpu_offloading_num_layers > 0 ? 2 : (opt->fine_grained_offload ? 1 : 0);
    k->off_mods = (uint8_t)opt->offload_modules;
    k->off_layers = (uint16_t)opt->cpu_offloading_num_layers;
}

void moe_plan_balanced_chunks(const struct moe_model_cfg *cfg,
                              int pp,
                              int vpp,
                              struct moe_layout *lay)
{
    lay->num_chunks = pp * vpp;
    moe_layout_balanced_chunks(cfg, lay);
    lay->has_custom_pp_layout = true;
}

void moe_plan_lkey_apply(const struct moe_plan_space *sp,
                         const struct moe_plan_lkey *k,
                         struct moe_layout *lay)
{
    const struct moe_plan_request *req = sp->req;
    moe_layout_init(lay);
    lay->num_gpus = req->num_gpus;
    lay->gbs = req->gbs;
    lay->seq_length = req->seq_length;
    lay->tp = k->tp;
    lay->cp = k->cp;
    lay->pp = k->pp;
    lay->vpp = k->vpp;
    lay->ep = k->ep;
    lay->etp = k->etp;
    lay->mbs = k->mbs;
    lay->sequence_parallel = k->sp != 0;
    switch ((enum moe_plan_place)k->place) {
    case MOE_PLACE_EVEN:
        break;
    case MOE_PLACE_UNEVEN:
        lay->first_stage_layers = k->first;
        lay->last_stage_layers = k->last;
        break;
    case MOE_PLACE_BALANCED:
        moe_plan_balanced_chunks(req->cfg, k->pp, k->vpp, lay);
        break;
    case MOE_PLACE_FIXED:
        lay->has_custom_pp_layout = req->lay.has_custom_pp_layout;
        lay->first_stage_layers = req->lay.first_stage_layers;
        lay->last_stage_layers = req->lay.last_stage_layers;
        if (req->lay.has_custom_pp_layout) {
            lay->num_chunks = req->lay.num_chunks;
            memcpy(lay->chunks, req->lay.chunks,
                   (size_t)req->lay.num_chunks * sizeof(lay->chunks[0]));
        }
        break;
    }
}

void moe_plan_lkey_from_layout(const struct moe_layout *lay, struct moe_plan_lkey *k)
{
    memset(k, 0, sizeof(*k));
    k->tp = lay->tp;
    k->cp = lay->cp;
    k->pp = lay->pp;
    k->vpp = lay->vpp;
    k->ep = lay->ep;
    k->etp = lay->etp;
    k->mbs = lay->mbs;
    k->sp = lay->sequence_parallel;
    k->first = lay->first_stage_layers;
    k->last = lay->last_stage_layers;
    k->place = lay->has_custom_pp_layout
                   ? MOE_PLACE_BALANCED
                   : (k->first > 0 || k->last > 0 ? MOE_PLACE_UNEVEN : MOE_PLACE_EVEN);
}

static int cmp_int(int a, int b)
{
    return a < b ? -1 : (a > b ? 1 : 0);
}

int moe_plan_lkey_cmp(const struct moe_plan_lkey *a, const struct moe_plan_lkey *b)
{
    const int va[11] = {a->tp,  a->cp, a->pp,    a->vpp,   a->ep,  a->etp,
                        a->mbs, a->sp, a->place, a->first, a->last};
    const int vb[11] = {b->tp,  b->cp, b->pp,    b->vpp,   b->ep,  b->etp,
                        b->mbs, b->sp, b->place, b->first, b->last};
    for (int i = 0; i < 11; i++) {
        int c = cmp_int(va[i], vb[i]);
        if (c != 0) {
            return c;
        }
    }
    return 0;
}

/* Dominant values sort first (FP8 parameter gather, TP overlap and the DP overlaps on; full
 * iteration graphs are graph index 0; no recompute, no offload), so that a dominated candidate
 * tying its dominator loses the tie-break and may be skipped. */
int moe_plan_okey_cmp(const struct moe_plan_okey *a, const struct moe_plan_okey *b)
{
    const int va[18] = {
        a->recipe,  a->dist_opt,   !a->fp8_param_gather, a->opt_offload,   a->dispatcher,
        a->grouped, a->ep_overlap, !a->tp_overlap,       !a->overlap_grad, !a->overlap_param,
        a->graph,   a->rc,         a->rc_method,         a->rc_mods,       a->rc_layers,
        a->off,     a->off_mods,   a->off_layers};
    const int vb[18] = {
        b->recipe,  b->dist_opt,   !b->fp8_param_gather, b->opt_offload,   b->dispatcher,
        b->grouped, b->ep_overlap, !b->tp_overlap,       !b->overlap_grad, !b->overlap_param,
        b->graph,   b->rc,         b->rc_method,         b->rc_mods,       b->rc_layers,
        b->off,     b->off_mods,   b->off_layers};
    for (int i = 0; i < 18; i++) {
        int c = cmp_int(va[i], vb[i]);
        if (c != 0) {
            return c;
        }
    }
    return 0;
}

int moe_plan_knob_cmp(const struct moe_layout *la,
                      const struct moe_options *oa,
                      const struct moe_layout *lb,
                      const struct moe_options *ob)
{
    struct moe_plan_lkey ka;
    struct moe_plan_lkey kb;
    moe_plan_lkey_from_layout(la, &ka);
    moe_plan_lkey_from_layout(lb, &kb);
    int c = moe_plan_lkey_cmp(&ka, &kb);
    if (c != 0) {
        return c;
    }
    /* Options compared through a space-free tuple: graph by (impl, modules). */
    const int va[22] = {oa->recipe,
                        oa->use_distributed_optimizer,
                        oa->fp8_param_gather,
                        oa->optimizer_cpu_offload,
                        (int)(oa->optimizer_offload_fraction * 1000.0),
                        oa->dispatcher,
                        oa->moe_grouped_gemm,
                        oa->overlap_moe_ep_comm,
                        oa->tp_comm_overlap,
                        oa->overlap_grad_reduce,
                        oa->overlap_param_gather,
                        oa->cuda_graph_impl,
                        (int)oa->cuda_graph_modules,
                        oa->recompute,
                        oa->recompute_method,
                        (int)oa->recompute_modules,
                        oa->recompute_num_layers,
                        oa->fine_grained_offload,
                        (int)oa->offload_modules,
                        oa->cpu_offloading_num_layers,
                        oa->precision_aware_optimizer,
                        oa->delay_wgrad_compute};
    const int vb[22] = {ob->recipe,
                        ob->use_distributed_optimizer,
                        ob->fp8_param_gather,
                        ob->optimizer_cpu_offload,
                        (int)(ob->optimizer_offload_fraction * 1000.0),
                        ob->dispatcher,
                        ob->moe_grouped_gemm,
                        ob->overlap_moe_ep_comm,
                        ob->tp_comm_overlap,
                        ob->overlap_grad_reduce,
                        ob->overlap_param_gather,
                        ob->cuda_graph_impl,
                        (int)ob->cuda_graph_modules,
                        ob->recompute,
                        ob->recompute_method,
                        (int)ob->recompute_modules,
                        ob->recompute_num_layers,
                        ob->fine_grained_offload,
                        (int)ob->offload_modules,
                        ob->cpu_offloading_num_layers,
                        ob->precision_aware_optimizer,
                        ob->delay_wgrad_compute};
    for (int i = 0; i < 22; i++) {
        c = cmp_int(va[i], vb[i]);
        if (c != 0) {
            return c;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Validity cache                                                                               */

struct vslot {
    uint64_t key[4];
    uint8_t used;
    uint8_t valid;
};

struct moe_plan_valid_cache {
    size_t mask;
    size_t count;
    struct vslot *slots;
    struct moe_layout scratch;
};

struct moe_plan_valid_cache *moe_plan_valid_cache_create(size_t log2_slots)
{
    struct moe_plan_valid_cache *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return NULL;
    }
    size_t n = (size_t)1 << log2_slots;
    c->slots = calloc(n, sizeof(*c->slots));
    if (c->slots == NULL) {
        free(c);
        return NULL;
    }
    c->mask = n - 1;
    return c;
}

void moe_plan_valid_cache_destroy(struct moe_plan_valid_cache *c)
{
    if (c == NULL) {
        return;
    }
    free(c->slots);
    free(c);
}

/* Neutral values of the parts (no rule fires on them). */
static void neutral_rc(struct moe_plan_okey *k)
{
    k->rc = MOE_RECOMPUTE_NONE;
    k->rc_method = 0;
    k->rc_mods = 0;
    k->rc_layers = 0;
}

static void neutral_off(struct moe_plan_okey *k)
{
    k->off = 0;
    k->off_mods = 0;
    k->off_layers = 0;
}

static void neutral_x(const struct moe_plan_space *sp, struct moe_plan_okey *k)
{
    k->tp_overlap = 0;
    k->graph = (uint8_t)sp->graph_neutral;
}

enum { PART_GROUP = 1, PART_RC = 2, PART_OFF = 4, PART_X = 8 };

static uint64_t class_key(const struct moe_plan_space *sp, const struct moe_layout *lay)
{
    const struct moe_plan_request *req = sp->req;
    uint64_t ep =
        req->opt.moe_hot_expert_replicas > 0 ? (uint64_t)lay->ep : (uint64_t)(lay->ep > 1);
    uint64_t per_rank = (uint64_t)(req->cfg->num_layers / (lay->pp > 0 ? lay->pp : 1));
    return (uint64_t)(lay->sequence_parallel ? 1 : 0) | ep << 1 | (uint64_t)(lay->pp > 1) << 21 |
           (uint64_t)(lay->vpp > 1) << 22 | per_rank << 23;
}

static void part_key(const struct moe_plan_space *sp,
                     const struct moe_layout *lay,
                     const struct moe_plan_okey *k,
                     unsigned parts,
                     uint64_t key[4])
{
    key[0] = class_key(sp, lay) | (uint64_t)parts << 56;
    key[1] = 0;
    key[2] = 0;
    key[3] = 0;
    if (parts & PART_GROUP) {
        key[1] = (uint64_t)k->recipe | (uint64_t)k->dist_opt << 8 |
                 (uint64_t)k->fp8_param_gather << 16 | (uint64_t)k->opt_offload << 24 |
                 (uint64_t)k->dispatcher << 32 | (uint64_t)k->grouped << 40 |
                 (uint64_t)k->ep_overlap << 48 | (uint64_t)k->overlap_grad << 56 |
                 (uint64_t)k->overlap_param << 57;
    }
    if (parts & PART_RC) {
        key[2] = (uint64_t)k->rc | (uint64_t)k->rc_method << 8 | (uint64_t)k->rc_mods << 16 |
                 (uint64_t)k->rc_layers << 24;
    }
    if (parts & PART_OFF) {
        key[3] = (uint64_t)k->off | (uint64_t)k->off_mods << 8 | (uint64_t)k->off_layers << 16;
    }
    if (parts & PART_X) {
        key[2] |= (uint64_t)k->tp_overlap << 48 | (uint64_t)k->graph << 56;
    }
}

static uint64_t mix64(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

bool moe_plan_valid_full(const struct moe_plan_space *sp,
                         const struct moe_layout *lay,
                         const struct moe_plan_okey *k)
{
    struct moe_options opt;
    moe_plan_okey_apply(sp, k, &opt);
    struct moe_layout scratch = *lay;
    return moe_layout_resolve(sp->req->cfg, sp->req->cl, &opt, &scratch, NULL) == MOE_OK;
}

/* Verdict on the tuple t (already neutral outside the tested parts), cached under parts. */
static bool cached_verdict(struct moe_plan_valid_cache *c,
                           const struct moe_plan_space *sp,
                           const struct moe_layout *lay,
                           const struct moe_plan_okey *t,
                           unsigned parts,
                           long *resolves)
{
    uint64_t key[4];
    part_key(sp, lay, t, parts, key);
    uint64_t h = mix64(key[0] ^ mix64(key[1] ^ mix64(key[2] ^ mix64(key[3]))));
    size_t i = (size_t)h & c->mask;
    for (;;) {
        struct vslot *s = &c->slots[i];
        if (!s->used) {
            break;
        }
        if (memcmp(s->key, key, sizeof(key)) == 0) {
            return s->valid != 0;
        }
        i = (i + 1) & c->mask;
    }
    struct moe_options opt;
    moe_plan_okey_apply(sp, t, &opt);
    c->scratch = *lay;
    bool valid = moe_layout_resolve(sp->req->cfg, sp->req->cl, &opt, &c->scratch, NULL) == MOE_OK;
    if (resolves != NULL) {
        (*resolves)++;
    }
    if (c->count * 2 >= c->mask + 1) {
        /* Full: start over (verdicts are recomputed on demand). */
        memset(c->slots, 0, (c->mask + 1) * sizeof(*c->slots));
        c->count = 0;
        i = (size_t)h & c->mask;
    }
    struct vslot *s = &c->slots[i];
    memcpy(s->key, key, sizeof(key));
    s->used = 1;
    s->valid = valid ? 1 : 0;
    c->count++;
    return valid;
}

bool moe_plan_valid(struct moe_plan_valid_cache *c,
                    const struct moe_plan_space *sp,
                    const struct moe_layout *lay,
                    const struct moe_plan_okey *k,
                    long *resolves)
{
    /* Each part with the others neutral (the group in every key). */
    struct moe_plan_okey t = *k;
    neutral_rc(&t);
    neutral_off(&t);
    neutral_x(sp, &t);
    if (!cached_verdict(c, sp, lay, &t, PART_GROUP, resolves)) {
        return false;
    }
    bool has_rc = k->rc != MOE_RECOMPUTE_NONE;
    bool has_off = k->off != 0;
    bool has_x = k->tp_overlap != t.tp_overlap || k->graph != t.graph;
    if (has_rc) {
        struct moe_plan_okey r = t;
        r.rc = k->rc;
        r.rc_method = k->rc_method;
        r.rc_mods = k->rc_mods;
        r.rc_layers = k->rc_layers;
        if (!cached_verdict(c, sp, lay, &r, PART_GROUP | PART_RC, resolves)) {
            return false;
        }
    }
    if (has_off) {
        struct moe_plan_okey f = t;
        f.off = k->off;
        f.off_mods = k->off_mods;
        f.off_layers = k->off_layers;
        if (!cached_verdict(c, sp, lay, &f, PART_GROUP | PART_OFF, resolves)) {
            return false;
        }
    }
    if (has_x) {
        struct moe_plan_okey x = t;
        x.tp_overlap = k->tp_overlap;
        x.graph = k->graph;
        if (!cached_verdict(c, sp, lay, &x, PART_GROUP | PART_X, resolves)) {
            return false;
        }
    }
    /* Pairs of the last three: the group at hand, which each part alone accepts, stands for any
     * (no rule ties a pair of them to the group); the verdict is kept without the group. */
    const unsigned pairs[3][2] = {{PART_RC, PART_OFF}, {PART_RC, PART_X}, {PART_OFF, PART_X}};
    const bool have[3] = {has_rc && has_off, has_rc && has_x, has_off && has_x};
    for (int i = 0; i < 3; i++) {
        if (!have[i]) {
            continue;
        }
        struct moe_plan_okey p = *k;
        if (!((pairs[i][0] | pairs[i][1]) & PART_RC)) {
            neutral_rc(&p);
        }
        if (!((pairs[i][0] | pairs[i][1]) & PART_OFF)) {
            neutral_off(&p);
        }
        if (!((pairs[i][0] | pairs[i][1]) & PART_X)) {
            neutral_x(sp, &p);
        }
        if (!cached_verdict(c, sp, lay, &p, pairs[i][0] | pairs[i][1], resolves)) {
            return false;
        }
    }
    return true;
}
