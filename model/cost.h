/*
 * The analytic cost model: per-GPU memory by category (worst pipeline stage), step time by phase,
 * model FLOPs, TFLOPS/GPU and MFU for one model x cluster x layout x options.
 *
 * Phase accounting: every field of struct moe_phase_times is time of one training step on the
 * critical pipeline stage (the one with the most time neither idle nor waiting), so they sum to
 * step_time_s:
 *   step = compute + expert_gemm + dispatch + combine + tp_comm + cp_comm + pp_comm + dp_comm
 *          + pp_bubble + optimizer + host_overhead
 * Communication fields hold the *exposed* (not hidden by overlap) part; ep_comm = dispatch +
 * combine and exposed_comm = the sum of all exposed communication, reported for convenience.
 * Unhidden totals per collective are in struct moe_comm_totals. The engine measures the same names.
 *
 * Pure functions: no I/O, no allocation, no global state. Sources for each formula are cited where
 * it is implemented (memory.c, comm_cost.c, compute.c, schedule.c).
 */
#ifndef MOE_MODEL_COST_H
#define MOE_MODEL_COST_H

#include "model/cluster.h"
#include "model/config.h"
#include "model/flops.h"
#include "model/layout.h"
#include "model/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Memory per GPU in bytes, one pipeline stage. */
struct moe_mem_bytes {
    double weights;      /* parameters resident on the GPU (BF16 compute copy + FP8 copies) */
    double grads;        /* main gradients (FP32 or BF16 buffers) */
    double optimizer;    /* FP32 master weights + Adam moments, sharded by the dist. optimizer */
    double activations;  /* saved activations of all micro-batches in flight */
    double buffers;      /* dispatcher / comm buffers, logits, workspace, allocator reserve */
    double total;        /* sum of the above */
    double capacity;     /* GPU HBM capacity */
    double host_offload; /* bytes moved to host memory (activation + optimizer offload) */
};

/* Saved activations of one micro-batch in one layer, bytes per GPU, by module. */
struct moe_act_bytes {
    double attn_norm, qkv, core_attn, attn_proj; /* attention block */
    double mlp_norm, router, dispatch, expert_fc1, moe_act, expert_fc2, shared, dense_mlp;
    double total;
};

/* Step time by phase, seconds (see header comment for the accounting). */
struct moe_phase_times {
    double compute;       /* non-expert GEMMs, attention, elementwise, embedding, logits */
    double expert_gemm;   /* routed + shared expert GEMMs and activation */
    double dispatch;      /* exposed EP dispatch (incl. permute) */
    double combine;       /* exposed EP combine (incl. unpermute) */
    double tp_comm;       /* exposed TP/SP all-gather + reduce-scatter, ETP reductions */
    double cp_comm;       /* exposed context-parallel K/V exchange */
    double ep_comm;       /* dispatch + combine */
    double pp_comm;       /* exposed pipeline send/recv */
    double dp_comm;       /* exposed DP/EDP grad reduce-scatter + param all-gather */
    double pp_bubble;     /* pipeline fill/drain idle time */
    double optimizer;     /* optimizer step (incl. host optimizer when offloaded) */
    double host_overhead; /* CPU launch/sync time not hidden behind GPU work */
    double exposed_comm;  /* sum of exposed communication */
};

/* Unhidden communication time per step (seconds) and bytes sent per GPU per step. */
struct moe_comm_totals {
    double tp_s, cp_s, ep_s, pp_s, dp_s, etp_s;
    double tp_bytes, cp_bytes, ep_bytes, pp_bytes, dp_bytes, etp_bytes;
    double ep_inter_domain_fraction; /* share of EP bytes leaving the NVLink domain */
};

enum moe_phase {
    MOE_PHASE_COMPUTE = 0,
    MOE_PHASE_EXPERT_GEMM,
    MOE_PHASE_DISPATCH,
    MOE_PHASE_COMBINE,
    MOE_PHASE_TP_COMM,
    MOE_PHASE_CP_COMM,
    MOE_PHASE_PP_COMM,
    MOE_PHASE_DP_COMM,
    MOE_PHASE_PP_BUBBLE,
    MOE_PHASE_OPTIMIZER,
    MOE_PHASE_HOST_OVERHEAD,
    MOE_NUM_PHASES,
};

/* How the pipeline schedule is timed. */
enum moe_schedule_mode {
    MOE_SCHED_CLOSED_FORM = 0, /* bubble = (pp-1)/(m*vpp) of ideal: the search's hot path */
    MOE_SCHED_SIMULATE = 1,    /* event simulation of 1F1B / interleaved with uneven stages */
};

/* Expert-load statistics: max-over-EP-ranks load / mean load (>= 1). */
struct moe_load_stats {
    double mean_factor; /* expected max/mean, used for the mean step time */
    double p50_factor;  /* median over steps */
    double p99_factor;  /* 99th percentile over steps */
};

