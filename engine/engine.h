/*
 * The training engine: trains a mixture-of-experts transformer under exactly the parallel layout a
 * plan names (TP with sequence parallel, CP with Megatron's load-balanced causal split -- rank r
 * holds chunks r and 2 CP - 1 - r of each sequence, K/V all-gathered --, PP with 1F1B /
 * interleaved VPP, DP with the distributed optimizer, EP with dropless or capacity dispatch, ETP,
 * EDP, flat or hierarchical dispatcher), across the ranks of one root communicator, and measures
 * what the cost model predicts: phase times (engine/report.c says what each holds), bytes per
 * collective, memory by category, expert load.
 *
 * Model (per decoder layer): RMSNorm -> GQA attention with RoPE -> residual -> RMSNorm -> dense
 * SwiGLU MLP or MoE block (router: softmax, or sigmoid with expert bias and group-limited top-k;
 * routed SwiGLU experts via grouped GEMM; optional shared expert) -> residual; vocab embedding,
 * final RMSNorm, output layer, cross-entropy. fp32 storage throughout (the CPU reference);
 * precision recipes are emulated by quantise->dequantise of GEMM inputs when asked.
 *
 * Backends (run option `backend`): CPU (host memory, kernels/cpu on OpenBLAS, MPI for every
 * group) or CUDA (one GPU per rank: every memory category but the offload pool in device memory,
 * kernels/cuda on cuBLAS, NCCL for every group of the folding with more than one rank -- a
 * one-rank group's collectives are stream-ordered copies --, the MPI world only for host-side
 * agreement and reports). The engine reads device data on the host only through explicit copies
 * (engine/device.h, engine/staging.c): token losses per micro-batch, expert counts of the
 * dropless dispatch, gradient sums of squares, router losses and finite checks once per step.
 * Refused on CUDA: the hierarchical dispatcher. Not supported
 * (refused with a message): MLA, MTP layers, sliding-window attention, q/k norm, linear biases,
 * non-gated MLPs, the allgather dispatcher, optimizer CPU offload, reduced-precision optimizer
 * state. Options a plan sets are honoured: recompute (selective modules, full uniform/block),
 * activation offload, overlap of gradient reduce-scatter, parameter all-gather and the EP
 * all-to-all (--overlap-moe-expert-parallel-comm), capacity factor with token drop, forced load
 * balancing (random router logits, as Megatron), grouped or per-expert expert GEMMs. The others
 * run otherwise, and run.json says how ("ran": the options that ran; "plan_differences": a line
 * each; engine/engine.c moe_eng_ran_options).
 *
 * Objective and reductions: loss = sum of token cross-entropies / tokens in the global batch, plus
 * the router losses averaged over micro-batches; gradients are summed (not averaged) over ranks, so
 * any layout computes the same function of the same global batch.
 *
 * Dimension letters: B sequences per micro-batch, T tokens per sequence, C hidden, V vocabulary, E
 * experts, K top-k, L layers.
 */
#ifndef MOE_ENGINE_ENGINE_H
#define MOE_ENGINE_ENGINE_H

#include "engine/comm.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "model/cost.h"
#include "model/layout.h"
#include "model/status.h"
#include "topologies/plan_file.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Corpus kinds. */
enum moe_eng_data_kind {
    MOE_ENG_DATA_TEXT = 0,      /* byte-level tokens of a text file (or the default corpus) */
    MOE_ENG_DATA_SYNTHETIC = 1, /* seeded Markov corpus with learnable structure (tests) */
};

/* How the CUDA backend's fp32-storage GEMMs compute (kernels/cuda/cuda_backend.h). */
enum moe_eng_gemm_math {
    MOE_ENG_GEMM_FP32 = 0, /* IEEE fp32 products and sums: matches the CPU up to summation order */
    MOE_ENG_GEMM_TF32 = 1, /* TF32 tensor-core inputs, fp32 accumulation */
    MOE_ENG_GEMM_BF16 = 2, /* BF16 tensor-core inputs, fp32 accumulation ("BF16 in, FP32 acc") */
};

