/*
 * Vocab-parallel embedding and cross-entropy on the GPU, twins of kernels/cpu/vocab.c (Megatron's
 * VocabParallelEmbedding and vocab_parallel_cross_entropy): lookup with zeros for ids this rank
 * does not own; the embedding gradient summed per column in token order (one thread per column,
 * bit for bit the CPU's order, no atomics); per-row max, sum of exponentials (double exp and
 * double accumulation, tree order), target-logit pick, loss, and the softmax-minus-one-hot
 * gradient computed in double per element as the CPU does.
 */
#include "kernels/cuda/cuda_common.cuh"

#include <math.h>

static unsigned row_grid(int rows)
{
    return (unsigned)(rows < 1 ? 1 : (rows > MOE_K_CUDA_MAX_BLOCKS ? MOE_K_CUDA_MAX_BLOCKS : rows));
}

static __global__ void embedding_fwd_kernel(float *out,
                                            const int *ids,
                                            const float *table,
                                            int num_tokens,
                                            int hidden,
                                            int v_start,
                                            int v_end)
{
    for (int i = blockIdx.x; i < num_tokens; i += gridDim.x) {
        float *o = out + (size_t)i * (size_t)hidden;
        int id = ids[i];
        bool mine = id >= v_start && id < v_end;
        const float *src = table + (size_t)(mine ? id - v_start : 0) * (size_t)hidden;
        for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
            o[c] = mine ? src[c] : 0.0f;
        }
    }
}

extern "C" void moe_k_cuda_embedding_fwd(float *out,
                                         const int *ids,
                                         const float *table,
                                         int num_tokens,
                                         int hidden,
                                         int v_start,
                                         int v_end,
                                         moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_tokens >= 0 && hidden > 0 && v_start <= v_end);
    if (num_tokens == 0) {
        return;
    }
    embedding_fwd_kernel<<<row_grid(num_tokens), MOE_K_CUDA_THREADS, 0, moe_k_cuda_stream(ctx)>>>(
        out, ids, table, num_tokens, hidden, v_start, v_end);
    MOE_CHECK_LAUNCH();
}

/* Thread c: d_table[id_i - v_start, c] += d_out[i, c] for i in token order. */
static __global__ void embedding_bwd_kernel(float *d_table,
                                            const float *d_out,
                                            const int *ids,
                                            int num_tokens,
                                            int hidden,
                                            int v_start,
                                            int v_end)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= hidden) {
        return;
    }
    for (int i = 0; i < num_tokens; i++) {
        int id = ids[i];
        if (id < v_start || id >= v_end) {
            continue;
        }
        d_table[(size_t)(id - v_start) * (size_t)hidden + (size_t)c] +=
            d_out[(size_t)i * (size_t)hidden + (size_t)c];
    }
}

extern "C" void moe_k_cuda_embedding_bwd(float *d_table,
                                         const float *d_out,
                                         const int *ids,
                                         int num_tokens,
                                         int hidden,
                                         int v_start,
                                         int v_end,
                                         moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_tokens >= 0 && hidden > 0 && v_start <= v_end);
    if (num_tokens == 0) {
        return;
    }
    unsigned blocks = (unsigned)((hidden + MOE_K_CUDA_THREADS - 1) / MOE_K_CUDA_THREADS);
    embedding_bwd_kernel<<<blocks, MOE_K_CUDA_THREADS, 0, moe_k_cuda_stream(ctx)>>>(
        d_table, d_out, ids, num_tokens, hidden, v_start, v_end);
    MOE_CHECK_LAUNCH();
}

static __global__ void
xent_local_max_kernel(float *local_max, const float *logits, int num_tokens, int vocab_local)
{
    __shared__ float shared[32];
    for (int i = blockIdx.x; i < num_tokens; i += gridDim.x) {
        const float *row = logits + (size_t)i * (size_t)vocab_local;
        float m = -INFINITY;
        for (int v = threadIdx.x; v < vocab_local; v += blockDim.x) {
            m = fmaxf(m, row[v]);
        }
        m = moe_block_max(m, shared);
        if (threadIdx.x == 0) {
            local_max[i] = m;
        }
    }
}

extern "C" void moe_k_cuda_xent_local_max(
    float *local_max, const float *logits, int num_tokens, int vocab_local, moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_tokens >= 0 && vocab_local > 0);
    if (num_tokens == 0) {
        return;
    }
    xent_local_max_kernel<<<row_grid(num_tokens), MOE_K_CUDA_THREADS, 0, moe_k_cuda_stream(ctx)>>>(
        local_max, logits, num_tokens, vocab_local);
    MOE_CHECK_LAUNCH();
}

