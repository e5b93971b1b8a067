/*
 * Intervals (cli/uncertainty.h) and the way predict and plan show them:
 *  - moe_unc_step: runs like the prediction first (precision and EP span), then wider classes;
 *    the interval widens with fewer runs (Student's t) and a run never vouches for itself;
 *  - the tie band from pairs of runs of one model on one cluster;
 *  - memory: interval and margin from the profile's figure;
 *  - `moefold predict --json` carries "uncertainty" {step_time_s, tokens_per_s_per_gpu, level,
 *    basis}, and a profile without runs says it has no interval;
 *  - `moefold plan`: the memory margin caps the ranked plans, ties are marked, --compare-to places
 *    a configuration, --memory-margin 0 ranks plans up to the capacity; --software names an
 *    unknown release as an error.
 */
#include "cli/uncertainty.h"
#include "tests/test_util.h"

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

#define OUT_LEN (1 << 17)

static void add_run(struct moe_uncertainty *u,
                    const char *id,
                    const char *model,
                    const char *prec,
                    const char *ep,
                    double err)
{
    struct moe_unc_run *r = &u->runs[u->num_runs++];
    memset(r, 0, sizeof(*r));
    (void)snprintf(r->id, sizeof(r->id), "%s", id);
    (void)snprintf(r->model, sizeof(r->model), "%s", model);
    (void)snprintf(r->cluster, sizeof(r->cluster), "c");
    (void)snprintf(r->precision, sizeof(r->precision), "%s", prec);
    (void)snprintf(r->ep_span, sizeof(r->ep_span), "%s", ep);
    r->gpus = 8;
    r->err_loo = err;
    r->err_fit = err / 2.0;
}

static void test_step_interval(void **state)
{
    (void)state;
    struct moe_uncertainty *u = calloc(1, sizeof(*u));
    assert_non_null(u);
    struct moe_interval iv;
    moe_unc_step(u, "bf16", "inter", NULL, 10.0, 0.8, &iv);
    assert_false(iv.ok);
    assert_non_null(strstr(iv.basis, "no interval"));
    add_run(u, "a", "m1", "bf16", "inter", 0.10);
    add_run(u, "b", "m1", "bf16", "inter", -0.10);
    add_run(u, "c", "m2", "bf16", "inter", 0.10);
    add_run(u, "d", "m3", "fp8", "intra", 0.01);
    moe_unc_step(u, "bf16", "inter", NULL, 10.0, 0.8, &iv);
    assert_true(iv.ok);
    assert_int_equal(iv.n, 3); /* the fp8 run is not like this one */
    assert_non_null(strstr(iv.basis, "runs like this one"));
    /* symmetric in log units around the prediction, rms 10% widened by sqrt(1 + 1/3) and t(2) */
    assert_true(fabs(log(iv.hi / 10.0) + log(iv.lo / 10.0)) < 1e-12);
    double t2 = 1.885618083; /* Student's t, 90th percentile, 2 degrees of freedom */
    assert_true(fabs(log(iv.hi / 10.0) - t2 * 0.10 * sqrt(4.0 / 3.0)) < 1e-6);
    /* leaving a run out drops below MOE_UNC_MIN_RUNS like it: the class widens to all runs */
    struct moe_interval iw;
    moe_unc_step(u, "bf16", "inter", "a", 10.0, 0.8, &iw);
    assert_int_equal(iw.n, 3);
    assert_non_null(strstr(iw.basis, "all runs"));
    /* more runs of the same spread give a narrower interval */
    for (int i = 0; i < 20; i++) {
        char id[8];
        (void)snprintf(id, sizeof(id), "x%d", i);
        add_run(u, id, "m4", "bf16", "inter", i % 2 ? 0.1 : -0.1);
    }
    struct moe_interval many;
    moe_unc_step(u, "bf16", "inter", NULL, 10.0, 0.8, &many);
    assert_true(many.n == 23);
    assert_true(many.hi < iv.hi);
    double lo = 0.0;
    double hi = 0.0;
    moe_unc_rate(&many, 1000.0, &lo, &hi);
    assert_true(fabs(lo * many.hi / 10.0 - 1000.0) < 1e-9); /* rates invert the step */
    assert_true(fabs(hi * many.lo / 10.0 - 1000.0) < 1e-9);
    /* A few runs that agree closely do not beat the fit's own per-run error: with run_sd 5%,
     * three runs at 1% give the interval of three at 5% (and say so). */
    struct moe_uncertainty *v = calloc(1, sizeof(*v));
    assert_non_null(v);
    add_run(v, "p", "m1", "fp8", "intra", 0.01);
    add_run(v, "q", "m2", "fp8", "intra", -0.01);
    add_run(v, "r", "m3", "fp8", "intra", 0.01);
    struct moe_interval tight;
    moe_unc_step(v, "fp8", "intra", NULL, 10.0, 0.8, &tight);
    assert_true(fabs(log(tight.hi / 10.0) - t2 * 0.01 * sqrt(4.0 / 3.0)) < 1e-6);
    v->run_sd = 0.05;
    moe_unc_step(v, "fp8", "intra", NULL, 10.0, 0.8, &tight);
    assert_true(fabs(log(tight.hi / 10.0) - t2 * 0.05 * sqrt(4.0 / 3.0)) < 1e-6);
    assert_non_null(strstr(tight.basis, "per-run model error"));
    free(v);
    free(u);
}

