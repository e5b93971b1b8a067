/*
 * Scaled dot-product attention on the CPU with causal masking by global position, GQA, different
 * query/key and value head dims (MLA), an optional causal sliding window and optional per-head
 * attention sinks (GPT-OSS). Per (sequence, query head) it forms scores S = scale * Q K^T with one
 * sgemm straight on the strided head slices (no copies), takes a row softmax over the keys the
 * query may see (a sink adds exp(sink_h) to the row's denominator and no value), saves the row
 * log-sum-exp, and multiplies by V. Backward recomputes P = exp(S - lse) from the saved statistics
 * (as FlashAttention does) and runs four more sgemms: dP = dO V^T, dS = P (dP - rowsum(dO O)),
 * dQ = scale dS K, dK += scale dS^T Q, dV += P^T dO; a sink's gradient is -sum_i P_sink,i
 * rowsum(dO O)_i. O(Tq*Tk) memory per head, in the caller's workspace; no online softmax.
 *
 * Windows: query i (global position q_pos0 + i) sees keys at positions (p - window, p]. With a
 * window shorter than the K/V range the queries are taken in tiles of `window` rows, each against
 * the key range its rows can see (at most 2 window - 1 keys), so the work is O(Tq * window);
 * without one, one tile covers every query (the full-attention code path, bit for bit). Query heads
 * of one GQA group accumulate into their shared dK/dV in head order (deterministic).
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

/* Dimensions and options shared by forward and backward. */
struct attn_shape {
    int q_len, kv_len, hq, hkv, dqk, dv, q_pos0, k_pos0;
    float scale;
    bool causal;
    int window;         /* 0: none */
    const float *sinks; /* [Hq] or NULL */
};

static int clampi(long x, int hi)
{
    return x < 0 ? 0 : (x > hi ? hi : (int)x);
}

/* Keys [*lo, *hi) of the K/V range that query i may see. */
static void visible(const struct attn_shape *s, int i, int *lo, int *hi)
{
    if (!s->causal) {
        *lo = 0;
        *hi = s->kv_len;
        return;
    }
    long p = (long)s->q_pos0 + i - s->k_pos0; /* the query's position in key coordinates */
    *hi = clampi(p + 1, s->kv_len);
    *lo = s->window > 0 ? clampi(p - s->window + 1, s->kv_len) : 0;
    if (*lo > *hi) {
        *lo = *hi;
    }
}

/* Query rows per tile: all of them, or `window` when a window cuts the K/V range. */
static int tile_rows(const struct attn_shape *s)
{
    return s->window > 0 && s->causal && s->window < s->kv_len ? s->window : s->q_len;
}

/* A tile: query rows [i0, i1) against keys [k_lo, k_hi). */
struct tile {
    int i0, i1, k_lo, k_hi;
};

static struct tile tile_at(const struct attn_shape *s, int i0)
{
    struct tile t;
    int rows = tile_rows(s);
    t.i0 = i0;
    t.i1 = i0 + rows < s->q_len ? i0 + rows : s->q_len;
    int lo = 0, hi = 0, lo2 = 0, hi2 = 0;
    visible(s, t.i0, &lo, &hi);
    visible(s, t.i1 - 1, &lo2, &hi2);
    t.k_lo = rows == s->q_len ? 0 : lo;
    t.k_hi = rows == s->q_len ? s->kv_len : hi2;
    if (t.k_hi < t.k_lo) {
        t.k_hi = t.k_lo;
    }
    return t;
}

/* Row log-sum-exp of the visible scores row[0, n) and the sink logit (sink NULL: none). */
static float row_lse(const float *row, int n, const float *sink)
{
    if (n == 0) {
        return sink != NULL ? *sink : -INFINITY;
    }
    float max = row[0];
    for (int j = 1; j < n; j++) {
        max = row[j] > max ? row[j] : max;
    }
    if (sink != NULL && *sink > max) {
        max = *sink;
    }
    double sum = 0.0;
    for (int j = 0; j < n; j++) {
        sum += (double)expf(row[j] - max);
    }
    if (sink != NULL) {
        sum += (double)expf(*sink - max);
    }
    return max + (float)log(sum);
}

/* p[rows, width] = scale * Q K^T for one (b, h) and tile t (width = k_hi - k_lo), then
 * P = exp(S - lse) on visible keys, 0 elsewhere. When lse_out is set (forward) it also computes
 * and stores the row log-sum-exp (sink included). */
