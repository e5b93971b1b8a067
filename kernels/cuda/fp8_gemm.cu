/*
 * Tensorwise-scaled FP8 linear forward through cuBLASLt (cuda_backend.h): y = (x s_x)(w s_w)^T
 * with FP8 codes from moe_k_cuda_quantize_fp8_tensorwise and their fp32 inverse scales on the
 * device (CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER, scalar scale mode), fp32 output, fp32 compute,
 * fast accumulation off (cuBLASLt's default, the precise mode TransformerEngine uses for dgrad/
 * wgrad). FP8 on Ada/Hopper requires the "TN" form, which is exactly linear_fwd's: both operands
 * contiguous along K. Blockwise (1x128 / 128x128) and MX scale modes are not wired here; the engine
 * emulates those recipes with qdq and a BF16 or fp32 GEMM.
 *
 * Descriptors are created per call (a few microseconds); the heuristic's first answer is used.
 */
#include "kernels/cuda/cuda_common.cuh"

#include <stdint.h>

static bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

static cudaDataType_t fp8_type(enum moe_k_qformat f)
{
    return f == MOE_K_QFMT_FP8_E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}

/* The descriptors of one call, released together. */
struct lt_call {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulPreference_t pref;
};

static void lt_release(struct lt_call *c)
{
    if (c->pref != NULL) {
        (void)cublasLtMatmulPreferenceDestroy(c->pref);
    }
    if (c->d != NULL) {
        (void)cublasLtMatrixLayoutDestroy(c->d);
    }
    if (c->b != NULL) {
        (void)cublasLtMatrixLayoutDestroy(c->b);
    }
    if (c->a != NULL) {
        (void)cublasLtMatrixLayoutDestroy(c->a);
    }
    if (c->op != NULL) {
        (void)cublasLtMatmulDescDestroy(c->op);
    }
}

extern "C" enum moe_status moe_k_cuda_linear_fwd_fp8(float *y,
                                                     const uint8_t *x_codes,
                                                     enum moe_k_qformat x_format,
                                                     const float *x_scale_inv,
                                                     const uint8_t *w_codes,
                                                     enum moe_k_qformat w_format,
                                                     const float *w_scale_inv,
                                                     int num_rows,
                                                     int in_dim,
                                                     int out_dim,
                                                     moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_rows >= 0 && in_dim > 0 && out_dim > 0);
    MOE_ASSERT(x_format == MOE_K_QFMT_FP8_E4M3 || x_format == MOE_K_QFMT_FP8_E5M2);
    MOE_ASSERT(w_format == MOE_K_QFMT_FP8_E4M3 || w_format == MOE_K_QFMT_FP8_E5M2);
    struct moe_k_cuda_state *st = moe_k_cuda_state_of(ctx);
    if (!st->info.has_fp8_gemm ||
        (x_format == MOE_K_QFMT_FP8_E5M2 && w_format == MOE_K_QFMT_FP8_E5M2) || in_dim % 16 != 0 ||
        out_dim % 16 != 0 || !aligned16(x_codes) || !aligned16(w_codes) || !aligned16(y)) {
        return MOE_ERR_UNSUPPORTED;
    }
    if (num_rows == 0) {
        return MOE_OK;
    }
    struct lt_call c = {NULL, NULL, NULL, NULL, NULL};
    cublasOperation_t ta = CUBLAS_OP_T;
    cublasOperation_t tb = CUBLAS_OP_N;
    /* Column-major view: y^T[out, M] = (w^T)^T[out, in] x^T[in, M]; cuBLAS's A is w (in x out,
     * transposed), its B is x (in x M). */
    MOE_CHECK_CUBLAS(cublasLtMatmulDescCreate(&c.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    MOE_CHECK_CUBLAS(
        cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    MOE_CHECK_CUBLAS(
        cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    MOE_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                    &w_scale_inv, sizeof(w_scale_inv)));
    MOE_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                    &x_scale_inv, sizeof(x_scale_inv)));
    MOE_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&c.a, fp8_type(w_format), (uint64_t)in_dim,
                                                (uint64_t)out_dim, (int64_t)in_dim));
    MOE_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&c.b, fp8_type(x_format), (uint64_t)in_dim,
                                                (uint64_t)num_rows, (int64_t)in_dim));
    MOE_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&c.d, CUDA_R_32F, (uint64_t)out_dim,
                                                (uint64_t)num_rows, (int64_t)out_dim));
    MOE_CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&c.pref));
    uint64_t ws = MOE_K_CUDA_BLAS_WORKSPACE_BYTES;
    MOE_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
        c.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    cublasStatus_t hs =
        cublasLtMatmulAlgoGetHeuristic(st->lt, c.op, c.a, c.b, c.d, c.d, c.pref, 1, &heur, &found);
    if (hs != CUBLAS_STATUS_SUCCESS || found == 0) {
        lt_release(&c);
        return MOE_ERR_UNSUPPORTED;
    }
    float alpha = 1.0f;
    float beta = 0.0f;
    MOE_CHECK_CUBLAS(cublasLtMatmul(st->lt, c.op, &alpha, w_codes, c.a, x_codes, c.b, &beta, y, c.d,
                                    y, c.d, &heur.algo, st->blas_workspace,
                                    MOE_K_CUDA_BLAS_WORKSPACE_BYTES, st->stream));
    lt_release(&c);
    return MOE_OK;
}
