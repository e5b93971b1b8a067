/*
 * nccl-tests output read as printed (NVIDIA/nccl-tests src/common.cu, util.cu: versions 2.13 to
 * 2.19), and DeepEP's test scripts' bandwidth lines (deepseek-ai/DeepEP tests/test_intranode.py,
 * test_internode.py, later tests/legacy/).
 *
 * One nccl-tests run prints, per test:
 *
 *   # nccl-tests version 2.19.6 nccl-headers=22803 nccl-library=22803      (2.17+)
 *   # Collective test starting: all_reduce_perf                            (2.17+)
 *   # nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 ...
 *   # Using devices
 *   #  Rank  0 Group  0 Pid  12345 on   node-001 device  0 [0000:18:00] NVIDIA H100 80GB HBM3
 *   ...                                          (one line per rank; an MPI run: every process's)
 *   #       size   count   type   redop   root   time  algbw  busbw #wrong   time  algbw  busbw
 * #wrong 8       2    float     sum     -1  32.85   0.00   0.00      0  32.21   0.00   0.00      0
 *   # Out of bounds values : 0 OK
 *   # Avg bus bandwidth    : 45.2189
 *
 * (2.13 prints the bus id as [0x18], no program name; -I adds per-iteration columns; -c 0 prints
 * N/A for #wrong.) The collective comes from the "Collective test starting" line, else from a
 * `<name>_perf` command or banner line before the test, else from the file name. Ranks are the
 * rank lines (nThread x nGpus without them), nodes the distinct host names among them. Rows keep
 * the out-of-place columns (the in-place ones when only those were run). Launcher prefixes, NCCL
 * INFO/WARN lines and mpirun banners between lines are passed over; a row wrapped onto a second
 * line is joined; a run cut short keeps the rows it printed.
 *
 * A table that cannot be used is kept with `usable` false and the reason: #wrong non-zero (data
 * corruption), one rank, the same rank printed twice (several single-process tests interleaved:
 * nccl-tests without MPI under mpirun), no rows, an unknown collective, or a collective moefold
 * does not price (broadcast, reduce, gather, scatter).
 */
#ifndef MOE_CLI_NCCL_TESTS_H
#define MOE_CLI_NCCL_TESTS_H

#include "model/status.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_NT_MAX_ROWS 96

enum moe_nt_coll {
    MOE_NT_ALL_REDUCE = 0,
    MOE_NT_ALL_GATHER,
    MOE_NT_REDUCE_SCATTER,
    MOE_NT_ALLTOALL,
    MOE_NT_SENDRECV,
    MOE_NT_OTHER,   /* a collective nccl-tests has and moefold does not price */
    MOE_NT_UNKNOWN, /* the output does not say */
};

/* One size of a table (out-of-place columns). */
struct moe_nt_row {
    double bytes;   /* size (B) as printed */
    double time_us; /* time (us) */
    double algbw;   /* GB/s */
    double busbw;   /* GB/s */
    long wrong;     /* #wrong; -1 for N/A (not checked) */
};

struct moe_nt_table {
    char collective[32]; /* "all_reduce", ... ("" when unknown) */
    enum moe_nt_coll coll;
    int header_line;  /* line of "# nThread ..." */
    int ranks;        /* rank lines, else nThread x nGpus */
    int nodes;        /* distinct host names among the rank lines (1 without them) */
    char device[128]; /* the first rank line's GPU name */
    int num_rows;
    struct moe_nt_row rows[MOE_NT_MAX_ROWS];
    int num_wrapped;  /* rows joined from two lines */
    bool has_footer;  /* "# Avg bus bandwidth" printed (else the run was cut short) */
    double avg_busbw; /* its value (GB/s) */
    bool usable;
    char why[256]; /* when not usable: the reason */
};

struct moe_nt_file {
    int num_tables;
    struct moe_nt_table *tables; /* owned */
};

/* latency + bus bytes / busbw fitted to one table (cli/calibrate.h's line fit). */
struct moe_nt_fit {
    double latency_us;
    double busbw_gbps;
    double rms_rel_resid; /* RMS of (fit - measured) / measured over the rows fitted */
    int points;           /* rows in the bandwidth fit */
    double max_bytes;     /* largest size */
    double busbw_at_max;  /* the table's out-of-place busbw at it */
};

void moe_nt_file_init(struct moe_nt_file *f);
void moe_nt_file_fini(struct moe_nt_file *f);

/*
 * Parse text[len] (need not be NUL-terminated); name (a file name, may be NULL) is the last hint
 * for the collective. MOE_ERR_NOT_FOUND when the text holds no nccl-tests table at all (diag says
 * so, naming source); tables that cannot be used are kept, usable = false, with the reason.
 */
MOE_NODISCARD enum moe_status moe_nt_parse(const char *text,
                                           size_t len,
                                           const char *source,
                                           struct moe_nt_file *out,
                                           struct moe_diag *diag);

/* Read and parse a file (at most 64 MiB). */
MOE_NODISCARD enum moe_status
moe_nt_read_file(const char *path, struct moe_nt_file *out, struct moe_diag *diag);

/*
 * Fit t = latency + bus_bytes / busbw to a usable table. Bandwidth: GSL weighted least squares
 * (relative residuals) over the largest sizes (from a 64th of the largest up, at least 3 rows),
 * where the bus bandwidth has saturated; latency: the median over the sizes up to 64 KiB of the
 * time left after the bandwidth term (the fit's intercept when there are none). MOE_ERR_INVALID
 * when fewer than 3 rows carry bytes.
 */
MOE_NODISCARD enum moe_status
moe_nt_fit_table(const struct moe_nt_table *t, struct moe_nt_fit *fit, struct moe_diag *diag);

/* DeepEP test output (test_intranode.py / test_internode.py), best settings per run. */
struct moe_deepep_run {
    bool internode;                                    /* lines carry "(RDMA)" figures */
    int num_tokens, hidden, num_topk, num_topk_groups; /* the [config] line (0 when absent) */
    int num_dispatch;                                  /* "Best dispatch (BF16)" lines read */
    int num_combine;                                   /* "Best combine" lines read */
    double dispatch_nvl_gbps;                          /* median over those lines */
    double dispatch_rdma_gbps;
    double combine_nvl_gbps;
    double combine_rdma_gbps;
    int first_line;
};

/*
 * Read DeepEP's "[tuning] Best dispatch (BF16): ... X GB/s (NVL)" and "[tuning] Best combine: ..."
 * lines (both print formats, with or without "(RDMA)" and the "t:" / "a + b us" timings).
 * MOE_ERR_NOT_FOUND naming source when there is none.
 */
MOE_NODISCARD enum moe_status moe_deepep_parse(const char *text,
                                               size_t len,
                                               const char *source,
                                               struct moe_deepep_run *out,
                                               struct moe_diag *diag);

const char *moe_nt_coll_name(enum moe_nt_coll c);

#ifdef __cplusplus
}
#endif

#endif /* MOE_CLI_NCCL_TESTS_H */
