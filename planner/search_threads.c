/*
 * Workers and threads of the search (planner/search_internal.h): each worker's state and caches
 * (allocated once per search, sized for the largest layout), and the phases, each a loop of every
 * worker over the keys or nodes, with progress reported from the calling thread.
 *
 * A worker writes only its own state; what the threads share is written under sh.mu or through
 * atomics (struct shared). Which worker takes which node changes the counters, never the plans
 * (search_front.c).
 */
#define _GNU_SOURCE 1 /* for sched_getaffinity / CPU_COUNT (falls back to sysconf) */
#include "planner/search_internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

struct thread_arg {
    struct worker *w;
    enum phase phase;
};

static void *thread_main(void *p)
{
    struct thread_arg *a = p;
    struct worker *w = a->w;
    struct search *s = w->s;
    long total = a->phase == PHASE_KEYS ? s->num_keys : s->num_nodes;
    for (;;) {
        if (atomic_load(&s->sh.failed)) {
            break;
        }
        long i =
            a->phase == PHASE_SEARCH ? moe_search_order_take(s) : atomic_fetch_add(&s->sh.next, 1);
        if (i < 0 || i >= total) {
            break;
        }
        switch (a->phase) {
        case PHASE_KEYS:
            moe_search_key_bound(w, &s->keys[s->key_order[i]]);
            break;
        case PHASE_NODES:
            moe_search_node_bound(s, &s->nodes[i]);
            break;
        case PHASE_SEARCH:
            w->on_front = false;
            moe_search_node(w, &s->nodes[i]);
            if (w->on_front) {
                moe_search_order_pull(w, &s->nodes[i]);
            }
            break;
        case PHASE_CLOSEST:
            moe_search_closest_node(w, &s->nodes[i]);
            break;
        }
        atomic_store_explicit(&w->shown_evaluated, (long)w->c.evaluated, memory_order_relaxed);
        atomic_fetch_add(&s->sh.done, 1);
    }
    return NULL;
}

double moe_search_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int moe_search_online_cpus(void)
{
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) {
            return n;
        }
    }
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static double evaluated_so_far(const struct worker *ws, int n)
{
    double ev = 0.0;
    for (int i = 0; i < n; i++) {
        ev += (double)atomic_load_explicit(&ws[i].shown_evaluated, memory_order_relaxed);
    }
    return ev;
}

enum moe_status
moe_search_run_phase(struct search *s, struct worker *ws, int nthreads, enum phase phase, double t0)
{
    pthread_t tids[MAX_THREADS];
    struct thread_arg args[MAX_THREADS];
    atomic_store(&s->sh.next, 0);
    atomic_store(&s->sh.done, 0);
    int started = 0;
    for (int i = 0; i < nthreads; i++) {
        args[i] = (struct thread_arg){&ws[i], phase};
        if (pthread_create(&tids[i], NULL, thread_main, &args[i]) != 0) {
            break;
        }
        started++;
    }
    if (started == 0) {
        args[0] = (struct thread_arg){&ws[0], phase};
        (void)thread_main(&args[0]);
    }
    long total = phase == PHASE_KEYS ? s->num_keys : s->num_nodes;
    const struct moe_plan_request *req = s->req;
    if (req->progress != NULL && started > 0 && phase >= PHASE_SEARCH) {
        /* The calling thread reports progress while the workers search. */
        for (;;) {
            long done = atomic_load(&s->sh.done);
            req->progress(req->progress_ctx, total > 0 ? (double)done / (double)total : 1.0,
                          moe_search_now_s() - t0, evaluated_so_far(ws, started));
            if (done >= total || atomic_load(&s->sh.failed) ||
                atomic_load(&s->sh.next) >= total + started) {
                break;
            }
            struct timespec ts = {0, 100L * 1000L * 1000L};
            nanosleep(&ts, NULL);
        }
    }
    for (int i = 0; i < started; i++) {
        pthread_join(tids[i], NULL);
    }
    return atomic_load(&s->sh.failed) ? MOE_ERR_NOMEM : MOE_OK;
}

void moe_search_workers_free(struct worker *ws, int n)
{
    if (ws == NULL) {
        return;
    }
    for (int i = 0; i < n; i++) {
        moe_plan_valid_cache_destroy(ws[i].vc);
        free(ws[i].ws);
        free(ws[i].sc);
        free(ws[i].gp);
        free(ws[i].statics);
        free(ws[i].pl);
        free(ws[i].terms);
        free(ws[i].kinds);
        free(ws[i].mtp);
        free(ws[i].fine_src);
        free(ws[i].rcb);
        free(ws[i].views);
        free(ws[i].mems);
        free(ws[i].psnap);
        free(ws[i].kterms);
        free(ws[i].vm.g);
        free(ws[i].vm.r);
        free(ws[i].vm.f);
        free(ws[i].vm.x);
        free(ws[i].vm.rf);
        free(ws[i].vm.rx);
        free(ws[i].vm.fx);
        free(ws[i].vm.n);
        free(ws[i].spans);
    }
    free(ws);
}

