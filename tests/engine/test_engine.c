/*
 * Engine on one rank: the loss falls on the synthetic corpus and on byte-level text; runs are
 * bit-reproducible from the seed; a step allocates nothing; every parameter tensor's gradient
 * matches central finite differences of the loss (directional, in double, on a tiny model with both
 * router kinds, aux and z losses); recompute (each selective module, full uniform and block) and
 * activation offload change memory but leave gradients bit-identical; a checkpoint resumes
 * bit-identically, and a bit-flipped, truncated or version-1 checkpoint file is refused; a NaN is
 * caught and named; large but finite values (activations whose fp32 sum overflows, a gradient whose
 * square does) train on, on the CPU and on the emulated device, with the gradient norm summed in
 * double and clipped as usual, while a non-finite gradient is named; the engine's memory by
 * category agrees with the cost model's prediction (weights/grads/optimizer within 1%, activations
 * within 20% -- the engine keeps router scores, logits and routing maps the model does not count);
 * bad inputs fail with clear errors; moefold-train's command line exits 0 / 1 / 2 as documented.
 *
 * Finite differences: f(w + h d) - f(w - h d) over 2h along the gradient direction and along a
 * random unit direction d of each tensor, at h and h/2, compared with the engine's g.d itself; the
 * tolerance comes from the step (the two quotients' difference bounds the truncation error) and
 * the fp32 forward's rounding (check_direction). Along the gradient it is at most 2% of g.d, and
 * along at least a third of the random directions at most 5% (random directions of small-gradient
 * tensors have a g.d too close to the loss's rounding to check more sharply in fp32).
 * The architectures of the presets' miniatures (q/k norm, biases, sliding window with sinks, GELU,
 * MLA with and without the query latent, MTP tied and untied) are checked by fd_check_derived,
 * the same idea along four directions per tensor (the gradient, a random one, the gradient on each
 * half of the tensor) with scaled-up attention projections, so the query-key path matters.
 */
#include "engine/internal.h" /* moe_eng_optimizer_step: the gradient-norm tests */
#include "model/memory.h"
#include "tests/engine/eng_test.h"
#include "tests/test_util.h"
#include "topologies/json_util.h"
#include "topologies/run_file.h"

#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
/* cmocka.h needs setjmp.h, stdarg.h, stddef.h and stdint.h first. */
#include <cmocka.h>

static const struct eng_test_layout one_rank = {"1 rank", 1, 1, 1, 1, 1, 1, false, 1};

struct fixture {
    moe_comm_t *world;
    moe_eng_t *e;
};

static void make(struct fixture *f, const struct moe_plan *plan, const struct moe_eng_run_opts *o)
{
    assert_int_equal(moe_comm_mpi_create(MPI_COMM_SELF, "world", &f->world), MOE_OK);
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    enum moe_status st = moe_eng_create(plan, o, f->world, &f->e, &diag);
    if (st != MOE_OK) {
        print_error("create: %s\n", diag.message);
    }
    assert_int_equal(st, MOE_OK);
}

static void release(struct fixture *f)
{
    moe_eng_destroy(f->e);
    moe_comm_destroy(f->world);
    f->e = NULL;
    f->world = NULL;
}

static double step(struct fixture *f)
{
    struct moe_eng_step_result r;
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    enum moe_status st = moe_eng_train_step(f->e, &r, &diag);
    if (st != MOE_OK) {
        print_error("step: %s\n", diag.message);
    }
    assert_int_equal(st, MOE_OK);
    return r.loss;
}

/* ---- Training ------------------------------------------------------------------------------- */

static void test_loss_falls_synthetic(void **state)
{
    (void)state;
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-moe", &one_rank);
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 30);
    struct fixture f;
    make(&f, &plan, &o);
    double first = step(&f);
    double last = first;
    for (int i = 1; i < 30; i++) {
        last = step(&f);
    }
    release(&f);
    /* ln(256) = 5.55 at the start; the corpus has 0.92 nats/token of entropy. */
    assert_true(first > 5.3 && first < 5.8);
    assert_true(last < first - 1.5);
}

static void test_loss_falls_text(void **state)
{
    (void)state;
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-dsv3", &one_rank);
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 25);
    o.data_kind = MOE_ENG_DATA_TEXT; /* default corpus: /usr/share/common-licenses */
    struct fixture f;
    make(&f, &plan, &o);
    double first = step(&f);
    double last = first;
    for (int i = 1; i < 25; i++) {
        last = step(&f);
    }
    release(&f);
    assert_true(last < first - 1.0); /* byte frequencies alone take it from 5.5 to ~3.4 */
}

static void run_losses(const char *model, uint64_t seed, int steps, double *out)
{
    struct moe_plan plan;
    eng_test_plan(&plan, model, &one_rank);
    struct moe_eng_run_opts o;
    eng_test_opts(&o, steps);
    o.seed = seed;
    assert_int_equal(eng_test_losses(MPI_COMM_SELF, &plan, &o, out), MOE_OK);
}

static void test_bit_reproducible(void **state)
{
    (void)state;
    double a[4], b[4], c[4];
    run_losses("tiny-dsv3", 7, 4, a);
    run_losses("tiny-dsv3", 7, 4, b);
    run_losses("tiny-dsv3", 8, 4, c);
    assert_memory_equal(a, b, sizeof(a));
    assert_memory_not_equal(a, c, sizeof(a));
}

static void test_no_allocation_in_steps(void **state)
{
    (void)state;
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-moe", &one_rank);
    plan.options.recompute = MOE_RECOMPUTE_SELECTIVE;
    plan.options.recompute_modules = MOE_RC_CORE_ATTN | MOE_RC_MOE;
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 3);
    struct fixture f;
    make(&f, &plan, &o);
    size_t before = moe_eng_num_allocs(f.e);
    for (int i = 0; i < 3; i++) {
        (void)step(&f);
    }
    assert_int_equal(moe_eng_num_allocs(f.e), before);
    release(&f);
}

/* ---- Gradients vs finite differences ----------------------------------------------------------
 */

