/*
 * What the phase clock (engine/context.h) cannot see on one rank: how much of a collective phase
 * was waiting for the slowest member of the group, and the traced step's intervals on a clock
 * every rank shares. Definitions (run.json wait_s, README "Phases"):
 *
 * - Every collective of every group (not point-to-point) is logged as it runs (engine/comm.h's
 *   arrival log): when this rank entered or posted it, when it began to block on it, when it
 *   returned, and the phase it blocked in. The collective can start only when its last member has
 *   arrived; the time a rank spent blocked before that moment is its wait share:
 *       wait = clamp(latest arrival over the members - began to block, 0, returned - began to
 * block) and the rest of its blocked time is the transfer. After training (outside every step)
 * every group's members exchange their arrival times -- the k-th record of a group is the same
 * call on every member -- and each wait share goes to the step whose span holds it. The steps
 * themselves have no barrier and no extra collective, and nothing joins the ranks between steps:
 * matching after every step did, so a pipeline stage that ended its step early (a shorter
 * optimizer) waited there for the last one and then idled at the next step's start for its
 * neighbour's first forward, a bubble the model's staggered stage starts (model/cost.c) do not
 * have (validate pp2: 8.5 ms a step on stage 1, pp_bubble -94%). The log holds the records of
 * the run's steps, or of as many as fit in LOG_BYTES_MAX (the same count on every rank); when it
 * is full it is matched at that step's end, which joins the ranks there once. A non-blocking call
 * posted in one step and waited in the next is matched when it is posted and counted when it
 * completes.
 * - Clocks: CLOCK_MONOTONIC is shared by the processes of one host; across hosts each rank's offset
 *   to rank 0 is estimated once at creation by ping-pong with rank 0 (NTP's estimate from the
 *   exchange with the shortest round trip), and every time is put on rank 0's clock.
 * - The CUDA backend's collectives return before their transfers run (stream-ordered), so its
 *   host arrival times say nothing about device waits: wait shares are measured on host-synchronous
 *   backends only (run.json says which).
 *
 * Kernel profile (--profile-kernels): every kernel op runs through kernels/profile.h's wrapping
 * table, which adds its wall time and one call to the phase slot current when it ran; the sums of
 * measured steps are reported per step (run.json "kernel_s"), so a phase's time splits into the ops
 * it ran and the time between them (the phase minus its ops: loops, copies, communication calls).
 *
 * The traced step (--trace-step K): every interval of the phase clock with its op (micro-batch,
 * virtual stage, pass), the wait shares of its collectives cut out of them as their own intervals,
 * written as Chrome trace events by rank 0 (moe_eng_write_trace) and kept for run.json's
 * "timeline" (engine/report.c).
 */
#include "engine/check.h"
#include "engine/internal.h"
#include "topologies/trace_file.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The groups whose collectives are logged, in one order on every rank. */
static int logged_groups(struct moe_eng *e, moe_comm_t **out)
{
    moe_comm_t *all[] = {e->ctx.world,      e->groups.tp,    e->groups.cp,    e->groups.dp,
                         e->groups.dpcp,    e->groups.tpcp,  e->groups.ep,    e->groups.etp,
                         e->groups.edp,     e->groups.stage, e->groups.embed, e->groups.ep_node,
                         e->groups.ep_cross};
    int n = 0;
    for (size_t i = 0; i < MOE_ARRAY_LEN(all); i++) {
        out[n++] = all[i];
    }
    return n;
}

enum { MAX_LOGGED = 14, PINGS = 8 };

/* The arrival log holds as many steps as fit in this many bytes (at least one); when it is full
 * it is matched at a step's end. */
#define LOG_BYTES_MAX ((size_t)32 << 20)

/* Entries of a kernel profile: every op in every phase slot. */
#define KPROF_N ((size_t)MOE_ENG_NUM_SLOTS * (size_t)MOE_K_NUM_OPS)

