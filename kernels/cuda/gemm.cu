/*
 * Dense and grouped GEMM on cuBLAS, twins of kernels/cpu/gemm.c, plus the native-BF16 GEMMs of
 * cuda_backend.h. Row-major tensors are handed to column-major cuBLAS as their transposes
 * (C^T = op(B)^T op(A)^T), so no copies. Storage is fp32 and the compute type follows the context's
 * math mode (FP32 pedantic by default; TF32 or BF16 inputs with fp32 accumulation on request).
 *
 * The grouped expert GEMM (rows grouped by expert, counts[E] on the device) needs the counts on
 * the host (cuBLAS takes host dimensions): the caller's host copy when it passes one (the engine
 * does: it read them back once for the dispatch), else a copy back that synchronises the stream
 * (as Megatron's tokens_per_expert.cpu()). Then it runs either one cublasGemmGroupedBatchedEx call
 * (one problem per non-empty expert) or one cublasGemmEx per expert round-robin over side streams.
 * Empty experts are skipped, so their weight gradients stay untouched. Bias gradients are column
 * sums in row order (one thread per column), bit for bit the CPU's loop.
 */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/formats.cuh"

#include <math.h>
#include <string.h>

static cublasOperation_t op_of(bool trans)
{
    return trans ? CUBLAS_OP_T : CUBLAS_OP_N;
}

/* ---- BF16 math on fp32 storage ---------------------------------------------------------------
 *
 * In BF16 math mode cuBLAS's CUBLAS_COMPUTE_32F_FAST_16BF on fp32 operands ran TF32 kernels on an
 * H200 (sm90_xmma_gemm_f32f32_tf32f32: TF32 is half the BF16 tensor rate). So GEMMs large enough to
 * pay for it convert both operands to BF16 (round to nearest even, as the engine's BF16 emulation)
 * and run BF16 x BF16 -> fp32 with fp32 accumulation. Smaller ones (attention's per-head products,
 * head dim 128) keep FAST_16BF: their conversion would cost about what it saves. So do the grouped
 * expert GEMMs: converting their [E, out, in] weights at every call (tried on an H200, gpu-moe)
 * cost what the BF16 GEMMs saved (expert phase 168 ms -> 171 ms per step); that needs BF16 weight
 * copies kept across the micro-batches of a step.
 */
#define BF16_CONVERT_MIN_DIM 256

static __global__ void to_bf16_kernel(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        dst[i] = moe_cu_bf16_encode(src[i]);
    }
}

/* BF16 copy of the n floats at src in workspace slot `slot`, on the context's stream; NULL when
 * the slot is missing or too small (the caller keeps FAST_16BF). */
static const uint16_t *
bf16_operand(struct moe_k_cuda_state *st, int slot, const float *src, size_t n)
{
    if (st->bf16_ws[slot] == NULL || n > st->bf16_ws_elems[slot]) {
        return NULL;
    }
    to_bf16_kernel<<<moe_k_cuda_blocks(n, MOE_K_CUDA_THREADS), MOE_K_CUDA_THREADS, 0, st->stream>>>(
        st->bf16_ws[slot], src, n);
    MOE_CHECK_LAUNCH();
    return st->bf16_ws[slot];
}

/* A GEMM that runs on BF16 copies: BF16 math mode, every dimension large enough, both operands
 * contiguous (leading dimension = row length). */
static bool bf16_eligible(const struct moe_k_cuda_state *st, int m, int n, int k, bool contiguous)
{
    return st->math == MOE_K_CUDA_GEMM_BF16 && contiguous && m >= BF16_CONVERT_MIN_DIM &&
           n >= BF16_CONVERT_MIN_DIM && k >= BF16_CONVERT_MIN_DIM;
}

