/*
 * Precision emulation by quantise -> dequantise (the qdq op of kernels/kernels.h): the output holds
 * exactly the values a low-precision GEMM would consume, in fp32, so the fp32 GEMMs that follow
 * reproduce the quantisation error (not the low-precision accumulation). Recipes:
 *  - tensorwise / blockwise FP8 (TransformerEngine's current scaling; DeepSeek-V3's 1x128
 *    activation and 128x128 weight tiles): fp32 scale = fmt_max / amax, clamped to FLT_MAX;
 *  - MX (OCP Microscaling Formats v1.0, section 6.3): 32 elements along the row share
 *    X = 2^(floor(log2 amax) - emax_elem), elements saturate;
 *  - NVFP4 (NVIDIA): 16 elements share an E4M3 scale over a fp32 per-tensor scale 448*6/amax.
 * Every scaling group is a rectangular tile; a tile containing NaN or Inf becomes all NaN, so
 * overflow in training stays visible. Loops run tile by tile in row-major order.
 */
#include "kernels/cpu/cpu.h"

#include <float.h>
#include <math.h>

/* Element format maxima and MX emax_elem (OCP MX spec v1.0, table 1). */
#define E4M3_MAX     448.0f
#define E5M2_MAX     57344.0f
#define E2M1_MAX     6.0f
#define E4M3_EMAX    8
#define E5M2_EMAX    15
#define E2M1_EMAX    2
#define E8M0_MIN_EXP (-127)
#define E8M0_MAX_EXP 127
#define NVFP4_BLOCK  16
#define MX_BLOCK     32
#define FP8_BLOCK    128

/* Saturating cast to `format` and back. */
static float cast_sat(float x, enum moe_k_qformat format)
{
    switch (format) {
    case MOE_K_QFMT_BF16:
        return moe_k_bf16_decode(moe_k_bf16_encode(x));
    case MOE_K_QFMT_FP8_E4M3:
        return moe_k_fp8_e4m3_decode(moe_k_fp8_e4m3_encode(x, true));
    case MOE_K_QFMT_FP8_E5M2:
        return moe_k_fp8_e5m2_decode(moe_k_fp8_e5m2_encode(x, true));
    case MOE_K_QFMT_FP4_E2M1:
        return moe_k_fp4_e2m1_decode(moe_k_fp4_e2m1_encode(x));
    default:
        MOE_ASSERT(!"unknown qformat");
        return NAN;
    }
}

static float format_max(enum moe_k_qformat format)
{
    return format == MOE_K_QFMT_FP8_E4M3 ? E4M3_MAX
                                         : (format == MOE_K_QFMT_FP8_E5M2 ? E5M2_MAX : E2M1_MAX);
}

static int format_emax(enum moe_k_qformat format)
{
    return format == MOE_K_QFMT_FP8_E4M3 ? E4M3_EMAX
                                         : (format == MOE_K_QFMT_FP8_E5M2 ? E5M2_EMAX : E2M1_EMAX);
}

/* A tile [r0, r0 + nr) x [c0, c0 + nc) of a [rows, cols] tensor. */
struct tile {
    int r0, nr, c0, nc, cols;
};

/* amax of a tile; false when it holds a NaN or Inf. */
static bool tile_amax(const float *in, struct tile t, float *amax)
{
    float m = 0.0f;
    bool finite = true;
    for (int r = t.r0; r < t.r0 + t.nr; r++) {
        const float *row = in + (size_t)r * (size_t)t.cols;
        for (int c = t.c0; c < t.c0 + t.nc; c++) {
            finite = finite && isfinite(row[c]);
            m = fabsf(row[c]) > m ? fabsf(row[c]) : m;
        }
    }
    *amax = m;
    return finite;
}

/* out = (cast(in * enc)) * dec over a tile; or NaN everywhere when is_nan. */
static void tile_apply(float *out,
                       const float *in,
                       struct tile t,
                       float enc,
                       float dec,
                       enum moe_k_qformat format,
                       bool is_nan)
{
    for (int r = t.r0; r < t.r0 + t.nr; r++) {
        size_t base = (size_t)r * (size_t)t.cols;
        for (int c = t.c0; c < t.c0 + t.nc; c++) {
            out[base + (size_t)c] =
                is_nan ? NAN : cast_sat(in[base + (size_t)c] * enc, format) * dec;
        }
    }
}

/* Tensorwise and blockwise FP8: s = max / amax (1 when amax is 0, FLT_MAX when it overflows). */
static void qdq_tile_fp8(float *out, const float *in, struct tile t, enum moe_k_qformat format)
{
    float amax;
    bool finite = tile_amax(in, t, &amax);
    float s = amax > 0.0f ? format_max(format) / amax : 1.0f;
    if (isinf(s)) {
        s = FLT_MAX;
    }
    tile_apply(out, in, t, s, 1.0f / s, format, !finite);
}

