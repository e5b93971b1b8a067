/*
 * Engine lifetime and the training step (engine/engine.h). Creation resolves the layout, forms the
 * groups, derives the dimensions and the schedule, then sizes every memory category with a sizing
 * pass over the same carving code that later lays out the real blocks (one allocation per
 * category), initialises the weights and the data. A step: next global batch -> zero gradients ->
 * pipeline schedule (forward/backward of every micro-batch) -> reductions, optimizer, expert bias.
 * Nothing is allocated inside a step; the per-op temporaries come from an arena reset every step.
 * The queries at the end include what ran of the plan (moe_eng_ran_options: each option the engine
 * runs otherwise, and how), which creation logs and run.json reports (engine/report.c).
 */
#include "engine/bench.h"
#include "engine/check.h"
#include "engine/internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

void moe_eng_run_opts_init(struct moe_eng_run_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->num_steps = 10;
    o->data_kind = MOE_ENG_DATA_TEXT;
    o->seed = 1234;
    o->lr = 3e-3f; /* small models tolerate a high rate; Megatron has no default */
    o->warmup_steps = 0;
    o->beta1 = 0.9f;     /* Megatron-LM --adam-beta1 default */
    o->beta2 = 0.95f;    /* DeepSeek-V3 / Megatron MoE recipes (--adam-beta2 0.95) */
    o->adam_eps = 1e-8f; /* Megatron-LM --adam-eps default */
    o->weight_decay = 0.1f;
    o->clip_grad = 1.0f;       /* Megatron-LM --clip-grad default */
    o->aux_loss_coeff = -1.0f; /* the plan's (moe_eng_run_opts.aux_loss_coeff) */
    o->z_loss_coeff = 0.0f;
    o->bias_update_rate = 1e-3f; /* DeepSeek-V3 report: bias update speed 0.001 */
    o->topk_scaling = 1.0f;
    o->moe_buffer_factor = 0.0;
}

/* ---- Creation -------------------------------------------------------------------------------- */

/* The engine's one router loss is Switch's (per micro-batch, the counts all-reduced over TP x CP):
 * at the plan's aux_loss coefficient, else its seq_aux_loss one, which sums the same counts over
 * the same group (moe_eng_ran_options says what ran). */
static double planned_aux_loss(const struct moe_options *o)
{
    return o->aux_loss_coeff > 0.0 ? o->aux_loss_coeff : o->seq_aux_loss_coeff;
}

static enum moe_status resolve_layout(struct moe_eng *e, struct moe_diag *diag)
{
    struct moe_layout *lay = &e->plan.layout;
    if (lay->num_gpus == 0) {
        lay->num_gpus = e->ctx.size;
    }
    if (lay->num_gpus != e->ctx.size) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "the plan is for %d ranks but %d were started; run mpirun -np %d",
                            lay->num_gpus, e->ctx.size, lay->num_gpus);
    }
    MOE_TRY(moe_layout_resolve(&e->plan.model, NULL, &e->plan.options, lay, diag));
    if (lay->num_gpus != e->ctx.size) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "the plan's layout needs %d ranks but %d were started", lay->num_gpus,
                            e->ctx.size);
    }
    return MOE_OK;
}

/* Hierarchical dispatch: the EP group's nodes, each holding the same number of consecutive EP
 * ranks; buffer bounds for the token copies a proxy receives and the rows it forwards. */
static enum moe_status setup_hierarchical(struct moe_eng *e, struct moe_diag *diag)
{
    struct moe_eng_dims *d = &e->d;
    const struct moe_eng_groups *g = &e->groups;
    if (d->etp > 1) {
        return moe_diag_set(diag, MOE_ERR_UNSUPPORTED,
                            "the hierarchical dispatcher needs etp=1 (etp=%d); use the alltoall "
                            "dispatcher with expert tensor parallelism",
                            d->etp);
    }
    int per_node = moe_comm_size(g->ep_node);
    bool contiguous = g->is_ep_uniform && moe_comm_rank(g->ep) / per_node == g->ep_node_idx &&
                      moe_comm_rank(g->ep) % per_node == moe_comm_rank(g->ep_node) &&
                      moe_comm_size(g->ep_cross) == g->ep_num_nodes;
    if (!contiguous) {
        return moe_diag_set(diag, MOE_ERR_UNSUPPORTED,
                            "the hierarchical dispatcher needs every node to hold the same number "
                            "of consecutive EP ranks (place ranks by node, or set "
                            "--ranks-per-node)");
    }
    d->hier_nodes = g->ep_num_nodes;
    d->hier_per_node = per_node;
    d->hier_copies = d->hier_nodes * d->tokens_sp;
    int k_node = d->topk < per_node * d->experts_l ? d->topk : per_node * d->experts_l;
    d->hier_rows = d->hier_copies * k_node;
    return MOE_OK;
}

static enum moe_status check_options(struct moe_eng *e, struct moe_diag *diag)
{
    const struct moe_options *o = &e->plan.options;
    if (o->optimizer_cpu_offload && e->is_device) {
        /* The master shard and the moments live in host memory and AdamW runs there, on the CPU
         * kernels (engine/optimizer.c): gradients down, parameters up. */
        struct moe_k_ctx_desc desc = {.backend = MOE_K_BACKEND_CPU, .num_threads = 1};
        if (moe_k_ctx_create(&desc, &e->host_kc) != MOE_OK) {
            return moe_diag_set(diag, MOE_ERR_NOMEM,
                                "cannot create the host kernel context for the offloaded "
                                "optimizer");
        }
        e->host_k = moe_k_ctx_ops(e->host_kc);
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        int ranks = e->ctx.node_ranks > 0 ? e->ctx.node_ranks : e->ctx.size;
        long per = ranks > 0 ? cpus / ranks : cpus;
        e->host_threads =
            per < 1 ? 1
                    : (per > MOE_ENG_HOST_ADAMW_MAX_THREADS ? MOE_ENG_HOST_ADAMW_MAX_THREADS
                                                            : (int)per);
    }
    if (o->main_grads_dtype != MOE_DTYPE_FP32 || o->exp_avg_dtype != MOE_DTYPE_FP32 ||
        o->exp_avg_sq_dtype != MOE_DTYPE_FP32) {
        return moe_diag_set(diag, MOE_ERR_UNSUPPORTED,
                            "moefold-train keeps gradients and Adam moments in fp32; drop the "
                            "precision-aware optimizer dtypes");
    }

