/*
 * Published-run accuracy (cli/accuracy.h). Each run's flags go through the same parser and
 * resolver as `moefold predict`, so the table shows what a user pasting that configuration gets.
 */
#include "cli/accuracy.h"

#include "cli/common.h"
#include "topologies/cluster_file.h"
#include "topologies/json_util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB       1073741824.0
#define MAX_WORDS 256

const char *moe_accuracy_default_path(char *buf, size_t len)
{
    char dir[4096];
    (void)snprintf(buf, len, "%s/../tests/data/published_runs.json",
                   moe_cluster_dir(dir, sizeof(dir)));
    return buf;
}

/* Predict one run into row; failures are recorded in the row, not returned. */
static void predict_row(const cJSON *run, struct moe_accuracy_row *row)
{
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(run, "args");
    char line[8192];
    (void)snprintf(line, sizeof(line), "%s", cJSON_IsString(args) ? args->valuestring : "");
    const char *words[MAX_WORDS];
    int nw = 0;
    struct moe_diag diag = {0};
    if (moe_megatron_split_line(line, words, MAX_WORDS, &nw, &diag) != MOE_OK) {
        (void)snprintf(row->error, sizeof(row->error), "%s", diag.message);
        return;
    }
    char gpus[32];
    (void)snprintf(gpus, sizeof(gpus), "%d", row->gpus);
    /* moe_cli_parse_problem takes a main()-style argv; build it from writable copies. */
    char fixed[4][16] = {"accuracy", "--model", "--cluster", "--gpus"};
    char *argv[MAX_WORDS + 8];
    int argc = 0;
    argv[argc++] = fixed[0];
    argv[argc++] = fixed[1];
    argv[argc++] = row->model;
    argv[argc++] = fixed[2];
    argv[argc++] = row->cluster;
    argv[argc++] = fixed[3];
    argv[argc++] = gpus;
    for (int i = 0; i < nw; i++) {
        argv[argc++] = line + (words[i] - line);
    }
    struct moe_cli_problem *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        (void)snprintf(row->error, sizeof(row->error), "out of memory");
        return;
    }
    struct moe_prediction pred;
    if (moe_cli_parse_problem(argc, argv, NULL, NULL, p, NULL, &diag) != MOE_OK ||
        moe_cli_resolve(p, &diag) != MOE_OK ||
        moe_cli_run_predict(p, NULL, &pred, &diag) != MOE_OK) {
        (void)snprintf(row->error, sizeof(row->error), "%s", diag.message);
        free(p);
        return;
    }
    moe_cli_layout_str(&p->lay, row->layout, sizeof(row->layout));
    row->predicted = strcmp(row->metric, "tflops_per_gpu") == 0 ? pred.tflops_per_gpu
                                                                : pred.tokens_per_s_per_gpu;
    row->err_pct = 100.0 * (row->predicted / row->published - 1.0);
    row->step_time_s = pred.step_time_s;
    row->mem_gib = pred.mem.total / GIB;
    row->fits = pred.fits;
    row->ok = true;
    free(p);
}

static enum moe_status
read_row(const cJSON *run, int idx, struct moe_accuracy_row *row, struct moe_diag *diag)
{
    static const char *const keys[] = {"id",     "model",     "cluster",  "gpus",       "args",
                                       "metric", "published", "complete", "known_miss", "note"};
    char where[64];
    (void)snprintf(where, sizeof(where), "runs[%d]", idx);
    MOE_TRY(moe_json_check_keys(run, keys, sizeof(keys) / sizeof(keys[0]), where, diag));
    memset(row, 0, sizeof(*row));
    MOE_TRY(moe_json_get_string(run, "id", true, row->id, sizeof(row->id), where, diag));
    MOE_TRY(moe_json_get_string(run, "model", true, row->model, sizeof(row->model), where, diag));
    MOE_TRY(
        moe_json_get_string(run, "cluster", true, row->cluster, sizeof(row->cluster), where, diag));
    MOE_TRY(moe_json_get_int(run, "gpus", true, 1, 10000000, &row->gpus, where, diag));
    MOE_TRY(
        moe_json_get_string(run, "metric", true, row->metric, sizeof(row->metric), where, diag));
    if (strcmp(row->metric, "tokens_per_s_per_gpu") != 0 &&
        strcmp(row->metric, "tflops_per_gpu") != 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "%s.metric \"%s\": expected tokens_per_s_per_gpu or tflops_per_gpu",
                            where, row->metric);
    }
    MOE_TRY(moe_json_get_double(run, "published", true, 1e-9, 1e12, &row->published, where, diag));
    MOE_TRY(moe_json_get_bool(run, "complete", true, &row->complete, where, diag));
    MOE_TRY(moe_json_get_string(run, "known_miss", false, row->known_miss, sizeof(row->known_miss),
                                where, diag));
    MOE_TRY(moe_json_get_string(run, "note", false, row->note, sizeof(row->note), where, diag));
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(run, "args");
    if (!cJSON_IsString(args)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s.args: expected a string of Megatron flags",
                            where);
    }
    return MOE_OK;
}

enum moe_status moe_accuracy_run(
    const char *path, struct moe_accuracy_row *rows, int max, int *n, struct moe_diag *diag)
{
    *n = 0;
    cJSON *root = NULL;
    MOE_TRY(moe_json_read_file(path, &root, diag));
    enum moe_status st = moe_json_check_format(root, "moefold-published-runs", 1, path, diag);
    static const char *const top[] = {"format", "version", "source", "runs"};
    if (st == MOE_OK) {
        st = moe_json_check_keys(root, top, sizeof(top) / sizeof(top[0]), path, diag);
    }
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(root, "runs");
    if (st == MOE_OK && !cJSON_IsArray(runs)) {
        st = moe_diag_set(diag, MOE_ERR_INVALID, "%s: \"runs\" must be an array", path);
    }
    int idx = 0;
    const cJSON *run = NULL;
    cJSON_ArrayForEach(run, runs)
    {
        if (st != MOE_OK) {
            break;
        }
        if (idx >= max) {
            st = moe_diag_set(diag, MOE_ERR_INVALID, "%s: more than %d runs", path, max);
            break;
        }
        st = read_row(run, idx, &rows[idx], diag);
        if (st == MOE_OK) {
            predict_row(run, &rows[idx]);
            idx++;
        }
    }
    *n = idx;
    cJSON_Delete(root);
    return st;
}
