/*
 * The Megatron-LM flags moefold accepts, as data (model/megatron_internal.h describes a row).
 * Names, value counts (store_true: none; nargs='*'/'+': a list), choices and defaults mirror
 * megatron/training/arguments.py (main, 2025-26); ranges are what moefold can represent
 * (MOE_MAX_*) or sizes no real model exceeds.
 *
 * The priced rows come first, in the order moe_megatron_format_args writes them (model, layout,
 * options, moefold's own), so the table reads as a command line; then the flags moefold refuses;
 * then those it accepts without effect, each with the reason it prints. Flags outside the table
 * are unknown unless a family below covers them. Cross-flag meaning lives in megatron_rules.c.
 */
#include "model/megatron_internal.h"

#include <stddef.h>

/* K_CHOICE rows store the index of a choice in an enum member. */
_Static_assert(sizeof(enum moe_router_score) == sizeof(int), "enum stored as int");
_Static_assert(sizeof(enum moe_recompute_method) == sizeof(int), "enum stored as int");
_Static_assert(sizeof(enum moe_dtype) == sizeof(int), "enum stored as int");

/* Choices in Megatron's order; where a row stores the index, it is the enum's order. */
static const char *const scores[] = {"softmax", "sigmoid"};
static const char *const fp8_formats[] = {"e4m3", "hybrid"};
static const char *const fp8_recipes[] = {"tensorwise", "delayed", "blockwise", "mxfp8"};
static const char *const fp4_formats[] = {"e2m1"};
static const char *const fp4_recipes[] = {"nvfp4"};
static const char *const main_grads[] = {"fp32", "bf16"};
static const char *const moments[] = {"fp32", "bf16", "fp16", "fp8"};
static const char *const dispatchers[] = {"alltoall", "allgather", "flex"};
static const char *const backends[] = {"deepep", "hybridep"};
static const char *const grans[] = {"full", "selective"};
static const char *const methods[] = {"uniform", "block"};
static const char *const cg_impls[] = {"none", "local", "transformer_engine", "full_iteration"};

const char *const moe_mf_why_text[WHY_COUNT] = {
    "",
    "does not affect performance",
    "its performance effect is not modelled",
    "priced as bf16 (moefold models BF16 mixed precision)",
    "no effect without --fp8-format",
    "no effect without --fp4-format",
    "no effect without --moe-token-dispatcher-type flex",
    "no effect without --recompute-granularity selective",
    "implied by --cpu-offloading-num-layers",
};

/* Where a value goes. */
#define CFG(m)     .target = T_CFG, .off = offsetof(struct moe_model_cfg, m)
#define LAY(m)     .target = T_LAY, .off = offsetof(struct moe_layout, m)
#define OPT(m)     .target = T_OPT, .off = offsetof(struct moe_options, m)
#define RULE(s)    .target = T_RULE, .slot = s
#define CHOICES(a) .choices = a, .num_choices = (int)MOE_ARRAY_LEN(a)
/* Rows by how the value is read: name, destination, field marked, [range | choices | module set,]
 * write rule, its condition, [Megatron's default,] meaning. */
#define INT(n, to, fld, lo_, hi_, w, c, d, doc_)                                                   \
    {                                                                                              \
        .name = n, .arity = A1, .kind = K_INT, to, .field = fld, .lo = lo_, .hi = hi_, .write = w, \
        .when = c, .def = d, .doc = doc_                                                           \
    }
#define BOOL(n, to, fld, w, c, doc_)                                                               \
    {                                                                                              \
        .name = n, .arity = A0, .kind = K_BOOL, to, .field = fld, .write = w, .when = c,           \
        .doc = doc_                                                                                \
    }
/* A flag alone whose writing a function decides. */
#define BOOLW(n, to, fld, wfn, c, doc_)                                                            \
    {                                                                                              \
        .name = n, .arity = A0, .kind = K_BOOL, to, .field = fld, .write = W_CALL,                 \
        .write_fn = wfn, .when = c, .doc = doc_                                                    \
    }
#define CHOICE(n, to, fld, ch, w, c, doc_)                                                         \
    {                                                                                              \
        .name = n, .arity = A1, .kind = K_CHOICE, to, .field = fld, CHOICES(ch), .write = w,       \
        .when = c, .doc = doc_                                                                     \
    }
#define MODULES(n, to, fld, set, w, c, doc_)                                                       \
    {                                                                                              \
        .name = n, .arity = AN, .kind = K_MODULES, to, .field = fld, .modset = set, .write = w,    \
        .when = c, .doc = doc_                                                                     \
    }
#define TEXT(n, to, fld, w, wfn, c, doc_)                                                          \
    {                                                                                              \
        .name = n, .arity = A1, .kind = K_TEXT, to, .field = fld, .write = w, .write_fn = wfn,     \
        .when = c, .doc = doc_                                                                     \
    }
/* Read by a handler (megatron_rules.c); `to` names the member a generic write rule reads. */
#define CALL(n, fn, to, w, wfn, c, doc_)                                                           \
    {                                                                                              \
        .name = n, .arity = A1, .kind = K_CALL, .read = fn, to, .field = MOE_MF_COUNT, .write = w, \
        .write_fn = wfn, .when = c, .doc = doc_                                                    \
    }
/* Kept for a rule: a flag alone, an int, a choice, a module list. */
#define RBOOL(n, s, w, wfn, doc_)                                                                  \
    {                                                                                              \
        .name = n, .arity = A0, .kind = K_BOOL, RULE(s), .field = MOE_MF_COUNT, .write = w,        \
        .write_fn = wfn, .doc = doc_                                                               \
    }
