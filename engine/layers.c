/*
 * Decoder layer forward and backward on the kernels table: RMSNorm, column-parallel QKV, RoPE,
 * causal GQA attention (context parallel by all-gathering K/V with the local queries' position
 * offset), row-parallel projection, residual, RMSNorm, and the dense SwiGLU MLP or the MoE block
 * (engine/moe_block.c). Tensor parallelism follows Megatron-Core: with sequence parallelism the
 * residual stream is split over TP along tokens, all-gathered before each column-parallel linear
 * and reduce-scattered after each row-parallel one (in backward the roles swap); without it the
 * stream is replicated and row-parallel outputs are all-reduced. Sequence-parallel inputs are
 * gathered again in backward instead of being kept (Megatron does the same).
 *
 * Precision emulation (when asked): each GEMM's inputs pass through the kernels' quantise ->
 * dequantise with the recipe's formats (forward operands E4M3 / MX / NVFP4 / BF16, output gradients
 * E5M2 for the tensorwise "hybrid" recipes); the GEMM itself runs in fp32. Delayed scaling is
 * emulated with current (tensorwise) scaling.
 *
 * Recompute and offload: tensors placed in scratch are recomputed here right before their first use
 * in backward; offloaded tensors are copied back by the caller (engine/pipeline.c).
 */
#include "engine/internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define NORM_EPS  1e-5f    /* Megatron-LM --norm-epsilon default */
#define ROPE_BASE 10000.0f /* Megatron-LM --rotary-base default */

/* ---- Precision emulation --------------------------------------------------------------------- */

struct qspec {
    enum moe_k_qformat fmt;
    enum moe_k_qrecipe recipe;
};

/* Format and scaling of activations (role 0), weights (1) and output gradients (2). */
static struct qspec qspec_of(enum moe_recipe r, int role)
{
    switch (r) {
    case MOE_RECIPE_FP8_TENSORWISE:
    case MOE_RECIPE_FP8_DELAYED:
        return (struct qspec){role == 2 ? MOE_K_QFMT_FP8_E5M2 : MOE_K_QFMT_FP8_E4M3,
                              MOE_K_QRECIPE_TENSORWISE};
    case MOE_RECIPE_FP8_BLOCKWISE:
        return (struct qspec){MOE_K_QFMT_FP8_E4M3,
                              role == 1 ? MOE_K_QRECIPE_BLOCK_128X128 : MOE_K_QRECIPE_BLOCK_1X128};
    case MOE_RECIPE_MXFP8:
        return (struct qspec){MOE_K_QFMT_FP8_E4M3, MOE_K_QRECIPE_MX};
    case MOE_RECIPE_NVFP4:
        return (struct qspec){MOE_K_QFMT_FP4_E2M1, MOE_K_QRECIPE_NVFP4};
    case MOE_RECIPE_BF16:
    case MOE_NUM_RECIPES:
        break;
    }
    return (struct qspec){MOE_K_QFMT_BF16, MOE_K_QRECIPE_CAST};
}

/* qdq(x[rows, cols]) into temp storage; returns x itself when emulation is off.
 */
static const float *qdq(struct moe_eng *e, const float *x, int rows, int cols, int role)
{
    if (!e->opts.emulate_precision || rows == 0) {
        return x;
    }
    struct qspec q = qspec_of(e->plan.options.recipe, role);
    float *out = moe_eng_arena_floats(&e->temp, (size_t)rows * (size_t)cols);
    e->k->qdq(out, x, rows, cols, q.fmt, q.recipe, e->kc);
    return out;
}

void moe_eng_linear_fwd(
    struct moe_eng *e, float *y, const float *x, const float *w, int rows, int in, int out)
{
    size_t mark = moe_eng_arena_mark(&e->temp);
    const float *xq = qdq(e, x, rows, in, 0);
    const float *wq = qdq(e, w, out, in, 1);
    e->k->linear_fwd(y, xq, wq, NULL, rows, in, out, e->kc);
    moe_eng_arena_release(&e->temp, mark);
}

