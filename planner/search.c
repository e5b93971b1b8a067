/*
 * The planner's search (planner/search.h): enumerate layouts best-first by a step-time lower
 * bound, and for each layout every option group, with exact pruning (memory and time lower bounds,
 * dominance, equivalence), on all cores.
 *
 * Structure. Sizes (tp, cp, pp, sequence parallelism, ep, etp) are generated and dropped when no
 * placement of the layers fits their weights, gradients and optimizer state; with each micro-batch
 * size they form the search's nodes, each with the bound of its best vpp and placement
 * (bound.c), sorted ascending. Worker threads take nodes in that order, except for the leaner
 * neighbours of nodes with plans on the Pareto front, which go first (struct node_order); for
 * each vpp and placement a layout is built, resolved (moe_layout_resolve) and searched:
 *   group    recipe x optimizer (distributed, CPU offload) x dispatcher x grouped GEMM x EP
 * overlap; its dominator d (no recompute, no activation offload, TP overlap on, full-iteration CUDA
 * graph) is predicted first; recompute every value r, with no activation offload; offload  every
 * value f under each r; X        the other TP-overlap and CUDA-graph values of each evaluated (r,
 * f).
 *
 * The dominator bound. For every candidate c of a group, the per-pass time of each layer, as
 * model/cost.c composes it, is at least d's: recompute and offload copies only add GPU time, TP
 * overlap off keeps more TP traffic, CUDA graphs other than full iteration keep host launches and
 * the dropless sync, which only add (a pass costs max(GPU, host) + sync); with 1F1B EP overlap
 * more recompute can hide more EP traffic in one direction, but the pass pair's sum still grows by
 * recompute * (1 - ep_overlap_eff * (1 - loss)) >= 0. The closed-form schedule grows with every
 * rank's sum, so T_pipe(c) >= T_pipe(d). The DP tail of a rank may shrink when its passes grow
 * (more to overlap with), but never below the rank's optimizer time, which c and d share; hence
 *   T(c) >= T_pipe(d) + max_p opt_p + fixed >= T(d) - dp_comm(d),
 * where dp_comm(d) is the exposed DP time d's prediction reports. The same holds for (r, none, X*)
 * over (r, f, X) and for (r, f, X*) over (r, f, X). When dp_comm is 0 the dominated candidates are
 * never faster, and sort after the dominator on ties (space.c orders dominant values first), so
 * they are skipped without evaluation.
 *
 * Fine-grained offload sets are bounded more tightly from their row's prediction without offload
 * (offload_time_bound: the copy is priced after the EP pairing, so each pass's growth is exact),
 * before their memory is evaluated.
 *
 * Sharing. Memory depends on few of a group's options (moe_mem_opt_key), so groups that differ
 * only in grouped GEMM, EP overlap or a dispatcher with the same buffers read one figure per
 * recompute and offload value from the layout's memo; activation views, recompute terms and
 * per-rank recompute sums are cached per layout the same way.
 *
 * Exactness across threads: pruning reads shared thresholds that only tighten, and a candidate is
 * dropped only when its bound is strictly above them, so whatever the interleaving the surviving
 * set contains every plan of the final top-k and Pareto front; ties are broken by the knob order.
 * The counters (evaluated, pruned) depend on the interleaving; the plans do not.
 */
#define _GNU_SOURCE 1 /* for sched_getaffinity / CPU_COUNT (falls back to sysconf) */
#include "planner/search.h"

#include "model/compute.h"
#include "model/cost.h"
#include "model/memory.h"
#include "planner/bound.h"
#include "planner/space.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define GIB            1073741824.0
#define PARETO_BUCKETS 1024
#define MAX_THREADS    64
#define VALID_LOG2     16   /* hash validity cache (per layer count): 64k entries per thread */
#define STATIC_SLOTS   4096 /* static-memory bound cache per thread */
#define MAX_PLACEMENTS 4096
#define MAX_DIV        256

/* Compact record of one evaluated plan. */
struct entry {
    struct moe_plan_lkey lk;
    struct moe_plan_okey ok;
    double t; /* closed-form step time */
    double m; /* worst-stage memory, bytes */
};

static int key_cmp(const struct entry *a, const struct entry *b)
{
    int c = moe_plan_lkey_cmp(&a->lk, &b->lk);
    return c != 0 ? c : moe_plan_okey_cmp(&a->ok, &b->ok);
}

static int entry_cmp(const struct entry *a, const struct entry *b)
{
    if (a->t != b->t) {
        return a->t < b->t ? -1 : 1;
    }
    return key_cmp(a, b);
}

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

/* A staircase point in a worker's copy (pareto_open reads only these). */
struct point {
    double m, t;
};

/* Search node: sizes and micro-batch size; vpp and placement are enumerated inside. */
struct ptable;

struct node {
    struct moe_plan_lkey k; /* vpp, place, first, last unset */
    int key;                /* index into the per-layer bound table */
    double lb;              /* bound over every vpp and placement (s) */
    double static_lb;       /* memory bound over every placement (bytes) */
};

struct layer_key {
    int tp, cp, ep, etp, mbs, sp;
    double working_lb;           /* memory every stage holds beyond its static part (bytes) */
    bool needed;                 /* referenced by a node that can fit */
    struct moe_plan_kind_lb lb;  /* least over every option group */
    struct moe_plan_kind_lb lb0; /* the same without 1F1B EP overlap (pp > 1, vpp == 1) */
};

#define TERMS_SLOTS 64 /* per-thread cache of layer terms, by key index */

struct terms_slot {
    long key;
    struct moe_plan_layer_terms t;
};

struct shared {
    pthread_mutex_t mu;
    struct entry *top; /* [keep] best plan of the best layouts, sorted */
    int num_top, keep;
    struct entry *pareto; /* staircase: memory ascending, time descending */
    int num_pareto, cap_pareto;
    atomic_long pareto_version; /* bumped by every change of the staircase (under mu) */
    _Atomic double t1;          /* fastest fitting step time so far */
    _Atomic double tk;          /* keep-th best layout time (INFINITY until keep layouts) */
    _Atomic double best_m;      /* closest pass: least memory so far */
    bool has_closest;
    struct entry closest;
    atomic_long next;   /* next work item of the running phase (in order) */
    atomic_long done;   /* nodes finished (progress) */
    atomic_bool failed; /* out of memory in a worker */
    atomic_long violations;
    atomic_long faster; /* layouts whose best beats req->rank_time_s */
};

/*
 * Search order of the nodes: ascending bound, except that a node whose plans are on the Pareto
 * front when it finishes pulls its leaner neighbours (one of tp, cp, pp, ep, etp one value up,
 * or the micro-batch size one value down) ahead of the others, smallest bound first. The front's
 * low-memory points come from such neighbourhoods (more pipeline stages, smaller micro-batches,
 * more TP beside a plan already on it) with bounds far down the order, and every candidate a
 * point dominates is pruned once it is known. Only the order changes: every node is still
 * searched once, and the results do not depend on the order.
 */
#define NODE_DIMS 6 /* tp, cp, pp, ep, etp, mbs */
struct node_order {
    atomic_uchar *taken; /* [num_nodes] 0 free, 1 queued, 2 taken by a worker */
    void *taken_mem;     /* its allocation */
    long *slot;          /* hash of (sizes, mbs, sp) -> node index, -1 when empty */
    size_t mask;
    int vals[NODE_DIMS][MAX_DIV]; /* each dimension's values, ascending */
    int num_vals[NODE_DIMS];
    long *queue; /* [num_nodes] pulled-ahead nodes, taken from the head (under sh.mu) */
    long head, tail;
};

struct search {
    const struct moe_plan_request *req;
    struct moe_plan_space sp;
    struct moe_plan_bound_model bm;
    struct moe_cost_prep prep;
    double cap;      /* per-GPU memory cap, bytes */
    double host_cap; /* host offload cap per GPU, bytes */
    double ctx_bytes;
    struct layer_key *keys;
    long num_keys;
    long *key_order; /* [num_keys] the key phase's order (key_order_init) */
    struct node *nodes;
    long num_nodes;
    struct ptable *ptables; /* [num_ptables] placements per (pp, vpp) */
    int num_ptables;
    int fine_order[MOE_PLAN_MAX_OFF]; /* fine-grained offload values, most modules first */
    int num_fine_order;
    int rc_all;      /* full-recompute values with every layer count (option_space_size) */
    double off_size; /* offload values, every layer count of whole-layer offload counted */
    double dom_size; /* values settled by dominance: each doubles the space */
    struct node_order order;
    struct shared sh;
};

/* The factors of option_space_size that do not depend on the layout. */
static void space_sizes_init(struct search *s)
{
    const struct moe_plan_space *sp = &s->sp;
    const struct moe_model_cfg *cfg = s->req->cfg;
    s->rc_all = 0;
    for (int i = 0; i < sp->num_rc; i++) {
        s->rc_all += sp->rcs[i].rc == MOE_RECOMPUTE_FULL && sp->rcs[i].layers == 0;
    }
    s->off_size = 0.0;
    for (int i = 0; i < sp->num_off; i++) {
        s->off_size +=
            sp->offs[i].off == 2 && sp->offs[i].layers == 0 ? (double)(cfg->num_layers - 1) : 1.0;
    }
    /* FP8 parameter gather and the two DP overlaps are settled by dominance and delay-wgrad
     * follows the EP overlap: each doubles the space it stands for. */
    s->dom_size = (sp->fp8_param_gather_fixed ? 1.0 : 2.0) * (sp->overlap_grad_fixed ? 1.0 : 2.0) *
                  (sp->overlap_param_fixed ? 1.0 : 2.0) *
                  (moe_plan_space_fixed(sp, MOE_PK_EP_OVERLAP) ? 1.0 : 2.0);
}

static int popcount8(unsigned v)
{
    int n = 0;
    for (; v != 0u; v &= v - 1u) {
        n++;
    }
    return n;
}

/* The fine-grained offload values by module count, descending (ties in knob order). */
static void fine_order_init(struct search *s)
{
    const struct moe_plan_space *sp = &s->sp;
    s->num_fine_order = 0;
    for (int c = 8; c >= 1; c--) {
        for (int fi = 0; fi < sp->num_off; fi++) {
            if (sp->offs[fi].off == 1 && popcount8(sp->offs[fi].mods) == c) {
                s->fine_order[s->num_fine_order++] = fi;
            }
        }
    }
}

struct counters {
    double enumerated, pruned_memory, pruned_time, invalid, evaluated, mem_evaluated;
    long layouts;
    long validity_mismatches; /* pairwise validity accepted what a full resolve refused */
    long memory_mismatches;   /* memory_of disagreed with a prediction's memory */
};

/* Layer activations after recompute and offload of one option set (layer_set). */
#define VIEW_SLOTS 4096
struct view_slot {
    long serial; /* view_serial */
    uint64_t key;
    struct moe_act_bytes dense, moe;
    double copy_load; /* load factor of copy_s (NAN: none yet) */
    double copy_s[2]; /* offload copy per dense / MoE layer pass (offload_time_bound) */
};

/* Memory of one option set on the current layout (memory_of); groups that differ only in options
 * the memory model does not read (moe_mem_opt_key) share it. */
#define MEM_SLOTS 4096
struct memo {
    double total;  /* worst stage */
    double host;   /* its host offload */
    double stat;   /* its weights + gradients + optimizer state */
    double act[4]; /* per-kind activation totals after recompute / after offload (dedupe key) */
};
struct mem_slot {
    long serial; /* layout */
    struct moe_mem_opt_key key;
    struct memo m;
};

/* Per-rank recompute time of one recompute value, summed over the ranks (rc_bound). */
struct rc_sums {
    unsigned stamp;
    double sum, min, max;
};

struct static_slot {
    int key[12];
    bool used;
    double bytes[MOE_NUM_RECIPES][MOE_PLAN_MAX_STATICS]; /* stage static memory per group */
};

/* Time-only knob values of the current layout (TP overlap x CUDA graph). */
struct xlist {
    int n;
    int dom; /* index of the dominant value */
    uint8_t tp[2 * MOE_PLAN_MAX_GRAPHS];
    uint8_t graph[2 * MOE_PLAN_MAX_GRAPHS];
};

#define MAX_X (2 * MOE_PLAN_MAX_GRAPHS)

/*
 * Validity verdicts by list index, stamped by layout class (see space.h for the decomposition):
 * g[group], r[group][rc], f[group][off], x[group][x] and the class-wide pairs rf, rx, fx. An entry
 * holds stamp << 1 | verdict and counts only when its stamp is the current one.
 */
struct vmemo {
    uint64_t ckey;
    uint32_t stamp;
    int num_groups;
    uint32_t *g, *r, *f, *x, *rf, *rx, *fx;
};

struct worker {
    struct search *s;
    struct moe_plan_valid_cache *vc;
    struct vmemo vm;
    int gidx;               /* index of the current option group */
    double leaf;            /* candidates one (recompute, offload) value pair stands for */
    double xunit;           /* candidates one time-only value stands for */
    double gsize;           /* candidates of one option group */
    double fsize;           /* offload values other than the first (layer counts expanded) */
    int group_ri, group_gi; /* its recipe and grouped-GEMM indices */
    /* The row whose block-recompute layer counts are being evaluated (eval_block_counts bounds
     * each count from its dominator); blk_ri < 0: none */
    const struct moe_plan_okey *blk_dom;
    const struct moe_prediction *blk_pd;
    int blk_ri;
    const struct node *node; /* node of the current layout */
    long layout_serial;      /* counts layouts searched (invalidates per-layout caches) */
    long view_serial;        /* counts changes of what the activation views read */
    double view_key[7];      /* that, for the current layout (views_for_layout) */
    /* moe_mem_layer_set_init without recompute or offload, per recipe (the only group option
     * the views read), and the view_serial each was computed for */
    long set0_serial[MOE_NUM_RECIPES];
    struct moe_mem_layer_set set0[MOE_NUM_RECIPES];
    struct moe_mem_layer_set set; /* layer_set's last set: view_serial, recipe, view keys */
    long set_serial;
    int set_recipe;
    uint64_t set_key[2];
    struct moe_prediction *fine_src; /* [MOE_PLAN_MAX_OFF + 1] search_fine's bound sources */
    struct moe_layout scratch;       /* placements built for their bound before resolving */
    int (*kinds)[MOE_PLAN_KINDS];    /* [MOE_MAX_PP_CHUNKS] decoder layers of each kind per rank */
    unsigned grow_ok;                /* dominance_slack's kinds with g_k >= 0 */
    int *mtp;                        /* [MOE_MAX_PP_CHUNKS] MTP layers per rank */
    /* Recompute terms and per-rank sums, one slot per grouped-GEMM index (the groups alternate
     * between the two). */
    long rc_key[2];                 /* key index, recipe and grouped of rc_terms; -1 none */
    long rcb_serial[2], rcb_key[2]; /* layout and rc_key of the cached per-rank recompute sums */
    unsigned rcb_stamp[2];
    struct rc_sums *rcb;     /* [2][MOE_PLAN_MAX_RC] */
    struct view_slot *views; /* [VIEW_SLOTS] */
    struct mem_slot *mems;   /* [MEM_SLOTS] */
    struct moe_plan_rc_terms rc_terms[2];
    struct moe_plan_okey gk; /* its knobs */
    void *ws;
    size_t ws_bytes;
    struct placement *pl; /* [MAX_PLACEMENTS] */
    struct moe_layout lay;
    struct moe_plan_lkey lk;
    struct moe_stage_contents *sc; /* [MOE_MAX_PP_CHUNKS] */
    struct moe_gpu_params *gp;
    struct static_slot *statics; /* [STATIC_SLOTS] */
    struct xlist xl;
    struct terms_slot *terms; /* [TERMS_SLOTS] */
    const struct moe_plan_layer_terms *cur_terms;
    double static_ps[MOE_NUM_RECIPES][MOE_PLAN_MAX_STATICS]; /* per group, bytes, context incl. */
    double layout_lb;
    double load;
    bool has_stats;
    struct moe_load_stats stats;
    bool has_best; /* best fitting plan of the current layout */
    bool on_front; /* a plan of the current node entered the Pareto front */
    /* The worker's copy of the staircase for pareto_open, refreshed when pareto_version moves:
     * the test runs millions of times per search and took the lock each time. A stale copy
     * holds no point the real one lacks a dominator for, so it only prunes less. */
    struct point *psnap;
    int num_psnap, cap_psnap;
    long psnap_version;
    /* Over PARETO_BUCKETS equal slices of [0, cap) of memory: the step time of the last copied
     * point with memory <= the slice's low edge (env_lo) and < its high edge (env_hi), INFINITY
     * when none, so that most tests need no search of the copy (pareto_open). */
    double env_lo[PARETO_BUCKETS], env_hi[PARETO_BUCKETS];
    struct entry best;
    struct counters c;
    atomic_long shown_evaluated; /* c.evaluated after the last work item, for the progress bar */
    long resolves;
    struct moe_plan_layer_terms *kterms; /* [2] key phase: the last full terms, the current key's */
    int kattn[5];                        /* key_attn of kterms[0] */
    bool kattn_valid;
};

