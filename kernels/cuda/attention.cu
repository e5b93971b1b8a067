/*
 * Scaled dot-product attention on the GPU, the straightforward twin of kernels/cpu/attention.c,
 * batched over heads. The query heads that share key/value head g in a GQA group are h = g G + j
 * (G = Hq / Hkv); for each j in turn, one batched cuBLAS GEMM forms S = scale Q K^T for every
 * (sequence, key/value head) item at once, straight on the strided head slices (no copies:
 * pointer arrays filled on the device), one kernel takes the masked softmax of all their rows and
 * saves each row's log-sum-exp (sum of exponentials in double, as the CPU), and a second batched
 * GEMM multiplies by V. Backward recomputes P from the saved log-sum-exp and runs the CPU's four
 * products the same way. One batch never holds two query heads of one group, so the dK/dV
 * accumulation has no races, and its order (j ascending per key/value head) is the per-head
 * loop's: results are deterministic. Items per batch are capped so that the workspace (P and dP
 * of every item) stays under ATTN_WS_CAP_BYTES.
 *
 * Before the batching (per-head GEMMs and one softmax launch per head): 1 792 GEMMs of ~10 us and
 * 768 softmax launches per gpu-moe micro-batch on an H200, ~31 ms of 85 ms of GPU time.
 *
 * Sliding windows and attention sinks (GPT-OSS; attention_window_sink_fwd/bwd) take the same
 * path: the softmax kernels mask keys outside the window as they mask future keys, a sink adds
 * exp(sink_h) to its row's denominator and no value, and its gradient, -sum_i P_sink,i
 * rowsum(dO O)_i, is summed per item in a fixed tree and added to d_sinks in item order (the
 * CPU's order of sequences per head), so it too is deterministic. The window does not shorten the
 * products here (the CPU tiles its queries to O(Tq * window) work): every item still forms the
 * full [Tq, Tk] block, correct and simple rather than fast for long sequences.
 *
 * Not a fused (flash) kernel: O(Tq*Tk) workspace per item. GEMMs follow the context's math mode;
 * in FP32 mode the result equals the CPU's up to summation order and expf's last-ulp differences.
 */
#include "kernels/cuda/cuda_common.cuh"

#include <math.h>

#define ATTN_WS_CAP_BYTES ((size_t)256 << 20)
#define ATTN_MAX_ITEMS    64 /* (sequence, key/value head) items per batched GEMM */

/* Items per batch for these lengths: as many as fit the workspace cap, at least one. */
static int attn_items(int q_len, int kv_len)
{
    size_t per = 2 * (size_t)q_len * (size_t)kv_len * sizeof(float); /* P and dP */
    size_t n = per > 0 ? ATTN_WS_CAP_BYTES / per : ATTN_MAX_ITEMS;
    return n < 1 ? 1 : (n > ATTN_MAX_ITEMS ? ATTN_MAX_ITEMS : (int)n);
}

extern "C" size_t moe_k_cuda_attention_workspace_bytes(int q_len, int kv_len, moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(q_len >= 0 && kv_len >= 0);
    return (size_t)attn_items(q_len, kv_len) * 2 * (size_t)q_len * (size_t)kv_len * sizeof(float);
}

/* Dimensions and options shared by forward and backward, and the batch being processed: items
 * t in [t0, t0 + n) of the (sequence b = t / Hkv, key/value head g = t % Hkv) list, query heads
 * h = g G + j. */
struct attn_shape {
    int q_len, kv_len, hq, hkv, dqk, dv, q_pos0, k_pos0;
    float scale;
    bool causal;
    int window;         /* causal sliding window (0: none) */
    const float *sinks; /* [Hq] sink logits, or NULL */
    int j, t0, n;       /* the batch */
};

static __device__ int clamp_keys(long x, int kv_len)
{
    return x < 0 ? 0 : (x > kv_len ? kv_len : (int)x);
}

