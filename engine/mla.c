/*
 * Multi-latent attention (DeepSeek-V2/V3, Kimi-K2; Megatron-Core's MLASelfAttention): the normed
 * input h1 [Ms, C] is projected down to a query latent cq [Rq] (skipped when q_lora_rank is 0, as
 * in DeepSeek-V2-Lite: the queries then come from h1 directly) and a key-value latent [Rkv + dr],
 * whose last dr columns are the rotary key kpe shared by every head. Each latent gets its own
 * RMSNorm; the up projections make the per-head q [dn + dr] and [k_nope dn, v dv] (column-parallel:
 * TP splits the heads); q's last dr dims and kpe get RoPE, and k = [k_nope, rope(kpe)] per head.
 * The core attention then runs with Dqk = dn + dr and Dv = dv (engine/attention.c).
 *
 * Tensor parallelism: the down projections and latent norms are replicated over TP (Megatron's
 * "duplicated" linears). With sequence parallelism they run on this rank's Ms tokens and the
 * latents are all-gathered to [M] (before their norms, as Megatron gathers them); in backward the
 * latents' gradients, partial over TP (each rank holds some heads), are reduce-scattered back,
 * so the down weights' gradients are partial sums over the token shards. Without sequence
 * parallelism the latents' gradients stay partial, the down projections' input gradient is
 * all-reduced once at the end, and their weight gradients are again partial over TP: either way
 * those buckets are summed over TP (engine/model.c).
 *
 * Saved for backward: the latents before and after their norms (cq, cq_n, ckv, ckv_n), kpe, and
 * the per-head q/k/v unless --recompute-modules mla_up_proj drops them (moe_eng_mla_heads_fwd
 * recomputes them from the normed latents in backward).
 */
#include "engine/internal.h"

#include <string.h>

#define NORM_EPS 1e-5f /* Megatron-LM --norm-epsilon default */

/* x_loc [Ms, cols] all-gathered over TP into x [M, cols] (a copy without sequence parallelism). */
static void gather_rows(struct moe_eng *e, const float *x_loc, float *x, int cols)
{
    if (!e->d.sp) {
        if (x != x_loc) {
            moe_eng_copy(e->ctx.dev, x, x_loc, (size_t)e->d.tokens * (size_t)cols * sizeof(float));
        }
        return;
    }
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_TP_COMM);
    moe_comm_allgather(e->groups.tp, x_loc, x, (size_t)e->d.tokens_sp * (size_t)cols, MOE_COMM_F32);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

/* Gradient of gather_rows: d [M, cols] (partial over TP) reduce-scattered into d_loc [Ms, cols];
 * without sequence parallelism d itself (still partial). */
static const float *scatter_rows(struct moe_eng *e, float *d, int cols)
{
    if (!e->d.sp) {
        return d;
    }
    float *d_loc = moe_eng_arena_floats(&e->temp, (size_t)e->d.tokens_sp * (size_t)cols);
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_TP_COMM);
    moe_comm_reducescatter(e->groups.tp, d, d_loc, (size_t)e->d.tokens_sp * (size_t)cols,
                           MOE_COMM_F32, MOE_COMM_SUM);
    moe_eng_phase_enter(&e->ctx.timer, prev);
    return d_loc;
}

