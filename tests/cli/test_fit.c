/*
 * `moefold fit` (cli/fit.h):
 *  - recovery: runs "measured" on a cluster whose software figures are set to known values (with
 *    1% noise) are fitted back to those values within the fit's own standard errors;
 *  - leave-one-out: a run's leave-one-out prediction is exactly what a fit without it predicts;
 *  - the shipped profiles are what the fit writes (fitted figures to their 4 digits, the rest at
 *    their priors): `make fit` reproduces them;
 *  - bad input: no usable run, a run whose flags do not parse (reported, left out), a base file
 *    without priors, an output path that cannot be written (nothing written); the CLI's usage
 *    errors.
 */
#include "cli/fit.h"
#include "tests/test_util.h"
#include "topologies/cluster_file.h"
#include "topologies/json_util.h"

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

struct truth {
    const char *path;
    double value;
};

/* The figures the synthetic runs are "measured" with (each about one prior sd from its prior). */
static const struct truth truths[] = {
    {"gemm.grouped_eff", 0.72},
    {"gpu.kernel_launch_us", 110.0},
    {"dispatch.deepep_inter_eff", 0.6},
};

/* Configurations of shipped Hopper runs (their flags, on the test's cluster file). */
static const char *const run_ids[] = {"B5", "B12", "B17", "Z1", "Z2", "Z13", "Z14"};

static void shipped_runs(struct moe_run_set *set)
{
    char path[4096];
    moe_test_root_path("tests/data/published_runs.json", path, sizeof(path));
    memset(set, 0, sizeof(*set));
    struct moe_diag d = {0};
    assert_int_equal(moe_runs_read(path, set, &d), MOE_OK);
}

static const struct moe_run *find_run(const struct moe_run_set *set, const char *id)
{
    for (int i = 0; i < set->n; i++) {
        if (strcmp(set->runs[i].id, id) == 0) {
            return &set->runs[i];
        }
    }
    fail_msg("run %s not in the shipped runs", id);
    return NULL;
}

/* Write the runs as measured on `truth_cl` (noise: lognormal, sd 1%, seeded). */
static void synthetic_runs(const char *cluster_path,
                           const struct moe_cluster *truth_cl,
                           struct moe_run_set *out)
{
    struct moe_run_set shipped;
    shipped_runs(&shipped);
    memset(out, 0, sizeof(*out));
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 20261201);
    for (size_t i = 0; i < sizeof(run_ids) / sizeof(run_ids[0]); i++) {
        struct moe_run r = *find_run(&shipped, run_ids[i]);
        (void)snprintf(r.cluster, sizeof(r.cluster), "%s", cluster_path);
        r.software[0] = '\0';
        r.known_miss[0] = '\0';
        r.complete = true;
        struct moe_cli_problem *p = calloc(1, sizeof(*p));
        struct moe_diag d = {0};
        struct moe_prediction pred;
        assert_int_equal(moe_run_problem(&r, truth_cl, NULL, p, &d), MOE_OK);
        assert_int_equal(moe_cli_run_predict(p, NULL, &pred, &d), MOE_OK);
        double u1 = moe_test_rng_uniform(&rng) + 1e-12;
        double u2 = moe_test_rng_uniform(&rng);
        double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        r.measured = moe_run_predicted(&r, &pred) * exp(0.01 * z);
        assert_int_equal(moe_runs_add(out, &r, &d), MOE_OK);
        free(p);
    }
    moe_runs_free(&shipped);
}

