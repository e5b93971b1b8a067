/*
 * Whole training runs (cli/train_cost.h, cli/train_eval.h, cli/plan_gpus.h,
 * topologies/cluster_costs.h): Megatron's step schedule with --rampup-batch-size against
 * hand-computed cases of its calculator (core_v0.17 RampupBatchsizeNumMicroBatchesCalculator and
 * update_train_iters), with and without --decrease-batch-size-if-needed, and the ramps it refuses;
 * the ramp's time with predicted and interpolated batches; days, GPU-hours, energy and cost of a
 * known run by hand; then through the binary: predict --train-tokens --json against its own step
 * time, plan --objective ranking, --deadline-days filtering and how close a missed deadline comes,
 * plan --gpus-max, whatif columns, and bad input (absurd tokens and prices, flags without
 * --train-tokens, a cluster file without power data, a malformed power section). Small models and
 * constrained searches keep it to seconds.
 */
#include "cli/train_cost.h"
#include "tests/test_util.h"
#include "topologies/cluster_costs.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define OUT_LEN (1 << 18)

/* A small search: Mixtral-8x7B on a few H100 nodes with most knobs fixed (~0.2 s). */
#define SMALL_SEARCH                                                                               \
    "--model mixtral-8x7b --global-batch-size 256 --seq-length 4096 "                              \
    "--moe-router-force-load-balancing --precision bf16 --dispatcher alltoall --no-offload "       \
    "--fix recompute=none,cuda_graph=none,cp=1"
#define SMALL_PLAN SMALL_SEARCH " --pareto-window 0"
#define SMALL_PREDICT                                                                              \
    "--model mixtral-8x7b --cluster dgx-h100 --gpus 16 --global-batch-size 256 --seq-length 4096 " \
    "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "                             \
    "--expert-model-parallel-size 4 --moe-router-force-load-balancing --sequence-parallel "        \
    "--use-distributed-optimizer"

static void flags_with_ramp(
    struct moe_train_flags *f, double tokens, long long start, long long incr, long long samples)
{
    moe_train_flags_init(f);
    f->has_tokens = true;
    f->train_tokens = tokens;
    f->has_ramp = start > 0;
    f->ramp_start = start;
    f->ramp_incr = incr;
    f->ramp_samples = samples;
}

static void expect_phases(const struct moe_train_schedule *s, const long long (*want)[2], int n)
{
    assert_int_equal(s->num_phases, n);
    for (int i = 0; i < n; i++) {
        assert_int_equal(s->phases[i].batch, want[i][0]);
        assert_int_equal(s->phases[i].steps, want[i][1]);
    }
}

/*
 * START 4, INCR 4, SAMPLES 20, global batch 12, 100 samples (seq 1): (12 - 4) / 4 = 2 increments
 * of 10 samples. Megatron: c = 0, 4, 8 -> batch 4; c = 12 -> int(12/10) = 1 -> 8; c = 20 <= 20 ->
 * int(20/10) = 2 -> 12; c = 32 > 20 ends the ramp loop after 5 steps; (100 - 32) // 12 = 5 more:
 * 10 steps, 32 + 5 x 12 = 92 samples trained.
 */
static void test_ramp_schedule_by_hand(void **state)
{
    (void)state;
    struct moe_train_flags f;
    flags_with_ramp(&f, 100.0, 4, 4, 20);
    struct moe_train_schedule s;
    struct moe_diag d = {0};
    assert_int_equal(moe_train_schedule_make(&f, 12, 1, 4, &s, &d), MOE_OK);
    assert_int_equal(s.train_samples, 100);
    assert_int_equal(s.steps, 10);
    assert_int_equal(s.samples, 92);
    assert_int_equal(s.ramp_steps, 4);
    static const long long want[][2] = {{4, 3}, {8, 1}, {12, 6}};
    expect_phases(&s, want, 3);
    moe_train_schedule_fini(&s);

    /* Tokens are sequences x seq_length; without a ramp the partial last batch is dropped. */
    flags_with_ramp(&f, 100.0 * 4096 + 4095, 0, 0, 0);
    assert_int_equal(moe_train_schedule_make(&f, 12, 4096, 4, &s, &d), MOE_OK);
    assert_int_equal(s.steps, 8);
    assert_int_equal(s.samples, 96);
    static const long long flat[][2] = {{12, 8}};
    expect_phases(&s, flat, 1);
    moe_train_schedule_fini(&s);
}