/* Keys [*lo, *hi) of the K/V range that query i may see (kernels/cpu/attention.c's visible()). */
static __device__ void visible_keys(const struct attn_shape &s, int i, int *lo, int *hi)
{
    if (!s.causal) {
        *lo = 0;
        *hi = s.kv_len;
        return;
    }
    long p = (long)s.q_pos0 + i - s.k_pos0; /* the query's position in key coordinates */
    *hi = clamp_keys(p + 1, s.kv_len);
    *lo = s.window > 0 ? clamp_keys(p - s.window + 1, s.kv_len) : 0;
    if (*lo > *hi) {
        *lo = *hi;
    }
}

/* Query head and its row-of-lse offset of batch item u (0 <= u < s.n). */
static __device__ __host__ int item_b(const struct attn_shape &s, int u)
{
    return (s.t0 + u) / s.hkv;
}

static __device__ __host__ int item_h(const struct attn_shape &s, int u)
{
    return ((s.t0 + u) % s.hkv) * (s.hq / s.hkv) + s.j;
}

/*
 * Row r of the batch's p[n][Tq][Tk] (scores in, probabilities out), item u = r / Tq, query
 * i = r % Tq: with lse_out (forward) compute and store the row's log-sum-exp; else read lse_in
 * (both [B, Hq, Tq]). Masked keys get 0.
 */
static __global__ void
softmax_rows_kernel(float *p, float *lse_out, const float *lse_in, struct attn_shape s)
{
    __shared__ float fshared[32];
    __shared__ double dshared[32];
    int rows = s.n * s.q_len;
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        int u = r / s.q_len, i = r % s.q_len;
        size_t lse_i =
            ((size_t)item_b(s, u) * (size_t)s.hq + (size_t)item_h(s, u)) * (size_t)s.q_len +
            (size_t)i;
        float *row = p + (size_t)r * (size_t)s.kv_len;
        int lo = 0, hi = 0;
        visible_keys(s, i, &lo, &hi);
        const float *sink = s.sinks != NULL ? s.sinks + item_h(s, u) : NULL;
        float lse;
        if (lse_out != NULL) {
            float max = -INFINITY;
            for (int jj = lo + (int)threadIdx.x; jj < hi; jj += blockDim.x) {
                max = fmaxf(max, row[jj]);
            }
            max = moe_block_max(max, fshared);
            if (sink != NULL) {
                max = fmaxf(max, *sink);
            }
            double sum = 0.0;
            for (int jj = lo + (int)threadIdx.x; jj < hi; jj += blockDim.x) {
                sum += (double)expf(row[jj] - max);
            }
            sum = moe_block_sum(sum, dshared);
            if (hi == lo) { /* no key: out = 0, lse = the sink (-Inf without one) */
                lse = sink != NULL ? *sink : -INFINITY;
            } else {
                if (sink != NULL) {
                    sum += (double)expf(*sink - max);
                }
                lse = max + (float)log(sum);
            }
            if (threadIdx.x == 0) {
                lse_out[lse_i] = lse;
            }
        } else {
            lse = lse_in[lse_i];
        }
        for (int jj = threadIdx.x; jj < s.kv_len; jj += blockDim.x) {
            row[jj] = jj >= lo && jj < hi ? expf(row[jj] - lse) : 0.0f;
        }
    }
}

/* dS = P (dP - D) in place in dp (rows as above), D_i = dot(dO_i, O_i) in double. */
static __global__ void softmax_grad_kernel(
    float *dp, const float *p, const float *dout, const float *out, struct attn_shape s)
{
    __shared__ double shared[32];
    int rows = s.n * s.q_len;
    size_t o_ld = (size_t)s.hq * (size_t)s.dv;
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        int u = r / s.q_len, i = r % s.q_len;
        size_t o_off = ((size_t)item_b(s, u) * (size_t)s.q_len + (size_t)i) * o_ld +
                       (size_t)item_h(s, u) * (size_t)s.dv;
        const float *go = dout + o_off;
        const float *o = out + o_off;
        double d = 0.0;
        for (int c = threadIdx.x; c < s.dv; c += blockDim.x) {
            d += (double)go[c] * (double)o[c];
        }
        d = moe_block_sum(d, shared);
        float df = (float)d;
        float *row = dp + (size_t)r * (size_t)s.kv_len;
        const float *prow = p + (size_t)r * (size_t)s.kv_len;
        for (int jj = threadIdx.x; jj < s.kv_len; jj += blockDim.x) {
            row[jj] = prow[jj] * (row[jj] - df);
        }
    }
}

