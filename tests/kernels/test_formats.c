/*
 * Tests for the bit-exact format encoders (kernels/cpu/formats.c) and the quantise-dequantise
 * recipes (kernels/cpu/quant.c). Encoders: every FP8 code (256) and FP4 code (16) round-trips;
 * every tie between neighbouring codes rounds to the even code; saturation, Inf and NaN follow
 * the documented rules; and random inputs agree with an independent brute-force nearest-value
 * search over the format's value table. Recipes: hand-computed blocks for each recipe (values
 * worked out below), NaN groups, zero tensors, in-place use, and an exact comparison with a
 * straightforward reimplementation over random tensors. PyTorch's own casts are compared in
 * test_refs.c.
 */
#include "tests/kernels/ktest.h"

#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs setjmp.h, stdarg.h, stddef.h and stdint.h first. */
#include <cmocka.h>

typedef uint8_t (*enc_fn)(float x, bool saturate);
typedef float (*dec_fn)(uint8_t bits);

static uint8_t e2m1_enc(float x, bool saturate)
{
    (void)saturate;
    return moe_k_fp4_e2m1_encode(x);
}

static float e2m1_dec(uint8_t bits)
{
    return moe_k_fp4_e2m1_decode(bits);
}

/* Same-bits comparison that treats NaN == NaN only when both are NaN. */
static bool same_float(float a, float b)
{
    if (isnan(a) || isnan(b)) {
        return isnan(a) && isnan(b);
    }
    return a == b && signbit(a) == signbit(b);
}

static void test_e4m3_values(void **state)
{
    (void)state;
    assert_true(moe_k_fp8_e4m3_decode(0x7E) == 448.0f);
    assert_true(moe_k_fp8_e4m3_decode(0x38) == 1.0f);
    assert_true(moe_k_fp8_e4m3_decode(0x08) == ldexpf(1.0f, -6)); /* min normal */
    assert_true(moe_k_fp8_e4m3_decode(0x01) == ldexpf(1.0f, -9)); /* min subnormal */
    assert_true(moe_k_fp8_e4m3_decode(0x07) == 7.0f * ldexpf(1.0f, -9));
    assert_true(moe_k_fp8_e4m3_decode(0xB8) == -1.0f);
    float negzero = moe_k_fp8_e4m3_decode(0x80);
    assert_true(negzero == 0.0f && signbit(negzero));
    assert_true(isnan(moe_k_fp8_e4m3_decode(0x7F)) && isnan(moe_k_fp8_e4m3_decode(0xFF)));
    int nan_codes = 0;
    for (int c = 0; c < 256; c++) {
        nan_codes += isnan(moe_k_fp8_e4m3_decode((uint8_t)c)) ? 1 : 0;
    }
    assert_int_equal(nan_codes, 2);
}

static void test_e5m2_values(void **state)
{
    (void)state;
    assert_true(moe_k_fp8_e5m2_decode(0x7B) == 57344.0f);
    assert_true(moe_k_fp8_e5m2_decode(0x3C) == 1.0f);
    assert_true(moe_k_fp8_e5m2_decode(0x04) == ldexpf(1.0f, -14)); /* min normal */
    assert_true(moe_k_fp8_e5m2_decode(0x01) == ldexpf(1.0f, -16)); /* min subnormal */
    assert_true(isinf(moe_k_fp8_e5m2_decode(0x7C)) && moe_k_fp8_e5m2_decode(0xFC) < 0.0f);
    int nan_codes = 0;
    for (int c = 0; c < 256; c++) {
        nan_codes += isnan(moe_k_fp8_e5m2_decode((uint8_t)c)) ? 1 : 0;
    }
    assert_int_equal(nan_codes, 6);
}

