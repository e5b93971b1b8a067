/*
 * Private to engine/: the engine's structures (dimensions, parameters and buckets, saved
 * activations, pipeline chunks and slots, the schedule, data) and the functions the engine's files
 * share. Public API: engine/engine.h.
 *
 * Dimension letters (per rank unless marked global):
 *   B micro-batch sequences, T sequence length (global), Tl = T/CP tokens of a sequence here (two
 *   chunks of c = T/(2 CP) at positions r c and (2 CP - 1 - r) c when CP > 1: Megatron's
 *   load-balanced causal split),
 *   M = B*Tl tokens of a micro-batch on this CP rank, Ms = M/TP tokens of the residual stream with
 *   sequence parallelism (M without), C hidden, V padded vocabulary (global), Vl = V/TP,
 *   Hq/Hkv query/key-value heads (global), Hql/Hkvl per TP rank, D head dim (GQA), Dqk/Dv the
 *   query-key and value dims of a head (D and D with GQA; dn + dr and dv with MLA), F dense FFN
 *   (global), Fl = F/TP, Fs shared-expert FFN, Fsl = Fs/TP, Fe expert FFN (global), Fel = Fe/ETP,
 *   G = 2 for gated (SwiGLU) FFNs, 1 for GELU (fc1 is G F wide), E experts (global), El = E/EP
 *   local experts, K top-k, R expert rows on this rank.
 *   MLA (multi-latent attention): Rq query latent (0 = queries not compressed), Rkv key-value
 *   latent, dn / dr / dv the per-head non-rotary query-key, rotary and value dims.
 */
#ifndef MOE_ENGINE_INTERNAL_H
#define MOE_ENGINE_INTERNAL_H

#include "engine/arena.h"
#include "engine/comm.h"
#include "engine/context.h"
#include "engine/engine.h"
#include "engine/groups.h"
#include "kernels/kernels.h"
#include "kernels/profile.h"
#include "model/config.h"
#include "model/layout.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- Dimensions ------------------------------------------------------------------------------ */

struct moe_eng_dims {
    int num_layers;   /* L (global) */
    int hidden;       /* C */
    int vocab;        /* V, padded (global) */
    int vocab_l;      /* Vl */
    int vocab0;       /* first vocabulary row held here */
    int heads;        /* Hq (global) */
    int kv_heads;     /* Hkv (global) */
    int head_dim;     /* D */
    int heads_l;      /* Hql */
    int kv_heads_l;   /* Hkvl */
    int ffn;          /* F (global) */
    int ffn_l;        /* Fl */
    int shared_ffn;   /* Fs (global; 0 = no shared expert) */
    int shared_ffn_l; /* Fsl */
    int expert_ffn;   /* Fe (global) */
    int expert_ffn_l; /* Fel */
    int experts;      /* E (global; 0 = dense model) */
    int experts_l;    /* El */
    int expert0;      /* first expert held here */
    int topk;         /* K */
    int mbs;          /* B */
    int seq;          /* T */
    int seq_l;        /* Tl */
    /* Context parallelism with Megatron's load-balanced causal split: with CP > 1 each sequence
     * is cut into 2 CP chunks of c = T / (2 CP) tokens and CP rank r holds chunks r and
     * 2 CP - 1 - r, in that order (Tl = 2c), so every rank has the same causal attention work.
     * With CP = 1: one chunk of T tokens at position 0. */
    int num_cp_chunks;   /* chunks of a sequence held here: 2 (CP > 1) or 1 */
    int cp_chunk_len;    /* c (T with CP = 1) */
    int cp_chunk_pos[2]; /* first global position of each held chunk */
    int tokens;          /* M */
    int tokens_sp;       /* Ms */
    int rows_send;       /* Ms*K: permuted rows leaving this rank per MoE layer (upper bound) */
    int rows_recv;       /* rows arriving from the EP group (buffer bound) */
    int rows_exp;        /* rows this rank's experts process after the ETP gather (buffer bound) */
    int capacity;        /* per-expert capacity from the capacity factor; 0 = dropless */
    /* Hierarchical dispatcher (0 when flat): nodes the EP group spans, EP ranks per node, token
     * copies a proxy may receive (one per source node and token), and the rows it may forward. */
    int hier_nodes;
    int hier_per_node;
    int hier_copies;
    int hier_rows;
    bool ep_overlap; /* --overlap-moe-expert-parallel-comm: counts kept per half micro-batch */
    int ag_group;    /* allgather dispatcher: ETP x EP ranks gathering their tokens (0 = none) */
    int tp, cp, ep, etp;
    bool sp;      /* sequence parallel (tp > 1) */
    int qkv_cols; /* (Hql + 2 Hkvl) D (GQA) */
    int qk_dim;   /* Dqk */
    int v_dim;    /* Dv */
    int glu;      /* G: 2 (SwiGLU) or 1 (GELU) */
    /* Architecture options (engine/layers.c, engine/mla.c) */
    bool is_mla;
    int q_lora, kv_lora;  /* Rq, Rkv */
    int qk_nope, qk_rope; /* dn, dr */
    bool has_qk_norm;     /* per-head RMSNorm on q and k (Qwen3) */
    bool has_bias;        /* linear biases (GPT-OSS) */
    bool has_sinks;       /* learned attention sinks per head (GPT-OSS) */
    int window;           /* sliding window of windowed layers (0 = none) */
    int num_mtp;          /* D MTP layers (engine/mtp.c), layer indices L .. L + D - 1 */
    int num_layers_all;   /* L + D: the size of every per-layer array */
};

/* ---- Parameters ------------------------------------------------------------------------------ */

/* How a parameter's gradient is reduced. */
enum moe_eng_pkind {
    MOE_ENG_PK_DENSE = 0,   /* sharded or unique per TP rank; reduced over DP x CP */
    MOE_ENG_PK_REPL = 1,    /* replicated over TP (norms, router); TP-summed when partial */
    MOE_ENG_PK_EXPERT = 2,  /* routed experts; reduced over EDP */
    MOE_ENG_PK_REPL_TP = 3, /* replicated over TP with gradients partial over TP even without
                               sequence parallelism (q/k norms over this rank's heads, MLA's down
                               projections and latent norms): always TP-summed */
    MOE_ENG_NUM_PKINDS = 4,
};

struct moe_eng_tensor {
    float *w; /* weights [numel] (forward copy) */
    float *g; /* gradient [numel] */
    size_t numel;
    int param; /* index in the registry, -1 when absent */
};

