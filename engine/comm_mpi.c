/*
 * MPI backend of engine/comm.h on host buffers: a thin mapping of each table member to the MPI-3
 * call of the same meaning (MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Ialltoallv, ...), every
 * call checked with MOE_CHECK_MPI. The group handle is a malloc'd MPI_Comm; requests keep their
 * MPI_Request inside struct moe_comm_req, so non-blocking calls allocate nothing (but the float-sum
 * reduce-scatter: its scratch, mpi_ireducescatter).
 */
#include "engine/comm_mpi.h"

#include "engine/check.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(MPI_Request) <= sizeof(((struct moe_comm_req *)0)->impl),
               "struct moe_comm_req must hold an MPI_Request");

static MPI_Comm comm_of(void *h)
{
    return *(MPI_Comm *)h;
}

static MPI_Datatype mpi_type(enum moe_comm_dtype dtype)
{
    switch (dtype) {
    case MOE_COMM_F32:
        return MPI_FLOAT;
    case MOE_COMM_I32:
        return MPI_INT;
    case MOE_COMM_F64:
        return MPI_DOUBLE;
    case MOE_COMM_NUM_DTYPES:
        break;
    }
    moe_eng_fatal(__FILE__, __LINE__, "unknown comm dtype %d", (int)dtype);
}

static MPI_Op mpi_op(enum moe_comm_redop op)
{
    return op == MOE_COMM_MAX ? MPI_MAX : MPI_SUM;
}

/* MPI counts are int; the engine's buffers are far below 2^31 elements per call. */
static int icount(size_t count)
{
    if (count > (size_t)0x7fffffff) {
        moe_eng_fatal(__FILE__, __LINE__, "message of %zu elements exceeds MPI's int count", count);
    }
    return (int)count;
}

static MPI_Request *req_of(struct moe_comm_req *req)
{
    return (MPI_Request *)(void *)req->impl;
}

/* A request's second word: the state of a pairwise reduce-scatter in flight (rs_async below), NULL
 * for a request that is one MPI_Request. */
struct rs_async;
_Static_assert(sizeof(MPI_Request) + sizeof(struct rs_async *) <=
                   sizeof(((struct moe_comm_req *)0)->impl),
               "struct moe_comm_req must hold an MPI_Request and a pointer");
static struct rs_async **rs_of(struct moe_comm_req *req)
{
    return (struct rs_async **)(void *)(req->impl + sizeof(MPI_Request));
}

/* The request is one MPI_Request. */
static MPI_Request *plain_req(struct moe_comm_req *req)
{
    *rs_of(req) = NULL;
    return req_of(req);
}

static void *wrap_comm(MPI_Comm c)
{
    MPI_Comm *h = malloc(sizeof(MPI_Comm)); /* NOLINT(bugprone-sizeof-expression): MPI_Comm
                                               is a handle type (a pointer in Open MPI) */
    if (h != NULL) {
        *h = c;
        return h;
    }
    moe_eng_fatal(__FILE__, __LINE__, "out of memory for a communicator handle");
}

static void mpi_split(void *h, int color, int key, void **out)
{
    MPI_Comm c = MPI_COMM_NULL;
    MOE_CHECK_MPI(MPI_Comm_split(comm_of(h), color >= 0 ? color : MPI_UNDEFINED, key, &c));
    *out = c == MPI_COMM_NULL ? NULL : wrap_comm(c);
}

static void mpi_split_shared(void *h, void **out)
{
    MPI_Comm c = MPI_COMM_NULL;
    int rank = 0;
    MOE_CHECK_MPI(MPI_Comm_rank(comm_of(h), &rank));
    MOE_CHECK_MPI(MPI_Comm_split_type(comm_of(h), MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &c));
    *out = wrap_comm(c);
}

static void mpi_free_handle(void *h)
{
    if (h == NULL) {
        return;
    }
    MPI_Comm c = comm_of(h);
    int finalised = 0;
    (void)MPI_Finalized(&finalised);
    if (!finalised && c != MPI_COMM_NULL) {
        MOE_CHECK_MPI(MPI_Comm_free(&c));
    }
    free(h);
}

