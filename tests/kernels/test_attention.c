/*
 * Tests for attention (kernels/cpu/attention.c): forward and log-sum-exp against a naive double
 * implementation (causal GQA; MLA-like different qk/v head dims; non-causal); a context-parallel
 * query chunk with a global offset equals the matching rows of full attention; rows that see no
 * key give 0 and -Inf; backward (dq, dk, dv) against central finite differences; dk/dv
 * accumulated over two query chunks equal the full-sequence gradients.
 * Tolerances: forward vs double atol 1e-5, rtol 1e-4 (fp32 softmax and sgemm over <= 8 terms);
 * finite differences h = 1e-3, atol 1e-3, rtol 1e-2; chunked vs full atol 1e-5.
 */
#include "tests/kernels/ktest.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs setjmp.h, stdarg.h, stddef.h and stdint.h first. */
#include <cmocka.h>

struct attn {
    int b, tq, tk, hq, hkv, dqk, dv, q0, k0;
    float scale;
    bool causal;
};

static size_t nq(const struct attn *a)
{
    return (size_t)a->b * a->tq * a->hq * a->dqk;
}
static size_t nk(const struct attn *a)
{
    return (size_t)a->b * a->tk * a->hkv * a->dqk;
}
static size_t nv(const struct attn *a)
{
    return (size_t)a->b * a->tk * a->hkv * a->dv;
}
static size_t no(const struct attn *a)
{
    return (size_t)a->b * a->tq * a->hq * a->dv;
}

static void naive_attention(
    double *out, double *lse, const float *q, const float *k, const float *v, const struct attn *a)
{
    double *p = ktest_doubles((size_t)a->tk);
    for (int b = 0; b < a->b; b++) {
        for (int h = 0; h < a->hq; h++) {
            int hk = h / (a->hq / a->hkv);
            for (int i = 0; i < a->tq; i++) {
                const float *qi = q + (((size_t)b * a->tq + i) * a->hq + h) * a->dqk;
                double max = -(double)INFINITY;
                for (int j = 0; j < a->tk; j++) {
                    const float *kj = k + (((size_t)b * a->tk + j) * a->hkv + hk) * a->dqk;
                    bool vis = !a->causal || a->k0 + j <= a->q0 + i;
                    double s = 0.0;
                    for (int d = 0; d < a->dqk; d++) {
                        s += (double)qi[d] * (double)kj[d];
                    }
                    p[j] = vis ? s * (double)a->scale : -(double)INFINITY;
                    max = fmax(max, p[j]);
                }
                double z = 0.0;
                for (int j = 0; j < a->tk; j++) {
                    p[j] = isinf(max) ? 0.0 : exp(p[j] - max);
                    z += p[j];
                }
                lse[((size_t)b * a->hq + h) * a->tq + i] =
                    z > 0.0 ? max + log(z) : -(double)INFINITY;
                double *oi = out + (((size_t)b * a->tq + i) * a->hq + h) * a->dv;
                for (int d = 0; d < a->dv; d++) {
                    double acc = 0.0;
                    for (int j = 0; j < a->tk; j++) {
                        acc += p[j] / (z > 0.0 ? z : 1.0) *
                               (double)v[(((size_t)b * a->tk + j) * a->hkv + hk) * a->dv + d];
                    }
                    oi[d] = acc;
                }
            }
        }
    }
    free(p);
}

struct attn_run {
    const struct moe_k_ops *ops;
    moe_k_ctx_t *ctx;
    struct attn a;
    const float *q, *k, *v;
    void *ws;
    size_t ws_bytes;
    float *lse;
};

static void
fwd(const struct attn_run *r, float *out, const float *q, const float *k, const float *v)
{
    const struct attn *a = &r->a;
    r->ops->attention_fwd(out, r->lse, q, k, v, a->b, a->tq, a->tk, a->hq, a->hkv, a->dqk, a->dv,
                          a->q0, a->k0, a->scale, a->causal, r->ws, r->ws_bytes, r->ctx);
}

static void fwd_q(const float *q, float *y, void *u)
{
    struct attn_run *r = u;
    fwd(r, y, q, r->k, r->v);
}
static void fwd_k(const float *k, float *y, void *u)
{
    struct attn_run *r = u;
    fwd(r, y, r->q, k, r->v);
}
static void fwd_v(const float *v, float *y, void *u)
{
    struct attn_run *r = u;
    fwd(r, y, r->q, r->k, v);
}

