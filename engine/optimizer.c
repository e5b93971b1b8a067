/*
 * Gradient reduction and the optimizer step (Megatron-Core's distributed optimizer, ZeRO-1): each
 * bucket's gradients are summed over its reduction group -- DP x CP for dense parameters, EDP for
 * routed experts -- by a reduce-scatter (each rank keeps one shard), or an all-reduce when the
 * optimizer is not distributed. Sequence-parallel replicated parameters (norms, router) are first
 * all-reduced over TP; tied embeddings split across the first and last stage are summed over the
 * embedding group. AdamW updates the fp32 master shard, which is copied into the weights and
 * all-gathered back over the group.
 *
 * Overlap: with overlap_grad_reduce a bucket's reduction starts (non-blocking) as soon as its last
 * micro-batch's backward is done; with overlap_param_gather the next step's parameter all-gather
 * starts right after the update and each layer waits for its buckets just before first use. The
 * time spent waiting is the exposed dp_comm.
 *
 * Also here: the global gradient norm (each parameter counted once: TP-replicated tensors on tp
 * rank 0, shards by their owners), clipping, the non-finite check that names step, layer and
 * tensor, and the aux-loss-free expert-bias update from the step's global expert counts
 * (DeepSeek-V3, bias += rate * sign(mean - count)).
 */
#include "engine/internal.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

double moe_eng_lr_at(const struct moe_eng *e, int step)
{
    double lr = e->opts.lr;
    if (e->opts.warmup_steps > 0 && step < e->opts.warmup_steps) {
        lr *= (double)step / (double)e->opts.warmup_steps;
    }
    return lr;
}

/* A bucket whose gradient is summed over the embedding group (first and last stage): the
 * embedding and its copy on the loss stage, when the output layer is tied to it or MTP embeds
 * with it there. */
static bool is_tied_embedding(const struct moe_eng *e, const struct moe_eng_bucket *bk)
{
    bool shared = !e->plan.model.is_untied_embeddings || e->plan.model.mtp_num_layers > 0;
    if (!shared || e->groups.embed == NULL) {
        return false;
    }
    if (bk->is_tied_copy) {
        return true;
    }
    return bk->layer == MOE_ENG_TAG_EMBED;
}

void moe_eng_grads_zero(struct moe_eng *e)
{
    int m = e->plan.layout.num_microbatches;
    bool tied_here = e->output.param >= 0 && e->output.param == e->embedding.param;
    for (int b = 0; b < e->num_buckets; b++) {
        struct moe_eng_bucket *bk = &e->buckets[b];
        moe_eng_memzero(e->ctx.dev, bk->g, bk->padded * sizeof(float));
        bk->pending = m;
        if (tied_here && bk->layer == MOE_ENG_TAG_EMBED) {
            bk->pending = 2 * m; /* embedding backward and the output layer both add */
        }
    }
}

static void start_reduce(struct moe_eng *e, struct moe_eng_bucket *bk, bool is_async)
{
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_DP_COMM);
    if (bk->tp_partial && e->d.tp > 1) {
        moe_comm_allreduce(e->groups.tp, bk->g, bk->g, bk->numel, MOE_COMM_F32, MOE_COMM_SUM);
    }
    if (moe_comm_size(bk->group) > 1) {
        bool dist = e->plan.options.use_distributed_optimizer;
        if (dist && is_async) {
            moe_comm_ireducescatter(bk->group, bk->g, bk->g, bk->shard, MOE_COMM_F32, MOE_COMM_SUM,
                                    &bk->grad_req);
        } else if (dist) {
            moe_comm_reducescatter(bk->group, bk->g, bk->g, bk->shard, MOE_COMM_F32, MOE_COMM_SUM);
        } else if (is_async) {
            moe_comm_iallreduce(bk->group, bk->g, bk->g, bk->padded, MOE_COMM_F32, MOE_COMM_SUM,
                                &bk->grad_req);
        } else {
            moe_comm_allreduce(bk->group, bk->g, bk->g, bk->padded, MOE_COMM_F32, MOE_COMM_SUM);
        }
    }
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