void moe_eng_mla_heads_fwd(struct moe_eng *e,
                           const struct moe_eng_layer_w *w,
                           struct moe_eng_layer_act *a)
{
    const struct moe_eng_dims *d = &e->d;
    const struct moe_k_ops *k = e->k;
    int M = d->tokens, C = d->hidden, H = d->heads_l;
    int dn = d->qk_nope, dr = d->qk_rope, dqk = d->qk_dim, dv = d->v_dim;
    int kvw = dn + dv; /* kv_up output per head */
    size_t mark = moe_eng_arena_mark(&e->temp);
    if (d->q_lora > 0) {
        moe_eng_linear_fwd(e, a->q, a->cq_n, w->q_up.w, NULL, M, d->q_lora, H * dqk);
    } else {
        const float *h = moe_eng_sp_gather(e, a->h1, moe_eng_gather_buf(e, C), C);
        moe_eng_linear_fwd(e, a->q, h, w->q_up.w, NULL, M, C, H * dqk);
    }
    float *kvu = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)H * (size_t)kvw);
    moe_eng_linear_fwd(e, kvu, a->ckv_n, w->kv_up.w, NULL, M, d->kv_lora, H * kvw);
    float *kpe = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)dr);
    k->rope_fwd(kpe, a->kpe, e->rope_cos_sin, M, 1, dr, 0, dr, false, e->kc);
    for (int h = 0; h < H; h++) {
        float *kh = a->k + (size_t)h * (size_t)dqk;
        const float *uh = kvu + (size_t)h * (size_t)kvw;
        k->copy_2d(kh, H * dqk, uh, H * kvw, M, dn, false, e->kc);
        k->copy_2d(kh + dn, H * dqk, kpe, dr, M, dr, false, e->kc);
        k->copy_2d(a->v + (size_t)h * (size_t)dv, H * dv, uh + dn, H * kvw, M, dv, false, e->kc);
    }
    k->rope_fwd(a->q, a->q, e->rope_cos_sin, M, H, dqk, dn, dr, false, e->kc);
    moe_eng_arena_release(&e->temp, mark);
}

void moe_eng_mla_fwd(struct moe_eng *e,
                     const struct moe_eng_layer_w *w,
                     struct moe_eng_layer_act *a)
{
    const struct moe_eng_dims *d = &e->d;
    const struct moe_k_ops *k = e->k;
    int Ms = d->tokens_sp, M = d->tokens, C = d->hidden;
    int rkv = d->kv_lora, dr = d->qk_rope;
    size_t mark = moe_eng_arena_mark(&e->temp);
    if (d->q_lora > 0) {
        float *loc = d->sp ? moe_eng_arena_floats(&e->temp, (size_t)Ms * (size_t)d->q_lora) : a->cq;
        moe_eng_linear_fwd(e, loc, a->h1, w->q_down.w, NULL, Ms, C, d->q_lora);
        gather_rows(e, loc, a->cq, d->q_lora);
        k->rmsnorm_fwd(a->cq_n, a->cq_rstd, a->cq, w->q_lnorm.w, M, d->q_lora, NORM_EPS, e->kc);
    }
    float *loc = moe_eng_arena_floats(&e->temp, (size_t)Ms * (size_t)(rkv + dr));
    moe_eng_linear_fwd(e, loc, a->h1, w->kv_down.w, NULL, Ms, C, rkv + dr);
    float *full = d->sp ? moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)(rkv + dr)) : loc;
    gather_rows(e, loc, full, rkv + dr);
    k->copy_2d(a->ckv, rkv, full, rkv + dr, M, rkv, false, e->kc);
    k->copy_2d(a->kpe, dr, full + rkv, rkv + dr, M, dr, false, e->kc);
    k->rmsnorm_fwd(a->ckv_n, a->ckv_rstd, a->ckv, w->kv_lnorm.w, M, rkv, NORM_EPS, e->kc);
    moe_eng_arena_release(&e->temp, mark);
    moe_eng_mla_heads_fwd(e, w, a);
}

