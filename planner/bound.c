/*
 * Lower bounds for the planner's pruning (planner/bound.h): per-layer terms from
 * moe_compute_layer, composed as model/cost.c composes a step (rank sums, closed-form schedule,
 * fixed per-step time); static memory from moe_mem_stage_with on a stage's contents.
 */
#include "planner/bound.h"

#include "model/comm_cost.h"
#include "model/compute.h"
#include "model/cost.h"
#include "model/schedule.h"

#include <math.h>
#include <string.h>

static double pos(double x)
{
    return x > 0.0 ? x : 0.0;
}

/* fmin for the hot loops of the key phase (libm's, not inlined, took a tenth of them); the terms
 * are never NaN. */
static double least(double a, double b)
{
    return b < a ? b : a;
}

void moe_plan_bound_model_init(const struct moe_model_cfg *cfg, struct moe_plan_bound_model *bm)
{
    memset(bm, 0, sizeof(*bm));
    for (int i = 0; i < cfg->num_layers && i < MOE_MAX_LAYERS; i++) {
        int m = (cfg->layer_flags[i] & MOE_LAYER_MOE) != 0;
        int w = (cfg->layer_flags[i] & MOE_LAYER_WINDOWED) != 0;
        bm->prefix_moe[i + 1] = (uint16_t)(bm->prefix_moe[i] + m);
        bm->prefix_win[i + 1] = (uint16_t)(bm->prefix_win[i] + w);
        bm->prefix_both[i + 1] = (uint16_t)(bm->prefix_both[i] + (m && w));
        bm->kinds_total[m][w]++;
    }
    if (cfg->num_layers > 0) {
        uint8_t last = cfg->layer_flags[cfg->num_layers - 1];
        bm->last_moe = (last & MOE_LAYER_MOE) != 0;
        bm->last_win = (last & MOE_LAYER_WINDOWED) != 0;
    }
}

double moe_plan_bound_load(const struct moe_plan_space *sp, const struct moe_layout *lay)
{
    const struct moe_options *o = &sp->req->opt;
    if (!sp->is_moe || o->force_load_balancing) {
        return 1.0;
    }
    /* A given factor, or auto's: the mean busiest-rank factor of the layout's (EP, tokens) from
     * the request's load statistics (model/cost.c prices the step with it), else 1, which bounds
     * any Monte Carlo factor. A busier rank is never faster. */
    double f = o->moe_imbalance >= 1.0 ? o->moe_imbalance : 1.0;
    if (sp->req->load_fn != NULL) {
        struct moe_load_stats st;
        bool used = false;
        if (sp->req->load_fn(sp->req->load_ctx, lay, &st, &used, NULL) == MOE_OK && used &&
            st.mean_factor > 1.0) {
            f = st.mean_factor;
        }
    }
    /* As model/cost.c: a capacity factor caps the load; hot-expert clones share the excess over
     * at most ep ranks. */
    if (o->capacity_factor > 0.0 && f > o->capacity_factor) {
        f = o->capacity_factor >= 1.0 ? o->capacity_factor : 1.0;
    }
    if (o->moe_hot_expert_replicas > 0 && lay->ep > 1) {
        f = 1.0 + (f - 1.0) / lay->ep;
    }
    return f;
}

bool moe_plan_bound_ep_overlap_possible(const struct moe_plan_space *sp,
                                        const struct moe_layout *lay)
{
    bool any = false;
    for (int i = 0; i < sp->num_ep_overlap; i++) {
        any = any || sp->ep_overlap[i];
    }
    return any && sp->is_moe && lay->ep > 1 && (lay->pp == 1 || lay->vpp > 1);
}

static bool tp_overlap_possible(const struct moe_plan_space *sp, const struct moe_layout *lay)
{
    bool any = false;
    for (int i = 0; i < sp->num_tp_overlap; i++) {
        any = any || sp->tp_overlap[i];
    }
    return any && lay->sequence_parallel && lay->tp > 1;
}

