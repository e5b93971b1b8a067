/*
 * Tests for model/layout.c: resolution of parallel-folding layouts (dp, edp, micro-batches, chunk
 * placement), every validity rule with the substring of its message, pipeline layout strings
 * (Megatron's grammar, DeepSeek-V3's published "Et|(tt|)*30mL", errors naming the column), the
 * compact formatter's round trip and the rank mapping against a hand-written table.
 *
 * Expected values are worked out by hand in the comments next to them.
 */
/* cmocka needs these four headers first, in this order. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */
#include "model/cluster.h"
#include "model/config.h"
#include "model/layout.h"
#include "tests/test_util.h"

#include <stdio.h>
#include <string.h>

/* A small MoE model: 8 layers (layer 0 dense), 16 heads / 4 groups, 16 experts, 1 MTP layer. */
static void tiny_cfg(struct moe_model_cfg *c)
{
    moe_cfg_init(c);
    (void)snprintf(c->name, sizeof(c->name), "tiny-moe");
    c->num_layers = 8;
    c->hidden_size = 1024;
    c->ffn_hidden_size = 4096;
    c->num_attention_heads = 16;
    c->num_query_groups = 4;
    c->kv_channels = 64;
    c->is_swiglu = true;
    c->is_untied_embeddings = true;
    c->vocab_size = 32000;
    c->seq_length = 4096;
    c->num_experts = 16;
    c->moe_ffn_hidden_size = 512;
    c->moe_router_topk = 4;
    c->moe_shared_expert_intermediate_size = 512;
    c->mtp_num_layers = 1;
    moe_cfg_set_first_dense(c, 1);
}

/* 16 GPUs: tp2 cp1 pp2 -> dp4; ep4 etp1 -> edp2; gbs 32 / (mbs 1 x dp 4) = 8 micro-batches. */
static void tiny_layout(struct moe_layout *lay)
{
    moe_layout_init(lay);
    lay->num_gpus = 16;
    lay->tp = 2;
    lay->pp = 2;
    lay->ep = 4;
    lay->etp = 1;
    lay->sequence_parallel = true;
    lay->gbs = 32;
}

struct setup {
    struct moe_model_cfg cfg;
    struct moe_layout lay;
    struct moe_options opt;
    struct moe_cluster cl;
    bool use_cluster;
};

static void base_setup(struct setup *s)
{
    memset(s, 0, sizeof(*s));
    tiny_cfg(&s->cfg);
    tiny_layout(&s->lay);
    moe_options_init(&s->opt);
    (void)snprintf(s->cl.name, sizeof(s->cl.name), "test-hopper");
    (void)snprintf(s->cl.gpu.name, sizeof(s->cl.gpu.name), "H100");
    s->cl.gpu.has_fp8 = true;
    s->cl.gpu.has_mx = false;
}

static enum moe_status resolve(struct setup *s, struct moe_diag *d)
{
    memset(d, 0, sizeof(*d));
    return moe_layout_resolve(&s->cfg, s->use_cluster ? &s->cl : NULL, &s->opt, &s->lay, d);
}

static void test_resolve_base(void **state)
{
    (void)state;
    struct setup s;
    base_setup(&s);
    struct moe_diag d;
    assert_int_equal(resolve(&s, &d), MOE_OK);
    assert_int_equal(s.lay.dp, 4);
    assert_int_equal(s.lay.edp, 2);
    assert_int_equal(s.lay.num_microbatches, 8);
    assert_int_equal(s.lay.seq_length, 4096); /* from the model */
    assert_int_equal(s.lay.num_chunks, 2);
    assert_int_equal(s.lay.chunks[0].num_layers, 4);
    assert_int_equal(s.lay.chunks[0].first_layer, 0);
    assert_true(s.lay.chunks[0].has_embedding);
    assert_false(s.lay.chunks[0].has_loss);
    assert_int_equal(s.lay.chunks[1].num_layers, 4);
    assert_int_equal(s.lay.chunks[1].first_layer, 4);
    assert_int_equal(s.lay.chunks[1].num_mtp, 1); /* MTP with the loss, Megatron's default */
    assert_true(s.lay.chunks[1].has_loss);
    assert_true(s.lay.sequence_parallel);
}

static void test_resolve_defaults(void **state)
{
    (void)state;
    struct setup s;
    base_setup(&s);
    struct moe_diag d;
    s.lay.gbs = 0; /* Megatron: global batch defaults to mbs * dp */
    s.lay.mbs = 2;
    assert_int_equal(resolve(&s, &d), MOE_OK);
    assert_int_equal(s.lay.gbs, 8);
    assert_int_equal(s.lay.num_microbatches, 1);

    base_setup(&s);
    s.lay.tp = 1; /* Megatron switches sequence parallelism off when tp == 1 */
    s.lay.sequence_parallel = true;
    assert_int_equal(resolve(&s, &d), MOE_OK);
    assert_false(s.lay.sequence_parallel);
    assert_int_equal(s.lay.dp, 8);

    base_setup(&s);
    s.cfg.num_query_groups = 4; /* groups may also be a divisor of tp (KV heads replicated) */
    s.lay.tp = 8;
    s.lay.gbs = 4;
    assert_int_equal(resolve(&s, &d), MOE_OK);
    assert_int_equal(s.lay.dp, 1);

    base_setup(&s);
    s.cfg.ffn_hidden_size = 4098; /* no dense layer: the dense FFN size is never split */
    moe_cfg_set_first_dense(&s.cfg, 0);
    s.lay.tp = 4;
    assert_int_equal(resolve(&s, &d), MOE_OK);
}

/* ---- every rule: mutate the base, expect a status and a substring of the message ---- */

enum rule_case {
    R_GPUS_ZERO,
    R_TP_ZERO,
    R_GPUS_DIVIDE,
    R_FOLDING,
    R_HEADS,
    R_GROUPS,
    R_FFN,
    R_SHARED,
    R_EXPERTS,
    R_MOE_FFN,
    R_EP_DENSE,
    R_MOE_BIAS_ETP,
    R_SEQ_CP,
    R_SEQ_UNSET,
    R_SP_REQUIRED,
    R_SP_SEQ,
    R_GBS,
    R_VPP_PP1,
    R_VPP_MICROBATCHES,
    R_LAYERS_DIVIDE,
    R_FIRST_PP1,
    R_FIRST_VPP,
    R_MIDDLE_DIVIDE,
    R_MIDDLE_MISMATCH,
    R_CUSTOM_AND_FIRST,
    R_FP8PG_BF16,
    R_FP8PG_DISTOPT,
    R_DTYPE_NO_PAO,
    R_MAIN_GRADS_FP16,
    R_PAO_DISTOPT,
    R_OPT_OFFLOAD_PAO,
    R_OPT_OFFLOAD_FP8PG,
    R_OPT_OFFLOAD_FRACTION,
    R_OPG_DISTOPT,
    R_OPG_OGR,
    R_TPCO_SP,
    R_TPCO_TP1,
    R_DELAY_WGRAD,
    R_EPO_EP1,
    R_EPO_ALLGATHER,
    R_EPO_VPP,
    R_EPO_FULL,
    R_EPO_MOE_RC,
    R_EPO_MTP,
    R_DEEPEP_DENSE,
    R_CAPACITY,
    R_IMBALANCE,
    R_REPLICAS_NEG,
    R_REPLICAS_EP1,
    R_REPLICAS_MAX,
    R_RC_NONE_LAYERS,
    R_RC_SEL_NOMODS,
    R_RC_SEL_LAYERS,
    R_RC_MLA,
    R_RC_MOE_DENSE,
    R_RC_SHARED,
    R_RC_MOE_ACT_GG,
    R_RC_DELAYED,
    R_RC_FULL_LAYERS,
    R_RC_FULL_MODS,
    R_OFF_LAYERS,
    R_OFF_PP,
    R_OFF_RECOMPUTE,
    R_OFF_MODS_NO_FG,
    R_OFF_FG_AND_CPU,
    R_OFF_FG_NOMODS,
    R_OFF_ATTN_PROJ,
    R_OFF_MOE_RC,
    R_CG_NO_IMPL,
    R_CG_FULL_ITER,
    R_CG_FULL_RC,
    R_CG_CPU_OFFLOAD,
    R_CG_MOE_ROUTER,
    R_CG_PREPROCESS,
    R_CG_MOE_DENSE,
    R_CG_MLP_ALLMOE,
    R_CG_MOE_DROPLESS,
    R_CG_PREPROCESS_A2A,
    R_CG_FG_MOE,
    R_CG_FG_LOCAL,
    R_CG_EPO,
    R_HW_FP8,
    R_HW_MXFP8,
    R_HW_NVFP4,
    R_NUM_CASES,
};

