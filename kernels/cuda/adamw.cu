/*
 * AdamW on fp32 master weights on the GPU, bit for bit the CPU's kernels/cpu/adamw.c (itself
 * torch.optim.AdamW's single-tensor step): the bias corrections and derived scalars are computed
 * on the host in double exactly as the CPU computes them, and the per-element update is written
 * with explicit round-to-nearest intrinsics (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn) so nvcc
 * cannot contract a multiply-add into an FMA that the CPU does not use.
 */
#include "kernels/cuda/cuda_common.cuh"

#include <math.h>

struct adamw_scalars {
    float step_size; /* lr / (1 - beta1^t) */
    float bc2_sqrt;  /* sqrt(1 - beta2^t) */
    float decay;     /* 1 - lr * weight_decay */
    float w1, w2;    /* 1 - beta1, 1 - beta2 */
    float beta2, eps, grad_scale;
};

static __global__ void
adamw_kernel(float *param, float *m, float *v, const float *grad, size_t n, struct adamw_scalars a)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float g = __fmul_rn(grad[i], a.grad_scale);
        float p = __fmul_rn(param[i], a.decay);
        float mi = m[i];
        /* torch: exp_avg.lerp_(grad, 1 - beta1) */
        mi = a.w1 < 0.5f ? __fadd_rn(mi, __fmul_rn(a.w1, __fsub_rn(g, mi)))
                         : __fsub_rn(g, __fmul_rn(__fsub_rn(g, mi), __fsub_rn(1.0f, a.w1)));
        float vi = __fadd_rn(__fmul_rn(v[i], a.beta2), __fmul_rn(__fmul_rn(a.w2, g), g));
        float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), a.bc2_sqrt), a.eps);
        p = __fsub_rn(p, __fmul_rn(a.step_size, __fdiv_rn(mi, denom)));
        m[i] = mi;
        v[i] = vi;
        param[i] = p;
    }
}

extern "C" void moe_k_cuda_adamw_step(float *param,
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
    MOE_ASSERT(step >= 1);
    if (n == 0) {
        return;
    }
    double bc1 = 1.0 - pow((double)beta1, (double)step);
    double bc2 = 1.0 - pow((double)beta2, (double)step);
    struct adamw_scalars a;
    a.step_size = (float)((double)lr / bc1);
    a.bc2_sqrt = (float)sqrt(bc2);
    a.decay = (float)(1.0 - (double)lr * (double)weight_decay);
    a.w1 = (float)(1.0 - (double)beta1);
    a.w2 = (float)(1.0 - (double)beta2);
    a.beta2 = beta2;
    a.eps = eps;
    a.grad_scale = grad_scale;
    adamw_kernel<<<moe_k_cuda_blocks(n, MOE_K_CUDA_THREADS), MOE_K_CUDA_THREADS, 0,
                   moe_k_cuda_stream(ctx)>>>(param, m, v, grad, n, a);
    MOE_CHECK_LAUNCH();
}
