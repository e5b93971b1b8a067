/*
 * `moefold compare plan.json run.json`: the prediction for a plan next to what `moefold-train`
 * measured running it -- per phase and in total (predicted, measured, error), memory per category,
 * and the expert-load imbalance (the busiest EP rank's tokens over the mean) predicted vs observed.
 * The prediction is recomputed from the plan on the plan's cluster (or --cluster), so it reflects
 * the current cost model and cluster file. --json prints one object; --plot FILE.svg|png draws the
 * per-phase bars with gnuplot. --observed-load prices the plan at the expert load the run observed
 * (its busiest EP rank over the mean, averaged over MoE layers) instead of the plan's, which
 * separates routing (a property of the data and router) from the system model. Memory is priced at
 * the expert-row sizing the run's buffers used (run.json "expert_rows_factor": the engine sizes
 * expert buffers for EP x the mean rows unless --moe-buffer-factor says otherwise), since that, not
 * the routing of the step, is what it allocates; the measured buffers are listed by part. The
 * experts' GEMMs are priced at the share of local experts that held rows in the run's grouped
 * calls (run.json "expert_active_fraction"): a router that sends a micro-batch to few experts runs
 * fewer, larger GEMMs, a fact of the routing like the load, not of the system.
 */
#include "cli/commands.h"
#include "cli/common.h"
#include "model/compute.h"
#include "model/imbalance.h"
#include "model/memory.h"
#include "topologies/cluster_file.h"
#include "topologies/plan_file.h"
#include "topologies/run_file.h"
#include "topologies/trace_file.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GIB         1073741824.0
#define MAX_REPEATS 8

struct compare_opts {
    const char *plan_path;
    const char *run_path;
    const char *repeat_paths[MAX_REPEATS]; /* --repeat: other runs of the same plan */
    int num_repeats;
    const char *cluster;
    const char *plot;
    const char *trace;
    int gantt; /* columns of the ASCII Gantt chart; 0 = none */
    bool json;
    bool observed_load;
    bool host_speed;
};

static int usage(FILE *out)
{
    fprintf(out,
            "usage: moefold compare PLAN.json RUN.json [--cluster NAME|FILE] [--json]\n"
            "                       [--plot FILE.svg|FILE.png] [--observed-load] [--host-speed]\n"
            "                       [--trace OUT.json] [--repeat RUN.json ...]\n"
            "       moefold compare --megatron-log FILE [--cluster NAME|FILE] [--json] ...\n"
            "                       (a Megatron-LM training log; --megatron-log --help)\n"
            "  --cluster        predict on this cluster instead of the one the plan names\n"
            "  --json           one JSON object on stdout\n"
            "  --plot           bar chart of predicted vs measured time per phase (gnuplot)\n"
            "  --observed-load  price the expert load the run observed, not the plan's\n"
            "  --host-speed     price a CPU run at the speed its host had while it ran: the\n"
            "                   profile's compute and memory rates scaled by the run's probe\n"
            "                   GEMM (run.json host_probe, the median of its probes) over the\n"
            "                   profile's price of it,\n"
            "                   and the ranks' speed spread the probes saw\n"
            "  --trace OUT      the predicted step and the run's traced step (moefold-train\n"
            "                   --trace) in one Chrome trace, each aligned at its step's\n"
            "                   start (open it in ui.perfetto.dev or chrome://tracing)\n"
            "  --gantt COLS     the same two timelines as an ASCII Gantt chart, COLS\n"
            "                   characters wide (one row per predicted stage and measured\n"
            "                   rank; a letter per phase, capital while waiting)\n"
            "  --repeat RUN     another run of the same plan (up to 8, the option once per\n"
            "                   file): the table adds each phase's range over all the runs\n"
            "                   and whether the prediction lies inside it, i.e. whether an\n"
            "                   error is within the host's run-to-run spread\n");
    return out == stdout ? 0 : 2;
}

static const char *const phase_keys[MOE_NUM_PHASES] = {
    "compute", "expert_gemm", "dispatch",  "combine",   "tp_comm",      "cp_comm",
    "pp_comm", "dp_comm",     "pp_bubble", "optimizer", "host_overhead"};

static void phase_values(const struct moe_phase_times *t, double v[MOE_NUM_PHASES])
{
    const double tmp[MOE_NUM_PHASES] = {t->compute,   t->expert_gemm, t->dispatch,     t->combine,
                                        t->tp_comm,   t->cp_comm,     t->pp_comm,      t->dp_comm,
                                        t->pp_bubble, t->optimizer,   t->host_overhead};
    memcpy(v, tmp, sizeof(tmp));
}

/* Error in percent of the measured value; NAN when the measured value is 0. */
static double err_pct(double pred, double meas)
{
    return meas > 0.0 ? 100.0 * (pred / meas - 1.0) : (double)NAN;
}

/* Each phase's and the step's least and greatest measured value over the compared run and its
 * --repeat runs (n runs in all; n == 1: no repeats). */
struct run_range {
    int n;
    double lo[MOE_NUM_PHASES], hi[MOE_NUM_PHASES];
    double step_lo, step_hi;
};

static void range_add(struct run_range *r, const struct moe_run *run)
{
    double v[MOE_NUM_PHASES];
    phase_values(&run->time, v);
    for (int i = 0; i < MOE_NUM_PHASES; i++) {
        r->lo[i] = r->n == 0 ? v[i] : fmin(r->lo[i], v[i]);
        r->hi[i] = r->n == 0 ? v[i] : fmax(r->hi[i], v[i]);
    }
    r->step_lo = r->n == 0 ? run->step_time_s : fmin(r->step_lo, run->step_time_s);
    r->step_hi = r->n == 0 ? run->step_time_s : fmax(r->step_hi, run->step_time_s);
    r->n++;
}

static bool in_range(double x, double lo, double hi)
{
    return x >= lo && x <= hi;
}