    bool hier = e->opts.has_dispatcher_override ? e->opts.is_hierarchical
                                                : (o->dispatcher == MOE_DISPATCH_DEEPEP ||
                                                   o->dispatcher == MOE_DISPATCH_HYBRIDEP);
    e->is_hierarchical = hier && e->d.experts > 0 && e->d.ep > 1; /* EP1: nothing to dispatch */
    if (hier && e->d.experts > 0 && e->d.ep == 1 && !e->opts.has_dispatcher_override) {
        /* The flat path's permute and expert sort still run (locally): run.json says so, and
         * compare prices them as the flat dispatcher's, not as a fused kernel's. */
        e->fallbacks |= MOE_ENG_FB_HIER_EP1;
    }
    if (e->is_hierarchical && (e->d.etp > 1 || e->is_device)) {
        /* Not implemented there: the flat all-to-all runs instead, and run.json says so. */
        e->is_hierarchical = false;
        e->fallbacks |= e->is_device ? MOE_ENG_FB_HIER_DEVICE : MOE_ENG_FB_HIER_ETP;
    }
    e->is_allgather = o->dispatcher == MOE_DISPATCH_ALLGATHER && e->d.experts > 0 &&
                      !e->opts.has_dispatcher_override;
    if (e->is_allgather) {
        if (e->is_device || e->d.capacity > 0 || o->overlap_moe_ep_comm) {
            return moe_diag_set(diag, MOE_ERR_UNSUPPORTED,
                                "moefold-train's allgather dispatcher runs on the CPU backend, "
                                "dropless and without the EP overlap; use alltoall otherwise");
        }
        e->d.ag_group = e->d.etp * e->d.ep;
    }
    if (o->overlap_moe_ep_comm && e->d.experts > 0) {
        if (e->is_hierarchical || e->is_allgather || e->d.etp > 1 || e->d.capacity > 0) {
            /* The overlap is implemented for the flat dispatcher, etp = 1, dropless: without it
             * otherwise, and run.json says so. */
            e->fallbacks |= MOE_ENG_FB_EP_OVERLAP;
        } else {
            e->is_ep_overlap = true;
            e->d.ep_overlap = true;
        }
    }
    return e->is_hierarchical ? setup_hierarchical(e, diag) : MOE_OK;
}

/* Scalar slots a schedule may take: per forward of a layer (not recomputed), two router losses
 * and two sums for the finite check. */
static int scal_capacity(const struct moe_eng *e)
{
    long layers = 0;
    for (int v = 0; v < e->num_chunks_local; v++) {
        layers += e->chunks[v].num_layers + e->chunks[v].num_mtp;
    }
    return (int)(4L * layers * e->plan.layout.num_microbatches + 4);
}

static enum moe_status alloc_registry(struct moe_eng *e, struct moe_diag *diag)
{
    int L = e->d.num_layers_all;
    e->cap_params = 32 * L + 16;
    e->cap_buckets = 4 * L + 8;
    struct moe_eng_heap *h = &e->ctx.heap;
    e->params = moe_eng_heap_alloc(h, (size_t)e->cap_params * sizeof(*e->params));
    e->buckets = moe_eng_heap_alloc(h, (size_t)e->cap_buckets * sizeof(*e->buckets));
    e->layers = moe_eng_heap_alloc(h, (size_t)L * sizeof(*e->layers));
    size_t ne = (size_t)L * (size_t)(e->d.experts > 0 ? e->d.experts : 1);
    e->stats.expert_tokens = moe_eng_heap_alloc(h, ne * sizeof(long));
    e->stats.phase_sum = moe_eng_heap_alloc(h, MOE_ENG_NUM_SLOTS * sizeof(double));
    e->stats.cap_steps = e->opts.num_steps > 0 ? e->opts.num_steps : 1;
    e->stats.step_s = moe_eng_heap_alloc(h, (size_t)e->stats.cap_steps * sizeof(double));
    e->stats.loss = moe_eng_heap_alloc(h, (size_t)e->stats.cap_steps * sizeof(double));
    e->stats.probe_each_us = moe_eng_heap_alloc(h, (size_t)e->stats.cap_steps * sizeof(double));
    e->stats.cap_ep_rows = e->stats.cap_steps * e->plan.layout.num_microbatches;
    e->stats.ep_rows =
        moe_eng_heap_alloc(h, (size_t)L * (size_t)e->stats.cap_ep_rows * sizeof(int));
    e->stats.num_ep_rows = moe_eng_heap_alloc(h, (size_t)L * sizeof(int));
    e->cap_scal = scal_capacity(e);
    size_t sb = (size_t)e->cap_scal * sizeof(int);
    e->scal_kind = moe_eng_heap_alloc(h, sb);
    e->scal_layer = moe_eng_heap_alloc(h, sb);
    e->scal_seq = moe_eng_heap_alloc(h, sb);
    if (e->params == NULL || e->buckets == NULL || e->layers == NULL ||
        e->stats.expert_tokens == NULL || e->stats.phase_sum == NULL || e->stats.step_s == NULL ||
        e->stats.loss == NULL || e->stats.probe_each_us == NULL || e->stats.ep_rows == NULL ||
        e->stats.num_ep_rows == NULL || e->scal_kind == NULL || e->scal_layer == NULL ||
        e->scal_seq == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the parameter registry");
    }
    return MOE_OK;
}

/* Carve everything on the current arenas (sizing or real). */
static void carve_all(struct moe_eng *e)
{
    moe_eng_params_carve(e);
    moe_eng_acts_carve(e);
}

/* Categories that live in engine memory (device memory on the CUDA backend). */
static bool is_engine_memory(int c)
{
    return c != MOE_ENG_MEM_HOST && c != MOE_ENG_MEM_STAGING;
}

