/*
 * RMSNorm and rotary position embedding on the GPU, twins of kernels/cpu/norm_rope.c. RMSNorm runs
 * one block per row: the sum of squares in double (tree order), then the CPU's fp32 expressions;
 * the weight gradient is a column sum over rows in fixed 64-row chunks, then over the chunks
 * (deterministic; the CPU's row order up to rounding). RoPE's table computes each pair's angle,
 * cosine and sine in double (CUDA's double-precision pow/sin/cos, within 2 ulp in double, so the
 * fp32 roundings match the CPU's essentially always) once per (row, pair); the rotation reads it
 * and turns every head with unfused products as the CPU does. In place (out == in) is allowed: each
 * thread reads its pair before it writes it.
 */
#include "kernels/cuda/cuda_common.cuh"

#include <math.h>

static __global__ void rmsnorm_fwd_kernel(
    float *y, float *rstd, const float *x, const float *weight, int num_rows, int hidden, float eps)
{
    __shared__ double shared[32];
    for (int r = blockIdx.x; r < num_rows; r += gridDim.x) {
        const float *xr = x + (size_t)r * (size_t)hidden;
        float *yr = y + (size_t)r * (size_t)hidden;
        double ss = 0.0;
        for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
            ss += (double)xr[c] * (double)xr[c];
        }
        ss = moe_block_sum(ss, shared);
        float rs = (float)(1.0 / sqrt(ss / (double)hidden + (double)eps));
        if (threadIdx.x == 0) {
            rstd[r] = rs;
        }
        for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
            yr[c] = xr[c] * rs * weight[c];
        }
    }
}

static unsigned row_grid(int num_rows)
{
    return (unsigned)(num_rows < 1
                          ? 1
                          : (num_rows > MOE_K_CUDA_MAX_BLOCKS ? MOE_K_CUDA_MAX_BLOCKS : num_rows));
}

extern "C" void moe_k_cuda_rmsnorm_fwd(float *y,
                                       float *rstd,
                                       const float *x,
                                       const float *weight,
                                       int num_rows,
                                       int hidden,
                                       float eps,
                                       moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_rows >= 0 && hidden > 0);
    if (num_rows == 0) {
        return;
    }
    rmsnorm_fwd_kernel<<<row_grid(num_rows), MOE_K_CUDA_THREADS, 0, moe_k_cuda_stream(ctx)>>>(
        y, rstd, x, weight, num_rows, hidden, eps);
    MOE_CHECK_LAUNCH();
}

/* dx = rstd * (w dy - x rstd^2 mean(w dy x)), per row; unfused as on the CPU. */
static __global__ void rmsnorm_bwd_dx_kernel(float *dx,
                                             const float *dy,
                                             const float *x,
                                             const float *weight,
                                             const float *rstd,
                                             int num_rows,
                                             int hidden,
                                             bool accumulate)
{
    __shared__ double shared[32];
    for (int r = blockIdx.x; r < num_rows; r += gridDim.x) {
        const float *xr = x + (size_t)r * (size_t)hidden;
        const float *gr = dy + (size_t)r * (size_t)hidden;
        float *dxr = dx + (size_t)r * (size_t)hidden;
        float rs = rstd[r];
        double dot = 0.0;
        for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
            dot += (double)(weight[c] * gr[c]) * (double)xr[c];
        }
        dot = moe_block_sum(dot, shared);
        float k = (float)(dot / (double)hidden) * rs * rs;
        for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
            float v = __fmul_rn(rs, __fsub_rn(__fmul_rn(weight[c], gr[c]), __fmul_rn(xr[c], k)));
            dxr[c] = accumulate ? __fadd_rn(dxr[c], v) : v;
        }
    }
}

/*
 * d_weight[c] += sum over r of dy[r, c] x[r, c] rstd[r], in two deterministic stages: partial[k, c]
 * sums the rows of chunk k in row order (one thread per column and chunk, coalesced across the
 * columns), then each column adds its chunks' partials to d_weight in chunk order. The chunk
 * length depends on the shape alone, so the result is the same on every GPU and run. (One thread
 * per column over all rows, the CPU's order, took 510 us for 4096 x 2048 on an H200: 2 048
 * threads on a 132-SM chip.)
 */
