/*
 * The Pareto front and the prune test (planner/search_internal.h): the staircase of fitting plans
 * no other fitting plan beats in both memory and step time (memory ascending, time descending,
 * kept in struct shared under its lock), each worker's lock-free copy of it with envelopes over
 * memory slices, and prune, the test every bound of the search goes through: can anything with at
 * least this step time and this memory still reach the top list or the front?
 *
 * Exactness across threads: pruning reads shared thresholds that only tighten (the fastest step
 * time t1, the keep-th best layout's time tk, the staircase), and a candidate is dropped only when
 * its bound is strictly above them, so whatever the interleaving the surviving set contains every
 * plan of the final top-k and Pareto front; ties are broken by the knob order (pareto_dominates).
 * A worker's copy of the staircase may be stale, but it holds no point the real one lacks a
 * dominator for, so it only prunes less. The counters (evaluated, pruned) depend on the
 * interleaving; the plans do not.
 */
#include "planner/search_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* a dominates b: no worse in memory and time, better in one, or equal in both with a smaller
 * knob key (so exactly one of two identical-looking plans survives, whatever the order). */
static bool pareto_dominates(const struct entry *a, const struct entry *b)
{
    if (a->m > b->m || a->t > b->t) {
        return false;
    }
    if (a->m < b->m || a->t < b->t) {
        return true;
    }
    return key_cmp(a, b) < 0;
}

/* Index of the last of n staircase points with memory <= m (m ascending), or -1; point i's memory
 * figure is at byte offset + i * stride of base (the shared entries and the workers' copies hold
 * it in different records). */
