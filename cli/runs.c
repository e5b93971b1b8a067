/*
 * Measured runs (cli/runs.h): the runs-file reader and the bridge from a run to a resolved
 * problem. Each run's flags go through the same parser and resolver as `moefold predict`, so a
 * run is predicted exactly as a user pasting that configuration would see it.
 */
#include "cli/runs.h"

#include "model/comm_cost.h"
#include "topologies/cluster_file.h"
#include "topologies/json_util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WORDS 512

static const char *const metric_names[] = {"tokens_per_s_per_gpu", "tflops_per_gpu", "step_time_s"};

const char *moe_run_metric_name(enum moe_run_metric m)
{
    return (int)m >= 0 && (size_t)m < MOE_ARRAY_LEN(metric_names) ? metric_names[m] : "unknown";
}

static enum moe_status
read_metric(const cJSON *run, const char *where, enum moe_run_metric *out, struct moe_diag *diag)
{
    char name[32];
    MOE_TRY(moe_json_get_string(run, "metric", true, name, sizeof(name), where, diag));
    for (size_t i = 0; i < MOE_ARRAY_LEN(metric_names); i++) {
        if (strcmp(name, metric_names[i]) == 0) {
            *out = (enum moe_run_metric)i;
            return MOE_OK;
        }
    }
    return moe_diag_set(diag, MOE_ERR_INVALID,
                        "%s.metric \"%s\": expected tokens_per_s_per_gpu, tflops_per_gpu or "
                        "step_time_s",
                        where, name);
}

static enum moe_status
read_run(const cJSON *j, const char *where, struct moe_run *r, struct moe_diag *diag)
{
    static const char *const keys[] = {"id",       "model",      "cluster",    "gpus",
                                       "software", "args",       "metric",     "published",
                                       "complete", "memory_gib", "known_miss", "note"};
    MOE_TRY(moe_json_check_keys(j, keys, MOE_ARRAY_LEN(keys), where, diag));
    memset(r, 0, sizeof(*r));
    MOE_TRY(moe_json_get_string(j, "id", true, r->id, sizeof(r->id), where, diag));
    MOE_TRY(moe_json_get_string(j, "model", false, r->model, sizeof(r->model), where, diag));
    MOE_TRY(moe_json_get_string(j, "cluster", true, r->cluster, sizeof(r->cluster), where, diag));
    MOE_TRY(moe_json_get_int(j, "gpus", true, 1, 10000000, &r->gpus, where, diag));
    MOE_TRY(
        moe_json_get_string(j, "software", false, r->software, sizeof(r->software), where, diag));
    MOE_TRY(read_metric(j, where, &r->metric, diag));
    MOE_TRY(moe_json_get_double(j, "published", true, 1e-9, 1e12, &r->measured, where, diag));
    MOE_TRY(moe_json_get_bool(j, "complete", true, &r->complete, where, diag));
    MOE_TRY(moe_json_get_double(j, "memory_gib", false, 1e-6, 1e6, &r->memory_gib, where, diag));
    MOE_TRY(moe_json_get_string(j, "known_miss", false, r->known_miss, sizeof(r->known_miss), where,
                                diag));
    MOE_TRY(moe_json_get_string(j, "note", false, r->note, sizeof(r->note), where, diag));
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(j, "args");
    if (!cJSON_IsString(args) || args->valuestring == NULL) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s.args: expected a string of Megatron flags",
                            where);
    }
    if (strlen(args->valuestring) >= sizeof(r->args)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s.args: longer than %zu characters", where,
                            sizeof(r->args) - 1);
    }
    (void)snprintf(r->args, sizeof(r->args), "%s", args->valuestring);
    if (r->id[0] == '\0') {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s.id: must not be empty", where);
    }
    return MOE_OK;
}