static bool
kind_present(const struct moe_plan_bound_model *bm, const struct moe_model_cfg *cfg, int m, int w)
{
    return bm->kinds_total[m][w] > 0 ||
           (cfg->mtp_num_layers > 0 && bm->last_moe == m && bm->last_win == w);
}

/* Options with a recipe, grouped GEMM and dispatcher, and nothing else that adds time. */
static void bound_options(const struct moe_plan_space *sp,
                          int recipe,
                          int grouped,
                          int dispatcher,
                          struct moe_options *opt)
{
    struct moe_plan_okey k;
    memset(&k, 0, sizeof(k));
    k.recipe = (uint8_t)recipe;
    k.grouped = (uint8_t)grouped;
    k.dispatcher = (uint8_t)dispatcher;
    moe_plan_okey_apply(sp, &k, opt);
}

/* Copy the terms that do not read ep or etp (dense decoder layers, loss, MTP extras, embedding). */
static void copy_attn_terms(const struct moe_plan_recipe_terms *from,
                            struct moe_plan_recipe_terms *t)
{
    for (int kd = 0; kd < MOE_PLAN_KINDS; kd++) {
        if ((kd >> 1) != 0) {
            continue;
        }
        t->fwdc[kd] = from->fwdc[kd];
        t->bwdc[kd] = from->bwdc[kd];
        t->tp[kd] = from->tp[kd];
        t->cp[kd] = from->cp[kd];
        memcpy(t->fwde[kd], from->fwde[kd], sizeof(t->fwde[kd]));
        memcpy(t->bwde[kd], from->bwde[kd], sizeof(t->bwde[kd]));
        memcpy(t->fd[kd], from->fd[kd], sizeof(t->fd[kd]));
        memcpy(t->fc[kd], from->fc[kd], sizeof(t->fc[kd]));
        memcpy(t->bd[kd], from->bd[kd], sizeof(t->bd[kd]));
        memcpy(t->bc[kd], from->bc[kd], sizeof(t->bc[kd]));
    }
    t->loss = from->loss;
    t->mtp = from->mtp;
    t->emb = from->emb;
}

/* A layer's cost for the bounds: moe_compute_layer_base, whose terms are moe_compute_layer's
 * without recompute, offload or host time -- all recipe_terms reads, of options with neither. */
static void layer_terms(const struct moe_model_cfg *cfg,
                        const struct moe_cluster *cl,
                        const struct moe_layout *lay,
                        const struct moe_options *opt,
                        struct moe_layer_kind kind,
                        double load,
                        struct moe_layer_cost *lc)
{
    struct moe_layer_base base;
    moe_compute_layer_base(cfg, cl, lay, opt, kind, load, &base);
    *lc = base.lc;
}

/* layer_terms of a MoE layer from its attention part (moe_compute_layer_attn of options that agree
 * with opt on the recipe, FP32 training and the main-gradient type): the same terms. */
static void block_terms(const struct moe_model_cfg *cfg,
                        const struct moe_cluster *cl,
                        const struct moe_layout *lay,
                        const struct moe_options *opt,
                        struct moe_layer_kind kind,
                        double load,
                        const struct moe_layer_base *attn,
                        struct moe_layer_cost *lc)
{
    struct moe_layer_base base = *attn;
    moe_compute_layer_block(cfg, cl, lay, opt, kind, load, &base);
    *lc = base.lc;
}

