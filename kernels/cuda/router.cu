/*
 * MoE router on the GPU, twin of kernels/cpu/router.c: softmax or sigmoid scores, selection with an
 * optional expert bias (DeepSeek-V3's aux-loss-free balancing), group-limited routing (a group's
 * score is the sum of its two best selection scores; the best group_topk groups compete), top-k
 * with ties to the lower expert index, optional normalisation and scaling; its backward; the
 * switch load-balancing loss, the ST-MoE z-loss and the bias update.
 *
 * One warp per token; lane l owns experts l, l + 32, ... Each selection round is a warp argmax
 * whose combine rule (higher value, then lower index) reproduces the CPU's sequential scan, so
 * the choices are the CPU's whenever the scores are. Scores use CUDA's expf (within 2 ulp of
 * glibc's), so they agree with the CPU to a few ulp, not bit for bit. Per-token scalars that the
 * CPU sums in k order (top-k sums) are summed in k order here too. Losses reduce in double over a
 * fixed launch shape, then one block finishes: deterministic, CPU-equal up to summation order.
 */
#include "kernels/cuda/cuda_common.cuh"

#include <math.h>

/* Group table bound, as the CPU's MAX_GROUPS (DeepSeek-V3 uses 8 groups). */
#define MAX_GROUPS      256
#define WARPS_PER_BLOCK 4

/* Warp argmax with the CPU's tie rule: higher value wins, equal values go to the lower index;
 * idx < 0 marks "no candidate". Every lane returns the winner. */
static __device__ void warp_argmax(float *value, int *idx)
{
    for (int off = 16; off > 0; off >>= 1) {
        float v = __shfl_xor_sync(0xffffffffu, *value, off);
        int i = __shfl_xor_sync(0xffffffffu, *idx, off);
        bool take = i >= 0 && (*idx < 0 || v > *value || (v == *value && i < *idx));
        if (take) {
            *value = v;
            *idx = i;
        }
    }
}

static __device__ __forceinline__ float sel_score(const float *s, const float *bias, int e)
{
    return bias != NULL ? s[e] + bias[e] : s[e];
}

/* s[E] (shared) = softmax or sigmoid of the logits row, written to scores_row too. */
static __device__ void scores_warp(
    float *s, float *scores_row, const float *logits, int num_experts, int score_fn, int lane)
{
    if (score_fn == MOE_K_SCORE_SIGMOID) {
        for (int e = lane; e < num_experts; e += 32) {
            s[e] = 1.0f / (1.0f + expf(-logits[e]));
        }
    } else {
        float max = -INFINITY;
        for (int e = lane; e < num_experts; e += 32) {
            max = fmaxf(max, logits[e]);
        }
        max = moe_warp_max(max);
        double sum = 0.0;
        for (int e = lane; e < num_experts; e += 32) {
            s[e] = expf(logits[e] - max);
            sum += (double)s[e];
        }
        sum = moe_warp_sum(sum);
        float inv = (float)(1.0 / sum);
        for (int e = lane; e < num_experts; e += 32) {
            s[e] *= inv;
        }
    }
    for (int e = lane; e < num_experts; e += 32) {
        scores_row[e] = s[e];
    }
    __syncwarp();
}

/* blocked[e] = 1 for experts outside the best group_topk groups (pick_groups on the CPU). */
static __device__ void block_groups(unsigned char *blocked,
                                    float *group_score,
                                    unsigned char *group_taken,
                                    const float *s,
                                    const float *bias,
                                    int num_experts,
                                    int num_groups,
                                    int group_topk,
                                    int lane)
{
    int size = num_experts / num_groups;
    for (int g = lane; g < num_groups; g += 32) {
        float best = -INFINITY;
        float second = -INFINITY;
        for (int e = g * size; e < (g + 1) * size; e++) {
            float v = sel_score(s, bias, e);
            if (v > best) {
                second = best;
                best = v;
            } else if (v > second) {
                second = v;
            }
        }
        group_score[g] = size > 1 ? best + second : best;
        group_taken[g] = 0;
    }
    __syncwarp();
    for (int i = 0; i < group_topk; i++) {
        float v = 0.0f;
        int pick = -1;
        for (int g = lane; g < num_groups; g += 32) {
            if (!group_taken[g] && (pick < 0 || group_score[g] > v)) {
                pick = g;
                v = group_score[g];
            }
        }
        warp_argmax(&v, &pick);
        if (lane == 0) {
            group_taken[pick] = 1;
        }
        __syncwarp();
    }
    for (int e = lane; e < num_experts; e += 32) {
        blocked[e] = group_taken[e / size] ? 0 : 1;
    }
    __syncwarp();
}

