/*
 * Tests for the per-token layers of the CPU backend: memory helpers, RMSNorm, RoPE (both pair
 * conventions, a sub-range as in MLA, in place), SwiGLU, GELU, the vocab-parallel embedding and
 * cross-entropy (two shards against one), and AdamW. Each forward is compared with a naive double
 * reference written here; each backward with central finite differences of L = sum(dy * y).
 * Tolerances: forward vs double atol 1e-6 .. 1e-5, rtol 1e-5 (fp32 rounding of O(1) values);
 * finite differences h = 1e-3, atol 1e-3, rtol 1e-2 (smooth fp32 functions; the fp32 rounding of
 * L over 2h dominates); AdamW vs a double transcription of torch's update: rtol 1e-5.
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

struct layer_case {
    const struct moe_k_ops *ops;
    moe_k_ctx_t *ctx;
    int rows, dim, heads, rot_start, rot_dim;
    bool interleaved;
    const float *a, *b;
    const int *ints;
};

static void test_helpers(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    float x[6] = {1, 2, 3, 4, 5, 6};
    float y[6] = {0};
    float out;
    ops->sum(&out, x, 6, ctx);
    assert_true(out == 21.0f);
    ops->sum_squares(&out, x, 6, ctx);
    assert_true(out == 91.0f);
    ops->axpy(y, x, 6, 0.5f, ctx);
    assert_true(y[5] == 3.0f);
    ops->scale(y, 6, 2.0f, ctx);
    assert_true(y[5] == 6.0f && y[0] == 1.0f);
    ops->fill(y, 6, -1.0f, ctx);
    assert_true(y[0] == -1.0f && y[5] == -1.0f);
    /* copy_2d: columns 1..2 of a [2, 3] into columns 0..1 of a [2, 2]; then accumulate. */
    float d[4] = {0};
    ops->copy_2d(d, 2, x + 1, 3, 2, 2, false, ctx);
    assert_true(d[0] == 2 && d[1] == 3 && d[2] == 5 && d[3] == 6);
    ops->copy_2d(d, 2, x + 1, 3, 2, 2, true, ctx);
    assert_true(d[0] == 4 && d[3] == 12);
    moe_k_ctx_destroy(ctx);
}

/* ---- RMSNorm ---------------------------------------------------------------------------- */

static void rms_fwd_x(const float *x, float *y, void *u)
{
    struct layer_case *c = u;
    float *rstd = ktest_floats((size_t)c->rows);
    c->ops->rmsnorm_fwd(y, rstd, x, c->a, c->rows, c->dim, 1e-5f, c->ctx);
    free(rstd);
}

static void rms_fwd_w(const float *w, float *y, void *u)
{
    struct layer_case *c = u;
    float *rstd = ktest_floats((size_t)c->rows);
    c->ops->rmsnorm_fwd(y, rstd, c->b, w, c->rows, c->dim, 1e-5f, c->ctx);
    free(rstd);
}