/*
 * START 6, INCR 3, SAMPLES 24, batch 12, 100 samples, micro-batch x DP = 4. Megatron's iteration
 * count uses the nominal batch: 6, 6, 9, 9 (c = 0, 6, 12, 21), c = 30 > 24, + 70 // 12 = 5: 9
 * steps. Trained with --decrease-batch-size-if-needed: 6 -> 4 at c = 0, 4, 8; 9 -> 8 at c = 12, 20;
 * c = 28 > 24 -> 12 for the 4 steps left: 28 + 48 = 76 samples. Without the flag 6 is not a
 * multiple of 4 and Megatron (and moefold) refuse.
 */
static void test_ramp_decrease_batch(void **state)
{
    (void)state;
    struct moe_train_flags f;
    flags_with_ramp(&f, 100.0, 6, 3, 24);
    f.decrease_batch = true;
    struct moe_train_schedule s;
    struct moe_diag d = {0};
    assert_int_equal(moe_train_schedule_make(&f, 12, 1, 4, &s, &d), MOE_OK);
    assert_int_equal(s.steps, 9);
    assert_int_equal(s.samples, 76);
    static const long long want[][2] = {{4, 3}, {8, 2}, {12, 4}};
    expect_phases(&s, want, 3);
    moe_train_schedule_fini(&s);

    f.decrease_batch = false;
    assert_int_equal(moe_train_schedule_make(&f, 12, 1, 4, &s, &d), MOE_ERR_INFEASIBLE);
    assert_non_null(strstr(d.message, "not a multiple of micro-batch x DP = 4"));
}

static void test_ramp_refused(void **state)
{
    (void)state;
    struct moe_train_flags f;
    struct moe_train_schedule s;
    struct moe_diag d = {0};
    flags_with_ramp(&f, 1e6, 12, 4, 20); /* START = batch: Megatron divides by zero */
    assert_int_equal(moe_train_schedule_make(&f, 12, 1, 4, &s, &d), MOE_ERR_INVALID);
    assert_non_null(strstr(d.message, "equals --global-batch-size"));
    flags_with_ramp(&f, 1e6, 16, 4, 20);
    assert_int_equal(moe_train_schedule_make(&f, 12, 1, 4, &s, &d), MOE_ERR_INVALID);
    flags_with_ramp(&f, 1e6, 4, 3, 20); /* 12 - 4 = 8 is not a multiple of 3 */
    assert_int_equal(moe_train_schedule_make(&f, 12, 1, 4, &s, &d), MOE_ERR_INVALID);
    assert_non_null(strstr(d.message, "not a multiple of INCR 3"));
    flags_with_ramp(&f, 11.0, 0, 0, 0); /* fewer tokens than one global batch */
    assert_int_equal(moe_train_schedule_make(&f, 12, 1, 4, &s, &d), MOE_ERR_INVALID);
    assert_non_null(strstr(d.message, "less than one global batch"));
}

/* Step time model for the ramp: affine or quadratic in the batch; counts the calls. */
struct fake_step {
    double a, b, c; /* a + b x + c x^2 */
    int calls;
};

static enum moe_status fake_fn(void *ctx, long long batch, double *step_s, struct moe_diag *diag)
{
    (void)diag;
    struct fake_step *f = ctx;
    double x = (double)batch;
    f->calls++;
    *step_s = f->a + f->b * x + f->c * x * x;
    return MOE_OK;
}

