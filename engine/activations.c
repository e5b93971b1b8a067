/*
 * Saved-activation layout: which tensors each layer keeps for backward and where (activation slot,
 * shared recompute scratch, or offload staging + host pool), one slot per micro-batch in flight per
 * chunk (the count comes from the schedule), and the buffers category (chunk outputs for the
 * pipeline sends, gradient streams, token ids, the recompute scratch, offload staging and the
 * per-op temporaries, of which the dispatch buffers are a part; each part is reported in run.json's
 * buffers_detail_gib).
 *
 * Recompute (Megatron's --recompute-granularity/--recompute-modules): a selectively recomputed
 * module's tensors go to a scratch region shared by all layers and are recomputed in backward; full
 * recompute keeps only the input of each unit of recompute_num_layers layers (uniform) or of the
 * first recompute_num_layers layers of each chunk (block). Offload (--offload-modules,
 * --cpu-offloading-num-layers): a module's tensors are written to a staging area (two halves, so a
 * layer's output never lands on the previous layer's staged tensors), copied to a host pool after
 * the layer's forward and back before its backward. A layer's input is the previous layer's output
 * in place, so the first layer of a chunk never offloads its input.
 */
#include "engine/hier.h"
#include "engine/internal.h"

#include <string.h>

/* Arenas a layer's tensors are carved from. */
struct placement {
    struct moe_eng_arena *slot;    /* activations */
    struct moe_eng_arena *scratch; /* recompute scratch */
    struct moe_eng_arena *stage;   /* offload staging half of this layer */
    struct moe_eng_arena *mirror;  /* CUDA: host staging for host copies; NULL on the CPU */
};

/* Host copy of n ints of engine memory at x: x itself on the CPU backend (no mirror arena). */
static int *mirror_ints(struct moe_eng_arena *mirror, int *x, size_t n)
{
    return mirror != NULL ? moe_eng_arena_ints(mirror, n) : x;
}

static void *take(struct placement *pl, enum moe_eng_store s, size_t bytes)
{
    switch (s) {
    case MOE_ENG_STORE_SCRATCH:
        return moe_eng_arena_take(pl->scratch, bytes);
    case MOE_ENG_STORE_OFFLOAD:
        return moe_eng_arena_take(pl->stage, bytes);
    case MOE_ENG_STORE_SLOT:
        break;
    }
    return moe_eng_arena_take(pl->slot, bytes);
}

static float *tf(struct placement *pl, enum moe_eng_store s, size_t n)
{
    return take(pl, s, n * sizeof(float));
}

static int *ti(struct placement *pl, enum moe_eng_store s, size_t n)
{
    return take(pl, s, n * sizeof(int));
}

/* Storage of a tensor given the recompute module bit that drops it and the offload bit. */
static enum moe_eng_store store_of(const struct moe_eng_rc *rc, unsigned rc_bit, unsigned off_bit)
{
    if (rc->is_full) {
        return MOE_ENG_STORE_SCRATCH;
    }
    if (rc_bit != 0 && (rc->modules & rc_bit)) {
        return MOE_ENG_STORE_SCRATCH;
    }
    if (off_bit != 0 && (rc->offload & off_bit)) {
        return MOE_ENG_STORE_OFFLOAD;
    }
    return MOE_ENG_STORE_SLOT;
}

static void carve_attention(const struct moe_eng_dims *d,
                            const struct moe_eng_rc *rc,
                            struct placement *pl,
                            struct moe_eng_layer_act *a)
{
    size_t ms = (size_t)d->tokens_sp;
    size_t m = (size_t)d->tokens;
    size_t C = (size_t)d->hidden;
    size_t hq = (size_t)d->heads_l * (size_t)d->qk_dim;
    size_t hk = (size_t)d->kv_heads_l * (size_t)d->qk_dim;
    size_t hv = (size_t)d->kv_heads_l * (size_t)d->v_dim;
    size_t ho = (size_t)d->heads_l * (size_t)d->v_dim;
    a->rstd1 = tf(pl, store_of(rc, 0, MOE_OFF_ATTN_NORM), ms);
    a->h1 = tf(pl, store_of(rc, MOE_RC_LAYERNORM, MOE_OFF_QKV_LINEAR), ms * C);
    if (d->is_mla) {
        /* The latents (inputs of the up projections), kept unless the layer is recomputed. */
        enum moe_eng_store ls = store_of(rc, 0, MOE_OFF_QKV_LINEAR);
        if (d->q_lora > 0) {
            a->cq = tf(pl, ls, m * (size_t)d->q_lora);
            a->cq_rstd = tf(pl, ls, m);
            a->cq_n = tf(pl, ls, m * (size_t)d->q_lora);
        }
        a->ckv = tf(pl, ls, m * (size_t)d->kv_lora);
        a->ckv_rstd = tf(pl, ls, m);
        a->ckv_n = tf(pl, ls, m * (size_t)d->kv_lora);
        a->kpe = tf(pl, ls, m * (size_t)d->qk_rope);
    }
    enum moe_eng_store qkv_store =
        store_of(rc, d->is_mla ? MOE_RC_MLA_UP_PROJ : 0u, MOE_OFF_CORE_ATTN);
    a->q = tf(pl, qkv_store, m * hq);
    a->k = tf(pl, qkv_store, m * hk);
    a->v = tf(pl, qkv_store, m * hv);
    if (d->has_qk_norm) {
        a->q_raw = tf(pl, qkv_store, m * hq);
        a->k_raw = tf(pl, qkv_store, m * hk);
        a->q_rstd = tf(pl, qkv_store, m * (size_t)d->heads_l);
        a->k_rstd = tf(pl, qkv_store, m * (size_t)d->kv_heads_l);
    }
    unsigned o_off = MOE_OFF_CORE_ATTN | MOE_OFF_ATTN_PROJ;
    a->o = tf(pl, store_of(rc, MOE_RC_CORE_ATTN, o_off), m * ho);
    a->lse = tf(pl, store_of(rc, MOE_RC_CORE_ATTN, MOE_OFF_CORE_ATTN),
                (size_t)d->mbs * (size_t)d->heads_l * (size_t)d->seq_l);
    a->x2 = tf(pl, store_of(rc, 0, MOE_OFF_MLP_NORM), ms * C);
    a->rstd2 = tf(pl, store_of(rc, 0, MOE_OFF_MLP_NORM), ms);
    a->h2 = tf(pl, store_of(rc, MOE_RC_LAYERNORM, 0), ms * C);
}

