/*
 * Pipeline schedule and its execution. The op order per pipeline rank is Megatron-Core's: 1F1B
 * (forward_backward_pipelining_without_interleaving: warm-up min(pp - rank - 1, m) forwards, then
 * one forward / one backward, then the cool-down backwards) and, with virtual stages, the
 * interleaved schedule (forward_backward_pipelining_with_interleaving: warm-up (pp - rank - 1) * 2
 * + (vpp - 1) * pp chunk-forwards, all of them when m == pp; chunk of forward k = (k mod pp*vpp) /
 * pp, reversed for backwards; micro-batch = (k / (pp*vpp)) * pp + k mod pp). With pp = 1 this is
 * forward then backward per micro-batch.
 *
 * Communication: a chunk's output goes to the rank of the next chunk with a non-blocking send
 * (tagged by chunk and micro-batch), inputs and output gradients are received when needed. Time
 * blocked in a receive is the pipeline bubble; posting sends is pp_comm. A send is waited for only
 * when its buffer is about to be reused (an output at the slot's next forward, which the receiver
 * has consumed by then; a gradient at the slot's next backward), which Megatron's blocking
 * exchanges already imply, so the schedule's dependency order cannot deadlock.
 *
 * Activation slots: the schedule is simulated once to find, per chunk, how many micro-batches are
 * alive at once; that many slots are carved and a micro-batch takes a free slot at its forward.
 */
#include "engine/check.h"
#include "engine/internal.h"

#include <stdlib.h>
#include <string.h>

static void op_push(struct moe_eng *e, bool bwd, int v, int mb)
{
    e->ops[e->num_ops++] = (struct moe_eng_op){.is_backward = bwd, .v = v, .mb = mb};
}

/* Megatron's interleaved mapping of the k-th forward (or backward) to (chunk, micro-batch). */
static void interleaved_at(int k, int pp, int vpp, bool bwd, int *v, int *mb)
{
    int in_group = k % (pp * vpp);
    *v = in_group / pp;
    if (bwd) {
        *v = vpp - 1 - *v;
    }
    *mb = (k / (pp * vpp)) * pp + k % pp;
}

static void build_ops(struct moe_eng *e)
{
    const struct moe_layout *lay = &e->plan.layout;
    int pp = lay->pp, vpp = lay->vpp, m = lay->num_microbatches;
    int p = e->groups.me.stage;
    e->num_ops = 0;
    if (vpp == 1) {
        int warm = pp - p - 1 < m ? pp - p - 1 : m;
        for (int i = 0; i < warm; i++) {
            op_push(e, false, 0, i);
        }
        for (int i = 0; i < m - warm; i++) {
            op_push(e, false, 0, warm + i);
            op_push(e, true, 0, i);
        }
        for (int i = m - warm; i < m; i++) {
            op_push(e, true, 0, i);
        }
        return;
    }
    int total = m * vpp;
    int warm = m == pp ? total : (pp - p - 1) * 2 + (vpp - 1) * pp;
    if (warm > total) {
        warm = total;
    }
    int v = 0, mb = 0;
    for (int k = 0; k < warm; k++) {
        interleaved_at(k, pp, vpp, false, &v, &mb);
        op_push(e, false, v, mb);
    }
    for (int k = 0; k < total - warm; k++) {
        interleaved_at(warm + k, pp, vpp, false, &v, &mb);
        op_push(e, false, v, mb);
        interleaved_at(k, pp, vpp, true, &v, &mb);
        op_push(e, true, v, mb);
    }
    for (int k = total - warm; k < total; k++) {
        interleaved_at(k, pp, vpp, true, &v, &mb);
        op_push(e, true, v, mb);
    }
}

/* Slots per chunk and the slot of every micro-batch, by simulating the op order: each chunk's own
 * slots (mb_slot, num_slots) and one pool shared by the rank's chunks (mb_slot_shared,
 * e->num_shared_slots: the most chunk-micro-batches live at once, Megatron's warm-up + 1). */
