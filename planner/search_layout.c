/*
 * Layouts of a node (planner/search_internal.h): every vpp and every placement of the layers on
 * the pipeline stages that Megatron accepts (the even split; --decoder-first/last-pipeline-num-
 * layers for every valid pair; a balanced --pipeline-model-parallel-layout string when that
 * differs from the even split), each built and resolved, then prepared (stage contents, layer
 * kinds per rank, static memory, expert load) and handed to its option groups (search_group.c);
 * and, when nothing fits, the least-memory plan of each layout (memory only, exact).
 *
 * What is skipped is skipped exactly: a vpp whose bound cannot reach the results, then a
 * placement by the quick bound (the rank holding the most layers runs at least that many layer
 * passes), then by the bound of the placement as moe_layout_resolve will place it
 * (build_placement, which tests/planner/test_search checks against moe_layout_resolve); a
 * placement that builds the same chunks as an earlier one is counted and not searched twice.
 */
#include "planner/search_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Candidates in the space of one layout: the product of every dimension's values. */
static double option_space_size(const struct search *s, const struct moe_layout *lay)
{
    const struct moe_plan_space *sp = &s->sp;
    const struct moe_model_cfg *cfg = s->req->cfg;
    double n = (double)sp->num_recipes * sp->num_statics * sp->num_dispatchers * sp->num_grouped *
               sp->num_ep_overlap * sp->num_graphs;
    n *= lay->sequence_parallel ? sp->num_tp_overlap : 1;
    /* recompute values, "every layer count" of full recompute counted per count (integers:
     * exact in any order) */
    double nr = s->rc_all * (double)(cfg->num_layers / lay->pp) + (sp->num_rc - s->rc_all);
    return n * nr * s->off_size * s->dom_size;
}

/* Stage contents, GPU parameters and decoder layers of each kind per rank of w->lay. */
static void prepare_layout(struct worker *w)
{
    const struct search *s = w->s;
    const struct moe_plan_bound_model *bm = &s->bm;
    const struct moe_layout *lay = &w->lay;
    for (int p = 0; p < lay->pp; p++) {
        moe_mem_stage_contents(s->req->cfg, lay, p, &w->sc[p]);
        moe_mem_gpu_params(s->req->cfg, lay, &w->sc[p], &w->gp[p]);
        memset(w->kinds[p], 0, sizeof(w->kinds[p]));
        w->mtp[p] = 0;
        for (int c = p; c < lay->num_chunks; c += lay->pp) {
            const struct moe_pp_chunk *ch = &lay->chunks[c];
            int lo = ch->first_layer;
            int hi = lo + ch->num_layers;
            hi = hi < MOE_MAX_LAYERS ? hi : MOE_MAX_LAYERS;
            if (lo < hi) {
                int moe = bm->prefix_moe[hi] - bm->prefix_moe[lo];
                int win = bm->prefix_win[hi] - bm->prefix_win[lo];
                int both = bm->prefix_both[hi] - bm->prefix_both[lo];
                w->kinds[p][3] += both;
                w->kinds[p][2] += moe - both;
                w->kinds[p][1] += win - both;
                w->kinds[p][0] += (hi - lo) - moe - win + both;
            }
            w->mtp[p] += ch->num_mtp;
        }
    }
    moe_plan_bound_spans_init(&s->sp, bm, lay, w->spans);
}

