/*
 * Tests for the CPU GEMM ops (kernels/cpu/gemm.c): matmul in all four transpose combinations with
 * alpha/beta against a naive double product; linear forward (with and without bias) against the
 * same; linear and grouped-linear backward against central finite differences of
 * L = sum(dy * y); grouped forward against per-expert naive products with empty experts; the
 * accumulate flag and the parameter-gradient += convention; bit-reproducibility; bias rows
 * (bias_fwd adds to every row, bias_bwd accumulates double column sums) against naive loops.
 * Tolerances: fp32 GEMMs of length <= 64 vs double: atol 1e-5, rtol 1e-5. Finite differences:
 * h = 1e-2 on a linear function (exact up to fp32 rounding of L): atol 2e-3, rtol 2e-3.
 */
#include "tests/kernels/ktest.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs setjmp.h, stdarg.h, stddef.h and stdint.h first. */
#include <cmocka.h>

#define FD_H    1e-2
#define FD_ATOL 2e-3
#define FD_RTOL 2e-3

/* c[m, n] = alpha op(a) op(b) + beta c0, in double. */
static void naive_matmul(double *c,
                         const float *a,
                         const float *b,
                         const float *c0,
                         int m,
                         int n,
                         int k,
                         bool ta,
                         bool tb,
                         double alpha,
                         double beta)
{
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double acc = 0.0;
            for (int p = 0; p < k; p++) {
                double av = ta ? a[p * m + i] : a[i * k + p];
                double bv = tb ? b[j * k + p] : b[p * n + j];
                acc += av * bv;
            }
            c[i * n + j] = alpha * acc + beta * (double)c0[i * n + j];
        }
    }
}

static void test_matmul_transposes(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 1);
    const int m = 7, n = 5, k = 9;
    float *a = ktest_random(&rng, (size_t)m * k, -1, 1);
    float *b = ktest_random(&rng, (size_t)k * n, -1, 1);
    float *c0 = ktest_random(&rng, (size_t)m * n, -1, 1);
    float *c = ktest_floats((size_t)m * n);
    double *ref = ktest_doubles((size_t)m * n);
    float *refc = ktest_floats((size_t)m * n);
    for (int t = 0; t < 4; t++) {
        bool ta = (t & 1) != 0;
        bool tb = (t & 2) != 0;
        memcpy(c, c0, sizeof(float) * (size_t)(m * n));
        ops->matmul(c, a, b, m, n, k, ta, tb, 0.5f, 2.0f, ctx);
        naive_matmul(ref, a, b, c0, m, n, k, ta, tb, 0.5, 2.0);
        ktest_to_float(refc, ref, (size_t)m * (size_t)n);
        assert_true(moe_test_allclose_f32("matmul", c, refc, (size_t)(m * n), 1e-5, 1e-5, NULL));
    }
    /* beta = 0 overwrites, even NaN garbage. */
    for (int i = 0; i < m * n; i++) {
        c[i] = NAN;
    }
    ops->matmul(c, a, b, m, n, k, false, false, 1.0f, 0.0f, ctx);
    naive_matmul(ref, a, b, c0, m, n, k, false, false, 1.0, 0.0);
    ktest_to_float(refc, ref, (size_t)m * (size_t)n);
    assert_true(moe_test_allclose_f32("matmul b0", c, refc, (size_t)(m * n), 1e-5, 1e-5, NULL));
    free(a);
    free(b);
    free(c0);
    free(c);
    free(ref);
    free(refc);
    moe_k_ctx_destroy(ctx);
}

/* ---- linear ----------------------------------------------------------------------------- */

struct lin_case {
    const struct moe_k_ops *ops;
    moe_k_ctx_t *ctx;
    int rows, in, out;
    const float *x, *w, *b;
};

static void lin_fwd_x(const float *x, float *y, void *u)
{
    struct lin_case *c = u;
    c->ops->linear_fwd(y, x, c->w, c->b, c->rows, c->in, c->out, c->ctx);
}

static void lin_fwd_w(const float *w, float *y, void *u)
{
    struct lin_case *c = u;
    c->ops->linear_fwd(y, c->x, w, c->b, c->rows, c->in, c->out, c->ctx);
}

static void lin_fwd_b(const float *b, float *y, void *u)
{
    struct lin_case *c = u;
    c->ops->linear_fwd(y, c->x, c->w, b, c->rows, c->in, c->out, c->ctx);
}

