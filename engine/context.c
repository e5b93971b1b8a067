/*
 * Per-process context (engine/context.h): xoshiro256** seeded by splitmix64 (Vigna's reference
 * constants), a counter-based normal draw for initialisation that does not depend on how a tensor
 * is sharded, the rank-aware logger and the phase clock (CLOCK_MONOTONIC).
 */
#include "engine/context.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void moe_eng_rng_seed(struct moe_eng_rng *rng, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) {
        rng->s[i] = splitmix64(&x);
    }
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t moe_eng_rng_next(struct moe_eng_rng *rng)
{
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double moe_eng_rng_uniform(struct moe_eng_rng *rng)
{
    return (double)(moe_eng_rng_next(rng) >> 11) * 0x1.0p-53;
}

uint64_t moe_eng_hash3(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t x = a;
    uint64_t h = splitmix64(&x);
    x = h ^ b;
    h = splitmix64(&x);
    x = h ^ c;
    return splitmix64(&x);
}

double moe_eng_normal_at(uint64_t seed, uint64_t stream, uint64_t index)
{
    uint64_t a = moe_eng_hash3(seed, stream, 2 * index);
    uint64_t b = moe_eng_hash3(seed, stream, 2 * index + 1);
    double u1 = ((double)(a >> 11) + 0.5) * 0x1.0p-53; /* (0, 1) */
    double u2 = (double)(b >> 11) * 0x1.0p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2) /* 2 pi */;
}

static void vlog(FILE *f, const char *prefix, const char *fmt, va_list ap)
{
    if (f == NULL) {
        return;
    }
    if (prefix != NULL) {
        (void)fputs(prefix, f);
    }
    (void)vfprintf(f, fmt, ap); /* NOLINT(clang-analyzer-valist.Uninitialized): callers va_start */
    (void)fputc('\n', f);
    (void)fflush(f);
}

void moe_eng_log_info(const struct moe_eng_log *log, const char *fmt, ...)
{
    if (log->rank != 0 && !log->is_all_ranks) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vlog(log->stream, NULL, fmt, ap);
    va_end(ap);
}

void moe_eng_log_debug(const struct moe_eng_log *log, const char *fmt, ...)
{
    if (log->verbosity < 1 || (log->rank != 0 && !log->is_all_ranks)) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vlog(log->stream, NULL, fmt, ap);
    va_end(ap);
}

void moe_eng_log_rank(const struct moe_eng_log *log, const char *fmt, ...)
{
    char prefix[32];
    (void)snprintf(prefix, sizeof(prefix), "[rank %d] ", log->rank);
    va_list ap;
    va_start(ap, fmt);
    vlog(log->stream != NULL ? log->stream : stderr, prefix, fmt, ap);
    va_end(ap);
}

