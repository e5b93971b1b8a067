/*
 * `moefold plan`: search every valid layout and option combination for the fastest plan that fits
 * (planner/search.h), print the top-k table, the memory-time Pareto front and the search summary
 * (or one JSON object with --json), explain a ranking (--explain K), and write the chosen plan out:
 * a plan file (--emit), Megatron-LM flags (--megatron-args) and a launch script (--launch-script).
 * Any Megatron layout or option flag on the command line fixes that dimension; --fix, --precision,
 * --dispatcher, --no-offload and --max-memory-gib constrain the rest. `plan --sweep` is `whatif`.
 *
 * With --train-tokens the listed plans are re-ranked by their whole run's --objective (time,
 * GPU-hours, cost, energy; cli/train_eval.h) and those that miss --deadline-days are dropped, so
 * plan 1 (the one --emit writes) is the best run within the deadline; --gpus-max searches the GPU
 * count too (cli/plan_gpus.h) and then plans the best count.
 */
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/plan_gpus.h"
#include "cli/runs.h"
#include "cli/train_cost.h"
#include "cli/train_eval.h"
#include "cli/uncertainty.h"
#include "planner/cliopt.h"
#include "planner/emit.h"
#include "planner/report.h"
#include "planner/search.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB 1073741824.0

static void usage(FILE *out)
{
    fprintf(out, "usage: moefold plan --model NAME|--model-config FILE --cluster NAME --gpus N\n"
                 "                    --global-batch-size B [--seq-length S] [Megatron flags]\n"
                 "                    [search and output options]\n\n");
    moe_plan_cli_help(out);
    moe_train_flags_help(out, true);
    fprintf(out,
            "  --gpus-max N            search the GPU count too: multiples of --gpus-step from\n"
            "                          --gpus-min up to N (instead of --gpus; needs\n"
            "                          --train-tokens); the best count under the objective and\n"
            "                          deadline is planned in full\n"
            "  --gpus-min M            smallest count (default: --gpus-step)\n"
            "  --gpus-step S           step between counts (default: the GPUs per node)\n\n");
    fprintf(
        out,
        "output:\n"
        "  --top K                 layouts in the table (default 10)\n"
        "  --pareto-window X       Pareto front up to X times the fastest step (default 1.5;\n"
        "                          0 = no front)\n"
        "  --explain K             why plan K beats the next ones (per-phase deltas)\n"
        "  --emit FILE             write plan K=1 as a plan file (moefold-train --plan)\n"
        "  --megatron-args         print plan 1's Megatron-LM flags\n"
        "  --launch-script FILE    write a launch script for plan 1 (mpirun / torchrun / srun)\n"
        "  --compare-to 'FLAGS'    your own configuration as Megatron-LM flags: where it ranks,\n"
        "                          how far it is from plan 1, and whether that gap is larger\n"
        "                          than moefold's error band\n"
        "  --json                  one JSON object on stdout\n"
        "  --sweep ...             the same as `moefold whatif ...`\n\n");
    moe_cli_print_common_help(out);
}

struct plan_flags {
    struct moe_plan_cli_opts search; /* shared with whatif */
    int top_k;
    double pareto_window;
    int explain;
    const char *emit;
    bool megatron_args;
    const char *launch;
    const char *compare_to;            /* --compare-to 'Megatron flags' */
    struct moe_train_flags train;      /* --train-tokens and the run flags */
    int gpus_min, gpus_step, gpus_max; /* --gpus-min/step/max (0: not given) */
};

