/*
 * Activation offload under each recompute row of an option group (planner/search_internal.h):
 * whole-layer CPU offloading and every fine-grained module set f, with bounds that let most sets
 * go before their memory is evaluated and most of the rest before they are predicted.
 *
 * Memory. Offloading more modules only zeroes more saved tensors, so the memory of a set bounds
 * that of every set it contains, less the growth of selective recompute's transient buffer
 * (offload_bound_of); the row's set of every module bounds the whole row (offload_memory_bound).
 *
 * Time. Fine-grained offload sets are bounded more tightly from their row's prediction without
 * offload (offload_time_bound: the copy is priced after the EP pairing, so each pass's growth is
 * exact), and each predicted set bounds the sets that contain it (search_fine).
 */
#include "model/compute.h"
#include "planner/search_internal.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

/*
 * Memory bound of every fine-grained offload set f contained in a set g, under recompute value
 * k->rc (selective or none), from g's memory m: offloading more modules only zeroes more saved
 * tensors, so every rank's saved activations under f are at least what g leaves; the transient
 * buffer of selective recompute (largest full layer minus the smaller kind's saved layer,
 * model/memory.c) only grows as less is saved, so under f it is at least its value without
 * offload. Hence
 *   M(r, f) >= M(r, g) - (1 + alloc_reserve) * (transient(r, g) - transient(r, none)).
 * offload_memory_bound takes g = every module: a bound for the whole recompute row.
 */
static double
offload_bound_of(const struct worker *w, const struct moe_plan_okey *k, const struct memo *m)
{
    double delta = 0.0;
    if (k->rc == MOE_RECOMPUTE_SELECTIVE) {
        /* act: [0] dense after recompute, [1] dense after offload, [2] / [3] the same for MoE */
        double before = fmin(m->act[0], m->act[2]);
        double after = fmin(m->act[1], m->act[3]);
        delta = (1.0 + w->s->req->cl->overheads.alloc_reserve_frac) * fmax(0.0, before - after);
    }
    return m->total - delta;
}

static double offload_memory_bound(struct worker *w, const struct moe_plan_okey *k, struct memo *m)
{
    const struct moe_plan_space *sp = &w->s->sp;
    struct moe_plan_okey t = *k;
    t.off = 1;
    t.off_mods = (uint8_t)sp->fine_all;
    t.off_layers = 0;
    struct moe_options opt;
    moe_plan_okey_apply(sp, &t, &opt);
    moe_search_memory_of(w, &opt, m);
    return offload_bound_of(w, &t, m);
}

/*
 * Bound on the step time of options opt (a fine-grained offload set) from p0, the prediction of
 * the same options without activation offload. model/cost.c adds a layer's offload copy after it
 * has priced the pass's EP overlap, and the pass then costs max(host, GPU + max(0, copy - hide))
 * (moe_pass_with_copy, with p0's parts): each pass's growth is known exactly and none is negative.
 * With D_p the growth of rank p's passes per micro-batch, the closed form grows by at least
 * (m - 1/vpp) min_p D_p + sum_p D_p / vpp, and the DP tails shrink by at most overlap_eff max_p D_p
 * (their overlap windows are the rank's pass sums), so T(opt) >= T(p0) + that growth. A relative
 * 1e-9 is given away for the different order of the additions.
 */
