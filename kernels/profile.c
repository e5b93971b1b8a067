/*
 * The profiling ops table (kernels/profile.h): one wrapper per member of struct moe_k_ops, each
 * the inner member's call between two clock readings, with the time and the call added to the
 * profile's current bucket. The wrappers were written from the table's declarations (same
 * parameters, same order) and do no math; a member the inner table leaves NULL stays NULL, so the
 * callers' "is this optional op there" checks see the backend's answer.
 */
#include "kernels/profile.h"

#include <stddef.h>
#include <string.h>
#include <time.h>

static const char *const op_names[MOE_K_NUM_OPS] = {
    [MOE_K_OP_FILL] = "fill",
    [MOE_K_OP_COPY_2D] = "copy_2d",
    [MOE_K_OP_AXPY] = "axpy",
    [MOE_K_OP_SCALE] = "scale",
    [MOE_K_OP_SUM] = "sum",
    [MOE_K_OP_SUM_SQUARES] = "sum_squares",
    [MOE_K_OP_MATMUL] = "matmul",
    [MOE_K_OP_LINEAR_FWD] = "linear_fwd",
    [MOE_K_OP_LINEAR_BWD_DATA] = "linear_bwd_data",
    [MOE_K_OP_LINEAR_BWD_WEIGHT] = "linear_bwd_weight",
    [MOE_K_OP_GROUPED_LINEAR_FWD] = "grouped_linear_fwd",
    [MOE_K_OP_GROUPED_LINEAR_BWD_DATA] = "grouped_linear_bwd_data",
    [MOE_K_OP_GROUPED_LINEAR_BWD_WEIGHT] = "grouped_linear_bwd_weight",
    [MOE_K_OP_EXPERT_COUNTS] = "expert_counts",
    [MOE_K_OP_DISPATCH_LAYOUT] = "dispatch_layout",
    [MOE_K_OP_PERMUTE] = "permute",
    [MOE_K_OP_PERMUTE_BWD] = "permute_bwd",
    [MOE_K_OP_UNPERMUTE] = "unpermute",
    [MOE_K_OP_UNPERMUTE_BWD] = "unpermute_bwd",
    [MOE_K_OP_SORT_CHUNKS] = "sort_chunks",
    [MOE_K_OP_UNSORT_CHUNKS] = "unsort_chunks",
    [MOE_K_OP_ROUTER_FWD] = "router_fwd",
    [MOE_K_OP_ROUTER_BWD] = "router_bwd",
    [MOE_K_OP_ROUTER_AUX_LOSS_FWD] = "router_aux_loss_fwd",
    [MOE_K_OP_ROUTER_AUX_LOSS_BWD] = "router_aux_loss_bwd",
    [MOE_K_OP_ROUTER_Z_LOSS_FWD] = "router_z_loss_fwd",
    [MOE_K_OP_ROUTER_Z_LOSS_BWD] = "router_z_loss_bwd",
    [MOE_K_OP_ROUTER_BIAS_UPDATE] = "router_bias_update",
    [MOE_K_OP_RMSNORM_FWD] = "rmsnorm_fwd",
    [MOE_K_OP_RMSNORM_BWD] = "rmsnorm_bwd",
    [MOE_K_OP_SWIGLU_FWD] = "swiglu_fwd",
    [MOE_K_OP_SWIGLU_BWD] = "swiglu_bwd",
    [MOE_K_OP_GELU_FWD] = "gelu_fwd",
    [MOE_K_OP_GELU_BWD] = "gelu_bwd",
    [MOE_K_OP_ROPE_TABLE] = "rope_table",
    [MOE_K_OP_ROPE_FWD] = "rope_fwd",
    [MOE_K_OP_ROPE_BWD] = "rope_bwd",
    [MOE_K_OP_ATTENTION_WORKSPACE_BYTES] = "attention_workspace_bytes",
    [MOE_K_OP_ATTENTION_FWD] = "attention_fwd",
    [MOE_K_OP_ATTENTION_BWD] = "attention_bwd",
    [MOE_K_OP_ATTENTION_WINDOW_SINK_FWD] = "attention_window_sink_fwd",
    [MOE_K_OP_ATTENTION_WINDOW_SINK_BWD] = "attention_window_sink_bwd",
    [MOE_K_OP_BIAS_FWD] = "bias_fwd",
    [MOE_K_OP_BIAS_BWD] = "bias_bwd",
    [MOE_K_OP_EMBEDDING_FWD] = "embedding_fwd",
    [MOE_K_OP_EMBEDDING_BWD] = "embedding_bwd",
    [MOE_K_OP_XENT_LOCAL_MAX] = "xent_local_max",
    [MOE_K_OP_XENT_LOCAL_SUMEXP] = "xent_local_sumexp",
    [MOE_K_OP_XENT_LOSS] = "xent_loss",
    [MOE_K_OP_XENT_BWD] = "xent_bwd",
    [MOE_K_OP_ADAMW_STEP] = "adamw_step",
    [MOE_K_OP_QDQ] = "qdq",
};