void moe_eng_bucket_ready(struct moe_eng *e, int bucket)
{
    if (e->plan.options.overlap_grad_reduce) {
        start_reduce(e, &e->buckets[bucket], true);
    }
}

void moe_eng_layer_grads_done(struct moe_eng *e, int layer_tag)
{
    bool tied_here = e->output.param >= 0 && e->output.param == e->embedding.param;
    for (int b = 0; b < e->num_buckets; b++) {
        struct moe_eng_bucket *bk = &e->buckets[b];
        bool hit = bk->layer == layer_tag ||
                   (tied_here && layer_tag == MOE_ENG_TAG_HEAD && bk->layer == MOE_ENG_TAG_EMBED);
        if (hit && --bk->pending == 0) {
            moe_eng_bucket_ready(e, b);
        }
    }
}

void moe_eng_comm_progress(struct moe_eng *e)
{
    if (!e->plan.options.overlap_grad_reduce && !e->plan.options.overlap_param_gather) {
        return;
    }
    for (int b = 0; b < e->num_buckets; b++) {
        struct moe_eng_bucket *bk = &e->buckets[b];
        if (bk->grad_req.is_active) {
            (void)moe_comm_test(bk->group, &bk->grad_req);
        }
        if (bk->param_req.is_active) {
            (void)moe_comm_test(bk->group, &bk->param_req);
        }
    }
}

void moe_eng_params_wait(struct moe_eng *e, int layer_tag)
{
    if (!e->plan.options.overlap_param_gather) {
        return;
    }
    for (int b = 0; b < e->num_buckets; b++) {
        struct moe_eng_bucket *bk = &e->buckets[b];
        bool hit = bk->layer == layer_tag ||
                   (layer_tag == MOE_ENG_TAG_HEAD && e->output.param == e->embedding.param &&
                    bk->layer == MOE_ENG_TAG_EMBED);
        if (hit && bk->param_req.is_active) {
            enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_DP_COMM);
            moe_comm_wait(bk->group, &bk->param_req);
            moe_eng_phase_enter(&e->ctx.timer, prev);
        }
    }
}

/* Wait for (or run) every bucket's reduction, then sum tied embeddings over the stages. */
static void finish_reductions(struct moe_eng *e)
{
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_DP_COMM);
    for (int b = 0; b < e->num_buckets; b++) {
        struct moe_eng_bucket *bk = &e->buckets[b];
        /* Without overlap every bucket reduces here; with it, a bucket the schedule never
         * completed (cannot happen) still reduces so the collectives stay matched. */
        if (!e->plan.options.overlap_grad_reduce || bk->pending > 0) {
            start_reduce(e, bk, false);
        }
        moe_comm_wait(bk->group, &bk->grad_req);
        if (is_tied_embedding(e, bk)) {
            moe_comm_allreduce(e->groups.embed, bk->g, bk->g, bk->shard, MOE_COMM_F32,
                               MOE_COMM_SUM);
        }
    }
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

/* Name of the parameter holding element idx of bucket b's reduced shard. */
static const struct moe_eng_param *
param_at(const struct moe_eng *e, const struct moe_eng_bucket *bk, size_t idx)
{
    size_t pos = bk->shard_off + idx;
    size_t off = 0;
    for (int i = 0; i < bk->num_params; i++) {
        const struct moe_eng_param *p = &e->params[bk->first_param + i];
        if (pos < off + p->numel) {
            return p;
        }
        off += p->numel;
    }
    return NULL;
}

/* Sum of squares of the gradients this rank owns, in double; the first non-finite value fills diag.
 * One kernel per bucket (it sums in double but stores fp32) into a slot of bucket_ss, then one
 * copy of all of them to the host. A slot that is not finite is either a non-finite gradient
 * (named) or a finite sum above FLT_MAX (gradients above ~1.8e19): that bucket is summed again in
 * double (moe_eng_sumsq_double), so large but finite gradients give a finite norm and are clipped
 * as usual. The ranks' sums are added in double too (moe_eng_optimizer_step). */
