/*
 * Option groups of the current layout (planner/search_internal.h): for each group, its dominator
 * d first, then every recompute value r without activation offload, then (search_offload.c) every
 * offload value f under each r; for each evaluated (r, f) the other time-only values X. Values of
 * "every layer count" are expanded here (moe_search_eval_expanded).
 *
 * The dominator bound. For every candidate c of a group, the per-pass time of each layer, as
 * model/cost.c composes it, is at least d's: recompute and offload copies only add GPU time, TP
 * overlap off keeps more TP traffic, CUDA graphs other than full iteration keep host launches and
 * the dropless sync, which only add (a pass costs max(GPU, host) + sync); with 1F1B EP overlap
 * more recompute can hide more EP traffic in one direction, but the pass pair's sum still grows by
 * recompute * (1 - ep_overlap_eff * (1 - loss)) >= 0. The closed-form schedule grows with every
 * rank's sum, so T_pipe(c) >= T_pipe(d). The DP tail of a rank may shrink when its passes grow
 * (more to overlap with), but never below the rank's optimizer time, which c and d share; hence
 *   T(c) >= T_pipe(d) + max_p opt_p + fixed >= T(d) - dp_comm(d),
 * where dp_comm(d) is the exposed DP time d's prediction reports. The same holds for (r, none, X*)
 * over (r, f, X) and for (r, f, X*) over (r, f, X). When dp_comm is 0 the dominated candidates are
 * never faster, and sort after the dominator on ties (space.c orders dominant values first), so
 * they are skipped without evaluation; moe_search_dominance_slack gives the slack in each case.
 *
 * A recompute row has a tighter bound from the recompute it adds to every rank (rc_bound), and a
 * group one from its per-layer terms before its dominator is predicted (moe_search_options).
 */
#include "planner/search_internal.h"

#include <math.h>
#include <string.h>

/* Predict opt on the current layout (closed form, with its expert-load statistics); counted. */
bool moe_search_predict(struct worker *w, const struct moe_options *opt, struct moe_prediction *out)
{
    enum moe_status st = moe_cost_predict_prepared(
        &w->s->prep, w->s->req->cl, &w->lay, opt, w->has_stats ? &w->stats : NULL,
        MOE_SCHED_CLOSED_FORM, w->ws, w->ws_bytes, out, NULL);
    w->c.evaluated++;
    return st == MOE_OK;
}

/* Every bound a candidate was kept or skipped with must hold for it; counted when it does not. */
void moe_search_check_lb(struct worker *w, double lb, const struct moe_prediction *p)
{
    if (p->step_time_s < lb * (1.0 - 1e-9)) {
        atomic_fetch_add(&w->s->sh.violations, 1);
    }
}

/* The local twin of a transformer_engine CUDA-graph value (same modules), or -1. */
static int graph_local_twin(const struct moe_plan_space *sp, int g)
{
    if (sp->graphs[g].impl != MOE_CG_TE) {
        return -1;
    }
    for (int i = 0; i < sp->num_graphs; i++) {
        if (sp->graphs[i].impl == MOE_CG_LOCAL && sp->graphs[i].modules == sp->graphs[g].modules) {
            return i;
        }
    }
    return -1;
}

/*
 * How much faster than its dominator d a dominated candidate can be (see the file comment): its
 * rank tails may shrink by at most d's exposed DP time. Without interleaving and without 1F1B EP
 * overlap (in the group), every pass of a dominated candidate is no shorter in either direction,
 * and the closed-form schedule then grows by at least the sum of the ranks' growth, more than the
 * tail can lose (overlap_eff <= 1): no slack at all.
 *
 * Two kinds of growth keep that property under EP overlap too (GROW_PASSES), because neither
 * touches the compute or expert time the 1F1B EP overlap pairs dispatch and combine against
 * (model/cost.c layer_exposed): the time-only knobs (TP overlap off adds exposed TP traffic, CUDA
 * graphs other than full iteration add host launches and the dropless sync; a pass costs
 * max(GPU, host) + sync), and more fine-grained offload (its copy time is added to the pass after
 * the EP pairing is priced). No pass of such a candidate is shorter in either direction.
 *
 * With interleaving, the same holds for candidates whose growth is confined to kinds whose every
 * rank grows enough: if each layer of kind k grows by e_k >= 0, rank p by sum_k n_pk e_k, the
 * closed form grows by at least (m - 1/vpp) min_p + sum_p / vpp of those, and the tails lose at
 * most overlap_eff max_p; that is >= sum_k e_k g_k with
 *   g_k = (m - 1/vpp) min_p n_pk + N_k / vpp - overlap_eff max_p n_pk,
 * so the candidate is no faster when g_k >= 0 for each kind that grows. grows is a bit set of
 * those kinds (GROW_EXTRAS: embedding, loss and MTP extras, which only TP overlap changes).
 */
