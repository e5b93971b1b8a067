/*
 * The MoE block: router (softmax, or sigmoid with expert bias and group-limited top-k; switch
 * load-balancing and z losses), token dispatch to the experts' EP ranks, the routed SwiGLU experts
 * as grouped GEMMs (engine/experts.c), and the weighted combine back to the tokens' owners.
 * DeepEP's vocabulary: dispatch layout (tokens per expert, slot <-> row maps), dispatch, combine.
 *
 * Flow of one micro-batch on a rank (Megatron-Core's alltoall dispatcher with ETP): own tokens
 * h[Ms, C] -> route -> permute into expert order -> EP all-to-all-v (counts exchanged first) -> ETP
 * all-gather (each ETP rank computes its slice of the FFN for every row of its experts) -> sort
 * rows expert-major -> grouped GEMMs -> unsort -> ETP reduce-scatter (sums the FFN slices) -> EP
 * all-to-all-v back -> unpermute with the top-k weights. Dropless by default; with a capacity
 * factor each expert keeps the first capacity slots of each rank's tokens (Megatron's "position"
 * policy). The hierarchical dispatcher (engine/hier.c) sends one copy of a token per remote node
 * and forwards it inside the node instead of the EP all-to-all-v.
 *
 * Router losses: the aux loss uses the expert counts of the whole micro-batch (all-reduced over the
 * TP x CP ranks that share it) so every layout computes the same loss; both losses are averaged
 * over the micro-batches of the global batch. Expert-bias updates use the step's global counts
 * (engine/optimizer.c).
 */
#include "engine/check.h"
#include "engine/hier.h"
#include "engine/internal.h"

#include <string.h>

/* ---- Dispatch bookkeeping -------------------------------------------------------------------- */

/* Rows and element counts of the EP exchange, derived from the saved per-expert counts. All
 * arrays are host memory (the communicator takes host counts); the kernels' three arrays also
 * have engine-memory views (d_*: the same pointers on the CPU backend, copies on CUDA). */
struct ep_plan {
    int *scount, *sdispl, *rcount, *rdispl; /* [EP] in floats (rows x C) */
    int *gcount, *gdispl;                   /* [ETP] rows x C of each ETP rank's block */
    int *chunk_rows, *chunk_order;          /* [ETP EP El] expert-major sort */
    int *local_counts;                      /* [El] rows per local expert after the gather */
    const int *d_chunk_rows, *d_chunk_order, *d_local_counts;
    int rows_send, rows_recv, rows_exp;
};

/* The routed experts' grouped GEMMs (engine/experts.c) on a plan's local expert counts. */
static void grouped_fwd(struct moe_eng *e,
                        float *y,
                        const float *x,
                        const float *w,
                        const float *bias,
                        const struct ep_plan *p,
                        int in,
                        int out)
{
    moe_eng_grouped_fwd(e, y, x, w, bias, p->local_counts, p->d_local_counts, in, out);
}

static void grouped_bwd(struct moe_eng *e,
                        float *dx,
                        float *dw,
                        float *d_bias,
                        const float *dy,
                        const float *x,
                        const float *w,
                        const struct ep_plan *p,
                        int in,
                        int out)
{
    moe_eng_grouped_bwd(e, dx, dw, d_bias, dy, x, w, p->local_counts, p->d_local_counts, in, out);
}

static struct ep_plan
ep_plan_from(struct moe_eng *e, const int *tpe, const int *recv_counts, const int *gath_counts)
{
    const struct moe_eng_dims *d = &e->d;
    int EP = d->ep, ETP = d->etp, El = d->experts_l, C = d->hidden;
    struct ep_plan p;
    struct moe_eng_arena *t = e->htemp;
    p.scount = moe_eng_arena_ints(t, (size_t)EP);
    p.sdispl = moe_eng_arena_ints(t, (size_t)EP);
    p.rcount = moe_eng_arena_ints(t, (size_t)EP);
    p.rdispl = moe_eng_arena_ints(t, (size_t)EP);
    p.gcount = moe_eng_arena_ints(t, (size_t)ETP);
    p.gdispl = moe_eng_arena_ints(t, (size_t)ETP);
    int nch = ETP * EP * El;
    /* The kernels' arrays in one block, so the CUDA backend uploads them with one copy. */
    int *kblock = moe_eng_arena_ints(t, 2 * (size_t)nch + (size_t)El);
    p.chunk_rows = kblock;
    p.chunk_order = kblock + nch;
    p.local_counts = kblock + 2 * nch;
    int so = 0, ro = 0;
    for (int j = 0; j < EP; j++) {
        int s = 0, r = 0;
        for (int i = 0; i < El; i++) {
            s += tpe[j * El + i];
            r += recv_counts[j * El + i];
        }
        p.scount[j] = s * C;
        p.sdispl[j] = so;
        p.rcount[j] = r * C;
        p.rdispl[j] = ro;
        so += s * C;
        ro += r * C;
    }
    p.rows_send = so / C;
    p.rows_recv = ro / C;
    int go = 0;
    for (int q = 0; q < ETP; q++) {
        int g = 0;
        for (int i = 0; i < EP * El; i++) {
            g += gath_counts[q * EP * El + i];
        }
        p.gcount[q] = g * C;
        p.gdispl[q] = go;
        go += g * C;
    }
    p.rows_exp = go / C;
    memcpy(p.chunk_rows, gath_counts, (size_t)nch * sizeof(int));
    int k = 0;
    for (int i = 0; i < El; i++) {
        p.local_counts[i] = 0;
        for (int q = 0; q < ETP * EP; q++) {
            p.chunk_order[k++] = q * El + i;
            p.local_counts[i] += gath_counts[q * El + i];
        }
    }
    const int *dk = moe_eng_dev_ints(e, kblock, 2 * (size_t)nch + (size_t)El);
    p.d_chunk_rows = dk;
    p.d_chunk_order = dk + nch;
    p.d_local_counts = dk + 2 * nch;
    return p;
}

