/*
 * Microbenchmarks of the engine's building blocks, nccl-tests style: dense GEMM over shapes,
 * grouped expert GEMM against one GEMM of the same FLOPs, memory bandwidth, elementwise kernels,
 * and every collective over sizes and group sizes with algorithm and bus bandwidth and a
 * correctness count. moefold-bench prints them as tables (or JSON for `moefold calibrate`);
 * tests/bench/bench_engine.c reuses the GEMM figures.
 *
 * Conventions (nccl-tests PERFORMANCE.md): algbw = size / time with size the buffer nccl-tests
 * names (all-reduce: the buffer; all-gather: the gathered output; reduce-scatter: the input;
 * all-to-all: the per-rank buffer; send/recv: the message); busbw = algbw x 2(n-1)/n for
 * all-reduce, x (n-1)/n for all-gather, reduce-scatter and all-to-all, x 1 for send/recv. GB/s are
 * 10^9 bytes per second. Times are the mean over iterations after warm-up; collectives report the
 * slowest rank. Every figure carries a check: results are compared with a reference (GEMM: double
 * dot products on sampled entries; collectives: exact small-integer sums).
 */
#ifndef MOE_ENGINE_BENCH_H
#define MOE_ENGINE_BENCH_H

#include "engine/arena.h"
#include "engine/comm.h"
#include "kernels/kernels.h"
#include "model/status.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct moe_bench_cfg {
    int iters;  /* timed iterations per point */
    int warmup; /* untimed iterations first */
    /* Collectives timed as a step runs them (moe_bench_coll_result.step_us): the bytes each rank
     * streams through before each call, as the kernels between two collectives of a training step
     * do (0: none; moefold-bench uses the host's last-level cache per core). GEMMs: their
     * operands cycle over twice this many bytes (moe_bench_gemm_run). */
    size_t evict_bytes;
};

struct moe_bench_gemm {
    int m, n, k;
    double time_us;
    double gflops; /* 2mnk / time */
    bool is_ok;    /* sampled entries match a double reference within 1e-4 relative */
};

/* The operand sets of one GEMM point (moe_bench_gemm_run), kept to time it again (moefold-train's
 * host probe): num_sets sets of set_floats floats, filled once from a fixed seed. */
struct moe_bench_gemm_sets {
    int m, n, k;
    int num_sets;
    int first; /* the set the next timing starts on (0 after init): moefold-train's host probe
                * moves it on after each probe, so no probe reads operands an earlier one left in
                * the cache */
    size_t set_floats;
    float *buf;
    struct moe_eng_heap heap;
};

/* Sets filling twice cfg->evict_bytes (one at 0); MOE_ERR_NOMEM when they do not fit. Release
 * with moe_bench_gemm_sets_fini (safe after a failed init). */
/* Median of x[0..n) (sorts x in place); 0 when n is 0. */
double moe_bench_median(double *x, size_t n);

MOE_NODISCARD enum moe_status moe_bench_gemm_sets_init(
    struct moe_bench_gemm_sets *s, const struct moe_bench_cfg *cfg, int m, int n, int k_dim);
void moe_bench_gemm_sets_fini(struct moe_bench_gemm_sets *s);

/* Time the point on s: cfg->warmup then cfg->iters calls, as moe_bench_gemm_run. */
void moe_bench_gemm_time(const struct moe_k_ops *k,
                         moe_k_ctx_t *kc,
                         const struct moe_bench_cfg *cfg,
                         const struct moe_bench_gemm_sets *s,
                         struct moe_bench_gemm *out);

/* A linear of m rows, k inputs and n outputs as a training step runs it: the kernels' forward,
 * backward-data and backward-weight GEMMs in turn (2mnk FLOPs each), cycled over operand sets
 * that fill twice cfg->evict_bytes (cold operands; one set, hot, at 0). Allocates and frees its
 * buffers. */
MOE_NODISCARD enum moe_status moe_bench_gemm_run(const struct moe_k_ops *k,
                                                 moe_k_ctx_t *kc,
                                                 const struct moe_bench_cfg *cfg,
                                                 int m,
                                                 int n,
                                                 int k_dim,
                                                 struct moe_bench_gemm *out);

