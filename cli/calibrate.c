/*
 * Fits of the cost model's figures to moefold-bench measurements (cli/calibrate.h).
 *
 * - GEMM: rate = peak (1 - exp(-F / half_flops)) d / (d + half_dim), d the narrowest dimension,
 *   fitted to the measured rates by nonlinear least squares (GSL gsl_multifit_nlinear, trust
 *   region Levenberg-Marquardt, from the best point of a log-space grid), the same curve
 *   model/compute.c evaluates; the grouped factor is measured against that curve at each
 *   expert's own rows.
 * - Collectives: t = latency + bus_bytes / busbw by linear least squares (GSL gsl_fit_linear) on
 *   the sizes above the small-message regime, bus bytes per nccl-tests (the bench reports busbw
 *   and time for each size; bus_bytes = busbw x time).
 * - Attention: efficiency and narrow-head term by weighted linear least squares in 1/head_dim
 *   (fit_attention below).
 * - Grouped GEMM factor, elementwise efficiency and quantiser cost are medians of measured
 *   ratios.
 */
#include "cli/calibrate.h"

#include "topologies/json_util.h"

#include <gsl/gsl_blas.h>
#include <gsl/gsl_fit.h>
#include <gsl/gsl_multifit_nlinear.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>
#include <gsl/gsl_vector.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_POINTS 1024
#define GIB        1073741824.0

static const char *const coll_names[MOE_CALIB_NUM_COLL] = {"allreduce", "allgather",
                                                           "reducescatter", "alltoall", "sendrecv"};

_Static_assert((int)MOE_CALIB_NUM_COLL == (int)MOE_BUSBW_NUM_KINDS,
               "the bench's collectives and the cluster's per-size table share one order");

const char *moe_calib_coll_name(enum moe_calib_coll c)
{
    return (int)c >= 0 && c < MOE_CALIB_NUM_COLL ? coll_names[c] : "unknown";
}

static double num_of(const cJSON *o, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(it) ? it->valuedouble : (double)NAN;
}

static bool ok_of(const cJSON *o)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, "ok");
    const cJSON *wrong = cJSON_GetObjectItemCaseSensitive(o, "wrong");
    if (it != NULL) {
        return cJSON_IsTrue(it);
    }
    return wrong == NULL || (cJSON_IsNumber(wrong) && wrong->valuedouble == 0.0);
}

static double median(double *v, size_t n)
{
    gsl_sort(v, 1, n);
    return gsl_stats_median_from_sorted_data(v, 1, n);
}

/*
 * rate(m, n, k) = a (1 - exp(-F / h)) d / (d + q), F = 2mnk, d = min(m, n, k): the efficiency
 * model/compute.c evaluates times the fitted peak a. Parameters (a, ln h, ln q): both scales stay
 * positive, and either term can fade out (h -> 0 or q -> 0) when the host's shapes do not need it.
 */
struct curve_data {
    const double *f; /* FLOPs per point */
    const double *d; /* narrowest dimension per point */
    const double *y; /* measured GFLOP/s */
    size_t n;
};

static double curve_shape(double f, double d, double h, double q)
{
    return (1.0 - exp(-f / h)) * d / (d + q);
}

static int curve_f(const gsl_vector *x, void *data, gsl_vector *r)
{
    const struct curve_data *c = data;
    double a = gsl_vector_get(x, 0);
    double h = exp(gsl_vector_get(x, 1));
    double q = exp(gsl_vector_get(x, 2));
    for (size_t i = 0; i < c->n; i++) {
        gsl_vector_set(r, i, (a * curve_shape(c->f[i], c->d[i], h, q) - c->y[i]) / c->y[i]);
    }
    return GSL_SUCCESS;
}

static int curve_df(const gsl_vector *x, void *data, gsl_matrix *jac)
{
    const struct curve_data *c = data;
    double a = gsl_vector_get(x, 0);
    double h = exp(gsl_vector_get(x, 1));
    double q = exp(gsl_vector_get(x, 2));
    for (size_t i = 0; i < c->n; i++) {
        double e = exp(-c->f[i] / h);
        double t = c->d[i] / (c->d[i] + q);
        gsl_matrix_set(jac, i, 0, (1.0 - e) * t / c->y[i]);
        gsl_matrix_set(jac, i, 1, -a * e * (c->f[i] / h) * t / c->y[i]);
        gsl_matrix_set(jac, i, 2, -a * (1.0 - e) * t * q / (c->d[i] + q) / c->y[i]);
    }
    return GSL_SUCCESS;
}

/* RMS relative residual of (a, h, q); a solved linearly (least squares) when *a_io <= 0. */
static double curve_rms(const struct curve_data *c, double *a_io, double h, double q)
{
    if (*a_io <= 0.0) {
        double num = 0.0;
        double den = 0.0;
        for (size_t i = 0; i < c->n; i++) {
            double g = curve_shape(c->f[i], c->d[i], h, q) / c->y[i];
            num += g;
            den += g * g;
        }
        *a_io = den > 0.0 ? num / den : 1.0;
    }
    double err = 0.0;
    for (size_t i = 0; i < c->n; i++) {
        double r = (*a_io * curve_shape(c->f[i], c->d[i], h, q) - c->y[i]) / c->y[i];
        err += r * r;
    }
    return sqrt(err / (double)c->n);
}

/* Fit (a, h, q): a coarse grid over (h, q) in log space, then GSL's trust-region solver. */
static enum moe_status fit_curve(struct curve_data *c,
                                 double *a_out,
                                 double *h_out,
                                 double *q_out,
                                 double *rms,
                                 struct moe_diag *diag)
{
    double best_h = 1e6;
    double best_q = 1.0;
    double best_a = 1.0;
    double best_err = INFINITY;
    for (double lh = 0.0; lh <= 13.0; lh += 0.1) {
        for (double lq = -2.0; lq <= 4.0; lq += 0.05) {
            double a = 0.0;
            double err = curve_rms(c, &a, pow(10.0, lh), pow(10.0, lq));
            if (err < best_err) {
                best_err = err;
                best_h = pow(10.0, lh);
                best_q = pow(10.0, lq);
                best_a = a;
            }
        }
    }
    gsl_multifit_nlinear_fdf fdf = {curve_f, curve_df, NULL, c->n, 3, c, 0, 0, 0};
    gsl_multifit_nlinear_parameters params = gsl_multifit_nlinear_default_parameters();
    gsl_multifit_nlinear_workspace *w =
        gsl_multifit_nlinear_alloc(gsl_multifit_nlinear_trust, &params, c->n, 3);
    if (w == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "calibrate: out of memory in the GEMM fit");
    }
    double x0[3] = {best_a, log(best_h), log(best_q)};
    gsl_vector_view xv = gsl_vector_view_array(x0, 3);
    gsl_multifit_nlinear_init(&xv.vector, &fdf, w);
    int info = 0;
    int status = gsl_multifit_nlinear_driver(200, 1e-10, 1e-10, 1e-12, NULL, NULL, &info, w);
    double a = gsl_vector_get(w->x, 0);
    double h = exp(gsl_vector_get(w->x, 1));
    double q = exp(gsl_vector_get(w->x, 2));
    gsl_multifit_nlinear_free(w);
    double err = curve_rms(c, &a, h, q);
    if (status != GSL_SUCCESS || !(a > 0.0) || !isfinite(err) || !(err <= best_err)) {
        a = best_a; /* the grid start is the least-squares optimum on the grid */
        h = best_h;
        q = best_q;
        err = best_err;
    }
    *a_out = a;
    *h_out = h;
    *q_out = q < 1e-2 ? 0.0 : q; /* a negligible narrow-dimension term is no term */
    *rms = err;
    return MOE_OK;
}