static void carve_mlp(const struct moe_eng_dims *d,
                      const struct moe_eng_rc *rc,
                      unsigned rc_bit,
                      int ffn_l,
                      struct placement *pl,
                      struct moe_eng_layer_act *a)
{
    size_t m = (size_t)d->tokens;
    enum moe_eng_store s = store_of(rc, rc_bit, 0);
    a->fc1 = tf(pl, s, m * (size_t)d->glu * (size_t)ffn_l);
    a->act = tf(pl, s, m * (size_t)ffn_l);
}

static void carve_moe(const struct moe_eng_dims *d,
                      const struct moe_eng_rc *rc,
                      struct placement *pl,
                      struct moe_eng_layer_act *a)
{
    size_t ms = (size_t)d->tokens_sp;
    size_t E = (size_t)d->experts;
    size_t K = (size_t)d->topk;
    size_t C = (size_t)d->hidden;
    size_t r = (size_t)d->rows_exp;
    size_t fel = (size_t)d->expert_ffn_l;
    enum moe_eng_store s = store_of(rc, MOE_RC_MOE, 0);
    a->logits = tf(pl, s, ms * E);
    a->scores = tf(pl, s, ms * E);
    a->topk_w = tf(pl, s, ms * K);
    a->topk_idx = ti(pl, s, ms * K);
    a->slot_to_row = ti(pl, s, ms * K);
    a->row_to_slot = ti(pl, s, ms * K);
    size_t halves = d->ep_overlap ? 2 : 1; /* the EP overlap keeps counts per half */
    /* tokens_per_expert, recv_counts and gath_counts in one block (one copy to the host). */
    size_t n_recv = halves * (size_t)d->ep * (size_t)d->experts_l;
    size_t n_gath = halves * (size_t)d->etp * (size_t)d->ep * (size_t)d->experts_l;
    size_t n_counts = halves * E + n_recv + n_gath;
    int *counts = ti(pl, s, n_counts);
    a->tokens_per_expert = counts;
    a->recv_counts = counts != NULL ? counts + halves * E : NULL;
    a->gath_counts = counts != NULL ? counts + halves * E + n_recv : NULL;
    int *h_counts = mirror_ints(pl->mirror, counts, n_counts);
    a->hc_tpe = h_counts;
    a->hc_recv = h_counts != NULL ? h_counts + halves * E : NULL;
    a->hc_gath = h_counts != NULL ? h_counts + halves * E + n_recv : NULL;
    a->counts_mb = ti(pl, s, E);
    a->xe = tf(pl, store_of(rc, MOE_RC_MOE, MOE_OFF_EXPERT_FC1), r * C);
    a->e_fc1 = tf(pl, store_of(rc, MOE_RC_MOE, MOE_OFF_MOE_ACT), r * (size_t)d->glu * fel);
    a->e_act = tf(pl, store_of(rc, MOE_RC_MOE | MOE_RC_MOE_ACT, 0), r * fel);
    if (d->ag_group > 0) {
        size_t g = (size_t)d->ag_group * ms;
        a->y_rows = tf(pl, s, r * C); /* expert outputs (the combine is on all G tokens) */
        a->ag_w = tf(pl, s, g * K);
        a->ag_s2r = ti(pl, s, g * K);
        a->ag_counts = ti(pl, s, (size_t)d->experts_l);
        return;
    }
    if (d->hier_nodes == 0) {
        a->y_rows = tf(pl, s, ms * K * C);
        return;
    }
    size_t q = (size_t)d->hier_copies;
    a->y_rows = tf(pl, s, (size_t)d->hier_rows * C);
    a->h_sent = ti(pl, s, (size_t)d->hier_nodes);
    a->h_recv = ti(pl, s, (size_t)d->hier_nodes);
    a->h_w = tf(pl, s, q * K);
    a->h_s2r = ti(pl, s, q * K);
    a->h_r2s = ti(pl, s, (size_t)d->hier_rows);
    a->h_cnt = ti(pl, s, (size_t)d->hier_per_node * (size_t)d->experts_l);
}

static void carve_layer(const struct moe_eng *e,
                        const struct moe_eng_layer_w *w,
                        const struct moe_eng_rc *rc,
                        bool is_chunk_first,
                        struct placement *pl,
                        struct moe_eng_layer_act *a)
{
    const struct moe_eng_dims *d = &e->d;
    memset(a, 0, sizeof(*a));
    size_t stage_before = moe_eng_arena_mark(pl->stage);
    /* The input: the chunk input for the first layer (set by the caller), else the previous layer's
     * output, kept unless the unit is recomputed from an earlier input. */
    if (!is_chunk_first) {
        enum moe_eng_store xs = MOE_ENG_STORE_SLOT;
        if (rc->is_full && !rc->is_unit_start) {
            xs = MOE_ENG_STORE_SCRATCH;
        } else if (!rc->is_full && (rc->offload & MOE_OFF_ATTN_NORM)) {
            xs = MOE_ENG_STORE_OFFLOAD;
        }
        a->x = tf(pl, xs, (size_t)d->tokens_sp * (size_t)d->hidden);
    }
    carve_attention(d, rc, pl, a);
    if (!w->is_moe) {
        carve_mlp(d, rc, MOE_RC_MLP, d->ffn_l, pl, a);
    } else {
        carve_moe(d, rc, pl, a);
        if (d->shared_ffn_l > 0) {
            unsigned bit = MOE_RC_SHARED_EXPERTS | MOE_RC_MOE;
            carve_mlp(d, rc, bit, d->shared_ffn_l, pl, a);
        }
    }
    a->offload_bytes = moe_eng_arena_mark(pl->stage) - stage_before;
    a->stage = pl->stage->base != NULL ? pl->stage->base + stage_before : NULL;
}

/* The loss chunk's MTP tensors: the final norm's output, and per depth its transformer layer (as a
 * decoder layer whose input is the projection's output) and the tensors around it. */
