/*
 * Private to the planner's search (planner/search*.c): its records, the state it shares among
 * threads and keeps per thread, and the functions its files call in each other. Public API:
 * planner/search.h. Only the search's own files include this header.
 *
 * Words every comment of the search uses (the file that owns each in brackets):
 *   candidate  a layout with one value of every option knob: what moe_cost_predict prices.
 *   key        the sizes the per-layer bounds read: tp, cp, ep, etp, micro-batch size and sequence
 *              parallelism (struct layer_key) [search_nodes.c].
 *   node       a key with pp: the unit of work, each taken by one thread once, best bound first
 *              (struct node) [search_nodes.c builds them, search_order.c orders them].
 *   layout     a node with vpp and a placement of the layers on the stages, resolved by
 *              moe_layout_resolve (w->lay, its knobs w->lk) [search_layout.c].
 *   group      an option group: recipe x optimizer (distributed, CPU offload) x dispatcher x
 *              grouped GEMM x EP overlap, searched with every recompute, activation-offload and
 *              time-only value [search_group.c].
 *   d          a group's dominator: no recompute, no activation offload and the dominant
 *              time-only values (TP overlap on, full-iteration CUDA graph), predicted first.
 *   r, f, X    a recompute value (its row of offload values), an activation-offload value, a
 *              time-only value (TP overlap x CUDA graph; X* the dominant one). Values "of every
 *              layer count" (full recompute, CPU offloading) stand for one value per count.
 *   fine set   a fine-grained activation-offload module set [search_offload.c].
 *   memo       an option set's worst-stage memory on the current layout, from the activation
 *              views of its recompute and offload sets (struct memo) [search_memory.c].
 *   validity   whether Megatron accepts an option set on the current layout, cached per layout
 *              class (struct vmemo) [search_valid.c].
 *   front      the Pareto staircase of fitting plans (memory ascending, step time descending)
 *              and each worker's copy of it; prune, the test every bound goes through
 *              [search_front.c].
 *   top list   the best plan of each of the best layouts; closest, the least-memory plan when
 *              nothing fits [search_results.c].
 *   worker     a thread's state and caches (struct worker); the phases [search_threads.c].
 * Times are seconds, memory bytes per GPU, unless a name says otherwise.
 */
#ifndef MOE_PLANNER_SEARCH_INTERNAL_H
#define MOE_PLANNER_SEARCH_INTERNAL_H

#include "model/cost.h"
#include "model/layout.h"
#include "model/memory.h"
#include "planner/bound.h"
#include "planner/search.h"
#include "planner/space.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PARETO_BUCKETS 1024
#define MAX_THREADS    64
#define VALID_LOG2     16   /* hash validity cache (per layer count): 64k entries per thread */
#define VCOUNT_LOG2    14   /* per-count verdicts of the current layout class, per thread */
#define STATIC_SLOTS   4096 /* static-memory bound cache per thread */
#define MAX_PLACEMENTS 4096
#define MAX_DIV        256
#define TERMS_SLOTS    64 /* per-thread cache of layer terms, by key index */
#define VIEW_SLOTS     4096
#define MEM_SLOTS      4096
#define MAX_X          (2 * MOE_PLAN_MAX_GRAPHS)
#define NODE_DIMS      6 /* tp, cp, pp, ep, etp, mbs */

/* ---- Records of plans ------------------------------------------------------------------------ */

/* Compact record of one evaluated plan. */
struct entry {
    struct moe_plan_lkey lk;
    struct moe_plan_okey ok;
    double t; /* closed-form step time */
    double m; /* worst-stage memory, bytes */
};

/* The knob order: the total order that breaks ties (moe_plan_knob_cmp on keys). */
static inline int key_cmp(const struct entry *a, const struct entry *b)
{
    int c = moe_plan_lkey_cmp(&a->lk, &b->lk);
    return c != 0 ? c : moe_plan_okey_cmp(&a->ok, &b->ok);
}

/* The ranking: step time, ties by the knob order. */
static inline int entry_cmp(const struct entry *a, const struct entry *b)
{
    if (a->t != b->t) {
        return a->t < b->t ? -1 : 1;
    }
    return key_cmp(a, b);
}

/* A staircase point in a worker's copy (pareto_open reads only these). */
struct point {
    double m, t;
};

