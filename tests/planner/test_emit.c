/*
 * Plans out: the Megatron-LM flags of a plan parse back to the same model, layout and options and
 * predict the same step time and memory (for every plan of several searches); `moefold plan
 * --megatron-args` fed to `moefold predict` prints the same prediction; --emit writes a plan file
 * the plan reader accepts; the launch script is valid bash with the node count, ranks per node
 * and both launchers; --json is one parseable object; whatif prints CSV and, with gnuplot, a plot.
 */
#include "model/config.h"
#include "model/cost.h"
#include "model/megatron_args.h"
#include "planner/emit.h"
#include "planner/report.h"
#include "planner/search.h"
#include "tests/test_util.h"
#include "topologies/cluster_file.h"
#include "topologies/plan_file.h"

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

#define OUT_LEN (1 << 20)

static void set_topologies(void)
{
    char dir[512];
    (void)setenv("MOEFOLD_TOPOLOGIES", moe_test_root_path("topologies", dir, sizeof(dir)), 1);
}

/* Parse a plan's Megatron flags onto the preset, as `moefold predict` does, and predict. */
static void round_trip(const struct moe_model_cfg *preset,
                       const struct moe_cluster *cl,
                       const struct moe_plan_candidate *c)
{
    char *args = NULL;
    struct moe_diag d = {0};
    assert_int_equal(moe_plan_megatron_args(preset, &c->lay, &c->opt, 0u, &args, &d), MOE_OK);
    const char *argv[1024];
    int argc = 0;
    assert_int_equal(moe_megatron_split_line(args, argv, 1024, &argc, &d), MOE_OK);
    struct moe_model_cfg cfg = *preset;
    struct moe_layout lay;
    struct moe_options opt;
    moe_layout_init(&lay);
    moe_options_init(&opt);
    lay.seq_length = 0;
    struct moe_megatron_result mres;
    enum moe_status st = moe_megatron_parse_args(argc, argv, &cfg, &lay, &opt, &mres, &d);
    if (st != MOE_OK) {
        fprintf(stderr, "parse: %s\n", d.message);
    }
    assert_int_equal(st, MOE_OK);
    lay.num_gpus = c->lay.num_gpus;
    assert_int_equal(moe_layout_resolve(&cfg, cl, &opt, &lay, &d), MOE_OK);
    size_t need = moe_cost_workspace_bytes(&lay, MOE_SCHED_SIMULATE);
    void *ws = malloc(need);
    assert_non_null(ws);
    struct moe_prediction p;
    assert_int_equal(
        moe_cost_predict(&cfg, cl, &lay, &opt, NULL, MOE_SCHED_SIMULATE, ws, need, &p, &d), MOE_OK);
    free(ws);
    assert_true(c->has_sim);
    if (p.step_time_s != c->sim.step_time_s || p.mem.total != c->sim.mem.total) {
        fprintf(stderr, "round trip differs: %.9g s / %.9g B vs %.9g s / %.9g B\n  %s\n",
                p.step_time_s, p.mem.total, c->sim.step_time_s, c->sim.mem.total, args);
    }
    assert_true(p.step_time_s == c->sim.step_time_s);
    assert_true(p.mem.total == c->sim.mem.total);
    free(args);
}

static void test_megatron_round_trip(void **state)
{
    (void)state;
    set_topologies();
    const struct {
        const char *model, *cluster;
        int gpus, gbs;
    } cases[] = {
        {"deepseek-v3", "dgx-h100", 256, 1024}, {"qwen3-30b-a3b", "gb200-nvl72", 16, 256},
        {"mixtral-8x7b", "dgx-b200", 32, 256},  {"gpt-oss-120b", "dgx-h100", 32, 256},
        {"llama3-70b", "hgx-b300", 64, 256},
    };
    int plans = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct moe_model_cfg cfg;
        struct moe_cluster cl;
        struct moe_diag d = {0};
        assert_int_equal(moe_cfg_preset(cases[i].model, &cfg, &d), MOE_OK);
        assert_int_equal(moe_cluster_load(cases[i].cluster, &cl, &d), MOE_OK);
        struct moe_plan_request req;
        moe_plan_request_init(&req);
        req.cfg = &cfg;
        req.cl = &cl;
        req.num_gpus = cases[i].gpus;
        req.gbs = cases[i].gbs;
        req.seq_length = 4096;
        req.opt.force_load_balancing = true;
        req.top_k = 12;
        req.pareto_window = 0.0;
        if (i == 0) {
            req.recipes = 1u << MOE_RECIPE_FP8_BLOCKWISE; /* keep the largest search short */
        }
        struct moe_plan_result res;
        assert_int_equal(moe_plan_search(&req, &res, &d), MOE_OK);
        assert_true(res.num_top > 0);
        for (int k = 0; k < res.num_top; k++) {
            round_trip(&cfg, &cl, &res.top[k]);
            plans++;
        }
        moe_plan_result_free(&res);
    }
    assert_true(plans >= 30);
}

