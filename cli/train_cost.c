/*
 * A whole training run from one step's prediction (cli/train_cost.h): the run flags, Megatron's
 * step schedule with its batch ramp, wall-clock time over the schedule, and the totals with their
 * intervals, energy and cost, as text and JSON. Nothing here predicts a step: callers hand in the
 * step time at the global batch and a function for the ramp's smaller batches.
 */
#include "cli/train_cost.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SECONDS_PER_DAY  86400.0
#define SECONDS_PER_HOUR 3600.0

static const char *const objective_names[] = {"time", "gpu-hours", "cost", "energy"};

const char *moe_train_objective_name(enum moe_train_objective o)
{
    return (unsigned)o < MOE_ARRAY_LEN(objective_names) ? objective_names[o] : "?";
}

void moe_train_flags_init(struct moe_train_flags *f)
{
    memset(f, 0, sizeof(*f));
    f->price_per_gpu_hour = -1.0;
    f->pue = -1.0;
    f->objective = MOE_TRAIN_OBJ_TIME;
}

/* `--name v` or `--name=v` at argv[i]: *v and the arguments consumed; 0 if not this flag. */
static int value_of(int argc, char **argv, int i, const char *name, const char **v)
{
    size_t n = strlen(name);
    if (strncmp(argv[i], name, n) != 0) {
        return 0;
    }
    if (argv[i][n] == '=') {
        *v = argv[i] + n + 1;
        return 1;
    }
    if (argv[i][n] != '\0') {
        return 0;
    }
    *v = i + 1 < argc ? argv[i + 1] : NULL;
    return 2;
}

/* A number with an optional K/M/G/B/T suffix (powers of 1000); false when malformed. */
static bool parse_scaled(const char *s, double *out)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s) {
        return false;
    }
    static const struct {
        char c;
        double scale;
    } suffixes[] = {{'K', 1e3}, {'M', 1e6}, {'G', 1e9}, {'B', 1e9}, {'T', 1e12}};
    if (*end != '\0') {
        char c = (char)(*end >= 'a' && *end <= 'z' ? *end - 'a' + 'A' : *end);
        bool found = false;
        for (size_t k = 0; k < MOE_ARRAY_LEN(suffixes) && !found; k++) {
            if (c == suffixes[k].c) {
                v *= suffixes[k].scale;
                found = true;
            }
        }
        if (!found || end[1] != '\0') {
            return false;
        }
    }
    *out = v;
    return isfinite(v);
}