/* Add each --repeat run to r; a run of another model or rank count is refused by name. */
static enum moe_status add_repeats(const struct compare_opts *o,
                                   const struct moe_run *main_run,
                                   struct run_range *r,
                                   struct moe_diag *diag)
{
    struct moe_run *rep = malloc(sizeof(*rep));
    if (rep == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory");
    }
    enum moe_status st = MOE_OK;
    for (int i = 0; i < o->num_repeats && st == MOE_OK; i++) {
        memset(rep, 0, sizeof(*rep));
        st = moe_run_read(o->repeat_paths[i], rep, diag);
        if (st == MOE_OK &&
            (strcmp(rep->model, main_run->model) != 0 || rep->num_ranks != main_run->num_ranks)) {
            st = moe_diag_set(diag, MOE_ERR_INVALID,
                              "--repeat %s: a run of %s on %d ranks, not of the compared run's "
                              "%s on %d ranks",
                              o->repeat_paths[i], rep->model, rep->num_ranks, main_run->model,
                              main_run->num_ranks);
        }
        if (st == MOE_OK) {
            range_add(r, rep);
        }
        moe_run_fini(rep);
    }
    free(rep);
    return st;
}

/* The run's expert load as the model's imbalance factor means it: the busiest EP rank over the
 * mean, per exchange (run files before expert_load_rank_max_over_mean: the busiest expert). */
static double observed_load(const struct moe_run *run)
{
    const double *v =
        run->num_rank_load_layers > 0 ? run->load_rank_max_over_mean : run->load_max_over_mean;
    int n = run->num_rank_load_layers > 0 ? run->num_rank_load_layers : run->num_moe_layers;
    if (n == 0) {
        return (double)NAN;
    }
    double s = 0.0;
    for (int i = 0; i < n; i++) {
        s += v[i];
    }
    return s / n;
}

static int
plot_phases(const char *path, const double pred[MOE_NUM_PHASES], const double meas[MOE_NUM_PHASES])
{
    const char *ext = strrchr(path, '.');
    const char *term = NULL;
    if (ext != NULL && strcmp(ext, ".svg") == 0) {
        term = "svg size 900,480";
    } else if (ext != NULL && strcmp(ext, ".png") == 0) {
        term = "pngcairo size 900,480";
    } else {
        fprintf(stderr, "moefold compare: --plot %s: use a .svg or .png file name\n", path);
        return 1;
    }
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        fprintf(stderr, "moefold compare: --plot needs gnuplot (Debian package gnuplot-nox)\n");
        return 1;
    }
    char data[] = "/tmp/moefold_compare_XXXXXX";
    int fd = mkstemp(data);
    if (fd < 0) {
        fprintf(stderr, "moefold compare: cannot create a temporary file for gnuplot\n");
        return 1;
    }
    FILE *f = fdopen(fd, "w");
    if (f == NULL) {
        close(fd);
        unlink(data);
        return 1;
    }
    for (int i = 0; i < MOE_NUM_PHASES; i++) {
        fprintf(f, "%s %.9g %.9g\n", phase_keys[i], pred[i], meas[i]);
    }
    fclose(f);
    FILE *g = popen("gnuplot", "w");
    if (g == NULL) {
        unlink(data);
        return 1;
    }
    fprintf(g,
            "set terminal %s\nset output '%s'\nset style data histograms\n"
            "set style histogram clustered gap 1\nset style fill solid 0.8 border -1\n"
            "set xtics rotate by -30\nset ylabel 'seconds per step'\nset key top right\n"
            "set title 'moefold: predicted vs measured time per phase'\n"
            "plot '%s' using 2:xtic(1) title 'predicted', '' using 3 title 'measured'\n",
            term, path, data);
    int rc = pclose(g);
    unlink(data);
    if (rc != 0) {
        fprintf(stderr, "moefold compare: gnuplot failed writing %s\n", path);
        return 1;
    }
    return 0;
}

/* The prediction's phases and wait shares for the pipeline stage the run describes. */
struct stage_view {
    int stage;                /* pipeline stage */
    double t[MOE_NUM_PHASES]; /* seconds per phase */
    double w[MOE_NUM_PHASES]; /* their wait shares */
};

