/*
 * RMSNorm (Zhang & Sennrich 2019; as Llama / DeepSeek use it: y = x / rms(x) * weight, no bias,
 * no mean subtraction) and rotary position embedding (Su et al. 2021, RoFormer) on a sub-range
 * of each head's dims, which is what MLA's decoupled rope part and partial rotary need. As
 * Megatron-LM precomputes its rotary frequencies once, the angles' cosines and sines are a table
 * made once per run (rope_table: in double per (token, pair), rounded once to fp32), and
 * rope_fwd/bwd only read it: a streaming op of two reads and two writes per rotated pair.
 * No YaRN or other frequency scaling: the engine's presets use plain rope.
 */
#include "kernels/cpu/cpu.h"

#include <math.h>
#include <string.h>

void moe_k_cpu_rmsnorm_fwd(float *y,
                           float *rstd,
                           const float *x,
                           const float *weight,
                           int num_rows,
                           int hidden,
                           float eps,
                           moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(num_rows >= 0 && hidden > 0);
    for (int r = 0; r < num_rows; r++) {
        const float *xr = x + (size_t)r * (size_t)hidden;
        float *yr = y + (size_t)r * (size_t)hidden;
        double ss = 0.0;
        for (int c = 0; c < hidden; c++) {
            ss += (double)xr[c] * (double)xr[c];
        }
        float rs = (float)(1.0 / sqrt(ss / (double)hidden + (double)eps));
        rstd[r] = rs;
        for (int c = 0; c < hidden; c++) {
            yr[c] = xr[c] * rs * weight[c];
        }
    }
}

void moe_k_cpu_rmsnorm_bwd(float *dx,
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
    (void)ctx;
    MOE_ASSERT(num_rows >= 0 && hidden > 0);
    for (int r = 0; r < num_rows; r++) {
        const float *xr = x + (size_t)r * (size_t)hidden;
        const float *gr = dy + (size_t)r * (size_t)hidden;
        float *dxr = dx + (size_t)r * (size_t)hidden;
        float rs = rstd[r];
        /* dx = rstd * (w*dy - x * rstd^2 * mean(w*dy*x)) */
        double dot = 0.0;
        for (int c = 0; c < hidden; c++) {
            dot += (double)(weight[c] * gr[c]) * (double)xr[c];
        }
        float k = (float)(dot / (double)hidden) * rs * rs;
        for (int c = 0; c < hidden; c++) {
            float v = rs * (weight[c] * gr[c] - xr[c] * k);
            dxr[c] = accumulate ? dxr[c] + v : v;
            d_weight[c] += gr[c] * xr[c] * rs;
        }
    }
}

void moe_k_cpu_rope_table(
    float *cos_sin, const int *positions, int num_rows, int rot_dim, float theta, moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(num_rows >= 0 && rot_dim > 0 && rot_dim % 2 == 0);
    int half = rot_dim / 2;
    for (int j = 0; j < half; j++) {
        double inv_freq = pow((double)theta, -2.0 * (double)j / (double)rot_dim);
        for (int r = 0; r < num_rows; r++) {
            double angle = (double)positions[r] * inv_freq;
            float *cs = cos_sin + ((size_t)r * (size_t)half + (size_t)j) * 2;
            cs[0] = (float)cos(angle);
            cs[1] = (float)sin(angle);
        }
    }
}

/* Rotate (sign = +1) or rotate back (sign = -1) dims [rot_start, rot_start + rot_dim) of every
 * head by the angles of cos_sin[M, rot_dim/2, 2]; copy the other dims when out != in. Negating
 * the fp32 sine is exact, so the backward uses the same rounded values as the forward. */
static void rope_apply(float *out,
                       const float *in,
                       const float *cos_sin,
                       int num_rows,
                       int num_heads,
                       int head_dim,
                       int rot_start,
                       int rot_dim,
                       bool interleaved,
                       float sign)
{
    MOE_ASSERT(num_rows >= 0 && num_heads > 0 && rot_dim > 0 && rot_dim % 2 == 0);
    MOE_ASSERT(rot_start >= 0 && rot_start + rot_dim <= head_dim);
    size_t row_len = (size_t)num_heads * (size_t)head_dim;
    int half = rot_dim / 2;
    int step = interleaved ? 2 : 1;   /* distance between pair starts */
    int gap = interleaved ? 1 : half; /* distance from a pair's first dim to its second */
    for (int r = 0; r < num_rows; r++) {
        float *o = out + (size_t)r * row_len;
        const float *x = in + (size_t)r * row_len;
        const float *cs = cos_sin + (size_t)r * (size_t)half * 2;
        if (o != x) {
            memcpy(o, x, row_len * sizeof(float));
        }
        for (int h = 0; h < num_heads; h++) {
            const float *xh = x + (size_t)h * (size_t)head_dim + rot_start;
            float *oh = o + (size_t)h * (size_t)head_dim + rot_start;
            for (int j = 0; j < half; j++) {
                float c = cs[2 * j];
                float s = sign * cs[2 * j + 1];
                float xa = xh[j * step];
                float xb = xh[j * step + gap];
                oh[j * step] = xa * c - xb * s;
                oh[j * step + gap] = xa * s + xb * c;
            }
        }
    }
}

void moe_k_cpu_rope_fwd(float *out,
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
    (void)ctx;
    rope_apply(out, in, cos_sin, num_rows, num_heads, head_dim, rot_start, rot_dim, interleaved,
               1.0f);
}

void moe_k_cpu_rope_bwd(float *d_in,
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
    (void)ctx;
    rope_apply(d_in, d_out, cos_sin, num_rows, num_heads, head_dim, rot_start, rot_dim, interleaved,
               -1.0f);
}
