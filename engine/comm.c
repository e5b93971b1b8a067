/*
 * Communicator front end (engine/comm.h): group bookkeeping and byte accounting around the backend
 * table. Each wrapper counts the bytes this rank sends with the cost model's algorithm factors,
 * then calls the backend; nothing here knows MPI or NCCL.
 */
#include "engine/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct moe_comm {
    const struct moe_comm_backend *be;
    void *h;
    bool is_borrowed;
    int rank;
    int size;
    char name[24];
    double bytes[MOE_NUM_COLLS];
    struct moe_comm_log *log; /* arrival log, or NULL */
    int log_group;
};

/* Bytes of a call, unless it is the engine's own bookkeeping (the arrival log's matching). */
static void count_bytes(moe_comm_t *g, enum moe_comm_coll coll, double bytes)
{
    if (g->log == NULL || !g->log->is_bookkeeping) {
        g->bytes[coll] += bytes;
    }
}

static double log_now(const struct moe_comm_log *log)
{
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec - log->clock_offset;
}

/* A new record for a call of g entering now; its index + 1, or 0 when not recording. */
static int log_enter(const moe_comm_t *g)
{
    struct moe_comm_log *log = g->log;
    if (log == NULL || !log->is_on || g->size < 2) {
        return 0;
    }
    if (log->len == log->cap) {
        log->has_overflowed = true;
        return 0;
    }
    double t = log_now(log);
    int i = log->len++;
    log->calls[i] = (struct moe_comm_call){t,
                                           t,
                                           0.0,
                                           0.0,
                                           log->next_serial++,
                                           (short)g->log_group,
                                           (short)(log->slot_src != NULL ? *log->slot_src : 0)};
    return i + 1;
}

static void log_leave(const moe_comm_t *g, int idx1)
{
    if (idx1 > 0) {
        g->log->calls[idx1 - 1].t_end = log_now(g->log);
    }
}

/* The record of a pending request (records may have moved to the front of the log). */
static struct moe_comm_call *log_find(const moe_comm_t *g, const struct moe_comm_req *req)
{
    struct moe_comm_log *log = g->log;
    if (req->log_idx == 0 || log == NULL) {
        return NULL;
    }
    int i = req->log_idx - 1;
    if (i < log->len && log->calls[i].serial == req->log_serial) {
        return &log->calls[i];
    }
    for (int k = 0; k < log->len; k++) {
        if (log->calls[k].serial == req->log_serial) {
            return &log->calls[k];
        }
        if (log->calls[k].t_end != 0.0) {
            break; /* pending records sit at the front, before this step's */
        }
    }
    return NULL;
}

static void log_post(const moe_comm_t *g, struct moe_comm_req *req)
{
    int idx1 = log_enter(g);
    req->log_idx = idx1;
    req->log_serial = idx1 > 0 ? g->log->calls[idx1 - 1].serial : 0;
}

void moe_comm_set_log(moe_comm_t *g, struct moe_comm_log *log, int group_idx)
{
    g->log = log;
    g->log_group = group_idx;
}

size_t moe_comm_dtype_bytes(enum moe_comm_dtype dtype)
{
    switch (dtype) {
    case MOE_COMM_F32:
    case MOE_COMM_I32:
        return 4;
    case MOE_COMM_F64:
        return 8;
    case MOE_COMM_NUM_DTYPES:
        break;
    }
    return 4;
}

const char *moe_comm_coll_name(enum moe_comm_coll coll)
{
    /* char arrays, not pointers: the table stays in read-only data. */
    static const char names[MOE_NUM_COLLS][16] = {
        "allreduce", "allgather", "reducescatter", "alltoall", "sendrecv", "bcast",
    };
    return (int)coll >= 0 && coll < MOE_NUM_COLLS ? names[coll] : "?";
}