struct worker *moe_search_workers_create(struct search *s, int n)
{
    struct worker *ws = calloc((size_t)n, sizeof(*ws));
    if (ws == NULL) {
        return NULL;
    }
    struct moe_layout big;
    moe_layout_init(&big);
    big.pp = MOE_MAX_PP_CHUNKS;
    size_t bytes = moe_cost_workspace_bytes(&big, MOE_SCHED_CLOSED_FORM);
    for (int i = 0; i < n; i++) {
        struct worker *w = &ws[i];
        w->s = s;
        w->vc = moe_plan_valid_cache_create(VALID_LOG2);
        w->ws_bytes = bytes;
        w->ws = malloc(bytes);
        w->sc = calloc(MOE_MAX_PP_CHUNKS, sizeof(*w->sc));
        w->gp = calloc(MOE_MAX_PP_CHUNKS, sizeof(*w->gp));
        w->statics = calloc(STATIC_SLOTS, sizeof(*w->statics));
        w->pl = calloc(MAX_PLACEMENTS, sizeof(*w->pl));
        w->terms = calloc(TERMS_SLOTS, sizeof(*w->terms));
        w->kinds = calloc(MOE_MAX_PP_CHUNKS, sizeof(*w->kinds));
        w->mtp = calloc(MOE_MAX_PP_CHUNKS, sizeof(*w->mtp));
        w->fine_src = calloc(MOE_PLAN_MAX_OFF + 1, sizeof(*w->fine_src));
        w->rcb = calloc(2 * MOE_PLAN_MAX_RC, sizeof(*w->rcb));
        w->views = calloc(VIEW_SLOTS, sizeof(*w->views));
        w->mems = calloc(MEM_SLOTS, sizeof(*w->mems));
        w->kterms = malloc(2 * sizeof(*w->kterms));
        w->rcb_stamp[0] = w->rcb_stamp[1] = 1;
        w->blk_ri = -1;
        w->rc_key[0] = w->rc_key[1] = -1;
        w->key_load = 1.0;
        w->psnap_version = -1;
        const struct moe_plan_space *sp = &s->sp;
        int nd = sp->num_dispatchers > sp->num_dispatchers_ep1 ? sp->num_dispatchers
                                                               : sp->num_dispatchers_ep1;
        size_t ng =
            (size_t)sp->num_recipes * sp->num_statics * nd * sp->num_grouped * sp->num_ep_overlap;
        w->vm.num_groups = (int)ng;
        w->vm.g = calloc(ng, sizeof(uint32_t));
        w->vm.r = calloc(ng * MOE_PLAN_MAX_RC, sizeof(uint32_t));
        w->vm.f = calloc(ng * MOE_PLAN_MAX_OFF, sizeof(uint32_t));
        w->vm.x = calloc(ng * MAX_X, sizeof(uint32_t));
        w->vm.rf = calloc((size_t)MOE_PLAN_MAX_RC * MOE_PLAN_MAX_OFF, sizeof(uint32_t));
        w->vm.rx = calloc((size_t)MOE_PLAN_MAX_RC * MAX_X, sizeof(uint32_t));
        w->vm.fx = calloc((size_t)MOE_PLAN_MAX_OFF * MAX_X, sizeof(uint32_t));
        w->vm.n = calloc((size_t)1 << VCOUNT_LOG2, sizeof(struct vcount));
        w->spans = malloc(sizeof(*w->spans));
        if (w->terms != NULL) {
            for (int j = 0; j < TERMS_SLOTS; j++) {
                w->terms[j].key = -1;
            }
        }
        if (w->vc == NULL || w->ws == NULL || w->sc == NULL || w->gp == NULL ||
            w->statics == NULL || w->pl == NULL || w->terms == NULL || w->vm.g == NULL ||
            w->vm.r == NULL || w->vm.f == NULL || w->vm.x == NULL || w->vm.rf == NULL ||
            w->vm.rx == NULL || w->vm.fx == NULL || w->vm.n == NULL || w->spans == NULL ||
            w->kinds == NULL || w->mtp == NULL || w->fine_src == NULL || w->rcb == NULL ||
            w->views == NULL || w->mems == NULL || w->kterms == NULL) {
            moe_search_workers_free(ws, n);
            return NULL;
        }
    }
    return ws;
}

void moe_search_sum_counters(struct moe_plan_stats *st, const struct counters *c)
{
    st->enumerated += c->enumerated;
    st->pruned_memory += c->pruned_memory;
    st->pruned_time += c->pruned_time;
    st->invalid += c->invalid;
    st->evaluated += c->evaluated;
    st->mem_evaluated += c->mem_evaluated;
    st->layouts += c->layouts;
    st->validity_mismatches += c->validity_mismatches;
    st->memory_mismatches += c->memory_mismatches;
}
