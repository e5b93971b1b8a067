/*
 * The engine on the CUDA backend against the CPU backend (one rank, one GPU): every parameter's
 * gradient of one global batch agrees with the CPU's (relative L2 error per tensor, fp32 GEMMs
 * on both sides, so only summation order differs); losses of a few steps agree and fall; the
 * options that move data between host and device (selective and full recompute, activation
 * offload, precision emulation, the distributed optimizer with
 * overlapped reductions) train on the GPU and match the GPU baseline; a checkpoint written from the
 * GPU resumes bit for bit; CUDA graphs of the dense layers replay the eager losses; a NaN weight
 * and an infinite output weight are named as on the CPU; run.json says "cuda+nccl", carries the
 * device's memory and its phases sum to the step time; every architecture the presets use (MLA
 * with and without the query latent, MTP, q/k norm, sliding windows with sinks and biases, GELU
 * MLPs) gives the CPU's gradients and losses; a traced step's timeline (CUDA events) is valid and
 * adds up to run.json's phases and step.
 *
 * Without a GPU (or without the CUDA build) the GPU tests skip, and one test checks that asking
 * for the CUDA backend is refused with a reason (moefold-train then falls back to the CPU).
 *
 * Tolerances: gradients 1e-3 relative L2 per tensor (fp32 with different summation orders is
 * ~1e-6; a wrong term is O(1)); first-step loss 1e-4 relative; later steps 1e-2 (Adam turns
 * tiny gradient differences of near-zero entries into update differences of the learning rate's
 * size, so trajectories drift apart slowly).
 */
#include "engine/device.h"
#include "tests/engine/eng_test.h"
#include "topologies/run_file.h"
#include "topologies/trace_file.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
/* cmocka.h needs setjmp.h, stdarg.h, stddef.h and stdint.h first. */
#include <cmocka.h>

static const struct eng_test_layout one_rank = {"1 rank", 1, 1, 1, 1, 1, 1, false, 1};

enum { STEPS = 4 };

static bool gpu_or_skip(void)
{
    char why[256] = "";
    if (!moe_eng_dev_available(why, sizeof(why))) {
        printf("# skipped: %s\n", why);
        skip();
    }
    return true;
}

static void opts_for(struct moe_eng_run_opts *o, enum moe_k_backend backend, int steps)
{
    eng_test_opts(o, steps);
    o->backend = backend;
}

static moe_eng_t *
make(const struct moe_plan *plan, const struct moe_eng_run_opts *o, moe_comm_t **w)
{
    assert_int_equal(moe_comm_mpi_create(MPI_COMM_SELF, "world", w), MOE_OK);
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    moe_eng_t *e = NULL;
    enum moe_status st = moe_eng_create(plan, o, *w, &e, &diag);
    if (st != MOE_OK) {
        print_error("create: %s\n", diag.message);
    }
    assert_int_equal(st, MOE_OK);
    return e;
}

static void release(moe_eng_t *e, moe_comm_t *w)
{
    moe_eng_destroy(e);
    moe_comm_destroy(w);
}

/* Losses of STEPS steps of plan on backend (opts tweaked by the caller through o). */
static void losses_of(const struct moe_plan *plan, const struct moe_eng_run_opts *o, double *out)
{
    enum moe_status st = eng_test_losses(MPI_COMM_SELF, plan, o, out);
    assert_int_equal(st, MOE_OK);
}

static void expect_close(const char *what, const double *got, const double *want, int n)
{
    for (int i = 0; i < n; i++) {
        double rel = fabs(got[i] - want[i]) / fabs(want[i]);
        double tol = i == 0 ? 1e-4 : 1e-2;
        printf("  %-26s step %d: %.7f vs %.7f (rel %.2e, tol %.0e)\n", what, i + 1, got[i], want[i],
               rel, tol);
        assert_true(rel <= tol);
    }
}

/* ---- Without a GPU ----------------------------------------------------------------------------
 */