/* ------------------------------------------------------------------------------------------ */
/* Shared state: thresholds, top list, Pareto staircase                                        */

static void atomic_min_double(_Atomic double *a, double v)
{
    double cur = atomic_load(a);
    while (v < cur && !atomic_compare_exchange_weak(a, &cur, v)) {
    }
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
static bool pareto_insert(struct shared *sh, const struct entry *e, bool *added)
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
static bool pareto_open(struct worker *w, double lb_t, double lb_m)
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
static bool prune(struct worker *w, double lb_t, double lb_m, const struct moe_plan_okey *kmin)
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
    return !pareto_open(w, lb_t, lb_m);
}

static void offer_top(struct search *s, const struct entry *e)
{
    struct shared *sh = &s->sh;
    pthread_mutex_lock(&sh->mu);
    int n = sh->num_top;
    if (n < sh->keep || entry_cmp(e, &sh->top[n - 1]) < 0) {
        int pos = n < sh->keep ? n : n - 1;
        while (pos > 0 && entry_cmp(e, &sh->top[pos - 1]) < 0) {
            sh->top[pos] = sh->top[pos - 1];
            pos--;
        }
        sh->top[pos] = *e;
        sh->num_top = n < sh->keep ? n + 1 : n;
        if (sh->num_top == sh->keep) {
            atomic_store(&sh->tk, sh->top[sh->keep - 1].t);
        }
    }
    pthread_mutex_unlock(&sh->mu);
}

static bool valid_full(struct worker *w, const struct moe_plan_okey *k);

/* A fitting plan the cached validity accepts was evaluated: before it can change a result it is
 * checked once more with a full resolve. */
static void offer_fit(struct worker *w, const struct entry *e)
{
    struct search *s = w->s;
    bool better = !w->has_best || entry_cmp(e, &w->best) < 0;
    bool pareto = s->req->pareto_window > 0.0 && pareto_open(w, e->t, e->m);
    if (!better && !pareto) {
        return;
    }
    if (!valid_full(w, &e->ok)) {
        w->c.validity_mismatches++;
        return;
    }
    if (better) {
        w->best = *e;
        w->has_best = true;
    }
    atomic_min_double(&s->sh.t1, e->t);
    if (pareto) {
        bool added;
        pthread_mutex_lock(&s->sh.mu);
        if (!pareto_insert(&s->sh, e, &added)) {
            atomic_store(&s->sh.failed, true);
        }
        pthread_mutex_unlock(&s->sh.mu);
        w->on_front = w->on_front || added;
    }
}

/* Closest pass: a valid plan with less memory than any seen. */
static void offer_closest(struct worker *w, const struct entry *e)
{
    struct shared *sh = &w->s->sh;
    pthread_mutex_lock(&sh->mu);
    if (!sh->has_closest || e->m < sh->closest.m ||
        (e->m == sh->closest.m && key_cmp(e, &sh->closest) < 0)) {
        sh->closest = *e;
        sh->has_closest = true;
        atomic_store(&sh->best_m, e->m);
    }
    pthread_mutex_unlock(&sh->mu);
}

/* ------------------------------------------------------------------------------------------ */
/* Evaluation                                                                                   */

static bool contents_equal(const struct moe_stage_contents *a, const struct moe_stage_contents *b)
{
    return a->num_dense == b->num_dense && a->num_moe == b->num_moe &&
           a->num_windowed == b->num_windowed && a->num_mtp == b->num_mtp &&
           a->has_embedding == b->has_embedding && a->has_loss == b->has_loss &&
           a->has_output_weight == b->has_output_weight && a->num_chunks == b->num_chunks &&
           a->max_chunk_layers == b->max_chunk_layers;
}

/* Memory of the current layout with these options: moe_mem_stage_with over the ranks, the worst
 * taken as moe_cost_predict takes it (the first rank with the largest total). A middle rank with
 * the previous rank's contents holds no more micro-batches, so it cannot be larger. */
/*
 * The activation views moe_mem_layer_set_init computes (memory.h). The set without recompute or
 * offload (every view alike, and whatever else the model derives per layer, such as the backward
 * working set) is cached per layout and group: it does not depend on recompute or offload; the
 * views after selective recompute per layout, group and module set (they do not depend on
 * offload); only the views after offload are computed each time. A prediction's memory is checked
 * against this (memory_mismatches).
 */
/* The layer views of opt after `apply` (recompute, or recompute and offload), from the layout's
 * cache: keyed by the options moe_mem_layer_activations reads (model/memory.c: recipe, selective
 * recompute modules, offload modules; FP32 training is the run's), so option groups that differ
 * elsewhere share them. */
static uint64_t view_key(const struct moe_options *opt, bool off)
{
    bool has_rc = opt->recompute == MOE_RECOMPUTE_SELECTIVE;
    return (uint64_t)opt->recipe << 48 | (uint64_t)has_rc << 47 | (uint64_t)off << 46 |
           (uint64_t)(has_rc ? opt->recompute_modules & 0x3fffffffu : 0u) << 16 |
           (uint64_t)(off ? opt->offload_modules & 0xffffu : 0u);
}

static struct view_slot *view_of(struct worker *w, const struct moe_options *opt, bool off)
{
    uint64_t key = view_key(opt, off);
    uint64_t h = (key ^ (uint64_t)w->view_serial * 0x9e3779b97f4a7c15ULL) * 0xbf58476d1ce4e5b9ULL;
    struct view_slot *v = &w->views[(h >> 40) & (VIEW_SLOTS - 1)];
    if (v->serial != w->view_serial || v->key != key) {
        const struct moe_model_cfg *cfg = w->s->req->cfg;
        unsigned apply = MOE_MEM_APPLY_RECOMPUTE | (off ? MOE_MEM_APPLY_OFFLOAD : 0u);
        moe_mem_layer_activations(cfg, &w->lay, opt, false, w->load, apply, &v->dense);
        moe_mem_layer_activations(cfg, &w->lay, opt, true, w->load, apply, &v->moe);
        v->serial = w->view_serial;
        v->key = key;
        v->copy_load = NAN;
    }
    return v;
}

/*
 * The layer set of opt in w->set (returned), which keeps what it was last built for: the views
 * without options (per view_serial and recipe), after recompute and after offload (by view key);
 * memory_of's consecutive misses mostly differ in the offload set alone.
 */
static const struct moe_mem_layer_set *layer_set(struct worker *w, const struct moe_options *opt)
{
    const struct moe_model_cfg *cfg = w->s->req->cfg;
    const struct moe_layout *lay = &w->lay;
    struct moe_mem_layer_set *set = &w->set;
    struct moe_mem_layer_set *set0 = &w->set0[opt->recipe];
    if (w->set0_serial[opt->recipe] != w->view_serial) {
        struct moe_options o0 = *opt;
        o0.recompute = MOE_RECOMPUTE_NONE;
        o0.fine_grained_offload = false;
        moe_mem_layer_set_init(cfg, lay, &o0, w->load, set0);
        w->set0_serial[opt->recipe] = w->view_serial;
    }
    if (w->set_serial != w->view_serial || w->set_recipe != (int)opt->recipe) {
        *set = *set0;
        w->set_serial = w->view_serial;
        w->set_recipe = (int)opt->recipe;
        w->set_key[0] = w->set_key[1] = UINT64_MAX;
    }
    /* [1]: after recompute, the same for every offload value of a recompute value */
    bool has_rc = opt->recompute == MOE_RECOMPUTE_SELECTIVE;
    uint64_t k1 = has_rc ? view_key(opt, false) : UINT64_MAX - 1;
    if (w->set_key[0] != k1) {
        if (has_rc) {
            const struct view_slot *v = view_of(w, opt, false);
            set->dense[1] = v->dense;
            set->moe[1] = v->moe;
        } else {
            set->dense[1] = set0->dense[1];
            set->moe[1] = set0->moe[1];
        }
        w->set_key[0] = k1;
        w->set_key[1] = UINT64_MAX;
    }
    /* [2]: after recompute and offload */
    uint64_t k2 = opt->fine_grained_offload ? view_key(opt, true) : UINT64_MAX - 1;
    if (w->set_key[1] != k2) {
        if (opt->fine_grained_offload) {
            const struct view_slot *v = view_of(w, opt, true);
            set->dense[2] = v->dense;
            set->moe[2] = v->moe;
        } else {
            set->dense[2] = set->dense[1];
            set->moe[2] = set->moe[1];
        }
        w->set_key[1] = k2;
    }
    return set;
}

static void memory_of(struct worker *w, const struct moe_options *opt, struct memo *out)
{
    const struct search *s = w->s;
    const struct moe_layout *lay = &w->lay;
    struct moe_mem_opt_key key;
    memset(&key, 0, sizeof(key));
    moe_mem_opt_key(s->req->cl, opt, &key);
    uint64_t h = (key.bits[0] * 0x9e3779b97f4a7c15ULL) ^ (key.bits[1] * 0xbf58476d1ce4e5b9ULL) ^
                 (uint64_t)(key.optimizer_offload_fraction * 1024.0);
    struct mem_slot *slot = &w->mems[(h ^ h >> 29) & (MEM_SLOTS - 1)];
    if (slot->serial == w->layout_serial && memcmp(&slot->key, &key, sizeof(key)) == 0) {
        *out = slot->m;
        return;
    }
    const struct moe_mem_layer_set *set = layer_set(w, opt);
    out->total = -1.0;
    out->host = 0.0;
    out->stat = 0.0;
    for (int p = 0; p < lay->pp; p++) {
        if (p > 1 && p < lay->pp - 1 && contents_equal(&w->sc[p], &w->sc[p - 1])) {
            continue;
        }
        struct moe_mem_bytes mb;
        moe_mem_stage_with(s->req->cfg, s->req->cl, lay, opt, p, &w->sc[p], &w->gp[p], set, &mb);
        if (mb.total > out->total) {
            out->total = mb.total;
            out->host = mb.host_offload;
            out->stat = mb.weights + mb.grads + mb.optimizer;
        }
    }
    out->act[0] = set->dense[1].total;
    out->act[1] = set->dense[2].total;
    out->act[2] = set->moe[1].total;
    out->act[3] = set->moe[2].total;
    w->c.mem_evaluated++;
    slot->serial = w->layout_serial;
    slot->key = key;
    slot->m = *out;
}

static bool memo_fits(const struct search *s, const struct memo *m)
{
    return m->total <= s->cap && m->host <= s->host_cap;
}

static bool fits_pred(const struct search *s, const struct moe_prediction *p)
{
    return p->fits && p->mem.total <= s->cap;
}

static bool predict(struct worker *w, const struct moe_options *opt, struct moe_prediction *out)
{
    enum moe_status st = moe_cost_predict_prepared(
        &w->s->prep, w->s->req->cl, &w->lay, opt, w->has_stats ? &w->stats : NULL,
        MOE_SCHED_CLOSED_FORM, w->ws, w->ws_bytes, out, NULL);
    w->c.evaluated++;
    return st == MOE_OK;
}

/* A valid candidate's prediction must respect the bounds the search used on its layout. */
static void check_bound(struct worker *w, const struct moe_prediction *out)
{
    if (out->step_time_s < w->layout_lb * (1.0 - 1e-9)) {
        atomic_fetch_add(&w->s->sh.violations, 1);
    }
}

/* Every bound a candidate was kept or skipped with must hold for it; counted when it does not. */
static void check_lb(struct worker *w, double lb, const struct moe_prediction *p)
{
    if (p->step_time_s < lb * (1.0 - 1e-9)) {
        atomic_fetch_add(&w->s->sh.violations, 1);
    }
}

/* Record a valid evaluated plan. */
static void record(struct worker *w, const struct moe_plan_okey *k, const struct moe_prediction *p)
{
    check_bound(w, p);
    if (fits_pred(w->s, p)) {
        struct entry e = {w->lk, *k, p->step_time_s, p->mem.total};
        offer_fit(w, &e);
    }
}

/* Class of the layout for option validity (see space.h). */
static uint64_t valid_class(const struct search *s, const struct moe_layout *lay)
{
    const struct moe_plan_request *req = s->req;
    uint64_t ep =
        req->opt.moe_hot_expert_replicas > 0 ? (uint64_t)lay->ep : (uint64_t)(lay->ep > 1);
    uint64_t per_rank = (uint64_t)(req->cfg->num_layers / (lay->pp > 0 ? lay->pp : 1));
    return (uint64_t)(lay->sequence_parallel ? 1 : 0) | ep << 1 | (uint64_t)(lay->pp > 1) << 21 |
           (uint64_t)(lay->vpp > 1) << 22 | per_rank << 23;
}

/* Start stamping verdicts for the current layout's class. */
static void vmemo_layout(struct worker *w)
{
    uint64_t ck = valid_class(w->s, &w->lay);
    if (ck == w->vm.ckey && w->vm.stamp != 0) {
        return;
    }
    w->vm.ckey = ck;
    w->vm.stamp++;
    if (w->vm.stamp >= (1u << 30)) {
        size_t ng = (size_t)w->vm.num_groups;
        memset(w->vm.g, 0, ng * sizeof(uint32_t));
        memset(w->vm.r, 0, ng * MOE_PLAN_MAX_RC * sizeof(uint32_t));
        memset(w->vm.f, 0, ng * MOE_PLAN_MAX_OFF * sizeof(uint32_t));
        memset(w->vm.x, 0, ng * MAX_X * sizeof(uint32_t));
        memset(w->vm.rf, 0, (size_t)MOE_PLAN_MAX_RC * MOE_PLAN_MAX_OFF * sizeof(uint32_t));
        memset(w->vm.rx, 0, (size_t)MOE_PLAN_MAX_RC * MAX_X * sizeof(uint32_t));
        memset(w->vm.fx, 0, (size_t)MOE_PLAN_MAX_OFF * MAX_X * sizeof(uint32_t));
        w->vm.stamp = 1;
    }
}

/* Verdict of okey t from slot e (computed by a full resolve when not yet stamped). */
static bool memo_verdict(struct worker *w, uint32_t *e, const struct moe_plan_okey *t)
{
    if ((*e >> 1) == w->vm.stamp) {
        return (*e & 1u) != 0;
    }
    w->resolves++;
    bool v = moe_plan_valid_full(&w->s->sp, &w->lay, t);
    *e = w->vm.stamp << 1 | (v ? 1u : 0u);
    return v;
}

static void neutral_parts(const struct moe_plan_space *sp,
                          struct moe_plan_okey *t,
                          bool keep_rc,
                          bool keep_off,
                          bool keep_x)
{
    if (!keep_rc) {
        t->rc = MOE_RECOMPUTE_NONE;
        t->rc_method = 0;
        t->rc_mods = 0;
        t->rc_layers = 0;
    }
    if (!keep_off) {
        t->off = 0;
        t->off_mods = 0;
        t->off_layers = 0;
    }
    if (!keep_x) {
        t->tp_overlap = 0;
        t->graph = (uint8_t)sp->graph_neutral;
    }
}

/*
 * Is okey k (of the current group) valid? Each part (recompute, offload, time-only knobs) with the
 * others neutral, then each pair of them (space.h). "Every layer count" values are looked up per
 * count in the hash cache; their pairs use count 1 (no rule ties a count to another part).
 */
static bool valid(struct worker *w, const struct moe_plan_okey *k)
{
    const struct moe_plan_space *sp = &w->s->sp;
    int gi = w->gidx;
    struct moe_plan_okey t = *k;
    neutral_parts(sp, &t, false, false, false);
    if (!memo_verdict(w, &w->vm.g[gi], &t)) {
        return false;
    }
    bool has_rc = k->rc != MOE_RECOMPUTE_NONE;
    bool has_off = k->off != 0;
    bool has_x = k->tp_overlap != 0 || k->graph != sp->graph_neutral;
    int ri = sp->rc_index[k->rc % 3][k->rc_method & 1][k->rc_mods & 127];
    int fi = sp->off_index[k->off % 3][k->off_mods & 127];
    int xi = k->tp_overlap * (sp->num_graphs + 1) + k->graph;
    bool rc_n = has_rc && ri >= 0 && sp->rcs[ri].layers == 0 && k->rc_layers != 0;
    bool off_n = has_off && fi >= 0 && sp->offs[fi].layers == 0 && k->off_layers != 0;
    if ((has_rc && ri < 0) || (has_off && fi < 0) || xi >= MAX_X) {
        return moe_plan_valid(w->vc, sp, &w->lay, k, &w->resolves);
    }
    if (has_rc) {
        t = *k;
        neutral_parts(sp, &t, true, false, false);
        bool v = rc_n ? moe_plan_valid(w->vc, sp, &w->lay, &t, &w->resolves)
                      : memo_verdict(w, &w->vm.r[gi * MOE_PLAN_MAX_RC + ri], &t);
        if (!v) {
            return false;
        }
    }
    if (has_off) {
        t = *k;
        neutral_parts(sp, &t, false, true, false);
        bool v = off_n ? moe_plan_valid(w->vc, sp, &w->lay, &t, &w->resolves)
                       : memo_verdict(w, &w->vm.f[gi * MOE_PLAN_MAX_OFF + fi], &t);
        if (!v) {
            return false;
        }
    }
    if (has_x) {
        t = *k;
        neutral_parts(sp, &t, false, false, true);
        if (!memo_verdict(w, &w->vm.x[gi * MAX_X + xi], &t)) {
            return false;
        }
    }
    /* Pairs, with "every layer count" values at count 1. */
    struct moe_plan_okey u = *k;
    if (rc_n) {
        u.rc_layers = 1;
    }
    if (off_n) {
        u.off_layers = 1;
    }
    if (has_rc && has_off) {
        t = u;
        neutral_parts(sp, &t, true, true, false);
        if (!memo_verdict(w, &w->vm.rf[ri * MOE_PLAN_MAX_OFF + fi], &t)) {
            return false;
        }
    }
    if (has_rc && has_x) {
        t = u;
        neutral_parts(sp, &t, true, false, true);
        if (!memo_verdict(w, &w->vm.rx[ri * MAX_X + xi], &t)) {
            return false;
        }
    }
    if (has_off && has_x) {
        t = u;
        neutral_parts(sp, &t, false, true, true);
        if (!memo_verdict(w, &w->vm.fx[fi * MAX_X + xi], &t)) {
            return false;
        }
    }
    return true;
}

