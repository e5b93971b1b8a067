/*
 * Tests for model/cluster.c: moe_cluster_validate's range and shape rules and
 * moe_cluster_check_gpus's messages. The clusters are built by hand here (model/ tests link no
 * JSON); the figures mirror topologies/dgx-h100.json and gb200-nvl72.json, and each failing case
 * changes one field so the message must name that field.
 */
#include "model/cluster.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
/* cmocka.h needs setjmp.h, stdarg.h, stddef.h and stdint.h first. */
#include <cmocka.h>

/* An 8-GPU H100 node cluster with the figures of topologies/dgx-h100.json. */
static struct moe_cluster h100_cluster(void)
{
    struct moe_cluster cl;
    memset(&cl, 0, sizeof(cl));
    (void)snprintf(cl.name, sizeof(cl.name), "dgx-h100");
    (void)snprintf(cl.gpu.name, sizeof(cl.gpu.name), "H100 SXM5 80GB");
    cl.gpus_per_node = 8;
    cl.max_gpus = 65536;
    cl.gpu.hbm_gib = 79.65;
    cl.gpu.hbm_tbps = 3.35;
    cl.gpu.peak_tflops[MOE_MATH_BF16] = 989.4;
    cl.gpu.peak_tflops[MOE_MATH_FP8] = 1978.9;
    cl.gpu.peak_tflops[MOE_MATH_FP4] = 0.0;
    cl.gpu.peak_tflops[MOE_MATH_FP32] = 67.0;
    cl.gpu.has_fp8 = true;
    cl.gpu.has_mx = false;
    cl.gpu.num_sms = 132;
    cl.gpu.gemm.max_eff[MOE_MATH_BF16] = 0.80;
    cl.gpu.gemm.max_eff[MOE_MATH_FP8] = 0.75;
    cl.gpu.gemm.max_eff[MOE_MATH_FP4] = 0.0;
    cl.gpu.gemm.max_eff[MOE_MATH_FP32] = 0.7;
    cl.gpu.gemm.half_flops = 8.8e9;
    cl.gpu.gemm.grouped_eff = 0.89;
    cl.gpu.gemm.grouped_tile_m = 128.0;
    cl.gpu.attn_fwd_eff = 0.67;
    cl.gpu.attn_bwd_eff = 0.45;
    cl.gpu.hbm_eff = 0.85;
    cl.gpu.elem_eff = 0.85;
    cl.gpu.optimizer_eff = 0.85;
    cl.gpu.kernel_launch_us = 5.0;
    cl.gpu.host_cpp_op_us = 3.0;
    cl.gpu.quant_bytes_per_elem = 3.0;
    cl.nvlink.domain_gpus = 8;
    cl.nvlink.gbps = 450.0;
    cl.nvlink.eff = 0.82;
    cl.nvlink.latency_us = 3.0;
    cl.nvlink.has_nvls = true;
    cl.nvlink.nvls_busbw_gbps = 480.0;
    cl.net.nic_gbps = 50.0;
    cl.net.eff = 0.94;
    cl.net.a2a_eff = 0.8;
    cl.net.latency_us = 10.0;
    cl.host.mem_gib_per_gpu = 200.0;
    cl.host.link_gbps = 64.0;
    cl.host.link_eff = 0.8;
    cl.dispatch.deepep_intra_eff = 0.77;
    cl.dispatch.deepep_inter_eff = 0.86;
    cl.dispatch.hybridep_intra_eff = 0.6;
    cl.dispatch.hybridep_inter_eff = 0.88;
    cl.dispatch.deepep_sms = 24;
    cl.dispatch.hybridep_sms = 16;
    cl.dispatch.permute_bytes_eff = 0.5;
    cl.overheads.moe_host_sync_us = 30.0;
    cl.overheads.step_fixed_ms = 30.0;
    cl.overheads.overlap_eff = 0.8;
    cl.overheads.a2a_overlap_loss = 0.15;
    cl.overheads.context_gib = 3.0;
    cl.overheads.alloc_reserve_frac = 0.08;
    cl.overheads.flex_buffer_gib = 2.0;
    return cl;
}

