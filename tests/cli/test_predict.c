/*
 * `moefold predict` end to end through the built binary: --json carries every documented key and
 * its phases sum to the step; a HuggingFace config.json predicts like the matching preset; auto
 * imbalance reports p50 <= p99 and is slower than perfect balance; --trace writes the simulated
 * step as a Chrome trace (DeepSeek-V3 B5: under 20 MB, valid, every event with ph/ts/dur/pid/tid,
 * no two events of one track overlapping, every stage spanning the predicted step within 1%, the
 * critical stage's phases summing to --json's time_s); bad input exits non-zero with a message
 * naming the problem.
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
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#define OUT_LEN (1 << 16)

static const char *const dsv3_args =
    "--model deepseek-v3 --cluster dgx-h100 --gpus 1024 --tensor-model-parallel-size 2 "
    "--pipeline-model-parallel-size 8 --pipeline-model-parallel-layout 'Et|(tt|)*30mL' "
    "--expert-model-parallel-size 64 --expert-tensor-parallel-size 1 --sequence-parallel "
    "--global-batch-size 8192 --use-distributed-optimizer --moe-grouped-gemm";

static int run(const char *args, char *out)
{
    char bin[1024];
    char cmd[8192];
    moe_test_bin_path("moefold", bin, sizeof(bin));
    (void)snprintf(cmd, sizeof(cmd), "%s %s", bin, args);
    return moe_test_run_capture(cmd, out, OUT_LEN);
}

static cJSON *predict_json(const char *args)
{
    char *out = malloc(OUT_LEN);
    char full[4096];
    (void)snprintf(full, sizeof(full), "predict %s --json 2>/dev/null", args);
    int rc = run(full, out);
    if (rc != 0) {
        fail_msg("moefold %s exited %d: %s", full, rc, out);
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

static void test_json_keys(void **state)
{
    (void)state;
    cJSON *j = predict_json(dsv3_args);
    static const char *const top[] = {"flops_per_step", "step_time_s", "tokens_per_s_per_gpu",
                                      "tflops_per_gpu", "mfu"};
    for (size_t i = 0; i < sizeof(top) / sizeof(top[0]); i++) {
        assert_true(num(j, top[i]) > 0.0);
    }
    assert_true(cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(j, "fits")));
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(j, "memory_gib");
    static const char *const mk[] = {"weights", "grads", "optimizer", "activations",
                                     "buffers", "total", "capacity"};
    double sum = 0.0;
    for (size_t i = 0; i < sizeof(mk) / sizeof(mk[0]); i++) {
        double v = num(mem, mk[i]);
        if (i < 5) {
            sum += v;
        }
    }
    assert_true(fabs(sum - num(mem, "total")) < 1e-6 * sum);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "time_s");
    static const char *const phases[] = {"compute",   "expert_gemm", "dispatch",     "combine",
                                         "tp_comm",   "cp_comm",     "pp_comm",      "dp_comm",
                                         "pp_bubble", "optimizer",   "host_overhead"};
    double tsum = 0.0;
    for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++) {
        tsum += num(t, phases[i]);
    }
    assert_true(fabs(tsum - num(j, "step_time_s")) < 1e-6 * tsum);
    assert_true(num(t, "ep_comm") >= 0.0 && num(t, "exposed_comm") >= num(t, "ep_comm") - 1e-12);
    const cJSON *lay = cJSON_GetObjectItemCaseSensitive(j, "layout");
    assert_int_equal((int)num(lay, "tp"), 2);
    assert_int_equal((int)num(lay, "pp"), 8);
    assert_int_equal((int)num(lay, "vpp"), 4);
    assert_int_equal((int)num(lay, "ep"), 64);
    assert_int_equal((int)num(lay, "edp"), 2);
    assert_int_equal((int)num(lay, "dp"), 64);
    assert_int_equal((int)num(lay, "num_microbatches"), 128);
    /* Model FLOPs: 8192 sequences of 4096 tokens at ~260 GFLOP/token with MTP. */
    double per_token = num(j, "flops_per_step") / (8192.0 * 4096.0);
    assert_true(per_token > 250e9 && per_token < 270e9);
    cJSON_Delete(j);
}