static void recipe_terms(const struct moe_plan_space *sp,
                         const struct moe_plan_bound_model *bm,
                         const struct moe_layout *lay,
                         double load,
                         int recipe,
                         const struct moe_plan_recipe_terms *same,
                         struct moe_plan_recipe_terms *t)
{
    const struct moe_model_cfg *cfg = sp->req->cfg;
    const struct moe_cluster *cl = sp->req->cl;
    double ov = cl->overheads.overlap_eff;
    double tp_keep = tp_overlap_possible(sp, lay) ? pos(1.0 - ov) : 1.0;
    const uint8_t *disp = lay->ep > 1 ? sp->dispatchers : sp->dispatchers_ep1;
    int num_disp = lay->ep > 1 ? sp->num_dispatchers : sp->num_dispatchers_ep1;
    struct moe_options opt;
    struct moe_layer_cost lc;
    struct moe_layer_cost lc0 = {0};
    memset(t, 0, sizeof(*t));
    if (same != NULL) {
        copy_attn_terms(same, t);
    }
    for (int kd = 0; kd < MOE_PLAN_KINDS; kd++) {
        int m = kd >> 1;
        int w = kd & 1;
        if (!kind_present(bm, cfg, m, w) || (same != NULL && m == 0)) {
            continue;
        }
        struct moe_layer_kind kind = {m != 0, w != 0};
        if (!kind.is_moe) {
            /* A dense layer reads neither the grouped-GEMM nor the dispatcher option
             * (model/compute.c: only moe_block does): one evaluation serves every value. */
            bound_options(sp, recipe, sp->grouped[0], disp[0], &opt);
            layer_terms(cfg, cl, lay, &opt, kind, load, &lc);
            t->fwdc[kd] = lc.fwd_compute;
            t->bwdc[kd] = lc.bwd_compute;
            t->tp[kd] = (lc.fwd_tp + lc.bwd_tp) * tp_keep;
            t->cp[kd] =
                pos(lc.fwd_cp - ov * lc.attn_core_fwd) + pos(lc.bwd_cp - ov * lc.attn_core_bwd);
            for (int gi = 0; gi < sp->num_grouped; gi++) {
                t->fwde[kd][gi] = lc.fwd_expert;
                t->bwde[kd][gi] = lc.bwd_expert;
            }
            for (int di = 0; di < num_disp; di++) {
                t->fd[kd][di] = lc.fwd_dispatch;
                t->fc[kd][di] = lc.fwd_combine;
                t->bd[kd][di] = lc.bwd_dispatch;
                t->bc[kd][di] = lc.bwd_combine;
            }
            continue;
        }
        /* The attention part reads neither option: once for every grouped-GEMM and dispatcher
         * value (moe_compute_layer_attn). */
        struct moe_layer_base attn;
        bound_options(sp, recipe, sp->grouped[0], disp[0], &opt);
        moe_compute_layer_attn(cfg, cl, lay, &opt, kind, &attn);
        for (int gi = 0; gi < sp->num_grouped; gi++) {
            bound_options(sp, recipe, sp->grouped[gi], disp[0], &opt);
            block_terms(cfg, cl, lay, &opt, kind, load, &attn, &lc);
            /* The busiest EP rank's expert time: the mean rank's plus the exchange's wait for it
             * (model/cost.c prices the overlaps on it, then files the wait under the exchange). */
            t->fwde[kd][gi] = lc.fwd_expert + lc.fwd_combine_wait;
            t->bwde[kd][gi] = lc.bwd_expert + lc.bwd_dispatch_wait;
            if (gi == 0) {
                lc0 = lc;
                t->fwdc[kd] = lc.fwd_compute;
                t->bwdc[kd] = lc.bwd_compute;
                t->tp[kd] = (lc.fwd_tp + lc.bwd_tp) * tp_keep;
                t->cp[kd] =
                    pos(lc.fwd_cp - ov * lc.attn_core_fwd) + pos(lc.bwd_cp - ov * lc.attn_core_bwd);
            } else {
                t->fwdc[kd] = fmin(t->fwdc[kd], lc.fwd_compute);
                t->bwdc[kd] = fmin(t->bwdc[kd], lc.bwd_compute);
            }
        }
        struct moe_layer_cost first = lc0; /* grouped[0] with disp[0], from the loop above */
        for (int di = 0; di < num_disp; di++) {
            if (di == 0) {
                lc = first;
            } else {
                bound_options(sp, recipe, sp->grouped[0], disp[di], &opt);
                block_terms(cfg, cl, lay, &opt, kind, load, &attn, &lc);
            }
            t->fd[kd][di] = lc.fwd_dispatch;
            t->fc[kd][di] = lc.fwd_combine;
            t->bd[kd][di] = lc.bwd_dispatch;
            t->bc[kd][di] = lc.bwd_combine;
            t->fwdc[kd] = fmin(t->fwdc[kd], lc.fwd_compute);
            t->bwdc[kd] = fmin(t->bwdc[kd], lc.bwd_compute);
        }
    }
    if (same != NULL) {
        return;
    }
    bound_options(sp, recipe, sp->grouped[0], disp[0], &opt);
    moe_compute_loss(cfg, cl, lay, &opt, &lc);
    t->loss = lc.fwd_compute + lc.bwd_compute + (lc.fwd_tp + lc.bwd_tp) * tp_keep;
    moe_compute_mtp_extra(cfg, cl, lay, &opt, &lc);
    t->mtp = lc.fwd_compute + lc.bwd_compute + (lc.fwd_tp + lc.bwd_tp) * tp_keep;
    moe_compute_embedding(cfg, cl, lay, &opt, &lc);
    t->emb = lc.fwd_compute + lc.bwd_compute + (lc.fwd_tp + lc.bwd_tp) * tp_keep;
}