/* A number in [lo, hi] (lo excluded when open_lo); -1 with diag otherwise. */
static int number_flag(const char *flag,
                       const char *v,
                       double lo,
                       double hi,
                       bool open_lo,
                       const char *unit,
                       double *out,
                       struct moe_diag *diag)
{
    double x = 0.0;
    moe_diag_source(diag, flag);
    if (v == NULL) {
        (void)moe_diag_set(diag, MOE_ERR_INVALID, "%s needs a value (%s)", flag, unit);
        return -1;
    }
    if (!parse_scaled(v, &x) || (open_lo ? !(x > lo) : !(x >= lo)) || !(x <= hi)) {
        (void)moe_diag_set(diag, MOE_ERR_INVALID, "%s '%s': expected %s in %s%g, %g]", flag, v,
                           unit, open_lo ? "(" : "[", lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

/* A positive whole number of sequences for --rampup-batch-size. */
static bool ramp_value(const char *s, const char *what, long long *out, struct moe_diag *diag)
{
    double x = 0.0;
    if (s == NULL || !parse_scaled(s, &x) || !(x >= 1.0) || x > 1e15 || floor(x) != x) {
        moe_diag_source(diag, "--rampup-batch-size");
        (void)moe_diag_set(diag, MOE_ERR_INVALID,
                           "--rampup-batch-size %s '%s': expected a whole number of sequences "
                           ">= 1 (START INCR SAMPLES, as Megatron-LM's flag)",
                           what, s != NULL ? s : "");
        return false;
    }
    *out = (long long)x;
    return true;
}

static int parse_objective(struct moe_train_flags *f, const char *v, struct moe_diag *diag)
{
    for (size_t k = 0; v != NULL && k < MOE_ARRAY_LEN(objective_names); k++) {
        if (strcmp(v, objective_names[k]) == 0) {
            f->objective = (enum moe_train_objective)k;
            f->has_objective = true;
            return 0;
        }
    }
    moe_diag_source(diag, "--objective");
    (void)moe_diag_set(diag, MOE_ERR_INVALID,
                       "--objective '%s': expected time, gpu-hours, cost or energy",
                       v != NULL ? v : "");
    return -1;
}

int moe_train_flag(struct moe_train_flags *f, int argc, char **argv, int i, struct moe_diag *diag)
{
    const char *v = NULL;
    int used = 0;
    if (strcmp(argv[i], "--decrease-batch-size-if-needed") == 0) {
        f->decrease_batch = true;
        return 1;
    }
    if (strcmp(argv[i], "--rampup-batch-size") == 0) {
        const char *names[3] = {"START", "INCR", "SAMPLES"};
        long long *dst[3] = {&f->ramp_start, &f->ramp_incr, &f->ramp_samples};
        for (int k = 0; k < 3; k++) {
            if (!ramp_value(i + 1 + k < argc ? argv[i + 1 + k] : NULL, names[k], dst[k], diag)) {
                return -1;
            }
        }
        f->has_ramp = true;
        return 4;
    }
    if ((used = value_of(argc, argv, i, "--train-tokens", &v)) != 0) {
        f->has_tokens = true;
        return number_flag("--train-tokens", v, 0.0, MOE_TRAIN_MAX_TOKENS, true,
                           "a token count (K/M/B/T suffixes)", &f->train_tokens, diag) < 0
                   ? -1
                   : used;
    }
    if ((used = value_of(argc, argv, i, "--price-per-gpu-hour", &v)) != 0) {
        return number_flag("--price-per-gpu-hour", v, 0.0, MOE_TRAIN_MAX_PRICE, true,
                           "USD per GPU-hour", &f->price_per_gpu_hour, diag) < 0
                   ? -1
                   : used;
    }
    if ((used = value_of(argc, argv, i, "--pue", &v)) != 0) {
        return number_flag("--pue", v, 1.0, 3.0, false, "a power usage effectiveness", &f->pue,
                           diag) < 0
                   ? -1
                   : used;
    }
    if ((used = value_of(argc, argv, i, "--deadline-days", &v)) != 0) {
        return number_flag("--deadline-days", v, 0.0, MOE_TRAIN_MAX_DEADLINE, true, "days",
                           &f->deadline_days, diag) < 0
                   ? -1
                   : used;
    }
    if ((used = value_of(argc, argv, i, "--objective", &v)) != 0) {
        return parse_objective(f, v, diag) < 0 ? -1 : used;
    }
    return 0;
}

void moe_train_flags_help(FILE *out, bool ranking)
{
    fprintf(out,
            "whole run (days, GPU-hours, energy, cost; cli/train_cost.h):\n"
            "  --train-tokens N        tokens to train (K/M/B/T suffixes: 14.8T)\n"
            "  --rampup-batch-size START INCR SAMPLES\n"
            "                          Megatron-LM's batch ramp: START sequences per step, +INCR\n"
            "                          per (G-START)/INCR equal shares of SAMPLES sequences\n"
            "  --decrease-batch-size-if-needed\n"
            "                          round ramp batches down to micro-batch x DP (Megatron's\n"
            "                          flag; without it a ramp batch must be a multiple)\n"
            "  --price-per-gpu-hour X  USD per GPU-hour (default: the cluster file's price)\n"
            "  --pue X                 facility / IT power (default: the cluster file's PUE)\n");
    if (ranking) {
        fprintf(
            out,
            "  --objective O           rank plans by time, gpu-hours, cost or energy of the run\n"
            "                          (default time)\n"
            "  --deadline-days D       keep only plans that finish within D days\n");
    }
}

enum moe_status
moe_train_flags_check(const struct moe_train_flags *f, bool ranking, struct moe_diag *diag)
{
    const char *needs = NULL;
    if (f->has_ramp) {
        needs = "--rampup-batch-size";
    } else if (f->decrease_batch) {
        needs = "--decrease-batch-size-if-needed";
    } else if (f->price_per_gpu_hour >= 0.0) {
        needs = "--price-per-gpu-hour";
    } else if (f->pue >= 0.0) {
        needs = "--pue";
    } else if (f->has_objective) {
        needs = "--objective";
    } else if (f->deadline_days > 0.0) {
        needs = "--deadline-days";
    }
    if (needs != NULL && !f->has_tokens) {
        moe_diag_source(diag, needs);
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "%s is about a whole run: give --train-tokens N (the tokens to train)",
                            needs);
    }
    if (!ranking && (f->has_objective || f->deadline_days > 0.0)) {
        const char *flag = f->has_objective ? "--objective" : "--deadline-days";
        moe_diag_source(diag, flag);
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "%s ranks and filters plans: use it with `moefold plan`", flag);
    }
    return MOE_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Megatron's schedule                                                                          */

/* The ramp as Megatron-Core's calculator holds it. */
struct ramp {
    long long start, incr, samples, gbs, increments;
    double per_increment;
};

/* Megatron's current_global_batch_size after c samples. */
static long long nominal_batch(const struct ramp *r, long long c)
{
    if (c > r->samples) {
        return r->gbs;
    }
    long long k = (long long)((double)c / r->per_increment);
    if (k > r->increments) {
        k = r->increments; /* Megatron asserts batch <= gbs; rounding cannot reach past it */
    }
    return r->start + k * r->incr;
}

/*
 * Steps at batch b from c on before the batch changes or c passes limit: the smallest n >= 1 with
 * nominal_batch(c + n b) != nominal_batch(c) or c + n b > limit (both monotone in n).
 */
static long long steps_at(const struct ramp *r, long long c, long long b, long long limit)
{
    long long cur = nominal_batch(r, c);
    long long k = (cur - r->start) / r->incr;
    double next = (double)(k + 1) * r->per_increment;
    long long n_inc = (long long)ceil((next - (double)c) / (double)b);
    long long n_lim = (limit - c) / b + 1;
    long long n = n_inc < n_lim ? n_inc : n_lim;
    if (n < 1) {
        n = 1;
    }
#define MOVED(m) (c + (m)*b > limit || nominal_batch(r, c + (m)*b) != cur)
    while (n > 1 && MOVED(n - 1)) {
        n--;
    }
    while (!MOVED(n)) {
        n++;
    }
#undef MOVED
    return n;
}

static enum moe_status
add_phase(struct moe_train_schedule *s, long long batch, long long steps, struct moe_diag *diag)
{
    if (s->num_phases > 0 && s->phases[s->num_phases - 1].batch == batch) {
        s->phases[s->num_phases - 1].steps += steps;
        return MOE_OK;
    }
    struct moe_train_phase *p = realloc(s->phases, (size_t)(s->num_phases + 1) * sizeof(*p));
    if (p == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the batch ramp");
    }
    s->phases = p;
    s->phases[s->num_phases].batch = batch;
    s->phases[s->num_phases].steps = steps;
    s->num_phases++;
    return MOE_OK;
}

/* The batch a step trains at nominal batch b: b, or b rounded down to mbs_dp. */
static enum moe_status running_batch(const struct moe_train_flags *f,
                                     long long b,
                                     long long mbs_dp,
                                     long long *out,
                                     struct moe_diag *diag)
{
    moe_diag_source(diag, "--rampup-batch-size");
    if (f->decrease_batch) {
        *out = b / mbs_dp * mbs_dp;
        if (*out < 1) {
            return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                                "ramp batch %lld is below micro-batch x DP = %lld sequences: no "
                                "micro-batch to run; start the ramp at %lld or more",
                                b, mbs_dp, mbs_dp);
        }
        return MOE_OK;
    }
    if (b % mbs_dp != 0) {
        return moe_diag_set(
            diag, MOE_ERR_INFEASIBLE,
            "ramp batch %lld is not a multiple of micro-batch x DP = %lld (Megatron "
            "asserts it): give START and INCR as multiples of %lld, or "
            "--decrease-batch-size-if-needed",
            b, mbs_dp, mbs_dp);
    }
    *out = b;
    return MOE_OK;
}

static enum moe_status
ramp_of(const struct moe_train_flags *f, long long gbs, struct ramp *r, struct moe_diag *diag)
{
    moe_diag_source(diag, "--rampup-batch-size");
    if (f->ramp_start >= gbs) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--rampup-batch-size START %lld %s --global-batch-size %lld: %s",
                            f->ramp_start, f->ramp_start == gbs ? "equals" : "is above", gbs,
                            f->ramp_start == gbs ? "no ramp (Megatron divides by zero here); drop "
                                                   "--rampup-batch-size"
                                                 : "a ramp goes up to the global batch");
    }
    if ((gbs - f->ramp_start) % f->ramp_incr != 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--rampup-batch-size: global batch %lld - START %lld = %lld is not a "
                            "multiple of INCR %lld (Megatron asserts it)",
                            gbs, f->ramp_start, gbs - f->ramp_start, f->ramp_incr);
    }
    r->start = f->ramp_start;
    r->incr = f->ramp_incr;
    r->samples = f->ramp_samples;
    r->gbs = gbs;
    r->increments = (gbs - f->ramp_start) / f->ramp_incr;
    if (r->increments > MOE_TRAIN_MAX_INCREMENTS) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--rampup-batch-size: %lld increments of %lld (over %lld); use a "
                            "larger INCR",
                            r->increments, r->incr, MOE_TRAIN_MAX_INCREMENTS);
    }
    r->per_increment = (double)r->samples / (double)r->increments;
    moe_diag_source(diag, "");
    return MOE_OK;
}

