/*
 * Engine features across ranks (moe-test-np: 4): checkpoints (every rank's shard, RNG and data
 * position; resuming gives bit-identical losses) under PP2 x DP2 with the distributed optimizer
 * and under TP2 x EP2; recompute and offload leave every rank's gradients bit-identical under
 * TP2/SP, PP2 and EP2; memory by category agrees with the cost model on every pipeline stage
 * (weights, grads, optimizer within 1%, activations within 20%); the bytes the optimizer's
 * collectives report match the buffers they move; each precision recipe's emulated
 * quantise->dequantise moves a step's gradient by its own format's expected rounding error
 * (0.25 u .. 1.0 u) and training still lowers the loss; run.json reads back, with the
 * buffers category's parts adding up to it and the expert-row sizing factor (EP by default,
 * --moe-buffer-factor when given) and a definition of every phase.
 */
#include "engine/internal.h" /* the optimizer buckets' streams (test_memory_vs_prediction) */
#include "model/memory.h"
#include "tests/engine/eng_test.h"
#include "topologies/json_util.h"
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

/* moe-test-np: 4 */

enum { N = 4 };

static moe_eng_t *
make(const struct moe_plan *plan, const struct moe_eng_run_opts *o, moe_comm_t **world)
{
    assert_int_equal(moe_comm_mpi_create(MPI_COMM_WORLD, "world", world), MOE_OK);
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    moe_eng_t *e = NULL;
    enum moe_status st = moe_eng_create(plan, o, *world, &e, &diag);
    if (st != MOE_OK) {
        fprintf(stderr, "create: %s\n", diag.message);
    }
    assert_int_equal(st, MOE_OK);
    return e;
}

static double step(moe_eng_t *e)
{
    struct moe_eng_step_result r;
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_eng_train_step(e, &r, &diag), MOE_OK);
    return r.loss;
}

/* A directory name every rank agrees on. */
static void shared_dir(char *buf, size_t len, const char *what)
{
    long pid = (long)getpid();
    MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    (void)snprintf(buf, len, "/tmp/moefold-%s-%ld", what, pid);
}

static void resume_case(const char *model, const struct eng_test_layout *l)
{
    struct moe_plan plan;
    eng_test_plan(&plan, model, l);
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 4);
    double straight[4];
    assert_int_equal(eng_test_losses(MPI_COMM_WORLD, &plan, &o, straight), MOE_OK);
    char dir[128];
    shared_dir(dir, sizeof(dir), "ckpt");
    moe_comm_t *w = NULL;
    moe_eng_t *e = make(&plan, &o, &w);
    double resumed[4];
    resumed[0] = step(e);
    resumed[1] = step(e);
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_eng_save(e, dir, &diag), MOE_OK);
    moe_eng_destroy(e);
    moe_comm_destroy(w);
    o.load_dir = dir;
    e = make(&plan, &o, &w);
    resumed[2] = step(e);
    resumed[3] = step(e);
    moe_eng_destroy(e);
    moe_comm_destroy(w);
    assert_memory_equal(resumed, straight, sizeof(straight));
    MPI_Barrier(MPI_COMM_WORLD);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        char cmd[256];
        (void)snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        assert_int_equal(system(cmd), 0);
    }
}

static void test_checkpoint_resume(void **state)
{
    (void)state;
    const struct eng_test_layout pp_dp = {"PP2 DP2", 1, 1, 2, 1, 1, 1, true, 4};
    const struct eng_test_layout tp_ep = {"TP2 EP2", 2, 1, 1, 1, 2, 1, false, 4};
    resume_case("tiny-dsv3", &pp_dp);
    resume_case("tiny-moe", &tp_ep);
}

/* This rank's local gradients after one compute_grads, concatenated; activation bytes. */
static float *local_grads(
    const struct moe_plan *plan, bool hierarchical, bool emulate, size_t *n_out, double *act)
{
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 1);
    o.emulate_precision = emulate;
    o.has_dispatcher_override = true;
    o.is_hierarchical = hierarchical;
    o.ranks_per_node = 2; /* two emulated nodes of two ranks */
    moe_comm_t *w = NULL;
    moe_eng_t *e = make(plan, &o, &w);
    double loss = 0.0;
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_eng_compute_grads(e, &loss, &diag), MOE_OK);
    size_t n = 0;
    for (int p = 0; p < moe_eng_num_params(e); p++) {
        struct moe_eng_param_view v;
        moe_eng_param(e, p, &v);
        n += v.numel;
    }
    float *g = malloc(n * sizeof(float));
    assert_non_null(g);
    size_t off = 0;
    for (int p = 0; p < moe_eng_num_params(e); p++) {
        struct moe_eng_param_view v;
        moe_eng_param(e, p, &v);
        memcpy(g + off, v.grad, v.numel * sizeof(float));
        off += v.numel;
    }
    struct moe_eng_mem_report m;
    moe_eng_memory(e, &m);
    *act = m.activations;
    moe_eng_destroy(e);
    moe_comm_destroy(w);
    *n_out = n;
    return g;
}

