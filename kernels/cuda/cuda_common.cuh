/*
 * Private to kernels/cuda: the CUDA backend's per-context state, the MOE_CHECK_CUDA/CUBLAS
 * macros, launch-size helpers, deterministic warp/block reductions, and the prototypes of every
 * op (one per struct moe_k_ops member, like kernels/cpu/cpu.h), so cuda_ops.cu can put them in
 * the table and the compiler checks each signature against kernels/kernels.h.
 *
 * Reductions here are deterministic: a fixed tree (warp shuffles, then one warp over the warp
 * results) over a launch shape that depends only on the problem size, never on the device, so the
 * same inputs give the same bits on every run and every GPU. They differ from the CPU's
 * index-order sums only by summation order; tests compare with a tolerance.
 */
#ifndef MOE_KERNELS_CUDA_CUDA_COMMON_CUH
#define MOE_KERNELS_CUDA_CUDA_COMMON_CUH

#include "kernels/cuda/cuda_backend.h"
#include "kernels/kernels.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

/* ---- Error checks (STYLE.md §4) ------------------------------------------------------------ */

/* Print rank (from the MPI launcher's environment, -1 if none), host, file:line, the call and the
 * library's message on stderr, then abort() (mpirun then ends the peers). */
extern "C" [[noreturn]] void
moe_k_cuda_fail(const char *call, const char *message, const char *file, int line);