static void test_recovers_known_figures(void **state)
{
    (void)state;
    char base[4096];
    moe_test_root_path("topologies/dgx-h100.json", base, sizeof(base));
    struct moe_cluster truth_cl;
    struct moe_diag d = {0};
    assert_int_equal(moe_cluster_load_release(base, MOE_CLUSTER_SHARED, &truth_cl, &d), MOE_OK);
    /* Every fitted figure at its prior, then the truths. */
    cJSON *root = NULL;
    assert_int_equal(moe_cluster_read_json(base, &root, NULL, 0, &d), MOE_OK);
    struct moe_run_set none;
    memset(&none, 0, sizeof(none));
    for (size_t i = 0; i < sizeof(truths) / sizeof(truths[0]); i++) {
        size_t off = 0;
        assert_int_equal(moe_cluster_figure_ref(truths[i].path, &off, &d), MOE_OK);
        memcpy((unsigned char *)&truth_cl + off, &truths[i].value, sizeof(double));
    }
    /* Figures not under test sit at their priors in the truth too. */
    struct moe_fit_options o;
    moe_fit_options_init(&o);
    o.from_priors = true; /* the shipped profiles, from the microbenchmark priors */
    o.loo = false;
    o.releases = false;
    struct moe_fit_result probe;
    struct moe_run_set runs;
    synthetic_runs(base, &truth_cl, &runs); /* first pass: only to list the candidates */
    assert_int_equal(moe_fit(base, &runs, &o, &probe, &d), MOE_OK);
    for (int j = 0; j < probe.num_params; j++) {
        bool tested = false;
        for (size_t i = 0; i < sizeof(truths) / sizeof(truths[0]); i++) {
            tested = tested || strcmp(truths[i].path, probe.params[j].path) == 0;
        }
        if (!tested && probe.params[j].cluster <= 0) {
            memcpy((unsigned char *)&truth_cl + probe.params[j].offset,
                   &probe.params[j].prior.value, sizeof(double));
        }
    }
    moe_fit_result_free(&probe);
    moe_runs_free(&runs);
    synthetic_runs(base, &truth_cl, &runs);
    struct moe_fit_result res;
    assert_int_equal(moe_fit(base, &runs, &o, &res, &d), MOE_OK);
    assert_int_equal(res.num_used, (int)(sizeof(run_ids) / sizeof(run_ids[0])));
    for (size_t i = 0; i < sizeof(truths) / sizeof(truths[0]); i++) {
        const struct moe_fit_param *fp = NULL;
        for (int j = 0; j < res.num_params; j++) {
            if (strcmp(res.params[j].path, truths[i].path) == 0 && res.params[j].cluster <= 0) {
                fp = &res.params[j];
            }
        }
        assert_non_null(fp);
        printf("  %-28s truth %8.4g  fitted %8.4g +- %.2g  (prior %.4g)%s\n", fp->path,
               truths[i].value, fp->value, fp->se, fp->prior.value,
               fp->constrained ? "" : "  not constrained");
        assert_true(fp->constrained);
        assert_true(fabs(fp->value - truths[i].value) <= 3.0 * fp->se);
        /* ... and the fit learned something: closer to the truth than the prior was. */
        assert_true(fabs(fp->value - truths[i].value) < fabs(fp->prior.value - truths[i].value));
    }
    assert_true(res.rms_fit < 0.03);
    moe_fit_result_free(&res);
    moe_runs_free(&runs);
    cJSON_Delete(root);
}

/* A run's leave-one-out prediction is the prediction of a fit on the other runs. */
static void test_leave_one_out(void **state)
{
    (void)state;
    struct moe_run_set shipped;
    shipped_runs(&shipped);
    struct moe_run_set four;
    memset(&four, 0, sizeof(four));
    struct moe_run_set three;
    memset(&three, 0, sizeof(three));
    struct moe_diag d = {0};
    const char *ids[] = {"B17", "Z1", "Z2", "Z13"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(moe_runs_add(&four, find_run(&shipped, ids[i]), &d), MOE_OK);
        if (i != 0) {
            assert_int_equal(moe_runs_add(&three, find_run(&shipped, ids[i]), &d), MOE_OK);
        }
    }
    /* B17 predicted by the three others: added to their set without weight in the fit. */
    struct moe_run held = *find_run(&shipped, "B17");
    held.known_miss[0] = 'x'; /* left out of the fit, still predicted */
    held.known_miss[1] = '\0';
    assert_int_equal(moe_runs_add(&three, &held, &d), MOE_OK);
    struct moe_fit_options o;
    moe_fit_options_init(&o);
    o.from_priors = true; /* the shipped profiles, from the microbenchmark priors */
    o.releases = false;
    struct moe_fit_result a;
    struct moe_fit_result b;
    assert_int_equal(moe_fit("dgx-h100", &four, &o, &a, &d), MOE_OK);
    o.loo = false;
    assert_int_equal(moe_fit("dgx-h100", &three, &o, &b, &d), MOE_OK);
    assert_true(a.runs[0].used && !b.runs[3].used);
    printf("  B17: leave-one-out %.6g, fit without it %.6g, in sample %.6g, measured %.6g\n",
           a.runs[0].pred_loo, b.runs[3].pred_fit, a.runs[0].pred_fit, held.measured);
    assert_true(fabs(a.runs[0].pred_loo / b.runs[3].pred_fit - 1.0) < 1e-9);
    assert_true(fabs(a.runs[0].pred_loo - a.runs[0].pred_fit) > 1e-6 * a.runs[0].pred_fit);
    moe_fit_result_free(&a);
    moe_fit_result_free(&b);
    moe_runs_free(&four);
    moe_runs_free(&three);
    moe_runs_free(&shipped);
}