struct moe_bench_grouped {
    int num_experts;
    int tokens;           /* rows over all experts */
    int in, out;          /* dims of each expert's linear */
    bool is_skewed;       /* rows per expert follow 1/(rank+1) (Zipf-like) instead of uniform */
    double time_us;       /* forward: y = x w^T per expert */
    double dgrad_time_us; /* backward-data: dx = dy w per expert */
    double wgrad_time_us; /* backward-weight: dw += dy^T x per expert (rows are the reduction) */
    double gflops;        /* 2 * tokens * in * out / time (the forward) */
    double dense_gflops;  /* one linear over all rows with the same FLOPs */
    double ratio;         /* gflops / dense_gflops */
    int num_sets;         /* operand sets the calls cycled over (1: hot; cfg->evict_bytes) */
    bool is_ok;           /* grouped result equals per-expert linear results exactly */
};

/* Grouped linear forward, backward-data and backward-weight over num_experts experts (each timed
 * on its own, as the step calls them, on operand sets that fill twice cfg->evict_bytes: cold, as
 * a step reads them, except the operand the step has just written, the forward's input and the
 * backward's output gradient, rewritten before each call) vs one linear forward of equal FLOPs. */
MOE_NODISCARD enum moe_status moe_bench_grouped_run(const struct moe_k_ops *k,
                                                    moe_k_ctx_t *kc,
                                                    const struct moe_bench_cfg *cfg,
                                                    int num_experts,
                                                    int tokens,
                                                    int in,
                                                    int out,
                                                    bool is_skewed,
                                                    struct moe_bench_grouped *res);

struct moe_bench_mem {
    const char *name; /* "copy", "axpy", "rmsnorm", "swiglu", "rope", "adamw" */
    size_t bytes;     /* working set of one call (bytes read + written) */
    double time_us;
    double gbps; /* bytes / time */
    bool is_ok;
};

/* Memory-bound kernels over a working set of about `bytes`. name: copy, axpy, rmsnorm, swiglu,
 * rope, adamw (the optimizer's update). MOE_ERR_INVALID for another name. */
MOE_NODISCARD enum moe_status moe_bench_mem_run(const struct moe_k_ops *k,
                                                moe_k_ctx_t *kc,
                                                const struct moe_bench_cfg *cfg,
                                                const char *name,
                                                size_t bytes,
                                                struct moe_bench_mem *out);

struct moe_bench_act {
    int rows, ffn;         /* SwiGLU over [rows, 2 ffn] -> [rows, ffn], as the engine's MLPs */
    size_t fwd_bytes;      /* 3 ffn floats per row: gate and up read, output written */
    size_t bwd_bytes;      /* 5 ffn floats per row: gate, up, output gradient read; both
                              input gradients written */
    double fwd_us, bwd_us; /* one call each */
    double fwd_gbps, bwd_gbps;
    bool is_ok; /* row 0 of both equals the double-precision formula within 1e-5 relative */
};

/* SwiGLU forward and backward (the kernels' swiglu_fwd / swiglu_bwd) at the engine's shapes: row
 * width ffn and a forward working set of about fwd_bytes (the MLP's per-call activation). */
MOE_NODISCARD enum moe_status moe_bench_act_run(const struct moe_k_ops *k,
                                                moe_k_ctx_t *kc,
                                                const struct moe_bench_cfg *cfg,
                                                int ffn,
                                                size_t fwd_bytes,
                                                struct moe_bench_act *out);

/* The routed experts' bias ops (the kernels' bias_fwd / bias_bwd, one call per local expert after
 * its GEMM, as engine/experts.c runs them) over BENCH_BIAS_EXPERTS slices of [rows, width] with
 * a forward working set of about fwd_bytes; reported in moe_bench_act's fields: rows (all
 * slices'), ffn = the width, fwd_bytes (rows read and written), bwd_bytes (the output gradient
 * read), one grouped pass each. is_ok: the forward added the bias and the backward summed the
 * rows, exactly. */
#define BENCH_BIAS_EXPERTS 16
MOE_NODISCARD enum moe_status moe_bench_bias_run(const struct moe_k_ops *k,
                                                 moe_k_ctx_t *kc,
                                                 const struct moe_bench_cfg *cfg,
                                                 int width,
                                                 size_t fwd_bytes,
                                                 struct moe_bench_act *out);