/* update_train_iters: Megatron's step count for the ramp. */
static long long ramp_iterations(const struct ramp *r, long long train_samples)
{
    long long c = 0;
    long long it = 0;
    long long limit = r->samples < train_samples ? r->samples : train_samples;
    while (c <= r->samples && c <= train_samples) {
        long long b = nominal_batch(r, c);
        long long n = steps_at(r, c, b, limit);
        c += n * b;
        it += n;
    }
    if (train_samples > c) {
        it += (train_samples - c) / r->gbs;
    }
    return it;
}

/* The steps as trained: batch(consumed), rounded as the flags say, until the step count. */
static enum moe_status ramp_phases(const struct moe_train_flags *f,
                                   const struct ramp *r,
                                   long long mbs_dp,
                                   struct moe_train_schedule *s,
                                   struct moe_diag *diag)
{
    long long consumed = 0;
    long long left = s->steps;
    while (left > 0) {
        if (consumed > r->samples) {
            MOE_TRY(add_phase(s, r->gbs, left, diag));
            consumed += left * r->gbs;
            break;
        }
        long long b = nominal_batch(r, consumed);
        long long run = 0;
        MOE_TRY(running_batch(f, b, mbs_dp, &run, diag));
        long long n = steps_at(r, consumed, run, r->samples);
        n = n < left ? n : left;
        MOE_TRY(add_phase(s, run, n, diag));
        if (run < r->gbs) {
            s->ramp_steps += n;
        }
        consumed += n * run;
        left -= n;
    }
    s->samples = consumed;
    moe_diag_source(diag, "");
    return MOE_OK;
}