/* 2 layers (dense, MoE with shared expert), C 16, 2/1 heads of 8, 4 experts top-2, T 8. */
static void fd_plan(struct moe_plan *plan, bool sigmoid)
{
    moe_plan_init(plan);
    struct moe_model_cfg *m = &plan->model;
    (void)snprintf(m->name, sizeof(m->name), "fd-%s", sigmoid ? "sigmoid" : "softmax");
    m->num_layers = 2;
    m->hidden_size = 16;
    m->ffn_hidden_size = 32;
    m->num_attention_heads = 2;
    m->num_query_groups = 1;
    m->kv_channels = 8;
    m->is_swiglu = true;
    m->is_untied_embeddings = !sigmoid; /* the sigmoid model also checks tied embeddings */
    m->vocab_size = 32;
    m->make_vocab_size_divisible_by = 1;
    m->seq_length = 8;
    m->num_experts = 4;
    m->moe_ffn_hidden_size = 8;
    m->moe_router_topk = 2;
    m->moe_shared_expert_intermediate_size = 8;
    if (sigmoid) {
        m->router_score = MOE_ROUTER_SIGMOID;
        m->has_router_expert_bias = true;
        m->moe_router_num_groups = 2;
        m->moe_router_group_topk = 1;
    }
    moe_cfg_set_first_dense(m, 1);
    plan->layout.num_gpus = 1;
    plan->layout.mbs = 1;
    plan->layout.gbs = 2;
    plan->layout.seq_length = 8;
}

static double loss_at(moe_eng_t *e)
{
    double l = 0.0;
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_eng_compute_grads(e, &l, &diag), MOE_OK);
    return l;
}

/* (f(w + h d) - f(w - h d)) / 2h for parameter v; restores the weights w0. */
static double central_difference(
    moe_eng_t *e, const struct moe_eng_param_view *v, const float *w0, const double *dir, double h)
{
    double l[2];
    for (int s = 0; s < 2; s++) {
        double sign = s == 0 ? 1.0 : -1.0;
        for (size_t i = 0; i < v->numel; i++) {
            v->weight[i] = (float)((double)w0[i] + sign * h * dir[i]);
        }
        l[s] = loss_at(e);
    }
    memcpy(v->weight, w0, v->numel * sizeof(float));
    return (l[0] - l[1]) / (2.0 * h);
}

/* A unit direction: the gradient's (k == 0) or a random one (k == 1); returns g.d. */
static double
unit_direction(const double *g, size_t n, int k, struct moe_test_rng *rng, double *dir)
{
    double dn = 0.0;
    for (size_t i = 0; i < n; i++) {
        dir[i] = k == 0 ? g[i] : moe_test_rng_uniform(rng) - 0.5;
        dn += dir[i] * dir[i];
    }
    dn = sqrt(dn);
    double gd = 0.0;
    for (size_t i = 0; i < n; i++) {
        dir[i] /= dn;
        gd += g[i] * dir[i];
    }
    return gd;
}

/*
 * The engine's g.d against central differences D(h) and D(h/2) of the loss L along d. Tolerance:
 * truncation, |D(h) - D(h/2)| (three times D(h/2)'s O(h^2) error), plus rounding: the fp32
 * forward's loss carries about u |L| of rounding (u = 2^-24; the loss differences seen at steps
 * too small to move it stay below that), so a difference over 2 (h/2) is off by up to
 * 2 u |L| / h. The step starts as the smallest of 1e-2 .. 0.5 that keeps rounding under 1% of
 * |g.d|, and is divided by 4 (down to 1e-3) while D(h) and D(h/2) differ by more than 5%: the loss
 * is only piecewise smooth (a token's top-k choice flips within the step), which shows as
 * difference quotients that disagree, whatever the gradient. Returns the tolerance over |g.d| (how
 * sharp the check was); fails when |D(h/2) - g.d| exceeds the tolerance.
 */
static double check_direction(struct fixture *f,
                              struct moe_eng_param_view *v,
                              const float *w0,
                              const double *dir,
                              double gd,
                              double loss,
                              const char *what)
{
    const double u = 0x1p-24;
    double h = 200.0 * u * fabs(loss) / fabs(gd);
    h = h < 1e-2 ? 1e-2 : (h > 0.5 ? 0.5 : h); /* 2 u |L| / h <= 1% of |g.d| where it can */
    double d1 = central_difference(f->e, v, w0, dir, h);
    double d2 = central_difference(f->e, v, w0, dir, h / 2.0);
    while (fabs(d1 - d2) > 0.05 * fabs(d2) && h > 1e-3) {
        h /= 4.0;
        d1 = central_difference(f->e, v, w0, dir, h);
        d2 = central_difference(f->e, v, w0, dir, h / 2.0);
    }
    double tol = fabs(d1 - d2) + 2.0 * u * fabs(loss) / h;
    if (fabs(d2 - gd) > tol) {
        print_error("%s (%s direction, h %.3g): g.d %+.6e, D(h) %+.6e, D(h/2) %+.6e, tolerance "
                    "%.2e\n",
                    v->name, what, h, gd, d1, d2, tol);
    }
    assert_true(fabs(d2 - gd) <= tol);
    return tol / fabs(gd);
}

static void fd_check(bool sigmoid)
{
    struct moe_plan plan;
    fd_plan(&plan, sigmoid);
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 1);
    o.aux_loss_coeff = 1e-2f;
    o.z_loss_coeff = 1e-2f;
    struct fixture f;
    make(&f, &plan, &o);
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 42);
    int np = moe_eng_num_params(f.e);
    int checked = 0;
    int sharp = 0;
    double worst_grad = 0.0;
    for (int p = 0; p < np; p++) {
        struct moe_eng_param_view v;
        moe_eng_param(f.e, p, &v);
        size_t n = v.numel;
        double loss = loss_at(f.e);
        double *g = malloc(n * sizeof(double));
        double *dir = malloc(2 * n * sizeof(double));
        float *w0 = malloc(n * sizeof(float));
        assert_non_null(g);
        assert_non_null(dir);
        assert_non_null(w0);
        memcpy(w0, v.weight, n * sizeof(float));
        double gn = 0.0;
        for (size_t i = 0; i < n; i++) {
            g[i] = v.grad[i];
            gn += g[i] * g[i];
        }
        assert_true(gn > 0.0);
        double gd[2];
        for (int k = 0; k < 2; k++) {
            gd[k] = unit_direction(g, n, k, &rng, dir + (size_t)k * n);
        }
        double r0 = check_direction(&f, &v, w0, dir, gd[0], loss, "gradient");
        double r1 = check_direction(&f, &v, w0, dir + n, gd[1], loss, "random");
        worst_grad = r0 > worst_grad ? r0 : worst_grad;
        sharp += r1 <= 0.05;
        checked += 2;
        free(g);
        free(dir);
        free(w0);
    }
    release(&f);
    printf(
        "  %d checks; along the gradient the tolerance is at most %.2f%% of g.d; %d of %d random "
        "directions within 5%%\n",
        checked, 100.0 * worst_grad, sharp, checked / 2);
    assert_true(checked >= 2 * 16);  /* every tensor of both layers, embedding and head */
    assert_true(worst_grad <= 0.02); /* a gradient 2% off fails along its own direction */
    /* And at least half the random directions are checked within 5% of g.d: not vacuous. Their
     * sharpness is the host's rounding and the router's top-k flips inside the step (routing and
     * embedding directions: 16-18%): on 2026-12-02's AMD EPYC VM 11 of 18 (two thirds, the
     * earlier bound, failed there), on the earlier hosts 12 or more. */
    assert_true(4 * sharp >= checked);
}