struct moe_eng_param {
    char name[40];
    float *w, *g;
    size_t numel;
    int layer; /* -1 embedding / head */
    int bucket;
    bool no_decay;
};

/* A group of parameters reduced together (Megatron's grad bucket), sharded by the dist. opt. */
struct moe_eng_bucket {
    enum moe_eng_pkind kind;
    moe_comm_t *group;     /* reduction group: dpcp or edp */
    float *w, *g;          /* [padded] contiguous in the weight / grad blocks */
    size_t numel;          /* parameters in the bucket */
    size_t padded;         /* numel rounded up to group size x 16 */
    size_t shard;          /* padded / group size (or padded when not distributed) */
    size_t shard_off;      /* offset of this rank's shard (0 when not distributed) */
    float *master, *m, *v; /* [shard] fp32 master weights and Adam moments (host pool with
                              optimizer CPU offload) */
    float *g_host;         /* [shard] optimizer CPU offload: the gradient shard copied to the host
                              for AdamW there; NULL without offload */
    int first_param;
    int num_params;
    int layer;          /* -1 embedding/head */
    int pending;        /* micro-batch contributions left before the bucket is ready */
    bool tp_partial;    /* gradients are partial sums over TP (sequence-parallel REPL) */
    bool is_norm_owner; /* counted in the gradient norm on this rank */
    bool is_tied_copy;  /* output-layer copy of a tied embedding on the last stage
                         */
    bool no_decay;
    struct moe_comm_req grad_req;  /* overlapped gradient reduction */
    struct moe_comm_req param_req; /* overlapped parameter all-gather */
};

/* Weights of one decoder layer (views into the registry). */
struct moe_eng_layer_w {
    int idx;
    bool is_moe;
    bool is_windowed;                /* sliding-window attention (d.window keys) */
    struct moe_eng_tensor attn_norm; /* [C] */
    struct moe_eng_tensor qkv;       /* GQA [(Hql + 2 Hkvl) D, C] column-parallel */
    struct moe_eng_tensor proj;      /* [C, Hql Dv] row-parallel */
    struct moe_eng_tensor mlp_norm;  /* [C] */
    struct moe_eng_tensor fc1;       /* dense [G Fl, C] (gate rows, then up rows) */
    struct moe_eng_tensor fc2;       /* dense [C, Fl] */
    struct moe_eng_tensor router;    /* [E, C] replicated */
    struct moe_eng_tensor e_fc1;     /* [El, G Fel, C] */
    struct moe_eng_tensor e_fc2;     /* [El, C, Fel] */
    struct moe_eng_tensor s_fc1;     /* shared expert [G Fsl, C] */
    struct moe_eng_tensor s_fc2;     /* shared expert [C, Fsl] */
    /* Options (numel 0 when the model has none) */
    struct moe_eng_tensor q_norm, k_norm; /* [D] per-head q/k RMSNorm, replicated */
    struct moe_eng_tensor sinks;          /* [Hql] attention sinks */
    struct moe_eng_tensor qkv_bias;       /* [(Hql + 2 Hkvl) D] */
    struct moe_eng_tensor proj_bias;      /* [C] replicated, added after the reduction */
    struct moe_eng_tensor fc1_bias;       /* [G Fl] */
    struct moe_eng_tensor fc2_bias;       /* [C] replicated */
    struct moe_eng_tensor s_fc1_bias;     /* [G Fsl] */
    struct moe_eng_tensor s_fc2_bias;     /* [C] replicated */
    struct moe_eng_tensor router_bias;    /* [E] replicated */
    struct moe_eng_tensor e_fc1_bias;     /* [El, G Fel] */
    struct moe_eng_tensor e_fc2_bias;     /* [El, C] replicated over ETP (added on etp rank 0) */
    /* MTP layer (engine/mtp.c; idx >= L): norms of the shifted tokens' embedding and of the
     * previous depth's hidden state, their projection, the final norm before the shared head */
    struct moe_eng_tensor mtp_enorm, mtp_hnorm; /* [C] */
    struct moe_eng_tensor mtp_eh_proj;          /* [C/TP, 2 C] column-parallel */
    struct moe_eng_tensor mtp_norm;             /* [C] */
    /* MLA (engine/mla.c) */
    struct moe_eng_tensor q_down;   /* [Rq, C] replicated over TP */
    struct moe_eng_tensor q_lnorm;  /* [Rq] */
    struct moe_eng_tensor q_up;     /* [Hql Dqk, Rq] column-parallel; [Hql Dqk, C] when Rq = 0 */
    struct moe_eng_tensor kv_down;  /* [Rkv + dr, C] replicated over TP */
    struct moe_eng_tensor kv_lnorm; /* [Rkv] */
    struct moe_eng_tensor kv_up;    /* [Hql (dn + dv), Rkv] column-parallel */
    float *expert_bias;             /* [E] aux-loss-free bias (not a parameter), or NULL */
};

/* ---- Saved activations ----------------------------------------------------------------------- */

/* Where a saved tensor lives. */
enum moe_eng_store {
    MOE_ENG_STORE_SLOT = 0,    /* kept in the micro-batch's activation slot */
    MOE_ENG_STORE_SCRATCH = 1, /* recomputed in backward (shared scratch) */
    MOE_ENG_STORE_OFFLOAD = 2, /* staged, copied to the host pool, copied back for backward */
};

