/*
 * moe_cost_predict: composes the per-layer costs (compute.c), the memory model (memory.c), the
 * collective table (comm_cost.c) and the pipeline schedule (schedule.c) into one step.
 *
 * Step = pipeline time (chunks' forward/backward with exposed per-layer communication, through the
 * 1F1B / interleaved schedule) + exposed DP/EDP gradient and parameter communication + optimizer +
 * fixed per-step host work. What overlaps (each cited in Megatron-LM's docs for the option):
 * - --overlap-grad-reduce: gradient reduce-scatter runs during the last micro-batch's backward;
 *   --overlap-param-gather: parameter all-gather during the first micro-batch's forward.
 * - --tp-comm-overlap: TP all-gather / reduce-scatter pipelined with the adjacent GEMMs.
 * - --overlap-moe-expert-parallel-comm: one micro-batch's dispatch/combine runs behind another's
 *   forward/backward compute (1F1B A2A overlap), taking the dispatcher's SMs from the GEMMs.
 * - Context-parallel ring exchange overlaps the attention blocks it feeds.
 * - Host launch time is hidden while the GPU has queued work; it is exposed when a pass launches
 *   more host time than it runs on the GPU, and after each dropless token-count synchronisation.
 * The fraction of overlappable communication actually hidden is the cluster's
 * overheads.overlap_eff.
 */
#include "model/cost.h"

#include "model/comm_cost.h"
#include "model/compute.h"
#include "model/flops.h"
#include "model/memory.h"
#include "model/schedule.h"

#include <math.h>
#include <string.h>

#define GIB 1073741824.0

_Static_assert(MOE_CLUSTER_NUM_RECIPES == MOE_NUM_RECIPES, "cluster recipe_eff slots");

static const char *const phase_names[MOE_NUM_PHASES] = {
    "compute", "expert_gemm", "dispatch",  "combine",   "tp_comm",       "cp_comm",
    "pp_comm", "dp_comm",     "pp_bubble", "optimizer", "host_overhead",
};

const char *moe_phase_name(enum moe_phase p)
{
    if ((int)p < 0 || p >= MOE_NUM_PHASES) {
        return "unknown";
    }
    return phase_names[p];
}

/* Exposed time of one layer pass, split by phase (seconds, one micro-batch). wait_d, wait_c,
 * wait_tp and wait_cp are the shares of dispatch, combine, tp and cp spent waiting for a slower
 * rank (the busiest EP rank, or the slowest rank of the group: host.rank_spread). */
struct pass_phases {
    double compute, expert, dispatch, combine, tp, cp, pp, host;
    double wait_d, wait_c, wait_tp, wait_cp;
    double slack;    /* GPU time of the pass its own host work leaves uncovered (not a phase) */
    double unsynced; /* compute no collective of the layer follows: it waits at the DP tail */
};

static double pos(double x)
{
    return x > 0.0 ? x : 0.0;
}

static void phases_add(struct pass_phases *a, const struct pass_phases *b, double scale)
{
    a->compute += b->compute * scale;
    a->expert += b->expert * scale;
    a->dispatch += b->dispatch * scale;
    a->combine += b->combine * scale;
    a->tp += b->tp * scale;
    a->cp += b->cp * scale;
    a->pp += b->pp * scale;
    a->host += b->host * scale;
    a->wait_d += b->wait_d * scale;
    a->wait_c += b->wait_c * scale;
    a->wait_tp += b->wait_tp * scale;
    a->wait_cp += b->wait_cp * scale;
    a->slack += b->slack * scale;
    a->unsynced += b->unsynced * scale;
}

static double phases_sum(const struct pass_phases *p)
{
    return p->compute + p->expert + p->dispatch + p->combine + p->tp + p->cp + p->pp + p->host;
}

double moe_pass_with_copy(const struct moe_pass_parts *p, double copy_s)
{
    double gpu = p->gpu_s + pos(copy_s - p->hide_s);
    return gpu > p->host_s ? gpu : p->host_s;
}

/*
 * Ranks that run at different speeds (host.rank_spread: the slowest rank's compute over the mean,
 * minus 1; measured by moefold calibrate on a CPU host, 0 in the GPU files): at every collective
 * that joins them the mean rank waits spread x the compute since the group last met. A layer's
 * attention-side compute (p->compute) ends at its TP collective, else its EP dispatch (backward:
 * combine), else its CP exchange; its expert compute at the EP combine (backward: dispatch), else
 * TP, else CP. Compute that no collective of the layer follows (DP-only layers, the loss and
 * embedding) is left in p->unsynced and waits at the gradient reduction (stage_tail).
 */
static void spread_waits(
    double s, const struct moe_layer_cost *lc, bool ep_exchange, bool bwd, struct pass_phases *p)
{
    bool tp = lc->fwd_tp + lc->bwd_tp > 0.0;
    bool cp = lc->fwd_cp + lc->bwd_cp > 0.0;
    /* EP1's dispatch and combine are local permutes: no rank meets another there */
    bool ep = ep_exchange && lc->fwd_dispatch + lc->fwd_combine > 0.0;
    double seg[2] = {p->compute, p->expert}; /* attention side, experts */
    /* The busiest EP rank's extra expert time (the load imbalance, already the exchange's wait):
     * the other ranks wait for the slowest, and a rank behind by that gap is the slowest whatever
     * the speed spread adds or takes, so the expected wait after the experts is the larger of the
     * two, not their sum (the busiest rank lands on a fast core as often as on a slow one). */
    double gap = ep ? p->wait_d + p->wait_c : 0.0;
    for (int i = 0; i < 2; i++) {
        double w = i == 1 ? pos(s * seg[i] - gap) : s * seg[i];
        bool to_dispatch = ep && (i == 0) != bwd;
        if (w <= 0.0) {
            continue;
        }
        if (i == 0 && tp) {
            p->tp += w;
            p->wait_tp += w;
        } else if (ep && to_dispatch) {
            p->dispatch += w;
            p->wait_d += w;
        } else if (ep) {
            p->combine += w;
            p->wait_c += w;
        } else if (tp) {
            p->tp += w;
            p->wait_tp += w;
        } else if (cp) {
            p->cp += w;
            p->wait_cp += w;
        } else {
            p->unsynced += seg[i];
        }
    }
}

/*
 * Exposed forward and backward phases of one layer with the options' overlaps applied; parts
 * (NULL: not wanted) gets each pass before the offload copy. with_rc: the layer is recomputed
 * (its backward re-runs lc's rc_* work first, each part in the phase of the op re-run).
 */
static void layer_exposed(const struct moe_cluster *cl,
                          const struct moe_layout *lay,
                          const struct moe_options *opt,
                          const struct moe_layer_cost *lc,
                          bool with_rc,
                          struct pass_phases *fwd,
                          struct pass_phases *bwd,
                          struct moe_pass_parts parts[2])
{
    double ov = cl->overheads.overlap_eff;
    double rc = with_rc ? 1.0 : 0.0;
    *fwd = (struct pass_phases){0};
    *bwd = (struct pass_phases){0};
    fwd->compute = lc->fwd_compute;
    /* The overlaps below see the busiest EP rank's expert time (what the next exchange waits
     * for); its part above the mean rank's is moved into that exchange as its wait at the end. */
    fwd->expert = lc->fwd_expert + lc->fwd_combine_wait;
    bwd->compute = lc->bwd_compute + rc * lc->rc_compute;
    bwd->expert =
        lc->bwd_expert + lc->bwd_dispatch_wait + rc * (lc->rc_expert + lc->rc_combine_wait);

    double tp_keep = opt->tp_comm_overlap ? 1.0 - ov : 1.0;
    fwd->tp = lc->fwd_tp * tp_keep;
    bwd->tp = (lc->bwd_tp + rc * lc->rc_tp) * tp_keep;
    fwd->cp = pos(lc->fwd_cp - ov * lc->attn_core_fwd);
    bwd->cp =
        pos(lc->bwd_cp - ov * lc->attn_core_bwd) + rc * pos(lc->rc_cp - ov * lc->attn_core_fwd);

    double bwd_disp = lc->bwd_dispatch + rc * lc->rc_dispatch;
    double bwd_comb = lc->bwd_combine + rc * lc->rc_combine;
    double ep_f = lc->fwd_dispatch + lc->fwd_combine;
    double ep_b = bwd_disp + bwd_comb;
    if (opt->overlap_moe_ep_comm && ep_f + ep_b > 0.0) {
        /* 1F1B A2A overlap pairs one micro-batch's forward with another's backward, layer by
         * layer, in Megatron-Core's issue order (docs/user-guide/features/moe_a2a_overlap.md,
         * "Fine-grained execution": F.attn | B.combine, B.expert | F.dispatch, F.expert |
         * B.dispatch, B.attn | F.combine): backward combine beside forward attention, forward
         * dispatch beside backward experts, backward dispatch beside forward experts, forward
         * combine beside backward attention. ep_overlap_eff of each pairing is achieved; the GEMMs
         * lose the dispatcher's SMs. */
        double eo = cl->overheads.ep_overlap_eff;
        double h_fd = eo * fmin(lc->fwd_dispatch, bwd->expert);
        double h_fc = eo * fmin(lc->fwd_combine, bwd->compute);
        double h_bd = eo * fmin(bwd_disp, fwd->expert);
        double h_bc = eo * fmin(bwd_comb, fwd->compute);
        fwd->dispatch = lc->fwd_dispatch - h_fd;
        fwd->combine = lc->fwd_combine - h_fc;
        bwd->dispatch = bwd_disp - h_bd;
        bwd->combine = bwd_comb - h_bc;
        /* GEMMs lose the SMs the dispatcher occupies while it runs beside them (DeepEP/HybridEP
         * take a fixed SM count; NCCL's all-to-all the cluster's measured share). */
        double loss = cl->overheads.a2a_overlap_loss;
        if (opt->dispatcher == MOE_DISPATCH_DEEPEP && cl->gpu.num_sms > 0) {
            loss = (double)cl->dispatch.deepep_sms / cl->gpu.num_sms;
        } else if (opt->dispatcher == MOE_DISPATCH_HYBRIDEP && cl->gpu.num_sms > 0) {
            loss = (double)cl->dispatch.hybridep_sms / cl->gpu.num_sms;
        }
        fwd->compute += loss * h_bc;
        fwd->expert += loss * h_bd;
        bwd->compute += loss * h_fc;
        bwd->expert += loss * h_fd;
    } else {
        fwd->dispatch = lc->fwd_dispatch;
        fwd->combine = lc->fwd_combine;
        bwd->dispatch = bwd_disp;
        bwd->combine = bwd_comb;
    }
    double host_bwd = lc->host_bwd + rc * lc->rc_host;
    if (parts != NULL) {
        parts[0] =
            (struct moe_pass_parts){fwd->compute + fwd->expert, phases_sum(fwd), lc->host_fwd};
        parts[1] = (struct moe_pass_parts){bwd->compute + bwd->expert, phases_sum(bwd), host_bwd};
    }
    /* Activation offload copies run on their own stream behind the pass's compute. */
    fwd->compute += pos(lc->offload_copy - (fwd->compute + fwd->expert));
    bwd->compute += pos(lc->offload_copy - (bwd->compute + bwd->expert));

