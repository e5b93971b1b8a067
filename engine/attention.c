/*
 * The attention block of a decoder layer: RMSNorm -> query/key/value projections -> core attention
 * -> row-parallel output projection -> residual -> the pre-MLP RMSNorm. Two projection kinds: GQA
 * (one column-parallel fused QKV linear with an optional bias, optional per-head q/k RMSNorm as in
 * Qwen3, RoPE on whole heads) and multi-latent attention (engine/mla.c). The core is causal,
 * optionally with a sliding window (layers flagged windowed) and learned per-head sinks (GPT-OSS),
 * through the kernels' attention ops; the output projection's bias is added once, after the
 * tensor-parallel reduction (Megatron's row-parallel bias).
 *
 * Context parallelism: K/V are all-gathered over CP and reordered into sequence order; each held
 * query chunk of Megatron's load-balanced split runs against the keys before and inside it (with a
 * window, the kernel skips the keys that fell out of it). Backward reduce-scatters the K/V
 * gradients back to their owners. Tensor parallelism: heads are split over TP; with sequence
 * parallelism the normed input is all-gathered before the projections and the output
 * reduce-scattered (engine/layers.c's helpers).
 *
 * Recompute: layernorm (the normed input), mla_up_proj (MLA's per-head q/k/v, from the latents) and
 * core_attn (output and log-sum-exp) are recomputed here before their first use in backward.
 */
#include "engine/internal.h"

#include <math.h>
#include <string.h>

#define NORM_EPS 1e-5f /* Megatron-LM --norm-epsilon default */

/* ---- Core attention (context parallel) --------------------------------------------------------
 */

/* Row widths of the head tensors on this rank: q [M, hq], k [M, hk], v [M, hv], o [M, ho]. */
struct head_cols {
    int hq, hk, hv, ho;
};

static struct head_cols head_cols_of(const struct moe_eng_dims *d)
{
    struct head_cols c = {d->heads_l * d->qk_dim, d->kv_heads_l * d->qk_dim,
                          d->kv_heads_l * d->v_dim, d->heads_l * d->v_dim};
    return c;
}

/* x [M, cols] of every CP rank gathered and reordered into [B, T, cols] (sequence order). */
static float *cp_gather_rows(struct moe_eng *e, const float *x, int cols, float *g)
{
    const struct moe_eng_dims *d = &e->d;
    size_t n = (size_t)d->tokens * (size_t)cols;
    float *out = moe_eng_arena_floats(&e->temp, n * (size_t)d->cp);
    moe_comm_allgather(e->groups.cp, x, g, n, MOE_COMM_F32);
    e->k->sort_chunks(out, g, e->cp_chunk_rows, e->cp_chunk_order, 2 * d->cp * d->mbs, cols, e->kc);
    return out;
}

/* K/V of the whole sequence for this rank's queries: [B, T, Hkvl Dqk] and [B, T, Hkvl Dv]. */
static void
gather_kv(struct moe_eng *e, const float *k, const float *v, const float **kf, const float **vf)
{
    const struct moe_eng_dims *d = &e->d;
    if (d->cp == 1) {
        *kf = k;
        *vf = v;
        return;
    }
    struct head_cols hc = head_cols_of(d);
    int wide = hc.hk > hc.hv ? hc.hk : hc.hv;
    float *g = moe_eng_arena_floats(&e->temp, (size_t)d->tokens * (size_t)d->cp * (size_t)wide);
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_CP_COMM);
    *kf = cp_gather_rows(e, k, hc.hk, g);
    *vf = cp_gather_rows(e, v, hc.hv, g);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

