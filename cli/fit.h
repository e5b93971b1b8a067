/*
 * `moefold fit`: a cluster's software figures fitted to measured runs.
 *
 * A cluster file holds hardware facts (never fitted) and software efficiencies; the latter carry a
 * "prior" (value, sd, physical min/max, source: a microbenchmark where one exists). The fit
 * estimates those figures from measured runs of the cluster's GPU generation (each run keeps its
 * own cluster's hardware) by maximum a posteriori nonlinear least squares (GSL
 * gsl_multifit_nlinear, trust region / Levenberg-Marquardt):
 *
 *   minimise  sum_runs (log(pred_i / measured_i) / run_sd)^2 + sum_figures ((v_j - prior_j)/sd_j)^2
 *             + sum_releases,figures (delta_rj / release_sd)^2
 *
 * over x_j, with v_j = min + (max - min) / (1 + exp(-x_j)) keeping every figure inside its physical
 * range. A figure whose prior has "scope": "cluster" (host CPU, network, GEMM of the exact GPU)
 * is an unknown per cluster, informed only by runs on that cluster; the others are shared by the
 * generation, so every cluster file of a generation gets the same shared figures. Only the figures
 * the runs constrain are fitted: at the prior, the posterior standard deviation of a figure (data
 * plus priors, correlations included) must fall below constrain_ratio x its prior sd; the rest keep
 * their prior and say so. A software release with runs of its own gets offsets delta_rj on the
 * logistic scale for the figures its runs constrain, shrunk towards the generation's shared value
 * by their prior (a hierarchical prior). Standard errors come from the Jacobian at the optimum (the
 * data rows rescaled when the runs scatter more than run_sd). Leave-one-out: each run is predicted
 * by a fit without it (the figure selection redone), the honest out-of-sample error.
 *
 * What this module does not do: print (cmd_fit.c), or fit hardware facts or memory figures.
 */
#ifndef MOE_CLI_FIT_H
#define MOE_CLI_FIT_H

#include "cli/runs.h"
#include "model/status.h"
#include "topologies/json_util.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_FIT_MAX_PARAMS   96
#define MOE_FIT_MAX_CLUSTERS 8 /* clusters whose own figures one fit estimates */
#define MOE_FIT_MAX_RELEASES 16

struct moe_fit_options {
    double run_sd;          /* model error of one run, log units (0.05: 5%) */
    double release_sd;      /* prior sd of a release's offset, logistic units */
    double constrain_ratio; /* fitted when posterior sd < this x prior sd */
    double incomplete_sd;   /* runs whose configuration is not fully stated are fitted with this
                               x run_sd (their unstated settings add error); 0: left out */
    bool loo;               /* leave-one-out predictions */
    bool releases;          /* per-release figures */
    bool from_priors;       /* each figure held to its prior as the cluster file states it (make
                               fit: the shipped profiles from the microbenchmark priors); false:
                               held to the file's current value with the prior's sd (a profile
                               already fitted, refined by the user's own runs) */
};

/* Defaults: run_sd 0.05, incomplete runs at 2 x run_sd, release_sd 0.3, constrain_ratio 0.95,
 * LOO and releases on, priors centred on the file's current values (from_priors false). */
void moe_fit_options_init(struct moe_fit_options *o);

struct moe_fit_param {
    char path[64]; /* "gemm.grouped_eff" */
    int cluster;   /* -1: the generation's (every run); k >= 0: clusters[k]'s own figure
                      (prior "scope": "cluster"; only runs on that cluster inform it) */
    size_t offset; /* in struct moe_cluster */
    struct moe_json_prior prior;
    bool constrained;      /* fitted (the runs constrain it) */
    double value;          /* fitted value, or the prior's when not constrained */
    double se;             /* standard error; the prior sd when not constrained */
    double sd_ratio;       /* posterior / prior sd at the prior (1: the runs say nothing) */
    double file_value;     /* the cluster file's value before this fit (its "value") */
    double file_se;        /* its "se", or the prior sd where it has none */
    char file_source[768]; /* its "source" */
    char runs[256];        /* ids of the runs that constrain it, comma separated */
    int borrowed;          /* >= 0: not constrained by runs of its own cluster, it takes the
                              fitted value of params[borrowed], the same figure of a cluster of
                              the generation with the same prior (the same host or network
                              class); -1: none */
};

struct moe_fit_release {
    char name[64];
    char date[16];
    char stack[64];
    int num_runs;
    char runs[256];
    bool has[MOE_FIT_MAX_PARAMS]; /* the release has its own value of params[j] */
    double value[MOE_FIT_MAX_PARAMS];
    double se[MOE_FIT_MAX_PARAMS];
};

struct moe_fit_run {
    const struct moe_run *run;
    bool used;       /* in the fit */
    char why[200];   /* why not, when !used */
    bool ok;         /* predicted without error */
    char error[512]; /* when !ok */
    char precision[8];
    char ep_span[8];
    int release;       /* index into releases, -1 none */
    double pred_prior; /* metric predicted with the priors */
    double pred_fit;   /* with the fitted figures (in sample for used runs) */
    double pred_loo;   /* by the fit without this run; 0 when not computed */
    double step_s;     /* fitted step time */
    double mem_gib;    /* predicted peak memory per GPU */
};

struct moe_fit_result {
    char base[256];                          /* cluster name or file fitted */
    char generation[64];                     /* its GPU generation */
    char clusters[MOE_FIT_MAX_CLUSTERS][64]; /* [0] the base; then other clusters with runs */
    int num_clusters;
    struct moe_fit_param params[MOE_FIT_MAX_PARAMS];
    int num_params;
    struct moe_fit_release releases[MOE_FIT_MAX_RELEASES];
    int num_releases;
    char default_release[64]; /* newest release with figures of its own ("" none) */
    struct moe_fit_run *runs; /* [num_runs], one per run of the set */
    int num_runs;
    int num_used;
    int num_used_on_base; /* used runs on the base cluster itself (its name or file) */
    int iterations;
    double rms_fit; /* rms of log(pred/measured) over used runs, in sample */
    double rms_loo; /* the same, leave-one-out */
    struct moe_fit_options opt;
};

/*
 * Fit the software figures of cluster `base` (name or file) to the runs in set (those on clusters
 * of the same GPU generation, incomplete ones with a wider error unless left out). res is filled
 * (free with moe_fit_result_free). Errors: the base file unreadable or without priors, no usable
 * run (every run's reason is in the message), MOE_ERR_NOMEM; a run whose configuration does not
 * parse is not an error: it is reported in res->runs with its message and left out.
 */
MOE_NODISCARD enum moe_status moe_fit(const char *base,
                                      const struct moe_run_set *set,
                                      const struct moe_fit_options *o,
                                      struct moe_fit_result *res,
                                      struct moe_diag *diag);

void moe_fit_result_free(struct moe_fit_result *res);

/*
 * Write the fitted profile: base's cluster file with every fitted figure's value, "se" and source
 * ("fit: <run ids> (...)", or "prior (no run constrains it): ..."), a "software" section with the
 * releases and an "uncertainty" section (each run's in-sample and leave-one-out errors, with the
 * attributes predict matches on). runs_desc names the runs files in the sources. The file is
 * written atomically (nothing partial on failure).
 */
MOE_NODISCARD enum moe_status moe_fit_write(const struct moe_fit_result *res,
                                            const char *runs_desc,
                                            const char *out_path,
                                            struct moe_diag *diag);

#ifdef __cplusplus
}
#endif

#endif /* MOE_CLI_FIT_H */