void moe_eng_linear_bwd(struct moe_eng *e,
                        float *dx,
                        float *dw,
                        const float *dy,
                        const float *x,
                        const float *w,
                        int rows,
                        int in,
                        int out,
                        bool accumulate_dx)
{
    size_t mark = moe_eng_arena_mark(&e->temp);
    const float *dyq = qdq(e, dy, rows, out, 2);
    const float *wq = qdq(e, w, out, in, 1);
    const float *xq = qdq(e, x, rows, in, 0);
    if (dx != NULL) {
        e->k->linear_bwd_data(dx, dyq, wq, rows, in, out, accumulate_dx, e->kc);
    }
    e->k->linear_bwd_weight(dw, NULL, dyq, xq, rows, in, out, e->kc);
    moe_eng_arena_release(&e->temp, mark);
}

/* ---- Tensor-parallel helpers ----------------------------------------------------------------- */

const float *moe_eng_sp_gather(struct moe_eng *e, const float *x, float *buf, int cols)
{
    if (!e->d.sp) {
        return x;
    }
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_TP_COMM);
    moe_comm_allgather(e->groups.tp, x, buf, (size_t)e->d.tokens_sp * (size_t)cols, MOE_COMM_F32);
    moe_eng_phase_enter(&e->ctx.timer, prev);
    return buf;
}

void moe_eng_sp_reduce(struct moe_eng *e, float *out, float *partial, int cols)
{
    if (e->d.tp == 1) {
        moe_eng_copy(e->ctx.dev, out, partial, (size_t)e->d.tokens * (size_t)cols * sizeof(float));
        return;
    }
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_TP_COMM);
    size_t n = (size_t)e->d.tokens_sp * (size_t)cols;
    if (e->d.sp) {
        moe_comm_reducescatter(e->groups.tp, partial, out, n, MOE_COMM_F32, MOE_COMM_SUM);
    } else {
        moe_comm_allreduce(e->groups.tp, partial, partial, n, MOE_COMM_F32, MOE_COMM_SUM);
        moe_eng_copy(e->ctx.dev, out, partial, n * sizeof(float));
    }
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

/* Temporary [M, cols] when gathering is needed, else NULL (the input is used as is). */
static float *gather_buf(struct moe_eng *e, int cols)
{
    return e->d.sp ? moe_eng_arena_floats(&e->temp, (size_t)e->d.tokens * (size_t)cols) : NULL;
}

/* ---- Dense SwiGLU MLP (and shared expert) ---------------------------------------------------- */

void moe_eng_mlp_fwd(struct moe_eng *e,
                     const struct moe_eng_tensor *fc1,
                     const struct moe_eng_tensor *fc2,
                     int ffn_l,
                     const float *hin,
                     float *fc1_out,
                     float *act,
                     float *out,
                     enum moe_phase phase)
{
    const struct moe_eng_dims *d = &e->d;
    int M = d->tokens;
    int C = d->hidden;
    size_t mark = moe_eng_arena_mark(&e->temp);
    const float *h = moe_eng_sp_gather(e, hin, gather_buf(e, C), C);
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, phase);
    moe_eng_linear_fwd(e, fc1_out, h, fc1->w, M, C, 2 * ffn_l);
    e->k->swiglu_fwd(act, fc1_out, M, ffn_l, e->kc);
    float *partial = d->sp ? moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)C) : out;
    moe_eng_linear_fwd(e, partial, act, fc2->w, M, ffn_l, C);
    moe_eng_phase_enter(&e->ctx.timer, prev);
    moe_eng_sp_reduce(e, out, partial, C);
    moe_eng_arena_release(&e->temp, mark);
}

void moe_eng_mlp_bwd(struct moe_eng *e,
                     const struct moe_eng_tensor *fc1,
                     const struct moe_eng_tensor *fc2,
                     int ffn_l,
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
    size_t mark = moe_eng_arena_mark(&e->temp);
    const float *h = moe_eng_sp_gather(e, hin, gather_buf(e, C), C);
    const float *dfull = moe_eng_sp_gather(e, dout, gather_buf(e, C), C);
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, phase);
    if (recompute) {
        moe_eng_linear_fwd(e, fc1_out, h, fc1->w, M, C, 2 * ffn_l);
        e->k->swiglu_fwd(act, fc1_out, M, ffn_l, e->kc);
    }
    float *d_act = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)ffn_l);
    moe_eng_linear_bwd(e, d_act, fc2->g, dfull, act, fc2->w, M, ffn_l, C, false);
    float *d_fc1 = moe_eng_arena_floats(&e->temp, (size_t)M * 2 * (size_t)ffn_l);
    e->k->swiglu_bwd(d_fc1, d_act, fc1_out, M, ffn_l, e->kc);
    float *partial = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)C);
    moe_eng_linear_bwd(e, partial, fc1->g, d_fc1, h, fc1->w, M, C, 2 * ffn_l, false);
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

