/*
 * Cost-model tests on a hand-built cluster (no files): nccl-tests bus-bandwidth factors, placement
 * of groups on NVLink domains, hypergeometric node reach, memory by hand for a tiny model,
 * pipeline bubble closed form vs event simulation, phases summing to the step, and invariants
 * (more bandwidth never slower, more recompute never more memory, an EP group inside one domain
 * never slower than across domains, more imbalance never faster), and the memory model's option
 * key (equal keys, equal memory) and the pass parts that price other offload volumes.
 */
#include "model/comm_cost.h"
#include "model/compute.h"
#include "model/cost.h"
#include "model/imbalance.h"
#include "model/memory.h"
#include "model/schedule.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define GIB 1073741824.0

/* cmocka's assert_float_equal works in float; these checks need double. */
#define ASSERT_NEAR(a, b, tol)                                                                     \
    do {                                                                                           \
        double a_ = (a);                                                                           \
        double b_ = (b);                                                                           \
        if (!(fabs(a_ - b_) <= (tol))) {                                                           \
            fail_msg("%s = %.12g, expected %s = %.12g (tol %g)", #a, a_, #b, b_, (double)(tol));   \
        }                                                                                          \
    } while (0)

/* An H100-like cluster with round numbers so expected values are easy to write down. */
static void test_cluster(struct moe_cluster *cl)
{
    memset(cl, 0, sizeof(*cl));
    strcpy(cl->name, "test");
    cl->gpus_per_node = 8;
    cl->max_gpus = 4096;
    struct moe_gpu *g = &cl->gpu;
    strcpy(g->name, "testgpu");
    g->hbm_gib = 80.0;
    g->hbm_tbps = 3.0;
    g->peak_tflops[MOE_MATH_BF16] = 1000.0;
    g->peak_tflops[MOE_MATH_FP8] = 2000.0;
    g->peak_tflops[MOE_MATH_FP32] = 60.0;
    g->has_fp8 = true;
    g->num_sms = 132;
    for (int i = 0; i < MOE_NUM_MATH; i++) {
        g->gemm.max_eff[i] = 0.8;
    }
    for (int i = 0; i < MOE_CLUSTER_NUM_RECIPES; i++) {
        g->gemm.recipe_eff[i] = 1.0;
    }
    g->gemm.half_flops = 8e9;
    g->gemm.grouped_eff = 0.75;
    g->gemm.grouped_tile_m = 128;
    g->attn_fwd_eff = 0.6;
    g->attn_bwd_eff = 0.45;
    g->hbm_eff = 0.8;
    g->elem_eff = 0.8;
    g->optimizer_eff = 0.8;
    g->kernel_launch_us = 10.0;
    g->host_cpp_op_us = 5.0;
    g->quant_bytes_per_elem = 3.0;
    cl->nvlink.domain_gpus = 8;
    cl->nvlink.gbps = 400.0;
    cl->nvlink.eff = 1.0;
    cl->nvlink.latency_us = 0.0;
    cl->net.nic_gbps = 50.0;
    cl->net.eff = 1.0;
    cl->net.a2a_eff = 1.0;
    cl->net.latency_us = 0.0;
    cl->host.mem_gib_per_gpu = 200.0;
    cl->host.link_gbps = 50.0;
    cl->host.link_eff = 1.0;
    cl->dispatch.deepep_intra_eff = 0.8;
    cl->dispatch.deepep_inter_eff = 0.8;
    cl->dispatch.hybridep_intra_eff = 0.8;
    cl->dispatch.hybridep_inter_eff = 0.8;
    cl->dispatch.deepep_sms = 24;
    cl->dispatch.hybridep_sms = 16;
    cl->dispatch.permute_bytes_eff = 0.7;
    cl->overheads.moe_host_sync_us = 30.0;
    cl->overheads.step_fixed_ms = 10.0;
    cl->overheads.overlap_eff = 0.8;
    cl->overheads.a2a_overlap_loss = 0.1;
    cl->overheads.ep_overlap_eff = 0.5;
    cl->overheads.context_gib = 2.0;
    cl->overheads.alloc_reserve_frac = 0.05;
    cl->overheads.flex_buffer_gib = 1.0;
}

/* A small MoE: 8 layers (first dense), GQA, 16 experts top-2 with a shared expert. */
static void test_model(struct moe_model_cfg *cfg)
{
    moe_cfg_init(cfg);
    strcpy(cfg->name, "test-moe");
    cfg->num_layers = 8;
    cfg->hidden_size = 2048;
    cfg->ffn_hidden_size = 8192;
    cfg->num_attention_heads = 16;
    cfg->num_query_groups = 4;
    cfg->kv_channels = 128;
    cfg->is_swiglu = true;
    cfg->is_untied_embeddings = true;
    cfg->vocab_size = 32000;
    cfg->make_vocab_size_divisible_by = 128;
    cfg->seq_length = 4096;
    cfg->num_experts = 16;
    cfg->moe_ffn_hidden_size = 1024;
    cfg->moe_router_topk = 2;
    cfg->moe_shared_expert_intermediate_size = 1024;
    moe_cfg_set_first_dense(cfg, 1);
}

static void setup(struct moe_model_cfg *cfg,
                  struct moe_cluster *cl,
                  struct moe_layout *lay,
                  struct moe_options *opt,
                  int gpus,
                  int tp,
                  int pp,
                  int vpp,
                  int ep)
{
    test_model(cfg);
    test_cluster(cl);
    moe_layout_init(lay);
    moe_options_init(opt);
    lay->num_gpus = gpus;
    lay->tp = tp;
    lay->pp = pp;
    lay->vpp = vpp;
    lay->ep = ep;
    lay->etp = 1;
    lay->mbs = 1;
    lay->gbs = 64;
    lay->seq_length = 4096;
    lay->sequence_parallel = tp > 1;
    opt->use_distributed_optimizer = true;
    opt->moe_grouped_gemm = true;
    opt->force_load_balancing = true;
    struct moe_diag d = {0};
    enum moe_status st = moe_layout_resolve(cfg, cl, opt, lay, &d);
    if (st != MOE_OK) {
        fail_msg("resolve: %s", d.message);
    }
}

static struct moe_prediction predict(const struct moe_model_cfg *cfg,
                                     const struct moe_cluster *cl,
                                     const struct moe_layout *lay,
                                     const struct moe_options *opt,
                                     enum moe_schedule_mode mode)
{
    size_t n = moe_cost_workspace_bytes(lay, mode);
    void *ws = malloc(n);
    struct moe_prediction p;
    struct moe_diag d = {0};
    assert_int_equal(moe_cost_predict(cfg, cl, lay, opt, NULL, mode, ws, n, &p, &d), MOE_OK);
    free(ws);
    return p;
}

static void test_busbw_factors(void **state)
{
    (void)state;
    struct moe_cluster cl;
    test_cluster(&cl);
    struct moe_group_place g;
    moe_comm_group_place(8, 1, 8, &g);
    assert_int_equal(g.local, 8);
    assert_int_equal(g.num_domains, 1);
    double s = 1e9;
    /* nccl-tests: all-reduce moves 2(n-1)/n S at bus bandwidth, all-gather (n-1)/n S. */
    ASSERT_NEAR(moe_comm_allreduce_s(&cl, &g, s), 2.0 * 7.0 / 8.0 * s / 400e9, 1e-12);
    ASSERT_NEAR(moe_comm_allgather_s(&cl, &g, s), 7.0 / 8.0 * s / 400e9, 1e-12);
    ASSERT_NEAR(moe_comm_reducescatter_s(&cl, &g, s), 7.0 / 8.0 * s / 400e9, 1e-12);
    /* All-to-all inside a domain: 7/8 of the buffer over NVLink. */
    ASSERT_NEAR(moe_comm_alltoall_s(&cl, &g, s), 7.0 / 8.0 * s / 400e9, 1e-12);
    /* A measured bus bandwidth of the reducing collectives (calibrate on a CPU host) replaces
     * the all-gather's for them only, inside one domain; 0 keeps the ring rate. */
    cl.nvlink.allreduce_gbps = 100.0;
    cl.nvlink.reducescatter_gbps = 200.0;
    ASSERT_NEAR(moe_comm_allreduce_s(&cl, &g, s), 2.0 * 7.0 / 8.0 * s / 100e9, 1e-12);
    ASSERT_NEAR(moe_comm_reducescatter_s(&cl, &g, s), 7.0 / 8.0 * s / 200e9, 1e-12);
    ASSERT_NEAR(moe_comm_allgather_s(&cl, &g, s), 7.0 / 8.0 * s / 400e9, 1e-12);
    struct moe_group_place g2;
    moe_comm_group_place(16, 1, 8, &g2); /* two domains: the ring over the network */
    double rs_ring = moe_comm_reducescatter_s(&cl, &g2, s);
    cl.nvlink.reducescatter_gbps = 0.0;
    ASSERT_NEAR(moe_comm_reducescatter_s(&cl, &g2, s), rs_ring, 1e-12);
    cl.nvlink.allreduce_gbps = 0.0;
    /* Doubling bandwidth halves the bandwidth term (latency is 0 here). */
    double t1 = moe_comm_allgather_s(&cl, &g, s);
    cl.nvlink.gbps *= 2.0;
    ASSERT_NEAR(moe_comm_allgather_s(&cl, &g, s), t1 / 2.0, 1e-12);
}

/* A per-size table (calibrate on a CPU host) prices a collective inside one domain at the busbw
 * measured at its size, interpolated in log size; without it, or across domains, the line. */
static void test_busbw_by_size(void **state)
{
    (void)state;
    struct moe_cluster cl;
    test_cluster(&cl);
    struct moe_group_place g;
    moe_comm_group_place(2, 1, 2, &g);
    struct moe_busbw_table *t = &cl.nvlink.busbw_by_size;
    t->num_sizes[MOE_BUSBW_REDUCESCATTER] = 3;
    const double sizes[3] = {1024.0, 1048576.0, 4194304.0};
    const double gbps[3] = {0.5, 8.0, 2.0};
    for (int i = 0; i < 3; i++) {
        t->bytes[MOE_BUSBW_REDUCESCATTER][i] = sizes[i];
        t->gbps[MOE_BUSBW_REDUCESCATTER][i] = gbps[i];
    }
    double line_ag = moe_comm_allgather_s(&cl, &g, 2097152.0);
    /* At a measured size: that size's time (busbw = S (n-1)/n / t, nccl-tests). */
    ASSERT_NEAR(moe_comm_reducescatter_s(&cl, &g, 1048576.0), 0.5 * 1048576.0 / 8e9, 1e-15);
    /* 2 MiB is halfway between 1 and 4 MiB in log size: busbw (8 + 2) / 2 = 5 GB/s. */
    ASSERT_NEAR(moe_comm_reducescatter_s(&cl, &g, 2097152.0), 0.5 * 2097152.0 / 5e9, 1e-15);
    /* Past the largest size its busbw; below the smallest that size's (latency-bound) time. */
    ASSERT_NEAR(moe_comm_reducescatter_s(&cl, &g, 16777216.0), 0.5 * 16777216.0 / 2e9, 1e-15);
    ASSERT_NEAR(moe_comm_reducescatter_s(&cl, &g, 64.0), 0.5 * 1024.0 / 0.5e9, 1e-15);
    /* A collective without a row keeps its line. */
    ASSERT_NEAR(moe_comm_allgather_s(&cl, &g, 2097152.0), line_ag, 1e-15);
    /* Across domains the table (one domain's measurement) does not apply. */
    struct moe_group_place g2;
    moe_comm_group_place(4, 1, 2, &g2);
    double across = moe_comm_reducescatter_s(&cl, &g2, 2097152.0);
    t->num_sizes[MOE_BUSBW_REDUCESCATTER] = 0;
    ASSERT_NEAR(moe_comm_reducescatter_s(&cl, &g2, 2097152.0), across, 1e-15);
    /* Point-to-point inside the domain reads the send/recv row. */
    t->num_sizes[MOE_BUSBW_SENDRECV] = 1;
    t->bytes[MOE_BUSBW_SENDRECV][0] = 4096.0;
    t->gbps[MOE_BUSBW_SENDRECV][0] = 4.0;
    ASSERT_NEAR(moe_comm_p2p_s(&cl, true, 8192.0), 8192.0 / 4e9, 1e-15);
}

/* The MLP activation at its own rate (gpu.act_eff; a CPU host's SwiGLU runs an exp per element):
 * 0 prices it as the other elementwise kernels, and halving the rate adds exactly the activation's
 * time again, all of it in the expert GEMM phase and the dense MLP's compute. */
static void test_activation_rate(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 8, 1, 1, 1, 8);
    struct moe_prediction a = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_CLOSED_FORM);
    cl.gpu.act_eff = cl.gpu.elem_eff;
    struct moe_prediction b = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_CLOSED_FORM);
    ASSERT_NEAR(b.step_time_s, a.step_time_s, 1e-12 * a.step_time_s);
    cl.gpu.act_eff = cl.gpu.elem_eff / 2.0;
    struct moe_prediction c = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_CLOSED_FORM);
    assert_true(c.time.expert_gemm > a.time.expert_gemm);
    cl.gpu.act_eff = cl.gpu.elem_eff / 3.0;
    struct moe_prediction d = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_CLOSED_FORM);
    /* Linear in 1/act_eff: 1x, 2x, 3x the activation time. */
    ASSERT_NEAR(d.time.expert_gemm - c.time.expert_gemm, c.time.expert_gemm - a.time.expert_gemm,
                1e-9 * a.time.expert_gemm);
}

