/*
 * `moefold compare` end to end through the built binary. A plan comes from `moefold predict
 * --emit`; the run file is written here from that plan's own prediction with known deviations
 * (step time 25% longer, memory exact, expert load observed per layer), so the printed errors are
 * known in advance: the summary line, the table, --json, --observed-load (prices the observed load
 * and moves the prediction) and the errors for bad input are checked. A run file with a traced step
 * and a difference from the plan: --trace puts the predicted stage and the measured ranks in one
 * valid Chrome trace (the measured phase sums are the records'), and the difference is listed.
 * A run with a kernel profile: each phase's ops and the time between them, the attention core
 * measured beside the model's. --repeat: each phase's range over repeated runs of the plan and
 * whether the prediction lies inside it.
 */
#include "tests/test_util.h"
#include "topologies/trace_file.h"

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

#define OUT_LEN (1 << 16)

struct files {
    char dir[256];
    char plan[300];
    char run[300];
    char run_noload[300];
    char bad[300];
    double pred_step_s;
};

static int run_cli(const char *args, char *out)
{
    char bin[1024];
    char cmd[8192];
    moe_test_bin_path("moefold", bin, sizeof(bin));
    (void)snprintf(cmd, sizeof(cmd), "%s %s", bin, args);
    return moe_test_run_capture(cmd, out, OUT_LEN);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

/* Write j to path as JSON and free it. */
static void write_json(const char *path, cJSON *j)
{
    char *s = cJSON_Print(j);
    assert_non_null(s);
    write_text(path, s);
    free(s);
    cJSON_Delete(j);
}

static cJSON *read_json(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *buf = malloc(1 << 20);
    assert_non_null(buf);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    assert_non_null(j);
    return j;
}

/* A run file as moefold-train writes it, from the plan's prediction: every phase scaled by
 * time_scale, memory as predicted, and the given per-layer expert loads (NULL: none recorded). */
static void write_run(const cJSON *plan, const char *path, double time_scale, const char *loads)
{
    const cJSON *pred = cJSON_GetObjectItemCaseSensitive(plan, "prediction");
    cJSON *time = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(pred, "time_s"), 1);
    cJSON *it = NULL;
    cJSON_ArrayForEach(it, time)
    {
        cJSON_SetNumberValue(it, it->valuedouble * time_scale);
    }
    cJSON *mem = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(pred, "memory_gib"), 1);
    cJSON_DeleteItemFromObjectCaseSensitive(mem, "capacity");
    double step = cJSON_GetObjectItemCaseSensitive(pred, "step_time_s")->valuedouble * time_scale;
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "format", "moefold-run");
    cJSON_AddNumberToObject(r, "version", 1);
    cJSON_AddStringToObject(r, "model", "mixtral-8x7b");
    cJSON_AddStringToObject(r, "backend", "cpu+mpi");
    cJSON_AddNumberToObject(r, "num_ranks", 8);
    cJSON_AddNumberToObject(r, "steps", 4);
    cJSON_AddNumberToObject(r, "measured_steps", 3);
    cJSON_AddNumberToObject(r, "tokens_per_step", 64.0 * 4096.0);
    cJSON_AddNumberToObject(r, "step_time_s", step);
    cJSON_AddNumberToObject(r, "tokens_per_s", 64.0 * 4096.0 / step);
    cJSON_AddItemToObject(r, "time_s", time);
    cJSON_AddItemToObject(r, "memory_gib", mem);
    cJSON *steps = cJSON_AddArrayToObject(r, "per_step");
    for (int i = 0; i < 4; i++) {
        cJSON *s = cJSON_CreateObject();
        cJSON_AddNumberToObject(s, "loss", 6.0 - 0.25 * i);
        cJSON_AddItemToArray(steps, s);
    }
    if (loads != NULL) {
        cJSON_AddItemToObject(r, "expert_load_max_over_mean", cJSON_Parse(loads));
        cJSON_AddNumberToObject(r, "expert_rows_factor", 8.0); /* worst case at EP8 */
    }
    write_json(path, r);
}