/* dfull [B, T, cols] summed over CP ranks into this rank's dlocal [M, cols]. */
static void reduce_rows(struct moe_eng *e, float *dfull, float *dlocal, int cols)
{
    const struct moe_eng_dims *d = &e->d;
    size_t n = (size_t)d->tokens * (size_t)cols;
    size_t mark = moe_eng_arena_mark(&e->temp);
    float *g = moe_eng_arena_floats(&e->temp, n * (size_t)d->cp);
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_CP_COMM);
    e->k->unsort_chunks(g, dfull, e->cp_chunk_rows, e->cp_chunk_order, 2 * d->cp * d->mbs, cols,
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

/* Attention work counters (moe_eng_attention_work): the score entries the kernel computes, and
 * the query-key pairs among them, per call of q_len queries at q_pos0 against kv_len keys. */
static void count_attention(
    struct moe_eng *e, int batch, int q_len, int kv_len, int q_pos0, int window, int mul)
{
    const struct moe_eng_dims *d = &e->d;
    double heads = (double)batch * (double)d->heads_l;
    double pairs = 0.0;
    for (int i = 0; i < q_len; i++) {
        int hi = q_pos0 + i + 1 < kv_len ? q_pos0 + i + 1 : kv_len;
        int lo = window > 0 && q_pos0 + i + 1 - window > 0 ? q_pos0 + i + 1 - window : 0;
        pairs += (double)(hi > lo ? hi - lo : 0);
    }
    double entries = window > 0 && window < kv_len ? pairs : (double)q_len * (double)kv_len;
    e->attn_flops += heads * 2.0 * entries * (double)d->qk_dim * mul;
    e->attn_pairs += heads * pairs;
}

/* Window and sinks of a layer (0 / NULL when plain causal attention). */
struct attn_opts {
    int window;
    const float *sinks;
    float *d_sinks;
};

static struct attn_opts attn_opts_of(const struct moe_eng *e, const struct moe_eng_layer_w *w)
{
    struct attn_opts o = {w->is_windowed ? e->d.window : 0, w->sinks.w, w->sinks.g};
    return o;
}

static void attn_kernel_fwd(struct moe_eng *e,
                            const struct attn_opts *op,
                            float *o,
                            float *lse,
                            const float *q,
                            const float *k,
                            const float *v,
                            int batch,
                            int q_len,
                            int kv_len,
                            int q_pos0,
                            void *ws,
                            size_t wsb)
{
    const struct moe_eng_dims *d = &e->d;
    float scale = 1.0f / sqrtf((float)d->qk_dim);
    if (op->window > 0 || op->sinks != NULL) {
        e->k->attention_window_sink_fwd(o, lse, q, k, v, op->sinks, batch, q_len, kv_len,
                                        d->heads_l, d->kv_heads_l, d->qk_dim, d->v_dim, q_pos0, 0,
                                        op->window, scale, ws, wsb, e->kc);
    } else {
        e->k->attention_fwd(o, lse, q, k, v, batch, q_len, kv_len, d->heads_l, d->kv_heads_l,
                            d->qk_dim, d->v_dim, q_pos0, 0, scale, true, ws, wsb, e->kc);
    }
    count_attention(e, batch, q_len, kv_len, q_pos0, op->window, 2); /* S = Q K^T, O = P V */
}

static void attention_core_fwd(struct moe_eng *e,
                               const struct moe_eng_layer_w *w,
                               struct moe_eng_layer_act *a,
                               const float *kf,
                               const float *vf)
{
    const struct moe_eng_dims *d = &e->d;
    size_t wsb = moe_eng_attn_ws_bytes(e);
    void *ws = moe_eng_arena_take(&e->temp, wsb);
    struct head_cols hc = head_cols_of(d);
    struct attn_opts op = attn_opts_of(e, w);
    if (d->cp == 1) {
        attn_kernel_fwd(e, &op, a->o, a->lse, a->q, kf, vf, d->mbs, d->seq, d->seq, 0, ws, wsb);
        return;
    }
    for (int b = 0; b < d->mbs; b++) {
        for (int h = 0; h < d->num_cp_chunks; h++) {
            struct attn_call c = attn_call_of(d, b, h);
            attn_kernel_fwd(e, &op, a->o + c.q_off * (size_t)hc.ho, a->lse + c.lse_off,
                            a->q + c.q_off * (size_t)hc.hq, kf + c.kv_off * (size_t)hc.hk,
                            vf + c.kv_off * (size_t)hc.hv, 1, d->cp_chunk_len, c.kv_len, c.q_pos0,
                            ws, wsb);
        }
    }
}

/* Gradients of one backward attention call (pointers at the call's first rows). */
struct attn_bwd_io {
    float *dq, *dk, *dv;
    const float *d_o, *q, *k, *v, *o, *lse;
};

static void attn_kernel_bwd(struct moe_eng *e,
                            const struct attn_opts *op,
                            const struct attn_bwd_io *io,
                            int batch,
                            int q_len,
                            int kv_len,
                            int q_pos0,
                            bool accumulate,
                            void *ws,
                            size_t wsb)
{
    const struct moe_eng_dims *d = &e->d;
    float scale = 1.0f / sqrtf((float)d->qk_dim);
    if (op->window > 0 || op->sinks != NULL) {
        e->k->attention_window_sink_bwd(io->dq, io->dk, io->dv, op->d_sinks, io->d_o, io->q, io->k,
                                        io->v, io->o, io->lse, op->sinks, batch, q_len, kv_len,
                                        d->heads_l, d->kv_heads_l, d->qk_dim, d->v_dim, q_pos0, 0,
                                        op->window, scale, accumulate, ws, wsb, e->kc);
    } else {
        e->k->attention_bwd(io->dq, io->dk, io->dv, io->d_o, io->q, io->k, io->v, io->o, io->lse,
                            batch, q_len, kv_len, d->heads_l, d->kv_heads_l, d->qk_dim, d->v_dim,
                            q_pos0, 0, scale, true, accumulate, ws, wsb, e->kc);
    }
    count_attention(e, batch, q_len, kv_len, q_pos0, op->window, 5); /* S, dP, dQ, dK, dV */
}

/* dq [M, Hql Dqk], and dk, dv [B, T, Hkvl D*] (whole sequences) from d_o [M, Hql Dv]. */
static void attention_core_bwd(struct moe_eng *e,
                               const struct moe_eng_layer_w *w,
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
    struct head_cols hc = head_cols_of(d);
    struct attn_opts op = attn_opts_of(e, w);
    if (d->cp == 1) {
        struct attn_bwd_io io = {dq, dkf, dvf, d_o, a->q, kf, vf, a->o, a->lse};
        attn_kernel_bwd(e, &op, &io, d->mbs, d->seq, d->seq, 0, false, ws, wsb);
        return;
    }
    /* Each chunk's call adds to the K/V rows it sees; rows past the last one seen stay 0. */
    size_t rows = (size_t)d->mbs * (size_t)d->seq;
    moe_eng_memzero(e->ctx.dev, dkf, rows * (size_t)hc.hk * sizeof(float));
    moe_eng_memzero(e->ctx.dev, dvf, rows * (size_t)hc.hv * sizeof(float));
    for (int b = 0; b < d->mbs; b++) {
        for (int h = 0; h < d->num_cp_chunks; h++) {
            struct attn_call c = attn_call_of(d, b, h);
            size_t qo = c.q_off * (size_t)hc.hq;
            size_t oo = c.q_off * (size_t)hc.ho;
            size_t ko = c.kv_off * (size_t)hc.hk;
            size_t vo = c.kv_off * (size_t)hc.hv;
            struct attn_bwd_io io = {dq + qo, dkf + ko, dvf + vo,  d_o + oo,          a->q + qo,
                                     kf + ko, vf + vo,  a->o + oo, a->lse + c.lse_off};
            attn_kernel_bwd(e, &op, &io, 1, d->cp_chunk_len, c.kv_len, c.q_pos0, true, ws, wsb);
        }
    }
}

/* ---- GQA projections ------------------------------------------------------------------------- */

/* q, k, v from the (gathered) normed input h [M, C]: fused QKV linear (+ bias), per-head q/k
 * RMSNorm when the model has it, RoPE. */
static void gqa_qkv_fwd(struct moe_eng *e,
                        const struct moe_eng_layer_w *w,
                        struct moe_eng_layer_act *a,
                        const float *h)
{
    const struct moe_eng_dims *d = &e->d;
    const struct moe_k_ops *k = e->k;
    int M = d->tokens;
    int hq = d->heads_l * d->head_dim;
    int hkv = d->kv_heads_l * d->head_dim;
    size_t mark = moe_eng_arena_mark(&e->temp);
    float *qkv = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)d->qkv_cols);
    moe_eng_linear_fwd(e, qkv, h, w->qkv.w, w->qkv_bias.w, M, d->hidden, d->qkv_cols);
    float *qd = d->has_qk_norm ? a->q_raw : a->q;
    float *kd = d->has_qk_norm ? a->k_raw : a->k;
    k->copy_2d(qd, hq, qkv, d->qkv_cols, M, hq, false, e->kc);
    k->copy_2d(kd, hkv, qkv + hq, d->qkv_cols, M, hkv, false, e->kc);
    k->copy_2d(a->v, hkv, qkv + hq + hkv, d->qkv_cols, M, hkv, false, e->kc);
    if (d->has_qk_norm) {
        k->rmsnorm_fwd(a->q, a->q_rstd, a->q_raw, w->q_norm.w, M * d->heads_l, d->head_dim,
                       NORM_EPS, e->kc);
        k->rmsnorm_fwd(a->k, a->k_rstd, a->k_raw, w->k_norm.w, M * d->kv_heads_l, d->head_dim,
                       NORM_EPS, e->kc);
    }
    k->rope_fwd(a->q, a->q, e->rope_cos_sin, M, d->heads_l, d->head_dim, 0, d->head_dim, false,
                e->kc);
    k->rope_fwd(a->k, a->k, e->rope_cos_sin, M, d->kv_heads_l, d->head_dim, 0, d->head_dim, false,
                e->kc);
    moe_eng_arena_release(&e->temp, mark);
}