/* A GB200 NVL72: trays of 4 GPUs in a 72-GPU NVLink domain, with FP4 and MX formats. */
static struct moe_cluster nvl72_cluster(void)
{
    struct moe_cluster cl = h100_cluster();
    (void)snprintf(cl.name, sizeof(cl.name), "gb200-nvl72");
    cl.gpus_per_node = 4;
    cl.nvlink.domain_gpus = 72;
    cl.nvlink.gbps = 900.0;
    cl.gpu.num_sms = 152;
    cl.gpu.peak_tflops[MOE_MATH_BF16] = 2500.0;
    cl.gpu.peak_tflops[MOE_MATH_FP8] = 5000.0;
    cl.gpu.peak_tflops[MOE_MATH_FP4] = 10000.0;
    cl.gpu.gemm.max_eff[MOE_MATH_FP4] = 0.6;
    cl.gpu.has_mx = true;
    cl.dispatch.hybridep_sms = 32;
    return cl;
}

/* Expect validate to fail with MOE_ERR_INVALID and a message containing `needle`. */
static void expect_invalid(const struct moe_cluster *cl, const char *needle)
{
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    enum moe_status st = moe_cluster_validate(cl, &diag);
    if (st != MOE_ERR_INVALID || strstr(diag.message, needle) == NULL) {
        print_error("expected invalid with \"%s\", got %d: %s\n", needle, (int)st, diag.message);
    }
    assert_int_equal(st, MOE_ERR_INVALID);
    assert_non_null(strstr(diag.message, needle));
}

static void test_valid_clusters(void **state)
{
    (void)state;
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    struct moe_cluster cl = h100_cluster();
    assert_int_equal(moe_cluster_validate(&cl, &diag), MOE_OK);
    cl = nvl72_cluster();
    assert_int_equal(moe_cluster_validate(&cl, &diag), MOE_OK);
    /* NVLS bus bandwidth above the line rate and a "logical" RDMA fraction above 1 are fine. */
    cl = h100_cluster();
    cl.dispatch.deepep_inter_eff = 1.1;
    cl.nvlink.nvls_busbw_gbps = 1.07 * cl.nvlink.gbps;
    assert_int_equal(moe_cluster_validate(&cl, &diag), MOE_OK);
    /* A domain smaller than a node (part of one) is allowed: 4-GPU NVLink islands in 8-GPU nodes.
     */
    cl.nvlink.domain_gpus = 4;
    assert_int_equal(moe_cluster_validate(&cl, &diag), MOE_OK);
}

static void test_bandwidths_and_peaks(void **state)
{
    (void)state;
    struct moe_cluster cl = h100_cluster();
    cl.nvlink.gbps = -450.0;
    expect_invalid(&cl, "nvlink.gbps = -450");
    cl = h100_cluster();
    cl.net.nic_gbps = 0.0;
    expect_invalid(&cl, "scaleout.nic_gbps = 0");
    cl = h100_cluster();
    cl.gpu.hbm_tbps = NAN;
    expect_invalid(&cl, "gpu.hbm_tbps");
    cl = h100_cluster();
    cl.host.link_gbps = -1.0;
    expect_invalid(&cl, "host.link_gbps");
    cl = h100_cluster();
    cl.gpu.peak_tflops[MOE_MATH_BF16] = 0.0;
    cl.gpu.gemm.max_eff[MOE_MATH_BF16] = 0.0;
    expect_invalid(&cl, "gpu.peak_tflops.bf16 must be > 0");
    cl = h100_cluster();
    cl.gpu.peak_tflops[MOE_MATH_FP32] = -67.0;
    expect_invalid(&cl, "gpu.peak_tflops.fp32 = -67");
    cl = h100_cluster();
    cl.gpu.num_sms = 0;
    expect_invalid(&cl, "gpu.num_sms = 0");
    cl = h100_cluster();
    cl.nvlink.reducescatter_gbps = -3.0;
    expect_invalid(&cl, "nvlink.reducescatter_gbps = -3");
    cl = h100_cluster();
    cl.nvlink.allreduce_gbps = 2.5; /* a measured CPU-host figure: accepted */
    struct moe_diag diag = {0};
    assert_int_equal(moe_cluster_validate(&cl, &diag), MOE_OK);
    /* A per-size table: sizes positive and rising, bandwidths positive. */
    struct moe_busbw_table *t = &cl.nvlink.busbw_by_size;
    t->num_sizes[MOE_BUSBW_ALLGATHER] = 2;
    t->bytes[MOE_BUSBW_ALLGATHER][0] = 8192.0;
    t->bytes[MOE_BUSBW_ALLGATHER][1] = 32768.0;
    t->gbps[MOE_BUSBW_ALLGATHER][0] = 1.0;
    t->gbps[MOE_BUSBW_ALLGATHER][1] = 3.0;
    assert_int_equal(moe_cluster_validate(&cl, &diag), MOE_OK);
    t->bytes[MOE_BUSBW_ALLGATHER][1] = 8192.0;
    expect_invalid(&cl, "sizes must rise");
    t->bytes[MOE_BUSBW_ALLGATHER][1] = 32768.0;
    t->gbps[MOE_BUSBW_ALLGATHER][0] = 0.0;
    expect_invalid(&cl, "bandwidths be positive");
    t->gbps[MOE_BUSBW_ALLGATHER][0] = 1.0;
    t->num_sizes[MOE_BUSBW_ALLGATHER] = MOE_BUSBW_MAX_SIZES + 1;
    expect_invalid(&cl, "allowed");
}

