/*
 * Accuracy against measured runs (cli/accuracy.h). Each run's flags go through the same parser
 * and resolver as `moefold predict` (cli/runs.c), on the cluster profile with the run's software
 * release applied when the profile knows it; the cross-validated side comes from the profile's
 * stored leave-one-out errors (cli/uncertainty.h) or a live refit (cli/fit.h).
 */
#include "cli/accuracy.h"

#include "cli/uncertainty.h"
#include "topologies/cluster_file.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB 1073741824.0

void moe_accuracy_options_init(struct moe_accuracy_options *o)
{
    memset(o, 0, sizeof(*o));
    moe_fit_options_init(&o->fit);
    o->fit.from_priors = true; /* --refit: as make fit does (the stored leave-one-out's fit) */
}

const char *moe_accuracy_default_path(char *buf, size_t len)
{
    char dir[4096];
    (void)snprintf(buf, len, "%s/../tests/data/published_runs.json",
                   moe_cluster_dir(dir, sizeof(dir)));
    return buf;
}

/* The release to predict run r with: its own when the profile knows it, else none ("shared")
 * when it names one, else the profile's default. */
static const char *release_for(const struct moe_run *r, const char *cluster)
{
    if (r->software[0] == '\0') {
        return NULL;
    }
    cJSON *root = NULL;
    const char *rel = MOE_CLUSTER_SHARED;
    if (moe_cluster_read_json(cluster, &root, NULL, 0, NULL) == MOE_OK &&
        moe_cluster_find_release(root, r->software) != NULL) {
        rel = r->software;
    }
    cJSON_Delete(root);
    return rel;
}

/* A metric value from a step-time ratio: rates scale inversely, step times directly. */
static double metric_scaled(const struct moe_run *r, double value, double step_ratio)
{
    return r->metric == MOE_RUN_STEP_TIME_S ? value * step_ratio : value / step_ratio;
}

static void
fill_row_head(const struct moe_run *r, const char *cluster, struct moe_accuracy_row *row)
{
    memset(row, 0, sizeof(*row));
    (void)snprintf(row->id, sizeof(row->id), "%s", r->id);
    (void)snprintf(row->model, sizeof(row->model), "%s", r->model[0] ? r->model : "(flags)");
    (void)snprintf(row->cluster, sizeof(row->cluster), "%s", cluster);
    (void)snprintf(row->software, sizeof(row->software), "%s", r->software);
    (void)snprintf(row->metric, sizeof(row->metric), "%s", moe_run_metric_name(r->metric));
    (void)snprintf(row->known_miss, sizeof(row->known_miss), "%s", r->known_miss);
    (void)snprintf(row->note, sizeof(row->note), "%s", r->note);
    row->gpus = r->gpus;
    row->published = r->measured;
    row->complete = r->complete;
}

/* The stored leave-one-out error of run r in profile u (log step ratio), if u was fitted to it. */
static bool stored_loo(const struct moe_uncertainty *u, const struct moe_run *r, double *e)
{
    for (int i = 0; i < u->num_runs; i++) {
        const struct moe_unc_run *x = &u->runs[i];
        if (strcmp(x->id, r->id) == 0 && x->gpus == r->gpus &&
            strcmp(x->model, r->model[0] ? r->model : "megatron flags") == 0) {
            *e = x->err_loo;
            return true;
        }
    }
    return false;
}