static void carve_mtp(const struct moe_eng *e,
                      const struct moe_eng_chunk *ch,
                      struct moe_eng_slot *sl,
                      struct placement *pl,
                      struct moe_eng_arena stage[2],
                      struct moe_eng_arena *host)
{
    const struct moe_eng_dims *d = &e->d;
    size_t ms = (size_t)d->tokens_sp;
    size_t msc = ms * (size_t)d->hidden;
    sl->hf = moe_eng_arena_floats(pl->slot, msc);
    sl->rstd_f = moe_eng_arena_floats(pl->slot, ms);
    for (int j = 0; j < ch->num_mtp; j++) {
        struct moe_eng_mtp_act *t = &sl->mtp[j];
        memset(t, 0, sizeof(*t));
        int i = ch->num_layers + j;
        moe_eng_arena_reset(pl->scratch);
        moe_eng_arena_reset(&stage[i % 2]);
        pl->stage = &stage[i % 2];
        carve_layer(e, &e->layers[d->num_layers + j], &ch->mtp_rc, false, pl, &t->layer);
        t->layer.host =
            t->layer.offload_bytes > 0 ? moe_eng_arena_take(host, t->layer.offload_bytes) : NULL;
        t->emb = moe_eng_arena_floats(pl->slot, msc);
        t->rstd_e = moe_eng_arena_floats(pl->slot, ms);
        t->rstd_h = moe_eng_arena_floats(pl->slot, ms);
        t->cat = moe_eng_arena_floats(pl->slot, 2 * msc);
        t->out = moe_eng_arena_floats(pl->slot, msc);
        t->rstd_o = moe_eng_arena_floats(pl->slot, ms);
        t->h = moe_eng_arena_floats(pl->slot, msc);
        t->dh = moe_eng_arena_floats(pl->slot, msc);
    }
}

/* Recompute and offload policy per layer of a chunk. */
static void chunk_policy(const struct moe_eng *e, struct moe_eng_chunk *ch)
{
    const struct moe_options *o = &e->plan.options;
    memset(&ch->mtp_rc, 0, sizeof(ch->mtp_rc));
    if (o->recompute == MOE_RECOMPUTE_SELECTIVE) {
        ch->mtp_rc.modules = o->recompute_modules;
    }
    /* MTP layers keep their tensors on the device (no offload): they run inside the head. */
    int n = o->recompute_num_layers > 0 ? o->recompute_num_layers : 1;
    for (int i = 0; i < ch->num_layers; i++) {
        struct moe_eng_rc *rc = &ch->rc[i];
        memset(rc, 0, sizeof(*rc));
        if (o->recompute == MOE_RECOMPUTE_FULL) {
            if (o->recompute_method == MOE_RECOMPUTE_UNIFORM) {
                rc->is_full = true;
                rc->is_unit_start = i % n == 0;
                int left = ch->num_layers - i;
                rc->unit_len = rc->is_unit_start ? (n < left ? n : left) : 0;
            } else if (i < n) {
                rc->is_full = true;
                rc->is_unit_start = true;
                rc->unit_len = 1;
            }
        } else if (o->recompute == MOE_RECOMPUTE_SELECTIVE) {
            rc->modules = o->recompute_modules;
        }
        if (!rc->is_full) {
            if (o->fine_grained_offload) {
                rc->offload = o->offload_modules;
            }
            if (o->cpu_offloading_num_layers > i) {
                rc->offload = MOE_OFF_ALL;
            }
        }
    }
}

/* The arenas a slot is carved from (moe_eng_acts_carve). */
struct slot_arenas {
    struct moe_eng_arena *acts;    /* saved activations */
    struct moe_eng_arena *bufs;    /* the slot's pipeline send buffers */
    struct moe_eng_arena *host;    /* offloaded activations */
    struct moe_eng_arena *mirror;  /* CUDA host copies; NULL on the CPU */
    struct moe_eng_arena *scratch; /* recompute scratch, shared by every slot */
    struct moe_eng_arena *stage;   /* [2] offload staging, shared by every slot */
};

/* Activation slot s of chunk ch: its input, output and gradient buffers and every layer's saved
 * tensors. */
static void
carve_slot(struct moe_eng *e, struct moe_eng_chunk *ch, int s, const struct slot_arenas *ar)
{
    size_t ms_c = (size_t)e->d.tokens_sp * (size_t)e->d.hidden;
    struct moe_eng_slot *sl = &ch->slots[s];
    struct moe_eng_layer_act *acts_arr = sl->acts; /* allocated at create */
    struct moe_eng_mtp_act *mtp_arr = sl->mtp;
    memset(sl, 0, sizeof(*sl));
    sl->acts = acts_arr;
    sl->mtp = mtp_arr;
    sl->x0 = moe_eng_arena_floats(ar->acts, ms_c);
    sl->dout = ch->has_loss ? moe_eng_arena_floats(ar->acts, ms_c) : NULL;
    sl->out = moe_eng_arena_floats(ar->bufs, ms_c);
    sl->dx_send = ch->c > 0 ? moe_eng_arena_floats(ar->bufs, ms_c) : NULL;
    for (int i = 0; i < ch->num_layers; i++) {
        const struct moe_eng_rc *rc = &ch->rc[i];
        if (!rc->is_full || rc->is_unit_start) {
            moe_eng_arena_reset(ar->scratch);
        }
        moe_eng_arena_reset(&ar->stage[i % 2]);
        struct placement pl = {.slot = ar->acts,
                               .scratch = ar->scratch,
                               .stage = &ar->stage[i % 2],
                               .mirror = ar->mirror};
        struct moe_eng_layer_act *a = &sl->acts[i];
        carve_layer(e, &e->layers[ch->first_layer + i], rc, i == 0, &pl, a);
        if (i == 0) {
            a->x = sl->x0;
        }
        a->host = a->offload_bytes > 0 ? moe_eng_arena_take(ar->host, a->offload_bytes) : NULL;
    }
    if (ch->num_mtp > 0) {
        struct placement pl = {
            .slot = ar->acts, .scratch = ar->scratch, .stage = &ar->stage[0], .mirror = ar->mirror};
        carve_mtp(e, ch, sl, &pl, ar->stage, ar->host);
    }
}

