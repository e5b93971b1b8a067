/*
 * Writing a fitted profile (moe_fit_write in cli/fit.h): the base cluster file's JSON tree with
 * the fitted figures replaced, a "software" section (release figures) and an "uncertainty"
 * section (each run's in-sample and leave-one-out error and the attributes predict matches runs
 * on). Everything else in the base file (hardware facts, notes, sections added later) is kept as
 * it is. Figures are written with 4 significant digits, so `make fit` reproduces the shipped files
 * byte for byte.
 */
#include "cli/fit.h"
#include "topologies/cluster_file.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* v rounded to 4 significant digits (a figure's precision; se to 2). */
static double sig(double v, int digits)
{
    char buf[64];
    (void)snprintf(buf, sizeof(buf), "%.*g", digits, v);
    return strtod(buf, NULL);
}

static bool set_number(cJSON *obj, const char *key, double v)
{
    cJSON *n = cJSON_CreateNumber(v);
    if (n == NULL) {
        return false;
    }
    if (cJSON_GetObjectItemCaseSensitive(obj, key) != NULL) {
        return cJSON_ReplaceItemInObjectCaseSensitive(obj, key, n) != 0;
    }
    return cJSON_AddItemToObject(obj, key, n) != 0;
}

static bool set_string(cJSON *obj, const char *key, const char *s)
{
    cJSON *n = cJSON_CreateString(s);
    if (n == NULL) {
        return false;
    }
    if (cJSON_GetObjectItemCaseSensitive(obj, key) != NULL) {
        return cJSON_ReplaceItemInObjectCaseSensitive(obj, key, n) != 0;
    }
    return cJSON_AddItemToObject(obj, key, n) != 0;
}

/* Keys in a fixed order: value, se, source, then the rest (note, prior). */
static bool update_figure(cJSON *fig, double value, double se, const char *source)
{
    cJSON *note = cJSON_DetachItemFromObjectCaseSensitive(fig, "note");
    cJSON *prior = cJSON_DetachItemFromObjectCaseSensitive(fig, "prior");
    cJSON_DeleteItemFromObjectCaseSensitive(fig, "value");
    cJSON_DeleteItemFromObjectCaseSensitive(fig, "se");
    cJSON_DeleteItemFromObjectCaseSensitive(fig, "source");
    bool ok = set_number(fig, "value", sig(value, 4)) && set_number(fig, "se", sig(se, 2)) &&
              set_string(fig, "source", source);
    if (note != NULL) {
        cJSON_AddItemToObject(fig, "note", note);
    }
    if (prior != NULL) {
        cJSON_AddItemToObject(fig, "prior", prior);
    }
    return ok;
}

static bool write_params(cJSON *root, const struct moe_fit_result *res, const char *runs_desc)
{
    for (int j = 0; j < res->num_params; j++) {
        const struct moe_fit_param *fp = &res->params[j];
        if (fp->cluster > 0) {
            continue; /* another cluster's own figure: its own fit writes it */
        }
        cJSON *fig = moe_cluster_figure_json(root, fp->path);
        if (fig == NULL) {
            return false;
        }
        char src[1536];
        double se = fp->se;
        if (fp->constrained && res->opt.from_priors) {
            (void)snprintf(src, sizeof(src),
                           "fit: %s (moefold fit on %s; posterior/prior sd %.2f at the prior)",
                           fp->runs[0] ? fp->runs : "the runs jointly", runs_desc, fp->sd_ratio);
        } else if (fp->constrained) {
            (void)snprintf(src, sizeof(src),
                           "fit: %s (moefold fit on %s, from %s's %.4g, held with the prior's sd; "
                           "posterior/prior sd %.2f); before: %s",
                           fp->runs[0] ? fp->runs : "the runs jointly", runs_desc, res->base,
                           fp->file_value, fp->sd_ratio, fp->file_source);
        } else if (fp->borrowed >= 0) {
            const struct moe_fit_param *sib = &res->params[fp->borrowed];
            (void)snprintf(src, sizeof(src),
                           "as %s (no run on this cluster constrains it; %s has the same prior "
                           "and its fit: %s, se %.2g, on %s; se here: the prior's sd, how far two "
                           "such clusters may differ): %s",
                           res->clusters[sib->cluster], res->clusters[sib->cluster],
                           sib->runs[0] ? sib->runs : "the runs jointly", sib->se, runs_desc,
                           fp->prior.source);
        } else if (res->opt.from_priors) {
            (void)snprintf(src, sizeof(src), "prior (no run constrains it): %s", fp->prior.source);
        } else {
            se = fp->file_se;
            (void)snprintf(src, sizeof(src), "as %s (no run of %s constrains it): %s", res->base,
                           runs_desc, fp->file_source);
        }
        if (!update_figure(fig, fp->value, se, src)) {
            return false;
        }
    }
    return true;
}

