/*
 * `moefold fit` (cli/fit.h): software figures fitted to measured runs, with leave-one-out.
 *
 * Data flow: the base cluster file's figures with a "prior" become candidate parameters; every run
 * of the set on a cluster of the same GPU generation is parsed and resolved once (its own cluster's
 * hardware, the generation's shared figures); select() finds the candidates the runs constrain
 * (posterior/prior sd at the prior, from a central-difference Jacobian), solve() runs GSL's trust
 * region solver on the whitened residuals (runs, figure priors, release offsets), and the
 * covariance at the optimum gives standard errors. A leave-one-out pass repeats select() and
 * solve() without each run in turn and predicts it.
 */
#include "cli/fit.h"

#include "model/imbalance.h"
#include "topologies/cluster_file.h"

#include <gsl/gsl_blas.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_linalg.h>
#include <gsl/gsl_matrix.h>
#include <gsl/gsl_multifit_nlinear.h>
#include <gsl/gsl_vector.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIT_STEP     1e-3 /* finite-difference step on the logistic scale */
#define FIT_MAX_ITER 60
#define FIT_CONSTRAINS                                                                             \
    0.3 /* a run constrains a figure when one prior sd moves it this many run_sd */
#define FIT_MAX_UNKNOWN (MOE_FIT_MAX_PARAMS * (1 + MOE_FIT_MAX_RELEASES))
#define FIT_PROBE_SD    1.5 /* prior sds from the prior where a figure's effect is probed too */

void moe_fit_options_init(struct moe_fit_options *o)
{
    memset(o, 0, sizeof(*o));
    o->run_sd = 0.05;
    o->incomplete_sd = 2.0;
    o->release_sd = 0.3;
    /* Chosen by nested cross-validation on the published runs (scripts/nested-cv.py,
     * 2026-12-04): choosing from 0.70-0.95 by leave-one-out on the other runs predicted each
     * held-out run at median 4.9%, max 15.4%, against 6.0% / 23.2% at a fixed 0.80; the inner
     * loops chose 0.95 for 7 of 11 runs, and 0.95 has the least leave-one-out error on all of
     * them for both generations. */
    o->constrain_ratio = 0.95;
    o->loo = true;
    o->releases = true;
}

/* ---------------------------------------------------------------------------------------------
 * The logistic map between a figure's physical range and the unconstrained scale the solver sees.
 */

static double to_value(const struct moe_json_prior *pr, double x)
{
    return pr->min + (pr->max - pr->min) / (1.0 + exp(-x));
}

static double to_x(const struct moe_json_prior *pr, double v)
{
    double u = (v - pr->min) / (pr->max - pr->min);
    u = u < 1e-9 ? 1e-9 : (u > 1.0 - 1e-9 ? 1.0 - 1e-9 : u);
    return log(u / (1.0 - u));
}

/* dv/dx at x. */
static double slope(const struct moe_json_prior *pr, double x)
{
    double s = 1.0 / (1.0 + exp(-x));
    return (pr->max - pr->min) * s * (1.0 - s);
}

/* ---------------------------------------------------------------------------------------------
 * One run prepared for repeated prediction.
 */

struct prun {
    int idx;                    /* index into the run set / res->runs */
    struct moe_cli_problem *p;  /* resolved on the run's cluster, shared figures */
    struct moe_cluster cl;      /* that cluster */
    struct moe_load_stats load; /* expert-load statistics when the run uses auto imbalance */
    bool has_load;
    double log_meas; /* log of the measured metric */
    int release;     /* -1: none */
    bool on_base;    /* on the fitted cluster itself */
    int cluster;     /* index into res->clusters (0: the base) */
    double sd_scale; /* its error in run_sd units (1; incomplete_sd for incomplete runs) */
};

/* The unknowns of one fit: generation figures params[free[k]], then release offsets. */
struct problem {
    const struct moe_fit_param *params; /* all candidates [np] */
    int np;
    int free[MOE_FIT_MAX_PARAMS];     /* fitted candidates */
    double start[MOE_FIT_MAX_PARAMS]; /* where the solver starts each (logistic scale) */
    int nfree;
    int delta_rel[FIT_MAX_UNKNOWN]; /* release offsets: (release, index into free) */
    int delta_k[FIT_MAX_UNKNOWN];
    int ndelta;
    struct prun *const *runs; /* the runs of this fit */
    int nruns;
    double run_sd, release_sd;
    double *cache_x, *cache_f; /* last data residuals, for the Jacobian */
    bool cache_ok;
};

/* Set run r's cluster figures for unknowns x (NULL: every figure at its prior). */
static void apply_figures(const struct problem *pb,
                          const double *x,
                          const struct prun *r,
                          struct moe_cluster *cl)
{
    *cl = r->cl;
    for (int j = 0; j < pb->np; j++) {
        if (pb->params[j].cluster >= 0 && pb->params[j].cluster != r->cluster) {
            continue; /* another cluster's own figure */
        }
        double v = pb->params[j].prior.value;
        memcpy((unsigned char *)cl + pb->params[j].offset, &v, sizeof(v));
    }
    if (x == NULL) {
        return;
    }
    for (int k = 0; k < pb->nfree; k++) {
        const struct moe_fit_param *fp = &pb->params[pb->free[k]];
        if (fp->cluster >= 0 && fp->cluster != r->cluster) {
            continue;
        }
        double xv = x[k];
        for (int d = 0; d < pb->ndelta; d++) {
            if (pb->delta_k[d] == k && pb->delta_rel[d] == r->release && r->release >= 0) {
                xv += x[pb->nfree + d];
            }
        }
        double v = to_value(&fp->prior, xv);
        memcpy((unsigned char *)cl + fp->offset, &v, sizeof(v));
    }
}