    double gpu_f = phases_sum(fwd);
    double gpu_b = phases_sum(bwd);
    if (lc->host_fwd_post > 0.0) {
        /* The forward's token-count synchronisation (every dropless dispatcher copies the counts
         * to the host before the routed experts) empties the launch queue: the host work after
         * it (the routed experts, their exchanges) hides only behind the GPU work it launches
         * itself, and the work before it (attention, router) behind its own GPU work plus what
         * the previous layer's experts left queued. CUDA graphs of the attention and router leave
         * the experts' launches exposed (Megatron-LM docs/discussions/deepseek-v3-gb200-
         * optimization: after partial graphs "only the routed experts part still has some CPU
         * overhead"). */
        bool flex =
            opt->dispatcher == MOE_DISPATCH_DEEPEP || opt->dispatcher == MOE_DISPATCH_HYBRIDEP;
        double gpu_post =
            pos(fwd->expert - lc->fwd_shared) + fwd->combine + (flex ? 0.0 : fwd->dispatch);
        double gpu_pre = pos(gpu_f - gpu_post);
        /* Under the 1F1B A2A overlap the paired backward's expert GEMMs are launched before the
         * forward's synchronisation (Megatron-Core's combined layer schedule issues B.combine,
         * F.attention and router, B.experts, then F.dispatch) and queued behind the router on
         * the compute stream: the synchronisation does not wait for them, and the launches after
         * it hide behind them too. The all-to-all dispatcher synchronises on the counts' copy
         * before its exchange, so all of them remain; DeepEP and HybridEP return the counts
         * with the dispatch, so only the part longer than the dispatch. */
        double behind = 0.0;
        if (opt->overlap_moe_ep_comm) {
            behind = flex ? pos(bwd->expert - fwd->dispatch) : bwd->expert;
        }
        double host_pre = pos(lc->host_fwd - lc->host_fwd_post);
        double queued = pos(gpu_post + behind - lc->host_fwd_post);
        fwd->host = pos(lc->host_fwd_post - gpu_post - behind) + pos(host_pre - gpu_pre - queued) +
                    lc->host_sync;
    } else {
        fwd->host = pos(lc->host_fwd - gpu_f) + lc->host_sync;
    }
    bwd->host = pos(host_bwd - gpu_b) + rc * lc->rc_host_sync;
    if (opt->overlap_moe_ep_comm) {
        /* One host thread issues both passes of a pair: together they take at least its time. */
        double pair = pos(lc->host_fwd + host_bwd - gpu_f - gpu_b) + lc->host_sync;
        fwd->host += pos(pair - fwd->host - bwd->host);
    }
    fwd->slack = pos(gpu_f - lc->host_fwd);
    bwd->slack = pos(gpu_b - host_bwd);
    /* The wait for the busiest rank belongs to the exchange after the expert GEMMs: forward
     * combine, backward dispatch (the engine measures it there); a recomputed forward's combine
     * waits in the backward pass too. */
    fwd->wait_c = fmin(lc->fwd_combine_wait, fwd->expert);
    fwd->expert -= fwd->wait_c;
    fwd->combine += fwd->wait_c;
    bwd->wait_d = fmin(lc->bwd_dispatch_wait, bwd->expert);
    bwd->expert -= bwd->wait_d;
    bwd->dispatch += bwd->wait_d;
    bwd->wait_c = fmin(rc * lc->rc_combine_wait, bwd->expert);
    bwd->expert -= bwd->wait_c;
    bwd->combine += bwd->wait_c;
    if (cl->host.rank_spread > 0.0) {
        spread_waits(cl->host.rank_spread, lc, lay->ep > 1, false, fwd);
        spread_waits(cl->host.rank_spread, lc, lay->ep > 1, true, bwd);
    }
}

/* The loss, MTP and embedding passes, the schedule's host work, the DP groups and the pipeline
 * transfer of a layout and option set: read no recompute or activation-offload knob. */
struct extras {
    struct pass_phases loss_f, loss_b, mtp_f, mtp_b, emb_f, emb_b;
    double p2p_s;
    double sched_f, sched_b, sched_move;
    struct moe_group_place dp_group, edp_group;
};

/*
 * Layer costs kept in a workspace (moe_cost_prep.memo_cl): moe_compute_layer_base of a layer kind,
 * load factor and option set on the workspace's layout and cluster, which reads no recompute or
 * activation-offload knob and none of the others layer_memo_key clears (DP overlaps and sharding,
 * optimizer placement and state types, TP and EP overlap, the imbalance inputs: the load factor
 * comes in computed; model/compute.c). Option sets that differ only there share one base, and
 * each call finishes it with its own options (moe_compute_layer_finish): the search predicts every
 * recompute, offload and time-only value of each option group, so most bases repeat. Slots are
 * compared byte for byte (a difference in padding only misses), replaced in turn, and emptied
 * whenever the workspace's layout key is rebuilt or the cluster changes.
 */
#define LAYER_MEMO_SLOTS 8
struct layer_memo_slot {
    struct moe_options opt; /* layer_memo_key's copy */
    double load;
    int kind; /* is_moe + 2 * is_windowed; -1 empty */
    struct moe_layer_base base;
};
/* The loss, MTP and embedding terms of an option set (extras_of), keyed by extras_memo_key. */
#define EXTRAS_SLOTS 4
struct extras_slot {
    struct moe_options opt;
    bool used;
    struct extras e;
};
struct ws_memo {
    const struct moe_cluster *cl; /* the cluster the slots hold costs on */
    int next;                     /* layer slot replaced next */
    struct layer_memo_slot slot[LAYER_MEMO_SLOTS];
    int ex_next; /* extras slot replaced next */
    struct extras_slot ex[EXTRAS_SLOTS];
};

static void ws_memo_clear(struct ws_memo *m, const struct moe_cluster *cl)
{
    m->cl = cl;
    m->next = 0;
    for (int i = 0; i < LAYER_MEMO_SLOTS; i++) {
        m->slot[i].kind = -1;
    }
    m->ex_next = 0;
    for (int i = 0; i < EXTRAS_SLOTS; i++) {
        m->ex[i].used = false;
    }
}

/* opt with its recompute and activation-offload knobs cleared (extras_compute reads neither). */
static void extras_memo_key(const struct moe_options *opt, struct moe_options *key)
{
    memcpy(key, opt, sizeof(*key));
    key->recompute = MOE_RECOMPUTE_NONE;
    key->recompute_method = MOE_RECOMPUTE_UNIFORM;
    key->recompute_num_layers = 0;
    key->recompute_modules = 0u;
    key->cpu_offloading_num_layers = 0;
    key->fine_grained_offload = false;
    key->offload_modules = 0u;
}

/* opt with the knobs moe_compute_layer_base does not read cleared (see above): the recompute and
 * offload knobs as extras_memo_key clears them, and the rest. */
static void layer_memo_key(const struct moe_options *opt, struct moe_options *key)
{
    extras_memo_key(opt, key);
    key->fp8_param_gather = false;
    key->use_distributed_optimizer = false;
    key->overlap_grad_reduce = false;
    key->overlap_param_gather = false;
    key->tp_comm_overlap = false;
    key->overlap_moe_ep_comm = false;
    key->delay_wgrad_compute = false;
    key->precision_aware_optimizer = false;
    key->optimizer_cpu_offload = false;
    key->optimizer_offload_fraction = 0.0;
    key->exp_avg_dtype = MOE_DTYPE_FP32;
    key->exp_avg_sq_dtype = MOE_DTYPE_FP32;
    key->moe_imbalance = 0.0;
    key->moe_hot_expert_replicas = 0;
}

