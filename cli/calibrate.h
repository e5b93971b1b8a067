/*
 * Calibration of this host as a cluster: fits the cost model's physical figures to the
 * microbenchmarks of `moefold-bench --json` (GEMM efficiency curve and peak, grouped GEMM factor,
 * memory bandwidth and elementwise efficiency, attention efficiency, quantiser cost, latency and
 * bus bandwidth of every collective) with GSL least squares, and builds the cluster the fit
 * describes. A CPU rank plays the role of a GPU: its FP32 GEMM peak stands for every precision
 * (moefold's CPU engine emulates low precision by quantise -> dequantise), its share of memory
 * bandwidth for HBM, the ranks of one host for an NVLink domain.
 */
#ifndef MOE_CLI_CALIBRATE_H
#define MOE_CLI_CALIBRATE_H

#include "model/cluster.h"
#include "model/status.h"

#include <cjson/cJSON.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

enum moe_calib_coll {
    MOE_CALIB_ALLREDUCE = 0,
    MOE_CALIB_ALLGATHER,
    MOE_CALIB_REDUCESCATTER,
    MOE_CALIB_ALLTOALL,
    MOE_CALIB_SENDRECV,
    MOE_CALIB_NUM_COLL,
};

/* t = latency + bytes_bus / busbw fitted over message sizes (nccl-tests bus bytes). */
struct moe_calib_line {
    int points;
    double latency_us;
    double busbw_gbps;
    double rms_rel_resid; /* RMS of (fit - measured) / measured over the points */
    /* Every size measured (the small ones too), ascending, as the bench gave them: the cluster's
     * nvlink.busbw_by_size row of this collective. */
    int num_sizes;
    double size_bytes[MOE_BUSBW_MAX_SIZES];
    double size_busbw_gbps[MOE_BUSBW_MAX_SIZES];
};

/* m = n = k of moefold-train's host speed probe (engine/internal.h MOE_ENG_PROBE_DIM), one of
 * moefold-bench's GEMM rows. */
#define MOE_CALIB_PROBE_DIM 512

struct moe_calib_fit {
    char cpu_model[128];
    int ranks;
    int cores;
    double memory_bytes;     /* host memory */
    double gemm_peak_gflops; /* fitted asymptotic single-rank GEMM rate */
    double gemm_max_eff;     /* max_eff (1 - exp(-F / half_flops)) d / (d + half_dim) */
    double gemm_half_flops;
    double gemm_half_dim;  /* x d / (d + half_dim) for the narrowest dimension d (0: none) */
    double gemm_rms_resid; /* RMS residual of the efficiency fit */
    int gemm_points;
    /* The ranks' speed spread: mean over GEMM shapes of the slowest rank's time over the ranks'
     * mean, minus 1 (0 with one rank, or a bench without per-rank times): host.rank_spread, which
     * the cost model prices as waits at the collectives that join ranks (model/cost.c). */
    double rank_spread;
    int rank_spread_points;
    /* The bench's time of the cube GEMM moefold-train's host probe times (MOE_CALIB_PROBE_DIM;
     * 0 when the bench has no such row): host.probe_gemm_us, compare --host-speed's reference. */
    double probe_gemm_us;
    double grouped_eff;       /* median grouped rate / the curve at each expert's rows */
    double grouped_half_dim;  /* the grouped rows' own narrow-dimension term (rows per expert) */
    double grouped_rms_resid; /* RMS log residual of the grouped rows at (grouped_eff, it) */
    /* The backward-data and backward-weight GEMMs' own factor, term and residual, fitted the same
     * way to the rows' dgrad_gflops / wgrad_gflops (factor 0: the bench did not time them). */
    double grouped_bwd_eff[2];
    double grouped_bwd_half_dim[2];
    double grouped_bwd_rms_resid[2];
    int grouped_points;     /* grouped rows fitted (even routing) */
    double grouped_one_rms; /* RMS log residual of one curve per direction over all of them */
    /* The small-matrix regime (cli/calibrate.c): each expert's rows x in x out at or below
     * small_mnk fitted apart (0: one curve fitted the rows best; the fields below unset), its
     * rows' count, each direction's factor, term and RMS log residual, and the RMS over both
     * sides (the figures above are then the larger rows'). */
    double small_mnk;
    int small_points;
    double small_eff[3];
    double small_half_dim[3];
    double small_rms_resid[3];
    double grouped_split_rms;
    double mem_gbps;      /* streaming copy bandwidth per rank, largest working set */
    double elem_eff;      /* elementwise kernels' rate / copy bandwidth (median) */
    double act_eff;       /* SwiGLU's rate / copy bandwidth (median over sizes); 0 = not measured */
    double act_bwd_eff;   /* its backward's rate / copy bandwidth; 0 = not measured */
    double bias_eff;      /* the experts' bias add's rate / copy bandwidth; 0 = not measured */
    double bias_bwd_eff;  /* the bias gradient's; 0 = not measured */
    double optimizer_eff; /* AdamW's rate / copy bandwidth, largest working set */
    bool has_attention;
    double attn_fwd_eff; /* attention FLOPs (model convention) / time / peak, wide heads */
    double attn_bwd_eff;
    double attn_fwd_half_dim; /* x d / (d + half_dim) at head dimension d (softmax per score) */
    double attn_bwd_half_dim;
    double attn_tile_us[2]; /* forward, backward: us per query tile beyond one per head and
                               call on the windowed rows (0: none measured) */
    bool has_quant;
    double quant_bytes_per_elem; /* quantise->dequantise time per element x bandwidth */
    struct moe_calib_line coll[MOE_CALIB_NUM_COLL];
};