void moe_eng_acts_carve(struct moe_eng *e)
{
    const struct moe_eng_dims *d = &e->d;
    struct moe_eng_arena *acts = &e->mem[MOE_ENG_MEM_ACTIVATIONS].arena;
    struct moe_eng_arena *bufs = &e->mem[MOE_ENG_MEM_BUFFERS].arena;
    struct moe_eng_arena *host = &e->mem[MOE_ENG_MEM_HOST].arena;
    /* CUDA: host copies of device data (NULL on the CPU, where the data is host memory). */
    struct moe_eng_arena *mirror = e->is_device ? &e->mem[MOE_ENG_MEM_STAGING].arena : NULL;
    bool sizing = acts->is_sizing;
    struct moe_eng_arena scratch;
    struct moe_eng_arena stage[2];
    size_t half = e->staging_bytes / 2;
    if (sizing) {
        moe_eng_arena_init_sizing(&scratch);
        moe_eng_arena_init_sizing(&stage[0]);
        moe_eng_arena_init_sizing(&stage[1]);
    } else {
        moe_eng_arena_init(&scratch, e->rc_scratch, e->rc_scratch_bytes);
        moe_eng_arena_init(&stage[0], e->staging, half);
        moe_eng_arena_init(&stage[1], (char *)e->staging + half, half);
    }
    size_t ms_c = (size_t)d->tokens_sp * (size_t)d->hidden;
    size_t bufs_start = moe_eng_arena_mark(bufs);
    struct slot_arenas ar = {acts, bufs, host, mirror, &scratch, stage};
    for (int v = 0; v < e->num_chunks_local; v++) {
        chunk_policy(e, &e->chunks[v]);
    }
    if (!e->share_slots) {
        for (int v = 0; v < e->num_chunks_local; v++) {
            struct moe_eng_chunk *ch = &e->chunks[v];
            for (int s = 0; s < ch->num_slots; s++) {
                size_t before = moe_eng_arena_mark(acts);
                size_t before_bufs = moe_eng_arena_mark(bufs);
                carve_slot(e, ch, s, &ar);
                ch->slot_act_bytes = moe_eng_arena_mark(acts) - before;
                ch->slot_pipe_bytes = moe_eng_arena_mark(bufs) - before_bufs;
            }
        }
    } else {
        /* Slot g of every chunk over the same activation (and offload) memory: the pool's
         * assignment never gives one slot to two live chunk-micro-batches. The send buffers stay
         * each chunk's own (a gradient's send may still be in flight when its slot is freed). */
        for (int g = 0; g < e->num_shared_slots; g++) {
            size_t a0 = moe_eng_arena_mark(acts);
            size_t h0 = moe_eng_arena_mark(host);
            size_t a_end = a0;
            size_t h_end = h0;
            for (int v = 0; v < e->num_chunks_local; v++) {
                moe_eng_arena_release(acts, a0);
                moe_eng_arena_release(host, h0);
                carve_slot(e, &e->chunks[v], g, &ar);
                size_t a = moe_eng_arena_mark(acts);
                size_t h = moe_eng_arena_mark(host);
                a_end = a > a_end ? a : a_end;
                h_end = h > h_end ? h : h_end;
            }
            moe_eng_arena_release(acts, a0);
            moe_eng_arena_release(host, h0);
            (void)moe_eng_arena_take(acts, a_end - a0);
            (void)moe_eng_arena_take(host, h_end - h0);
        }
    }
    if (sizing) {
        e->rc_scratch_bytes = scratch.peak;
        size_t st = stage[0].peak > stage[1].peak ? stage[0].peak : stage[1].peak;
        e->staging_bytes = 2 * st;
    }
    /* Gradient stream, token ids, positions, K/V reorder tables, RoPE table, expert statistics. */
    e->grad_stream = moe_eng_arena_floats(bufs, ms_c);
    e->grad_tmp = moe_eng_arena_floats(bufs, ms_c);
    size_t bufs_pipeline_end = moe_eng_arena_mark(bufs);
    size_t mt = (size_t)e->plan.layout.num_microbatches * (size_t)d->tokens;
    e->ids = moe_eng_arena_ints(bufs, mt);
    e->targets = moe_eng_arena_ints(bufs, mt);
    e->h_ids = mirror_ints(mirror, e->ids, mt);
    e->h_targets = mirror_ints(mirror, e->targets, mt);
    int num_mtp = 0;
    for (int v = 0; v < e->num_chunks_local; v++) {
        num_mtp += e->chunks[v].num_mtp;
    }
    e->mtp_ids = e->mtp_targets = e->h_mtp_ids = e->h_mtp_targets = NULL;
    if (num_mtp > 0) {
        size_t nm = (size_t)num_mtp * mt;
        e->mtp_ids = moe_eng_arena_ints(bufs, nm);
        e->mtp_targets = moe_eng_arena_ints(bufs, nm);
        e->h_mtp_ids = mirror_ints(mirror, e->mtp_ids, nm);
        e->h_mtp_targets = mirror_ints(mirror, e->mtp_targets, nm);
    }
    size_t ncp = 2 * (size_t)d->cp * (size_t)d->mbs; /* K/V chunks of the load-balanced split */
    /* positions, cp_chunk_rows and cp_chunk_order: one block, uploaded once below. */
    size_t n_tab = (size_t)d->tokens + 2 * ncp;
    int *tab = moe_eng_arena_ints(bufs, n_tab);
    int *h_tab = mirror_ints(mirror, tab, n_tab);
    e->positions = tab;
    e->cp_chunk_rows = tab != NULL ? tab + d->tokens : NULL;
    e->cp_chunk_order = tab != NULL ? tab + (size_t)d->tokens + ncp : NULL;
    /* RoPE's angle table [M, dr/2, 2] for the rotary dims of this model, made once below. */
    int rope_dim = d->is_mla ? d->qk_rope : d->head_dim;
    e->rope_cos_sin = moe_eng_arena_floats(bufs, (size_t)d->tokens * (size_t)rope_dim);
    /* Host-only statistics: with the engine's buffers on the CPU, in host staging on CUDA. */
    e->step_counts = moe_eng_arena_take(
        mirror != NULL ? mirror : bufs,
        (size_t)d->num_layers_all * (size_t)(d->experts > 0 ? d->experts : 1) * sizeof(long));
    /* Scalar slots of a step and the buckets' sums of squares, with their host copies. */
    e->scal = moe_eng_arena_floats(bufs, (size_t)e->cap_scal);
    e->h_scal = mirror != NULL ? moe_eng_arena_floats(mirror, (size_t)e->cap_scal) : e->scal;
    size_t nb = (size_t)(e->num_buckets > 0 ? e->num_buckets : 1);
    e->bucket_ss = moe_eng_arena_floats(bufs, nb);
    e->h_bucket_ss = mirror != NULL ? moe_eng_arena_floats(mirror, nb) : e->bucket_ss;
    /* Parts of the buffers category carved here (the rest is taken in engine.c). */
    e->bufs_pipeline_bytes = bufs_pipeline_end - bufs_start;
    e->bufs_other_bytes = moe_eng_arena_mark(bufs) - bufs_pipeline_end;
    if (!sizing) {
        int *pos = h_tab;
        int *rows = h_tab + d->tokens;
        int *order = h_tab + (size_t)d->tokens + ncp;
        int c = d->cp_chunk_len;
        for (int b = 0; b < d->mbs; b++) {
            for (int t = 0; t < d->seq_l; t++) {
                pos[b * d->seq_l + t] = d->cp_chunk_pos[t / c] + t % c;
            }
        }
        /* All-gathered K/V arrive as [CP rank q][B][2 chunks of c] (rank q's chunks q and
         * 2 CP - 1 - q); attention wants [B][T] in position order: position chunk j of sequence b
         * is gathered chunk (q B + b) 2 + h with q = j, h = 0 for j < CP, else q = 2 CP - 1 - j,
         * h = 1. */
        for (size_t i = 0; i < ncp; i++) {
            rows[i] = c;
        }
        int nc = 2 * d->cp;
        for (int b = 0; b < d->mbs; b++) {
            for (int j = 0; j < nc; j++) {
                int q = j < d->cp ? j : nc - 1 - j;
                int h = j < d->cp ? 0 : 1;
                order[b * nc + j] = (q * d->mbs + b) * 2 + h;
            }
        }
        moe_eng_copy_from_host(e->ctx.dev, tab, h_tab, n_tab * sizeof(int));
        e->k->rope_table(e->rope_cos_sin, e->positions, d->tokens, rope_dim, MOE_ENG_ROPE_BASE,
                         e->kc);
    }
}