/* Predict one run into row (failures are recorded in the row, not returned). */
static void predict_row(const struct moe_run *r,
                        const char *cluster,
                        const struct moe_fit_result *refit,
                        int refit_idx,
                        struct moe_accuracy_row *row)
{
    fill_row_head(r, cluster, row);
    struct moe_diag d = {0};
    struct moe_cli_problem *p = calloc(1, sizeof(*p));
    struct moe_uncertainty *u = calloc(1, sizeof(*u));
    struct moe_cluster cl;
    struct moe_load_stats load;
    struct moe_prediction pred;
    bool used = false;
    if (p == NULL || u == NULL) {
        (void)snprintf(row->error, sizeof(row->error), "out of memory");
        goto out;
    }
    if (moe_cluster_load_release(cluster, release_for(r, cluster), &cl, &d) != MOE_OK ||
        moe_run_problem(r, &cl, NULL, p, &d) != MOE_OK ||
        moe_cli_load_stats(p, &load, &used, &d) != MOE_OK ||
        moe_cli_run_predict(p, used ? &load : NULL, &pred, &d) != MOE_OK ||
        moe_unc_load(cluster, u, &d) != MOE_OK) {
        (void)snprintf(row->error, sizeof(row->error), "%s", d.message);
        goto out;
    }
    moe_cli_layout_str(&p->lay, row->layout, sizeof(row->layout));
    row->predicted = moe_run_predicted(r, &pred);
    row->err_pct = 100.0 * (row->predicted / row->published - 1.0);
    row->step_time_s = pred.step_time_s;
    row->mem_gib = pred.mem.total / GIB;
    row->mem_cap_gib = pred.mem.capacity / GIB;
    row->mem_measured_gib = r->memory_gib;
    row->fits = pred.fits;
    row->ok = true;
    /* Cross-validated: by a fit without this run, or as predicted when the profile never saw it. */
    double e = 0.0;
    double step_cv = pred.step_time_s;
    if (refit != NULL && refit_idx >= 0 && refit->runs[refit_idx].used) {
        const struct moe_fit_run *fr = &refit->runs[refit_idx];
        row->cv_predicted = fr->pred_loo;
        step_cv = fr->step_s * (r->metric == MOE_RUN_STEP_TIME_S ? fr->pred_loo / fr->pred_fit
                                                                 : fr->pred_fit / fr->pred_loo);
        (void)snprintf(row->cv_basis, sizeof(row->cv_basis), "leave-one-out (refit)");
    } else if (refit == NULL && stored_loo(u, r, &e)) {
        double meas_step = r->metric == MOE_RUN_STEP_TIME_S
                               ? r->measured
                               : pred.step_time_s * row->predicted / row->published;
        step_cv = meas_step * exp(e);
        row->cv_predicted = metric_scaled(r, row->published, exp(e));
        (void)snprintf(row->cv_basis, sizeof(row->cv_basis), "leave-one-out");
    } else {
        row->cv_predicted = row->predicted;
        (void)snprintf(row->cv_basis, sizeof(row->cv_basis), "unseen by the profile");
    }
    row->has_cv = true;
    row->cv_err_pct = 100.0 * (row->cv_predicted / row->published - 1.0);
    struct moe_interval iv;
    moe_unc_step(u, moe_run_precision(p), moe_run_ep_span(p), r->id, step_cv, MOE_UNC_LEVEL, &iv);
    if (iv.ok) {
        row->has_interval = true;
        double a = metric_scaled(r, row->cv_predicted, iv.lo / step_cv);
        double b = metric_scaled(r, row->cv_predicted, iv.hi / step_cv);
        row->lo = fmin(a, b);
        row->hi = fmax(a, b);
        row->covered = row->published >= row->lo && row->published <= row->hi;
    }
out:
    free(u);
    free(p);
}

/* Live leave-one-out: one fit per distinct cluster of the runs; res[i] for run i's cluster. */
static enum moe_status refit_all(const struct moe_run_set *set,
                                 const struct moe_accuracy_options *o,
                                 struct moe_fit_result *fits,
                                 int *which,
                                 int *num_fits,
                                 struct moe_diag *diag)
{
    *num_fits = 0;
    for (int i = 0; i < set->n; i++) {
        const char *c = o->cluster != NULL ? o->cluster : set->runs[i].cluster;
        which[i] = -1;
        for (int k = 0; k < *num_fits; k++) {
            if (strcmp(fits[k].base, c) == 0) {
                which[i] = k;
            }
        }
        if (which[i] >= 0) {
            continue;
        }
        struct moe_fit_options fo = o->fit;
        fo.loo = true;
        struct moe_diag d = {0};
        enum moe_status st = moe_fit(c, set, &fo, &fits[*num_fits], &d);
        if (st != MOE_OK) {
            /* No usable run of that generation: its runs are predicted without a refit. */
            if (st == MOE_ERR_NOMEM) {
                *diag = d;
                return st;
            }
            memset(&fits[*num_fits], 0, sizeof(fits[*num_fits]));
            (void)snprintf(fits[*num_fits].base, sizeof(fits[*num_fits].base), "%s", c);
        }
        which[i] = (*num_fits)++;
    }
    return MOE_OK;
}

/* Runs a and b belong to one sweep: one model (preset or flags), cluster and GPU count. */
static bool same_sweep(const struct moe_run *a, const struct moe_run *b)
{
    return strcmp(a->model, b->model) == 0 && strcmp(a->cluster, b->cluster) == 0 &&
           a->gpus == b->gpus && (a->model[0] != '\0' || strcmp(a->args, b->args) == 0);
}