static bool valid_full(struct worker *w, const struct moe_plan_okey *k)
{
    w->resolves++;
    return moe_plan_valid_full(&w->s->sp, &w->lay, k);
}

/* The local twin of a transformer_engine CUDA-graph value (same modules), or -1. */
static int graph_local_twin(const struct moe_plan_space *sp, int g)
{
    if (sp->graphs[g].impl != MOE_CG_TE) {
        return -1;
    }
    for (int i = 0; i < sp->num_graphs; i++) {
        if (sp->graphs[i].impl == MOE_CG_LOCAL && sp->graphs[i].modules == sp->graphs[g].modules) {
            return i;
        }
    }
    return -1;
}

/*
 * How much faster than its dominator d a dominated candidate can be (see the file comment): its
 * rank tails may shrink by at most d's exposed DP time. Without interleaving and without 1F1B EP
 * overlap (in the group), every pass of a dominated candidate is no shorter in either direction,
 * and the closed-form schedule then grows by at least the sum of the ranks' growth, more than the
 * tail can lose (overlap_eff <= 1): no slack at all.
 *
 * Two kinds of growth keep that property under EP overlap too (GROW_PASSES), because neither
 * touches the compute or expert time the 1F1B EP overlap pairs dispatch and combine against
 * (model/cost.c layer_exposed): the time-only knobs (TP overlap off adds exposed TP traffic, CUDA
 * graphs other than full iteration add host launches and the dropless sync; a pass costs
 * max(GPU, host) + sync), and more fine-grained offload (its copy time is added to the pass after
 * the EP pairing is priced). No pass of such a candidate is shorter in either direction.
 */
enum {
    GROW_ALL = 0x1f,    /* bit k: decoder-layer kind k */
    GROW_EXTRAS = 0x10, /* embedding, loss and MTP extras */
    GROW_PASSES = 0x20, /* no pass shorter in either direction, EP overlap or not */
};

/*
 * With interleaving, the same holds for candidates whose growth is confined to kinds whose every
 * rank grows enough: if each layer of kind k grows by e_k >= 0, rank p by sum_k n_pk e_k, the
 * closed form grows by at least (m - 1/vpp) min_p + sum_p / vpp of those, and the tails lose at
 * most overlap_eff max_p; that is >= sum_k e_k g_k with
 *   g_k = (m - 1/vpp) min_p n_pk + N_k / vpp - overlap_eff max_p n_pk,
 * so the candidate is no faster when g_k >= 0 for each kind that grows. grows is a bit set of
 * those kinds (GROW_EXTRAS: embedding, loss and MTP extras, which only TP overlap changes).
 */
static double dominance_slack(const struct worker *w,
                              const struct moe_plan_okey *d,
                              const struct moe_prediction *p,
                              unsigned grows)
{
    double ov = w->s->req->cl->overheads.overlap_eff;
    double dp = p->time.dp_comm > 0.0 ? p->time.dp_comm : 0.0;
    if (dp == 0.0) {
        return 0.0;
    }
    if ((d->ep_overlap && !(grows & GROW_PASSES)) || ov > 1.0) {
        return dp;
    }
    if (w->lay.vpp == 1) {
        return 0.0;
    }
    return (grows & GROW_ALL & ~w->grow_ok) != 0 ? dp : 0.0;
}

/* Which growth kinds satisfy g_k >= 0 on the current layout (dominance_slack). */
static unsigned grow_ok_mask(const struct worker *w)
{
    const struct moe_layout *lay = &w->lay;
    double ov = w->s->req->cl->overheads.overlap_eff;
    double m = lay->num_microbatches;
    int last = w->s->bm.last_moe * 2 + w->s->bm.last_win;
    unsigned ok = 0;
    for (int k = 0; k <= MOE_PLAN_KINDS; k++) {
        double lo = INFINITY;
        double hi = 0.0;
        double total = 0.0;
        for (int p = 0; p < lay->pp; p++) {
            double n;
            if (k < MOE_PLAN_KINDS) {
                n = w->kinds[p][k] + (k == last ? w->mtp[p] : 0);
            } else {
                n = w->sc[p].has_embedding + w->sc[p].has_loss + w->mtp[p];
            }
            lo = fmin(lo, n);
            hi = fmax(hi, n);
            total += n;
        }
        double g = (m - 1.0 / lay->vpp) * lo + total / lay->vpp - ov * hi;
        if (g >= 0.0) {
            ok |= 1u << k;
        }
    }
    return ok;
}

/* The other TP-overlap / CUDA-graph values of an evaluated (r, f): each is dominated by it and
 * has the same memory. */
static void
x_variants(struct worker *w, const struct moe_plan_okey *base, const struct moe_prediction *p)
{
    const struct xlist *xl = &w->xl;
    if (xl->n <= 1) {
        return;
    }
    double slack = dominance_slack(w, base, p, GROW_ALL | GROW_PASSES);
    if (slack <= 0.0 && !w->s->req->exhaustive) {
        return; /* never faster, same memory, later in the knob order */
    }
    const struct moe_plan_space *sp = &w->s->sp;
    double lb = p->step_time_s - slack;
    if (prune(w, lb, p->mem.total, NULL)) {
        w->c.pruned_time += w->xunit * (xl->n - 1); /* whatever their knobs */
        return;
    }
    for (int i = 0; i < xl->n; i++) {
        if (i == xl->dom) {
            continue;
        }
        struct moe_plan_okey k = *base;
        k.tp_overlap = xl->tp[i];
        k.graph = xl->graph[i];
        int twin = graph_local_twin(sp, k.graph);
        if (twin >= 0) {
            struct moe_plan_okey t = k;
            t.graph = (uint8_t)twin;
            if (valid(w, &t)) {
                continue; /* identical to its local twin, which sorts first */
            }
        }
        if (!valid(w, &k)) {
            w->c.invalid += w->xunit;
            continue;
        }
        if (prune(w, lb, p->mem.total, &k)) {
            w->c.pruned_time += w->xunit;
            continue;
        }
        struct moe_options opt;
        moe_plan_okey_apply(sp, &k, &opt);
        struct moe_prediction px;
        if (predict(w, &opt, &px)) {
            check_lb(w, lb, &px);
            record(w, &k, &px);
        }
    }
}

/* Evaluate candidate k (dominant X) with bound lb on its step time and its memory known:
 * predict it when it can matter, then its X variants. True (and *p) when predicted. */
static bool eval_valid_candidate(struct worker *w,
                                 const struct moe_plan_okey *k,
                                 double lb,
                                 const struct memo *mem,
                                 struct moe_prediction *p);
static bool eval_candidate(struct worker *w,
                           const struct moe_plan_okey *k,
                           double lb,
                           const struct memo *mem,
                           struct moe_prediction *p)
{
    if (prune(w, lb, mem->total, k)) {
        w->c.pruned_time += w->leaf;
        return false;
    }
    if (!valid(w, k)) {
        w->c.invalid += w->leaf;
        return false;
    }
    return eval_valid_candidate(w, k, lb, mem, p);
}

/* eval_candidate of a key already found valid and not pruned. */
static bool eval_valid_candidate(struct worker *w,
                                 const struct moe_plan_okey *k,
                                 double lb,
                                 const struct memo *mem,
                                 struct moe_prediction *p)
{
    struct moe_options opt;
    moe_plan_okey_apply(&w->s->sp, k, &opt);
    if (!predict(w, &opt, p)) {
        return false;
    }
    check_lb(w, lb, p);
    if (fabs(p->mem.total - mem->total) > 1e-9 * p->mem.total) {
        w->c.memory_mismatches++;
    }
    record(w, k, p);
    x_variants(w, k, p);
    return true;
}

/* Layer counts a value with "every layer count" (full recompute, CPU offloading) expands to. */
static int layer_choices(const struct worker *w, const struct moe_plan_okey *k, bool rc)
{
    const struct moe_model_cfg *cfg = w->s->req->cfg;
    if (rc) {
        return k->rc == MOE_RECOMPUTE_FULL && k->rc_layers == 0 ? cfg->num_layers / w->lay.pp : 0;
    }
    return k->off == 2 && k->off_layers == 0 ? cfg->num_layers - 1 : 0;
}

/* Values an entry of the recompute / offload list stands for ("every layer count" expanded). */
static double rc_mult(const struct worker *w, int ri)
{
    const struct moe_plan_rc *r = &w->s->sp.rcs[ri];
    return r->rc == MOE_RECOMPUTE_FULL && r->layers == 0
               ? (double)(w->s->req->cfg->num_layers / w->lay.pp)
               : 1.0;
}

static double off_mult(const struct worker *w, int fi)
{
    const struct moe_plan_off *f = &w->s->sp.offs[fi];
    return f->off == 2 && f->layers == 0 ? (double)(w->s->req->cfg->num_layers - 1) : 1.0;
}

static double expansion_count(const struct worker *w, const struct moe_plan_okey *k)
{
    int n = layer_choices(w, k, true) + layer_choices(w, k, false);
    return n > 0 ? (double)n : 1.0;
}

/* Better for the memory side: fitting first, then less memory (ties keep the earlier key). */
static bool memo_better(const struct search *s, const struct memo *a, const struct memo *b)
{
    bool fa = memo_fits(s, a);
    bool fb = memo_fits(s, b);
    if (fa != fb) {
        return fa;
    }
    return a->total < b->total;
}

/*
 * Evaluate k, expanding "every layer count" values. Uniform full recompute and CPU offloading
 * price every layer whatever the count, so only the count with the least memory (Pareto) and the
 * first fitting count in knob order (top-k: equal times break by key) can reach the results.
 * Block recompute re-runs only the first `count` layers of each chunk: each count is its own
 * time/memory trade-off and is evaluated (eval_block_counts).
 */
/* Recompute time of layers [lo, lo + m) of the decoder: each layer at its kind's per-layer bound
 * r[] (dense/MoE x full/windowed attention, the prefix counts of bound.h). */
static double first_layers_rc(const struct moe_plan_bound_model *bm, int lo, int m, const double *r)
{
    int hi = lo + m < MOE_MAX_LAYERS ? lo + m : MOE_MAX_LAYERS;
    if (hi <= lo) {
        return 0.0;
    }
    int moe = bm->prefix_moe[hi] - bm->prefix_moe[lo];
    int win = bm->prefix_win[hi] - bm->prefix_win[lo];
    int both = bm->prefix_both[hi] - bm->prefix_both[lo];
    return both * r[3] + (moe - both) * r[2] + (win - both) * r[1] +
           ((hi - lo) - moe - win + both) * r[0];
}

/* Every valid layer count of block recompute value k (bound lb holds for all: the least count
 * re-runs the least). Out: the prediction and memory of the least valid count when it was
 * evaluated -- a bound on every count, since re-running more layers never takes less time (the
 * caller bounds the row's offload variants with it); false otherwise. */
static double block_count_bound(struct worker *w, int count);
static bool eval_block_counts(struct worker *w,
                              const struct moe_plan_okey *k,
                              int n,
                              double lb,
                              struct moe_prediction *p,
                              struct memo *mem_out)
{
    const struct moe_plan_space *sp = &w->s->sp;
    bool least = false;
    bool first = true;
    double lb_i = lb; /* a count's step time bounds every larger count's */
    /* and the largest count's memory every smaller count's: re-running more layers keeps less */
    double m_min = -1.0;
    for (int i = n; i >= 1 && m_min < 0.0; i--) {
        struct moe_plan_okey v = *k;
        v.rc_layers = (uint16_t)i;
        if (valid(w, &v)) {
            struct moe_options opt;
            moe_plan_okey_apply(sp, &v, &opt);
            struct memo m;
            memory_of(w, &opt, &m);
            m_min = m.total;
        }
    }
    if (m_min < 0.0) {
        w->c.invalid += w->leaf * n;
        return false;
    }
    for (int i = 1; i <= n; i++) {
        struct moe_plan_okey v = *k;
        v.rc_layers = (uint16_t)i; /* sorts before every larger count */
        if (prune(w, lb_i, m_min, &v)) {
            w->c.pruned_time += w->leaf * (n - i + 1); /* and so is every larger count */
            break;
        }
        /* the cheap tests first: this count's time bound, its memory, then its validity */
        double lb_c = fmax(lb_i, block_count_bound(w, i));
        struct memo m;
        bool pruned = prune(w, lb_c, m_min, &v);
        if (!pruned) {
            struct moe_options opt;
            moe_plan_okey_apply(sp, &v, &opt);
            memory_of(w, &opt, &m);
            pruned = prune(w, lb_c, m.total, &v);
        }
        if (pruned) {
            w->c.pruned_time += w->leaf;
            first = false;
            continue;
        }
        if (!valid(w, &v)) {
            w->c.invalid += w->leaf;
            continue;
        }
        struct moe_prediction pi;
        bool ok = eval_valid_candidate(w, &v, lb_c, &m, &pi);
        if (ok) {
            lb_i = fmax(lb_i, pi.step_time_s);
        }
        if (first && ok) {
            *p = pi;
            *mem_out = m;
            least = true;
        }
        first = false;
    }
    return least;
}

static bool eval_expanded(struct worker *w,
                          const struct moe_plan_okey *k,
                          double lb,
                          double mst,
                          struct moe_prediction *p,
                          struct memo *mem_out)
{
    const struct moe_plan_space *sp = &w->s->sp;
    if (prune(w, lb, mst, k)) {
        w->c.pruned_time += w->leaf * expansion_count(w, k);
        return false; /* k sorts before each of its layer counts */
    }
    int nrc = layer_choices(w, k, true);
    int noff = layer_choices(w, k, false);
    struct moe_options opt;
    if (nrc == 0 && noff == 0) {
        moe_plan_okey_apply(sp, k, &opt);
        memory_of(w, &opt, mem_out);
        return eval_candidate(w, k, lb, mem_out, p);
    }
    if (nrc > 0 && k->rc_method == MOE_RECOMPUTE_BLOCK) {
        return eval_block_counts(w, k, nrc, lb, p, mem_out);
    }
    int n = nrc > 0 ? nrc : noff;
    struct moe_plan_okey least = *k;
    struct moe_plan_okey first = *k;
    struct memo least_m = {0};
    struct memo first_m = {0};
    bool has_least = false;
    bool has_first = false;
    for (int i = 1; i <= n; i++) {
        struct moe_plan_okey v = *k;
        if (nrc > 0) {
            v.rc_layers = (uint16_t)i;
        } else {
            v.off_layers = (uint16_t)i;
        }
        if (!valid(w, &v)) {
            w->c.invalid += w->leaf;
            continue;
        }
        moe_plan_okey_apply(sp, &v, &opt);
        struct memo m;
        memory_of(w, &opt, &m);
        if (!has_least || memo_better(w->s, &m, &least_m)) {
            least = v;
            least_m = m;
            has_least = true;
        }
        if (!has_first && memo_fits(w->s, &m)) {
            first = v;
            first_m = m;
            has_first = true;
        }
    }
    if (!has_least) {
        return false;
    }
    bool any = false;
    if (has_first && moe_plan_okey_cmp(&first, &least) != 0) {
        any = eval_candidate(w, &first, lb, &first_m, p);
        if (any) {
            *mem_out = first_m;
        }
    }
    struct moe_prediction pl;
    if (eval_candidate(w, &least, lb, &least_m, &pl)) {
        if (!any) {
            *p = pl;
            *mem_out = least_m;
        }
        any = true;
    }
    return any;
}

static void set_rc(struct moe_plan_okey *k, const struct moe_plan_rc *r)
{
    k->rc = r->rc;
    k->rc_method = r->method;
    k->rc_mods = r->mods;
    k->rc_layers = r->layers;
}