/* MX: X = 2^(floor(log2 amax) - emax_elem), clamped to E8M0's range; in / X and q * X exact. */
static void qdq_tile_mx(float *out, const float *in, struct tile t, enum moe_k_qformat format)
{
    float amax;
    bool finite = tile_amax(in, t, &amax);
    int e = E8M0_MIN_EXP;
    if (amax > 0.0f) {
        int e2;
        (void)frexpf(amax, &e2);
        e = e2 - 1 - format_emax(format);
        e = e < E8M0_MIN_EXP ? E8M0_MIN_EXP : (e > E8M0_MAX_EXP ? E8M0_MAX_EXP : e);
    }
    for (int r = t.r0; r < t.r0 + t.nr; r++) {
        size_t base = (size_t)r * (size_t)t.cols;
        for (int c = t.c0; c < t.c0 + t.nc; c++) {
            float x = in[base + (size_t)c];
            out[base + (size_t)c] = finite ? ldexpf(cast_sat(ldexpf(x, -e), format), e) : NAN;
        }
    }
}

/* NVFP4 block under tensor scale s_t: S = e4m3_sat(amax_b / 6 * s_t); q = e2m1(x * (s_t / S));
 * out = (q * S) * (1 / s_t). */
static void qdq_tile_nvfp4(float *out, const float *in, struct tile t, float s_t)
{
    float amax;
    bool finite = tile_amax(in, t, &amax);
    float s_block = moe_k_fp8_e4m3_decode(moe_k_fp8_e4m3_encode(amax / E2M1_MAX * s_t, true));
    float inv_t = 1.0f / s_t;
    for (int r = t.r0; r < t.r0 + t.nr; r++) {
        size_t base = (size_t)r * (size_t)t.cols;
        for (int c = t.c0; c < t.c0 + t.nc; c++) {
            float x = in[base + (size_t)c];
            float y = 0.0f;
            if (!finite) {
                y = NAN;
            } else if (s_block > 0.0f) {
                float q = cast_sat(x * (s_t / s_block), MOE_K_QFMT_FP4_E2M1);
                y = (q * s_block) * inv_t;
            }
            out[base + (size_t)c] = y;
        }
    }
}

/* Visit tiles of tile_rows x tile_cols in row-major tile order. */
static void for_each_tile(float *out,
                          const float *in,
                          int rows,
                          int cols,
                          int tile_rows,
                          int tile_cols,
                          enum moe_k_qformat format,
                          enum moe_k_qrecipe recipe,
                          float s_t)
{
    for (int r0 = 0; r0 < rows; r0 += tile_rows) {
        for (int c0 = 0; c0 < cols; c0 += tile_cols) {
            struct tile t = {r0, rows - r0 < tile_rows ? rows - r0 : tile_rows, c0,
                             cols - c0 < tile_cols ? cols - c0 : tile_cols, cols};
            if (recipe == MOE_K_QRECIPE_MX) {
                qdq_tile_mx(out, in, t, format);
            } else if (recipe == MOE_K_QRECIPE_NVFP4) {
                qdq_tile_nvfp4(out, in, t, s_t);
            } else {
                qdq_tile_fp8(out, in, t, format);
            }
        }
    }
}

static void qdq_nvfp4(float *out, const float *in, int rows, int cols)
{
    float amax;
    struct tile all = {0, rows, 0, cols, cols};
    bool finite = tile_amax(in, all, &amax);
    if (!finite || amax == 0.0f) {
        tile_apply(out, in, all, 0.0f, 0.0f, MOE_K_QFMT_FP4_E2M1, !finite);
        return;
    }
    float s_t = E4M3_MAX * E2M1_MAX / amax;
    if (isinf(s_t)) {
        s_t = FLT_MAX;
    }
    for_each_tile(out, in, rows, cols, 1, NVFP4_BLOCK, MOE_K_QFMT_FP4_E2M1, MOE_K_QRECIPE_NVFP4,
                  s_t);
}

void moe_k_cpu_qdq(float *out,
                   const float *in,
                   int rows,
                   int cols,
                   enum moe_k_qformat format,
                   enum moe_k_qrecipe recipe,
                   moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(rows >= 0 && cols >= 0);
    MOE_ASSERT(moe_k_qdq_supported(format, recipe));
    if (rows == 0 || cols == 0) {
        return;
    }
    switch (recipe) {
    case MOE_K_QRECIPE_CAST:
        for (size_t i = 0; i < (size_t)rows * (size_t)cols; i++) {
            out[i] = cast_sat(in[i], format);
        }
        break;
    case MOE_K_QRECIPE_TENSORWISE:
        for_each_tile(out, in, rows, cols, rows, cols, format, recipe, 0.0f);
        break;
    case MOE_K_QRECIPE_BLOCK_1X128:
        for_each_tile(out, in, rows, cols, 1, FP8_BLOCK, format, recipe, 0.0f);
        break;
    case MOE_K_QRECIPE_BLOCK_128X128:
        for_each_tile(out, in, rows, cols, FP8_BLOCK, FP8_BLOCK, format, recipe, 0.0f);
        break;
    case MOE_K_QRECIPE_MX:
        for_each_tile(out, in, rows, cols, 1, MX_BLOCK, format, recipe, 0.0f);
        break;
    case MOE_K_QRECIPE_NVFP4:
        qdq_nvfp4(out, in, rows, cols);
        break;
    default:
        MOE_ASSERT(!"unknown qrecipe");
    }
}
