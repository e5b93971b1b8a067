/*
 * Host views of engine memory and the step's device scalars (engine/internal.h, "staging.c").
 *
 * The engine looks at tensor data on the host in few places: the loss of each micro-batch, the
 * expert token counts the dropless dispatch plans its exchange from, the gradient sum of squares,
 * the router losses and the finite checks. On the CPU backend engine memory is host memory and
 * every view here is the pointer itself, so the CPU engine runs exactly as before. On the CUDA
 * backend a host view is an explicit copy into host staging (engine/device.h), and the scalars
 * kernels produce during a step (router losses, sums of layer outputs for the finite check) go to
 * slots in engine memory that are copied back once, at the end of the schedule, and read in the
 * order they were written, so the sums are the ones the CPU computes when it adds them as they
 * come.
 *
 * The deferred finite check (CUDA only): a layer output is non-finite when the sum of its elements
 * scaled by 2^-126 (FLT_MIN) is not finite. The scaling keeps the check exact: a finite element
 * becomes at most 4 in magnitude (FLT_MAX * 2^-126 < 4), so the fp32 result of n of them cannot
 * overflow (below 4n), while Inf and NaN stay non-finite; a plain sum of large but finite
 * activations could overflow fp32 and stop a run the CPU backend, which checks every element as it
 * goes (engine/layers.c), lets go on. The first non-finite layer in execution order is named,
 * together with its first non-finite weight if any, unless the loss head named something earlier
 * in the step. The helpers both backends' checks share live here too: moe_eng_all_finite (the CPU
 * backend's element-wise check) and moe_eng_nonfinite_weight (the weight a check names).
 */
#include "engine/internal.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

const int *moe_eng_host_ints(struct moe_eng *e, const int *x, size_t n)
{
    if (!e->is_device) {
        return x;
    }
    int *h = moe_eng_arena_ints(e->htemp, n);
    moe_eng_copy_to_host(e->ctx.dev, h, x, n * sizeof(int));
    return h;
}

const float *moe_eng_host_floats(struct moe_eng *e, const float *x, size_t n)
{
    if (!e->is_device) {
        return x;
    }
    float *h = moe_eng_arena_floats(e->htemp, n);
    moe_eng_copy_to_host(e->ctx.dev, h, x, n * sizeof(float));
    return h;
}

struct moe_eng_tmark moe_eng_tmark_take(const struct moe_eng *e)
{
    struct moe_eng_tmark m = {moe_eng_arena_mark(&e->temp), moe_eng_arena_mark(e->htemp)};
    return m;
}

/* On the CPU backend both marks are of the same arena, taken in this order: released LIFO. */
void moe_eng_tmark_release(struct moe_eng *e, struct moe_eng_tmark m)
{
    moe_eng_arena_release(e->htemp, m.host);
    moe_eng_arena_release(&e->temp, m.temp);
}

int *moe_eng_dev_ints(struct moe_eng *e, int *h, size_t n)
{
    if (!e->is_device) {
        return h;
    }
    int *d = moe_eng_arena_ints(&e->temp, n);
    moe_eng_copy_from_host(e->ctx.dev, d, h, n * sizeof(int));
    return d;
}

float *moe_eng_scal_take(struct moe_eng *e, enum moe_eng_scal_kind kind, int layer)
{
    MOE_ASSERT(e->num_scal < e->cap_scal);
    int i = e->num_scal++;
    e->scal_kind[i] = (int)kind;
    e->scal_layer[i] = layer;
    e->scal_seq[i] = e->check_seq;
    return e->scal + i;
}

/* out = the sum of x[rows, cols] scaled by FLT_MIN (finite exactly when every x is), through the
 * scaled copy tmp[rows, cols]. */
static void
scaled_sum(struct moe_eng *e, float *out, const float *x, float *tmp, int rows, int cols)
{
    size_t n = (size_t)rows * (size_t)cols;
    e->k->copy_2d(tmp, cols, x, cols, rows, cols, false, e->kc);
    e->k->scale(tmp, n, FLT_MIN, e->kc);
    e->k->sum(out, tmp, n, e->kc);
}