static enum moe_status
read_releases(const cJSON *root, const char *path, struct moe_run_set *set, struct moe_diag *diag)
{
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(root, "software");
    if (sw == NULL) {
        return MOE_OK;
    }
    if (!cJSON_IsArray(sw)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "%s: \"software\" must be an array of {name, date, stack}", path);
    }
    const cJSON *it = NULL;
    int idx = 0;
    cJSON_ArrayForEach(it, sw)
    {
        char where[160];
        (void)snprintf(where, sizeof(where), "%s: software[%d]", path, idx++);
        static const char *const keys[] = {"name", "date", "stack", "note"};
        MOE_TRY(moe_json_check_keys(it, keys, MOE_ARRAY_LEN(keys), where, diag));
        if (set->num_releases >= (int)MOE_ARRAY_LEN(set->releases)) {
            return moe_diag_set(diag, MOE_ERR_INVALID, "%s: more than %zu releases", where,
                                MOE_ARRAY_LEN(set->releases));
        }
        struct moe_run_release *r = &set->releases[set->num_releases];
        memset(r, 0, sizeof(*r));
        MOE_TRY(moe_json_get_string(it, "name", true, r->name, sizeof(r->name), where, diag));
        MOE_TRY(moe_json_get_string(it, "date", true, r->date, sizeof(r->date), where, diag));
        MOE_TRY(moe_json_get_string(it, "stack", false, r->stack, sizeof(r->stack), where, diag));
        set->num_releases++;
    }
    return MOE_OK;
}

enum moe_status
moe_runs_add(struct moe_run_set *set, const struct moe_run *run, struct moe_diag *diag)
{
    for (int i = 0; i < set->n; i++) {
        if (strcmp(set->runs[i].id, run->id) == 0) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "run id \"%s\" appears twice (%s and %s): ids must be unique",
                                run->id, set->runs[i].file, run->file);
        }
    }
    if (set->n >= MOE_RUNS_MAX) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "more than %d runs", MOE_RUNS_MAX);
    }
    if (set->runs == NULL) {
        set->runs = calloc(MOE_RUNS_MAX, sizeof(*set->runs));
        if (set->runs == NULL) {
            return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the runs");
        }
    }
    set->runs[set->n++] = *run;
    return MOE_OK;
}

enum moe_status moe_runs_read(const char *path, struct moe_run_set *set, struct moe_diag *diag)
{
    cJSON *root = NULL;
    MOE_TRY(moe_json_read_file(path, &root, diag));
    struct moe_run_set added = *set; /* shares the runs array; the count is committed at the end */
    int n0 = set->n;
    enum moe_status st = moe_json_check_format(root, MOE_RUNS_FORMAT, MOE_RUNS_VERSION, path, diag);
    static const char *const top[] = {"format", "version", "source", "software", "runs"};
    if (st == MOE_OK) {
        st = moe_json_check_keys(root, top, MOE_ARRAY_LEN(top), path, diag);
    }
    if (st == MOE_OK) {
        st = read_releases(root, path, &added, diag);
    }
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(root, "runs");
    if (st == MOE_OK && !cJSON_IsArray(runs)) {
        st = moe_diag_set(diag, MOE_ERR_INVALID, "%s: \"runs\" must be an array", path);
    }
    struct moe_run *r = st == MOE_OK ? calloc(1, sizeof(*r)) : NULL;
    if (st == MOE_OK && r == NULL) {
        st = moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory reading %s", path);
    }
    int idx = 0;
    const cJSON *j = NULL;
    cJSON_ArrayForEach(j, runs)
    {
        if (st != MOE_OK) {
            break;
        }
        char where[320];
        (void)snprintf(where, sizeof(where), "%s: runs[%d]", path, idx++);
        st = read_run(j, where, r, diag);
        if (st == MOE_OK) {
            (void)snprintf(r->file, sizeof(r->file), "%s", path);
            st = moe_runs_add(&added, r, diag);
        }
    }
    free(r);
    cJSON_Delete(root);
    if (st != MOE_OK) {
        set->runs = added.runs; /* keep the (possibly new) array; drop what this file added */
        set->n = n0;
        return st;
    }
    *set = added;
    return MOE_OK;
}

