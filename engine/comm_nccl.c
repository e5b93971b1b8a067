/*
 * NCCL backend of engine/comm.h on device buffers (engine/comm_nccl.h says what it does and how it
 * differs from MPI). Every NCCL call is checked with MOE_CHECK_NCCL and every CUDA runtime call
 * with MOE_CHECK_CUDA (STYLE.md §4); a failure names the rank, host, call and NCCL's last error,
 * then stops the job through MPI_Abort. Requests hold a completion event and the stream to order
 * after it inside struct moe_comm_req, so nothing here allocates host memory per call.
 *
 * Sources: NCCL user guide (communicator creation with ncclGetUniqueId + ncclCommInitRank over an
 * out-of-band broadcast; in-place conventions: all-gather in place when sendbuff == recvbuff +
 * rank * count, reduce-scatter when recvbuff == sendbuff + rank * recvcount; point-to-point
 * all-to-all as a group of ncclSend/ncclRecv).
 */
#include "engine/comm_nccl.h"

#include "engine/check.h"
#include "engine/comm_mpi.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(MOE_HAVE_NCCL) && defined(MOE_HAVE_CUDA_KERNELS)

#include <cuda_runtime_api.h>
#include <nccl.h>

void moe_eng_nccl_errstr(int code, char *buf, size_t len)
{
    const char *last = ncclGetLastError(NULL);
    bool has_last = last != NULL && last[0] != '\0';
    (void)snprintf(buf, len, "%s%s%s", ncclGetErrorString((ncclResult_t)code), has_last ? ": " : "",
                   has_last ? last : "");
}

struct nccl_group {
    MPI_Comm mpi;             /* owned duplicate: bootstrap of this group and of its splits */
    ncclComm_t comm;          /* owned */
    cudaStream_t stream;      /* compute stream (borrowed): blocking calls */
    cudaStream_t comm_stream; /* communication stream (borrowed): non-blocking calls */
    cudaEvent_t ready;        /* compute-stream position a non-blocking call starts after */
    int rank;
    int size;
};

/* What a request holds: the operation's completion event and the stream that waits for it. */
struct nccl_req {
    cudaEvent_t done;
    cudaStream_t stream;
};

_Static_assert(sizeof(struct nccl_req) <= sizeof(((struct moe_comm_req *)0)->impl),
               "struct moe_comm_req must hold a CUDA event and a stream");

static struct nccl_group *group_of(void *h)
{
    return (struct nccl_group *)h;
}

static struct nccl_req *req_of(struct moe_comm_req *req)
{
    return (struct nccl_req *)(void *)req->impl;
}

static ncclDataType_t nccl_type(enum moe_comm_dtype dtype)
{
    switch (dtype) {
    case MOE_COMM_F32:
        return ncclFloat32;
    case MOE_COMM_I32:
        return ncclInt32;
    case MOE_COMM_F64:
        return ncclFloat64;
    case MOE_COMM_NUM_DTYPES:
        break;
    }
    moe_eng_fatal(__FILE__, __LINE__, "unknown comm dtype %d", (int)dtype);
}

static ncclRedOp_t nccl_op(enum moe_comm_redop op)
{
    return op == MOE_COMM_MAX ? ncclMax : ncclSum;
}

/* Byte offset of element i. */
static size_t at(size_t i, enum moe_comm_dtype dtype)
{
    return i * moe_comm_dtype_bytes(dtype);
}

/* A host pointer handed to NCCL would fault inside a kernel far from its cause: stop here. */
static void need_device(const void *p, size_t count, const char *call)
{
    if (count == 0) {
        return;
    }
    struct cudaPointerAttributes attr;
    memset(&attr, 0, sizeof(attr));
    cudaError_t err = cudaPointerGetAttributes(&attr, p);
    if (err != cudaSuccess ||
        (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)) {
        (void)cudaGetLastError();
        moe_eng_fatal(__FILE__, __LINE__,
                      "NCCL backend: %s was given %p, which is not device memory (host data must "
                      "go through the MPI world group or an explicit copy, engine/device.h)",
                      call, p);
    }
}