/* ---- Attention ------------------------------------------------------------------------------- */

/* K/V of the whole sequence for this rank's queries: [B, T, Hkvl D] (CP all-gather + reorder). */
static void
gather_kv(struct moe_eng *e, const float *k, const float *v, const float **kf, const float **vf)
{
    const struct moe_eng_dims *d = &e->d;
    if (d->cp == 1) {
        *kf = k;
        *vf = v;
        return;
    }
    int hkv = d->kv_heads_l * d->head_dim;
    size_t n = (size_t)d->tokens * (size_t)hkv;
    size_t full = n * (size_t)d->cp;
    float *g = moe_eng_arena_floats(&e->temp, full);
    float *kk = moe_eng_arena_floats(&e->temp, full);
    float *vv = moe_eng_arena_floats(&e->temp, full);
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_CP_COMM);
    moe_comm_allgather(e->groups.cp, k, g, n, MOE_COMM_F32);
    e->k->sort_chunks(kk, g, e->cp_chunk_rows, e->cp_chunk_order, 2 * d->cp * d->mbs, hkv, e->kc);
    moe_comm_allgather(e->groups.cp, v, g, n, MOE_COMM_F32);
    e->k->sort_chunks(vv, g, e->cp_chunk_rows, e->cp_chunk_order, 2 * d->cp * d->mbs, hkv, e->kc);
    *kf = kk;
    *vf = vv;
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

/* dk_full [B, T, Hkvl D] summed over CP ranks into this rank's dk [M, Hkvl D].
 */
static void reduce_dkv(struct moe_eng *e, float *dfull, float *dlocal)
{
    const struct moe_eng_dims *d = &e->d;
    int hkv = d->kv_heads_l * d->head_dim;
    size_t n = (size_t)d->tokens * (size_t)hkv;
    size_t mark = moe_eng_arena_mark(&e->temp);
    float *g = moe_eng_arena_floats(&e->temp, n * (size_t)d->cp);
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_CP_COMM);
    e->k->unsort_chunks(g, dfull, e->cp_chunk_rows, e->cp_chunk_order, 2 * d->cp * d->mbs, hkv,
                        e->kc);
    moe_comm_reducescatter(e->groups.cp, g, dlocal, n, MOE_COMM_F32, MOE_COMM_SUM);
    moe_eng_phase_enter(&e->ctx.timer, prev);
    moe_eng_arena_release(&e->temp, mark);
}

size_t moe_eng_attn_ws_bytes(const struct moe_eng *e)
{
    const struct moe_eng_dims *d = &e->d;
    return e->k->attention_workspace_bytes(d->cp_chunk_len, d->seq, e->kc);
}

/*
 * One attention call of the load-balanced causal split (engine/internal.h): the queries of chunk h
 * of sequence b (c rows at position cp_chunk_pos[h]) against the keys before and inside it, which
 * are the first cp_chunk_pos[h] + c rows of the sequence's gathered K/V. Chunk r has (r + 1) c
 * keys, chunk 2 CP - 1 - r has (2 CP - r) c: (2 CP + 1) c^2 query-key pairs per sequence on every
 * rank. lse is stored per chunk: [B][2][Hql][c].
 */
struct attn_call {
    size_t q_off;   /* first query row (of M) */
    size_t kv_off;  /* first row (of B T) of the sequence's K/V */
    size_t lse_off; /* first lse element */
    int q_pos0;     /* position of the first query */
    int kv_len;     /* keys visible to the chunk's last query */
};

static struct attn_call attn_call_of(const struct moe_eng_dims *d, int b, int h)
{
    struct attn_call c;
    int len = d->cp_chunk_len;
    c.q_off = (size_t)b * (size_t)d->seq_l + (size_t)h * (size_t)len;
    c.kv_off = (size_t)b * (size_t)d->seq;
    c.lse_off = ((size_t)b * 2 + (size_t)h) * (size_t)d->heads_l * (size_t)len;
    c.q_pos0 = d->cp_chunk_pos[h];
    c.kv_len = c.q_pos0 + len;
    return c;
}

/* Attention work counters (moe_eng_attention_work): the kernel's O(Tq Tk) score matrix and the
 * causal query-key pairs among it, per call of q_len queries at q_pos0 against kv_len keys. */
