/*
 * Seed corpora for the fuzz targets, written from the project's real data so they follow the file
 * formats as they change (scripts/fuzz.sh runs this before fuzzing):
 *
 *   gen_seeds OUT_DIR RUNS_FILE
 *
 * writes OUT_DIR/model_json/<preset>.json (moe_model_to_json of every preset) and, for every run of
 * RUNS_FILE (tests/data/published_runs.json) that resolves, OUT_DIR/plan/<id>.json (moe_plan_write,
 * with its closed-form prediction), OUT_DIR/megatron/<id>.txt ("# model cluster gpus" + the flags),
 * OUT_DIR/pp_layout/<id>.bin (pp byte, preset byte, the layout string) and
 * OUT_DIR/published_runs/<id>.json (a runs file holding that run alone) and
 * OUT_DIR/run_file/<id>.json (a run file with the prediction standing in for a measurement). The
 * other corpora are the real files themselves (topologies/ *.json, tests/data/hf/ *.json), copied
 * by the script.
 */
#include "cli/common.h"
#include "topologies/json_util.h"
#include "topologies/model_file.h"
#include "topologies/plan_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_WORDS 512

static int make_dir(const char *out, const char *sub)
{
    char path[4096];
    (void)snprintf(path, sizeof(path), "%s/%s", out, sub);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "gen_seeds: cannot create %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

static int
write_text(const char *out, const char *sub, const char *name, const char *data, size_t len)
{
    char path[4096];
    (void)snprintf(path, sizeof(path), "%s/%s/%s", out, sub, name);
    struct moe_diag diag = {0};
    if (moe_file_write_atomic(path, data, len, &diag) != MOE_OK) {
        fprintf(stderr, "gen_seeds: %s\n", diag.message);
        return 1;
    }
    return 0;
}

static int write_json(const char *out, const char *sub, const char *name, const cJSON *json)
{
    char path[4096];
    (void)snprintf(path, sizeof(path), "%s/%s/%s", out, sub, name);
    struct moe_diag diag = {0};
    if (json == NULL) {
        fprintf(stderr, "gen_seeds: out of memory building %s\n", path);
        return 1;
    }
    if (moe_json_write_file(path, json, &diag) != MOE_OK) {
        fprintf(stderr, "gen_seeds: %s\n", diag.message);
        return 1;
    }
    return 0;
}

static int preset_seeds(const char *out)
{
    int bad = 0;
    for (size_t i = 0; i < moe_cfg_num_presets(); i++) {
        const struct moe_model_cfg *cfg = moe_cfg_preset_at(i);
        char name[MOE_NAME_LEN + 8];
        (void)snprintf(name, sizeof(name), "%s.json", cfg->name);
        cJSON *json = moe_model_to_json(cfg);
        bad |= write_json(out, "model_json", name, json);
        cJSON_Delete(json);
    }
    return bad;
}

/* Index of the preset named name, or 0. */
static unsigned char preset_index(const char *name)
{
    for (size_t i = 0; i < moe_cfg_num_presets(); i++) {
        if (strcmp(moe_cfg_preset_at(i)->name, name) == 0) {
            return (unsigned char)i;
        }
    }
    return 0;
}

/* The problem of one run, resolved, as `moefold predict` would build it. */
static enum moe_status run_problem(
    const cJSON *run, struct moe_cli_problem *p, char *line, size_t line_len, struct moe_diag *diag)
{
    const char *keys[] = {"model", "cluster", "args"};
    const char *vals[3];
    for (int k = 0; k < 3; k++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(run, keys[k]);
        if (!cJSON_IsString(it)) {
            return moe_diag_set(diag, MOE_ERR_INVALID, "run without \"%s\"", keys[k]);
        }
        vals[k] = it->valuestring;
    }
    const cJSON *gpus = cJSON_GetObjectItemCaseSensitive(run, "gpus");
    char gpu_text[32];
    (void)snprintf(gpu_text, sizeof(gpu_text), "%d", cJSON_IsNumber(gpus) ? gpus->valueint : 0);
    (void)snprintf(line, line_len, "%s", vals[2]);
    char *words_copy = strdup(line);
    const char *words[MAX_WORDS];
    int nw = 0;
    char fixed[4][16] = {"seeds", "--model", "--cluster", "--gpus"};
    char model[64];
    char cluster[64];
    (void)snprintf(model, sizeof(model), "%s", vals[0]);
    (void)snprintf(cluster, sizeof(cluster), "%s", vals[1]);
    enum moe_status st = words_copy != NULL
                             ? moe_megatron_split_line(words_copy, words, MAX_WORDS, &nw, diag)
                             : MOE_ERR_NOMEM;
    if (st == MOE_OK) {
        char *argv[MAX_WORDS + 8] = {fixed[0], fixed[1], model,   fixed[2],
                                     cluster,  fixed[3], gpu_text};
        int argc = 7;
        for (int i = 0; i < nw; i++) {
            argv[argc++] = words_copy + (words[i] - words_copy);
        }
        st = moe_cli_parse_problem(argc, argv, NULL, NULL, p, NULL, diag);
        if (st == MOE_OK) {
            st = moe_cli_resolve(p, diag);
        }
    }
    free(words_copy);
    return st;
}

/* A run file laid out as moefold-train writes one, with the prediction standing in for the
 * measurement (no measured file is committed yet). */
static int run_file_seed(const char *out,
                         const char *id,
                         const struct moe_cli_problem *p,
                         const struct moe_plan *plan,
                         const cJSON *pred)
{
    if (pred == NULL) {
        return 1;
    }
    cJSON *run = cJSON_CreateObject();
    cJSON *time = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(pred, "time_s"), true);
    cJSON *mem = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(pred, "memory_gib"), true);
    cJSON *steps = cJSON_CreateArray();
    cJSON *load = cJSON_CreateArray();
    cJSON *tokens = cJSON_CreateArray();
    if (run == NULL || time == NULL || mem == NULL || steps == NULL || load == NULL ||
        tokens == NULL) {
        cJSON_Delete(run);
        cJSON_Delete(time);
        cJSON_Delete(mem);
        cJSON_Delete(steps);
        cJSON_Delete(load);
        cJSON_Delete(tokens);
        return 1;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(mem, "capacity"); /* a prediction-only key */
    double step_s = cJSON_GetObjectItemCaseSensitive(pred, "step_time_s")->valuedouble;
    double tokens_per_step = (double)p->lay.gbs * p->lay.seq_length;
    cJSON_AddStringToObject(run, "format", "moefold-run");
    cJSON_AddNumberToObject(run, "version", 1);
    cJSON_AddStringToObject(run, "model", p->cfg.name);
    cJSON_AddStringToObject(run, "cluster", p->cl.name);
    cJSON_AddStringToObject(run, "backend", "cpu");
    cJSON_AddNumberToObject(run, "num_ranks", p->lay.num_gpus);
    cJSON_AddNumberToObject(run, "steps", 4);
    cJSON_AddNumberToObject(run, "measured_steps", 3);
    cJSON_AddNumberToObject(run, "tokens_per_step", tokens_per_step);
    cJSON_AddNumberToObject(run, "step_time_s", step_s);
    cJSON_AddNumberToObject(run, "tokens_per_s", tokens_per_step / step_s);
    cJSON_AddItemToObject(run, "time_s", time);
    cJSON_AddItemToObject(run, "memory_gib", mem);
    for (int i = 0; i < 4; i++) {
        cJSON *st = cJSON_CreateObject();
        cJSON_AddNumberToObject(st, "loss", 10.5 - 0.25 * i);
        cJSON_AddNumberToObject(st, "time_s", step_s);
        cJSON_AddItemToArray(steps, st);
    }
    cJSON_AddItemToObject(run, "per_step", steps);
    for (int l = 0; l < 3; l++) {
        cJSON_AddItemToArray(load, cJSON_CreateNumber(1.0 + 0.1 * l));
        int counts[4] = {100 + l, 90, 110, 100 - l};
        cJSON_AddItemToArray(tokens, cJSON_CreateIntArray(counts, 4));
    }
    cJSON_AddItemToObject(run, "expert_load_max_over_mean", load);
    cJSON_AddItemToObject(run, "tokens_per_expert", tokens);
    cJSON_AddItemToObject(run, "bytes_sent", cJSON_CreateObject());
    cJSON_AddItemToObject(run, "plan", moe_plan_to_json(plan, NULL));
    char name[64];
    (void)snprintf(name, sizeof(name), "%s.json", id);
    int bad = write_json(out, "run_file", name, run);
    cJSON_Delete(run);
    return bad;
}

