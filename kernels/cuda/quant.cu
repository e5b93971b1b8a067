/*
 * Precision emulation by quantise -> dequantise on the GPU (the qdq op of kernels/kernels.h), bit
 * for bit the CPU's kernels/cpu/quant.c: the same scale arithmetic in the same fp32 order (each
 * product and quotient written with __fmul_rn/__fdiv_rn so nothing contracts), the same encoders
 * (formats.cuh), the same NaN bit patterns. amax is a max, which is exact in any order, so the
 * parallel reductions change nothing. Also the tensorwise FP8 quantiser to codes that feeds the
 * cuBLASLt FP8 GEMM (cuda_backend.h).
 *
 * Layout of the work: CAST is pointwise; 1x16 / 1x32 / 1x128 groups along a row are handled by a
 * team of 16 or 32 lanes of one warp (shuffle reductions within the team); a 128x128 tile by one
 * block; tensorwise and NVFP4's tensor scale take a first pass that max-reduces |x| with integer
 * atomicMax on the float bits (non-negative floats order like their bits) and ORs a non-finite
 * flag.
 */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/formats.cuh"

#include <float.h>
#include <math.h>

/* Block sizes of the recipes (OCP MX v1.0: 32; NVFP4: 16; DeepSeek-V3 / TE blockwise: 128). */
#define NVFP4_BLOCK 16
#define MX_BLOCK    32
#define FP8_BLOCK   128
/* MX emax_elem per element format (OCP MX spec v1.0, table 1) and E8M0's exponent range. */
#define E4M3_EMAX    8
#define E5M2_EMAX    15
#define E2M1_EMAX    2
#define E8M0_MIN_EXP (-127)
#define E8M0_MAX_EXP 127

static __device__ __forceinline__ float format_max(int format)
{
    return format == MOE_K_QFMT_FP8_E4M3
               ? MOE_CU_E4M3_MAX
               : (format == MOE_K_QFMT_FP8_E5M2 ? MOE_CU_E5M2_MAX : MOE_CU_E2M1_MAX);
}

static __device__ __forceinline__ int format_emax(int format)
{
    return format == MOE_K_QFMT_FP8_E4M3 ? E4M3_EMAX
                                         : (format == MOE_K_QFMT_FP8_E5M2 ? E5M2_EMAX : E2M1_EMAX);
}

/* FP8 scale of a group: fmt_max / amax, 1 when amax == 0, FLT_MAX when the quotient overflows. */
static __device__ __forceinline__ float fp8_scale(float amax, int format)
{
    float s = amax > 0.0f ? __fdiv_rn(format_max(format), amax) : 1.0f;
    return isinf(s) ? FLT_MAX : s;
}

/* The CPU's running max: NaN never enters (a comparison with NaN is false). */
static __device__ __forceinline__ float amax_step(float m, float x)
{
    return fabsf(x) > m ? fabsf(x) : m;
}

/* ---- CAST --------------------------------------------------------------------------------------
 */

static __global__ void qdq_cast_kernel(float *out, const float *in, size_t n, int format)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        out[i] = moe_cu_cast_sat(in[i], format);
    }
}

/* ---- Tensor-level amax (tensorwise FP8, NVFP4's tensor scale, the FP8 code quantiser) -------- */

/* flags[0] = bits of amax over x[n] (finite values and Inf; NaN skipped), flags[1] = 1 when any
 * element is non-finite. flags must be zeroed before. */
static __global__ void tensor_amax_kernel(unsigned *flags, const float *x, size_t n)
{
    __shared__ float shared[32];
    float m = 0.0f;
    int nonfinite = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        m = amax_step(m, x[i]);
        nonfinite |= isfinite(x[i]) ? 0 : 1;
    }
    m = moe_block_max(m, shared);
    nonfinite = __syncthreads_or(nonfinite);
    if (threadIdx.x == 0) {
        atomicMax(&flags[0], __float_as_uint(m));
        if (nonfinite) {
            atomicOr(&flags[1], 1u);
        }
    }
}

static void launch_tensor_amax(unsigned *flags, const float *x, size_t n, moe_k_ctx_t *ctx)
{
    cudaStream_t s = moe_k_cuda_stream(ctx);
    MOE_CHECK_CUDA(cudaMemsetAsync(flags, 0, 2 * sizeof(unsigned), s));
    tensor_amax_kernel<<<moe_k_cuda_blocks(n, MOE_K_CUDA_THREADS), MOE_K_CUDA_THREADS, 0, s>>>(
        flags, x, n);
    MOE_CHECK_LAUNCH();
}

