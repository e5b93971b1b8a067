/*
 * Hierarchical token dispatcher (engine/hier.h), after DeepEP's internode kernels: the EP group
 * is N nodes x P ranks (consecutive EP ranks per node); rank (a, i) sends each of its tokens once
 * to the proxy (b, i) of every node b that holds one of the token's kept experts (cross-node
 * all-to-all-v over the "ep_cross" group: same index i, one rank per node), together with the
 * token's top-k expert ids restricted to node b and its top-k weights. The proxy expands each
 * copy into one row per kept slot and forwards the rows to the node-local ranks owning those
 * experts (all-to-all-v over "ep_node"), expert-major per destination. The combine runs the same
 * path backwards: expert outputs return to the proxy, which applies the top-k weights and sends one
 * partial sum per (token, node) back; the token's owner adds the partial sums of its nodes.
 * Backward passes mirror both steps (the gradient of each top-k weight is computed at the proxy
 * that holds the expert output and returned with the partial-sum path).
 *
 * Traffic: a token crosses the network once per remote node instead of once per remote expert;
 * inside a node it travels once per expert (the NVLink hop in DeepEP). Results equal the flat
 * dispatcher's up to the order of the final sums (per node first).
 *
 * Buffers are carved at their bounds (copies <= nodes x Ms per proxy, rows <= copies x min(K,
 * P x El)) so the per-op temporaries have a fixed size the engine sizes in advance.
 */
#include "engine/hier.h"

#include "engine/check.h"

#include <string.h>

/* ---- Routing helpers -------------------------------------------------------------------- */

static int node_of(const struct moe_eng_dims *d, int expert)
{
    return expert / d->experts_l / d->hier_per_node;
}

static bool
slot_on(const struct moe_eng_dims *d, const struct moe_eng_layer_act *a, int t, int k, int node)
{
    int s = t * d->topk + k;
    return a->slot_to_row[s] >= 0 && node_of(d, a->topk_idx[s]) == node;
}

static bool
token_on(const struct moe_eng_dims *d, const struct moe_eng_layer_act *a, int t, int node)
{
    for (int k = 0; k < d->topk; k++) {
        if (slot_on(d, a, t, k, node)) {
            return true;
        }
    }
    return false;
}

/* ---- Buffers (carved at their bounds; the sizing pass replays the same carves) ----------- */

struct xbuf {
    int *sc, *sd, *rc, *rd; /* all-to-all-v counts and displacements, [max(N, P)] */
};

struct hbufs {
    struct xbuf x;
    float *copies_out; /* [N Ms, C] token copies (or their gradients) leaving this rank */
    float *copies_in;  /* [N Ms, C] copies arriving at this proxy */
    int *meta_out;     /* [N Ms, K] expert ids sent with the copies */
    float *w_out;      /* [N Ms, K] top-k weights (or their gradients) sent with the copies */
    int *meta_in;      /* [N Ms, K] */
    float *rows;       /* [hier_rows, C] rows at the proxy */
    float *recv;       /* [rows_recv, C] rows at the experts' rank, forwarding-rank-major */
    int *chunk_order;  /* [P El] */
    int *rows_a;       /* [P] rows per node-local rank (one side of a forwarding exchange) */
    int *rows_b;       /* [P] the other side */
};

static void carve(const struct moe_eng *e, struct moe_eng_arena *t, struct hbufs *b)
{
    const struct moe_eng_dims *d = &e->d;
    size_t n = (size_t)(d->hier_nodes > d->hier_per_node ? d->hier_nodes : d->hier_per_node);
    size_t copies = (size_t)d->hier_copies;
    size_t C = (size_t)d->hidden, K = (size_t)d->topk;
    b->x.sc = moe_eng_arena_ints(t, n);
    b->x.sd = moe_eng_arena_ints(t, n);
    b->x.rc = moe_eng_arena_ints(t, n);
    b->x.rd = moe_eng_arena_ints(t, n);
    b->copies_out = moe_eng_arena_floats(t, copies * C);
    b->copies_in = moe_eng_arena_floats(t, copies * C);
    b->meta_out = moe_eng_arena_ints(t, copies * K);
    b->w_out = moe_eng_arena_floats(t, copies * K);
    b->meta_in = moe_eng_arena_ints(t, copies * K);
    b->rows = moe_eng_arena_floats(t, (size_t)d->hier_rows * C);
    b->recv = moe_eng_arena_floats(t, (size_t)d->rows_recv * C);
    b->chunk_order = moe_eng_arena_ints(t, (size_t)d->hier_per_node * (size_t)d->experts_l);
    b->rows_a = moe_eng_arena_ints(t, (size_t)d->hier_per_node);
    b->rows_b = moe_eng_arena_ints(t, (size_t)d->hier_per_node);
}