struct rule_expect {
    enum rule_case id;
    const char *name;
    enum moe_status status;
    const char *substring;
};

#define RULE(id, st, sub)                                                                          \
    {                                                                                              \
        id, #id, st, sub                                                                           \
    }
static const struct rule_expect rules[] = {
    RULE(R_GPUS_ZERO, MOE_ERR_INVALID, "give the GPU count"),
    RULE(R_TP_ZERO, MOE_ERR_INVALID, "--tensor-model-parallel-size 0: must be at least 1"),
    RULE(R_GPUS_DIVIDE, MOE_ERR_INFEASIBLE, "num_gpus=18 is not divisible by tp*cp*pp"),
    RULE(R_FOLDING, MOE_ERR_INFEASIBLE, "parallel folding needs tp*cp*dp = 8 divisible by etp*ep"),
    RULE(R_HEADS, MOE_ERR_INFEASIBLE, "num_attention_heads=16 is not divisible by tp=3"),
    RULE(R_GROUPS, MOE_ERR_INFEASIBLE, "num_query_groups=6 must be a multiple or a divisor"),
    RULE(R_FFN, MOE_ERR_INFEASIBLE, "ffn_hidden_size=4098 (dense MLP) is not divisible by tp=4"),
    RULE(R_SHARED, MOE_ERR_INFEASIBLE, "moe_shared_expert_intermediate_size=514"),
    RULE(R_EXPERTS, MOE_ERR_INFEASIBLE, "num_experts=12 is not divisible by ep=8"),
    RULE(R_MOE_FFN, MOE_ERR_INFEASIBLE, "moe_ffn_hidden_size=513 is not divisible by etp=2"),
    RULE(R_EP_DENSE, MOE_ERR_INVALID, "ep=4 needs a model with experts"),
    RULE(R_MOE_BIAS_ETP, MOE_ERR_INVALID, "experts with linear biases (this model has them) need"),
    RULE(R_SEQ_CP, MOE_ERR_INFEASIBLE, "seq_length=4094 must be a multiple of 2*cp = 4"),
    RULE(R_SEQ_UNSET, MOE_ERR_INVALID, "give --seq-length"),
    RULE(R_SP_REQUIRED, MOE_ERR_INVALID, "needs --sequence-parallel"),
    RULE(R_SP_SEQ, MOE_ERR_INFEASIBLE, "tokens per CP rank must divide over tp=2"),
    RULE(R_GBS, MOE_ERR_INFEASIBLE, "global batch 30 is not divisible by micro-batch 1 x dp 4"),
    RULE(R_VPP_PP1, MOE_ERR_INVALID, "vpp=2 needs pp > 1"),
    RULE(R_VPP_MICROBATCHES,
         MOE_ERR_INFEASIBLE,
         "needs num_microbatches=3 to be a multiple of pp=2"),
    RULE(R_LAYERS_DIVIDE, MOE_ERR_INFEASIBLE, "--pipeline-model-parallel-layout 'Et*5|t*4mL'"),
    RULE(R_FIRST_PP1, MOE_ERR_INVALID, "first/last pipeline stage layer counts need pp > 1"),
    RULE(R_FIRST_VPP, MOE_ERR_INFEASIBLE, "must be multiples of vpp=2"),
    RULE(R_MIDDLE_DIVIDE, MOE_ERR_INFEASIBLE, "the 7 middle layers do not divide over 2 middle"),
    RULE(R_MIDDLE_MISMATCH, MOE_ERR_INFEASIBLE, "leave 2 layers for 0 middle stages"),
    RULE(R_CUSTOM_AND_FIRST, MOE_ERR_INVALID, "cannot be combined with --decoder-first/last"),
    RULE(R_FP8PG_BF16, MOE_ERR_INVALID, "--fp8-param-gather needs an FP8/FP4 recipe"),
    RULE(R_FP8PG_DISTOPT, MOE_ERR_INVALID, "--fp8-param-gather needs --use-distributed-optimizer"),
    RULE(R_DTYPE_NO_PAO, MOE_ERR_INVALID, "--exp-avg-dtype bf16 needs --use-precision-aware"),
    RULE(R_MAIN_GRADS_FP16, MOE_ERR_INVALID, "--main-grads-dtype must be fp32 or bf16, not fp16"),
    RULE(R_PAO_DISTOPT,
         MOE_ERR_INVALID,
         "--use-precision-aware-optimizer needs --use-distributed-optimizer"),
    RULE(R_OPT_OFFLOAD_PAO,
         MOE_ERR_INVALID,
         "--optimizer-cpu-offload needs --use-precision-aware-optimizer"),
    RULE(R_OPT_OFFLOAD_FP8PG, MOE_ERR_INVALID, "needs --fp8-recipe delayed"),
    RULE(R_OPT_OFFLOAD_FRACTION, MOE_ERR_INVALID, "must be in (0, 1] when offloading"),
    RULE(R_OPG_DISTOPT, MOE_ERR_INVALID, "--overlap-param-gather needs --use-distributed-opt"),
    RULE(R_OPG_OGR, MOE_ERR_INVALID, "--overlap-param-gather needs --overlap-grad-reduce"),
    RULE(R_TPCO_SP, MOE_ERR_INVALID, "--tp-comm-overlap needs --sequence-parallel"),
    RULE(R_TPCO_TP1, MOE_ERR_INVALID, "--tp-comm-overlap needs --sequence-parallel with tp > 1"),
    RULE(R_DELAY_WGRAD,
         MOE_ERR_INVALID,
         "--delay-wgrad-compute needs --overlap-moe-expert-parallel-comm"),
    RULE(R_EPO_EP1, MOE_ERR_INVALID, "needs a MoE model with ep > 1"),
    RULE(R_EPO_ALLGATHER, MOE_ERR_INVALID, "not allgather"),
    RULE(R_EPO_VPP, MOE_ERR_INVALID, "needs virtual pipeline stages (vpp > 1)"),
    RULE(R_EPO_FULL, MOE_ERR_INVALID, "use selective recompute"),
    RULE(R_EPO_MOE_RC, MOE_ERR_INVALID, "cannot recompute 'moe'"),
    RULE(R_EPO_MTP, MOE_ERR_INVALID, "supports at most 1 MTP layer (model has 2)"),
    RULE(R_DEEPEP_DENSE, MOE_ERR_INVALID, "the deepep dispatcher needs a MoE model"),
    RULE(R_CAPACITY, MOE_ERR_INVALID, "capacity factor -1 must be >= 0"),
    RULE(R_IMBALANCE, MOE_ERR_INVALID, "--moe-imbalance 0.5: give a max/mean load factor >= 1"),
    RULE(R_REPLICAS_NEG, MOE_ERR_INVALID, "--moe-hot-expert-replicas -1 must be >= 0"),
    RULE(R_REPLICAS_EP1, MOE_ERR_INVALID, "needs a MoE model with ep > 1 (clones go"),
    RULE(R_REPLICAS_MAX, MOE_ERR_INVALID, "5 exceeds experts per EP rank (16/4 = 4)"),
    RULE(R_RC_NONE_LAYERS, MOE_ERR_INVALID, "set but recompute is off"),
    RULE(R_RC_SEL_NOMODS, MOE_ERR_INVALID, "selective recompute needs --recompute-modules"),
    RULE(R_RC_SEL_LAYERS, MOE_ERR_INVALID, "applies only to full recompute"),
    RULE(R_RC_MLA, MOE_ERR_INVALID, "mla_up_proj needs multi-latent attention"),
    RULE(R_RC_MOE_DENSE, MOE_ERR_INVALID, "moe_act, moe and shared_experts need a MoE model"),
    RULE(R_RC_SHARED, MOE_ERR_INVALID, "shared_experts needs shared experts"),
    RULE(R_RC_MOE_ACT_GG, MOE_ERR_INVALID, "moe_act needs --moe-grouped-gemm"),
    RULE(
        R_RC_DELAYED, MOE_ERR_INVALID, "FP8 delayed scaling cannot recompute moe_act or layernorm"),
    RULE(R_RC_FULL_LAYERS, MOE_ERR_INVALID, "between 1 and num_layers/pp = 4 (got 5)"),
    RULE(R_RC_FULL_MODS, MOE_ERR_INVALID, "--recompute-modules applies to selective recompute"),
    RULE(R_OFF_LAYERS, MOE_ERR_INVALID, "--cpu-offloading-num-layers 8 must be below num_layers=8"),
    RULE(R_OFF_PP, MOE_ERR_INVALID, "CPU offloading does not support pipeline parallelism"),
    RULE(R_OFF_RECOMPUTE, MOE_ERR_INVALID, "CPU offloading does not work with activation"),
    RULE(R_OFF_MODS_NO_FG,
         MOE_ERR_INVALID,
         "--offload-modules needs --fine-grained-activation-offloading"),
    RULE(R_OFF_FG_AND_CPU, MOE_ERR_INVALID, "cannot be combined with --cpu-offloading-num-layers"),
    RULE(R_OFF_FG_NOMODS, MOE_ERR_INVALID, "needs --offload-modules"),
    RULE(R_OFF_ATTN_PROJ, MOE_ERR_INVALID, "attn_proj needs core_attn too"),
    RULE(R_OFF_MOE_RC, MOE_ERR_INVALID, "while recomputing the whole MoE layer"),
    RULE(R_CG_NO_IMPL, MOE_ERR_INVALID, "--cuda-graph-modules needs --cuda-graph-impl"),
    RULE(R_CG_FULL_ITER, MOE_ERR_INVALID, "use --cuda-graph-impl full_iteration"),
    RULE(R_CG_FULL_RC, MOE_ERR_INVALID, "full recompute is not supported with per-layer CUDA"),
    RULE(R_CG_CPU_OFFLOAD, MOE_ERR_INVALID, "CUDA graphs do not support CPU offloading"),
    RULE(R_CG_MOE_ROUTER, MOE_ERR_INVALID, "moe and moe_router are exclusive"),
    RULE(R_CG_PREPROCESS, MOE_ERR_INVALID, "moe_preprocess needs moe_router"),
    RULE(R_CG_MOE_DENSE, MOE_ERR_INVALID, "moe CUDA graphs need a MoE model"),
    RULE(R_CG_MLP_ALLMOE, MOE_ERR_INVALID, "the mlp CUDA graph needs dense layers"),
    RULE(R_CG_MOE_DROPLESS, MOE_ERR_INVALID, "needs drop-and-pad routing"),
    RULE(R_CG_PREPROCESS_A2A, MOE_ERR_INVALID, "alltoall dispatcher's host sync"),
    RULE(R_CG_FG_MOE, MOE_ERR_INVALID, "activation offloading does not support the moe CUDA"),
    RULE(R_CG_FG_LOCAL, MOE_ERR_INVALID, "local CUDA graphs support offloading only"),
    RULE(R_CG_EPO, MOE_ERR_INVALID, "not supported with --overlap-moe-expert-parallel-comm"),
    RULE(R_HW_FP8, MOE_ERR_UNSUPPORTED, "fp8-tensorwise needs FP8 tensor cores"),
    RULE(R_HW_MXFP8, MOE_ERR_UNSUPPORTED, "mxfp8 needs block-scaled MX/NV formats (Blackwell)"),
    RULE(R_HW_NVFP4, MOE_ERR_UNSUPPORTED, "nvfp4 needs block-scaled MX/NV formats (Blackwell)"),
};

