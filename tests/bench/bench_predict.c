/*
 * Benchmark: moe_cost_predict calls per second on one core, closed-form schedule (the search's hot
 * path) and event-simulated schedule (predict's default), for DeepSeek-V3 on dgx-h100 and
 * gb200-nvl72. Target (issue 2): at least 1,000,000 closed-form calls per second.
 */
#include "model/cost.h"
#include "model/megatron_args.h"
#include "topologies/cluster_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct bench_case {
    const char *name;
    const char *cluster;
    int gpus;
    const char *args;
};

static int run_case(const struct bench_case *bc)
{
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    struct moe_megatron_result res;
    struct moe_diag d = {0};
    char line[2048];
    const char *argv[128];
    int argc = 0;
    (void)snprintf(line, sizeof(line), "%s", bc->args);
    if (moe_cfg_preset("deepseek-v3", &cfg, &d) != MOE_OK ||
        moe_cluster_load(bc->cluster, &cl, &d) != MOE_OK ||
        moe_megatron_split_line(line, argv, 128, &argc, &d) != MOE_OK) {
        fprintf(stderr, "bench_predict: %s\n", d.message);
        return 1;
    }
    moe_layout_init(&lay);
    moe_options_init(&opt);
    if (moe_megatron_parse_args(argc, argv, &cfg, &lay, &opt, &res, &d) != MOE_OK) {
        fprintf(stderr, "bench_predict: %s\n", d.message);
        return 1;
    }
    lay.num_gpus = bc->gpus;
    if (lay.seq_length <= 0) {
        lay.seq_length = cfg.seq_length;
    }
    if (moe_layout_resolve(&cfg, &cl, &opt, &lay, &d) != MOE_OK) {
        fprintf(stderr, "bench_predict: %s\n", d.message);
        return 1;
    }
    struct moe_cost_prep prep;
    moe_cost_prepare(&cfg, &prep);
    for (int mode = 0; mode < 3; mode++) {
        /* 0: closed form, prepared model (the search's hot path); 1: closed form through
         * moe_cost_predict (prepares each call); 2: event-simulated schedule. */
        enum moe_schedule_mode sm = mode == 2 ? MOE_SCHED_SIMULATE : MOE_SCHED_CLOSED_FORM;
        size_t n = moe_cost_workspace_bytes(&lay, sm);
        void *ws = malloc(n);
        struct moe_prediction p;
        long calls = 0;
        double t0 = now_s();
        double t1 = t0;
        double sink = 0.0;
        while (t1 - t0 < 1.0) {
            for (int i = 0; i < 256; i++) {
                enum moe_status st =
                    mode == 0
                        ? moe_cost_predict_prepared(&prep, &cl, &lay, &opt, NULL, sm, ws, n, &p, &d)
                        : moe_cost_predict(&cfg, &cl, &lay, &opt, NULL, sm, ws, n, &p, &d);
                if (st != MOE_OK) {
                    fprintf(stderr, "bench_predict: %s\n", d.message);
                    free(ws);
                    return 1;
                }
                sink += p.step_time_s;
            }
            calls += 256;
            t1 = now_s();
        }
        free(ws);
        double rate = (double)calls / (t1 - t0);
        printf("%-26s %-12s %6d %-12s %12.0f %10.2f %10.3f %s\n", bc->name, bc->cluster, bc->gpus,
               mode == 0 ? "closed+prep" : (mode == 1 ? "closed-form" : "simulate"), rate,
               1e6 / rate, sink / (double)calls,
               mode == 0 ? (rate >= 1e6 ? "ok (>= 1e6/s)" : "BELOW 1e6/s target") : "-");
    }
    return 0;
}

int main(void)
{
    static const struct bench_case cases[] = {
        {"dsv3 tp2 pp8 vpp4 ep64", "dgx-h100", 1024,
         "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 8 "
         "--pipeline-model-parallel-layout Et|(tt|)*30mL --expert-model-parallel-size 64 "
         "--expert-tensor-parallel-size 1 --sequence-parallel --global-batch-size 8192 "
         "--fp8-recipe tensorwise --fp8-format e4m3 --use-distributed-optimizer "
         "--overlap-grad-reduce --moe-grouped-gemm --moe-token-dispatcher-type flex "
         "--moe-flex-dispatcher-backend hybridep"},
        {"dsv3 pp8 vpp4 ep32", "gb200-nvl72", 256,
         "--pipeline-model-parallel-size 8 --pipeline-model-parallel-layout Et|(tt|)*30mL "
         "--expert-model-parallel-size 32 --global-batch-size 2048 --fp8-recipe mxfp8 "
         "--fp8-format e4m3 --use-distributed-optimizer --moe-grouped-gemm"},
    };
    printf("# moe_cost_predict throughput, one core (each case timed for 1 s)\n");
    printf("%-26s %-12s %6s %-12s %12s %10s %10s %s\n", "case", "cluster", "gpus", "schedule",
           "calls/s", "us/call", "step_s", "target");
    int rc = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rc |= run_case(&cases[i]);
    }
    return rc;
}