/*
 * One decoder layer's pass of one micro-batch as priced before its activation-offload copy is
 * added: the copy runs behind hide_s (compute and expert GEMMs) and the pass costs
 * max(host_s, gpu_s + the copy's exposed part) plus the layer's fixed sync (moe_pass_with_copy).
 * What a caller needs to price other offload volumes under the same options (the planner bounds
 * fine-grained offload sets with it).
 */
struct moe_pass_parts {
    double hide_s; /* compute + expert GEMM time the copy overlaps */
    double gpu_s;  /* every GPU phase of the pass, no copy exposed */
    double host_s; /* host launch time of the pass */
};

/* Seconds one pass takes, sync excluded, with a copy of copy_s seconds. */
double moe_pass_with_copy(const struct moe_pass_parts *p, double copy_s);

/* Activation bytes one layer of the kind moves to host per micro-batch under opt's offload
 * (fine-grained modules and whole-layer CPU offloading), at the given expert load factor. */
double moe_cost_offload_bytes(const struct moe_model_cfg *cfg,
                              const struct moe_layout *lay,
                              const struct moe_options *opt,
                              bool is_moe,
                              double load_factor);

struct moe_prediction {
    double flops_per_step;          /* model FLOPs of one global batch (Megatron convention) */
    double executed_flops_per_step; /* incl. recompute */
    double step_time_s;             /* mean step time */
    double step_time_p50_s;
    double step_time_p99_s;
    double tokens_per_s_per_gpu;
    double tflops_per_gpu;    /* flops_per_step / step_time / GPUs / 1e12 */
    double mfu;               /* tflops_per_gpu / dense BF16 peak */
    bool fits;                /* worst stage total <= capacity and host offload fits host memory */
    int worst_stage;          /* pipeline rank with the largest memory */
    struct moe_mem_bytes mem; /* worst stage */
    struct moe_act_bytes act_layer; /* one MoE (or dense) layer, one micro-batch, as saved */
    struct moe_phase_times time;
    /* The share of each phase of `time` spent waiting for a slower rank (included in `time`):
     * dispatch and combine wait for the busiest EP rank (its extra expert rows), the optimizer
     * waits in the gradient-norm all-reduce for the stage that finishes last (simulated schedule
     * only); with host.rank_spread > 0 the collectives that join ranks (tp, cp, dispatch,
     * combine, dp) also wait for the slowest rank's compute before them; the other fields are 0. */
    struct moe_phase_times wait;
    int critical_stage; /* the pipeline stage whose phases `time` holds */
    struct moe_comm_totals comm;
    double load_factor;        /* expert max/mean load used for time (mean over steps) */
    double load_factor_p99;    /* the one memory is sized for (99th percentile step) */
    enum moe_phase bottleneck; /* largest phase */
    double stage_time_s[2];    /* fwd+bwd per micro-batch: slowest stage, first stage */
    /* Decoder-layer passes at load_factor, [is_moe][is_windowed][0 forward, 1 backward]; zero for
     * kinds the layout does not have. */
    struct moe_pass_parts pass[2][2][2];
};

/*
 * What a prediction derives from the model alone, prepared once for many predictions of the same
 * model (the planner's search). Holds a borrowed pointer to cfg, which must outlive it.
 */
struct moe_cost_prep {
    const struct moe_model_cfg *cfg;
    uint64_t cfg_hash;                        /* of the model's bytes: the workspace's key */
    bool is_moe;                              /* any routed-expert layer */
    struct moe_flops_terms flops;             /* Megatron FLOP terms */
    uint16_t prefix_moe[MOE_MAX_LAYERS + 1];  /* MoE layers among the first i */
    uint16_t prefix_win[MOE_MAX_LAYERS + 1];  /* windowed layers among the first i */
    uint16_t prefix_both[MOE_MAX_LAYERS + 1]; /* windowed MoE layers among the first i */
    /* Leave step_time_p50_s / _p99_s at step_time_s instead of costing the step again at those
     * load factors (two of a prediction's three step times under load statistics): for a caller
     * that reads only the mean step time and memory, the planner's search. moe_cost_prepare sets
     * false; every other field of the prediction is the same either way. */
    bool mean_only;
    /* A cluster the caller keeps alive and unchanged while it predicts with this prep: each
     * workspace then keeps the recompute- and offload-free part of its layout's per-layer costs on
     * that cluster (moe_compute_layer_base) and reuses it for the option sets that share it (same
     * results). NULL (moe_cost_prepare): none kept. */
    const struct moe_cluster *memo_cl;
};

void moe_cost_prepare(const struct moe_model_cfg *cfg, struct moe_cost_prep *prep);

