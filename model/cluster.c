/*
 * Cluster validation: the range and consistency rules every struct moe_cluster must meet before the
 * cost model uses it (positive bandwidths and peaks, achieved fractions in (0, 1.5], an NVLink
 * domain that is a whole number of nodes or a part of one, a GPU limit that is a whole number of
 * nodes), and the check of a requested GPU count against the cluster.
 *
 * It does not read files or hold any hardware figure: the values come from the cluster files in
 * topologies/ through topologies/cluster_file.c, or from calibration. Fractions may exceed 1 up
 * to 1.5 because NVLink SHARP all-reduce bus bandwidth is above the line rate (the switch does the
 * reduction; nccl-tests issue #212 reports about 480 GB/s on 450 GB/s H100 links) and
 * DeepEP/HybridEP "logical" RDMA bandwidth counts NVLink-forwarded traffic (DeepEP docs/legacy.md).
 */
#include "model/cluster.h"

#include <math.h>
#include <stddef.h>

/* Upper bound for an achieved fraction (see the file comment). */
#define MOE_CLUSTER_MAX_FRACTION 1.5

/* One named value with its allowed interval; lo_open excludes lo itself. */
struct cluster_range {
    const char *what; /* field path, e.g. "nvlink.eff" */
    double value;
    double lo;
    bool is_lo_open;
    double hi;
    const char *meaning; /* unit or meaning, for the message */
};

static enum moe_status check_ranges(const struct moe_cluster *cl,
                                    const struct cluster_range *r,
                                    size_t n,
                                    struct moe_diag *diag)
{
    for (size_t i = 0; i < n; i++) {
        double v = r[i].value;
        bool is_ok = isfinite(v) && (r[i].is_lo_open ? v > r[i].lo : v >= r[i].lo) && v <= r[i].hi;
        if (!is_ok) {
            return moe_diag_set(
                diag, MOE_ERR_INVALID, "cluster %s: %s = %g must be in %s%g, %g] (%s)", cl->name,
                r[i].what, v, r[i].is_lo_open ? "(" : "[", r[i].lo, r[i].hi, r[i].meaning);
        }
    }
    return MOE_OK;
}

static const char math_names[MOE_NUM_MATH][8] = {"bf16", "fp8", "fp4", "fp32"};

/* Peaks are >= 0 (0 = unsupported); a supported precision needs a GEMM efficiency. */
static enum moe_status validate_math(const struct moe_cluster *cl, struct moe_diag *diag)
{
    const struct moe_gpu *g = &cl->gpu;
    for (int m = 0; m < MOE_NUM_MATH; m++) {
        double peak = g->peak_tflops[m];
        double eff = g->gemm.max_eff[m];
        if (!isfinite(peak) || peak < 0.0) {
            return moe_diag_set(
                diag, MOE_ERR_INVALID,
                "cluster %s: gpu.peak_tflops.%s = %g must be >= 0 (0 = unsupported)", cl->name,
                math_names[m], peak);
        }
        if (peak > 0.0 && !(eff > 0.0 && eff <= 1.0)) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "cluster %s: gemm.max_eff.%s = %g must be in (0, 1] when "
                                "gpu.peak_tflops.%s is %g",
                                cl->name, math_names[m], eff, math_names[m], peak);
        }
        if (peak == 0.0 && eff != 0.0) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "cluster %s: gemm.max_eff.%s = %g but the GPU has no %s peak "
                                "(gpu.peak_tflops.%s = 0); set max_eff.%s to 0",
                                cl->name, math_names[m], eff, math_names[m], math_names[m],
                                math_names[m]);
        }
    }
    if (!(g->peak_tflops[MOE_MATH_BF16] > 0.0)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "cluster %s: gpu.peak_tflops.bf16 must be > 0 (MFU is reported "
                            "against it)",
                            cl->name);
    }
    if (g->has_fp8 != (g->peak_tflops[MOE_MATH_FP8] > 0.0)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "cluster %s: gpu.has_fp8 is %s but gpu.peak_tflops.fp8 is %g; they "
                            "must agree",
                            cl->name, g->has_fp8 ? "true" : "false", g->peak_tflops[MOE_MATH_FP8]);
    }
    if (g->has_mx && !(g->has_fp8 && g->peak_tflops[MOE_MATH_FP4] > 0.0)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "cluster %s: gpu.has_mx (MXFP8/NVFP4) needs FP8 and a positive "
                            "gpu.peak_tflops.fp4",
                            cl->name);
    }
    return MOE_OK;
}