/* Predict run r under cluster cl (the problem keeps its own cluster between calls). */
static enum moe_status predict_run(const struct prun *r,
                                   const struct moe_cluster *cl,
                                   struct moe_prediction *pred,
                                   struct moe_diag *diag)
{
    struct moe_cli_problem *p = r->p;
    struct moe_cluster keep = p->cl;
    p->cl = *cl;
    enum moe_status st = moe_cli_run_predict(p, r->has_load ? &r->load : NULL, pred, diag);
    p->cl = keep;
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * Residuals.
 */

struct fctx {
    struct problem *pb;
    const struct moe_run_set *set;
};

/* Data residual of run r at unknowns x (NULL: priors). */
static int data_residual(const struct fctx *c, const double *x, const struct prun *r, double *out)
{
    struct moe_cluster cl;
    apply_figures(c->pb, x, r, &cl);
    struct moe_prediction pred;
    if (predict_run(r, &cl, &pred, NULL) != MOE_OK) {
        return GSL_EDOM;
    }
    double m = moe_run_predicted(&c->set->runs[r->idx], &pred);
    if (!(m > 0.0) || !isfinite(m)) {
        return GSL_EDOM;
    }
    *out = (log(m) - r->log_meas) / (c->pb->run_sd * r->sd_scale);
    return GSL_SUCCESS;
}

static int resid_f(const gsl_vector *xv, void *data, gsl_vector *f)
{
    const struct fctx *c = data;
    struct problem *pb = c->pb;
    const double *x = xv->data;
    size_t nx = (size_t)(pb->nfree + pb->ndelta);
    for (int i = 0; i < pb->nruns; i++) {
        double r = 0.0;
        int st = data_residual(c, x, pb->runs[i], &r);
        if (st != GSL_SUCCESS) {
            return st;
        }
        gsl_vector_set(f, (size_t)i, r);
    }
    for (int k = 0; k < pb->nfree; k++) {
        const struct moe_json_prior *pr = &pb->params[pb->free[k]].prior;
        gsl_vector_set(f, (size_t)(pb->nruns + k), (to_value(pr, x[k]) - pr->value) / pr->sd);
    }
    for (int d = 0; d < pb->ndelta; d++) {
        gsl_vector_set(f, (size_t)(pb->nruns + pb->nfree + d), x[pb->nfree + d] / pb->release_sd);
    }
    memcpy(pb->cache_x, x, nx * sizeof(double));
    memcpy(pb->cache_f, f->data, (size_t)pb->nruns * sizeof(double));
    pb->cache_ok = true;
    return GSL_SUCCESS;
}

/* Forward differences on the data rows (the prior rows are analytic). */
static int resid_df(const gsl_vector *xv, void *data, gsl_matrix *J)
{
    const struct fctx *c = data;
    struct problem *pb = c->pb;
    size_t nx = (size_t)(pb->nfree + pb->ndelta);
    double x[FIT_MAX_UNKNOWN];
    memcpy(x, xv->data, nx * sizeof(double));
    if (!pb->cache_ok || memcmp(pb->cache_x, x, nx * sizeof(double)) != 0) {
        gsl_vector *f = gsl_vector_alloc((size_t)pb->nruns + nx);
        if (f == NULL) {
            return GSL_ENOMEM;
        }
        int st = resid_f(xv, data, f);
        gsl_vector_free(f);
        if (st != GSL_SUCCESS) {
            return st;
        }
    }
    double f0[MOE_RUNS_MAX];
    memcpy(f0, pb->cache_f, (size_t)pb->nruns * sizeof(double));
    gsl_matrix_set_zero(J);
    for (size_t k = 0; k < nx; k++) {
        x[k] += FIT_STEP;
        for (int i = 0; i < pb->nruns; i++) {
            const struct prun *r = pb->runs[i];
            /* A release offset moves only its release's runs. */
            if (k >= (size_t)pb->nfree && pb->delta_rel[k - (size_t)pb->nfree] != r->release) {
                continue;
            }
            double ri = 0.0;
            int st = data_residual(c, x, r, &ri);
            if (st != GSL_SUCCESS) {
                return st;
            }
            gsl_matrix_set(J, (size_t)i, k, (ri - f0[i]) / FIT_STEP);
        }
        x[k] -= FIT_STEP;
    }
    for (int k = 0; k < pb->nfree; k++) {
        const struct moe_json_prior *pr = &pb->params[pb->free[k]].prior;
        gsl_matrix_set(J, (size_t)(pb->nruns + k), (size_t)k, slope(pr, x[k]) / pr->sd);
    }
    for (int d = 0; d < pb->ndelta; d++) {
        gsl_matrix_set(J, (size_t)(pb->nruns + pb->nfree + d), (size_t)(pb->nfree + d),
                       1.0 / pb->release_sd);
    }
    return GSL_SUCCESS;
}

/* ---------------------------------------------------------------------------------------------
 * Which figures the runs constrain.
 */

/*
 * Posterior / prior sd of each unknown at x, from the data Jacobian J (nruns x nx, whitened) and
 * the prior precisions prec[nx] (on the logistic scale). ratio[nx] out. Returns false on a
 * singular system (cannot happen with positive prior precisions, kept as a guard).
 */
static bool sd_ratios(const gsl_matrix *J, const double *prec, size_t nx, double *ratio)
{
    gsl_matrix *F = gsl_matrix_alloc(nx, nx);
    gsl_permutation *perm = gsl_permutation_alloc(nx);
    gsl_matrix *inv = gsl_matrix_alloc(nx, nx);
    bool ok = F != NULL && perm != NULL && inv != NULL;
    if (ok) {
        gsl_blas_dgemm(CblasTrans, CblasNoTrans, 1.0, J, J, 0.0, F);
        for (size_t k = 0; k < nx; k++) {
            gsl_matrix_set(F, k, k, gsl_matrix_get(F, k, k) + prec[k]);
        }
        ok = gsl_linalg_cholesky_decomp1(F) == GSL_SUCCESS &&
             gsl_matrix_memcpy(inv, F) == GSL_SUCCESS && gsl_linalg_cholesky_invert(inv) == 0;
    }
    for (size_t k = 0; ok && k < nx; k++) {
        ratio[k] = sqrt(gsl_matrix_get(inv, k, k) * prec[k]);
    }
    gsl_matrix_free(F);
    gsl_matrix_free(inv);
    gsl_permutation_free(perm);
    return ok;
}

/* Central difference of every run's residual in unknown j of problem `all` at x. */
static enum moe_status
column_at(const struct fctx *ca, double *x, int j, double *col, struct moe_diag *diag)
{
    const struct problem *pb = ca->pb;
    for (int i = 0; i < pb->nruns; i++) {
        double up = 0.0;
        double dn = 0.0;
        x[j] += FIT_STEP;
        int s1 = data_residual(ca, x, pb->runs[i], &up);
        x[j] -= 2.0 * FIT_STEP;
        int s2 = data_residual(ca, x, pb->runs[i], &dn);
        x[j] += FIT_STEP;
        if (s1 != GSL_SUCCESS || s2 != GSL_SUCCESS) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "run %s cannot be predicted near the priors of %s",
                                ca->set->runs[pb->runs[i]->idx].id, pb->params[j].path);
        }
        col[i] = (up - dn) / (2.0 * FIT_STEP);
    }
    return MOE_OK;
}

