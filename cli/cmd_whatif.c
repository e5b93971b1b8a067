/*
 * `moefold whatif` (also `moefold plan --sweep`): vary one or two things -- GPU count, cluster,
 * sequence length, global batch, precision, a parallel size -- and print the best plan of each
 * point (the planner's full search, top 1) as a table, CSV (--csv) or a gnuplot chart (--plot
 * FILE.svg|FILE.png; gnuplot runs through popen). GPU-count sweeps add strong scaling (same global
 * batch) and weak scaling (global batch grown with the GPUs) efficiency against the first point.
 * --zip pairs the two lists instead of crossing them ("256 GB200 vs 1024 H100"). With
 * --train-tokens every point adds its best plan's whole run: days (with the 80% interval),
 * GPU-hours, energy and cost from the point's cluster file (cli/train_eval.h).
 */
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/train_eval.h"
#include "planner/cliopt.h"
#include "planner/report.h"
#include "planner/search.h"
#include "topologies/cluster_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB        1073741824.0
#define MAX_VALUES 64
#define VALUE_LEN  64

enum dim {
    DIM_GPUS = 0,
    DIM_CLUSTER,
    DIM_SEQ,
    DIM_GBS,
    DIM_PRECISION,
    DIM_TP,
    DIM_CP,
    DIM_PP,
    DIM_VPP,
    DIM_EP,
    DIM_ETP,
    DIM_MBS,
    DIM_COUNT,
};

static const char *const dim_names[DIM_COUNT] = {
    "gpus", "cluster", "seq", "gbs", "precision", "tp", "cp", "pp", "vpp", "ep", "etp", "mbs"};

struct axis {
    enum dim dim;
    int num;
    char values[MAX_VALUES][VALUE_LEN];
};

struct whatif_flags {
    struct moe_plan_cli_opts search;
    struct axis axes[2];
    int num_axes;
    bool zip;
    bool csv;
    const char *plot;
    struct moe_train_flags train; /* --train-tokens and the run flags */
};

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: moefold whatif --model NAME --cluster NAME --gpus N --global-batch-size B\n"
        "                      --vary DIM=V1,V2,... [--vary DIM=...] [--zip]\n"
        "                      [--csv] [--plot FILE.svg|FILE.png] [search flags]\n\n"
        "  --vary DIM=VALUES       gpus, cluster, seq, gbs, precision, tp, cp, pp, vpp, ep, etp,\n"
        "                          mbs; VALUES a comma list, or A..B for numbers (doubling)\n"
        "  --zip                   pair the two lists (point i takes value i of each)\n"
        "  --csv                   CSV on stdout instead of the table\n"
        "  --plot FILE             tokens/s/GPU and step time per point (gnuplot; svg or png)\n"
        "  GPU sweeps report strong scaling (same global batch) and weak scaling (global batch\n"
        "  grown with the GPU count) against the first point.\n\n");
    moe_plan_cli_help(out);
    moe_train_flags_help(out, false);
    fprintf(out, "\n");
    moe_cli_print_common_help(out);
}

static bool dim_numeric(enum dim d)
{
    return d != DIM_CLUSTER && d != DIM_PRECISION;
}