static void mpi_rank_size(void *h, int *rank, int *size)
{
    MOE_CHECK_MPI(MPI_Comm_rank(comm_of(h), rank));
    MOE_CHECK_MPI(MPI_Comm_size(comm_of(h), size));
}

static void mpi_allreduce(void *h,
                          const void *send,
                          void *recv,
                          size_t count,
                          enum moe_comm_dtype dtype,
                          enum moe_comm_redop op)
{
    MOE_CHECK_MPI(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, icount(count),
                                mpi_type(dtype), mpi_op(op), comm_of(h)));
}

static bool gather_in_place(
    void *h, const void *send, const void *recv, size_t count, enum moe_comm_dtype dtype)
{
    int rank = 0;
    MOE_CHECK_MPI(MPI_Comm_rank(comm_of(h), &rank));
    return (const char *)send ==
           (const char *)recv + (size_t)rank * count * moe_comm_dtype_bytes(dtype);
}

static void
mpi_allgather(void *h, const void *send, void *recv, size_t count, enum moe_comm_dtype dtype)
{
    bool in_place = gather_in_place(h, send, recv, count, dtype);
    MOE_CHECK_MPI(MPI_Allgather(in_place ? MPI_IN_PLACE : send, icount(count), mpi_type(dtype),
                                recv, icount(count), mpi_type(dtype), comm_of(h)));
}

static void mpi_allgatherv(void *h,
                           const void *send,
                           int send_count,
                           void *recv,
                           const int *counts,
                           const int *displs,
                           enum moe_comm_dtype dtype)
{
    MOE_CHECK_MPI(MPI_Allgatherv(send, send_count, mpi_type(dtype), recv, counts, displs,
                                 mpi_type(dtype), comm_of(h)));
}

/* Elements per exchange of the pairwise reduce-scatter: one bounded scratch chunk. */
enum { RS_CHUNK = 64 * 1024 };

/*
 * Float-sum reduce-scatter as a pairwise exchange: in round i (1..n-1) a rank sends the block
 * owned by rank+i and adds the block that rank-i sent it into its own, one RS_CHUNK at a time.
 * Each rank sends (n-1)/n of the input once, as the cost model prices a reduce-scatter. Open MPI
 * 4.1's MPI_Reduce_scatter_block runs 3x slower than an all-reduce of the same buffer above a few
 * MiB on shared memory (moefold-bench: 16 MiB in 12.7 ms vs 4.0 ms), whatever algorithm the tuned
 * component is told to use, so the engine does not use it for its gradient buckets. Each block's
 * sum has a fixed order (own, then rank-1, rank-2, ...): deterministic run to run.
 */
static void rs_pairwise_f32(MPI_Comm c, const float *send, float *recv, size_t count)
{
    int rank = 0;
    int n = 1;
    MOE_CHECK_MPI(MPI_Comm_rank(c, &rank));
    MOE_CHECK_MPI(MPI_Comm_size(c, &n));
    bool in_place = (const float *)recv == send;
    /* The running sum starts in the rank's own block (never sent). In place, block 0 is free
     * once the round that sends it has sent each chunk, so that round writes its sums there and
     * the result lands at the start of recv with no extra copy (rank 0's own block is there). */
    float *acc = in_place ? recv + (size_t)rank * count : recv;
    if (!in_place) {
        memcpy(recv, send + (size_t)rank * count, count * sizeof(float));
    }
    size_t chunk = count < RS_CHUNK ? count : RS_CHUNK;
    float *tmp = malloc((chunk > 0 ? chunk : 1) * sizeof(float));
    if (tmp == NULL) {
        moe_eng_fatal(__FILE__, __LINE__, "out of memory for a reduce-scatter chunk of %zu floats",
                      chunk);
    }
    for (int i = 1; i < n; i++) {
        int to = (rank + i) % n;
        int from = (rank - i + n) % n;
        const float *out = send + (size_t)to * count;
        float *dst = in_place && to == 0 ? recv : acc;
        for (size_t off = 0; off < count; off += chunk) {
            size_t len = count - off < chunk ? count - off : chunk;
            MOE_CHECK_MPI(MPI_Sendrecv(out + off, icount(len), MPI_FLOAT, to, i, tmp, icount(len),
                                       MPI_FLOAT, from, i, c, MPI_STATUS_IGNORE));
            const float *a = acc + off;
            float *d = dst + off;
#pragma omp simd
            for (size_t j = 0; j < len; j++) {
                d[j] = a[j] + tmp[j];
            }
        }
        acc = dst;
    }
    free(tmp);
}

