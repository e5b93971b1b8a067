/*
 * The engine's device runtime (engine/device.h): host memcpy/memset when there is no device, the
 * CUDA runtime API (C interface, cuda_runtime_api.h) on the engine's own streams when there is one,
 * and a host emulation of a device (separate host blocks standing in for device memory) that lets
 * CPU-only machines run the CUDA backend's staging logic. Every CUDA call is checked with
 * MOE_CHECK_CUDA (STYLE.md §4). The CUDA half is compiled only where kernels/cuda/ is built
 * (MOE_HAVE_CUDA_KERNELS); without it moe_eng_dev_create refuses.
 *
 * Copies between host and device are cudaMemcpyAsync on the compute stream (ordered after the
 * kernels that produce or still read the device side) followed by a stream synchronisation, so
 * each returns with the copy complete: the host side may be read (to host) or reused (from host)
 * at once. The engine makes few such copies per step (engine/staging.c), each at a point where it
 * needs the data anyway.
 */
#include "engine/device.h"

#include "engine/check.h"
#include "engine/context.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(MOE_HAVE_CUDA_KERNELS)
#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>
#endif

/* Phase boundaries recorded before the pending intervals are folded (a fold synchronises). */
#define DEV_TIMER_EVENTS 4096
/* Host bounce buffer of the failure-path scans, in floats (1 MiB). */
#define DEV_BOUNCE_FLOATS (1u << 18)
/* Alignment of emulated device blocks (cudaMalloc's is at least 256 bytes). */
#define DEV_EMULATED_ALIGN 256

struct moe_eng_dev {
    bool is_emulated; /* host memory standing in for device memory */
    int device;       /* CUDA ordinal; -1 when emulated */
    char name[256];
    float *bounce;  /* [DEV_BOUNCE_FLOATS] host */
    double t_last;  /* emulation: host time of the last phase boundary */
    bool is_paused; /* phase marks ignored (stream capture) */
#if defined(MOE_HAVE_CUDA_KERNELS)
    cudaStream_t stream;      /* compute: kernels, blocking collectives, copies */
    cudaStream_t comm_stream; /* non-blocking collectives (engine/comm_nccl.c) */
    cudaEvent_t events[DEV_TIMER_EVENTS];
    int event_phase[DEV_TIMER_EVENTS]; /* phase of the interval that ends at events[i] */
    int event_tag[DEV_TIMER_EVENTS];   /* its op (engine/context.h moe_eng_op_tag) */
    cudaEvent_t origin;                /* the step's first boundary (traced intervals) */
    double origin_host;                /* host time when it was recorded */
    int num_events;                    /* recorded boundaries pending, events[0] the oldest */
#endif
};

/* A real CUDA device (not NULL, not emulated). */
static bool is_real(const moe_eng_dev_t *dev)
{
    return dev != NULL && !dev->is_emulated;
}

static double host_now(void)
{
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum moe_status moe_eng_dev_create_emulated(moe_eng_dev_t **out)
{
    *out = NULL;
    moe_eng_dev_t *dev = calloc(1, sizeof(*dev));
    if (dev == NULL) {
        return MOE_ERR_NOMEM;
    }
    dev->is_emulated = true;
    dev->device = -1;
    (void)snprintf(dev->name, sizeof(dev->name), "host emulation of a device");
    *out = dev;
    return MOE_OK;
}

bool moe_eng_dev_is_emulated(const moe_eng_dev_t *dev)
{
    return dev != NULL && dev->is_emulated;
}

int moe_eng_dev_index(const moe_eng_dev_t *dev)
{
    return dev != NULL ? dev->device : -1;
}

const char *moe_eng_dev_name(const moe_eng_dev_t *dev)
{
    return dev != NULL ? dev->name : "";
}

bool moe_eng_is_finite(const moe_eng_dev_t *dev, const float *x, size_t n)
{
    float v = 0.0f;
    return moe_eng_first_nonfinite(dev, x, n, &v) == n;
}

/* ---- Host halves (no device, or an emulated one) -----------------------------------------------
 */

static enum moe_status emulated_alloc(void **out, size_t bytes)
{
    size_t rounded = (bytes + DEV_EMULATED_ALIGN - 1) / DEV_EMULATED_ALIGN * DEV_EMULATED_ALIGN;
    void *p = aligned_alloc(DEV_EMULATED_ALIGN, rounded);
    if (p == NULL) {
        return MOE_ERR_NOMEM;
    }
    memset(p, 0, rounded);
    *out = p;
    return MOE_OK;
}

static void host_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes > 0 && dst != src) {
        memcpy(dst, src, bytes);
    }
}