const char *moe_k_op_name(enum moe_k_op op)
{
    return ((int)op >= 0 && op < MOE_K_NUM_OPS) ? op_names[op] : "?";
}

static double op_begin(void)
{
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const struct moe_k_ops *inner(moe_k_ctx_t *ctx)
{
    return moe_k_ctx_profile(ctx)->inner;
}

static void op_end(moe_k_ctx_t *ctx, enum moe_k_op op, double t0)
{
    double dt = op_begin() - t0;
    struct moe_k_profile *p = moe_k_ctx_profile(ctx);
    int b = p->bucket != NULL ? *p->bucket : 0;
    if (b < 0 || b >= p->num_buckets) {
        return;
    }
    size_t i = (size_t)b * MOE_K_NUM_OPS + (size_t)op;
    p->seconds[i] += dt;
    p->calls[i] += 1;
}

static void p_fill(float *x, size_t n, float value, moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->fill(x, n, value, ctx);
    op_end(ctx, MOE_K_OP_FILL, t0);
}

static void p_copy_2d(float *dst,
                      int dst_ld,
                      const float *src,
                      int src_ld,
                      int rows,
                      int cols,
                      bool accumulate,
                      moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->copy_2d(dst, dst_ld, src, src_ld, rows, cols, accumulate, ctx);
    op_end(ctx, MOE_K_OP_COPY_2D, t0);
}

static void p_axpy(float *y, const float *x, size_t n, float alpha, moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->axpy(y, x, n, alpha, ctx);
    op_end(ctx, MOE_K_OP_AXPY, t0);
}

static void p_scale(float *x, size_t n, float alpha, moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->scale(x, n, alpha, ctx);
    op_end(ctx, MOE_K_OP_SCALE, t0);
}

static void p_sum(float *out, const float *x, size_t n, moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->sum(out, x, n, ctx);
    op_end(ctx, MOE_K_OP_SUM, t0);
}

static void p_sum_squares(float *out, const float *x, size_t n, moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->sum_squares(out, x, n, ctx);
    op_end(ctx, MOE_K_OP_SUM_SQUARES, t0);
}

static void p_matmul(float *c,
                     const float *a,
                     const float *b,
                     int m,
                     int n,
                     int k,
                     bool trans_a,
                     bool trans_b,
                     float alpha,
                     float beta,
                     moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->matmul(c, a, b, m, n, k, trans_a, trans_b, alpha, beta, ctx);
    op_end(ctx, MOE_K_OP_MATMUL, t0);
}

static void p_linear_fwd(float *y,
                         const float *x,
                         const float *w,
                         const float *bias,
                         int num_rows,
                         int in_dim,
                         int out_dim,
                         moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->linear_fwd(y, x, w, bias, num_rows, in_dim, out_dim, ctx);
    op_end(ctx, MOE_K_OP_LINEAR_FWD, t0);
}

static void p_linear_bwd_data(float *dx,
                              const float *dy,
                              const float *w,
                              int num_rows,
                              int in_dim,
                              int out_dim,
                              bool accumulate,
                              moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->linear_bwd_data(dx, dy, w, num_rows, in_dim, out_dim, accumulate, ctx);
    op_end(ctx, MOE_K_OP_LINEAR_BWD_DATA, t0);
}

static void p_linear_bwd_weight(float *dw,
                                float *d_bias,
                                const float *dy,
                                const float *x,
                                int num_rows,
                                int in_dim,
                                int out_dim,
                                moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->linear_bwd_weight(dw, d_bias, dy, x, num_rows, in_dim, out_dim, ctx);
    op_end(ctx, MOE_K_OP_LINEAR_BWD_WEIGHT, t0);
}

static void p_grouped_linear_fwd(float *y,
                                 const float *x,
                                 const float *w,
                                 const int *counts,
                                 const int *counts_host,
                                 int num_experts,
                                 int in_dim,
                                 int out_dim,
                                 moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->grouped_linear_fwd(y, x, w, counts, counts_host, num_experts, in_dim, out_dim, ctx);
    op_end(ctx, MOE_K_OP_GROUPED_LINEAR_FWD, t0);
}

static void p_grouped_linear_bwd_data(float *dx,
                                      const float *dy,
                                      const float *w,
                                      const int *counts,
                                      const int *counts_host,
                                      int num_experts,
                                      int in_dim,
                                      int out_dim,
                                      bool accumulate,
                                      moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->grouped_linear_bwd_data(dx, dy, w, counts, counts_host, num_experts, in_dim,
                                        out_dim, accumulate, ctx);
    op_end(ctx, MOE_K_OP_GROUPED_LINEAR_BWD_DATA, t0);
}

static void p_grouped_linear_bwd_weight(float *dw,
                                        const float *dy,
                                        const float *x,
                                        const int *counts,
                                        const int *counts_host,
                                        int num_experts,
                                        int in_dim,
                                        int out_dim,
                                        moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->grouped_linear_bwd_weight(dw, dy, x, counts, counts_host, num_experts, in_dim,
                                          out_dim, ctx);
    op_end(ctx, MOE_K_OP_GROUPED_LINEAR_BWD_WEIGHT, t0);
}

static void p_expert_counts(
    int *counts, const int *topk_idx, int num_tokens, int topk, int num_experts, moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->expert_counts(counts, topk_idx, num_tokens, topk, num_experts, ctx);
    op_end(ctx, MOE_K_OP_EXPERT_COUNTS, t0);
}

static void p_dispatch_layout(int *tokens_per_expert,
                              int *tokens_per_rank,
                              int *slot_to_row,
                              int *row_to_slot,
                              const int *topk_idx,
                              int num_tokens,
                              int topk,
                              int num_experts,
                              int num_ranks,
                              int capacity,
                              moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->dispatch_layout(tokens_per_expert, tokens_per_rank, slot_to_row, row_to_slot,
                                topk_idx, num_tokens, topk, num_experts, num_ranks, capacity, ctx);
    op_end(ctx, MOE_K_OP_DISPATCH_LAYOUT, t0);
}

static void p_permute(float *rows,
                      const float *x,
                      const int *row_to_slot,
                      int num_rows,
                      int topk,
                      int hidden,
                      moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->permute(rows, x, row_to_slot, num_rows, topk, hidden, ctx);
    op_end(ctx, MOE_K_OP_PERMUTE, t0);
}

static void p_permute_bwd(float *dx,
                          const float *d_rows,
                          const int *slot_to_row,
                          int num_tokens,
                          int topk,
                          int hidden,
                          bool accumulate,
                          moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->permute_bwd(dx, d_rows, slot_to_row, num_tokens, topk, hidden, accumulate, ctx);
    op_end(ctx, MOE_K_OP_PERMUTE_BWD, t0);
}

static void p_unpermute(float *y,
                        const float *rows,
                        const float *weights,
                        const int *slot_to_row,
                        int num_tokens,
                        int topk,
                        int hidden,
                        moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->unpermute(y, rows, weights, slot_to_row, num_tokens, topk, hidden, ctx);
    op_end(ctx, MOE_K_OP_UNPERMUTE, t0);
}

static void p_unpermute_bwd(float *d_rows,
                            float *d_weights,
                            const float *dy,
                            const float *rows,
                            const float *weights,
                            const int *slot_to_row,
                            int num_tokens,
                            int topk,
                            int hidden,
                            moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->unpermute_bwd(d_rows, d_weights, dy, rows, weights, slot_to_row, num_tokens, topk,
                              hidden, ctx);
    op_end(ctx, MOE_K_OP_UNPERMUTE_BWD, t0);
}

static void p_sort_chunks(float *out,
                          const float *in,
                          const int *chunk_rows,
                          const int *chunk_order,
                          int num_chunks,
                          int hidden,
                          moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->sort_chunks(out, in, chunk_rows, chunk_order, num_chunks, hidden, ctx);
    op_end(ctx, MOE_K_OP_SORT_CHUNKS, t0);
}

static void p_unsort_chunks(float *out,
                            const float *in,
                            const int *chunk_rows,
                            const int *chunk_order,
                            int num_chunks,
                            int hidden,
                            moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->unsort_chunks(out, in, chunk_rows, chunk_order, num_chunks, hidden, ctx);
    op_end(ctx, MOE_K_OP_UNSORT_CHUNKS, t0);
}

static void p_router_fwd(int *topk_idx,
                         float *topk_weight,
                         float *scores,
                         const float *logits,
                         const float *expert_bias,
                         int num_tokens,
                         int num_experts,
                         int topk,
                         int num_groups,
                         int group_topk,
                         enum moe_k_score_fn score_fn,
                         bool normalize_topk,
                         float scaling_factor,
                         moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->router_fwd(topk_idx, topk_weight, scores, logits, expert_bias, num_tokens,
                           num_experts, topk, num_groups, group_topk, score_fn, normalize_topk,
                           scaling_factor, ctx);
    op_end(ctx, MOE_K_OP_ROUTER_FWD, t0);
}

static void p_router_bwd(float *d_logits,
                         const float *d_topk_weight,
                         const float *d_scores,
                         const float *scores,
                         const int *topk_idx,
                         int num_tokens,
                         int num_experts,
                         int topk,
                         enum moe_k_score_fn score_fn,
                         bool normalize_topk,
                         float scaling_factor,
                         moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->router_bwd(d_logits, d_topk_weight, d_scores, scores, topk_idx, num_tokens,
                           num_experts, topk, score_fn, normalize_topk, scaling_factor, ctx);
    op_end(ctx, MOE_K_OP_ROUTER_BWD, t0);
}

static void p_router_aux_loss_fwd(float *loss,
                                  const float *scores,
                                  const int *counts,
                                  int num_tokens,
                                  int num_tokens_total,
                                  int num_experts,
                                  int topk,
                                  enum moe_k_score_fn score_fn,
                                  float coeff,
                                  moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->router_aux_loss_fwd(loss, scores, counts, num_tokens, num_tokens_total, num_experts,
                                    topk, score_fn, coeff, ctx);
    op_end(ctx, MOE_K_OP_ROUTER_AUX_LOSS_FWD, t0);
}

static void p_router_aux_loss_bwd(float *d_scores,
                                  const float *scores,
                                  const int *counts,
                                  int num_tokens,
                                  int num_tokens_total,
                                  int num_experts,
                                  int topk,
                                  enum moe_k_score_fn score_fn,
                                  float coeff,
                                  float d_loss,
                                  moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->router_aux_loss_bwd(d_scores, scores, counts, num_tokens, num_tokens_total,
                                    num_experts, topk, score_fn, coeff, d_loss, ctx);
    op_end(ctx, MOE_K_OP_ROUTER_AUX_LOSS_BWD, t0);
}

static void p_router_z_loss_fwd(float *loss,
                                const float *logits,
                                int num_tokens,
                                int num_tokens_total,
                                int num_experts,
                                float coeff,
                                moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->router_z_loss_fwd(loss, logits, num_tokens, num_tokens_total, num_experts, coeff,
                                  ctx);
    op_end(ctx, MOE_K_OP_ROUTER_Z_LOSS_FWD, t0);
}

static void p_router_z_loss_bwd(float *d_logits,
                                const float *logits,
                                int num_tokens,
                                int num_tokens_total,
                                int num_experts,
                                float coeff,
                                float d_loss,
                                moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->router_z_loss_bwd(d_logits, logits, num_tokens, num_tokens_total, num_experts,
                                  coeff, d_loss, ctx);
    op_end(ctx, MOE_K_OP_ROUTER_Z_LOSS_BWD, t0);
}

static void
p_router_bias_update(float *bias, const int *counts, int num_experts, float rate, moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->router_bias_update(bias, counts, num_experts, rate, ctx);
    op_end(ctx, MOE_K_OP_ROUTER_BIAS_UPDATE, t0);
}

static void p_rmsnorm_fwd(float *y,
                          float *rstd,
                          const float *x,
                          const float *weight,
                          int num_rows,
                          int hidden,
                          float eps,
                          moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->rmsnorm_fwd(y, rstd, x, weight, num_rows, hidden, eps, ctx);
    op_end(ctx, MOE_K_OP_RMSNORM_FWD, t0);
}

static void p_rmsnorm_bwd(float *dx,
                          float *d_weight,
                          const float *dy,
                          const float *x,
                          const float *weight,
                          const float *rstd,
                          int num_rows,
                          int hidden,
                          bool accumulate,
                          moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->rmsnorm_bwd(dx, d_weight, dy, x, weight, rstd, num_rows, hidden, accumulate, ctx);
    op_end(ctx, MOE_K_OP_RMSNORM_BWD, t0);
}

static void p_swiglu_fwd(float *out, const float *in, int num_rows, int ffn, moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->swiglu_fwd(out, in, num_rows, ffn, ctx);
    op_end(ctx, MOE_K_OP_SWIGLU_FWD, t0);
}

static void p_swiglu_bwd(
    float *d_in, const float *d_out, const float *in, int num_rows, int ffn, moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->swiglu_bwd(d_in, d_out, in, num_rows, ffn, ctx);
    op_end(ctx, MOE_K_OP_SWIGLU_BWD, t0);
}

static void p_gelu_fwd(float *out, const float *in, size_t n, moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->gelu_fwd(out, in, n, ctx);
    op_end(ctx, MOE_K_OP_GELU_FWD, t0);
}

static void p_gelu_bwd(float *d_in, const float *d_out, const float *in, size_t n, moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->gelu_bwd(d_in, d_out, in, n, ctx);
    op_end(ctx, MOE_K_OP_GELU_BWD, t0);
}

static void p_rope_table(
    float *cos_sin, const int *positions, int num_rows, int rot_dim, float theta, moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->rope_table(cos_sin, positions, num_rows, rot_dim, theta, ctx);
    op_end(ctx, MOE_K_OP_ROPE_TABLE, t0);
}

static void p_rope_fwd(float *out,
                       const float *in,
                       const float *cos_sin,
                       int num_rows,
                       int num_heads,
                       int head_dim,
                       int rot_start,
                       int rot_dim,
                       bool interleaved,
                       moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->rope_fwd(out, in, cos_sin, num_rows, num_heads, head_dim, rot_start, rot_dim,
                         interleaved, ctx);
    op_end(ctx, MOE_K_OP_ROPE_FWD, t0);
}

static void p_rope_bwd(float *d_in,
                       const float *d_out,
                       const float *cos_sin,
                       int num_rows,
                       int num_heads,
                       int head_dim,
                       int rot_start,
                       int rot_dim,
                       bool interleaved,
                       moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->rope_bwd(d_in, d_out, cos_sin, num_rows, num_heads, head_dim, rot_start, rot_dim,
                         interleaved, ctx);
    op_end(ctx, MOE_K_OP_ROPE_BWD, t0);
}

static size_t p_attention_workspace_bytes(int q_len, int kv_len, moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    size_t r = inner(ctx)->attention_workspace_bytes(q_len, kv_len, ctx);
    op_end(ctx, MOE_K_OP_ATTENTION_WORKSPACE_BYTES, t0);
    return r;
}

static void p_attention_fwd(float *out,
                            float *lse,
                            const float *q,
                            const float *k,
                            const float *v,
                            int batch,
                            int q_len,
                            int kv_len,
                            int num_q_heads,
                            int num_kv_heads,
                            int qk_dim,
                            int v_dim,
                            int q_pos0,
                            int k_pos0,
                            float scale,
                            bool causal,
                            void *workspace,
                            size_t workspace_bytes,
                            moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->attention_fwd(out, lse, q, k, v, batch, q_len, kv_len, num_q_heads, num_kv_heads,
                              qk_dim, v_dim, q_pos0, k_pos0, scale, causal, workspace,
                              workspace_bytes, ctx);
    op_end(ctx, MOE_K_OP_ATTENTION_FWD, t0);
}

static void p_attention_bwd(float *dq,
                            float *dk,
                            float *dv,
                            const float *dout,
                            const float *q,
                            const float *k,
                            const float *v,
                            const float *out,
                            const float *lse,
                            int batch,
                            int q_len,
                            int kv_len,
                            int num_q_heads,
                            int num_kv_heads,
                            int qk_dim,
                            int v_dim,
                            int q_pos0,
                            int k_pos0,
                            float scale,
                            bool causal,
                            bool accumulate_dkv,
                            void *workspace,
                            size_t workspace_bytes,
                            moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, batch, q_len, kv_len,
                              num_q_heads, num_kv_heads, qk_dim, v_dim, q_pos0, k_pos0, scale,
                              causal, accumulate_dkv, workspace, workspace_bytes, ctx);
    op_end(ctx, MOE_K_OP_ATTENTION_BWD, t0);
}