static void test_rmsnorm(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 1);
    enum { R = 4, C = 7 };
    float *x = ktest_random(&rng, R * C, -2, 2);
    float *w = ktest_random(&rng, C, 0.5f, 1.5f);
    float y[R * C], rstd[R];
    ops->rmsnorm_fwd(y, rstd, x, w, R, C, 1e-5f, ctx);
    for (int r = 0; r < R; r++) {
        double ss = 0.0;
        for (int c = 0; c < C; c++) {
            ss += (double)x[r * C + c] * (double)x[r * C + c];
        }
        double rs = 1.0 / sqrt(ss / C + 1e-5);
        assert_true(fabs((double)rstd[r] - rs) < 1e-6 * rs);
        for (int c = 0; c < C; c++) {
            double e = (double)x[r * C + c] * rs * (double)w[c];
            assert_true(fabs((double)y[r * C + c] - e) < 1e-6 + 1e-5 * fabs(e));
        }
    }
    float *dy = ktest_random(&rng, R * C, -1, 1);
    float dx[R * C], dw[C] = {0};
    ops->rmsnorm_bwd(dx, dw, dy, x, w, rstd, R, C, false, ctx);
    struct layer_case lc = {ops, ctx, R, C, 0, 0, 0, false, w, x, NULL};
    assert_true(ktest_fd_check("rmsnorm dx", rms_fwd_x, &lc, x, R * C, R * C, dy, dx, FD_H, FD_ATOL,
                               FD_RTOL));
    assert_true(
        ktest_fd_check("rmsnorm dw", rms_fwd_w, &lc, w, C, R * C, dy, dw, FD_H, FD_ATOL, FD_RTOL));
    /* accumulate=true adds onto the residual gradient; d_weight accumulates always. */
    float dx2[R * C], dw2[C];
    memcpy(dx2, dx, sizeof(dx));
    memcpy(dw2, dw, sizeof(dw));
    ops->rmsnorm_bwd(dx2, dw2, dy, x, w, rstd, R, C, true, ctx);
    for (int i = 0; i < R * C; i++) {
        assert_true(fabsf(dx2[i] - 2.0f * dx[i]) <= 1e-6f * (1.0f + fabsf(dx[i])));
    }
    for (int i = 0; i < C; i++) {
        assert_true(fabsf(dw2[i] - 2.0f * dw[i]) <= 1e-6f * (1.0f + fabsf(dw[i])));
    }
    free(x);
    free(w);
    free(dy);
    moe_k_ctx_destroy(ctx);
}

/* ---- RoPE ------------------------------------------------------------------------------- */

#define ROPE_THETA 10000.0f

static void rope_y(const float *x, float *y, void *u)
{
    struct layer_case *c = u;
    c->ops->rope_fwd(y, x, c->a, c->rows, c->heads, c->dim, c->rot_start, c->rot_dim,
                     c->interleaved, c->ctx);
}

static void check_rope(bool interleaved, int head_dim, int rot_start, int rot_dim)
{
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 2);
    enum { R = 5, H = 3 };
    const int pos[R] = {0, 1, 7, 100, 4095};
    size_t n = (size_t)R * H * head_dim;
    float *x = ktest_random(&rng, n, -1, 1);
    float *y = ktest_floats(n);
    float *cs = ktest_floats((size_t)R * (size_t)rot_dim); /* [R, rot_dim/2, 2] */
    ops->rope_table(cs, pos, R, rot_dim, ROPE_THETA, ctx);
    ops->rope_fwd(y, x, cs, R, H, head_dim, rot_start, rot_dim, interleaved, ctx);
    int half = rot_dim / 2;
    for (int r = 0; r < R; r++) {
        for (int h = 0; h < H; h++) {
            const float *xv = x + ((size_t)r * H + h) * head_dim;
            const float *yv = y + ((size_t)r * H + h) * head_dim;
            for (int i = 0; i < head_dim; i++) {
                double e = (double)xv[i];
                int j = i - rot_start;
                if (j >= 0 && j < rot_dim) {
                    int pair = interleaved ? j / 2 : j % half;
                    bool first = interleaved ? j % 2 == 0 : j < half;
                    int other = rot_start + (interleaved ? (first ? j + 1 : j - 1)
                                                         : (first ? j + half : j - half));
                    double ang = pos[r] * pow(10000.0, -2.0 * pair / rot_dim);
                    double xi = xv[i], xo = xv[other];
                    e = first ? xi * cos(ang) - xo * sin(ang) : xo * sin(ang) + xi * cos(ang);
                }
                assert_true(fabs((double)yv[i] - e) < 1e-5);
            }
        }
    }
    /* Backward = inverse rotation: exact adjoint, checked by finite differences. */
    float *dy = ktest_random(&rng, n, -1, 1);
    float *dx = ktest_floats(n);
    ops->rope_bwd(dx, dy, cs, R, H, head_dim, rot_start, rot_dim, interleaved, ctx);
    struct layer_case lc = {ops,     ctx,         R,  head_dim, H,  rot_start,
                            rot_dim, interleaved, cs, NULL,     pos};
    assert_true(ktest_fd_check("rope bwd", rope_y, &lc, x, n, n, dy, dx, 1e-2, 2e-3, 2e-3));
    /* In place equals out of place. */
    ops->rope_fwd(x, x, cs, R, H, head_dim, rot_start, rot_dim, interleaved, ctx);
    assert_memory_equal(x, y, n * sizeof(float));
    free(cs);
    free(x);
    free(y);
    free(dy);
    free(dx);
    moe_k_ctx_destroy(ctx);
}

