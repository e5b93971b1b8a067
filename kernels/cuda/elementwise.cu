/*
 * CUDA memory helpers (fill, strided copy, axpy, scale), the two deterministic sums, and the
 * pointwise activations (SwiGLU in Megatron's fused fc1 layout, GPT-2's tanh GELU), twins of
 * kernels/cpu/elementwise.c. Grid-stride loops; the sums run a fixed number of blocks
 * (SUM_BLOCKS) in double, then one block adds the partials in a fixed tree, so the
 * result is the same on every run and device, and differs from the CPU's index-order double sum
 * only by rounding order. Activations use expf/tanhf (CUDA's, within 2 ulp), so they match the CPU
 * within a few ulp, not bit for bit.
 */
#include "kernels/cuda/cuda_common.cuh"

#include <math.h>
#include <stdint.h>

static __global__ void fill_kernel(float *x, size_t n, float value)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        x[i] = value;
    }
}

extern "C" void moe_k_cuda_fill(float *x, size_t n, float value, moe_k_ctx_t *ctx)
{
    if (n == 0) {
        return;
    }
    fill_kernel<<<moe_k_cuda_blocks(n, MOE_K_CUDA_THREADS), MOE_K_CUDA_THREADS, 0,
                  moe_k_cuda_stream(ctx)>>>(x, n, value);
    MOE_CHECK_LAUNCH();
}

static __global__ void copy_2d_kernel(
    float *dst, int dst_ld, const float *src, int src_ld, int rows, int cols, bool accumulate)
{
    size_t n = (size_t)rows * (size_t)cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / (size_t)cols;
        size_t c = i % (size_t)cols;
        float s = src[r * (size_t)src_ld + c];
        float *d = dst + r * (size_t)dst_ld + c;
        *d = accumulate ? *d + s : s;
    }
}

extern "C" void moe_k_cuda_copy_2d(float *dst,
                                   int dst_ld,
                                   const float *src,
                                   int src_ld,
                                   int rows,
                                   int cols,
                                   bool accumulate,
                                   moe_k_ctx_t *ctx)
{
    MOE_ASSERT(rows >= 0 && cols >= 0 && dst_ld >= cols && src_ld >= cols);
    size_t n = (size_t)rows * (size_t)cols;
    if (n == 0) {
        return;
    }
    copy_2d_kernel<<<moe_k_cuda_blocks(n, MOE_K_CUDA_THREADS), MOE_K_CUDA_THREADS, 0,
                     moe_k_cuda_stream(ctx)>>>(dst, dst_ld, src, src_ld, rows, cols, accumulate);
    MOE_CHECK_LAUNCH();
}

static __global__ void axpy_kernel(float *y, const float *x, size_t n, float alpha)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        /* y + alpha * x without contraction to FMA, as the CPU computes it. */
        y[i] = __fadd_rn(y[i], __fmul_rn(alpha, x[i]));
    }
}

extern "C" void moe_k_cuda_axpy(float *y, const float *x, size_t n, float alpha, moe_k_ctx_t *ctx)
{
    if (n == 0) {
        return;
    }
    axpy_kernel<<<moe_k_cuda_blocks(n, MOE_K_CUDA_THREADS), MOE_K_CUDA_THREADS, 0,
                  moe_k_cuda_stream(ctx)>>>(y, x, n, alpha);
    MOE_CHECK_LAUNCH();
}

static __global__ void scale_kernel(float *x, size_t n, float alpha)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        x[i] *= alpha;
    }
}

extern "C" void moe_k_cuda_scale(float *x, size_t n, float alpha, moe_k_ctx_t *ctx)
{
    if (n == 0) {
        return;
    }
    scale_kernel<<<moe_k_cuda_blocks(n, MOE_K_CUDA_THREADS), MOE_K_CUDA_THREADS, 0,
                   moe_k_cuda_stream(ctx)>>>(x, n, alpha);
    MOE_CHECK_LAUNCH();
}

/*
 * partial[blockIdx] = sum over this block's grid-stride share of x (or x^2), in double. Aligned
 * inputs are read as float4 (the 16-byte-aligned body; the few elements before and after it by
 * block 0), four independent sums per thread. With 256 blocks of scalar loads the gradient-norm
 * sums ran at ~640 GB/s on an H200 (8 ms of a gpu-moe step); SUM_BLOCKS blocks of float4 keep
 * enough loads in flight.
 */
#define SUM_BLOCKS 1024

static __device__ __forceinline__ double sum_term(float x, bool squares)
{
    double v = (double)x;
    return squares ? v * v : v;
}