static enum moe_status
fit_gemm(const cJSON *bench, struct moe_calib_fit *fit, struct moe_diag *diag)
{
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(bench, "gemm");
    double f[MAX_POINTS];
    double d[MAX_POINTS];
    double y[MAX_POINTS];
    size_t n = 0;
    const cJSON *it = NULL;
    cJSON_ArrayForEach(it, arr)
    {
        double m = num_of(it, "m");
        double nn = num_of(it, "n");
        double k = num_of(it, "k");
        double g = num_of(it, "gflops");
        if (!ok_of(it) || !(g > 0.0) || !(m > 0.0) || !(nn > 0.0) || !(k > 0.0) ||
            n >= MAX_POINTS) {
            continue;
        }
        f[n] = 2.0 * m * nn * k;
        d[n] = fmin(m, fmin(nn, k));
        y[n] = g;
        n++;
    }
    if (n < 4) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "calibrate: the bench has %zu usable GEMM points; need 4 or more", n);
    }
    /* The slowest rank against the mean, shape by shape (benches that record it). */
    double spread[MAX_POINTS];
    size_t ns = 0;
    cJSON_ArrayForEach(it, arr)
    {
        double t = num_of(it, "time_us");
        double t_max = num_of(it, "time_us_max");
        if (ok_of(it) && t > 0.0 && t_max >= t && ns < MAX_POINTS) {
            spread[ns++] = t_max / t - 1.0;
        }
    }
    /* The mean, not the median: a step waits at every collective for the slower rank's segment,
     * so the expected wait is the mean spread, and this host's is heavy-tailed (2026-12-02, 16
     * shapes: median 0.7%, mean 2.4%, max 13.5%; the validate suite's unpriced waits were 0-7.6%
     * of its steps, median 3%). */
    double sum = 0.0;
    for (size_t i = 0; i < ns; i++) {
        sum += spread[i];
    }
    fit->rank_spread = ns > 0 ? sum / (double)ns : 0.0;
    fit->rank_spread_points = (int)ns;
    /* The probe's row as measured, not as the fitted curve prices it: the curve misses single
     * shapes by its RMS residual (0.09-0.12 on this project's host), and compare --host-speed
     * divides the run's probe by this to tell how fast the host ran against the bench. */
    fit->probe_gemm_us = 0.0;
    cJSON_ArrayForEach(it, arr)
    {
        double t = num_of(it, "time_us");
        if (ok_of(it) && t > 0.0 && num_of(it, "m") == MOE_CALIB_PROBE_DIM &&
            num_of(it, "n") == MOE_CALIB_PROBE_DIM && num_of(it, "k") == MOE_CALIB_PROBE_DIM) {
            fit->probe_gemm_us = t;
        }
    }
    /* Fit the rate itself: its asymptote is the peak the model scales (max_eff 1). */
    struct curve_data c = {f, d, y, n};
    double rate = 0.0;
    MOE_TRY(fit_curve(&c, &rate, &fit->gemm_half_flops, &fit->gemm_half_dim, &fit->gemm_rms_resid,
                      diag));
    fit->gemm_peak_gflops = rate;
    fit->gemm_max_eff = 1.0;
    fit->gemm_points = (int)n;
    return MOE_OK;
}

/*
 * Grouped GEMM: rate = grouped_eff x peak x the curve with its own narrow-dimension term at each
 * expert's rows (gemm.grouped_half_dim), fitted to the grouped rows themselves (the dense term
 * priced them 15-35% off, 2026-12-03). Both tables are timed as a step runs them, operands cold
 * (engine/bench.c): timed hot, the grouped term came out at 24-26 rows and priced the validate
 * suite's expert_gemm 7-19% fast in 19 of its 20 plans at 64-128 rows an expert (2026-12-04,
 * Intel 2-vCPU host); cold, 55-63 rows, and within 6% in 18 of 20 (step median 1.9%). The bench
 * times the step's three GEMMs in turn, each call on its own, and each gets its own factor and
 * term: one rate for the three (their mean) priced the engine's expert_gemm 5-8% fast in two
 * validate runs (AMD host), the forward's alone for the three priced it 14-24% slow where an
 * expert has 16 rows (Intel host, 2026-12-03: backward-weight, which reduces over those rows,
 * took 0.7 x the forward's time there) and the presets' miniatures' backward GEMMs (32-64 wide)
 * ran at twice the forward's rate. The term is a grid over 0-256 rows (step 0.05), each with the
 * median ratio (at most cap) as the factor, keeping the one whose rows lie closest to it in the
 * median (least median |log residual|; the RMS at that pair is reported): a few shapes far off
 * every curve of this form must not bend it for the rest. Least RMS had let the two miniature
 * shapes (32-64 wide, backward-data at 2 x the curve) set backward-data's term: 0.81 with 12.6
 * rows where the other ten shapes say 0.97 with 24 (2026-12-04 calibration), which priced the
 * validate model's backward-data 13-17% slower than the forward at 128-229 rows while the
 * engine ran the two within 3% (ep2-skew's busiest rank: its extra rows' backward, the dispatch's
 * wait, priced 20% long in the 03:32 run). The forward's factor is at most 1 (a factor on the
 * dense curve, whose rows are cold), the backward's at most 2 (the miniatures' hot rows ran at
 * 1.3 x the dense curve's peak, 2026-12-03). */
#define GROUPED_HALF_STEPS 5120 /* 0 to 256 rows */
#define GROUPED_HALF_STEP  0.05

/*
 * The small-matrix regime. A host's BLAS may run small GEMMs on kernels of their own: OpenBLAS on
 * AVX-512 x86 runs M x N x K <= 10^6 unpacked (kernel/x86_64/sgemm_small_kernel_permit_skylakex.c,
 * for its NN and NT layouts). The presets' miniatures' expert GEMMs (32-64 wide, 16-128 rows an
 * expert) are that small, the validate model's (256 wide) are not, and one curve over both priced
 * the miniatures' backward-data at half the rate the engine ran it (2026-12-04, Intel 2-vCPU host:
 * 48-62 GFLOP/s priced, 97-126 run; backward-data's RMS log residual over the bench's rows 0.40).
 * So the rows are split by each expert's rows x in x out where a split fits them better than one
 * curve: every candidate between two rows' sizes with at least GROUPED_SMALL_MIN_ROWS rows on each
 * side, each side fitted as above (each direction its own factor and term, factors at most 2 below
 * the split), the least RMS log residual over the three directions kept if it is at most
 * GROUPED_SMALL_GAIN of one curve's and lower by GROUPED_SMALL_MIN_DROP. The regime's bound is the
 * geometric mean of the two sizes around the split (the bench knows no size in between); a host
 * whose rows fit one curve gets none (gemm.grouped_small.mnk 0, as every GPU file).
 */
