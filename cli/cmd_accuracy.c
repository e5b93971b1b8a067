/*
 * `moefold accuracy`: predicted vs published throughput for every run in the published-runs file,
 * with the error, whether the source states the whole configuration, and the median / maximum
 * |error| over the complete runs. --json prints the rows as one object.
 */
#include "cli/accuracy.h"
#include "cli/commands.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a;
    double y = *(const double *)b;
    return (x > y) - (x < y);
}

static void print_json(const struct moe_accuracy_row *rows, int n)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(o, "runs");
    for (int i = 0; i < n; i++) {
        const struct moe_accuracy_row *r = &rows[i];
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "id", r->id);
        cJSON_AddStringToObject(j, "model", r->model);
        cJSON_AddStringToObject(j, "cluster", r->cluster);
        cJSON_AddNumberToObject(j, "gpus", r->gpus);
        cJSON_AddStringToObject(j, "metric", r->metric);
        cJSON_AddNumberToObject(j, "published", r->published);
        cJSON_AddBoolToObject(j, "complete", r->complete);
        cJSON_AddBoolToObject(j, "ok", r->ok);
        if (r->ok) {
            cJSON_AddNumberToObject(j, "predicted", r->predicted);
            cJSON_AddNumberToObject(j, "error_pct", r->err_pct);
            cJSON_AddNumberToObject(j, "step_time_s", r->step_time_s);
            cJSON_AddNumberToObject(j, "memory_gib", r->mem_gib);
            cJSON_AddStringToObject(j, "layout", r->layout);
        } else {
            cJSON_AddStringToObject(j, "error", r->error);
        }
        if (r->known_miss[0] != '\0') {
            cJSON_AddStringToObject(j, "known_miss", r->known_miss);
        }
        cJSON_AddItemToArray(arr, j);
    }
    char *s = cJSON_Print(o);
    if (s != NULL) {
        puts(s);
        free(s);
    }
    cJSON_Delete(o);
}

int moe_cli_accuracy(int argc, char **argv)
{
    static const struct option longs[] = {{"runs", required_argument, NULL, 'r'},
                                          {"json", no_argument, NULL, 'j'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    char path[4096];
    moe_accuracy_default_path(path, sizeof(path));
    bool json = false;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "r:jh", longs, NULL)) != -1) {
        if (c == 'r') {
            (void)snprintf(path, sizeof(path), "%s", optarg);
        } else if (c == 'j') {
            json = true;
        } else if (c == 'h') {
            printf("usage: moefold accuracy [--runs FILE] [--json]\n"
                   "  --runs FILE  published runs (default %s)\n",
                   path);
            return 0;
        } else {
            fprintf(stderr, "moefold accuracy: unknown or incomplete option '%s'\n",
                    argv[optind - 1]);
            return 2;
        }
    }
    struct moe_accuracy_row *rows = calloc(MOE_ACCURACY_MAX_RUNS, sizeof(*rows));
    if (rows == NULL) {
        fprintf(stderr, "moefold accuracy: out of memory\n");
        return 1;
    }
    int n = 0;
    struct moe_diag diag = {0};
    if (moe_accuracy_run(path, rows, MOE_ACCURACY_MAX_RUNS, &n, &diag) != MOE_OK) {
        fprintf(stderr, "moefold accuracy: %s\n", diag.message);
        free(rows);
        return 1;
    }
    if (json) {
        print_json(rows, n);
        free(rows);
        return 0;
    }
    printf("# predicted vs published (%s)\n", path);
    printf("%-4s %-16s %-12s %5s %-21s %10s %10s %8s %8s  %s\n", "id", "model", "cluster", "gpus",
           "metric", "published", "predicted", "error", "mem_GiB", "config");
    double errs[MOE_ACCURACY_MAX_RUNS];
    int ne = 0;
    for (int i = 0; i < n; i++) {
        const struct moe_accuracy_row *r = &rows[i];
        if (!r->ok) {
            printf("%-4s %-16s %-12s %5d error: %s\n", r->id, r->model, r->cluster, r->gpus,
                   r->error);
            continue;
        }
        const char *tag =
            !r->complete ? "incomplete" : (r->known_miss[0] ? "complete, known miss" : "complete");
        printf("%-4s %-16s %-12s %5d %-21s %10.0f %10.0f %+7.1f%% %8.1f  %s\n", r->id, r->model,
               r->cluster, r->gpus, r->metric, r->published, r->predicted, r->err_pct, r->mem_gib,
               tag);
        if (r->complete && r->known_miss[0] == '\0') {
            errs[ne++] = fabs(r->err_pct);
        }
    }
    if (ne > 0) {
        qsort(errs, (size_t)ne, sizeof(double), cmp_double);
        double median = ne % 2 ? errs[ne / 2] : 0.5 * (errs[ne / 2 - 1] + errs[ne / 2]);
        printf("# complete runs (without known misses): %d, median |error| %.1f%%, max |error| "
               "%.1f%%\n",
               ne, median, errs[ne - 1]);
    }
    for (int i = 0; i < n; i++) {
        if (rows[i].ok && rows[i].known_miss[0] != '\0') {
            printf("# %s known miss: %s\n", rows[i].id, rows[i].known_miss);
        }
    }
    free(rows);
    return 0;
}