static void print_table(const struct moe_cli_problem *p,
                        const struct moe_prediction *pr,
                        const struct stage_view *sv,
                        const struct moe_run *run,
                        const struct run_range *rr,
                        double mem_load)
{
    bool ranged = rr->n > 1;
    const double *pv = sv->t;
    double mv[MOE_NUM_PHASES];
    double mw[MOE_NUM_PHASES];
    phase_values(&run->time, mv);
    phase_values(&run->wait, mw);
    char lays[256];
    moe_cli_layout_str(&p->lay, lays, sizeof(lays));
    printf("# plan: %s on %d x %s; run: %d ranks, %s backend, %d measured steps\n", p->cfg.name,
           p->lay.num_gpus, p->cl.name, run->num_ranks, run->backend, run->measured_steps);
    printf("# layout: %s\n", lays);
    if (p->lay.pp > 1) {
        printf("# phases of pipeline stage %d (the run's critical stage; mean over its ranks)\n",
               sv->stage);
    }
    printf("%-14s %12s %12s %9s %11s %11s", "phase", "predicted_s", "measured_s", "error",
           "pred_wait_s", run->has_wait ? "meas_wait_s" : "meas_wait");
    if (ranged) {
        printf("  %-21s %s", "runs_min-max_s", "pred_in");
    }
    printf("\n");
    for (int i = 0; i < MOE_NUM_PHASES; i++) {
        double e = err_pct(pv[i], mv[i]);
        char err[16];
        char mwait[16];
        /* Phases under 1% of the step on both sides carry no meaningful relative error. */
        bool tiny = pv[i] < 0.01 * pr->step_time_s && mv[i] < 0.01 * run->step_time_s;
        if (tiny || isnan(e)) {
            (void)snprintf(err, sizeof(err), "%9s", "-");
        } else {
            (void)snprintf(err, sizeof(err), "%+8.1f%%", e);
        }
        if (run->has_wait) {
            (void)snprintf(mwait, sizeof(mwait), "%11.6f", mw[i]);
        } else {
            (void)snprintf(mwait, sizeof(mwait), "%11s", "-");
        }
        printf("%-14s %12.6f %12.6f %s %11.6f %s", phase_keys[i], pv[i], mv[i], err, sv->w[i],
               mwait);
        if (ranged) {
            printf("  %10.6f-%-10.6f %s", rr->lo[i], rr->hi[i],
                   tiny ? "-" : (in_range(pv[i], rr->lo[i], rr->hi[i]) ? "yes" : "no"));
        }
        printf("\n");
    }
    printf("%-14s %12.6f %12.6f %9s\n", "unattributed", 0.0, run->unattributed_s, "-");
    printf("%-14s %12.6f %12.6f %+8.1f%%", "step", pr->step_time_s, run->step_time_s,
           err_pct(pr->step_time_s, run->step_time_s));
    if (ranged) {
        printf(" %11s %11s  %10.6f-%-10.6f %s", "", "", rr->step_lo, rr->step_hi,
               in_range(pr->step_time_s, rr->step_lo, rr->step_hi) ? "yes" : "no");
    }
    printf("\n");
    if (ranged) {
        printf("(runs_min-max_s: each phase over this run and %d --repeat run(s) of the plan; "
               "pred_in: the prediction lies inside that range)\n",
               rr->n - 1);
    }
    printf("\n%-14s %12s %12s %9s\n", "memory", "predicted_MiB", "measured_MiB", "error");
    const char *mk[] = {"weights", "grads", "optimizer", "activations", "buffers", "total"};
    const double pm[] = {pr->mem.weights,     pr->mem.grads,   pr->mem.optimizer,
                         pr->mem.activations, pr->mem.buffers, pr->mem.total};
    const double mm[] = {run->mem.weights,     run->mem.grads,   run->mem.optimizer,
                         run->mem.activations, run->mem.buffers, run->mem.total};
    for (size_t i = 0; i < sizeof(mk) / sizeof(mk[0]); i++) {
        double e = err_pct(pm[i], mm[i]);
        if (isnan(e)) {
            printf("%-14s %12.3f %12.3f %9s\n", mk[i], pm[i] / 1048576.0, mm[i] / 1048576.0, "-");
        } else {
            printf("%-14s %12.3f %12.3f %+8.1f%%\n", mk[i], pm[i] / 1048576.0, mm[i] / 1048576.0,
                   e);
        }
        if (i == 4 && run->has_buffers_detail) {
            const struct moe_run_buffers_detail *b = &run->buffers_detail;
            const char *bk[] = {"dispatch",      "temporaries", "recompute",
                                "offload_stage", "pipeline",    "other"};
            const double bv[] = {b->dispatch,        b->temporaries, b->recompute_scratch,
                                 b->offload_staging, b->pipeline,    b->other};
            for (size_t k = 0; k < sizeof(bk) / sizeof(bk[0]); k++) {
                if (bv[k] > 0.0) {
                    printf("  %-12s %12s %12.3f\n", bk[k], "", bv[k] / 1048576.0);
                }
            }
        }
    }
    if (mem_load > 0.0) {
        printf("(memory priced at the run's expert-row buffer sizing, %.2f x the mean rows)\n",
               mem_load);
    }
    double obs = observed_load(run);
    if (!isnan(obs)) {
        printf("\nexpert load (busiest EP rank / mean): predicted %.3f, observed %.3f (mean of %d "
               "MoE layers%s)\n",
               pr->load_factor, obs,
               run->num_rank_load_layers > 0 ? run->num_rank_load_layers : run->num_moe_layers,
               run->num_rank_load_layers > 0 ? ", per exchange" : ", busiest expert");
    }
    if (run->expert_active_fraction > 0.0) {
        printf(
            "expert GEMMs: %.1f%% of the local experts held rows in a grouped forward (mean over "
            "the run's calls); priced so (the plan alone prices all of them)\n",
            100.0 * run->expert_active_fraction);
    }
    printf("loss: first step %.4f, last step %.4f\n", run->first_loss, run->final_loss);
    /* One machine-readable line (scripts/validate.sh): step error, total-memory error, and the
     * largest error over the categories holding at least a tenth of the measured total (small
     * categories, such as scratch buffers, carry no meaningful relative error). */
    double worst_mem = 0.0;
    const char *worst_key = "none";
    for (size_t i = 0; i < 5; i++) {
        double e = err_pct(pm[i], mm[i]);
        if (!isnan(e) && mm[i] >= 0.1 * run->mem.total && fabs(e) > fabs(worst_mem)) {
            worst_mem = e;
            worst_key = mk[i];
        }
    }
    printf("summary: step_pred_s %.6f step_meas_s %.6f step_err_pct %+.2f mem_err_pct %+.2f "
           "mem_worst_category %s mem_worst_pct %+.2f\n",
           pr->step_time_s, run->step_time_s, err_pct(pr->step_time_s, run->step_time_s),
           err_pct(pr->mem.total, run->mem.total), worst_key, worst_mem);
    /* And the error of every phase holding at least a tenth of the measured step. */
    printf("phase_errors:");
    for (int i = 0; i < MOE_NUM_PHASES; i++) {
        if (mv[i] >= 0.1 * run->step_time_s) {
            printf(" %s %+.2f", phase_keys[i], err_pct(pv[i], mv[i]));
        }
    }
    printf("\n");
    if (ranged) {
        /* The same phases: 1 when the prediction lies inside the runs' range, else 0. */
        printf("phase_in_runs: runs %d step %d", rr->n,
               in_range(pr->step_time_s, rr->step_lo, rr->step_hi) ? 1 : 0);
        for (int i = 0; i < MOE_NUM_PHASES; i++) {
            if (mv[i] >= 0.1 * run->step_time_s) {
                printf(" %s %d", phase_keys[i], in_range(pv[i], rr->lo[i], rr->hi[i]) ? 1 : 0);
            }
        }
        printf("\n");
    }
}

/* --host-speed: the host's speed while the run ran over the speed the profile prices. */
struct host_speed {
    double probe_us;       /* the run's probe GEMM, median time (run.json host_probe) */
    double priced_us;      /* the profile's time of the same GEMM: the calibration bench's row
                            * (host.probe_gemm_us), else its price (fp32 operands, as the bench) */
    bool is_bench_row;     /* priced_us is the bench's measurement */
    double factor;         /* priced / measured: > 1 when the host ran faster than profiled */
    double spread;         /* the ranks' speed spread at the probes (< 0: not recorded) */
    double spread_profile; /* the profile's host.rank_spread */
};

/* Scale the profile's compute and memory rates (GEMM peaks, memory bandwidth, the host
 * optimizer's and offload copies' rates) and its per-step fixed time by the run's probe, and take
 * the ranks' speed spread the probes saw for host.rank_spread (the waits at the collectives);
 * communication keeps the bench's figures. The reference is the calibration bench's own time of
 * the probe's GEMM where the profile records it (host.probe_gemm_us): the fitted curve's price of
 * that one shape is off by its residual (2.7% in a make validate run of 2026-12-03, which moved
 * every rate by as much). MOE_ERR_INVALID when the run has no probe. */