static int run_seeds(const char *out, const cJSON *runs_file, const cJSON *run)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(run, "id");
    if (!cJSON_IsString(id)) {
        return 1;
    }
    struct moe_cli_problem *p = calloc(1, sizeof(*p));
    struct moe_plan *plan = calloc(1, sizeof(*plan));
    char *line = malloc(MOE_PLAN_ARGS_LEN);
    char *text = malloc(MOE_PLAN_ARGS_LEN + 256);
    struct moe_diag diag = {0};
    int bad = 1;
    if (p == NULL || plan == NULL || line == NULL || text == NULL ||
        run_problem(run, p, line, MOE_PLAN_ARGS_LEN, &diag) != MOE_OK) {
        fprintf(stderr, "gen_seeds: run %s skipped: %s\n", id->valuestring, diag.message);
        goto out_free;
    }
    char name[64];
    /* Megatron line with its header. */
    int n = snprintf(text, MOE_PLAN_ARGS_LEN + 256, "# %s %s %d\n%s\n", p->cfg.name, p->cl.name,
                     p->num_gpus, line);
    (void)snprintf(name, sizeof(name), "%s.txt", id->valuestring);
    bad = write_text(out, "megatron", name, text, (size_t)n);
    /* Pipeline layout string with pp and preset bytes. */
    text[0] = (char)(unsigned char)(p->lay.pp - 1);
    text[1] = (char)preset_index(p->cfg.name);
    moe_layout_format_pp_string(&p->lay, text + 2, MOE_PLAN_ARGS_LEN);
    (void)snprintf(name, sizeof(name), "%s.bin", id->valuestring);
    bad |= write_text(out, "pp_layout", name, text, 2 + strlen(text + 2));
    /* Plan with its prediction. */
    moe_plan_init(plan);
    plan->model = p->cfg;
    (void)snprintf(plan->cluster, sizeof(plan->cluster), "%s", p->cl.name);
    plan->layout = p->lay;
    plan->options = p->opt;
    struct moe_prediction pred;
    cJSON *pj = moe_cli_run_predict(p, NULL, &pred, &diag) == MOE_OK
                    ? moe_cli_prediction_json(p, &pred)
                    : NULL;
    char path[4096];
    (void)snprintf(path, sizeof(path), "%s/plan/%s.json", out, id->valuestring);
    if (moe_plan_write(path, plan, pj, &diag) != MOE_OK) {
        fprintf(stderr, "gen_seeds: %s\n", diag.message);
        bad = 1;
    }
    bad |= run_file_seed(out, id->valuestring, p, plan, pj);
    cJSON_Delete(pj);
    /* A runs file with this run alone. */
    cJSON *one = cJSON_Duplicate(runs_file, false);
    cJSON *arr = cJSON_CreateArray();
    if (one != NULL && arr != NULL) {
        for (const cJSON *it = runs_file->child; it != NULL; it = it->next) {
            if (strcmp(it->string, "runs") != 0) {
                cJSON_AddItemToObject(one, it->string, cJSON_Duplicate(it, true));
            }
        }
        cJSON_AddItemToArray(arr, cJSON_Duplicate(run, true));
        cJSON_AddItemToObject(one, "runs", arr);
        arr = NULL;
        (void)snprintf(name, sizeof(name), "%s.json", id->valuestring);
        bad |= write_json(out, "published_runs", name, one);
    }
    cJSON_Delete(arr);
    cJSON_Delete(one);
