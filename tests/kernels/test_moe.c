/*
 * Tests for MoE token movement (kernels/cpu/moe.c): a dispatch layout worked out by hand (4
 * tokens, top-2, 4 experts on 2 ranks), dropless and with capacity 2 (position drop policy);
 * Megatron's capacity formula; permute/unpermute against a naive reference that looks rows up
 * through row_to_slot (the other direction of the map); permute_bwd and unpermute_bwd (rows and
 * weights) against central finite differences with dropped slots present; sort_chunks by hand and
 * unsort_chunks as its inverse and adjoint. Tolerances: combine vs double reference atol/rtol
 * 1e-6; finite differences (linear ops) h = 1e-2, atol/rtol 2e-3.
 */
#include "tests/kernels/ktest.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs setjmp.h, stdarg.h, stddef.h and stdint.h first. */
#include <cmocka.h>

enum { T = 4, K = 2, E = 4, N = 2, S = T * K };
/* Slots: t0 -> e1, e0; t1 -> e1, e2; t2 -> e3, e1; t3 -> e0, e1. */
static const int topk_idx[S] = {1, 0, 1, 2, 3, 1, 0, 1};

static void test_dispatch_layout_dropless(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    int per_expert[E], per_rank[N], slot_to_row[S], row_to_slot[S], counts[E];
    ops->dispatch_layout(per_expert, per_rank, slot_to_row, row_to_slot, topk_idx, T, K, E, N, 0,
                         ctx);
    /* e0: slots 1, 6 -> rows 0, 1; e1: slots 0, 2, 5, 7 -> rows 2..5; e2: slot 3 -> 6; e3: 4 -> 7
     */
    const int expect_pe[E] = {2, 4, 1, 1};
    const int expect_s2r[S] = {2, 0, 3, 6, 7, 4, 1, 5};
    const int expect_r2s[S] = {1, 6, 0, 2, 5, 7, 3, 4};
    /* rank 0 owns e0, e1: every token; rank 1 owns e2, e3: t1 and t2. */
    const int expect_pr[N] = {4, 2};
    assert_memory_equal(per_expert, expect_pe, sizeof(expect_pe));
    assert_memory_equal(slot_to_row, expect_s2r, sizeof(expect_s2r));
    assert_memory_equal(row_to_slot, expect_r2s, sizeof(expect_r2s));
    assert_memory_equal(per_rank, expect_pr, sizeof(expect_pr));
    ops->expert_counts(counts, topk_idx, T, K, E, ctx);
    assert_memory_equal(counts, expect_pe, sizeof(expect_pe));
    moe_k_ctx_destroy(ctx);
}

static void test_dispatch_layout_capacity(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    int cap = moe_k_expert_capacity(T, K, E, 1.0); /* ceil(4 * 2 / 4 * 1.0) = 2 */
    assert_int_equal(cap, 2);
    int per_expert[E], per_rank[N], slot_to_row[S], row_to_slot[S];
    ops->dispatch_layout(per_expert, per_rank, slot_to_row, row_to_slot, topk_idx, T, K, E, N, cap,
                         ctx);
    /* e1 keeps its first two slots (0, 2) and drops slots 5 and 7 (later tokens). */
    const int expect_pe[E] = {2, 2, 1, 1};
    const int expect_s2r[S] = {2, 0, 3, 4, 5, -1, 1, -1};
    const int expect_r2s[S] = {1, 6, 0, 2, 3, 4, -1, -1};
    /* rank 0: t0, t1 (slot 2), t3 (slot 6); rank 1: t1 (e2), t2 (e3). */
    const int expect_pr[N] = {3, 2};
    assert_memory_equal(per_expert, expect_pe, sizeof(expect_pe));
    assert_memory_equal(slot_to_row, expect_s2r, sizeof(expect_s2r));
    assert_memory_equal(row_to_slot, expect_r2s, sizeof(expect_r2s));
    assert_memory_equal(per_rank, expect_pr, sizeof(expect_pr));
    moe_k_ctx_destroy(ctx);
}