/* One generic check: `call` must return `ok`; errstr(status) gives the library's message. */
#define MOE_CHECK_LIB(call, ok, errstr)                                                            \
    do {                                                                                           \
        auto moe_check_status_ = (call);                                                           \
        if (moe_check_status_ != (ok)) {                                                           \
            moe_k_cuda_fail(#call, errstr(moe_check_status_), __FILE__, __LINE__);                 \
        }                                                                                          \
    } while (0)
#define MOE_CHECK_CUDA(call)   MOE_CHECK_LIB(call, cudaSuccess, cudaGetErrorString)
#define MOE_CHECK_CUBLAS(call) MOE_CHECK_LIB(call, CUBLAS_STATUS_SUCCESS, cublasGetStatusString)
/* After every kernel launch: a bad configuration shows up as the last error. */
#define MOE_CHECK_LAUNCH() MOE_CHECK_CUDA(cudaGetLastError())

/* ---- Per-context state ---------------------------------------------------------------------- */

/* Side streams of the STREAMS grouped GEMM, each with its own cuBLAS handle and workspace. */
#define MOE_K_CUDA_NUM_SIDE_STREAMS 4
/* cuBLAS/cuBLASLt workspace: NVIDIA recommends 32 MiB on Hopper (cuBLAS docs, cublasSetWorkspace).
 */
#define MOE_K_CUDA_BLAS_WORKSPACE_BYTES (32u << 20)
/* Fixed device scratch for reduction partials, offsets and amax words (ops carve from offset 0;
 * the stream serialises them). */
#define MOE_K_CUDA_SCRATCH_BYTES (4u << 20)
/* Each of the two BF16 operand copies of BF16 GEMM math (allocated when that mode is set; a GEMM
 * with a larger operand keeps cuBLAS's FAST_16BF): 128 M elements, e.g. a 32 768 x 4 096 output
 * layer or 16 384 tokens x 8 192. */
#define MOE_K_CUDA_BF16_WS_BYTES ((size_t)256 << 20)
/* Most experts a grouped GEMM may have (pointer arrays are sized for it at creation). */
#define MOE_K_CUDA_MAX_GROUPS 4096

/* Host-side per-problem arrays of one grouped GEMM call (cuBLAS reads dims and scalars from the
 * host; the pointer arrays go to the device). */
struct moe_k_cuda_grouped_host {
    cublasOperation_t trans_a[MOE_K_CUDA_MAX_GROUPS];
    cublasOperation_t trans_b[MOE_K_CUDA_MAX_GROUPS];
    int m[MOE_K_CUDA_MAX_GROUPS], n[MOE_K_CUDA_MAX_GROUPS], k[MOE_K_CUDA_MAX_GROUPS];
    int lda[MOE_K_CUDA_MAX_GROUPS], ldb[MOE_K_CUDA_MAX_GROUPS], ldc[MOE_K_CUDA_MAX_GROUPS];
    float alpha[MOE_K_CUDA_MAX_GROUPS], beta[MOE_K_CUDA_MAX_GROUPS];
    int group_size[MOE_K_CUDA_MAX_GROUPS];
};

struct moe_k_cuda_state {
    int device;
    cudaStream_t stream; /* the context's stream (from the desc, or the legacy default stream) */
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    void *blas_workspace; /* [MOE_K_CUDA_BLAS_WORKSPACE_BYTES], shared by blas and lt */
    void *scratch;        /* [MOE_K_CUDA_SCRATCH_BYTES] */
    cudaStream_t side_stream[MOE_K_CUDA_NUM_SIDE_STREAMS];
    cublasHandle_t side_blas[MOE_K_CUDA_NUM_SIDE_STREAMS];
    void *side_workspace[MOE_K_CUDA_NUM_SIDE_STREAMS];
    cudaEvent_t fork_event;
    cudaEvent_t join_event[MOE_K_CUDA_NUM_SIDE_STREAMS];
    /* Grouped GEMM staging: host (pinned) and device arrays of 3 * MAX_GROUPS pointers, host
     * counts[MAX_GROUPS], and an event that marks when the last upload of the pinned array ended.
     */
    const void **ptr_host;
    const void **ptr_dev;
    int *counts_host;
    cudaEvent_t staging_event;
    struct moe_k_cuda_grouped_host *grouped; /* per-problem dims for cuBLAS (host) */
    enum moe_k_cuda_gemm_math math;
    enum moe_k_cuda_grouped_impl grouped_impl;
    enum moe_k_cuda_grouped_impl last_grouped;
    unsigned grouped_unsupported; /* bit per (type combination, compute type) cuBLAS refused */
    struct moe_k_cuda_device_info info;
    /* BF16 math mode: BF16 copies of the two GEMM operands (kernels/cuda/gemm.cu), each
     * [MOE_K_CUDA_BF16_WS_BYTES], allocated by moe_k_cuda_set_gemm_math (NULL otherwise). */
    uint16_t *bf16_ws[2];
    size_t bf16_ws_elems[2];
};

/* The CUDA state of a context (asserts it is a CUDA context). */
struct moe_k_cuda_state *moe_k_cuda_state_of(moe_k_ctx_t *ctx);
static inline cudaStream_t moe_k_cuda_stream(moe_k_ctx_t *ctx)
{
    return moe_k_cuda_state_of(ctx)->stream;
}

/* ---- Launch shapes ------------------------------------------------------------------------ */

#define MOE_K_CUDA_THREADS 256
/* Grid-stride kernels never need more blocks than this (a few waves on 132-148 SMs). */
#define MOE_K_CUDA_MAX_BLOCKS 4096
/* Fixed number of partial sums of the deterministic two-pass reductions (one block finishes). */
#define MOE_K_CUDA_REDUCE_BLOCKS 256

static inline unsigned moe_k_cuda_blocks(size_t n, unsigned threads)
{
    size_t b = (n + threads - 1) / threads;
    if (b < 1) {
        b = 1;
    }
    return (unsigned)(b > MOE_K_CUDA_MAX_BLOCKS ? MOE_K_CUDA_MAX_BLOCKS : b);
}

/* ---- Deterministic reductions (fixed shuffle tree) ---------------------------------------- */

template <typename T> static __device__ __forceinline__ T moe_warp_sum(T v)
{
    for (int off = 16; off > 0; off >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, off);
    }
    return v;
}

static __device__ __forceinline__ float moe_warp_max(float v)
{
    for (int off = 16; off > 0; off >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    }
    return v;
}

/* Block-wide sum, result returned to every thread. blockDim.x must be a multiple of 32 (<= 1024);
 * shared[32] is caller-provided scratch; every thread of the block must call it. */
