/*
 * Layout equivalence (moe-test-np: 8): the same model, seed and global batch trained under a dozen
 * folded layouts on 1-8 ranks gives the same 5-step loss curve as one rank, within 1e-5 relative in
 * FP32 -- TP2 with sequence parallelism, CP2, PP2 with VPP2 (interleaved 1F1B), EP2, EP4, ETP2, DP2
 * with the distributed optimizer, TP2 x EP4 folded, TP2/PP2/EP2, and everything at once. Routing
 * differences would show up as loss jumps far above 1e-5, so this checks the dispatch, the
 * reductions and the schedules together. Also: the same layout twice gives bit-identical losses,
 * and expert-parallel experts match replicated experts (EP4 vs DP4 without EP). The presets'
 * miniatures (Qwen3's q/k norm, GPT-OSS's biases, windows and sinks, Kimi-K2's and DeepSeek-V3's
 * MLA, DeepSeek-V3's MTP on the last stage) under the foldings that apply, and the allgather
 * dispatcher (EP2, EP4, EP2 x ETP2, TP2 EP2 PP2), give the same curve. Context parallelism
 * (CP2, CP4, CP8 and folded with TP/PP/EP) uses Megatron's load-balanced causal split, and every
 * CP rank does the same attention work (counted query-key pairs and score FLOPs).
 *
 * All runs share one mpirun: rank subsets form sub-communicators (ranks 0..N-1 run an N-rank layout
 * while the rest wait), so one binary covers every world size.
 */
#include "tests/engine/eng_test.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs setjmp.h, stdarg.h, stddef.h and stdint.h first. */
#include <cmocka.h>

/* moe-test-np: 8 */

enum { STEPS = 5 };
#define REL_TOL 1e-5 /* FP32 reductions in another order; routing flips would be ~1e-2 */

/* Run options beyond the layout. */
struct extra {
    bool overlap;       /* non-blocking gradient reduce-scatter / parameter all-gather */
    int ranks_per_node; /* emulated nodes (0: shared memory) */
    bool hierarchical;  /* hierarchical dispatcher instead of the flat all-to-all */
    bool ep_overlap;    /* one half micro-batch's dispatch/combine behind the other's experts */
    bool no_sp;         /* tp > 1 without sequence parallelism (a MoE model needs it: made dense) */
    bool allgather;     /* Megatron's allgather dispatcher */
};

/* Losses of a layout on ranks 0..world-1 of MPI_COMM_WORLD, broadcast to every rank. */
static enum moe_status run_layout_with(const char *model,
                                       const struct eng_test_layout *l,
                                       const struct extra *x,
                                       double *losses)
{
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (l->world > size) {
        return MOE_ERR_UNSUPPORTED;
    }
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, rank < l->world ? 0 : MPI_UNDEFINED, rank, &sub);
    enum moe_status st = MOE_OK;
    if (sub != MPI_COMM_NULL) {
        struct moe_plan plan;
        eng_test_plan(&plan, model, l);
        if (x->overlap) {
            plan.options.overlap_grad_reduce = true;
            plan.options.overlap_param_gather = plan.options.use_distributed_optimizer;
        }
        struct moe_eng_run_opts o;
        eng_test_opts(&o, STEPS);
        o.ranks_per_node = x->ranks_per_node;
        o.has_dispatcher_override = !x->allgather;
        o.is_hierarchical = x->hierarchical;
        if (x->allgather) {
            plan.options.dispatcher = MOE_DISPATCH_ALLGATHER;
        }
        plan.options.overlap_moe_ep_comm = x->ep_overlap;
        plan.layout.sequence_parallel = l->tp > 1 && !x->no_sp;
        if (x->no_sp) {
            plan.model.num_experts = 0;
            moe_cfg_set_moe_every(&plan.model, 0);
        }
        st = eng_test_losses(sub, &plan, &o, losses);
        MPI_Comm_free(&sub);
    }
    int v = -(int)st;
    int worst = 0;
    MPI_Allreduce(&v, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Bcast(losses, STEPS, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return (enum moe_status)(-worst);
}

static enum moe_status
run_layout(const char *model, const struct eng_test_layout *l, bool overlap, double *losses)
{
    const struct extra x = {overlap, 0, false, false, false, false};
    return run_layout_with(model, l, &x, losses);
}

/* Every layout's 5-step losses within REL_TOL of one rank's, and falling. */
static void check_layouts_with(const char *model,
                               const struct eng_test_layout *ls,
                               int n,
                               const struct extra *x)
{
    const struct eng_test_layout one = {"1 rank", 1, 1, 1, 1, 1, 1, false, 1};
    double ref[STEPS];
    const struct extra rx = {false, 0,        false,
                             false, x->no_sp, false}; /* the same model on one rank */
    assert_int_equal(run_layout_with(model, &one, &rx, ref), MOE_OK);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int i = 0; i < n; i++) {
        double got[STEPS];
        assert_int_equal(run_layout_with(model, &ls[i], x, got), MOE_OK);
        double rel = eng_test_max_rel(got, ref, STEPS);
        if (rank == 0) {
            printf("  %-10s %-34s loss[5] %.7f (1 rank %.7f) max rel diff %.2e\n", model,
                   ls[i].name, got[STEPS - 1], ref[STEPS - 1], rel);
        }
        assert_true(rel <= REL_TOL);
        assert_true(got[STEPS - 1] < got[0]); /* and it trains */
    }
}