/* A lone send or receive with oneself never completes in NCCL (it pairs only inside a group). */
static void need_peer(const struct nccl_group *g, int peer, const char *call)
{
    if (peer == g->rank || peer < 0 || peer >= g->size) {
        moe_eng_fatal(__FILE__, __LINE__,
                      "NCCL backend: %s with peer %d in a group of %d where this is rank %d "
                      "(point-to-point needs another member)",
                      call, peer, g->size, g->rank);
    }
}

/* Copy bytes from src to dst < src on stream, in pieces that never overlap their source. */
static void move_down(char *dst, const char *src, size_t bytes, cudaStream_t stream)
{
    size_t step = (size_t)(src - dst);
    for (size_t off = 0; off < bytes; off += step) {
        size_t n = bytes - off < step ? bytes - off : step;
        MOE_CHECK_CUDA(cudaMemcpyAsync(dst + off, src + off, n, cudaMemcpyDeviceToDevice, stream));
    }
}

/* ---- Groups ------------------------------------------------------------------------------- */

/* A group over comm (owned from here on), bootstrapped from comm's rank 0. */
static struct nccl_group *group_new(MPI_Comm comm, cudaStream_t stream, cudaStream_t comm_stream)
{
    struct nccl_group *g = calloc(1, sizeof(*g));
    if (g == NULL) {
        moe_eng_fatal(__FILE__, __LINE__, "out of memory for an NCCL group");
    }
    g->mpi = comm;
    g->stream = stream;
    g->comm_stream = comm_stream;
    MOE_CHECK_MPI(MPI_Comm_rank(comm, &g->rank));
    MOE_CHECK_MPI(MPI_Comm_size(comm, &g->size));
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (g->rank == 0) {
        MOE_CHECK_NCCL(ncclGetUniqueId(&id));
    }
    MOE_CHECK_MPI(MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, comm));
    MOE_CHECK_NCCL(ncclCommInitRank(&g->comm, g->size, id, g->rank));
    MOE_CHECK_CUDA(cudaEventCreateWithFlags(&g->ready, cudaEventDisableTiming));
    return g;
}

static void nccl_split(void *h, int color, int key, void **out)
{
    struct nccl_group *g = group_of(h);
    MPI_Comm c = MPI_COMM_NULL;
    MOE_CHECK_MPI(MPI_Comm_split(g->mpi, color >= 0 ? color : MPI_UNDEFINED, key, &c));
    *out = c == MPI_COMM_NULL ? NULL : group_new(c, g->stream, g->comm_stream);
}

static void nccl_split_shared(void *h, void **out)
{
    struct nccl_group *g = group_of(h);
    MPI_Comm c = MPI_COMM_NULL;
    MOE_CHECK_MPI(MPI_Comm_split_type(g->mpi, MPI_COMM_TYPE_SHARED, g->rank, MPI_INFO_NULL, &c));
    *out = group_new(c, g->stream, g->comm_stream);
}

static void nccl_free_handle(void *h)
{
    struct nccl_group *g = group_of(h);
    if (g == NULL) {
        return;
    }
    MOE_CHECK_CUDA(cudaStreamSynchronize(g->comm_stream));
    MOE_CHECK_CUDA(cudaStreamSynchronize(g->stream));
    MOE_CHECK_NCCL(ncclCommDestroy(g->comm));
    MOE_CHECK_CUDA(cudaEventDestroy(g->ready));
    int finalised = 0;
    (void)MPI_Finalized(&finalised);
    if (!finalised) {
        MOE_CHECK_MPI(MPI_Comm_free(&g->mpi));
    }
    free(g);
}

static void nccl_rank_size(void *h, int *rank, int *size)
{
    *rank = group_of(h)->rank;
    *size = group_of(h)->size;
}

/* ---- Operations on a given stream (blocking: compute stream; non-blocking: comm stream) ---- */

static void allreduce_on(struct nccl_group *g,
                         const void *send,
                         void *recv,
                         size_t count,
                         enum moe_comm_dtype dtype,
                         enum moe_comm_redop op,
                         cudaStream_t s)
{
    need_device(send, count, "allreduce");
    need_device(recv, count, "allreduce");
    MOE_CHECK_NCCL(ncclAllReduce(send, recv, count, nccl_type(dtype), nccl_op(op), g->comm, s));
}