enum moe_status moe_train_schedule_make(const struct moe_train_flags *f,
                                        long long gbs,
                                        int seq_length,
                                        long long mbs_dp,
                                        struct moe_train_schedule *out,
                                        struct moe_diag *diag)
{
    memset(out, 0, sizeof(*out));
    if (!f->has_tokens || seq_length <= 0 || gbs <= 0 || mbs_dp <= 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "a run needs --train-tokens, a sequence length and a global batch");
    }
    double samples = floor(f->train_tokens / seq_length);
    if (samples < (double)gbs) {
        moe_diag_source(diag, "--train-tokens");
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--train-tokens %.4g is less than one global batch (%lld sequences x "
                            "%d tokens = %.4g tokens)",
                            f->train_tokens, gbs, seq_length, (double)gbs * seq_length);
    }
    out->train_samples = (long long)samples;
    out->gbs = gbs;
    if (!f->has_ramp) {
        out->steps = out->train_samples / gbs;
        out->samples = out->steps * gbs;
        return add_phase(out, gbs, out->steps, diag);
    }
    struct ramp r;
    MOE_TRY(ramp_of(f, gbs, &r, diag));
    out->steps = ramp_iterations(&r, out->train_samples);
    enum moe_status st = ramp_phases(f, &r, mbs_dp, out, diag);
    if (st != MOE_OK) {
        moe_train_schedule_fini(out);
    }
    return st;
}