/*
 * A user's sweep, as a user meets it: the Qwen3-235B sweep on 256 H100 (B12, Z1, Z2, Z4) is not in
 * the base profile (dgx-h100 fitted from the priors to the other shipped H100 runs: B5, B17, B19,
 * Z13, Z14), three of its layouts are fitted as runs on that profile (refining it: each figure
 * held to the base's value with the prior's sd) and the fourth is predicted; each in turn. The
 * issue's bar: the held-out layout within 15%, and every pair of the four measured more than 5%
 * apart ordered as measured. Measured with the Hopper GEMM efficiencies measured on an H200,
 * --constrain 0.95 and the combined 1F1B schedule's expert launches hidden behind the paired
 * backward's expert GEMMs (2026-12-04): B12 -10.9%, Z1 -1.3%, Z2 +1.1%, Z4 +4.2%, mean |error|
 * 4.4%, every pair ordered with each held out. Before the last, Z4 was +19.9% (B12 -9.1%, Z1
 * +1.6%, Z2 -6.6%): the fit of the three PP8 layouts lowered the host time per call (150 -> 140
 * us) to speed up B12's then exposed launches, and Z4, host-bound in the model, came out fast. (The
 * shipped dgx-h100 profile is fitted to all four: refining it would predict a run it has seen.)
 */
static void test_user_sweep(void **state)
{
    (void)state;
    struct moe_run_set shipped;
    shipped_runs(&shipped);
    const char *ids[] = {"B12", "Z1", "Z2", "Z4"};
    struct moe_diag d = {0};
    struct moe_run_set others;
    memset(&others, 0, sizeof(others));
    for (int i = 0; i < shipped.n; i++) {
        bool in_sweep = false;
        for (int k = 0; k < 4; k++) {
            in_sweep = in_sweep || strcmp(shipped.runs[i].id, ids[k]) == 0;
        }
        if (!in_sweep) {
            assert_int_equal(moe_runs_add(&others, &shipped.runs[i], &d), MOE_OK);
        }
    }
    struct moe_fit_options o;
    moe_fit_options_init(&o);
    o.loo = false;
    o.from_priors = true;
    struct moe_fit_result res;
    assert_int_equal(moe_fit("dgx-h100", &others, &o, &res, &d), MOE_OK);
    char dir[] = "/tmp/moefold_sweep_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char base[256];
    (void)snprintf(base, sizeof(base), "%s/base.json", dir);
    assert_int_equal(moe_fit_write(&res, "the shipped H100 runs but the sweep", base, &d), MOE_OK);
    moe_fit_result_free(&res);
    o.from_priors = false;
    for (int held = 0; held < 4; held++) {
        struct moe_run_set sweep;
        memset(&sweep, 0, sizeof(sweep));
        for (int i = 0; i < 4; i++) {
            struct moe_run r = *find_run(&shipped, ids[(held + 1 + i) % 4]);
            (void)snprintf(r.cluster, sizeof(r.cluster), "%s", base); /* the user's cluster */
            if (i == 3) {
                r.known_miss[0] = 'x'; /* predicted, not fitted */
                r.known_miss[1] = '\0';
            }
            assert_int_equal(moe_runs_add(&sweep, &r, &d), MOE_OK);
        }
        assert_int_equal(moe_fit(base, &sweep, &o, &res, &d), MOE_OK);
        assert_true(res.runs[0].used && res.runs[1].used && res.runs[2].used && !res.runs[3].used);
        assert_int_equal(res.num_used_on_base, 3);
        double err = res.runs[3].pred_fit / res.runs[3].run->measured - 1.0;
        printf("  %-3s fitted on the other three: %+.1f%%\n", ids[held], 100.0 * err);
        /* the bar for a user's sweep: the held-out layout within 15%, and every pair
         * of the four measured more than 5% apart ordered as measured */
        assert_true(fabs(err) < 0.15);
        for (int a = 0; a < 4; a++) {
            for (int b = 0; b < 4; b++) {
                if (res.runs[a].run->measured > 1.05 * res.runs[b].run->measured) {
                    if (res.runs[a].pred_fit <= res.runs[b].pred_fit) {
                        printf("  %s held out: %s (%.0f) not above %s (%.0f)\n", ids[held],
                               res.runs[a].run->id, res.runs[a].pred_fit, res.runs[b].run->id,
                               res.runs[b].pred_fit);
                    }
                    assert_true(res.runs[a].pred_fit > res.runs[b].pred_fit);
                }
            }
        }
        moe_fit_result_free(&res);
        moe_runs_free(&sweep);
    }
    /* The same runs as the published file names them (cluster dgx-h100) are no runs on this
     * profile: fit says its cluster's own figures stay as they were. */
    char bin[1024];
    char runs[1024];
    char cmd[4096];
    char *out = malloc(OUT_LEN);
    assert_non_null(out);
    moe_test_bin_path("moefold", bin, sizeof(bin));
    moe_test_root_path("tests/data/published_runs.json", runs, sizeof(runs));
    (void)snprintf(cmd, sizeof(cmd), "%s fit --cluster %s --runs %s --no-loo", bin, base, runs);
    assert_int_equal(moe_test_run_capture(cmd, out, OUT_LEN), 0);
    assert_non_null(strstr(out, "no run is on base itself (the runs name dgx-h100"));
    free(out);
    remove(base);
    rmdir(dir);
    moe_runs_free(&others);
    moe_runs_free(&shipped);
}

