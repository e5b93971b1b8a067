/*
 * The order the search takes its nodes in (planner/search_internal.h): ascending bound, except
 * that a node whose plans are on the Pareto front when it finishes pulls its leaner neighbours
 * (one of tp, cp, pp, ep, etp one value up, or the micro-batch size one value down) ahead of the
 * others, smallest bound first. The front's low-memory points come from such neighbourhoods (more
 * pipeline stages, smaller micro-batches, more TP beside a plan already on it) with bounds far
 * down the order, and every candidate a point dominates is pruned once it is known.
 *
 * Only the order changes: every node is still searched once (its taken flag goes to 2 exactly
 * once, whoever queued it), and the results do not depend on the order (search_front.c).
 */
#include "planner/search_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* The sizes of a node in the order of NODE_DIMS. */
static void node_dims(const struct moe_plan_lkey *k, int v[NODE_DIMS])
{
    v[0] = k->tp;
    v[1] = k->cp;
    v[2] = k->pp;
    v[3] = k->ep;
    v[4] = k->etp;
    v[5] = k->mbs;
}

static size_t node_hash(const struct node_order *o, const int v[NODE_DIMS], int sp)
{
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)sp;
    for (int d = 0; d < NODE_DIMS; d++) {
        h = (h ^ (uint64_t)(uint32_t)v[d]) * 1099511628211ULL;
    }
    return (size_t)(h ^ (h >> 29)) & o->mask;
}

/* Index of the node with these sizes, or -1. */
static long node_find(const struct search *s, const int v[NODE_DIMS], int sp)
{
    const struct node_order *o = &s->order;
    for (size_t i = node_hash(o, v, sp);; i = (i + 1) & o->mask) {
        long j = o->slot[i];
        if (j < 0) {
            return -1;
        }
        int u[NODE_DIMS];
        node_dims(&s->nodes[j].k, u);
        if (s->nodes[j].k.sp == sp && memcmp(u, v, sizeof(u)) == 0) {
            return j;
        }
    }
}

/* Position of x in the ascending values of dimension d, or -(where it would go) - 1; dim_add
 * inserts it (moe_search_order_init, before the search: the search only reads the values). */
static int dim_find(const struct node_order *o, int d, int x)
{
    int i = o->num_vals[d];
    while (i > 0 && o->vals[d][i - 1] > x) {
        i--;
    }
    return i > 0 && o->vals[d][i - 1] == x ? i - 1 : -i - 1; /* -(insertion point) - 1 */
}

static void dim_add(struct node_order *o, int d, int x)
{
    int at = dim_find(o, d, x);
    int n = o->num_vals[d];
    if (at >= 0 || n == MAX_DIV) {
        return; /* known, or more values than size_values gives: no neighbours beyond */
    }
    int i = -at - 1;
    memmove(&o->vals[d][i + 1], &o->vals[d][i], (size_t)(n - i) * sizeof(int));
    o->vals[d][i] = x;
    o->num_vals[d] = n + 1;
}

/* After the nodes are sorted: the map from sizes to node, each dimension's values, the queue. */
enum moe_status moe_search_order_init(struct search *s)
{
    struct node_order *o = &s->order;
    long n = s->num_nodes;
    size_t slots = 1024;
    while (slots < (size_t)n * 2) {
        slots *= 2;
    }
    o->mask = slots - 1;
    o->slot = malloc(slots * sizeof(*o->slot));
    o->taken_mem = calloc((size_t)n, sizeof(*o->taken));
    o->taken = o->taken_mem;
    o->queue = malloc((size_t)n * sizeof(*o->queue));
    if (o->slot == NULL || o->taken == NULL || o->queue == NULL) {
        return MOE_ERR_NOMEM;
    }
    memset(o->slot, 0xff, slots * sizeof(*o->slot));
    for (long j = 0; j < n; j++) {
        int v[NODE_DIMS];
        node_dims(&s->nodes[j].k, v);
        size_t i = node_hash(o, v, s->nodes[j].k.sp);
        while (o->slot[i] >= 0) {
            i = (i + 1) & o->mask;
        }
        o->slot[i] = j;
        for (int d = 0; d < NODE_DIMS; d++) {
            dim_add(o, d, v[d]);
        }
    }
    o->head = 0;
    o->tail = 0;
    return MOE_OK;
}

