/*
 * moefold compute kernels: one interface, two backends (CPU reference on OpenBLAS; CUDA + cuBLAS).
 *
 * What this is: every primitive the training engine runs on tensors, declared once as a member of
 * struct moe_k_ops (a table of function pointers). The CPU backend (kernels/cpu/) fills one table
 * and defines the semantics; a CUDA backend (kernels/cuda/, when built) fills another with the same
 * semantics. The engine picks a table at start-up with moe_k_ops_for() and calls through it; there
 * is no #ifdef around calls. What this is not: no communication (MPI/NCCL live in engine/), no
 * allocation inside ops (STYLE.md §6), no model structure (the engine composes ops into layers).
 *
 * Conventions (the header is the documentation):
 * - Layout: row-major, contiguous, fp32 storage. A shape [M, C] means M rows of C floats. Token
 *   ids, expert indices and counts are int32 (int). Element counts of flat tensors are size_t.
 * - Memory: every tensor pointer refers to the backend's memory (host for CPU, device for CUDA),
 *   including small outputs such as counts and scalar losses ([1]). Plain `int`/`float` arguments
 *   are host values. Ops never allocate; ops needing scratch have a `*_workspace_bytes` query and
 *   take `workspace` + `workspace_bytes` from the caller.
 * - Argument order: outputs, inputs, dims, options, then the kernel context.
 * - Gradients: parameter gradients accumulate (`+=`), so micro-batches and shared parameters sum
 *   without extra passes; activation gradients overwrite, except where an op takes
 *   `bool accumulate` (an input that fans out to several consumers, or the residual stream): then
 *   `accumulate=true` adds into the destination and `false` overwrites it.
 * - Determinism: the CPU backend uses fixed loop orders and OpenBLAS with one thread, so the same
 *   inputs give bit-identical outputs. IEEE arithmetic (no fast-math). A backend that is not
 *   bit-deterministic (CUDA atomics) says so at the op.
 * - Bad dimensions or NULL required pointers are broken invariants (MOE_ASSERT aborts); callers
 *   validate user input before calling. Outputs must not alias inputs unless the op says so.
 *
 * Dimension letters used in shape comments:
 *   B  sequences in a micro-batch          T  tokens per sequence (Tq query, Tk key/value)
 *   M  token rows an op sees (B*T, or a shard of them)
 *   R  permuted rows (token copies kept for the experts) = sum of tokens_per_expert
 *   C  hidden size                         F  (expert) FFN hidden size
 *   E  experts                             K  routed experts per token (top-k)
 *   N  ranks an expert set is spread over (EP)
 *   V  vocabulary (Vl = the local shard v_end - v_start)
 *   H  attention heads (Hq query, Hkv key/value; Hq % Hkv == 0, GQA)
 *   D  head dim (Dqk query/key, Dv value)
 *
 * Worked example: tests/kernels/test_refs.c composes a MoE block (RMSNorm, router, permute,
 * grouped expert GEMMs, SwiGLU, unpermute, shared expert, aux loss) forward and backward from
 * these ops and matches PyTorch.
 *
 * Sources: llm.c (layout and CPU-reference style), Megatron-LM / TransformerEngine (permute,
 * router, FP8 recipes), DeepEP (dispatch-layout vocabulary), DeepSeek-V3 tech report (sigmoid
 * router, group-limited routing, aux-loss-free bias), OCP Microscaling Formats spec v1.0 (MXFP8),
 * NVIDIA's NVFP4 description (two-level scaling), PyTorch (AdamW, float8 casts).
 */
#ifndef MOE_KERNELS_KERNELS_H
#define MOE_KERNELS_KERNELS_H

#include "model/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------- */
/* Backends and the kernel context                                                              */

enum moe_k_backend {
    MOE_K_BACKEND_CPU = 0,  /* kernels/cpu: C + OpenBLAS, the specification */
    MOE_K_BACKEND_CUDA = 1, /* kernels/cuda: CUDA + cuBLAS, same semantics */
    MOE_K_NUM_BACKENDS = 2,
};

/* What a kernel context is made from. Zero-initialise, then set fields. */
struct moe_k_ctx_desc {
    enum moe_k_backend backend; /* which table the context serves */
    int num_threads;            /* CPU: OpenBLAS threads; <= 0 means 1 (one thread per MPI rank) */
    int device_idx;             /* CUDA: device ordinal; ignored by CPU */
    void *stream;               /* CUDA: cudaStream_t to launch on (NULL = default); CPU: unused */
};

/* Opaque kernel context: backend, thread count / stream, backend-private handles (cuBLAS). */
typedef struct moe_k_ctx moe_k_ctx_t;

struct moe_k_ops; /* below */

/*
 * Create a kernel context for desc->backend. CPU: sets OpenBLAS to desc->num_threads threads
 * (process-wide, as OpenBLAS offers no per-call setting). Returns MOE_OK and *out, or
 * MOE_ERR_UNSUPPORTED (backend not built in), MOE_ERR_INVALID (bad desc), MOE_ERR_NOMEM.
 * The caller owns *out and releases it with moe_k_ctx_destroy.
 */