static cJSON *release_json(const struct moe_fit_result *res, const struct moe_fit_release *rel)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *figs = cJSON_CreateObject();
    if (o == NULL || figs == NULL) {
        cJSON_Delete(o);
        cJSON_Delete(figs);
        return NULL;
    }
    if (rel->date[0] != '\0') {
        cJSON_AddStringToObject(o, "date", rel->date);
    }
    if (rel->stack[0] != '\0') {
        cJSON_AddStringToObject(o, "stack", rel->stack);
    }
    cJSON_AddStringToObject(o, "runs", rel->runs);
    for (int j = 0; j < res->num_params; j++) {
        if (!rel->has[j] || res->params[j].cluster > 0) {
            continue;
        }
        cJSON *f = cJSON_CreateObject();
        char src[384];
        (void)snprintf(src, sizeof(src),
                       "fit: %s (release offset from the shared value, shrunk by its prior)",
                       rel->runs);
        if (f == NULL) {
            cJSON_Delete(o);
            cJSON_Delete(figs);
            return NULL;
        }
        cJSON_AddNumberToObject(f, "value", sig(rel->value[j], 4));
        cJSON_AddNumberToObject(f, "se", sig(rel->se[j], 2));
        cJSON_AddStringToObject(f, "source", src);
        cJSON_AddItemToObject(figs, res->params[j].path, f);
    }
    cJSON_AddItemToObject(o, "figures", figs);
    return o;
}

static cJSON *software_json(const struct moe_fit_result *res)
{
    cJSON *sw = cJSON_CreateObject();
    cJSON *rels = cJSON_CreateObject();
    if (sw == NULL || rels == NULL) {
        cJSON_Delete(sw);
        cJSON_Delete(rels);
        return NULL;
    }
    cJSON_AddStringToObject(sw, "default", res->default_release);
    cJSON_AddStringToObject(sw, "note",
                            "releases with runs of their own; --software RELEASE applies one, "
                            "'shared' none; the default is the newest release with own figures");
    for (int r = 0; r < res->num_releases; r++) {
        bool own = false;
        for (int j = 0; j < res->num_params; j++) {
            own = own || res->releases[r].has[j];
        }
        if (!own) {
            continue;
        }
        cJSON *o = release_json(res, &res->releases[r]);
        if (o == NULL) {
            cJSON_Delete(sw);
            cJSON_Delete(rels);
            return NULL;
        }
        cJSON_AddItemToObject(rels, res->releases[r].name, o);
    }
    cJSON_AddItemToObject(sw, "releases", rels);
    return sw;
}

/* log(predicted / measured) of the step time for a run's metric prediction. */
static double step_log_err(const struct moe_run *run, double pred)
{
    double e = log(pred / run->measured);
    return run->metric == MOE_RUN_STEP_TIME_S ? e : -e;
}

static cJSON *run_json(const struct moe_fit_result *res, const struct moe_fit_run *fr)
{
    const struct moe_run *run = fr->run;
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) {
        return NULL;
    }
    cJSON_AddStringToObject(o, "id", run->id);
    cJSON_AddStringToObject(o, "model", run->model[0] ? run->model : "megatron flags");
    cJSON_AddStringToObject(o, "cluster", run->cluster);
    cJSON_AddNumberToObject(o, "gpus", run->gpus);
    cJSON_AddStringToObject(o, "software", run->software);
    cJSON_AddStringToObject(o, "precision", fr->precision);
    cJSON_AddStringToObject(o, "ep_span", fr->ep_span);
    cJSON_AddNumberToObject(o, "step_log_err_fit", sig(step_log_err(run, fr->pred_fit), 4));
    if (res->opt.loo) {
        cJSON_AddNumberToObject(o, "step_log_err_loo", sig(step_log_err(run, fr->pred_loo), 4));
    }
    return o;
}