/* Append an interval to a traced step's record (when on). */
static void tl_add(struct moe_eng_tl *tl, double t0, double t1, int phase, int tag)
{
    if (tl == NULL || !tl->is_on || t1 <= t0) {
        return;
    }
    if (tl->len < tl->cap) {
        tl->rec[tl->len++] = (struct moe_eng_tl_rec){t0, t1, phase, tag};
    } else {
        tl->has_overflowed = true;
    }
}

static void
host_timer_mark(moe_eng_dev_t *dev, int phase, int tag, double *phase_s, struct moe_eng_tl *tl)
{
    double now = host_now();
    phase_s[phase] += now - dev->t_last;
    tl_add(tl, dev->t_last, now, phase, tag);
    dev->t_last = now;
}

#if defined(MOE_HAVE_CUDA_KERNELS)

void moe_eng_cuda_errstr(int code, char *buf, size_t len)
{
    (void)snprintf(buf, len, "%s", cudaGetErrorString((cudaError_t)code));
}

bool moe_eng_dev_is_built(void)
{
    return true;
}

int moe_eng_dev_count(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver or no device: not an error for the caller */
        return 0;
    }
    return count;
}

bool moe_eng_dev_available(char *why, size_t len)
{
#if !defined(MOE_HAVE_NCCL)
    (void)snprintf(why, len, "this build has the CUDA kernels but no NCCL (nccl.h not found)");
    return false;
#else
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err == cudaSuccess && count > 0) {
        return true;
    }
    (void)snprintf(why, len, "cudaGetDeviceCount: %s",
                   err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    (void)cudaGetLastError();
    return false;
#endif
}

enum moe_status moe_eng_dev_create(int device_idx, moe_eng_dev_t **out, struct moe_diag *diag)
{
    *out = NULL;
    int count = moe_eng_dev_count();
    if (device_idx < 0 || device_idx >= count) {
        return moe_diag_set(diag, MOE_ERR_UNSUPPORTED,
                            "CUDA device %d is not available (%d device(s) visible)", device_idx,
                            count);
    }
    moe_eng_dev_t *dev = calloc(1, sizeof(*dev));
    float *bounce = malloc(DEV_BOUNCE_FLOATS * sizeof(float));
    if (dev == NULL || bounce == NULL) {
        free(dev);
        free(bounce);
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the device runtime");
    }
    dev->device = device_idx;
    dev->bounce = bounce;
    MOE_CHECK_CUDA(cudaSetDevice(device_idx));
    struct cudaDeviceProp prop;
    MOE_CHECK_CUDA(cudaGetDeviceProperties(&prop, device_idx));
    (void)snprintf(dev->name, sizeof(dev->name), "%s", prop.name);
    MOE_CHECK_CUDA(cudaStreamCreateWithFlags(&dev->stream, cudaStreamNonBlocking));
    MOE_CHECK_CUDA(cudaStreamCreateWithFlags(&dev->comm_stream, cudaStreamNonBlocking));
    for (int i = 0; i < DEV_TIMER_EVENTS; i++) {
        MOE_CHECK_CUDA(cudaEventCreate(&dev->events[i]));
    }
    MOE_CHECK_CUDA(cudaEventCreate(&dev->origin));
    *out = dev;
    return MOE_OK;
}