#define GROUPED_SMALL_MIN_ROWS 4
#define GROUPED_SMALL_GAIN     (2.0 / 3.0)
#define GROUPED_SMALL_MIN_DROP 0.03

enum { GROUPED_DIRS = 3 };

/* The grouped rows calibrate fits (even routing, checked): each row's rate per direction (0: not
 * timed), what model/compute.c prices before the factor, and each expert's rows x in x out. */
struct grouped_pts {
    size_t n;
    double rate[GROUPED_DIRS][MAX_POINTS];
    double flops[MAX_POINTS];
    double d[MAX_POINTS];
    double mnk[MAX_POINTS];
};

/* One direction's fit on one side of a split. */
struct dir_fit {
    double eff, half_dim, rms;
    double ss; /* sum of squared log residuals */
    size_t n;  /* rows fitted */
};

static void grouped_points(const cJSON *bench, struct grouped_pts *p)
{
    static const char *const keys[GROUPED_DIRS] = {"gflops", "dgrad_gflops", "wgrad_gflops"};
    p->n = 0;
    const cJSON *it = NULL;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(bench, "grouped_gemm"))
    {
        double e = num_of(it, "experts");
        double t = num_of(it, "tokens");
        double in = num_of(it, "in");
        double out = num_of(it, "out");
        const cJSON *sk = cJSON_GetObjectItemCaseSensitive(it, "skewed");
        if (!ok_of(it) || !(e > 0.0) || !(t > 0.0) || !(in > 0.0) || !(out > 0.0) ||
            cJSON_IsTrue(sk) || p->n >= MAX_POINTS) {
            continue;
        }
        size_t i = p->n++;
        for (int dir = 0; dir < GROUPED_DIRS; dir++) {
            double rate = num_of(it, keys[dir]);
            p->rate[dir][i] = rate > 0.0 ? rate : 0.0;
        }
        /* What model/compute.c prices before the factor: the curve at the total FLOPs with each
         * expert's own rows as the narrowest dimension. */
        p->flops[i] = 2.0 * t * in * out;
        p->d[i] = fmin(t / e, fmin(in, out));
        p->mnk[i] = t / e * in * out;
    }
}

/* Fit direction `dir`'s factor (at most cap) and term to the rows of size in (lo, hi]. */
static void fit_grouped_dir(const struct grouped_pts *p,
                            const struct moe_calib_fit *fit,
                            int dir,
                            double cap,
                            double lo,
                            double hi,
                            struct dir_fit *out)
{
    double g[MAX_POINTS], base[MAX_POINTS], d[MAX_POINTS];
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++) {
        if (p->rate[dir][i] > 0.0 && p->mnk[i] > lo && p->mnk[i] <= hi) {
            g[n] = p->rate[dir][i];
            /* The curve without its narrow term (applied per grid step below). */
            base[n] = fit->gemm_peak_gflops * (1.0 - exp(-p->flops[i] / fit->gemm_half_flops));
            d[n] = p->d[i];
            n++;
        }
    }
    memset(out, 0, sizeof(*out));
    out->n = n;
    if (n == 0) {
        return;
    }
    double best_med = INFINITY;
    for (int step = 0; step <= GROUPED_HALF_STEPS; step++) {
        double h = step * GROUPED_HALF_STEP;
        double r[MAX_POINTS], sorted[MAX_POINTS];
        for (size_t i = 0; i < n; i++) {
            r[i] = g[i] / (base[i] * d[i] / (d[i] + h));
            sorted[i] = r[i];
        }
        /* Capped here, inside the grid: capping the best unconstrained pair afterwards kept a
         * term chosen for a larger factor and priced the rows slow. */
        double ge = fmin(median(sorted, n), cap);
        double ss = 0.0;
        for (size_t i = 0; i < n; i++) {
            double e = log(r[i] / ge);
            ss += e * e;
            sorted[i] = fabs(e);
        }
        double med = median(sorted, n);
        if (med < best_med - 1e-12) {
            best_med = med;
            out->ss = ss;
            out->rms = sqrt(ss / (double)n);
            out->eff = ge;
            out->half_dim = h;
        }
    }
}

/* The three directions on (lo, hi]; the forward's factor at most fwd_cap. Returns the summed
 * squared residual, *n_out the residuals counted. */
static double fit_grouped_side(const struct grouped_pts *p,
                               const struct moe_calib_fit *fit,
                               double fwd_cap,
                               double lo,
                               double hi,
                               struct dir_fit out[GROUPED_DIRS],
                               size_t *n_out)
{
    double ss = 0.0;
    *n_out = 0;
    for (int dir = 0; dir < GROUPED_DIRS; dir++) {
        fit_grouped_dir(p, fit, dir, dir == 0 ? fwd_cap : 2.0, lo, hi, &out[dir]);
        ss += out[dir].ss;
        *n_out += out[dir].n;
    }
    return ss;
}

/* The best split's bound (0: none beats one curve), its RMS in *rms. */
static double grouped_split(const struct grouped_pts *p,
                            const struct moe_calib_fit *fit,
                            double rms_one,
                            double *rms)
{
    double sizes[MAX_POINTS];
    memcpy(sizes, p->mnk, p->n * sizeof(double));
    gsl_sort(sizes, 1, p->n);
    double best = 0.0;
    double best_rms = rms_one;
    for (size_t i = GROUPED_SMALL_MIN_ROWS; i + GROUPED_SMALL_MIN_ROWS <= p->n; i++) {
        if (!(sizes[i] > sizes[i - 1])) {
            continue; /* not between two sizes */
        }
        struct dir_fit lo_fit[GROUPED_DIRS], hi_fit[GROUPED_DIRS];
        size_t n_lo = 0, n_hi = 0;
        double ss = fit_grouped_side(p, fit, 2.0, 0.0, sizes[i - 1], lo_fit, &n_lo) +
                    fit_grouped_side(p, fit, 1.0, sizes[i - 1], INFINITY, hi_fit, &n_hi);
        double r = n_lo + n_hi > 0 ? sqrt(ss / (double)(n_lo + n_hi)) : (double)INFINITY;
        if (r < best_rms) {
            best_rms = r;
            best = sqrt(sizes[i - 1] * sizes[i]);
        }
    }
    *rms = best_rms;
    bool is_better = best > 0.0 && best_rms <= GROUPED_SMALL_GAIN * rms_one &&
                     rms_one - best_rms >= GROUPED_SMALL_MIN_DROP;
    return is_better ? best : 0.0;
}