/* dh1 [Ms, C] (overwrite) from dq, dk, dv (destroyed): RoPE and q/k norm backward, QKV linear
 * backward, the sequence-parallel reduction. */
static void gqa_qkv_bwd(struct moe_eng *e,
                        const struct moe_eng_layer_w *w,
                        struct moe_eng_layer_act *a,
                        float *dq,
                        float *dk,
                        const float *dv,
                        float *dh1)
{
    const struct moe_eng_dims *d = &e->d;
    const struct moe_k_ops *k = e->k;
    int M = d->tokens;
    int C = d->hidden;
    int hq = d->heads_l * d->head_dim;
    int hkv = d->kv_heads_l * d->head_dim;
    size_t mark = moe_eng_arena_mark(&e->temp);
    k->rope_bwd(dq, dq, e->rope_cos_sin, M, d->heads_l, d->head_dim, 0, d->head_dim, false, e->kc);
    k->rope_bwd(dk, dk, e->rope_cos_sin, M, d->kv_heads_l, d->head_dim, 0, d->head_dim, false,
                e->kc);
    float *dqkv = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)d->qkv_cols);
    if (d->has_qk_norm) {
        float *dqr = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)hq);
        float *dkr = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)hkv);
        k->rmsnorm_bwd(dqr, w->q_norm.g, dq, a->q_raw, w->q_norm.w, a->q_rstd, M * d->heads_l,
                       d->head_dim, false, e->kc);
        k->rmsnorm_bwd(dkr, w->k_norm.g, dk, a->k_raw, w->k_norm.w, a->k_rstd, M * d->kv_heads_l,
                       d->head_dim, false, e->kc);
        dq = dqr;
        dk = dkr;
    }
    k->copy_2d(dqkv, d->qkv_cols, dq, hq, M, hq, false, e->kc);
    k->copy_2d(dqkv + hq, d->qkv_cols, dk, hkv, M, hkv, false, e->kc);
    k->copy_2d(dqkv + hq + hkv, d->qkv_cols, dv, hkv, M, hkv, false, e->kc);
    const float *h = moe_eng_sp_gather(e, a->h1, moe_eng_gather_buf(e, C), C);
    float *partial = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)C);
    moe_eng_linear_bwd(e, partial, w->qkv.g, w->qkv_bias.g, dqkv, h, w->qkv.w, M, C, d->qkv_cols,
                       false);
    moe_eng_sp_reduce(e, dh1, partial, C);
    moe_eng_arena_release(&e->temp, mark);
}