/* The activation's backward at its own rate (gpu.act_bwd_eff, a CPU host's measurement): 0 keeps
 * the forward's work again plus the gradient at elem_eff; a rate prices the backward's own bytes
 * (5 of the forward's 3 per SwiGLU element) at it, linearly in 1/act_bwd_eff, and leaves the
 * forward alone. */
static void test_activation_bwd_rate(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 8, 1, 1, 1, 8);
    struct moe_layer_kind moe = {.is_moe = true, .is_windowed = false};
    struct moe_layer_cost base;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &base);
    cl.gpu.act_eff = cl.gpu.elem_eff / 2.0;
    struct moe_layer_cost slow_fwd;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &slow_fwd);
    /* act_f: the forward activation's time at elem_eff (what halving its rate adds). */
    double act_f = slow_fwd.fwd_expert - base.fwd_expert;
    assert_true(act_f > 0.0);
    /* 0: backward = act (2 act_f at the halved rate) + elem (act_f). */
    ASSERT_NEAR(slow_fwd.bwd_expert - base.bwd_expert, act_f, 1e-9 * base.bwd_expert);
    cl.gpu.act_bwd_eff = cl.gpu.elem_eff;
    struct moe_layer_cost one;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &one);
    ASSERT_NEAR(one.fwd_expert, slow_fwd.fwd_expert, 1e-12 * base.fwd_expert);
    /* At elem_eff the backward's 5/3 of the forward's bytes take 5/3 act_f, against the
     * 2 act_f + act_f of the fallback at the halved forward rate. */
    ASSERT_NEAR(slow_fwd.bwd_expert - one.bwd_expert, 3.0 * act_f - 5.0 / 3.0 * act_f,
                1e-9 * base.bwd_expert);
    cl.gpu.act_bwd_eff = cl.gpu.elem_eff / 2.0;
    struct moe_layer_cost half;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &half);
    ASSERT_NEAR(half.bwd_expert - one.bwd_expert, 5.0 / 3.0 * act_f, 1e-9 * base.bwd_expert);
}

/* The experts' backward GEMMs at their own rates (gemm.grouped_bwd_eff, a CPU host's bench):
 * 0 prices them as the forward; the forward's own figures given explicitly change nothing; a
 * factor prices that GEMM's math time in 1 / factor (backward-weight at half the factor takes
 * twice its time, at 4/3 of it 3/4) and leaves the forward and the other backward GEMM alone. */
static void test_grouped_bwd_rates(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 8, 1, 1, 1, 8);
    struct moe_layer_kind moe = {.is_moe = true, .is_windowed = false};
    struct moe_layer_cost base;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &base);
    double ge = cl.gpu.gemm.grouped_eff;
    for (int b = 0; b < 2; b++) {
        cl.gpu.gemm.grouped_bwd_eff[b] = ge; /* the forward's figures, given */
        cl.gpu.gemm.grouped_bwd_half_dim[b] = cl.gpu.gemm.grouped_half_dim;
    }
    struct moe_layer_cost same;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &same);
    ASSERT_NEAR(same.fwd_expert, base.fwd_expert, 1e-12 * base.fwd_expert);
    ASSERT_NEAR(same.bwd_expert, base.bwd_expert, 1e-12 * base.bwd_expert);
    for (int b = 0; b < 2; b++) {
        cl.gpu.gemm.grouped_bwd_eff[b] = ge / 2.0;
        struct moe_layer_cost slow;
        moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &slow);
        cl.gpu.gemm.grouped_bwd_eff[b] = ge * 4.0 / 3.0;
        struct moe_layer_cost fast;
        moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &fast);
        cl.gpu.gemm.grouped_bwd_eff[b] = ge;
        double w = slow.bwd_expert - base.bwd_expert; /* that GEMM's math time at ge */
        assert_true(w > 0.01 * base.bwd_expert);
        ASSERT_NEAR(base.bwd_expert - fast.bwd_expert, 0.25 * w, 1e-9 * base.bwd_expert);
        ASSERT_NEAR(slow.fwd_expert, base.fwd_expert, 1e-12 * base.fwd_expert);
        ASSERT_NEAR(fast.fwd_expert, base.fwd_expert, 1e-12 * base.fwd_expert);
    }
}

/* The small-matrix regime (gemm.grouped_small): an expert GEMM at or below small_mnk takes its
 * figures. Those equal to the grouped ones change nothing; the forward's factor halved adds the
 * forward GEMMs' math time (a third adds twice it) and leaves the backward, and only while the
 * bound covers the experts' GEMMs (a bound below their size, or 0, prices them as before). */
static void test_grouped_small(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 8, 1, 1, 1, 8);
    cl.gpu.hbm_tbps *= 100.0; /* FLOP-bound GEMMs: the math time is what changes */
    cl.gpu.quant_bytes_per_elem *= 100.0;
    struct moe_layer_kind moe = {.is_moe = true, .is_windowed = false};
    struct moe_layer_cost base;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &base);
    struct moe_gemm_eff *ge = &cl.gpu.gemm;
    for (int i = 0; i < 3; i++) {
        ge->small_eff[i] = ge->grouped_eff;
        ge->small_half_dim[i] = ge->grouped_half_dim;
    }
    ge->small_mnk = 1e30;
    struct moe_layer_cost same;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &same);
    ASSERT_NEAR(same.fwd_expert, base.fwd_expert, 1e-12 * base.fwd_expert);
    ASSERT_NEAR(same.bwd_expert, base.bwd_expert, 1e-12 * base.bwd_expert);
    ge->small_eff[0] = ge->grouped_eff / 2.0;
    struct moe_layer_cost slow;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &slow);
    double w = slow.fwd_expert - base.fwd_expert; /* the forward GEMMs' math time */
    assert_true(w > 0.1 * base.fwd_expert);
    ASSERT_NEAR(slow.bwd_expert, base.bwd_expert, 1e-12 * base.bwd_expert);
    ge->small_eff[0] = ge->grouped_eff / 3.0;
    struct moe_layer_cost slower;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &slower);
    ASSERT_NEAR(slower.fwd_expert - base.fwd_expert, 2.0 * w, 1e-9 * base.fwd_expert);
    for (int k = 0; k < 2; k++) {
        ge->small_mnk = k == 0 ? 1.0 : 0.0; /* below every expert GEMM; off */
        struct moe_layer_cost off;
        moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &off);
        ASSERT_NEAR(off.fwd_expert, base.fwd_expert, 1e-12 * base.fwd_expert);
        ASSERT_NEAR(off.bwd_expert, base.bwd_expert, 1e-12 * base.bwd_expert);
    }
}

/* The share of local experts that hold rows (moe_active_expert_frac, compare sets it from a run):
 * 0 and 1 both mean all of them; at 0.5 the same rows run as half as many GEMMs, each twice as
 * tall, so the narrow-row term's time (half_dim / rows per expert of the FLOPs time) halves while
 * the FLOPs' own time stays. Without grouped GEMMs, half as many larger GEMMs run faster. */
static void test_active_experts(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 8, 1, 1, 1, 1); /* 16 local experts, 512 rows each */
    /* FLOP-bound GEMMs: fewer experts also touch fewer weight gradients, which on this GPU's
     * HBM would bound the backward-weight GEMM and hide the term tested here. */
    cl.gpu.hbm_tbps *= 100.0;
    cl.gpu.quant_bytes_per_elem *= 100.0; /* the quantiser's time as before */
    struct moe_layer_kind moe = {.is_moe = true, .is_windowed = false};
    for (int grouped = 1; grouped >= 0; grouped--) {
        opt.moe_grouped_gemm = grouped == 1;
        struct moe_layer_cost t[2][3]; /* [narrow term off/on][share 0, 1, 0.5] */
        const double share[3] = {0.0, 1.0, 0.5};
        for (int h = 0; h < 2; h++) {
            cl.gpu.gemm.half_dim = 0.0;
            cl.gpu.gemm.grouped_half_dim = h == 1 ? 256.0 : 0.0;
            for (int i = 0; i < 3; i++) {
                opt.moe_active_expert_frac = share[i];
                moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &t[h][i]);
            }
            ASSERT_NEAR(t[h][1].fwd_expert, t[h][0].fwd_expert, 1e-12 * t[h][0].fwd_expert);
            ASSERT_NEAR(t[h][1].bwd_expert, t[h][0].bwd_expert, 1e-12 * t[h][0].bwd_expert);
        }
        if (grouped == 0) {
            /* Each expert its own GEMM: half as many, each twice the FLOPs, further up the
             * size curve. */
            assert_true(t[0][2].fwd_expert < 0.99 * t[0][0].fwd_expert);
            assert_true(t[0][2].bwd_expert < 0.99 * t[0][0].bwd_expert);
            continue;
        }
        /* One grouped kernel at the same FLOPs: without the narrow term nothing changes. */
        ASSERT_NEAR(t[0][2].fwd_expert, t[0][0].fwd_expert, 1e-9 * t[0][0].fwd_expert);
        ASSERT_NEAR(t[0][2].bwd_expert, t[0][0].bwd_expert, 1e-9 * t[0][0].bwd_expert);
        double narrow_f = t[1][0].fwd_expert - t[0][0].fwd_expert;
        double narrow_b = t[1][0].bwd_expert - t[0][0].bwd_expert;
        assert_true(narrow_f > 0.1 * t[0][0].fwd_expert);
        ASSERT_NEAR(t[1][2].fwd_expert - t[0][2].fwd_expert, 0.5 * narrow_f, 1e-9 * narrow_f);
        ASSERT_NEAR(t[1][2].bwd_expert - t[0][2].bwd_expert, 0.5 * narrow_b, 1e-9 * narrow_b);
    }
    /* Emulated FP8 (FP32 training) re-quantises every local expert's weights each call, rows or
     * none: without the narrow term, half the experts active costs the same. */
    opt.moe_grouped_gemm = true;
    opt.is_fp32_training = true;
    opt.recipe = MOE_RECIPE_FP8_BLOCKWISE;
    cl.gpu.gemm.grouped_half_dim = 0.0;
    struct moe_layer_cost q[2];
    for (int i = 0; i < 2; i++) {
        opt.moe_active_expert_frac = i == 0 ? 1.0 : 0.5;
        moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &q[i]);
    }
    ASSERT_NEAR(q[1].fwd_expert, q[0].fwd_expert, 1e-9 * q[0].fwd_expert);
    ASSERT_NEAR(q[1].bwd_expert, q[0].bwd_expert, 1e-9 * q[0].bwd_expert);
}

/* Attention kernels that compute whole rectangles (gpu.attn_rect, the CPU reference): under CP2
 * each rank's two chunk calls compute 5/8 of the bench's products per visible pair, so the
 * products' share of the core (eff x d / (d + half_dim): d / (d + half_dim) of it) scales by 5/8
 * and the softmax's share stays. Without CP, or with rect 0 (GPU files), nothing changes. */