static void test_e2m1_and_e8m0_values(void **state)
{
    (void)state;
    const float expect[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    for (int c = 0; c < 8; c++) {
        assert_true(moe_k_fp4_e2m1_decode((uint8_t)c) == expect[c]);
        assert_true(moe_k_fp4_e2m1_decode((uint8_t)(c | 8)) == -expect[c]);
    }
    assert_true(moe_k_e8m0_decode(127) == 1.0f);
    assert_true(moe_k_e8m0_decode(0) == ldexpf(1.0f, -127));
    assert_true(moe_k_e8m0_decode(254) == ldexpf(1.0f, 127));
    assert_true(isnan(moe_k_e8m0_decode(255)));
}

/* decode -> encode gives the code back for every non-NaN code, in both modes. */
static void roundtrip_all(enc_fn enc, dec_fn dec, int num_codes, uint8_t canonical_nan)
{
    for (int c = 0; c < num_codes; c++) {
        float v = dec((uint8_t)c);
        for (int sat = 0; sat < 2; sat++) {
            uint8_t back = enc(v, sat != 0);
            if (isnan(v)) {
                assert_int_equal(back & 0x7F, canonical_nan);
            } else if (isinf(v)) {
                continue; /* saturating mode maps Inf to max: checked elsewhere */
            } else {
                if (back != c) {
                    (void)fprintf(stderr, "code 0x%02x (%g) -> 0x%02x (sat %d)\n", c, (double)v,
                                  back, sat);
                }
                assert_int_equal(back, c);
            }
        }
    }
}

static void test_roundtrip_all_codes(void **state)
{
    (void)state;
    roundtrip_all(moe_k_fp8_e4m3_encode, moe_k_fp8_e4m3_decode, 256, 0x7F);
    roundtrip_all(moe_k_fp8_e5m2_encode, moe_k_fp8_e5m2_decode, 256, 0x7F);
    roundtrip_all(e2m1_enc, e2m1_dec, 16, 0x07);
}

/*
 * For each pair of neighbouring finite positive codes c, c+1: the exact midpoint rounds to the
 * one with an even code (even mantissa), nextafter below to c, above to c+1.
 */
static void ties_all(enc_fn enc, dec_fn dec, int max_code)
{
    for (int c = 0; c < max_code; c++) {
        float lo = dec((uint8_t)c);
        float hi = dec((uint8_t)(c + 1));
        float mid = (lo + hi) * 0.5f; /* exact: both have few significant bits */
        assert_true(mid > lo && mid < hi);
        uint8_t even = (c % 2 == 0) ? (uint8_t)c : (uint8_t)(c + 1);
        assert_int_equal(enc(mid, false), even);
        assert_int_equal(enc(-mid, false), even | (max_code > 15 ? 0x80 : 0x08));
        assert_int_equal(enc(nextafterf(mid, 0.0f), false), c);
        assert_int_equal(enc(nextafterf(mid, INFINITY), false), c + 1);
    }
}

static void test_ties_to_even(void **state)
{
    (void)state;
    ties_all(moe_k_fp8_e4m3_encode, moe_k_fp8_e4m3_decode, 0x7E); /* up to 416 | 448 */
    ties_all(moe_k_fp8_e5m2_encode, moe_k_fp8_e5m2_decode, 0x7B); /* up to 49152 | 57344 */
    ties_all(e2m1_enc, e2m1_dec, 7);                              /* up to 4 | 6 */
    /* Hand cases: 0.25 ties 0 | 0.5 -> 0; 2.5 ties 2 | 3 -> 2; 5 ties 4 | 6 -> 4. */
    assert_int_equal(moe_k_fp4_e2m1_encode(0.25f), 0);
    assert_int_equal(moe_k_fp4_e2m1_encode(2.5f), 4);
    assert_int_equal(moe_k_fp4_e2m1_encode(5.0f), 6);
    assert_int_equal(moe_k_fp4_e2m1_encode(0.75f), 2);
}

static void test_saturation_and_specials(void **state)
{
    (void)state;
    /* E4M3: 448 | (480 = the NaN code's value). 464 ties to 448 (even); above overflows. */
    assert_int_equal(moe_k_fp8_e4m3_encode(464.0f, false), 0x7E);
    assert_int_equal(moe_k_fp8_e4m3_encode(464.5f, false), 0x7F);
    assert_int_equal(moe_k_fp8_e4m3_encode(464.5f, true), 0x7E);
    assert_int_equal(moe_k_fp8_e4m3_encode(-1e9f, false), 0xFF);
    assert_int_equal(moe_k_fp8_e4m3_encode(-1e9f, true), 0xFE);
    assert_int_equal(moe_k_fp8_e4m3_encode(INFINITY, false), 0x7F);
    assert_int_equal(moe_k_fp8_e4m3_encode(INFINITY, true), 0x7E);
    assert_int_equal(moe_k_fp8_e4m3_encode(-NAN, true), 0xFF);
    assert_int_equal(moe_k_fp8_e4m3_encode(NAN, false), 0x7F);
    /* E5M2: 57344 | 65536 tie at 61440 goes to the even side, which is Inf. */
    assert_int_equal(moe_k_fp8_e5m2_encode(61439.0f, false), 0x7B);
    assert_int_equal(moe_k_fp8_e5m2_encode(61440.0f, false), 0x7C);
    assert_int_equal(moe_k_fp8_e5m2_encode(61440.0f, true), 0x7B);
    assert_int_equal(moe_k_fp8_e5m2_encode(-INFINITY, false), 0xFC);
    assert_int_equal(moe_k_fp8_e5m2_encode(-INFINITY, true), 0xFB);
    assert_int_equal(moe_k_fp8_e5m2_encode(NAN, false), 0x7F);
    /* E2M1 saturates always. */
    assert_int_equal(moe_k_fp4_e2m1_encode(7.0f), 0x07);
    assert_int_equal(moe_k_fp4_e2m1_encode(-100.0f), 0x0F);
    /* Signed zero and underflow keep the sign. */
    assert_int_equal(moe_k_fp8_e4m3_encode(-0.0f, false), 0x80);
    assert_int_equal(moe_k_fp8_e4m3_encode(-1e-30f, false), 0x80);
    assert_int_equal(moe_k_fp8_e5m2_encode(1e-30f, false), 0x00);
}

static void test_subnormals(void **state)
{
    (void)state;
    float q = ldexpf(1.0f, -9);                                     /* E4M3 subnormal quantum */
    assert_int_equal(moe_k_fp8_e4m3_encode(0.5f * q, false), 0x00); /* tie 0 | 1 -> 0 */
    assert_int_equal(moe_k_fp8_e4m3_encode(0.75f * q, false), 0x01);
    assert_int_equal(moe_k_fp8_e4m3_encode(1.5f * q, false), 0x02); /* tie 1 | 2 -> 2 */
    assert_int_equal(moe_k_fp8_e4m3_encode(2.5f * q, false), 0x02); /* tie 2 | 3 -> 2 */
    assert_int_equal(moe_k_fp8_e4m3_encode(7.5f * q, false), 0x08); /* tie 7 | min normal */
    float q5 = ldexpf(1.0f, -16);                                   /* E5M2 subnormal quantum */
    assert_int_equal(moe_k_fp8_e5m2_encode(3.0f * q5, false), 0x03);
    assert_int_equal(moe_k_fp8_e5m2_encode(3.5f * q5, false), 0x04);
    assert_int_equal(moe_k_fp8_e5m2_encode(0.5f * q5, false), 0x00);
    /* fp32 subnormal inputs. */
    assert_int_equal(moe_k_fp8_e4m3_encode(1e-40f, false), 0x00);
    assert_int_equal(moe_k_bf16_encode(1e-40f), 0x0001); /* 1e-40 = 71362 * 2^-149 -> 0x0001 */
}

static void test_bf16(void **state)
{
    (void)state;
    float one_p8 = 1.0f + ldexpf(1.0f, -8);          /* tie 1 | 1+2^-7 -> 1 */
    float three_p8 = 1.0f + 3.0f * ldexpf(1.0f, -8); /* tie 1+2^-7 | 1+2^-6 -> 1+2^-6 */
    assert_int_equal(moe_k_bf16_encode(one_p8), 0x3F80);
    assert_int_equal(moe_k_bf16_encode(three_p8), 0x3F82);
    assert_int_equal(moe_k_bf16_encode(nextafterf(one_p8, 2.0f)), 0x3F81);
    assert_int_equal(moe_k_bf16_encode(FLT_MAX), 0x7F80); /* rounds to Inf */
    assert_int_equal(moe_k_bf16_encode(-INFINITY), 0xFF80);
    uint16_t n = moe_k_bf16_encode(NAN);
    assert_true((n & 0x7F80) == 0x7F80 && (n & 0x0040) != 0);
    assert_true(isnan(moe_k_bf16_decode(n)));
    assert_true(moe_k_bf16_decode(0x4049) == 3.140625f);
    /* Every bf16 value round-trips. */
    for (uint32_t c = 0; c < 65536; c++) {
        float v = moe_k_bf16_decode((uint16_t)c);
        if (!isnan(v)) {
            assert_int_equal(moe_k_bf16_encode(v), c);
        }
    }
}

/* Brute force: nearest finite value of the format (ties -> even code), then overflow rules. */
static uint8_t brute_encode(float x, dec_fn dec, int num_pos_codes, uint8_t sign_bit)
{
    double a = fabs((double)x);
    int best = 0;
    for (int c = 1; c < num_pos_codes; c++) {
        double d = fabs((double)dec((uint8_t)c) - a);
        double db = fabs((double)dec((uint8_t)best) - a);
        if (d < db || (d == db && c % 2 == 0)) {
            best = c;
        }
    }
    return (uint8_t)best | (signbit(x) ? sign_bit : 0);
}

static void test_random_vs_brute_force(void **state)
{
    (void)state;
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 7);
    for (int i = 0; i < 20000; i++) {
        /* log-uniform magnitudes across the formats' ranges */
        double mag = pow(2.0, -20.0 + 40.0 * moe_test_rng_uniform(&rng));
        float x = (float)(moe_test_rng_uniform(&rng) < 0.5 ? -mag : mag);
        if (fabsf(x) <= 448.0f) {
            assert_int_equal(moe_k_fp8_e4m3_encode(x, true),
                             brute_encode(x, moe_k_fp8_e4m3_decode, 0x7F, 0x80));
        }
        if (fabsf(x) <= 57344.0f) {
            assert_int_equal(moe_k_fp8_e5m2_encode(x, true),
                             brute_encode(x, moe_k_fp8_e5m2_decode, 0x7C, 0x80));
        }
        if (fabsf(x) <= 6.0f) {
            assert_int_equal(moe_k_fp4_e2m1_encode(x), brute_encode(x, e2m1_dec, 8, 0x08));
        }
    }
}