static void test_rope(void **state)
{
    (void)state;
    check_rope(false, 8, 0, 8);
    check_rope(true, 8, 0, 8);
    check_rope(false, 10, 6, 4); /* MLA-like: rope on the last 4 of 10 dims */
    check_rope(true, 10, 2, 6);
    /* Hand case: pos 1, one pair, theta^0 = 1: (1, 0) -> (cos 1, sin 1). */
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const int pos = 1;
    float v[2] = {1.0f, 0.0f};
    float cs[2];
    moe_k_ctx_ops(ctx)->rope_table(cs, &pos, 1, 2, ROPE_THETA, ctx);
    moe_k_ctx_ops(ctx)->rope_fwd(v, v, cs, 1, 1, 2, 0, 2, false, ctx);
    assert_true(fabs((double)v[0] - cos(1.0)) < 1e-7 && fabs((double)v[1] - sin(1.0)) < 1e-7);
    moe_k_ctx_destroy(ctx);
}

/* ---- SwiGLU and GELU -------------------------------------------------------------------- */

static void swiglu_y(const float *in, float *y, void *u)
{
    struct layer_case *c = u;
    c->ops->swiglu_fwd(y, in, c->rows, c->dim, c->ctx);
}

static void gelu_y(const float *in, float *y, void *u)
{
    struct layer_case *c = u;
    c->ops->gelu_fwd(y, in, (size_t)c->rows, c->ctx);
}

static void test_activations(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 3);
    enum { R = 3, F = 5 };
    float *in = ktest_random(&rng, R * 2 * F, -3, 3);
    float out[R * F];
    ops->swiglu_fwd(out, in, R, F, ctx);
    for (int r = 0; r < R; r++) {
        for (int j = 0; j < F; j++) {
            double g = in[r * 2 * F + j], up = in[r * 2 * F + F + j];
            double e = g / (1.0 + exp(-g)) * up;
            assert_true(fabs((double)out[r * F + j] - e) < 1e-6 + 1e-5 * fabs(e));
        }
    }
    float *dy = ktest_random(&rng, R * F, -1, 1);
    float d_in[R * 2 * F];
    ops->swiglu_bwd(d_in, dy, in, R, F, ctx);
    struct layer_case lc = {ops, ctx, R, F, 0, 0, 0, false, NULL, NULL, NULL};
    assert_true(ktest_fd_check("swiglu bwd", swiglu_y, &lc, in, R * 2 * F, R * F, dy, d_in, FD_H,
                               FD_ATOL, FD_RTOL));
    /* GELU (tanh approximation) */
    enum { G = 12 };
    float gx[G], gy[G], gd[G];
    for (int i = 0; i < G; i++) {
        gx[i] = -4.0f + 0.7f * (float)i;
    }
    ops->gelu_fwd(gy, gx, G, ctx);
    for (int i = 0; i < G; i++) {
        double x = gx[i];
        double e =
            0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
        assert_true(fabs((double)gy[i] - e) < 1e-6);
    }
    ops->gelu_bwd(gd, dy, gx, G, ctx);
    struct layer_case gc = {ops, ctx, G, 0, 0, 0, 0, false, NULL, NULL, NULL};
    assert_true(ktest_fd_check("gelu bwd", gelu_y, &gc, gx, G, G, dy, gd, FD_H, FD_ATOL, FD_RTOL));
    free(in);
    free(dy);
    moe_k_ctx_destroy(ctx);
}

/* ---- Embedding and cross-entropy -------------------------------------------------------- */