static void probs(float *p,
                  float *lse_out,
                  const float *lse_in,
                  const float *q,
                  const float *k,
                  int b,
                  int h,
                  const struct attn_shape *s,
                  const struct tile *t)
{
    int width = t->k_hi - t->k_lo;
    int rows = t->i1 - t->i0;
    struct head_view qv = head_slice(b, h, s->q_len, s->hq, s->dqk);
    struct head_view kv = head_slice(b, h / (s->hq / s->hkv), s->kv_len, s->hkv, s->dqk);
    if (width > 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, width, s->dqk, s->scale,
                    q + qv.offset + (size_t)t->i0 * (size_t)qv.ld, qv.ld,
                    k + kv.offset + (size_t)t->k_lo * (size_t)kv.ld, kv.ld, 0.0f, p, width);
    }
    const float *sink = s->sinks != NULL ? s->sinks + h : NULL;
    for (int r = 0; r < rows; r++) {
        int i = t->i0 + r;
        float *row = p + (size_t)r * (size_t)width;
        int lo = 0, hi = 0;
        visible(s, i, &lo, &hi);
        lo -= t->k_lo;
        hi -= t->k_lo;
        float lse = lse_out != NULL ? row_lse(row + lo, hi - lo, sink) : lse_in[i];
        if (lse_out != NULL) {
            lse_out[i] = lse;
        }
        for (int j = 0; j < lo; j++) {
            row[j] = 0.0f;
        }
        for (int j = lo; j < hi; j++) {
            row[j] = expf(row[j] - lse);
        }
        for (int j = hi; j < width; j++) {
            row[j] = 0.0f;
        }
    }
}

static void attention_fwd_impl(float *out,
                               float *lse,
                               const float *q,
                               const float *k,
                               const float *v,
                               int batch,
                               const struct attn_shape *s,
                               void *workspace,
                               size_t workspace_bytes)
{
    MOE_ASSERT(batch >= 0 && s->q_len > 0 && s->kv_len > 0 && s->dqk > 0 && s->dv > 0);
    MOE_ASSERT(s->hkv > 0 && s->hq % s->hkv == 0 && s->window >= 0);
    MOE_ASSERT(workspace_bytes >= moe_k_cpu_attention_workspace_bytes(s->q_len, s->kv_len, NULL));
    float *p = workspace;
    for (int b = 0; b < batch; b++) {
        for (int h = 0; h < s->hq; h++) {
            float *lse_bh = lse + ((size_t)b * (size_t)s->hq + (size_t)h) * (size_t)s->q_len;
            struct head_view vv = head_slice(b, h / (s->hq / s->hkv), s->kv_len, s->hkv, s->dv);
            struct head_view ov = head_slice(b, h, s->q_len, s->hq, s->dv);
            for (int i0 = 0; i0 < s->q_len; i0 += tile_rows(s)) {
                struct tile t = tile_at(s, i0);
                int width = t.k_hi - t.k_lo;
                probs(p, lse_bh, NULL, q, k, b, h, s, &t);
                float *o = out + ov.offset + (size_t)t.i0 * (size_t)ov.ld;
                if (width == 0) {
                    for (int r = t.i0; r < t.i1; r++, o += ov.ld) {
                        memset(o, 0, (size_t)s->dv * sizeof(float));
                    }
                    continue;
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t.i1 - t.i0, s->dv, width,
                            1.0f, p, width, v + vv.offset + (size_t)t.k_lo * (size_t)vv.ld, vv.ld,
                            0.0f, o, ov.ld);
            }
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
    (void)ctx;
    struct attn_shape s = {q_len,  kv_len, num_q_heads, num_kv_heads, qk_dim, v_dim,
                           q_pos0, k_pos0, scale,       causal,       0,      NULL};
    attention_fwd_impl(out, lse, q, k, v, batch, &s, workspace, workspace_bytes);
}

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
                                         moe_k_ctx_t *ctx)
{
    (void)ctx;
    struct attn_shape s = {q_len,  kv_len, num_q_heads, num_kv_heads, qk_dim, v_dim,
                           q_pos0, k_pos0, scale,       true,         window, sinks};
    attention_fwd_impl(out, lse, q, k, v, batch, &s, workspace, workspace_bytes);
}

/* dS = P * (dP - D) in place in dp for the rows of tile t, with D_i = dot(dO_i, O_i); d_sink (if
 * not NULL) -= sum_i exp(sink - lse_i) D_i. */
static void softmax_grad(float *dp,
                         const float *p,
                         const float *dout,
                         const float *out,
                         const float *lse_bh,
                         struct head_view ov,
                         const struct tile *t,
                         int v_dim,
                         const float *sink,
                         double *d_sink)
{
    int width = t->k_hi - t->k_lo;
    for (int i = t->i0; i < t->i1; i++) {
        const float *go = dout + ov.offset + (size_t)i * (size_t)ov.ld;
        const float *o = out + ov.offset + (size_t)i * (size_t)ov.ld;
        double d = 0.0;
        for (int c = 0; c < v_dim; c++) {
            d += (double)go[c] * (double)o[c];
        }
        float *row = dp + (size_t)(i - t->i0) * (size_t)width;
        const float *prow = p + (size_t)(i - t->i0) * (size_t)width;
        for (int j = 0; j < width; j++) {
            row[j] = prow[j] * (row[j] - (float)d);
        }
        if (sink != NULL) {
            *d_sink -= exp((double)*sink - (double)lse_bh[i]) * d;
        }
    }
}

static void zero_rows(float *x, size_t n)
{
    if (n > 0) {
        memset(x, 0, n * sizeof(float));
    }
}

/* Tensors of one backward call. */
struct attn_grads {
    float *dq, *dk, *dv, *d_sinks;
    const float *dout, *q, *k, *v, *out, *lse;
};

static void attention_bwd_head(
    const struct attn_grads *g, int b, int h, const struct attn_shape *s, float *p, float *dp)
{
    int group = s->hq / s->hkv;
    const float *lse_bh = g->lse + ((size_t)b * (size_t)s->hq + (size_t)h) * (size_t)s->q_len;
    struct head_view qv = head_slice(b, h, s->q_len, s->hq, s->dqk);
    struct head_view ov = head_slice(b, h, s->q_len, s->hq, s->dv);
    struct head_view kv = head_slice(b, h / group, s->kv_len, s->hkv, s->dqk);
    struct head_view vv = head_slice(b, h / group, s->kv_len, s->hkv, s->dv);
    const float *sink = s->sinks != NULL ? s->sinks + h : NULL;
    double d_sink = 0.0;
    for (int i0 = 0; i0 < s->q_len; i0 += tile_rows(s)) {
        struct tile t = tile_at(s, i0);
        int rows = t.i1 - t.i0;
        int width = t.k_hi - t.k_lo;
        size_t qo = qv.offset + (size_t)t.i0 * (size_t)qv.ld;
        size_t oo = ov.offset + (size_t)t.i0 * (size_t)ov.ld;
        size_t ko = kv.offset + (size_t)t.k_lo * (size_t)kv.ld;
        size_t vo = vv.offset + (size_t)t.k_lo * (size_t)vv.ld;
        if (width == 0) {
            for (int r = 0; r < rows; r++) {
                zero_rows(g->dq + qo + (size_t)r * (size_t)qv.ld, (size_t)s->dqk);
            }
            continue;
        }
        probs(p, NULL, lse_bh, g->q, g->k, b, h, s, &t);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, width, s->dv, 1.0f, g->dout + oo,
                    ov.ld, g->v + vo, vv.ld, 0.0f, dp, width);
        softmax_grad(dp, p, g->dout, g->out, lse_bh, ov, &t, s->dv, sink, &d_sink);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, s->dqk, width, s->scale, dp,
                    width, g->k + ko, kv.ld, 0.0f, g->dq + qo, qv.ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, width, s->dqk, rows, s->scale, dp,
                    width, g->q + qo, qv.ld, 1.0f, g->dk + ko, kv.ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, width, s->dv, rows, 1.0f, p, width,
                    g->dout + oo, ov.ld, 1.0f, g->dv + vo, vv.ld);
    }
    if (sink != NULL) {
        g->d_sinks[h] += (float)d_sink;
    }
}

