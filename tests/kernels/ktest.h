/*
 * Helpers shared by the kernel tests (header-only: each tests/kernels/test_*.c is its own binary):
 * a CPU kernel context, float/double conversions, and a finite-difference gradient check of an op
 * through the scalar L(x) = sum(dy * op(x)), evaluated in double from the op's fp32 outputs.
 * Central differences on fp32 ops need a step near 1e-2 and tolerances near 1e-2 (relative); each
 * test states its own.
 */
#ifndef MOE_TESTS_KERNELS_KTEST_H
#define MOE_TESTS_KERNELS_KTEST_H

#include "kernels/kernels.h"
#include "tests/test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A CPU context with one BLAS thread; aborts the test binary if it cannot be made. */
static inline moe_k_ctx_t *ktest_cpu_ctx(void)
{
    struct moe_k_ctx_desc desc;
    memset(&desc, 0, sizeof(desc));
    desc.backend = MOE_K_BACKEND_CPU;
    moe_k_ctx_t *ctx = NULL;
    if (moe_k_ctx_create(&desc, &ctx) != MOE_OK) {
        fprintf(stderr, "ktest: cannot create a CPU kernel context\n");
        abort();
    }
    return ctx;
}

static inline void *ktest_alloc(size_t bytes)
{
    void *p = calloc(1, bytes > 0 ? bytes : 1);
    if (p == NULL) {
        abort();
    }
    return p;
}

static inline float *ktest_floats(size_t n)
{
    return ktest_alloc(n * sizeof(float));
}

static inline double *ktest_doubles(size_t n)
{
    return ktest_alloc(n * sizeof(double));
}

static inline float *ktest_random(struct moe_test_rng *rng, size_t n, float lo, float hi)
{
    float *x = ktest_floats(n);
    moe_test_fill_f32(rng, x, n, lo, hi);
    return x;
}

static inline void ktest_to_double(double *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        dst[i] = (double)src[i];
    }
}

static inline void ktest_to_float(float *dst, const double *src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        dst[i] = (float)src[i];
    }
}

/* Forward of the op under test: y[ny] = op(x[nx]) with everything else fixed in `user`. */
typedef void (*ktest_fwd_fn)(const float *x, float *y, void *user);

struct ktest_fd {
    ktest_fwd_fn fwd;
    void *user;
    size_t nx, ny;
    const float *dy; /* [ny] upstream gradient defining L = sum(dy * y) */
    float *xf;       /* [nx] scratch */
    float *yf;       /* [ny] scratch */
};

static inline double ktest_fd_loss(const double *x, size_t n, void *vctx)
{
    struct ktest_fd *c = vctx;
    ktest_to_float(c->xf, x, n);
    c->fwd(c->xf, c->yf, c->user);
    double l = 0.0;
    for (size_t i = 0; i < c->ny; i++) {
        l += (double)c->dy[i] * (double)c->yf[i];
    }
    return l;
}

/*
 * Compare grad[nx] (the op's backward for upstream dy) with central differences of
 * L(x) = sum(dy * fwd(x)) at x, step h. Returns true when |grad - fd| <= atol + rtol |fd|.
 */
static inline bool ktest_fd_check(const char *name,
                                  ktest_fwd_fn fwd,
                                  void *user,
                                  const float *x,
                                  size_t nx,
                                  size_t ny,
                                  const float *dy,
                                  const float *grad,
                                  double h,
                                  double atol,
                                  double rtol)
{
    struct ktest_fd c = {fwd, user, nx, ny, dy, ktest_floats(nx), ktest_floats(ny)};
    double *xd = ktest_doubles(nx);
    double *fd = ktest_doubles(nx);
    double *gd = ktest_doubles(nx);
    ktest_to_double(xd, x, nx);
    ktest_to_double(gd, grad, nx);
    moe_test_fd_grad(ktest_fd_loss, xd, nx, h, &c, fd);
    bool ok = moe_test_allclose_f64(name, gd, fd, nx, atol, rtol, NULL);
    free(c.xf);
    free(c.yf);
    free(xd);
    free(fd);
    free(gd);
    return ok;
}

#endif /* MOE_TESTS_KERNELS_KTEST_H */