/* ---- Recipes ------------------------------------------------------------------------------ */

static void test_qdq_supported(void **state)
{
    (void)state;
    assert_true(moe_k_qdq_supported(MOE_K_QFMT_BF16, MOE_K_QRECIPE_CAST));
    assert_false(moe_k_qdq_supported(MOE_K_QFMT_BF16, MOE_K_QRECIPE_MX));
    assert_true(moe_k_qdq_supported(MOE_K_QFMT_FP8_E4M3, MOE_K_QRECIPE_BLOCK_128X128));
    assert_true(moe_k_qdq_supported(MOE_K_QFMT_FP8_E5M2, MOE_K_QRECIPE_MX));
    assert_true(moe_k_qdq_supported(MOE_K_QFMT_FP4_E2M1, MOE_K_QRECIPE_NVFP4));
    assert_false(moe_k_qdq_supported(MOE_K_QFMT_FP4_E2M1, MOE_K_QRECIPE_TENSORWISE));
    assert_false(moe_k_qdq_supported(MOE_K_QFMT_FP8_E4M3, MOE_K_QRECIPE_NVFP4));
}

/* MX E4M3, one 32-block, amax 1.0: X = 2^(0 - 8); 1.0 -> 256 -> 1.0; 0.3 -> 76.8 -> 80 (grid 8
 * in [64, 128)) -> 0.3125. Second block amax 1.9: X = 2^-8 too; 1.9 -> 486.4 saturates to 448
 * -> 1.75 (the MX clipping of the top binade). */