/* ---- Per-op temporaries ---------------------------------------------------------------------- */
/*
 * The temporaries each forward/backward function carves from the temp arena, replayed in the same
 * order and nesting on a sizing arena; the arena's peak is the size of the temp region. An overflow
 * at run time (a carve missing here) aborts with both sizes.
 *
 * The replay also tells which part of that peak is dispatch buffers (run.json
 * buffers_detail_gib.dispatch): the carves sized by the expert-row bounds (rows_send, rows_recv,
 * rows_exp: the all-to-all send and receive rows, the ETP-gathered expert rows and their
 * intermediates, and everything the hierarchical dispatcher carves) that are live when the arena
 * first reaches its peak. The rest of the temp region is other per-op temporaries.
 */

enum { TSIM_DEPTH = 64 }; /* dispatch carves live at once (a MoE backward holds 6) */

struct tsim {
    struct moe_eng_arena a;
    size_t disp_end[TSIM_DEPTH];   /* arena offset where each live dispatch carve ends */
    size_t disp_bytes[TSIM_DEPTH]; /* its bytes (aligned) */
    int num_disp;
    size_t live_disp;        /* bytes of the live dispatch carves */
    size_t dispatch_at_peak; /* live_disp when the arena first reached its current peak */
};

static void carve(struct tsim *s, size_t bytes, bool is_dispatch)
{
    size_t start = s->a.used;
    size_t peak = s->a.peak;
    (void)moe_eng_arena_take(&s->a, bytes);
    if (is_dispatch) {
        MOE_ASSERT(s->num_disp < TSIM_DEPTH);
        s->disp_end[s->num_disp] = s->a.used;
        s->disp_bytes[s->num_disp] = s->a.used - start;
        s->live_disp += s->a.used - start;
        s->num_disp++;
    }
    if (s->a.used > peak) {
        s->dispatch_at_peak = s->live_disp;
    }
}

/* Release to a mark: the dispatch carves above it are gone too. */
static void rel_(struct tsim *s, size_t mark)
{
    moe_eng_arena_release(&s->a, mark);
    while (s->num_disp > 0 && s->disp_end[s->num_disp - 1] > mark) {
        s->num_disp--;
        s->live_disp -= s->disp_bytes[s->num_disp];
    }
}

static void tf_(struct tsim *s, size_t n)
{
    carve(s, n * sizeof(float), false);
}

static void ti_(struct tsim *s, size_t n)
{
    carve(s, n * sizeof(int), false);
}

/* A dispatch buffer of n floats (sized by an expert-row bound). */
static void td_(struct tsim *s, size_t n)
{
    carve(s, n * sizeof(float), true);
}

/* Largest qdq carve a GEMM helper stacks on top of its caller (precision emulation only). */
static void qdq_reserve(const struct moe_eng *e, struct tsim *s)
{
    if (!e->opts.emulate_precision) {
        return;
    }
    const struct moe_eng_dims *d = &e->d;
    size_t rows = (size_t)(d->tokens > d->rows_exp ? d->tokens : d->rows_exp);
    size_t g = (size_t)d->glu;
    size_t dims[] = {(size_t)d->hidden,
                     (size_t)d->qkv_cols,
                     g * (size_t)d->ffn_l,
                     g * (size_t)d->shared_ffn_l,
                     g * (size_t)d->expert_ffn_l,
                     (size_t)d->heads_l * (size_t)d->qk_dim,
                     (size_t)d->heads_l * (size_t)(d->qk_nope + d->v_dim),
                     (size_t)(d->kv_lora + d->qk_rope),
                     (size_t)d->q_lora};
    size_t dim = 0;
    for (size_t i = 0; i < MOE_ARRAY_LEN(dims); i++) {
        dim = dims[i] > dim ? dims[i] : dim;
    }
    size_t wmax = 0;
    for (int p = 0; p < e->num_params; p++) {
        wmax = e->params[p].numel > wmax ? e->params[p].numel : wmax;
    }
    ti_(s, (size_t)(d->experts_l > 0 ? d->experts_l : 1));
    tf_(s, rows * dim);
    tf_(s, rows * dim);
    tf_(s, wmax);
}

/* ep_plan_from (engine/moe_block.c): host arrays (in the temp arena on the CPU backend), and on
 * CUDA the kernels' block uploaded to the temp arena. */
static void sim_ep_plan(const struct moe_eng *e, struct tsim *s)
{
    const struct moe_eng_dims *d = &e->d;
    size_t nch = (size_t)d->etp * (size_t)d->ep * (size_t)d->experts_l;
    if (!e->is_device) {
        for (int i = 0; i < 4; i++) {
            ti_(s, (size_t)d->ep);
        }
        ti_(s, (size_t)d->etp);
        ti_(s, (size_t)d->etp);
    }
    ti_(s, 2 * nch + (size_t)d->experts_l);
}