/* Everything predict needs per call, computed once. */
struct pctx {
    const struct moe_model_cfg *cfg;
    bool is_moe;
    const struct moe_cluster *cl;
    const struct moe_layout *lay;
    const struct moe_options *opt;
    double load;
    /* Per layer kind [is_moe][is_windowed]: a pass of a layer as the options recompute it (with
     * block recompute, a recomputed layer); kind_b_plain a backward without recompute (block
     * recompute's other layers, and MTP layers). */
    struct pass_phases kind_f[2][2];
    struct pass_phases kind_b[2][2];
    struct pass_phases kind_b_plain[2][2];
    struct moe_pass_parts kind_parts[2][2][2]; /* before the offload copy (moe_prediction) */
    bool kind_ready[2][2];
    bool block_rc; /* full recompute, block method: the first rc_block layers of each chunk */
    int rc_block;
    struct pass_phases loss_f, loss_b, mtp_f, mtp_b, emb_f, emb_b;
    double p2p_s;
    double sched_f, sched_b, sched_move; /* host: the schedule's work per chunk pass, transfer */
    double ep_bytes_layer, ep_inter_layer, tp_bytes_layer, cp_bytes_layer;
    double ep_s_layer, tp_s_layer, cp_s_layer;
    double recompute_ratio; /* recompute / (fwd + bwd compute) of the last layer kind costed */
    const struct moe_gpu_params *params;       /* [pp] per pipeline rank */
    const struct moe_chunk_kinds *kinds;       /* [num_chunks] decoder layers by kind */
    const struct moe_stage_contents *contents; /* [pp] */
    struct moe_group_place dp_group;           /* DP x CP group (dense gradients) */
    struct moe_group_place edp_group;          /* EDP group (expert gradients) */
    struct ws_memo *memo;                      /* the workspace's memo; NULL: none */
};

double moe_cost_offload_bytes(const struct moe_model_cfg *cfg,
                              const struct moe_layout *lay,
                              const struct moe_options *opt,
                              bool is_moe,
                              double load_factor)
{
    if (!opt->fine_grained_offload && opt->cpu_offloading_num_layers <= 0) {
        return 0.0;
    }
    struct moe_act_bytes rc;
    struct moe_act_bytes both;
    moe_mem_layer_activations(cfg, lay, opt, is_moe, load_factor, MOE_MEM_APPLY_RECOMPUTE, &rc);
    double bytes = 0.0;
    if (opt->fine_grained_offload) {
        moe_mem_layer_activations(cfg, lay, opt, is_moe, load_factor,
                                  MOE_MEM_APPLY_RECOMPUTE | MOE_MEM_APPLY_OFFLOAD, &both);
        bytes += rc.total - both.total;
    }
    if (opt->cpu_offloading_num_layers > 0) {
        bytes += rc.total; /* whole layers are offloaded (an upper bound per offloaded layer) */
    }
    return bytes;
}

/* moe_compute_layer of a layer kind with the options' offload bytes, its base from the
 * workspace's memo when that holds it. */
static void layer_cost(const struct pctx *x, bool is_moe, bool windowed, struct moe_layer_cost *lc)
{
    struct moe_layer_kind kind = {is_moe, windowed};
    double off = moe_cost_offload_bytes(x->cfg, x->lay, x->opt, is_moe, x->load);
    struct ws_memo *m = x->memo;
    if (m == NULL) {
        moe_compute_layer(x->cfg, x->cl, x->lay, x->opt, kind, x->load, off, lc);
        return;
    }
    struct moe_options key;
    layer_memo_key(x->opt, &key);
    int k = (is_moe ? 1 : 0) + (windowed ? 2 : 0);
    struct layer_memo_slot *hit = NULL;
    for (int i = 0; i < LAYER_MEMO_SLOTS && hit == NULL; i++) {
        struct layer_memo_slot *sl = &m->slot[i];
        if (sl->kind == k && memcmp(&sl->load, &x->load, sizeof(sl->load)) == 0 &&
            memcmp(&sl->opt, &key, sizeof(key)) == 0) {
            hit = sl;
        }
    }
    if (hit == NULL) {
        hit = &m->slot[m->next];
        m->next = (m->next + 1) % LAYER_MEMO_SLOTS;
        moe_compute_layer_base(x->cfg, x->cl, x->lay, x->opt, kind, x->load, &hit->base);
        memcpy(&hit->opt, &key, sizeof(key));
        hit->load = x->load;
        hit->kind = k;
    }
    moe_compute_layer_finish(x->cfg, x->cl, x->lay, x->opt, kind, &hit->base, off, lc);
}

static void ensure_kind(struct pctx *x, bool is_moe, bool windowed)
{
    if (x->kind_ready[is_moe][windowed]) {
        return;
    }
    struct moe_layer_cost lc;
    layer_cost(x, is_moe, windowed, &lc);
    layer_exposed(x->cl, x->lay, x->opt, &lc, true, &x->kind_f[is_moe][windowed],
                  &x->kind_b[is_moe][windowed], x->kind_parts[is_moe][windowed]);
    struct pass_phases f_plain;
    layer_exposed(x->cl, x->lay, x->opt, &lc, false, &f_plain, &x->kind_b_plain[is_moe][windowed],
                  NULL);
    x->kind_ready[is_moe][windowed] = true;
    double base = lc.fwd_compute + lc.bwd_compute + lc.fwd_expert + lc.bwd_expert +
                  lc.fwd_combine_wait + lc.bwd_dispatch_wait;
    if (is_moe == x->is_moe && base > 0.0) {
        x->recompute_ratio = lc.recompute / base;
    }
    if (is_moe || x->ep_bytes_layer == 0.0) {
        x->ep_bytes_layer = is_moe ? lc.ep_bytes : x->ep_bytes_layer;
        x->ep_inter_layer = is_moe ? lc.ep_inter_bytes : x->ep_inter_layer;
    }
    if (is_moe) {
        x->ep_s_layer = lc.fwd_dispatch + lc.fwd_combine + lc.bwd_dispatch + lc.bwd_combine;
    }
    x->tp_bytes_layer = lc.tp_bytes;
    x->tp_s_layer = lc.fwd_tp + lc.bwd_tp;
    x->cp_bytes_layer = lc.cp_bytes;
    x->cp_s_layer = lc.fwd_cp + lc.bwd_cp;
}

static void extras_compute(const struct pctx *x, struct extras *e)
{
    struct moe_layer_cost lc;
    moe_compute_loss(x->cfg, x->cl, x->lay, x->opt, &lc);
    layer_exposed(x->cl, x->lay, x->opt, &lc, false, &e->loss_f, &e->loss_b, NULL);
    moe_compute_mtp_extra(x->cfg, x->cl, x->lay, x->opt, &lc);
    layer_exposed(x->cl, x->lay, x->opt, &lc, false, &e->mtp_f, &e->mtp_b, NULL);
    moe_compute_embedding(x->cfg, x->cl, x->lay, x->opt, &lc);
    layer_exposed(x->cl, x->lay, x->opt, &lc, false, &e->emb_f, &e->emb_b, NULL);

    e->sched_f = moe_compute_sched_host_s(x->cl, x->opt, 1, 0, false);
    e->sched_b = moe_compute_sched_host_s(x->cl, x->opt, 1, 0, true);
    e->sched_move = moe_compute_sched_host_s(x->cl, x->opt, 0, 1, false);

    /* Pipeline transfers: the SP-sharded hidden state of one micro-batch. */
    const struct moe_layout *lay = x->lay;
    moe_comm_group_place(lay->dp * lay->cp, lay->tp, x->cl->nvlink.domain_gpus, &e->dp_group);
    moe_comm_group_place(lay->edp, lay->etp * lay->ep, x->cl->nvlink.domain_gpus, &e->edp_group);
    e->p2p_s = 0.0;
    if (lay->pp > 1) {
        int stage_ranks = lay->tp * lay->cp * lay->dp;
        struct moe_group_place g;
        moe_comm_group_place(lay->pp, stage_ranks, x->cl->nvlink.domain_gpus, &g);
        double t = (double)lay->mbs * lay->seq_length / lay->cp;
        double t_sp = lay->sequence_parallel ? t / lay->tp : t;
        double ab = x->opt->is_fp32_training ? 4.0 : 2.0;
        e->p2p_s = moe_comm_p2p_s(x->cl, g.num_domains == 1, t_sp * x->cfg->hidden_size * ab);
    }
}

/* extras_compute of x, from the workspace's memo when that holds it (keyed as layer costs are,
 * with the whole option set but its recompute and offload knobs). */
static const struct extras *extras_of(const struct pctx *x, struct extras *own)
{
    struct ws_memo *m = x->memo;
    if (m == NULL) {
        extras_compute(x, own);
        return own;
    }
    struct moe_options key;
    extras_memo_key(x->opt, &key);
    for (int i = 0; i < EXTRAS_SLOTS; i++) {
        if (m->ex[i].used && memcmp(&m->ex[i].opt, &key, sizeof(key)) == 0) {
            return &m->ex[i].e;
        }
    }
    struct extras_slot *sl = &m->ex[m->ex_next];
    m->ex_next = (m->ex_next + 1) % EXTRAS_SLOTS;
    extras_compute(x, &sl->e);
    memcpy(&sl->opt, &key, sizeof(key));
    sl->used = true;
    return &sl->e;
}

static void extras_init(struct pctx *x)
{
    struct extras own;
    const struct extras *e = extras_of(x, &own);
    x->loss_f = e->loss_f;
    x->loss_b = e->loss_b;
    x->mtp_f = e->mtp_f;
    x->mtp_b = e->mtp_b;
    x->emb_f = e->emb_f;
    x->emb_b = e->emb_b;
    x->sched_f = e->sched_f;
    x->sched_b = e->sched_b;
    x->sched_move = e->sched_move;
    x->dp_group = e->dp_group;
    x->edp_group = e->edp_group;
    x->p2p_s = e->p2p_s;
    x->block_rc =
        x->opt->recompute == MOE_RECOMPUTE_FULL && x->opt->recompute_method == MOE_RECOMPUTE_BLOCK;
    x->rc_block = x->opt->recompute_num_layers > 0 ? x->opt->recompute_num_layers : 1;
}

/* Decoder layers block recompute re-runs in a chunk of `layers` layers (Megatron's block method:
 * the first recompute_num_layers of each model chunk); every layer otherwise. */