static void test_mx_hand(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    float in[64] = {0};
    in[0] = 1.0f;
    in[1] = 0.3f;
    in[2] = -0.3f;
    in[32] = 1.9f;
    in[33] = 1.0f;
    float out[64];
    ops->qdq(out, in, 1, 64, MOE_K_QFMT_FP8_E4M3, MOE_K_QRECIPE_MX, ctx);
    assert_true(out[0] == 1.0f);
    assert_true(out[1] == 0.3125f);
    assert_true(out[2] == -0.3125f);
    assert_true(out[3] == 0.0f);
    assert_true(out[32] == 1.75f);
    assert_true(out[33] == 1.0f);
    /* MXFP4: amax 1.0 -> X = 2^(0 - 2); 0.3 -> 1.2 -> 1.0 -> 0.25; 1.0 -> 4 -> 1.0. */
    ops->qdq(out, in, 1, 64, MOE_K_QFMT_FP4_E2M1, MOE_K_QRECIPE_MX, ctx);
    assert_true(out[0] == 1.0f && out[1] == 0.25f && out[2] == -0.25f);
    /* A NaN poisons its own block only. */
    in[40] = NAN;
    ops->qdq(out, in, 1, 64, MOE_K_QFMT_FP8_E4M3, MOE_K_QRECIPE_MX, ctx);
    assert_true(out[0] == 1.0f && isnan(out[32]) && isnan(out[63]));
    moe_k_ctx_destroy(ctx);
}