static void
count_attention(struct moe_eng *e, int batch, int q_len, int kv_len, int q_pos0, int mul)
{
    const struct moe_eng_dims *d = &e->d;
    double heads = (double)batch * (double)d->heads_l;
    e->attn_flops += heads * 2.0 * (double)q_len * (double)kv_len * (double)d->head_dim * mul;
    double pairs = 0.0;
    for (int i = 0; i < q_len; i++) {
        int n = q_pos0 + i + 1;
        pairs += (double)(n < kv_len ? n : kv_len);
    }
    e->attn_pairs += heads * pairs;
}

static void
attention_core_fwd(struct moe_eng *e, struct moe_eng_layer_act *a, const float *kf, const float *vf)
{
    const struct moe_eng_dims *d = &e->d;
    size_t wsb = moe_eng_attn_ws_bytes(e);
    void *ws = moe_eng_arena_take(&e->temp, wsb);
    float scale = 1.0f / sqrtf((float)d->head_dim);
    int hq = d->heads_l * d->head_dim;
    int hkv = d->kv_heads_l * d->head_dim;
    if (d->cp == 1) {
        e->k->attention_fwd(a->o, a->lse, a->q, kf, vf, d->mbs, d->seq, d->seq, d->heads_l,
                            d->kv_heads_l, d->head_dim, d->head_dim, 0, 0, scale, true, ws, wsb,
                            e->kc);
        count_attention(e, d->mbs, d->seq, d->seq, 0, 2); /* S = Q K^T, O = P V */
        return;
    }
    for (int b = 0; b < d->mbs; b++) {
        for (int h = 0; h < d->num_cp_chunks; h++) {
            struct attn_call c = attn_call_of(d, b, h);
            e->k->attention_fwd(a->o + c.q_off * (size_t)hq, a->lse + c.lse_off,
                                a->q + c.q_off * (size_t)hq, kf + c.kv_off * (size_t)hkv,
                                vf + c.kv_off * (size_t)hkv, 1, d->cp_chunk_len, c.kv_len,
                                d->heads_l, d->kv_heads_l, d->head_dim, d->head_dim, c.q_pos0, 0,
                                scale, true, ws, wsb, e->kc);
            count_attention(e, 1, d->cp_chunk_len, c.kv_len, c.q_pos0, 2);
        }
    }
}

/* dq [M, Hql D], and dk, dv [B, T, Hkvl D] (whole sequences) from d_o [M, Hql D]. */
static void attention_core_bwd(struct moe_eng *e,
                               struct moe_eng_layer_act *a,
                               const float *kf,
                               const float *vf,
                               const float *d_o,
                               float *dq,
                               float *dkf,
                               float *dvf)
{
    const struct moe_eng_dims *d = &e->d;
    size_t wsb = moe_eng_attn_ws_bytes(e);
    void *ws = moe_eng_arena_take(&e->temp, wsb);
    float scale = 1.0f / sqrtf((float)d->head_dim);
    int hq = d->heads_l * d->head_dim;
    int hkv = d->kv_heads_l * d->head_dim;
    if (d->cp == 1) {
        e->k->attention_bwd(dq, dkf, dvf, d_o, a->q, kf, vf, a->o, a->lse, d->mbs, d->seq, d->seq,
                            d->heads_l, d->kv_heads_l, d->head_dim, d->head_dim, 0, 0, scale, true,
                            false, ws, wsb, e->kc);
        count_attention(e, d->mbs, d->seq, d->seq, 0, 5); /* S, dP, dQ, dK, dV */
        return;
    }
    /* Each chunk's call adds to the K/V rows it sees; rows past the last one seen stay 0. */
    size_t kv_full = (size_t)d->mbs * (size_t)d->seq * (size_t)hkv;
    moe_eng_memzero(e->ctx.dev, dkf, kv_full * sizeof(float));
    moe_eng_memzero(e->ctx.dev, dvf, kv_full * sizeof(float));
    for (int b = 0; b < d->mbs; b++) {
        for (int h = 0; h < d->num_cp_chunks; h++) {
            struct attn_call c = attn_call_of(d, b, h);
            size_t qo = c.q_off * (size_t)hq;
            size_t ko = c.kv_off * (size_t)hkv;
            e->k->attention_bwd(dq + qo, dkf + ko, dvf + ko, d_o + qo, a->q + qo, kf + ko, vf + ko,
                                a->o + qo, a->lse + c.lse_off, 1, d->cp_chunk_len, c.kv_len,
                                d->heads_l, d->kv_heads_l, d->head_dim, d->head_dim, c.q_pos0, 0,
                                scale, true, true, ws, wsb, e->kc);
            count_attention(e, 1, d->cp_chunk_len, c.kv_len, c.q_pos0, 5);
        }
    }
}

