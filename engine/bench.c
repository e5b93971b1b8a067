/*
 * Microbenchmarks (engine/bench.h). Buffers are allocated per benchmark point (benchmarks are not
 * training steps), filled with small exact values, timed after warm-up, and checked against a
 * reference. Collective inputs are small integers times small integers, so every sum is exact in
 * fp32 and a wrong element is a real error, not rounding.
 */
#include "engine/bench.h"

#include "engine/arena.h"
#include "engine/context.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double elapsed_us(double t0, int iters)
{
    return (moe_eng_now() - t0) * 1e6 / (double)(iters > 0 ? iters : 1);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define BENCH_MAX_ITERS 256 /* per-call times kept for a median */

static double median_of(double *x, size_t n)
{
    qsort(x, n, sizeof(*x), cmp_double);
    return n % 2 == 1 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

double moe_bench_median(double *x, size_t n)
{
    return n > 0 ? median_of(x, n) : 0.0;
}

/* Timed calls of one bench point: cfg->iters, at least 1, at most the times a median keeps. */
static int timed_iters(const struct moe_bench_cfg *cfg)
{
    int n = cfg->iters < BENCH_MAX_ITERS ? cfg->iters : BENCH_MAX_ITERS;
    return n > 0 ? n : 1;
}

static void fill(float *x, size_t n, uint64_t seed)
{
    struct moe_eng_rng r;
    moe_eng_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)(moe_eng_rng_uniform(&r) - 0.5);
    }
}

/* ---- GEMM ---------------------------------------------------------------------------------- */

/* One operand set of a GEMM point: a linear's input, weight and output, and its gradients. */
#define GEMM_MAX_SETS 64
struct gemm_set {
    float *x, *dx, *w, *dw, *y;
};

/*
 * A training step runs each linear's three GEMMs (forward y = x w^T, backward data dx = dy w,
 * backward weight dw += dy^T x) on operands it last touched a layer pass earlier: a layer's
 * weights and saved activations are out of the cache by the time they are read. Timing the same
 * operands call after call measures them hot (2026-12-03, this 2-vCPU host, 128 x 256 x 512 fp32
 * per rank, both ranks running: 97-102 GFLOP/s hot, 78-92 cold; the engine's linears ran at
 * 83-85). So the calls cycle the three GEMMs over as many operand sets as fill twice the
 * cache share each rank flushes before a collective (cfg->evict_bytes; 0: one set, hot).
 */
static int gemm_sets(const struct moe_bench_cfg *cfg, size_t set_bytes)
{
    size_t want = 2 * cfg->evict_bytes;
    size_t n = set_bytes > 0 ? (want + set_bytes - 1) / set_bytes : 1;
    return n < 1 ? 1 : n > GEMM_MAX_SETS ? GEMM_MAX_SETS : (int)n;
}

enum moe_status moe_bench_gemm_sets_init(
    struct moe_bench_gemm_sets *s, const struct moe_bench_cfg *cfg, int m, int n, int k_dim)
{
    memset(s, 0, sizeof(*s));
    s->m = m;
    s->n = n;
    s->k = k_dim;
    size_t nx = (size_t)m * (size_t)k_dim, nw = (size_t)k_dim * (size_t)n;
    s->set_floats = 2 * nx + 2 * nw + (size_t)m * (size_t)n;
    s->num_sets = gemm_sets(cfg, s->set_floats * sizeof(float));
    s->buf = moe_eng_heap_alloc(&s->heap, (size_t)s->num_sets * s->set_floats * sizeof(float));
    if (s->buf == NULL) {
        return MOE_ERR_NOMEM;
    }
    fill(s->buf, (size_t)s->num_sets * s->set_floats, 1);
    return MOE_OK;
}

void moe_bench_gemm_sets_fini(struct moe_bench_gemm_sets *s)
{
    if (s->buf != NULL) {
        moe_eng_heap_free(&s->heap, s->buf, (size_t)s->num_sets * s->set_floats * sizeof(float));
    }
    memset(s, 0, sizeof(*s));
}

void moe_bench_gemm_time(const struct moe_k_ops *k,
                         moe_k_ctx_t *kc,
                         const struct moe_bench_cfg *cfg,
                         const struct moe_bench_gemm_sets *s,
                         struct moe_bench_gemm *out)
{
    int m = s->m, n = s->n, k_dim = s->k;
    size_t nx = (size_t)m * (size_t)k_dim, nw = (size_t)k_dim * (size_t)n;
    int num_sets = s->num_sets;
    struct gemm_set sets[GEMM_MAX_SETS];
    for (int i = 0; i < num_sets; i++) {
        float *p = s->buf + (size_t)i * s->set_floats;
        sets[i] = (struct gemm_set){p, p + nx, p + 2 * nx, p + 2 * nx + nw, p + 2 * nx + 2 * nw};
    }
    /* Call i: set i mod num_sets, GEMM i mod 3 (each of the 2mnk FLOPs). */
    double t0 = 0.0;
    for (int i = 0; i < cfg->warmup + cfg->iters; i++) {
        if (i == cfg->warmup) {
            t0 = moe_eng_now();
        }
        const struct gemm_set *g = &sets[(s->first + i) % num_sets];
        switch (i % 3) {
        case 0:
            k->linear_fwd(g->y, g->x, g->w, NULL, m, k_dim, n, kc);
            break;
        case 1:
            k->linear_bwd_data(g->dx, g->y, g->w, m, k_dim, n, false, kc);
            break;
        default:
            k->linear_bwd_weight(g->dw, NULL, g->y, g->x, m, k_dim, n, kc);
            break;
        }
    }
    out->m = m;
    out->n = n;
    out->k = k_dim;
    out->time_us = elapsed_us(t0, cfg->iters);
    out->gflops = 2.0 * m * (double)n * k_dim / (out->time_us * 1e3);
    /* Check the forward on the first set: y[i, j] = sum_p x[i, p] w[j, p]. */
    const struct gemm_set *g = &sets[s->first % num_sets];
    k->linear_fwd(g->y, g->x, g->w, NULL, m, k_dim, n, kc);
    out->is_ok = true;
    for (int q = 0; q < 16; q++) {
        int i = (int)((uint64_t)q * 7919u % (uint64_t)m);
        int j = (int)((uint64_t)q * 104729u % (uint64_t)n);
        double ref = 0.0, mag = 0.0;
        for (int p = 0; p < k_dim; p++) {
            double t = (double)g->x[(size_t)i * (size_t)k_dim + (size_t)p] *
                       (double)g->w[(size_t)j * (size_t)k_dim + (size_t)p];
            ref += t;
            mag += fabs(t);
        }
        out->is_ok = out->is_ok && fabs((double)g->y[(size_t)i * (size_t)n + (size_t)j] - ref) <=
                                       1e-4 * mag + 1e-30;
    }
}

