/*
 * Scaled dot-product attention on the CPU with causal masking by global position, GQA and
 * different query/key and value head dims (MLA). Per (sequence, query head) it forms the score
 * matrix S = scale * Q K^T with one sgemm straight on the strided head slices (no copies), takes a
 * row softmax over the keys the query may see, saves the row log-sum-exp, and multiplies by V.
 * Backward recomputes P = exp(S - lse) from the saved statistics (as FlashAttention does) and runs
 * four more sgemms: dP = dO V^T, dS = P (dP - rowsum(dO O)), dQ = scale dS K, dK += scale dS^T Q,
 * dV += P^T dO. O(Tq*Tk) memory per head, in the caller's workspace; no tiling or online softmax.
 * Query heads of one GQA group accumulate into their shared dK/dV in head order (deterministic).
 */
#include "kernels/cpu/cpu.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

size_t moe_k_cpu_attention_workspace_bytes(int q_len, int kv_len, moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(q_len >= 0 && kv_len >= 0);
    return 2 * (size_t)q_len * (size_t)kv_len * sizeof(float);
}

/* Strided view of one (sequence, head) slice: rows of `dim` floats, `ld` apart. */
struct head_view {
    size_t offset; /* elements from the tensor start */
    int ld;        /* row stride in elements */
};

static struct head_view head_slice(int b, int h, int len, int heads, int dim)
{
    struct head_view v = {((size_t)b * (size_t)len * (size_t)heads + (size_t)h) * (size_t)dim,
                          heads * dim};
    return v;
}

/* Number of keys query i may see: a prefix of the K/V range. */
static int visible_keys(int i, int kv_len, int q_pos0, int k_pos0, bool causal)
{
    if (!causal) {
        return kv_len;
    }
    long n = (long)q_pos0 + i - k_pos0 + 1;
    return n < 0 ? 0 : (n > kv_len ? kv_len : (int)n);
}

/* Dimensions and options shared by forward and backward. */
struct attn_shape {
    int q_len, kv_len, hq, hkv, dqk, dv, q_pos0, k_pos0;
    float scale;
    bool causal;
};

/* p[Tq, Tk] = scale * Q K^T for one (b, h), then P = exp(S - lse) on visible keys, 0 elsewhere.
 * When lse_out is set (forward) it also computes and stores the row log-sum-exp. */
static void probs(float *p,
                  float *lse_out,
                  const float *lse_in,
                  const float *q,
                  const float *k,
                  int b,
                  int h,
                  const struct attn_shape *s)
{
    struct head_view qv = head_slice(b, h, s->q_len, s->hq, s->dqk);
    struct head_view kv = head_slice(b, h / (s->hq / s->hkv), s->kv_len, s->hkv, s->dqk);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s->q_len, s->kv_len, s->dqk, s->scale,
                q + qv.offset, qv.ld, k + kv.offset, kv.ld, 0.0f, p, s->kv_len);
    for (int i = 0; i < s->q_len; i++) {
        float *row = p + (size_t)i * (size_t)s->kv_len;
        int n = visible_keys(i, s->kv_len, s->q_pos0, s->k_pos0, s->causal);
        float lse = -INFINITY;
        if (lse_out != NULL && n > 0) {
            float max = row[0];
            for (int j = 1; j < n; j++) {
                max = row[j] > max ? row[j] : max;
            }
            double sum = 0.0;
            for (int j = 0; j < n; j++) {
                sum += (double)expf(row[j] - max);
            }
            lse = max + (float)log(sum);
        } else if (lse_out == NULL) {
            lse = lse_in[i];
        }
        if (lse_out != NULL) {
            lse_out[i] = lse;
        }
        for (int j = 0; j < n; j++) {
            row[j] = expf(row[j] - lse);
        }
        for (int j = n; j < s->kv_len; j++) {
            row[j] = 0.0f;
        }
    }
}

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
                             moe_k_ctx_t *ctx)
{
    MOE_ASSERT(batch >= 0 && q_len > 0 && kv_len > 0 && qk_dim > 0 && v_dim > 0);
    MOE_ASSERT(num_kv_heads > 0 && num_q_heads % num_kv_heads == 0);
    MOE_ASSERT(workspace_bytes >= moe_k_cpu_attention_workspace_bytes(q_len, kv_len, ctx));
    struct attn_shape s = {q_len, kv_len, num_q_heads, num_kv_heads, qk_dim,
                           v_dim, q_pos0, k_pos0,      scale,        causal};
    float *p = workspace;
    for (int b = 0; b < batch; b++) {
        for (int h = 0; h < num_q_heads; h++) {
            float *lse_bh = lse + ((size_t)b * (size_t)num_q_heads + (size_t)h) * (size_t)q_len;
            probs(p, lse_bh, NULL, q, k, b, h, &s);
            struct head_view vv =
                head_slice(b, h / (num_q_heads / num_kv_heads), kv_len, num_kv_heads, v_dim);
            struct head_view ov = head_slice(b, h, q_len, num_q_heads, v_dim);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, q_len, v_dim, kv_len, 1.0f, p,
                        kv_len, v + vv.offset, vv.ld, 0.0f, out + ov.offset, ov.ld);
        }
    }
}