void moe_eng_hier_temp_sim(const struct moe_eng *e, struct moe_eng_arena *sim)
{
    struct hbufs b;
    carve(e, sim, &b);
}

/* ---- Exchanges ------------------------------------------------------------------------------ */

/* All-to-all-v over g with per-peer element counts send_n[i] * width (and recv likewise). */
static void exchange(moe_comm_t *g,
                     struct xbuf *x,
                     const void *send,
                     const int *send_n,
                     void *recv,
                     const int *recv_n,
                     int width,
                     enum moe_comm_dtype dt)
{
    int n = moe_comm_size(g);
    int so = 0, ro = 0;
    for (int i = 0; i < n; i++) {
        x->sc[i] = send_n[i] * width;
        x->sd[i] = so;
        so += x->sc[i];
        x->rc[i] = recv_n[i] * width;
        x->rd[i] = ro;
        ro += x->rc[i];
    }
    moe_comm_alltoallv(g, send, x->sc, x->sd, recv, x->rc, x->rd, dt);
}

static int sum(const int *v, int n)
{
    int s = 0;
    for (int i = 0; i < n; i++) {
        s += v[i];
    }
    return s;
}

/* Rows per forwarding rank p (sum over its El experts) from counts [P, El]. */
static void per_rank_rows(const struct moe_eng_dims *d, const int *cnt, int *rows)
{
    for (int p = 0; p < d->hier_per_node; p++) {
        rows[p] = sum(cnt + (size_t)p * (size_t)d->experts_l, d->experts_l);
    }
}

/* Expert-major order of chunks (p, el): el outer, p inner. */
static void expert_major(const struct moe_eng_dims *d, int *order)
{
    int k = 0;
    for (int el = 0; el < d->experts_l; el++) {
        for (int p = 0; p < d->hier_per_node; p++) {
            order[k++] = p * d->experts_l + el;
        }
    }
}

/* Copies of this rank's tokens, node by node in token order: src[Ms, cols] -> dst[.., cols]. */
static void gather_copies(const struct moe_eng *e,
                          const struct moe_eng_layer_act *a,
                          const float *src,
                          float *dst,
                          int cols)
{
    const struct moe_eng_dims *d = &e->d;
    size_t off = 0;
    for (int b = 0; b < d->hier_nodes; b++) {
        for (int t = 0; t < d->tokens_sp; t++) {
            if (token_on(d, a, t, b)) {
                memcpy(dst + off * (size_t)cols, src + (size_t)t * (size_t)cols,
                       (size_t)cols * sizeof(float));
                off++;
            }
        }
    }
}

/* dst[t] += the copies' rows (node by node, the order gather_copies wrote them). */
static void add_copies(const struct moe_eng *e,
                       const struct moe_eng_layer_act *a,
                       const float *src,
                       float *dst,
                       int cols)
{
    const struct moe_eng_dims *d = &e->d;
    size_t off = 0;
    for (int b = 0; b < d->hier_nodes; b++) {
        for (int t = 0; t < d->tokens_sp; t++) {
            if (token_on(d, a, t, b)) {
                e->k->axpy(dst + (size_t)t * (size_t)cols, src + off * (size_t)cols, (size_t)cols,
                           1.0f, e->kc);
                off++;
            }
        }
    }
}

/* ---- Dispatch --------------------------------------------------------------------------- */

/* Proxy side: one row per kept slot, grouped by destination rank and its local experts. */
static int
build_rows(const struct moe_eng_dims *d, struct moe_eng_layer_act *a, const int *meta, int copies)
{
    int K = d->topk, El = d->experts_l, P = d->hier_per_node;
    for (int s = 0; s < copies * K; s++) {
        a->h_s2r[s] = -1;
    }
    memset(a->h_cnt, 0, (size_t)P * (size_t)El * sizeof(int));
    int j = 0;
    for (int p = 0; p < P; p++) {
        for (int el = 0; el < El; el++) {
            for (int q = 0; q < copies; q++) {
                for (int k = 0; k < K; k++) {
                    int ex = meta[q * K + k];
                    if (ex >= 0 && (ex / El) % P == p && ex % El == el) {
                        a->h_r2s[j] = q * K + k;
                        a->h_s2r[q * K + k] = j;
                        a->h_cnt[p * El + el]++;
                        j++;
                    }
                }
            }
        }
    }
    return j;
}