/*
 * Leave-one-sweep-out: the runs of one sweep (same_sweep) share a model, a cluster and a GPU
 * count, so leaving one of them out still fits the others -- an optimistic test of a layout the
 * fit has not seen on a model and cluster it has. Each sweep of two or more runs is left out whole
 * (its runs predicted, not fitted: marked as misses in a copy of the set) and the run's cluster
 * fitted again without it (o->fit: from the priors, as make fit); a sweep of one run keeps its
 * leave-one-out prediction.
 */
static enum moe_status sweep_out(const struct moe_run_set *set,
                                 const struct moe_accuracy_options *o,
                                 struct moe_accuracy_row *rows,
                                 struct moe_diag *diag)
{
    enum moe_status st = MOE_OK;
    for (int g = 0; st == MOE_OK && g < set->n; g++) {
        bool leader = true;
        int size = 0;
        for (int i = 0; i < set->n; i++) {
            leader = leader && !(i < g && same_sweep(&set->runs[i], &set->runs[g]));
            size += same_sweep(&set->runs[i], &set->runs[g]);
        }
        if (!leader) {
            continue;
        }
        if (size < 2) {
            struct moe_accuracy_row *r = &rows[g];
            r->has_sweep = r->ok && r->has_cv;
            r->sweep_predicted = r->cv_predicted;
            r->sweep_err_pct = r->cv_err_pct;
            r->sweep_size = 1;
            continue;
        }
        struct moe_run_set out;
        memset(&out, 0, sizeof(out));
        memcpy(out.releases, set->releases, sizeof(out.releases));
        out.num_releases = set->num_releases;
        for (int i = 0; st == MOE_OK && i < set->n; i++) {
            struct moe_run r = set->runs[i];
            if (same_sweep(&r, &set->runs[g]) && r.known_miss[0] == '\0') {
                (void)snprintf(r.known_miss, sizeof(r.known_miss), "left out with its sweep");
            }
            st = moe_runs_add(&out, &r, diag);
        }
        struct moe_fit_options fo = o->fit;
        fo.loo = false;
        struct moe_fit_result res;
        struct moe_diag d = {0};
        enum moe_status fs = st == MOE_OK ? moe_fit(set->runs[g].cluster, &out, &fo, &res, &d) : st;
        if (fs == MOE_OK) {
            for (int i = 0; i < set->n; i++) {
                struct moe_accuracy_row *r = &rows[i];
                if (same_sweep(&set->runs[i], &set->runs[g]) && r->ok && res.runs[i].ok) {
                    r->has_sweep = true;
                    r->sweep_predicted = res.runs[i].pred_fit;
                    r->sweep_err_pct = 100.0 * (r->sweep_predicted / r->published - 1.0);
                    r->sweep_size = size;
                }
            }
            moe_fit_result_free(&res);
        } else if (fs == MOE_ERR_NOMEM) {
            *diag = d;
            st = fs;
        } /* no usable run without the sweep: its runs have no such prediction */
        moe_runs_free(&out);
    }
    return st;
}

enum moe_status moe_accuracy_run_set(const struct moe_run_set *set,
                                     const struct moe_accuracy_options *o,
                                     struct moe_accuracy_row *rows,
                                     int max,
                                     int *n,
                                     struct moe_diag *diag)
{
    *n = 0;
    if (set->n > max) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "more than %d runs", max);
    }
    struct moe_fit_result *fits = NULL;
    int *which = NULL;
    int num_fits = 0;
    if (o->refit) {
        fits = calloc((size_t)(set->n > 0 ? set->n : 1), sizeof(*fits));
        which = calloc((size_t)(set->n > 0 ? set->n : 1), sizeof(*which));
        if (fits == NULL || which == NULL) {
            free(fits);
            free(which);
            return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory (refit)");
        }
        enum moe_status st = refit_all(set, o, fits, which, &num_fits, diag);
        if (st != MOE_OK) {
            for (int k = 0; k < num_fits; k++) {
                moe_fit_result_free(&fits[k]);
            }
            free(fits);
            free(which);
            return st;
        }
    }
    for (int i = 0; i < set->n; i++) {
        const struct moe_run *r = &set->runs[i];
        const char *c = o->cluster != NULL ? o->cluster : r->cluster;
        const struct moe_fit_result *fr = fits != NULL ? &fits[which[i]] : NULL;
        predict_row(r, c, fr != NULL && fr->runs != NULL ? fr : NULL, i, &rows[i]);
        if (fr != NULL && fr->runs == NULL && rows[i].ok) {
            (void)snprintf(rows[i].cv_basis, sizeof(rows[i].cv_basis), "no refit possible");
        }
    }
    *n = set->n;
    enum moe_status st = o->sweeps && o->cluster == NULL ? sweep_out(set, o, rows, diag) : MOE_OK;
    for (int k = 0; k < num_fits; k++) {
        moe_fit_result_free(&fits[k]);
    }
    free(fits);
    free(which);
    return st;
}