/* ---- The attention block --------------------------------------------------------------------- */

void moe_eng_attention_fwd(struct moe_eng *e,
                           const struct moe_eng_layer_w *w,
                           struct moe_eng_layer_act *a)
{
    const struct moe_eng_dims *d = &e->d;
    const struct moe_k_ops *k = e->k;
    int M = d->tokens;
    int C = d->hidden;
    size_t mark = moe_eng_arena_mark(&e->temp);
    k->rmsnorm_fwd(a->h1, a->rstd1, a->x, w->attn_norm.w, d->tokens_sp, C, NORM_EPS, e->kc);
    if (d->is_mla) {
        moe_eng_mla_fwd(e, w, a);
    } else {
        const float *h = moe_eng_sp_gather(e, a->h1, moe_eng_gather_buf(e, C), C);
        gqa_qkv_fwd(e, w, a, h);
    }
    const float *kf = NULL;
    const float *vf = NULL;
    gather_kv(e, a->k, a->v, &kf, &vf);
    attention_core_fwd(e, w, a, kf, vf);
    float *partial = d->sp ? moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)C) : a->x2;
    moe_eng_linear_fwd(e, partial, a->o, w->proj.w, NULL, M, d->heads_l * d->v_dim, C);
    moe_eng_sp_reduce(e, a->x2, partial, C);
    if (w->proj_bias.w != NULL) {
        k->bias_fwd(a->x2, w->proj_bias.w, d->tokens_sp, C, e->kc);
    }
    k->axpy(a->x2, a->x, (size_t)d->tokens_sp * (size_t)C, 1.0f, e->kc); /* residual */
    k->rmsnorm_fwd(a->h2, a->rstd2, a->x2, w->mlp_norm.w, d->tokens_sp, C, NORM_EPS, e->kc);
    moe_eng_arena_release(&e->temp, mark);
}