static void check_layouts(const char *model, const struct eng_test_layout *ls, int n, bool overlap)
{
    const struct extra x = {overlap, 0, false, false, false, false};
    check_layouts_with(model, ls, n, &x);
}

static void test_tiny_moe_layouts(void **state)
{
    (void)state;
    const struct eng_test_layout ls[] = {
        {"TP2+SP", 2, 1, 1, 1, 1, 1, false, 2},
        {"CP2", 1, 2, 1, 1, 1, 1, false, 2},
        {"PP2 VPP2", 1, 1, 2, 2, 1, 1, false, 2},
        {"EP2", 1, 1, 1, 1, 2, 1, false, 2},
        {"EP4", 1, 1, 1, 1, 4, 1, false, 4},
        {"ETP2 (DP2)", 1, 1, 1, 1, 1, 2, false, 2},
        {"DP2 dist-opt", 1, 1, 1, 1, 1, 1, true, 2},
        {"TP2 x EP4 (DP4) dist-opt", 2, 1, 1, 1, 4, 1, true, 8},
        {"TP2 PP2 EP2 (DP2)", 2, 1, 2, 1, 2, 1, false, 8},
        {"TP2 CP2 PP2 VPP2 EP2 ETP2", 2, 2, 2, 2, 2, 2, true, 8},
        {"PP4 (1F1B, 8 mb)", 1, 1, 4, 1, 1, 1, false, 4},
        {"CP4 (chunks 0+7, 1+6, ...)", 1, 4, 1, 1, 1, 1, false, 4},
        {"CP8 (chunks of 4 tokens)", 1, 8, 1, 1, 1, 1, false, 8},
        {"TP2+SP CP2 EP2 (DP2) dist-opt", 2, 2, 1, 1, 2, 1, true, 8},
    };
    check_layouts("tiny-moe", ls, (int)MOE_ARRAY_LEN(ls), false);
}

static void test_tiny_dsv3_layouts(void **state)
{
    (void)state;
    /* Sigmoid router with expert bias (updated from global counts) and group-limited top-k. */
    const struct eng_test_layout ls[] = {
        {"EP4 ETP2 (DP8)", 1, 1, 1, 1, 4, 2, true, 8},
        {"TP2 CP2 EP2", 2, 2, 1, 1, 2, 1, false, 4},
    };
    check_layouts("tiny-dsv3", ls, (int)MOE_ARRAY_LEN(ls), false);
}

/* The architectures of the presets' miniatures (tiny-<preset>) under the foldings that apply:
 * Qwen3's per-head q/k norm (heads split over TP), GPT-OSS's biases, sliding windows (CP chunks
 * with a window) and sinks, MLA (TP splits the heads and up projections; the down projections are
 * replicated, with and without sequence parallelism), GELU experts. */