struct router_args {
    int num_tokens, num_experts, topk, num_groups, group_topk;
    int score_fn;
    bool normalize_topk;
    float scaling_factor;
};

static __global__ void router_fwd_kernel(int *topk_idx,
                                         float *topk_weight,
                                         float *scores,
                                         const float *logits,
                                         const float *bias,
                                         struct router_args a)
{
    extern __shared__ float smem[];
    int lane = threadIdx.x & 31;
    int warp = threadIdx.x >> 5;
    int num_e = a.num_experts;
    /* Per warp: s[E] floats, group_score[G] floats, blocked[E] bytes, group_taken[G] bytes. */
    size_t per_warp_floats = (size_t)num_e + (size_t)a.num_groups;
    size_t per_warp_bytes = (size_t)num_e + (size_t)a.num_groups;
    float *s = smem + (size_t)warp * per_warp_floats;
    float *group_score = s + num_e;
    unsigned char *bytes = (unsigned char *)(smem + WARPS_PER_BLOCK * per_warp_floats);
    unsigned char *blocked = bytes + (size_t)warp * per_warp_bytes;
    unsigned char *group_taken = blocked + num_e;
    bool grouped = a.num_groups > 1;
    for (int t = blockIdx.x * WARPS_PER_BLOCK + warp; t < a.num_tokens;
         t += gridDim.x * WARPS_PER_BLOCK) {
        scores_warp(s, scores + (size_t)t * (size_t)num_e, logits + (size_t)t * (size_t)num_e,
                    num_e, a.score_fn, lane);
        if (grouped) {
            block_groups(blocked, group_score, group_taken, s, bias, num_e, a.num_groups,
                         a.group_topk, lane);
        } else {
            for (int e = lane; e < num_e; e += 32) {
                blocked[e] = 0;
            }
            __syncwarp();
        }
        int *idx = topk_idx + (size_t)t * (size_t)a.topk;
        float *w = topk_weight + (size_t)t * (size_t)a.topk;
        for (int k = 0; k < a.topk; k++) {
            float v = 0.0f;
            int best = -1;
            for (int e = lane; e < num_e; e += 32) {
                float x = sel_score(s, bias, e);
                if (!blocked[e] && (best < 0 || x > v)) {
                    best = e;
                    v = x;
                }
            }
            warp_argmax(&v, &best);
            if (lane == 0) {
                idx[k] = best;
                blocked[best] = 1; /* chosen: out of later rounds */
            }
            __syncwarp();
        }
        if (lane == 0) {
            float sum = 0.0f;
            for (int k = 0; k < a.topk; k++) {
                w[k] = s[idx[k]];
                sum += w[k];
            }
            for (int k = 0; k < a.topk; k++) {
                w[k] = (a.normalize_topk ? w[k] / sum : w[k]) * a.scaling_factor;
            }
        }
        __syncwarp();
    }
}

static unsigned token_blocks(int num_tokens)
{
    size_t b = ((size_t)num_tokens + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK;
    return (unsigned)(b < 1 ? 1 : (b > MOE_K_CUDA_MAX_BLOCKS ? MOE_K_CUDA_MAX_BLOCKS : b));
}

extern "C" void moe_k_cuda_router_fwd(int *topk_idx,
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
                                      moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_tokens >= 0 && num_experts > 0 && topk > 0 && topk <= num_experts);
    bool grouped = num_groups > 1;
    int group_size = grouped ? num_experts / num_groups : num_experts;
    MOE_ASSERT(!grouped ||
               (num_groups <= MAX_GROUPS && num_experts % num_groups == 0 && group_topk > 0 &&
                group_topk <= num_groups && group_topk * group_size >= topk));
    if (num_tokens == 0) {
        return;
    }
    struct router_args a = {num_tokens, num_experts,   topk,           grouped ? num_groups : 1,
                            group_topk, (int)score_fn, normalize_topk, scaling_factor};
    size_t per_warp = ((size_t)num_experts + (size_t)a.num_groups) * (sizeof(float) + 1);
    size_t smem = WARPS_PER_BLOCK * per_warp;
    /* 48 KiB of dynamic shared memory without opting in: up to ~2400 experts. */
    MOE_ASSERT(smem <= 48u * 1024u);
    router_fwd_kernel<<<token_blocks(num_tokens), WARPS_PER_BLOCK * 32, smem,
                        moe_k_cuda_stream(ctx)>>>(topk_idx, topk_weight, scores, logits,
                                                  expert_bias, a);
    MOE_CHECK_LAUNCH();
}