/* This rank's clock minus rank 0's (0 on rank 0), from the fastest of PINGS round trips. */
static double clock_offset(moe_comm_t *world)
{
    int rank = moe_comm_rank(world);
    int n = moe_comm_size(world);
    double mine = 0.0;
    for (int r = 1; r < n; r++) {
        if (rank == 0) {
            double best_rtt = INFINITY;
            double off = 0.0;
            for (int k = 0; k < PINGS; k++) {
                double t0 = moe_eng_now();
                double tr = 0.0;
                moe_comm_send(world, &t0, 1, MOE_COMM_F64, r, 7);
                moe_comm_recv(world, &tr, 1, MOE_COMM_F64, r, 8);
                double t1 = moe_eng_now();
                if (t1 - t0 < best_rtt) {
                    best_rtt = t1 - t0;
                    off = tr - 0.5 * (t0 + t1);
                }
            }
            moe_comm_send(world, &off, 1, MOE_COMM_F64, r, 9);
        } else if (rank == r) {
            for (int k = 0; k < PINGS; k++) {
                double t0 = 0.0;
                moe_comm_recv(world, &t0, 1, MOE_COMM_F64, 0, 7);
                double tr = moe_eng_now();
                moe_comm_send(world, &tr, 1, MOE_COMM_F64, 0, 8);
            }
            moe_comm_recv(world, &mine, 1, MOE_COMM_F64, 0, 9);
        }
    }
    return mine;
}

/* Collectives a step may issue (a generous bound: every layer's exchanges per micro-batch, twice
 * for recompute, every bucket's reduction and gather, the optimizer's and the statistics'). */
static int log_capacity(const struct moe_eng *e)
{
    long layers = 0;
    for (int v = 0; v < e->num_chunks_local; v++) {
        layers += e->chunks[v].num_layers + 2;
    }
    long m = e->plan.layout.num_microbatches;
    return (int)(64L * layers * m + 8L * e->cap_buckets + 256);
}

/* --profile-kernels: the profiling table in front of the backend's, adding this step's op times
 * by the phase clock's current slot (kernels/profile.h); the step's sums go into the stats when
 * the step is measured. Host-synchronous backends only: a CUDA op returns before it runs. */
static enum moe_status kernel_profile_create(struct moe_eng *e, struct moe_diag *diag)
{
    if (e->is_device && !moe_eng_dev_is_emulated(e->ctx.dev)) {
        return moe_diag_set(diag, MOE_ERR_UNSUPPORTED,
                            "--profile-kernels times ops on the host clock: the CUDA backend's ops "
                            "return before they run (use the CPU backend)");
    }
    struct moe_eng_heap *h = &e->ctx.heap;
    size_t n = KPROF_N;
    e->kprof = moe_eng_heap_alloc(h, sizeof(*e->kprof));
    double *step_s = moe_eng_heap_alloc(h, n * sizeof(double));
    long *step_calls = moe_eng_heap_alloc(h, n * sizeof(long));
    e->stats.kernel_s = moe_eng_heap_alloc(h, n * sizeof(double));
    e->stats.kernel_calls = moe_eng_heap_alloc(h, n * sizeof(long));
    if (e->kprof == NULL || step_s == NULL || step_calls == NULL || e->stats.kernel_s == NULL ||
        e->stats.kernel_calls == NULL) {
        moe_eng_heap_free(h, e->kprof, sizeof(*e->kprof));
        moe_eng_heap_free(h, step_s, n * sizeof(double));
        moe_eng_heap_free(h, step_calls, n * sizeof(long));
        e->kprof = NULL;
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the kernel profile");
    }
    memset(e->stats.kernel_s, 0, n * sizeof(double));
    memset(e->stats.kernel_calls, 0, n * sizeof(long));
    enum moe_status st = moe_k_profile_init(e->kprof, e->k, &e->ctx.timer.current_slot,
                                            MOE_ENG_NUM_SLOTS, step_s, step_calls);
    if (st != MOE_OK) {
        return moe_diag_set(diag, st, "cannot set up the kernel profile");
    }
    moe_k_ctx_set_profile(e->kc, e->kprof);
    e->k = &e->kprof->ops;
    return MOE_OK;
}