#define RMS_WCHUNK_ROWS 64

static int rms_wchunk_rows(int num_rows, int hidden)
{
    /* The partials fit the context's scratch: more rows per chunk for very large shapes. */
    size_t cap = MOE_K_CUDA_SCRATCH_BYTES / ((size_t)hidden * sizeof(float));
    MOE_ASSERT(cap > 0);
    int rows = RMS_WCHUNK_ROWS;
    while ((size_t)((num_rows + rows - 1) / rows) > cap) {
        rows *= 2;
    }
    return rows;
}

static __global__ void rmsnorm_bwd_weight_partial_kernel(float *partial,
                                                         const float *dy,
                                                         const float *x,
                                                         const float *rstd,
                                                         int num_rows,
                                                         int hidden,
                                                         int chunk_rows)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= hidden) {
        return;
    }
    int r0 = (int)blockIdx.y * chunk_rows;
    int r1 = min(r0 + chunk_rows, num_rows);
    float acc = 0.0f;
    for (int r = r0; r < r1; r++) {
        size_t i = (size_t)r * (size_t)hidden + (size_t)c;
        acc = __fadd_rn(acc, __fmul_rn(__fmul_rn(dy[i], x[i]), rstd[r]));
    }
    partial[(size_t)blockIdx.y * (size_t)hidden + (size_t)c] = acc;
}

static __global__ void
rmsnorm_bwd_weight_finish_kernel(float *d_weight, const float *partial, int num_chunks, int hidden)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= hidden) {
        return;
    }
    float acc = d_weight[c];
    for (int k = 0; k < num_chunks; k++) {
        acc = __fadd_rn(acc, partial[(size_t)k * (size_t)hidden + (size_t)c]);
    }
    d_weight[c] = acc;
}

extern "C" void moe_k_cuda_rmsnorm_bwd(float *dx,
                                       float *d_weight,
                                       const float *dy,
                                       const float *x,
                                       const float *weight,
                                       const float *rstd,
                                       int num_rows,
                                       int hidden,
                                       bool accumulate,
                                       moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_rows >= 0 && hidden > 0);
    if (num_rows == 0) {
        return;
    }
    cudaStream_t s = moe_k_cuda_stream(ctx);
    rmsnorm_bwd_dx_kernel<<<row_grid(num_rows), MOE_K_CUDA_THREADS, 0, s>>>(
        dx, dy, x, weight, rstd, num_rows, hidden, accumulate);
    MOE_CHECK_LAUNCH();
    unsigned blocks = (unsigned)((hidden + MOE_K_CUDA_THREADS - 1) / MOE_K_CUDA_THREADS);
    int chunk_rows = rms_wchunk_rows(num_rows, hidden);
    int num_chunks = (num_rows + chunk_rows - 1) / chunk_rows;
    float *partial = (float *)moe_k_cuda_state_of(ctx)->scratch;
    rmsnorm_bwd_weight_partial_kernel<<<dim3(blocks, (unsigned)num_chunks), MOE_K_CUDA_THREADS, 0,
                                        s>>>(partial, dy, x, rstd, num_rows, hidden, chunk_rows);
    MOE_CHECK_LAUNCH();
    rmsnorm_bwd_weight_finish_kernel<<<blocks, MOE_K_CUDA_THREADS, 0, s>>>(d_weight, partial,
                                                                           num_chunks, hidden);
    MOE_CHECK_LAUNCH();
}

/* ---- RoPE --------------------------------------------------------------------------------------
 */

struct rope_args {
    int num_rows, num_heads, head_dim, rot_start, rot_dim;
    bool interleaved;
    float sign; /* +1 rotate, -1 rotate back (negating the fp32 sine is exact) */
};

/* cos_sin[M, half, 2], one thread per (row, pair): the CPU's double angle, rounded once. */
static __global__ void
rope_table_kernel(float *cos_sin, const int *positions, int num_rows, int rot_dim, float theta)
{
    int half = rot_dim / 2;
    size_t n = (size_t)num_rows * (size_t)half;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int j = (int)(i % (size_t)half);
        size_t r = i / (size_t)half;
        double inv_freq = pow((double)theta, -2.0 * (double)j / (double)rot_dim);
        double angle = (double)positions[r] * inv_freq;
        cos_sin[2 * i] = (float)cos(angle);
        cos_sin[2 * i + 1] = (float)sin(angle);
    }
}

