/*
 * Command-line pieces shared by `moefold plan` and `moefold whatif` (cli/cmd_plan.c,
 * cli/cmd_whatif.c): the search flags (--fix, --max-memory-gib, --precision, --dispatcher,
 * --no-offload, --threads, --exhaustive, --all-offload-sets), the request they and the Megatron
 * flags make (every Megatron layout or option flag given fixes its dimension), a thread-safe cache
 * for expert-load statistics, and the progress bar (stderr, only on a terminal, only for searches
 * longer than a second).
 */
#ifndef MOE_PLANNER_CLIOPT_H
#define MOE_PLANNER_CLIOPT_H

#include "model/cluster.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/megatron_args.h"
#include "model/status.h"
#include "planner/search.h"

#include <stdbool.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

struct moe_plan_cli_opts {
    bool help;
    const char *fix;       /* --fix tp=2,ep=64,... (NULL: none) */
    double max_memory_gib; /* 0: the GPU's capacity */
    unsigned recipes;      /* --precision list (0: all the GPU supports) */
    unsigned dispatchers;  /* --dispatcher list (0: all) */
    bool no_offload;       /* --no-offload */
    int threads;           /* --threads (0: all cores) */
    bool exhaustive;       /* --exhaustive */
    bool all_offload_sets; /* --all-offload-sets */
    double memory_margin;  /* --memory-margin: fraction of a plan's predicted memory it must leave
                              free; < 0: the cluster profile's default (cli/uncertainty.h) */
};

void moe_plan_cli_opts_init(struct moe_plan_cli_opts *o);

/*
 * If argv[i] is one of the search flags, parse it (with its value, `--f v` or `--f=v`) into o and
 * return the arguments consumed; 0 if it is not one; -1 with diag on a bad value.
 */
int moe_plan_cli_flag(
    struct moe_plan_cli_opts *o, int argc, char **argv, int i, struct moe_diag *diag);

/*
 * If argv[i] is --name (`--name v` or `--name=v`), point *v at the value and return the arguments
 * consumed; 0 if it is another flag; -1 with diag when the value is missing.
 */
int moe_plan_cli_value(
    int argc, char **argv, int i, const char *name, const char **v, struct moe_diag *diag);

/* Parse an integer / a number in [lo, hi]; false with diag naming the flag otherwise. */
bool moe_plan_cli_int(
    const char *flag, const char *s, long lo, long hi, int *out, struct moe_diag *diag);
bool moe_plan_cli_double(
    const char *flag, const char *s, double lo, double hi, double *out, struct moe_diag *diag);

/* Help text of the search flags. */
void moe_plan_cli_help(FILE *out);

/*
 * Build a request (moe_plan_request_init first): the model, cluster and GPU count; the layout and
 * options the command line gave (lay, opt, with mres saying which Megatron flags were given: each
 * fixes its dimension); then o's constraints (--fix values override). The global batch is
 * required (--global-batch-size); the sequence length defaults to the model's. MOE_ERR_INVALID
 * with diag naming the flag.
 */
MOE_NODISCARD enum moe_status moe_plan_cli_request(const struct moe_model_cfg *cfg,
                                                   const struct moe_cluster *cl,
                                                   int num_gpus,
                                                   const struct moe_layout *lay,
                                                   const struct moe_options *opt,
                                                   const struct moe_megatron_result *mres,
                                                   const struct moe_plan_cli_opts *o,
                                                   struct moe_plan_request *req,
                                                   struct moe_diag *diag);

/*
 * Thread-safe cache of expert-load statistics around fn, keyed by what the expert-load Monte Carlo
 * (moe_imbalance_auto) reads of a layout: EP and the tokens one EP rank routes per micro-batch and
 * layer, mbs x seq / (CP x TP) -- layouts that differ only in how they make those tokens share one
 * result. Set req->load_fn = moe_plan_load_cache_fn and req->load_ctx = the cache. fn is called
 * outside the cache's lock, from the search's threads at once: it must be thread-safe.
 */
struct moe_plan_load_cache;
struct moe_plan_load_cache *moe_plan_load_cache_create(moe_plan_load_fn fn, void *ctx);
void moe_plan_load_cache_destroy(struct moe_plan_load_cache *c);
MOE_NODISCARD enum moe_status moe_plan_load_cache_fn(void *cache,
                                                     const struct moe_layout *lay,
                                                     struct moe_load_stats *out,
                                                     bool *used,
                                                     struct moe_diag *diag);

/* A load fn for the cache: --moe-imbalance auto's statistics of a layout for the model ctx (a
 * const struct moe_model_cfg *) at the default popularity cv -- the plan command's default. */
MOE_NODISCARD enum moe_status moe_plan_auto_load(void *ctx,
                                                 const struct moe_layout *lay,
                                                 struct moe_load_stats *out,
                                                 bool *used,
                                                 struct moe_diag *diag);

/* Progress bar on stderr: set req->progress = moe_plan_progress_cb, progress_ctx = &pg. Shows
 * only when enabled, stderr is a terminal and a second has passed. */
struct moe_plan_progress {
    const char *cmd;
    bool enabled;
    bool shown;
};
void moe_plan_progress_init(struct moe_plan_progress *pg, const char *cmd, bool enabled);
void moe_plan_progress_cb(void *ctx, double done, double elapsed_s, double evaluated);
/* Clear the bar's line if it was drawn. */
void moe_plan_progress_done(struct moe_plan_progress *pg);

#ifdef __cplusplus
}
#endif

#endif /* MOE_PLANNER_CLIOPT_H */
