/*
 * Lower bounds for the planner's pruning: on the step time of a layout's candidates (any option
 * value, or one option group), and on the memory of a layout's worst pipeline stage.
 *
 * Time. model/cost.c charges each layer pass its compute and expert GEMM time in full; hides at
 * most overlap_eff of the TP traffic (TP overlap) and of the CP traffic behind the attention core;
 * with 1F1B EP overlap it hides, of each EP segment, at most ep_overlap_eff of the GEMM time it is
 * paired with (forward dispatch with backward attention, forward combine with backward experts,
 * backward dispatch with forward attention, backward combine with forward experts) and slows the
 * GEMMs by a non-negative amount; recompute adds backward compute (which may hide more forward
 * dispatch, by at most ep_overlap_eff of what it adds: the pass pair never gets shorter); host
 * launches hide behind GPU work only; offload copies, DP and optimizer time are non-negative.
 * Per-pass totals below those minima, summed over a pipeline rank, bound every rank's sum; the
 * closed-form schedule grows with each rank's sum, so closed_form(bounds) plus the fixed per-step
 * time bounds the step. Per-layer terms come from moe_compute_layer at the smallest load factor
 * the options allow, per recipe, grouped-GEMM and dispatcher value (compute does not depend on the
 * dispatcher, EP traffic not on grouped GEMM; tests/planner/test_search checks these bounds
 * against the cost model over random candidates, and the search checks each prediction it makes,
 * moe_plan_stats.bound_violations).
 *
 * Memory. Weights, gradients and optimizer state of a stage depend on the layout, the recipe, FP8
 * parameter gather and the optimizer choices only (not on recompute, offload, dispatcher, overlap
 * or micro-batch size) and grow with every layer a stage holds; plus the fixed context they bound
 * the stage's memory.
 */
#ifndef MOE_PLANNER_BOUND_H
#define MOE_PLANNER_BOUND_H

#include "model/layout.h"
#include "model/memory.h"
#include "planner/space.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_PLAN_KINDS 4 /* decoder-layer kinds: is_moe * 2 + is_windowed */

/* Per-layer terms of one recipe for one set of layout dimensions (seconds, one micro-batch). */
struct moe_plan_recipe_terms {
    double fwdc[MOE_PLAN_KINDS], bwdc[MOE_PLAN_KINDS];       /* non-expert compute */
    double fwde[MOE_PLAN_KINDS][2], bwde[MOE_PLAN_KINDS][2]; /* expert GEMMs [grouped index] */
    double tp[MOE_PLAN_KINDS];                               /* TP both passes, after overlap */
    double cp[MOE_PLAN_KINDS];                               /* exposed CP both passes */
    double fd[MOE_PLAN_KINDS][MOE_NUM_DISPATCHERS];          /* EP segments [dispatcher index] */
    double fc[MOE_PLAN_KINDS][MOE_NUM_DISPATCHERS];
    double bd[MOE_PLAN_KINDS][MOE_NUM_DISPATCHERS];
    double bc[MOE_PLAN_KINDS][MOE_NUM_DISPATCHERS];
    double loss, mtp, emb; /* extras, both passes */
};

struct moe_plan_layer_terms {
    struct moe_plan_recipe_terms r[MOE_NUM_RECIPES]; /* [index into the space's recipes] */
};

/* Per-layer pass bounds (fwd + bwd) for one scenario: an option group, or the least over all. */
struct moe_plan_kind_lb {
    double kind[2][2]; /* [is_moe][is_windowed] */
    double loss, mtp, emb;
    double per_layer_min; /* least decoder-layer bound over the kinds the model has */
};

/*
 * Recompute time per layer pass (seconds, one micro-batch) of one recipe and grouped-GEMM value:
 * per selective module (bit order of MOE_RC_*) and for full recompute. model/compute.c adds the
 * selected modules' forward work (the moe module standing for moe_act and shared_experts).
 */
struct moe_plan_rc_terms {
    double mod[MOE_PLAN_KINDS][7];
    double full[MOE_PLAN_KINDS];
};

void moe_plan_bound_rc_terms(const struct moe_plan_space *sp,
                             const struct moe_layout *lay,
                             double load,
                             int recipe,
                             int grouped,
                             struct moe_plan_rc_terms *out);

/* Recompute a value adds to one layer pass of a kind (index is_moe * 2 + is_windowed). */
double
moe_plan_bound_rc_layer(const struct moe_plan_rc_terms *t, const struct moe_plan_rc *rc, int kind);

/* Model facts the bounds use, computed once per search. */
struct moe_plan_bound_model {
    uint16_t prefix_moe[MOE_MAX_LAYERS + 1]; /* MoE layers among the first i */
    uint16_t prefix_win[MOE_MAX_LAYERS + 1];
    uint16_t prefix_both[MOE_MAX_LAYERS + 1];
    int kinds_total[2][2];  /* decoder layers of each kind */
    int last_moe, last_win; /* kind of the last decoder layer (MTP layers copy it) */
};

