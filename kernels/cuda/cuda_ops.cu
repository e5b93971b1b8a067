/*
 * The CUDA backend's ops table, context hooks and the extras of kernels/cuda/cuda_backend.h
 * (device detection, device memory, GEMM settings, timers). A context owns one stream (the one in
 * its description, or the legacy default stream), a cuBLAS and a cuBLASLt handle sharing a 32 MiB
 * workspace, a small fixed scratch for reductions, and the side streams and staging arrays of the
 * grouped GEMM: everything is allocated here, once, so no op allocates (STYLE.md §6).
 *
 * Without a usable device, context creation fails with MOE_ERR_UNSUPPORTED (nothing is printed:
 * the caller decides whether to note the CPU fallback, with moe_k_cuda_available's reason).
 */
#include "kernels/cuda/cuda_common.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern "C" void moe_k_cuda_fail(const char *call, const char *message, const char *file, int line)
{
    /* Rank from the launcher's environment (kernels/ may not include MPI). */
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (rank == NULL) {
        rank = getenv("PMI_RANK");
    }
    char host[256] = "?";
    (void)gethostname(host, sizeof(host) - 1);
    fprintf(stderr, "moefold: rank %s on %s: %s:%d: %s failed: %s\n", rank != NULL ? rank : "-1",
            host, file, line, call, message);
    fflush(stderr);
    abort();
}

struct moe_k_cuda_state *moe_k_cuda_state_of(moe_k_ctx_t *ctx)
{
    MOE_ASSERT(ctx != NULL && moe_k_ctx_get_desc(ctx)->backend == MOE_K_BACKEND_CUDA);
    struct moe_k_cuda_state *st = (struct moe_k_cuda_state *)moe_k_ctx_backend_state(ctx);
    MOE_ASSERT(st != NULL);
    return st;
}

extern "C" bool moe_k_cuda_available(char *why, size_t why_len)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err == cudaSuccess && count > 0) {
        return true;
    }
    if (why != NULL && why_len > 0) {
        snprintf(why, why_len, "no CUDA device (cudaGetDeviceCount: %s)",
                 err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    }
    (void)cudaGetLastError(); /* clear the sticky-free error so later calls start clean */
    return false;
}

/* ---- Context hooks ------------------------------------------------------------------------- */

static void read_device_info(struct moe_k_cuda_state *st)
{
    cudaDeviceProp prop;
    MOE_CHECK_CUDA(cudaGetDeviceProperties(&prop, st->device));
    snprintf(st->info.name, sizeof(st->info.name), "%s", prop.name);
    st->info.cc_major = prop.major;
    st->info.cc_minor = prop.minor;
    st->info.num_sms = prop.multiProcessorCount;
    st->info.total_bytes = prop.totalGlobalMem;
    /* FP8 tensor cores: Ada (8.9) and Hopper (9.0) onwards. */
    st->info.has_fp8_gemm = prop.major > 8 || (prop.major == 8 && prop.minor >= 9);
}

static enum moe_status create_side_streams(struct moe_k_cuda_state *st)
{
    for (int i = 0; i < MOE_K_CUDA_NUM_SIDE_STREAMS; i++) {
        MOE_CHECK_CUDA(cudaStreamCreateWithFlags(&st->side_stream[i], cudaStreamNonBlocking));
        MOE_CHECK_CUBLAS(cublasCreate(&st->side_blas[i]));
        MOE_CHECK_CUBLAS(cublasSetStream(st->side_blas[i], st->side_stream[i]));
        if (cudaMalloc(&st->side_workspace[i], MOE_K_CUDA_BLAS_WORKSPACE_BYTES) != cudaSuccess) {
            return MOE_ERR_NOMEM;
        }
        MOE_CHECK_CUBLAS(cublasSetWorkspace(st->side_blas[i], st->side_workspace[i],
                                            MOE_K_CUDA_BLAS_WORKSPACE_BYTES));
        MOE_CHECK_CUDA(cudaEventCreateWithFlags(&st->join_event[i], cudaEventDisableTiming));
    }
    MOE_CHECK_CUDA(cudaEventCreateWithFlags(&st->fork_event, cudaEventDisableTiming));
    return MOE_OK;
}