static void test_recompute_offload_bit_identical(void **state)
{
    (void)state;
    const struct eng_test_layout layouts[] = {
        {"TP2 PP2 EP2", 2, 1, 2, 1, 2, 1, false, 4},
        /* interleaved: the last stage's chunks share one activation (and offload) pool */
        {"PP2 VPP2 EP2", 1, 1, 2, 2, 2, 1, false, 4},
        {"EP4", 1, 1, 1, 1, 4, 1, false, 4},
    };
    for (size_t li = 0; li < MOE_ARRAY_LEN(layouts) + 1; li++) {
        /* The last case: EP4 again, with the hierarchical dispatcher over 2 nodes. */
        bool hier = li == MOE_ARRAY_LEN(layouts);
        struct moe_plan base;
        eng_test_plan(&base, "tiny-moe", &layouts[hier ? 2 : li]);
        base.options.moe_grouped_gemm = true;
        base.options.capacity_factor = hier ? 1.0 : 0.0; /* with token drop, too */
        size_t n0 = 0;
        double act0 = 0.0;
        float *g0 = local_grads(&base, hier, false, &n0, &act0);
        for (int c = 0; c < 3; c++) {
            struct moe_plan p = base;
            if (c == 0) {
                p.options.recompute = MOE_RECOMPUTE_SELECTIVE;
                p.options.recompute_modules = MOE_RC_CORE_ATTN | MOE_RC_LAYERNORM | MOE_RC_MOE |
                                              MOE_RC_MOE_ACT | MOE_RC_MLP | MOE_RC_SHARED_EXPERTS;
            } else if (c == 1) {
                p.options.recompute = MOE_RECOMPUTE_FULL;
                p.options.recompute_method = MOE_RECOMPUTE_UNIFORM;
                p.options.recompute_num_layers = 1;
            } else {
                p.options.fine_grained_offload = true;
                p.options.offload_modules = MOE_OFF_ALL;
            }
            size_t n = 0;
            double act = 0.0;
            float *g = local_grads(&p, hier, false, &n, &act);
            /* Every rank must reach the same verdict before asserting (no rank left behind in a
             * collective). */
            int ok = n == n0 && memcmp(g, g0, n * sizeof(float)) == 0 && act < act0;
            int all = 0;
            MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
            assert_int_equal(all, 1);
            free(g);
        }
        free(g0);
    }
}