double moe_search_dominance_slack(const struct worker *w,
                                  const struct moe_plan_okey *d,
                                  const struct moe_prediction *p,
                                  unsigned grows)
{
    double ov = w->s->req->cl->overheads.overlap_eff;
    double dp = p->time.dp_comm > 0.0 ? p->time.dp_comm : 0.0;
    if (dp == 0.0) {
        return 0.0;
    }
    if ((d->ep_overlap && !(grows & GROW_PASSES)) || ov > 1.0) {
        return dp;
    }
    if (w->lay.vpp == 1) {
        return 0.0;
    }
    return (grows & GROW_ALL & ~w->grow_ok) != 0 ? dp : 0.0;
}

/* Which growth kinds satisfy g_k >= 0 on the current layout (moe_search_dominance_slack). */
unsigned moe_search_grow_ok_mask(const struct worker *w)
{
    const struct moe_layout *lay = &w->lay;
    double ov = w->s->req->cl->overheads.overlap_eff;
    double m = lay->num_microbatches;
    int last = w->s->bm.last_moe * 2 + w->s->bm.last_win;
    unsigned ok = 0;
    for (int k = 0; k <= MOE_PLAN_KINDS; k++) {
        double lo = INFINITY;
        double hi = 0.0;
        double total = 0.0;
        for (int p = 0; p < lay->pp; p++) {
            double n;
            if (k < MOE_PLAN_KINDS) {
                n = w->kinds[p][k] + (k == last ? w->mtp[p] : 0);
            } else {
                n = w->sc[p].has_embedding + w->sc[p].has_loss + w->mtp[p];
            }
            lo = fmin(lo, n);
            hi = fmax(hi, n);
            total += n;
        }
        double g = (m - 1.0 / lay->vpp) * lo + total / lay->vpp - ov * hi;
        if (g >= 0.0) {
            ok |= 1u << k;
        }
    }
    return ok;
}

/* The other TP-overlap / CUDA-graph values of an evaluated (r, f): each is dominated by it and
 * has the same memory. */
static void
x_variants(struct worker *w, const struct moe_plan_okey *base, const struct moe_prediction *p)
{
    const struct xlist *xl = &w->xl;
    if (xl->n <= 1) {
        return;
    }
    double slack = moe_search_dominance_slack(w, base, p, GROW_ALL | GROW_PASSES);
    if (slack <= 0.0 && !w->s->req->exhaustive) {
        return; /* never faster, same memory, later in the knob order */
    }
    const struct moe_plan_space *sp = &w->s->sp;
    double lb = p->step_time_s - slack;
    if (moe_search_prune(w, lb, p->mem.total, NULL)) {
        w->c.pruned_time += w->xunit * (xl->n - 1); /* whatever their knobs */
        return;
    }
    for (int i = 0; i < xl->n; i++) {
        if (i == xl->dom) {
            continue;
        }
        struct moe_plan_okey k = *base;
        k.tp_overlap = xl->tp[i];
        k.graph = xl->graph[i];
        int twin = graph_local_twin(sp, k.graph);
        if (twin >= 0) {
            struct moe_plan_okey t = k;
            t.graph = (uint8_t)twin;
            if (moe_search_valid(w, &t)) {
                continue; /* identical to its local twin, which sorts first */
            }
        }
        if (!moe_search_valid(w, &k)) {
            w->c.invalid += w->xunit;
            continue;
        }
        if (moe_search_prune(w, lb, p->mem.total, &k)) {
            w->c.pruned_time += w->xunit;
            continue;
        }
        struct moe_options opt;
        moe_plan_okey_apply(sp, &k, &opt);
        struct moe_prediction px;
        if (moe_search_predict(w, &opt, &px)) {
            moe_search_check_lb(w, lb, &px);
            moe_search_record(w, &k, &px);
        }
    }
}