static int setup(void **state)
{
    struct files *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    (void)snprintf(f->dir, sizeof(f->dir), "/tmp/moefold-test-compare-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    (void)snprintf(f->plan, sizeof(f->plan), "%s/plan.json", f->dir);
    (void)snprintf(f->run, sizeof(f->run), "%s/run.json", f->dir);
    (void)snprintf(f->run_noload, sizeof(f->run_noload), "%s/run-noload.json", f->dir);
    (void)snprintf(f->bad, sizeof(f->bad), "%s/bad.json", f->dir);
    char *out = malloc(OUT_LEN);
    char args[2048];
    (void)snprintf(args, sizeof(args),
                   "predict --model mixtral-8x7b --cluster dgx-h100 --gpus 8 "
                   "--expert-model-parallel-size 8 --global-batch-size 64 --micro-batch-size 1 "
                   "--moe-imbalance 1.1 --emit %s 2>&1",
                   f->plan);
    int rc = run_cli(args, out);
    if (rc != 0) {
        fail_msg("predict --emit exited %d: %s", rc, out);
    }
    free(out);
    cJSON *plan = read_json(f->plan);
    f->pred_step_s = cJSON_GetObjectItemCaseSensitive(
                         cJSON_GetObjectItemCaseSensitive(plan, "prediction"), "step_time_s")
                         ->valuedouble;
    write_run(plan, f->run, 1.25, "[1.3, 1.5]");
    write_run(plan, f->run_noload, 1.25, NULL);
    cJSON_Delete(plan);
    write_text(f->bad, "{\"format\": \"moefold-run\", \"version\": 1, \"steps\": ");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct files *f = *state;
    const char *names[] = {f->plan, f->run, f->run_noload, f->bad};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        (void)unlink(names[i]);
    }
    (void)rmdir(f->dir);
    free(f);
    return 0;
}

/* The number after `key` on the summary line. */
static double summary_field(const char *out, const char *key)
{
    const char *s = strstr(out, "summary:");
    assert_non_null(s);
    const char *k = strstr(s, key);
    if (k == NULL) {
        fail_msg("summary line lacks %s: %s", key, s);
    }
    return strtod(k + strlen(key), NULL);
}

static void test_known_errors(void **state)
{
    struct files *f = *state;
    char *out = malloc(OUT_LEN);
    char args[1024];
    (void)snprintf(args, sizeof(args), "compare %s %s 2>&1", f->plan, f->run);
    int rc = run_cli(args, out);
    if (rc != 0) {
        fail_msg("compare exited %d: %s", rc, out);
    }
    /* Measured = 1.25 x predicted: the prediction is 20% short; memory is exact. */
    assert_true(fabs(summary_field(out, "step_err_pct ") - (-20.0)) < 0.01);
    assert_true(fabs(summary_field(out, "step_pred_s ") - f->pred_step_s) < 1e-6);
    assert_non_null(strstr(out, "-20.0%"));
    /* Observed load is the mean over layers; the plan priced 1.1. */
    assert_non_null(strstr(out, "predicted 1.100, observed 1.400"));
    /* Memory is priced at the buffers' sizing (8 x the mean rows): more than the plan's, so the
     * run's memory (the plan's prediction) reads as over-predicted. */
    assert_non_null(strstr(out, "expert-row buffer sizing, 8.00 x the mean rows"));
    assert_true(summary_field(out, "mem_err_pct ") > 1.0);
    free(out);
    out = malloc(OUT_LEN);
    (void)snprintf(args, sizeof(args), "compare %s %s 2>&1", f->plan, f->run_noload);
    assert_int_equal(run_cli(args, out), 0);
    assert_null(strstr(out, "expert-row buffer sizing"));
    assert_true(fabs(summary_field(out, "mem_err_pct ")) < 0.01);
    free(out);
}

static void test_observed_load(void **state)
{
    struct files *f = *state;
    char *out = malloc(OUT_LEN);
    char args[1024];
    (void)snprintf(args, sizeof(args), "compare %s %s --observed-load 2>&1", f->plan, f->run);
    int rc = run_cli(args, out);
    if (rc != 0) {
        fail_msg("compare --observed-load exited %d: %s", rc, out);
    }
    assert_non_null(strstr(out, "predicted 1.400, observed 1.400"));
    /* A busier expert rank costs time: the repriced step is longer than the plan's. */
    assert_true(summary_field(out, "step_pred_s ") > f->pred_step_s * 1.001);
    assert_true(summary_field(out, "step_err_pct ") > -20.0);
    free(out);
}

/* What ran, priced: a run on emulated nodes (moefold-train --ranks-per-node) is priced with
 * that NVLink domain and says so; DeepEP's path run as separate passes (ran.unfused_dispatch, as
 * the CPU engine records it) costs more than the fused kernels the plan priced. */
