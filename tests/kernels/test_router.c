/*
 * Tests for the router (kernels/cpu/router.c). Selection: a hand-made sigmoid case where group-
 * limited routing (DeepSeek-V3: groups ranked by the sum of their top-2 scores) excludes the
 * single best expert and an expert bias changes the choice without entering the weights; random
 * cases against a naive double reference (softmax, sort, normalise). Gradients: router_bwd (with
 * and without normalisation, softmax and sigmoid, plus the extra d_scores input), aux-loss and
 * z-loss backward, all against central finite differences; logits are spread apart so the
 * discrete selection does not change under the step. Aux loss: balanced routing gives exactly
 * coeff; shards with global counts sum to the whole. Bias update by hand.
 * Tolerances: vs double reference atol 1e-6, rtol 1e-5; finite differences h = 1e-3 on smooth
 * fp32 functions of size <= 1: atol 1e-3, rtol 1e-2.
 */
#include "tests/kernels/ktest.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs setjmp.h, stdarg.h, stddef.h and stdint.h first. */
#include <cmocka.h>

#define FD_H    1e-3
#define FD_ATOL 1e-3
#define FD_RTOL 1e-2

static double sigmoid_d(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/* Sigmoid scores (rounded): e0 .881, e1 .047 | e2 .622, e3 .599 | e4 .818, e5 .802 | e6, e7 .269.
 * Top-2 group sums: g0 .928, g1 1.221, g2 1.620, g3 .538. */
static const float hand_logits[8] = {2.0f, -3.0f, 0.5f, 0.4f, 1.5f, 1.4f, -1.0f, -1.0f};

static void route_hand(int *idx, float *w, const float *bias, int groups, int group_topk)
{
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    float scores[8];
    ops->router_fwd(idx, w, scores, hand_logits, bias, 1, 8, 2, groups, group_topk,
                    MOE_K_SCORE_SIGMOID, true, 2.5f, ctx);
    for (int e = 0; e < 8; e++) {
        assert_true(fabs((double)scores[e] - sigmoid_d((double)hand_logits[e])) < 1e-6);
    }
    moe_k_ctx_destroy(ctx);
}

static void test_group_limited_and_bias(void **state)
{
    (void)state;
    int idx[2];
    float w[2];
    route_hand(idx, w, NULL, 1, 1); /* plain top-2: e0 (.881), e4 (.818) */
    assert_int_equal(idx[0], 0);
    assert_int_equal(idx[1], 4);
    route_hand(idx, w, NULL, 4, 2); /* groups g2, g1 win; e0 is excluded: e4, e5 */
    assert_int_equal(idx[0], 4);
    assert_int_equal(idx[1], 5);
    /* bias +0.5 on e3 lifts g1 to .622 + 1.099 = 1.721 > g2 and picks e3 first. */
    const float bias[8] = {0, 0, 0, 0.5f, 0, 0, 0, 0};
    route_hand(idx, w, bias, 4, 2);
    assert_int_equal(idx[0], 3);
    assert_int_equal(idx[1], 4);
    /* Weights from unbiased scores, normalised, times 2.5. */
    double s3 = sigmoid_d(0.4), s4 = sigmoid_d(1.5);
    assert_true(fabs((double)w[0] - 2.5 * s3 / (s3 + s4)) < 1e-6);
    assert_true(fabs((double)w[1] - 2.5 * s4 / (s3 + s4)) < 1e-6);
}

/* Logits spread at least 0.2 apart within a row (a shuffled ladder plus noise). */
static void spread_logits(struct moe_test_rng *rng, float *x, int m, int e)
{
    for (int t = 0; t < m; t++) {
        float *row = x + (size_t)t * e;
        for (int i = 0; i < e; i++) {
            row[i] = 0.3f * (float)i - 1.0f + 0.05f * (float)moe_test_rng_uniform(rng);
        }
        for (int i = e - 1; i > 0; i--) {
            int j = (int)(moe_test_rng_uniform(rng) * (i + 1));
            float tmp = row[i];
            row[i] = row[j];
            row[j] = tmp;
        }
    }
}

static void test_softmax_topk_vs_naive(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 5);
    enum { M = 6, E = 8, K = 3 };
    float *logits = ktest_random(&rng, M * E, -3, 3);
    float scores[M * E], w[M * K];
    int idx[M * K];
    for (int norm = 0; norm < 2; norm++) {
        ops->router_fwd(idx, w, scores, logits, NULL, M, E, K, 0, 0, MOE_K_SCORE_SOFTMAX, norm != 0,
                        1.0f, ctx);
        for (int t = 0; t < M; t++) {
            double p[E], z = 0.0;
            for (int e = 0; e < E; e++) {
                p[e] = exp((double)logits[t * E + e]);
                z += p[e];
            }
            bool used[E] = {false};
            double sel[K], sum = 0.0;
            for (int k = 0; k < K; k++) { /* naive selection sort */
                int best = -1;
                for (int e = 0; e < E; e++) {
                    if (!used[e] && (best < 0 || p[e] > p[best])) {
                        best = e;
                    }
                }
                used[best] = true;
                assert_int_equal(idx[t * K + k], best);
                sel[k] = p[best] / z;
                sum += sel[k];
            }
            for (int e = 0; e < E; e++) {
                assert_true(fabs((double)scores[t * E + e] - p[e] / z) < 1e-6);
            }
            for (int k = 0; k < K; k++) {
                double expect = norm ? sel[k] / sum : sel[k];
                assert_true(fabs((double)w[t * K + k] - expect) < 1e-6 + 1e-5 * expect);
            }
        }
    }
    free(logits);
    moe_k_ctx_destroy(ctx);
}

