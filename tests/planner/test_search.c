/*
 * Planner search: the pruned search returns exactly what evaluating every candidate returns
 * (top-k and Pareto front, on constrained problems small enough to enumerate), whatever the thread
 * count; each dominance, equivalence and bound the search relies on holds for the cost model over
 * random candidates; constraints are honoured; nothing fitting names the closest plan; the
 * pairwise validity check agrees with moe_layout_resolve.
 */
#include "model/config.h"
#include "model/cost.h"
#include "model/layout.h"
#include "model/memory.h"
#include "planner/bound.h"
#include "planner/cliopt.h"
#include "planner/search.h"
#include "planner/space.h"
#include "tests/test_util.h"
#include "topologies/cluster_file.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define GIB 1073741824.0

struct problem {
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_plan_request req;
};

static void
load_problem(struct problem *p, const char *model, const char *cluster, int gpus, int gbs)
{
    char dir[512];
    (void)setenv("MOEFOLD_TOPOLOGIES", moe_test_root_path("topologies", dir, sizeof(dir)), 1);
    struct moe_diag d = {0};
    assert_int_equal(moe_cfg_preset(model, &p->cfg, &d), MOE_OK);
    assert_int_equal(moe_cluster_load(cluster, &p->cl, &d), MOE_OK);
    moe_plan_request_init(&p->req);
    p->req.cfg = &p->cfg;
    p->req.cl = &p->cl;
    p->req.num_gpus = gpus;
    p->req.gbs = gbs;
    p->req.seq_length = 4096;
    p->req.opt.force_load_balancing = true;
}

static void fix_int(struct moe_plan_request *req, enum moe_plan_knob k, int *field, int v)
{
    *field = v;
    req->fixed |= 1u << k;
}

static void search(const struct moe_plan_request *req, struct moe_plan_result *res)
{
    struct moe_diag d = {0};
    enum moe_status st = moe_plan_search(req, res, &d);
    if (st != MOE_OK) {
        fprintf(stderr, "search: %s\n", d.message);
    }
    assert_int_equal(st, MOE_OK);
    assert_int_equal(res->stats.bound_violations, 0);
    assert_int_equal(res->stats.validity_mismatches, 0);
    assert_int_equal(res->stats.memory_mismatches, 0);
}

/* Same plan: knobs and predicted step time. */
static void assert_same_plan(const struct moe_plan_candidate *a, const struct moe_plan_candidate *b)
{
    assert_int_equal(moe_plan_knob_cmp(&a->lay, &a->opt, &b->lay, &b->opt), 0);
    assert_true(a->pred.step_time_s == b->pred.step_time_s);
    assert_true(a->pred.mem.total == b->pred.mem.total);
}

static void assert_same_result(const struct moe_plan_result *a, const struct moe_plan_result *b)
{
    assert_int_equal(a->num_top, b->num_top);
    for (int i = 0; i < a->num_top; i++) {
        assert_same_plan(&a->top[i], &b->top[i]);
    }
    assert_int_equal(a->num_pareto, b->num_pareto);
    for (int i = 0; i < a->num_pareto; i++) {
        assert_same_plan(&a->pareto[i], &b->pareto[i]);
    }
}

/* Pruned vs every candidate evaluated, on a problem small enough to enumerate. */
static void check_exhaustive(struct moe_plan_request *req)
{
    struct moe_plan_result fast;
    struct moe_plan_result slow;
    req->exhaustive = false;
    search(req, &fast);
    req->exhaustive = true;
    search(req, &slow);
    req->exhaustive = false;
    assert_true(fast.num_top > 0);
    assert_same_result(&fast, &slow);
    assert_true(fast.stats.evaluated < slow.stats.evaluated);
    moe_plan_result_free(&fast);
    moe_plan_result_free(&slow);
}

static void test_exhaustive_dense(void **state)
{
    (void)state;
    struct problem p;
    load_problem(&p, "llama3-8b", "dgx-h100", 8, 64);
#if defined(__SANITIZE_ADDRESS__)
    /* Under the sanitizers one recipe (the plain build checks both): the search's memory use
     * does not depend on the recipe, and both took 30 s of CI's sanitizer pass. */
    p.req.recipes = 1u << MOE_RECIPE_FP8_BLOCKWISE;
#else
    p.req.recipes = (1u << MOE_RECIPE_BF16) | (1u << MOE_RECIPE_FP8_BLOCKWISE);
#endif
    fix_int(&p.req, MOE_PK_MBS, &p.req.lay.mbs, 1);
    fix_int(&p.req, MOE_PK_CP, &p.req.lay.cp, 1);
    p.req.top_k = 6;
    p.req.pareto_window = 1.5;
    check_exhaustive(&p.req);
}

/* MoE: recompute x offload x CUDA graphs x dispatcher, with and without interleaving. */
static void test_exhaustive_moe(void **state)
{
    (void)state;
    struct problem p;
    load_problem(&p, "qwen3-30b-a3b", "dgx-h100", 8, 64);
    p.req.recipes = 1u << MOE_RECIPE_FP8_BLOCKWISE;
#if defined(__SANITIZE_ADDRESS__)
    /* Under the sanitizers one dispatcher (the plain build checks both): DeepEP's pool is one
     * term of the same memory code, and both took 14 s of CI's sanitizer pass. */
    p.req.dispatchers = 1u << MOE_DISPATCH_DEEPEP;
#else
    p.req.dispatchers = (1u << MOE_DISPATCH_ALLTOALL) | (1u << MOE_DISPATCH_DEEPEP);
#endif
    fix_int(&p.req, MOE_PK_TP, &p.req.lay.tp, 1);
    fix_int(&p.req, MOE_PK_CP, &p.req.lay.cp, 1);
    fix_int(&p.req, MOE_PK_EP, &p.req.lay.ep, 4);
    fix_int(&p.req, MOE_PK_MBS, &p.req.lay.mbs, 1);
    p.req.opt.moe_grouped_gemm = true;
    p.req.fixed |= 1u << MOE_PK_GROUPED_GEMM;
    p.req.top_k = 5;
    p.req.pareto_window = 1.3;
    check_exhaustive(&p.req);
}

