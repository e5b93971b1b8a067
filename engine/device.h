/*
 * The engine's device runtime: where the engine's tensors live, and how bytes move between that
 * memory and the host. On the CPU backend there is no device (dev == NULL): tensors are host
 * memory, and every function below is plain memcpy/memset on it, so the CPU engine computes
 * exactly what it did before this layer existed. On the CUDA backend (dev != NULL) tensors are
 * device memory (plain cudaMalloc, never managed memory) and every copy runs in the order of the
 * engine's compute stream, the stream its kernel context and its NCCL groups use.
 *
 * The rule this module serves (STYLE.md §7, issue 6): the engine touches tensor data on the host
 * only through these calls. A host read of engine memory is moe_eng_copy_to_host and a host write
 * is moe_eng_copy_from_host; both are ordered after the work queued on the compute stream and
 * return once the copy is complete (they synchronise the stream), so the host buffer may be read
 * or reused at once.
 *
 * Also here: the engine's phase clock on CUDA events (one event per phase boundary, recorded on the
 * compute stream from a pool created once; intervals are folded into seconds per phase when the
 * pool fills and at the end of a step), device memory figures (cudaMemGetInfo), host scans of
 * engine memory for the failure paths (first non-finite element, sum of squares in double) that
 * read device memory through a fixed host bounce buffer, CUDA-graph capture and replay, and an
 * emulated device (separate host blocks, for tests of the staging logic without a GPU).
 *
 * What this is not: no kernels (kernels/), no communication (engine/comm*.c), no allocation inside
 * a training step (buffers come from create; the engine allocates its categories once).
 * Everything is defined in every build; without the CUDA build moe_eng_dev_create answers
 * MOE_ERR_UNSUPPORTED and only dev == NULL or an emulated device is ever passed.
 */
#ifndef MOE_ENGINE_DEVICE_H
#define MOE_ENGINE_DEVICE_H

#include "kernels/kernels.h"
#include "model/status.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st; /* cudaStream_t's struct: streams are passed without CUDA headers */

typedef struct moe_eng_dev moe_eng_dev_t;

/* True when this binary was built with the CUDA backend (kernels/cuda and this runtime). */
bool moe_eng_dev_is_built(void);
/* CUDA devices visible to this process; 0 without the CUDA build or without a usable device. */
int moe_eng_dev_count(void);
/* True when the CUDA backend can run here (CUDA and NCCL built, a device visible); otherwise
 * false with the reason in why[len] ("this build has no CUDA backend", "cudaGetDeviceCount: no
 * CUDA-capable device is detected", ...), for a one-line note before falling back to the CPU. */
bool moe_eng_dev_available(char *why, size_t len);

/*
 * Make the runtime on device device_idx (made current for this host thread): a compute stream and
 * a communication stream (both non-blocking with respect to the legacy default stream), a pool of
 * timing events and a host bounce buffer. Errors: MOE_ERR_UNSUPPORTED (no CUDA build, no device,
 * index out of range; diag says which), MOE_ERR_NOMEM.
 */
MOE_NODISCARD enum moe_status
moe_eng_dev_create(int device_idx, moe_eng_dev_t **out, struct moe_diag *diag);
/*
 * A host emulation of a device, for tests on machines without a GPU: "device" memory is separate
 * host memory (256-byte aligned, zero-filled), copies are memcpy, kernels are the CPU's and the
 * phase clock is the host's, so the engine's CUDA-backend bookkeeping (host copies of device data,
 * host temporaries, deferred checks) runs and must give the CPU backend's results. No streams.
 * MOE_ERR_NOMEM.
 */
MOE_NODISCARD enum moe_status moe_eng_dev_create_emulated(moe_eng_dev_t **out);
/* True for an emulated device (false for NULL and for a real one). */
bool moe_eng_dev_is_emulated(const moe_eng_dev_t *dev);
/* Wait for both streams, then release everything. NULL does nothing. */
void moe_eng_dev_destroy(moe_eng_dev_t *dev);

/* CUDA ordinal (-1 without a real device); the streams (NULL without a real device). */
int moe_eng_dev_index(const moe_eng_dev_t *dev);
struct CUstream_st *moe_eng_dev_stream(const moe_eng_dev_t *dev);
struct CUstream_st *moe_eng_dev_comm_stream(const moe_eng_dev_t *dev);
/* "NVIDIA H200" (cudaDeviceProp.name); "" on the host. */
const char *moe_eng_dev_name(const moe_eng_dev_t *dev);

/*
 * The CUDA kernel context (kernels/cuda) on dev's compute stream, its GEMMs computing in
 * gemm_math (enum moe_eng_gemm_math of engine/engine.h: 0 FP32, 1 TF32, 2 BF16); the CPU kernel
 * context for an emulated device. The caller owns *out (moe_k_ctx_destroy). Errors as
 * moe_k_ctx_create's.
 */