static void
attention_fwd(struct moe_eng *e, const struct moe_eng_layer_w *w, struct moe_eng_layer_act *a)
{
    const struct moe_eng_dims *d = &e->d;
    const struct moe_k_ops *k = e->k;
    int M = d->tokens;
    int C = d->hidden;
    int hq = d->heads_l * d->head_dim;
    int hkv = d->kv_heads_l * d->head_dim;
    size_t mark = moe_eng_arena_mark(&e->temp);
    k->rmsnorm_fwd(a->h1, a->rstd1, a->x, w->attn_norm.w, d->tokens_sp, C, NORM_EPS, e->kc);
    const float *h = moe_eng_sp_gather(e, a->h1, gather_buf(e, C), C);
    float *qkv = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)d->qkv_cols);
    moe_eng_linear_fwd(e, qkv, h, w->qkv.w, M, C, d->qkv_cols);
    k->copy_2d(a->q, hq, qkv, d->qkv_cols, M, hq, false, e->kc);
    k->copy_2d(a->k, hkv, qkv + hq, d->qkv_cols, M, hkv, false, e->kc);
    k->copy_2d(a->v, hkv, qkv + hq + hkv, d->qkv_cols, M, hkv, false, e->kc);
    k->rope_fwd(a->q, a->q, e->positions, M, d->heads_l, d->head_dim, 0, d->head_dim, ROPE_BASE,
                false, e->kc);
    k->rope_fwd(a->k, a->k, e->positions, M, d->kv_heads_l, d->head_dim, 0, d->head_dim, ROPE_BASE,
                false, e->kc);
    const float *kf = NULL;
    const float *vf = NULL;
    gather_kv(e, a->k, a->v, &kf, &vf);
    attention_core_fwd(e, a, kf, vf);
    float *partial = d->sp ? moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)C) : a->x2;
    moe_eng_linear_fwd(e, partial, a->o, w->proj.w, M, hq, C);
    moe_eng_sp_reduce(e, a->x2, partial, C);
    k->axpy(a->x2, a->x, (size_t)d->tokens_sp * (size_t)C, 1.0f, e->kc); /* residual */
    k->rmsnorm_fwd(a->h2, a->rstd2, a->x2, w->mlp_norm.w, d->tokens_sp, C, NORM_EPS, e->kc);
    moe_eng_arena_release(&e->temp, mark);
}