/* ---- Backward ----------------------------------------------------------------------------------
 */

static __global__ void router_bwd_kernel(float *d_logits,
                                         const float *d_topk_weight,
                                         const float *d_scores,
                                         const float *scores,
                                         const int *topk_idx,
                                         struct router_args a)
{
    int lane = threadIdx.x & 31;
    int warp = threadIdx.x >> 5;
    int num_e = a.num_experts;
    for (int t = blockIdx.x * WARPS_PER_BLOCK + warp; t < a.num_tokens;
         t += gridDim.x * WARPS_PER_BLOCK) {
        const float *s = scores + (size_t)t * (size_t)num_e;
        const int *idx = topk_idx + (size_t)t * (size_t)a.topk;
        const float *dw = d_topk_weight + (size_t)t * (size_t)a.topk;
        float *g = d_logits + (size_t)t * (size_t)num_e; /* d(scores), then d(logits) */
        for (int e = lane; e < num_e; e += 32) {
            g[e] = d_scores != NULL ? d_scores[(size_t)t * (size_t)num_e + (size_t)e] : 0.0f;
        }
        /* Every lane computes the k-order sums the CPU computes (identical on all lanes). */
        float sum = 0.0f;
        double dot = 0.0;
        for (int k = 0; k < a.topk; k++) {
            sum += s[idx[k]];
            dot += (double)dw[k] * (double)s[idx[k]];
        }
        for (int k = 0; k < a.topk; k++) {
            int e = idx[k];
            if (e % 32 == lane) {
                float d = a.normalize_topk ? __fsub_rn(__fdiv_rn(dw[k], sum),
                                                       (float)(dot / ((double)sum * (double)sum)))
                                           : dw[k];
                g[e] = __fadd_rn(g[e], __fmul_rn(a.scaling_factor, d));
            }
        }
        if (a.score_fn == MOE_K_SCORE_SIGMOID) {
            for (int e = lane; e < num_e; e += 32) {
                g[e] *= s[e] * (1.0f - s[e]);
            }
        } else {
            double pg = 0.0;
            for (int e = lane; e < num_e; e += 32) {
                pg += (double)s[e] * (double)g[e];
            }
            pg = moe_warp_sum(pg);
            for (int e = lane; e < num_e; e += 32) {
                g[e] = s[e] * (g[e] - (float)pg);
            }
        }
    }
}

extern "C" void moe_k_cuda_router_bwd(float *d_logits,
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
                                      moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_tokens >= 0 && num_experts > 0 && topk > 0);
    if (num_tokens == 0) {
        return;
    }
    struct router_args a = {num_tokens, num_experts,   topk,           1,
                            0,          (int)score_fn, normalize_topk, scaling_factor};
    router_bwd_kernel<<<token_blocks(num_tokens), WARPS_PER_BLOCK * 32, 0,
                        moe_k_cuda_stream(ctx)>>>(d_logits, d_topk_weight, d_scores, scores,
                                                  topk_idx, a);
    MOE_CHECK_LAUNCH();
}

/* ---- Losses ------------------------------------------------------------------------------------
 */

/* coeff * E / (K * T_tot^2): Megatron-LM switch_load_balancing_loss_func's factor. */
static double aux_factor(int num_tokens_total, int num_experts, int topk, float coeff)
{
    double t = (double)num_tokens_total;
    return (double)coeff * (double)num_experts / ((double)topk * t * t);
}

/* Per token: sum_e counts[e] s[e] (divided by the row sum for sigmoid); partial[block] sums the
 * block's tokens in double. Fixed grid of MOE_K_CUDA_REDUCE_BLOCKS blocks. */