/* ---- router_bwd by finite differences ----------------------------------------------------- */

struct rt_case {
    const struct moe_k_ops *ops;
    moe_k_ctx_t *ctx;
    int m, e, k, groups, group_topk;
    enum moe_k_score_fn fn;
    bool norm;
    float sf;
    const float *bias;
};

/* y = [topk_weight (M*K), scores (M*E)] as a function of logits. */
static void router_y(const float *logits, float *y, void *u)
{
    struct rt_case *c = u;
    int *idx = ktest_alloc(sizeof(int) * (size_t)(c->m * c->k));
    c->ops->router_fwd(idx, y, y + c->m * c->k, logits, c->bias, c->m, c->e, c->k, c->groups,
                       c->group_topk, c->fn, c->norm, c->sf, c->ctx);
    free(idx);
}

static void check_router_bwd(enum moe_k_score_fn fn, bool norm, float sf, int groups, bool bias)
{
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 21);
    enum { M = 4, E = 8, K = 2 };
    float logits[M * E], b[E];
    spread_logits(&rng, logits, M, E);
    moe_test_fill_f32(&rng, b, E, -0.1f, 0.1f);
    struct rt_case c = {
        ops, ctx, M, E, K, groups, groups > 1 ? 2 : 0, fn, norm, sf, bias ? b : NULL};
    float *dy = ktest_random(&rng, M * K + M * E, -1, 1); /* d_w then d_scores */
    float scores[M * E], w[M * K], d_logits[M * E];
    int idx[M * K];
    ops->router_fwd(idx, w, scores, logits, c.bias, M, E, K, groups, c.group_topk, fn, norm, sf,
                    ctx);
    ops->router_bwd(d_logits, dy, dy + M * K, scores, idx, M, E, K, fn, norm, sf, ctx);
    assert_true(ktest_fd_check("router_bwd", router_y, &c, logits, M * E, M * K + M * E, dy,
                               d_logits, FD_H, FD_ATOL, FD_RTOL));
    free(dy);
    moe_k_ctx_destroy(ctx);
}

static void test_router_bwd(void **state)
{
    (void)state;
    check_router_bwd(MOE_K_SCORE_SOFTMAX, false, 1.0f, 0, false);
    check_router_bwd(MOE_K_SCORE_SOFTMAX, true, 1.0f, 0, false);
    check_router_bwd(MOE_K_SCORE_SIGMOID, true, 2.5f, 4, true);
    check_router_bwd(MOE_K_SCORE_SIGMOID, false, 1.0f, 2, false);
}

/* ---- aux loss and z-loss ---------------------------------------------------------------- */

struct aux_case {
    const struct moe_k_ops *ops;
    moe_k_ctx_t *ctx;
    int m, m_tot, e, k;
    const int *counts;
    enum moe_k_score_fn fn;
    float coeff;
};

static void aux_y(const float *scores, float *y, void *u)
{
    struct aux_case *c = u;
    c->ops->router_aux_loss_fwd(y, scores, c->counts, c->m, c->m_tot, c->e, c->k, c->fn, c->coeff,
                                c->ctx);
}

static void z_y(const float *logits, float *y, void *u)
{
    struct aux_case *c = u;
    c->ops->router_z_loss_fwd(y, logits, c->m, c->m_tot, c->e, c->coeff, c->ctx);
}