void moe_k_cuda_gemm_rm(cublasHandle_t h,
                        bool trans_a,
                        bool trans_b,
                        int m,
                        int n,
                        int k,
                        float alpha,
                        const float *a,
                        int lda,
                        const float *b,
                        int ldb,
                        float beta,
                        float *c,
                        int ldc,
                        moe_k_ctx_t *ctx)
{
    MOE_ASSERT(m > 0 && n > 0 && k > 0);
    const void *a_op = a, *b_op = b;
    cudaDataType_t ab_type = CUDA_R_32F;
    cublasComputeType_t compute = moe_k_cuda_compute_type(ctx);
    if (h == NULL) {
        struct moe_k_cuda_state *st = moe_k_cuda_state_of(ctx);
        h = st->blas;
        bool contiguous = lda == (trans_a ? m : k) && ldb == (trans_b ? k : n);
        if (bf16_eligible(st, m, n, k, contiguous)) {
            /* BF16 copies (or fp32 with FAST_16BF when a copy does not fit). */
            const uint16_t *a16 = bf16_operand(st, 0, a, (size_t)m * (size_t)k);
            const uint16_t *b16 =
                a16 != NULL ? bf16_operand(st, 1, b, (size_t)k * (size_t)n) : NULL;
            if (b16 != NULL) {
                a_op = a16;
                b_op = b16;
                ab_type = CUDA_R_16BF;
                compute = CUBLAS_COMPUTE_32F;
            }
        }
    }
    /* Column-major view: C^T[n, m] = op(B)^T[n, k] op(A)^T[k, m]. */
    MOE_CHECK_CUBLAS(cublasGemmEx(h, op_of(trans_b), op_of(trans_a), n, m, k, &alpha, b_op, ab_type,
                                  ldb, a_op, ab_type, lda, &beta, c, CUDA_R_32F, ldc, compute,
                                  CUBLAS_GEMM_DEFAULT));
}

/* c[n] = beta * c (0 when beta == 0, even over NaN): the empty-product case, as the CPU. */
static __global__ void scale_or_zero_kernel(float *c, size_t n, float beta)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    }
}

extern "C" void moe_k_cuda_matmul(float *c,
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
    MOE_ASSERT(m >= 0 && n >= 0 && k >= 0);
    if (m == 0 || n == 0) {
        return;
    }
    if (k == 0) {
        size_t total = (size_t)m * (size_t)n;
        scale_or_zero_kernel<<<moe_k_cuda_blocks(total, MOE_K_CUDA_THREADS), MOE_K_CUDA_THREADS, 0,
                               moe_k_cuda_stream(ctx)>>>(c, total, beta);
        MOE_CHECK_LAUNCH();
        return;
    }
    moe_k_cuda_gemm_rm(NULL, trans_a, trans_b, m, n, k, alpha, a, trans_a ? m : k, b,
                       trans_b ? k : n, beta, c, n, ctx);
}

static __global__ void broadcast_rows_kernel(float *y, const float *bias, int num_rows, int cols)
{
    size_t n = (size_t)num_rows * (size_t)cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        y[i] = bias[i % (size_t)cols];
    }
}

extern "C" void moe_k_cuda_linear_fwd(float *y,
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
    if (bias != NULL && num_rows > 0) {
        size_t n = (size_t)num_rows * (size_t)out_dim;
        broadcast_rows_kernel<<<moe_k_cuda_blocks(n, MOE_K_CUDA_THREADS), MOE_K_CUDA_THREADS, 0,
                                moe_k_cuda_stream(ctx)>>>(y, bias, num_rows, out_dim);
        MOE_CHECK_LAUNCH();
        beta = 1.0f;
    }
    moe_k_cuda_matmul(y, x, w, num_rows, out_dim, in_dim, false, true, 1.0f, beta, ctx);
}

extern "C" void moe_k_cuda_linear_bwd_data(float *dx,
                                           const float *dy,
                                           const float *w,
                                           int num_rows,
                                           int in_dim,
                                           int out_dim,
                                           bool accumulate,
                                           moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_rows >= 0 && in_dim > 0 && out_dim > 0);
    moe_k_cuda_matmul(dx, dy, w, num_rows, in_dim, out_dim, false, false, 1.0f,
                      accumulate ? 1.0f : 0.0f, ctx);
}

/* d_bias[j] += dy[r, j] for r in order: one thread per column, the CPU's order. */
static __global__ void column_sum_kernel(float *d_bias, const float *dy, int num_rows, int cols)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) {
        return;
    }
    float acc = d_bias[j];
    for (int r = 0; r < num_rows; r++) {
        acc += dy[(size_t)r * (size_t)cols + (size_t)j];
    }
    d_bias[j] = acc;
}