/* Run the moefold binary; returns its exit status, output in out. */
static int run(char *out, const char *fmt, ...) MOE_PRINTF(2, 3);
static int run(char *out, const char *fmt, ...)
{
    char bin[512];
    char cmd[8192];
    char args[7000];
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    (void)snprintf(cmd, sizeof(cmd), "%s %s", moe_test_bin_path("moefold", bin, sizeof(bin)), args);
    return moe_test_run_capture(cmd, out, OUT_LEN);
}

static const char *const problem = "--model qwen3-30b-a3b --cluster dgx-h100 --gpus 16 "
                                   "--global-batch-size 256 --seq-length 4096 "
                                   "--moe-router-force-load-balancing";

/* plan --megatron-args, then predict with those flags: the same step time and memory. */
static void test_cli_round_trip(void **state)
{
    (void)state;
    set_topologies();
    char *out = malloc(OUT_LEN);
    assert_non_null(out);
    char tmpl[] = "/tmp/moefold_plan_XXXXXX";
    assert_non_null(mkdtemp(tmpl));
    char plan_path[256];
    char script[256];
    (void)snprintf(plan_path, sizeof(plan_path), "%s/plan.json", tmpl);
    (void)snprintf(script, sizeof(script), "%s/launch.sh", tmpl);
    int rc = run(out,
                 "plan %s --top 3 --pareto-window 0 --json --megatron-args --emit %s "
                 "--launch-script %s",
                 problem, plan_path, script);
    if (rc != 0) {
        fprintf(stderr, "%s\n", out);
    }
    assert_int_equal(rc, 0);
    cJSON *o = cJSON_Parse(out);
    assert_non_null(o);
    const cJSON *top = cJSON_GetObjectItemCaseSensitive(o, "top");
    assert_true(cJSON_GetArraySize(top) == 3);
    const cJSON *best = cJSON_GetArrayItem(top, 0);
    double t_plan = cJSON_GetObjectItemCaseSensitive(best, "step_time_s")->valuedouble;
    double m_plan = cJSON_GetObjectItemCaseSensitive(best, "memory_gib")->valuedouble;
    const char *flags = cJSON_GetObjectItemCaseSensitive(o, "megatron_args")->valuestring;
    assert_non_null(flags);
    char *flags_copy = strdup(flags);
    cJSON *stats = cJSON_GetObjectItemCaseSensitive(o, "stats");
    assert_true(cJSON_GetObjectItemCaseSensitive(stats, "enumerated")->valuedouble > 1e6);
    assert_non_null(cJSON_GetObjectItemCaseSensitive(o, "pareto"));
    cJSON_Delete(o);

    rc = run(out, "predict --model qwen3-30b-a3b --cluster dgx-h100 --gpus 16 %s --json",
             flags_copy);
    if (rc != 0) {
        fprintf(stderr, "%s\n", out);
    }
    assert_int_equal(rc, 0);
    o = cJSON_Parse(strchr(out, '{')); /* after predict's notes on ignored flags (stderr) */
    assert_non_null(o);
    double t_pred = cJSON_GetObjectItemCaseSensitive(o, "step_time_s")->valuedouble;
    assert_true(fabs(t_pred - t_plan) <= 1e-12 * t_plan);
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(o, "memory_gib");
    assert_non_null(mem);
    const cJSON *total = cJSON_GetObjectItemCaseSensitive(mem, "total");
    assert_non_null(total);
    assert_true(fabs(total->valuedouble - m_plan) <= 1e-9 * m_plan);
    cJSON_Delete(o);

    /* The plan file reads back, with the same layout. */
    struct moe_cluster cl;
    struct moe_diag d = {0};
    assert_int_equal(moe_cluster_load("dgx-h100", &cl, &d), MOE_OK);
    struct moe_plan *plan = calloc(1, sizeof(*plan));
    assert_non_null(plan);
    cJSON *pred = NULL;
    assert_int_equal(moe_plan_read(plan_path, &cl, plan, &pred, &d), MOE_OK);
    assert_int_equal(plan->layout.num_gpus, 16);
    assert_non_null(pred);
    cJSON_Delete(pred);
    free(plan);

    /* The launch script: valid bash, nodes, ranks per node, both launchers and the flags. */
    char cmd[600];
    (void)snprintf(cmd, sizeof(cmd), "bash -n %s", script);
    assert_int_equal(moe_test_run_capture(cmd, out, OUT_LEN), 0);
    FILE *f = fopen(script, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, OUT_LEN - 1, f);
    out[n] = '\0';
    fclose(f);
    assert_non_null(strstr(out, "NODES=2\n"));
    assert_non_null(strstr(out, "GPUS_PER_NODE=8\n"));
    assert_non_null(strstr(out, "torchrun"));
    assert_non_null(strstr(out, "mpirun"));
    assert_non_null(strstr(out, "srun"));
    assert_non_null(strstr(out, "--expert-model-parallel-size"));
    assert_non_null(strstr(out, plan_path));
    assert_int_equal(access(script, X_OK), 0);
    (void)remove(script);
    (void)remove(plan_path);
    (void)rmdir(tmpl);
    free(flags_copy);
    free(out);
}