MOE_NODISCARD enum moe_status moe_k_ctx_create(const struct moe_k_ctx_desc *desc,
                                               moe_k_ctx_t **out);
/* Release a context (and its backend state). NULL does nothing. */
void moe_k_ctx_destroy(moe_k_ctx_t *ctx);

/* The context's description (as created), its backend and its ops table; never NULL. */
/* ctx must not be NULL in these accessors. */
const struct moe_k_ctx_desc *moe_k_ctx_get_desc(const moe_k_ctx_t *ctx);
const struct moe_k_ops *moe_k_ctx_ops(const moe_k_ctx_t *ctx);

/*
 * Backend-private state slot (for example the CUDA backend's cuBLAS handle), set by the backend's
 * ctx_init hook and released by its ctx_fini hook. The CPU backend uses none.
 */
void moe_k_ctx_set_backend_state(moe_k_ctx_t *ctx, void *state);
void *moe_k_ctx_backend_state(const moe_k_ctx_t *ctx);

/* The ops table of a backend, or NULL when that backend is not built into this binary. */
const struct moe_k_ops *moe_k_ops_for(enum moe_k_backend backend);
/* The CPU table (always built). */
const struct moe_k_ops *moe_k_cpu_ops(void);
/* The CUDA table; defined only where kernels/cuda/ is built (MOE_HAVE_CUDA_KERNELS). */
const struct moe_k_ops *moe_k_cuda_ops(void);

/* ------------------------------------------------------------------------------------------- */
/* Enumerations used by ops                                                                     */

/* Router score function. */
enum moe_k_score_fn {
    MOE_K_SCORE_SOFTMAX = 0, /* p = softmax(logits) over all E (Mixtral, Qwen, DeepSeek-V2) */
    MOE_K_SCORE_SIGMOID = 1, /* s = sigmoid(logits) per expert (DeepSeek-V3) */
};

/* Element formats of precision emulation. */
enum moe_k_qformat {
    MOE_K_QFMT_BF16 = 0,     /* 1-8-7, round-to-nearest-even, keeps Inf/NaN */
    MOE_K_QFMT_FP8_E4M3 = 1, /* OCP E4M3 ("e4m3fn"): max 448, no Inf, NaN = S.1111.111 */
    MOE_K_QFMT_FP8_E5M2 = 2, /* OCP E5M2: max 57344, Inf and NaN as IEEE */
    MOE_K_QFMT_FP4_E2M1 = 3, /* OCP E2M1: values 0, 0.5, 1, 1.5, 2, 3, 4, 6; no Inf/NaN */
    MOE_K_NUM_QFMTS = 4,
};

/*
 * Scaling recipes. "Block" scales and the tensor scale are computed from the amax of exactly the
 * elements they cover. Which (format, recipe) pairs are valid: moe_k_qdq_supported().
 */
enum moe_k_qrecipe {
    MOE_K_QRECIPE_CAST = 0,       /* plain cast, no scale (BF16; FP8 saturating) */
    MOE_K_QRECIPE_TENSORWISE = 1, /* one fp32 scale = fmt_max / amax(tensor) (TE current scaling) */
    MOE_K_QRECIPE_BLOCK_1X128 = 2,   /* fp32 scale per 1x128 run along cols (activations) */
    MOE_K_QRECIPE_BLOCK_128X128 = 3, /* fp32 scale per 128x128 tile (weights) */
    MOE_K_QRECIPE_MX = 4,    /* OCP MX: 32 elements along cols share an E8M0 power-of-two scale */
    MOE_K_QRECIPE_NVFP4 = 5, /* 16 elements along cols share an E4M3 scale, plus one fp32 scale */
    MOE_K_NUM_QRECIPES = 6,
};

/* ------------------------------------------------------------------------------------------- */
/* Host helpers (pure functions; not in the table, same on every backend)                       */

/* BF16: round-to-nearest-even from fp32 (bit-exact with PyTorch's casts for non-NaN inputs);
 * NaN -> quiet NaN keeping sign and top payload bits (PyTorch writes 0xFFFF); overflow rounds to
 * Inf. */
uint16_t moe_k_bf16_encode(float x);
float moe_k_bf16_decode(uint16_t bits);

/*
 * FP8 E4M3 (OCP "e4m3fn", bias 7, max 448, subnormals down to 2^-9). Round-to-nearest-even.
 * NaN -> 0x7F | sign. Magnitudes that round above 448 (including Inf): saturate=true gives
 * +-448 (0x7E | sign), which is also what torch.float8_e4m3fn casts give in PyTorch 2.15
 * (checked bit for bit by tests/kernels/test_refs.c); saturate=false gives NaN (0x7F | sign), the
 * OCP non-saturating conversion. Decode: 0x7F and 0xFF are NaN; the other 254 codes are finite
 * (0x80 is -0).
 */
uint8_t moe_k_fp8_e4m3_encode(float x, bool saturate);
float moe_k_fp8_e4m3_decode(uint8_t bits);