/* The plan of a layer's saved counts (their host copies). */
static struct ep_plan ep_plan_make(struct moe_eng *e, const struct moe_eng_layer_act *a)
{
    return ep_plan_from(e, a->hc_tpe, a->hc_recv, a->hc_gath);
}

/* CUDA: the host copies of the count arrays of `halves` halves after a counts exchange (one copy:
 * the arrays are one block, engine/activations.c). */
static void pull_counts(struct moe_eng *e, const struct moe_eng_layer_act *a, int halves)
{
    const struct moe_eng_dims *d = &e->d;
    size_t n = (size_t)halves * ((size_t)d->experts + (size_t)d->ep * (size_t)d->experts_l +
                                 (size_t)d->etp * (size_t)d->ep * (size_t)d->experts_l);
    moe_eng_copy_to_host(e->ctx.dev, a->hc_tpe, a->tokens_per_expert, n * sizeof(int));
}

/* This rank's expert rows of one MoE forward (statistics; not while recomputing): the EP
 * exchanges synchronise per layer and micro-batch, so the busiest rank of each one sets the
 * pace (engine/report.c turns these into expert_load_rank_max_over_mean). */
static void note_rows(struct moe_eng *e, const struct moe_eng_layer_w *w, int rows)
{
    struct moe_eng_stats *st = &e->stats;
    if (e->is_recomputing || st->num_ep_rows[w->idx] >= st->cap_ep_rows) {
        return;
    }
    st->ep_rows[(size_t)w->idx * (size_t)st->cap_ep_rows + (size_t)st->num_ep_rows[w->idx]++] =
        rows;
}

/* Token copies the capacity factor dropped on this rank (statistics; not while recomputing). */
static void note_dropped(struct moe_eng *e, const struct moe_eng_layer_act *a)
{
    if (e->is_recomputing) {
        return;
    }
    long kept = 0;
    for (int i = 0; i < e->d.experts; i++) {
        kept += a->hc_tpe[i];
    }
    e->dropped += (double)((long)e->d.tokens_sp * e->d.topk - kept);
}

static void check_bound(const struct moe_eng *e, int rows, int bound, const char *what)
{
    if (rows > bound) {
        moe_eng_fatal(__FILE__, __LINE__,
                      "expert load exceeded the %s buffer (%d rows > %d): the "
                      "expert rows buffer "
                      "was sized with --moe-buffer-factor %g x the mean load; "
                      "rerun with a larger "
                      "factor or 0 (worst case)",
                      what, rows, bound, e->opts.moe_buffer_factor);
    }
}

/*
 * --moe-router-force-load-balancing (Megatron-Core's benchmark mode, router.py
 * apply_random_logits): the router's logits are replaced by standard-normal draws, a
 * straight-through estimator (the backward treats them as the logits), so each token's top-k
 * experts are uniformly random and the expected load of every expert is the mean. The draws depend
 * on the seed, the step, the layer, the micro-batch and chunk of the op (either pass: recompute
 * draws the same) and this rank's tokens (its tp, cp, dp coordinates).
 */
static void random_logits(struct moe_eng *e, const struct moe_eng_layer_w *w, float *logits, int n)
{
    const struct moe_rank_coords *c = &e->groups.me;
    const struct moe_layout *l = &e->plan.layout;
    uint64_t op = (uint64_t)(unsigned)(e->ctx.timer.tag & ~(1 << 30));
    uint64_t who = (uint64_t)(c->tp + l->tp * (c->cp + l->cp * c->dp));
    uint64_t stream = moe_eng_hash3(moe_eng_hash3((uint64_t)e->step, (uint64_t)w->idx, op), who,
                                    0x666f7263656c62ULL);
    float *h = moe_eng_arena_floats(e->htemp, (size_t)n);
    int E = e->d.experts;
    int skewed = E / e->d.ep; /* the experts of EP rank 0 */
    for (int i = 0; i < n; i++) {
        double skew = i % E < skewed ? e->opts.router_skew : 0.0;
        h[i] = (float)(moe_eng_normal_at(e->opts.seed, stream, (uint64_t)i) + skew);
    }
    if (h != logits) {
        moe_eng_copy_from_host(e->ctx.dev, logits, h, (size_t)n * sizeof(float));
    }
}