void moe_eng_hier_dispatch(struct moe_eng *e, struct moe_eng_layer_act *a, const float *h)
{
    const struct moe_eng_dims *d = &e->d;
    int K = d->topk, C = d->hidden, El = d->experts_l, P = d->hier_per_node;
    size_t mark = moe_eng_arena_mark(&e->temp);
    struct hbufs b;
    carve(e, &e->temp, &b);
    /* 1. One copy per (token, node holding a kept expert), with the node's expert ids. */
    size_t off = 0;
    for (int n = 0; n < d->hier_nodes; n++) {
        int c = 0;
        for (int t = 0; t < d->tokens_sp; t++) {
            if (!token_on(d, a, t, n)) {
                continue;
            }
            for (int k = 0; k < K; k++) {
                b.meta_out[off * (size_t)K + (size_t)k] =
                    slot_on(d, a, t, k, n) ? a->topk_idx[t * K + k] : -1;
                b.w_out[off * (size_t)K + (size_t)k] = a->topk_w[t * K + k];
            }
            off++;
            c++;
        }
        a->h_sent[n] = c;
    }
    gather_copies(e, a, h, b.copies_out, C);
    moe_comm_t *cross = e->groups.ep_cross;
    moe_comm_alltoall(cross, a->h_sent, a->h_recv, 1, MOE_COMM_I32);
    int copies = sum(a->h_recv, d->hier_nodes);
    exchange(cross, &b.x, b.copies_out, a->h_sent, b.copies_in, a->h_recv, C, MOE_COMM_F32);
    exchange(cross, &b.x, b.meta_out, a->h_sent, b.meta_in, a->h_recv, K, MOE_COMM_I32);
    exchange(cross, &b.x, b.w_out, a->h_sent, a->h_w, a->h_recv, K, MOE_COMM_F32);
    /* 2. Forward inside the node: rows expert-major per destination rank. */
    int rows = build_rows(d, a, b.meta_in, copies);
    e->k->permute(b.rows, b.copies_in, a->h_r2s, rows, K, C, e->kc);
    moe_comm_t *node = e->groups.ep_node;
    size_t nc = (size_t)d->ep * (size_t)El;
    memset(a->gath_counts, 0, nc * sizeof(int));
    memset(a->recv_counts, 0, nc * sizeof(int));
    moe_comm_alltoall(node, a->h_cnt, a->gath_counts, (size_t)El, MOE_COMM_I32);
    int *send_rows = b.rows_a;
    int *recv_rows = b.rows_b;
    per_rank_rows(d, a->h_cnt, send_rows);
    per_rank_rows(d, a->gath_counts, recv_rows);
    int got = sum(recv_rows, P);
    if (got > d->rows_recv) {
        moe_eng_fatal(__FILE__, __LINE__,
                      "expert load exceeded the receive buffer (%d rows > %d); rerun with a "
                      "larger --moe-buffer-factor or 0 (worst case)",
                      got, d->rows_recv);
    }
    exchange(node, &b.x, b.rows, send_rows, b.recv, recv_rows, C, MOE_COMM_F32);
    expert_major(d, b.chunk_order);
    e->k->sort_chunks(a->xe, b.recv, a->gath_counts, b.chunk_order, P * El, C, e->kc);
    moe_eng_arena_release(&e->temp, mark);
}

/* ---- Combine ------------------------------------------------------------------------------ */

/* Expert-major rows [R, C] back to the proxies' forwarding order, into rows_out[hier_rows, C]. */
static void rows_to_proxies(struct moe_eng *e,
                            struct moe_eng_layer_act *a,
                            struct hbufs *b,
                            const float *expert_major_rows,
                            float *rows_out)
{
    const struct moe_eng_dims *d = &e->d;
    int P = d->hier_per_node, El = d->experts_l;
    expert_major(d, b->chunk_order);
    e->k->unsort_chunks(b->recv, expert_major_rows, a->gath_counts, b->chunk_order, P * El,
                        d->hidden, e->kc);
    int *at_experts = b->rows_a; /* rows per forwarding rank, seen from the experts' rank */
    int *at_proxy = b->rows_b;
    per_rank_rows(d, a->gath_counts, at_experts);
    per_rank_rows(d, a->h_cnt, at_proxy);
    exchange(e->groups.ep_node, &b->x, b->recv, at_experts, rows_out, at_proxy, d->hidden,
             MOE_COMM_F32);
}