static void allgather_on(struct nccl_group *g,
                         const void *send,
                         void *recv,
                         size_t count,
                         enum moe_comm_dtype dtype,
                         cudaStream_t s)
{
    need_device(send, count, "allgather");
    need_device(recv, count, "allgather");
    MOE_CHECK_NCCL(ncclAllGather(send, recv, count, nccl_type(dtype), g->comm, s));
}

/* In place (send == recv): NCCL's in-place form, then this rank's block to the start of recv. */
static void reducescatter_on(struct nccl_group *g,
                             const void *send,
                             void *recv,
                             size_t count,
                             enum moe_comm_dtype dtype,
                             enum moe_comm_redop op,
                             cudaStream_t s)
{
    need_device(send, count, "reducescatter");
    need_device(recv, count, "reducescatter");
    if (send != recv) {
        MOE_CHECK_NCCL(
            ncclReduceScatter(send, recv, count, nccl_type(dtype), nccl_op(op), g->comm, s));
        return;
    }
    char *mine = (char *)recv + at((size_t)g->rank * count, dtype);
    MOE_CHECK_NCCL(ncclReduceScatter(send, mine, count, nccl_type(dtype), nccl_op(op), g->comm, s));
    if (g->rank > 0 && count > 0) {
        move_down(recv, mine, at(count, dtype), s);
    }
}

static void alltoallv_on(struct nccl_group *g,
                         const void *send,
                         const int *send_counts,
                         const int *send_displs,
                         void *recv,
                         const int *recv_counts,
                         const int *recv_displs,
                         enum moe_comm_dtype dtype,
                         cudaStream_t s)
{
    const char *sb = send;
    char *rb = recv;
    int me = g->rank;
    MOE_ASSERT(send_counts[me] == recv_counts[me]);
    if (send_counts[me] > 0) {
        need_device(sb + at((size_t)send_displs[me], dtype), 1, "alltoallv");
        need_device(rb + at((size_t)recv_displs[me], dtype), 1, "alltoallv");
        MOE_CHECK_CUDA(cudaMemcpyAsync(
            rb + at((size_t)recv_displs[me], dtype), sb + at((size_t)send_displs[me], dtype),
            at((size_t)send_counts[me], dtype), cudaMemcpyDeviceToDevice, s));
    }
    ncclDataType_t t = nccl_type(dtype);
    MOE_CHECK_NCCL(ncclGroupStart());
    for (int p = 0; p < g->size; p++) {
        if (p == me) {
            continue;
        }
        if (send_counts[p] > 0) {
            const char *src = sb + at((size_t)send_displs[p], dtype);
            need_device(src, 1, "alltoallv send");
            MOE_CHECK_NCCL(ncclSend(src, (size_t)send_counts[p], t, p, g->comm, s));
        }
        if (recv_counts[p] > 0) {
            char *dst = rb + at((size_t)recv_displs[p], dtype);
            need_device(dst, 1, "alltoallv recv");
            MOE_CHECK_NCCL(ncclRecv(dst, (size_t)recv_counts[p], t, p, g->comm, s));
        }
    }
    MOE_CHECK_NCCL(ncclGroupEnd());
}

/* ---- Blocking table members ------------------------------------------------------------------ */

static void nccl_allreduce(void *h,
                           const void *send,
                           void *recv,
                           size_t count,
                           enum moe_comm_dtype dtype,
                           enum moe_comm_redop op)
{
    struct nccl_group *g = group_of(h);
    allreduce_on(g, send, recv, count, dtype, op, g->stream);
}

static void
nccl_allgather(void *h, const void *send, void *recv, size_t count, enum moe_comm_dtype dtype)
{
    struct nccl_group *g = group_of(h);
    allgather_on(g, send, recv, count, dtype, g->stream);
}

/* One ncclBroadcast per root into its block of recv. */
static void nccl_allgatherv(void *h,
                            const void *send,
                            int send_count,
                            void *recv,
                            const int *counts,
                            const int *displs,
                            enum moe_comm_dtype dtype)
{
    struct nccl_group *g = group_of(h);
    MOE_ASSERT(send_count == counts[g->rank]);
    char *rb = recv;
    MOE_CHECK_NCCL(ncclGroupStart());
    for (int r = 0; r < g->size; r++) {
        if (counts[r] == 0) {
            continue;
        }
        char *dst = rb + at((size_t)displs[r], dtype);
        const void *src = r == g->rank ? send : dst;
        need_device(src, 1, "allgatherv");
        need_device(dst, 1, "allgatherv");
        MOE_CHECK_NCCL(
            ncclBroadcast(src, dst, (size_t)counts[r], nccl_type(dtype), r, g->comm, g->stream));
    }
    MOE_CHECK_NCCL(ncclGroupEnd());
}