/*
 * FP8 E5M2 (OCP, bias 15, max 57344, subnormals down to 2^-16). Round-to-nearest-even.
 * NaN -> 0x7F | sign. Overflow (rounding above 57344) and Inf: saturate=true gives +-57344
 * (0x7B | sign); saturate=false gives +-Inf (0x7C | sign), as torch.float8_e5m2 casts do.
 * Decode: 0x7C/0xFC are +-Inf, 0x7D-0x7F and 0xFD-0xFF NaN.
 */
uint8_t moe_k_fp8_e5m2_encode(float x, bool saturate);
float moe_k_fp8_e5m2_decode(uint8_t bits);

/*
 * FP4 E2M1 (OCP, bias 1; codes 0..15, bit 3 = sign). Round-to-nearest-even, always saturating to
 * +-6 (the format has no Inf/NaN); NaN input encodes as +-6 too, so recipes check for NaN first.
 */
uint8_t moe_k_fp4_e2m1_encode(float x);
float moe_k_fp4_e2m1_decode(uint8_t bits);

/* E8M0 scale (OCP MX): value 2^(bits - 127); 0xFF is NaN. */
float moe_k_e8m0_decode(uint8_t bits);

/* True when qdq implements (format, recipe). See moe_k_qrecipe and the qdq op. */
bool moe_k_qdq_supported(enum moe_k_qformat format, enum moe_k_qrecipe recipe);

/*
 * Megatron-LM's expert capacity: ceil(num_tokens * K / E * capacity_factor) token copies per
 * expert. capacity_factor <= 0 means dropless and returns 0 (the ops' "no capacity" value).
 */
int moe_k_expert_capacity(int num_tokens, int topk, int num_experts, double capacity_factor);

/* ------------------------------------------------------------------------------------------- */
/* The ops table. One member per op; every backend fills every member with the same semantics,   */
/* except the optional ops, which a backend may leave NULL (the caller checks before use).     */

struct moe_k_ops {
    enum moe_k_backend backend;
    const char *name; /* "cpu", "cuda" */

    /* Backend hooks called by moe_k_ctx_create/destroy (may store state with
     * moe_k_ctx_set_backend_state). ctx_init returns MOE_OK or an error status. */
    enum moe_status (*ctx_init)(moe_k_ctx_t *ctx);
    void (*ctx_fini)(moe_k_ctx_t *ctx);

    /* ---- Elementwise and memory helpers ---------------------------------------------------- */

    /* x[n] = value. */
    void (*fill)(float *x, size_t n, float value, moe_k_ctx_t *ctx);
    /* dst[rows, cols] (row stride dst_ld) = (or += when accumulate) src[rows, cols] (row stride
     * src_ld). Splits and concatenations along the last dim; dst and src must not overlap. */
    void (*copy_2d)(float *dst,
                    int dst_ld,
                    const float *src,
                    int src_ld,
                    int rows,
                    int cols,
                    bool accumulate,
                    moe_k_ctx_t *ctx);
    /* y[n] += alpha * x[n] (residual adds). */
    void (*axpy)(float *y, const float *x, size_t n, float alpha, moe_k_ctx_t *ctx);
    /* x[n] *= alpha. */
    void (*scale)(float *x, size_t n, float alpha, moe_k_ctx_t *ctx);
    /* out[1] = sum x[n]; accumulated in double, in index order. */
    void (*sum)(float *out, const float *x, size_t n, moe_k_ctx_t *ctx);
    /* out[1] = sum x[n]^2; accumulated in double, in index order (gradient norms). */
    void (*sum_squares)(float *out, const float *x, size_t n, moe_k_ctx_t *ctx);

    /* ---- GEMM (OpenBLAS sgemm on CPU) ---------------------------------------------------- */

    /* c[m, n] = alpha * op(a) * op(b) + beta * c, row-major and contiguous; op(a) is a[m, k], or
     * a[k, m] transposed when trans_a; op(b) is b[k, n], or b[n, k] transposed when trans_b. */
    void (*matmul)(float *c,
                   const float *a,
                   const float *b,
                   int m,
                   int n,
                   int k,
                   bool trans_a,
                   bool trans_b,
                   float alpha,
                   float beta,
                   moe_k_ctx_t *ctx);
    /* y[M, out] = x[M, in] w[out, in]^T + bias[out] (bias may be NULL). Overwrites y. */
    void (*linear_fwd)(float *y,
                       const float *x,
                       const float *w,
                       const float *bias,
                       int num_rows,
                       int in_dim,
                       int out_dim,
                       moe_k_ctx_t *ctx);
    /* dx[M, in] = (or += when accumulate) dy[M, out] w[out, in]. */
    void (*linear_bwd_data)(float *dx,
                            const float *dy,
                            const float *w,
                            int num_rows,
                            int in_dim,
                            int out_dim,
                            bool accumulate,
                            moe_k_ctx_t *ctx);
    /* dw[out, in] += dy[M, out]^T x[M, in]; d_bias[out] += column sums of dy (d_bias may be
     * NULL). Parameter gradients: always accumulate. */
    void (*linear_bwd_weight)(float *dw,
                              float *d_bias,
                              const float *dy,
                              const float *x,
                              int num_rows,
                              int in_dim,
                              int out_dim,
                              moe_k_ctx_t *ctx);