static void kernel_profile_destroy(struct moe_eng *e)
{
    struct moe_eng_heap *h = &e->ctx.heap;
    size_t n = KPROF_N;
    if (e->kprof != NULL) {
        moe_k_ctx_set_profile(e->kc, NULL);
        e->k = e->kprof->inner;
        moe_eng_heap_free(h, e->kprof->seconds, n * sizeof(double));
        moe_eng_heap_free(h, e->kprof->calls, n * sizeof(long));
        moe_eng_heap_free(h, e->kprof, sizeof(*e->kprof));
        e->kprof = NULL;
    }
    moe_eng_heap_free(h, e->stats.kernel_s, n * sizeof(double));
    moe_eng_heap_free(h, e->stats.kernel_calls, n * sizeof(long));
    e->stats.kernel_s = NULL;
    e->stats.kernel_calls = NULL;
}

enum moe_status moe_eng_timing_create(struct moe_eng *e, struct moe_diag *diag)
{
    struct moe_eng_heap *h = &e->ctx.heap;
    if (e->opts.profile_kernels) {
        enum moe_status st = kernel_profile_create(e, diag);
        if (st != MOE_OK) {
            return st;
        }
    }
    e->has_wait_log = !e->is_device || moe_eng_dev_is_emulated(e->ctx.dev);
    e->stats.wait_sum = moe_eng_heap_alloc(h, MOE_ENG_NUM_SLOTS * sizeof(double));
    if (e->stats.wait_sum == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the phase timing");
    }
    memset(e->stats.wait_sum, 0, MOE_ENG_NUM_SLOTS * sizeof(double));
    e->clock_offset = e->ctx.size > 1 ? clock_offset(e->ctx.world) : 0.0;
    int per_step = log_capacity(e);
    if (e->has_wait_log) {
        /* Steps the log holds: the same count on every rank (the largest rank's bound), since a
         * full log is matched collectively. */
        int most = per_step;
        if (e->ctx.size > 1) {
            moe_comm_allreduce(e->ctx.world, &most, &most, 1, MOE_COMM_I32, MOE_COMM_MAX);
        }
        size_t fit = LOG_BYTES_MAX / ((size_t)most * sizeof(struct moe_comm_call));
        size_t steps = e->opts.num_steps > 0 ? (size_t)e->opts.num_steps + 1 : 2;
        e->cap_spans = (int)(fit < 1 ? 1 : (fit < steps ? fit : steps));
        int cap = most * e->cap_spans;
        e->spans = moe_eng_heap_alloc(h, (size_t)e->cap_spans * sizeof(struct moe_eng_span));
        e->clog.calls = moe_eng_heap_alloc(h, (size_t)cap * sizeof(struct moe_comm_call));
        e->match_scratch = moe_eng_heap_alloc(h, (size_t)cap * sizeof(double));
        if (e->spans == NULL || e->clog.calls == NULL || e->match_scratch == NULL) {
            return moe_diag_set(diag, MOE_ERR_NOMEM,
                                "out of memory for the collectives' arrival log (%d calls)", cap);
        }
        e->clog.cap = cap;
        e->clog.slot_src = &e->ctx.timer.current_slot;
        e->clog.clock_offset = e->clock_offset;
        e->clog.is_on = true;
        moe_comm_t *g[MAX_LOGGED];
        int n = logged_groups(e, g);
        for (int i = 0; i < n; i++) {
            if (g[i] != NULL) {
                moe_comm_set_log(g[i], &e->clog, i);
            }
        }
    }
    if (e->opts.trace_step > 0) {
        int cap = 4 * per_step;
        int waits = e->has_wait_log ? per_step : 0;
        e->tl.rec = moe_eng_heap_alloc(h, (size_t)cap * sizeof(struct moe_eng_tl_rec));
        e->tl_waits.rec = moe_eng_heap_alloc(h, (size_t)waits * sizeof(struct moe_eng_tl_rec) +
                                                    sizeof(struct moe_eng_tl_rec));
        if (e->tl.rec == NULL || e->tl_waits.rec == NULL) {
            return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the traced step");
        }
        e->tl.cap = cap;
        e->tl_waits.cap = waits;
        e->ctx.timer.tl = &e->tl;
    }
    return MOE_OK;
}

