/*
 * The routed experts' grouped GEMMs (engine/internal.h, "experts.c"): each local expert's rows
 * are contiguous, in expert order, with per-expert counts [El]; weights are stacked [El, out, in].
 * With --moe-grouped-gemm one grouped kernel runs all local experts; without it Megatron runs each
 * local expert as its own GEMM, and so does this file. Expert biases (GPT-OSS) are added per
 * expert's rows. Precision emulation (when asked) quantises and dequantises each expert's rows and
 * each expert's weight matrix on its own, with the recipe formats of engine/linear.c.
 *
 * Both token dispatchers call down into this file: the all-to-all and hierarchical paths of
 * engine/moe_block.c and the allgather dispatcher (engine/allgather.c). It does no communication
 * and no routing.
 */
#include "engine/internal.h"

/* ---- Grouped GEMMs with precision emulation -------------------------------------------------- */

/* Per-expert qdq of rows [R, cols] grouped by counts, or of stacked weights [El, out, cols]. */
static const float *
qdq_rows(struct moe_eng *e, const float *x, const int *counts, int num, int cols, int role)
{
    if (!e->opts.emulate_precision) {
        return x;
    }
    size_t rows = 0;
    for (int i = 0; i < num; i++) {
        rows += (size_t)counts[i];
    }
    float *out = moe_eng_arena_floats(&e->temp, rows * (size_t)cols);
    enum moe_recipe r = e->plan.options.recipe;
    size_t off = 0;
    for (int i = 0; i < num; i++) {
        if (counts[i] > 0) {
            enum moe_k_qformat f = MOE_K_QFMT_BF16;
            enum moe_k_qrecipe q = MOE_K_QRECIPE_CAST;
            switch (r) {
            case MOE_RECIPE_FP8_TENSORWISE:
            case MOE_RECIPE_FP8_DELAYED:
                f = role == 2 ? MOE_K_QFMT_FP8_E5M2 : MOE_K_QFMT_FP8_E4M3;
                q = MOE_K_QRECIPE_TENSORWISE;
                break;
            case MOE_RECIPE_FP8_BLOCKWISE:
                f = MOE_K_QFMT_FP8_E4M3;
                q = role == 1 ? MOE_K_QRECIPE_BLOCK_128X128 : MOE_K_QRECIPE_BLOCK_1X128;
                break;
            case MOE_RECIPE_MXFP8:
                f = MOE_K_QFMT_FP8_E4M3;
                q = MOE_K_QRECIPE_MX;
                break;
            case MOE_RECIPE_NVFP4:
                f = MOE_K_QFMT_FP4_E2M1;
                q = MOE_K_QRECIPE_NVFP4;
                break;
            case MOE_RECIPE_BF16:
            case MOE_NUM_RECIPES:
                break;
            }
            e->k->qdq(out + off * (size_t)cols, x + off * (size_t)cols, counts[i], cols, f, q,
                      e->kc);
        }
        off += (size_t)counts[i];
    }
    return out;
}

/* Stacked expert weights [El, out, in]: qdq each expert's [out, in] matrix on its own. */
static const float *qdq_weights(struct moe_eng *e, const float *w, int num, int out, int in)
{
    if (!e->opts.emulate_precision) {
        return w;
    }
    int *rows = moe_eng_arena_ints(e->htemp, (size_t)num);
    for (int i = 0; i < num; i++) {
        rows[i] = out;
    }
    return qdq_rows(e, w, rows, num, in, 1);
}

/* The per-expert counts a grouped GEMM needs twice: on the host (precision emulation slices rows
 * by them) and in engine memory (the kernels read them). */
struct group_counts {
    const int *host; /* [El] */
    const int *dev;  /* [El] */
};

/* y[R, out] += bias[e] [El, out] on each local expert's rows (GPT-OSS's expert biases). */
static void
grouped_bias_fwd(struct moe_eng *e, float *y, const float *bias, const int *counts, int out)
{
    size_t row = 0;
    for (int i = 0; i < e->d.experts_l; i++) {
        if (counts[i] > 0) {
            e->k->bias_fwd(y + row * (size_t)out, bias + (size_t)i * (size_t)out, counts[i], out,
                           e->kc);
        }
        row += (size_t)counts[i];
    }
}

