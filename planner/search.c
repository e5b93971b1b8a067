/*
 * The planner's search (planner/search.h): enumerate layouts best-first by a step-time lower
 * bound, and for each layout every option group, with exact pruning (memory and time lower bounds,
 * dominance, equivalence), on all cores. This file holds the entry point: it checks the request,
 * sets up the search and runs its phases; each concern lives in its own file, behind
 * planner/search_internal.h (which defines the words the comments use).
 *
 * Structure. Sizes (tp, cp, pp, sequence parallelism, ep, etp) are generated and dropped when no
 * placement of the layers fits their weights, gradients and optimizer state; with each micro-batch
 * size they form the search's nodes, each with the bound of its best vpp and placement (bound.c),
 * sorted ascending. Worker threads take nodes in that order, except for the leaner neighbours of
 * nodes with plans on the Pareto front, which go first; for each vpp and placement a layout is
 * built, resolved (moe_layout_resolve) and searched:
 *   group    recipe x optimizer (distributed, CPU offload) x dispatcher x grouped GEMM x EP
 *            overlap; its dominator d (no recompute, no activation offload, TP overlap on,
 *            full-iteration CUDA graph) is predicted first;
 *   recompute  every value r, with no activation offload;
 *   offload  every value f under each r;
 *   X        the other TP-overlap and CUDA-graph values of each evaluated (r, f).
 *
 * The phases (search_threads.c runs each on every worker):
 *   1 keys     per-layer bounds of each size key          search_nodes.c
 *   2 nodes    each node's bound over its vpp values       search_nodes.c
 *   3 search   nodes in order, their layouts and options   search_order.c, search_layout.c,
 *              (what can still reach the top list or the   search_group.c, search_offload.c,
 *              front; every bound goes through prune)      search_memory.c, search_valid.c,
 *                                                          search_front.c, search_results.c
 *   4 closest  only when nothing fits: the plan with the   search_layout.c
 *              least memory
 * then the top list and the front are rebuilt as plans and predicted again (search_results.c).
 */
#include "planner/search.h"

#include "planner/search_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GIB 1073741824.0

/* The factors of option_space_size that do not depend on the layout. */
static void space_sizes_init(struct search *s)
{
    const struct moe_plan_space *sp = &s->sp;
    const struct moe_model_cfg *cfg = s->req->cfg;
    s->rc_all = 0;
    for (int i = 0; i < sp->num_rc; i++) {
        s->rc_all += sp->rcs[i].rc == MOE_RECOMPUTE_FULL && sp->rcs[i].layers == 0;
    }
    s->off_size = 0.0;
    for (int i = 0; i < sp->num_off; i++) {
        s->off_size +=
            sp->offs[i].off == 2 && sp->offs[i].layers == 0 ? (double)(cfg->num_layers - 1) : 1.0;
    }
    /* FP8 parameter gather and the two DP overlaps are settled by dominance and delay-wgrad
     * follows the EP overlap: each doubles the space it stands for. */
    s->dom_size = (sp->fp8_param_gather_fixed ? 1.0 : 2.0) * (sp->overlap_grad_fixed ? 1.0 : 2.0) *
                  (sp->overlap_param_fixed ? 1.0 : 2.0) *
                  (moe_plan_space_fixed(sp, MOE_PK_EP_OVERLAP) ? 1.0 : 2.0);
}

static int popcount8(unsigned v)
{
    int n = 0;
    for (; v != 0u; v &= v - 1u) {
        n++;
    }
    return n;
}

/* The fine-grained offload values by module count, descending (ties in knob order). */
static void fine_order_init(struct search *s)
{
    const struct moe_plan_space *sp = &s->sp;
    s->num_fine_order = 0;
    for (int c = 8; c >= 1; c--) {
        for (int fi = 0; fi < sp->num_off; fi++) {
            if (sp->offs[fi].off == 1 && popcount8(sp->offs[fi].mods) == c) {
                s->fine_order[s->num_fine_order++] = fi;
            }
        }
    }
}

void moe_plan_request_init(struct moe_plan_request *req)
{
    memset(req, 0, sizeof(*req));
    moe_layout_init(&req->lay);
    moe_options_init(&req->opt);
    req->top_k = 10;
    req->pareto_window = 1.5;
}

void moe_plan_result_free(struct moe_plan_result *res)
{
    if (res == NULL) {
        return;
    }
    free(res->top);
    free(res->pareto);
    memset(res, 0, sizeof(*res));
}

static enum moe_status check_request(const struct moe_plan_request *req, struct moe_diag *diag)
{
    if (req->cfg == NULL || req->cl == NULL) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "the planner needs a model and a cluster");
    }
    if (req->num_gpus < 1 || req->gbs < 1 || req->seq_length < 1) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "the planner needs --gpus, --global-batch-size and --seq-length "
                            "(got %d, %d, %d)",
                            req->num_gpus, req->gbs, req->seq_length);
    }
    if (req->top_k < 1 || req->top_k > 1000 || req->num_threads < 0 ||
        req->num_threads > MAX_THREADS) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "top-k %d must be in [1, 1000], threads %d in [0, %d]", req->top_k,
                            req->num_threads, MAX_THREADS);
    }
    if (req->pareto_window != 0.0 && !(req->pareto_window >= 1.0)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "the Pareto window %g must be >= 1 (or 0 for none)",
                            req->pareto_window);
    }
    return MOE_OK;
}

