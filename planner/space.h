/*
 * The planner's search space, as compact value tuples: the layout knobs of one candidate layout
 * (struct moe_plan_lkey) and its option knobs (struct moe_plan_okey), the lists of values each
 * dimension takes for a request, the conversion to the model's structs, the total order that breaks
 * step-time ties, and a cache of option validity per layout class.
 *
 * Internal to planner/ (search*.c, bound.c, report.c and the tests use it). Option lists contain
 * only canonical values: a value the cost model cannot tell from an earlier one (a redundant module
 * set, the transformer_engine CUDA-graph implementation where local is identical, a dispatcher at
 * EP=1) is listed once; search.h lists every such equivalence and the test checking it.
 */
#ifndef MOE_PLANNER_SPACE_H
#define MOE_PLANNER_SPACE_H

#include "model/cluster.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/status.h"
#include "planner/search.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How the decoder layers are placed on the pipeline chunks. */
enum moe_plan_place {
    MOE_PLACE_EVEN = 0,     /* num_layers divides over pp*vpp */
    MOE_PLACE_UNEVEN = 1,   /* --decoder-first/last-pipeline-num-layers */
    MOE_PLACE_BALANCED = 2, /* balanced layout string, MTP counted as a layer */
    MOE_PLACE_FIXED = 3,    /* the request's own custom chunks */
};

/* Layout knobs of a candidate (everything moe_layout_resolve derives is left out). */
struct moe_plan_lkey {
    int tp, cp, pp, vpp, ep, etp, mbs;
    int sp;    /* sequence parallel */
    int place; /* enum moe_plan_place */
    int first, last;
};

/* CUDA graph setting: implementation and module set (MOE_CGM_*). */
struct moe_plan_graph {
    uint8_t impl;
    uint8_t modules;
};

/* Option knobs of a candidate; see moe_plan_okey_apply for the mapping. */
struct moe_plan_okey {
    uint8_t recipe;
    uint8_t dist_opt;
    uint8_t fp8_param_gather;
    uint8_t opt_offload; /* 0 none, else index into offload fractions (1: 0.5, 2: 1.0) */
    uint8_t dispatcher;
    uint8_t grouped;
    uint8_t ep_overlap;
    uint8_t tp_overlap;
    uint8_t overlap_grad;
    uint8_t overlap_param;
    uint8_t graph; /* index into moe_plan_space.graphs */
    uint8_t rc;    /* enum moe_recompute_granularity */
    uint8_t rc_method;
    uint8_t rc_mods;
    uint16_t rc_layers;
    uint8_t off;      /* 0 none, 1 fine-grained modules, 2 whole-layer CPU offloading */
    uint8_t off_mods; /* MOE_OFF_* */
    uint16_t off_layers;
};

/* Recompute and activation-offload values (the R and F lists). */
struct moe_plan_rc {
    uint8_t rc, method, mods;
    uint16_t layers; /* full: 0 = "every method and layer count" (resolved by memory) */
};
struct moe_plan_off {
    uint8_t off, mods;
    uint16_t layers; /* CPU offloading: 0 = "every layer count" (resolved by memory) */
};

#define MOE_PLAN_MAX_GRAPHS  64 /* listed values + the neutral "none" */
#define MOE_PLAN_MAX_RC      160
#define MOE_PLAN_MAX_OFF     160
#define MOE_PLAN_MAX_STATICS 8
#define MOE_PLAN_NUM_FRACS   3 /* index 0 = no optimizer offload */

extern const double moe_plan_offload_fracs[MOE_PLAN_NUM_FRACS];

/* Static (memory-fixing) optimizer choices: distributed optimizer, optimizer offload. */
struct moe_plan_static {
    uint8_t dist_opt;
    uint8_t opt_offload;
};

/* Everything the request allows, as value lists; built once per search. */
struct moe_plan_space {
    const struct moe_plan_request *req;
    bool is_moe, has_dense, has_shared;
    int num_recipes;
    uint8_t recipes[MOE_NUM_RECIPES];
    int num_statics;
    struct moe_plan_static statics[MOE_PLAN_MAX_STATICS];
    int num_dispatchers; /* for ep > 1 */
    uint8_t dispatchers[MOE_NUM_DISPATCHERS];
    int num_dispatchers_ep1; /* canonical representatives at ep == 1 */
    uint8_t dispatchers_ep1[MOE_NUM_DISPATCHERS];
    int num_grouped;
    uint8_t grouped[2];
    int num_ep_overlap;
    uint8_t ep_overlap[2];
    int num_tp_overlap; /* when sequence parallel; else {0} */
    uint8_t tp_overlap[2];
    int num_graphs;
    struct moe_plan_graph graphs[MOE_PLAN_MAX_GRAPHS];
    int graph_full_iter; /* index of the dominant setting, or -1 */
    int graph_neutral;   /* index of "no CUDA graphs" (may be num_graphs: not enumerated) */
    int num_rc;          /* none first, then selective sets, then one full entry per method */
    struct moe_plan_rc rcs[MOE_PLAN_MAX_RC];
    int num_off;       /* none first, then fine-grained sets, then one CPU-offloading entry */
    unsigned fine_all; /* every fine-grained module the model has (0 if none listed) */
    struct moe_plan_off offs[MOE_PLAN_MAX_OFF];
    bool overlap_grad_fixed, overlap_param_fixed, fp8_param_gather_fixed;
    /* Reverse maps from option knobs to list indices (-1: not listed). */
    int16_t rc_index[3][2][128]; /* [granularity][method][modules]; full entries by method */
    int16_t off_index[3][128];   /* [kind][modules] */
};

