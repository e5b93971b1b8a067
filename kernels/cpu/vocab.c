/*
 * Vocab-parallel embedding and cross-entropy on the CPU (Megatron-LM's VocabParallelEmbedding and
 * vocab_parallel_cross_entropy): each rank holds vocabulary rows [v_start, v_end); the lookup
 * writes zeros for ids it does not own, and the loss is split into a local max, a local
 * sum of exponentials and a target-logit pick, so the engine all-reduces those across the tensor-
 * parallel group between the calls. With one rank (the whole vocabulary) the three calls give the
 * ordinary cross-entropy. Sums of exponentials accumulate in double; rows are independent.
 */
#include "kernels/cpu/cpu.h"

#include <math.h>
#include <string.h>

void moe_k_cpu_embedding_fwd(float *out,
                             const int *ids,
                             const float *table,
                             int num_tokens,
                             int hidden,
                             int v_start,
                             int v_end,
                             moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(num_tokens >= 0 && hidden > 0 && v_start <= v_end);
    size_t row_bytes = (size_t)hidden * sizeof(float);
    for (int i = 0; i < num_tokens; i++) {
        float *o = out + (size_t)i * (size_t)hidden;
        if (ids[i] >= v_start && ids[i] < v_end) {
            memcpy(o, table + (size_t)(ids[i] - v_start) * (size_t)hidden, row_bytes);
        } else {
            memset(o, 0, row_bytes);
        }
    }
}

void moe_k_cpu_embedding_bwd(float *d_table,
                             const float *d_out,
                             const int *ids,
                             int num_tokens,
                             int hidden,
                             int v_start,
                             int v_end,
                             moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(num_tokens >= 0 && hidden > 0 && v_start <= v_end);
    for (int i = 0; i < num_tokens; i++) {
        if (ids[i] < v_start || ids[i] >= v_end) {
            continue;
        }
        float *d = d_table + (size_t)(ids[i] - v_start) * (size_t)hidden;
        const float *g = d_out + (size_t)i * (size_t)hidden;
        for (int c = 0; c < hidden; c++) {
            d[c] += g[c];
        }
    }
}

void moe_k_cpu_xent_local_max(
    float *local_max, const float *logits, int num_tokens, int vocab_local, moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(num_tokens >= 0 && vocab_local > 0);
    for (int i = 0; i < num_tokens; i++) {
        const float *row = logits + (size_t)i * (size_t)vocab_local;
        float max = row[0];
        for (int v = 1; v < vocab_local; v++) {
            max = row[v] > max ? row[v] : max;
        }
        local_max[i] = max;
    }
}

void moe_k_cpu_xent_local_sumexp(float *sumexp,
                                 float *target_logit,
                                 const float *logits,
                                 const int *targets,
                                 const float *global_max,
                                 int num_tokens,
                                 int vocab_local,
                                 int v_start,
                                 moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(num_tokens >= 0 && vocab_local > 0);
    for (int i = 0; i < num_tokens; i++) {
        const float *row = logits + (size_t)i * (size_t)vocab_local;
        double sum = 0.0;
        for (int v = 0; v < vocab_local; v++) {
            sum += exp((double)row[v] - (double)global_max[i]);
        }
        sumexp[i] = (float)sum;
        int t = targets[i] - v_start;
        target_logit[i] = (targets[i] >= 0 && t >= 0 && t < vocab_local) ? row[t] : 0.0f;
    }
}

void moe_k_cpu_xent_loss(float *loss,
                         const float *global_max,
                         const float *global_sumexp,
                         const float *target_logit,
                         const int *targets,
                         int num_tokens,
                         moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(num_tokens >= 0);
    for (int i = 0; i < num_tokens; i++) {
        double l = log((double)global_sumexp[i]) + (double)global_max[i] - (double)target_logit[i];
        loss[i] = targets[i] < 0 ? 0.0f : (float)l;
    }
}

void moe_k_cpu_xent_bwd(float *d_logits,
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
    (void)ctx;
    MOE_ASSERT(num_tokens >= 0 && vocab_local > 0);
    for (int i = 0; i < num_tokens; i++) {
        const float *row = logits + (size_t)i * (size_t)vocab_local;
        float *d = d_logits + (size_t)i * (size_t)vocab_local;
        if (targets[i] < 0) {
            memset(d, 0, (size_t)vocab_local * sizeof(float));
            continue;
        }
        double inv_sum = 1.0 / (double)global_sumexp[i];
        int t = targets[i] - v_start;
        for (int v = 0; v < vocab_local; v++) {
            double p = exp((double)row[v] - (double)global_max[i]) * inv_sum;
            d[v] = (float)((double)d_loss * (p - (v == t ? 1.0 : 0.0)));
        }
    }
}