/*
 * The sinks' gradient of the batch: block u sums -exp(sink_h - lse_i) D_i over its item's rows
 * (D_i = dot(dO_i, O_i) in double, as softmax_grad_kernel) into partial[u]; then
 * sink_grad_add_kernel adds the partials to d_sinks in item order.
 */
static __global__ void sink_grad_kernel(
    double *partial, const float *dout, const float *out, const float *lse, struct attn_shape s)
{
    __shared__ double shared[32];
    int u = blockIdx.x;
    int b = item_b(s, u), h = item_h(s, u);
    float sink = s.sinks[h];
    size_t o_ld = (size_t)s.hq * (size_t)s.dv;
    double acc = 0.0;
    for (int i = threadIdx.x; i < s.q_len; i += blockDim.x) {
        size_t o_off = ((size_t)b * (size_t)s.q_len + (size_t)i) * o_ld + (size_t)h * (size_t)s.dv;
        double d = 0.0;
        for (int c = 0; c < s.dv; c++) {
            d += (double)dout[o_off + c] * (double)out[o_off + c];
        }
        float l = lse[((size_t)b * (size_t)s.hq + (size_t)h) * (size_t)s.q_len + (size_t)i];
        acc -= exp((double)sink - (double)l) * d;
    }
    acc = moe_block_sum(acc, shared);
    if (threadIdx.x == 0) {
        partial[u] = acc;
    }
}

static __global__ void
sink_grad_add_kernel(float *d_sinks, const double *partial, struct attn_shape s)
{
    for (int u = 0; u < s.n; u++) {
        d_sinks[item_h(s, u)] += (float)partial[u];
    }
}

static unsigned row_grid(int rows)
{
    return (unsigned)(rows < 1 ? 1 : (rows > MOE_K_CUDA_MAX_BLOCKS ? MOE_K_CUDA_MAX_BLOCKS : rows));
}

/*
 * Where operand X of batch item u starts: base + b * per_b + g * per_g + u * per_u, for item
 * t = t0 + u, b = t / Hkv, g = t % Hkv. Query-head tensors fold j into base and use per_g =
 * G * dim; key/value tensors per_g = dim; workspace rows per_b = per_g = 0, per_u = Tq * Tk.
 */
struct operand {
    const float *base;
    size_t per_b, per_g, per_u;
};

/* The three pointer arrays (A, B, C) of one batched GEMM. */
struct operands {
    struct operand x[3];
};

static __global__ void
fill_pointers_kernel(const float **ptrs, struct operands o, int t0, int n, int hkv)
{
    int u = blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= n) {
        return;
    }
    int t = t0 + u;
    size_t b = (size_t)(t / hkv), g = (size_t)(t % hkv);
    for (int a = 0; a < 3; a++) {
        const struct operand *x = &o.x[a];
        ptrs[a * n + u] = x->base + b * x->per_b + g * x->per_g + (size_t)u * x->per_u;
    }
}

/*
 * Row-major c_u[m, n] = alpha op(a_u) op(b_u) + beta c_u for every item u of the batch, a/b/c
 * located by o, in one cublasGemmBatchedEx (column-major view: C^T = op(B)^T op(A)^T). `slot`
 * picks this GEMM's pointer arrays in the context's scratch (each GEMM of an attention call its
 * own, so a fill never overwrites arrays a queued GEMM still reads).
 */