static void nccl_reducescatter(void *h,
                               const void *send,
                               void *recv,
                               size_t count,
                               enum moe_comm_dtype dtype,
                               enum moe_comm_redop op)
{
    struct nccl_group *g = group_of(h);
    reducescatter_on(g, send, recv, count, dtype, op, g->stream);
}

/* One ncclReduce per root of its block; in place, each root reduces its block where it is and
 * moves it to the start of recv afterwards. */
static void nccl_reducescatterv(void *h,
                                const void *send,
                                void *recv,
                                const int *counts,
                                enum moe_comm_dtype dtype,
                                enum moe_comm_redop op)
{
    struct nccl_group *g = group_of(h);
    bool in_place = send == recv;
    const char *sb = send;
    size_t off = 0;
    size_t my_off = 0;
    MOE_CHECK_NCCL(ncclGroupStart());
    for (int r = 0; r < g->size; r++) {
        if (r == g->rank) {
            my_off = off;
        }
        if (counts[r] > 0) {
            const char *src = sb + at(off, dtype);
            char *dst = in_place ? (char *)recv + at(off, dtype) : (char *)recv;
            need_device(src, 1, "reducescatterv");
            need_device(dst, 1, "reducescatterv");
            MOE_CHECK_NCCL(ncclReduce(src, dst, (size_t)counts[r], nccl_type(dtype), nccl_op(op), r,
                                      g->comm, g->stream));
        }
        off += (size_t)counts[r];
    }
    MOE_CHECK_NCCL(ncclGroupEnd());
    if (in_place && my_off > 0 && counts[g->rank] > 0) {
        move_down(recv, (const char *)recv + at(my_off, dtype), at((size_t)counts[g->rank], dtype),
                  g->stream);
    }
}

/* Equal blocks of count elements: the rank's own block copied, the others grouped send/recv. */
static void
nccl_alltoall(void *h, const void *send, void *recv, size_t count, enum moe_comm_dtype dtype)
{
    struct nccl_group *g = group_of(h);
    if (count == 0) {
        return;
    }
    const char *sb = send;
    char *rb = recv;
    size_t block = at(count, dtype);
    need_device(send, count, "alltoall");
    need_device(recv, count, "alltoall");
    MOE_CHECK_CUDA(cudaMemcpyAsync(rb + (size_t)g->rank * block, sb + (size_t)g->rank * block,
                                   block, cudaMemcpyDeviceToDevice, g->stream));
    ncclDataType_t t = nccl_type(dtype);
    MOE_CHECK_NCCL(ncclGroupStart());
    for (int p = 0; p < g->size; p++) {
        if (p != g->rank) {
            MOE_CHECK_NCCL(ncclSend(sb + (size_t)p * block, count, t, p, g->comm, g->stream));
            MOE_CHECK_NCCL(ncclRecv(rb + (size_t)p * block, count, t, p, g->comm, g->stream));
        }
    }
    MOE_CHECK_NCCL(ncclGroupEnd());
}

static void nccl_alltoallv(void *h,
                           const void *send,
                           const int *send_counts,
                           const int *send_displs,
                           void *recv,
                           const int *recv_counts,
                           const int *recv_displs,
                           enum moe_comm_dtype dtype)
{
    struct nccl_group *g = group_of(h);
    alltoallv_on(g, send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype,
                 g->stream);
}

static void nccl_bcast(void *h, void *buf, size_t count, enum moe_comm_dtype dtype, int root)
{
    struct nccl_group *g = group_of(h);
    need_device(buf, count, "bcast");
    MOE_CHECK_NCCL(ncclBroadcast(buf, buf, count, nccl_type(dtype), root, g->comm, g->stream));
}