void moe_plan_bound_terms(const struct moe_plan_space *sp,
                          const struct moe_plan_bound_model *bm,
                          const struct moe_layout *lay,
                          double load,
                          const struct moe_plan_layer_terms *same,
                          struct moe_plan_layer_terms *out)
{
    for (int ri = 0; ri < sp->num_recipes; ri++) {
        recipe_terms(sp, bm, lay, load, sp->recipes[ri], same != NULL ? &same->r[ri] : NULL,
                     &out->r[ri]);
    }
}

void moe_plan_bound_group(const struct moe_plan_space *sp,
                          const struct moe_plan_bound_model *bm,
                          const struct moe_plan_layer_terms *t,
                          int recipe_idx,
                          int grouped_idx,
                          int dispatcher_idx,
                          bool ep_overlap,
                          int num_dispatchers,
                          struct moe_plan_kind_lb *out)
{
    const struct moe_model_cfg *cfg = sp->req->cfg;
    const struct moe_plan_recipe_terms *r = &t->r[recipe_idx];
    double eo = sp->req->cl->overheads.ep_overlap_eff;
    eo = eo < 0.0 ? 0.0 : (eo > 1.0 ? 1.0 : eo);
    int g = grouped_idx;
    int d = dispatcher_idx < num_dispatchers ? dispatcher_idx : 0;
    out->per_layer_min = INFINITY;
    for (int kd = 0; kd < MOE_PLAN_KINDS; kd++) {
        int m = kd >> 1;
        int w = kd & 1;
        if (!kind_present(bm, cfg, m, w)) {
            out->kind[m][w] = 0.0;
            continue;
        }
        double comp = r->fwdc[kd] + r->bwdc[kd] + r->fwde[kd][g] + r->bwde[kd][g];
        double ep = r->fd[kd][d] + r->fc[kd][d] + r->bd[kd][d] + r->bc[kd][d];
        if (ep_overlap) {
            /* Pairing of model/cost.c's 1F1B EP overlap, with no recompute (recompute never makes
             * the pass pair shorter) and no SM loss (>= 0). */
            double hidden = least(r->fd[kd][d], r->bwde[kd][g]) + least(r->fc[kd][d], r->bwdc[kd]) +
                            least(r->bd[kd][d], r->fwde[kd][g]) + least(r->bc[kd][d], r->fwdc[kd]);
            ep = pos(ep - eo * hidden);
        }
        out->kind[m][w] = comp + r->tp[kd] + r->cp[kd] + ep;
        if (bm->kinds_total[m][w] > 0) {
            out->per_layer_min = least(out->per_layer_min, out->kind[m][w]);
        }
    }
    if (!isfinite(out->per_layer_min)) {
        out->per_layer_min = 0.0;
    }
    out->loss = r->loss;
    out->mtp = r->mtp;
    out->emb = r->emb;
}

