/*
 * Tests for attention (kernels/cpu/attention.c): forward and log-sum-exp against a naive double
 * implementation (causal GQA; MLA-like different qk/v head dims; non-causal); a context-parallel
 * query chunk with a global offset equals the matching rows of full attention; rows that see no
 * key give 0 and -Inf; backward (dq, dk, dv) against central finite differences; dk/dv
 * accumulated over two query chunks equal the full-sequence gradients. Sliding window with sinks
 * (attention_window_sink_fwd/bwd): forward and lse against the naive double reference with the
 * window mask and the sinks in the denominator (windows shorter and longer than the sequence,
 * offsets), dq/dk/dv and d_sinks against finite differences, a context-parallel chunk with a
 * window equal to the full rows, and with window 0 and no sinks the very bits of attention_fwd.
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
    int window;         /* window_sink op: 0 none */
    const float *sinks; /* window_sink op: [hq] or NULL */
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
                    vis = vis && (a->window == 0 || a->k0 + j > a->q0 + i - a->window);
                    double s = 0.0;
                    for (int d = 0; d < a->dqk; d++) {
                        s += (double)qi[d] * (double)kj[d];
                    }
                    p[j] = vis ? s * (double)a->scale : -(double)INFINITY;
                    max = fmax(max, p[j]);
                }
                double sink = a->sinks != NULL ? (double)a->sinks[h] : -(double)INFINITY;
                max = fmax(max, sink);
                double z = isinf(sink) ? 0.0 : exp(sink - max);
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
    bool is_ws; /* through attention_window_sink_fwd/bwd */
};

static void fwd_sinks(const struct attn_run *r,
                      float *out,
                      const float *q,
                      const float *k,
                      const float *v,
                      const float *sk)
{
    const struct attn *a = &r->a;
    if (r->is_ws) {
        r->ops->attention_window_sink_fwd(out, r->lse, q, k, v, sk, a->b, a->tq, a->tk, a->hq,
                                          a->hkv, a->dqk, a->dv, a->q0, a->k0, a->window, a->scale,
                                          r->ws, r->ws_bytes, r->ctx);
        return;
    }
    r->ops->attention_fwd(out, r->lse, q, k, v, a->b, a->tq, a->tk, a->hq, a->hkv, a->dqk, a->dv,
                          a->q0, a->k0, a->scale, a->causal, r->ws, r->ws_bytes, r->ctx);
}

static void
fwd(const struct attn_run *r, float *out, const float *q, const float *k, const float *v)
{
    fwd_sinks(r, out, q, k, v, r->a.sinks);
}

static void bwd(const struct attn_run *r,
                float *dq,
                float *dk,
                float *dv,
                float *dsk,
                const float *dout,
                const float *out)
{
    const struct attn *a = &r->a;
    if (r->is_ws) {
        r->ops->attention_window_sink_bwd(dq, dk, dv, dsk, dout, r->q, r->k, r->v, out, r->lse,
                                          a->sinks, a->b, a->tq, a->tk, a->hq, a->hkv, a->dqk,
                                          a->dv, a->q0, a->k0, a->window, a->scale, false, r->ws,
                                          r->ws_bytes, r->ctx);
        return;
    }
    r->ops->attention_bwd(dq, dk, dv, dout, r->q, r->k, r->v, out, r->lse, a->b, a->tq, a->tk,
                          a->hq, a->hkv, a->dqk, a->dv, a->q0, a->k0, a->scale, a->causal, false,
                          r->ws, r->ws_bytes, r->ctx);
}