#define RINT(n, s, lo_, hi_, w, wfn, doc_)                                                         \
    {                                                                                              \
        .name = n, .arity = A1, .kind = K_INT, RULE(s), .field = MOE_MF_COUNT, .lo = lo_,          \
        .hi = hi_, .write = w, .write_fn = wfn, .doc = doc_                                        \
    }
#define RCHOICE(n, s, ch, w, wfn, doc_)                                                            \
    {                                                                                              \
        .name = n, .arity = A1, .kind = K_CHOICE, RULE(s), .field = MOE_MF_COUNT, CHOICES(ch),     \
        .write = w, .write_fn = wfn, .doc = doc_                                                   \
    }
#define RMODULES(n, s, set, doc_)                                                                  \
    {                                                                                              \
        .name = n, .arity = AN, .kind = K_MODULES, RULE(s), .field = MOE_MF_COUNT, .modset = set,  \
        .doc = doc_                                                                                \
    }
#define RCALL(n, fn, s, ch, doc_)                                                                  \
    {                                                                                              \
        .name = n, .arity = A1, .kind = K_CALL, .read = fn, RULE(s), .field = MOE_MF_COUNT,        \
        CHOICES(ch), .doc = doc_                                                                   \
    }
#define REFUSE(n)                                                                                  \
    {                                                                                              \
        .name = n, .arity = A0, .kind = K_REFUSE, .field = MOE_MF_COUNT                            \
    }
#define IGN(n, ar, why_)                                                                           \
    {                                                                                              \
        .name = n, .arity = ar, .kind = K_IGNORE, .field = MOE_MF_COUNT, .why = why_               \
    }