static void make_dense(struct moe_model_cfg *c)
{
    c->num_experts = 0;
    c->moe_ffn_hidden_size = 0;
    c->moe_router_topk = 0;
    c->moe_shared_expert_intermediate_size = 0;
    moe_cfg_set_moe_every(c, 0);
}

/* Layout rules: sizes, folding, splits, sequence, batch, pipeline. */
static bool apply_layout_case(enum rule_case id, struct setup *s)
{
    struct moe_model_cfg *c = &s->cfg;
    struct moe_layout *l = &s->lay;
    switch (id) {
    case R_GPUS_ZERO:
        l->num_gpus = 0;
        break;
    case R_TP_ZERO:
        l->tp = 0;
        break;
    case R_GPUS_DIVIDE:
        l->num_gpus = 18;
        break; /* 18 % (2*1*2) != 0 */
    case R_FOLDING:
        l->ep = 16;
        break; /* tp*cp*dp = 8, etp*ep = 16 */
    case R_HEADS:
        l->num_gpus = 24;
        l->tp = 3;
        break; /* dp 4; 16 heads % 3 */
    case R_GROUPS:
        c->num_query_groups = 6;
        l->tp = 4;
        break;
    case R_FFN:
        c->ffn_hidden_size = 4098;
        l->tp = 4;
        break;
    case R_SHARED:
        c->moe_shared_expert_intermediate_size = 514;
        l->tp = 4;
        break;
    case R_EXPERTS:
        c->num_experts = 12;
        l->ep = 8;
        break;
    case R_MOE_FFN:
        c->moe_ffn_hidden_size = 513;
        l->etp = 2;
        break;
    case R_EP_DENSE:
        make_dense(c);
        break;
    case R_MOE_BIAS_ETP: /* GPT-OSS style biases with expert TP */
        c->has_linear_bias = true;
        l->etp = 2;
        break;
    case R_SEQ_CP:
        l->cp = 2;
        c->seq_length = 4094;
        break; /* dp 2; 4094 % 4 = 2 */
    case R_SEQ_UNSET:
        c->seq_length = 0;
        break;
    case R_SP_REQUIRED:
        l->sequence_parallel = false;
        break;
    case R_SP_SEQ:
        c->seq_length = 4095;
        break;
    case R_GBS:
        l->gbs = 30;
        break;
    case R_VPP_PP1:
        l->pp = 1;
        l->vpp = 2;
        break;
    case R_VPP_MICROBATCHES:
        l->vpp = 2;
        l->gbs = 12;
        break; /* 12 / 4 = 3 micro-batches */
    case R_LAYERS_DIVIDE:
        c->num_layers = 9; /* T = ceil((9+1)/2) = 5: chunk 0 gets 5, chunk 1 4 + MTP */
        moe_cfg_set_first_dense(c, 1);
        break;
    case R_FIRST_PP1:
        l->pp = 1;
        l->first_stage_layers = 4;
        break;
    case R_FIRST_VPP:
        c->num_layers = 12;
        l->pp = 4;
        l->vpp = 2;
        l->first_stage_layers = 3;
        l->last_stage_layers = 2;
        break;
    case R_MIDDLE_DIVIDE:
        c->num_layers = 10;
        l->pp = 4;
        l->first_stage_layers = 1;
        l->last_stage_layers = 2;
        break;
    case R_MIDDLE_MISMATCH:
        c->num_layers = 10;
        l->first_stage_layers = 4;
        l->last_stage_layers = 4;
        break;
    case R_CUSTOM_AND_FIRST:
        assert_int_equal(moe_layout_parse_pp_string("Et*4|t*4mL", c, l, NULL), MOE_OK);
        l->first_stage_layers = 2;
        break;
    default:
        return false;
    }
    return true;
}

