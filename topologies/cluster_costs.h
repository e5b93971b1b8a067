/*
 * What running a cluster costs: the optional "power" and "price" sections of a cluster file
 * (topologies/<name>.json), which the cost model never reads and `moefold predict/plan/whatif
 * --train-tokens` turn into the energy and money of a whole training run (cli/train_cost.h).
 *
 *   "power": {"gpu_tdp_w":               {"value", "source"},  board power of one GPU (W)
 *             "node_overhead_w_per_gpu": {"value", "source"},  the rest of the node (CPUs, NICs,
 *                                                              NVSwitch, fans, PSU losses) per GPU
 *             "pue":                     {"value", "source"}}  facility power / IT power
 *   "price": {"per_gpu_hour_usd":        {"value", "source"},  what one GPU-hour costs
 *             "date": "YYYY-MM-DD", "note": "..."}             when that price was read
 *
 * Every key is optional at load time, so a rented system's file may give only its provider's
 * PUE and price and inherit the hardware's power through "extends" (sections merge key by key);
 * what a computation needs and does not find is named by moe_cluster_costs_missing_power /
 * _price. The sections are checked (unknown keys, sources, ranges) whenever the cluster file is
 * read, by moe_cluster_from_json as well as here, so a typo fails every command alike.
 */
#ifndef MOE_TOPOLOGIES_CLUSTER_COSTS_H
#define MOE_TOPOLOGIES_CLUSTER_COSTS_H

#include "model/status.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_COST_SOURCE_LEN 640

struct moe_cluster_costs {
    bool has_gpu_tdp;
    double gpu_tdp_w; /* W, one GPU's board power (TDP / TGP) */
    char gpu_tdp_source[MOE_COST_SOURCE_LEN];
    bool has_node_overhead;
    double node_overhead_w_per_gpu; /* W per GPU: the node's maximum power less its GPUs */
    char node_overhead_source[MOE_COST_SOURCE_LEN];
    bool has_pue;
    double pue; /* facility / IT power, >= 1 */
    char pue_source[MOE_COST_SOURCE_LEN];
    bool has_price;
    double price_per_gpu_hour_usd; /* USD per GPU-hour */
    char price_source[MOE_COST_SOURCE_LEN];
    char price_date[16]; /* "YYYY-MM-DD" or "YYYY-MM" */
};

/*
 * Read the "power" and "price" sections of a cluster tree whose "extends" chain is already merged
 * (moe_cluster_read_json gives such a tree). Absent sections or keys leave has_* false. A section
 * that is not an object, an unknown key, a figure without a source, a value out of range (TDP
 * 1-5000 W, overhead 0-10000 W, PUE 1-3, price 0-1000 USD) or a date not of the form YYYY-MM[-DD]
 * is MOE_ERR_INVALID naming cluster.power.<key> or cluster.price.<key>.
 */
MOE_NODISCARD enum moe_status moe_cluster_costs_from_json(const cJSON *root,
                                                          struct moe_cluster_costs *out,
                                                          struct moe_diag *diag);

/* The same for a cluster by name or path (looked up as moe_cluster_load does). */
MOE_NODISCARD enum moe_status moe_cluster_costs_load(const char *name_or_path,
                                                     struct moe_cluster_costs *out,
                                                     struct moe_diag *diag);

/*
 * Into buf[len], the power keys an energy figure needs that c lacks ("power.gpu_tdp_w,
 * power.pue"); pue_given: the PUE comes from elsewhere (a flag). Returns true when nothing is
 * missing (buf then "").
 */
bool moe_cluster_costs_missing_power(const struct moe_cluster_costs *c,
                                     bool pue_given,
                                     char *buf,
                                     size_t len);

#ifdef __cplusplus
}
#endif

#endif /* MOE_TOPOLOGIES_CLUSTER_COSTS_H */