/* Saved tensors of one layer for one micro-batch (NULL when the layer kind has none). */
struct moe_eng_layer_act {
    float *x;               /* [Ms, C] layer input (residual stream) */
    float *rstd1;           /* [Ms] */
    float *h1;              /* [Ms, C] attention-norm output */
    float *q;               /* [M, Hql Dqk] after RoPE (MLA: [q_nope, q_rope] per head) */
    float *k;               /* [M, Hkvl Dqk] after RoPE */
    float *v;               /* [M, Hkvl Dv] */
    float *q_raw, *k_raw;   /* q/k norm: [M, Hql D], [M, Hkvl D] before the norm */
    float *q_rstd, *k_rstd; /* q/k norm: [M Hql], [M Hkvl] */
    float *cq, *cq_n;       /* MLA: [M, Rq] query latent before / after its norm */
    float *cq_rstd;         /* MLA: [M] */
    float *ckv, *ckv_n;     /* MLA: [M, Rkv] key-value latent before / after its norm */
    float *ckv_rstd;        /* MLA: [M] */
    float *kpe;             /* MLA: [M, dr] shared rotary key before RoPE */
    float *o;               /* [M, Hql Dv] attention output */
    float *lse;             /* [B, Hql, Tl]; with CP > 1 per chunk: [B, 2, Hql, c] */
    float *x2;              /* [Ms, C] residual after attention */
    float *rstd2;           /* [Ms] */
    float *h2;              /* [Ms, C] MLP-norm output */
    float *fc1;             /* [M, G Fl] dense, or [M, G Fsl] shared expert */
    float *act;             /* [M, Fl] / [M, Fsl] */
    float *logits;          /* [Ms, E] router logits */
    float *scores;          /* [Ms, E] */
    float *topk_w;          /* [Ms, K] */
    int *topk_idx;          /* [Ms, K] */
    int *slot_to_row;       /* [Ms K] */
    int *row_to_slot;       /* [Ms K] */
    int *tokens_per_expert; /* [E] kept rows per expert (this rank's tokens) */
    /* Host copies of the three count arrays (tokens_per_expert, recv_counts, gath_counts) the
     * dispatch plan is computed from (hc_*): the same pointers on the CPU backend, host staging on
     * the CUDA backend, refreshed after every counts exchange (moe_block.c). */
    int *hc_tpe;
    int *hc_recv;
    int *hc_gath;
    int *counts_mb;   /* [E] routed slots per expert over the micro-batch (aux loss)
                       */
    int *recv_counts; /* [EP, El] rows received per (source, local expert) */
    int *gath_counts; /* [ETP, EP, El] rows after the ETP gather */
    float *xe;        /* [R, C] expert input rows, expert-major */
    float *e_fc1;     /* [R, G Fel] */
    float *e_act;     /* [R, Fel] */
    float *y_rows;    /* [Ms K, C] expert outputs back at the source (permuted order); hierarchical:
                         [hier_rows, C] expert outputs back at the proxy */
    /* Allgather dispatcher only (NULL otherwise; G = ETP EP Ms tokens of the gathered group). */
    float *ag_w;    /* [G, K] the group's top-k weights */
    int *ag_s2r;    /* [G K] slot -> row among this rank's expert rows, -1 for other ranks' */
    int *ag_counts; /* [El] rows per local expert */
    /* Hierarchical dispatcher only (NULL when flat). */
    int *h_sent; /* [nodes] token copies sent to each node's proxy */
    int *h_recv; /* [nodes] copies this proxy received from each node */
    float *h_w;  /* [hier_copies, K] top-k weights of each received copy */
    int *h_s2r;  /* [hier_copies * K] copy slot -> forwarded row, -1 if not on this node */
    int *h_r2s;  /* [hier_rows] forwarded row -> copy slot */
    int *h_cnt;  /* [per_node, El] rows forwarded to each local rank's experts */
    void *stage; /* start of this layer's offloaded tensors in the staging area */
    float *host; /* host-pool copy of the offloaded tensors (NULL = none) */
    size_t offload_bytes;
};

/* Which modules a layer recomputes (selective) or whether it is part of a full-recompute unit. */
struct moe_eng_rc {
    unsigned modules;   /* MOE_RC_* recomputed in backward */
    unsigned offload;   /* MOE_OFF_* offloaded */
    bool is_full;       /* layer recomputed entirely (full recompute) */
    bool is_unit_start; /* first layer of a full-recompute unit (its input is kept) */
    int unit_len;       /* layers in the unit starting here */
};

/* ---- Pipeline -------------------------------------------------------------------------------- */

/* Saved tensors of one MTP depth for one micro-batch (engine/mtp.c). */
struct moe_eng_mtp_act {
    struct moe_eng_layer_act layer; /* its transformer layer (layer.x: the projection's output) */
    float *emb;                     /* [Ms, C] embedding of the shifted tokens */
    float *rstd_e, *rstd_h;         /* [Ms] enorm / hnorm statistics */
    float *cat;                     /* [Ms, 2 C] [enorm(emb), hnorm(h_prev)] (eh_proj input) */
    float *out;                     /* [Ms, C] transformer layer output */
    float *rstd_o;                  /* [Ms] final norm statistics */
    float *h;  /* [Ms, C] final norm output (the head's and next depth's input) */
    float *dh; /* [Ms, C] the MTP head's gradient of h */
};

struct moe_eng_slot {
    float *x0;      /* [Ms, C] chunk input (received, or the embedding output) */
    float *out;     /* [Ms, C] chunk output (sent to the next chunk, or the head input) */
    float *dout;    /* [Ms, C] loss chunk: gradient of the output from the fused head */
    float *dx_send; /* [Ms, C] gradient of the input, sent to the previous chunk */
    struct moe_comm_req out_req;
    struct moe_comm_req dx_req;
    struct moe_eng_layer_act *acts; /* [layers of the chunk] */
    /* Loss chunk with MTP layers: the final norm's output and statistics (the main head's and the
     * first MTP depth's input); dout then holds the main head's gradient of hf. */
    float *hf;                   /* [Ms, C] */
    float *rstd_f;               /* [Ms] */
    struct moe_eng_mtp_act *mtp; /* [D] (NULL without MTP) */
};

/* A CUDA graph of one dense layer's forward for one activation slot (--cuda-graphs). */
struct moe_eng_graph_slot {
    struct CUgraphExec_st *exec; /* instantiated capture, NULL before the first forward */
    size_t temp_used;            /* temp arena position the capture started from (must match) */
    bool has_failed;             /* not capturable: run eagerly from then on */
};

struct moe_eng_chunk {
    int c; /* global chunk index v*PP + p */
    int v; /* local virtual stage */
    int first_layer;
    int num_layers;
    int num_mtp; /* MTP layers after the decoder layers (the loss chunk only) */
    bool has_embedding;
    bool has_loss;
    int prev_pp; /* pp-group rank holding chunk c-1, -1 when c == 0 */
    int next_pp; /* pp-group rank holding chunk c+1, -1 for the last chunk */
    int num_slots;
    int slots_cap; /* slot structs (and graph rows) allocated: num_slots or the shared pool's */
    struct moe_eng_slot *slots;
    int *mb_slot;                      /* [num_microbatches] slot a micro-batch uses */
    int *mb_slot_shared;               /* [num_microbatches] its slot in the rank's shared pool
                                          (moe_eng.share_slots) */
    size_t slot_act_bytes;             /* activation bytes of one of its own slots (sizing pass) */
    size_t slot_pipe_bytes;            /* and its pipeline send buffers (each chunk has its own) */
    struct moe_eng_rc *rc;             /* [num_layers] */
    struct moe_eng_rc mtp_rc;          /* the MTP layers' (selective recompute and offload only) */
    struct moe_eng_graph_slot *graphs; /* [num_slots, num_layers] (NULL without --cuda-graphs) */
};