/* Run options (command line of moefold-train). moe_eng_run_opts_init sets the defaults. */
struct moe_eng_run_opts {
    int num_steps; /* training steps to run */
    enum moe_eng_data_kind data_kind;
    const char *data_path; /* text file; NULL = files under /usr/share/common-licenses */
    uint64_t seed;         /* weights, data order, synthetic corpus */
    int ranks_per_node;    /* > 0 emulates nodes of this many ranks; 0 = shared memory */
    int verbosity;         /* 0 progress lines, 1 details */
    FILE *log;             /* progress stream (rank 0); NULL = silent */

    /* Optimizer (AdamW, linear warm-up then constant) */
    float lr;           /* peak learning rate */
    int warmup_steps;   /* linear warm-up from lr/warmup */
    float beta1, beta2; /* Adam moments */
    float adam_eps;
    float weight_decay; /* decoupled; not applied to norm weights and the expert bias */
    float clip_grad;    /* global gradient-norm clip; 0 = off */

    /* Router */
    float aux_loss_coeff;   /* Switch load-balancing loss coefficient; 0 = off; < 0 (the
                               default): the plan's aux_loss, else seq_aux_loss coefficient */
    float z_loss_coeff;     /* router z-loss coefficient; 0 = off */
    float bias_update_rate; /* aux-loss-free expert-bias update rate (models with expert bias) */
    float topk_scaling;     /* routed scaling factor applied to top-k weights */
    /* Measurement setting: random router logits (as forced load balancing) plus router_skew on
     * the experts of EP rank 0, a known imbalance (0 = the plan's router). */
    double router_skew;

    bool emulate_precision;       /* quantise->dequantise GEMM inputs per the plan's recipe */
    double moe_buffer_factor;     /* expert rows buffer = factor x mean load; 0 = worst case */
    bool is_hierarchical;         /* hierarchical dispatcher (when has_dispatcher_override) */
    bool has_dispatcher_override; /* false: hierarchical for the plan's deepep/hybridep */

    /* Backend: MOE_K_BACKEND_CPU (default; host memory, kernels/cpu, MPI) or MOE_K_BACKEND_CUDA
     * (device memory, kernels/cuda on cuBLAS, NCCL for every group of the folding; one GPU per
     * rank, picked by the rank's index on its node). moe_eng_create answers MOE_ERR_UNSUPPORTED
     * for CUDA when this build or this machine has no usable GPU (the caller may fall back). */
    enum moe_k_backend backend;
    enum moe_eng_gemm_math gemm_math; /* CUDA: GEMM math (default FP32) */
    bool use_cuda_graphs; /* CUDA: capture each dense layer's forward once, replay it after */
    /* Tests: with backend CPU, run the CUDA backend's host/device bookkeeping on an emulated
     * device (engine/device.h: separate host blocks, CPU kernels, MPI groups); the results must
     * equal the plain CPU backend's. */
    bool is_device_emulated;

    /* Time every kernel op by phase (kernels/profile.h) and report the per-step means in run.json
     * "kernel_s"; host-synchronous backends only (CPU, emulated device), refused on CUDA. */
    bool profile_kernels;

    /* Host speed probe (CPU backend): after each measured step every rank times the GEMM that
     * moefold-bench's 512^3 row times (engine/bench.c, cold operands past probe_evict_bytes), so
     * `moefold compare --host-speed` can price the run at the speed the host had while it ran.
     * Outside the steps' timers; run.json "host_probe". probe_evict_bytes: as moefold-bench's
     * --evict-bytes (train_main: the host's last-level cache per core). */
    bool no_host_probe;
    size_t probe_evict_bytes;

    int trace_step; /* record this step's intervals for moe_eng_write_trace (1-based; 0 = none) */

    const char *save_dir; /* checkpoint directory written after the run (and every save_every) */
    int save_every;       /* steps between checkpoints; 0 = only at the end */
    const char *load_dir; /* checkpoint to resume from */
};
void moe_eng_run_opts_init(struct moe_eng_run_opts *o);

