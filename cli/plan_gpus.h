/*
 * `moefold plan --gpus-max N`: the GPU count searched too. For a fixed count every objective
 * (time, GPU-hours, cost, energy) orders plans as the step time does (all of them are the step
 * time times a per-count constant, up to the batch ramp), so the planner's search runs unchanged
 * once per count and only the best run among its MOE_PLAN_GPUS_TOP fastest plans (those that can
 * run the batch ramp) is compared across counts:
 *
 *   counts: gpus_min, gpus_min + step, ..., <= gpus_max (step: the cluster's GPUs per node unless
 *           --gpus-step), searched largest first;
 *   skipped without a search: counts whose run cannot meet --deadline-days even with every GPU at
 *           its fastest dense peak on the model's FLOPs (days >= tokens x FLOP/token / (n x peak),
 *           an exact bound once one count has given the model's FLOPs per token);
 *   best:   the count whose best plan minimises the objective among those within the deadline
 *           (ties: fewer GPU-hours, then fewer GPUs).
 *
 * The full plan output (top-k, Pareto front, plans out) is then produced for the best count by
 * cmd_plan.c.
 */
#ifndef MOE_CLI_PLAN_GPUS_H
#define MOE_CLI_PLAN_GPUS_H

#include "cli/common.h"
#include "cli/train_cost.h"
#include "planner/cliopt.h"
#include "planner/search.h"
#include "topologies/cluster_costs.h"

#include <cjson/cJSON.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_PLAN_GPUS_MAX_COUNTS 256 /* GPU counts one sweep searches at most */
#define MOE_PLAN_GPUS_TOP        5   /* plans per count whose runs are compared */

enum moe_plan_gpus_state {
    MOE_PG_SEARCHED = 0, /* a plan fits: best and totals hold it */
    MOE_PG_NO_FIT,       /* nothing fits in memory at this count */
    MOE_PG_BOUND,        /* cannot meet the deadline even at peak: not searched */
    MOE_PG_RAMP,         /* none of the fastest plans can run the batch ramp (reason says why) */
};

struct moe_plan_gpus_point {
    int num_gpus;
    enum moe_plan_gpus_state state;
    double bound_days; /* lower bound on the run's days (0 until the FLOPs per token are known) */
    struct moe_plan_candidate best;
    struct moe_train_totals totals;
    bool meets_deadline;
    char reason[200]; /* MOE_PG_RAMP: Megatron's objection to a ramp batch */
};

struct moe_plan_gpus {
    int num_points;
    struct moe_plan_gpus_point *points; /* [num_points], GPU count descending; owned */
    int best;                           /* index of the best count, -1 when none qualifies */
    int fastest;                        /* index of the shortest run, -1 when nothing fits */
    double wall_s;                      /* seconds the sweep took */
};

/*
 * Run the sweep for problem p (model, cluster, layout flags; its --gpus is ignored) under the
 * search options o and run flags f (tokens required). Errors: MOE_ERR_INVALID for a range that is
 * empty, not a multiple of the node size, or over MOE_PLAN_GPUS_MAX_COUNTS counts (naming the
 * flag); the search's and the run's errors otherwise. out is filled also when no count
 * qualifies (best = -1).
 */
MOE_NODISCARD enum moe_status moe_cli_plan_gpus(const struct moe_cli_problem *p,
                                                const struct moe_plan_cli_opts *o,
                                                const struct moe_train_flags *f,
                                                const struct moe_cluster_costs *c,
                                                int gpus_min,
                                                int gpus_step,
                                                int gpus_max,
                                                struct moe_plan_gpus *out,
                                                struct moe_diag *diag);
void moe_cli_plan_gpus_free(struct moe_plan_gpus *g);

/* The sweep as a table ('#' header, one row per count). */
void moe_cli_plan_gpus_print(FILE *out,
                             const struct moe_plan_gpus *g,
                             const struct moe_train_flags *f);

/* The sweep as JSON: {"objective", "deadline_days", "best_num_gpus", "points": [...]}. */
cJSON *moe_cli_plan_gpus_json(const struct moe_plan_gpus *g, const struct moe_train_flags *f);

#ifdef __cplusplus
}
#endif

#endif /* MOE_CLI_PLAN_GPUS_H */
