/*
 * The CUDA backend's extras beyond the shared ops table (kernels/kernels.h): device detection,
 * device memory and copies, the GEMM math mode, the grouped-GEMM implementation choice, native
 * BF16 GEMMs on BF16 storage (for benchmarks and a BF16-storage engine), tensorwise FP8 GEMM
 * through cuBLASLt, CUDA-event timers and device memory figures.
 *
 * What this is not: the ops themselves (those are the moe_k_ops table, filled by moe_k_cuda_ops()),
 * nor communication (NCCL lives in engine/). Every function here is defined only where
 * kernels/cuda/ is built, which the build announces with MOE_HAVE_CUDA_KERNELS; callers in
 * always-built code test that macro, or use only the ops table (moe_k_ops_for(MOE_K_BACKEND_CUDA)
 * is NULL without CUDA and moe_k_ctx_create() returns MOE_ERR_UNSUPPORTED when no device is
 * present).
 *
 * Plain C, valid C++ (the .cu files include it); needs no CUDA header: streams and events stay
 * inside the kernel context or opaque handles. Device pointers are plain pointers.
 *
 * Dimension letters as in kernels/kernels.h: M rows, R permuted rows, E experts, C/F features.
 */
#ifndef MOE_KERNELS_CUDA_CUDA_BACKEND_H
#define MOE_KERNELS_CUDA_CUDA_BACKEND_H

#include "kernels/kernels.h"
#include "model/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * True when a CUDA device can be used (the driver answers and reports at least one device).
 * Otherwise false, with a one-line reason in why[why_len] (may be NULL) such as
 * "no CUDA device (cudaGetDeviceCount: no CUDA-capable device is detected)", for the caller's
 * one-line note before it falls back to the CPU backend.
 */
bool moe_k_cuda_available(char *why, size_t why_len);

/* ---- Device memory (plain cudaMalloc; never managed memory) ------------------------------- */

/* *out = bytes of device memory (256-byte aligned). MOE_ERR_NOMEM when the device is full,
 * MOE_ERR_UNSUPPORTED without a device. bytes == 0 gives a valid one-byte allocation. */
MOE_NODISCARD enum moe_status moe_k_cuda_alloc(void **out, size_t bytes);
/* Release memory from moe_k_cuda_alloc; NULL does nothing. */
void moe_k_cuda_free(void *ptr);
/* Copies on the context's stream; both return after the copy completed (host memory may be
 * pageable). dst/src: device pointer on the device side. */
void moe_k_cuda_copy_to_device(void *dst, const void *src, size_t bytes, moe_k_ctx_t *ctx);
void moe_k_cuda_copy_to_host(void *dst, const void *src, size_t bytes, moe_k_ctx_t *ctx);
/* Fill bytes of device memory with the byte value (cudaMemsetAsync), in stream order. */
void moe_k_cuda_memset(void *dst, int value, size_t bytes, moe_k_ctx_t *ctx);
/* Wait until everything launched on the context's stream has finished. */
void moe_k_cuda_synchronize(moe_k_ctx_t *ctx);
/* Free and total device memory in bytes (cudaMemGetInfo). */
void moe_k_cuda_mem_info(size_t *free_bytes, size_t *total_bytes, moe_k_ctx_t *ctx);

/* Device facts read at context creation. */
struct moe_k_cuda_device_info {
    char name[256];         /* cudaDeviceProp.name, "NVIDIA H200" */
    int cc_major, cc_minor; /* compute capability, 9.0 on Hopper */
    int num_sms;            /* streaming multiprocessors */
    size_t total_bytes;     /* device memory */
    bool has_fp8_gemm;      /* cuBLASLt FP8 GEMMs possible (compute capability >= 8.9) */
};
void moe_k_cuda_device_info(struct moe_k_cuda_device_info *out, moe_k_ctx_t *ctx);

/* ---- GEMM math ------------------------------------------------------------------------------ */

/*
 * How the fp32-storage GEMM ops of the table (matmul, linear_*, grouped_linear_*, attention)
 * compute. Storage stays fp32 in every mode; only the tensor-core input precision changes.
 *  FP32: IEEE fp32 products and sums (CUBLAS_COMPUTE_32F_PEDANTIC): matches the CPU reference up
 *        to summation order. The default.
 *  TF32: inputs rounded to TF32 inside cuBLAS (CUBLAS_COMPUTE_32F_FAST_TF32), fp32 accumulation.
 *  BF16: inputs rounded to BF16 inside cuBLAS (CUBLAS_COMPUTE_32F_FAST_16BF), fp32 accumulation:
 *        "BF16 in, FP32 accumulate". On inputs already passed through qdq(BF16, CAST) the rounding
 *        is exact, so the result equals the CPU's fp32 GEMM on those inputs up to summation order;
 *        this is the mode the engine uses when its precision emulation asks for BF16 GEMMs.
 */
enum moe_k_cuda_gemm_math {
    MOE_K_CUDA_GEMM_FP32 = 0,
    MOE_K_CUDA_GEMM_TF32 = 1,
    MOE_K_CUDA_GEMM_BF16 = 2,
};
void moe_k_cuda_set_gemm_math(moe_k_ctx_t *ctx, enum moe_k_cuda_gemm_math math);
enum moe_k_cuda_gemm_math moe_k_cuda_gemm_math(const moe_k_ctx_t *ctx);

/*
 * Grouped expert GEMM implementation. GROUPED: one cublasGemmGroupedBatchedEx call for all
 * non-empty experts. STREAMS: one cublasGemmEx per expert, round-robin over a few side streams
 * (each with its own cuBLAS handle and workspace), joined back by events. AUTO (the default) uses
 * GROUPED where cuBLAS supports the type combination and falls back to STREAMS when it answers
 * CUBLAS_STATUS_NOT_SUPPORTED (remembered per context). Both give the same values up to
 * cuBLAS's choice of summation order.
 */