/* One step's outcome (identical on every rank). */
struct moe_eng_step_result {
    int step;            /* 1-based */
    double loss;         /* mean cross-entropy over the global batch */
    double aux_loss;     /* router losses (sum over MoE layers, mean over micro-batches) */
    double mtp_loss;     /* MTP losses times the scaling factor / D (0 without MTP layers) */
    double grad_norm;    /* global gradient norm before clipping */
    double step_s;       /* wall time of the step on this rank */
    double tokens_per_s; /* global tokens / step_s */
    double lr;           /* learning rate used */
};

/* Memory by category (bytes), from the engine's own allocations on this rank.
 */
struct moe_eng_mem_report {
    double weights;      /* parameters as used by the forward pass (+ expert bias) */
    double grads;        /* gradient buffers */
    double optimizer;    /* fp32 master weights + Adam moments (sharded with the dist. optimizer) */
    double activations;  /* saved activations of all micro-batch slots in flight */
    double buffers;      /* communication buffers, p2p, logits, scratch,
                            recompute/offload staging */
    double total;        /* sum of the five */
    double host_offload; /* activation bytes kept in the host pool (offload) */
    double data;         /* corpus held in memory (not in total) */
    double peak_rss;     /* process peak resident set (getrusage), bytes */
    double device_total; /* CUDA: device memory (cudaMemGetInfo total), bytes; 0 on the CPU */
    double device_used;  /* CUDA: total - free at the fullest point seen (step ends), bytes */
    long num_params;     /* parameters held by this rank (elements) */
    int num_slots_max;   /* activation slots of the busiest chunk (micro-batches in flight) */
};

typedef struct moe_eng moe_eng_t;

/*
 * Build the engine for plan (struct moe_plan of topologies/plan_file.h: model, layout -- resolved
 * or not; num_gpus 0 means the world size --, options, cluster name) over the root group world
 * (borrowed; collective over it): resolve and check the layout, form the groups, size and allocate
 * every buffer, initialise weights (independent of the layout) or load a checkpoint.
 * Errors: MOE_ERR_INVALID / MOE_ERR_UNSUPPORTED (diag says what), MOE_ERR_NOMEM, MOE_ERR_IO (data
 * or checkpoint). On error every rank returns the same status (diag filled on the rank that found
 * it).
 */
MOE_NODISCARD enum moe_status moe_eng_create(const struct moe_plan *plan,
                                             const struct moe_eng_run_opts *opts,
                                             moe_comm_t *world,
                                             moe_eng_t **out,
                                             struct moe_diag *diag);
void moe_eng_destroy(moe_eng_t *e);

/*
 * One training step (forward/backward over every micro-batch, gradient reduction, optimizer,
 * expert-bias update). Collective. MOE_ERR_RUNTIME when the loss or a gradient is not finite (diag
 * names step, layer and tensor; the step's update is skipped).
 */
MOE_NODISCARD enum moe_status
moe_eng_train_step(moe_eng_t *e, struct moe_eng_step_result *res, struct moe_diag *diag);

/* Run opts->num_steps steps with a progress line each (rank 0), saving as asked. */
MOE_NODISCARD enum moe_status moe_eng_train(moe_eng_t *e, struct moe_diag *diag);

/* Checkpoint: every rank writes its shard (temporary name, then rename); collective. Each file
 * carries an FNV-1a 64 checksum (engine/checkpoint.c gives the layout); loading refuses a file
 * whose checksum does not match (MOE_ERR_IO, "checksum mismatch (corrupt or truncated)", the file
 * named), one of another format version (MOE_ERR_IO) or of another layout (MOE_ERR_INVALID). */
MOE_NODISCARD enum moe_status moe_eng_save(moe_eng_t *e, const char *dir, struct moe_diag *diag);
MOE_NODISCARD enum moe_status moe_eng_load(moe_eng_t *e, const char *dir, struct moe_diag *diag);