static enum moe_status assign_slots(struct moe_eng *e, struct moe_diag *diag)
{
    int m = e->plan.layout.num_microbatches;
    int nv = e->num_chunks_local;
    /* free-slot stacks: at most m slots per chunk, m * vpp in the pool */
    size_t cap = (size_t)m * (size_t)(nv + 1);
    int *free_stack = moe_eng_heap_alloc(&e->ctx.heap, cap * sizeof(int));
    if (free_stack == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the schedule");
    }
    for (int v = 0; v < nv; v++) {
        struct moe_eng_chunk *ch = &e->chunks[v];
        int live = 0, max_live = 0;
        int top = 0, next_new = 0;
        for (int i = 0; i < e->num_ops; i++) {
            const struct moe_eng_op *op = &e->ops[i];
            if (op->v != v) {
                continue;
            }
            if (!op->is_backward) {
                ch->mb_slot[op->mb] = top > 0 ? free_stack[--top] : next_new++;
                live++;
                max_live = live > max_live ? live : max_live;
            } else {
                free_stack[top++] = ch->mb_slot[op->mb];
                live--;
            }
        }
        ch->num_slots = next_new;
        MOE_ASSERT(max_live == next_new);
    }
    int top = 0, next_new = 0;
    for (int i = 0; i < e->num_ops; i++) {
        const struct moe_eng_op *op = &e->ops[i];
        struct moe_eng_chunk *ch = &e->chunks[op->v];
        if (!op->is_backward) {
            ch->mb_slot_shared[op->mb] = top > 0 ? free_stack[--top] : next_new++;
        } else {
            free_stack[top++] = ch->mb_slot_shared[op->mb];
        }
    }
    e->num_shared_slots = next_new;
    e->share_slots = false;
    moe_eng_heap_free(&e->ctx.heap, free_stack, cap * sizeof(int));
    return MOE_OK;
}

enum moe_status moe_eng_schedule_build(struct moe_eng *e, struct moe_diag *diag)
{
    const struct moe_layout *lay = &e->plan.layout;
    int pp = lay->pp, vpp = lay->vpp, m = lay->num_microbatches;
    int p = e->groups.me.stage;
    struct moe_eng_heap *heap = &e->ctx.heap;
    e->num_chunks_local = vpp;
    e->chunks = moe_eng_heap_alloc(heap, (size_t)vpp * sizeof(*e->chunks));
    e->ops = moe_eng_heap_alloc(heap, 2 * (size_t)m * (size_t)vpp * sizeof(*e->ops));
    if (e->chunks == NULL || e->ops == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the schedule");
    }
    int nch = pp * vpp;
    long tag_need = 2L * nch * m;
    if (tag_need > moe_comm_tag_limit(e->groups.pp)) {
        return moe_diag_set(diag, MOE_ERR_UNSUPPORTED,
                            "%d chunks x %d micro-batches need %ld message tags, more than the "
                            "communicator's %d",
                            nch, m, tag_need, moe_comm_tag_limit(e->groups.pp));
    }
    for (int v = 0; v < vpp; v++) {
        struct moe_eng_chunk *ch = &e->chunks[v];
        int c = v * pp + p;
        const struct moe_pp_chunk *pc = &lay->chunks[c];
        ch->c = c;
        ch->v = v;
        ch->first_layer = pc->first_layer;
        ch->num_layers = pc->num_layers;
        ch->has_embedding = pc->has_embedding != 0;
        ch->has_loss = pc->has_loss != 0;
        ch->num_mtp = pc->num_mtp;
        if (ch->num_mtp > 0 && !ch->has_loss) {
            return moe_diag_set(diag, MOE_ERR_UNSUPPORTED,
                                "moefold-train runs the MTP layers in the chunk with the loss (as "
                                "Megatron's default layout does); put 'm' before 'L' in the "
                                "pipeline layout");
        }
        ch->prev_pp = c > 0 ? (c - 1) % pp : -1;
        ch->next_pp = c + 1 < nch ? (c + 1) % pp : -1;
        ch->mb_slot = moe_eng_heap_alloc(heap, (size_t)m * sizeof(int));
        ch->mb_slot_shared = moe_eng_heap_alloc(heap, (size_t)m * sizeof(int));
        ch->rc = moe_eng_heap_alloc(heap, (size_t)(ch->num_layers > 0 ? ch->num_layers : 1) *
                                              sizeof(*ch->rc));
        if (ch->mb_slot == NULL || ch->mb_slot_shared == NULL || ch->rc == NULL) {
            return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the schedule");
        }
    }
    build_ops(e);
    MOE_TRY(assign_slots(e, diag));
    for (int v = 0; v < vpp; v++) {
        struct moe_eng_chunk *ch = &e->chunks[v];
        ch->slots_cap = ch->num_slots > e->num_shared_slots ? ch->num_slots : e->num_shared_slots;
        ch->slots = moe_eng_heap_alloc(heap, (size_t)ch->slots_cap * sizeof(*ch->slots));
        if (ch->slots == NULL) {
            return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for activation slots");
        }
        for (int s = 0; s < ch->slots_cap; s++) {
            size_t n = (size_t)(ch->num_layers > 0 ? ch->num_layers : 1);
            ch->slots[s].acts = moe_eng_heap_alloc(heap, n * sizeof(struct moe_eng_layer_act));
            if (ch->slots[s].acts == NULL) {
                return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for activation slots");
            }
            if (ch->num_mtp > 0) {
                size_t nm = (size_t)ch->num_mtp * sizeof(struct moe_eng_mtp_act);
                ch->slots[s].mtp = moe_eng_heap_alloc(heap, nm);
                if (ch->slots[s].mtp == NULL) {
                    return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the MTP slots");
                }
            }
        }
    }
    e->tag_base_fwd = 0;
    e->tag_base_bwd = nch * m;
    if (e->opts.use_cuda_graphs && e->is_device && !moe_eng_dev_is_emulated(e->ctx.dev)) {
        for (int v = 0; v < vpp; v++) {
            struct moe_eng_chunk *ch = &e->chunks[v];
            size_t n = (size_t)ch->slots_cap * (size_t)(ch->num_layers > 0 ? ch->num_layers : 1);
            ch->graphs = moe_eng_heap_alloc(heap, n * sizeof(*ch->graphs));
            if (ch->graphs == NULL) {
                return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the CUDA graphs");
            }
        }
    }
    return MOE_OK;
}