/* DIM=V1,V2 or DIM=A..B (doubling from A to B). */
static bool parse_axis(const char *s, struct axis *ax, struct moe_diag *diag)
{
    const char *eq = strchr(s, '=');
    int d = -1;
    for (int i = 0; eq != NULL && i < DIM_COUNT; i++) {
        if ((size_t)(eq - s) == strlen(dim_names[i]) &&
            strncmp(s, dim_names[i], (size_t)(eq - s)) == 0) {
            d = i;
        }
    }
    moe_diag_source(diag, "--vary");
    if (d < 0) {
        (void)moe_diag_set(diag, MOE_ERR_INVALID,
                           "--vary '%s': use DIM=VALUES with DIM one of gpus cluster seq gbs "
                           "precision tp cp pp vpp ep etp mbs",
                           s);
        return false;
    }
    ax->dim = (enum dim)d;
    ax->num = 0;
    const char *v = eq + 1;
    const char *dots = strstr(v, "..");
    if (dots != NULL && dim_numeric(ax->dim)) {
        long a = strtol(v, NULL, 10);
        long b = strtol(dots + 2, NULL, 10);
        if (a < 1 || b < a) {
            (void)moe_diag_set(diag, MOE_ERR_INVALID, "--vary %s: range A..B needs 1 <= A <= B", s);
            return false;
        }
        for (long x = a; x <= b && ax->num < MAX_VALUES; x *= 2) {
            (void)snprintf(ax->values[ax->num++], VALUE_LEN, "%ld", x);
        }
        return true;
    }
    char buf[MAX_VALUES * VALUE_LEN];
    (void)snprintf(buf, sizeof(buf), "%s", v);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok != NULL && ax->num < MAX_VALUES;
         tok = strtok_r(NULL, ",", &save)) {
        (void)snprintf(ax->values[ax->num++], VALUE_LEN, "%s", tok);
    }
    if (ax->num == 0) {
        (void)moe_diag_set(diag, MOE_ERR_INVALID, "--vary %s: no values", s);
        return false;
    }
    return true;
}

static int whatif_flag(void *ctx, int argc, char **argv, int i, struct moe_diag *diag)
{
    struct whatif_flags *f = ctx;
    int used = moe_plan_cli_flag(&f->search, argc, argv, i, diag);
    if (used != 0) {
        return used;
    }
    if ((used = moe_train_flag(&f->train, argc, argv, i, diag)) != 0) {
        return used;
    }
    const char *v = NULL;
    if ((used = moe_plan_cli_value(argc, argv, i, "--vary", &v, diag)) != 0 ||
        (used = moe_plan_cli_value(argc, argv, i, "--sweep", &v, diag)) != 0) {
        if (used < 0) {
            return -1;
        }
        if (f->num_axes >= 2) {
            (void)moe_diag_set(diag, MOE_ERR_INVALID, "at most two --vary dimensions");
            return -1;
        }
        return parse_axis(v, &f->axes[f->num_axes++], diag) ? used : -1;
    }
    if ((used = moe_plan_cli_value(argc, argv, i, "--plot", &v, diag)) != 0) {
        f->plot = v;
        return used;
    }
    if (strcmp(argv[i], "--zip") == 0) {
        f->zip = true;
        return 1;
    }
    if (strcmp(argv[i], "--csv") == 0) {
        f->csv = true;
        return 1;
    }
    return 0;
}

/* One point of the sweep and its best plan. */
struct point {
    const char *value[2];
    bool ok;   /* searched */
    bool fits; /* a plan fits */
    struct moe_plan_candidate best;
    double excess_gib; /* when nothing fits */
    bool has_weak;
    double weak_step_s;
    double weak_gbs;
    double strong_eff, weak_eff;
    bool has_run; /* --train-tokens: the best plan's whole run */
    struct moe_train_totals run;
};

/* Apply value v of dimension d to a problem copy and the search options. */
static enum moe_status apply_value(enum dim d,
                                   const char *v,
                                   struct moe_cli_problem *q,
                                   struct moe_plan_cli_opts *o,
                                   char *fix,
                                   size_t fix_len,
                                   struct moe_diag *diag)
{
    int n = 0;
    if (dim_numeric(d) && !moe_plan_cli_int(dim_names[d], v, 1, 1 << 30, &n, diag)) {
        return MOE_ERR_INVALID;
    }
    switch (d) {
    case DIM_GPUS:
        q->num_gpus = n;
        return MOE_OK;
    case DIM_CLUSTER:
        (void)snprintf(q->cluster_name, sizeof(q->cluster_name), "%s", v);
        q->has_cluster = true;
        return moe_cluster_load(v, &q->cl, diag);
    case DIM_SEQ:
        q->lay.seq_length = n;
        return MOE_OK;
    case DIM_GBS:
        q->lay.gbs = n;
        return MOE_OK;
    case DIM_PRECISION: {
        enum moe_recipe r;
        MOE_TRY(moe_recipe_parse(v, &r, diag));
        o->recipes = 1u << r;
        return MOE_OK;
    }
    default: {
        size_t used = strlen(fix);
        (void)snprintf(fix + used, fix_len - used, "%s%s=%d", used > 0 ? "," : "", dim_names[d], n);
        o->fix = fix;
        return MOE_OK;
    }
    }
}