/* Global index of a chunk's i-th layer, i < num_layers + num_mtp (MTP layers follow the decoder
 * layers: indices L, L + 1, ...). */
static inline int moe_eng_chunk_layer(int num_decoder_layers, const struct moe_eng_chunk *ch, int i)
{
    return i < ch->num_layers ? ch->first_layer + i : num_decoder_layers + (i - ch->num_layers);
}

struct moe_eng_op {
    bool is_backward;
    int v;  /* local chunk */
    int mb; /* micro-batch */
};

/* ---- Data ------------------------------------------------------------------------------------ */

struct moe_eng_data {
    enum moe_eng_data_kind kind;
    unsigned char *text; /* corpus bytes (text kind) */
    size_t text_len;
    size_t text_bytes_alloc;
    uint64_t seed;
    uint64_t next_seq; /* sequences consumed (the data position) */
    int vocab;         /* token ids are < vocab */
    int *succ;         /* synthetic: [vocab, 4] successor table */
};

/* ---- Engine ---------------------------------------------------------------------------------- */

enum moe_eng_mem_cat {
    MOE_ENG_MEM_WEIGHTS = 0,
    MOE_ENG_MEM_GRADS = 1,
    MOE_ENG_MEM_OPTIMIZER = 2,
    MOE_ENG_MEM_ACTIVATIONS = 3,
    MOE_ENG_MEM_BUFFERS = 4,
    MOE_ENG_MEM_HOST = 5,    /* activation offload pool (and the offloaded optimizer state) */
    MOE_ENG_MEM_STAGING = 6, /* CUDA: host copies of device data the engine reads or writes on the
                                host (token ids, counts, losses) and host temporaries; empty on
                                the CPU backend, where those are the engine memory itself */
    MOE_ENG_NUM_MEM = 7,
};

/* What a device scalar slot holds (see moe_eng_scal_take). */
enum moe_eng_scal_kind {
    MOE_ENG_SCAL_ROUTER_LOSS = 0, /* an aux or z loss: summed into aux_sum in slot order */
    MOE_ENG_SCAL_SUM_X2 = 1,      /* CUDA: sum of a layer's attention residual x2 (finite check) */
    MOE_ENG_SCAL_SUM_OUT = 2,     /* CUDA: sum of a layer's output (finite check) */
};

struct moe_eng_pool {
    void *block;
    size_t bytes;
    struct moe_eng_arena arena;
};

/* Statistics gathered over a run (reported in run.json). */
/* The host speed probe's GEMM: m = n = k (moefold-bench's 512^3 row; engine/engine.c). */
#define MOE_ENG_PROBE_DIM 512

struct moe_bench_gemm_sets;

struct moe_eng_stats {
    int num_steps;
    int cap_steps;
    double *step_s;        /* [cap_steps] */
    double *loss;          /* [cap_steps] */
    double *phase_sum;     /* [MOE_ENG_NUM_SLOTS] summed over measured steps */
    double *wait_sum;      /* [MOE_ENG_NUM_SLOTS] their wait shares (engine/timing.c) */
    int num_measured;      /* steps in phase_sum (the first step is warm-up when steps
                              > 1) */
    long *expert_tokens;   /* [L, E] tokens per expert summed over steps (stage-reduced) */
    int *ep_rows;          /* [L, cap_ep_rows] this rank's expert rows per MoE forward (a layer
                              and micro-batch: a synchronising exchange), in call order */
    int *num_ep_rows;      /* [L] entries of ep_rows used */
    int cap_ep_rows;       /* steps x micro-batches */
    double bytes_dropped;  /* token copies dropped by the capacity factor (slots) */
    double experts_active; /* moe_eng.experts_active / _called summed over measured steps */
    double experts_called;
    double offload_s;      /* time spent copying to/from the host pool */
    double probe_us;       /* host speed probe (opts.no_host_probe): summed time per GEMM call */
    double probe_spread;   /* their slowest rank's time over the ranks' mean, minus 1, summed */
    int probe_calls;       /* probes summed in probe_us and probe_spread */
    double *probe_each_us; /* [cap_steps] each probe's time, the mean over the ranks (the same on
                              every rank) */
    /* --profile-kernels (engine/engine.c): kernel ops' wall time and calls by phase slot,
     * [MOE_ENG_NUM_SLOTS][MOE_K_NUM_OPS], summed over measured steps; NULL when off. */
    double *kernel_s;
    long *kernel_calls;
};

/* One step's span on the reference clock, kept until its collectives' records are matched. */
struct moe_eng_span {
    double t0, t1;
    bool is_measured; /* its waits go into stats.wait_sum */
    bool is_traced;   /* and into tl_waits */
};

struct moe_eng {
    struct moe_eng_ctx ctx;
    struct moe_plan plan;       /* with the resolved layout */
    struct moe_options planned; /* the plan's options as given (plan.options is what runs) */
    unsigned fallbacks;         /* MOE_ENG_FB_*: plan options run otherwise (run.json says how) */
    struct moe_eng_run_opts opts;
    struct moe_eng_groups groups;
    struct moe_eng_dims d;
    const struct moe_k_ops *k; /* the kernel table (the profiling one with --profile-kernels) */
    moe_k_ctx_t *kc;
    struct moe_k_profile *kprof; /* --profile-kernels: the wrapping table and this step's sums */
    /* --optimizer-cpu-offload on a device backend: the CPU table and its context (owned) for
     * AdamW on the host-resident master and moments; NULL otherwise (the CPU backend uses k). */
    const struct moe_k_ops *host_k;
    moe_k_ctx_t *host_kc;
#define MOE_ENG_HOST_ADAMW_MAX_THREADS 32
    int host_threads; /* threads of that AdamW: the host's cores over its ranks (at least 1) */