static enum moe_status apply_host_speed(struct moe_cluster *cl,
                                        const struct moe_run *run,
                                        const char *run_path,
                                        struct host_speed *hs,
                                        struct moe_diag *diag)
{
    if (!(run->probe_us > 0.0)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--host-speed: %s records no host probe (a GPU run, one made with "
                            "--no-host-probe, or an older run file)",
                            run_path);
    }
    const int *d = run->probe_mnk;
    hs->probe_us = run->probe_us;
    double dim = cl->host.probe_gemm_dim;
    hs->is_bench_row = cl->host.probe_gemm_us > 0.0 && d[0] == dim && d[1] == dim && d[2] == dim;
    hs->priced_us = hs->is_bench_row ? cl->host.probe_gemm_us
                                     : 1e6 * moe_compute_gemm_s(&cl->gpu, MOE_MATH_BF16, 1.0, d[0],
                                                                d[1], d[2], 4.0);
    hs->factor = hs->priced_us / hs->probe_us;
    double f = hs->factor;
    for (int i = 0; i < MOE_NUM_MATH; i++) {
        cl->gpu.peak_tflops[i] *= f;
    }
    cl->gpu.hbm_tbps *= f;
    cl->host.optimizer_gbps *= f;
    cl->host.link_gbps *= f;
    cl->overheads.step_fixed_ms /= f;
    hs->spread_profile = cl->host.rank_spread;
    hs->spread = run->probe_rank_spread;
    if (hs->spread >= 0.0) {
        cl->host.rank_spread = hs->spread;
    }
    return MOE_OK;
}

/* What ran otherwise than the plan said (run.json plan_differences), one line each; domain_was:
 * the cluster's NVLink domain when the run emulated smaller nodes (priced with those), else 0. */
static void print_differences(const struct moe_run *run, int domain_was)
{
    int n = run->plan_differences != NULL ? cJSON_GetArraySize(run->plan_differences) : 0;
    if (n == 0 && domain_was == 0) {
        return;
    }
    printf("\nthe run differs from the plan (the prediction above prices what ran):\n");
    const cJSON *it = NULL;
    cJSON_ArrayForEach(it, run->plan_differences)
    {
        printf("  %s\n", it->valuestring);
    }
    if (domain_was > 0) {
        printf("  nodes: the run emulated nodes of %d rank(s) (--ranks-per-node); priced with "
               "that NVLink domain, not the cluster's %d\n",
               run->ranks_per_node, domain_was);
    }
}

/* One kernel op of a phase in run.json "kernel_s". */
struct kop {
    const char *name;
    double s, calls;
};

static int kop_cmp(const void *a, const void *b)
{
    double x = ((const struct kop *)a)->s;
    double y = ((const struct kop *)b)->s;
    return (x < y) - (x > y);
}

/*
 * The run's kernel profile (moefold-train --profile-kernels): per phase, its ops by time per step
 * with calls and time per call, ops under 1% of the phase folded into one line, and the phase's
 * time between its ops (loops, copies outside the kernel table, communication calls).
 */
/* The model's attention core per step on pipeline stage `stage`: every decoder layer's forward and
 * backward core per micro-batch, and its forward again where recompute re-runs it (full, or
 * selective with core_attn), times the micro-batches. MTP layers count as the last decoder
 * layer's kind (model/cost.c prices them so), on the stage that holds them: the measured side sums
 * every attention op of the stage, theirs included. */
static double predicted_attn_core_s(const struct moe_cli_problem *p, int stage)
{
    const struct moe_layout *lay = &p->lay;
    int n[2][2] = {{0, 0}, {0, 0}};
    for (int c = 0; c < lay->num_chunks; c++) {
        if (c % lay->pp != stage) {
            continue;
        }
        struct moe_chunk_kinds k;
        moe_mem_chunk_kinds(&p->cfg, &lay->chunks[c], &k);
        for (int i = 0; i < 4; i++) {
            n[i / 2][i % 2] += k.n[i / 2][i % 2];
        }
        if (lay->chunks[c].num_mtp > 0 && p->cfg.num_layers > 0) {
            uint8_t last = p->cfg.layer_flags[p->cfg.num_layers - 1];
            n[(last & MOE_LAYER_MOE) != 0][(last & MOE_LAYER_WINDOWED) != 0] +=
                lay->chunks[c].num_mtp;
        }
    }
    bool rc =
        p->opt.recompute == MOE_RECOMPUTE_FULL || (p->opt.recompute == MOE_RECOMPUTE_SELECTIVE &&
                                                   (p->opt.recompute_modules & MOE_RC_CORE_ATTN));
    double per_mb = 0.0;
    for (int i = 0; i < 4; i++) {
        if (n[i / 2][i % 2] == 0) {
            continue;
        }
        struct moe_layer_kind kind = {i / 2 == 1, i % 2 == 1};
        struct moe_layer_cost lc;
        moe_compute_layer(&p->cfg, &p->cl, lay, &p->opt, kind, 1.0, 0.0, &lc);
        per_mb += n[i / 2][i % 2] * (lc.attn_core_fwd * (rc ? 2.0 : 1.0) + lc.attn_core_bwd);
    }
    return per_mb * lay->num_microbatches;
}