enum moe_status moe_bench_gemm_run(const struct moe_k_ops *k,
                                   moe_k_ctx_t *kc,
                                   const struct moe_bench_cfg *cfg,
                                   int m,
                                   int n,
                                   int k_dim,
                                   struct moe_bench_gemm *out)
{
    struct moe_bench_gemm_sets s;
    enum moe_status st = moe_bench_gemm_sets_init(&s, cfg, m, n, k_dim);
    if (st == MOE_OK) {
        moe_bench_gemm_time(k, kc, cfg, &s, out);
    }
    moe_bench_gemm_sets_fini(&s);
    return st;
}

/* ---- Grouped GEMM ------------------------------------------------------------------------------
 */

static void expert_counts(int *counts, int num, int tokens, bool skewed)
{
    double total = 0.0;
    for (int e = 0; e < num; e++) {
        total += skewed ? 1.0 / (double)(e + 1) : 1.0;
    }
    int used = 0;
    for (int e = 0; e < num; e++) {
        double share = (skewed ? 1.0 / (double)(e + 1) : 1.0) / total;
        counts[e] = (int)floor(share * tokens);
        used += counts[e];
    }
    counts[0] += tokens - used;
}

/* One operand set of a grouped point: the experts' input, weights, output and their gradients. */
struct grouped_set {
    float *x, *w, *y, *dx, *dw;
};

/*
 * As the dense rows (gemm_sets): a step reads an expert's weights and saved rows a layer pass
 * after it last touched them, so the calls cycle over operand sets filling twice the cache share
 * cfg->evict_bytes, and the backward's two GEMMs take the sets after the forward's (timed on the
 * forward's own output they read it hot). Timed hot, the bench had priced the engine's expert
 * GEMMs 12-22% fast (2026-12-04, Intel 2-vCPU host, 2 MiB L2 a core: OpenBLAS at 64-128 rows an
 * expert, 256 wide, ran 16-25% slower L2-cold than hot; validate's expert_gemm -7 to -19% in 19
 * of 20 plans, compute -2%).
 * What the step has just written is hot, though: the forward's input (the permuted rows) and the
 * backward's output gradient (the activation's backward), so each call's set gets that operand
 * rewritten, untimed, right before the call (the weights, the saved rows and the weight gradient
 * stay cold). With every operand cold the presets' miniatures' rows (16 experts, 32-64 wide,
 * where the rows weigh as much as the weights) ran at 50 / 85 / 65 GFLOP/s forward / backward-data
 * / backward-weight at 64 rows an expert where the engine's step ran them at 57 / 109 / 90; so
 * written, 55 / 109 / 99 (2026-12-04, Intel 2-vCPU host). The 256-1024-wide rows moved 0-5%.
 */
enum moe_status moe_bench_grouped_run(const struct moe_k_ops *k,
                                      moe_k_ctx_t *kc,
                                      const struct moe_bench_cfg *cfg,
                                      int num_experts,
                                      int tokens,
                                      int in,
                                      int out,
                                      bool is_skewed,
                                      struct moe_bench_grouped *res)
{
    struct moe_eng_heap heap = {0};
    size_t nx = (size_t)tokens * (size_t)in;
    size_t nw = (size_t)num_experts * (size_t)out * (size_t)in;
    size_t ny = (size_t)tokens * (size_t)out;
    size_t set_floats = 2 * nx + 2 * nw + ny;
    int num_sets = gemm_sets(cfg, set_floats * sizeof(float));
    size_t buf_bytes = (size_t)num_sets * set_floats * sizeof(float);
    float *buf = moe_eng_heap_alloc(&heap, buf_bytes);
    float *ref = moe_eng_heap_alloc(&heap, ny * sizeof(float));
    float *fresh = moe_eng_heap_alloc(&heap, (nx + ny) * sizeof(float));
    int *counts = moe_eng_heap_alloc(&heap, (size_t)num_experts * sizeof(int));
    if (buf == NULL || ref == NULL || fresh == NULL || counts == NULL) {
        moe_eng_heap_free(&heap, buf, buf_bytes);
        moe_eng_heap_free(&heap, ref, ny * sizeof(float));
        moe_eng_heap_free(&heap, fresh, (nx + ny) * sizeof(float));
        moe_eng_heap_free(&heap, counts, (size_t)num_experts * sizeof(int));
        return MOE_ERR_NOMEM;
    }
    struct grouped_set sets[GEMM_MAX_SETS];
    for (int i = 0; i < num_sets; i++) {
        float *p = buf + (size_t)i * set_floats;
        sets[i] =
            (struct grouped_set){p, p + nx, p + nx + nw, p + nx + nw + ny, p + 2 * nx + nw + ny};
        if (i == 0) {
            fill(sets[0].x, nx, 3);
            fill(sets[0].w, nw, 4);
            fill(sets[0].y, ny, 5); /* the backward's output gradient */
            memset(sets[0].dx, 0, nx * sizeof(float));
            memset(sets[0].dw, 0, nw * sizeof(float));
        } else { /* copies of the first (filling each from the generator costs seconds a point) */
            memcpy(p, buf, set_floats * sizeof(float));
        }
    }
    memcpy(fresh, sets[0].x, nx * sizeof(float));
    memcpy(fresh + nx, sets[0].y, ny * sizeof(float));
    expert_counts(counts, num_experts, tokens, is_skewed);
    /* The forward and the backward's two GEMMs in turn, as a step calls them (a forward's output
     * standing in for the output gradient), each call timed on its own. Their shapes differ
     * (backward-weight reduces over each expert's rows and accumulates into a weight-sized
     * gradient) and so do their rates: on the 2-vCPU Intel host (2026-12-03) the engine's
     * backward-weight took 0.52-0.86 x the forward's time, backward-data 0.52-0.99 x, depending on
     * the widths, where the model had priced all three at the forward's rate. */
    double t[3] = {0.0, 0.0, 0.0};
    for (int i = -cfg->warmup; i < cfg->iters; i++) {
        int c = 3 * (i + cfg->warmup);
        const struct grouped_set *f = &sets[c % num_sets];
        const struct grouped_set *d = &sets[(c + 1) % num_sets];
        const struct grouped_set *g = &sets[(c + 2) % num_sets];
        memcpy(f->x, fresh, nx * sizeof(float));
        double t0 = moe_eng_now();
        k->grouped_linear_fwd(f->y, f->x, f->w, counts, NULL, num_experts, in, out, kc);
        double t1 = moe_eng_now();
        memcpy(d->y, fresh + nx, ny * sizeof(float));
        double t2 = moe_eng_now();
        k->grouped_linear_bwd_data(d->dx, d->y, d->w, counts, NULL, num_experts, in, out, false,
                                   kc);
        double t3 = moe_eng_now();
        memcpy(g->y, fresh + nx, ny * sizeof(float));
        double t4 = moe_eng_now();
        k->grouped_linear_bwd_weight(g->dw, g->y, g->x, counts, NULL, num_experts, in, out, kc);
        double t5 = moe_eng_now();
        if (i >= 0) {
            t[0] += t1 - t0;
            t[1] += t3 - t2;
            t[2] += t5 - t4;
        }
    }
    res->time_us = t[0] * 1e6 / cfg->iters;
    res->dgrad_time_us = t[1] * 1e6 / cfg->iters;
    res->wgrad_time_us = t[2] * 1e6 / cfg->iters;
    /* One linear with the same FLOPs: all rows against the first expert's weights, over the
     * same sets. */
    for (int i = 0; i < cfg->warmup; i++) {
        const struct grouped_set *f = &sets[i % num_sets];
        k->linear_fwd(f->y, f->x, f->w, NULL, tokens, in, out, kc);
    }
    double t0 = moe_eng_now();
    for (int i = 0; i < cfg->iters; i++) {
        const struct grouped_set *f = &sets[(cfg->warmup + i) % num_sets];
        k->linear_fwd(f->y, f->x, f->w, NULL, tokens, in, out, kc);
    }
    double dense_us = elapsed_us(t0, cfg->iters);
    double flops = 2.0 * tokens * (double)in * out;
    res->num_experts = num_experts;
    res->tokens = tokens;
    res->in = in;
    res->out = out;
    res->is_skewed = is_skewed;
    res->gflops = flops / (res->time_us * 1e3);
    res->dense_gflops = flops / (dense_us * 1e3);
    res->ratio = res->gflops / res->dense_gflops;
    res->num_sets = num_sets;
    /* Check: each expert's rows equal a plain linear on that slice (the first set's operands). */
    const struct grouped_set *f = &sets[0];
    k->grouped_linear_fwd(f->y, f->x, f->w, counts, NULL, num_experts, in, out, kc);
    size_t off = 0;
    for (int e = 0; e < num_experts; e++) {
        if (counts[e] > 0) {
            k->linear_fwd(ref + off * (size_t)out, f->x + off * (size_t)in,
                          f->w + (size_t)e * (size_t)out * (size_t)in, NULL, counts[e], in, out,
                          kc);
        }
        off += (size_t)counts[e];
    }
    res->is_ok = memcmp(ref, f->y, ny * sizeof(float)) == 0;
    moe_eng_heap_free(&heap, buf, buf_bytes);
    moe_eng_heap_free(&heap, ref, ny * sizeof(float));
    moe_eng_heap_free(&heap, fresh, (nx + ny) * sizeof(float));
    moe_eng_heap_free(&heap, counts, (size_t)num_experts * sizeof(int));
    return MOE_OK;
}