struct moe_bench_attention {
    int batch, seq, heads, kv_heads, head_dim; /* causal self-attention, Tq = Tk = seq */
    int window; /* > 0: a sliding window of that many keys (the kernel's windowed path, which
                   takes the queries in tiles of `window` rows, one GEMM pair a tile); 0: none */
    double fwd_us, bwd_us; /* median time of one call over min(iters, 256) calls, interleaved */
    double fwd_gflops;     /* 4 B Hq T^2 D / 2 (causal half; windowed: 4 B Hq T W D) per forward */
    double bwd_gflops;     /* 2.5 x the forward FLOPs (P recomputed from the log-sum-exp) */
    bool is_ok;            /* one output row equals a double-precision softmax(q k^T) v */
};

/* Causal GQA attention forward and backward (the kernels' attention ops; window > 0: the
 * sliding-window ops, without sinks). */
MOE_NODISCARD enum moe_status moe_bench_attention_run(const struct moe_k_ops *k,
                                                      moe_k_ctx_t *kc,
                                                      const struct moe_bench_cfg *cfg,
                                                      int batch,
                                                      int seq,
                                                      int heads,
                                                      int kv_heads,
                                                      int head_dim,
                                                      int window,
                                                      struct moe_bench_attention *out);

struct moe_bench_quant {
    enum moe_k_qformat format;
    enum moe_k_qrecipe recipe;
    int rows, cols;
    double elements; /* rows x cols */
    double time_us;  /* one quantise -> dequantise of the matrix */
    double gbps;     /* 8 bytes per element (fp32 in and out) / time */
    bool is_ok;      /* finite, and every element within a quarter of its block's amax */
};

/* Quantise -> dequantise of a [rows, cols] matrix with (format, recipe). MOE_ERR_UNSUPPORTED
 * for a pair moe_k_qdq_supported refuses. */
MOE_NODISCARD enum moe_status moe_bench_quant_run(const struct moe_k_ops *k,
                                                  moe_k_ctx_t *kc,
                                                  const struct moe_bench_cfg *cfg,
                                                  int rows,
                                                  int cols,
                                                  enum moe_k_qformat format,
                                                  enum moe_k_qrecipe recipe,
                                                  struct moe_bench_quant *out);

enum moe_bench_coll {
    MOE_BENCH_ALLREDUCE = 0,
    MOE_BENCH_ALLGATHER = 1,
    MOE_BENCH_REDUCESCATTER = 2,
    MOE_BENCH_ALLTOALL = 3,
    MOE_BENCH_SENDRECV = 4,
    MOE_BENCH_NUM_COLLS = 5,
};
const char *moe_bench_coll_name(enum moe_bench_coll c);
/* nccl-tests' bus-bandwidth factor for a group of n ranks. */
double moe_bench_busbw_factor(enum moe_bench_coll c, int n);

struct moe_bench_coll_result {
    enum moe_bench_coll op;
    int group_size;
    size_t bytes;   /* nccl-tests' size for this op */
    size_t count;   /* floats per rank in the send buffer */
    double time_us; /* slowest rank, back-to-back calls on hot buffers (as nccl-tests) */
    double algbw_gbps;
    double busbw_gbps;
    /* As a training step runs it: before each call every rank streams cfg->evict_bytes (the
     * step's kernels between two collectives) and rewrites its send buffer (the kernel that
     * produced it), the group meets at a barrier, and the call is timed alone; the median over
     * the calls of the slowest rank's time. What `moefold calibrate` fits. */
    double step_us;
    long wrong; /* elements differing from the exact result, summed over the group */
};

/* One collective over group g for `bytes` (nccl-tests' size); collective over g. */
MOE_NODISCARD enum moe_status moe_bench_coll_run(moe_comm_t *g,
                                                 const struct moe_bench_cfg *cfg,
                                                 enum moe_bench_coll op,
                                                 size_t bytes,
                                                 struct moe_bench_coll_result *out);

#ifdef __cplusplus
}
#endif

#endif /* MOE_ENGINE_BENCH_H */