/* ---- Execution ------------------------------------------------------------------------------- */

static int fwd_tag(const struct moe_eng *e, int c, int mb)
{
    return e->tag_base_fwd + c * e->plan.layout.num_microbatches + mb;
}

static int bwd_tag(const struct moe_eng *e, int c, int mb)
{
    return e->tag_base_bwd + c * e->plan.layout.num_microbatches + mb;
}

/* Activations travel forward on the pp group and gradients backward on pp_bwd (one direction per
 * communicator: NCCL pairs a peer's messages in issue order). */
static moe_comm_t *pp_group(const struct moe_eng *e, bool is_backward)
{
    return is_backward ? e->groups.pp_bwd : e->groups.pp;
}

static void recv_blocking(struct moe_eng *e, float *buf, int peer, int tag, bool is_backward)
{
    size_t n = (size_t)e->d.tokens_sp * (size_t)e->d.hidden;
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_PP_BUBBLE);
    moe_comm_recv(pp_group(e, is_backward), buf, n, MOE_COMM_F32, peer, tag);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

static void send_async(struct moe_eng *e,
                       const float *buf,
                       int peer,
                       int tag,
                       bool is_backward,
                       struct moe_comm_req *req)
{
    size_t n = (size_t)e->d.tokens_sp * (size_t)e->d.hidden;
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_PP_COMM);
    moe_comm_isend(pp_group(e, is_backward), buf, n, MOE_COMM_F32, peer, tag, req);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

static void wait_req(struct moe_eng *e, struct moe_comm_req *req, bool is_backward)
{
    if (req->is_active) {
        enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_PP_COMM);
        moe_comm_wait(pp_group(e, is_backward), req);
        moe_eng_phase_enter(&e->ctx.timer, prev);
    }
}

/* Offloaded tensors to the host pool and back (CUDA: device <-> host copies that wait). The copy
 * is compute: the cost model counts the part of an offload copy that its pass's compute does not
 * hide there, and here nothing hides it (the copy blocks). */