    /* ---- Grouped GEMM over expert-contiguous rows ---------------------------------------- */
    /* Rows are grouped by expert: rows [off_e, off_e + counts[e]) belong to expert e, with
     * off_e = sum of counts before e, R = sum counts[E]. One sgemm per non-empty expert, directly
     * on slices (no copies). Experts with counts[e] == 0 are skipped (their dw is untouched).
     * counts is engine memory; counts_host, when not NULL, is a host copy with the same contents
     * (the engine has one after the dispatch): the CUDA backend then skips reading counts back,
     * a stream synchronisation per call. */

    /* y[R, out] = x[R, in] w[e][out, in]^T per expert group; w is [E, out, in]. Overwrites y. */
    void (*grouped_linear_fwd)(float *y,
                               const float *x,
                               const float *w,
                               const int *counts,
                               const int *counts_host,
                               int num_experts,
                               int in_dim,
                               int out_dim,
                               moe_k_ctx_t *ctx);
    /* dx[R, in] = (or += when accumulate) dy[R, out] w[e][out, in] per expert group. */
    void (*grouped_linear_bwd_data)(float *dx,
                                    const float *dy,
                                    const float *w,
                                    const int *counts,
                                    const int *counts_host,
                                    int num_experts,
                                    int in_dim,
                                    int out_dim,
                                    bool accumulate,
                                    moe_k_ctx_t *ctx);
    /* dw[e][out, in] += dy[rows of e, out]^T x[rows of e, in]; dw is [E, out, in]. */
    void (*grouped_linear_bwd_weight)(float *dw,
                                      const float *dy,
                                      const float *x,
                                      const int *counts,
                                      const int *counts_host,
                                      int num_experts,
                                      int in_dim,
                                      int out_dim,
                                      moe_k_ctx_t *ctx);

    /* ---- MoE token movement (DeepEP vocabulary) ------------------------------------------ */
    /* A "slot" is one (token t, choice k) pair, slot index t*K + k. Permuted rows are ordered by
     * expert, and inside an expert by slot index (token order, then k), so the rows bound for
     * expert-parallel rank r (experts [r*E/N, (r+1)*E/N)) are contiguous and the layout is
     * deterministic. */

    /* Expert-parallel flow (Megatron's all-to-all dispatcher, in these terms): dispatch_layout
     * -> permute (rows for EP rank r are contiguous: sum of tokens_per_expert over r's experts)
     * -> all-to-all-v of rows and of per-expert counts -> sort_chunks from source-rank-major
     * [N][E/N] chunks to local-expert-major -> grouped GEMMs (counts summed over sources) ->
     * unsort_chunks -> all-to-all-v back -> unpermute with the router weights (which never
     * travel). Backward runs the same steps in reverse with the _bwd ops. */

    /* counts[E] = number of slots routed to each expert by topk_idx[M, K] (before any drop). */
    void (*expert_counts)(int *counts,
                          const int *topk_idx,
                          int num_tokens,
                          int topk,
                          int num_experts,
                          moe_k_ctx_t *ctx);
    /*
     * Dispatch layout from top-k indices, with an optional capacity.
     * Out: tokens_per_expert[E] = rows kept per expert; tokens_per_rank[N] = distinct tokens with
     * at least one kept slot on rank r's experts (DeepEP's num_tokens_per_rank; E % N == 0);
     * slot_to_row[M*K] = permuted row of each slot, or -1 if dropped; row_to_slot[M*K] = slot of
     * each permuted row for rows < R, -1 for the unused tail.
     * Capacity (capacity > 0): each expert keeps its first `capacity` slots in slot order (token
     * order, then k) and drops the rest — Megatron's "position" drop policy, no padding.
     * capacity <= 0: dropless. topk_idx values must lie in [0, E).
     */
    void (*dispatch_layout)(int *tokens_per_expert,
                            int *tokens_per_rank,
                            int *slot_to_row,
                            int *row_to_slot,
                            const int *topk_idx,
                            int num_tokens,
                            int topk,
                            int num_experts,
                            int num_ranks,
                            int capacity,
                            moe_k_ctx_t *ctx);
    /* rows[R, C]: row p = x[row_to_slot[p] / K] (token copies in expert order). */
    void (*permute)(float *rows,
                    const float *x,
                    const int *row_to_slot,
                    int num_rows,
                    int topk,
                    int hidden,
                    moe_k_ctx_t *ctx);
    /* dx[M, C] = (or += when accumulate) sum over kept slots of token t of d_rows[row], in k
     * order; a token whose slots were all dropped gets 0 (or is left as is when accumulating). */
    void (*permute_bwd)(float *dx,
                        const float *d_rows,
                        const int *slot_to_row,
                        int num_tokens,
                        int topk,
                        int hidden,
                        bool accumulate,
                        moe_k_ctx_t *ctx);
    /* Combine: y[M, C] = sum_k weights[t, k] * rows[slot_to_row[t*K+k]] over kept slots, in k
     * order (dropped slots add 0). weights NULL means 1. Overwrites y. */
    void (*unpermute)(float *y,
                      const float *rows,
                      const float *weights,
                      const int *slot_to_row,
                      int num_tokens,
                      int topk,
                      int hidden,
                      moe_k_ctx_t *ctx);
    /* Backward of unpermute: d_rows[R, C] = weights[t, k] * dy[t] for each kept slot (overwrite);
     * d_weights[M, K] = dot(dy[t], rows[row]) for kept slots, 0 for dropped ones (overwrite;
     * d_weights may be NULL, and must be when weights is NULL). */
    void (*unpermute_bwd)(float *d_rows,
                          float *d_weights,
                          const float *dy,
                          const float *rows,
                          const float *weights,
                          const int *slot_to_row,
                          int num_tokens,
                          int topk,
                          int hidden,
                          moe_k_ctx_t *ctx);
    /* Reorder row chunks (after an all-to-all: source-major -> local-expert-major, as Megatron's
     * sort_chunks_by_idxs). in[rows, C] is num_chunks chunks of chunk_rows[i] rows each, in index
     * order; out[rows, C] holds chunk chunk_order[0], then chunk_order[1], ... (a permutation of
     * 0..num_chunks-1). unsort_chunks is its exact inverse (and each is the other's backward):
     * given the sorted layout in `in`, it writes the original layout to `out`. Overwrite out. */
    void (*sort_chunks)(float *out,
                        const float *in,
                        const int *chunk_rows,
                        const int *chunk_order,
                        int num_chunks,
                        int hidden,
                        moe_k_ctx_t *ctx);
    void (*unsort_chunks)(float *out,
                          const float *in,
                          const int *chunk_rows,
                          const int *chunk_order,
                          int num_chunks,
                          int hidden,
                          moe_k_ctx_t *ctx);