/* Build the lists for a request (fixes, allowed recipes and dispatchers, no-offload). */
MOE_NODISCARD enum moe_status moe_plan_space_init(struct moe_plan_space *sp,
                                                  const struct moe_plan_request *req,
                                                  struct moe_diag *diag);

/* True when the knob is fixed by the request. */
bool moe_plan_space_fixed(const struct moe_plan_space *sp, enum moe_plan_knob k);

/* FP8 parameter gather as the search sets it: on wherever Megatron allows it (never slower, never
 * larger in the model), unless fixed. */
uint8_t moe_plan_space_fp8_param_gather(const struct moe_plan_space *sp,
                                        int recipe,
                                        int dist_opt,
                                        int opt_offload);

/* Fill opt from the request's run settings and the option knobs. */
void moe_plan_okey_apply(const struct moe_plan_space *sp,
                         const struct moe_plan_okey *k,
                         struct moe_options *opt);

/* Read the option knobs back from options (for a plan given by flags); graph index -1 if absent. */
void moe_plan_okey_from_options(const struct moe_plan_space *sp,
                                const struct moe_options *opt,
                                struct moe_plan_okey *k);

/*
 * Fill lay (unresolved: resolve it next) from the layout knobs; chunks of MOE_PLACE_BALANCED are
 * built here, MOE_PLACE_FIXED copies the request's chunks.
 */
void moe_plan_lkey_apply(const struct moe_plan_space *sp,
                         const struct moe_plan_lkey *k,
                         struct moe_layout *lay);

/* Balanced chunks: every chunk gets ceil((L + mtp) / chunks) units, the excess removed from the
 * first, the last and the middle chunks from the back (Megatron's suggestion). */
void moe_plan_balanced_chunks(const struct moe_model_cfg *cfg,
                              int pp,
                              int vpp,
                              struct moe_layout *lay);

/* Total orders used for tie-breaking (negative when a sorts first). */
int moe_plan_lkey_cmp(const struct moe_plan_lkey *a, const struct moe_plan_lkey *b);
int moe_plan_okey_cmp(const struct moe_plan_okey *a, const struct moe_plan_okey *b);

/* Layout knobs of a resolved layout (place from its fields). */
void moe_plan_lkey_from_layout(const struct moe_layout *lay, struct moe_plan_lkey *k);

/*
 * Option validity. moe_layout_resolve's option rules read the layout only through sequence
 * parallelism, ep (> 1, and E / ep with hot-expert replicas), pp (> 1, and num_layers / pp) and vpp
 * (> 1): a "class" of those values. Each rule involves at most two of four parts of the options:
 * the group (recipe, optimizer, dispatcher, grouped GEMM, EP overlap, DP overlaps), recompute,
 * activation offload, and the time-only knobs (TP overlap, CUDA graphs). So a tuple is valid when
 * each part is valid with the others at neutral values (no recompute, no offload, no TP overlap,
 * no CUDA graphs) and each pair of the last three is, which the cache keeps per class (pairs
 * without the group). Every verdict is computed by moe_layout_resolve on the layout at hand; the
 * search re-validates each plan it reports with a full resolve (moe_plan_stats counts any
 * disagreement), and tests/planner/test_space compares verdicts with direct resolution. One cache
 * per thread: not thread-safe.
 */
struct moe_plan_valid_cache;
struct moe_plan_valid_cache *moe_plan_valid_cache_create(size_t log2_slots);
void moe_plan_valid_cache_destroy(struct moe_plan_valid_cache *c);
/* Valid options for this resolved layout? Counts resolve calls in *resolves (may be NULL). */
bool moe_plan_valid(struct moe_plan_valid_cache *c,
                    const struct moe_plan_space *sp,
                    const struct moe_layout *lay,
                    const struct moe_plan_okey *k,
                    long *resolves);

/* The same by one full moe_layout_resolve (no cache). */
bool moe_plan_valid_full(const struct moe_plan_space *sp,
                         const struct moe_layout *lay,
                         const struct moe_plan_okey *k);

#ifdef __cplusplus
}
#endif

#endif /* MOE_PLANNER_SPACE_H */