/* One flag per row reads as a table. */
/* clang-format off */
const struct moe_mf_flag moe_mf_flags[] = {
    /* ---- model shape (struct moe_model_cfg) ---- */
    INT("--num-layers", CFG(num_layers), MOE_MF_NUM_LAYERS, 1, MOE_MAX_LAYERS, W_INT, C_ALWAYS, 0,
        "decoder layers (MTP layers not counted)"),
    INT("--hidden-size", CFG(hidden_size), MOE_MF_HIDDEN_SIZE, 1, 1 << 20, W_INT, C_ALWAYS, 0,
        "hidden size h"),
    INT("--ffn-hidden-size", CFG(ffn_hidden_size), MOE_MF_FFN_HIDDEN_SIZE, 1, 1 << 22, W_POS, C_ALWAYS, 0,
        "dense FFN width (default 4h, or the SwiGLU rule: a rule)"),
    INT("--num-attention-heads", CFG(num_attention_heads), MOE_MF_NUM_ATTENTION_HEADS, 1, 4096, W_INT, C_ALWAYS, 0,
        "attention heads"),
    RBOOL("--group-query-attention", S_GQA, W_CALL, moe_mf_write_gqa,
        "grouped-query attention (one group unless --num-query-groups; a rule)"),
    RINT("--num-query-groups", S_QUERY_GROUPS, 1, 4096, W_NONE, NULL,
        "key-value groups (written with --group-query-attention)"),
    INT("--kv-channels", CFG(kv_channels), MOE_MF_KV_CHANNELS, 1, 65536, W_POS, C_ALWAYS, 0,
        "head dim (default hidden / heads: a rule)"),
    BOOLW("--swiglu", CFG(is_swiglu), MOE_MF_SWIGLU, moe_mf_write_swiglu, C_ALWAYS,
        "gated SwiGLU FFNs"),
    BOOL("--quick-geglu", CFG(is_quick_geglu), MOE_MF_QUICK_GEGLU, W_TRUE, C_ALWAYS,
        "gated FFNs with a quick-GELU gate (GPT-OSS; implies the gated MLP)"),
    BOOL("--untie-embeddings-and-output-weights", CFG(is_untied_embeddings), MOE_MF_UNTIE_EMBEDDINGS, W_TRUE, C_ALWAYS,
        "separate output weights"),
    BOOL("--qk-layernorm", CFG(has_qk_layernorm), MOE_MF_QK_LAYERNORM, W_TRUE, C_ALWAYS,
        "per-head norms of queries and keys"),
    INT("--vocab-size", CFG(vocab_size), MOE_MF_VOCAB_SIZE, 1, 1 << 24, W_INT, C_ALWAYS, 0,
        "vocabulary before padding"),
    INT("--make-vocab-size-divisible-by", CFG(make_vocab_size_divisible_by), MOE_MF_VOCAB_DIVISOR, 1, 1 << 20, W_INT, C_ALWAYS, 0,
        "vocabulary padding multiple (times TP)"),
    CALL("--seq-length", moe_mf_read_seq_length, .target = T_NONE, W_CALL, moe_mf_write_seq_length, C_ALWAYS,
        "tokens per sequence (the model's and the layout's)"),
    BOOL("--multi-latent-attention", CFG(is_mla), MOE_MF_MLA, W_TRUE, C_ALWAYS, "multi-latent attention (MLA)"),
    INT("--q-lora-rank", CFG(q_lora_rank), MOE_MF_Q_LORA_RANK, 0, 65536, W_POS, C_MLA, 0,
        "MLA query latent (0: queries not compressed)"),
    INT("--kv-lora-rank", CFG(kv_lora_rank), MOE_MF_KV_LORA_RANK, 1, 65536, W_INT, C_MLA, 32,
        "MLA key-value latent"),
    INT("--qk-head-dim", CFG(qk_head_dim), MOE_MF_QK_HEAD_DIM, 1, 65536, W_INT, C_MLA, 128,
        "MLA non-rotary query-key dim per head"),
    INT("--qk-pos-emb-head-dim", CFG(qk_pos_emb_head_dim), MOE_MF_QK_POS_EMB_HEAD_DIM, 1, 65536, W_INT, C_MLA, 64,
        "MLA rotary query-key dim per head"),
    INT("--v-head-dim", CFG(v_head_dim), MOE_MF_V_HEAD_DIM, 1, 65536, W_INT, C_MLA, 128,
        "MLA value dim per head"),
    CALL("--window-size", moe_mf_read_window_size, .target = T_NONE, W_CALL, moe_mf_write_window, C_ALWAYS,
        "sliding attention window, \"(left,right)\" (every layer unless --window-attn-skip-freq)"),
    TEXT("--window-attn-skip-freq", RULE(S_WINDOW_SKIP), MOE_MF_WINDOW, W_NONE, NULL, C_ALWAYS,
        "which layers are windowed: an int or a list expression (written with --window-size)"),
    INT("--num-experts", CFG(num_experts), MOE_MF_NUM_EXPERTS, 0, MOE_MAX_EXPERTS, W_INT, C_MOE, 0,
        "routed experts (0: a dense model)"),
    INT("--moe-ffn-hidden-size", CFG(moe_ffn_hidden_size), MOE_MF_MOE_FFN_HIDDEN_SIZE, 1, 1 << 22, W_INT, C_MOE, 0,
        "expert FFN width (default: the dense FFN's, a rule)"),
    INT("--moe-router-topk", CFG(moe_router_topk), MOE_MF_MOE_ROUTER_TOPK, 1, MOE_MAX_EXPERTS, W_INT, C_MOE, 2,
        "experts per token"),
    TEXT("--moe-layer-freq", RULE(S_MOE_LAYER_FREQ), MOE_MF_MOE_LAYER_FREQ, W_CALL, moe_mf_write_layer_freq, C_MOE,
        "which layers are MoE: an int N (every Nth) or a list expression"),
    INT("--moe-shared-expert-intermediate-size", CFG(moe_shared_expert_intermediate_size), MOE_MF_SHARED_EXPERT_SIZE, 1, 1 << 22, W_POS, C_MOE, 0,
        "shared-expert FFN width"),
    CHOICE("--moe-router-score-function", CFG(router_score), MOE_MF_ROUTER_SCORE, scores, W_CHOICE, C_MOE,
        "router scores"),
    BOOL("--moe-router-enable-expert-bias", CFG(has_router_expert_bias), MOE_MF_ROUTER_EXPERT_BIAS, W_TRUE, C_MOE,
        "aux-loss-free expert bias"),
    INT("--moe-router-num-groups", CFG(moe_router_num_groups), MOE_MF_ROUTER_NUM_GROUPS, 0, MOE_MAX_EXPERTS, W_POS, C_MOE, 0,
        "expert groups of group-limited routing"),
    INT("--moe-router-group-topk", CFG(moe_router_group_topk), MOE_MF_ROUTER_GROUP_TOPK, 0, MOE_MAX_EXPERTS, W_POS, C_MOE, 0,
        "groups a token may use"),
    INT("--mtp-num-layers", CFG(mtp_num_layers), MOE_MF_MTP_NUM_LAYERS, 0, MOE_MAX_MTP, W_POS, C_ALWAYS, 0,
        "multi-token prediction layers"),
    /* ---- layout (struct moe_layout) ---- */
    INT("--tensor-model-parallel-size", LAY(tp), MOE_MF_TP, 1, 1024, W_INT, C_ALWAYS, 0, "TP"),
    INT("--pipeline-model-parallel-size", LAY(pp), MOE_MF_PP, 1, MOE_MAX_PP_CHUNKS, W_INT, C_ALWAYS, 0, "PP"),
    TEXT("--pipeline-model-parallel-layout", RULE(S_PP_LAYOUT), MOE_MF_COUNT, W_CALL, moe_mf_write_pp_layout, C_ALWAYS,
        "layers of every pipeline chunk, e.g. \"Et|(tt|)*30mL\" (gives vpp; a rule)"),
    RINT("--num-virtual-stages-per-pipeline-rank", S_VPP_STAGES, 1, MOE_MAX_PP_CHUNKS, W_CALL, moe_mf_write_vpp,
        "VPP (one of three ways to give it: a rule)"),
    RINT("--num-layers-per-virtual-pipeline-stage", S_VPP_LAYERS, 1, MOE_MAX_LAYERS, W_NONE, NULL,
        "VPP as layers per chunk (written as virtual stages)"),
    INT("--decoder-first-pipeline-num-layers", LAY(first_stage_layers), MOE_MF_FIRST_STAGE_LAYERS, 1, MOE_MAX_LAYERS, W_POS, C_EVEN_PP, 0,
        "decoder layers on the first stage"),
    INT("--decoder-last-pipeline-num-layers", LAY(last_stage_layers), MOE_MF_LAST_STAGE_LAYERS, 1, MOE_MAX_LAYERS, W_POS, C_EVEN_PP, 0,
        "decoder layers on the last stage"),
    INT("--context-parallel-size", LAY(cp), MOE_MF_CP, 1, 1024, W_INT, C_ALWAYS, 0, "CP"),
    INT("--expert-model-parallel-size", LAY(ep), MOE_MF_EP, 1, MOE_MAX_EXPERTS, W_INT, C_ALWAYS, 0, "EP"),
    INT("--expert-tensor-parallel-size", LAY(etp), MOE_MF_ETP, 1, 1024, W_INT, C_ALWAYS, 0,
        "ETP (default TP when only TP is given: a rule)"),
    BOOL("--sequence-parallel", LAY(sequence_parallel), MOE_MF_SEQUENCE_PARALLEL, W_TRUE, C_ALWAYS,
        "sequence parallelism"),
    INT("--micro-batch-size", LAY(mbs), MOE_MF_MBS, 1, 1 << 16, W_INT, C_ALWAYS, 0, "sequences per micro-batch"),
    INT("--global-batch-size", LAY(gbs), MOE_MF_GBS, 1, 1 << 26, W_POS, C_ALWAYS, 0, "sequences per step"),
    /* ---- options (struct moe_options) ---- */
    RCHOICE("--fp8-format", S_FP8_FORMAT, fp8_formats, W_CALL, moe_mf_write_precision,
        "FP8 training (the recipe: a rule; writes every precision flag)"),
    RCALL("--fp8-recipe", moe_mf_read_quant_recipe, S_FP8_RECIPE, fp8_recipes,
        "FP8 scaling recipe ('custom' refused)"),
    RCHOICE("--fp4-format", S_FP4_FORMAT, fp4_formats, W_NONE, NULL, "FP4 training (NVFP4)"),
    RCALL("--fp4-recipe", moe_mf_read_quant_recipe, S_FP4_RECIPE, fp4_recipes, "FP4 recipe ('custom' refused)"),
    RBOOL("--fp8-param-gather", S_FP8_PG, W_NONE, NULL, "parameters all-gathered in FP8"),
    RBOOL("--fp4-param-gather", S_FP4_PG, W_NONE, NULL, "parameters all-gathered in FP4"),
    BOOL("--use-distributed-optimizer", OPT(use_distributed_optimizer), MOE_MF_DISTRIBUTED_OPTIMIZER, W_TRUE, C_ALWAYS,
        "optimizer state sharded over DP"),
    BOOL("--overlap-grad-reduce", OPT(overlap_grad_reduce), MOE_MF_OVERLAP_GRAD_REDUCE, W_TRUE, C_ALWAYS,
        "gradient reduce-scatter overlapped with backward"),
    BOOL("--overlap-param-gather", OPT(overlap_param_gather), MOE_MF_OVERLAP_PARAM_GATHER, W_TRUE, C_ALWAYS,
        "parameter all-gather overlapped with forward"),
    BOOL("--use-precision-aware-optimizer", OPT(precision_aware_optimizer), MOE_MF_PRECISION_AWARE_OPTIMIZER, W_TRUE, C_ALWAYS,
        "optimizer state in the dtypes below"),
    CHOICE("--main-grads-dtype", OPT(main_grads_dtype), MOE_MF_MAIN_GRADS_DTYPE, main_grads, W_DTYPE, C_ALWAYS,
        "main gradients' dtype"),
    CHOICE("--exp-avg-dtype", OPT(exp_avg_dtype), MOE_MF_EXP_AVG_DTYPE, moments, W_DTYPE, C_ALWAYS,
        "Adam first moment's dtype"),
    CHOICE("--exp-avg-sq-dtype", OPT(exp_avg_sq_dtype), MOE_MF_EXP_AVG_SQ_DTYPE, moments, W_DTYPE, C_ALWAYS,
        "Adam second moment's dtype"),
    BOOL("--optimizer-cpu-offload", OPT(optimizer_cpu_offload), MOE_MF_OPTIMIZER_CPU_OFFLOAD, W_TRUE, C_ALWAYS,
        "optimizer state and step on the host"),
    CALL("--optimizer-offload-fraction", moe_mf_read_offload_fraction, .target = T_NONE, W_CALL, moe_mf_write_offload_fraction, C_ALWAYS,
        "share of the optimizer offloaded, in [0, 1] (Megatron's default 1)"),
    BOOL("--tp-comm-overlap", OPT(tp_comm_overlap), MOE_MF_TP_COMM_OVERLAP, W_TRUE, C_ALWAYS,
        "TP communication overlapped with GEMMs"),
    RCHOICE("--moe-token-dispatcher-type", S_DISPATCHER, dispatchers, W_CALL, moe_mf_write_dispatcher,
        "token dispatcher (flex: the backend below; a rule)"),
    RCHOICE("--moe-flex-dispatcher-backend", S_FLEX_BACKEND, backends, W_NONE, NULL,
        "flex dispatcher backend (Megatron's default deepep)"),
    RBOOL("--moe-enable-deepep", S_ENABLE_DEEPEP, W_NONE, NULL, "older spelling of flex + deepep"),
    BOOL("--moe-grouped-gemm", OPT(moe_grouped_gemm), MOE_MF_GROUPED_GEMM, W_TRUE, C_ALWAYS,
        "grouped GEMM over local experts"),
    BOOL("--moe-router-force-load-balancing", OPT(force_load_balancing), MOE_MF_FORCE_LOAD_BALANCING, W_TRUE, C_ALWAYS,
        "random router logits (Megatron's benchmark mode)"),
    {.name = "--moe-router-load-balancing-type", .arity = AN, .kind = K_CALL, .read = moe_mf_read_balance_types,
        .target = T_NONE, .field = MOE_MF_COUNT, .write = W_CALL, .write_fn = moe_mf_write_balance, .when = C_MOE,
        .doc = "load-balancing losses, paired with the coefficients below (a rule; writes both flags)"},
    {.name = "--moe-aux-loss-coeff", .arity = AN, .kind = K_CALL, .read = moe_mf_read_aux_coeffs,
        .target = T_NONE, .field = MOE_MF_COUNT, .write = W_NONE, .when = C_MOE,
        .doc = "their coefficients (Megatron's default 0: no loss, no counts all-reduce)"},
    CALL("--moe-expert-capacity-factor", moe_mf_read_capacity, OPT(capacity_factor), W_POS_DBL, NULL, C_ALWAYS,
        "expert capacity factor (negative: dropless)"),
    BOOL("--overlap-moe-expert-parallel-comm", OPT(overlap_moe_ep_comm), MOE_MF_OVERLAP_MOE_EP_COMM, W_TRUE, C_ALWAYS,
        "1F1B EP overlap of dispatch/combine with compute"),
    BOOL("--delay-wgrad-compute", OPT(delay_wgrad_compute), MOE_MF_DELAY_WGRAD, W_TRUE, C_ALWAYS,
        "weight gradients deferred (with the EP overlap)"),
    RCHOICE("--recompute-granularity", S_RC_GRAN, grans, W_CALL, moe_mf_write_recompute,
        "recompute: full layers or selective modules (a rule; writes the recompute flags)"),
    CHOICE("--recompute-method", OPT(recompute_method), MOE_MF_RECOMPUTE_METHOD, methods, W_NONE, C_ALWAYS,
        "full recompute: uniform chunks or the first layers of a stage"),
    INT("--recompute-num-layers", OPT(recompute_num_layers), MOE_MF_RECOMPUTE_NUM_LAYERS, 1, MOE_MAX_LAYERS, W_NONE, C_ALWAYS, 0,
        "full recompute: layers per chunk / per stage"),
    RMODULES("--recompute-modules", S_RC_MODULES, MOE_MODSET_RECOMPUTE,
        "modules of selective recompute (Megatron's default core_attn)"),
    RBOOL("--recompute-activations", S_RC_ACTIVATIONS, W_NONE, NULL, "older spelling of selective recompute"),
    RBOOL("--moe-layer-recompute", S_MOE_LAYER_RC, W_NONE, NULL, "selective recompute of the MoE layer"),
    INT("--cpu-offloading-num-layers", OPT(cpu_offloading_num_layers), MOE_MF_CPU_OFFLOADING_NUM_LAYERS, 0, MOE_MAX_LAYERS, W_POS, C_ALWAYS, 0,
        "whole layers' activations offloaded to the host"),
    BOOL("--cpu-offloading", .target = T_NONE, MOE_MF_COUNT, W_NONE, C_ALWAYS,
        "accepted: implied by --cpu-offloading-num-layers"),
    BOOL("--fine-grained-activation-offloading", OPT(fine_grained_offload), MOE_MF_FINE_GRAINED_OFFLOAD, W_TRUE, C_ALWAYS,
        "offload of the modules below"),
    MODULES("--offload-modules", OPT(offload_modules), MOE_MF_OFFLOAD_MODULES, MOE_MODSET_OFFLOAD, W_MODULES, C_FINE_OFFLOAD,
        "modules whose activations are offloaded"),
    RCHOICE("--cuda-graph-impl", S_CG_IMPL, cg_impls, W_CALL, moe_mf_write_cuda_graph,
        "CUDA graphs (a rule; writes the CUDA-graph flags)"),
    RMODULES("--cuda-graph-modules", S_CG_MODULES, MOE_MODSET_CUDA_GRAPH, "modules captured"),
    RMODULES("--cuda-graph-scope", S_CG_MODULES, MOE_MODSET_CUDA_GRAPH, "older name of --cuda-graph-modules"),
    RBOOL("--enable-cuda-graph", S_ENABLE_CG, W_NONE, NULL, "older spelling of --cuda-graph-impl local"),
    RBOOL("--external-cuda-graph", S_EXTERNAL_CG, W_NONE, NULL,
        "older spelling of --cuda-graph-impl transformer_engine"),
    /* ---- moefold's own ---- */
    CALL("--moe-imbalance", moe_mf_read_imbalance, .target = T_NONE, W_CALL, moe_mf_write_imbalance, C_MOEFOLD,
        "busiest EP rank's load over the mean, in [1, 1000], or auto"),
    INT("--moe-hot-expert-replicas", OPT(moe_hot_expert_replicas), MOE_MF_HOT_EXPERT_REPLICAS, 0, MOE_MAX_EXPERTS, W_POS, C_MOEFOLD, 0,
        "replicas of the hottest experts"),
    /* ---- refused: moefold cannot price them ---- */
    REFUSE("--account-for-embedding-in-pipeline-split"),
    REFUSE("--account-for-loss-in-pipeline-split"),
    /* ---- accepted, no effect on performance ---- */
    IGN("--bf16", A0, WHY_PERF),
    IGN("--fp16", A0, WHY_FP16),
    IGN("--lr", A1, WHY_PERF),
    IGN("--min-lr", A1, WHY_PERF),
    IGN("--decoupled-lr", A1, WHY_PERF),
    IGN("--decoupled-min-lr", A1, WHY_PERF),
    IGN("--weight-decay", A1, WHY_PERF),
    IGN("--start-weight-decay", A1, WHY_PERF),
    IGN("--end-weight-decay", A1, WHY_PERF),
    IGN("--weight-decay-incr-style", A1, WHY_PERF),
    IGN("--clip-grad", A1, WHY_PERF),
    IGN("--adam-beta1", A1, WHY_PERF),
    IGN("--adam-beta2", A1, WHY_PERF),
    IGN("--adam-eps", A1, WHY_PERF),
    IGN("--sgd-momentum", A1, WHY_PERF),
    IGN("--optimizer", A1, WHY_NOT_MODELLED),
    IGN("--train-iters", A1, WHY_PERF),
    IGN("--train-samples", A1, WHY_PERF),
    IGN("--save", A1, WHY_PERF),
    IGN("--load", A1, WHY_PERF),
    IGN("--save-interval", A1, WHY_PERF),
    IGN("--split", A1, WHY_PERF),
    IGN("--data-path", AN, WHY_PERF),
    IGN("--mock-data", A0, WHY_PERF),
    IGN("--vocab-file", A1, WHY_PERF),
    IGN("--merge-file", A1, WHY_PERF),
    IGN("--vocab-extra-ids", A1, WHY_PERF),
    IGN("--padded-vocab-size", A1, WHY_NOT_MODELLED),
    IGN("--seed", A1, WHY_PERF),
    IGN("--init-method-std", A1, WHY_PERF),
    IGN("--embedding-init-method-std", A1, WHY_PERF),
    IGN("--init-method-xavier-uniform", A0, WHY_PERF),
    IGN("--data-parallel-random-init", A0, WHY_PERF),
    IGN("--use-mcore-models", A0, WHY_PERF),
    IGN("--use-legacy-models", A0, WHY_NOT_MODELLED),
    IGN("--transformer-impl", A1, WHY_PERF),
    IGN("--attention-backend", A1, WHY_NOT_MODELLED),
    IGN("--use-flash-attn", A0, WHY_NOT_MODELLED),
    IGN("--manual-gc", A0, WHY_NOT_MODELLED),
    IGN("--manual-gc-interval", A1, WHY_NOT_MODELLED),
    IGN("--no-manual-gc-eval", A0, WHY_PERF),
    IGN("--distributed-timeout-minutes", A1, WHY_PERF),
    IGN("--distributed-timeout-seconds-after-init", A1, WHY_PERF),
    IGN("--distributed-backend", A1, WHY_PERF),
    IGN("--local-rank", A1, WHY_PERF),
    IGN("--position-embedding-type", A1, WHY_PERF),
    IGN("--use-rotary-position-embeddings", A0, WHY_PERF),
    IGN("--no-position-embedding", A0, WHY_PERF),
    IGN("--rotary-base", A1, WHY_PERF),
    IGN("--rotary-percent", A1, WHY_PERF),
    IGN("--rotary-interleaved", A0, WHY_PERF),
    IGN("--rotary-seq-len-interpolation-factor", A1, WHY_PERF),
    IGN("--rotary-scaling-factor", A1, WHY_PERF),
    IGN("--use-rope-scaling", A0, WHY_PERF),
    IGN("--rope-scaling-factor", A1, WHY_PERF),
    IGN("--rope-type", A1, WHY_PERF),
    IGN("--mscale", A1, WHY_PERF),
    IGN("--mscale-all-dim", A1, WHY_PERF),
    IGN("--no-rope-freq", A1, WHY_PERF),
    IGN("--max-position-embeddings", A1, WHY_PERF),
    IGN("--normalization", A1, WHY_PERF),
    IGN("--norm-epsilon", A1, WHY_PERF),
    IGN("--apply-layernorm-1p", A0, WHY_PERF),
    IGN("--disable-bias-linear", A0, WHY_PERF),
    IGN("--add-qkv-bias", A0, WHY_PERF),
    IGN("--attention-dropout", A1, WHY_PERF),
    IGN("--hidden-dropout", A1, WHY_PERF),
    IGN("--attention-softmax-in-fp32", A0, WHY_PERF),
    IGN("--apply-query-key-layer-scaling", A0, WHY_PERF),
    IGN("--accumulate-allreduce-grads-in-fp32", A0, WHY_PERF),
    IGN("--grad-reduce-in-bf16", A0, WHY_NOT_MODELLED),
    IGN("--fp32-residual-connection", A0, WHY_NOT_MODELLED),
    IGN("--softmax-type", A1, WHY_PERF),
    IGN("--squared-relu", A0, WHY_PERF),
    IGN("--openai-gelu", A0, WHY_PERF),
    IGN("--qk-l2-norm", A0, WHY_PERF),
    IGN("--activation-func-clamp-value", A1, WHY_PERF),
    IGN("--glu-linear-offset", A1, WHY_PERF),
    IGN("--mtp-loss-scaling-factor", A1, WHY_PERF),
    IGN("--use-cpu-initialization", A0, WHY_PERF),
    IGN("--no-check-for-nan-in-loss-and-grad", A0, WHY_PERF),
    IGN("--check-for-spiky-loss", A0, WHY_PERF),
    IGN("--check-for-large-grads", A0, WHY_PERF),
    IGN("--no-persist-layer-norm", A0, WHY_PERF),
    IGN("--no-gradient-accumulation-fusion", A0, WHY_NOT_MODELLED),
    IGN("--use-te-activation-func", A0, WHY_PERF),
    IGN("--no-clone-scatter-output-in-embedding", A0, WHY_PERF),
    IGN("--distribute-saved-activations", A0, WHY_NOT_MODELLED),
    IGN("--calculate-per-token-loss", A0, WHY_PERF),
    IGN("--deterministic-mode", A0, WHY_NOT_MODELLED),
    IGN("--empty-unused-memory-level", A1, WHY_NOT_MODELLED),
    IGN("--dataloader-type", A1, WHY_PERF),
    IGN("--num-workers", A1, WHY_PERF),
    IGN("--num-dataset-builder-threads", A1, WHY_PERF),
    IGN("--reset-position-ids", A0, WHY_PERF),
    IGN("--reset-attention-mask", A0, WHY_PERF),
    IGN("--eod-mask-loss", A0, WHY_PERF),
    IGN("--no-mmap-bin-files", A0, WHY_PERF),
    IGN("--no-create-attention-mask-in-dataloader", A0, WHY_PERF),
    IGN("--finetune", A0, WHY_PERF),
    IGN("--no-load-optim", A0, WHY_PERF),
    IGN("--no-load-rng", A0, WHY_PERF),
    IGN("--no-save-optim", A0, WHY_PERF),
    IGN("--no-save-rng", A0, WHY_PERF),
    IGN("--async-save", A0, WHY_PERF),
    IGN("--use-dist-ckpt", A0, WHY_PERF),
    IGN("--auto-detect-ckpt-format", A0, WHY_PERF),
    IGN("--use-checkpoint-args", A0, WHY_PERF),
    IGN("--use-mp-args-from-checkpoint-args", A0, WHY_PERF),
    IGN("--exit-on-missing-checkpoint", A0, WHY_PERF),
    IGN("--no-initialization", A0, WHY_PERF),
    IGN("--override-opt_param-scheduler", A0, WHY_PERF),
    IGN("--override-opt-param-scheduler", A0, WHY_PERF),
    IGN("--use-checkpoint-opt_param-scheduler", A0, WHY_PERF),
    IGN("--use-checkpoint-opt-param-scheduler", A0, WHY_PERF),
    IGN("--pretrained-checkpoint", A1, WHY_PERF),
    IGN("--exit-signal-handler", A0, WHY_PERF),
    IGN("--timing-log-level", A1, WHY_PERF),
    IGN("--timing-log-option", A1, WHY_PERF),
    IGN("--logging-level", A1, WHY_PERF),
    IGN("--no-barrier-with-level-1-timing", A0, WHY_PERF),
    IGN("--profile", A0, WHY_PERF),
    IGN("--use-pytorch-profiler", A0, WHY_PERF),
    IGN("--profile-ranks", AN, WHY_PERF),
    IGN("--record-memory-history", A0, WHY_PERF),
    IGN("--memory-snapshot-path", A1, WHY_PERF),
    IGN("--iterations-to-skip", AN, WHY_PERF),
    IGN("--result-rejected-tracker-filename", A1, WHY_PERF),
    IGN("--rerun-mode", A1, WHY_PERF),
    IGN("--check-weight-hash-across-dp-replicas-interval", A1, WHY_PERF),
    IGN("--train-sync-interval", A1, WHY_PERF),
    IGN("--config-logger-dir", A1, WHY_PERF),
    IGN("--no-one-logger", A0, WHY_PERF),
    IGN("--app-tag-run-name", A1, WHY_PERF),
    IGN("--app-tag-run-version", A1, WHY_PERF),
    IGN("--enable-ft-package", A0, WHY_PERF),
    IGN("--calc-ft-timeouts", A0, WHY_PERF),
    IGN("--run-workload-inspector-server", A0, WHY_PERF),
    IGN("--disable-straggler-on-startup", A0, WHY_PERF),
    IGN("--yaml-cfg", A1, WHY_PERF),
    IGN("--spec", AN, WHY_PERF),
    IGN("--enable-experimental", A0, WHY_PERF),
    IGN("--disable-gloo-process-groups", A0, WHY_PERF),
    IGN("--disable-msc", A0, WHY_PERF),
    IGN("--trust-remote-code", A0, WHY_PERF),
    IGN("--legacy-tokenizer", A0, WHY_PERF),
    IGN("--skip-train", A0, WHY_PERF),
    IGN("--full-validation", A0, WHY_PERF),
    IGN("--multiple-validation-sets", A0, WHY_PERF),
    IGN("--rampup-batch-size", AN, WHY_PERF),
    IGN("--decrease-batch-size-if-needed", A0, WHY_PERF),
    IGN("--te-rng-tracker", A0, WHY_PERF),
    IGN("--cuda-graph-warmup-steps", A1, WHY_PERF),
    IGN("--first-last-layers-bf16", A0, WHY_NOT_MODELLED),
    IGN("--num-layers-at-start-in-bf16", A1, WHY_NOT_MODELLED),
    IGN("--num-layers-at-end-in-bf16", A1, WHY_NOT_MODELLED),
    IGN("--no-fp8-wgrad", A0, WHY_NOT_MODELLED),
    IGN("--fp8-margin", A1, WHY_PERF),
    IGN("--fp8-interval", A1, WHY_PERF),
    IGN("--fp8-amax-history-len", A1, WHY_PERF),
    IGN("--fp8-amax-compute-algo", A1, WHY_PERF),
    IGN("--reuse-grad-buf-for-mxfp8-param-ag", A0, WHY_NOT_MODELLED),
    IGN("--main-params-dtype", A1, WHY_NOT_MODELLED),
    IGN("--overlap-p2p-communication-warmup-flush", A0, WHY_NOT_MODELLED),
    IGN("--no-overlap-p2p-communication", A0, WHY_NOT_MODELLED),
    IGN("--microbatch-group-size-per-virtual-pipeline-stage", A1, WHY_NOT_MODELLED),
    IGN("--pipeline-model-parallel-comm-backend", A1, WHY_NOT_MODELLED),
    IGN("--defer-embedding-wgrad-compute", A0, WHY_NOT_MODELLED),
    IGN("--wgrad-deferral-limit", A1, WHY_NOT_MODELLED),
    IGN("--no-align-grad-reduce", A0, WHY_NOT_MODELLED),
    IGN("--no-align-param-gather", A0, WHY_NOT_MODELLED),
    IGN("--overlap-param-gather-with-optimizer-step", A0, WHY_NOT_MODELLED),
    IGN("--ddp-bucket-size", A1, WHY_NOT_MODELLED),
    IGN("--ddp-num-buckets", A1, WHY_NOT_MODELLED),
    IGN("--ddp-average-in-collective", A0, WHY_PERF),
    IGN("--ddp-pad-buckets-for-high-nccl-busbw", A0, WHY_NOT_MODELLED),
    IGN("--ddp-reduce-scatter-with-fp32-accumulation", A0, WHY_NOT_MODELLED),
    IGN("--num-distributed-optimizer-instances", A1, WHY_NOT_MODELLED),
    IGN("--use-torch-fsdp2", A0, WHY_NOT_MODELLED),
    IGN("--use-megatron-fsdp", A0, WHY_NOT_MODELLED),
    IGN("--data-parallel-sharding-strategy", A1, WHY_NOT_MODELLED),
    IGN("--use-tp-pp-dp-mapping", A0, WHY_NOT_MODELLED),
    IGN("--tp-comm-overlap-cfg", A1, WHY_NOT_MODELLED),
    IGN("--tp-comm-bootstrap-backend", A1, WHY_PERF),
    IGN("--disable-tp-comm-overlap-ag", A0, WHY_NOT_MODELLED),
    IGN("--disable-tp-comm-overlap-rs", A0, WHY_NOT_MODELLED),
    IGN("--tp-comm-overlap-rs-dgrad", A0, WHY_NOT_MODELLED),
    IGN("--disable-tp-comm-bulk-dgrad", A0, WHY_NOT_MODELLED),
    IGN("--disable-tp-comm-bulk-wgrad", A0, WHY_NOT_MODELLED),
    IGN("--disable-tp-comm-split-ag", A0, WHY_NOT_MODELLED),
    IGN("--disable-tp-comm-split-rs", A0, WHY_NOT_MODELLED),
    IGN("--use-sharp", A0, WHY_NOT_MODELLED),
    IGN("--use-nccl-ub", A0, WHY_NOT_MODELLED),
    IGN("--cp-comm-type", AN, WHY_NOT_MODELLED),
    IGN("--hierarchical-context-parallel-sizes", AN, WHY_NOT_MODELLED),
    IGN("--high-priority-stream-groups", AN, WHY_NOT_MODELLED),
    IGN("--nccl-communicator-config-path", A1, WHY_NOT_MODELLED),
    IGN("--moe-z-loss-coeff", A1, WHY_PERF),
    IGN("--moe-input-jitter-eps", A1, WHY_PERF),
    IGN("--moe-router-dtype", A1, WHY_NOT_MODELLED),
    IGN("--moe-router-pre-softmax", A0, WHY_PERF),
    IGN("--moe-router-topk-scaling-factor", A1, WHY_PERF),
    IGN("--moe-router-bias-update-rate", A1, WHY_PERF),
    IGN("--moe-router-fusion", A0, WHY_NOT_MODELLED),
    IGN("--moe-router-padding-for-fp8", A0, WHY_NOT_MODELLED),
    IGN("--moe-router-padding-for-quantization", A0, WHY_NOT_MODELLED),
    IGN("--moe-permute-fusion", A0, WHY_NOT_MODELLED),
    IGN("--moe-shared-expert-overlap", A0, WHY_NOT_MODELLED),
    IGN("--moe-use-legacy-grouped-gemm", A0, WHY_NOT_MODELLED),
    IGN("--moe-pad-expert-input-to-capacity", A0, WHY_NOT_MODELLED),
    IGN("--moe-token-drop-policy", A1, WHY_PERF),
    IGN("--moe-per-layer-logging", A0, WHY_PERF),
    IGN("--moe-apply-probs-on-input", A0, WHY_PERF),
    IGN("--moe-deepep-num-sms", A1, WHY_NOT_MODELLED),
    IGN("--moe-hybridep-num-sms", A1, WHY_NOT_MODELLED),
    IGN("--moe-flex-dispatcher-num-sms", A1, WHY_NOT_MODELLED),
    IGN("--moe-use-upcycling", A0, WHY_PERF),
    IGN("--moe-upcycling-granularity", A1, WHY_PERF),
    IGN("--min-offloaded-tensor-size", A1, WHY_NOT_MODELLED),
    IGN("--use-torch-optimizer-for-cpu-offload", A0, WHY_NOT_MODELLED),
    IGN("--overlap-cpu-optimizer-d2h-h2d", A0, WHY_NOT_MODELLED),
    IGN("--no-pin-cpu-grads", A0, WHY_NOT_MODELLED),
    IGN("--no-pin-cpu-params", A0, WHY_NOT_MODELLED),
    IGN("--heterogeneous-layers-config-path", A1, WHY_NOT_MODELLED),
    IGN("--encoder-seq-length", A1, WHY_PERF),
    IGN("--decoder-seq-length", A1, WHY_PERF),
    IGN("--cross-entropy-loss-fusion", A0, WHY_NOT_MODELLED),
    IGN("--cross-entropy-fusion-impl", A1, WHY_NOT_MODELLED),
};
/* clang-format on */
const size_t moe_mf_num_flags = MOE_ARRAY_LEN(moe_mf_flags);

/* Families of flags that never affect performance; they take any number of values. */
const char *const moe_mf_ignored_prefixes[] = {
    "--log-",
    "--tensorboard-",
    "--wandb-",
    "--lr-",
    "--eval-",
    "--tokenizer-",
    "--tiktoken-",
    "--inprocess-",
    "--straggler-",
    "--one-logger-",
    "--retro-",
    "--dino-",
    "--inference-",
    "--rl-",
    "--grpo-",
    "--langrl-",
    "--ckpt-",
    "--dist-ckpt-",
    "--muon-",
    "--biencoder-",
    "--ict-",
    "--indexer-",
    "--vision-",
    "--non-persistent-",
    "--profile-",
    "--exit-",
    "--data-",
    "--train-",
    "--valid-",
    "--test-",
    "--save-",
    "--load-",
    "--adlr-",
    "--replication",
    "--kitchen-",
    "--sft-",
    "--error-injection-",
};
const size_t moe_mf_num_ignored_prefixes = MOE_ARRAY_LEN(moe_mf_ignored_prefixes);
