/*
 * Group construction (engine/groups.h). Each group is one collective split of the root group with a
 * color that encodes the coordinates its members share and key = world rank, so group rank order is
 * world rank order (and equals the coordinate that varies inside the group).
 */
#include "engine/groups.h"

#include "engine/comm_nccl.h"

#include <string.h>

static enum moe_status split(moe_comm_t *world, int color, const char *name, moe_comm_t **out)
{
    return moe_comm_split(world, color, moe_comm_rank(world), name, out);
}

/* Nodes: shared-memory split or emulated blocks; node_id = smallest world rank of the node. */
static enum moe_status find_node(moe_comm_t *world, int ranks_per_node, int *node_id)
{
    int rank = moe_comm_rank(world);
    if (ranks_per_node > 0) {
        *node_id = rank / ranks_per_node * ranks_per_node;
        return MOE_OK;
    }
    moe_comm_t *node = NULL;
    MOE_TRY(moe_comm_split_shared(world, "node", &node));
    int id = rank;
    moe_comm_bcast(node, &id, 1, MOE_COMM_I32, 0); /* rank 0 of the node has the smallest rank */
    moe_comm_destroy(node);
    *node_id = id;
    return MOE_OK;
}

/* EP-node subgroups: node index among the EP group's nodes, node-local and cross-node groups. */
static enum moe_status ep_node_groups(moe_comm_t *world, int ep_color, struct moe_eng_groups *g)
{
    int n = moe_comm_size(g->ep);
    int node_ids[MOE_MAX_EXPERTS];
    if (n > MOE_MAX_EXPERTS) {
        return MOE_ERR_INVALID;
    }
    moe_comm_allgather(g->ep, &g->node_id, node_ids, 1, MOE_COMM_I32);
    /* Nodes in order of first appearance (ranks are sorted, so that is node-id order). */
    int num_nodes = 0;
    int my_node = -1;
    int first_of_node[MOE_MAX_EXPERTS];
    int members_of_node[MOE_MAX_EXPERTS];
    for (int i = 0; i < n; i++) {
        int k = 0;
        while (k < num_nodes && first_of_node[k] != node_ids[i]) {
            k++;
        }
        if (k == num_nodes) {
            first_of_node[num_nodes] = node_ids[i];
            members_of_node[num_nodes] = 0;
            num_nodes++;
        }
        members_of_node[k]++;
        if (i == moe_comm_rank(g->ep)) {
            my_node = k;
        }
    }
    g->ep_num_nodes = num_nodes;
    g->ep_node_idx = my_node;
    g->is_ep_uniform = true;
    for (int k = 1; k < num_nodes; k++) {
        g->is_ep_uniform = g->is_ep_uniform && members_of_node[k] == members_of_node[0];
    }
    int node_color = ep_color * n + my_node;
    MOE_TRY(split(world, node_color, "ep_node", &g->ep_node));
    int cross_color = ep_color * n + moe_comm_rank(g->ep_node);
    return split(world, cross_color, "ep_cross", &g->ep_cross);
}

enum moe_status moe_eng_groups_create(moe_comm_t *world,
                                      const struct moe_layout *lay,
                                      int ranks_per_node,
                                      struct moe_eng_groups *out,
                                      struct moe_diag *diag)
{
    memset(out, 0, sizeof(*out));
    out->world_rank = moe_comm_rank(world);
    out->world_size = moe_comm_size(world);
    if (out->world_size != lay->num_gpus) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "the plan's layout needs %d ranks (tp %d x cp %d x dp %d x pp %d) but "
                            "%d were started; run mpirun -np %d",
                            lay->num_gpus, lay->tp, lay->cp, lay->dp, lay->pp, out->world_size,
                            lay->num_gpus);
    }
    struct moe_rank_coords c;
    moe_layout_rank_coords(lay, out->world_rank, &c);
    out->me = c;
    int s = lay->tp * lay->cp * lay->dp;
    out->local_idx = out->world_rank % s;
    MOE_TRY(split(world, (c.stage * lay->cp + c.cp) * lay->dp + c.dp, "tp", &out->tp));
    MOE_TRY(split(world, (c.stage * lay->tp + c.tp) * lay->dp + c.dp, "cp", &out->cp));
    MOE_TRY(split(world, (c.stage * lay->tp + c.tp) * lay->cp + c.cp, "dp", &out->dp));
    MOE_TRY(split(world, c.stage * lay->tp + c.tp, "dpcp", &out->dpcp));
    MOE_TRY(split(world, c.stage * lay->dp + c.dp, "tpcp", &out->tpcp));
    MOE_TRY(split(world, out->local_idx, "pp", &out->pp));
    MOE_TRY(split(world, out->local_idx, "pp_bwd", &out->pp_bwd));
    int ep_color = (c.stage * lay->etp + c.etp) * lay->edp + c.edp;
    MOE_TRY(split(world, ep_color, "ep", &out->ep));
    MOE_TRY(split(world, (c.stage * lay->ep + c.ep) * lay->edp + c.edp, "etp", &out->etp));
    MOE_TRY(split(world, (c.stage * lay->etp + c.etp) * lay->ep + c.ep, "edp", &out->edp));
    MOE_TRY(split(world, c.stage * lay->edp + c.edp, "etpep", &out->etpep));
    MOE_TRY(split(world, c.stage, "stage", &out->stage));
    bool in_embed = lay->pp > 1 && (c.stage == 0 || c.stage == lay->pp - 1);
    MOE_TRY(split(world, in_embed ? out->local_idx : -1, "embed", &out->embed));
    MOE_TRY(find_node(world, ranks_per_node, &out->node_id));
    return ep_node_groups(world, ep_color, out);
}

void moe_eng_groups_destroy(struct moe_eng_groups *g)
{
    moe_comm_t **all[] = {&g->tp,    &g->cp,     &g->dp,    &g->dpcp,    &g->tpcp,
                          &g->pp,    &g->pp_bwd, &g->ep,    &g->etp,     &g->edp,
                          &g->etpep, &g->stage,  &g->embed, &g->ep_node, &g->ep_cross};
    for (size_t i = 0; i < MOE_ARRAY_LEN(all); i++) {
        moe_comm_destroy(*all[i]);
        *all[i] = NULL;
    }
}

enum moe_status moe_eng_groups_to_nccl(struct moe_eng_groups *g,
                                       struct CUstream_st *stream,
                                       struct CUstream_st *comm_stream,
                                       struct moe_diag *diag)
{
    if (!moe_comm_nccl_is_built()) {
        return moe_diag_set(diag, MOE_ERR_UNSUPPORTED,
                            "this moefold was built without NCCL (nccl.h not found under "
                            "NCCL_HOME or CUDA_HOME): the CUDA backend needs it");
    }
    /* Same order on every rank; embed (not every rank is a member) last. */
    moe_comm_t **all[] = {&g->tp, &g->cp,  &g->dp,  &g->dpcp,  &g->tpcp,  &g->pp,   &g->pp_bwd,
                          &g->ep, &g->etp, &g->edp, &g->etpep, &g->stage, &g->embed};
    for (size_t i = 0; i < MOE_ARRAY_LEN(all); i++) {
        if (*all[i] == NULL) {
            continue;
        }
        moe_comm_t *twin = NULL;
        MOE_TRY(moe_comm_nccl_from_mpi(*all[i], stream, comm_stream, &twin));
        moe_comm_destroy(*all[i]);
        *all[i] = twin;
    }
    return MOE_OK;
}