static int plan_flag(void *ctx, int argc, char **argv, int i, struct moe_diag *diag)
{
    struct plan_flags *f = ctx;
    int used = moe_plan_cli_flag(&f->search, argc, argv, i, diag);
    if (used != 0) {
        return used;
    }
    if ((used = moe_train_flag(&f->train, argc, argv, i, diag)) != 0) {
        return used;
    }
    const char *v = NULL;
    const char *gnames[3] = {"--gpus-max", "--gpus-min", "--gpus-step"};
    int *gdst[3] = {&f->gpus_max, &f->gpus_min, &f->gpus_step};
    for (int k = 0; k < 3; k++) {
        if ((used = moe_plan_cli_value(argc, argv, i, gnames[k], &v, diag)) != 0) {
            return used < 0 || !moe_plan_cli_int(gnames[k], v, 1, 1 << 24, gdst[k], diag) ? -1
                                                                                          : used;
        }
    }
    if ((used = moe_plan_cli_value(argc, argv, i, "--top", &v, diag)) != 0) {
        return used < 0 || !moe_plan_cli_int("--top", v, 1, 1000, &f->top_k, diag) ? -1 : used;
    }
    if ((used = moe_plan_cli_value(argc, argv, i, "--pareto-window", &v, diag)) != 0) {
        if (used < 0 ||
            !moe_plan_cli_double("--pareto-window", v, 0.0, 100.0, &f->pareto_window, diag)) {
            return -1;
        }
        if (f->pareto_window > 0.0 && f->pareto_window < 1.0) {
            moe_diag_source(diag, "--pareto-window");
            (void)moe_diag_set(diag, MOE_ERR_INVALID, "--pareto-window %g: give 0 or >= 1",
                               f->pareto_window);
            return -1;
        }
        return used;
    }
    if ((used = moe_plan_cli_value(argc, argv, i, "--explain", &v, diag)) != 0) {
        return used < 0 || !moe_plan_cli_int("--explain", v, 1, 1000, &f->explain, diag) ? -1
                                                                                         : used;
    }
    if ((used = moe_plan_cli_value(argc, argv, i, "--emit", &v, diag)) != 0) {
        f->emit = v;
        return used;
    }
    if ((used = moe_plan_cli_value(argc, argv, i, "--launch-script", &v, diag)) != 0) {
        f->launch = v;
        return used;
    }
    if ((used = moe_plan_cli_value(argc, argv, i, "--compare-to", &v, diag)) != 0) {
        f->compare_to = v;
        return used;
    }
    if (strcmp(argv[i], "--megatron-args") == 0) {
        f->megatron_args = true;
        return 1;
    }
    return 0;
}

/* The user's configuration (--compare-to) predicted, and where it stands among the plans. */
struct compared {
    struct moe_plan_candidate c;
    int rank;   /* among the top plans; 0: slower than all of them */
    double gap; /* plan 1's advantage: its step / this step - 1 (< 0 when plan 1 is faster) */
    bool beyond_band;
};

/* Predict the user's configuration: before the search, so that bad flags fail at once. */
static enum moe_status compare_to(const struct moe_cli_problem *p,
                                  const char *flags,
                                  struct compared *out,
                                  struct moe_diag *diag)
{
    memset(out, 0, sizeof(*out));
    char line[4096];
    if (strlen(flags) >= sizeof(line)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "--compare-to: longer than %zu characters",
                            sizeof(line) - 1);
    }
    (void)snprintf(line, sizeof(line), "%s", flags);
    const char *words[512];
    int nw = 0;
    moe_diag_source(diag, "--compare-to");
    MOE_TRY(moe_megatron_split_line(line, words, 512, &nw, diag));
    struct moe_cli_problem *q = malloc(sizeof(*q));
    if (q == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory");
    }
    *q = *p;
    /* A configuration of its own: Megatron's defaults, then its flags; the batch, sequence and
     * expert-load settings stay those of the search. */
    moe_layout_init(&q->lay);
    q->lay.gbs = p->lay.gbs;
    q->lay.seq_length = p->lay.seq_length;
    struct moe_options keep = p->opt;
    moe_options_init(&q->opt);
    struct moe_megatron_result mres;
    enum moe_status st = moe_megatron_parse_args(nw, words, &q->cfg, &q->lay, &q->opt, &mres, diag);
    if (st == MOE_OK) {
        if (!q->opt.force_load_balancing && !moe_megatron_is_set(&mres, MOE_MF_MOE_IMBALANCE)) {
            q->opt.force_load_balancing = keep.force_load_balancing;
            q->opt.moe_imbalance = keep.moe_imbalance;
        }
        st = moe_cli_resolve(q, diag);
    }
    struct moe_load_stats load;
    bool used = false;
    if (st == MOE_OK) {
        st = moe_cli_load_stats(q, &load, &used, diag);
    }
    if (st == MOE_OK) {
        st = moe_cli_run_predict(q, used ? &load : NULL, &out->c.sim, diag);
    }
    if (st == MOE_OK) {
        out->c.lay = q->lay;
        out->c.opt = q->opt;
        out->c.pred = out->c.sim;
        out->c.has_sim = true;
        out->c.fits = out->c.sim.fits;
    }
    free(q);
    return st;
}