/* One block for category c: device memory for engine categories on CUDA, else the host heap. */
static enum moe_status alloc_category(struct moe_eng *e, int c, struct moe_diag *diag)
{
    size_t bytes = e->mem[c].bytes;
    e->mem[c].block = NULL;
    if (bytes == 0) {
        return MOE_OK;
    }
    if (e->is_device && is_engine_memory(c)) {
        enum moe_status st = moe_eng_dev_alloc(e->ctx.dev, &e->mem[c].block, bytes);
        if (st != MOE_OK) {
            size_t fr = 0, tot = 0;
            moe_eng_dev_mem_info(e->ctx.dev, &fr, &tot);
            return moe_diag_set(diag, MOE_ERR_NOMEM,
                                "out of device memory: %.2f GiB for memory category %d (%.2f of "
                                "%.2f GiB free); lower mbs, recompute or raise parallelism",
                                (double)bytes / 1073741824.0, c, (double)fr / 1073741824.0,
                                (double)tot / 1073741824.0);
        }
        return MOE_OK;
    }
    e->mem[c].block = moe_eng_heap_alloc(&e->ctx.heap, bytes);
    if (e->mem[c].block == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory: %zu bytes for memory category %d",
                            bytes, c);
    }
    return MOE_OK;
}

static void free_category(struct moe_eng *e, int c)
{
    if (e->is_device && is_engine_memory(c)) {
        moe_eng_dev_free(e->ctx.dev, e->mem[c].block);
    } else {
        moe_eng_heap_free(&e->ctx.heap, e->mem[c].block, e->mem[c].bytes);
    }
    e->mem[c].block = NULL;
}

/*
 * Interleaved schedules: one activation pool for the rank's chunks when it is smaller than each
 * chunk's own slots. A chunk alone peaks at its own slots, but the chunks do not peak together:
 * Megatron's caching allocator holds at most warm-up + 1 chunk-micro-batches (the pool's slots,
 * each as large as the largest chunk's), where per-chunk slots hold the sum of the chunks' peaks
 * (PP2 VPP2, 8 micro-batches, last stage: 3 slots instead of 3 + 1). Every chunk then has a slot
 * struct, and its send buffers, per pool slot. Called after a sizing pass with each chunk's own
 * slots; true when it switched to the pool (sizing must be redone).
 */
static bool share_slots_if_smaller(struct moe_eng *e)
{
    if (e->num_chunks_local < 2) {
        return false;
    }
    size_t own = 0;
    size_t largest = 0;
    size_t pipes = 0;
    for (int v = 0; v < e->num_chunks_local; v++) {
        const struct moe_eng_chunk *ch = &e->chunks[v];
        own += (size_t)ch->num_slots * (ch->slot_act_bytes + ch->slot_pipe_bytes);
        largest = ch->slot_act_bytes > largest ? ch->slot_act_bytes : largest;
        pipes += ch->slot_pipe_bytes;
    }
    if ((size_t)e->num_shared_slots * (largest + pipes) >= own) {
        return false;
    }
    for (int v = 0; v < e->num_chunks_local; v++) {
        struct moe_eng_chunk *ch = &e->chunks[v];
        int *own_slots = ch->mb_slot;
        ch->mb_slot = ch->mb_slot_shared;
        ch->mb_slot_shared = own_slots;
        ch->num_slots = e->num_shared_slots;
    }
    e->share_slots = true;
    return true;
}

static void sizing_pass(struct moe_eng *e)
{
    for (int c = 0; c < MOE_ENG_NUM_MEM; c++) {
        moe_eng_arena_init_sizing(&e->mem[c].arena);
    }
    e->rc_scratch_bytes = 0;
    e->staging_bytes = 0;
    carve_all(e);
}

static enum moe_status allocate_memory(struct moe_eng *e, struct moe_diag *diag)
{
    sizing_pass(e);
    if (share_slots_if_smaller(e)) {
        sizing_pass(e);
    }
    size_t temp = moe_eng_temp_bytes(e, &e->temp_dispatch_bytes);
    e->temp_bytes = moe_eng_align(temp);
    size_t htemp = e->is_device ? moe_eng_host_temp_bytes(e) : 0;
    size_t sizes[MOE_ENG_NUM_MEM];
    for (int c = 0; c < MOE_ENG_NUM_MEM; c++) {
        sizes[c] = e->mem[c].arena.used;
    }
    sizes[MOE_ENG_MEM_BUFFERS] +=
        moe_eng_align(e->rc_scratch_bytes) + moe_eng_align(e->staging_bytes) + moe_eng_align(temp);
    sizes[MOE_ENG_MEM_STAGING] += moe_eng_align(htemp);
    for (int c = 0; c < MOE_ENG_NUM_MEM; c++) {
        e->mem[c].bytes = sizes[c];
        MOE_TRY(alloc_category(e, c, diag));
        moe_eng_arena_init(&e->mem[c].arena, e->mem[c].block, sizes[c]);
    }
    struct moe_eng_arena *bufs = &e->mem[MOE_ENG_MEM_BUFFERS].arena;
    e->rc_scratch = moe_eng_arena_take(bufs, e->rc_scratch_bytes);
    e->staging = moe_eng_arena_take(bufs, e->staging_bytes);
    void *temp_block = moe_eng_arena_take(bufs, temp);
    moe_eng_arena_init(&e->temp, temp_block, moe_eng_align(temp));
    if (e->is_device) {
        void *ht = moe_eng_arena_take(&e->mem[MOE_ENG_MEM_STAGING].arena, htemp);
        moe_eng_arena_init(&e->htemp_arena, ht, moe_eng_align(htemp));
        e->htemp = &e->htemp_arena;
    }
    carve_all(e);
    for (int c = 0; c < MOE_ENG_NUM_MEM; c++) {
        MOE_ASSERT(e->mem[c].arena.used == e->mem[c].bytes);
    }
    return MOE_OK;
}

/* Every rank must return the same status: agree on the worst one. */
static enum moe_status agree(struct moe_eng *e, enum moe_status st, struct moe_diag *diag)
{
    int v = -(int)st;
    int worst = v;
    moe_comm_allreduce(e->ctx.world, &v, &worst, 1, MOE_COMM_I32, MOE_COMM_MAX);
    if (worst != 0 && st == MOE_OK) {
        (void)moe_diag_set(diag, (enum moe_status)(-worst),
                           "another rank failed to set up (its message says why)");
    }
    return (enum moe_status)(-worst);
}