static void test_ran_nodes_and_unfused_dispatch(void **state)
{
    struct files *f = *state;
    char nodes[320];
    char fused[320];
    char unfused[320];
    (void)snprintf(nodes, sizeof(nodes), "%s/run-nodes.json", f->dir);
    (void)snprintf(fused, sizeof(fused), "%s/run-deepep.json", f->dir);
    (void)snprintf(unfused, sizeof(unfused), "%s/run-unfused.json", f->dir);
    const char *paths[] = {nodes, fused, unfused};
    for (int i = 0; i < 3; i++) {
        cJSON *r = read_json(f->run);
        if (i == 0) {
            cJSON_AddNumberToObject(r, "ranks_per_node", 4);
        } else {
            cJSON *ran = cJSON_AddObjectToObject(r, "ran");
            cJSON_AddStringToObject(ran, "dispatcher", "deepep");
            cJSON_AddBoolToObject(ran, "moe_grouped_gemm", true);
            cJSON_AddBoolToObject(ran, "unfused_dispatch", i == 2);
        }
        write_json(paths[i], r);
    }
    char *out = malloc(OUT_LEN);
    char args[1024];
    (void)snprintf(args, sizeof(args), "compare %s %s 2>&1", f->plan, nodes);
    assert_int_equal(run_cli(args, out), 0);
    assert_non_null(strstr(out, "nodes: the run emulated nodes of 4 rank(s)"));
    assert_non_null(strstr(out, "not the cluster's 8"));
    /* EP8 across two 4-GPU "nodes": half the exchange takes the slower scale-out path. */
    assert_true(summary_field(out, "step_pred_s ") > f->pred_step_s * 1.001);
    (void)snprintf(args, sizeof(args), "compare %s %s 2>&1", f->plan, fused);
    assert_int_equal(run_cli(args, out), 0);
    assert_null(strstr(out, "emulated nodes"));
    double t_fused = summary_field(out, "step_pred_s ");
    (void)snprintf(args, sizeof(args), "compare %s %s 2>&1", f->plan, unfused);
    assert_int_equal(run_cli(args, out), 0);
    assert_true(summary_field(out, "step_pred_s ") > t_fused * 1.0001);
    free(out);
    for (int i = 0; i < 3; i++) {
        (void)unlink(paths[i]);
    }
}

/* --host-speed prices the run at its probe's speed: the factor is the profile's price of the
 * probe GEMM over the probe's time, a slower probe a slower prediction, and the ranks' speed
 * spread the probes saw replaces the profile's (a larger one, longer waits); a run without a
 * probe, or with a malformed one, is refused with a message naming it. */
