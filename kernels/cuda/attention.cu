/*
 * Scaled dot-product attention on the GPU, the straightforward twin of kernels/cpu/attention.c:
 * per (sequence, query head) one cuBLAS GEMM forms S = scale Q K^T straight on the strided head
 * slices (no copies; GQA by indexing the key/value head h / (Hq/Hkv)), one block per query row
 * takes the masked softmax and saves the row log-sum-exp (sum of exponentials in double, as the
 * CPU), and a second GEMM multiplies by V. Backward recomputes P from the saved log-sum-exp and
 * runs the CPU's four GEMMs; heads of one GQA group accumulate into their shared dK/dV in head
 * order, so results are deterministic.
 *
 * Not a fused (flash) kernel: O(Tq*Tk) workspace per head and two launches per GEMM-pair per head.
 * GEMMs follow the context's math mode; in FP32 mode the result equals the CPU's up to summation
 * order and expf's last-ulp differences.
 */
#include "kernels/cuda/cuda_common.cuh"

#include <math.h>

extern "C" size_t moe_k_cuda_attention_workspace_bytes(int q_len, int kv_len, moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(q_len >= 0 && kv_len >= 0);
    return 2 * (size_t)q_len * (size_t)kv_len * sizeof(float);
}

/* Dimensions and options shared by forward and backward. */
struct attn_shape {
    int q_len, kv_len, hq, hkv, dqk, dv, q_pos0, k_pos0;
    float scale;
    bool causal;
};

/* Element offset of the (b, h) slice of a [B, T, H, D] tensor, and its row stride H*D. */
static size_t head_offset(int b, int h, int len, int heads, int dim)
{
    return ((size_t)b * (size_t)len * (size_t)heads + (size_t)h) * (size_t)dim;
}

/* Number of keys query i may see: a prefix of the K/V range. */
static __device__ int visible_keys(int i, int kv_len, int q_pos0, int k_pos0, bool causal)
{
    if (!causal) {
        return kv_len;
    }
    long n = (long)q_pos0 + i - k_pos0 + 1;
    return n < 0 ? 0 : (n > kv_len ? kv_len : (int)n);
}

/*
 * Row i of p[Tq, Tk] (scores in, probabilities out): with lse_out (forward) compute and store the
 * row's log-sum-exp; else read lse_in. Masked keys get 0.
 */
static __global__ void
softmax_rows_kernel(float *p, float *lse_out, const float *lse_in, struct attn_shape s)
{
    __shared__ float fshared[32];
    __shared__ double dshared[32];
    for (int i = blockIdx.x; i < s.q_len; i += gridDim.x) {
        float *row = p + (size_t)i * (size_t)s.kv_len;
        int n = visible_keys(i, s.kv_len, s.q_pos0, s.k_pos0, s.causal);
        float lse;
        if (lse_out != NULL) {
            float max = -INFINITY;
            for (int j = threadIdx.x; j < n; j += blockDim.x) {
                max = fmaxf(max, row[j]);
            }
            max = moe_block_max(max, fshared);
            double sum = 0.0;
            for (int j = threadIdx.x; j < n; j += blockDim.x) {
                sum += (double)expf(row[j] - max);
            }
            sum = moe_block_sum(sum, dshared);
            lse = n > 0 ? max + (float)log(sum) : -INFINITY;
            if (threadIdx.x == 0) {
                lse_out[i] = lse;
            }
        } else {
            lse = lse_in[i];
        }
        for (int j = threadIdx.x; j < s.kv_len; j += blockDim.x) {
            row[j] = j < n ? expf(row[j] - lse) : 0.0f;
        }
    }
}

/* dS = P (dP - D) in place in dp, D_i = dot(dO_i, O_i) in double. */
static __global__ void softmax_grad_kernel(float *dp,
                                           const float *p,
                                           const float *dout,
                                           const float *out,
                                           size_t o_offset,
                                           int o_ld,
                                           struct attn_shape s)
{
    __shared__ double shared[32];
    for (int i = blockIdx.x; i < s.q_len; i += gridDim.x) {
        const float *go = dout + o_offset + (size_t)i * (size_t)o_ld;
        const float *o = out + o_offset + (size_t)i * (size_t)o_ld;
        double d = 0.0;
        for (int c = threadIdx.x; c < s.dv; c += blockDim.x) {
            d += (double)go[c] * (double)o[c];
        }
        d = moe_block_sum(d, shared);
        float df = (float)d;
        float *row = dp + (size_t)i * (size_t)s.kv_len;
        const float *prow = p + (size_t)i * (size_t)s.kv_len;
        for (int j = threadIdx.x; j < s.kv_len; j += blockDim.x) {
            row[j] = prow[j] * (row[j] - df);
        }
    }
}

static unsigned row_grid(int rows)
{
    return (unsigned)(rows < 1 ? 1 : (rows > MOE_K_CUDA_MAX_BLOCKS ? MOE_K_CUDA_MAX_BLOCKS : rows));
}