static void p_attention_window_sink_fwd(float *out,
                                        float *lse,
                                        const float *q,
                                        const float *k,
                                        const float *v,
                                        const float *sinks,
                                        int batch,
                                        int q_len,
                                        int kv_len,
                                        int num_q_heads,
                                        int num_kv_heads,
                                        int qk_dim,
                                        int v_dim,
                                        int q_pos0,
                                        int k_pos0,
                                        int window,
                                        float scale,
                                        void *workspace,
                                        size_t workspace_bytes,
                                        moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->attention_window_sink_fwd(out, lse, q, k, v, sinks, batch, q_len, kv_len,
                                          num_q_heads, num_kv_heads, qk_dim, v_dim, q_pos0, k_pos0,
                                          window, scale, workspace, workspace_bytes, ctx);
    op_end(ctx, MOE_K_OP_ATTENTION_WINDOW_SINK_FWD, t0);
}

static void p_attention_window_sink_bwd(float *dq,
                                        float *dk,
                                        float *dv,
                                        float *d_sinks,
                                        const float *dout,
                                        const float *q,
                                        const float *k,
                                        const float *v,
                                        const float *out,
                                        const float *lse,
                                        const float *sinks,
                                        int batch,
                                        int q_len,
                                        int kv_len,
                                        int num_q_heads,
                                        int num_kv_heads,
                                        int qk_dim,
                                        int v_dim,
                                        int q_pos0,
                                        int k_pos0,
                                        int window,
                                        float scale,
                                        bool accumulate_dkv,
                                        void *workspace,
                                        size_t workspace_bytes,
                                        moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->attention_window_sink_bwd(dq, dk, dv, d_sinks, dout, q, k, v, out, lse, sinks,
                                          batch, q_len, kv_len, num_q_heads, num_kv_heads, qk_dim,
                                          v_dim, q_pos0, k_pos0, window, scale, accumulate_dkv,
                                          workspace, workspace_bytes, ctx);
    op_end(ctx, MOE_K_OP_ATTENTION_WINDOW_SINK_BWD, t0);
}

