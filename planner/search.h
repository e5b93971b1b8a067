/*
 * The planner's search: every valid parallel-folding layout x training options for one model,
 * cluster, GPU count, global batch and sequence length, ranked by the cost model's step time
 * (model/cost.h, closed-form schedule), with the final top-k re-ranked by the event-simulated
 * schedule.
 *
 * What is enumerated (each dimension's values; moe_layout_resolve accepts or rejects every
 * combination, so the search never proposes what Megatron-LM would refuse):
 *   layout   TP, CP, PP, VPP (pp*vpp chunks, at most one per decoder layer), the pipeline
 *            placement (even split; Megatron's uneven --decoder-first/last-pipeline-num-layers for
 *            every valid pair; a balanced --pipeline-model-parallel-layout string counting MTP as a
 *            layer, when that differs from the even split), EP, ETP (EDP follows), micro-batch
 *            size, sequence parallelism (dense models; MoE with TP needs it);
 *   options  precision recipe (those the GPU supports), distributed optimizer, FP8 parameter
 *            gather, optimizer CPU offload (fractions 0.5 and 1), dispatcher, grouped GEMM,
 *            1F1B EP overlap (with delayed wgrad), TP communication overlap, DP overlaps, CUDA
 *            graphs (none, full iteration, every per-module set), recompute (none; every
 *            non-redundant selective module set of the modules the model has; full with method
 *            uniform/block and every layer count), activation offload (every fine-grained module
 *            set; whole-layer CPU offloading with every layer count).
 * Sampling or heuristics never drop a candidate. What is skipped is skipped exactly:
 *   - memory: a group is dropped when the weights, gradients and optimizer state of its
 *     worst-stage (which no recompute, offload, dispatcher or overlap choice changes) plus the
 *     fixed context already exceed the capacity;
 *   - time: T(c) >= T(d) - dp_comm(d) for every candidate c that d dominates pass by pass (d has
 *     no recompute and no activation offload, TP overlap on and full-iteration CUDA graphs; proof
 *     in search_group.c), and a layer-cost lower bound (bound.c) over whole layouts; a group whose
 *     bound cannot reach the top-k or the Pareto front is dropped;
 *   - dominance (never slower, never larger, in every case): overlap of the gradient
 *     reduce-scatter and of the parameter all-gather, FP8 parameter gather; equivalence
 *     (identical predictions): delay-wgrad (not priced), the CUDA-graph implementation
 *     (local == transformer_engine), redundant module sets, dispatchers at EP=1; for uniform
 *     full recompute (layer count) and whole-layer CPU offloading (layer count), which do not
 *     change step time, only the smallest-memory choice is kept; block full recompute re-runs
 *     the first `count` layers of each chunk, so each count is evaluated (more is never faster,
 *     and never faster than uniform).
 * tests/planner/test_search checks each of these claims against the cost model over random
 * candidates, and the search re-checks every bound against each prediction it makes
 * (stats.bound_violations).
 *
 * Ranking: step time, ties broken by a total order on the plan's knobs, so the result does not
 * depend on the number of threads. The top-k table holds distinct layouts (each with its fastest
 * options); the Pareto front (memory vs step time) holds every fitting plan no other fitting plan
 * beats in both, up to pareto_window times the fastest step time.
 */
#ifndef MOE_PLANNER_SEARCH_H
#define MOE_PLANNER_SEARCH_H

#include "model/cluster.h"
#include "model/config.h"
#include "model/cost.h"
#include "model/layout.h"
#include "model/status.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Dimensions of the search; a fixed knob takes its value from the request's layout / options. */
enum moe_plan_knob {
    MOE_PK_TP = 0,
    MOE_PK_CP,
    MOE_PK_PP,
    MOE_PK_VPP,
    MOE_PK_PP_LAYOUT, /* first/last stage layers or a custom layout string */
    MOE_PK_EP,
    MOE_PK_ETP,
    MOE_PK_MBS,
    MOE_PK_SEQUENCE_PARALLEL,
    MOE_PK_RECIPE,
    MOE_PK_FP8_PARAM_GATHER,
    MOE_PK_DIST_OPT,
    MOE_PK_OVERLAP_GRAD_REDUCE,
    MOE_PK_OVERLAP_PARAM_GATHER,
    MOE_PK_TP_COMM_OVERLAP,
    MOE_PK_EP_OVERLAP, /* --overlap-moe-expert-parallel-comm (+ --delay-wgrad-compute) */
    MOE_PK_GROUPED_GEMM,
    MOE_PK_DISPATCHER,
    MOE_PK_OPT_OFFLOAD, /* precision-aware optimizer, optimizer CPU offload and its fraction */
    MOE_PK_RECOMPUTE,   /* granularity, method, layer count, modules */
    MOE_PK_ACT_OFFLOAD, /* CPU offloading layers, fine-grained offloading and its modules */
    MOE_PK_CUDA_GRAPH,  /* implementation and modules */
    MOE_PK_COUNT,
};

/* Name of a knob as --fix spells it ("tp", "ep", "recompute", ...). */
const char *moe_plan_knob_name(enum moe_plan_knob k);

/* Expert-load statistics for a layout (for --moe-imbalance auto); *used = false when none. */
typedef enum moe_status (*moe_plan_load_fn)(void *ctx,
                                            const struct moe_layout *lay,
                                            struct moe_load_stats *out,
                                            bool *used,
                                            struct moe_diag *diag);