/*
 * t = latency + x / busbw by GSL weighted linear least squares (weights 1/t^2: relative residuals)
 * over n points, x the bus bytes of each point (busbw x time, nccl-tests' convention) and y its
 * time in us. A non-positive slope falls back to the best observed bus bandwidth and no latency.
 * Fills every field of *l (points = n; nothing fitted when n < 2 or n > 1024).
 */
void moe_calib_fit_line(const double *x, const double *y, size_t n, struct moe_calib_line *l);

/* Fit every figure from the bench JSON. MOE_ERR_INVALID naming the section when data is missing. */
MOE_NODISCARD enum moe_status
moe_calib_fit_bench(const cJSON *bench, struct moe_calib_fit *fit, struct moe_diag *diag);

/* How benches of one host are folded into one: each timing's mean, or each point's fastest. */
enum moe_calib_merge { MOE_CALIB_MERGE_MEAN, MOE_CALIB_MERGE_LEAST };

/*
 * Fold bench src into dst, n benches folded so far (n >= 1). Every timing field (names ending in
 * _us, gbps or gflops, or holding _us_) becomes the mean of the n + 1 (MOE_CALIB_MERGE_MEAN), or
 * the least time / greatest rate of them (MOE_CALIB_MERGE_LEAST); "ok" flags are and-ed, "wrong"
 * counts take the larger; every other field (host, shapes, sizes, names) must be equal, else
 * MOE_ERR_INVALID naming the field (benches of another host, rank count or version). Used to
 * price a host measured before and after an experiment by both benches.
 */
MOE_NODISCARD enum moe_status moe_calib_merge_bench(
    cJSON *dst, const cJSON *src, int n, enum moe_calib_merge how, struct moe_diag *diag);

/* The cluster `fit` describes, named `name`; validated. */
MOE_NODISCARD enum moe_status moe_calib_cluster(const struct moe_calib_fit *fit,
                                                const char *name,
                                                struct moe_cluster *cl,
                                                struct moe_diag *diag);

/* Name of a collective as the bench writes it ("allreduce", ...). */
const char *moe_calib_coll_name(enum moe_calib_coll c);

#ifdef __cplusplus
}
#endif

#endif /* MOE_CLI_CALIBRATE_H */
