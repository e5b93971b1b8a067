/*
 * Backend selection and the kernel context (kernels/kernels.h). The context records what it was
 * created from, the backend's ops table and one backend-private state pointer (the CUDA backend's
 * cuBLAS handle, say); the backend's ctx_init/ctx_fini hooks set and release that state. Also the
 * backend-neutral host helpers that are not ops (expert capacity). This file does no math.
 *
 * The CUDA table is referenced only when kernels/cuda/ is built and defines
 * MOE_HAVE_CUDA_KERNELS; otherwise moe_k_ops_for(MOE_K_BACKEND_CUDA) returns NULL and a CUDA
 * context cannot be created (MOE_ERR_UNSUPPORTED).
 */
#include "kernels/kernels.h"

#include "kernels/profile.h"

#include <math.h>
#include <stdlib.h>

struct moe_k_ctx {
    struct moe_k_ctx_desc desc;    /* as created, with defaults filled in */
    const struct moe_k_ops *ops;   /* the backend's table */
    void *backend_state;           /* owned by the backend's ctx_init / ctx_fini */
    struct moe_k_profile *profile; /* kernels/profile.h: where the profiling table adds; borrowed */
};

const struct moe_k_ops *moe_k_ops_for(enum moe_k_backend backend)
{
    if (backend == MOE_K_BACKEND_CPU) {
        return moe_k_cpu_ops();
    }
#if defined(MOE_HAVE_CUDA_KERNELS)
    if (backend == MOE_K_BACKEND_CUDA) {
        return moe_k_cuda_ops();
    }
#endif
    return NULL;
}

enum moe_status moe_k_ctx_create(const struct moe_k_ctx_desc *desc, moe_k_ctx_t **out)
{
    if (desc == NULL || out == NULL) {
        return MOE_ERR_INVALID;
    }
    *out = NULL;
    if ((int)desc->backend < 0 || desc->backend >= MOE_K_NUM_BACKENDS) {
        return MOE_ERR_INVALID;
    }
    const struct moe_k_ops *ops = moe_k_ops_for(desc->backend);
    if (ops == NULL) {
        return MOE_ERR_UNSUPPORTED;
    }
    moe_k_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL) {
        return MOE_ERR_NOMEM;
    }
    ctx->desc = *desc;
    if (ctx->desc.num_threads <= 0) {
        ctx->desc.num_threads = 1;
    }
    ctx->ops = ops;
    enum moe_status status = ops->ctx_init != NULL ? ops->ctx_init(ctx) : MOE_OK;
    if (status != MOE_OK) {
        free(ctx);
        return status;
    }
    *out = ctx;
    return MOE_OK;
}

void moe_k_ctx_destroy(moe_k_ctx_t *ctx)
{
    if (ctx == NULL) {
        return;
    }
    if (ctx->ops->ctx_fini != NULL) {
        ctx->ops->ctx_fini(ctx);
    }
    free(ctx);
}

const struct moe_k_ctx_desc *moe_k_ctx_get_desc(const moe_k_ctx_t *ctx)
{
    return &ctx->desc;
}

const struct moe_k_ops *moe_k_ctx_ops(const moe_k_ctx_t *ctx)
{
    return ctx->ops;
}

void moe_k_ctx_set_backend_state(moe_k_ctx_t *ctx, void *state)
{
    ctx->backend_state = state;
}

void *moe_k_ctx_backend_state(const moe_k_ctx_t *ctx)
{
    return ctx->backend_state;
}

void moe_k_ctx_set_profile(moe_k_ctx_t *ctx, struct moe_k_profile *p)
{
    ctx->profile = p;
}

struct moe_k_profile *moe_k_ctx_profile(const moe_k_ctx_t *ctx)
{
    return ctx->profile;
}

int moe_k_expert_capacity(int num_tokens, int topk, int num_experts, double capacity_factor)
{
    if (capacity_factor <= 0.0 || num_experts <= 0) {
        return 0;
    }
    /* Megatron-LM get_capacity(): ceil(num_tokens * topk / num_experts * capacity_factor). */
    double cap = ceil((double)num_tokens * (double)topk / (double)num_experts * capacity_factor);
    return (int)cap;
}