out_free:
    free(text);
    free(line);
    free(plan);
    free(p);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: gen_seeds OUT_DIR RUNS_FILE\n");
        return 2;
    }
    const char *out = argv[1];
    const char *subs[] = {"model_json", "plan",           "megatron",
                          "pp_layout",  "published_runs", "run_file"};
    int bad = mkdir(out, 0755) != 0 && errno != EEXIST;
    if (bad) {
        fprintf(stderr, "gen_seeds: cannot create %s: %s\n", out, strerror(errno));
        return 1;
    }
    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
        bad |= make_dir(out, subs[i]);
    }
    bad |= preset_seeds(out);
    cJSON *root = NULL;
    struct moe_diag diag = {0};
    if (moe_json_read_file(argv[2], &root, &diag) != MOE_OK) {
        fprintf(stderr, "gen_seeds: %s\n", diag.message);
        return 1;
    }
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(root, "runs");
    const cJSON *run = NULL;
    int written = 0;
    cJSON_ArrayForEach(run, runs)
    {
        written += run_seeds(out, root, run) == 0;
    }
    cJSON_Delete(root);
    printf("gen_seeds: %zu model files, %d runs -> plan, megatron, pp_layout, published_runs "
           "seeds in %s\n",
           moe_cfg_num_presets(), written, out);
    return bad != 0 || written == 0;
}
