/*
 * A whole training run from one step's prediction: for --train-tokens N, the number of steps
 * Megatron-LM takes (with its --rampup-batch-size batch ramp), the wall-clock time, GPU-hours,
 * energy and money, each with the 80% interval of the step-time prediction carried through.
 *
 * Steps (Megatron-Core's RampupBatchsizeNumMicroBatchesCalculator and training.py's
 * update_train_iters, core_v0.17; `--rampup-batch-size START INCR SAMPLES` was deprecated in
 * favour of --step-batch-size-schedule after that release and is read here as it behaved):
 *
 *   train_samples = floor(N / seq_length)
 *   increments    = (G - START) / INCR            (G = --global-batch-size; must divide)
 *   per_increment = SAMPLES / increments          (a float)
 *   batch(c)      = G                             if c > SAMPLES
 *                 = START + int(c / per_increment) x INCR   otherwise   (c: samples consumed)
 *   steps: c = 0; while c <= SAMPLES and c <= train_samples: c += batch(c), steps += 1;
 *          then steps += (train_samples - c) // G when train_samples > c
 *   (without a ramp: steps = train_samples // G; a partial last batch is thrown away).
 *
 * Each step trains batch(consumed) sequences, consumed counting what was trained; with
 * --decrease-batch-size-if-needed that is batch(c) rounded down to a multiple of micro-batch x
 * DP, without it Megatron asserts the multiple (and so does moefold). The schedule is computed
 * per increment in closed form with the same double arithmetic, so a ramp of millions of steps
 * costs as many operations as it has increments.
 *
 * Time: every step of batch B takes the step time of the plan's layout at B (fewer micro-batches;
 * a smaller batch never needs more memory, so what fits at G fits at B). At most
 * MOE_TRAIN_RAMP_POINTS distinct ramp batches are predicted (the event-simulated schedule); when a
 * ramp has more, the points are spread over its batches and the step time of the others is
 * interpolated linearly in B between them (a 1F1B step is affine in its micro-batch count up to
 * the bubble, which is why a few points suffice).
 *
 * Totals (all from the wall-clock time T of the run on n GPUs):
 *   days      = T / 86400
 *   GPU-hours = n T / 3600
 *   energy    = GPU-hours x (gpu_tdp_w + node_overhead_w_per_gpu) x PUE  (facility MWh), i.e.
 *               every GPU at its TDP and every node at its maximum power for the whole run: the
 *               convention of the Llama 3 model card (GPU-hours x TDP, "adjusted for power usage
 *               efficiency") with the rest of the node added; an upper bound on what is drawn
 *   cost      = GPU-hours x price per GPU-hour
 * and every total's interval is the total scaled by the step-time interval's bounds over the
 * step time (the model's error is shared by every step of one run).
 */
#ifndef MOE_CLI_TRAIN_COST_H
#define MOE_CLI_TRAIN_COST_H

#include "model/status.h"
#include "topologies/cluster_costs.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_TRAIN_RAMP_POINTS    9         /* ramp batches predicted at most; others interpolated */
#define MOE_TRAIN_MAX_TOKENS     1.0e16    /* --train-tokens above this is refused as absurd */
#define MOE_TRAIN_MAX_INCREMENTS 1000000LL /* ramp increments accepted */
#define MOE_TRAIN_MAX_DEADLINE   3650.0    /* days */
#define MOE_TRAIN_MAX_PRICE      1000.0    /* USD per GPU-hour */

enum moe_train_objective {
    MOE_TRAIN_OBJ_TIME = 0,  /* wall-clock days */
    MOE_TRAIN_OBJ_GPU_HOURS, /* GPU-hours */
    MOE_TRAIN_OBJ_COST,      /* USD (needs a price) */
    MOE_TRAIN_OBJ_ENERGY,    /* MWh (needs power figures) */
};