static double
offload_time_bound(struct worker *w, const struct moe_options *opt, const struct moe_prediction *p0)
{
    const struct search *s = w->s;
    const struct moe_layout *lay = &w->lay;
    /* The copies read what the views after offload read, and the load factor: kept with them. */
    struct view_slot *vs = moe_search_view_of(w, opt, true);
    if (!(vs->copy_load == p0->load_factor) || opt->cpu_offloading_num_layers > 0) {
        for (int m = 0; m < 2; m++) {
            double bytes = moe_cost_offload_bytes(s->req->cfg, lay, opt, m != 0, p0->load_factor);
            vs->copy_s[m] = moe_compute_offload_copy_s(s->req->cl, bytes);
        }
        vs->copy_load = opt->cpu_offloading_num_layers > 0 ? (double)NAN : p0->load_factor;
    }
    const double *copy = vs->copy_s;
    double grow[MOE_PLAN_KINDS];
    for (int k = 0; k < MOE_PLAN_KINDS; k++) {
        const struct moe_pass_parts *pp = p0->pass[k >> 1][k & 1];
        grow[k] = 0.0;
        for (int d = 0; d < 2; d++) {
            grow[k] += moe_pass_with_copy(&pp[d], copy[k >> 1]) - moe_pass_with_copy(&pp[d], 0.0);
        }
    }
    int last = s->bm.last_moe * 2 + s->bm.last_win;
    double lo = INFINITY;
    double hi = 0.0;
    double sum = 0.0;
    for (int p = 0; p < lay->pp; p++) {
        double d = w->mtp[p] * grow[last];
        for (int k = 0; k < MOE_PLAN_KINDS; k++) {
            d += w->kinds[p][k] * grow[k];
        }
        lo = fmin(lo, d);
        hi = fmax(hi, d);
        sum += d;
    }
    double v = lay->vpp;
    double g = ((double)lay->num_microbatches - 1.0 / v) * lo + sum / v -
               s->req->cl->overheads.overlap_eff * hi;
    return p0->step_time_s + g - 1e-9 * p0->step_time_s;
}

/*
 * The fine-grained offload values of recompute row kr (dom with its recompute value), their
 * memory known (has[fi], m[fi]; a value without memory cannot fit). First in knob order: the
 * values that cannot fit or cannot beat lb_r (the row's bound), duplicates (a set that leaves
 * every activation total as an earlier valid set did is equivalent to it: same memory, same host
 * copies, same step time) and invalid values go. Then the others, fewest modules first: offloading
 * more modules copies more bytes per layer, so each pass of (r, f, X*) is no shorter than that of
 * (r, g, X*) for every g contained in f, none included, and T(r, f) >= T(r, g) - slack with the
 * kinds f offloads from (moe_search_dominance_slack). (r, none, X*), when not predicted (it does
 * not fit, or a bound pruned it), is predicted as a bound, never a result.
 */