static void set_off(struct moe_plan_okey *k, const struct moe_plan_off *f)
{
    k->off = f->off;
    k->off_mods = f->mods;
    k->off_layers = f->layers;
}

static double rc_bound(struct worker *w,
                       const struct moe_plan_okey *dom,
                       const struct moe_prediction *pd,
                       int ri,
                       bool exact);

/*
 * Memory bound of every fine-grained offload set f contained in a set g, under recompute value
 * k->rc (selective or none), from g's memory m: offloading more modules only zeroes more saved
 * tensors, so every rank's saved activations under f are at least what g leaves; the transient
 * buffer of selective recompute (largest full layer minus the smaller kind's saved layer,
 * model/memory.c) only grows as less is saved, so under f it is at least its value without
 * offload. Hence
 *   M(r, f) >= M(r, g) - (1 + alloc_reserve) * (transient(r, g) - transient(r, none)).
 * offload_memory_bound takes g = every module: a bound for the whole recompute row.
 */
static double
offload_bound_of(const struct worker *w, const struct moe_plan_okey *k, const struct memo *m)
{
    double delta = 0.0;
    if (k->rc == MOE_RECOMPUTE_SELECTIVE) {
        /* act: [0] dense after recompute, [1] dense after offload, [2] / [3] the same for MoE */
        double before = fmin(m->act[0], m->act[2]);
        double after = fmin(m->act[1], m->act[3]);
        delta = (1.0 + w->s->req->cl->overheads.alloc_reserve_frac) * fmax(0.0, before - after);
    }
    return m->total - delta;
}

static double offload_memory_bound(struct worker *w, const struct moe_plan_okey *k, struct memo *m)
{
    const struct moe_plan_space *sp = &w->s->sp;
    struct moe_plan_okey t = *k;
    t.off = 1;
    t.off_mods = (uint8_t)sp->fine_all;
    t.off_layers = 0;
    struct moe_options opt;
    moe_plan_okey_apply(sp, &t, &opt);
    memory_of(w, &opt, m);
    return offload_bound_of(w, &t, m);
}

static void ensure_rc_terms(struct worker *w, const struct node *nd, int ri, int gi);

/*
 * Bound on the step time of options opt (a fine-grained offload set) from p0, the prediction of
 * the same options without activation offload. model/cost.c adds a layer's offload copy after it
 * has priced the pass's EP overlap, and the pass then costs max(host, GPU + max(0, copy - hide))
 * (moe_pass_with_copy, with p0's parts): each pass's growth is known exactly and none is negative.
 * With D_p the growth of rank p's passes per micro-batch, the closed form grows by at least
 * (m - 1/vpp) min_p D_p + sum_p D_p / vpp, and the DP tails shrink by at most overlap_eff max_p D_p
 * (their overlap windows are the rank's pass sums), so T(opt) >= T(p0) + that growth. A relative
 * 1e-9 is given away for the different order of the additions.
 */
static double
offload_time_bound(struct worker *w, const struct moe_options *opt, const struct moe_prediction *p0)
{
    const struct search *s = w->s;
    const struct moe_layout *lay = &w->lay;
    /* The copies read what the views after offload read, and the load factor: kept with them. */
    struct view_slot *vs = view_of(w, opt, true);
    if (!(vs->copy_load == p0->load_factor) || opt->cpu_offloading_num_layers > 0) {
        for (int m = 0; m < 2; m++) {
            double bytes = moe_cost_offload_bytes(s->req->cfg, lay, opt, m != 0, p0->load_factor);
            vs->copy_s[m] = moe_compute_offload_copy_s(s->req->cl, bytes);
        }
        vs->copy_load = opt->cpu_offloading_num_layers > 0 ? (double)NAN : p0->load_factor;
    }
    const double *copy = vs->copy_s;
    double grow[MOE_PLAN_KINDS];
    for (int k = 0; k < MOE_PLAN_KINDS; k++) {
        const struct moe_pass_parts *pp = p0->pass[k >> 1][k & 1];
        grow[k] = 0.0;
        for (int d = 0; d < 2; d++) {
            grow[k] += moe_pass_with_copy(&pp[d], copy[k >> 1]) - moe_pass_with_copy(&pp[d], 0.0);
        }
    }
    int last = s->bm.last_moe * 2 + s->bm.last_win;
    double lo = INFINITY;
    double hi = 0.0;
    double sum = 0.0;
    for (int p = 0; p < lay->pp; p++) {
        double d = w->mtp[p] * grow[last];
        for (int k = 0; k < MOE_PLAN_KINDS; k++) {
            d += w->kinds[p][k] * grow[k];
        }
        lo = fmin(lo, d);
        hi = fmax(hi, d);
        sum += d;
    }
    double v = lay->vpp;
    double g = ((double)lay->num_microbatches - 1.0 / v) * lo + sum / v -
               s->req->cl->overheads.overlap_eff * hi;
    return p0->step_time_s + g - 1e-9 * p0->step_time_s;
}

/*
 * The fine-grained offload values of recompute row kr (dom with its recompute value), their
 * memory known (has[fi], m[fi]; a value without memory cannot fit). First in knob order: the
 * values that cannot fit or cannot beat lb_r (the row's bound), duplicates (a set that leaves
 * every activation total as an earlier valid set did is equivalent to it: same memory, same host
 * copies, same step time) and invalid values go. Then the others, fewest modules first: offloading
 * more modules copies more bytes per layer, so each pass of (r, f, X*) is no shorter than that of
 * (r, g, X*) for every g contained in f, none included, and T(r, f) >= T(r, g) - slack with the
 * kinds f offloads from (dominance_slack). (r, none, X*), when not predicted (it does not fit, or
 * a bound pruned it), is predicted as a bound, never a result.
 */
static void search_fine(struct worker *w,
                        const struct moe_plan_okey *kr,
                        int ri,
                        double lb_r,
                        const struct moe_prediction *pr_none,
                        const double *tlb,
                        const bool *has,
                        const bool *late,
                        const struct memo *m)
{
    const struct search *s = w->s;
    const struct moe_plan_space *sp = &s->sp;
    double seen[MOE_PLAN_MAX_OFF][4];
    bool live[MOE_PLAN_MAX_OFF];
    int num_seen = 0;
    int num_live = 0;
    for (int fi = 1; fi < sp->num_off; fi++) {
        live[fi] = false;
        if (sp->offs[fi].off != 1) {
            continue;
        }
        if (!has[fi]) {
            if (late[fi]) {
                w->c.pruned_time += w->leaf * rc_mult(w, ri);
            } else {
                w->c.pruned_memory += w->leaf * rc_mult(w, ri);
            }
            continue;
        }
        struct moe_plan_okey k = *kr;
        set_off(&k, &sp->offs[fi]);
        if (prune(w, tlb[fi], m[fi].total, &k)) {
            w->c.pruned_time += w->leaf * rc_mult(w, ri);
            continue;
        }
        bool dup = false;
        for (int j = 0; j < num_seen && !dup; j++) {
            dup = memcmp(seen[j], m[fi].act, sizeof(m[fi].act)) == 0;
        }
        if (dup) {
            continue;
        }
        if (!valid(w, &k)) {
            w->c.invalid += w->leaf * rc_mult(w, ri);
            continue;
        }
        memcpy(seen[num_seen++], m[fi].act, sizeof(m[fi].act));
        live[fi] = true;
        num_live++;
    }
    if (num_live == 0) {
        return;
    }
    /* Bound sources: predicted values of the row (module set, prediction). */
    unsigned src_mods[MOE_PLAN_MAX_OFF + 1];
    struct moe_prediction *src = w->fine_src;
    int nsrc = 0;
    struct moe_options opt;
    if (pr_none != NULL) {
        src_mods[nsrc] = 0u;
        src[nsrc++] = *pr_none;
    } else if (!s->req->exhaustive && valid(w, kr)) {
        moe_plan_okey_apply(sp, kr, &opt);
        if (predict(w, &opt, &src[nsrc])) {
            check_lb(w, lb_r, &src[nsrc]);
            src_mods[nsrc++] = 0u;
        }
    }
    /* src[0]: the row without activation offload; tlb has its bound when pr_none was known */
    bool has_base = nsrc > 0 && pr_none == NULL;
    for (int j = s->num_fine_order - 1; j >= 0; j--) {
        int fi = s->fine_order[j];
        if (!live[fi]) {
            continue;
        }
        const struct memo *mf = &m[fi];
        unsigned mods = sp->offs[fi].mods;
        /* only the kinds f offloads from grow, and no pass gets shorter (GROW_PASSES) */
        unsigned grows = GROW_PASSES | (mf->act[0] != mf->act[1] ? 0x3u : 0u) |
                         (mf->act[2] != mf->act[3] ? 0xcu : 0u);
        double lb = tlb[fi];
        for (int q = 0; q < nsrc; q++) {
            if ((src_mods[q] & ~mods) == 0) {
                lb = fmax(lb, src[q].step_time_s - dominance_slack(w, kr, &src[q], grows));
            }
        }
        struct moe_plan_okey k = *kr;
        set_off(&k, &sp->offs[fi]);
        if (has_base && !s->req->exhaustive) {
            moe_plan_okey_apply(sp, &k, &opt);
            lb = fmax(lb, offload_time_bound(w, &opt, &src[0]));
        }
        if (eval_candidate(w, &k, lb, mf, &src[nsrc])) {
            src_mods[nsrc++] = mods;
        }
    }
}

/* Option group: everything but recompute, activation offload and the time-only knobs. */
static void search_group(struct worker *w, const struct moe_plan_okey *base)
{
    struct search *s = w->s;
    const struct moe_plan_space *sp = &s->sp;
    /* Dominator: the first recompute and offload values (none unless fixed) and the dominant
     * time-only values (in base). */
    struct moe_plan_okey dom = *base;
    set_rc(&dom, &sp->rcs[0]);
    set_off(&dom, &sp->offs[0]);
    struct moe_options opt;
    moe_plan_okey_apply(sp, &dom, &opt);
    if (opt.recompute == MOE_RECOMPUTE_FULL && opt.recompute_num_layers == 0) {
        opt.recompute_num_layers = 1; /* a bound only: any count prices the same */
    }
    if (opt.cpu_offloading_num_layers == 0 && dom.off == 2) {
        opt.cpu_offloading_num_layers = 1;
    }
    struct moe_prediction pd;
    if (!predict(w, &opt, &pd)) {
        return;
    }
    /* Memory bound of the group: the dominator's worst stage holds the group's weights,
     * gradients and optimizer state. Without recompute its buffers are B = X + (A + X) r + C
     * (model/memory.c: X the working set, logits and EP buffers, which recompute and offload do
     * not change; A its activations, r the allocator reserve, C the context), and every
     * candidate's are at least X (1 + r) + C = B - A r on that stage. */
    double mst = pd.mem.weights + pd.mem.grads + pd.mem.optimizer + s->ctx_bytes;
    double r = s->req->cl->overheads.alloc_reserve_frac;
    if (opt.recompute == MOE_RECOMPUTE_NONE && r >= 0.0) {
        double held = pd.mem.weights + pd.mem.grads + pd.mem.optimizer + pd.mem.buffers -
                      pd.mem.activations * r;
        mst = fmax(mst, held * (1.0 - 1e-9));
    }
    if (!s->req->exhaustive && mst > s->cap) {
        w->c.pruned_memory += w->gsize;
        return;
    }
    double lbg = pd.step_time_s - dominance_slack(w, &dom, &pd, GROW_ALL);
    if (prune(w, lbg, mst, &dom)) {
        w->c.pruned_time += w->gsize;
        return;
    }
    /* Recompute values, no activation offload. */
    double lb_r[MOE_PLAN_MAX_RC];
    struct moe_prediction pr_r[MOE_PLAN_MAX_RC];
    bool has_r[MOE_PLAN_MAX_RC];
    memset(has_r, 0, sizeof(has_r));
    bool use_rc = !s->req->exhaustive && w->node != NULL && sp->rcs[0].rc == MOE_RECOMPUTE_NONE;
    if (use_rc) {
        ensure_rc_terms(w, w->node, w->group_ri, w->group_gi);
    }
    for (int ri = 0; ri < sp->num_rc; ri++) {
        struct moe_plan_okey k = dom;
        set_rc(&k, &sp->rcs[ri]);
        lb_r[ri] = lbg;
        struct moe_prediction p;
        struct memo m;
        double lb_single = lbg;
        if (use_rc && ri > 0) {
            lb_single = fmax(lbg, rc_bound(w, &dom, &pd, ri, true));
            lb_r[ri] = fmax(lbg, rc_bound(w, &dom, &pd, ri, false));
        }
        if (ri == 0 && layer_choices(w, &k, true) == 0 && layer_choices(w, &k, false) == 0) {
            if (valid(w, &k)) {
                record(w, &k, &pd);
                x_variants(w, &k, &pd);
            } else {
                w->c.invalid += w->leaf;
            }
            pr_r[ri] = pd;
            has_r[ri] = true;
            continue;
        }
        w->blk_dom = &dom;
        w->blk_pd = &pd;
        w->blk_ri = use_rc && ri > 0 ? ri : -1;
        bool evaluated = eval_expanded(w, &k, lb_single, mst, &p, &m);
        w->blk_ri = -1;
        if (evaluated) {
            lb_r[ri] = fmax(lb_r[ri], p.step_time_s - dominance_slack(w, &k, &p, GROW_ALL));
            pr_r[ri] = p;
            has_r[ri] = true;
        }
    }
    /* Activation offload values under each recompute value: (r, f, X) is dominated by (r, none,
     * X*), whose bound is lb_r. */
    unsigned src_mods[MOE_PLAN_MAX_OFF + 1];
    double src_lb[MOE_PLAN_MAX_OFF + 1];
    bool fine_has[MOE_PLAN_MAX_OFF];
    bool fine_late[MOE_PLAN_MAX_OFF]; /* pruned by time before its memory was evaluated */
    struct memo fine_m[MOE_PLAN_MAX_OFF];
    double fine_tlb[MOE_PLAN_MAX_OFF]; /* time bound of each set (offload_time_bound) */
    for (int ri = 0; ri < sp->num_rc; ri++) {
        if (sp->num_off <= 1) {
            break;
        }
        struct moe_plan_okey kmin = dom;
        set_rc(&kmin, &sp->rcs[ri]);
        set_off(&kmin, &sp->offs[1]);
        if (prune(w, lb_r[ri], mst, &kmin)) {
            w->c.pruned_time += w->leaf * rc_mult(w, ri) * w->fsize;
            continue;
        }
        double row_lb_m = 0.0;
        struct memo row_m;
        /* The row bound is the memory of one recompute value; a row of every layer count (full
         * recompute) holds counts that need less than its count 1, so it has none. */
        bool has_row_lb =
            !s->req->exhaustive && sp->fine_all != 0 && layer_choices(w, &kmin, true) == 0;
        if (has_row_lb) {
            row_lb_m = offload_memory_bound(w, &kmin, &row_m);
            if (prune(w, lb_r[ri], row_lb_m, &kmin)) {
                w->c.pruned_memory += w->leaf * rc_mult(w, ri) * w->fsize;
                continue;
            }
        }
        /* Fine-grained sets, largest first: each evaluated set bounds the memory of its subsets
         * (offload_bound_of), so most sets that cannot fit are never evaluated. */
        struct moe_plan_okey kr = dom;
        set_rc(&kr, &sp->rcs[ri]);
        bool fine_row = layer_choices(w, &kr, true) == 0;
        if (fine_row) {
            int nsrc = 0;
            if (has_row_lb) {
                src_mods[nsrc] = sp->fine_all;
                src_lb[nsrc++] = row_lb_m;
            }
            for (int j = 0; j < s->num_fine_order; j++) {
                int fi = s->fine_order[j];
                double lbm = mst;
                for (int q = 0; q < nsrc; q++) {
                    if ((sp->offs[fi].mods & ~src_mods[q]) == 0) {
                        lbm = fmax(lbm, src_lb[q]);
                    }
                }
                fine_has[fi] = false;
                fine_late[fi] = false;
                fine_tlb[fi] = lb_r[ri];
                if (!s->req->exhaustive && lbm > s->cap) {
                    continue;
                }
                struct moe_plan_okey k = kr;
                set_off(&k, &sp->offs[fi]);
                moe_plan_okey_apply(sp, &k, &opt); /* for the time bound and the memory */
                if (has_r[ri] && !s->req->exhaustive) {
                    fine_tlb[fi] = fmax(lb_r[ri], offload_time_bound(w, &opt, &pr_r[ri]));
                }
                /* Offload never makes the row faster: lb_r bounds every set's time, lbm its
                 * memory, and prune is monotone in memory, so a set pruned here would be
                 * pruned with its exact memory too (the Pareto pass evaluated the memory of
                 * most sets only to reject them). */
                if (prune(w, fine_tlb[fi], lbm, &k)) {
                    fine_late[fi] = true;
                    continue;
                }
                if (has_row_lb && sp->offs[fi].mods == sp->fine_all) {
                    fine_m[fi] = row_m; /* the row bound's set */
                } else {
                    memory_of(w, &opt, &fine_m[fi]);
                }
                fine_has[fi] = true;
                src_mods[nsrc] = sp->offs[fi].mods;
                src_lb[nsrc++] = offload_bound_of(w, &k, &fine_m[fi]);
            }
        }
        for (int fi = 1; fi < sp->num_off; fi++) {
            struct moe_plan_okey k = dom;
            set_rc(&k, &sp->rcs[ri]);
            set_off(&k, &sp->offs[fi]);
            struct moe_prediction p;
            struct memo m;
            if (k.off == 2 && (w->lay.pp > 1 || k.rc != MOE_RECOMPUTE_NONE)) {
                w->c.invalid +=
                    w->leaf * rc_mult(w, ri) *
                    off_mult(w, fi); /* CPU offloading needs pp == 1 and no recompute (Megatron) */
                continue;
            }
            if (k.off != 1 || !fine_row) {
                (void)eval_expanded(w, &k, lb_r[ri], mst, &p, &m);
            }
        }
        if (fine_row) {
            search_fine(w, &kr, ri, lb_r[ri], has_r[ri] ? &pr_r[ri] : NULL, fine_tlb, fine_has,
                        fine_late, fine_m);
        }
    }
}