static __global__ void partial_sum_kernel(double *partial, const float *x, size_t n, bool squares)
{
    __shared__ double shared[32];
    size_t head = (size_t)((16 - ((uintptr_t)x & 15)) & 15) / sizeof(float); /* to alignment */
    if (((uintptr_t)x & 3) != 0 || head > n) {
        head = n; /* not float-aligned (never for cudaMalloc'd floats) or tiny: all scalar */
    }
    size_t body = (n - head) / 4;
    const float4 *x4 = (const float4 *)(x + head);
    double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < body;
         i += (size_t)gridDim.x * blockDim.x) {
        float4 v = x4[i];
        a0 += sum_term(v.x, squares);
        a1 += sum_term(v.y, squares);
        a2 += sum_term(v.z, squares);
        a3 += sum_term(v.w, squares);
    }
    if (blockIdx.x == 0) {
        size_t tail0 = head + 4 * body;
        for (size_t i = threadIdx.x; i < head; i += blockDim.x) {
            a0 += sum_term(x[i], squares);
        }
        for (size_t i = tail0 + threadIdx.x; i < n; i += blockDim.x) {
            a1 += sum_term(x[i], squares);
        }
    }
    double acc = moe_block_sum((a0 + a1) + (a2 + a3), shared);
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = acc;
    }
}

static __global__ void finish_sum_kernel(float *out, const double *partial, int num, double scale)
{
    __shared__ double shared[32];
    double acc = 0.0;
    for (int i = threadIdx.x; i < num; i += blockDim.x) {
        acc += partial[i];
    }
    acc = moe_block_sum(acc, shared);
    if (threadIdx.x == 0) {
        *out = (float)(scale * acc);
    }
}

void moe_k_cuda_finish_sum(
    float *out, const double *partial, int num, double scale, moe_k_ctx_t *ctx)
{
    finish_sum_kernel<<<1, MOE_K_CUDA_THREADS, 0, moe_k_cuda_stream(ctx)>>>(out, partial, num,
                                                                            scale);
    MOE_CHECK_LAUNCH();
}

static void sum_common(float *out, const float *x, size_t n, bool squares, moe_k_ctx_t *ctx)
{
    double *partial = (double *)moe_k_cuda_state_of(ctx)->scratch;
    static_assert(SUM_BLOCKS * sizeof(double) <= MOE_K_CUDA_SCRATCH_BYTES, "partials fit");
    partial_sum_kernel<<<SUM_BLOCKS, MOE_K_CUDA_THREADS, 0, moe_k_cuda_stream(ctx)>>>(partial, x, n,
                                                                                      squares);
    MOE_CHECK_LAUNCH();
    moe_k_cuda_finish_sum(out, partial, SUM_BLOCKS, 1.0, ctx);
}

extern "C" void moe_k_cuda_sum(float *out, const float *x, size_t n, moe_k_ctx_t *ctx)
{
    sum_common(out, x, n, false, ctx);
}

extern "C" void moe_k_cuda_sum_squares(float *out, const float *x, size_t n, moe_k_ctx_t *ctx)
{
    sum_common(out, x, n, true, ctx);
}

/* ---- Activations ----------------------------------------------------------------------------- */

static __device__ __forceinline__ float sigmoid_f32(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

static __global__ void swiglu_fwd_kernel(float *out, const float *in, int num_rows, int ffn)
{
    size_t n = (size_t)num_rows * (size_t)ffn;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / (size_t)ffn;
        size_t j = i % (size_t)ffn;
        float g = in[r * 2 * (size_t)ffn + j];
        float u = in[r * 2 * (size_t)ffn + (size_t)ffn + j];
        out[i] = g * sigmoid_f32(g) * u;
    }
}

extern "C" void
moe_k_cuda_swiglu_fwd(float *out, const float *in, int num_rows, int ffn, moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_rows >= 0 && ffn >= 0);
    size_t n = (size_t)num_rows * (size_t)ffn;
    if (n == 0) {
        return;
    }
    swiglu_fwd_kernel<<<moe_k_cuda_blocks(n, MOE_K_CUDA_THREADS), MOE_K_CUDA_THREADS, 0,
                        moe_k_cuda_stream(ctx)>>>(out, in, num_rows, ffn);
    MOE_CHECK_LAUNCH();
}