/* Head widths on this rank: q, k, v, o rows. */
static void
head_widths(const struct moe_eng_dims *d, size_t *hq, size_t *hk, size_t *hv, size_t *ho)
{
    *hq = (size_t)d->heads_l * (size_t)d->qk_dim;
    *hk = (size_t)d->kv_heads_l * (size_t)d->qk_dim;
    *hv = (size_t)d->kv_heads_l * (size_t)d->v_dim;
    *ho = (size_t)d->heads_l * (size_t)d->v_dim;
}

/* moe_eng_mla_heads_fwd (engine/mla.c). */
static void sim_mla_heads(const struct moe_eng *e, struct tsim *s)
{
    const struct moe_eng_dims *d = &e->d;
    size_t M = (size_t)d->tokens, C = (size_t)d->hidden;
    size_t mark = moe_eng_arena_mark(&s->a);
    if (d->q_lora == 0 && d->sp) {
        tf_(s, M * C);
    }
    tf_(s, M * (size_t)d->heads_l * (size_t)(d->qk_nope + d->v_dim));
    qdq_reserve(e, s);
    tf_(s, M * (size_t)d->qk_rope);
    rel_(s, mark);
}

static void sim_mla_fwd(const struct moe_eng *e, struct tsim *s)
{
    const struct moe_eng_dims *d = &e->d;
    size_t M = (size_t)d->tokens, Ms = (size_t)d->tokens_sp;
    size_t kvd = (size_t)(d->kv_lora + d->qk_rope);
    size_t mark = moe_eng_arena_mark(&s->a);
    if (d->q_lora > 0 && d->sp) {
        tf_(s, Ms * (size_t)d->q_lora);
    }
    tf_(s, Ms * kvd);
    if (d->sp) {
        tf_(s, M * kvd);
    }
    qdq_reserve(e, s);
    rel_(s, mark);
    sim_mla_heads(e, s);
}

static void sim_attn_fwd(const struct moe_eng *e, struct tsim *s)
{
    const struct moe_eng_dims *d = &e->d;
    size_t M = (size_t)d->tokens, C = (size_t)d->hidden, cp = (size_t)d->cp;
    size_t hq, hk, hv, ho;
    head_widths(d, &hq, &hk, &hv, &ho);
    if (d->is_mla) {
        sim_mla_fwd(e, s);
    } else {
        if (d->sp) {
            tf_(s, M * C);
        }
        size_t mark = moe_eng_arena_mark(&s->a);
        tf_(s, M * (size_t)d->qkv_cols);
        qdq_reserve(e, s);
        rel_(s, mark);
    }
    if (d->cp > 1) {
        tf_(s, M * cp * (hk > hv ? hk : hv));
        tf_(s, M * cp * hk);
        tf_(s, M * cp * hv);
    }
    carve(s, moe_eng_attn_ws_bytes(e), false);
    if (d->sp) {
        tf_(s, M * C);
    }
    qdq_reserve(e, s);
}

static void sim_qkv_bwd(const struct moe_eng *e, struct tsim *s)
{
    const struct moe_eng_dims *d = &e->d;
    size_t M = (size_t)d->tokens, Ms = (size_t)d->tokens_sp, C = (size_t)d->hidden;
    size_t hq, hk, hv, ho;
    head_widths(d, &hq, &hk, &hv, &ho);
    size_t mark = moe_eng_arena_mark(&s->a);
    if (d->is_mla) {
        size_t kvd = (size_t)(d->kv_lora + d->qk_rope);
        tf_(s, M * (size_t)d->heads_l * (size_t)(d->qk_nope + d->v_dim));
        tf_(s, M * (size_t)d->qk_rope);
        tf_(s, M * (size_t)d->kv_lora);
        tf_(s, M * (size_t)d->kv_lora);
        tf_(s, M * kvd);
        if (d->q_lora > 0) {
            tf_(s, M * (size_t)d->q_lora);
            tf_(s, M * (size_t)d->q_lora);
            if (d->sp) {
                tf_(s, Ms * (size_t)d->q_lora);
            }
        } else {
            if (d->sp) {
                tf_(s, M * C);
            }
            tf_(s, M * C);
        }
        if (d->sp) {
            tf_(s, Ms * kvd);
        }
    } else {
        tf_(s, M * (size_t)d->qkv_cols);
        if (d->has_qk_norm) {
            tf_(s, M * hq);
            tf_(s, M * hk);
        }
        if (d->sp) {
            tf_(s, M * C);
        }
        tf_(s, M * C);
    }
    qdq_reserve(e, s);
    rel_(s, mark);
}

static void sim_attn_bwd(const struct moe_eng *e, struct tsim *s)
{
    const struct moe_eng_dims *d = &e->d;
    size_t M = (size_t)d->tokens, Ms = (size_t)d->tokens_sp, C = (size_t)d->hidden;
    size_t cp = (size_t)d->cp;
    size_t hq, hk, hv, ho;
    head_widths(d, &hq, &hk, &hv, &ho);
    size_t ws = moe_eng_attn_ws_bytes(e);
    if (d->is_mla) {
        sim_mla_heads(e, s); /* mla_up_proj recompute (released) */
    }
    if (d->cp > 1) {
        tf_(s, M * cp * (hk > hv ? hk : hv));
        tf_(s, M * cp * hk);
        tf_(s, M * cp * hv);
    }
    carve(s, ws, false); /* core-attention recompute */
    if (d->sp) {
        tf_(s, M * C);
    }
    tf_(s, M * ho);
    tf_(s, M * hq);
    tf_(s, M * cp * hk);
    tf_(s, M * cp * hv);
    carve(s, ws, false);
    if (d->cp > 1) {
        tf_(s, M * hk);
        tf_(s, M * hv);
        size_t mark = moe_eng_arena_mark(&s->a);
        tf_(s, M * cp * (hk > hv ? hk : hv)); /* reduce_rows' transient (released each call) */
        rel_(s, mark);
    }
    tf_(s, Ms * C);
    sim_qkv_bwd(e, s);
    qdq_reserve(e, s);
}

static void sim_mlp_fwd(const struct moe_eng *e, struct tsim *s)
{
    const struct moe_eng_dims *d = &e->d;
    size_t M = (size_t)d->tokens, C = (size_t)d->hidden;
    if (d->sp) {
        tf_(s, M * C);
        tf_(s, M * C);
    }
    qdq_reserve(e, s);
}