/* Where the user's configuration stands among the plans found. */
static void place(const struct moe_plan_result *res, double band, struct compared *out)
{
    double t = out->c.sim.step_time_s;
    for (int i = 0; i < res->num_top && out->rank == 0; i++) {
        const struct moe_plan_candidate *c = &res->top[i];
        if (t <= (c->has_sim ? c->sim.step_time_s : c->pred.step_time_s)) {
            out->rank = i + 1;
        }
    }
    double best = res->num_top > 0 ? (res->top[0].has_sim ? res->top[0].sim.step_time_s
                                                          : res->top[0].pred.step_time_s)
                                   : t;
    out->gap = best / t - 1.0;
    out->beyond_band = band > 0.0 && log(t / best) > band;
}

static void print_compared(const struct compared *cp, int num_top, double band)
{
    const struct moe_prediction *pr = &cp->c.sim;
    char lay[256];
    moe_cli_layout_str(&cp->c.lay, lay, sizeof(lay));
    printf("\n# your configuration (--compare-to): %s\n", lay);
    printf("#   step %.3f s, %.0f tokens/s/GPU, %.1f GiB%s\n", pr->step_time_s,
           pr->tokens_per_s_per_gpu, pr->mem.total / GIB, pr->fits ? "" : " (DOES NOT FIT)");
    if (cp->rank > 0) {
        printf("#   ranks %d among the %d plans listed\n", cp->rank, num_top);
    } else {
        printf("#   slower than all %d plans listed\n", num_top);
    }
    double slower = 1.0 / (1.0 + cp->gap) - 1.0; /* this step / plan 1's - 1 */
    if (cp->gap >= 0.0) {
        printf("#   it is as fast as plan 1 or faster\n");
    } else if (band <= 0.0) {
        printf("#   it takes %.1f%% longer than plan 1; no error band (the cluster profile has no "
               "measured runs)\n",
               100.0 * slower);
    } else {
        printf("#   it takes %.1f%% longer than plan 1: %s moefold's %.1f%% band for two plans "
               "(%s)\n",
               100.0 * slower, cp->beyond_band ? "more than" : "within", 100.0 * (exp(band) - 1.0),
               cp->beyond_band ? "a real gain, as far as the measured runs tell"
                               : "a tie: moefold cannot tell them apart");
    }
}

static cJSON *compared_json(const struct compared *cp, double band)
{
    cJSON *o = moe_plan_candidate_json(&cp->c);
    if (o == NULL) {
        return NULL;
    }
    if (cp->rank > 0) {
        cJSON_AddNumberToObject(o, "rank", cp->rank);
    } else {
        cJSON_AddNullToObject(o, "rank");
    }
    cJSON_AddNumberToObject(o, "gap_to_best", cp->gap);
    cJSON_AddNumberToObject(o, "tie_band", band > 0.0 ? exp(band) - 1.0 : 0.0);
    cJSON_AddBoolToObject(o, "beyond_band", cp->beyond_band);
    return o;
}

/* The search request of problem p; *lc / *scratch set up for --moe-imbalance auto. */
static enum moe_status build_request(const struct moe_cli_problem *p,
                                     const struct moe_plan_cli_opts *o,
                                     struct moe_plan_request *req,
                                     struct moe_plan_load_cache **lc,
                                     struct moe_cli_problem **scratch,
                                     double *margin,
                                     struct moe_diag *diag)
{
    if (!p->has_model) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "no model: give --model NAME (see `moefold models`), --model-config "
                            "FILE, or Megatron model-shape flags");
    }
    if (!p->has_cluster) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "no cluster: give --cluster NAME (see `moefold clusters`)");
    }
    return moe_cli_plan_request(p, o, req, lc, scratch, margin, diag);
}

/*
 * Each listed plan's interval, as predict makes it for that layout and options (precision class
 * and EP span pick the runs); *ivs (freed by the caller) stays NULL when the profile has no runs.
 */
