/*
 * Megatron-LM command lines, both ways: parse a Megatron argv (the performance-relevant part of a
 * launch line, `--flag value` and `--flag=value`) into moefold's model, layout and options
 * structs, and format those structs back as a Megatron command line that parses to the same
 * structs. Flag names, value sets and defaults follow megatron/training/arguments.py (main,
 * 2025-26); moefold's own --moe-imbalance and --moe-hot-expert-replicas are accepted too.
 *
 * Flags are applied on top of what the caller put in the structs (a preset, a plan), so they
 * override it. Flags that do not change performance (learning rate, paths, logging, ...) are
 * accepted and listed back as ignored, with a reason, for the caller to print; an unknown flag is
 * MOE_ERR_INVALID naming it and the closest known flag. Nothing here prints or allocates: results
 * go to caller structs, ignored flags point into argv or into static text.
 *
 * This module does not check the combination (moe_layout_resolve does, with every Megatron rule)
 * nor the architecture alone (moe_cfg_validate).
 */
#ifndef MOE_MODEL_MEGATRON_ARGS_H
#define MOE_MODEL_MEGATRON_ARGS_H

#include "model/config.h"
#include "model/layout.h"
#include "model/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Fields a command line can set; moe_megatron_is_set tells which were given explicitly. */
enum moe_megatron_field {
    /* model shape (struct moe_model_cfg) */
    MOE_MF_NUM_LAYERS,
    MOE_MF_HIDDEN_SIZE,
    MOE_MF_FFN_HIDDEN_SIZE,
    MOE_MF_NUM_ATTENTION_HEADS,
    MOE_MF_NUM_QUERY_GROUPS, /* --group-query-attention / --num-query-groups */
    MOE_MF_KV_CHANNELS,
    MOE_MF_SWIGLU,
    MOE_MF_UNTIE_EMBEDDINGS,
    MOE_MF_QK_LAYERNORM,
    MOE_MF_QUICK_GEGLU,
    MOE_MF_VOCAB_SIZE,
    MOE_MF_VOCAB_DIVISOR,
    MOE_MF_SEQ_LENGTH, /* sets both the model's and the layout's sequence length */
    MOE_MF_MLA,
    MOE_MF_Q_LORA_RANK,
    MOE_MF_KV_LORA_RANK,
    MOE_MF_QK_HEAD_DIM,
    MOE_MF_QK_POS_EMB_HEAD_DIM,
    MOE_MF_V_HEAD_DIM,
    MOE_MF_WINDOW, /* --window-size / --window-attn-skip-freq */
    MOE_MF_NUM_EXPERTS,
    MOE_MF_MOE_FFN_HIDDEN_SIZE,
    MOE_MF_MOE_ROUTER_TOPK,
    MOE_MF_MOE_LAYER_FREQ,
    MOE_MF_SHARED_EXPERT_SIZE,
    MOE_MF_ROUTER_SCORE,
    MOE_MF_ROUTER_EXPERT_BIAS,
    MOE_MF_ROUTER_NUM_GROUPS,
    MOE_MF_ROUTER_GROUP_TOPK,
    MOE_MF_MTP_NUM_LAYERS,
    /* layout (struct moe_layout) */
    MOE_MF_TP,
    MOE_MF_PP,
    MOE_MF_VPP, /* either VPP flag, or derived from a layout string */
    MOE_MF_PP_LAYOUT,
    MOE_MF_FIRST_STAGE_LAYERS,
    MOE_MF_LAST_STAGE_LAYERS,
    MOE_MF_CP,
    MOE_MF_EP,
    MOE_MF_ETP,
    MOE_MF_SEQUENCE_PARALLEL,
    MOE_MF_MBS,
    MOE_MF_GBS,
    /* options (struct moe_options) */
    MOE_MF_RECIPE,
    MOE_MF_FP8_PARAM_GATHER,
    MOE_MF_DISTRIBUTED_OPTIMIZER,
    MOE_MF_OVERLAP_GRAD_REDUCE,
    MOE_MF_OVERLAP_PARAM_GATHER,
    MOE_MF_TP_COMM_OVERLAP,
    MOE_MF_OVERLAP_MOE_EP_COMM,
    MOE_MF_DELAY_WGRAD,
    MOE_MF_GROUPED_GEMM,
    MOE_MF_FORCE_LOAD_BALANCING,
    MOE_MF_CAPACITY_FACTOR,
    MOE_MF_LOAD_BALANCING, /* either load-balancing flag */
    MOE_MF_DISPATCHER,
    MOE_MF_PRECISION_AWARE_OPTIMIZER,
    MOE_MF_OPTIMIZER_CPU_OFFLOAD,
    MOE_MF_OPTIMIZER_OFFLOAD_FRACTION,
    MOE_MF_MAIN_GRADS_DTYPE,
    MOE_MF_EXP_AVG_DTYPE,
    MOE_MF_EXP_AVG_SQ_DTYPE,
    MOE_MF_RECOMPUTE,
    MOE_MF_RECOMPUTE_METHOD,
    MOE_MF_RECOMPUTE_NUM_LAYERS,
    MOE_MF_RECOMPUTE_MODULES,
    MOE_MF_CPU_OFFLOADING_NUM_LAYERS,
    MOE_MF_FINE_GRAINED_OFFLOAD,
    MOE_MF_OFFLOAD_MODULES,
    MOE_MF_CUDA_GRAPH_IMPL,
    MOE_MF_CUDA_GRAPH_MODULES,
    MOE_MF_MOE_IMBALANCE,
    MOE_MF_HOT_EXPERT_REPLICAS,
    MOE_MF_COUNT,
};

