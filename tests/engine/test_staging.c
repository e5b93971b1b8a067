/*
 * The CUDA backend's host/device bookkeeping on machines without a GPU (moe-test-np: 4): the
 * engine runs on an emulated device (engine/device.h: "device" memory is separate host memory,
 * every host read or write of it goes through the explicit copies, the token counts of the
 * dropless dispatch, the losses, the router losses, the gradient sums of squares and the finite
 * checks take the CUDA path through host staging), with the CPU kernels and MPI. Results must be
 * bit-identical to the plain CPU backend: a missing copy, a stale host copy, a host temporary
 * carved from the wrong arena or a scalar slot read out of order changes them. Layouts: one rank
 * (with recompute, offload, precision emulation, the distributed optimizer with overlapped
 * reductions) and four ranks (TP2+SP x EP2 folded, EP4 with the overlap, ETP2, PP2 with
 * VPP2, CP2 with DP2). Also: a NaN weight and an infinite output weight are named through the
 * deferred checks as on the CPU, checkpoints written from the emulated device resume bit for bit,
 * and the hierarchical dispatcher (host-only bookkeeping) runs the flat all-to-all instead.
 */
#include "tests/engine/eng_test.h"

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

enum { STEPS = 3 };

/* Options beyond the layout. */
struct variant {
    const char *name;
    enum moe_recompute_granularity rc;
    unsigned rc_modules;
    unsigned offload;
    bool ep_overlap;
    bool emulate_precision;
    bool dist_overlap;
    bool opt_offload; /* --optimizer-cpu-offload: AdamW on the host's state */
};

/* Losses of plan on ranks 0..world-1 (others wait), plain CPU or emulated device. */
static enum moe_status
run_on(const struct moe_plan *plan, int world, bool emulated, bool emulate_prec, double *losses)
{
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, rank < world ? 0 : MPI_UNDEFINED, rank, &sub);
    enum moe_status st = MOE_OK;
    if (sub != MPI_COMM_NULL) {
        struct moe_eng_run_opts o;
        eng_test_opts(&o, STEPS);
        o.is_device_emulated = emulated;
        o.emulate_precision = emulate_prec;
        st = eng_test_losses(sub, plan, &o, losses);
        MPI_Comm_free(&sub);
    }
    int v = -(int)st;
    int worst = 0;
    MPI_Allreduce(&v, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Bcast(losses, STEPS, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return (enum moe_status)(-worst);
}

static void same_as_cpu(const char *what, const struct moe_plan *plan, int world, bool emu_prec)
{
    double cpu[STEPS], dev[STEPS];
    assert_int_equal(run_on(plan, world, false, emu_prec, cpu), MOE_OK);
    assert_int_equal(run_on(plan, world, true, emu_prec, dev), MOE_OK);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        printf("  %-34s loss[%d] cpu %.9f emulated device %.9f\n", what, STEPS, cpu[STEPS - 1],
               dev[STEPS - 1]);
    }
    assert_memory_equal(dev, cpu, sizeof(cpu));
}