/* Routing: logits, scores, top-k, counts, router losses; fills the dispatch layout. */
static void route(struct moe_eng *e,
                  const struct moe_eng_layer_w *w,
                  struct moe_eng_layer_act *a,
                  const float *h)
{
    const struct moe_eng_dims *d = &e->d;
    const struct moe_model_cfg *m = &e->plan.model;
    int Ms = d->tokens_sp, E = d->experts, K = d->topk, C = d->hidden;
    enum moe_k_score_fn sf =
        m->router_score == MOE_ROUTER_SIGMOID ? MOE_K_SCORE_SIGMOID : MOE_K_SCORE_SOFTMAX;
    bool norm = sf == MOE_K_SCORE_SIGMOID && K > 1;
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_COMPUTE);
    e->k->linear_fwd(a->logits, h, w->router.w, w->router_bias.w, Ms, C, E, e->kc);
    if (e->plan.options.force_load_balancing || e->opts.router_skew != 0.0) {
        struct moe_eng_tmark rl = moe_eng_tmark_take(e);
        random_logits(e, w, a->logits, Ms * E);
        moe_eng_tmark_release(e, rl);
    }
    int groups = m->moe_router_num_groups > 1 ? m->moe_router_num_groups : 0;
    e->k->router_fwd(a->topk_idx, a->topk_w, a->scores, a->logits, w->expert_bias, Ms, E, K, groups,
                     groups > 0 ? m->moe_router_group_topk : 0, sf, norm, e->opts.topk_scaling,
                     e->kc);
    moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_DISPATCH);
    struct moe_eng_tmark mark = moe_eng_tmark_take(e);
    int *counts = moe_eng_arena_ints(&e->temp, (size_t)E);
    e->k->expert_counts(counts, a->topk_idx, Ms, K, E, e->kc);
    if (!e->is_recomputing) {
        const int *hc = moe_eng_host_ints(e, counts, (size_t)E); /* CUDA: waits for the router */
        long *sc = e->step_counts + (size_t)w->idx * (size_t)E;
        for (int i = 0; i < E; i++) {
            sc[i] += hc[i];
        }
    }
    int tot = d->mbs * d->seq;
    /* Router losses go to scalar slots, summed in slot order at the end of the schedule. */
    if (e->opts.aux_loss_coeff > 0.0f) {
        moe_comm_allreduce(e->groups.tpcp, counts, a->counts_mb, (size_t)E, MOE_COMM_I32,
                           MOE_COMM_SUM);
        if (!e->is_recomputing) {
            e->k->router_aux_loss_fwd(moe_eng_scal_take(e, MOE_ENG_SCAL_ROUTER_LOSS, w->idx),
                                      a->scores, a->counts_mb, Ms, tot, E, K, sf,
                                      e->opts.aux_loss_coeff, e->kc);
        }
    }
    if (e->opts.z_loss_coeff > 0.0f && !e->is_recomputing) {
        e->k->router_z_loss_fwd(moe_eng_scal_take(e, MOE_ENG_SCAL_ROUTER_LOSS, w->idx), a->logits,
                                Ms, tot, E, e->opts.z_loss_coeff, e->kc);
    }
    int *per_rank = moe_eng_arena_ints(&e->temp, (size_t)d->ep);
    e->k->dispatch_layout(a->tokens_per_expert, per_rank, a->slot_to_row, a->row_to_slot,
                          a->topk_idx, Ms, K, E, d->ep, d->capacity, e->kc);
    moe_eng_tmark_release(e, mark);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

/* Counts exchange: recv_counts over EP, then gath_counts over ETP. The ETP part is booked as
 * tp_comm with the ETP row exchange (etp_gather / etp_reduce), as the cost model books every
 * exchange over the ETP group: there the ETP ranks first meet, so the wait for the slower one
 * lands in the phase the model prices it in, not in dispatch (make demo, ETP2 at EP1: dispatch
 * measured 2.2 ms against none predicted, tp_comm -72%). */
static void exchange_counts(struct moe_eng *e, struct moe_eng_layer_act *a)
{
    const struct moe_eng_dims *d = &e->d;
    int El = d->experts_l;
    if (d->ep > 1) {
        moe_comm_alltoall(e->groups.ep, a->tokens_per_expert, a->recv_counts, (size_t)El,
                          MOE_COMM_I32);
    } else {
        moe_eng_copy(e->ctx.dev, a->recv_counts, a->tokens_per_expert, (size_t)El * sizeof(int));
    }
    if (d->etp > 1) {
        enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_TP_COMM);
        moe_comm_allgather(e->groups.etp, a->recv_counts, a->gath_counts,
                           (size_t)d->ep * (size_t)El, MOE_COMM_I32);
        moe_eng_phase_enter(&e->ctx.timer, prev);
    } else {
        moe_eng_copy(e->ctx.dev, a->gath_counts, a->recv_counts,
                     (size_t)d->ep * (size_t)El * sizeof(int));
    }
    pull_counts(e, a, 1);
}