/* TENSORWISE: out = cast(in * s) * (1 / s), s from the tensor amax; all NaN if non-finite. */
static __global__ void
qdq_tensorwise_kernel(float *out, const float *in, size_t n, int format, const unsigned *flags)
{
    float s = fp8_scale(__uint_as_float(flags[0]), format);
    float dec = __fdiv_rn(1.0f, s);
    bool is_nan = flags[1] != 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        out[i] = is_nan ? moe_cu_nan(false)
                        : __fmul_rn(moe_cu_cast_sat(__fmul_rn(in[i], s), format), dec);
    }
}

/* ---- Groups along a row: 1x16 (NVFP4), 1x32 (MX), 1x128 (FP8 blockwise) --------------------- */

enum row_recipe {
    ROW_FP8 = 0,   /* 1x128 FP8: fmt_max / amax */
    ROW_MX = 1,    /* power-of-two E8M0 scale */
    ROW_NVFP4 = 2, /* E4M3 block scale under the fp32 tensor scale */
};

/* One element of an NVFP4 block (quant.c's qdq_tile_nvfp4 and the tensor-level cases). */
static __device__ __forceinline__ float
nvfp4_element(float x, float block_amax, const unsigned *flags)
{
    float t_amax = __uint_as_float(flags[0]);
    if (flags[1] != 0) {
        return moe_cu_nan(false);
    }
    if (t_amax == 0.0f) {
        /* The CPU's tile_apply(out, in, all, 0, 0, ...): cast(x * 0) * 0 (signed zeros). */
        return __fmul_rn(moe_cu_cast_sat(__fmul_rn(x, 0.0f), MOE_K_QFMT_FP4_E2M1), 0.0f);
    }
    float s_t = __fdiv_rn(MOE_CU_E4M3_MAX * MOE_CU_E2M1_MAX, t_amax);
    if (isinf(s_t)) {
        s_t = FLT_MAX;
    }
    float s_block = moe_cu_e4m3_decode(
        moe_cu_e4m3_encode(__fmul_rn(__fdiv_rn(block_amax, MOE_CU_E2M1_MAX), s_t), true));
    float inv_t = __fdiv_rn(1.0f, s_t);
    if (!(s_block > 0.0f)) {
        return 0.0f;
    }
    float q = moe_cu_cast_sat(__fmul_rn(x, __fdiv_rn(s_t, s_block)), MOE_K_QFMT_FP4_E2M1);
    return __fmul_rn(__fmul_rn(q, s_block), inv_t);
}

/* MX: X = 2^e, e = floor(log2 amax) - emax_elem clamped to E8M0; out = cast(x / X) * X. */
static __device__ __forceinline__ int mx_exponent(float amax, int format)
{
    int e = E8M0_MIN_EXP;
    if (amax > 0.0f) {
        int e2;
        (void)frexpf(amax, &e2);
        e = e2 - 1 - format_emax(format);
        e = e < E8M0_MIN_EXP ? E8M0_MIN_EXP : (e > E8M0_MAX_EXP ? E8M0_MAX_EXP : e);
    }
    return e;
}

/*
 * Teams of T = min(G, 32) lanes handle one G-element group along a row; each lane holds G / T
 * elements. The loop runs warp-uniformly (teams past the end idle through the shuffles).
 */