static void test_refused_without_gpu(void **state)
{
    (void)state;
    char why[256] = "";
    if (moe_eng_dev_available(why, sizeof(why))) {
        skip(); /* the GPU tests below cover this machine */
    }
    assert_true(why[0] != '\0');
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-moe", &one_rank);
    struct moe_eng_run_opts o;
    opts_for(&o, MOE_K_BACKEND_CUDA, 1);
    moe_comm_t *w = NULL;
    assert_int_equal(moe_comm_mpi_create(MPI_COMM_SELF, "world", &w), MOE_OK);
    moe_eng_t *e = NULL;
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_eng_create(&plan, &o, w, &e, &diag), MOE_ERR_UNSUPPORTED);
    assert_null(e);
    assert_true(diag.message[0] != '\0');
    printf("  refused: %s (available: %s)\n", diag.message, why);
    moe_comm_destroy(w);
}

/* ---- Gradients and losses against the CPU ---------------------------------------------------- */

/* Every parameter's gradient of one batch on CUDA vs CPU. */
static void grads_match(const char *model, const struct moe_plan *plan_in)
{
    struct moe_plan plan = *plan_in;
    struct moe_eng_run_opts oc, og;
    opts_for(&oc, MOE_K_BACKEND_CPU, 1);
    opts_for(&og, MOE_K_BACKEND_CUDA, 1);
    moe_comm_t *wc = NULL, *wg = NULL;
    moe_eng_t *ec = make(&plan, &oc, &wc);
    moe_eng_t *eg = make(&plan, &og, &wg);
    assert_string_equal(moe_eng_backend_name(eg), "cuda+nccl");
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    double lc = 0.0, lg = 0.0;
    assert_int_equal(moe_eng_compute_grads(ec, &lc, &diag), MOE_OK);
    assert_int_equal(moe_eng_compute_grads(eg, &lg, &diag), MOE_OK);
    printf("  %s: objective cpu %.8f cuda %.8f\n", model, lc, lg);
    assert_true(fabs(lc - lg) <= 1e-5 * fabs(lc));
    assert_int_equal(moe_eng_num_params(ec), moe_eng_num_params(eg));
    double worst = 0.0;
    const char *worst_name = "";
    for (int p = 0; p < moe_eng_num_params(ec); p++) {
        struct moe_eng_param_view vc, vg;
        moe_eng_param(ec, p, &vc);
        moe_eng_param(eg, p, &vg);
        assert_string_equal(vc.name, vg.name);
        assert_int_equal(vc.numel, vg.numel);
        float *g = malloc(vg.numel * sizeof(float));
        float *wgt = malloc(vg.numel * sizeof(float));
        assert_non_null(g);
        assert_non_null(wgt);
        moe_eng_param_read(eg, p, true, 0, g, vg.numel);
        moe_eng_param_read(eg, p, false, 0, wgt, vg.numel);
        double num = 0.0, den = 0.0;
        for (size_t i = 0; i < vg.numel; i++) {
            assert_true(wgt[i] == vc.weight[i]); /* same initial weights, bit for bit */
            double dlt = (double)g[i] - (double)vc.grad[i];
            num += dlt * dlt;
            den += (double)vc.grad[i] * (double)vc.grad[i];
        }
        double rel = den > 0.0 ? sqrt(num / den) : sqrt(num);
        if (rel > worst) {
            worst = rel;
            worst_name = vc.name;
        }
        free(g);
        free(wgt);
    }
    printf("  %s: worst gradient relative L2 error %.2e (%s), tolerance 1e-3\n", model, worst,
           worst_name);
    assert_true(worst <= 1e-3);
    release(ec, wc);
    release(eg, wg);
}

static void test_gradients_match_cpu(void **state)
{
    (void)state;
    gpu_or_skip();
    const char *models[] = {"tiny-moe", "tiny-dsv3"};
    for (size_t m = 0; m < MOE_ARRAY_LEN(models); m++) {
        struct moe_plan plan;
        eng_test_plan(&plan, models[m], &one_rank);
        plan.options.moe_grouped_gemm = true;
        grads_match(models[m], &plan);
    }
}

/* The architectures the presets use, in their miniatures (model/config.c's moe_cfg_shrink), and
 * two variants of them: every parameter's gradient, then the losses of a few steps, against the
 * CPU. */