/* ---- Nodes, keys and placements (search_nodes.c, search_order.c, search_layout.c) ----------- */

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
    /* lb and lb0 at the sizes' expert load (moe_plan_bound_load; under --moe-imbalance auto a
     * Monte Carlo the evaluation runs anyway), computed by the first worker to search a node of
     * the key that its load-1 bound does not prune (moe_search_key_load): 0 not yet, 1 being
     * computed, 2 ready (load, llb, llb0 set; read after an acquire load of 2). */
    atomic_int load_state;
    double load;
    struct moe_plan_kind_lb llb, llb0;
};

struct terms_slot {
    long key;
    struct moe_plan_layer_terms t;
};

struct placement {
    int place, first, last;
    int max_layers; /* layers (MTP counted as one) some rank must hold: the quick bound */
};

struct ptable {
    int pp, vpp, n;
    struct placement *pl;
};

/* The order nodes are taken in (search_order.c). */
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

/* ---- State shared by the threads ------------------------------------------------------------- */

/* Thresholds, the top list, the Pareto staircase and the closest plan (search_front.c,
 * search_results.c); work counters of the running phase (search_threads.c). */
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

/* One search: the request, its space and bound model, the nodes and what every thread reads. */
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

/* ---- A worker's state and caches ------------------------------------------------------------- */

struct counters {
    double enumerated, pruned_memory, pruned_time, invalid, evaluated, mem_evaluated;
    long layouts;
    long validity_mismatches; /* pairwise validity accepted what a full resolve refused */
    long memory_mismatches;   /* memory_of disagreed with a prediction's memory */
};

/* Layer activations after recompute and offload of one option set (layer_set). */
struct view_slot {
    long serial; /* view_serial */
    uint64_t key;
    struct moe_act_bytes dense, moe;
    double copy_load; /* load factor of copy_s (NAN: none yet) */
    double copy_s[2]; /* offload copy per dense / MoE layer pass (offload_time_bound) */
};

/* Memory of one option set on the current layout (memory_of); groups that differ only in options
 * the memory model does not read (moe_mem_opt_key) share it. */
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
    struct vcount *n; /* [1 << VCOUNT_LOG2] direct-mapped (count_verdict) */
};

/* The verdict of one layer count of an "every layer count" recompute (idx: its list index) or
 * offload value (idx: -1 - its list index) in option group gi, under stamp (0: empty). */
