/*
 * The building blocks every engine block shares (engine/internal.h, "linear.c"): the linear layer
 * on the kernels table with optional precision emulation, the sequence-parallel gather/reduce over
 * TP, and the FFN activation. The decoder layer (engine/layers.c), attention (engine/attention.c,
 * engine/mla.c), the MoE experts (engine/moe_block.c, engine/allgather.c, engine/experts.c), the
 * loss head and MTP (engine/head.c, engine/mtp.c) call down into this file; it calls only the
 * kernels, the communicator and the arenas. Tensor parallelism follows Megatron-Core: with
 * sequence parallelism the residual stream is split over TP along tokens, all-gathered before each
 * column-parallel linear and reduce-scattered after each row-parallel one; without it the stream
 * is replicated and row-parallel outputs are all-reduced.
 *
 * Precision emulation (when asked): each GEMM's inputs pass through the kernels' quantise ->
 * dequantise with the recipe's formats (forward operands E4M3 / MX / NVFP4 / BF16, output gradients
 * E5M2 for the tensorwise "hybrid" recipes); the GEMM itself runs in fp32. Delayed scaling is
 * emulated with current (tensorwise) scaling.
 */
#include "engine/internal.h"

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

void moe_eng_linear_fwd(struct moe_eng *e,
                        float *y,
                        const float *x,
                        const float *w,
                        const float *bias,
                        int rows,
                        int in,
                        int out)
{
    size_t mark = moe_eng_arena_mark(&e->temp);
    const float *xq = qdq(e, x, rows, in, 0);
    const float *wq = qdq(e, w, out, in, 1);
    e->k->linear_fwd(y, xq, wq, bias, rows, in, out, e->kc);
    moe_eng_arena_release(&e->temp, mark);
}

void moe_eng_linear_bwd(struct moe_eng *e,
                        float *dx,
                        float *dw,
                        float *d_bias,
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
    e->k->linear_bwd_weight(dw, d_bias, dyq, xq, rows, in, out, e->kc);
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

float *moe_eng_gather_buf(struct moe_eng *e, int cols)
{
    return e->d.sp ? moe_eng_arena_floats(&e->temp, (size_t)e->d.tokens * (size_t)cols) : NULL;
}

/* ---- FFN activation: SwiGLU or GELU ------------------------------------------------------- */

void moe_eng_act_fwd(struct moe_eng *e, float *act, const float *fc1, int rows, int f)
{
    if (e->d.glu == 2) {
        e->k->swiglu_fwd(act, fc1, rows, f, e->kc);
    } else {
        e->k->gelu_fwd(act, fc1, (size_t)rows * (size_t)f, e->kc);
    }
}

void moe_eng_act_bwd(
    struct moe_eng *e, float *d_fc1, const float *d_act, const float *fc1, int rows, int f)
{
    if (e->d.glu == 2) {
        e->k->swiglu_bwd(d_fc1, d_act, fc1, rows, f, e->kc);
    } else {
        e->k->gelu_bwd(d_fc1, d_act, fc1, (size_t)rows * (size_t)f, e->kc);
    }
}