static bool apply_precision_case(enum rule_case id, struct setup *s)
{
    struct moe_options *o = &s->opt;
    switch (id) {
    case R_FP8PG_BF16:
        o->fp8_param_gather = true;
        o->use_distributed_optimizer = true;
        break;
    case R_FP8PG_DISTOPT:
        o->recipe = MOE_RECIPE_FP8_TENSORWISE;
        o->fp8_param_gather = true;
        break;
    case R_DTYPE_NO_PAO:
        o->exp_avg_dtype = MOE_DTYPE_BF16;
        break;
    case R_MAIN_GRADS_FP16:
        o->use_distributed_optimizer = true;
        o->precision_aware_optimizer = true;
        o->main_grads_dtype = MOE_DTYPE_FP16;
        break;
    case R_PAO_DISTOPT:
        o->precision_aware_optimizer = true;
        break;
    case R_OPT_OFFLOAD_PAO:
        o->optimizer_cpu_offload = true;
        break;
    case R_OPT_OFFLOAD_FP8PG:
        o->use_distributed_optimizer = true;
        o->precision_aware_optimizer = true;
        o->optimizer_cpu_offload = true;
        o->fp8_param_gather = true;
        o->recipe = MOE_RECIPE_FP8_BLOCKWISE;
        break;
    case R_OPT_OFFLOAD_FRACTION:
        o->use_distributed_optimizer = true;
        o->precision_aware_optimizer = true;
        o->optimizer_cpu_offload = true;
        o->optimizer_offload_fraction = 0.0;
        break;
    case R_OPG_DISTOPT:
        o->overlap_param_gather = true;
        o->overlap_grad_reduce = true;
        break;
    case R_OPG_OGR:
        o->overlap_param_gather = true;
        o->use_distributed_optimizer = true;
        break;
    case R_TPCO_SP:
        make_dense(&s->cfg);
        s->lay.ep = 1;
        s->lay.sequence_parallel = false;
        o->tp_comm_overlap = true;
        break;
    case R_TPCO_TP1:
        s->lay.tp = 1;
        o->tp_comm_overlap = true;
        break;
    case R_HW_FP8:
        s->use_cluster = true;
        s->cl.gpu.has_fp8 = false;
        o->recipe = MOE_RECIPE_FP8_TENSORWISE;
        break;
    case R_HW_MXFP8:
        s->use_cluster = true;
        o->recipe = MOE_RECIPE_MXFP8;
        break;
    case R_HW_NVFP4:
        s->use_cluster = true;
        o->recipe = MOE_RECIPE_NVFP4;
        break;
    default:
        return false;
    }
    return true;
}

static bool apply_moe_case(enum rule_case id, struct setup *s)
{
    struct moe_options *o = &s->opt;
    switch (id) {
    case R_DELAY_WGRAD:
        o->delay_wgrad_compute = true;
        break;
    case R_EPO_EP1:
        s->lay.ep = 1;
        o->overlap_moe_ep_comm = true;
        break;
    case R_EPO_ALLGATHER:
        o->overlap_moe_ep_comm = true;
        o->dispatcher = MOE_DISPATCH_ALLGATHER;
        break;
    case R_EPO_VPP:
        o->overlap_moe_ep_comm = true;
        break; /* pp 2, vpp 1 */
    case R_EPO_FULL:
        s->lay.pp = 1;
        o->overlap_moe_ep_comm = true;
        o->recompute = MOE_RECOMPUTE_FULL;
        o->recompute_num_layers = 1;
        break;
    case R_EPO_MOE_RC:
        s->lay.pp = 1;
        o->overlap_moe_ep_comm = true;
        o->recompute = MOE_RECOMPUTE_SELECTIVE;
        o->recompute_modules = MOE_RC_MOE;
        break;
    case R_EPO_MTP:
        s->lay.pp = 1;
        s->cfg.mtp_num_layers = 2;
        o->overlap_moe_ep_comm = true;
        break;
    case R_DEEPEP_DENSE:
        make_dense(&s->cfg);
        s->lay.ep = 1;
        o->dispatcher = MOE_DISPATCH_DEEPEP;
        break;
    case R_CAPACITY:
        o->capacity_factor = -1.0;
        break;
    case R_IMBALANCE:
        o->moe_imbalance = 0.5;
        break;
    case R_REPLICAS_NEG:
        o->moe_hot_expert_replicas = -1;
        break;
    case R_REPLICAS_EP1:
        s->lay.ep = 1;
        o->moe_hot_expert_replicas = 1;
        break;
    case R_REPLICAS_MAX:
        o->moe_hot_expert_replicas = 5;
        break;
    default:
        return false;
    }
    return true;
}

static bool apply_recompute_case(enum rule_case id, struct setup *s)
{
    struct moe_options *o = &s->opt;
    if (id >= R_RC_SEL_NOMODS && id <= R_RC_DELAYED) {
        o->recompute = MOE_RECOMPUTE_SELECTIVE;
        o->recompute_modules = MOE_RC_CORE_ATTN;
    }
    switch (id) {
    case R_RC_NONE_LAYERS:
        o->recompute_num_layers = 2;
        break;
    case R_RC_SEL_NOMODS:
        o->recompute_modules = 0;
        break;
    case R_RC_SEL_LAYERS:
        o->recompute_num_layers = 1;
        break;
    case R_RC_MLA:
        o->recompute_modules = MOE_RC_MLA_UP_PROJ;
        break;
    case R_RC_MOE_DENSE:
        make_dense(&s->cfg);
        s->lay.ep = 1;
        o->recompute_modules = MOE_RC_MOE;
        break;
    case R_RC_SHARED:
        s->cfg.moe_shared_expert_intermediate_size = 0;
        o->recompute_modules = MOE_RC_SHARED_EXPERTS;
        break;
    case R_RC_MOE_ACT_GG:
        o->recompute_modules = MOE_RC_MOE_ACT;
        break;
    case R_RC_DELAYED:
        o->recipe = MOE_RECIPE_FP8_DELAYED;
        o->recompute_modules = MOE_RC_LAYERNORM;
        break;
    case R_RC_FULL_LAYERS:
        o->recompute = MOE_RECOMPUTE_FULL;
        o->recompute_num_layers = 5; /* 8 layers / pp 2 */
        break;
    case R_RC_FULL_MODS:
        o->recompute = MOE_RECOMPUTE_FULL;
        o->recompute_num_layers = 1;
        o->recompute_modules = MOE_RC_MLP;
        break;
    default:
        return false;
    }
    return true;
}