double moe_eng_now(void)
{
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void moe_eng_timer_reset(struct moe_eng_timer *t, enum moe_phase start)
{
    memset(t->phase_s, 0, sizeof(t->phase_s));
    t->current = start;
    t->current_slot = (int)start;
    t->tag = MOE_ENG_NO_OP;
    t->t_last = moe_eng_now();
    if (t->dev != NULL) {
        moe_eng_dev_timer_start(t->dev);
    }
}

/* Close the current interval at the host time now (host clock) or at an event (CUDA). */
static void close_interval(struct moe_eng_timer *t)
{
    if (t->dev != NULL) {
        moe_eng_dev_timer_mark(t->dev, (int)t->current, t->tag, t->phase_s, t->tl);
        return;
    }
    double now = moe_eng_now();
    t->phase_s[t->current] += now - t->t_last;
    struct moe_eng_tl *tl = t->tl;
    if (tl != NULL && tl->is_on && now > t->t_last) {
        if (tl->len < tl->cap) {
            tl->rec[tl->len++] = (struct moe_eng_tl_rec){t->t_last, now, (int)t->current, t->tag};
        } else {
            tl->has_overflowed = true;
        }
    }
    t->t_last = now;
}

enum moe_phase moe_eng_phase_enter(struct moe_eng_timer *t, enum moe_phase p)
{
    enum moe_phase prev = t->current;
    if (p != prev) {
        close_interval(t);
        t->current = p;
        t->current_slot = (int)p;
    }
    return prev;
}

void moe_eng_timer_set_tag(struct moe_eng_timer *t, int tag)
{
    if (tag != t->tag) {
        close_interval(t);
        t->tag = tag;
    }
}

void moe_eng_timer_flush(struct moe_eng_timer *t)
{
    close_interval(t);
    if (t->dev != NULL) {
        moe_eng_dev_timer_fold(t->dev, t->phase_s, t->tl);
    }
}

/* Rank and size among the members of world that share this host (collective over world). */
static enum moe_status node_rank(moe_comm_t *world, int *rank, int *size)
{
    moe_comm_t *node = NULL;
    MOE_TRY(moe_comm_split_shared(world, "node", &node));
    *rank = moe_comm_rank(node);
    *size = moe_comm_size(node);
    moe_comm_destroy(node);
    return MOE_OK;
}

/* The device runtime and the CUDA kernel context of this rank: one GPU per rank of the node. */
static enum moe_status cuda_init(struct moe_eng_ctx *ctx, int gemm_math, struct moe_diag *diag)
{
    int local = 0;
    int local_size = 1;
    MOE_TRY(node_rank(ctx->world, &local, &local_size));
    int count = moe_eng_dev_count();
    if (count <= 0) {
        return moe_diag_set(diag, MOE_ERR_UNSUPPORTED, "no CUDA device on %s", ctx->host);
    }
    if (local_size > count) {
        return moe_diag_set(diag, MOE_ERR_UNSUPPORTED,
                            "%d ranks run on %s but it has %d GPU(s): the CUDA backend needs one "
                            "GPU per rank (NCCL cannot put two ranks on one GPU); start at most %d "
                            "ranks per node",
                            local_size, ctx->host, count, count);
    }
    ctx->node_ranks = local_size;
    MOE_TRY(moe_eng_dev_create(local % count, &ctx->dev, diag));
    enum moe_status st = moe_eng_dev_kernel_ctx(ctx->dev, gemm_math, &ctx->kctx);
    if (st != MOE_OK) {
        return moe_diag_set(diag, st, "cannot create the CUDA kernel context on device %d",
                            local % count);
    }
    ctx->timer.dev = ctx->dev;
    moe_eng_timer_reset(&ctx->timer, MOE_PHASE_HOST_OVERHEAD);
    return MOE_OK;
}

enum moe_status moe_eng_ctx_init(struct moe_eng_ctx *ctx,
                                 moe_comm_t *world,
                                 uint64_t seed,
                                 FILE *log_stream,
                                 int verbosity,
                                 enum moe_k_backend backend,
                                 int gemm_math,
                                 bool is_device_emulated,
                                 struct moe_diag *diag)
{
    memset(ctx, 0, sizeof(*ctx));
    ctx->world = world;
    ctx->rank = moe_comm_rank(world);
    ctx->size = moe_comm_size(world);
    if (gethostname(ctx->host, sizeof(ctx->host) - 1) != 0) {
        (void)snprintf(ctx->host, sizeof(ctx->host), "?");
    }
    ctx->log = (struct moe_eng_log){
        .stream = log_stream, .rank = ctx->rank, .verbosity = verbosity, .is_all_ranks = false};
    moe_eng_rng_seed(&ctx->rng, seed);
    moe_eng_timer_reset(&ctx->timer, MOE_PHASE_HOST_OVERHEAD);
    if (backend == MOE_K_BACKEND_CUDA) {
        MOE_TRY(cuda_init(ctx, gemm_math, diag));
    } else if (is_device_emulated) {
        enum moe_status st = moe_eng_dev_create_emulated(&ctx->dev);
        if (st == MOE_OK) {
            st = moe_eng_dev_kernel_ctx(ctx->dev, gemm_math, &ctx->kctx);
        }
        if (st != MOE_OK) {
            return moe_diag_set(diag, st, "cannot create the emulated device");
        }
        ctx->timer.dev = ctx->dev;
        moe_eng_timer_reset(&ctx->timer, MOE_PHASE_HOST_OVERHEAD);
    } else {
        struct moe_k_ctx_desc desc = {.backend = MOE_K_BACKEND_CPU, .num_threads = 1};
        enum moe_status st = moe_k_ctx_create(&desc, &ctx->kctx);
        if (st != MOE_OK) {
            return moe_diag_set(diag, st, "cannot create the CPU kernel context");
        }
    }
    ctx->k = moe_k_ctx_ops(ctx->kctx);
    return MOE_OK;
}

void moe_eng_ctx_fini(struct moe_eng_ctx *ctx)
{
    moe_k_ctx_destroy(ctx->kctx);
    ctx->kctx = NULL;
    moe_eng_dev_destroy(ctx->dev);
    ctx->dev = NULL;
    ctx->timer.dev = NULL;
}