static void test_architecture_layouts(void **state)
{
    (void)state;
    const struct eng_test_layout qwen[] = {
        {"TP2+SP", 2, 1, 1, 1, 1, 1, false, 2},
        {"CP2", 1, 2, 1, 1, 1, 1, false, 2},
        {"PP2 EP2 (DP2)", 1, 1, 2, 1, 2, 1, false, 4},
        {"TP2 CP2 EP4 dist-opt", 2, 2, 1, 1, 4, 1, true, 4},
    };
    check_layouts("tiny-qwen3-30b-a3b", qwen, (int)MOE_ARRAY_LEN(qwen), false);
    const struct eng_test_layout oss[] = {
        {"TP2+SP", 2, 1, 1, 1, 1, 1, false, 2},
        {"CP2 (window 16, chunks 16)", 1, 2, 1, 1, 1, 1, false, 2},
        {"CP4 (window 16, chunks 8)", 1, 4, 1, 1, 1, 1, false, 4},
        {"PP2 VPP2 EP2 (DP2)", 1, 1, 2, 2, 2, 1, false, 4},
        {"TP2 CP2 EP2 dist-opt", 2, 2, 1, 1, 2, 1, true, 4},
    };
    check_layouts("tiny-gpt-oss-120b", oss, (int)MOE_ARRAY_LEN(oss), false);
    const struct eng_test_layout mla[] = {
        {"TP2+SP (heads, up projections)", 2, 1, 1, 1, 1, 1, false, 2},
        {"CP2", 1, 2, 1, 1, 1, 1, false, 2},
        {"PP2 EP2 (DP2)", 1, 1, 2, 1, 2, 1, false, 4},
        {"TP2 CP2 PP2 EP2 dist-opt", 2, 2, 2, 1, 2, 1, true, 8},
    };
    check_layouts("tiny-kimi-k2", mla, (int)MOE_ARRAY_LEN(mla), false);
    /* DeepSeek-V3's miniature: MLA, first dense layers, grouped sigmoid router with expert bias,
     * one MTP layer on the last stage (with PP an embedding copy there, summed with stage 0's) */
    const struct eng_test_layout dsv3[] = {
        {"TP2+SP", 2, 1, 1, 1, 1, 1, false, 2},
        {"CP2", 1, 2, 1, 1, 1, 1, false, 2},
        {"PP2 (MTP on stage 1)", 1, 1, 2, 1, 1, 1, false, 2},
        {"PP2 VPP2 EP2 (DP2) dist-opt", 1, 1, 2, 2, 2, 1, true, 4},
        {"TP2 CP2 PP2 EP2", 2, 2, 2, 1, 2, 1, false, 8},
    };
    check_layouts("tiny-deepseek-v3", dsv3, (int)MOE_ARRAY_LEN(dsv3), false);
    /* Megatron's allgather dispatcher: every ETP x EP rank gathers the group's tokens */
    const struct eng_test_layout ag[] = {
        {"EP2 allgather", 1, 1, 1, 1, 2, 1, false, 2},
        {"EP4 allgather", 1, 1, 1, 1, 4, 1, false, 4},
        {"EP2 ETP2 allgather", 1, 1, 1, 1, 2, 2, false, 4},
        {"TP2 EP2 PP2 allgather", 2, 1, 2, 1, 2, 1, false, 8},
    };
    const struct extra xag = {false, 0, false, false, false, true};
    check_layouts_with("tiny-moe", ag, (int)MOE_ARRAY_LEN(ag), &xag);
    check_layouts_with("tiny-gpt-oss-120b", ag, 2, &xag);
    const struct eng_test_layout nosp[] = {
        {"dense, TP2 (no SP)", 2, 1, 1, 1, 1, 1, false, 2},
        {"dense, TP4 (no SP) PP2", 4, 1, 2, 1, 1, 1, false, 8},
    };
    const struct extra x = {false, 0, false, false, true, false};
    check_layouts_with("tiny-kimi-k2", nosp, (int)MOE_ARRAY_LEN(nosp), &x);
    check_layouts_with("tiny-qwen3-30b-a3b", nosp, 1, &x);
}

