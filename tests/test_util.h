/*
 * Shared test helpers: tensor comparison with atol/rtol, a seeded random fill, a central
 * finite-difference gradient check in double, and paths to built binaries and test data.
 * Tests include <cmocka.h> themselves; these helpers return results and print a one-line report on
 * failure, so a cmocka assertion at the call site names the test.
 */
#ifndef MOE_TESTS_TEST_UTIL_H
#define MOE_TESTS_TEST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Result of comparing n values: max abs and rel difference, first bad index (-1 if none). */
struct moe_test_cmp {
    double max_abs;
    double max_rel;
    long first_bad;
    long num_bad;
};

/*
 * Compare got[i] with ref[i]: pass when |got-ref| <= atol + rtol*|ref| for finite refs (a
 * non-finite ref must be matched exactly). Prints "name: max abs .., max rel .., first bad i (got
 * vs ref)" when any element fails. Returns true when all pass.
 */
bool moe_test_allclose_f32(const char *name,
                           const float *got,
                           const float *ref,
                           size_t n,
                           double atol,
                           double rtol,
                           struct moe_test_cmp *out);
bool moe_test_allclose_f64(const char *name,
                           const double *got,
                           const double *ref,
                           size_t n,
                           double atol,
                           double rtol,
                           struct moe_test_cmp *out);

/* Deterministic xorshift-based generator for fills; state is caller-owned. */
struct moe_test_rng {
    uint64_t state;
};
void moe_test_rng_seed(struct moe_test_rng *rng, uint64_t seed);
double moe_test_rng_uniform(struct moe_test_rng *rng); /* [0, 1) */
/* Fill x[n] with uniform values in [lo, hi). */
void moe_test_fill_f32(struct moe_test_rng *rng, float *x, size_t n, float lo, float hi);
void moe_test_fill_f64(struct moe_test_rng *rng, double *x, size_t n, double lo, double hi);

/*
 * Central finite-difference gradient of a scalar function f(x) in double:
 * grad[i] = (f(x + h e_i) - f(x - h e_i)) / 2h. x[n] is perturbed in place and restored.
 */
typedef double (*moe_test_scalar_fn)(const double *x, size_t n, void *ctx);
void moe_test_fd_grad(moe_test_scalar_fn f, double *x, size_t n, double h, void *ctx, double *grad);

/* Path of a built binary: $MOEFOLD_BIN/name, default build/bin/name. Writes into buf[len]. */
const char *moe_test_bin_path(const char *name, char *buf, size_t len);
/* Path under the repository root: $MOEFOLD_ROOT/rel, default ./rel. */
const char *moe_test_root_path(const char *rel, char *buf, size_t len);

/*
 * Run a shell command, capture up to out_len-1 bytes of its combined stdout+stderr into out
 * (NUL-terminated), return its exit status (or -1 if it could not start / was killed).
 */
int moe_test_run_capture(const char *cmd, char *out, size_t out_len);

#endif /* MOE_TESTS_TEST_UTIL_H */