static void test_fd_gradients_softmax(void **state)
{
    (void)state;
    fd_check(false);
}

static void test_fd_gradients_sigmoid_grouped_tied(void **state)
{
    (void)state;
    fd_check(true);
}

/*
 * Finite differences with a tolerance derived from the step and the float error, for the
 * architectures of the presets' miniatures. Per tensor and direction d (the gradient's, then a
 * random one), with g.d the engine's directional derivative:
 *   D(h) = (L(w + h d) - L(w - h d)) / 2h has truncation error c h^2 + O(h^4) and round-off at
 *   most 2 nu / 2h, where nu bounds the error of one fp32 evaluation of L;
 *   nu = 4 u |L| with u = 2^-24: the loss is a double sum of fp32 token losses, each a few fp32
 *   operations (logit GEMM, max, sum of exponentials, log) on values of the loss's size, so its
 *   error is a few units in the last place of L (measured differences sit well inside it);
 *   D(h) - D(h/2) = 3 c h^2 / 4 + round-off, so the truncation of D(h/2), c h^2 / 4, is at most
 *   |D(h) - D(h/2)| / 3 plus round-off.
 * Pass: |D(h/2) - g.d| <= |D(h) - D(h/2)| + 6 nu / h (the truncation bound with a 3x margin and
 * the round-off of both differences; with h = 5e-3, 6 nu / h is 1e-3). The tolerance must also be
 * tight where fp32 can resolve the gradient well: at most 2% of |g| for every tensor with |g| >=
 * 0.05, so a wrong term of that size fails; the test prints the largest ratio (FD_VERBOSE=1 prints
 * every comparison). Tensors with smaller gradients are checked to the absolute tolerance.
 */
static double
loss_along(moe_eng_t *e, struct moe_eng_param_view *v, const float *w0, const double *dir, double h)
{
    for (size_t i = 0; i < v->numel; i++) {
        v->weight[i] = (float)((double)w0[i] + h * dir[i]);
    }
    double l = loss_at(e);
    memcpy(v->weight, w0, v->numel * sizeof(float));
    return l;
}

static void fd_check_derived(const struct moe_plan *plan, int min_tensors)
{
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 1);
    o.aux_loss_coeff = 1e-2f;
    struct fixture f;
    make(&f, plan, &o);
    /* Megatron's init (std 0.02) leaves attention nearly uniform, where the query-key path's
     * gradients are a tiny share of the total; scaled-up projections (std 0.16) make the scores
     * matter, so an error there shows. */
    for (int p = 0; p < moe_eng_num_params(f.e); p++) {
        struct moe_eng_param_view v;
        moe_eng_param(f.e, p, &v);
        bool proj = strstr(v.name, "qkv") != NULL || strstr(v.name, "q_") != NULL ||
                    strstr(v.name, "kv_") != NULL;
        if (proj && strstr(v.name, "norm") == NULL && strstr(v.name, "bias") == NULL) {
            for (size_t i = 0; i < v.numel; i++) {
                v.weight[i] *= 8.0f;
            }
        }
    }
    const double h = 5e-3;
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 7);
    int checked = 0;
    double worst = 0.0;
    for (int p = 0; p < moe_eng_num_params(f.e); p++) {
        struct moe_eng_param_view v;
        moe_eng_param(f.e, p, &v);
        size_t n = v.numel;
        double l0 = loss_at(f.e);
        double *g = malloc(n * sizeof(double));
        double *dir = malloc(n * sizeof(double));
        float *w0 = malloc(n * sizeof(float));
        assert_true(g != NULL && dir != NULL && w0 != NULL);
        memcpy(w0, v.weight, n * sizeof(float));
        double gn = 0.0;
        for (size_t i = 0; i < n; i++) {
            g[i] = v.grad[i];
            gn += g[i] * g[i];
        }
        gn = sqrt(gn);
        for (int k = 0; k < 4; k++) {
            /* the gradient; a random direction; the gradient on each half of the tensor (an
             * error confined to some rows is a larger share of a half's gradient) */
            double dn = 0.0, gd = 0.0;
            for (size_t i = 0; i < n; i++) {
                bool in_half = k == 2 ? i < n / 2 : i >= n / 2;
                dir[i] = k == 0
                             ? g[i]
                             : (k == 1 ? moe_test_rng_uniform(&rng) - 0.5 : (in_half ? g[i] : 0.0));
                dn += dir[i] * dir[i];
            }
            if (dn == 0.0) {
                continue; /* a one-element tensor's empty half */
            }
            for (size_t i = 0; i < n; i++) {
                dir[i] /= sqrt(dn);
                gd += g[i] * dir[i];
            }
            double d1 =
                (loss_along(f.e, &v, w0, dir, h) - loss_along(f.e, &v, w0, dir, -h)) / (2.0 * h);
            double d2 =
                (loss_along(f.e, &v, w0, dir, h / 2) - loss_along(f.e, &v, w0, dir, -h / 2)) / h;
            double nu = 4.0 * 0x1.0p-24 * fabs(l0);
            double tol = fabs(d1 - d2) + 6.0 * nu / h;
            double err = fabs(d2 - gd);
            if (gn >= 0.05 && k == 0) {
                worst = fmax(worst, tol / gn);
            }
            if (getenv("FD_VERBOSE") != NULL) {
                printf("    %-24s k%d |g| %.2e g.d %+.3e err %.1e tol %.1e nu %.1e\n", v.name, k,
                       gn, gd, err, tol, nu);
            }
            if (err > tol || gn == 0.0) {
                const char *kind[4] = {"gradient", "random", "first-half gradient",
                                       "second-half gradient"};
                print_error("%s (%s direction): g.d %+.8e, D(h/2) %+.8e, D(h) %+.8e, tolerance "
                            "%.2e (nu %.1e), |g| %.3e\n",
                            v.name, kind[k], gd, d2, d1, tol, nu, gn);
            }
            assert_true(gn > 0.0);
            assert_true(err <= tol);
            checked++;
        }
        free(g);
        free(dir);
        free(w0);
    }
    printf("  %-28s %d directional derivatives, largest tolerance %.1e of |g| (|g| >= 0.05)\n",
           plan->model.name, checked, worst);
    release(&f);
    assert_true(checked >= 2 * min_tensors);
    assert_true(worst < 2e-2); /* tight: a 2% error in any well-resolved gradient fails */
}