static enum moe_status alloc_buffers(struct moe_k_cuda_state *st)
{
    size_t ptr_bytes = 3 * (size_t)MOE_K_CUDA_MAX_GROUPS * sizeof(void *);
    if (cudaMalloc(&st->blas_workspace, MOE_K_CUDA_BLAS_WORKSPACE_BYTES) != cudaSuccess ||
        cudaMalloc(&st->scratch, MOE_K_CUDA_SCRATCH_BYTES) != cudaSuccess ||
        cudaMalloc((void **)&st->ptr_dev, ptr_bytes) != cudaSuccess ||
        cudaMallocHost((void **)&st->ptr_host, ptr_bytes) != cudaSuccess ||
        cudaMallocHost((void **)&st->counts_host, MOE_K_CUDA_MAX_GROUPS * sizeof(int)) !=
            cudaSuccess) {
        (void)cudaGetLastError();
        return MOE_ERR_NOMEM;
    }
    st->grouped = (struct moe_k_cuda_grouped_host *)calloc(1, sizeof(*st->grouped));
    if (st->grouped == NULL) {
        (void)cudaGetLastError();
        return MOE_ERR_NOMEM;
    }
    MOE_CHECK_CUDA(cudaEventCreateWithFlags(&st->staging_event, cudaEventDisableTiming));
    MOE_CHECK_CUDA(cudaEventRecord(st->staging_event, st->stream));
    return MOE_OK;
}

static enum moe_status init_handles(struct moe_k_cuda_state *st)
{
    if (cublasCreate(&st->blas) != CUBLAS_STATUS_SUCCESS) {
        st->blas = NULL;
        return MOE_ERR_UNSUPPORTED;
    }
    MOE_CHECK_CUBLAS(cublasSetStream(st->blas, st->stream));
    MOE_CHECK_CUBLAS(
        cublasSetWorkspace(st->blas, st->blas_workspace, MOE_K_CUDA_BLAS_WORKSPACE_BYTES));
    /* Bitwise run-to-run reproducibility: no atomics-based split-K reductions in cuBLAS. */
    MOE_CHECK_CUBLAS(cublasSetAtomicsMode(st->blas, CUBLAS_ATOMICS_NOT_ALLOWED));
    MOE_CHECK_CUBLAS(cublasLtCreate(&st->lt));
    return MOE_OK;
}

extern "C" enum moe_status moe_k_cuda_ctx_init(moe_k_ctx_t *ctx)
{
    if (!moe_k_cuda_available(NULL, 0)) {
        return MOE_ERR_UNSUPPORTED;
    }
    const struct moe_k_ctx_desc *desc = moe_k_ctx_get_desc(ctx);
    int count = 0;
    MOE_CHECK_CUDA(cudaGetDeviceCount(&count));
    if (desc->device_idx < 0 || desc->device_idx >= count) {
        return MOE_ERR_INVALID;
    }
    struct moe_k_cuda_state *st = (struct moe_k_cuda_state *)calloc(1, sizeof(*st));
    if (st == NULL) {
        return MOE_ERR_NOMEM;
    }
    moe_k_ctx_set_backend_state(ctx, st);
    st->device = desc->device_idx;
    st->stream = (cudaStream_t)desc->stream;
    st->math = MOE_K_CUDA_GEMM_FP32;
    st->grouped_impl = MOE_K_CUDA_GROUPED_AUTO;
    st->last_grouped = MOE_K_CUDA_GROUPED_AUTO;
    enum moe_status status = MOE_OK;
    if (cudaSetDevice(st->device) != cudaSuccess) {
        (void)cudaGetLastError();
        status = MOE_ERR_UNSUPPORTED;
    }
    if (status == MOE_OK) {
        read_device_info(st);
        status = alloc_buffers(st);
    }
    if (status == MOE_OK) {
        status = init_handles(st);
    }
    if (status == MOE_OK) {
        status = create_side_streams(st);
    }
    if (status != MOE_OK) {
        moe_k_cuda_ctx_fini(ctx);
        moe_k_ctx_set_backend_state(ctx, NULL);
    }
    return status;
}