enum moe_status moe_comm_wrap(const struct moe_comm_backend *backend,
                              void *handle,
                              bool is_borrowed,
                              const char *name,
                              moe_comm_t **out)
{
    *out = NULL;
    moe_comm_t *g = calloc(1, sizeof(*g));
    if (g == NULL) {
        return MOE_ERR_NOMEM;
    }
    g->be = backend;
    g->h = handle;
    g->is_borrowed = is_borrowed;
    backend->rank_size(handle, &g->rank, &g->size);
    (void)snprintf(g->name, sizeof(g->name), "%s", name != NULL ? name : "");
    *out = g;
    return MOE_OK;
}

void moe_comm_destroy(moe_comm_t *g)
{
    if (g == NULL) {
        return;
    }
    if (!g->is_borrowed) {
        g->be->free_handle(g->h);
    }
    free(g);
}

enum moe_status
moe_comm_split(moe_comm_t *parent, int color, int key, const char *name, moe_comm_t **out)
{
    *out = NULL;
    void *h = NULL;
    parent->be->split(parent->h, color, key, &h);
    if (h == NULL) {
        return MOE_OK;
    }
    enum moe_status st = moe_comm_wrap(parent->be, h, false, name, out);
    if (st != MOE_OK) {
        parent->be->free_handle(h);
    }
    return st;
}

enum moe_status moe_comm_split_shared(moe_comm_t *parent, const char *name, moe_comm_t **out)
{
    *out = NULL;
    void *h = NULL;
    parent->be->split_shared(parent->h, &h);
    enum moe_status st = moe_comm_wrap(parent->be, h, false, name, out);
    if (st != MOE_OK) {
        parent->be->free_handle(h);
    }
    return st;
}

int moe_comm_rank(const moe_comm_t *g)
{
    return g->rank;
}

int moe_comm_size(const moe_comm_t *g)
{
    return g->size;
}

const char *moe_comm_name(const moe_comm_t *g)
{
    return g->name;
}

const struct moe_comm_backend *moe_comm_get_backend(const moe_comm_t *g)
{
    return g->be;
}

void *moe_comm_handle(const moe_comm_t *g)
{
    return g->h;
}

int moe_comm_tag_limit(const moe_comm_t *g)
{
    return g->be->tag_limit(g->h);
}

double moe_comm_bytes_sent(const moe_comm_t *g, enum moe_comm_coll coll)
{
    return g->bytes[coll];
}

void moe_comm_reset_stats(moe_comm_t *g)
{
    memset(g->bytes, 0, sizeof(g->bytes));
}

/* (n-1)/n of s bytes, the share a ring-style collective moves off each rank. */
static double ring_share(const moe_comm_t *g, double s)
{
    return g->size > 1 ? s * (double)(g->size - 1) / (double)g->size : 0.0;
}

static double v_bytes_to_others(const moe_comm_t *g, const int *counts, enum moe_comm_dtype dtype)
{
    double total = 0.0;
    for (int r = 0; r < g->size; r++) {
        if (r != g->rank) {
            total += (double)counts[r];
        }
    }
    return total * (double)moe_comm_dtype_bytes(dtype);
}

void moe_comm_allreduce(moe_comm_t *g,
                        const void *send,
                        void *recv,
                        size_t count,
                        enum moe_comm_dtype dtype,
                        enum moe_comm_redop op)
{
    count_bytes(g, MOE_COLL_ALLREDUCE,
                2.0 * ring_share(g, (double)count * (double)moe_comm_dtype_bytes(dtype)));
    int rec = log_enter(g);
    g->be->allreduce(g->h, send, recv, count, dtype, op);
    log_leave(g, rec);
}

void moe_comm_allgather(
    moe_comm_t *g, const void *send, void *recv, size_t count, enum moe_comm_dtype dtype)
{
    count_bytes(
        g, MOE_COLL_ALLGATHER,
        ring_share(g, (double)count * (double)g->size * (double)moe_comm_dtype_bytes(dtype)));
    int rec = log_enter(g);
    g->be->allgather(g->h, send, recv, count, dtype);
    log_leave(g, rec);
}