void moe_eng_mla_bwd(struct moe_eng *e,
                     const struct moe_eng_layer_w *w,
                     struct moe_eng_layer_act *a,
                     float *dq,
                     const float *dk,
                     const float *dv,
                     float *dh1)
{
    const struct moe_eng_dims *d = &e->d;
    const struct moe_k_ops *k = e->k;
    int Ms = d->tokens_sp, M = d->tokens, C = d->hidden, H = d->heads_l;
    int dn = d->qk_nope, dr = d->qk_rope, dqk = d->qk_dim, dvd = d->v_dim, kvw = dn + dvd;
    int rkv = d->kv_lora;
    size_t mark = moe_eng_arena_mark(&e->temp);
    k->rope_bwd(dq, dq, e->rope_cos_sin, M, H, dqk, dn, dr, false, e->kc);
    /* Per-head [k_nope, v] gradients and the rotary key's, summed over the heads. */
    float *dkvu = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)H * (size_t)kvw);
    float *dkpe = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)dr);
    for (int h = 0; h < H; h++) {
        const float *dkh = dk + (size_t)h * (size_t)dqk;
        float *uh = dkvu + (size_t)h * (size_t)kvw;
        k->copy_2d(uh, H * kvw, dkh, H * dqk, M, dn, false, e->kc);
        k->copy_2d(uh + dn, H * kvw, dv + (size_t)h * (size_t)dvd, H * dvd, M, dvd, false, e->kc);
        k->copy_2d(dkpe, dr, dkh + dn, H * dqk, M, dr, h > 0, e->kc);
    }
    k->rope_bwd(dkpe, dkpe, e->rope_cos_sin, M, 1, dr, 0, dr, false, e->kc);
    /* Key-value latent: kv_up, then its norm; [d ckv, d kpe] is the down projection's output. */
    float *dckv_n = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)rkv);
    moe_eng_linear_bwd(e, dckv_n, w->kv_up.g, NULL, dkvu, a->ckv_n, w->kv_up.w, M, rkv, H * kvw,
                       false);
    float *dckv = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)rkv);
    k->rmsnorm_bwd(dckv, w->kv_lnorm.g, dckv_n, a->ckv, w->kv_lnorm.w, a->ckv_rstd, M, rkv, false,
                   e->kc);
    float *dfull = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)(rkv + dr));
    k->copy_2d(dfull, rkv + dr, dckv, rkv, M, rkv, false, e->kc);
    k->copy_2d(dfull + rkv, rkv + dr, dkpe, dr, M, dr, false, e->kc);
    /* Queries: q_up and the query latent's norm, or q_proj straight from h1. */
    const float *dq_loc = NULL;
    if (d->q_lora > 0) {
        int rq = d->q_lora;
        float *dcq_n = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)rq);
        moe_eng_linear_bwd(e, dcq_n, w->q_up.g, NULL, dq, a->cq_n, w->q_up.w, M, rq, H * dqk,
                           false);
        float *dcq = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)rq);
        k->rmsnorm_bwd(dcq, w->q_lnorm.g, dcq_n, a->cq, w->q_lnorm.w, a->cq_rstd, M, rq, false,
                       e->kc);
        dq_loc = scatter_rows(e, dcq, rq);
        moe_eng_linear_bwd(e, dh1, w->q_down.g, NULL, dq_loc, a->h1, w->q_down.w, Ms, C, rq, false);
    } else {
        const float *h = moe_eng_sp_gather(e, a->h1, moe_eng_gather_buf(e, C), C);
        float *partial = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)C);
        moe_eng_linear_bwd(e, partial, w->q_up.g, NULL, dq, h, w->q_up.w, M, C, H * dqk, false);
        if (d->sp) {
            enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_TP_COMM);
            moe_comm_reducescatter(e->groups.tp, partial, dh1, (size_t)Ms * (size_t)C, MOE_COMM_F32,
                                   MOE_COMM_SUM);
            moe_eng_phase_enter(&e->ctx.timer, prev);
        } else {
            moe_eng_copy(e->ctx.dev, dh1, partial, (size_t)M * (size_t)C * sizeof(float));
        }
    }
    const float *dkv_loc = scatter_rows(e, dfull, rkv + dr);
    moe_eng_linear_bwd(e, dh1, w->kv_down.g, NULL, dkv_loc, a->h1, w->kv_down.w, Ms, C, rkv + dr,
                       true);
    if (!d->sp && d->tp > 1) {
        /* Without sequence parallelism every contribution above is partial over TP. */
        enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_TP_COMM);
        moe_comm_allreduce(e->groups.tp, dh1, dh1, (size_t)Ms * (size_t)C, MOE_COMM_F32,
                           MOE_COMM_SUM);
        moe_eng_phase_enter(&e->ctx.timer, prev);
    }
    moe_eng_arena_release(&e->temp, mark);
}
