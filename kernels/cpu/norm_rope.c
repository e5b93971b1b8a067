/*
 * RMSNorm (Zhang & Sennrich 2019; as Llama / DeepSeek use it: y = x / rms(x) * weight, no bias,
 * no mean subtraction) and rotary position embedding (Su et al. 2021, RoFormer) on a sub-range
 * of each head's dims, which is what MLA's decoupled rope part and partial rotary need. Angles
 * and their sines/cosines are computed in double per (token, pair) and rounded once to fp32.
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

/* Rotate (sign = +1) or rotate back (sign = -1) dims [rot_start, rot_start + rot_dim) of every
 * head; copy the other dims when out != in. */
static void rope_apply(float *out,
                       const float *in,
                       const int *positions,
                       int num_rows,
                       int num_heads,
                       int head_dim,
                       int rot_start,
                       int rot_dim,
                       float theta,
                       bool interleaved,
                       double sign)
{
    MOE_ASSERT(num_rows >= 0 && num_heads > 0 && rot_dim > 0 && rot_dim % 2 == 0);
    MOE_ASSERT(rot_start >= 0 && rot_start + rot_dim <= head_dim);
    size_t row_len = (size_t)num_heads * (size_t)head_dim;
    int half = rot_dim / 2;
    for (int r = 0; r < num_rows; r++) {
        float *o = out + (size_t)r * row_len;
        const float *x = in + (size_t)r * row_len;
        if (o != x) {
            memcpy(o, x, row_len * sizeof(float));
        }
        for (int j = 0; j < half; j++) {
            double inv_freq = pow((double)theta, -2.0 * (double)j / (double)rot_dim);
            double angle = (double)positions[r] * inv_freq;
            float c = (float)cos(angle);
            float s = (float)(sign * sin(angle));
            int a = rot_start + (interleaved ? 2 * j : j);
            int b = rot_start + (interleaved ? 2 * j + 1 : j + half);
            for (int h = 0; h < num_heads; h++) {
                size_t base = (size_t)h * (size_t)head_dim;
                float xa = x[base + (size_t)a];
                float xb = x[base + (size_t)b];
                o[base + (size_t)a] = xa * c - xb * s;
                o[base + (size_t)b] = xa * s + xb * c;
            }
        }
    }
}

void moe_k_cpu_rope_fwd(float *out,
                        const float *in,
                        const int *positions,
                        int num_rows,
                        int num_heads,
                        int head_dim,
                        int rot_start,
                        int rot_dim,
                        float theta,
                        bool interleaved,
                        moe_k_ctx_t *ctx)
{
    (void)ctx;
    rope_apply(out, in, positions, num_rows, num_heads, head_dim, rot_start, rot_dim, theta,
               interleaved, 1.0);
}

void moe_k_cpu_rope_bwd(float *d_in,
                        const float *d_out,
                        const int *positions,
                        int num_rows,
                        int num_heads,
                        int head_dim,
                        int rot_start,
                        int rot_dim,
                        float theta,
                        bool interleaved,
                        moe_k_ctx_t *ctx)
{
    (void)ctx;
    rope_apply(d_in, d_out, positions, num_rows, num_heads, head_dim, rot_start, rot_dim, theta,
               interleaved, -1.0);
}