static void test_linear(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 2);
    struct lin_case c = {ops, ctx, 6, 8, 5, NULL, NULL, NULL};
    size_t nx = (size_t)c.rows * c.in, nw = (size_t)c.out * c.in, ny = (size_t)c.rows * c.out;
    float *x = ktest_random(&rng, nx, -1, 1);
    float *w = ktest_random(&rng, nw, -1, 1);
    float *b = ktest_random(&rng, (size_t)c.out, -1, 1);
    float *dy = ktest_random(&rng, ny, -1, 1);
    c.x = x;
    c.w = w;
    c.b = b;
    /* Forward vs naive: y = x w^T + b. */
    float *y = ktest_floats(ny);
    double *ref = ktest_doubles(ny);
    float *zeros = ktest_floats(ny);
    ops->linear_fwd(y, x, w, b, c.rows, c.in, c.out, ctx);
    naive_matmul(ref, x, w, zeros, c.rows, c.out, c.in, false, true, 1.0, 0.0);
    for (int i = 0; i < c.rows; i++) {
        for (int j = 0; j < c.out; j++) {
            ref[i * c.out + j] += (double)b[j];
        }
    }
    float *reff = ktest_floats(ny);
    ktest_to_float(reff, ref, ny);
    assert_true(moe_test_allclose_f32("linear fwd", y, reff, ny, 1e-5, 1e-5, NULL));

    /* Backward: dx overwrite, then accumulate doubles it; dw/db accumulate from 0. */
    float *dx = ktest_floats(nx);
    float *dw = ktest_floats(nw);
    float *db = ktest_floats((size_t)c.out);
    for (size_t i = 0; i < nx; i++) {
        dx[i] = 123.0f; /* must be overwritten */
    }
    ops->linear_bwd_data(dx, dy, w, c.rows, c.in, c.out, false, ctx);
    ops->linear_bwd_weight(dw, db, dy, x, c.rows, c.in, c.out, ctx);
    assert_true(
        ktest_fd_check("linear dx", lin_fwd_x, &c, x, nx, ny, dy, dx, FD_H, FD_ATOL, FD_RTOL));
    assert_true(
        ktest_fd_check("linear dw", lin_fwd_w, &c, w, nw, ny, dy, dw, FD_H, FD_ATOL, FD_RTOL));
    assert_true(ktest_fd_check("linear db", lin_fwd_b, &c, b, (size_t)c.out, ny, dy, db, FD_H,
                               FD_ATOL, FD_RTOL));
    float *dx2 = ktest_floats(nx);
    memcpy(dx2, dx, sizeof(float) * nx);
    ops->linear_bwd_data(dx2, dy, w, c.rows, c.in, c.out, true, ctx);
    float *dw2 = ktest_floats(nw);
    memcpy(dw2, dw, sizeof(float) * nw);
    ops->linear_bwd_weight(dw2, NULL, dy, x, c.rows, c.in, c.out, ctx);
    for (size_t i = 0; i < nx; i++) {
        assert_true(dx2[i] == 2.0f * dx[i]);
    }
    for (size_t i = 0; i < nw; i++) {
        assert_true(dw2[i] == 2.0f * dw[i]);
    }
    free(x);
    free(w);
    free(b);
    free(dy);
    free(y);
    free(ref);
    free(zeros);
    free(reff);
    free(dx);
    free(dw);
    free(db);
    free(dx2);
    free(dw2);
    moe_k_ctx_destroy(ctx);
}

/* ---- grouped linear --------------------------------------------------------------------- */

enum { G_E = 4, G_IN = 6, G_OUT = 5 };
static const int g_counts[G_E] = {3, 0, 5, 2}; /* an empty expert in the middle */
#define G_ROWS 10

struct grp_case {
    const struct moe_k_ops *ops;
    moe_k_ctx_t *ctx;
    const float *x, *w;
};

static void grp_fwd_x(const float *x, float *y, void *u)
{
    struct grp_case *c = u;
    c->ops->grouped_linear_fwd(y, x, c->w, g_counts, NULL, G_E, G_IN, G_OUT, c->ctx);
}

static void grp_fwd_w(const float *w, float *y, void *u)
{
    struct grp_case *c = u;
    c->ops->grouped_linear_fwd(y, c->x, w, g_counts, NULL, G_E, G_IN, G_OUT, c->ctx);
}