static enum moe_status create_body(struct moe_eng *e, struct moe_diag *diag)
{
    MOE_TRY(moe_eng_groups_create(e->ctx.world, &e->plan.layout, e->opts.ranks_per_node, &e->groups,
                                  diag));
    if (e->is_device && !moe_eng_dev_is_emulated(e->ctx.dev)) {
        /* Every group of the folding on NCCL (device buffers); the world stays MPI (host data). */
        MOE_TRY(moe_eng_groups_to_nccl(&e->groups, moe_eng_dev_stream(e->ctx.dev),
                                       moe_eng_dev_comm_stream(e->ctx.dev), diag));
    }
    MOE_TRY(moe_eng_dims_init(e, diag));
    e->global_mbs = e->plan.layout.gbs / e->plan.layout.mbs; /* resolve checked divisibility */
    MOE_TRY(check_options(e, diag));
    MOE_TRY(moe_eng_schedule_build(e, diag));
    MOE_TRY(alloc_registry(e, diag));
    MOE_TRY(allocate_memory(e, diag));
    return moe_eng_params_init(e, diag);
}

/* --cuda-graphs: say which layers' forwards are captured and why the others are not. */
static void note_graphs(const struct moe_eng *e)
{
    int layers = 0, graphed = 0;
    for (int v = 0; v < e->num_chunks_local; v++) {
        const struct moe_eng_chunk *ch = &e->chunks[v];
        for (int i = 0; i < ch->num_layers; i++) {
            layers++;
            graphed += moe_eng_layer_is_graphable(e, &e->layers[ch->first_layer + i]) ? 1 : 0;
        }
    }
    moe_eng_log_info(&e->ctx.log,
                     "cuda graphs: %d of %d layer forwards captured (dense layers with tp = cp = "
                     "1); MoE layers run eagerly: the dropless dispatch reads the expert counts on "
                     "the host inside the layer",
                     graphed, layers);
}

enum moe_status moe_eng_create(const struct moe_plan *plan,
                               const struct moe_eng_run_opts *opts,
                               moe_comm_t *world,
                               moe_eng_t **out,
                               struct moe_diag *diag)
{
    *out = NULL;
    struct moe_eng_heap boot = {0};
    moe_eng_t *e = moe_eng_heap_alloc(&boot, sizeof(*e));
    if (e == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the engine");
    }
    enum moe_status st =
        moe_eng_ctx_init(&e->ctx, world, opts->seed, opts->log, opts->verbosity, opts->backend,
                         (int)opts->gemm_math, opts->is_device_emulated, diag);
    if (st != MOE_OK) {
        moe_eng_ctx_fini(&e->ctx);
        moe_eng_heap_free(&boot, e, sizeof(*e));
        return st;
    }
    e->ctx.heap = boot;
    e->plan = *plan;
    e->planned = plan->options;
    e->plan.options.is_fp32_training = true; /* the engine stores everything in fp32 */
    e->opts = *opts;
    if (e->opts.aux_loss_coeff < 0.0f) {
        e->opts.aux_loss_coeff = (float)planned_aux_loss(&plan->options);
    }
    e->k = e->ctx.k;
    e->kc = e->ctx.kctx;
    e->is_device = e->ctx.dev != NULL;
    e->htemp = &e->temp; /* the CUDA backend's host arena is set up with the memory */
    st = resolve_layout(e, diag);
    if (st == MOE_OK) {
        st = create_body(e, diag);
    }
    if (st == MOE_OK) {
        st = moe_eng_data_init(e, diag);
    }
    if (e->groups.tp != NULL) {
        st = agree(e, st, diag);
    }
    if (st == MOE_OK) {
        st = agree(e, moe_eng_timing_create(e, diag), diag);
    }
    if (st == MOE_OK && opts->load_dir != NULL) {
        st = moe_eng_load(e, opts->load_dir, diag);
    }
    if (st == MOE_OK) {
        /* Count only the training's traffic, not the set-up's. */
        moe_comm_t *all[] = {e->groups.tp,      e->groups.cp,       e->groups.dp,
                             e->groups.dpcp,    e->groups.tpcp,     e->groups.pp,
                             e->groups.pp_bwd,  e->groups.ep,       e->groups.etp,
                             e->groups.edp,     e->groups.stage,    e->groups.embed,
                             e->groups.ep_node, e->groups.ep_cross, e->groups.etpep};
        for (size_t i = 0; i < MOE_ARRAY_LEN(all); i++) {
            if (all[i] != NULL) {
                moe_comm_reset_stats(all[i]);
            }
        }
    }
    if (st != MOE_OK) {
        moe_eng_destroy(e);
        return st;
    }
    if (diag != NULL) {
        diag->source[0] = '\0'; /* a successful create leaves no stale source behind */
    }
    if (e->chunks != NULL && e->chunks[0].graphs != NULL) {
        note_graphs(e);
    }
    struct moe_options ran;
    char diffs[MOE_ENG_MAX_DIFFS][160];
    int nd = 0;
    moe_eng_ran_options(e, &ran, diffs, &nd);
    for (int i = 0; i < nd; i++) {
        moe_eng_log_info(&e->ctx.log, "runs otherwise than the plan: %s", diffs[i]);
    }
    if (opts->verbosity > 0) {
        const struct moe_rank_coords *c = &e->groups.me;
        struct moe_eng_mem_report m;
        moe_eng_memory(e, &m);
        moe_eng_log_rank(&e->ctx.log,
                         "%s: stage %d tp %d cp %d dp %d ep %d etp %d edp %d node %d; %ld "
                         "parameters; MiB weights %.2f grads %.2f optimizer %.2f activations "
                         "%.2f (%d slot(s)) buffers %.2f host pool %.2f",
                         e->ctx.host, c->stage, c->tp, c->cp, c->dp, c->ep, c->etp, c->edp,
                         e->groups.node_id, m.num_params, m.weights / 1048576.0,
                         m.grads / 1048576.0, m.optimizer / 1048576.0, m.activations / 1048576.0,
                         m.num_slots_max, m.buffers / 1048576.0, m.host_offload / 1048576.0);
    }
    *out = e;
    return MOE_OK;
}