static void print_kernels(const struct moe_cli_problem *p, const struct moe_run *run)
{
    if (run->kernel_s == NULL) {
        return;
    }
    /* The attention core side by side: the model prices it apart (model/compute.c). */
    const char *attn_ops[] = {"attention_fwd", "attention_bwd", "attention_window_sink_fwd",
                              "attention_window_sink_bwd"};
    double attn = 0.0;
    const cJSON *phase = NULL;
    cJSON_ArrayForEach(phase, run->kernel_s)
    {
        for (size_t i = 0; i < sizeof(attn_ops) / sizeof(attn_ops[0]); i++) {
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(phase, attn_ops[i]), "s");
            attn += cJSON_IsNumber(s) ? s->valuedouble : 0.0;
        }
    }
    int stage =
        run->critical_stage >= 0 && run->critical_stage < p->lay.pp ? run->critical_stage : 0;
    double pa = predicted_attn_core_s(p, stage);
    printf("\nattention core per step (stage %d): predicted %.3f ms, measured %.3f ms (%+.1f%%)\n",
           stage, pa * 1e3, attn * 1e3, attn > 0.0 ? 100.0 * (pa - attn) / attn : 0.0);
    double mv[MOE_NUM_PHASES];
    phase_values(&run->time, mv);
    printf("\nkernels (measured per step, critical stage's ranks; --profile-kernels)\n");
    printf("%-14s %-26s %10s %8s %9s %7s\n", "phase", "op", "ms", "calls", "us/call", "share");
    for (int i = 0; i < MOE_NUM_PHASES; i++) {
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(run->kernel_s, phase_keys[i]);
        int n = ph != NULL ? cJSON_GetArraySize(ph) : 0;
        struct kop *ops = n > 0 ? calloc((size_t)n, sizeof(*ops)) : NULL;
        if (ops == NULL) {
            continue;
        }
        int k = 0;
        const cJSON *it = NULL;
        cJSON_ArrayForEach(it, ph)
        {
            const cJSON *sv = cJSON_GetObjectItemCaseSensitive(it, "s");
            const cJSON *cv = cJSON_GetObjectItemCaseSensitive(it, "calls");
            if (cJSON_IsNumber(sv) && cJSON_IsNumber(cv) && k < n) {
                ops[k++] = (struct kop){it->string, sv->valuedouble, cv->valuedouble};
            }
        }
        qsort(ops, (size_t)k, sizeof(*ops), kop_cmp);
        double tot = 0.0, small = 0.0, small_calls = 0.0;
        double share = mv[i] > 0.0 ? 100.0 / mv[i] : 0.0;
        for (int j = 0; j < k; j++) {
            tot += ops[j].s;
            if (ops[j].s < 0.01 * mv[i]) {
                small += ops[j].s;
                small_calls += ops[j].calls;
                continue;
            }
            printf("%-14s %-26s %10.3f %8.1f %9.1f %6.1f%%\n", phase_keys[i], ops[j].name,
                   ops[j].s * 1e3, ops[j].calls,
                   ops[j].calls > 0 ? ops[j].s / ops[j].calls * 1e6 : 0, ops[j].s * share);
        }
        if (small > 0.0) {
            printf("%-14s %-26s %10.3f %8.1f %9s %6.1f%%\n", phase_keys[i], "(ops under 1% each)",
                   small * 1e3, small_calls, "", small * share);
        }
        printf("%-14s %-26s %10.3f %8s %9s %6.1f%%\n", phase_keys[i], "(between ops)",
               (mv[i] - tot) * 1e3, "", "", (mv[i] - tot) * share);
        free(ops);
    }
}

/* The prediction's phases of the run's critical stage (the model's own when the run names none):
 * the stage's row of the simulated timeline, wait shares from its wait events. */
static enum moe_status stage_view_of(const struct moe_cli_problem *p,
                                     const struct moe_load_stats *load,
                                     const struct moe_run *run,
                                     struct stage_view *sv,
                                     struct moe_tl_event **events,
                                     size_t *num,
                                     struct moe_diag *diag)
{
    double *rows = NULL;
    struct moe_prediction pred;
    MOE_TRY(moe_cli_run_timeline(p, load, events, num, &rows, &pred, diag));
    int st = run->critical_stage >= 0 && run->critical_stage < p->lay.pp ? run->critical_stage
                                                                         : pred.critical_stage;
    memset(sv, 0, sizeof(*sv));
    sv->stage = st;
    memcpy(sv->t, rows + (size_t)st * MOE_NUM_PHASES, sizeof(sv->t));
    for (size_t i = 0; i < *num; i++) {
        const struct moe_tl_event *e = &(*events)[i];
        if (e->stage == st && e->is_wait) {
            sv->w[e->phase] += e->dur_s;
        }
    }
    free(rows);
    return MOE_OK;
}

/* ---- ASCII Gantt ----------------------------------------------------------------------------- */

/* A phase's letter in the chart (capital: its wait share); slot MOE_NUM_PHASES is unattributed. */
static char gantt_letter(int slot, bool is_wait)
{
    static const char letters[MOE_NUM_PHASES + 1] = {'c', 'e', 'd', 'm', 't', 'x',
                                                     'p', 'g', '.', 'o', 'h', '?'};
    char l = slot >= 0 && slot <= MOE_NUM_PHASES ? letters[slot] : '?';
    return is_wait && l >= 'a' && l <= 'z' ? (char)(l - 'a' + 'A') : l;
}

/* One chart row: the letter covering most of each of cols cells of [0, width_s). */
struct gantt_row {
    double *cover; /* [cols * (2 * MOE_NUM_PHASES + 2)] seconds per cell and letter index */
    int cols;
    double width_s;
};

static void gantt_add(struct gantt_row *g, double t0, double t1, int slot, bool is_wait)
{
    int nl = 2 * MOE_NUM_PHASES + 2;
    int k = (slot >= 0 && slot <= MOE_NUM_PHASES ? slot : MOE_NUM_PHASES) * 2 + (is_wait ? 1 : 0);
    double dt = g->width_s / g->cols;
    for (int c = (int)(t0 / dt); c < g->cols && c * dt < t1; c++) {
        if (c < 0) {
            continue;
        }
        double a = fmax(t0, c * dt);
        double b = fmin(t1, (c + 1) * dt);
        if (b > a) {
            g->cover[(size_t)c * (size_t)nl + (size_t)k] += b - a;
        }
    }
}

static void gantt_print(const struct gantt_row *g, const char *label)
{
    int nl = 2 * MOE_NUM_PHASES + 2;
    printf("%-22s|", label);
    for (int c = 0; c < g->cols; c++) {
        const double *cv = g->cover + (size_t)c * (size_t)nl;
        int best = -1;
        for (int k = 0; k < nl; k++) {
            if (cv[k] > 0.0 && (best < 0 || cv[k] > cv[best])) {
                best = k;
            }
        }
        putchar(best < 0 ? ' ' : gantt_letter(best / 2, (best & 1) != 0));
    }
    printf("|\n");
}

/* The predicted stages and the measured ranks as rows of one chart, each aligned at its stage 0's
 * step start, over the longer of the two steps. */