static void mpi_reducescatter(void *h,
                              const void *send,
                              void *recv,
                              size_t count,
                              enum moe_comm_dtype dtype,
                              enum moe_comm_redop op)
{
    if (dtype == MOE_COMM_F32 && op == MOE_COMM_SUM) {
        rs_pairwise_f32(comm_of(h), send, recv, count);
        return;
    }
    MOE_CHECK_MPI(MPI_Reduce_scatter_block(send == recv ? MPI_IN_PLACE : send, recv, icount(count),
                                           mpi_type(dtype), mpi_op(op), comm_of(h)));
}

/*
 * The pairwise exchange of rs_pairwise_f32 with a block of counts[r] floats per rank r (Open MPI's
 * MPI_Reduce_scatter has the slowness of MPI_Reduce_scatter_block; the ETP reduce of expert rows
 * is this). The sum builds in the rank's own block and lands at the start of recv (in place: moved
 * there at the end, once every block has been sent). Same fixed summation order.
 */
static void rsv_pairwise_f32(MPI_Comm c, const float *send, float *recv, const int *counts)
{
    int rank = 0;
    int n = 1;
    MOE_CHECK_MPI(MPI_Comm_rank(c, &rank));
    MOE_CHECK_MPI(MPI_Comm_size(c, &n));
    size_t mine = (size_t)counts[rank];
    size_t at = 0;
    for (int r = 0; r < rank; r++) {
        at += (size_t)counts[r];
    }
    bool in_place = (const float *)recv == send;
    float *acc = in_place ? recv + at : recv;
    if (!in_place && mine > 0) {
        memcpy(recv, send + at, mine * sizeof(float));
    }
    size_t chunk = mine < RS_CHUNK ? mine : RS_CHUNK;
    float *tmp = malloc((chunk > 0 ? chunk : 1) * sizeof(float));
    if (tmp == NULL) {
        moe_eng_fatal(__FILE__, __LINE__, "out of memory for a reduce-scatter chunk of %zu floats",
                      chunk);
    }
    for (int i = 1; i < n; i++) {
        int to = (rank + i) % n;
        int from = (rank - i + n) % n;
        size_t to_at = 0;
        for (int r = 0; r < to; r++) {
            to_at += (size_t)counts[r];
        }
        size_t to_len = (size_t)counts[to];
        /* The pair (this rank -> to) exchanges ceil(to_len / chunk) messages and (from -> this
         * rank) ceil(mine / chunk): each side counts the same. Sends are non-blocking, so a cycle
         * of ranks with more to send than to receive cannot block on each other. */
        size_t step = RS_CHUNK;
        size_t nsend = (to_len + step - 1) / step;
        size_t nrecv = (mine + step - 1) / step;
        size_t rounds = nsend > nrecv ? nsend : nrecv;
        for (size_t k = 0; k < rounds; k++) {
            size_t off = k * step;
            MPI_Request sreq = MPI_REQUEST_NULL;
            if (k < nsend) {
                size_t slen = to_len - off < step ? to_len - off : step;
                MOE_CHECK_MPI(
                    MPI_Isend(send + to_at + off, icount(slen), MPI_FLOAT, to, i, c, &sreq));
            }
            if (k < nrecv) {
                size_t rlen = mine - off < step ? mine - off : step;
                MOE_CHECK_MPI(
                    MPI_Recv(tmp, icount(rlen), MPI_FLOAT, from, i, c, MPI_STATUS_IGNORE));
                float *d = acc + off;
#pragma omp simd
                for (size_t j = 0; j < rlen; j++) {
                    d[j] += tmp[j];
                }
            }
            MOE_CHECK_MPI(MPI_Wait(&sreq, MPI_STATUS_IGNORE));
        }
    }
    if (in_place && acc != recv && mine > 0) {
        memmove(recv, acc, mine * sizeof(float));
    }
    free(tmp);
}

