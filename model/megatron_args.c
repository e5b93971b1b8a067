/*
 * Megatron-LM command lines <-> moefold structs (model/megatron_args.h).
 *
 * The flag table mirrors megatron/training/arguments.py (main, 2025-26): each flag's name, how
 * many values it takes (store_true: none; nargs='*'/'+': a list) and, for the flags moefold
 * prices, where the value goes. Values are checked as argparse would (int, float, choices) and
 * against ranges moefold can handle. Cross-flag semantics that Megatron resolves after parsing
 * (expert TP defaulting to TP, kv_channels = hidden/heads, the VPP flags, the FP8 recipe only
 * counting with --fp8-format, the flex dispatcher backend, ...) are applied once all flags are
 * read, in finalize_*; the combination's validity is moe_layout_resolve's job.
 *
 * The list-expression grammar for --moe-layer-freq / --window-attn-skip-freq is the subset of
 * Python Megatron evaluates (digits , [ ] ( ) + *): list literals, concatenation with '+',
 * repetition with '*N' (or 'N*'), parentheses.
 */
#include "model/megatron_args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Flag table                                                                                   */

enum { A0 = 0, A1 = 1, AN = -1 }; /* values a flag takes: none, one, a list */

enum flag_id {
    F_IGNORE = 0,
    F_UNSUPPORTED,
    /* model */
    F_NUM_LAYERS,
    F_HIDDEN,
    F_FFN,
    F_HEADS,
    F_GQA,
    F_QUERY_GROUPS,
    F_KV_CHANNELS,
    F_NUM_EXPERTS,
    F_MOE_FFN,
    F_TOPK,
    F_MOE_LAYER_FREQ,
    F_SHARED,
    F_MLA,
    F_Q_LORA,
    F_KV_LORA,
    F_QK_HEAD,
    F_QK_POS,
    F_V_HEAD,
    F_MTP,
    F_SWIGLU,
    F_UNTIE,
    F_VOCAB,
    F_VOCAB_DIV,
    F_SEQ,
    F_SCORE,
    F_EXPERT_BIAS,
    F_ROUTER_GROUPS,
    F_ROUTER_GROUP_TOPK,
    F_QK_LN,
    F_WINDOW_SIZE,
    F_WINDOW_SKIP,
    /* layout */
    F_TP,
    F_PP,
    F_VPP_LAYERS,
    F_VPP_STAGES,
    F_PP_LAYOUT,
    F_FIRST,
    F_LAST,
    F_CP,
    F_EP,
    F_ETP,
    F_SP,
    F_MBS,
    F_GBS,
    /* options */
    F_DISTOPT,
    F_OGR,
    F_OPG,
    F_TPCO,
    F_EPO,
    F_DELAY_WGRAD,
    F_DISPATCHER,
    F_FLEX_BACKEND,
    F_ENABLE_DEEPEP,
    F_GROUPED_GEMM,
    F_FORCE_LB,
    F_CAPACITY,
    F_RC_GRAN,
    F_RC_METHOD,
    F_RC_LAYERS,
    F_RC_MODULES,
    F_RC_ACTIVATIONS,
    F_MOE_LAYER_RC,
    F_CPU_OFFLOAD_LAYERS,
    F_CPU_OFFLOADING,
    F_FG_OFFLOAD,
    F_OFFLOAD_MODULES,
    F_OPT_CPU_OFFLOAD,
    F_OPT_OFFLOAD_FRACTION,
    F_FP8_FORMAT,
    F_FP8_RECIPE,
    F_FP4_FORMAT,
    F_FP4_RECIPE,
    F_FP8_PG,
    F_FP4_PG,
    F_PAO,
    F_MAIN_GRADS,
    F_EXP_AVG,
    F_EXP_AVG_SQ,
    F_CG_IMPL,
    F_CG_MODULES,
    F_CG_SCOPE,
    F_ENABLE_CG,
    F_EXTERNAL_CG,
    F_IMBALANCE,
    F_REPLICAS,
};

/* Why an accepted flag has no effect (printed by the caller). */
enum why {
    WHY_NONE,
    WHY_PERF,
    WHY_NOT_MODELLED,
    WHY_FP16,
    WHY_ROUTING,
    WHY_NO_FP8_FORMAT,
    WHY_NO_FP4_FORMAT,
    WHY_NO_FLEX,
    WHY_NO_SELECTIVE,
    WHY_NOOP,
};
static const char *const why_text[] = {
    "",
    "does not affect performance",
    "its performance effect is not modelled",
    "priced as bf16 (moefold models BF16 mixed precision)",
    "routing balance is priced by --moe-imbalance or --moe-router-force-load-balancing",
    "no effect without --fp8-format",
    "no effect without --fp4-format",
    "no effect without --moe-token-dispatcher-type flex",
    "no effect without --recompute-granularity selective",
    "implied by --cpu-offloading-num-layers",
};

struct flag_def {
    const char *name;
    int arity;
    unsigned char id;
    unsigned char why; /* for F_IGNORE */
};