static void test_ramp_time(void **state)
{
    (void)state;
    struct moe_train_flags f;
    struct moe_train_schedule s;
    struct moe_diag d = {0};
    /* The hand case: 3 x T(4) + 1 x T(8) + 6 x T(12), T(b) = 1 + 0.01 b. */
    flags_with_ramp(&f, 100.0, 4, 4, 20);
    assert_int_equal(moe_train_schedule_make(&f, 12, 1, 4, &s, &d), MOE_OK);
    struct fake_step fs = {1.0, 0.01, 0.0, 0};
    double t = 0.0;
    double ramp = 0.0;
    int pred = 0;
    int batches = 0;
    assert_int_equal(moe_train_time(&s, 1.12, fake_fn, &fs, &t, &ramp, &pred, &batches, &d),
                     MOE_OK);
    assert_true(fabs(t - 10.92) < 1e-12);
    assert_true(fabs(ramp - 4.20) < 1e-12);
    assert_int_equal(pred, 2);
    assert_int_equal(batches, 2);
    moe_train_schedule_fini(&s);

    /* 20 ramp batches (1, 2, ..., 20 up to 21): only MOE_TRAIN_RAMP_POINTS are predicted; an
     * affine step time is interpolated exactly, a curved one is not. */
    flags_with_ramp(&f, 1e6, 1, 1, 2000);
    assert_int_equal(moe_train_schedule_make(&f, 21, 1, 1, &s, &d), MOE_OK);
    double exact = 0.0;
    for (int i = 0; i < s.num_phases; i++) {
        double x = (double)s.phases[i].batch;
        exact += (double)s.phases[i].steps * (2.0 + 0.5 * x);
    }
    struct fake_step lin = {2.0, 0.5, 0.0, 0};
    assert_int_equal(
        moe_train_time(&s, 2.0 + 0.5 * 21, fake_fn, &lin, &t, NULL, NULL, &batches, &d), MOE_OK);
    assert_int_equal(lin.calls, MOE_TRAIN_RAMP_POINTS);
    assert_int_equal(batches, 20);
    assert_true(fabs(t - exact) < 1e-9 * exact);
    struct fake_step quad = {2.0, 0.0, 0.1, 0};
    double exact_q = 0.0;
    for (int i = 0; i < s.num_phases; i++) {
        double x = (double)s.phases[i].batch;
        exact_q += (double)s.phases[i].steps * (2.0 + 0.1 * x * x);
    }
    assert_int_equal(moe_train_time(&s, 2.0 + 0.1 * 441, fake_fn, &quad, &t, NULL, NULL, NULL, &d),
                     MOE_OK);
    assert_true(t > exact_q && t < 1.01 * exact_q); /* chords lie above a convex curve */
    moe_train_schedule_fini(&s);
}

/* 10 days on 64 GPUs, 700 + 575 W, PUE 1.5, $2 per GPU-hour, interval 0.8x - 1.3x. */
static void test_totals_by_hand(void **state)
{
    (void)state;
    struct moe_train_totals t;
    moe_train_totals_compute(10.0 * 86400.0, 1e12, 64, 0.8, 1.3, true, 1275.0, 1.5, 2.0, &t);
    assert_true(fabs(t.days.value - 10.0) < 1e-12);
    assert_true(fabs(t.gpu_hours.value - 15360.0) < 1e-9);
    assert_true(fabs(t.it_mwh.value - 19.584) < 1e-9);
    assert_true(fabs(t.energy_mwh.value - 29.376) < 1e-9);
    assert_true(fabs(t.cost_usd.value - 30720.0) < 1e-9);
    assert_true(fabs(t.days.lo - 8.0) < 1e-12 && fabs(t.days.hi - 13.0) < 1e-12);
    assert_true(fabs(t.cost_usd.hi - 39936.0) < 1e-9);
    assert_true(fabs(moe_train_objective_value(&t, MOE_TRAIN_OBJ_ENERGY) - 29.376) < 1e-9);
    moe_train_totals_compute(86400.0, 1e9, 8, 0.8, 1.3, false, 0.0, 0.0, 0.0, &t);
    assert_false(t.has_energy || t.has_cost || t.has_interval);
    assert_true(t.days.lo == 1.0 && t.days.hi == 1.0);
    assert_true(isinf(moe_train_objective_value(&t, MOE_TRAIN_OBJ_COST)));
}