static void
nccl_send(void *h, const void *buf, size_t count, enum moe_comm_dtype dtype, int peer, int tag)
{
    (void)tag; /* NCCL matches in issue order */
    struct nccl_group *g = group_of(h);
    need_peer(g, peer, "send");
    need_device(buf, count, "send");
    MOE_CHECK_NCCL(ncclSend(buf, count, nccl_type(dtype), peer, g->comm, g->stream));
}

static void
nccl_recv(void *h, void *buf, size_t count, enum moe_comm_dtype dtype, int peer, int tag)
{
    (void)tag;
    struct nccl_group *g = group_of(h);
    need_peer(g, peer, "recv");
    need_device(buf, count, "recv");
    MOE_CHECK_NCCL(ncclRecv(buf, count, nccl_type(dtype), peer, g->comm, g->stream));
}

static void nccl_barrier(void *h)
{
    struct nccl_group *g = group_of(h);
    MOE_CHECK_CUDA(cudaStreamSynchronize(g->comm_stream));
    MOE_CHECK_CUDA(cudaStreamSynchronize(g->stream));
    MOE_CHECK_MPI(MPI_Barrier(g->mpi));
}

/* ---- Non-blocking: on the communication stream, after the compute stream's queued work ------ */

static cudaStream_t async_begin(struct nccl_group *g)
{
    MOE_CHECK_CUDA(cudaEventRecord(g->ready, g->stream));
    MOE_CHECK_CUDA(cudaStreamWaitEvent(g->comm_stream, g->ready, 0));
    return g->comm_stream;
}

static void async_end(struct nccl_group *g, struct moe_comm_req *req)
{
    MOE_ASSERT(!req->is_active);
    struct nccl_req *r = req_of(req);
    MOE_CHECK_CUDA(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming));
    MOE_CHECK_CUDA(cudaEventRecord(r->done, g->comm_stream));
    r->stream = g->stream;
    req->is_active = true;
}

static void nccl_isend(void *h,
                       const void *buf,
                       size_t count,
                       enum moe_comm_dtype dtype,
                       int peer,
                       int tag,
                       struct moe_comm_req *req)
{
    (void)tag;
    struct nccl_group *g = group_of(h);
    need_peer(g, peer, "isend");
    need_device(buf, count, "isend");
    cudaStream_t s = async_begin(g);
    MOE_CHECK_NCCL(ncclSend(buf, count, nccl_type(dtype), peer, g->comm, s));
    async_end(g, req);
}

static void nccl_irecv(void *h,
                       void *buf,
                       size_t count,
                       enum moe_comm_dtype dtype,
                       int peer,
                       int tag,
                       struct moe_comm_req *req)
{
    (void)tag;
    struct nccl_group *g = group_of(h);
    need_peer(g, peer, "irecv");
    need_device(buf, count, "irecv");
    cudaStream_t s = async_begin(g);
    MOE_CHECK_NCCL(ncclRecv(buf, count, nccl_type(dtype), peer, g->comm, s));
    async_end(g, req);
}

static void nccl_iallreduce(void *h,
                            const void *send,
                            void *recv,
                            size_t count,
                            enum moe_comm_dtype dtype,
                            enum moe_comm_redop op,
                            struct moe_comm_req *req)
{
    struct nccl_group *g = group_of(h);
    allreduce_on(g, send, recv, count, dtype, op, async_begin(g));
    async_end(g, req);
}

static void nccl_iallgather(void *h,
                            const void *send,
                            void *recv,
                            size_t count,
                            enum moe_comm_dtype dtype,
                            struct moe_comm_req *req)
{
    struct nccl_group *g = group_of(h);
    allgather_on(g, send, recv, count, dtype, async_begin(g));
    async_end(g, req);
}

static void nccl_ireducescatter(void *h,
                                const void *send,
                                void *recv,
                                size_t count,
                                enum moe_comm_dtype dtype,
                                enum moe_comm_redop op,
                                struct moe_comm_req *req)
{
    struct nccl_group *g = group_of(h);
    reducescatter_on(g, send, recv, count, dtype, op, async_begin(g));
    async_end(g, req);
}