void moe_eng_dev_destroy(moe_eng_dev_t *dev)
{
    if (dev == NULL) {
        return;
    }
    if (is_real(dev)) {
        MOE_CHECK_CUDA(cudaStreamSynchronize(dev->comm_stream));
        MOE_CHECK_CUDA(cudaStreamSynchronize(dev->stream));
        for (int i = 0; i < DEV_TIMER_EVENTS; i++) {
            MOE_CHECK_CUDA(cudaEventDestroy(dev->events[i]));
        }
        MOE_CHECK_CUDA(cudaEventDestroy(dev->origin));
        MOE_CHECK_CUDA(cudaStreamDestroy(dev->comm_stream));
        MOE_CHECK_CUDA(cudaStreamDestroy(dev->stream));
    }
    free(dev->bounce);
    free(dev);
}

struct CUstream_st *moe_eng_dev_stream(const moe_eng_dev_t *dev)
{
    return is_real(dev) ? dev->stream : NULL;
}

struct CUstream_st *moe_eng_dev_comm_stream(const moe_eng_dev_t *dev)
{
    return is_real(dev) ? dev->comm_stream : NULL;
}

enum moe_status moe_eng_dev_kernel_ctx(moe_eng_dev_t *dev, int gemm_math, moe_k_ctx_t **out)
{
    MOE_ASSERT(dev != NULL);
    struct moe_k_ctx_desc desc;
    memset(&desc, 0, sizeof(desc));
    desc.num_threads = 1;
    if (dev->is_emulated) {
        desc.backend = MOE_K_BACKEND_CPU;
        return moe_k_ctx_create(&desc, out);
    }
    desc.backend = MOE_K_BACKEND_CUDA;
    desc.device_idx = dev->device;
    desc.stream = dev->stream;
    MOE_TRY(moe_k_ctx_create(&desc, out));
    enum moe_k_cuda_gemm_math m = MOE_K_CUDA_GEMM_FP32;
    if (gemm_math == 1) {
        m = MOE_K_CUDA_GEMM_TF32;
    } else if (gemm_math == 2) {
        m = MOE_K_CUDA_GEMM_BF16;
    }
    moe_k_cuda_set_gemm_math(*out, m);
    return MOE_OK;
}

enum moe_status moe_eng_dev_alloc(moe_eng_dev_t *dev, void **out, size_t bytes)
{
    *out = NULL;
    MOE_ASSERT(dev != NULL);
    if (bytes == 0) {
        return MOE_OK;
    }
    if (dev->is_emulated) {
        return emulated_alloc(out, bytes);
    }
    MOE_TRY(moe_k_cuda_alloc(out, bytes)); /* plain cudaMalloc (kernels/cuda/cuda_backend.h) */
    MOE_CHECK_CUDA(cudaMemsetAsync(*out, 0, bytes, dev->stream));
    MOE_CHECK_CUDA(cudaStreamSynchronize(dev->stream));
    return MOE_OK;
}

void moe_eng_dev_free(moe_eng_dev_t *dev, void *ptr)
{
    if (ptr == NULL) {
        return;
    }
    MOE_ASSERT(dev != NULL);
    if (dev->is_emulated) {
        free(ptr);
        return;
    }
    MOE_CHECK_CUDA(cudaStreamSynchronize(dev->comm_stream));
    MOE_CHECK_CUDA(cudaStreamSynchronize(dev->stream));
    moe_k_cuda_free(ptr);
}

void moe_eng_copy(const moe_eng_dev_t *dev, void *dst, const void *src, size_t bytes)
{
    if (!is_real(dev)) {
        host_copy(dst, src, bytes);
    } else if (bytes > 0 && dst != src) {
        MOE_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, dev->stream));
    }
}

void moe_eng_copy_to_host(const moe_eng_dev_t *dev, void *dst, const void *src, size_t bytes)
{
    if (!is_real(dev)) {
        host_copy(dst, src, bytes);
    } else if (bytes > 0 && dst != src) {
        MOE_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, dev->stream));
        /* Pageable destinations already complete on return; pinned ones would not: wait. */
        MOE_CHECK_CUDA(cudaStreamSynchronize(dev->stream));
    }
}

