/*
 * Memory of option sets on the current layout (planner/search_internal.h): the worst stage's
 * figure moe_cost_predict would report, without a prediction (moe_search_memory_of); the activation
 * views it is made from; the static memory (weights, gradients, optimizer state, context) of each
 * recipe and optimizer choice, the layout's and its groups' memory bounds; the expert load the
 * memory reads.
 *
 * Sharing. Memory depends on few of a group's options (moe_mem_opt_key), so groups that differ
 * only in grouped GEMM, EP overlap or a dispatcher with the same buffers read one figure per
 * recompute and offload value from the layout's memo; activation views are shared by the layouts
 * that agree on what they read (moe_search_views_for_layout), and the layer set is updated in place
 * as the offload set changes (layer_set).
 *
 * Exactness: a figure is the prediction's (moe_mem_stage_with at the prediction's load factor, the
 * worst stage taken as moe_cost_predict takes it); every prediction the search makes is compared
 * with it (memory_mismatches, 0).
 */
#include "planner/search_internal.h"

#include <math.h>
#include <string.h>

static bool contents_equal(const struct moe_stage_contents *a, const struct moe_stage_contents *b)
{
    return a->num_dense == b->num_dense && a->num_moe == b->num_moe &&
           a->num_windowed == b->num_windowed && a->num_mtp == b->num_mtp &&
           a->has_embedding == b->has_embedding && a->has_loss == b->has_loss &&
           a->has_output_weight == b->has_output_weight && a->num_chunks == b->num_chunks &&
           a->max_chunk_layers == b->max_chunk_layers;
}

/*
 * The activation views moe_mem_layer_set_init computes (memory.h). The set without recompute or
 * offload (every view alike, and whatever else the model derives per layer, such as the backward
 * working set) is cached per layout and group: it does not depend on recompute or offload; the
 * views after selective recompute per layout, group and module set (they do not depend on
 * offload); only the views after offload are computed each time. A prediction's memory is checked
 * against this (memory_mismatches).
 */
/* The layer views of opt after `apply` (recompute, or recompute and offload), from the layout's
 * cache: keyed by the options moe_mem_layer_activations reads (model/memory.c: recipe, selective
 * recompute modules, offload modules; FP32 training is the run's), so option groups that differ
 * elsewhere share them. */
static uint64_t view_key(const struct moe_options *opt, bool off)
{
    bool has_rc = opt->recompute == MOE_RECOMPUTE_SELECTIVE;
    return (uint64_t)opt->recipe << 48 | (uint64_t)has_rc << 47 | (uint64_t)off << 46 |
           (uint64_t)(has_rc ? opt->recompute_modules & 0x3fffffffu : 0u) << 16 |
           (uint64_t)(off ? opt->offload_modules & 0xffffu : 0u);
}

struct view_slot *moe_search_view_of(struct worker *w, const struct moe_options *opt, bool off)
{
    uint64_t key = view_key(opt, off);
    uint64_t h = (key ^ (uint64_t)w->view_serial * 0x9e3779b97f4a7c15ULL) * 0xbf58476d1ce4e5b9ULL;
    struct view_slot *v = &w->views[(h >> 40) & (VIEW_SLOTS - 1)];
    if (v->serial != w->view_serial || v->key != key) {
        const struct moe_model_cfg *cfg = w->s->req->cfg;
        unsigned apply = MOE_MEM_APPLY_RECOMPUTE | (off ? MOE_MEM_APPLY_OFFLOAD : 0u);
        moe_mem_layer_activations(cfg, &w->lay, opt, false, w->load, apply, &v->dense);
        moe_mem_layer_activations(cfg, &w->lay, opt, true, w->load, apply, &v->moe);
        v->serial = w->view_serial;
        v->key = key;
        v->copy_load = NAN;
    }
    return v;
}

/*
 * The layer set of opt in w->set (returned), which keeps what it was last built for: the views
 * without options (per view_serial and recipe), after recompute and after offload (by view key);
 * moe_search_memory_of's consecutive misses mostly differ in the offload set alone.
 */