/* Proxy rows [rows, C] to the experts' rank, expert-major (the dispatch's second step). */
static void rows_to_experts(struct moe_eng *e,
                            struct moe_eng_layer_act *a,
                            struct hbufs *b,
                            const float *proxy_rows,
                            float *expert_major_rows)
{
    const struct moe_eng_dims *d = &e->d;
    int P = d->hier_per_node, El = d->experts_l;
    int *at_proxy = b->rows_a;
    int *at_experts = b->rows_b;
    per_rank_rows(d, a->h_cnt, at_proxy);
    per_rank_rows(d, a->gath_counts, at_experts);
    exchange(e->groups.ep_node, &b->x, proxy_rows, at_proxy, b->recv, at_experts, d->hidden,
             MOE_COMM_F32);
    expert_major(d, b->chunk_order);
    e->k->sort_chunks(expert_major_rows, b->recv, a->gath_counts, b->chunk_order, P * El, d->hidden,
                      e->kc);
}

void moe_eng_hier_combine(struct moe_eng *e,
                          struct moe_eng_layer_act *a,
                          const float *eout,
                          float *out)
{
    const struct moe_eng_dims *d = &e->d;
    int K = d->topk, C = d->hidden;
    size_t mark = moe_eng_arena_mark(&e->temp);
    struct hbufs b;
    carve(e, &e->temp, &b);
    rows_to_proxies(e, a, &b, eout, a->y_rows);
    int copies = sum(a->h_recv, d->hier_nodes);
    /* One weighted partial sum per copy (this node's experts), back to the token's owner. */
    e->k->unpermute(b.copies_in, a->y_rows, a->h_w, a->h_s2r, copies, K, C, e->kc);
    exchange(e->groups.ep_cross, &b.x, b.copies_in, a->h_recv, b.copies_out, a->h_sent, C,
             MOE_COMM_F32);
    memset(out, 0, (size_t)d->tokens_sp * (size_t)C * sizeof(float));
    add_copies(e, a, b.copies_out, out, C);
    moe_eng_arena_release(&e->temp, mark);
}

void moe_eng_hier_combine_bwd(struct moe_eng *e,
                              struct moe_eng_layer_act *a,
                              const float *dout,
                              float *d_eout,
                              float *d_topk_w)
{
    const struct moe_eng_dims *d = &e->d;
    int K = d->topk, C = d->hidden;
    size_t mark = moe_eng_arena_mark(&e->temp);
    struct hbufs b;
    carve(e, &e->temp, &b);
    moe_comm_t *cross = e->groups.ep_cross;
    gather_copies(e, a, dout, b.copies_out, C);
    exchange(cross, &b.x, b.copies_out, a->h_sent, b.copies_in, a->h_recv, C, MOE_COMM_F32);
    int copies = sum(a->h_recv, d->hier_nodes);
    e->k->unpermute_bwd(b.rows, b.w_out, b.copies_in, a->y_rows, a->h_w, a->h_s2r, copies, K, C,
                        e->kc);
    /* Weight gradients return with the partial-sum path; each slot is nonzero on one node. */
    float *dw_home = b.copies_out; /* [sent, K]: K <= C floats per copy fit */
    exchange(cross, &b.x, b.w_out, a->h_recv, dw_home, a->h_sent, K, MOE_COMM_F32);
    memset(d_topk_w, 0, (size_t)d->tokens_sp * (size_t)K * sizeof(float));
    add_copies(e, a, dw_home, d_topk_w, K);
    rows_to_experts(e, a, &b, b.rows, d_eout);
    moe_eng_arena_release(&e->temp, mark);
}

void moe_eng_hier_dispatch_bwd(struct moe_eng *e,
                               struct moe_eng_layer_act *a,
                               const float *d_xe,
                               float *dh)
{
    const struct moe_eng_dims *d = &e->d;
    int K = d->topk, C = d->hidden;
    size_t mark = moe_eng_arena_mark(&e->temp);
    struct hbufs b;
    carve(e, &e->temp, &b);
    rows_to_proxies(e, a, &b, d_xe, b.rows);
    int copies = sum(a->h_recv, d->hier_nodes);
    e->k->permute_bwd(b.copies_in, b.rows, a->h_s2r, copies, K, C, false, e->kc);
    exchange(e->groups.ep_cross, &b.x, b.copies_in, a->h_recv, b.copies_out, a->h_sent, C,
             MOE_COMM_F32);
    add_copies(e, a, b.copies_out, dh, C);
    moe_eng_arena_release(&e->temp, mark);
}