/* Candidates in the space of one layout: the product of every dimension's values. */
static double option_space_size(const struct search *s, const struct moe_layout *lay)
{
    const struct moe_plan_space *sp = &s->sp;
    const struct moe_model_cfg *cfg = s->req->cfg;
    double n = (double)sp->num_recipes * sp->num_statics * sp->num_dispatchers * sp->num_grouped *
               sp->num_ep_overlap * sp->num_graphs;
    n *= lay->sequence_parallel ? sp->num_tp_overlap : 1;
    /* recompute values, "every layer count" of full recompute counted per count (integers:
     * exact in any order) */
    double nr = s->rc_all * (double)(cfg->num_layers / lay->pp) + (sp->num_rc - s->rc_all);
    return n * nr * s->off_size * s->dom_size;
}

static void prepare_layout(struct worker *w)
{
    const struct search *s = w->s;
    const struct moe_plan_bound_model *bm = &s->bm;
    const struct moe_layout *lay = &w->lay;
    for (int p = 0; p < lay->pp; p++) {
        moe_mem_stage_contents(s->req->cfg, lay, p, &w->sc[p]);
        moe_mem_gpu_params(s->req->cfg, lay, &w->sc[p], &w->gp[p]);
        memset(w->kinds[p], 0, sizeof(w->kinds[p]));
        w->mtp[p] = 0;
        for (int c = p; c < lay->num_chunks; c += lay->pp) {
            const struct moe_pp_chunk *ch = &lay->chunks[c];
            int lo = ch->first_layer;
            int hi = lo + ch->num_layers;
            hi = hi < MOE_MAX_LAYERS ? hi : MOE_MAX_LAYERS;
            if (lo < hi) {
                int moe = bm->prefix_moe[hi] - bm->prefix_moe[lo];
                int win = bm->prefix_win[hi] - bm->prefix_win[lo];
                int both = bm->prefix_both[hi] - bm->prefix_both[lo];
                w->kinds[p][3] += both;
                w->kinds[p][2] += moe - both;
                w->kinds[p][1] += win - both;
                w->kinds[p][0] += (hi - lo) - moe - win + both;
            }
            w->mtp[p] += ch->num_mtp;
        }
    }
}

/*
 * Bound on the step time of every candidate of the current group with recompute value rc (any
 * offload and time-only values) from the dominator's prediction pd: each rank's passes grow by at
 * least its layers' recompute (times 1 - ep_overlap_eff under 1F1B EP overlap, which may hide EP
 * behind it), so the closed form grows by (m - 1/vpp) * min_p + sum_p / vpp of those growths; the
 * DP tails may shrink by at most pd's exposed DP time, and with the time-only and offload values
 * dominant (exact == true) by at most overlap_eff times the largest growth of a backward pass.
 */
static double rc_bound(struct worker *w,
                       const struct moe_plan_okey *dom,
                       const struct moe_prediction *pd,
                       int ri,
                       bool exact)
{
    const struct search *s = w->s;
    const struct moe_layout *lay = &w->lay;
    const struct moe_cluster *cl = s->req->cl;
    /* The per-rank recompute sums depend on the layout, the recompute terms and the value only. */
    int g = w->group_gi;
    if (w->rcb_serial[g] != w->layout_serial || w->rcb_key[g] != w->rc_key[g]) {
        w->rcb_serial[g] = w->layout_serial;
        w->rcb_key[g] = w->rc_key[g];
        w->rcb_stamp[g]++;
    }
    struct rc_sums *rs = &w->rcb[g * MOE_PLAN_MAX_RC + ri];
    if (rs->stamp != w->rcb_stamp[g]) {
        double r[MOE_PLAN_KINDS];
        double r_min = INFINITY;
        for (int k = 0; k < MOE_PLAN_KINDS; k++) {
            r[k] = moe_plan_bound_rc_layer(&w->rc_terms[g], &s->sp.rcs[ri], k);
            if (s->bm.kinds_total[k >> 1][k & 1] > 0) {
                r_min = fmin(r_min, r[k]);
            }
        }
        /* Block recompute re-runs the first n layers of each chunk (model/cost.c); n >= 1 re-runs
         * at least one layer of every non-empty chunk, and no MTP layer. */
        const struct moe_plan_rc *rcv = &s->sp.rcs[ri];
        bool block = rcv->rc == MOE_RECOMPUTE_FULL && rcv->method == MOE_RECOMPUTE_BLOCK;
        int last = s->bm.last_moe * 2 + s->bm.last_win;
        rs->sum = 0.0;
        rs->min = INFINITY;
        rs->max = 0.0;
        for (int p = 0; p < lay->pp; p++) {
            /* raw: the rank's recompute if every layer is re-run (the most any value re-runs:
             * what the DP tail can hide behind); low: the least (the growth the bound uses). */
            double raw = w->mtp[p] * r[last];
            for (int k = 0; k < MOE_PLAN_KINDS; k++) {
                raw += w->kinds[p][k] * r[k];
            }
            double low = raw;
            if (block) {
                int least = rcv->layers > 0 ? rcv->layers : 1;
                low = 0.0;
                for (int c = p; c < lay->num_chunks; c += lay->pp) {
                    int n = lay->chunks[c].num_layers;
                    low += first_layers_rc(&s->bm, lay->chunks[c].first_layer,
                                           n < least ? n : least, r);
                }
            }
            rs->sum += low;
            rs->min = fmin(rs->min, low);
            rs->max = fmax(rs->max, raw);
        }
        rs->stamp = w->rcb_stamp[g];
    }
    double eo = cl->overheads.ep_overlap_eff;
    double fac = dom->ep_overlap ? fmax(0.0, 1.0 - eo) : 1.0;
    double m = lay->num_microbatches;
    double grow = (m - 1.0 / lay->vpp) * (rs->min * fac) + (rs->sum * fac) / lay->vpp;
    double dp = pd->time.dp_comm > 0.0 ? pd->time.dp_comm : 0.0;
    double ov = cl->overheads.overlap_eff;
    double tail = exact ? fmin(dp, ov * (dom->ep_overlap ? 2.0 : 1.0) * rs->max) : dp;
    return pd->step_time_s + grow - tail;
}

/*
 * rc_bound (exact) of the row's block-recompute value for one layer count: every non-empty
 * chunk re-runs min(its layers, count) layers, each at least the cheapest kind's recompute.
 * -INFINITY when no row is set (the caller's bound stands alone).
 */
static double block_count_bound(struct worker *w, int count)
{
    if (w->blk_ri < 0) {
        return -INFINITY;
    }
    const struct search *s = w->s;
    const struct moe_layout *lay = &w->lay;
    const struct moe_cluster *cl = s->req->cl;
    const struct moe_plan_okey *dom = w->blk_dom;
    const struct moe_prediction *pd = w->blk_pd;
    int g = w->group_gi;
    double r[MOE_PLAN_KINDS];
    double r_min = INFINITY;
    for (int k = 0; k < MOE_PLAN_KINDS; k++) {
        r[k] = moe_plan_bound_rc_layer(&w->rc_terms[g], &s->sp.rcs[w->blk_ri], k);
        if (s->bm.kinds_total[k >> 1][k & 1] > 0) {
            r_min = fmin(r_min, r[k]);
        }
    }
    if (!isfinite(r_min)) {
        return -INFINITY;
    }
    int last = s->bm.last_moe * 2 + s->bm.last_win;
    double sum = 0.0;
    double lo = INFINITY;
    double hi = 0.0;
    for (int p = 0; p < lay->pp; p++) {
        double low = 0.0;
        for (int c = p; c < lay->num_chunks; c += lay->pp) {
            int n = lay->chunks[c].num_layers;
            low += first_layers_rc(&s->bm, lay->chunks[c].first_layer, n < count ? n : count, r);
        }
        double raw = w->mtp[p] * r[last]; /* every layer re-run: what the DP tail hides behind */
        for (int k = 0; k < MOE_PLAN_KINDS; k++) {
            raw += w->kinds[p][k] * r[k];
        }
        sum += low;
        lo = fmin(lo, low);
        hi = fmax(hi, raw);
    }
    double eo = cl->overheads.ep_overlap_eff;
    double fac = dom->ep_overlap ? fmax(0.0, 1.0 - eo) : 1.0;
    double m = lay->num_microbatches;
    double grow = (m - 1.0 / lay->vpp) * (lo * fac) + (sum * fac) / lay->vpp;
    double dp = pd->time.dp_comm > 0.0 ? pd->time.dp_comm : 0.0;
    double ov = cl->overheads.overlap_eff;
    double tail = fmin(dp, ov * (dom->ep_overlap ? 2.0 : 1.0) * hi);
    return pd->step_time_s + grow - tail;
}

/* Recompute terms of the current layout's dimensions for a recipe and grouped-GEMM value. */
static void ensure_rc_terms(struct worker *w, const struct node *nd, int ri, int gi)
{
    const struct moe_plan_space *sp = &w->s->sp;
    long key = ((long)nd->key * MOE_NUM_RECIPES + ri) * 2 + gi;
    if (w->rc_key[gi] == key) {
        return;
    }
    moe_plan_bound_rc_terms(sp, &w->lay, sp->recipes[ri], sp->grouped[gi], &w->rc_terms[gi]);
    w->rc_key[gi] = key;
}

/*
 * Static memory (weights, gradients, optimizer state, plus context) of the worst rank for each
 * recipe and optimizer choice, into w->static_ps; returns the least over them (the layout's
 * memory bound). Ranks with the same contents are evaluated once.
 */
static double static_bounds(struct worker *w)
{
    const struct search *s = w->s;
    const struct moe_plan_space *sp = &s->sp;
    double least = INFINITY;
    for (int ri = 0; ri < sp->num_recipes; ri++) {
        for (int si = 0; si < sp->num_statics; si++) {
            w->static_ps[ri][si] = 0.0;
        }
    }
    for (int p = 0; p < w->lay.pp; p++) {
        if (p > 0 && contents_equal(&w->sc[p], &w->sc[p - 1])) {
            continue;
        }
        const struct moe_stage_contents *c = &w->sc[p];
        int key[12] = {w->lay.tp,  w->lay.cp,        w->lay.dp,    w->lay.ep,
                       w->lay.etp, w->lay.pp,        c->num_dense, c->num_moe,
                       c->num_mtp, c->has_embedding, c->has_loss,  c->has_output_weight};
        uint64_t h = 1469598103934665603ULL;
        for (int i = 0; i < 12; i++) {
            h = (h ^ (uint64_t)(uint32_t)key[i]) * 1099511628211ULL;
        }
        struct static_slot *slot = &w->statics[(h ^ (h >> 31)) & (STATIC_SLOTS - 1)];
        if (!slot->used || memcmp(slot->key, key, sizeof(key)) != 0) {
            memcpy(slot->key, key, sizeof(key));
            slot->used = true;
            for (int ri = 0; ri < sp->num_recipes; ri++) {
                for (int si = 0; si < sp->num_statics; si++) {
                    slot->bytes[ri][si] = moe_plan_bound_stage_static(sp, &w->lay, c, ri, si);
                }
            }
        }
        for (int ri = 0; ri < sp->num_recipes; ri++) {
            for (int si = 0; si < sp->num_statics; si++) {
                w->static_ps[ri][si] =
                    fmax(w->static_ps[ri][si], slot->bytes[ri][si] + s->ctx_bytes);
            }
        }
    }
    for (int ri = 0; ri < sp->num_recipes; ri++) {
        for (int si = 0; si < sp->num_statics; si++) {
            least = fmin(least, w->static_ps[ri][si]);
        }
    }
    return least;
}

/* Expert-load statistics and the load factor predict uses for this layout's memory (read back
 * from one prediction, so memory-only evaluations match moe_cost_predict exactly). */
static void load_for_layout(struct worker *w)
{
    const struct search *s = w->s;
    w->has_stats = false;
    if (s->req->load_fn != NULL) {
        bool used = false;
        if (s->req->load_fn(s->req->load_ctx, &w->lay, &w->stats, &used, NULL) == MOE_OK && used) {
            w->has_stats = true;
        }
    }
    struct moe_options opt;
    struct moe_plan_okey k;
    memset(&k, 0, sizeof(k));
    k.recipe = s->sp.recipes[0];
    moe_plan_okey_apply(&s->sp, &k, &opt);
    struct moe_prediction p;
    w->load = 1.0;
    if (moe_cost_predict_prepared(&s->prep, s->req->cl, &w->lay, &opt,
                                  w->has_stats ? &w->stats : NULL, MOE_SCHED_CLOSED_FORM, w->ws,
                                  w->ws_bytes, &p, NULL) == MOE_OK) {
        w->load = p.load_factor_p99;
    }
}

/*
 * The activation views (view_of, layer_set) read, of the layout, only tp, cp, micro-batch size,
 * sequence parallelism, etp and sequence length, and the load factor (model/memory.c
 * moe_mem_layer_activations and moe_mem_layer_set_init): layouts that agree on those, such as
 * the vpp values and placements of one node, share them.
 */
static void views_for_layout(struct worker *w)
{
    const struct moe_layout *l = &w->lay;
    double key[7] = {l->tp,  l->cp,         l->mbs, l->sequence_parallel ? 1.0 : 0.0,
                     l->etp, l->seq_length, w->load};
    if (w->view_serial == 0 || memcmp(key, w->view_key, sizeof(key)) != 0) {
        memcpy(w->view_key, key, sizeof(key));
        w->view_serial++;
    }
}

/* Time-only values for the current layout; the dominant one first in knob order. */
static void x_list(struct worker *w)
{
    const struct moe_plan_space *sp = &w->s->sp;
    struct xlist *xl = &w->xl;
    xl->n = 0;
    xl->dom = 0;
    bool spar = w->lay.sequence_parallel;
    int ntp = spar || moe_plan_space_fixed(sp, MOE_PK_TP_COMM_OVERLAP) ? sp->num_tp_overlap : 1;
    int gdom = sp->graph_full_iter >= 0 ? sp->graph_full_iter : 0;
    for (int i = 0; i < ntp; i++) {
        uint8_t tp =
            spar || moe_plan_space_fixed(sp, MOE_PK_TP_COMM_OVERLAP) ? sp->tp_overlap[i] : 0;
        for (int g = 0; g < sp->num_graphs; g++) {
            if (i == 0 && g == gdom) {
                xl->dom = xl->n;
            }
            xl->tp[xl->n] = tp;
            xl->graph[xl->n] = (uint8_t)g;
            xl->n++;
        }
    }
}

/* Index of an option group in the validity memo. */
static int group_index(const struct moe_plan_space *sp, int ri, int si, int di, int gi, int ai)
{
    int nd = sp->num_dispatchers > sp->num_dispatchers_ep1 ? sp->num_dispatchers
                                                           : sp->num_dispatchers_ep1;
    return (((ri * sp->num_statics + si) * nd + di) * sp->num_grouped + gi) * sp->num_ep_overlap +
           ai;
}

/* The base knobs of an option group (the dominant time-only values). */
static void group_key(
    const struct worker *w, int ri, int si, int dispatcher, int gi, int ai, struct moe_plan_okey *k)
{
    const struct moe_plan_space *sp = &w->s->sp;
    const struct moe_plan_request *req = w->s->req;
    memset(k, 0, sizeof(*k));
    k->recipe = sp->recipes[ri];
    k->dist_opt = sp->statics[si].dist_opt;
    k->opt_offload = sp->statics[si].opt_offload;
    k->fp8_param_gather =
        moe_plan_space_fp8_param_gather(sp, k->recipe, k->dist_opt, k->opt_offload);
    k->dispatcher = (uint8_t)dispatcher;
    k->grouped = sp->grouped[gi];
    k->ep_overlap = sp->ep_overlap[ai];
    k->overlap_grad = sp->overlap_grad_fixed ? (req->opt.overlap_grad_reduce ? 1 : 0) : 1;
    k->overlap_param =
        sp->overlap_param_fixed ? (req->opt.overlap_param_gather ? 1 : 0) : k->dist_opt;
    k->tp_overlap = w->xl.tp[w->xl.dom];
    k->graph = w->xl.graph[w->xl.dom];
}