void moe_runs_free(struct moe_run_set *set)
{
    free(set->runs);
    memset(set, 0, sizeof(*set));
}

enum moe_status moe_run_problem(const struct moe_run *r,
                                const struct moe_cluster *cl,
                                const char *release,
                                struct moe_cli_problem *p,
                                struct moe_diag *diag)
{
    char line[MOE_RUNS_MAX_ARGS];
    (void)snprintf(line, sizeof(line), "%s", r->args);
    const char *words[MAX_WORDS];
    int nw = 0;
    MOE_TRY(moe_megatron_split_line(line, words, MAX_WORDS, &nw, diag));
    char gpus[32];
    (void)snprintf(gpus, sizeof(gpus), "%d", r->gpus);
    /* moe_cli_parse_problem takes a main()-style argv; build it from writable copies. */
    char fixed[4][16] = {"run", "--model", "--gpus", "--cluster"};
    char model[sizeof(r->model)];
    char cluster[sizeof(r->cluster)];
    (void)snprintf(model, sizeof(model), "%s", r->model);
    (void)snprintf(cluster, sizeof(cluster), "%s", r->cluster);
    char *argv[MAX_WORDS + 8];
    int argc = 0;
    argv[argc++] = fixed[0];
    if (model[0] != '\0') {
        argv[argc++] = fixed[1];
        argv[argc++] = model;
    }
    argv[argc++] = fixed[2];
    argv[argc++] = gpus;
    if (cl == NULL) {
        argv[argc++] = fixed[3];
        argv[argc++] = cluster;
    }
    for (int i = 0; i < nw; i++) {
        argv[argc++] = line + (words[i] - line);
    }
    enum moe_status st = moe_cli_parse_problem(argc, argv, NULL, NULL, p, NULL, diag);
    if (st == MOE_OK && cl == NULL && release != NULL) {
        st = moe_cluster_load_release(r->cluster, release, &p->cl, diag);
    }
    if (st == MOE_OK && cl != NULL) {
        p->cl = *cl;
        p->has_cluster = true;
        (void)snprintf(p->cluster_name, sizeof(p->cluster_name), "%s", r->cluster);
    }
    if (st == MOE_OK) {
        st = moe_cli_resolve(p, diag);
    }
    char head[48];
    (void)snprintf(head, sizeof(head), "run %s: ", r->id);
    if (st != MOE_OK && diag != NULL && strncmp(diag->message, head, strlen(head)) != 0) {
        char msg[sizeof(diag->message) + 48];
        (void)snprintf(msg, sizeof(msg), "run %s: %s", r->id, diag->message);
        size_t n = strnlen(msg, sizeof(diag->message) - 1);
        memcpy(diag->message, msg, n);
        diag->message[n] = '\0';
    }
    return st;
}

double moe_run_predicted(const struct moe_run *r, const struct moe_prediction *pred)
{
    switch (r->metric) {
    case MOE_RUN_TFLOPS_PER_GPU:
        return pred->tflops_per_gpu;
    case MOE_RUN_STEP_TIME_S:
        return pred->step_time_s;
    case MOE_RUN_TOKENS_PER_S_PER_GPU:
    default:
        return pred->tokens_per_s_per_gpu;
    }
}

const char *moe_run_ep_span(const struct moe_cli_problem *p)
{
    if (p->lay.ep <= 1 || !moe_cfg_is_moe(&p->cfg)) {
        return "none";
    }
    struct moe_group_place g;
    moe_comm_group_place(p->lay.ep, p->lay.etp, p->cl.nvlink.domain_gpus, &g);
    return g.num_domains > 1 ? "inter" : "intra";
}

const char *moe_run_precision(const struct moe_cli_problem *p)
{
    switch (moe_recipe_math(p->opt.recipe)) {
    case MOE_MATH_FP8:
        return "fp8";
    case MOE_MATH_FP4:
        return "fp4";
    default:
        return "bf16";
    }
}