/* The small-GEMM regime: where it is on, each direction has a factor in (0, 2] and a term. */
static enum moe_status validate_small(const struct moe_cluster *cl, struct moe_diag *diag)
{
    const struct moe_gemm_eff *ge = &cl->gpu.gemm;
    const bool is_on = ge->small_mnk > 0.0;
    const double big = (double)INFINITY;
    const struct cluster_range r[] = {
        {"gemm.grouped_small.eff", ge->small_eff[0], 0.0, is_on, 2.0, "factor vs the curve"},
        {"gemm.grouped_small.dgrad_eff", ge->small_eff[1], 0.0, is_on, 2.0, "factor vs the curve"},
        {"gemm.grouped_small.wgrad_eff", ge->small_eff[2], 0.0, is_on, 2.0, "factor vs the curve"},
        {"gemm.grouped_small.half_dim", ge->small_half_dim[0], 0.0, false, big, "rows per expert"},
        {"gemm.grouped_small.dgrad_half_dim", ge->small_half_dim[1], 0.0, false, big,
         "rows per expert"},
        {"gemm.grouped_small.wgrad_half_dim", ge->small_half_dim[2], 0.0, false, big,
         "rows per expert"},
    };
    return check_ranges(cl, r, MOE_ARRAY_LEN(r), diag);
}

static enum moe_status validate_gpu(const struct moe_cluster *cl, struct moe_diag *diag)
{
    const struct moe_gpu *g = &cl->gpu;
    if (g->name[0] == '\0') {
        return moe_diag_set(diag, MOE_ERR_INVALID, "cluster %s: gpu.name is empty", cl->name);
    }
    if (g->num_sms < 1) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "cluster %s: gpu.num_sms = %d must be >= 1",
                            cl->name, g->num_sms);
    }
    MOE_TRY(validate_math(cl, diag));
    const double big = (double)INFINITY;
    const double fmax = MOE_CLUSTER_MAX_FRACTION;
    const struct cluster_range r[] = {
        {"gpu.hbm_gib", g->hbm_gib, 0.0, true, big, "GiB of device memory"},
        {"gpu.hbm_tbps", g->hbm_tbps, 0.0, true, big, "10^12 B/s"},
        {"gemm.half_flops", g->gemm.half_flops, 0.0, true, big, "FLOPs per GEMM"},
        {"gemm.half_dim", g->gemm.half_dim, 0.0, false, big, "rows (narrowest GEMM dimension)"},
        {"gemm.grouped_eff", g->gemm.grouped_eff, 0.0, true, 1.0, "factor vs dense GEMM"},
        {"gemm.grouped_half_dim", g->gemm.grouped_half_dim, 0.0, false, big,
         "rows per expert, 0 = half_dim"},
        {"gemm.grouped_dgrad_eff", g->gemm.grouped_bwd_eff[0], 0.0, false, 2.0,
         "factor vs dense GEMM, 0 = grouped_eff"},
        {"gemm.grouped_wgrad_eff", g->gemm.grouped_bwd_eff[1], 0.0, false, 2.0,
         "factor vs dense GEMM, 0 = grouped_eff"},
        {"gemm.grouped_dgrad_half_dim", g->gemm.grouped_bwd_half_dim[0], 0.0, false, big,
         "rows per expert"},
        {"gemm.grouped_wgrad_half_dim", g->gemm.grouped_bwd_half_dim[1], 0.0, false, big,
         "rows per expert"},
        {"gemm.grouped_tile_m", g->gemm.grouped_tile_m, 1.0, false, big, "rows per tile"},
        {"gemm.grouped_small.mnk", g->gemm.small_mnk, 0.0, false, big, "M x N x K, 0 = none"},
        {"gpu.attn_fwd_eff", g->attn_fwd_eff, 0.0, true, 1.0, "fraction of BF16 peak"},
        {"gpu.attn_bwd_eff", g->attn_bwd_eff, 0.0, true, 1.0, "fraction of BF16 peak"},
        {"gpu.attn_fwd_half_dim", g->attn_fwd_half_dim, 0.0, false, big, "head dims, 0 = gemm's"},
        {"gpu.attn_bwd_half_dim", g->attn_bwd_half_dim, 0.0, false, big, "head dims, 0 = gemm's"},
        {"gpu.attn_rect", g->attn_rect, 0.0, false, 1.0, "0 or 1"},
        {"gpu.attn_fwd_tile_us", g->attn_tile_us[0], 0.0, false, big, "us per extra query tile"},
        {"gpu.attn_bwd_tile_us", g->attn_tile_us[1], 0.0, false, big, "us per extra query tile"},
        {"gpu.bias_pass", g->bias_pass, 0.0, false, 1.0, "0 or 1"},
        {"gpu.hbm_eff", g->hbm_eff, 0.0, true, fmax, "fraction of HBM bandwidth"},
        {"gpu.elem_eff", g->elem_eff, 0.0, true, fmax, "fraction of HBM bandwidth"},
        {"gpu.act_eff", g->act_eff, 0.0, false, fmax, "fraction of HBM bandwidth, 0 = elem_eff"},
        {"gpu.bias_eff", g->bias_eff, 0.0, false, fmax, "fraction of HBM bandwidth, 0 = elem_eff"},
        {"gpu.bias_bwd_eff", g->bias_bwd_eff, 0.0, false, fmax,
         "fraction of HBM bandwidth, 0 = elem_eff"},
        {"gpu.act_bwd_eff", g->act_bwd_eff, 0.0, false, fmax,
         "fraction of HBM bandwidth, 0 = act + elem"},
        {"gpu.optimizer_eff", g->optimizer_eff, 0.0, true, fmax, "fraction of HBM bandwidth"},
        {"gpu.kernel_launch_us", g->kernel_launch_us, 0.0, false, big, "microseconds"},
        {"gpu.host_cpp_op_us", g->host_cpp_op_us, 0.0, false, big, "microseconds"},
        {"gpu.host_param_us", g->host_param_us, 0.0, false, big, "microseconds"},
        {"gpu.quant_bytes_per_elem", g->quant_bytes_per_elem, 0.0, false, big, "bytes"},
    };
    MOE_TRY(check_ranges(cl, r, MOE_ARRAY_LEN(r), diag));
    return validate_small(cl, diag);
}