/* One flag per line reads as a table. */
/* clang-format off */
static const struct flag_def flag_defs[] = {
    /* model shape */
    {"--num-layers", A1, F_NUM_LAYERS, 0},
    {"--hidden-size", A1, F_HIDDEN, 0},
    {"--ffn-hidden-size", A1, F_FFN, 0},
    {"--num-attention-heads", A1, F_HEADS, 0},
    {"--group-query-attention", A0, F_GQA, 0},
    {"--num-query-groups", A1, F_QUERY_GROUPS, 0},
    {"--kv-channels", A1, F_KV_CHANNELS, 0},
    {"--num-experts", A1, F_NUM_EXPERTS, 0},
    {"--moe-ffn-hidden-size", A1, F_MOE_FFN, 0},
    {"--moe-router-topk", A1, F_TOPK, 0},
    {"--moe-layer-freq", A1, F_MOE_LAYER_FREQ, 0},
    {"--moe-shared-expert-intermediate-size", A1, F_SHARED, 0},
    {"--multi-latent-attention", A0, F_MLA, 0},
    {"--q-lora-rank", A1, F_Q_LORA, 0},
    {"--kv-lora-rank", A1, F_KV_LORA, 0},
    {"--qk-head-dim", A1, F_QK_HEAD, 0},
    {"--qk-pos-emb-head-dim", A1, F_QK_POS, 0},
    {"--v-head-dim", A1, F_V_HEAD, 0},
    {"--mtp-num-layers", A1, F_MTP, 0},
    {"--swiglu", A0, F_SWIGLU, 0},
    {"--untie-embeddings-and-output-weights", A0, F_UNTIE, 0},
    {"--vocab-size", A1, F_VOCAB, 0},
    {"--make-vocab-size-divisible-by", A1, F_VOCAB_DIV, 0},
    {"--seq-length", A1, F_SEQ, 0},
    {"--moe-router-score-function", A1, F_SCORE, 0},
    {"--moe-router-enable-expert-bias", A0, F_EXPERT_BIAS, 0},
    {"--moe-router-num-groups", A1, F_ROUTER_GROUPS, 0},
    {"--moe-router-group-topk", A1, F_ROUTER_GROUP_TOPK, 0},
    {"--qk-layernorm", A0, F_QK_LN, 0},
    {"--window-size", A1, F_WINDOW_SIZE, 0},
    {"--window-attn-skip-freq", A1, F_WINDOW_SKIP, 0},
    /* layout */
    {"--tensor-model-parallel-size", A1, F_TP, 0},
    {"--pipeline-model-parallel-size", A1, F_PP, 0},
    {"--num-layers-per-virtual-pipeline-stage", A1, F_VPP_LAYERS, 0},
    {"--num-virtual-stages-per-pipeline-rank", A1, F_VPP_STAGES, 0},
    {"--pipeline-model-parallel-layout", A1, F_PP_LAYOUT, 0},
    {"--decoder-first-pipeline-num-layers", A1, F_FIRST, 0},
    {"--decoder-last-pipeline-num-layers", A1, F_LAST, 0},
    {"--context-parallel-size", A1, F_CP, 0},
    {"--expert-model-parallel-size", A1, F_EP, 0},
    {"--expert-tensor-parallel-size", A1, F_ETP, 0},
    {"--sequence-parallel", A0, F_SP, 0},
    {"--micro-batch-size", A1, F_MBS, 0},
    {"--global-batch-size", A1, F_GBS, 0},
    /* options */
    {"--use-distributed-optimizer", A0, F_DISTOPT, 0},
    {"--overlap-grad-reduce", A0, F_OGR, 0},
    {"--overlap-param-gather", A0, F_OPG, 0},
    {"--tp-comm-overlap", A0, F_TPCO, 0},
    {"--overlap-moe-expert-parallel-comm", A0, F_EPO, 0},
    {"--delay-wgrad-compute", A0, F_DELAY_WGRAD, 0},
    {"--moe-token-dispatcher-type", A1, F_DISPATCHER, 0},
    {"--moe-flex-dispatcher-backend", A1, F_FLEX_BACKEND, 0},
    {"--moe-enable-deepep", A0, F_ENABLE_DEEPEP, 0},
    {"--moe-grouped-gemm", A0, F_GROUPED_GEMM, 0},
    {"--moe-router-force-load-balancing", A0, F_FORCE_LB, 0},
    {"--moe-expert-capacity-factor", A1, F_CAPACITY, 0},
    {"--recompute-granularity", A1, F_RC_GRAN, 0},
    {"--recompute-method", A1, F_RC_METHOD, 0},
    {"--recompute-num-layers", A1, F_RC_LAYERS, 0},
    {"--recompute-modules", AN, F_RC_MODULES, 0},
    {"--recompute-activations", A0, F_RC_ACTIVATIONS, 0},
    {"--moe-layer-recompute", A0, F_MOE_LAYER_RC, 0},
    {"--cpu-offloading-num-layers", A1, F_CPU_OFFLOAD_LAYERS, 0},
    {"--cpu-offloading", A0, F_CPU_OFFLOADING, 0},
    {"--fine-grained-activation-offloading", A0, F_FG_OFFLOAD, 0},
    {"--offload-modules", AN, F_OFFLOAD_MODULES, 0},
    {"--optimizer-cpu-offload", A0, F_OPT_CPU_OFFLOAD, 0},
    {"--optimizer-offload-fraction", A1, F_OPT_OFFLOAD_FRACTION, 0},
    {"--fp8-format", A1, F_FP8_FORMAT, 0},
    {"--fp8-recipe", A1, F_FP8_RECIPE, 0},
    {"--fp4-format", A1, F_FP4_FORMAT, 0},
    {"--fp4-recipe", A1, F_FP4_RECIPE, 0},
    {"--fp8-param-gather", A0, F_FP8_PG, 0},
    {"--fp4-param-gather", A0, F_FP4_PG, 0},
    {"--use-precision-aware-optimizer", A0, F_PAO, 0},
    {"--main-grads-dtype", A1, F_MAIN_GRADS, 0},
    {"--exp-avg-dtype", A1, F_EXP_AVG, 0},
    {"--exp-avg-sq-dtype", A1, F_EXP_AVG_SQ, 0},
    {"--cuda-graph-impl", A1, F_CG_IMPL, 0},
    {"--cuda-graph-modules", AN, F_CG_MODULES, 0},
    {"--cuda-graph-scope", AN, F_CG_SCOPE, 0},
    {"--enable-cuda-graph", A0, F_ENABLE_CG, 0},
    {"--external-cuda-graph", A0, F_EXTERNAL_CG, 0},
    {"--moe-imbalance", A1, F_IMBALANCE, 0},
    {"--moe-hot-expert-replicas", A1, F_REPLICAS, 0},
    /* refused: moefold cannot price them */
    {"--account-for-embedding-in-pipeline-split", A0, F_UNSUPPORTED, 0},
    {"--account-for-loss-in-pipeline-split", A0, F_UNSUPPORTED, 0},
    /* accepted, no effect on performance */
    {"--bf16", A0, F_IGNORE, WHY_PERF},
    {"--fp16", A0, F_IGNORE, WHY_FP16},
    {"--lr", A1, F_IGNORE, WHY_PERF},
    {"--min-lr", A1, F_IGNORE, WHY_PERF},
    {"--decoupled-lr", A1, F_IGNORE, WHY_PERF},
    {"--decoupled-min-lr", A1, F_IGNORE, WHY_PERF},
    {"--weight-decay", A1, F_IGNORE, WHY_PERF},
    {"--start-weight-decay", A1, F_IGNORE, WHY_PERF},
    {"--end-weight-decay", A1, F_IGNORE, WHY_PERF},
    {"--weight-decay-incr-style", A1, F_IGNORE, WHY_PERF},
    {"--clip-grad", A1, F_IGNORE, WHY_PERF},
    {"--adam-beta1", A1, F_IGNORE, WHY_PERF},
    {"--adam-beta2", A1, F_IGNORE, WHY_PERF},
    {"--adam-eps", A1, F_IGNORE, WHY_PERF},
    {"--sgd-momentum", A1, F_IGNORE, WHY_PERF},
    {"--optimizer", A1, F_IGNORE, WHY_NOT_MODELLED},
    {"--train-iters", A1, F_IGNORE, WHY_PERF},
    {"--train-samples", A1, F_IGNORE, WHY_PERF},
    {"--save", A1, F_IGNORE, WHY_PERF},
    {"--load", A1, F_IGNORE, WHY_PERF},
    {"--save-interval", A1, F_IGNORE, WHY_PERF},
    {"--split", A1, F_IGNORE, WHY_PERF},
    {"--data-path", AN, F_IGNORE, WHY_PERF},
    {"--mock-data", A0, F_IGNORE, WHY_PERF},
    {"--vocab-file", A1, F_IGNORE, WHY_PERF},
    {"--merge-file", A1, F_IGNORE, WHY_PERF},
    {"--vocab-extra-ids", A1, F_IGNORE, WHY_PERF},
    {"--padded-vocab-size", A1, F_IGNORE, WHY_NOT_MODELLED},
    {"--seed", A1, F_IGNORE, WHY_PERF},
    {"--init-method-std", A1, F_IGNORE, WHY_PERF},
    {"--embedding-init-method-std", A1, F_IGNORE, WHY_PERF},
    {"--init-method-xavier-uniform", A0, F_IGNORE, WHY_PERF},
    {"--data-parallel-random-init", A0, F_IGNORE, WHY_PERF},
    {"--use-mcore-models", A0, F_IGNORE, WHY_PERF},
    {"--use-legacy-models", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--transformer-impl", A1, F_IGNORE, WHY_PERF},
    {"--attention-backend", A1, F_IGNORE, WHY_NOT_MODELLED},
    {"--use-flash-attn", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--manual-gc", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--manual-gc-interval", A1, F_IGNORE, WHY_NOT_MODELLED},
    {"--no-manual-gc-eval", A0, F_IGNORE, WHY_PERF},
    {"--distributed-timeout-minutes", A1, F_IGNORE, WHY_PERF},
    {"--distributed-timeout-seconds-after-init", A1, F_IGNORE, WHY_PERF},
    {"--distributed-backend", A1, F_IGNORE, WHY_PERF},
    {"--local-rank", A1, F_IGNORE, WHY_PERF},
    {"--position-embedding-type", A1, F_IGNORE, WHY_PERF},
    {"--use-rotary-position-embeddings", A0, F_IGNORE, WHY_PERF},
    {"--no-position-embedding", A0, F_IGNORE, WHY_PERF},
    {"--rotary-base", A1, F_IGNORE, WHY_PERF},
    {"--rotary-percent", A1, F_IGNORE, WHY_PERF},
    {"--rotary-interleaved", A0, F_IGNORE, WHY_PERF},
    {"--rotary-seq-len-interpolation-factor", A1, F_IGNORE, WHY_PERF},
    {"--rotary-scaling-factor", A1, F_IGNORE, WHY_PERF},
    {"--use-rope-scaling", A0, F_IGNORE, WHY_PERF},
    {"--rope-scaling-factor", A1, F_IGNORE, WHY_PERF},
    {"--rope-type", A1, F_IGNORE, WHY_PERF},
    {"--mscale", A1, F_IGNORE, WHY_PERF},
    {"--mscale-all-dim", A1, F_IGNORE, WHY_PERF},
    {"--no-rope-freq", A1, F_IGNORE, WHY_PERF},
    {"--max-position-embeddings", A1, F_IGNORE, WHY_PERF},
    {"--normalization", A1, F_IGNORE, WHY_PERF},
    {"--norm-epsilon", A1, F_IGNORE, WHY_PERF},
    {"--apply-layernorm-1p", A0, F_IGNORE, WHY_PERF},
    {"--disable-bias-linear", A0, F_IGNORE, WHY_PERF},
    {"--add-qkv-bias", A0, F_IGNORE, WHY_PERF},
    {"--attention-dropout", A1, F_IGNORE, WHY_PERF},
    {"--hidden-dropout", A1, F_IGNORE, WHY_PERF},
    {"--attention-softmax-in-fp32", A0, F_IGNORE, WHY_PERF},
    {"--apply-query-key-layer-scaling", A0, F_IGNORE, WHY_PERF},
    {"--accumulate-allreduce-grads-in-fp32", A0, F_IGNORE, WHY_PERF},
    {"--grad-reduce-in-bf16", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--fp32-residual-connection", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--softmax-type", A1, F_IGNORE, WHY_PERF},
    {"--squared-relu", A0, F_IGNORE, WHY_PERF},
    {"--quick-geglu", A0, F_IGNORE, WHY_PERF},
    {"--openai-gelu", A0, F_IGNORE, WHY_PERF},
    {"--qk-l2-norm", A0, F_IGNORE, WHY_PERF},
    {"--activation-func-clamp-value", A1, F_IGNORE, WHY_PERF},
    {"--glu-linear-offset", A1, F_IGNORE, WHY_PERF},
    {"--mtp-loss-scaling-factor", A1, F_IGNORE, WHY_PERF},
    {"--use-cpu-initialization", A0, F_IGNORE, WHY_PERF},
    {"--no-check-for-nan-in-loss-and-grad", A0, F_IGNORE, WHY_PERF},
    {"--check-for-spiky-loss", A0, F_IGNORE, WHY_PERF},
    {"--check-for-large-grads", A0, F_IGNORE, WHY_PERF},
    {"--no-persist-layer-norm", A0, F_IGNORE, WHY_PERF},
    {"--no-gradient-accumulation-fusion", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--use-te-activation-func", A0, F_IGNORE, WHY_PERF},
    {"--no-clone-scatter-output-in-embedding", A0, F_IGNORE, WHY_PERF},
    {"--distribute-saved-activations", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--calculate-per-token-loss", A0, F_IGNORE, WHY_PERF},
    {"--deterministic-mode", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--empty-unused-memory-level", A1, F_IGNORE, WHY_NOT_MODELLED},
    {"--dataloader-type", A1, F_IGNORE, WHY_PERF},
    {"--num-workers", A1, F_IGNORE, WHY_PERF},
    {"--num-dataset-builder-threads", A1, F_IGNORE, WHY_PERF},
    {"--reset-position-ids", A0, F_IGNORE, WHY_PERF},
    {"--reset-attention-mask", A0, F_IGNORE, WHY_PERF},
    {"--eod-mask-loss", A0, F_IGNORE, WHY_PERF},
    {"--no-mmap-bin-files", A0, F_IGNORE, WHY_PERF},
    {"--no-create-attention-mask-in-dataloader", A0, F_IGNORE, WHY_PERF},
    {"--finetune", A0, F_IGNORE, WHY_PERF},
    {"--no-load-optim", A0, F_IGNORE, WHY_PERF},
    {"--no-load-rng", A0, F_IGNORE, WHY_PERF},
    {"--no-save-optim", A0, F_IGNORE, WHY_PERF},
    {"--no-save-rng", A0, F_IGNORE, WHY_PERF},
    {"--async-save", A0, F_IGNORE, WHY_PERF},
    {"--use-dist-ckpt", A0, F_IGNORE, WHY_PERF},
    {"--auto-detect-ckpt-format", A0, F_IGNORE, WHY_PERF},
    {"--use-checkpoint-args", A0, F_IGNORE, WHY_PERF},
    {"--use-mp-args-from-checkpoint-args", A0, F_IGNORE, WHY_PERF},
    {"--exit-on-missing-checkpoint", A0, F_IGNORE, WHY_PERF},
    {"--no-initialization", A0, F_IGNORE, WHY_PERF},
    {"--override-opt_param-scheduler", A0, F_IGNORE, WHY_PERF},
    {"--override-opt-param-scheduler", A0, F_IGNORE, WHY_PERF},
    {"--use-checkpoint-opt_param-scheduler", A0, F_IGNORE, WHY_PERF},
    {"--use-checkpoint-opt-param-scheduler", A0, F_IGNORE, WHY_PERF},
    {"--pretrained-checkpoint", A1, F_IGNORE, WHY_PERF},
    {"--exit-signal-handler", A0, F_IGNORE, WHY_PERF},
    {"--timing-log-level", A1, F_IGNORE, WHY_PERF},
    {"--timing-log-option", A1, F_IGNORE, WHY_PERF},
    {"--logging-level", A1, F_IGNORE, WHY_PERF},
    {"--no-barrier-with-level-1-timing", A0, F_IGNORE, WHY_PERF},
    {"--profile", A0, F_IGNORE, WHY_PERF},
    {"--use-pytorch-profiler", A0, F_IGNORE, WHY_PERF},
    {"--profile-ranks", AN, F_IGNORE, WHY_PERF},
    {"--record-memory-history", A0, F_IGNORE, WHY_PERF},
    {"--memory-snapshot-path", A1, F_IGNORE, WHY_PERF},
    {"--iterations-to-skip", AN, F_IGNORE, WHY_PERF},
    {"--result-rejected-tracker-filename", A1, F_IGNORE, WHY_PERF},
    {"--rerun-mode", A1, F_IGNORE, WHY_PERF},
    {"--check-weight-hash-across-dp-replicas-interval", A1, F_IGNORE, WHY_PERF},
    {"--train-sync-interval", A1, F_IGNORE, WHY_PERF},
    {"--config-logger-dir", A1, F_IGNORE, WHY_PERF},
    {"--no-one-logger", A0, F_IGNORE, WHY_PERF},
    {"--app-tag-run-name", A1, F_IGNORE, WHY_PERF},
    {"--app-tag-run-version", A1, F_IGNORE, WHY_PERF},
    {"--enable-ft-package", A0, F_IGNORE, WHY_PERF},
    {"--calc-ft-timeouts", A0, F_IGNORE, WHY_PERF},
    {"--run-workload-inspector-server", A0, F_IGNORE, WHY_PERF},
    {"--disable-straggler-on-startup", A0, F_IGNORE, WHY_PERF},
    {"--yaml-cfg", A1, F_IGNORE, WHY_PERF},
    {"--spec", AN, F_IGNORE, WHY_PERF},
    {"--enable-experimental", A0, F_IGNORE, WHY_PERF},
    {"--disable-gloo-process-groups", A0, F_IGNORE, WHY_PERF},
    {"--disable-msc", A0, F_IGNORE, WHY_PERF},
    {"--trust-remote-code", A0, F_IGNORE, WHY_PERF},
    {"--legacy-tokenizer", A0, F_IGNORE, WHY_PERF},
    {"--skip-train", A0, F_IGNORE, WHY_PERF},
    {"--full-validation", A0, F_IGNORE, WHY_PERF},
    {"--multiple-validation-sets", A0, F_IGNORE, WHY_PERF},
    {"--rampup-batch-size", AN, F_IGNORE, WHY_PERF},
    {"--decrease-batch-size-if-needed", A0, F_IGNORE, WHY_PERF},
    {"--te-rng-tracker", A0, F_IGNORE, WHY_PERF},
    {"--cuda-graph-warmup-steps", A1, F_IGNORE, WHY_PERF},
    {"--first-last-layers-bf16", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--num-layers-at-start-in-bf16", A1, F_IGNORE, WHY_NOT_MODELLED},
    {"--num-layers-at-end-in-bf16", A1, F_IGNORE, WHY_NOT_MODELLED},
    {"--no-fp8-wgrad", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--fp8-margin", A1, F_IGNORE, WHY_PERF},
    {"--fp8-interval", A1, F_IGNORE, WHY_PERF},
    {"--fp8-amax-history-len", A1, F_IGNORE, WHY_PERF},
    {"--fp8-amax-compute-algo", A1, F_IGNORE, WHY_PERF},
    {"--reuse-grad-buf-for-mxfp8-param-ag", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--main-params-dtype", A1, F_IGNORE, WHY_NOT_MODELLED},
    {"--overlap-p2p-communication-warmup-flush", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--no-overlap-p2p-communication", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--microbatch-group-size-per-virtual-pipeline-stage", A1, F_IGNORE, WHY_NOT_MODELLED},
    {"--pipeline-model-parallel-comm-backend", A1, F_IGNORE, WHY_NOT_MODELLED},
    {"--defer-embedding-wgrad-compute", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--wgrad-deferral-limit", A1, F_IGNORE, WHY_NOT_MODELLED},
    {"--no-align-grad-reduce", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--no-align-param-gather", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--overlap-param-gather-with-optimizer-step", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--ddp-bucket-size", A1, F_IGNORE, WHY_NOT_MODELLED},
    {"--ddp-num-buckets", A1, F_IGNORE, WHY_NOT_MODELLED},
    {"--ddp-average-in-collective", A0, F_IGNORE, WHY_PERF},
    {"--ddp-pad-buckets-for-high-nccl-busbw", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--ddp-reduce-scatter-with-fp32-accumulation", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--num-distributed-optimizer-instances", A1, F_IGNORE, WHY_NOT_MODELLED},
    {"--use-torch-fsdp2", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--use-megatron-fsdp", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--data-parallel-sharding-strategy", A1, F_IGNORE, WHY_NOT_MODELLED},
    {"--use-tp-pp-dp-mapping", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--tp-comm-overlap-cfg", A1, F_IGNORE, WHY_NOT_MODELLED},
    {"--tp-comm-bootstrap-backend", A1, F_IGNORE, WHY_PERF},
    {"--disable-tp-comm-overlap-ag", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--disable-tp-comm-overlap-rs", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--tp-comm-overlap-rs-dgrad", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--disable-tp-comm-bulk-dgrad", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--disable-tp-comm-bulk-wgrad", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--disable-tp-comm-split-ag", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--disable-tp-comm-split-rs", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--use-sharp", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--use-nccl-ub", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--cp-comm-type", AN, F_IGNORE, WHY_NOT_MODELLED},
    {"--hierarchical-context-parallel-sizes", AN, F_IGNORE, WHY_NOT_MODELLED},
    {"--high-priority-stream-groups", AN, F_IGNORE, WHY_NOT_MODELLED},
    {"--nccl-communicator-config-path", A1, F_IGNORE, WHY_NOT_MODELLED},
    {"--moe-router-load-balancing-type", AN, F_IGNORE, WHY_ROUTING},
    {"--moe-aux-loss-coeff", AN, F_IGNORE, WHY_PERF},
    {"--moe-z-loss-coeff", A1, F_IGNORE, WHY_PERF},
    {"--moe-input-jitter-eps", A1, F_IGNORE, WHY_PERF},
    {"--moe-router-dtype", A1, F_IGNORE, WHY_NOT_MODELLED},
    {"--moe-router-pre-softmax", A0, F_IGNORE, WHY_PERF},
    {"--moe-router-topk-scaling-factor", A1, F_IGNORE, WHY_PERF},
    {"--moe-router-bias-update-rate", A1, F_IGNORE, WHY_PERF},
    {"--moe-router-fusion", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--moe-router-padding-for-fp8", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--moe-router-padding-for-quantization", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--moe-permute-fusion", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--moe-shared-expert-overlap", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--moe-use-legacy-grouped-gemm", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--moe-pad-expert-input-to-capacity", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--moe-token-drop-policy", A1, F_IGNORE, WHY_PERF},
    {"--moe-per-layer-logging", A0, F_IGNORE, WHY_PERF},
    {"--moe-apply-probs-on-input", A0, F_IGNORE, WHY_PERF},
    {"--moe-deepep-num-sms", A1, F_IGNORE, WHY_NOT_MODELLED},
    {"--moe-hybridep-num-sms", A1, F_IGNORE, WHY_NOT_MODELLED},
    {"--moe-flex-dispatcher-num-sms", A1, F_IGNORE, WHY_NOT_MODELLED},
    {"--moe-use-upcycling", A0, F_IGNORE, WHY_PERF},
    {"--moe-upcycling-granularity", A1, F_IGNORE, WHY_PERF},
    {"--min-offloaded-tensor-size", A1, F_IGNORE, WHY_NOT_MODELLED},
    {"--use-torch-optimizer-for-cpu-offload", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--overlap-cpu-optimizer-d2h-h2d", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--no-pin-cpu-grads", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--no-pin-cpu-params", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--heterogeneous-layers-config-path", A1, F_IGNORE, WHY_NOT_MODELLED},
    {"--encoder-seq-length", A1, F_IGNORE, WHY_PERF},
    {"--decoder-seq-length", A1, F_IGNORE, WHY_PERF},
    {"--cross-entropy-loss-fusion", A0, F_IGNORE, WHY_NOT_MODELLED},
    {"--cross-entropy-fusion-impl", A1, F_IGNORE, WHY_NOT_MODELLED},
};
/* clang-format on */

/* Families of flags that never affect performance; they take any number of values. */
static const char *const ignored_prefixes[] = {
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

static const struct flag_def *find_flag(const char *name)
{
    for (size_t i = 0; i < MOE_ARRAY_LEN(flag_defs); i++) {
        if (strcmp(flag_defs[i].name, name) == 0) {
            return &flag_defs[i];
        }
    }
    return NULL;
}

/* "--no-*-fusion" / "--*-fusion" kernel-fusion switches and the prefix families above. */
static bool is_ignored_family(const char *name)
{
    size_t n = strlen(name);
    if (n > 9 && strcmp(name + n - 7, "-fusion") == 0) {
        return true;
    }
    for (size_t i = 0; i < MOE_ARRAY_LEN(ignored_prefixes); i++) {
        if (strncmp(name, ignored_prefixes[i], strlen(ignored_prefixes[i])) == 0) {
            return true;
        }
    }
    return false;
}

bool moe_megatron_flag_known(const char *name, int *arity)
{
    const struct flag_def *d = (name != NULL) ? find_flag(name) : NULL;
    if (d != NULL) {
        if (arity != NULL) {
            *arity = d->arity;
        }
        return true;
    }
    if (name != NULL && is_ignored_family(name)) {
        if (arity != NULL) {
            *arity = AN;
        }
        return true;
    }
    return false;
}

bool moe_megatron_flag_priced(const char *name)
{
    const struct flag_def *d = (name != NULL) ? find_flag(name) : NULL;
    return d != NULL && d->id != F_IGNORE;
}

bool moe_megatron_is_set(const struct moe_megatron_result *res, enum moe_megatron_field f)
{
    if (res == NULL || (int)f < 0 || f >= MOE_MF_COUNT) {
        return false;
    }
    return (res->set[f / 64] >> (f % 64)) & 1u;
}

/* Levenshtein distance of two short strings (flag names). */
static int edit_distance(const char *a, const char *b)
{
    enum { MAXN = 80 };
    int row[MAXN + 1];
    int la = (int)strnlen(a, MAXN), lb = (int)strnlen(b, MAXN);
    for (int j = 0; j <= lb; j++) {
        row[j] = j;
    }
    for (int i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) {
                best = up + 1;
            }
            if (row[j - 1] + 1 < best) {
                best = row[j - 1] + 1;
            }
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static const char *closest_flag(const char *name)
{
    const char *best = NULL;
    int best_d = 1 << 30;
    for (size_t i = 0; i < MOE_ARRAY_LEN(flag_defs); i++) {
        int d = edit_distance(name, flag_defs[i].name);
        if (d < best_d) {
            best_d = d;
            best = flag_defs[i].name;
        }
    }
    int limit = (int)strlen(name) / 3;
    return (best_d <= (limit > 2 ? limit : 2)) ? best : NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Parse state                                                                                  */

struct values {
    const char *eq;          /* value after '=' (one word), or NULL */
    const char *const *argv; /* following words when eq is NULL */
    int count;
};

struct parse_ctx {
    struct moe_model_cfg *cfg;
    struct moe_layout *lay;
    struct moe_options *opt;
    struct moe_megatron_result *res;
    struct moe_diag *diag;
    const char *const *argv;
    const char *flag; /* flag being handled, for messages */
    int at;           /* its argv index */
    /* the model before any flag, to tell derived defaults from given values */
    int old_layers, old_hidden, old_heads, old_groups, old_kv;
    /* values resolved after all flags (pointers into argv), with the argv index of each */
    const char *freq, *window_skip, *pp_layout;
    int freq_at, window_skip_at, pp_layout_at;
    bool gqa;
    int qg, vpp_layers, vpp_stages;
    int vpp_layers_at, vpp_stages_at;
    const char *fp8_format, *fp8_recipe, *fp4_format, *fp4_recipe;
    int fp8_format_at, fp8_recipe_at, fp4_format_at, fp4_recipe_at;
    bool fp8_pg, fp4_pg;
    int fp8_pg_at, fp4_pg_at;
    const char *disp_type, *flex_backend;
    int disp_at, backend_at, deepep_at;
    bool enable_deepep;
    const char *rc_gran;
    int rc_gran_at, rc_modules_at, moe_layer_rc_at;
    bool rc_activations, moe_layer_rc, rc_modules_set, rc_layers_set;
    unsigned rc_modules;
    const char *cg_impl;
    int cg_impl_at, cg_legacy_at;
    bool cg_modules_set, enable_cg, external_cg;
    unsigned cg_modules;
    bool window_size_set;
};

static void mark(struct parse_ctx *x, enum moe_megatron_field f)
{
    x->res->set[f / 64] |= (uint64_t)1 << (f % 64);
}

static bool was_set(const struct parse_ctx *x, enum moe_megatron_field f)
{
    return moe_megatron_is_set(x->res, f);
}

/* An error about flag (argv index at). */
static enum moe_status
flag_error(struct parse_ctx *x, const char *flag, int at, enum moe_status st, const char *fmt, ...)
    MOE_PRINTF(5, 6);
static enum moe_status
flag_error(struct parse_ctx *x, const char *flag, int at, enum moe_status st, const char *fmt, ...)
{
    moe_diag_source(x->diag, flag);
    if (x->diag != NULL) {
        x->diag->column = at + 1;
    }
    va_list args;
    va_start(args, fmt);
    (void)moe_diag_vset(x->diag, st, fmt, args);
    va_end(args);
    return st;
}

static void add_ignored(struct parse_ctx *x, const char *arg, int len, int at, int why)
{
    if (len < 0) {
        len = (int)strcspn(arg, "=");
    }
    struct moe_megatron_result *r = x->res;
    if (r->num_ignored >= MOE_MEGATRON_MAX_IGNORED) {
        r->num_ignored_dropped++;
        return;
    }
    struct moe_megatron_ignored *e = &r->ignored[r->num_ignored++];
    e->flag = arg;
    e->flag_len = len;
    e->argv_idx = at;
    e->reason = why_text[why];
}

static enum moe_status parse_int(struct parse_ctx *x, const char *s, long lo, long hi, int *out)
{
    char *end = NULL;
    errno = 0;
    long v = (s != NULL && *s != '\0') ? strtol(s, &end, 10) : 0;
    if (s == NULL || *s == '\0' || end == NULL || *end != '\0' || errno != 0) {
        return flag_error(x, x->flag, x->at, MOE_ERR_INVALID, "%s: '%s' is not an integer", x->flag,
                          s != NULL ? s : "");
    }
    if (v < lo || v > hi) {
        return flag_error(x, x->flag, x->at, MOE_ERR_INVALID, "%s: %ld is out of range [%ld, %ld]",
                          x->flag, v, lo, hi);
    }
    *out = (int)v;
    return MOE_OK;
}

static enum moe_status parse_double(struct parse_ctx *x, const char *s, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = (s != NULL && *s != '\0') ? strtod(s, &end) : 0.0;
    if (s == NULL || *s == '\0' || end == NULL || *end != '\0' || errno != 0 || !isfinite(v)) {
        return flag_error(x, x->flag, x->at, MOE_ERR_INVALID, "%s: '%s' is not a number", x->flag,
                          s != NULL ? s : "");
    }
    *out = v;
    return MOE_OK;
}

static enum moe_status
parse_choice(struct parse_ctx *x, const char *s, const char *const *choices, size_t n, int *out)
{
    char list[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(s, choices[i]) == 0) {
            *out = (int)i;
            return MOE_OK;
        }
        int w = snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "", choices[i]);
        used += (w > 0 && (size_t)w < sizeof(list) - used) ? (size_t)w : 0;
    }
    return flag_error(x, x->flag, x->at, MOE_ERR_INVALID, "%s: '%s' is not one of: %s", x->flag, s,
                      list);
}

/*
 * Next item of a list value: words split further at commas. *word and *off keep the position.
 * Returns false when no item is left; the item is copied into buf[len] (truncated items fail the
 * name lookups that follow, which report them).
 */
static bool next_item(const struct values *v, int *word, size_t *off, char *buf, size_t len)
{
    int nwords = (v->eq != NULL) ? 1 : v->count;
    while (*word < nwords) {
        const char *w = (v->eq != NULL) ? v->eq : v->argv[*word];
        const char *p = w + *off;
        while (*p == ',' || *p == ' ') {
            p++;
        }
        if (*p == '\0') {
            (*word)++;
            *off = 0;
            continue;
        }
        size_t n = strcspn(p, ", ");
        size_t k = n < len - 1 ? n : len - 1;
        memcpy(buf, p, k);
        buf[k] = '\0';
        *off = (size_t)(p - w) + n;
        return true;
    }
    return false;
}

static enum moe_status
parse_modules(struct parse_ctx *x, const struct values *v, enum moe_module_set set, unsigned *out)
{
    unsigned bits = 0;
    int word = 0;
    size_t off = 0;
    char item[64];
    while (next_item(v, &word, &off, item, sizeof(item))) {
        unsigned bit = 0;
        if (set == MOE_MODSET_CUDA_GRAPH && strcmp(item, "full") == 0) {
            continue; /* deprecated "full" scope = the whole layer = no module list */
        }
        enum moe_status st = moe_module_parse(set, item, &bit, x->diag);
        if (st != MOE_OK) {
            char msg[sizeof(x->diag->message)];
            (void)snprintf(msg, sizeof(msg), "%s", x->diag != NULL ? x->diag->message : "");
            return flag_error(x, x->flag, x->at, MOE_ERR_INVALID, "%s: %s", x->flag, msg);
        }
        bits |= bit;
    }
    *out = bits;
    return MOE_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Simple fields                                                                                */

enum { T_CFG, T_LAY, T_OPT };

struct int_field {
    unsigned char id;
    unsigned char target;
    unsigned char field;
    size_t off;
    int lo, hi;
};

#define CFG_INT(id, member, field, lo, hi)                                                         \
    {                                                                                              \
        id, T_CFG, field, offsetof(struct moe_model_cfg, member), lo, hi                           \
    }
#define LAY_INT(id, member, field, lo, hi)                                                         \
    {                                                                                              \
        id, T_LAY, field, offsetof(struct moe_layout, member), lo, hi                              \
    }
#define OPT_INT(id, member, field, lo, hi)                                                         \
    {                                                                                              \
        id, T_OPT, field, offsetof(struct moe_options, member), lo, hi                             \
    }

/* Ranges: what moefold can represent (MOE_MAX_*) or sizes no real model exceeds. */
static const struct int_field int_fields[] = {
    CFG_INT(F_NUM_LAYERS, num_layers, MOE_MF_NUM_LAYERS, 1, MOE_MAX_LAYERS),
    CFG_INT(F_HIDDEN, hidden_size, MOE_MF_HIDDEN_SIZE, 1, 1 << 20),
    CFG_INT(F_FFN, ffn_hidden_size, MOE_MF_FFN_HIDDEN_SIZE, 1, 1 << 22),
    CFG_INT(F_HEADS, num_attention_heads, MOE_MF_NUM_ATTENTION_HEADS, 1, 4096),
    CFG_INT(F_KV_CHANNELS, kv_channels, MOE_MF_KV_CHANNELS, 1, 65536),
    CFG_INT(F_NUM_EXPERTS, num_experts, MOE_MF_NUM_EXPERTS, 0, MOE_MAX_EXPERTS),
    CFG_INT(F_MOE_FFN, moe_ffn_hidden_size, MOE_MF_MOE_FFN_HIDDEN_SIZE, 1, 1 << 22),
    CFG_INT(F_TOPK, moe_router_topk, MOE_MF_MOE_ROUTER_TOPK, 1, MOE_MAX_EXPERTS),
    CFG_INT(F_SHARED, moe_shared_expert_intermediate_size, MOE_MF_SHARED_EXPERT_SIZE, 1, 1 << 22),
    CFG_INT(F_Q_LORA, q_lora_rank, MOE_MF_Q_LORA_RANK, 0, 65536),
    CFG_INT(F_KV_LORA, kv_lora_rank, MOE_MF_KV_LORA_RANK, 1, 65536),
    CFG_INT(F_QK_HEAD, qk_head_dim, MOE_MF_QK_HEAD_DIM, 1, 65536),
    CFG_INT(F_QK_POS, qk_pos_emb_head_dim, MOE_MF_QK_POS_EMB_HEAD_DIM, 1, 65536),
    CFG_INT(F_V_HEAD, v_head_dim, MOE_MF_V_HEAD_DIM, 1, 65536),
    CFG_INT(F_MTP, mtp_num_layers, MOE_MF_MTP_NUM_LAYERS, 0, MOE_MAX_MTP),
    CFG_INT(F_VOCAB, vocab_size, MOE_MF_VOCAB_SIZE, 1, 1 << 24),
    CFG_INT(F_VOCAB_DIV, make_vocab_size_divisible_by, MOE_MF_VOCAB_DIVISOR, 1, 1 << 20),
    CFG_INT(F_ROUTER_GROUPS, moe_router_num_groups, MOE_MF_ROUTER_NUM_GROUPS, 0, MOE_MAX_EXPERTS),
    CFG_INT(
        F_ROUTER_GROUP_TOPK, moe_router_group_topk, MOE_MF_ROUTER_GROUP_TOPK, 0, MOE_MAX_EXPERTS),
    LAY_INT(F_TP, tp, MOE_MF_TP, 1, 1024),
    LAY_INT(F_PP, pp, MOE_MF_PP, 1, MOE_MAX_PP_CHUNKS),
    LAY_INT(F_CP, cp, MOE_MF_CP, 1, 1024),
    LAY_INT(F_EP, ep, MOE_MF_EP, 1, MOE_MAX_EXPERTS),
    LAY_INT(F_ETP, etp, MOE_MF_ETP, 1, 1024),
    LAY_INT(F_FIRST, first_stage_layers, MOE_MF_FIRST_STAGE_LAYERS, 1, MOE_MAX_LAYERS),
    LAY_INT(F_LAST, last_stage_layers, MOE_MF_LAST_STAGE_LAYERS, 1, MOE_MAX_LAYERS),
    LAY_INT(F_MBS, mbs, MOE_MF_MBS, 1, 1 << 16),
    LAY_INT(F_GBS, gbs, MOE_MF_GBS, 1, 1 << 26),
    OPT_INT(F_RC_LAYERS, recompute_num_layers, MOE_MF_RECOMPUTE_NUM_LAYERS, 1, MOE_MAX_LAYERS),
    OPT_INT(F_CPU_OFFLOAD_LAYERS,
            cpu_offloading_num_layers,
            MOE_MF_CPU_OFFLOADING_NUM_LAYERS,
            0,
            MOE_MAX_LAYERS),
    OPT_INT(F_REPLICAS, moe_hot_expert_replicas, MOE_MF_HOT_EXPERT_REPLICAS, 0, MOE_MAX_EXPERTS),
};

struct bool_field {
    unsigned char id;
    unsigned char target;
    unsigned char field;
    size_t off;
};

#define CFG_BOOL(id, member, field)                                                                \
    {                                                                                              \
        id, T_CFG, field, offsetof(struct moe_model_cfg, member)                                   \
    }
#define LAY_BOOL(id, member, field)                                                                \
    {                                                                                              \
        id, T_LAY, field, offsetof(struct moe_layout, member)                                      \
    }
#define OPT_BOOL(id, member, field)                                                                \
    {                                                                                              \
        id, T_OPT, field, offsetof(struct moe_options, member)                                     \
    }

static const struct bool_field bool_fields[] = {
    CFG_BOOL(F_SWIGLU, is_swiglu, MOE_MF_SWIGLU),
    CFG_BOOL(F_UNTIE, is_untied_embeddings, MOE_MF_UNTIE_EMBEDDINGS),
    CFG_BOOL(F_QK_LN, has_qk_layernorm, MOE_MF_QK_LAYERNORM),
    CFG_BOOL(F_MLA, is_mla, MOE_MF_MLA),
    CFG_BOOL(F_EXPERT_BIAS, has_router_expert_bias, MOE_MF_ROUTER_EXPERT_BIAS),
    LAY_BOOL(F_SP, sequence_parallel, MOE_MF_SEQUENCE_PARALLEL),
    OPT_BOOL(F_DISTOPT, use_distributed_optimizer, MOE_MF_DISTRIBUTED_OPTIMIZER),
    OPT_BOOL(F_OGR, overlap_grad_reduce, MOE_MF_OVERLAP_GRAD_REDUCE),
    OPT_BOOL(F_OPG, overlap_param_gather, MOE_MF_OVERLAP_PARAM_GATHER),
    OPT_BOOL(F_TPCO, tp_comm_overlap, MOE_MF_TP_COMM_OVERLAP),
    OPT_BOOL(F_EPO, overlap_moe_ep_comm, MOE_MF_OVERLAP_MOE_EP_COMM),
    OPT_BOOL(F_DELAY_WGRAD, delay_wgrad_compute, MOE_MF_DELAY_WGRAD),
    OPT_BOOL(F_GROUPED_GEMM, moe_grouped_gemm, MOE_MF_GROUPED_GEMM),
    OPT_BOOL(F_FORCE_LB, force_load_balancing, MOE_MF_FORCE_LOAD_BALANCING),
    OPT_BOOL(F_PAO, precision_aware_optimizer, MOE_MF_PRECISION_AWARE_OPTIMIZER),
    OPT_BOOL(F_OPT_CPU_OFFLOAD, optimizer_cpu_offload, MOE_MF_OPTIMIZER_CPU_OFFLOAD),
    OPT_BOOL(F_FG_OFFLOAD, fine_grained_offload, MOE_MF_FINE_GRAINED_OFFLOAD),
};

static char *target_base(struct parse_ctx *x, int target)
{
    switch (target) {
    case T_CFG:
        return (char *)x->cfg;
    case T_LAY:
        return (char *)x->lay;
    default:
        return (char *)x->opt;
    }
}

/* Returns true when id is a plain int or bool field (and applies it). */
static bool apply_simple(struct parse_ctx *x, int id, const char *val, enum moe_status *st)
{
    for (size_t i = 0; i < MOE_ARRAY_LEN(int_fields); i++) {
        const struct int_field *f = &int_fields[i];
        if (f->id == id) {
            int v = 0;
            *st = parse_int(x, val, f->lo, f->hi, &v);
            if (*st == MOE_OK) {
                memcpy(target_base(x, f->target) + f->off, &v, sizeof(v));
                mark(x, (enum moe_megatron_field)f->field);
            }
            return true;
        }
    }
    for (size_t i = 0; i < MOE_ARRAY_LEN(bool_fields); i++) {
        const struct bool_field *f = &bool_fields[i];
        if (f->id == id) {
            bool v = true;
            memcpy(target_base(x, f->target) + f->off, &v, sizeof(v));
            mark(x, (enum moe_megatron_field)f->field);
            *st = MOE_OK;
            return true;
        }
    }
    return false;
}

/* ------------------------------------------------------------------------------------------ */
/* Flags handled one by one                                                                     */

static enum moe_status apply_model_flag(struct parse_ctx *x, int id, const char *val)
{
    static const char *const scores[] = {"softmax", "sigmoid"};
    int v = 0;
    switch (id) {
    case F_GQA:
        x->gqa = true;
        return MOE_OK;
    case F_QUERY_GROUPS:
        return parse_int(x, val, 1, 4096, &x->qg);
    case F_MOE_LAYER_FREQ:
        x->freq = val;
        x->freq_at = x->at;
        mark(x, MOE_MF_MOE_LAYER_FREQ);
        return MOE_OK;
    case F_SEQ:
        MOE_TRY(parse_int(x, val, 1, 1 << 24, &v));
        x->cfg->seq_length = v;
        x->lay->seq_length = v;
        mark(x, MOE_MF_SEQ_LENGTH);
        return MOE_OK;
    case F_SCORE:
        MOE_TRY(parse_choice(x, val, scores, MOE_ARRAY_LEN(scores), &v));
        x->cfg->router_score = (enum moe_router_score)v;
        mark(x, MOE_MF_ROUTER_SCORE);
        return MOE_OK;
    case F_WINDOW_SIZE: {
        /* Megatron's tuple_type: "(left,right)" or "left,right"; -1 means unlimited. */
        char buf[64];
        (void)snprintf(buf, sizeof(buf), "%s", val);
        char *p = buf + strspn(buf, "( ");
        p[strcspn(p, ",)")] = '\0';
        MOE_TRY(parse_int(x, p, -1, 1 << 24, &v));
        x->cfg->window_size = v < 0 ? 0 : v;
        x->window_size_set = true;
        mark(x, MOE_MF_WINDOW);
        return MOE_OK;
    }
    case F_WINDOW_SKIP:
        x->window_skip = val;
        x->window_skip_at = x->at;
        mark(x, MOE_MF_WINDOW);
        return MOE_OK;
    default:
        return flag_error(x, x->flag, x->at, MOE_ERR_INVALID, "%s: not handled", x->flag);
    }
}

static enum moe_status apply_layout_flag(struct parse_ctx *x, int id, const char *val)
{
    switch (id) {
    case F_VPP_LAYERS:
        x->vpp_layers_at = x->at;
        return parse_int(x, val, 1, MOE_MAX_LAYERS, &x->vpp_layers);
    case F_VPP_STAGES:
        x->vpp_stages_at = x->at;
        return parse_int(x, val, 1, MOE_MAX_PP_CHUNKS, &x->vpp_stages);
    case F_PP_LAYOUT:
        x->pp_layout = val;
        x->pp_layout_at = x->at;
        return MOE_OK;
    default:
        return apply_model_flag(x, id, val);
    }
}

static enum moe_status apply_precision_flag(struct parse_ctx *x, int id, const char *val)
{
    static const char *const fp8_formats[] = {"e4m3", "hybrid"};
    static const char *const fp8_recipes[] = {"tensorwise", "delayed", "blockwise", "mxfp8"};
    static const char *const fp4_formats[] = {"e2m1"};
    static const char *const fp4_recipes[] = {"nvfp4"};
    static const char *const main_grads[] = {"fp32", "bf16"};
    static const char *const moments[] = {"fp32", "bf16", "fp16", "fp8"}; /* enum moe_dtype order */
    int v = 0;
    if ((id == F_FP8_RECIPE || id == F_FP4_RECIPE) && strcmp(val, "custom") == 0) {
        return flag_error(x, x->flag, x->at, MOE_ERR_UNSUPPORTED,
                          "%s custom: a custom quantizer cannot be priced; use a named recipe",
                          x->flag);
    }
    switch (id) {
    case F_FP8_FORMAT:
        MOE_TRY(parse_choice(x, val, fp8_formats, MOE_ARRAY_LEN(fp8_formats), &v));
        x->fp8_format = val;
        x->fp8_format_at = x->at;
        return MOE_OK;
    case F_FP8_RECIPE:
        MOE_TRY(parse_choice(x, val, fp8_recipes, MOE_ARRAY_LEN(fp8_recipes), &v));
        x->fp8_recipe = val;
        x->fp8_recipe_at = x->at;
        return MOE_OK;
    case F_FP4_FORMAT:
        MOE_TRY(parse_choice(x, val, fp4_formats, MOE_ARRAY_LEN(fp4_formats), &v));
        x->fp4_format = val;
        x->fp4_format_at = x->at;
        return MOE_OK;
    case F_FP4_RECIPE:
        MOE_TRY(parse_choice(x, val, fp4_recipes, MOE_ARRAY_LEN(fp4_recipes), &v));
        x->fp4_recipe = val;
        x->fp4_recipe_at = x->at;
        return MOE_OK;
    case F_FP8_PG:
        x->fp8_pg = true;
        x->fp8_pg_at = x->at;
        return MOE_OK;
    case F_FP4_PG:
        x->fp4_pg = true;
        x->fp4_pg_at = x->at;
        return MOE_OK;
    case F_MAIN_GRADS:
        MOE_TRY(parse_choice(x, val, main_grads, MOE_ARRAY_LEN(main_grads), &v));
        x->opt->main_grads_dtype = (enum moe_dtype)v;
        mark(x, MOE_MF_MAIN_GRADS_DTYPE);
        return MOE_OK;
    case F_EXP_AVG:
    case F_EXP_AVG_SQ:
        MOE_TRY(parse_choice(x, val, moments, MOE_ARRAY_LEN(moments), &v));
        if (id == F_EXP_AVG) {
            x->opt->exp_avg_dtype = (enum moe_dtype)v;
            mark(x, MOE_MF_EXP_AVG_DTYPE);
        } else {
            x->opt->exp_avg_sq_dtype = (enum moe_dtype)v;
            mark(x, MOE_MF_EXP_AVG_SQ_DTYPE);
        }
        return MOE_OK;
    default:
        return apply_layout_flag(x, id, val);
    }
}

static enum moe_status apply_moe_flag(struct parse_ctx *x, int id, const char *val)
{
    static const char *const dispatchers[] = {"alltoall", "allgather", "flex"};
    static const char *const backends[] = {"deepep", "hybridep"};
    int v = 0;
    double d = 0.0;
    switch (id) {
    case F_DISPATCHER:
        MOE_TRY(parse_choice(x, val, dispatchers, MOE_ARRAY_LEN(dispatchers), &v));
        x->disp_type = val;
        x->disp_at = x->at;
        return MOE_OK;
    case F_FLEX_BACKEND:
        MOE_TRY(parse_choice(x, val, backends, MOE_ARRAY_LEN(backends), &v));
        x->flex_backend = val;
        x->backend_at = x->at;
        return MOE_OK;
    case F_ENABLE_DEEPEP:
        x->enable_deepep = true;
        x->deepep_at = x->at;
        return MOE_OK;
    case F_CAPACITY:
        MOE_TRY(parse_double(x, val, &d));
        x->opt->capacity_factor = d < 0.0 ? 0.0 : d; /* Megatron: negative = None = dropless */
        mark(x, MOE_MF_CAPACITY_FACTOR);
        return MOE_OK;
    case F_IMBALANCE:
        if (strcmp(val, "auto") == 0) {
            x->opt->moe_imbalance = 0.0;
        } else {
            MOE_TRY(parse_double(x, val, &d));
            if (d < 1.0 || d > 1000.0) {
                return flag_error(x, x->flag, x->at, MOE_ERR_INVALID,
                                  "%s: %g is not a max/mean load factor in [1, 1000] (or auto)",
                                  x->flag, d);
            }
            x->opt->moe_imbalance = d;
        }
        mark(x, MOE_MF_MOE_IMBALANCE);
        return MOE_OK;
    case F_OPT_OFFLOAD_FRACTION:
        MOE_TRY(parse_double(x, val, &d));
        if (d < 0.0 || d > 1.0) {
            return flag_error(x, x->flag, x->at, MOE_ERR_INVALID, "%s: %g is not in [0, 1]",
                              x->flag, d);
        }
        x->opt->optimizer_offload_fraction = d;
        mark(x, MOE_MF_OPTIMIZER_OFFLOAD_FRACTION);
        return MOE_OK;
    default:
        return apply_precision_flag(x, id, val);
    }
}

static enum moe_status
apply_recompute_flag(struct parse_ctx *x, int id, const char *val, const struct values *vals)
{
    static const char *const grans[] = {"full", "selective"};
    static const char *const cg_impls[] = {"none", "local", "transformer_engine", "full_iteration"};
    int v = 0;
    switch (id) {
    case F_RC_GRAN:
        MOE_TRY(parse_choice(x, val, grans, MOE_ARRAY_LEN(grans), &v));
        x->rc_gran = val;
        x->rc_gran_at = x->at;
        return MOE_OK;
    case F_RC_METHOD: {
        static const char *const methods[] = {"uniform", "block"}; /* enum order */
        MOE_TRY(parse_choice(x, val, methods, MOE_ARRAY_LEN(methods), &v));
        x->opt->recompute_method = (enum moe_recompute_method)v;
        mark(x, MOE_MF_RECOMPUTE_METHOD);
        return MOE_OK;
    }
    case F_RC_MODULES:
        MOE_TRY(parse_modules(x, vals, MOE_MODSET_RECOMPUTE, &x->rc_modules));
        x->rc_modules_set = true;
        x->rc_modules_at = x->at;
        return MOE_OK;
    case F_RC_ACTIVATIONS:
        x->rc_activations = true;
        return MOE_OK;
    case F_MOE_LAYER_RC:
        x->moe_layer_rc = true;
        x->moe_layer_rc_at = x->at;
        return MOE_OK;
    case F_OFFLOAD_MODULES:
        MOE_TRY(parse_modules(x, vals, MOE_MODSET_OFFLOAD, &x->opt->offload_modules));
        mark(x, MOE_MF_OFFLOAD_MODULES);
        return MOE_OK;
    case F_CG_IMPL:
        MOE_TRY(parse_choice(x, val, cg_impls, MOE_ARRAY_LEN(cg_impls), &v));
        x->cg_impl = val;
        x->cg_impl_at = x->at;
        return MOE_OK;
    case F_CG_MODULES:
    case F_CG_SCOPE:
        MOE_TRY(parse_modules(x, vals, MOE_MODSET_CUDA_GRAPH, &x->cg_modules));
        x->cg_modules_set = true;
        return MOE_OK;
    case F_ENABLE_CG:
    case F_EXTERNAL_CG:
        if (id == F_ENABLE_CG) {
            x->enable_cg = true;
        } else {
            x->external_cg = true;
        }
        x->cg_legacy_at = x->at;
        return MOE_OK;
    case F_CPU_OFFLOADING:
        return MOE_OK;
    default:
        return apply_moe_flag(x, id, val);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* List expressions: --moe-layer-freq "([0]*3+[1]*58)", --window-attn-skip-freq "[1,0]*4"     */

struct lexpr {
    const char *s;
    int pos, len;
    uint8_t *out;
    int n, cap;
    struct parse_ctx *x;
};

static enum moe_status lex_error(struct lexpr *e, const char *what)
{
    return flag_error(e->x, e->x->flag, e->x->at, MOE_ERR_PARSE,
                      "%s: '%s' at character %d: %s (a pattern is an int or a list expression "
                      "such as \"([0]*3+[1]*58)\")",
                      e->x->flag, e->s, e->pos + 1, what);
}

static void lex_space(struct lexpr *e)
{
    while (e->pos < e->len && e->s[e->pos] == ' ') {
        e->pos++;
    }
}

static bool lex_int(struct lexpr *e, long *v)
{
    lex_space(e);
    int start = e->pos;
    *v = 0;
    while (e->pos < e->len && e->s[e->pos] >= '0' && e->s[e->pos] <= '9' && *v < 100000) {
        *v = *v * 10 + (e->s[e->pos++] - '0');
    }
    return e->pos > start;
}

static bool lex_eat(struct lexpr *e, char c)
{
    lex_space(e);
    if (e->pos < e->len && e->s[e->pos] == c) {
        e->pos++;
        return true;
    }
    return false;
}

/* Repeat out[start, n) so it appears k times in all. */
static enum moe_status lex_repeat(struct lexpr *e, int start, long k)
{
    long seg = e->n - start;
    if (k == 0) {
        e->n = start;
        return MOE_OK;
    }
    if (start + seg * k > e->cap) {
        return lex_error(e, "the pattern is longer than the 512 layers moefold supports");
    }
    for (long r = 1; r < k; r++) {
        memcpy(e->out + start + r * seg, e->out + start, (size_t)seg);
    }
    e->n = (int)(start + seg * k);
    return MOE_OK;
}

static enum moe_status lex_expr(struct lexpr *e, int depth);

static enum moe_status lex_factor(struct lexpr *e, int depth)
{
    if (depth > 16) {
        return lex_error(e, "nested too deeply");
    }
    if (lex_eat(e, '(')) {
        MOE_TRY(lex_expr(e, depth + 1));
        return lex_eat(e, ')') ? MOE_OK : lex_error(e, "expected ')'");
    }
    if (!lex_eat(e, '[')) {
        return lex_error(e, "expected '[' or '('");
    }
    if (lex_eat(e, ']')) {
        return MOE_OK;
    }
    do {
        long v = 0;
        if (!lex_int(e, &v)) {
            return lex_error(e, "expected 0 or 1");
        }
        if (v > 1) {
            return lex_error(e, "entries must be 0 or 1");
        }
        if (e->n >= e->cap) {
            return lex_error(e, "the pattern is longer than the 512 layers moefold supports");
        }
        e->out[e->n++] = (uint8_t)v;
    } while (lex_eat(e, ','));
    return lex_eat(e, ']') ? MOE_OK : lex_error(e, "expected ',' or ']'");
}

/* term := [INT '*'] factor ('*' INT)* */
static enum moe_status lex_term(struct lexpr *e, int depth)
{
    int start = e->n;
    long k = 1;
    lex_space(e);
    if (e->pos < e->len && e->s[e->pos] >= '0' && e->s[e->pos] <= '9') {
        (void)lex_int(e, &k);
        if (!lex_eat(e, '*')) {
            return lex_error(e, "expected '*' after a count");
        }
    }
    MOE_TRY(lex_factor(e, depth));
    MOE_TRY(lex_repeat(e, start, k));
    while (lex_eat(e, '*')) {
        if (!lex_int(e, &k)) {
            return lex_error(e, "expected a count after '*'");
        }
        MOE_TRY(lex_repeat(e, start, k));
    }
    return MOE_OK;
}

static enum moe_status lex_expr(struct lexpr *e, int depth)
{
    MOE_TRY(lex_term(e, depth));
    while (lex_eat(e, '+')) {
        MOE_TRY(lex_term(e, depth));
    }
    return MOE_OK;
}

/*
 * Evaluate a Megatron frequency value into out[L] (1 = set). An int N gives
 * out[i] = (i % N == 0) for the MoE pattern, or out[i] = ((i+1) % N != 0) for the window skip
 * pattern (Megatron: one full-attention layer after N-1 windowed ones).
 */
static enum moe_status
eval_pattern(struct parse_ctx *x, const char *s, bool window_rule, int num_layers, uint8_t *out)
{
    char buf[2048];
    size_t n = strnlen(s, sizeof(buf) - 1);
    memcpy(buf, s, n);
    buf[n] = '\0';
    /* A pattern pasted from a shell script may keep one pair of quotes. */
    if (n >= 2 && (buf[0] == '\'' || buf[0] == '"') && buf[n - 1] == buf[0]) {
        buf[n - 1] = '\0';
        memmove(buf, buf + 1, n - 1);
    }
    if (strpbrk(buf, "[(") == NULL) {
        int freq = 1;
        MOE_TRY(parse_int(x, buf, 1, MOE_MAX_LAYERS, &freq));
        for (int i = 0; i < num_layers; i++) {
            out[i] = window_rule ? (uint8_t)((i + 1) % freq != 0) : (uint8_t)(i % freq == 0);
        }
        return MOE_OK;
    }
    struct lexpr e = {.s = buf, .len = (int)strlen(buf), .out = out, .cap = MOE_MAX_LAYERS, .x = x};
    MOE_TRY(lex_expr(&e, 0));
    lex_space(&e);
    if (e.pos != e.len) {
        return lex_error(&e, "unexpected character");
    }
    if (e.n != num_layers) {
        return flag_error(x, x->flag, x->at, MOE_ERR_INVALID,
                          "%s: the pattern has %d entries but the model has %d layers "
                          "(--num-layers); they must match",
                          x->flag, e.n, num_layers);
    }
    return MOE_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* After all flags: Megatron's cross-flag rules and defaults                                    */

static void set_layer_bits(struct moe_model_cfg *cfg, const uint8_t *on, unsigned bit)
{
    for (int i = 0; i < MOE_MAX_LAYERS; i++) {
        bool v = i < cfg->num_layers && on[i];
        cfg->layer_flags[i] =
            (uint8_t)(v ? (cfg->layer_flags[i] | bit) : (cfg->layer_flags[i] & ~bit));
    }
}

static enum moe_status finalize_layers(struct parse_ctx *x)
{
    struct moe_model_cfg *cfg = x->cfg;
    int n = cfg->num_layers;
    uint8_t on[MOE_MAX_LAYERS];
    if (x->freq != NULL) {
        x->flag = "--moe-layer-freq";
        x->at = x->freq_at;
        MOE_TRY(eval_pattern(x, x->freq, false, n, on));
        set_layer_bits(cfg, on, MOE_LAYER_MOE);
    } else if (n != x->old_layers) {
        /* New layers continue the last layer's kind (a "first k dense" pattern stays so). */
        for (int i = x->old_layers; i < n; i++) {
            cfg->layer_flags[i] =
                (x->old_layers > 0) ? cfg->layer_flags[x->old_layers - 1] : (uint8_t)MOE_LAYER_MOE;
        }
        for (int i = n; i < MOE_MAX_LAYERS; i++) {
            cfg->layer_flags[i] = 0;
        }
    }
    bool any_moe = false;
    for (int i = 0; i < n; i++) {
        any_moe = any_moe || (cfg->layer_flags[i] & MOE_LAYER_MOE);
    }
    if (cfg->num_experts == 0) {
        memset(on, 0, sizeof(on));
        set_layer_bits(cfg, on, MOE_LAYER_MOE);
    } else if (!any_moe && x->freq == NULL) {
        memset(on, 1, sizeof(on)); /* Megatron's default --moe-layer-freq 1 */
        set_layer_bits(cfg, on, MOE_LAYER_MOE);
    }
    if (x->window_skip != NULL) {
        x->flag = "--window-attn-skip-freq";
        x->at = x->window_skip_at;
        if (cfg->window_size <= 0) {
            return flag_error(x, x->flag, x->at, MOE_ERR_INVALID,
                              "--window-attn-skip-freq needs --window-size");
        }
        MOE_TRY(eval_pattern(x, x->window_skip, true, n, on));
        set_layer_bits(cfg, on, MOE_LAYER_WINDOWED);
    } else if (x->window_size_set) {
        memset(on, cfg->window_size > 0 ? 1 : 0, sizeof(on)); /* no skip: every layer windowed */
        set_layer_bits(cfg, on, MOE_LAYER_WINDOWED);
    }
    return MOE_OK;
}

static enum moe_status finalize_model(struct parse_ctx *x)
{
    struct moe_model_cfg *cfg = x->cfg;
    int h = cfg->hidden_size, a = cfg->num_attention_heads;
    /* kv_channels defaults to hidden/heads [arguments.py]; keep a value that was not derived. */
    bool kv_derived =
        x->old_kv == 0 || (x->old_heads > 0 && x->old_kv * x->old_heads == x->old_hidden);
    if (!was_set(x, MOE_MF_KV_CHANNELS) && kv_derived && h > 0 && a > 0 &&
        (cfg->kv_channels == 0 || was_set(x, MOE_MF_HIDDEN_SIZE) ||
         was_set(x, MOE_MF_NUM_ATTENTION_HEADS))) {
        if (h % a != 0) {
            return flag_error(x, "--kv-channels", 0, MOE_ERR_INVALID,
                              "hidden size %d is not divisible by %d heads; give --kv-channels", h,
                              a);
        }
        cfg->kv_channels = h / a;
    }
    /* Query groups: --num-query-groups, else Megatron's default 1 under --group-query-attention,
     * else one group per head. */
    if (x->qg > 0) {
        cfg->num_query_groups = x->qg;
    } else if (x->gqa && (x->old_groups == 0 || x->old_groups == x->old_heads)) {
        cfg->num_query_groups = 1;
    } else if (!x->gqa && x->old_groups == x->old_heads) {
        cfg->num_query_groups = a;
    }
    if (cfg->num_query_groups == 0) {
        cfg->num_query_groups = a;
    }
    if (x->qg > 0 || x->gqa) {
        mark(x, MOE_MF_NUM_QUERY_GROUPS);
    }
    /* ffn default: 4h, or int(4h*2/3/64)*64 with SwiGLU [arguments.py]. */
    if (cfg->ffn_hidden_size == 0 && h > 0) {
        cfg->ffn_hidden_size = cfg->is_swiglu ? (int)((8L * h / 3) / 64 * 64) : 4 * h;
    }
    if (cfg->num_experts > 0) {
        if (cfg->moe_ffn_hidden_size == 0) {
            cfg->moe_ffn_hidden_size = cfg->ffn_hidden_size;
        }
        if (cfg->moe_router_topk == 0) {
            cfg->moe_router_topk = 2; /* --moe-router-topk default */
        }
    }
    if (cfg->is_mla) { /* --kv-lora-rank / --qk-head-dim / --qk-pos-emb-head-dim / --v-head-dim */
        cfg->kv_lora_rank = cfg->kv_lora_rank ? cfg->kv_lora_rank : 32;
        cfg->qk_head_dim = cfg->qk_head_dim ? cfg->qk_head_dim : 128;
        cfg->qk_pos_emb_head_dim = cfg->qk_pos_emb_head_dim ? cfg->qk_pos_emb_head_dim : 64;
        cfg->v_head_dim = cfg->v_head_dim ? cfg->v_head_dim : 128;
    }
    return finalize_layers(x);
}

static enum moe_status finalize_vpp(struct parse_ctx *x)
{
    struct moe_layout *lay = x->lay;
    int given = (x->vpp_layers > 0) + (x->vpp_stages > 0) + (x->pp_layout != NULL);
    if (given > 1) {
        int at = x->pp_layout ? x->pp_layout_at : x->vpp_stages_at;
        return flag_error(x, "--num-virtual-stages-per-pipeline-rank", at, MOE_ERR_INVALID,
                          "give only one of --num-layers-per-virtual-pipeline-stage, "
                          "--num-virtual-stages-per-pipeline-rank and "
                          "--pipeline-model-parallel-layout");
    }
    if (x->vpp_stages > 0) {
        lay->vpp = x->vpp_stages;
        mark(x, MOE_MF_VPP);
    }
    if (x->vpp_layers > 0) {
        const char *f = "--num-layers-per-virtual-pipeline-stage";
        int l = x->cfg->num_layers;
        if (lay->first_stage_layers > 0 || lay->last_stage_layers > 0) {
            return flag_error(x, f, x->vpp_layers_at, MOE_ERR_INVALID,
                              "with uneven first/last stages give the virtual stages with "
                              "--num-virtual-stages-per-pipeline-rank (Megatron's rule)");
        }
        if (l % lay->pp != 0 || (l / lay->pp) % x->vpp_layers != 0) {
            return flag_error(x, f, x->vpp_layers_at, MOE_ERR_INVALID,
                              "%d layers over pp=%d do not split into virtual stages of %d layers",
                              l, lay->pp, x->vpp_layers);
        }
        lay->vpp = l / lay->pp / x->vpp_layers;
        mark(x, MOE_MF_VPP);
    }
    return MOE_OK;
}

static enum moe_status finalize_layout(struct parse_ctx *x)
{
    struct moe_layout *lay = x->lay;
    /* --expert-tensor-parallel-size defaults to --tensor-model-parallel-size [arguments.py]. */
    if (was_set(x, MOE_MF_TP) && !was_set(x, MOE_MF_ETP)) {
        lay->etp = lay->tp;
    }
    MOE_TRY(finalize_vpp(x));
    if (x->pp_layout == NULL) {
        if (was_set(x, MOE_MF_PP) || was_set(x, MOE_MF_VPP) || was_set(x, MOE_MF_NUM_LAYERS) ||
            was_set(x, MOE_MF_FIRST_STAGE_LAYERS) || was_set(x, MOE_MF_LAST_STAGE_LAYERS)) {
            lay->has_custom_pp_layout = false; /* a previous custom layout no longer applies */
            lay->num_chunks = 0;
        }
        return MOE_OK;
    }
    const char *f = "--pipeline-model-parallel-layout";
    if (lay->first_stage_layers > 0 || lay->last_stage_layers > 0) {
        return flag_error(x, f, x->pp_layout_at, MOE_ERR_INVALID,
                          "a layout string cannot be combined with "
                          "--decoder-first/last-pipeline-num-layers (Megatron refuses both)");
    }
    int chunks = 0;
    struct moe_diag sub;
    memset(&sub, 0, sizeof(sub));
    enum moe_status st = moe_layout_count_pp_chunks(x->pp_layout, &chunks, &sub);
    if (st == MOE_OK && chunks % lay->pp != 0) {
        return flag_error(x, f, x->pp_layout_at, MOE_ERR_INVALID,
                          "%s: the layout has %d chunks, not a multiple of pp=%d", f, chunks,
                          lay->pp);
    }
    if (st == MOE_OK) {
        lay->vpp = chunks / lay->pp; /* Megatron derives vpp from the layout */
        st = moe_layout_parse_pp_string(x->pp_layout, x->cfg, lay, &sub);
    }
    if (st != MOE_OK) {
        return flag_error(x, f, x->pp_layout_at, st, "%s '%s': %s", f, x->pp_layout, sub.message);
    }
    mark(x, MOE_MF_PP_LAYOUT);
    mark(x, MOE_MF_VPP);
    return MOE_OK;
}

static bool recipe_is_fp8_family(enum moe_recipe r)
{
    return r != MOE_RECIPE_BF16 && r != MOE_RECIPE_NVFP4;
}

static enum moe_status finalize_recipe(struct parse_ctx *x)
{
    struct moe_options *opt = x->opt;
    if (x->fp8_format != NULL && x->fp4_format != NULL) {
        return flag_error(x, "--fp4-format", x->fp4_format_at, MOE_ERR_INVALID,
                          "--fp4-format and --fp8-format cannot be used together; choose one");
    }
    if (x->fp8_recipe != NULL && x->fp8_format == NULL && !recipe_is_fp8_family(opt->recipe)) {
        add_ignored(x, x->argv[x->fp8_recipe_at], -1, x->fp8_recipe_at, WHY_NO_FP8_FORMAT);
    } else if (x->fp8_format != NULL || x->fp8_recipe != NULL) {
        enum moe_recipe r =
            recipe_is_fp8_family(opt->recipe) ? opt->recipe : MOE_RECIPE_FP8_DELAYED;
        if (x->fp8_recipe != NULL) {
            MOE_ASSERT(moe_recipe_parse(x->fp8_recipe, &r, NULL) == MOE_OK);
        }
        opt->recipe = r;
        mark(x, MOE_MF_RECIPE);
    }
    if (x->fp4_recipe != NULL && x->fp4_format == NULL && opt->recipe != MOE_RECIPE_NVFP4) {
        add_ignored(x, x->argv[x->fp4_recipe_at], -1, x->fp4_recipe_at, WHY_NO_FP4_FORMAT);
    } else if (x->fp4_format != NULL) {
        opt->recipe = MOE_RECIPE_NVFP4;
        mark(x, MOE_MF_RECIPE);
    }
    if (x->fp8_pg && opt->recipe == MOE_RECIPE_NVFP4) {
        return flag_error(x, "--fp8-param-gather", x->fp8_pg_at, MOE_ERR_INVALID,
                          "with --fp4-format use --fp4-param-gather");
    }
    if (x->fp4_pg && opt->recipe != MOE_RECIPE_NVFP4) {
        return flag_error(x, "--fp4-param-gather", x->fp4_pg_at, MOE_ERR_INVALID,
                          "--fp4-param-gather must be used together with --fp4-format");
    }
    if (x->fp8_pg || x->fp4_pg) {
        opt->fp8_param_gather = true;
        mark(x, MOE_MF_FP8_PARAM_GATHER);
    }
    return MOE_OK;
}

static enum moe_status finalize_dispatcher(struct parse_ctx *x)
{
    struct moe_options *opt = x->opt;
    bool was_flex =
        opt->dispatcher == MOE_DISPATCH_DEEPEP || opt->dispatcher == MOE_DISPATCH_HYBRIDEP;
    if (x->enable_deepep && x->disp_type != NULL && strcmp(x->disp_type, "flex") != 0) {
        return flag_error(x, "--moe-enable-deepep", x->deepep_at, MOE_ERR_INVALID,
                          "DeepEP needs --moe-token-dispatcher-type flex");
    }
    if (x->disp_type == NULL) {
        if (x->enable_deepep) {
            opt->dispatcher = MOE_DISPATCH_DEEPEP;
            mark(x, MOE_MF_DISPATCHER);
        } else if (x->flex_backend != NULL && was_flex) {
            opt->dispatcher = strcmp(x->flex_backend, "hybridep") == 0 ? MOE_DISPATCH_HYBRIDEP
                                                                       : MOE_DISPATCH_DEEPEP;
            mark(x, MOE_MF_DISPATCHER);
        } else if (x->flex_backend != NULL) {
            add_ignored(x, x->argv[x->backend_at], -1, x->backend_at, WHY_NO_FLEX);
        }
        return MOE_OK;
    }
    mark(x, MOE_MF_DISPATCHER);
    if (strcmp(x->disp_type, "alltoall") == 0) {
        opt->dispatcher = MOE_DISPATCH_ALLTOALL;
    } else if (strcmp(x->disp_type, "allgather") == 0) {
        opt->dispatcher = MOE_DISPATCH_ALLGATHER;
    } else if (x->flex_backend != NULL) {
        opt->dispatcher =
            strcmp(x->flex_backend, "hybridep") == 0 ? MOE_DISPATCH_HYBRIDEP : MOE_DISPATCH_DEEPEP;
    } else if (!was_flex) {
        opt->dispatcher = MOE_DISPATCH_DEEPEP; /* --moe-flex-dispatcher-backend default */
    }
    if (x->flex_backend != NULL && strcmp(x->disp_type, "flex") != 0) {
        add_ignored(x, x->argv[x->backend_at], -1, x->backend_at, WHY_NO_FLEX);
    }
    return MOE_OK;
}

static enum moe_status finalize_recompute(struct parse_ctx *x)
{
    struct moe_options *opt = x->opt;
    if (x->rc_gran != NULL) {
        opt->recompute =
            strcmp(x->rc_gran, "full") == 0 ? MOE_RECOMPUTE_FULL : MOE_RECOMPUTE_SELECTIVE;
    } else if (x->rc_activations || x->moe_layer_rc) {
        opt->recompute = MOE_RECOMPUTE_SELECTIVE; /* [arguments.py] --recompute-activations */
    }
    if (x->moe_layer_rc && opt->recompute == MOE_RECOMPUTE_FULL) {
        return flag_error(x, "--moe-layer-recompute", x->moe_layer_rc_at, MOE_ERR_INVALID,
                          "--moe-layer-recompute cannot be combined with full recompute");
    }
    bool gran_given = x->rc_gran != NULL || x->rc_activations || x->moe_layer_rc;
    if (gran_given) {
        mark(x, MOE_MF_RECOMPUTE);
    }
    if (opt->recompute == MOE_RECOMPUTE_SELECTIVE) {
        if (x->rc_modules_set) {
            opt->recompute_modules = x->rc_modules;
        } else if (opt->recompute_modules == 0) {
            opt->recompute_modules = MOE_RC_CORE_ATTN; /* Megatron's default module list */
        }
        if (x->moe_layer_rc) {
            opt->recompute_modules |= MOE_RC_MOE;
        }
        if (gran_given && !was_set(x, MOE_MF_RECOMPUTE_NUM_LAYERS)) {
            opt->recompute_num_layers = 0; /* a full-recompute count no longer applies */
        }
    } else {
        if (x->rc_modules_set) {
            add_ignored(x, x->argv[x->rc_modules_at], -1, x->rc_modules_at, WHY_NO_SELECTIVE);
        }
        if (gran_given) {
            opt->recompute_modules = 0; /* full recompute takes no module list */
        }
    }
    if (x->rc_modules_set || x->moe_layer_rc) {
        mark(x, MOE_MF_RECOMPUTE_MODULES);
    }
    return MOE_OK;
}

static enum moe_status finalize_cuda_graphs(struct parse_ctx *x)
{
    struct moe_options *opt = x->opt;
    if ((x->enable_cg || x->external_cg) && x->cg_impl != NULL) {
        return flag_error(x, "--cuda-graph-impl", x->cg_impl_at, MOE_ERR_INVALID,
                          "do not combine --enable-cuda-graph / --external-cuda-graph with "
                          "--cuda-graph-impl (Megatron refuses it)");
    }
    if (x->enable_cg && x->external_cg) {
        return flag_error(x, "--external-cuda-graph", x->cg_legacy_at, MOE_ERR_INVALID,
                          "--enable-cuda-graph and --external-cuda-graph are exclusive");
    }
    bool full_iter = false;
    if (x->cg_impl != NULL) {
        full_iter = strcmp(x->cg_impl, "full_iteration") == 0;
        if (full_iter || strcmp(x->cg_impl, "local") == 0) {
            opt->cuda_graph_impl = MOE_CG_LOCAL;
        } else if (strcmp(x->cg_impl, "transformer_engine") == 0) {
            opt->cuda_graph_impl = MOE_CG_TE;
        } else {
            opt->cuda_graph_impl = MOE_CG_NONE;
            opt->cuda_graph_modules = 0;
        }
    } else if (x->enable_cg || x->external_cg) {
        opt->cuda_graph_impl = x->enable_cg ? MOE_CG_LOCAL : MOE_CG_TE;
    }
    if (x->cg_impl != NULL || x->enable_cg || x->external_cg) {
        mark(x, MOE_MF_CUDA_GRAPH_IMPL);
    }
    if (x->cg_modules_set) {
        opt->cuda_graph_modules = x->cg_modules;
        mark(x, MOE_MF_CUDA_GRAPH_MODULES);
    } else if (x->cg_impl != NULL) {
        opt->cuda_graph_modules &= ~(unsigned)MOE_CGM_FULL_ITERATION;
    }
    if (full_iter) {
        opt->cuda_graph_modules |= MOE_CGM_FULL_ITERATION;
    }
    return MOE_OK;
}

static enum moe_status finalize(struct parse_ctx *x)
{
    MOE_TRY(finalize_model(x));
    MOE_TRY(finalize_layout(x));
    MOE_TRY(finalize_recipe(x));
    MOE_TRY(finalize_dispatcher(x));
    MOE_TRY(finalize_recompute(x));
    return finalize_cuda_graphs(x);
}

/* ------------------------------------------------------------------------------------------ */

static bool is_flag_word(const char *s)
{
    return s[0] == '-' && s[1] == '-';
}

/* Gather a flag's values; *used gets the words consumed after argv[i]. */
static enum moe_status gather_values(struct parse_ctx *x,
                                     int argc,
                                     const char *const *argv,
                                     int i,
                                     int arity,
                                     const char *eq,
                                     struct values *v,
                                     int *used)
{
    memset(v, 0, sizeof(*v));
    *used = 0;
    if (arity == A0) {
        if (eq != NULL) {
            return flag_error(x, x->flag, i, MOE_ERR_INVALID, "%s takes no value (got '%s')",
                              x->flag, eq + 1);
        }
        if (i + 1 < argc && !is_flag_word(argv[i + 1])) {
            return flag_error(x, x->flag, i, MOE_ERR_INVALID,
                              "%s takes no value; unexpected '%s' after it", x->flag, argv[i + 1]);
        }
        return MOE_OK;
    }
    if (eq != NULL) {
        v->eq = eq + 1;
        return MOE_OK;
    }
    v->argv = argv + i + 1;
    while (i + 1 + v->count < argc && !is_flag_word(argv[i + 1 + v->count])) {
        v->count++;
        if (arity == A1) {
            break;
        }
    }
    if (arity == A1 && v->count == 0) {
        return flag_error(x, x->flag, i, MOE_ERR_INVALID, "%s needs a value", x->flag);
    }
    *used = v->count;
    return MOE_OK;
}

static enum moe_status handle_flag(struct parse_ctx *x,
                                   const struct flag_def *def,
                                   const char *arg,
                                   int name_len,
                                   const struct values *v)
{
    const char *val = (v->eq != NULL) ? v->eq : (v->count > 0 ? v->argv[0] : "");
    if (def->id == F_IGNORE) {
        add_ignored(x, arg, name_len, x->at, def->why);
        return MOE_OK;
    }
    if (def->id == F_UNSUPPORTED) {
        return flag_error(x, x->flag, x->at, MOE_ERR_UNSUPPORTED,
                          "%s is not supported: describe the placement with "
                          "--pipeline-model-parallel-layout instead",
                          x->flag);
    }
    enum moe_status st = MOE_OK;
    if (apply_simple(x, def->id, val, &st)) {
        return st;
    }
    return apply_recompute_flag(x, def->id, val, v);
}

enum moe_status moe_megatron_parse_args(int argc,
                                        const char *const *argv,
                                        struct moe_model_cfg *cfg,
                                        struct moe_layout *lay,
                                        struct moe_options *opt,
                                        struct moe_megatron_result *res,
                                        struct moe_diag *diag)
{
    memset(res, 0, sizeof(*res));
    struct parse_ctx x;
    memset(&x, 0, sizeof(x));
    x.cfg = cfg;
    x.lay = lay;
    x.opt = opt;
    x.res = res;
    x.diag = diag;
    x.argv = argv;
    x.old_layers = cfg->num_layers;
    x.old_hidden = cfg->hidden_size;
    x.old_heads = cfg->num_attention_heads;
    x.old_groups = cfg->num_query_groups;
    x.old_kv = cfg->kv_channels;
    for (int i = 0; i < argc;) {
        const char *arg = argv[i];
        x.at = i;
        if (arg == NULL || !is_flag_word(arg) || arg[2] == '\0') {
            return flag_error(&x, arg ? arg : "", i, MOE_ERR_INVALID,
                              "unexpected argument '%s': Megatron flags start with --",
                              arg ? arg : "(null)");
        }
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        char name[96];
        (void)snprintf(name, sizeof(name), "%.*s", (int)name_len, arg);
        x.flag = name;
        const struct flag_def *def = find_flag(name);
        int arity = def ? def->arity : AN;
        if (def == NULL && !is_ignored_family(name)) {
            const char *near = closest_flag(name);
            if (near != NULL) {
                return flag_error(&x, name, i, MOE_ERR_INVALID, "unknown flag %s; did you mean %s?",
                                  name, near);
            }
            return flag_error(&x, name, i, MOE_ERR_INVALID,
                              "unknown flag %s (not a Megatron-LM flag moefold knows)", name);
        }
        struct values v;
        int used = 0;
        MOE_TRY(gather_values(&x, argc, argv, i, arity, eq, &v, &used));
        if (def == NULL) {
            add_ignored(&x, arg, (int)name_len, i, WHY_PERF);
        } else {
            MOE_TRY(handle_flag(&x, def, arg, (int)name_len, &v));
        }
        i += 1 + used;
    }
    MOE_TRY(finalize(&x));
    if (diag != NULL) {
        diag->column = 0;
    }
    return MOE_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Formatting                                                                                   */

struct writer {
    char *buf;
    size_t cap, used; /* used counts every character, written or not */
    bool multiline;
};

static void w_raw(struct writer *w, const char *s)
{
    size_t n = strlen(s);
    if (w->used < w->cap) {
        size_t room = w->cap - w->used - 1;
        size_t k = n < room ? n : room;
        memcpy(w->buf + w->used, s, k);
        w->buf[w->used + k] = '\0';
    }
    w->used += n;
}

static void w_flag(struct writer *w, const char *name)
{
    if (w->used > 0) {
        w_raw(w, w->multiline ? " \\\n    " : " ");
    }
    w_raw(w, name);
}

/* A value, single-quoted when the shell would treat a character specially. */
static void w_val(struct writer *w, const char *v)
{
    w_raw(w, " ");
    bool plain = *v != '\0';
    for (const char *p = v; *p != '\0'; p++) {
        if (strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,+-:/=@%",
                   *p) == NULL) {
            plain = false;
        }
    }
    if (plain) {
        w_raw(w, v);
        return;
    }
    w_raw(w, "'");
    w_raw(w, v); /* the values written here never contain a quote */
    w_raw(w, "'");
}

static void w_int(struct writer *w, const char *name, long v)
{
    char num[32];
    (void)snprintf(num, sizeof(num), "%ld", v);
    w_flag(w, name);
    w_val(w, num);
}

/* Shortest text that reads back as exactly v. */
static void w_double(struct writer *w, const char *name, double v)
{
    char num[40];
    for (int prec = 6; prec <= 17; prec++) {
        (void)snprintf(num, sizeof(num), "%.*g", prec, v);
        if (strtod(num, NULL) == v) {
            break;
        }
    }
    w_flag(w, name);
    w_val(w, num);
}

static void w_str(struct writer *w, const char *name, const char *v)
{
    w_flag(w, name);
    w_val(w, v);
}

static void w_bool(struct writer *w, const char *name, bool on)
{
    if (on) {
        w_flag(w, name);
    }
}

static void w_modules(struct writer *w, const char *name, enum moe_module_set set, unsigned bits)
{
    w_flag(w, name);
    for (unsigned b = 0; b < 16; b++) {
        const char *m = (bits & (1u << b)) ? moe_module_name(set, 1u << b) : NULL;
        if (m != NULL) {
            w_val(w, m);
        }
    }
}

/* Append "[v]*n" runs of bits[from, from+count) joined by '+' to out. */
static void pattern_runs(const uint8_t *bits, int count, char *out, size_t len)
{
    size_t used = strlen(out);
    for (int i = 0; i < count;) {
        int j = i;
        while (j < count && bits[j] == bits[i]) {
            j++;
        }
        int w = (j - i == 1)
                    ? snprintf(out + used, len - used, "%s[%d]", i ? "+" : "", bits[i])
                    : snprintf(out + used, len - used, "%s[%d]*%d", i ? "+" : "", bits[i], j - i);
        used += (w > 0 && (size_t)w < len - used) ? (size_t)w : 0;
        i = j;
    }
}

/*
 * Text for a layer pattern bits[n]: an int N when the int rule reproduces it (MoE: i % N == 0;
 * window: (i+1) % N != 0), else the shortest periodic list expression.
 */
static void pattern_text(const uint8_t *bits, int n, bool window_rule, char *out, size_t len)
{
    for (int f = 1; f <= n; f++) {
        bool ok = true;
        for (int i = 0; i < n && ok; i++) {
            uint8_t want = window_rule ? (uint8_t)((i + 1) % f != 0) : (uint8_t)(i % f == 0);
            ok = bits[i] == want;
        }
        if (ok) {
            (void)snprintf(out, len, "%d", f);
            return;
        }
    }
    int period = n;
    for (int p = 1; p < n; p++) {
        bool ok = n % p == 0;
        for (int i = p; i < n && ok; i++) {
            ok = bits[i] == bits[i % p];
        }
        if (ok) {
            period = p;
            break;
        }
    }
    (void)snprintf(out, len, "(");
    pattern_runs(bits, period, out, len);
    size_t used = strlen(out);
    if (n / period > 1) {
        (void)snprintf(out + used, len - used, ")*%d", n / period);
    } else {
        (void)snprintf(out + used, len - used, ")");
    }
}

static void
format_model(struct writer *w, const struct moe_model_cfg *c, const struct moe_layout *lay)
{
    w_int(w, "--num-layers", c->num_layers);
    w_int(w, "--hidden-size", c->hidden_size);
    if (c->ffn_hidden_size > 0) {
        w_int(w, "--ffn-hidden-size", c->ffn_hidden_size);
    }
    w_int(w, "--num-attention-heads", c->num_attention_heads);
    if (c->num_query_groups > 0 && c->num_query_groups != c->num_attention_heads) {
        w_flag(w, "--group-query-attention");
        w_int(w, "--num-query-groups", c->num_query_groups);
    }
    if (c->kv_channels > 0) {
        w_int(w, "--kv-channels", c->kv_channels);
    }
    w_bool(w, "--swiglu", c->is_swiglu);
    w_bool(w, "--untie-embeddings-and-output-weights", c->is_untied_embeddings);
    w_bool(w, "--qk-layernorm", c->has_qk_layernorm);
    w_int(w, "--vocab-size", c->vocab_size);
    w_int(w, "--make-vocab-size-divisible-by", c->make_vocab_size_divisible_by);
    w_int(w, "--seq-length", lay->seq_length > 0 ? lay->seq_length : c->seq_length);
    if (c->is_mla) {
        w_flag(w, "--multi-latent-attention");
        if (c->q_lora_rank > 0) {
            w_int(w, "--q-lora-rank", c->q_lora_rank);
        }
        w_int(w, "--kv-lora-rank", c->kv_lora_rank);
        w_int(w, "--qk-head-dim", c->qk_head_dim);
        w_int(w, "--qk-pos-emb-head-dim", c->qk_pos_emb_head_dim);
        w_int(w, "--v-head-dim", c->v_head_dim);
    }
    int n = c->num_layers < MOE_MAX_LAYERS ? c->num_layers : MOE_MAX_LAYERS;
    uint8_t bits[MOE_MAX_LAYERS];
    char text[2048];
    int num_windowed = 0;
    for (int i = 0; i < n; i++) {
        bits[i] = (c->layer_flags[i] & MOE_LAYER_WINDOWED) != 0;
        num_windowed += bits[i];
    }
    if (c->window_size > 0 && num_windowed > 0) {
        char ws[40];
        (void)snprintf(ws, sizeof(ws), "(%d,0)", c->window_size);
        w_str(w, "--window-size", ws);
        if (num_windowed < n) { /* without a skip pattern every layer is windowed */
            pattern_text(bits, n, true, text, sizeof(text));
            w_str(w, "--window-attn-skip-freq", text);
        }
    }
    if (c->num_experts > 0) {
        w_int(w, "--num-experts", c->num_experts);
        w_int(w, "--moe-ffn-hidden-size", c->moe_ffn_hidden_size);
        w_int(w, "--moe-router-topk", c->moe_router_topk);
        for (int i = 0; i < n; i++) {
            bits[i] = (c->layer_flags[i] & MOE_LAYER_MOE) != 0;
        }
        pattern_text(bits, n, false, text, sizeof(text));
        w_str(w, "--moe-layer-freq", text);
        if (c->moe_shared_expert_intermediate_size > 0) {
            w_int(w, "--moe-shared-expert-intermediate-size",
                  c->moe_shared_expert_intermediate_size);
        }
        w_str(w, "--moe-router-score-function",
              c->router_score == MOE_ROUTER_SIGMOID ? "sigmoid" : "softmax");
        w_bool(w, "--moe-router-enable-expert-bias", c->has_router_expert_bias);
        if (c->moe_router_num_groups > 0) {
            w_int(w, "--moe-router-num-groups", c->moe_router_num_groups);
        }
        if (c->moe_router_group_topk > 0) {
            w_int(w, "--moe-router-group-topk", c->moe_router_group_topk);
        }
    }
    if (c->mtp_num_layers > 0) {
        w_int(w, "--mtp-num-layers", c->mtp_num_layers);
    }
}

static void format_layout(struct writer *w, const struct moe_layout *l)
{
    w_int(w, "--tensor-model-parallel-size", l->tp);
    w_int(w, "--pipeline-model-parallel-size", l->pp);
    if (l->has_custom_pp_layout && l->num_chunks > 0) {
        char text[MOE_MAX_PP_CHUNKS * 24];
        moe_layout_format_pp_string(l, text, (int)sizeof(text));
        w_str(w, "--pipeline-model-parallel-layout", text);
    } else {
        if (l->vpp > 1) {
            w_int(w, "--num-virtual-stages-per-pipeline-rank", l->vpp);
        }
        if (l->first_stage_layers > 0) {
            w_int(w, "--decoder-first-pipeline-num-layers", l->first_stage_layers);
        }
        if (l->last_stage_layers > 0) {
            w_int(w, "--decoder-last-pipeline-num-layers", l->last_stage_layers);
        }
    }
    w_int(w, "--context-parallel-size", l->cp);
    w_int(w, "--expert-model-parallel-size", l->ep);
    w_int(w, "--expert-tensor-parallel-size", l->etp);
    w_bool(w, "--sequence-parallel", l->sequence_parallel);
    w_int(w, "--micro-batch-size", l->mbs);
    if (l->gbs > 0) {
        w_int(w, "--global-batch-size", l->gbs);
    }
}

static void format_precision(struct writer *w, const struct moe_options *o)
{
    static const char *const fp8_recipes[] = {"", "tensorwise", "delayed", "blockwise", "mxfp8"};
    w_flag(w, "--bf16");
    if (o->recipe == MOE_RECIPE_NVFP4) {
        w_str(w, "--fp4-format", "e2m1");
        w_str(w, "--fp4-recipe", "nvfp4");
        w_bool(w, "--fp4-param-gather", o->fp8_param_gather);
    } else if (o->recipe > MOE_RECIPE_BF16 && o->recipe <= MOE_RECIPE_MXFP8) {
        w_str(w, "--fp8-format", "e4m3");
        w_str(w, "--fp8-recipe", fp8_recipes[o->recipe]);
        w_bool(w, "--fp8-param-gather", o->fp8_param_gather);
    } else {
        w_bool(w, "--fp8-param-gather", o->fp8_param_gather); /* invalid, kept for fidelity */
    }
    w_bool(w, "--use-distributed-optimizer", o->use_distributed_optimizer);
    w_bool(w, "--overlap-grad-reduce", o->overlap_grad_reduce);
    w_bool(w, "--overlap-param-gather", o->overlap_param_gather);
    w_bool(w, "--use-precision-aware-optimizer", o->precision_aware_optimizer);
    if (o->main_grads_dtype != MOE_DTYPE_FP32) {
        w_str(w, "--main-grads-dtype", moe_dtype_name(o->main_grads_dtype));
    }
    if (o->exp_avg_dtype != MOE_DTYPE_FP32) {
        w_str(w, "--exp-avg-dtype", moe_dtype_name(o->exp_avg_dtype));
    }
    if (o->exp_avg_sq_dtype != MOE_DTYPE_FP32) {
        w_str(w, "--exp-avg-sq-dtype", moe_dtype_name(o->exp_avg_sq_dtype));
    }
    w_bool(w, "--optimizer-cpu-offload", o->optimizer_cpu_offload);
    if (o->optimizer_cpu_offload || o->optimizer_offload_fraction != 1.0) {
        w_double(w, "--optimizer-offload-fraction", o->optimizer_offload_fraction);
    }
}

static void
format_options(struct writer *w, const struct moe_model_cfg *c, const struct moe_options *o)
{
    format_precision(w, o);
    w_bool(w, "--tp-comm-overlap", o->tp_comm_overlap);
    if (c->num_experts > 0 || o->dispatcher != MOE_DISPATCH_ALLTOALL) {
        static const char *const types[] = {"alltoall", "allgather", "flex", "flex"};
        w_str(w, "--moe-token-dispatcher-type", types[o->dispatcher & 3]);
        if (o->dispatcher == MOE_DISPATCH_DEEPEP || o->dispatcher == MOE_DISPATCH_HYBRIDEP) {
            w_str(w, "--moe-flex-dispatcher-backend", moe_dispatcher_name(o->dispatcher));
        }
    }
    w_bool(w, "--moe-grouped-gemm", o->moe_grouped_gemm);
    w_bool(w, "--moe-router-force-load-balancing", o->force_load_balancing);
    if (o->capacity_factor > 0.0) {
        w_double(w, "--moe-expert-capacity-factor", o->capacity_factor);
    }
    w_bool(w, "--overlap-moe-expert-parallel-comm", o->overlap_moe_ep_comm);
    w_bool(w, "--delay-wgrad-compute", o->delay_wgrad_compute);
    if (o->recompute == MOE_RECOMPUTE_SELECTIVE) {
        w_str(w, "--recompute-granularity", "selective");
        w_modules(w, "--recompute-modules", MOE_MODSET_RECOMPUTE, o->recompute_modules);
    } else if (o->recompute == MOE_RECOMPUTE_FULL) {
        w_str(w, "--recompute-granularity", "full");
        w_str(w, "--recompute-method", moe_recompute_method_name(o->recompute_method));
        w_int(w, "--recompute-num-layers", o->recompute_num_layers);
    }
    if (o->cpu_offloading_num_layers > 0) {
        w_int(w, "--cpu-offloading-num-layers", o->cpu_offloading_num_layers);
    }
    if (o->fine_grained_offload) {
        w_flag(w, "--fine-grained-activation-offloading");
        w_modules(w, "--offload-modules", MOE_MODSET_OFFLOAD, o->offload_modules);
    }
    if (o->cuda_graph_modules & MOE_CGM_FULL_ITERATION) {
        w_str(w, "--cuda-graph-impl", "full_iteration");
    } else if (o->cuda_graph_impl != MOE_CG_NONE) {
        w_str(w, "--cuda-graph-impl", moe_cuda_graph_impl_name(o->cuda_graph_impl));
        if (o->cuda_graph_modules != 0) {
            w_modules(w, "--cuda-graph-modules", MOE_MODSET_CUDA_GRAPH, o->cuda_graph_modules);
        }
    }
}

enum moe_status moe_megatron_format_args(const struct moe_model_cfg *cfg,
                                         const struct moe_layout *lay,
                                         const struct moe_options *opt,
                                         unsigned flags,
                                         char *buf,
                                         size_t len,
                                         size_t *needed,
                                         struct moe_diag *diag)
{
    struct writer w = {
        .buf = buf, .cap = len, .multiline = (flags & MOE_MEGATRON_FMT_MULTILINE) != 0};
    if (buf != NULL && len > 0) {
        buf[0] = '\0';
    } else {
        w.cap = 0;
    }
    format_model(&w, cfg, lay);
    format_layout(&w, lay);
    format_options(&w, cfg, opt);
    if (flags & MOE_MEGATRON_FMT_MOEFOLD) {
        if (opt->moe_imbalance == 0.0) {
            w_str(&w, "--moe-imbalance", "auto");
        } else if (opt->moe_imbalance != 1.0) {
            w_double(&w, "--moe-imbalance", opt->moe_imbalance);
        }
        if (opt->moe_hot_expert_replicas > 0) {
            w_int(&w, "--moe-hot-expert-replicas", opt->moe_hot_expert_replicas);
        }
    }
    if (needed != NULL) {
        *needed = w.used;
    }
    if (w.used >= len) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "Megatron command line needs %zu bytes, buffer has %zu", w.used + 1,
                            len);
    }
    return MOE_OK;
}

/* ------------------------------------------------------------------------------------------ */

enum moe_status moe_megatron_split_line(
    char *line, const char **argv, int max_argv, int *argc, struct moe_diag *diag)
{
    int n = 0;
    char *r = line, *wp = line;
    *argc = 0;
    while (*r != '\0') {
        while (*r == ' ' || *r == '\t' || *r == '\n' || *r == '\r' ||
               (r[0] == '\\' && r[1] == '\n')) {
            r += (r[0] == '\\') ? 2 : 1;
        }
        if (*r == '\0') {
            break;
        }
        if (n >= max_argv) {
            return moe_diag_set(diag, MOE_ERR_INVALID, "more than %d words on the command line",
                                max_argv);
        }
        argv[n++] = wp;
        while (*r != '\0' && *r != ' ' && *r != '\t' && *r != '\n' && *r != '\r') {
            if (*r == '\'') {
                char *close = strchr(r + 1, '\'');
                if (close == NULL) {
                    return moe_diag_set(diag, MOE_ERR_PARSE, "unterminated ' quote");
                }
                size_t k = (size_t)(close - r - 1);
                memmove(wp, r + 1, k);
                wp += k;
                r = close + 1;
            } else if (*r == '"') {
                r++;
                while (*r != '"') {
                    if (*r == '\0') {
                        return moe_diag_set(diag, MOE_ERR_PARSE, "unterminated \" quote");
                    }
                    if (r[0] == '\\' && r[1] != '\0' && strchr("\"\\$`", r[1]) != NULL) {
                        r++;
                    }
                    *wp++ = *r++;
                }
                r++;
            } else if (r[0] == '\\' && r[1] == '\n') {
                r += 2;
            } else if (r[0] == '\\' && r[1] != '\0') {
                *wp++ = r[1];
                r += 2;
            } else {
                *wp++ = *r++;
            }
        }
        bool at_end = (*r == '\0');
        *wp++ = '\0'; /* never overtakes r: quotes and escapes only shrink the text */
        if (!at_end) {
            r++;
        }
    }
    *argc = n;
    return MOE_OK;
}