    /* ---- Router ---------------------------------------------------------------------------- */
    /* The logits GEMM (x[M, C] w_router[E, C]^T) is done by the caller with linear_fwd, so the
     * router weight is an ordinary linear parameter; these ops start from logits[M, E]. */

    /*
     * Scores and top-k selection.
     * scores[M, E] = softmax(logits) over E, or sigmoid(logits) (saved for backward).
     * Selection uses scores + expert_bias[E] (DeepSeek-V3 aux-loss-free bias; NULL = no bias); the
     * bias never enters the weights. Group-limited routing when num_groups > 1 (at most 256):
     * experts form num_groups contiguous groups of E/num_groups; a group's score is the sum of its
     * top-2 selection scores (top-1 if the group has one expert), the best group_topk groups are
     * kept, and top-k is taken among their experts. Ties go to the lower index; topk_idx[M, K]
     * lists experts by descending selection score. topk_weight[M, K] = scores at the chosen
     * experts, divided by their sum when normalize_topk, then multiplied by scaling_factor
     * (DeepSeek-V3's routed_scaling_factor; 1 otherwise).
     */
    void (*router_fwd)(int *topk_idx,
                       float *topk_weight,
                       float *scores,
                       const float *logits,
                       const float *expert_bias,
                       int num_tokens,
                       int num_experts,
                       int topk,
                       int num_groups,
                       int group_topk,
                       enum moe_k_score_fn score_fn,
                       bool normalize_topk,
                       float scaling_factor,
                       moe_k_ctx_t *ctx);
    /* d_logits[M, E] (overwrite) from d_topk_weight[M, K] through the normalisation and the score
     * function, plus d_scores[M, E] (an extra gradient on scores, from the aux loss; NULL = none).
     * Selection is discrete: no gradient flows through it or the bias. */
    void (*router_bwd)(float *d_logits,
                       const float *d_topk_weight,
                       const float *d_scores,
                       const float *scores,
                       const int *topk_idx,
                       int num_tokens,
                       int num_experts,
                       int topk,
                       enum moe_k_score_fn score_fn,
                       bool normalize_topk,
                       float scaling_factor,
                       moe_k_ctx_t *ctx);
    /*
     * Switch-style load-balancing loss (Megatron switch_load_balancing_loss_func):
     * loss[1] = coeff * E / (K * T_tot^2) * sum_e counts[e] * sum_t P[t, e], t over these M
     * tokens, where P = scores (softmax) or scores / sum_e scores per token (sigmoid, as
     * DeepSeek-V3) and counts[E] (from expert_counts, before drop) and num_tokens_total T_tot
     * describe the token set the balance is measured over. With counts and T_tot taken over a
     * larger set (all-reduced) and M tokens a shard of it, the shards' losses sum to the global
     * loss. Overwrites loss.
     */
    void (*router_aux_loss_fwd)(float *loss,
                                const float *scores,
                                const int *counts,
                                int num_tokens,
                                int num_tokens_total,
                                int num_experts,
                                int topk,
                                enum moe_k_score_fn score_fn,
                                float coeff,
                                moe_k_ctx_t *ctx);
    /* d_scores[M, E] = d_loss * d(loss)/d(scores) of router_aux_loss_fwd (overwrite); d_loss is
     * the gradient of the objective with respect to that loss (1, or 1/num_micro_batches). */
    void (*router_aux_loss_bwd)(float *d_scores,
                                const float *scores,
                                const int *counts,
                                int num_tokens,
                                int num_tokens_total,
                                int num_experts,
                                int topk,
                                enum moe_k_score_fn score_fn,
                                float coeff,
                                float d_loss,
                                moe_k_ctx_t *ctx);
    /* Router z-loss (ST-MoE): loss[1] = coeff / T_tot * sum_t logsumexp(logits[t])^2 over these
     * M tokens. Overwrites loss. */
    void (*router_z_loss_fwd)(float *loss,
                              const float *logits,
                              int num_tokens,
                              int num_tokens_total,
                              int num_experts,
                              float coeff,
                              moe_k_ctx_t *ctx);
    /* d_logits[M, E] += d_loss * d(z-loss)/d(logits): accumulates onto router_bwd's result. */
    void (*router_z_loss_bwd)(float *d_logits,
                              const float *logits,
                              int num_tokens,
                              int num_tokens_total,
                              int num_experts,
                              float coeff,
                              float d_loss,
                              moe_k_ctx_t *ctx);
    /* DeepSeek-V3 aux-loss-free balancing: bias[e] += rate * sign(mean(counts) - counts[e]), with
     * counts[E] the step's (global) token counts per expert. An update, not a gradient. */
    void (*router_bias_update)(
        float *bias, const int *counts, int num_experts, float rate, moe_k_ctx_t *ctx);