/* Load statistics that make the p99 load (which sizes memory) differ from the mean (which sets
 * the time), as --moe-imbalance auto does. */
static enum moe_status skewed_load(void *ctx,
                                   const struct moe_layout *lay,
                                   struct moe_load_stats *out,
                                   bool *used,
                                   struct moe_diag *diag)
{
    (void)ctx;
    (void)diag;
    out->mean_factor = 1.2;
    out->p50_factor = 1.15;
    out->p99_factor = lay->ep > 1 ? 1.6 : 1.0;
    *used = true;
    return MOE_OK;
}

/* With load statistics the search's memory matches the predictions' (p99-sized; search()
 * asserts no mismatch) and the pruned search still equals the exhaustive one. */
static void test_exhaustive_load_stats(void **state)
{
    (void)state;
    struct problem p;
    load_problem(&p, "qwen3-30b-a3b", "dgx-h100", 8, 64);
    p.req.opt.force_load_balancing = false;
    p.req.load_fn = skewed_load;
    p.req.recipes = 1u << MOE_RECIPE_FP8_BLOCKWISE;
    p.req.dispatchers = 1u << MOE_DISPATCH_ALLTOALL;
    fix_int(&p.req, MOE_PK_TP, &p.req.lay.tp, 1);
    fix_int(&p.req, MOE_PK_CP, &p.req.lay.cp, 1);
    fix_int(&p.req, MOE_PK_EP, &p.req.lay.ep, 4);
    fix_int(&p.req, MOE_PK_MBS, &p.req.lay.mbs, 2);
#if defined(__SANITIZE_ADDRESS__)
    /* Under the sanitizers one pipeline depth (the plain build checks every one): the load
     * statistics' code paths are the same at each, and all of them took 33 s of CI's sanitizer
     * pass. */
    fix_int(&p.req, MOE_PK_PP, &p.req.lay.pp, 2);
    fix_int(&p.req, MOE_PK_VPP, &p.req.lay.vpp, 1);
#endif
    p.req.top_k = 3;
    p.req.pareto_window = 1.3;
    check_exhaustive(&p.req);
}

/* Qwen3-30B-A3B on 8 H100 under a memory cap that only recompute and offload meet: FP8 blockwise,
 * all-to-all, TP1 CP1 EP8 PP1, micro-batch 2, top 3. */
#define TIGHT_GIB 68.0
static void tight_problem(struct problem *p)
{
    load_problem(p, "qwen3-30b-a3b", "dgx-h100", 8, 64);
    p->req.recipes = 1u << MOE_RECIPE_FP8_BLOCKWISE;
    p->req.dispatchers = 1u << MOE_DISPATCH_ALLTOALL;
    fix_int(&p->req, MOE_PK_TP, &p->req.lay.tp, 1);
    fix_int(&p->req, MOE_PK_CP, &p->req.lay.cp, 1);
    fix_int(&p->req, MOE_PK_EP, &p->req.lay.ep, 8);
    fix_int(&p->req, MOE_PK_PP, &p->req.lay.pp, 1);
    fix_int(&p->req, MOE_PK_MBS, &p->req.lay.mbs, 2);
    p->req.max_memory_bytes = TIGHT_GIB * 1073741824.0;
    p->req.top_k = 3;
}

/* The tight problem with every offload module set. */
static void test_exhaustive_tight(void **state)
{
    (void)state;
    struct problem p;
    tight_problem(&p);
    p.req.all_offload_sets = true;
    p.req.pareto_window = 1.3;
    check_exhaustive(&p.req);
}

/* Offload copies that show (a host link 20x slower), with and without EP overlap: the offload
 * sets' bound from their row's prediction (search_offload.c offload_time_bound) prunes only what
 * the exhaustive search also rejects. */
static void test_exhaustive_slow_host(void **state)
{
    (void)state;
    struct problem p;
    tight_problem(&p);
    p.cl.host.link_gbps /= 20.0;
    p.req.pareto_window = 1.5;
    check_exhaustive(&p.req);
}

static void test_exhaustive_interleaved(void **state)
{
    (void)state;
    struct problem p;
    load_problem(&p, "mixtral-8x7b", "dgx-h100", 16, 128);
    p.req.recipes = 1u << MOE_RECIPE_BF16;
    p.req.dispatchers = 1u << MOE_DISPATCH_ALLTOALL;
    fix_int(&p.req, MOE_PK_TP, &p.req.lay.tp, 2);
    fix_int(&p.req, MOE_PK_CP, &p.req.lay.cp, 1);
    fix_int(&p.req, MOE_PK_PP, &p.req.lay.pp, 4);
    fix_int(&p.req, MOE_PK_MBS, &p.req.lay.mbs, 1);
    fix_int(&p.req, MOE_PK_EP, &p.req.lay.ep, 4);
#if defined(__SANITIZE_ADDRESS__)
    /* Under the sanitizers one interleaving depth (the plain build checks every one): the memory
     * the search touches does not depend on it, and every depth took 133 s of CI's sanitizer pass
     * for test_search (test_exhaustive_interleaved about a third of it). */
    fix_int(&p.req, MOE_PK_VPP, &p.req.lay.vpp, 3);
#endif
    p.req.top_k = 4;
    p.req.pareto_window = 1.5;
    check_exhaustive(&p.req);
}

