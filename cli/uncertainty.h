/*
 * How far to trust a prediction: intervals from a cluster profile's measured errors.
 *
 * `moefold fit` writes into the profile, for every run it was fitted to, the leave-one-out error
 * of that run's step time (the run predicted by a fit without it) with the attributes predictions
 * are matched on: GPU generation (the profile's own), precision class (bf16 / fp8 / fp4) and
 * where expert parallelism sends tokens (none / inside one NVLink domain / across domains). A
 * prediction's interval comes from the errors of the runs like it:
 *
 *   s = rms of their log(predicted / measured step time)        (bias included)
 *   step time in [T exp(-t s sqrt(1 + 1/n)), T exp(+t s sqrt(1 + 1/n))]
 *
 * with t Student's t quantile for the level and n - 1 degrees of freedom (GSL), so few runs give a
 * wide interval. Runs like this one: same precision class and EP span if at least
 * MOE_UNC_MIN_RUNS match, else same precision class, else every run of the profile. A profile
 * without runs has no interval, and says so. Memory: the profile's "memory" figure, the relative
 * error of the memory model (sd), gives a symmetric interval and the default planning margin.
 *
 * Plans: two predictions on one cluster share most of their error, so plans are told apart by
 * the spread of the *difference* of the errors of two runs of the same model, cluster and GPU
 * count (pair_sd); with no such pairs, sqrt(2) s.
 */
#ifndef MOE_CLI_UNCERTAINTY_H
#define MOE_CLI_UNCERTAINTY_H

#include "model/status.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_UNC_MAX_RUNS 256
#define MOE_UNC_MIN_RUNS 3
#define MOE_UNC_LEVEL    0.8 /* default two-sided level of every interval moefold prints */

struct moe_unc_run {
    char id[32];
    char model[64];
    char cluster[64];
    int gpus;
    char precision[8];
    char ep_span[8];
    double err_fit; /* log(predicted / measured step time), in sample */
    double err_loo; /* the same, leave-one-out */
};

struct moe_uncertainty {
    int num_runs; /* runs with a leave-one-out error */
    struct moe_unc_run runs[MOE_UNC_MAX_RUNS];
    int num_fit_only; /* runs the profile was fitted to without leave-one-out (fit --no-loo) */
    double run_sd;    /* the fit's model error of one run (log units; 0: not stated): an interval's
                         sd never claims less */
    char source[512];
    bool has_memory;
    double mem_rel_sd; /* relative sd of the memory model */
    char mem_source[320];
};

/* An interval [lo, hi] around a predicted value at `level`, and how it was made. */
struct moe_interval {
    bool ok; /* false: no measured runs to base it on (basis says so) */
    double lo, hi;
    double level;
    double rel_sd; /* s sqrt(1 + 1/n), log units */
    int n;         /* runs it rests on */
    char basis[320];
};

/*
 * Read the "uncertainty" section of a cluster file (name or path). A file without one gives an
 * empty struct (no runs, no memory figure): not an error. A malformed section is MOE_ERR_INVALID.
 */
MOE_NODISCARD enum moe_status
moe_unc_load(const char *cluster, struct moe_uncertainty *u, struct moe_diag *diag);

/*
 * Interval of a predicted step time step_s for a prediction of the given precision class and EP
 * span; exclude_id (may be NULL) leaves that run out (its own error must not vouch for it).
 */
void moe_unc_step(const struct moe_uncertainty *u,
                  const char *precision,
                  const char *ep_span,
                  const char *exclude_id,
                  double step_s,
                  double level,
                  struct moe_interval *out);

/* The same interval for a rate (tokens/s, TFLOPS): the step's bounds inverted. */
void moe_unc_rate(const struct moe_interval *step, double rate, double *lo, double *hi);

/*
 * Relative band two plans' step times must differ by before moefold can tell them apart at
 * `level` (two-sided): t x the rms of the difference of two runs' leave-one-out errors over pairs
 * of runs of one model, cluster and GPU count; sqrt(2) x the step interval's rel_sd without pairs.
 * *pairs gets the number of pairs used. Returns 0 when the profile has no runs.
 */
double moe_unc_tie_band(const struct moe_uncertainty *u, double level, int *pairs);

/*
 * Memory: the interval of a predicted total (bytes) and the default planning margin (the upper
 * end of the interval, as a fraction of the prediction). Without a memory figure: ok = false
 * and margin 0.
 */
void moe_unc_memory(const struct moe_uncertainty *u,
                    double mem_bytes,
                    double level,
                    struct moe_interval *out);
double moe_unc_memory_margin(const struct moe_uncertainty *u, double level);

#ifdef __cplusplus
}
#endif

#endif /* MOE_CLI_UNCERTAINTY_H */