    struct moe_eng_pool mem[MOE_ENG_NUM_MEM];
    struct moe_eng_arena temp; /* per-op temporaries (in buffers), reset per step */
    float *rc_scratch;         /* recompute scratch (start of the region) */
    size_t rc_scratch_bytes;
    float *staging; /* offload staging (one layer) */
    size_t staging_bytes;
    /* Parts of the buffers category (bytes, aligned; report.c's buffers_detail_gib): */
    size_t bufs_pipeline_bytes; /* chunk outputs, input gradients sent back, gradient streams */
    size_t bufs_other_bytes;    /* token ids/targets, position and K/V-order tables, statistics,
                                   scalar slots, bucket sums of squares */
    size_t temp_bytes;          /* the per-op temp region (aligned) */
    size_t temp_dispatch_bytes; /* of it: dispatch buffers live at its peak */

    /* Parameters */
    struct moe_eng_param *params;
    int num_params;
    int cap_params;
    struct moe_eng_bucket *buckets;
    int num_buckets;
    int cap_buckets;
    struct moe_eng_layer_w *layers;   /* [L], valid where held */
    struct moe_eng_tensor embedding;  /* [Vl, C] (chunk 0) */
    struct moe_eng_tensor final_norm; /* [C] (loss chunk) */
    struct moe_eng_tensor output;     /* [Vl, C] (loss chunk); shares embedding when tied here */
    bool has_tied_copy;               /* output is a tied copy (embedding on another stage) */
    /* The table MTP embeds the shifted tokens with: the embedding on its stage, the tied output
     * copy, or an embedding copy on the loss stage kept equal through the embedding group. */
    struct moe_eng_tensor mtp_embedding;

    /* Pipeline */
    struct moe_eng_chunk *chunks; /* [vpp] */
    int num_chunks_local;
    /* Interleaved schedules: the chunks' saved activations in one pool of num_shared_slots slots
     * (the most chunk-micro-batches live at once), slot g of every chunk over the same memory,
     * when that is smaller than each chunk's own slots (engine.c, allocate_memory). */
    bool share_slots;
    int num_shared_slots;
    struct moe_eng_op *ops;
    int num_ops;

    /* Per-step buffers */
    int *ids;         /* [m, M] token ids of every micro-batch */
    int *targets;     /* [m, M] */
    int *mtp_ids;     /* [D, m, M] MTP depth k's input ids: the token k positions ahead (0 past
                         the sequence); NULL without MTP here */
    int *mtp_targets; /* [D, m, M] the token k + 1 ahead, -1 past the sequence */
    int *h_mtp_ids;   /* host copies (CUDA) */
    int *h_mtp_targets;
    int *positions;      /* [M] */
    float *rope_cos_sin; /* [M, dr/2, 2] RoPE's cos/sin per token and pair (dr: qk_rope or D) */
    int *cp_chunk_rows;  /* [2 CP B] c each (K/V reorder; CP > 1) */
    int *cp_chunk_order; /* [2 CP B] gathered chunk at each (sequence, position-chunk) */
    float *grad_stream;  /* [Ms, C] gradient flowing through a chunk's backward */
    float *grad_tmp;     /* [Ms, C] */
    long *step_counts;   /* [L, E] routed slots per expert this step (before drop) */
    double loss_sum;     /* cross-entropy summed over this rank's owned tokens this step */
    double mtp_sum;      /* MTP losses (scaled by the factor) this step, owner-counted */
    double aux_sum;      /* router losses this step (owner-counted) */
    double dropped;      /* dropped slots this step */
    /* This step's grouped expert forwards (not recomputes): local experts that held rows,
     * summed over the calls, and the local experts those calls had (engine/experts.c). */
    long experts_active;
    long experts_called;
    int step;          /* steps done */
    double attn_flops; /* attention kernel FLOPs launched since creation (score matrices) */
    double attn_pairs; /* causal query-key pairs among them (per head) */
    int global_mbs;    /* micro-batches in the global batch, gbs / mbs (router-loss mean) */

    struct moe_eng_data data;
    struct moe_eng_stats stats;

    /* Phase timing beyond the clock (engine/timing.c) */
    struct moe_comm_log clog;   /* arrival log of every group's collectives */
    double *match_scratch;      /* [clog.cap] arrival times exchanged when they are matched */
    struct moe_eng_span *spans; /* [cap_spans] the steps whose records await the matching */
    int num_spans, cap_spans;   /* cap_spans: steps the log holds (the same on every rank) */
    double clock_offset;        /* this rank's clock minus rank 0's, seconds */
    bool has_wait_log;          /* host-synchronous backend: wait shares are measured */
    bool has_wait_mismatch;     /* a step's records did not match (a full log): waits incomplete */
    struct moe_eng_tl tl;       /* the traced step's intervals */
    struct moe_eng_tl tl_waits; /* its collectives' wait shares (reference clock) */
    double trace_t0;            /* the traced step's start on the reference clock */
    double trace_step_s;        /* its length */
    bool is_recomputing;        /* forward is a recompute: no statistics, no loss accumulation */
    char nan_origin[160];       /* first non-finite layer output of the step ("" = none) */
    int nan_priority; /* 0: names a non-finite weight, 1: a block output (see optimizer.c) */
    bool is_hierarchical;
    bool is_allgather;  /* Megatron's allgather token dispatcher (engine/allgather.c) */
    bool is_ep_overlap; /* expert dispatch/combine of one half behind the other's compute */
    int tag_base_fwd;
    int tag_base_bwd;

    /* Device side (CUDA backend; on the CPU backend the host views alias engine memory). */
    bool is_device;                         /* engine memory is device memory (ctx.dev != NULL) */
    struct moe_bench_gemm_sets *probe_sets; /* the host probe's operands (engine.c), or NULL */
    struct moe_eng_arena *htemp; /* host temporaries: &temp on the CPU, &htemp_arena on CUDA */
    struct moe_eng_arena htemp_arena;
    int *h_ids;             /* [m, M] host copies of ids / targets (filled by data.c) */
    int *h_targets;         /* [m, M] */
    float *scal;            /* [cap_scal] scalars kernels write in a step (engine memory) */
    float *h_scal;          /* [cap_scal] host copy */
    int *scal_kind;         /* [cap_scal] enum moe_eng_scal_kind (heap) */
    int *scal_layer;        /* [cap_scal] decoder layer of the slot (heap) */
    int *scal_seq;          /* [cap_scal] check sequence number of the slot (heap) */
    int num_scal;           /* slots taken this step */
    int cap_scal;           /* slots a step may take */
    int check_seq;          /* non-finite checks so far this step (layer outputs, loss head) */
    int nan_seq;            /* check_seq of the check that set nan_origin */
    float *bucket_ss;       /* [num_buckets] sum of squares of each reduced shard */
    float *h_bucket_ss;     /* [num_buckets] host copy */
    float *init_host;       /* CUDA, during creation only: host image of the weights block */
    double device_used_max; /* CUDA: largest total - free seen at step ends, bytes */
};