static bool apply_offload_case(enum rule_case id, struct setup *s)
{
    struct moe_options *o = &s->opt;
    switch (id) {
    case R_OFF_LAYERS:
        s->lay.pp = 1;
        o->cpu_offloading_num_layers = 8;
        break;
    case R_OFF_PP:
        o->cpu_offloading_num_layers = 1;
        break;
    case R_OFF_RECOMPUTE:
        s->lay.pp = 1;
        o->cpu_offloading_num_layers = 1;
        o->recompute = MOE_RECOMPUTE_SELECTIVE;
        o->recompute_modules = MOE_RC_CORE_ATTN;
        break;
    case R_OFF_MODS_NO_FG:
        o->offload_modules = MOE_OFF_CORE_ATTN;
        break;
    case R_OFF_FG_AND_CPU:
        s->lay.pp = 1;
        o->cpu_offloading_num_layers = 1;
        o->fine_grained_offload = true;
        o->offload_modules = MOE_OFF_CORE_ATTN;
        break;
    case R_OFF_FG_NOMODS:
        o->fine_grained_offload = true;
        break;
    case R_OFF_ATTN_PROJ:
        o->fine_grained_offload = true;
        o->offload_modules = MOE_OFF_ATTN_PROJ;
        break;
    case R_OFF_MOE_RC:
        o->fine_grained_offload = true;
        o->offload_modules = MOE_OFF_MOE_ACT;
        o->recompute = MOE_RECOMPUTE_SELECTIVE;
        o->recompute_modules = MOE_RC_MOE;
        break;
    default:
        return false;
    }
    return true;
}

static bool apply_cuda_graph_case(enum rule_case id, struct setup *s)
{
    struct moe_options *o = &s->opt;
    o->cuda_graph_impl = MOE_CG_TE;
    switch (id) {
    case R_CG_NO_IMPL:
        o->cuda_graph_impl = MOE_CG_NONE;
        o->cuda_graph_modules = MOE_CGM_ATTN;
        break;
    case R_CG_FULL_ITER:
        o->cuda_graph_modules = MOE_CGM_FULL_ITERATION;
        break;
    case R_CG_FULL_RC:
        o->recompute = MOE_RECOMPUTE_FULL;
        o->recompute_num_layers = 1;
        break;
    case R_CG_CPU_OFFLOAD:
        s->lay.pp = 1;
        o->cpu_offloading_num_layers = 1;
        break;
    case R_CG_MOE_ROUTER:
        o->capacity_factor = 1.0;
        o->cuda_graph_modules = MOE_CGM_MOE | MOE_CGM_MOE_ROUTER;
        break;
    case R_CG_PREPROCESS:
        o->cuda_graph_modules = MOE_CGM_MOE_PREPROCESS;
        break;
    case R_CG_MOE_DENSE:
        make_dense(&s->cfg);
        s->lay.ep = 1;
        o->cuda_graph_modules = MOE_CGM_MOE_ROUTER;
        break;
    case R_CG_MLP_ALLMOE:
        moe_cfg_set_first_dense(&s->cfg, 0);
        o->cuda_graph_modules = MOE_CGM_MLP;
        break;
    case R_CG_MOE_DROPLESS:
        o->cuda_graph_modules = MOE_CGM_MOE;
        break;
    case R_CG_PREPROCESS_A2A:
        o->capacity_factor = 1.25;
        o->cuda_graph_modules = MOE_CGM_MOE_ROUTER | MOE_CGM_MOE_PREPROCESS;
        break;
    case R_CG_FG_MOE:
        o->capacity_factor = 1.0;
        o->cuda_graph_modules = MOE_CGM_MOE;
        o->fine_grained_offload = true;
        o->offload_modules = MOE_OFF_EXPERT_FC1;
        break;
    case R_CG_FG_LOCAL:
        o->cuda_graph_impl = MOE_CG_LOCAL;
        o->cuda_graph_modules = MOE_CGM_ATTN;
        o->fine_grained_offload = true;
        o->offload_modules = MOE_OFF_CORE_ATTN;
        break;
    case R_CG_EPO:
        s->lay.pp = 1;
        o->overlap_moe_ep_comm = true;
        o->cuda_graph_modules = MOE_CGM_MLP;
        break;
    default:
        o->cuda_graph_impl = MOE_CG_NONE;
        return false;
    }
    return true;
}

static void test_every_rule(void **state)
{
    (void)state;
    assert_int_equal(MOE_ARRAY_LEN(rules), R_NUM_CASES);
    for (size_t i = 0; i < MOE_ARRAY_LEN(rules); i++) {
        const struct rule_expect *r = &rules[i];
        assert_int_equal(r->id, (int)i);
        struct setup s;
        base_setup(&s);
        bool applied = apply_layout_case(r->id, &s) || apply_precision_case(r->id, &s) ||
                       apply_moe_case(r->id, &s) || apply_recompute_case(r->id, &s) ||
                       apply_offload_case(r->id, &s) || apply_cuda_graph_case(r->id, &s);
        if (!applied) {
            fail_msg("%s: no mutation", r->name);
        }
        struct moe_diag d;
        enum moe_status st = resolve(&s, &d);
        if (st != r->status || strstr(d.message, r->substring) == NULL) {
            fail_msg("%s: got %s \"%s\", want %s containing \"%s\"", r->name, moe_status_str(st),
                     d.message, moe_status_str(r->status), r->substring);
        }
    }
}