static void shared_init(struct shared *sh, int keep)
{
    memset(sh, 0, sizeof(*sh));
    pthread_mutex_init(&sh->mu, NULL);
    atomic_init(&sh->t1, INFINITY);
    atomic_init(&sh->tk, INFINITY);
    atomic_init(&sh->best_m, INFINITY);
    atomic_init(&sh->next, 0);
    atomic_init(&sh->done, 0);
    atomic_init(&sh->failed, false);
    atomic_init(&sh->violations, 0);
    atomic_init(&sh->pareto_version, 0);
    atomic_init(&sh->faster, 0);
    sh->keep = keep;
}

static enum moe_status search_run(struct search *s,
                                  struct worker *ws,
                                  int nthreads,
                                  double t0,
                                  struct moe_plan_result *res,
                                  struct moe_diag *diag)
{
    MOE_TRY(moe_search_build_nodes(s, diag));
    if (s->num_nodes == 0) {
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "no parallel sizes divide %d GPUs with global batch %d and sequence "
                            "length %d under the given constraints; relax --fix or change the "
                            "batch",
                            s->req->num_gpus, s->req->gbs, s->req->seq_length);
    }
    MOE_TRY(moe_search_placement_tables(s, ws[0].pl, diag));
    if (moe_search_key_order_init(s) != MOE_OK) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the planner's nodes");
    }
    MOE_TRY(moe_search_run_phase(s, ws, nthreads, PHASE_KEYS, t0));
    MOE_TRY(moe_search_run_phase(s, ws, nthreads, PHASE_NODES, t0));
    qsort(s->nodes, (size_t)s->num_nodes, sizeof(*s->nodes), moe_search_node_cmp);
    if (moe_search_order_init(s) != MOE_OK) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the planner's nodes");
    }
    MOE_TRY(moe_search_run_phase(s, ws, nthreads, PHASE_SEARCH, t0));
    for (int i = 0; i < nthreads; i++) {
        moe_search_sum_counters(&res->stats, &ws[i].c);
    }
    if (s->sh.num_top == 0) {
        /* Nothing fits: find the plan with the least memory (smallest static bound first). */
        qsort(s->nodes, (size_t)s->num_nodes, sizeof(*s->nodes), moe_search_node_mem_cmp);
        MOE_TRY(moe_search_run_phase(s, ws, nthreads, PHASE_CLOSEST, t0));
        if (res->stats.layouts == 0 && !s->sh.has_closest) {
            return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                                "no valid layout for %d GPUs, global batch %d, sequence length %d "
                                "under the given constraints; relax --fix or change the batch",
                                s->req->num_gpus, s->req->gbs, s->req->seq_length);
        }
    }
    res->stats.threads = nthreads;
    res->stats.bound_violations = atomic_load(&s->sh.violations);
    res->num_faster = atomic_load(&s->sh.faster);
    return moe_search_collect(s, res, diag);
}

enum moe_status moe_plan_search(const struct moe_plan_request *req,
                                struct moe_plan_result *res,
                                struct moe_diag *diag)
{
    memset(res, 0, sizeof(*res));
    MOE_TRY(check_request(req, diag));
    double t0 = moe_search_now_s();
    struct search *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the planner");
    }
    s->req = req;
    enum moe_status st = moe_plan_space_init(&s->sp, req, diag);
    if (st != MOE_OK) {
        free(s);
        return st;
    }
    moe_plan_bound_model_init(req->cfg, &s->bm);
    moe_cost_prepare(req->cfg, &s->prep);
    /* The search reads a prediction's mean step time and memory only (never its p50 / p99 step
     * times): under load statistics that skips two of each prediction's three step times. The
     * plans of the result are predicted again in full (search_results.c materialize). */
    s->prep.mean_only = true;
    s->prep.memo_cl = req->cl; /* unchanged during the search */
    fine_order_init(s);
    space_sizes_init(s);
    s->cap = req->cl->gpu.hbm_gib * GIB;
    if (req->max_memory_bytes > 0.0 && req->max_memory_bytes < s->cap) {
        s->cap = req->max_memory_bytes;
    }
    s->host_cap = req->cl->host.mem_gib_per_gpu * GIB;
    s->ctx_bytes = req->cl->overheads.context_gib * GIB;
    res->cap_bytes = s->cap;
    shared_init(&s->sh, req->top_k * 2 + 8);
    s->sh.top = calloc((size_t)s->sh.keep, sizeof(*s->sh.top));
    int nthreads = req->num_threads > 0 ? req->num_threads : moe_search_online_cpus();
    nthreads = nthreads > MAX_THREADS ? MAX_THREADS : nthreads;
    struct worker *ws = s->sh.top != NULL ? moe_search_workers_create(s, nthreads) : NULL;
    if (ws == NULL) {
        st = moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the planner's workers");
    } else {
        st = search_run(s, ws, nthreads, t0, res, diag);
        if (st == MOE_ERR_NOMEM && diag != NULL && diag->message[0] == '\0') {
            (void)moe_diag_set(diag, st, "the planner ran out of memory");
        }
    }
    res->stats.wall_s = moe_search_now_s() - t0;
    moe_search_workers_free(ws, nthreads);
    pthread_mutex_destroy(&s->sh.mu);
    free(s->sh.top);
    free(s->sh.pareto);
    for (int i = 0; i < s->num_ptables; i++) {
        free(s->ptables[i].pl);
    }
    free(s->ptables);
    free(s->keys);
    free(s->key_order);
    free(s->nodes);
    moe_search_order_free(&s->order);
    free(s);
    if (st != MOE_OK) {
        moe_plan_result_free(res);
    }
    return st;
}