static const struct moe_mem_layer_set *layer_set(struct worker *w, const struct moe_options *opt)
{
    const struct moe_model_cfg *cfg = w->s->req->cfg;
    const struct moe_layout *lay = &w->lay;
    struct moe_mem_layer_set *set = &w->set;
    struct moe_mem_layer_set *set0 = &w->set0[opt->recipe];
    if (w->set0_serial[opt->recipe] != w->view_serial) {
        struct moe_options o0 = *opt;
        o0.recompute = MOE_RECOMPUTE_NONE;
        o0.fine_grained_offload = false;
        moe_mem_layer_set_init(cfg, lay, &o0, w->load, set0);
        w->set0_serial[opt->recipe] = w->view_serial;
    }
    if (w->set_serial != w->view_serial || w->set_recipe != (int)opt->recipe) {
        *set = *set0;
        w->set_serial = w->view_serial;
        w->set_recipe = (int)opt->recipe;
        w->set_key[0] = w->set_key[1] = UINT64_MAX;
    }
    /* [1]: after recompute, the same for every offload value of a recompute value */
    bool has_rc = opt->recompute == MOE_RECOMPUTE_SELECTIVE;
    uint64_t k1 = has_rc ? view_key(opt, false) : UINT64_MAX - 1;
    if (w->set_key[0] != k1) {
        if (has_rc) {
            const struct view_slot *v = moe_search_view_of(w, opt, false);
            set->dense[1] = v->dense;
            set->moe[1] = v->moe;
        } else {
            set->dense[1] = set0->dense[1];
            set->moe[1] = set0->moe[1];
        }
        w->set_key[0] = k1;
        w->set_key[1] = UINT64_MAX;
    }
    /* [2]: after recompute and offload */
    uint64_t k2 = opt->fine_grained_offload ? view_key(opt, true) : UINT64_MAX - 1;
    if (w->set_key[1] != k2) {
        if (opt->fine_grained_offload) {
            const struct view_slot *v = moe_search_view_of(w, opt, true);
            set->dense[2] = v->dense;
            set->moe[2] = v->moe;
        } else {
            set->dense[2] = set->dense[1];
            set->moe[2] = set->moe[1];
        }
        w->set_key[1] = k2;
    }
    return set;
}

/* Memory of the current layout with these options: moe_mem_stage_with over the ranks, the worst
 * taken as moe_cost_predict takes it (the first rank with the largest total). A middle rank with
 * the previous rank's contents holds no more micro-batches, so it cannot be larger. */
void moe_search_memory_of(struct worker *w, const struct moe_options *opt, struct memo *out)
{
    const struct search *s = w->s;
    const struct moe_layout *lay = &w->lay;
    struct moe_mem_opt_key key;
    memset(&key, 0, sizeof(key));
    moe_mem_opt_key(s->req->cl, opt, &key);
    uint64_t h = (key.bits[0] * 0x9e3779b97f4a7c15ULL) ^ (key.bits[1] * 0xbf58476d1ce4e5b9ULL) ^
                 (uint64_t)(key.optimizer_offload_fraction * 1024.0);
    struct mem_slot *slot = &w->mems[(h ^ h >> 29) & (MEM_SLOTS - 1)];
    if (slot->serial == w->layout_serial && memcmp(&slot->key, &key, sizeof(key)) == 0) {
        *out = slot->m;
        return;
    }
    const struct moe_mem_layer_set *set = layer_set(w, opt);
    struct moe_mem_stage_terms terms;
    moe_mem_stage_terms_init(s->req->cfg, s->req->cl, lay, opt, set, &terms);
    out->total = -1.0;
    out->host = 0.0;
    out->stat = 0.0;
    for (int p = 0; p < lay->pp; p++) {
        if (p > 1 && p < lay->pp - 1 && contents_equal(&w->sc[p], &w->sc[p - 1])) {
            continue;
        }
        struct moe_mem_bytes mb;
        moe_mem_stage_with_terms(s->req->cfg, s->req->cl, lay, opt, p, &w->sc[p], &w->gp[p], set,
                                 &terms, &mb);
        if (mb.total > out->total) {
            out->total = mb.total;
            out->host = mb.host_offload;
            out->stat = mb.weights + mb.grads + mb.optimizer;
        }
    }
    out->act[0] = set->dense[1].total;
    out->act[1] = set->dense[2].total;
    out->act[2] = set->moe[1].total;
    out->act[3] = set->moe[2].total;
    w->c.mem_evaluated++;
    slot->serial = w->layout_serial;
    slot->key = key;
    slot->m = *out;
}

bool moe_search_memo_fits(const struct search *s, const struct memo *m)
{
    return m->total <= s->cap && m->host <= s->host_cap;
}