/* ---- model.c: dimensions, parameters, buckets, initialisation -------------------------------- */

MOE_NODISCARD enum moe_status moe_eng_dims_init(struct moe_eng *e, struct moe_diag *diag);
/* Register parameters and carve weights/grads/optimizer (sizing or real arenas). */
void moe_eng_params_carve(struct moe_eng *e);
/* Deterministic, layout-independent initial values (and master copies). MOE_ERR_NOMEM. */
MOE_NODISCARD enum moe_status moe_eng_params_init(struct moe_eng *e, struct moe_diag *diag);

/* ---- activations.c: saved-activation layout, slots, recompute/offload placement ---------- */

/* RoPE's base (Megatron-LM --rotary-base default): the angle table rope_cos_sin is made with it. */
#define MOE_ENG_ROPE_BASE 10000.0f

void moe_eng_acts_carve(struct moe_eng *e);
/* ---- What ran (engine/engine.c) -------------------------------------------------------------- */

enum { MOE_ENG_MAX_DIFFS = 16 };
/* Plan options the engine runs otherwise where it lacks them (moe_eng_ran_options says how). */
enum {
    MOE_ENG_FB_HIER_ETP = 1u << 0,    /* hierarchical dispatcher with etp > 1: flat all-to-all */
    MOE_ENG_FB_HIER_DEVICE = 1u << 1, /* hierarchical dispatcher on CUDA: flat all-to-all */
    MOE_ENG_FB_EP_OVERLAP = 1u << 2,  /* EP overlap beside hierarchical, allgather, etp > 1 or a
                                         capacity factor: not overlapped */
    MOE_ENG_FB_HIER_EP1 = 1u << 3,    /* hierarchical dispatcher at EP 1: the flat path's local
                                         permute and sort (nothing to exchange) */
};
/* The options the engine runs (*ran: the plan's with what it does otherwise) and one line per
 * difference from the plan (diffs[*num], each a sentence naming the option). */
void moe_eng_ran_options(const struct moe_eng *e,
                         struct moe_options *ran,
                         char diffs[MOE_ENG_MAX_DIFFS][160],
                         int *num);

/* ---- Phase timing (engine/timing.c) ---------------------------------------------------------- */

/* The arrival log of every group (host backends), the clock offset to rank 0, the traced step's
 * record (opts.trace_step > 0). Collective. MOE_ERR_NOMEM. */
MOE_NODISCARD enum moe_status moe_eng_timing_create(struct moe_eng *e, struct moe_diag *diag);
void moe_eng_timing_destroy(struct moe_eng *e);
/* Before a step's timing: note its start, start the trace when it is the traced step. */
void moe_eng_timing_begin_step(struct moe_eng *e);
/* After a step's timing: note its span (measured or not), stop the trace. Its collectives'
 * arrivals are matched later (moe_eng_timing_flush), or now (collective) when the log holds
 * cap_spans steps. */
void moe_eng_timing_end_step(struct moe_eng *e, bool is_measured);
/* Match the logged collectives' arrivals over every group and add their wait shares to
 * stats.wait_sum (measured steps) and to the traced step's waits. Collective; a no-op without
 * pending steps. Called by the waits' readers (write_run, the trace), after training. */
void moe_eng_timing_flush(struct moe_eng *e);
/* The traced step of every rank on rank 0 (collective): *all (malloc, rank 0; records of rank 0,
 * then 1, ...), *counts (malloc, rank 0: records per rank),
 * *step_s its length. False when a rank's record overflowed. Records: MOE_TRACE_RECORD_FIELDS
 * doubles each (topologies/trace_file.h). */
bool moe_eng_trace_gather(struct moe_eng *e, double **all, int **counts, double *step_s);
/* Bytes of per-op temporaries the step needs (sizing); *dispatch_bytes = the part of them that is
 * dispatch buffers (expert-row sized) live at the peak. */
size_t moe_eng_temp_bytes(const struct moe_eng *e, size_t *dispatch_bytes);

/* ---- layers.c: decoder layer forward/backward ------------------------------------------------ */

void moe_eng_layer_fwd(struct moe_eng *e,
                       const struct moe_eng_layer_w *w,
                       struct moe_eng_layer_act *a,
                       const struct moe_eng_rc *rc,
                       float *out);
/* The same forward through a CUDA graph (g: the graph of this layer and activation slot): the
 * first call captures and instantiates it, later calls replay it. Only for layers that
 * moe_eng_layer_is_graphable accepts; falls back to moe_eng_layer_fwd when the capture fails or
 * the temporaries start elsewhere than at capture. */
void moe_eng_layer_fwd_graphed(struct moe_eng *e,
                               const struct moe_eng_layer_w *w,
                               struct moe_eng_layer_act *a,
                               const struct moe_eng_rc *rc,
                               float *out,
                               struct moe_eng_graph_slot *g);
/* True when the forward of layer w runs without host synchronisation or collectives: a dense
 * (non-MoE) layer with tp = cp = 1 on a real CUDA device. */
bool moe_eng_layer_is_graphable(const struct moe_eng *e, const struct moe_eng_layer_w *w);
/* d: [Ms, C] gradient of the layer output on entry, of its input on return (in place). */
void moe_eng_layer_bwd(struct moe_eng *e,
                       const struct moe_eng_layer_w *w,
                       struct moe_eng_layer_act *a,
                       const struct moe_eng_rc *rc,
                       float *d);
/* A dense MLP's tensors (the layer's MLP or its shared expert); biases have numel 0 when absent. */
struct moe_eng_mlp_w {
    const struct moe_eng_tensor *fc1, *fc2, *fc1_bias, *fc2_bias;
    int ffn_l; /* Fl or Fsl */
};
struct moe_eng_mlp_w moe_eng_dense_mlp(const struct moe_eng *e, const struct moe_eng_layer_w *w);
struct moe_eng_mlp_w moe_eng_shared_mlp(const struct moe_eng *e, const struct moe_eng_layer_w *w);

/* Dense MLP: hin [Ms, C] -> out [Ms, C]. */
void moe_eng_mlp_fwd(struct moe_eng *e,
                     const struct moe_eng_mlp_w *m,
                     const float *hin,
                     float *fc1_out,
                     float *act,
                     float *out,
                     enum moe_phase phase);