static void set_grouped(struct moe_calib_fit *fit, const struct dir_fit big[GROUPED_DIRS])
{
    fit->grouped_eff = big[0].eff;
    fit->grouped_half_dim = big[0].half_dim;
    fit->grouped_rms_resid = big[0].rms;
    for (int i = 0; i < 2; i++) {
        /* A bench without backward rates: factor 0, the forward's figures. */
        fit->grouped_bwd_eff[i] = big[i + 1].n > 0 ? big[i + 1].eff : 0.0;
        fit->grouped_bwd_half_dim[i] = big[i + 1].n > 0 ? big[i + 1].half_dim : 0.0;
        fit->grouped_bwd_rms_resid[i] = big[i + 1].rms;
    }
}

static enum moe_status
fit_grouped(const cJSON *bench, struct moe_calib_fit *fit, struct moe_diag *diag)
{
    struct grouped_pts *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "calibrate: out of memory for the grouped rows");
    }
    grouped_points(bench, p);
    struct dir_fit one[GROUPED_DIRS];
    size_t n_one = 0;
    double ss_one = fit_grouped_side(p, fit, 1.0, -INFINITY, INFINITY, one, &n_one);
    if (one[0].n == 0) {
        free(p);
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "calibrate: the bench has no grouped_gemm points");
    }
    fit->grouped_points = (int)one[0].n;
    fit->grouped_one_rms = sqrt(ss_one / (double)n_one);
    double split_rms = fit->grouped_one_rms;
    double bound = grouped_split(p, fit, fit->grouped_one_rms, &split_rms);
    fit->small_mnk = 0.0;
    fit->small_points = 0;
    if (bound > 0.0) {
        struct dir_fit small[GROUPED_DIRS], big[GROUPED_DIRS];
        size_t n_s = 0, n_b = 0;
        (void)fit_grouped_side(p, fit, 2.0, -INFINITY, bound, small, &n_s);
        (void)fit_grouped_side(p, fit, 1.0, bound, INFINITY, big, &n_b);
        set_grouped(fit, big);
        fit->small_mnk = bound;
        fit->small_points = (int)small[0].n;
        fit->grouped_split_rms = split_rms;
        for (int dir = 0; dir < GROUPED_DIRS; dir++) {
            /* A direction the bench did not time below the bound: the forward's figures. */
            const struct dir_fit *f = small[dir].n > 0 ? &small[dir] : &small[0];
            fit->small_eff[dir] = f->eff;
            fit->small_half_dim[dir] = f->half_dim;
            fit->small_rms_resid[dir] = f->rms;
        }
    } else {
        set_grouped(fit, one);
    }
    free(p);
    return MOE_OK;
}

/* The median forward and backward rate / copy bandwidth of a bench table of such rows (key:
 * "activation" or "bias"); false (outputs untouched) without usable rows. */
static bool
fit_fb_rates(const cJSON *bench, const char *key, double copy_best, double *fwd, double *bwd)
{
    double f[MAX_POINTS];
    double b[MAX_POINTS];
    size_t n = 0;
    const cJSON *it = NULL;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(bench, key))
    {
        double fg = num_of(it, "fwd_gbps");
        double bg = num_of(it, "bwd_gbps");
        if (ok_of(it) && fg > 0.0 && bg > 0.0 && n < MAX_POINTS) {
            f[n] = fg;
            b[n] = bg;
            n++;
        }
    }
    if (n == 0) {
        return false;
    }
    *fwd = fmin(median(f, n) / copy_best, 1.5);
    *bwd = fmin(median(b, n) / copy_best, 1.5);
    return true;
}

/*
 * SwiGLU forward and backward at the engine's row widths and per-call working sets (the bench's
 * "activation" rows): each direction's median rate over its bytes (forward: gate and up read,
 * output written; backward: those and the output gradient read, both input gradients written) /
 * copy bandwidth. The engine's expert rows are 32-512 wide and cache-resident, where the
 * backward's extra bytes cost little beside its exp: it took 1.05-1.6 x the forward's time here,
 * not the 1 + act/elem the GPU formula gives. Leaves act_eff / act_bwd_eff as they are without
 * such rows (an older bench).
 */
static void fit_activation(const cJSON *bench, double copy_best, struct moe_calib_fit *fit)
{
    (void)fit_fb_rates(bench, "activation", copy_best, &fit->act_eff, &fit->act_bwd_eff);
}

/*
 * The routed experts' bias ops at the engine's widths (the bench's "bias" rows: one call per
 * expert over a cache-resident group): the forward's rate over the rows read and written, the
 * backward's over the rows read, / copy bandwidth. 0 (elem_eff) without such rows. At GPT-OSS's
 * miniature under CP2 the engine's calls ran 0.6 / 1.3 us for 32 x 64 rows, 4x faster than the
 * streaming elementwise rate priced them (validate 2026-12-02: expert_gemm +31% in all 3 runs).
 */
static void fit_bias(const cJSON *bench, double copy_best, struct moe_calib_fit *fit)
{
    fit->bias_eff = 0.0;
    fit->bias_bwd_eff = 0.0;
    (void)fit_fb_rates(bench, "bias", copy_best, &fit->bias_eff, &fit->bias_bwd_eff);
}