static void emb_y(const float *table, float *y, void *u)
{
    struct layer_case *c = u;
    c->ops->embedding_fwd(y, c->ints, table, c->rows, c->dim, c->rot_start, c->rot_dim, c->ctx);
}

static void test_embedding(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 4);
    enum { M = 5, C = 3, V = 8, V0 = 4, V1 = 8 }; /* shard holds ids 4..7 */
    const int ids[M] = {5, 1, 5, 7, 4};
    float *table = ktest_random(&rng, (V1 - V0) * C, -1, 1);
    float out[M * C];
    ops->embedding_fwd(out, ids, table, M, C, V0, V1, ctx);
    for (int i = 0; i < M; i++) {
        for (int c = 0; c < C; c++) {
            float e = ids[i] >= V0 ? table[(ids[i] - V0) * C + c] : 0.0f;
            assert_true(out[i * C + c] == e);
        }
    }
    float *dy = ktest_random(&rng, M * C, -1, 1);
    float d_table[(V1 - V0) * C];
    memset(d_table, 0, sizeof(d_table));
    ops->embedding_bwd(d_table, dy, ids, M, C, V0, V1, ctx);
    assert_true(d_table[1 * C] == dy[0] + dy[2 * C]); /* id 5 twice, in token order */
    struct layer_case lc = {ops, ctx, M, C, 0, V0, V1, false, NULL, NULL, ids};
    assert_true(ktest_fd_check("embedding bwd", emb_y, &lc, table, (V1 - V0) * C, M * C, dy,
                               d_table, 1e-2, 2e-3, 2e-3));
    (void)V;
    free(table);
    free(dy);
    moe_k_ctx_destroy(ctx);
}

/* Cross-entropy over `shards` equal vocabulary shards, with the all-reduces done here. */
static void xent_sharded(const struct moe_k_ops *ops,
                         moe_k_ctx_t *ctx,
                         float *loss,
                         float *gmax,
                         float *gsum,
                         const float *logits,
                         const int *targets,
                         int m,
                         int v,
                         int shards)
{
    int vl = v / shards;
    float *shard = ktest_floats((size_t)m * vl);
    float *lmax = ktest_floats((size_t)m), *lsum = ktest_floats((size_t)m);
    float *ltgt = ktest_floats((size_t)m), *gtgt = ktest_floats((size_t)m);
    for (int i = 0; i < m; i++) {
        gmax[i] = -INFINITY;
        gsum[i] = 0.0f;
        gtgt[i] = 0.0f;
    }
    for (int s = 0; s < shards; s++) { /* all-reduce MAX */
        ops->copy_2d(shard, vl, logits + s * vl, v, m, vl, false, ctx);
        ops->xent_local_max(lmax, shard, m, vl, ctx);
        for (int i = 0; i < m; i++) {
            gmax[i] = fmaxf(gmax[i], lmax[i]);
        }
    }
    for (int s = 0; s < shards; s++) { /* all-reduce SUM */
        ops->copy_2d(shard, vl, logits + s * vl, v, m, vl, false, ctx);
        ops->xent_local_sumexp(lsum, ltgt, shard, targets, gmax, m, vl, s * vl, ctx);
        for (int i = 0; i < m; i++) {
            gsum[i] += lsum[i];
            gtgt[i] += ltgt[i];
        }
    }
    ops->xent_loss(loss, gmax, gsum, gtgt, targets, m, ctx);
    free(shard);
    free(lmax);
    free(lsum);
    free(ltgt);
    free(gtgt);
}

enum { XM = 4, XV = 12 };
static const int x_targets[XM] = {3, 11, -1, 0}; /* token 2 ignored */

static void xent_y(const float *logits, float *y, void *u)
{
    struct layer_case *c = u;
    float gmax[XM], gsum[XM];
    xent_sharded(c->ops, c->ctx, y, gmax, gsum, logits, x_targets, XM, XV, 1);
}

