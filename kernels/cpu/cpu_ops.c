/*
 * The CPU backend's ops table and context hooks. The CPU backend is the specification of every op
 * (kernels/kernels.h); it runs fp32 with fixed loop orders and OpenBLAS on one thread per rank by
 * default, so results are bit-reproducible. It keeps no per-context state of its own.
 */
#include "kernels/cpu/cpu.h"

#include <cblas.h>

enum moe_status moe_k_cpu_ctx_init(moe_k_ctx_t *ctx)
{
    /* OpenBLAS threads are process-wide; with one MPI rank per core, one thread each. */
    openblas_set_num_threads(moe_k_ctx_get_desc(ctx)->num_threads);
    return MOE_OK;
}

void moe_k_cpu_ctx_fini(moe_k_ctx_t *ctx)
{
    (void)ctx;
}

static const struct moe_k_ops cpu_ops = {
    .backend = MOE_K_BACKEND_CPU,
    .name = "cpu",
    .ctx_init = moe_k_cpu_ctx_init,
    .ctx_fini = moe_k_cpu_ctx_fini,
    .fill = moe_k_cpu_fill,
    .copy_2d = moe_k_cpu_copy_2d,
    .axpy = moe_k_cpu_axpy,
    .scale = moe_k_cpu_scale,
    .sum = moe_k_cpu_sum,
    .sum_squares = moe_k_cpu_sum_squares,
    .matmul = moe_k_cpu_matmul,
    .linear_fwd = moe_k_cpu_linear_fwd,
    .linear_bwd_data = moe_k_cpu_linear_bwd_data,
    .linear_bwd_weight = moe_k_cpu_linear_bwd_weight,
    .grouped_linear_fwd = moe_k_cpu_grouped_linear_fwd,
    .grouped_linear_bwd_data = moe_k_cpu_grouped_linear_bwd_data,
    .grouped_linear_bwd_weight = moe_k_cpu_grouped_linear_bwd_weight,
    .expert_counts = moe_k_cpu_expert_counts,
    .dispatch_layout = moe_k_cpu_dispatch_layout,
    .permute = moe_k_cpu_permute,
    .permute_bwd = moe_k_cpu_permute_bwd,
    .unpermute = moe_k_cpu_unpermute,
    .unpermute_bwd = moe_k_cpu_unpermute_bwd,
    .sort_chunks = moe_k_cpu_sort_chunks,
    .unsort_chunks = moe_k_cpu_unsort_chunks,
    .router_fwd = moe_k_cpu_router_fwd,
    .router_bwd = moe_k_cpu_router_bwd,
    .router_aux_loss_fwd = moe_k_cpu_router_aux_loss_fwd,
    .router_aux_loss_bwd = moe_k_cpu_router_aux_loss_bwd,
    .router_z_loss_fwd = moe_k_cpu_router_z_loss_fwd,
    .router_z_loss_bwd = moe_k_cpu_router_z_loss_bwd,
    .router_bias_update = moe_k_cpu_router_bias_update,
    .rmsnorm_fwd = moe_k_cpu_rmsnorm_fwd,
    .rmsnorm_bwd = moe_k_cpu_rmsnorm_bwd,
    .swiglu_fwd = moe_k_cpu_swiglu_fwd,
    .swiglu_bwd = moe_k_cpu_swiglu_bwd,
    .gelu_fwd = moe_k_cpu_gelu_fwd,
    .gelu_bwd = moe_k_cpu_gelu_bwd,
    .rope_table = moe_k_cpu_rope_table,
    .rope_fwd = moe_k_cpu_rope_fwd,
    .rope_bwd = moe_k_cpu_rope_bwd,
    .attention_workspace_bytes = moe_k_cpu_attention_workspace_bytes,
    .attention_fwd = moe_k_cpu_attention_fwd,
    .attention_bwd = moe_k_cpu_attention_bwd,
    .attention_window_sink_fwd = moe_k_cpu_attention_window_sink_fwd,
    .attention_window_sink_bwd = moe_k_cpu_attention_window_sink_bwd,
    .bias_fwd = moe_k_cpu_bias_fwd,
    .bias_bwd = moe_k_cpu_bias_bwd,
    .embedding_fwd = moe_k_cpu_embedding_fwd,
    .embedding_bwd = moe_k_cpu_embedding_bwd,
    .xent_local_max = moe_k_cpu_xent_local_max,
    .xent_local_sumexp = moe_k_cpu_xent_local_sumexp,
    .xent_loss = moe_k_cpu_xent_loss,
    .xent_bwd = moe_k_cpu_xent_bwd,
    .adamw_step = moe_k_cpu_adamw_step,
    .qdq = moe_k_cpu_qdq,
};

const struct moe_k_ops *moe_k_cpu_ops(void)
{
    return &cpu_ops;
}