template <int G, int RECIPE>
static __global__ void qdq_row_groups_kernel(
    float *out, const float *in, int rows, int cols, int format, const unsigned *flags)
{
    constexpr int T = G < 32 ? G : 32;
    constexpr int PER = G / T;
    constexpr int TEAMS_PER_WARP = 32 / T;
    size_t groups_per_row = ((size_t)cols + G - 1) / G;
    size_t num_groups = (size_t)rows * groups_per_row;
    int lane = threadIdx.x & 31;
    int team_lane = lane % T;
    size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5;
    size_t num_warps = ((size_t)gridDim.x * blockDim.x) >> 5;
    for (size_t base = warp * TEAMS_PER_WARP; base < num_groups;
         base += num_warps * TEAMS_PER_WARP) {
        size_t grp = base + (size_t)(lane / T);
        bool team_ok = grp < num_groups;
        size_t r = team_ok ? grp / groups_per_row : 0;
        size_t c0 = team_ok ? (grp % groups_per_row) * G : 0;
        float x[PER];
        float m = 0.0f;
        int finite = 1;
#pragma unroll
        for (int i = 0; i < PER; i++) {
            size_t c = c0 + (size_t)team_lane + (size_t)(T * i);
            bool ok = team_ok && c < (size_t)cols;
            x[i] = ok ? in[r * (size_t)cols + c] : 0.0f;
            m = amax_step(m, x[i]);
            finite &= isfinite(x[i]) ? 1 : 0;
        }
#pragma unroll
        for (int off = T / 2; off > 0; off >>= 1) {
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off, T));
            finite &= __shfl_xor_sync(0xffffffffu, finite, off, T);
        }
        float s = 0.0f;
        float dec = 0.0f;
        int e = 0;
        if (RECIPE == ROW_FP8) {
            s = fp8_scale(m, format);
            dec = __fdiv_rn(1.0f, s);
        } else if (RECIPE == ROW_MX) {
            e = mx_exponent(m, format);
        }
#pragma unroll
        for (int i = 0; i < PER; i++) {
            size_t c = c0 + (size_t)team_lane + (size_t)(T * i);
            if (!(team_ok && c < (size_t)cols)) {
                continue;
            }
            float y;
            if (RECIPE == ROW_NVFP4) {
                y = nvfp4_element(x[i], m, flags);
            } else if (!finite) {
                y = moe_cu_nan(false);
            } else if (RECIPE == ROW_MX) {
                y = ldexpf(moe_cu_cast_sat(ldexpf(x[i], -e), format), e);
            } else {
                y = __fmul_rn(moe_cu_cast_sat(__fmul_rn(x[i], s), format), dec);
            }
            out[r * (size_t)cols + c] = y;
        }
    }
}

/* ---- 128x128 tiles: one block per tile ------------------------------------------------------ */

static __global__ void
qdq_tile128_kernel(float *out, const float *in, int rows, int cols, int format)
{
    __shared__ float shared[32];
    int tile_cols = (cols + FP8_BLOCK - 1) / FP8_BLOCK;
    int r0 = (int)(blockIdx.x / (unsigned)tile_cols) * FP8_BLOCK;
    int c0 = (int)(blockIdx.x % (unsigned)tile_cols) * FP8_BLOCK;
    int nr = rows - r0 < FP8_BLOCK ? rows - r0 : FP8_BLOCK;
    int nc = cols - c0 < FP8_BLOCK ? cols - c0 : FP8_BLOCK;
    float m = 0.0f;
    int finite = 1;
    for (int i = threadIdx.x; i < nr * nc; i += blockDim.x) {
        float x = in[(size_t)(r0 + i / nc) * (size_t)cols + (size_t)(c0 + i % nc)];
        m = amax_step(m, x);
        finite &= isfinite(x) ? 1 : 0;
    }
    m = moe_block_max(m, shared);
    finite = __syncthreads_and(finite);
    float s = fp8_scale(m, format);
    float dec = __fdiv_rn(1.0f, s);
    for (int i = threadIdx.x; i < nr * nc; i += blockDim.x) {
        size_t idx = (size_t)(r0 + i / nc) * (size_t)cols + (size_t)(c0 + i % nc);
        out[idx] = finite ? __fmul_rn(moe_cu_cast_sat(__fmul_rn(in[idx], s), format), dec)
                          : moe_cu_nan(false);
    }
}

/* ---- The op ---------------------------------------------------------------------------------- */

template <int G, int RECIPE>
static void launch_row_groups(float *out,
                              const float *in,
                              int rows,
                              int cols,
                              int format,
                              const unsigned *flags,
                              cudaStream_t s)
{
    constexpr int T = G < 32 ? G : 32;
    size_t groups = (size_t)rows * (((size_t)cols + G - 1) / G);
    size_t threads_needed = groups * (size_t)T;
    qdq_row_groups_kernel<G, RECIPE>
        <<<moe_k_cuda_blocks(threads_needed, MOE_K_CUDA_THREADS), MOE_K_CUDA_THREADS, 0, s>>>(
            out, in, rows, cols, format, flags);
    MOE_CHECK_LAUNCH();
}