void moe_plan_bound_model_init(const struct moe_model_cfg *cfg, struct moe_plan_bound_model *bm);

/* Smallest load factor any option value gives this layout's dimensions (reads ep, tp, cp, mbs,
 * seq_length): the given factor, or auto's mean factor from the request's load_fn (a call that
 * may run its Monte Carlo: the search asks once per layer key), capped and shared as
 * model/cost.c does. The terms below take it as their `load`. */
double moe_plan_bound_load(const struct moe_plan_space *sp, const struct moe_layout *lay);

/* Whether some allowed option value enables 1F1B EP overlap on this layout. */
bool moe_plan_bound_ep_overlap_possible(const struct moe_plan_space *sp,
                                        const struct moe_layout *lay);

/* Layer terms for the layout's dimensions (reads tp, cp, ep, etp, mbs, sequence_parallel,
 * seq_length; need not be resolved). same, when not NULL, holds the terms of a layout that
 * differs at most in ep and etp: its dense-layer terms and extras (which model/compute.c prices
 * without reading either) are copied instead of computed. */
void moe_plan_bound_terms(const struct moe_plan_space *sp,
                          const struct moe_plan_bound_model *bm,
                          const struct moe_layout *lay,
                          double load,
                          const struct moe_plan_layer_terms *same,
                          struct moe_plan_layer_terms *out);

/* Bounds of one option group: recipe, grouped-GEMM and dispatcher indices into the space's lists
 * (the dispatcher index into the list for the layout's ep), EP overlap on or off. */
void moe_plan_bound_group(const struct moe_plan_space *sp,
                          const struct moe_plan_bound_model *bm,
                          const struct moe_plan_layer_terms *t,
                          int recipe_idx,
                          int grouped_idx,
                          int dispatcher_idx,
                          bool ep_overlap,
                          int num_dispatchers,
                          struct moe_plan_kind_lb *out);

/* The least of the group bounds over every group the layout allows. */
void moe_plan_bound_least(const struct moe_plan_space *sp,
                          const struct moe_plan_bound_model *bm,
                          const struct moe_plan_layer_terms *t,
                          const struct moe_layout *lay,
                          struct moe_plan_kind_lb *out);

/* One pipeline rank of a resolved layout as the step-time bound reads it. */
struct moe_plan_bound_rank {
    int n[2][2]; /* decoder layers [is_moe][is_windowed] */
    int mtp;     /* MTP layers */
    bool emb, loss;
    int sends; /* pipeline sends and receives per micro-batch */
};

/* What moe_plan_bound_time reads of a resolved layout, whatever the per-layer bounds: its ranks
 * (pp of them), the pipeline transfer (s) and the share of it exposed. */
struct moe_plan_bound_spans {
    double p2p, keep;
    struct moe_plan_bound_rank rank[MOE_MAX_PP_CHUNKS];
};

/* Step-time bound of a resolved layout under per-layer bounds lb. */
double moe_plan_bound_time(const struct moe_plan_space *sp,
                           const struct moe_plan_bound_model *bm,
                           const struct moe_plan_kind_lb *lb,
                           const struct moe_layout *lay);
/* The same in two steps, for many bounds lb of one layout: its spans once, then each bound (the
 * same value as moe_plan_bound_time's). */
void moe_plan_bound_spans_init(const struct moe_plan_space *sp,
                               const struct moe_plan_bound_model *bm,
                               const struct moe_layout *lay,
                               struct moe_plan_bound_spans *out);
double moe_plan_bound_time_spans(const struct moe_plan_space *sp,
                                 const struct moe_plan_bound_model *bm,
                                 const struct moe_plan_kind_lb *lb,
                                 const struct moe_layout *lay,
                                 const struct moe_plan_bound_spans *spans);

/*
 * Step-time bound of every placement of the layers for these sizes (tp, cp, pp, vpp, ep, etp, mbs,
 * sequence parallelism; need not be resolved: dp and the micro-batch count are derived from
 * num_gpus and gbs). rank_floor: a bound on the slowest rank's pass sum known for the placement at
 * hand (0 if none; the average rank's always applies).
 */
double moe_plan_bound_time_sizes(const struct moe_plan_space *sp,
                                 const struct moe_plan_bound_model *bm,
                                 const struct moe_plan_kind_lb *lb,
                                 const struct moe_layout *lay,
                                 double rank_floor);

/*
 * Weights + gradients + optimizer state (bytes) of a stage with contents sc, for one recipe and
 * static optimizer choice (FP8 parameter gather as the search sets it), or the least over all
 * allowed values when recipe_idx < 0. lay needs tp, cp, dp, ep, etp, edp, pp.
 */
double moe_plan_bound_stage_static(const struct moe_plan_space *sp,
                                   const struct moe_layout *lay,
                                   const struct moe_stage_contents *sc,
                                   int recipe_idx,
                                   int static_idx);

#ifdef __cplusplus
}
#endif

#endif /* MOE_PLANNER_BOUND_H */