static void test_fractions(void **state)
{
    (void)state;
    struct moe_cluster cl = h100_cluster();
    cl.nvlink.eff = 0.0;
    expect_invalid(&cl, "nvlink.eff = 0 must be in (0, 1.5]");
    cl = h100_cluster();
    cl.nvlink.eff = 1.6;
    expect_invalid(&cl, "nvlink.eff = 1.6");
    cl = h100_cluster();
    cl.net.a2a_eff = -0.1;
    expect_invalid(&cl, "scaleout.a2a_eff");
    cl = h100_cluster();
    cl.dispatch.hybridep_intra_eff = 2.0;
    expect_invalid(&cl, "dispatch.hybridep_intra_eff = 2");
    cl = h100_cluster();
    cl.gpu.gemm.grouped_eff = 1.2;
    expect_invalid(&cl, "gemm.grouped_eff = 1.2");
    cl = h100_cluster();
    cl.gpu.gemm.grouped_tile_m = 0.5;
    expect_invalid(&cl, "gemm.grouped_tile_m = 0.5");
    /* The small-GEMM regime: on, every direction needs a factor; off, the figures are unread. */
    cl = h100_cluster();
    cl.gpu.gemm.small_mnk = 1e6;
    cl.gpu.gemm.small_eff[0] = 0.5;
    cl.gpu.gemm.small_eff[1] = 1.1;
    expect_invalid(&cl, "gemm.grouped_small.wgrad_eff = 0");
    cl.gpu.gemm.small_eff[2] = 2.5;
    expect_invalid(&cl, "gemm.grouped_small.wgrad_eff = 2.5");
    cl.gpu.gemm.small_eff[2] = 0.7;
    cl.gpu.gemm.small_half_dim[1] = -1.0;
    expect_invalid(&cl, "gemm.grouped_small.dgrad_half_dim");
    cl.gpu.gemm.small_half_dim[1] = 18.0;
    assert_int_equal(moe_cluster_validate(&cl, &(struct moe_diag){0}), MOE_OK);
    cl.gpu.gemm.small_mnk = -1.0;
    expect_invalid(&cl, "gemm.grouped_small.mnk");
    cl = h100_cluster();
    cl.gpu.gemm.small_eff[0] = 0.0; /* off: 0 is fine */
    assert_int_equal(moe_cluster_validate(&cl, &(struct moe_diag){0}), MOE_OK);
    cl = h100_cluster();
    cl.gpu.gemm.max_eff[MOE_MATH_FP8] = 0.0;
    expect_invalid(&cl, "gemm.max_eff.fp8 = 0 must be in (0, 1]");
    /* An efficiency for a precision the GPU lacks is a mistake, not silently ignored. */
    cl = h100_cluster();
    cl.gpu.gemm.max_eff[MOE_MATH_FP4] = 0.5;
    expect_invalid(&cl, "gemm.max_eff.fp4 = 0.5 but the GPU has no fp4 peak");
    cl = h100_cluster();
    cl.overheads.overlap_eff = 1.01;
    expect_invalid(&cl, "overheads.overlap_eff");
    cl = h100_cluster();
    cl.overheads.alloc_reserve_frac = -0.01;
    expect_invalid(&cl, "overheads.alloc_reserve_frac");
}

