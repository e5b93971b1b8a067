/*
 * Run files ("format": "moefold-run", version 1): what `moefold-train` measured, under the names
 * `moefold predict --json` uses (time_s per phase, memory_gib per category), plus per-step losses
 * and times, bytes per collective, tokens per expert, the buffers category's parts, the expert-row
 * sizing factor, what each phase measured (phase_definitions: text, accepted and not kept), the
 * wait shares of the phases, the traced step's timeline, the options that ran and how they differ
 * from the plan, and the plan itself. This is the reader
 * `moefold compare` uses; the engine writes the file (engine/report.c). Unknown top-level keys are
 * errors naming them; the embedded plan and the bytes-per-collective map are kept as trees.
 */
#ifndef MOE_TOPOLOGIES_RUN_FILE_H
#define MOE_TOPOLOGIES_RUN_FILE_H

#include "model/cost.h"
#include "model/status.h"

#include <cjson/cJSON.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_RUN_FILE_FORMAT    "moefold-run"
#define MOE_RUN_FILE_VERSION   1
#define MOE_RUN_MAX_MOE_LAYERS 512

struct moe_run {
    char model[64];
    char cluster[64];
    char backend[32];
    int num_ranks;
    int ranks_per_node; /* ranks of an emulated node (moefold-train --ranks-per-node); 0: none */
    int steps;          /* steps run */
    int measured_steps; /* steps averaged (the first is warm-up) */
    double tokens_per_step;
    double step_time_s; /* mean measured step */
    double tokens_per_s;
    struct moe_phase_times time; /* mean per step over the critical stage's ranks; with
                                  * unattributed_s sums to step_time_s */
    double unattributed_s;       /* step time no phase claimed (0 in older run files) */
    bool has_wait;               /* wait shares measured ("wait_s", wait_measured) */
    struct moe_phase_times wait; /* each phase's share spent waiting for a slower rank */
    int critical_stage;          /* the pipeline stage time_s describes; -1 when not given */
    struct moe_mem_bytes mem;    /* bytes by category on the rank with the largest total */
    double peak_rss_bytes;
    double final_loss;                                 /* loss of the last step */
    double first_loss;                                 /* loss of the first step */
    int num_moe_layers;                                /* entries in load_max_over_mean */
    double load_max_over_mean[MOE_RUN_MAX_MOE_LAYERS]; /* busiest expert / mean, per MoE layer */
    int num_rank_load_layers; /* entries in load_rank_max_over_mean (0: an older run file) */
    /* per MoE layer: the busiest EP rank's expert rows over the group's mean, summed over every
     * forward (layer and micro-batch) -- the load the EP exchanges wait for */
    double load_rank_max_over_mean[MOE_RUN_MAX_MOE_LAYERS];
    /* Expert rows each rank's buffers were sized for over the mean rows (optional
     * "expert_rows_factor": EP for the engine's worst-case sizing, --moe-buffer-factor when
     * given); 0 when absent (dense models, older run files). */
    double expert_rows_factor;
    /* Share of the local experts holding rows in a grouped expert forward, over the run's calls
     * (optional "expert_active_fraction", in [0, 1]); 0 when absent (dense models, older runs). */
    double expert_active_fraction;
    /* The buffers category split into its parts (optional "buffers_detail_gib"; bytes, on the
     * memory rank; they add up to mem.buffers). has_buffers_detail is false when absent. */
    bool has_buffers_detail;
    struct moe_run_buffers_detail {
        double dispatch;          /* all-to-all send/receive and expert-row buffers */
        double temporaries;       /* the rest of the per-op temp region */
        double recompute_scratch; /* tensors of recomputed modules */
        double offload_staging;   /* activation-offload staging */
        double pipeline;          /* chunk outputs, gradients sent back, gradient streams */
        double other;             /* token ids, tables, statistics, scalars */
    } buffers_detail;
    /* The GPU the run used (optional "device" object; zeros and "" for CPU runs). */
    char device_name[64];
    double device_total_bytes; /* device memory (cudaMemGetInfo total) */
    double device_used_bytes;  /* total - free at the fullest point the engine saw */
    cJSON *tokens_per_expert;  /* owned: [layer][expert] token copies per step, or NULL */
    cJSON *plan;               /* owned: the plan object that ran, or NULL */
    cJSON *timeline;           /* owned: the traced step ("timeline", --trace-step), or NULL */
    cJSON *kernel_s;           /* owned: per phase, each kernel op's seconds and calls per step
                                  ("kernel_s", moefold-train --profile-kernels), or NULL */
    cJSON *ran;                /* owned: the options the engine ran ("ran"), or NULL */
    cJSON *plan_differences;   /* owned: strings, each an option that ran otherwise, or NULL */
    /* The host speed probe (optional "host_probe", CPU runs): one m x n x k GEMM's mean time as
     * moefold-bench times it, between the measured steps; probe_us 0 when absent. Its
     * rank_spread: the ranks' mean speed spread at the probes (slowest over mean, minus 1), as
     * calibrate's host.rank_spread; < 0 when absent. */
    int probe_mnk[3];
    double probe_us;
    double probe_rank_spread;
};

/* Read and check a run file. *out owns its trees: release with moe_run_fini. */
MOE_NODISCARD enum moe_status
moe_run_read(const char *path, struct moe_run *out, struct moe_diag *diag);

/* Release the trees of a run read by moe_run_read. NULL-safe. */
void moe_run_fini(struct moe_run *run);

#ifdef __cplusplus
}
#endif

#endif /* MOE_TOPOLOGIES_RUN_FILE_H */