extern "C" void moe_k_cuda_ctx_fini(moe_k_ctx_t *ctx)
{
    struct moe_k_cuda_state *st = (struct moe_k_cuda_state *)moe_k_ctx_backend_state(ctx);
    if (st == NULL) {
        return;
    }
    /* Finish pending work first; teardown errors are ignored (the context is going away). */
    (void)cudaStreamSynchronize(st->stream);
    for (int i = 0; i < MOE_K_CUDA_NUM_SIDE_STREAMS; i++) {
        if (st->side_blas[i] != NULL) {
            (void)cublasDestroy(st->side_blas[i]);
        }
        if (st->side_stream[i] != NULL) {
            (void)cudaStreamDestroy(st->side_stream[i]);
        }
        if (st->join_event[i] != NULL) {
            (void)cudaEventDestroy(st->join_event[i]);
        }
        (void)cudaFree(st->side_workspace[i]);
    }
    if (st->fork_event != NULL) {
        (void)cudaEventDestroy(st->fork_event);
    }
    if (st->staging_event != NULL) {
        (void)cudaEventDestroy(st->staging_event);
    }
    if (st->lt != NULL) {
        (void)cublasLtDestroy(st->lt);
    }
    if (st->blas != NULL) {
        (void)cublasDestroy(st->blas);
    }
    (void)cudaFree(st->blas_workspace);
    (void)cudaFree(st->scratch);
    for (int i = 0; i < 2; i++) {
        (void)cudaFree(st->bf16_ws[i]);
    }
    (void)cudaFree((void *)st->ptr_dev);
    (void)cudaFreeHost((void *)st->ptr_host);
    (void)cudaFreeHost(st->counts_host);
    free(st->grouped);
    (void)cudaGetLastError();
    free(st);
    moe_k_ctx_set_backend_state(ctx, NULL);
}

/* ---- Memory, settings, info ------------------------------------------------------------------ */

extern "C" enum moe_status moe_k_cuda_alloc(void **out, size_t bytes)
{
    MOE_ASSERT(out != NULL);
    *out = NULL;
    cudaError_t err = cudaMalloc(out, bytes > 0 ? bytes : 1);
    if (err == cudaSuccess) {
        return MOE_OK;
    }
    *out = NULL;
    (void)cudaGetLastError();
    return err == cudaErrorMemoryAllocation ? MOE_ERR_NOMEM : MOE_ERR_UNSUPPORTED;
}

extern "C" void moe_k_cuda_free(void *ptr)
{
    if (ptr != NULL) {
        MOE_CHECK_CUDA(cudaFree(ptr));
    }
}

extern "C" void
moe_k_cuda_copy_to_device(void *dst, const void *src, size_t bytes, moe_k_ctx_t *ctx)
{
    cudaStream_t s = moe_k_cuda_stream(ctx);
    if (bytes == 0) {
        return;
    }
    MOE_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
    MOE_CHECK_CUDA(cudaStreamSynchronize(s));
}

extern "C" void moe_k_cuda_copy_to_host(void *dst, const void *src, size_t bytes, moe_k_ctx_t *ctx)
{
    cudaStream_t s = moe_k_cuda_stream(ctx);
    if (bytes == 0) {
        return;
    }
    MOE_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
    MOE_CHECK_CUDA(cudaStreamSynchronize(s));
}

extern "C" void moe_k_cuda_memset(void *dst, int value, size_t bytes, moe_k_ctx_t *ctx)
{
    if (bytes > 0) {
        MOE_CHECK_CUDA(cudaMemsetAsync(dst, value, bytes, moe_k_cuda_stream(ctx)));
    }
}

extern "C" void moe_k_cuda_synchronize(moe_k_ctx_t *ctx)
{
    MOE_CHECK_CUDA(cudaStreamSynchronize(moe_k_cuda_stream(ctx)));
}

extern "C" void moe_k_cuda_mem_info(size_t *free_bytes, size_t *total_bytes, moe_k_ctx_t *ctx)
{
    (void)moe_k_cuda_state_of(ctx);
    size_t f = 0;
    size_t t = 0;
    MOE_CHECK_CUDA(cudaMemGetInfo(&f, &t));
    if (free_bytes != NULL) {
        *free_bytes = f;
    }
    if (total_bytes != NULL) {
        *total_bytes = t;
    }
}

extern "C" void moe_k_cuda_device_info(struct moe_k_cuda_device_info *out, moe_k_ctx_t *ctx)
{
    *out = moe_k_cuda_state_of(ctx)->info;
}