/* The fd model with the architecture options of the presets' miniatures. Every token takes all 4
 * experts (top-4 of 4): the loss is then a smooth function of every weight (a top-k selection
 * that flips under a perturbation is a jump no finite difference can follow), while the router
 * still gets its gradient through the combine weights. */
static void fd_arch_plan(struct moe_plan *plan, const char *name)
{
    fd_plan(plan, false);
    struct moe_model_cfg *m = &plan->model;
    (void)snprintf(m->name, sizeof(m->name), "fd-%s", name);
    m->moe_router_topk = m->num_experts;
}

static void test_fd_qknorm_bias_window_sinks(void **state)
{
    (void)state;
    struct moe_plan plan;
    fd_arch_plan(&plan, "qknorm-bias-window-sinks");
    plan.model.has_qk_layernorm = true;
    plan.model.has_linear_bias = true;
    plan.model.has_attention_sinks = true;
    plan.model.window_size = 3;
    plan.model.layer_flags[0] |= MOE_LAYER_WINDOWED; /* layer 0 windowed, layer 1 full */
    fd_check_derived(&plan, 24);
}

static void test_fd_gelu_bias(void **state)
{
    (void)state;
    struct moe_plan plan;
    fd_arch_plan(&plan, "gelu-bias");
    plan.model.is_swiglu = false;
    plan.model.has_linear_bias = true;
    fd_check_derived(&plan, 20);
}

/* One MTP layer (MoE, like the last decoder layer) with untied and with tied embeddings. */
static void test_fd_mtp(void **state)
{
    (void)state;
    for (int tied = 0; tied < 2; tied++) {
        struct moe_plan plan;
        fd_arch_plan(&plan, tied ? "mtp-tied" : "mtp");
        plan.model.mtp_num_layers = 1;
        plan.model.is_untied_embeddings = !tied;
        fd_check_derived(&plan, 24);
    }
}

static void test_fd_mla(void **state)
{
    (void)state;
    for (int q_lora = 0; q_lora <= 12; q_lora += 12) {
        struct moe_plan plan;
        fd_arch_plan(&plan, q_lora > 0 ? "mla" : "mla-no-q-latent");
        struct moe_model_cfg *m = &plan.model;
        m->is_mla = true;
        m->num_query_groups = m->num_attention_heads;
        m->q_lora_rank = q_lora;
        m->kv_lora_rank = 8;
        m->qk_head_dim = 4;
        m->qk_pos_emb_head_dim = 4;
        m->v_head_dim = 6;
        fd_check_derived(&plan, q_lora > 0 ? 22 : 20);
    }
}

/* ---- Recompute and offload ---------------------------------------------------------------------
 */

/* Gradients of every parameter after one compute_grads, concatenated. */
static float *
grads_of(const struct moe_plan *plan, size_t *n_out, double *act_bytes, double *host_bytes)
{
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 1);
    struct fixture f;
    make(&f, plan, &o);
    (void)loss_at(f.e);
    size_t n = 0;
    for (int p = 0; p < moe_eng_num_params(f.e); p++) {
        struct moe_eng_param_view v;
        moe_eng_param(f.e, p, &v);
        n += v.numel;
    }
    float *all = malloc(n * sizeof(float));
    assert_non_null(all);
    size_t off = 0;
    for (int p = 0; p < moe_eng_num_params(f.e); p++) {
        struct moe_eng_param_view v;
        moe_eng_param(f.e, p, &v);
        memcpy(all + off, v.grad, v.numel * sizeof(float));
        off += v.numel;
    }
    struct moe_eng_mem_report m;
    moe_eng_memory(f.e, &m);
    *act_bytes = m.activations;
    *host_bytes = m.host_offload;
    release(&f);
    *n_out = n;
    return all;
}

static void test_recompute_offload_bit_identical(void **state)
{
    (void)state;
    struct moe_plan base;
    eng_test_plan(&base, "tiny-moe", &one_rank);
    base.options.moe_grouped_gemm = true;
    size_t n0 = 0;
    double act0 = 0.0, host0 = 0.0;
    float *g0 = grads_of(&base, &n0, &act0, &host0);
    struct {
        const char *name;
        enum moe_recompute_granularity g;
        enum moe_recompute_method method;
        int num_layers;
        unsigned modules;
        unsigned offload;
        int offload_layers;
    } cases[] = {
        {"core_attn", MOE_RECOMPUTE_SELECTIVE, 0, 0, MOE_RC_CORE_ATTN, 0, 0},
        {"moe_act", MOE_RECOMPUTE_SELECTIVE, 0, 0, MOE_RC_MOE_ACT, 0, 0},
        {"layernorm", MOE_RECOMPUTE_SELECTIVE, 0, 0, MOE_RC_LAYERNORM, 0, 0},
        {"mlp", MOE_RECOMPUTE_SELECTIVE, 0, 0, MOE_RC_MLP, 0, 0},
        {"moe", MOE_RECOMPUTE_SELECTIVE, 0, 0, MOE_RC_MOE, 0, 0},
        {"shared_experts", MOE_RECOMPUTE_SELECTIVE, 0, 0, MOE_RC_SHARED_EXPERTS, 0, 0},
        {"full uniform 2", MOE_RECOMPUTE_FULL, MOE_RECOMPUTE_UNIFORM, 2, 0, 0, 0},
        {"full block 1", MOE_RECOMPUTE_FULL, MOE_RECOMPUTE_BLOCK, 1, 0, 0, 0},
        {"offload all modules", MOE_RECOMPUTE_NONE, 0, 0, 0, MOE_OFF_ALL, 0},
        {"offload 2 layers", MOE_RECOMPUTE_NONE, 0, 0, 0, 0, 2},
    };
    for (size_t i = 0; i < MOE_ARRAY_LEN(cases); i++) {
        struct moe_plan p = base;
        p.options.recompute = cases[i].g;
        p.options.recompute_method = cases[i].method;
        p.options.recompute_num_layers = cases[i].num_layers;
        p.options.recompute_modules = cases[i].modules;
        p.options.fine_grained_offload = cases[i].offload != 0;
        p.options.offload_modules = cases[i].offload;
        p.options.cpu_offloading_num_layers = cases[i].offload_layers;
        size_t n = 0;
        double act = 0.0, host = 0.0;
        float *g = grads_of(&p, &n, &act, &host);
        printf("  %-20s activations %8.0f B (none: %8.0f), host pool %8.0f B\n", cases[i].name, act,
               act0, host);
        assert_int_equal(n, n0);
        assert_memory_equal(g, g0, n * sizeof(float));
        assert_true(act < act0);
        if (cases[i].offload != 0 || cases[i].offload_layers != 0) {
            assert_true(host > 0.0);
        }
        free(g);
    }
    free(g0);
}