static void attention_bwd_impl(const struct attn_grads *g,
                               int batch,
                               const struct attn_shape *s,
                               bool accumulate_dkv,
                               void *workspace,
                               size_t workspace_bytes)
{
    MOE_ASSERT(batch >= 0 && s->q_len > 0 && s->kv_len > 0 && s->dqk > 0 && s->dv > 0);
    MOE_ASSERT(s->hkv > 0 && s->hq % s->hkv == 0 && s->window >= 0);
    MOE_ASSERT(workspace_bytes >= moe_k_cpu_attention_workspace_bytes(s->q_len, s->kv_len, NULL));
    MOE_ASSERT(s->sinks == NULL || g->d_sinks != NULL);
    size_t kv_rows = (size_t)batch * (size_t)s->kv_len * (size_t)s->hkv;
    if (!accumulate_dkv) {
        zero_rows(g->dk, kv_rows * (size_t)s->dqk);
        zero_rows(g->dv, kv_rows * (size_t)s->dv);
    }
    float *p = workspace;
    float *dp = p + (size_t)s->q_len * (size_t)s->kv_len;
    for (int b = 0; b < batch; b++) {
        for (int h = 0; h < s->hq; h++) {
            attention_bwd_head(g, b, h, s, p, dp);
        }
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
    (void)ctx;
    struct attn_shape s = {q_len,  kv_len, num_q_heads, num_kv_heads, qk_dim, v_dim,
                           q_pos0, k_pos0, scale,       causal,       0,      NULL};
    struct attn_grads g = {dq, dk, dv, NULL, dout, q, k, v, out, lse};
    attention_bwd_impl(&g, batch, &s, accumulate_dkv, workspace, workspace_bytes);
}

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
                                         moe_k_ctx_t *ctx)
{
    (void)ctx;
    struct attn_shape s = {q_len,  kv_len, num_q_heads, num_kv_heads, qk_dim, v_dim,
                           q_pos0, k_pos0, scale,       true,         window, sinks};
    struct attn_grads g = {dq, dk, dv, d_sinks, dout, q, k, v, out, lse};
    attention_bwd_impl(&g, batch, &s, accumulate_dkv, workspace, workspace_bytes);
}