void moe_eng_destroy(moe_eng_t *e)
{
    if (e == NULL) {
        return;
    }
    struct moe_eng_heap *h = &e->ctx.heap;
    if (e->probe_sets != NULL) {
        moe_bench_gemm_sets_fini(e->probe_sets);
        moe_eng_heap_free(h, e->probe_sets, sizeof(*e->probe_sets));
    }
    moe_eng_timing_destroy(e);
    moe_eng_data_fini(e);
    moe_k_ctx_destroy(e->host_kc);
    for (int c = 0; c < MOE_ENG_NUM_MEM; c++) {
        free_category(e, c);
    }
    if (e->chunks != NULL) {
        int m = e->plan.layout.num_microbatches;
        for (int v = 0; v < e->num_chunks_local; v++) {
            struct moe_eng_chunk *ch = &e->chunks[v];
            size_t nl = (size_t)(ch->num_layers > 0 ? ch->num_layers : 1);
            for (int s = 0; s < ch->slots_cap && ch->slots != NULL; s++) {
                moe_eng_heap_free(h, ch->slots[s].acts, nl * sizeof(struct moe_eng_layer_act));
                moe_eng_heap_free(h, ch->slots[s].mtp,
                                  (size_t)ch->num_mtp * sizeof(struct moe_eng_mtp_act));
            }
            moe_eng_heap_free(h, ch->slots, (size_t)ch->slots_cap * sizeof(*ch->slots));
            moe_eng_heap_free(h, ch->mb_slot, (size_t)m * sizeof(int));
            moe_eng_heap_free(h, ch->mb_slot_shared, (size_t)m * sizeof(int));
            moe_eng_heap_free(h, ch->rc, nl * sizeof(*ch->rc));
            if (ch->graphs != NULL) {
                size_t ng = (size_t)ch->slots_cap * nl;
                for (size_t i = 0; i < ng; i++) {
                    moe_eng_dev_graph_destroy(ch->graphs[i].exec);
                }
                moe_eng_heap_free(h, ch->graphs, ng * sizeof(*ch->graphs));
            }
        }
        moe_eng_heap_free(h, e->chunks, (size_t)e->num_chunks_local * sizeof(*e->chunks));
        moe_eng_heap_free(h, e->ops, 2 * (size_t)m * (size_t)e->num_chunks_local * sizeof(*e->ops));
    }
    int L = e->d.num_layers_all;
    size_t ne = (size_t)L * (size_t)(e->d.experts > 0 ? e->d.experts : 1);
    moe_eng_heap_free(h, e->params, (size_t)e->cap_params * sizeof(*e->params));
    moe_eng_heap_free(h, e->buckets, (size_t)e->cap_buckets * sizeof(*e->buckets));
    moe_eng_heap_free(h, e->layers, (size_t)L * sizeof(*e->layers));
    moe_eng_heap_free(h, e->stats.expert_tokens, ne * sizeof(long));
    moe_eng_heap_free(h, e->stats.phase_sum, MOE_ENG_NUM_SLOTS * sizeof(double));
    moe_eng_heap_free(h, e->stats.step_s, (size_t)e->stats.cap_steps * sizeof(double));
    moe_eng_heap_free(h, e->stats.loss, (size_t)e->stats.cap_steps * sizeof(double));
    moe_eng_heap_free(h, e->stats.probe_each_us, (size_t)e->stats.cap_steps * sizeof(double));
    moe_eng_heap_free(h, e->stats.ep_rows, (size_t)L * (size_t)e->stats.cap_ep_rows * sizeof(int));
    moe_eng_heap_free(h, e->stats.num_ep_rows, (size_t)L * sizeof(int));
    size_t sb = (size_t)e->cap_scal * sizeof(int);
    moe_eng_heap_free(h, e->scal_kind, sb);
    moe_eng_heap_free(h, e->scal_layer, sb);
    moe_eng_heap_free(h, e->scal_seq, sb);
    moe_eng_groups_destroy(&e->groups);
    moe_eng_ctx_fini(&e->ctx);
    struct moe_eng_heap last = *h;
    moe_eng_heap_free(&last, e, sizeof(*e));
}

/* ---- Steps ----------------------------------------------------------------------------------- */

/* The step's host bookkeeping (host_overhead) and the gradients zeroed for it (optimizer: the
 * cost model counts that write there). */
static void begin_step(struct moe_eng *e)
{
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_HOST_OVERHEAD);
    moe_eng_arena_reset(&e->temp);
    moe_eng_arena_reset(e->htemp);
    e->num_scal = 0;
    e->check_seq = 0;
    e->nan_seq = 0;
    e->loss_sum = 0.0;
    e->aux_sum = 0.0;
    e->mtp_sum = 0.0;
    e->dropped = 0.0;
    e->experts_active = 0;
    e->experts_called = 0;
    e->nan_origin[0] = '\0';
    if (e->d.experts > 0) {
        memset(e->step_counts, 0,
               (size_t)e->d.num_layers_all * (size_t)e->d.experts * sizeof(long));
    }
    moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_OPTIMIZER);
    moe_eng_grads_zero(e);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

/* The next global batch's token ids (host work). */
static void next_batch(struct moe_eng *e)
{
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_HOST_OVERHEAD);
    moe_eng_data_next_batch(e);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

enum moe_status
moe_eng_train_step(moe_eng_t *e, struct moe_eng_step_result *res, struct moe_diag *diag)
{
    moe_eng_timing_begin_step(e);
    moe_eng_timer_reset(&e->ctx.timer, MOE_ENG_UNATTRIBUTED);
    double t0 = moe_eng_now();
    begin_step(e);
    next_batch(e);
    moe_eng_run_schedule(e);
    double gnorm = 0.0;
    enum moe_status st = moe_eng_optimizer_step(e, &gnorm, diag);
    moe_eng_timer_flush(&e->ctx.timer); /* CUDA: waits for the step's last event */
    double dt = moe_eng_now() - t0;
    /* The first step of a run warms caches and MPI connections; phases average the rest. */
    bool measured = st == MOE_OK && (e->stats.num_steps > 0 || e->opts.num_steps <= 1);
    moe_eng_timing_end_step(e, measured);
    if (e->is_device) {
        size_t fr = 0, tot = 0;
        moe_eng_dev_mem_info(e->ctx.dev, &fr, &tot);
        double used = (double)(tot - fr);
        e->device_used_max = used > e->device_used_max ? used : e->device_used_max;
    }
    memset(res, 0, sizeof(*res));
    res->step = e->step + 1;
    res->loss = e->loss_sum;
    res->aux_loss = e->aux_sum;
    res->mtp_loss = e->mtp_sum;
    res->grad_norm = gnorm;
    res->step_s = dt;
    res->tokens_per_s = (double)e->plan.layout.gbs * (double)e->d.seq / dt;
    res->lr = moe_eng_lr_at(e, e->step + 1);
    if (st != MOE_OK) {
        return st;
    }
    e->step++;
    struct moe_eng_stats *s = &e->stats;
    if (s->num_steps < s->cap_steps) {
        s->step_s[s->num_steps] = dt;
        s->loss[s->num_steps] = res->loss;
    }
    s->num_steps++;
    if (measured) {
        for (int p = 0; p < MOE_ENG_NUM_SLOTS; p++) {
            s->phase_sum[p] += e->ctx.timer.phase_s[p];
        }
        s->num_measured++;
        s->experts_active += (double)e->experts_active;
        s->experts_called += (double)e->experts_called;
    }
    s->bytes_dropped += e->dropped;
    return MOE_OK;
}