static void mpi_reducescatterv(void *h,
                               const void *send,
                               void *recv,
                               const int *counts,
                               enum moe_comm_dtype dtype,
                               enum moe_comm_redop op)
{
    if (dtype == MOE_COMM_F32 && op == MOE_COMM_SUM) {
        rsv_pairwise_f32(comm_of(h), send, recv, counts);
        return;
    }
    MOE_CHECK_MPI(MPI_Reduce_scatter(send == recv ? MPI_IN_PLACE : send, recv, counts,
                                     mpi_type(dtype), mpi_op(op), comm_of(h)));
}

static void
mpi_alltoall(void *h, const void *send, void *recv, size_t count, enum moe_comm_dtype dtype)
{
    MOE_CHECK_MPI(MPI_Alltoall(send, icount(count), mpi_type(dtype), recv, icount(count),
                               mpi_type(dtype), comm_of(h)));
}

static void mpi_alltoallv(void *h,
                          const void *send,
                          const int *send_counts,
                          const int *send_displs,
                          void *recv,
                          const int *recv_counts,
                          const int *recv_displs,
                          enum moe_comm_dtype dtype)
{
    MOE_CHECK_MPI(MPI_Alltoallv(send, send_counts, send_displs, mpi_type(dtype), recv, recv_counts,
                                recv_displs, mpi_type(dtype), comm_of(h)));
}

static void mpi_bcast(void *h, void *buf, size_t count, enum moe_comm_dtype dtype, int root)
{
    MOE_CHECK_MPI(MPI_Bcast(buf, icount(count), mpi_type(dtype), root, comm_of(h)));
}

static void
mpi_send(void *h, const void *buf, size_t count, enum moe_comm_dtype dtype, int peer, int tag)
{
    MOE_CHECK_MPI(MPI_Send(buf, icount(count), mpi_type(dtype), peer, tag, comm_of(h)));
}

static void mpi_recv(void *h, void *buf, size_t count, enum moe_comm_dtype dtype, int peer, int tag)
{
    MOE_CHECK_MPI(
        MPI_Recv(buf, icount(count), mpi_type(dtype), peer, tag, comm_of(h), MPI_STATUS_IGNORE));
}

static void mpi_barrier(void *h)
{
    MOE_CHECK_MPI(MPI_Barrier(comm_of(h)));
}

/* The non-blocking calls return their MPI_Request inside struct moe_comm_req; the caller
 * completes it with moe_comm_wait/test (mpi_wait/mpi_test below), which a per-function request
 * checker cannot follow. */
/* NOLINTBEGIN(clang-analyzer-optin.mpi.MPI-Checker) */
static void mpi_isend(void *h,
                      const void *buf,
                      size_t count,
                      enum moe_comm_dtype dtype,
                      int peer,
                      int tag,
                      struct moe_comm_req *req)
{
    MOE_CHECK_MPI(
        MPI_Isend(buf, icount(count), mpi_type(dtype), peer, tag, comm_of(h), plain_req(req)));
    req->is_active = true;
}

static void mpi_irecv(void *h,
                      void *buf,
                      size_t count,
                      enum moe_comm_dtype dtype,
                      int peer,
                      int tag,
                      struct moe_comm_req *req)
{
    MOE_CHECK_MPI(
        MPI_Irecv(buf, icount(count), mpi_type(dtype), peer, tag, comm_of(h), plain_req(req)));
    req->is_active = true;
}

static void mpi_iallreduce(void *h,
                           const void *send,
                           void *recv,
                           size_t count,
                           enum moe_comm_dtype dtype,
                           enum moe_comm_redop op,
                           struct moe_comm_req *req)
{
    MOE_CHECK_MPI(MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, icount(count),
                                 mpi_type(dtype), mpi_op(op), comm_of(h), plain_req(req)));
    req->is_active = true;
}

static void mpi_iallgather(void *h,
                           const void *send,
                           void *recv,
                           size_t count,
                           enum moe_comm_dtype dtype,
                           struct moe_comm_req *req)
{
    bool in_place = gather_in_place(h, send, recv, count, dtype);
    MOE_CHECK_MPI(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, icount(count), mpi_type(dtype),
                                 recv, icount(count), mpi_type(dtype), comm_of(h), plain_req(req)));
    req->is_active = true;
}

