/*
 * Tests for the profiling ops table (kernels/profile.c): every op the wrappers run gives the same
 * bits as the backend's own (a GEMM, a norm, attention with its workspace query); each call lands
 * once in the bucket current when it ran, with non-negative time, and an out-of-range bucket is
 * dropped; members the inner table leaves NULL stay NULL, the others are wrapped; every op has its
 * table member's name; bad arguments are refused.
 */
#include "kernels/profile.h"
#include "tests/kernels/ktest.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs setjmp.h, stdarg.h, stddef.h and stdint.h first. */
#include <cmocka.h>

enum { BUCKETS = 3 };

struct fixture {
    moe_k_ctx_t *ctx;
    struct moe_k_profile prof;
    double seconds[BUCKETS * MOE_K_NUM_OPS];
    long calls[BUCKETS * MOE_K_NUM_OPS];
    int bucket;
};

static struct fixture *fixture_new(const struct moe_k_ops *inner)
{
    struct fixture *f = ktest_alloc(sizeof(*f));
    f->ctx = ktest_cpu_ctx();
    assert_int_equal(moe_k_profile_init(&f->prof, inner, &f->bucket, BUCKETS, f->seconds, f->calls),
                     MOE_OK);
    moe_k_ctx_set_profile(f->ctx, &f->prof);
    return f;
}

static void fixture_free(struct fixture *f)
{
    moe_k_ctx_destroy(f->ctx);
    free(f);
}

static long calls_at(const struct fixture *f, int bucket, enum moe_k_op op)
{
    return f->calls[(size_t)bucket * MOE_K_NUM_OPS + (size_t)op];
}

static void test_same_results_and_buckets(void **state)
{
    (void)state;
    const struct moe_k_ops *cpu = moe_k_cpu_ops();
    struct fixture *f = fixture_new(cpu);
    const struct moe_k_ops *k = &f->prof.ops;
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 11);
    int m = 24, in = 16, out = 12;
    float *x = ktest_random(&rng, (size_t)m * in, -1.0f, 1.0f);
    float *w = ktest_random(&rng, (size_t)out * in, -1.0f, 1.0f);
    float *y0 = ktest_floats((size_t)m * out);
    float *y1 = ktest_floats((size_t)m * out);
    cpu->linear_fwd(y0, x, w, NULL, m, in, out, f->ctx);
    f->bucket = 1;
    k->linear_fwd(y1, x, w, NULL, m, in, out, f->ctx);
    k->linear_fwd(y1, x, w, NULL, m, in, out, f->ctx);
    assert_memory_equal(y0, y1, (size_t)m * out * sizeof(float));
    assert_int_equal(calls_at(f, 1, MOE_K_OP_LINEAR_FWD), 2);
    assert_int_equal(calls_at(f, 0, MOE_K_OP_LINEAR_FWD), 0);
    assert_true(f->seconds[1 * MOE_K_NUM_OPS + MOE_K_OP_LINEAR_FWD] >= 0.0);

    float *g = ktest_random(&rng, (size_t)in, 0.5f, 1.5f);
    float *r0 = ktest_floats((size_t)m);
    float *r1 = ktest_floats((size_t)m);
    float *n0 = ktest_floats((size_t)m * in);
    float *n1 = ktest_floats((size_t)m * in);
    cpu->rmsnorm_fwd(n0, r0, x, g, m, in, 1e-5f, f->ctx);
    f->bucket = 2;
    k->rmsnorm_fwd(n1, r1, x, g, m, in, 1e-5f, f->ctx);
    assert_memory_equal(n0, n1, (size_t)m * in * sizeof(float));
    assert_memory_equal(r0, r1, (size_t)m * sizeof(float));
    assert_int_equal(calls_at(f, 2, MOE_K_OP_RMSNORM_FWD), 1);

    /* A value-returning op passes its result through. */
    assert_true(k->attention_workspace_bytes(8, 8, f->ctx) ==
                cpu->attention_workspace_bytes(8, 8, f->ctx));
    assert_int_equal(calls_at(f, 2, MOE_K_OP_ATTENTION_WORKSPACE_BYTES), 1);

    /* Out of range: the op runs, nothing is added. */
    f->bucket = BUCKETS;
    k->linear_fwd(y1, x, w, NULL, m, in, out, f->ctx);
    long total = 0;
    for (size_t i = 0; i < (size_t)BUCKETS * MOE_K_NUM_OPS; i++) {
        total += f->calls[i];
    }
    assert_int_equal(total, 4);
    free(x);
    free(w);
    free(y0);
    free(y1);
    free(g);
    free(r0);
    free(r1);
    free(n0);
    free(n1);
    fixture_free(f);
}

static void test_null_members_stay_null(void **state)
{
    (void)state;
    struct moe_k_ops partial = *moe_k_cpu_ops();
    partial.attention_window_sink_fwd = NULL;
    partial.attention_window_sink_bwd = NULL;
    struct fixture *f = fixture_new(&partial);
    assert_null(f->prof.ops.attention_window_sink_fwd);
    assert_null(f->prof.ops.attention_window_sink_bwd);
    assert_non_null(f->prof.ops.attention_fwd);
    assert_true(f->prof.ops.attention_fwd != partial.attention_fwd); /* wrapped */
    assert_true(f->prof.ops.backend == partial.backend);
    fixture_free(f);
}

static void test_names_and_bad_input(void **state)
{
    (void)state;
    assert_string_equal(moe_k_op_name(MOE_K_OP_FILL), "fill");
    assert_string_equal(moe_k_op_name(MOE_K_OP_GROUPED_LINEAR_BWD_WEIGHT),
                        "grouped_linear_bwd_weight");
    assert_string_equal(moe_k_op_name(MOE_K_OP_QDQ), "qdq");
    assert_string_equal(moe_k_op_name(MOE_K_NUM_OPS), "?");
    for (int op = 0; op < MOE_K_NUM_OPS; op++) {
        assert_true(moe_k_op_name((enum moe_k_op)op)[0] != '?');
    }
    struct moe_k_profile p;
    double s[MOE_K_NUM_OPS];
    long c[MOE_K_NUM_OPS];
    assert_int_equal(moe_k_profile_init(&p, NULL, NULL, 1, s, c), MOE_ERR_INVALID);
    assert_int_equal(moe_k_profile_init(&p, moe_k_cpu_ops(), NULL, 0, s, c), MOE_ERR_INVALID);
    assert_int_equal(moe_k_profile_init(&p, moe_k_cpu_ops(), NULL, 1, NULL, c), MOE_ERR_INVALID);
    assert_int_equal(moe_k_profile_init(&p, moe_k_cpu_ops(), NULL, 1, s, c), MOE_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_results_and_buckets),
        cmocka_unit_test(test_null_members_stay_null),
        cmocka_unit_test(test_names_and_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