static void test_attention_rect(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 8, 1, 1, 1, 1);
    lay.cp = 2;
    struct moe_diag diag = {0};
    assert_int_equal(moe_layout_resolve(&cfg, &cl, &opt, &lay, &diag), MOE_OK);
    assert_int_equal(lay.dp, 4);
    cl.gpu.attn_fwd_half_dim = 64.0;
    cl.gpu.attn_bwd_half_dim = 16.0;
    struct moe_layer_kind dense = {.is_moe = false, .is_windowed = false};
    struct moe_layer_cost gpu;
    moe_compute_layer(&cfg, &cl, &lay, &opt, dense, 1.0, 0.0, &gpu);
    cl.gpu.attn_rect = 1.0;
    struct moe_layer_cost cpu;
    moe_compute_layer(&cfg, &cl, &lay, &opt, dense, 1.0, 0.0, &cpu);
    double d = cfg.kv_channels;
    ASSERT_NEAR(cpu.attn_core_fwd / gpu.attn_core_fwd, (5.0 / 8.0 + 64.0 / d) / (1.0 + 64.0 / d),
                1e-12);
    ASSERT_NEAR(cpu.attn_core_bwd / gpu.attn_core_bwd, (5.0 / 8.0 + 16.0 / d) / (1.0 + 16.0 / d),
                1e-12);
    ASSERT_NEAR(gpu.fwd_compute - cpu.fwd_compute, gpu.attn_core_fwd - cpu.attn_core_fwd,
                1e-12 * gpu.fwd_compute);
    lay.cp = 1;
    assert_int_equal(moe_layout_resolve(&cfg, &cl, &opt, &lay, &diag), MOE_OK);
    struct moe_layer_cost no_cp_rect;
    moe_compute_layer(&cfg, &cl, &lay, &opt, dense, 1.0, 0.0, &no_cp_rect);
    cl.gpu.attn_rect = 0.0;
    struct moe_layer_cost no_cp;
    moe_compute_layer(&cfg, &cl, &lay, &opt, dense, 1.0, 0.0, &no_cp);
    assert_true(no_cp_rect.attn_core_fwd == no_cp.attn_core_fwd);
    assert_true(no_cp_rect.attn_core_bwd == no_cp.attn_core_bwd);
}

/* A sliding window shorter than a call's keys makes the CPU kernel take the queries in tiles of
 * `window` rows, each its own GEMM pair: gpu.attn_tile_us prices each tile beyond one per head and
 * call (a CP rank's two chunks are two calls), on windowed layers alone. */
static void test_attention_window_tiles(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 8, 1, 1, 1, 1);
    cfg.window_size = 128;
    lay.cp = 2;
    lay.mbs = 2;
    struct moe_diag diag = {0};
    assert_int_equal(moe_layout_resolve(&cfg, &cl, &opt, &lay, &diag), MOE_OK);
    struct moe_layer_kind win = {.is_moe = false, .is_windowed = true};
    struct moe_layer_kind full = {.is_moe = false, .is_windowed = false};
    struct moe_layer_cost w0, f0, w1, f1;
    moe_compute_layer(&cfg, &cl, &lay, &opt, win, 1.0, 0.0, &w0);
    moe_compute_layer(&cfg, &cl, &lay, &opt, full, 1.0, 0.0, &f0);
    cl.gpu.attn_tile_us[0] = 3.0;
    cl.gpu.attn_tile_us[1] = 5.0;
    moe_compute_layer(&cfg, &cl, &lay, &opt, win, 1.0, 0.0, &w1);
    moe_compute_layer(&cfg, &cl, &lay, &opt, full, 1.0, 0.0, &f1);
    /* 16 heads x (2 sequences x 2 chunks) calls x (1024 / 128 - 1) extra tiles a call */
    double extra = 16.0 * 4.0 * 7.0;
    ASSERT_NEAR(w1.attn_core_fwd - w0.attn_core_fwd, extra * 3.0e-6, 1e-12);
    ASSERT_NEAR(w1.attn_core_bwd - w0.attn_core_bwd, extra * 5.0e-6, 1e-12);
    ASSERT_NEAR(w1.fwd_compute - w0.fwd_compute, extra * 3.0e-6, 1e-12);
    assert_true(f1.attn_core_fwd == f0.attn_core_fwd && f1.attn_core_bwd == f0.attn_core_bwd);
    /* Without CP each sequence is one call of 4096 queries: 31 extra tiles. */
    lay.cp = 1;
    assert_int_equal(moe_layout_resolve(&cfg, &cl, &opt, &lay, &diag), MOE_OK);
    moe_compute_layer(&cfg, &cl, &lay, &opt, win, 1.0, 0.0, &w1);
    cl.gpu.attn_tile_us[0] = 0.0;
    cl.gpu.attn_tile_us[1] = 0.0;
    moe_compute_layer(&cfg, &cl, &lay, &opt, win, 1.0, 0.0, &w0);
    ASSERT_NEAR(w1.attn_core_fwd - w0.attn_core_fwd, 16.0 * 2.0 * 31.0 * 3.0e-6, 1e-12);
    /* A window as long as the sequence tiles nothing. */
    cfg.window_size = 4096;
    cl.gpu.attn_tile_us[0] = 3.0;
    moe_compute_layer(&cfg, &cl, &lay, &opt, win, 1.0, 0.0, &w1);
    cl.gpu.attn_tile_us[0] = 0.0;
    moe_compute_layer(&cfg, &cl, &lay, &opt, win, 1.0, 0.0, &w0);
    assert_true(w1.attn_core_fwd == w0.attn_core_fwd);
}

/* The attention core's narrow-head term is work per score (the softmax's exp, scale and mask
 * against the products' 2 (d_qk + d_v) FLOPs per score): an MLA head with query-key and value
 * dimensions d_qk + d_v = 2 d costs what a GQA head of dimension d costs at the same heads and
 * tokens. Priced at min(d_qk, d_v) it cost 25% more for the DeepSeek-V3 miniature (24 + 16). */
static void test_attention_score_work(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 8, 1, 1, 1, 1);
    cl.gpu.attn_fwd_half_dim = 80.0;
    cl.gpu.attn_bwd_half_dim = 16.0;
    struct moe_layer_kind dense = {.is_moe = false, .is_windowed = false};
    cfg.kv_channels = 64;
    struct moe_layer_cost gqa;
    moe_compute_layer(&cfg, &cl, &lay, &opt, dense, 1.0, 0.0, &gqa);
    cfg.is_mla = true;
    cfg.q_lora_rank = 256;
    cfg.kv_lora_rank = 128;
    cfg.qk_head_dim = 56;
    cfg.qk_pos_emb_head_dim = 24;
    cfg.v_head_dim = 48;
    struct moe_layer_cost mla;
    moe_compute_layer(&cfg, &cl, &lay, &opt, dense, 1.0, 0.0, &mla);
    ASSERT_NEAR(mla.attn_core_fwd, gqa.attn_core_fwd, 1e-12 * gqa.attn_core_fwd);
    ASSERT_NEAR(mla.attn_core_bwd, gqa.attn_core_bwd, 1e-12 * gqa.attn_core_bwd);
    /* Without the term (the GPU files) the FLOPs alone set it: still equal. */
    cl.gpu.attn_fwd_half_dim = 0.0;
    cl.gpu.attn_bwd_half_dim = 0.0;
    cl.gpu.gemm.half_dim = 0.0;
    moe_compute_layer(&cfg, &cl, &lay, &opt, dense, 1.0, 0.0, &mla);
    cfg.is_mla = false;
    moe_compute_layer(&cfg, &cl, &lay, &opt, dense, 1.0, 0.0, &gqa);
    ASSERT_NEAR(mla.attn_core_fwd, gqa.attn_core_fwd, 1e-12 * gqa.attn_core_fwd);
}

/* Routed experts' biases in their own pass (gpu.bias_pass, the CPU engine): forward reads and
 * writes fc1's and fc2's outputs, backward reads their gradients, at the elementwise rate; with
 * bias_pass 0 (GPU files: bytes not priced) or a model without biases, nothing. */
static void test_expert_bias_pass(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 8, 1, 1, 1, 1);
    struct moe_layer_kind moe = {.is_moe = true, .is_windowed = false};
    cfg.has_linear_bias = true;
    struct moe_layer_cost fused;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &fused);
    cl.gpu.bias_pass = 1.0;
    struct moe_layer_cost pass;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &pass);
    double rows = (double)lay.mbs * lay.seq_length * cfg.moe_router_topk;
    double out_bytes =
        rows * (2.0 * cfg.moe_ffn_hidden_size + cfg.hidden_size) * 2.0; /* SwiGLU fc1, BF16 */
    double bw = cl.gpu.hbm_tbps * 1e12 * cl.gpu.elem_eff;
    assert_true(cfg.is_swiglu && !opt.is_fp32_training);
    ASSERT_NEAR(pass.fwd_expert - fused.fwd_expert, 2.0 * out_bytes / bw, 1e-9 * pass.fwd_expert);
    ASSERT_NEAR(pass.bwd_expert - fused.bwd_expert, out_bytes / bw, 1e-9 * pass.bwd_expert);
    assert_true(pass.fwd_compute == fused.fwd_compute);
    cfg.has_linear_bias = false;
    struct moe_layer_cost no_bias;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &no_bias);
    cl.gpu.bias_pass = 0.0;
    struct moe_layer_cost no_bias_fused;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &no_bias_fused);
    assert_true(no_bias.fwd_expert == no_bias_fused.fwd_expert);
    assert_true(no_bias.bwd_expert == no_bias_fused.bwd_expert);
}

/* An offloaded optimizer: gradients down and weights up over the host link, then the host's pass
 * over the state at host.optimizer_gbps (a CPU host's calibration: its optimizer kernel's rate);
 * 0 keeps the link as the bound. On a host whose "device" is the host itself (link = memory
 * bandwidth, optimizer rate = memory x optimizer_eff) offloading never pays. */
static void test_offloaded_optimizer_rate(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 8, 1, 1, 1, 8);
    opt.optimizer_cpu_offload = true;
    opt.optimizer_offload_fraction = 1.0;
    double link = cl.host.link_gbps * (cl.host.link_eff > 0.0 ? cl.host.link_eff : 1.0);
    cl.host.optimizer_gbps = 0.0;
    double bound = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_CLOSED_FORM).time.optimizer;
    cl.host.optimizer_gbps = link;
    double at_link = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_CLOSED_FORM).time.optimizer;
    ASSERT_NEAR(at_link, bound, 1e-12 * bound);
    cl.host.optimizer_gbps = link / 2.0;
    double half = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_CLOSED_FORM).time.optimizer;
    cl.host.optimizer_gbps = link / 4.0;
    double quarter = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_CLOSED_FORM).time.optimizer;
    assert_true(half > at_link);
    ASSERT_NEAR(quarter - at_link, 3.0 * (half - at_link), 1e-9 * quarter);

    /* A CPU host: the link is its memory, the host pass its optimizer rate. */
    cl.host.link_gbps = cl.gpu.hbm_tbps * 1e3;
    cl.host.link_eff = 1.0;
    cl.host.optimizer_gbps = cl.host.link_gbps * cl.gpu.optimizer_eff;
    double offloaded = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_CLOSED_FORM).time.optimizer;
    opt.optimizer_cpu_offload = false;
    double on_device = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_CLOSED_FORM).time.optimizer;
    assert_true(offloaded > on_device);
}

/* Ranks at different speeds (host.rank_spread s): every collective that joins them waits s x the
 * compute since the group last met. DP only: the gradient reduction waits s x the step's
 * compute; TP2: the TP collectives wait s x the compute (attention-side and the dense MLP's);
 * EP8: dispatch and combine. The waits are in the phases' wait shares and in the step. */