struct vcount {
    uint32_t stamp;
    int32_t gi;
    int16_t idx;
    uint16_t count;
    bool valid;
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
    struct moe_plan_bound_spans *spans; /* w->lay's, for its group bounds (prepare_layout) */
    /* Recompute terms and per-rank sums, one slot per grouped-GEMM index (the groups alternate
     * between the two). */
    long rc_key[2]; /* key index, its load's use, recipe and grouped of rc_terms; -1 none */
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
    double key_load; /* the current node's key's load factor for the bounds (1 until known) */
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

/* Growth kinds of a dominated candidate (moe_search_dominance_slack, search_group.c). */
enum {
    GROW_ALL = 0x1f,    /* bit k: decoder-layer kind k */
    GROW_EXTRAS = 0x10, /* embedding, loss and MTP extras */
    GROW_PASSES = 0x20, /* no pass shorter in either direction, EP overlap or not */
};

/* The phases of a search, each a parallel loop over keys or nodes (search_threads.c). */
enum phase {
    PHASE_KEYS = 0,  /* per-layer bounds of each size key */
    PHASE_NODES = 1, /* bound of each node */
    PHASE_SEARCH = 2,
    PHASE_CLOSEST = 3,
};

/* Set k's recompute / activation-offload knobs to a list value. */
static inline void set_rc(struct moe_plan_okey *k, const struct moe_plan_rc *r)
{
    k->rc = r->rc;
    k->rc_method = r->method;
    k->rc_mods = r->mods;
    k->rc_layers = r->layers;
}

static inline void set_off(struct moe_plan_okey *k, const struct moe_plan_off *f)
{
    k->off = f->off;
    k->off_mods = f->mods;
    k->off_layers = f->layers;
}

/* ---- search_nodes.c: sizes, keys and nodes; their bounds ------------------------------------ */

/* Every node of the request's sizes (s->nodes, s->keys); MOE_ERR_NOMEM with a message. */
MOE_NODISCARD enum moe_status moe_search_build_nodes(struct search *s, struct moe_diag *diag);
/* The key phase's order (s->key_order); MOE_ERR_NOMEM. */
MOE_NODISCARD enum moe_status moe_search_key_order_init(struct search *s);
/* Per-layer bounds of a key (phase 1) and a node's bound over its vpp values (phase 2). */
void moe_search_key_bound(struct worker *w, struct layer_key *k);
void moe_search_node_bound(struct search *s, struct node *nd);
/* Whether k's load-aware bounds (llb, llb0, load) are ready: computes them unless another worker
 * is at it (meanwhile the load-1 bounds serve: they are lower). Phase 3. */
bool moe_search_key_load(struct worker *w, struct layer_key *k);

/* ---- search_order.c: the order nodes are taken in -------------------------------------------- */

/* qsort orders: ascending bound (the search), ascending static memory (closest); knobs break
 * ties. */
int moe_search_node_cmp(const void *pa, const void *pb);
int moe_search_node_mem_cmp(const void *pa, const void *pb);
/* After the nodes are sorted; MOE_ERR_NOMEM. */
MOE_NODISCARD enum moe_status moe_search_order_init(struct search *s);
void moe_search_order_free(struct node_order *o);
/* Queue nd's leaner neighbours (nd put plans on the front); the next node to search, -1 at the
 * end. */
void moe_search_order_pull(struct worker *w, const struct node *nd);
long moe_search_order_take(struct search *s);

/* ---- search_layout.c: vpp, placements and layouts of a node ---------------------------------- */

/* The placements of every (pp, vpp) the nodes use (s->ptables), scratch[MAX_PLACEMENTS]. */
MOE_NODISCARD enum moe_status
moe_search_placement_tables(struct search *s, struct placement *scratch, struct moe_diag *diag);
int moe_search_vpp_max(const struct search *s, int pp);
bool moe_search_vpp_ok(const struct search *s, const struct node *nd, int vpp);
/* A layout with a node's sizes and vpp (not resolved). */
void moe_search_fill_sizes(const struct search *s,
                           const struct node *nd,
                           int vpp,
                           struct moe_layout *l);
/* Search every layout of a node (phase 3); the least-memory plan of its layouts (phase 4). */
void moe_search_node(struct worker *w, const struct node *nd);
void moe_search_closest_node(struct worker *w, const struct node *nd);

/* ---- search_group.c: option groups, recompute rows and time-only values ---------------------- */

/* Each option group of the current layout. */
void moe_search_options(struct worker *w);
/* The time-only values of the current layout (w->xl). */
void moe_search_x_list(struct worker *w);
/* Index of an option group in the validity memo; its base knobs. */
int moe_search_group_index(const struct moe_plan_space *sp, int ri, int si, int di, int gi, int ai);
void moe_search_group_key(const struct worker *w,
                          int ri,
                          int si,
                          int dispatcher,
                          int gi,
                          int ai,
                          struct moe_plan_okey *k);
/* Which growth kinds satisfy g_k >= 0 on the current layout (w->grow_ok). */
unsigned moe_search_grow_ok_mask(const struct worker *w);
/* How much faster than its dominator d (prediction p) a candidate growing in `grows` can be. */
double moe_search_dominance_slack(const struct worker *w,
                                  const struct moe_plan_okey *d,
                                  const struct moe_prediction *p,
                                  unsigned grows);
/* Predict options opt on the current layout (closed form); counted. */
bool moe_search_predict(struct worker *w,
                        const struct moe_options *opt,
                        struct moe_prediction *out);
/* Count a violation when p is below the bound lb it was kept or skipped with. */
void moe_search_check_lb(struct worker *w, double lb, const struct moe_prediction *p);
/* Evaluate k (memory known) with time bound lb, then its time-only variants; true when predicted.
 */
bool moe_search_eval_candidate(struct worker *w,
                               const struct moe_plan_okey *k,
                               double lb,
                               const struct memo *mem,
                               struct moe_prediction *p);
/* Evaluate k, expanding its "every layer count" values (mst: the group's memory bound). */
bool moe_search_eval_expanded(struct worker *w,
                              const struct moe_plan_okey *k,
                              double lb,
                              double mst,
                              struct moe_prediction *p,
                              struct memo *mem_out);
/* Layer counts k's recompute (rc) or offload value expands to (0: not "every layer count"); the
 * values list entry ri / fi stands for. */
int moe_search_layer_choices(const struct worker *w, const struct moe_plan_okey *k, bool rc);
double moe_search_rc_mult(const struct worker *w, int ri);
double moe_search_off_mult(const struct worker *w, int fi);

/* ---- search_offload.c: activation offload under each recompute row --------------------------- */

/* Every activation-offload value of every recompute row of the group of dominator dom (mst: the
 * group's memory bound; lb_r, pr_r, has_r: each row's bound and, when predicted, its prediction
 * without offload). */
void moe_search_offload_rows(struct worker *w,
                             const struct moe_plan_okey *dom,
                             double mst,
                             const double *lb_r,
                             const struct moe_prediction *pr_r,
                             const bool *has_r);

/* ---- search_memory.c: memory of option sets on the current layout ---------------------------- */

void moe_search_memory_of(struct worker *w, const struct moe_options *opt, struct memo *out);
bool moe_search_memo_fits(const struct search *s, const struct memo *m);
/* The activation views of opt, with (off) or without its offload set. */
struct view_slot *moe_search_view_of(struct worker *w, const struct moe_options *opt, bool off);
/* Static memory of the worst rank per recipe and optimizer (w->static_ps); the least of them. */
double moe_search_static_bounds(struct worker *w);
/* Expert-load statistics and load factor of the current layout; what the views read of it. */
void moe_search_load_for_layout(struct worker *w);
void moe_search_views_for_layout(struct worker *w);

/* ---- search_valid.c: option validity --------------------------------------------------------- */

/* Start stamping verdicts for the current layout's class. */
void moe_search_vmemo_layout(struct worker *w);
/* Is okey k of the current group valid (cached by parts and pairs; full: one resolve)? */
bool moe_search_valid(struct worker *w, const struct moe_plan_okey *k);
bool moe_search_valid_full(struct worker *w, const struct moe_plan_okey *k);

/* ---- search_front.c: the Pareto staircase and the prune test --------------------------------- */

/* Can no candidate with step time >= lb_t, memory >= lb_m and knobs >= kmin (NULL: any) reach
 * the results? */
bool moe_search_prune(struct worker *w, double lb_t, double lb_m, const struct moe_plan_okey *kmin);
/* Could a plan with step time >= lb_t and memory >= lb_m still enter the Pareto front? */
bool moe_search_pareto_open(struct worker *w, double lb_t, double lb_m);
/* Insert e unless a point dominates it; caller holds sh->mu. False when out of memory. */
bool moe_search_pareto_insert(struct shared *sh, const struct entry *e, bool *added);

/* ---- search_results.c: the top list, the closest plan, the result ---------------------------- */

/* Record a valid evaluated plan (k on the current layout, prediction p). */
void moe_search_record(struct worker *w,
                       const struct moe_plan_okey *k,
                       const struct moe_prediction *p);
/* Offer a layout's best plan to the top list; a plan's memory to the closest pass. */
void moe_search_offer_top(struct search *s, const struct entry *e);
void moe_search_offer_closest(struct worker *w, const struct entry *e);
/* The top list, the front and the closest plan as candidates in res. */
MOE_NODISCARD enum moe_status
moe_search_collect(struct search *s, struct moe_plan_result *res, struct moe_diag *diag);

/* ---- search_threads.c: workers and phases ---------------------------------------------------- */

struct worker *moe_search_workers_create(struct search *s, int n);
void moe_search_workers_free(struct worker *ws, int n);
/* Run one phase on nthreads workers (progress from the calling thread); MOE_ERR_NOMEM. */
MOE_NODISCARD enum moe_status moe_search_run_phase(
    struct search *s, struct worker *ws, int nthreads, enum phase phase, double t0);
void moe_search_sum_counters(struct moe_plan_stats *st, const struct counters *c);
double moe_search_now_s(void);
int moe_search_online_cpus(void);

#endif /* MOE_PLANNER_SEARCH_INTERNAL_H */
