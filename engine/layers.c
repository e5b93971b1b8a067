/*
 * Decoder layer forward and backward on the kernels table: the attention block (engine/attention.c,
 * with MLA in engine/mla.c), residual, RMSNorm, and the dense MLP -- SwiGLU or GELU, with optional
 * biases -- or the MoE block (engine/moe_block.c). Tensor parallelism follows Megatron-Core: with
 * sequence parallelism the residual stream is split over TP along tokens, all-gathered before each
 * column-parallel linear and reduce-scattered after each row-parallel one (in backward the roles
 * swap); without it the stream is replicated and row-parallel outputs are all-reduced. A
 * row-parallel bias is added once, after the reduction. Sequence-parallel inputs are gathered
 * again in backward instead of being kept (Megatron does the same). The linear layers (with
 * precision emulation), the sequence-parallel gather/reduce and the FFN activation are the shared
 * building blocks of engine/linear.c.
 *
 * Recompute and offload: tensors placed in scratch are recomputed here right before their first use
 * in backward; offloaded tensors are copied back by the caller (engine/pipeline.c).
 */
#include "engine/internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define NORM_EPS 1e-5f /* Megatron-LM --norm-epsilon default */

/* ---- Dense MLP (and shared expert): SwiGLU or GELU, optional biases ---------------------- */

void moe_eng_mlp_fwd(struct moe_eng *e,
                     const struct moe_eng_mlp_w *m,
                     const float *hin,
                     float *fc1_out,
                     float *act,
                     float *out,
                     enum moe_phase phase)
{
    const struct moe_eng_dims *d = &e->d;
    int M = d->tokens;
    int C = d->hidden;
    int f = m->ffn_l;
    size_t mark = moe_eng_arena_mark(&e->temp);
    const float *h = moe_eng_sp_gather(e, hin, moe_eng_gather_buf(e, C), C);
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, phase);
    moe_eng_linear_fwd(e, fc1_out, h, m->fc1->w, m->fc1_bias->w, M, C, d->glu * f);
    moe_eng_act_fwd(e, act, fc1_out, M, f);
    float *partial = d->sp ? moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)C) : out;
    moe_eng_linear_fwd(e, partial, act, m->fc2->w, NULL, M, f, C);
    moe_eng_phase_enter(&e->ctx.timer, prev);
    moe_eng_sp_reduce(e, out, partial, C);
    if (m->fc2_bias->w != NULL) {
        e->k->bias_fwd(out, m->fc2_bias->w, d->tokens_sp, C, e->kc);
    }
    moe_eng_arena_release(&e->temp, mark);
}

void moe_eng_mlp_bwd(struct moe_eng *e,
                     const struct moe_eng_mlp_w *m,
                     const float *hin,
                     float *fc1_out,
                     float *act,
                     bool recompute,
                     const float *dout,
                     float *dh,
                     bool accumulate,
                     enum moe_phase phase)
{
    const struct moe_eng_dims *d = &e->d;
    int M = d->tokens;
    int C = d->hidden;
    int f = m->ffn_l;
    size_t mark = moe_eng_arena_mark(&e->temp);
    if (m->fc2_bias->g != NULL) {
        e->k->bias_bwd(m->fc2_bias->g, dout, d->tokens_sp, C, e->kc);
    }
    const float *h = moe_eng_sp_gather(e, hin, moe_eng_gather_buf(e, C), C);
    const float *dfull = moe_eng_sp_gather(e, dout, moe_eng_gather_buf(e, C), C);
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, phase);
    if (recompute) {
        moe_eng_linear_fwd(e, fc1_out, h, m->fc1->w, m->fc1_bias->w, M, C, d->glu * f);
        moe_eng_act_fwd(e, act, fc1_out, M, f);
    }
    float *d_act = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)f);
    moe_eng_linear_bwd(e, d_act, m->fc2->g, NULL, dfull, act, m->fc2->w, M, f, C, false);
    float *d_fc1 = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)d->glu * (size_t)f);
    moe_eng_act_bwd(e, d_fc1, d_act, fc1_out, M, f);
    float *partial = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)C);
    moe_eng_linear_bwd(e, partial, m->fc1->g, m->fc1_bias->g, d_fc1, h, m->fc1->w, M, C, d->glu * f,
                       false);
    moe_eng_phase_enter(&e->ctx.timer, prev);
    size_t n = (size_t)d->tokens_sp * (size_t)C;
    float *red = d->sp ? moe_eng_arena_floats(&e->temp, n) : partial;
    moe_eng_sp_reduce(e, red, partial, C);
    if (accumulate) {
        e->k->axpy(dh, red, n, 1.0f, e->kc);
    } else {
        moe_eng_copy(e->ctx.dev, dh, red, n * sizeof(float));
    }
    moe_eng_arena_release(&e->temp, mark);
}