static void test_host_speed(void **state)
{
    struct files *f = *state;
    char paths[4][320];
    const char *names[] = {"slow", "fast", "spread", "bad"};
    const double us[] = {4000.0, 1000.0, 1000.0, 1000.0};
    const double spread[] = {0.0, 0.0, 0.3, 0.0};
    for (int i = 0; i < 4; i++) {
        (void)snprintf(paths[i], sizeof(paths[i]), "%s/run-probe-%s.json", f->dir, names[i]);
        cJSON *r = read_json(f->run);
        cJSON *p = cJSON_AddObjectToObject(r, "host_probe");
        const int mnk[3] = {512, 512, i == 3 ? 0 : 512};
        cJSON_AddItemToObject(p, "gemm_mnk", cJSON_CreateIntArray(mnk, 3));
        cJSON_AddNumberToObject(p, "time_us", us[i]);
        cJSON_AddNumberToObject(p, "calls", 8);
        cJSON_AddNumberToObject(p, "rank_spread", spread[i]);
        write_json(paths[i], r);
    }
    char *out = malloc(OUT_LEN);
    char args[2048];
    double factor[3], step[3];
    for (int i = 0; i < 3; i++) {
        (void)snprintf(args, sizeof(args), "compare %s %s --host-speed --json 2>&1", f->plan,
                       paths[i]);
        assert_int_equal(run_cli(args, out), 0);
        cJSON *j = cJSON_Parse(out);
        assert_non_null(j);
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(j, "host_speed");
        assert_non_null(h);
        double priced = cJSON_GetObjectItemCaseSensitive(h, "priced_us")->valuedouble;
        factor[i] = cJSON_GetObjectItemCaseSensitive(h, "factor")->valuedouble;
        assert_true(priced > 0.0);
        assert_true(fabs(factor[i] - priced / us[i]) < 1e-9 * factor[i]);
        /* dgx-h100 records no bench row of the probe: the reference is the curve's price. */
        assert_string_equal(cJSON_GetObjectItemCaseSensitive(h, "reference")->valuestring, "price");
        assert_true(cJSON_GetObjectItemCaseSensitive(h, "rank_spread")->valuedouble == spread[i]);
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "step_time_s");
        step[i] = cJSON_GetObjectItemCaseSensitive(st, "predicted")->valuedouble;
        cJSON_Delete(j);
    }
    assert_true(fabs(factor[1] / factor[0] - 4.0) < 1e-9);
    assert_true(step[0] > step[1] * 1.01);
    assert_true(step[2] > step[1] * 1.001); /* the slowest rank at +30%: waits at the exchanges */
    (void)snprintf(args, sizeof(args), "compare %s %s --host-speed 2>&1", f->plan, paths[2]);
    assert_int_equal(run_cli(args, out), 0);
    assert_non_null(strstr(out, "ranks' speed spread at the probes (slowest over mean): 30.0%"));
    /* A profile that records the calibration bench's time of the probe's GEMM takes that as the
     * reference, not the curve's price of the shape; a probe of another shape keeps the price. */
    char base[512], cl_path[320];
    moe_test_root_path("topologies/dgx-h100.json", base, sizeof(base));
    cJSON *cl = read_json(base);
    cJSON *host = cJSON_GetObjectItemCaseSensitive(cl, "host");
    cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(
                             cJSON_GetObjectItemCaseSensitive(host, "probe_gemm_dim"), "value"),
                         512);
    cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(
                             cJSON_GetObjectItemCaseSensitive(host, "probe_gemm_us"), "value"),
                         2500);
    (void)snprintf(cl_path, sizeof(cl_path), "%s/cluster-probe.json", f->dir);
    write_json(cl_path, cl); /* frees cl */
    (void)snprintf(args, sizeof(args), "compare %s %s --cluster %s --host-speed --json 2>&1",
                   f->plan, paths[1], cl_path);
    assert_int_equal(run_cli(args, out), 0);
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(j, "host_speed");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(h, "reference")->valuestring, "bench");
    assert_true(cJSON_GetObjectItemCaseSensitive(h, "priced_us")->valuedouble == 2500.0);
    assert_true(fabs(cJSON_GetObjectItemCaseSensitive(h, "factor")->valuedouble - 2.5) < 1e-12);
    cJSON_Delete(j);
    (void)snprintf(args, sizeof(args), "compare %s %s --cluster %s --host-speed 2>&1", f->plan,
                   paths[1], cl_path);
    assert_int_equal(run_cli(args, out), 0);
    assert_non_null(strstr(out, "the profile's calibration bench measured it at 2500 us"));
    assert_non_null(strstr(out, "priced at 2.500 x the profile's"));
    (void)unlink(cl_path);
    (void)snprintf(args, sizeof(args), "compare %s %s --host-speed 2>&1", f->plan, f->run);
    assert_int_not_equal(run_cli(args, out), 0);
    assert_non_null(strstr(out, "records no host probe"));
    (void)snprintf(args, sizeof(args), "compare %s %s --host-speed 2>&1", f->plan, paths[3]);
    assert_int_not_equal(run_cli(args, out), 0);
    assert_non_null(strstr(out, "host_probe.gemm_mnk[2]"));
    free(out);
    for (int i = 0; i < 4; i++) {
        (void)unlink(paths[i]);
    }
}

/* The experts' GEMMs as the run's router ran them (run.json expert_active_fraction): Mixtral at
 * EP2 holds 4 experts a rank; a run where a quarter of them held rows runs one GEMM per call where
 * the plan priced four, so with a narrow-row term (grouped_half_dim, as a CPU host fits one) the
 * expert phase is priced shorter; the share is printed and in --json. */
