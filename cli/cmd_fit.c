/*
 * `moefold fit --cluster BASE --runs FILE [--runs FILE ...] [--out PROFILE] [--json]`: the
 * cluster's software figures fitted to measured runs (cli/fit.h), printed with their standard
 * errors, the runs that constrain each, every run's in-sample and leave-one-out error, and written
 * as a cluster/profile file with --out. Nothing is written when the fit fails.
 */
#include "cli/commands.h"
#include "cli/fit.h"
#include "cli/megatron_log.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FILES 16

struct fit_args {
    const char *cluster;
    const char *runs[MAX_FILES];
    int num_runs;
    const char *logs[MAX_FILES]; /* --megatron-log */
    int num_logs;
    const char *out;
    bool json;
    struct moe_fit_options opt;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: moefold fit --cluster BASE --runs FILE [--runs FILE ...]\n"
            "                   [--megatron-log FILE ...] [--out PROFILE]\n"
            "                   [--json] [--no-loo] [--no-releases] [--incomplete-sd K]\n"
            "                   [--run-sd X] [--constrain R] [--from-priors]\n"
            "Fits BASE's software figures (those with a \"prior\" in the cluster file: GEMM,\n"
            "grouped-GEMM, dispatcher, overlap and host figures; never hardware facts) to the\n"
            "measured runs of the same GPU generation, by nonlinear least squares on\n"
            "log(predicted/measured) with each figure kept in its physical range and held to\n"
            "BASE's value with its prior's sd: your runs refine the shipped profile (fitted to\n"
            "the published runs). Only figures the runs constrain are fitted; the rest keep\n"
            "BASE's values and say so.\n"
            "  --cluster BASE        cluster name or file whose figures are fitted\n"
            "  --runs FILE           measured runs (the published-runs format; repeatable)\n"
            "  --megatron-log FILE   a Megatron-LM training log as a measured run on BASE: its\n"
            "                        arguments dump and steady-state step time (repeatable)\n"
            "  --out PROFILE         write the fitted profile (a cluster file) here\n"
            "  --json                print the fit as one JSON object\n"
            "  --no-loo              skip the leave-one-out refits\n"
            "  --no-releases         no per-release figures\n"
            "  --incomplete-sd K     runs whose configuration is not fully stated count with K x\n"
            "                        the run error (default 2; 0 leaves them out)\n"
            "  --run-sd X            model error of one run, log units (default 0.05)\n"
            "  --constrain R         a figure is fitted when the runs shrink its sd below R x\n"
            "                        its prior sd (default 0.95, chosen by nested\n"
            "                        cross-validation: scripts/nested-cv.py); the rest keep\n"
            "                        their values\n"
            "  --from-priors         hold each figure to its prior as the file states it (the\n"
            "                        microbenchmark) instead of BASE's value: how make fit\n"
            "                        regenerates the shipped profiles from the published runs\n");
}