static void test_memory_vs_prediction(void **state)
{
    (void)state;
    const struct eng_test_layout layouts[] = {
        {"TP2 PP2 EP2", 2, 1, 2, 1, 2, 1, true, 4},
        {"CP2 EP4 dist-opt", 1, 2, 1, 1, 4, 1, true, 4},
        {"PP4", 1, 1, 4, 1, 1, 1, false, 4},
        {"PP2 VPP2 DP2", 1, 1, 2, 2, 1, 1, false, 4},
    };
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (size_t li = 0; li < MOE_ARRAY_LEN(layouts); li++) {
        struct moe_plan plan;
        eng_test_plan(&plan, "tiny-moe", &layouts[li]);
        struct moe_eng_run_opts o;
        eng_test_opts(&o, 1);
        o.moe_buffer_factor = 1.0; /* the prediction below uses load factor 1 */
        moe_comm_t *w = NULL;
        moe_eng_t *e = make(&plan, &o, &w);
        struct moe_eng_mem_report m;
        moe_eng_memory(e, &m);
        /* AdamW's streams share the page offset of the reduced gradient shard, which sits at the
         * start of the bucket's gradients on every rank (in-place reduce-scatter), not at the
         * rank's offset in the bucket (engine/model.c bucket_close). */
        int streams_ok = 1;
        for (int b = 0; b < e->num_buckets; b++) {
            const struct moe_eng_bucket *bk = &e->buckets[b];
            uintptr_t page = (uintptr_t)bk->g % MOE_ENG_PAGE_BYTES;
            streams_ok = streams_ok && (uintptr_t)bk->master % MOE_ENG_PAGE_BYTES == page &&
                         (uintptr_t)bk->m % MOE_ENG_PAGE_BYTES == page &&
                         (uintptr_t)bk->v % MOE_ENG_PAGE_BYTES == page;
        }
        int streams_all = 0;
        MPI_Allreduce(&streams_ok, &streams_all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        assert_int_equal(streams_all, 1);
        const struct moe_layout *lay = moe_eng_layout(e);
        int stage = rank / (lay->tp * lay->cp * lay->dp);
        struct moe_cluster cl;
        memset(&cl, 0, sizeof(cl));
        struct moe_options opt = plan.options;
        opt.is_fp32_training = true;
        struct moe_mem_bytes pred;
        moe_mem_stage(&plan.model, &cl, lay, &opt, stage, 1.0, &pred);
        double r[4] = {m.weights / pred.weights, m.grads / pred.grads, m.optimizer / pred.optimizer,
                       m.activations / pred.activations};
        double act_lo = 0.0;
        double act_hi = 0.0;
        MPI_Allreduce(&r[3], &act_lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&r[3], &act_hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (rank == 0) {
            printf("  %-26s stage %d: engine/predicted weights %.4f grads %.4f optimizer %.4f "
                   "activations %.3f (ranks %.3f-%.3f)\n",
                   layouts[li].name, stage, r[0], r[1], r[2], r[3], act_lo, act_hi);
        }
        moe_eng_destroy(e);
        moe_comm_destroy(w);
        int ok = fabs(r[0] - 1.0) <= 0.01 && fabs(r[1] - 1.0) <= 0.01 && fabs(r[2] - 1.0) <= 0.01 &&
                 fabs(r[3] - 1.0) <= 0.20;
        int all = 0;
        MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!ok) {
            fprintf(stderr, "rank %d stage %d ratios %.4f %.4f %.4f %.4f\n", rank, stage, r[0],
                    r[1], r[2], r[3]);
        }
        assert_int_equal(all, 1);
    }
}

/* Bytes per rank per step from run.json's bytes_sent map. */
static double bytes_of(const cJSON *root, const char *key)
{
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, "bytes_sent");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

static void test_run_file_and_bytes(void **state)
{
    (void)state;
    const struct eng_test_layout l = {"DP4 EP2 dist-opt", 1, 1, 1, 1, 2, 1, true, 4};
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-moe", &l);
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 3);
    moe_comm_t *w = NULL;
    moe_eng_t *e = make(&plan, &o, &w);
    for (int i = 0; i < 3; i++) {
        (void)step(e);
    }
    struct moe_eng_mem_report m;
    moe_eng_memory(e, &m);
    char path[128];
    shared_dir(path, sizeof(path), "run");
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_eng_write_run(e, path, "{\"format\": \"moefold-plan\"}", &diag), MOE_OK);
    moe_eng_destroy(e);
    moe_comm_destroy(w);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        struct moe_run run;
        assert_int_equal(moe_run_read(path, &run, &diag), MOE_OK);
        assert_int_equal(run.num_ranks, N);
        assert_int_equal(run.steps, 3);
        assert_int_equal(run.measured_steps, 2);
        const struct moe_phase_times *t = &run.time;
        double sum = t->compute + t->expert_gemm + t->dispatch + t->combine + t->tp_comm +
                     t->cp_comm + t->pp_comm + t->dp_comm + t->pp_bubble + t->optimizer +
                     t->host_overhead;
        /* Every phase is timed where it runs: what none claimed stays a small remainder. */
        assert_true(fabs(sum + run.unattributed_s - run.step_time_s) <= 1e-6 * run.step_time_s);
        assert_true(run.unattributed_s <= 0.02 * run.step_time_s);
        assert_true(t->host_overhead > 0.0);
        assert_true(t->dp_comm > 0.0 && t->dispatch > 0.0);
        assert_true(run.num_moe_layers == 3 && run.load_max_over_mean[0] >= 1.0);
        /* The busiest EP rank per exchange over the mean: between 1 and EP (= 2). */
        assert_int_equal(run.num_rank_load_layers, 3);
        for (int i = 0; i < 3; i++) {
            assert_true(run.load_rank_max_over_mean[i] >= 1.0 &&
                        run.load_rank_max_over_mean[i] <= 2.0);
        }
        moe_run_fini(&run);
        cJSON *root = NULL;
        assert_int_equal(moe_json_read_file(path, &root, &diag), MOE_OK);
        /* Dense buckets: one reduce-scatter and one all-gather of the whole gradient/weight
         * block per step over DP4, (n-1)/n of it each; the expert buckets go over EDP2 instead.
         * Grads and weights blocks have the same padded size here (no expert bias). */
        double rs = bytes_of(root, "dpcp.reducescatter") + bytes_of(root, "edp.reducescatter");
        double ag = bytes_of(root, "dpcp.allgather") + bytes_of(root, "edp.allgather");
        assert_true(rs >= 0.5 * m.grads - 1.0 && rs <= 0.75 * m.grads + 1.0);
        assert_true(fabs(rs - ag) <= 1e-9 * rs);
        assert_true(bytes_of(root, "ep.alltoall") > 0.0);
        assert_true(bytes_of(root, "tp.allgather") == 0.0); /* tp = 1 */
        assert_non_null(cJSON_GetObjectItemCaseSensitive(root, "plan"));
        /* Every phase of time_s says how it was measured. */
        const cJSON *defs = cJSON_GetObjectItemCaseSensitive(root, "phase_definitions");
        const cJSON *ph = NULL;
        int num_phases = 0;
        cJSON_ArrayForEach(ph, cJSON_GetObjectItemCaseSensitive(root, "time_s"))
        {
            const cJSON *txt = cJSON_GetObjectItemCaseSensitive(defs, ph->string);
            assert_true(cJSON_IsString(txt) && strlen(txt->valuestring) > 10);
            num_phases++;
        }
        /* + ep_comm, exposed_comm, unattributed */
        assert_int_equal(num_phases, MOE_NUM_PHASES + 3);
        assert_int_equal(cJSON_GetArraySize(defs), num_phases);
        cJSON_Delete(root);
        (void)unlink(path);
    }
}

/* moe_eng_train's host speed probe: after the measured step every rank times the bench's 512^3
 * GEMM; run.json "host_probe" holds its shape, mean time and the ranks' speed spread (read back
 * by moe_run_read), and --no-host-probe leaves it out. */
