/*
 * Reader of run files (topologies/run_file.h).
 */
#include "topologies/run_file.h"

#include "topologies/json_util.h"

#include <stdlib.h>
#include <string.h>

#define GIB 1073741824.0

/* time_s: every phase plus ep_comm and exposed_comm (required), unattributed (optional: run files
 * before it had none). */
static enum moe_status
read_phases(const cJSON *o, const char *w, struct moe_run *run, struct moe_diag *diag)
{
    static const char *const keys[] = {"compute",      "expert_gemm", "dispatch",  "combine",
                                       "tp_comm",      "cp_comm",     "ep_comm",   "pp_comm",
                                       "dp_comm",      "pp_bubble",   "optimizer", "host_overhead",
                                       "exposed_comm", "unattributed"};
    struct moe_phase_times *t = &run->time;
    double *dst[] = {&t->compute,      &t->expert_gemm,     &t->dispatch,  &t->combine,
                     &t->tp_comm,      &t->cp_comm,         &t->ep_comm,   &t->pp_comm,
                     &t->dp_comm,      &t->pp_bubble,       &t->optimizer, &t->host_overhead,
                     &t->exposed_comm, &run->unattributed_s};
    MOE_TRY(moe_json_check_keys(o, keys, MOE_ARRAY_LEN(keys), w, diag));
    for (size_t i = 0; i < MOE_ARRAY_LEN(keys); i++) {
        bool required = i + 1 < MOE_ARRAY_LEN(keys);
        MOE_TRY(moe_json_get_double(o, keys[i], required, 0.0, 1e9, dst[i], w, diag));
    }
    return MOE_OK;
}

/* The optional wait_s: each phase's wait share (engine/report.c). */
static enum moe_status
read_waits(const cJSON *o, const char *w, struct moe_run *run, struct moe_diag *diag)
{
    if (o == NULL) {
        return MOE_OK;
    }
    if (!cJSON_IsObject(o)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s: expected an object", w);
    }
    const char *keys[MOE_NUM_PHASES];
    for (int p = 0; p < MOE_NUM_PHASES; p++) {
        keys[p] = moe_phase_name((enum moe_phase)p);
    }
    MOE_TRY(moe_json_check_keys(o, keys, MOE_NUM_PHASES, w, diag));
    struct moe_phase_times *t = &run->wait;
    double *dst[MOE_NUM_PHASES] = {&t->compute,   &t->expert_gemm, &t->dispatch,     &t->combine,
                                   &t->tp_comm,   &t->cp_comm,     &t->pp_comm,      &t->dp_comm,
                                   &t->pp_bubble, &t->optimizer,   &t->host_overhead};
    for (int p = 0; p < MOE_NUM_PHASES; p++) {
        MOE_TRY(moe_json_get_double(o, keys[p], false, 0.0, 1e9, dst[p], w, diag));
    }
    run->has_wait = true;
    return MOE_OK;
}

static enum moe_status
read_memory(const cJSON *o, const char *w, struct moe_mem_bytes *m, struct moe_diag *diag)
{
    static const char *const keys[] = {"weights", "grads", "optimizer",   "activations",
                                       "buffers", "total", "host_offload"};
    double v[7] = {0};
    MOE_TRY(moe_json_check_keys(o, keys, MOE_ARRAY_LEN(keys), w, diag));
    for (size_t i = 0; i < MOE_ARRAY_LEN(keys); i++) {
        MOE_TRY(moe_json_get_double(o, keys[i], true, 0.0, 1e9, &v[i], w, diag));
    }
    m->weights = v[0] * GIB;
    m->grads = v[1] * GIB;
    m->optimizer = v[2] * GIB;
    m->activations = v[3] * GIB;
    m->buffers = v[4] * GIB;
    m->total = v[5] * GIB;
    m->host_offload = v[6] * GIB;
    return MOE_OK;
}

/* The optional "device" object of GPU runs: name, memory figures, GEMM math, CUDA graphs. */
static enum moe_status
read_device(const cJSON *o, const char *w, struct moe_run *run, struct moe_diag *diag)
{
    if (o == NULL) {
        return MOE_OK;
    }
    static const char *const keys[] = {"name", "memory_total_gib", "memory_used_gib", "gemm_math",
                                       "cuda_graphs"};
    MOE_TRY(moe_json_check_keys(o, keys, MOE_ARRAY_LEN(keys), w, diag));
    MOE_TRY(
        moe_json_get_string(o, "name", false, run->device_name, sizeof(run->device_name), w, diag));
    double total = 0.0, used = 0.0;
    MOE_TRY(moe_json_get_double(o, "memory_total_gib", false, 0.0, 1e9, &total, w, diag));
    MOE_TRY(moe_json_get_double(o, "memory_used_gib", false, 0.0, 1e9, &used, w, diag));
    run->device_total_bytes = total * GIB;
    run->device_used_bytes = used * GIB;
    return MOE_OK;
}

