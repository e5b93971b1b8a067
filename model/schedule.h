/*
 * Pipeline schedule timing: a closed form for the search's hot path and an exact event simulation
 * of Megatron-LM's 1F1B and interleaved (virtual-pipeline) schedules with per-chunk times, for
 * `predict` and the planner's final top-k.
 *
 * Closed form (Narayanan et al., SC'21, "Efficient Large-Scale Language Model Training on GPU
 * Clusters Using Megatron-LM", sec. 2.2): with S_p the forward+backward time of one micro-batch on
 * pipeline rank p, T = m * max_p S_p + (sum_p S_p - max_p S_p) / vpp, which is (m + (pp-1)/vpp) * S
 * for uniform stages (bubble fraction (pp-1)/(m*vpp)).
 * Simulation: each rank runs Megatron's op order (schedules.py: warm-up forwards, steady 1F1B,
 * cool- down backwards; interleaved chunk order in groups of pp micro-batches); an op starts when
 * its rank is free and its upstream op (previous chunk's forward / next chunk's backward) has
 * arrived. A rank's clock may start late (start_s): after the step's one synchronisation (the
 * optimizer's gradient-norm all-reduce) each rank finishes its own optimizer work and begins the
 * next step's schedule on its own (Megatron's ranks meet only at collectives), so a stage with a
 * short optimizer starts its forwards while the others still update. The op start and end times
 * stay in the workspace for a timeline (moe_sched_op_end, moe_sched_rank_times).
 */
#ifndef MOE_MODEL_SCHEDULE_H
#define MOE_MODEL_SCHEDULE_H

#include "model/status.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct moe_sched_input {
    int pp;                /* pipeline ranks */
    int vpp;               /* chunks per rank */
    int num_microbatches;  /* m */
    const double *fwd_s;   /* [pp*vpp] forward time of one micro-batch in chunk c (c = v*pp + p) */
    const double *bwd_s;   /* [pp*vpp] backward time (incl. recompute) */
    double p2p_s;          /* one activation / gradient transfer between neighbouring chunks */
    const double *start_s; /* [pp] when each rank's clock starts (NULL: all at 0) */
};

struct moe_sched_result {
    double total_s;    /* time from 0 (the earliest start) to the last backward */
    double busy_max_s; /* largest per-rank busy time (m * S_p) */
    double bubble_s;   /* total_s - busy_max_s */
};

/* Closed form from the per-rank sums: sum_s = sum_p S_p, max_s = max_p S_p. */
void moe_sched_closed_form_sums(double sum_s,
                                double max_s,
                                int pp,
                                int vpp,
                                int num_microbatches,
                                double p2p_s,
                                struct moe_sched_result *out);

/* Closed form; never fails. */
void moe_sched_closed_form(const struct moe_sched_input *in, struct moe_sched_result *out);

/* Workspace the simulation needs (bytes). */
size_t moe_sched_workspace_bytes(int pp, int vpp, int num_microbatches);

/*
 * Event simulation. ws must hold moe_sched_workspace_bytes; MOE_ERR_INVALID when too small or the
 * input is inconsistent.
 */
MOE_NODISCARD enum moe_status moe_sched_simulate(const struct moe_sched_input *in,
                                                 void *ws,
                                                 size_t ws_bytes,
                                                 struct moe_sched_result *out);

/* After moe_sched_simulate on ws: when micro-batch mb's forward (is_bwd 0) or backward of chunk c
 * ended (seconds; its start is the end minus its duration). */
double
moe_sched_op_end(const struct moe_sched_input *in, const void *ws, int mb, int c, int is_bwd);

/* After moe_sched_simulate on ws: when rank p's last op ended and how long its ops ran. */
void moe_sched_rank_times(
    const struct moe_sched_input *in, const void *ws, int p, double *end_s, double *busy_s);

/* The i-th op of rank p in Megatron's order: 1 and *mb, *chunk, *is_bwd set, or 0 past the end
 * (an interleaved slot past m, when m is not a multiple of pp, gives *mb >= m: skip it). */
int moe_sched_op(const struct moe_sched_input *in, int p, int i, int *mb, int *chunk, int *is_bwd);

#ifdef __cplusplus
}
#endif

#endif /* MOE_MODEL_SCHEDULE_H */