/* ---- Memory-bound kernels ------------------------------------------------------------------ */

#define ALIGN_SLACK (2 * MOE_ENG_PAGE_FLOATS) /* two moves per buffer at most */

enum moe_status moe_bench_mem_run(const struct moe_k_ops *k,
                                  moe_k_ctx_t *kc,
                                  const struct moe_bench_cfg *cfg,
                                  const char *name,
                                  size_t bytes,
                                  struct moe_bench_mem *out)
{
    const int C = 1024; /* row width of the row-wise kernels */
    size_t n = bytes / (3 * sizeof(float));
    n = (n + (size_t)C - 1) / (size_t)C * (size_t)C;
    int rows = (int)(n / (size_t)C);
    /* a and b carry ALIGN_SLACK floats more than the kernels use: room to place the optimizer's
     * streams (moe_eng_page_offset_like()). */
    size_t na = 2 * n + ALIGN_SLACK;
    size_t nb = n + ALIGN_SLACK;
    struct moe_eng_heap heap = {0};
    float *a = moe_eng_heap_alloc(&heap, na * sizeof(float));
    float *b = moe_eng_heap_alloc(&heap, nb * sizeof(float));
    float *w = moe_eng_heap_alloc(&heap, (size_t)C * sizeof(float));
    int *pos = moe_eng_heap_alloc(&heap, (size_t)rows * sizeof(int));
    if (a == NULL || b == NULL || w == NULL || pos == NULL) {
        moe_eng_heap_free(&heap, a, na * sizeof(float));
        moe_eng_heap_free(&heap, b, nb * sizeof(float));
        moe_eng_heap_free(&heap, w, (size_t)C * sizeof(float));
        moe_eng_heap_free(&heap, pos, (size_t)rows * sizeof(int));
        return MOE_ERR_NOMEM;
    }
    fill(a, na, 5);
    fill(b, nb, 6);
    for (int i = 0; i < C; i++) {
        w[i] = 1.0f;
    }
    for (int i = 0; i < rows; i++) {
        pos[i] = i;
    }
    int which = -1;
    const char *names[] = {"copy", "axpy", "rmsnorm", "swiglu", "rope", "adamw", "optimizer"};
    /* floats moved per float of n; AdamW updates n/2 parameters: reads weight, m, v and the
     * gradient, writes weight, m and v (7 floats each). "optimizer" is what the engine's step does
     * to n/2 parameters (engine/optimizer.c), and what the cost model counts for it
     * (model/cost.c stage_tail): the gradient's sum of squares (1 float read), AdamW (7), the
     * master copied into the weights (2), the gradients zeroed for the next step (1): 11 floats
     * per parameter. calibrate prices those bytes at AdamW's rate, which follows the engine's
     * phase where this row does not (cli/calibrate.c); the row stays, for comparison. */
    const double moved[] = {2.0, 3.0, 2.0, 1.5, 2.0, 3.5, 5.5};
    for (int i = 0; i < 7; i++) {
        if (strcmp(name, names[i]) == 0) {
            which = i;
        }
    }
    if (which < 0) {
        moe_eng_heap_free(&heap, a, na * sizeof(float));
        moe_eng_heap_free(&heap, b, nb * sizeof(float));
        moe_eng_heap_free(&heap, w, (size_t)C * sizeof(float));
        moe_eng_heap_free(&heap, pos, (size_t)rows * sizeof(int));
        return MOE_ERR_INVALID;
    }
    /* AdamW's streams (master, m, v, gradient; the optimizer's weights): n/2 floats each, all at
     * one offset within a 4 KiB page, as the engine places each bucket's master, m and v at its
     * gradient shard's (engine/model.c bucket_close). How the streams lie moves one host's rate
     * by a third: AdamW over 5.6 M parameters ran 9.4-9.8 GB/s with its streams within 256 bytes
     * of one page offset and 7.1-7.4 GB/s with them 1-3 KiB apart, where the bench had put them
     * (n/2, a multiple of 512 floats, put m and the gradient 2 KiB off the master and v); the
     * bench priced the validate suite's optimizer phase 12-32% slow. */
    size_t np = n / 2;
    float *master = a;
    float *mom = moe_eng_page_offset_like(a + np, a);
    float *wts = moe_eng_page_offset_like(mom + np, a);
    float *var = moe_eng_page_offset_like(b, a);
    float *grad = moe_eng_page_offset_like(var + np, a);
    if (which >= 5) {
        for (size_t i = 0; i < np; i++) {
            var[i] *= var[i]; /* Adam's second moment is never negative */
        }
    }
    if (which == 4) {
        /* RoPE's angle table [rows, 32, 2], made once as the engine makes it (a's second half is
         * free for this kernel), so the timed op is the rotation alone. */
        k->rope_table(a + n, pos, rows, 64, 10000.0f, kc);
    }
    double ss_in = 0.0;
    for (size_t i = 0; i < (size_t)C; i++) {
        ss_in += (double)a[i] * (double)a[i];
    }
    /* Each call timed alone, the median kept (as the attention bench: a few disturbed calls on
     * a shared host moved the mean, and the fitted elementwise efficiency with it). */
    int iters = timed_iters(cfg);
    double tc[BENCH_MAX_ITERS];
    for (int it = -cfg->warmup; it < iters; it++) {
        double t0 = moe_eng_now();
        switch (which) {
        case 0:
            memcpy(b, a, n * sizeof(float));
            break;
        case 1:
            k->axpy(b, a, n, 1e-3f, kc);
            break;
        case 2:
            k->rmsnorm_fwd(b, a + n, a, w, rows, C, 1e-5f, kc);
            break;
        case 3:
            k->swiglu_fwd(b, a, rows, C / 2, kc);
            break;
        case 4:
            k->rope_fwd(b, a, a + n, rows, C / 64, 64, 0, 64, false, kc);
            break;
        case 5:
            k->adamw_step(master, mom, var, grad, np, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f,
                          it + cfg->warmup + 1, kc);
            break;
        default: {
            float ss = 0.0f;
            k->sum_squares(&ss, grad, np, kc);
            k->adamw_step(master, mom, var, grad, np, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f,
                          it + cfg->warmup + 1, kc);
            memcpy(wts, master, np * sizeof(float));
            memset(grad, 0, np * sizeof(float));
            break;
        }
        }
        if (it >= 0) {
            tc[it] = (moe_eng_now() - t0) * 1e6;
        }
    }
    out->name = names[which];
    out->time_us = median_of(tc, (size_t)iters);
    out->bytes = (size_t)(moved[which] * (double)n * sizeof(float));
    out->gbps = (double)out->bytes / (out->time_us * 1e3);
    out->is_ok = true;
    if (which == 0) {
        out->is_ok = memcmp(a, b, n * sizeof(float)) == 0;
    } else if (which == 5) {
        out->is_ok = isfinite(master[0]) && isfinite(master[np - 1]);
    } else if (which == 6) {
        out->is_ok = isfinite(master[0]) && memcmp(wts, master, np * sizeof(float)) == 0 &&
                     grad[0] == 0.0f && grad[np - 1] == 0.0f;
    } else if (which == 2 || which == 4) {
        /* RMSNorm: mean square of a row is 1; RoPE: rotations keep the row's norm. */
        double ss = 0.0;
        for (size_t i = 0; i < (size_t)C; i++) {
            ss += (double)b[i] * (double)b[i];
        }
        double want = which == 2 ? (double)C * ss_in / (ss_in + 1e-5 * C) : ss_in;
        out->is_ok = fabs(ss - want) <= 1e-4 * want;
    }
    moe_eng_heap_free(&heap, a, na * sizeof(float));
    moe_eng_heap_free(&heap, b, nb * sizeof(float));
    moe_eng_heap_free(&heap, w, (size_t)C * sizeof(float));
    moe_eng_heap_free(&heap, pos, (size_t)rows * sizeof(int));
    return MOE_OK;
}

