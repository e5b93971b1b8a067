/*
 * `moefold accuracy [--runs FILE ...] [--cluster PROFILE] [--refit] [--no-sweeps] [--json]`:
 * predicted vs measured for every run of the runs files (default tests/data/published_runs.json),
 * in sample, cross-validated and with each run's whole sweep left out side by side, the ranking
 * of layouts and the coverage of the 80% intervals
 * (cli/accuracy.h). Errors in --json are fractions.
 */
#include "cli/accuracy.h"
#include "cli/commands.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FILES 16

static cJSON *stats_json(const struct moe_accuracy_stats *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *in = cJSON_AddObjectToObject(o, "in_sample");
    cJSON_AddNumberToObject(in, "median_abs_err", s->median_abs);
    cJSON_AddNumberToObject(in, "max_abs_err", s->max_abs);
    cJSON_AddNumberToObject(in, "n", s->n);
    cJSON *cv = cJSON_AddObjectToObject(o, "cross_validated");
    cJSON_AddNumberToObject(cv, "median_abs_err", s->cv_median_abs);
    cJSON_AddNumberToObject(cv, "max_abs_err", s->cv_max_abs);
    cJSON_AddNumberToObject(cv, "n", s->cv_n);
    cJSON_AddNumberToObject(cv, "unseen", s->cv_unseen);
    if (s->sweep_n > 0) {
        cJSON *sw = cJSON_AddObjectToObject(o, "leave_one_sweep_out");
        cJSON_AddNumberToObject(sw, "median_abs_err", s->sweep_median_abs);
        cJSON_AddNumberToObject(sw, "max_abs_err", s->sweep_max_abs);
        cJSON_AddNumberToObject(sw, "n", s->sweep_n);
        cJSON_AddNumberToObject(sw, "sweeps_left_out", s->sweeps);
        cJSON_AddNumberToObject(sw, "concordant", s->sweep_concordant);
    }
    cJSON *rk = cJSON_AddObjectToObject(o, "ranking");
    cJSON_AddNumberToObject(rk, "pairs", s->pairs);
    cJSON_AddNumberToObject(rk, "concordant", s->concordant);
    cJSON_AddNumberToObject(rk, "in_sample_concordant", s->in_sample_concordant);
    cJSON_AddNumberToObject(rk, "min_gap", MOE_ACCURACY_RANK_GAP);
    cJSON *cov = cJSON_AddObjectToObject(o, "coverage");
    cJSON_AddNumberToObject(cov, "level", 0.8);
    cJSON_AddNumberToObject(cov, "covered", s->covered);
    cJSON_AddNumberToObject(cov, "n", s->intervals);
    cJSON *mem = cJSON_AddObjectToObject(o, "memory");
    cJSON_AddNumberToObject(mem, "ran", s->ran);
    cJSON_AddNumberToObject(mem, "predicted_to_fit", s->ran_fit);
    cJSON_AddNumberToObject(mem, "measured", s->mem_n);
    if (s->mem_n > 0) {
        cJSON_AddNumberToObject(mem, "median_abs_err", s->mem_median_abs);
        cJSON_AddNumberToObject(mem, "max_abs_err", s->mem_max_abs);
    }
    return o;
}

static cJSON *row_json(const struct moe_accuracy_row *r)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "id", r->id);
    cJSON_AddStringToObject(j, "model", r->model);
    cJSON_AddStringToObject(j, "cluster", r->cluster);
    cJSON_AddStringToObject(j, "software", r->software);
    cJSON_AddNumberToObject(j, "gpus", r->gpus);
    cJSON_AddStringToObject(j, "metric", r->metric);
    cJSON_AddNumberToObject(j, "published", r->published);
    cJSON_AddBoolToObject(j, "complete", r->complete);
    cJSON_AddBoolToObject(j, "ok", r->ok);
    if (r->ok) {
        cJSON_AddNumberToObject(j, "predicted", r->predicted);
        cJSON_AddNumberToObject(j, "error", r->err_pct / 100.0);
        cJSON_AddNumberToObject(j, "cv_predicted", r->cv_predicted);
        cJSON_AddNumberToObject(j, "cv_error", r->cv_err_pct / 100.0);
        cJSON_AddStringToObject(j, "cv_basis", r->cv_basis);
        if (r->has_sweep) {
            cJSON_AddNumberToObject(j, "sweep_predicted", r->sweep_predicted);
            cJSON_AddNumberToObject(j, "sweep_error", r->sweep_err_pct / 100.0);
            cJSON_AddNumberToObject(j, "sweep_size", r->sweep_size);
        }
        if (r->has_interval) {
            cJSON *iv = cJSON_AddArrayToObject(j, "interval");
            cJSON_AddItemToArray(iv, cJSON_CreateNumber(r->lo));
            cJSON_AddItemToArray(iv, cJSON_CreateNumber(r->hi));
            cJSON_AddBoolToObject(j, "covered", r->covered);
        }
        cJSON_AddNumberToObject(j, "step_time_s", r->step_time_s);
        cJSON_AddNumberToObject(j, "memory_gib", r->mem_gib);
        cJSON_AddNumberToObject(j, "capacity_gib", r->mem_cap_gib);
        cJSON_AddBoolToObject(j, "fits", r->fits);
        if (r->mem_measured_gib > 0.0) {
            cJSON_AddNumberToObject(j, "measured_memory_gib", r->mem_measured_gib);
        }
        cJSON_AddStringToObject(j, "layout", r->layout);
    } else {
        cJSON_AddStringToObject(j, "error_message", r->error);
    }
    if (r->known_miss[0] != '\0') {
        cJSON_AddStringToObject(j, "known_miss", r->known_miss);
    }
    return j;
}

