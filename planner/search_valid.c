/*
 * Option validity on the current layout (planner/search_internal.h): does Megatron accept this
 * option set here? Answered from verdicts cached by list index and stamped by layout class, not
 * by a moe_layout_resolve per candidate. space.h states the decomposition it relies on: the rules
 * read the layout only through its class (valid_class), and each involves at most two of four
 * parts of the options (the group, recompute, activation offload, the time-only knobs), so a set
 * is valid when each part is with the others neutral and each pair of the last three is.
 * tests/planner/test_space compares the verdicts with direct resolution, and the search confirms
 * every plan that can change a result with a full resolve (search_results.c).
 */
#include "planner/search_internal.h"

#include <string.h>

/* Class of the layout for option validity (see space.h). */
static uint64_t valid_class(const struct search *s, const struct moe_layout *lay)
{
    const struct moe_plan_request *req = s->req;
    uint64_t ep =
        req->opt.moe_hot_expert_replicas > 0 ? (uint64_t)lay->ep : (uint64_t)(lay->ep > 1);
    uint64_t per_rank = (uint64_t)(req->cfg->num_layers / (lay->pp > 0 ? lay->pp : 1));
    return (uint64_t)(lay->sequence_parallel ? 1 : 0) | ep << 1 | (uint64_t)(lay->pp > 1) << 21 |
           (uint64_t)(lay->vpp > 1) << 22 | per_rank << 23;
}

/* Start stamping verdicts for the current layout's class. */
void moe_search_vmemo_layout(struct worker *w)
{
    uint64_t ck = valid_class(w->s, &w->lay);
    if (ck == w->vm.ckey && w->vm.stamp != 0) {
        return;
    }
    w->vm.ckey = ck;
    w->vm.stamp++;
    if (w->vm.stamp >= (1u << 30)) {
        size_t ng = (size_t)w->vm.num_groups;
        memset(w->vm.g, 0, ng * sizeof(uint32_t));
        memset(w->vm.r, 0, ng * MOE_PLAN_MAX_RC * sizeof(uint32_t));
        memset(w->vm.f, 0, ng * MOE_PLAN_MAX_OFF * sizeof(uint32_t));
        memset(w->vm.x, 0, ng * MAX_X * sizeof(uint32_t));
        memset(w->vm.rf, 0, (size_t)MOE_PLAN_MAX_RC * MOE_PLAN_MAX_OFF * sizeof(uint32_t));
        memset(w->vm.rx, 0, (size_t)MOE_PLAN_MAX_RC * MAX_X * sizeof(uint32_t));
        memset(w->vm.fx, 0, (size_t)MOE_PLAN_MAX_OFF * MAX_X * sizeof(uint32_t));
        memset(w->vm.n, 0, ((size_t)1 << VCOUNT_LOG2) * sizeof(struct vcount));
        w->vm.stamp = 1;
    }
}

/* Verdict of okey t from slot e (computed by a full resolve when not yet stamped). */
static bool memo_verdict(struct worker *w, uint32_t *e, const struct moe_plan_okey *t)
{
    if ((*e >> 1) == w->vm.stamp) {
        return (*e & 1u) != 0;
    }
    w->resolves++;
    bool v = moe_plan_valid_full(&w->s->sp, &w->lay, t);
    *e = w->vm.stamp << 1 | (v ? 1u : 0u);
    return v;
}

/*
 * Verdict of okey t, one layer count of an "every layer count" value (idx as in struct vcount)
 * with the other parts neutral, in the current group: moe_plan_valid's, kept per count under the
 * layout class's stamp like the verdicts above (block recompute tries each count of each row).
 */
static bool count_verdict(struct worker *w, int idx, int count, const struct moe_plan_okey *t)
{
    uint64_t h =
        (uint64_t)(uint32_t)w->gidx * 0x9e3779b97f4a7c15ULL ^
        ((uint64_t)(uint16_t)idx << 16 | (uint64_t)(uint16_t)count) * 0xbf58476d1ce4e5b9ULL;
    struct vcount *e = &w->vm.n[(h >> 32) & (((uint64_t)1 << VCOUNT_LOG2) - 1)];
    if (e->stamp == w->vm.stamp && e->gi == w->gidx && e->idx == idx && e->count == count) {
        return e->valid;
    }
    bool v = moe_plan_valid(w->vc, &w->s->sp, &w->lay, t, &w->resolves);
    *e = (struct vcount){w->vm.stamp, w->gidx, (int16_t)idx, (uint16_t)count, v};
    return v;
}