static __global__ void aux_loss_partial_kernel(double *partial,
                                               const float *scores,
                                               const int *counts,
                                               int num_tokens,
                                               int num_experts,
                                               int score_fn)
{
    __shared__ double shared[32];
    int lane = threadIdx.x & 31;
    int warp = threadIdx.x >> 5;
    double acc = 0.0;
    for (int t = blockIdx.x * WARPS_PER_BLOCK + warp; t < num_tokens;
         t += gridDim.x * WARPS_PER_BLOCK) {
        const float *s = scores + (size_t)t * (size_t)num_experts;
        double row = 0.0;
        double norm = 0.0;
        for (int e = lane; e < num_experts; e += 32) {
            row += (double)counts[e] * (double)s[e];
            norm += (double)s[e];
        }
        row = moe_warp_sum(row);
        norm = moe_warp_sum(norm);
        if (lane == 0) {
            acc += score_fn == MOE_K_SCORE_SIGMOID ? row / norm : row;
        }
    }
    acc = moe_block_sum(acc, shared);
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = acc;
    }
}

extern "C" void moe_k_cuda_router_aux_loss_fwd(float *loss,
                                               const float *scores,
                                               const int *counts,
                                               int num_tokens,
                                               int num_tokens_total,
                                               int num_experts,
                                               int topk,
                                               enum moe_k_score_fn score_fn,
                                               float coeff,
                                               moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_tokens >= 0 && num_tokens_total > 0 && num_experts > 0 && topk > 0);
    double *partial = (double *)moe_k_cuda_state_of(ctx)->scratch;
    aux_loss_partial_kernel<<<MOE_K_CUDA_REDUCE_BLOCKS, WARPS_PER_BLOCK * 32, 0,
                              moe_k_cuda_stream(ctx)>>>(partial, scores, counts, num_tokens,
                                                        num_experts, (int)score_fn);
    MOE_CHECK_LAUNCH();
    moe_k_cuda_finish_sum(loss, partial, MOE_K_CUDA_REDUCE_BLOCKS,
                          aux_factor(num_tokens_total, num_experts, topk, coeff), ctx);
}

static __global__ void aux_loss_bwd_kernel(float *d_scores,
                                           const float *scores,
                                           const int *counts,
                                           int num_tokens,
                                           int num_experts,
                                           int score_fn,
                                           double f)
{
    int lane = threadIdx.x & 31;
    int warp = threadIdx.x >> 5;
    for (int t = blockIdx.x * WARPS_PER_BLOCK + warp; t < num_tokens;
         t += gridDim.x * WARPS_PER_BLOCK) {
        const float *s = scores + (size_t)t * (size_t)num_experts;
        float *d = d_scores + (size_t)t * (size_t)num_experts;
        if (score_fn != MOE_K_SCORE_SIGMOID) {
            for (int e = lane; e < num_experts; e += 32) {
                d[e] = (float)(f * (double)counts[e]);
            }
            continue;
        }
        /* P_e = s_e / S: dL/ds_j = f (c_j - sum_e c_e P_e) / S. */
        double sum = 0.0;
        double cp = 0.0;
        for (int e = lane; e < num_experts; e += 32) {
            sum += (double)s[e];
            cp += (double)counts[e] * (double)s[e];
        }
        sum = moe_warp_sum(sum);
        cp = moe_warp_sum(cp) / sum;
        for (int e = lane; e < num_experts; e += 32) {
            d[e] = (float)(f * ((double)counts[e] - cp) / sum);
        }
    }
}

extern "C" void moe_k_cuda_router_aux_loss_bwd(float *d_scores,
                                               const float *scores,
                                               const int *counts,
                                               int num_tokens,
                                               int num_tokens_total,
                                               int num_experts,
                                               int topk,
                                               enum moe_k_score_fn score_fn,
                                               float coeff,
                                               float d_loss,
                                               moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_tokens >= 0 && num_tokens_total > 0 && num_experts > 0 && topk > 0);
    if (num_tokens == 0) {
        return;
    }
    double f = (double)d_loss * aux_factor(num_tokens_total, num_experts, topk, coeff);
    aux_loss_bwd_kernel<<<token_blocks(num_tokens), WARPS_PER_BLOCK * 32, 0,
                          moe_k_cuda_stream(ctx)>>>(d_scores, scores, counts, num_tokens,
                                                    num_experts, (int)score_fn, f);
    MOE_CHECK_LAUNCH();
}

