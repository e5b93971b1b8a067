/*
 * MoE router on the CPU, from logits[M, E] (the router GEMM is an ordinary linear_fwd done by the
 * caller): softmax or sigmoid scores, optional expert bias for selection only (DeepSeek-V3's
 * aux-loss-free balancing), group-limited routing (DeepSeek-V3: a group's score is the sum of its
 * two best experts, only the best group_topk groups compete), top-k with ties to the lower expert
 * index, optional normalisation and scaling of the top-k weights; the switch-style load-balancing
 * loss as Megatron-LM's switch_load_balancing_loss_func, the ST-MoE z-loss, and the bias update.
 * Softmax normalisers and loss sums accumulate in double; everything is per token and in index
 * order, so results are deterministic.
 */
#include "kernels/cpu/cpu.h"

#include <math.h>

/* Fixed bound for the per-token group table (DeepSeek-V3 uses 8 groups; node-limited routing
 * uses one group per node). */
#define MAX_GROUPS 256

static void scores_row(float *s, const float *logits, int num_experts, enum moe_k_score_fn fn)
{
    if (fn == MOE_K_SCORE_SIGMOID) {
        for (int e = 0; e < num_experts; e++) {
            s[e] = 1.0f / (1.0f + expf(-logits[e]));
        }
        return;
    }
    float max = logits[0];
    for (int e = 1; e < num_experts; e++) {
        max = logits[e] > max ? logits[e] : max;
    }
    double sum = 0.0;
    for (int e = 0; e < num_experts; e++) {
        s[e] = expf(logits[e] - max);
        sum += (double)s[e];
    }
    float inv = (float)(1.0 / sum);
    for (int e = 0; e < num_experts; e++) {
        s[e] *= inv;
    }
}

static float selection_score(const float *s, const float *bias, int e)
{
    return bias != NULL ? s[e] + bias[e] : s[e];
}

/* allowed[g] = true for the group_topk groups with the highest top-2 sums (ties: lower index). */
static void pick_groups(bool *allowed,
                        const float *s,
                        const float *bias,
                        int num_experts,
                        int num_groups,
                        int group_topk)
{
    float group_score[MAX_GROUPS];
    int size = num_experts / num_groups;
    for (int g = 0; g < num_groups; g++) {
        float best = -INFINITY;
        float second = -INFINITY;
        for (int e = g * size; e < (g + 1) * size; e++) {
            float v = selection_score(s, bias, e);
            if (v > best) {
                second = best;
                best = v;
            } else if (v > second) {
                second = v;
            }
        }
        group_score[g] = size > 1 ? best + second : best;
        allowed[g] = false;
    }
    for (int i = 0; i < group_topk; i++) {
        int pick = -1;
        for (int g = 0; g < num_groups; g++) {
            if (!allowed[g] && (pick < 0 || group_score[g] > group_score[pick])) {
                pick = g;
            }
        }
        allowed[pick] = true;
    }
}

static bool already_chosen(const int *idx, int num_chosen, int e)
{
    for (int i = 0; i < num_chosen; i++) {
        if (idx[i] == e) {
            return true;
        }
    }
    return false;
}

/* Top-k of one token: idx[K] by descending selection score among allowed groups. */
static void select_topk(int *idx,
                        const float *s,
                        const float *bias,
                        const bool *group_ok,
                        int group_size,
                        int num_experts,
                        int topk)
{
    for (int k = 0; k < topk; k++) {
        int best = -1;
        float best_v = 0.0f;
        for (int e = 0; e < num_experts; e++) {
            if ((group_ok != NULL && !group_ok[e / group_size]) || already_chosen(idx, k, e)) {
                continue;
            }
            float v = selection_score(s, bias, e);
            if (best < 0 || v > best_v) {
                best = e;
                best_v = v;
            }
        }
        MOE_ASSERT(best >= 0);
        idx[k] = best;
    }
}