static enum moe_status
fit_memory(const cJSON *bench, struct moe_calib_fit *fit, struct moe_diag *diag)
{
    double copy_best = 0.0;
    double copy_bytes = 0.0;
    double elem[MAX_POINTS];
    double elem_bytes[MAX_POINTS];
    size_t ne = 0;
    double adam_best = 0.0;
    double adam_bytes = 0.0;
    double step_best = 0.0;
    double step_bytes = 0.0;
    double act[MAX_POINTS];
    size_t na = 0;
    const cJSON *it = NULL;
    /* Streaming bandwidth: the copy with the largest working set (past the caches). */
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(bench, "memory"))
    {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(it, "kernel");
        double b = num_of(it, "bytes");
        double g = num_of(it, "gbps");
        if (!ok_of(it) || !cJSON_IsString(k) || !(g > 0.0)) {
            continue;
        }
        if (strcmp(k->valuestring, "copy") == 0 && b >= copy_bytes) {
            copy_bytes = b;
            copy_best = g;
        } else if (strcmp(k->valuestring, "adamw") == 0) {
            if (b >= adam_bytes) {
                adam_bytes = b;
                adam_best = g;
            }
        } else if (strcmp(k->valuestring, "optimizer") == 0) {
            if (b >= step_bytes) {
                step_bytes = b;
                step_best = g;
            }
        }
        if (strcmp(k->valuestring, "swiglu") == 0 && na < MAX_POINTS) {
            act[na++] = g;
        }
        if (strcmp(k->valuestring, "copy") == 0 || strcmp(k->valuestring, "adamw") == 0 ||
            strcmp(k->valuestring, "optimizer") == 0) {
            continue;
        }
        if (strcmp(k->valuestring, "axpy") != 0 && ne < MAX_POINTS) {
            /* the remaining elementwise kernels (norm, activation, rope) */
            elem[ne] = g;
            elem_bytes[ne] = b;
            ne++;
        }
    }
    if (!(copy_best > 0.0) || ne == 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "calibrate: the bench needs memory 'copy' and elementwise points");
    }
    fit->mem_gbps = copy_best;
    /* The optimizer's streams at AdamW's rate (the largest working set): AdamW moves 28 of the 44
     * bytes per parameter model/cost.c counts for the step, and its rate follows the engine's
     * optimizer phase. The whole step's row (sum of squares, AdamW, the master's copy into the
     * weights, the gradients' zeroing, one pass each over one large block) does not: its copy and
     * zeroing ride the host's memory spells (this VM's copy row read 13-16 GB/s in some hours and
     * 26-29 in others), which the engine's per-bucket copies follow far less. Over eight validate
     * runs of 2026-12-03 (dp2's optimizer phase x the row's rate, in MB: a constant if the row
     * tracks the phase) AdamW's row gave 166-179, the whole step's 161-197; priced at the whole
     * step's, the phase read -13% to -22% in the runs of a fast spell. A bench without AdamW: the
     * step's row, else the copy's rate. */
    double opt_rate = adam_best > 0.0 ? adam_best : step_best;
    fit->optimizer_eff = opt_rate > 0.0 ? fmin(opt_rate / copy_best, 1.5) : 1.0;
    /* Elementwise efficiency: kernels at working sets past the caches, as the copy. */
    double r[MAX_POINTS];
    size_t n = 0;
    for (size_t i = 0; i < ne; i++) {
        if (elem_bytes[i] >= copy_bytes / 8.0) {
            r[n++] = elem[i] / copy_best;
        }
    }
    if (n == 0) {
        for (size_t i = 0; i < ne; i++) {
            r[n++] = elem[i] / copy_best;
        }
    }
    fit->elem_eff = median(r, n);
    if (fit->elem_eff > 1.5) {
        fit->elem_eff = 1.5;
    }
    /* The MLP activation (an exp per element) apart: with RoPE from a table the median above is
     * the streaming kernels' rate, which SwiGLU runs at half of. Its exp bounds it at every size,
     * so the median over all of them (one size alone swung 1.5-3.2 GB/s between runs here). A
     * bench with the activation at the engine's shapes replaces it, forward and backward. */
    fit->act_eff = na > 0 ? fmin(median(act, na) / copy_best, 1.5) : 0.0;
    fit->act_bwd_eff = 0.0;
    fit_activation(bench, copy_best, fit);
    fit_bias(bench, copy_best, fit);
    return MOE_OK;
}

/*
 * Attention: t = F / (peak x eff) x (1 + half_dim / d) over the bench's shapes, F the model's
 * causal FLOPs and d the head dimension (model/compute.c's attention core). Per FLOP, peak / rate
 * = 1/eff + (half_dim/eff) / d is linear in 1/d: weighted least squares (weights 1/y^2, relative
 * residuals) gives eff and half_dim, forward and backward apart. The d-independent part is the
 * softmax's per-score work (exp, scale, mask, the score rows' traffic) against the products' 4 d
 * FLOPs per score, so narrow heads run far below wide ones. With fewer than two head dimensions
 * (or a fit out of range) the efficiency is the median at the GEMM curve's own half_dim.
 */
static void fit_attention_dir(
    const double *x, const double *y, size_t n, double half_gemm, double *eff, double *half)
{
    double w[MAX_POINTS];
    double ymed[MAX_POINTS];
    bool varied = false;
    for (size_t i = 0; i < n; i++) {
        w[i] = 1.0 / (y[i] * y[i]);
        varied = varied || fabs(x[i] - x[0]) > 1e-12;
        ymed[i] = (1.0 + half_gemm * x[i]) / y[i]; /* eff at the GEMM's half_dim */
    }
    double a = 0.0, b = 0.0, c00 = 0.0, c01 = 0.0, c11 = 0.0, chisq = 0.0;
    if (varied && n >= 2 &&
        gsl_fit_wlinear(x, 1, w, 1, y, 1, n, &a, &b, &c00, &c01, &c11, &chisq) == 0 && a > 0.0 &&
        b >= 0.0 && 1.0 / a <= 1.0) {
        *eff = 1.0 / a;
        *half = b / a;
        return;
    }
    *eff = fmin(1.0, median(ymed, n));
    *half = half_gemm;
}

static void fit_attention(const cJSON *bench, struct moe_calib_fit *fit)
{
    double x[MAX_POINTS];
    double fw[MAX_POINTS];
    double bw[MAX_POINTS];
    size_t n = 0;
    const cJSON *it = NULL;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(bench, "attention"))
    {
        double f = num_of(it, "fwd_gflops");
        double b = num_of(it, "bwd_gflops");
        double dn = fmin(num_of(it, "head_dim"), num_of(it, "seq"));
        double w = num_of(it, "window");
        if (w > 0.0) {
            continue; /* windowed rows: their tiles (fit_attention_tiles) */
        }
        if (ok_of(it) && f > 0.0 && b > 0.0 && dn > 0.0 && n < MAX_POINTS) {
            x[n] = 1.0 / dn;
            fw[n] = fit->gemm_peak_gflops / f;
            bw[n] = fit->gemm_peak_gflops / b;
            n++;
        }
    }
    fit->has_attention = n > 0;
    if (n > 0) {
        fit_attention_dir(x, fw, n, fit->gemm_half_dim, &fit->attn_fwd_eff,
                          &fit->attn_fwd_half_dim);
        fit_attention_dir(x, bw, n, fit->gemm_half_dim, &fit->attn_bwd_eff,
                          &fit->attn_bwd_half_dim);
    }
}

/*
 * Windowed rows (a sliding window shorter than the sequence): the kernel takes the queries in
 * tiles of `window` rows, each its own GEMM pair (kernels/cpu/attention.c), where the whole-row
 * calls the attention fit measured run one tile per head. Each row's time beyond the model's for
 * its window's scores (model/compute.c: 4 B H T W d FLOPs at the fitted efficiency and head term,
 * 2.5 x that backward), over its extra tiles B H (ceil(T / W) - 1), is its cost per tile; the
 * median over the rows, at least 0. On this project's VM (2026-12-04, by hand before this fit):
 * the GPT-OSS miniature's windowed layers took 0.23 (forward) and 0.26 (backward) of its full
 * layers' time under CP 2 where the scores alone price 0.13 and 0.14, the full layers within 1%
 * and 8% of the model.
 */