/* Memory by category on this rank. */
void moe_eng_memory(const moe_eng_t *e, struct moe_eng_mem_report *out);
/* The resolved layout the engine runs. */
const struct moe_layout *moe_eng_layout(const moe_eng_t *e);
/* "cpu+mpi" or "cuda+nccl": the kernels and the communicator the engine runs on. */
const char *moe_eng_backend_name(const moe_eng_t *e);

/*
 * Write run.json ("format": "moefold-run", "version": 1) on rank 0: per-step losses and times,
 * phase times of the critical rank (the cost model's names) with what each phase measured, bytes
 * per collective, tokens per expert, memory by category with the buffers category's parts, the
 * expert-row sizing factor, peak RSS, and plan_json (embedded as given; may be NULL). With
 * verbosity > 0 rank 0 also prints each phase's time and definition. Collective (gathers from
 * every rank). engine/report.c documents every key.
 */
MOE_NODISCARD enum moe_status
moe_eng_write_run(moe_eng_t *e, const char *path, const char *plan_json, struct moe_diag *diag);

/*
 * Write the traced step (run option trace_step) as a Chrome trace on rank 0: one process per rank
 * ("measured rank r (stage s)"), the tracks of `moefold predict --trace` (compute, EP, TP/CP, PP,
 * DP streams), one complete event per interval of the phase clock named by phase, pass,
 * micro-batch and virtual stage ("combine wait F mb3 v0"), the collectives' wait shares as their
 * own events, times from rank 0's start of the step on the clock every rank shares
 * (engine/timing.c). Collective. MOE_ERR_INVALID when no step was traced, MOE_ERR_IO.
 */
MOE_NODISCARD enum moe_status
moe_eng_write_trace(moe_eng_t *e, const char *path, struct moe_diag *diag);

/* ---- Hooks for tests (gradient checks, equivalence) ------------------------------------------ */

/* Forward + backward over one global batch at the current data position without updating anything
 * (data position unchanged); *loss = the objective (cross-entropy + router losses). */
MOE_NODISCARD enum moe_status
moe_eng_compute_grads(moe_eng_t *e, double *loss, struct moe_diag *diag);

/* Steps whose collectives' arrival times are not matched yet: they are matched after training
 * (write_run and write_trace do it, the readers of the waits), not between steps, so no collective
 * joins the ranks there. 0 on backends without wait shares. */
int moe_eng_unmatched_steps(const moe_eng_t *e);

/* Parameter tensors held by this rank (engine memory: device pointers on the CUDA backend). */
struct moe_eng_param_view {
    const char *name; /* "layer3.w_qkv", "embedding", ... */
    float *weight;    /* [numel] as used by the forward pass */
    float *grad;      /* [numel] local gradient after moe_eng_compute_grads (before reduction) */
    size_t numel;
    int layer; /* decoder layer, -1 for embedding/head */
};
int moe_eng_num_params(const moe_eng_t *e);
void moe_eng_param(const moe_eng_t *e, int idx, struct moe_eng_param_view *out);

/* Copy n elements (from element offset) of parameter idx's weights, or gradients when is_grad,
 * to the host buffer dst / from the host buffer src: engine memory may be device memory. */
void moe_eng_param_read(
    const moe_eng_t *e, int idx, bool is_grad, size_t offset, float *dst, size_t n);
void moe_eng_param_write(
    moe_eng_t *e, int idx, bool is_grad, size_t offset, const float *src, size_t n);

/* Attention work this rank launched since creation: *flops = FLOPs of the kernels' score-matrix
 * GEMMs (2 Tq Tk D per head for each of QK^T and PV forward, five such products backward), *pairs
 * = causal query-key pairs among them (summed over heads and sequences). With CP > 1 the
 * load-balanced split gives every CP rank the same of both (tests). */
void moe_eng_attention_work(const moe_eng_t *e, double *flops, double *pairs);

/* Heap allocations made so far (tests check that steps allocate nothing). */
size_t moe_eng_num_allocs(const moe_eng_t *e);

#ifdef __cplusplus
}
#endif

#endif /* MOE_ENGINE_ENGINE_H */
