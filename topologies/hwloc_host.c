/*
 * hwloc discovery of the local host and core binding (topologies/hwloc_host.h), on the hwloc 2.x
 * API: one topology load per call, object counts by type depth, the machine's total memory, the
 * largest data/unified cache level present, and the package's "CPUModel" info string.
 */
#include "topologies/hwloc_host.h"

#include <hwloc.h>
#include <stdio.h>
#include <string.h>

static int count_of(hwloc_topology_t t, hwloc_obj_type_t type)
{
    int n = hwloc_get_nbobjs_by_type(t, type);
    return n > 0 ? n : 0;
}

static void cache_info(hwloc_topology_t t, struct moe_host_info *out)
{
    static const hwloc_obj_type_t levels[] = {HWLOC_OBJ_L5CACHE, HWLOC_OBJ_L4CACHE,
                                              HWLOC_OBJ_L3CACHE, HWLOC_OBJ_L2CACHE,
                                              HWLOC_OBJ_L1CACHE};
    static const int level_no[] = {5, 4, 3, 2, 1};
    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
        hwloc_obj_t c = hwloc_get_obj_by_type(t, levels[i], 0);
        if (c != NULL && c->attr != NULL) {
            out->llc_bytes = (double)c->attr->cache.size;
            out->llc_level = level_no[i];
            return;
        }
    }
}

size_t moe_host_evict_bytes(void)
{
    struct moe_host_info h;
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    if (moe_host_discover(&h, &diag) == MOE_OK && h.llc_bytes > 0.0 && h.num_cores > 0) {
        return (size_t)(h.llc_bytes / h.num_cores);
    }
    return (size_t)8 << 20;
}

enum moe_status moe_host_discover(struct moe_host_info *out, struct moe_diag *diag)
{
    memset(out, 0, sizeof(*out));
    hwloc_topology_t t;
    if (hwloc_topology_init(&t) != 0) {
        return moe_diag_set(diag, MOE_ERR_RUNTIME, "hwloc_topology_init failed");
    }
    if (hwloc_topology_load(t) != 0) {
        hwloc_topology_destroy(t);
        return moe_diag_set(diag, MOE_ERR_RUNTIME, "hwloc_topology_load failed");
    }
    out->num_packages = count_of(t, HWLOC_OBJ_PACKAGE);
    out->num_numa = count_of(t, HWLOC_OBJ_NUMANODE);
    if (out->num_numa == 0) {
        out->num_numa = 1;
    }
    out->num_cores = count_of(t, HWLOC_OBJ_CORE);
    out->num_pus = count_of(t, HWLOC_OBJ_PU);
    hwloc_obj_t root = hwloc_get_root_obj(t);
    out->memory_bytes = root != NULL ? (double)root->total_memory : 0.0;
    cache_info(t, out);
    hwloc_obj_t pkg = hwloc_get_obj_by_type(t, HWLOC_OBJ_PACKAGE, 0);
    const char *model = pkg != NULL ? hwloc_obj_get_info_by_name(pkg, "CPUModel") : NULL;
    (void)snprintf(out->cpu_model, sizeof(out->cpu_model), "%s", model != NULL ? model : "");
    hwloc_topology_destroy(t);
    return MOE_OK;
}

enum moe_status moe_host_bind_core(int core_idx, struct moe_diag *diag)
{
    hwloc_topology_t t;
    if (hwloc_topology_init(&t) != 0 || hwloc_topology_load(t) != 0) {
        return moe_diag_set(diag, MOE_ERR_RUNTIME, "hwloc topology could not be loaded");
    }
    int cores = count_of(t, HWLOC_OBJ_CORE);
    enum moe_status st = MOE_OK;
    hwloc_obj_t core =
        cores > 0 ? hwloc_get_obj_by_type(t, HWLOC_OBJ_CORE, core_idx % cores) : NULL;
    if (core == NULL) {
        st = moe_diag_set(diag, MOE_ERR_RUNTIME, "hwloc found no core to bind to");
    } else if (hwloc_set_cpubind(t, core->cpuset, HWLOC_CPUBIND_PROCESS) != 0) {
        st = moe_diag_set(diag, MOE_ERR_UNSUPPORTED, "binding to core %d was refused",
                          core_idx % cores);
    }
    hwloc_topology_destroy(t);
    return st;
}
