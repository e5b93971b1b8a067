/*
 * Embedding and loss head: vocab-parallel embedding (each TP rank holds V/TP rows; partial lookups
 * summed over TP, reduce-scattered onto the sequence-parallel stream), and, on the loss chunk,
 * final RMSNorm -> output layer -> vocab-parallel cross-entropy (Megatron's
 * VocabParallelCrossEntropy: all-reduce of the row max, then of the sum of exponentials and the
 * target logit). The head runs forward and backward back to back (llm.c's fused classifier): the
 * logits never outlive the call, and the loss chunk keeps only the gradient of its output for its
 * backward pass. The output layer runs in fp32 (not quantised), as Transformer Engine leaves it.
 *
 * The loss counted here is the sum over this rank's tokens divided by the tokens of the global
 * batch, added once per TP group (on tp rank 0), so summing over all ranks gives the mean.
 */
#include "engine/internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define NORM_EPS 1e-5f /* Megatron-LM --norm-epsilon default */

void moe_eng_embed_fwd(struct moe_eng *e,
                       const struct moe_eng_tensor *table,
                       const int *ids,
                       float *x0)
{
    const struct moe_eng_dims *d = &e->d;
    int M = d->tokens;
    int C = d->hidden;
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_COMPUTE);
    size_t mark = moe_eng_arena_mark(&e->temp);
    float *partial = d->sp ? moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)C) : x0;
    e->k->embedding_fwd(partial, ids, table->w, M, C, d->vocab0, d->vocab0 + d->vocab_l, e->kc);
    moe_eng_sp_reduce(e, x0, partial, C);
    moe_eng_arena_release(&e->temp, mark);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

void moe_eng_embed_bwd(struct moe_eng *e,
                       const struct moe_eng_tensor *table,
                       const int *ids,
                       const float *dx0)
{
    const struct moe_eng_dims *d = &e->d;
    int C = d->hidden;
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_COMPUTE);
    size_t mark = moe_eng_arena_mark(&e->temp);
    float *buf = d->sp ? moe_eng_arena_floats(&e->temp, (size_t)d->tokens * (size_t)C) : NULL;
    const float *dfull = moe_eng_sp_gather(e, dx0, buf, C);
    e->k->embedding_bwd(table->g, dfull, ids, d->tokens, C, d->vocab0, d->vocab0 + d->vocab_l,
                        e->kc);
    moe_eng_arena_release(&e->temp, mark);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

