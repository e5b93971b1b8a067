/*
 * Collective times from group placement (model/comm_cost.h). Bus-bandwidth factors follow
 * nccl-tests doc/PERFORMANCE.md: all-reduce 2(n-1)/n, all-gather / reduce-scatter / all-to-all
 * (n-1)/n. The node-reach expectation for hierarchical dispatch is the hypergeometric complement
 * (DESIGN.md "Modelling notes"); per-GPU dedup inside a domain uses the same formula over GPUs.
 */
#include "model/comm_cost.h"

#include <math.h>

#define GBPS 1e9
#define US   1e-6

void moe_comm_group_place(int n, int stride, int domain_gpus, struct moe_group_place *out)
{
    out->size = n > 0 ? n : 1;
    if (stride < 1) {
        stride = 1;
    }
    if (domain_gpus < 1) {
        domain_gpus = 1;
    }
    if (out->size == 1) {
        out->local = 1;
        out->num_domains = 1;
        return;
    }
    if (stride >= domain_gpus) {
        out->local = 1;
        out->num_domains = out->size;
        return;
    }
    int per_domain = (domain_gpus + stride - 1) / stride;
    out->local = out->size < per_domain ? out->size : per_domain;
    long span = (long)(out->size - 1) * stride;
    out->num_domains = (int)(span / domain_gpus) + 1;
}

static double nvlink_busbw(const struct moe_cluster *cl)
{
    return cl->nvlink.gbps * cl->nvlink.eff * GBPS;
}

double moe_comm_ring_busbw(const struct moe_cluster *cl, const struct moe_group_place *g)
{
    double nv = nvlink_busbw(cl);
    if (g->num_domains <= 1) {
        return nv;
    }
    double net = cl->net.nic_gbps * cl->net.eff * GBPS * (double)g->local;
    return net < nv ? net : nv;
}

/*
 * Time (s) of collective c on `bytes` (nccl-tests' size) inside one domain from the cluster's
 * per-size measurements: t = bytes x factor / busbw(bytes), busbw interpolated linearly in log
 * size between the measured sizes (the measured time already holds the latency); below the
 * smallest size the smallest size's time (latency-bound), above the largest the largest's busbw.
 * Negative when the table lacks this collective or the group spans several domains.
 */
static double table_s(const struct moe_cluster *cl,
                      const struct moe_group_place *g,
                      enum moe_busbw_coll c,
                      double factor,
                      double bytes)
{
    const struct moe_busbw_table *t = &cl->nvlink.busbw_by_size;
    int n = t->num_sizes[c];
    if (n < 1 || g->num_domains != 1) {
        return -1.0;
    }
    const double *x = t->bytes[c];
    const double *bw = t->gbps[c];
    if (bytes <= x[0]) {
        return x[0] * factor / (bw[0] * GBPS);
    }
    double busbw = bw[n - 1];
    for (int i = 1; i < n; i++) {
        if (bytes <= x[i]) {
            double w = log(bytes / x[i - 1]) / log(x[i] / x[i - 1]);
            busbw = bw[i - 1] + w * (bw[i] - bw[i - 1]);
            break;
        }
    }
    return bytes * factor / (busbw * GBPS);
}

static double latency_s(const struct moe_cluster *cl, const struct moe_group_place *g)
{
    double lat = cl->nvlink.latency_us * US;
    if (g->num_domains > 1) {
        lat += cl->net.latency_us * US;
    }
    return lat;
}

double
moe_comm_allreduce_s(const struct moe_cluster *cl, const struct moe_group_place *g, double bytes)
{
    if (g->size <= 1 || bytes <= 0.0) {
        return 0.0;
    }
    double n = (double)g->size;
    double tab = table_s(cl, g, MOE_BUSBW_ALLREDUCE, 2.0 * (n - 1.0) / n, bytes);
    if (tab >= 0.0) {
        return tab;
    }
    double busbw = moe_comm_ring_busbw(cl, g);
    /* NVLink SHARP reduces in the switch: all-reduce inside one domain runs at its bus bandwidth.
     */
    if (g->num_domains == 1 && cl->nvlink.has_nvls && cl->nvlink.nvls_busbw_gbps > 0.0 &&
        g->size > 2) {
        busbw = cl->nvlink.nvls_busbw_gbps * GBPS;
    } else if (g->num_domains == 1 && cl->nvlink.allreduce_gbps > 0.0) {
        busbw = cl->nvlink.allreduce_gbps * GBPS; /* measured for this collective (calibrate) */
    }
    return 2.0 * latency_s(cl, g) + bytes * 2.0 * (n - 1.0) / n / busbw;
}

double
moe_comm_allgather_s(const struct moe_cluster *cl, const struct moe_group_place *g, double bytes)
{
    if (g->size <= 1 || bytes <= 0.0) {
        return 0.0;
    }
    double n = (double)g->size;
    double tab = table_s(cl, g, MOE_BUSBW_ALLGATHER, (n - 1.0) / n, bytes);
    if (tab >= 0.0) {
        return tab;
    }
    return latency_s(cl, g) + bytes * (n - 1.0) / n / moe_comm_ring_busbw(cl, g);
}