/* Each option group of the current layout (w->lay resolved, w->lk its knobs). */
static void search_options(struct worker *w)
{
    struct search *s = w->s;
    const struct moe_plan_space *sp = &s->sp;
    const uint8_t *disp = w->lay.ep > 1 ? sp->dispatchers : sp->dispatchers_ep1;
    int num_disp = w->lay.ep > 1 ? sp->num_dispatchers : sp->num_dispatchers_ep1;
    bool a2a_ok = moe_plan_bound_ep_overlap_possible(sp, &w->lay);
    /* The group bound does not depend on the optimizer choice: once per recipe, dispatcher,
     * grouped-GEMM and EP-overlap value (NAN until needed). */
    double glb[MOE_NUM_DISPATCHERS][2][2];
    for (int ri = 0; ri < sp->num_recipes; ri++) {
        for (int di = 0; di < MOE_NUM_DISPATCHERS; di++) {
            for (int gi = 0; gi < 2; gi++) {
                glb[di][gi][0] = glb[di][gi][1] = NAN;
            }
        }
        for (int si = 0; si < sp->num_statics; si++) {
            for (int di = 0; di < num_disp; di++) {
                for (int gi = 0; gi < sp->num_grouped; gi++) {
                    for (int ai = 0; ai < sp->num_ep_overlap; ai++) {
                        struct moe_plan_okey k;
                        group_key(w, ri, si, disp[di], gi, ai, &k);
                        w->gidx = group_index(sp, ri, si, di, gi, ai);
                        w->group_ri = ri;
                        w->group_gi = gi;
                        if (k.ep_overlap && (!a2a_ok || disp[di] == MOE_DISPATCH_ALLGATHER)) {
                            w->c.invalid += w->gsize; /* Megatron refuses the EP overlap here */
                            continue;
                        }
                        double mst = w->static_ps[ri][si];
                        if (!s->req->exhaustive && mst > s->cap) {
                            w->c.pruned_memory += w->gsize;
                            continue;
                        }
                        if (!s->req->exhaustive) {
                            double *lb = &glb[di][gi][ai];
                            if (isnan(*lb)) {
                                struct moe_plan_kind_lb g;
                                moe_plan_bound_group(sp, &s->bm, w->cur_terms, ri, gi, di,
                                                     k.ep_overlap != 0, num_disp, &g);
                                *lb = moe_plan_bound_time(sp, &s->bm, &g, &w->lay);
                            }
                            if (prune(w, *lb, mst, &k)) {
                                w->c.pruned_time += w->gsize;
                                continue;
                            }
                        }
                        search_group(w, &k);
                    }
                }
            }
        }
    }
}