/* The best plan of problem q under options o (top 1, no Pareto front). */
static enum moe_status search_point(struct moe_cli_problem *q,
                                    const struct moe_plan_cli_opts *o,
                                    struct point *pt,
                                    bool weak,
                                    struct moe_diag *diag)
{
    struct moe_plan_request *req = calloc(1, sizeof(*req));
    struct moe_cli_problem *scratch = NULL;
    struct moe_plan_load_cache *lc = NULL;
    struct moe_plan_result res;
    memset(&res, 0, sizeof(res));
    enum moe_status st = MOE_ERR_NOMEM;
    if (req == NULL) {
        goto out_free;
    }
    st = moe_cli_plan_request(q, o, req, &lc, &scratch, NULL, diag);
    if (st != MOE_OK) {
        goto out_free;
    }
    req->top_k = 1;
    req->pareto_window = 0.0;
    st = moe_plan_search(req, &res, diag);
    if (st != MOE_OK) {
        goto out_free;
    }
    if (weak) {
        pt->has_weak = res.num_top > 0;
        pt->weak_step_s = res.num_top > 0 ? moe_plan_step_time(&res.top[0]) : 0.0;
    } else {
        pt->ok = true;
        pt->fits = res.num_top > 0;
        if (pt->fits) {
            pt->best = res.top[0];
        } else if (res.has_closest) {
            pt->best = res.closest;
            pt->excess_gib = res.closest_excess_bytes / GIB;
        }
    }
out_free:
    moe_plan_result_free(&res);
    moe_plan_load_cache_destroy(lc);
    free(scratch);
    free(req);
    return st;
}

/* The whole run of the point's best plan, with the point's cluster's power and price. */
static enum moe_status point_run(struct moe_cli_problem *q,
                                 const struct moe_train_flags *f,
                                 struct point *pt,
                                 struct moe_diag *diag)
{
    struct moe_cluster_costs costs;
    MOE_TRY(moe_cluster_costs_load(q->cluster_name, &costs, diag));
    struct moe_uncertainty *u = calloc(1, sizeof(*u));
    if (u == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory");
    }
    enum moe_status st = moe_unc_load(q->cluster_name, u, diag);
    q->lay = pt->best.lay;
    q->opt = pt->best.opt;
    struct moe_train_eval e;
    if (st == MOE_OK) {
        st = moe_cli_train_eval(q, moe_plan_step_time(&pt->best), f, &costs, u, &e, diag);
    }
    if (st == MOE_OK) {
        pt->has_run = true;
        pt->run = e.totals;
        moe_cli_train_eval_fini(&e);
    }
    free(u);
    return st;
}

static int num_points(const struct whatif_flags *f)
{
    if (f->num_axes == 1) {
        return f->axes[0].num;
    }
    if (f->zip) {
        return f->axes[0].num < f->axes[1].num ? f->axes[0].num : f->axes[1].num;
    }
    return f->axes[0].num * f->axes[1].num;
}

static void point_values(const struct whatif_flags *f, int i, struct point *pt)
{
    if (f->num_axes == 1) {
        pt->value[0] = f->axes[0].values[i];
        pt->value[1] = NULL;
    } else if (f->zip) {
        pt->value[0] = f->axes[0].values[i];
        pt->value[1] = f->axes[1].values[i];
    } else {
        pt->value[0] = f->axes[0].values[i / f->axes[1].num];
        pt->value[1] = f->axes[1].values[i % f->axes[1].num];
    }
}