/* EP all-to-all-v of rows [.., C] in the dispatch direction (forward) or back (combine). */
static void ep_exchange(
    struct moe_eng *e, const struct ep_plan *p, const float *in, float *out, bool is_dispatch)
{
    if (e->d.ep == 1) {
        size_t rows = (size_t)(is_dispatch ? p->rows_send : p->rows_recv);
        moe_eng_copy(e->ctx.dev, out, in, rows * (size_t)e->d.hidden * sizeof(float));
        return;
    }
    if (is_dispatch) {
        moe_comm_alltoallv(e->groups.ep, in, p->scount, p->sdispl, out, p->rcount, p->rdispl,
                           MOE_COMM_F32);
    } else {
        moe_comm_alltoallv(e->groups.ep, in, p->rcount, p->rdispl, out, p->scount, p->sdispl,
                           MOE_COMM_F32);
    }
}

/* ETP: gather rows of every ETP rank ([rows_recv] -> [rows_exp]), or reduce-scatter them back. */
static void etp_gather(struct moe_eng *e, const struct ep_plan *p, const float *in, float *out)
{
    if (e->d.etp == 1) {
        moe_eng_copy(e->ctx.dev, out, in,
                     (size_t)p->rows_recv * (size_t)e->d.hidden * sizeof(float));
        return;
    }
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_TP_COMM);
    moe_comm_allgatherv(e->groups.etp, in, p->rows_recv * e->d.hidden, out, p->gcount, p->gdispl,
                        MOE_COMM_F32);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

static void etp_reduce(struct moe_eng *e, const struct ep_plan *p, float *in, float *out)
{
    if (e->d.etp == 1) {
        moe_eng_copy(e->ctx.dev, out, in,
                     (size_t)p->rows_recv * (size_t)e->d.hidden * sizeof(float));
        return;
    }
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_TP_COMM);
    moe_comm_reducescatterv(e->groups.etp, in, out, p->gcount, MOE_COMM_F32, MOE_COMM_SUM);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

/* ---- Forward / backward ---------------------------------------------------------------------- */

/* ---- EP all-to-all overlap (--overlap-moe-expert-parallel-comm) --------------------------- */
/*
 * The micro-batch's tokens are split into two halves that are dispatched, computed and combined
 * as a two-stage software pipeline: both halves' dispatches are posted (non-blocking
 * all-to-all-v), the first half's experts run while the second's dispatch is in flight, the first
 * half's combine is posted before the second half's experts run, and the backward pass mirrors
 * this. MPI progresses the pending transfers between kernel calls. Only the time spent waiting is
 * charged to dispatch/combine, so they report exposed communication. Needs the flat dispatcher,
 * etp 1 and dropless routing (a per-half capacity would drop different tokens).
 */

struct half {
    int t0, m;                             /* first token and tokens of the half */
    int *tpe, *recv, *gath;                /* its counts: [E], [EP El], [EP El] (engine memory) */
    const int *hc_tpe, *hc_recv, *hc_gath; /* their host copies */
    struct ep_plan p;
    int send_off, recv_off, exp_off; /* row offsets of the half in the send/recv/expert buffers */
    struct moe_comm_req req;
};

static void halves_init(struct moe_eng *e, struct moe_eng_layer_act *a, struct half *hv)
{
    const struct moe_eng_dims *d = &e->d;
    int E = d->experts, n = d->ep * d->experts_l;
    hv[0].t0 = 0;
    hv[0].m = (d->tokens_sp + 1) / 2;
    hv[1].t0 = hv[0].m;
    hv[1].m = d->tokens_sp - hv[0].m;
    for (int i = 0; i < 2; i++) {
        hv[i].tpe = a->tokens_per_expert + (size_t)i * (size_t)E;
        hv[i].recv = a->recv_counts + (size_t)i * (size_t)n;
        hv[i].gath = a->gath_counts + (size_t)i * (size_t)n;
        hv[i].hc_tpe = a->hc_tpe + (size_t)i * (size_t)E;
        hv[i].hc_recv = a->hc_recv + (size_t)i * (size_t)n;
        hv[i].hc_gath = a->hc_gath + (size_t)i * (size_t)n;
        memset(&hv[i].req, 0, sizeof(hv[i].req));
    }
}

/* Plans and buffer offsets of both halves from their saved counts. */
static void halves_plan(struct moe_eng *e, struct half *hv)
{
    for (int i = 0; i < 2; i++) {
        hv[i].p = ep_plan_from(e, hv[i].hc_tpe, hv[i].hc_recv, hv[i].hc_gath);
        hv[i].send_off = i == 0 ? 0 : hv[0].p.rows_send;
        hv[i].recv_off = i == 0 ? 0 : hv[0].p.rows_recv;
        hv[i].exp_off = i == 0 ? 0 : hv[0].p.rows_exp;
    }
    check_bound(e, hv[0].p.rows_recv + hv[1].p.rows_recv, e->d.rows_recv, "EP receive");
}