static void test_capacity_formula(void **state)
{
    (void)state;
    assert_int_equal(moe_k_expert_capacity(10, 2, 4, 1.25), 7); /* ceil(5 * 1.25) */
    assert_int_equal(moe_k_expert_capacity(4096, 8, 256, 1.0), 128);
    assert_int_equal(moe_k_expert_capacity(10, 2, 4, 0.0), 0);  /* dropless */
    assert_int_equal(moe_k_expert_capacity(10, 2, 4, -1.0), 0); /* dropless */
}

/* A random routing of M tokens with top-K over E experts (distinct experts per token). */
static void random_routing(struct moe_test_rng *rng, int *idx, int m, int k, int e)
{
    for (int t = 0; t < m; t++) {
        for (int j = 0; j < k; j++) {
            int pick;
            bool dup;
            do {
                pick = (int)(moe_test_rng_uniform(rng) * e);
                dup = false;
                for (int i = 0; i < j; i++) {
                    dup = dup || idx[t * k + i] == pick;
                }
            } while (dup);
            idx[t * k + j] = pick;
        }
    }
}

struct perm_case {
    const struct moe_k_ops *ops;
    moe_k_ctx_t *ctx;
    int m, k, c, rows;
    const int *s2r, *r2s;
    const float *rows_in, *weights;
};

static void perm_fwd(const float *x, float *y, void *u)
{
    struct perm_case *p = u;
    p->ops->permute(y, x, p->r2s, p->rows, p->k, p->c, p->ctx);
}

static void unperm_fwd_rows(const float *rows, float *y, void *u)
{
    struct perm_case *p = u;
    p->ops->unpermute(y, rows, p->weights, p->s2r, p->m, p->k, p->c, p->ctx);
}

static void unperm_fwd_w(const float *w, float *y, void *u)
{
    struct perm_case *p = u;
    p->ops->unpermute(y, p->rows_in, w, p->s2r, p->m, p->k, p->c, p->ctx);
}

static void check_permute_case(int capacity)
{
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 10 + (uint64_t)capacity);
    enum { M = 9, KK = 3, EE = 6, C = 5 };
    int idx[M * KK] = {0}, per_expert[EE], per_rank[2], s2r[M * KK], r2s[M * KK];
    random_routing(&rng, idx, M, KK, EE);
    ops->dispatch_layout(per_expert, per_rank, s2r, r2s, idx, M, KK, EE, 2, capacity, ctx);
    int rows = 0;
    for (int e = 0; e < EE; e++) {
        rows += per_expert[e];
        assert_true(capacity <= 0 || per_expert[e] <= capacity);
    }
    float *x = ktest_random(&rng, (size_t)M * C, -1, 1);
    float *w = ktest_random(&rng, (size_t)M * KK, 0, 1);
    float *prow = ktest_floats((size_t)rows * C);
    float *expert_out = ktest_random(&rng, (size_t)rows * C, -1, 1);
    float *y = ktest_floats((size_t)M * C);
    ops->permute(prow, x, r2s, rows, KK, C, ctx);
    for (int p = 0; p < rows; p++) {
        assert_memory_equal(prow + p * C, x + (r2s[p] / KK) * C, sizeof(float) * C);
        if (p > 0) { /* rows sorted by expert, then slot */
            int e0 = idx[r2s[p - 1]], e1 = idx[r2s[p]];
            assert_true(e0 < e1 || (e0 == e1 && r2s[p - 1] < r2s[p]));
        }
    }
    /* Combine vs a naive reference that finds each slot's row by scanning row_to_slot. */
    ops->unpermute(y, expert_out, w, s2r, M, KK, C, ctx);
    for (int t = 0; t < M; t++) {
        for (int c = 0; c < C; c++) {
            double acc = 0.0;
            for (int p = 0; p < rows; p++) {
                if (r2s[p] / KK == t) {
                    acc += (double)w[r2s[p]] * (double)expert_out[p * C + c];
                }
            }
            assert_true(fabs((double)y[t * C + c] - acc) <= 1e-6 + 1e-6 * fabs(acc));
        }
    }
    /* Backward passes vs finite differences. */
    struct perm_case pc = {ops, ctx, M, KK, C, rows, s2r, r2s, expert_out, w};
    float *d_rows = ktest_random(&rng, (size_t)rows * C, -1, 1);
    float *dx = ktest_floats((size_t)M * C);
    ops->permute_bwd(dx, d_rows, s2r, M, KK, C, false, ctx);
    assert_true(ktest_fd_check("permute dx", perm_fwd, &pc, x, (size_t)M * C, (size_t)rows * C,
                               d_rows, dx, 1e-2, 2e-3, 2e-3));
    float *dy = ktest_random(&rng, (size_t)M * C, -1, 1);
    float *g_rows = ktest_floats((size_t)rows * C);
    float *g_w = ktest_floats((size_t)M * KK);
    ops->unpermute_bwd(g_rows, g_w, dy, expert_out, w, s2r, M, KK, C, ctx);
    assert_true(ktest_fd_check("unpermute d_rows", unperm_fwd_rows, &pc, expert_out,
                               (size_t)rows * C, (size_t)M * C, dy, g_rows, 1e-2, 2e-3, 2e-3));
    assert_true(ktest_fd_check("unpermute d_weights", unperm_fwd_w, &pc, w, (size_t)M * KK,
                               (size_t)M * C, dy, g_w, 1e-2, 2e-3, 2e-3));
    /* permute_bwd with accumulate adds. */
    float *dx2 = ktest_floats((size_t)M * C);
    memcpy(dx2, dx, sizeof(float) * M * C);
    ops->permute_bwd(dx2, d_rows, s2r, M, KK, C, true, ctx);
    for (int i = 0; i < M * C; i++) {
        assert_true(fabsf(dx2[i] - 2.0f * dx[i]) <= 1e-6f);
    }
    /* Dropless, unweighted: unpermute(permute(x)) = K x. */
    if (capacity <= 0) {
        ops->unpermute(y, prow, NULL, s2r, M, KK, C, ctx);
        for (int i = 0; i < M * C; i++) {
            assert_true(fabsf(y[i] - (float)KK * x[i]) <= 1e-6f);
        }
    }
    free(x);
    free(w);
    free(prow);
    free(expert_out);
    free(y);
    free(d_rows);
    free(dx);
    free(dx2);
    free(dy);
    free(g_rows);
    free(g_w);
    moe_k_ctx_destroy(ctx);
}