/* moe_search_eval_candidate of a key already found valid and not pruned. */
static bool eval_valid_candidate(struct worker *w,
                                 const struct moe_plan_okey *k,
                                 double lb,
                                 const struct memo *mem,
                                 struct moe_prediction *p)
{
    struct moe_options opt;
    moe_plan_okey_apply(&w->s->sp, k, &opt);
    if (!moe_search_predict(w, &opt, p)) {
        return false;
    }
    moe_search_check_lb(w, lb, p);
    if (fabs(p->mem.total - mem->total) > 1e-9 * p->mem.total) {
        w->c.memory_mismatches++;
    }
    moe_search_record(w, k, p);
    x_variants(w, k, p);
    return true;
}

/* Evaluate candidate k (dominant X) with bound lb on its step time and its memory known:
 * predict it when it can matter, then its X variants. True (and *p) when predicted. */
bool moe_search_eval_candidate(struct worker *w,
                               const struct moe_plan_okey *k,
                               double lb,
                               const struct memo *mem,
                               struct moe_prediction *p)
{
    if (moe_search_prune(w, lb, mem->total, k)) {
        w->c.pruned_time += w->leaf;
        return false;
    }
    if (!moe_search_valid(w, k)) {
        w->c.invalid += w->leaf;
        return false;
    }
    return eval_valid_candidate(w, k, lb, mem, p);
}

/* Layer counts a value with "every layer count" (full recompute, CPU offloading) expands to. */
int moe_search_layer_choices(const struct worker *w, const struct moe_plan_okey *k, bool rc)
{
    const struct moe_model_cfg *cfg = w->s->req->cfg;
    if (rc) {
        return k->rc == MOE_RECOMPUTE_FULL && k->rc_layers == 0 ? cfg->num_layers / w->lay.pp : 0;
    }
    return k->off == 2 && k->off_layers == 0 ? cfg->num_layers - 1 : 0;
}

/* Values an entry of the recompute / offload list stands for ("every layer count" expanded). */
double moe_search_rc_mult(const struct worker *w, int ri)
{
    const struct moe_plan_rc *r = &w->s->sp.rcs[ri];
    return r->rc == MOE_RECOMPUTE_FULL && r->layers == 0
               ? (double)(w->s->req->cfg->num_layers / w->lay.pp)
               : 1.0;
}

double moe_search_off_mult(const struct worker *w, int fi)
{
    const struct moe_plan_off *f = &w->s->sp.offs[fi];
    return f->off == 2 && f->layers == 0 ? (double)(w->s->req->cfg->num_layers - 1) : 1.0;
}

static double expansion_count(const struct worker *w, const struct moe_plan_okey *k)
{
    int n = moe_search_layer_choices(w, k, true) + moe_search_layer_choices(w, k, false);
    return n > 0 ? (double)n : 1.0;
}

/* Better for the memory side: fitting first, then less memory (ties keep the earlier key). */
static bool memo_better(const struct search *s, const struct memo *a, const struct memo *b)
{
    bool fa = moe_search_memo_fits(s, a);
    bool fb = moe_search_memo_fits(s, b);
    if (fa != fb) {
        return fa;
    }
    return a->total < b->total;
}

/* Recompute time of layers [lo, lo + m) of the decoder: each layer at its kind's per-layer bound
 * r[] (dense/MoE x full/windowed attention, the prefix counts of bound.h). */
static double first_layers_rc(const struct moe_plan_bound_model *bm, int lo, int m, const double *r)
{
    int hi = lo + m < MOE_MAX_LAYERS ? lo + m : MOE_MAX_LAYERS;
    if (hi <= lo) {
        return 0.0;
    }
    int moe = bm->prefix_moe[hi] - bm->prefix_moe[lo];
    int win = bm->prefix_win[hi] - bm->prefix_win[lo];
    int both = bm->prefix_both[hi] - bm->prefix_both[lo];
    return both * r[3] + (moe - both) * r[2] + (win - both) * r[1] +
           ((hi - lo) - moe - win + both) * r[0];
}

/*
 * rc_bound (exact) of the row's block-recompute value for one layer count: every non-empty
 * chunk re-runs its first min(its layers, count) layers, each at its own kind's recompute
 * (first_layers_rc).
 * -INFINITY when no row is set (the caller's bound stands alone).
 */