static void test_cross_entropy(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 5);
    float *logits = ktest_random(&rng, XM * XV, -4, 4);
    float loss1[XM], loss3[XM], gmax[XM], gsum[XM];
    xent_sharded(ops, ctx, loss1, gmax, gsum, logits, x_targets, XM, XV, 1);
    xent_sharded(ops, ctx, loss3, gmax, gsum, logits, x_targets, XM, XV, 3);
    for (int i = 0; i < XM; i++) {
        double z = 0.0;
        for (int v = 0; v < XV; v++) {
            z += exp((double)logits[i * XV + v]);
        }
        double e = x_targets[i] < 0 ? 0.0 : log(z) - (double)logits[i * XV + x_targets[i]];
        assert_true(fabs((double)loss1[i] - e) < 1e-5);
        assert_true(fabs((double)loss3[i] - e) < 1e-5);
    }
    /* Backward on 3 shards, stitched, vs finite differences of sum(d_loss * loss). */
    float d_logits[XM * XV], shard_d[XM * 4], shard_l[XM * 4];
    const float d_loss = 1.0f / 3.0f;
    for (int s = 0; s < 3; s++) {
        ops->copy_2d(shard_l, 4, logits + s * 4, XV, XM, 4, false, ctx);
        ops->xent_bwd(shard_d, shard_l, x_targets, gmax, gsum, XM, 4, s * 4, d_loss, ctx);
        ops->copy_2d(d_logits + s * 4, XV, shard_d, 4, XM, 4, false, ctx);
    }
    float dl[XM] = {d_loss, d_loss, d_loss, d_loss};
    struct layer_case lc = {ops, ctx, 0, 0, 0, 0, 0, false, NULL, NULL, NULL};
    assert_true(ktest_fd_check("xent bwd", xent_y, &lc, logits, XM * XV, XM, dl, d_logits, FD_H,
                               FD_ATOL, FD_RTOL));
    for (int v = 0; v < XV; v++) {
        assert_true(d_logits[2 * XV + v] == 0.0f); /* ignored row */
    }
    free(logits);
    moe_k_ctx_destroy(ctx);
}

/* ---- AdamW ------------------------------------------------------------------------------ */

static void test_adamw(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    enum { N = 5 };
    float p[N] = {1.0f, -0.5f, 0.0f, 2.0f, 0.1f}, m[N] = {0}, v[N] = {0};
    double pd[N], md[N] = {0}, vd[N] = {0};
    ktest_to_double(pd, p, N);
    /* Hyperparameters exactly representable in fp32 or close: compared in double. */
    const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, gs = 0.5;
    const float grads[3][N] = {{0.1f, -0.2f, 0.3f, 0.0f, 1.0f},
                               {0.2f, 0.2f, -0.1f, 0.5f, -1.0f},
                               {-0.3f, 0.0f, 0.1f, 0.5f, 0.5f}};
    /* First step: m = (1-b1) g, v = (1-b2) g^2, so mhat / sqrt(vhat) = sign(g): p0 moves by
     * -lr*wd*p0 - lr. */
    for (int step = 1; step <= 3; step++) {
        ops->adamw_step(p, m, v, grads[step - 1], N, (float)lr, (float)b1, (float)b2, (float)eps,
                        (float)wd, (float)gs, step, ctx);
        for (int i = 0; i < N; i++) {
            double g = (double)grads[step - 1][i] * gs;
            pd[i] *= 1.0 - (double)lr * wd;
            md[i] = b1 * md[i] + (1.0 - b1) * g;
            vd[i] = b2 * vd[i] + (1.0 - b2) * g * g;
            double mh = md[i] / (1.0 - pow(b1, step)), vh = vd[i] / (1.0 - pow(b2, step));
            pd[i] -= lr * mh / (sqrt(vh) + eps);
            assert_true(fabs((double)p[i] - pd[i]) < 1e-6 + 1e-5 * fabs(pd[i]));
        }
        if (step == 1) {
            assert_true(fabs((double)p[0] - (1.0 - 1e-3 - 1e-2)) < 1e-6);
        }
    }
    moe_k_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_helpers),   cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_rope),      cmocka_unit_test(test_activations),
        cmocka_unit_test(test_embedding), cmocka_unit_test(test_cross_entropy),
        cmocka_unit_test(test_adamw),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
