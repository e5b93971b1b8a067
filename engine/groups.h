/*
 * Communication groups of a folded layout (DESIGN.md "Parallel folding"), built from the rank
 * mapping moe_layout_rank_coords gives: attention side TP, CP, DP, DP x CP and TP x CP; expert side
 * EP, ETP, EDP; PP; the whole stage; the embedding group (first and last pipeline stage, for tied
 * embeddings); and, for the hierarchical dispatcher, the node-local and cross-node subgroups of the
 * EP group. Members of every group are ordered by rank, so a rank's index in a group equals its
 * coordinate (tp, cp, ep, ...).
 *
 * Nodes are the ranks that share memory (MPI_Comm_split_type), or blocks of ranks_per_node
 * consecutive ranks when that is set (to emulate several nodes on one machine in tests).
 */
#ifndef MOE_ENGINE_GROUPS_H
#define MOE_ENGINE_GROUPS_H

#include "engine/comm.h"
#include "model/layout.h"
#include "model/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct moe_eng_groups {
    struct moe_rank_coords me; /* this rank's coordinates */
    int world_rank;
    int world_size;
    int local_idx; /* index inside the stage: tp + TP*(cp + CP*dp) */

    moe_comm_t *tp;     /* same stage, cp, dp */
    moe_comm_t *cp;     /* same stage, tp, dp */
    moe_comm_t *dp;     /* same stage, tp, cp */
    moe_comm_t *dpcp;   /* same stage, tp: dense-gradient reduction (DP x CP) */
    moe_comm_t *tpcp;   /* same stage, dp: the ranks that share one micro-batch */
    moe_comm_t *pp;     /* same local index, all stages: activations (forward sends) */
    moe_comm_t *pp_bwd; /* the same members: gradients (backward sends). Two communicators keep
                           each direction's sends and receives in one order per peer, which
                           NCCL (matching in issue order, no tags) needs */
    moe_comm_t *ep;     /* same stage, etp, edp */
    moe_comm_t *etp;    /* same stage, ep, edp */
    moe_comm_t *edp;    /* same stage, etp, ep: expert-gradient reduction */
    moe_comm_t *etpep;  /* same stage, edp: the allgather dispatcher's group (ETP x EP) */
    moe_comm_t *stage;  /* every rank of this stage (expert load statistics) */
    moe_comm_t *embed;  /* first + last stage, same local index (pp > 1 only; else NULL) */

    /* Hierarchical dispatch: nodes among the EP group's members. */
    int node_id;          /* smallest world rank of this rank's node */
    int ep_num_nodes;     /* distinct nodes the EP group spans */
    int ep_node_idx;      /* this rank's node among them, 0-based in rank order */
    moe_comm_t *ep_node;  /* EP members on this rank's node */
    moe_comm_t *ep_cross; /* EP members with the same index inside their node */
    bool is_ep_uniform;   /* every node holds the same number of EP members */
};

/*
 * Build every group for lay (resolved) over world. ranks_per_node > 0 emulates nodes of that many
 * consecutive world ranks; 0 uses shared memory. Collective over world. MOE_ERR_INVALID when
 * world's size differs from lay->num_gpus.
 */
MOE_NODISCARD enum moe_status moe_eng_groups_create(moe_comm_t *world,
                                                    const struct moe_layout *lay,
                                                    int ranks_per_node,
                                                    struct moe_eng_groups *out,
                                                    struct moe_diag *diag);
/* Release every group. */
void moe_eng_groups_destroy(struct moe_eng_groups *g);

struct CUstream_st;
/*
 * Replace every group that carries device data (all but the hierarchical dispatcher's ep_node and
 * ep_cross) by its NCCL twin (engine/comm_nccl.h; one-rank groups get its "local" copies),
 * blocking calls on stream and non-blocking ones on comm_stream. Collective over the world the
 * groups came from. MOE_ERR_UNSUPPORTED when this build has no NCCL backend.
 */
MOE_NODISCARD enum moe_status moe_eng_groups_to_nccl(struct moe_eng_groups *g,
                                                     struct CUstream_st *stream,
                                                     struct CUstream_st *comm_stream,
                                                     struct moe_diag *diag);

#ifdef __cplusplus
}
#endif

#endif /* MOE_ENGINE_GROUPS_H */