extern "C" void moe_k_cuda_set_gemm_math(moe_k_ctx_t *ctx, enum moe_k_cuda_gemm_math math)
{
    MOE_ASSERT(math >= MOE_K_CUDA_GEMM_FP32 && math <= MOE_K_CUDA_GEMM_BF16);
    struct moe_k_cuda_state *st = moe_k_cuda_state_of(ctx);
    st->math = math;
    /* BF16 math: the two operand copies of kernels/cuda/gemm.cu, allocated here (a set-up call),
     * once, so no GEMM allocates (STYLE.md section 6). Without the memory GEMMs keep FAST_16BF. */
    for (int i = 0; i < 2 && math == MOE_K_CUDA_GEMM_BF16; i++) {
        if (st->bf16_ws[i] != NULL) {
            continue;
        }
        if (cudaMalloc((void **)&st->bf16_ws[i], MOE_K_CUDA_BF16_WS_BYTES) == cudaSuccess) {
            st->bf16_ws_elems[i] = MOE_K_CUDA_BF16_WS_BYTES / sizeof(uint16_t);
        } else {
            st->bf16_ws[i] = NULL;
            (void)cudaGetLastError(); /* out of memory is not sticky: clear it for later checks */
        }
    }
}

extern "C" enum moe_k_cuda_gemm_math moe_k_cuda_gemm_math(const moe_k_ctx_t *ctx)
{
    return moe_k_cuda_state_of((moe_k_ctx_t *)ctx)->math;
}

extern "C" void moe_k_cuda_set_grouped_impl(moe_k_ctx_t *ctx, enum moe_k_cuda_grouped_impl impl)
{
    MOE_ASSERT(impl >= MOE_K_CUDA_GROUPED_AUTO && impl <= MOE_K_CUDA_GROUPED_STREAMS);
    moe_k_cuda_state_of(ctx)->grouped_impl = impl;
}

extern "C" enum moe_k_cuda_grouped_impl moe_k_cuda_last_grouped_impl(const moe_k_ctx_t *ctx)
{
    return moe_k_cuda_state_of((moe_k_ctx_t *)ctx)->last_grouped;
}

cublasComputeType_t moe_k_cuda_compute_type(moe_k_ctx_t *ctx)
{
    switch (moe_k_cuda_state_of(ctx)->math) {
    case MOE_K_CUDA_GEMM_TF32:
        return CUBLAS_COMPUTE_32F_FAST_TF32;
    case MOE_K_CUDA_GEMM_BF16:
        return CUBLAS_COMPUTE_32F_FAST_16BF;
    default:
        return CUBLAS_COMPUTE_32F_PEDANTIC;
    }
}

/* ---- Timers ---------------------------------------------------------------------------------- */

struct moe_k_cuda_timer {
    cudaEvent_t start;
    cudaEvent_t stop;
};

extern "C" enum moe_status moe_k_cuda_timer_create(moe_k_cuda_timer_t **out)
{
    *out = NULL;
    moe_k_cuda_timer_t *t = (moe_k_cuda_timer_t *)calloc(1, sizeof(*t));
    if (t == NULL) {
        return MOE_ERR_NOMEM;
    }
    if (cudaEventCreate(&t->start) != cudaSuccess || cudaEventCreate(&t->stop) != cudaSuccess) {
        (void)cudaGetLastError();
        moe_k_cuda_timer_destroy(t);
        return MOE_ERR_UNSUPPORTED;
    }
    *out = t;
    return MOE_OK;
}

extern "C" void moe_k_cuda_timer_destroy(moe_k_cuda_timer_t *timer)
{
    if (timer == NULL) {
        return;
    }
    if (timer->start != NULL) {
        (void)cudaEventDestroy(timer->start);
    }
    if (timer->stop != NULL) {
        (void)cudaEventDestroy(timer->stop);
    }
    free(timer);
}

extern "C" void moe_k_cuda_timer_start(moe_k_cuda_timer_t *timer, moe_k_ctx_t *ctx)
{
    MOE_CHECK_CUDA(cudaEventRecord(timer->start, moe_k_cuda_stream(ctx)));
}

extern "C" void moe_k_cuda_timer_stop(moe_k_cuda_timer_t *timer, moe_k_ctx_t *ctx)
{
    MOE_CHECK_CUDA(cudaEventRecord(timer->stop, moe_k_cuda_stream(ctx)));
}