static void test_overlap_same_losses(void **state)
{
    (void)state;
    /* Non-blocking gradient reduce-scatter and parameter all-gather change timing, not values. */
    const struct eng_test_layout ls[] = {
        {"DP4 EP2 overlap grad+param", 1, 1, 1, 1, 2, 1, true, 4},
        {"PP2 DP2 overlap grad", 1, 1, 2, 1, 1, 1, false, 4},
    };
    check_layouts("tiny-moe", ls, (int)MOE_ARRAY_LEN(ls), true);
    /* Bit for bit: the non-blocking reduce-scatter sums in the blocking one's order
     * (engine/comm_mpi.c), and the all-gather moves values. */
    double a[STEPS], b[STEPS];
    assert_int_equal(run_layout("tiny-moe", &ls[0], true, a), MOE_OK);
    assert_int_equal(run_layout("tiny-moe", &ls[0], false, b), MOE_OK);
    assert_memory_equal(a, b, sizeof(a));
    /* Expert dispatch/combine of one half micro-batch behind the other half's experts. */
    const struct eng_test_layout ep[] = {
        {"EP2 a2a overlap", 1, 1, 1, 1, 2, 1, false, 2},
        {"TP2 EP4 a2a overlap", 2, 1, 1, 1, 4, 1, true, 8},
        {"PP2 VPP2 EP2 a2a overlap", 1, 1, 2, 2, 2, 1, false, 4},
    };
    const struct extra ov = {false, 0, false, true, false, false};
    check_layouts_with("tiny-moe", ep, (int)MOE_ARRAY_LEN(ep), &ov);
    check_layouts_with("tiny-dsv3", ep + 1, 1, &ov);
}

static void test_hierarchical_dispatcher(void **state)
{
    (void)state;
    /* Nodes emulated as blocks of ranks: one copy of a token per remote node, forwarded inside
     * the node; the same losses as one rank (and so as the flat all-to-all). */
    const struct eng_test_layout by2[] = {
        {"EP4 on 2 nodes x 2", 1, 1, 1, 1, 4, 1, false, 4},
        {"EP8 on 4 nodes x 2", 1, 1, 1, 1, 8, 1, true, 8},
        {"TP2 EP4 on 2 nodes x 2", 2, 1, 1, 1, 4, 1, false, 8},
    };
    const struct eng_test_layout by4[] = {{"EP8 on 2 nodes x 4", 1, 1, 1, 1, 8, 1, false, 8}};
    const struct extra two = {false, 2, true, false, false, false};
    const struct extra four = {false, 4, true, false, false, false};
    check_layouts_with("tiny-moe", by2, (int)MOE_ARRAY_LEN(by2), &two);
    check_layouts_with("tiny-dsv3", by2 + 2, 1, &two);
    check_layouts_with("tiny-moe", by4, 1, &four);
}

/* A dense model with tied embeddings: TP without sequence parallelism (all-reduce after the
 * row-parallel linears) and PP with the output layer's tied copy on the last stage, whose gradient
 * is summed with the embedding's over the first and last stage. */
static void dense_tied_plan(struct moe_plan *plan, int tp, int pp)
{
    moe_plan_init(plan);
    struct moe_model_cfg *m = &plan->model;
    (void)snprintf(m->name, sizeof(m->name), "tiny-dense-tied");
    m->num_layers = 4;
    m->hidden_size = 64;
    m->ffn_hidden_size = 128;
    m->num_attention_heads = 4;
    m->num_query_groups = 2;
    m->kv_channels = 16;
    m->is_swiglu = true;
    m->vocab_size = 256;
    m->make_vocab_size_divisible_by = 32;
    m->seq_length = 64;
    plan->layout.num_gpus = tp * pp;
    plan->layout.tp = tp;
    plan->layout.pp = pp;
    plan->layout.mbs = 1;
    plan->layout.gbs = 8;
    plan->layout.seq_length = 64;
}