static void post_a2a(struct moe_eng *e, struct half *h, const float *in, float *out, bool fwd)
{
    const struct ep_plan *p = &h->p;
    if (fwd) {
        moe_comm_ialltoallv(e->groups.ep, in, p->scount, p->sdispl, out, p->rcount, p->rdispl,
                            MOE_COMM_F32, &h->req);
    } else {
        moe_comm_ialltoallv(e->groups.ep, in, p->rcount, p->rdispl, out, p->scount, p->sdispl,
                            MOE_COMM_F32, &h->req);
    }
}

static void wait_a2a(struct moe_eng *e, struct half *h, enum moe_phase phase)
{
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, phase);
    moe_comm_wait(e->groups.ep, &h->req);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

static void poke(struct moe_eng *e, struct half *hv)
{
    for (int i = 0; i < 2; i++) {
        (void)moe_comm_test(e->groups.ep, &hv[i].req);
    }
}

static void moe_fwd_overlap(struct moe_eng *e,
                            const struct moe_eng_layer_w *w,
                            struct moe_eng_layer_act *a,
                            const float *h,
                            float *out)
{
    const struct moe_eng_dims *d = &e->d;
    const struct moe_k_ops *k = e->k;
    int K = d->topk, C = d->hidden, E = d->experts, El = d->experts_l, fel = d->expert_ffn_l;
    size_t c = (size_t)C;
    route(e, w, a, h);
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_DISPATCH);
    struct moe_eng_tmark mark = moe_eng_tmark_take(e);
    struct moe_eng_arena *t = &e->temp;
    float *send = moe_eng_arena_floats(t, (size_t)d->rows_send * c);
    float *recv = moe_eng_arena_floats(t, (size_t)d->rows_recv * c);
    float *eout = moe_eng_arena_floats(t, (size_t)d->rows_exp * c);
    int *per_rank = moe_eng_arena_ints(t, (size_t)d->ep);
    struct half hv[2];
    halves_init(e, a, hv);
    for (int i = 0; i < 2; i++) {
        size_t s0 = (size_t)hv[i].t0 * (size_t)K;
        k->dispatch_layout(hv[i].tpe, per_rank, a->slot_to_row + s0, a->row_to_slot + s0,
                           a->topk_idx + s0, hv[i].m, K, E, d->ep, 0, e->kc);
        moe_comm_alltoall(e->groups.ep, hv[i].tpe, hv[i].recv, (size_t)El, MOE_COMM_I32);
        moe_eng_copy(e->ctx.dev, hv[i].gath, hv[i].recv, (size_t)d->ep * (size_t)El * sizeof(int));
    }
    pull_counts(e, a, 2);
    halves_plan(e, hv);
    note_rows(e, w, hv[0].p.rows_exp + hv[1].p.rows_exp);
    for (int i = 0; i < 2; i++) {
        float *sh = send + (size_t)hv[i].send_off * c;
        k->permute(sh, h + (size_t)hv[i].t0 * c, a->row_to_slot + (size_t)hv[i].t0 * (size_t)K,
                   hv[i].p.rows_send, K, C, e->kc);
        post_a2a(e, &hv[i], sh, recv + (size_t)hv[i].recv_off * c, true);
    }
    for (int i = 0; i < 2; i++) {
        wait_a2a(e, &hv[i], MOE_PHASE_DISPATCH);
        size_t x = (size_t)hv[i].exp_off;
        float *xe = a->xe + x * c;
        k->sort_chunks(xe, recv + (size_t)hv[i].recv_off * c, hv[i].p.d_chunk_rows,
                       hv[i].p.d_chunk_order, d->ep * El, C, e->kc);
        moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_EXPERT_GEMM);
        float *f1 = a->e_fc1 + x * (size_t)d->glu * (size_t)fel;
        float *act = a->e_act + x * (size_t)fel;
        grouped_fwd(e, f1, xe, w->e_fc1.w, w->e_fc1_bias.w, &hv[i].p, C, d->glu * fel);
        poke(e, hv);
        moe_eng_act_fwd(e, act, f1, hv[i].p.rows_exp, fel);
        grouped_fwd(e, eout + x * c, act, w->e_fc2.w, w->e_fc2_bias.w, &hv[i].p, fel, C);
        moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_COMBINE);
        float *back = recv + (size_t)hv[i].recv_off * c;
        k->unsort_chunks(back, eout + x * c, hv[i].p.d_chunk_rows, hv[i].p.d_chunk_order,
                         d->ep * El, C, e->kc);
        post_a2a(e, &hv[i], back, a->y_rows + (size_t)hv[i].send_off * c, false);
    }
    for (int i = 0; i < 2; i++) {
        wait_a2a(e, &hv[i], MOE_PHASE_COMBINE);
        size_t t0 = (size_t)hv[i].t0;
        k->unpermute(out + t0 * c, a->y_rows + (size_t)hv[i].send_off * c, a->topk_w + t0 * K,
                     a->slot_to_row + t0 * K, hv[i].m, K, C, e->kc);
    }
    moe_eng_tmark_release(e, mark);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