void moe_comm_allgatherv(moe_comm_t *g,
                         const void *send,
                         int send_count,
                         void *recv,
                         const int *counts,
                         const int *displs,
                         enum moe_comm_dtype dtype)
{
    /* Each rank's block reaches the n-1 others; per rank that is its own block times n-1, which the
     * ring form spreads as (n-1)/n of the output. Report the ring figure. */
    double out = 0.0;
    for (int r = 0; r < g->size; r++) {
        out += (double)counts[r];
    }
    count_bytes(g, MOE_COLL_ALLGATHER, ring_share(g, out * (double)moe_comm_dtype_bytes(dtype)));
    int rec = log_enter(g);
    g->be->allgatherv(g->h, send, send_count, recv, counts, displs, dtype);
    log_leave(g, rec);
}

void moe_comm_reducescatter(moe_comm_t *g,
                            const void *send,
                            void *recv,
                            size_t count,
                            enum moe_comm_dtype dtype,
                            enum moe_comm_redop op)
{
    count_bytes(
        g, MOE_COLL_REDUCESCATTER,
        ring_share(g, (double)count * (double)g->size * (double)moe_comm_dtype_bytes(dtype)));
    int rec = log_enter(g);
    g->be->reducescatter(g->h, send, recv, count, dtype, op);
    log_leave(g, rec);
}

void moe_comm_reducescatterv(moe_comm_t *g,
                             const void *send,
                             void *recv,
                             const int *counts,
                             enum moe_comm_dtype dtype,
                             enum moe_comm_redop op)
{
    double in = 0.0;
    for (int r = 0; r < g->size; r++) {
        in += (double)counts[r];
    }
    count_bytes(g, MOE_COLL_REDUCESCATTER, ring_share(g, in * (double)moe_comm_dtype_bytes(dtype)));
    int rec = log_enter(g);
    g->be->reducescatterv(g->h, send, recv, counts, dtype, op);
    log_leave(g, rec);
}

void moe_comm_alltoall(
    moe_comm_t *g, const void *send, void *recv, size_t count, enum moe_comm_dtype dtype)
{
    count_bytes(g, MOE_COLL_ALLTOALL,
                (double)count * (double)(g->size - 1) * (double)moe_comm_dtype_bytes(dtype));
    int rec = log_enter(g);
    g->be->alltoall(g->h, send, recv, count, dtype);
    log_leave(g, rec);
}

void moe_comm_alltoallv(moe_comm_t *g,
                        const void *send,
                        const int *send_counts,
                        const int *send_displs,
                        void *recv,
                        const int *recv_counts,
                        const int *recv_displs,
                        enum moe_comm_dtype dtype)
{
    count_bytes(g, MOE_COLL_ALLTOALL, v_bytes_to_others(g, send_counts, dtype));
    int rec = log_enter(g);
    g->be->alltoallv(g->h, send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype);
    log_leave(g, rec);
}

void moe_comm_bcast(moe_comm_t *g, void *buf, size_t count, enum moe_comm_dtype dtype, int root)
{
    if (g->rank == root) {
        count_bytes(g, MOE_COLL_BCAST, (double)count * (double)moe_comm_dtype_bytes(dtype));
    }
    int rec = log_enter(g);
    g->be->bcast(g->h, buf, count, dtype, root);
    log_leave(g, rec);
}

void moe_comm_send(
    moe_comm_t *g, const void *buf, size_t count, enum moe_comm_dtype dtype, int peer, int tag)
{
    count_bytes(g, MOE_COLL_SENDRECV, (double)count * (double)moe_comm_dtype_bytes(dtype));
    g->be->send(g->h, buf, count, dtype, peer, tag);
}

void moe_comm_recv(
    moe_comm_t *g, void *buf, size_t count, enum moe_comm_dtype dtype, int peer, int tag)
{
    g->be->recv(g->h, buf, count, dtype, peer, tag);
}

void moe_comm_barrier(moe_comm_t *g)
{
    int rec = log_enter(g);
    g->be->barrier(g->h);
    log_leave(g, rec);
}

