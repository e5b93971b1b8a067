/*
 * A CUDA injection library that records every kernel, memcpy and memset of a process through CUPTI
 * activity tracing, one line per activity. Load it with
 *   CUDA_INJECTION64_PATH=/path/libmoe_cupti_profile.so MOE_CUPTI_OUT=trace.tsv program ...
 * (scripts/gpu-profile.sh builds it, runs moefold-train under it and sums the lines). Tracing
 * costs about a microsecond per activity, so unlike Nsight Compute the step keeps its shape:
 * kernels overlap host work as without the tool, and the GPU's idle time between them is the
 * host's share.
 *
 * Output (MOE_CUPTI_OUT, default stderr), tab-separated, one line per activity:
 * "kind start_ns end_ns name", kind K (kernel), C (memcpy) or S (memset); a kernel's name is cut
 * before its argument list. CUPTI hands buffers over from its own thread, also after exit
 * handlers have run, so each buffer is written (and flushed) as it arrives, under a lock; the exit
 * handler only forces the last ones out. Only the prefix of the activity records that every
 * CUPTI version shares is read (start, end, name), so it works with the runtime's CUPTI of any
 * version.
 */
#include <cupti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUF_BYTES (1u << 20) /* small enough to arrive during a run, not only at exit */

static FILE *g_out;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static void put(char kind, const char *name, uint64_t start, uint64_t end)
{
    int n = (int)strcspn(name, "(");
    if (n > 150) {
        n = 150;
    }
    fprintf(g_out, "%c\t%llu\t%llu\t%.*s\n", kind, (unsigned long long)start,
            (unsigned long long)end, n, name);
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, BUF_BYTES);
    *size = *buffer != NULL ? BUF_BYTES : 0;
    *max_records = 0;
}

static const char *copy_kind(uint8_t k)
{
    switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
        return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
        return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
        return "memcpy DtoD";
    default:
        return "memcpy other";
    }
}

static void CUPTIAPI
buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    (void)ctx;
    (void)stream;
    (void)size;
    CUpti_Activity *rec = NULL;
    pthread_mutex_lock(&g_lock);
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
            const CUpti_ActivityKernel4 *k = (const CUpti_ActivityKernel4 *)rec;
            put('K', k->name != NULL ? k->name : "?", k->start, k->end);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const CUpti_ActivityMemcpy *m = (const CUpti_ActivityMemcpy *)rec;
            put('C', copy_kind(m->copyKind), m->start, m->end);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            const CUpti_ActivityMemset *m = (const CUpti_ActivityMemset *)rec;
            put('S', "memset", m->start, m->end);
            break;
        }
        default:
            break;
        }
    }
    fflush(g_out);
    pthread_mutex_unlock(&g_lock);
    free(buffer);
}

static void flush_at_exit(void)
{
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

/* Called by the CUDA driver when it loads the library (CUDA_INJECTION64_PATH); once per process
 * is enough, later calls return at once. */
int InitializeInjection(void);
int InitializeInjection(void)
{
    static int started;
    if (started) {
        return 1;
    }
    started = 1;
    const char *path = getenv("MOE_CUPTI_OUT");
    g_out = path != NULL ? fopen(path, "w") : NULL;
    if (g_out == NULL) {
        g_out = stderr;
    }
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fprintf(stderr, "moe_cupti_profile: CUPTI activity tracing could not start\n");
        return 0;
    }
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
    atexit(flush_at_exit);
    return 1;
}