static void nccl_ialltoallv(void *h,
                            const void *send,
                            const int *send_counts,
                            const int *send_displs,
                            void *recv,
                            const int *recv_counts,
                            const int *recv_displs,
                            enum moe_comm_dtype dtype,
                            struct moe_comm_req *req)
{
    struct nccl_group *g = group_of(h);
    alltoallv_on(g, send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype,
                 async_begin(g));
    async_end(g, req);
}

/* The compute stream waits for the operation; the host does not. */
static void nccl_wait(struct moe_comm_req *req)
{
    struct nccl_req *r = req_of(req);
    MOE_CHECK_CUDA(cudaStreamWaitEvent(r->stream, r->done, 0));
    MOE_CHECK_CUDA(cudaEventDestroy(r->done)); /* released once the event completes */
    req->is_active = false;
}

static bool nccl_test(struct moe_comm_req *req)
{
    struct nccl_req *r = req_of(req);
    cudaError_t q = cudaEventQuery(r->done);
    if (q == cudaErrorNotReady) {
        (void)cudaGetLastError(); /* "not ready" is an answer, not an error: clear it */
        return false;
    }
    MOE_CHECK_CUDA(q);
    nccl_wait(req); /* complete: later compute-stream work stays ordered after it */
    return true;
}

static int nccl_tag_limit(void *h)
{
    (void)h;
    return INT_MAX;
}

static const struct moe_comm_backend nccl_backend = {
    .name = "nccl",
    .mem = MOE_COMM_MEM_DEVICE,
    .split = nccl_split,
    .split_shared = nccl_split_shared,
    .free_handle = nccl_free_handle,
    .rank_size = nccl_rank_size,
    .allreduce = nccl_allreduce,
    .allgather = nccl_allgather,
    .allgatherv = nccl_allgatherv,
    .reducescatter = nccl_reducescatter,
    .reducescatterv = nccl_reducescatterv,
    .alltoall = nccl_alltoall,
    .alltoallv = nccl_alltoallv,
    .bcast = nccl_bcast,
    .send = nccl_send,
    .recv = nccl_recv,
    .barrier = nccl_barrier,
    .isend = nccl_isend,
    .irecv = nccl_irecv,
    .iallreduce = nccl_iallreduce,
    .iallgather = nccl_iallgather,
    .ireducescatter = nccl_ireducescatter,
    .ialltoallv = nccl_ialltoallv,
    .wait = nccl_wait,
    .test = nccl_test,
    .tag_limit = nccl_tag_limit,
};

/* ---- One-rank groups: no communication, stream-ordered copies ------------------------------ */
/*
 * A group of one rank exchanges nothing: every collective is the identity (a copy when the
 * buffers differ), and NCCL would do exactly that copy on the stream. moe_comm_nccl_from_mpi hands
 * such groups this table instead of initialising an NCCL communicator for each (on one GPU that is
 * every group of the folding, a dozen NCCL set-ups per engine).
 */
struct local_group {
    cudaStream_t stream;
};

static cudaStream_t local_stream(void *h)
{
    return ((struct local_group *)h)->stream;
}

static void local_copy(void *h, void *dst, const void *src, size_t count, enum moe_comm_dtype dt)
{
    if (count == 0 || dst == src) {
        return;
    }
    need_device(src, count, "local copy");
    need_device(dst, count, "local copy");
    MOE_CHECK_CUDA(
        cudaMemcpyAsync(dst, src, at(count, dt), cudaMemcpyDeviceToDevice, local_stream(h)));
}

static void *local_new(cudaStream_t stream)
{
    struct local_group *g = calloc(1, sizeof(*g));
    if (g == NULL) {
        moe_eng_fatal(__FILE__, __LINE__, "out of memory for a one-rank group");
    }
    g->stream = stream;
    return g;
}

static void local_split(void *h, int color, int key, void **out)
{
    (void)key;
    *out = color >= 0 ? local_new(local_stream(h)) : NULL;
}

static void local_split_shared(void *h, void **out)
{
    *out = local_new(local_stream(h));
}

static void local_free_handle(void *h)
{
    free(h);
}

static void local_rank_size(void *h, int *rank, int *size)
{
    (void)h;
    *rank = 0;
    *size = 1;
}

static void local_allreduce(void *h,
                            const void *send,
                            void *recv,
                            size_t count,
                            enum moe_comm_dtype dtype,
                            enum moe_comm_redop op)
{
    (void)op;
    local_copy(h, recv, send, count, dtype);
}