static void search_fine(struct worker *w,
                        const struct moe_plan_okey *kr,
                        int ri,
                        double lb_r,
                        const struct moe_prediction *pr_none,
                        const double *tlb,
                        const bool *has,
                        const bool *late,
                        const struct memo *m)
{
    const struct search *s = w->s;
    const struct moe_plan_space *sp = &s->sp;
    double seen[MOE_PLAN_MAX_OFF][4];
    bool live[MOE_PLAN_MAX_OFF];
    int num_seen = 0;
    int num_live = 0;
    for (int fi = 1; fi < sp->num_off; fi++) {
        live[fi] = false;
        if (sp->offs[fi].off != 1) {
            continue;
        }
        if (!has[fi]) {
            if (late[fi]) {
                w->c.pruned_time += w->leaf * moe_search_rc_mult(w, ri);
            } else {
                w->c.pruned_memory += w->leaf * moe_search_rc_mult(w, ri);
            }
            continue;
        }
        struct moe_plan_okey k = *kr;
        set_off(&k, &sp->offs[fi]);
        if (moe_search_prune(w, tlb[fi], m[fi].total, &k)) {
            w->c.pruned_time += w->leaf * moe_search_rc_mult(w, ri);
            continue;
        }
        bool dup = false;
        for (int j = 0; j < num_seen && !dup; j++) {
            dup = memcmp(seen[j], m[fi].act, sizeof(m[fi].act)) == 0;
        }
        if (dup) {
            continue;
        }
        if (!moe_search_valid(w, &k)) {
            w->c.invalid += w->leaf * moe_search_rc_mult(w, ri);
            continue;
        }
        memcpy(seen[num_seen++], m[fi].act, sizeof(m[fi].act));
        live[fi] = true;
        num_live++;
    }
    if (num_live == 0) {
        return;
    }
    /* Bound sources: predicted values of the row (module set, prediction). */
    unsigned src_mods[MOE_PLAN_MAX_OFF + 1];
    struct moe_prediction *src = w->fine_src;
    int nsrc = 0;
    struct moe_options opt;
    if (pr_none != NULL) {
        src_mods[nsrc] = 0u;
        src[nsrc++] = *pr_none;
    } else if (!s->req->exhaustive && moe_search_valid(w, kr)) {
        moe_plan_okey_apply(sp, kr, &opt);
        if (moe_search_predict(w, &opt, &src[nsrc])) {
            moe_search_check_lb(w, lb_r, &src[nsrc]);
            src_mods[nsrc++] = 0u;
        }
    }
    /* src[0]: the row without activation offload; tlb has its bound when pr_none was known */
    bool has_base = nsrc > 0 && pr_none == NULL;
    for (int j = s->num_fine_order - 1; j >= 0; j--) {
        int fi = s->fine_order[j];
        if (!live[fi]) {
            continue;
        }
        const struct memo *mf = &m[fi];
        unsigned mods = sp->offs[fi].mods;
        /* only the kinds f offloads from grow, and no pass gets shorter (GROW_PASSES) */
        unsigned grows = GROW_PASSES | (mf->act[0] != mf->act[1] ? 0x3u : 0u) |
                         (mf->act[2] != mf->act[3] ? 0xcu : 0u);
        double lb = tlb[fi];
        for (int q = 0; q < nsrc; q++) {
            if ((src_mods[q] & ~mods) == 0) {
                lb = fmax(lb,
                          src[q].step_time_s - moe_search_dominance_slack(w, kr, &src[q], grows));
            }
        }
        struct moe_plan_okey k = *kr;
        set_off(&k, &sp->offs[fi]);
        if (has_base && !s->req->exhaustive) {
            moe_plan_okey_apply(sp, &k, &opt);
            lb = fmax(lb, offload_time_bound(w, &opt, &src[0]));
        }
        if (moe_search_eval_candidate(w, &k, lb, mf, &src[nsrc])) {
            src_mods[nsrc++] = mods;
        }
    }
}

/*
 * Activation offload values under each recompute value r of the group of dominator dom (mst: the
 * group's memory bound): (r, f, X) is dominated by (r, none, X*), whose bound is lb_r[r]; has_r[r]
 * when (r, none, X*) was predicted (pr_r[r]). Whole-layer CPU offloading and the rows of every
 * layer count are evaluated value by value (moe_search_eval_expanded); the fine-grained sets of a
 * row get their memory first, largest first, each evaluated set bounding its subsets, and are
 * then searched together (search_fine).
 */