void moe_comm_isend(moe_comm_t *g,
                    const void *buf,
                    size_t count,
                    enum moe_comm_dtype dtype,
                    int peer,
                    int tag,
                    struct moe_comm_req *req)
{
    count_bytes(g, MOE_COLL_SENDRECV, (double)count * (double)moe_comm_dtype_bytes(dtype));
    g->be->isend(g->h, buf, count, dtype, peer, tag, req);
    req->log_idx = 0;
}

void moe_comm_irecv(moe_comm_t *g,
                    void *buf,
                    size_t count,
                    enum moe_comm_dtype dtype,
                    int peer,
                    int tag,
                    struct moe_comm_req *req)
{
    g->be->irecv(g->h, buf, count, dtype, peer, tag, req);
    req->log_idx = 0;
}

void moe_comm_iallreduce(moe_comm_t *g,
                         const void *send,
                         void *recv,
                         size_t count,
                         enum moe_comm_dtype dtype,
                         enum moe_comm_redop op,
                         struct moe_comm_req *req)
{
    count_bytes(g, MOE_COLL_ALLREDUCE,
                2.0 * ring_share(g, (double)count * (double)moe_comm_dtype_bytes(dtype)));
    g->be->iallreduce(g->h, send, recv, count, dtype, op, req);
    log_post(g, req);
}

void moe_comm_iallgather(moe_comm_t *g,
                         const void *send,
                         void *recv,
                         size_t count,
                         enum moe_comm_dtype dtype,
                         struct moe_comm_req *req)
{
    count_bytes(
        g, MOE_COLL_ALLGATHER,
        ring_share(g, (double)count * (double)g->size * (double)moe_comm_dtype_bytes(dtype)));
    g->be->iallgather(g->h, send, recv, count, dtype, req);
    log_post(g, req);
}

void moe_comm_ireducescatter(moe_comm_t *g,
                             const void *send,
                             void *recv,
                             size_t count,
                             enum moe_comm_dtype dtype,
                             enum moe_comm_redop op,
                             struct moe_comm_req *req)
{
    count_bytes(
        g, MOE_COLL_REDUCESCATTER,
        ring_share(g, (double)count * (double)g->size * (double)moe_comm_dtype_bytes(dtype)));
    g->be->ireducescatter(g->h, send, recv, count, dtype, op, req);
    log_post(g, req);
}

void moe_comm_ialltoallv(moe_comm_t *g,
                         const void *send,
                         const int *send_counts,
                         const int *send_displs,
                         void *recv,
                         const int *recv_counts,
                         const int *recv_displs,
                         enum moe_comm_dtype dtype,
                         struct moe_comm_req *req)
{
    count_bytes(g, MOE_COLL_ALLTOALL, v_bytes_to_others(g, send_counts, dtype));
    g->be->ialltoallv(g->h, send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype,
                      req);
    log_post(g, req);
}

/* A pending record completes: it blocked from t_block (its phase then) to now. */
static void log_complete(const moe_comm_t *g, struct moe_comm_req *req, double t_block)
{
    struct moe_comm_call *c = log_find(g, req);
    if (c != NULL) {
        c->t_block = t_block;
        c->t_end = log_now(g->log);
        c->slot = (short)(g->log->slot_src != NULL ? *g->log->slot_src : c->slot);
    }
    req->log_idx = 0;
}

void moe_comm_wait(const moe_comm_t *g, struct moe_comm_req *req)
{
    if (req->is_active) {
        double t = req->log_idx > 0 && g->log != NULL ? log_now(g->log) : 0.0;
        g->be->wait(req);
        if (req->log_idx > 0) {
            log_complete(g, req, t);
        }
    }
}

bool moe_comm_test(const moe_comm_t *g, struct moe_comm_req *req)
{
    if (!req->is_active) {
        return true;
    }
    bool done = g->be->test(req);
    if (done && req->log_idx > 0) {
        log_complete(g, req, log_now(g->log)); /* found complete: it never blocked */
    }
    return done;
}
