/*
 * Per-op wall time of a kernel table (kernels/profile.c): a profiling ops table whose every member
 * calls the same member of the backend's table between two readings of CLOCK_MONOTONIC and adds
 * the elapsed time and one call to a bucket chosen by the caller (the engine's current phase), so
 * a user sees which ops make up a phase -- the measured side of the model's per-op prices
 * (model/compute.c). What this is not: a device profiler. On a backend whose ops return before
 * the work runs (CUDA streams) the times are launch times only; the engine profiles host-
 * synchronous backends only. The two clock readings per op cost about 50 ns each; an op of a tiny
 * model takes microseconds, so profiling moves a step by well under 1% (README "Inside a phase").
 */
#ifndef MOE_KERNELS_PROFILE_H
#define MOE_KERNELS_PROFILE_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One entry per member of struct moe_k_ops (the hooks excepted), in the table's order. */
enum moe_k_op {
    MOE_K_OP_FILL,
    MOE_K_OP_COPY_2D,
    MOE_K_OP_AXPY,
    MOE_K_OP_SCALE,
    MOE_K_OP_SUM,
    MOE_K_OP_SUM_SQUARES,
    MOE_K_OP_MATMUL,
    MOE_K_OP_LINEAR_FWD,
    MOE_K_OP_LINEAR_BWD_DATA,
    MOE_K_OP_LINEAR_BWD_WEIGHT,
    MOE_K_OP_GROUPED_LINEAR_FWD,
    MOE_K_OP_GROUPED_LINEAR_BWD_DATA,
    MOE_K_OP_GROUPED_LINEAR_BWD_WEIGHT,
    MOE_K_OP_EXPERT_COUNTS,
    MOE_K_OP_DISPATCH_LAYOUT,
    MOE_K_OP_PERMUTE,
    MOE_K_OP_PERMUTE_BWD,
    MOE_K_OP_UNPERMUTE,
    MOE_K_OP_UNPERMUTE_BWD,
    MOE_K_OP_SORT_CHUNKS,
    MOE_K_OP_UNSORT_CHUNKS,
    MOE_K_OP_ROUTER_FWD,
    MOE_K_OP_ROUTER_BWD,
    MOE_K_OP_ROUTER_AUX_LOSS_FWD,
    MOE_K_OP_ROUTER_AUX_LOSS_BWD,
    MOE_K_OP_ROUTER_Z_LOSS_FWD,
    MOE_K_OP_ROUTER_Z_LOSS_BWD,
    MOE_K_OP_ROUTER_BIAS_UPDATE,
    MOE_K_OP_RMSNORM_FWD,
    MOE_K_OP_RMSNORM_BWD,
    MOE_K_OP_SWIGLU_FWD,
    MOE_K_OP_SWIGLU_BWD,
    MOE_K_OP_GELU_FWD,
    MOE_K_OP_GELU_BWD,
    MOE_K_OP_ROPE_TABLE,
    MOE_K_OP_ROPE_FWD,
    MOE_K_OP_ROPE_BWD,
    MOE_K_OP_ATTENTION_WORKSPACE_BYTES,
    MOE_K_OP_ATTENTION_FWD,
    MOE_K_OP_ATTENTION_BWD,
    MOE_K_OP_ATTENTION_WINDOW_SINK_FWD,
    MOE_K_OP_ATTENTION_WINDOW_SINK_BWD,
    MOE_K_OP_BIAS_FWD,
    MOE_K_OP_BIAS_BWD,
    MOE_K_OP_EMBEDDING_FWD,
    MOE_K_OP_EMBEDDING_BWD,
    MOE_K_OP_XENT_LOCAL_MAX,
    MOE_K_OP_XENT_LOCAL_SUMEXP,
    MOE_K_OP_XENT_LOSS,
    MOE_K_OP_XENT_BWD,
    MOE_K_OP_ADAMW_STEP,
    MOE_K_OP_QDQ,
    MOE_K_NUM_OPS,
};

/* The member's name ("linear_fwd"), or "?" out of range. */
const char *moe_k_op_name(enum moe_k_op op);

/* A profile: the wrapping table and where it adds. Caller-owned; fill with moe_k_profile_init. */
struct moe_k_profile {
    struct moe_k_ops ops;          /* the wrappers (NULL where the inner table has NULL) */
    const struct moe_k_ops *inner; /* the backend's table the wrappers call */
    const int *bucket;             /* the bucket to add to (e.g. the engine's phase slot), read at
                                      every op; NULL: bucket 0 */
    int num_buckets;               /* buckets in seconds/calls; an out-of-range bucket is dropped */
    double *seconds;               /* [num_buckets][MOE_K_NUM_OPS] wall seconds, accumulated */
    long *calls;                   /* [num_buckets][MOE_K_NUM_OPS] calls, accumulated */
};

/*
 * Fill p to wrap `inner`, adding into seconds/calls (caller memory, [num_buckets * MOE_K_NUM_OPS]
 * each, zeroed here) at the bucket *bucket (NULL: 0). The wrappers find p through the kernel
 * context: call moe_k_ctx_set_profile(ctx, p) and then call ops through &p->ops with that ctx.
 * MOE_ERR_INVALID for NULL pointers or num_buckets < 1.
 */
MOE_NODISCARD enum moe_status moe_k_profile_init(struct moe_k_profile *p,
                                                 const struct moe_k_ops *inner,
                                                 const int *bucket,
                                                 int num_buckets,
                                                 double *seconds,
                                                 long *calls);

/* Attach (or with NULL detach) the profile the wrappers add to; the ctx does not own it. */
void moe_k_ctx_set_profile(moe_k_ctx_t *ctx, struct moe_k_profile *p);
/* The attached profile, or NULL. */
struct moe_k_profile *moe_k_ctx_profile(const moe_k_ctx_t *ctx);

#ifdef __cplusplus
}
#endif

#endif /* MOE_KERNELS_PROFILE_H */