static void test_rank_spread_waits(void **state)
{
    (void)state;
    const double s = 0.05;
    const int tps[] = {1, 2, 1};
    const int eps[] = {1, 1, 8};
    for (int c = 0; c < 3; c++) {
        for (int mode = 0; mode < 2; mode++) {
            enum moe_schedule_mode m = mode ? MOE_SCHED_SIMULATE : MOE_SCHED_CLOSED_FORM;
            struct moe_model_cfg cfg;
            struct moe_cluster cl;
            struct moe_layout lay;
            struct moe_options opt;
            setup(&cfg, &cl, &lay, &opt, 8, tps[c], 1, 1, eps[c]);
            opt.overlap_grad_reduce = false;
            cl.host.rank_spread = 0.0;
            struct moe_prediction a = predict(&cfg, &cl, &lay, &opt, m);
            cl.host.rank_spread = s;
            struct moe_prediction b = predict(&cfg, &cl, &lay, &opt, m);
            double compute = a.time.compute + a.time.expert_gemm;
            double added = b.step_time_s - a.step_time_s;
            double waited = (b.wait.tp_comm - a.wait.tp_comm) + (b.wait.cp_comm - a.wait.cp_comm) +
                            (b.wait.dispatch - a.wait.dispatch) +
                            (b.wait.combine - a.wait.combine) + (b.wait.dp_comm - a.wait.dp_comm);
            /* The step grows by the waits, and they are s x the compute they follow. */
            ASSERT_NEAR(added, waited, 1e-6 * b.step_time_s);
            assert_true(waited > 0.5 * s * compute && waited <= 1.0001 * s * compute);
            ASSERT_NEAR(b.time.compute, a.time.compute, 1e-12 * a.time.compute);
            if (c == 0) {
                ASSERT_NEAR(b.wait.dp_comm, s * compute, 1e-6 * compute); /* every layer */
            } else if (c == 1) {
                assert_true(b.wait.tp_comm > 0.9 * waited);
            } else {
                assert_true(b.wait.dispatch - a.wait.dispatch > 0.0);
                assert_true(b.wait.combine - a.wait.combine > 0.0);
            }
        }
    }
}

/* A busiest EP rank behind by more than the speed spread is the slowest whatever the spread adds
 * or takes: the wait after the experts is the imbalance's, not the imbalance's plus the spread's.
 * EP8 at load 2 (the gap is the experts' whole mean time, far above s x it): the spread adds its
 * share of the attention-side compute only; balanced, it adds the experts' share too. */
static void test_rank_spread_under_imbalance(void **state)
{
    (void)state;
    const double s = 0.05;
    double added[2];
    double expert = 0.0;
    for (int imb = 0; imb < 2; imb++) {
        struct moe_model_cfg cfg;
        struct moe_cluster cl;
        struct moe_layout lay;
        struct moe_options opt;
        setup(&cfg, &cl, &lay, &opt, 8, 1, 1, 1, 8);
        opt.overlap_grad_reduce = false;
        opt.force_load_balancing = false;
        opt.moe_imbalance = imb ? 2.0 : 1.0;
        cl.host.rank_spread = 0.0;
        struct moe_prediction a = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_CLOSED_FORM);
        cl.host.rank_spread = s;
        struct moe_prediction b = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_CLOSED_FORM);
        added[imb] = (b.wait.dispatch - a.wait.dispatch) + (b.wait.combine - a.wait.combine);
        if (imb == 0) {
            expert = a.time.expert_gemm;
        }
        ASSERT_NEAR(b.time.expert_gemm, a.time.expert_gemm, 1e-12 * a.time.expert_gemm);
    }
    assert_true(added[1] > 0.0);
    assert_true(added[1] < added[0] - 0.9 * s * expert);
}

static void test_group_placement(void **state)
{
    (void)state;
    struct moe_cluster cl;
    test_cluster(&cl);
    struct moe_group_place g;
    /* DP group of 16 with stride 8 (TP8): one member per node, 16 nodes. */
    moe_comm_group_place(16, 8, 8, &g);
    assert_int_equal(g.local, 1);
    assert_int_equal(g.num_domains, 16);
    /* Ring across nodes with one member per node: one NIC's bandwidth. */
    ASSERT_NEAR(moe_comm_ring_busbw(&cl, &g), 50e9, 1.0);
    /* EP32 with stride 1 on 8-GPU nodes: 8 local members, 4 domains, 8 NICs in parallel. */
    moe_comm_group_place(32, 1, 8, &g);
    assert_int_equal(g.local, 8);
    assert_int_equal(g.num_domains, 4);
    ASSERT_NEAR(moe_comm_ring_busbw(&cl, &g), 400e9, 1.0);
    /* NVL72: EP32 stays inside the domain. */
    moe_comm_group_place(32, 1, 72, &g);
    assert_int_equal(g.num_domains, 1);
    /* All-to-all over 4 domains: 24/32 of the bytes cross the network at one NIC per GPU. */
    moe_comm_group_place(32, 1, 8, &g);
    double s = 1e9;
    ASSERT_NEAR(moe_comm_alltoall_s(&cl, &g, s), 24.0 / 32.0 * s / 50e9, 1e-12);
}

static void test_expected_domains(void **state)
{
    (void)state;
    /* E=256, k=8, d=8: 8 * (1 - C(224,8)/C(256,8)). */
    double miss = 1.0;
    for (int i = 0; i < 8; i++) {
        miss *= (224.0 - i) / (256.0 - i);
    }
    ASSERT_NEAR(moe_comm_expected_domains(256, 8, 8, 0, 0), 8.0 * (1.0 - miss), 1e-12);
    /* Group-limited routing (8 groups, top-4 groups, one group per node): at most 4 nodes. */
    double limited = moe_comm_expected_domains(256, 8, 8, 8, 4);
    ASSERT_NEAR(limited, 4.0, 1e-12);
    /* One domain: always 1; k = E: every domain. */
    ASSERT_NEAR(moe_comm_expected_domains(64, 8, 1, 0, 0), 1.0, 0.0);
    ASSERT_NEAR(moe_comm_expected_domains(16, 16, 4, 0, 0), 4.0, 1e-12);
}

static void test_memory_by_hand(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 8, 1, 1, 1, 1);
    opt.use_distributed_optimizer = false;
    struct moe_param_counts pc;
    moe_cfg_param_counts(&cfg, 1, &pc);
    struct moe_mem_bytes m;
    moe_mem_stage(&cfg, &cl, &lay, &opt, 0, 1.0, &m);
    /* Megatron without the distributed optimizer: BF16 weight 2, FP32 grad 4, master+moments 12. */
    ASSERT_NEAR(m.weights, 2.0 * pc.total, 1e-6 * pc.total);
    ASSERT_NEAR(m.grads, 4.0 * pc.total, 1e-6 * pc.total);
    ASSERT_NEAR(m.optimizer, 12.0 * pc.total, 1e-6 * pc.total);
    /* With it, over DP=8 (EDP=8 for experts here): 12/8 per parameter. */
    opt.use_distributed_optimizer = true;
    moe_mem_stage(&cfg, &cl, &lay, &opt, 0, 1.0, &m);
    ASSERT_NEAR(m.optimizer, 12.0 * pc.total / 8.0, 1e-6 * pc.total);
    /* BF16 moments (precision-aware optimizer): 4 + 2 + 2 bytes. */
    opt.exp_avg_dtype = MOE_DTYPE_BF16;
    opt.exp_avg_sq_dtype = MOE_DTYPE_BF16;
    moe_mem_stage(&cfg, &cl, &lay, &opt, 0, 1.0, &m);
    ASSERT_NEAR(m.optimizer, 8.0 * pc.total / 8.0, 1e-6 * pc.total);
}

static void test_activation_dense_layer_by_hand(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 8, 1, 1, 1, 1);
    struct moe_act_bytes a;
    moe_mem_layer_activations(&cfg, &lay, &opt, false, 1.0, 0u, &a);
    double t = 4096.0;
    double h = 2048.0;
    /* Norm input, QKV input, q/k/v, FlashAttention output + LSE, MLP norm input,
     * fc1 input, fc1 output (2f), activation output (f) -- BF16, no TP. */
    double expect = t * h * 2.0                                     /* attn norm input */
                    + t * h * 2.0                                   /* QKV input */
                    + t * (16.0 + 2.0 * 4.0) * 128.0 * 2.0          /* q, k, v */
                    + t * 16.0 * 128.0 * 2.0 + t * 16.0 * 4.0       /* output, LSE */
                    + t * h * 2.0                                   /* MLP norm input */
                    + t * h * 2.0 + t * 8192.0 * (2.0 * 2.0 + 2.0); /* fc1 in, fc1 out, act out */
    ASSERT_NEAR(a.total, expect, 1.0);
}

static void test_recompute_never_more_memory(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 16, 2, 2, 1, 4);
    struct moe_prediction none = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_CLOSED_FORM);
    double prev_mem = none.mem.activations;
    double prev_time = none.step_time_s;
    const unsigned sets[] = {MOE_RC_CORE_ATTN, MOE_RC_CORE_ATTN | MOE_RC_MOE_ACT,
                             MOE_RC_CORE_ATTN | MOE_RC_MOE_ACT | MOE_RC_LAYERNORM,
                             MOE_RC_CORE_ATTN | MOE_RC_MOE_ACT | MOE_RC_LAYERNORM | MOE_RC_MLP |
                                 MOE_RC_MOE | MOE_RC_SHARED_EXPERTS};
    opt.recompute = MOE_RECOMPUTE_SELECTIVE;
    for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++) {
        opt.recompute_modules = sets[i];
        struct moe_prediction p = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_CLOSED_FORM);
        assert_true(p.mem.activations <= prev_mem + 1.0);
        assert_true(p.step_time_s >= prev_time - 1e-9);
        prev_mem = p.mem.activations;
        prev_time = p.step_time_s;
    }
    opt.recompute = MOE_RECOMPUTE_FULL;
    opt.recompute_method = MOE_RECOMPUTE_UNIFORM;
    opt.recompute_num_layers = 1;
    struct moe_prediction full = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_CLOSED_FORM);
    assert_true(full.mem.activations < none.mem.activations / 4.0);
    assert_true(full.step_time_s > none.step_time_s);
}

static void test_more_bandwidth_never_slower(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 32, 2, 2, 1, 16);
    struct moe_prediction base = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_SIMULATE);
    struct moe_cluster fast = cl;
    fast.nvlink.gbps *= 2.0;
    struct moe_prediction p1 = predict(&cfg, &fast, &lay, &opt, MOE_SCHED_SIMULATE);
    assert_true(p1.step_time_s <= base.step_time_s);
    fast = cl;
    fast.net.nic_gbps *= 2.0;
    struct moe_prediction p2 = predict(&cfg, &fast, &lay, &opt, MOE_SCHED_SIMULATE);
    assert_true(p2.step_time_s < base.step_time_s); /* EP16 spans two nodes */
    fast = cl;
    fast.gpu.hbm_tbps *= 2.0;
    struct moe_prediction p3 = predict(&cfg, &fast, &lay, &opt, MOE_SCHED_SIMULATE);
    assert_true(p3.step_time_s <= base.step_time_s);
}

static void test_ep_inside_domain_not_slower(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 16, 1, 1, 1, 16);
    struct moe_cluster big = cl; /* 16-GPU NVLink domain: EP16 inside it */
    big.nvlink.domain_gpus = 16;
    big.gpus_per_node = 16;
    for (int d = MOE_DISPATCH_ALLTOALL; d < MOE_NUM_DISPATCHERS; d++) {
        opt.dispatcher = (enum moe_dispatcher)d;
        struct moe_prediction across = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_SIMULATE);
        struct moe_prediction inside = predict(&cfg, &big, &lay, &opt, MOE_SCHED_SIMULATE);
        assert_true(inside.step_time_s <= across.step_time_s);
        assert_true(inside.comm.ep_inter_domain_fraction == 0.0);
    }
}

/* DeepEP's path as moefold's CPU engine runs it (run.json "unfused_dispatch"): the permutes
 * priced as the all-to-all's, plus the hierarchical path's own passes (engine/hier.c) by hand;
 * the busiest proxy's extra forwarding and permuting is the next exchange's wait. Fused (every
 * prediction of a GPU cluster) and the all-to-all dispatcher are unchanged by the flag. */
