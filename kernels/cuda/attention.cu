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
    int j, t0, n; /* the batch */
};

/* Number of keys query i may see: a prefix of the K/V range. */
static __device__ int visible_keys(int i, int kv_len, int q_pos0, int k_pos0, bool causal)
{
    if (!causal) {
        return kv_len;
    }
    long n = (long)q_pos0 + i - k_pos0 + 1;
    return n < 0 ? 0 : (n > kv_len ? kv_len : (int)n);
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
        int n = visible_keys(i, s.kv_len, s.q_pos0, s.k_pos0, s.causal);
        float lse;
        if (lse_out != NULL) {
            float max = -INFINITY;
            for (int jj = threadIdx.x; jj < n; jj += blockDim.x) {
                max = fmaxf(max, row[jj]);
            }
            max = moe_block_max(max, fshared);
            double sum = 0.0;
            for (int jj = threadIdx.x; jj < n; jj += blockDim.x) {
                sum += (double)expf(row[jj] - max);
            }
            sum = moe_block_sum(sum, dshared);
            lse = n > 0 ? max + (float)log(sum) : -INFINITY;
            if (threadIdx.x == 0) {
                lse_out[lse_i] = lse;
            }
        } else {
            lse = lse_in[lse_i];
        }
        for (int jj = threadIdx.x; jj < s.kv_len; jj += blockDim.x) {
            row[jj] = jj < n ? expf(row[jj] - lse) : 0.0f;
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
    struct attn_shape s = {q_len,  kv_len, num_q_heads, num_kv_heads, qk_dim, v_dim,
                           q_pos0, k_pos0, scale,       causal,       0,      0,
                           0};
    float *p = (float *)workspace;
    int items = batch * num_kv_heads, per = attn_items(q_len, kv_len);
    for (s.j = 0; s.j < num_q_heads / num_kv_heads; s.j++) {
        for (s.t0 = 0; s.t0 < items; s.t0 += per) {
            s.n = items - s.t0 < per ? items - s.t0 : per;
            probs(p, lse, NULL, q, k, &s, ctx);
            struct operands o = {
                {ws_blocks(p, &s), kv_heads(v, &s, kv_len, v_dim), q_heads(out, &s, q_len, v_dim)}};
            batched_gemm(1, &o, &s, false, false, q_len, v_dim, kv_len, 1.0f, kv_len,
                         num_kv_heads * v_dim, 0.0f, num_q_heads * v_dim, ctx);
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
    struct attn_shape s = {q_len,  kv_len, num_q_heads, num_kv_heads, qk_dim, v_dim,
                           q_pos0, k_pos0, scale,       causal,       0,      0,
                           0};
    cudaStream_t stream = moe_k_cuda_stream(ctx);
    size_t kv_rows = (size_t)batch * (size_t)kv_len * (size_t)num_kv_heads;
    if (!accumulate_dkv && kv_rows > 0) {
        MOE_CHECK_CUDA(cudaMemsetAsync(dk, 0, kv_rows * (size_t)qk_dim * sizeof(float), stream));
        MOE_CHECK_CUDA(cudaMemsetAsync(dv, 0, kv_rows * (size_t)v_dim * sizeof(float), stream));
    }
    int items = batch * num_kv_heads, per = attn_items(q_len, kv_len);
    float *p = (float *)workspace;
    float *dp = p + (size_t)per * (size_t)q_len * (size_t)kv_len;
    int q_ld = num_q_heads * qk_dim;
    int o_ld = num_q_heads * v_dim;
    int k_ld = num_kv_heads * qk_dim;
    int v_ld = num_kv_heads * v_dim;
    for (s.j = 0; s.j < num_q_heads / num_kv_heads; s.j++) {
        for (s.t0 = 0; s.t0 < items; s.t0 += per) {
            s.n = items - s.t0 < per ? items - s.t0 : per;
            probs(p, NULL, lse, q, k, &s, ctx);
            /* dP = dO V^T */
            struct operands o1 = {{q_heads(dout, &s, q_len, v_dim), kv_heads(v, &s, kv_len, v_dim),
                                   ws_blocks(dp, &s)}};
            batched_gemm(2, &o1, &s, false, true, q_len, kv_len, v_dim, 1.0f, o_ld, v_ld, 0.0f,
                         kv_len, ctx);
            softmax_grad_kernel<<<row_grid(s.n * q_len), MOE_K_CUDA_THREADS, 0, stream>>>(
                dp, p, dout, out, s);
            MOE_CHECK_LAUNCH();
            /* dQ = scale dS K */
            struct operands o2 = {{ws_blocks(dp, &s), kv_heads(k, &s, kv_len, qk_dim),
                                   q_heads(dq, &s, q_len, qk_dim)}};
            batched_gemm(3, &o2, &s, false, false, q_len, qk_dim, kv_len, scale, kv_len, k_ld, 0.0f,
                         q_ld, ctx);
            /* dK += scale dS^T Q */
            struct operands o3 = {{ws_blocks(dp, &s), q_heads(q, &s, q_len, qk_dim),
                                   kv_heads(dk, &s, kv_len, qk_dim)}};
            batched_gemm(4, &o3, &s, true, false, kv_len, qk_dim, q_len, scale, kv_len, q_ld, 1.0f,
                         k_ld, ctx);
            /* dV += P^T dO */
            struct operands o4 = {{ws_blocks(p, &s), q_heads(dout, &s, q_len, v_dim),
                                   kv_heads(dv, &s, kv_len, v_dim)}};
            batched_gemm(5, &o4, &s, true, false, kv_len, v_dim, q_len, 1.0f, kv_len, o_ld, 1.0f,
                         v_ld, ctx);
        }
    }
}