static void test_permute_dropless(void **state)
{
    (void)state;
    check_permute_case(0);
}

static void test_permute_with_drops(void **state)
{
    (void)state;
    check_permute_case(3); /* 27 slots over 6 experts: some experts exceed 3 */
}

static void test_sort_chunks(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    const int chunk_rows[3] = {2, 1, 3};
    const int order[3] = {2, 0, 1};
    enum { R = 6, C = 2 };
    float in[R * C], out[R * C], back[R * C];
    for (int i = 0; i < R * C; i++) {
        in[i] = (float)i;
    }
    ops->sort_chunks(out, in, chunk_rows, order, 3, C, ctx);
    /* chunk 2 = rows 3..5, then chunk 0 = rows 0..1, then chunk 1 = row 2 */
    const int expect_rows[R] = {3, 4, 5, 0, 1, 2};
    for (int r = 0; r < R; r++) {
        assert_true(out[r * C] == in[expect_rows[r] * C]);
        assert_true(out[r * C + 1] == in[expect_rows[r] * C + 1]);
    }
    ops->unsort_chunks(back, out, chunk_rows, order, 3, C, ctx);
    assert_memory_equal(back, in, sizeof(in));
    /* Adjoint (backward) check: <sort(x), y> == <x, unsort(y)>. */
    float y[R * C], uy[R * C];
    for (int i = 0; i < R * C; i++) {
        y[i] = (float)(i * i % 7) - 3.0f;
    }
    ops->unsort_chunks(uy, y, chunk_rows, order, 3, C, ctx);
    double lhs = 0.0, rhs = 0.0;
    for (int i = 0; i < R * C; i++) {
        lhs += (double)out[i] * (double)y[i];
        rhs += (double)in[i] * (double)uy[i];
    }
    assert_true(lhs == rhs);
    moe_k_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dispatch_layout_dropless),
        cmocka_unit_test(test_dispatch_layout_capacity),
        cmocka_unit_test(test_capacity_formula),
        cmocka_unit_test(test_permute_dropless),
        cmocka_unit_test(test_permute_with_drops),
        cmocka_unit_test(test_sort_chunks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