static void test_unfused_hierarchical_passes(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 16, 1, 1, 1, 16); /* EP16 over two 8-GPU domains */
    struct moe_layer_kind moe = {.is_moe = true, .is_windowed = false};
    double t = (double)lay.mbs * lay.seq_length;
    double k = cfg.moe_router_topk;
    double row = cfg.hidden_size * 2.0 / (cl.gpu.hbm_tbps * 1e12 * cl.dispatch.permute_bytes_eff);
    double copies = t * moe_comm_expected_domains(cfg.num_experts, (int)k, 2, 0, 0);
    double fwd_copy = t * k / 8.0 * row * 2.0; /* a proxy's rows for its own experts */
    double stays = copies / 2.0 * row * 2.0 + fwd_copy;
    double permute = t * k * row * 2.0;
    for (int i = 0; i < 2; i++) {
        double load = i == 0 ? 1.0 : 1.5;
        opt.dispatcher = MOE_DISPATCH_DEEPEP;
        opt.is_unfused_dispatch = false;
        struct moe_layer_cost fused, unfused;
        moe_compute_layer(&cfg, &cl, &lay, &opt, moe, load, 0.0, &fused);
        opt.is_unfused_dispatch = true;
        moe_compute_layer(&cfg, &cl, &lay, &opt, moe, load, 0.0, &unfused);
        double unpermute = (t * k * load * row * 2.0 + t * row);
        double tol = 1e-9 * unfused.fwd_combine;
        ASSERT_NEAR(unfused.fwd_dispatch - fused.fwd_dispatch, permute + copies * row * 2.0 + stays,
                    tol);
        ASSERT_NEAR(unfused.fwd_combine - fused.fwd_combine,
                    unpermute + copies * row * 3.0 + t * row + stays, tol);
        ASSERT_NEAR(unfused.bwd_combine - fused.bwd_combine, unpermute + copies * row * 2.0 + stays,
                    tol);
        ASSERT_NEAR(unfused.bwd_dispatch - fused.bwd_dispatch, permute + copies * row * 3.0 + stays,
                    tol);
        double extra = (load - 1.0) * (2.0 * fwd_copy + permute);
        ASSERT_NEAR(unfused.fwd_combine_wait - fused.fwd_combine_wait, extra, tol);
        ASSERT_NEAR(unfused.bwd_dispatch_wait - fused.bwd_dispatch_wait, extra, tol);
        assert_true(unfused.fwd_expert == fused.fwd_expert);

        opt.dispatcher = MOE_DISPATCH_ALLTOALL;
        struct moe_layer_cost a2a_flag, a2a;
        moe_compute_layer(&cfg, &cl, &lay, &opt, moe, load, 0.0, &a2a_flag);
        opt.is_unfused_dispatch = false;
        moe_compute_layer(&cfg, &cl, &lay, &opt, moe, load, 0.0, &a2a);
        assert_true(a2a_flag.fwd_dispatch == a2a.fwd_dispatch);
        assert_true(a2a_flag.fwd_combine == a2a.fwd_combine);
        assert_true(a2a_flag.fwd_combine_wait == a2a.fwd_combine_wait);
    }
}

/* The load-balancing losses' counts all-reduce (E int64 per loss and forward) lands in the forward
 * dispatch at its group's all-reduce time: TP x CP for aux_loss and seq_aux_loss, TP x DP x CP for
 * global_aux_loss; a one-rank group costs nothing; the step grows by it. */
static void test_load_balancing_allreduce(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 32, 2, 1, 1, 8); /* tp 2, dp 16 */
    struct moe_layer_kind moe = {.is_moe = true, .is_windowed = false};
    double counts = cfg.num_experts * 8.0;
    struct moe_group_place tpcp, tpdpcp;
    moe_comm_group_place(2, 1, cl.nvlink.domain_gpus, &tpcp);
    moe_comm_group_place(32, 1, cl.nvlink.domain_gpus, &tpdpcp);
    double ar = moe_comm_allreduce_s(&cl, &tpcp, counts);
    double ar_global = moe_comm_allreduce_s(&cl, &tpdpcp, counts);
    assert_true(ar > 0.0 && ar_global > ar); /* the global group crosses domains */

    struct moe_layer_cost off, on;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &off);
    struct moe_prediction p_off = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_SIMULATE);
    opt.aux_loss_coeff = 1e-2;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &on);
    ASSERT_NEAR(on.fwd_dispatch - off.fwd_dispatch, ar, 1e-12);
    assert_true(on.bwd_dispatch == off.bwd_dispatch && on.fwd_combine == off.fwd_combine);
    struct moe_prediction p_on = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_SIMULATE);
    assert_true(p_on.time.dispatch > p_off.time.dispatch);
    assert_true(p_on.step_time_s > p_off.step_time_s);

    opt.seq_aux_loss_coeff = 1e-4; /* a second loss: a second all-reduce */
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &on);
    ASSERT_NEAR(on.fwd_dispatch - off.fwd_dispatch, 2.0 * ar, 1e-12);
    opt.aux_loss_coeff = 0.0;
    opt.seq_aux_loss_coeff = 0.0;
    opt.global_aux_loss_coeff = 1e-3;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &on);
    ASSERT_NEAR(on.fwd_dispatch - off.fwd_dispatch, ar_global, 1e-12);

    /* TP 1, CP 1: the TP x CP losses have no one to sum with */
    setup(&cfg, &cl, &lay, &opt, 32, 1, 1, 1, 8);
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &off);
    opt.aux_loss_coeff = 1e-2;
    opt.seq_aux_loss_coeff = 1e-4;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &on);
    assert_true(on.fwd_dispatch == off.fwd_dispatch);
}

static void test_phases_sum_to_step(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 32, 2, 4, 2, 8);
    opt.overlap_grad_reduce = true;
    opt.overlap_moe_ep_comm = true;
    for (int mode = 0; mode < 2; mode++) {
        struct moe_prediction p = predict(&cfg, &cl, &lay, &opt, (enum moe_schedule_mode)mode);
        const struct moe_phase_times *t = &p.time;
        double sum = t->compute + t->expert_gemm + t->dispatch + t->combine + t->tp_comm +
                     t->cp_comm + t->pp_comm + t->dp_comm + t->pp_bubble + t->optimizer +
                     t->host_overhead;
        ASSERT_NEAR(sum, p.step_time_s, 1e-9 * p.step_time_s);
        ASSERT_NEAR(t->ep_comm, t->dispatch + t->combine, 1e-12);
        ASSERT_NEAR(p.tokens_per_s_per_gpu * p.step_time_s * lay.num_gpus,
                    (double)lay.gbs * lay.seq_length, 1e-6);
    }
}

static void test_bubble_closed_form_and_simulation(void **state)
{
    (void)state;
    /* Uniform stages: 1F1B total = (m + pp - 1) * (F + B); interleaved divides the bubble by vpp.
     */
    double fwd[16];
    double bwd[16];
    for (int i = 0; i < 16; i++) {
        fwd[i] = 1.0;
        bwd[i] = 2.0;
    }
    struct moe_sched_input in = {4, 1, 8, fwd, bwd, 0.0, NULL};
    struct moe_sched_result cf;
    struct moe_sched_result sim;
    moe_sched_closed_form(&in, &cf);
    ASSERT_NEAR(cf.total_s, (8 + 3) * 3.0, 1e-12);
    size_t n = moe_sched_workspace_bytes(4, 4, 8);
    void *ws = malloc(n);
    assert_int_equal(moe_sched_simulate(&in, ws, n, &sim), MOE_OK);
    ASSERT_NEAR(sim.total_s, cf.total_s, 1e-9);
    /* Interleaved, vpp 4, chunk times 1/4 of the stage: bubble (pp-1)/vpp chunk-stage times. */
    for (int i = 0; i < 16; i++) {
        fwd[i] = 0.25;
        bwd[i] = 0.5;
    }
    struct moe_sched_input iv = {4, 4, 8, fwd, bwd, 0.0, NULL};
    moe_sched_closed_form(&iv, &cf);
    ASSERT_NEAR(cf.total_s, 8 * 3.0 + 3 * 3.0 / 4.0, 1e-12);
    assert_int_equal(moe_sched_simulate(&iv, ws, n, &sim), MOE_OK);
    assert_true(sim.total_s <= 8 * 3.0 + 3 * 3.0 + 1e-9); /* never worse than 1F1B */
    assert_true(sim.total_s >= 8 * 3.0 - 1e-9);
    ASSERT_NEAR(sim.total_s, cf.total_s, 0.05 * cf.total_s);
    /* A slow stage bounds throughput: m * S_max. */
    for (int i = 0; i < 4; i++) {
        fwd[i] = 1.0;
        bwd[i] = 2.0;
    }
    fwd[2] = 2.0;
    bwd[2] = 4.0;
    in.fwd_s = fwd;
    in.bwd_s = bwd;
    assert_int_equal(moe_sched_simulate(&in, ws, n, &sim), MOE_OK);
    assert_true(sim.total_s >= 8 * 6.0);
    free(ws);
}

static void test_imbalance(void **state)
{
    (void)state;
    struct moe_load_stats s0;
    struct moe_load_stats s1;
    struct moe_diag d = {0};
    struct moe_imbalance_params p = {256, 8, 32, 1e6, 0.0, 200, 7};
    assert_int_equal(moe_imbalance_monte_carlo(&p, &s0, &d), MOE_OK);
    assert_true(s0.mean_factor >= 1.0 && s0.mean_factor < 1.02); /* finite-token noise only */
    p.cv = 0.3;
    assert_int_equal(moe_imbalance_monte_carlo(&p, &s1, &d), MOE_OK);
    assert_true(s1.mean_factor > s0.mean_factor + 0.05);
    assert_true(s1.p99_factor >= s1.p50_factor);
    struct moe_load_stats again;
    assert_int_equal(moe_imbalance_monte_carlo(&p, &again, &d), MOE_OK);
    assert_true(again.mean_factor == s1.mean_factor); /* seeded: identical */
    p.ep = 7;
    assert_int_equal(moe_imbalance_monte_carlo(&p, &again, &d), MOE_ERR_INVALID);
    assert_non_null(strstr(d.message, "divisible"));
}

/*
 * The Monte Carlo draws each EP rank's load directly (Dirichlet and multinomial aggregation):
 * its statistics match a draw of every expert summed per rank, here written out with GSL, within
 * Monte Carlo error (a rank-level Dirichlet without the E/EP factor on its alpha would spread the
 * ranks' shares sqrt(E/EP) = 2.8x as wide).
 */
static void test_imbalance_per_expert_reference(void **state)
{
    (void)state;
    enum { E = 64, K = 4, EP = 8, N = 4000 };
    const double cv = 0.3;
    const double tokens = 4096.0;
    double alpha[E];
    double prob[E];
    unsigned int counts[E];
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    assert_non_null(rng);
    gsl_rng_set(rng, 12345);
    for (int i = 0; i < E; i++) {
        alpha[i] = 1.0 / (cv * cv);
    }
    double sum = 0.0;
    double sum2 = 0.0;
    for (int s = 0; s < N; s++) {
        gsl_ran_dirichlet(rng, E, alpha, prob);
        gsl_ran_multinomial(rng, E, (unsigned int)(tokens * K), prob, counts);
        double most = 0.0;
        for (int r = 0; r < EP; r++) {
            double load = 0.0;
            for (int j = 0; j < E / EP; j++) {
                load += counts[r * (E / EP) + j];
            }
            most = fmax(most, load);
        }
        double f = most / (tokens * K / EP);
        sum += f;
        sum2 += f * f;
    }
    gsl_rng_free(rng);
    double ref = sum / N;
    double se = sqrt((sum2 / N - ref * ref) / N);
    struct moe_imbalance_params p = {E, K, EP, tokens, cv, N, 7};
    struct moe_load_stats got;
    struct moe_diag d = {0};
    assert_int_equal(moe_imbalance_monte_carlo(&p, &got, &d), MOE_OK);
    print_message("imbalance: per-expert reference %.4f +- %.4f, rank-level draw %.4f\n", ref, se,
                  got.mean_factor);
    assert_true(fabs(got.mean_factor - ref) < 4.0 * sqrt(2.0) * se);
}