static void
local_allgather(void *h, const void *send, void *recv, size_t count, enum moe_comm_dtype dtype)
{
    local_copy(h, recv, send, count, dtype);
}

static void local_allgatherv(void *h,
                             const void *send,
                             int send_count,
                             void *recv,
                             const int *counts,
                             const int *displs,
                             enum moe_comm_dtype dtype)
{
    MOE_ASSERT(send_count == counts[0]);
    local_copy(h, (char *)recv + at((size_t)displs[0], dtype), send, (size_t)send_count, dtype);
}

static void local_reducescatter(void *h,
                                const void *send,
                                void *recv,
                                size_t count,
                                enum moe_comm_dtype dtype,
                                enum moe_comm_redop op)
{
    (void)op;
    local_copy(h, recv, send, count, dtype);
}

static void local_reducescatterv(void *h,
                                 const void *send,
                                 void *recv,
                                 const int *counts,
                                 enum moe_comm_dtype dtype,
                                 enum moe_comm_redop op)
{
    (void)op;
    local_copy(h, recv, send, (size_t)counts[0], dtype);
}

static void
local_alltoall(void *h, const void *send, void *recv, size_t count, enum moe_comm_dtype dtype)
{
    local_copy(h, recv, send, count, dtype);
}

static void local_alltoallv(void *h,
                            const void *send,
                            const int *send_counts,
                            const int *send_displs,
                            void *recv,
                            const int *recv_counts,
                            const int *recv_displs,
                            enum moe_comm_dtype dtype)
{
    MOE_ASSERT(send_counts[0] == recv_counts[0]);
    local_copy(h, (char *)recv + at((size_t)recv_displs[0], dtype),
               (const char *)send + at((size_t)send_displs[0], dtype), (size_t)send_counts[0],
               dtype);
}

static void local_bcast(void *h, void *buf, size_t count, enum moe_comm_dtype dtype, int root)
{
    (void)h;
    (void)buf;
    (void)count;
    (void)dtype;
    MOE_ASSERT(root == 0);
}

static void
local_send(void *h, const void *buf, size_t count, enum moe_comm_dtype dtype, int peer, int tag)
{
    (void)h;
    (void)buf;
    (void)count;
    (void)dtype;
    (void)tag;
    moe_eng_fatal(__FILE__, __LINE__, "send to peer %d in a group of one rank", peer);
}

static void
local_recv(void *h, void *buf, size_t count, enum moe_comm_dtype dtype, int peer, int tag)
{
    local_send(h, buf, count, dtype, peer, tag);
}

static void local_barrier(void *h)
{
    MOE_CHECK_CUDA(cudaStreamSynchronize(local_stream(h)));
}

/* Non-blocking forms complete at once (stream order is the only order): no request stays open. */
static void local_isend(void *h,
                        const void *buf,
                        size_t count,
                        enum moe_comm_dtype dtype,
                        int peer,
                        int tag,
                        struct moe_comm_req *req)
{
    (void)req;
    local_send(h, buf, count, dtype, peer, tag);
}

static void local_irecv(void *h,
                        void *buf,
                        size_t count,
                        enum moe_comm_dtype dtype,
                        int peer,
                        int tag,
                        struct moe_comm_req *req)
{
    (void)req;
    local_send(h, buf, count, dtype, peer, tag);
}

static void local_iallreduce(void *h,
                             const void *send,
                             void *recv,
                             size_t count,
                             enum moe_comm_dtype dtype,
                             enum moe_comm_redop op,
                             struct moe_comm_req *req)
{
    local_allreduce(h, send, recv, count, dtype, op);
    req->is_active = false;
}

static void local_iallgather(void *h,
                             const void *send,
                             void *recv,
                             size_t count,
                             enum moe_comm_dtype dtype,
                             struct moe_comm_req *req)
{
    local_allgather(h, send, recv, count, dtype);
    req->is_active = false;
}

static void local_ireducescatter(void *h,
                                 const void *send,
                                 void *recv,
                                 size_t count,
                                 enum moe_comm_dtype dtype,
                                 enum moe_comm_redop op,
                                 struct moe_comm_req *req)
{
    local_reducescatter(h, send, recv, count, dtype, op);
    req->is_active = false;
}