/* Backward of moe_fwd_overlap's expert path; d_topk_w[Ms, K] out, dh[Ms, C] +=. */
static void moe_bwd_overlap(struct moe_eng *e,
                            const struct moe_eng_layer_w *w,
                            struct moe_eng_layer_act *a,
                            const float *dout,
                            float *dh,
                            float *d_topk_w)
{
    const struct moe_eng_dims *d = &e->d;
    const struct moe_k_ops *k = e->k;
    int K = d->topk, C = d->hidden, El = d->experts_l, fel = d->expert_ffn_l;
    size_t c = (size_t)C;
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_COMBINE);
    struct moe_eng_tmark mark = moe_eng_tmark_take(e);
    struct moe_eng_arena *t = &e->temp;
    struct half hv[2];
    halves_init(e, a, hv);
    halves_plan(e, hv);
    float *rows = moe_eng_arena_floats(t, (size_t)d->rows_send * c);
    float *recv = moe_eng_arena_floats(t, (size_t)d->rows_recv * c);
    float *deo = moe_eng_arena_floats(t, (size_t)d->rows_exp * c);
    float *d_act = moe_eng_arena_floats(t, (size_t)d->rows_exp * (size_t)fel);
    float *d_fc1 = moe_eng_arena_floats(t, (size_t)d->rows_exp * (size_t)d->glu * (size_t)fel);
    for (int i = 0; i < 2; i++) {
        size_t t0 = (size_t)hv[i].t0;
        float *rh = rows + (size_t)hv[i].send_off * c;
        k->unpermute_bwd(rh, d_topk_w + t0 * K, dout + t0 * c,
                         a->y_rows + (size_t)hv[i].send_off * c, a->topk_w + t0 * K,
                         a->slot_to_row + t0 * K, hv[i].m, K, C, e->kc);
        post_a2a(e, &hv[i], rh, recv + (size_t)hv[i].recv_off * c, true);
    }
    bool rc_act = e->plan.options.recompute == MOE_RECOMPUTE_SELECTIVE &&
                  (e->plan.options.recompute_modules & MOE_RC_MOE_ACT);
    for (int i = 0; i < 2; i++) {
        wait_a2a(e, &hv[i], MOE_PHASE_COMBINE);
        size_t x = (size_t)hv[i].exp_off;
        int r = hv[i].p.rows_exp;
        k->sort_chunks(deo + x * c, recv + (size_t)hv[i].recv_off * c, hv[i].p.d_chunk_rows,
                       hv[i].p.d_chunk_order, d->ep * El, C, e->kc);
        moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_EXPERT_GEMM);
        float *f1 = a->e_fc1 + x * (size_t)d->glu * (size_t)fel;
        float *act = a->e_act + x * (size_t)fel;
        if (rc_act) {
            moe_eng_act_fwd(e, act, f1, r, fel);
        }
        grouped_bwd(e, d_act, w->e_fc2.g, w->e_fc2_bias.g, deo + x * c, act, w->e_fc2.w, &hv[i].p,
                    fel, C);
        poke(e, hv);
        moe_eng_act_bwd(e, d_fc1, d_act, f1, r, fel);
        grouped_bwd(e, deo + x * c, w->e_fc1.g, w->e_fc1_bias.g, d_fc1, a->xe + x * c, w->e_fc1.w,
                    &hv[i].p, C, d->glu * fel);
        moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_DISPATCH);
        float *back = recv + (size_t)hv[i].recv_off * c;
        k->unsort_chunks(back, deo + x * c, hv[i].p.d_chunk_rows, hv[i].p.d_chunk_order, d->ep * El,
                         C, e->kc);
        post_a2a(e, &hv[i], back, rows + (size_t)hv[i].send_off * c, false);
    }
    for (int i = 0; i < 2; i++) {
        wait_a2a(e, &hv[i], MOE_PHASE_DISPATCH);
        size_t t0 = (size_t)hv[i].t0;
        k->permute_bwd(dh + t0 * c, rows + (size_t)hv[i].send_off * c, a->slot_to_row + t0 * K,
                       hv[i].m, K, C, true, e->kc);
    }
    moe_eng_tmark_release(e, mark);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