extern "C" void moe_k_cuda_linear_bwd_weight(float *dw,
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
    moe_k_cuda_matmul(dw, dy, x, out_dim, in_dim, num_rows, true, false, 1.0f, 1.0f, ctx);
    if (d_bias != NULL) {
        unsigned blocks = (unsigned)((out_dim + MOE_K_CUDA_THREADS - 1) / MOE_K_CUDA_THREADS);
        column_sum_kernel<<<blocks, MOE_K_CUDA_THREADS, 0, moe_k_cuda_stream(ctx)>>>(
            d_bias, dy, num_rows, out_dim);
        MOE_CHECK_LAUNCH();
    }
}

/* ---- Grouped GEMM ---------------------------------------------------------------------------- */

/* Types of one grouped call: element types of A/B and C, and the compute type. */
struct grouped_types {
    cudaDataType_t ab_type;
    cudaDataType_t c_type;
    cublasComputeType_t compute;
    size_t ab_bytes; /* bytes per A/B element */
    size_t c_bytes;  /* bytes per C element */
};

/* Bit of a type combination in moe_k_cuda_state.grouped_unsupported: 4 storage combinations
 * (A/B fp32 or BF16, C fp32 or BF16) times 5 compute types, 8 bits apart. */
static unsigned combo_bit(const struct grouped_types *t)
{
    unsigned ab = t->ab_type == CUDA_R_16BF ? 1u : 0u;
    unsigned c = t->c_type == CUDA_R_16BF ? 1u : 0u;
    unsigned comp;
    switch (t->compute) {
    case CUBLAS_COMPUTE_32F:
        comp = 0;
        break;
    case CUBLAS_COMPUTE_32F_PEDANTIC:
        comp = 1;
        break;
    case CUBLAS_COMPUTE_32F_FAST_TF32:
        comp = 2;
        break;
    case CUBLAS_COMPUTE_32F_FAST_16BF:
        comp = 3;
        break;
    default:
        comp = 4;
        break;
    }
    return 1u << ((ab * 2u + c) * 8u + comp);
}

/*
 * Record problem i (row-major: c[m, n] = alpha op(a) op(b) + beta c, leading dims as given) in the
 * host staging arrays in cuBLAS's column-major form. Pointers go to ptr_host[i] (cuBLAS's A =
 * our b), ptr_host[num + i] (cuBLAS's B = our a) and ptr_host[2 num + i] (C).
 */
static void stage_problem(struct moe_k_cuda_state *st,
                          int i,
                          int num,
                          bool trans_a,
                          bool trans_b,
                          int m,
                          int n,
                          int k,
                          const void *a,
                          int lda,
                          const void *b,
                          int ldb,
                          void *c,
                          int ldc,
                          float alpha,
                          float beta)
{
    struct moe_k_cuda_grouped_host *g = st->grouped;
    g->trans_a[i] = op_of(trans_b);
    g->trans_b[i] = op_of(trans_a);
    g->m[i] = n;
    g->n[i] = m;
    g->k[i] = k;
    g->lda[i] = ldb;
    g->ldb[i] = lda;
    g->ldc[i] = ldc;
    g->alpha[i] = alpha;
    g->beta[i] = beta;
    g->group_size[i] = 1;
    st->ptr_host[i] = b;
    st->ptr_host[num + i] = a;
    st->ptr_host[2 * num + i] = c;
}