static void test_architectures_match_cpu(void **state)
{
    (void)state;
    gpu_or_skip();
    const struct {
        const char *label, *model;
        bool no_q_latent, gelu;
    } cases[] = {
        {"tiny-deepseek-v3 (MLA, query latent, MTP)", "tiny-deepseek-v3", false, false},
        {"tiny-deepseek-v3 without the query latent", "tiny-deepseek-v3", true, false},
        {"tiny-qwen3-30b-a3b (q/k RMSNorm)", "tiny-qwen3-30b-a3b", false, false},
        {"tiny-gpt-oss-120b (windows, sinks, biases)", "tiny-gpt-oss-120b", false, false},
        {"tiny-moe with GELU MLPs", "tiny-moe", false, true},
    };
    for (size_t m = 0; m < MOE_ARRAY_LEN(cases); m++) {
        struct moe_plan plan;
        eng_test_plan(&plan, cases[m].model, &one_rank);
        if (cases[m].no_q_latent) {
            plan.model.q_lora_rank = 0;
        }
        if (cases[m].gelu) {
            plan.model.is_swiglu = false;
        }
        plan.options.moe_grouped_gemm = true;
        grads_match(cases[m].label, &plan);
        struct moe_eng_run_opts o;
        double cpu[STEPS], gpu[STEPS];
        opts_for(&o, MOE_K_BACKEND_CPU, STEPS);
        losses_of(&plan, &o, cpu);
        opts_for(&o, MOE_K_BACKEND_CUDA, STEPS);
        losses_of(&plan, &o, gpu);
        expect_close(cases[m].label, gpu, cpu, STEPS);
    }
}

static void test_losses_match_cpu(void **state)
{
    (void)state;
    gpu_or_skip();
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-moe", &one_rank);
    struct moe_eng_run_opts o;
    double cpu[STEPS], gpu[STEPS];
    opts_for(&o, MOE_K_BACKEND_CPU, STEPS);
    losses_of(&plan, &o, cpu);
    opts_for(&o, MOE_K_BACKEND_CUDA, STEPS);
    losses_of(&plan, &o, gpu);
    expect_close("tiny-moe cuda vs cpu", gpu, cpu, STEPS);
    assert_true(gpu[STEPS - 1] < gpu[0]);
    /* Precision emulation (BF16 recipe): quantisers match the CPU's bit for bit. */
    plan.options.recipe = MOE_RECIPE_BF16;
    opts_for(&o, MOE_K_BACKEND_CPU, STEPS);
    o.emulate_precision = true;
    losses_of(&plan, &o, cpu);
    o.backend = MOE_K_BACKEND_CUDA;
    losses_of(&plan, &o, gpu);
    expect_close("bf16 emulation cuda vs cpu", gpu, cpu, STEPS);
}

/* ---- Options that move data between host and device -------------------------------------------
 */

static void test_options_on_gpu(void **state)
{
    (void)state;
    gpu_or_skip();
    struct moe_plan base;
    eng_test_plan(&base, "tiny-moe", &one_rank);
    base.options.moe_grouped_gemm = true;
    struct moe_eng_run_opts o;
    opts_for(&o, MOE_K_BACKEND_CUDA, STEPS);
    double ref[STEPS];
    losses_of(&base, &o, ref);
    struct {
        const char *name;
        enum moe_recompute_granularity g;
        enum moe_recompute_method method;
        int num_layers;
        unsigned modules;
        unsigned offload;
        int offload_layers;
        bool overlap_ep, dist_overlap, opt_offload;
    } cases[] = {
        {"selective moe+core_attn", MOE_RECOMPUTE_SELECTIVE, 0, 0, MOE_RC_MOE | MOE_RC_CORE_ATTN, 0,
         0, false, false, false},
        {"selective moe_act+norm", MOE_RECOMPUTE_SELECTIVE, 0, 0, MOE_RC_MOE_ACT | MOE_RC_LAYERNORM,
         0, 0, false, false, false},
        {"full uniform 2", MOE_RECOMPUTE_FULL, MOE_RECOMPUTE_UNIFORM, 2, 0, 0, 0, false, false,
         false},
        {"offload all modules", MOE_RECOMPUTE_NONE, 0, 0, 0, MOE_OFF_ALL, 0, false, false, false},
        {"offload 2 layers", MOE_RECOMPUTE_NONE, 0, 0, 0, 0, 2, false, false, false},
        {"dist. optimizer, overlap", MOE_RECOMPUTE_NONE, 0, 0, 0, 0, 0, false, true, false},
        {"optimizer cpu offload", MOE_RECOMPUTE_NONE, 0, 0, 0, 0, 0, false, true, true},
    };
    for (size_t i = 0; i < MOE_ARRAY_LEN(cases); i++) {
        struct moe_plan p = base;
        p.options.recompute = cases[i].g;
        p.options.recompute_method = cases[i].method;
        p.options.recompute_num_layers = cases[i].num_layers;
        p.options.recompute_modules = cases[i].modules;
        p.options.fine_grained_offload = cases[i].offload != 0;
        p.options.offload_modules = cases[i].offload;
        p.options.cpu_offloading_num_layers = cases[i].offload_layers;
        p.options.overlap_moe_ep_comm = cases[i].overlap_ep;
        p.options.use_distributed_optimizer = cases[i].dist_overlap;
        p.options.overlap_grad_reduce = cases[i].dist_overlap;
        p.options.overlap_param_gather = cases[i].dist_overlap;
        p.options.optimizer_cpu_offload = cases[i].opt_offload;
        p.options.precision_aware_optimizer = cases[i].opt_offload;
        double got[STEPS];
        losses_of(&p, &o, got);
        expect_close(cases[i].name, got, ref, STEPS);
    }
}