/* The optional "host_probe" object of CPU runs: the host speed probe's GEMM shape and time (the
 * median over the probes; runs before 2026-12-03 wrote the mean there and no time_us_mean)
 * (engine/report.c add_host_probe). */
static enum moe_status
read_host_probe(const cJSON *o, const char *w, struct moe_run *run, struct moe_diag *diag)
{
    if (o == NULL) {
        return MOE_OK;
    }
    static const char *const keys[] = {"gemm_mnk", "time_us",     "time_us_mean", "times_us",
                                       "calls",    "rank_spread", "evict_bytes"};
    MOE_TRY(moe_json_check_keys(o, keys, MOE_ARRAY_LEN(keys), w, diag));
    const cJSON *mnk = cJSON_GetObjectItemCaseSensitive(o, "gemm_mnk");
    if (!cJSON_IsArray(mnk) || cJSON_GetArraySize(mnk) != 3) {
        return moe_diag_set(diag, MOE_ERR_PARSE, "%s.gemm_mnk: expected an array of 3 integers", w);
    }
    for (int i = 0; i < 3; i++) {
        const cJSON *d = cJSON_GetArrayItem(mnk, i);
        if (!cJSON_IsNumber(d) || !(d->valuedouble >= 1.0 && d->valuedouble <= 65536.0) ||
            d->valuedouble != (double)(int)d->valuedouble) {
            return moe_diag_set(diag, MOE_ERR_PARSE,
                                "%s.gemm_mnk[%d]: expected an integer in [1, 65536]", w, i);
        }
        run->probe_mnk[i] = (int)d->valuedouble;
    }
    MOE_TRY(moe_json_get_double(o, "time_us", true, 1e-3, 1e9, &run->probe_us, w, diag));
    run->probe_rank_spread = -1.0;
    MOE_TRY(
        moe_json_get_double(o, "rank_spread", false, 0.0, 100.0, &run->probe_rank_spread, w, diag));
    double calls = 0.0, evict = 0.0, mean = 0.0; /* checked, not kept: compare reads the shape
                                                     and the median */
    MOE_TRY(moe_json_get_double(o, "time_us_mean", false, 0.0, 1e9, &mean, w, diag));
    MOE_TRY(moe_json_get_double(o, "calls", false, 0.0, 1e12, &calls, w, diag));
    MOE_TRY(moe_json_get_double(o, "evict_bytes", false, 0.0, 1e15, &evict, w, diag));
    return MOE_OK;
}

/* The optional "buffers_detail_gib" object: the buffers category's parts (engine/report.c). */
static enum moe_status
read_buffers_detail(const cJSON *o, const char *w, struct moe_run *run, struct moe_diag *diag)
{
    if (o == NULL) {
        return MOE_OK;
    }
    static const char *const keys[] = {"dispatch",        "temporaries", "recompute_scratch",
                                       "offload_staging", "pipeline",    "other"};
    struct moe_run_buffers_detail *b = &run->buffers_detail;
    double *dst[] = {&b->dispatch,        &b->temporaries, &b->recompute_scratch,
                     &b->offload_staging, &b->pipeline,    &b->other};
    MOE_TRY(moe_json_check_keys(o, keys, MOE_ARRAY_LEN(keys), w, diag));
    for (size_t i = 0; i < MOE_ARRAY_LEN(keys); i++) {
        double v = 0.0;
        MOE_TRY(moe_json_get_double(o, keys[i], true, 0.0, 1e9, &v, w, diag));
        *dst[i] = v * GIB;
    }
    run->has_buffers_detail = true;
    return MOE_OK;
}

static enum moe_status
read_losses(const cJSON *arr, const char *w, struct moe_run *run, struct moe_diag *diag)
{
    if (!cJSON_IsArray(arr)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s.per_step: expected an array", w);
    }
    int n = 0;
    const cJSON *it = NULL;
    cJSON_ArrayForEach(it, arr)
    {
        double loss = 0.0;
        MOE_TRY(moe_json_get_double(it, "loss", true, -1e30, 1e30, &loss, "per_step[]", diag));
        if (n == 0) {
            run->first_loss = loss;
        }
        run->final_loss = loss;
        n++;
    }
    return MOE_OK;
}