static void dense_losses(int tp, int pp, double *losses)
{
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, rank < tp * pp ? 0 : MPI_UNDEFINED, rank, &sub);
    enum moe_status st = MOE_OK;
    if (sub != MPI_COMM_NULL) {
        struct moe_plan plan;
        dense_tied_plan(&plan, tp, pp);
        struct moe_eng_run_opts o;
        eng_test_opts(&o, STEPS);
        st = eng_test_losses(sub, &plan, &o, losses);
        MPI_Comm_free(&sub);
    }
    int v = -(int)st, worst = 0;
    MPI_Allreduce(&v, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Bcast(losses, STEPS, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    assert_int_equal(worst, 0);
}

static void test_dense_tied_layouts(void **state)
{
    (void)state;
    double ref[STEPS];
    dense_losses(1, 1, ref);
    const int cases[][2] = {{2, 1}, {1, 2}, {2, 2}, {1, 4}};
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (size_t i = 0; i < MOE_ARRAY_LEN(cases); i++) {
        double got[STEPS];
        dense_losses(cases[i][0], cases[i][1], got);
        double rel = eng_test_max_rel(got, ref, STEPS);
        if (rank == 0) {
            printf(
                "  dense-tied TP%d (no SP) PP%d                   loss[5] %.7f (1 rank %.7f) max "
                "rel diff %.2e\n",
                cases[i][0], cases[i][1], got[STEPS - 1], ref[STEPS - 1], rel);
        }
        assert_true(rel <= REL_TOL);
    }
}

/* Uneven pipeline chunks: first/last stage layer counts, and a custom layout string whose first
 * chunk holds only the embedding (a chunk without layers). */
static void
uneven_losses(int world, int pp, int vpp, int first, const char *layout, bool ep2, double *losses)
{
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, rank < world ? 0 : MPI_UNDEFINED, rank, &sub);
    enum moe_status st = MOE_OK;
    if (sub != MPI_COMM_NULL) {
        const struct eng_test_layout l = {"uneven", 1, 1, pp, vpp, ep2 ? 2 : 1, 1, false, world};
        struct moe_plan plan;
        eng_test_plan(&plan, "tiny-moe", &l);
        plan.layout.first_stage_layers = first;
        struct moe_diag diag;
        memset(&diag, 0, sizeof(diag));
        if (layout != NULL) {
            st = moe_layout_parse_pp_string(layout, &plan.model, &plan.layout, &diag);
        }
        struct moe_eng_run_opts o;
        eng_test_opts(&o, STEPS);
        if (st == MOE_OK) {
            st = eng_test_losses(sub, &plan, &o, losses);
        } else {
            fprintf(stderr, "%s\n", diag.message);
        }
        MPI_Comm_free(&sub);
    }
    int v = -(int)st, worst = 0;
    MPI_Allreduce(&v, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Bcast(losses, STEPS, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    assert_int_equal(worst, 0);
}

static void test_uneven_pipeline(void **state)
{
    (void)state;
    const struct eng_test_layout one = {"1 rank", 1, 1, 1, 1, 1, 1, false, 1};
    double ref[STEPS], a[STEPS], b[STEPS], c[STEPS];
    assert_int_equal(run_layout("tiny-moe", &one, false, ref), MOE_OK);
    uneven_losses(2, 2, 1, 1, NULL, false, a);        /* 1 + 3 layers */
    uneven_losses(2, 2, 2, 0, "E|tt|t|tL", false, b); /* embedding-only first chunk */
    uneven_losses(4, 2, 2, 0, "Et|t|tt|L", true, c);  /* loss-only last chunk, EP2 */
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        printf("  uneven PP: first-stage 1 layer %.2e, 'E|tt|t|tL' %.2e, 'Et|t|tt|L' EP2 %.2e "
               "(max rel diff vs 1 rank)\n",
               eng_test_max_rel(a, ref, STEPS), eng_test_max_rel(b, ref, STEPS),
               eng_test_max_rel(c, ref, STEPS));
    }
    assert_true(eng_test_max_rel(a, ref, STEPS) <= REL_TOL);
    assert_true(eng_test_max_rel(b, ref, STEPS) <= REL_TOL);
    assert_true(eng_test_max_rel(c, ref, STEPS) <= REL_TOL);
}

/*
 * Context parallelism with the load-balanced causal split (engine/internal.h): CP rank r holds
 * chunks r and 2 CP - 1 - r of c = T / (2 CP) tokens, so every CP rank has the same causal
 * attention work. Counted, not timed: the query-key pairs inside the causal mask and the FLOPs of
 * the kernels' score-matrix products (moe_eng_attention_work) after one step must be equal on every
 * rank, and the pairs must be the hand count: a chunk at position p has c p + c (c + 1) / 2 pairs,
 * so a rank has c^2 (2 CP - 1) + c (c + 1) = 2 CP c^2 + c per sequence and head, forward and again
 * backward, in every layer and micro-batch. (The contiguous split it replaces gave CP2's rank 0 528
 * pairs of 64-token sequences and rank 1 1552.)
 */
static void balanced_case(int cp)
{
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, rank < cp ? 0 : MPI_UNDEFINED, rank, &sub);
    if (sub == MPI_COMM_NULL) {
        return;
    }
    const struct eng_test_layout l = {"CP", 1, cp, 1, 1, 1, 1, false, cp};
    struct moe_plan plan;
    eng_test_plan(&plan, "tiny-moe", &l);
    struct moe_eng_run_opts o;
    eng_test_opts(&o, 1);
    moe_comm_t *w = NULL;
    assert_int_equal(moe_comm_mpi_create(sub, "world", &w), MOE_OK);
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    moe_eng_t *e = NULL;
    assert_int_equal(moe_eng_create(&plan, &o, w, &e, &diag), MOE_OK);
    struct moe_eng_step_result r;
    assert_int_equal(moe_eng_train_step(e, &r, &diag), MOE_OK);
    double mine[2];
    moe_eng_attention_work(e, &mine[0], &mine[1]);
    moe_eng_destroy(e);
    moe_comm_destroy(w);
    double all[2 * 8];
    MPI_Allgather(mine, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, sub);
    MPI_Comm_free(&sub);
    double c = 64.0 / (2.0 * cp);
    double per_seq_head = 2.0 * cp * c * c + c;
    /* 4 layers x 8 micro-batches (gbs 8, mbs 1, DP 1) x 4 heads x forward and backward */
    double expected = 4.0 * 8.0 * 4.0 * 2.0 * per_seq_head;
    if (rank == 0) {
        printf("  CP%d: causal pairs per rank", cp);
        for (int i = 0; i < cp; i++) {
            printf(" %.0f", all[2 * i + 1]);
        }
        printf(" (hand count %.0f); score FLOPs per rank %.4g\n", expected, all[0]);
    }
    for (int i = 0; i < cp; i++) {
        assert_true(all[2 * i] == all[0]);
        assert_true(all[2 * i + 1] == expected);
    }
}