/* Search every option of the resolved layout w->lay (lb: the least per-layer bounds). */
static void
search_layout(struct worker *w, const struct moe_plan_lkey *lk, const struct moe_plan_kind_lb *lb)
{
    struct search *s = w->s;
    double size = option_space_size(s, &w->lay);
    w->c.enumerated += size;
    w->c.layouts++;
    w->lk = *lk;
    w->has_best = false;
    w->layout_serial++;
    prepare_layout(w);
    w->grow_ok = grow_ok_mask(w);
    vmemo_layout(w);
    double mlb = static_bounds(w);
    w->layout_lb = s->req->exhaustive ? 0.0 : moe_plan_bound_time(&s->sp, &s->bm, lb, &w->lay);
    if (!s->req->exhaustive) {
        if (mlb > s->cap) {
            w->c.pruned_memory += size;
            return;
        }
        if (prune(w, w->layout_lb, mlb, NULL)) {
            w->c.pruned_time += size;
            return;
        }
    }
    load_for_layout(w);
    views_for_layout(w);
    x_list(w);
    const struct moe_plan_space *sp = &s->sp;
    double dom = (sp->fp8_param_gather_fixed ? 1.0 : 2.0) * (sp->overlap_grad_fixed ? 1.0 : 2.0) *
                 (sp->overlap_param_fixed ? 1.0 : 2.0) *
                 (moe_plan_space_fixed(sp, MOE_PK_EP_OVERLAP) ? 1.0 : 2.0);
    w->xunit = dom;
    w->leaf = dom * w->xl.n;
    double nr = 0.0;
    double nf = 0.0;
    for (int i = 0; i < sp->num_rc; i++) {
        nr += rc_mult(w, i);
    }
    for (int i = 0; i < sp->num_off; i++) {
        nf += off_mult(w, i);
    }
    w->fsize = nf - off_mult(w, 0);
    w->gsize = w->leaf * nr * nf;
    search_options(w);
    if (w->has_best) {
        offer_top(s, &w->best);
        if (w->best.t < s->req->rank_time_s) {
            atomic_fetch_add(&s->sh.faster, 1);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Enumeration of vpp and placements                                                           */

static bool divides(long a, long b)
{
    return b != 0 && a % b == 0;
}

struct placement {
    int place, first, last;
    int max_layers; /* layers (MTP counted as one) some rank must hold: the quick bound */
};

struct ptable {
    int pp, vpp, n;
    struct placement *pl;
};

static int placements(const struct search *s, int pp, int vpp, struct placement *out, int max_out)
{
    const struct moe_plan_request *req = s->req;
    const struct moe_model_cfg *cfg = req->cfg;
    int L = cfg->num_layers;
    int mtp = cfg->mtp_num_layers;
    int n = 0;
    if (moe_plan_space_fixed(&s->sp, MOE_PK_PP_LAYOUT)) {
        out[n++] = (struct placement){MOE_PLACE_FIXED, req->lay.first_stage_layers,
                                      req->lay.last_stage_layers, 0};
        return n;
    }
    int chunks = pp * vpp;
    if (L % chunks == 0) {
        out[n++] = (struct placement){MOE_PLACE_EVEN, 0, 0, L / pp + mtp};
    }
    if (pp == 1) {
        return n;
    }
    if (L % chunks != 0 || mtp > 0) {
        /* Some rank holds at least its share of the layers (MTP counted as one). */
        out[n++] = (struct placement){MOE_PLACE_BALANCED, 0, 0, (L + mtp + pp - 1) / pp};
    }
    for (int first = 0; first <= L && n < max_out; first += vpp) {
        for (int last = 0; last <= L && n < max_out; last += vpp) {
            if (first == 0 && last == 0) {
                continue;
            }
            int mid_stages = pp - (first > 0) - (last > 0);
            int mid_layers = L - first - last;
            if (mid_layers < 0 || (mid_layers > 0) != (mid_stages > 0)) {
                continue;
            }
            if (mid_stages > 0 && mid_layers % (mid_stages * vpp) != 0) {
                continue;
            }
            int per_mid = mid_stages > 0 ? mid_layers / mid_stages : 0;
            int most = first > per_mid ? first : per_mid;
            int last_rank = (last > 0 ? last : per_mid) + mtp;
            most = last_rank > most ? last_rank : most;
            out[n++] = (struct placement){MOE_PLACE_UNEVEN, first, last, most};
        }
    }
    return n;
}

/* The placements of (pp, vpp), built before the search (placement_tables). */
static const struct ptable *ptable_of(const struct search *s, int pp, int vpp)
{
    int lo = 0;
    int hi = s->num_ptables - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const struct ptable *t = &s->ptables[mid];
        if (t->pp == pp && t->vpp == vpp) {
            return t;
        }
        if (t->pp < pp || (t->pp == pp && t->vpp < vpp)) {
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return NULL;
}

static void fill_sizes(const struct search *s, const struct node *nd, int vpp, struct moe_layout *l)
{
    moe_layout_init(l);
    l->num_gpus = s->req->num_gpus;
    l->gbs = s->req->gbs;
    l->seq_length = s->req->seq_length;
    l->tp = nd->k.tp;
    l->cp = nd->k.cp;
    l->pp = nd->k.pp;
    l->vpp = vpp;
    l->ep = nd->k.ep;
    l->etp = nd->k.etp;
    l->mbs = nd->k.mbs;
    l->sequence_parallel = nd->k.sp != 0;
}

static int vpp_max(const struct search *s, int pp)
{
    const struct moe_model_cfg *cfg = s->req->cfg;
    if (moe_plan_space_fixed(&s->sp, MOE_PK_VPP)) {
        return s->req->lay.vpp;
    }
    if (pp <= 1) {
        return 1;
    }
    int v = (cfg->num_layers + cfg->mtp_num_layers) / pp;
    return v < 1 ? 1 : v;
}

static bool vpp_ok(const struct search *s, const struct node *nd, int vpp)
{
    const struct moe_plan_request *req = s->req;
    if (moe_plan_space_fixed(&s->sp, MOE_PK_VPP) && vpp != req->lay.vpp) {
        return false;
    }
    if (vpp > 1) {
        int dp = req->num_gpus / (nd->k.tp * nd->k.cp * nd->k.pp);
        int m = req->gbs / (nd->k.mbs * dp);
        if (nd->k.pp == 1 || m % nd->k.pp != 0) {
            return false;
        }
    }
    return (long)nd->k.pp * vpp <= MOE_MAX_PP_CHUNKS;
}

/*
 * Chunks of a placement as moe_layout_resolve places them (Megatron's rule: even split, or first
 * and last stage counts with the rest even; embedding on chunk 0, loss and MTP on the last), with
 * dp and the micro-batch count, for the layout bound before resolving. tests/planner/test_search
 * checks them against moe_layout_resolve for every placement of several models.
 */
static void build_placement(const struct search *s,
                            const struct node *nd,
                            int vpp,
                            const struct placement *pl,
                            struct moe_layout *lay)
{
    const struct moe_model_cfg *cfg = s->req->cfg;
    struct moe_plan_lkey lk = nd->k;
    lk.vpp = vpp;
    lk.place = pl->place;
    lk.first = pl->first;
    lk.last = pl->last;
    moe_plan_lkey_apply(&s->sp, &lk, lay);
    lay->dp = lay->num_gpus / (lay->tp * lay->cp * lay->pp);
    lay->num_microbatches = lay->gbs / (lay->mbs * lay->dp);
    if (lay->has_custom_pp_layout) {
        return; /* balanced or the request's own chunks: already filled */
    }
    int pp = lay->pp;
    int chunks = pp * vpp;
    int first = lay->first_stage_layers;
    int last = lay->last_stage_layers;
    int mid_stages = pp - (first > 0) - (last > 0);
    int mid_layers = cfg->num_layers - first - last;
    int per_mid = mid_stages > 0 ? mid_layers / (mid_stages * vpp) : 0;
    lay->num_chunks = chunks;
    int next = 0;
    for (int c = 0; c < chunks; c++) {
        int p = c % pp;
        int n = per_mid;
        if (p == 0 && first > 0) {
            n = first / vpp;
        } else if (p == pp - 1 && last > 0) {
            n = last / vpp;
        }
        memset(&lay->chunks[c], 0, sizeof(lay->chunks[c]));
        lay->chunks[c].num_layers = (uint16_t)n;
        lay->chunks[c].first_layer = (uint16_t)next;
        next += n;
    }
    lay->chunks[0].has_embedding = 1;
    lay->chunks[chunks - 1].has_loss = 1;
    lay->chunks[chunks - 1].num_mtp = (uint8_t)cfg->mtp_num_layers;
}

/* Build and resolve the layout of node nd with vpp and placement pl into w->lay. */
static bool node_layout(struct worker *w,
                        const struct node *nd,
                        int vpp,
                        const struct placement *pl,
                        struct moe_plan_lkey *lk)
{
    struct search *s = w->s;
    *lk = nd->k;
    lk->vpp = vpp;
    lk->place = pl->place;
    lk->first = pl->first;
    lk->last = pl->last;
    moe_plan_lkey_apply(&s->sp, lk, &w->lay);
    w->resolves++;
    return moe_layout_resolve(s->req->cfg, s->req->cl, NULL, &w->lay, NULL) == MOE_OK;
}

/* Layer terms of a node's key, from the thread's cache. */
static const struct moe_plan_layer_terms *node_terms(struct worker *w, const struct node *nd)
{
    struct search *s = w->s;
    struct terms_slot *slot = &w->terms[(unsigned long)nd->key % TERMS_SLOTS];
    if (slot->key != nd->key) {
        struct moe_layout lay;
        fill_sizes(s, nd, 1, &lay);
        moe_plan_bound_terms(&s->sp, &s->bm, &lay, NULL, &slot->t);
        slot->key = nd->key;
    }
    return &slot->t;
}

/* Chunks of a resolved layout, to skip placements that build the same layout twice (e.g. an
 * uneven split whose first stage holds what an even split gives it). */
static uint64_t chunks_hash(const struct moe_layout *lay)
{
    uint64_t h = 1469598103934665603ULL;
    for (int c = 0; c < lay->num_chunks; c++) {
        const struct moe_pp_chunk *ch = &lay->chunks[c];
        uint64_t v = (uint64_t)ch->num_layers | (uint64_t)ch->num_mtp << 16 |
                     (uint64_t)ch->has_embedding << 24 | (uint64_t)ch->has_loss << 25;
        h = (h ^ v) * 1099511628211ULL;
        h ^= h >> 31;
    }
    return h;
}

static void search_node(struct worker *w, const struct node *nd)
{
    struct search *s = w->s;
    bool exh = s->req->exhaustive;
    w->cur_terms = NULL;
    for (int vpp = 1; vpp <= vpp_max(s, nd->k.pp); vpp++) {
        if (!vpp_ok(s, nd, vpp)) {
            continue;
        }
        struct moe_layout sizes;
        fill_sizes(s, nd, vpp, &sizes);
        const struct moe_plan_kind_lb *lb = moe_plan_bound_ep_overlap_possible(&s->sp, &sizes)
                                                ? &s->keys[nd->key].lb
                                                : &s->keys[nd->key].lb0;
        const struct ptable *pt = ptable_of(s, nd->k.pp, vpp);
        int np = pt != NULL ? pt->n : 0;
        const struct placement *pl = pt != NULL ? pt->pl : NULL;
        double opt_size = option_space_size(s, &sizes);
        w->has_best = false;
        if (!exh && nd->static_lb > s->cap) {
            w->c.enumerated += np * opt_size;
            w->c.pruned_memory += np * opt_size;
            continue;
        }
        double lbv = exh ? 0.0 : moe_plan_bound_time_sizes(&s->sp, &s->bm, lb, &sizes, 0.0);
        if (!exh && prune(w, lbv, nd->static_lb, NULL)) {
            w->c.enumerated += np * opt_size;
            w->c.pruned_time += np * opt_size;
            continue;
        }
        uint64_t seen[MAX_PLACEMENTS];
        int num_seen = 0;
        for (int i = 0; i < np; i++) {
            w->has_best = false;
            if (!exh) {
                /* The rank holding the most layers runs at least that many layer passes. */
                double floor = pl[i].max_layers * lb->per_layer_min;
                double lbp = moe_plan_bound_time_sizes(&s->sp, &s->bm, lb, &sizes, floor);
                if (!prune(w, lbp, nd->static_lb, NULL)) {
                    build_placement(s, nd, vpp, &pl[i], &w->scratch);
                    lbp = moe_plan_bound_time(&s->sp, &s->bm, lb, &w->scratch);
                }
                if (prune(w, lbp, nd->static_lb, NULL)) {
                    w->c.enumerated += opt_size;
                    w->c.pruned_time += opt_size;
                    continue;
                }
            }
            struct moe_plan_lkey lk;
            if (!node_layout(w, nd, vpp, &pl[i], &lk)) {
                w->c.enumerated += opt_size;
                w->c.invalid += opt_size;
                continue;
            }
            uint64_t h = chunks_hash(&w->lay);
            bool dup = false;
            for (int j = 0; j < num_seen && !dup; j++) {
                dup = seen[j] == h;
            }
            if (dup) {
                /* the same layout under a larger key: identical predictions (counted, as the
                 * pruned ones are, so that the count does not depend on the order) */
                w->c.enumerated += opt_size;
                continue;
            }
            seen[num_seen++] = h;
            if (w->cur_terms == NULL && !exh) {
                w->cur_terms = node_terms(w, nd);
            }
            w->node = nd;
            search_layout(w, &lk, lb);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* When nothing fits: the plan with the least memory (exact, memory only)                      */

static void closest_layout(struct worker *w, const struct moe_plan_lkey *lk)
{
    struct search *s = w->s;
    const struct moe_plan_space *sp = &s->sp;
    w->lk = *lk;
    w->layout_serial++;
    prepare_layout(w);
    vmemo_layout(w);
    if (static_bounds(w) >= atomic_load(&s->sh.best_m)) {
        return;
    }
    load_for_layout(w);
    views_for_layout(w);
    x_list(w);
    const uint8_t *disp = w->lay.ep > 1 ? sp->dispatchers : sp->dispatchers_ep1;
    int num_disp = w->lay.ep > 1 ? sp->num_dispatchers : sp->num_dispatchers_ep1;
    /* Memory does not depend on grouped GEMM, EP overlap or the time-only knobs. */
    for (int ri = 0; ri < sp->num_recipes; ri++) {
        for (int si = 0; si < sp->num_statics; si++) {
            for (int di = 0; di < num_disp; di++) {
                struct moe_plan_okey k;
                group_key(w, ri, si, disp[di], 0, 0, &k);
                w->gidx = group_index(sp, ri, si, di, 0, 0);
                if (w->static_ps[ri][si] >= atomic_load(&s->sh.best_m)) {
                    continue;
                }
                struct moe_options opt;
                struct memo m;
                struct moe_plan_okey d = k;
                set_rc(&d, &sp->rcs[0]);
                set_off(&d, &sp->offs[0]);
                moe_plan_okey_apply(sp, &d, &opt);
                opt.recompute_num_layers =
                    opt.recompute == MOE_RECOMPUTE_FULL && opt.recompute_num_layers == 0
                        ? 1
                        : opt.recompute_num_layers;
                memory_of(w, &opt, &m);
                if (m.stat + s->ctx_bytes >= atomic_load(&s->sh.best_m)) {
                    continue;
                }
                for (int r = 0; r < sp->num_rc; r++) {
                    for (int f = 0; f < sp->num_off; f++) {
                        struct moe_plan_okey v = k;
                        set_rc(&v, &sp->rcs[r]);
                        set_off(&v, &sp->offs[f]);
                        int nrc = layer_choices(w, &v, true);
                        int noff = layer_choices(w, &v, false);
                        int n = nrc > 0 ? nrc : (noff > 0 ? noff : 1);
                        for (int i = 1; i <= n; i++) {
                            struct moe_plan_okey x = v;
                            if (nrc > 0) {
                                x.rc_layers = (uint16_t)i;
                            } else if (noff > 0) {
                                x.off_layers = (uint16_t)i;
                            }
                            if (!valid(w, &x)) {
                                continue;
                            }
                            moe_plan_okey_apply(sp, &x, &opt);
                            memory_of(w, &opt, &m);
                            if (m.total <= atomic_load(&s->sh.best_m)) {
                                struct entry e = {w->lk, x, 0.0, m.total};
                                offer_closest(w, &e);
                            }
                        }
                    }
                }
            }
        }
    }
}

static void closest_node(struct worker *w, const struct node *nd)
{
    struct search *s = w->s;
    if (nd->static_lb >= atomic_load(&s->sh.best_m)) {
        return;
    }
    for (int vpp = 1; vpp <= vpp_max(s, nd->k.pp); vpp++) {
        if (!vpp_ok(s, nd, vpp)) {
            continue;
        }
        const struct ptable *pt = ptable_of(s, nd->k.pp, vpp);
        for (int i = 0; pt != NULL && i < pt->n; i++) {
            struct moe_plan_lkey lk;
            if (node_layout(w, nd, vpp, &pt->pl[i], &lk)) {
                closest_layout(w, &lk);
            }
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Building the nodes                                                                           */

static int divisors_of(long n, long cap, int *out, int max_out)
{
    int k = 0;
    for (long d = 1; d <= n && d <= cap && k < max_out; d++) {
        if (n % d == 0) {
            out[k++] = (int)d;
        }
    }
    return k;
}

/* Values of a size knob: the fixed value (if it divides n), or the divisors of n up to cap. */
static int size_values(
    const struct search *s, enum moe_plan_knob knob, int fixed_value, long n, long cap, int *out)
{
    if (moe_plan_space_fixed(&s->sp, knob)) {
        out[0] = fixed_value;
        return divides(n, fixed_value) ? 1 : 0;
    }
    return divisors_of(n, cap, out, MAX_DIV);
}

struct key_map {
    long *slot; /* index into keys, -1 when empty */
    size_t mask;
    long cap_keys;
};

/*
 * Memory every stage of these sizes holds beyond weights, gradients, optimizer state and the
 * context: the backward working set of its largest layer (model/memory.c moe_mem_stage_with adds
 * it to the buffers, which the allocator reserve then grows), at least the lighter kind's, at
 * load factor 1 (the memory's is never below). It grows with the micro-batch: large ones cannot
 * fit whatever the options.
 */
/* A layout with a key's sizes (pp 1; what the key's bounds read). */
static void key_layout(const struct search *s, const struct layer_key *k, struct moe_layout *lay)
{
    moe_layout_init(lay);
    lay->num_gpus = s->req->num_gpus;
    lay->seq_length = s->req->seq_length;
    lay->tp = k->tp;
    lay->cp = k->cp;
    lay->ep = k->ep;
    lay->etp = k->etp;
    lay->mbs = k->mbs;
    lay->sequence_parallel = k->sp != 0;
}

static double key_working_bound(const struct search *s, const struct layer_key *k)
{
    const struct moe_model_cfg *cfg = s->req->cfg;
    struct moe_layout lay;
    key_layout(s, k, &lay);
    struct moe_mem_layer_set set;
    moe_mem_layer_set_init(cfg, &lay, &s->req->opt, 1.0, &set);
    double w = INFINITY;
    for (int m = 0; m < 2; m++) {
        bool present = s->bm.kinds_total[m][0] + s->bm.kinds_total[m][1] > 0 ||
                       (cfg->mtp_num_layers > 0 && s->bm.last_moe == m);
        if (present) {
            w = fmin(w, set.bwd_working[m]);
        }
    }
    double reserve = fmax(0.0, s->req->cl->overheads.alloc_reserve_frac);
    return isfinite(w) ? w * (1.0 + reserve) * (1.0 - 1e-9) : 0.0;
}

static long key_index(struct search *s, struct key_map *km, const struct moe_plan_lkey *k)
{
    int v[6] = {k->tp, k->cp, k->ep, k->etp, k->mbs, k->sp};
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < 6; i++) {
        h = (h ^ (uint64_t)(uint32_t)v[i]) * 1099511628211ULL;
    }
    size_t i = (size_t)(h ^ (h >> 29)) & km->mask;
    for (;;) {
        long j = km->slot[i];
        if (j < 0) {
            break;
        }
        const struct layer_key *q = &s->keys[j];
        if (q->tp == v[0] && q->cp == v[1] && q->ep == v[2] && q->etp == v[3] && q->mbs == v[4] &&
            q->sp == v[5]) {
            return j;
        }
        i = (i + 1) & km->mask;
    }
    if ((size_t)s->num_keys * 2 > km->mask) {
        return -1; /* map full: more size combinations than the planner handles */
    }
    if (s->num_keys == km->cap_keys) {
        long cap = km->cap_keys > 0 ? 2 * km->cap_keys : 1024;
        struct layer_key *p = realloc(s->keys, (size_t)cap * sizeof(*p));
        if (p == NULL) {
            return -1;
        }
        s->keys = p;
        km->cap_keys = cap;
    }
    struct layer_key *q = &s->keys[s->num_keys];
    memset(q, 0, sizeof(*q));
    q->tp = v[0];
    q->cp = v[1];
    q->ep = v[2];
    q->etp = v[3];
    q->mbs = v[4];
    q->sp = v[5];
    q->working_lb = key_working_bound(s, q);
    km->slot[i] = s->num_keys;
    return s->num_keys++;
}

/* Static-memory bound of every placement of these sizes: some rank holds ceil(L / pp) layers,
 * none lighter than the lighter kind's (weights, gradients, optimizer grow with each layer). */
static double sizes_static_bound(const struct search *s, const struct moe_plan_lkey *k, int dp)
{
    const struct moe_model_cfg *cfg = s->req->cfg;
    struct moe_layout lay;
    moe_layout_init(&lay);
    lay.num_gpus = s->req->num_gpus;
    lay.tp = k->tp;
    lay.cp = k->cp;
    lay.pp = k->pp;
    lay.dp = dp;
    lay.ep = k->ep;
    lay.etp = k->etp;
    lay.edp = (k->tp * k->cp * dp) / (k->ep * k->etp);
    lay.seq_length = s->req->seq_length;
    lay.sequence_parallel = k->sp != 0;
    int n = (cfg->num_layers + k->pp - 1) / k->pp;
    double best = INFINITY;
    for (int m = 0; m < 2; m++) {
        if (s->bm.kinds_total[m][0] + s->bm.kinds_total[m][1] == 0) {
            continue;
        }
        struct moe_stage_contents sc;
        memset(&sc, 0, sizeof(sc));
        sc.num_chunks = 1;
        sc.num_moe = m ? n : 0;
        sc.num_dense = m ? 0 : n;
        sc.max_chunk_layers = n;
        best = fmin(best, moe_plan_bound_stage_static(&s->sp, &lay, &sc, -1, 0));
    }
    return (isfinite(best) ? best : 0.0) + s->ctx_bytes;
}

static enum moe_status
add_node(struct search *s, struct key_map *km, const struct node *nd, long *cap_nodes)
{
    if (s->num_nodes == *cap_nodes) {
        long cap = *cap_nodes > 0 ? 2 * *cap_nodes : 4096;
        struct node *p = realloc(s->nodes, (size_t)cap * sizeof(*p));
        if (p == NULL) {
            return MOE_ERR_NOMEM;
        }
        s->nodes = p;
        *cap_nodes = cap;
    }
    long ki = key_index(s, km, &nd->k);
    if (ki < 0) {
        return MOE_ERR_NOMEM;
    }
    struct node *n = &s->nodes[s->num_nodes++];
    *n = *nd;
    n->key = (int)ki;
    n->static_lb += s->keys[ki].working_lb;
    if (n->static_lb <= s->cap || s->req->exhaustive) {
        s->keys[ki].needed = true;
    }
    return MOE_OK;
}

/* Sequence-parallel values for tp (MoE with TP needs it; dense models may go either way). */
static int sp_values(const struct search *s, int tp, int *out)
{
    if (tp == 1) {
        out[0] = 0;
        return 1;
    }
    if (moe_plan_space_fixed(&s->sp, MOE_PK_SEQUENCE_PARALLEL)) {
        out[0] = s->req->lay.sequence_parallel ? 1 : 0;
        return 1;
    }
    out[0] = 1;
    if (s->sp.is_moe) {
        return 1;
    }
    out[1] = 0;
    return 2;
}

/* Nodes for tp, cp, pp: every sequence parallelism, ep, etp and micro-batch size. */
static enum moe_status
build_tcp(struct search *s, struct key_map *km, long *cap_nodes, int tp, int cp, int pp)
{
    const struct moe_plan_request *req = s->req;
    const struct moe_model_cfg *cfg = req->cfg;
    const struct moe_layout *fl = &req->lay;
    int dp = (int)(req->num_gpus / ((long)tp * cp * pp));
    if (req->gbs % dp != 0) {
        return MOE_OK;
    }
    long stage = (long)tp * cp * dp;
    int sps[2];
    int nsp = sp_values(s, tp, sps);
    int eps[MAX_DIV];
    int etps[MAX_DIV];
    int mbss[MAX_DIV];
    int nep = 1;
    eps[0] = 1;
    if (s->sp.is_moe) {
        nep = size_values(s, MOE_PK_EP, fl->ep, cfg->num_experts, stage, eps);
    }
    int nm = size_values(s, MOE_PK_MBS, fl->mbs, req->gbs / dp, req->gbs / dp, mbss);
    for (int si = 0; si < nsp; si++) {
        if (sps[si] && (req->seq_length / cp) % tp != 0) {
            continue;
        }
        for (int e = 0; e < nep; e++) {
            int ep = eps[e];
            if (stage % ep != 0) {
                continue;
            }
            int netp = 1;
            etps[0] = 1;
            if (s->sp.is_moe) {
                netp =
                    size_values(s, MOE_PK_ETP, fl->etp, cfg->moe_ffn_hidden_size, stage / ep, etps);
            }
            for (int f = 0; f < netp; f++) {
                int etp = etps[f];
                if (stage % ((long)ep * etp) != 0) {
                    continue;
                }
                struct node nd;
                memset(&nd, 0, sizeof(nd));
                nd.k.tp = tp;
                nd.k.cp = cp;
                nd.k.pp = pp;
                nd.k.sp = sps[si];
                nd.k.ep = ep;
                nd.k.etp = etp;
                nd.k.vpp = 1;
                nd.static_lb = sizes_static_bound(s, &nd.k, dp);
                for (int g = 0; g < nm; g++) {
                    nd.k.mbs = mbss[g];
                    MOE_TRY(add_node(s, km, &nd, cap_nodes));
                }
            }
        }
    }
    return MOE_OK;
}

static enum moe_status build_nodes(struct search *s, struct moe_diag *diag)
{
    const struct moe_plan_request *req = s->req;
    const struct moe_model_cfg *cfg = req->cfg;
    const struct moe_layout *fl = &req->lay;
    long N = req->num_gpus;
    struct key_map km;
    km.mask = ((size_t)1 << 20) - 1;
    km.cap_keys = 0;
    km.slot = malloc((km.mask + 1) * sizeof(long));
    if (km.slot == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the planner's nodes");
    }
    memset(km.slot, 0xff, (km.mask + 1) * sizeof(long));
    long cap_nodes = 0;
    enum moe_status st = MOE_OK;
    int tps[MAX_DIV];
    int cps[MAX_DIV];
    int pps[MAX_DIV];
    int ntp = size_values(s, MOE_PK_TP, fl->tp, N, cfg->num_attention_heads, tps);
    for (int a = 0; a < ntp && st == MOE_OK; a++) {
        int tp = tps[a];
        if (cfg->num_attention_heads % tp != 0) {
            continue;
        }
        int ncp = size_values(s, MOE_PK_CP, fl->cp, N / tp, N, cps);
        for (int b = 0; b < ncp && st == MOE_OK; b++) {
            int cp = cps[b];
            if (cp > 1 && req->seq_length % (2 * cp) != 0) {
                continue;
            }
            int npp = size_values(s, MOE_PK_PP, fl->pp, N / ((long)tp * cp),
                                  cfg->num_layers + cfg->mtp_num_layers, pps);
            for (int p = 0; p < npp && st == MOE_OK; p++) {
                st = build_tcp(s, &km, &cap_nodes, tp, cp, pps[p]);
            }
        }
    }
    free(km.slot);
    if (st != MOE_OK) {
        return moe_diag_set(diag, st, "out of memory for the planner's nodes");
    }
    return MOE_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Threads                                                                                      */

enum phase {
    PHASE_KEYS = 0,  /* per-layer bounds of each size key */
    PHASE_NODES = 1, /* bound of each node */
    PHASE_SEARCH = 2,
    PHASE_CLOSEST = 3,
};

struct thread_arg {
    struct worker *w;
    enum phase phase;
};

static void node_bound(struct search *s, struct node *nd)
{
    const struct moe_plan_kind_lb *lb = &s->keys[nd->key].lb;
    nd->lb = INFINITY;
    if (s->req->exhaustive) {
        nd->lb = 0.0;
        return;
    }
    if (!s->keys[nd->key].needed) {
        return; /* cannot fit: searched last, and pruned by memory */
    }
    for (int vpp = 1; vpp <= vpp_max(s, nd->k.pp); vpp++) {
        if (!vpp_ok(s, nd, vpp)) {
            continue;
        }
        struct moe_layout sizes;
        fill_sizes(s, nd, vpp, &sizes);
        const struct moe_plan_kind_lb *l =
            moe_plan_bound_ep_overlap_possible(&s->sp, &sizes) ? lb : &s->keys[nd->key].lb0;
        nd->lb = fmin(nd->lb, moe_plan_bound_time_sizes(&s->sp, &s->bm, l, &sizes, 0.0));
    }
}

/* What the dense-layer terms and extras of a key read (moe_plan_bound_terms' `same`): all but ep
 * and etp, and whether ep > 1 (it picks the dispatcher list). */
static void key_attn(const struct layer_key *k, int v[5])
{
    v[0] = k->tp;
    v[1] = k->cp;
    v[2] = k->sp;
    v[3] = k->mbs;
    v[4] = k->ep > 1;
}

struct key_rank {
    int v[5]; /* key_attn */
    long i;   /* index into keys */
};

static int key_rank_cmp(const void *pa, const void *pb)
{
    const struct key_rank *a = pa;
    const struct key_rank *b = pb;
    for (int j = 0; j < 5; j++) {
        if (a->v[j] != b->v[j]) {
            return a->v[j] < b->v[j] ? -1 : 1;
        }
    }
    return a->i < b->i ? -1 : (a->i > b->i);
}

/* The order of the key phase: keys that share their dense terms next to each other. */
static enum moe_status key_order_init(struct search *s)
{
    struct key_rank *r = malloc((size_t)(s->num_keys > 0 ? s->num_keys : 1) * sizeof(*r));
    s->key_order = malloc((size_t)(s->num_keys > 0 ? s->num_keys : 1) * sizeof(*s->key_order));
    if (r == NULL || s->key_order == NULL) {
        free(r);
        return MOE_ERR_NOMEM;
    }
    for (long i = 0; i < s->num_keys; i++) {
        key_attn(&s->keys[i], r[i].v);
        r[i].i = i;
    }
    qsort(r, (size_t)s->num_keys, sizeof(*r), key_rank_cmp);
    for (long i = 0; i < s->num_keys; i++) {
        s->key_order[i] = r[i].i;
    }
    free(r);
    return MOE_OK;
}

static void key_bound(struct worker *w, struct layer_key *k)
{
    struct search *s = w->s;
    if (s->req->exhaustive || !k->needed) {
        return;
    }
    struct moe_layout lay;
    key_layout(s, k, &lay);
    lay.pp = 1;
    /* Keys are taken in key_attn order: the previous key's dense terms serve this one when
     * key_attn agrees. */
    int v[5];
    key_attn(k, v);
    bool same = w->kattn_valid && memcmp(v, w->kattn, sizeof(v)) == 0;
    struct moe_plan_layer_terms *t = &w->kterms[same ? 1 : 0];
    moe_plan_bound_terms(&s->sp, &s->bm, &lay, same ? &w->kterms[0] : NULL, t);
    if (!same) {
        memcpy(w->kattn, v, sizeof(v));
        w->kattn_valid = true;
    }
    /* With pp == 1 the EP overlap is allowed (when ep > 1): the least over both settings; with
     * pp > 1 and no interleaving it is not. */
    moe_plan_bound_least(&s->sp, &s->bm, t, &lay, &k->lb);
    lay.pp = 2;
    lay.vpp = 1;
    moe_plan_bound_least(&s->sp, &s->bm, t, &lay, &k->lb0);
}

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
 * inserts it (order_init, before the search: the search only reads the values). */
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
static enum moe_status order_init(struct search *s)
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

static void order_free(struct node_order *o)
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
static void order_pull(struct worker *w, const struct node *nd)
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
static long order_take(struct search *s)
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
        long i = a->phase == PHASE_SEARCH ? order_take(s) : atomic_fetch_add(&s->sh.next, 1);
        if (i < 0 || i >= total) {
            break;
        }
        switch (a->phase) {
        case PHASE_KEYS:
            key_bound(w, &s->keys[s->key_order[i]]);
            break;
        case PHASE_NODES:
            node_bound(s, &s->nodes[i]);
            break;
        case PHASE_SEARCH:
            w->on_front = false;
            search_node(w, &s->nodes[i]);
            if (w->on_front) {
                order_pull(w, &s->nodes[i]);
            }
            break;
        case PHASE_CLOSEST:
            closest_node(w, &s->nodes[i]);
            break;
        }
        atomic_store_explicit(&w->shown_evaluated, (long)w->c.evaluated, memory_order_relaxed);
        atomic_fetch_add(&s->sh.done, 1);
    }
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int online_cpus(void)
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

static enum moe_status
run_phase(struct search *s, struct worker *ws, int nthreads, enum phase phase, double t0)
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
                          now_s() - t0, evaluated_so_far(ws, started));
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

static int node_cmp(const void *pa, const void *pb)
{
    const struct node *a = pa;
    const struct node *b = pb;
    if (a->lb != b->lb) {
        return a->lb < b->lb ? -1 : 1;
    }
    return moe_plan_lkey_cmp(&a->k, &b->k);
}

static int node_mem_cmp(const void *pa, const void *pb)
{
    const struct node *a = pa;
    const struct node *b = pb;
    if (a->static_lb != b->static_lb) {
        return a->static_lb < b->static_lb ? -1 : 1;
    }
    return moe_plan_lkey_cmp(&a->k, &b->k);
}

/* ------------------------------------------------------------------------------------------ */
/* Results                                                                                      */

/* Rebuild a plan from its keys and predict it (closed form, and simulated when sim). */
static enum moe_status materialize(struct search *s,
                                   const struct entry *e,
                                   bool sim,
                                   struct moe_plan_candidate *out,
                                   struct moe_diag *diag)
{
    memset(out, 0, sizeof(*out));
    moe_plan_lkey_apply(&s->sp, &e->lk, &out->lay);
    moe_plan_okey_apply(&s->sp, &e->ok, &out->opt);
    MOE_TRY(moe_layout_resolve(s->req->cfg, s->req->cl, &out->opt, &out->lay, diag));
    struct moe_load_stats stats;
    bool used = false;
    if (s->req->load_fn != NULL) {
        MOE_TRY(s->req->load_fn(s->req->load_ctx, &out->lay, &stats, &used, diag));
    }
    enum moe_schedule_mode mode = sim ? MOE_SCHED_SIMULATE : MOE_SCHED_CLOSED_FORM;
    size_t need = moe_cost_workspace_bytes(&out->lay, mode);
    void *ws = malloc(need > 0 ? need : 1);
    if (ws == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for a prediction");
    }
    const struct moe_load_stats *ls = used ? &stats : NULL;
    enum moe_status st = moe_cost_predict(s->req->cfg, s->req->cl, &out->lay, &out->opt, ls,
                                          MOE_SCHED_CLOSED_FORM, ws, need, &out->pred, diag);
    if (st == MOE_OK && sim) {
        st = moe_cost_predict(s->req->cfg, s->req->cl, &out->lay, &out->opt, ls, MOE_SCHED_SIMULATE,
                              ws, need, &out->sim, diag);
        out->has_sim = st == MOE_OK;
    }
    free(ws);
    out->fits = fits_pred(s, &out->pred);
    return st;
}

static int cand_sim_cmp(const void *pa, const void *pb)
{
    const struct moe_plan_candidate *a = pa;
    const struct moe_plan_candidate *b = pb;
    double ta = a->has_sim ? a->sim.step_time_s : a->pred.step_time_s;
    double tb = b->has_sim ? b->sim.step_time_s : b->pred.step_time_s;
    if (ta != tb) {
        return ta < tb ? -1 : 1;
    }
    return moe_plan_knob_cmp(&a->lay, &a->opt, &b->lay, &b->opt);
}

static enum moe_status collect(struct search *s, struct moe_plan_result *res, struct moe_diag *diag)
{
    const struct moe_plan_request *req = s->req;
    struct shared *sh = &s->sh;
    if (sh->num_top > 0) {
        res->top = calloc((size_t)sh->num_top, sizeof(*res->top));
        if (res->top == NULL) {
            return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the results");
        }
        for (int i = 0; i < sh->num_top; i++) {
            MOE_TRY(materialize(s, &sh->top[i], true, &res->top[i], diag));
        }
        /* Re-rank by the simulated schedule; keep top_k. */
        qsort(res->top, (size_t)sh->num_top, sizeof(*res->top), cand_sim_cmp);
        res->num_top = sh->num_top < req->top_k ? sh->num_top : req->top_k;
    }
    double t1 = atomic_load(&sh->t1);
    if (req->pareto_window > 0.0 && sh->num_pareto > 0) {
        res->pareto = calloc((size_t)sh->num_pareto, sizeof(*res->pareto));
        if (res->pareto == NULL) {
            return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the results");
        }
        for (int i = 0; i < sh->num_pareto; i++) {
            if (sh->pareto[i].t > req->pareto_window * t1) {
                continue;
            }
            MOE_TRY(materialize(s, &sh->pareto[i], false, &res->pareto[res->num_pareto], diag));
            res->num_pareto++;
        }
    }
    if (sh->num_top == 0 && sh->has_closest) {
        MOE_TRY(materialize(s, &sh->closest, true, &res->closest, diag));
        res->has_closest = true;
        res->closest_excess_bytes = res->closest.pred.mem.total - s->cap;
    }
    return MOE_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Entry points                                                                                 */

void moe_plan_request_init(struct moe_plan_request *req)
{
    memset(req, 0, sizeof(*req));
    moe_layout_init(&req->lay);
    moe_options_init(&req->opt);
    req->top_k = 10;
    req->pareto_window = 1.5;
}

void moe_plan_result_free(struct moe_plan_result *res)
{
    if (res == NULL) {
        return;
    }
    free(res->top);
    free(res->pareto);
    memset(res, 0, sizeof(*res));
}

static enum moe_status check_request(const struct moe_plan_request *req, struct moe_diag *diag)
{
    if (req->cfg == NULL || req->cl == NULL) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "the planner needs a model and a cluster");
    }
    if (req->num_gpus < 1 || req->gbs < 1 || req->seq_length < 1) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "the planner needs --gpus, --global-batch-size and --seq-length "
                            "(got %d, %d, %d)",
                            req->num_gpus, req->gbs, req->seq_length);
    }
    if (req->top_k < 1 || req->top_k > 1000 || req->num_threads < 0 ||
        req->num_threads > MAX_THREADS) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "top-k %d must be in [1, 1000], threads %d in [0, %d]", req->top_k,
                            req->num_threads, MAX_THREADS);
    }
    if (req->pareto_window != 0.0 && !(req->pareto_window >= 1.0)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "the Pareto window %g must be >= 1 (or 0 for none)",
                            req->pareto_window);
    }
    return MOE_OK;
}

static void workers_free(struct worker *ws, int n)
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
    }
    free(ws);
}