enum moe_status moe_eng_compute_grads(moe_eng_t *e, double *loss, struct moe_diag *diag)
{
    (void)diag;
    struct moe_eng_rng saved = e->ctx.rng;
    uint64_t saved_pos = e->data.next_seq;
    moe_eng_timer_reset(&e->ctx.timer, MOE_ENG_UNATTRIBUTED);
    begin_step(e);
    next_batch(e);
    bool was = e->plan.options.overlap_grad_reduce;
    bool logging = e->clog.is_on;
    e->plan.options.overlap_grad_reduce = false; /* keep local gradients */
    e->clog.is_on = false;                       /* not a step: no waits to match */
    moe_eng_run_schedule(e);
    e->plan.options.overlap_grad_reduce = was;
    e->clog.is_on = logging;
    double sums[3] = {e->loss_sum, e->aux_sum, e->mtp_sum};
    moe_comm_allreduce(e->ctx.world, sums, sums, 3, MOE_COMM_F64, MOE_COMM_SUM);
    *loss = sums[0] + sums[1] / (double)e->global_mbs + sums[2];
    e->ctx.rng = saved;
    e->data.next_seq = saved_pos;
    return MOE_OK;
}

static double peak_rss_bytes(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) {
        return 0.0;
    }
    return (double)ru.ru_maxrss * 1024.0; /* Linux reports KiB */
}

/* The host speed probe (opts.no_host_probe): moefold-bench's 512^3 GEMM row, timed as the bench
 * times it, between two steps. The ranks start together (a barrier, as the bench's rows) and
 * compare their times: the slowest over the mean, minus 1, is the ranks' speed spread at that
 * moment, the figure calibrate fits host.rank_spread from (the mean over the bench's rows). */
#define PROBE_ITERS 3

static void host_probe(struct moe_eng *e)
{
    if (e->opts.no_host_probe || e->is_device || e->ctx.k->backend != MOE_K_BACKEND_CPU) {
        return;
    }
    struct moe_bench_cfg cfg = {PROBE_ITERS, 1, e->opts.probe_evict_bytes};
    if (e->probe_sets == NULL) { /* the operands once (tens of MiB, filled from a seed) */
        e->probe_sets = moe_eng_heap_alloc(&e->ctx.heap, sizeof(*e->probe_sets));
        if (e->probe_sets != NULL &&
            moe_bench_gemm_sets_init(e->probe_sets, &cfg, MOE_ENG_PROBE_DIM, MOE_ENG_PROBE_DIM,
                                     MOE_ENG_PROBE_DIM) != MOE_OK) {
            moe_bench_gemm_sets_fini(e->probe_sets); /* buf NULL: this rank's probes fail */
        }
    }
    bool ok = e->probe_sets != NULL && e->probe_sets->buf != NULL;
    moe_comm_barrier(e->ctx.world);
    struct moe_bench_gemm g = {0};
    if (ok) {
        moe_bench_gemm_time(e->ctx.k, e->ctx.kctx, &cfg, e->probe_sets, &g);
        ok = g.is_ok && g.time_us > 0.0;
        /* The next probe on the sets after these: one that started on set 0 each time re-read
         * the four sets the last probe had left in the cache wherever the steps between touched
         * less than the cache holds (the presets' miniatures, 10-16 MiB a rank: their probes
         * warmed from 1666 to 1420 us over a run while their steps stayed at 50 ms, validate
         * 2026-12-04 00:20), and compare priced them 12-17% fast. */
        e->probe_sets->first =
            (e->probe_sets->first + cfg.warmup + cfg.iters) % e->probe_sets->num_sets;
    }
    double sum[2] = {ok ? g.time_us : 0.0, ok ? 1.0 : 0.0};
    double max = ok ? g.time_us : 0.0;
    moe_comm_allreduce(e->ctx.world, sum, sum, 2, MOE_COMM_F64, MOE_COMM_SUM);
    moe_comm_allreduce(e->ctx.world, &max, &max, 1, MOE_COMM_F64, MOE_COMM_MAX);
    if (sum[1] < (double)e->ctx.size) {
        return; /* a rank's probe failed: keep none of this one */
    }
    if (e->stats.probe_calls < e->stats.cap_steps) {
        e->stats.probe_each_us[e->stats.probe_calls] = sum[0] / sum[1];
    }
    e->stats.probe_us += g.time_us;
    e->stats.probe_spread += max / (sum[0] / sum[1]) - 1.0;
    e->stats.probe_calls++;
}