/* p = softmax(scale q_h k_g^T) for one (b, h); lse saved (forward) or read (backward). */
static void probs(float *p,
                  float *lse_out,
                  const float *lse_in,
                  const float *q,
                  const float *k,
                  int b,
                  int h,
                  const struct attn_shape *s,
                  moe_k_ctx_t *ctx)
{
    int g = h / (s->hq / s->hkv);
    moe_k_cuda_gemm_rm(NULL, false, true, s->q_len, s->kv_len, s->dqk, s->scale,
                       q + head_offset(b, h, s->q_len, s->hq, s->dqk), s->hq * s->dqk,
                       k + head_offset(b, g, s->kv_len, s->hkv, s->dqk), s->hkv * s->dqk, 0.0f, p,
                       s->kv_len, ctx);
    softmax_rows_kernel<<<row_grid(s->q_len), MOE_K_CUDA_THREADS, 0, moe_k_cuda_stream(ctx)>>>(
        p, lse_out, lse_in, *s);
    MOE_CHECK_LAUNCH();
}

extern "C" void moe_k_cuda_attention_fwd(float *out,
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
    MOE_ASSERT(batch >= 0 && q_len > 0 && kv_len > 0 && qk_dim > 0 && v_dim > 0);
    MOE_ASSERT(num_kv_heads > 0 && num_q_heads % num_kv_heads == 0);
    MOE_ASSERT(workspace_bytes >= moe_k_cuda_attention_workspace_bytes(q_len, kv_len, ctx));
    struct attn_shape s = {q_len, kv_len, num_q_heads, num_kv_heads, qk_dim,
                           v_dim, q_pos0, k_pos0,      scale,        causal};
    float *p = (float *)workspace;
    int group = num_q_heads / num_kv_heads;
    for (int b = 0; b < batch; b++) {
        for (int h = 0; h < num_q_heads; h++) {
            float *lse_bh = lse + ((size_t)b * (size_t)num_q_heads + (size_t)h) * (size_t)q_len;
            probs(p, lse_bh, NULL, q, k, b, h, &s, ctx);
            moe_k_cuda_gemm_rm(
                NULL, false, false, q_len, v_dim, kv_len, 1.0f, p, kv_len,
                v + head_offset(b, h / group, kv_len, num_kv_heads, v_dim), num_kv_heads * v_dim,
                0.0f, out + head_offset(b, h, q_len, num_q_heads, v_dim), num_q_heads * v_dim, ctx);
        }
    }
}

extern "C" void moe_k_cuda_attention_bwd(float *dq,
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
    MOE_ASSERT(batch >= 0 && q_len > 0 && kv_len > 0 && qk_dim > 0 && v_dim > 0);
    MOE_ASSERT(num_kv_heads > 0 && num_q_heads % num_kv_heads == 0);
    MOE_ASSERT(workspace_bytes >= moe_k_cuda_attention_workspace_bytes(q_len, kv_len, ctx));
    struct attn_shape s = {q_len, kv_len, num_q_heads, num_kv_heads, qk_dim,
                           v_dim, q_pos0, k_pos0,      scale,        causal};
    cudaStream_t stream = moe_k_cuda_stream(ctx);
    size_t kv_rows = (size_t)batch * (size_t)kv_len * (size_t)num_kv_heads;
    if (!accumulate_dkv && kv_rows > 0) {
        MOE_CHECK_CUDA(cudaMemsetAsync(dk, 0, kv_rows * (size_t)qk_dim * sizeof(float), stream));
        MOE_CHECK_CUDA(cudaMemsetAsync(dv, 0, kv_rows * (size_t)v_dim * sizeof(float), stream));
    }
    float *p = (float *)workspace;
    float *dp = p + (size_t)q_len * (size_t)kv_len;
    int group = num_q_heads / num_kv_heads;
    int q_ld = num_q_heads * qk_dim;
    int o_ld = num_q_heads * v_dim;
    int k_ld = num_kv_heads * qk_dim;
    int v_ld = num_kv_heads * v_dim;
    for (int b = 0; b < batch; b++) {
        for (int h = 0; h < num_q_heads; h++) {
            const float *lse_bh =
                lse + ((size_t)b * (size_t)num_q_heads + (size_t)h) * (size_t)q_len;
            size_t q_off = head_offset(b, h, q_len, num_q_heads, qk_dim);
            size_t o_off = head_offset(b, h, q_len, num_q_heads, v_dim);
            size_t k_off = head_offset(b, h / group, kv_len, num_kv_heads, qk_dim);
            size_t v_off = head_offset(b, h / group, kv_len, num_kv_heads, v_dim);
            probs(p, NULL, lse_bh, q, k, b, h, &s, ctx);
            moe_k_cuda_gemm_rm(NULL, false, true, q_len, kv_len, v_dim, 1.0f, dout + o_off, o_ld,
                               v + v_off, v_ld, 0.0f, dp, kv_len, ctx);
            softmax_grad_kernel<<<row_grid(q_len), MOE_K_CUDA_THREADS, 0, stream>>>(
                dp, p, dout, out, o_off, o_ld, s);
            MOE_CHECK_LAUNCH();
            moe_k_cuda_gemm_rm(NULL, false, false, q_len, qk_dim, kv_len, scale, dp, kv_len,
                               k + k_off, k_ld, 0.0f, dq + q_off, q_ld, ctx);
            moe_k_cuda_gemm_rm(NULL, true, false, kv_len, qk_dim, q_len, scale, dp, kv_len,
                               q + q_off, q_ld, 1.0f, dk + k_off, k_ld, ctx);
            moe_k_cuda_gemm_rm(NULL, true, false, kv_len, v_dim, q_len, 1.0f, p, kv_len,
                               dout + o_off, o_ld, 1.0f, dv + v_off, v_ld, ctx);
        }
    }
}