static void fwd_s(const float *sk, float *y, void *u)
{
    struct attn_run *r = u;
    fwd_sinks(r, y, r->q, r->k, r->v, sk);
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

static void check_case_ws(struct attn a, uint64_t seed, bool check_grads, bool is_ws)
{
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    struct attn_run r = make_run(ctx, a);
    r.is_ws = is_ws;
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
        float *dsk = ktest_floats((size_t)a.hq);
        bwd(&r, dq, dk, dv, dsk, dout, out);
        if (a.sinks != NULL) {
            assert_true(ktest_fd_check("attn d_sinks", fwd_s, &r, a.sinks, (size_t)a.hq, no(&a),
                                       dout, dsk, 1e-3, 1e-3, 1e-2));
        }
        free(dsk);
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

static void check_case(struct attn a, uint64_t seed, bool check_grads)
{
    check_case_ws(a, seed, check_grads, false);
}

static void test_causal_gqa(void **state)
{
    (void)state;
    struct attn a = {2, 5, 5, 4, 2, 6, 6, 0, 0, 0.40824829f, true, 0, NULL}; /* 1/sqrt(6) */
    check_case(a, 1, true);
}

static void test_mla_dims(void **state)
{
    (void)state;
    struct attn a = {1, 4, 4, 2, 2, 5, 3, 0, 0, 0.5f, true, 0, NULL}; /* qk dim 5, v dim 3 */
    check_case(a, 2, true);
}

static void test_non_causal(void **state)
{
    (void)state;
    struct attn a = {1, 3, 4, 2, 1, 4, 4, 0, 0, 0.5f, false, 0, NULL};
    check_case(a, 3, true);
}

static void test_offsets_and_empty_rows(void **state)
{
    (void)state;
    /* K/V range starts at position 2: query rows 0 and 1 see nothing. */
    struct attn a = {1, 4, 3, 2, 2, 4, 4, 0, 2, 0.5f, true, 0, NULL};
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
    struct attn full = {1, T, T, H, HK, D, D, 0, 0, 0.5f, true, 0, NULL};
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
        struct attn a = {1, lens[c], T, H, HK, D, D, starts[c], 0, 0.5f, true, 0, NULL};
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

/* ---- Sliding window and sinks ------------------------------------------------------------- */

static const float sinks4[4] = {0.3f, -1.2f, 2.0f, 0.0f};

static void test_window_sinks(void **state)
{
    (void)state;
    /* window 3 of 7 keys (tiles of 3 query rows), GQA 4/2, sinks that outweigh some rows */
    struct attn a = {2, 7, 7, 4, 2, 6, 6, 0, 0, 0.40824829f, true, 3, sinks4};
    check_case_ws(a, 11, true, true);
    /* window 2, no sinks; MLA-like head dims */
    struct attn b = {1, 6, 6, 2, 2, 5, 3, 0, 0, 0.5f, true, 2, NULL};
    check_case_ws(b, 12, true, true);
    /* sinks, no window (GPT-OSS's full-attention layers) */
    struct attn c = {1, 5, 5, 4, 1, 4, 4, 0, 0, 0.5f, true, 0, sinks4};
    check_case_ws(c, 13, true, true);
    /* a window longer than the sequence is no window */
    struct attn d = {1, 5, 5, 2, 2, 4, 4, 0, 0, 0.5f, true, 9, sinks4};
    check_case_ws(d, 14, true, true);
    /* a query chunk at position 4 against keys from position 2, window 3 (keys before the window
     * and the first rows' empty ranges) */
    struct attn e = {1, 4, 6, 2, 2, 4, 4, 4, 2, 0.5f, true, 3, sinks4};
    check_case_ws(e, 15, true, true);
}

/* Window 0 and no sinks: attention_window_sink_* are attention_fwd/bwd bit for bit. */
static void test_window_sink_zero_is_plain(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 21);
    struct attn a = {2, 6, 6, 4, 2, 8, 8, 0, 0, 0.35355339f, true, 0, NULL};
    struct attn_run r = make_run(ctx, a);
    struct attn_run rw = make_run(ctx, a);
    rw.is_ws = true;
    float *q = ktest_random(&rng, nq(&a), -1, 1), *k = ktest_random(&rng, nk(&a), -1, 1);
    float *v = ktest_random(&rng, nv(&a), -1, 1), *dout = ktest_random(&rng, no(&a), -1, 1);
    r.q = rw.q = q;
    r.k = rw.k = k;
    r.v = rw.v = v;
    float *o1 = ktest_floats(no(&a)), *o2 = ktest_floats(no(&a));
    fwd(&r, o1, q, k, v);
    fwd(&rw, o2, q, k, v);
    assert_memory_equal(o1, o2, no(&a) * sizeof(float));
    assert_memory_equal(r.lse, rw.lse, (size_t)a.b * a.hq * a.tq * sizeof(float));
    float *g1[3] = {ktest_floats(nq(&a)), ktest_floats(nk(&a)), ktest_floats(nv(&a))};
    float *g2[3] = {ktest_floats(nq(&a)), ktest_floats(nk(&a)), ktest_floats(nv(&a))};
    bwd(&r, g1[0], g1[1], g1[2], NULL, dout, o1);
    bwd(&rw, g2[0], g2[1], g2[2], NULL, dout, o2);
    assert_memory_equal(g1[0], g2[0], nq(&a) * sizeof(float));
    assert_memory_equal(g1[1], g2[1], nk(&a) * sizeof(float));
    assert_memory_equal(g1[2], g2[2], nv(&a) * sizeof(float));
    for (int i = 0; i < 3; i++) {
        free(g1[i]);
        free(g2[i]);
    }
    free(q);
    free(k);
    free(v);
    free(dout);
    free(o1);
    free(o2);
    free(r.ws);
    free(r.lse);
    free(rw.ws);
    free(rw.lse);
    moe_k_ctx_destroy(ctx);
}

/* Context parallel with a window and sinks: two query chunks against the whole K/V equal the rows
 * of the full call; dk/dv/d_sinks accumulated over the chunks equal the full gradients. */
static void test_window_chunks_match_full(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 22);
    enum { T = 9, H = 2, HK = 1, D = 4, SPLIT = 4, W = 3 };
    const float sk[H] = {0.5f, -0.5f};
    float *q = ktest_random(&rng, T * H * D, -1, 1), *k = ktest_random(&rng, T * HK * D, -1, 1);
    float *v = ktest_random(&rng, T * HK * D, -1, 1), *dout = ktest_random(&rng, T * H * D, -1, 1);
    size_t ws_bytes = ops->attention_workspace_bytes(T, T, ctx);
    void *ws = ktest_alloc(ws_bytes);
    float out[T * H * D], lse[H * T], dq[T * H * D], dk[T * HK * D], dv[T * HK * D], ds[H] = {0};
    ops->attention_window_sink_fwd(out, lse, q, k, v, sk, 1, T, T, H, HK, D, D, 0, 0, W, 0.5f, ws,
                                   ws_bytes, ctx);
    ops->attention_window_sink_bwd(dq, dk, dv, ds, dout, q, k, v, out, lse, sk, 1, T, T, H, HK, D,
                                   D, 0, 0, W, 0.5f, false, ws, ws_bytes, ctx);
    float cout[T * H * D], clse[H * T], cdq[T * H * D], cdk[T * HK * D], cdv[T * HK * D];
    float cds[H] = {0};
    float chunk_lse[H * T];
    const int starts[2] = {0, SPLIT}, lens[2] = {SPLIT, T - SPLIT};
    for (int c = 0; c < 2; c++) {
        size_t off = (size_t)starts[c] * H * D;
        ops->attention_window_sink_fwd(cout + off, chunk_lse, q + off, k, v, sk, 1, lens[c], T, H,
                                       HK, D, D, starts[c], 0, W, 0.5f, ws, ws_bytes, ctx);
        for (int h = 0; h < H; h++) {
            memcpy(clse + h * T + starts[c], chunk_lse + h * lens[c], sizeof(float) * lens[c]);
        }
        ops->attention_window_sink_bwd(cdq + off, cdk, cdv, cds, dout + off, q + off, k, v,
                                       cout + off, chunk_lse, sk, 1, lens[c], T, H, HK, D, D,
                                       starts[c], 0, W, 0.5f, c > 0, ws, ws_bytes, ctx);
    }
    assert_true(moe_test_allclose_f32("cp window out", cout, out, T * H * D, 1e-6, 1e-6, NULL));
    assert_true(moe_test_allclose_f32("cp window lse", clse, lse, H * T, 1e-6, 1e-6, NULL));
    assert_true(moe_test_allclose_f32("cp window dq", cdq, dq, T * H * D, 1e-5, 1e-5, NULL));
    assert_true(moe_test_allclose_f32("cp window dk", cdk, dk, T * HK * D, 1e-5, 1e-5, NULL));
    assert_true(moe_test_allclose_f32("cp window dv", cdv, dv, T * HK * D, 1e-5, 1e-5, NULL));
    assert_true(moe_test_allclose_f32("cp window d_sinks", cds, ds, H, 1e-5, 1e-5, NULL));
    free(q);
    free(k);
    free(v);
    free(dout);
    free(ws);
    moe_k_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_causal_gqa),
        cmocka_unit_test(test_mla_dims),
        cmocka_unit_test(test_non_causal),
        cmocka_unit_test(test_offsets_and_empty_rows),
        cmocka_unit_test(test_chunks_match_full),
        cmocka_unit_test(test_window_sinks),
        cmocka_unit_test(test_window_sink_zero_is_plain),
        cmocka_unit_test(test_window_chunks_match_full),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