/* A per-MoE-layer array of loads >= 0 into v; *n entries (0 when the key is absent). */
static enum moe_status
read_load(const cJSON *arr, const char *key, double *v, int *n, struct moe_diag *diag)
{
    *n = 0;
    if (arr == NULL) {
        return MOE_OK;
    }
    if (!cJSON_IsArray(arr)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s: expected an array", key);
    }
    const cJSON *it = NULL;
    cJSON_ArrayForEach(it, arr)
    {
        if (*n >= MOE_RUN_MAX_MOE_LAYERS || !cJSON_IsNumber(it) || it->valuedouble < 0.0) {
            return moe_diag_set(diag, MOE_ERR_INVALID, "%s: expected at most %d numbers >= 0", key,
                                MOE_RUN_MAX_MOE_LAYERS);
        }
        v[(*n)++] = it->valuedouble;
    }
    return MOE_OK;
}

static enum moe_status
read_root(const cJSON *root, const char *path, struct moe_run *run, struct moe_diag *diag)
{
    static const char *const keys[] = {"format",
                                       "version",
                                       "model",
                                       "cluster",
                                       "backend",
                                       "num_ranks",
                                       "ranks_per_node",
                                       "layout",
                                       "steps",
                                       "measured_steps",
                                       "tokens_per_step",
                                       "step_time_s",
                                       "tokens_per_s",
                                       "tokens_per_s_per_rank",
                                       "critical_rank",
                                       "critical_stage",
                                       "time_s",
                                       "wait_s",
                                       "wait_measured",
                                       "timeline",
                                       "kernel_s",
                                       "ran",
                                       "plan_differences",
                                       "phase_definitions",
                                       "per_step",
                                       "memory_gib",
                                       "buffers_detail_gib",
                                       "memory_rank",
                                       "expert_rows_factor",
                                       "expert_active_fraction",
                                       "peak_rss_gib",
                                       "offload_copy_s",
                                       "dropped_token_fraction",
                                       "bytes_sent",
                                       "tokens_per_expert",
                                       "expert_load_max_over_mean",
                                       "expert_load_rank_max_over_mean",
                                       "device",
                                       "host_probe",
                                       "plan"};
    MOE_TRY(moe_json_check_format(root, MOE_RUN_FILE_FORMAT, MOE_RUN_FILE_VERSION, path, diag));
    MOE_TRY(moe_json_check_keys(root, keys, MOE_ARRAY_LEN(keys), path, diag));
    MOE_TRY(moe_json_get_string(root, "model", false, run->model, sizeof(run->model), path, diag));
    MOE_TRY(moe_json_get_string(root, "cluster", false, run->cluster, sizeof(run->cluster), path,
                                diag));
    MOE_TRY(moe_json_get_string(root, "backend", false, run->backend, sizeof(run->backend), path,
                                diag));
    MOE_TRY(moe_json_get_int(root, "num_ranks", true, 1, 1 << 24, &run->num_ranks, path, diag));
    MOE_TRY(moe_json_get_int(root, "ranks_per_node", false, 1, 1 << 24, &run->ranks_per_node, path,
                             diag));
    MOE_TRY(moe_json_get_int(root, "steps", true, 1, 1 << 30, &run->steps, path, diag));
    MOE_TRY(moe_json_get_int(root, "measured_steps", true, 1, 1 << 30, &run->measured_steps, path,
                             diag));
    MOE_TRY(moe_json_get_double(root, "tokens_per_step", true, 0.0, 1e15, &run->tokens_per_step,
                                path, diag));
    MOE_TRY(
        moe_json_get_double(root, "step_time_s", true, 0.0, 1e9, &run->step_time_s, path, diag));
    MOE_TRY(
        moe_json_get_double(root, "tokens_per_s", true, 0.0, 1e15, &run->tokens_per_s, path, diag));
    MOE_TRY(read_phases(cJSON_GetObjectItemCaseSensitive(root, "time_s"), "time_s", run, diag));
    MOE_TRY(read_waits(cJSON_GetObjectItemCaseSensitive(root, "wait_s"), "wait_s", run, diag));
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "wait_measured");
    if (wm != NULL && !cJSON_IsBool(wm)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s: wait_measured: expected true or false",
                            path);
    }
    run->has_wait = run->has_wait && (wm == NULL || cJSON_IsTrue(wm));
    run->critical_stage = -1;
    if (cJSON_GetObjectItemCaseSensitive(root, "critical_stage") != NULL) {
        MOE_TRY(moe_json_get_int(root, "critical_stage", true, 0, 1 << 20, &run->critical_stage,
                                 path, diag));
    }
    const char *trees[] = {"timeline", "ran", "kernel_s"};
    for (size_t i = 0; i < MOE_ARRAY_LEN(trees); i++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, trees[i]);
        if (t != NULL && !cJSON_IsObject(t)) {
            return moe_diag_set(diag, MOE_ERR_INVALID, "%s: %s: expected an object", path,
                                trees[i]);
        }
    }
    const cJSON *diffs = cJSON_GetObjectItemCaseSensitive(root, "plan_differences");
    if (diffs != NULL) {
        const cJSON *it = NULL;
        if (!cJSON_IsArray(diffs)) {
            return moe_diag_set(diag, MOE_ERR_INVALID, "%s: plan_differences: expected an array",
                                path);
        }
        cJSON_ArrayForEach(it, diffs)
        {
            if (!cJSON_IsString(it)) {
                return moe_diag_set(diag, MOE_ERR_INVALID, "%s: plan_differences: expected strings",
                                    path);
            }
        }
    }
    MOE_TRY(read_memory(cJSON_GetObjectItemCaseSensitive(root, "memory_gib"), "memory_gib",
                        &run->mem, diag));
    double rss = 0.0;
    MOE_TRY(moe_json_get_double(root, "peak_rss_gib", false, 0.0, 1e9, &rss, path, diag));
    run->peak_rss_bytes = rss * GIB;
    MOE_TRY(read_buffers_detail(cJSON_GetObjectItemCaseSensitive(root, "buffers_detail_gib"),
                                "buffers_detail_gib", run, diag));
    MOE_TRY(moe_json_get_double(root, "expert_rows_factor", false, 0.0, 1e9,
                                &run->expert_rows_factor, path, diag));
    MOE_TRY(moe_json_get_double(root, "expert_active_fraction", false, 0.0, 1.0,
                                &run->expert_active_fraction, path, diag));
    MOE_TRY(read_device(cJSON_GetObjectItemCaseSensitive(root, "device"), "device", run, diag));
    MOE_TRY(read_host_probe(cJSON_GetObjectItemCaseSensitive(root, "host_probe"), "host_probe", run,
                            diag));
    MOE_TRY(read_losses(cJSON_GetObjectItemCaseSensitive(root, "per_step"), path, run, diag));
    MOE_TRY(read_load(cJSON_GetObjectItemCaseSensitive(root, "expert_load_max_over_mean"),
                      "expert_load_max_over_mean", run->load_max_over_mean, &run->num_moe_layers,
                      diag));
    MOE_TRY(read_load(cJSON_GetObjectItemCaseSensitive(root, "expert_load_rank_max_over_mean"),
                      "expert_load_rank_max_over_mean", run->load_rank_max_over_mean,
                      &run->num_rank_load_layers, diag));
    return MOE_OK;
}