static void fit_attention_tiles(const cJSON *bench, struct moe_calib_fit *fit)
{
    double tf[MAX_POINTS];
    double tb[MAX_POINTS];
    size_t n = 0;
    fit->attn_tile_us[0] = 0.0;
    fit->attn_tile_us[1] = 0.0;
    if (!fit->has_attention || !(fit->gemm_peak_gflops > 0.0)) {
        return;
    }
    const cJSON *it = NULL;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(bench, "attention"))
    {
        double w = num_of(it, "window");
        double batch = num_of(it, "batch");
        double seq = num_of(it, "seq");
        double heads = num_of(it, "heads");
        double d = num_of(it, "head_dim");
        double f_us = num_of(it, "fwd_us");
        double b_us = num_of(it, "bwd_us");
        if (!(w > 0.0) || !(w < seq) || !ok_of(it) || !(batch > 0.0) || !(heads > 0.0) ||
            !(d > 0.0) || !(f_us > 0.0) || !(b_us > 0.0) || n >= MAX_POINTS) {
            continue;
        }
        double extra = batch * heads * (ceil(seq / w) - 1.0);
        if (!(extra > 0.0)) {
            continue;
        }
        double flops = 4.0 * batch * heads * seq * fmin(w, seq / 2.0) * d;
        double peak = fit->gemm_peak_gflops * 1e3; /* FLOPs per us */
        double pred_f = flops / (peak * fit->attn_fwd_eff) * (1.0 + fit->attn_fwd_half_dim / d);
        double pred_b =
            2.5 * flops / (peak * fit->attn_bwd_eff) * (1.0 + fit->attn_bwd_half_dim / d);
        tf[n] = (f_us - pred_f) / extra;
        tb[n] = (b_us - pred_b) / extra;
        n++;
    }
    if (n > 0) {
        fit->attn_tile_us[0] = fmax(0.0, median(tf, n));
        fit->attn_tile_us[1] = fmax(0.0, median(tb, n));
    }
}

static void fit_quant(const cJSON *bench, struct moe_calib_fit *fit)
{
    double q[MAX_POINTS];
    size_t n = 0;
    const cJSON *it = NULL;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(bench, "quant"))
    {
        double e = num_of(it, "elements");
        double t = num_of(it, "time_us");
        if (ok_of(it) && e > 0.0 && t > 0.0 && n < MAX_POINTS) {
            /* bytes-equivalent per element at the streaming bandwidth */
            q[n++] = t * 1e-6 / e * fit->mem_gbps * 1e9;
        }
    }
    fit->has_quant = n > 0;
    if (n > 0) {
        fit->quant_bytes_per_elem = median(q, n);
    }
}

void moe_calib_fit_line(const double *x, const double *y, size_t n, struct moe_calib_line *l)
{
    memset(l, 0, sizeof(*l));
    l->points = (int)n;
    if (n < 2 || n > MAX_POINTS) {
        return;
    }
    double c0 = 0.0;
    double c1 = 0.0;
    double cov00 = 0.0;
    double cov01 = 0.0;
    double cov11 = 0.0;
    double sumsq = 0.0;
    double wts[MAX_POINTS] = {0.0};
    for (size_t i = 0; i < n; i++) {
        wts[i] = 1.0 / (y[i] * y[i]); /* relative residuals: sizes span orders of magnitude */
    }
    gsl_fit_wlinear(x, 1, wts, 1, y, 1, n, &c0, &c1, &cov00, &cov01, &cov11, &sumsq);
    if (!(c1 > 0.0)) {
        /* Degenerate: fall back to the best observed bus bandwidth, no latency. */
        double best = 0.0;
        for (size_t i = 0; i < n; i++) {
            best = fmax(best, x[i] / (y[i] * 1e-6) / 1e9);
        }
        c0 = 0.0;
        c1 = 1e6 / (best * 1e9);
    }
    l->latency_us = c0 > 0.0 ? c0 : 0.0;
    l->busbw_gbps = 1e6 / c1 / 1e9;
    double rr = 0.0;
    for (size_t i = 0; i < n; i++) {
        double fit_t = l->latency_us + x[i] * c1;
        double e = (fit_t - y[i]) / y[i];
        rr += e * e;
    }
    l->rms_rel_resid = sqrt(rr / (double)n);
}

/* Add a measured (size, busbw) to the line's per-size row, kept ascending; a size measured twice
 * keeps its first figure. */
static void keep_size(struct moe_calib_line *l, double bytes, double busbw)
{
    int n = l->num_sizes;
    if (n >= MOE_BUSBW_MAX_SIZES || !(bytes > 0.0)) {
        return;
    }
    int at = n;
    while (at > 0 && l->size_bytes[at - 1] > bytes) {
        at--;
    }
    if (at > 0 && l->size_bytes[at - 1] == bytes) {
        return;
    }
    for (int i = n; i > at; i--) {
        l->size_bytes[i] = l->size_bytes[i - 1];
        l->size_busbw_gbps[i] = l->size_busbw_gbps[i - 1];
    }
    l->size_bytes[at] = bytes;
    l->size_busbw_gbps[at] = busbw;
    l->num_sizes = n + 1;
}

static enum moe_status
fit_collectives(const cJSON *bench, struct moe_calib_fit *fit, struct moe_diag *diag)
{
    for (int c = 0; c < MOE_CALIB_NUM_COLL; c++) {
        double x[MAX_POINTS];
        double y[MAX_POINTS];
        size_t n = 0;
        int group = 0;
        const cJSON *it = NULL;
        struct moe_calib_line kept = {0}; /* every size, for the per-size table */
        /* Largest group measured; sizes from 4 KiB up (below, latency alone dominates). */
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(bench, "collectives"))
        {
            const cJSON *op = cJSON_GetObjectItemCaseSensitive(it, "op");
            double g = num_of(it, "group_size");
            if (cJSON_IsString(op) && strcmp(op->valuestring, coll_names[c]) == 0 && g > group) {
                group = (int)g;
            }
        }
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(bench, "collectives"))
        {
            const cJSON *op = cJSON_GetObjectItemCaseSensitive(it, "op");
            if (!cJSON_IsString(op) || strcmp(op->valuestring, coll_names[c]) != 0 ||
                (int)num_of(it, "group_size") != group || !ok_of(it) || n >= MAX_POINTS) {
                continue;
            }
            double t = num_of(it, "time_us");
            double busbw = num_of(it, "busbw_gbps");
            double bytes = num_of(it, "bytes");
            if (!(t > 0.0) || !(busbw > 0.0)) {
                continue;
            }
            /* A step's calls (cold caches, fresh inputs, one at a time) when the bench timed
             * them: what the engine's collectives meet. Bus bytes are the same either way. */
            double step = num_of(it, "step_us");
            if (step > 0.0) {
                busbw *= t / step;
                t = step;
            }
            keep_size(&kept, bytes, busbw);
            if (bytes < 4096.0) {
                continue;
            }
            x[n] = busbw * 1e9 * t * 1e-6; /* bus bytes moved */
            y[n] = t;
            n++;
        }
        struct moe_calib_line *l = &fit->coll[c];
        l->points = (int)n;
        if (n < 2) {
            if (c == MOE_CALIB_ALLREDUCE || c == MOE_CALIB_ALLGATHER || c == MOE_CALIB_ALLTOALL) {
                return moe_diag_set(diag, MOE_ERR_INVALID,
                                    "calibrate: %s has %zu usable sizes; run the bench with 2 or "
                                    "more ranks (--np 2) and sizes up to a few MiB",
                                    coll_names[c], n);
            }
            continue;
        }
        moe_calib_fit_line(x, y, n, l);
        l->num_sizes = kept.num_sizes;
        memcpy(l->size_bytes, kept.size_bytes, sizeof(l->size_bytes));
        memcpy(l->size_busbw_gbps, kept.size_busbw_gbps, sizeof(l->size_busbw_gbps));
    }
    return MOE_OK;
}