static enum moe_status run_point(const struct moe_cli_problem *p,
                                 const struct whatif_flags *f,
                                 struct point *pt,
                                 const struct point *first,
                                 struct moe_diag *diag)
{
    struct moe_cli_problem *q = malloc(sizeof(*q));
    if (q == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory");
    }
    *q = *p;
    struct moe_plan_cli_opts o = f->search;
    if (!q->has_model) {
        free(q);
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "no model: give --model NAME or --model-config FILE");
    }
    char fix[1024];
    (void)snprintf(fix, sizeof(fix), "%s", f->search.fix != NULL ? f->search.fix : "");
    enum moe_status st = MOE_OK;
    for (int a = 0; a < f->num_axes && st == MOE_OK; a++) {
        st = apply_value(f->axes[a].dim, pt->value[a], q, &o, fix, sizeof(fix), diag);
    }
    if (st == MOE_OK && !q->has_cluster) {
        st = moe_diag_set(diag, MOE_ERR_INVALID,
                          "no cluster: give --cluster NAME or --vary cluster=...");
    }
    if (st == MOE_OK) {
        st = search_point(q, &o, pt, false, diag);
    }
    if (st == MOE_OK && pt->fits && f->train.has_tokens) {
        st = point_run(q, &f->train, pt, diag);
    }
    /* GPU sweeps: weak scaling grows the global batch with the GPUs. */
    if (st == MOE_OK && f->axes[0].dim == DIM_GPUS && first != NULL && pt != first) {
        long n0 = strtol(first->value[0], NULL, 10);
        long n = q->num_gpus;
        long gbs = (long)p->lay.gbs * n / (n0 > 0 ? n0 : 1);
        pt->weak_gbs = (double)gbs;
        if (n0 > 0 && (long)p->lay.gbs * n % n0 == 0 && gbs > 0 && gbs < (1L << 30)) {
            q->lay.gbs = (int)gbs;
            st = search_point(q, &o, pt, true, diag);
        }
    }
    free(q);
    return st;
}

static void scaling(const struct whatif_flags *f, struct point *pts, int n)
{
    if (f->axes[0].dim != DIM_GPUS || n == 0 || !pts[0].fits) {
        return;
    }
    double t0 = moe_plan_step_time(&pts[0].best);
    double n0 = strtod(pts[0].value[0], NULL);
    for (int i = 0; i < n; i++) {
        if (!pts[i].fits) {
            continue;
        }
        double t = moe_plan_step_time(&pts[i].best);
        double ni = strtod(pts[i].value[0], NULL);
        pts[i].strong_eff = t0 * n0 / (t * ni);
        pts[i].weak_eff = i == 0 ? 1.0 : (pts[i].has_weak ? t0 / pts[i].weak_step_s : 0.0);
        if (i == 0) {
            pts[i].has_weak = true;
            pts[i].weak_step_s = t0;
        }
    }
}

/* days, interval, GPU-hours, MWh and cost of a point's run, for the table. */
static void print_run_columns(const struct moe_train_totals *t)
{
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
    printf(" %8.2f %13s %11.4g %8s %11s", t->days.value, iv, t->gpu_hours.value, mwh, cost);
}