static __global__ void xent_local_sumexp_kernel(float *sumexp,
                                                float *target_logit,
                                                const float *logits,
                                                const int *targets,
                                                const float *global_max,
                                                int num_tokens,
                                                int vocab_local,
                                                int v_start)
{
    __shared__ double shared[32];
    for (int i = blockIdx.x; i < num_tokens; i += gridDim.x) {
        const float *row = logits + (size_t)i * (size_t)vocab_local;
        double gmax = (double)global_max[i];
        double sum = 0.0;
        for (int v = threadIdx.x; v < vocab_local; v += blockDim.x) {
            sum += exp((double)row[v] - gmax);
        }
        sum = moe_block_sum(sum, shared);
        if (threadIdx.x == 0) {
            sumexp[i] = (float)sum;
            int t = targets[i] - v_start;
            target_logit[i] = (targets[i] >= 0 && t >= 0 && t < vocab_local) ? row[t] : 0.0f;
        }
    }
}

extern "C" void moe_k_cuda_xent_local_sumexp(float *sumexp,
                                             float *target_logit,
                                             const float *logits,
                                             const int *targets,
                                             const float *global_max,
                                             int num_tokens,
                                             int vocab_local,
                                             int v_start,
                                             moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_tokens >= 0 && vocab_local > 0);
    if (num_tokens == 0) {
        return;
    }
    xent_local_sumexp_kernel<<<row_grid(num_tokens), MOE_K_CUDA_THREADS, 0,
                               moe_k_cuda_stream(ctx)>>>(
        sumexp, target_logit, logits, targets, global_max, num_tokens, vocab_local, v_start);
    MOE_CHECK_LAUNCH();
}

static __global__ void xent_loss_kernel(float *loss,
                                        const float *global_max,
                                        const float *global_sumexp,
                                        const float *target_logit,
                                        const int *targets,
                                        int num_tokens)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < num_tokens;
         i += gridDim.x * blockDim.x) {
        double l = log((double)global_sumexp[i]) + (double)global_max[i] - (double)target_logit[i];
        loss[i] = targets[i] < 0 ? 0.0f : (float)l;
    }
}

extern "C" void moe_k_cuda_xent_loss(float *loss,
                                     const float *global_max,
                                     const float *global_sumexp,
                                     const float *target_logit,
                                     const int *targets,
                                     int num_tokens,
                                     moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_tokens >= 0);
    if (num_tokens == 0) {
        return;
    }
    xent_loss_kernel<<<moe_k_cuda_blocks((size_t)num_tokens, MOE_K_CUDA_THREADS),
                       MOE_K_CUDA_THREADS, 0, moe_k_cuda_stream(ctx)>>>(
        loss, global_max, global_sumexp, target_logit, targets, num_tokens);
    MOE_CHECK_LAUNCH();
}

static __global__ void xent_bwd_kernel(float *d_logits,
                                       const float *logits,
                                       const int *targets,
                                       const float *global_max,
                                       const float *global_sumexp,
                                       int num_tokens,
                                       int vocab_local,
                                       int v_start,
                                       float d_loss)
{
    for (int i = blockIdx.x; i < num_tokens; i += gridDim.x) {
        const float *row = logits + (size_t)i * (size_t)vocab_local;
        float *d = d_logits + (size_t)i * (size_t)vocab_local;
        if (targets[i] < 0) {
            for (int v = threadIdx.x; v < vocab_local; v += blockDim.x) {
                d[v] = 0.0f;
            }
            continue;
        }
        double inv_sum = 1.0 / (double)global_sumexp[i];
        double gmax = (double)global_max[i];
        int t = targets[i] - v_start;
        for (int v = threadIdx.x; v < vocab_local; v += blockDim.x) {
            double p = exp((double)row[v] - gmax) * inv_sum;
            d[v] = (float)((double)d_loss * (p - (v == t ? 1.0 : 0.0)));
        }
    }
}

extern "C" void moe_k_cuda_xent_bwd(float *d_logits,
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
    MOE_ASSERT(num_tokens >= 0 && vocab_local > 0);
    if (num_tokens == 0) {
        return;
    }
    xent_bwd_kernel<<<row_grid(num_tokens), MOE_K_CUDA_THREADS, 0, moe_k_cuda_stream(ctx)>>>(
        d_logits, logits, targets, global_max, global_sumexp, num_tokens, vocab_local, v_start,
        d_loss);
    MOE_CHECK_LAUNCH();
}