static enum moe_status plan_intervals(const struct moe_cli_problem *p,
                                      const struct moe_uncertainty *u,
                                      const struct moe_plan_result *res,
                                      struct moe_plan_trust *t,
                                      double (**ivs)[2],
                                      struct moe_diag *diag)
{
    if (res->num_top == 0 || u->num_runs == 0) {
        return MOE_OK;
    }
    double(*iv)[2] = calloc((size_t)res->num_top, sizeof(*iv));
    struct moe_cli_problem *q = malloc(sizeof(*q));
    struct moe_interval *one = malloc(sizeof(*one));
    if (iv == NULL || q == NULL || one == NULL) {
        free(iv);
        free(q);
        free(one);
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < res->num_top; i++) {
        const struct moe_plan_candidate *c = &res->top[i];
        *q = *p;
        q->lay = c->lay;
        q->opt = c->opt;
        double step = c->has_sim ? c->sim.step_time_s : c->pred.step_time_s;
        moe_unc_step(u, moe_run_precision(q), moe_run_ep_span(q), NULL, step, MOE_UNC_LEVEL, one);
        if (!one->ok) { /* every plan rests on the same runs: none has an interval */
            free(iv);
            iv = NULL;
            break;
        }
        iv[i][0] = one->lo;
        iv[i][1] = one->hi;
        if (i == 0) {
            (void)snprintf(t->interval_basis, sizeof(t->interval_basis), "%s", one->basis);
        }
    }
    free(q);
    free(one);
    *ivs = iv;
    t->step_interval = (const double(*)[2])iv;
    t->num_intervals = iv != NULL ? res->num_top : 0;
    t->interval_level = MOE_UNC_LEVEL;
    return MOE_OK;
}

/* The band within which plans tie and each plan's interval, from the cluster profile's measured
 * errors. */
static enum moe_status tie_band(const struct moe_cli_problem *p,
                                const struct moe_plan_result *res,
                                struct moe_plan_trust *t,
                                double (**ivs)[2],
                                struct moe_diag *diag)
{
    struct moe_uncertainty *u = calloc(1, sizeof(*u));
    if (u == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory");
    }
    enum moe_status st = moe_unc_load(p->cluster_name, u, diag);
    if (st == MOE_OK) {
        st = plan_intervals(p, u, res, t, ivs, diag);
    }
    int pairs = 0;
    t->tie_band = st == MOE_OK ? moe_unc_tie_band(u, MOE_UNC_LEVEL, &pairs) : 0.0;
    if (t->tie_band <= 0.0) {
        (void)snprintf(t->basis, sizeof(t->basis),
                       "no tie band: the cluster profile holds no measured runs (moefold fit)");
    } else if (pairs > 0) {
        (void)snprintf(t->basis, sizeof(t->basis),
                       "%.0f%% band of the difference of two plans' errors, from %d pairs of "
                       "measured runs of one model on one cluster",
                       100.0 * MOE_UNC_LEVEL, pairs);
    } else {
        (void)snprintf(t->basis, sizeof(t->basis),
                       "%.0f%% band from the leave-one-out errors of %d runs, taken as "
                       "independent (no pairs of runs of one model on one cluster)",
                       100.0 * MOE_UNC_LEVEL, u->num_runs);
    }
    free(u);
    return st;
}

/* The plan's prediction as predict prints it, in a problem made of the plan. */
static enum moe_status emit_plan(const struct moe_cli_problem *p,
                                 const struct moe_plan_candidate *c,
                                 const char *path,
                                 struct moe_diag *diag)
{
    struct moe_cli_problem *q = malloc(sizeof(*q));
    if (q == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory writing %s", path);
    }
    *q = *p;
    q->lay = c->lay;
    q->opt = c->opt;
    enum moe_status st = moe_cli_emit_plan(q, c->has_sim ? &c->sim : &c->pred, path, diag);
    free(q);
    return st;
}

static enum moe_status write_outputs(const struct moe_cli_problem *p,
                                     const struct plan_flags *f,
                                     const struct moe_plan_result *res,
                                     char **megatron,
                                     struct moe_diag *diag)
{
    *megatron = NULL;
    if (res->num_top == 0) {
        if (f->emit != NULL || f->launch != NULL || f->megatron_args) {
            return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                                "no plan fits: nothing to write for --emit, --megatron-args or "
                                "--launch-script");
        }
        return MOE_OK;
    }
    const struct moe_plan_candidate *best = &res->top[0];
    if (f->megatron_args) {
        MOE_TRY(moe_plan_megatron_args(&p->cfg, &best->lay, &best->opt, 0u, megatron, diag));
    }
    if (f->emit != NULL) {
        MOE_TRY(emit_plan(p, best, f->emit, diag));
    }
    if (f->launch != NULL) {
        const struct moe_prediction *pr = best->has_sim ? &best->sim : &best->pred;
        struct moe_plan_launch l = {.cfg = &p->cfg,
                                    .cl = &p->cl,
                                    .lay = &best->lay,
                                    .opt = &best->opt,
                                    .plan_path = f->emit,
                                    .step_time_s = pr->step_time_s,
                                    .tokens_per_s_per_gpu = pr->tokens_per_s_per_gpu,
                                    .memory_gib = pr->mem.total / GIB};
        MOE_TRY(moe_plan_write_launch_script(f->launch, &l, diag));
    }
    return MOE_OK;
}