void moe_eng_moe_fwd(struct moe_eng *e,
                     const struct moe_eng_layer_w *w,
                     struct moe_eng_layer_act *a,
                     const float *h,
                     float *out)
{
    const struct moe_eng_dims *d = &e->d;
    const struct moe_k_ops *k = e->k;
    int Ms = d->tokens_sp, K = d->topk, C = d->hidden, El = d->experts_l;
    int fel = d->expert_ffn_l;
    if (e->is_ep_overlap) {
        moe_fwd_overlap(e, w, a, h, out);
        return;
    }
    const bool hier = e->is_hierarchical;
    route(e, w, a, h);
    if (e->is_allgather) {
        moe_eng_allgather_fwd(e, w, a, h, out);
        return;
    }
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_DISPATCH);
    struct moe_eng_tmark mark = moe_eng_tmark_take(e);
    struct moe_eng_arena *t = &e->temp;
    float *send = NULL, *recv = NULL, *gath = NULL;
    struct ep_plan p;
    if (hier) {
        note_dropped(e, a);
        moe_eng_hier_dispatch(e, a, h);
        p = ep_plan_make(e, a);
        note_rows(e, w, p.rows_exp);
    } else {
        send = moe_eng_arena_floats(t, (size_t)d->rows_send * (size_t)C);
        recv = moe_eng_arena_floats(t, (size_t)d->rows_recv * (size_t)C);
        gath = moe_eng_arena_floats(t, (size_t)d->rows_exp * (size_t)C);
        exchange_counts(e, a); /* CUDA: the counts come back to the host here (one wait) */
        note_dropped(e, a);
        int rows = 0;
        for (int i = 0; i < d->experts; i++) {
            rows += a->hc_tpe[i];
        }
        k->permute(send, h, a->row_to_slot, rows, K, C, e->kc);
        p = ep_plan_make(e, a);
        note_rows(e, w, p.rows_exp);
        check_bound(e, p.rows_recv, d->rows_recv, "EP receive");
        check_bound(e, p.rows_exp, d->rows_exp, "expert");
        ep_exchange(e, &p, send, recv, true);
        etp_gather(e, &p, recv, gath);
        k->sort_chunks(a->xe, gath, p.d_chunk_rows, p.d_chunk_order, d->etp * d->ep * El, C, e->kc);
    }
    moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_EXPERT_GEMM);
    float *eout = moe_eng_arena_floats(t, (size_t)d->rows_exp * (size_t)C);
    grouped_fwd(e, a->e_fc1, a->xe, w->e_fc1.w, w->e_fc1_bias.w, &p, C, d->glu * fel);
    moe_eng_act_fwd(e, a->e_act, a->e_fc1, p.rows_exp, fel);
    grouped_fwd(e, eout, a->e_act, w->e_fc2.w, w->e_fc2_bias.w, &p, fel, C);
    moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_COMBINE);
    if (hier) {
        moe_eng_hier_combine(e, a, eout, out);
    } else {
        k->unsort_chunks(gath, eout, p.d_chunk_rows, p.d_chunk_order, d->etp * d->ep * El, C,
                         e->kc);
        etp_reduce(e, &p, gath, recv);
        ep_exchange(e, &p, recv, a->y_rows, false);
        k->unpermute(out, a->y_rows, a->topk_w, a->slot_to_row, Ms, K, C, e->kc);
    }
    moe_eng_tmark_release(e, mark);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

/* Router backward: d_topk_w and the router losses into d_logits, then into dh and the weight. */
static void route_bwd(struct moe_eng *e,
                      const struct moe_eng_layer_w *w,
                      struct moe_eng_layer_act *a,
                      const float *h,
                      const float *d_topk_w,
                      float *dh)
{
    const struct moe_eng_dims *d = &e->d;
    const struct moe_model_cfg *m = &e->plan.model;
    int Ms = d->tokens_sp, E = d->experts, K = d->topk, C = d->hidden;
    enum moe_k_score_fn sf =
        m->router_score == MOE_ROUTER_SIGMOID ? MOE_K_SCORE_SIGMOID : MOE_K_SCORE_SOFTMAX;
    bool norm = sf == MOE_K_SCORE_SIGMOID && K > 1;
    int tot = d->mbs * d->seq;
    /* Router losses are averaged over the micro-batches of the global batch. */
    float d_aux = 1.0f / (float)e->global_mbs;
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_COMPUTE);
    size_t mark = moe_eng_arena_mark(&e->temp);
    float *d_scores = NULL;
    if (e->opts.aux_loss_coeff > 0.0f) {
        d_scores = moe_eng_arena_floats(&e->temp, (size_t)Ms * (size_t)E);
        e->k->router_aux_loss_bwd(d_scores, a->scores, a->counts_mb, Ms, tot, E, K, sf,
                                  e->opts.aux_loss_coeff, d_aux, e->kc);
    }
    float *d_logits = moe_eng_arena_floats(&e->temp, (size_t)Ms * (size_t)E);
    e->k->router_bwd(d_logits, d_topk_w, d_scores, a->scores, a->topk_idx, Ms, E, K, sf, norm,
                     e->opts.topk_scaling, e->kc);
    if (e->opts.z_loss_coeff > 0.0f) {
        e->k->router_z_loss_bwd(d_logits, a->logits, Ms, tot, E, e->opts.z_loss_coeff, d_aux,
                                e->kc);
    }
    e->k->linear_bwd_data(dh, d_logits, w->router.w, Ms, C, E, true, e->kc);
    e->k->linear_bwd_weight(w->router.g, w->router_bias.g, d_logits, h, Ms, C, E, e->kc);
    moe_eng_arena_release(&e->temp, mark);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}