/* One, two and four threads find the same plans. */
static void test_threads_deterministic(void **state)
{
    (void)state;
    struct problem p;
    load_problem(&p, "deepseek-v3", "dgx-h100", 256, 1024);
    fix_int(&p.req, MOE_PK_EP, &p.req.lay.ep, 32);
    fix_int(&p.req, MOE_PK_TP, &p.req.lay.tp, 2);
    p.req.recipes = 1u << MOE_RECIPE_FP8_BLOCKWISE;
    p.req.top_k = 8;
    p.req.pareto_window = 1.1;
    struct moe_plan_result r[3];
    const int threads[3] = {1, 2, 4};
    for (int i = 0; i < 3; i++) {
        p.req.num_threads = threads[i];
        search(&p.req, &r[i]);
    }
    assert_true(r[0].num_top > 0);
    assert_same_result(&r[0], &r[1]);
    assert_same_result(&r[0], &r[2]);
    /* The candidate count does not depend on the interleaving either (the pruned, invalid and
     * evaluated shares do). */
    assert_true(r[0].stats.enumerated == r[1].stats.enumerated);
    assert_true(r[0].stats.enumerated == r[2].stats.enumerated);
    for (int i = 0; i < 3; i++) {
        moe_plan_result_free(&r[i]);
    }
}

/* Fixed knobs, allowed recipes and dispatchers, no offload and the memory cap hold in every plan
 * reported. */
static void test_constraints(void **state)
{
    (void)state;
    struct problem p;
    load_problem(&p, "qwen3-30b-a3b", "dgx-h100", 32, 256);
    fix_int(&p.req, MOE_PK_TP, &p.req.lay.tp, 2);
    fix_int(&p.req, MOE_PK_EP, &p.req.lay.ep, 8);
    p.req.recipes = (1u << MOE_RECIPE_BF16) | (1u << MOE_RECIPE_FP8_TENSORWISE);
    p.req.dispatchers = 1u << MOE_DISPATCH_ALLTOALL;
    p.req.fixed |= (1u << MOE_PK_ACT_OFFLOAD) | (1u << MOE_PK_OPT_OFFLOAD);
    p.req.max_memory_bytes = 60.0 * GIB;
    p.req.pareto_window = 2.0;
    struct moe_plan_result r;
    search(&p.req, &r);
    assert_true(r.num_top > 0);
    assert_true(r.num_pareto > 0);
    for (int i = 0; i < r.num_top + r.num_pareto; i++) {
        const struct moe_plan_candidate *c = i < r.num_top ? &r.top[i] : &r.pareto[i - r.num_top];
        assert_int_equal(c->lay.tp, 2);
        assert_int_equal(c->lay.ep, 8);
        assert_true(c->opt.recipe == MOE_RECIPE_BF16 || c->opt.recipe == MOE_RECIPE_FP8_TENSORWISE);
        assert_int_equal(c->opt.dispatcher, MOE_DISPATCH_ALLTOALL);
        assert_false(c->opt.fine_grained_offload);
        assert_int_equal(c->opt.cpu_offloading_num_layers, 0);
        assert_false(c->opt.optimizer_cpu_offload);
        assert_true(c->pred.mem.total <= 60.0 * GIB);
        assert_true(c->fits);
    }
    /* Ranked by the simulated schedule; the Pareto front by memory, faster as it grows. */
    for (int i = 1; i < r.num_top; i++) {
        assert_true(r.top[i - 1].sim.step_time_s <= r.top[i].sim.step_time_s);
    }
    for (int i = 1; i < r.num_pareto; i++) {
        assert_true(r.pareto[i - 1].pred.mem.total < r.pareto[i].pred.mem.total);
        assert_true(r.pareto[i - 1].pred.step_time_s > r.pareto[i].pred.step_time_s);
    }
    moe_plan_result_free(&r);
}

/* A plan the model says is faster ranks higher; the top plan beats every Pareto point in time. */
static void test_ranking_relations(void **state)
{
    (void)state;
    struct problem p;
    load_problem(&p, "mixtral-8x7b", "dgx-h100", 32, 256);
    p.req.recipes = (1u << MOE_RECIPE_BF16) | (1u << MOE_RECIPE_FP8_BLOCKWISE);
    p.req.top_k = 10;
    struct moe_plan_result r;
    search(&p.req, &r);
    assert_true(r.num_top >= 2);
    assert_true(r.num_pareto >= 1);
    /* The front ends at the fastest fitting plan (closed form), which no table row beats. */
    double fastest = r.pareto[r.num_pareto - 1].pred.step_time_s;
    for (int i = 0; i < r.num_top; i++) {
        assert_true(r.top[i].pred.step_time_s >= fastest);
    }
    for (int i = 0; i < r.num_pareto; i++) {
        assert_true(r.pareto[i].pred.step_time_s >= fastest);
    }
    /* Layouts in the table are distinct. */
    for (int i = 0; i < r.num_top; i++) {
        for (int j = i + 1; j < r.num_top; j++) {
            assert_false(
                memcmp(&r.top[i].lay, &r.top[j].lay, offsetof(struct moe_layout, chunks)) == 0);
        }
    }
    moe_plan_result_free(&r);
}

/* Nothing fits: the least-memory plan and its excess are reported. */
static void test_nothing_fits(void **state)
{
    (void)state;
    struct problem p;
    load_problem(&p, "deepseek-v3", "dgx-h100", 8, 64);
    struct moe_plan_result r;
    search(&p.req, &r);
    assert_int_equal(r.num_top, 0);
    assert_true(r.has_closest);
    assert_true(r.closest_excess_bytes > 0.0);
    assert_true(r.closest.pred.mem.total > r.cap_bytes);
    /* 671B parameters on 8 GPUs: at least 2 bytes each of weights alone. */
    assert_true(r.closest.pred.mem.total > 671e9 * 2.0 / 8.0 * 0.9);
    moe_plan_result_free(&r);
}