static void print_json(const struct moe_accuracy_row *rows, int n)
{
    struct moe_accuracy_stats s;
    moe_accuracy_summarise(rows, n, &s);
    cJSON *o = stats_json(&s);
    cJSON *arr = cJSON_AddArrayToObject(o, "runs");
    for (int i = 0; i < n; i++) {
        cJSON_AddItemToArray(arr, row_json(&rows[i]));
    }
    char *str = cJSON_Print(o);
    if (str != NULL) {
        puts(str);
        free(str);
    }
    cJSON_Delete(o);
}

static void print_table(const char *desc, const struct moe_accuracy_row *rows, int n)
{
    printf("# predicted vs measured (%s); cv = cross-validated: leave-one-out for the runs the "
           "profile was fitted to\n",
           desc);
    printf("%-5s %-16s %-12s %5s %-21s %10s %10s %8s %10s %8s %8s %21s  %s\n", "id", "model",
           "cluster", "gpus", "metric", "measured", "predicted", "error", "cv", "cv_error", "sweep",
           "80% interval (cv)", "config");
    for (int i = 0; i < n; i++) {
        const struct moe_accuracy_row *r = &rows[i];
        if (!r->ok) {
            printf("%-5s %-16s %-12s %5d error: %s\n", r->id, r->model, r->cluster, r->gpus,
                   r->error);
            continue;
        }
        char iv[32] = "-";
        if (r->has_interval) {
            (void)snprintf(iv, sizeof(iv), "%.4g - %.4g%s", r->lo, r->hi, r->covered ? "" : " !");
        }
        const char *tag = !r->complete       ? "incomplete"
                          : r->known_miss[0] ? "complete, known miss"
                                             : "complete";
        char sw[16] = "-";
        if (r->has_sweep) {
            (void)snprintf(sw, sizeof(sw), "%+.1f%%", r->sweep_err_pct);
        }
        printf("%-5s %-16s %-12.12s %5d %-21s %10.4g %10.4g %+7.1f%% %10.4g %+7.1f%% %8s %21s  "
               "%s%s%s\n",
               r->id, r->model, r->cluster, r->gpus, r->metric, r->published, r->predicted,
               r->err_pct, r->cv_predicted, r->cv_err_pct, sw, iv, tag,
               strcmp(r->cv_basis, "leave-one-out") == 0 ? "" : "; cv: ",
               strcmp(r->cv_basis, "leave-one-out") == 0 ? "" : r->cv_basis);
    }
    struct moe_accuracy_stats s;
    moe_accuracy_summarise(rows, n, &s);
    printf("# complete runs: in sample median |error| %.1f%%, max %.1f%% (n %d); cross-validated "
           "median %.1f%%, max %.1f%% (n %d, %d unseen by the profile)\n",
           100.0 * s.median_abs, 100.0 * s.max_abs, s.n, 100.0 * s.cv_median_abs,
           100.0 * s.cv_max_abs, s.cv_n, s.cv_unseen);
    if (s.sweep_n > 0) {
        printf("# leave-one-sweep-out (sweep = the runs of one model, cluster and GPU count; each "
               "sweep of two or more runs, %d here, left out of its cluster's fit whole, the rest "
               "as cv): median |error| %.1f%%, max %.1f%% (n %d)\n",
               s.sweeps, 100.0 * s.sweep_median_abs, 100.0 * s.sweep_max_abs, s.sweep_n);
    }
    printf("# ranking: %d of %d pairs of layouts (same model, cluster and GPUs, measured more than "
           "%.0f%% apart) ordered as measured cross-validated (%d in sample",
           s.concordant, s.pairs, 100.0 * MOE_ACCURACY_RANK_GAP, s.in_sample_concordant);
    if (s.sweep_n > 0) {
        printf(", %d with the whole sweep left out", s.sweep_concordant);
    }
    printf(")\n");
    printf("# 80%% intervals cover %d of %d measurements (! marks a miss)\n", s.covered,
           s.intervals);
    printf("# memory: %d of %d runs (each of which ran) predicted to fit", s.ran_fit, s.ran);
    int over = 0;
    for (int i = 0; i < n; i++) {
        if (rows[i].ok && !rows[i].fits) {
            printf("%s %s %.1f / %.1f GiB", over++ ? ";" : " (over:", rows[i].id, rows[i].mem_gib,
                   rows[i].mem_cap_gib);
        }
    }
    printf("%s", s.ran_fit < s.ran ? ")" : "");
    if (s.mem_n > 0) {
        printf("; measured peak |error| median %.1f%%, max %.1f%% (n %d)", 100.0 * s.mem_median_abs,
               100.0 * s.mem_max_abs, s.mem_n);
    }
    printf("\n");
    for (int i = 0; i < n; i++) {
        if (rows[i].ok && rows[i].known_miss[0] != '\0') {
            printf("# %s known miss: %s\n", rows[i].id, rows[i].known_miss);
        }
    }
}