static void test_host_probe(void **state)
{
    (void)state;
    const struct eng_test_layout l = {"DP4 EP2", 1, 1, 1, 1, 2, 1, false, N};
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-moe", &l);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int off = 0; off < 2; off++) {
        struct moe_eng_run_opts o;
        eng_test_opts(&o, 4);
        o.no_host_probe = off == 1;
        o.probe_evict_bytes = (size_t)1 << 20;
        moe_comm_t *w = NULL;
        moe_eng_t *e = make(&plan, &o, &w);
        struct moe_diag diag;
        memset(&diag, 0, sizeof(diag));
        assert_int_equal(moe_eng_train(e, &diag), MOE_OK);
        char path[128];
        shared_dir(path, sizeof(path), off ? "run-noprobe" : "run-probe");
        assert_int_equal(moe_eng_write_run(e, path, NULL, &diag), MOE_OK);
        moe_eng_destroy(e);
        moe_comm_destroy(w);
        if (rank == 0) {
            struct moe_run run;
            assert_int_equal(moe_run_read(path, &run, &diag), MOE_OK);
            if (off) {
                assert_true(run.probe_us == 0.0);
            } else {
                for (int i = 0; i < 3; i++) {
                    assert_int_equal(run.probe_mnk[i], 512);
                }
                /* 2 x 512^3 FLOPs at between 0.1 and 10^5 GFLOP/s */
                assert_true(run.probe_us > 2.0 * 512 * 512 * 512 / 1e8 &&
                            run.probe_us < 2.0 * 512 * 512 * 512 / 1e2);
                /* the slowest rank over the mean, minus 1: at most N - 1 */
                assert_true(run.probe_rank_spread >= 0.0 && run.probe_rank_spread <= N - 1.0);
                /* time_us is the median of the probes' times (after steps 2, 3 and 4) */
                cJSON *root = NULL;
                assert_int_equal(moe_json_read_file(path, &root, &diag), MOE_OK);
                const cJSON *hp = cJSON_GetObjectItemCaseSensitive(root, "host_probe");
                const cJSON *times = cJSON_GetObjectItemCaseSensitive(hp, "times_us");
                assert_int_equal(cJSON_GetArraySize(times), 3);
                int below = 0, above = 0;
                for (int i = 0; i < 3; i++) {
                    double t = cJSON_GetArrayItem(times, i)->valuedouble;
                    below += t < run.probe_us;
                    above += t > run.probe_us;
                }
                assert_true(below <= 1 && above <= 1); /* one of them, the middle one */
                assert_true(cJSON_GetObjectItemCaseSensitive(hp, "time_us_mean")->valuedouble >
                            0.0);
                cJSON_Delete(root);
            }
            moe_run_fini(&run);
            (void)unlink(path);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
}

/* --profile-kernels: each phase's ops take at most the phase's time, and the ops land where
 * they run: the dense GEMMs and attention in compute, the experts' activation in expert_gemm, the
 * permutes in dispatch/combine, AdamW in the optimizer. */
static void check_kernel_profile(const struct moe_run *run, const double *tv)
{
    assert_non_null(run->kernel_s);
    for (int k = 0; k < MOE_NUM_PHASES; k++) {
        const cJSON *ph =
            cJSON_GetObjectItemCaseSensitive(run->kernel_s, moe_phase_name((enum moe_phase)k));
        double tot = 0.0;
        const cJSON *it = NULL;
        cJSON_ArrayForEach(it, ph)
        {
            tot += cJSON_GetObjectItemCaseSensitive(it, "s")->valuedouble;
            assert_true(cJSON_GetObjectItemCaseSensitive(it, "calls")->valuedouble > 0.0);
        }
        if (tot > tv[k] * (1.0 + 1e-9) + 1e-9) {
            fail_msg("%s: ops %.6f s > phase %.6f s", moe_phase_name((enum moe_phase)k), tot,
                     tv[k]);
        }
    }
    const char *where[][2] = {{"compute", "linear_fwd"},     {"compute", "attention_bwd"},
                              {"expert_gemm", "swiglu_fwd"}, {"dispatch", "permute"},
                              {"combine", "unpermute"},      {"optimizer", "adamw_step"}};
    for (size_t i = 0; i < sizeof(where) / sizeof(where[0]); i++) {
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(run->kernel_s, where[i][0]);
        if (cJSON_GetObjectItemCaseSensitive(ph, where[i][1]) == NULL) {
            fail_msg("kernel_s.%s has no %s", where[i][0], where[i][1]);
        }
    }
    assert_null(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(run->kernel_s, "compute"), "grouped_linear_fwd"));
}

/*
 * PP2 x EP2, the second of two steps traced: run.json's wait shares are parts of their phases, the
 * phases cover the step (unattributed under 2%), and the trace is valid (every event with
 * ph/ts/dur/pid/tid, no overlap on a track, one process per rank, no gaps inside a rank's step);
 * rank 0 spans its measured step within 1%, and the critical stage's ranks' phase sums average to
 * time_s (one measured step: the traced one). (Each rank's step runs from its own start, after its
 * own optimizer work, so ranks' steps differ by their start offsets.)
 */