/* The whole-run side of a plan: each listed plan's run (--train-tokens), the GPU sweep. */
struct plan_run {
    const struct moe_train_flags *flags; /* NULL: no --train-tokens */
    const struct moe_cluster_costs *costs;
    struct moe_train_eval *evals; /* [num], in res->top's order */
    int num;
    struct moe_train_eval missed; /* the fastest plan's run when every plan missed the deadline */
    bool deadline_missed;
    int num_skipped;   /* listed plans that cannot run the batch ramp */
    char skipped[512]; /* the first one's reason */
    bool has_sweep;
    struct moe_plan_gpus sweep; /* --gpus-max */
};

static void plan_run_fini(struct plan_run *r)
{
    for (int i = 0; i < r->num; i++) {
        moe_cli_train_eval_fini(&r->evals[i]);
    }
    free(r->evals);
    moe_cli_train_eval_fini(&r->missed);
    moe_cli_plan_gpus_free(&r->sweep);
    memset(r, 0, sizeof(*r));
}

/* One line per listed plan: its run, by the objective's order. */
static void print_runs(const struct plan_run *r, const struct moe_plan_result *res)
{
    const struct moe_train_flags *f = r->flags;
    char tok[32];
    moe_train_tokens_str(f->train_tokens, tok, sizeof(tok));
    printf("\n# whole run of %s tokens per plan, ranked by %s", tok,
           moe_train_objective_name(f->objective));
    if (f->deadline_days > 0.0) {
        printf(", within %.4g days", f->deadline_days);
    }
    printf("\n%5s %9s %15s %11s %10s %12s %10s %10s\n", "rank", "days", "80%_days", "GPU_hours",
           "MWh", "cost_USD", "steps", "ramp_days");
    for (int i = 0; i < r->num && i < res->num_top; i++) {
        const struct moe_train_eval *e = &r->evals[i];
        const struct moe_train_totals *t = &e->totals;
        char iv[40] = "-";
        char mwh[24] = "-";
        char cost[24] = "-";
        if (t->has_interval) {
            (void)snprintf(iv, sizeof(iv), "%.1f-%.1f", t->days.lo, t->days.hi);
        }
        if (t->has_energy) {
            (void)snprintf(mwh, sizeof(mwh), "%.0f", t->energy_mwh.value);
        }
        if (t->has_cost) {
            (void)snprintf(cost, sizeof(cost), "%.4g", t->cost_usd.value);
        }
        printf("%5d %9.2f %15s %11.4g %10s %12s %10lld %10.2f\n", i + 1, t->days.value, iv,
               t->gpu_hours.value, mwh, cost, e->sched.steps, e->ramp_s / 86400.0);
    }
    if (r->num_skipped > 0) {
        printf("# %d listed plan%s cannot run the batch ramp and %s dropped (%s)\n", r->num_skipped,
               r->num_skipped == 1 ? "" : "s", r->num_skipped == 1 ? "was" : "were", r->skipped);
    }
    if (r->num > 0) {
        struct moe_train_report rep;
        moe_cli_train_report(&r->evals[0], f, r->costs, &rep);
        rep.label = "plan 1";
        moe_train_print(stdout, &rep);
    }
}

