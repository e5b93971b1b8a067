/*
 * Collective cost table: time of each collective the training step uses, from its group's placement
 * on the cluster (which members share an NVLink domain) and the nccl-tests bus-bandwidth
 * convention.
 *
 *   t = latency + S * f / busbw,   f = 2(n-1)/n all-reduce, (n-1)/n all-gather / reduce-scatter /
 *                                  all-to-all, S = per-rank buffer (the output for all-gather)
 *
 * (NVIDIA nccl-tests doc/PERFORMANCE.md.) A ring that spans several domains is limited by the
 * inter-domain hop: each channel crosses through one NIC, and a rank with `local` group members in
 * its domain drives `local` NICs in parallel, so busbw = min(NVLink busbw, local * NIC busbw).
 * NCCL's all-to-all cannot aggregate NICs: a GPU's remote share goes through its own NIC while the
 * in-domain share rides NVLink concurrently. Hierarchical dispatchers (DeepEP / HybridEP) send a
 * token once per remote domain and forward inside it. A cluster measured per message size (a CPU
 * host's calibration: nvlink.busbw_by_size) times a collective inside one domain from its measured
 * busbw at that size instead (interpolated in log size), since such a host's bandwidth falls
 * several-fold once the messages leave its caches. No I/O, no allocation.
 */
#ifndef MOE_MODEL_COMM_COST_H
#define MOE_MODEL_COMM_COST_H

#include "model/cluster.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where a communication group's members sit: n members spaced `stride` ranks apart. */
struct moe_group_place {
    int size;        /* n members */
    int local;       /* members in the first member's NVLink domain (1..n) */
    int num_domains; /* distinct NVLink domains spanned */
};

/*
 * Placement of the group whose members are ranks base + j*stride, j in [0, n), on domains of
 * domain_gpus consecutive ranks (Megatron rank order). base = 0 gives the group of rank 0; the
 * folding keeps every group of one kind alike when strides and domains divide each other.
 */
void moe_comm_group_place(int n, int stride, int domain_gpus, struct moe_group_place *out);

/* Ring bus bandwidth (bytes/s) available to a group with this placement. */
double moe_comm_ring_busbw(const struct moe_cluster *cl, const struct moe_group_place *g);

/* Times in seconds for a per-rank buffer of `bytes` (0 bytes or a 1-member group cost 0). */
double
moe_comm_allreduce_s(const struct moe_cluster *cl, const struct moe_group_place *g, double bytes);
double
moe_comm_allgather_s(const struct moe_cluster *cl, const struct moe_group_place *g, double bytes);
double moe_comm_reducescatter_s(const struct moe_cluster *cl,
                                const struct moe_group_place *g,
                                double bytes);
/* All-to-all where each rank holds `bytes` in total, spread evenly over the n members. */
double
moe_comm_alltoall_s(const struct moe_cluster *cl, const struct moe_group_place *g, double bytes);
/* Point-to-point transfer of `bytes` between neighbouring pipeline stages. */
double moe_comm_p2p_s(const struct moe_cluster *cl, bool same_domain, double bytes);

/*
 * Expected number of distinct EP domains a token's top-k experts land in, with E experts spread
 * evenly over d domains: d * (1 - C(E - E/d, k) / C(E, k)) (hypergeometric complement). With
 * group-limited routing (num_groups G a multiple of d, group_topk M) the token chooses M of G
 * groups, so the count is d * (1 - C(G - G/d, M) / C(G, M)) when that is smaller.
 */
double moe_comm_expected_domains(int num_experts, int topk, int d, int num_groups, int group_topk);

/* Bytes one EP all-to-all of one MoE layer pass moves, per rank. */
struct moe_ep_traffic {
    double intra_bytes; /* bytes this rank sends over NVLink */
    double inter_bytes; /* bytes this rank sends over the scale-out network */
    double time_s;      /* resulting time for the chosen dispatcher */
};

/*
 * One dispatch (or combine) of `tokens` tokens of `token_bytes` each to top-k experts over an EP
 * group with placement g. hierarchical = DeepEP/HybridEP (one copy per remote domain); intra_eff /
 * inter_eff are the dispatcher's achieved fractions of NVLink and NIC line rate (alltoall uses the
 * cluster's nvlink.eff and net.a2a_eff). `domains_reached` is moe_comm_expected_domains for the
 * group.
 */
void moe_comm_ep_traffic(const struct moe_cluster *cl,
                         const struct moe_group_place *g,
                         double tokens,
                         double token_bytes,
                         int topk,
                         double gpus_reached,
                         double domains_reached,
                         bool hierarchical,
                         double intra_eff,
                         double inter_eff,
                         struct moe_ep_traffic *out);

#ifdef __cplusplus
}
#endif

#endif /* MOE_MODEL_COMM_COST_H */