/* A request no layout satisfies is an error naming the constraint. */
static void test_no_layout(void **state)
{
    (void)state;
    struct problem p;
    load_problem(&p, "qwen3-30b-a3b", "dgx-h100", 8, 64);
    fix_int(&p.req, MOE_PK_TP, &p.req.lay.tp, 3);
    struct moe_plan_result r;
    struct moe_diag d = {0};
    assert_int_equal(moe_plan_search(&p.req, &r, &d), MOE_ERR_INFEASIBLE);
    assert_non_null(strstr(d.message, "constraints"));
}

/* ------------------------------------------------------------------------------------------ */
/* Claims the pruning relies on, over random candidates                                        */

static int pick(struct moe_test_rng *r, int n)
{
    int i = (int)(moe_test_rng_uniform(r) * n);
    return i < n ? i : n - 1;
}

static int pick_divisor(struct moe_test_rng *r, long n, long cap)
{
    int d[64];
    int k = 0;
    for (long x = 1; x <= n && x <= cap && k < 64; x++) {
        if (n % x == 0) {
            d[k++] = (int)x;
        }
    }
    return d[pick(r, k)];
}

/* A random resolved layout of the problem (balanced pipeline layout when layers do not divide). */
static bool
random_layout(struct moe_test_rng *r, const struct moe_plan_space *sp, struct moe_layout *lay)
{
    const struct moe_plan_request *req = sp->req;
    const struct moe_model_cfg *cfg = req->cfg;
    struct moe_plan_lkey k;
    memset(&k, 0, sizeof(k));
    int n = req->num_gpus;
    k.tp = pick_divisor(r, n, 8);
    k.cp = pick_divisor(r, n / k.tp, 4);
    k.pp = pick_divisor(r, n / (k.tp * k.cp), 16);
    int dp = n / (k.tp * k.cp * k.pp);
    k.sp = k.tp > 1;
    k.ep = sp->is_moe ? pick_divisor(r, cfg->num_experts, (long)k.tp * k.cp * dp) : 1;
    k.etp = 1;
    k.mbs = pick_divisor(r, req->gbs / dp, 4);
    k.vpp = k.pp > 1 ? 1 + pick(r, 4) : 1;
    k.place =
        cfg->num_layers % (k.pp * k.vpp) == 0 && pick(r, 2) ? MOE_PLACE_EVEN : MOE_PLACE_BALANCED;
    if (k.pp == 1) {
        k.place = MOE_PLACE_EVEN;
    }
    moe_plan_lkey_apply(sp, &k, lay);
    return moe_layout_resolve(cfg, req->cl, NULL, lay, NULL) == MOE_OK;
}

/* Random option knobs from the space's lists (possibly invalid). */
static void random_okey(struct moe_test_rng *r,
                        const struct moe_plan_space *sp,
                        const struct moe_layout *lay,
                        struct moe_plan_okey *k)
{
    memset(k, 0, sizeof(*k));
    k->recipe = sp->recipes[pick(r, sp->num_recipes)];
    const struct moe_plan_static *st = &sp->statics[pick(r, sp->num_statics)];
    k->dist_opt = st->dist_opt;
    k->opt_offload = st->opt_offload;
    k->fp8_param_gather = (uint8_t)pick(r, 2);
    k->dispatcher = sp->dispatchers[pick(r, sp->num_dispatchers)];
    k->grouped = sp->grouped[pick(r, sp->num_grouped)];
    k->ep_overlap = sp->ep_overlap[pick(r, sp->num_ep_overlap)];
    k->tp_overlap = lay->sequence_parallel ? (uint8_t)pick(r, 2) : 0;
    k->overlap_grad = (uint8_t)pick(r, 2);
    k->overlap_param = k->overlap_grad && k->dist_opt ? (uint8_t)pick(r, 2) : 0;
    k->graph = (uint8_t)pick(r, sp->num_graphs);
    const struct moe_plan_rc *rc = &sp->rcs[pick(r, sp->num_rc)];
    k->rc = rc->rc;
    k->rc_method = rc->method;
    k->rc_mods = rc->mods;
    k->rc_layers = rc->layers;
    if (k->rc == MOE_RECOMPUTE_FULL) {
        k->rc_layers = (uint16_t)(1 + pick(r, sp->req->cfg->num_layers / lay->pp));
    }
    const struct moe_plan_off *f = &sp->offs[pick(r, sp->num_off)];
    k->off = f->off;
    k->off_mods = f->mods;
    k->off_layers = f->off == 2 ? (uint16_t)(1 + pick(r, 4)) : 0;
}

struct pred {
    struct moe_prediction p;
    bool valid;
};

static void predict(const struct moe_plan_space *sp,
                    const struct moe_layout *lay,
                    const struct moe_plan_okey *k,
                    struct pred *out)
{
    struct moe_options opt;
    moe_plan_okey_apply(sp, k, &opt);
    out->valid = moe_plan_valid_full(sp, lay, k);
    size_t need = moe_cost_workspace_bytes(lay, MOE_SCHED_CLOSED_FORM);
    void *ws = malloc(need);
    assert_non_null(ws);
    struct moe_diag d = {0};
    struct moe_load_stats stats;
    bool used = false;
    if (sp->req->load_fn != NULL) {
        assert_int_equal(sp->req->load_fn(sp->req->load_ctx, lay, &stats, &used, &d), MOE_OK);
    }
    assert_int_equal(moe_cost_predict(sp->req->cfg, sp->req->cl, lay, &opt, used ? &stats : NULL,
                                      MOE_SCHED_CLOSED_FORM, ws, need, &out->p, &d),
                     MOE_OK);
    free(ws);
}

static bool same_prediction(const struct moe_prediction *a, const struct moe_prediction *b)
{
    return a->step_time_s == b->step_time_s && a->mem.total == b->mem.total &&
           a->mem.host_offload == b->mem.host_offload && a->fits == b->fits;
}