static void print_table(const struct moe_cli_problem *p,
                        const struct whatif_flags *f,
                        const struct point *pts,
                        int n)
{
    bool gpus = f->axes[0].dim == DIM_GPUS;
    printf("# moefold whatif: %s, global batch %d x %d tokens; best plan per point (full search, "
           "simulated schedule)\n",
           p->cfg.name, p->lay.gbs, p->lay.seq_length > 0 ? p->lay.seq_length : p->cfg.seq_length);
    if (gpus) {
        printf(
            "# strong scaling: same global batch; weak scaling: global batch grown with the GPUs;"
            " efficiency against the first point\n");
    }
    printf("%12s", dim_names[f->axes[0].dim]);
    if (f->num_axes > 1) {
        printf(" %14s", dim_names[f->axes[1].dim]);
    }
    printf(" %9s %10s %8s %6s %8s %-13s", "step_s", "tok/s/GPU", "TFLOPS", "MFU%", "mem_GiB",
           "bottleneck");
    if (gpus) {
        printf(" %7s %9s %7s", "strong%", "weak_s", "weak%");
    }
    if (f->train.has_tokens) {
        printf(" %8s %13s %11s %8s %11s", "days", "80%_days", "GPU_hours", "MWh", "cost_USD");
    }
    printf(" layout | options\n");
    for (int i = 0; i < n; i++) {
        const struct point *pt = &pts[i];
        printf("%12s", pt->value[0]);
        if (f->num_axes > 1) {
            printf(" %14s", pt->value[1]);
        }
        if (!pt->fits) {
            if (pt->excess_gib > 0.0) {
                printf("  no plan fits (closest needs %.1f GiB more per GPU)\n", pt->excess_gib);
            } else {
                printf("  no plan fits\n");
            }
            continue;
        }
        const struct moe_prediction *pr = pt->best.has_sim ? &pt->best.sim : &pt->best.pred;
        char lay[320];
        char opt[400];
        moe_plan_layout_str(&pt->best.lay, lay, sizeof(lay));
        moe_plan_options_str(&pt->best.opt, opt, sizeof(opt));
        printf(" %9.3f %10.0f %8.1f %6.1f %8.1f %-13s", pr->step_time_s, pr->tokens_per_s_per_gpu,
               pr->tflops_per_gpu, 100.0 * pr->mfu, pr->mem.total / GIB,
               moe_phase_name(pr->bottleneck));
        if (gpus) {
            printf(" %7.1f %9.3f %7.1f", 100.0 * pt->strong_eff,
                   pt->has_weak ? pt->weak_step_s : 0.0, 100.0 * pt->weak_eff);
        }
        if (pt->has_run) {
            print_run_columns(&pt->run);
        }
        printf(" %s | %s\n", lay, opt);
    }
    if (f->train.has_tokens) {
        char tok[32];
        moe_train_tokens_str(f->train.train_tokens, tok, sizeof(tok));
        printf("# days, GPU-hours, MWh (facility, GPUs at TDP, nodes at maximum power, x PUE) and "
               "cost of a run of %s tokens on each point's best plan; '-': the cluster file has no "
               "power data or price (--price-per-gpu-hour)\n",
               tok);
    }
}

static void csv_string(const char *s)
{
    putchar('"');
    for (const char *c = s; *c != '\0'; c++) {
        if (*c == '"') {
            putchar('"');
        }
        putchar(*c);
    }
    putchar('"');
}