static void test_tie_band_and_memory(void **state)
{
    (void)state;
    struct moe_uncertainty *u = calloc(1, sizeof(*u));
    assert_non_null(u);
    int pairs = -1;
    assert_true(moe_unc_tie_band(u, 0.8, &pairs) == 0.0);
    /* three runs of one model on one cluster with errors shared by all: the pairs' differences
     * are small, the band narrower than twice the runs' spread */
    add_run(u, "a", "m", "bf16", "inter", 0.20);
    add_run(u, "b", "m", "bf16", "inter", 0.22);
    add_run(u, "c", "m", "bf16", "inter", 0.19);
    double band = moe_unc_tie_band(u, 0.8, &pairs);
    assert_int_equal(pairs, 3);
    assert_true(band > 0.0 && band < 0.1);
    /* memory */
    struct moe_interval m;
    moe_unc_memory(u, 100.0, 0.8, &m);
    assert_false(m.ok);
    assert_true(moe_unc_memory_margin(u, 0.8) == 0.0);
    u->has_memory = true;
    u->mem_rel_sd = 0.05;
    moe_unc_memory(u, 100.0, 0.8, &m);
    assert_true(m.ok && m.lo < 100.0 && m.hi > 100.0);
    assert_true(fabs(moe_unc_memory_margin(u, 0.8) - 1.2815515655 * 0.05) < 1e-8);
    free(u);
}

static int run(const char *args, char *out)
{
    char bin[1024];
    char cmd[8192];
    moe_test_bin_path("moefold", bin, sizeof(bin));
    (void)snprintf(cmd, sizeof(cmd), "%s %s", bin, args);
    return moe_test_run_capture(cmd, out, OUT_LEN);
}

static const char *const q30 =
    "--model qwen3-30b-a3b --cluster dgx-h100 --gpus 16 --global-batch-size 64 "
    "--moe-router-force-load-balancing";

static void test_predict_json(void **state)
{
    (void)state;
    char *out = malloc(OUT_LEN);
    char args[2048];
    (void)snprintf(args, sizeof(args),
                   "predict %s --expert-model-parallel-size 16 --moe-grouped-gemm "
                   "--use-distributed-optimizer --fp8-format e4m3 --fp8-recipe tensorwise --json "
                   "2>/dev/null",
                   q30);
    assert_int_equal(run(args, out), 0);
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "uncertainty");
    assert_non_null(u);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(u, "step_time_s");
    assert_true(cJSON_IsArray(st) && cJSON_GetArraySize(st) == 2);
    double step = cJSON_GetObjectItemCaseSensitive(j, "step_time_s")->valuedouble;
    assert_true(cJSON_GetArrayItem(st, 0)->valuedouble < step);
    assert_true(cJSON_GetArrayItem(st, 1)->valuedouble > step);
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(u, "tokens_per_s_per_gpu");
    assert_true(cJSON_IsArray(tok) && cJSON_GetArraySize(tok) == 2);
    assert_true(cJSON_GetObjectItemCaseSensitive(u, "level")->valuedouble == 0.8);
    assert_non_null(
        strstr(cJSON_GetObjectItemCaseSensitive(u, "basis")->valuestring, "leave-one-out"));
    assert_true(cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(u, "may_not_fit")));
    cJSON_Delete(j);
    /* Human output: the interval and its basis; an unknown release is an error. */
    (void)snprintf(args, sizeof(args), "predict %s --expert-model-parallel-size 16 2>&1", q30);
    assert_int_equal(run(args, out), 0);
    assert_non_null(strstr(out, "80% interval"));
    (void)snprintf(args, sizeof(args),
                   "predict %s --expert-model-parallel-size 16 --software nosuch 2>&1", q30);
    assert_int_not_equal(run(args, out), 0);
    assert_non_null(strstr(out, "nosuch"));
    free(out);
}

/* A profile written by `moefold fit --no-loo` holds no leave-one-out errors: predict reads it and
 * says why it has no interval (it refused the file before). */