static int staircase_find(const void *base, size_t stride, size_t offset, int n, double m)
{
    const char *first = (const char *)base + offset;
    int lo = 0;
    int hi = n - 1;
    int ans = -1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        double v;
        memcpy(&v, first + (size_t)mid * stride, sizeof(v));
        if (v <= m) {
            ans = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return ans;
}

/* Index of the last staircase point with memory <= m, or -1. Caller holds the lock. */
static int pareto_find(const struct shared *sh, double m)
{
    if (sh->num_pareto == 0) {
        return -1;
    }
    return staircase_find(sh->pareto, sizeof(*sh->pareto), offsetof(struct entry, m),
                          sh->num_pareto, m);
}

/* Insert e unless a point dominates it (*added tells); drop the points it dominates. Caller
 * holds the lock. In the staircase no two points share a memory value (one would dominate the
 * other). False when out of memory. */
bool moe_search_pareto_insert(struct shared *sh, const struct entry *e, bool *added)
{
    *added = false;
    int i = pareto_find(sh, e->m);
    if (i >= 0 && pareto_dominates(&sh->pareto[i], e)) {
        return true;
    }
    int w = 0;
    for (int r = 0; r < sh->num_pareto; r++) {
        if (!pareto_dominates(e, &sh->pareto[r])) {
            sh->pareto[w++] = sh->pareto[r];
        }
    }
    sh->num_pareto = w;
    if (sh->num_pareto == sh->cap_pareto) {
        int cap = sh->cap_pareto > 0 ? 2 * sh->cap_pareto : 64;
        struct entry *p = realloc(sh->pareto, (size_t)cap * sizeof(*p));
        if (p == NULL) {
            return false;
        }
        sh->pareto = p;
        sh->cap_pareto = cap;
    }
    int pos = pareto_find(sh, e->m) + 1;
    memmove(&sh->pareto[pos + 1], &sh->pareto[pos],
            (size_t)(sh->num_pareto - pos) * sizeof(*sh->pareto));
    sh->pareto[pos] = *e;
    sh->num_pareto++;
    atomic_fetch_add(&sh->pareto_version, 1);
    *added = true;
    return true;
}

/* Bring w's copy of the staircase up to date; false when it could not grow (then nothing is
 * pruned by it). */
static bool pareto_refresh(struct worker *w)
{
    struct shared *sh = &w->s->sh;
    if (atomic_load(&sh->pareto_version) == w->psnap_version) {
        return true;
    }
    bool ok = true;
    pthread_mutex_lock(&sh->mu);
    if (sh->num_pareto > w->cap_psnap) {
        int cap = sh->cap_pareto > sh->num_pareto ? sh->cap_pareto : sh->num_pareto;
        struct point *p = realloc(w->psnap, (size_t)cap * sizeof(*p));
        if (p == NULL) {
            ok = false;
        } else {
            w->psnap = p;
            w->cap_psnap = cap;
        }
    }
    if (ok) {
        for (int i = 0; i < sh->num_pareto; i++) {
            w->psnap[i] = (struct point){sh->pareto[i].m, sh->pareto[i].t};
        }
        w->num_psnap = sh->num_pareto;
        w->psnap_version = atomic_load(&sh->pareto_version);
    }
    pthread_mutex_unlock(&sh->mu);
    if (ok) {
        double width = w->s->cap / PARETO_BUCKETS;
        int lo = -1; /* last point with m <= the low edge */
        int hi = -1; /* last point with m < the high edge */
        for (int b = 0; b < PARETO_BUCKETS; b++) {
            double edge_lo = b * width;
            double edge_hi = (b + 1) * width;
            while (lo + 1 < w->num_psnap && w->psnap[lo + 1].m <= edge_lo) {
                lo++;
            }
            while (hi + 1 < w->num_psnap && w->psnap[hi + 1].m < edge_hi) {
                hi++;
            }
            w->env_lo[b] = lo >= 0 ? w->psnap[lo].t : (double)INFINITY;
            w->env_hi[b] = hi >= 0 ? w->psnap[hi].t : (double)INFINITY;
        }
    }
    return ok;
}

/* Could a plan with step time >= lb_t and memory >= lb_m still enter the Pareto front? */
bool moe_search_pareto_open(struct worker *w, double lb_t, double lb_m)
{
    const struct search *s = w->s;
    const struct moe_plan_request *req = s->req;
    if (req->pareto_window <= 0.0) {
        return false;
    }
    if (lb_t > req->pareto_window * atomic_load(&s->sh.t1)) {
        return false;
    }
    if (!pareto_refresh(w)) {
        return true;
    }
    /* The staircase's times fall as memory grows: a point at or below the slice's low edge
     * faster than lb_t beats the candidate; when even the fastest point below the high edge is
     * slower, none can. Otherwise search. */
    double width = s->cap / PARETO_BUCKETS;
    double b = lb_m / width;
    if (b >= 0.0 && b < PARETO_BUCKETS) {
        int bi = (int)b;
        if (w->env_lo[bi] < lb_t && bi * width <= lb_m) { /* the edge as refresh computed it */
            return false;
        }
        if (w->env_hi[bi] > lb_t) {
            return true;
        }
    }
    int i = w->num_psnap > 0 ? staircase_find(w->psnap, sizeof(*w->psnap),
                                              offsetof(struct point, m), w->num_psnap, lb_m)
                             : -1;
    if (i >= 0) {
        const struct point *q = &w->psnap[i];
        /* q beats every plan with t >= lb_t and m >= lb_m when strictly better in one. */
        if (q->t <= lb_t && (q->t < lb_t || q->m < lb_m)) {
            return false;
        }
    }
    return true;
}

/*
 * Can no candidate with step time >= lb_t, memory >= lb_m and option knobs >= kmin (NULL: any)
 * reach the results? Ties with the layout's best are broken by the knob order.
 */
bool moe_search_prune(struct worker *w, double lb_t, double lb_m, const struct moe_plan_okey *kmin)
{
    struct search *s = w->s;
    if (s->req->exhaustive) {
        return false;
    }
    if (lb_m > s->cap) {
        return true;
    }
    if (lb_t <= atomic_load(&s->sh.tk) || lb_t < s->req->rank_time_s) {
        bool beats_best =
            !w->has_best || lb_t < w->best.t ||
            (lb_t == w->best.t && (kmin == NULL || moe_plan_okey_cmp(kmin, &w->best.ok) < 0));
        if (beats_best) {
            return false; /* could be its layout's best, and that layout among the best */
        }
    }
    return !moe_search_pareto_open(w, lb_t, lb_m);
}