/* One cublasGemmGroupedBatchedEx over the staged problems; false when cuBLAS refuses the types. */
static bool run_grouped_batched(struct moe_k_cuda_state *st,
                                int num,
                                const struct grouped_types *t,
                                bool may_fall_back)
{
    struct moe_k_cuda_grouped_host *g = st->grouped;
    MOE_CHECK_CUDA(cudaMemcpyAsync((void *)st->ptr_dev, (const void *)st->ptr_host,
                                   3 * (size_t)num * sizeof(void *), cudaMemcpyHostToDevice,
                                   st->stream));
    MOE_CHECK_CUDA(cudaEventRecord(st->staging_event, st->stream));
    const void *const *a_arr = st->ptr_dev;
    const void *const *b_arr = st->ptr_dev + num;
    void *const *c_arr = (void *const *)(st->ptr_dev + 2 * num);
    cublasStatus_t status =
        cublasGemmGroupedBatchedEx(st->blas, g->trans_a, g->trans_b, g->m, g->n, g->k, g->alpha,
                                   a_arr, t->ab_type, g->lda, b_arr, t->ab_type, g->ldb, g->beta,
                                   c_arr, t->c_type, g->ldc, num, g->group_size, t->compute);
    if (status == CUBLAS_STATUS_SUCCESS) {
        return true;
    }
    if (may_fall_back &&
        (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE)) {
        st->grouped_unsupported |= combo_bit(t);
        return false;
    }
    moe_k_cuda_fail("cublasGemmGroupedBatchedEx", cublasGetStatusString(status), __FILE__,
                    __LINE__);
}

/* One cublasGemmEx per staged problem, round-robin over the side streams, joined by events. */
static void run_grouped_streams(struct moe_k_cuda_state *st, int num, const struct grouped_types *t)
{
    struct moe_k_cuda_grouped_host *g = st->grouped;
    int used = num < MOE_K_CUDA_NUM_SIDE_STREAMS ? num : MOE_K_CUDA_NUM_SIDE_STREAMS;
    MOE_CHECK_CUDA(cudaEventRecord(st->fork_event, st->stream));
    for (int s = 0; s < used; s++) {
        MOE_CHECK_CUDA(cudaStreamWaitEvent(st->side_stream[s], st->fork_event, 0));
    }
    for (int i = 0; i < num; i++) {
        MOE_CHECK_CUBLAS(cublasGemmEx(st->side_blas[i % MOE_K_CUDA_NUM_SIDE_STREAMS], g->trans_a[i],
                                      g->trans_b[i], g->m[i], g->n[i], g->k[i], &g->alpha[i],
                                      st->ptr_host[i], t->ab_type, g->lda[i], st->ptr_host[num + i],
                                      t->ab_type, g->ldb[i], &g->beta[i],
                                      (void *)st->ptr_host[2 * num + i], t->c_type, g->ldc[i],
                                      t->compute, CUBLAS_GEMM_DEFAULT));
    }
    for (int s = 0; s < used; s++) {
        MOE_CHECK_CUDA(cudaEventRecord(st->join_event[s], st->side_stream[s]));
        MOE_CHECK_CUDA(cudaStreamWaitEvent(st->stream, st->join_event[s], 0));
    }
}

/* Run the num staged problems with the context's implementation choice; returns what ran. */
static enum moe_k_cuda_grouped_impl
run_staged(struct moe_k_cuda_state *st, int num, const struct grouped_types *t)
{
    if (num == 0) {
        return st->last_grouped;
    }
    enum moe_k_cuda_grouped_impl impl = st->grouped_impl;
    bool batched_ok = (st->grouped_unsupported & combo_bit(t)) == 0;
    if (impl == MOE_K_CUDA_GROUPED_BATCHED || (impl == MOE_K_CUDA_GROUPED_AUTO && batched_ok)) {
        if (run_grouped_batched(st, num, t, impl == MOE_K_CUDA_GROUPED_AUTO)) {
            st->last_grouped = MOE_K_CUDA_GROUPED_BATCHED;
            return st->last_grouped;
        }
    }
    run_grouped_streams(st, num, t);
    st->last_grouped = MOE_K_CUDA_GROUPED_STREAMS;
    return st->last_grouped;
}

/* Before the staging arrays are rewritten: the previous upload from them must have finished. */
static void wait_staging(struct moe_k_cuda_state *st)
{
    MOE_CHECK_CUDA(cudaEventSynchronize(st->staging_event));
}

/* counts[E] from the device to the pinned host array (synchronises the stream). */
static const int *fetch_counts(struct moe_k_cuda_state *st, const int *counts, int num_experts)
{
    MOE_ASSERT(num_experts >= 0 && num_experts <= MOE_K_CUDA_MAX_GROUPS);
    if (num_experts > 0) {
        MOE_CHECK_CUDA(cudaMemcpyAsync(st->counts_host, counts, (size_t)num_experts * sizeof(int),
                                       cudaMemcpyDeviceToHost, st->stream));
    }
    MOE_CHECK_CUDA(cudaStreamSynchronize(st->stream));
    for (int e = 0; e < num_experts; e++) {
        MOE_ASSERT(st->counts_host[e] >= 0);
    }
    return st->counts_host;
}