/* A per-size table: at most MOE_BUSBW_MAX_SIZES points, sizes strictly ascending, every
 * bandwidth positive and finite. */
static enum moe_status validate_busbw_table(const struct moe_cluster *cl, struct moe_diag *diag)
{
    const struct moe_busbw_table *t = &cl->nvlink.busbw_by_size;
    for (int c = 0; c < MOE_BUSBW_NUM_KINDS; c++) {
        int n = t->num_sizes[c];
        if (n < 0 || n > MOE_BUSBW_MAX_SIZES) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "cluster %s: nvlink.busbw_by_size has %d sizes for collective %d; "
                                "0..%d allowed",
                                cl->name, n, c, MOE_BUSBW_MAX_SIZES);
        }
        for (int i = 0; i < n; i++) {
            bool bad_size = !(t->bytes[c][i] > 0.0) || !isfinite(t->bytes[c][i]) ||
                            (i > 0 && !(t->bytes[c][i] > t->bytes[c][i - 1]));
            if (bad_size || !(t->gbps[c][i] > 0.0) || !isfinite(t->gbps[c][i])) {
                return moe_diag_set(diag, MOE_ERR_INVALID,
                                    "cluster %s: nvlink.busbw_by_size point %d of collective %d "
                                    "(%g bytes, %g GB/s): sizes must rise and bandwidths be "
                                    "positive",
                                    cl->name, i, c, t->bytes[c][i], t->gbps[c][i]);
            }
        }
    }
    return MOE_OK;
}