static void sim_mlp_bwd(const struct moe_eng *e, struct tsim *s, int ffn_l)
{
    const struct moe_eng_dims *d = &e->d;
    size_t M = (size_t)d->tokens, C = (size_t)d->hidden;
    if (d->sp) {
        tf_(s, M * C);
        tf_(s, M * C);
    }
    tf_(s, M * (size_t)ffn_l);
    tf_(s, M * (size_t)d->glu * (size_t)ffn_l);
    tf_(s, M * C);
    if (d->sp) {
        tf_(s, (size_t)d->tokens_sp * C);
    }
    qdq_reserve(e, s);
}

/* The hierarchical dispatcher's buffers, carved and released inside one of its calls. */
static void sim_hier(const struct moe_eng *e, struct tsim *s)
{
    size_t mark = moe_eng_arena_mark(&s->a);
    size_t peak = s->a.peak;
    moe_eng_hier_temp_sim(e, &s->a);
    if (s->a.peak > peak) { /* everything it carved is the dispatcher's */
        s->dispatch_at_peak = s->live_disp + (s->a.peak - mark);
    }
    rel_(s, mark);
}

/* moe_fwd_overlap / moe_bwd_overlap (engine/moe_block.c): both halves' plans stay live. */
static void sim_moe_overlap(const struct moe_eng *e, struct tsim *s, bool bwd)
{
    const struct moe_eng_dims *d = &e->d;
    size_t C = (size_t)d->hidden, fel = (size_t)d->expert_ffn_l;
    if (!bwd) {
        size_t mark = moe_eng_arena_mark(&s->a);
        ti_(s, (size_t)d->experts);
        ti_(s, (size_t)d->ep);
        rel_(s, mark);
        td_(s, (size_t)d->rows_send * C);
        td_(s, (size_t)d->rows_recv * C);
        td_(s, (size_t)d->rows_exp * C);
        ti_(s, (size_t)d->ep);
        sim_ep_plan(e, s);
        sim_ep_plan(e, s);
    } else {
        tf_(s, (size_t)d->tokens_sp * (size_t)d->topk);
        sim_ep_plan(e, s);
        sim_ep_plan(e, s);
        td_(s, (size_t)d->rows_send * C);
        td_(s, (size_t)d->rows_recv * C);
        td_(s, (size_t)d->rows_exp * C);
        td_(s, (size_t)d->rows_exp * fel);
        td_(s, (size_t)d->rows_exp * (size_t)d->glu * fel);
    }
    qdq_reserve(e, s);
}

/* engine/allgather.c, forward and backward. */
static void sim_moe_allgather(const struct moe_eng *e, struct tsim *s, bool bwd)
{
    const struct moe_eng_dims *d = &e->d;
    size_t C = (size_t)d->hidden, K = (size_t)d->topk, fel = (size_t)d->expert_ffn_l;
    size_t G = (size_t)d->ag_group * (size_t)d->tokens_sp;
    size_t R = (size_t)d->rows_exp;
    if (!bwd) {
        td_(s, G * C);
        ti_(s, G * K);
        ti_(s, (size_t)d->experts);
        ti_(s, (size_t)d->ep);
        ti_(s, G * K);
        ti_(s, G * K);
        td_(s, G * C);
    } else {
        td_(s, G * C);
        td_(s, R * C);
        tf_(s, G * K);
        td_(s, R * fel);
        td_(s, R * (size_t)d->glu * fel);
        tf_(s, (size_t)d->tokens_sp * C);
    }
    qdq_reserve(e, s);
}

static void sim_moe_fwd(const struct moe_eng *e, struct tsim *s)
{
    const struct moe_eng_dims *d = &e->d;
    size_t C = (size_t)d->hidden;
    if (e->plan.options.force_load_balancing || e->opts.router_skew != 0.0) {
        /* moe_block.c random_logits, released at once */
        size_t m0 = moe_eng_arena_mark(&s->a);
        tf_(s, (size_t)d->tokens_sp * (size_t)d->experts);
        rel_(s, m0);
    }
    if (d->ag_group > 0) {
        size_t mark = moe_eng_arena_mark(&s->a);
        ti_(s, (size_t)d->experts);
        ti_(s, (size_t)d->ep);
        rel_(s, mark);
        sim_moe_allgather(e, s, false);
        return;
    }
    if (e->is_ep_overlap) {
        sim_moe_overlap(e, s, false);
        return;
    }
    size_t mark = moe_eng_arena_mark(&s->a);
    ti_(s, (size_t)d->experts);
    ti_(s, (size_t)d->ep);
    rel_(s, mark);
    if (e->is_hierarchical) {
        sim_hier(e, s);
    } else {
        td_(s, (size_t)d->rows_send * C);
        td_(s, (size_t)d->rows_recv * C);
        td_(s, (size_t)d->rows_exp * C);
    }
    sim_ep_plan(e, s);
    td_(s, (size_t)d->rows_exp * C);
    qdq_reserve(e, s);
    if (e->is_hierarchical) {
        sim_hier(e, s);
    }
}

static void sim_moe_bwd(const struct moe_eng *e, struct tsim *s)
{
    const struct moe_eng_dims *d = &e->d;
    size_t C = (size_t)d->hidden, fel = (size_t)d->expert_ffn_l;
    size_t ms = (size_t)d->tokens_sp;
    if (d->ag_group > 0) {
        tf_(s, ms * (size_t)d->topk);
        size_t mark = moe_eng_arena_mark(&s->a);
        sim_moe_allgather(e, s, true);
        rel_(s, mark);
        tf_(s, ms * (size_t)d->experts);
        tf_(s, ms * (size_t)d->experts);
        return;
    }
    if (e->is_ep_overlap) {
        size_t mark = moe_eng_arena_mark(&s->a);
        sim_moe_overlap(e, s, true);
        rel_(s, mark);
        tf_(s, ms * (size_t)d->topk);
        tf_(s, ms * (size_t)d->experts);
        tf_(s, ms * (size_t)d->experts);
        return;
    }
    tf_(s, ms * (size_t)d->topk);
    size_t mark = moe_eng_arena_mark(&s->a);
    sim_ep_plan(e, s);
    td_(s, (size_t)d->rows_exp * C);
    if (e->is_hierarchical) {
        sim_hier(e, s);
        td_(s, (size_t)d->rows_exp * fel);
        td_(s, (size_t)d->rows_exp * (size_t)d->glu * fel);
        qdq_reserve(e, s);
        sim_hier(e, s);
        rel_(s, mark);
    } else {
        /* combine backward, expert GEMMs, dispatch backward: each releases what it carved */
        size_t mark_x = moe_eng_arena_mark(&s->a);
        td_(s, (size_t)d->rows_recv * C);
        td_(s, (size_t)d->rows_exp * C);
        td_(s, (size_t)d->rows_send * C);
        rel_(s, mark_x);
        td_(s, (size_t)d->rows_exp * fel);
        td_(s, (size_t)d->rows_exp * (size_t)d->glu * fel);
        qdq_reserve(e, s);
        rel_(s, mark_x);
        td_(s, (size_t)d->rows_recv * C);
        td_(s, (size_t)d->rows_exp * C);
        td_(s, (size_t)d->rows_send * C);
        rel_(s, mark);
    }
    tf_(s, ms * (size_t)d->experts);
    tf_(s, ms * (size_t)d->experts);
}