static void test_one_rank_variants(void **state)
{
    (void)state;
    const struct eng_test_layout one = {"1 rank", 1, 1, 1, 1, 1, 1, false, 1};
    const struct variant vs[] = {
        {"plain", MOE_RECOMPUTE_NONE, 0, 0, false, false, false, false},
        {"selective moe + core_attn", MOE_RECOMPUTE_SELECTIVE, MOE_RC_MOE | MOE_RC_CORE_ATTN, 0,
         false, false, false, false},
        {"full recompute", MOE_RECOMPUTE_FULL, 0, 0, false, false, false, false},
        {"offload all modules", MOE_RECOMPUTE_NONE, 0, MOE_OFF_ALL, false, false, false, false},
        {"fp8 tensorwise emulation", MOE_RECOMPUTE_NONE, 0, 0, false, true, false, false},
        {"dist. optimizer, overlap", MOE_RECOMPUTE_NONE, 0, 0, false, false, true, false},
        {"optimizer cpu offload", MOE_RECOMPUTE_NONE, 0, 0, false, false, true, true},
    };
    const char *models[] = {"tiny-moe", "tiny-dsv3"};
    for (size_t m = 0; m < MOE_ARRAY_LEN(models); m++) {
        for (size_t i = 0; i < MOE_ARRAY_LEN(vs); i++) {
            struct moe_plan p;
            eng_test_plan(&p, models[m], &one);
            p.options.moe_grouped_gemm = true;
            p.options.recompute = vs[i].rc;
            p.options.recompute_modules = vs[i].rc_modules;
            if (vs[i].rc == MOE_RECOMPUTE_FULL) {
                p.options.recompute_method = MOE_RECOMPUTE_UNIFORM;
                p.options.recompute_num_layers = 1;
            }
            p.options.fine_grained_offload = vs[i].offload != 0;
            p.options.offload_modules = vs[i].offload;
            p.options.overlap_moe_ep_comm = vs[i].ep_overlap;
            p.options.use_distributed_optimizer = vs[i].dist_overlap;
            p.options.overlap_grad_reduce = vs[i].dist_overlap;
            p.options.overlap_param_gather = vs[i].dist_overlap;
            p.options.optimizer_cpu_offload = vs[i].opt_offload;
            p.options.precision_aware_optimizer = vs[i].opt_offload;
            if (vs[i].emulate_precision) {
                p.options.recipe = MOE_RECIPE_FP8_TENSORWISE;
            }
            char what[96];
            (void)snprintf(what, sizeof(what), "%s %s", models[m], vs[i].name);
            same_as_cpu(what, &p, 1, vs[i].emulate_precision);
        }
    }
}

/* The presets' miniatures (q/k norm; biases, windows and sinks; MLA) on the emulated device: one
 * rank plain and with the attention recomputes, and two folded four-rank layouts. */
static void test_architectures(void **state)
{
    (void)state;
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *models[] = {"tiny-qwen3-30b-a3b", "tiny-gpt-oss-120b", "tiny-kimi-k2"};
    const struct eng_test_layout ls[] = {
        {"1 rank", 1, 1, 1, 1, 1, 1, false, 1},
        {"tp2 sp x ep2 (folded), dp2", 2, 1, 1, 1, 2, 1, true, 4},
        {"cp2 dp2 ep2", 1, 2, 1, 1, 2, 1, true, 4},
    };
    for (size_t m = 0; m < MOE_ARRAY_LEN(models); m++) {
        for (size_t i = 0; i < MOE_ARRAY_LEN(ls); i++) {
            if (ls[i].world > size) {
                continue;
            }
            for (int rc = 0; rc < (ls[i].world == 1 ? 2 : 1); rc++) {
                struct moe_plan p;
                eng_test_plan(&p, models[m], &ls[i]);
                if (rc) {
                    p.options.recompute = MOE_RECOMPUTE_SELECTIVE;
                    p.options.recompute_modules = MOE_RC_LAYERNORM | MOE_RC_CORE_ATTN |
                                                  (p.model.is_mla ? MOE_RC_MLA_UP_PROJ : 0u);
                }
                char what[96];
                (void)snprintf(what, sizeof(what), "%s %s%s", models[m], ls[i].name,
                               rc ? " recompute" : "");
                same_as_cpu(what, &p, ls[i].world, false);
            }
        }
    }
}

static void test_four_rank_layouts(void **state)
{
    (void)state;
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 4) {
        printf("# skipped: needs 4 ranks (mpirun -n 4)\n");
        skip();
    }
    const struct eng_test_layout ls[] = {
        {"tp2 sp x ep2 (folded), dp2", 2, 1, 1, 1, 2, 1, true, 4},
        {"ep4 etp1, dp4", 1, 1, 1, 1, 4, 1, false, 4},
        {"etp2 ep2", 1, 1, 1, 1, 2, 2, false, 4},
        {"pp2 vpp2 ep2", 1, 1, 2, 2, 2, 1, false, 4},
        {"cp2 dp2 ep2", 1, 2, 1, 1, 2, 1, true, 4},
    };
    for (size_t i = 0; i < MOE_ARRAY_LEN(ls); i++) {
        struct moe_plan p;
        eng_test_plan(&p, "tiny-moe", &ls[i]);
        same_as_cpu(ls[i].name, &p, 4, false);
    }
    /* EP4 with the all-to-all overlap: non-blocking exchanges of the halves' counts and rows. */
    struct moe_plan p;
    eng_test_plan(&p, "tiny-moe", &ls[1]);
    p.options.overlap_moe_ep_comm = true;
    same_as_cpu("ep4 with the all-to-all overlap", &p, 4, false);
}