void moe_eng_copy_from_host(const moe_eng_dev_t *dev, void *dst, const void *src, size_t bytes)
{
    if (!is_real(dev)) {
        host_copy(dst, src, bytes);
    } else if (bytes > 0 && dst != src) {
        MOE_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, dev->stream));
        /* The driver stages pageable sources before returning, but whether it does on systems
         * where the GPU can address pageable memory (HMM) is not documented: wait, so the host
         * buffer (often a reused host temporary) is free to change. */
        MOE_CHECK_CUDA(cudaStreamSynchronize(dev->stream));
    }
}

void moe_eng_memzero(const moe_eng_dev_t *dev, void *dst, size_t bytes)
{
    if (bytes == 0) {
        return;
    }
    if (!is_real(dev)) {
        memset(dst, 0, bytes);
        return;
    }
    MOE_CHECK_CUDA(cudaMemsetAsync(dst, 0, bytes, dev->stream));
}

void moe_eng_dev_sync(const moe_eng_dev_t *dev)
{
    if (is_real(dev)) {
        MOE_CHECK_CUDA(cudaStreamSynchronize(dev->stream));
    }
}

void moe_eng_dev_mem_info(const moe_eng_dev_t *dev, size_t *free_bytes, size_t *total_bytes)
{
    size_t f = 0;
    size_t t = 0;
    if (is_real(dev)) {
        MOE_CHECK_CUDA(cudaMemGetInfo(&f, &t));
    }
    *free_bytes = f;
    *total_bytes = t;
}

/* Host view of x[off, off + n) (n <= DEV_BOUNCE_FLOATS on a device). */
static const float *host_view(const moe_eng_dev_t *dev, const float *x, size_t off, size_t n)
{
    if (!is_real(dev)) {
        return x + off;
    }
    moe_eng_copy_to_host(dev, dev->bounce, x + off, n * sizeof(float));
    return dev->bounce;
}

static size_t chunk_of(const moe_eng_dev_t *dev, size_t left)
{
    return !is_real(dev) || left < DEV_BOUNCE_FLOATS ? left : DEV_BOUNCE_FLOATS;
}

void moe_eng_dev_timer_start(moe_eng_dev_t *dev)
{
    MOE_ASSERT(dev != NULL);
    if (dev->is_emulated) {
        dev->t_last = host_now();
        return;
    }
    MOE_CHECK_CUDA(cudaEventRecord(dev->events[0], dev->stream));
    MOE_CHECK_CUDA(cudaEventRecord(dev->origin, dev->stream));
    dev->origin_host = host_now();
    dev->event_phase[0] = -1;
    dev->num_events = 1;
}

void moe_eng_dev_timer_fold(moe_eng_dev_t *dev, double *phase_s, struct moe_eng_tl *tl)
{
    MOE_ASSERT(dev != NULL);
    int n = dev->is_emulated ? 0 : dev->num_events;
    if (n < 2) {
        return;
    }
    MOE_CHECK_CUDA(cudaEventSynchronize(dev->events[n - 1]));
    bool traced = tl != NULL && tl->is_on;
    float t0_ms = 0.0f;
    if (traced) {
        MOE_CHECK_CUDA(cudaEventElapsedTime(&t0_ms, dev->origin, dev->events[0]));
    }
    for (int i = 1; i < n; i++) {
        float ms = 0.0f;
        MOE_CHECK_CUDA(cudaEventElapsedTime(&ms, dev->events[i - 1], dev->events[i]));
        phase_s[dev->event_phase[i]] += (double)ms * 1e-3;
        if (traced) {
            double t0 = dev->origin_host + (double)t0_ms * 1e-3;
            tl_add(tl, t0, t0 + (double)ms * 1e-3, dev->event_phase[i], dev->event_tag[i]);
            t0_ms += ms;
        }
    }
    /* The last boundary starts the next interval. */
    cudaEvent_t last = dev->events[n - 1];
    dev->events[n - 1] = dev->events[0];
    dev->events[0] = last;
    dev->event_phase[0] = -1;
    dev->num_events = 1;
}