static void test_active_experts(void **state)
{
    struct files *f = *state;
    char base[512], cl_path[320], plan_path[320], all[320], quarter[320];
    moe_test_root_path("topologies/dgx-h100.json", base, sizeof(base));
    cJSON *cl = read_json(base);
    cJSON *gemm = cJSON_GetObjectItemCaseSensitive(cl, "gemm");
    cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(
                             cJSON_GetObjectItemCaseSensitive(gemm, "grouped_half_dim"), "value"),
                         256);
    (void)snprintf(cl_path, sizeof(cl_path), "%s/cluster-narrow.json", f->dir);
    write_json(cl_path, cl); /* frees cl */
    (void)snprintf(plan_path, sizeof(plan_path), "%s/plan-ep2.json", f->dir);
    (void)snprintf(all, sizeof(all), "%s/run-ep2.json", f->dir);
    (void)snprintf(quarter, sizeof(quarter), "%s/run-ep2-quarter.json", f->dir);
    char *out = malloc(OUT_LEN);
    char args[2048];
    (void)snprintf(args, sizeof(args),
                   "predict --model mixtral-8x7b --cluster %s --gpus 8 "
                   "--expert-model-parallel-size 2 --global-batch-size 64 --micro-batch-size 1 "
                   "--emit %s 2>&1",
                   cl_path, plan_path);
    if (run_cli(args, out) != 0) {
        fail_msg("predict --emit: %s", out);
    }
    cJSON *plan = read_json(plan_path);
    write_run(plan, all, 1.0, NULL);
    cJSON_Delete(plan);
    cJSON *r = read_json(all);
    cJSON_AddNumberToObject(r, "expert_active_fraction", 0.25);
    write_json(quarter, r); /* frees r */
    double expert_s[2];
    const char *runs[2] = {all, quarter};
    for (int i = 0; i < 2; i++) {
        (void)snprintf(args, sizeof(args), "compare %s %s --cluster %s --json 2>/dev/null",
                       plan_path, runs[i], cl_path);
        assert_int_equal(run_cli(args, out), 0);
        cJSON *j = cJSON_Parse(out);
        assert_non_null(j);
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(j, "time_s"), "expert_gemm");
        expert_s[i] = cJSON_GetObjectItemCaseSensitive(ph, "predicted")->valuedouble;
        const cJSON *act = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(j, "expert_load"), "active_expert_fraction");
        assert_true(i == 0 ? act == NULL : act->valuedouble == 0.25);
        cJSON_Delete(j);
    }
    assert_true(expert_s[1] < 0.99 * expert_s[0]);
    (void)snprintf(args, sizeof(args), "compare %s %s --cluster %s 2>&1", plan_path, quarter,
                   cl_path);
    assert_int_equal(run_cli(args, out), 0);
    assert_non_null(strstr(out, "expert GEMMs: 25.0% of the local experts held rows"));
    free(out);
    const char *paths[] = {cl_path, plan_path, all, quarter};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        (void)unlink(paths[i]);
    }
}

static void test_json(void **state)
{
    struct files *f = *state;
    char *out = malloc(OUT_LEN);
    char args[1024];
    (void)snprintf(args, sizeof(args), "compare %s %s --json 2>/dev/null", f->plan, f->run);
    assert_int_equal(run_cli(args, out), 0);
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "step_time_s");
    assert_true(fabs(cJSON_GetObjectItemCaseSensitive(st, "error_pct")->valuedouble + 20.0) < 0.01);
    const cJSON *load = cJSON_GetObjectItemCaseSensitive(j, "expert_load");
    assert_true(fabs(cJSON_GetObjectItemCaseSensitive(load, "observed")->valuedouble - 1.4) < 1e-9);
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(j, "time_s");
    assert_non_null(cJSON_GetObjectItemCaseSensitive(ph, "expert_gemm"));
    cJSON_Delete(j);
    free(out);
}

/* The run file of f->run with a traced step of two ranks and one difference from the plan. */
static void write_traced_run(const char *from, const char *path)
{
    cJSON *r = read_json(from);
    cJSON *t = cJSON_AddObjectToObject(r, "timeline");
    cJSON_AddNumberToObject(t, "step", 4);
    cJSON_AddNumberToObject(t, "step_s", 0.21);
    cJSON_AddStringToObject(t, "fields", "t0_s t1_s slot op is_wait");
    cJSON *ranks = cJSON_AddArrayToObject(t, "ranks");
    const int op = moe_trace_op_tag(3, 0, false);
    for (int rank = 0; rank < 2; rank++) {
        /* compute 0.1 s, combine 0.05 s of which 0.02 s waiting, host 0.05 s, unattributed. */
        const double rec[] = {
            0.0,  0.1,  MOE_PHASE_COMPUTE, op, 0, 0.1,  0.12, MOE_PHASE_COMBINE,       op, 1,
            0.12, 0.15, MOE_PHASE_COMBINE, op, 0, 0.15, 0.2,  MOE_PHASE_HOST_OVERHEAD, -1, 0,
            0.2,  0.21, MOE_NUM_PHASES,    -1, 0};
        cJSON *rk = cJSON_CreateObject();
        cJSON_AddNumberToObject(rk, "rank", rank);
        cJSON_AddNumberToObject(rk, "stage", 0);
        cJSON_AddItemToObject(rk, "records",
                              cJSON_CreateDoubleArray(rec, (int)(sizeof(rec) / sizeof(rec[0]))));
        cJSON_AddItemToArray(ranks, rk);
    }
    cJSON *d = cJSON_AddArrayToObject(r, "plan_differences");
    cJSON_AddItemToArray(d, cJSON_CreateString("moe_grouped_gemm: the plan says on, ran off"));
    write_json(path, r);
}

