/*
 * Intervals from a profile's measured errors (cli/uncertainty.h).
 */
#include "cli/uncertainty.h"

#include "topologies/cluster_file.h"
#include "topologies/json_util.h"

#include <gsl/gsl_cdf.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* One run of the profile; *has_loo false when it carries no leave-one-out error (a profile that
 * `moefold fit --no-loo` wrote): such a run gives no interval. */
static enum moe_status read_run(
    const cJSON *j, const char *where, struct moe_unc_run *r, bool *has_loo, struct moe_diag *diag)
{
    static const char *const keys[] = {"id",
                                       "model",
                                       "cluster",
                                       "gpus",
                                       "software",
                                       "precision",
                                       "ep_span",
                                       "step_log_err_fit",
                                       "step_log_err_loo"};
    MOE_TRY(moe_json_check_keys(j, keys, MOE_ARRAY_LEN(keys), where, diag));
    memset(r, 0, sizeof(*r));
    MOE_TRY(moe_json_get_string(j, "id", true, r->id, sizeof(r->id), where, diag));
    MOE_TRY(moe_json_get_string(j, "model", true, r->model, sizeof(r->model), where, diag));
    MOE_TRY(moe_json_get_string(j, "cluster", true, r->cluster, sizeof(r->cluster), where, diag));
    MOE_TRY(moe_json_get_int(j, "gpus", true, 1, 10000000, &r->gpus, where, diag));
    MOE_TRY(
        moe_json_get_string(j, "precision", true, r->precision, sizeof(r->precision), where, diag));
    MOE_TRY(moe_json_get_string(j, "ep_span", true, r->ep_span, sizeof(r->ep_span), where, diag));
    MOE_TRY(
        moe_json_get_double(j, "step_log_err_fit", true, -10.0, 10.0, &r->err_fit, where, diag));
    *has_loo = cJSON_GetObjectItemCaseSensitive(j, "step_log_err_loo") != NULL;
    MOE_TRY(
        moe_json_get_double(j, "step_log_err_loo", false, -10.0, 10.0, &r->err_loo, where, diag));
    return MOE_OK;
}

static enum moe_status
read_section(const cJSON *unc, struct moe_uncertainty *u, struct moe_diag *diag)
{
    const char *where = "cluster.uncertainty";
    if (!cJSON_IsObject(unc)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s: expected an object", where);
    }
    static const char *const keys[] = {"source", "run_sd", "runs", "memory"};
    MOE_TRY(moe_json_check_keys(unc, keys, MOE_ARRAY_LEN(keys), where, diag));
    MOE_TRY(moe_json_get_string(unc, "source", false, u->source, sizeof(u->source), where, diag));
    const cJSON *sd = cJSON_GetObjectItemCaseSensitive(unc, "run_sd");
    if (sd != NULL) {
        if (!cJSON_IsNumber(sd) || !(sd->valuedouble >= 0.0) || sd->valuedouble > 1.0) {
            return moe_diag_set(diag, MOE_ERR_INVALID, "%s.run_sd: expected a number in [0, 1]",
                                where);
        }
        u->run_sd = sd->valuedouble;
    }
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(unc, "runs");
    if (runs != NULL && !cJSON_IsArray(runs)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s.runs: expected an array", where);
    }
    const cJSON *j = NULL;
    cJSON_ArrayForEach(j, runs)
    {
        if (u->num_runs >= MOE_UNC_MAX_RUNS) {
            break;
        }
        char w[64];
        (void)snprintf(w, sizeof(w), "%s.runs[%d]", where, u->num_runs);
        bool has_loo = false;
        MOE_TRY(read_run(j, w, &u->runs[u->num_runs], &has_loo, diag));
        if (has_loo) {
            u->num_runs++;
        } else {
            u->num_fit_only++;
        }
    }
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(unc, "memory");
    if (mem != NULL) {
        static const char *const mkeys[] = {"rel_sd"};
        char w[64];
        (void)snprintf(w, sizeof(w), "%s.memory", where);
        MOE_TRY(moe_json_check_keys(mem, mkeys, MOE_ARRAY_LEN(mkeys), w, diag));
        MOE_TRY(moe_json_get_figure(mem, "rel_sd", true, 0.0, 1.0, &u->mem_rel_sd, w, diag));
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(mem, "rel_sd"), "source");
        (void)snprintf(u->mem_source, sizeof(u->mem_source), "%s",
                       cJSON_IsString(src) ? src->valuestring : "");
        u->has_memory = true;
    }
    return MOE_OK;
}

