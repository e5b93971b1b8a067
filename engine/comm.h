/*
 * The engine's one communicator interface (STYLE.md §1, §7): a group handle plus a backend table of
 * function pointers. The MPI backend (engine/comm_mpi.c, always built) works on host buffers; an
 * NCCL backend on device buffers fills the same table (struct moe_comm_backend) and is picked at
 * start-up, so no call site has an #ifdef. Every group remembers its backend, its size and rank, a
 * short name ("tp", "ep", ...) and the bytes it sent per collective, which run.json reports.
 *
 * Semantics (both backends):
 * - Counts are elements of `dtype`, never bytes. "v" variants take int counts and displacements per
 * group rank, as MPI does.
 * - In place: allreduce with send == recv; allgather with send == recv + rank * count;
 * reducescatter with send == recv (the result lands at the start of recv, as MPI_IN_PLACE).
 * Otherwise buffers must not overlap.
 * - Collectives are called by every member of the group in the same order. Point-to-point peers are
 * group ranks; tags are the caller's (0 <= tag <
 * moe_comm_tag_limit()).
 * - Non-blocking calls fill a caller-owned struct moe_comm_req (no allocation); the buffers must
 * stay untouched until moe_comm_wait returns. moe_comm_test advances progress (MPI progresses
 * non-blocking collectives only inside MPI calls, so compute loops call it between kernels).
 *
 * Bytes sent per rank (the convention of the cost model, nccl-tests' algorithm factors): allreduce
 * 2(n-1)/n x S; allgather (n-1)/n x the output; reducescatter (n-1)/n x the input; all-to-all the
 * bytes addressed to other ranks (exact); send the message; bcast S on the root.
 *
 * Arrival log (optional, moe_comm_set_log): every collective of a group -- not point-to-point --
 * can be recorded as when this rank entered it (posted it, for a non-blocking one), when it began
 * to block on it (entered the wait) and when it returned, with the caller's phase. Collectives are
 * called in the same order on every member, so the k-th record of a group on one member and the
 * k-th on another are the same call: the engine compares them after the step (the latest arrival
 * is when the collective could start; what a rank spent blocked before that was waiting for the
 * slowest member), without a barrier inside the step.
 *
 * What this is not: no topology knowledge (groups come from engine/groups.c), no phase timing
 * (callers attribute time to phases), no allocation inside a collective.
 */
#ifndef MOE_ENGINE_COMM_H
#define MOE_ENGINE_COMM_H

#include "model/status.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum moe_comm_dtype {
    MOE_COMM_F32 = 0, /* float: activations, gradients, weights */
    MOE_COMM_I32 = 1, /* int: token counts, routing metadata */
    MOE_COMM_F64 = 2, /* double: loss sums */
    MOE_COMM_NUM_DTYPES = 3,
};

enum moe_comm_redop {
    MOE_COMM_SUM = 0,
    MOE_COMM_MAX = 1,
};

/* Where the buffers a backend works on live. */
enum moe_comm_mem {
    MOE_COMM_MEM_HOST = 0,
    MOE_COMM_MEM_DEVICE = 1,
};

/* Collective families for byte accounting (v variants count with their family).
 */
enum moe_comm_coll {
    MOE_COLL_ALLREDUCE = 0,
    MOE_COLL_ALLGATHER = 1,
    MOE_COLL_REDUCESCATTER = 2,
    MOE_COLL_ALLTOALL = 3,
    MOE_COLL_SENDRECV = 4,
    MOE_COLL_BCAST = 5,
    MOE_NUM_COLLS = 6,
};

#ifdef __cplusplus
#define MOE_COMM_ALIGNAS(n) alignas(n)
#else
#define MOE_COMM_ALIGNAS(n) _Alignas(n)
#endif