static int count_nonempty(const int *counts, int num_experts)
{
    int num = 0;
    for (int e = 0; e < num_experts; e++) {
        num += counts[e] > 0 ? 1 : 0;
    }
    return num;
}

static struct grouped_types fp32_types(moe_k_ctx_t *ctx)
{
    struct grouped_types t = {CUDA_R_32F, CUDA_R_32F, moe_k_cuda_compute_type(ctx), 4, 4};
    return t;
}

/* Which grouped GEMM of an expert layer. */
enum grouped_kind {
    GROUPED_FWD,        /* y_e = x_e w_e^T */
    GROUPED_BWD_DATA,   /* dx_e = dy_e w_e */
    GROUPED_BWD_WEIGHT, /* dw_e += dy_e^T x_e */
};

/*
 * Stage the non-empty experts of one grouped GEMM. rows_p is the expert-contiguous operand with
 * `p_cols` columns (x, or dy), rows_q the second row operand (dy for the weight gradient), w the
 * [E, out, in] weights (or dw), out the row output (y or dx). Element sizes from t.
 */
struct grouped_args {
    enum grouped_kind kind;
    const void *x;  /* fwd: x[R, in];  bwd_data: dy[R, out];  bwd_weight: dy[R, out] */
    const void *w;  /* fwd, bwd_data: w[E, out, in] */
    void *out;      /* fwd: y[R, out];  bwd_data: dx[R, in];  bwd_weight: dw[E, out, in] */
    const void *x2; /* bwd_weight: x[R, in] */
    int in_dim, out_dim;
    float beta;
};

static int stage_grouped(struct moe_k_cuda_state *st,
                         const struct grouped_args *g,
                         const int *counts,
                         int num_experts,
                         const struct grouped_types *t)
{
    int num = count_nonempty(counts, num_experts);
    size_t w_elems = (size_t)g->out_dim * (size_t)g->in_dim;
    const char *x = (const char *)g->x;
    const char *w = (const char *)g->w;
    const char *x2 = (const char *)g->x2;
    char *out = (char *)g->out;
    size_t row = 0;
    int i = 0;
    for (int e = 0; e < num_experts; e++) {
        int c = counts[e];
        if (c > 0) {
            if (g->kind == GROUPED_FWD) {
                stage_problem(st, i, num, false, true, c, g->out_dim, g->in_dim,
                              x + row * g->in_dim * t->ab_bytes, g->in_dim,
                              w + e * w_elems * t->ab_bytes, g->in_dim,
                              out + row * g->out_dim * t->c_bytes, g->out_dim, 1.0f, g->beta);
            } else if (g->kind == GROUPED_BWD_DATA) {
                stage_problem(st, i, num, false, false, c, g->in_dim, g->out_dim,
                              x + row * g->out_dim * t->ab_bytes, g->out_dim,
                              w + e * w_elems * t->ab_bytes, g->in_dim,
                              out + row * g->in_dim * t->c_bytes, g->in_dim, 1.0f, g->beta);
            } else {
                stage_problem(st, i, num, true, false, g->out_dim, g->in_dim, c,
                              x + row * g->out_dim * t->ab_bytes, g->out_dim,
                              x2 + row * g->in_dim * t->ab_bytes, g->in_dim,
                              out + e * w_elems * t->c_bytes, g->in_dim, 1.0f, 1.0f);
            }
            i++;
        }
        row += (size_t)c;
    }
    return num;
}

static void grouped_fp32(const struct grouped_args *g,
                         const int *counts,
                         const int *counts_host,
                         int num_experts,
                         moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_experts >= 0 && g->in_dim > 0 && g->out_dim > 0);
    struct moe_k_cuda_state *st = moe_k_cuda_state_of(ctx);
    const int *host = counts_host != NULL ? counts_host : fetch_counts(st, counts, num_experts);
    struct grouped_types t = fp32_types(ctx);
    wait_staging(st);
    int num = stage_grouped(st, g, host, num_experts, &t);
    (void)run_staged(st, num, &t);
}