static void test_cp_balanced_attention(void **state)
{
    (void)state;
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int cp = 2; cp <= 8 && cp <= size; cp *= 2) {
        balanced_case(cp);
        MPI_Barrier(MPI_COMM_WORLD);
    }
}

static void test_same_layout_bit_identical(void **state)
{
    (void)state;
    const struct eng_test_layout l = {"TP2 PP2 EP2", 2, 1, 2, 1, 2, 1, true, 8};
    double a[STEPS], b[STEPS];
    assert_int_equal(run_layout("tiny-moe", &l, false, a), MOE_OK);
    assert_int_equal(run_layout("tiny-moe", &l, false, b), MOE_OK);
    assert_memory_equal(a, b, sizeof(a));
}

static void test_expert_parallel_matches_replicated(void **state)
{
    (void)state;
    const struct eng_test_layout ep = {"EP4", 1, 1, 1, 1, 4, 1, false, 4};
    const struct eng_test_layout rep = {"DP4 (experts replicated)", 1, 1, 1, 1, 1, 1, false, 4};
    double a[STEPS], b[STEPS];
    assert_int_equal(run_layout("tiny-dsv3", &ep, false, a), MOE_OK);
    assert_int_equal(run_layout("tiny-dsv3", &rep, false, b), MOE_OK);
    assert_true(eng_test_max_rel(a, b, STEPS) <= REL_TOL);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_moe_layouts),
        cmocka_unit_test(test_tiny_dsv3_layouts),
        cmocka_unit_test(test_architecture_layouts),
        cmocka_unit_test(test_overlap_same_losses),
        cmocka_unit_test(test_hierarchical_dispatcher),
        cmocka_unit_test(test_dense_tied_layouts),
        cmocka_unit_test(test_uneven_pipeline),
        cmocka_unit_test(test_cp_balanced_attention),
        cmocka_unit_test(test_same_layout_bit_identical),
        cmocka_unit_test(test_expert_parallel_matches_replicated),
    };
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank != 0 && freopen("/dev/null", "w", stdout) == NULL) {
        return 1; /* every rank asserts on the same broadcast values; rank 0 reports */
    }
    int fails = cmocka_run_group_tests(tests, NULL, NULL);
    int total = 0;
    MPI_Allreduce(&fails, &total, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return total;
}