enum moe_status
moe_calib_fit_bench(const cJSON *bench, struct moe_calib_fit *fit, struct moe_diag *diag)
{
    memset(fit, 0, sizeof(*fit));
    MOE_TRY(moe_json_check_format(bench, "moefold-bench", 1, "bench", diag));
    const cJSON *host = cJSON_GetObjectItemCaseSensitive(bench, "host");
    const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(host, "cpu_model");
    (void)snprintf(fit->cpu_model, sizeof(fit->cpu_model), "%s",
                   cJSON_IsString(cpu) ? cpu->valuestring : "unknown CPU");
    fit->cores = (int)num_of(host, "cores");
    fit->memory_bytes = num_of(host, "memory_bytes");
    fit->ranks = (int)num_of(bench, "ranks");
    if (!(fit->ranks >= 1) || !(fit->cores >= 1) || !(fit->memory_bytes > 0.0)) {
        return moe_diag_set(
            diag, MOE_ERR_INVALID,
            "calibrate: the bench JSON lacks ranks, host.cores or host.memory_bytes");
    }
    MOE_TRY(fit_gemm(bench, fit, diag));
    MOE_TRY(fit_grouped(bench, fit, diag));
    MOE_TRY(fit_memory(bench, fit, diag));
    fit_attention(bench, fit);
    fit_attention_tiles(bench, fit);
    fit_quant(bench, fit);
    return fit_collectives(bench, fit, diag);
}

enum moe_status moe_calib_cluster(const struct moe_calib_fit *fit,
                                  const char *name,
                                  struct moe_cluster *cl,
                                  struct moe_diag *diag)
{
    memset(cl, 0, sizeof(*cl));
    (void)snprintf(cl->name, sizeof(cl->name), "%s", name);
    (void)snprintf(cl->generation, sizeof(cl->generation), "cpu");
    (void)snprintf(cl->description, sizeof(cl->description),
                   "this host as a cluster: %d CPU ranks of %.100s", fit->ranks, fit->cpu_model);
    int ranks = fit->ranks;
    cl->gpus_per_node = 1;
    cl->max_gpus = fit->cores > ranks ? fit->cores : ranks;
    struct moe_gpu *g = &cl->gpu;
    (void)snprintf(g->name, sizeof(g->name), "CPU rank");
    /* Each rank's share of the host's memory and bandwidth. */
    double share = (double)(fit->cores > ranks ? fit->cores : ranks);
    g->hbm_gib = fit->memory_bytes / share / GIB;
    g->hbm_tbps = fit->mem_gbps / 1000.0;
    double peak = fit->gemm_peak_gflops / 1000.0;
    /* The CPU engine emulates low precision in FP32: every precision runs at the FP32 rate. */
    for (int i = 0; i < MOE_NUM_MATH; i++) {
        g->peak_tflops[i] = peak;
        g->gemm.max_eff[i] = fit->gemm_max_eff;
    }
    g->has_fp8 = true;
    g->has_mx = true;
    g->num_sms = 1;
    g->gemm.half_flops = fit->gemm_half_flops;
    g->gemm.half_dim = fit->gemm_half_dim;
    g->gemm.grouped_eff = fit->grouped_eff;
    g->gemm.grouped_half_dim = fit->grouped_half_dim;
    for (int i = 0; i < 2; i++) {
        g->gemm.grouped_bwd_eff[i] = fit->grouped_bwd_eff[i];
        g->gemm.grouped_bwd_half_dim[i] = fit->grouped_bwd_half_dim[i];
    }
    g->gemm.grouped_tile_m = 1.0;
    g->gemm.small_mnk = fit->small_mnk;
    for (int i = 0; i < 3; i++) {
        g->gemm.small_eff[i] = fit->small_mnk > 0.0 ? fit->small_eff[i] : 0.0;
        g->gemm.small_half_dim[i] = fit->small_mnk > 0.0 ? fit->small_half_dim[i] : 0.0;
    }
    for (int i = 0; i < MOE_CLUSTER_NUM_RECIPES; i++) {
        g->gemm.recipe_eff[i] = 1.0;
    }
    g->attn_fwd_eff = fit->has_attention ? fit->attn_fwd_eff : fit->gemm_max_eff;
    g->attn_bwd_eff = fit->has_attention ? fit->attn_bwd_eff : fit->gemm_max_eff;
    g->attn_fwd_half_dim = fit->has_attention ? fit->attn_fwd_half_dim : fit->gemm_half_dim;
    g->attn_bwd_half_dim = fit->has_attention ? fit->attn_bwd_half_dim : fit->gemm_half_dim;
    g->hbm_eff = 1.0; /* mem_gbps is the measured streaming rate itself */
    g->elem_eff = fit->elem_eff;
    g->act_eff = fit->act_eff;
    g->act_bwd_eff = fit->act_bwd_eff;
    g->bias_eff = fit->bias_eff;
    g->bias_bwd_eff = fit->bias_bwd_eff;
    g->attn_rect = 1.0; /* kernels/cpu/attention.c: one sgemm per sequence or CP chunk, masked
                           scores computed and zeroed */
    g->attn_tile_us[0] = fit->attn_tile_us[0];
    g->attn_tile_us[1] = fit->attn_tile_us[1];
    g->bias_pass = 1.0; /* engine/experts.c: one bias op per local expert after its GEMM, at
                           bias_eff / bias_bwd_eff (fit_bias) */
    g->optimizer_eff = fit->optimizer_eff;
    g->kernel_launch_us = 0.0; /* ops run synchronously on the CPU: no launch queue to expose */
    g->host_cpp_op_us = 0.0;
    g->host_param_us = 0.0;
    g->quant_bytes_per_elem = fit->has_quant ? fit->quant_bytes_per_elem : 0.0;