/* A pending non-blocking operation; caller-owned, zero-initialise. */
struct moe_comm_req {
    MOE_COMM_ALIGNAS(8) unsigned char impl[32]; /* backend request (MPI_Request, cudaEvent_t) */
    bool is_active;                             /* set by the i* call, cleared by wait/test */
    int log_idx;                                /* its arrival-log record + 1; 0 = none */
    long log_serial;                            /* that record's serial (records move) */
};

/* One collective call as this rank saw it (seconds, CLOCK_MONOTONIC, less the log's offset). */
struct moe_comm_call {
    double t_post;  /* entered the call (non-blocking: posted it) */
    double t_block; /* began to block on it: = t_post when blocking, the wait's entry otherwise */
    double t_end;   /* returned complete; 0 while a non-blocking call is pending */
    double t_last;  /* the latest t_post over the group's members; 0 until matched */
    long serial;    /* position in the log since it was created */
    short group;    /* the index moe_comm_set_log gave the group */
    short slot;     /* the caller's phase when it blocked (or when posted, until then) */
};

/* The arrival log, shared by the groups that record into it; caller-owned memory. */
struct moe_comm_log {
    struct moe_comm_call *calls; /* [cap] */
    int cap;
    int len;
    long next_serial;
    bool is_on;          /* record (false: calls pass through unrecorded) */
    bool is_bookkeeping; /* the engine's own calls (the matching): neither logged nor counted in
                          * the groups' bytes */
    bool has_overflowed; /* a call found the log full (its record is lost) */
    const int *slot_src; /* the caller's current phase, read at each record */
    double clock_offset; /* subtracted from every time: this rank's clock minus the reference */
};

/* Backend table. `h` is the backend's group handle (MPI_Comm, ncclComm_t, ...).
 */
struct moe_comm_backend {
    const char *name;      /* "mpi", "nccl" */
    enum moe_comm_mem mem; /* buffer space the backend reads and writes */

    /* Group management (outside training steps). split: members with the same color >= 0 form a
     * group ordered by key; color < 0 gives *out = NULL. split_shared: ranks sharing memory. */
    void (*split)(void *h, int color, int key, void **out);
    void (*split_shared)(void *h, void **out);
    void (*free_handle)(void *h);
    void (*rank_size)(void *h, int *rank, int *size);

    void (*allreduce)(void *h,
                      const void *send,
                      void *recv,
                      size_t count,
                      enum moe_comm_dtype dtype,
                      enum moe_comm_redop op);
    void (*allgather)(
        void *h, const void *send, void *recv, size_t count, enum moe_comm_dtype dtype);
    void (*allgatherv)(void *h,
                       const void *send,
                       int send_count,
                       void *recv,
                       const int *counts,
                       const int *displs,
                       enum moe_comm_dtype dtype);
    void (*reducescatter)(void *h,
                          const void *send,
                          void *recv,
                          size_t count,
                          enum moe_comm_dtype dtype,
                          enum moe_comm_redop op);
    void (*reducescatterv)(void *h,
                           const void *send,
                           void *recv,
                           const int *counts,
                           enum moe_comm_dtype dtype,
                           enum moe_comm_redop op);
    void (*alltoall)(
        void *h, const void *send, void *recv, size_t count, enum moe_comm_dtype dtype);
    void (*alltoallv)(void *h,
                      const void *send,
                      const int *send_counts,
                      const int *send_displs,
                      void *recv,
                      const int *recv_counts,
                      const int *recv_displs,
                      enum moe_comm_dtype dtype);
    void (*bcast)(void *h, void *buf, size_t count, enum moe_comm_dtype dtype, int root);
    void (*send)(
        void *h, const void *buf, size_t count, enum moe_comm_dtype dtype, int peer, int tag);
    void (*recv)(void *h, void *buf, size_t count, enum moe_comm_dtype dtype, int peer, int tag);
    void (*barrier)(void *h);