/* ---- The MLP activation at the engine's shapes ------------------------------------------- */

/* Relative error of x against the double-precision reference ref (|ref| floored at 1e-30). */
static double rel_err(float x, double ref)
{
    return fabs((double)x - ref) / fmax(fabs(ref), 1e-30);
}

/* Row 0 of SwiGLU's forward output and backward gradients against the formula in double. */
static bool
act_row_ok(const float *in, const float *out, const float *dy, const float *d_in, int ffn)
{
    bool ok = true;
    for (int j = 0; j < ffn; j++) {
        double g = in[j], u = in[ffn + j], s = 1.0 / (1.0 + exp(-g));
        double silu = g * s;
        ok = ok && rel_err(out[j], silu * u) <= 1e-5 &&
             rel_err(d_in[ffn + j], (double)dy[j] * silu) <= 1e-5 &&
             rel_err(d_in[j], (double)dy[j] * u * (s + silu * (1.0 - s))) <= 1e-5;
    }
    return ok;
}

enum moe_status moe_bench_act_run(const struct moe_k_ops *k,
                                  moe_k_ctx_t *kc,
                                  const struct moe_bench_cfg *cfg,
                                  int ffn,
                                  size_t fwd_bytes,
                                  struct moe_bench_act *out)
{
    if (ffn < 1) {
        return MOE_ERR_INVALID;
    }
    size_t row_bytes = 3 * (size_t)ffn * sizeof(float);
    int rows = (int)((fwd_bytes + row_bytes - 1) / row_bytes);
    size_t n = (size_t)rows * (size_t)ffn;
    struct moe_eng_heap heap = {0};
    float *in = moe_eng_heap_alloc(&heap, 2 * n * sizeof(float));
    float *d_in = moe_eng_heap_alloc(&heap, 2 * n * sizeof(float));
    float *y = moe_eng_heap_alloc(&heap, n * sizeof(float));
    float *dy = moe_eng_heap_alloc(&heap, n * sizeof(float));
    enum moe_status st = MOE_ERR_NOMEM;
    if (in != NULL && d_in != NULL && y != NULL && dy != NULL) {
        fill(in, 2 * n, 11);
        fill(dy, n, 12);
        int iters = timed_iters(cfg);
        double tf[BENCH_MAX_ITERS];
        double tb[BENCH_MAX_ITERS];
        for (int it = -cfg->warmup; it < iters; it++) {
            double t0 = moe_eng_now();
            k->swiglu_fwd(y, in, rows, ffn, kc);
            double t1 = moe_eng_now();
            k->swiglu_bwd(d_in, dy, in, rows, ffn, kc);
            if (it >= 0) {
                tf[it] = (t1 - t0) * 1e6;
                tb[it] = (moe_eng_now() - t1) * 1e6;
            }
        }
        out->fwd_us = median_of(tf, (size_t)iters);
        out->bwd_us = median_of(tb, (size_t)iters);
        out->rows = rows;
        out->ffn = ffn;
        out->fwd_bytes = n * 3 * sizeof(float);
        out->bwd_bytes = n * 5 * sizeof(float);
        out->fwd_gbps = (double)out->fwd_bytes / (out->fwd_us * 1e3);
        out->bwd_gbps = (double)out->bwd_bytes / (out->bwd_us * 1e3);
        out->is_ok = act_row_ok(in, y, dy, d_in, ffn);
        st = MOE_OK;
    }
    moe_eng_heap_free(&heap, in, 2 * n * sizeof(float));
    moe_eng_heap_free(&heap, d_in, 2 * n * sizeof(float));
    moe_eng_heap_free(&heap, y, n * sizeof(float));
    moe_eng_heap_free(&heap, dy, n * sizeof(float));
    return st;
}