void moe_train_schedule_fini(struct moe_train_schedule *s)
{
    free(s->phases);
    s->phases = NULL;
    s->num_phases = 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Time                                                                                         */

/* The distinct ramp batches of s, ascending (the ramp only grows), into *out[*n] (malloc'd). */
static enum moe_status
ramp_batches(const struct moe_train_schedule *s, long long **out, int *n, struct moe_diag *diag)
{
    *n = 0;
    *out = malloc((size_t)(s->num_phases + 1) * sizeof(**out));
    if (*out == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the batch ramp");
    }
    for (int i = 0; i < s->num_phases; i++) {
        long long b = s->phases[i].batch;
        if (b != s->gbs && (*n == 0 || (*out)[*n - 1] != b)) {
            (*out)[(*n)++] = b;
        }
    }
    return MOE_OK;
}

/* Step time of batch b from the predicted points (pts[i] with has[i]): exact or interpolated. */
static double step_of(long long b, const long long *bs, const double *t, const bool *has, int n)
{
    int lo = -1;
    for (int i = 0; i < n; i++) {
        if (bs[i] == b && has[i]) {
            return t[i];
        }
        if (has[i] && bs[i] < b) {
            lo = i;
        }
    }
    int hi = -1;
    for (int i = n - 1; i >= 0; i--) {
        if (has[i] && bs[i] > b) {
            hi = i;
        }
    }
    if (lo < 0 || hi < 0) {
        return lo >= 0 ? t[lo] : t[hi];
    }
    double w = (double)(b - bs[lo]) / (double)(bs[hi] - bs[lo]);
    return t[lo] + w * (t[hi] - t[lo]);
}

enum moe_status moe_train_time(const struct moe_train_schedule *s,
                               double full_step_s,
                               moe_train_step_fn fn,
                               void *ctx,
                               double *time_s,
                               double *ramp_s,
                               int *predicted,
                               int *batches,
                               struct moe_diag *diag)
{
    long long *bs = NULL;
    int n = 0;
    MOE_TRY(ramp_batches(s, &bs, &n, diag));
    double *t = calloc((size_t)n + 1, sizeof(*t));
    bool *has = calloc((size_t)n + 1, sizeof(*has));
    enum moe_status st = t != NULL && has != NULL
                             ? MOE_OK
                             : moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the ramp");
    int calls = 0;
    /* Points spread over the ramp's batches, its first and last included. */
    int points = n <= MOE_TRAIN_RAMP_POINTS ? n : MOE_TRAIN_RAMP_POINTS;
    for (int j = 0; st == MOE_OK && j < points; j++) {
        int i = points == 1 ? 0 : (int)llround((double)j * (n - 1) / (points - 1));
        if (!has[i]) {
            st = fn(ctx, bs[i], &t[i], diag);
            has[i] = st == MOE_OK;
            calls++;
        }
    }
    double total = 0.0;
    double ramp = 0.0;
    for (int i = 0; st == MOE_OK && i < s->num_phases; i++) {
        const struct moe_train_phase *p = &s->phases[i];
        double step = p->batch == s->gbs ? full_step_s : step_of(p->batch, bs, t, has, n);
        total += (double)p->steps * step;
        ramp += p->batch == s->gbs ? 0.0 : (double)p->steps * step;
    }
    if (st == MOE_OK) {
        *time_s = total;
        if (ramp_s != NULL) {
            *ramp_s = ramp;
        }
        if (predicted != NULL) {
            *predicted = calls;
        }
        if (batches != NULL) {
            *batches = n;
        }
    }
    free(bs);
    free(t);
    free(has);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Totals                                                                                       */

static struct moe_train_figure scaled(double v, double lo_ratio, double hi_ratio)
{
    struct moe_train_figure f = {v, v * lo_ratio, v * hi_ratio};
    return f;
}

void moe_train_totals_compute(double time_s,
                              double tokens,
                              int num_gpus,
                              double lo_ratio,
                              double hi_ratio,
                              bool has_interval,
                              double watts_per_gpu,
                              double pue,
                              double price_per_gpu_hour,
                              struct moe_train_totals *out)
{
    memset(out, 0, sizeof(*out));
    if (!has_interval) {
        lo_ratio = 1.0;
        hi_ratio = 1.0;
    }
    out->num_gpus = num_gpus;
    out->tokens = tokens;
    out->has_interval = has_interval;
    double gpu_hours = time_s * num_gpus / SECONDS_PER_HOUR;
    out->time_s = scaled(time_s, lo_ratio, hi_ratio);
    out->days = scaled(time_s / SECONDS_PER_DAY, lo_ratio, hi_ratio);
    out->gpu_hours = scaled(gpu_hours, lo_ratio, hi_ratio);
    if (watts_per_gpu > 0.0 && pue >= 1.0) {
        double it_mwh = gpu_hours * watts_per_gpu / 1e6;
        out->has_energy = true;
        out->watts_per_gpu = watts_per_gpu;
        out->pue = pue;
        out->it_mwh = scaled(it_mwh, lo_ratio, hi_ratio);
        out->energy_mwh = scaled(it_mwh * pue, lo_ratio, hi_ratio);
    }
    if (price_per_gpu_hour > 0.0) {
        out->has_cost = true;
        out->price_per_gpu_hour = price_per_gpu_hour;
        out->cost_usd = scaled(gpu_hours * price_per_gpu_hour, lo_ratio, hi_ratio);
    }
}

double moe_train_objective_value(const struct moe_train_totals *t, enum moe_train_objective o)
{
    switch (o) {
    case MOE_TRAIN_OBJ_TIME:
        return t->days.value;
    case MOE_TRAIN_OBJ_GPU_HOURS:
        return t->gpu_hours.value;
    case MOE_TRAIN_OBJ_COST:
        return t->has_cost ? t->cost_usd.value : HUGE_VAL;
    case MOE_TRAIN_OBJ_ENERGY:
        return t->has_energy ? t->energy_mwh.value : HUGE_VAL;
    }
    return HUGE_VAL;
}

void moe_train_inputs(const struct moe_train_flags *f,
                      const struct moe_cluster_costs *c,
                      double *watts,
                      double *pue,
                      double *price,
                      char *missing_power,
                      char *missing_price,
                      size_t len)
{
    bool complete = moe_cluster_costs_missing_power(c, f->pue >= 0.0, missing_power, len);
    *watts = complete ? c->gpu_tdp_w + c->node_overhead_w_per_gpu : 0.0;
    *pue = f->pue >= 0.0 ? f->pue : (c->has_pue ? c->pue : 0.0);
    *price = f->price_per_gpu_hour >= 0.0 ? f->price_per_gpu_hour
                                          : (c->has_price ? c->price_per_gpu_hour_usd : 0.0);
    (void)snprintf(missing_price, len, "%s", *price > 0.0 ? "" : "price.per_gpu_hour_usd");
}

enum moe_status moe_train_check_objective(const struct moe_train_flags *f,
                                          const struct moe_cluster_costs *c,
                                          const char *cluster,
                                          struct moe_diag *diag)
{
    double watts = 0.0;
    double pue = 0.0;
    double price = 0.0;
    char missing_power[128];
    char missing_price[128];
    moe_train_inputs(f, c, &watts, &pue, &price, missing_power, missing_price,
                     sizeof(missing_power));
    moe_diag_source(diag, "--objective");
    if (f->objective == MOE_TRAIN_OBJ_COST && price <= 0.0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--objective cost: cluster %s has no price (no \"price\" section in "
                            "its file): give --price-per-gpu-hour USD",
                            cluster);
    }
    if (f->objective == MOE_TRAIN_OBJ_ENERGY && missing_power[0] != '\0') {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--objective energy: cluster %s has no power data: its file lacks %s "
                            "(add them as {\"value\", \"source\"} figures under \"power\"%s)",
                            cluster, missing_power,
                            strstr(missing_power, "pue") != NULL ? ", or pass --pue" : "");
    }
    moe_diag_source(diag, "");
    return MOE_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Output                                                                                       */

void moe_train_tokens_str(double tokens, char *buf, size_t len)
{
    static const struct {
        double scale;
        const char *suffix;
    } units[] = {{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "K"}};
    for (size_t i = 0; i < MOE_ARRAY_LEN(units); i++) {
        if (tokens >= units[i].scale) {
            (void)snprintf(buf, len, "%.4g%s", tokens / units[i].scale, units[i].suffix);
            return;
        }
    }
    (void)snprintf(buf, len, "%.0f", tokens);
}

/* "1.23M", "456k", "12.3" for large counts. */
static void count_str(double v, char *buf, size_t len)
{
    if (v >= 1e9) {
        (void)snprintf(buf, len, "%.4gG", v / 1e9);
    } else if (v >= 1e6) {
        (void)snprintf(buf, len, "%.4gM", v / 1e6);
    } else if (v >= 1e4) {
        (void)snprintf(buf, len, "%.4gk", v / 1e3);
    } else {
        (void)snprintf(buf, len, "%.4g", v);
    }
}

static void print_figure(FILE *out,
                         const char *name,
                         const char *prefix,
                         const struct moe_train_figure *f,
                         const char *unit,
                         bool interval)
{
    char v[32];
    char lo[32];
    char hi[32];
    char text[64];
    count_str(f->value, v, sizeof(v));
    count_str(f->lo, lo, sizeof(lo));
    count_str(f->hi, hi, sizeof(hi));
    (void)snprintf(text, sizeof(text), "%s%s%s%s", prefix, v, unit[0] != '\0' ? " " : "", unit);
    fprintf(out, "  %-12s %-16s", name, text);
    if (interval) {
        fprintf(out, " (80%% interval %s%s - %s%s)", prefix, lo, prefix, hi);
    }
    fprintf(out, "\n");
}

void moe_train_print(FILE *out, const struct moe_train_report *r)
{
    const struct moe_train_flags *f = r->flags;
    const struct moe_train_schedule *s = r->sched;
    const struct moe_train_totals *t = r->totals;
    char want[32];
    char got[32];
    moe_train_tokens_str(f->train_tokens, want, sizeof(want));
    moe_train_tokens_str(t->tokens, got, sizeof(got));
    fprintf(out, "\nwhole run%s%s%s: %s tokens (%s trained: %lld steps of %lld x %d tokens",
            r->label != NULL ? " (" : "", r->label != NULL ? r->label : "",
            r->label != NULL ? ")" : "", want, got, s->steps, s->gbs, r->seq_length);
    if (f->has_ramp) {
        fprintf(out, ", %lld of them in the batch ramp %lld -> %lld over %lld samples",
                s->ramp_steps, f->ramp_start, s->gbs, f->ramp_samples);
    }
    fprintf(out, ") on %d GPUs\n", t->num_gpus);
    print_figure(out, "wall clock", "", &t->days, "days", t->has_interval);
    print_figure(out, "GPU-hours", "", &t->gpu_hours, "", t->has_interval);
    if (t->has_energy) {
        print_figure(out, "energy", "", &t->energy_mwh, "MWh", t->has_interval);
    } else {
        char missing[128];
        (void)moe_cluster_costs_missing_power(r->costs, f->pue >= 0.0, missing, sizeof(missing));
        fprintf(out, "  %-12s unknown: the cluster file lacks %s\n", "energy", missing);
    }
    if (t->has_cost) {
        print_figure(out, "cost", "$", &t->cost_usd, "", t->has_interval);
    } else {
        fprintf(out, "  %-12s unknown: no price (give --price-per-gpu-hour)\n", "cost");
    }
    if (f->has_ramp) {
        fprintf(out,
                "# ramp: %.2f days at %d smaller batches (%d predicted, the rest "
                "interpolated in the batch)\n",
                r->ramp_s / SECONDS_PER_DAY, r->ramp_batches, r->ramp_predicted);
    }
    if (t->has_energy) {
        fprintf(out,
                "# energy: every GPU at %.0f W and its node's share at %.0f W (maximum power) for "
                "the whole run, x PUE %.2f%s: an upper bound; %.4g MWh at the IT load\n",
                r->costs->gpu_tdp_w, r->costs->node_overhead_w_per_gpu, t->pue,
                f->pue >= 0.0 ? " (--pue)" : " (cluster file)", t->it_mwh.value);
    }
    if (t->has_cost) {
        if (f->price_per_gpu_hour >= 0.0) {
            fprintf(out, "# cost: $%.4g per GPU-hour (--price-per-gpu-hour)\n",
                    t->price_per_gpu_hour);
        } else {
            fprintf(out, "# cost: $%.4g per GPU-hour, the cluster file's price of %s\n",
                    t->price_per_gpu_hour, r->costs->price_date);
        }
    }
    if (!t->has_interval) {
        fprintf(out, "# no interval: the cluster profile holds no measured runs\n");
    }
}

static void add_figure(cJSON *o, const char *key, const struct moe_train_figure *f, bool interval)
{
    char k[64];
    cJSON_AddNumberToObject(o, key, f->value);
    (void)snprintf(k, sizeof(k), "%s_interval", key);
    if (interval) {
        cJSON *a = cJSON_AddArrayToObject(o, k);
        cJSON_AddItemToArray(a, cJSON_CreateNumber(f->lo));
        cJSON_AddItemToArray(a, cJSON_CreateNumber(f->hi));
    } else {
        cJSON_AddNullToObject(o, k);
    }
}

static void add_source(cJSON *o, const char *key, bool has, const char *src)
{
    if (has) {
        cJSON_AddStringToObject(o, key, src);
    } else {
        cJSON_AddNullToObject(o, key);
    }
}

cJSON *moe_train_json(const struct moe_train_report *r)
{
    const struct moe_train_flags *f = r->flags;
    const struct moe_train_schedule *s = r->sched;
    const struct moe_train_totals *t = r->totals;
    const struct moe_cluster_costs *c = r->costs;
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) {
        return NULL;
    }
    cJSON_AddNumberToObject(o, "train_tokens", f->train_tokens);
    cJSON_AddNumberToObject(o, "tokens_trained", t->tokens);
    cJSON_AddNumberToObject(o, "steps", (double)s->steps);
    cJSON_AddNumberToObject(o, "samples", (double)s->samples);
    cJSON_AddNumberToObject(o, "num_gpus", t->num_gpus);
    add_figure(o, "time_s", &t->time_s, t->has_interval);
    add_figure(o, "days", &t->days, t->has_interval);
    add_figure(o, "gpu_hours", &t->gpu_hours, t->has_interval);
    char missing[128];
    (void)moe_cluster_costs_missing_power(c, f->pue >= 0.0, missing, sizeof(missing));
    if (t->has_energy) {
        add_figure(o, "energy_mwh", &t->energy_mwh, t->has_interval);
        add_figure(o, "it_energy_mwh", &t->it_mwh, t->has_interval);
    } else {
        cJSON_AddNullToObject(o, "energy_mwh");
        cJSON_AddStringToObject(o, "energy_missing", missing);
    }
    cJSON *pw = cJSON_AddObjectToObject(o, "power");
    if (pw != NULL) {
        cJSON_AddNumberToObject(pw, "gpu_tdp_w", c->has_gpu_tdp ? c->gpu_tdp_w : 0.0);
        cJSON_AddNumberToObject(pw, "node_overhead_w_per_gpu",
                                c->has_node_overhead ? c->node_overhead_w_per_gpu : 0.0);
        cJSON_AddNumberToObject(pw, "pue", t->has_energy ? t->pue : (f->pue >= 0.0 ? f->pue : 0.0));
        add_source(pw, "gpu_tdp_source", c->has_gpu_tdp, c->gpu_tdp_source);
        add_source(pw, "node_overhead_source", c->has_node_overhead, c->node_overhead_source);
        add_source(pw, "pue_source", f->pue < 0.0 && c->has_pue,
                   f->pue >= 0.0 ? "--pue" : c->pue_source);
    }
    if (t->has_cost) {
        add_figure(o, "cost_usd", &t->cost_usd, t->has_interval);
        cJSON_AddNumberToObject(o, "price_per_gpu_hour_usd", t->price_per_gpu_hour);
        cJSON_AddStringToObject(o, "price_source",
                                f->price_per_gpu_hour >= 0.0 ? "--price-per-gpu-hour"
                                                             : c->price_source);
        cJSON_AddStringToObject(o, "price_date", f->price_per_gpu_hour >= 0.0 ? "" : c->price_date);
    } else {
        cJSON_AddNullToObject(o, "cost_usd");
        cJSON_AddNullToObject(o, "price_per_gpu_hour_usd");
    }
    if (f->has_ramp) {
        cJSON *rp = cJSON_AddObjectToObject(o, "ramp");
        if (rp != NULL) {
            cJSON_AddNumberToObject(rp, "start", (double)f->ramp_start);
            cJSON_AddNumberToObject(rp, "increment", (double)f->ramp_incr);
            cJSON_AddNumberToObject(rp, "samples", (double)f->ramp_samples);
            cJSON_AddBoolToObject(rp, "decrease_batch_size_if_needed", f->decrease_batch);
            cJSON_AddNumberToObject(rp, "steps", (double)s->ramp_steps);
            cJSON_AddNumberToObject(rp, "time_s", r->ramp_s);
            cJSON_AddNumberToObject(rp, "batch_sizes", r->ramp_batches);
            cJSON_AddNumberToObject(rp, "predicted_batch_sizes", r->ramp_predicted);
        }
    } else {
        cJSON_AddNullToObject(o, "ramp");
    }
    if (f->deadline_days > 0.0) {
        cJSON_AddNumberToObject(o, "deadline_days", f->deadline_days);
        cJSON_AddBoolToObject(o, "meets_deadline", t->days.value <= f->deadline_days);
        cJSON_AddBoolToObject(o, "deadline_at_risk", t->days.hi > f->deadline_days);
    }
    return o;
}