void moe_eng_dev_timer_mark(
    moe_eng_dev_t *dev, int phase, int tag, double *phase_s, struct moe_eng_tl *tl)
{
    MOE_ASSERT(dev != NULL);
    if (dev->is_paused) {
        return;
    }
    if (dev->is_emulated) {
        host_timer_mark(dev, phase, tag, phase_s, tl);
        return;
    }
    MOE_ASSERT(dev->num_events > 0);
    if (dev->num_events == DEV_TIMER_EVENTS) {
        moe_eng_dev_timer_fold(dev, phase_s, tl);
    }
    int i = dev->num_events++;
    MOE_CHECK_CUDA(cudaEventRecord(dev->events[i], dev->stream));
    dev->event_phase[i] = phase;
    dev->event_tag[i] = tag;
}

void moe_eng_dev_capture_begin(moe_eng_dev_t *dev)
{
    MOE_ASSERT(is_real(dev));
    dev->is_paused = true;
    MOE_CHECK_CUDA(cudaStreamBeginCapture(dev->stream, cudaStreamCaptureModeThreadLocal));
}

enum moe_status moe_eng_dev_capture_end(moe_eng_dev_t *dev, struct CUgraphExec_st **out)
{
    MOE_ASSERT(is_real(dev));
    *out = NULL;
    cudaGraph_t graph = NULL;
    cudaError_t err = cudaStreamEndCapture(dev->stream, &graph);
    dev->is_paused = false;
    cudaGraphExec_t exec = NULL;
    if (err == cudaSuccess) {
        err = cudaGraphInstantiate(&exec, graph, 0);
    }
    if (graph != NULL) {
        MOE_CHECK_CUDA(cudaGraphDestroy(graph));
    }
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return MOE_ERR_UNSUPPORTED;
    }
    *out = exec;
    return MOE_OK;
}

void moe_eng_dev_graph_launch(moe_eng_dev_t *dev, struct CUgraphExec_st *graph)
{
    MOE_ASSERT(is_real(dev));
    MOE_CHECK_CUDA(cudaGraphLaunch(graph, dev->stream));
}

void moe_eng_dev_graph_destroy(struct CUgraphExec_st *graph)
{
    if (graph != NULL) {
        MOE_CHECK_CUDA(cudaGraphExecDestroy(graph));
    }
}

#else /* no CUDA backend: host memory, or its emulation of a device */

void moe_eng_dev_capture_begin(moe_eng_dev_t *dev)
{
    (void)dev;
    MOE_ASSERT(!"CUDA graphs need the CUDA build");
}

enum moe_status moe_eng_dev_capture_end(moe_eng_dev_t *dev, struct CUgraphExec_st **out)
{
    (void)dev;
    *out = NULL;
    return MOE_ERR_UNSUPPORTED;
}

void moe_eng_dev_graph_launch(moe_eng_dev_t *dev, struct CUgraphExec_st *graph)
{
    (void)dev;
    (void)graph;
    MOE_ASSERT(!"CUDA graphs need the CUDA build");
}

void moe_eng_dev_graph_destroy(struct CUgraphExec_st *graph)
{
    MOE_ASSERT(graph == NULL);
}

bool moe_eng_dev_is_built(void)
{
    return false;
}

int moe_eng_dev_count(void)
{
    return 0;
}

bool moe_eng_dev_available(char *why, size_t len)
{
    (void)snprintf(why, len, "this build has no CUDA backend (no nvcc, or NO_CUDA=1)");
    return false;
}

enum moe_status moe_eng_dev_create(int device_idx, moe_eng_dev_t **out, struct moe_diag *diag)
{
    *out = NULL;
    return moe_diag_set(diag, MOE_ERR_UNSUPPORTED,
                        "CUDA device %d: this moefold was built without the CUDA backend (no nvcc, "
                        "or NO_CUDA=1)",
                        device_idx);
}

void moe_eng_dev_destroy(moe_eng_dev_t *dev)
{
    if (dev != NULL) {
        free(dev->bounce);
        free(dev);
    }
}

struct CUstream_st *moe_eng_dev_stream(const moe_eng_dev_t *dev)
{
    (void)dev;
    return NULL;
}

struct CUstream_st *moe_eng_dev_comm_stream(const moe_eng_dev_t *dev)
{
    (void)dev;
    return NULL;
}