/* ---- Checkpoints ----------------------------------------------------------------------------- */

static void checkpoint_resume(const char *model);

static void test_checkpoint_resume(void **state)
{
    (void)state;
    checkpoint_resume("tiny-dsv3");
    checkpoint_resume("tiny-deepseek-v3");  /* MLA, MTP */
    checkpoint_resume("tiny-gpt-oss-120b"); /* biases, sinks, windows */
}

static void checkpoint_resume(const char *model)
{
    struct moe_plan plan;
    eng_test_plan(&plan, model, &one_rank);
    plan.options.use_distributed_optimizer = true;
    double straight[4];
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 4);
    assert_int_equal(eng_test_losses(MPI_COMM_SELF, &plan, &o, straight), MOE_OK);
    char dir[128];
    (void)snprintf(dir, sizeof(dir), "/tmp/moefold-ckpt-%ld", (long)getpid());
    struct fixture f;
    make(&f, &plan, &o);
    double resumed[4];
    resumed[0] = step(&f);
    resumed[1] = step(&f);
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_eng_save(f.e, dir, &diag), MOE_OK);
    release(&f);
    o.load_dir = dir;
    make(&f, &plan, &o);
    resumed[2] = step(&f);
    resumed[3] = step(&f);
    release(&f);
    assert_memory_equal(resumed, straight, sizeof(straight));
    /* A checkpoint of another layout is refused with a message. */
    struct moe_plan other = plan;
    other.layout.gbs = 16;
    moe_comm_t *w = NULL;
    assert_int_equal(moe_comm_mpi_create(MPI_COMM_SELF, "w", &w), MOE_OK);
    moe_eng_t *e = NULL;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_eng_create(&other, &o, w, &e, &diag), MOE_ERR_INVALID);
    assert_non_null(strstr(diag.message, "another model or layout"));
    moe_comm_destroy(w);
    char cmd[256];
    (void)snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* Load status (and message) of a checkpoint folder for plan (a fresh engine, then destroyed). */
static enum moe_status try_load(const struct moe_plan *plan, const char *dir, char *msg, size_t len)
{
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 1);
    o.load_dir = dir;
    moe_comm_t *w = NULL;
    assert_int_equal(moe_comm_mpi_create(MPI_COMM_SELF, "w", &w), MOE_OK);
    moe_eng_t *e = NULL;
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    enum moe_status st = moe_eng_create(plan, &o, w, &e, &diag);
    (void)snprintf(msg, len, "%s", diag.message);
    moe_eng_destroy(e);
    moe_comm_destroy(w);
    return st;
}

static void write_bytes(const char *path, const char *buf, size_t len)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(buf, 1, len, fp), len);
    assert_int_equal(fclose(fp), 0);
}

/*
 * Checkpoint integrity (engine/checkpoint.c: FNV-1a 64 over the file but its checksum field): a
 * flipped bit anywhere in the payload or the header, or a truncated file, is refused naming the
 * file ("checksum mismatch (corrupt or truncated)"); a version-1 file (no checksum) is refused with
 * its version; the intact file loads.
 */
static void test_checkpoint_integrity(void **state)
{
    (void)state;
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-moe", &one_rank);
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 1);
    char dir[128], file[256];
    (void)snprintf(dir, sizeof(dir), "/tmp/moefold-ckpt-crc-%ld", (long)getpid());
    (void)snprintf(file, sizeof(file), "%s/step_000001/rank_00000.ckpt", dir);
    struct fixture f;
    make(&f, &plan, &o);
    (void)step(&f);
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_eng_save(f.e, dir, &diag), MOE_OK);
    release(&f);
    char *orig = NULL;
    size_t len = 0;
    assert_int_equal(moe_file_read_all(file, &orig, &len, &diag), MOE_OK);
    assert_true(len > 4096);
    char *bad = malloc(len);
    assert_non_null(bad);
    char msg[512];
    /* Bytes 100 and len/2 (payload), 40 (the data position in the header), the last byte. */
    const size_t flips[] = {100, len / 2, 40, len - 1};
    for (size_t i = 0; i < MOE_ARRAY_LEN(flips); i++) {
        memcpy(bad, orig, len);
        bad[flips[i]] = (char)(bad[flips[i]] ^ 0x10);
        write_bytes(file, bad, len);
        assert_int_equal(try_load(&plan, dir, msg, sizeof(msg)), MOE_ERR_IO);
        assert_non_null(strstr(msg, "checksum mismatch (corrupt or truncated)"));
        assert_non_null(strstr(msg, file));
    }
    /* Truncated: by one float, and to less than the header. */
    write_bytes(file, orig, len - 4);
    assert_int_equal(try_load(&plan, dir, msg, sizeof(msg)), MOE_ERR_IO);
    assert_non_null(strstr(msg, "checksum mismatch (corrupt or truncated)"));
    write_bytes(file, orig, 50);
    assert_int_equal(try_load(&plan, dir, msg, sizeof(msg)), MOE_ERR_IO);
    assert_non_null(strstr(msg, "checksum mismatch (corrupt or truncated)"));
    /* An old (version 1) file: refused with its version. */
    memcpy(bad, orig, len);
    bad[8] = 1; /* version, little-endian uint32 at byte 8 */
    write_bytes(file, bad, len);
    assert_int_equal(try_load(&plan, dir, msg, sizeof(msg)), MOE_ERR_IO);
    assert_non_null(strstr(msg, "checkpoint version 1 (no checksum)"));
    /* Intact again: loads. */
    write_bytes(file, orig, len);
    assert_int_equal(try_load(&plan, dir, msg, sizeof(msg)), MOE_OK);
    free(bad);
    free(orig);
    char cmd[256];
    (void)snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---- Non-finite values ----------------------------------------------------------------------- */