static int print_json(const struct moe_plan_request *req,
                      const struct moe_plan_result *res,
                      int explain,
                      const char *megatron,
                      const struct moe_plan_trust *t,
                      const struct compared *cp,
                      const struct plan_run *run)
{
    cJSON *o = moe_plan_result_json_trusted(req, res, explain, t);
    if (o != NULL && megatron != NULL) {
        cJSON_AddStringToObject(o, "megatron_args", megatron);
    }
    if (o != NULL && cp != NULL) {
        cJSON_AddItemToObject(o, "compare_to", compared_json(cp, t->tie_band));
    }
    if (o != NULL && run->flags != NULL) {
        cJSON *top = cJSON_GetObjectItemCaseSensitive(o, "top");
        int i = 0;
        cJSON *c = NULL;
        cJSON_ArrayForEach(c, top)
        {
            if (i < run->num) {
                struct moe_train_report rep;
                moe_cli_train_report(&run->evals[i], run->flags, run->costs, &rep);
                cJSON_AddItemToObject(c, "run", moe_train_json(&rep));
            }
            i++;
        }
        cJSON_AddStringToObject(o, "objective", moe_train_objective_name(run->flags->objective));
        cJSON_AddNumberToObject(o, "ramp_unrunnable_plans", run->num_skipped);
        if (run->deadline_missed) {
            struct moe_train_report rep;
            moe_cli_train_report(&run->missed, run->flags, run->costs, &rep);
            cJSON_AddItemToObject(o, "deadline_missed", moe_train_json(&rep));
        }
    }
    if (o != NULL && run->has_sweep) {
        cJSON_AddItemToObject(o, "gpus_sweep", moe_cli_plan_gpus_json(&run->sweep, run->flags));
    }
    char *s = o != NULL ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (s == NULL) {
        fprintf(stderr, "moefold plan: out of memory\n");
        return 1;
    }
    puts(s);
    free(s);
    return 0;
}

/* --gpus-max --json when no count qualifies: the sweep and the reason, no plan. */
static void print_sweep_json(const struct plan_run *run, const char *error)
{
    cJSON *o = cJSON_CreateObject();
    if (o != NULL) {
        cJSON_AddStringToObject(o, "format", "moefold-plan-search");
        cJSON_AddNumberToObject(o, "version", 1);
        cJSON_AddStringToObject(o, "error", error);
        cJSON_AddItemToObject(o, "gpus_sweep", moe_cli_plan_gpus_json(&run->sweep, run->flags));
    }
    char *s = o != NULL ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (s != NULL) {
        puts(s);
    }
    free(s);
}

/*
 * Before the search: the run flags' consistency, the cluster's costs for the objective, and with
 * --gpus-max the GPU-count sweep, which sets p->num_gpus to the best count (MOE_ERR_INFEASIBLE
 * when no count qualifies: the sweep is still printed).
 */
static enum moe_status prepare_run(struct moe_cli_problem *p,
                                   const struct plan_flags *f,
                                   struct moe_cluster_costs *costs,
                                   struct plan_run *run,
                                   struct moe_diag *diag)
{
    memset(costs, 0, sizeof(*costs));
    MOE_TRY(moe_train_flags_check(&f->train, true, diag));
    if (f->gpus_max == 0 && (f->gpus_min > 0 || f->gpus_step > 0)) {
        moe_diag_source(diag, f->gpus_min > 0 ? "--gpus-min" : "--gpus-step");
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s sets the range of --gpus-max: give it too",
                            f->gpus_min > 0 ? "--gpus-min" : "--gpus-step");
    }
    if (!f->train.has_tokens) {
        if (f->gpus_max > 0) {
            moe_diag_source(diag, "--gpus-max");
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "--gpus-max compares GPU counts by a whole run: give "
                                "--train-tokens N");
        }
        return MOE_OK;
    }
    if (!p->has_cluster) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "no cluster: give --cluster NAME (see `moefold clusters`)");
    }
    MOE_TRY(moe_cluster_costs_load(p->cluster_name, costs, diag));
    MOE_TRY(moe_train_check_objective(&f->train, costs, p->cl.name, diag));
    run->flags = &f->train;
    run->costs = costs;
    if (f->gpus_max == 0) {
        return MOE_OK;
    }
    if (p->num_gpus > 0) {
        moe_diag_source(diag, "--gpus-max");
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "give either --gpus N (one count) or --gpus-max N (search the count)");
    }
    if (!p->has_model) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "no model: give --model NAME (see `moefold models`), --model-config "
                            "FILE, or Megatron model-shape flags");
    }
    int step = f->gpus_step > 0 ? f->gpus_step : p->cl.gpus_per_node;
    int lo = f->gpus_min > 0 ? f->gpus_min : step;
    MOE_TRY(moe_cli_plan_gpus(p, &f->search, &f->train, costs, lo, step, f->gpus_max, &run->sweep,
                              diag));
    run->has_sweep = true;
    if (run->sweep.best < 0) {
        const struct moe_plan_gpus *g = &run->sweep;
        if (g->fastest < 0) {
            return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                                "no plan fits at any GPU count from %d to %d", lo, f->gpus_max);
        }
        const struct moe_train_totals *t = &g->points[g->fastest].totals;
        char iv[64] = "";
        if (t->has_interval) {
            (void)snprintf(iv, sizeof(iv), " (80%% interval %.1f - %.1f)", t->days.lo, t->days.hi);
        }
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "no GPU count up to %d finishes within %.4g days: the fastest run "
                            "(%d GPUs) needs %.1f days%s, %.1f days (%.0f%%) over; raise "
                            "--gpus-max or the deadline",
                            f->gpus_max, f->train.deadline_days, g->points[g->fastest].num_gpus,
                            t->days.value, iv, t->days.value - f->train.deadline_days,
                            100.0 * (t->days.value - f->train.deadline_days) /
                                f->train.deadline_days);
    }
    p->num_gpus = run->sweep.points[run->sweep.best].num_gpus;
    return MOE_OK;
}