static void test_consistency(void **state)
{
    (void)state;
    struct moe_cluster cl = h100_cluster();
    cl.gpu.has_fp8 = false;
    expect_invalid(&cl, "gpu.has_fp8 is false but gpu.peak_tflops.fp8 is 1978.9");
    cl = h100_cluster();
    cl.gpu.has_mx = true; /* Hopper: no FP4 peak */
    expect_invalid(&cl, "gpu.has_mx");
    cl = h100_cluster();
    cl.nvlink.has_nvls = false;
    expect_invalid(&cl, "nvlink.has_nvls is false but nvlink.nvls_busbw_gbps is 480");
    cl = h100_cluster();
    cl.dispatch.deepep_sms = 132;
    expect_invalid(&cl, "dispatch.deepep_sms = 132 must be in [0, 132)");
    cl = h100_cluster();
    cl.gpu.name[0] = '\0';
    expect_invalid(&cl, "gpu.name is empty");
}

static void test_shape(void **state)
{
    (void)state;
    struct moe_cluster cl = nvl72_cluster();
    cl.nvlink.domain_gpus = 6; /* neither divides the tray of 4 nor is divided by it */
    expect_invalid(&cl, "nvlink.domain_gpus = 6 and gpus_per_node = 4: one must divide the other");
    cl = h100_cluster();
    cl.max_gpus = 65540;
    expect_invalid(&cl, "max_gpus = 65540 must be a positive multiple of gpus_per_node = 8");
    cl = h100_cluster();
    cl.max_gpus = 4;
    expect_invalid(&cl, "max_gpus = 4");
    cl = h100_cluster();
    cl.gpus_per_node = 0;
    expect_invalid(&cl, "gpus_per_node = 0 must be >= 1");
    cl = h100_cluster();
    cl.name[0] = '\0';
    expect_invalid(&cl, "empty name");
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_cluster_validate(NULL, &diag), MOE_ERR_INVALID);
}

/* check_gpus: accepted counts, and messages that say what to change. */
static void expect_gpus(const struct moe_cluster *cl, int n, enum moe_status want, const char *msg)
{
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    enum moe_status st = moe_cluster_check_gpus(cl, n, &diag);
    if (st != want || (msg != NULL && strcmp(diag.message, msg) != 0)) {
        print_error("--gpus %d: got %d \"%s\", want %d \"%s\"\n", n, (int)st, diag.message,
                    (int)want, msg != NULL ? msg : "");
    }
    assert_int_equal(st, want);
    if (msg != NULL) {
        assert_string_equal(diag.message, msg);
        assert_string_equal(diag.source, "--gpus");
    }
}

static void test_check_gpus(void **state)
{
    (void)state;
    struct moe_cluster cl = h100_cluster();
    expect_gpus(&cl, 8, MOE_OK, NULL);
    expect_gpus(&cl, 1024, MOE_OK, NULL);
    expect_gpus(&cl, 65536, MOE_OK, NULL);
    expect_gpus(&cl, 12, MOE_ERR_INVALID,
                "--gpus 12: must be a multiple of 8 GPUs per node on dgx-h100; try 8 or 16");
    expect_gpus(&cl, 4, MOE_ERR_INVALID,
                "--gpus 4: must be a multiple of 8 GPUs per node on dgx-h100; try 8");
    expect_gpus(&cl, 0, MOE_ERR_INVALID,
                "--gpus 0: must be a positive number of GPUs; try 8 (one node of dgx-h100)");
    expect_gpus(&cl, -16, MOE_ERR_INVALID,
                "--gpus -16: must be a positive number of GPUs; try 8 (one node of dgx-h100)");
    expect_gpus(&cl, 65544, MOE_ERR_INVALID,
                "--gpus 65544: more than the 65536 GPUs dgx-h100 accepts; try 65536 or fewer");
    /* NVL72: whole trays of 4; a part of the 72-GPU domain is fine. */
    cl = nvl72_cluster();
    expect_gpus(&cl, 4, MOE_OK, NULL);
    expect_gpus(&cl, 36, MOE_OK, NULL);
    expect_gpus(&cl, 144, MOE_OK, NULL);
    expect_gpus(&cl, 6, MOE_ERR_INVALID,
                "--gpus 6: must be a multiple of 4 GPUs per node on gb200-nvl72; try 4 or 8");
    /* A broken cluster is reported, not divided by zero. */
    cl.gpus_per_node = 0;
    expect_gpus(&cl, 8, MOE_ERR_INVALID, NULL);
    expect_gpus(NULL, 8, MOE_ERR_INVALID, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_clusters), cmocka_unit_test(test_bandwidths_and_peaks),
        cmocka_unit_test(test_fractions),      cmocka_unit_test(test_consistency),
        cmocka_unit_test(test_shape),          cmocka_unit_test(test_check_gpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
