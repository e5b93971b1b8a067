/*
 * Megatron-Core's allgather token dispatcher (MoEAllGatherTokenDispatcher): instead of sending
 * each token copy to the rank of its expert, every rank of the ETP x EP group all-gathers the
 * group's tokens with their top-k choices and weights (G = ETP EP Ms rows), picks the copies bound
 * for its own experts, runs its experts' FFN slice on them, combines them with their weights into
 * a partial output for all G tokens, and the group reduce-scatters the partial outputs back to
 * the tokens' owners (summing the experts' and the ETP slices' shares). Backward all-gathers the
 * output gradient, runs the experts backward and reduce-scatters the input and weight gradients.
 *
 * The layout is computed on the gathered top-k choices, identically on every member (DeepEP's
 * dispatch layout of kernels/kernels.h over E experts on EP ranks): this rank's rows are the
 * contiguous block of its experts, and a slot of another rank's expert maps to -1, which the
 * combine kernels skip. Dropless only (a capacity would be applied over the whole group); host
 * bookkeeping, so the CPU backend only.
 */
#include "engine/check.h"
#include "engine/internal.h"

#include <string.h>

/* The group's gathered routing, and this rank's block of the dispatch layout. */
struct ag_layout {
    int rows;       /* R: copies for this rank's experts */
    int row0;       /* their first row in the group's layout */
    const int *r2s; /* [R] slot of each of this rank's rows (group slot indices) */
};

static void ag_gather(struct moe_eng *e, const void *x, void *out, size_t n, enum moe_comm_dtype t)
{
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_DISPATCH);
    moe_comm_allgather(e->groups.etpep, x, out, n, t);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

static void ag_scatter(struct moe_eng *e, float *partial, float *out, size_t n)
{
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_COMBINE);
    moe_comm_reducescatter(e->groups.etpep, partial, out, n, MOE_COMM_F32, MOE_COMM_SUM);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

/* The layout of the group's G tokens; fills a->ag_s2r and a->ag_counts. */
static struct ag_layout ag_layout_make(struct moe_eng *e, struct moe_eng_layer_act *a, int G)
{
    const struct moe_eng_dims *d = &e->d;
    int K = d->topk, E = d->experts;
    struct moe_eng_arena *t = &e->temp;
    int *gidx = moe_eng_arena_ints(t, (size_t)G * (size_t)K);
    ag_gather(e, a->topk_idx, gidx, (size_t)d->tokens_sp * (size_t)K, MOE_COMM_I32);
    int *tpe = moe_eng_arena_ints(t, (size_t)E);
    int *per_rank = moe_eng_arena_ints(t, (size_t)d->ep);
    int *s2r = moe_eng_arena_ints(t, (size_t)G * (size_t)K);
    int *r2s = moe_eng_arena_ints(t, (size_t)G * (size_t)K);
    e->k->dispatch_layout(tpe, per_rank, s2r, r2s, gidx, G, K, E, d->ep, 0, e->kc);
    struct ag_layout l = {0, 0, NULL};
    for (int i = 0; i < d->expert0; i++) {
        l.row0 += tpe[i];
    }
    for (int i = 0; i < d->experts_l; i++) {
        a->ag_counts[i] = tpe[d->expert0 + i];
        l.rows += a->ag_counts[i];
    }
    for (size_t s = 0; s < (size_t)G * (size_t)K; s++) {
        int r = s2r[s] - l.row0;
        a->ag_s2r[s] = s2r[s] >= 0 && r >= 0 && r < l.rows ? r : -1;
    }
    l.r2s = r2s + l.row0;
    return l;
}