void moe_k_cpu_router_fwd(int *topk_idx,
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
    (void)ctx;
    MOE_ASSERT(num_tokens >= 0 && num_experts > 0 && topk > 0 && topk <= num_experts);
    bool grouped = num_groups > 1;
    int group_size = grouped ? num_experts / num_groups : num_experts;
    MOE_ASSERT(!grouped ||
               (num_groups <= MAX_GROUPS && num_experts % num_groups == 0 && group_topk > 0 &&
                group_topk <= num_groups && group_topk * group_size >= topk));
    bool group_ok[MAX_GROUPS];
    for (int t = 0; t < num_tokens; t++) {
        float *s = scores + (size_t)t * (size_t)num_experts;
        int *idx = topk_idx + (size_t)t * (size_t)topk;
        float *w = topk_weight + (size_t)t * (size_t)topk;
        scores_row(s, logits + (size_t)t * (size_t)num_experts, num_experts, score_fn);
        if (grouped) {
            pick_groups(group_ok, s, expert_bias, num_experts, num_groups, group_topk);
        }
        select_topk(idx, s, expert_bias, grouped ? group_ok : NULL, group_size, num_experts, topk);
        float sum = 0.0f;
        for (int k = 0; k < topk; k++) {
            w[k] = s[idx[k]];
            sum += w[k];
        }
        for (int k = 0; k < topk; k++) {
            w[k] = (normalize_topk ? w[k] / sum : w[k]) * scaling_factor;
        }
    }
}

void moe_k_cpu_router_bwd(float *d_logits,
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
    (void)ctx;
    MOE_ASSERT(num_tokens >= 0 && num_experts > 0 && topk > 0);
    for (int t = 0; t < num_tokens; t++) {
        const float *s = scores + (size_t)t * (size_t)num_experts;
        const int *idx = topk_idx + (size_t)t * (size_t)topk;
        const float *dw = d_topk_weight + (size_t)t * (size_t)topk;
        float *g = d_logits + (size_t)t * (size_t)num_experts; /* first d(scores), then d(logits) */
        for (int e = 0; e < num_experts; e++) {
            g[e] = d_scores != NULL ? d_scores[(size_t)t * (size_t)num_experts + (size_t)e] : 0.0f;
        }
        /* Through w_k = sf * s_k / S (S = sum of chosen scores) or w_k = sf * s_k. */
        float sum = 0.0f;
        double dot = 0.0; /* sum_k dw_k s_k */
        for (int k = 0; k < topk; k++) {
            sum += s[idx[k]];
            dot += (double)dw[k] * (double)s[idx[k]];
        }
        for (int k = 0; k < topk; k++) {
            float d =
                normalize_topk ? dw[k] / sum - (float)(dot / ((double)sum * (double)sum)) : dw[k];
            g[idx[k]] += scaling_factor * d;
        }
        /* Through the score function. */
        if (score_fn == MOE_K_SCORE_SIGMOID) {
            for (int e = 0; e < num_experts; e++) {
                g[e] *= s[e] * (1.0f - s[e]);
            }
        } else {
            double pg = 0.0;
            for (int e = 0; e < num_experts; e++) {
                pg += (double)s[e] * (double)g[e];
            }
            for (int e = 0; e < num_experts; e++) {
                g[e] = s[e] * (g[e] - (float)pg);
            }
        }
    }
}

/* coeff * E / (K * T_tot^2): Megatron-LM switch_load_balancing_loss_func's factor. */
static double aux_factor(int num_tokens_total, int num_experts, int topk, float coeff)
{
    double t = (double)num_tokens_total;
    return (double)coeff * (double)num_experts / ((double)topk * t * t);
}

static double row_sum(const float *s, int n)
{
    double sum = 0.0;
    for (int e = 0; e < n; e++) {
        sum += (double)s[e];
    }
    return sum;
}