#define MOE_MEGATRON_MAX_IGNORED 64

/* One flag accepted without effect. */
struct moe_megatron_ignored {
    const char *flag;   /* the flag as written in argv (not NUL-terminated at flag_len) */
    int flag_len;       /* characters of the flag name, "=value" excluded */
    int argv_idx;       /* index in argv */
    const char *reason; /* static text, e.g. "does not affect performance" */
};

struct moe_megatron_result {
    uint64_t set[(MOE_MF_COUNT + 63) / 64]; /* bit f: field f was given on the command line */
    int num_ignored;                        /* entries in ignored[] */
    int num_ignored_dropped;                /* ignored flags beyond MOE_MEGATRON_MAX_IGNORED */
    struct moe_megatron_ignored ignored[MOE_MEGATRON_MAX_IGNORED];
};

/* True when field f was given explicitly (the planner keeps such layout choices fixed). */
bool moe_megatron_is_set(const struct moe_megatron_result *res, enum moe_megatron_field f);

/*
 * Parse argv[argc] (flags only: no program name) onto cfg, lay and opt, which hold the starting
 * values (zeroed by moe_cfg_init / moe_layout_init / moe_options_init, or a preset). res is
 * cleared and filled. After the last flag, Megatron's defaults fill what is still unset (kv
 * channels = hidden/heads, ffn = 4h or the SwiGLU rule, expert ffn = ffn, top-k 2, MLA ranks,
 * etp = tp when only tp was given, selective recompute of core_attn); the layer pattern is
 * rebuilt from --moe-layer-freq (an int N, or a list expression such as "([0]*3+[1]*58)" or
 * "[1,0,1,0]" whose length must equal --num-layers); a --pipeline-model-parallel-layout string is
 * parsed into lay->chunks with vpp = its chunks / pp.
 *
 * Errors (diag->source names the flag, diag->column is its 1-based argv index):
 * MOE_ERR_INVALID for an unknown flag (with the closest known one), a missing or extra value, a
 * value out of range or not in the flag's choices, or flags Megatron refuses together;
 * MOE_ERR_PARSE for a malformed list expression or layout string; MOE_ERR_UNSUPPORTED for
 * Megatron options moefold cannot price (custom quantisation recipes, embedding/loss counted as
 * pipeline layers).
 */
MOE_NODISCARD enum moe_status moe_megatron_parse_args(int argc,
                                                      const char *const *argv,
                                                      struct moe_model_cfg *cfg,
                                                      struct moe_layout *lay,
                                                      struct moe_options *opt,
                                                      struct moe_megatron_result *res,
                                                      struct moe_diag *diag);

/* Output choices for moe_megatron_format_args. */
enum {
    MOE_MEGATRON_FMT_MOEFOLD = 1u << 0,   /* add --moe-imbalance / --moe-hot-expert-replicas */
    MOE_MEGATRON_FMT_MULTILINE = 1u << 1, /* one flag per line, joined by " \\\n    " */
};

/*
 * Write cfg + lay + opt as a Megatron command line into buf[len] (NUL-terminated). Values with
 * shell characters are single-quoted ('([0]*3+[1]*58)'). Every field the parser reads is written
 * (booleans only when true), so splitting the text (moe_megatron_split_line) and parsing it onto
 * freshly initialised structs gives back the same model (name and bias flag aside), layout and
 * options. *needed (may be NULL) gets the length required without the NUL. MOE_ERR_INVALID when
 * buf is too small (the text is then truncated).
 */
MOE_NODISCARD enum moe_status moe_megatron_format_args(const struct moe_model_cfg *cfg,
                                                       const struct moe_layout *lay,
                                                       const struct moe_options *opt,
                                                       unsigned flags,
                                                       char *buf,
                                                       size_t len,
                                                       size_t *needed,
                                                       struct moe_diag *diag);

/*
 * Split a pasted command line in place into words, as a POSIX shell would for plain arguments:
 * whitespace separates, '...' is literal, "..." honours \" \\ \$ \`, a backslash escapes the
 * next character and backslash-newline joins lines. argv[max_argv] receives pointers into line;
 * *argc their number. MOE_ERR_PARSE on an unterminated quote, MOE_ERR_INVALID past max_argv.
 */
MOE_NODISCARD enum moe_status moe_megatron_split_line(
    char *line, const char **argv, int max_argv, int *argc, struct moe_diag *diag);

/*
 * Whether name ("--flag", no "=value") is a flag the parser knows, handled or ignored; *arity (may
 * be NULL) gets 0 (no value), 1 (one value) or -1 (a list of values, or unknown count).
 */
bool moe_megatron_flag_known(const char *name, int *arity);

/*
 * Whether name is a flag the parser reads into the structs (or refuses as unpriceable): false for
 * the flags it accepts and ignores (learning rate, logging, ...) and for unknown names.
 */
bool moe_megatron_flag_priced(const char *name);

#ifdef __cplusplus
}
#endif

#endif /* MOE_MODEL_MEGATRON_ARGS_H */