extern "C" void moe_k_cuda_qdq(float *out,
                               const float *in,
                               int rows,
                               int cols,
                               enum moe_k_qformat format,
                               enum moe_k_qrecipe recipe,
                               moe_k_ctx_t *ctx)
{
    MOE_ASSERT(rows >= 0 && cols >= 0);
    MOE_ASSERT(moe_k_qdq_supported(format, recipe));
    if (rows == 0 || cols == 0) {
        return;
    }
    cudaStream_t s = moe_k_cuda_stream(ctx);
    unsigned *flags = (unsigned *)moe_k_cuda_state_of(ctx)->scratch;
    size_t n = (size_t)rows * (size_t)cols;
    int f = (int)format;
    switch (recipe) {
    case MOE_K_QRECIPE_CAST:
        qdq_cast_kernel<<<moe_k_cuda_blocks(n, MOE_K_CUDA_THREADS), MOE_K_CUDA_THREADS, 0, s>>>(
            out, in, n, f);
        MOE_CHECK_LAUNCH();
        break;
    case MOE_K_QRECIPE_TENSORWISE:
        launch_tensor_amax(flags, in, n, ctx);
        qdq_tensorwise_kernel<<<moe_k_cuda_blocks(n, MOE_K_CUDA_THREADS), MOE_K_CUDA_THREADS, 0,
                                s>>>(out, in, n, f, flags);
        MOE_CHECK_LAUNCH();
        break;
    case MOE_K_QRECIPE_BLOCK_1X128:
        launch_row_groups<FP8_BLOCK, ROW_FP8>(out, in, rows, cols, f, flags, s);
        break;
    case MOE_K_QRECIPE_BLOCK_128X128: {
        unsigned tiles =
            (unsigned)(((rows + FP8_BLOCK - 1) / FP8_BLOCK) * ((cols + FP8_BLOCK - 1) / FP8_BLOCK));
        qdq_tile128_kernel<<<tiles, MOE_K_CUDA_THREADS, 0, s>>>(out, in, rows, cols, f);
        MOE_CHECK_LAUNCH();
        break;
    }
    case MOE_K_QRECIPE_MX:
        launch_row_groups<MX_BLOCK, ROW_MX>(out, in, rows, cols, f, flags, s);
        break;
    case MOE_K_QRECIPE_NVFP4:
        launch_tensor_amax(flags, in, n, ctx);
        launch_row_groups<NVFP4_BLOCK, ROW_NVFP4>(out, in, rows, cols, f, flags, s);
        break;
    default:
        MOE_ASSERT(!"unknown qrecipe");
    }
}

/* ---- FP8 codes for cuBLASLt ------------------------------------------------------------------ */

static __global__ void quantize_fp8_kernel(
    uint8_t *codes, float *scale_inv, const float *in, size_t n, int format, const unsigned *flags)
{
    float s = fp8_scale(__uint_as_float(flags[0]), format);
    bool is_nan = flags[1] != 0;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        *scale_inv = __fdiv_rn(1.0f, s);
    }
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = __fmul_rn(in[i], s);
        uint8_t c = format == MOE_K_QFMT_FP8_E4M3 ? moe_cu_e4m3_encode(x, true)
                                                  : moe_cu_e5m2_encode(x, true);
        codes[i] = is_nan ? (uint8_t)0x7F : c;
    }
}

extern "C" void moe_k_cuda_quantize_fp8_tensorwise(uint8_t *codes,
                                                   float *scale_inv,
                                                   const float *in,
                                                   size_t n,
                                                   enum moe_k_qformat format,
                                                   moe_k_ctx_t *ctx)
{
    MOE_ASSERT(format == MOE_K_QFMT_FP8_E4M3 || format == MOE_K_QFMT_FP8_E5M2);
    unsigned *flags = (unsigned *)moe_k_cuda_state_of(ctx)->scratch;
    launch_tensor_amax(flags, in, n, ctx);
    quantize_fp8_kernel<<<moe_k_cuda_blocks(n, MOE_K_CUDA_THREADS), MOE_K_CUDA_THREADS, 0,
                          moe_k_cuda_stream(ctx)>>>(codes, scale_inv, in, n, (int)format, flags);
    MOE_CHECK_LAUNCH();
}