void moe_eng_timing_destroy(struct moe_eng *e)
{
    struct moe_eng_heap *h = &e->ctx.heap;
    kernel_profile_destroy(e);
    moe_comm_t *g[MAX_LOGGED];
    int n = logged_groups(e, g);
    for (int i = 0; i < n; i++) {
        if (g[i] != NULL) {
            moe_comm_set_log(g[i], NULL, 0);
        }
    }
    moe_eng_heap_free(h, e->spans, (size_t)e->cap_spans * sizeof(struct moe_eng_span));
    e->spans = NULL;
    moe_eng_heap_free(h, e->clog.calls, (size_t)e->clog.cap * sizeof(struct moe_comm_call));
    moe_eng_heap_free(h, e->match_scratch, (size_t)e->clog.cap * sizeof(double));
    moe_eng_heap_free(h, e->tl.rec, (size_t)e->tl.cap * sizeof(struct moe_eng_tl_rec));
    moe_eng_heap_free(h, e->tl_waits.rec,
                      (size_t)e->tl_waits.cap * sizeof(struct moe_eng_tl_rec) +
                          sizeof(struct moe_eng_tl_rec));
    moe_eng_heap_free(h, e->stats.wait_sum, MOE_ENG_NUM_SLOTS * sizeof(double));
    e->ctx.timer.tl = NULL;
}

void moe_eng_timing_begin_step(struct moe_eng *e)
{
    if (e->spans != NULL) {
        e->spans[e->num_spans].t0 = moe_eng_now() - e->clock_offset; /* free: see end_step */
    }
    if (e->kprof != NULL) {
        memset(e->kprof->seconds, 0, KPROF_N * sizeof(double));
        memset(e->kprof->calls, 0, KPROF_N * sizeof(long));
    }
    bool traced = e->opts.trace_step > 0 && e->step + 1 == e->opts.trace_step;
    if (traced && e->tl.rec != NULL) {
        e->tl.len = 0;
        e->tl_waits.len = 0;
        e->tl.is_on = true;
        e->trace_t0 = moe_eng_now() - e->clock_offset;
    }
}

/* Match this step's records of group gi (index in the logged list) with its members': t_last of
 * each is the latest arrival. Collective over g. */
static void match_group(struct moe_eng *e, moe_comm_t *g, int gi)
{
    struct moe_comm_log *log = &e->clog;
    int mine = 0;
    for (int i = 0; i < log->len; i++) {
        mine += log->calls[i].group == gi && log->calls[i].t_last == 0.0;
    }
    int range[2] = {mine, -mine};
    moe_comm_allreduce(g, range, range, 2, MOE_COMM_I32, MOE_COMM_MAX);
    int size = moe_comm_size(g);
    if (range[0] != -range[1]) {
        /* A member lost records (a full log): no wait is measured for this group this step. */
        e->has_wait_mismatch = true;
        for (int i = 0; i < log->len; i++) {
            if (log->calls[i].group == gi && log->calls[i].t_last == 0.0) {
                log->calls[i].t_last = -1.0;
            }
        }
        return;
    }
    int per = log->cap / (size + 1);
    int next = 0; /* scan position in the log */
    for (int done = 0; done < mine;) {
        int k = mine - done < per ? mine - done : per;
        double *posts = e->match_scratch;
        double *all = posts + k;
        int idx = next;
        for (int j = 0; j < k; idx++) {
            const struct moe_comm_call *c = &log->calls[idx];
            if (c->group == gi && c->t_last == 0.0) {
                posts[j++] = c->t_post;
            }
        }
        moe_comm_allgather(g, posts, all, (size_t)k, MOE_COMM_F64);
        for (int j = 0; j < k; next++) {
            struct moe_comm_call *c = &log->calls[next];
            if (c->group == gi && c->t_last == 0.0) {
                double t = all[j];
                for (int r = 1; r < size; r++) {
                    t = fmax(t, all[(size_t)r * (size_t)k + (size_t)j]);
                }
                c->t_last = t;
                j++;
            }
        }
        done += k;
    }
}

