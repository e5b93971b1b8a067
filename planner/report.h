/*
 * The planner's output: the top-k table, the memory-time Pareto front, the summary line, the
 * nothing-fits message, per-phase explanations ("why plan K beats the next ones", "why the best
 * plan beats a given one"), as text tables (nccl-tests style: '#' comment lines, fixed columns
 * with units in the header) or as one JSON object. Step times in the top-k table are those of the
 * event-simulated schedule; the Pareto front is ranked by the closed form the search uses.
 */
#ifndef MOE_PLANNER_REPORT_H
#define MOE_PLANNER_REPORT_H

#include "model/cost.h"
#include "model/layout.h"
#include "planner/search.h"

#include <cjson/cJSON.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* "TP2 CP1 PP8 VPP4 EP64 ETP1 DP64 EDP2 MBS1 SP" plus the placement ("first 5 last 4" or the
 * layout string when the chunks are custom). */
void moe_plan_layout_str(const struct moe_layout *lay, char *buf, size_t len);

/* Compact options: "fp8-blockwise hybridep rc:mla_up_proj,mlp off:- dist-opt fp8-gather
 * ovl:dp,tp,ep cg:full". */
void moe_plan_options_str(const struct moe_options *opt, char *buf, size_t len);

/* Recompute and offload descriptions ("none", "selective(core_attn,mlp)", "full(block, 2)";
 * "none", "modules(expert_fc1,moe_act)", "cpu(3 layers)"). */
void moe_plan_recompute_str(const struct moe_options *opt, char *buf, size_t len);
void moe_plan_offload_str(const struct moe_options *opt, char *buf, size_t len);

/* The step time a candidate is reported with (simulated when available). */
double moe_plan_step_time(const struct moe_plan_candidate *c);

/*
 * Knobs that differ between a and b, one "name: a -> b" line each, into lines[max][512]; returns
 * the number written.
 */
int moe_plan_knob_diffs(const struct moe_plan_candidate *a,
                        const struct moe_plan_candidate *b,
                        char (*lines)[512],
                        int max);

/* Print the whole result as text tables; explain_k (1-based, 0 = none) adds the explanation of
 * plan K against the next plans. */
void moe_plan_print(FILE *out,
                    const struct moe_plan_request *req,
                    const struct moe_plan_result *res,
                    int explain_k);

/* How far moefold can tell plans apart, and the memory margin the search kept (the CLI fills it
 * from the cluster profile's measured errors). */
struct moe_plan_trust {
    double tie_band; /* step-time band (log units) within which plans tie with plan 1; 0: none */
    double memory_margin; /* fraction of predicted memory a plan had to leave free */
    char basis[320];      /* where the band comes from */
    char ranking[256];    /* how the listed plans were re-ranked after the search ("" = by step
                             time); printed as a '#' line, "ranking" in JSON */
    /* The 80% interval of each listed plan's step time (seconds; [i][0] lo, [i][1] hi), from the
     * profile's measured errors for runs like that plan: num_intervals == the result's num_top, or
     * 0 (no column, no JSON field). Owned by the caller. */
    const double (*step_interval)[2];
    int num_intervals;
    double interval_level;    /* their level (0.8) */
    char interval_basis[320]; /* where plan 1's interval comes from */
};

/* moe_plan_print with ties marked "~" and the memory margin stated (t may be NULL). */
void moe_plan_print_trusted(FILE *out,
                            const struct moe_plan_request *req,
                            const struct moe_plan_result *res,
                            int explain_k,
                            const struct moe_plan_trust *t);

/* Per-phase comparison of two plans (a the reference): phases, memory and knob differences. */
void moe_plan_print_compare(FILE *out,
                            const char *name_a,
                            const struct moe_plan_candidate *a,
                            const char *name_b,
                            const struct moe_plan_candidate *b);

/* One candidate as a JSON object (layout, options, prediction summary, phases). */
cJSON *moe_plan_candidate_json(const struct moe_plan_candidate *c);

/* The comparison of moe_plan_print_compare as JSON. */
cJSON *moe_plan_compare_json(const struct moe_plan_candidate *a,
                             const struct moe_plan_candidate *b);

/* The whole result as one JSON object ("format": "moefold-plan-search", "version": 1). NULL when
 * out of memory. */
cJSON *moe_plan_result_json(const struct moe_plan_request *req,
                            const struct moe_plan_result *res,
                            int explain_k);

/* The same with "tie_with_best" per top plan and a "trust" object (t may be NULL). */
cJSON *moe_plan_result_json_trusted(const struct moe_plan_request *req,
                                    const struct moe_plan_result *res,
                                    int explain_k,
                                    const struct moe_plan_trust *t);

#ifdef __cplusplus
}
#endif

#endif /* MOE_PLANNER_REPORT_H */