enum moe_status moe_unc_load(const char *cluster, struct moe_uncertainty *u, struct moe_diag *diag)
{
    memset(u, 0, sizeof(*u));
    cJSON *root = NULL;
    char path[512];
    MOE_TRY(moe_cluster_read_json(cluster, &root, path, sizeof(path), diag));
    const cJSON *unc = cJSON_GetObjectItemCaseSensitive(root, "uncertainty");
    enum moe_status st = unc != NULL ? read_section(unc, u, diag) : MOE_OK;
    if (st != MOE_OK && diag != NULL && strstr(diag->message, path) == NULL) {
        char msg[sizeof(diag->message) + 600];
        (void)snprintf(msg, sizeof(msg), "%s: %s", path, diag->message);
        size_t n = strnlen(msg, sizeof(diag->message) - 1);
        memcpy(diag->message, msg, n);
        diag->message[n] = '\0';
    }
    cJSON_Delete(root);
    return st;
}

/* Student's t quantile for a two-sided interval at `level` with n - 1 degrees of freedom. */
static double t_quantile(double level, int n)
{
    double p = 0.5 + 0.5 * level;
    return n >= 2 ? gsl_cdf_tdist_Pinv(p, (double)(n - 1)) : gsl_cdf_ugaussian_Pinv(p);
}

/* Which runs match: 2 = precision and EP span, 1 = precision, 0 = all. */
static bool matches(const struct moe_unc_run *r, int tier, const char *precision, const char *ep)
{
    return tier == 0 ||
           (strcmp(r->precision, precision) == 0 && (tier == 1 || strcmp(r->ep_span, ep) == 0));
}

static const char *span_words(const char *ep)
{
    if (strcmp(ep, "inter") == 0) {
        return "EP across NVLink domains";
    }
    return strcmp(ep, "intra") == 0 ? "EP inside one NVLink domain" : "no expert parallelism";
}

void moe_unc_step(const struct moe_uncertainty *u,
                  const char *precision,
                  const char *ep_span,
                  const char *exclude_id,
                  double step_s,
                  double level,
                  struct moe_interval *out)
{
    memset(out, 0, sizeof(*out));
    out->level = level;
    out->lo = step_s;
    out->hi = step_s;
    int tier = 2;
    int n = 0;
    double ss = 0.0;
    for (; tier >= 0; tier--) {
        n = 0;
        ss = 0.0;
        for (int i = 0; i < u->num_runs; i++) {
            const struct moe_unc_run *r = &u->runs[i];
            if ((exclude_id != NULL && strcmp(r->id, exclude_id) == 0) ||
                !matches(r, tier, precision, ep_span)) {
                continue;
            }
            ss += r->err_loo * r->err_loo;
            n++;
        }
        if (n >= MOE_UNC_MIN_RUNS || (tier == 0 && n >= 1)) {
            break;
        }
    }
    if (n == 0) {
        (void)snprintf(out->basis, sizeof(out->basis), "%s",
                       u->num_fit_only > 0
                           ? "no interval: the cluster profile was fitted without leave-one-out "
                             "refits (moefold fit --no-loo); fit again without it for intervals"
                           : "no interval: the cluster profile holds no measured runs (moefold "
                             "fit writes them)");
        return;
    }
    /* A few runs that happen to agree do not make the model better than the fit assumed it is
     * on one run (run_sd): the interval's sd never goes below it. */
    double rms = sqrt(ss / n);
    bool floored = rms < u->run_sd;
    double s = (floored ? u->run_sd : rms) * sqrt(1.0 + 1.0 / n);
    double t = t_quantile(level, n);
    out->ok = true;
    out->n = n;
    out->rel_sd = s;
    out->lo = step_s * exp(-t * s);
    out->hi = step_s * exp(t * s);
    const char *like =
        tier == 2 ? "runs like this one" : (tier == 1 ? "runs of this precision" : "all runs");
    char what[128] = "";
    if (tier == 2) {
        (void)snprintf(what, sizeof(what), " (%s, %s)", precision, span_words(ep_span));
    } else if (tier == 1) {
        (void)snprintf(what, sizeof(what), " (%s; fewer than %d share its EP span)", precision,
                       MOE_UNC_MIN_RUNS);
    } else {
        (void)snprintf(what, sizeof(what), " (fewer than %d share its precision)",
                       MOE_UNC_MIN_RUNS);
    }
    (void)snprintf(out->basis, sizeof(out->basis),
                   "%.0f%% interval from the leave-one-out errors of %d %s%s: rms %.1f%%%s",
                   100.0 * level, n, like, what, 100.0 * rms,
                   floored ? " (below the fit's per-run model error: that is used)" : "");
}