/* The run flags, shared by predict, plan and whatif. */
struct moe_train_flags {
    bool has_tokens;           /* --train-tokens given */
    double train_tokens;       /* tokens */
    bool has_ramp;             /* --rampup-batch-size START INCR SAMPLES */
    long long ramp_start;      /* sequences */
    long long ramp_incr;       /* sequences */
    long long ramp_samples;    /* sequences over which the batch ramps */
    bool decrease_batch;       /* --decrease-batch-size-if-needed */
    double price_per_gpu_hour; /* --price-per-gpu-hour USD; < 0: the cluster file's */
    double pue;                /* --pue; < 0: the cluster file's */
    bool has_objective;        /* --objective given */
    enum moe_train_objective objective;
    double deadline_days; /* --deadline-days; 0: none */
};

void moe_train_flags_init(struct moe_train_flags *f);

/*
 * If argv[i] is one of the run flags, parse it (`--f v` or `--f=v`; --rampup-batch-size takes
 * three values) and return the arguments consumed; 0 if it is another flag; -1 with diag on a bad
 * value (negative, zero, not a number, absurd: a message naming the flag and the accepted range).
 * --train-tokens accepts K, M, G/B and T suffixes (10^3 ... 10^12).
 */
int moe_train_flag(struct moe_train_flags *f, int argc, char **argv, int i, struct moe_diag *diag);

/* Help text for the run flags; ranking: also --objective and --deadline-days (plan). */
void moe_train_flags_help(FILE *out, bool ranking);

/* The flags that need --train-tokens without it, and --objective/--deadline-days where ranking is
 * false (predict, whatif's objective): MOE_ERR_INVALID naming the flag. */
MOE_NODISCARD enum moe_status
moe_train_flags_check(const struct moe_train_flags *f, bool ranking, struct moe_diag *diag);

const char *moe_train_objective_name(enum moe_train_objective o);

/* Consecutive steps at one batch. */
struct moe_train_phase {
    long long batch; /* sequences trained per step (the running global batch) */
    long long steps;
};

/* Megatron's steps for one layout (see the top of this file). */
struct moe_train_schedule {
    long long train_samples;        /* requested: floor(tokens / seq_length) */
    long long steps;                /* Megatron's train_iters */
    long long samples;              /* sequences trained: the sum of every step's batch */
    long long ramp_steps;           /* steps at a batch below --global-batch-size */
    long long gbs;                  /* --global-batch-size */
    int num_phases;                 /* distinct consecutive batches, the last at gbs when reached */
    struct moe_train_phase *phases; /* [num_phases], owned: moe_train_schedule_fini */
};

/*
 * The schedule of f for a layout of global batch gbs, sequence length seq_length and mbs x dp =
 * mbs_dp sequences per micro-batch step. MOE_ERR_INVALID: no tokens, fewer tokens than one global
 * batch, a ramp Megatron refuses (START >= gbs, G - START not a multiple of INCR, too many
 * increments); MOE_ERR_INFEASIBLE: a ramp batch that is not a multiple of mbs_dp (without
 * decrease_batch) or below it (with). Messages name the flag and the batch.
 */
MOE_NODISCARD enum moe_status moe_train_schedule_make(const struct moe_train_flags *f,
                                                      long long gbs,
                                                      int seq_length,
                                                      long long mbs_dp,
                                                      struct moe_train_schedule *out,
                                                      struct moe_diag *diag);
void moe_train_schedule_fini(struct moe_train_schedule *s);

/* Step time of the layout at a (ramp) batch of `batch` sequences. */
typedef enum moe_status (*moe_train_step_fn)(void *ctx,
                                             long long batch,
                                             double *step_s,
                                             struct moe_diag *diag);

/*
 * Wall-clock seconds of the schedule: phases at gbs take full_step_s, ramp phases the step time fn
 * gives (at most MOE_TRAIN_RAMP_POINTS calls, the rest interpolated). *ramp_s, *predicted and
 * *batches (each may be NULL) get the ramp's share of the time, the number of fn calls and the
 * number of distinct ramp batches.
 */