extern "C" void moe_k_cuda_rope_table(
    float *cos_sin, const int *positions, int num_rows, int rot_dim, float theta, moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_rows >= 0 && rot_dim > 0 && rot_dim % 2 == 0);
    size_t n = (size_t)num_rows * (size_t)(rot_dim / 2);
    if (n == 0) {
        return;
    }
    rope_table_kernel<<<moe_k_cuda_blocks(n, MOE_K_CUDA_THREADS), MOE_K_CUDA_THREADS, 0,
                        moe_k_cuda_stream(ctx)>>>(cos_sin, positions, num_rows, rot_dim, theta);
    MOE_CHECK_LAUNCH();
}

/* One block per row: (pair, head) rotations by the row's table entries; other dims copied. */
static __global__ void
rope_kernel(float *out, const float *in, const float *cos_sin, struct rope_args a)
{
    int half = a.rot_dim / 2;
    size_t row_len = (size_t)a.num_heads * (size_t)a.head_dim;
    for (int r = blockIdx.x; r < a.num_rows; r += gridDim.x) {
        float *o = out + (size_t)r * row_len;
        const float *x = in + (size_t)r * row_len;
        const float *cs = cos_sin + (size_t)r * (size_t)half * 2;
        if (o != x) {
            for (size_t i = threadIdx.x; i < row_len; i += blockDim.x) {
                int d = (int)(i % (size_t)a.head_dim);
                if (d < a.rot_start || d >= a.rot_start + a.rot_dim) {
                    o[i] = x[i];
                }
            }
        }
        for (int i = threadIdx.x; i < half * a.num_heads; i += blockDim.x) {
            int j = i % half;
            int h = i / half;
            int ia = a.rot_start + (a.interleaved ? 2 * j : j);
            int ib = a.rot_start + (a.interleaved ? 2 * j + 1 : j + half);
            size_t base = (size_t)h * (size_t)a.head_dim;
            float c = cs[2 * j];
            float s = a.sign * cs[2 * j + 1];
            float xa = x[base + (size_t)ia];
            float xb = x[base + (size_t)ib];
            o[base + (size_t)ia] = __fsub_rn(__fmul_rn(xa, c), __fmul_rn(xb, s));
            o[base + (size_t)ib] = __fadd_rn(__fmul_rn(xa, s), __fmul_rn(xb, c));
        }
    }
}

static void
rope_launch(float *out, const float *in, const float *cos_sin, struct rope_args a, moe_k_ctx_t *ctx)
{
    MOE_ASSERT(a.num_rows >= 0 && a.num_heads > 0 && a.rot_dim > 0 && a.rot_dim % 2 == 0);
    MOE_ASSERT(a.rot_start >= 0 && a.rot_start + a.rot_dim <= a.head_dim);
    if (a.num_rows == 0) {
        return;
    }
    rope_kernel<<<row_grid(a.num_rows), MOE_K_CUDA_THREADS, 0, moe_k_cuda_stream(ctx)>>>(
        out, in, cos_sin, a);
    MOE_CHECK_LAUNCH();
}

extern "C" void moe_k_cuda_rope_fwd(float *out,
                                    const float *in,
                                    const float *cos_sin,
                                    int num_rows,
                                    int num_heads,
                                    int head_dim,
                                    int rot_start,
                                    int rot_dim,
                                    bool interleaved,
                                    moe_k_ctx_t *ctx)
{
    struct rope_args a = {num_rows, num_heads, head_dim, rot_start, rot_dim, interleaved, 1.0f};
    rope_launch(out, in, cos_sin, a, ctx);
}

extern "C" void moe_k_cuda_rope_bwd(float *d_in,
                                    const float *d_out,
                                    const float *cos_sin,
                                    int num_rows,
                                    int num_heads,
                                    int head_dim,
                                    int rot_start,
                                    int rot_dim,
                                    bool interleaved,
                                    moe_k_ctx_t *ctx)
{
    struct rope_args a = {num_rows, num_heads, head_dim, rot_start, rot_dim, interleaved, -1.0f};
    rope_launch(d_in, d_out, cos_sin, a, ctx);
}