void moe_eng_logits_fwd_bwd(struct moe_eng *e,
                            const float *hf,
                            const int *targets,
                            double denom,
                            double *loss_out,
                            float *dhf)
{
    const struct moe_eng_dims *d = &e->d;
    const struct moe_k_ops *k = e->k;
    int M = d->tokens;
    int C = d->hidden;
    int Vl = d->vocab_l;
    struct moe_eng_arena *t = &e->temp;
    size_t mark = moe_eng_arena_mark(t);
    float *gbuf = d->sp ? moe_eng_arena_floats(t, (size_t)M * (size_t)C) : NULL;
    const float *h = moe_eng_sp_gather(e, hf, gbuf, C);
    float *logits = moe_eng_arena_floats(t, (size_t)M * (size_t)Vl);
    k->linear_fwd(logits, h, e->output.w, NULL, M, C, Vl, e->kc);
    float *gmax = moe_eng_arena_floats(t, (size_t)M);
    float *stats = moe_eng_arena_floats(t, 2 * (size_t)M); /* sumexp, target logit */
    float *loss = moe_eng_arena_floats(t, (size_t)M);
    k->xent_local_max(gmax, logits, M, Vl, e->kc);
    if (d->tp > 1) {
        enum moe_phase p2 = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_TP_COMM);
        moe_comm_allreduce(e->groups.tp, gmax, gmax, (size_t)M, MOE_COMM_F32, MOE_COMM_MAX);
        moe_eng_phase_enter(&e->ctx.timer, p2);
    }
    k->xent_local_sumexp(stats, stats + M, logits, targets, gmax, M, Vl, d->vocab0, e->kc);
    if (d->tp > 1) {
        enum moe_phase p2 = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_TP_COMM);
        moe_comm_allreduce(e->groups.tp, stats, stats, 2 * (size_t)M, MOE_COMM_F32, MOE_COMM_SUM);
        moe_eng_phase_enter(&e->ctx.timer, p2);
    }
    k->xent_loss(loss, gmax, stats, stats + M, targets, M, e->kc);
    /* The token losses on the host (CUDA: one copy per micro-batch, which waits for the head). */
    size_t hmark = moe_eng_arena_mark(e->htemp);
    const float *hloss = moe_eng_host_floats(e, loss, (size_t)M);
    double s = 0.0;
    for (int i = 0; i < M; i++) {
        s += (double)hloss[i];
    }
    moe_eng_arena_release(e->htemp, hmark);
    if (e->groups.me.tp == 0) {
        *loss_out += s / denom;
    }
    if (!isfinite(s) && e->nan_origin[0] == '\0') {
        const moe_eng_dev_t *dev = e->ctx.dev;
        const char *what = "logits";
        e->nan_priority = 0;
        if (!moe_eng_is_finite(dev, hf, (size_t)d->tokens_sp * (size_t)C)) {
            what = "input of the output layer";
            e->nan_priority = 1;
        }
        if (e->final_norm.w != NULL &&
            !moe_eng_is_finite(dev, e->final_norm.w, e->final_norm.numel)) {
            what = "final_norm";
        } else if (!moe_eng_is_finite(dev, e->output.w, e->output.numel)) {
            what = e->params[e->output.param].name;
        }
        (void)snprintf(e->nan_origin, sizeof(e->nan_origin), "the loss head, %s", what);
        e->nan_seq = e->check_seq;
    }
    e->check_seq++;
    float *dlogits = moe_eng_arena_floats(t, (size_t)M * (size_t)Vl);
    k->xent_bwd(dlogits, logits, targets, gmax, stats, M, Vl, d->vocab0, (float)(1.0 / denom),
                e->kc);
    float *dh = moe_eng_arena_floats(t, (size_t)M * (size_t)C);
    k->linear_bwd_data(dh, dlogits, e->output.w, M, C, Vl, false, e->kc);
    k->linear_bwd_weight(e->output.g, NULL, dlogits, h, M, C, Vl, e->kc);
    moe_eng_sp_reduce(e, dhf, dh, C);
    moe_eng_arena_release(t, mark);
}

void moe_eng_head_fwd_bwd(struct moe_eng *e, const float *x, const int *targets, float *dx)
{
    const struct moe_eng_dims *d = &e->d;
    int Ms = d->tokens_sp;
    int C = d->hidden;
    struct moe_eng_arena *t = &e->temp;
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_COMPUTE);
    size_t mark = moe_eng_arena_mark(t);
    float *hf = moe_eng_arena_floats(t, (size_t)Ms * (size_t)C);
    float *rstd = moe_eng_arena_floats(t, (size_t)Ms);
    e->k->rmsnorm_fwd(hf, rstd, x, e->final_norm.w, Ms, C, NORM_EPS, e->kc);
    float *dhf = moe_eng_arena_floats(t, (size_t)Ms * (size_t)C);
    double n_global = (double)e->plan.layout.gbs * (double)d->seq;
    bool was_clean = e->nan_origin[0] == '\0';
    moe_eng_logits_fwd_bwd(e, hf, targets, n_global, &e->loss_sum, dhf);
    if (was_clean && e->nan_origin[0] != '\0' &&
        !moe_eng_is_finite(e->ctx.dev, x, (size_t)Ms * (size_t)C)) {
        (void)snprintf(e->nan_origin, sizeof(e->nan_origin), "the loss head, %s",
                       "input of the final norm");
    }
    e->k->rmsnorm_bwd(dx, e->final_norm.g, dhf, x, e->final_norm.w, rstd, Ms, C, false, e->kc);
    moe_eng_arena_release(t, mark);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}