double moe_comm_reducescatter_s(const struct moe_cluster *cl,
                                const struct moe_group_place *g,
                                double bytes)
{
    if (g->size <= 1 || bytes <= 0.0) {
        return 0.0;
    }
    double n = (double)g->size;
    double tab = table_s(cl, g, MOE_BUSBW_REDUCESCATTER, (n - 1.0) / n, bytes);
    if (tab >= 0.0) {
        return tab;
    }
    double busbw = moe_comm_ring_busbw(cl, g);
    if (g->num_domains == 1 && cl->nvlink.reducescatter_gbps > 0.0) {
        busbw = cl->nvlink.reducescatter_gbps * GBPS; /* measured for this collective */
    }
    return latency_s(cl, g) + bytes * (n - 1.0) / n / busbw;
}

double
moe_comm_alltoall_s(const struct moe_cluster *cl, const struct moe_group_place *g, double bytes)
{
    if (g->size <= 1 || bytes <= 0.0) {
        return 0.0;
    }
    double n = (double)g->size;
    double tab = table_s(cl, g, MOE_BUSBW_ALLTOALL, (n - 1.0) / n, bytes);
    if (tab >= 0.0) {
        return tab;
    }
    double intra = bytes * (double)(g->local - 1) / n;
    double inter = bytes * (n - (double)g->local) / n;
    double t_intra = intra / nvlink_busbw(cl);
    double t_inter = inter / (cl->net.nic_gbps * cl->net.a2a_eff * GBPS);
    return latency_s(cl, g) + (t_intra > t_inter ? t_intra : t_inter);
}

double moe_comm_p2p_s(const struct moe_cluster *cl, bool same_domain, double bytes)
{
    if (bytes <= 0.0) {
        return 0.0;
    }
    if (same_domain) {
        const struct moe_group_place pair = {2, 2, 1};
        double tab = table_s(cl, &pair, MOE_BUSBW_SENDRECV, 1.0, bytes);
        return tab >= 0.0 ? tab : cl->nvlink.latency_us * US + bytes / nvlink_busbw(cl);
    }
    return cl->net.latency_us * US + bytes / (cl->net.nic_gbps * cl->net.eff * GBPS);
}

/* 1 - C(total - per, k) / C(total, k): probability a given bucket of `per` items is hit by k draws.
 */
static double hit_prob(double total, double per, int k)
{
    if (k <= 0 || total <= 0.0) {
        return 0.0;
    }
    double miss = 1.0;
    for (int i = 0; i < k; i++) {
        double num = total - per - (double)i;
        if (num <= 0.0) {
            return 1.0;
        }
        miss *= num / (total - (double)i);
    }
    return 1.0 - miss;
}

double moe_comm_expected_domains(int num_experts, int topk, int d, int num_groups, int group_topk)
{
    if (d <= 1) {
        return 1.0;
    }
    double e = (double)num_experts;
    double reach = (double)d * hit_prob(e, e / (double)d, topk);
    if (num_groups > 0 && group_topk > 0 && num_groups % d == 0) {
        double g = (double)num_groups;
        double limited = (double)d * hit_prob(g, g / (double)d, group_topk);
        if (limited < reach) {
            reach = limited;
        }
    }
    return reach;
}

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
                         struct moe_ep_traffic *out)
{
    out->intra_bytes = 0.0;
    out->inter_bytes = 0.0;
    out->time_s = 0.0;
    if (g->size <= 1 || tokens <= 0.0) {
        return;
    }
    double n = (double)g->size;
    double local = (double)g->local;
    double copies = tokens * (double)topk; /* (token, expert) pairs leaving the router */
    if (!hierarchical) {
        out->intra_bytes = copies * token_bytes * (local - 1.0) / n;
        out->inter_bytes = copies * token_bytes * (n - local) / n;
    } else {
        double d = (double)g->num_domains;
        /* Once per remote domain reached; forwarded over NVLink to the GPUs holding the experts. */
        double remote_domains = domains_reached * (d - 1.0) / d;
        out->inter_bytes = tokens * token_bytes * remote_domains;
        /* One copy per destination GPU (experts on one GPU share it). */
        double per_gpu = tokens * gpus_reached;
        double own = per_gpu * (local - 1.0) / n;
        double forwarded = per_gpu * (n - local) / n * (local - 1.0) / local;
        out->intra_bytes = (own + forwarded) * token_bytes;
    }
    double t_intra = out->intra_bytes / (cl->nvlink.gbps * intra_eff * GBPS);
    double t_inter = out->inter_bytes / (cl->net.nic_gbps * inter_eff * GBPS);
    out->time_s = latency_s(cl, g) + (t_intra > t_inter ? t_intra : t_inter);
}