void moe_plan_bound_least(const struct moe_plan_space *sp,
                          const struct moe_plan_bound_model *bm,
                          const struct moe_plan_layer_terms *t,
                          const struct moe_layout *lay,
                          struct moe_plan_kind_lb *out)
{
    int num_disp = lay->ep > 1 ? sp->num_dispatchers : sp->num_dispatchers_ep1;
    const uint8_t *disp = lay->ep > 1 ? sp->dispatchers : sp->dispatchers_ep1;
    bool a2a_ok = moe_plan_bound_ep_overlap_possible(sp, lay);
    bool first = true;
    for (int ri = 0; ri < sp->num_recipes; ri++) {
        for (int gi = 0; gi < sp->num_grouped; gi++) {
            for (int di = 0; di < num_disp; di++) {
                for (int a = 0; a < (a2a_ok ? 2 : 1); a++) {
                    if (a && disp[di] == MOE_DISPATCH_ALLGATHER) {
                        continue;
                    }
                    struct moe_plan_kind_lb g;
                    moe_plan_bound_group(sp, bm, t, ri, gi, di, a != 0, num_disp, &g);
                    if (first) {
                        *out = g;
                        first = false;
                        continue;
                    }
                    for (int m = 0; m < 2; m++) {
                        for (int w = 0; w < 2; w++) {
                            out->kind[m][w] = least(out->kind[m][w], g.kind[m][w]);
                        }
                    }
                    out->loss = least(out->loss, g.loss);
                    out->mtp = least(out->mtp, g.mtp);
                    out->emb = least(out->emb, g.emb);
                    out->per_layer_min = least(out->per_layer_min, g.per_layer_min);
                }
            }
        }
    }
}

/* Pipeline transfer of one micro-batch between neighbouring stages (as model/cost.c prices it). */
static double p2p_seconds(const struct moe_plan_space *sp, const struct moe_layout *lay, int dp)
{
    if (lay->pp <= 1) {
        return 0.0;
    }
    const struct moe_cluster *cl = sp->req->cl;
    struct moe_group_place g;
    moe_comm_group_place(lay->pp, lay->tp * lay->cp * dp, cl->nvlink.domain_gpus, &g);
    double t = (double)lay->mbs * lay->seq_length / lay->cp;
    bool sp_on = lay->sequence_parallel && lay->tp > 1;
    double t_sp = sp_on ? t / lay->tp : t;
    double ab = sp->req->opt.is_fp32_training ? 4.0 : 2.0;
    return moe_comm_p2p_s(cl, g.num_domains == 1, t_sp * sp->req->cfg->hidden_size * ab);
}

/* Bound on one micro-batch's pass over n[m][w] decoder layers, mtp MTP layers and the extras. */
static double span_bound(const struct moe_plan_bound_model *bm,
                         const struct moe_plan_kind_lb *lb,
                         const int (*n)[2],
                         int mtp,
                         bool emb,
                         bool loss)
{
    double s = 0.0;
    for (int m = 0; m < 2; m++) {
        for (int w = 0; w < 2; w++) {
            if (n[m][w] > 0) {
                s += n[m][w] * lb->kind[m][w];
            }
        }
    }
    if (mtp > 0) {
        s += mtp * (lb->kind[bm->last_moe][bm->last_win] + lb->mtp + lb->loss);
    }
    s += emb ? lb->emb : 0.0;
    s += loss ? lb->loss : 0.0;
    return s;
}

void moe_plan_bound_spans_init(const struct moe_plan_space *sp,
                               const struct moe_plan_bound_model *bm,
                               const struct moe_layout *lay,
                               struct moe_plan_bound_spans *out)
{
    const struct moe_cluster *cl = sp->req->cl;
    out->p2p = p2p_seconds(sp, lay, lay->dp);
    out->keep = lay->vpp > 1 ? pos(1.0 - cl->overheads.overlap_eff) : 1.0;
    int last = lay->num_chunks - 1;
    for (int p = 0; p < lay->pp; p++) {
        struct moe_plan_bound_rank *r = &out->rank[p];
        memset(r, 0, sizeof(*r));
        for (int c = p; c < lay->num_chunks; c += lay->pp) {
            const struct moe_pp_chunk *ch = &lay->chunks[c];
            int lo = ch->first_layer;
            int hi = lo + ch->num_layers;
            hi = hi < MOE_MAX_LAYERS ? hi : MOE_MAX_LAYERS;
            if (lo < hi) {
                int moe = bm->prefix_moe[hi] - bm->prefix_moe[lo];
                int win = bm->prefix_win[hi] - bm->prefix_win[lo];
                int both = bm->prefix_both[hi] - bm->prefix_both[lo];
                r->n[1][1] += both;
                r->n[1][0] += moe - both;
                r->n[0][1] += win - both;
                r->n[0][0] += (hi - lo) - moe - win + both;
            }
            r->mtp += ch->num_mtp;
            r->emb = r->emb || ch->has_embedding;
            r->loss = r->loss || ch->has_loss;
            r->sends += (c < last) + (c > 0);
        }
    }
}