/* NVFP4, [1, 32]: tensor amax 6 -> s_t = 2688 / 6 = 448. Block 0 amax 6: S = e4m3(448) = 448,
 * in * (448/448): 6 -> 6, 2.5 -> 2 (tie to even), 0.75 -> 1. Block 1 amax 3: S = e4m3(224) = 224,
 * in * 2: 3 -> 6 -> 3; 1.1 -> 2.2 -> 2 -> 1.0; 0.3 -> 0.6 -> 0.5 -> 0.25. */
static void test_nvfp4_hand(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    float in[32] = {0};
    in[0] = 6.0f;
    in[1] = 2.5f;
    in[2] = -0.75f;
    in[16] = 3.0f;
    in[17] = 1.1f;
    in[18] = 0.3f;
    float out[32];
    ops->qdq(out, in, 1, 32, MOE_K_QFMT_FP4_E2M1, MOE_K_QRECIPE_NVFP4, ctx);
    float inv = 1.0f / 448.0f;
    assert_true(out[0] == (6.0f * 448.0f) * inv);
    assert_true(out[1] == (2.0f * 448.0f) * inv);
    assert_true(out[2] == (-1.0f * 448.0f) * inv);
    assert_true(out[16] == (6.0f * 224.0f) * inv);
    assert_true(out[17] == (2.0f * 224.0f) * inv);
    assert_true(out[18] == (0.5f * 224.0f) * inv);
    assert_true(fabsf(out[16] - 3.0f) < 1e-6f && fabsf(out[17] - 1.0f) < 1e-6f);
    /* All-zero tensor -> zeros; a NaN anywhere -> all NaN (the tensor scale is poisoned). */
    float zeros[32] = {0};
    ops->qdq(out, zeros, 1, 32, MOE_K_QFMT_FP4_E2M1, MOE_K_QRECIPE_NVFP4, ctx);
    assert_true(out[0] == 0.0f && out[31] == 0.0f);
    in[5] = NAN;
    ops->qdq(out, in, 1, 32, MOE_K_QFMT_FP4_E2M1, MOE_K_QRECIPE_NVFP4, ctx);
    assert_true(isnan(out[0]) && isnan(out[31]));
    moe_k_ctx_destroy(ctx);
}

/* Tensorwise E4M3: the amax element maps to 448 and back; BF16 cast equals encode/decode. */
static void test_tensorwise_and_cast(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    float in[6] = {0.5f, -3.0f, 1.0f, 0.0f, 0.01f, 2.0f};
    float out[6];
    ops->qdq(out, in, 2, 3, MOE_K_QFMT_FP8_E4M3, MOE_K_QRECIPE_TENSORWISE, ctx);
    float s = 448.0f / 3.0f;
    for (int i = 0; i < 6; i++) {
        float expect = moe_k_fp8_e4m3_decode(moe_k_fp8_e4m3_encode(in[i] * s, true)) * (1.0f / s);
        assert_true(same_float(out[i], expect));
    }
    assert_true(fabsf(out[1] + 3.0f) < 1e-6f);
    ops->qdq(out, in, 2, 3, MOE_K_QFMT_BF16, MOE_K_QRECIPE_CAST, ctx);
    for (int i = 0; i < 6; i++) {
        assert_true(out[i] == moe_k_bf16_decode(moe_k_bf16_encode(in[i])));
    }
    /* FP8 cast saturates Inf to max, keeps NaN. */
    float sp[3] = {INFINITY, NAN, 1000.0f};
    ops->qdq(out, sp, 1, 3, MOE_K_QFMT_FP8_E4M3, MOE_K_QRECIPE_CAST, ctx);
    assert_true(out[0] == 448.0f && isnan(out[1]) && out[2] == 448.0f);
    moe_k_ctx_destroy(ctx);
}

/* Straightforward reimplementation of the scaled FP8 recipes over tiles of tr x tc. */
static void ref_fp8_tiles(float *out, const float *in, int rows, int cols, int tr, int tc, bool e4)
{
    float fmax = e4 ? 448.0f : 57344.0f;
    for (int r0 = 0; r0 < rows; r0 += tr) {
        for (int c0 = 0; c0 < cols; c0 += tc) {
            float amax = 0.0f;
            for (int r = r0; r < rows && r < r0 + tr; r++) {
                for (int c = c0; c < cols && c < c0 + tc; c++) {
                    amax = fmaxf(amax, fabsf(in[r * cols + c]));
                }
            }
            float s = amax > 0.0f ? fmax / amax : 1.0f;
            for (int r = r0; r < rows && r < r0 + tr; r++) {
                for (int c = c0; c < cols && c < c0 + tc; c++) {
                    float x = in[r * cols + c] * s;
                    float q = e4 ? moe_k_fp8_e4m3_decode(moe_k_fp8_e4m3_encode(x, true))
                                 : moe_k_fp8_e5m2_decode(moe_k_fp8_e5m2_encode(x, true));
                    out[r * cols + c] = q * (1.0f / s);
                }
            }
        }
    }
}