/* ---- The routed experts' bias ops ------------------------------------------------------------ */

enum moe_status moe_bench_bias_run(const struct moe_k_ops *k,
                                   moe_k_ctx_t *kc,
                                   const struct moe_bench_cfg *cfg,
                                   int width,
                                   size_t fwd_bytes,
                                   struct moe_bench_act *out)
{
    if (width < 1) {
        return MOE_ERR_INVALID;
    }
    size_t slice_bytes = 2 * (size_t)BENCH_BIAS_EXPERTS * (size_t)width * sizeof(float);
    int per = (int)((fwd_bytes + slice_bytes - 1) / slice_bytes); /* rows per expert */
    size_t slice = (size_t)per * (size_t)width;
    size_t n = slice * BENCH_BIAS_EXPERTS;
    size_t nb = (size_t)width * BENCH_BIAS_EXPERTS;
    struct moe_eng_heap heap = {0};
    float *y = moe_eng_heap_alloc(&heap, n * sizeof(float));
    float *dy = moe_eng_heap_alloc(&heap, n * sizeof(float));
    float *bias = moe_eng_heap_alloc(&heap, nb * sizeof(float));
    float *d_bias = moe_eng_heap_alloc(&heap, nb * sizeof(float));
    enum moe_status st = MOE_ERR_NOMEM;
    if (y != NULL && dy != NULL && bias != NULL && d_bias != NULL) {
        /* Exact in float: small integers, so the check needs no tolerance. */
        for (size_t i = 0; i < nb; i++) {
            bias[i] = (float)(i % 7) - 3.0f;
        }
        for (size_t i = 0; i < n; i++) {
            dy[i] = (float)(i % 5);
        }
        memset(y, 0, n * sizeof(float));
        memset(d_bias, 0, nb * sizeof(float));
        for (int e = 0; e < BENCH_BIAS_EXPERTS; e++) {
            k->bias_fwd(y + (size_t)e * slice, bias + (size_t)e * (size_t)width, per, width, kc);
            k->bias_bwd(d_bias + (size_t)e * (size_t)width, dy + (size_t)e * slice, per, width, kc);
        }
        bool ok = true;
        for (int e = 0; e < BENCH_BIAS_EXPERTS && ok; e++) {
            for (int c = 0; c < width && ok; c++) {
                double sum = 0.0;
                for (int r = 0; r < per; r++) {
                    sum += (double)dy[(size_t)e * slice + (size_t)r * (size_t)width + (size_t)c];
                }
                size_t bi = (size_t)e * (size_t)width + (size_t)c;
                ok = y[(size_t)e * slice + (size_t)(per - 1) * (size_t)width + (size_t)c] ==
                         bias[bi] &&
                     (double)d_bias[bi] == sum;
            }
        }
        int iters = timed_iters(cfg);
        double tf[BENCH_MAX_ITERS];
        double tb[BENCH_MAX_ITERS];
        for (int it = -cfg->warmup; it < iters; it++) {
            double t0 = moe_eng_now();
            for (int e = 0; e < BENCH_BIAS_EXPERTS; e++) {
                k->bias_fwd(y + (size_t)e * slice, bias + (size_t)e * (size_t)width, per, width,
                            kc);
            }
            double t1 = moe_eng_now();
            for (int e = 0; e < BENCH_BIAS_EXPERTS; e++) {
                k->bias_bwd(d_bias + (size_t)e * (size_t)width, dy + (size_t)e * slice, per, width,
                            kc);
            }
            if (it >= 0) {
                tf[it] = (t1 - t0) * 1e6;
                tb[it] = (moe_eng_now() - t1) * 1e6;
            }
        }
        out->fwd_us = median_of(tf, (size_t)iters);
        out->bwd_us = median_of(tb, (size_t)iters);
        out->rows = per * BENCH_BIAS_EXPERTS;
        out->ffn = width;
        out->fwd_bytes = 2 * n * sizeof(float);
        out->bwd_bytes = n * sizeof(float);
        out->fwd_gbps = (double)out->fwd_bytes / (out->fwd_us * 1e3);
        out->bwd_gbps = (double)out->bwd_bytes / (out->bwd_us * 1e3);
        out->is_ok = ok;
        st = MOE_OK;
    }
    moe_eng_heap_free(&heap, y, n * sizeof(float));
    moe_eng_heap_free(&heap, dy, n * sizeof(float));
    moe_eng_heap_free(&heap, bias, nb * sizeof(float));
    moe_eng_heap_free(&heap, d_bias, nb * sizeof(float));
    return st;
}

/* ---- Attention ------------------------------------------------------------------------- */

struct attn_bufs {
    float *q, *k, *v, *o, *lse, *dq, *dk, *dv, *dout;
    void *ws;
    size_t nq, nkv, nl, ws_bytes;
};

