/*
 * Cluster files (topologies/<name>.json, "format": "moefold-cluster") and their loader, which
 * fills model/'s struct moe_cluster. Every figure is {"value": x, "source": "..."}: a figure
 * without its source is refused. Unknown keys are errors naming them.
 *
 * Lookup of a cluster by name: $MOEFOLD_TOPOLOGIES if set, else the topologies/ folder found from
 * the running executable (<exe>/../../topologies, i.e. the source tree of build/bin/moefold), else
 * ./topologies. A name containing '/' or ending in ".json" is a path.
 */
#ifndef MOE_TOPOLOGIES_CLUSTER_FILE_H
#define MOE_TOPOLOGIES_CLUSTER_FILE_H

#include "model/cluster.h"
#include "model/status.h"

#include <cjson/cJSON.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_CLUSTER_FILE_FORMAT  "moefold-cluster"
#define MOE_CLUSTER_FILE_VERSION 1

/* Load a cluster by name or path (see above) and validate it. */
MOE_NODISCARD enum moe_status
moe_cluster_load(const char *name_or_path, struct moe_cluster *out, struct moe_diag *diag);

/* Parse an already read tree (source names it in messages). */
MOE_NODISCARD enum moe_status moe_cluster_from_json(const cJSON *root,
                                                    const char *source,
                                                    struct moe_cluster *out,
                                                    struct moe_diag *diag);

/*
 * Build the JSON for a cluster (every figure with `source` as its source text, used by
 * `moefold calibrate` to write topologies/local.json). Caller owns the result; NULL on OOM.
 */
cJSON *moe_cluster_to_json(const struct moe_cluster *cl, const char *source);

/* The folder clusters are looked up in, written into buf[len]. */
const char *moe_cluster_dir(char *buf, size_t len);

/*
 * List the cluster names (file names without .json, sorted) in the cluster folder into
 * names[max][MOE_NAME_LEN]; *count gets the number found (capped at max).
 */
MOE_NODISCARD enum moe_status
moe_cluster_list(char (*names)[MOE_NAME_LEN], size_t max, size_t *count, struct moe_diag *diag);

#ifdef __cplusplus
}
#endif

#endif /* MOE_TOPOLOGIES_CLUSTER_FILE_H */