/*
 * Data Jacobian of every candidate at the priors (column j: params[j]), on the logistic scale at
 * the prior. Several figures act through a maximum (host time is exposed only where it exceeds
 * the GPU time; a roofline switches from compute to memory), so a derivative at the prior alone
 * can be zero for a figure the runs do constrain a little further out: each column is also probed
 * with the figure at its prior -+ FIT_PROBE_SD sds (the other figures at their priors), and the
 * probe with the largest effect is kept (rescaled to the prior's logistic slope). start[j] gets
 * the logistic value the solver starts from: the prior, or the probe that sees the runs when the
 * prior sees none.
 */
static enum moe_status
prior_jacobian(const struct fctx *c, gsl_matrix *J, double *start, struct moe_diag *diag)
{
    struct problem *pb = c->pb;
    struct problem all = *pb;
    all.nfree = pb->np;
    all.ndelta = 0;
    for (int j = 0; j < pb->np; j++) {
        all.free[j] = j;
    }
    struct fctx ca = {&all, c->set};
    double x[MOE_FIT_MAX_PARAMS];
    for (int j = 0; j < pb->np; j++) {
        x[j] = to_x(&pb->params[j].prior, pb->params[j].prior.value);
        start[j] = x[j];
    }
    double col[MOE_RUNS_MAX];
    double best[MOE_RUNS_MAX];
    for (int j = 0; j < pb->np; j++) {
        const struct moe_json_prior *pr = &pb->params[j].prior;
        double x0 = x[j];
        double best_norm = -1.0;
        for (int probe = 0; probe < 3; probe++) {
            double v =
                pr->value + (probe == 0 ? 0.0 : (probe == 1 ? 1.0 : -1.0)) * FIT_PROBE_SD * pr->sd;
            x[j] = to_x(pr, v);
            MOE_TRY(column_at(&ca, x, j, col, diag));
            double scale = slope(pr, x0) / slope(pr, x[j]);
            double norm = 0.0;
            for (int i = 0; i < pb->nruns; i++) {
                col[i] *= scale;
                norm += col[i] * col[i];
            }
            /* The prior's own column wins ties: a probe must see clearly more. */
            if (norm > best_norm * (probe == 0 ? 1.0 : 4.0)) {
                best_norm = norm;
                memcpy(best, col, (size_t)pb->nruns * sizeof(double));
                start[j] = x[j];
            }
        }
        x[j] = x0;
        for (int i = 0; i < pb->nruns; i++) {
            gsl_matrix_set(J, (size_t)i, (size_t)j, best[i]);
        }
    }
    return MOE_OK;
}

static double prior_precision(const struct moe_json_prior *pr)
{
    double sx = pr->sd / slope(pr, to_x(pr, pr->value));
    return 1.0 / (sx * sx);
}

/*
 * Forward selection of the unknowns the runs constrain. A (n x m, whitened data Jacobian) and the
 * prior precisions prec[m] describe m candidates; the first nbase are always in. Repeatedly add
 * the candidate whose posterior/prior sd ratio in the joint model (the ones chosen so far plus
 * itself) is smallest, while it is below `limit`: a run that constrains one combination of
 * figures picks the figure it says most about, and the figures it cannot tell apart from it stay
 * at their priors. chosen[m] and ratio[m] out (each candidate's ratio when last considered).
 */
static bool greedy_select(const gsl_matrix *A,
                          const double *prec,
                          int m,
                          int nbase,
                          double limit,
                          bool *chosen,
                          double *ratio)
{
    size_t n = A->size1;
    int idx[FIT_MAX_UNKNOWN];
    int k = 0;
    for (int j = 0; j < m; j++) {
        chosen[j] = j < nbase;
        ratio[j] = 1.0;
        if (j < nbase) {
            idx[k++] = j;
        }
    }
    gsl_matrix *sub = gsl_matrix_alloc(n, (size_t)m);
    if (sub == NULL) {
        return false;
    }
    double sp[FIT_MAX_UNKNOWN];
    double sr[FIT_MAX_UNKNOWN];
    bool ok = true;
    for (;;) {
        int best = -1;
        double best_ratio = limit;
        for (int c = 0; c < m && ok; c++) {
            if (chosen[c]) {
                continue;
            }
            idx[k] = c;
            for (int q = 0; q <= k; q++) {
                sp[q] = prec[idx[q]];
                for (size_t i = 0; i < n; i++) {
                    gsl_matrix_set(sub, i, (size_t)q, gsl_matrix_get(A, i, (size_t)idx[q]));
                }
            }
            gsl_matrix_const_view v = gsl_matrix_const_submatrix(sub, 0, 0, n, (size_t)k + 1);
            ok = sd_ratios(&v.matrix, sp, (size_t)k + 1, sr);
            ratio[c] = sr[k];
            if (ok && sr[k] < best_ratio) {
                best_ratio = sr[k];
                best = c;
            }
        }
        if (!ok || best < 0) {
            break;
        }
        chosen[best] = true;
        idx[k++] = best;
    }
    /* The chosen ones' ratios in the final joint model. */
    if (ok && k > 0) {
        for (int q = 0; q < k; q++) {
            sp[q] = prec[idx[q]];
            for (size_t i = 0; i < n; i++) {
                gsl_matrix_set(sub, i, (size_t)q, gsl_matrix_get(A, i, (size_t)idx[q]));
            }
        }
        gsl_matrix_const_view v = gsl_matrix_const_submatrix(sub, 0, 0, n, (size_t)k);
        ok = sd_ratios(&v.matrix, sp, (size_t)k, sr);
        for (int q = 0; ok && q < k; q++) {
            ratio[idx[q]] = sr[q];
        }
    }
    gsl_matrix_free(sub);
    return ok;
}