static void local_ialltoallv(void *h,
                             const void *send,
                             const int *send_counts,
                             const int *send_displs,
                             void *recv,
                             const int *recv_counts,
                             const int *recv_displs,
                             enum moe_comm_dtype dtype,
                             struct moe_comm_req *req)
{
    local_alltoallv(h, send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype);
    req->is_active = false;
}

static void local_wait(struct moe_comm_req *req)
{
    req->is_active = false;
}

static bool local_test(struct moe_comm_req *req)
{
    req->is_active = false;
    return true;
}

static const struct moe_comm_backend local_backend = {
    .name = "local",
    .mem = MOE_COMM_MEM_DEVICE,
    .split = local_split,
    .split_shared = local_split_shared,
    .free_handle = local_free_handle,
    .rank_size = local_rank_size,
    .allreduce = local_allreduce,
    .allgather = local_allgather,
    .allgatherv = local_allgatherv,
    .reducescatter = local_reducescatter,
    .reducescatterv = local_reducescatterv,
    .alltoall = local_alltoall,
    .alltoallv = local_alltoallv,
    .bcast = local_bcast,
    .send = local_send,
    .recv = local_recv,
    .barrier = local_barrier,
    .isend = local_isend,
    .irecv = local_irecv,
    .iallreduce = local_iallreduce,
    .iallgather = local_iallgather,
    .ireducescatter = local_ireducescatter,
    .ialltoallv = local_ialltoallv,
    .wait = local_wait,
    .test = local_test,
    .tag_limit = nccl_tag_limit,
};

/* A one-rank group on stream (no NCCL). */
static enum moe_status local_create(cudaStream_t stream, const char *name, moe_comm_t **out)
{
    void *h = local_new(stream);
    enum moe_status st = moe_comm_wrap(&local_backend, h, false, name, out);
    if (st != MOE_OK) {
        local_free_handle(h);
    }
    return st;
}

bool moe_comm_nccl_is_built(void)
{
    return true;
}

const struct moe_comm_backend *moe_comm_nccl_backend(void)
{
    return &nccl_backend;
}

enum moe_status moe_comm_nccl_create(MPI_Comm comm,
                                     struct CUstream_st *stream,
                                     struct CUstream_st *comm_stream,
                                     const char *name,
                                     moe_comm_t **out)
{
    *out = NULL;
    MPI_Comm dup = MPI_COMM_NULL;
    MOE_CHECK_MPI(MPI_Comm_dup(comm, &dup));
    struct nccl_group *g = group_new(dup, stream, comm_stream);
    enum moe_status st = moe_comm_wrap(&nccl_backend, g, false, name, out);
    if (st != MOE_OK) {
        nccl_free_handle(g);
    }
    return st;
}

#else /* NCCL backend not built */

bool moe_comm_nccl_is_built(void)
{
    return false;
}

const struct moe_comm_backend *moe_comm_nccl_backend(void)
{
    return NULL;
}

enum moe_status moe_comm_nccl_create(MPI_Comm comm,
                                     struct CUstream_st *stream,
                                     struct CUstream_st *comm_stream,
                                     const char *name,
                                     moe_comm_t **out)
{
    (void)comm;
    (void)stream;
    (void)comm_stream;
    (void)name;
    *out = NULL;
    return MOE_ERR_UNSUPPORTED;
}

#endif

enum moe_status moe_comm_nccl_from_mpi(const moe_comm_t *mpi_group,
                                       struct CUstream_st *stream,
                                       struct CUstream_st *comm_stream,
                                       moe_comm_t **out)
{
    *out = NULL;
    MOE_ASSERT(moe_comm_get_backend(mpi_group) == moe_comm_mpi_backend());
#if defined(MOE_HAVE_NCCL) && defined(MOE_HAVE_CUDA_KERNELS)
    if (moe_comm_size(mpi_group) == 1) {
        return local_create(stream, moe_comm_name(mpi_group), out);
    }
#endif
    MPI_Comm c = *(MPI_Comm *)moe_comm_handle(mpi_group);
    return moe_comm_nccl_create(c, stream, comm_stream, moe_comm_name(mpi_group), out);
}