/*
 * A cluster without runs of its own (h800) takes the host and network figures the published runs
 * fitted on a cluster with the same priors (dgx-h100: B17's host time per call, B12's all-to-all
 * fraction), with the prior's sd as se; a cluster with a run of its own (gb300-nvl72: B15) keeps
 * its own, even where that run does not constrain a figure.
 */
static void test_borrowed_figures(void **state)
{
    (void)state;
    struct moe_run_set shipped;
    shipped_runs(&shipped);
    struct moe_fit_options o;
    moe_fit_options_init(&o);
    o.from_priors = true;
    o.loo = false;
    struct moe_diag d = {0};
    struct moe_fit_result res;
    assert_int_equal(moe_fit("h800", &shipped, &o, &res, &d), MOE_OK);
    int own = -1;
    int sib = -1;
    for (int j = 0; j < res.num_params; j++) {
        if (strcmp(res.params[j].path, "gpu.kernel_launch_us") == 0) {
            *(res.params[j].cluster == 0 ? &own : &sib) = j;
        }
    }
    assert_true(own >= 0 && sib >= 0);
    assert_int_equal(res.params[own].borrowed, sib);
    assert_true(res.params[sib].constrained);
    assert_true(res.params[own].value == res.params[sib].value);
    assert_true(res.params[own].value > 2.0 * res.params[own].prior.value);
    assert_true(res.params[own].se == res.params[own].prior.sd);
    moe_fit_result_free(&res);
    assert_int_equal(moe_fit("gb300-nvl72", &shipped, &o, &res, &d), MOE_OK);
    for (int j = 0; j < res.num_params; j++) {
        if (res.params[j].cluster == 0) {
            assert_int_equal(res.params[j].borrowed, -1);
        }
    }
    moe_fit_result_free(&res);
    moe_runs_free(&shipped);
}