static double block_count_bound(struct worker *w, int count)
{
    if (w->blk_ri < 0) {
        return -INFINITY;
    }
    const struct search *s = w->s;
    const struct moe_layout *lay = &w->lay;
    const struct moe_cluster *cl = s->req->cl;
    const struct moe_plan_okey *dom = w->blk_dom;
    const struct moe_prediction *pd = w->blk_pd;
    int g = w->group_gi;
    double r[MOE_PLAN_KINDS];
    double r_min = INFINITY;
    for (int k = 0; k < MOE_PLAN_KINDS; k++) {
        r[k] = moe_plan_bound_rc_layer(&w->rc_terms[g], &s->sp.rcs[w->blk_ri], k);
        if (s->bm.kinds_total[k >> 1][k & 1] > 0) {
            r_min = fmin(r_min, r[k]);
        }
    }
    if (!isfinite(r_min)) {
        return -INFINITY;
    }
    int last = s->bm.last_moe * 2 + s->bm.last_win;
    double sum = 0.0;
    double lo = INFINITY;
    double hi = 0.0;
    for (int p = 0; p < lay->pp; p++) {
        double low = 0.0;
        for (int c = p; c < lay->num_chunks; c += lay->pp) {
            int n = lay->chunks[c].num_layers;
            low += first_layers_rc(&s->bm, lay->chunks[c].first_layer, n < count ? n : count, r);
        }
        double raw = w->mtp[p] * r[last]; /* every layer re-run: what the DP tail hides behind */
        for (int k = 0; k < MOE_PLAN_KINDS; k++) {
            raw += w->kinds[p][k] * r[k];
        }
        sum += low;
        lo = fmin(lo, low);
        hi = fmax(hi, raw);
    }
    double eo = cl->overheads.ep_overlap_eff;
    double fac = dom->ep_overlap ? fmax(0.0, 1.0 - eo) : 1.0;
    double m = lay->num_microbatches;
    double grow = (m - 1.0 / lay->vpp) * (lo * fac) + (sum * fac) / lay->vpp;
    double dp = pd->time.dp_comm > 0.0 ? pd->time.dp_comm : 0.0;
    double ov = cl->overheads.overlap_eff;
    double tail = fmin(dp, ov * (dom->ep_overlap ? 2.0 : 1.0) * hi);
    return pd->step_time_s + grow - tail;
}

/* Every valid layer count of block recompute value k (bound lb holds for all: the least count
 * re-runs the least). Out: the prediction and memory of the least valid count when it was
 * evaluated -- a bound on every count, since re-running more layers never takes less time (the
 * caller bounds the row's offload variants with it); false otherwise. */
static bool eval_block_counts(struct worker *w,
                              const struct moe_plan_okey *k,
                              int n,
                              double lb,
                              struct moe_prediction *p,
                              struct memo *mem_out)
{
    const struct moe_plan_space *sp = &w->s->sp;
    bool least = false;
    bool first = true;
    double lb_i = lb; /* a count's step time bounds every larger count's */
    /* and the largest count's memory every smaller count's: re-running more layers keeps less */
    double m_min = -1.0;
    for (int i = n; i >= 1 && m_min < 0.0; i--) {
        struct moe_plan_okey v = *k;
        v.rc_layers = (uint16_t)i;
        if (moe_search_valid(w, &v)) {
            struct moe_options opt;
            moe_plan_okey_apply(sp, &v, &opt);
            struct memo m;
            moe_search_memory_of(w, &opt, &m);
            m_min = m.total;
        }
    }
    if (m_min < 0.0) {
        w->c.invalid += w->leaf * n;
        return false;
    }
    for (int i = 1; i <= n; i++) {
        struct moe_plan_okey v = *k;
        v.rc_layers = (uint16_t)i; /* sorts before every larger count */
        if (moe_search_prune(w, lb_i, m_min, &v)) {
            w->c.pruned_time += w->leaf * (n - i + 1); /* and so is every larger count */
            break;
        }
        /* the cheap tests first: this count's time bound, its memory, then its validity */
        double lb_c = fmax(lb_i, block_count_bound(w, i));
        struct memo m;
        bool pruned = moe_search_prune(w, lb_c, m_min, &v);
        if (!pruned) {
            struct moe_options opt;
            moe_plan_okey_apply(sp, &v, &opt);
            moe_search_memory_of(w, &opt, &m);
            pruned = moe_search_prune(w, lb_c, m.total, &v);
        }
        if (pruned) {
            w->c.pruned_time += w->leaf;
            first = false;
            continue;
        }
        if (!moe_search_valid(w, &v)) {
            w->c.invalid += w->leaf;
            continue;
        }
        struct moe_prediction pi;
        bool ok = eval_valid_candidate(w, &v, lb_c, &m, &pi);
        if (ok) {
            lb_i = fmax(lb_i, pi.step_time_s);
        }
        if (first && ok) {
            *p = pi;
            *mem_out = m;
            least = true;
        }
        first = false;
    }
    return least;
}