static int rc_layers_of_chunk(const struct pctx *x, int layers)
{
    if (!x->block_rc) {
        return layers;
    }
    return layers < x->rc_block ? layers : x->rc_block;
}

/*
 * Forward/backward phases of a span of chunks for one micro-batch: n[is_moe][is_windowed] decoder
 * layers of which num_rc are recomputed (block recompute; the kinds share them in proportion),
 * num_mtp MTP layers, the embedding and loss if present, and the pipeline transfers it sends
 * forward (sends_f) and backward (sends_b).
 */
static void span_phases(struct pctx *x,
                        const int (*n)[2],
                        int num_rc,
                        int num_mtp,
                        bool has_embedding,
                        bool has_loss,
                        int chunks,
                        int sends_f,
                        int sends_b,
                        struct pass_phases *f,
                        struct pass_phases *b)
{
    const struct moe_model_cfg *cfg = x->cfg;
    *f = (struct pass_phases){0};
    *b = (struct pass_phases){0};
    int total = n[0][0] + n[0][1] + n[1][0] + n[1][1];
    double rc_share = total > 0 ? (double)num_rc / total : 0.0;
    for (int m = 0; m < 2; m++) {
        for (int w = 0; w < 2; w++) {
            if (n[m][w] > 0) {
                ensure_kind(x, m, w);
                phases_add(f, &x->kind_f[m][w], n[m][w]);
                phases_add(b, &x->kind_b[m][w], n[m][w] * rc_share);
                phases_add(b, &x->kind_b_plain[m][w], n[m][w] * (1.0 - rc_share));
            }
        }
    }
    if (num_mtp > 0 && cfg->num_layers > 0) {
        uint8_t last = cfg->layer_flags[cfg->num_layers - 1];
        bool is_moe = (last & MOE_LAYER_MOE) != 0;
        bool win = (last & MOE_LAYER_WINDOWED) != 0;
        ensure_kind(x, is_moe, win);
        double k = num_mtp;
        phases_add(f, &x->kind_f[is_moe][win], k);
        /* Block recompute counts decoder layers only; uniform recompute re-runs MTP's too. */
        phases_add(b, x->block_rc ? &x->kind_b_plain[is_moe][win] : &x->kind_b[is_moe][win], k);
        phases_add(f, &x->mtp_f, k);
        phases_add(b, &x->mtp_b, k);
        phases_add(f, &x->loss_f, k);
        phases_add(b, &x->loss_b, k);
    }
    if (has_embedding) {
        phases_add(f, &x->emb_f, 1.0);
        phases_add(b, &x->emb_b, 1.0);
    }
    if (has_loss) {
        phases_add(f, &x->loss_f, 1.0);
        phases_add(b, &x->loss_b, 1.0);
    }
    /* The schedule's own host work per chunk pass runs between the chunks' layers: hidden while
     * the GPU still has work its layers' launches left it, exposed past that. */
    int moves = sends_f + sends_b;
    f->host += pos(chunks * x->sched_f + moves * x->sched_move - f->slack);
    b->host += pos(chunks * x->sched_b + moves * x->sched_move - b->slack);
    /* Non-interleaved 1F1B blocks on its sends and receives; interleaving overlaps them. */
    if (x->lay->pp > 1) {
        double keep = x->lay->vpp > 1 ? 1.0 - x->cl->overheads.overlap_eff : 1.0;
        f->pp += sends_f * x->p2p_s * keep;
        b->pp += sends_b * x->p2p_s * keep;
    }
}

/* Forward/backward phases of chunk c for one micro-batch. */
static void chunk_phases(struct pctx *x, int c, struct pass_phases *f, struct pass_phases *b)
{
    const struct moe_pp_chunk *ch = &x->lay->chunks[c];
    int last = x->lay->num_chunks - 1;
    span_phases(x, x->kinds[c].n, rc_layers_of_chunk(x, ch->num_layers), ch->num_mtp,
                ch->has_embedding, ch->has_loss, 1, c<last, c> 0, f, b);
}

/* Forward/backward phases of all chunks of pipeline rank p for one micro-batch. */
static void stage_phases(struct pctx *x, int p, struct pass_phases *f, struct pass_phases *b)
{
    const struct moe_layout *lay = x->lay;
    int n[2][2] = {{0, 0}, {0, 0}};
    int sends_f = 0;
    int sends_b = 0;
    int num_rc = 0;
    int last = lay->num_chunks - 1;
    for (int c = p; c < lay->num_chunks; c += lay->pp) {
        for (int m = 0; m < 2; m++) {
            n[m][0] += x->kinds[c].n[m][0];
            n[m][1] += x->kinds[c].n[m][1];
        }
        num_rc += rc_layers_of_chunk(x, lay->chunks[c].num_layers);
        sends_f += c < last;
        sends_b += c > 0;
    }
    const struct moe_stage_contents *sc = &x->contents[p];
    span_phases(x, (const int(*)[2])n, num_rc, sc->num_mtp, sc->has_embedding, sc->has_loss,
                lay->vpp, sends_f, sends_b, f, b);
}

/*
 * DP / EDP communication and optimizer of one stage; exposed seconds. The step's one
 * synchronisation of every rank is the gradient-norm all-reduce: before it a stage reduces its
 * gradients (dp_pre) and reads them for the norm (opt_pre); after it Adam updates the shard, the
 * parameters are gathered (dp_post) and the gradients zeroed for the next step (opt_post).
 */
struct stage_tail {
    double dp_exposed, dp_total, dp_bytes, optimizer;
    double dp_pre, dp_post, opt_pre, opt_post;
    double dp_wait; /* dp_pre's share spent waiting for the slowest rank (host.rank_spread) */
};

/* unsynced_s: the stage's compute per step that no layer collective followed (spread_waits). */
static void stage_tail(const struct pctx *x,
                       const struct moe_gpu_params *params,
                       double fwd_window,
                       double bwd_window,
                       double unsynced_s,
                       struct stage_tail *out)
{
    const struct moe_options *opt = x->opt;
    const struct moe_cluster *cl = x->cl;
    const struct moe_gpu_params p = *params;

    double grad_b = moe_dtype_bytes(opt->main_grads_dtype);
    double param_b = opt->fp8_param_gather ? 1.0 : (opt->is_fp32_training ? 4.0 : 2.0);
    const struct moe_group_place gd = x->dp_group;
    const struct moe_group_place ge = x->edp_group;
    double rs;
    double ag = 0.0;
    if (opt->use_distributed_optimizer) {
        rs = moe_comm_reducescatter_s(cl, &gd, p.dense * grad_b) +
             moe_comm_reducescatter_s(cl, &ge, p.expert * grad_b);
        ag = moe_comm_allgather_s(cl, &gd, p.dense * param_b) +
             moe_comm_allgather_s(cl, &ge, p.expert * param_b);
    } else {
        rs = moe_comm_allreduce_s(cl, &gd, p.dense * grad_b) +
             moe_comm_allreduce_s(cl, &ge, p.expert * grad_b);
    }
    double ov = cl->overheads.overlap_eff;
    out->dp_total = rs + ag;
    out->dp_pre = opt->overlap_grad_reduce ? pos(rs - ov * bwd_window) : rs;
    out->dp_post = opt->overlap_param_gather ? pos(ag - ov * fwd_window) : ag;
    /* The gradient reduction joins the DP ranks: the mean one waits there for the compute that no
     * layer collective followed (spread_waits). */
    out->dp_wait = gd.size > 1 || ge.size > 1 ? cl->host.rank_spread * unsynced_s : 0.0;
    out->dp_pre += out->dp_wait;
    out->dp_exposed = out->dp_pre + out->dp_post;
    double nd = (double)gd.size;
    double ne = (double)ge.size;
    out->dp_bytes = (p.dense * grad_b +
                     (opt->use_distributed_optimizer ? p.dense * param_b : p.dense * grad_b)) *
                        (nd - 1.0) / nd +
                    (p.expert * grad_b +
                     (opt->use_distributed_optimizer ? p.expert * param_b : p.expert * grad_b)) *
                        (ne - 1.0) / ne;

    /* The global gradient norm reads the local shard's gradients once (Megatron's
     * get_grad_norm_fp32 before clipping); Adam then reads/writes master, two moments and reads the
     * gradient; the updated fp32 master is read again and written into the model's weight
     * (Megatron's _copy_main_params_to_model_params; the engine's gather_params). The engine's
     * step does exactly these streams, at the rate gpu.optimizer_eff (a CPU host: AdamW's bench
     * row, cli/calibrate.c). */
    double shard =
        opt->use_distributed_optimizer ? p.dense / nd + p.expert / ne : p.dense + p.expert;
    double state_b =
        4.0 + moe_dtype_bytes(opt->exp_avg_dtype) + moe_dtype_bytes(opt->exp_avg_sq_dtype);
    double per_param = 2.0 * state_b + 2.0 * grad_b + 4.0 + param_b;
    double hbm = cl->gpu.hbm_tbps * 1e12 * cl->gpu.optimizer_eff; /* the optimizer's own rate */
    double zero_grads = (p.dense + p.expert) * grad_b / hbm;
    double opt_s = shard * per_param / hbm + zero_grads;
    if (opt->optimizer_cpu_offload) {
        double frac = opt->optimizer_offload_fraction > 0.0 ? opt->optimizer_offload_fraction : 1.0;
        double link =
            cl->host.link_gbps * 1e9 * (cl->host.link_eff > 0.0 ? cl->host.link_eff : 1.0);
        /* Gradients down and weights up over the host link, then the host's optimizer pass
         * over its share of the state: at the host's measured optimizer rate where the cluster
         * has one (a CPU host calibration: the same cores run it), else bounded by the link
         * (streaming the state at link speed or better). */
        double host_rate = cl->host.optimizer_gbps > 0.0 ? cl->host.optimizer_gbps * 1e9 : link;
        double copies = shard * frac * (grad_b + param_b) / link;
        double host_pass = shard * frac * per_param / host_rate;
        opt_s = shard * (1.0 - frac) * per_param / hbm + zero_grads + copies + host_pass;
    }
    out->optimizer = opt_s;
    out->opt_pre = shard * grad_b / hbm; /* the norm's read of the gradient shard */
    out->opt_post = opt_s - out->opt_pre;
}