static void offload_out(struct moe_eng *e, const struct moe_eng_layer_act *a)
{
    if (a->offload_bytes == 0) {
        return;
    }
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_COMPUTE);
    double t0 = moe_eng_now();
    moe_eng_copy_to_host(e->ctx.dev, a->host, a->stage, a->offload_bytes);
    e->stats.offload_s += moe_eng_now() - t0;
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

static void offload_in(struct moe_eng *e, const struct moe_eng_layer_act *a)
{
    if (a->offload_bytes == 0) {
        return;
    }
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_COMPUTE);
    double t0 = moe_eng_now();
    moe_eng_copy_from_host(e->ctx.dev, a->stage, a->host, a->offload_bytes);
    e->stats.offload_s += moe_eng_now() - t0;
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

/* Progress of the overlapped gradient reductions and parameter gathers between layers: on a CPU
 * rank the transfer advances only inside these calls, so their time is data-parallel
 * communication. */
static void progress(struct moe_eng *e)
{
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_DP_COMM);
    moe_eng_comm_progress(e);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

/* A device copy that belongs to the pass (compute). */
static void pass_copy(struct moe_eng *e, float *dst, const float *src, size_t n)
{
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_COMPUTE);
    moe_eng_copy(e->ctx.dev, dst, src, n * sizeof(float));
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

static void chunk_fwd(struct moe_eng *e, struct moe_eng_chunk *ch, int mb)
{
    struct moe_eng_slot *sl = &ch->slots[ch->mb_slot[mb]];
    size_t mt = (size_t)e->d.tokens;
    /* The slot's previous output send was received before its backward could run.
     */
    wait_req(e, &sl->out_req, false);
    if (ch->has_embedding) {
        moe_eng_params_wait(e, MOE_ENG_TAG_EMBED);
        moe_eng_embed_fwd(e, &e->embedding, e->ids + (size_t)mb * mt, sl->x0);
    } else {
        recv_blocking(e, sl->x0, ch->prev_pp, fwd_tag(e, ch->c, mb), false);
    }
    if (ch->num_layers == 0) { /* a chunk with only the embedding or the loss */
        pass_copy(e, sl->out, sl->x0, (size_t)e->d.tokens_sp * (size_t)e->d.hidden);
    }
    for (int i = 0; i < ch->num_layers; i++) {
        const struct moe_eng_layer_w *w = &e->layers[ch->first_layer + i];
        moe_eng_params_wait(e, w->idx);
        float *out = i + 1 < ch->num_layers ? sl->acts[i + 1].x : sl->out;
        if (ch->graphs != NULL && moe_eng_layer_is_graphable(e, w)) {
            struct moe_eng_graph_slot *g =
                &ch->graphs[(size_t)ch->mb_slot[mb] * (size_t)ch->num_layers + (size_t)i];
            moe_eng_layer_fwd_graphed(e, w, &sl->acts[i], &ch->rc[i], out, g);
        } else {
            moe_eng_layer_fwd(e, w, &sl->acts[i], &ch->rc[i], out);
        }
        offload_out(e, &sl->acts[i]);
        progress(e);
    }
    if (ch->has_loss && ch->num_mtp > 0) {
        moe_eng_params_wait(e, MOE_ENG_TAG_HEAD);
        moe_eng_mtp_fwd(e, ch, sl, mb); /* the head's buckets are done after the MTP backward */
    } else if (ch->has_loss) {
        moe_eng_params_wait(e, MOE_ENG_TAG_HEAD);
        moe_eng_head_fwd_bwd(e, sl->out, e->targets + (size_t)mb * mt, sl->dout);
        moe_eng_layer_grads_done(e, MOE_ENG_TAG_HEAD);
    } else {
        send_async(e, sl->out, ch->next_pp, fwd_tag(e, ch->c + 1, mb), false, &sl->out_req);
    }
}

/* First layer of the full-recompute unit containing layer i. */
static int unit_start(const struct moe_eng_chunk *ch, int i)
{
    while (i > 0 && !ch->rc[i].is_unit_start) {
        i--;
    }
    return i;
}

