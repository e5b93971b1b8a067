/*
 * Private to kernels/cpu: prototypes of the CPU backend's ops, one per struct moe_k_ops member,
 * grouped by the file that defines them. cpu_ops.c puts them into the table; assigning each to its
 * member makes the compiler check that every signature matches kernels/kernels.h exactly. Semantics
 * and shapes are documented once, at the table member in kernels/kernels.h.
 */
#ifndef MOE_KERNELS_CPU_CPU_H
#define MOE_KERNELS_CPU_CPU_H

#include "kernels/kernels.h"

#include <stdbool.h>
#include <stddef.h>

/* cpu_ops.c: context hooks */
enum moe_status moe_k_cpu_ctx_init(moe_k_ctx_t *ctx);
void moe_k_cpu_ctx_fini(moe_k_ctx_t *ctx);

/* elementwise.c: memory helpers, activations and bias rows */
void moe_k_cpu_fill(float *x, size_t n, float value, moe_k_ctx_t *ctx);
void moe_k_cpu_copy_2d(float *dst,
                       int dst_ld,
                       const float *src,
                       int src_ld,
                       int rows,
                       int cols,
                       bool accumulate,
                       moe_k_ctx_t *ctx);
void moe_k_cpu_axpy(float *y, const float *x, size_t n, float alpha, moe_k_ctx_t *ctx);
void moe_k_cpu_scale(float *x, size_t n, float alpha, moe_k_ctx_t *ctx);
void moe_k_cpu_sum(float *out, const float *x, size_t n, moe_k_ctx_t *ctx);
void moe_k_cpu_sum_squares(float *out, const float *x, size_t n, moe_k_ctx_t *ctx);
void moe_k_cpu_swiglu_fwd(float *out, const float *in, int num_rows, int ffn, moe_k_ctx_t *ctx);
void moe_k_cpu_swiglu_bwd(
    float *d_in, const float *d_out, const float *in, int num_rows, int ffn, moe_k_ctx_t *ctx);
void moe_k_cpu_gelu_fwd(float *out, const float *in, size_t n, moe_k_ctx_t *ctx);
void moe_k_cpu_gelu_bwd(
    float *d_in, const float *d_out, const float *in, size_t n, moe_k_ctx_t *ctx);
void moe_k_cpu_bias_fwd(float *y, const float *bias, int num_rows, int dim, moe_k_ctx_t *ctx);
void moe_k_cpu_bias_bwd(float *d_bias, const float *dy, int num_rows, int dim, moe_k_ctx_t *ctx);

/* gemm.c: dense and grouped GEMM on OpenBLAS */
void moe_k_cpu_matmul(float *c,
                      const float *a,
                      const float *b,
                      int m,
                      int n,
                      int k,
                      bool trans_a,
                      bool trans_b,
                      float alpha,
                      float beta,
                      moe_k_ctx_t *ctx);
void moe_k_cpu_linear_fwd(float *y,
                          const float *x,
                          const float *w,
                          const float *bias,
                          int num_rows,
                          int in_dim,
                          int out_dim,
                          moe_k_ctx_t *ctx);
void moe_k_cpu_linear_bwd_data(float *dx,
                               const float *dy,
                               const float *w,
                               int num_rows,
                               int in_dim,
                               int out_dim,
                               bool accumulate,
                               moe_k_ctx_t *ctx);
void moe_k_cpu_linear_bwd_weight(float *dw,
                                 float *d_bias,
                                 const float *dy,
                                 const float *x,
                                 int num_rows,
                                 int in_dim,
                                 int out_dim,
                                 moe_k_ctx_t *ctx);
void moe_k_cpu_grouped_linear_fwd(float *y,
                                  const float *x,
                                  const float *w,
                                  const int *counts,
                                  const int *counts_host,
                                  int num_experts,
                                  int in_dim,
                                  int out_dim,
                                  moe_k_ctx_t *ctx);
void moe_k_cpu_grouped_linear_bwd_data(float *dx,
                                       const float *dy,
                                       const float *w,
                                       const int *counts,
                                       const int *counts_host,
                                       int num_experts,
                                       int in_dim,
                                       int out_dim,
                                       bool accumulate,
                                       moe_k_ctx_t *ctx);