static struct attn_run make_run(moe_k_ctx_t *ctx, struct attn a)
{
    struct attn_run r;
    memset(&r, 0, sizeof(r));
    r.ops = moe_k_ctx_ops(ctx);
    r.ctx = ctx;
    r.a = a;
    r.ws_bytes = r.ops->attention_workspace_bytes(a.tq, a.tk, ctx);
    r.ws = ktest_alloc(r.ws_bytes);
    r.lse = ktest_floats((size_t)a.b * a.hq * a.tq);
    return r;
}

static void check_case(struct attn a, uint64_t seed, bool check_grads)
{
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    struct attn_run r = make_run(ctx, a);
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, seed);
    float *q = ktest_random(&rng, nq(&a), -1, 1);
    float *k = ktest_random(&rng, nk(&a), -1, 1);
    float *v = ktest_random(&rng, nv(&a), -1, 1);
    r.q = q;
    r.k = k;
    r.v = v;
    float *out = ktest_floats(no(&a));
    double *ref = ktest_doubles(no(&a));
    double *ref_lse = ktest_doubles((size_t)a.b * a.hq * a.tq);
    fwd(&r, out, q, k, v);
    naive_attention(ref, ref_lse, q, k, v, &a);
    float *reff = ktest_floats(no(&a));
    float *ref_lsef = ktest_floats((size_t)a.b * a.hq * a.tq);
    ktest_to_float(reff, ref, no(&a));
    ktest_to_float(ref_lsef, ref_lse, (size_t)a.b * a.hq * a.tq);
    assert_true(moe_test_allclose_f32("attention out", out, reff, no(&a), 1e-5, 1e-4, NULL));
    assert_true(moe_test_allclose_f32("attention lse", r.lse, ref_lsef, (size_t)a.b * a.hq * a.tq,
                                      1e-5, 1e-4, NULL));
    if (check_grads) {
        float *dout = ktest_random(&rng, no(&a), -1, 1);
        float *dq = ktest_floats(nq(&a)), *dk = ktest_floats(nk(&a)), *dv = ktest_floats(nv(&a));
        r.ops->attention_bwd(dq, dk, dv, dout, q, k, v, out, r.lse, a.b, a.tq, a.tk, a.hq, a.hkv,
                             a.dqk, a.dv, a.q0, a.k0, a.scale, a.causal, false, r.ws, r.ws_bytes,
                             ctx);
        assert_true(
            ktest_fd_check("attn dq", fwd_q, &r, q, nq(&a), no(&a), dout, dq, 1e-3, 1e-3, 1e-2));
        assert_true(
            ktest_fd_check("attn dk", fwd_k, &r, k, nk(&a), no(&a), dout, dk, 1e-3, 1e-3, 1e-2));
        assert_true(
            ktest_fd_check("attn dv", fwd_v, &r, v, nv(&a), no(&a), dout, dv, 1e-3, 1e-3, 1e-2));
        free(dout);
        free(dq);
        free(dk);
        free(dv);
    }
    free(q);
    free(k);
    free(v);
    free(out);
    free(ref);
    free(ref_lse);
    free(reff);
    free(ref_lsef);
    free(r.ws);
    free(r.lse);
    moe_k_ctx_destroy(ctx);
}

static void test_causal_gqa(void **state)
{
    (void)state;
    struct attn a = {2, 5, 5, 4, 2, 6, 6, 0, 0, 0.40824829f, true}; /* 1/sqrt(6) */
    check_case(a, 1, true);
}

static void test_mla_dims(void **state)
{
    (void)state;
    struct attn a = {1, 4, 4, 2, 2, 5, 3, 0, 0, 0.5f, true}; /* qk dim 5, v dim 3 */
    check_case(a, 2, true);
}

static void test_non_causal(void **state)
{
    (void)state;
    struct attn a = {1, 3, 4, 2, 1, 4, 4, 0, 0, 0.5f, false};
    check_case(a, 3, true);
}