struct moe_eng_mlp_w moe_eng_dense_mlp(const struct moe_eng *e, const struct moe_eng_layer_w *w)
{
    struct moe_eng_mlp_w m = {&w->fc1, &w->fc2, &w->fc1_bias, &w->fc2_bias, e->d.ffn_l};
    return m;
}

struct moe_eng_mlp_w moe_eng_shared_mlp(const struct moe_eng *e, const struct moe_eng_layer_w *w)
{
    struct moe_eng_mlp_w m = {&w->s_fc1, &w->s_fc2, &w->s_fc1_bias, &w->s_fc2_bias,
                              e->d.shared_ffn_l};
    return m;
}

/* ---- Layer ------------------------------------------------------------------------------ */

/* Record where a non-finite value first appeared in this step's forward: the layer, and its first
 * non-finite weight if it has one (else the block whose output went bad). The CPU checks every
 * element now; the CUDA backend records two sums and checks them at the end of the schedule
 * (engine/staging.c), so the forward never waits for the host. */
static void note_nonfinite(struct moe_eng *e,
                           const struct moe_eng_layer_w *w,
                           const struct moe_eng_layer_act *a,
                           const float *out)
{
    if (e->is_device) {
        moe_eng_note_layer_sums(e, w->idx, a->x2, out);
        return;
    }
    size_t n = (size_t)e->d.tokens_sp * (size_t)e->d.hidden;
    if (e->nan_origin[0] != '\0' || e->is_recomputing || moe_eng_all_finite(out, n)) {
        return;
    }
    const char *what = moe_eng_all_finite(a->x2, n) ? "MLP/MoE block output" : "attention output";
    const char *weight = moe_eng_nonfinite_weight(e, w);
    e->nan_priority = weight != NULL ? 0 : 1;
    (void)snprintf(e->nan_origin, sizeof(e->nan_origin), "layer %d, %s", w->idx,
                   weight != NULL ? weight : what);
}

/* Attention, MLP or MoE block and residual: everything of the forward but the finite check. */
static void layer_fwd_body(struct moe_eng *e,
                           const struct moe_eng_layer_w *w,
                           struct moe_eng_layer_act *a,
                           float *out)
{
    const struct moe_eng_dims *d = &e->d;
    size_t n = (size_t)d->tokens_sp * (size_t)d->hidden;
    moe_eng_attention_fwd(e, w, a);
    if (!w->is_moe) {
        struct moe_eng_mlp_w m = moe_eng_dense_mlp(e, w);
        moe_eng_mlp_fwd(e, &m, a->h2, a->fc1, a->act, out, MOE_PHASE_COMPUTE);
    } else {
        moe_eng_moe_fwd(e, w, a, a->h2, out);
        if (d->shared_ffn_l > 0) {
            size_t mark = moe_eng_arena_mark(&e->temp);
            float *s = moe_eng_arena_floats(&e->temp, n);
            struct moe_eng_mlp_w m = moe_eng_shared_mlp(e, w);
            moe_eng_mlp_fwd(e, &m, a->h2, a->fc1, a->act, s, MOE_PHASE_EXPERT_GEMM);
            e->k->axpy(out, s, n, 1.0f, e->kc);
            moe_eng_arena_release(&e->temp, mark);
        }
    }
    e->k->axpy(out, a->x2, n, 1.0f, e->kc); /* residual */
}

void moe_eng_layer_fwd(struct moe_eng *e,
                       const struct moe_eng_layer_w *w,
                       struct moe_eng_layer_act *a,
                       const struct moe_eng_rc *rc,
                       float *out)
{
    (void)rc;
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_COMPUTE);
    layer_fwd_body(e, w, a, out);
    note_nonfinite(e, w, a, out);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

/*
 * CUDA graphs: a dense layer's forward with tp = cp = 1 is kernels, cuBLAS calls and device
 * copies on the compute stream with addresses fixed per activation slot (weights, the slot's
 * tensors, temporaries carved from the same arena position), so one capture per (layer, slot)
 * replays exactly (captured from the second step on, after a warm-up step). A MoE layer is not
 * graphable: the dropless dispatch reads the expert counts on
 * the host to size the exchange and the grouped GEMMs (a host synchronisation inside the layer),
 * and with tp or cp > 1 the forward holds NCCL collectives, which this engine keeps out of
 * captures. The finite check's sums go to a new scalar slot each call, so they run after the
 * replay, outside the graph.
 */