/* Each option rule's fix makes the same setup resolve: the rules are not over-eager. */
static void test_rules_accept_fixed_setups(void **state)
{
    (void)state;
    struct setup s;
    struct moe_diag d;

    base_setup(&s); /* full recompute, CUDA graphs off; expert biases with etp 1 */
    s.cfg.has_linear_bias = true;
    s.opt.recompute = MOE_RECOMPUTE_FULL;
    s.opt.recompute_method = MOE_RECOMPUTE_BLOCK;
    s.opt.recompute_num_layers = 4;
    assert_int_equal(resolve(&s, &d), MOE_OK);

    base_setup(&s); /* EP overlap with interleaving, selective recompute, delayed wgrad */
    s.lay.vpp = 2;
    s.opt.overlap_moe_ep_comm = true;
    s.opt.delay_wgrad_compute = true;
    s.opt.recompute = MOE_RECOMPUTE_SELECTIVE;
    s.opt.recompute_modules = MOE_RC_CORE_ATTN | MOE_RC_MOE_ACT | MOE_RC_SHARED_EXPERTS;
    s.opt.moe_grouped_gemm = true;
    s.opt.dispatcher = MOE_DISPATCH_HYBRIDEP;
    assert_int_equal(resolve(&s, &d), MOE_OK);

    base_setup(&s); /* the full precision/optimizer stack on Blackwell */
    s.use_cluster = true;
    s.cl.gpu.has_mx = true;
    s.opt.recipe = MOE_RECIPE_MXFP8;
    s.opt.fp8_param_gather = true;
    s.opt.use_distributed_optimizer = true;
    s.opt.overlap_grad_reduce = true;
    s.opt.overlap_param_gather = true;
    s.opt.precision_aware_optimizer = true;
    s.opt.main_grads_dtype = MOE_DTYPE_BF16;
    s.opt.exp_avg_dtype = MOE_DTYPE_BF16;
    s.opt.exp_avg_sq_dtype = MOE_DTYPE_FP8;
    s.opt.tp_comm_overlap = true;
    s.opt.cuda_graph_impl = MOE_CG_TE;
    s.opt.cuda_graph_modules = MOE_CGM_ATTN | MOE_CGM_MOE_ROUTER | MOE_CGM_MOE_PREPROCESS;
    s.opt.fine_grained_offload = true;
    s.opt.offload_modules = MOE_OFF_CORE_ATTN | MOE_OFF_ATTN_PROJ | MOE_OFF_EXPERT_FC1;
    s.opt.moe_imbalance = 0.0; /* auto */
    s.opt.moe_hot_expert_replicas = 4;
    assert_int_equal(resolve(&s, &d), MOE_OK);

    base_setup(&s); /* full-iteration graphs allow full recompute and CPU offloading */
    s.lay.pp = 1;
    s.opt.cuda_graph_impl = MOE_CG_LOCAL;
    s.opt.cuda_graph_modules = MOE_CGM_FULL_ITERATION;
    s.opt.recompute = MOE_RECOMPUTE_FULL;
    s.opt.recompute_num_layers = 2;
    assert_int_equal(resolve(&s, &d), MOE_OK);

    base_setup(&s); /* no cluster: hardware rules are skipped */
    s.opt.recipe = MOE_RECIPE_NVFP4;
    assert_int_equal(resolve(&s, &d), MOE_OK);

    base_setup(&s); /* options may be NULL: only the layout is checked */
    memset(&d, 0, sizeof(d));
    assert_int_equal(moe_layout_resolve(&s.cfg, NULL, NULL, &s.lay, &d), MOE_OK);
}

/* ---- chunk placement ---- */

static void test_first_last_stage(void **state)
{
    (void)state;
    struct setup s;
    struct moe_diag d;
    base_setup(&s); /* 10 layers, pp 4: first 1, last 1, middle 8 / 2 stages = 4 */
    s.cfg.num_layers = 10;
    moe_cfg_set_first_dense(&s.cfg, 1);
    s.lay.pp = 4;
    s.lay.first_stage_layers = 1;
    s.lay.last_stage_layers = 1;
    assert_int_equal(resolve(&s, &d), MOE_OK);
    const int want[4] = {1, 4, 4, 1};
    const int first[4] = {0, 1, 5, 9};
    for (int c = 0; c < 4; c++) {
        assert_int_equal(s.lay.chunks[c].num_layers, want[c]);
        assert_int_equal(s.lay.chunks[c].first_layer, first[c]);
    }
    assert_int_equal(s.lay.chunks[3].num_mtp, 1);

    /* vpp 2, 12 layers, pp 4, first 2, last 2: per chunk 1 on the ends, middle (8/2)/2 = 2.
     * Chunk c = v*4 + p, so the order is p0 p1 p2 p3 of v0 then of v1. */
    base_setup(&s);
    s.cfg.num_layers = 12;
    moe_cfg_set_first_dense(&s.cfg, 1);
    s.lay.pp = 4;
    s.lay.vpp = 2;
    s.lay.first_stage_layers = 2;
    s.lay.last_stage_layers = 2;
    assert_int_equal(resolve(&s, &d), MOE_OK); /* 32 / 2 = 16 micro-batches, 16 % 4 == 0 */
    const int want2[8] = {1, 2, 2, 1, 1, 2, 2, 1};
    int next = 0;
    for (int c = 0; c < 8; c++) {
        assert_int_equal(s.lay.chunks[c].num_layers, want2[c]);
        assert_int_equal(s.lay.chunks[c].first_layer, next);
        next += want2[c];
    }
    assert_true(s.lay.chunks[0].has_embedding);
    assert_true(s.lay.chunks[7].has_loss);
    assert_int_equal(s.lay.chunks[7].num_mtp, 1);
    char text[128];
    moe_layout_format_pp_string(&s.lay, text, (int)sizeof(text));
    assert_string_equal(text, "Et|tt|tt|t|t|tt|tt|tmL");

    /* Only the first stage given: the last stage is a middle stage. 9 = 3 + 3*2. */
    base_setup(&s);
    s.cfg.num_layers = 9;
    moe_cfg_set_first_dense(&s.cfg, 1);
    s.lay.pp = 4;
    s.lay.first_stage_layers = 3;
    assert_int_equal(resolve(&s, &d), MOE_OK);
    assert_int_equal(s.lay.chunks[0].num_layers, 3);
    assert_int_equal(s.lay.chunks[3].num_layers, 2);
}

static void test_deepseek_v3_suggestion_and_layout(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_diag d;
    memset(&d, 0, sizeof(d));
    assert_int_equal(moe_cfg_preset("deepseek-v3", &cfg, &d), MOE_OK);
    struct moe_layout lay;
    moe_layout_init(&lay);
    lay.num_gpus = 256; /* pp 16 x dp 16 */
    lay.pp = 16;
    lay.vpp = 2;
    lay.ep = 16;    /* dp 16 = ep 16 x edp 1 */
    lay.gbs = 4096; /* 256 micro-batches */
    struct moe_options opt;
    moe_options_init(&opt);
    /* 61 layers do not divide over 32 chunks: the published layout is suggested. */
    assert_int_equal(moe_layout_resolve(&cfg, NULL, &opt, &lay, &d), MOE_ERR_INFEASIBLE);
    assert_non_null(strstr(d.message, "num_layers=61 does not divide over pp*vpp = 16*2 = 32"));
    assert_non_null(strstr(d.message, "'Et|(tt|)*30mL'"));
    assert_string_equal(d.source, "--pipeline-model-parallel-layout");

    /* The string itself: chunk 0 = E t, chunks 1..30 = t t, chunk 31 = m L (Megatron's order). */
    memset(&d, 0, sizeof(d));
    assert_int_equal(moe_layout_parse_pp_string("Et|(tt|)*30mL", &cfg, &lay, &d), MOE_OK);
    assert_true(lay.has_custom_pp_layout);
    assert_int_equal(lay.num_chunks, 32);
    assert_int_equal(lay.chunks[0].num_layers, 1);
    assert_true(lay.chunks[0].has_embedding);
    for (int c = 1; c <= 30; c++) {
        assert_int_equal(lay.chunks[c].num_layers, 2);
        assert_int_equal(lay.chunks[c].first_layer, 1 + 2 * (c - 1));
    }
    assert_int_equal(lay.chunks[31].num_layers, 0);
    assert_int_equal(lay.chunks[31].num_mtp, 1);
    assert_true(lay.chunks[31].has_loss);
    assert_int_equal(moe_layout_resolve(&cfg, NULL, &opt, &lay, &d), MOE_OK);
    assert_int_equal(lay.dp, 16);
    assert_int_equal(lay.edp, 1);
    char text[256];
    moe_layout_format_pp_string(&lay, text, (int)sizeof(text));
    assert_string_equal(text, "Et|(tt|)*30mL");
    int n = 0;
    assert_int_equal(moe_layout_count_pp_chunks("Et|(tt|)*30mL", &n, &d), MOE_OK);
    assert_int_equal(n, 32);
}