static void test_profile_without_loo(void **state)
{
    (void)state;
    char *out = malloc(OUT_LEN);
    assert_non_null(out);
    char dir[] = "/tmp/moefold_noloo_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char prof[128];
    (void)snprintf(prof, sizeof(prof), "%s/p.json", dir);
    char runs[512];
    moe_test_root_path("tests/data/published_runs.json", runs, sizeof(runs));
    char args[2048];
    (void)snprintf(args, sizeof(args),
                   "fit --cluster dgx-h100 --runs %s --no-loo --out %s >/dev/null 2>&1", runs,
                   prof);
    assert_int_equal(run(args, out), 0);
    (void)snprintf(args, sizeof(args),
                   "predict --model qwen3-30b-a3b --cluster %s --gpus 16 "
                   "--expert-model-parallel-size 16 --json 2>/dev/null",
                   prof);
    assert_int_equal(run(args, out), 0);
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "uncertainty");
    assert_non_null(u);
    assert_non_null(strstr(cJSON_GetObjectItemCaseSensitive(u, "basis")->valuestring, "--no-loo"));
    cJSON_Delete(j);
    remove(prof);
    rmdir(dir);
    free(out);
}

static void test_plan_trust(void **state)
{
    (void)state;
    char *out = malloc(OUT_LEN);
    char args[2048];
    (void)snprintf(args, sizeof(args),
                   "plan %s --top 5 --pareto-window 0 --fix tp=1,cp=1 --compare-to "
                   "'--expert-model-parallel-size 16 --moe-grouped-gemm "
                   "--use-distributed-optimizer' --json 2>/dev/null",
                   q30);
    assert_int_equal(run(args, out), 0);
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(j, "trust");
    assert_non_null(tr);
    double margin = cJSON_GetObjectItemCaseSensitive(tr, "memory_margin")->valuedouble;
    assert_true(margin > 0.0 && margin < 0.2);
    double cap = cJSON_GetObjectItemCaseSensitive(j, "memory_cap_gib")->valuedouble;
    assert_true(fabs(cap * (1.0 + margin) - 79.65) < 0.01); /* dgx-h100: 79.65 GiB */
    const cJSON *top = cJSON_GetObjectItemCaseSensitive(j, "top");
    assert_true(cJSON_GetArraySize(top) >= 2);
    assert_true(cJSON_IsBool(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(top, 1), "tie_with_best")));
    /* every listed plan carries its 80% interval around its own step time */
    for (int i = 0; i < cJSON_GetArraySize(top); i++) {
        const cJSON *c = cJSON_GetArrayItem(top, i);
        const cJSON *iv = cJSON_GetObjectItemCaseSensitive(c, "step_time_interval_s");
        assert_true(cJSON_IsArray(iv) && cJSON_GetArraySize(iv) == 2);
        double step = cJSON_GetObjectItemCaseSensitive(c, "step_time_s")->valuedouble;
        double lo = cJSON_GetArrayItem(iv, 0)->valuedouble;
        double hi = cJSON_GetArrayItem(iv, 1)->valuedouble;
        assert_true(lo > 0.5 * step && lo < step && hi > step && hi < 2.0 * step);
    }
    assert_non_null(
        strstr(cJSON_GetObjectItemCaseSensitive(tr, "interval_basis")->valuestring, "runs"));
    const cJSON *cmp = cJSON_GetObjectItemCaseSensitive(j, "compare_to");
    assert_non_null(cmp);
    assert_true(cJSON_GetObjectItemCaseSensitive(cmp, "gap_to_best")->valuedouble < 0.0);
    assert_true(cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(cmp, "beyond_band")));
    cJSON_Delete(j);
    /* the table shows the same interval in its own column */
    (void)snprintf(args, sizeof(args), "plan %s --top 2 --pareto-window 0 --fix tp=1,cp=1 2>&1",
                   q30);
    assert_int_equal(run(args, out), 0);
    assert_non_null(strstr(out, "step_s      80%_step_s  tok/s/GPU"));
    assert_non_null(strstr(out, "# 80%_step_s, plan 1: 80% interval from the leave-one-out"));
    /* --memory-margin 0: the cap is the capacity */
    (void)snprintf(args, sizeof(args),
                   "plan %s --top 1 --pareto-window 0 --fix tp=1,cp=1 --memory-margin 0 --json "
                   "2>/dev/null",
                   q30);
    assert_int_equal(run(args, out), 0);
    j = cJSON_Parse(out);
    assert_non_null(j);
    assert_true(fabs(cJSON_GetObjectItemCaseSensitive(j, "memory_cap_gib")->valuedouble - 79.65) <
                0.01);
    cJSON_Delete(j);
    /* a --compare-to that does not parse is a usage error naming the flag */
    (void)snprintf(args, sizeof(args),
                   "plan %s --top 1 --pareto-window 0 --fix tp=1,cp=1 --compare-to "
                   "'--expert-model-parallel-size 3' 2>&1",
                   q30);
    assert_int_not_equal(run(args, out), 0);
    assert_non_null(strstr(out, "moefold plan"));
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_interval), cmocka_unit_test(test_tie_band_and_memory),
        cmocka_unit_test(test_predict_json),  cmocka_unit_test(test_profile_without_loo),
        cmocka_unit_test(test_plan_trust),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