struct claim_ctx {
    struct problem p;
    struct moe_plan_load_cache *lc; /* --moe-imbalance auto's statistics (one model), or NULL */
    struct moe_plan_space sp;
    struct moe_plan_bound_model bm;
    struct moe_test_rng rng;
    struct moe_layout lay;
};

static const char *const claim_models[][2] = {
    {"deepseek-v3", "dgx-h100"},  {"qwen3-30b-a3b", "gb200-nvl72"}, {"mixtral-8x7b", "dgx-b200"},
    {"gpt-oss-120b", "dgx-h100"}, {"llama3-8b", "hgx-b300"},
};
static const int claim_gpus[] = {256, 64, 64, 64, 32};

#define NUM_CLAIM_MODELS ((int)(sizeof(claim_gpus) / sizeof(claim_gpus[0])))
#define TRIALS           400

static struct claim_ctx *claim_setup(int which, uint64_t seed)
{
    struct claim_ctx *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    load_problem(&c->p, claim_models[which][0], claim_models[which][1], claim_gpus[which], 2048);
    c->p.req.opt.force_load_balancing = which % 2 == 0;
    c->p.req.opt.moe_imbalance = which % 2 == 0 ? 1.0 : 1.25;
    c->p.req.cfg = &c->p.cfg;
    c->p.req.cl = &c->p.cl;
    if (which == 3) {
        /* the plan command's default: the bounds price the Monte Carlo's mean factor */
        c->p.req.opt.moe_imbalance = 1.0;
        c->lc = moe_plan_load_cache_create(moe_plan_auto_load, &c->p.cfg);
        assert_non_null(c->lc);
        c->p.req.load_fn = moe_plan_load_cache_fn;
        c->p.req.load_ctx = c->lc;
    }
    struct moe_diag d = {0};
    assert_int_equal(moe_plan_space_init(&c->sp, &c->p.req, &d), MOE_OK);
    moe_plan_bound_model_init(&c->p.cfg, &c->bm);
    moe_test_rng_seed(&c->rng, seed);
    return c;
}

static void claim_free(struct claim_ctx *c)
{
    moe_plan_load_cache_destroy(c->lc);
    free(c);
}

/* A random valid candidate of a random layout; false if none was drawn in a few tries. */
static bool random_candidate(struct claim_ctx *c, struct moe_plan_okey *k)
{
    for (int tries = 0; tries < 200; tries++) {
        if (!random_layout(&c->rng, &c->sp, &c->lay)) {
            continue;
        }
        for (int j = 0; j < 20; j++) {
            random_okey(&c->rng, &c->sp, &c->lay, k);
            if (moe_plan_valid_full(&c->sp, &c->lay, k)) {
                return true;
            }
        }
    }
    return false;
}

/* Dominance: DP overlaps and FP8 parameter gather are never slower and never larger. */
static void test_claim_dominance(void **state)
{
    (void)state;
    int checked = 0;
    for (int m = 0; m < NUM_CLAIM_MODELS; m++) {
        struct claim_ctx *c = claim_setup(m, 11 + (uint64_t)m);
        for (int t = 0; t < TRIALS; t++) {
            struct moe_plan_okey k;
            if (!random_candidate(c, &k)) {
                continue;
            }
            struct pred a;
            struct pred b;
            struct moe_plan_okey v = k;
            v.overlap_grad = 0;
            v.overlap_param = 0;
            predict(&c->sp, &c->lay, &v, &a);
            v.overlap_grad = 1;
            predict(&c->sp, &c->lay, &v, &b);
            assert_true(b.p.step_time_s <= a.p.step_time_s);
            assert_true(b.p.mem.total == a.p.mem.total);
            if (k.dist_opt) {
                v.overlap_param = 1;
                predict(&c->sp, &c->lay, &v, &a);
                assert_true(a.p.step_time_s <= b.p.step_time_s);
                assert_true(a.p.mem.total == b.p.mem.total);
            }
            if (k.recipe != MOE_RECIPE_BF16 && k.dist_opt) {
                v = k;
                v.fp8_param_gather = 0;
                predict(&c->sp, &c->lay, &v, &a);
                v.fp8_param_gather = 1;
                predict(&c->sp, &c->lay, &v, &b);
                assert_true(b.p.step_time_s <= a.p.step_time_s);
                assert_true(b.p.mem.total <= a.p.mem.total);
            }
            checked++;
        }
        claim_free(c);
    }
    assert_true(checked > NUM_CLAIM_MODELS * TRIALS / 2);
}