    void (*isend)(void *h,
                  const void *buf,
                  size_t count,
                  enum moe_comm_dtype dtype,
                  int peer,
                  int tag,
                  struct moe_comm_req *req);
    void (*irecv)(void *h,
                  void *buf,
                  size_t count,
                  enum moe_comm_dtype dtype,
                  int peer,
                  int tag,
                  struct moe_comm_req *req);
    void (*iallreduce)(void *h,
                       const void *send,
                       void *recv,
                       size_t count,
                       enum moe_comm_dtype dtype,
                       enum moe_comm_redop op,
                       struct moe_comm_req *req);
    void (*iallgather)(void *h,
                       const void *send,
                       void *recv,
                       size_t count,
                       enum moe_comm_dtype dtype,
                       struct moe_comm_req *req);
    void (*ireducescatter)(void *h,
                           const void *send,
                           void *recv,
                           size_t count,
                           enum moe_comm_dtype dtype,
                           enum moe_comm_redop op,
                           struct moe_comm_req *req);
    void (*ialltoallv)(void *h,
                       const void *send,
                       const int *send_counts,
                       const int *send_displs,
                       void *recv,
                       const int *recv_counts,
                       const int *recv_displs,
                       enum moe_comm_dtype dtype,
                       struct moe_comm_req *req);
    void (*wait)(struct moe_comm_req *req);
    bool (*test)(struct moe_comm_req *req); /* true when complete */
    int (*tag_limit)(void *h);              /* largest usable tag + 1 */
};

/* Opaque group: backend, handle, rank/size, name, byte counters. */
typedef struct moe_comm moe_comm_t;

/*
 * Wrap a backend handle into a group (takes ownership of handle, freed by moe_comm_destroy with the
 * backend's free_handle unless is_borrowed). MOE_ERR_NOMEM on allocation failure.
 */
MOE_NODISCARD enum moe_status moe_comm_wrap(const struct moe_comm_backend *backend,
                                            void *handle,
                                            bool is_borrowed,
                                            const char *name,
                                            moe_comm_t **out);
/* Release a group (and its handle unless borrowed). NULL does nothing. */
void moe_comm_destroy(moe_comm_t *g);

/*
 * Collective split of parent: members passing the same color >= 0 form a new group named name,
 * ranked by key; a member passing color < 0 gets *out = NULL. Every parent member must call.
 */
MOE_NODISCARD enum moe_status
moe_comm_split(moe_comm_t *parent, int color, int key, const char *name, moe_comm_t **out);
/* Collective: the ranks of parent that share memory with this one (a "node").
 */
MOE_NODISCARD enum moe_status
moe_comm_split_shared(moe_comm_t *parent, const char *name, moe_comm_t **out);

int moe_comm_rank(const moe_comm_t *g);
int moe_comm_size(const moe_comm_t *g);
const char *moe_comm_name(const moe_comm_t *g);
const struct moe_comm_backend *moe_comm_get_backend(const moe_comm_t *g);
/* The backend's handle of g (a pointer to its MPI_Comm for the MPI backend), for backends that
 * bootstrap from another group (NCCL over MPI). Borrowed. */
void *moe_comm_handle(const moe_comm_t *g);
int moe_comm_tag_limit(const moe_comm_t *g);
size_t moe_comm_dtype_bytes(enum moe_comm_dtype dtype);

/* Record g's collectives into log (NULL: stop) as group index group_idx. Not for groups of the
 * device backend, whose calls return before the transfer happens. */
void moe_comm_set_log(moe_comm_t *g, struct moe_comm_log *log, int group_idx);

/* Bytes this rank sent per collective family since creation or the last reset.
 */
double moe_comm_bytes_sent(const moe_comm_t *g, enum moe_comm_coll coll);
void moe_comm_reset_stats(moe_comm_t *g);
/* Lower-case name of a family: "allreduce", "allgather", ... */
const char *moe_comm_coll_name(enum moe_comm_coll coll);