/* Search every option of the resolved layout w->lay (lb: the least per-layer bounds). */
static void
search_layout(struct worker *w, const struct moe_plan_lkey *lk, const struct moe_plan_kind_lb *lb)
{
    struct search *s = w->s;
    double size = option_space_size(s, &w->lay);
    w->c.enumerated += size;
    w->c.layouts++;
    w->lk = *lk;
    w->has_best = false;
    w->layout_serial++;
    prepare_layout(w);
    w->grow_ok = moe_search_grow_ok_mask(w);
    moe_search_vmemo_layout(w);
    double mlb = moe_search_static_bounds(w);
    w->layout_lb =
        s->req->exhaustive ? 0.0 : moe_plan_bound_time_spans(&s->sp, &s->bm, lb, &w->lay, w->spans);
    if (!s->req->exhaustive) {
        if (mlb > s->cap) {
            w->c.pruned_memory += size;
            return;
        }
        if (moe_search_prune(w, w->layout_lb, mlb, NULL)) {
            w->c.pruned_time += size;
            return;
        }
    }
    moe_search_load_for_layout(w);
    moe_search_views_for_layout(w);
    moe_search_x_list(w);
    const struct moe_plan_space *sp = &s->sp;
    double dom = (sp->fp8_param_gather_fixed ? 1.0 : 2.0) * (sp->overlap_grad_fixed ? 1.0 : 2.0) *
                 (sp->overlap_param_fixed ? 1.0 : 2.0) *
                 (moe_plan_space_fixed(sp, MOE_PK_EP_OVERLAP) ? 1.0 : 2.0);
    w->xunit = dom;
    w->leaf = dom * w->xl.n;
    double nr = 0.0;
    double nf = 0.0;
    for (int i = 0; i < sp->num_rc; i++) {
        nr += moe_search_rc_mult(w, i);
    }
    for (int i = 0; i < sp->num_off; i++) {
        nf += moe_search_off_mult(w, i);
    }
    w->fsize = nf - moe_search_off_mult(w, 0);
    w->gsize = w->leaf * nr * nf;
    moe_search_options(w);
    if (w->has_best) {
        moe_search_offer_top(s, &w->best);
        if (w->best.t < s->req->rank_time_s) {
            atomic_fetch_add(&s->sh.faster, 1);
        }
    }
}

static int placements(const struct search *s, int pp, int vpp, struct placement *out, int max_out)
{
    const struct moe_plan_request *req = s->req;
    const struct moe_model_cfg *cfg = req->cfg;
    int L = cfg->num_layers;
    int mtp = cfg->mtp_num_layers;
    int n = 0;
    if (moe_plan_space_fixed(&s->sp, MOE_PK_PP_LAYOUT)) {
        out[n++] = (struct placement){MOE_PLACE_FIXED, req->lay.first_stage_layers,
                                      req->lay.last_stage_layers, 0};
        return n;
    }
    int chunks = pp * vpp;
    if (L % chunks == 0) {
        out[n++] = (struct placement){MOE_PLACE_EVEN, 0, 0, L / pp + mtp};
    }
    if (pp == 1) {
        return n;
    }
    if (L % chunks != 0 || mtp > 0) {
        /* Some rank holds at least its share of the layers (MTP counted as one). */
        out[n++] = (struct placement){MOE_PLACE_BALANCED, 0, 0, (L + mtp + pp - 1) / pp};
    }
    for (int first = 0; first <= L && n < max_out; first += vpp) {
        for (int last = 0; last <= L && n < max_out; last += vpp) {
            if (first == 0 && last == 0) {
                continue;
            }
            int mid_stages = pp - (first > 0) - (last > 0);
            int mid_layers = L - first - last;
            if (mid_layers < 0 || (mid_layers > 0) != (mid_stages > 0)) {
                continue;
            }
            if (mid_stages > 0 && mid_layers % (mid_stages * vpp) != 0) {
                continue;
            }
            int per_mid = mid_stages > 0 ? mid_layers / mid_stages : 0;
            int most = first > per_mid ? first : per_mid;
            int last_rank = (last > 0 ? last : per_mid) + mtp;
            most = last_rank > most ? last_rank : most;
            out[n++] = (struct placement){MOE_PLACE_UNEVEN, first, last, most};
        }
    }
    return n;
}