/* log(sum(exp(x))) of one row in double, by one warp (every lane returns it). */
static __device__ double logsumexp_warp(const float *x, int n, int lane)
{
    float max = -INFINITY;
    for (int e = lane; e < n; e += 32) {
        max = fmaxf(max, x[e]);
    }
    max = moe_warp_max(max);
    double sum = 0.0;
    for (int e = lane; e < n; e += 32) {
        sum += exp((double)x[e] - (double)max);
    }
    sum = moe_warp_sum(sum);
    return (double)max + log(sum);
}

static __global__ void
z_loss_partial_kernel(double *partial, const float *logits, int num_tokens, int num_experts)
{
    __shared__ double shared[32];
    int lane = threadIdx.x & 31;
    int warp = threadIdx.x >> 5;
    double acc = 0.0;
    for (int t = blockIdx.x * WARPS_PER_BLOCK + warp; t < num_tokens;
         t += gridDim.x * WARPS_PER_BLOCK) {
        double z = logsumexp_warp(logits + (size_t)t * (size_t)num_experts, num_experts, lane);
        if (lane == 0) {
            acc += z * z;
        }
    }
    acc = moe_block_sum(acc, shared);
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = acc;
    }
}

extern "C" void moe_k_cuda_router_z_loss_fwd(float *loss,
                                             const float *logits,
                                             int num_tokens,
                                             int num_tokens_total,
                                             int num_experts,
                                             float coeff,
                                             moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_tokens >= 0 && num_tokens_total > 0 && num_experts > 0);
    double *partial = (double *)moe_k_cuda_state_of(ctx)->scratch;
    z_loss_partial_kernel<<<MOE_K_CUDA_REDUCE_BLOCKS, WARPS_PER_BLOCK * 32, 0,
                            moe_k_cuda_stream(ctx)>>>(partial, logits, num_tokens, num_experts);
    MOE_CHECK_LAUNCH();
    moe_k_cuda_finish_sum(loss, partial, MOE_K_CUDA_REDUCE_BLOCKS,
                          (double)coeff / (double)num_tokens_total, ctx);
}

static __global__ void
z_loss_bwd_kernel(float *d_logits, const float *logits, int num_tokens, int num_experts, double f)
{
    int lane = threadIdx.x & 31;
    int warp = threadIdx.x >> 5;
    for (int t = blockIdx.x * WARPS_PER_BLOCK + warp; t < num_tokens;
         t += gridDim.x * WARPS_PER_BLOCK) {
        const float *x = logits + (size_t)t * (size_t)num_experts;
        float *d = d_logits + (size_t)t * (size_t)num_experts;
        double z = logsumexp_warp(x, num_experts, lane);
        for (int e = lane; e < num_experts; e += 32) {
            d[e] += (float)(f * z * exp((double)x[e] - z));
        }
    }
}

extern "C" void moe_k_cuda_router_z_loss_bwd(float *d_logits,
                                             const float *logits,
                                             int num_tokens,
                                             int num_tokens_total,
                                             int num_experts,
                                             float coeff,
                                             float d_loss,
                                             moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_tokens >= 0 && num_tokens_total > 0 && num_experts > 0);
    if (num_tokens == 0) {
        return;
    }
    double f = 2.0 * (double)d_loss * (double)coeff / (double)num_tokens_total;
    z_loss_bwd_kernel<<<token_blocks(num_tokens), WARPS_PER_BLOCK * 32, 0,
                        moe_k_cuda_stream(ctx)>>>(d_logits, logits, num_tokens, num_experts, f);
    MOE_CHECK_LAUNCH();
}

/* One block: mean of the counts (exact in double), then bias[e] += rate * sign(mean - c_e). */
static __global__ void
bias_update_kernel(float *bias, const int *counts, int num_experts, float rate)
{
    __shared__ double shared[32];
    double acc = 0.0;
    for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {
        acc += (double)counts[e];
    }
    double mean = moe_block_sum(acc, shared) / (double)num_experts;
    for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {
        double c = (double)counts[e];
        float sign = c < mean ? 1.0f : (c > mean ? -1.0f : 0.0f);
        bias[e] += rate * sign;
    }
}

extern "C" void moe_k_cuda_router_bias_update(
    float *bias, const int *counts, int num_experts, float rate, moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_experts > 0);
    bias_update_kernel<<<1, MOE_K_CUDA_THREADS, 0, moe_k_cuda_stream(ctx)>>>(bias, counts,
                                                                             num_experts, rate);
    MOE_CHECK_LAUNCH();
}