/* The runs whose prediction one prior sd of column j moves by FIT_CONSTRAINS run sds. */
static void constraining_runs(
    const struct fctx *c, const gsl_matrix *J, size_t j, double prec_j, char *out, size_t len)
{
    const struct problem *pb = c->pb;
    out[0] = '\0';
    size_t used = 0;
    for (size_t i = 0; i < J->size1; i++) {
        double move = fabs(gsl_matrix_get(J, i, j)) / sqrt(prec_j);
        if (move >= FIT_CONSTRAINS && used + 2 < len) {
            int w = snprintf(out + used, len - used, "%s%s", used ? ", " : "",
                             c->set->runs[pb->runs[i]->idx].id);
            used += w > 0 ? (size_t)w : 0;
        }
    }
}

/* Release offsets: for each release with runs here, the shared figures its runs say something
 * about beyond the shared value (greedy, given the shared figures chosen). */
static enum moe_status select_releases(struct problem *pb,
                                       const gsl_matrix *J,
                                       const struct moe_fit_options *o,
                                       int nrel,
                                       struct moe_diag *diag)
{
    size_t n = (size_t)pb->nruns;
    size_t nx = (size_t)pb->nfree;
    int cand_rel[FIT_MAX_UNKNOWN];
    int cand_k[FIT_MAX_UNKNOWN];
    size_t nc = 0;
    for (int rel = 0; rel < nrel; rel++) {
        bool any = false;
        for (int i = 0; i < pb->nruns; i++) {
            any = any || pb->runs[i]->release == rel;
        }
        for (int k = 0; any && k < pb->nfree && nx + nc < FIT_MAX_UNKNOWN; k++) {
            cand_rel[nc] = rel;
            cand_k[nc] = k;
            nc++;
        }
    }
    if (nc == 0) {
        return MOE_OK;
    }
    gsl_matrix *A = gsl_matrix_calloc(n, nx + nc);
    if (A == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory (release Jacobian)");
    }
    double prec[FIT_MAX_UNKNOWN];
    for (size_t k = 0; k < nx; k++) {
        prec[k] = prior_precision(&pb->params[pb->free[k]].prior);
    }
    for (size_t d = 0; d < nc; d++) {
        prec[nx + d] = 1.0 / (pb->release_sd * pb->release_sd);
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < nx; k++) {
            gsl_matrix_set(A, i, k, gsl_matrix_get(J, i, (size_t)pb->free[k]));
        }
        for (size_t d = 0; d < nc; d++) {
            double v = pb->runs[i]->release == cand_rel[d]
                           ? gsl_matrix_get(J, i, (size_t)pb->free[cand_k[d]])
                           : 0.0;
            gsl_matrix_set(A, i, nx + d, v);
        }
    }
    bool chosen[FIT_MAX_UNKNOWN];
    double ratio[FIT_MAX_UNKNOWN];
    if (greedy_select(A, prec, (int)(nx + nc), (int)nx, o->constrain_ratio, chosen, ratio)) {
        for (size_t d = 0; d < nc; d++) {
            if (chosen[nx + d]) {
                pb->delta_rel[pb->ndelta] = cand_rel[d];
                pb->delta_k[pb->ndelta] = cand_k[d];
                pb->ndelta++;
            }
        }
    }
    gsl_matrix_free(A);
    return MOE_OK;
}