static void print_csv(const struct whatif_flags *f, const struct point *pts, int n)
{
    bool gpus = f->axes[0].dim == DIM_GPUS;
    printf("%s,", dim_names[f->axes[0].dim]);
    if (f->num_axes > 1) {
        printf("%s,", dim_names[f->axes[1].dim]);
    }
    printf("fits,step_time_s,tokens_per_s_per_gpu,tflops_per_gpu,mfu,memory_gib,bottleneck,");
    if (gpus) {
        printf("strong_scaling_eff,weak_step_time_s,weak_scaling_eff,");
    }
    if (f->train.has_tokens) {
        printf("days,days_lo,days_hi,gpu_hours,energy_mwh,cost_usd,");
    }
    printf("layout,options\n");
    for (int i = 0; i < n; i++) {
        const struct point *pt = &pts[i];
        csv_string(pt->value[0]);
        putchar(',');
        if (f->num_axes > 1) {
            csv_string(pt->value[1]);
            putchar(',');
        }
        if (!pt->fits) {
            printf("0,,,,,%.3f,,", pt->excess_gib);
            printf(gpus ? ",,," : "");
            printf(f->train.has_tokens ? ",,,,,," : "");
            printf(",\n");
            continue;
        }
        const struct moe_prediction *pr = pt->best.has_sim ? &pt->best.sim : &pt->best.pred;
        printf("1,%.6f,%.2f,%.3f,%.5f,%.4f,%s,", pr->step_time_s, pr->tokens_per_s_per_gpu,
               pr->tflops_per_gpu, pr->mfu, pr->mem.total / GIB, moe_phase_name(pr->bottleneck));
        if (gpus) {
            printf("%.5f,%.6f,%.5f,", pt->strong_eff, pt->has_weak ? pt->weak_step_s : 0.0,
                   pt->weak_eff);
        }
        if (pt->has_run) {
            const struct moe_train_totals *t = &pt->run;
            printf("%.4f,%.4f,%.4f,%.1f,", t->days.value, t->days.lo, t->days.hi,
                   t->gpu_hours.value);
            if (t->has_energy) {
                printf("%.2f,", t->energy_mwh.value);
            } else {
                printf(",");
            }
            if (t->has_cost) {
                printf("%.2f,", t->cost_usd.value);
            } else {
                printf(",");
            }
        }
        char lay[320];
        char opt[400];
        moe_plan_layout_str(&pt->best.lay, lay, sizeof(lay));
        moe_plan_options_str(&pt->best.opt, opt, sizeof(opt));
        csv_string(lay);
        putchar(',');
        csv_string(opt);
        putchar('\n');
    }
}

/* gnuplot's path, or false when it is not installed. */
static bool have_gnuplot(void)
{
    FILE *p = popen("command -v gnuplot 2>/dev/null", "r");
    if (p == NULL) {
        return false;
    }
    char buf[512];
    bool found = fgets(buf, sizeof(buf), p) != NULL && buf[0] == '/';
    return pclose(p) == 0 && found;
}

/* Tokens/s/GPU (left axis) and step time (right) against the first dimension, one series per
 * value of the second. */
static enum moe_status plot(const struct moe_cli_problem *p,
                            const struct whatif_flags *f,
                            const struct point *pts,
                            int n,
                            struct moe_diag *diag)
{
    const char *path = f->plot;
    size_t len = strlen(path);
    bool png = len > 4 && strcmp(path + len - 4, ".png") == 0;
    bool svg = len > 4 && strcmp(path + len - 4, ".svg") == 0;
    if (!png && !svg) {
        moe_diag_source(diag, "--plot");
        return moe_diag_set(diag, MOE_ERR_INVALID, "--plot %s: give a .svg or .png file", path);
    }
    if (!have_gnuplot()) {
        moe_diag_source(diag, "--plot");
        return moe_diag_set(diag, MOE_ERR_UNSUPPORTED,
                            "gnuplot is not installed: install the Debian package gnuplot-nox (or "
                            "use --csv and plot elsewhere)");
    }
    for (const char *c = path; *c != '\0'; c++) {
        if (*c == '"' || *c == '\\' || *c == '\n') {
            return moe_diag_set(diag, MOE_ERR_INVALID, "--plot: unsupported character in %s", path);
        }
    }
    FILE *g = popen("gnuplot 2>&1", "w");
    if (g == NULL) {
        return moe_diag_set(diag, MOE_ERR_IO, "cannot start gnuplot");
    }
    bool numeric = dim_numeric(f->axes[0].dim);
    fprintf(g, "set terminal %s size 960,600\nset output \"%s\"\n", png ? "pngcairo" : "svg", path);
    fprintf(g, "set title \"%s: best plan per point\" noenhanced\n", p->cfg.name);
    fprintf(g, "set xlabel \"%s\"\nset ylabel \"tokens/s/GPU\"\nset y2label \"step time (s)\"\n",
            dim_names[f->axes[0].dim]);
    fprintf(g,
            "set ytics nomirror\nset y2tics\nset grid\nset key outside bottom center horizontal\n");
    if (f->axes[0].dim == DIM_GPUS) {
        fprintf(g, "set logscale x 2\n");
    }
    int series = f->num_axes > 1 && !f->zip ? f->axes[1].num : 1;
    fprintf(g, "plot ");
    for (int s = 0; s < series; s++) {
        const char *name = series > 1 ? f->axes[1].values[s] : "best plan";
        fprintf(g,
                "%s'-' using %s with linespoints title \"%s tokens/s/GPU\" noenhanced, "
                "'-' using %s axes x1y2 with linespoints dashtype 2 title \"%s step s\" noenhanced",
                s > 0 ? ", " : "", numeric ? "1:2" : "0:2:xtic(1)", name,
                numeric ? "1:2" : "0:2:xtic(1)", name);
    }
    fprintf(g, "\n");
    for (int s = 0; s < series; s++) {
        for (int which = 0; which < 2; which++) {
            for (int i = 0; i < n; i++) {
                if (series > 1 && i % f->axes[1].num != s) {
                    continue;
                }
                const struct point *pt = &pts[i];
                if (!pt->fits) {
                    continue;
                }
                const struct moe_prediction *pr = pt->best.has_sim ? &pt->best.sim : &pt->best.pred;
                fprintf(g, "\"%s\" %.6g\n", pt->value[0],
                        which == 0 ? pr->tokens_per_s_per_gpu : pr->step_time_s);
            }
            fprintf(g, "e\n");
        }
    }
    if (pclose(g) != 0) {
        return moe_diag_set(diag, MOE_ERR_IO, "gnuplot failed writing %s", path);
    }
    return MOE_OK;
}

