/*
 * Helpers shared by the engine tests: plans built in code (presets plus a layout), an engine over
 * an MPI communicator, and runs that return their loss curve. Header-only (static inline) so each
 * test binary stays one file; every function returns its result for the caller to assert on.
 */
#ifndef MOE_TESTS_ENGINE_ENG_TEST_H
#define MOE_TESTS_ENGINE_ENG_TEST_H

#include "engine/comm_mpi.h"
#include "engine/engine.h"
#include "topologies/plan_file.h"

#include <mpi.h>
#include <stdio.h>
#include <string.h>

/* A layout in the order people write them. vpp 0 means 1. */
struct eng_test_layout {
    const char *name;
    int tp, cp, pp, vpp, ep, etp;
    bool dist_opt;
    int world; /* ranks: tp*cp*pp*dp */
};

/* Plan for preset `model` with seq 64, mbs 1, gbs 8, the aux loss at 1e-2 and the given layout
 * (num_gpus = world). */
static inline void
eng_test_plan(struct moe_plan *plan, const char *model, const struct eng_test_layout *l)
{
    moe_plan_init(plan);
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    if (moe_cfg_preset(model, &plan->model, &diag) != MOE_OK) {
        fprintf(stderr, "preset %s: %s\n", model, diag.message);
    }
    plan->layout.num_gpus = l->world;
    plan->layout.tp = l->tp;
    plan->layout.cp = l->cp;
    plan->layout.pp = l->pp;
    plan->layout.vpp = l->vpp > 0 ? l->vpp : 1;
    plan->layout.ep = l->ep;
    plan->layout.etp = l->etp;
    plan->layout.sequence_parallel = l->tp > 1;
    plan->layout.mbs = 1;
    plan->layout.gbs = 8;
    plan->layout.seq_length = 64;
    plan->options.use_distributed_optimizer = l->dist_opt;
    /* Switch's load-balancing loss on, as Megatron's MoE examples train: every folding test also
     * checks its counts all-reduce over TP x CP. */
    plan->options.aux_loss_coeff = 1e-2;
}

/* Synthetic-data run options with no progress output. */
static inline void eng_test_opts(struct moe_eng_run_opts *o, int steps)
{
    moe_eng_run_opts_init(o);
    o->num_steps = steps;
    o->data_kind = MOE_ENG_DATA_SYNTHETIC;
    o->log = NULL;
}

/*
 * Train `steps` steps of plan over comm (every member calls); losses[steps] filled on every member.
 * Returns the first failing status (diag printed on stderr by the failing rank).
 */
static inline enum moe_status eng_test_losses(MPI_Comm comm,
                                              const struct moe_plan *plan,
                                              const struct moe_eng_run_opts *opts,
                                              double *losses)
{
    moe_comm_t *world = NULL;
    enum moe_status st = moe_comm_mpi_create(comm, "world", &world);
    if (st != MOE_OK) {
        return st;
    }
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    moe_eng_t *e = NULL;
    st = moe_eng_create(plan, opts, world, &e, &diag);
    for (int i = 0; st == MOE_OK && i < opts->num_steps; i++) {
        struct moe_eng_step_result r;
        st = moe_eng_train_step(e, &r, &diag);
        losses[i] = r.loss;
    }
    if (st != MOE_OK && diag.message[0] != '\0') {
        fprintf(stderr, "engine: %s\n", diag.message);
    }
    moe_eng_destroy(e);
    moe_comm_destroy(world);
    return st;
}

/* Largest relative difference |a-b|/|b| over n values. */
static inline double eng_test_max_rel(const double *a, const double *b, int n)
{
    double worst = 0.0;
    for (int i = 0; i < n; i++) {
        double d = a[i] - b[i];
        d = d < 0 ? -d : d;
        double r = b[i] != 0.0 ? d / (b[i] < 0 ? -b[i] : b[i]) : d;
        worst = r > worst ? r : worst;
    }
    return worst;
}

#endif /* MOE_TESTS_ENGINE_ENG_TEST_H */