void moe_eng_moe_bwd(struct moe_eng *e,
                     const struct moe_eng_layer_w *w,
                     struct moe_eng_layer_act *a,
                     const float *h,
                     const float *dout,
                     float *dh)
{
    const struct moe_eng_dims *d = &e->d;
    const struct moe_k_ops *k = e->k;
    int Ms = d->tokens_sp, K = d->topk, C = d->hidden, El = d->experts_l;
    int fel = d->expert_ffn_l;
    enum moe_phase prev = moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_COMBINE);
    struct moe_eng_tmark mark = moe_eng_tmark_take(e);
    struct moe_eng_arena *t = &e->temp;
    float *d_topk_w = moe_eng_arena_floats(t, (size_t)Ms * (size_t)K);
    if (e->is_ep_overlap || e->is_allgather) {
        if (e->is_allgather) {
            moe_eng_allgather_bwd(e, w, a, dout, dh, d_topk_w);
        } else {
            moe_bwd_overlap(e, w, a, dout, dh, d_topk_w);
        }
        route_bwd(e, w, a, h, d_topk_w, dh);
        moe_eng_tmark_release(e, mark);
        moe_eng_phase_enter(&e->ctx.timer, prev);
        return;
    }
    const bool hier = e->is_hierarchical;
    struct moe_eng_tmark mark_w = moe_eng_tmark_take(e);
    struct ep_plan p = ep_plan_make(e, a);
    float *deo = moe_eng_arena_floats(t, (size_t)d->rows_exp * (size_t)C);
    /* Flat exchange: only deo lives across the expert GEMMs. The exchange buffers of the combine's
     * backward are dead once its rows are sorted into deo, the GEMMs' gradients once deo holds the
     * input gradient, and the dispatch's backward carves its own (moe_eng_temp_bytes mirrors
     * this; the hierarchical dispatcher keeps its order). */
    struct moe_eng_tmark mark_x = moe_eng_tmark_take(e);
    if (hier) {
        moe_eng_hier_combine_bwd(e, a, dout, deo, d_topk_w);
    } else {
        float *recv = moe_eng_arena_floats(t, (size_t)d->rows_recv * (size_t)C);
        float *gath = moe_eng_arena_floats(t, (size_t)d->rows_exp * (size_t)C);
        float *rows = moe_eng_arena_floats(t, (size_t)d->rows_send * (size_t)C);
        k->unpermute_bwd(rows, d_topk_w, dout, a->y_rows, a->topk_w, a->slot_to_row, Ms, K, C,
                         e->kc);
        ep_exchange(e, &p, rows, recv, true);
        etp_gather(e, &p, recv, gath);
        k->sort_chunks(deo, gath, p.d_chunk_rows, p.d_chunk_order, d->etp * d->ep * El, C, e->kc);
        moe_eng_tmark_release(e, mark_x);
    }
    moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_EXPERT_GEMM);
    if (e->plan.options.recompute == MOE_RECOMPUTE_SELECTIVE &&
        (e->plan.options.recompute_modules & MOE_RC_MOE_ACT)) {
        moe_eng_act_fwd(e, a->e_act, a->e_fc1, p.rows_exp, fel);
    }
    float *d_act = moe_eng_arena_floats(t, (size_t)d->rows_exp * (size_t)fel);
    grouped_bwd(e, d_act, w->e_fc2.g, w->e_fc2_bias.g, deo, a->e_act, w->e_fc2.w, &p, fel, C);
    float *d_fc1 = moe_eng_arena_floats(t, (size_t)d->rows_exp * (size_t)d->glu * (size_t)fel);
    moe_eng_act_bwd(e, d_fc1, d_act, a->e_fc1, p.rows_exp, fel);
    grouped_bwd(e, deo, w->e_fc1.g, w->e_fc1_bias.g, d_fc1, a->xe, w->e_fc1.w, &p, C, d->glu * fel);
    if (!hier) {
        moe_eng_tmark_release(e, mark_x);
    }
    moe_eng_phase_enter(&e->ctx.timer, MOE_PHASE_DISPATCH);
    if (hier) {
        moe_eng_hier_dispatch_bwd(e, a, deo, dh);
    } else {
        float *recv = moe_eng_arena_floats(t, (size_t)d->rows_recv * (size_t)C);
        float *gath = moe_eng_arena_floats(t, (size_t)d->rows_exp * (size_t)C);
        float *rows = moe_eng_arena_floats(t, (size_t)d->rows_send * (size_t)C);
        k->unsort_chunks(gath, deo, p.d_chunk_rows, p.d_chunk_order, d->etp * d->ep * El, C, e->kc);
        etp_reduce(e, &p, gath, recv);
        ep_exchange(e, &p, recv, rows, false);
        k->permute_bwd(dh, rows, a->slot_to_row, Ms, K, C, true, e->kc);
    }
    moe_eng_tmark_release(e, mark_w);
    route_bwd(e, w, a, h, d_topk_w, dh);
    moe_eng_tmark_release(e, mark);
    moe_eng_phase_enter(&e->ctx.timer, prev);
}