extern "C" double moe_k_cuda_timer_elapsed_s(moe_k_cuda_timer_t *timer)
{
    float ms = 0.0f;
    MOE_CHECK_CUDA(cudaEventSynchronize(timer->stop));
    MOE_CHECK_CUDA(cudaEventElapsedTime(&ms, timer->start, timer->stop));
    return (double)ms * 1e-3;
}

/* ---- The table ------------------------------------------------------------------------------- */

static const struct moe_k_ops cuda_ops = {
    .backend = MOE_K_BACKEND_CUDA,
    .name = "cuda",
    .ctx_init = moe_k_cuda_ctx_init,
    .ctx_fini = moe_k_cuda_ctx_fini,
    .fill = moe_k_cuda_fill,
    .copy_2d = moe_k_cuda_copy_2d,
    .axpy = moe_k_cuda_axpy,
    .scale = moe_k_cuda_scale,
    .sum = moe_k_cuda_sum,
    .sum_squares = moe_k_cuda_sum_squares,
    .matmul = moe_k_cuda_matmul,
    .linear_fwd = moe_k_cuda_linear_fwd,
    .linear_bwd_data = moe_k_cuda_linear_bwd_data,
    .linear_bwd_weight = moe_k_cuda_linear_bwd_weight,
    .grouped_linear_fwd = moe_k_cuda_grouped_linear_fwd,
    .grouped_linear_bwd_data = moe_k_cuda_grouped_linear_bwd_data,
    .grouped_linear_bwd_weight = moe_k_cuda_grouped_linear_bwd_weight,
    .expert_counts = moe_k_cuda_expert_counts,
    .dispatch_layout = moe_k_cuda_dispatch_layout,
    .permute = moe_k_cuda_permute,
    .permute_bwd = moe_k_cuda_permute_bwd,
    .unpermute = moe_k_cuda_unpermute,
    .unpermute_bwd = moe_k_cuda_unpermute_bwd,
    .sort_chunks = moe_k_cuda_sort_chunks,
    .unsort_chunks = moe_k_cuda_unsort_chunks,
    .router_fwd = moe_k_cuda_router_fwd,
    .router_bwd = moe_k_cuda_router_bwd,
    .router_aux_loss_fwd = moe_k_cuda_router_aux_loss_fwd,
    .router_aux_loss_bwd = moe_k_cuda_router_aux_loss_bwd,
    .router_z_loss_fwd = moe_k_cuda_router_z_loss_fwd,
    .router_z_loss_bwd = moe_k_cuda_router_z_loss_bwd,
    .router_bias_update = moe_k_cuda_router_bias_update,
    .rmsnorm_fwd = moe_k_cuda_rmsnorm_fwd,
    .rmsnorm_bwd = moe_k_cuda_rmsnorm_bwd,
    .swiglu_fwd = moe_k_cuda_swiglu_fwd,
    .swiglu_bwd = moe_k_cuda_swiglu_bwd,
    .gelu_fwd = moe_k_cuda_gelu_fwd,
    .gelu_bwd = moe_k_cuda_gelu_bwd,
    .rope_table = moe_k_cuda_rope_table,
    .rope_fwd = moe_k_cuda_rope_fwd,
    .rope_bwd = moe_k_cuda_rope_bwd,
    .attention_workspace_bytes = moe_k_cuda_attention_workspace_bytes,
    .attention_fwd = moe_k_cuda_attention_fwd,
    .attention_bwd = moe_k_cuda_attention_bwd,
    .attention_window_sink_fwd = moe_k_cuda_attention_window_sink_fwd,
    .attention_window_sink_bwd = moe_k_cuda_attention_window_sink_bwd,
    .bias_fwd = moe_k_cuda_bias_fwd,
    .bias_bwd = moe_k_cuda_bias_bwd,
    .embedding_fwd = moe_k_cuda_embedding_fwd,
    .embedding_bwd = moe_k_cuda_embedding_bwd,
    .xent_local_max = moe_k_cuda_xent_local_max,
    .xent_local_sumexp = moe_k_cuda_xent_local_sumexp,
    .xent_loss = moe_k_cuda_xent_loss,
    .xent_bwd = moe_k_cuda_xent_bwd,
    .adamw_step = moe_k_cuda_adamw_step,
    .qdq = moe_k_cuda_qdq,
};

extern "C" const struct moe_k_ops *moe_k_cuda_ops(void)
{
    return &cuda_ops;
}