static void attn_free(struct moe_eng_heap *h, struct attn_bufs *b)
{
    moe_eng_heap_free(h, b->q, b->nq * sizeof(float));
    moe_eng_heap_free(h, b->o, b->nq * sizeof(float));
    moe_eng_heap_free(h, b->dq, b->nq * sizeof(float));
    moe_eng_heap_free(h, b->dout, b->nq * sizeof(float));
    moe_eng_heap_free(h, b->k, b->nkv * sizeof(float));
    moe_eng_heap_free(h, b->v, b->nkv * sizeof(float));
    moe_eng_heap_free(h, b->dk, b->nkv * sizeof(float));
    moe_eng_heap_free(h, b->dv, b->nkv * sizeof(float));
    moe_eng_heap_free(h, b->lse, b->nl * sizeof(float));
    moe_eng_heap_free(h, b->ws, b->ws_bytes);
}

/* The last query of head 0 of sequence 0 (it sees every key) against softmax(q k^T s) v in
 * double. Layout: q[B, T, Hq, D], k and v [B, T, Hkv, D]. */
static bool attn_row_ok(
    const struct attn_bufs *b, int seq, int heads, int kv_heads, int d, int window, float scale_f)
{
    double scale = (double)scale_f;
    int first = window > 0 && window < seq ? seq - window : 0; /* the last row's visible keys */
    const float *q = b->q + (size_t)(seq - 1) * (size_t)heads * (size_t)d;
    const float *o = b->o + (size_t)(seq - 1) * (size_t)heads * (size_t)d;
    double mx = -1e300;
    for (int j = first; j < seq; j++) {
        const float *kj = b->k + (size_t)j * (size_t)kv_heads * (size_t)d;
        double s = 0.0;
        for (int c = 0; c < d; c++) {
            s += (double)q[c] * (double)kj[c];
        }
        mx = fmax(mx, s * scale);
    }
    double z = 0.0;
    bool ok = true;
    for (int pass = 0; pass < 2; pass++) {
        for (int c = 0; c < d && pass == 1; c++) {
            double acc = 0.0;
            for (int j = first; j < seq; j++) {
                const float *kj = b->k + (size_t)j * (size_t)kv_heads * (size_t)d;
                const float *vj = b->v + (size_t)j * (size_t)kv_heads * (size_t)d;
                double s = 0.0;
                for (int t = 0; t < d; t++) {
                    s += (double)q[t] * (double)kj[t];
                }
                acc += exp(s * scale - mx) * (double)vj[c];
            }
            ok = ok && fabs((double)o[c] - acc / z) <= 1e-4 * (fabs(acc / z) + 1e-3);
        }
        for (int j = first; j < seq && pass == 0; j++) {
            const float *kj = b->k + (size_t)j * (size_t)kv_heads * (size_t)d;
            double s = 0.0;
            for (int t = 0; t < d; t++) {
                s += (double)q[t] * (double)kj[t];
            }
            z += exp(s * scale - mx);
        }
    }
    return ok;
}

enum moe_status moe_bench_attention_run(const struct moe_k_ops *k,
                                        moe_k_ctx_t *kc,
                                        const struct moe_bench_cfg *cfg,
                                        int batch,
                                        int seq,
                                        int heads,
                                        int kv_heads,
                                        int head_dim,
                                        int window,
                                        struct moe_bench_attention *out)
{
    struct moe_eng_heap heap = {0};
    struct attn_bufs b = {0};
    b.nq = (size_t)batch * (size_t)seq * (size_t)heads * (size_t)head_dim;
    b.nkv = (size_t)batch * (size_t)seq * (size_t)kv_heads * (size_t)head_dim;
    b.nl = (size_t)batch * (size_t)heads * (size_t)seq;
    b.ws_bytes = k->attention_workspace_bytes(seq, seq, kc);
    b.q = moe_eng_heap_alloc(&heap, b.nq * sizeof(float));
    b.o = moe_eng_heap_alloc(&heap, b.nq * sizeof(float));
    b.dq = moe_eng_heap_alloc(&heap, b.nq * sizeof(float));
    b.dout = moe_eng_heap_alloc(&heap, b.nq * sizeof(float));
    b.k = moe_eng_heap_alloc(&heap, b.nkv * sizeof(float));
    b.v = moe_eng_heap_alloc(&heap, b.nkv * sizeof(float));
    b.dk = moe_eng_heap_alloc(&heap, b.nkv * sizeof(float));
    b.dv = moe_eng_heap_alloc(&heap, b.nkv * sizeof(float));
    b.lse = moe_eng_heap_alloc(&heap, b.nl * sizeof(float));
    b.ws = moe_eng_heap_alloc(&heap, b.ws_bytes);
    if (b.q == NULL || b.o == NULL || b.dq == NULL || b.dout == NULL || b.k == NULL ||
        b.v == NULL || b.dk == NULL || b.dv == NULL || b.lse == NULL || b.ws == NULL) {
        attn_free(&heap, &b);
        return MOE_ERR_NOMEM;
    }
    fill(b.q, b.nq, 7);
    fill(b.k, b.nkv, 8);
    fill(b.v, b.nkv, 9);
    fill(b.dout, b.nq, 10);
    float scale = 1.0f / sqrtf((float)head_dim);
    /* Each call timed alone and the median kept: a call here is 0.1-100 ms, and on a shared
     * host a few disturbed calls moved the mean by up to 70% between runs minutes apart (the
     * calibrated narrow-head term with it); the engine's steady calls are the median's. */
    int n = timed_iters(cfg);
    double tf[BENCH_MAX_ITERS];
    double tb[BENCH_MAX_ITERS];
    for (int it = -cfg->warmup; it < n; it++) {
        double t0 = moe_eng_now();
        if (window > 0) {
            k->attention_window_sink_fwd(b.o, b.lse, b.q, b.k, b.v, NULL, batch, seq, seq, heads,
                                         kv_heads, head_dim, head_dim, 0, 0, window, scale, b.ws,
                                         b.ws_bytes, kc);
        } else {
            k->attention_fwd(b.o, b.lse, b.q, b.k, b.v, batch, seq, seq, heads, kv_heads, head_dim,
                             head_dim, 0, 0, scale, true, b.ws, b.ws_bytes, kc);
        }
        double t1 = moe_eng_now();
        if (window > 0) {
            k->attention_window_sink_bwd(b.dq, b.dk, b.dv, NULL, b.dout, b.q, b.k, b.v, b.o, b.lse,
                                         NULL, batch, seq, seq, heads, kv_heads, head_dim, head_dim,
                                         0, 0, window, scale, false, b.ws, b.ws_bytes, kc);
        } else {
            k->attention_bwd(b.dq, b.dk, b.dv, b.dout, b.q, b.k, b.v, b.o, b.lse, batch, seq, seq,
                             heads, kv_heads, head_dim, head_dim, 0, 0, scale, true, false, b.ws,
                             b.ws_bytes, kc);
        }
        if (it >= 0) {
            tf[it] = (t1 - t0) * 1e6;
            tb[it] = (moe_eng_now() - t1) * 1e6;
        }
    }
    out->fwd_us = median_of(tf, (size_t)n);
    out->bwd_us = median_of(tb, (size_t)n);
    double keys = window > 0 ? fmin(window, seq / 2.0) : seq / 2.0; /* as the model counts */
    double flops = 4.0 * batch * (double)heads * seq * keys * head_dim;
    out->batch = batch;
    out->window = window;
    out->seq = seq;
    out->heads = heads;
    out->kv_heads = kv_heads;
    out->head_dim = head_dim;
    out->fwd_gflops = flops / (out->fwd_us * 1e3);
    out->bwd_gflops = 2.5 * flops / (out->bwd_us * 1e3);
    out->is_ok = attn_row_ok(&b, seq, heads, kv_heads, head_dim, window, scale);
    attn_free(&heap, &b);
    return MOE_OK;
}