static void test_offsets_and_empty_rows(void **state)
{
    (void)state;
    /* K/V range starts at position 2: query rows 0 and 1 see nothing. */
    struct attn a = {1, 4, 3, 2, 2, 4, 4, 0, 2, 0.5f, true};
    check_case(a, 4, true);
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    struct attn_run r = make_run(ctx, a);
    float q[32], k[24], v[24], out[32];
    for (int i = 0; i < 32; i++) {
        q[i] = 0.1f * (float)i;
    }
    for (int i = 0; i < 24; i++) {
        k[i] = v[i] = 1.0f;
    }
    fwd(&r, out, q, k, v);
    for (int h = 0; h < 2; h++) {
        assert_true(isinf(r.lse[h * 4 + 0]) && r.lse[h * 4 + 0] < 0.0f);
        assert_true(isinf(r.lse[h * 4 + 1]));
        assert_true(isfinite(r.lse[h * 4 + 2]));
    }
    assert_true(out[0] == 0.0f && out[15] == 0.0f); /* rows 0, 1 */
    assert_true(fabsf(out[16] - 1.0f) < 1e-6f);     /* row 2: mean of ones */
    free(r.ws);
    free(r.lse);
    moe_k_ctx_destroy(ctx);
}

/* Context parallel: the full K/V (all-gathered) with two query chunks at offsets 0 and 3 gives
 * the rows of full attention; dk/dv accumulated over the chunks give the full gradients. */
static void test_chunks_match_full(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 6);
    enum { T = 7, H = 2, HK = 1, D = 4, SPLIT = 3 };
    struct attn full = {1, T, T, H, HK, D, D, 0, 0, 0.5f, true};
    struct attn_run rf = make_run(ctx, full);
    float *q = ktest_random(&rng, T * H * D, -1, 1), *k = ktest_random(&rng, T * HK * D, -1, 1);
    float *v = ktest_random(&rng, T * HK * D, -1, 1), *dout = ktest_random(&rng, T * H * D, -1, 1);
    float out[T * H * D], dq[T * H * D], dk[T * HK * D], dv[T * HK * D];
    fwd(&rf, out, q, k, v);
    ops->attention_bwd(dq, dk, dv, dout, q, k, v, out, rf.lse, 1, T, T, H, HK, D, D, 0, 0, 0.5f,
                       true, false, rf.ws, rf.ws_bytes, ctx);
    float cout[T * H * D], cdq[T * H * D], cdk[T * HK * D], cdv[T * HK * D];
    float clse[H * T];
    const int starts[2] = {0, SPLIT}, lens[2] = {SPLIT, T - SPLIT};
    for (int c = 0; c < 2; c++) {
        struct attn a = {1, lens[c], T, H, HK, D, D, starts[c], 0, 0.5f, true};
        struct attn_run r = make_run(ctx, a);
        size_t off = (size_t)starts[c] * H * D;
        fwd(&r, cout + off, q + off, k, v);
        for (int h = 0; h < H; h++) {
            memcpy(clse + h * T + starts[c], r.lse + h * lens[c], sizeof(float) * lens[c]);
        }
        ops->attention_bwd(cdq + off, cdk, cdv, dout + off, q + off, k, v, cout + off, r.lse, 1,
                           lens[c], T, H, HK, D, D, starts[c], 0, 0.5f, true, c > 0, r.ws,
                           r.ws_bytes, ctx);
        free(r.ws);
        free(r.lse);
    }
    assert_true(moe_test_allclose_f32("cp out", cout, out, T * H * D, 1e-6, 1e-6, NULL));
    assert_true(moe_test_allclose_f32("cp lse", clse, rf.lse, H * T, 1e-6, 1e-6, NULL));
    assert_true(moe_test_allclose_f32("cp dq", cdq, dq, T * H * D, 1e-5, 1e-5, NULL));
    assert_true(moe_test_allclose_f32("cp dk", cdk, dk, T * HK * D, 1e-5, 1e-5, NULL));
    assert_true(moe_test_allclose_f32("cp dv", cdv, dv, T * HK * D, 1e-5, 1e-5, NULL));
    free(q);
    free(k);
    free(v);
    free(dout);
    free(rf.ws);
    free(rf.lse);
    moe_k_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_causal_gqa),        cmocka_unit_test(test_mla_dims),
        cmocka_unit_test(test_non_causal),        cmocka_unit_test(test_offsets_and_empty_rows),
        cmocka_unit_test(test_chunks_match_full),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