static struct worker *workers_create(struct search *s, int n)
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
        if (w->terms != NULL) {
            for (int j = 0; j < TERMS_SLOTS; j++) {
                w->terms[j].key = -1;
            }
        }
        if (w->vc == NULL || w->ws == NULL || w->sc == NULL || w->gp == NULL ||
            w->statics == NULL || w->pl == NULL || w->terms == NULL || w->vm.g == NULL ||
            w->vm.r == NULL || w->vm.f == NULL || w->vm.x == NULL || w->vm.rf == NULL ||
            w->vm.rx == NULL || w->vm.fx == NULL || w->kinds == NULL || w->mtp == NULL ||
            w->fine_src == NULL || w->rcb == NULL || w->views == NULL || w->mems == NULL ||
            w->kterms == NULL) {
            workers_free(ws, n);
            return NULL;
        }
    }
    return ws;
}

static void sum_counters(struct moe_plan_stats *st, const struct counters *c)
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

static void shared_init(struct shared *sh, int keep)
{
    memset(sh, 0, sizeof(*sh));
    pthread_mutex_init(&sh->mu, NULL);
    atomic_init(&sh->t1, INFINITY);
    atomic_init(&sh->tk, INFINITY);
    atomic_init(&sh->best_m, INFINITY);
    atomic_init(&sh->next, 0);
    atomic_init(&sh->done, 0);
    atomic_init(&sh->failed, false);
    atomic_init(&sh->violations, 0);
    atomic_init(&sh->pareto_version, 0);
    atomic_init(&sh->faster, 0);
    sh->keep = keep;
}

static int ptable_cmp(const void *pa, const void *pb)
{
    const struct ptable *a = pa;
    const struct ptable *b = pb;
    return a->pp != b->pp ? (a->pp < b->pp ? -1 : 1) : (a->vpp < b->vpp ? -1 : (a->vpp > b->vpp));
}

/* Placements of every (pp, vpp) the nodes use, sorted for ptable_of. */
static enum moe_status
placement_tables(struct search *s, struct placement *scratch, struct moe_diag *diag)
{
    int pps[MAX_DIV];
    int npp = 0;
    for (long i = 0; i < s->num_nodes; i++) {
        int pp = s->nodes[i].k.pp;
        bool seen = false;
        for (int j = 0; j < npp && !seen; j++) {
            seen = pps[j] == pp;
        }
        if (!seen && npp < MAX_DIV) {
            pps[npp++] = pp;
        }
    }
    int cap = 0;
    for (int j = 0; j < npp; j++) {
        cap += vpp_max(s, pps[j]);
    }
    s->ptables = calloc((size_t)(cap > 0 ? cap : 1), sizeof(*s->ptables));
    if (s->ptables == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the planner's placements");
    }
    for (int j = 0; j < npp; j++) {
        for (int vpp = 1; vpp <= vpp_max(s, pps[j]); vpp++) {
            int n = placements(s, pps[j], vpp, scratch, MAX_PLACEMENTS);
            struct ptable *t = &s->ptables[s->num_ptables];
            t->pl = malloc((size_t)(n > 0 ? n : 1) * sizeof(*t->pl));
            if (t->pl == NULL) {
                return moe_diag_set(diag, MOE_ERR_NOMEM,
                                    "out of memory for the planner's placements");
            }
            memcpy(t->pl, scratch, (size_t)n * sizeof(*t->pl));
            t->pp = pps[j];
            t->vpp = vpp;
            t->n = n;
            s->num_ptables++;
        }
    }
    qsort(s->ptables, (size_t)s->num_ptables, sizeof(*s->ptables), ptable_cmp);
    return MOE_OK;
}

static enum moe_status search_run(struct search *s,
                                  struct worker *ws,
                                  int nthreads,
                                  double t0,
                                  struct moe_plan_result *res,
                                  struct moe_diag *diag)
{
    MOE_TRY(build_nodes(s, diag));
    if (s->num_nodes == 0) {
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "no parallel sizes divide %d GPUs with global batch %d and sequence "
                            "length %d under the given constraints; relax --fix or change the "
                            "batch",
                            s->req->num_gpus, s->req->gbs, s->req->seq_length);
    }
    MOE_TRY(placement_tables(s, ws[0].pl, diag));
    if (key_order_init(s) != MOE_OK) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the planner's nodes");
    }
    MOE_TRY(run_phase(s, ws, nthreads, PHASE_KEYS, t0));
    MOE_TRY(run_phase(s, ws, nthreads, PHASE_NODES, t0));
    qsort(s->nodes, (size_t)s->num_nodes, sizeof(*s->nodes), node_cmp);
    if (order_init(s) != MOE_OK) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the planner's nodes");
    }
    MOE_TRY(run_phase(s, ws, nthreads, PHASE_SEARCH, t0));
    for (int i = 0; i < nthreads; i++) {
        sum_counters(&res->stats, &ws[i].c);
    }
    if (s->sh.num_top == 0) {
        /* Nothing fits: find the plan with the least memory (smallest static bound first). */
        qsort(s->nodes, (size_t)s->num_nodes, sizeof(*s->nodes), node_mem_cmp);
        MOE_TRY(run_phase(s, ws, nthreads, PHASE_CLOSEST, t0));
        if (res->stats.layouts == 0 && !s->sh.has_closest) {
            return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                                "no valid layout for %d GPUs, global batch %d, sequence length %d "
                                "under the given constraints; relax --fix or change the batch",
                                s->req->num_gpus, s->req->gbs, s->req->seq_length);
        }
    }
    res->stats.threads = nthreads;
    res->stats.bound_violations = atomic_load(&s->sh.violations);
    res->num_faster = atomic_load(&s->sh.faster);
    return collect(s, res, diag);
}

enum moe_status moe_plan_search(const struct moe_plan_request *req,
                                struct moe_plan_result *res,
                                struct moe_diag *diag)
{
    memset(res, 0, sizeof(*res));
    MOE_TRY(check_request(req, diag));
    double t0 = now_s();
    struct search *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the planner");
    }
    s->req = req;
    enum moe_status st = moe_plan_space_init(&s->sp, req, diag);
    if (st != MOE_OK) {
        free(s);
        return st;
    }
    moe_plan_bound_model_init(req->cfg, &s->bm);
    moe_cost_prepare(req->cfg, &s->prep);
    fine_order_init(s);
    space_sizes_init(s);
    s->cap = req->cl->gpu.hbm_gib * GIB;
    if (req->max_memory_bytes > 0.0 && req->max_memory_bytes < s->cap) {
        s->cap = req->max_memory_bytes;
    }
    s->host_cap = req->cl->host.mem_gib_per_gpu * GIB;
    s->ctx_bytes = req->cl->overheads.context_gib * GIB;
    res->cap_bytes = s->cap;
    shared_init(&s->sh, req->top_k * 2 + 8);
    s->sh.top = calloc((size_t)s->sh.keep, sizeof(*s->sh.top));
    int nthreads = req->num_threads > 0 ? req->num_threads : online_cpus();
    nthreads = nthreads > MAX_THREADS ? MAX_THREADS : nthreads;
    struct worker *ws = s->sh.top != NULL ? workers_create(s, nthreads) : NULL;
    if (ws == NULL) {
        st = moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the planner's workers");
    } else {
        st = search_run(s, ws, nthreads, t0, res, diag);
        if (st == MOE_ERR_NOMEM && diag != NULL && diag->message[0] == '\0') {
            (void)moe_diag_set(diag, st, "the planner ran out of memory");
        }
    }
    res->stats.wall_s = now_s() - t0;
    workers_free(ws, nthreads);
    pthread_mutex_destroy(&s->sh.mu);
    free(s->sh.top);
    free(s->sh.pareto);
    for (int i = 0; i < s->num_ptables; i++) {
        free(s->ptables[i].pl);
    }
    free(s->ptables);
    free(s->keys);
    free(s->key_order);
    free(s->nodes);
    order_free(&s->order);
    free(s);
    if (st != MOE_OK) {
        moe_plan_result_free(res);
    }
    return st;
}
