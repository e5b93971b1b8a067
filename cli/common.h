/*
 * Shared command-line handling for `moefold predict`, `plan` and `whatif`: one "problem" (model,
 * cluster, GPU count, layout, options) from moefold's own flags plus any Megatron-LM flags, and the
 * helpers that print a prediction. Subcommands add their own flags through a callback, so that one
 * command line can mix them freely:
 *
 *   moefold predict --model deepseek-v3 --cluster dgx-h100 --gpus 1024 \
 *       --tensor-model-parallel-size 2 --pipeline-model-parallel-size 8 ...
 */
#ifndef MOE_CLI_COMMON_H
#define MOE_CLI_COMMON_H

#include "model/cluster.h"
#include "model/config.h"
#include "model/cost.h"
#include "model/layout.h"
#include "model/megatron_args.h"
#include "model/status.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_CLI_MAX_MEGATRON_ARGS 512

struct moe_cli_problem {
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    struct moe_megatron_result mres; /* which Megatron flags were given; ignored flags */
    char model_source[256];          /* preset name, model file, or "megatron flags" */
    char cluster_name[256];          /* as given (name or path) */
    int num_gpus;                    /* --gpus, 0 when not given */
    bool has_model;                  /* --model, --model-config or Megatron shape flags given */
    bool has_cluster;
    bool json;           /* --json */
    double imbalance_cv; /* --moe-imbalance-cv for auto (default in imbalance.h) */
};

/*
 * A subcommand's own flags. Called for every argument moefold's common parser does not own, with
 * i its index; returns how many arguments it consumed (0 = not mine, which passes the argument on
 * to the Megatron parser), or -1 after filling diag on a bad value.
 */
typedef int (*moe_cli_flag_fn)(void *ctx, int argc, char **argv, int i, struct moe_diag *diag);

/*
 * Parse argv[1..argc) (argv[0] is the subcommand name) into p. Applies, in order: --model preset or
 * --model-config file (HF config.json or moefold's own), then every Megatron flag on top, then
 * loads --cluster. Does not resolve the layout (callers differ: predict resolves one layout, plan
 * searches); requires nothing to be present (callers check). Prints the one-line notes for
 * ignored Megatron flags to `notes` (may be NULL). Errors name the flag or file.
 */
MOE_NODISCARD enum moe_status moe_cli_parse_problem(int argc,
                                                    char **argv,
                                                    moe_cli_flag_fn extra,
                                                    void *ctx,
                                                    struct moe_cli_problem *p,
                                                    FILE *notes,
                                                    struct moe_diag *diag);

/* Help text for the common flags (model, cluster, GPUs, Megatron flag groups). */
void moe_cli_print_common_help(FILE *out);

/*
 * Check model, cluster and GPU count, set lay.num_gpus and lay.seq_length (from the model unless
 * --seq-length was given) and resolve the layout with every validity rule.
 */
MOE_NODISCARD enum moe_status moe_cli_resolve(struct moe_cli_problem *p, struct moe_diag *diag);

/*
 * Expert-load statistics for the problem's layout when --moe-imbalance auto was given (Monte
 * Carlo); returns false (and leaves *out untouched) when not applicable.
 */
MOE_NODISCARD enum moe_status moe_cli_load_stats(const struct moe_cli_problem *p,
                                                 struct moe_load_stats *out,
                                                 bool *used,
                                                 struct moe_diag *diag);

struct moe_plan_cli_opts;
struct moe_plan_request;
struct moe_plan_load_cache;

/*
 * The planner's request for problem p under the search options o (moe_plan_request_init, then
 * moe_plan_cli_request). With --moe-imbalance auto on an MoE model, the searched layouts get
 * their expert-load statistics as `moefold predict` computes them, through a load cache over a
 * scratch copy of p: *lc and *scratch (else NULL) are the caller's to release with
 * moe_plan_load_cache_destroy and free, on failure too. The memory cap is the capacity less the
 * memory margin (o->memory_margin, or the cluster profile's default; *margin_used, may be NULL,
 * gets it).
 */
MOE_NODISCARD enum moe_status moe_cli_plan_request(const struct moe_cli_problem *p,
                                                   const struct moe_plan_cli_opts *o,
                                                   struct moe_plan_request *req,
                                                   struct moe_plan_load_cache **lc,
                                                   struct moe_cli_problem **scratch,
                                                   double *margin_used,
                                                   struct moe_diag *diag);

/* Predict with the event-simulated schedule (allocates the workspace). */
MOE_NODISCARD enum moe_status moe_cli_run_predict(const struct moe_cli_problem *p,
                                                  const struct moe_load_stats *load,
                                                  struct moe_prediction *out,
                                                  struct moe_diag *diag);

/* The predicted timeline of the problem (moe_cost_timeline) in heap memory the caller frees:
 * *events [*num], *stage_phase_s [pp * MOE_NUM_PHASES]; pred as moe_cli_run_predict gives it. */
MOE_NODISCARD enum moe_status moe_cli_run_timeline(const struct moe_cli_problem *p,
                                                   const struct moe_load_stats *load,
                                                   struct moe_tl_event **events,
                                                   size_t *num,
                                                   double **stage_phase_s,
                                                   struct moe_prediction *pred,
                                                   struct moe_diag *diag);

/* The prediction as predict --json prints it (the same names run.json uses). */
cJSON *moe_cli_prediction_json(const struct moe_cli_problem *p, const struct moe_prediction *pred);

/* Write the problem's plan (model, cluster name, layout, options) with pred as its prediction. */
MOE_NODISCARD enum moe_status moe_cli_emit_plan(const struct moe_cli_problem *p,
                                                const struct moe_prediction *pred,
                                                const char *path,
                                                struct moe_diag *diag);

/* One-line layout summary: "TP2 CP1 PP8 VPP4 EP64 ETP1 EDP2 DP64 MBS1 GBS8192 (m=128)". */
void moe_cli_layout_str(const struct moe_layout *lay, char *buf, size_t len);

/* Print "moefold <cmd>: <message>" (with the source when not already named) to stderr. */
void moe_cli_error(const char *cmd, const struct moe_diag *diag);

#ifdef __cplusplus
}
#endif

#endif /* MOE_CLI_COMMON_H */