enum moe_k_cuda_grouped_impl {
    MOE_K_CUDA_GROUPED_AUTO = 0,
    MOE_K_CUDA_GROUPED_BATCHED = 1,
    MOE_K_CUDA_GROUPED_STREAMS = 2,
};
void moe_k_cuda_set_grouped_impl(moe_k_ctx_t *ctx, enum moe_k_cuda_grouped_impl impl);
/* Which implementation the last grouped GEMM on ctx really ran (BATCHED or STREAMS; AUTO before
 * the first call). */
enum moe_k_cuda_grouped_impl moe_k_cuda_last_grouped_impl(const moe_k_ctx_t *ctx);

/* ---- Native BF16 storage (uint16_t holds the BF16 bits) ------------------------------------ */

/* dst[n] = BF16 of src[n], round-to-nearest-even exactly as moe_k_bf16_encode (device pointers). */
void moe_k_cuda_to_bf16(uint16_t *dst, const float *src, size_t n, moe_k_ctx_t *ctx);

/* Dense BF16 GEMM, fp32 accumulate: c[m, n] = alpha op(a) op(b) + beta c with the conventions of
 * the matmul op; a, b BF16; c fp32 (c_bf16 false) or BF16 (c_bf16 true, then c is uint16_t*). */
void moe_k_cuda_gemm_bf16(void *c,
                          bool c_bf16,
                          const uint16_t *a,
                          const uint16_t *b,
                          int m,
                          int n,
                          int k,
                          bool trans_a,
                          bool trans_b,
                          float alpha,
                          float beta,
                          moe_k_ctx_t *ctx);

/*
 * Grouped expert forward on BF16 storage: y[R, out] = x[R, in] w[e][out, in]^T per expert group,
 * counts_host[E] in HOST memory (so no device->host copy is needed: the engine knows the counts
 * after the dispatch exchange), x and w BF16, y fp32 (y_bf16 false) or BF16. Overwrites y.
 * Returns the implementation that ran (BATCHED or STREAMS), per the context's setting.
 */
enum moe_k_cuda_grouped_impl moe_k_cuda_grouped_linear_fwd_bf16(void *y,
                                                                bool y_bf16,
                                                                const uint16_t *x,
                                                                const uint16_t *w,
                                                                const int *counts_host,
                                                                int num_experts,
                                                                int in_dim,
                                                                int out_dim,
                                                                moe_k_ctx_t *ctx);

/* ---- FP8 through cuBLASLt (tensorwise scaling, sm_89+ / Hopper) --------------------------- */

/*
 * Tensorwise FP8 quantisation to codes: s = fmt_max / amax(in[n]) as in qdq TENSORWISE (1 when
 * amax == 0, FLT_MAX when it overflows), codes[i] = encode_saturating(in[i] * s), bit for bit the
 * CPU encoder; scale_inv[1] = 1 / s (device). A non-finite input makes every code NaN (0x7F),
 * as qdq makes the whole tensor NaN. format: FP8_E4M3 or FP8_E5M2.
 */
void moe_k_cuda_quantize_fp8_tensorwise(uint8_t *codes,
                                        float *scale_inv,
                                        const float *in,
                                        size_t n,
                                        enum moe_k_qformat format,
                                        moe_k_ctx_t *ctx);

/*
 * y[M, out] = (x_codes * x_scale_inv) (w_codes * w_scale_inv)^T, fp32 out, fp32 accumulation in
 * cuBLASLt (fast accumulation off); x_codes[M, in], w_codes[out, in] row-major FP8 codes with
 * device scale_inv[1] each, from moe_k_cuda_quantize_fp8_tensorwise. Equals linear_fwd on the
 * qdq(TENSORWISE) inputs up to summation order. Overwrites y.
 * Returns MOE_OK; MOE_ERR_UNSUPPORTED when the device has no FP8 GEMM (compute capability < 8.9),
 * both inputs are E5M2, in_dim or out_dim is not a multiple of 16, or cuBLASLt finds no algorithm.
 */
MOE_NODISCARD enum moe_status moe_k_cuda_linear_fwd_fp8(float *y,
                                                        const uint8_t *x_codes,
                                                        enum moe_k_qformat x_format,
                                                        const float *x_scale_inv,
                                                        const uint8_t *w_codes,
                                                        enum moe_k_qformat w_format,
                                                        const float *w_scale_inv,
                                                        int num_rows,
                                                        int in_dim,
                                                        int out_dim,
                                                        moe_k_ctx_t *ctx);

/* ---- Timers on CUDA events ------------------------------------------------------------------ */

/* A start/stop pair of CUDA events recorded on the context's stream (phase timers). */
typedef struct moe_k_cuda_timer moe_k_cuda_timer_t;
MOE_NODISCARD enum moe_status moe_k_cuda_timer_create(moe_k_cuda_timer_t **out);
void moe_k_cuda_timer_destroy(moe_k_cuda_timer_t *timer); /* NULL does nothing */
void moe_k_cuda_timer_start(moe_k_cuda_timer_t *timer, moe_k_ctx_t *ctx);
void moe_k_cuda_timer_stop(moe_k_cuda_timer_t *timer, moe_k_ctx_t *ctx);
/* Seconds between the last start and stop; waits for the stop event. */
double moe_k_cuda_timer_elapsed_s(moe_k_cuda_timer_t *timer);

#ifdef __cplusplus
}
#endif

#endif /* MOE_KERNELS_CUDA_CUDA_BACKEND_H */
