/*
 * Bit-exact scalar encoders and decoders of the low-precision formats used for precision
 * emulation: BF16, OCP FP8 E4M3 ("e4m3fn") and E5M2, OCP FP4 E2M1 and the E8M0 scale of the OCP
 * Microscaling Formats (MX) v1.0 spec. Rounding is to nearest, ties to even, on the exact value:
 * the magnitude is split at its binade (frexpf), divided by the format's quantum there (a power
 * of two, so exact), rounded with rintf in the default rounding mode and scaled back. Overflow,
 * Inf and NaN follow kernels/kernels.h (PyTorch's float8 casts when not saturating). These are
 * host functions, the same for every backend.
 */
#include "kernels/kernels.h"

#include <math.h>
#include <string.h>

/* A small binary float format: mant_bits explicit mantissa bits, exponent bias, and emin, the
 * unbiased exponent of the smallest normal (1 - bias). */
struct minifloat {
    int mant_bits;
    int bias;
};

static const struct minifloat fmt_e4m3 = {3, 7};
static const struct minifloat fmt_e5m2 = {2, 15};
static const struct minifloat fmt_e2m1 = {1, 1};

/* Largest finite values (OCP FP8 spec table 1; OCP MX spec table for E2M1). */
#define E4M3_MAX 448.0f
#define E5M2_MAX 57344.0f
#define E2M1_MAX 6.0f

/* |x| (finite, >= 0) rounded to the format's grid with unbounded exponent range above. */
static float round_to_grid(float a, struct minifloat f)
{
    if (a == 0.0f) {
        return 0.0f;
    }
    int e2;
    (void)frexpf(a, &e2); /* a = m * 2^e2, m in [0.5, 1): floor(log2 a) = e2 - 1 */
    int emin = 1 - f.bias;
    int binade = e2 - 1 < emin ? emin : e2 - 1;
    int q = binade - f.mant_bits; /* quantum 2^q */
    return ldexpf(rintf(ldexpf(a, -q)), q);
}

/* Unsigned code of a grid magnitude r (0 <= r <= the format's max). */
static uint8_t grid_to_code(float r, struct minifloat f)
{
    if (r == 0.0f) {
        return 0;
    }
    int e2;
    (void)frexpf(r, &e2);
    int emin = 1 - f.bias;
    int binade = e2 - 1;
    if (binade < emin) { /* subnormal: mantissa counts quanta of 2^(emin - mant_bits) */
        return (uint8_t)ldexpf(r, f.mant_bits - emin);
    }
    int mant = (int)ldexpf(r, f.mant_bits - binade) - (1 << f.mant_bits);
    return (uint8_t)(((binade + f.bias) << f.mant_bits) | mant);
}

static float code_to_value(unsigned code, struct minifloat f)
{
    unsigned mant = code & ((1u << f.mant_bits) - 1u);
    int exp_field = (int)(code >> f.mant_bits);
    if (exp_field == 0) {
        return ldexpf((float)mant, 1 - f.bias - f.mant_bits);
    }
    return ldexpf((float)(mant + (1u << f.mant_bits)), exp_field - f.bias - f.mant_bits);
}

uint16_t moe_k_bf16_encode(float x)
{
    uint32_t bits;
    memcpy(&bits, &x, sizeof(bits));
    if (isnan(x)) {
        return (uint16_t)((bits >> 16) | 0x0040u); /* keep sign and top payload, set quiet bit */
    }
    uint32_t rounding_bias = 0x7FFFu + ((bits >> 16) & 1u);
    return (uint16_t)((bits + rounding_bias) >> 16);
}

float moe_k_bf16_decode(uint16_t bits)
{
    uint32_t w = (uint32_t)bits << 16;
    float x;
    memcpy(&x, &w, sizeof(x));
    return x;
}

uint8_t moe_k_fp8_e4m3_encode(float x, bool saturate)
{
    uint8_t sign = signbit(x) ? 0x80 : 0x00;
    if (isnan(x)) {
        return 0x7F | sign;
    }
    float r = isinf(x) ? INFINITY : round_to_grid(fabsf(x), fmt_e4m3);
    if (r > E4M3_MAX) {
        return (saturate ? 0x7E : 0x7F) | sign;
    }
    return grid_to_code(r, fmt_e4m3) | sign;
}

float moe_k_fp8_e4m3_decode(uint8_t bits)
{
    if ((bits & 0x7F) == 0x7F) {
        return (bits & 0x80) ? -NAN : NAN;
    }
    float v = code_to_value(bits & 0x7Fu, fmt_e4m3);
    return (bits & 0x80) ? -v : v;
}

uint8_t moe_k_fp8_e5m2_encode(float x, bool saturate)
{
    uint8_t sign = signbit(x) ? 0x80 : 0x00;
    if (isnan(x)) {
        return 0x7F | sign;
    }
    float r = isinf(x) ? INFINITY : round_to_grid(fabsf(x), fmt_e5m2);
    if (r > E5M2_MAX) {
        return (saturate ? 0x7B : 0x7C) | sign;
    }
    return grid_to_code(r, fmt_e5m2) | sign;
}

float moe_k_fp8_e5m2_decode(uint8_t bits)
{
    unsigned mag = bits & 0x7Fu;
    float v;
    if (mag == 0x7C) {
        v = INFINITY;
    } else if (mag > 0x7C) {
        v = NAN;
    } else {
        v = code_to_value(mag, fmt_e5m2);
    }
    return (bits & 0x80) ? -v : v;
}

uint8_t moe_k_fp4_e2m1_encode(float x)
{
    uint8_t sign = signbit(x) ? 0x08 : 0x00;
    float r = (isnan(x) || isinf(x)) ? INFINITY : round_to_grid(fabsf(x), fmt_e2m1);
    if (r > E2M1_MAX) {
        return 0x07 | sign;
    }
    return grid_to_code(r, fmt_e2m1) | sign;
}

float moe_k_fp4_e2m1_decode(uint8_t bits)
{
    float v = code_to_value(bits & 0x07u, fmt_e2m1);
    return (bits & 0x08) ? -v : v;
}

float moe_k_e8m0_decode(uint8_t bits)
{
    if (bits == 0xFF) {
        return NAN;
    }
    return ldexpf(1.0f, (int)bits - 127);
}

bool moe_k_qdq_supported(enum moe_k_qformat format, enum moe_k_qrecipe recipe)
{
    switch (format) {
    case MOE_K_QFMT_BF16:
        return recipe == MOE_K_QRECIPE_CAST;
    case MOE_K_QFMT_FP8_E4M3:
    case MOE_K_QFMT_FP8_E5M2:
        return recipe == MOE_K_QRECIPE_CAST || recipe == MOE_K_QRECIPE_TENSORWISE ||
               recipe == MOE_K_QRECIPE_BLOCK_1X128 || recipe == MOE_K_QRECIPE_BLOCK_128X128 ||
               recipe == MOE_K_QRECIPE_MX;
    case MOE_K_QFMT_FP4_E2M1:
        return recipe == MOE_K_QRECIPE_MX || recipe == MOE_K_QRECIPE_NVFP4;
    default:
        return false;
    }
}