static void test_megatron_docstring_layout(void **state)
{
    (void)state;
    /* Megatron's TransformerConfig doc example: "E|(tt|)*2,(t|)*4,mL" with pp=4 gives vpp=2;
     * vpp 0: pp0 E, pp1-2 tt, pp3 t; vpp 1: pp0-2 t, pp3 m L. */
    struct moe_model_cfg cfg;
    tiny_cfg(&cfg);
    struct moe_layout lay;
    moe_layout_init(&lay);
    lay.pp = 4;
    lay.vpp = 2;
    struct moe_diag d;
    memset(&d, 0, sizeof(d));
    assert_int_equal(moe_layout_parse_pp_string("E|(tt|)*2,(t|)*4,mL", &cfg, &lay, &d), MOE_OK);
    const int want[8] = {0, 2, 2, 1, 1, 1, 1, 0};
    for (int c = 0; c < 8; c++) {
        assert_int_equal(lay.chunks[c].num_layers, want[c]);
    }
    assert_int_equal(lay.chunks[7].num_mtp, 1);

    /* nested repeats and single-character repeats */
    cfg.num_layers = 6;
    cfg.mtp_num_layers = 0;
    lay.pp = 8;
    lay.vpp = 1;
    assert_int_equal(moe_layout_parse_pp_string("E|((t|)*2t|)*2L", &cfg, &lay, &d), MOE_OK);
    assert_int_equal(lay.num_chunks, 8);
    assert_int_equal(lay.chunks[0].num_layers, 0);
    assert_int_equal(lay.chunks[6].num_layers, 1);
    assert_int_equal(lay.chunks[7].num_layers, 0);
    lay.pp = 2;
    assert_int_equal(moe_layout_parse_pp_string("Et*3|t*3L", &cfg, &lay, &d), MOE_OK);
    assert_int_equal(lay.chunks[0].num_layers, 3);
    assert_int_equal(lay.chunks[1].first_layer, 3);
    assert_int_equal(moe_layout_parse_pp_string("E,t,t,t|t,t,t,L", &cfg, &lay, &d), MOE_OK);
}

struct pp_error_case {
    const char *text;
    int pp, vpp, layers, mtp;
    int column; /* 0: not checked */
    const char *substring;
};

static void test_pp_string_errors(void **state)
{
    (void)state;
    static const struct pp_error_case cases[] = {
        {"Et|tx|L", 2, 1, 2, 0, 5, "invalid character 'x'"},
        {"tE|L", 2, 1, 1, 0, 1, "must start with E"},
        {"Et|L|t", 2, 1, 2, 0, 5, "nothing may follow L"},
        {"Et|(tt|*2L", 2, 1, 3, 0, 4, "'(' is never closed"},
        {"Et|tt)*2L", 2, 1, 3, 0, 6, "')' without a matching '('"},
        {"Et|(tt|)L", 2, 1, 3, 0, 9, "expected '*N' after ')'"},
        {"Et|t*|L", 2, 1, 2, 0, 5, "'*' must be followed by a count"},
        {"Et|tm|tL", 2, 1, 3, 1, 7, "decoder layers (t) must come before MTP"},
        {"Et|tt", 2, 1, 3, 0, 6, "must end with L"},
        {"EEt|L", 2, 1, 1, 0, 2, "E (embedding) appears twice"},
        {"", 2, 1, 1, 0, 0, "empty"},
        {"Et|m|mL", 3, 1, 1, 2, 6, "all MTP layers (m) must be in one chunk"},
        {"E(t)*99999L", 1, 1, 8, 0, 3, "more decoder layers than"},
        {"E((((((((((t)*1)*1)*1)*1)*1)*1)*1)*1)*1)*1L", 1, 1, 1, 0, 10, "nested too deeply"},
        {"Et|tL", 4, 1, 2, 0, 6, "the layout has 2 chunks, not a multiple of pp=4"},
        {"Et|t|t|tL", 2, 1, 4, 0, 10, "describes vpp=2"},
        {"Et|tL", 2, 1, 3, 0, 6, "places 2 decoder layers (t) but the model has num_layers=3"},
        {"Et|tL", 2, 1, 2, 1, 6, "places 0 MTP layers (m) but the model has mtp_num_layers=1"},
        {"Et|tm||L", 2, 2, 2, 1, 9, "MTP layers must be in the last virtual stage"},
    };
    for (size_t i = 0; i < MOE_ARRAY_LEN(cases); i++) {
        const struct pp_error_case *c = &cases[i];
        struct moe_model_cfg cfg;
        tiny_cfg(&cfg);
        cfg.num_layers = c->layers;
        cfg.mtp_num_layers = c->mtp;
        struct moe_layout lay;
        moe_layout_init(&lay);
        lay.pp = c->pp;
        lay.vpp = c->vpp;
        struct moe_diag d;
        memset(&d, 0, sizeof(d));
        enum moe_status st = moe_layout_parse_pp_string(c->text, &cfg, &lay, &d);
        if (st == MOE_OK || strstr(d.message, c->substring) == NULL ||
            (c->column != 0 && d.column != c->column)) {
            fail_msg("\"%s\": got %s column %d \"%s\", want column %d \"%s\"", c->text,
                     moe_status_str(st), d.column, d.message, c->column, c->substring);
        }
        assert_false(lay.has_custom_pp_layout);
        assert_string_equal(d.source, "--pipeline-model-parallel-layout");
    }
}

/* Random valid layouts: formatting then parsing gives back the same chunks. */
static void test_pp_format_round_trip(void **state)
{
    (void)state;
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 2024);
    for (int iter = 0; iter < 300; iter++) {
        struct moe_layout a;
        moe_layout_init(&a);
        a.pp = 1 + (int)(moe_test_rng_uniform(&rng) * 8);
        a.vpp = 1 + (int)(moe_test_rng_uniform(&rng) * 4);
        a.num_chunks = a.pp * a.vpp;
        int mtp = (int)(moe_test_rng_uniform(&rng) * 3);
        int uniform = (int)(moe_test_rng_uniform(&rng) * 6); /* repeats are common */
        int total = 0;
        for (int c = 0; c < a.num_chunks; c++) {
            int n = (moe_test_rng_uniform(&rng) < 0.7) ? uniform
                                                       : (int)(moe_test_rng_uniform(&rng) * 7);
            a.chunks[c].num_layers = (uint16_t)n;
            total += n;
        }
        if (total == 0) {
            a.chunks[0].num_layers = 1;
            total = 1;
        }
        a.chunks[0].has_embedding = 1;
        a.chunks[a.num_chunks - 1].has_loss = 1;
        /* MTP on the last virtual stage of some rank, after every decoder layer: the last chunk */
        a.chunks[a.num_chunks - 1].num_mtp = (uint8_t)mtp;
        char text[4096];
        moe_layout_format_pp_string(&a, text, (int)sizeof(text));

        struct moe_model_cfg cfg;
        tiny_cfg(&cfg);
        cfg.num_layers = total;
        cfg.mtp_num_layers = mtp;
        struct moe_layout b;
        moe_layout_init(&b);
        b.pp = a.pp;
        b.vpp = a.vpp;
        struct moe_diag d;
        memset(&d, 0, sizeof(d));
        if (moe_layout_parse_pp_string(text, &cfg, &b, &d) != MOE_OK) {
            fail_msg("iteration %d: \"%s\" does not parse back: %s", iter, text, d.message);
        }
        assert_int_equal(b.num_chunks, a.num_chunks);
        int next = 0;
        for (int c = 0; c < a.num_chunks; c++) {
            assert_int_equal(b.chunks[c].num_layers, a.chunks[c].num_layers);
            assert_int_equal(b.chunks[c].num_mtp, a.chunks[c].num_mtp);
            assert_int_equal(b.chunks[c].has_embedding, a.chunks[c].has_embedding);
            assert_int_equal(b.chunks[c].has_loss, a.chunks[c].has_loss);
            assert_int_equal(b.chunks[c].first_layer, next);
            next += a.chunks[c].num_layers;
        }
    }
}