    /* ---- Normalisation and activations ----------------------------------------------------- */

    /* RMSNorm: y[M, C] = x * rstd * weight[C], rstd[M] = 1 / sqrt(mean(x^2) + eps) (saved). */
    void (*rmsnorm_fwd)(float *y,
                        float *rstd,
                        const float *x,
                        const float *weight,
                        int num_rows,
                        int hidden,
                        float eps,
                        moe_k_ctx_t *ctx);
    /* dx[M, C] = (or += when accumulate; true on the residual stream) d(x); d_weight[C] +=. */
    void (*rmsnorm_bwd)(float *dx,
                        float *d_weight,
                        const float *dy,
                        const float *x,
                        const float *weight,
                        const float *rstd,
                        int num_rows,
                        int hidden,
                        bool accumulate,
                        moe_k_ctx_t *ctx);
    /* SwiGLU (Megatron's fused fc1 layout): out[M, F] = silu(in[:, :F]) * in[:, F:], in[M, 2F]
     * (gate half first, then up half). */
    void (*swiglu_fwd)(float *out, const float *in, int num_rows, int ffn, moe_k_ctx_t *ctx);
    /* d_in[M, 2F] (overwrite) from d_out[M, F] and the saved in[M, 2F]. */
    void (*swiglu_bwd)(
        float *d_in, const float *d_out, const float *in, int num_rows, int ffn, moe_k_ctx_t *ctx);
    /* GELU, tanh approximation (GPT-2): out[n] = 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))). */
    void (*gelu_fwd)(float *out, const float *in, size_t n, moe_k_ctx_t *ctx);
    /* d_in[n] (overwrite) from d_out[n] and the saved in[n]. */
    void (*gelu_bwd)(float *d_in, const float *d_out, const float *in, size_t n, moe_k_ctx_t *ctx);

    /*
     * Rotary position embedding's angle table, made once per run (Megatron-LM precomputes its
     * rotary frequencies likewise): cos_sin[M, rot_dim/2, 2] = cos and sin of positions[i] x
     * theta^(-2j / rot_dim) for token i (global position: include the context-parallel offset)
     * and pair j, computed in double and rounded once to fp32. rot_dim is even.
     */
    void (*rope_table)(float *cos_sin,
                       const int *positions,
                       int num_rows,
                       int rot_dim,
                       float theta,
                       moe_k_ctx_t *ctx);
    /*
     * Rotary position embedding on dims [rot_start, rot_start + rot_dim) of every head of
     * x[M, H, head_dim] (so MLA's rope part, or a partial rotary, works); other dims are copied.
     * Row i turns pair j by the angle of cos_sin[i, j] (rope_table's, made for this rot_dim).
     * Pairs are (j, j + rot_dim/2) (GPT-NeoX / Llama "rotate half") or (2j, 2j+1) when
     * interleaved (GPT-J, DeepSeek). out may equal in (in place).
     */
    void (*rope_fwd)(float *out,
                     const float *in,
                     const float *cos_sin,
                     int num_rows,
                     int num_heads,
                     int head_dim,
                     int rot_start,
                     int rot_dim,
                     bool interleaved,
                     moe_k_ctx_t *ctx);
    /* d_in (overwrite; may equal d_out) = inverse rotation of d_out; same arguments. */
    void (*rope_bwd)(float *d_in,
                     const float *d_out,
                     const float *cos_sin,
                     int num_rows,
                     int num_heads,
                     int head_dim,
                     int rot_start,
                     int rot_dim,
                     bool interleaved,
                     moe_k_ctx_t *ctx);