static __global__ void
swiglu_bwd_kernel(float *d_in, const float *d_out, const float *in, int num_rows, int ffn)
{
    size_t n = (size_t)num_rows * (size_t)ffn;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / (size_t)ffn;
        size_t j = i % (size_t)ffn;
        size_t gi = r * 2 * (size_t)ffn + j;
        float g = in[gi];
        float u = in[gi + (size_t)ffn];
        float dy = d_out[i];
        float s = sigmoid_f32(g);
        float silu = g * s;
        /* d silu(g)/dg = s + g s (1 - s) */
        d_in[gi] = dy * u * (s + silu * (1.0f - s));
        d_in[gi + (size_t)ffn] = dy * silu;
    }
}

extern "C" void moe_k_cuda_swiglu_bwd(
    float *d_in, const float *d_out, const float *in, int num_rows, int ffn, moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_rows >= 0 && ffn >= 0);
    size_t n = (size_t)num_rows * (size_t)ffn;
    if (n == 0) {
        return;
    }
    swiglu_bwd_kernel<<<moe_k_cuda_blocks(n, MOE_K_CUDA_THREADS), MOE_K_CUDA_THREADS, 0,
                        moe_k_cuda_stream(ctx)>>>(d_in, d_out, in, num_rows, ffn);
    MOE_CHECK_LAUNCH();
}

/* sqrt(2/pi), the GELU tanh approximation's constant (Hendrycks & Gimpel 2016). */
#define GELU_SCALE 0.7978845608028654f
#define GELU_CUBIC 0.044715f

static __global__ void gelu_fwd_kernel(float *out, const float *in, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = in[i];
        float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

extern "C" void moe_k_cuda_gelu_fwd(float *out, const float *in, size_t n, moe_k_ctx_t *ctx)
{
    if (n == 0) {
        return;
    }
    gelu_fwd_kernel<<<moe_k_cuda_blocks(n, MOE_K_CUDA_THREADS), MOE_K_CUDA_THREADS, 0,
                      moe_k_cuda_stream(ctx)>>>(out, in, n);
    MOE_CHECK_LAUNCH();
}

static __global__ void gelu_bwd_kernel(float *d_in, const float *d_out, const float *in, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = in[i];
        float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
        float t = tanhf(u);
        float sech2 = 1.0f - t * t;
        float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
        d_in[i] = d_out[i] * (0.5f * (1.0f + t) + 0.5f * x * sech2 * du);
    }
}

extern "C" void
moe_k_cuda_gelu_bwd(float *d_in, const float *d_out, const float *in, size_t n, moe_k_ctx_t *ctx)
{
    if (n == 0) {
        return;
    }
    gelu_bwd_kernel<<<moe_k_cuda_blocks(n, MOE_K_CUDA_THREADS), MOE_K_CUDA_THREADS, 0,
                      moe_k_cuda_stream(ctx)>>>(d_in, d_out, in, n);
    MOE_CHECK_LAUNCH();
}

/* ---- Biases -----------------------------------------------------------------------------------
 */

static __global__ void bias_fwd_kernel(float *y, const float *bias, size_t n, int dim)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        y[i] += bias[i % (size_t)dim];
    }
}

extern "C" void
moe_k_cuda_bias_fwd(float *y, const float *bias, int num_rows, int dim, moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_rows >= 0 && dim >= 0);
    size_t n = (size_t)num_rows * (size_t)dim;
    if (n == 0) {
        return;
    }
    bias_fwd_kernel<<<moe_k_cuda_blocks(n, MOE_K_CUDA_THREADS), MOE_K_CUDA_THREADS, 0,
                      moe_k_cuda_stream(ctx)>>>(y, bias, n, dim);
    MOE_CHECK_LAUNCH();
}

/* One thread per column, rows in order in double: the CPU's sum, bit for bit (a warp reads 32
 * consecutive columns of a row, so the loads coalesce). */
static __global__ void bias_bwd_kernel(float *d_bias, const float *dy, int num_rows, int dim)
{
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < dim; c += gridDim.x * blockDim.x) {
        double acc = 0.0;
        for (int r = 0; r < num_rows; r++) {
            acc += (double)dy[(size_t)r * (size_t)dim + (size_t)c];
        }
        d_bias[c] += (float)acc;
    }
}

extern "C" void
moe_k_cuda_bias_bwd(float *d_bias, const float *dy, int num_rows, int dim, moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_rows >= 0 && dim >= 0);
    if (dim == 0) {
        return;
    }
    bias_bwd_kernel<<<moe_k_cuda_blocks((size_t)dim, MOE_K_CUDA_THREADS), MOE_K_CUDA_THREADS, 0,
                      moe_k_cuda_stream(ctx)>>>(d_bias, dy, num_rows, dim);
    MOE_CHECK_LAUNCH();
}