/*
 * Evaluate k, expanding "every layer count" values. Uniform full recompute and CPU offloading
 * price every layer whatever the count, so only the count with the least memory (Pareto) and the
 * first fitting count in knob order (top-k: equal times break by key) can reach the results.
 * Block recompute re-runs only the first `count` layers of each chunk: each count is its own
 * time/memory trade-off and is evaluated (eval_block_counts).
 */
bool moe_search_eval_expanded(struct worker *w,
                              const struct moe_plan_okey *k,
                              double lb,
                              double mst,
                              struct moe_prediction *p,
                              struct memo *mem_out)
{
    const struct moe_plan_space *sp = &w->s->sp;
    if (moe_search_prune(w, lb, mst, k)) {
        w->c.pruned_time += w->leaf * expansion_count(w, k);
        return false; /* k sorts before each of its layer counts */
    }
    int nrc = moe_search_layer_choices(w, k, true);
    int noff = moe_search_layer_choices(w, k, false);
    struct moe_options opt;
    if (nrc == 0 && noff == 0) {
        moe_plan_okey_apply(sp, k, &opt);
        moe_search_memory_of(w, &opt, mem_out);
        return moe_search_eval_candidate(w, k, lb, mem_out, p);
    }
    if (nrc > 0 && k->rc_method == MOE_RECOMPUTE_BLOCK) {
        return eval_block_counts(w, k, nrc, lb, p, mem_out);
    }
    int n = nrc > 0 ? nrc : noff;
    struct moe_plan_okey least = *k;
    struct moe_plan_okey first = *k;
    struct memo least_m = {0};
    struct memo first_m = {0};
    bool has_least = false;
    bool has_first = false;
    for (int i = 1; i <= n; i++) {
        struct moe_plan_okey v = *k;
        if (nrc > 0) {
            v.rc_layers = (uint16_t)i;
        } else {
            v.off_layers = (uint16_t)i;
        }
        if (!moe_search_valid(w, &v)) {
            w->c.invalid += w->leaf;
            continue;
        }
        moe_plan_okey_apply(sp, &v, &opt);
        struct memo m;
        moe_search_memory_of(w, &opt, &m);
        if (!has_least || memo_better(w->s, &m, &least_m)) {
            least = v;
            least_m = m;
            has_least = true;
        }
        if (!has_first && moe_search_memo_fits(w->s, &m)) {
            first = v;
            first_m = m;
            has_first = true;
        }
    }
    if (!has_least) {
        return false;
    }
    bool any = false;
    if (has_first && moe_plan_okey_cmp(&first, &least) != 0) {
        any = moe_search_eval_candidate(w, &first, lb, &first_m, p);
        if (any) {
            *mem_out = first_m;
        }
    }
    struct moe_prediction pl;
    if (moe_search_eval_candidate(w, &least, lb, &least_m, &pl)) {
        if (!any) {
            *p = pl;
            *mem_out = least_m;
        }
        any = true;
    }
    return any;
}

/*
 * Bound on the step time of every candidate of the current group with recompute value rc (any
 * offload and time-only values) from the dominator's prediction pd: each rank's passes grow by at
 * least its layers' recompute (times 1 - ep_overlap_eff under 1F1B EP overlap, which may hide EP
 * behind it), so the closed form grows by (m - 1/vpp) * min_p + sum_p / vpp of those growths; the
 * DP tails may shrink by at most pd's exposed DP time, and with the time-only and offload values
 * dominant (exact == true) by at most overlap_eff times the largest growth of a backward pass.
 */