static void p_bias_fwd(float *y, const float *bias, int num_rows, int dim, moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->bias_fwd(y, bias, num_rows, dim, ctx);
    op_end(ctx, MOE_K_OP_BIAS_FWD, t0);
}

static void p_bias_bwd(float *d_bias, const float *dy, int num_rows, int dim, moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->bias_bwd(d_bias, dy, num_rows, dim, ctx);
    op_end(ctx, MOE_K_OP_BIAS_BWD, t0);
}

static void p_embedding_fwd(float *out,
                            const int *ids,
                            const float *table,
                            int num_tokens,
                            int hidden,
                            int v_start,
                            int v_end,
                            moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->embedding_fwd(out, ids, table, num_tokens, hidden, v_start, v_end, ctx);
    op_end(ctx, MOE_K_OP_EMBEDDING_FWD, t0);
}

static void p_embedding_bwd(float *d_table,
                            const float *d_out,
                            const int *ids,
                            int num_tokens,
                            int hidden,
                            int v_start,
                            int v_end,
                            moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->embedding_bwd(d_table, d_out, ids, num_tokens, hidden, v_start, v_end, ctx);
    op_end(ctx, MOE_K_OP_EMBEDDING_BWD, t0);
}

static void p_xent_local_max(
    float *local_max, const float *logits, int num_tokens, int vocab_local, moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->xent_local_max(local_max, logits, num_tokens, vocab_local, ctx);
    op_end(ctx, MOE_K_OP_XENT_LOCAL_MAX, t0);
}