/* Fill pb->free and the release offsets (and report's sd_ratio and runs when not NULL). */
static enum moe_status select_free(const struct fctx *c,
                                   const struct moe_fit_options *o,
                                   int nrel,
                                   struct moe_fit_param *report,
                                   struct moe_diag *diag)
{
    struct problem *pb = c->pb;
    pb->nfree = 0;
    pb->ndelta = 0;
    if (pb->nruns == 0) {
        return MOE_OK;
    }
    size_t n = (size_t)pb->nruns;
    size_t np = (size_t)pb->np;
    gsl_matrix *J = gsl_matrix_alloc(n, np);
    if (J == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory (fit Jacobian)");
    }
    double start[MOE_FIT_MAX_PARAMS];
    enum moe_status st = prior_jacobian(c, J, start, diag);
    double prec[FIT_MAX_UNKNOWN] = {0};
    double ratio[FIT_MAX_UNKNOWN] = {0};
    bool chosen[FIT_MAX_UNKNOWN] = {false};
    for (size_t j = 0; j < np; j++) {
        prec[j] = prior_precision(&pb->params[j].prior);
    }
    if (st == MOE_OK && !greedy_select(J, prec, (int)np, 0, o->constrain_ratio, chosen, ratio)) {
        st = moe_diag_set(diag, MOE_ERR_INVALID, "the fit's information matrix is singular");
    }
    for (size_t j = 0; st == MOE_OK && j < np; j++) {
        if (chosen[j]) {
            pb->start[pb->nfree] = start[j];
            pb->free[pb->nfree++] = (int)j;
        }
        if (report != NULL) {
            report[j].sd_ratio = ratio[j];
            constraining_runs(c, J, j, prec[j], report[j].runs, sizeof(report[j].runs));
        }
    }
    if (st == MOE_OK && o->releases && nrel > 0 && pb->nfree > 0) {
        st = select_releases(pb, J, o, nrel, diag);
    }
    gsl_matrix_free(J);
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * Solving.
 */

struct solution {
    double x[FIT_MAX_UNKNOWN];
    double se_x[FIT_MAX_UNKNOWN];
    int iterations;
    double rms; /* rms of the data residuals, log units */
};

static enum moe_status solve(struct fctx *c, struct solution *sol, struct moe_diag *diag)
{
    struct problem *pb = c->pb;
    size_t nx = (size_t)(pb->nfree + pb->ndelta);
    size_t n = (size_t)pb->nruns + nx;
    memset(sol, 0, sizeof(*sol));
    for (int k = 0; k < pb->nfree; k++) {
        sol->x[k] = pb->start[k];
    }
    if (nx == 0) {
        return MOE_OK;
    }
    double cx[FIT_MAX_UNKNOWN];
    double cf[MOE_RUNS_MAX];
    pb->cache_x = cx;
    pb->cache_f = cf;
    pb->cache_ok = false;
    gsl_multifit_nlinear_fdf fdf = {resid_f, resid_df, NULL, n, nx, c, 0, 0, 0};
    gsl_multifit_nlinear_parameters params = gsl_multifit_nlinear_default_parameters();
    gsl_multifit_nlinear_workspace *w =
        gsl_multifit_nlinear_alloc(gsl_multifit_nlinear_trust, &params, n, nx);
    gsl_matrix *cov = gsl_matrix_alloc(nx, nx);
    if (w == NULL || cov == NULL) {
        gsl_multifit_nlinear_free(w);
        gsl_matrix_free(cov);
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory (fit workspace)");
    }
    gsl_vector_view x0 = gsl_vector_view_array(sol->x, nx);
    int info = 0;
    int gst = gsl_multifit_nlinear_init(&x0.vector, &fdf, w);
    if (gst == GSL_SUCCESS) {
        gst = gsl_multifit_nlinear_driver(FIT_MAX_ITER, 1e-8, 1e-8, 1e-10, NULL, NULL, &info, w);
    }
    enum moe_status st = MOE_OK;
    if (gst != GSL_SUCCESS && gst != GSL_EMAXITER) {
        st = moe_diag_set(diag, MOE_ERR_INVALID, "the fit did not converge: %s", gsl_strerror(gst));
    }
    if (st == MOE_OK) {
        memcpy(sol->x, gsl_multifit_nlinear_position(w)->data, nx * sizeof(double));
        sol->iterations = (int)gsl_multifit_nlinear_niter(w);
        const gsl_vector *f = gsl_multifit_nlinear_residual(w);
        double ss = 0.0;
        for (int i = 0; i < pb->nruns; i++) {
            ss += gsl_vector_get(f, (size_t)i) * gsl_vector_get(f, (size_t)i);
        }
        sol->rms = pb->nruns > 0 ? sqrt(ss / pb->nruns) * pb->run_sd : 0.0;
        /* Runs scattering more than run_sd carry less information: rescale their rows. */
        gsl_matrix *J = gsl_multifit_nlinear_jac(w);
        double scale = sol->rms > pb->run_sd ? pb->run_sd / sol->rms : 1.0;
        for (int i = 0; i < pb->nruns; i++) {
            gsl_vector_view row = gsl_matrix_row(J, (size_t)i);
            gsl_vector_scale(&row.vector, scale);
        }
        gsl_multifit_nlinear_covar(J, 0.0, cov);
        for (size_t k = 0; k < nx; k++) {
            sol->se_x[k] = sqrt(fmax(0.0, gsl_matrix_get(cov, k, k)));
        }
    }
    gsl_matrix_free(cov);
    gsl_multifit_nlinear_free(w);
    pb->cache_x = NULL;
    pb->cache_f = NULL;
    return st;
}

/* Predict run r at solution sol of problem pb; the metric in *out. */
static enum moe_status predict_at(const struct fctx *c,
                                  const struct solution *sol,
                                  const struct prun *r,
                                  double *out,
                                  struct moe_prediction *pred,
                                  struct moe_diag *diag)
{
    struct moe_cluster cl;
    apply_figures(c->pb, sol != NULL ? sol->x : NULL, r, &cl);
    MOE_TRY(predict_run(r, &cl, pred, diag));
    *out = moe_run_predicted(&c->set->runs[r->idx], pred);
    return MOE_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Setting up: candidates from the base file, runs from the set.
 */

/*
 * The figures with a prior in a cluster tree. cluster < 0: the base file (every figure, each of
 * cluster scope tagged as the base's own); else only its cluster-scope figures, tagged `cluster`.
 */
static enum moe_status read_candidates(const cJSON *root,
                                       const char *path,
                                       const char *prefix,
                                       int cluster,
                                       struct moe_fit_result *res,
                                       struct moe_diag *diag)
{
    const cJSON *it = NULL;
    cJSON_ArrayForEach(it, root)
    {
        if (!cJSON_IsObject(it) || it->string == NULL) {
            continue;
        }
        char sub[128];
        (void)snprintf(sub, sizeof(sub), "%s%s%s", prefix, prefix[0] ? "." : "", it->string);
        if (strcmp(sub, "software") == 0 || strcmp(sub, "uncertainty") == 0) {
            continue;
        }
        if (cJSON_GetObjectItemCaseSensitive(it, "value") == NULL) {
            MOE_TRY(read_candidates(it, path, sub, cluster, res, diag));
            continue;
        }
        struct moe_json_prior pr;
        MOE_TRY(moe_json_get_prior(it, sub, &pr, diag));
        if (!pr.present || (cluster >= 0 && !pr.cluster_scope)) {
            continue;
        }
        if (res->num_params >= MOE_FIT_MAX_PARAMS) {
            return moe_diag_set(diag, MOE_ERR_INVALID, "%s: more than %d figures with priors", path,
                                MOE_FIT_MAX_PARAMS);
        }
        struct moe_fit_param *fp = &res->params[res->num_params];
        memset(fp, 0, sizeof(*fp));
        if (strlen(sub) >= sizeof(fp->path)) {
            return moe_diag_set(diag, MOE_ERR_INVALID, "%s: figure path %s is too long", path, sub);
        }
        memcpy(fp->path, sub, strlen(sub) + 1);
        MOE_TRY(moe_cluster_figure_ref(sub, &fp->offset, diag));
        fp->prior = pr;
        fp->cluster = pr.cluster_scope ? (cluster >= 0 ? cluster : 0) : -1;
        fp->value = pr.value;
        fp->se = pr.sd;
        fp->sd_ratio = 1.0;
        fp->borrowed = -1;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(it, "value");
        const cJSON *se = cJSON_GetObjectItemCaseSensitive(it, "se");
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(it, "source");
        fp->file_value = cJSON_IsNumber(v) ? v->valuedouble : pr.value;
        fp->file_se = cJSON_IsNumber(se) && se->valuedouble > 0.0 ? se->valuedouble : pr.sd;
        (void)snprintf(fp->file_source, sizeof(fp->file_source), "%s",
                       cJSON_IsString(src) ? src->valuestring : pr.source);
        if (!res->opt.from_priors) {
            /* Refining a fitted profile: its value is the best estimate before these runs, held
             * with the prior's sd (as far as the microbenchmark let the first fit move it). */
            double lo = pr.min + 1e-6 * (pr.max - pr.min);
            double hi = pr.max - 1e-6 * (pr.max - pr.min);
            fp->prior.value = fmin(hi, fmax(lo, fp->file_value));
            fp->value = fp->prior.value;
        }
        res->num_params++;
    }
    return MOE_OK;
}

static int find_release(struct moe_fit_result *res, const struct moe_run_set *set, const char *name)
{
    if (name[0] == '\0') {
        return -1;
    }
    for (int i = 0; i < res->num_releases; i++) {
        if (strcmp(res->releases[i].name, name) == 0) {
            return i;
        }
    }
    if (res->num_releases >= MOE_FIT_MAX_RELEASES) {
        return -1;
    }
    struct moe_fit_release *r = &res->releases[res->num_releases];
    memset(r, 0, sizeof(*r));
    (void)snprintf(r->name, sizeof(r->name), "%s", name);
    for (int i = 0; i < set->num_releases; i++) {
        if (strcmp(set->releases[i].name, name) == 0) {
            (void)snprintf(r->date, sizeof(r->date), "%s", set->releases[i].date);
            (void)snprintf(r->stack, sizeof(r->stack), "%s", set->releases[i].stack);
        }
    }
    return res->num_releases++;
}

/* The index of the run's cluster in res->clusters, registering it (and its own figures) when
 * new; -1 when there is no room. */
static int
cluster_index(const cJSON *root, const char *path, const char *name, struct moe_fit_result *res)
{
    for (int k = 0; k < res->num_clusters; k++) {
        if (strcmp(res->clusters[k], name) == 0) {
            return k;
        }
    }
    if (res->num_clusters >= MOE_FIT_MAX_CLUSTERS) {
        return -1;
    }
    int k = res->num_clusters;
    int before = res->num_params;
    struct moe_diag d = {0};
    if (read_candidates(root, path, "", k, res, &d) != MOE_OK) {
        res->num_params = before;
        return -1;
    }
    (void)snprintf(res->clusters[k], sizeof(res->clusters[k]), "%s", name);
    res->num_clusters++;
    return k;
}

/* Prepare run i of the set (res->runs[i] records why it is left out). */
static void prepare_run(const struct moe_run_set *set,
                        int i,
                        const char *base_path,
                        const char *base_name,
                        const struct moe_fit_options *o,
                        struct moe_fit_result *res,
                        struct prun *pr)
{
    const struct moe_run *run = &set->runs[i];
    struct moe_fit_run *fr = &res->runs[i];
    memset(fr, 0, sizeof(*fr));
    fr->run = run;
    fr->release = -1;
    struct moe_diag d = {0};
    struct moe_cluster cl;
    /* A run on the fitted cluster (its name or file) is predicted with the base file's hardware;
     * others with their own cluster file's. */
    const char *where = run->cluster;
    pr->on_base = strcmp(run->cluster, res->base) == 0 || strcmp(run->cluster, base_name) == 0;
    if (pr->on_base) {
        where = base_path;
    }
    cJSON *root = NULL;
    char path[512];
    if (moe_cluster_read_json(where, &root, path, sizeof(path), &d) != MOE_OK ||
        moe_cluster_from_json_release(root, path, MOE_CLUSTER_SHARED, &cl, &d) != MOE_OK) {
        cJSON_Delete(root);
        (void)snprintf(fr->error, sizeof(fr->error), "%s", d.message);
        (void)snprintf(fr->why, sizeof(fr->why), "its cluster %.120s cannot be loaded", where);
        return;
    }
    if (strcmp(cl.generation, res->generation) != 0) {
        cJSON_Delete(root);
        (void)snprintf(fr->why, sizeof(fr->why), "cluster %.60s is %.50s, not %.50s", cl.name,
                       cl.generation, res->generation);
        return;
    }
    pr->cluster = pr->on_base ? 0 : cluster_index(root, path, cl.name, res);
    cJSON_Delete(root);
    if (pr->cluster < 0) {
        (void)snprintf(fr->why, sizeof(fr->why), "more than %d clusters in one fit",
                       MOE_FIT_MAX_CLUSTERS);
        return;
    }
    pr->p = calloc(1, sizeof(*pr->p));
    if (pr->p == NULL || moe_run_problem(run, &cl, NULL, pr->p, &d) != MOE_OK) {
        (void)snprintf(fr->error, sizeof(fr->error), "%s", pr->p ? d.message : "out of memory");
        (void)snprintf(fr->why, sizeof(fr->why), "its configuration does not resolve");
        free(pr->p);
        pr->p = NULL;
        return;
    }
    bool used_load = false;
    if (moe_cli_load_stats(pr->p, &pr->load, &used_load, &d) != MOE_OK) {
        (void)snprintf(fr->error, sizeof(fr->error), "%s", d.message);
        (void)snprintf(fr->why, sizeof(fr->why), "its expert load cannot be estimated");
        free(pr->p);
        pr->p = NULL;
        return;
    }
    pr->has_load = used_load;
    pr->cl = cl;
    pr->idx = i;
    pr->log_meas = log(run->measured);
    fr->ok = true;
    (void)snprintf(fr->precision, sizeof(fr->precision), "%s", moe_run_precision(pr->p));
    (void)snprintf(fr->ep_span, sizeof(fr->ep_span), "%s", moe_run_ep_span(pr->p));
    pr->sd_scale = run->complete ? 1.0 : o->incomplete_sd;
    if (!run->complete && !(o->incomplete_sd > 0.0)) {
        (void)snprintf(fr->why, sizeof(fr->why), "its configuration is incomplete");
        return;
    }
    if (run->known_miss[0] != '\0') {
        (void)snprintf(fr->why, sizeof(fr->why), "it is marked as a known miss");
        return;
    }
    fr->used = true;
    pr->release = o->releases ? find_release(res, set, run->software) : -1;
    fr->release = pr->release;
    if (pr->release >= 0) {
        struct moe_fit_release *rel = &res->releases[pr->release];
        size_t n = strlen(rel->runs);
        (void)snprintf(rel->runs + n, sizeof(rel->runs) - n, "%s%s", n ? ", " : "", run->id);
        rel->num_runs++;
    }
}

/* ---------------------------------------------------------------------------------------------
 * The fit.
 */

/* Fit over runs[nruns]; sol and the problem's selection out. */
static enum moe_status fit_subset(struct moe_fit_result *res,
                                  const struct moe_run_set *set,
                                  struct prun *const *runs,
                                  int nruns,
                                  const struct moe_fit_options *o,
                                  struct moe_fit_param *report,
                                  struct problem *pb,
                                  struct solution *sol,
                                  struct moe_diag *diag)
{
    memset(pb, 0, sizeof(*pb));
    pb->params = res->params;
    pb->np = res->num_params;
    pb->runs = runs;
    pb->nruns = nruns;
    pb->run_sd = o->run_sd;
    pb->release_sd = o->release_sd;
    struct fctx c = {pb, set};
    MOE_TRY(select_free(&c, o, res->num_releases, report, diag));
    return solve(&c, sol, diag);
}

/* Record the full fit's figures and release offsets in res. */
static void
record_solution(struct moe_fit_result *res, const struct problem *pb, const struct solution *sol)
{
    for (int k = 0; k < pb->nfree; k++) {
        struct moe_fit_param *fp = &res->params[pb->free[k]];
        fp->constrained = true;
        fp->value = to_value(&fp->prior, sol->x[k]);
        fp->se = slope(&fp->prior, sol->x[k]) * sol->se_x[k];
    }
    for (int d = 0; d < pb->ndelta; d++) {
        int k = pb->delta_k[d];
        int j = pb->free[k];
        struct moe_fit_release *rel = &res->releases[pb->delta_rel[d]];
        const struct moe_json_prior *pr = &res->params[j].prior;
        double xr = sol->x[k] + sol->x[pb->nfree + d];
        rel->has[j] = true;
        rel->value[j] = to_value(pr, xr);
        rel->se[j] = slope(pr, xr) * sol->se_x[pb->nfree + d];
    }
    res->iterations = sol->iterations;
    res->rms_fit = sol->rms;
}

/* Leave-one-out: refit without each used run and predict it. */
static enum moe_status leave_one_out(struct moe_fit_result *res,
                                     const struct moe_run_set *set,
                                     struct prun *const *used,
                                     int nused,
                                     const struct moe_fit_options *o,
                                     struct moe_diag *diag)
{
    struct prun **rest = calloc((size_t)(nused > 0 ? nused : 1), sizeof(*rest));
    if (rest == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory (leave-one-out)");
    }
    double ss = 0.0;
    enum moe_status st = MOE_OK;
    for (int out = 0; out < nused && st == MOE_OK; out++) {
        int m = 0;
        for (int i = 0; i < nused; i++) {
            if (i != out) {
                rest[m++] = used[i];
            }
        }
        struct problem pb;
        struct solution sol;
        st = fit_subset(res, set, rest, m, o, NULL, &pb, &sol, diag);
        if (st == MOE_OK) {
            struct fctx c = {&pb, set};
            struct moe_prediction pred;
            struct moe_fit_run *fr = &res->runs[used[out]->idx];
            st = predict_at(&c, &sol, used[out], &fr->pred_loo, &pred, diag);
            if (st == MOE_OK) {
                double e = log(fr->pred_loo / fr->run->measured);
                ss += e * e;
            }
        }
    }
    free(rest);
    res->rms_loo = nused > 0 ? sqrt(ss / nused) : 0.0;
    return st;
}

/* Predictions of every resolvable run with the priors and with the fitted figures. */
static enum moe_status predict_all(struct moe_fit_result *res,
                                   const struct moe_run_set *set,
                                   struct prun *prs,
                                   struct problem *pb,
                                   const struct solution *sol,
                                   struct moe_diag *diag)
{
    for (int i = 0; i < set->n; i++) {
        struct moe_fit_run *fr = &res->runs[i];
        if (!fr->ok) {
            continue;
        }
        /* A run left out of the fit (a known miss, one predicted from the others) takes its
         * release's figures when the fitted runs gave that release some. */
        for (int k = 0; !fr->used && prs[i].release < 0 && res->opt.releases &&
                        fr->run->software[0] != '\0' && k < res->num_releases;
             k++) {
            if (strcmp(res->releases[k].name, fr->run->software) == 0) {
                prs[i].release = k;
                fr->release = k;
            }
        }
        struct fctx c = {pb, set};
        struct moe_prediction pred;
        MOE_TRY(predict_at(&c, NULL, &prs[i], &fr->pred_prior, &pred, diag));
        MOE_TRY(predict_at(&c, sol, &prs[i], &fr->pred_fit, &pred, diag));
        fr->step_s = pred.step_time_s;
        fr->mem_gib = pred.mem.total / 1073741824.0;
    }
    return MOE_OK;
}

/*
 * A cluster's own figure (host, network, its GPU's kernels) that no run on that cluster
 * constrains takes the fitted value of the same figure on a cluster of the generation that has
 * runs and the same prior (the file's author gave them the same host or network class: an x86
 * DGX host's time per Python call, Grace's; an InfiniBand fabric's all-to-all fraction), with the
 * prior's sd as its se (how far two such clusters may differ): what the published runs measured
 * for one is the best estimate for the other. The most precise such fit is taken. Only for a
 * cluster none of whose runs is fitted: its own runs, constraining or not, speak for it.
 */
static void borrow_siblings(struct moe_fit_result *res, struct prun *const *used, int nused)
{
    for (int i = 0; i < nused; i++) {
        if (used[i]->on_base) {
            return; /* the cluster's own runs speak for it, constraining or not */
        }
    }
    for (int j = 0; j < res->num_params; j++) {
        struct moe_fit_param *fp = &res->params[j];
        if (fp->cluster != 0 || fp->constrained) {
            continue;
        }
        int best = -1;
        for (int k = 0; k < res->num_params; k++) {
            const struct moe_fit_param *sib = &res->params[k];
            bool same = sib->cluster > 0 && sib->constrained && strcmp(sib->path, fp->path) == 0 &&
                        sib->prior.value == fp->prior.value && sib->prior.sd == fp->prior.sd &&
                        sib->prior.min == fp->prior.min && sib->prior.max == fp->prior.max;
            if (same && (best < 0 || sib->se < res->params[best].se)) {
                best = k;
            }
        }
        if (best >= 0) {
            fp->borrowed = best;
            fp->value = res->params[best].value;
            fp->se = fp->prior.sd;
        }
    }
}

/* The newest release with figures of its own (by date, then name). */
static void pick_default(struct moe_fit_result *res)
{
    res->default_release[0] = '\0';
    const struct moe_fit_release *best = NULL;
    for (int r = 0; r < res->num_releases; r++) {
        const struct moe_fit_release *rel = &res->releases[r];
        bool own = false;
        for (int j = 0; j < res->num_params; j++) {
            own = own || rel->has[j];
        }
        if (own && (best == NULL || strcmp(rel->date, best->date) > 0 ||
                    (strcmp(rel->date, best->date) == 0 && strcmp(rel->name, best->name) > 0))) {
            best = rel;
        }
    }
    if (best != NULL) {
        (void)snprintf(res->default_release, sizeof(res->default_release), "%s", best->name);
    }
}

static enum moe_status no_usable_run(const struct moe_fit_result *res, struct moe_diag *diag)
{
    char why[1024] = "";
    size_t used = 0;
    for (int i = 0; i < res->num_runs && used + 4 < sizeof(why); i++) {
        const struct moe_fit_run *fr = &res->runs[i];
        int w = snprintf(why + used, sizeof(why) - used, "%s%s: %s%s%.160s%s", i ? "; " : "",
                         fr->run->id, fr->why[0] ? fr->why : "not used", fr->error[0] ? " (" : "",
                         fr->error, fr->error[0] ? ")" : "");
        used += w > 0 ? (size_t)w : 0;
    }
    return moe_diag_set(diag, MOE_ERR_INVALID, "no usable run for %s (%s): %s", res->base,
                        res->generation, res->num_runs > 0 ? why : "the runs file holds no run");
}

enum moe_status moe_fit(const char *base,
                        const struct moe_run_set *set,
                        const struct moe_fit_options *o,
                        struct moe_fit_result *res,
                        struct moe_diag *diag)
{
    memset(res, 0, sizeof(*res));
    res->opt = *o;
    (void)snprintf(res->base, sizeof(res->base), "%s", base);
    cJSON *root = NULL;
    char path[512];
    MOE_TRY(moe_cluster_read_json(base, &root, path, sizeof(path), diag));
    struct moe_cluster bcl;
    enum moe_status st = moe_cluster_from_json_release(root, path, MOE_CLUSTER_SHARED, &bcl, diag);
    if (st == MOE_OK) {
        (void)snprintf(res->generation, sizeof(res->generation), "%s", bcl.generation);
        (void)snprintf(res->clusters[0], sizeof(res->clusters[0]), "%s", bcl.name);
        res->num_clusters = 1;
        st = read_candidates(root, path, "", -1, res, diag);
    }
    cJSON_Delete(root);
    if (st == MOE_OK && res->num_params == 0) {
        st = moe_diag_set(diag, MOE_ERR_INVALID,
                          "%s has no figure with a \"prior\": nothing to fit (fitted figures carry "
                          "{\"prior\": {\"value\", \"sd\", \"min\", \"max\", \"source\"}})",
                          path);
    }
    if (st != MOE_OK) {
        return st;
    }
    res->runs = calloc((size_t)(set->n > 0 ? set->n : 1), sizeof(*res->runs));
    struct prun *prs = calloc((size_t)(set->n > 0 ? set->n : 1), sizeof(*prs));
    struct prun **used = calloc((size_t)(set->n > 0 ? set->n : 1), sizeof(*used));
    if (res->runs == NULL || prs == NULL || used == NULL) {
        st = moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory (fit runs)");
    }
    res->num_runs = st == MOE_OK ? set->n : 0;
    for (int i = 0; st == MOE_OK && i < set->n; i++) {
        prepare_run(set, i, path, bcl.name, o, res, &prs[i]);
        if (res->runs[i].used) {
            used[res->num_used++] = &prs[i];
            res->num_used_on_base += prs[i].on_base ? 1 : 0;
        }
    }
    if (st == MOE_OK && res->num_used == 0) {
        st = no_usable_run(res, diag);
    }
    struct problem pb;
    struct solution sol;
    if (st == MOE_OK) {
        st = fit_subset(res, set, used, res->num_used, o, res->params, &pb, &sol, diag);
    }
    if (st == MOE_OK) {
        record_solution(res, &pb, &sol);
        borrow_siblings(res, used, res->num_used);
        pick_default(res);
        st = predict_all(res, set, prs, &pb, &sol, diag);
    }
    if (st == MOE_OK && o->loo) {
        st = leave_one_out(res, set, used, res->num_used, o, diag);
    }
    for (int i = 0; i < set->n && prs != NULL; i++) {
        free(prs[i].p);
    }
    free(prs);
    free(used);
    if (st != MOE_OK) {
        moe_fit_result_free(res);
    }
    return st;
}

void moe_fit_result_free(struct moe_fit_result *res)
{
    free(res->runs);
    res->runs = NULL;
    res->num_runs = 0;
}