static void
grouped_bias_bwd(struct moe_eng *e, float *d_bias, const float *dy, const int *counts, int out)
{
    size_t row = 0;
    for (int i = 0; i < e->d.experts_l; i++) {
        if (counts[i] > 0) {
            e->k->bias_bwd(d_bias + (size_t)i * (size_t)out, dy + row * (size_t)out, counts[i], out,
                           e->kc);
        }
        row += (size_t)counts[i];
    }
}

/* bias [El, out] may be NULL. */
static void grouped_fwd(struct moe_eng *e,
                        float *y,
                        const float *x,
                        const float *w,
                        const float *bias,
                        struct group_counts counts,
                        int in,
                        int out)
{
    int el = e->d.experts_l;
    if (!e->is_recomputing) {
        /* How many GEMMs the call runs (statistics: run.json expert_active_fraction). */
        for (int i = 0; i < el; i++) {
            e->experts_active += counts.host[i] > 0;
        }
        e->experts_called += el;
    }
    struct moe_eng_tmark mark = moe_eng_tmark_take(e);
    const float *xq = qdq_rows(e, x, counts.host, el, in, 0);
    const float *wq = qdq_weights(e, w, el, out, in);
    if (e->plan.options.moe_grouped_gemm) {
        e->k->grouped_linear_fwd(y, xq, wq, counts.dev, counts.host, el, in, out, e->kc);
    } else {
        /* Without --moe-grouped-gemm Megatron runs each local expert as its own GEMM. */
        size_t row = 0;
        size_t wsz = (size_t)out * (size_t)in;
        for (int i = 0; i < el; i++) {
            if (counts.host[i] > 0) {
                e->k->linear_fwd(y + row * (size_t)out, xq + row * (size_t)in, wq + (size_t)i * wsz,
                                 NULL, counts.host[i], in, out, e->kc);
            }
            row += (size_t)counts.host[i];
        }
    }
    if (bias != NULL) {
        grouped_bias_fwd(e, y, bias, counts.host, out);
    }
    moe_eng_tmark_release(e, mark);
}

/* d_bias [El, out] may be NULL. */
static void grouped_bwd(struct moe_eng *e,
                        float *dx,
                        float *dw,
                        float *d_bias,
                        const float *dy,
                        const float *x,
                        const float *w,
                        struct group_counts counts,
                        int in,
                        int out)
{
    int el = e->d.experts_l;
    struct moe_eng_tmark mark = moe_eng_tmark_take(e);
    const float *dyq = qdq_rows(e, dy, counts.host, el, out, 2);
    const float *xq = qdq_rows(e, x, counts.host, el, in, 0);
    const float *wq = qdq_weights(e, w, el, out, in);
    if (e->plan.options.moe_grouped_gemm) {
        e->k->grouped_linear_bwd_data(dx, dyq, wq, counts.dev, counts.host, el, in, out, false,
                                      e->kc);
        e->k->grouped_linear_bwd_weight(dw, dyq, xq, counts.dev, counts.host, el, in, out, e->kc);
    } else {
        size_t row = 0;
        size_t wsz = (size_t)out * (size_t)in;
        for (int i = 0; i < el; i++) {
            int n = counts.host[i];
            if (n > 0) {
                e->k->linear_bwd_data(dx + row * (size_t)in, dyq + row * (size_t)out,
                                      wq + (size_t)i * wsz, n, in, out, false, e->kc);
                e->k->linear_bwd_weight(dw + (size_t)i * wsz, NULL, dyq + row * (size_t)out,
                                        xq + row * (size_t)in, n, in, out, e->kc);
            }
            row += (size_t)n;
        }
    }
    if (d_bias != NULL) {
        grouped_bias_bwd(e, d_bias, dy, counts.host, out);
    }
    moe_eng_tmark_release(e, mark);
}

void moe_eng_grouped_fwd(struct moe_eng *e,
                         float *y,
                         const float *x,
                         const float *w,
                         const float *bias,
                         const int *counts_host,
                         const int *counts_dev,
                         int in,
                         int out)
{
    struct group_counts c = {counts_host, counts_dev};
    grouped_fwd(e, y, x, w, bias, c, in, out);
}

void moe_eng_grouped_bwd(struct moe_eng *e,
                         float *dx,
                         float *dw,
                         float *d_bias,
                         const float *dy,
                         const float *x,
                         const float *w,
                         const int *counts_host,
                         const int *counts_dev,
                         int in,
                         int out)
{
    struct group_counts c = {counts_host, counts_dev};
    grouped_bwd(e, dx, dw, d_bias, dy, x, w, c, in, out);
}