static void test_trace_and_waits(void **state)
{
    (void)state;
    const struct eng_test_layout l = {"PP2 EP2", 1, 1, 2, 1, 2, 1, true, 4};
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-moe", &l);
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 2);
    o.trace_step = 2;
    o.profile_kernels = true;
    moe_comm_t *w = NULL;
    moe_eng_t *e = make(&plan, &o, &w);
    for (int i = 0; i < 2; i++) {
        (void)step(e);
        /* Nothing joins the ranks between steps: the arrivals wait for the report. */
        assert_int_equal(moe_eng_unmatched_steps(e), i + 1);
    }
    char path[128];
    char trace[160];
    shared_dir(path, sizeof(path), "run-traced");
    (void)snprintf(trace, sizeof(trace), "%s.trace.json", path);
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_eng_write_run(e, path, NULL, &diag), MOE_OK);
    assert_int_equal(moe_eng_unmatched_steps(e), 0);
    assert_int_equal(moe_eng_write_trace(e, trace, &diag), MOE_OK);
    moe_eng_destroy(e);
    moe_comm_destroy(w);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank != 0) {
        return;
    }
    struct moe_run run;
    assert_int_equal(moe_run_read(path, &run, &diag), MOE_OK);
    assert_int_equal(run.measured_steps, 1);
    assert_true(run.has_wait);
    assert_true(run.critical_stage == 0 || run.critical_stage == 1);
    assert_true(run.unattributed_s <= 0.02 * run.step_time_s);
    const double tv[MOE_NUM_PHASES] = {
        run.time.compute,   run.time.expert_gemm, run.time.dispatch,     run.time.combine,
        run.time.tp_comm,   run.time.cp_comm,     run.time.pp_comm,      run.time.dp_comm,
        run.time.pp_bubble, run.time.optimizer,   run.time.host_overhead};
    const double wv[MOE_NUM_PHASES] = {
        run.wait.compute,   run.wait.expert_gemm, run.wait.dispatch,     run.wait.combine,
        run.wait.tp_comm,   run.wait.cp_comm,     run.wait.pp_comm,      run.wait.dp_comm,
        run.wait.pp_bubble, run.wait.optimizer,   run.wait.host_overhead};
    for (int k = 0; k < MOE_NUM_PHASES; k++) {
        assert_true(wv[k] >= 0.0 && wv[k] <= tv[k] + 1e-9);
    }
    assert_non_null(run.timeline);
    cJSON *root = NULL;
    assert_int_equal(moe_json_read_file(path, &root, &diag), MOE_OK);
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(root, "per_step");
    const cJSON *last = cJSON_GetArrayItem(steps, cJSON_GetArraySize(steps) - 1);
    double step0 = cJSON_GetObjectItemCaseSensitive(last, "step_time_s")->valuedouble;
    cJSON_Delete(root);
    struct moe_trace_summary *sum = malloc(sizeof(*sum));
    assert_non_null(sum);
    if (moe_trace_summarize(trace, sum, &diag) != MOE_OK) {
        fail_msg("%s: %s", trace, diag.message);
    }
    assert_int_equal(sum->num_procs, N);
    assert_true(sum->worst_overlap_us < 0.01);
    double mean[MOE_NUM_PHASES] = {0};
    int in_stage = 0;
    for (int p = 0; p < sum->num_procs; p++) {
        const struct moe_trace_proc *pr = &sum->procs[p];
        double total = pr->other_us;
        for (int k = 0; k < MOE_NUM_PHASES; k++) {
            total += pr->phase_us[k];
        }
        /* The phase clock partitions a rank's step: its events leave no gaps. */
        assert_true(fabs(total - (pr->last_us - pr->first_us)) <= 1e-6 * total + 0.01);
        if (pr->pid == 0) { /* per_step holds rank 0's own step times */
            double span = (pr->last_us - pr->first_us) * 1e-6;
            if (fabs(span - step0) > 0.01 * step0) {
                fail_msg("rank 0 spans %.6f s, its step took %.6f s", span, step0);
            }
        }
        if (pr->pid / 2 != run.critical_stage) { /* 2 ranks per stage */
            continue;
        }
        for (int k = 0; k < MOE_NUM_PHASES; k++) {
            mean[k] += pr->phase_us[k] * 1e-6;
        }
        in_stage++;
    }
    assert_int_equal(in_stage, 2);
    for (int k = 0; k < MOE_NUM_PHASES; k++) {
        if (fabs(mean[k] / in_stage - tv[k]) > 1e-6 + 1e-6 * run.step_time_s) {
            fail_msg("%s: trace %.6f s, time_s %.6f s", moe_phase_name((enum moe_phase)k),
                     mean[k] / in_stage, tv[k]);
        }
    }
    free(sum);
    check_kernel_profile(&run, tv);
    moe_run_fini(&run);
    (void)unlink(path);
    (void)unlink(trace);
}

/* Run plan for 2 steps under o, write run.json, and read it back on every rank. */
static void
run_and_read(const struct moe_plan *plan, const struct moe_eng_run_opts *o, struct moe_run *run)
{
    moe_comm_t *w = NULL;
    moe_eng_t *e = make(plan, o, &w);
    for (int i = 0; i < o->num_steps; i++) {
        (void)step(e);
    }
    char path[128];
    shared_dir(path, sizeof(path), "run-detail");
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_eng_write_run(e, path, NULL, &diag), MOE_OK);
    moe_eng_destroy(e);
    moe_comm_destroy(w);
    MPI_Barrier(MPI_COMM_WORLD);
    enum moe_status st = moe_run_read(path, run, &diag);
    if (st != MOE_OK) {
        fprintf(stderr, "%s\n", diag.message);
    }
    assert_int_equal(st, MOE_OK);
    MPI_Barrier(MPI_COMM_WORLD);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        (void)unlink(path);
    }
}

static double parts_sum(const struct moe_run_buffers_detail *b)
{
    return b->dispatch + b->temporaries + b->recompute_scratch + b->offload_staging + b->pipeline +
           b->other;
}