template <typename T> static __device__ T moe_block_sum(T v, T *shared)
{
    int lane = threadIdx.x & 31;
    int warp = threadIdx.x >> 5;
    int num_warps = blockDim.x >> 5;
    v = moe_warp_sum(v);
    __syncthreads(); /* shared may still be read from a previous call */
    if (lane == 0) {
        shared[warp] = v;
    }
    __syncthreads();
    if (warp == 0) {
        T total = lane < num_warps ? shared[lane] : T(0);
        total = moe_warp_sum(total);
        if (lane == 0) {
            shared[0] = total;
        }
    }
    __syncthreads();
    return shared[0];
}

/* Block-wide max of floats (NaN-free inputs; fmaxf ignores a NaN operand). */
static __device__ float moe_block_max(float v, float *shared)
{
    int lane = threadIdx.x & 31;
    int warp = threadIdx.x >> 5;
    int num_warps = blockDim.x >> 5;
    v = moe_warp_max(v);
    __syncthreads();
    if (lane == 0) {
        shared[warp] = v;
    }
    __syncthreads();
    if (warp == 0) {
        float m = lane < num_warps ? shared[lane] : -INFINITY;
        m = moe_warp_max(m);
        if (lane == 0) {
            shared[0] = m;
        }
    }
    __syncthreads();
    return shared[0];
}

/* ---- Helpers shared between files ------------------------------------------------------------ */

/* out[1] = (float)(scale * sum of partial[num]) in one block (second pass of the deterministic
 * reductions; partial lives in the scratch). */
void moe_k_cuda_finish_sum(
    float *out, const double *partial, int num, double scale, moe_k_ctx_t *ctx);

/* cuBLAS compute type of the context's GEMM math. */
cublasComputeType_t moe_k_cuda_compute_type(moe_k_ctx_t *ctx);

/*
 * Row-major GEMM on cuBLAS with explicit row strides: c[m, n] (row stride ldc) = alpha op(a)
 * op(b) + beta c, op(a) = a[m, k] (stride lda) or a[k, m]^T when trans_a, op(b) likewise. fp32
 * storage, the context's compute type, on handle h (the context's handle when NULL). m, n > 0,
 * k > 0.
 */
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
                        moe_k_ctx_t *ctx);

/* ---- Ops (each documented at its struct moe_k_ops member in kernels/kernels.h) ------------- */