/* dh (overwrite or accumulate) from dout; recomputes fc1_out/act first when asked. */
void moe_eng_mlp_bwd(struct moe_eng *e,
                     const struct moe_eng_mlp_w *m,
                     const float *hin,
                     float *fc1_out,
                     float *act,
                     bool recompute,
                     const float *dout,
                     float *dh,
                     bool accumulate,
                     enum moe_phase phase);

/* Every tensor of a layer (weights view), in a fixed order; returns the count (at most
 * MOE_ENG_LAYER_TENSORS). */
enum { MOE_ENG_LAYER_TENSORS = 40 };
int moe_eng_layer_tensors(struct moe_eng_layer_w *w, struct moe_eng_tensor **out);

/* ---- attention.c / mla.c: the attention block ----------------------------------------------- */

/* Workspace bytes of one attention call (the largest query chunk against a whole sequence). */
size_t moe_eng_attn_ws_bytes(const struct moe_eng *e);

/* From a->x: attention norm, projections, core attention, output projection, residual (a->x2) and
 * the pre-MLP norm (a->h2). */
void moe_eng_attention_fwd(struct moe_eng *e,
                           const struct moe_eng_layer_w *w,
                           struct moe_eng_layer_act *a);
/* d [Ms, C]: gradient of x2 on entry; gradient of x on return. */
void moe_eng_attention_bwd(struct moe_eng *e,
                           const struct moe_eng_layer_w *w,
                           struct moe_eng_layer_act *a,
                           const struct moe_eng_rc *rc,
                           float *d);
/* MLA: latents and per-head q, k, v from a->h1. */
void moe_eng_mla_fwd(struct moe_eng *e,
                     const struct moe_eng_layer_w *w,
                     struct moe_eng_layer_act *a);
/* MLA: the per-head q, k, v from the saved latents (the mla_up_proj recompute). */
void moe_eng_mla_heads_fwd(struct moe_eng *e,
                           const struct moe_eng_layer_w *w,
                           struct moe_eng_layer_act *a);
/* MLA: dh1 [Ms, C] (overwrite, complete) from the heads' gradients (dq is destroyed). */
void moe_eng_mla_bwd(struct moe_eng *e,
                     const struct moe_eng_layer_w *w,
                     struct moe_eng_layer_act *a,
                     float *dq,
                     const float *dk,
                     const float *dv,
                     float *dh1);

/* ---- moe_block.c: router, dispatch, experts, combine ----------------------------------------- */

void moe_eng_moe_fwd(struct moe_eng *e,
                     const struct moe_eng_layer_w *w,
                     struct moe_eng_layer_act *a,
                     const float *h,
                     float *out);
/* dh[Ms, C] (accumulate) from dout[Ms, C] through the routed experts and router. */
void moe_eng_moe_bwd(struct moe_eng *e,
                     const struct moe_eng_layer_w *w,
                     struct moe_eng_layer_act *a,
                     const float *h,
                     const float *dout,
                     float *dh);

/* ---- allgather.c: the allgather token dispatcher -----------------------------------------------
 */

/* The routed experts' output for this rank's tokens h [Ms, C] (routing done, in a): out [Ms, C]
 * (overwrite). */
void moe_eng_allgather_fwd(struct moe_eng *e,
                           const struct moe_eng_layer_w *w,
                           struct moe_eng_layer_act *a,
                           const float *h,
                           float *out);
/* Backward: dh [Ms, C] += through the experts, d_topk_w [Ms, K] (overwrite). */
void moe_eng_allgather_bwd(struct moe_eng *e,
                           const struct moe_eng_layer_w *w,
                           struct moe_eng_layer_act *a,
                           const float *dout,
                           float *dh,
                           float *d_topk_w);
/* ---- experts.c: the routed experts' grouped GEMMs (moe_block.c and allgather.c call them) --- */

/* The local experts' grouped GEMMs: x [R, in] rows grouped by counts [El] (host and engine-memory
 * copies), stacked weights w [El, out, in], bias [El, out] may be NULL (d_bias too); y [R, out]
 * (overwrite), dx [R, in] (overwrite), dw [El, out, in] and d_bias (accumulate). */
void moe_eng_grouped_fwd(struct moe_eng *e,
                         float *y,
                         const float *x,
                         const float *w,
                         const float *bias,
                         const int *counts_host,
                         const int *counts_dev,
                         int in,
                         int out);
void moe_eng_grouped_bwd(struct moe_eng *e,
                         float *dx,
                         float *dw,
                         float *d_bias,
                         const float *dy,
                         const float *x,
                         const float *w,
                         const int *counts_host,
                         const int *counts_dev,
                         int in,
                         int out);

/* ---- linear.c: linear layers, sequence-parallel gather/reduce, FFN activation -------------- */

/* Linear layer helpers with optional precision emulation (qdq of GEMM inputs); bias [out] may be
 * NULL (d_bias too). */
void moe_eng_linear_fwd(struct moe_eng *e,
                        float *y,
                        const float *x,
                        const float *w,
                        const float *bias,
                        int rows,
                        int in,
                        int out);
void moe_eng_linear_bwd(struct moe_eng *e,
                        float *dx,
                        float *dw,
                        float *d_bias,
                        const float *dy,
                        const float *x,
                        const float *w,
                        int rows,
                        int in,
                        int out,
                        bool accumulate_dx);

/* Sequence-parallel helpers over TP: gather [Ms, C] -> [M, C]; reduce partial [M, C] -> [Ms, C]. */
const float *moe_eng_sp_gather(struct moe_eng *e, const float *x, float *buf, int cols);
void moe_eng_sp_reduce(struct moe_eng *e, float *out, float *partial, int cols);
/* Temporary [M, cols] for moe_eng_sp_gather when gathering is needed, else NULL. */
float *moe_eng_gather_buf(struct moe_eng *e, int cols);

/* The FFN activation: SwiGLU on fc1 [rows, 2 f] or GELU on fc1 [rows, f] -> act [rows, f]. */
void moe_eng_act_fwd(struct moe_eng *e, float *act, const float *fc1, int rows, int f);
void moe_eng_act_bwd(
    struct moe_eng *e, float *d_fc1, const float *d_act, const float *fc1, int rows, int f);

/* ---- head.c: embedding, final norm, output layer, loss --------------------------------------- */