void moe_k_cpu_router_aux_loss_fwd(float *loss,
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
    (void)ctx;
    MOE_ASSERT(num_tokens >= 0 && num_tokens_total > 0 && num_experts > 0 && topk > 0);
    double acc = 0.0;
    for (int t = 0; t < num_tokens; t++) {
        const float *s = scores + (size_t)t * (size_t)num_experts;
        double norm = score_fn == MOE_K_SCORE_SIGMOID ? row_sum(s, num_experts) : 1.0;
        double row = 0.0;
        for (int e = 0; e < num_experts; e++) {
            row += (double)counts[e] * (double)s[e];
        }
        acc += row / norm;
    }
    *loss = (float)(aux_factor(num_tokens_total, num_experts, topk, coeff) * acc);
}

void moe_k_cpu_router_aux_loss_bwd(float *d_scores,
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
    (void)ctx;
    MOE_ASSERT(num_tokens >= 0 && num_tokens_total > 0 && num_experts > 0 && topk > 0);
    double f = (double)d_loss * aux_factor(num_tokens_total, num_experts, topk, coeff);
    for (int t = 0; t < num_tokens; t++) {
        const float *s = scores + (size_t)t * (size_t)num_experts;
        float *d = d_scores + (size_t)t * (size_t)num_experts;
        if (score_fn != MOE_K_SCORE_SIGMOID) {
            for (int e = 0; e < num_experts; e++) {
                d[e] = (float)(f * (double)counts[e]);
            }
            continue;
        }
        /* P_e = s_e / S: dL/ds_j = f * (c_j - sum_e c_e P_e) / S. */
        double sum = row_sum(s, num_experts);
        double cp = 0.0;
        for (int e = 0; e < num_experts; e++) {
            cp += (double)counts[e] * (double)s[e];
        }
        cp /= sum;
        for (int e = 0; e < num_experts; e++) {
            d[e] = (float)(f * ((double)counts[e] - cp) / sum);
        }
    }
}

/* log(sum(exp(x))) of one row, in double. */
static double logsumexp_row(const float *x, int n)
{
    float max = x[0];
    for (int e = 1; e < n; e++) {
        max = x[e] > max ? x[e] : max;
    }
    double sum = 0.0;
    for (int e = 0; e < n; e++) {
        sum += exp((double)x[e] - (double)max);
    }
    /* n >= 1 and the max term is exp(0) = 1, so sum >= 1. */
    // cppcheck-suppress invalidFunctionArg
    return (double)max + log(sum);
}

void moe_k_cpu_router_z_loss_fwd(float *loss,
                                 const float *logits,
                                 int num_tokens,
                                 int num_tokens_total,
                                 int num_experts,
                                 float coeff,
                                 moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(num_tokens >= 0 && num_tokens_total > 0 && num_experts > 0);
    double acc = 0.0;
    for (int t = 0; t < num_tokens; t++) {
        double z = logsumexp_row(logits + (size_t)t * (size_t)num_experts, num_experts);
        acc += z * z;
    }
    *loss = (float)((double)coeff / (double)num_tokens_total * acc);
}

void moe_k_cpu_router_z_loss_bwd(float *d_logits,
                                 const float *logits,
                                 int num_tokens,
                                 int num_tokens_total,
                                 int num_experts,
                                 float coeff,
                                 float d_loss,
                                 moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(num_tokens >= 0 && num_tokens_total > 0 && num_experts > 0);
    double f = 2.0 * (double)d_loss * (double)coeff / (double)num_tokens_total;
    for (int t = 0; t < num_tokens; t++) {
        const float *x = logits + (size_t)t * (size_t)num_experts;
        float *d = d_logits + (size_t)t * (size_t)num_experts;
        double z = logsumexp_row(x, num_experts);
        for (int e = 0; e < num_experts; e++) {
            d[e] += (float)(f * z * exp((double)x[e] - z));
        }
    }
}

void moe_k_cpu_router_bias_update(
    float *bias, const int *counts, int num_experts, float rate, moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(num_experts > 0);
    double mean = 0.0;
    for (int e = 0; e < num_experts; e++) {
        mean += (double)counts[e];
    }
    mean /= (double)num_experts;
    for (int e = 0; e < num_experts; e++) {
        double c = (double)counts[e];
        float sign = c < mean ? 1.0f : (c > mean ? -1.0f : 0.0f);
        bias[e] += rate * sign;
    }
}