/* d [Ms, C]: gradient of x2 on entry; gradient of x on return. */
static void attention_bwd(struct moe_eng *e,
                          const struct moe_eng_layer_w *w,
                          struct moe_eng_layer_act *a,
                          const struct moe_eng_rc *rc,
                          float *d_)
{
    const struct moe_eng_dims *d = &e->d;
    const struct moe_k_ops *k = e->k;
    int M = d->tokens;
    int C = d->hidden;
    int hq = d->heads_l * d->head_dim;
    int hkv = d->kv_heads_l * d->head_dim;
    size_t mark = moe_eng_arena_mark(&e->temp);
    const float *kf = NULL;
    const float *vf = NULL;
    gather_kv(e, a->k, a->v, &kf, &vf);
    if (rc->is_full || (rc->modules & MOE_RC_CORE_ATTN)) {
        if (!rc->is_full) {
            attention_core_fwd(e, a, kf, vf);
        }
    }
    const float *dfull = moe_eng_sp_gather(e, d_, gather_buf(e, C), C);
    float *d_o = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)hq);
    moe_eng_linear_bwd(e, d_o, w->proj.g, dfull, a->o, w->proj.w, M, hq, C, false);
    float *dq = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)hq);
    size_t kv_full = (size_t)M * (size_t)d->cp * (size_t)hkv;
    float *dkf = moe_eng_arena_floats(&e->temp, kv_full);
    float *dvf = moe_eng_arena_floats(&e->temp, kv_full);
    attention_core_bwd(e, a, kf, vf, d_o, dq, dkf, dvf);
    float *dk = dkf;
    float *dv = dvf;
    if (d->cp > 1) {
        dk = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)hkv);
        dv = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)hkv);
        reduce_dkv(e, dkf, dk);
        reduce_dkv(e, dvf, dv);
    }
    k->rope_bwd(dq, dq, e->positions, M, d->heads_l, d->head_dim, 0, d->head_dim, ROPE_BASE, false,
                e->kc);
    k->rope_bwd(dk, dk, e->positions, M, d->kv_heads_l, d->head_dim, 0, d->head_dim, ROPE_BASE,
                false, e->kc);
    float *dqkv = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)d->qkv_cols);
    k->copy_2d(dqkv, d->qkv_cols, dq, hq, M, hq, false, e->kc);
    k->copy_2d(dqkv + hq, d->qkv_cols, dk, hkv, M, hkv, false, e->kc);
    k->copy_2d(dqkv + hq + hkv, d->qkv_cols, dv, hkv, M, hkv, false, e->kc);
    if (!rc->is_full && (rc->modules & MOE_RC_LAYERNORM)) {
        k->rmsnorm_fwd(a->h1, a->rstd1, a->x, w->attn_norm.w, d->tokens_sp, C, NORM_EPS, e->kc);
    }
    const float *h = moe_eng_sp_gather(e, a->h1, gather_buf(e, C), C);
    float *partial = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)C);
    moe_eng_linear_bwd(e, partial, w->qkv.g, dqkv, h, w->qkv.w, M, C, d->qkv_cols, false);
    size_t n = (size_t)d->tokens_sp * (size_t)C;
    float *dh1 = d->sp ? moe_eng_arena_floats(&e->temp, n) : partial;
    moe_eng_sp_reduce(e, dh1, partial, C);
    k->rmsnorm_bwd(d_, w->attn_norm.g, dh1, a->x, w->attn_norm.w, a->rstd1, d->tokens_sp, C, true,
                   e->kc);
    moe_eng_arena_release(&e->temp, mark);
}

/* ---- Layer ------------------------------------------------------------------------------ */

const char *moe_eng_nonfinite_weight(struct moe_eng *e, const struct moe_eng_layer_w *w)
{
    const struct moe_eng_tensor *ts[] = {&w->attn_norm, &w->qkv,   &w->proj,   &w->mlp_norm,
                                         &w->fc1,       &w->fc2,   &w->router, &w->e_fc1,
                                         &w->e_fc2,     &w->s_fc1, &w->s_fc2};
    for (size_t i = 0; i < MOE_ARRAY_LEN(ts); i++) {
        if (ts[i]->w != NULL && !moe_eng_is_finite(e->ctx.dev, ts[i]->w, ts[i]->numel)) {
            return e->params[ts[i]->param].name;
        }
    }
    return NULL;
}

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
    attention_fwd(e, w, a);
    if (!w->is_moe) {
        moe_eng_mlp_fwd(e, &w->fc1, &w->fc2, d->ffn_l, a->h2, a->fc1, a->act, out,
                        MOE_PHASE_COMPUTE);
    } else {
        moe_eng_moe_fwd(e, w, a, a->h2, out);
        if (d->shared_ffn_l > 0) {
            size_t mark = moe_eng_arena_mark(&e->temp);
            float *s = moe_eng_arena_floats(&e->temp, n);
            moe_eng_mlp_fwd(e, &w->s_fc1, &w->s_fc2, d->shared_ffn_l, a->h2, a->fc1, a->act, s,
                            MOE_PHASE_EXPERT_GEMM);
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
        moe_eng_mlp_bwd(e, &w->fc1, &w->fc2, d->ffn_l, a->h2, a->fc1, a->act, rcmp, d_, dh2, false,
                        MOE_PHASE_COMPUTE);
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
            moe_eng_mlp_bwd(e, &w->s_fc1, &w->s_fc2, d->shared_ffn_l, a->h2, a->fc1, a->act, rcmp,
                            d_, dh2, false, MOE_PHASE_EXPERT_GEMM);
        } else {
            moe_eng_memzero(e->ctx.dev, dh2, n * sizeof(float));
        }
        moe_eng_moe_bwd(e, w, a, a->h2, d_, dh2);
    }
    e->k->rmsnorm_bwd(d_, w->mlp_norm.g, dh2, a->x2, w->mlp_norm.w, a->rstd2, d->tokens_sp, C, true,
                      e->kc);
    moe_eng_arena_release(&e->temp, mark);
    attention_bwd(e, w, a, rc, d_);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}