void moe_eng_attention_bwd(struct moe_eng *e,
                           const struct moe_eng_layer_w *w,
                           struct moe_eng_layer_act *a,
                           const struct moe_eng_rc *rc,
                           float *d_)
{
    const struct moe_eng_dims *d = &e->d;
    const struct moe_k_ops *k = e->k;
    int M = d->tokens;
    int C = d->hidden;
    struct head_cols hc = head_cols_of(d);
    size_t mark = moe_eng_arena_mark(&e->temp);
    if (!rc->is_full && (rc->modules & MOE_RC_LAYERNORM)) {
        k->rmsnorm_fwd(a->h1, a->rstd1, a->x, w->attn_norm.w, d->tokens_sp, C, NORM_EPS, e->kc);
    }
    if (d->is_mla && !rc->is_full && (rc->modules & MOE_RC_MLA_UP_PROJ)) {
        moe_eng_mla_heads_fwd(e, w, a); /* q, k, v heads from the saved latents */
    }
    const float *kf = NULL;
    const float *vf = NULL;
    gather_kv(e, a->k, a->v, &kf, &vf);
    if (!rc->is_full && (rc->modules & MOE_RC_CORE_ATTN)) {
        attention_core_fwd(e, w, a, kf, vf);
    }
    if (w->proj_bias.g != NULL) {
        k->bias_bwd(w->proj_bias.g, d_, d->tokens_sp, C, e->kc);
    }
    const float *dfull = moe_eng_sp_gather(e, d_, moe_eng_gather_buf(e, C), C);
    float *d_o = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)hc.ho);
    moe_eng_linear_bwd(e, d_o, w->proj.g, NULL, dfull, a->o, w->proj.w, M, hc.ho, C, false);
    float *dq = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)hc.hq);
    size_t kv_rows = (size_t)M * (size_t)d->cp;
    float *dkf = moe_eng_arena_floats(&e->temp, kv_rows * (size_t)hc.hk);
    float *dvf = moe_eng_arena_floats(&e->temp, kv_rows * (size_t)hc.hv);
    attention_core_bwd(e, w, a, kf, vf, d_o, dq, dkf, dvf);
    float *dk = dkf;
    float *dv = dvf;
    if (d->cp > 1) {
        dk = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)hc.hk);
        dv = moe_eng_arena_floats(&e->temp, (size_t)M * (size_t)hc.hv);
        reduce_rows(e, dkf, dk, hc.hk);
        reduce_rows(e, dvf, dv, hc.hv);
    }
    float *dh1 = moe_eng_arena_floats(&e->temp, (size_t)d->tokens_sp * (size_t)C);
    if (d->is_mla) {
        moe_eng_mla_bwd(e, w, a, dq, dk, dv, dh1);
    } else {
        gqa_qkv_bwd(e, w, a, dq, dk, dv, dh1);
    }
    k->rmsnorm_bwd(d_, w->attn_norm.g, dh1, a->x, w->attn_norm.w, a->rstd1, d->tokens_sp, C, true,
                   e->kc);
    moe_eng_arena_release(&e->temp, mark);
}