static void batched_gemm(int slot,
                         const struct operands *o,
                         const struct attn_shape *s,
                         bool trans_a,
                         bool trans_b,
                         int m,
                         int n,
                         int k,
                         float alpha,
                         int lda,
                         int ldb,
                         float beta,
                         int ldc,
                         moe_k_ctx_t *ctx)
{
    struct moe_k_cuda_state *st = moe_k_cuda_state_of(ctx);
    static_assert(6 * 3 * ATTN_MAX_ITEMS * sizeof(void *) <= MOE_K_CUDA_SCRATCH_BYTES,
                  "pointer arrays fit the scratch");
    const float **ptrs = (const float **)st->scratch + (size_t)slot * 3 * ATTN_MAX_ITEMS;
    fill_pointers_kernel<<<1, ATTN_MAX_ITEMS, 0, st->stream>>>(ptrs, *o, s->t0, s->n, s->hkv);
    MOE_CHECK_LAUNCH();
    const void *const *a_arr = (const void *const *)ptrs;
    const void *const *b_arr = (const void *const *)(ptrs + s->n);
    void *const *c_arr = (void *const *)(ptrs + 2 * s->n);
    MOE_CHECK_CUBLAS(cublasGemmBatchedEx(
        st->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
        &alpha, b_arr, CUDA_R_32F, ldb, a_arr, CUDA_R_32F, lda, &beta, c_arr, CUDA_R_32F, ldc, s->n,
        moe_k_cuda_compute_type(ctx), CUBLAS_GEMM_DEFAULT));
}

/* Operand helpers: a [B, T, H, D] tensor's head slices (query heads: h = g G + j; key/value
 * heads: g), and the workspace's per-item [Tq, Tk] blocks. */
static struct operand q_heads(const float *x, const struct attn_shape *s, int len, int dim)
{
    int G = s->hq / s->hkv;
    struct operand o = {x + (size_t)s->j * (size_t)dim, (size_t)len * (size_t)s->hq * (size_t)dim,
                        (size_t)G * (size_t)dim, 0};
    return o;
}

static struct operand kv_heads(const float *x, const struct attn_shape *s, int len, int dim)
{
    struct operand o = {x, (size_t)len * (size_t)s->hkv * (size_t)dim, (size_t)dim, 0};
    return o;
}

static struct operand ws_blocks(const float *p, const struct attn_shape *s)
{
    struct operand o = {p, 0, 0, (size_t)s->q_len * (size_t)s->kv_len};
    return o;
}

/* p = softmax(scale q k^T) for the batch's items; lse saved (forward) or read (backward). */
static void probs(float *p,
                  float *lse_out,
                  const float *lse_in,
                  const float *q,
                  const float *k,
                  const struct attn_shape *s,
                  moe_k_ctx_t *ctx)
{
    struct operands o = {
        {q_heads(q, s, s->q_len, s->dqk), kv_heads(k, s, s->kv_len, s->dqk), ws_blocks(p, s)}};
    batched_gemm(0, &o, s, false, true, s->q_len, s->kv_len, s->dqk, s->scale, s->hq * s->dqk,
                 s->hkv * s->dqk, 0.0f, s->kv_len, ctx);
    softmax_rows_kernel<<<row_grid(s->n * s->q_len), MOE_K_CUDA_THREADS, 0,
                          moe_k_cuda_stream(ctx)>>>(p, lse_out, lse_in, *s);
    MOE_CHECK_LAUNCH();
}