    /* ---- Attention ------------------------------------------------------------------------- */
    /*
     * Scaled dot-product attention, with GQA (query head h reads key/value head h / (Hq/Hkv)).
     * q[B, Tq, Hq, Dqk], k[B, Tk, Hkv, Dqk], v[B, Tk, Hkv, Dv], out[B, Tq, Hq, Dv],
     * lse[B, Hq, Tq] = log-sum-exp of the scaled, masked scores of each query row (saved).
     * Query i has global position q_pos0 + i, key j has k_pos0 + j; when causal, query i sees keys
     * with position <= its own. Full causal self-attention: Tq = Tk, q_pos0 = k_pos0 = 0. Context
     * parallel with all-gathered K/V: a local query chunk with q_pos0 = its offset and the K/V
     * range it is given. A row that sees no key gets out = 0 and lse = -Inf. scale is the softmax
     * scale (1/sqrt(Dqk) usually). O(Tq*Tk) per head; scores live in the workspace.
     */
    size_t (*attention_workspace_bytes)(int q_len, int kv_len, moe_k_ctx_t *ctx);
    void (*attention_fwd)(float *out,
                          float *lse,
                          const float *q,
                          const float *k,
                          const float *v,
                          int batch,
                          int q_len,
                          int kv_len,
                          int num_q_heads,
                          int num_kv_heads,
                          int qk_dim,
                          int v_dim,
                          int q_pos0,
                          int k_pos0,
                          float scale,
                          bool causal,
                          void *workspace,
                          size_t workspace_bytes,
                          moe_k_ctx_t *ctx);
    /* dq (overwrite), dk and dv (overwrite, or += when accumulate_dkv: several query chunks of
     * one K/V range), from dout[B, Tq, Hq, Dv] and the saved q, k, v, out, lse; softmax
     * probabilities are recomputed from lse. Same shapes and options as attention_fwd. */
    void (*attention_bwd)(float *dq,
                          float *dk,
                          float *dv,
                          const float *dout,
                          const float *q,
                          const float *k,
                          const float *v,
                          const float *out,
                          const float *lse,
                          int batch,
                          int q_len,
                          int kv_len,
                          int num_q_heads,
                          int num_kv_heads,
                          int qk_dim,
                          int v_dim,
                          int q_pos0,
                          int k_pos0,
                          float scale,
                          bool causal,
                          bool accumulate_dkv,
                          void *workspace,
                          size_t workspace_bytes,
                          moe_k_ctx_t *ctx);

    /* ---- Sliding-window attention with sinks, biases (optional: NULL in a backend without them,
     * and moefold-train refuses the architectures that need them there; both backends have them)
     * ------------------------------------------------------------------------------------------ */
    /*
     * Causal attention as attention_fwd (same shapes, workspace from attention_workspace_bytes)
     * with a sliding window and per-head attention sinks (GPT-OSS). window > 0: query i (position
     * q_pos0 + i) sees the keys at positions (p - window, p], i.e. at most `window` keys ending at
     * its own (Hugging Face's sliding_window); window 0: every key up to its position. sinks[Hq]
     * (NULL = none): a learned logit per query head that joins each row's softmax denominator and
     * carries no value, so P = exp(S - lse) with lse = log(exp(sink_h) + sum_j exp(S_j)) and the
     * row weights sum to less than 1. A row that sees no key gets out = 0 and lse = sink_h (-Inf
     * without sinks).
     */
    void (*attention_window_sink_fwd)(float *out,
                                      float *lse,
                                      const float *q,
                                      const float *k,
                                      const float *v,
                                      const float *sinks,
                                      int batch,
                                      int q_len,
                                      int kv_len,
                                      int num_q_heads,
                                      int num_kv_heads,
                                      int qk_dim,
                                      int v_dim,
                                      int q_pos0,
                                      int k_pos0,
                                      int window,
                                      float scale,
                                      void *workspace,
                                      size_t workspace_bytes,
                                      moe_k_ctx_t *ctx);
    /* Backward of attention_window_sink_fwd, as attention_bwd; d_sinks[Hq] += the sinks' gradient
     * (a parameter gradient; required when sinks is not NULL). */
    void (*attention_window_sink_bwd)(float *dq,
                                      float *dk,
                                      float *dv,
                                      float *d_sinks,
                                      const float *dout,
                                      const float *q,
                                      const float *k,
                                      const float *v,
                                      const float *out,
                                      const float *lse,
                                      const float *sinks,
                                      int batch,
                                      int q_len,
                                      int kv_len,
                                      int num_q_heads,
                                      int num_kv_heads,
                                      int qk_dim,
                                      int v_dim,
                                      int q_pos0,
                                      int k_pos0,
                                      int window,
                                      float scale,
                                      bool accumulate_dkv,
                                      void *workspace,
                                      size_t workspace_bytes,
                                      moe_k_ctx_t *ctx);
    /* y[M, N] += bias[N] (a bias added after a reduction, or per expert on its rows). */
    void (*bias_fwd)(float *y, const float *bias, int num_rows, int dim, moe_k_ctx_t *ctx);
    /* d_bias[N] += column sums of dy[M, N], accumulated in double in row order. */
    void (*bias_bwd)(float *d_bias, const float *dy, int num_rows, int dim, moe_k_ctx_t *ctx);

    /* ---- Vocab-parallel embedding and cross-entropy ---------------------------------------- */
    /* This rank holds vocabulary rows [v_start, v_end); Vl = v_end - v_start. */