static void neutral_parts(const struct moe_plan_space *sp,
                          struct moe_plan_okey *t,
                          bool keep_rc,
                          bool keep_off,
                          bool keep_x)
{
    if (!keep_rc) {
        t->rc = MOE_RECOMPUTE_NONE;
        t->rc_method = 0;
        t->rc_mods = 0;
        t->rc_layers = 0;
    }
    if (!keep_off) {
        t->off = 0;
        t->off_mods = 0;
        t->off_layers = 0;
    }
    if (!keep_x) {
        t->tp_overlap = 0;
        t->graph = (uint8_t)sp->graph_neutral;
    }
}

/*
 * Is okey k (of the current group) valid? Each part (recompute, offload, time-only knobs) with the
 * others neutral, then each pair of them (space.h). "Every layer count" values are looked up per
 * count in the hash cache; their pairs use count 1 (no rule ties a count to another part).
 */
bool moe_search_valid(struct worker *w, const struct moe_plan_okey *k)
{
    const struct moe_plan_space *sp = &w->s->sp;
    int gi = w->gidx;
    struct moe_plan_okey t = *k;
    neutral_parts(sp, &t, false, false, false);
    if (!memo_verdict(w, &w->vm.g[gi], &t)) {
        return false;
    }
    bool has_rc = k->rc != MOE_RECOMPUTE_NONE;
    bool has_off = k->off != 0;
    bool has_x = k->tp_overlap != 0 || k->graph != sp->graph_neutral;
    int ri = sp->rc_index[k->rc % 3][k->rc_method & 1][k->rc_mods & 127];
    int fi = sp->off_index[k->off % 3][k->off_mods & 127];
    int xi = k->tp_overlap * (sp->num_graphs + 1) + k->graph;
    bool rc_n = has_rc && ri >= 0 && sp->rcs[ri].layers == 0 && k->rc_layers != 0;
    bool off_n = has_off && fi >= 0 && sp->offs[fi].layers == 0 && k->off_layers != 0;
    if ((has_rc && ri < 0) || (has_off && fi < 0) || xi >= MAX_X) {
        return moe_plan_valid(w->vc, sp, &w->lay, k, &w->resolves);
    }
    if (has_rc) {
        t = *k;
        neutral_parts(sp, &t, true, false, false);
        bool v = rc_n ? count_verdict(w, ri, k->rc_layers, &t)
                      : memo_verdict(w, &w->vm.r[gi * MOE_PLAN_MAX_RC + ri], &t);
        if (!v) {
            return false;
        }
    }
    if (has_off) {
        t = *k;
        neutral_parts(sp, &t, false, true, false);
        bool v = off_n ? count_verdict(w, -1 - fi, k->off_layers, &t)
                       : memo_verdict(w, &w->vm.f[gi * MOE_PLAN_MAX_OFF + fi], &t);
        if (!v) {
            return false;
        }
    }
    if (has_x) {
        t = *k;
        neutral_parts(sp, &t, false, false, true);
        if (!memo_verdict(w, &w->vm.x[gi * MAX_X + xi], &t)) {
            return false;
        }
    }
    /* Pairs, with "every layer count" values at count 1. */
    struct moe_plan_okey u = *k;
    if (rc_n) {
        u.rc_layers = 1;
    }
    if (off_n) {
        u.off_layers = 1;
    }
    if (has_rc && has_off) {
        t = u;
        neutral_parts(sp, &t, true, true, false);
        if (!memo_verdict(w, &w->vm.rf[ri * MOE_PLAN_MAX_OFF + fi], &t)) {
            return false;
        }
    }
    if (has_rc && has_x) {
        t = u;
        neutral_parts(sp, &t, true, false, true);
        if (!memo_verdict(w, &w->vm.rx[ri * MAX_X + xi], &t)) {
            return false;
        }
    }
    if (has_off && has_x) {
        t = u;
        neutral_parts(sp, &t, false, true, true);
        if (!memo_verdict(w, &w->vm.fx[fi * MAX_X + xi], &t)) {
            return false;
        }
    }
    return true;
}

bool moe_search_valid_full(struct worker *w, const struct moe_plan_okey *k)
{
    w->resolves++;
    return moe_plan_valid_full(&w->s->sp, &w->lay, k);
}