/*
 * Non-blocking float-sum reduce-scatter: the pairwise exchange of rs_pairwise_f32 with every
 * round posted at once. Open MPI's libnbc runs MPI_Ireduce_scatter_block as a binomial reduce to
 * rank 0 and a linear scatter: rank 0 sums every contribution and sends each rank its block, and
 * on a CPU host that work runs inside rank 0's progress calls while the others wait (validate
 * dp-overlap, 2026-12-02: dp_comm 15-18 ms a step, 6-7 ms of it the other rank waiting, against
 * 7-8 ms for the blocking pairwise exchange of dp2). Here each rank sends every other rank that
 * rank's block and receives the others' contributions to its own block into a scratch buffer;
 * completion (wait, or the test that finds it done) sums them in rs_pairwise_f32's order (own,
 * rank-1, rank-2, ...: the same result, bit for bit) into the start of recv. The scratch,
 * (n-1) blocks, lives until completion: the one allocation of a non-blocking call here.
 */
enum { RS_ASYNC_TAG = 0x5253 }; /* apart from rs_pairwise_f32's round tags on the same group */

struct rs_async {
    float *out;       /* where the sum lands: the start of recv */
    const float *own; /* the rank's own block of the input */
    float *scratch;   /* block j - 1: the contribution of rank - j */
    size_t count;
    int n, nreq;
    MPI_Request reqs[]; /* receives then sends, 2 (n - 1) */
};

static void
rs_async_post(MPI_Comm c, const float *send, float *recv, size_t count, struct moe_comm_req *req)
{
    int rank = 0;
    int n = 1;
    MOE_CHECK_MPI(MPI_Comm_rank(c, &rank));
    MOE_CHECK_MPI(MPI_Comm_size(c, &n));
    size_t nreq = 2 * (size_t)(n - 1);
    struct rs_async *st = malloc(sizeof(*st) + nreq * sizeof(MPI_Request));
    float *scratch =
        malloc(((size_t)(n - 1) * count > 0 ? (size_t)(n - 1) * count : 1) * sizeof(float));
    if (st == NULL || scratch == NULL) {
        moe_eng_fatal(__FILE__, __LINE__,
                      "out of memory for a non-blocking reduce-scatter of %zu floats per rank",
                      count);
    }
    bool in_place = (const float *)recv == send;
    *st = (struct rs_async){
        recv, (in_place ? recv : send) + (size_t)rank * count, scratch, count, n, (int)nreq};
    for (int j = 1; j < n; j++) {
        int from = (rank - j + n) % n;
        MOE_CHECK_MPI(MPI_Irecv(scratch + (size_t)(j - 1) * count, icount(count), MPI_FLOAT, from,
                                RS_ASYNC_TAG, c, &st->reqs[j - 1]));
    }
    for (int j = 1; j < n; j++) {
        int to = (rank + j) % n;
        MOE_CHECK_MPI(MPI_Isend(send + (size_t)to * count, icount(count), MPI_FLOAT, to,
                                RS_ASYNC_TAG, c, &st->reqs[n - 1 + j - 1]));
    }
    *req_of(req) = MPI_REQUEST_NULL;
    *rs_of(req) = st;
}

/* Every exchange done: the sum, in rs_pairwise_f32's order, over the start of recv (every send
 * has completed, so in place the blocks there are free). */
static void rs_async_finish(struct moe_comm_req *req)
{
    struct rs_async *st = *rs_of(req);
    size_t count = st->count;
    if (st->out != st->own) {
        memmove(st->out, st->own, count * sizeof(float));
    }
    for (int j = 1; j < st->n; j++) {
        const float *t = st->scratch + (size_t)(j - 1) * count;
        float *d = st->out;
#pragma omp simd
        for (size_t e = 0; e < count; e++) {
            d[e] = d[e] + t[e];
        }
    }
    free(st->scratch);
    free(st);
    *rs_of(req) = NULL;
}