static int parse(int argc, char **argv, struct fit_args *a)
{
    static const struct option longs[] = {{"cluster", required_argument, NULL, 'c'},
                                          {"runs", required_argument, NULL, 'r'},
                                          {"megatron-log", required_argument, NULL, 'm'},
                                          {"out", required_argument, NULL, 'o'},
                                          {"json", no_argument, NULL, 'j'},
                                          {"no-loo", no_argument, NULL, 'L'},
                                          {"no-releases", no_argument, NULL, 'R'},
                                          {"incomplete-sd", required_argument, NULL, 'I'},
                                          {"run-sd", required_argument, NULL, 's'},
                                          {"constrain", required_argument, NULL, 'C'},
                                          {"from-priors", no_argument, NULL, 'P'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    memset(a, 0, sizeof(*a));
    moe_fit_options_init(&a->opt);
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "c:r:o:jh", longs, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
        case 'c':
            a->cluster = optarg;
            break;
        case 'r':
            if (a->num_runs >= MAX_FILES) {
                fprintf(stderr, "moefold fit: at most %d --runs files\n", MAX_FILES);
                return 2;
            }
            a->runs[a->num_runs++] = optarg;
            break;
        case 'm':
            if (a->num_logs >= MAX_FILES) {
                fprintf(stderr, "moefold fit: at most %d --megatron-log files\n", MAX_FILES);
                return 2;
            }
            a->logs[a->num_logs++] = optarg;
            break;
        case 'o':
            a->out = optarg;
            break;
        case 'j':
            a->json = true;
            break;
        case 'L':
            a->opt.loo = false;
            break;
        case 'R':
            a->opt.releases = false;
            break;
        case 'I':
            a->opt.incomplete_sd = strtod(optarg, &end);
            if (end == optarg || *end != '\0' || !(a->opt.incomplete_sd >= 0.0) ||
                a->opt.incomplete_sd > 100.0) {
                fprintf(stderr,
                        "moefold fit: --incomplete-sd '%s': expected a number in [0, 100]\n",
                        optarg);
                return 2;
            }
            break;
        case 's':
            a->opt.run_sd = strtod(optarg, &end);
            if (end == optarg || *end != '\0' || !(a->opt.run_sd > 0.0) || a->opt.run_sd > 1.0) {
                fprintf(stderr, "moefold fit: --run-sd '%s': expected a number in (0, 1]\n",
                        optarg);
                return 2;
            }
            break;
        case 'C':
            a->opt.constrain_ratio = strtod(optarg, &end);
            if (end == optarg || *end != '\0' || !(a->opt.constrain_ratio > 0.0) ||
                a->opt.constrain_ratio > 1.0) {
                fprintf(stderr, "moefold fit: --constrain '%s': expected a number in (0, 1]\n",
                        optarg);
                return 2;
            }
            break;
        case 'P':
            a->opt.from_priors = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            fprintf(stderr, "moefold fit: unknown or incomplete option '%s' (see --help)\n",
                    argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "moefold fit: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (a->cluster == NULL || a->num_runs + a->num_logs == 0) {
        fprintf(stderr, "moefold fit: give --cluster BASE and at least one --runs FILE or "
                        "--megatron-log FILE\n");
        return 2;
    }
    return -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a;
    double y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median and maximum |pred/measured - 1| over the used runs (loo: leave-one-out predictions). */
static void summary(const struct moe_fit_result *res, bool loo, double *med, double *max, int *n)
{
    double e[MOE_RUNS_MAX];
    *n = 0;
    for (int i = 0; i < res->num_runs; i++) {
        const struct moe_fit_run *fr = &res->runs[i];
        if (fr->used) {
            double p = loo ? fr->pred_loo : fr->pred_fit;
            e[(*n)++] = fabs(p / fr->run->measured - 1.0);
        }
    }
    *med = 0.0;
    *max = 0.0;
    if (*n > 0) {
        qsort(e, (size_t)*n, sizeof(double), cmp_double);
        *med = *n % 2 ? e[*n / 2] : 0.5 * (e[*n / 2 - 1] + e[*n / 2]);
        *max = e[*n - 1];
    }
}

static void print_params(const struct moe_fit_result *res)
{
    if (!res->opt.from_priors) {
        printf("# held to %s's values (its fit to the published runs) with the priors' sd; "
               "--from-priors: to the microbenchmark priors\n",
               res->base);
    }
    printf("%-32s %16s %10s %8s %6s  %s\n", "figure",
           res->opt.from_priors ? "prior (+- sd)" : "held to (+- sd)", "fitted", "se", "ratio",
           "constrained by");
    for (int j = 0; j < res->num_params; j++) {
        const struct moe_fit_param *fp = &res->params[j];
        char prior[32];
        char name[112];
        (void)snprintf(prior, sizeof(prior), "%.4g +- %.2g", fp->prior.value, fp->prior.sd);
        (void)snprintf(name, sizeof(name), "%s%s%s%s", fp->path, fp->cluster > 0 ? " [" : "",
                       fp->cluster > 0 ? res->clusters[fp->cluster] : "",
                       fp->cluster > 0 ? "]" : "");
        if (fp->constrained) {
            printf("%-32s %16s %10.4g %8.2g %6.2f  %s\n", name, prior, fp->value, fp->se,
                   fp->sd_ratio, fp->runs[0] ? fp->runs : "(the runs jointly)");
        } else if (fp->borrowed >= 0) {
            const struct moe_fit_param *sib = &res->params[fp->borrowed];
            printf("%-32s %16s %10.4g %8.2g %6.2f  as %s (same prior; no run on this cluster)\n",
                   name, prior, fp->value, fp->se, fp->sd_ratio, res->clusters[sib->cluster]);
        } else if (res->opt.from_priors) {
            printf("%-32s %16s %10s %8s %6.2f  keeps its prior: no run constrains it\n", name,
                   prior, "(prior)", "-", fp->sd_ratio);
        } else {
            printf("%-32s %16s %10s %8s %6.2f  keeps %s's value: no run constrains it\n", name,
                   prior, "(kept)", "-", fp->sd_ratio, res->base);
        }
    }
    printf("# [cluster]: that cluster's own figure (host, network, its GPU's GEMMs), fitted to its "
           "runs alone and written by its own fit; the others are the %s generation's\n",
           res->generation);
    for (int r = 0; r < res->num_releases; r++) {
        const struct moe_fit_release *rel = &res->releases[r];
        bool header = false;
        for (int j = 0; j < res->num_params; j++) {
            if (!rel->has[j]) {
                continue;
            }
            if (!header) {
                printf("# release %s (%s; runs %s)%s\n", rel->name,
                       rel->date[0] ? rel->date : "no date", rel->runs,
                       strcmp(rel->name, res->default_release) == 0 ? ", the default" : "");
                header = true;
            }
            printf("#   %-30s %10.4g +- %.2g (shared %.4g)\n", res->params[j].path, rel->value[j],
                   rel->se[j], res->params[j].value);
        }
        if (!header) {
            printf("# release %s (runs %s): no figure of its own (its runs do not separate it "
                   "from the shared values)\n",
                   rel->name, rel->runs);
        }
    }
}

static void print_runs(const struct moe_fit_result *res)
{
    printf("%-6s %-16s %-12s %5s %-20s %10s %10s %10s %8s %10s %8s\n", "run", "model", "cluster",
           "gpus", "metric", "measured", "prior", "fitted", "error", "loo", "error");
    for (int i = 0; i < res->num_runs; i++) {
        const struct moe_fit_run *fr = &res->runs[i];
        const struct moe_run *r = fr->run;
        const char *model = r->model[0] ? r->model : "(flags)";
        if (!fr->ok) {
            printf("%-6s %-16s %-12s %5d not used: %s: %s\n", r->id, model, r->cluster, r->gpus,
                   fr->why, fr->error);
            continue;
        }
        printf("%-6s %-16s %-12s %5d %-20s %10.4g %10.4g %10.4g %+7.1f%%", r->id, model, r->cluster,
               r->gpus, moe_run_metric_name(r->metric), r->measured, fr->pred_prior, fr->pred_fit,
               100.0 * (fr->pred_fit / r->measured - 1.0));
        if (fr->used && res->opt.loo) {
            printf(" %10.4g %+7.1f%%\n", fr->pred_loo, 100.0 * (fr->pred_loo / r->measured - 1.0));
        } else {
            printf("  not used: %s\n", fr->used ? "(no leave-one-out)" : fr->why);
        }
    }
    double med = 0.0;
    double max = 0.0;
    int n = 0;
    summary(res, false, &med, &max, &n);
    printf("# in sample: median |error| %.1f%%, max %.1f%% over %d runs (%d iterations)\n",
           100.0 * med, 100.0 * max, n, res->iterations);
    if (res->opt.loo) {
        summary(res, true, &med, &max, &n);
        printf("# leave-one-out: median |error| %.1f%%, max %.1f%% over %d runs\n", 100.0 * med,
               100.0 * max, n);
    }
}

static cJSON *summary_json(const struct moe_fit_result *res, bool loo)
{
    double med = 0.0;
    double max = 0.0;
    int n = 0;
    summary(res, loo, &med, &max, &n);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "median_abs_err", med);
    cJSON_AddNumberToObject(o, "max_abs_err", max);
    cJSON_AddNumberToObject(o, "n", n);
    return o;
}

static void print_json(const struct moe_fit_result *res, const char *out)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "cluster", res->base);
    cJSON_AddStringToObject(o, "generation", res->generation);
    cJSON_AddStringToObject(o, "default_release", res->default_release);
    cJSON *ps = cJSON_AddArrayToObject(o, "params");
    for (int j = 0; j < res->num_params; j++) {
        const struct moe_fit_param *fp = &res->params[j];
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "path", fp->path);
        cJSON_AddStringToObject(p, "cluster", fp->cluster >= 0 ? res->clusters[fp->cluster] : "");
        cJSON_AddNumberToObject(p, "prior", fp->prior.value);
        cJSON_AddNumberToObject(p, "prior_sd", fp->prior.sd);
        cJSON_AddBoolToObject(p, "constrained", fp->constrained);
        cJSON_AddNumberToObject(p, "value", fp->value);
        cJSON_AddNumberToObject(p, "se", fp->se);
        cJSON_AddNumberToObject(p, "sd_ratio", fp->sd_ratio);
        cJSON_AddStringToObject(p, "runs", fp->runs);
        cJSON_AddStringToObject(p, "borrowed_from",
                                fp->borrowed >= 0 ? res->clusters[res->params[fp->borrowed].cluster]
                                                  : "");
        cJSON_AddItemToArray(ps, p);
    }
    cJSON *rs = cJSON_AddArrayToObject(o, "runs");
    for (int i = 0; i < res->num_runs; i++) {
        const struct moe_fit_run *fr = &res->runs[i];
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "id", fr->run->id);
        cJSON_AddBoolToObject(r, "used", fr->used);
        if (!fr->used) {
            cJSON_AddStringToObject(r, "why", fr->why);
        }
        if (!fr->ok) {
            cJSON_AddStringToObject(r, "error", fr->error);
        } else {
            cJSON_AddNumberToObject(r, "measured", fr->run->measured);
            cJSON_AddNumberToObject(r, "predicted_prior", fr->pred_prior);
            cJSON_AddNumberToObject(r, "predicted_fit", fr->pred_fit);
            cJSON_AddNumberToObject(r, "err_fit", fr->pred_fit / fr->run->measured - 1.0);
            if (fr->used && res->opt.loo) {
                cJSON_AddNumberToObject(r, "predicted_loo", fr->pred_loo);
                cJSON_AddNumberToObject(r, "err_loo", fr->pred_loo / fr->run->measured - 1.0);
            }
        }
        cJSON_AddItemToArray(rs, r);
    }
    cJSON_AddItemToObject(o, "in_sample", summary_json(res, false));
    if (res->opt.loo) {
        cJSON_AddItemToObject(o, "cross_validated", summary_json(res, true));
    }
    if (out != NULL) {
        cJSON_AddStringToObject(o, "written", out);
    }
    char *s = cJSON_Print(o);
    if (s != NULL) {
        puts(s);
        free(s);
    }
    cJSON_Delete(o);
}