enum moe_status moe_eng_train(moe_eng_t *e, struct moe_diag *diag)
{
    int n = e->opts.num_steps;
    double t_start = moe_eng_now();
    for (int i = 0; i < n; i++) {
        struct moe_eng_step_result r;
        MOE_TRY(moe_eng_train_step(e, &r, diag));
        if (i > 0 || n == 1) {
            host_probe(e); /* after the measured steps, outside their timers */
        }
        double elapsed = moe_eng_now() - t_start;
        double eta = elapsed / (double)(i + 1) * (double)(n - i - 1);
        char mtp[32] = "";
        if (e->d.num_mtp > 0) {
            (void)snprintf(mtp, sizeof(mtp), " | mtp %.4f", r.mtp_loss);
        }
        moe_eng_log_info(&e->ctx.log,
                         "step %5d/%d | loss %.4f%s | aux %.4f | grad norm %.3f | %9.0f tok/s | "
                         "%7.1f ms | ETA %.1f s",
                         r.step, e->step - i - 1 + n, r.loss, mtp, r.aux_loss, r.grad_norm,
                         r.tokens_per_s, r.step_s * 1e3, eta);
        if (e->opts.save_dir != NULL && e->opts.save_every > 0 &&
            r.step % e->opts.save_every == 0) {
            MOE_TRY(moe_eng_save(e, e->opts.save_dir, diag));
        }
    }
    bool just_saved = e->opts.save_every > 0 && n > 0 && e->step % e->opts.save_every == 0;
    if (e->opts.save_dir != NULL && !just_saved) {
        MOE_TRY(moe_eng_save(e, e->opts.save_dir, diag));
    }
    return MOE_OK;
}

/* ---- Queries --------------------------------------------------------------------------------- */

void moe_eng_memory(const moe_eng_t *e, struct moe_eng_mem_report *out)
{
    memset(out, 0, sizeof(*out));
    out->weights = (double)e->mem[MOE_ENG_MEM_WEIGHTS].bytes;
    out->grads = (double)e->mem[MOE_ENG_MEM_GRADS].bytes;
    double slack = (double)moe_eng_opt_page_slack(e);
    out->optimizer = (double)e->mem[MOE_ENG_MEM_OPTIMIZER].bytes - slack;
    out->activations = (double)e->mem[MOE_ENG_MEM_ACTIVATIONS].bytes;
    out->buffers = (double)e->mem[MOE_ENG_MEM_BUFFERS].bytes + slack;
    out->total = out->weights + out->grads + out->optimizer + out->activations + out->buffers;
    out->host_offload = (double)e->mem[MOE_ENG_MEM_HOST].bytes;
    out->data = (double)e->data.text_bytes_alloc;
    out->peak_rss = peak_rss_bytes();
    if (e->is_device) {
        size_t fr = 0, tot = 0;
        moe_eng_dev_mem_info(e->ctx.dev, &fr, &tot);
        double now = (double)(tot - fr);
        out->device_total = (double)tot;
        out->device_used = now > e->device_used_max ? now : e->device_used_max;
    }
    long np = 0;
    for (int p = 0; p < e->num_params; p++) {
        np += (long)e->params[p].numel;
    }
    out->num_params = np;
    for (int v = 0; v < e->num_chunks_local; v++) {
        int s = e->chunks[v].num_slots;
        out->num_slots_max = s > out->num_slots_max ? s : out->num_slots_max;
    }
}

void moe_eng_attention_work(const moe_eng_t *e, double *flops, double *pairs)
{
    *flops = e->attn_flops;
    *pairs = e->attn_pairs;
}

const struct moe_layout *moe_eng_layout(const moe_eng_t *e)
{
    return &e->plan.layout;
}