static void test_aux_loss(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    /* Balanced: uniform softmax, counts T*K/E each -> loss = coeff exactly (in exact math). */
    enum { M = 8, E = 4, K = 2 };
    float uniform[M * E];
    for (int i = 0; i < M * E; i++) {
        uniform[i] = 0.25f;
    }
    const int balanced[E] = {4, 4, 4, 4};
    float loss;
    ops->router_aux_loss_fwd(&loss, uniform, balanced, M, M, E, K, MOE_K_SCORE_SOFTMAX, 0.01f, ctx);
    assert_true(fabsf(loss - 0.01f) < 1e-8f);
    /* Random scores vs naive formula, and shard additivity. */
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 8);
    float *s = ktest_random(&rng, M * E, 0.05f, 1.0f);
    const int counts[E] = {7, 1, 5, 3};
    for (int fn = 0; fn < 2; fn++) {
        double acc = 0.0;
        for (int t = 0; t < M; t++) {
            double z = 0.0;
            for (int e = 0; e < E; e++) {
                z += (double)s[t * E + e];
            }
            for (int e = 0; e < E; e++) {
                double p = (double)s[t * E + e] / (fn == MOE_K_SCORE_SIGMOID ? z : 1.0);
                acc += (double)counts[e] * p;
            }
        }
        double expect = 0.01 * E / ((double)K * M * M) * acc;
        float whole, half0, half1;
        ops->router_aux_loss_fwd(&whole, s, counts, M, M, E, K, (enum moe_k_score_fn)fn, 0.01f,
                                 ctx);
        ops->router_aux_loss_fwd(&half0, s, counts, M / 2, M, E, K, (enum moe_k_score_fn)fn, 0.01f,
                                 ctx);
        ops->router_aux_loss_fwd(&half1, s + M / 2 * E, counts, M / 2, M, E, K,
                                 (enum moe_k_score_fn)fn, 0.01f, ctx);
        assert_true(fabs((double)whole - expect) < 1e-6 * expect);
        assert_true(fabs((double)(half0 + half1) - expect) < 1e-6 * expect);
        /* Backward by finite differences, with d_loss = 0.5. */
        struct aux_case c = {ops, ctx, M, M, E, K, counts, (enum moe_k_score_fn)fn, 0.01f};
        float d_scores[M * E];
        float dl = 0.5f;
        ops->router_aux_loss_bwd(d_scores, s, counts, M, M, E, K, (enum moe_k_score_fn)fn, 0.01f,
                                 dl, ctx);
        assert_true(ktest_fd_check("aux_loss_bwd", aux_y, &c, s, M * E, 1, &dl, d_scores, FD_H,
                                   1e-6, FD_RTOL));
    }
    free(s);
    moe_k_ctx_destroy(ctx);
}

static void test_z_loss(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 9);
    enum { M = 5, E = 6 };
    float *x = ktest_random(&rng, M * E, -2, 2);
    float loss;
    ops->router_z_loss_fwd(&loss, x, M, 10, E, 1e-3f, ctx);
    double acc = 0.0;
    for (int t = 0; t < M; t++) {
        double z = 0.0;
        for (int e = 0; e < E; e++) {
            z += exp((double)x[t * E + e]);
        }
        acc += log(z) * log(z);
    }
    assert_true(fabs((double)loss - 1e-3 / 10.0 * acc) < 1e-6 * 1e-3 / 10.0 * acc);
    /* Backward accumulates: start from ones, subtract them. */
    float d[M * E];
    for (int i = 0; i < M * E; i++) {
        d[i] = 1.0f;
    }
    float dl = 2.0f;
    ops->router_z_loss_bwd(d, x, M, 10, E, 1e-3f, dl, ctx);
    for (int i = 0; i < M * E; i++) {
        d[i] -= 1.0f;
    }
    struct aux_case c = {ops, ctx, M, 10, E, 1, NULL, MOE_K_SCORE_SOFTMAX, 1e-3f};
    assert_true(ktest_fd_check("z_loss_bwd", z_y, &c, x, M * E, 1, &dl, d, FD_H, 1e-6, FD_RTOL));
    free(x);
    moe_k_ctx_destroy(ctx);
}

static void test_bias_update(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    const int counts[4] = {1, 5, 3, 3}; /* mean 3 */
    float bias[4] = {0.0f, 0.0f, 0.1f, -0.1f};
    ops->router_bias_update(bias, counts, 4, 0.001f, ctx);
    assert_true(bias[0] == 0.001f);  /* underloaded: up */
    assert_true(bias[1] == -0.001f); /* overloaded: down */
    assert_true(bias[2] == 0.1f && bias[3] == -0.1f);
    moe_k_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_limited_and_bias),
        cmocka_unit_test(test_softmax_topk_vs_naive),
        cmocka_unit_test(test_router_bwd),
        cmocka_unit_test(test_aux_loss),
        cmocka_unit_test(test_z_loss),
        cmocka_unit_test(test_bias_update),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
