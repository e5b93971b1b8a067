/*
 * A whole training run for one plan, through the predictor (cli/train_cost.h does the arithmetic):
 * the step schedule of the plan's layout, the step times of the batch ramp (the plan's layout at
 * each smaller global batch, event-simulated like `moefold predict`), the interval of the step
 * from the cluster profile (cli/uncertainty.h), and the totals with energy and cost. Used by
 * predict, plan (every listed plan, then ranked by the objective and filtered by the deadline)
 * and whatif (every point).
 */
#ifndef MOE_CLI_TRAIN_EVAL_H
#define MOE_CLI_TRAIN_EVAL_H

#include "cli/common.h"
#include "cli/train_cost.h"
#include "cli/uncertainty.h"
#include "planner/search.h"
#include "topologies/cluster_costs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One plan's run. */
struct moe_train_eval {
    struct moe_train_schedule sched; /* owned: moe_cli_train_eval_fini */
    struct moe_train_totals totals;
    double ramp_s;      /* seconds spent in the batch ramp */
    int ramp_predicted; /* ramp batches predicted */
    int ramp_batches;   /* distinct ramp batches */
    int seq_length;
};

/*
 * The run of p's layout and options (resolved) whose step at the global batch takes step_s
 * (simulated schedule): u (may be NULL) gives the interval, c the power and price. Errors name
 * the flag or ramp batch Megatron would refuse.
 */
MOE_NODISCARD enum moe_status moe_cli_train_eval(const struct moe_cli_problem *p,
                                                 double step_s,
                                                 const struct moe_train_flags *f,
                                                 const struct moe_cluster_costs *c,
                                                 const struct moe_uncertainty *u,
                                                 struct moe_train_eval *out,
                                                 struct moe_diag *diag);
void moe_cli_train_eval_fini(struct moe_train_eval *e);

/* The report struct moe_train_print / moe_train_json take, for e. */
void moe_cli_train_report(const struct moe_train_eval *e,
                          const struct moe_train_flags *f,
                          const struct moe_cluster_costs *c,
                          struct moe_train_report *r);

/*
 * Evaluate the run of every plan in res->top (of problem p), then reorder res->top by the
 * objective (stable: plans of equal value keep the step-time order) and drop the plans that miss
 * f->deadline_days. evals[res->num_top on entry] receives each kept plan's run, in the new order
 * (the caller finis them, *num_evals of them). When every plan misses the deadline, *missed gets
 * the fastest one's run (days and interval, in missed->totals) and res->num_top becomes 0; else
 * missed->totals.days.value is 0. A plan that cannot run the batch ramp (a ramp batch Megatron
 * refuses for its layout) is dropped too: *num_skipped counts them and skipped[len] holds the
 * first one's reason; when no plan can run it, that reason is the error (MOE_ERR_INFEASIBLE).
 */
MOE_NODISCARD enum moe_status moe_cli_train_rank(const struct moe_cli_problem *p,
                                                 const struct moe_train_flags *f,
                                                 const struct moe_cluster_costs *c,
                                                 struct moe_plan_result *res,
                                                 struct moe_train_eval *evals,
                                                 int *num_evals,
                                                 struct moe_train_eval *missed,
                                                 int *num_skipped,
                                                 char *skipped,
                                                 size_t len,
                                                 struct moe_diag *diag);

/* "no plan finishes within D days: the fastest needs X days (80% interval a - b), Y days (Z%)
 * over" into buf[len] (missed as moe_cli_train_rank gives it). */
void moe_cli_train_missed_str(const struct moe_train_flags *f,
                              const struct moe_train_eval *missed,
                              char *buf,
                              size_t len);

#ifdef __cplusplus
}
#endif

#endif /* MOE_CLI_TRAIN_EVAL_H */