/* world 16: tp2 cp1 dp4 pp2; etp1 ep4 edp2 (DESIGN.md's Megatron-Core order). */
static void test_rank_coords(void **state)
{
    (void)state;
    struct setup s;
    base_setup(&s);
    struct moe_diag d;
    assert_int_equal(resolve(&s, &d), MOE_OK);
    /* rank: stage tp cp dp etp ep edp */
    static const int table[16][8] = {
        {0, 0, 0, 0, 0, 0, 0, 0},  {1, 0, 1, 0, 0, 0, 1, 0},  {2, 0, 0, 0, 1, 0, 2, 0},
        {3, 0, 1, 0, 1, 0, 3, 0},  {4, 0, 0, 0, 2, 0, 0, 1},  {5, 0, 1, 0, 2, 0, 1, 1},
        {6, 0, 0, 0, 3, 0, 2, 1},  {7, 0, 1, 0, 3, 0, 3, 1},  {8, 1, 0, 0, 0, 0, 0, 0},
        {9, 1, 1, 0, 0, 0, 1, 0},  {10, 1, 0, 0, 1, 0, 2, 0}, {11, 1, 1, 0, 1, 0, 3, 0},
        {12, 1, 0, 0, 2, 0, 0, 1}, {13, 1, 1, 0, 2, 0, 1, 1}, {14, 1, 0, 0, 3, 0, 2, 1},
        {15, 1, 1, 0, 3, 0, 3, 1},
    };
    for (int r = 0; r < 16; r++) {
        struct moe_rank_coords c;
        moe_layout_rank_coords(&s.lay, r, &c);
        const int got[8] = {r, c.stage, c.tp, c.cp, c.dp, c.etp, c.ep, c.edp};
        for (int k = 0; k < 8; k++) {
            if (got[k] != table[r][k]) {
                fail_msg("rank %d field %d: got %d want %d", r, k, got[k], table[r][k]);
            }
        }
    }
    /* world 8: tp2 cp2 dp2 pp1; etp2 ep2 edp2. rank 5: l=5 -> tp 1, cp (5/2)%2 = 0, dp 5/4 = 1;
     * etp 1, ep (5/2)%2 = 0, edp 1. rank 6: tp 0, cp 1, dp 1; etp 0, ep 1, edp 1. */
    struct moe_layout lay;
    moe_layout_init(&lay);
    lay.tp = 2;
    lay.cp = 2;
    lay.dp = 2;
    lay.etp = 2;
    lay.ep = 2;
    lay.edp = 2;
    struct moe_rank_coords c;
    moe_layout_rank_coords(&lay, 5, &c);
    assert_int_equal(c.stage, 0);
    assert_int_equal(c.tp, 1);
    assert_int_equal(c.cp, 0);
    assert_int_equal(c.dp, 1);
    assert_int_equal(c.etp, 1);
    assert_int_equal(c.ep, 0);
    assert_int_equal(c.edp, 1);
    moe_layout_rank_coords(&lay, 6, &c);
    assert_int_equal(c.tp, 0);
    assert_int_equal(c.cp, 1);
    assert_int_equal(c.etp, 0);
    assert_int_equal(c.ep, 1);
}

static void test_names(void **state)
{
    (void)state;
    struct moe_diag d;
    memset(&d, 0, sizeof(d));
    enum moe_recipe r;
    for (int i = 0; i < MOE_NUM_RECIPES; i++) {
        assert_int_equal(moe_recipe_parse(moe_recipe_name((enum moe_recipe)i), &r, &d), MOE_OK);
        assert_int_equal(r, i);
    }
    assert_int_equal(moe_recipe_parse("blockwise", &r, &d), MOE_OK); /* Megatron's spelling */
    assert_int_equal(r, MOE_RECIPE_FP8_BLOCKWISE);
    assert_int_equal(moe_recipe_parse("fp7", &r, &d), MOE_ERR_PARSE);
    assert_non_null(strstr(d.message, "accepted: bf16, fp8-tensorwise"));
    enum moe_dispatcher disp;
    assert_int_equal(moe_dispatcher_parse("hybridep", &disp, &d), MOE_OK);
    assert_int_equal(disp, MOE_DISPATCH_HYBRIDEP);
    assert_string_equal(moe_cuda_graph_impl_name(MOE_CG_TE), "transformer_engine");
    assert_string_equal(moe_recompute_name(MOE_RECOMPUTE_SELECTIVE), "selective");
    assert_string_equal(moe_dtype_name(MOE_DTYPE_FP8), "fp8");
    unsigned bit = 0;
    assert_int_equal(moe_module_parse(MOE_MODSET_OFFLOAD, "expert_fc1", &bit, &d), MOE_OK);
    assert_int_equal(bit, MOE_OFF_EXPERT_FC1);
    assert_string_equal(moe_module_name(MOE_MODSET_CUDA_GRAPH, MOE_CGM_MOE_ROUTER), "moe_router");
    assert_string_equal(moe_module_name(MOE_MODSET_RECOMPUTE, MOE_RC_MLA_UP_PROJ), "mla_up_proj");
    assert_null(moe_module_name(MOE_MODSET_RECOMPUTE, 3u));
    assert_int_equal(moe_module_parse(MOE_MODSET_RECOMPUTE, "mlp_norm", &bit, &d), MOE_ERR_PARSE);
    assert_non_null(strstr(d.message, "unknown recompute module 'mlp_norm'"));
    assert_int_equal(moe_recipe_math(MOE_RECIPE_MXFP8), MOE_MATH_FP8);
    assert_int_equal(moe_recipe_math(MOE_RECIPE_NVFP4), MOE_MATH_FP4);
    assert_int_equal(moe_recipe_math(MOE_RECIPE_BF16), MOE_MATH_BF16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resolve_base),
        cmocka_unit_test(test_resolve_defaults),
        cmocka_unit_test(test_every_rule),
        cmocka_unit_test(test_rules_accept_fixed_setups),
        cmocka_unit_test(test_first_last_stage),
        cmocka_unit_test(test_deepseek_v3_suggestion_and_layout),
        cmocka_unit_test(test_megatron_docstring_layout),
        cmocka_unit_test(test_pp_string_errors),
        cmocka_unit_test(test_pp_format_round_trip),
        cmocka_unit_test(test_rank_coords),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