/* A Megatron-LM log as one measured run on cluster `cluster` (cli/megatron_log.h). */
static enum moe_status
log_run(const char *path, const char *cluster, struct moe_run_set *set, struct moe_diag *diag)
{
    struct moe_megatron_log log;
    moe_mlog_init(&log);
    enum moe_status st = moe_mlog_read_file(path, &log, diag);
    struct moe_run *r = st == MOE_OK ? calloc(1, sizeof(*r)) : NULL;
    if (st == MOE_OK && r == NULL) {
        st = moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory");
    }
    if (st == MOE_OK) {
        const char *base = strrchr(path, '/');
        base = base != NULL ? base + 1 : path;
        const char *dot = strrchr(base, '.');
        int len = dot != NULL && dot != base ? (int)(dot - base) : (int)strlen(base);
        (void)snprintf(r->id, sizeof(r->id), "%.*s", len, base); /* the file's name, less .log */
        (void)snprintf(r->cluster, sizeof(r->cluster), "%s", cluster);
        (void)snprintf(r->file, sizeof(r->file), "%s", path);
        r->gpus = log.world_size;
        r->metric = MOE_RUN_STEP_TIME_S;
        r->measured = log.step_time_s;
        r->memory_gib = log.has_memory ? log.max_reserved_bytes / 1073741824.0 : 0.0;
        /* Arguments moefold does not read that may change what it prices: not fully stated. */
        r->complete = log.num_unknown + log.num_unknown_more == 0;
        (void)snprintf(r->note, sizeof(r->note),
                       "Megatron-LM log %s: median of %d iteration lines (%d iterations)", path,
                       log.iteration_lines_used, log.iterations_used);
        size_t used = 0;
        for (int i = 0; i < log.num_words && st == MOE_OK; i++) {
            int w = snprintf(r->args + used, sizeof(r->args) - used, "%s'%s'", i ? " " : "",
                             log.words[i]);
            if (w < 0 || (size_t)w >= sizeof(r->args) - used ||
                strchr(log.words[i], '\'') != NULL) {
                st = moe_diag_set(diag, MOE_ERR_INVALID,
                                  "%s: the arguments dump's flags do not fit in one run record",
                                  path);
            }
            used += w > 0 ? (size_t)w : 0;
        }
    }
    if (st == MOE_OK) {
        st = moe_runs_add(set, r, diag);
    }
    free(r);
    moe_mlog_fini(&log);
    return st;
}