/* The placements of (pp, vpp), built before the search (moe_search_placement_tables). */
static const struct ptable *ptable_of(const struct search *s, int pp, int vpp)
{
    int lo = 0;
    int hi = s->num_ptables - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const struct ptable *t = &s->ptables[mid];
        if (t->pp == pp && t->vpp == vpp) {
            return t;
        }
        if (t->pp < pp || (t->pp == pp && t->vpp < vpp)) {
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return NULL;
}

void moe_search_fill_sizes(const struct search *s,
                           const struct node *nd,
                           int vpp,
                           struct moe_layout *l)
{
    moe_layout_init(l);
    l->num_gpus = s->req->num_gpus;
    l->gbs = s->req->gbs;
    l->seq_length = s->req->seq_length;
    l->tp = nd->k.tp;
    l->cp = nd->k.cp;
    l->pp = nd->k.pp;
    l->vpp = vpp;
    l->ep = nd->k.ep;
    l->etp = nd->k.etp;
    l->mbs = nd->k.mbs;
    l->sequence_parallel = nd->k.sp != 0;
}

int moe_search_vpp_max(const struct search *s, int pp)
{
    const struct moe_model_cfg *cfg = s->req->cfg;
    if (moe_plan_space_fixed(&s->sp, MOE_PK_VPP)) {
        return s->req->lay.vpp;
    }
    if (pp <= 1) {
        return 1;
    }
    int v = (cfg->num_layers + cfg->mtp_num_layers) / pp;
    return v < 1 ? 1 : v;
}

bool moe_search_vpp_ok(const struct search *s, const struct node *nd, int vpp)
{
    const struct moe_plan_request *req = s->req;
    if (moe_plan_space_fixed(&s->sp, MOE_PK_VPP) && vpp != req->lay.vpp) {
        return false;
    }
    if (vpp > 1) {
        int dp = req->num_gpus / (nd->k.tp * nd->k.cp * nd->k.pp);
        int m = req->gbs / (nd->k.mbs * dp);
        if (nd->k.pp == 1 || m % nd->k.pp != 0) {
            return false;
        }
    }
    return (long)nd->k.pp * vpp <= MOE_MAX_PP_CHUNKS;
}

/*
 * Chunks of a placement as moe_layout_resolve places them (Megatron's rule: even split, or first
 * and last stage counts with the rest even; embedding on chunk 0, loss and MTP on the last), with
 * dp and the micro-batch count, for the layout bound before resolving. tests/planner/test_search
 * checks them against moe_layout_resolve for every placement of several models.
 */
static void build_placement(const struct search *s,
                            const struct node *nd,
                            int vpp,
                            const struct placement *pl,
                            struct moe_layout *lay)
{
    const struct moe_model_cfg *cfg = s->req->cfg;
    struct moe_plan_lkey lk = nd->k;
    lk.vpp = vpp;
    lk.place = pl->place;
    lk.first = pl->first;
    lk.last = pl->last;
    moe_plan_lkey_apply(&s->sp, &lk, lay);
    lay->dp = lay->num_gpus / (lay->tp * lay->cp * lay->pp);
    lay->num_microbatches = lay->gbs / (lay->mbs * lay->dp);
    if (lay->has_custom_pp_layout) {
        return; /* balanced or the request's own chunks: already filled */
    }
    int pp = lay->pp;
    int chunks = pp * vpp;
    int first = lay->first_stage_layers;
    int last = lay->last_stage_layers;
    int mid_stages = pp - (first > 0) - (last > 0);
    int mid_layers = cfg->num_layers - first - last;
    int per_mid = mid_stages > 0 ? mid_layers / (mid_stages * vpp) : 0;
    lay->num_chunks = chunks;
    int next = 0;
    for (int c = 0; c < chunks; c++) {
        int p = c % pp;
        int n = per_mid;
        if (p == 0 && first > 0) {
            n = first / vpp;
        } else if (p == pp - 1 && last > 0) {
            n = last / vpp;
        }
        memset(&lay->chunks[c], 0, sizeof(lay->chunks[c]));
        lay->chunks[c].num_layers = (uint16_t)n;
        lay->chunks[c].first_layer = (uint16_t)next;
        next += n;
    }
    lay->chunks[0].has_embedding = 1;
    lay->chunks[chunks - 1].has_loss = 1;
    lay->chunks[chunks - 1].num_mtp = (uint8_t)cfg->mtp_num_layers;
}

/* Build and resolve the layout of node nd with vpp and placement pl into w->lay. */
static bool node_layout(struct worker *w,
                        const struct node *nd,
                        int vpp,
                        const struct placement *pl,
                        struct moe_plan_lkey *lk)
{
    struct search *s = w->s;
    *lk = nd->k;
    lk->vpp = vpp;
    lk->place = pl->place;
    lk->first = pl->first;
    lk->last = pl->last;
    moe_plan_lkey_apply(&s->sp, lk, &w->lay);
    w->resolves++;
    return moe_layout_resolve(s->req->cfg, s->req->cl, NULL, &w->lay, NULL) == MOE_OK;
}

/* Layer terms of a node's key, from the thread's cache. */
static const struct moe_plan_layer_terms *node_terms(struct worker *w, const struct node *nd)
{
    struct search *s = w->s;
    struct terms_slot *slot = &w->terms[(unsigned long)nd->key % TERMS_SLOTS];
    long key = (long)nd->key * 2 + (w->key_load > 1.0); /* load-1 terms, or the key's load */
    if (slot->key != key) {
        struct moe_layout lay;
        moe_search_fill_sizes(s, nd, 1, &lay);
        moe_plan_bound_terms(&s->sp, &s->bm, &lay, w->key_load, NULL, &slot->t);
        slot->key = key;
    }
    return &slot->t;
}

/* Chunks of a resolved layout, to skip placements that build the same layout twice (e.g. an
 * uneven split whose first stage holds what an even split gives it). */
static uint64_t chunks_hash(const struct moe_layout *lay)
{
    uint64_t h = 1469598103934665603ULL;
    for (int c = 0; c < lay->num_chunks; c++) {
        const struct moe_pp_chunk *ch = &lay->chunks[c];
        uint64_t v = (uint64_t)ch->num_layers | (uint64_t)ch->num_mtp << 16 |
                     (uint64_t)ch->has_embedding << 24 | (uint64_t)ch->has_loss << 25;
        h = (h ^ v) * 1099511628211ULL;
        h ^= h >> 31;
    }
    return h;
}

/* Phase 3: every vpp and placement of node nd, each layout that can still reach the results
 * searched. */
void moe_search_node(struct worker *w, const struct node *nd)
{
    struct search *s = w->s;
    bool exh = s->req->exhaustive;
    w->cur_terms = NULL;
    struct layer_key *key = &s->keys[nd->key];
    const struct moe_plan_kind_lb *klb = &key->lb;
    const struct moe_plan_kind_lb *klb0 = &key->lb0;
    w->key_load = 1.0;
    w->has_best = false;
    /* Past the node's load-1 bound, the key's load tightens every bound below. */
    if (!exh && nd->static_lb <= s->cap && !moe_search_prune(w, nd->lb, nd->static_lb, NULL) &&
        moe_search_key_load(w, key)) {
        klb = &key->llb;
        klb0 = &key->llb0;
        w->key_load = key->load;
    }
    for (int vpp = 1; vpp <= moe_search_vpp_max(s, nd->k.pp); vpp++) {
        if (!moe_search_vpp_ok(s, nd, vpp)) {
            continue;
        }
        struct moe_layout sizes;
        moe_search_fill_sizes(s, nd, vpp, &sizes);
        const struct moe_plan_kind_lb *lb =
            moe_plan_bound_ep_overlap_possible(&s->sp, &sizes) ? klb : klb0;
        const struct ptable *pt = ptable_of(s, nd->k.pp, vpp);
        int np = pt != NULL ? pt->n : 0;
        const struct placement *pl = pt != NULL ? pt->pl : NULL;
        double opt_size = option_space_size(s, &sizes);
        w->has_best = false;
        if (!exh && nd->static_lb > s->cap) {
            w->c.enumerated += np * opt_size;
            w->c.pruned_memory += np * opt_size;
            continue;
        }
        double lbv = exh ? 0.0 : moe_plan_bound_time_sizes(&s->sp, &s->bm, lb, &sizes, 0.0);
        if (!exh && moe_search_prune(w, lbv, nd->static_lb, NULL)) {
            w->c.enumerated += np * opt_size;
            w->c.pruned_time += np * opt_size;
            continue;
        }
        uint64_t seen[MAX_PLACEMENTS];
        int num_seen = 0;
        for (int i = 0; i < np; i++) {
            w->has_best = false;
            if (!exh) {
                /* The rank holding the most layers runs at least that many layer passes. */
                double floor = pl[i].max_layers * lb->per_layer_min;
                double lbp = moe_plan_bound_time_sizes(&s->sp, &s->bm, lb, &sizes, floor);
                if (!moe_search_prune(w, lbp, nd->static_lb, NULL)) {
                    build_placement(s, nd, vpp, &pl[i], &w->scratch);
                    lbp = moe_plan_bound_time(&s->sp, &s->bm, lb, &w->scratch);
                }
                if (moe_search_prune(w, lbp, nd->static_lb, NULL)) {
                    w->c.enumerated += opt_size;
                    w->c.pruned_time += opt_size;
                    continue;
                }
            }
            struct moe_plan_lkey lk;
            if (!node_layout(w, nd, vpp, &pl[i], &lk)) {
                w->c.enumerated += opt_size;
                w->c.invalid += opt_size;
                continue;
            }
            uint64_t h = chunks_hash(&w->lay);
            bool dup = false;
            for (int j = 0; j < num_seen && !dup; j++) {
                dup = seen[j] == h;
            }
            if (dup) {
                /* the same layout under a larger key: identical predictions (counted, as the
                 * pruned ones are, so that the count does not depend on the order) */
                w->c.enumerated += opt_size;
                continue;
            }
            seen[num_seen++] = h;
            if (w->cur_terms == NULL && !exh) {
                w->cur_terms = node_terms(w, nd);
            }
            w->node = nd;
            search_layout(w, &lk, lb);
        }
    }
}

/* When nothing fits: the least memory of any valid plan of layout lk (exact, memory only). */
static void closest_layout(struct worker *w, const struct moe_plan_lkey *lk)
{
    struct search *s = w->s;
    const struct moe_plan_space *sp = &s->sp;
    w->lk = *lk;
    w->layout_serial++;
    prepare_layout(w);
    moe_search_vmemo_layout(w);
    if (moe_search_static_bounds(w) >= atomic_load(&s->sh.best_m)) {
        return;
    }
    moe_search_load_for_layout(w);
    moe_search_views_for_layout(w);
    moe_search_x_list(w);
    const uint8_t *disp = w->lay.ep > 1 ? sp->dispatchers : sp->dispatchers_ep1;
    int num_disp = w->lay.ep > 1 ? sp->num_dispatchers : sp->num_dispatchers_ep1;
    /* Memory does not depend on grouped GEMM, EP overlap or the time-only knobs. */
    for (int ri = 0; ri < sp->num_recipes; ri++) {
        for (int si = 0; si < sp->num_statics; si++) {
            for (int di = 0; di < num_disp; di++) {
                struct moe_plan_okey k;
                moe_search_group_key(w, ri, si, disp[di], 0, 0, &k);
                w->gidx = moe_search_group_index(sp, ri, si, di, 0, 0);
                if (w->static_ps[ri][si] >= atomic_load(&s->sh.best_m)) {
                    continue;
                }
                struct moe_options opt;
                struct memo m;
                struct moe_plan_okey d = k;
                set_rc(&d, &sp->rcs[0]);
                set_off(&d, &sp->offs[0]);
                moe_plan_okey_apply(sp, &d, &opt);
                opt.recompute_num_layers =
                    opt.recompute == MOE_RECOMPUTE_FULL && opt.recompute_num_layers == 0
                        ? 1
                        : opt.recompute_num_layers;
                moe_search_memory_of(w, &opt, &m);
                if (m.stat + s->ctx_bytes >= atomic_load(&s->sh.best_m)) {
                    continue;
                }
                for (int r = 0; r < sp->num_rc; r++) {
                    for (int f = 0; f < sp->num_off; f++) {
                        struct moe_plan_okey v = k;
                        set_rc(&v, &sp->rcs[r]);
                        set_off(&v, &sp->offs[f]);
                        int nrc = moe_search_layer_choices(w, &v, true);
                        int noff = moe_search_layer_choices(w, &v, false);
                        int n = nrc > 0 ? nrc : (noff > 0 ? noff : 1);
                        for (int i = 1; i <= n; i++) {
                            struct moe_plan_okey x = v;
                            if (nrc > 0) {
                                x.rc_layers = (uint16_t)i;
                            } else if (noff > 0) {
                                x.off_layers = (uint16_t)i;
                            }
                            if (!moe_search_valid(w, &x)) {
                                continue;
                            }
                            moe_plan_okey_apply(sp, &x, &opt);
                            moe_search_memory_of(w, &opt, &m);
                            if (m.total <= atomic_load(&s->sh.best_m)) {
                                struct entry e = {w->lk, x, 0.0, m.total};
                                moe_search_offer_closest(w, &e);
                            }
                        }
                    }
                }
            }
        }
    }
}

/* Phase 4 (nothing fits): the least-memory plan of each layout of node nd. */
void moe_search_closest_node(struct worker *w, const struct node *nd)
{
    struct search *s = w->s;
    if (nd->static_lb >= atomic_load(&s->sh.best_m)) {
        return;
    }
    for (int vpp = 1; vpp <= moe_search_vpp_max(s, nd->k.pp); vpp++) {
        if (!moe_search_vpp_ok(s, nd, vpp)) {
            continue;
        }
        const struct ptable *pt = ptable_of(s, nd->k.pp, vpp);
        for (int i = 0; pt != NULL && i < pt->n; i++) {
            struct moe_plan_lkey lk;
            if (node_layout(w, nd, vpp, &pt->pl[i], &lk)) {
                closest_layout(w, &lk);
            }
        }
    }
}

static int ptable_cmp(const void *pa, const void *pb)
{
    const struct ptable *a = pa;
    const struct ptable *b = pb;
    return a->pp != b->pp ? (a->pp < b->pp ? -1 : 1) : (a->vpp < b->vpp ? -1 : (a->vpp > b->vpp));
}

/* Placements of every (pp, vpp) the nodes use, sorted for ptable_of. */
enum moe_status
moe_search_placement_tables(struct search *s, struct placement *scratch, struct moe_diag *diag)
{
    int pps[MAX_DIV];
    int npp = 0;
    for (long i = 0; i < s->num_nodes; i++) {
        int pp = s->nodes[i].k.pp;
        bool seen = false;
        for (int j = 0; j < npp && !seen; j++) {
            seen = pps[j] == pp;
        }
        if (!seen && npp < MAX_DIV) {
            pps[npp++] = pp;
        }
    }
    int cap = 0;
    for (int j = 0; j < npp; j++) {
        cap += moe_search_vpp_max(s, pps[j]);
    }
    s->ptables = calloc((size_t)(cap > 0 ? cap : 1), sizeof(*s->ptables));
    if (s->ptables == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the planner's placements");
    }
    for (int j = 0; j < npp; j++) {
        for (int vpp = 1; vpp <= moe_search_vpp_max(s, pps[j]); vpp++) {
            int n = placements(s, pps[j], vpp, scratch, MAX_PLACEMENTS);
            struct ptable *t = &s->ptables[s->num_ptables];
            t->pl = malloc((size_t)(n > 0 ? n : 1) * sizeof(*t->pl));
            if (t->pl == NULL) {
                return moe_diag_set(diag, MOE_ERR_NOMEM,
                                    "out of memory for the planner's placements");
            }
            memcpy(t->pl, scratch, (size_t)n * sizeof(*t->pl));
            t->pp = pps[j];
            t->vpp = vpp;
            t->n = n;
            s->num_ptables++;
        }
    }
    qsort(s->ptables, (size_t)s->num_ptables, sizeof(*s->ptables), ptable_cmp);
    return MOE_OK;
}