enum moe_status moe_run_read(const char *path, struct moe_run *out, struct moe_diag *diag)
{
    memset(out, 0, sizeof(*out));
    cJSON *root = NULL;
    MOE_TRY(moe_json_read_file(path, &root, diag));
    enum moe_status st = read_root(root, path, out, diag);
    if (st == MOE_OK) {
        out->tokens_per_expert = cJSON_DetachItemFromObjectCaseSensitive(root, "tokens_per_expert");
        out->plan = cJSON_DetachItemFromObjectCaseSensitive(root, "plan");
        out->timeline = cJSON_DetachItemFromObjectCaseSensitive(root, "timeline");
        out->kernel_s = cJSON_DetachItemFromObjectCaseSensitive(root, "kernel_s");
        out->ran = cJSON_DetachItemFromObjectCaseSensitive(root, "ran");
        out->plan_differences = cJSON_DetachItemFromObjectCaseSensitive(root, "plan_differences");
    }
    cJSON_Delete(root);
    return st;
}

void moe_run_fini(struct moe_run *run)
{
    if (run == NULL) {
        return;
    }
    cJSON_Delete(run->tokens_per_expert);
    cJSON_Delete(run->plan);
    cJSON_Delete(run->timeline);
    cJSON_Delete(run->kernel_s);
    cJSON_Delete(run->ran);
    cJSON_Delete(run->plan_differences);
    run->tokens_per_expert = NULL;
    run->plan = NULL;
    run->timeline = NULL;
    run->kernel_s = NULL;
    run->ran = NULL;
    run->plan_differences = NULL;
}