int moe_cli_fit(int argc, char **argv)
{
    struct fit_args a;
    int rc = parse(argc, argv, &a);
    if (rc >= 0) {
        return rc;
    }
    struct moe_run_set set;
    memset(&set, 0, sizeof(set));
    struct moe_diag d = {0};
    char desc[1024] = "";
    size_t used = 0;
    for (int i = 0; i < a.num_runs; i++) {
        if (moe_runs_read(a.runs[i], &set, &d) != MOE_OK) {
            fprintf(stderr, "moefold fit: %s\n", d.message);
            moe_runs_free(&set);
            return 1;
        }
        int w = snprintf(desc + used, sizeof(desc) - used, "%s%s", i ? ", " : "", a.runs[i]);
        used += w > 0 && (size_t)w < sizeof(desc) - used ? (size_t)w : 0;
    }
    for (int i = 0; i < a.num_logs; i++) {
        if (log_run(a.logs[i], a.cluster, &set, &d) != MOE_OK) {
            fprintf(stderr, "moefold fit: %s\n", d.message);
            moe_runs_free(&set);
            return 1;
        }
        int w = snprintf(desc + used, sizeof(desc) - used, "%s%s", used ? ", " : "", a.logs[i]);
        used += w > 0 && (size_t)w < sizeof(desc) - used ? (size_t)w : 0;
    }
    struct moe_fit_result res;
    if (moe_fit(a.cluster, &set, &a.opt, &res, &d) != MOE_OK) {
        fprintf(stderr, "moefold fit: %s\n", d.message);
        moe_runs_free(&set);
        return 1;
    }
    if (res.num_used_on_base == 0 && res.num_clusters > 1) {
        /* Every run names another cluster (a refit of a profile with runs that name the cluster
         * it came from, say): the figures scoped to one cluster are fitted for those clusters,
         * and the base keeps its own. Say so before the table, which marks them [cluster]. */
        fprintf(stderr,
                "moefold fit: note: no run is on %s itself (the runs name %s%s); figures scoped "
                "to one cluster (host, network, its GPU's GEMMs; marked [cluster]) are fitted "
                "for the runs' clusters and %s keeps its own: give the runs \"cluster\": \"%s\" "
                "(or its file) to fit them as this cluster's\n",
                res.clusters[0], res.clusters[1], res.num_clusters > 2 ? ", ..." : "",
                res.clusters[0], res.clusters[0]);
    }
    rc = 0;
    if (a.out != NULL && moe_fit_write(&res, desc, a.out, &d) != MOE_OK) {
        fprintf(stderr, "moefold fit: %s\n", d.message);
        rc = 1;
    }
    if (rc == 0 && a.json) {
        print_json(&res, a.out);
    } else if (rc == 0) {
        printf("# moefold fit: %s (%s) on %d of %d runs (%s)\n", res.base, res.generation,
               res.num_used, res.num_runs, desc);
        print_params(&res);
        print_runs(&res);
        if (a.out != NULL) {
            printf("# wrote %s\n", a.out);
        }
    }
    moe_fit_result_free(&res);
    moe_runs_free(&set);
    return rc;
}