/* The power and price sections of a tree; a file that lacks them says what is missing. */
static void test_cluster_costs(void **state)
{
    (void)state;
    struct moe_cluster_costs c;
    struct moe_diag d = {0};
    assert_int_equal(moe_cluster_costs_load("aws-p5", &c, &d), MOE_OK); /* inherits the power */
    assert_true(c.has_gpu_tdp && c.gpu_tdp_w == 700.0 && c.has_node_overhead);
    assert_true(c.has_pue && c.pue < 1.3 && c.has_price && c.price_per_gpu_hour_usd > 0.0);
    assert_int_equal(moe_cluster_costs_load("dgx-h100", &c, &d), MOE_OK);
    assert_false(c.has_price);
    char miss[128];
    assert_true(moe_cluster_costs_missing_power(&c, false, miss, sizeof(miss)));
    cJSON *root = cJSON_Parse("{\"power\": {\"pue\": {\"value\": 1.2, \"source\": \"x\"}}}");
    assert_int_equal(moe_cluster_costs_from_json(root, &c, &d), MOE_OK);
    assert_false(moe_cluster_costs_missing_power(&c, false, miss, sizeof(miss)));
    assert_string_equal(miss, "power.gpu_tdp_w, power.node_overhead_w_per_gpu");
    cJSON_Delete(root);
    static const char *const bad[] = {
        "{\"power\": {\"gpu_tdp_watts\": {\"value\": 700, \"source\": \"x\"}}}",
        "{\"power\": {\"gpu_tdp_w\": {\"value\": 700}}}",
        "{\"power\": {\"pue\": {\"value\": 0.9, \"source\": \"x\"}}}",
        "{\"price\": {\"per_gpu_hour_usd\": {\"value\": 2, \"source\": \"x\"}}}",
        "{\"price\": {\"per_gpu_hour_usd\": {\"value\": 2, \"source\": \"x\"}, \"date\": \"May\"}}",
        "{\"price\": {\"per_gpu_hour_usd\": {\"value\": -1, \"source\": \"x\"}, \"date\": "
        "\"2026-01\"}}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        root = cJSON_Parse(bad[i]);
        assert_non_null(root);
        if (moe_cluster_costs_from_json(root, &c, &d) != MOE_ERR_INVALID) {
            fail_msg("accepted %s", bad[i]);
        }
        cJSON_Delete(root);
    }
}

/* ---- through the binary ------------------------------------------------------------------ */

static int run(const char *args, char *out)
{
    char bin[1024];
    char cmd[8192];
    moe_test_bin_path("moefold", bin, sizeof(bin));
    (void)snprintf(cmd, sizeof(cmd), "%s %s", bin, args);
    return moe_test_run_capture(cmd, out, OUT_LEN);
}

static cJSON *json_of(const char *args)
{
    char *out = malloc(OUT_LEN);
    char full[4096];
    (void)snprintf(full, sizeof(full), "%s --json 2>/dev/null", args);
    int rc = run(full, out);
    if (rc != 0) {
        fail_msg("moefold %s exited %d: %.500s", full, rc, out);
    }
    cJSON *j = cJSON_Parse(out);
    if (j == NULL) {
        fail_msg("not JSON: %.300s", out);
    }
    free(out);
    return j;
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(it)) {
        fail_msg("missing number %s", k);
    }
    return it->valuedouble;
}

static double interval_end(const cJSON *o, const char *k, int end)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 2) {
        fail_msg("missing interval %s", k);
    }
    return cJSON_GetArrayItem(a, end)->valuedouble;
}

static bool close_to(double a, double b)
{
    return fabs(a - b) <= 1e-9 * fabs(b);
}

/* predict --train-tokens: the run from its own step time by hand. */
static void test_predict_run(void **state)
{
    (void)state;
    cJSON *j = json_of("predict " SMALL_PREDICT " --train-tokens 100B --price-per-gpu-hour 2.5");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "run");
    double step = num(j, "step_time_s");
    double steps = floor(floor(100e9 / 4096) / 256);
    assert_true(num(r, "steps") == steps);
    assert_true(num(r, "tokens_trained") == steps * 256 * 4096);
    double secs = steps * step;
    assert_true(close_to(num(r, "time_s"), secs));
    assert_true(close_to(num(r, "days"), secs / 86400.0));
    double gpuh = secs * 16 / 3600.0;
    assert_true(close_to(num(r, "gpu_hours"), gpuh));
    assert_true(close_to(num(r, "energy_mwh"), gpuh * (700.0 + 575.0) * 1.56 / 1e6));
    assert_true(close_to(num(r, "it_energy_mwh"), gpuh * (700.0 + 575.0) / 1e6));
    assert_true(close_to(num(r, "cost_usd"), gpuh * 2.5));
    /* The interval is the step's, carried through. */
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "uncertainty");
    double lo = interval_end(u, "step_time_s", 0) / step;
    double hi = interval_end(u, "step_time_s", 1) / step;
    assert_true(lo < 1.0 && hi > 1.0);
    assert_true(close_to(interval_end(r, "days_interval", 0), secs / 86400.0 * lo));
    assert_true(close_to(interval_end(r, "cost_usd_interval", 1), gpuh * 2.5 * hi));
    const cJSON *pw = cJSON_GetObjectItemCaseSensitive(r, "power");
    assert_true(num(pw, "gpu_tdp_w") == 700.0 && num(pw, "pue") == 1.56);
    cJSON_Delete(j);

    /* The ramp costs time: more seconds than its steps at the full batch's rate per sample. */
    j = json_of("predict " SMALL_PREDICT " --train-tokens 100B --rampup-batch-size 64 32 1000000");
    r = cJSON_GetObjectItemCaseSensitive(j, "run");
    const cJSON *ramp = cJSON_GetObjectItemCaseSensitive(r, "ramp");
    /* Megatron's count for this ramp (the calculator's loop run literally): 99757 steps, 8297
     * of them in 6 smaller batches, 24413824 samples. */
    assert_true(num(r, "steps") == 99757.0 && num(ramp, "steps") == 8297.0);
    assert_true(num(r, "samples") == 24413824.0 && num(ramp, "batch_sizes") == 6.0);
    step = num(j, "step_time_s");
    double per_sample_full = step / 256.0;
    assert_true(num(ramp, "time_s") > per_sample_full * (24413824.0 - 91460.0 * 256.0));
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(r, "cost_usd")));
    cJSON_Delete(j);
}