static void test_nan_is_named(void **state)
{
    (void)state;
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-moe", &one_rank);
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 1);
    struct fixture f;
    make(&f, &plan, &o);
    for (int p = 0; p < moe_eng_num_params(f.e); p++) {
        struct moe_eng_param_view v;
        moe_eng_param(f.e, p, &v);
        if (strcmp(v.name, "layer2.expert_fc2") == 0) {
            v.weight[3] = NAN;
        }
    }
    struct moe_eng_step_result r;
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_eng_train_step(f.e, &r, &diag), MOE_ERR_RUNTIME);
    assert_non_null(strstr(diag.message, "step 1"));
    assert_non_null(strstr(diag.message, "layer 2, layer2.expert_fc2"));
    release(&f);
    /* An infinite output-layer weight: the layers are finite, the loss head is named. */
    make(&f, &plan, &o);
    memset(&diag, 0, sizeof(diag));
    for (int p = 0; p < moe_eng_num_params(f.e); p++) {
        struct moe_eng_param_view v;
        moe_eng_param(f.e, p, &v);
        if (strcmp(v.name, "output") == 0) {
            v.weight[5] = INFINITY;
        }
    }
    enum moe_status st = moe_eng_train_step(f.e, &r, &diag);
    assert_int_equal(st, MOE_ERR_RUNTIME);
    assert_non_null(strstr(diag.message, "step 1"));
    assert_non_null(strstr(diag.message, "loss head, output"));
    release(&f);
}

/* ---- Large but finite values ----------------------------------------------------------------- */

static int param_idx(moe_eng_t *e, const char *name)
{
    for (int p = 0; p < moe_eng_num_params(e); p++) {
        struct moe_eng_param_view v;
        moe_eng_param(e, p, &v);
        if (strcmp(v.name, name) == 0) {
            return p;
        }
    }
    fail_msg("no parameter %s", name);
    return -1;
}

/* Every weight of parameter `name` = value (engine memory: host, or the emulated device). */
static void fill_weights(moe_eng_t *e, const char *name, float value)
{
    int p = param_idx(e, name);
    struct moe_eng_param_view v;
    moe_eng_param(e, p, &v);
    for (size_t i = 0; i < v.numel; i++) {
        moe_eng_param_write(e, p, false, i, &value, 1);
    }
}

/*
 * Residual-stream activations of 2e35 (every embedding weight set to it): each element is finite
 * and the norms rescale it, but one layer output's plain sum (64 x 64 elements near 2e35, 8e38)
 * overflows fp32. The CPU backend checks every element and trains on; the CUDA path's deferred
 * check (here on the emulated device) must train on too, with bit-identical losses. Before its sums
 * were scaled it stopped with "non-finite values in the forward pass, first in layer 0, attention
 * output".
 */
static void test_huge_finite_activations_train_on(void **state)
{
    (void)state;
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-moe", &one_rank);
    double losses[2][3];
    for (int emu = 0; emu < 2; emu++) {
        struct moe_eng_run_opts o;
        eng_test_opts(&o, 3);
        o.is_device_emulated = emu == 1;
        struct fixture f;
        make(&f, &plan, &o);
        fill_weights(f.e, "embedding", 2e35f);
        for (int i = 0; i < 3; i++) {
            losses[emu][i] = step(&f);
            assert_true(isfinite(losses[emu][i]));
        }
        release(&f);
    }
    assert_memory_equal(losses[1], losses[0], sizeof(losses[0]));
}

/* Sum of squares, in double, of every gradient of the engine (one rank: each counted once). */
static double grad_sumsq(moe_eng_t *e)
{
    double ss = 0.0;
    for (int p = 0; p < moe_eng_num_params(e); p++) {
        struct moe_eng_param_view v;
        moe_eng_param(e, p, &v);
        for (size_t i = 0; i < v.numel; i++) {
            float g = 0.0f;
            moe_eng_param_read(e, p, true, i, &g, 1);
            ss += (double)g * (double)g;
        }
    }
    return ss;
}

/*
 * The optimizer step on gradients the test sets (engine/internal.h): after one forward/backward,
 * element 0 of layer1.router's gradient is set to `poke`. Returns the step's status, the norm it
 * reported, the norm the test computes in double, and layer1.router's weights 0 and 1 before and
 * after.
 */
struct poke_result {
    enum moe_status st;
    double norm;
    double expected;
    float w_before[2], w_after[2];
    char message[sizeof(((struct moe_diag *)NULL)->message)];
};

static struct poke_result
optimizer_after_poke(bool emulated, float clip, const char *name, size_t idx, float poke)
{
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-moe", &one_rank);
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 1);
    o.is_device_emulated = emulated;
    o.weight_decay = 0.0f; /* untouched weights stay put unless their gradient moves them */
    o.clip_grad = clip;
    struct fixture f;
    make(&f, &plan, &o);
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    double loss = 0.0;
    assert_int_equal(moe_eng_compute_grads(f.e, &loss, &diag), MOE_OK);
    int p = param_idx(f.e, name);
    moe_eng_param_write(f.e, p, true, idx, &poke, 1);
    struct poke_result r;
    memset(&r, 0, sizeof(r));
    r.expected = sqrt(grad_sumsq(f.e));
    int router = param_idx(f.e, "layer1.router");
    moe_eng_param_read(f.e, router, false, 0, r.w_before, 2);
    r.st = moe_eng_optimizer_step(f.e, &r.norm, &diag);
    moe_eng_param_read(f.e, router, false, 0, r.w_after, 2);
    (void)snprintf(r.message, sizeof(r.message), "%s", diag.message);
    release(&f);
    return r;
}