void moe_unc_rate(const struct moe_interval *step, double rate, double *lo, double *hi)
{
    *lo = rate;
    *hi = rate;
    if (step->ok && step->lo > 0.0 && step->hi > 0.0) {
        double mid = sqrt(step->lo * step->hi); /* the interval is symmetric in log units */
        *lo = rate * mid / step->hi;
        *hi = rate * mid / step->lo;
    }
}

double moe_unc_tie_band(const struct moe_uncertainty *u, double level, int *pairs)
{
    *pairs = 0;
    if (u->num_runs == 0) {
        return 0.0;
    }
    double ss = 0.0;
    double all = 0.0;
    for (int i = 0; i < u->num_runs; i++) {
        const struct moe_unc_run *a = &u->runs[i];
        all += a->err_loo * a->err_loo;
        for (int j = i + 1; j < u->num_runs; j++) {
            const struct moe_unc_run *b = &u->runs[j];
            if (strcmp(a->model, b->model) == 0 && strcmp(a->cluster, b->cluster) == 0 &&
                a->gpus == b->gpus) {
                double d = a->err_loo - b->err_loo;
                ss += d * d;
                (*pairs)++;
            }
        }
    }
    if (*pairs >= MOE_UNC_MIN_RUNS) {
        return t_quantile(level, *pairs + 1) * sqrt(ss / *pairs);
    }
    *pairs = 0;
    int n = u->num_runs;
    return t_quantile(level, n) * sqrt(2.0) * sqrt(all / n) * sqrt(1.0 + 1.0 / n);
}

void moe_unc_memory(const struct moe_uncertainty *u,
                    double mem_bytes,
                    double level,
                    struct moe_interval *out)
{
    memset(out, 0, sizeof(*out));
    out->level = level;
    out->lo = mem_bytes;
    out->hi = mem_bytes;
    if (!u->has_memory) {
        (void)snprintf(out->basis, sizeof(out->basis), "no memory error figure in the profile");
        return;
    }
    double z = gsl_cdf_ugaussian_Pinv(0.5 + 0.5 * level);
    out->ok = true;
    out->rel_sd = u->mem_rel_sd;
    out->lo = mem_bytes * (1.0 - z * u->mem_rel_sd);
    out->hi = mem_bytes * (1.0 + z * u->mem_rel_sd);
    (void)snprintf(out->basis, sizeof(out->basis),
                   "%.0f%% interval: memory model sd %.1f%% (%.200s)", 100.0 * level,
                   100.0 * u->mem_rel_sd, u->mem_source);
}

double moe_unc_memory_margin(const struct moe_uncertainty *u, double level)
{
    if (!u->has_memory) {
        return 0.0;
    }
    return gsl_cdf_ugaussian_Pinv(0.5 + 0.5 * level) * u->mem_rel_sd;
}