static enum moe_status print_gantt(int cols,
                                   const struct moe_cli_problem *p,
                                   const struct moe_tl_event *ev,
                                   size_t num,
                                   const struct moe_run *run,
                                   struct moe_diag *diag)
{
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(run->timeline, "ranks");
    if (!cJSON_IsArray(ranks)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--gantt: the run file has no traced step; run moefold-train with "
                            "--trace FILE (it adds \"timeline\" to run.json)");
    }
    double t0 = INFINITY;
    double t1 = -INFINITY;
    for (size_t i = 0; i < num; i++) {
        t0 = ev[i].stage == 0 ? fmin(t0, ev[i].start_s) : t0;
    }
    for (size_t i = 0; i < num; i++) {
        t1 = fmax(t1, ev[i].start_s + ev[i].dur_s - t0);
    }
    const cJSON *rk = NULL;
    cJSON_ArrayForEach(rk, ranks)
    {
        const cJSON *rec = cJSON_GetObjectItemCaseSensitive(rk, "records");
        int n = cJSON_GetArraySize(rec);
        for (int i = 1; i < n; i += MOE_TRACE_RECORD_FIELDS) {
            const cJSON *x = cJSON_GetArrayItem(rec, i);
            t1 = cJSON_IsNumber(x) ? fmax(t1, x->valuedouble) : t1;
        }
    }
    int nl = 2 * MOE_NUM_PHASES + 2;
    struct gantt_row g = {calloc((size_t)cols * (size_t)nl, sizeof(double)), cols, t1};
    if (g.cover == NULL || !(t1 > 0.0)) {
        free(g.cover);
        return moe_diag_set(diag, MOE_ERR_NOMEM, "--gantt: out of memory or an empty timeline");
    }
    printf("\n# predicted vs measured step, %.1f ms wide, %.2f ms per character; c compute, e "
           "expert_gemm,\n# d dispatch, m combine, t tp_comm, x cp_comm, p pp_comm, g dp_comm, . "
           "pp_bubble, o optimizer,\n# h host_overhead, ? unattributed; a capital letter: "
           "waiting for a slower rank\n",
           t1 * 1e3, t1 * 1e3 / cols);
    for (int s = 0; s < p->lay.pp; s++) {
        memset(g.cover, 0, (size_t)cols * (size_t)nl * sizeof(double));
        for (size_t i = 0; i < num; i++) {
            if (ev[i].stage == s) {
                gantt_add(&g, ev[i].start_s - t0, ev[i].start_s + ev[i].dur_s - t0, ev[i].phase,
                          ev[i].is_wait != 0);
            }
        }
        char label[32];
        (void)snprintf(label, sizeof(label), "predicted stage %d", s);
        gantt_print(&g, label);
    }
    cJSON_ArrayForEach(rk, ranks)
    {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(rk, "rank");
        const cJSON *rec = cJSON_GetObjectItemCaseSensitive(rk, "records");
        int n = cJSON_GetArraySize(rec) / MOE_TRACE_RECORD_FIELDS;
        memset(g.cover, 0, (size_t)cols * (size_t)nl * sizeof(double));
        for (int i = 0; i < n; i++) {
            double v[MOE_TRACE_RECORD_FIELDS];
            for (int k = 0; k < MOE_TRACE_RECORD_FIELDS; k++) {
                const cJSON *x = cJSON_GetArrayItem(rec, i * MOE_TRACE_RECORD_FIELDS + k);
                v[k] = cJSON_IsNumber(x) ? x->valuedouble : 0.0;
            }
            gantt_add(&g, v[0], v[1], (int)v[2], v[4] != 0.0);
        }
        char label[32];
        (void)snprintf(label, sizeof(label), "measured rank %d",
                       cJSON_IsNumber(r) ? r->valueint : -1);
        gantt_print(&g, label);
    }
    free(g.cover);
    return MOE_OK;
}

/* --trace: the predicted timeline (processes 0 .. pp-1) and the run's traced step (1000 + rank),
 * each shifted so that its stage 0 starts its step at 0. */
static enum moe_status write_both(const char *path,
                                  const struct moe_cli_problem *p,
                                  const struct moe_tl_event *ev,
                                  size_t num,
                                  const struct moe_run *run,
                                  struct moe_diag *diag)
{
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(run->timeline, "ranks");
    if (!cJSON_IsArray(ranks)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--trace: the run file has no traced step; run moefold-train with "
                            "--trace FILE (it adds \"timeline\" to run.json)");
    }
    double t0 = INFINITY;
    for (size_t i = 0; i < num; i++) {
        if (ev[i].stage == 0) {
            t0 = fmin(t0, ev[i].start_s);
        }
    }
    struct moe_trace_writer w;
    moe_trace_init(&w);
    moe_trace_timeline(&w, ev, num, p->lay.pp, 0, "predicted", isfinite(t0) ? -t0 * 1e6 : 0.0);
    const cJSON *rk = NULL;
    cJSON_ArrayForEach(rk, ranks)
    {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(rk, "rank");
        const cJSON *stg = cJSON_GetObjectItemCaseSensitive(rk, "stage");
        const cJSON *rec = cJSON_GetObjectItemCaseSensitive(rk, "records");
        int n = cJSON_GetArraySize(rec);
        if (!cJSON_IsNumber(r) || !cJSON_IsNumber(stg) || !cJSON_IsArray(rec) ||
            n % MOE_TRACE_RECORD_FIELDS != 0) {
            moe_trace_fini(&w);
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "--trace: the run file's timeline is malformed (a rank without "
                                "rank, stage or records of 5 numbers each)");
        }
        double *buf = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
        if (buf == NULL) {
            moe_trace_fini(&w);
            return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the trace");
        }
        int k = 0;
        const cJSON *x = NULL;
        cJSON_ArrayForEach(x, rec)
        {
            buf[k++] = cJSON_IsNumber(x) ? x->valuedouble : 0.0;
        }
        char name[64];
        (void)snprintf(name, sizeof(name), "measured rank %d (stage %d)", r->valueint,
                       stg->valueint);
        moe_trace_records(&w, 1000 + r->valueint, name, buf, n / MOE_TRACE_RECORD_FIELDS, 0.0);
        free(buf);
    }
    enum moe_status st = moe_trace_write_file(&w, path, diag);
    moe_trace_fini(&w);
    return st;
}