static void p_xent_local_sumexp(float *sumexp,
                                float *target_logit,
                                const float *logits,
                                const int *targets,
                                const float *global_max,
                                int num_tokens,
                                int vocab_local,
                                int v_start,
                                moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->xent_local_sumexp(sumexp, target_logit, logits, targets, global_max, num_tokens,
                                  vocab_local, v_start, ctx);
    op_end(ctx, MOE_K_OP_XENT_LOCAL_SUMEXP, t0);
}

static void p_xent_loss(float *loss,
                        const float *global_max,
                        const float *global_sumexp,
                        const float *target_logit,
                        const int *targets,
                        int num_tokens,
                        moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->xent_loss(loss, global_max, global_sumexp, target_logit, targets, num_tokens, ctx);
    op_end(ctx, MOE_K_OP_XENT_LOSS, t0);
}

static void p_xent_bwd(float *d_logits,
                       const float *logits,
                       const int *targets,
                       const float *global_max,
                       const float *global_sumexp,
                       int num_tokens,
                       int vocab_local,
                       int v_start,
                       float d_loss,
                       moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->xent_bwd(d_logits, logits, targets, global_max, global_sumexp, num_tokens,
                         vocab_local, v_start, d_loss, ctx);
    op_end(ctx, MOE_K_OP_XENT_BWD, t0);
}