/* plan --objective ranks by the run; --deadline-days drops what is late. */
static void test_plan_objective_and_deadline(void **state)
{
    (void)state;
    cJSON *j = json_of("plan " SMALL_PLAN " --cluster aws-p5 --gpus 32 --top 4 --train-tokens 1T "
                       "--objective cost");
    const cJSON *top = cJSON_GetObjectItemCaseSensitive(j, "top");
    int n = cJSON_GetArraySize(top);
    assert_true(n >= 2);
    double prev = 0.0;
    double days[8];
    for (int i = 0; i < n && i < 8; i++) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(top, i), "run");
        double cost = num(r, "cost_usd");
        assert_true(cost >= prev);
        assert_true(close_to(cost, num(r, "gpu_hours") * 55.04 / 8.0)); /* the file's price */
        prev = cost;
        days[i] = num(r, "days");
    }
    cJSON_Delete(j);
    /* A deadline between plan 1 and the slowest listed keeps plan 1 and drops the slowest. */
    double slowest = 0.0;
    for (int i = 0; i < n && i < 8; i++) {
        slowest = days[i] > slowest ? days[i] : slowest;
    }
    if (slowest > days[0]) {
        char args[2048];
        (void)snprintf(args, sizeof(args),
                       "plan " SMALL_PLAN " --cluster aws-p5 --gpus 32 --top 4 --train-tokens 1T "
                       "--deadline-days %.9g",
                       0.5 * (days[0] + slowest));
        j = json_of(args);
        top = cJSON_GetObjectItemCaseSensitive(j, "top");
        assert_true(cJSON_GetArraySize(top) >= 1 && cJSON_GetArraySize(top) < n);
        const cJSON *c = NULL;
        cJSON_ArrayForEach(c, top)
        {
            const cJSON *r = cJSON_GetObjectItemCaseSensitive(c, "run");
            assert_true(num(r, "days") <= 0.5 * (days[0] + slowest));
            assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "meets_deadline")));
        }
        cJSON_Delete(j);
    }
    /* Nothing meets 10 days: exit 1 and how close the fastest plan comes. */
    char *out = malloc(OUT_LEN);
    int rc = run("plan " SMALL_PLAN " --cluster aws-p5 --gpus 32 --train-tokens 1T "
                 "--deadline-days 10",
                 out);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "no plan finishes within 10 days: the fastest needs"));
    assert_non_null(strstr(out, "over on 32 GPUs"));
    free(out);
}

/* plan --gpus-max: one search per count, the best under the objective planned in full. */
static void test_plan_gpus_max(void **state)
{
    (void)state;
    cJSON *j = json_of("plan " SMALL_PLAN " --cluster aws-p5 --gpus-min 16 --gpus-max 48 "
                       "--gpus-step 16 --top 2 --train-tokens 1T --objective gpu-hours");
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(j, "gpus_sweep");
    const cJSON *pts = cJSON_GetObjectItemCaseSensitive(sw, "points");
    assert_int_equal(cJSON_GetArraySize(pts), 3);
    double best = HUGE_VAL;
    int best_n = 0;
    const cJSON *pt = NULL;
    cJSON_ArrayForEach(pt, pts)
    {
        if (strcmp(cJSON_GetObjectItemCaseSensitive(pt, "state")->valuestring, "searched") != 0) {
            continue;
        }
        double gh = num(pt, "gpu_hours");
        if (gh < best) {
            best = gh;
            best_n = (int)num(pt, "num_gpus");
        }
    }
    assert_true(best_n > 0);
    assert_int_equal((int)num(sw, "best_num_gpus"), best_n);
    assert_int_equal((int)num(j, "num_gpus"), best_n);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "top"), 0), "run");
    assert_true(close_to(num(r, "gpu_hours"), best));
    cJSON_Delete(j);
}

