/*
 * CPU memory helpers (fill, strided copy, axpy, scale, sums), pointwise activations (SwiGLU,
 * tanh-GELU) with their backward passes, and bias rows (add a bias to every row; column sums for
 * its gradient). Plain loops in index order; reductions accumulate in double so a sum does not
 * depend on anything but the data. SwiGLU follows Megatron-LM's fused fc1 layout (gate half, then
 * up half); GELU is GPT-2's tanh approximation as in llm.c.
 */
#include "kernels/cpu/cpu.h"

#include <math.h>

void moe_k_cpu_fill(float *x, size_t n, float value, moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(x != NULL || n == 0);
    for (size_t i = 0; i < n; i++) {
        x[i] = value;
    }
}

void moe_k_cpu_copy_2d(float *dst,
                       int dst_ld,
                       const float *src,
                       int src_ld,
                       int rows,
                       int cols,
                       bool accumulate,
                       moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(rows >= 0 && cols >= 0 && dst_ld >= cols && src_ld >= cols);
    for (int r = 0; r < rows; r++) {
        float *d = dst + (size_t)r * (size_t)dst_ld;
        const float *s = src + (size_t)r * (size_t)src_ld;
        for (int c = 0; c < cols; c++) {
            d[c] = accumulate ? d[c] + s[c] : s[c];
        }
    }
}

void moe_k_cpu_axpy(float *y, const float *x, size_t n, float alpha, moe_k_ctx_t *ctx)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++) {
        y[i] += alpha * x[i];
    }
}

void moe_k_cpu_scale(float *x, size_t n, float alpha, moe_k_ctx_t *ctx)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++) {
        x[i] *= alpha;
    }
}

void moe_k_cpu_sum(float *out, const float *x, size_t n, moe_k_ctx_t *ctx)
{
    (void)ctx;
    double acc = 0.0;
    for (size_t i = 0; i < n; i++) {
        acc += (double)x[i];
    }
    *out = (float)acc;
}

void moe_k_cpu_sum_squares(float *out, const float *x, size_t n, moe_k_ctx_t *ctx)
{
    (void)ctx;
    /* Eight independent double accumulators, element i into lane i % 8, summed in lane order at
     * the end: the same result on every run and vector width, and no serial add chain (one
     * accumulator ran at 2 ns per element, a quarter of this host's memory bandwidth). */
    enum { LANES = 8 };
    double acc[LANES] = {0.0};
    size_t body = n - n % LANES;
    for (size_t i = 0; i < body; i += LANES) {
#pragma omp simd
        for (size_t l = 0; l < LANES; l++) {
            acc[l] += (double)x[i + l] * (double)x[i + l];
        }
    }
    for (size_t i = body; i < n; i++) {
        acc[i - body] += (double)x[i] * (double)x[i];
    }
    double total = 0.0;
    for (size_t l = 0; l < LANES; l++) {
        total += acc[l];
    }
    *out = (float)total;
}

static float sigmoid_f32(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

void moe_k_cpu_swiglu_fwd(float *out, const float *in, int num_rows, int ffn, moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(num_rows >= 0 && ffn >= 0);
    for (int r = 0; r < num_rows; r++) {
        const float *gate = in + (size_t)r * 2 * (size_t)ffn;
        const float *up = gate + ffn;
        float *o = out + (size_t)r * (size_t)ffn;
        for (int j = 0; j < ffn; j++) {
            o[j] = gate[j] * sigmoid_f32(gate[j]) * up[j];
        }
    }
}

void moe_k_cpu_swiglu_bwd(
    float *d_in, const float *d_out, const float *in, int num_rows, int ffn, moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(num_rows >= 0 && ffn >= 0);
    for (int r = 0; r < num_rows; r++) {
        const float *gate = in + (size_t)r * 2 * (size_t)ffn;
        const float *up = gate + ffn;
        const float *dy = d_out + (size_t)r * (size_t)ffn;
        float *d_gate = d_in + (size_t)r * 2 * (size_t)ffn;
        float *d_up = d_gate + ffn;
        for (int j = 0; j < ffn; j++) {
            float s = sigmoid_f32(gate[j]);
            float silu = gate[j] * s;
            /* d silu(g)/dg = s + g s (1 - s) */
            d_gate[j] = dy[j] * up[j] * (s + silu * (1.0f - s));
            d_up[j] = dy[j] * silu;
        }
    }
}

/* sqrt(2/pi), the GELU tanh approximation's constant (Hendrycks & Gimpel 2016). */
#define GELU_SCALE 0.7978845608028654f
#define GELU_CUBIC 0.044715f

void moe_k_cpu_gelu_fwd(float *out, const float *in, size_t n, moe_k_ctx_t *ctx)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++) {
        float x = in[i];
        float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

void moe_k_cpu_gelu_bwd(
    float *d_in, const float *d_out, const float *in, size_t n, moe_k_ctx_t *ctx)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++) {
        float x = in[i];
        float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
        float t = tanhf(u);
        float sech2 = 1.0f - t * t;
        float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
        d_in[i] = d_out[i] * (0.5f * (1.0f + t) + 0.5f * x * sech2 * du);
    }
}

void moe_k_cpu_bias_fwd(float *y, const float *bias, int num_rows, int dim, moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(num_rows >= 0 && dim >= 0);
    for (int r = 0; r < num_rows; r++) {
        float *row = y + (size_t)r * (size_t)dim;
        for (int c = 0; c < dim; c++) {
            row[c] += bias[c];
        }
    }
}

void moe_k_cpu_bias_bwd(float *d_bias, const float *dy, int num_rows, int dim, moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(num_rows >= 0 && dim >= 0);
    for (int c = 0; c < dim; c++) {
        double acc = 0.0;
        for (int r = 0; r < num_rows; r++) {
            acc += (double)dy[(size_t)r * (size_t)dim + (size_t)c];
        }
        d_bias[c] += (float)acc;
    }
}