/* Blocking collectives and point-to-point (semantics in the header comment). */
void moe_comm_allreduce(moe_comm_t *g,
                        const void *send,
                        void *recv,
                        size_t count,
                        enum moe_comm_dtype dtype,
                        enum moe_comm_redop op);
void moe_comm_allgather(
    moe_comm_t *g, const void *send, void *recv, size_t count, enum moe_comm_dtype dtype);
void moe_comm_allgatherv(moe_comm_t *g,
                         const void *send,
                         int send_count,
                         void *recv,
                         const int *counts,
                         const int *displs,
                         enum moe_comm_dtype dtype);
void moe_comm_reducescatter(moe_comm_t *g,
                            const void *send,
                            void *recv,
                            size_t count,
                            enum moe_comm_dtype dtype,
                            enum moe_comm_redop op);
/* recv gets counts[rank] elements; send holds sum(counts) elements in rank order. */
void moe_comm_reducescatterv(moe_comm_t *g,
                             const void *send,
                             void *recv,
                             const int *counts,
                             enum moe_comm_dtype dtype,
                             enum moe_comm_redop op);
void moe_comm_alltoall(
    moe_comm_t *g, const void *send, void *recv, size_t count, enum moe_comm_dtype dtype);
void moe_comm_alltoallv(moe_comm_t *g,
                        const void *send,
                        const int *send_counts,
                        const int *send_displs,
                        void *recv,
                        const int *recv_counts,
                        const int *recv_displs,
                        enum moe_comm_dtype dtype);
void moe_comm_bcast(moe_comm_t *g, void *buf, size_t count, enum moe_comm_dtype dtype, int root);
void moe_comm_send(
    moe_comm_t *g, const void *buf, size_t count, enum moe_comm_dtype dtype, int peer, int tag);
void moe_comm_recv(
    moe_comm_t *g, void *buf, size_t count, enum moe_comm_dtype dtype, int peer, int tag);
void moe_comm_barrier(moe_comm_t *g);

/* Non-blocking variants; complete with moe_comm_wait (or moe_comm_test returning true). */
void moe_comm_isend(moe_comm_t *g,
                    const void *buf,
                    size_t count,
                    enum moe_comm_dtype dtype,
                    int peer,
                    int tag,
                    struct moe_comm_req *req);
void moe_comm_irecv(moe_comm_t *g,
                    void *buf,
                    size_t count,
                    enum moe_comm_dtype dtype,
                    int peer,
                    int tag,
                    struct moe_comm_req *req);
void moe_comm_iallreduce(moe_comm_t *g,
                         const void *send,
                         void *recv,
                         size_t count,
                         enum moe_comm_dtype dtype,
                         enum moe_comm_redop op,
                         struct moe_comm_req *req);
void moe_comm_iallgather(moe_comm_t *g,
                         const void *send,
                         void *recv,
                         size_t count,
                         enum moe_comm_dtype dtype,
                         struct moe_comm_req *req);
void moe_comm_ireducescatter(moe_comm_t *g,
                             const void *send,
                             void *recv,
                             size_t count,
                             enum moe_comm_dtype dtype,
                             enum moe_comm_redop op,
                             struct moe_comm_req *req);
void moe_comm_ialltoallv(moe_comm_t *g,
                         const void *send,
                         const int *send_counts,
                         const int *send_displs,
                         void *recv,
                         const int *recv_counts,
                         const int *recv_displs,
                         enum moe_comm_dtype dtype,
                         struct moe_comm_req *req);
/* Wait for req (no-op when not active). Requests are waited by the group's backend. */
void moe_comm_wait(const moe_comm_t *g, struct moe_comm_req *req);
/* Advance progress; true when req is complete (or was not active). */
bool moe_comm_test(const moe_comm_t *g, struct moe_comm_req *req);

#ifdef __cplusplus
}
#endif

#endif /* MOE_ENGINE_COMM_H */