void moe_k_cpu_grouped_linear_bwd_weight(float *dw,
                                         const float *dy,
                                         const float *x,
                                         const int *counts,
                                         const int *counts_host,
                                         int num_experts,
                                         int in_dim,
                                         int out_dim,
                                         moe_k_ctx_t *ctx);

/* moe.c: dispatch layout, permute, unpermute, chunk sorting */
void moe_k_cpu_expert_counts(
    int *counts, const int *topk_idx, int num_tokens, int topk, int num_experts, moe_k_ctx_t *ctx);
void moe_k_cpu_dispatch_layout(int *tokens_per_expert,
                               int *tokens_per_rank,
                               int *slot_to_row,
                               int *row_to_slot,
                               const int *topk_idx,
                               int num_tokens,
                               int topk,
                               int num_experts,
                               int num_ranks,
                               int capacity,
                               moe_k_ctx_t *ctx);
void moe_k_cpu_permute(float *rows,
                       const float *x,
                       const int *row_to_slot,
                       int num_rows,
                       int topk,
                       int hidden,
                       moe_k_ctx_t *ctx);
void moe_k_cpu_permute_bwd(float *dx,
                           const float *d_rows,
                           const int *slot_to_row,
                           int num_tokens,
                           int topk,
                           int hidden,
                           bool accumulate,
                           moe_k_ctx_t *ctx);
void moe_k_cpu_unpermute(float *y,
                         const float *rows,
                         const float *weights,
                         const int *slot_to_row,
                         int num_tokens,
                         int topk,
                         int hidden,
                         moe_k_ctx_t *ctx);
void moe_k_cpu_unpermute_bwd(float *d_rows,
                             float *d_weights,
                             const float *dy,
                             const float *rows,
                             const float *weights,
                             const int *slot_to_row,
                             int num_tokens,
                             int topk,
                             int hidden,
                             moe_k_ctx_t *ctx);
void moe_k_cpu_sort_chunks(float *out,
                           const float *in,
                           const int *chunk_rows,
                           const int *chunk_order,
                           int num_chunks,
                           int hidden,
                           moe_k_ctx_t *ctx);
void moe_k_cpu_unsort_chunks(float *out,
                             const float *in,
                             const int *chunk_rows,
                             const int *chunk_order,
                             int num_chunks,
                             int hidden,
                             moe_k_ctx_t *ctx);

/* router.c: scores, top-k, aux and z losses */
void moe_k_cpu_router_fwd(int *topk_idx,
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
                          moe_k_ctx_t *ctx);
void moe_k_cpu_router_bwd(float *d_logits,
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
                          moe_k_ctx_t *ctx);
void moe_k_cpu_router_aux_loss_fwd(float *loss,
                                   const float *scores,
                                   const int *counts,
                                   int num_tokens,
                                   int num_tokens_total,
                                   int num_experts,
                                   int topk,
                                   enum moe_k_score_fn score_fn,
                                   float coeff,
                                   moe_k_ctx_t *ctx);
void moe_k_cpu_router_aux_loss_bwd(float *d_scores,
                                   const float *scores,
                                   const int *counts,
                                   int num_tokens,
                                   int num_tokens_total,
                                   int num_experts,
                                   int topk,
                                   enum moe_k_score_fn score_fn,
                                   float coeff,
                                   float d_loss,
                                   moe_k_ctx_t *ctx);
void moe_k_cpu_router_z_loss_fwd(float *loss,
                                 const float *logits,
                                 int num_tokens,
                                 int num_tokens_total,
                                 int num_experts,
                                 float coeff,
                                 moe_k_ctx_t *ctx);
void moe_k_cpu_router_z_loss_bwd(float *d_logits,
                                 const float *logits,
                                 int num_tokens,
                                 int num_tokens_total,
                                 int num_experts,
                                 float coeff,
                                 float d_loss,
                                 moe_k_ctx_t *ctx);