extern "C" {

/* cuda_ops.cu: context hooks */
enum moe_status moe_k_cuda_ctx_init(moe_k_ctx_t *ctx);
void moe_k_cuda_ctx_fini(moe_k_ctx_t *ctx);

/* elementwise.cu */
void moe_k_cuda_fill(float *x, size_t n, float value, moe_k_ctx_t *ctx);
void moe_k_cuda_copy_2d(float *dst,
                        int dst_ld,
                        const float *src,
                        int src_ld,
                        int rows,
                        int cols,
                        bool accumulate,
                        moe_k_ctx_t *ctx);
void moe_k_cuda_axpy(float *y, const float *x, size_t n, float alpha, moe_k_ctx_t *ctx);
void moe_k_cuda_scale(float *x, size_t n, float alpha, moe_k_ctx_t *ctx);
void moe_k_cuda_sum(float *out, const float *x, size_t n, moe_k_ctx_t *ctx);
void moe_k_cuda_sum_squares(float *out, const float *x, size_t n, moe_k_ctx_t *ctx);
void moe_k_cuda_swiglu_fwd(float *out, const float *in, int num_rows, int ffn, moe_k_ctx_t *ctx);
void moe_k_cuda_swiglu_bwd(
    float *d_in, const float *d_out, const float *in, int num_rows, int ffn, moe_k_ctx_t *ctx);
void moe_k_cuda_gelu_fwd(float *out, const float *in, size_t n, moe_k_ctx_t *ctx);
void moe_k_cuda_gelu_bwd(
    float *d_in, const float *d_out, const float *in, size_t n, moe_k_ctx_t *ctx);
void moe_k_cuda_bias_fwd(float *y, const float *bias, int num_rows, int dim, moe_k_ctx_t *ctx);
void moe_k_cuda_bias_bwd(float *d_bias, const float *dy, int num_rows, int dim, moe_k_ctx_t *ctx);

/* gemm.cu */
void moe_k_cuda_matmul(float *c,
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
void moe_k_cuda_linear_fwd(float *y,
                           const float *x,
                           const float *w,
                           const float *bias,
                           int num_rows,
                           int in_dim,
                           int out_dim,
                           moe_k_ctx_t *ctx);
void moe_k_cuda_linear_bwd_data(float *dx,
                                const float *dy,
                                const float *w,
                                int num_rows,
                                int in_dim,
                                int out_dim,
                                bool accumulate,
                                moe_k_ctx_t *ctx);
void moe_k_cuda_linear_bwd_weight(float *dw,
                                  float *d_bias,
                                  const float *dy,
                                  const float *x,
                                  int num_rows,
                                  int in_dim,
                                  int out_dim,
                                  moe_k_ctx_t *ctx);
void moe_k_cuda_grouped_linear_fwd(float *y,
                                   const float *x,
                                   const float *w,
                                   const int *counts,
                                   const int *counts_host,
                                   int num_experts,
                                   int in_dim,
                                   int out_dim,
                                   moe_k_ctx_t *ctx);
void moe_k_cuda_grouped_linear_bwd_data(float *dx,
                                        const float *dy,
                                        const float *w,
                                        const int *counts,
                                        const int *counts_host,
                                        int num_experts,
                                        int in_dim,
                                        int out_dim,
                                        bool accumulate,
                                        moe_k_ctx_t *ctx);
void moe_k_cuda_grouped_linear_bwd_weight(float *dw,
                                          const float *dy,
                                          const float *x,
                                          const int *counts,
                                          const int *counts_host,
                                          int num_experts,
                                          int in_dim,
                                          int out_dim,
                                          moe_k_ctx_t *ctx);

/* moe.cu */
void moe_k_cuda_expert_counts(
    int *counts, const int *topk_idx, int num_tokens, int topk, int num_experts, moe_k_ctx_t *ctx);
void moe_k_cuda_dispatch_layout(int *tokens_per_expert,
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
void moe_k_cuda_permute(float *rows,
                        const float *x,
                        const int *row_to_slot,
                        int num_rows,
                        int topk,
                        int hidden,
                        moe_k_ctx_t *ctx);
void moe_k_cuda_permute_bwd(float *dx,
                            const float *d_rows,
                            const int *slot_to_row,
                            int num_tokens,
                            int topk,
                            int hidden,
                            bool accumulate,
                            moe_k_ctx_t *ctx);
void moe_k_cuda_unpermute(float *y,
                          const float *rows,
                          const float *weights,
                          const int *slot_to_row,
                          int num_tokens,
                          int topk,
                          int hidden,
                          moe_k_ctx_t *ctx);
void moe_k_cuda_unpermute_bwd(float *d_rows,
                              float *d_weights,
                              const float *dy,
                              const float *rows,
                              const float *weights,
                              const int *slot_to_row,
                              int num_tokens,
                              int topk,
                              int hidden,
                              moe_k_ctx_t *ctx);
void moe_k_cuda_sort_chunks(float *out,
                            const float *in,
                            const int *chunk_rows,
                            const int *chunk_order,
                            int num_chunks,
                            int hidden,
                            moe_k_ctx_t *ctx);
void moe_k_cuda_unsort_chunks(float *out,
                              const float *in,
                              const int *chunk_rows,
                              const int *chunk_order,
                              int num_chunks,
                              int hidden,
                              moe_k_ctx_t *ctx);

/* router.cu */
void moe_k_cuda_router_fwd(int *topk_idx,
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
void moe_k_cuda_router_bwd(float *d_logits,
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
void moe_k_cuda_router_aux_loss_fwd(float *loss,
                                    const float *scores,
                                    const int *counts,
                                    int num_tokens,
                                    int num_tokens_total,
                                    int num_experts,
                                    int topk,
                                    enum moe_k_score_fn score_fn,
                                    float coeff,
                                    moe_k_ctx_t *ctx);
void moe_k_cuda_router_aux_loss_bwd(float *d_scores,
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
void moe_k_cuda_router_z_loss_fwd(float *loss,
                                  const float *logits,
                                  int num_tokens,
                                  int num_tokens_total,
                                  int num_experts,
                                  float coeff,
                                  moe_k_ctx_t *ctx);
void moe_k_cuda_router_z_loss_bwd(float *d_logits,
                                  const float *logits,
                                  int num_tokens,
                                  int num_tokens_total,
                                  int num_experts,
                                  float coeff,
                                  float d_loss,
                                  moe_k_ctx_t *ctx);
void moe_k_cuda_router_bias_update(
    float *bias, const int *counts, int num_experts, float rate, moe_k_ctx_t *ctx);

/* norm_rope.cu */
void moe_k_cuda_rmsnorm_fwd(float *y,
                            float *rstd,
                            const float *x,
                            const float *weight,
                            int num_rows,
                            int hidden,
                            float eps,
                            moe_k_ctx_t *ctx);
void moe_k_cuda_rmsnorm_bwd(float *dx,
                            float *d_weight,
                            const float *dy,
                            const float *x,
                            const float *weight,
                            const float *rstd,
                            int num_rows,
                            int hidden,
                            bool accumulate,
                            moe_k_ctx_t *ctx);
void moe_k_cuda_rope_table(
    float *cos_sin, const int *positions, int num_rows, int rot_dim, float theta, moe_k_ctx_t *ctx);
void moe_k_cuda_rope_fwd(float *out,
                         const float *in,
                         const float *cos_sin,
                         int num_rows,
                         int num_heads,
                         int head_dim,
                         int rot_start,
                         int rot_dim,
                         bool interleaved,
                         moe_k_ctx_t *ctx);
void moe_k_cuda_rope_bwd(float *d_in,
                         const float *d_out,
                         const float *cos_sin,
                         int num_rows,
                         int num_heads,
                         int head_dim,
                         int rot_start,
                         int rot_dim,
                         bool interleaved,
                         moe_k_ctx_t *ctx);

/* attention.cu */
size_t moe_k_cuda_attention_workspace_bytes(int q_len, int kv_len, moe_k_ctx_t *ctx);
void moe_k_cuda_attention_fwd(float *out,
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
void moe_k_cuda_attention_bwd(float *dq,
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
void moe_k_cuda_attention_window_sink_fwd(float *out,
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
void moe_k_cuda_attention_window_sink_bwd(float *dq,
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

/* vocab.cu */
void moe_k_cuda_embedding_fwd(float *out,
                              const int *ids,
                              const float *table,
                              int num_tokens,
                              int hidden,
                              int v_start,
                              int v_end,
                              moe_k_ctx_t *ctx);
void moe_k_cuda_embedding_bwd(float *d_table,
                              const float *d_out,
                              const int *ids,
                              int num_tokens,
                              int hidden,
                              int v_start,
                              int v_end,
                              moe_k_ctx_t *ctx);
void moe_k_cuda_xent_local_max(
    float *local_max, const float *logits, int num_tokens, int vocab_local, moe_k_ctx_t *ctx);
void moe_k_cuda_xent_local_sumexp(float *sumexp,
                                  float *target_logit,
                                  const float *logits,
                                  const int *targets,
                                  const float *global_max,
                                  int num_tokens,
                                  int vocab_local,
                                  int v_start,
                                  moe_k_ctx_t *ctx);
void moe_k_cuda_xent_loss(float *loss,
                          const float *global_max,
                          const float *global_sumexp,
                          const float *target_logit,
                          const int *targets,
                          int num_tokens,
                          moe_k_ctx_t *ctx);
void moe_k_cuda_xent_bwd(float *d_logits,
                         const float *logits,
                         const int *targets,
                         const float *global_max,
                         const float *global_sumexp,
                         int num_tokens,
                         int vocab_local,
                         int v_start,
                         float d_loss,
                         moe_k_ctx_t *ctx);

/* adamw.cu */
void moe_k_cuda_adamw_step(float *param,
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

/* quant.cu */
void moe_k_cuda_qdq(float *out,
                    const float *in,
                    int rows,
                    int cols,
                    enum moe_k_qformat format,
                    enum moe_k_qrecipe recipe,
                    moe_k_ctx_t *ctx);

} /* extern "C" */

#endif /* MOE_KERNELS_CUDA_CUDA_COMMON_CUH */