/* moe_eng_logits_fwd_bwd (engine/head.c). */
static void sim_logits(const struct moe_eng *e, struct tsim *s)
{
    const struct moe_eng_dims *d = &e->d;
    size_t M = (size_t)d->tokens, C = (size_t)d->hidden;
    size_t vl = (size_t)d->vocab_l;
    size_t mark = moe_eng_arena_mark(&s->a);
    if (d->sp) {
        tf_(s, M * C);
    }
    tf_(s, M * vl);
    tf_(s, M);
    tf_(s, 2 * M);
    tf_(s, M);
    tf_(s, M * vl);
    tf_(s, M * C);
    rel_(s, mark);
}

static void sim_head(const struct moe_eng *e, struct tsim *s)
{
    const struct moe_eng_dims *d = &e->d;
    size_t C = (size_t)d->hidden, ms = (size_t)d->tokens_sp;
    tf_(s, ms * C);
    tf_(s, ms);
    tf_(s, ms * C);
    sim_logits(e, s);
}

/* engine/mtp.c: the heaviest of its steps (a depth's forward with its head; its backward). */
static void sim_mtp(const struct moe_eng *e, struct tsim *s)
{
    const struct moe_eng_dims *d = &e->d;
    size_t M = (size_t)d->tokens, C = (size_t)d->hidden, ms = (size_t)d->tokens_sp;
    size_t m0 = moe_eng_arena_mark(&s->a);
    tf_(s, M * C); /* embedding lookup (engine/head.c) */
    rel_(s, m0);
    tf_(s, ms * C); /* enorm and hnorm outputs */
    tf_(s, ms * C);
    rel_(s, m0);
    /* eh_proj forward: gathered input, local output, gathered blocks, full rows */
    if (d->sp) {
        tf_(s, M * 2 * C);
    }
    tf_(s, M * C / (size_t)d->tp);
    tf_(s, M * C);
    tf_(s, M * C);
    qdq_reserve(e, s);
    rel_(s, m0);
    sim_logits(e, s);
    rel_(s, m0);
    /* backward: gradient of h, eh_proj backward, norm gradients */
    tf_(s, ms * C);
    tf_(s, ms * C);
    if (d->sp) {
        tf_(s, M * C);
        tf_(s, M * 2 * C);
    }
    tf_(s, M * C / (size_t)d->tp);
    tf_(s, M * 2 * C);
    tf_(s, ms * 2 * C);
    tf_(s, ms * C);
    tf_(s, M * C); /* embedding backward's gathered gradient */
    qdq_reserve(e, s);
    rel_(s, m0);
}

/* A layer's forward and backward (attention, dense MLP, MoE block) on top of what is live. */
static void sim_layers(const struct moe_eng *e, struct tsim *s)
{
    const struct moe_eng_dims *d = &e->d;
    size_t msc = (size_t)d->tokens_sp * (size_t)d->hidden;
    size_t m0 = moe_eng_arena_mark(&s->a);
    sim_attn_fwd(e, s);
    rel_(s, m0);
    sim_attn_bwd(e, s);
    rel_(s, m0);
    if (d->ffn_l > 0) {
        sim_mlp_fwd(e, s);
        rel_(s, m0);
        tf_(s, msc); /* dh2 */
        sim_mlp_bwd(e, s, d->ffn_l);
        rel_(s, m0);
    }
    if (d->experts > 0) {
        sim_moe_fwd(e, s);
        rel_(s, m0);
        tf_(s, msc); /* shared expert output */
        sim_mlp_fwd(e, s);
        rel_(s, m0);
        tf_(s, msc); /* dh2 */
        tf_(s, msc); /* moe recompute output */
        sim_moe_fwd(e, s);
        rel_(s, m0);
        tf_(s, msc);
        tf_(s, msc);
        if (d->shared_ffn_l > 0) {
            size_t m1 = moe_eng_arena_mark(&s->a);
            sim_mlp_bwd(e, s, d->shared_ffn_l);
            rel_(s, m1);
        }
        sim_moe_bwd(e, s);
        rel_(s, m0);
    }
}

size_t moe_eng_temp_bytes(const struct moe_eng *e, size_t *dispatch_bytes)
{
    const struct moe_eng_dims *d = &e->d;
    size_t msc = (size_t)d->tokens_sp * (size_t)d->hidden;
    struct tsim s;
    memset(&s, 0, sizeof(s));
    moe_eng_arena_init_sizing(&s.a);
    size_t m0 = moe_eng_arena_mark(&s.a);
    sim_head(e, &s);
    rel_(&s, m0);
    if (d->num_mtp > 0) {
        /* engine/mtp.c's backward holds two gradients of h while a depth's layer runs backward */
        tf_(&s, msc);
        tf_(&s, msc);
        sim_layers(e, &s);
        sim_mtp(e, &s);
        rel_(&s, m0);
    }
    tf_(&s, (size_t)d->tokens * (size_t)d->hidden); /* embedding forward / backward */
    rel_(&s, m0);
    if (e->is_device) {
        tf_(&s, msc); /* the finite check's scaled copy of a layer output (engine/staging.c) */
        rel_(&s, m0);
    }
    /* optimizer expert counts of every layer */
    ti_(&s, (size_t)d->num_layers_all * (size_t)(d->experts > 0 ? d->experts : 1));
    rel_(&s, m0);
    sim_layers(e, &s);
    *dispatch_bytes = s.dispatch_at_peak;
    return s.a.peak;
}
