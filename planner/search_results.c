/*
 * The search's results (planner/search_internal.h): the top list (the best plan of each of the
 * best layouts, ranked by closed-form step time, ties in knob order; it keeps 2 top_k + 8 layouts,
 * since the simulated schedule re-ranks them), the plans offered to the Pareto front, the plan
 * with the least memory when nothing fits, and at the end every kept entry rebuilt as a plan and
 * predicted again (the top list also with the event-simulated schedule).
 *
 * A list holds only what was proved: a plan the cached validity let through is confirmed by a
 * full resolve before it can change a result (offer_fit; validity_mismatches counts the
 * refusals, 0), and every prediction is checked against its layout's bound (bound_violations, 0).
 */
#include "planner/search_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static void atomic_min_double(_Atomic double *a, double v)
{
    double cur = atomic_load(a);
    while (v < cur && !atomic_compare_exchange_weak(a, &cur, v)) {
    }
}

void moe_search_offer_top(struct search *s, const struct entry *e)
{
    struct shared *sh = &s->sh;
    pthread_mutex_lock(&sh->mu);
    int n = sh->num_top;
    if (n < sh->keep || entry_cmp(e, &sh->top[n - 1]) < 0) {
        int pos = n < sh->keep ? n : n - 1;
        while (pos > 0 && entry_cmp(e, &sh->top[pos - 1]) < 0) {
            sh->top[pos] = sh->top[pos - 1];
            pos--;
        }
        sh->top[pos] = *e;
        sh->num_top = n < sh->keep ? n + 1 : n;
        if (sh->num_top == sh->keep) {
            atomic_store(&sh->tk, sh->top[sh->keep - 1].t);
        }
    }
    pthread_mutex_unlock(&sh->mu);
}

/* A fitting plan the cached validity accepts was evaluated: before it can change a result it is
 * checked once more with a full resolve. */
static void offer_fit(struct worker *w, const struct entry *e)
{
    struct search *s = w->s;
    bool better = !w->has_best || entry_cmp(e, &w->best) < 0;
    bool pareto = s->req->pareto_window > 0.0 && moe_search_pareto_open(w, e->t, e->m);
    if (!better && !pareto) {
        return;
    }
    if (!moe_search_valid_full(w, &e->ok)) {
        w->c.validity_mismatches++;
        return;
    }
    if (better) {
        w->best = *e;
        w->has_best = true;
    }
    atomic_min_double(&s->sh.t1, e->t);
    if (pareto) {
        bool added;
        pthread_mutex_lock(&s->sh.mu);
        if (!moe_search_pareto_insert(&s->sh, e, &added)) {
            atomic_store(&s->sh.failed, true);
        }
        pthread_mutex_unlock(&s->sh.mu);
        w->on_front = w->on_front || added;
    }
}

/* Closest pass: a valid plan with less memory than any seen. */
void moe_search_offer_closest(struct worker *w, const struct entry *e)
{
    struct shared *sh = &w->s->sh;
    pthread_mutex_lock(&sh->mu);
    if (!sh->has_closest || e->m < sh->closest.m ||
        (e->m == sh->closest.m && key_cmp(e, &sh->closest) < 0)) {
        sh->closest = *e;
        sh->has_closest = true;
        atomic_store(&sh->best_m, e->m);
    }
    pthread_mutex_unlock(&sh->mu);
}

static bool fits_pred(const struct search *s, const struct moe_prediction *p)
{
    return p->fits && p->mem.total <= s->cap;
}

/* A valid candidate's prediction must respect the bounds the search used on its layout. */
static void check_bound(struct worker *w, const struct moe_prediction *out)
{
    if (out->step_time_s < w->layout_lb * (1.0 - 1e-9)) {
        atomic_fetch_add(&w->s->sh.violations, 1);
    }
}

/* Record a valid evaluated plan. */
void moe_search_record(struct worker *w,
                       const struct moe_plan_okey *k,
                       const struct moe_prediction *p)
{
    check_bound(w, p);
    if (fits_pred(w->s, p)) {
        struct entry e = {w->lk, *k, p->step_time_s, p->mem.total};
        offer_fit(w, &e);
    }
}