static cJSON *compare_json(const struct moe_prediction *pr,
                           const struct stage_view *sv,
                           const struct moe_run *run,
                           const struct run_range *rr)
{
    cJSON *o = cJSON_CreateObject();
    double mv[MOE_NUM_PHASES];
    double mw[MOE_NUM_PHASES];
    phase_values(&run->time, mv);
    phase_values(&run->wait, mw);
    cJSON_AddNumberToObject(o, "stage", sv->stage);
    cJSON *ph = cJSON_AddObjectToObject(o, "time_s");
    for (int i = 0; i < MOE_NUM_PHASES; i++) {
        cJSON *r = cJSON_AddObjectToObject(ph, phase_keys[i]);
        cJSON_AddNumberToObject(r, "predicted", sv->t[i]);
        cJSON_AddNumberToObject(r, "measured", mv[i]);
        cJSON_AddNumberToObject(r, "predicted_wait", sv->w[i]);
        if (run->has_wait) {
            cJSON_AddNumberToObject(r, "measured_wait", mw[i]);
        }
        if (rr->n > 1) {
            cJSON *mr = cJSON_AddArrayToObject(r, "measured_range");
            cJSON_AddItemToArray(mr, cJSON_CreateNumber(rr->lo[i]));
            cJSON_AddItemToArray(mr, cJSON_CreateNumber(rr->hi[i]));
        }
    }
    cJSON *un = cJSON_AddObjectToObject(ph, "unattributed");
    cJSON_AddNumberToObject(un, "predicted", 0.0);
    cJSON_AddNumberToObject(un, "measured", run->unattributed_s);
    cJSON *st = cJSON_AddObjectToObject(o, "step_time_s");
    cJSON_AddNumberToObject(st, "predicted", pr->step_time_s);
    cJSON_AddNumberToObject(st, "measured", run->step_time_s);
    cJSON_AddNumberToObject(st, "error_pct", err_pct(pr->step_time_s, run->step_time_s));
    if (rr->n > 1) {
        cJSON *mr = cJSON_AddArrayToObject(st, "measured_range");
        cJSON_AddItemToArray(mr, cJSON_CreateNumber(rr->step_lo));
        cJSON_AddItemToArray(mr, cJSON_CreateNumber(rr->step_hi));
        cJSON_AddNumberToObject(o, "runs", rr->n);
    }
    cJSON *mem = cJSON_AddObjectToObject(o, "memory_gib");
    const char *mk[] = {"weights", "grads", "optimizer", "activations", "buffers", "total"};
    const double pm[] = {pr->mem.weights,     pr->mem.grads,   pr->mem.optimizer,
                         pr->mem.activations, pr->mem.buffers, pr->mem.total};
    const double mm[] = {run->mem.weights,     run->mem.grads,   run->mem.optimizer,
                         run->mem.activations, run->mem.buffers, run->mem.total};
    for (size_t i = 0; i < sizeof(mk) / sizeof(mk[0]); i++) {
        cJSON *r = cJSON_AddObjectToObject(mem, mk[i]);
        cJSON_AddNumberToObject(r, "predicted", pm[i] / GIB);
        cJSON_AddNumberToObject(r, "measured", mm[i] / GIB);
    }
    cJSON *load = cJSON_AddObjectToObject(o, "expert_load");
    cJSON_AddNumberToObject(load, "predicted", pr->load_factor);
    double obs = observed_load(run);
    if (!isnan(obs)) {
        cJSON_AddNumberToObject(load, "observed", obs);
    }
    if (run->expert_active_fraction > 0.0) {
        cJSON_AddNumberToObject(load, "active_expert_fraction", run->expert_active_fraction);
    }
    return o;
}

static int parse_args(int argc, char **argv, struct compare_opts *o)
{
    static const struct option longs[] = {
        {"cluster", required_argument, NULL, 'c'}, {"plot", required_argument, NULL, 'p'},
        {"json", no_argument, NULL, 'j'},          {"observed-load", no_argument, NULL, 'o'},
        {"host-speed", no_argument, NULL, 's'},    {"trace", required_argument, NULL, 't'},
        {"gantt", required_argument, NULL, 'g'},   {"repeat", required_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0}};
    memset(o, 0, sizeof(*o));
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "c:p:jost:g:r:h", longs, NULL)) != -1) {
        if (c == 'c') {
            o->cluster = optarg;
        } else if (c == 'p') {
            o->plot = optarg;
        } else if (c == 'j') {
            o->json = true;
        } else if (c == 'o') {
            o->observed_load = true;
        } else if (c == 's') {
            o->host_speed = true;
        } else if (c == 't') {
            o->trace = optarg;
        } else if (c == 'g') {
            char *end = NULL;
            long v = strtol(optarg, &end, 10);
            if (end == optarg || *end != '\0' || v < 20 || v > 1000) {
                fprintf(stderr, "moefold compare: --gantt %s: expected a width of 20 .. 1000\n",
                        optarg);
                return usage(stderr);
            }
            o->gantt = (int)v;
        } else if (c == 'r') {
            if (o->num_repeats == MAX_REPEATS) {
                fprintf(stderr, "moefold compare: --repeat %s: at most %d repeat runs\n", optarg,
                        MAX_REPEATS);
                return 2;
            }
            o->repeat_paths[o->num_repeats++] = optarg;
        } else if (c == 'h') {
            return usage(stdout) - 1; /* -1: printed help */
        } else {
            fprintf(stderr, "moefold compare: unknown or incomplete option '%s'\n",
                    argv[optind - 1]);
            return usage(stderr);
        }
    }
    if (argc - optind != 2) {
        fprintf(stderr, "moefold compare: need a plan file and a run file\n");
        return usage(stderr);
    }
    o->plan_path = argv[optind];
    o->run_path = argv[optind + 1];
    return 0;
}