enum moe_status moe_eng_dev_kernel_ctx(moe_eng_dev_t *dev, int gemm_math, moe_k_ctx_t **out)
{
    (void)gemm_math;
    *out = NULL;
    if (!moe_eng_dev_is_emulated(dev)) {
        return MOE_ERR_UNSUPPORTED;
    }
    struct moe_k_ctx_desc desc;
    memset(&desc, 0, sizeof(desc));
    desc.backend = MOE_K_BACKEND_CPU;
    desc.num_threads = 1;
    return moe_k_ctx_create(&desc, out);
}

enum moe_status moe_eng_dev_alloc(moe_eng_dev_t *dev, void **out, size_t bytes)
{
    *out = NULL;
    MOE_ASSERT(is_real(dev) || moe_eng_dev_is_emulated(dev));
    return bytes == 0 ? MOE_OK : emulated_alloc(out, bytes);
}

void moe_eng_dev_free(moe_eng_dev_t *dev, void *ptr)
{
    (void)dev;
    free(ptr);
}

void moe_eng_copy(const moe_eng_dev_t *dev, void *dst, const void *src, size_t bytes)
{
    (void)dev;
    host_copy(dst, src, bytes);
}

void moe_eng_copy_to_host(const moe_eng_dev_t *dev, void *dst, const void *src, size_t bytes)
{
    (void)dev;
    host_copy(dst, src, bytes);
}

void moe_eng_copy_from_host(const moe_eng_dev_t *dev, void *dst, const void *src, size_t bytes)
{
    (void)dev;
    host_copy(dst, src, bytes);
}

void moe_eng_memzero(const moe_eng_dev_t *dev, void *dst, size_t bytes)
{
    (void)dev;
    if (bytes > 0) {
        memset(dst, 0, bytes);
    }
}

void moe_eng_dev_sync(const moe_eng_dev_t *dev)
{
    (void)dev;
}

void moe_eng_dev_mem_info(const moe_eng_dev_t *dev, size_t *free_bytes, size_t *total_bytes)
{
    (void)dev;
    *free_bytes = 0;
    *total_bytes = 0;
}

static const float *host_view(const moe_eng_dev_t *dev, const float *x, size_t off, size_t n)
{
    (void)dev;
    (void)n;
    return x + off;
}

static size_t chunk_of(const moe_eng_dev_t *dev, size_t left)
{
    (void)dev;
    return left;
}

void moe_eng_dev_timer_start(moe_eng_dev_t *dev)
{
    dev->t_last = host_now();
}

void moe_eng_dev_timer_mark(
    moe_eng_dev_t *dev, int phase, int tag, double *phase_s, struct moe_eng_tl *tl)
{
    if (!dev->is_paused) {
        host_timer_mark(dev, phase, tag, phase_s, tl);
    }
}

void moe_eng_dev_timer_fold(moe_eng_dev_t *dev, double *phase_s, struct moe_eng_tl *tl)
{
    (void)phase_s;
    (void)tl;
    MOE_ASSERT(dev != NULL);
}

#endif /* MOE_HAVE_CUDA_KERNELS */

void moe_eng_dev_timer_pause(moe_eng_dev_t *dev, bool is_paused)
{
    dev->is_paused = is_paused; /* dev != NULL: the phase clock calls only with a device */
}

/* ---- Scans shared by both builds ----------------------------------------------------------- */

size_t moe_eng_first_nonfinite(const moe_eng_dev_t *dev, const float *x, size_t n, float *value)
{
    size_t off = 0;
    while (off < n) {
        size_t c = chunk_of(dev, n - off);
        const float *h = host_view(dev, x, off, c);
        for (size_t i = 0; i < c; i++) {
            if (!isfinite(h[i])) {
                *value = h[i];
                return off + i;
            }
        }
        off += c;
    }
    return n;
}

double moe_eng_sumsq_double(const moe_eng_dev_t *dev, const float *x, size_t n)
{
    double s = 0.0;
    size_t off = 0;
    while (off < n) {
        size_t c = chunk_of(dev, n - off);
        const float *h = host_view(dev, x, off, c);
        for (size_t i = 0; i < c; i++) {
            s += (double)h[i] * (double)h[i];
        }
        off += c;
    }
    return s;
}