static double owned_sumsq(struct moe_eng *e, int *nonfinite, struct moe_diag *diag)
{
    double total = 0.0;
    bool dist = e->plan.options.use_distributed_optimizer;
    for (int b = 0; b < e->num_buckets; b++) {
        struct moe_eng_bucket *bk = &e->buckets[b];
        e->k->sum_squares(e->bucket_ss + b, bk->g, bk->shard, e->kc);
    }
    moe_eng_copy_to_host(e->ctx.dev, e->h_bucket_ss, e->bucket_ss,
                         (size_t)e->num_buckets * sizeof(float));
    for (int b = 0; b < e->num_buckets; b++) {
        struct moe_eng_bucket *bk = &e->buckets[b];
        float ss = e->h_bucket_ss[b];
        double sd = (double)ss;
        if (!isfinite(ss)) {
            float bad_value = 0.0f;
            size_t bad = moe_eng_first_nonfinite(e->ctx.dev, bk->g, bk->shard, &bad_value);
            if (bad == bk->shard) {
                /* large but finite gradients: the float kernel result overflowed */
                sd = moe_eng_sumsq_double(e->ctx.dev, bk->g, bk->shard);
            } else {
                const struct moe_eng_param *p = param_at(e, bk, bad);
                if (*nonfinite == 0) {
                    (void)moe_diag_set(diag, MOE_ERR_RUNTIME,
                                       "step %d: non-finite gradient (%g) in %s (layer %d, "
                                       "element %zu of this rank's shard)",
                                       e->step + 1, (double)bad_value, p != NULL ? p->name : "?",
                                       p != NULL ? p->layer : -1, bad);
                }
                *nonfinite = 1;
                continue;
            }
        }
        if (bk->is_norm_owner && (dist || moe_comm_rank(bk->group) == 0)) {
            total += sd;
        }
    }
    return total;
}

/* One thread's part of an AdamW call on host memory. */
struct host_adamw_job {
    const struct moe_k_ops *k;
    moe_k_ctx_t *kc;
    float *param, *m, *v;
    const float *grad;
    size_t n;
    float lr, beta1, beta2, eps, weight_decay, scale;
    int step;
};

static void host_adamw_part(const struct host_adamw_job *j)
{
    j->k->adamw_step(j->param, j->m, j->v, j->grad, j->n, j->lr, j->beta1, j->beta2, j->eps,
                     j->weight_decay, j->scale, j->step, j->kc);
}

static void *host_adamw_run(void *arg)
{
    host_adamw_part(arg);
    return NULL;
}

/* Calls of at least this many elements are split over the host's threads. */
#define HOST_ADAMW_PARALLEL_MIN ((size_t)1 << 20)

/*
 * AdamW of an offloaded optimizer on a device backend: the host's cores (e->host_threads) take
 * equal parts of the call, each a multiple of 16 elements. The update is elementwise, so the
 * split does not change a bit. A thread that cannot start leaves its part to this one.
 */
static void host_adamw(const struct moe_eng *e, const struct host_adamw_job *all)
{
    int n = e->host_threads;
    if (n < 2 || all->n < HOST_ADAMW_PARALLEL_MIN) {
        host_adamw_part(all);
        return;
    }
    struct host_adamw_job jobs[MOE_ENG_HOST_ADAMW_MAX_THREADS];
    pthread_t threads[MOE_ENG_HOST_ADAMW_MAX_THREADS];
    bool started[MOE_ENG_HOST_ADAMW_MAX_THREADS] = {false};
    size_t per = (all->n / (size_t)n + 15) / 16 * 16;
    for (int t = 0; t < n; t++) {
        size_t lo = per * (size_t)t < all->n ? per * (size_t)t : all->n;
        size_t hi = lo + per < all->n ? lo + per : all->n;
        jobs[t] = *all;
        jobs[t].param += lo;
        jobs[t].m += lo;
        jobs[t].v += lo;
        jobs[t].grad += lo;
        jobs[t].n = hi - lo;
        if (t > 0 && jobs[t].n > 0) {
            started[t] = pthread_create(&threads[t], NULL, host_adamw_run, &jobs[t]) == 0;
            if (!started[t]) {
                host_adamw_part(&jobs[t]);
            }
        }
    }
    host_adamw_part(&jobs[0]);
    for (int t = 1; t < n; t++) {
        if (started[t]) {
            (void)pthread_join(threads[t], NULL);
        }
    }
}