/* dS = P * (dP - D) in place in dp, with D_i = dot(dO_i, O_i). */
static void softmax_grad(float *dp,
                         const float *p,
                         const float *dout,
                         const float *out,
                         struct head_view ov,
                         int q_len,
                         int kv_len,
                         int v_dim)
{
    for (int i = 0; i < q_len; i++) {
        const float *go = dout + ov.offset + (size_t)i * (size_t)ov.ld;
        const float *o = out + ov.offset + (size_t)i * (size_t)ov.ld;
        double d = 0.0;
        for (int c = 0; c < v_dim; c++) {
            d += (double)go[c] * (double)o[c];
        }
        float *row = dp + (size_t)i * (size_t)kv_len;
        const float *prow = p + (size_t)i * (size_t)kv_len;
        for (int j = 0; j < kv_len; j++) {
            row[j] = prow[j] * (row[j] - (float)d);
        }
    }
}

static void zero_rows(float *x, size_t n)
{
    if (n > 0) {
        memset(x, 0, n * sizeof(float));
    }
}

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
                             moe_k_ctx_t *ctx)
{
    MOE_ASSERT(batch >= 0 && q_len > 0 && kv_len > 0 && qk_dim > 0 && v_dim > 0);
    MOE_ASSERT(num_kv_heads > 0 && num_q_heads % num_kv_heads == 0);
    MOE_ASSERT(workspace_bytes >= moe_k_cpu_attention_workspace_bytes(q_len, kv_len, ctx));
    struct attn_shape s = {q_len, kv_len, num_q_heads, num_kv_heads, qk_dim,
                           v_dim, q_pos0, k_pos0,      scale,        causal};
    size_t kv_rows = (size_t)batch * (size_t)kv_len * (size_t)num_kv_heads;
    if (!accumulate_dkv) {
        zero_rows(dk, kv_rows * (size_t)qk_dim);
        zero_rows(dv, kv_rows * (size_t)v_dim);
    }
    float *p = workspace;
    float *dp = p + (size_t)q_len * (size_t)kv_len;
    int group = num_q_heads / num_kv_heads;
    for (int b = 0; b < batch; b++) {
        for (int h = 0; h < num_q_heads; h++) {
            const float *lse_bh =
                lse + ((size_t)b * (size_t)num_q_heads + (size_t)h) * (size_t)q_len;
            struct head_view qv = head_slice(b, h, q_len, num_q_heads, qk_dim);
            struct head_view ov = head_slice(b, h, q_len, num_q_heads, v_dim);
            struct head_view kv = head_slice(b, h / group, kv_len, num_kv_heads, qk_dim);
            struct head_view vv = head_slice(b, h / group, kv_len, num_kv_heads, v_dim);
            probs(p, NULL, lse_bh, q, k, b, h, &s);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, q_len, kv_len, v_dim, 1.0f,
                        dout + ov.offset, ov.ld, v + vv.offset, vv.ld, 0.0f, dp, kv_len);
            softmax_grad(dp, p, dout, out, ov, q_len, kv_len, v_dim);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, q_len, qk_dim, kv_len, scale, dp,
                        kv_len, k + kv.offset, kv.ld, 0.0f, dq + qv.offset, qv.ld);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kv_len, qk_dim, q_len, scale, dp,
                        kv_len, q + qv.offset, qv.ld, 1.0f, dk + kv.offset, kv.ld);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kv_len, v_dim, q_len, 1.0f, p,
                        kv_len, dout + ov.offset, ov.ld, 1.0f, dv + vv.offset, vv.ld);
        }
    }
}