/* moe_cost_predict with the model prepared by moe_cost_prepare (same results, less work). */
MOE_NODISCARD enum moe_status moe_cost_predict_prepared(const struct moe_cost_prep *prep,
                                                        const struct moe_cluster *cl,
                                                        const struct moe_layout *lay,
                                                        const struct moe_options *opt,
                                                        const struct moe_load_stats *load,
                                                        enum moe_schedule_mode mode,
                                                        void *ws,
                                                        size_t ws_bytes,
                                                        struct moe_prediction *out,
                                                        struct moe_diag *diag);

/* Workspace bytes moe_cost_predict needs: per-stage arrays (pp of them) for either mode, plus the
 * event simulation's arrays for MOE_SCHED_SIMULATE. */
size_t moe_cost_workspace_bytes(const struct moe_layout *lay, enum moe_schedule_mode mode);

/*
 * Predict. cfg, cl, opt are validated and lay resolved (moe_layout_resolve) by the caller. load is
 * the expert-load statistics to use; NULL means opt->moe_imbalance (1 when force-balanced; auto (0)
 * without load stats is treated as 1). ws/ws_bytes: caller memory of at least
 * moe_cost_workspace_bytes(lay, mode), double-aligned, in either mode. Allocates nothing. Returns
 * MOE_ERR_INVALID with diag if the layout is not resolved or the workspace is missing or too
 * small.
 */
MOE_NODISCARD enum moe_status moe_cost_predict(const struct moe_model_cfg *cfg,
                                               const struct moe_cluster *cl,
                                               const struct moe_layout *lay,
                                               const struct moe_options *opt,
                                               const struct moe_load_stats *load,
                                               enum moe_schedule_mode mode,
                                               void *ws,
                                               size_t ws_bytes,
                                               struct moe_prediction *out,
                                               struct moe_diag *diag);

/* ---- Timeline: the simulated step as events (for a Chrome trace) ------------------------------
 */

/* Where an event runs: the stage's compute stream or one of its communication streams. */
enum moe_tl_track {
    MOE_TL_COMPUTE = 0, /* compute, expert_gemm, optimizer, host_overhead */
    MOE_TL_EP = 1,      /* dispatch, combine */
    MOE_TL_TPCP = 2,    /* tp_comm, cp_comm */
    MOE_TL_PP = 3,      /* pp_comm (and, measured, pp_bubble: blocking receives) */
    MOE_TL_DP = 4,      /* dp_comm */
    MOE_TL_NUM_TRACKS = 5,
};

/* The track a phase runs on. */
enum moe_tl_track moe_tl_track_of(enum moe_phase p);
/* "compute", "EP stream", "TP/CP stream", "PP stream", "DP stream". */
const char *moe_tl_track_name(enum moe_tl_track t);

/* One interval of the timeline. */
struct moe_tl_event {
    double start_s; /* from the step's synchronisation (the gradient-norm all-reduce) */
    double dur_s;
    int stage;             /* pipeline rank */
    int mb;                /* micro-batch, -1 for per-step work (reductions, optimizer) */
    short vstage;          /* virtual stage (chunk / pp), -1 for per-step work */
    unsigned char phase;   /* enum moe_phase */
    unsigned char is_bwd;  /* backward pass of a chunk */
    unsigned char is_wait; /* the phase's share spent waiting for a slower rank */
    unsigned char track;   /* enum moe_tl_track */
};

/* Events moe_cost_timeline may write for this layout (every phase of every chunk's forward and
 * backward of every micro-batch, split into wait and the rest, plus each stage's per-step work). */
size_t moe_cost_timeline_max_events(const struct moe_layout *lay);

/*
 * The event-simulated step (MOE_SCHED_SIMULATE) as a timeline: pred as moe_cost_predict gives it,
 * and ev[0 .. *num) the events of every stage in its own step window [start_p, start_p + step):
 * each chunk's forward and backward of each micro-batch split by phase (in pass order,
 * back to back: they add up to the op's time; a wait share is its own event), the gaps between
 * them being the pipeline bubble; after the stage's last backward its gradient reduction and norm
 * read, its wait in the all-reduce until the step's synchronisation at `step`, then the optimizer
 * update, parameter gather and per-step host work (which is when its next step starts).
 * stage_phase_s (NULL: not wanted) gets [pp * MOE_NUM_PHASES] seconds per stage and phase, the
 * bubble included: each stage's row sums to the step; row pred->critical_stage equals pred->time.
 * ws: moe_cost_workspace_bytes(lay, MOE_SCHED_SIMULATE). MOE_ERR_INVALID when cap is below
 * moe_cost_timeline_max_events or as moe_cost_predict.
 */
MOE_NODISCARD enum moe_status moe_cost_timeline(const struct moe_model_cfg *cfg,
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
                                                struct moe_diag *diag);

/* Name of a phase as used in JSON ("compute", "expert_gemm", ...). */
const char *moe_phase_name(enum moe_phase p);

#ifdef __cplusplus
}
#endif

#endif /* MOE_MODEL_COST_H */