static void p_adamw_step(float *param,
                         float *m,
                         float *v,
                         const float *grad,
                         size_t n,
                         float lr,
                         float beta1,
                         float beta2,
                         float eps,
                         float weight_decay,
                         float grad_scale,
                         int step,
                         moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->adamw_step(param, m, v, grad, n, lr, beta1, beta2, eps, weight_decay, grad_scale,
                           step, ctx);
    op_end(ctx, MOE_K_OP_ADAMW_STEP, t0);
}

static void p_qdq(float *out,
                  const float *in,
                  int rows,
                  int cols,
                  enum moe_k_qformat format,
                  enum moe_k_qrecipe recipe,
                  moe_k_ctx_t *ctx)
{
    double t0 = op_begin();
    inner(ctx)->qdq(out, in, rows, cols, format, recipe, ctx);
    op_end(ctx, MOE_K_OP_QDQ, t0);
}

enum moe_status moe_k_profile_init(struct moe_k_profile *p,
                                   const struct moe_k_ops *in,
                                   const int *bucket,
                                   int num_buckets,
                                   double *seconds,
                                   long *calls)
{
    if (p == NULL || in == NULL || seconds == NULL || calls == NULL || num_buckets < 1) {
        return MOE_ERR_INVALID;
    }
    memset(p, 0, sizeof(*p));
    p->ops.backend = in->backend;
    p->ops.name = in->name;
    p->ops.ctx_init = in->ctx_init;
    p->ops.ctx_fini = in->ctx_fini;
    p->ops.fill = in->fill != NULL ? p_fill : NULL;
    p->ops.copy_2d = in->copy_2d != NULL ? p_copy_2d : NULL;
    p->ops.axpy = in->axpy != NULL ? p_axpy : NULL;
    p->ops.scale = in->scale != NULL ? p_scale : NULL;
    p->ops.sum = in->sum != NULL ? p_sum : NULL;
    p->ops.sum_squares = in->sum_squares != NULL ? p_sum_squares : NULL;
    p->ops.matmul = in->matmul != NULL ? p_matmul : NULL;
    p->ops.linear_fwd = in->linear_fwd != NULL ? p_linear_fwd : NULL;
    p->ops.linear_bwd_data = in->linear_bwd_data != NULL ? p_linear_bwd_data : NULL;
    p->ops.linear_bwd_weight = in->linear_bwd_weight != NULL ? p_linear_bwd_weight : NULL;
    p->ops.grouped_linear_fwd = in->grouped_linear_fwd != NULL ? p_grouped_linear_fwd : NULL;
    p->ops.grouped_linear_bwd_data =
        in->grouped_linear_bwd_data != NULL ? p_grouped_linear_bwd_data : NULL;
    p->ops.grouped_linear_bwd_weight =
        in->grouped_linear_bwd_weight != NULL ? p_grouped_linear_bwd_weight : NULL;
    p->ops.expert_counts = in->expert_counts != NULL ? p_expert_counts : NULL;
    p->ops.dispatch_layout = in->dispatch_layout != NULL ? p_dispatch_layout : NULL;
    p->ops.permute = in->permute != NULL ? p_permute : NULL;
    p->ops.permute_bwd = in->permute_bwd != NULL ? p_permute_bwd : NULL;
    p->ops.unpermute = in->unpermute != NULL ? p_unpermute : NULL;
    p->ops.unpermute_bwd = in->unpermute_bwd != NULL ? p_unpermute_bwd : NULL;
    p->ops.sort_chunks = in->sort_chunks != NULL ? p_sort_chunks : NULL;
    p->ops.unsort_chunks = in->unsort_chunks != NULL ? p_unsort_chunks : NULL;
    p->ops.router_fwd = in->router_fwd != NULL ? p_router_fwd : NULL;
    p->ops.router_bwd = in->router_bwd != NULL ? p_router_bwd : NULL;
    p->ops.router_aux_loss_fwd = in->router_aux_loss_fwd != NULL ? p_router_aux_loss_fwd : NULL;
    p->ops.router_aux_loss_bwd = in->router_aux_loss_bwd != NULL ? p_router_aux_loss_bwd : NULL;
    p->ops.router_z_loss_fwd = in->router_z_loss_fwd != NULL ? p_router_z_loss_fwd : NULL;
    p->ops.router_z_loss_bwd = in->router_z_loss_bwd != NULL ? p_router_z_loss_bwd : NULL;
    p->ops.router_bias_update = in->router_bias_update != NULL ? p_router_bias_update : NULL;
    p->ops.rmsnorm_fwd = in->rmsnorm_fwd != NULL ? p_rmsnorm_fwd : NULL;
    p->ops.rmsnorm_bwd = in->rmsnorm_bwd != NULL ? p_rmsnorm_bwd : NULL;
    p->ops.swiglu_fwd = in->swiglu_fwd != NULL ? p_swiglu_fwd : NULL;
    p->ops.swiglu_bwd = in->swiglu_bwd != NULL ? p_swiglu_bwd : NULL;
    p->ops.gelu_fwd = in->gelu_fwd != NULL ? p_gelu_fwd : NULL;
    p->ops.gelu_bwd = in->gelu_bwd != NULL ? p_gelu_bwd : NULL;
    p->ops.rope_table = in->rope_table != NULL ? p_rope_table : NULL;
    p->ops.rope_fwd = in->rope_fwd != NULL ? p_rope_fwd : NULL;
    p->ops.rope_bwd = in->rope_bwd != NULL ? p_rope_bwd : NULL;
    p->ops.attention_workspace_bytes =
        in->attention_workspace_bytes != NULL ? p_attention_workspace_bytes : NULL;
    p->ops.attention_fwd = in->attention_fwd != NULL ? p_attention_fwd : NULL;
    p->ops.attention_bwd = in->attention_bwd != NULL ? p_attention_bwd : NULL;
    p->ops.attention_window_sink_fwd =
        in->attention_window_sink_fwd != NULL ? p_attention_window_sink_fwd : NULL;
    p->ops.attention_window_sink_bwd =
        in->attention_window_sink_bwd != NULL ? p_attention_window_sink_bwd : NULL;
    p->ops.bias_fwd = in->bias_fwd != NULL ? p_bias_fwd : NULL;
    p->ops.bias_bwd = in->bias_bwd != NULL ? p_bias_bwd : NULL;
    p->ops.embedding_fwd = in->embedding_fwd != NULL ? p_embedding_fwd : NULL;
    p->ops.embedding_bwd = in->embedding_bwd != NULL ? p_embedding_bwd : NULL;
    p->ops.xent_local_max = in->xent_local_max != NULL ? p_xent_local_max : NULL;
    p->ops.xent_local_sumexp = in->xent_local_sumexp != NULL ? p_xent_local_sumexp : NULL;
    p->ops.xent_loss = in->xent_loss != NULL ? p_xent_loss : NULL;
    p->ops.xent_bwd = in->xent_bwd != NULL ? p_xent_bwd : NULL;
    p->ops.adamw_step = in->adamw_step != NULL ? p_adamw_step : NULL;
    p->ops.qdq = in->qdq != NULL ? p_qdq : NULL;
    p->inner = in;
    p->bucket = bucket;
    p->num_buckets = num_buckets;
    p->seconds = seconds;
    p->calls = calls;
    size_t n = (size_t)num_buckets * MOE_K_NUM_OPS;
    memset(seconds, 0, n * sizeof(*seconds));
    memset(calls, 0, n * sizeof(*calls));
    return MOE_OK;
}