/* ---- Single-rank checks (every rank runs its own copy on MPI_COMM_SELF) --------------------- */

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

static void test_nan_named_through_deferred_checks(void **state)
{
    (void)state;
    const struct eng_test_layout one = {"1 rank", 1, 1, 1, 1, 1, 1, false, 1};
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-moe", &one);
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 1);
    o.is_device_emulated = true;
    moe_comm_t *w = NULL;
    moe_eng_t *e = make(&plan, &o, &w);
    assert_string_equal(moe_eng_backend_name(e), "cpu+mpi (emulated device)");
    poison(e, "layer2.expert_fc2", 3, NAN);
    struct moe_eng_step_result r;
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_eng_train_step(e, &r, &diag), MOE_ERR_RUNTIME);
    assert_non_null(strstr(diag.message, "step 1"));
    assert_non_null(strstr(diag.message, "layer 2, layer2.expert_fc2"));
    moe_eng_destroy(e);
    moe_comm_destroy(w);
    e = make(&plan, &o, &w);
    poison(e, "output", 5, INFINITY);
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_eng_train_step(e, &r, &diag), MOE_ERR_RUNTIME);
    assert_non_null(strstr(diag.message, "loss head, output"));
    moe_eng_destroy(e);
    moe_comm_destroy(w);
}

/* A checkpoint written from the emulated device resumes bit for bit, with the optimizer's state in
 * device memory and offloaded to the host (--optimizer-cpu-offload). */
static void checkpoint_resume(bool opt_offload)
{
    const struct eng_test_layout one = {"1 rank", 1, 1, 1, 1, 1, 1, false, 1};
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-dsv3", &one);
    plan.options.use_distributed_optimizer = true;
    plan.options.optimizer_cpu_offload = opt_offload;
    plan.options.precision_aware_optimizer = opt_offload;
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 4);
    double straight[4], resumed[4];
    assert_int_equal(eng_test_losses(MPI_COMM_SELF, &plan, &o, straight), MOE_OK);
    o.is_device_emulated = true;
    char dir[128];
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    (void)snprintf(dir, sizeof(dir), "/tmp/moefold-ckpt-emu-%ld-%d", (long)getpid(), rank);
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
    moe_eng_destroy(e);
    moe_comm_destroy(w);
    o.load_dir = dir;
    e = make(&plan, &o, &w);
    for (int i = 2; i < 4; i++) {
        assert_int_equal(moe_eng_train_step(e, &r, &diag), MOE_OK);
        resumed[i] = r.loss;
    }
    moe_eng_destroy(e);
    moe_comm_destroy(w);
    assert_memory_equal(resumed, straight, sizeof(straight));
    char cmd[256];
    (void)snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_checkpoint_and_refusals(void **state)
{
    (void)state;
    checkpoint_resume(false);
    checkpoint_resume(true);
    const struct eng_test_layout one = {"1 rank", 1, 1, 1, 1, 1, 1, false, 1};
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-dsv3", &one);
    plan.options.use_distributed_optimizer = true;
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 4);
    o.is_device_emulated = true;
    moe_comm_t *w = NULL;
    moe_eng_t *e = NULL;
    struct moe_diag diag;
    /* The hierarchical dispatcher keeps its routing bookkeeping on the host: on the device it is
     * not refused but runs the flat all-to-all (run.json's plan_differences says so; one rank
     * here, EP1, has nothing to dispatch either way). */
    o.has_dispatcher_override = true;
    o.is_hierarchical = true;
    assert_int_equal(moe_comm_mpi_create(MPI_COMM_SELF, "world", &w), MOE_OK);
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_eng_create(&plan, &o, w, &e, &diag), MOE_OK);
    moe_eng_destroy(e);
    moe_comm_destroy(w);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank != 0 && freopen("/dev/null", "w", stdout) == NULL) {
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_rank_variants),
        cmocka_unit_test(test_architectures),
        cmocka_unit_test(test_four_rank_layouts),
        cmocka_unit_test(test_nan_named_through_deferred_checks),
        cmocka_unit_test(test_checkpoint_and_refusals),
    };
    int fails = cmocka_run_group_tests(tests, NULL, NULL);
    int total = 0;
    MPI_Allreduce(&fails, &total, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return total;
}
