/*
 * Predictions against measured training runs (tests/data/published_runs.json, or a user's own
 * runs file), reported honestly: the error of the prediction the cluster profile makes (in sample
 * for runs the profile was fitted to), beside the cross-validated error (the run predicted by a fit
 * without it: the profile's stored leave-one-out error, or a live refit with `refit`; a run the
 * profile never saw is out of sample already), the ranking of layouts (pairs of runs of one model,
 * cluster and GPU count whose measurements differ by more than 5%: ordered as measured?) and the
 * coverage of the 80% intervals. Used by `moefold accuracy` and its test.
 */
#ifndef MOE_CLI_ACCURACY_H
#define MOE_CLI_ACCURACY_H

#include "cli/fit.h"
#include "cli/runs.h"
#include "model/cost.h"
#include "model/status.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_ACCURACY_MAX_RUNS MOE_RUNS_MAX
#define MOE_ACCURACY_RANK_GAP 0.05 /* pairs whose measurements differ by more than this */

struct moe_accuracy_options {
    const char *cluster; /* predict every run on this profile (name or file); NULL: the run's own */
    bool refit;  /* cross-validate by refitting (moefold fit) instead of the stored errors */
    bool sweeps; /* also leave each sweep out whole (runs of one model, cluster and GPU count):
                    one fit without them per sweep of two or more runs; each run's own cluster
                    only (cluster NULL) */
    struct moe_fit_options fit;
};

/* Defaults: each run's own cluster, stored leave-one-out errors, moe_fit_options_init. */
void moe_accuracy_options_init(struct moe_accuracy_options *o);

struct moe_accuracy_row {
    char id[32];
    char model[64];
    char cluster[256];
    char software[64]; /* the run's release; applied when its profile knows it */
    int gpus;
    char metric[32];     /* "tokens_per_s_per_gpu", "tflops_per_gpu" or "step_time_s" */
    double published;    /* measured, in the metric's unit */
    double predicted;    /* with the profile as it is (in sample for its fitted runs) */
    double err_pct;      /* 100 * (predicted / published - 1) */
    bool has_cv;         /* a cross-validated prediction exists */
    double cv_predicted; /* by a fit without this run, or `predicted` for a run the profile never
                            saw */
    double cv_err_pct;
    char cv_basis[48]; /* "leave-one-out", "leave-one-out (refit)" or "unseen by the profile" */
    bool has_sweep;    /* a prediction by a fit without any run of its sweep exists */
    double sweep_predicted; /* that prediction (cv_predicted for a sweep of one run) */
    double sweep_err_pct;
    int sweep_size;       /* runs of its sweep (left out together) */
    bool has_interval;    /* the 80% interval of the cross-validated prediction */
    double lo, hi;        /* in the metric's unit */
    bool covered;         /* the measurement lies inside it */
    bool complete;        /* the source states the whole configuration */
    char known_miss[768]; /* why the model misses this run, "" if it should not */
    char note[512];
    char layout[160];
    double step_time_s;
    double mem_gib;          /* predicted peak per GPU (worst stage) */
    double mem_cap_gib;      /* the GPU's capacity */
    double mem_measured_gib; /* the run's measured peak, 0 = not given */
    bool fits;               /* predicted to fit: the run ran, so anything else is a miss */
    bool ok;                 /* predicted without error */
    char error[640];         /* the diagnostic when !ok */
};

struct moe_accuracy_stats {
    int n;                      /* complete runs predicted (known misses aside) */
    double median_abs, max_abs; /* in sample, fractions */
    int cv_n;
    int cv_unseen; /* of cv_n, runs the profile never saw */
    double cv_median_abs, cv_max_abs;
    int sweep_n; /* of cv_n, runs with a leave-one-sweep-out prediction */
    int sweeps;  /* sweeps of two or more runs among them */
    double sweep_median_abs, sweep_max_abs;
    int sweep_concordant; /* pairs ordered as measured by the leave-one-sweep-out predictions */
    int pairs, concordant, in_sample_concordant;
    int covered, intervals; /* coverage of the cross-validated intervals */
    int ran, ran_fit;       /* runs predicted (each of them ran) and those predicted to fit */
    int mem_n;              /* runs with a measured peak memory */
    double mem_median_abs, mem_max_abs;
};

/* Default runs file: <topologies>/../tests/data/published_runs.json, written into buf[len]. */
const char *moe_accuracy_default_path(char *buf, size_t len);

/*
 * Read the runs file and predict every run (event-simulated schedule) with the default options.
 * rows[max] receives one row per run, *n their number. A run whose flags do not parse or resolve
 * gets ok=false and its error; the file itself being unreadable or malformed is MOE_ERR_IO /
 * MOE_ERR_PARSE / MOE_ERR_INVALID.
 */
MOE_NODISCARD enum moe_status moe_accuracy_run(
    const char *path, struct moe_accuracy_row *rows, int max, int *n, struct moe_diag *diag);

/* The same for a run set already read, with options o. */
MOE_NODISCARD enum moe_status moe_accuracy_run_set(const struct moe_run_set *set,
                                                   const struct moe_accuracy_options *o,
                                                   struct moe_accuracy_row *rows,
                                                   int max,
                                                   int *n,
                                                   struct moe_diag *diag);

/* Summary over the complete runs that are not known misses. */
void moe_accuracy_summarise(const struct moe_accuracy_row *rows,
                            int n,
                            struct moe_accuracy_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* MOE_CLI_ACCURACY_H */
