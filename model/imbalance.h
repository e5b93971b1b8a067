/*
 * Expert-load imbalance by Monte Carlo: the busiest EP rank sets the pace of the MoE layer, so the
 * cost model needs E[max_r load_r / mean load] and its spread over steps.
 *
 * Model: each sample (one step's micro-batch through one MoE layer) draws the experts' popularity
 * p ~ Dirichlet(alpha, ..., alpha) with alpha = 1 / cv^2 (cv = coefficient of variation of one
 * expert's share; cv = 0 means a perfectly balanced router in expectation), then the step's
 * tokens*top-k expert choices ~ Multinomial(p) (finite-token noise), and sums the experts of each
 * EP rank (E/EP consecutive experts) -- drawn as the ranks' sums directly (Dirichlet and
 * multinomial aggregation: the same distribution, EP instead of E categories). GSL's
 * gsl_ran_dirichlet / gsl_ran_multinomial with a seeded MT19937 generator: the same inputs give the
 * same statistics. Allocates its scratch (not a hot path: called once per predict, the planner
 * caches by (E, K, EP, tokens)).
 */
#ifndef MOE_MODEL_IMBALANCE_H
#define MOE_MODEL_IMBALANCE_H

#include "model/cost.h"
#include "model/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Default cv for `--moe-imbalance auto`: 0.2, chosen so that typical fine-grained MoE layouts
 * (E=128-256, EP 8-64) see max/mean loads of about 1.2-1.4, which with expert compute and EP
 * communication at 40-60% of a step reproduces the 8-20% slowdown of real dropless routing over
 * forced balance reported in published long-context comparisons (DESIGN.md modelling notes).
 */
#define MOE_IMBALANCE_DEFAULT_CV 0.2

struct moe_imbalance_params {
    int num_experts;    /* E */
    int topk;           /* K */
    int ep;             /* EP ranks sharing the experts (E % ep == 0) */
    double tokens;      /* tokens routed by the whole EP group in one micro-batch and layer */
    double cv;          /* per-expert popularity coefficient of variation (>= 0) */
    int num_samples;    /* Monte Carlo samples (>= 16) */
    unsigned long seed; /* generator seed */
};

/*
 * Fill out with mean, median and 99th percentile of max/mean rank load. MOE_ERR_INVALID with diag
 * on bad parameters, MOE_ERR_NOMEM when scratch cannot be allocated.
 */
MOE_NODISCARD enum moe_status moe_imbalance_monte_carlo(const struct moe_imbalance_params *p,
                                                        struct moe_load_stats *out,
                                                        struct moe_diag *diag);

/* Monte Carlo samples and seed of `--moe-imbalance auto` (predict, plan and compare alike). */
#define MOE_IMBALANCE_AUTO_SAMPLES 2000
#define MOE_IMBALANCE_AUTO_SEED    20261130UL

/*
 * The statistics `--moe-imbalance auto` prices a layout with: the Monte Carlo above for the
 * model's experts and top-k over the layout's EP group, each EP rank routing the tokens of its
 * micro-batch share, mbs x seq / (CP x TP) (a layout reaches it through EP and those tokens
 * alone), at popularity cv.
 */
/* Tokens one EP rank routes per micro-batch and layer: mbs x seq / (CP x TP). */
double moe_imbalance_rank_tokens(const struct moe_layout *lay);

MOE_NODISCARD enum moe_status moe_imbalance_auto(const struct moe_model_cfg *cfg,
                                                 const struct moe_layout *lay,
                                                 double cv,
                                                 struct moe_load_stats *out,
                                                 struct moe_diag *diag);

#ifdef __cplusplus
}
#endif

#endif /* MOE_MODEL_IMBALANCE_H */