/*
 * The start of the workspace records which model and layout its per-layout arrays (decoder layers
 * per chunk by kind, each pipeline rank's contents and parameter counts: functions of the model
 * and the layout only) were computed for. A caller that predicts many option sets of one layout
 * with one workspace -- the search does -- computes them once: 15-25% of a closed-form predict.
 * A workspace never used, or used for another model or layout, fails the comparison and is
 * recomputed; the model is identified by its address and a hash of its bytes (moe_cost_prepare).
 * After the key comes the memo of layer bases and extras (struct ws_memo), emptied with it.
 */
#define WS_MAGIC 0x6d6f65666f6c6431ULL
struct ws_key {
    uint64_t magic;
    uint64_t cfg_hash;
    const struct moe_model_cfg *cfg;
    unsigned char layout[offsetof(struct moe_layout, chunks)]; /* the layout's scalar fields */
};

/* Bytes of the key, and of the key and the memo after it (ws_memo), ahead of the per-stage arrays;
 * each rounded up to a multiple of sizeof(double). */
static size_t ws_key_bytes(void)
{
    return (sizeof(struct ws_key) + sizeof(double) - 1) / sizeof(double) * sizeof(double);
}

static size_t ws_head_bytes(void)
{
    return ws_key_bytes() +
           (sizeof(struct ws_memo) + sizeof(double) - 1) / sizeof(double) * sizeof(double);
}

/* Per-stage arrays carved from the workspace ahead of the schedule's; rounded up to a multiple of
 * sizeof(double) so the schedule's double arrays that follow stay aligned (UBSan: misaligned). */
static size_t stage_arrays_bytes(const struct moe_layout *lay)
{
    size_t chunks = (size_t)lay->pp * (size_t)lay->vpp;
    size_t pp = (size_t)lay->pp;
    size_t key = ws_head_bytes();
    size_t bytes = key + 2 * chunks * sizeof(double) + pp * sizeof(struct moe_gpu_params) +
                   pp * sizeof(struct moe_stage_contents) +
                   chunks * sizeof(struct moe_chunk_kinds) + chunks * sizeof(struct moe_pp_chunk);
    return (bytes + sizeof(double) - 1) / sizeof(double) * sizeof(double);
}

/* What the simulated step keeps per pipeline stage (after the schedule's own workspace). */
struct sim_stage {
    struct pass_phases f, b; /* one micro-batch's forward and backward (all doubles: the array
                              * of start times that follows stays aligned) */
    struct stage_tail tail;
    double start_s; /* when its schedule starts, from the step's synchronisation */
};

size_t moe_cost_workspace_bytes(const struct moe_layout *lay, enum moe_schedule_mode mode)
{
    size_t arrays = stage_arrays_bytes(lay);
    if (mode == MOE_SCHED_CLOSED_FORM) {
        return arrays;
    }
    size_t sched = moe_sched_workspace_bytes(lay->pp, lay->vpp, lay->num_microbatches);
    sched = (sched + sizeof(double) - 1) / sizeof(double) * sizeof(double);
    return arrays + sched + (size_t)lay->pp * (sizeof(struct sim_stage) + sizeof(double)) +
           2 * (size_t)lay->num_chunks * sizeof(struct pass_phases);
}

/*
 * True when pipeline rank p holds the same layers, MTP, embedding and loss as rank p - 1 and
 * neither holds the first or the last chunk: its phases, tail and (with no more micro-batches in
 * flight) memory cannot differ.
 */
static bool stage_repeats(const struct pctx *x, int p)
{
    const struct moe_layout *lay = x->lay;
    if (p <= 1 || p >= lay->pp - 1) {
        return false; /* rank 0 holds chunk 0, rank pp-1 the last chunk */
    }
    const struct moe_stage_contents *a = &x->contents[p];
    const struct moe_stage_contents *c = &x->contents[p - 1];
    if (a->num_dense != c->num_dense || a->num_moe != c->num_moe ||
        a->num_windowed != c->num_windowed || a->num_mtp != c->num_mtp ||
        a->has_embedding != c->has_embedding || a->has_loss != c->has_loss ||
        a->has_output_weight != c->has_output_weight || a->num_chunks != c->num_chunks) {
        return false;
    }
    for (int k = p; k < lay->num_chunks; k += lay->pp) {
        if (memcmp(&x->kinds[k], &x->kinds[k - 1], sizeof(x->kinds[k])) != 0) {
            return false;
        }
    }
    return true;
}

struct step_time {
    double total;
    struct moe_phase_times t;
    struct moe_phase_times wait; /* shares of t spent waiting for a slower rank */
    double stage_max_s, stage0_s;
    double dp_bytes, dp_total;
    int critical_stage;
};

/* Phase times of stage phases f + b repeated m times (scaled to what the schedule ran). */
static void phases_to_times(const struct pass_phases *ph,
                            double scale,
                            struct moe_phase_times *t,
                            struct moe_phase_times *w)
{
    t->compute = ph->compute * scale;
    t->expert_gemm = ph->expert * scale;
    t->dispatch = ph->dispatch * scale;
    t->combine = ph->combine * scale;
    t->tp_comm = ph->tp * scale;
    t->cp_comm = ph->cp * scale;
    t->pp_comm = ph->pp * scale;
    t->host_overhead = ph->host * scale;
    w->dispatch = ph->wait_d * scale;
    w->combine = ph->wait_c * scale;
    w->tp_comm = ph->wait_tp * scale;
    w->cp_comm = ph->wait_cp * scale;
}

static void times_finish(struct moe_phase_times *t)
{
    t->ep_comm = t->dispatch + t->combine;
    t->exposed_comm = t->ep_comm + t->tp_comm + t->cp_comm + t->pp_comm + t->dp_comm;
}

static double times_total(const struct moe_phase_times *t)
{
    return t->compute + t->expert_gemm + t->ep_comm + t->tp_comm + t->cp_comm + t->pp_comm +
           t->dp_comm + t->pp_bubble + t->optimizer + t->host_overhead;
}

/* The sim_stage array after the schedule's workspace. */
static struct sim_stage *sim_stages(const struct moe_layout *lay, void *sim_ws)
{
    size_t sched = moe_sched_workspace_bytes(lay->pp, lay->vpp, lay->num_microbatches);
    sched = (sched + sizeof(double) - 1) / sizeof(double) * sizeof(double);
    return (struct sim_stage *)(void *)((char *)sim_ws + sched);
}

/*
 * Pipelines whose first and last stages share the embedding's gradient (tied embeddings, or MTP
 * layers on the last stage reading the input embedding) sum it over those two stages after
 * reducing their gradients and before the gradient norm (Megatron-LM's embedding all-reduce in
 * finalize_model_grads; engine/optimizer.c finish_reductions): the one of the two that gets there
 * first waits there for the other. That wait is dp_comm's, as the engine measures it (it was
 * booked as optimizer wait, which the engine measured as 0 and its dp_comm wait as 3.1 ms of a
 * 108 ms step: validate dsv3-pp2-mtp). Returns it for stage p (0 for every other stage and
 * layout); the stages then meet at the gradient-norm all-reduce as before.
 */
static double embed_wait_s(const struct moe_model_cfg *cfg,
                           const struct moe_layout *lay,
                           const struct moe_sched_input *in,
                           const void *sim_ws,
                           const struct sim_stage *ss,
                           int p)
{
    int last = lay->pp - 1;
    if (lay->pp < 2 || (p != 0 && p != last) ||
        (cfg->is_untied_embeddings && cfg->mtp_num_layers == 0)) {
        return 0.0;
    }
    double arrive[2];
    for (int i = 0; i < 2; i++) {
        int q = i == 0 ? 0 : last;
        double end = 0.0;
        double busy = 0.0;
        moe_sched_rank_times(in, sim_ws, q, &end, &busy);
        arrive[i] = end + ss[q].tail.dp_pre;
    }
    return pos(fmax(arrive[0], arrive[1]) - arrive[p == 0 ? 0 : 1]);
}

/*
 * The simulated step, stage by stage. Time 0 is the step's synchronisation (the gradient-norm
 * all-reduce, the only collective of every rank); stage p then runs its post-synchronisation work
 * (Adam, parameter gather, zeroing gradients, the fixed per-step host work) and starts its schedule
 * at start_p, without waiting for the others. Its last backward ends at end_p; it reduces and reads
 * its gradients (pre_p) and waits in the all-reduce for the last stage, which ends the step:
 * T = max_p (end_p + pre_p). Per stage: pp_bubble = the idle time inside its schedule, the
 * optimizer's wait share = T - end_p - pre_p. The critical stage is the one with the most time
 * that is neither idle nor waiting; its phases are the prediction's (they sum to T).
 */