    /* out[M, C] = table[ids[i] - v_start] when ids[i] is in range, else 0 (the engine sums over
     * the tensor-parallel group). Overwrites out. */
    void (*embedding_fwd)(float *out,
                          const int *ids,
                          const float *table,
                          int num_tokens,
                          int hidden,
                          int v_start,
                          int v_end,
                          moe_k_ctx_t *ctx);
    /* d_table[Vl, C] += d_out[i] for each token in range, in token order. */
    void (*embedding_bwd)(float *d_table,
                          const float *d_out,
                          const int *ids,
                          int num_tokens,
                          int hidden,
                          int v_start,
                          int v_end,
                          moe_k_ctx_t *ctx);
    /*
     * Cross-entropy over logits split by vocabulary (Megatron's vocab-parallel cross-entropy):
     * 1. xent_local_max: local_max[M] = max of logits[M, Vl] rows. Engine: all-reduce MAX.
     * 2. xent_local_sumexp: sumexp[M] = sum_v exp(logits - global_max) (double accumulation), and
     *    target_logit[M] = logits[i, targets[i] - v_start] if in range else 0. Engine: all-reduce
     *    SUM of both.
     * 3. xent_loss: loss[M] = log(sumexp) + global_max - target_logit; 0 where targets[i] < 0
     *    (ignored token).
     * xent_bwd: d_logits[M, Vl] = d_loss * (softmax - onehot(target)) (overwrite), 0 on ignored
     * rows; d_loss is the gradient per token (1/num_valid_tokens for a mean).
     */
    void (*xent_local_max)(
        float *local_max, const float *logits, int num_tokens, int vocab_local, moe_k_ctx_t *ctx);
    void (*xent_local_sumexp)(float *sumexp,
                              float *target_logit,
                              const float *logits,
                              const int *targets,
                              const float *global_max,
                              int num_tokens,
                              int vocab_local,
                              int v_start,
                              moe_k_ctx_t *ctx);
    void (*xent_loss)(float *loss,
                      const float *global_max,
                      const float *global_sumexp,
                      const float *target_logit,
                      const int *targets,
                      int num_tokens,
                      moe_k_ctx_t *ctx);
    void (*xent_bwd)(float *d_logits,
                     const float *logits,
                     const int *targets,
                     const float *global_max,
                     const float *global_sumexp,
                     int num_tokens,
                     int vocab_local,
                     int v_start,
                     float d_loss,
                     moe_k_ctx_t *ctx);

    /* ---- Optimizer ------------------------------------------------------------------------- */
    /*
     * AdamW on fp32 master weights, as torch.optim.AdamW: g = grad * grad_scale (clipping);
     * m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; param *= 1 - lr*weight_decay (decoupled);
     * param -= (lr / (1 - b1^step)) * m / (sqrt(v) / sqrt(1 - b2^step) + eps). step >= 1.
     * param[n], m[n], v[n] updated in place; grad[n] is read only.
     */
    void (*adamw_step)(float *param,
                       float *m,
                       float *v,
                       const float *grad,
                       size_t n,
                       float lr,
                       float beta1,
                       float beta2,
                       float eps,
                       float weight_decay,
                       float grad_scale,
                       int step,
                       moe_k_ctx_t *ctx);

    /* ---- Precision emulation --------------------------------------------------------------- */
    /*
     * Quantise then dequantise: out[rows, cols] = dq(q(in)) with `format` under `recipe`, so a
     * GEMM on the outputs sees exactly the values the low-precision GEMM would. out may equal in.
     * Scaled recipes (fp32 arithmetic, saturating element casts, round-to-nearest-even):
     *  TENSORWISE / BLOCK_*: s = fmt_max / amax (amax of the tensor, 1x128 run or 128x128 tile;
     *    partial blocks at the edges cover what is there), out = decode(encode(in * s)) * (1 / s);
     *    amax == 0 gives zeros.
     *  MX (FP8 E4M3/E5M2 or FP4 E2M1): per 32 elements along cols, X = 2^(floor(log2(amax)) -
     *    emax_elem) (emax_elem 8, 15, 2), clamped to E8M0's [2^-127, 2^127]; out =
     *    decode(encode(in / X)) * X.
     *  NVFP4 (FP4 E2M1): s_t = 448 * 6 / amax(tensor); per 16 elements along cols,
     *    S = e4m3_sat(amax_block / 6 * s_t) (the stored block scale); out = decode(e2m1(in *
     *    (s_t / S))) * S / s_t (computed as (q * S) * (1 / s_t)); S == 0 gives zeros.
     * Non-finite input (NaN or Inf) in a scaling group makes that whole group NaN (for CAST,
     * BF16 keeps Inf and NaN element by element). Supported pairs: moe_k_qdq_supported().
     */
    void (*qdq)(float *out,
                const float *in,
                int rows,
                int cols,
                enum moe_k_qformat format,
                enum moe_k_qrecipe recipe,
                moe_k_ctx_t *ctx);
};

#ifdef __cplusplus
}
#endif

#endif /* MOE_KERNELS_KERNELS_H */