static void test_more_imbalance_slower(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 8, 1, 1, 1, 8);
    opt.force_load_balancing = false;
    opt.moe_imbalance = 1.0;
    struct moe_prediction a = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_CLOSED_FORM);
    opt.moe_imbalance = 1.3;
    struct moe_prediction b = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_CLOSED_FORM);
    assert_true(b.step_time_s > a.step_time_s);
    assert_true(b.mem.activations > a.mem.activations);
    /* Hot-expert replicas lower the effective load, at a memory cost. */
    opt.moe_hot_expert_replicas = 4;
    struct moe_prediction c = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_CLOSED_FORM);
    assert_true(c.step_time_s < b.step_time_s);
    assert_true(c.mem.weights > b.mem.weights);
    /* A capacity factor caps the busiest rank at that multiple of the mean (tokens dropped). */
    opt.moe_hot_expert_replicas = 0;
    opt.capacity_factor = 1.1;
    struct moe_prediction d = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_CLOSED_FORM);
    assert_true(fabs(d.load_factor - 1.1) < 1e-12);
    assert_true(d.step_time_s < b.step_time_s);
    opt.capacity_factor = 2.0; /* above the load: the load stands (only the dropless sync goes) */
    struct moe_prediction e = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_CLOSED_FORM);
    assert_true(fabs(e.load_factor - 1.3) < 1e-12);
    assert_true(e.step_time_s > d.step_time_s && e.step_time_s <= b.step_time_s);
}

/*
 * One workspace reused across layouts and models (the search's pattern) gives exactly the
 * predictions of a fresh workspace each time: the workspace's per-layout arrays are recomputed
 * whenever the model (other layer count, other bytes at the same address) or the layout changes.
 */
static void test_workspace_reuse(void **state)
{
    (void)state;
    struct shape {
        int gpus, tp, pp, vpp, ep;
    };
    static const struct shape shapes[] = {
        {16, 2, 2, 1, 4}, {16, 2, 4, 2, 4}, {16, 1, 2, 2, 8}, {16, 2, 2, 1, 4}, {32, 2, 4, 1, 8},
    };
    struct moe_cluster cl;
    test_cluster(&cl);
    struct moe_model_cfg cfg;
    size_t cap = 1 << 20;
    void *shared = malloc(cap);
    assert_non_null(shared);
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        for (int model = 0; model < 2; model++) {
            const struct shape *sh = &shapes[i];
            struct moe_layout lay;
            struct moe_options opt;
            setup(&cfg, &cl, &lay, &opt, sh->gpus, sh->tp, sh->pp, sh->vpp, sh->ep);
            if (model == 1) { /* same address, other contents: first two layers dense */
                moe_cfg_set_first_dense(&cfg, 2);
                cfg.moe_ffn_hidden_size = 2048;
                struct moe_diag d = {0};
                assert_int_equal(moe_layout_resolve(&cfg, &cl, &opt, &lay, &d), MOE_OK);
            }
            struct moe_cost_prep prep;
            moe_cost_prepare(&cfg, &prep);
            size_t n = moe_cost_workspace_bytes(&lay, MOE_SCHED_CLOSED_FORM);
            assert_true(n <= cap);
            for (int rep = 0; rep < 2; rep++) {
                struct moe_prediction a;
                struct moe_prediction b;
                struct moe_diag d = {0};
                void *fresh = calloc(1, n);
                assert_non_null(fresh);
                assert_int_equal(moe_cost_predict_prepared(&prep, &cl, &lay, &opt, NULL,
                                                           MOE_SCHED_CLOSED_FORM, shared, cap, &a,
                                                           &d),
                                 MOE_OK);
                assert_int_equal(moe_cost_predict_prepared(&prep, &cl, &lay, &opt, NULL,
                                                           MOE_SCHED_CLOSED_FORM, fresh, n, &b, &d),
                                 MOE_OK);
                assert_true(a.step_time_s == b.step_time_s);
                assert_true(a.mem.total == b.mem.total && a.mem.weights == b.mem.weights);
                free(fresh);
                opt.recompute = MOE_RECOMPUTE_FULL; /* other options, same layout */
                opt.recompute_num_layers = 1;
            }
        }
    }
    free(shared);
}

/* xorshift64*: deterministic random options for the key test. */
static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    return *x * 2685821657736338717ULL;
}

/* Re-draw the fields of opt chosen by mask (bit i: field i below); memory reads some of them. */
static void random_fields(struct moe_options *opt, uint32_t mask, uint64_t *x)
{
    static const double fractions[] = {0.25, 0.5, 1.0};
#define DRAW(bit, field, expr)                                                                     \
    if (mask & (1u << (bit))) {                                                                    \
        field = (expr);                                                                            \
    }
    DRAW(0, opt->recipe, (enum moe_recipe)(rng_next(x) % MOE_NUM_RECIPES));
    DRAW(1, opt->is_fp32_training, rng_next(x) % 4 == 0);
    DRAW(2, opt->fp8_param_gather, rng_next(x) % 2 == 0);
    DRAW(3, opt->use_distributed_optimizer, rng_next(x) % 2 == 0);
    DRAW(4, opt->optimizer_cpu_offload, rng_next(x) % 2 == 0);
    DRAW(5, opt->optimizer_offload_fraction, fractions[rng_next(x) % 3]);
    DRAW(6, opt->main_grads_dtype, rng_next(x) % 2 ? MOE_DTYPE_FP32 : MOE_DTYPE_BF16);
    DRAW(7, opt->exp_avg_dtype, rng_next(x) % 2 ? MOE_DTYPE_FP32 : MOE_DTYPE_BF16);
    DRAW(8, opt->dispatcher, (enum moe_dispatcher)(rng_next(x) % MOE_NUM_DISPATCHERS));
    DRAW(9, opt->recompute, (enum moe_recompute_granularity)(rng_next(x) % 3));
    DRAW(10, opt->recompute_method, rng_next(x) % 2 ? MOE_RECOMPUTE_BLOCK : MOE_RECOMPUTE_UNIFORM);
    DRAW(11, opt->recompute_num_layers, (int)(rng_next(x) % 4));
    DRAW(12, opt->recompute_modules, (unsigned)(rng_next(x) & MOE_RC_ALL));
    DRAW(13, opt->cpu_offloading_num_layers, (int)(rng_next(x) % 3));
    DRAW(14, opt->fine_grained_offload, rng_next(x) % 2 == 0);
    DRAW(15, opt->offload_modules, (unsigned)(rng_next(x) & MOE_OFF_ALL));
    DRAW(16, opt->moe_hot_expert_replicas, rng_next(x) % 3 == 0 ? 4 : 0);
    /* Options the memory model does not read. */
    DRAW(17, opt->tp_comm_overlap, rng_next(x) % 2 == 0);
    DRAW(18, opt->overlap_moe_ep_comm, rng_next(x) % 2 == 0);
    DRAW(19, opt->moe_grouped_gemm, rng_next(x) % 2 == 0);
    DRAW(20, opt->cuda_graph_impl, rng_next(x) % 2 ? MOE_CG_NONE : MOE_CG_LOCAL);
#undef DRAW
}

/* Option sets with equal memory keys have equal memory on every stage (the planner shares one
 * figure among them); pairs are a random set and a copy with a few fields re-drawn, so both
 * outcomes occur often. */
static void test_mem_opt_key(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options base;
    setup(&cfg, &cl, &lay, &base, 32, 2, 4, 1, 8);
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    int equal = 0;
    int differ = 0;
    for (int i = 0; i < 4000; i++) {
        cl.overheads.flex_buffer_gib = (i / 2000) ? 0.0 : 2.0; /* with and without a pool */
        struct moe_options a = base;
        random_fields(&a, 0x1fffffu, &x);
        struct moe_options b = a;
        random_fields(
            &b, (uint32_t)(1u << (rng_next(&x) % 21)) | (uint32_t)(1u << (rng_next(&x) % 21)), &x);
        struct moe_mem_opt_key ka;
        struct moe_mem_opt_key kb;
        memset(&ka, 0, sizeof(ka));
        memset(&kb, 0, sizeof(kb));
        moe_mem_opt_key(&cl, &a, &ka);
        moe_mem_opt_key(&cl, &b, &kb);
        bool same_key = memcmp(&ka, &kb, sizeof(ka)) == 0;
        bool same_mem = true;
        for (int p = 0; p < lay.pp; p++) {
            struct moe_mem_bytes ma;
            struct moe_mem_bytes mb;
            moe_mem_stage(&cfg, &cl, &lay, &a, p, 1.3, &ma);
            moe_mem_stage(&cfg, &cl, &lay, &b, p, 1.3, &mb);
            same_mem = same_mem && ma.total == mb.total && ma.host_offload == mb.host_offload &&
                       ma.activations == mb.activations && ma.weights == mb.weights;
        }
        if (same_key && !same_mem) {
            fail_msg("pair %d: equal memory keys, different memory", i);
        }
        equal += same_key;
        differ += !same_mem;
    }
    assert_true(equal > 1000);  /* many pairs differ only where memory does not look */
    assert_true(differ > 1000); /* and many where it does */
}

/*
 * A prep with a fixed cluster (memo_cl) keeps layer costs and the loss / MTP / embedding terms in
 * its workspace and reuses them for option sets that share them; mean_only skips the p50 / p99 step
 * times. Along a walk of option sets, each a few fields away from the last (so that kept terms are
 * found often: recompute, offload and time-only knobs), on two clusters and two layouts, every
 * prediction equals, byte for byte, moe_cost_predict's in a workspace of its own -- except p50 and
 * p99 under mean_only, which equal the mean step time.
 */
static void test_workspace_memo(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cls[2];
    struct moe_layout lays[2];
    struct moe_options base;
    setup(&cfg, &cls[0], &lays[0], &base, 32, 2, 4, 1, 8);
    setup(&cfg, &cls[0], &lays[1], &base, 32, 1, 2, 2, 8);
    cls[1] = cls[0];
    cls[1].host.link_gbps = 2.0; /* offload copies show */
    cls[1].overheads.flex_buffer_gib = 0.0;
    const struct moe_load_stats stats = {1.25, 1.2, 1.6};
    size_t cap = 1 << 20;
    void *shared = malloc(cap);
    void *own = malloc(cap);
    assert_non_null(shared);
    assert_non_null(own);
    uint64_t x = 0x2545f4914f6cdd1dULL;
    struct moe_options opt = base;
    for (int i = 0; i < 3000; i++) {
        const struct moe_cluster *cl = &cls[(i / 500) % 2];
        const struct moe_layout *lay = &lays[(i / 250) % 2];
        bool with_stats = (i / 125) % 2 != 0;
        struct moe_cost_prep prep;
        moe_cost_prepare(&cfg, &prep);
        prep.memo_cl = cl;
        prep.mean_only = with_stats && i % 3 != 0;
        random_fields(&opt,
                      (uint32_t)(1u << (rng_next(&x) % 21)) | (uint32_t)(1u << (rng_next(&x) % 21)),
                      &x);
        const struct moe_load_stats *ls = with_stats ? &stats : NULL;
        struct moe_prediction a;
        struct moe_prediction b;
        struct moe_diag d = {0};
        assert_int_equal(moe_cost_predict_prepared(&prep, cl, lay, &opt, ls, MOE_SCHED_CLOSED_FORM,
                                                   shared, cap, &a, &d),
                         MOE_OK);
        memset(own, 0, cap);
        assert_int_equal(
            moe_cost_predict(&cfg, cl, lay, &opt, ls, MOE_SCHED_CLOSED_FORM, own, cap, &b, &d),
            MOE_OK);
        if (prep.mean_only) {
            assert_true(a.step_time_p50_s == a.step_time_s && a.step_time_p99_s == a.step_time_s);
            a.step_time_p50_s = b.step_time_p50_s;
            a.step_time_p99_s = b.step_time_p99_s;
        }
        if (memcmp(&a, &b, sizeof(a)) != 0) {
            fail_msg("option set %d: %.17g s vs %.17g s on a workspace of its own", i,
                     a.step_time_s, b.step_time_s);
        }
    }
    free(own);
    free(shared);
}