static void test_trace_and_differences(void **state)
{
    struct files *f = *state;
    char run[320];
    char trace[320];
    (void)snprintf(run, sizeof(run), "%s/run-traced.json", f->dir);
    (void)snprintf(trace, sizeof(trace), "%s/both.trace.json", f->dir);
    write_traced_run(f->run, run);
    char *out = malloc(OUT_LEN);
    char args[1024];
    (void)snprintf(args, sizeof(args), "compare %s %s --trace %s 2>&1", f->plan, run, trace);
    int rc = run_cli(args, out);
    if (rc != 0) {
        fail_msg("compare --trace exited %d: %s", rc, out);
    }
    assert_non_null(strstr(out, "the run differs from the plan"));
    assert_non_null(strstr(out, "moe_grouped_gemm: the plan says on, ran off"));
    assert_non_null(strstr(out, "\nunattributed "));
    assert_non_null(strstr(out, "\nphase_errors:"));
    struct moe_trace_summary *sum = malloc(sizeof(*sum));
    assert_non_null(sum);
    struct moe_diag d = {0};
    if (moe_trace_summarize(trace, sum, &d) != MOE_OK) {
        fail_msg("%s: %s", trace, d.message);
    }
    assert_int_equal(sum->num_procs, 3); /* one predicted stage, two measured ranks */
    assert_true(sum->worst_overlap_us < 0.01);
    int measured = 0;
    for (int p = 0; p < sum->num_procs; p++) {
        const struct moe_trace_proc *pr = &sum->procs[p];
        if (pr->pid >= 1000) {
            measured++;
            assert_true(fabs(pr->phase_us[MOE_PHASE_COMPUTE] - 1e5) < 1e-3);
            assert_true(fabs(pr->phase_us[MOE_PHASE_COMBINE] - 5e4) < 1e-3);
            assert_true(fabs(pr->other_us - 1e4) < 1e-3); /* unattributed */
            assert_true(fabs(pr->last_us - pr->first_us - 2.1e5) < 1e-3);
        } else {
            assert_true(fabs((pr->last_us - pr->first_us) * 1e-6 - f->pred_step_s) <
                        0.01 * f->pred_step_s);
        }
    }
    assert_int_equal(measured, 2);
    free(sum);
    /* The same two timelines as an ASCII Gantt chart: one row per predicted stage and measured
     * rank, 60 cells wide; the measured ranks' compute (c) fills the start of their rows. */
    (void)snprintf(args, sizeof(args), "compare %s %s --gantt 60 2>&1", f->plan, run);
    assert_int_equal(run_cli(args, out), 0);
    const char *row = strstr(out, "\nmeasured rank 1 ");
    assert_non_null(row);
    const char *bar = strchr(row, '|');
    assert_non_null(bar);
    assert_true(strlen(bar) > 62 && bar[61] == '|');
    assert_true(bar[1] == 'c');
    assert_non_null(strstr(out, "\npredicted stage 0 "));
    /* Without a traced step --trace says what to do. */
    (void)snprintf(args, sizeof(args), "compare %s %s --trace %s 2>&1", f->plan, f->run, trace);
    rc = run_cli(args, out);
    assert_true(rc != 0);
    assert_non_null(strstr(out, "--trace FILE"));
    free(out);
    (void)unlink(run);
    (void)unlink(trace);
}

static void expect_failure(const char *args, const char *needle)
{
    char *out = malloc(OUT_LEN);
    int rc = run_cli(args, out);
    if (rc == 0 || strstr(out, needle) == NULL) {
        fail_msg("moefold %s: exit %d, expected non-zero and '%s' in: %s", args, rc, needle, out);
    }
    free(out);
}

static void test_bad_input(void **state)
{
    struct files *f = *state;
    char args[1024];
    (void)snprintf(args, sizeof(args), "compare %s %s 2>&1", f->plan, f->bad);
    expect_failure(args, "bad.json");
    (void)snprintf(args, sizeof(args), "compare %s %s/missing.json 2>&1", f->plan, f->dir);
    expect_failure(args, "missing.json");
    (void)snprintf(args, sizeof(args), "compare %s %s --observed-load 2>&1", f->plan,
                   f->run_noload);
    expect_failure(args, "records no expert load");
    (void)snprintf(args, sizeof(args), "compare %s %s --bogus 2>&1", f->plan, f->run);
    expect_failure(args, "--bogus");
    (void)snprintf(args, sizeof(args), "compare %s 2>&1", f->plan);
    expect_failure(args, "need a plan file and a run file");
    /* The run file where the plan belongs: named as not a plan. */
    (void)snprintf(args, sizeof(args), "compare %s %s 2>&1", f->run, f->run);
    expect_failure(args, "run.json");
}