static cJSON *
uncertainty_json(const struct moe_fit_result *res, const cJSON *base_unc, const char *runs_desc)
{
    cJSON *u = cJSON_CreateObject();
    cJSON *runs = cJSON_CreateArray();
    if (u == NULL || runs == NULL) {
        cJSON_Delete(u);
        cJSON_Delete(runs);
        return NULL;
    }
    char src[512];
    (void)snprintf(src, sizeof(src),
                   "moefold fit: %d runs of %s; step_log_err = log(predicted / measured step "
                   "time), in sample (fit) and leave-one-out (loo)",
                   res->num_used, runs_desc);
    cJSON_AddStringToObject(u, "source", src);
    cJSON_AddNumberToObject(u, "run_sd", res->opt.run_sd);
    for (int i = 0; i < res->num_runs; i++) {
        const struct moe_fit_run *fr = &res->runs[i];
        if (!fr->used) {
            continue;
        }
        cJSON *o = run_json(res, fr);
        if (o == NULL) {
            cJSON_Delete(u);
            cJSON_Delete(runs);
            return NULL;
        }
        cJSON_AddItemToArray(runs, o);
    }
    /* Refining a fitted profile with a user's runs: the base's runs and their leave-one-out
     * errors stay, so that an interval still says how the model errs on layouts and models those
     * few runs do not show. */
    int kept = 0;
    const cJSON *old_runs =
        base_unc != NULL ? cJSON_GetObjectItemCaseSensitive(base_unc, "runs") : NULL;
    const cJSON *it = NULL;
    const cJSON *keep_from = res->opt.from_priors ? NULL : old_runs;
    cJSON_ArrayForEach(it, keep_from)
    {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        bool refitted = false;
        for (int i = 0; i < res->num_runs && cJSON_IsString(id); i++) {
            refitted = refitted ||
                       (res->runs[i].used && strcmp(res->runs[i].run->id, id->valuestring) == 0);
        }
        if (!refitted && cJSON_IsString(id)) {
            cJSON_AddItemToArray(runs, cJSON_Duplicate(it, 1));
            kept++;
        }
    }
    if (kept > 0) {
        char more[1024];
        (void)snprintf(more, sizeof(more),
                       "%s; and %d runs of %s's own fit with their errors then (the intervals "
                       "keep them: how the model errs where these runs do not reach)",
                       src, kept, res->base);
        cJSON_ReplaceItemInObjectCaseSensitive(u, "source", cJSON_CreateString(more));
    }
    cJSON_AddItemToObject(u, "runs", runs);
    const cJSON *mem =
        base_unc != NULL ? cJSON_GetObjectItemCaseSensitive(base_unc, "memory") : NULL;
    if (mem != NULL) {
        cJSON_AddItemToObject(u, "memory", cJSON_Duplicate(mem, 1));
    }
    return u;
}

static bool replace_section(cJSON *root, const char *key, cJSON *value)
{
    if (value == NULL) {
        return false;
    }
    if (cJSON_GetObjectItemCaseSensitive(root, key) != NULL) {
        return cJSON_ReplaceItemInObjectCaseSensitive(root, key, value) != 0;
    }
    return cJSON_AddItemToObject(root, key, value) != 0;
}

/* The output file's stem ("mycluster" for dir/mycluster.json), the profile's name. */
static void stem(const char *path, char *out, size_t len)
{
    const char *b = strrchr(path, '/');
    b = b != NULL ? b + 1 : path;
    (void)snprintf(out, len, "%s", b);
    size_t n = strlen(out);
    if (n > 5 && strcmp(out + n - 5, ".json") == 0) {
        out[n - 5] = '\0';
    }
}

enum moe_status moe_fit_write(const struct moe_fit_result *res,
                              const char *runs_desc,
                              const char *out_path,
                              struct moe_diag *diag)
{
    cJSON *root = NULL;
    char path[512];
    MOE_TRY(moe_cluster_read_json(res->base, &root, path, sizeof(path), diag));
    char name[MOE_NAME_LEN];
    stem(out_path, name, sizeof(name));
    const cJSON *unc = cJSON_GetObjectItemCaseSensitive(root, "uncertainty");
    cJSON *u = uncertainty_json(res, unc, runs_desc);
    bool ok = name[0] != '\0' && set_string(root, "name", name) &&
              write_params(root, res, runs_desc) &&
              replace_section(root, "software", software_json(res)) &&
              replace_section(root, "uncertainty", u);
    if (!ok) {
        cJSON_Delete(root);
        return moe_diag_set(diag, MOE_ERR_NOMEM, "cannot build the fitted profile for %s",
                            out_path);
    }
    /* What is written must load: check before replacing anything on disk. */
    struct moe_cluster check;
    enum moe_status st = moe_cluster_from_json(root, out_path, &check, diag);
    if (st == MOE_OK) {
        st = moe_json_write_file(out_path, root, diag);
    }
    cJSON_Delete(root);
    return st;
}