static void test_grouped_linear(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 3);
    size_t nx = (size_t)G_ROWS * G_IN, nw = (size_t)G_E * G_OUT * G_IN, ny = (size_t)G_ROWS * G_OUT;
    float *x = ktest_random(&rng, nx, -1, 1);
    float *w = ktest_random(&rng, nw, -1, 1);
    float *dy = ktest_random(&rng, ny, -1, 1);
    struct grp_case c = {ops, ctx, x, w};
    float *y = ktest_floats(ny);
    ops->grouped_linear_fwd(y, x, w, g_counts, NULL, G_E, G_IN, G_OUT, ctx);
    /* Per expert naive product on its rows. */
    int row = 0;
    for (int e = 0; e < G_E; e++) {
        for (int r = row; r < row + g_counts[e]; r++) {
            for (int j = 0; j < G_OUT; j++) {
                double acc = 0.0;
                for (int p = 0; p < G_IN; p++) {
                    acc += (double)x[r * G_IN + p] * (double)w[(e * G_OUT + j) * G_IN + p];
                }
                assert_true(fabs((double)y[r * G_OUT + j] - acc) <= 1e-5 + 1e-5 * fabs(acc));
            }
        }
        row += g_counts[e];
    }
    float *dx = ktest_floats(nx);
    float *dw = ktest_floats(nw);
    float sentinel = 7.0f;
    dw[G_OUT * G_IN] = sentinel; /* expert 1 (empty) must stay untouched */
    ops->grouped_linear_bwd_data(dx, dy, w, g_counts, NULL, G_E, G_IN, G_OUT, false, ctx);
    ops->grouped_linear_bwd_weight(dw, dy, x, g_counts, NULL, G_E, G_IN, G_OUT, ctx);
    assert_true(dw[G_OUT * G_IN] == sentinel);
    dw[G_OUT * G_IN] = 0.0f;
    assert_true(
        ktest_fd_check("grouped dx", grp_fwd_x, &c, x, nx, ny, dy, dx, FD_H, FD_ATOL, FD_RTOL));
    assert_true(
        ktest_fd_check("grouped dw", grp_fwd_w, &c, w, nw, ny, dy, dw, FD_H, FD_ATOL, FD_RTOL));
    /* Accumulate adds onto what is there. */
    float *dx2 = ktest_floats(nx);
    memcpy(dx2, dx, sizeof(float) * nx);
    ops->grouped_linear_bwd_data(dx2, dy, w, g_counts, NULL, G_E, G_IN, G_OUT, true, ctx);
    for (size_t i = 0; i < nx; i++) {
        assert_true(dx2[i] == 2.0f * dx[i]);
    }
    free(x);
    free(w);
    free(dy);
    free(y);
    free(dx);
    free(dw);
    free(dx2);
    moe_k_ctx_destroy(ctx);
}

/* The grouped forward equals, bit for bit, one linear per expert slice (it is defined so), and
 * a second run gives the same bits. */
static void test_grouped_matches_slices(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 4);
    const int counts[3] = {37, 64, 5};
    const int in = 48, out = 40, rows = 106;
    float *x = ktest_random(&rng, (size_t)rows * in, -1, 1);
    float *w = ktest_random(&rng, (size_t)3 * out * in, -1, 1);
    float *y = ktest_floats((size_t)rows * out);
    float *y2 = ktest_floats((size_t)rows * out);
    float *ys = ktest_floats((size_t)rows * out);
    ops->grouped_linear_fwd(y, x, w, counts, NULL, 3, in, out, ctx);
    ops->grouped_linear_fwd(y2, x, w, counts, NULL, 3, in, out, ctx);
    int row = 0;
    for (int e = 0; e < 3; e++) {
        ops->linear_fwd(ys + (size_t)row * out, x + (size_t)row * in, w + (size_t)e * out * in,
                        NULL, counts[e], in, out, ctx);
        row += counts[e];
    }
    assert_memory_equal(y, y2, sizeof(float) * (size_t)rows * out);
    assert_memory_equal(y, ys, sizeof(float) * (size_t)rows * out);
    free(x);
    free(w);
    free(y);
    free(y2);
    free(ys);
    moe_k_ctx_destroy(ctx);
}

static void test_bias_rows(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 31);
    enum { M = 5, N = 7 };
    float *y = ktest_random(&rng, M * N, -1, 1), *b = ktest_random(&rng, N, -1, 1);
    float *dy = ktest_random(&rng, M * N, -1, 1);
    float y0[M * N], ref[M * N], db[N], dref[N];
    memcpy(y0, y, sizeof(y0));
    ops->bias_fwd(y, b, M, N, ctx);
    for (int r = 0; r < M; r++) {
        for (int c = 0; c < N; c++) {
            ref[r * N + c] = y0[r * N + c] + b[c];
        }
    }
    assert_memory_equal(y, ref, sizeof(ref));
    for (int c = 0; c < N; c++) {
        double acc = 0.0;
        for (int r = 0; r < M; r++) {
            acc += (double)dy[r * N + c];
        }
        db[c] = 0.5f;
        dref[c] = (float)(0.5 + (double)(float)acc); /* += onto the existing gradient */
    }
    ops->bias_bwd(db, dy, M, N, ctx);
    assert_true(moe_test_allclose_f32("bias_bwd", db, dref, N, 1e-6, 1e-6, NULL));
    free(y);
    free(b);
    free(dy);
    moe_k_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_transposes), cmocka_unit_test(test_linear),
        cmocka_unit_test(test_grouped_linear),    cmocka_unit_test(test_grouped_matches_slices),
        cmocka_unit_test(test_bias_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