/* A run with a kernel profile: compare lists each phase's ops and the time between them (the phase
 * minus its ops), and puts the measured attention ops beside the model's attention core. */
static void test_kernel_profile(void **state)
{
    struct files *f = *state;
    cJSON *run = read_json(f->run_noload);
    double compute =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(run, "time_s"), "compute")
            ->valuedouble;
    cJSON *k = cJSON_AddObjectToObject(run, "kernel_s");
    cJSON *c = cJSON_AddObjectToObject(k, "compute");
    const char *ops[] = {"attention_fwd", "attention_bwd", "linear_fwd"};
    const double share[] = {0.2, 0.3, 0.4};
    for (int i = 0; i < 3; i++) {
        cJSON *o = cJSON_AddObjectToObject(c, ops[i]);
        cJSON_AddNumberToObject(o, "s", share[i] * compute);
        cJSON_AddNumberToObject(o, "calls", 32);
    }
    char path[320];
    (void)snprintf(path, sizeof(path), "%s/run-kernels.json", f->dir);
    write_json(path, run);
    char *out = malloc(OUT_LEN);
    char args[1024];
    (void)snprintf(args, sizeof(args), "compare %s %s 2>&1", f->plan, path);
    assert_int_equal(run_cli(args, out), 0);
    const char *t = strstr(out, "kernels (measured per step");
    assert_non_null(t);
    char want[160];
    (void)snprintf(want, sizeof(want), "%-14s %-26s %10.3f", "compute", "(between ops)",
                   0.1 * compute * 1e3);
    if (strstr(t, want) == NULL) {
        fail_msg("no '%s' in: %s", want, t);
    }
    const char *a = strstr(out, "attention core per step (stage 0): predicted ");
    assert_non_null(a);
    double pred = strtod(a + strlen("attention core per step (stage 0): predicted "), NULL);
    const char *m = strstr(a, "measured ");
    assert_non_null(m);
    double meas = strtod(m + strlen("measured "), NULL);
    assert_true(pred > 0.0);
    assert_true(fabs(meas - 0.5 * compute * 1e3) <= 1e-3 + 1e-6 * meas);
    /* An MTP layer runs attention too, on the last stage (here the only one), and the measured
     * side sums its ops: the model's core counts it as one more layer of the last layer's kind
     * (it left MTP out: DeepSeek-V3's miniature read -0.5% where the per-call error was +24%). */
    char mtp_plan[320];
    (void)snprintf(mtp_plan, sizeof(mtp_plan), "%s/plan-mtp.json", f->dir);
    (void)snprintf(args, sizeof(args),
                   "predict --model mixtral-8x7b --cluster dgx-h100 --gpus 8 "
                   "--expert-model-parallel-size 8 --global-batch-size 64 --micro-batch-size 1 "
                   "--moe-imbalance 1.1 --mtp-num-layers 1 --emit %s 2>&1",
                   mtp_plan);
    assert_int_equal(run_cli(args, out), 0);
    (void)snprintf(args, sizeof(args), "compare %s %s 2>&1", mtp_plan, path);
    assert_int_equal(run_cli(args, out), 0);
    a = strstr(out, "attention core per step (stage 0): predicted ");
    assert_non_null(a);
    double pred_mtp = strtod(a + strlen("attention core per step (stage 0): predicted "), NULL);
    assert_true(fabs(pred_mtp / pred - 33.0 / 32.0) < 1e-4);
    free(out);
    (void)unlink(mtp_plan);
    (void)unlink(path);
}

/* The number after `key` on the phase_in_runs line. */
static long in_runs_field(const char *out, const char *key)
{
    const char *s = strstr(out, "phase_in_runs:");
    assert_non_null(s);
    const char *k = strstr(s, key);
    if (k == NULL) {
        fail_msg("phase_in_runs line lacks %s: %s", key, s);
    }
    return strtol(k + strlen(key), NULL, 10);
}

/* --repeat: each phase's range over the runs, and whether the prediction lies inside it; a run of
 * another rank count is refused by name. */