int moe_cli_compare(int argc, char **argv)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strncmp(argv[i], "--megatron-log", 14) == 0) {
            return moe_cli_compare_megatron_log(argc, argv);
        }
    }
    struct compare_opts o;
    int prc = parse_args(argc, argv, &o);
    if (prc != 0) {
        return prc < 0 ? 0 : prc;
    }
    struct moe_diag diag = {0};
    struct moe_plan *plan = calloc(1, sizeof(*plan));
    struct moe_cli_problem *p = calloc(1, sizeof(*p));
    struct moe_run run;
    memset(&run, 0, sizeof(run));
    struct stage_view sv;
    struct moe_tl_event *events = NULL;
    size_t num_events = 0;
    int rc = 1;
    if (plan == NULL || p == NULL) {
        fprintf(stderr, "moefold compare: out of memory\n");
        goto out_free;
    }
    if (moe_plan_read(o.plan_path, NULL, plan, NULL, &diag) != MOE_OK) {
        moe_cli_error("compare", &diag);
        goto out_free;
    }
    const char *cluster = o.cluster != NULL ? o.cluster : plan->cluster;
    if (moe_cluster_load(cluster, &p->cl, &diag) != MOE_OK) {
        moe_cli_error("compare", &diag);
        goto out_free;
    }
    if (moe_run_read(o.run_path, &run, &diag) != MOE_OK) {
        moe_cli_error("compare", &diag);
        goto out_free;
    }
    struct run_range rr = {0};
    range_add(&rr, &run);
    if (add_repeats(&o, &run, &rr, &diag) != MOE_OK) {
        moe_cli_error("compare", &diag);
        goto out_free;
    }
    p->cfg = plan->model;
    p->lay = plan->layout;
    p->opt = plan->options;
    if (run.ran != NULL) {
        /* Price what ran: the plan's options with the engine's differences (plan_differences). */
        struct moe_options ran;
        if (moe_plan_options_from_json(run.ran, o.run_path, &ran, &diag) != MOE_OK) {
            moe_cli_error("compare", &diag);
            goto out_free;
        }
        p->opt = ran;
    }
    int domain_was = 0;
    if (run.ranks_per_node > 0 && run.ranks_per_node < p->cl.nvlink.domain_gpus) {
        /* Nodes as the run placed them: exchanges between emulated nodes take the scale-out
         * path (the hierarchical dispatcher's cross-node step). */
        domain_was = p->cl.nvlink.domain_gpus;
        p->cl.nvlink.domain_gpus = run.ranks_per_node;
    }
    struct host_speed hs = {0};
    if (o.host_speed && apply_host_speed(&p->cl, &run, o.run_path, &hs, &diag) != MOE_OK) {
        moe_cli_error("compare", &diag);
        goto out_free;
    }
    p->num_gpus = plan->layout.num_gpus;
    p->imbalance_cv = MOE_IMBALANCE_DEFAULT_CV;
    if (o.observed_load) {
        double obs = observed_load(&run);
        if (isnan(obs)) {
            fprintf(stderr,
                    "moefold compare: --observed-load: %s records no expert load (a run "
                    "without expert parallelism)\n",
                    o.run_path);
            goto out_free;
        }
        p->opt.moe_imbalance = obs >= 1.0 ? obs : 1.0;
        p->opt.force_load_balancing = false;
    }
    if (run.expert_active_fraction > 0.0) {
        /* The experts' GEMMs as the router ran them: as many per call as held rows. */
        p->opt.moe_active_expert_frac = run.expert_active_fraction;
    }
    struct moe_load_stats load;
    bool auto_load = false;
    struct moe_prediction pred;
    double mem_load = 0.0; /* expert load memory is priced at; 0: as the time */
    if (moe_cli_load_stats(p, &load, &auto_load, &diag) != MOE_OK ||
        moe_cli_run_predict(p, auto_load ? &load : NULL, &pred, &diag) != MOE_OK) {
        moe_cli_error("compare", &diag);
        goto out_free;
    }
    if (stage_view_of(p, auto_load ? &load : NULL, &run, &sv, &events, &num_events, &diag) !=
        MOE_OK) {
        moe_cli_error("compare", &diag);
        goto out_free;
    }
    if (run.expert_rows_factor > 0.0 && moe_cfg_is_moe(&p->cfg)) {
        /* Memory at the buffers' sizing: the same plan with that load, time kept from above. */
        struct moe_prediction mem_pred;
        p->opt.moe_imbalance = run.expert_rows_factor >= 1.0 ? run.expert_rows_factor : 1.0;
        p->opt.force_load_balancing = false;
        if (moe_cli_run_predict(p, NULL, &mem_pred, &diag) != MOE_OK) {
            moe_cli_error("compare", &diag);
            goto out_free;
        }
        pred.mem = mem_pred.mem;
        mem_load = p->opt.moe_imbalance;
    }
    if (o.json) {
        cJSON *j = compare_json(&pred, &sv, &run, &rr);
        if (j != NULL && o.host_speed) {
            cJSON *h = cJSON_AddObjectToObject(j, "host_speed");
            cJSON_AddNumberToObject(h, "probe_us", hs.probe_us);
            cJSON_AddNumberToObject(h, "priced_us", hs.priced_us);
            cJSON_AddStringToObject(h, "reference", hs.is_bench_row ? "bench" : "price");
            cJSON_AddNumberToObject(h, "factor", hs.factor);
            if (hs.spread >= 0.0) {
                cJSON_AddNumberToObject(h, "rank_spread", hs.spread);
                cJSON_AddNumberToObject(h, "profile_rank_spread", hs.spread_profile);
            }
        }
        char *s = j != NULL ? cJSON_Print(j) : NULL;
        if (s != NULL) {
            puts(s);
            free(s);
        }
        cJSON_Delete(j);
    } else {
        if (o.host_speed) {
            printf("host speed: the run's probe GEMM (%d x %d x %d, as moefold-bench times it) "
                   "took %.0f us (median of its probes), the profile%s %.0f us: compute and "
                   "memory rates "
                   "priced at %.3f x the profile's (--host-speed)\n",
                   run.probe_mnk[0], run.probe_mnk[1], run.probe_mnk[2], hs.probe_us,
                   hs.is_bench_row ? "'s calibration bench measured it at" : " prices it at",
                   hs.priced_us, hs.factor);
            if (hs.spread >= 0.0) {
                printf("ranks' speed spread at the probes (slowest over mean): %.1f%%, priced "
                       "instead of the profile's %.1f%%\n",
                       100.0 * hs.spread, 100.0 * hs.spread_profile);
            }
        }
        print_table(p, &pred, &sv, &run, &rr, mem_load);
        print_differences(&run, domain_was);
        print_kernels(p, &run);
    }
    rc = 0;
    if (o.plot != NULL) {
        double mv[MOE_NUM_PHASES];
        phase_values(&run.time, mv);
        rc = plot_phases(o.plot, sv.t, mv);
    }
    if (rc == 0 && o.gantt > 0 && !o.json &&
        print_gantt(o.gantt, p, events, num_events, &run, &diag) != MOE_OK) {
        moe_cli_error("compare", &diag);
        rc = 1;
    }
    if (rc == 0 && o.trace != NULL) {
        if (write_both(o.trace, p, events, num_events, &run, &diag) != MOE_OK) {
            moe_cli_error("compare", &diag);
            rc = 1;
        } else if (!o.json) {
            printf("wrote %s (predicted: processes 'predicted stage p'; measured: 'measured rank "
                   "r'; open it in ui.perfetto.dev or chrome://tracing)\n",
                   o.trace);
        }
    }
out_free:
    free(events);
    moe_run_fini(&run);
    free(p);
    free(plan);
    return rc;
}