static void adamw_bucket(struct moe_eng *e, struct moe_eng_bucket *bk, float lr, float scale)
{
    /* Optimizer CPU offload: the gradient shard goes to the host, AdamW runs there on the
     * offloaded state, and gather_params brings the updated shard back (as Megatron's
     * HybridDeviceOptimizer: gradients down, parameters up). */
    const float *g = bk->g; /* the reduced shard sits at the start (in-place reduce-scatter) */
    const struct moe_k_ops *k = e->k;
    moe_k_ctx_t *kc = e->kc;
    if (bk->g_host != NULL) {
        moe_eng_copy_to_host(e->ctx.dev, bk->g_host, g, bk->shard * sizeof(float));
        g = bk->g_host;
        if (e->host_k != NULL) { /* a device backend: AdamW on the host's CPU kernels */
            k = e->host_k;
            kc = e->host_kc;
        }
    }
    size_t off = 0;
    size_t lo = bk->shard_off;
    size_t hi = bk->shard_off + bk->shard;
    for (int i = 0; i < bk->num_params; i++) {
        const struct moe_eng_param *p = &e->params[bk->first_param + i];
        size_t a = off > lo ? off : lo;
        size_t z = off + p->numel < hi ? off + p->numel : hi;
        if (a < z) {
            size_t s = a - lo;
            float wd = p->no_decay ? 0.0f : e->opts.weight_decay;
            if (k == e->host_k) {
                struct host_adamw_job job = {
                    k,     kc,         bk->master + s, bk->m + s,     bk->v + s,        g + s,
                    z - a, lr,         e->opts.beta1,  e->opts.beta2, e->opts.adam_eps, wd,
                    scale, e->step + 1};
                host_adamw(e, &job);
            } else {
                k->adamw_step(bk->master + s, bk->m + s, bk->v + s, g + s, z - a, lr, e->opts.beta1,
                              e->opts.beta2, e->opts.adam_eps, wd, scale, e->step + 1, kc);
            }
        }
        off += p->numel;
    }
}

static void gather_params(struct moe_eng *e)
{
    bool dist = e->plan.options.use_distributed_optimizer;
    bool async = e->plan.options.overlap_param_gather;
    /* Copying the updated master shard into the weights is the optimizer's last write (the cost
     * model counts it there); only the all-gather is DP communication. */
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_OPTIMIZER);
    for (int b = 0; b < e->num_buckets; b++) {
        struct moe_eng_bucket *bk = &e->buckets[b];
        if (bk->g_host != NULL) {
            moe_eng_copy_from_host(e->ctx.dev, bk->w + bk->shard_off, bk->master,
                                   bk->shard * sizeof(float));
        } else {
            moe_eng_copy(e->ctx.dev, bk->w + bk->shard_off, bk->master, bk->shard * sizeof(float));
        }
    }
    moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_DP_COMM);
    for (int b = 0; b < e->num_buckets; b++) {
        struct moe_eng_bucket *bk = &e->buckets[b];
        if (!dist || moe_comm_size(bk->group) == 1) {
            continue;
        }
        float *mine = bk->w + bk->shard_off;
        if (async) {
            moe_comm_iallgather(bk->group, mine, bk->w, bk->shard, MOE_COMM_F32, &bk->param_req);
        } else {
            moe_comm_allgather(bk->group, mine, bk->w, bk->shard, MOE_COMM_F32);
        }
    }
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

