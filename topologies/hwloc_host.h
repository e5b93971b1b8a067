/*
 * The local host as hwloc sees it: cores, hardware threads, NUMA nodes, memory, last-level cache
 * and the CPU model, for calibration headers (moefold-bench) and run records; plus binding the
 * calling process to one core, so ranks placed on the same host do not migrate while they are
 * measured. Built into its own library with hwloc's flags (libmoe_topohw); the planner side never
 * links it.
 */
#ifndef MOE_TOPOLOGIES_HWLOC_HOST_H
#define MOE_TOPOLOGIES_HWLOC_HOST_H

#include "model/status.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct moe_host_info {
    char cpu_model[128]; /* "CPUModel" info of the first package, "" if unknown */
    int num_packages;    /* sockets */
    int num_numa;        /* NUMA nodes (1 when hwloc reports none) */
    int num_cores;       /* physical cores */
    int num_pus;         /* hardware threads */
    double memory_bytes; /* total memory of the machine */
    double llc_bytes;    /* size of one last-level cache (the largest level found), 0 if none */
    int llc_level;       /* its level (3 usually), 0 if none */
};

/* Discover the local host. MOE_ERR_RUNTIME (diag says which hwloc call failed) on failure. */
MOE_NODISCARD enum moe_status moe_host_discover(struct moe_host_info *out, struct moe_diag *diag);

/* The bytes a timed kernel's operands cycle over so that they are cold: the last-level cache per
 * core (moefold-bench's default --evict-bytes, and moefold-train's host probe); 8 MiB when hwloc
 * cannot say (more than the private L2 of current server cores, 1-2 MiB). */
size_t moe_host_evict_bytes(void);

/*
 * Bind the calling process to core core_idx modulo the number of cores (strict binding of its
 * CPU set). MOE_ERR_UNSUPPORTED when the system refuses binding, MOE_ERR_RUNTIME otherwise.
 */
MOE_NODISCARD enum moe_status moe_host_bind_core(int core_idx, struct moe_diag *diag);

#ifdef __cplusplus
}
#endif

#endif /* MOE_TOPOLOGIES_HWLOC_HOST_H */
