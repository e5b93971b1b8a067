/*
 * Multi-token prediction (DeepSeek-V3; Megatron-Core's MultiTokenPredictionLayer), run by the loss
 * chunk after its decoder layers (Megatron's default layout puts the MTP layers on the last stage,
 * before the loss). The chunk output x_L goes through the final norm to hf, which feeds the main
 * head and the first depth. Depth k (1..D) embeds the tokens k positions ahead (id 0 past the
 * sequence), normalises that embedding (enorm) and the previous depth's hidden state (hnorm),
 * concatenates them as Megatron does, [enorm(emb), hnorm(h)], projects 2C -> C (eh_proj,
 * column-parallel over TP and gathered back), runs one transformer layer shaped like the last
 * decoder layer, normalises its output (the depth's final norm) and predicts the token k + 1
 * ahead with the shared output layer. Its loss is the mean over the global batch's valid tokens
 * (the last k of each sequence have no target) times mtp_loss_scale / D
 * (--mtp-loss-scaling-factor, Megatron's default 0.1). Each head runs forward and backward at
 * once, as the main head does (engine/head.c); the depths' layers run their backward in the
 * chunk's backward, last depth first, and their input gradients flow back into hf, then through
 * the final norm into the decoder.
 *
 * Tensor and sequence parallelism: the concatenation is gathered over the sequence, eh_proj gives
 * this rank's C/TP columns, the columns are all-gathered and this rank's rows kept; backward takes
 * this rank's column slice of the gathered gradient and reduce-scatters the input gradient.
 */
#include "engine/internal.h"

#include <string.h>

#define NORM_EPS 1e-5f /* Megatron-LM --norm-epsilon default */

/* Megatron-LM --mtp-loss-scaling-factor default. */
#define MTP_LOSS_SCALE 0.1

/* eh_proj forward: cat [Ms, 2C] -> x [Ms, C]. */
static void
eh_proj_fwd(struct moe_eng *e, const struct moe_eng_layer_w *w, const float *cat, float *x)
{
    const struct moe_eng_dims *d = &e->d;
    const struct moe_k_ops *k = e->k;
    int M = d->tokens, C = d->hidden, cl = C / d->tp;
    size_t mark = moe_eng_arena_mark(&e->temp);
    const float *in = moe_eng_sp_gather(e, cat, moe_eng_gather_buf(e, 2 * C), 2 * C);
    float *loc = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)cl);
    moe_eng_linear_fwd(e, loc, in, w->mtp_eh_proj.w, NULL, M, 2 * C, cl);
    float *blocks = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)C);
    float *full = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)C);
    if (d->tp > 1) {
        enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_TP_COMM);
        moe_comm_allgather(e->groups.tp, loc, blocks, (size_t)M * (size_t)cl, MOE_COMM_F32);
        moe_eng_phase_enter(&e->ctx.timer, prev);
    } else {
        moe_eng_copy(e->ctx.dev, blocks, loc, (size_t)M * (size_t)C * sizeof(float));
    }
    for (int r = 0; r < d->tp; r++) { /* [TP][M][C/TP] -> [M][C] */
        k->copy_2d(full + (size_t)r * (size_t)cl, C, blocks + (size_t)r * (size_t)M * (size_t)cl,
                   cl, M, cl, false, e->kc);
    }
    size_t row0 = d->sp ? (size_t)e->groups.me.tp * (size_t)d->tokens_sp : 0;
    moe_eng_copy(e->ctx.dev, x, full + row0 * (size_t)C,
                 (size_t)d->tokens_sp * (size_t)C * sizeof(float));
    moe_eng_arena_release(&e->temp, mark);
}