/* Expert bias update and expert-load statistics from the step's counts over the stage: one
 * all-reduce of every local MoE layer's counts (engine memory), the bias kernels on it, and the
 * statistics from its host copy. */
static void expert_counts_step(struct moe_eng *e)
{
    const struct moe_eng_dims *d = &e->d;
    if (d->experts == 0) {
        return;
    }
    int E = d->experts;
    int num_moe = 0;
    for (int v = 0; v < e->num_chunks_local; v++) {
        const struct moe_eng_chunk *ch = &e->chunks[v];
        for (int i = 0; i < ch->num_layers + ch->num_mtp; i++) {
            num_moe += e->layers[moe_eng_chunk_layer(d->num_layers, ch, i)].is_moe ? 1 : 0;
        }
    }
    if (num_moe == 0) {
        return;
    }
    size_t n = (size_t)num_moe * (size_t)E;
    struct moe_eng_tmark mark = moe_eng_tmark_take(e);
    int *counts = moe_eng_arena_ints(e->htemp, n);
    int j = 0;
    for (int v = 0; v < e->num_chunks_local; v++) {
        const struct moe_eng_chunk *ch = &e->chunks[v];
        for (int i = 0; i < ch->num_layers + ch->num_mtp; i++) {
            const struct moe_eng_layer_w *w = &e->layers[moe_eng_chunk_layer(d->num_layers, ch, i)];
            if (!w->is_moe) {
                continue;
            }
            const long *sc = e->step_counts + (size_t)w->idx * (size_t)E;
            for (int x = 0; x < E; x++) {
                counts[(size_t)j * (size_t)E + (size_t)x] = (int)sc[x];
            }
            j++;
        }
    }
    int *dc = moe_eng_dev_ints(e, counts, n);
    moe_comm_allreduce(e->groups.stage, dc, dc, n, MOE_COMM_I32, MOE_COMM_SUM);
    const int *hc = moe_eng_host_ints(e, dc, n);
    j = 0;
    for (int v = 0; v < e->num_chunks_local; v++) {
        const struct moe_eng_chunk *ch = &e->chunks[v];
        for (int i = 0; i < ch->num_layers + ch->num_mtp; i++) {
            const struct moe_eng_layer_w *w = &e->layers[moe_eng_chunk_layer(d->num_layers, ch, i)];
            if (!w->is_moe) {
                continue;
            }
            size_t off = (size_t)j * (size_t)E;
            if (w->expert_bias != NULL && e->opts.bias_update_rate > 0.0f) {
                e->k->router_bias_update(w->expert_bias, dc + off, E, e->opts.bias_update_rate,
                                         e->kc);
            }
            long *acc = e->stats.expert_tokens + (size_t)w->idx * (size_t)E;
            for (int x = 0; x < E; x++) {
                acc[x] += hc[off + (size_t)x];
            }
            j++;
        }
    }
    moe_eng_tmark_release(e, mark);
}

/*
 * Every rank ends a failed step with the same message: the most telling one of any rank (a
 * non-finite weight named in the forward, then a block output, a gradient, the loss), the lowest
 * rank among equals. Collective; called only when some rank found a non-finite value.
 */
static void agree_on_message(struct moe_eng *e,
                             int priority,
                             const struct moe_diag *local,
                             struct moe_diag *diag)
{
    int size = e->ctx.size;
    int key = -(priority * size + e->ctx.rank); /* MAX of the negation = MIN of the key */
    int best = key;
    moe_comm_allreduce(e->ctx.world, &key, &best, 1, MOE_COMM_I32, MOE_COMM_MAX);
    int winner = (-best) % size;
    union {
        char text[sizeof(local->message)];
        int words[sizeof(local->message) / sizeof(int)];
    } msg;
    memcpy(msg.text, local->message, sizeof(msg.text));
    moe_comm_bcast(e->ctx.world, msg.words, MOE_ARRAY_LEN(msg.words), MOE_COMM_I32, winner);
    msg.text[sizeof(msg.text) - 1] = '\0';
    if (e->ctx.rank == winner) {
        moe_eng_log_rank(&e->ctx.log, "%s", msg.text);
    }
    (void)moe_diag_set(diag, MOE_ERR_RUNTIME, "%s",
                       msg.text[0] != '\0' ? msg.text
                                           : "a non-finite gradient "
                                             "norm (overflow)");
    if (diag != NULL) {
        diag->source[0] = '\0';
    }
}

