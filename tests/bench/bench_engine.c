/*
 * `make bench` for the engine: trains a small MoE model (4 layers, hidden 256, 8 experts top-2 of
 * 256 plus a shared expert, 4 x 256 tokens per step) for a few steps on one process and prints
 * tokens/s, the step-time breakdown by phase (the cost model's names), the expert grouped GEMM's
 * GFLOP/s against one OpenBLAS sgemm of the same FLOPs at the model's expert shapes (target: at
 * least 80%), and the step's achieved FLOP/s (Megatron model FLOPs) as a fraction of this host's
 * measured sgemm peak. Performance targets are reported here, never asserted in tests.
 */
#include "engine/bench.h"
#include "engine/comm_mpi.h"
#include "engine/engine.h"
#include "model/flops.h"
#include "topologies/run_file.h"

#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum { STEPS = 4 };

static void bench_plan(struct moe_plan *plan)
{
    moe_plan_init(plan);
    struct moe_model_cfg *m = &plan->model;
    (void)snprintf(m->name, sizeof(m->name), "bench-moe");
    m->num_layers = 4;
    m->hidden_size = 256;
    m->ffn_hidden_size = 1024;
    m->num_attention_heads = 8;
    m->num_query_groups = 4;
    m->kv_channels = 32;
    m->is_swiglu = true;
    m->is_untied_embeddings = true;
    m->vocab_size = 256;
    m->make_vocab_size_divisible_by = 32;
    m->seq_length = 256;
    m->num_experts = 8;
    m->moe_ffn_hidden_size = 256;
    m->moe_router_topk = 2;
    m->moe_shared_expert_intermediate_size = 256;
    moe_cfg_set_first_dense(m, 1);
    plan->layout.num_gpus = 1;
    plan->layout.mbs = 1;
    plan->layout.gbs = 4;
    plan->layout.seq_length = 256;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    struct moe_plan plan;
    bench_plan(&plan);
    struct moe_eng_run_opts o;
    moe_eng_run_opts_init(&o);
    o.num_steps = STEPS;
    o.data_kind = MOE_ENG_DATA_SYNTHETIC;
    moe_comm_t *w = NULL;
    moe_eng_t *e = NULL;
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    if (moe_comm_mpi_create(MPI_COMM_SELF, "world", &w) != MOE_OK ||
        moe_eng_create(&plan, &o, w, &e, &diag) != MOE_OK) {
        (void)fprintf(stderr, "bench_engine: %s\n", diag.message);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int i = 0; i < STEPS; i++) {
        struct moe_eng_step_result r;
        if (moe_eng_train_step(e, &r, &diag) != MOE_OK) {
            (void)fprintf(stderr, "bench_engine: %s\n", diag.message);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    char path[128];
    (void)snprintf(path, sizeof(path), "/tmp/moefold-bench-run-%ld.json", (long)getpid());
    struct moe_run run;
    if (moe_eng_write_run(e, path, NULL, &diag) != MOE_OK ||
        moe_run_read(path, &run, &diag) != MOE_OK) {
        (void)fprintf(stderr, "bench_engine: %s\n", diag.message);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    (void)unlink(path);
    moe_eng_destroy(e);
    moe_comm_destroy(w);

    (void)printf("# engine: %s, 1 rank, %d tokens/step, %d steps (first is warm-up)\n",
                 plan.model.name, plan.layout.gbs * plan.layout.seq_length, STEPS);
    (void)printf("tokens/s                  %10.0f\n", run.tokens_per_s);
    (void)printf("step time                 %10.1f ms\n", run.step_time_s * 1e3);
    const struct moe_phase_times *t = &run.time;
    const char *names[] = {"compute", "expert_gemm", "dispatch",
                           "combine", "optimizer",   "host_overhead"};
    const double vals[] = {t->compute, t->expert_gemm, t->dispatch,
                           t->combine, t->optimizer,   t->host_overhead};
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        (void)printf("  %-22s %10.2f ms  %5.1f%%\n", names[i], vals[i] * 1e3,
                     100.0 * vals[i] / run.step_time_s);
    }

    moe_k_ctx_t *kc = NULL;
    struct moe_k_ctx_desc desc = {.backend = MOE_K_BACKEND_CPU, .num_threads = 1};
    if (moe_k_ctx_create(&desc, &kc) != MOE_OK) {
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const struct moe_k_ops *k = moe_k_ctx_ops(kc);
    struct moe_bench_cfg cfg = {.iters = 10, .warmup = 3};
    /* The model's expert GEMMs: 1024 tokens x top-2 rows over 8 experts; fc1 256 -> 512. */
    struct moe_bench_grouped g;
    double worst = 1e30;
    const int shapes[][3] = {{2048, 256, 512}, {2048, 256, 256}, {8192, 1024, 512}};
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        if (moe_bench_grouped_run(k, kc, &cfg, 8, shapes[i][0], shapes[i][1], shapes[i][2], false,
                                  &g) != MOE_OK) {
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        (void)printf(
            "grouped GEMM 8 experts, %5d rows, %4d -> %4d: %7.2f GFLOP/s vs one sgemm %7.2f "
            "GFLOP/s = %5.1f%% (target >= 80%%) %s\n",
            g.tokens, g.in, g.out, g.gflops, g.dense_gflops, 100.0 * g.ratio,
            g.is_ok ? "" : "[WRONG RESULT]");
        worst = g.ratio < worst ? g.ratio : worst;
    }
    double peak = 0.0;
    for (int n = 512; n <= 2048; n *= 2) {
        struct moe_bench_gemm s;
        if (moe_bench_gemm_run(k, kc, &cfg, n, n, n, &s) == MOE_OK && s.gflops > peak) {
            peak = s.gflops;
        }
    }
    double flops = moe_flops_per_step(&plan.model, plan.layout.seq_length, plan.layout.gbs, 1);
    double achieved = flops / run.step_time_s / 1e9;
    (void)printf("sgemm peak (best of 512..2048 squares) %8.2f GFLOP/s\n", peak);
    (void)printf(
        "step model FLOP/s                      %8.2f GFLOP/s = %.1f%% of the sgemm peak\n",
        achieved, 100.0 * achieved / peak);
    (void)printf("grouped GEMM target (>= 80%% of sgemm at equal FLOPs): %s (worst %.1f%%)\n",
                 worst >= 0.8 ? "met" : "NOT met", 100.0 * worst);
    moe_run_fini(&run);
    moe_k_ctx_destroy(kc);
    MPI_Finalize();
    return 0;
}