/* Forward of every item: batches of per items for each query head j of the GQA groups. */
static void attention_fwd_impl(float *out,
                               float *lse,
                               const float *q,
                               const float *k,
                               const float *v,
                               int batch,
                               struct attn_shape s,
                               void *workspace,
                               size_t workspace_bytes,
                               moe_k_ctx_t *ctx)
{
    MOE_ASSERT(batch >= 0 && s.q_len > 0 && s.kv_len > 0 && s.dqk > 0 && s.dv > 0);
    MOE_ASSERT(s.hkv > 0 && s.hq % s.hkv == 0 && s.window >= 0);
    MOE_ASSERT(workspace_bytes >= moe_k_cuda_attention_workspace_bytes(s.q_len, s.kv_len, ctx));
    float *p = (float *)workspace;
    int items = batch * s.hkv, per = attn_items(s.q_len, s.kv_len);
    for (s.j = 0; s.j < s.hq / s.hkv; s.j++) {
        for (s.t0 = 0; s.t0 < items; s.t0 += per) {
            s.n = items - s.t0 < per ? items - s.t0 : per;
            probs(p, lse, NULL, q, k, &s, ctx);
            struct operands o = {{ws_blocks(p, &s), kv_heads(v, &s, s.kv_len, s.dv),
                                  q_heads(out, &s, s.q_len, s.dv)}};
            batched_gemm(1, &o, &s, false, false, s.q_len, s.dv, s.kv_len, 1.0f, s.kv_len,
                         s.hkv * s.dv, 0.0f, s.hq * s.dv, ctx);
        }
    }
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
    struct attn_shape s = {q_len, kv_len, num_q_heads, num_kv_heads, qk_dim, v_dim, q_pos0, k_pos0,
                           scale, causal, 0,           NULL,         0,      0,     0};
    attention_fwd_impl(out, lse, q, k, v, batch, s, workspace, workspace_bytes, ctx);
}

extern "C" void moe_k_cuda_attention_window_sink_fwd(float *out,
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
    struct attn_shape s = {q_len, kv_len, num_q_heads, num_kv_heads, qk_dim, v_dim, q_pos0, k_pos0,
                           scale, true,   window,      sinks,        0,      0,     0};
    attention_fwd_impl(out, lse, q, k, v, batch, s, workspace, workspace_bytes, ctx);
}

/* Tensors of one backward call. */
struct attn_grads {
    float *dq, *dk, *dv, *d_sinks;
    const float *dout, *q, *k, *v, *out, *lse;
};