MOE_NODISCARD enum moe_status
moe_eng_dev_kernel_ctx(moe_eng_dev_t *dev, int gemm_math, moe_k_ctx_t **out);

/* ---- Engine memory (device with dev, host heap without) ------------------------------------- */

/* *out = bytes of zero-filled device memory (dev != NULL). MOE_ERR_NOMEM when the device is full.
 * bytes == 0 gives *out = NULL. */
MOE_NODISCARD enum moe_status moe_eng_dev_alloc(moe_eng_dev_t *dev, void **out, size_t bytes);
/* Release memory from moe_eng_dev_alloc (after waiting for the streams). NULL does nothing. */
void moe_eng_dev_free(moe_eng_dev_t *dev, void *ptr);

/* dst[bytes] = src[bytes], both engine memory, in stream order; they must not overlap. */
void moe_eng_copy(const moe_eng_dev_t *dev, void *dst, const void *src, size_t bytes);
/* Host dst[bytes] = engine src[bytes]; returns when the bytes are on the host. */
void moe_eng_copy_to_host(const moe_eng_dev_t *dev, void *dst, const void *src, size_t bytes);
/* Engine dst[bytes] = host src[bytes], in stream order; returns when done (src may be reused). */
void moe_eng_copy_from_host(const moe_eng_dev_t *dev, void *dst, const void *src, size_t bytes);
/* dst[bytes] = 0 (all bits), in stream order. */
void moe_eng_memzero(const moe_eng_dev_t *dev, void *dst, size_t bytes);
/* Wait until everything queued on the compute stream has finished (no-op on the host). */
void moe_eng_dev_sync(const moe_eng_dev_t *dev);
/* Free and total device memory in bytes (cudaMemGetInfo); both 0 on the host. */
void moe_eng_dev_mem_info(const moe_eng_dev_t *dev, size_t *free_bytes, size_t *total_bytes);

/* ---- Host scans of engine memory (failure paths: they synchronise) -------------------------- */

/* Index of the first non-finite x[i] (n when every element is finite); *value = x[i] then. */
size_t moe_eng_first_nonfinite(const moe_eng_dev_t *dev, const float *x, size_t n, float *value);
/* True when every x[n] is finite. */
bool moe_eng_is_finite(const moe_eng_dev_t *dev, const float *x, size_t n);
/* sum x[i]^2 accumulated in double, in index order. */
double moe_eng_sumsq_double(const moe_eng_dev_t *dev, const float *x, size_t n);

/* ---- Phase clock on CUDA events (dev != NULL only) ------------------------------------------ */

struct moe_eng_tl; /* engine/context.h: a traced step's intervals */

/* Forget pending boundaries and record the first one now (in stream order); it is also the origin
 * of the traced intervals' times, placed at the host time of this call. */
void moe_eng_dev_timer_start(moe_eng_dev_t *dev);
/* Record a boundary that ends an interval of phase `phase` (index into phase_s) of op `tag`; when
 * the event pool is full, the pending intervals are folded into phase_s (and tl) first (that
 * synchronises). tl: the traced step's intervals, or NULL. */
void moe_eng_dev_timer_mark(
    moe_eng_dev_t *dev, int phase, int tag, double *phase_s, struct moe_eng_tl *tl);
/* Wait for the last boundary and add every pending interval's seconds to phase_s[its phase] (and
 * each interval to tl when it is on). */
void moe_eng_dev_timer_fold(moe_eng_dev_t *dev, double *phase_s, struct moe_eng_tl *tl);
/* While paused (stream capture of a CUDA graph), marks are ignored. */
void moe_eng_dev_timer_pause(moe_eng_dev_t *dev, bool is_paused);

/* ---- CUDA graphs (real devices only) -------------------------------------------------------- */

struct CUgraphExec_st; /* cudaGraphExec_t's struct */

/* Start capturing the compute stream (thread-local mode); phase marks pause until the end. */
void moe_eng_dev_capture_begin(moe_eng_dev_t *dev);
/* End the capture and instantiate it into *out. MOE_ERR_UNSUPPORTED (with the CUDA error cleared)
 * when the captured work was not capturable; nothing of it has run then. */
MOE_NODISCARD enum moe_status moe_eng_dev_capture_end(moe_eng_dev_t *dev,
                                                      struct CUgraphExec_st **out);
/* Replay an instantiated graph on the compute stream. */
void moe_eng_dev_graph_launch(moe_eng_dev_t *dev, struct CUgraphExec_st *graph);
/* Release an instantiated graph; NULL does nothing. */
void moe_eng_dev_graph_destroy(struct CUgraphExec_st *graph);

#ifdef __cplusplus
}
#endif

#endif /* MOE_ENGINE_DEVICE_H */