void moe_search_offload_rows(struct worker *w,
                             const struct moe_plan_okey *dom,
                             double mst,
                             const double *lb_r,
                             const struct moe_prediction *pr_r,
                             const bool *has_r)
{
    const struct search *s = w->s;
    const struct moe_plan_space *sp = &s->sp;
    struct moe_options opt;
    unsigned src_mods[MOE_PLAN_MAX_OFF + 1];
    double src_lb[MOE_PLAN_MAX_OFF + 1];
    bool fine_has[MOE_PLAN_MAX_OFF];
    bool fine_late[MOE_PLAN_MAX_OFF]; /* pruned by time before its memory was evaluated */
    struct memo fine_m[MOE_PLAN_MAX_OFF];
    double fine_tlb[MOE_PLAN_MAX_OFF]; /* time bound of each set (offload_time_bound) */
    for (int ri = 0; ri < sp->num_rc; ri++) {
        if (sp->num_off <= 1) {
            break;
        }
        struct moe_plan_okey kmin = *dom;
        set_rc(&kmin, &sp->rcs[ri]);
        set_off(&kmin, &sp->offs[1]);
        if (moe_search_prune(w, lb_r[ri], mst, &kmin)) {
            w->c.pruned_time += w->leaf * moe_search_rc_mult(w, ri) * w->fsize;
            continue;
        }
        double row_lb_m = 0.0;
        struct memo row_m;
        /* The row bound is the memory of one recompute value; a row of every layer count (full
         * recompute) holds counts that need less than its count 1, so it has none. */
        bool has_row_lb = !s->req->exhaustive && sp->fine_all != 0 &&
                          moe_search_layer_choices(w, &kmin, true) == 0;
        if (has_row_lb) {
            row_lb_m = offload_memory_bound(w, &kmin, &row_m);
            if (moe_search_prune(w, lb_r[ri], row_lb_m, &kmin)) {
                w->c.pruned_memory += w->leaf * moe_search_rc_mult(w, ri) * w->fsize;
                continue;
            }
        }
        /* Fine-grained sets, largest first: each evaluated set bounds the memory of its subsets
         * (offload_bound_of), so most sets that cannot fit are never evaluated. */
        struct moe_plan_okey kr = *dom;
        set_rc(&kr, &sp->rcs[ri]);
        bool fine_row = moe_search_layer_choices(w, &kr, true) == 0;
        if (fine_row) {
            int nsrc = 0;
            if (has_row_lb) {
                src_mods[nsrc] = sp->fine_all;
                src_lb[nsrc++] = row_lb_m;
            }
            for (int j = 0; j < s->num_fine_order; j++) {
                int fi = s->fine_order[j];
                double lbm = mst;
                for (int q = 0; q < nsrc; q++) {
                    if ((sp->offs[fi].mods & ~src_mods[q]) == 0) {
                        lbm = fmax(lbm, src_lb[q]);
                    }
                }
                fine_has[fi] = false;
                fine_late[fi] = false;
                fine_tlb[fi] = lb_r[ri];
                if (!s->req->exhaustive && lbm > s->cap) {
                    continue;
                }
                struct moe_plan_okey k = kr;
                set_off(&k, &sp->offs[fi]);
                moe_plan_okey_apply(sp, &k, &opt); /* for the time bound and the memory */
                if (has_r[ri] && !s->req->exhaustive) {
                    fine_tlb[fi] = fmax(lb_r[ri], offload_time_bound(w, &opt, &pr_r[ri]));
                }
                /* Offload never makes the row faster: lb_r bounds every set's time, lbm its
                 * memory, and prune is monotone in memory, so a set pruned here would be
                 * pruned with its exact memory too (the Pareto pass evaluated the memory of
                 * most sets only to reject them). */
                if (moe_search_prune(w, fine_tlb[fi], lbm, &k)) {
                    fine_late[fi] = true;
                    continue;
                }
                if (has_row_lb && sp->offs[fi].mods == sp->fine_all) {
                    fine_m[fi] = row_m; /* the row bound's set */
                } else {
                    moe_search_memory_of(w, &opt, &fine_m[fi]);
                }
                fine_has[fi] = true;
                src_mods[nsrc] = sp->offs[fi].mods;
                src_lb[nsrc++] = offload_bound_of(w, &k, &fine_m[fi]);
            }
        }
        for (int fi = 1; fi < sp->num_off; fi++) {
            struct moe_plan_okey k = *dom;
            set_rc(&k, &sp->rcs[ri]);
            set_off(&k, &sp->offs[fi]);
            struct moe_prediction p;
            struct memo m;
            if (k.off == 2 && (w->lay.pp > 1 || k.rc != MOE_RECOMPUTE_NONE)) {
                w->c.invalid +=
                    w->leaf * moe_search_rc_mult(w, ri) *
                    moe_search_off_mult(
                        w, fi); /* CPU offloading needs pp == 1 and no recompute (Megatron) */
                continue;
            }
            if (k.off != 1 || !fine_row) {
                (void)moe_search_eval_expanded(w, &k, lb_r[ri], mst, &p, &m);
            }
        }
        if (fine_row) {
            search_fine(w, &kr, ri, lb_r[ri], has_r[ri] ? &pr_r[ri] : NULL, fine_tlb, fine_has,
                        fine_late, fine_m);
        }
    }
}