static void test_hf_config_matches_preset(void **state)
{
    (void)state;
    char path[1024];
    char args[2048];
    moe_test_root_path("tests/data/hf/qwen3-30b-a3b.json", path, sizeof(path));
    const char *rest = "--cluster dgx-h100 --gpus 16 --expert-model-parallel-size 16 "
                       "--global-batch-size 256 --seq-length 4096 --use-distributed-optimizer";
    (void)snprintf(args, sizeof(args), "--model-config %s %s", path, rest);
    cJSON *a = predict_json(args);
    (void)snprintf(args, sizeof(args), "--model qwen3-30b-a3b %s", rest);
    cJSON *b = predict_json(args);
    assert_true(fabs(num(a, "step_time_s") - num(b, "step_time_s")) < 1e-9 * num(b, "step_time_s"));
    assert_true(num(a, "flops_per_step") == num(b, "flops_per_step"));
    cJSON_Delete(a);
    cJSON_Delete(b);
}

static void test_auto_imbalance(void **state)
{
    (void)state;
    /* Micro-batches of 4 sequences keep the GPU, not the host, on the critical path (a
     * host-bound step does not feel the busiest expert rank). */
    const char *base = "--model qwen3-30b-a3b --cluster dgx-h100 --gpus 16 "
                       "--expert-model-parallel-size 16 --global-batch-size 256 "
                       "--micro-batch-size 4 --moe-grouped-gemm --use-distributed-optimizer";
    char args[1024];
    /* Balanced by assumption (--moe-imbalance 1), not by the forced-balance router path, whose
     * extra host work would be compared too. */
    (void)snprintf(args, sizeof(args), "%s --moe-imbalance 1", base);
    cJSON *forced = predict_json(args);
    (void)snprintf(args, sizeof(args), "%s --moe-imbalance auto", base);
    cJSON *autoj = predict_json(args);
    assert_true(num(autoj, "load_factor") > 1.01);
    assert_true(num(autoj, "step_time_s") > num(forced, "step_time_s"));
    assert_true(num(autoj, "step_time_p99_s") >= num(autoj, "step_time_p50_s"));
    cJSON_Delete(forced);
    cJSON_Delete(autoj);
}