/*
 * The global gradient norm is summed in double: a gradient of 3e30 (finite; its square, 9e60,
 * overflows fp32) gives the norm the test computes in double, the step goes on, and clipping
 * applies as usual: clipped to 1, the router's other gradients (~1e-2 / 3e30) are below Adam's
 * epsilon and leave their weights where they were while the poked weight moves by the learning
 * rate; unclipped, they move too. A genuinely non-finite gradient stops the step with a message
 * naming the tensor. CPU backend and the CUDA path's staging (emulated device).
 */
static void test_grad_norm_in_double(void **state)
{
    (void)state;
    for (int emu = 0; emu < 2; emu++) {
        struct poke_result r = optimizer_after_poke(emu == 1, 1.0f, "layer1.router", 0, 3e30f);
        if (r.st != MOE_OK) {
            print_error("%s\n", r.message);
        }
        assert_int_equal(r.st, MOE_OK);
        assert_true(fabs(r.expected - 3e30) < 1e-4 * 3e30);
        assert_true(r.expected * r.expected > (double)FLT_MAX);
        assert_true(fabs(r.norm - r.expected) <= 1e-12 * r.expected);
        double lr = 3e-3; /* moe_eng_run_opts_init */
        assert_true(fabs((double)(r.w_before[0] - r.w_after[0]) - lr) < 1e-2 * lr);
        assert_true(r.w_after[1] == r.w_before[1]);
        struct poke_result u = optimizer_after_poke(emu == 1, 0.0f, "layer1.router", 0, 3e30f);
        assert_int_equal(u.st, MOE_OK);
        assert_true(fabs((double)(u.w_before[1] - u.w_after[1])) > 0.5 * lr);

        struct poke_result n =
            optimizer_after_poke(emu == 1, 1.0f, "layer2.expert_fc1", 5, INFINITY);
        assert_int_equal(n.st, MOE_ERR_RUNTIME);
        assert_non_null(strstr(n.message, "non-finite gradient (inf) in layer2.expert_fc1"));
        assert_true(n.w_after[0] == n.w_before[0]); /* the update was skipped */
    }
}

/* ---- Memory vs the cost model ---------------------------------------------------------------- */

/* One rank's engine memory for plan (emulating its precision or not) and the cost model's
 * prediction of the same stage for FP32 training at load factor 1. */
static void memory_pair(const struct moe_plan *plan,
                        bool emulate_precision,
                        struct moe_eng_mem_report *m,
                        struct moe_mem_bytes *pred)
{
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 1);
    o.moe_buffer_factor = 1.0; /* the prediction below uses load factor 1 */
    o.emulate_precision = emulate_precision;
    struct fixture f;
    make(&f, plan, &o);
    moe_eng_memory(f.e, m);
    struct moe_cluster cl;
    memset(&cl, 0, sizeof(cl));
    struct moe_options opt = plan->options;
    opt.is_fp32_training = true;
    moe_mem_stage(&plan->model, &cl, moe_eng_layout(f.e), &opt, 0, 1.0, pred);
    release(&f);
}

static void test_memory_vs_prediction(void **state)
{
    (void)state;
    const char *models[] = {"tiny-moe", "tiny-dsv3"};
    for (size_t i = 0; i < MOE_ARRAY_LEN(models); i++) {
        struct moe_plan plan;
        eng_test_plan(&plan, models[i], &one_rank);
        struct moe_eng_mem_report m;
        struct moe_mem_bytes pred;
        memory_pair(&plan, false, &m, &pred);
        printf("  %-10s weights %.0f/%.0f grads %.0f/%.0f optimizer %.0f/%.0f activations "
               "%.0f/%.0f (engine/predicted bytes)\n",
               models[i], m.weights, pred.weights, m.grads, pred.grads, m.optimizer, pred.optimizer,
               m.activations, pred.activations);
        assert_true(fabs(m.weights / pred.weights - 1.0) <= 0.01);
        assert_true(fabs(m.grads / pred.grads - 1.0) <= 0.01);
        assert_true(fabs(m.optimizer / pred.optimizer - 1.0) <= 0.01);
        assert_true(fabs(m.activations / pred.activations - 1.0) <= 0.20);
        assert_true(m.peak_rss > m.total);
    }
}

/* AdamW's four streams of every bucket share one offset within a 4 KiB page (engine/model.c
 * bucket_close: one CPU ran the step a third slower with them 1-3 KiB apart), and the page of
 * slack each carries is reported among the buffers, not as optimizer state. */
static void test_optimizer_streams_share_page_offset(void **state)
{
    (void)state;
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-moe", &one_rank);
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 1);
    struct fixture f;
    make(&f, &plan, &o);
    const struct moe_eng *e = f.e;
    assert_true(e->num_buckets > 1);
    double state_bytes = 0.0;
    for (int b = 0; b < e->num_buckets; b++) {
        const struct moe_eng_bucket *bk = &e->buckets[b];
        uintptr_t page = (uintptr_t)bk->g % MOE_ENG_PAGE_BYTES; /* the reduced shard's start */
        assert_int_equal((uintptr_t)bk->master % MOE_ENG_PAGE_BYTES, page);
        assert_int_equal((uintptr_t)bk->m % MOE_ENG_PAGE_BYTES, page);
        assert_int_equal((uintptr_t)bk->v % MOE_ENG_PAGE_BYTES, page);
        state_bytes += 3.0 * (double)moe_eng_align(bk->shard * sizeof(float));
    }
    struct moe_eng_mem_report m;
    moe_eng_memory(e, &m);
    assert_true(m.optimizer == state_bytes);
    assert_true(m.buffers >= (double)moe_eng_opt_page_slack(e));
    assert_true(moe_eng_opt_page_slack(e) == (size_t)e->num_buckets * 3 * MOE_ENG_PAGE_BYTES);
    release(&f);
}

/* Precision emulation's per-call quantised copies (the engine's temporaries) are priced: the
 * buffers the engine adds for them equal what the model adds for FP32 training under an FP8 recipe
 * (tiny-moe: the stacked expert weights and two row operands, ~0.5 MiB on 1.1 MiB of buffers). */
static void test_memory_emulation(void **state)
{
    (void)state;
    double engine[2];
    double model[2];
    for (int emu = 0; emu < 2; emu++) {
        struct moe_plan plan;
        eng_test_plan(&plan, "tiny-moe", &one_rank);
        plan.options.recipe = emu ? MOE_RECIPE_FP8_BLOCKWISE : MOE_RECIPE_BF16;
        struct moe_eng_mem_report m;
        struct moe_mem_bytes pred;
        memory_pair(&plan, emu == 1, &m, &pred);
        engine[emu] = m.buffers;
        model[emu] = pred.buffers;
    }
    double de = engine[1] - engine[0];
    double dm = model[1] - model[0];
    printf("  emulation temporaries: engine +%.0f B, model +%.0f B\n", de, dm);
    assert_true(de > 0.2 * engine[0]);
    assert_true(fabs(dm / de - 1.0) <= 0.01);
}

