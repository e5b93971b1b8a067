/*
 * Dense and grouped GEMM on OpenBLAS sgemm (row-major CBLAS). Linear layers store weights as
 * [out, in] (PyTorch's nn.Linear), so forward is y = x W^T, the data gradient dx = dy W and the
 * weight gradient dW += dy^T x: three sgemm calls with transpose flags, no copies. The grouped
 * variant runs the same three GEMMs once per expert, straight on each expert's slice of the
 * expert-contiguous rows (tokens already permuted), which keeps it within a few percent of one
 * large sgemm of the same FLOPs when experts get enough rows. OpenBLAS with one thread is
 * deterministic; bias and other small reductions are plain loops in row order.
 */
#include "kernels/cpu/cpu.h"

#include <cblas.h>

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
                      moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(m >= 0 && n >= 0 && k >= 0);
    if (m == 0 || n == 0) {
        return;
    }
    if (k == 0) {
        /* Empty product: C = beta C (sgemm's reference semantics; BLAS may reject lda = 0). */
        for (size_t i = 0; i < (size_t)m * (size_t)n; i++) {
            c[i] = beta == 0.0f ? 0.0f : beta * c[i];
        }
        return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, trans_a ? m : k, b,
                trans_b ? k : n, beta, c, n);
}

void moe_k_cpu_linear_fwd(float *y,
                          const float *x,
                          const float *w,
                          const float *bias,
                          int num_rows,
                          int in_dim,
                          int out_dim,
                          moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_rows >= 0 && in_dim > 0 && out_dim > 0);
    float beta = 0.0f;
    if (bias != NULL) {
        for (int r = 0; r < num_rows; r++) {
            float *yr = y + (size_t)r * (size_t)out_dim;
            for (int j = 0; j < out_dim; j++) {
                yr[j] = bias[j];
            }
        }
        beta = 1.0f;
    }
    moe_k_cpu_matmul(y, x, w, num_rows, out_dim, in_dim, false, true, 1.0f, beta, ctx);
}

void moe_k_cpu_linear_bwd_data(float *dx,
                               const float *dy,
                               const float *w,
                               int num_rows,
                               int in_dim,
                               int out_dim,
                               bool accumulate,
                               moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_rows >= 0 && in_dim > 0 && out_dim > 0);
    moe_k_cpu_matmul(dx, dy, w, num_rows, in_dim, out_dim, false, false, 1.0f,
                     accumulate ? 1.0f : 0.0f, ctx);
}

void moe_k_cpu_linear_bwd_weight(float *dw,
                                 float *d_bias,
                                 const float *dy,
                                 const float *x,
                                 int num_rows,
                                 int in_dim,
                                 int out_dim,
                                 moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_rows >= 0 && in_dim > 0 && out_dim > 0);
    if (num_rows == 0) {
        return;
    }
    moe_k_cpu_matmul(dw, dy, x, out_dim, in_dim, num_rows, true, false, 1.0f, 1.0f, ctx);
    if (d_bias != NULL) {
        for (int r = 0; r < num_rows; r++) {
            const float *dyr = dy + (size_t)r * (size_t)out_dim;
            for (int j = 0; j < out_dim; j++) {
                d_bias[j] += dyr[j];
            }
        }
    }
}

void moe_k_cpu_grouped_linear_fwd(float *y,
                                  const float *x,
                                  const float *w,
                                  const int *counts,
                                  const int *counts_host,
                                  int num_experts,
                                  int in_dim,
                                  int out_dim,
                                  moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_experts >= 0 && in_dim > 0 && out_dim > 0);
    (void)counts_host; /* counts is host memory here */
    size_t row = 0;
    size_t w_size = (size_t)out_dim * (size_t)in_dim;
    for (int e = 0; e < num_experts; e++) {
        MOE_ASSERT(counts[e] >= 0);
        if (counts[e] > 0) {
            moe_k_cpu_matmul(y + row * (size_t)out_dim, x + row * (size_t)in_dim,
                             w + (size_t)e * w_size, counts[e], out_dim, in_dim, false, true, 1.0f,
                             0.0f, ctx);
        }
        row += (size_t)counts[e];
    }
}

void moe_k_cpu_grouped_linear_bwd_data(float *dx,
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
    MOE_ASSERT(num_experts >= 0 && in_dim > 0 && out_dim > 0);
    (void)counts_host; /* counts is host memory here */
    size_t row = 0;
    size_t w_size = (size_t)out_dim * (size_t)in_dim;
    for (int e = 0; e < num_experts; e++) {
        MOE_ASSERT(counts[e] >= 0);
        if (counts[e] > 0) {
            moe_k_cpu_matmul(dx + row * (size_t)in_dim, dy + row * (size_t)out_dim,
                             w + (size_t)e * w_size, counts[e], in_dim, out_dim, false, false, 1.0f,
                             accumulate ? 1.0f : 0.0f, ctx);
        }
        row += (size_t)counts[e];
    }
}

void moe_k_cpu_grouped_linear_bwd_weight(float *dw,
                                         const float *dy,
                                         const float *x,
                                         const int *counts,
                                         const int *counts_host,
                                         int num_experts,
                                         int in_dim,
                                         int out_dim,
                                         moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_experts >= 0 && in_dim > 0 && out_dim > 0);
    (void)counts_host; /* counts is host memory here */
    size_t row = 0;
    size_t w_size = (size_t)out_dim * (size_t)in_dim;
    for (int e = 0; e < num_experts; e++) {
        MOE_ASSERT(counts[e] >= 0);
        if (counts[e] > 0) {
            moe_k_cpu_matmul(dw + (size_t)e * w_size, dy + row * (size_t)out_dim,
                             x + row * (size_t)in_dim, out_dim, in_dim, counts[e], true, false,
                             1.0f, 1.0f, ctx);
        }
        row += (size_t)counts[e];
    }
}