static void test_repeat_runs(void **state)
{
    struct files *f = *state;
    char fast[300];
    char slow[300];
    char slower[300];
    char other[300];
    (void)snprintf(fast, sizeof(fast), "%s/run-fast.json", f->dir);
    (void)snprintf(slow, sizeof(slow), "%s/run-slow.json", f->dir);
    (void)snprintf(slower, sizeof(slower), "%s/run-slower.json", f->dir);
    (void)snprintf(other, sizeof(other), "%s/run-other.json", f->dir);
    cJSON *plan = read_json(f->plan);
    write_run(plan, fast, 0.9, NULL);
    write_run(plan, slow, 1.3, NULL);
    write_run(plan, slower, 1.4, NULL);
    write_run(plan, other, 1.0, NULL);
    cJSON_Delete(plan);
    cJSON *o = read_json(other);
    cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(o, "num_ranks"), 4);
    write_json(other, o);

    char *out = malloc(OUT_LEN);
    char args[2048];
    /* runs at 1.25 (compared), 0.9 and 1.4 x the prediction: it lies inside every range */
    (void)snprintf(args, sizeof(args), "compare %s %s --repeat %s --repeat %s 2>&1", f->plan,
                   f->run_noload, fast, slower);
    int rc = run_cli(args, out);
    if (rc != 0) {
        fail_msg("compare --repeat exited %d: %s", rc, out);
    }
    assert_non_null(strstr(out, "runs_min-max_s"));
    assert_int_equal(in_runs_field(out, "runs "), 3);
    assert_int_equal(in_runs_field(out, "step "), 1);
    assert_int_equal(in_runs_field(out, "expert_gemm "), 1);
    /* the step's range is 0.9 .. 1.4 x the prediction */
    char want[64];
    (void)snprintf(want, sizeof(want), "%.6f-%.6f", 0.9 * f->pred_step_s, 1.4 * f->pred_step_s);
    assert_non_null(strstr(out, want));
    /* still 20% short of the compared run */
    assert_true(fabs(summary_field(out, "step_err_pct ") - (-20.0)) < 0.01);
    free(out);

    /* runs at 1.25, 1.3 and 1.4: the prediction lies below every range */
    out = malloc(OUT_LEN);
    (void)snprintf(args, sizeof(args), "compare %s %s --repeat %s --repeat %s 2>&1", f->plan,
                   f->run_noload, slow, slower);
    assert_int_equal(run_cli(args, out), 0);
    assert_int_equal(in_runs_field(out, "step "), 0);
    assert_int_equal(in_runs_field(out, "expert_gemm "), 0);
    free(out);

    /* --json: each phase's and the step's measured_range */
    out = malloc(OUT_LEN);
    (void)snprintf(args, sizeof(args), "compare %s %s --repeat %s --json", f->plan, f->run_noload,
                   fast);
    assert_int_equal(run_cli(args, out), 0);
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(j, "runs")->valueint, 2);
    const cJSON *range = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(j, "step_time_s"), "measured_range");
    assert_int_equal(cJSON_GetArraySize(range), 2);
    assert_true(fabs(cJSON_GetArrayItem(range, 0)->valuedouble / f->pred_step_s - 0.9) < 1e-6);
    assert_true(fabs(cJSON_GetArrayItem(range, 1)->valuedouble / f->pred_step_s - 1.25) < 1e-6);
    cJSON_Delete(j);
    free(out);

    /* a run of another rank count, and a missing one: refused by name */
    out = malloc(OUT_LEN);
    (void)snprintf(args, sizeof(args), "compare %s %s --repeat %s 2>&1", f->plan, f->run_noload,
                   other);
    assert_int_equal(run_cli(args, out), 1);
    assert_non_null(strstr(out, "run-other.json"));
    assert_non_null(strstr(out, "4 ranks"));
    (void)snprintf(args, sizeof(args), "compare %s %s --repeat %s/none.json 2>&1", f->plan,
                   f->run_noload, f->dir);
    assert_int_not_equal(run_cli(args, out), 0);
    assert_non_null(strstr(out, "none.json"));
    free(out);
    const char *names[] = {fast, slow, slower, other};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        (void)unlink(names[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_errors), cmocka_unit_test(test_observed_load),
        cmocka_unit_test(test_json),         cmocka_unit_test(test_trace_and_differences),
        cmocka_unit_test(test_bad_input),    cmocka_unit_test(test_kernel_profile),
        cmocka_unit_test(test_repeat_runs),  cmocka_unit_test(test_ran_nodes_and_unfused_dispatch),
        cmocka_unit_test(test_host_speed),   cmocka_unit_test(test_active_experts),
    };
    return cmocka_run_group_tests_name("cli_compare", tests, setup, teardown);
}