/* The pass parts a prediction exports price another offload volume exactly: on one pipeline rank
 * the per-micro-batch pass sum grows by what moe_pass_with_copy gives for each layer. */
static void test_pass_parts_price_offload(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 16, 2, 1, 1, 4);
    cl.host.link_gbps = 2.0; /* slow enough that the copies show */
    struct moe_prediction p0 = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_CLOSED_FORM);
    const unsigned sets[] = {MOE_OFF_EXPERT_FC1 | MOE_OFF_MOE_ACT, MOE_OFF_ALL};
    for (int ep_overlap = 0; ep_overlap < 2; ep_overlap++) {
        opt.overlap_moe_ep_comm = ep_overlap != 0;
        p0 = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_CLOSED_FORM);
        for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++) {
            struct moe_options o = opt;
            o.fine_grained_offload = true;
            o.offload_modules = sets[i];
            struct moe_prediction p1 = predict(&cfg, &cl, &lay, &o, MOE_SCHED_CLOSED_FORM);
            double grow = 0.0;
            for (int l = 0; l < cfg.num_layers; l++) {
                bool is_moe = (cfg.layer_flags[l] & MOE_LAYER_MOE) != 0;
                double c = moe_compute_offload_copy_s(
                    &cl, moe_cost_offload_bytes(&cfg, &lay, &o, is_moe, p0.load_factor));
                for (int d = 0; d < 2; d++) {
                    const struct moe_pass_parts *pp = &p0.pass[is_moe][0][d];
                    grow += moe_pass_with_copy(pp, c) - moe_pass_with_copy(pp, 0.0);
                }
            }
            assert_true(grow > 0.0);
            ASSERT_NEAR(p1.stage_time_s[0] - p0.stage_time_s[0], grow, 1e-9 * p1.stage_time_s[0]);
        }
    }
}

static void test_unresolved_layout_rejected(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    test_model(&cfg);
    test_cluster(&cl);
    moe_layout_init(&lay);
    moe_options_init(&opt);
    struct moe_prediction p;
    struct moe_diag d = {0};
    double ws[64];
    assert_int_equal(moe_cost_predict(&cfg, &cl, &lay, &opt, NULL, MOE_SCHED_CLOSED_FORM, ws,
                                      sizeof(ws), &p, &d),
                     MOE_ERR_INVALID);
    assert_non_null(strstr(d.message, "resolve"));
}

/* Phase values of t in enum moe_phase order. */
static void phase_array(const struct moe_phase_times *t, double *v)
{
    const double a[MOE_NUM_PHASES] = {t->compute,   t->expert_gemm, t->dispatch,     t->combine,
                                      t->tp_comm,   t->cp_comm,     t->pp_comm,      t->dp_comm,
                                      t->pp_bubble, t->optimizer,   t->host_overhead};
    memcpy(v, a, sizeof(a));
}

/* The prediction's phases added up (they sum to the step). */
static double phases_total(const struct moe_phase_times *t)
{
    double v[MOE_NUM_PHASES];
    phase_array(t, v);
    double sum = 0.0;
    for (int k = 0; k < MOE_NUM_PHASES; k++) {
        sum += v[k];
    }
    return sum;
}

/* The timeline of PP2 x VPP2 with EP imbalance: per stage and track no two events overlap, each
 * stage's events fill exactly its step window, every stage's phases add up to the step, and the
 * critical stage's equal the prediction's phases and wait shares. */
static void check_timeline(struct moe_layout *lay, struct moe_options *opt, bool tied)
{
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    test_model(&cfg);
    cfg.is_untied_embeddings = !tied;
    test_cluster(&cl);
    cl.overheads.step_fixed_ms = 2.0;
    size_t n = moe_cost_workspace_bytes(lay, MOE_SCHED_SIMULATE);
    size_t cap = moe_cost_timeline_max_events(lay);
    void *ws = malloc(n);
    struct moe_tl_event *ev = malloc(cap * sizeof(*ev));
    double *sp = malloc((size_t)lay->pp * MOE_NUM_PHASES * sizeof(double));
    assert_non_null(ws);
    assert_non_null(ev);
    assert_non_null(sp);
    struct moe_prediction pred;
    struct moe_diag d = {0};
    size_t num = 0;
    assert_int_equal(
        moe_cost_timeline(&cfg, &cl, lay, opt, NULL, ws, n, ev, cap - 1, &num, sp, &pred, &d),
        MOE_ERR_INVALID);
    assert_int_equal(
        moe_cost_timeline(&cfg, &cl, lay, opt, NULL, ws, n, ev, cap, &num, sp, &pred, &d), MOE_OK);
    assert_true(num > (size_t)(2 * lay->num_chunks * lay->num_microbatches));
    struct moe_prediction plain = predict(&cfg, &cl, lay, opt, MOE_SCHED_SIMULATE);
    ASSERT_NEAR(pred.step_time_s, plain.step_time_s, 1e-12);
    double T = pred.step_time_s;
    for (int p = 0; p < lay->pp; p++) {
        double lo = INFINITY;
        double hi = -INFINITY;
        double sum[MOE_NUM_PHASES] = {0};
        for (size_t i = 0; i < num; i++) {
            if (ev[i].stage != p) {
                continue;
            }
            assert_true(ev[i].dur_s > 0.0);
            assert_int_equal(ev[i].track, moe_tl_track_of((enum moe_phase)ev[i].phase));
            lo = fmin(lo, ev[i].start_s);
            hi = fmax(hi, ev[i].start_s + ev[i].dur_s);
            sum[ev[i].phase] += ev[i].dur_s;
            for (size_t j = i + 1; j < num; j++) { /* small timeline: quadratic is fine */
                if (ev[j].stage == p && ev[j].track == ev[i].track) {
                    double a0 = ev[i].start_s;
                    double a1 = a0 + ev[i].dur_s;
                    double b0 = ev[j].start_s;
                    double b1 = b0 + ev[j].dur_s;
                    assert_true(a1 <= b0 + 1e-12 * T || b1 <= a0 + 1e-12 * T);
                }
            }
        }
        ASSERT_NEAR(hi - lo, T, 1e-9 * T);
        double row = 0.0;
        for (int k = 0; k < MOE_NUM_PHASES; k++) {
            ASSERT_NEAR(sum[k], sp[(size_t)p * MOE_NUM_PHASES + (size_t)k], 1e-9 * T);
            row += sum[k];
        }
        ASSERT_NEAR(row, T, 1e-9 * T);
    }
    double want[MOE_NUM_PHASES];
    phase_array(&pred.time, want);
    for (int k = 0; k < MOE_NUM_PHASES; k++) {
        ASSERT_NEAR(sp[(size_t)pred.critical_stage * MOE_NUM_PHASES + (size_t)k], want[k],
                    1e-9 * T);
    }
    double wait_c = 0.0;
    for (size_t i = 0; i < num; i++) {
        if (ev[i].stage == pred.critical_stage && ev[i].is_wait &&
            ev[i].phase == MOE_PHASE_COMBINE) {
            wait_c += ev[i].dur_s;
        }
    }
    ASSERT_NEAR(wait_c, pred.wait.combine, 1e-9 * T);
    free(ws);
    free(ev);
    free(sp);
}

/* A pipeline whose first and last stages share the embedding's gradient (tied embeddings, or MTP)
 * sums it over the two after the gradient reduction: the stage that gets there first waits there
 * (dp_comm's wait, as the engine books it), not in the gradient-norm all-reduce (the optimizer's
 * wait). Untied, no MTP: no such wait. The step is the same either way (the stages still meet at
 * the norm all-reduce). */
static void test_embedding_wait(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 16, 1, 2, 1, 8);
    struct moe_prediction untied = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_SIMULATE);
    assert_true(untied.wait.dp_comm == 0.0); /* the test cluster's rank spread is 0 */
    cfg.mtp_num_layers = 1;
    struct moe_diag d = {0};
    assert_int_equal(moe_layout_resolve(&cfg, &cl, &opt, &lay, &d), MOE_OK);
    struct moe_prediction mtp = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_SIMULATE);
    assert_int_equal(mtp.critical_stage, 1); /* the loss, the head and the MTP layer */
    assert_true(mtp.wait.dp_comm > 0.0);
    assert_true(mtp.wait.dp_comm <= mtp.time.dp_comm);
    assert_true(mtp.wait.optimizer <= mtp.time.optimizer);
    /* The last stage ends its schedule before the first stage's last backward: its wait is the
     * first stage's lead there, and nothing is left for the norm all-reduce beyond the first
     * stage's heavier optimizer work (none here: the last stage holds more). */
    ASSERT_NEAR(mtp.wait.optimizer, 0.0, 1e-12);
    ASSERT_NEAR(phases_total(&mtp.time), mtp.step_time_s, 1e-9 * mtp.step_time_s);
}

static void test_timeline(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 16, 1, 2, 2, 8);
    opt.force_load_balancing = false;
    opt.moe_imbalance = 1.4;
    check_timeline(&lay, &opt, false);
    check_timeline(&lay, &opt, true);            /* the embedding all-reduce's wait in dp_comm */
    setup(&cfg, &cl, &lay, &opt, 8, 1, 1, 1, 8); /* one stage: no bubble, no optimizer wait */
    check_timeline(&lay, &opt, false);
}

/*
 * EP imbalance is waiting, not work: the expert GEMMs are priced at the mean rows and the busiest
 * rank's extra time is the wait share of forward combine and backward dispatch (the exchanges
 * after the expert GEMMs); the step grows by it. Pipeline stages start their schedule after their
 * own optimizer work: a stage with a lighter optimizer starts earlier and waits for the others in
 * the gradient-norm all-reduce, which the optimizer's wait share holds; the step is never longer
 * than with a barrier at the step's end (the closed form's assumption).
 */
static void test_ep_wait_and_stage_offsets(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 8, 1, 1, 1, 8);
    opt.force_load_balancing = false;
    opt.moe_imbalance = 1.0;
    struct moe_prediction a = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_SIMULATE);
    assert_true(a.wait.combine == 0.0 && a.wait.dispatch == 0.0);
    opt.moe_imbalance = 1.5;
    struct moe_prediction b = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_SIMULATE);
    ASSERT_NEAR(b.time.expert_gemm, a.time.expert_gemm, 1e-12);
    assert_true(b.wait.combine > 0.0 && b.wait.dispatch > 0.0);
    /* The step grows by the EP phases only: the wait (the busiest rank's extra expert time, less
     * than half the mean rank's expert time at 1.5 x the rows: the shared expert is balanced) and
     * the busiest rank's larger share of the exchanged bytes. */
    double extra = b.step_time_s - a.step_time_s;
    double waits = b.wait.combine + b.wait.dispatch;
    assert_true(waits > 0.0 && waits < extra);
    assert_true(waits < 0.5 * b.time.expert_gemm);
    ASSERT_NEAR(extra, b.time.ep_comm - a.time.ep_comm, 1e-9 * b.step_time_s);
    ASSERT_NEAR(b.time.compute, a.time.compute, 1e-12);

    setup(&cfg, &cl, &lay, &opt, 16, 1, 2, 1, 8);
    struct moe_prediction s = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_SIMULATE);
    assert_true(s.step_time_s > 0.0);
    assert_true(s.wait.optimizer >= 0.0);
    assert_true(s.critical_stage >= 0 && s.critical_stage < 2);
    ASSERT_NEAR(phases_total(&s.time), s.step_time_s, 1e-9 * s.step_time_s);
    /* The barrier form adds the longest optimizer after the slowest schedule: never shorter. */
    struct moe_prediction c = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_CLOSED_FORM);
    assert_true(s.step_time_s <= c.step_time_s * (1.0 + 1e-9) + s.time.pp_bubble);
}

/*
 * Host work the layer loop does not see. (1) Every parameter tensor of a layer runs a Python
 * gradient hook in each backward (model/compute.c layer_param_tensors): the test MoE layer at
 * EP4 holds QKV with its norm (2), the output projection (1), the MLP norm (1), the router (1),
 * 2 GEMMs for each of its 4 local experts (8) and the shared expert's 2: 15 tensors. (2) The
 * forward's token-count synchronisation empties the launch queue: with the attention and router
 * in CUDA graphs, expert launches slower than the experts' own GPU time are exposed although the
 * layer's host time stays under its GPU time. (3) The schedule's work per model chunk: more
 * chunks, more host time where the host is the bottleneck.
 */