static int rec_cmp(const void *a, const void *b)
{
    const struct moe_eng_tl_rec *x = a;
    const struct moe_eng_tl_rec *y = b;
    return x->t0 < y->t0 ? -1 : (x->t0 > y->t0 ? 1 : 0);
}

/* The span holding time t (reference clock) among the pending steps', or NULL. */
static const struct moe_eng_span *span_of(const struct moe_eng *e, double t)
{
    int lo = 0;
    int hi = e->num_spans - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const struct moe_eng_span *sp = &e->spans[mid];
        if (t < sp->t0) {
            hi = mid - 1;
        } else if (t > sp->t1) {
            lo = mid + 1;
        } else {
            return sp;
        }
    }
    return NULL;
}

void moe_eng_timing_flush(struct moe_eng *e)
{
    if (!e->has_wait_log || e->num_spans == 0) {
        return;
    }
    struct moe_comm_log *log = &e->clog;
    log->is_on = false; /* the matching's own collectives are neither logged nor counted */
    log->is_bookkeeping = true;
    if (log->has_overflowed) {
        e->has_wait_mismatch = true;
        log->has_overflowed = false;
    }
    moe_comm_t *g[MAX_LOGGED];
    int n = logged_groups(e, g);
    for (int i = 0; i < n; i++) {
        if (g[i] != NULL && moe_comm_size(g[i]) > 1) {
            match_group(e, g[i], i);
        }
    }
    bool traced = false;
    int kept = 0;
    for (int i = 0; i < log->len; i++) {
        struct moe_comm_call *c = &log->calls[i];
        if (c->t_end == 0.0) {
            log->calls[kept++] = *c; /* still pending: counted when it completes */
            continue;
        }
        const struct moe_eng_span *sp = span_of(e, c->t_block);
        if (c->t_last <= 0.0 || sp == NULL) {
            continue;
        }
        double w = fmin(fmax(c->t_last - c->t_block, 0.0), c->t_end - c->t_block);
        if (sp->is_measured) {
            e->stats.wait_sum[c->slot] += w;
        }
        if (sp->is_traced && w > 0.0 && e->tl_waits.len < e->tl_waits.cap) {
            e->tl_waits.rec[e->tl_waits.len++] =
                (struct moe_eng_tl_rec){c->t_block, c->t_block + w, c->slot, MOE_ENG_NO_OP};
        }
        traced = traced || sp->is_traced;
    }
    log->len = kept;
    log->is_on = true;
    log->is_bookkeeping = false;
    if (traced) {
        qsort(e->tl_waits.rec, (size_t)e->tl_waits.len, sizeof(struct moe_eng_tl_rec), rec_cmp);
    }
    e->num_spans = 0;
}

void moe_eng_timing_end_step(struct moe_eng *e, bool is_measured)
{
    bool traced = e->tl.is_on;
    e->tl.is_on = false;
    double now = moe_eng_now() - e->clock_offset;
    if (traced) {
        e->trace_step_s = now - e->trace_t0;
    }
    if (e->kprof != NULL && is_measured) {
        for (size_t i = 0; i < KPROF_N; i++) {
            e->stats.kernel_s[i] += e->kprof->seconds[i];
            e->stats.kernel_calls[i] += e->kprof->calls[i];
        }
    }
    if (!e->has_wait_log) {
        return;
    }
    struct moe_eng_span *sp = &e->spans[e->num_spans++];
    sp->t1 = now;
    sp->is_measured = is_measured;
    sp->is_traced = traced;
    if (e->num_spans == e->cap_spans) {
        moe_eng_timing_flush(e); /* the log holds cap_spans steps: every rank matches here */
    }
}

