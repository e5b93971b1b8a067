/*
 * Per-process context of the engine (STYLE.md §5): rank and size, the root communicator, a logger
 * that knows its rank, a seeded random generator, the counted heap, the phase timer and the kernel
 * context. There are no globals: everything a function needs comes through this struct or its
 * arguments. Also the small helpers that go with it: a stateless hash for layout-independent
 * initialisation and the phase clock.
 *
 * Phase timing: exactly one slot is current at any time; moe_eng_phase_enter switches and adds the
 * elapsed wall time to the slot being left, so the slots of a step partition its wall time. The
 * slots are the cost model's phases (model/cost.h) plus MOE_ENG_UNATTRIBUTED, where a step starts
 * and which holds whatever no code claimed for a phase: every phase is entered explicitly (host
 * work too), so "the phases sum to the step" is a check that the unattributed remainder stays
 * small, not a definition. A traced step (timer.tl) also records every interval with the op it
 * belonged to. On the CUDA backend the clock is the compute stream's: each switch records a CUDA
 * event there (engine/device.h) and the intervals between consecutive events are added to the phase
 * they close when the event pool fills and at moe_eng_timer_flush, so the phases partition the GPU
 * time line of the step instead of the host's (the host runs ahead of the GPU).
 */
#ifndef MOE_ENGINE_CONTEXT_H
#define MOE_ENGINE_CONTEXT_H

#include "engine/arena.h"
#include "engine/comm.h"
#include "engine/device.h"
#include "kernels/kernels.h"
#include "model/cost.h"
#include "topologies/trace_file.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* xoshiro256** (Blackman & Vigna 2018), seeded through splitmix64. */
struct moe_eng_rng {
    uint64_t s[4];
};
void moe_eng_rng_seed(struct moe_eng_rng *rng, uint64_t seed);
uint64_t moe_eng_rng_next(struct moe_eng_rng *rng);
/* Uniform in [0, 1) with 53 random bits. */
double moe_eng_rng_uniform(struct moe_eng_rng *rng);

/* splitmix64 finaliser of (a, b, c): a stateless hash for counter-based draws.
 */
uint64_t moe_eng_hash3(uint64_t a, uint64_t b, uint64_t c);
/* Standard normal draw determined only by (seed, stream, index) (Box-Muller on two hashes). */
double moe_eng_normal_at(uint64_t seed, uint64_t stream, uint64_t index);

/* Logger: rank 0 prints unless is_all_ranks; verbosity 0 = progress only, 1 = details. */
struct moe_eng_log {
    FILE *stream;
    int rank;
    int verbosity;
    bool is_all_ranks;
};
void moe_eng_log_info(const struct moe_eng_log *log, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void moe_eng_log_debug(const struct moe_eng_log *log, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Printed by whichever rank calls it, prefixed with the rank (errors). */
void moe_eng_log_rank(const struct moe_eng_log *log, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Monotonic wall clock, seconds. */
double moe_eng_now(void);

/* The phase clock's slots: the model's phases, then the time no phase claimed. */
#define MOE_ENG_UNATTRIBUTED ((enum moe_phase)MOE_NUM_PHASES)
#define MOE_ENG_NUM_SLOTS    (MOE_NUM_PHASES + 1)

/* The op an interval belongs to: micro-batch, virtual stage, backward (the trace files' packing,
 * topologies/trace_file.h), or MOE_ENG_NO_OP for per-step work. */
#define MOE_ENG_NO_OP MOE_TRACE_NO_OP
static inline int moe_eng_op_tag(int mb, int vstage, bool is_bwd)
{
    return moe_trace_op_tag(mb, vstage, is_bwd);
}

/* One interval of a traced step: a slot between two switches and the op it belonged to. */
struct moe_eng_tl_rec {
    double t0, t1; /* seconds on this rank's clock (CLOCK_MONOTONIC; CUDA: from the step start) */
    int slot;      /* enum moe_phase or MOE_ENG_UNATTRIBUTED */
    int tag;       /* moe_eng_op_tag or MOE_ENG_NO_OP */
};

/* A traced step's intervals (caller-owned memory). */
struct moe_eng_tl {
    struct moe_eng_tl_rec *rec; /* [cap] */
    int cap, len;
    bool is_on;
    bool has_overflowed;
};

struct moe_eng_timer {
    double phase_s[MOE_ENG_NUM_SLOTS]; /* seconds per slot since the last reset */
    enum moe_phase current;            /* slot being timed now */
    double t_last;                     /* when `current` was entered (host clock) */
    int current_slot;                  /* (int)current, for the arrival log of collectives */
    int tag;                           /* the op being run (moe_eng_op_tag / MOE_ENG_NO_OP) */
    struct moe_eng_tl *tl;             /* the traced step's intervals, or NULL */
    moe_eng_dev_t *dev;                /* CUDA: time on the compute stream's events; NULL: host */
};
/* Zero the slots and start timing `start` now. */
void moe_eng_timer_reset(struct moe_eng_timer *t, enum moe_phase start);
/* Switch to slot p; returns the slot left (to switch back to). */
enum moe_phase moe_eng_phase_enter(struct moe_eng_timer *t, enum moe_phase p);
/* The op that runs from now on (closes the current interval when the op changes). */
void moe_eng_timer_set_tag(struct moe_eng_timer *t, int tag);
/* Add the time since the last switch to the current slot (before reading phase_s). */
void moe_eng_timer_flush(struct moe_eng_timer *t);

struct moe_eng_ctx {
    int rank;          /* in the engine's root group */
    int size;          /* ranks in the root group */
    char host[64];     /* gethostname */
    moe_comm_t *world; /* root group (borrowed) */
    struct moe_eng_log log;
    struct moe_eng_rng rng;   /* data order; saved in checkpoints */
    struct moe_eng_heap heap; /* counted host allocations */
    struct moe_eng_timer timer;
    moe_k_ctx_t *kctx;         /* kernel context (owned) */
    const struct moe_k_ops *k; /* its ops table */
    moe_eng_dev_t *dev;        /* CUDA: device runtime (owned); NULL on the CPU backend */
    int node_ranks;            /* CUDA: ranks of the root group on this host; 0 otherwise */
};

/*
 * Fill ctx for the root group world (borrowed, MPI; collective over it): the CPU kernel context (1
 * thread), or with backend CUDA the device runtime on GPU (node-local rank mod GPUs on the node)
 * and the CUDA kernel context on its stream with GEMM math gemm_math (enum moe_eng_gemm_math); with
 * backend CPU and is_device_emulated, an emulated device (engine/device.h) and the CPU kernels.
 * MOE_ERR_UNSUPPORTED (no CUDA build or device: diag says why), MOE_ERR_NOMEM.
 */
MOE_NODISCARD enum moe_status moe_eng_ctx_init(struct moe_eng_ctx *ctx,
                                               moe_comm_t *world,
                                               uint64_t seed,
                                               FILE *log_stream,
                                               int verbosity,
                                               enum moe_k_backend backend,
                                               int gemm_math,
                                               bool is_device_emulated,
                                               struct moe_diag *diag);
void moe_eng_ctx_fini(struct moe_eng_ctx *ctx);

#ifdef __cplusplus
}
#endif

#endif /* MOE_ENGINE_CONTEXT_H */