extern "C" void moe_k_cuda_grouped_linear_fwd(float *y,
                                              const float *x,
                                              const float *w,
                                              const int *counts,
                                              const int *counts_host,
                                              int num_experts,
                                              int in_dim,
                                              int out_dim,
                                              moe_k_ctx_t *ctx)
{
    struct grouped_args g = {GROUPED_FWD, x, w, y, NULL, in_dim, out_dim, 0.0f};
    grouped_fp32(&g, counts, counts_host, num_experts, ctx);
}

extern "C" void moe_k_cuda_grouped_linear_bwd_data(float *dx,
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
    struct grouped_args g = {GROUPED_BWD_DATA,        dy, w, dx, NULL, in_dim, out_dim,
                             accumulate ? 1.0f : 0.0f};
    grouped_fp32(&g, counts, counts_host, num_experts, ctx);
}

extern "C" void moe_k_cuda_grouped_linear_bwd_weight(float *dw,
                                                     const float *dy,
                                                     const float *x,
                                                     const int *counts,
                                                     const int *counts_host,
                                                     int num_experts,
                                                     int in_dim,
                                                     int out_dim,
                                                     moe_k_ctx_t *ctx)
{
    struct grouped_args g = {GROUPED_BWD_WEIGHT, dy, NULL, dw, x, in_dim, out_dim, 1.0f};
    grouped_fp32(&g, counts, counts_host, num_experts, ctx);
}

/* ---- Native BF16 storage --------------------------------------------------------------------- */

extern "C" void moe_k_cuda_to_bf16(uint16_t *dst, const float *src, size_t n, moe_k_ctx_t *ctx)
{
    if (n == 0) {
        return;
    }
    to_bf16_kernel<<<moe_k_cuda_blocks(n, MOE_K_CUDA_THREADS), MOE_K_CUDA_THREADS, 0,
                     moe_k_cuda_stream(ctx)>>>(dst, src, n);
    MOE_CHECK_LAUNCH();
}

extern "C" void moe_k_cuda_gemm_bf16(void *c,
                                     bool c_bf16,
                                     const uint16_t *a,
                                     const uint16_t *b,
                                     int m,
                                     int n,
                                     int k,
                                     bool trans_a,
                                     bool trans_b,
                                     float alpha,
                                     float beta,
                                     moe_k_ctx_t *ctx)
{
    MOE_ASSERT(m > 0 && n > 0 && k > 0);
    struct moe_k_cuda_state *st = moe_k_cuda_state_of(ctx);
    MOE_CHECK_CUBLAS(cublasGemmEx(st->blas, op_of(trans_b), op_of(trans_a), n, m, k, &alpha, b,
                                  CUDA_R_16BF, trans_b ? k : n, a, CUDA_R_16BF, trans_a ? m : k,
                                  &beta, c, c_bf16 ? CUDA_R_16BF : CUDA_R_32F, n,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

extern "C" enum moe_k_cuda_grouped_impl moe_k_cuda_grouped_linear_fwd_bf16(void *y,
                                                                           bool y_bf16,
                                                                           const uint16_t *x,
                                                                           const uint16_t *w,
                                                                           const int *counts_host,
                                                                           int num_experts,
                                                                           int in_dim,
                                                                           int out_dim,
                                                                           moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_experts >= 0 && num_experts <= MOE_K_CUDA_MAX_GROUPS);
    MOE_ASSERT(in_dim > 0 && out_dim > 0);
    struct moe_k_cuda_state *st = moe_k_cuda_state_of(ctx);
    struct grouped_types t = {CUDA_R_16BF, y_bf16 ? CUDA_R_16BF : CUDA_R_32F, CUBLAS_COMPUTE_32F, 2,
                              y_bf16 ? 2u : 4u};
    struct grouped_args g = {GROUPED_FWD, x, w, y, NULL, in_dim, out_dim, 0.0f};
    wait_staging(st);
    int num = stage_grouped(st, &g, counts_host, num_experts, &t);
    return run_staged(st, num, &t);
}