/* Progress callback, called from the calling thread about ten times a second (done in [0,1]). */
typedef void (*moe_plan_progress_fn)(void *ctx, double done, double elapsed_s, double evaluated);

struct moe_plan_request {
    const struct moe_model_cfg *cfg; /* validated model */
    const struct moe_cluster *cl;    /* validated cluster */
    int num_gpus;
    int gbs;        /* global batch, sequences */
    int seq_length; /* tokens per sequence */
    /* Values of fixed layout knobs (tp, cp, pp, vpp, ep, etp, mbs, sequence_parallel,
     * first/last_stage_layers, or chunks with has_custom_pp_layout). */
    struct moe_layout lay;
    /* Values of fixed option knobs, and the run's settings the search never changes:
     * force_load_balancing, capacity_factor, moe_imbalance, moe_hot_expert_replicas, optimizer
     * state dtypes (non-FP32 dtypes imply the precision-aware, distributed optimizer). */
    struct moe_options opt;
    uint32_t fixed;          /* bit (1u << enum moe_plan_knob) per fixed knob */
    unsigned recipes;        /* bit per enum moe_recipe allowed; 0 = all the GPU supports */
    unsigned dispatchers;    /* bit per enum moe_dispatcher allowed; 0 = all */
    double max_memory_bytes; /* per-GPU cap below the HBM capacity; 0 = the capacity */
    int top_k;               /* distinct layouts in the table (>= 1) */
    double pareto_window;    /* Pareto front up to this x the fastest step time (>= 1); 0 = off */
    int num_threads;         /* 0 = online CPUs */
    bool exhaustive; /* evaluate every candidate with moe_cost_predict: no bounds, no dominance */
    bool all_offload_sets; /* every fine-grained offload module set, not the unions of groups */
    /* > 0: also count the layouts whose fastest fitting plan beats this closed-form step time
     * (moe_plan_result.num_faster: where a given plan ranks); widens the search accordingly. */
    double rank_time_s;
    moe_plan_load_fn load_fn; /* may be NULL */
    void *load_ctx;
    moe_plan_progress_fn progress; /* may be NULL */
    void *progress_ctx;
};

/* Fill a request with defaults: nothing fixed, all recipes/dispatchers, top 10, window 1.5. */
void moe_plan_request_init(struct moe_plan_request *req);

/* One plan: a resolved layout, its options and the predictions it was ranked with. */
struct moe_plan_candidate {
    struct moe_layout lay;
    struct moe_options opt;
    struct moe_prediction pred; /* closed-form schedule (the search's ranking) */
    struct moe_prediction sim;  /* event-simulated schedule (top-k and reports) */
    bool has_sim;
    bool fits; /* within the capacity (and max_memory_bytes) and host memory */
};

struct moe_plan_stats {
    double enumerated;        /* candidates in the space: per valid layout, the product of the
                                 values of every option dimension */
    double pruned_memory;     /* dropped by the memory lower bound */
    double pruned_time;       /* dropped by a step-time lower bound */
    double dominated;         /* dropped by dominance or equivalence */
    double invalid;           /* option combinations moe_layout_resolve refuses */
    double evaluated;         /* moe_cost_predict calls (closed form) */
    double mem_evaluated;     /* memory-only evaluations (moe_mem_stage over stages) */
    long layouts;             /* valid layouts (with placement and micro-batch size) */
    long bound_violations;    /* predictions below a bound the search used (should be 0) */
    long validity_mismatches; /* pairwise validity accepted what a full resolve refused (0) */
    long memory_mismatches;   /* the search's memory disagreed with a prediction's (0) */
    int threads;
    double wall_s;
};

struct moe_plan_result {
    struct moe_plan_candidate *top; /* [num_top], fastest (simulated step time) first */
    int num_top;
    struct moe_plan_candidate *pareto; /* [num_pareto], memory ascending, step time descending */
    int num_pareto;
    /* When nothing fits: the plan with the least memory, and by how much it exceeds the cap. */
    bool has_closest;
    struct moe_plan_candidate closest;
    double closest_excess_bytes;
    double cap_bytes; /* the memory cap the search used */
    long num_faster;  /* layouts faster than rank_time_s (when set) */
    struct moe_plan_stats stats;
};

/*
 * Run the search. res is filled (free it with moe_plan_result_free). Returns MOE_OK also when
 * nothing fits (num_top == 0, has_closest set when any layout is valid); MOE_ERR_INVALID for a
 * bad request, MOE_ERR_INFEASIBLE with a message when no layout is valid at all (e.g. the fixed
 * knobs contradict each other), MOE_ERR_NOMEM.
 */
MOE_NODISCARD enum moe_status moe_plan_search(const struct moe_plan_request *req,
                                              struct moe_plan_result *res,
                                              struct moe_diag *diag);

void moe_plan_result_free(struct moe_plan_result *res);

/*
 * Total order used to break step-time ties (negative, 0, positive as a sorts before b). Compares
 * the layout knobs, then the option knobs.
 */
int moe_plan_knob_cmp(const struct moe_layout *la,
                      const struct moe_options *oa,
                      const struct moe_layout *lb,
                      const struct moe_options *ob);

#ifdef __cplusplus
}
#endif

#endif /* MOE_PLANNER_SEARCH_H */
