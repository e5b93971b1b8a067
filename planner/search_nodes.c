/*
 * The search's nodes and their bounds (planner/search_internal.h): every tp, cp, pp, sequence
 * parallelism, ep, etp and micro-batch size the request allows, as nodes over size keys; the
 * per-layer bounds of each key (phase 1, bound.c) and each node's bound over its vpp values
 * (phase 2), by which the nodes are then sorted (search_order.c).
 *
 * Memory bound of a node: some rank of every placement holds ceil(L / pp) layers, none lighter
 * than the lighter kind's (weights, gradients and optimizer state grow with each layer), plus the
 * context and the backward working set every stage holds (the lighter layer kind's, at load factor
 * 1, with the allocator reserve: the memory's is never below). A key no node under the cap uses
 * is never bounded, and its nodes are pruned by memory.
 *
 * Keys are bounded in key_attn order, so that a key whose dense-layer terms and extras equal the
 * previous key's (all but ep and etp; moe_plan_bound_terms' `same`) copies them.
 */
#include "planner/search_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool divides(long a, long b)
{
    return b != 0 && a % b == 0;
}

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

/*
 * Memory every stage of these sizes holds beyond weights, gradients, optimizer state and the
 * context: the backward working set of its largest layer (model/memory.c moe_mem_stage_with adds
 * it to the buffers, which the allocator reserve then grows), at least the lighter kind's, at
 * load factor 1 (the memory's is never below). It grows with the micro-batch: large ones cannot
 * fit whatever the options.
 */
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
    atomic_init(&q->load_state, 0);
    q->load = 1.0;
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

enum moe_status moe_search_build_nodes(struct search *s, struct moe_diag *diag)
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

/* Phase 2: a node's bound, the least over its vpp values (INFINITY when no node of its key can
 * fit: searched last, and pruned by memory). */
void moe_search_node_bound(struct search *s, struct node *nd)
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
    for (int vpp = 1; vpp <= moe_search_vpp_max(s, nd->k.pp); vpp++) {
        if (!moe_search_vpp_ok(s, nd, vpp)) {
            continue;
        }
        struct moe_layout sizes;
        moe_search_fill_sizes(s, nd, vpp, &sizes);
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
enum moe_status moe_search_key_order_init(struct search *s)
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

/* Phase 1: a key's per-layer bounds, the least over every option group (bound.c), with and
 * without the 1F1B EP overlap, at load 1 (a factor >= 1 never makes a step faster): the load
 * under --moe-imbalance auto is a Monte Carlo per (EP, tokens), and most keys' nodes are pruned
 * without it (moe_search_key_load prices it for the others). */
void moe_search_key_bound(struct worker *w, struct layer_key *k)
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
    moe_plan_bound_terms(&s->sp, &s->bm, &lay, 1.0, same ? &w->kterms[0] : NULL, t);
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

bool moe_search_key_load(struct worker *w, struct layer_key *k)
{
    int st = atomic_load_explicit(&k->load_state, memory_order_acquire);
    if (st == 2) {
        return true;
    }
    int expect = 0;
    if (st != 0 || !atomic_compare_exchange_strong(&k->load_state, &expect, 1)) {
        return atomic_load_explicit(&k->load_state, memory_order_acquire) == 2;
    }
    struct search *s = w->s;
    struct moe_layout lay;
    key_layout(s, k, &lay);
    lay.pp = 1;
    k->load = moe_plan_bound_load(&s->sp, &lay);
    k->llb = k->lb;
    k->llb0 = k->lb0;
    if (k->load > 1.0) {
        /* kterms[1] is the key phase's scratch, free in the search phase */
        struct moe_plan_layer_terms *t = &w->kterms[1];
        moe_plan_bound_terms(&s->sp, &s->bm, &lay, k->load, NULL, t);
        moe_plan_bound_least(&s->sp, &s->bm, t, &lay, &k->llb);
        lay.pp = 2;
        lay.vpp = 1;
        moe_plan_bound_least(&s->sp, &s->bm, t, &lay, &k->llb0);
    }
    atomic_store_explicit(&k->load_state, 2, memory_order_release);
    return true;
}