static void test_blockwise_vs_reference(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 3);
    enum { ROWS = 130, COLS = 300 }; /* partial tiles at both edges */
    float *in = ktest_random(&rng, ROWS * COLS, -1.0f, 1.0f);
    for (int i = 0; i < ROWS * COLS; i++) {
        in[i] *= (float)pow(10.0, 4.0 * moe_test_rng_uniform(&rng) - 2.0); /* wide range */
    }
    float *out = ktest_floats(ROWS * COLS);
    float *ref = ktest_floats(ROWS * COLS);
    const struct {
        enum moe_k_qrecipe recipe;
        int tr, tc;
    } cases[] = {{MOE_K_QRECIPE_TENSORWISE, ROWS, COLS},
                 {MOE_K_QRECIPE_BLOCK_1X128, 1, 128},
                 {MOE_K_QRECIPE_BLOCK_128X128, 128, 128}};
    for (size_t k = 0; k < MOE_ARRAY_LEN(cases); k++) {
        for (int e4 = 0; e4 < 2; e4++) {
            enum moe_k_qformat f = e4 ? MOE_K_QFMT_FP8_E4M3 : MOE_K_QFMT_FP8_E5M2;
            ops->qdq(out, in, ROWS, COLS, f, cases[k].recipe, ctx);
            ref_fp8_tiles(ref, in, ROWS, COLS, cases[k].tr, cases[k].tc, e4 != 0);
            assert_memory_equal(out, ref, sizeof(float) * ROWS * COLS);
        }
    }
    /* In place gives the same bits. */
    ops->qdq(out, in, ROWS, COLS, MOE_K_QFMT_FP8_E4M3, MOE_K_QRECIPE_MX, ctx);
    ops->qdq(in, in, ROWS, COLS, MOE_K_QFMT_FP8_E4M3, MOE_K_QRECIPE_MX, ctx);
    assert_memory_equal(out, in, sizeof(float) * ROWS * COLS);
    free(in);
    free(out);
    free(ref);
    moe_k_ctx_destroy(ctx);
}

/* Quantisation error bounds: E4M3 keeps 3 mantissa bits, so a normal value within a block
 * scaled to 448 is off by at most 2^-4 relative; MX with E4M3 likewise below the clipped top. */
static void test_error_bounds(void **state)
{
    (void)state;
    moe_k_ctx_t *ctx = ktest_cpu_ctx();
    const struct moe_k_ops *ops = moe_k_ctx_ops(ctx);
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 11);
    enum { N = 4096 };
    float *in = ktest_random(&rng, N, 0.5f, 1.0f); /* one binade: amax/min < 2 */
    float *out = ktest_floats(N);
    ops->qdq(out, in, 32, 128, MOE_K_QFMT_FP8_E4M3, MOE_K_QRECIPE_BLOCK_1X128, ctx);
    for (int i = 0; i < N; i++) {
        assert_true(fabsf(out[i] - in[i]) <= ldexpf(in[i], -4) * 1.0001f);
    }
    ops->qdq(out, in, 1, N, MOE_K_QFMT_BF16, MOE_K_QRECIPE_CAST, ctx);
    for (int i = 0; i < N; i++) {
        assert_true(fabsf(out[i] - in[i]) <= ldexpf(in[i], -8));
    }
    free(in);
    free(out);
    moe_k_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_e4m3_values),
        cmocka_unit_test(test_e5m2_values),
        cmocka_unit_test(test_e2m1_and_e8m0_values),
        cmocka_unit_test(test_roundtrip_all_codes),
        cmocka_unit_test(test_ties_to_even),
        cmocka_unit_test(test_saturation_and_specials),
        cmocka_unit_test(test_subnormals),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_random_vs_brute_force),
        cmocka_unit_test(test_qdq_supported),
        cmocka_unit_test(test_mx_hand),
        cmocka_unit_test(test_nvfp4_hand),
        cmocka_unit_test(test_tensorwise_and_cast),
        cmocka_unit_test(test_blockwise_vs_reference),
        cmocka_unit_test(test_error_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
