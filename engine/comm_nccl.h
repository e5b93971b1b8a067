/*
 * The NCCL backend of the communicator interface (engine/comm.h): device buffers, one ncclComm_t
 * per group, bootstrapped over MPI as multi-node NCCL programs are: the group's rank 0 calls
 * ncclGetUniqueId, MPI_Bcast hands the id to the group's other members over the group's own MPI
 * communicator, and every member calls ncclCommInitRank. Each group keeps a duplicate of that MPI
 * communicator, so splits (moe_comm_split, moe_comm_split_shared) bootstrap their NCCL
 * communicators the same way.
 *
 * Streams: blocking calls are enqueued on the compute stream given at creation (the engine's
 * kernel stream), so they are ordered with the kernels before and after them and the host does
 * not wait; a host that reads a result copies it with engine/device.h, which synchronises.
 * Non-blocking calls (isend, irecv, iallreduce, iallgather, ireducescatter, ialltoallv) run on the
 * communication stream given at creation, after everything already queued on the compute stream
 * (an event); moe_comm_wait makes the compute stream wait for the operation's completion event
 * (again without blocking the host) and moe_comm_test asks the event. Every group made from one
 * world shares its two streams, so all ranks issue each stream's operations in the same order.
 *
 * Differences from the MPI backend (callers that work with both follow these): tags are not
 * matched (NCCL pairs a peer's sends and receives in issue order, which the engine's schedules
 * keep; tag_limit answers INT_MAX); non-blocking calls run one after another on the communication
 * stream, so an irecv posted before an isend waits for its sender before the isend can start (the
 * engine's pipeline receives on the compute stream and sends on the communication stream, so its
 * order never waits on itself); point-to-point with oneself is refused; a pointer that is not
 * device memory is a broken invariant and stops the job with a message naming the call.
 * All-to-all(-v) is grouped ncclSend/ncclRecv (ncclGroupStart/End) with the rank's own block copied
 * on the stream; all-gather-v is a group of ncclBroadcast, reduce-scatter-v a group of ncclReduce,
 * one per root. Byte accounting is the front end's (engine/comm.c), the same as for MPI.
 *
 * Built only with NCCL and the CUDA backend (MOE_HAVE_NCCL and MOE_HAVE_CUDA_KERNELS); elsewhere
 * moe_comm_nccl_is_built() is false and creation answers MOE_ERR_UNSUPPORTED.
 */
#ifndef MOE_ENGINE_COMM_NCCL_H
#define MOE_ENGINE_COMM_NCCL_H

#include "engine/comm.h"

#include <mpi.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st; /* cudaStream_t's struct */

/* True when this binary has the NCCL backend. */
bool moe_comm_nccl_is_built(void);

/* The NCCL backend table (NULL when not built). */
const struct moe_comm_backend *moe_comm_nccl_backend(void);

/*
 * Collective over comm: a group named name with the members of comm (same ranks), on the current
 * CUDA device, enqueueing blocking calls on stream and non-blocking ones on comm_stream (both
 * borrowed; they must outlive the group). MPI and a current CUDA device must be set up. comm is
 * duplicated; the caller keeps its own. Errors: MOE_ERR_UNSUPPORTED (not built), MOE_ERR_NOMEM.
 * NCCL failures (two ranks on one GPU, say) stop the job with NCCL's message.
 */
MOE_NODISCARD enum moe_status moe_comm_nccl_create(MPI_Comm comm,
                                                   struct CUstream_st *stream,
                                                   struct CUstream_st *comm_stream,
                                                   const char *name,
                                                   moe_comm_t **out);

/*
 * The NCCL twin of an MPI group (same members, same name): collective over mpi_group, which must
 * be an MPI-backend group (engine/comm_mpi.h). The caller keeps mpi_group. A group of one rank
 * gets the "local" backend instead (device memory, no NCCL communicator): its collectives are the
 * identity, done as stream-ordered copies when the buffers differ; point-to-point is refused.
 */
MOE_NODISCARD enum moe_status moe_comm_nccl_from_mpi(const moe_comm_t *mpi_group,
                                                     struct CUstream_st *stream,
                                                     struct CUstream_st *comm_stream,
                                                     moe_comm_t **out);

#ifdef __cplusplus
}
#endif

#endif /* MOE_ENGINE_COMM_NCCL_H */