double moe_plan_bound_time_spans(const struct moe_plan_space *sp,
                                 const struct moe_plan_bound_model *bm,
                                 const struct moe_plan_kind_lb *lb,
                                 const struct moe_layout *lay,
                                 const struct moe_plan_bound_spans *spans)
{
    const struct moe_cluster *cl = sp->req->cl;
    double sum = 0.0;
    double max = 0.0;
    for (int p = 0; p < lay->pp; p++) {
        const struct moe_plan_bound_rank *r = &spans->rank[p];
        double s = span_bound(bm, lb, (const int(*)[2])r->n, r->mtp, r->emb, r->loss) +
                   r->sends * spans->p2p * spans->keep;
        sum += s;
        max = s > max ? s : max;
    }
    struct moe_sched_result res;
    moe_sched_closed_form_sums(sum, max, lay->pp, lay->vpp, lay->num_microbatches, spans->p2p,
                               &res);
    return res.total_s + cl->overheads.step_fixed_ms * 1e-3;
}

double moe_plan_bound_time(const struct moe_plan_space *sp,
                           const struct moe_plan_bound_model *bm,
                           const struct moe_plan_kind_lb *lb,
                           const struct moe_layout *lay)
{
    struct moe_plan_bound_spans spans; /* only its first pp ranks are written and read */
    moe_plan_bound_spans_init(sp, bm, lay, &spans);
    return moe_plan_bound_time_spans(sp, bm, lb, lay, &spans);
}

double moe_plan_bound_time_sizes(const struct moe_plan_space *sp,
                                 const struct moe_plan_bound_model *bm,
                                 const struct moe_plan_kind_lb *lb,
                                 const struct moe_layout *lay,
                                 double rank_floor)
{
    const struct moe_model_cfg *cfg = sp->req->cfg;
    const struct moe_cluster *cl = sp->req->cl;
    int dp = lay->num_gpus / (lay->tp * lay->cp * lay->pp);
    int m = lay->gbs / (lay->mbs * dp);
    double p2p = p2p_seconds(sp, lay, dp);
    double keep = lay->vpp > 1 ? pos(1.0 - cl->overheads.overlap_eff) : 1.0;
    int chunks = lay->pp * lay->vpp;
    double sum =
        span_bound(bm, lb, (const int(*)[2])bm->kinds_total, cfg->mtp_num_layers, true, true) +
        2.0 * (chunks - 1) * p2p * keep;
    /* Whatever the placement, the slowest rank is no faster than the average one, and the closed
     * form grows with the slowest rank's sum (m >= 1/vpp). */
    double slowest = fmax(sum / lay->pp, fmin(rank_floor, sum));
    struct moe_sched_result res;
    moe_sched_closed_form_sums(sum, slowest, lay->pp, lay->vpp, m, p2p, &res);
    return res.total_s + cl->overheads.step_fixed_ms * 1e-3;
}