static void test_trace(void **state)
{
    (void)state;
    /* The README's worked example: DeepSeek-V3 B5 (PP8, VPP4, 128 micro-batches). */
    const char *b5 =
        "--model deepseek-v3 --cluster dgx-h100 --gpus 1024 --tensor-model-parallel-size 2 "
        "--pipeline-model-parallel-size 8 --pipeline-model-parallel-layout 'Et|(tt|)*30mL' "
        "--expert-model-parallel-size 64 --expert-tensor-parallel-size 1 --sequence-parallel "
        "--micro-batch-size 1 --global-batch-size 8192 --fp8-format e4m3 --fp8-recipe tensorwise "
        "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather "
        "--moe-grouped-gemm --moe-router-force-load-balancing --moe-token-dispatcher-type flex "
        "--moe-flex-dispatcher-backend hybridep --recompute-granularity selective "
        "--recompute-modules mla_up_proj mlp";
    char path[] = "/tmp/moefold-test-trace-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    (void)close(fd);
    char args[4096];
    (void)snprintf(args, sizeof(args), "%s --trace %s", b5, path);
    cJSON *j = predict_json(args);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_true(sb.st_size > 1000000 && sb.st_size < 20 * 1000 * 1000);
    struct moe_trace_summary *sum = malloc(sizeof(*sum));
    assert_non_null(sum);
    struct moe_diag d = {0};
    if (moe_trace_summarize(path, sum, &d) != MOE_OK) {
        fail_msg("trace: %s", d.message);
    }
    double step = num(j, "step_time_s");
    assert_int_equal(sum->num_procs, 8);
    assert_true(sum->num_metadata >= 8 * 7);
    assert_true(sum->worst_overlap_us < 0.01); /* printed to the nanosecond */
    int crit = (int)num(j, "critical_stage");
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(j, "time_s");
    for (int p = 0; p < sum->num_procs; p++) {
        const struct moe_trace_proc *pr = &sum->procs[p];
        assert_true(fabs((pr->last_us - pr->first_us) * 1e-6 - step) <= 0.01 * step);
        double total = pr->other_us;
        for (int k = 0; k < MOE_NUM_PHASES; k++) {
            total += pr->phase_us[k];
        }
        assert_true(fabs(total * 1e-6 - step) <= 1e-3 * step);
        if (pr->pid == crit) {
            for (int k = 0; k < MOE_NUM_PHASES; k++) {
                double want = num(ts, moe_phase_name((enum moe_phase)k));
                if (fabs(pr->phase_us[k] * 1e-6 - want) > 1e-4 * step) {
                    fail_msg("stage %d %s: trace %.6f s, --json %.6f s", crit,
                             moe_phase_name((enum moe_phase)k), pr->phase_us[k] * 1e-6, want);
                }
            }
        }
    }
    free(sum);
    cJSON_Delete(j);
    (void)unlink(path);
    /* An unwritable trace is an error naming the file. */
    char *out = malloc(OUT_LEN);
    (void)snprintf(args, sizeof(args),
                   "predict --model mixtral-8x7b --cluster dgx-h100 --gpus 8 --trace "
                   "/nonexistent-dir/t.json 2>&1");
    int rc = run(args, out);
    assert_true(rc != 0);
    assert_non_null(strstr(out, "/nonexistent-dir/t.json"));
    free(out);
}

struct bad_case {
    const char *args;
    const char *expect; /* substring of the message */
};

static void test_bad_input(void **state)
{
    (void)state;
    static const struct bad_case cases[] = {
        {"predict --model nope --cluster dgx-h100 --gpus 8", "nope"},
        {"predict --model deepseek-v3 --cluster nowhere --gpus 8", "nowhere"},
        {"predict --model deepseek-v3 --cluster dgx-h100 --gpus 12", "multiple of 8"},
        {"predict --model deepseek-v3 --cluster dgx-h100", "--gpus"},
        {"predict --cluster dgx-h100 --gpus 8", "no model"},
        {"predict --model deepseek-v3 --cluster dgx-h100 --gpus 8 --tensor-model-parallel-size 3",
         "tp"},
        {"predict --model deepseek-v3 --cluster dgx-h100 --gpus 8 --expert-model-parallel-sizee 8",
         "did you mean --expert-model-parallel-size"},
        {"predict --model qwen3-30b-a3b --cluster dgx-h100 --gpus 8 --fp8-format e4m3 "
         "--fp8-recipe mxfp8",
         "Blackwell"},
        {"predict --model-config /nonexistent/config.json --cluster dgx-h100 --gpus 8",
         "/nonexistent/config.json"},
        {"predict --model deepseek-v3 --cluster dgx-h100 --gpus 8 --micro-batch-size abc", "abc"},
        {"frobnicate", "unknown command"},
    };
    char *out = malloc(OUT_LEN);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc = run(cases[i].args, out);
        if (rc <= 0 || strstr(out, cases[i].expect) == NULL) {
            fail_msg("moefold %s: exit %d, expected non-zero and '%s' in: %s", cases[i].args, rc,
                     cases[i].expect, out);
        }
    }
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_keys),      cmocka_unit_test(test_hf_config_matches_preset),
        cmocka_unit_test(test_auto_imbalance), cmocka_unit_test(test_trace),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