int moe_eng_unmatched_steps(const moe_eng_t *e)
{
    return e->num_spans;
}

/* ---- The traced step as events --------------------------------------------------------------- */

/*
 * The traced step's intervals on the reference clock, relative to origin (rank 0's start of the
 * traced step), with its collectives' wait shares cut out as their own intervals (is_wait).
 * Returns the count written to out[cap] (each record: t0, t1, slot, tag, is_wait as doubles).
 */
static int trace_records(const struct moe_eng *e, double origin, double *out, int cap)
{
    int n = 0;
    int w = 0;
    const struct moe_eng_tl_rec *wr = e->tl_waits.rec;
    double off = e->clock_offset + origin; /* interval times are this rank's raw clock */
    for (int i = 0; i < e->tl.len && n < cap; i++) {
        const struct moe_eng_tl_rec *r = &e->tl.rec[i];
        double t0 = r->t0 - off;
        double t1 = r->t1 - off;
        /* Wait shares are on the reference clock already. */
        while (w < e->tl_waits.len && wr[w].t1 - origin <= t0) {
            w++;
        }
        double t = t0;
        for (int k = w; k < e->tl_waits.len && n + 2 < cap; k++) {
            double a = wr[k].t0 - origin;
            double b = wr[k].t1 - origin;
            if (a >= t1) {
                break;
            }
            if (wr[k].slot != r->slot) {
                continue;
            }
            a = fmax(a, t);
            b = fmin(b, t1);
            if (b <= a) {
                continue;
            }
            if (a > t) {
                double *o = out + (size_t)n++ * MOE_TRACE_RECORD_FIELDS;
                o[0] = t, o[1] = a, o[2] = r->slot, o[3] = r->tag, o[4] = 0.0;
            }
            double *o = out + (size_t)n++ * MOE_TRACE_RECORD_FIELDS;
            o[0] = a, o[1] = b, o[2] = r->slot, o[3] = r->tag, o[4] = 1.0;
            t = b;
        }
        if (t < t1 && n < cap) {
            double *o = out + (size_t)n++ * MOE_TRACE_RECORD_FIELDS;
            o[0] = t, o[1] = t1, o[2] = r->slot, o[3] = r->tag, o[4] = 0.0;
        }
    }
    return n;
}

static int trace_capacity(const struct moe_eng *e)
{
    return e->tl.len + 2 * e->tl_waits.len + 1;
}