/* Append one difference to diffs (dropped past MOE_ENG_MAX_DIFFS). */
static void diff(char diffs[MOE_ENG_MAX_DIFFS][160], int *num, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void diff(char diffs[MOE_ENG_MAX_DIFFS][160], int *num, const char *fmt, ...)
{
    if (*num >= MOE_ENG_MAX_DIFFS) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(diffs[*num], 160, fmt, ap);
    va_end(ap);
    (*num)++;
}

/*
 * What ran, option by option. The engine implements the layout, the dispatchers (flat,
 * hierarchical, allgather), capacity factors, forced load balancing (random router logits, as
 * Megatron), grouped or per-expert expert GEMMs, recompute, activation offload, optimizer CPU
 * offload (CPU backend), the overlaps of gradient reduction, parameter gathering and the EP
 * all-to-all, and precision recipes by emulation (--emulate-precision); everything else below runs
 * otherwise, and says how.
 */
void moe_eng_ran_options(const struct moe_eng *e,
                         struct moe_options *ran,
                         char diffs[MOE_ENG_MAX_DIFFS][160],
                         int *num)
{
    const struct moe_options *p = &e->planned;
    *ran = e->plan.options;
    *num = 0;
    if (!p->is_fp32_training) {
        diff(diffs, num,
             "fp32 training: the plan trains in BF16; the engine stores and computes in fp32");
    }
    if (p->recipe != MOE_RECIPE_BF16 && !e->opts.emulate_precision) {
        ran->recipe = MOE_RECIPE_BF16;
        diff(diffs, num,
             "recipe %s: not emulated (run with --emulate-precision); ran fp32 GEMM inputs",
             moe_recipe_name(p->recipe));
    }
    if (e->opts.router_skew != 0.0 && e->d.experts > 0) {
        ran->force_load_balancing = false;
        diff(diffs, num,
             "routing: random logits with %+.2f on EP rank 0's experts (--moe-router-skew), a "
             "measured imbalance (compare --observed-load prices it)",
             e->opts.router_skew);
    }
    /* The router's load-balancing loss (engine creation resolved the coefficient). */
    double planned = planned_aux_loss(p);
    float want = (float)planned;
    ran->aux_loss_coeff = e->opts.aux_loss_coeff == want ? planned : (double)e->opts.aux_loss_coeff;
    ran->seq_aux_loss_coeff = 0.0;
    ran->global_aux_loss_coeff = 0.0;
    if (e->opts.aux_loss_coeff != want) {
        diff(diffs, num,
             "load balancing: Switch's aux loss at %g (--aux-loss-coeff), not the plan's %g",
             (double)e->opts.aux_loss_coeff, (double)want);
    } else if (p->seq_aux_loss_coeff > 0.0 && !(p->aux_loss_coeff > 0.0)) {
        diff(diffs, num,
             "seq_aux_loss %g: ran as Switch's per-batch aux loss (the same TP x CP all-reduce "
             "of the expert counts)",
             p->seq_aux_loss_coeff);
    } else if (p->seq_aux_loss_coeff > 0.0) {
        diff(diffs, num, "seq_aux_loss %g: not implemented; only the aux loss ran",
             p->seq_aux_loss_coeff);
    }
    if (p->global_aux_loss_coeff > 0.0) {
        diff(diffs, num,
             "global_aux_loss %g: not implemented; its all-reduce over TP x DP x CP did not run",
             p->global_aux_loss_coeff);
    }
    if (e->plan.model.is_quick_geglu) {
        diff(diffs, num,
             "activation: the model's quick-GeGLU ran as SwiGLU (the same GEMMs and elementwise "
             "passes; the engine has no quick-GeGLU kernel)");
    }
    if (p->tp_comm_overlap) {
        ran->tp_comm_overlap = false;
        diff(diffs, num, "tp_comm_overlap: the engine's TP collectives block (no overlap)");
    }
    if (p->delay_wgrad_compute && !(e->fallbacks & MOE_ENG_FB_EP_OVERLAP)) {
        ran->delay_wgrad_compute = false;
        diff(diffs, num, "delay_wgrad_compute: weight gradients run with the data gradients");
    }
    if (p->fp8_param_gather) {
        ran->fp8_param_gather = false;
        diff(diffs, num, "fp8_param_gather: the engine gathers fp32 parameters");
    }
    if (p->optimizer_cpu_offload && p->optimizer_offload_fraction > 0.0 &&
        p->optimizer_offload_fraction < 1.0) {
        ran->optimizer_offload_fraction = 1.0;
        diff(diffs, num,
             "optimizer_offload_fraction %.2f: the engine offloads all of the optimizer state",
             p->optimizer_offload_fraction);
    }
    if (p->moe_hot_expert_replicas > 0) {
        ran->moe_hot_expert_replicas = 0;
        diff(diffs, num, "moe_hot_expert_replicas %d: not implemented; no expert is replicated",
             p->moe_hot_expert_replicas);
    }
    bool graphs = e->is_device && e->opts.use_cuda_graphs;
    if (p->cuda_graph_impl != MOE_CG_NONE && !graphs) {
        ran->cuda_graph_impl = MOE_CG_NONE;
        ran->cuda_graph_modules = 0;
        diff(diffs, num, "cuda graphs: %s",
             e->is_device ? "not asked for (--cuda-graphs)" : "none on the CPU backend");
    } else if (p->cuda_graph_impl != MOE_CG_NONE) {
        diff(diffs, num, "cuda graphs: dense layers' forwards only; MoE layers run eagerly");
    }
    if (e->fallbacks & (MOE_ENG_FB_HIER_ETP | MOE_ENG_FB_HIER_DEVICE)) {
        ran->dispatcher = MOE_DISPATCH_ALLTOALL;
        diff(diffs, num,
             "dispatcher %s: the hierarchical dispatcher runs %s; ran the flat all-to-all",
             moe_dispatcher_name(p->dispatcher),
             (e->fallbacks & MOE_ENG_FB_HIER_DEVICE) ? "on the CPU backend only"
                                                     : "with etp = 1 only");
    }
    if (e->fallbacks & MOE_ENG_FB_HIER_EP1) {
        ran->dispatcher = MOE_DISPATCH_ALLTOALL;
        diff(diffs, num,
             "dispatcher %s: at EP 1 nothing is exchanged; ran the flat path's local permute and "
             "expert sort",
             moe_dispatcher_name(p->dispatcher));
    }
    if (e->is_hierarchical) {
        ran->is_unfused_dispatch = true;
        diff(diffs, num,
             "dispatcher %s: permutes, per-node copies and their sums ran as separate passes "
             "(DeepEP and HybridEP fuse them into their kernels)",
             moe_dispatcher_name(p->dispatcher));
    }
    if (e->fallbacks & MOE_ENG_FB_EP_OVERLAP) {
        ran->overlap_moe_ep_comm = false;
        ran->delay_wgrad_compute = false;
        diff(diffs, num,
             "overlap_moe_ep_comm: implemented for the flat dispatcher, etp = 1 and dropless "
             "routing; ran without it");
    }
    if (e->d.experts > 0 && e->opts.has_dispatcher_override) {
        bool plan_hier =
            p->dispatcher == MOE_DISPATCH_DEEPEP || p->dispatcher == MOE_DISPATCH_HYBRIDEP;
        if (plan_hier != e->is_hierarchical) {
            ran->dispatcher = e->is_hierarchical ? MOE_DISPATCH_DEEPEP : MOE_DISPATCH_ALLTOALL;
            diff(diffs, num, "dispatcher %s: ran %s (--dispatcher)",
                 moe_dispatcher_name(p->dispatcher),
                 e->is_hierarchical ? "hierarchical (one copy per node)" : "flat all-to-all");
        }
    }
}

const char *moe_eng_backend_name(const moe_eng_t *e)
{
    if (moe_eng_dev_is_emulated(e->ctx.dev)) {
        return "cpu+mpi (emulated device)";
    }
    return e->is_device ? "cuda+nccl" : "cpu+mpi";
}

int moe_eng_num_params(const moe_eng_t *e)
{
    return e->num_params;
}

void moe_eng_param(const moe_eng_t *e, int idx, struct moe_eng_param_view *out)
{
    const struct moe_eng_param *p = &e->params[idx];
    out->name = p->name;
    out->weight = p->w;
    out->grad = p->g;
    out->numel = p->numel;
    out->layer = p->layer;
}

void moe_eng_param_read(
    const moe_eng_t *e, int idx, bool is_grad, size_t offset, float *dst, size_t n)
{
    const struct moe_eng_param *p = &e->params[idx];
    MOE_ASSERT(offset + n <= p->numel);
    const float *src = (is_grad ? p->g : p->w) + offset;
    moe_eng_copy_to_host(e->ctx.dev, dst, src, n * sizeof(float));
}

void moe_eng_param_write(
    moe_eng_t *e, int idx, bool is_grad, size_t offset, const float *src, size_t n)
{
    const struct moe_eng_param *p = &e->params[idx];
    MOE_ASSERT(offset + n <= p->numel);
    float *dst = (is_grad ? p->g : p->w) + offset;
    moe_eng_copy_from_host(e->ctx.dev, dst, src, n * sizeof(float));
    moe_eng_dev_sync(e->ctx.dev);
}

size_t moe_eng_num_allocs(const moe_eng_t *e)
{
    return e->ctx.heap.num_allocs;
}