static enum moe_status validate_links(const struct moe_cluster *cl, struct moe_diag *diag)
{
    const struct moe_nvlink *nv = &cl->nvlink;
    const double big = (double)INFINITY;
    const double fmax = MOE_CLUSTER_MAX_FRACTION;
    const struct cluster_range r[] = {
        {"nvlink.gbps", nv->gbps, 0.0, true, big, "GB/s per GPU per direction"},
        {"nvlink.eff", nv->eff, 0.0, true, fmax, "fraction of nvlink.gbps"},
        {"nvlink.latency_us", nv->latency_us, 0.0, false, big, "microseconds"},
        {"nvlink.nvls_busbw_gbps", nv->nvls_busbw_gbps, 0.0, false, big, "GB/s, 0 = none"},
        {"nvlink.allreduce_gbps", nv->allreduce_gbps, 0.0, false, big, "GB/s, 0 = as gbps"},
        {"nvlink.reducescatter_gbps", nv->reducescatter_gbps, 0.0, false, big, "GB/s, 0 = as gbps"},
        {"scaleout.nic_gbps", cl->net.nic_gbps, 0.0, true, big, "GB/s per GPU per direction"},
        {"scaleout.eff", cl->net.eff, 0.0, true, fmax, "fraction of nic_gbps"},
        {"scaleout.a2a_eff", cl->net.a2a_eff, 0.0, true, fmax, "fraction of nic_gbps"},
        {"scaleout.latency_us", cl->net.latency_us, 0.0, false, big, "microseconds"},
        {"host.mem_gib_per_gpu", cl->host.mem_gib_per_gpu, 0.0, false, big, "GiB"},
        {"host.link_gbps", cl->host.link_gbps, 0.0, true, big, "GB/s per GPU per direction"},
        {"host.link_eff", cl->host.link_eff, 0.0, true, fmax, "fraction of link_gbps"},
        {"host.optimizer_gbps", cl->host.optimizer_gbps, 0.0, false, big,
         "GB/s per GPU, 0 = bounded by the host link"},
        {"host.rank_spread", cl->host.rank_spread, 0.0, false, 1.0,
         "slowest rank's compute / the mean - 1"},
        {"host.probe_gemm_dim", cl->host.probe_gemm_dim, 0.0, false, 65536.0,
         "m = n = k of the host probe's GEMM, 0 = none"},
        {"host.probe_gemm_us", cl->host.probe_gemm_us, 0.0, false, 1e9,
         "microseconds, 0 = not measured"},
    };
    MOE_TRY(check_ranges(cl, r, MOE_ARRAY_LEN(r), diag));
    if (nv->has_nvls != (nv->nvls_busbw_gbps > 0.0)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "cluster %s: nvlink.has_nvls is %s but nvlink.nvls_busbw_gbps is %g; "
                            "give a bandwidth exactly when NVLS is present",
                            cl->name, nv->has_nvls ? "true" : "false", nv->nvls_busbw_gbps);
    }
    return MOE_OK;
}

static enum moe_status validate_software(const struct moe_cluster *cl, struct moe_diag *diag)
{
    const struct moe_dispatch_hw *d = &cl->dispatch;
    const struct moe_overheads *o = &cl->overheads;
    const double big = (double)INFINITY;
    const double fmax = MOE_CLUSTER_MAX_FRACTION;
    const struct cluster_range r[] = {
        {"dispatch.deepep_intra_eff", d->deepep_intra_eff, 0.0, true, fmax, "of nvlink.gbps"},
        {"dispatch.deepep_inter_eff", d->deepep_inter_eff, 0.0, true, fmax, "of nic_gbps"},
        {"dispatch.hybridep_intra_eff", d->hybridep_intra_eff, 0.0, true, fmax, "of nvlink.gbps"},
        {"dispatch.hybridep_inter_eff", d->hybridep_inter_eff, 0.0, true, fmax, "of nic_gbps"},
        {"dispatch.permute_bytes_eff", d->permute_bytes_eff, 0.0, true, fmax, "of HBM bandwidth"},
        {"overheads.moe_host_sync_us", o->moe_host_sync_us, 0.0, false, big, "microseconds"},
        {"overheads.step_fixed_ms", o->step_fixed_ms, 0.0, false, big, "milliseconds"},
        {"overheads.overlap_eff", o->overlap_eff, 0.0, false, 1.0, "fraction hidden"},
        {"overheads.a2a_overlap_loss", o->a2a_overlap_loss, 0.0, false, 1.0, "slowdown fraction"},
        {"overheads.context_gib", o->context_gib, 0.0, false, big, "GiB per GPU"},
        {"overheads.alloc_reserve_frac", o->alloc_reserve_frac, 0.0, false, 0.5, "fraction"},
        {"overheads.flex_buffer_gib", o->flex_buffer_gib, 0.0, false, big, "GiB per GPU"},
    };
    MOE_TRY(check_ranges(cl, r, MOE_ARRAY_LEN(r), diag));
    const int sms[2] = {d->deepep_sms, d->hybridep_sms};
    const char *const sm_names[2] = {"dispatch.deepep_sms", "dispatch.hybridep_sms"};
    for (int i = 0; i < 2; i++) {
        /* 0: the dispatcher takes no compute units (a CPU host's MPI transport). */
        if (sms[i] < 0 || sms[i] >= cl->gpu.num_sms) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "cluster %s: %s = %d must be in [0, %d) (the GPU has %d SMs)",
                                cl->name, sm_names[i], sms[i], cl->gpu.num_sms, cl->gpu.num_sms);
        }
    }
    return MOE_OK;
}