MOE_NODISCARD enum moe_status moe_train_time(const struct moe_train_schedule *s,
                                             double full_step_s,
                                             moe_train_step_fn fn,
                                             void *ctx,
                                             double *time_s,
                                             double *ramp_s,
                                             int *predicted,
                                             int *batches,
                                             struct moe_diag *diag);

/* A figure with its 80% interval (lo = hi = value when the prediction has none). */
struct moe_train_figure {
    double value, lo, hi;
};

/* The run's totals. */
struct moe_train_totals {
    int num_gpus;
    double tokens;                  /* tokens trained (samples x seq_length) */
    struct moe_train_figure time_s; /* wall clock */
    struct moe_train_figure days;   /* time_s / 86400 */
    struct moe_train_figure gpu_hours;
    bool has_interval; /* the step time had an interval */
    bool has_energy;
    double watts_per_gpu; /* gpu_tdp_w + node_overhead_w_per_gpu */
    double pue;
    struct moe_train_figure it_mwh;     /* GPUs and nodes */
    struct moe_train_figure energy_mwh; /* x PUE */
    bool has_cost;
    double price_per_gpu_hour;
    struct moe_train_figure cost_usd;
};

/*
 * Totals of a run of time_s seconds on num_gpus GPUs; lo_ratio / hi_ratio: the step interval's
 * bounds over the step time (1 and 1 without an interval; has_interval says which). Energy when
 * watts_per_gpu > 0 and pue >= 1, cost when price > 0. Pure arithmetic.
 */
void moe_train_totals_compute(double time_s,
                              double tokens,
                              int num_gpus,
                              double lo_ratio,
                              double hi_ratio,
                              bool has_interval,
                              double watts_per_gpu,
                              double pue,
                              double price_per_gpu_hour,
                              struct moe_train_totals *out);

/* The value of the objective of t (days, GPU-hours, USD, MWh); HUGE_VAL when t lacks it. */
double moe_train_objective_value(const struct moe_train_totals *t, enum moe_train_objective o);

/*
 * What the flags and the cluster's costs give for energy and price: *watts per GPU (0 when a power
 * figure is missing), *pue (0 when none), *price per GPU-hour (0 when none), and what is missing
 * for each (missing_power[len], missing_price[len]: "" when complete, else the keys).
 */
void moe_train_inputs(const struct moe_train_flags *f,
                      const struct moe_cluster_costs *c,
                      double *watts,
                      double *pue,
                      double *price,
                      char *missing_power,
                      char *missing_price,
                      size_t len);

/*
 * MOE_ERR_INVALID when the objective needs what the cluster lacks: cost without a price ("give
 * --price-per-gpu-hour or a price section in <cluster>'s file"), energy without power figures
 * (naming each missing key).
 */
MOE_NODISCARD enum moe_status moe_train_check_objective(const struct moe_train_flags *f,
                                                        const struct moe_cluster_costs *c,
                                                        const char *cluster,
                                                        struct moe_diag *diag);

/* Everything one run says, for printing. */
struct moe_train_report {
    const struct moe_train_flags *flags;
    const struct moe_train_schedule *sched;
    const struct moe_train_totals *totals;
    const struct moe_cluster_costs *costs;
    int seq_length;
    double ramp_s;      /* seconds of the run spent in the ramp */
    int ramp_predicted; /* ramp batches predicted */
    int ramp_batches;   /* distinct ramp batches */
    const char *label;  /* printed after "whole run" ("plan 1"); NULL: none */
};

/* The run as text lines (predict): totals, then '#' lines with the assumptions. */
void moe_train_print(FILE *out, const struct moe_train_report *r);

/* The run as a JSON object ("run" in predict/plan/whatif --json); NULL when out of memory. */
cJSON *moe_train_json(const struct moe_train_report *r);

/* "14.8T", "469B", "1.2M" into buf[len]. */
void moe_train_tokens_str(double tokens, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* MOE_CLI_TRAIN_COST_H */
