/*
 * Plans out: the Megatron-LM command line of a plan and a runnable launch script (mpirun for
 * moefold's engine, torchrun per node or srun for Megatron-LM) with the node count, the ranks per
 * node and the flags. The plan file itself is topologies/plan_file.h's (moe_plan_write).
 */
#ifndef MOE_PLANNER_EMIT_H
#define MOE_PLANNER_EMIT_H

#include "model/cluster.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/status.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The plan's Megatron-LM flags (moe_megatron_format_args; flags MOE_MEGATRON_FMT_*) in a
 * malloc'ed string the caller frees. MOE_ERR_NOMEM, or the formatter's status.
 */
MOE_NODISCARD enum moe_status moe_plan_megatron_args(const struct moe_model_cfg *cfg,
                                                     const struct moe_layout *lay,
                                                     const struct moe_options *opt,
                                                     unsigned flags,
                                                     char **out,
                                                     struct moe_diag *diag);

/* What a launch script states and runs. */
struct moe_plan_launch {
    const struct moe_model_cfg *cfg;
    const struct moe_cluster *cl;
    const struct moe_layout *lay; /* resolved */
    const struct moe_options *opt;
    const char *plan_path; /* plan file moefold-train reads (written by --emit), or NULL */
    double step_time_s;    /* the prediction it was chosen with */
    double tokens_per_s_per_gpu;
    double memory_gib;
};

/*
 * Write an executable bash script to path (atomically: temporary file, then rename; mode 0755):
 * `script moefold` runs moefold-train under mpirun, `script megatron` runs Megatron-LM's
 * pretrain_gpt.py under torchrun on this node (NODE_RANK / SLURM_NODEID), `script srun` starts
 * that on every node with srun. MOE_ERR_IO naming the path; MOE_ERR_INVALID when the GPU count is
 * not a whole number of nodes.
 */
MOE_NODISCARD enum moe_status moe_plan_write_launch_script(const char *path,
                                                           const struct moe_plan_launch *l,
                                                           struct moe_diag *diag);

#ifdef __cplusplus
}
#endif

#endif /* MOE_PLANNER_EMIT_H */