/* The shipped profiles hold what the fit writes (make fit reproduces them). */
static void check_profile(const char *cluster)
{
    struct moe_run_set shipped;
    shipped_runs(&shipped);
    struct moe_fit_options o;
    moe_fit_options_init(&o);
    o.from_priors = true; /* the shipped profiles, from the microbenchmark priors */
    o.loo = false;
    struct moe_fit_result res;
    struct moe_diag d = {0};
    assert_int_equal(moe_fit(cluster, &shipped, &o, &res, &d), MOE_OK);
    cJSON *root = NULL;
    assert_int_equal(moe_cluster_read_json(cluster, &root, NULL, 0, &d), MOE_OK);
    for (int j = 0; j < res.num_params; j++) {
        const struct moe_fit_param *fp = &res.params[j];
        if (fp->cluster > 0) {
            continue;
        }
        const cJSON *fig = moe_cluster_figure_json(root, fp->path);
        assert_non_null(fig);
        double shipped_v = cJSON_GetObjectItemCaseSensitive(fig, "value")->valuedouble;
        const char *src = cJSON_GetObjectItemCaseSensitive(fig, "source")->valuestring;
        if (fabs(shipped_v / fp->value - 1.0) > 1e-3) {
            fail_msg("%s %s: the fit gives %.6g, the file holds %.6g: run make fit", cluster,
                     fp->path, fp->value, shipped_v);
        }
        assert_true(strncmp(src, fp->constrained ? "fit: " : "prior (no run constrains it)",
                            fp->constrained ? 5 : 28) == 0);
    }
    cJSON_Delete(root);
    moe_fit_result_free(&res);
    moe_runs_free(&shipped);
}