static void test_host_model(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 4, 1, 1, 1, 4);
    struct moe_layer_kind moe = {true, false};
    struct moe_layer_cost a;
    struct moe_layer_cost b;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &a);
    struct moe_cluster hooks = cl;
    hooks.gpu.host_param_us = 10.0;
    moe_compute_layer(&cfg, &hooks, &lay, &opt, moe, 1.0, 0.0, &b);
    ASSERT_NEAR(b.host_bwd - a.host_bwd, 15.0 * 10.0e-6, 1e-12);
    ASSERT_NEAR(b.host_fwd, a.host_fwd, 1e-15);

    /* (2) attention and router graphed; the experts' launches at twice their GPU time. */
    opt.cuda_graph_impl = MOE_CG_TE;
    opt.cuda_graph_modules = MOE_CGM_ATTN | MOE_CGM_MOE_ROUTER | MOE_CGM_MOE_PREPROCESS;
    opt.dispatcher = MOE_DISPATCH_ALLTOALL;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &a);
    assert_true(a.host_fwd_post > 0.0);
    double gpu_post = a.fwd_expert - a.fwd_shared + a.fwd_dispatch + a.fwd_combine;
    double gpu_f = a.fwd_compute + a.fwd_expert + a.fwd_dispatch + a.fwd_combine + a.fwd_tp;
    struct moe_cluster slow = cl;
    slow.gpu.kernel_launch_us *= 2.0 * gpu_post / a.host_fwd_post;
    slow.gpu.host_cpp_op_us *= 2.0 * gpu_post / a.host_fwd_post;
    slow.overheads.moe_host_sync_us = 0.0;
    slow.overheads.step_fixed_ms = 0.0;
    moe_compute_layer(&cfg, &slow, &lay, &opt, moe, 1.0, 0.0, &b);
    ASSERT_NEAR(b.host_fwd_post, 2.0 * gpu_post, 1e-9);
    assert_true(b.host_fwd < gpu_f);
    struct moe_prediction p = predict(&cfg, &slow, &lay, &opt, MOE_SCHED_SIMULATE);
    /* Each MoE layer's forward exposes at least its experts' excess launch time. */
    double moe_layers = cfg.num_layers - 1;
    double m = (double)lay.gbs / (lay.mbs * lay.dp);
    assert_true(p.time.host_overhead >= 0.99 * moe_layers * m * gpu_post);

    /* (2b) The same under the 1F1B A2A overlap: the paired backward's expert GEMMs were launched
     * before the forward's synchronisation and run while the host launches the experts, which
     * then hide behind them: the excess of (2) disappears. One host thread still issues both
     * passes: a host slower than the pair's GPU time is exposed by the difference. */
    opt.overlap_moe_ep_comm = true;
    struct moe_cluster even = slow;
    struct moe_layer_cost e;
    moe_compute_layer(&cfg, &even, &lay, &opt, moe, 1.0, 0.0, &e);
    struct moe_prediction q = predict(&cfg, &even, &lay, &opt, MOE_SCHED_SIMULATE);
    printf("  host: %.6f s without the overlap, %.6f with it; launches after the sync %.6f, the "
           "experts' backward %.6f s a layer\n",
           p.time.host_overhead, q.time.host_overhead, e.host_fwd_post, e.bwd_expert);
    assert_true(q.time.host_overhead < 0.5 * p.time.host_overhead);
    even.gpu.kernel_launch_us *= 20.0;
    even.gpu.host_cpp_op_us *= 20.0;
    struct moe_layer_cost h;
    moe_compute_layer(&cfg, &even, &lay, &opt, moe, 1.0, 0.0, &h);
    struct moe_prediction r = predict(&cfg, &even, &lay, &opt, MOE_SCHED_SIMULATE);
    double gpu_pair = h.fwd_compute + h.fwd_expert + h.fwd_dispatch + h.fwd_combine + h.fwd_tp +
                      h.bwd_compute + h.bwd_expert + h.bwd_dispatch + h.bwd_combine + h.bwd_tp;
    assert_true(r.time.host_overhead >=
                0.99 * moe_layers * m * (h.host_fwd + h.host_bwd - gpu_pair));
    opt.overlap_moe_ep_comm = false;

    /* (3) Host-bound: two chunks per stage cost more host time than one. */
    setup(&cfg, &cl, &lay, &opt, 8, 1, 2, 1, 4);
    cl.gpu.kernel_launch_us = 5000.0;
    struct moe_prediction one = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_SIMULATE);
    struct moe_cluster same = cl;
    setup(&cfg, &cl, &lay, &opt, 8, 1, 2, 2, 4);
    struct moe_prediction two = predict(&cfg, &same, &lay, &opt, MOE_SCHED_SIMULATE);
    assert_true(two.time.host_overhead > one.time.host_overhead);
    ASSERT_NEAR(moe_compute_sched_host_s(&same, &opt, 2, 3, true) -
                    moe_compute_sched_host_s(&same, &opt, 1, 3, true),
                moe_compute_sched_host_s(&same, &opt, 1, 0, true), 1e-12);
    opt.cuda_graph_impl = MOE_CG_LOCAL;
    opt.cuda_graph_modules = MOE_CGM_FULL_ITERATION;
    assert_true(moe_compute_sched_host_s(&same, &opt, 2, 3, true) == 0.0);
}

/* GPT-OSS's expert path and selective recompute on the host (model/compute.c host_ops): the
 * per-expert bias loop, the quick-GeGLU's clamps and device-made offset (a host sync), and each
 * checkpointed module's wrapper in the forward and re-run in the backward. */
static void test_host_bias_geglu_recompute(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    setup(&cfg, &cl, &lay, &opt, 4, 1, 1, 1, 4);
    cl.overheads.moe_host_sync_us = 25.0;
    double t_py = cl.gpu.kernel_launch_us * 1e-6;
    double n = (double)cfg.num_experts / lay.ep;
    struct moe_layer_kind moe = {true, false};
    struct moe_layer_cost a;
    struct moe_layer_cost b;
    struct moe_layer_cost c;
    struct moe_layer_cost d;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &a);
    cfg.has_linear_bias = true;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &b);
    /* _apply_bias: 2 ops per local expert and a cat, a quarter call each, after the sync. */
    ASSERT_NEAR(b.host_fwd - a.host_fwd, (2.0 * n + 1.0) * 0.25 * t_py, 1e-12);
    ASSERT_NEAR(b.host_fwd_post - a.host_fwd_post, (2.0 * n + 1.0) * 0.25 * t_py, 1e-12);
    ASSERT_NEAR(b.host_sync, a.host_sync, 1e-15);
    opt.moe_grouped_gemm = false; /* TE Linear per expert adds its own bias: no loop */
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &c);
    cfg.has_linear_bias = false;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &d);
    ASSERT_NEAR(c.host_fwd, d.host_fwd, 1e-15);
    opt.moe_grouped_gemm = true;
    cfg.has_linear_bias = true;

    cfg.is_quick_geglu = true;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &c);
    ASSERT_NEAR(c.host_fwd - b.host_fwd, 1.0 * t_py, 1e-12);
    ASSERT_NEAR(c.host_sync - b.host_sync, 25.0e-6, 1e-15);
    ASSERT_NEAR(c.rc_host, 0.0, 0.0);
    ASSERT_NEAR(c.rc_host_sync, 0.0, 0.0);

    /* Selective layernorm + moe_act: two wrappers forward (and their backward nodes); the
     * pre-MLP norm, the activation and the GeGLU's extras (its sync too) again in backward. */
    opt.recompute = MOE_RECOMPUTE_SELECTIVE;
    opt.recompute_modules = MOE_RC_LAYERNORM | MOE_RC_MOE_ACT;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &d);
    ASSERT_NEAR(d.host_fwd - c.host_fwd, 2.0 * t_py, 1e-12);
    ASSERT_NEAR(d.host_bwd - c.host_bwd, 2.0 * t_py, 1e-12);
    ASSERT_NEAR(d.rc_host, (1.25 + 1.25 + 1.0) * t_py, 1e-12);
    ASSERT_NEAR(d.rc_host_sync, 25.0e-6, 1e-15);
    /* A GQA layer's input norm is fused into its QKV linear: a dense layer recomputes none. */
    struct moe_layer_kind dense = {false, false};
    moe_compute_layer(&cfg, &cl, &lay, &opt, dense, 1.0, 0.0, &a);
    ASSERT_NEAR(a.rc_host, 0.0, 0.0);

    /* The whole MoE block: every call after the attention again, both syncs included. */
    opt.recompute_modules = MOE_RC_MOE;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &d);
    assert_true(d.rc_host > (2.0 * n + 1.0) * 0.25 * t_py);
    assert_true(d.rc_host < c.host_fwd);
    ASSERT_NEAR(d.rc_host_sync, 2.0 * 25.0e-6, 1e-15);

    /* Full recompute re-runs the forward's calls and syncs. */
    opt.recompute = MOE_RECOMPUTE_FULL;
    moe_compute_layer(&cfg, &cl, &lay, &opt, moe, 1.0, 0.0, &d);
    ASSERT_NEAR(d.rc_host, d.host_fwd, 1e-15);
    ASSERT_NEAR(d.rc_host_sync, d.host_sync, 1e-15);

    /* A host-bound step gets slower with the recomputed modules' host work. */
    cl.gpu.kernel_launch_us = 2000.0;
    opt.recompute = MOE_RECOMPUTE_NONE;
    struct moe_prediction none = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_SIMULATE);
    opt.recompute = MOE_RECOMPUTE_SELECTIVE;
    opt.recompute_modules = MOE_RC_LAYERNORM | MOE_RC_MOE_ACT;
    struct moe_prediction sel = predict(&cfg, &cl, &lay, &opt, MOE_SCHED_SIMULATE);
    assert_true(sel.time.host_overhead > none.time.host_overhead);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_busbw_factors),
        cmocka_unit_test(test_busbw_by_size),
        cmocka_unit_test(test_activation_rate),
        cmocka_unit_test(test_activation_bwd_rate),
        cmocka_unit_test(test_grouped_bwd_rates),
        cmocka_unit_test(test_grouped_small),
        cmocka_unit_test(test_active_experts),
        cmocka_unit_test(test_attention_rect),
        cmocka_unit_test(test_attention_score_work),
        cmocka_unit_test(test_attention_window_tiles),
        cmocka_unit_test(test_embedding_wait),
        cmocka_unit_test(test_expert_bias_pass),
        cmocka_unit_test(test_offloaded_optimizer_rate),
        cmocka_unit_test(test_rank_spread_waits),
        cmocka_unit_test(test_rank_spread_under_imbalance),
        cmocka_unit_test(test_group_placement),
        cmocka_unit_test(test_expected_domains),
        cmocka_unit_test(test_memory_by_hand),
        cmocka_unit_test(test_activation_dense_layer_by_hand),
        cmocka_unit_test(test_recompute_never_more_memory),
        cmocka_unit_test(test_more_bandwidth_never_slower),
        cmocka_unit_test(test_ep_inside_domain_not_slower),
        cmocka_unit_test(test_unfused_hierarchical_passes),
        cmocka_unit_test(test_load_balancing_allreduce),
        cmocka_unit_test(test_phases_sum_to_step),
        cmocka_unit_test(test_bubble_closed_form_and_simulation),
        cmocka_unit_test(test_imbalance),
        cmocka_unit_test(test_imbalance_per_expert_reference),
        cmocka_unit_test(test_more_imbalance_slower),
        cmocka_unit_test(test_unresolved_layout_rejected),
        cmocka_unit_test(test_workspace_reuse),
        cmocka_unit_test(test_mem_opt_key),
        cmocka_unit_test(test_workspace_memo),
        cmocka_unit_test(test_pass_parts_price_offload),
        cmocka_unit_test(test_timeline),
        cmocka_unit_test(test_ep_wait_and_stage_offsets),
        cmocka_unit_test(test_host_model),
        cmocka_unit_test(test_host_bias_geglu_recompute),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