static enum moe_status validate_shape(const struct moe_cluster *cl, struct moe_diag *diag)
{
    int node = cl->gpus_per_node;
    int domain = cl->nvlink.domain_gpus;
    if (node < 1) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "cluster %s: gpus_per_node = %d must be >= 1",
                            cl->name, node);
    }
    if (domain < 1) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "cluster %s: nvlink.domain_gpus = %d must be >= 1", cl->name, domain);
    }
    if (domain % node != 0 && node % domain != 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "cluster %s: nvlink.domain_gpus = %d and gpus_per_node = %d: one must "
                            "divide the other (an NVLink domain is whole nodes or part of one)",
                            cl->name, domain, node);
    }
    if (cl->max_gpus < node || cl->max_gpus % node != 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "cluster %s: max_gpus = %d must be a positive multiple of "
                            "gpus_per_node = %d",
                            cl->name, cl->max_gpus, node);
    }
    return MOE_OK;
}

enum moe_status moe_cluster_validate(const struct moe_cluster *cl, struct moe_diag *diag)
{
    if (cl == NULL) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "no cluster given");
    }
    if (cl->name[0] == '\0') {
        return moe_diag_set(diag, MOE_ERR_INVALID, "cluster has an empty name");
    }
    MOE_TRY(validate_shape(cl, diag));
    MOE_TRY(validate_gpu(cl, diag));
    MOE_TRY(validate_links(cl, diag));
    MOE_TRY(validate_busbw_table(cl, diag));
    return validate_software(cl, diag);
}

enum moe_status
moe_cluster_check_gpus(const struct moe_cluster *cl, int num_gpus, struct moe_diag *diag)
{
    moe_diag_source(diag, "--gpus");
    if (cl == NULL || cl->gpus_per_node < 1 || cl->max_gpus < cl->gpus_per_node) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--gpus %d: the cluster is not valid (run moe_cluster_validate)",
                            num_gpus);
    }
    int node = cl->gpus_per_node;
    if (num_gpus < 1) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--gpus %d: must be a positive number of GPUs; try %d (one node of "
                            "%s)",
                            num_gpus, node, cl->name);
    }
    if (num_gpus > cl->max_gpus) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--gpus %d: more than the %d GPUs %s accepts; try %d or fewer",
                            num_gpus, cl->max_gpus, cl->name, cl->max_gpus);
    }
    if (num_gpus % node != 0) {
        int below = num_gpus / node * node;
        int above = below + node; /* <= max_gpus: max_gpus is a multiple of node above num_gpus */
        if (below == 0) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "--gpus %d: must be a multiple of %d GPUs per node on %s; try %d",
                                num_gpus, node, cl->name, above);
        }
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--gpus %d: must be a multiple of %d GPUs per node on %s; try %d or %d",
                            num_gpus, node, cl->name, below, above);
    }
    return MOE_OK;
}
