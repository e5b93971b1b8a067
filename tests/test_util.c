/*
 * Implementation of tests/test_util.h. Plain C, no cmocka dependency, so any test binary links it.
 */
#include "tests/test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static bool cmp_one(double got, double ref, double atol, double rtol)
{
    if (!isfinite(ref)) {
        return (isnan(ref) && isnan(got)) || got == ref;
    }
    return fabs(got - ref) <= atol + rtol * fabs(ref);
}

static void cmp_update(struct moe_test_cmp *c, long i, double got, double ref, bool ok)
{
    double abs_diff = fabs(got - ref);
    double rel = abs_diff / (fabs(ref) > 0.0 ? fabs(ref) : 1.0);
    if (isfinite(abs_diff) && abs_diff > c->max_abs) {
        c->max_abs = abs_diff;
    }
    if (isfinite(rel) && rel > c->max_rel) {
        c->max_rel = rel;
    }
    if (!ok) {
        if (c->first_bad < 0) {
            c->first_bad = i;
        }
        c->num_bad++;
    }
}

static bool cmp_report(const char *name, const struct moe_test_cmp *c, double got, double ref)
{
    if (c->num_bad == 0) {
        return true;
    }
    fprintf(stderr,
            "%s: %ld bad, max abs %.3e, max rel %.3e, first bad index %ld (got %.9g, ref %.9g)\n",
            name, c->num_bad, c->max_abs, c->max_rel, c->first_bad, got, ref);
    return false;
}

bool moe_test_allclose_f32(const char *name,
                           const float *got,
                           const float *ref,
                           size_t n,
                           double atol,
                           double rtol,
                           struct moe_test_cmp *out)
{
    struct moe_test_cmp c = {0.0, 0.0, -1, 0};
    for (size_t i = 0; i < n; i++) {
        bool ok = cmp_one((double)got[i], (double)ref[i], atol, rtol);
        cmp_update(&c, (long)i, (double)got[i], (double)ref[i], ok);
    }
    if (out != NULL) {
        *out = c;
    }
    long b = c.first_bad < 0 ? 0 : c.first_bad;
    return cmp_report(name, &c, n ? (double)got[b] : 0.0, n ? (double)ref[b] : 0.0);
}

bool moe_test_allclose_f64(const char *name,
                           const double *got,
                           const double *ref,
                           size_t n,
                           double atol,
                           double rtol,
                           struct moe_test_cmp *out)
{
    struct moe_test_cmp c = {0.0, 0.0, -1, 0};
    for (size_t i = 0; i < n; i++) {
        bool ok = cmp_one(got[i], ref[i], atol, rtol);
        cmp_update(&c, (long)i, got[i], ref[i], ok);
    }
    if (out != NULL) {
        *out = c;
    }
    long b = c.first_bad < 0 ? 0 : c.first_bad;
    return cmp_report(name, &c, n ? got[b] : 0.0, n ? ref[b] : 0.0);
}

void moe_test_rng_seed(struct moe_test_rng *rng, uint64_t seed)
{
    rng->state = seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
    if (rng->state == 0) {
        rng->state = 1;
    }
}

double moe_test_rng_uniform(struct moe_test_rng *rng)
{
    uint64_t x = rng->state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    rng->state = x;
    return (double)(x >> 11) * (1.0 / 9007199254740992.0);
}

void moe_test_fill_f32(struct moe_test_rng *rng, float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++) {
        x[i] = lo + (hi - lo) * (float)moe_test_rng_uniform(rng);
    }
}

void moe_test_fill_f64(struct moe_test_rng *rng, double *x, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++) {
        x[i] = lo + (hi - lo) * moe_test_rng_uniform(rng);
    }
}

void moe_test_fd_grad(moe_test_scalar_fn f, double *x, size_t n, double h, void *ctx, double *grad)
{
    for (size_t i = 0; i < n; i++) {
        double keep = x[i];
        x[i] = keep + h;
        double fp = f(x, n, ctx);
        x[i] = keep - h;
        double fm = f(x, n, ctx);
        x[i] = keep;
        grad[i] = (fp - fm) / (2.0 * h);
    }
}

const char *moe_test_bin_path(const char *name, char *buf, size_t len)
{
    const char *dir = getenv("MOEFOLD_BIN");
    (void)snprintf(buf, len, "%s/%s", dir != NULL ? dir : "build/bin", name);
    return buf;
}

const char *moe_test_root_path(const char *rel, char *buf, size_t len)
{
    const char *root = getenv("MOEFOLD_ROOT");
    (void)snprintf(buf, len, "%s/%s", root != NULL ? root : ".", rel);
    return buf;
}

int moe_test_run_capture(const char *cmd, char *out, size_t out_len)
{
    char full[4096];
    (void)snprintf(full, sizeof(full), "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    if (p == NULL) {
        return -1;
    }
    size_t used = 0;
    if (out_len > 0) {
        out[0] = '\0';
    }
    char chunk[1024];
    size_t got;
    while ((got = fread(chunk, 1, sizeof(chunk), p)) > 0) {
        if (out_len > 0 && used + 1 < out_len) {
            size_t take = got < out_len - 1 - used ? got : out_len - 1 - used;
            memcpy(out + used, chunk, take);
            used += take;
            out[used] = '\0';
        }
    }
    int st = pclose(p);
    if (st == -1 || !WIFEXITED(st)) {
        return -1;
    }
    return WEXITSTATUS(st);
}