/* Full recompute: rerun the forward of the unit that ends at layer i. */
static void
recompute_unit(struct moe_eng *e, struct moe_eng_chunk *ch, struct moe_eng_slot *sl, int i)
{
    int s = unit_start(ch, i);
    bool was = e->is_recomputing;
    e->is_recomputing = true;
    for (int j = s; j <= i; j++) {
        const struct moe_eng_layer_w *w = &e->layers[ch->first_layer + j];
        float *out = j + 1 < ch->num_layers ? sl->acts[j + 1].x : sl->out;
        moe_eng_layer_fwd(e, w, &sl->acts[j], &ch->rc[j], out);
    }
    e->is_recomputing = was;
}

static void chunk_bwd(struct moe_eng *e, struct moe_eng_chunk *ch, int mb)
{
    struct moe_eng_slot *sl = &ch->slots[ch->mb_slot[mb]];
    size_t n = (size_t)e->d.tokens_sp * (size_t)e->d.hidden;
    float *d = e->grad_stream;
    wait_req(e, &sl->out_req, false); /* a recompute may rewrite the output buffer */
    if (ch->has_loss && ch->num_mtp > 0) {
        moe_eng_mtp_bwd(e, ch, sl, mb, d);
        moe_eng_layer_grads_done(e, MOE_ENG_TAG_HEAD);
    } else if (ch->has_loss) {
        pass_copy(e, d, sl->dout, n);
    } else {
        recv_blocking(e, d, ch->next_pp, bwd_tag(e, ch->c, mb), true);
    }
    for (int i = ch->num_layers - 1; i >= 0; i--) {
        const struct moe_eng_rc *rc = &ch->rc[i];
        bool unit_end = rc->is_full && (i + 1 == ch->num_layers || ch->rc[i + 1].is_unit_start ||
                                        !ch->rc[i + 1].is_full);
        if (unit_end) {
            recompute_unit(e, ch, sl, i);
        }
        offload_in(e, &sl->acts[i]);
        const struct moe_eng_layer_w *w = &e->layers[ch->first_layer + i];
        moe_eng_layer_bwd(e, w, &sl->acts[i], rc, d);
        moe_eng_layer_grads_done(e, w->idx);
        progress(e);
    }
    if (ch->has_embedding) {
        moe_eng_embed_bwd(e, &e->embedding, e->ids + (size_t)mb * (size_t)e->d.tokens, d);
        moe_eng_layer_grads_done(e, MOE_ENG_TAG_EMBED);
    } else {
        /* The previous gradient sent from this slot must be out before its buffer is reused
         * (waiting any earlier, at the slot's next forward, can deadlock the pipeline). */
        wait_req(e, &sl->dx_req, true);
        enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_PP_COMM);
        moe_eng_copy(e->ctx.dev, sl->dx_send, d, n * sizeof(float));
        moe_eng_phase_enter(&e->ctx.timer, prev);
        send_async(e, sl->dx_send, ch->prev_pp, bwd_tag(e, ch->c - 1, mb), true, &sl->dx_req);
    }
}

void moe_eng_run_schedule(struct moe_eng *e)
{
    for (int i = 0; i < e->num_ops; i++) {
        const struct moe_eng_op *op = &e->ops[i];
        struct moe_eng_chunk *ch = &e->chunks[op->v];
        moe_eng_timer_set_tag(&e->ctx.timer, moe_eng_op_tag(op->mb, op->v, op->is_backward));
        if (op->is_backward) {
            chunk_bwd(e, ch, op->mb);
        } else {
            chunk_fwd(e, ch, op->mb);
        }
    }
    for (int v = 0; v < e->num_chunks_local; v++) {
        struct moe_eng_chunk *ch = &e->chunks[v];
        for (int s = 0; s < ch->num_slots; s++) {
            wait_req(e, &ch->slots[s].out_req, false);
            wait_req(e, &ch->slots[s].dx_req, true);
        }
    }
    moe_eng_timer_set_tag(&e->ctx.timer, MOE_ENG_NO_OP);
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_HOST_OVERHEAD);
    moe_eng_scal_flush(e); /* router losses into aux_sum; CUDA: the deferred finite checks */
    moe_eng_phase_enter(&e->ctx.timer, prev);
}