/* ---- Checkpoints, non-finite values, run.json -------------------------------------------------
 */

/* --cuda-graphs: tiny-moe's dense first layer is captured once per activation slot and replayed;
 * the losses are those of the eager run (same kernels, same addresses). */
static void test_cuda_graphs(void **state)
{
    (void)state;
    gpu_or_skip();
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-moe", &one_rank);
    struct moe_eng_run_opts o;
    opts_for(&o, MOE_K_BACKEND_CUDA, STEPS);
    double eager[STEPS], graphed[STEPS];
    losses_of(&plan, &o, eager);
    o.use_cuda_graphs = true;
    losses_of(&plan, &o, graphed);
    for (int i = 0; i < STEPS; i++) {
        double rel = fabs(graphed[i] - eager[i]) / fabs(eager[i]);
        printf("  step %d: eager %.9f graphed %.9f (rel %.1e)\n", i + 1, eager[i], graphed[i], rel);
        assert_true(rel <= 1e-6);
    }
}

static void test_checkpoint_resume_gpu(void **state)
{
    (void)state;
    gpu_or_skip();
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-dsv3", &one_rank);
    plan.options.use_distributed_optimizer = true;
    struct moe_eng_run_opts o;
    opts_for(&o, MOE_K_BACKEND_CUDA, 4);
    double straight[4], resumed[4];
    losses_of(&plan, &o, straight);
    char dir[128];
    (void)snprintf(dir, sizeof(dir), "/tmp/moefold-ckpt-cuda-%ld", (long)getpid());
    moe_comm_t *w = NULL;
    moe_eng_t *e = make(&plan, &o, &w);
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    struct moe_eng_step_result r;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(moe_eng_train_step(e, &r, &diag), MOE_OK);
        resumed[i] = r.loss;
    }
    assert_int_equal(moe_eng_save(e, dir, &diag), MOE_OK);
    release(e, w);
    o.load_dir = dir;
    e = make(&plan, &o, &w);
    for (int i = 2; i < 4; i++) {
        assert_int_equal(moe_eng_train_step(e, &r, &diag), MOE_OK);
        resumed[i] = r.loss;
    }
    release(e, w);
    for (int i = 0; i < 4; i++) {
        printf("  step %d: straight %.9f resumed %.9f\n", i + 1, straight[i], resumed[i]);
    }
    assert_memory_equal(resumed, straight, sizeof(straight));
    char cmd[256];
    (void)snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* Set element idx of the parameter named name to value (on the device). */
static void poison(moe_eng_t *e, const char *name, size_t idx, float value)
{
    for (int p = 0; p < moe_eng_num_params(e); p++) {
        struct moe_eng_param_view v;
        moe_eng_param(e, p, &v);
        if (strcmp(v.name, name) == 0) {
            moe_eng_param_write(e, p, false, idx, &value, 1);
            return;
        }
    }
    fail_msg("no parameter %s", name);
}