/* Equivalences: values the model cannot tell apart give identical predictions. */
static void test_claim_equivalence(void **state)
{
    (void)state;
    for (int m = 0; m < NUM_CLAIM_MODELS; m++) {
        struct claim_ctx *c = claim_setup(m, 101 + (uint64_t)m);
        for (int t = 0; t < TRIALS; t++) {
            struct moe_plan_okey k;
            if (!random_candidate(c, &k)) {
                continue;
            }
            struct moe_options o1;
            struct moe_options o2;
            struct pred a;
            struct pred b;
            /* delay-wgrad is not priced */
            moe_plan_okey_apply(&c->sp, &k, &o1);
            o2 = o1;
            o2.delay_wgrad_compute = !o1.delay_wgrad_compute;
            size_t need = moe_cost_workspace_bytes(&c->lay, MOE_SCHED_CLOSED_FORM);
            void *ws = malloc(need);
            struct moe_prediction p1;
            struct moe_prediction p2;
            assert_int_equal(moe_cost_predict(&c->p.cfg, &c->p.cl, &c->lay, &o1, NULL,
                                              MOE_SCHED_CLOSED_FORM, ws, need, &p1, NULL),
                             MOE_OK);
            assert_int_equal(moe_cost_predict(&c->p.cfg, &c->p.cl, &c->lay, &o2, NULL,
                                              MOE_SCHED_CLOSED_FORM, ws, need, &p2, NULL),
                             MOE_OK);
            assert_true(same_prediction(&p1, &p2));
            /* local == transformer_engine graphs with the same modules */
            if (o1.cuda_graph_impl != MOE_CG_NONE) {
                o2 = o1;
                o2.cuda_graph_impl = o1.cuda_graph_impl == MOE_CG_LOCAL ? MOE_CG_TE : MOE_CG_LOCAL;
                assert_int_equal(moe_cost_predict(&c->p.cfg, &c->p.cl, &c->lay, &o2, NULL,
                                                  MOE_SCHED_CLOSED_FORM, ws, need, &p2, NULL),
                                 MOE_OK);
                assert_true(same_prediction(&p1, &p2));
            }
            free(ws);
            /* dispatchers at ep = 1 */
            if (c->lay.ep == 1 && c->sp.is_moe) {
                const int pairs[2][2] = {{MOE_DISPATCH_ALLTOALL, MOE_DISPATCH_ALLGATHER},
                                         {MOE_DISPATCH_DEEPEP, MOE_DISPATCH_HYBRIDEP}};
                for (int i = 0; i < 2; i++) {
                    struct moe_plan_okey v = k;
                    v.dispatcher = (uint8_t)pairs[i][0];
                    predict(&c->sp, &c->lay, &v, &a);
                    v.dispatcher = (uint8_t)pairs[i][1];
                    predict(&c->sp, &c->lay, &v, &b);
                    assert_true(same_prediction(&a.p, &b.p));
                }
            }
            /* "moe" recomputes the whole block: moe_act / shared_experts add nothing */
            if (k.rc == MOE_RECOMPUTE_SELECTIVE && (k.rc_mods & MOE_RC_MOE)) {
                struct moe_plan_okey v = k;
                predict(&c->sp, &c->lay, &v, &a);
                v.rc_mods |= MOE_RC_MOE_ACT | (c->sp.has_shared ? MOE_RC_SHARED_EXPERTS : 0u);
                predict(&c->sp, &c->lay, &v, &b);
                assert_true(same_prediction(&a.p, &b.p));
            }
            /* full recompute, uniform: step time the same for every layer count; block:
             * re-running more layers of each chunk is never faster */
            if (k.rc == MOE_RECOMPUTE_FULL) {
                struct moe_plan_okey v = k;
                int per_rank = c->p.cfg.num_layers / c->lay.pp;
                int n1 = 1 + pick(&c->rng, per_rank);
                int n2 = 1 + pick(&c->rng, per_rank);
                v.rc_method = MOE_RECOMPUTE_UNIFORM;
                v.rc_layers = (uint16_t)n1;
                predict(&c->sp, &c->lay, &v, &a);
                v.rc_layers = (uint16_t)n2;
                predict(&c->sp, &c->lay, &v, &b);
                assert_true(a.p.step_time_s == b.p.step_time_s);
                v.rc_method = MOE_RECOMPUTE_BLOCK;
                v.rc_layers = (uint16_t)(n1 < n2 ? n1 : n2);
                predict(&c->sp, &c->lay, &v, &a);
                v.rc_layers = (uint16_t)(n1 < n2 ? n2 : n1);
                predict(&c->sp, &c->lay, &v, &b);
                assert_true(a.p.step_time_s <= b.p.step_time_s * (1.0 + 1e-12));
                v.rc_method = MOE_RECOMPUTE_UNIFORM;
                predict(&c->sp, &c->lay, &v, &a);
                assert_true(b.p.step_time_s <= a.p.step_time_s * (1.0 + 1e-12));
                /* uniform: fine-grained offload frees no memory; its copies cost time (less only
                 * by what a longer pass hides of the DP tail) */
                v.rc_method = MOE_RECOMPUTE_UNIFORM;
                v.off = 0;
                v.off_mods = 0;
                predict(&c->sp, &c->lay, &v, &a);
                v.off = 1;
                v.off_mods = (uint8_t)c->sp.fine_all;
                predict(&c->sp, &c->lay, &v, &b);
                assert_true(a.p.mem.total == b.p.mem.total);
                assert_true(b.p.step_time_s >=
                            (a.p.step_time_s - a.p.time.dp_comm) * (1.0 - 1e-12));
            }
            /* whole-layer CPU offloading: step time the same for every layer count */
            if (k.off == 2 && c->lay.pp == 1) {
                struct moe_plan_okey v = k;
                predict(&c->sp, &c->lay, &v, &a);
                v.off_layers = (uint16_t)(1 + pick(&c->rng, c->p.cfg.num_layers - 1));
                predict(&c->sp, &c->lay, &v, &b);
                assert_true(a.p.step_time_s == b.p.step_time_s);
            }
        }
        claim_free(c);
    }
}

/* The dominator bound (search_group.c): T(c) >= T(d) - dp_comm(d) for c in d's group; exactly
 * T(c) >= T(d) without interleaving and without 1F1B EP overlap. The same between fine-grained
 * offload sets, a set against its subsets (search_fine), and for the time-only values against
 * the dominant ones: those two exact under EP overlap too (GROW_PASSES). */