/* Rebuild a plan from its keys and predict it (closed form, and simulated when sim). */
static enum moe_status materialize(struct search *s,
                                   const struct entry *e,
                                   bool sim,
                                   struct moe_plan_candidate *out,
                                   struct moe_diag *diag)
{
    memset(out, 0, sizeof(*out));
    moe_plan_lkey_apply(&s->sp, &e->lk, &out->lay);
    moe_plan_okey_apply(&s->sp, &e->ok, &out->opt);
    MOE_TRY(moe_layout_resolve(s->req->cfg, s->req->cl, &out->opt, &out->lay, diag));
    struct moe_load_stats stats;
    bool used = false;
    if (s->req->load_fn != NULL) {
        MOE_TRY(s->req->load_fn(s->req->load_ctx, &out->lay, &stats, &used, diag));
    }
    enum moe_schedule_mode mode = sim ? MOE_SCHED_SIMULATE : MOE_SCHED_CLOSED_FORM;
    size_t need = moe_cost_workspace_bytes(&out->lay, mode);
    void *ws = malloc(need > 0 ? need : 1);
    if (ws == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for a prediction");
    }
    const struct moe_load_stats *ls = used ? &stats : NULL;
    enum moe_status st = moe_cost_predict(s->req->cfg, s->req->cl, &out->lay, &out->opt, ls,
                                          MOE_SCHED_CLOSED_FORM, ws, need, &out->pred, diag);
    if (st == MOE_OK && sim) {
        st = moe_cost_predict(s->req->cfg, s->req->cl, &out->lay, &out->opt, ls, MOE_SCHED_SIMULATE,
                              ws, need, &out->sim, diag);
        out->has_sim = st == MOE_OK;
    }
    free(ws);
    out->fits = fits_pred(s, &out->pred);
    return st;
}

static int cand_sim_cmp(const void *pa, const void *pb)
{
    const struct moe_plan_candidate *a = pa;
    const struct moe_plan_candidate *b = pb;
    double ta = a->has_sim ? a->sim.step_time_s : a->pred.step_time_s;
    double tb = b->has_sim ? b->sim.step_time_s : b->pred.step_time_s;
    if (ta != tb) {
        return ta < tb ? -1 : 1;
    }
    return moe_plan_knob_cmp(&a->lay, &a->opt, &b->lay, &b->opt);
}

enum moe_status
moe_search_collect(struct search *s, struct moe_plan_result *res, struct moe_diag *diag)
{
    const struct moe_plan_request *req = s->req;
    struct shared *sh = &s->sh;
    if (sh->num_top > 0) {
        res->top = calloc((size_t)sh->num_top, sizeof(*res->top));
        if (res->top == NULL) {
            return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the results");
        }
        for (int i = 0; i < sh->num_top; i++) {
            MOE_TRY(materialize(s, &sh->top[i], true, &res->top[i], diag));
        }
        /* Re-rank by the simulated schedule; keep top_k. */
        qsort(res->top, (size_t)sh->num_top, sizeof(*res->top), cand_sim_cmp);
        res->num_top = sh->num_top < req->top_k ? sh->num_top : req->top_k;
    }
    double t1 = atomic_load(&sh->t1);
    if (req->pareto_window > 0.0 && sh->num_pareto > 0) {
        res->pareto = calloc((size_t)sh->num_pareto, sizeof(*res->pareto));
        if (res->pareto == NULL) {
            return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the results");
        }
        for (int i = 0; i < sh->num_pareto; i++) {
            if (sh->pareto[i].t > req->pareto_window * t1) {
                continue;
            }
            MOE_TRY(materialize(s, &sh->pareto[i], false, &res->pareto[res->num_pareto], diag));
            res->num_pareto++;
        }
    }
    if (sh->num_top == 0 && sh->has_closest) {
        MOE_TRY(materialize(s, &sh->closest, true, &res->closest, diag));
        res->has_closest = true;
        res->closest_excess_bytes = res->closest.pred.mem.total - s->cap;
    }
    return MOE_OK;
}