/* ---- Errors ---------------------------------------------------------------------------------- */

static enum moe_status
create_status(const struct moe_plan *plan, const struct moe_eng_run_opts *o, struct moe_diag *diag)
{
    moe_comm_t *w = NULL;
    assert_int_equal(moe_comm_mpi_create(MPI_COMM_SELF, "w", &w), MOE_OK);
    moe_eng_t *e = NULL;
    memset(diag, 0, sizeof(*diag));
    enum moe_status st = moe_eng_create(plan, o, w, &e, diag);
    moe_eng_destroy(e);
    moe_comm_destroy(w);
    return st;
}

static void test_errors(void **state)
{
    (void)state;
    struct moe_diag diag;
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 1);
    struct moe_plan plan;
    const struct eng_test_layout two = {"tp2", 2, 1, 1, 1, 1, 1, false, 2};
    eng_test_plan(&plan, "tiny-moe", &two);
    assert_int_equal(create_status(&plan, &o, &diag), MOE_ERR_INVALID);
    assert_non_null(strstr(diag.message, "mpirun -np 2"));
    eng_test_plan(&plan, "tiny-moe", &one_rank);
    plan.options.dispatcher = MOE_DISPATCH_ALLGATHER;
    plan.options.capacity_factor = 1.0; /* a capacity over the gathered group: refused */
    assert_int_equal(create_status(&plan, &o, &diag), MOE_ERR_UNSUPPORTED);
    assert_non_null(strstr(diag.message, "allgather"));
    eng_test_plan(&plan, "tiny-moe", &one_rank);
    o.data_kind = MOE_ENG_DATA_TEXT;
    o.data_path = "/nonexistent/moefold-data";
    assert_int_equal(create_status(&plan, &o, &diag), MOE_ERR_IO);
    assert_non_null(strstr(diag.message, "/nonexistent/moefold-data"));
}

/* ---- moefold-train --------------------------------------------------------------------------- */

static void test_cli(void **state)
{
    (void)state;
    char path[512], bin[1024], cmd[2048], out[8192];
    moe_test_bin_path("moefold-train", path, sizeof(path));
    /* A fresh singleton: drop the MPI environment this (singleton) test process carries. */
    (void)snprintf(bin, sizeof(bin),
                   "for v in $(env | grep -o '^\\(OMPI\\|PMIX\\|PRTE\\)_[A-Za-z0-9_]*'); do "
                   "unset $v; done; %s",
                   path);
    char run[128];
    (void)snprintf(run, sizeof(run), "/tmp/moefold-run-%ld.json", (long)getpid());
    (void)snprintf(cmd, sizeof(cmd), "%s --help", bin);
    assert_int_equal(moe_test_run_capture(cmd, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "--plan"));
    (void)snprintf(cmd, sizeof(cmd), "%s --model tiny-moe --steps x", bin);
    assert_int_equal(moe_test_run_capture(cmd, out, sizeof(out)), 2);
    assert_non_null(strstr(out, "--steps"));
    (void)snprintf(cmd, sizeof(cmd), "%s --plan /nonexistent/plan.json", bin);
    assert_int_equal(moe_test_run_capture(cmd, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "/nonexistent/plan.json"));
    /* Six steps, five measured: the unattributed share below is a mean over five steps of a few
     * milliseconds, so that one preemption of the VM between two op timers (60 us is 2% of one)
     * does not decide it (it did in one suite run of six with one measured step, 2026-12-04). */
    (void)snprintf(cmd, sizeof(cmd), "%s --model tiny-moe --steps 6 --synthetic --out %s", bin,
                   run);
    int rc = moe_test_run_capture(cmd, out, sizeof(out));
    if (rc != 0) {
        print_error("%s\n", out);
    }
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "step     6/6"));
    assert_non_null(strstr(out, "tok/s"));
    assert_non_null(strstr(out, "ETA"));
    /* The run file reads back with compare's reader; the phases and the unattributed remainder
     * sum to the step time, the remainder small. */
    struct moe_run r;
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    enum moe_status st = moe_run_read(run, &r, &diag);
    if (st != MOE_OK) {
        print_error("%s\n", diag.message);
    }
    assert_int_equal(st, MOE_OK);
    const struct moe_phase_times *t = &r.time;
    double sum = t->compute + t->expert_gemm + t->dispatch + t->combine + t->tp_comm + t->cp_comm +
                 t->pp_comm + t->dp_comm + t->pp_bubble + t->optimizer + t->host_overhead;
    assert_true(fabs(sum + r.unattributed_s - r.step_time_s) <= 1e-9 + 1e-6 * r.step_time_s);
    assert_true(r.unattributed_s <= 0.02 * r.step_time_s);
    assert_int_equal(r.steps, 6);
    assert_non_null(r.plan);
    assert_true(r.mem.weights > 0.0);
    moe_run_fini(&r);
    (void)unlink(run);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loss_falls_synthetic),
        cmocka_unit_test(test_loss_falls_text),
        cmocka_unit_test(test_bit_reproducible),
        cmocka_unit_test(test_no_allocation_in_steps),
        cmocka_unit_test(test_fd_gradients_softmax),
        cmocka_unit_test(test_fd_gradients_sigmoid_grouped_tied),
        cmocka_unit_test(test_fd_qknorm_bias_window_sinks),
        cmocka_unit_test(test_fd_gelu_bias),
        cmocka_unit_test(test_fd_mla),
        cmocka_unit_test(test_fd_mtp),
        cmocka_unit_test(test_recompute_offload_bit_identical),
        cmocka_unit_test(test_checkpoint_resume),
        cmocka_unit_test(test_checkpoint_integrity),
        cmocka_unit_test(test_nan_is_named),
        cmocka_unit_test(test_huge_finite_activations_train_on),
        cmocka_unit_test(test_grad_norm_in_double),
        cmocka_unit_test(test_memory_vs_prediction),
        cmocka_unit_test(test_optimizer_streams_share_page_offset),
        cmocka_unit_test(test_memory_emulation),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_cli),
    };
    int fails = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return fails;
}