static void test_claim_dominator(void **state)
{
    (void)state;
    double ov_max = 0.0;
    int exact = 0;
    int subsets = 0;
    int subsets_ep = 0;
    int variants = 0;
    int held_tight = 0; /* candidates the bound would be wrong for without the reserve term */
    for (int m = 0; m < NUM_CLAIM_MODELS; m++) {
        struct claim_ctx *c = claim_setup(m, 1001 + (uint64_t)m);
        ov_max = fmax(ov_max, c->p.cl.overheads.overlap_eff);
        for (int t = 0; t < TRIALS; t++) {
            struct moe_plan_okey k;
            if (!random_candidate(c, &k)) {
                continue;
            }
            struct moe_plan_okey d = k;
            d.rc = MOE_RECOMPUTE_NONE;
            d.rc_method = 0;
            d.rc_mods = 0;
            d.rc_layers = 0;
            d.off = 0;
            d.off_mods = 0;
            d.off_layers = 0;
            d.tp_overlap = c->lay.sequence_parallel ? 1 : 0;
            d.graph = (uint8_t)c->sp.graph_full_iter;
            struct pred pk;
            struct pred pd;
            predict(&c->sp, &c->lay, &k, &pk);
            predict(&c->sp, &c->lay, &d, &pd);
            assert_true(pk.p.step_time_s >= (pd.p.step_time_s - pd.p.time.dp_comm) * (1 - 1e-12));
            /* the group's memory bound (search_group): the dominator's worst stage less its
             * activations and their share of the allocator reserve */
            double r = c->p.cl.overheads.alloc_reserve_frac;
            double held = pd.p.mem.weights + pd.p.mem.grads + pd.p.mem.optimizer +
                          pd.p.mem.buffers - pd.p.mem.activations * r;
            assert_true(pk.p.mem.total >= held * (1 - 1e-9));
            held_tight += pk.p.mem.total < (held + pd.p.mem.activations * r) * (1 - 1e-9);
            if (c->lay.vpp == 1 && !k.ep_overlap && c->p.cl.overheads.overlap_eff <= 1.0) {
                assert_true(pk.p.step_time_s >= pd.p.step_time_s * (1 - 1e-12));
                exact++;
            }
            /* time-only values (GROW_PASSES): k against k with the dominant TP overlap and CUDA
             * graph is exact without interleaving, EP overlap or not */
            struct moe_plan_okey kx = k;
            kx.tp_overlap = d.tp_overlap;
            kx.graph = d.graph;
            struct pred px;
            predict(&c->sp, &c->lay, &kx, &px);
            if (c->lay.vpp == 1 && c->p.cl.overheads.overlap_eff <= 1.0) {
                assert_true(pk.p.step_time_s >= px.p.step_time_s * (1 - 1e-12));
                variants += k.ep_overlap && (k.tp_overlap != kx.tp_overlap || k.graph != kx.graph);
            }
            /* fine-grained offload: (r, f, X) against (r, g, X) for g contained in f (search_fine)
             */
            if (k.off == 1) {
                struct moe_plan_okey g = k;
                g.off_mods = (uint8_t)(k.off_mods & (unsigned)pick(&c->rng, 256));
                g.off = g.off_mods != 0 ? 1 : 0;
                struct pred pg;
                predict(&c->sp, &c->lay, &g, &pg);
                assert_true(pk.p.step_time_s >=
                            (pg.p.step_time_s - pg.p.time.dp_comm) * (1 - 1e-12));
                /* exact without interleaving, EP overlap or not (GROW_PASSES: the copy is
                 * priced after the EP pairing) */
                if (c->lay.vpp == 1 && c->p.cl.overheads.overlap_eff <= 1.0) {
                    assert_true(pk.p.step_time_s >= pg.p.step_time_s * (1 - 1e-12));
                    subsets++;
                    subsets_ep += k.ep_overlap;
                }
            }
        }
        claim_free(c);
    }
    assert_true(exact > 0);
    assert_true(subsets > 0);
    assert_true(subsets_ep > 0);
    assert_true(variants > 0);
    assert_true(held_tight > 0);
    assert_true(ov_max <= 1.0);
}