/*
 * Static memory (weights, gradients, optimizer state, plus context) of the worst rank for each
 * recipe and optimizer choice, into w->static_ps; returns the least over them (the layout's
 * memory bound). Ranks with the same contents are evaluated once.
 */
double moe_search_static_bounds(struct worker *w)
{
    const struct search *s = w->s;
    const struct moe_plan_space *sp = &s->sp;
    double least = INFINITY;
    for (int ri = 0; ri < sp->num_recipes; ri++) {
        for (int si = 0; si < sp->num_statics; si++) {
            w->static_ps[ri][si] = 0.0;
        }
    }
    for (int p = 0; p < w->lay.pp; p++) {
        if (p > 0 && contents_equal(&w->sc[p], &w->sc[p - 1])) {
            continue;
        }
        const struct moe_stage_contents *c = &w->sc[p];
        int key[12] = {w->lay.tp,  w->lay.cp,        w->lay.dp,    w->lay.ep,
                       w->lay.etp, w->lay.pp,        c->num_dense, c->num_moe,
                       c->num_mtp, c->has_embedding, c->has_loss,  c->has_output_weight};
        uint64_t h = 1469598103934665603ULL;
        for (int i = 0; i < 12; i++) {
            h = (h ^ (uint64_t)(uint32_t)key[i]) * 1099511628211ULL;
        }
        struct static_slot *slot = &w->statics[(h ^ (h >> 31)) & (STATIC_SLOTS - 1)];
        if (!slot->used || memcmp(slot->key, key, sizeof(key)) != 0) {
            memcpy(slot->key, key, sizeof(key));
            slot->used = true;
            for (int ri = 0; ri < sp->num_recipes; ri++) {
                for (int si = 0; si < sp->num_statics; si++) {
                    slot->bytes[ri][si] = moe_plan_bound_stage_static(sp, &w->lay, c, ri, si);
                }
            }
        }
        for (int ri = 0; ri < sp->num_recipes; ri++) {
            for (int si = 0; si < sp->num_statics; si++) {
                w->static_ps[ri][si] =
                    fmax(w->static_ps[ri][si], slot->bytes[ri][si] + s->ctx_bytes);
            }
        }
    }
    for (int ri = 0; ri < sp->num_recipes; ri++) {
        for (int si = 0; si < sp->num_statics; si++) {
            least = fmin(least, w->static_ps[ri][si]);
        }
    }
    return least;
}

/* Expert-load statistics and the load factor predict uses for this layout's memory (read back
 * from one prediction, so memory-only evaluations match moe_cost_predict exactly). */
void moe_search_load_for_layout(struct worker *w)
{
    const struct search *s = w->s;
    w->has_stats = false;
    if (s->req->load_fn != NULL) {
        bool used = false;
        if (s->req->load_fn(s->req->load_ctx, &w->lay, &w->stats, &used, NULL) == MOE_OK && used) {
            w->has_stats = true;
        }
    }
    struct moe_options opt;
    struct moe_plan_okey k;
    memset(&k, 0, sizeof(k));
    k.recipe = s->sp.recipes[0];
    moe_plan_okey_apply(&s->sp, &k, &opt);
    struct moe_prediction p;
    w->load = 1.0;
    if (moe_cost_predict_prepared(&s->prep, s->req->cl, &w->lay, &opt,
                                  w->has_stats ? &w->stats : NULL, MOE_SCHED_CLOSED_FORM, w->ws,
                                  w->ws_bytes, &p, NULL) == MOE_OK) {
        w->load = p.load_factor_p99;
    }
}

/*
 * The activation views (moe_search_view_of, layer_set) read, of the layout, only tp, cp,
 * micro-batch size, sequence parallelism, etp and sequence length, and the load factor
 * (model/memory.c moe_mem_layer_activations and moe_mem_layer_set_init): layouts that agree on
 * those, such as the vpp values and placements of one node, share them.
 */
void moe_search_views_for_layout(struct worker *w)
{
    const struct moe_layout *l = &w->lay;
    double key[7] = {l->tp,  l->cp,         l->mbs, l->sequence_parallel ? 1.0 : 0.0,
                     l->etp, l->seq_length, w->load};
    if (w->view_serial == 0 || memcmp(key, w->view_key, sizeof(key)) != 0) {
        memcpy(w->view_key, key, sizeof(key));
        w->view_serial++;
    }
}