    const struct moe_calib_line *ag = &fit->coll[MOE_CALIB_ALLGATHER];
    const struct moe_calib_line *a2a = &fit->coll[MOE_CALIB_ALLTOALL];
    const struct moe_calib_line *ar = &fit->coll[MOE_CALIB_ALLREDUCE];
    const struct moe_calib_line *sr = &fit->coll[MOE_CALIB_SENDRECV];
    cl->nvlink.domain_gpus = ranks;
    cl->nvlink.gbps = ag->busbw_gbps;
    cl->nvlink.eff = 1.0;
    cl->nvlink.latency_us = ag->latency_us;
    cl->nvlink.has_nvls = false;
    cl->nvlink.nvls_busbw_gbps = 0.0;
    /* The reducing collectives add in the cores between the copies: each at its own fitted bus
     * bandwidth (the engine's reduce-scatter is a pairwise exchange, its all-reduce MPI's). */
    const struct moe_calib_line *rsl = &fit->coll[MOE_CALIB_REDUCESCATTER];
    cl->nvlink.allreduce_gbps = ar->points >= 2 ? ar->busbw_gbps : 0.0;
    cl->nvlink.reducescatter_gbps = rsl->points >= 2 ? rsl->busbw_gbps : 0.0;
    /* The busbw of every measured size: on a CPU host it falls several-fold once the messages
     * leave the caches (a few MiB), where the gradient buckets are, so the line above misprices
     * them; model/comm_cost.c reads this table inside the domain. */
    for (int c = 0; c < MOE_BUSBW_NUM_KINDS; c++) {
        const struct moe_calib_line *l = &fit->coll[c];
        struct moe_busbw_table *t = &cl->nvlink.busbw_by_size;
        t->num_sizes[c] = l->num_sizes;
        for (int i = 0; i < l->num_sizes; i++) {
            t->bytes[c][i] = l->size_bytes[i];
            t->gbps[c][i] = l->size_busbw_gbps[i];
        }
    }
    /* One host: the "network" is the same shared memory (multi-host calibration: README). */
    cl->net.nic_gbps = ag->busbw_gbps;
    cl->net.eff = 1.0;
    cl->net.a2a_eff = a2a->busbw_gbps > 0.0 ? fmin(1.5, a2a->busbw_gbps / ag->busbw_gbps) : 1.0;
    cl->net.latency_us = sr->points >= 2 ? sr->latency_us : ag->latency_us;
    cl->host.mem_gib_per_gpu = g->hbm_gib;
    cl->host.link_gbps = fit->mem_gbps;
    cl->host.link_eff = 1.0;
    /* An offloaded optimizer runs on the same cores and memory: the optimizer kernel's rate. */
    cl->host.optimizer_gbps = fit->mem_gbps * fit->optimizer_eff;
    cl->host.rank_spread = fit->rank_spread;
    cl->host.probe_gemm_dim = fit->probe_gemm_us > 0.0 ? MOE_CALIB_PROBE_DIM : 0.0;
    cl->host.probe_gemm_us = fit->probe_gemm_us;
    cl->dispatch.deepep_intra_eff = cl->net.a2a_eff;
    cl->dispatch.deepep_inter_eff = cl->net.a2a_eff;
    cl->dispatch.hybridep_intra_eff = cl->net.a2a_eff;
    cl->dispatch.hybridep_inter_eff = cl->net.a2a_eff;
    cl->dispatch.deepep_sms = 0;
    cl->dispatch.hybridep_sms = 0;
    cl->dispatch.permute_bytes_eff = 1.0; /* permutes are row copies at streaming bandwidth */
    return moe_cluster_validate(cl, diag);
}

/* ---------------------------------------------------------------------------------------------
 * Merging benches (moe_calib_merge_bench).
 */

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s);
    size_t m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* time_us, time_us_max, step_us, fwd_us; gflops, fwd_gflops; gbps, busbw_gbps, ... */
static bool timing_key(const char *k)
{
    return k != NULL && (ends_with(k, "_us") || strstr(k, "_us_") != NULL || ends_with(k, "gbps") ||
                         ends_with(k, "gflops"));
}

static bool rate_key(const char *k)
{
    return k != NULL && (ends_with(k, "gbps") || ends_with(k, "gflops"));
}

static enum moe_status merge_node(cJSON *dst,
                                  const cJSON *src,
                                  int n,
                                  enum moe_calib_merge how,
                                  const char *path,
                                  struct moe_diag *diag)
{
    if ((cJSON_IsBool(dst) && !cJSON_IsBool(src)) ||
        (!cJSON_IsBool(dst) && (dst->type & 0xFF) != (src->type & 0xFF))) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "benches differ at %s: not the same kind of value", path);
    }
    if (cJSON_IsBool(dst)) {
        if (cJSON_IsFalse(src)) {
            dst->type = (dst->type & ~0xFF) | cJSON_False; /* this cJSON has no SetBoolValue */
        }
        return MOE_OK;
    }
    if (cJSON_IsNumber(dst)) {
        double a = dst->valuedouble;
        double b = src->valuedouble;
        if (timing_key(dst->string) && how == MOE_CALIB_MERGE_LEAST) {
            cJSON_SetNumberValue(dst, rate_key(dst->string) ? fmax(a, b) : fmin(a, b));
        } else if (timing_key(dst->string)) {
            cJSON_SetNumberValue(dst, (a * n + b) / (n + 1));
        } else if (dst->string != NULL && strcmp(dst->string, "wrong") == 0) {
            cJSON_SetNumberValue(dst, fmax(a, b));
        } else if (a != b) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "benches differ at %s: %g vs %g (another host, rank count or "
                                "bench version)",
                                path, a, b);
        }
        return MOE_OK;
    }
    if (cJSON_IsString(dst)) {
        if (strcmp(dst->valuestring, src->valuestring) != 0) {
            return moe_diag_set(diag, MOE_ERR_INVALID, "benches differ at %s: '%s' vs '%s'", path,
                                dst->valuestring, src->valuestring);
        }
        return MOE_OK;
    }
    if (cJSON_IsArray(dst) || cJSON_IsObject(dst)) {
        if (cJSON_GetArraySize(dst) != cJSON_GetArraySize(src)) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "benches differ at %s: %d vs %d entries (another bench version or "
                                "rank count)",
                                path, cJSON_GetArraySize(dst), cJSON_GetArraySize(src));
        }
        int i = 0;
        cJSON *d = NULL;
        cJSON_ArrayForEach(d, dst)
        {
            const cJSON *s = cJSON_IsArray(dst) ? cJSON_GetArrayItem(src, i)
                                                : cJSON_GetObjectItemCaseSensitive(src, d->string);
            char sub[256];
            if (cJSON_IsArray(dst)) {
                (void)snprintf(sub, sizeof(sub), "%s[%d]", path, i);
            } else {
                (void)snprintf(sub, sizeof(sub), "%s.%s", path, d->string);
            }
            if (s == NULL) {
                return moe_diag_set(diag, MOE_ERR_INVALID, "benches differ: %s is missing", sub);
            }
            MOE_TRY(merge_node(d, s, n, how, sub, diag));
            i++;
        }
    }
    return MOE_OK;
}

enum moe_status moe_calib_merge_bench(
    cJSON *dst, const cJSON *src, int n, enum moe_calib_merge how, struct moe_diag *diag)
{
    if (dst == NULL || src == NULL || n < 1) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "merge: need two benches");
    }
    return merge_node(dst, src, n, how, "bench", diag);
}