/* bound.c: layout and group step-time bounds, static memory and the offload memory bound. */
static void test_claim_bounds(void **state)
{
    (void)state;
    struct moe_plan_layer_terms *terms = calloc(3, sizeof(*terms));
    assert_non_null(terms);
    int supersets = 0;
    for (int m = 0; m < NUM_CLAIM_MODELS; m++) {
        struct claim_ctx *c = claim_setup(m, 7001 + (uint64_t)m);
        for (int t = 0; t < TRIALS; t++) {
            struct moe_plan_okey k;
            if (!random_candidate(c, &k)) {
                continue;
            }
            struct pred pk;
            predict(&c->sp, &c->lay, &k, &pk);
            double load = moe_plan_bound_load(&c->sp, &c->lay);
            moe_plan_bound_terms(&c->sp, &c->bm, &c->lay, load, NULL, terms);
            /* the key phase's shortcut: another ep and etp (ep > 1 alike) copy the dense-layer
             * terms and extras; bit for bit what the full computation gives */
            struct moe_layout other = c->lay;
            other.ep = c->lay.ep > 1 ? (c->lay.ep == 2 ? 4 : c->lay.ep / 2) : 1;
            other.etp = c->lay.etp == 1 ? 2 : 1;
            double other_load = moe_plan_bound_load(&c->sp, &other);
            moe_plan_bound_terms(&c->sp, &c->bm, &other, other_load, NULL, &terms[1]);
            moe_plan_bound_terms(&c->sp, &c->bm, &other, other_load, terms, &terms[2]);
            assert_memory_equal(&terms[1], &terms[2],
                                (size_t)c->sp.num_recipes * sizeof(terms->r[0]));
            struct moe_plan_kind_lb least;
            moe_plan_bound_least(&c->sp, &c->bm, terms, &c->lay, &least);
            double lb = moe_plan_bound_time(&c->sp, &c->bm, &least, &c->lay);
            assert_true(pk.p.step_time_s >= lb * (1 - 1e-12));
            /* the group's own bound */
            int ri = 0;
            int gi = 0;
            int di = 0;
            const uint8_t *disp = c->lay.ep > 1 ? c->sp.dispatchers : c->sp.dispatchers_ep1;
            int nd = c->lay.ep > 1 ? c->sp.num_dispatchers : c->sp.num_dispatchers_ep1;
            for (int i = 0; i < c->sp.num_recipes; i++) {
                ri = c->sp.recipes[i] == k.recipe ? i : ri;
            }
            for (int i = 0; i < c->sp.num_grouped; i++) {
                gi = c->sp.grouped[i] == k.grouped ? i : gi;
            }
            bool listed = false;
            for (int i = 0; i < nd; i++) {
                if (disp[i] == k.dispatcher) {
                    di = i;
                    listed = true;
                }
            }
            if (listed) {
                struct moe_plan_kind_lb g;
                moe_plan_bound_group(&c->sp, &c->bm, terms, ri, gi, di, k.ep_overlap != 0, nd, &g);
                double glb = moe_plan_bound_time(&c->sp, &c->bm, &g, &c->lay);
                assert_true(pk.p.step_time_s >= glb * (1 - 1e-12));
            }
            /* static memory: no stage's weights, gradients and optimizer state below the least */
            struct moe_stage_contents sc;
            moe_mem_stage_contents(&c->p.cfg, &c->lay, pk.p.worst_stage, &sc);
            double st = moe_plan_bound_stage_static(&c->sp, &c->lay, &sc, -1, 0);
            assert_true(pk.p.mem.weights + pk.p.mem.grads + pk.p.mem.optimizer >= st * (1 - 1e-12));
            /* offload memory bound (search_offload.c, offload_bound_of): M(r, f) >= M(r, g) -
             * delta(g) for every superset g of f (the row bound takes every module) */
            if (k.off == 1 && k.rc != MOE_RECOMPUTE_FULL) {
                for (int side = 0; side < 2; side++) {
                    struct moe_plan_okey v = k;
                    v.off_mods = (uint8_t)(side == 0 ? c->sp.fine_all
                                                     : (k.off_mods | ((unsigned)pick(&c->rng, 256) &
                                                                      c->sp.fine_all)));
                    struct pred pall;
                    predict(&c->sp, &c->lay, &v, &pall);
                    struct moe_options opt;
                    moe_plan_okey_apply(&c->sp, &v, &opt);
                    struct moe_act_bytes drc;
                    struct moe_act_bytes mrc;
                    struct moe_act_bytes dall;
                    struct moe_act_bytes mall;
                    double lf = pk.p.load_factor;
                    const unsigned both = MOE_MEM_APPLY_RECOMPUTE | MOE_MEM_APPLY_OFFLOAD;
                    moe_mem_layer_activations(&c->p.cfg, &c->lay, &opt, false, lf,
                                              MOE_MEM_APPLY_RECOMPUTE, &drc);
                    moe_mem_layer_activations(&c->p.cfg, &c->lay, &opt, true, lf,
                                              MOE_MEM_APPLY_RECOMPUTE, &mrc);
                    moe_mem_layer_activations(&c->p.cfg, &c->lay, &opt, false, lf, both, &dall);
                    moe_mem_layer_activations(&c->p.cfg, &c->lay, &opt, true, lf, both, &mall);
                    double delta = 0.0;
                    if (k.rc == MOE_RECOMPUTE_SELECTIVE) {
                        delta =
                            (1.0 + c->p.cl.overheads.alloc_reserve_frac) *
                            fmax(0.0, fmin(drc.total, mrc.total) - fmin(dall.total, mall.total));
                    }
                    assert_true(pk.p.mem.total >= (pall.p.mem.total - delta) * (1 - 1e-12));
                    supersets++;
                }
            }
        }
        claim_free(c);
    }
    free(terms);
    assert_true(supersets > 50);
}

/* The pairwise validity decomposition agrees with a full resolve. */
static void test_claim_validity(void **state)
{
    (void)state;
    int valid = 0;
    int total = 0;
    for (int m = 0; m < NUM_CLAIM_MODELS; m++) {
        struct claim_ctx *c = claim_setup(m, 31 + (uint64_t)m);
        struct moe_plan_valid_cache *vc = moe_plan_valid_cache_create(12);
        assert_non_null(vc);
        for (int t = 0; t < 4 * TRIALS; t++) {
            if (!random_layout(&c->rng, &c->sp, &c->lay)) {
                continue;
            }
            struct moe_plan_okey k;
            random_okey(&c->rng, &c->sp, &c->lay, &k);
            bool full = moe_plan_valid_full(&c->sp, &c->lay, &k);
            bool cached = moe_plan_valid(vc, &c->sp, &c->lay, &k, NULL);
            if (full != cached) {
                struct moe_options o;
                moe_plan_okey_apply(&c->sp, &k, &o);
                struct moe_diag d = {0};
                struct moe_layout l = c->lay;
                enum moe_status st = moe_layout_resolve(&c->p.cfg, &c->p.cl, &o, &l, &d);
                fprintf(stderr, "validity mismatch (%s): full %d cached %d: %d %s\n",
                        claim_models[m][0], full, cached, (int)st, d.message);
            }
            assert_int_equal(full, cached);
            valid += full;
            total++;
        }
        moe_plan_valid_cache_destroy(vc);
        claim_free(c);
    }
    assert_true(valid > 0 && valid < total);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exhaustive_dense),
        cmocka_unit_test(test_exhaustive_moe),
        cmocka_unit_test(test_exhaustive_tight),
        cmocka_unit_test(test_exhaustive_slow_host),
        cmocka_unit_test(test_exhaustive_load_stats),
        cmocka_unit_test(test_exhaustive_interleaved),
        cmocka_unit_test(test_threads_deterministic),
        cmocka_unit_test(test_constraints),
        cmocka_unit_test(test_ranking_relations),
        cmocka_unit_test(test_nothing_fits),
        cmocka_unit_test(test_no_layout),
        cmocka_unit_test(test_claim_dominance),
        cmocka_unit_test(test_claim_equivalence),
        cmocka_unit_test(test_claim_dominator),
        cmocka_unit_test(test_claim_bounds),
        cmocka_unit_test(test_claim_validity),
    };
    const char *filter = getenv("MOE_TEST_FILTER"); /* run one test: MOE_TEST_FILTER=name */
    if (filter != NULL) {
        cmocka_set_test_filter(filter);
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