static double rc_bound(struct worker *w,
                       const struct moe_plan_okey *dom,
                       const struct moe_prediction *pd,
                       int ri,
                       bool exact)
{
    const struct search *s = w->s;
    const struct moe_layout *lay = &w->lay;
    const struct moe_cluster *cl = s->req->cl;
    /* The per-rank recompute sums depend on the layout, the recompute terms and the value only. */
    int g = w->group_gi;
    if (w->rcb_serial[g] != w->layout_serial || w->rcb_key[g] != w->rc_key[g]) {
        w->rcb_serial[g] = w->layout_serial;
        w->rcb_key[g] = w->rc_key[g];
        w->rcb_stamp[g]++;
    }
    struct rc_sums *rs = &w->rcb[g * MOE_PLAN_MAX_RC + ri];
    if (rs->stamp != w->rcb_stamp[g]) {
        double r[MOE_PLAN_KINDS];
        double r_min = INFINITY;
        for (int k = 0; k < MOE_PLAN_KINDS; k++) {
            r[k] = moe_plan_bound_rc_layer(&w->rc_terms[g], &s->sp.rcs[ri], k);
            if (s->bm.kinds_total[k >> 1][k & 1] > 0) {
                r_min = fmin(r_min, r[k]);
            }
        }
        /* Block recompute re-runs the first n layers of each chunk (model/cost.c); n >= 1 re-runs
         * at least one layer of every non-empty chunk, and no MTP layer. */
        const struct moe_plan_rc *rcv = &s->sp.rcs[ri];
        bool block = rcv->rc == MOE_RECOMPUTE_FULL && rcv->method == MOE_RECOMPUTE_BLOCK;
        int last = s->bm.last_moe * 2 + s->bm.last_win;
        rs->sum = 0.0;
        rs->min = INFINITY;
        rs->max = 0.0;
        for (int p = 0; p < lay->pp; p++) {
            /* raw: the rank's recompute if every layer is re-run (the most any value re-runs:
             * what the DP tail can hide behind); low: the least (the growth the bound uses). */
            double raw = w->mtp[p] * r[last];
            for (int k = 0; k < MOE_PLAN_KINDS; k++) {
                raw += w->kinds[p][k] * r[k];
            }
            double low = raw;
            if (block) {
                int least = rcv->layers > 0 ? rcv->layers : 1;
                low = 0.0;
                for (int c = p; c < lay->num_chunks; c += lay->pp) {
                    int n = lay->chunks[c].num_layers;
                    low += first_layers_rc(&s->bm, lay->chunks[c].first_layer,
                                           n < least ? n : least, r);
                }
            }
            rs->sum += low;
            rs->min = fmin(rs->min, low);
            rs->max = fmax(rs->max, raw);
        }
        rs->stamp = w->rcb_stamp[g];
    }
    double eo = cl->overheads.ep_overlap_eff;
    double fac = dom->ep_overlap ? fmax(0.0, 1.0 - eo) : 1.0;
    double m = lay->num_microbatches;
    double grow = (m - 1.0 / lay->vpp) * (rs->min * fac) + (rs->sum * fac) / lay->vpp;
    double dp = pd->time.dp_comm > 0.0 ? pd->time.dp_comm : 0.0;
    double ov = cl->overheads.overlap_eff;
    double tail = exact ? fmin(dp, ov * (dom->ep_overlap ? 2.0 : 1.0) * rs->max) : dp;
    return pd->step_time_s + grow - tail;
}

/* Recompute terms of the current layout's dimensions for a recipe and grouped-GEMM value. */
static void ensure_rc_terms(struct worker *w, const struct node *nd, int ri, int gi)
{
    const struct moe_plan_space *sp = &w->s->sp;
    long key = (((long)nd->key * 2 + (w->key_load > 1.0)) * MOE_NUM_RECIPES + ri) * 2 + gi;
    if (w->rc_key[gi] == key) {
        return;
    }
    moe_plan_bound_rc_terms(sp, &w->lay, w->key_load, sp->recipes[ri], sp->grouped[gi],
                            &w->rc_terms[gi]);
    w->rc_key[gi] = key;
}