void moe_eng_allgather_fwd(struct moe_eng *e,
                           const struct moe_eng_layer_w *w,
                           struct moe_eng_layer_act *a,
                           const float *h,
                           float *out)
{
    const struct moe_eng_dims *d = &e->d;
    const struct moe_k_ops *k = e->k;
    int Ms = d->tokens_sp, K = d->topk, C = d->hidden, fel = d->expert_ffn_l;
    int G = Ms * moe_comm_size(e->groups.etpep);
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_DISPATCH);
    size_t mark = moe_eng_arena_mark(&e->temp);
    float *hg = moe_eng_arena_floats(&e->temp, (size_t)G * (size_t)C);
    ag_gather(e, h, hg, (size_t)Ms * (size_t)C, MOE_COMM_F32);
    ag_gather(e, a->topk_w, a->ag_w, (size_t)Ms * (size_t)K, MOE_COMM_F32);
    struct ag_layout l = ag_layout_make(e, a, G);
    if (l.rows > d->rows_exp) {
        moe_eng_fatal(__FILE__, __LINE__,
                      "expert load exceeded the expert rows buffer (%d rows > %d); rerun with a "
                      "larger --moe-buffer-factor or 0 (worst case)",
                      l.rows, d->rows_exp);
    }
    struct moe_eng_stats *st = &e->stats;
    if (!e->is_recomputing && st->num_ep_rows[w->idx] < st->cap_ep_rows) {
        st->ep_rows[(size_t)w->idx * (size_t)st->cap_ep_rows + (size_t)st->num_ep_rows[w->idx]++] =
            l.rows;
    }
    k->permute(a->xe, hg, l.r2s, l.rows, K, C, e->kc);
    moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_EXPERT_GEMM);
    moe_eng_grouped_fwd(e, a->e_fc1, a->xe, w->e_fc1.w, w->e_fc1_bias.w, a->ag_counts, a->ag_counts,
                        C, d->glu * fel);
    moe_eng_act_fwd(e, a->e_act, a->e_fc1, l.rows, fel);
    moe_eng_grouped_fwd(e, a->y_rows, a->e_act, w->e_fc2.w, w->e_fc2_bias.w, a->ag_counts,
                        a->ag_counts, fel, C);
    moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_COMBINE);
    float *partial = moe_eng_arena_floats(&e->temp, (size_t)G * (size_t)C);
    k->unpermute(partial, a->y_rows, a->ag_w, a->ag_s2r, G, K, C, e->kc);
    ag_scatter(e, partial, out, (size_t)Ms * (size_t)C);
    moe_eng_arena_release(&e->temp, mark);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

void moe_eng_allgather_bwd(struct moe_eng *e,
                           const struct moe_eng_layer_w *w,
                           struct moe_eng_layer_act *a,
                           const float *dout,
                           float *dh,
                           float *d_topk_w)
{
    const struct moe_eng_dims *d = &e->d;
    const struct moe_k_ops *k = e->k;
    int Ms = d->tokens_sp, K = d->topk, C = d->hidden, fel = d->expert_ffn_l;
    int G = Ms * moe_comm_size(e->groups.etpep);
    int rows = 0;
    for (int i = 0; i < d->experts_l; i++) {
        rows += a->ag_counts[i];
    }
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_COMBINE);
    size_t mark = moe_eng_arena_mark(&e->temp);
    float *dg = moe_eng_arena_floats(&e->temp, (size_t)G * (size_t)C);
    ag_gather(e, dout, dg, (size_t)Ms * (size_t)C, MOE_COMM_F32);
    float *d_rows = moe_eng_arena_floats(&e->temp, (size_t)d->rows_exp * (size_t)C);
    float *dwg = moe_eng_arena_floats(&e->temp, (size_t)G * (size_t)K);
    k->unpermute_bwd(d_rows, dwg, dg, a->y_rows, a->ag_w, a->ag_s2r, G, K, C, e->kc);
    moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_EXPERT_GEMM);
    if (e->plan.options.recompute == MOE_RECOMPUTE_SELECTIVE &&
        (e->plan.options.recompute_modules & MOE_RC_MOE_ACT)) {
        moe_eng_act_fwd(e, a->e_act, a->e_fc1, rows, fel);
    }
    float *d_act = moe_eng_arena_floats(&e->temp, (size_t)d->rows_exp * (size_t)fel);
    moe_eng_grouped_bwd(e, d_act, w->e_fc2.g, w->e_fc2_bias.g, d_rows, a->e_act, w->e_fc2.w,
                        a->ag_counts, a->ag_counts, fel, C);
    float *d_fc1 =
        moe_eng_arena_floats(&e->temp, (size_t)d->rows_exp * (size_t)d->glu * (size_t)fel);
    moe_eng_act_bwd(e, d_fc1, d_act, a->e_fc1, rows, fel);
    moe_eng_grouped_bwd(e, d_rows, w->e_fc1.g, w->e_fc1_bias.g, d_fc1, a->xe, w->e_fc1.w,
                        a->ag_counts, a->ag_counts, C, d->glu * fel);
    moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_DISPATCH);
    k->permute_bwd(dg, d_rows, a->ag_s2r, G, K, C, false, e->kc);
    float *dloc = moe_eng_arena_floats(&e->temp, (size_t)Ms * (size_t)C);
    ag_scatter(e, dg, dloc, (size_t)Ms * (size_t)C);
    k->axpy(dh, dloc, (size_t)Ms * (size_t)C, 1.0f, e->kc);
    ag_scatter(e, dwg, d_topk_w, (size_t)Ms * (size_t)K);
    moe_eng_arena_release(&e->temp, mark);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}