/* whatif --vary gpus with --train-tokens: days and cost per point (CSV). */
static void test_whatif_run_columns(void **state)
{
    (void)state;
    char *out = malloc(OUT_LEN);
    int rc = run("whatif " SMALL_SEARCH " --cluster aws-p5 --vary gpus=16,32 --train-tokens 1T "
                 "--csv 2>&1",
                 out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "days,days_lo,days_hi,gpu_hours,energy_mwh,cost_usd,"));
    /* Each row: days x 24 x GPUs = GPU-hours, and cost = GPU-hours x $6.88. */
    int rows = 0;
    for (char *line = strtok(out, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        int gpus = 0;
        if (sscanf(line, "\"%d\",1,", &gpus) != 1) {
            continue;
        }
        char *f = line;
        double v[32];
        int k = 0;
        for (char *c = strtok_r(f, ",", &f); c != NULL && k < 32; c = strtok_r(NULL, ",", &f)) {
            v[k++] = strtod(c[0] == '"' ? c + 1 : c, NULL);
        }
        /* gpus,fits,step,tok,tflops,mfu,mem,bottleneck,strong,weak_s,weak,days,lo,hi,gh,mwh,$ */
        assert_true(k >= 17);
        assert_true(close_to(v[11] * 24.0 * gpus, v[14]) || fabs(v[11] * 24 * gpus - v[14]) < 1.0);
        assert_true(fabs(v[16] - v[14] * 6.88) < 0.01 * v[16]);
        rows++;
    }
    assert_int_equal(rows, 2);
    free(out);
}

struct bad_case {
    const char *args;
    const char *expect;
};