static enum moe_status simulate_step(struct pctx *x,
                                     double *fwd,
                                     double *bwd,
                                     void *sim_ws,
                                     size_t sim_ws_bytes,
                                     struct step_time *st)
{
    const struct moe_layout *lay = x->lay;
    int pp = lay->pp;
    double m = lay->num_microbatches;
    double fixed = x->cl->overheads.step_fixed_ms * 1e-3;
    struct sim_stage *ss = sim_stages(lay, sim_ws);
    for (int p = 0; p < pp; p++) {
        if (p > 0 && stage_repeats(x, p)) {
            ss[p] = ss[p - 1];
            continue;
        }
        stage_phases(x, p, &ss[p].f, &ss[p].b);
        stage_tail(x, &x->params[p], phases_sum(&ss[p].f), phases_sum(&ss[p].b),
                   m * (ss[p].f.unsynced + ss[p].b.unsynced), &ss[p].tail);
        ss[p].start_s = ss[p].tail.dp_post + ss[p].tail.opt_post + fixed;
    }
    double *starts = (double *)(void *)(ss + pp); /* [pp], the schedule's stride-1 input */
    struct pass_phases *chunk_ph = (struct pass_phases *)(void *)(starts + pp); /* [chunks][2] */
    for (int c = 0; c < lay->num_chunks; c++) {
        chunk_phases(x, c, &chunk_ph[2 * c], &chunk_ph[2 * c + 1]);
        fwd[c] = phases_sum(&chunk_ph[2 * c]);
        bwd[c] = phases_sum(&chunk_ph[2 * c + 1]);
    }
    for (int p = 0; p < pp; p++) {
        starts[p] = ss[p].start_s;
    }
    struct moe_sched_input in = {pp, lay->vpp, lay->num_microbatches, fwd, bwd, x->p2p_s, starts};
    struct moe_sched_result res;
    MOE_TRY(moe_sched_simulate(&in, sim_ws, sim_ws_bytes, &res));
    double total = 0.0;
    for (int p = 0; p < pp; p++) {
        double end = 0.0;
        double busy = 0.0;
        moe_sched_rank_times(&in, sim_ws, p, &end, &busy);
        total = fmax(total, end + ss[p].tail.dp_pre + ss[p].tail.opt_pre);
    }
    double best = -1.0;
    for (int p = 0; p < pp; p++) {
        double end = 0.0;
        double busy = 0.0;
        moe_sched_rank_times(&in, sim_ws, p, &end, &busy);
        const struct sim_stage *s = &ss[p];
        struct pass_phases both = s->f;
        phases_add(&both, &s->b, 1.0);
        double per_mb = phases_sum(&both);
        double scale = per_mb > 0.0 ? busy / per_mb : m;
        struct moe_phase_times t = {0};
        struct moe_phase_times w = {0};
        phases_to_times(&both, scale, &t, &w);
        t.host_overhead += fixed;
        t.pp_bubble = pos(end - s->start_s - busy);
        double wait_all = pos(total - end - s->tail.dp_pre - s->tail.opt_pre);
        double embed_wait = fmin(wait_all, embed_wait_s(x->cfg, lay, &in, sim_ws, ss, p));
        t.dp_comm = s->tail.dp_pre + s->tail.dp_post + embed_wait;
        w.dp_comm = s->tail.dp_wait + embed_wait;
        w.optimizer = wait_all - embed_wait;
        t.optimizer = s->tail.opt_pre + s->tail.opt_post + w.optimizer;
        times_finish(&t);
        double work = times_total(&t) - t.pp_bubble - w.optimizer - embed_wait;
        if (work > best) {
            best = work;
            st->t = t;
            st->wait = w;
            st->critical_stage = p;
            st->stage_max_s = per_mb;
        }
        if (p == 0) {
            st->stage0_s = per_mb;
        }
        st->dp_bytes = fmax(st->dp_bytes, s->tail.dp_bytes);
        st->dp_total = fmax(st->dp_total, s->tail.dp_total);
    }
    /* The critical stage's phases span the step: T = its work + idle + wait, by construction of
     * the start times (start_p = its post-synchronisation work). */
    st->total = total;
    return MOE_OK;
}

/* Time of one step at expert load factor `load`. fwd/bwd are caller arrays [num_chunks]. */
static enum moe_status step_time(struct pctx *x,
                                 enum moe_schedule_mode mode,
                                 double *fwd,
                                 double *bwd,
                                 void *sim_ws,
                                 size_t sim_ws_bytes,
                                 struct step_time *st)
{
    if (mode == MOE_SCHED_SIMULATE) {
        return simulate_step(x, fwd, bwd, sim_ws, sim_ws_bytes, st);
    }
    const struct moe_layout *lay = x->lay;
    int pp = lay->pp;
    struct pass_phases stage_sum = {0};
    double slow_s = -1.0;
    double sum_s = 0.0;
    double tail_max = 0.0;
    struct stage_tail worst = {0};
    /* Closed form: the slowest stage's phase mix is what the step repeats m times; the DP tail and
     * optimizer of the stage with the longest one end the step (a barrier at the step's end). */
    struct pass_phases f = {0};
    struct pass_phases b = {0};
    struct stage_tail tail = {0};
    double fw = 0.0;
    double bw = 0.0;
    for (int p = 0; p < pp; p++) {
        /* Middle stages of an even layout are alike: reuse the previous stage's figures. */
        if (p == 0 || !stage_repeats(x, p)) {
            stage_phases(x, p, &f, &b);
            fw = phases_sum(&f);
            bw = phases_sum(&b);
            stage_tail(x, &x->params[p], fw, bw, lay->num_microbatches * (f.unsynced + b.unsynced),
                       &tail);
        }
        sum_s += fw + bw;
        if (fw + bw > slow_s) {
            slow_s = fw + bw;
            stage_sum = f;
            phases_add(&stage_sum, &b, 1.0);
            st->critical_stage = p;
        }
        if (p == 0) {
            st->stage0_s = fw + bw;
        }
        if (tail.dp_exposed + tail.optimizer > tail_max || p == 0) {
            tail_max = tail.dp_exposed + tail.optimizer;
            worst = tail;
        }
        st->dp_bytes = tail.dp_bytes > st->dp_bytes ? tail.dp_bytes : st->dp_bytes;
        st->dp_total = tail.dp_total > st->dp_total ? tail.dp_total : st->dp_total;
    }
    struct moe_sched_result res;
    moe_sched_closed_form_sums(sum_s, slow_s, pp, lay->vpp, lay->num_microbatches, x->p2p_s, &res);
    double m = lay->num_microbatches;
    struct moe_phase_times *t = &st->t;
    *t = (struct moe_phase_times){0};
    st->wait = (struct moe_phase_times){0};
    phases_to_times(&stage_sum, m, t, &st->wait);
    t->host_overhead += x->cl->overheads.step_fixed_ms * 1e-3;
    t->pp_bubble = pos(res.total_s - res.busy_max_s);
    t->dp_comm = worst.dp_exposed;
    st->wait.dp_comm = worst.dp_wait;
    t->optimizer = worst.optimizer;
    times_finish(t);
    st->total = times_total(t);
    st->stage_max_s = slow_s;
    return MOE_OK;
}

static double
load_factor(const struct moe_options *opt, const struct moe_load_stats *load, int which)
{
    if (opt->force_load_balancing) {
        return 1.0;
    }
    if (load != NULL) {
        double f =
            which == 0 ? load->mean_factor : (which == 1 ? load->p50_factor : load->p99_factor);
        return f >= 1.0 ? f : 1.0;
    }
    return opt->moe_imbalance >= 1.0 ? opt->moe_imbalance : 1.0;
}

/* The busiest rank's load as used: a capacity factor caps it, and hot-expert replication lowers
 * it (the r hottest experts' excess is shared). */
static double replicated_load(const struct moe_model_cfg *cfg,
                              const struct moe_layout *lay,
                              const struct moe_options *opt,
                              double f)
{
    /* A capacity factor caps every expert at that multiple of the mean (excess tokens dropped). */
    if (opt->capacity_factor > 0.0 && f > opt->capacity_factor) {
        f = opt->capacity_factor >= 1.0 ? opt->capacity_factor : 1.0;
    }
    if (opt->moe_hot_expert_replicas <= 0 || f <= 1.0 || lay->ep <= 1) {
        return f;
    }
    double per_rank = (double)cfg->num_experts / lay->ep;
    double spread = (double)opt->moe_hot_expert_replicas / per_rank; /* ranks' worth of clones */
    if (spread > lay->ep - 1) {
        spread = lay->ep - 1;
    }
    /* The excess (f - 1) of the hottest rank is split over 1 + spread ranks. */
    return 1.0 + (f - 1.0) / (1.0 + spread);
}

/* A 64-bit hash of the model's bytes (never 0), for the workspace's key. */
static uint64_t cfg_hash(const struct moe_model_cfg *cfg)
{
    const unsigned char *b = (const unsigned char *)cfg;
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    size_t i = 0;
    for (; i + 8 <= sizeof(*cfg); i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0x100000001b3ULL;
        h ^= h >> 29;
    }
    for (; i < sizeof(*cfg); i++) {
        h = (h ^ b[i]) * 0x100000001b3ULL;
    }
    return h | 1u;
}

void moe_cost_prepare(const struct moe_model_cfg *cfg, struct moe_cost_prep *prep)
{
    prep->cfg = cfg;
    prep->cfg_hash = cfg_hash(cfg);
    moe_flops_terms_init(cfg, &prep->flops);
    int n = cfg->num_layers < MOE_MAX_LAYERS ? cfg->num_layers : MOE_MAX_LAYERS;
    prep->prefix_moe[0] = 0;
    prep->prefix_win[0] = 0;
    prep->prefix_both[0] = 0;
    for (int i = 0; i < MOE_MAX_LAYERS; i++) {
        unsigned fl = i < n ? cfg->layer_flags[i] : 0u;
        bool moe = (fl & MOE_LAYER_MOE) != 0;
        bool win = (fl & MOE_LAYER_WINDOWED) != 0;
        prep->prefix_moe[i + 1] = (uint16_t)(prep->prefix_moe[i] + moe);
        prep->prefix_win[i + 1] = (uint16_t)(prep->prefix_win[i] + win);
        prep->prefix_both[i + 1] = (uint16_t)(prep->prefix_both[i] + (moe && win));
    }
    prep->is_moe = cfg->num_experts > 0 && prep->prefix_moe[n] > 0;
    prep->mean_only = false;
    prep->memo_cl = NULL;
}