static void test_nan_is_named_gpu(void **state)
{
    (void)state;
    gpu_or_skip();
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-moe", &one_rank);
    struct moe_eng_run_opts o;
    opts_for(&o, MOE_K_BACKEND_CUDA, 1);
    moe_comm_t *w = NULL;
    moe_eng_t *e = make(&plan, &o, &w);
    poison(e, "layer2.expert_fc2", 3, NAN);
    struct moe_eng_step_result r;
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_eng_train_step(e, &r, &diag), MOE_ERR_RUNTIME);
    printf("  %s\n", diag.message);
    assert_non_null(strstr(diag.message, "step 1"));
    assert_non_null(strstr(diag.message, "layer 2, layer2.expert_fc2"));
    release(e, w);
    e = make(&plan, &o, &w);
    poison(e, "output", 5, INFINITY);
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_eng_train_step(e, &r, &diag), MOE_ERR_RUNTIME);
    printf("  %s\n", diag.message);
    assert_non_null(strstr(diag.message, "loss head, output"));
    release(e, w);
}

static void test_run_file_gpu(void **state)
{
    (void)state;
    gpu_or_skip();
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-moe", &one_rank);
    struct moe_eng_run_opts o;
    opts_for(&o, MOE_K_BACKEND_CUDA, 3);
    o.gemm_math = MOE_ENG_GEMM_BF16;
    moe_comm_t *w = NULL;
    moe_eng_t *e = make(&plan, &o, &w);
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    double wall = 0.0; /* host-measured time of the measured steps (the first is warm-up) */
    for (int i = 0; i < 3; i++) {
        struct moe_eng_step_result r;
        assert_int_equal(moe_eng_train_step(e, &r, &diag), MOE_OK);
        wall += i > 0 ? r.step_s / 2.0 : 0.0;
    }
    char path[128];
    (void)snprintf(path, sizeof(path), "/tmp/moefold-run-cuda-%ld.json", (long)getpid());
    assert_int_equal(moe_eng_write_run(e, path, NULL, &diag), MOE_OK);
    struct moe_eng_mem_report m;
    moe_eng_memory(e, &m);
    release(e, w);
    struct moe_run run;
    assert_int_equal(moe_run_read(path, &run, &diag), MOE_OK);
    assert_string_equal(run.backend, "cuda+nccl");
    assert_true(run.device_total_bytes > 1e9);
    assert_true(run.device_used_bytes >= m.total); /* the engine's blocks are in there */
    const struct moe_phase_times *t = &run.time;
    double sum = t->compute + t->expert_gemm + t->dispatch + t->combine + t->tp_comm + t->cp_comm +
                 t->pp_comm + t->dp_comm + t->pp_bubble + t->optimizer + t->host_overhead;
    printf("  wall %.3f ms per step, phases (CUDA events) sum %.3f ms: compute %.3f, expert_gemm "
           "%.3f, dispatch %.3f, combine %.3f, optimizer %.3f, host %.3f; device %s, %.2f of "
           "%.2f GiB used\n",
           wall * 1e3, sum * 1e3, t->compute * 1e3, t->expert_gemm * 1e3, t->dispatch * 1e3,
           t->combine * 1e3, t->optimizer * 1e3, t->host_overhead * 1e3, run.device_name,
           run.device_used_bytes / 1073741824.0, run.device_total_bytes / 1073741824.0);
    /* The events span the step on the stream, from its first to its last recorded boundary: the
     * phases and the unattributed remainder (host time no phase claimed) add up to it, and the
     * remainder stays small. */
    printf("  step %.3f ms, unattributed %.3f ms\n", run.step_time_s * 1e3,
           run.unattributed_s * 1e3);
    assert_true(fabs(sum + run.unattributed_s - run.step_time_s) <= 1e-9 + 1e-6 * sum);
    assert_true(run.unattributed_s <= 0.02 * run.step_time_s);
    assert_true(sum <= 1.05 * wall && sum >= 0.7 * wall);
    assert_true(t->expert_gemm > 0.0 && t->compute > 0.0);
    moe_run_fini(&run);
    assert_int_equal(unlink(path), 0);
}