/* Vocab-parallel lookup in table (the embedding, or the MTP stage's copy) and its gradient. */
void moe_eng_embed_fwd(struct moe_eng *e,
                       const struct moe_eng_tensor *table,
                       const int *ids,
                       float *x0);
void moe_eng_embed_bwd(struct moe_eng *e,
                       const struct moe_eng_tensor *table,
                       const int *ids,
                       const float *dx0);
/* Loss chunk: from the chunk output x[Ms, C], accumulate the loss and write dx[Ms, C]. */
void moe_eng_head_fwd_bwd(struct moe_eng *e, const float *x, const int *targets, float *dx);

/* The loss head on the normed hidden state hf [Ms, C]: output layer, vocab-parallel cross-entropy
 * with weight `scale` per valid token (targets -1 are ignored); *loss_out += the weighted sum over
 * this TP group's tokens (counted on tp rank 0); dhf [Ms, C] = its gradient (overwrite). */
void moe_eng_logits_fwd_bwd(struct moe_eng *e,
                            const float *hf,
                            const int *targets,
                            double scale,
                            double *loss_out,
                            float *dhf);

/* ---- mtp.c: multi-token prediction (on the loss chunk) ----------------------------------------
 */

/* Forward of the loss chunk's head with MTP: final norm of x [Ms, C] (the chunk output), main head,
 * then each MTP depth's layer and head; fills the slot's MTP tensors and sl->dout (the gradient of
 * the normed output from the main head). */
void moe_eng_mtp_fwd(struct moe_eng *e, struct moe_eng_chunk *ch, struct moe_eng_slot *sl, int mb);
/* Backward through the MTP depths and the final norm: d [Ms, C] = gradient of the chunk output. */
void moe_eng_mtp_bwd(
    struct moe_eng *e, struct moe_eng_chunk *ch, struct moe_eng_slot *sl, int mb, float *d);

/* ---- pipeline.c: schedule and step execution ------------------------------------------------- */

MOE_NODISCARD enum moe_status moe_eng_schedule_build(struct moe_eng *e, struct moe_diag *diag);
/* Run every micro-batch's forward and backward (grads accumulate). */
void moe_eng_run_schedule(struct moe_eng *e);

/* ---- optimizer.c ----------------------------------------------------------------------------- */

void moe_eng_grads_zero(struct moe_eng *e);
/* Called when a bucket's last contribution is in (overlap: starts its reduction). */
void moe_eng_bucket_ready(struct moe_eng *e, int bucket);
/* Count one micro-batch's contribution to the buckets of layer l (or -1/-2 embedding/head). */
void moe_eng_layer_grads_done(struct moe_eng *e, int layer_tag);
/* Finish reductions, check finiteness, clip, AdamW, gather parameters, update expert bias. Returns
 * MOE_ERR_RUNTIME (diag naming the tensor) when a gradient is not finite. */
MOE_NODISCARD enum moe_status
moe_eng_optimizer_step(struct moe_eng *e, double *grad_norm, struct moe_diag *diag);
/* Advance outstanding non-blocking gradient/parameter collectives (MPI progresses them only
 * inside MPI calls, so the schedule calls this between layers). */
void moe_eng_comm_progress(struct moe_eng *e);
/* Wait for overlapped parameter gathers of a layer before its first use in a step. */
void moe_eng_params_wait(struct moe_eng *e, int layer_tag);
double moe_eng_lr_at(const struct moe_eng *e, int step);
/* Layer tags for buckets that are not decoder layers. */
enum { MOE_ENG_TAG_EMBED = -1, MOE_ENG_TAG_HEAD = -2 };

/* ---- data.c ---------------------------------------------------------------------------------- */

MOE_NODISCARD enum moe_status moe_eng_data_init(struct moe_eng *e, struct moe_diag *diag);
void moe_eng_data_fini(struct moe_eng *e);
/* Fill e->ids / e->targets for the next global batch and advance the data position. */
void moe_eng_data_next_batch(struct moe_eng *e);

/* ---- staging.c: host views of engine memory, device scalars -------------------------------- */

/* Host view of engine ints/floats x[n]: x itself on the CPU backend; on CUDA a host-temporary copy
 * (e->htemp, released with the caller's mark), which synchronises the stream. */
const int *moe_eng_host_ints(struct moe_eng *e, const int *x, size_t n);
const float *moe_eng_host_floats(struct moe_eng *e, const float *x, size_t n);
/* A mark of both temporary arenas (engine memory and host), released together, innermost first. */
struct moe_eng_tmark {
    size_t temp;
    size_t host;
};
struct moe_eng_tmark moe_eng_tmark_take(const struct moe_eng *e);
void moe_eng_tmark_release(struct moe_eng *e, struct moe_eng_tmark m);
/* Engine-memory view of host ints h[n]: h itself on the CPU backend (h must then be engine
 * memory, e.g. from e->htemp == &e->temp); on CUDA a copy in e->temp, in stream order. */
int *moe_eng_dev_ints(struct moe_eng *e, int *h, size_t n);
/* A scalar slot for a kernel to write this step (engine memory), read back in slot order by
 * moe_eng_scal_flush. */
float *moe_eng_scal_take(struct moe_eng *e, enum moe_eng_scal_kind kind, int layer);
/* End of a schedule: router losses into aux_sum (slot order, as if summed when written) and, on
 * CUDA, the deferred finite checks of layer outputs into nan_origin. Resets the slots. */
void moe_eng_scal_flush(struct moe_eng *e);
/* CUDA: record the sums of a layer's x2 and output for the deferred finite check. */
void moe_eng_note_layer_sums(struct moe_eng *e, int layer, const float *x2, const float *out);
/* Bytes of the optimizer category that hold no state: each bucket's master, moments (and
 * offloaded gradient copy) carry a page of slack to share the gradient's page offset
 * (engine/model.c bucket_close); reported among the buffers' "other". 0 under optimizer offload
 * (the state lives in the host pool). */
size_t moe_eng_opt_page_slack(const struct moe_eng *e);
/* Bytes of host temporaries the CUDA backend needs at most at once (e->htemp). */
size_t moe_eng_host_temp_bytes(const struct moe_eng *e);
/* Name of the first parameter of layer w with a non-finite weight, or NULL (scans engine memory:
 * a failure path). */
const char *moe_eng_nonfinite_weight(struct moe_eng *e, const struct moe_eng_layer_w *w);
/* Finite check helper: true when every x[n] is finite. */
bool moe_eng_all_finite(const float *x, size_t n);

#endif /* MOE_ENGINE_INTERNAL_H */