/* ---- Quantisers -------------------------------------------------------------------------- */

enum moe_status moe_bench_quant_run(const struct moe_k_ops *k,
                                    moe_k_ctx_t *kc,
                                    const struct moe_bench_cfg *cfg,
                                    int rows,
                                    int cols,
                                    enum moe_k_qformat format,
                                    enum moe_k_qrecipe recipe,
                                    struct moe_bench_quant *out)
{
    if (!moe_k_qdq_supported(format, recipe)) {
        return MOE_ERR_UNSUPPORTED;
    }
    struct moe_eng_heap heap = {0};
    size_t n = (size_t)rows * (size_t)cols;
    float *x = moe_eng_heap_alloc(&heap, n * sizeof(float));
    float *y = moe_eng_heap_alloc(&heap, n * sizeof(float));
    if (x == NULL || y == NULL) {
        moe_eng_heap_free(&heap, x, n * sizeof(float));
        moe_eng_heap_free(&heap, y, n * sizeof(float));
        return MOE_ERR_NOMEM;
    }
    fill(x, n, 11);
    double t0 = 0.0;
    for (int it = -cfg->warmup; it < cfg->iters; it++) {
        if (it == 0) {
            t0 = moe_eng_now();
        }
        k->qdq(y, x, rows, cols, format, recipe, kc);
    }
    out->format = format;
    out->recipe = recipe;
    out->rows = rows;
    out->cols = cols;
    out->elements = (double)n;
    out->time_us = elapsed_us(t0, cfg->iters);
    out->gbps = 8.0 * (double)n / (out->time_us * 1e3);
    /* Inputs lie in [-0.5, 0.5): every recipe keeps an element within a quarter of that. */
    out->is_ok = true;
    for (size_t i = 0; i < n && out->is_ok; i++) {
        out->is_ok = isfinite(y[i]) && fabs((double)y[i] - (double)x[i]) <= 0.125;
    }
    moe_eng_heap_free(&heap, x, n * sizeof(float));
    moe_eng_heap_free(&heap, y, n * sizeof(float));
    return MOE_OK;
}

/* ---- Collectives ----------------------------------------------------------------------------- */

const char *moe_bench_coll_name(enum moe_bench_coll c)
{
    static const char names[MOE_BENCH_NUM_COLLS][16] = {"allreduce", "allgather", "reducescatter",
                                                        "alltoall", "sendrecv"};
    return (int)c >= 0 && c < MOE_BENCH_NUM_COLLS ? names[c] : "?";
}

double moe_bench_busbw_factor(enum moe_bench_coll c, int n)
{
    double f = n > 0 ? (double)(n - 1) / (double)n : 0.0;
    switch (c) {
    case MOE_BENCH_ALLREDUCE:
        return 2.0 * f;
    case MOE_BENCH_SENDRECV:
        return 1.0;
    case MOE_BENCH_ALLGATHER:
    case MOE_BENCH_REDUCESCATTER:
    case MOE_BENCH_ALLTOALL:
    case MOE_BENCH_NUM_COLLS:
        break;
    }
    return f;
}

/* Send-buffer floats per rank and receive-buffer floats for op at nccl-tests size `bytes`. */
static void coll_counts(
    enum moe_bench_coll op, size_t bytes, int n, size_t *count, size_t *send_n, size_t *recv_n)
{
    size_t f = bytes / sizeof(float);
    size_t per = f / (size_t)n;
    switch (op) {
    case MOE_BENCH_ALLREDUCE:
    case MOE_BENCH_SENDRECV:
        *count = f > 0 ? f : 1;
        *send_n = *recv_n = *count;
        return;
    case MOE_BENCH_ALLGATHER:
        *count = per > 0 ? per : 1;
        *send_n = *count;
        *recv_n = *count * (size_t)n;
        return;
    case MOE_BENCH_REDUCESCATTER:
        *count = per > 0 ? per : 1;
        *send_n = *count * (size_t)n;
        *recv_n = *count;
        return;
    case MOE_BENCH_ALLTOALL:
    case MOE_BENCH_NUM_COLLS:
        break;
    }
    *count = per > 0 ? per : 1; /* per peer */
    *send_n = *recv_n = *count * (size_t)n;
}

static void coll_fill(enum moe_bench_coll op, float *x, size_t n, size_t count, int rank, int size)
{
    for (size_t i = 0; i < n; i++) {
        switch (op) {
        case MOE_BENCH_ALLREDUCE:
        case MOE_BENCH_REDUCESCATTER:
            x[i] = (float)((rank + 1) * (int)(i % 7 + 1));
            break;
        case MOE_BENCH_ALLGATHER:
        case MOE_BENCH_SENDRECV:
            x[i] = (float)(rank * 1000 + (int)(i % 100));
            break;
        case MOE_BENCH_ALLTOALL:
        case MOE_BENCH_NUM_COLLS:
            x[i] = (float)(rank * 100 + (int)(i / count) + (int)(i % 13) * 10000);
            break;
        }
    }
    (void)size;
}

static long
coll_check(enum moe_bench_coll op, const float *y, size_t n, size_t count, int rank, int size)
{
    long wrong = 0;
    int tri = size * (size + 1) / 2;
    int prev = (rank + size - 1) % size;
    for (size_t i = 0; i < n; i++) {
        float want = 0.0f;
        switch (op) {
        case MOE_BENCH_ALLREDUCE:
            want = (float)(tri * (int)(i % 7 + 1));
            break;
        case MOE_BENCH_REDUCESCATTER:
            want = (float)(tri * (int)(((size_t)rank * count + i) % 7 + 1));
            break;
        case MOE_BENCH_ALLGATHER:
            want = (float)((int)(i / count) * 1000 + (int)(i % count % 100));
            break;
        case MOE_BENCH_SENDRECV:
            want = (float)(prev * 1000 + (int)(i % 100));
            break;
        case MOE_BENCH_ALLTOALL:
        case MOE_BENCH_NUM_COLLS:
            want = (float)((int)(i / count) * 100 + rank +
                           (int)((rank * count + i % count) % 13) * 10000);
            break;
        }
        wrong += y[i] != want;
    }
    return wrong;
}