/* eh_proj backward: dcat [Ms, 2C] (overwrite) from dx [Ms, C]; weight gradient +=. */
static void eh_proj_bwd(struct moe_eng *e,
                        const struct moe_eng_layer_w *w,
                        const float *cat,
                        const float *dx,
                        float *dcat)
{
    const struct moe_eng_dims *d = &e->d;
    int M = d->tokens, C = d->hidden, cl = C / d->tp;
    size_t mark = moe_eng_arena_mark(&e->temp);
    const float *dfull = moe_eng_sp_gather(e, dx, moe_eng_gather_buf(e, C), C);
    const float *in = moe_eng_sp_gather(e, cat, moe_eng_gather_buf(e, 2 * C), 2 * C);
    float *dloc = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)cl);
    e->k->copy_2d(dloc, cl, dfull + (size_t)e->groups.me.tp * (size_t)cl, C, M, cl, false, e->kc);
    float *partial = moe_eng_arena_floats(&e->temp, (size_t)M * 2 * (size_t)C);
    moe_eng_linear_bwd(e, partial, w->mtp_eh_proj.g, NULL, dloc, in, w->mtp_eh_proj.w, M, 2 * C, cl,
                       false);
    moe_eng_sp_reduce(e, dcat, partial, 2 * C);
    moe_eng_arena_release(&e->temp, mark);
}

/* The loss weight of depth k: mtp_loss_scale / D per valid token of the global batch. */
static double mtp_denom(const struct moe_eng *e, int k)
{
    double valid = (double)e->plan.layout.gbs * (double)(e->d.seq - k);
    return valid * (double)e->d.num_mtp / MTP_LOSS_SCALE;
}

void moe_eng_mtp_fwd(struct moe_eng *e, struct moe_eng_chunk *ch, struct moe_eng_slot *sl, int mb)
{
    const struct moe_eng_dims *d = &e->d;
    const struct moe_k_ops *k = e->k;
    int Ms = d->tokens_sp, C = d->hidden;
    size_t mt = (size_t)d->tokens;
    size_t nm = (size_t)e->plan.layout.num_microbatches * mt;
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_COMPUTE);
    k->rmsnorm_fwd(sl->hf, sl->rstd_f, sl->out, e->final_norm.w, Ms, C, NORM_EPS, e->kc);
    double n_global = (double)e->plan.layout.gbs * (double)d->seq;
    moe_eng_logits_fwd_bwd(e, sl->hf, e->targets + (size_t)mb * mt, n_global, &e->loss_sum,
                           sl->dout);
    const float *h_prev = sl->hf;
    for (int j = 0; j < ch->num_mtp; j++) {
        const struct moe_eng_layer_w *w = &e->layers[d->num_layers + j];
        struct moe_eng_mtp_act *t = &sl->mtp[j];
        const int *ids = e->mtp_ids + (size_t)j * nm + (size_t)mb * mt;
        const int *tgt = e->mtp_targets + (size_t)j * nm + (size_t)mb * mt;
        moe_eng_params_wait(e, w->idx);
        /* the embedding of the tokens j + 1 ahead, with the MTP stage's table */
        moe_eng_embed_fwd(e, &e->mtp_embedding, ids, t->emb);
        size_t mark = moe_eng_arena_mark(&e->temp);
        float *en = moe_eng_arena_floats(&e->temp, (size_t)Ms * (size_t)C);
        float *hn = moe_eng_arena_floats(&e->temp, (size_t)Ms * (size_t)C);
        k->rmsnorm_fwd(en, t->rstd_e, t->emb, w->mtp_enorm.w, Ms, C, NORM_EPS, e->kc);
        k->rmsnorm_fwd(hn, t->rstd_h, h_prev, w->mtp_hnorm.w, Ms, C, NORM_EPS, e->kc);
        k->copy_2d(t->cat, 2 * C, en, C, Ms, C, false, e->kc); /* [enorm(emb), hnorm(h)] */
        k->copy_2d(t->cat + C, 2 * C, hn, C, Ms, C, false, e->kc);
        moe_eng_arena_release(&e->temp, mark);
        eh_proj_fwd(e, w, t->cat, t->layer.x);
        moe_eng_layer_fwd(e, w, &t->layer, &ch->mtp_rc, t->out);
        k->rmsnorm_fwd(t->h, t->rstd_o, t->out, w->mtp_norm.w, Ms, C, NORM_EPS, e->kc);
        moe_eng_logits_fwd_bwd(e, t->h, tgt, mtp_denom(e, j + 1), &e->mtp_sum, t->dh);
        h_prev = t->h;
    }
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