static double static_one(const struct moe_plan_space *sp,
                         const struct moe_layout *lay,
                         const struct moe_stage_contents *sc,
                         const struct moe_gpu_params *params,
                         const struct moe_mem_layer_set *set,
                         int recipe,
                         int static_idx,
                         int fpg)
{
    struct moe_plan_okey k;
    memset(&k, 0, sizeof(k));
    k.recipe = (uint8_t)recipe;
    k.dist_opt = sp->statics[static_idx].dist_opt;
    k.opt_offload = sp->statics[static_idx].opt_offload;
    k.fp8_param_gather = (uint8_t)fpg;
    struct moe_options opt;
    moe_plan_okey_apply(sp, &k, &opt);
    struct moe_mem_bytes mb;
    moe_mem_stage_with(sp->req->cfg, sp->req->cl, lay, &opt, 0, sc, params, set, &mb);
    return mb.weights + mb.grads + mb.optimizer;
}

double moe_plan_bound_stage_static(const struct moe_plan_space *sp,
                                   const struct moe_layout *lay,
                                   const struct moe_stage_contents *sc,
                                   int recipe_idx,
                                   int static_idx)
{
    struct moe_gpu_params params;
    moe_mem_gpu_params(sp->req->cfg, lay, sc, &params);
    struct moe_mem_layer_set set;
    memset(&set, 0, sizeof(set));
    set.load_factor = 1.0;
    if (recipe_idx >= 0) {
        int r = sp->recipes[recipe_idx];
        const struct moe_plan_static *st = &sp->statics[static_idx];
        int fpg = moe_plan_space_fp8_param_gather(sp, r, st->dist_opt, st->opt_offload);
        return static_one(sp, lay, sc, &params, &set, r, static_idx, fpg);
    }
    double best = INFINITY;
    for (int ri = 0; ri < sp->num_recipes; ri++) {
        for (int si = 0; si < sp->num_statics; si++) {
            for (int fpg = 0; fpg < 2; fpg++) {
                if (sp->fp8_param_gather_fixed && fpg != (sp->req->opt.fp8_param_gather ? 1 : 0)) {
                    continue;
                }
                best = fmin(best, static_one(sp, lay, sc, &params, &set, sp->recipes[ri], si, fpg));
            }
        }
    }
    return best;
}

void moe_plan_bound_rc_terms(const struct moe_plan_space *sp,
                             const struct moe_layout *lay,
                             double load,
                             int recipe,
                             int grouped,
                             struct moe_plan_rc_terms *out)
{
    const struct moe_model_cfg *cfg = sp->req->cfg;
    const struct moe_cluster *cl = sp->req->cl;
    memset(out, 0, sizeof(*out));
    struct moe_options opt;
    bound_options(sp, recipe, grouped, MOE_DISPATCH_ALLTOALL, &opt);
    for (int kd = 0; kd < MOE_PLAN_KINDS; kd++) {
        struct moe_layer_kind kind = {(kd >> 1) != 0, (kd & 1) != 0};
        if (!kind.is_moe && !sp->has_dense) {
            continue;
        }
        if (kind.is_moe && !sp->is_moe) {
            continue;
        }
        struct moe_layer_cost lc;
        for (int b = 0; b < 7; b++) {
            opt.recompute = MOE_RECOMPUTE_SELECTIVE;
            opt.recompute_modules = 1u << b;
            moe_compute_layer(cfg, cl, lay, &opt, kind, load, 0.0, &lc);
            out->mod[kd][b] = lc.recompute;
        }
        opt.recompute = MOE_RECOMPUTE_FULL;
        opt.recompute_modules = 0;
        opt.recompute_num_layers = 1;
        moe_compute_layer(cfg, cl, lay, &opt, kind, load, 0.0, &lc);
        out->full[kd] = lc.recompute;
        opt.recompute_num_layers = 0;
    }
}

double
moe_plan_bound_rc_layer(const struct moe_plan_rc_terms *t, const struct moe_plan_rc *rc, int kind)
{
    if (rc->rc == MOE_RECOMPUTE_FULL) {
        return t->full[kind];
    }
    if (rc->rc != MOE_RECOMPUTE_SELECTIVE) {
        return 0.0;
    }
    double r = 0.0;
    for (int b = 0; b < 7; b++) {
        if (rc->mods & (1u << b)) {
            r += t->mod[kind][b];
        }
    }
    return r;
}
