/*
 * Measured training runs: the published-runs file format ("moefold-published-runs"), which is also
 * the format of a user's own measurements, read into a run set that `moefold accuracy` and
 * `moefold fit` predict. Each run names a cluster, a GPU count, a model (a preset, or Megatron
 * shape flags inside `args`), the Megatron flags of its configuration, the software release it ran
 * (optional), and one measured figure: tokens/s/GPU, TFLOPS/GPU or the step time in seconds.
 *
 *   {"format": "moefold-published-runs", "version": 2, "source": "...",
 *    "software": [{"name": "mbridge-26.04", "date": "2026-04", "stack": "Megatron-Bridge"}],
 *    "runs": [{"id": "B12", "model": "qwen3-235b-a22b", "cluster": "dgx-h100", "gpus": 256,
 *              "software": "mbridge-26.04", "args": "--tensor-model-parallel-size 2 ...",
 *              "metric": "tokens_per_s_per_gpu", "published": 1712, "complete": true,
 *              "memory_gib": 70.1, "known_miss": "...", "note": "..."}]}
 *
 * Version 1 files (no "software", no "memory_gib", no step-time metric) read unchanged. An unknown
 * key is an error naming it. What this module does not do: fit anything (cli/fit.h) or print.
 */
#ifndef MOE_CLI_RUNS_H
#define MOE_CLI_RUNS_H

#include "cli/common.h"
#include "model/cost.h"
#include "model/status.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_RUNS_FORMAT   "moefold-published-runs"
#define MOE_RUNS_VERSION  2
#define MOE_RUNS_MAX      256 /* runs per set */
#define MOE_RUNS_MAX_ARGS 4096

enum moe_run_metric {
    MOE_RUN_TOKENS_PER_S_PER_GPU = 0,
    MOE_RUN_TFLOPS_PER_GPU = 1,
    MOE_RUN_STEP_TIME_S = 2,
};

struct moe_run {
    char id[32];
    char model[64];    /* preset name; "" when args carry Megatron shape flags */
    char cluster[256]; /* cluster name or file */
    int gpus;          /* world size */
    char software[64]; /* software release it ran ("" = not stated) */
    char file[256];    /* the runs file it came from */
    enum moe_run_metric metric;
    double measured;      /* in the metric's unit (the file's "published") */
    double memory_gib;    /* measured peak per GPU (max reserved), 0 = not given */
    bool complete;        /* the source states the whole configuration */
    char known_miss[768]; /* why the model misses this run, "" if it should not */
    char note[512];
    char args[MOE_RUNS_MAX_ARGS]; /* Megatron flags of the configuration */
};

/* A release the runs file describes (for ordering: the newest is a fit's default). */
struct moe_run_release {
    char name[64];
    char date[16]; /* "YYYY-MM" */
    char stack[64];
};

struct moe_run_set {
    struct moe_run *runs; /* [n], owned */
    int n;
    struct moe_run_release releases[32];
    int num_releases;
};

/*
 * Read a runs file and append its runs to set (several files may be read into one set; ids must
 * stay unique). A malformed file or run is MOE_ERR_PARSE / MOE_ERR_INVALID naming the file, the
 * run and the key; nothing is appended then.
 */
MOE_NODISCARD enum moe_status
moe_runs_read(const char *path, struct moe_run_set *set, struct moe_diag *diag);

/* Append one run (the Megatron-log reader's path into a set); ids must stay unique. */
MOE_NODISCARD enum moe_status
moe_runs_add(struct moe_run_set *set, const struct moe_run *run, struct moe_diag *diag);

/* Release the runs. */
void moe_runs_free(struct moe_run_set *set);

/* The metric's name in files ("tokens_per_s_per_gpu", "tflops_per_gpu", "step_time_s"). */
const char *moe_run_metric_name(enum moe_run_metric m);

/*
 * Parse and resolve run r's configuration into p (the same flag parser and rules as `moefold
 * predict`). cl: the cluster to predict it on (NULL: the run's own cluster, with `release`
 * applied: NULL = the file's default, "shared", or a release name). Errors name the run.
 */
MOE_NODISCARD enum moe_status moe_run_problem(const struct moe_run *r,
                                              const struct moe_cluster *cl,
                                              const char *release,
                                              struct moe_cli_problem *p,
                                              struct moe_diag *diag);

/* The run's metric as predicted by pred (same unit as r->measured). */
double moe_run_predicted(const struct moe_run *r, const struct moe_prediction *pred);

/* Where the run's expert parallelism sends tokens: "none" (EP1), "intra" (inside one NVLink
 * domain) or "inter" (across domains); and its precision class "bf16", "fp8" or "fp4". */
const char *moe_run_ep_span(const struct moe_cli_problem *p);
const char *moe_run_precision(const struct moe_cli_problem *p);

#ifdef __cplusplus
}
#endif

#endif /* MOE_CLI_RUNS_H */