bool moe_eng_layer_is_graphable(const struct moe_eng *e, const struct moe_eng_layer_w *w)
{
    return e->is_device && !moe_eng_dev_is_emulated(e->ctx.dev) && !w->is_moe && e->d.tp == 1 &&
           e->d.cp == 1;
}

void moe_eng_layer_fwd_graphed(struct moe_eng *e,
                               const struct moe_eng_layer_w *w,
                               struct moe_eng_layer_act *a,
                               const struct moe_eng_rc *rc,
                               float *out,
                               struct moe_eng_graph_slot *g)
{
    MOE_ASSERT(moe_eng_layer_is_graphable(e, w));
    size_t at = moe_eng_arena_mark(&e->temp);
    /* The first step runs eagerly: cuBLAS and lazily loaded kernels initialise outside captures. */
    bool warm = e->step > 0;
    if (g->has_failed || !warm || (g->exec != NULL && g->temp_used != at)) {
        moe_eng_layer_fwd(e, w, a, rc, out);
        return;
    }
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_COMPUTE);
    if (g->exec == NULL) {
        moe_eng_dev_capture_begin(e->ctx.dev);
        layer_fwd_body(e, w, a, out);
        if (moe_eng_dev_capture_end(e->ctx.dev, &g->exec) != MOE_OK) {
            g->has_failed = true;
            moe_eng_log_info(&e->ctx.log,
                             "cuda graphs: layer %d's forward could not be captured; it runs "
                             "eagerly",
                             w->idx);
            layer_fwd_body(e, w, a, out);
            note_nonfinite(e, w, a, out);
            moe_eng_phase_enter(&e->ctx.timer, prev);
            return;
        }
        g->temp_used = at;
    }
    moe_eng_dev_graph_launch(e->ctx.dev, g->exec);
    note_nonfinite(e, w, a, out);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

void moe_eng_layer_bwd(struct moe_eng *e,
                       const struct moe_eng_layer_w *w,
                       struct moe_eng_layer_act *a,
                       const struct moe_eng_rc *rc,
                       float *d_)
{
    const struct moe_eng_dims *d = &e->d;
    int C = d->hidden;
    size_t n = (size_t)d->tokens_sp * (size_t)C;
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_COMPUTE);
    size_t mark = moe_eng_arena_mark(&e->temp);
    bool sel = !rc->is_full;
    if (sel && (rc->modules & MOE_RC_LAYERNORM)) {
        e->k->rmsnorm_fwd(a->h2, a->rstd2, a->x2, w->mlp_norm.w, d->tokens_sp, C, NORM_EPS, e->kc);
    }
    float *dh2 = moe_eng_arena_floats(&e->temp, n);
    if (!w->is_moe) {
        bool rcmp = sel && (rc->modules & MOE_RC_MLP);
        struct moe_eng_mlp_w m = moe_eng_dense_mlp(e, w);
        moe_eng_mlp_bwd(e, &m, a->h2, a->fc1, a->act, rcmp, d_, dh2, false, MOE_PHASE_COMPUTE);
    } else {
        bool moe_rc = sel && (rc->modules & MOE_RC_MOE);
        if (moe_rc) {
            /* Rerun the routed forward to refill its tensors (no statistics, same values). */
            bool was = e->is_recomputing;
            e->is_recomputing = true;
            float *scratch_out = moe_eng_arena_floats(&e->temp, n);
            moe_eng_moe_fwd(e, w, a, a->h2, scratch_out);
            e->is_recomputing = was;
        }
        if (d->shared_ffn_l > 0) {
            bool rcmp = sel && (rc->modules & (MOE_RC_SHARED_EXPERTS | MOE_RC_MOE));
            struct moe_eng_mlp_w m = moe_eng_shared_mlp(e, w);
            moe_eng_mlp_bwd(e, &m, a->h2, a->fc1, a->act, rcmp, d_, dh2, false,
                            MOE_PHASE_EXPERT_GEMM);
        } else {
            moe_eng_memzero(e->ctx.dev, dh2, n * sizeof(float));
        }
        moe_eng_moe_bwd(e, w, a, a->h2, d_, dh2);
    }
    e->k->rmsnorm_bwd(d_, w->mlp_norm.g, dh2, a->x2, w->mlp_norm.w, a->rstd2, d->tokens_sp, C, true,
                      e->kc);
    moe_eng_arena_release(&e->temp, mark);
    moe_eng_attention_bwd(e, w, a, rc, d_);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}