bool moe_eng_trace_gather(struct moe_eng *e, double **all, int **counts, double *step_s)
{
    /* Every rank's records to rank 0 (point-to-point in rank order; after training). */
    moe_eng_timing_flush(e); /* the traced step's waits */
    int n = e->ctx.size;
    int cap = trace_capacity(e);
    struct moe_eng_heap *h = &e->ctx.heap;
    double *mine = moe_eng_heap_alloc(h, (size_t)cap * MOE_TRACE_RECORD_FIELDS * sizeof(double));
    if (mine == NULL) {
        moe_eng_fatal(__FILE__, __LINE__, "out of memory for the trace");
    }
    double origin = e->trace_t0;
    moe_comm_bcast(e->ctx.world, &origin, 1, MOE_COMM_F64, 0);
    int len = trace_records(e, origin, mine, cap);
    int *cnt = NULL;
    double *buf = NULL;
    int total = len;
    moe_comm_allreduce(e->ctx.world, &total, &total, 1, MOE_COMM_I32, MOE_COMM_SUM);
    double steps[2] = {e->trace_step_s, e->tl.has_overflowed ? 1.0 : 0.0};
    /* The step: every rank's measured length of it (they agree but for noise); the largest. */
    moe_comm_allreduce(e->ctx.world, steps, steps, 2, MOE_COMM_F64, MOE_COMM_MAX);
    *step_s = steps[0];
    if (e->ctx.rank == 0) {
        cnt = calloc((size_t)n, sizeof(int));
        buf = malloc(((size_t)total + 1) * MOE_TRACE_RECORD_FIELDS * sizeof(double));
        if (cnt == NULL || buf == NULL) {
            moe_eng_fatal(__FILE__, __LINE__, "out of memory for the trace");
        }
        cnt[0] = len;
        memcpy(buf, mine, (size_t)len * MOE_TRACE_RECORD_FIELDS * sizeof(double));
        size_t at = (size_t)len * MOE_TRACE_RECORD_FIELDS;
        for (int r = 1; r < n; r++) {
            moe_comm_recv(e->ctx.world, &cnt[r], 1, MOE_COMM_I32, r, 11);
            if (cnt[r] > 0) {
                moe_comm_recv(e->ctx.world, buf + at, (size_t)cnt[r] * MOE_TRACE_RECORD_FIELDS,
                              MOE_COMM_F64, r, 12);
            }
            at += (size_t)cnt[r] * MOE_TRACE_RECORD_FIELDS;
        }
    } else {
        moe_comm_send(e->ctx.world, &len, 1, MOE_COMM_I32, 0, 11);
        if (len > 0) {
            moe_comm_send(e->ctx.world, mine, (size_t)len * MOE_TRACE_RECORD_FIELDS, MOE_COMM_F64,
                          0, 12);
        }
    }
    moe_eng_heap_free(h, mine, (size_t)cap * MOE_TRACE_RECORD_FIELDS * sizeof(double));
    *all = buf;
    *counts = cnt;
    return steps[1] == 0.0;
}

/* Stage of each world rank (the rank mapping of DESIGN.md: stage = rank / (TP CP DP)). */
static int stage_of(const struct moe_eng *e, int rank)
{
    const struct moe_layout *l = &e->plan.layout;
    return rank / (l->tp * l->cp * l->dp);
}

enum moe_status moe_eng_write_trace(moe_eng_t *e, const char *path, struct moe_diag *diag)
{
    double *all = NULL;
    int *cnt = NULL;
    double step_s = 0.0;
    bool complete = moe_eng_trace_gather(e, &all, &cnt, &step_s);
    enum moe_status st = MOE_OK;
    if (e->ctx.rank == 0) {
        if (e->tl.rec == NULL || step_s <= 0.0) {
            st = moe_diag_set(diag, MOE_ERR_INVALID,
                              "no step was traced: --trace-step %d is past the run's %d steps",
                              e->opts.trace_step, e->step);
        }
        struct moe_trace_writer w;
        moe_trace_init(&w);
        size_t at = 0;
        for (int r = 0; r < e->ctx.size && st == MOE_OK; r++) {
            char name[64];
            (void)snprintf(name, sizeof(name), "measured rank %d (stage %d)", r, stage_of(e, r));
            moe_trace_records(&w, r, name, all + at * MOE_TRACE_RECORD_FIELDS, cnt[r], 0.0);
            at += (size_t)cnt[r];
        }
        if (st == MOE_OK) {
            st = moe_trace_write_file(&w, path, diag);
        }
        if (st == MOE_OK && !complete) {
            moe_eng_log_info(&e->ctx.log,
                             "trace: a rank's interval record was full; %s misses "
                             "the step's last intervals",
                             path);
        }
        moe_trace_fini(&w);
    }
    free(all);
    free(cnt);
    int v = -(int)st;
    moe_comm_bcast(e->ctx.world, &v, 1, MOE_COMM_I32, 0);
    if (v != 0 && st == MOE_OK) {
        (void)moe_diag_set(diag, (enum moe_status)(-v), "rank 0 could not write %s", path);
    }
    return (enum moe_status)(-v);
}