/* Option group: everything but recompute, activation offload and the time-only knobs. */
static void search_group(struct worker *w, const struct moe_plan_okey *base)
{
    struct search *s = w->s;
    const struct moe_plan_space *sp = &s->sp;
    /* Dominator: the first recompute and offload values (none unless fixed) and the dominant
     * time-only values (in base). */
    struct moe_plan_okey dom = *base;
    set_rc(&dom, &sp->rcs[0]);
    set_off(&dom, &sp->offs[0]);
    struct moe_options opt;
    moe_plan_okey_apply(sp, &dom, &opt);
    if (opt.recompute == MOE_RECOMPUTE_FULL && opt.recompute_num_layers == 0) {
        opt.recompute_num_layers = 1; /* a bound only: any count prices the same */
    }
    if (opt.cpu_offloading_num_layers == 0 && dom.off == 2) {
        opt.cpu_offloading_num_layers = 1;
    }
    struct moe_prediction pd;
    if (!moe_search_predict(w, &opt, &pd)) {
        return;
    }
    /* Memory bound of the group: the dominator's worst stage holds the group's weights,
     * gradients and optimizer state. Without recompute its buffers are B = X + (A + X) r + C
     * (model/memory.c: X the working set, logits and EP buffers, which recompute and offload do
     * not change; A its activations, r the allocator reserve, C the context), and every
     * candidate's are at least X (1 + r) + C = B - A r on that stage. */
    double mst = pd.mem.weights + pd.mem.grads + pd.mem.optimizer + s->ctx_bytes;
    double r = s->req->cl->overheads.alloc_reserve_frac;
    if (opt.recompute == MOE_RECOMPUTE_NONE && r >= 0.0) {
        double held = pd.mem.weights + pd.mem.grads + pd.mem.optimizer + pd.mem.buffers -
                      pd.mem.activations * r;
        mst = fmax(mst, held * (1.0 - 1e-9));
    }
    if (!s->req->exhaustive && mst > s->cap) {
        w->c.pruned_memory += w->gsize;
        return;
    }
    double lbg = pd.step_time_s - moe_search_dominance_slack(w, &dom, &pd, GROW_ALL);
    if (moe_search_prune(w, lbg, mst, &dom)) {
        w->c.pruned_time += w->gsize;
        return;
    }
    /* Recompute values, no activation offload. */
    double lb_r[MOE_PLAN_MAX_RC];
    struct moe_prediction pr_r[MOE_PLAN_MAX_RC];
    bool has_r[MOE_PLAN_MAX_RC];
    memset(has_r, 0, sizeof(has_r));
    bool use_rc = !s->req->exhaustive && w->node != NULL && sp->rcs[0].rc == MOE_RECOMPUTE_NONE;
    if (use_rc) {
        ensure_rc_terms(w, w->node, w->group_ri, w->group_gi);
    }
    for (int ri = 0; ri < sp->num_rc; ri++) {
        struct moe_plan_okey k = dom;
        set_rc(&k, &sp->rcs[ri]);
        lb_r[ri] = lbg;
        struct moe_prediction p;
        struct memo m;
        double lb_single = lbg;
        if (use_rc && ri > 0) {
            lb_single = fmax(lbg, rc_bound(w, &dom, &pd, ri, true));
            lb_r[ri] = fmax(lbg, rc_bound(w, &dom, &pd, ri, false));
        }
        if (ri == 0 && moe_search_layer_choices(w, &k, true) == 0 &&
            moe_search_layer_choices(w, &k, false) == 0) {
            if (moe_search_valid(w, &k)) {
                moe_search_record(w, &k, &pd);
                x_variants(w, &k, &pd);
            } else {
                w->c.invalid += w->leaf;
            }
            pr_r[ri] = pd;
            has_r[ri] = true;
            continue;
        }
        w->blk_dom = &dom;
        w->blk_pd = &pd;
        w->blk_ri = use_rc && ri > 0 ? ri : -1;
        bool evaluated = moe_search_eval_expanded(w, &k, lb_single, mst, &p, &m);
        w->blk_ri = -1;
        w->blk_dom = NULL; /* they point into this frame */
        w->blk_pd = NULL;
        if (evaluated) {
            lb_r[ri] =
                fmax(lb_r[ri], p.step_time_s - moe_search_dominance_slack(w, &k, &p, GROW_ALL));
            pr_r[ri] = p;
            has_r[ri] = true;
        }
    }
    moe_search_offload_rows(w, &dom, mst, lb_r, pr_r, has_r);
}

/* Time-only values for the current layout; the dominant one first in knob order. */
void moe_search_x_list(struct worker *w)
{
    const struct moe_plan_space *sp = &w->s->sp;
    struct xlist *xl = &w->xl;
    xl->n = 0;
    xl->dom = 0;
    bool spar = w->lay.sequence_parallel;
    int ntp = spar || moe_plan_space_fixed(sp, MOE_PK_TP_COMM_OVERLAP) ? sp->num_tp_overlap : 1;
    int gdom = sp->graph_full_iter >= 0 ? sp->graph_full_iter : 0;
    for (int i = 0; i < ntp; i++) {
        uint8_t tp =
            spar || moe_plan_space_fixed(sp, MOE_PK_TP_COMM_OVERLAP) ? sp->tp_overlap[i] : 0;
        for (int g = 0; g < sp->num_graphs; g++) {
            if (i == 0 && g == gdom) {
                xl->dom = xl->n;
            }
            xl->tp[xl->n] = tp;
            xl->graph[xl->n] = (uint8_t)g;
            xl->n++;
        }
    }
}