enum moe_status moe_accuracy_run(
    const char *path, struct moe_accuracy_row *rows, int max, int *n, struct moe_diag *diag)
{
    *n = 0;
    struct moe_run_set set;
    memset(&set, 0, sizeof(set));
    enum moe_status st = moe_runs_read(path, &set, diag);
    if (st != MOE_OK) {
        moe_runs_free(&set); /* a file refused after some runs were read keeps their array */
        return st;
    }
    struct moe_accuracy_options o;
    moe_accuracy_options_init(&o);
    st = moe_accuracy_run_set(&set, &o, rows, max, n, diag);
    moe_runs_free(&set);
    return st;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a;
    double y = *(const double *)b;
    return (x > y) - (x < y);
}

static void median_max(double *v, int n, double *med, double *max)
{
    *med = 0.0;
    *max = 0.0;
    if (n > 0) {
        qsort(v, (size_t)n, sizeof(double), cmp_double);
        *med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
        *max = v[n - 1];
    }
}

static bool counted(const struct moe_accuracy_row *r)
{
    return r->ok && r->complete && r->known_miss[0] == '\0';
}

void moe_accuracy_summarise(const struct moe_accuracy_row *rows,
                            int n,
                            struct moe_accuracy_stats *out)
{
    memset(out, 0, sizeof(*out));
    double *e = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    double *c = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    if (e == NULL || c == NULL) {
        free(e);
        free(c);
        return;
    }
    double *mem = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    double *sw = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    if (mem == NULL || sw == NULL) {
        free(e);
        free(c);
        free(mem);
        free(sw);
        return;
    }
    for (int i = 0; i < n; i++) {
        const struct moe_accuracy_row *r = &rows[i];
        /* memory: every run ran, complete or not, so each must be predicted to fit */
        if (r->ok) {
            out->ran++;
            out->ran_fit += r->fits;
            if (r->mem_measured_gib > 0.0) {
                mem[out->mem_n++] = fabs(r->mem_gib / r->mem_measured_gib - 1.0);
            }
        }
        if (!counted(r)) {
            continue;
        }
        e[out->n++] = fabs(r->err_pct) / 100.0;
        if (r->has_cv) {
            c[out->cv_n++] = fabs(r->cv_err_pct) / 100.0;
            out->cv_unseen += strcmp(r->cv_basis, "unseen by the profile") == 0;
        }
        if (r->has_sweep) {
            sw[out->sweep_n++] = fabs(r->sweep_err_pct) / 100.0;
            bool first = true; /* count each sweep of two or more runs once, at its first run */
            for (int j = 0; j < i && r->sweep_size > 1; j++) {
                first =
                    first && !(counted(&rows[j]) && rows[j].has_sweep &&
                               strcmp(rows[j].model, r->model) == 0 &&
                               strcmp(rows[j].cluster, r->cluster) == 0 && rows[j].gpus == r->gpus);
            }
            out->sweeps += r->sweep_size > 1 && first;
        }
        if (r->has_interval) {
            out->intervals++;
            out->covered += r->covered;
        }
        for (int j = i + 1; j < n; j++) {
            const struct moe_accuracy_row *s = &rows[j];
            if (!counted(s) || strcmp(r->model, s->model) != 0 ||
                strcmp(r->cluster, s->cluster) != 0 || r->gpus != s->gpus ||
                strcmp(r->metric, s->metric) != 0 ||
                fabs(r->published / s->published - 1.0) <= MOE_ACCURACY_RANK_GAP) {
                continue;
            }
            double m = r->published - s->published;
            out->pairs++;
            out->concordant += (r->cv_predicted - s->cv_predicted) * m > 0.0;
            out->in_sample_concordant += (r->predicted - s->predicted) * m > 0.0;
            out->sweep_concordant +=
                r->has_sweep && s->has_sweep && (r->sweep_predicted - s->sweep_predicted) * m > 0.0;
        }
    }
    median_max(e, out->n, &out->median_abs, &out->max_abs);
    median_max(c, out->cv_n, &out->cv_median_abs, &out->cv_max_abs);
    median_max(mem, out->mem_n, &out->mem_median_abs, &out->mem_max_abs);
    median_max(sw, out->sweep_n, &out->sweep_median_abs, &out->sweep_max_abs);
    free(e);
    free(c);
    free(mem);
    free(sw);
}