static void mpi_ireducescatter(void *h,
                               const void *send,
                               void *recv,
                               size_t count,
                               enum moe_comm_dtype dtype,
                               enum moe_comm_redop op,
                               struct moe_comm_req *req)
{
    if (dtype == MOE_COMM_F32 && op == MOE_COMM_SUM) {
        rs_async_post(comm_of(h), send, recv, count, req);
    } else {
        MOE_CHECK_MPI(MPI_Ireduce_scatter_block(send == recv ? MPI_IN_PLACE : send, recv,
                                                icount(count), mpi_type(dtype), mpi_op(op),
                                                comm_of(h), plain_req(req)));
    }
    req->is_active = true;
}

static void mpi_ialltoallv(void *h,
                           const void *send,
                           const int *send_counts,
                           const int *send_displs,
                           void *recv,
                           const int *recv_counts,
                           const int *recv_displs,
                           enum moe_comm_dtype dtype,
                           struct moe_comm_req *req)
{
    MOE_CHECK_MPI(MPI_Ialltoallv(send, send_counts, send_displs, mpi_type(dtype), recv, recv_counts,
                                 recv_displs, mpi_type(dtype), comm_of(h), plain_req(req)));
    req->is_active = true;
}

static void mpi_wait(struct moe_comm_req *req)
{
    struct rs_async *st = *rs_of(req);
    if (st != NULL) {
        MOE_CHECK_MPI(MPI_Waitall(st->nreq, st->reqs, MPI_STATUSES_IGNORE));
        rs_async_finish(req);
    } else {
        MOE_CHECK_MPI(MPI_Wait(req_of(req), MPI_STATUS_IGNORE));
    }
    req->is_active = false;
}

static bool mpi_test(struct moe_comm_req *req)
{
    int done = 0;
    struct rs_async *st = *rs_of(req);
    if (st != NULL) {
        MOE_CHECK_MPI(MPI_Testall(st->nreq, st->reqs, &done, MPI_STATUSES_IGNORE));
        if (done) {
            rs_async_finish(req);
        }
    } else {
        MOE_CHECK_MPI(MPI_Test(req_of(req), &done, MPI_STATUS_IGNORE));
    }
    if (done) {
        req->is_active = false;
    }
    return done != 0;
}

/* NOLINTEND(clang-analyzer-optin.mpi.MPI-Checker) */

static int mpi_tag_limit(void *h)
{
    void *value = NULL;
    int found = 0;
    MOE_CHECK_MPI(MPI_Comm_get_attr(comm_of(h), MPI_TAG_UB, &value, &found));
    /* MPI guarantees MPI_TAG_UB >= 32767. */
    return found && value != NULL ? *(int *)value : 32767;
}

static const struct moe_comm_backend mpi_backend = {
    .name = "mpi",
    .mem = MOE_COMM_MEM_HOST,
    .split = mpi_split,
    .split_shared = mpi_split_shared,
    .free_handle = mpi_free_handle,
    .rank_size = mpi_rank_size,
    .allreduce = mpi_allreduce,
    .allgather = mpi_allgather,
    .allgatherv = mpi_allgatherv,
    .reducescatter = mpi_reducescatter,
    .reducescatterv = mpi_reducescatterv,
    .alltoall = mpi_alltoall,
    .alltoallv = mpi_alltoallv,
    .bcast = mpi_bcast,
    .send = mpi_send,
    .recv = mpi_recv,
    .barrier = mpi_barrier,
    .isend = mpi_isend,
    .irecv = mpi_irecv,
    .iallreduce = mpi_iallreduce,
    .iallgather = mpi_iallgather,
    .ireducescatter = mpi_ireducescatter,
    .ialltoallv = mpi_ialltoallv,
    .wait = mpi_wait,
    .test = mpi_test,
    .tag_limit = mpi_tag_limit,
};

const struct moe_comm_backend *moe_comm_mpi_backend(void)
{
    return &mpi_backend;
}

enum moe_status moe_comm_mpi_create(MPI_Comm comm, const char *name, moe_comm_t **out)
{
    MPI_Comm dup = MPI_COMM_NULL;
    MOE_CHECK_MPI(MPI_Comm_dup(comm, &dup));
    void *h = wrap_comm(dup);
    enum moe_status st = moe_comm_wrap(&mpi_backend, h, false, name, out);
    if (st != MOE_OK) {
        mpi_free_handle(h);
    }
    return st;
}