/*
 * run.json's buffers_detail_gib and expert_rows_factor (tiny-moe, DP4 x EP2, 4 ranks: a rank holds
 * Ms = 64 tokens of C = 64, top-2, so 128 permuted rows leave it; its 4 experts of Fe = 32 may get
 * rows_recv = rows_exp = EP x 128 = 256 rows with the worst-case sizing). The parts add up to
 * memory_gib.buffers. The dispatch part is the MoE backward's set of row buffers live together at
 * the temp peak, its combine's backward: expert-input gradient 256 C + receive 256 C + gathered
 * 256 C + send 128 C floats = 229376 bytes (the expert GEMMs' activation 256 Fe and fc1 256 x 2 Fe
 * gradients come after the exchange buffers are released, beside the expert-input gradient alone);
 * with --moe-buffer-factor 1.5 the bound is 192 rows: 3 x 192 C + 128 C floats = 180224 bytes,
 * and the factor reads 1.5 instead of
 * EP = 2. Selective recompute of the MoE block fills recompute_scratch, offload fills
 * offload_staging; neither exists without them.
 */
static void test_buffers_detail_and_rows_factor(void **state)
{
    (void)state;
    const struct eng_test_layout l = {"DP4 EP2", 1, 1, 1, 1, 2, 1, false, 4};
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-moe", &l);
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 2);
    struct moe_run r;
    run_and_read(&plan, &o, &r);
    assert_true(r.has_buffers_detail);
    assert_true(r.mem.buffers > 0.0);
    assert_true(fabs(parts_sum(&r.buffers_detail) - r.mem.buffers) <= 1e-12 * r.mem.buffers);
    assert_true(r.expert_rows_factor == 2.0);
    assert_true(fabs(r.buffers_detail.dispatch - 229376.0) < 0.5);
    assert_true(r.buffers_detail.recompute_scratch == 0.0 &&
                r.buffers_detail.offload_staging == 0.0);
    assert_true(r.buffers_detail.pipeline > 0.0 && r.buffers_detail.other > 0.0);
    double worst_case_buffers = r.mem.buffers;
    moe_run_fini(&r);

    o.moe_buffer_factor = 1.5;
    run_and_read(&plan, &o, &r);
    assert_true(r.expert_rows_factor == 1.5);
    assert_true(fabs(r.buffers_detail.dispatch - 180224.0) < 0.5);
    assert_true(fabs(parts_sum(&r.buffers_detail) - r.mem.buffers) <= 1e-12 * r.mem.buffers);
    assert_true(r.mem.buffers < worst_case_buffers);
    moe_run_fini(&r);

    o.moe_buffer_factor = 0.0;
    plan.options.recompute = MOE_RECOMPUTE_SELECTIVE;
    plan.options.recompute_modules = MOE_RC_MOE;
    run_and_read(&plan, &o, &r);
    assert_true(r.buffers_detail.recompute_scratch > 0.0);
    assert_true(fabs(parts_sum(&r.buffers_detail) - r.mem.buffers) <= 1e-12 * r.mem.buffers);
    moe_run_fini(&r);

    plan.options.recompute = MOE_RECOMPUTE_NONE;
    plan.options.recompute_modules = 0;
    plan.options.fine_grained_offload = true;
    plan.options.offload_modules = MOE_OFF_ALL;
    run_and_read(&plan, &o, &r);
    assert_true(r.buffers_detail.offload_staging > 0.0 &&
                r.buffers_detail.recompute_scratch == 0.0);
    assert_true(fabs(parts_sum(&r.buffers_detail) - r.mem.buffers) <= 1e-12 * r.mem.buffers);
    moe_run_fini(&r);
}

/* The mean over MoE layers of a run's busiest EP rank's rows over the mean, per exchange. */
static double mean_rank_load(const struct moe_run *r)
{
    double s = 0.0;
    for (int i = 0; i < r->num_rank_load_layers; i++) {
        s += r->load_rank_max_over_mean[i];
    }
    return r->num_rank_load_layers > 0 ? s / r->num_rank_load_layers : 0.0;
}

/* How many of the run's plan_differences contain `what`. */
static int differences_naming(const struct moe_run *r, const char *what)
{
    int n = 0;
    const cJSON *it = NULL;
    cJSON_ArrayForEach(it, r->plan_differences)
    {
        n += strstr(it->valuestring, what) != NULL;
    }
    return n;
}

/*
 * The engine runs what the plan says or records what it did not: forced load balancing (random
 * router logits, Megatron's benchmark mode) brings the busiest EP rank close to the mean where the
 * untrained router leaves it far above; per-expert GEMMs (no --moe-grouped-gemm) train to the same
 * losses as the grouped ones, and so does optimizer CPU offload (the state in the host pool);
 * options it does not implement appear in "ran" as what ran and in plan_differences, one line
 * each.
 */