static void test_shipped_profiles_reproduce(void **state)
{
    (void)state;
    check_profile("dgx-h100");
    check_profile("gb200-nvl72");
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_bad_input(void **state)
{
    (void)state;
    struct moe_fit_options o;
    moe_fit_options_init(&o);
    o.from_priors = true; /* the shipped profiles, from the microbenchmark priors */
    o.loo = false;
    struct moe_fit_result res;
    struct moe_diag d = {0};
    char dir[] = "/tmp/moefold_fit_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char runs_path[256];
    (void)snprintf(runs_path, sizeof(runs_path), "%s/runs.json", dir);
    /* No usable run: every run on another generation, one that does not parse. */
    write_file(runs_path,
               "{\"format\": \"moefold-published-runs\", \"version\": 2, \"runs\": ["
               "{\"id\": \"a\", \"model\": \"qwen3-30b-a3b\", \"cluster\": \"gb200-nvl72\", "
               "\"gpus\": 8, \"args\": \"--expert-model-parallel-size 8\", \"metric\": "
               "\"step_time_s\", \"published\": 2.0, \"complete\": true},"
               "{\"id\": \"b\", \"model\": \"qwen3-30b-a3b\", \"cluster\": \"dgx-h100\", "
               "\"gpus\": 8, \"args\": \"--expert-model-parallel-size 3\", \"metric\": "
               "\"step_time_s\", \"published\": 2.0, \"complete\": true}]}");
    struct moe_run_set set;
    memset(&set, 0, sizeof(set));
    assert_int_equal(moe_runs_read(runs_path, &set, &d), MOE_OK);
    assert_int_equal(moe_fit("dgx-h100", &set, &o, &res, &d), MOE_ERR_INVALID);
    printf("  %s\n", d.message);
    assert_non_null(strstr(d.message, "no usable run"));
    assert_non_null(strstr(d.message, "blackwell"));
    assert_non_null(strstr(d.message, "does not resolve"));
    /* A usable run beside them: the fit goes on, the others are reported. */
    struct moe_run_set shipped;
    shipped_runs(&shipped);
    assert_int_equal(moe_runs_add(&set, find_run(&shipped, "Z1"), &d), MOE_OK);
    assert_int_equal(moe_fit("dgx-h100", &set, &o, &res, &d), MOE_OK);
    assert_false(res.runs[1].ok);
    assert_non_null(strstr(res.runs[1].error, "etp*ep"));
    assert_true(res.runs[2].used);
    /* The output cannot be written: an error, and nothing is left behind. */
    char out[300];
    (void)snprintf(out, sizeof(out), "%s/no/such/dir/p.json", dir);
    assert_int_not_equal(moe_fit_write(&res, runs_path, out, &d), MOE_OK);
    assert_int_not_equal(access(out, F_OK), 0);
    /* A figure no run constrains keeps its prior and says so. */
    for (int j = 0; j < res.num_params; j++) {
        if (!res.params[j].constrained) {
            assert_true(res.params[j].value == res.params[j].prior.value);
        }
    }
    moe_fit_result_free(&res);
    /* A base file without priors: nothing to fit. */
    char bare[256];
    (void)snprintf(bare, sizeof(bare), "%s/bare.json", dir);
    cJSON *root = NULL;
    assert_int_equal(moe_cluster_read_json("dgx-h100", &root, NULL, 0, &d), MOE_OK);
    struct moe_cluster cl;
    assert_int_equal(moe_cluster_from_json(root, "dgx-h100", &cl, &d), MOE_OK);
    cJSON *plain = moe_cluster_to_json(&cl, "test");
    assert_int_equal(moe_json_write_file(bare, plain, &d), MOE_OK);
    assert_int_equal(moe_fit(bare, &set, &o, &res, &d), MOE_ERR_INVALID);
    assert_non_null(strstr(d.message, "prior"));
    cJSON_Delete(plain);
    cJSON_Delete(root);
    moe_runs_free(&set);
    moe_runs_free(&shipped);
    (void)unlink(bare);
    (void)unlink(runs_path);
    (void)rmdir(dir);
}

static void test_cli(void **state)
{
    (void)state;
    char bin[1024];
    char cmd[4096];
    char *out = malloc(OUT_LEN);
    assert_non_null(out);
    moe_test_bin_path("moefold", bin, sizeof(bin));
    (void)snprintf(cmd, sizeof(cmd), "%s fit 2>&1", bin);
    assert_int_equal(moe_test_run_capture(cmd, out, OUT_LEN), 2);
    assert_non_null(strstr(out, "--cluster"));
    (void)snprintf(cmd, sizeof(cmd), "%s fit --cluster dgx-h100 --runs x --bogus 2>&1", bin);
    assert_int_equal(moe_test_run_capture(cmd, out, OUT_LEN), 2);
    assert_non_null(strstr(out, "--bogus"));
    (void)snprintf(cmd, sizeof(cmd), "%s fit --cluster dgx-h100 --runs /nonexistent.json 2>&1",
                   bin);
    assert_int_equal(moe_test_run_capture(cmd, out, OUT_LEN), 1);
    assert_non_null(strstr(out, "nonexistent"));

    /* A Megatron-LM log is a measured run: its step time is the median iteration time. */
    char log[1024];
    moe_test_root_path("tests/data/megatron_logs/megatron-core_v0.12.0-mixtral.log", log,
                       sizeof(log));
    (void)snprintf(cmd, sizeof(cmd),
                   "%s fit --cluster dgx-h100 --megatron-log %s --no-loo --json 2>&1", bin, log);
    assert_int_equal(moe_test_run_capture(cmd, out, OUT_LEN), 0);
    cJSON *root = cJSON_Parse(out);
    assert_non_null(root);
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(root, "runs");
    assert_int_equal(cJSON_GetArraySize(runs), 1);
    const cJSON *run = cJSON_GetArrayItem(runs, 0);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(run, "id")->valuestring,
                        "megatron-core_v0.12.0-mixtral");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(run, "used")));
    assert_float_equal(cJSON_GetObjectItemCaseSensitive(run, "measured")->valuedouble, 3.652, 1e-9);
    cJSON_Delete(root);
    /* A file with no arguments dump is refused, naming what is missing. */
    (void)snprintf(cmd, sizeof(cmd), "%s fit --cluster dgx-h100 --megatron-log %s 2>&1", bin,
                   moe_test_root_path("README.md", log, sizeof(log)));
    assert_int_equal(moe_test_run_capture(cmd, out, OUT_LEN), 1);
    assert_non_null(strstr(out, "arguments"));
    free(out);
}

int main(void)
{
    char dir[512];
    (void)setenv("MOEFOLD_TOPOLOGIES", moe_test_root_path("topologies", dir, sizeof(dir)), 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recovers_known_figures),
        cmocka_unit_test(test_leave_one_out),
        cmocka_unit_test(test_user_sweep),
        cmocka_unit_test(test_borrowed_figures),
        cmocka_unit_test(test_shipped_profiles_reproduce),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
