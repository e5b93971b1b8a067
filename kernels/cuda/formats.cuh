/*
 * Device twins of the bit-exact format encoders and decoders of kernels/cpu/formats.c (BF16, OCP
 * FP8 E4M3/E5M2, OCP FP4 E2M1), written step for step like the host code: split at the binade with
 * frexpf, divide by the quantum (a power of two, exact) with ldexpf, round with rintf (ties to
 * even), scale back. CUDA's frexpf, ldexpf and rintf are exact, so every code equals the CPU's.
 * NaN results use the host's bit patterns (0x7FC00000, with the sign where the host negates).
 * Private to kernels/cuda.
 */
#ifndef MOE_KERNELS_CUDA_FORMATS_CUH
#define MOE_KERNELS_CUDA_FORMATS_CUH

#include "kernels/kernels.h"

#include <math.h>
#include <stdint.h>

/* Largest finite values (OCP FP8 spec table 1; OCP MX spec for E2M1). */
#define MOE_CU_E4M3_MAX 448.0f
#define MOE_CU_E5M2_MAX 57344.0f
#define MOE_CU_E2M1_MAX 6.0f

/* glibc's NAN and -NAN bit patterns, which the CPU reference writes. */
static __device__ __forceinline__ float moe_cu_nan(bool negative)
{
    return __uint_as_float(negative ? 0xFFC00000u : 0x7FC00000u);
}

/* |a| (finite, >= 0) rounded to a format with mant_bits mantissa bits and exponent bias. */
static __device__ __forceinline__ float moe_cu_round_to_grid(float a, int mant_bits, int bias)
{
    if (a == 0.0f) {
        return 0.0f;
    }
    int e2;
    (void)frexpf(a, &e2); /* a = m 2^e2, m in [0.5, 1): floor(log2 a) = e2 - 1 */
    int emin = 1 - bias;
    int binade = e2 - 1 < emin ? emin : e2 - 1;
    int q = binade - mant_bits; /* quantum 2^q */
    return ldexpf(rintf(ldexpf(a, -q)), q);
}

/* Unsigned code of a grid magnitude r (0 <= r <= the format's max). */
static __device__ __forceinline__ uint8_t moe_cu_grid_to_code(float r, int mant_bits, int bias)
{
    if (r == 0.0f) {
        return 0;
    }
    int e2;
    (void)frexpf(r, &e2);
    int emin = 1 - bias;
    int binade = e2 - 1;
    if (binade < emin) {
        return (uint8_t)ldexpf(r, mant_bits - emin);
    }
    int mant = (int)ldexpf(r, mant_bits - binade) - (1 << mant_bits);
    return (uint8_t)(((binade + bias) << mant_bits) | mant);
}

static __device__ __forceinline__ float moe_cu_code_to_value(unsigned code, int mant_bits, int bias)
{
    unsigned mant = code & ((1u << mant_bits) - 1u);
    int exp_field = (int)(code >> mant_bits);
    if (exp_field == 0) {
        return ldexpf((float)mant, 1 - bias - mant_bits);
    }
    return ldexpf((float)(mant + (1u << mant_bits)), exp_field - bias - mant_bits);
}

static __device__ __forceinline__ uint16_t moe_cu_bf16_encode(float x)
{
    uint32_t bits = __float_as_uint(x);
    if (isnan(x)) {
        return (uint16_t)((bits >> 16) | 0x0040u);
    }
    uint32_t rounding_bias = 0x7FFFu + ((bits >> 16) & 1u);
    return (uint16_t)((bits + rounding_bias) >> 16);
}

static __device__ __forceinline__ float moe_cu_bf16_decode(uint16_t bits)
{
    return __uint_as_float((uint32_t)bits << 16);
}

static __device__ __forceinline__ uint8_t moe_cu_e4m3_encode(float x, bool saturate)
{
    uint8_t sign = signbit(x) ? 0x80 : 0x00;
    if (isnan(x)) {
        return 0x7F | sign;
    }
    float r = isinf(x) ? INFINITY : moe_cu_round_to_grid(fabsf(x), 3, 7);
    if (r > MOE_CU_E4M3_MAX) {
        return (saturate ? 0x7E : 0x7F) | sign;
    }
    return moe_cu_grid_to_code(r, 3, 7) | sign;
}

static __device__ __forceinline__ float moe_cu_e4m3_decode(uint8_t bits)
{
    if ((bits & 0x7F) == 0x7F) {
        return moe_cu_nan((bits & 0x80) != 0);
    }
    float v = moe_cu_code_to_value(bits & 0x7Fu, 3, 7);
    return (bits & 0x80) ? -v : v;
}

static __device__ __forceinline__ uint8_t moe_cu_e5m2_encode(float x, bool saturate)
{
    uint8_t sign = signbit(x) ? 0x80 : 0x00;
    if (isnan(x)) {
        return 0x7F | sign;
    }
    float r = isinf(x) ? INFINITY : moe_cu_round_to_grid(fabsf(x), 2, 15);
    if (r > MOE_CU_E5M2_MAX) {
        return (saturate ? 0x7B : 0x7C) | sign;
    }
    return moe_cu_grid_to_code(r, 2, 15) | sign;
}

static __device__ __forceinline__ float moe_cu_e5m2_decode(uint8_t bits)
{
    unsigned mag = bits & 0x7Fu;
    float v;
    if (mag == 0x7C) {
        v = INFINITY;
    } else if (mag > 0x7C) {
        v = moe_cu_nan(false);
    } else {
        v = moe_cu_code_to_value(mag, 2, 15);
    }
    return (bits & 0x80) ? -v : v;
}

static __device__ __forceinline__ uint8_t moe_cu_e2m1_encode(float x)
{
    uint8_t sign = signbit(x) ? 0x08 : 0x00;
    float r = (isnan(x) || isinf(x)) ? INFINITY : moe_cu_round_to_grid(fabsf(x), 1, 1);
    if (r > MOE_CU_E2M1_MAX) {
        return 0x07 | sign;
    }
    return moe_cu_grid_to_code(r, 1, 1) | sign;
}

static __device__ __forceinline__ float moe_cu_e2m1_decode(uint8_t bits)
{
    float v = moe_cu_code_to_value(bits & 0x07u, 1, 1);
    return (bits & 0x08) ? -v : v;
}

/* Saturating cast to `format` and back (quant.c's cast_sat). */
static __device__ __forceinline__ float moe_cu_cast_sat(float x, int format)
{
    switch (format) {
    case MOE_K_QFMT_BF16:
        return moe_cu_bf16_decode(moe_cu_bf16_encode(x));
    case MOE_K_QFMT_FP8_E4M3:
        return moe_cu_e4m3_decode(moe_cu_e4m3_encode(x, true));
    case MOE_K_QFMT_FP8_E5M2:
        return moe_cu_e5m2_decode(moe_cu_e5m2_encode(x, true));
    default:
        return moe_cu_e2m1_decode(moe_cu_e2m1_encode(x));
    }
}

#endif /* MOE_KERNELS_CUDA_FORMATS_CUH */