/* Text output: table header, summary line; nothing fits names the closest plan. */
static void test_cli_text(void **state)
{
    (void)state;
    set_topologies();
    char *out = malloc(OUT_LEN);
    assert_non_null(out);
#if defined(__SANITIZE_ADDRESS__)
    /* Under the sanitizers one precision (the plain build searches all): the text is the same
     * code, and the whole search took 6 s of CI's sanitizer pass, 2 s with one precision. */
    int rc = run(out, "plan %s --top 2 --explain 1 --fix tp=1 --precision fp8-blockwise", problem);
#else
    int rc = run(out, "plan %s --top 2 --explain 1 --fix tp=1", problem);
#endif
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "rank    step_s"));
    assert_non_null(strstr(out, "# searched "));
    assert_non_null(strstr(out, "# why plan 1 beats"));
    assert_non_null(strstr(out, "# Pareto front"));
    assert_null(strstr(out, "WARNING"));
    rc = run(out, "plan --model deepseek-v3 --cluster dgx-h100 --gpus 8 --global-batch-size 64");
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "no plan fits"));
    assert_non_null(strstr(out, "closest:"));
    assert_non_null(strstr(out, "GiB over"));
    rc = run(out, "plan %s --fix tq=2", problem);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "unknown knob"));
    rc = run(out, "plan --model qwen3-30b-a3b --cluster dgx-h100 --gpus 16");
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "--global-batch-size"));
    free(out);
}

/* whatif: CSV rows per point with scaling efficiencies; a plot when gnuplot is there. */
static void test_cli_whatif(void **state)
{
    (void)state;
    set_topologies();
    char *out = malloc(OUT_LEN);
    assert_non_null(out);
    int rc =
        run(out, "whatif --model qwen3-30b-a3b --cluster dgx-h100 --global-batch-size 256 "
                 "--moe-router-force-load-balancing --precision fp8-blockwise --vary gpus=8,16 "
                 "--csv");
    if (rc != 0) {
        fprintf(stderr, "%s\n", out);
    }
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "gpus,fits,step_time_s"));
    assert_non_null(strstr(out, "strong_scaling_eff"));
    assert_non_null(strstr(out, "\n\"8\",1,"));
    assert_non_null(strstr(out, "\n\"16\",1,"));
    char tmpl[] = "/tmp/moefold_plot_XXXXXX";
    assert_non_null(mkdtemp(tmpl));
    char svg[256];
    (void)snprintf(svg, sizeof(svg), "%s/x.svg", tmpl);
    rc = run(out,
             "whatif --model qwen3-30b-a3b --global-batch-size 256 --gpus 16 "
             "--moe-router-force-load-balancing --precision bf16 --vary cluster=dgx-h100,dgx-b200 "
             "--plot %s",
             svg);
    bool have = moe_test_run_capture("command -v gnuplot", out + OUT_LEN / 2, 256) == 0;
    if (have) {
        assert_int_equal(rc, 0);
        assert_int_equal(access(svg, R_OK), 0);
        (void)remove(svg);
    } else {
        assert_int_equal(rc, 1);
        assert_non_null(strstr(out, "gnuplot-nox"));
    }
    (void)rmdir(tmpl);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_megatron_round_trip),
        cmocka_unit_test(test_cli_round_trip),
        cmocka_unit_test(test_cli_text),
        cmocka_unit_test(test_cli_whatif),
    };
    const char *filter = getenv("MOE_TEST_FILTER"); /* run one test: MOE_TEST_FILTER=name */
    if (filter != NULL) {
        cmocka_set_test_filter(filter);
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