static void coll_once(moe_comm_t *g,
                      enum moe_bench_coll op,
                      const float *x,
                      float *y,
                      size_t count,
                      int *cnt,
                      int *dsp)
{
    int rank = moe_comm_rank(g), n = moe_comm_size(g);
    switch (op) {
    case MOE_BENCH_ALLREDUCE:
        moe_comm_allreduce(g, x, y, count, MOE_COMM_F32, MOE_COMM_SUM);
        return;
    case MOE_BENCH_ALLGATHER:
        moe_comm_allgather(g, x, y, count, MOE_COMM_F32);
        return;
    case MOE_BENCH_REDUCESCATTER:
        moe_comm_reducescatter(g, x, y, count, MOE_COMM_F32, MOE_COMM_SUM);
        return;
    case MOE_BENCH_ALLTOALL:
        moe_comm_alltoallv(g, x, cnt, dsp, y, cnt, dsp, MOE_COMM_F32);
        return;
    case MOE_BENCH_SENDRECV:
    case MOE_BENCH_NUM_COLLS:
        break;
    }
    struct moe_comm_req rs = {0}, rr = {0};
    moe_comm_irecv(g, y, count, MOE_COMM_F32, (rank + n - 1) % n, 11, &rr);
    moe_comm_isend(g, x, count, MOE_COMM_F32, (rank + 1) % n, 11, &rs);
    moe_comm_wait(g, &rr);
    moe_comm_wait(g, &rs);
}

/* The median time of one call as a step runs it (moe_bench_coll_result.step_us); collective
 * over g. Without memory for the streamed buffer, the calls run with hot caches. */
static double coll_step_us(moe_comm_t *g,
                           const struct moe_bench_cfg *cfg,
                           enum moe_bench_coll op,
                           float *x,
                           float *y,
                           size_t count,
                           size_t sn,
                           int *cnt,
                           int *dsp)
{
    int rank = moe_comm_rank(g), n = moe_comm_size(g);
    struct moe_eng_heap heap = {0};
    size_t ev_n = cfg->evict_bytes / sizeof(float);
    float *ev = ev_n > 0 ? moe_eng_heap_alloc(&heap, ev_n * sizeof(float)) : NULL;
    if (ev != NULL) {
        memset(ev, 0, ev_n * sizeof(float));
    }
    int calls = timed_iters(cfg);
    double times[BENCH_MAX_ITERS];
    for (int i = 0; i < calls; i++) {
        for (size_t j = 0; ev != NULL && j < ev_n; j += 16) { /* one float per 64-byte line */
            ev[j] += 1.0f;
        }
        coll_fill(op, x, sn, count, rank, n);
        moe_comm_barrier(g);
        double t0 = moe_eng_now();
        coll_once(g, op, x, y, count, cnt, dsp);
        times[i] = (moe_eng_now() - t0) * 1e6;
    }
    moe_comm_allreduce(g, times, times, (size_t)calls, MOE_COMM_F64, MOE_COMM_MAX);
    moe_eng_heap_free(&heap, ev, ev_n * sizeof(float));
    return median_of(times, (size_t)calls);
}

enum moe_status moe_bench_coll_run(moe_comm_t *g,
                                   const struct moe_bench_cfg *cfg,
                                   enum moe_bench_coll op,
                                   size_t bytes,
                                   struct moe_bench_coll_result *out)
{
    int n = moe_comm_size(g), rank = moe_comm_rank(g);
    size_t count = 0, sn = 0, rn = 0;
    coll_counts(op, bytes, n, &count, &sn, &rn);
    struct moe_eng_heap heap = {0};
    float *x = moe_eng_heap_alloc(&heap, sn * sizeof(float));
    float *y = moe_eng_heap_alloc(&heap, rn * sizeof(float));
    int *cnt = moe_eng_heap_alloc(&heap, 2 * (size_t)n * sizeof(int));
    int mine = x != NULL && y != NULL && cnt != NULL;
    int ok = mine;
    moe_comm_allreduce(g, &ok, &ok, 1, MOE_COMM_I32, MOE_COMM_SUM); /* every rank agrees */
    if (ok != n || !mine) {
        moe_eng_heap_free(&heap, x, sn * sizeof(float));
        moe_eng_heap_free(&heap, y, rn * sizeof(float));
        moe_eng_heap_free(&heap, cnt, 2 * (size_t)n * sizeof(int));
        return MOE_ERR_NOMEM;
    }
    int *dsp = cnt + n;
    for (int i = 0; i < n; i++) {
        cnt[i] = (int)count;
        dsp[i] = (int)((size_t)i * count);
    }
    coll_fill(op, x, sn, count, rank, n);
    for (int i = 0; i < cfg->warmup; i++) {
        coll_once(g, op, x, y, count, cnt, dsp);
    }
    moe_comm_barrier(g);
    double t0 = moe_eng_now();
    for (int i = 0; i < cfg->iters; i++) {
        coll_once(g, op, x, y, count, cnt, dsp);
    }
    double us = elapsed_us(t0, cfg->iters);
    long wrong = coll_check(op, y, rn, count, rank, n);
    out->step_us = coll_step_us(g, cfg, op, x, y, count, sn, cnt, dsp);
    wrong += coll_check(op, y, rn, count, rank, n);
    moe_comm_allreduce(g, &us, &us, 1, MOE_COMM_F64, MOE_COMM_MAX);
    double w = (double)wrong;
    moe_comm_allreduce(g, &w, &w, 1, MOE_COMM_F64, MOE_COMM_SUM);
    out->op = op;
    out->group_size = n;
    out->count = count;
    out->bytes = op == MOE_BENCH_ALLREDUCE || op == MOE_BENCH_SENDRECV
                     ? count * sizeof(float)
                     : count * (size_t)n * sizeof(float);
    out->time_us = us;
    out->algbw_gbps = (double)out->bytes / (us * 1e3);
    out->busbw_gbps = out->algbw_gbps * moe_bench_busbw_factor(op, n);
    out->wrong = (long)w;
    moe_eng_heap_free(&heap, x, sn * sizeof(float));
    moe_eng_heap_free(&heap, y, rn * sizeof(float));
    moe_eng_heap_free(&heap, cnt, 2 * (size_t)n * sizeof(int));
    return MOE_OK;
}