void moe_eng_mtp_bwd(
    struct moe_eng *e, struct moe_eng_chunk *ch, struct moe_eng_slot *sl, int mb, float *d_)
{
    const struct moe_eng_dims *d = &e->d;
    const struct moe_k_ops *k = e->k;
    int Ms = d->tokens_sp, C = d->hidden;
    size_t n = (size_t)Ms * (size_t)C;
    size_t mt = (size_t)d->tokens;
    size_t nm = (size_t)e->plan.layout.num_microbatches * mt;
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_COMPUTE);
    size_t mark = moe_eng_arena_mark(&e->temp);
    /* dnext: gradient of the current depth's h from the depth after it */
    float *dnext = moe_eng_arena_floats(&e->temp, n);
    float *dcur = moe_eng_arena_floats(&e->temp, n);
    moe_eng_memzero(e->ctx.dev, dnext, n * sizeof(float));
    for (int j = ch->num_mtp - 1; j >= 0; j--) {
        const struct moe_eng_layer_w *w = &e->layers[d->num_layers + j];
        struct moe_eng_mtp_act *t = &sl->mtp[j];
        const int *ids = e->mtp_ids + (size_t)j * nm + (size_t)mb * mt;
        k->axpy(dnext, t->dh, n, 1.0f, e->kc); /* d h_j = head + next depth */
        k->rmsnorm_bwd(dcur, w->mtp_norm.g, dnext, t->out, w->mtp_norm.w, t->rstd_o, Ms, C, false,
                       e->kc);
        moe_eng_layer_bwd(e, w, &t->layer, &ch->mtp_rc, dcur); /* dcur: now d layer input */
        size_t m2 = moe_eng_arena_mark(&e->temp);
        float *dcat = moe_eng_arena_floats(&e->temp, 2 * n);
        eh_proj_bwd(e, w, t->cat, dcur, dcat);
        float *dpart = moe_eng_arena_floats(&e->temp, n);
        /* embedding half: enorm backward, then the embedding table's gradient */
        k->copy_2d(dpart, C, dcat, 2 * C, Ms, C, false, e->kc);
        float *demb = moe_eng_arena_floats(&e->temp, n);
        k->rmsnorm_bwd(demb, w->mtp_enorm.g, dpart, t->emb, w->mtp_enorm.w, t->rstd_e, Ms, C, false,
                       e->kc);
        moe_eng_embed_bwd(e, &e->mtp_embedding, ids, demb);
        /* hidden half: hnorm backward into the previous depth's h (or hf) */
        k->copy_2d(dpart, C, dcat + C, 2 * C, Ms, C, false, e->kc);
        const float *h_prev = j > 0 ? sl->mtp[j - 1].h : sl->hf;
        k->rmsnorm_bwd(dnext, w->mtp_hnorm.g, dpart, h_prev, w->mtp_hnorm.w, t->rstd_h, Ms, C,
                       false, e->kc);
        moe_eng_arena_release(&e->temp, m2);
        moe_eng_layer_grads_done(e, w->idx);
    }
    k->axpy(dnext, sl->dout, n, 1.0f, e->kc); /* + the main head's gradient of hf */
    k->rmsnorm_bwd(d_, e->final_norm.g, dnext, sl->out, e->final_norm.w, sl->rstd_f, Ms, C, false,
                   e->kc);
    moe_eng_arena_release(&e->temp, mark);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}