static void test_bad_input(void **state)
{
    (void)state;
    /* A cluster file without power data (dgx-h100 less its "power" section). */
    char src[1024];
    char path[] = "/tmp/moefold_nopower_XXXXXX";
    moe_test_root_path("topologies/dgx-h100.json", src, sizeof(src));
    FILE *in = fopen(src, "r");
    assert_non_null(in);
    static char text[1 << 20];
    size_t len = fread(text, 1, sizeof(text) - 1, in);
    (void)fclose(in);
    text[len] = '\0';
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    cJSON_DeleteItemFromObjectCaseSensitive(root, "power");
    char *printed = cJSON_Print(root);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_true(write(fd, printed, strlen(printed)) == (ssize_t)strlen(printed));
    (void)close(fd);
    /* And one whose power section has a typo. */
    cJSON_AddItemToObject(root, "power",
                          cJSON_Parse("{\"gpu_tdp\": {\"value\": 700, "
                                      "\"source\": \"x\"}}"));
    free(printed);
    printed = cJSON_Print(root);
    char typo[] = "/tmp/moefold_typo_XXXXXX";
    fd = mkstemp(typo);
    assert_true(fd >= 0);
    assert_true(write(fd, printed, strlen(printed)) == (ssize_t)strlen(printed));
    (void)close(fd);
    free(printed);
    cJSON_Delete(root);

    char nopower[512];
    char typo_args[512];
    (void)snprintf(nopower, sizeof(nopower),
                   "plan " SMALL_PLAN " --cluster %s --gpus 16 --train-tokens 1T --objective "
                   "energy",
                   path);
    (void)snprintf(typo_args, sizeof(typo_args),
                   "predict --model mixtral-8x7b --cluster %s --gpus 16 --global-batch-size 256",
                   typo);
    const struct bad_case cases[] = {
        {"predict " SMALL_PREDICT " --train-tokens -5", "--train-tokens '-5'"},
        {"predict " SMALL_PREDICT " --train-tokens 0", "expected a token count"},
        {"predict " SMALL_PREDICT " --train-tokens 1e20", "1e+16"},
        {"predict " SMALL_PREDICT " --train-tokens 12Q", "--train-tokens '12Q'"},
        {"predict " SMALL_PREDICT " --train-tokens 1M", "less than one global batch"},
        {"predict " SMALL_PREDICT " --train-tokens 1T --price-per-gpu-hour 0",
         "--price-per-gpu-hour '0'"},
        {"predict " SMALL_PREDICT " --train-tokens 1T --price-per-gpu-hour 5000",
         "--price-per-gpu-hour '5000'"},
        {"predict " SMALL_PREDICT " --train-tokens 1T --pue 0.5", "--pue '0.5'"},
        {"predict " SMALL_PREDICT " --rampup-batch-size 64 32 1000", "give --train-tokens"},
        {"predict " SMALL_PREDICT " --train-tokens 1T --deadline-days 30", "moefold plan"},
        {"predict " SMALL_PREDICT " --train-tokens 1T --rampup-batch-size 256 32 1000",
         "equals --global-batch-size"},
        {"predict " SMALL_PREDICT " --train-tokens 1T --rampup-batch-size 66 11 1000",
         "not a multiple of INCR"},
        {"predict " SMALL_PREDICT " --train-tokens 1T --rampup-batch-size 66 38 1000",
         "not a multiple of micro-batch x DP = 4"},
        {"predict " SMALL_PREDICT " --train-tokens 1T --rampup-batch-size 64 x 1000", "INCR 'x'"},
        {"plan " SMALL_PLAN " --cluster dgx-h100 --gpus 16 --train-tokens 1T --objective cost",
         "give --price-per-gpu-hour"},
        {"plan " SMALL_PLAN " --cluster dgx-h100 --gpus 16 --train-tokens 1T --objective speed",
         "--objective 'speed'"},
        {"plan " SMALL_PLAN " --cluster dgx-h100 --gpus 16 --train-tokens 1T --deadline-days -1",
         "--deadline-days '-1'"},
        {"plan " SMALL_PLAN " --cluster dgx-h100 --gpus-max 64", "give --train-tokens"},
        {"plan " SMALL_PLAN " --cluster dgx-h100 --gpus 16 --gpus-max 64 --train-tokens 1T",
         "either --gpus"},
        {"plan " SMALL_PLAN " --cluster dgx-h100 --gpus-max 100000 --gpus-step 8 --train-tokens 1T",
         "--gpus-max 100000"},
        {"plan " SMALL_PLAN " --cluster dgx-h100 --gpus-max 64 --gpus-step 12 --train-tokens 1T",
         "multiples of dgx-h100's 8 GPUs"},
        {nopower, "lacks power.gpu_tdp_w, power.node_overhead_w_per_gpu, power.pue"},
        {typo_args, "unknown key"},
    };
    char *out = malloc(OUT_LEN);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char full[4096];
        (void)snprintf(full, sizeof(full), "%s 2>&1", cases[i].args);
        int rc = run(full, out);
        if (rc <= 0 || strstr(out, cases[i].expect) == NULL) {
            fail_msg("moefold %s: exit %d, expected non-zero and '%s' in: %.600s", cases[i].args,
                     rc, cases[i].expect, out);
        }
    }
    /* Without power data a run still gets days, GPU-hours and cost, and says what is missing. */
    char ok[512];
    (void)snprintf(ok, sizeof(ok),
                   "predict --model mixtral-8x7b --cluster %s --gpus 16 --global-batch-size 256 "
                   "--seq-length 4096 --tensor-model-parallel-size 2 "
                   "--pipeline-model-parallel-size 2 --expert-model-parallel-size 4 "
                   "--moe-router-force-load-balancing --sequence-parallel --train-tokens 1T 2>&1",
                   path);
    assert_int_equal(run(ok, out), 0);
    assert_non_null(strstr(out, "energy       unknown: the cluster file lacks power.gpu_tdp_w"));
    free(out);
    (void)unlink(path);
    (void)unlink(typo);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ramp_schedule_by_hand),
        cmocka_unit_test(test_ramp_decrease_batch),
        cmocka_unit_test(test_ramp_refused),
        cmocka_unit_test(test_ramp_time),
        cmocka_unit_test(test_totals_by_hand),
        cmocka_unit_test(test_cluster_costs),
        cmocka_unit_test(test_predict_run),
        cmocka_unit_test(test_plan_objective_and_deadline),
        cmocka_unit_test(test_plan_gpus_max),
        cmocka_unit_test(test_whatif_run_columns),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
