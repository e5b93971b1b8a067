/*
 * Cluster files (topologies/<name>.json, "format": "moefold-cluster") and their loader, which
 * fills model/'s struct moe_cluster. Every figure is {"value": x, "source": "..."}: a figure
 * without its source is refused. Unknown keys are errors naming them.
 *
 * A cluster file may state only what differs from another: `"extends": "<cluster name or path>"`.
 * The base file's tree (itself resolved first) is merged under the extending file's before any
 * field is read: sections merge key by key, recursively, and anything else the extending file
 * gives -- a figure {"value", "source"}, a flag, a name -- replaces the base's whole. Every key of
 * the base the extending file does not give is inherited, sections added to the format later
 * included; the merged tree then goes through the same checks as any file (unknown keys, a source
 * for every figure). The extending file must give its own name and description. A name is looked
 * up beside the extending file first, then in the cluster folder; a relative path is taken from
 * the extending file's folder. Chains up to 8 files; a cycle or a missing base is an error naming
 * the files.
 *
 * Besides the cost model's figures a file may hold the optional sections "power" and "price"
 * (topologies/cluster_costs.h: what a whole training run draws and costs), "uncertainty" (the
 * profile's measured errors, cli/uncertainty.h) and "software" (fitted releases, below); they
 * merge through "extends" like any section, and the loader checks power and price on every read.
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

/* The release name that selects a generation's shared figures (no release's own). */
#define MOE_CLUSTER_SHARED "shared"

/*
 * Load a cluster by name or path (see above) and validate it, with the file's default software
 * release applied (see moe_cluster_load_release).
 */
MOE_NODISCARD enum moe_status
moe_cluster_load(const char *name_or_path, struct moe_cluster *out, struct moe_diag *diag);

/*
 * Load a cluster with a software release's fitted figures applied. A cluster file may hold
 *   "software": {"default": NAME, "releases": {NAME: {"date", "stack", "runs", "note",
 *                "figures": {"gemm.grouped_eff": {figure}, ...}}}}
 * (written by `moefold fit`): each release's figures replace the generation's shared ones.
 * release NULL: the file's default release; MOE_CLUSTER_SHARED: none; a name the file does not
 * hold: MOE_ERR_NOT_FOUND listing the known ones. out->software names what was applied.
 */
MOE_NODISCARD enum moe_status moe_cluster_load_release(const char *name_or_path,
                                                       const char *release,
                                                       struct moe_cluster *out,
                                                       struct moe_diag *diag);

/* Parse an already read tree (source names it in messages and locates a relative "extends"),
 * default release applied. */
MOE_NODISCARD enum moe_status moe_cluster_from_json(const cJSON *root,
                                                    const char *source,
                                                    struct moe_cluster *out,
                                                    struct moe_diag *diag);

/* Parse an already read tree with `release` applied (as moe_cluster_load_release). */
MOE_NODISCARD enum moe_status moe_cluster_from_json_release(const cJSON *root,
                                                            const char *source,
                                                            const char *release,
                                                            struct moe_cluster *out,
                                                            struct moe_diag *diag);

/*
 * Read a cluster file's JSON tree by name or path (the lookup above), its "extends" chain merged,
 * without interpreting it further; *root is the caller's to cJSON_Delete; path_out[path_len] (may
 * be NULL) gets the file's path.
 */
MOE_NODISCARD enum moe_status moe_cluster_read_json(
    const char *name_or_path, cJSON **root, char *path_out, size_t path_len, struct moe_diag *diag);

/*
 * Byte offset in struct moe_cluster of the real-valued figure at a dotted path
 * ("gemm.max_eff.bf16"); MOE_ERR_INVALID when the path names no such figure.
 */
MOE_NODISCARD enum moe_status
moe_cluster_figure_ref(const char *path, size_t *offset, struct moe_diag *diag);

/* The JSON node at a dotted path in a cluster tree (a figure object), or NULL. */
cJSON *moe_cluster_figure_json(const cJSON *root, const char *path);

/* The release object named `name` (case-insensitive) in a cluster tree, or NULL. */
const cJSON *moe_cluster_find_release(const cJSON *root, const char *name);

/*
 * The tree root describes once its "extends" chain is merged (see above): *out is a new tree the
 * caller deletes (a copy of root when it extends nothing). Errors name source and the base.
 */
MOE_NODISCARD enum moe_status
moe_cluster_resolve_json(const cJSON *root, const char *source, cJSON **out, struct moe_diag *diag);

/*
 * The "extends" value of the cluster file name_or_path (looked up as moe_cluster_load does) into
 * buf[len]: "" for a file that extends nothing (a reference system).
 */
MOE_NODISCARD enum moe_status
moe_cluster_file_base(const char *name_or_path, char *buf, size_t len, struct moe_diag *diag);

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