static void test_runs_the_plan(void **state)
{
    (void)state;
    const struct eng_test_layout l = {"EP4", 1, 1, 1, 1, 4, 1, true, 4};
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-moe", &l);
    plan.options.moe_grouped_gemm = true;
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 2);
    struct moe_run r;
    run_and_read(&plan, &o, &r);
    double routed = mean_rank_load(&r);
    double routed_active = r.expert_active_fraction;
    moe_run_fini(&r);
    plan.options.force_load_balancing = true;
    plan.options.overlap_moe_ep_comm = true; /* delayed wgrad needs it */
    plan.options.delay_wgrad_compute = true;
    plan.options.moe_hot_expert_replicas = 2;
    run_and_read(&plan, &o, &r);
    double forced = mean_rank_load(&r);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        printf("  busiest EP rank / mean: routed %.3f, forced balance %.3f\n", routed, forced);
    }
    assert_true(forced >= 1.0 && forced < 1.25);
    assert_true(forced < routed);
    /* Every local expert holds rows in every grouped call: 128 random top-2 picks over 8 experts.
     * The untrained router may leave some without. */
    assert_true(r.expert_active_fraction == 1.0);
    assert_true(routed_active > 0.0 && routed_active <= 1.0);
    assert_non_null(r.ran);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r.ran, "force_load_balancing")));
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(r.ran, "delay_wgrad_compute")));
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(r.ran, "moe_hot_expert_replicas")->valueint,
                     0);
    assert_int_equal(differences_naming(&r, "delay_wgrad_compute") +
                         differences_naming(&r, "moe_hot_expert_replicas"),
                     2);
    moe_run_fini(&r);

    /* A skew that sends every token to EP rank 0's two experts: they hold rows in every call, the
     * other ranks' six never (their grouped calls run no GEMM): 2 of 8, and rank 0 takes 4 x the
     * mean rows. */
    plan.options.force_load_balancing = false;
    plan.options.overlap_moe_ep_comm = false;
    plan.options.delay_wgrad_compute = false;
    plan.options.moe_hot_expert_replicas = 0;
    o.router_skew = 100.0;
    run_and_read(&plan, &o, &r);
    assert_true(r.expert_active_fraction == 0.25);
    assert_true(fabs(mean_rank_load(&r) - 4.0) < 1e-12);
    moe_run_fini(&r);
    o.router_skew = 0.0;

    double grouped[2];
    double per_expert[2];
    plan.options.force_load_balancing = false;
    plan.options.overlap_moe_ep_comm = false;
    plan.options.delay_wgrad_compute = false;
    assert_int_equal(eng_test_losses(MPI_COMM_WORLD, &plan, &o, grouped), MOE_OK);
    plan.options.moe_grouped_gemm = false;
    assert_int_equal(eng_test_losses(MPI_COMM_WORLD, &plan, &o, per_expert), MOE_OK);
    assert_true(eng_test_max_rel(per_expert, grouped, 2) <= 1e-6);

    /* Optimizer CPU offload: the state moves to the host pool, AdamW runs on the host copy of the
     * gradient shard; the same update, bit for bit. */
    double offloaded[2];
    plan.options.optimizer_cpu_offload = true;
    plan.options.optimizer_offload_fraction = 1.0;
    plan.options.precision_aware_optimizer = true; /* Megatron requires it for the offload */
    assert_int_equal(eng_test_losses(MPI_COMM_WORLD, &plan, &o, offloaded), MOE_OK);
    assert_true(offloaded[0] == per_expert[0] && offloaded[1] == per_expert[1]);
    run_and_read(&plan, &o, &r);
    assert_true(r.mem.optimizer == 0.0 && r.mem.host_offload > 0.0);
    moe_run_fini(&r);

    /* What the engine lacks falls back and says so: the hierarchical dispatcher with ETP2 runs
     * the flat all-to-all, the EP overlap beside ETP2 runs without overlap. */
    const struct eng_test_layout l2 = {"EP2 ETP2", 1, 1, 1, 1, 2, 2, true, 4};
    eng_test_plan(&plan, "tiny-moe", &l2);
    plan.options.dispatcher = MOE_DISPATCH_DEEPEP;
    plan.options.overlap_moe_ep_comm = true;
    o.num_steps = 1;
    run_and_read(&plan, &o, &r);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(r.ran, "overlap_moe_ep_comm")->type,
                     cJSON_False);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(r.ran, "dispatcher")->valuestring,
                        moe_dispatcher_name(MOE_DISPATCH_ALLTOALL));
    assert_int_equal(
        differences_naming(&r, "flat all-to-all") + differences_naming(&r, "ran without it"), 2);
    moe_run_fini(&r);
}

/*
 * The router's load-balancing loss is the plan's (--moe-aux-loss-coeff): off at Megatron's default
 * 0 (the second step's loss differs from a run with it on), seq_aux_loss run as Switch's loss over
 * the same TP x CP group, global_aux_loss not run; moefold-train's --aux-loss-coeff overrides the
 * plan; "ran" holds what ran and plan_differences says each departure.
 */
static void test_load_balancing_loss_follows_plan(void **state)
{
    (void)state;
    const struct eng_test_layout l = {"TP2 EP2", 2, 1, 1, 1, 2, 1, false, 4};
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-moe", &l);
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 2);
    double on[2], off[2];
    assert_int_equal(eng_test_losses(MPI_COMM_WORLD, &plan, &o, on), MOE_OK);
    plan.options.aux_loss_coeff = 0.0;
    assert_int_equal(eng_test_losses(MPI_COMM_WORLD, &plan, &o, off), MOE_OK);
    assert_true(on[0] == off[0]); /* the loss reported is the LM loss; the aux loss moves step 2 */
    assert_true(on[1] != off[1]);

    struct moe_run r;
    o.num_steps = 1;
    plan.options.seq_aux_loss_coeff = 1e-4;
    plan.options.global_aux_loss_coeff = 1e-3;
    run_and_read(&plan, &o, &r);
    cJSON *aux = cJSON_GetObjectItemCaseSensitive(r.ran, "aux_loss_coeff");
    assert_true(cJSON_IsNumber(aux) && aux->valuedouble == 1e-4);
    assert_true(cJSON_GetObjectItemCaseSensitive(r.ran, "seq_aux_loss_coeff")->valuedouble == 0.0);
    assert_true(cJSON_GetObjectItemCaseSensitive(r.ran, "global_aux_loss_coeff")->valuedouble ==
                0.0);
    assert_int_equal(differences_naming(&r, "seq_aux_loss 0.0001: ran as Switch's"), 1);
    assert_int_equal(differences_naming(&r, "global_aux_loss 0.001: not implemented"), 1);
    moe_run_fini(&r);

    plan.options.seq_aux_loss_coeff = 0.0;
    plan.options.global_aux_loss_coeff = 0.0;
    plan.options.aux_loss_coeff = 1e-2;
    run_and_read(&plan, &o, &r);
    assert_true(cJSON_GetObjectItemCaseSensitive(r.ran, "aux_loss_coeff")->valuedouble == 1e-2);
    assert_int_equal(differences_naming(&r, "aux"), 0);
    moe_run_fini(&r);
    o.aux_loss_coeff = 0.0f; /* moefold-train --aux-loss-coeff 0 */
    run_and_read(&plan, &o, &r);
    assert_true(cJSON_GetObjectItemCaseSensitive(r.ran, "aux_loss_coeff")->valuedouble == 0.0);
    assert_int_equal(differences_naming(&r, "not the plan's 0.01"), 1);
    moe_run_fini(&r);
}