/* After the search: every listed plan's run, ranked by the objective, filtered by the deadline. */
static enum moe_status rank_runs(const struct moe_cli_problem *p,
                                 const struct plan_flags *f,
                                 struct moe_plan_result *res,
                                 struct plan_run *run,
                                 struct moe_plan_trust *trust,
                                 struct moe_diag *diag)
{
    if (run->flags == NULL || res->num_top == 0) {
        return MOE_OK;
    }
    run->evals = calloc((size_t)res->num_top, sizeof(*run->evals));
    if (run->evals == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory");
    }
    MOE_TRY(moe_cli_train_rank(p, &f->train, run->costs, res, run->evals, &run->num, &run->missed,
                               &run->num_skipped, run->skipped, sizeof(run->skipped), diag));
    run->deadline_missed = res->num_top == 0;
    char tok[32];
    moe_train_tokens_str(f->train.train_tokens, tok, sizeof(tok));
    int n = snprintf(trust->ranking, sizeof(trust->ranking),
                     "plans re-ranked by the %s of a whole run of %s tokens",
                     f->train.objective == MOE_TRAIN_OBJ_TIME
                         ? "wall-clock days"
                         : moe_train_objective_name(f->train.objective),
                     tok);
    if (n > 0 && (size_t)n < sizeof(trust->ranking) && f->train.deadline_days > 0.0) {
        n += snprintf(trust->ranking + n, sizeof(trust->ranking) - (size_t)n,
                      "; plans over %.4g days dropped", f->train.deadline_days);
    }
    if (n > 0 && (size_t)n < sizeof(trust->ranking) && run->num_skipped > 0) {
        (void)snprintf(trust->ranking + n, sizeof(trust->ranking) - (size_t)n,
                       "; %d plan%s dropped: cannot run the batch ramp", run->num_skipped,
                       run->num_skipped == 1 ? "" : "s");
    }
    return MOE_OK;
}