void moe_search_order_free(struct node_order *o)
{
    free(o->slot);
    free(o->taken_mem);
    free(o->queue);
}

/*
 * nd has finished with plans on the front (w->on_front): when one is still there, queue its
 * untaken leaner neighbours that could still reach the results (bound inside the Pareto window,
 * static memory under the cap), the queue kept in node order (ascending bound).
 */
void moe_search_order_pull(struct worker *w, const struct node *nd)
{
    struct search *s = w->s;
    struct node_order *o = &s->order;
    struct shared *sh = &s->sh;
    pthread_mutex_lock(&sh->mu);
    bool still = false;
    for (int i = 0; i < sh->num_pareto && !still; i++) {
        const struct moe_plan_lkey *a = &sh->pareto[i].lk;
        still = a->tp == nd->k.tp && a->cp == nd->k.cp && a->pp == nd->k.pp && a->ep == nd->k.ep &&
                a->etp == nd->k.etp && a->mbs == nd->k.mbs && a->sp == nd->k.sp;
    }
    double reach = s->req->pareto_window * atomic_load(&sh->t1);
    int v[NODE_DIMS];
    node_dims(&nd->k, v);
    for (int d = 0; d < NODE_DIMS && still; d++) {
        int at = dim_find(o, d, v[d]);
        int j = at + (d == NODE_DIMS - 1 ? -1 : 1); /* leaner: a larger size, a smaller mbs */
        if (at < 0 || j < 0 || j >= o->num_vals[d]) {
            continue;
        }
        int u[NODE_DIMS];
        memcpy(u, v, sizeof(u));
        u[d] = o->vals[d][j];
        for (int sp = 0; sp < 2; sp++) {
            long q = node_find(s, u, sp);
            if (q < 0 || s->nodes[q].lb > reach || s->nodes[q].static_lb > s->cap) {
                continue;
            }
            unsigned char free_node = 0;
            if (atomic_compare_exchange_strong(&o->taken[q], &free_node, 1)) {
                long at_q = o->tail++;
                while (at_q > o->head && o->queue[at_q - 1] > q) {
                    o->queue[at_q] = o->queue[at_q - 1];
                    at_q--;
                }
                o->queue[at_q] = q;
            }
        }
    }
    pthread_mutex_unlock(&sh->mu);
}

/* The next node to search: a queued one, else the next in bound order; -1 when none is left. */
long moe_search_order_take(struct search *s)
{
    struct node_order *o = &s->order;
    struct shared *sh = &s->sh;
    for (;;) {
        long q = -1;
        pthread_mutex_lock(&sh->mu);
        if (o->head < o->tail) {
            q = o->queue[o->head++];
        }
        pthread_mutex_unlock(&sh->mu);
        if (q < 0) {
            break;
        }
        if (atomic_exchange(&o->taken[q], 2) != 2) {
            return q;
        }
    }
    for (;;) {
        long i = atomic_fetch_add(&sh->next, 1);
        if (i >= s->num_nodes) {
            return -1;
        }
        if (atomic_exchange(&o->taken[i], 2) != 2) {
            return i;
        }
    }
}

int moe_search_node_cmp(const void *pa, const void *pb)
{
    const struct node *a = pa;
    const struct node *b = pb;
    if (a->lb != b->lb) {
        return a->lb < b->lb ? -1 : 1;
    }
    return moe_plan_lkey_cmp(&a->k, &b->k);
}

int moe_search_node_mem_cmp(const void *pa, const void *pb)
{
    const struct node *a = pa;
    const struct node *b = pb;
    if (a->static_lb != b->static_lb) {
        return a->static_lb < b->static_lb ? -1 : 1;
    }
    return moe_plan_lkey_cmp(&a->k, &b->k);
}