/* Decoder layers of chunk c by kind, from the prepared prefix counts. */
static void chunk_kinds(const struct moe_cost_prep *prep,
                        const struct moe_pp_chunk *ch,
                        struct moe_chunk_kinds *out)
{
    int a = ch->first_layer;
    int b = ch->first_layer + ch->num_layers;
    if (b > MOE_MAX_LAYERS) {
        b = MOE_MAX_LAYERS;
    }
    if (a > b) {
        a = b;
    }
    int moe = prep->prefix_moe[b] - prep->prefix_moe[a];
    int win = prep->prefix_win[b] - prep->prefix_win[a];
    int both = prep->prefix_both[b] - prep->prefix_both[a];
    out->n[1][1] = both;
    out->n[1][0] = moe - both;
    out->n[0][1] = win - both;
    out->n[0][0] = (b - a) - moe - win + both;
}

enum moe_status moe_cost_predict(const struct moe_model_cfg *cfg,
                                 const struct moe_cluster *cl,
                                 const struct moe_layout *lay,
                                 const struct moe_options *opt,
                                 const struct moe_load_stats *load,
                                 enum moe_schedule_mode mode,
                                 void *ws,
                                 size_t ws_bytes,
                                 struct moe_prediction *out,
                                 struct moe_diag *diag)
{
    struct moe_cost_prep prep;
    moe_cost_prepare(cfg, &prep);
    return moe_cost_predict_prepared(&prep, cl, lay, opt, load, mode, ws, ws_bytes, out, diag);
}

enum moe_status moe_cost_predict_prepared(const struct moe_cost_prep *prep,
                                          const struct moe_cluster *cl,
                                          const struct moe_layout *lay,
                                          const struct moe_options *opt,
                                          const struct moe_load_stats *load,
                                          enum moe_schedule_mode mode,
                                          void *ws,
                                          size_t ws_bytes,
                                          struct moe_prediction *out,
                                          struct moe_diag *diag)
{
    const struct moe_model_cfg *cfg = prep->cfg;
    if (lay->num_chunks != lay->pp * lay->vpp || lay->num_chunks <= 0 ||
        lay->num_microbatches <= 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "layout is not resolved (call moe_layout_resolve before predicting)");
    }
    size_t need = moe_cost_workspace_bytes(lay, mode);
    if (ws == NULL || ws_bytes < need) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "predict needs %zu bytes of workspace, got %zu",
                            need, ws_bytes);
    }
    memset(out, 0, sizeof(*out));
    struct ws_key *key = ws;
    struct ws_memo *memo = (struct ws_memo *)(void *)((char *)ws + ws_key_bytes());
    double *fwd = (double *)(void *)((char *)ws + ws_head_bytes());
    double *bwd = fwd + lay->num_chunks;
    struct moe_gpu_params *params = (struct moe_gpu_params *)(bwd + lay->num_chunks);
    struct moe_stage_contents *contents = (struct moe_stage_contents *)(params + lay->pp);
    void *sim_ws = (char *)ws + stage_arrays_bytes(lay);
    size_t sim_bytes = ws_bytes - stage_arrays_bytes(lay);
    struct moe_chunk_kinds *kinds = (struct moe_chunk_kinds *)(contents + lay->pp);
    struct moe_pp_chunk *seen = (struct moe_pp_chunk *)(kinds + lay->num_chunks);
    size_t chunk_bytes = (size_t)lay->num_chunks * sizeof(struct moe_pp_chunk);
    bool cached = prep->cfg_hash != 0 && key->magic == WS_MAGIC && key->cfg == cfg &&
                  key->cfg_hash == prep->cfg_hash &&
                  memcmp(key->layout, lay, sizeof(key->layout)) == 0 &&
                  memcmp(seen, lay->chunks, chunk_bytes) == 0;
    if (!cached) {
        key->magic = 0;
        for (int c = 0; c < lay->num_chunks; c++) {
            chunk_kinds(prep, &lay->chunks[c], &kinds[c]);
        }
        struct moe_param_units units;
        moe_mem_param_units(cfg, lay, &units);
        for (int p = 0; p < lay->pp; p++) {
            moe_mem_stage_contents_from(cfg, lay, p, kinds, &contents[p]);
            moe_mem_gpu_params_from(&units, &contents[p], &params[p]);
        }
        key->cfg = cfg;
        key->cfg_hash = prep->cfg_hash;
        memcpy(key->layout, lay, sizeof(key->layout));
        memcpy(seen, lay->chunks, chunk_bytes);
        key->magic = prep->cfg_hash != 0 ? WS_MAGIC : 0;
    }
    if (!cached || memo->cl != cl) {
        ws_memo_clear(memo, cl); /* per layout and cluster */
    }
    bool is_moe = prep->is_moe;

    struct pctx x;
    memset(&x, 0, sizeof(x));
    x.cfg = cfg;
    x.is_moe = is_moe;
    x.cl = cl;
    x.lay = lay;
    x.opt = opt;
    x.params = params;
    x.kinds = kinds;
    x.contents = contents;
    x.memo = key->magic == WS_MAGIC && prep->memo_cl == cl ? memo : NULL;
    x.load = is_moe ? replicated_load(cfg, lay, opt, load_factor(opt, load, 0)) : 1.0;
    extras_init(&x);

    struct step_time st = {0};
    MOE_TRY(step_time(&x, mode, fwd, bwd, sim_ws, sim_bytes, &st));
    out->time = st.t;
    out->wait = st.wait;
    out->critical_stage = st.critical_stage;
    out->step_time_s = st.total;
    out->load_factor = x.load;
    memcpy(out->pass, x.kind_parts, sizeof(out->pass));
    out->stage_time_s[0] = st.stage_max_s;
    out->stage_time_s[1] = st.stage0_s;
    out->comm.dp_bytes = st.dp_bytes;
    out->comm.dp_s = st.dp_total;
    out->comm.ep_bytes = x.ep_bytes_layer;
    out->comm.ep_inter_domain_fraction =
        x.ep_bytes_layer > 0.0 ? x.ep_inter_layer / x.ep_bytes_layer : 0.0;
    out->comm.tp_bytes = x.tp_bytes_layer;
    out->comm.cp_bytes = x.cp_bytes_layer;
    out->comm.ep_s = x.ep_s_layer;
    out->comm.tp_s = x.tp_s_layer;
    out->comm.cp_s = x.cp_s_layer;
    out->comm.pp_s = x.p2p_s;

    /* p50 / p99 step times from the load distribution (same model, other load factors). */
    out->step_time_p50_s = out->step_time_s;
    out->step_time_p99_s = out->step_time_s;
    if (load != NULL && !opt->force_load_balancing && is_moe && !prep->mean_only) {
        for (int which = 1; which <= 2; which++) {
            struct pctx y = x;
            memset(y.kind_ready, 0, sizeof(y.kind_ready));
            y.load = replicated_load(cfg, lay, opt, load_factor(opt, load, which));
            struct step_time sq = {0};
            MOE_TRY(step_time(&y, mode, fwd, bwd, sim_ws, sim_bytes, &sq));
            if (which == 1) {
                out->step_time_p50_s = sq.total;
            } else {
                out->step_time_p99_s = sq.total;
            }
        }
    }

    /* Memory: worst pipeline stage. */
    struct moe_mem_layer_set set;
    /* Peak memory comes from the worst step: with load statistics, the 99th-percentile busiest
     * rank sizes the expert tensors (the mean sets the time). */
    double mem_load = x.load;
    if (load != NULL && !opt->force_load_balancing && is_moe) {
        mem_load = replicated_load(cfg, lay, opt, load_factor(opt, load, 2));
    }
    out->load_factor_p99 = mem_load;
    moe_mem_layer_set_init(cfg, lay, opt, mem_load, &set);
    struct moe_mem_stage_terms terms;
    moe_mem_stage_terms_init(cfg, cl, lay, opt, &set, &terms);
    out->mem.total = -1.0;
    for (int p = 0; p < lay->pp; p++) {
        if (stage_repeats(&x, p)) {
            continue; /* no more micro-batches in flight than rank p - 1, same contents */
        }
        struct moe_mem_bytes mb;
        moe_mem_stage_with_terms(cfg, cl, lay, opt, p, &contents[p], &params[p], &set, &terms, &mb);
        if (mb.total > out->mem.total) {
            out->mem = mb;
            out->worst_stage = p;
        }
    }
    out->act_layer = is_moe ? set.moe[2] : set.dense[2];
    double host_cap = cl->host.mem_gib_per_gpu * GIB;
    out->fits = out->mem.total <= out->mem.capacity && out->mem.host_offload <= host_cap;

    /* Throughput. */
    out->flops_per_step =
        (double)lay->gbs * moe_flops_terms_per_sequence(&prep->flops, lay->seq_length, lay->tp);
    double compute_s = out->time.compute + out->time.expert_gemm;
    out->executed_flops_per_step = out->flops_per_step;
    if (opt->recompute != MOE_RECOMPUTE_NONE && compute_s > 0.0) {
        /* Executed FLOPs grow by the recomputed share of the model's main layer kind (of the
         * layers block recompute re-runs). */
        double share = 1.0;
        if (x.block_rc) {
            int all = 0;
            int rc = 0;
            for (int c = 0; c < lay->num_chunks; c++) {
                all += lay->chunks[c].num_layers;
                rc += rc_layers_of_chunk(&x, lay->chunks[c].num_layers);
            }
            share = all > 0 ? (double)rc / all : 1.0;
        }
        out->executed_flops_per_step *= 1.0 + x.recompute_ratio * share;
    }
    double tokens = (double)lay->gbs * lay->seq_length;
    out->tokens_per_s_per_gpu = tokens / out->step_time_s / lay->num_gpus;
    out->tflops_per_gpu = out->flops_per_step / out->step_time_s / lay->num_gpus / 1e12;
    out->mfu = out->tflops_per_gpu / cl->gpu.peak_tflops[MOE_MATH_BF16];

    double phase_s[MOE_NUM_PHASES] = {
        out->time.compute,   out->time.expert_gemm, out->time.dispatch,      out->time.combine,
        out->time.tp_comm,   out->time.cp_comm,     out->time.pp_comm,       out->time.dp_comm,
        out->time.pp_bubble, out->time.optimizer,   out->time.host_overhead,
    };
    out->bottleneck = MOE_PHASE_COMPUTE;
    for (int i = 1; i < MOE_NUM_PHASES; i++) {
        if (phase_s[i] > phase_s[out->bottleneck]) {
            out->bottleneck = (enum moe_phase)i;
        }
    }
    return MOE_OK;
}