int moe_cli_whatif(int argc, char **argv)
{
    struct whatif_flags f;
    memset(&f, 0, sizeof(f));
    moe_plan_cli_opts_init(&f.search);
    moe_train_flags_init(&f.train);
    struct moe_cli_problem *p = calloc(1, sizeof(*p));
    struct point *pts = NULL;
    struct moe_diag diag = {0};
    int rc = 1;
    if (p == NULL) {
        fprintf(stderr, "moefold whatif: out of memory\n");
        return 1;
    }
    if (moe_cli_parse_problem(argc, argv, whatif_flag, &f, p, stderr, &diag) != MOE_OK) {
        moe_cli_error("whatif", &diag);
        rc = 2;
        goto out_free;
    }
    if (f.search.help) {
        usage(stdout);
        rc = 0;
        goto out_free;
    }
    if (moe_train_flags_check(&f.train, false, &diag) != MOE_OK) {
        moe_cli_error("whatif", &diag);
        rc = 2;
        goto out_free;
    }
    if (f.num_axes == 0) {
        fprintf(stderr, "moefold whatif: give --vary DIM=VALUES (see --help)\n");
        rc = 2;
        goto out_free;
    }
    int n = num_points(&f);
    pts = calloc((size_t)n, sizeof(*pts));
    if (pts == NULL) {
        fprintf(stderr, "moefold whatif: out of memory\n");
        goto out_free;
    }
    for (int i = 0; i < n; i++) {
        point_values(&f, i, &pts[i]);
        if (run_point(p, &f, &pts[i], &pts[0], &diag) != MOE_OK) {
            fprintf(stderr, "moefold whatif: point %s%s%s: ", pts[i].value[0],
                    pts[i].value[1] != NULL ? "," : "",
                    pts[i].value[1] != NULL ? pts[i].value[1] : "");
            moe_cli_error("whatif", &diag);
            goto out_free;
        }
    }
    scaling(&f, pts, n);
    if (f.csv) {
        print_csv(&f, pts, n);
    } else {
        print_table(p, &f, pts, n);
    }
    if (f.plot != NULL) {
        if (plot(p, &f, pts, n, &diag) != MOE_OK) {
            moe_cli_error("whatif", &diag);
            goto out_free;
        }
        if (!f.csv) {
            printf("# wrote %s\n", f.plot);
        }
    }
    rc = 0;
out_free:
    free(pts);
    free(p);
    return rc;
}