/* ||g_recipe - g_fp32|| / ||g_fp32|| over every rank's local gradients after one compute_grads. */
static double grad_rel_error(const float *g, const float *ref, size_t n)
{
    double ss[2] = {0.0, 0.0};
    for (size_t j = 0; j < n; j++) {
        double d = (double)g[j] - (double)ref[j];
        ss[0] += d * d;
        ss[1] += (double)ref[j] * (double)ref[j];
    }
    MPI_Allreduce(MPI_IN_PLACE, ss, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return sqrt(ss[0] / ss[1]);
}

/*
 * Each recipe against its own expected error. Round-to-nearest into a format with unit roundoff u
 * (BF16 2^-8, FP8 E4M3 2^-4, FP4 E2M1 2^-2) leaves a relative error uniform in +-u/m for a
 * mantissa m in [1, 2): RMS u sqrt(E[1/m^2] / 3) = 0.41 u per operand, about 0.58 u for a product
 * of two quantised operands. So the gradient of one step, computed with every GEMM input quantised
 * (the encoders are bit-exact, so this is the recipe's own error, not noise), must differ from the
 * fp32 gradient by 0.25 u .. 1.0 u of that recipe's format: a recipe that quantised to a wider or
 * narrower format (or not at all) is off by a factor of 4 or more. Training on still lowers the
 * loss.
 */
static void test_precision_recipes_train(void **state)
{
    (void)state;
    const struct eng_test_layout l = {"TP2 EP2", 2, 1, 1, 1, 2, 1, false, 4};
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-moe", &l);
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 4);
    size_t n_ref = 0;
    double act = 0.0;
    float *ref = local_grads(&plan, false, false, &n_ref, &act);
    const struct {
        enum moe_recipe recipe;
        double u;
    } recipes[] = {
        {MOE_RECIPE_BF16, 0x1p-8},          {MOE_RECIPE_FP8_TENSORWISE, 0x1p-4},
        {MOE_RECIPE_FP8_BLOCKWISE, 0x1p-4}, {MOE_RECIPE_MXFP8, 0x1p-4},
        {MOE_RECIPE_NVFP4, 0x1p-2},
    };
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    o.emulate_precision = true;
    for (size_t i = 0; i < MOE_ARRAY_LEN(recipes); i++) {
        plan.options.recipe = recipes[i].recipe;
        size_t n = 0;
        float *g = local_grads(&plan, false, true, &n, &act);
        assert_true(n == n_ref);
        double rel = grad_rel_error(g, ref, n);
        free(g);
        double got[4];
        assert_int_equal(eng_test_losses(MPI_COMM_WORLD, &plan, &o, got), MOE_OK);
        if (rank == 0) {
            printf("  %-16s gradient error %.3e = %.2f u (u = %.3g), loss %.5f -> %.5f\n",
                   moe_recipe_name(recipes[i].recipe), rel, rel / recipes[i].u, recipes[i].u,
                   got[0], got[3]);
        }
        assert_true(rel >= 0.25 * recipes[i].u);
        assert_true(rel <= 1.0 * recipes[i].u);
        assert_true(got[3] < got[0]);
    }
    free(ref);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != N) {
        if (rank == 0) {
            fprintf(stderr, "test_engine_mpi needs mpirun -n %d (moe-test-np)\n", N);
        }
        MPI_Finalize();
        return 1;
    }
    if (rank != 0 && freopen("/dev/null", "w", stdout) == NULL) {
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checkpoint_resume),
        cmocka_unit_test(test_recompute_offload_bit_identical),
        cmocka_unit_test(test_memory_vs_prediction),
        cmocka_unit_test(test_run_file_and_bytes),
        cmocka_unit_test(test_host_probe),
        cmocka_unit_test(test_trace_and_waits),
        cmocka_unit_test(test_runs_the_plan),
        cmocka_unit_test(test_load_balancing_loss_follows_plan),
        cmocka_unit_test(test_buffers_detail_and_rows_factor),
        cmocka_unit_test(test_precision_recipes_train),
    };
    int fails = cmocka_run_group_tests(tests, NULL, NULL);
    int total = 0;
    MPI_Allreduce(&fails, &total, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return total;
}