int moe_cli_accuracy(int argc, char **argv)
{
    static const struct option longs[] = {{"runs", required_argument, NULL, 'r'},
                                          {"cluster", required_argument, NULL, 'c'},
                                          {"refit", no_argument, NULL, 'R'},
                                          {"json", no_argument, NULL, 'j'},
                                          {"no-sweeps", no_argument, NULL, 'S'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    char def[4096];
    moe_accuracy_default_path(def, sizeof(def));
    const char *files[MAX_FILES];
    int num_files = 0;
    struct moe_accuracy_options o;
    moe_accuracy_options_init(&o);
    o.sweeps = true;
    bool json = false;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "r:c:jh", longs, NULL)) != -1) {
        if (c == 'r' && num_files < MAX_FILES) {
            files[num_files++] = optarg;
        } else if (c == 'c') {
            o.cluster = optarg;
        } else if (c == 'R') {
            o.refit = true;
        } else if (c == 'j') {
            json = true;
        } else if (c == 'S') {
            o.sweeps = false;
        } else if (c == 'h') {
            printf(
                "usage: moefold accuracy [--runs FILE ...] [--cluster PROFILE] [--refit] "
                "[--no-sweeps] [--json]\n"
                "  --runs FILE        measured runs (default %s; repeatable)\n"
                "  --cluster PROFILE  predict every run on this cluster profile (default: each\n"
                "                     run's own cluster)\n"
                "  --refit            cross-validate by refitting without each run (moefold\n"
                "                     fit) instead of the profile's stored errors\n"
                "  --no-sweeps        skip leave-one-sweep-out: by default each sweep (runs of\n"
                "                     one model, cluster and GPU count) of two or more runs is\n"
                "                     also left out whole and its cluster fitted again from the\n"
                "                     priors (not with --cluster)\n"
                "  --json             one JSON object (errors as fractions)\n",
                def);
            return 0;
        } else {
            fprintf(stderr, "moefold accuracy: unknown or incomplete option '%s' (see --help)\n",
                    argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "moefold accuracy: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (num_files == 0) {
        files[num_files++] = def;
    }
    struct moe_run_set set;
    memset(&set, 0, sizeof(set));
    struct moe_diag diag = {0};
    char desc[1024] = "";
    size_t used = 0;
    for (int i = 0; i < num_files; i++) {
        if (moe_runs_read(files[i], &set, &diag) != MOE_OK) {
            fprintf(stderr, "moefold accuracy: %s\n", diag.message);
            moe_runs_free(&set);
            return 1;
        }
        int w = snprintf(desc + used, sizeof(desc) - used, "%s%s", i ? ", " : "", files[i]);
        used += w > 0 && (size_t)w < sizeof(desc) - used ? (size_t)w : 0;
    }
    struct moe_accuracy_row *rows = calloc(MOE_ACCURACY_MAX_RUNS, sizeof(*rows));
    int n = 0;
    int rc = 1;
    if (rows == NULL) {
        fprintf(stderr, "moefold accuracy: out of memory\n");
    } else if (moe_accuracy_run_set(&set, &o, rows, MOE_ACCURACY_MAX_RUNS, &n, &diag) != MOE_OK) {
        fprintf(stderr, "moefold accuracy: %s\n", diag.message);
    } else {
        if (json) {
            print_json(rows, n);
        } else {
            print_table(desc, rows, n);
        }
        rc = 0;
    }
    free(rows);
    moe_runs_free(&set);
    return rc;
}