/* A traced step on the GPU (CUDA events): a valid Chrome trace whose events do not overlap on a
 * track, partition the step (phase clock), span run.json's step within 1%, and whose per-phase
 * sums equal run.json's time_s (one rank: the critical stage is this rank). */
static void test_trace_gpu(void **state)
{
    (void)state;
    gpu_or_skip();
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-moe", &one_rank);
    plan.options.moe_grouped_gemm = true;
    struct moe_eng_run_opts o;
    opts_for(&o, MOE_K_BACKEND_CUDA, 2);
    o.trace_step = 2; /* the one measured step (the first is warm-up): run.json's time_s is it */
    moe_comm_t *w = NULL;
    moe_eng_t *e = make(&plan, &o, &w);
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    for (int i = 0; i < 2; i++) {
        struct moe_eng_step_result r;
        assert_int_equal(moe_eng_train_step(e, &r, &diag), MOE_OK);
    }
    char path[128], trace[160];
    (void)snprintf(path, sizeof(path), "/tmp/moefold-run-cuda-traced-%ld.json", (long)getpid());
    (void)snprintf(trace, sizeof(trace), "%s.trace.json", path);
    assert_int_equal(moe_eng_write_run(e, path, NULL, &diag), MOE_OK);
    if (moe_eng_write_trace(e, trace, &diag) != MOE_OK) {
        fail_msg("write_trace: %s", diag.message);
    }
    release(e, w);
    struct moe_run run;
    assert_int_equal(moe_run_read(path, &run, &diag), MOE_OK);
    assert_non_null(run.timeline);
    assert_int_equal(run.measured_steps, 1);
    struct moe_trace_summary *sum = malloc(sizeof(*sum));
    assert_non_null(sum);
    if (moe_trace_summarize(trace, sum, &diag) != MOE_OK) {
        fail_msg("%s: %s", trace, diag.message);
    }
    assert_int_equal(sum->num_procs, 1);
    assert_true(sum->worst_overlap_us < 0.01);
    const struct moe_trace_proc *pr = &sum->procs[0];
    double total = pr->other_us;
    for (int k = 0; k < MOE_NUM_PHASES; k++) {
        total += pr->phase_us[k];
    }
    double span = (pr->last_us - pr->first_us) * 1e-6;
    printf("  trace: %d events, span %.3f ms, phases %.3f ms, run.json step %.3f ms\n",
           pr->num_events, span * 1e3, total * 1e-3, run.step_time_s * 1e3);
    assert_true(fabs(total - (pr->last_us - pr->first_us)) <= 1e-6 * total + 0.01);
    if (fabs(span - run.step_time_s) > 0.01 * run.step_time_s) {
        fail_msg("the trace spans %.6f s, run.json's step is %.6f s", span, run.step_time_s);
    }
    const double tv[MOE_NUM_PHASES] = {
        run.time.compute,   run.time.expert_gemm, run.time.dispatch,     run.time.combine,
        run.time.tp_comm,   run.time.cp_comm,     run.time.pp_comm,      run.time.dp_comm,
        run.time.pp_bubble, run.time.optimizer,   run.time.host_overhead};
    for (int k = 0; k < MOE_NUM_PHASES; k++) {
        double got = pr->phase_us[k] * 1e-6;
        if (fabs(got - tv[k]) > 1e-6 + 1e-6 * run.step_time_s) {
            fail_msg("%s: trace %.6f s, time_s %.6f s", moe_phase_name((enum moe_phase)k), got,
                     tv[k]);
        }
    }
    free(sum);
    moe_run_fini(&run);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(unlink(trace), 0);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused_without_gpu),
        cmocka_unit_test(test_gradients_match_cpu),
        cmocka_unit_test(test_losses_match_cpu),
        cmocka_unit_test(test_options_on_gpu),
        cmocka_unit_test(test_checkpoint_resume_gpu),
        cmocka_unit_test(test_nan_is_named_gpu),
        cmocka_unit_test(test_run_file_gpu),
        cmocka_unit_test(test_cuda_graphs),
        cmocka_unit_test(test_architectures_match_cpu),
        cmocka_unit_test(test_trace_gpu),
    };
    int fails = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return fails;
}
