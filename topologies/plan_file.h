/*
 * Plan files ("format": "moefold-plan", version 1): the one format the planner and the engine
 * share. The planner writes the model, the cluster name, the GPU count, the resolved layout, the
 * options, the prediction it chose the plan with and the equivalent Megatron-LM flags;
 * `moefold-train --plan plan.json` reads it back and re-resolves the layout, so every Megatron
 * validity rule is checked again and the pipeline chunks are rebuilt.
 *
 *   {"format": "moefold-plan", "version": 1,
 *    "model": {<moefold-model object, topologies/model_file.h>},
 *    "cluster": "dgx-h100", "num_gpus": 64,
 *    "layout": {"tp", "cp", "dp", "pp", "vpp", "ep", "etp", "edp", "mbs", "gbs",
 *               "num_microbatches", "seq_length", "sequence_parallel", "first_stage_layers",
 *               "last_stage_layers", "pipeline_layout": "Et|(tt|)*30mL",
 *               "custom_pipeline_layout": false},
 *    "options": {every struct moe_options field; enums by name, module sets as name lists,
 *                "moe_imbalance": number or "auto"},
 *    "prediction": {free-form: kept as it is, never interpreted here},
 *    "megatron_args": "--num-layers 61 ..."}
 *
 * Keys are strict (an unknown key is an error naming it) everywhere except inside "prediction".
 * Derived layout values (dp, edp, num_microbatches, and pipeline_layout unless custom) must agree
 * with what resolution derives, so a hand-edited plan cannot silently disagree with itself.
 */
#ifndef MOE_TOPOLOGIES_PLAN_FILE_H
#define MOE_TOPOLOGIES_PLAN_FILE_H

#include "model/cluster.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/status.h"

#include <cjson/cJSON.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_PLAN_FILE_FORMAT  "moefold-plan"
#define MOE_PLAN_FILE_VERSION 1
#define MOE_PLAN_ARGS_LEN     8192 /* bytes for the Megatron command line */

struct moe_plan {
    struct moe_model_cfg model;
    char cluster[MOE_NAME_LEN]; /* cluster name or file it was planned for */
    struct moe_layout layout;   /* resolved (num_gpus, dp, edp, chunks, ...) */
    struct moe_options options;
    char megatron_args[MOE_PLAN_ARGS_LEN]; /* Megatron-LM flags; "" = generate when writing */
};

/* Zero the plan and set moe_cfg_init / moe_layout_init / moe_options_init defaults. */
void moe_plan_init(struct moe_plan *plan);

/*
 * Build the plan's JSON. plan->layout must be resolved (num_chunks > 0). prediction (may be NULL:
 * the key is left out) is deep-copied. An empty megatron_args is generated with
 * moe_megatron_format_args. Caller owns the result; NULL when out of memory or the layout is not
 * resolved.
 */
cJSON *moe_plan_to_json(const struct moe_plan *plan, const cJSON *prediction);

/* A plan's "options" object alone (run.json's "ran" uses it); NULL on allocation failure. */
cJSON *moe_plan_options_to_json(const struct moe_options *opt);
/* Read an "options" object (src names it in messages; every key optional, unknown keys are
 * errors); *opt starts from moe_options_init. MOE_ERR_INVALID when absent or malformed. */
MOE_NODISCARD enum moe_status moe_plan_options_from_json(const cJSON *o,
                                                         const char *src,
                                                         struct moe_options *opt,
                                                         struct moe_diag *diag);

/*
 * Read a plan from a parsed tree (source names it in messages) into *plan and resolve its layout
 * again with moe_layout_resolve (cl may be NULL: hardware rules are then skipped). *prediction
 * (when prediction is non-NULL) receives a deep copy of "prediction", or NULL if absent; the
 * caller cJSON_Deletes it. Errors name the key: MOE_ERR_PARSE (unknown key, wrong format or
 * version), MOE_ERR_INVALID (wrong type, out of range, unknown enum name, derived value that
 * disagrees), or the status moe_layout_resolve returns for a layout that breaks a rule.
 */
MOE_NODISCARD enum moe_status moe_plan_from_json(const cJSON *root,
                                                 const char *source,
                                                 const struct moe_cluster *cl,
                                                 struct moe_plan *plan,
                                                 cJSON **prediction,
                                                 struct moe_diag *diag);

/* Write plan (+ prediction, may be NULL) to path atomically (see moe_json_write_file). */
MOE_NODISCARD enum moe_status moe_plan_write(const char *path,
                                             const struct moe_plan *plan,
                                             const cJSON *prediction,
                                             struct moe_diag *diag);

/* Read and resolve a plan file; see moe_plan_from_json. MOE_ERR_IO if it cannot be read. */
MOE_NODISCARD enum moe_status moe_plan_read(const char *path,
                                            const struct moe_cluster *cl,
                                            struct moe_plan *plan,
                                            cJSON **prediction,
                                            struct moe_diag *diag);

#ifdef __cplusplus
}
#endif

#endif /* MOE_TOPOLOGIES_PLAN_FILE_H */