void moe_k_cpu_router_bias_update(
    float *bias, const int *counts, int num_experts, float rate, moe_k_ctx_t *ctx);

/* norm_rope.c: RMSNorm and rotary embedding */
void moe_k_cpu_rmsnorm_fwd(float *y,
                           float *rstd,
                           const float *x,
                           const float *weight,
                           int num_rows,
                           int hidden,
                           float eps,
                           moe_k_ctx_t *ctx);
void moe_k_cpu_rmsnorm_bwd(float *dx,
                           float *d_weight,
                           const float *dy,
                           const float *x,
                           const float *weight,
                           const float *rstd,
                           int num_rows,
                           int hidden,
                           bool accumulate,
                           moe_k_ctx_t *ctx);
void moe_k_cpu_rope_table(
    float *cos_sin, const int *positions, int num_rows, int rot_dim, float theta, moe_k_ctx_t *ctx);
void moe_k_cpu_rope_fwd(float *out,
                        const float *in,
                        const float *cos_sin,
                        int num_rows,
                        int num_heads,
                        int head_dim,
                        int rot_start,
                        int rot_dim,
                        bool interleaved,
                        moe_k_ctx_t *ctx);
void moe_k_cpu_rope_bwd(float *d_in,
                        const float *d_out,
                        const float *cos_sin,
                        int num_rows,
                        int num_heads,
                        int head_dim,
                        int rot_start,
                        int rot_dim,
                        bool interleaved,
                        moe_k_ctx_t *ctx);

/* attention.c: causal / chunked attention */
size_t moe_k_cpu_attention_workspace_bytes(int q_len, int kv_len, moe_k_ctx_t *ctx);
void moe_k_cpu_attention_fwd(float *out,
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
                             moe_k_ctx_t *ctx);
void moe_k_cpu_attention_bwd(float *dq,
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
                             moe_k_ctx_t *ctx);

void moe_k_cpu_attention_window_sink_fwd(float *out,
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
                                         moe_k_ctx_t *ctx);
void moe_k_cpu_attention_window_sink_bwd(float *dq,
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
                                         moe_k_ctx_t *ctx);

/* vocab.c: vocab-parallel embedding and cross-entropy */
void moe_k_cpu_embedding_fwd(float *out,
                             const int *ids,
                             const float *table,
                             int num_tokens,
                             int hidden,
                             int v_start,
                             int v_end,
                             moe_k_ctx_t *ctx);
void moe_k_cpu_embedding_bwd(float *d_table,
                             const float *d_out,
                             const int *ids,
                             int num_tokens,
                             int hidden,
                             int v_start,
                             int v_end,
                             moe_k_ctx_t *ctx);
void moe_k_cpu_xent_local_max(
    float *local_max, const float *logits, int num_tokens, int vocab_local, moe_k_ctx_t *ctx);
void moe_k_cpu_xent_local_sumexp(float *sumexp,
                                 float *target_logit,
                                 const float *logits,
                                 const int *targets,
                                 const float *global_max,
                                 int num_tokens,
                                 int vocab_local,
                                 int v_start,
                                 moe_k_ctx_t *ctx);
void moe_k_cpu_xent_loss(float *loss,
                         const float *global_max,
                         const float *global_sumexp,
                         const float *target_logit,
                         const int *targets,
                         int num_tokens,
                         moe_k_ctx_t *ctx);
void moe_k_cpu_xent_bwd(float *d_logits,
                        const float *logits,
                        const int *targets,
                        const float *global_max,
                        const float *global_sumexp,
                        int num_tokens,
                        int vocab_local,
                        int v_start,
                        float d_loss,
                        moe_k_ctx_t *ctx);

/* adamw.c: optimizer */
void moe_k_cpu_adamw_step(float *param,
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
                          moe_k_ctx_t *ctx);

/* quant.c: quantise-dequantise recipes */
void moe_k_cpu_qdq(float *out,
                   const float *in,
                   int rows,
                   int cols,
                   enum moe_k_qformat format,
                   enum moe_k_qrecipe recipe,
                   moe_k_ctx_t *ctx);

#endif /* MOE_KERNELS_CPU_CPU_H */