int moe_cli_plan(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--sweep") == 0) {
            return moe_cli_whatif(argc, argv); /* whatif skips --sweep */
        }
    }
    struct plan_flags f;
    memset(&f, 0, sizeof(f));
    moe_plan_cli_opts_init(&f.search);
    moe_train_flags_init(&f.train);
    f.top_k = 10;
    f.pareto_window = 1.5;
    struct moe_cli_problem *p = calloc(1, sizeof(*p));
    struct moe_plan_request *req = calloc(1, sizeof(*req));
    struct moe_plan_load_cache *lc = NULL;
    struct moe_cli_problem *scratch = NULL;
    struct moe_plan_result res;
    memset(&res, 0, sizeof(res));
    struct moe_diag diag = {0};
    char *megatron = NULL;
    double(*intervals)[2] = NULL; /* each listed plan's step-time interval */
    struct plan_run run;
    memset(&run, 0, sizeof(run));
    struct moe_cluster_costs costs;
    int rc = 1;
    if (p == NULL || req == NULL) {
        fprintf(stderr, "moefold plan: out of memory\n");
        goto out_free;
    }
    if (moe_cli_parse_problem(argc, argv, plan_flag, &f, p, stderr, &diag) != MOE_OK) {
        moe_cli_error("plan", &diag);
        rc = 2;
        goto out_free;
    }
    if (f.search.help) {
        usage(stdout);
        rc = 0;
        goto out_free;
    }
    enum moe_status st = prepare_run(p, &f, &costs, &run, &diag);
    if (st != MOE_OK) {
        if (run.has_sweep && !p->json) {
            moe_cli_plan_gpus_print(stdout, &run.sweep, &f.train);
        } else if (run.has_sweep) {
            print_sweep_json(&run, diag.message);
        }
        moe_cli_error("plan", &diag);
        rc = st == MOE_ERR_INFEASIBLE ? 1 : 2;
        goto out_free;
    }
    struct moe_plan_trust trust;
    memset(&trust, 0, sizeof(trust));
    if (build_request(p, &f.search, req, &lc, &scratch, &trust.memory_margin, &diag) != MOE_OK) {
        moe_cli_error("plan", &diag);
        goto out_free;
    }
    /* A whole run ranks at least the plans --gpus-max compared, so a fast plan that cannot run
     * the batch ramp leaves others to rank; the list is cut back to --top after ranking. */
    req->top_k = run.flags != NULL && f.top_k < MOE_PLAN_GPUS_TOP ? MOE_PLAN_GPUS_TOP : f.top_k;
    req->pareto_window = f.pareto_window;
    struct compared cp;
    if (f.compare_to != NULL && compare_to(p, f.compare_to, &cp, &diag) != MOE_OK) {
        fprintf(stderr, "moefold plan: --compare-to: %s\n", diag.message);
        rc = 2;
        goto out_free;
    }
    struct moe_plan_progress prog;
    moe_plan_progress_init(&prog, "plan", true);
    req->progress = moe_plan_progress_cb;
    req->progress_ctx = &prog;
    st = moe_plan_search(req, &res, &diag);
    moe_plan_progress_done(&prog);
    if (st != MOE_OK) {
        moe_cli_error("plan", &diag);
        goto out_free;
    }
    if (rank_runs(p, &f, &res, &run, &trust, &diag) != MOE_OK) {
        moe_cli_error("plan", &diag);
        goto out_free;
    }
    if (res.num_top > f.top_k) {
        res.num_top = f.top_k;
    }
    while (run.num > res.num_top && run.num > 0) {
        moe_cli_train_eval_fini(&run.evals[--run.num]);
    }
    if (run.deadline_missed) {
        char msg[512];
        moe_cli_train_missed_str(&f.train, &run.missed, msg, sizeof(msg));
        if (p->json) {
            (void)print_json(req, &res, 0, NULL, &trust, NULL, &run);
        } else if (run.has_sweep) {
            moe_cli_plan_gpus_print(stdout, &run.sweep, &f.train);
        }
        fprintf(stderr,
                "moefold plan: %s on %d GPUs; try more GPUs (--gpus-max) or a later "
                "deadline\n",
                msg, p->num_gpus);
        goto out_free;
    }
    if (write_outputs(p, &f, &res, &megatron, &diag) != MOE_OK) {
        moe_cli_error("plan", &diag);
        goto out_free;
    }
    if (tie_band(p, &res, &trust, &intervals, &diag) != MOE_OK) {
        moe_cli_error("plan", &diag);
        goto out_free;
    }
    if (f.compare_to != NULL) {
        place(&res, trust.tie_band, &cp);
    }
    if (p->json) {
        rc = print_json(req, &res, f.explain, megatron, &trust, f.compare_to ? &cp : NULL, &run);
        if (rc == 0 && res.num_top == 0) {
            rc = 1;
        }
        goto out_free;
    }
    if (run.has_sweep) {
        moe_cli_plan_gpus_print(stdout, &run.sweep, &f.train);
        printf("\n");
    }
    moe_plan_print_trusted(stdout, req, &res, f.explain, &trust);
    if (run.flags != NULL && run.num > 0) {
        print_runs(&run, &res);
    }
    if (f.compare_to != NULL) {
        print_compared(&cp, res.num_top, trust.tie_band);
    }
    if (megatron != NULL) {
        printf("\n# Megatron-LM flags of plan 1:\n%s\n", megatron);
    }
    if (f.emit != NULL && res.num_top > 0) {
        printf("# wrote plan 1 to %s\n", f.emit);
    }
    if (f.launch != NULL && res.num_top > 0) {
        printf("# wrote launch script %s\n", f.launch);
    }
    rc = res.num_top > 0 ? 0 : 1;
out_free:
    plan_run_fini(&run);
    free(intervals);
    free(megatron);
    moe_plan_result_free(&res);
    moe_plan_load_cache_destroy(lc);
    free(scratch);
    free(req);
    free(p);
    return rc;
}