/* Index of an option group in the validity memo. */
int moe_search_group_index(const struct moe_plan_space *sp, int ri, int si, int di, int gi, int ai)
{
    int nd = sp->num_dispatchers > sp->num_dispatchers_ep1 ? sp->num_dispatchers
                                                           : sp->num_dispatchers_ep1;
    return (((ri * sp->num_statics + si) * nd + di) * sp->num_grouped + gi) * sp->num_ep_overlap +
           ai;
}

/* The base knobs of an option group (the dominant time-only values). */
void moe_search_group_key(
    const struct worker *w, int ri, int si, int dispatcher, int gi, int ai, struct moe_plan_okey *k)
{
    const struct moe_plan_space *sp = &w->s->sp;
    const struct moe_plan_request *req = w->s->req;
    memset(k, 0, sizeof(*k));
    k->recipe = sp->recipes[ri];
    k->dist_opt = sp->statics[si].dist_opt;
    k->opt_offload = sp->statics[si].opt_offload;
    k->fp8_param_gather =
        moe_plan_space_fp8_param_gather(sp, k->recipe, k->dist_opt, k->opt_offload);
    k->dispatcher = (uint8_t)dispatcher;
    k->grouped = sp->grouped[gi];
    k->ep_overlap = sp->ep_overlap[ai];
    k->overlap_grad = sp->overlap_grad_fixed ? (req->opt.overlap_grad_reduce ? 1 : 0) : 1;
    k->overlap_param =
        sp->overlap_param_fixed ? (req->opt.overlap_param_gather ? 1 : 0) : k->dist_opt;
    k->tp_overlap = w->xl.tp[w->xl.dom];
    k->graph = w->xl.graph[w->xl.dom];
}

/* Each option group of the current layout (w->lay resolved, w->lk its knobs). */
void moe_search_options(struct worker *w)
{
    struct search *s = w->s;
    const struct moe_plan_space *sp = &s->sp;
    const uint8_t *disp = w->lay.ep > 1 ? sp->dispatchers : sp->dispatchers_ep1;
    int num_disp = w->lay.ep > 1 ? sp->num_dispatchers : sp->num_dispatchers_ep1;
    bool a2a_ok = moe_plan_bound_ep_overlap_possible(sp, &w->lay);
    /* The group bound does not depend on the optimizer choice: once per recipe, dispatcher,
     * grouped-GEMM and EP-overlap value (NAN until needed). */
    double glb[MOE_NUM_DISPATCHERS][2][2];
    for (int ri = 0; ri < sp->num_recipes; ri++) {
        for (int di = 0; di < MOE_NUM_DISPATCHERS; di++) {
            for (int gi = 0; gi < 2; gi++) {
                glb[di][gi][0] = glb[di][gi][1] = NAN;
            }
        }
        for (int si = 0; si < sp->num_statics; si++) {
            for (int di = 0; di < num_disp; di++) {
                for (int gi = 0; gi < sp->num_grouped; gi++) {
                    for (int ai = 0; ai < sp->num_ep_overlap; ai++) {
                        struct moe_plan_okey k;
                        moe_search_group_key(w, ri, si, disp[di], gi, ai, &k);
                        w->gidx = moe_search_group_index(sp, ri, si, di, gi, ai);
                        w->group_ri = ri;
                        w->group_gi = gi;
                        if (k.ep_overlap && (!a2a_ok || disp[di] == MOE_DISPATCH_ALLGATHER)) {
                            w->c.invalid += w->gsize; /* Megatron refuses the EP overlap here */
                            continue;
                        }
                        double mst = w->static_ps[ri][si];
                        if (!s->req->exhaustive && mst > s->cap) {
                            w->c.pruned_memory += w->gsize;
                            continue;
                        }
                        if (!s->req->exhaustive) {
                            double *lb = &glb[di][gi][ai];
                            if (isnan(*lb)) {
                                struct moe_plan_kind_lb g;
                                moe_plan_bound_group(sp, &s->bm, w->cur_terms, ri, gi, di,
                                                     k.ep_overlap != 0, num_disp, &g);
                                *lb = moe_plan_bound_time_spans(sp, &s->bm, &g, &w->lay, w->spans);
                            }
                            if (moe_search_prune(w, *lb, mst, &k)) {
                                w->c.pruned_time += w->gsize;
                                continue;
                            }
                        }
                        search_group(w, &k);
                    }
                }
            }
        }
    }
}