/* ---- Timeline -------------------------------------------------------------------------------- */

static const unsigned char track_of[MOE_NUM_PHASES] = {
    MOE_TL_COMPUTE, MOE_TL_COMPUTE, MOE_TL_EP, MOE_TL_EP,      MOE_TL_TPCP,    MOE_TL_TPCP,
    MOE_TL_PP,      MOE_TL_DP,      MOE_TL_PP, MOE_TL_COMPUTE, MOE_TL_COMPUTE,
};

enum moe_tl_track moe_tl_track_of(enum moe_phase p)
{
    return (int)p >= 0 && p < MOE_NUM_PHASES ? (enum moe_tl_track)track_of[p] : MOE_TL_COMPUTE;
}

const char *moe_tl_track_name(enum moe_tl_track t)
{
    static const char *const names[MOE_TL_NUM_TRACKS] = {"compute", "EP stream", "TP/CP stream",
                                                         "PP stream", "DP stream"};
    return (int)t >= 0 && t < MOE_TL_NUM_TRACKS ? names[t] : "?";
}

size_t moe_cost_timeline_max_events(const struct moe_layout *lay)
{
    size_t ops = 2 * (size_t)lay->num_chunks * (size_t)lay->num_microbatches;
    return ops * (MOE_NUM_PHASES + 2) + (size_t)lay->pp * 8;
}

/* Appends events; keeps the clock of the stage it writes. */
struct tl_writer {
    struct moe_tl_event *ev;
    size_t cap, n;
    double *stage_phase_s; /* [pp * MOE_NUM_PHASES] or NULL */
    int stage, mb, vstage, is_bwd;
    double t; /* where the next event starts */
};

static void tl_put(struct tl_writer *w, enum moe_phase ph, double dur, bool is_wait)
{
    if (dur <= 1e-12) { /* rounding of the schedule's sums, not an interval */
        w->t += dur > 0.0 ? dur : 0.0;
        return;
    }
    if (w->n < w->cap) {
        w->ev[w->n++] = (struct moe_tl_event){w->t,
                                              dur,
                                              w->stage,
                                              w->mb,
                                              (short)w->vstage,
                                              (unsigned char)ph,
                                              (unsigned char)w->is_bwd,
                                              (unsigned char)is_wait,
                                              track_of[ph]};
    }
    if (w->stage_phase_s != NULL) {
        w->stage_phase_s[(size_t)w->stage * MOE_NUM_PHASES + ph] += dur;
    }
    w->t += dur;
}

/* A phase with its wait share first (the wait ends when the slowest peer arrives). */
static void tl_put_split(struct tl_writer *w, enum moe_phase ph, double dur, double wait)
{
    wait = wait < dur ? wait : dur;
    tl_put(w, ph, wait, true);
    tl_put(w, ph, dur - wait, false);
}

/* One chunk op's phases in pass order, starting at w->t. */
static void tl_op(struct tl_writer *w, const struct pass_phases *p, bool bwd)
{
    if (!bwd) {
        tl_put(w, MOE_PHASE_COMPUTE, p->compute, false);
        tl_put_split(w, MOE_PHASE_TP_COMM, p->tp, p->wait_tp);
        tl_put_split(w, MOE_PHASE_CP_COMM, p->cp, p->wait_cp);
        tl_put_split(w, MOE_PHASE_DISPATCH, p->dispatch, p->wait_d);
        tl_put(w, MOE_PHASE_EXPERT_GEMM, p->expert, false);
        tl_put_split(w, MOE_PHASE_COMBINE, p->combine, p->wait_c);
    } else {
        tl_put_split(w, MOE_PHASE_COMBINE, p->combine, p->wait_c);
        tl_put(w, MOE_PHASE_EXPERT_GEMM, p->expert, false);
        tl_put_split(w, MOE_PHASE_DISPATCH, p->dispatch, p->wait_d);
        tl_put(w, MOE_PHASE_COMPUTE, p->compute, false);
        tl_put_split(w, MOE_PHASE_TP_COMM, p->tp, p->wait_tp);
        tl_put_split(w, MOE_PHASE_CP_COMM, p->cp, p->wait_cp);
    }
    tl_put(w, MOE_PHASE_HOST_OVERHEAD, p->host, false);
    tl_put(w, MOE_PHASE_PP_COMM, p->pp, false);
}

enum moe_status moe_cost_timeline(const struct moe_model_cfg *cfg,
                                  const struct moe_cluster *cl,
                                  const struct moe_layout *lay,
                                  const struct moe_options *opt,
                                  const struct moe_load_stats *load,
                                  void *ws,
                                  size_t ws_bytes,
                                  struct moe_tl_event *ev,
                                  size_t cap,
                                  size_t *num,
                                  double *stage_phase_s,
                                  struct moe_prediction *pred,
                                  struct moe_diag *diag)
{
    *num = 0;
    if (cap < moe_cost_timeline_max_events(lay)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "the timeline needs room for %zu events, got %zu",
                            moe_cost_timeline_max_events(lay), cap);
    }
    MOE_TRY(
        moe_cost_predict(cfg, cl, lay, opt, load, MOE_SCHED_SIMULATE, ws, ws_bytes, pred, diag));
    if (load != NULL) {
        /* The p50 / p99 passes ran last: run the mean load again so the workspace holds it. */
        struct moe_load_stats mean = {load->mean_factor, load->mean_factor, load->mean_factor};
        struct moe_prediction again;
        MOE_TRY(moe_cost_predict(cfg, cl, lay, opt, &mean, MOE_SCHED_SIMULATE, ws, ws_bytes, &again,
                                 diag));
    }
    void *sim_ws = (char *)ws + stage_arrays_bytes(lay);
    const struct sim_stage *ss = sim_stages(lay, sim_ws);
    const double *starts = (const double *)(const void *)(ss + lay->pp);
    const struct pass_phases *chunk_ph =
        (const struct pass_phases *)(const void *)(starts + lay->pp);
    const double *fwd = (const double *)(const void *)((const char *)ws + ws_head_bytes());
    const double *bwd = fwd + lay->num_chunks;
    struct moe_sched_input in = {lay->pp, lay->vpp, lay->num_microbatches, fwd, bwd, 0.0, starts};
    if (stage_phase_s != NULL) {
        memset(stage_phase_s, 0, (size_t)lay->pp * MOE_NUM_PHASES * sizeof(double));
    }
    struct tl_writer w = {ev, cap, 0, stage_phase_s, 0, -1, -1, 0, 0.0};
    double step = pred->step_time_s;
    double fixed = cl->overheads.step_fixed_ms * 1e-3;
    for (int p = 0; p < lay->pp; p++) {
        const struct stage_tail *tl = &ss[p].tail;
        w.stage = p;
        double end = 0.0;
        double busy = 0.0;
        moe_sched_rank_times(&in, sim_ws, p, &end, &busy);
        double clock = starts[p];
        for (int i = 0;; i++) {
            int mb = 0;
            int c = 0;
            int is_bwd = 0;
            if (!moe_sched_op(&in, p, i, &mb, &c, &is_bwd)) {
                break;
            }
            if (mb >= lay->num_microbatches) {
                continue;
            }
            double dur = is_bwd ? bwd[c] : fwd[c];
            w.mb = mb;
            w.vstage = c / lay->pp;
            w.is_bwd = is_bwd;
            double t0 = moe_sched_op_end(&in, sim_ws, mb, c, is_bwd) - dur;
            w.t = clock;
            tl_put(&w, MOE_PHASE_PP_BUBBLE, t0 - clock, false); /* waiting for the neighbour */
            w.t = t0;
            tl_op(&w, &chunk_ph[2 * c + is_bwd], is_bwd != 0);
            clock = t0 + dur;
        }
        w.mb = -1;
        w.vstage = -1;
        w.is_bwd = 0;
        w.t = end;
        tl_put_split(&w, MOE_PHASE_DP_COMM, tl->dp_pre, tl->dp_wait);
        double wait_all = pos(step - end - tl->dp_pre - tl->opt_pre);
        tl_put(&w, MOE_PHASE_DP_COMM, fmin(wait_all, embed_wait_s(cfg, lay, &in, sim_ws, ss, p)),
               true);
        tl_put(&w, MOE_PHASE_OPTIMIZER, tl->opt_pre, false);
        tl_put(&w, MOE_PHASE_OPTIMIZER, step - w.t, true);
        w.t = step;
        tl_put(&w, MOE_PHASE_OPTIMIZER, tl->opt_post, false);
        tl_put(&w, MOE_PHASE_DP_COMM, tl->dp_post, false);
        tl_put(&w, MOE_PHASE_HOST_OVERHEAD, fixed, false);
    }
    *num = w.n;
    return MOE_OK;
}