void moe_eng_note_layer_sums(struct moe_eng *e, int layer, const float *x2, const float *out)
{
    if (e->is_recomputing) {
        return;
    }
    int rows = e->d.tokens_sp;
    int cols = e->d.hidden;
    size_t mark = moe_eng_arena_mark(&e->temp);
    float *tmp = moe_eng_arena_floats(&e->temp, (size_t)rows * (size_t)cols);
    scaled_sum(e, moe_eng_scal_take(e, MOE_ENG_SCAL_SUM_X2, layer), x2, tmp, rows, cols);
    scaled_sum(e, moe_eng_scal_take(e, MOE_ENG_SCAL_SUM_OUT, layer), out, tmp, rows, cols);
    moe_eng_arena_release(&e->temp, mark);
    e->check_seq++;
}

bool moe_eng_all_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) {
            return false;
        }
    }
    return true;
}

const char *moe_eng_nonfinite_weight(struct moe_eng *e, const struct moe_eng_layer_w *w)
{
    struct moe_eng_tensor *ts[MOE_ENG_LAYER_TENSORS];
    int nt = moe_eng_layer_tensors(&e->layers[w->idx], ts);
    for (int i = 0; i < nt; i++) {
        if (ts[i]->w != NULL && !moe_eng_is_finite(e->ctx.dev, ts[i]->w, ts[i]->numel)) {
            return e->params[ts[i]->param].name;
        }
    }
    return NULL;
}

/* Name the layer of slot i (a non-finite output sum) unless an earlier check named something. */
static void name_layer(struct moe_eng *e, int i)
{
    if (e->nan_origin[0] != '\0' && e->nan_seq <= e->scal_seq[i]) {
        return;
    }
    const struct moe_eng_layer_w *w = &e->layers[e->scal_layer[i]];
    bool x2_ok = i > 0 && e->scal_kind[i - 1] == MOE_ENG_SCAL_SUM_X2 && isfinite(e->h_scal[i - 1]);
    const char *what = x2_ok ? "MLP/MoE block output" : "attention output";
    const char *weight = moe_eng_nonfinite_weight(e, w);
    e->nan_priority = weight != NULL ? 0 : 1;
    (void)snprintf(e->nan_origin, sizeof(e->nan_origin), "layer %d, %s", w->idx,
                   weight != NULL ? weight : what);
    e->nan_seq = e->scal_seq[i];
}

void moe_eng_scal_flush(struct moe_eng *e)
{
    int n = e->num_scal;
    e->num_scal = 0;
    if (n == 0) {
        return;
    }
    moe_eng_copy_to_host(e->ctx.dev, e->h_scal, e->scal, (size_t)n * sizeof(float));
    int bad = -1;
    for (int i = 0; i < n; i++) {
        float v = e->h_scal[i];
        if (e->scal_kind[i] == MOE_ENG_SCAL_ROUTER_LOSS) {
            e->aux_sum += (double)v;
        } else if (e->scal_kind[i] == MOE_ENG_SCAL_SUM_OUT && bad < 0 && !isfinite(v)) {
            bad = i;
        }
    }
    if (bad >= 0) {
        name_layer(e, bad);
    }
}

size_t moe_eng_host_temp_bytes(const struct moe_eng *e)
{
    const struct moe_eng_dims *d = &e->d;
    size_t E = (size_t)(d->experts > 0 ? d->experts : 1);
    size_t El = (size_t)(d->experts_l > 0 ? d->experts_l : 1);
    size_t nch = (size_t)d->etp * (size_t)d->ep * El;
    /* A dispatch plan (moe_block.c ep_plan): 4 EP + 2 ETP counts/displacements, chunk rows and
     * order, local counts; at most two plans (EP overlap halves) and their count copies live. */
    size_t plan = 4 * (size_t)d->ep + 2 * (size_t)d->etp + 2 * nch + El;
    size_t ints = 4 * E + 2 * plan + 2 * (2 * E + 2 * nch) + El;
    ints += (size_t)d->num_layers_all * E; /* expert counts of the optimizer step */
    size_t floats = (size_t)d->tokens;     /* a micro-batch's token losses */
    if (e->plan.options.force_load_balancing || e->opts.router_skew != 0.0) {
        size_t logits = (size_t)d->tokens_sp * E; /* moe_block.c random_logits */
        floats = logits > floats ? logits : floats;
    }
    /* Twice the count (two nested users at most), plus the 64-byte rounding of 64 carves. */
    return 2 * (ints + floats) * sizeof(int) + 64 * MOE_ENG_HOST_ALIGN;
}
