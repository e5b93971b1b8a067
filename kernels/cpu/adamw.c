/*
 * AdamW (Loshchilov & Hutter 2019, decoupled weight decay) on fp32 master weights, written to
 * match torch.optim.AdamW's single-tensor update step by step: decay the parameter, update the
 * moments, then step with lr / (1 - beta1^t) against sqrt(v) / sqrt(1 - beta2^t) + eps. Bias
 * corrections are computed once per call in double and rounded to fp32, as PyTorch does on the
 * host. An optional grad_scale applies global-norm clipping without a separate pass.
 */
#include "kernels/cpu/cpu.h"

#include <math.h>

void moe_k_cpu_adamw_step(float *param,
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
                          moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(step >= 1);
    double bc1 = 1.0 - pow((double)beta1, (double)step);
    double bc2 = 1.0 - pow((double)beta2, (double)step);
    float step_size = (float)((double)lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    float decay = (float)(1.0 - (double)lr * (double)weight_decay);
    float w1 = (float)(1.0 - (double)beta1); /* torch: exp_avg.lerp_(grad, 1 - beta1) */
    float w2 = (float)(1.0 - (double)beta2);
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale;
        param[i] *= decay;
        m[i] = w1 < 0.5f ? m[i] + w1 * (g - m[i]) : g - (g - m[i]) * (1.0f - w1);
        v[i] = v[i] * beta2 + w2 * g * g;
        float denom = sqrtf(v[i]) / bc2_sqrt + eps;
        param[i] -= step_size * (m[i] / denom);
    }
}