static void attention_bwd_impl(const struct attn_grads *g,
                               int batch,
                               struct attn_shape s,
                               bool accumulate_dkv,
                               void *workspace,
                               size_t workspace_bytes,
                               moe_k_ctx_t *ctx)
{
    MOE_ASSERT(batch >= 0 && s.q_len > 0 && s.kv_len > 0 && s.dqk > 0 && s.dv > 0);
    MOE_ASSERT(s.hkv > 0 && s.hq % s.hkv == 0 && s.window >= 0);
    MOE_ASSERT(workspace_bytes >= moe_k_cuda_attention_workspace_bytes(s.q_len, s.kv_len, ctx));
    MOE_ASSERT(s.sinks == NULL || g->d_sinks != NULL);
    struct moe_k_cuda_state *st = moe_k_cuda_state_of(ctx);
    cudaStream_t stream = st->stream;
    size_t kv_rows = (size_t)batch * (size_t)s.kv_len * (size_t)s.hkv;
    if (!accumulate_dkv && kv_rows > 0) {
        MOE_CHECK_CUDA(cudaMemsetAsync(g->dk, 0, kv_rows * (size_t)s.dqk * sizeof(float), stream));
        MOE_CHECK_CUDA(cudaMemsetAsync(g->dv, 0, kv_rows * (size_t)s.dv * sizeof(float), stream));
    }
    /* The sinks' per-item partials sit in the scratch after the six GEMMs' pointer arrays. */
    static_assert(6 * 3 * ATTN_MAX_ITEMS * sizeof(void *) + ATTN_MAX_ITEMS * sizeof(double) <=
                      MOE_K_CUDA_SCRATCH_BYTES,
                  "pointer arrays and sink partials fit the scratch");
    double *sink_partial =
        (double *)((char *)st->scratch + 6 * 3 * ATTN_MAX_ITEMS * sizeof(void *));
    int items = batch * s.hkv, per = attn_items(s.q_len, s.kv_len);
    float *p = (float *)workspace;
    float *dp = p + (size_t)per * (size_t)s.q_len * (size_t)s.kv_len;
    int q_ld = s.hq * s.dqk;
    int o_ld = s.hq * s.dv;
    int k_ld = s.hkv * s.dqk;
    int v_ld = s.hkv * s.dv;
    for (s.j = 0; s.j < s.hq / s.hkv; s.j++) {
        for (s.t0 = 0; s.t0 < items; s.t0 += per) {
            s.n = items - s.t0 < per ? items - s.t0 : per;
            probs(p, NULL, g->lse, g->q, g->k, &s, ctx);
            /* dP = dO V^T */
            struct operands o1 = {{q_heads(g->dout, &s, s.q_len, s.dv),
                                   kv_heads(g->v, &s, s.kv_len, s.dv), ws_blocks(dp, &s)}};
            batched_gemm(2, &o1, &s, false, true, s.q_len, s.kv_len, s.dv, 1.0f, o_ld, v_ld, 0.0f,
                         s.kv_len, ctx);
            softmax_grad_kernel<<<row_grid(s.n * s.q_len), MOE_K_CUDA_THREADS, 0, stream>>>(
                dp, p, g->dout, g->out, s);
            MOE_CHECK_LAUNCH();
            if (s.sinks != NULL) {
                sink_grad_kernel<<<(unsigned)s.n, MOE_K_CUDA_THREADS, 0, stream>>>(
                    sink_partial, g->dout, g->out, g->lse, s);
                MOE_CHECK_LAUNCH();
                sink_grad_add_kernel<<<1, 1, 0, stream>>>(g->d_sinks, sink_partial, s);
                MOE_CHECK_LAUNCH();
            }
            /* dQ = scale dS K */
            struct operands o2 = {{ws_blocks(dp, &s), kv_heads(g->k, &s, s.kv_len, s.dqk),
                                   q_heads(g->dq, &s, s.q_len, s.dqk)}};
            batched_gemm(3, &o2, &s, false, false, s.q_len, s.dqk, s.kv_len, s.scale, s.kv_len,
                         k_ld, 0.0f, q_ld, ctx);
            /* dK += scale dS^T Q */
            struct operands o3 = {{ws_blocks(dp, &s), q_heads(g->q, &s, s.q_len, s.dqk),
                                   kv_heads(g->dk, &s, s.kv_len, s.dqk)}};
            batched_gemm(4, &o3, &s, true, false, s.kv_len, s.dqk, s.q_len, s.scale, s.kv_len, q_ld,
                         1.0f, k_ld, ctx);
            /* dV += P^T dO */
            struct operands o4 = {{ws_blocks(p, &s), q_heads(g->dout, &s, s.q_len, s.dv),
                                   kv_heads(g->dv, &s, s.kv_len, s.dv)}};
            batched_gemm(5, &o4, &s, true, false, s.kv_len, s.dv, s.q_len, 1.0f, s.kv_len, o_ld,
                         1.0f, v_ld, ctx);
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
    struct attn_shape s = {q_len, kv_len, num_q_heads, num_kv_heads, qk_dim, v_dim, q_pos0, k_pos0,
                           scale, causal, 0,           NULL,         0,      0,     0};
    struct attn_grads g = {dq, dk, dv, NULL, dout, q, k, v, out, lse};
    attention_bwd_impl(&g, batch, s, accumulate_dkv, workspace, workspace_bytes, ctx);
}

extern "C" void moe_k_cuda_attention_window_sink_bwd(float *dq,
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
    struct attn_shape s = {q_len, kv_len, num_q_heads, num_kv_heads, qk_dim, v_dim, q_pos0, k_pos0,
                           scale, true,   window,      sinks,        0,      0,     0};
    struct attn_grads g = {dq, dk, dv, d_sinks, dout, q, k, v, out, lse};
    attention_bwd_impl(&g, batch, s, accumulate_dkv, workspace, workspace_bytes, ctx);
}