enum moe_status moe_eng_optimizer_step(struct moe_eng *e, double *grad_norm, struct moe_diag *diag)
{
    finish_reductions(e);
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_OPTIMIZER);
    int nonfinite = 0;
    int priority = 4; /* nothing found here */
    struct moe_diag local;
    memset(&local, 0, sizeof(local));
    double sums[5] = {0.0, 0.0, e->loss_sum, e->aux_sum, e->mtp_sum};
    if (e->nan_origin[0] != '\0') {
        /* The forward went non-finite first: name where, not the gradients it spoiled. */
        nonfinite = 1;
        priority = e->nan_priority;
        (void)moe_diag_set(&local, MOE_ERR_RUNTIME,
                           "step %d: non-finite values in the forward pass, first in %s (the "
                           "loss is %g)",
                           e->step + 1, e->nan_origin, e->loss_sum);
    } else {
        sums[0] = owned_sumsq(e, &nonfinite, &local);
        priority = nonfinite != 0 ? 2 : 4;
        if (nonfinite == 0 &&
            (!isfinite(e->loss_sum) || !isfinite(e->aux_sum) || !isfinite(e->mtp_sum))) {
            nonfinite = 1;
            priority = 3;
            (void)moe_diag_set(&local, MOE_ERR_RUNTIME, "step %d: the loss is not finite (%g)",
                               e->step + 1, e->loss_sum);
        }
    }
    sums[1] = (double)nonfinite;
    moe_comm_allreduce(e->ctx.world, sums, sums, 5, MOE_COMM_F64, MOE_COMM_SUM);
    e->loss_sum = sums[2];
    e->aux_sum = sums[3] / (double)e->global_mbs;
    e->mtp_sum = sums[4];
    *grad_norm = sqrt(sums[0]);
    if (sums[1] > 0.0 || !isfinite(sums[0])) {
        agree_on_message(e, priority, &local, diag);
        moe_eng_phase_enter(&e->ctx.timer, prev);
        return MOE_ERR_RUNTIME;
    }
    float scale = 1.0f;
    if (e->opts.clip_grad > 0.0f && *grad_norm > (double)e->opts.clip_grad) {
        scale = (float)((double)e->opts.clip_grad / (*grad_norm + 1e-6));
    }
    float lr = (float)moe_eng_lr_at(e, e->step + 1);
    for (int b = 0; b < e->num_buckets; b++) {
        adamw_bucket(e, &e->buckets[b], lr, scale);
    }
    moe_eng_phase_enter(&e->ctx.timer, prev);
    gather_params(e);
    /* With the parameter all-gathers just posted, a host-synchronous backend moves their data
     * inside the next call into the library, the counts' all-reduce below (a few hundred bytes):
     * that call is then a progress poll of overlapped DP collectives and is booked as dp_comm,
     * as the other polls are (it measured 2.7-2.9 ms a step of the validate model at DP2, booked
     * as optimizer time before). */
    bool gathering = false;
    for (int b = 0; b < e->num_buckets; b++) {
        gathering = gathering || e->buckets[b].param_req.is_active;
    }
    prev = moe_eng_phase_enter(&e->ctx.timer, gathering ? MOE_PHASE_DP_COMM : MOE_PHASE_OPTIMIZER);
    expert_counts_step(e);
    moe_eng_phase_enter(&e->ctx.timer, prev);
    return MOE_OK;
}
