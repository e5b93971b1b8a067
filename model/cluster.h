/*
 * Cluster description: one GPU type, its NVLink (scale-up) domain, the scale-out network and the
 * host, plus the achieved fractions and overheads the time model derates peaks with.
 *
 * Every figure comes from a cluster file (topologies/<name>.json, each value with its source) or
 * from `moefold calibrate` on the local host; model/ never hard-codes hardware. Units are in the
 * field names: _gbps is 10^9 bytes/s per GPU per direction (nccl-tests' convention), _tflops 10^12
 * FLOP/s dense (no sparsity), _us microseconds, _gib 2^30 bytes.
 */
#ifndef MOE_MODEL_CLUSTER_H
#define MOE_MODEL_CLUSTER_H

#include "model/config.h"
#include "model/status.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Tensor-core math precisions a GPU may offer. */
enum moe_math {
    MOE_MATH_BF16 = 0,
    MOE_MATH_FP8 = 1,
    MOE_MATH_FP4 = 2,
    MOE_MATH_FP32 = 3, /* plain FP32 (CPU hosts; GPUs use it for the optimizer only) */
    MOE_NUM_MATH = 4,
};

/* Number of precision recipes (== MOE_NUM_RECIPES in model/layout.h; checked at compile time). */
#define MOE_CLUSTER_NUM_RECIPES 6

/*
 * Shape-dependent GEMM efficiency: a GEMM of F flops reaches
 *   eff(F) = max_eff * (1 - exp(-F / half_flops))
 * of the precision's peak, the saturating curve fitted to square-GEMM sweeps (hardware.md: H100
 * BF16 0.18 at 1024^3, 0.68 at 2048^3, 0.80 at 4096^3), capped by the HBM roofline separately.
 * Grouped (MoE) GEMMs apply grouped_eff on top, per expert, at the expert's own token count.
 * A GEMM whose narrowest dimension d = min(m, n, k) is small fills only part of each kernel tile:
 * eff is multiplied by d / (d + half_dim) (half_dim = 0: no such term, as in the GPU files, whose
 * sweeps are square). moefold calibrate fits half_flops and half_dim together on the host's
 * shapes; a skinny 16 x 1024 x 1024 product and a 128 x 256 x 256 one have the same FLOPs but run
 * at 0.3 and 0.8 of the peak there.
 */
struct moe_gemm_eff {
    double max_eff[MOE_NUM_MATH]; /* asymptotic fraction of peak per math precision */
    double half_flops;            /* FLOPs at which eff reaches 1-1/e of max (per GEMM) */
    double half_dim;              /* narrowest dimension at which tile filling halves eff; 0 off */
    double grouped_eff;           /* extra factor for grouped GEMMs vs dense (<= 1) */
    double grouped_half_dim;      /* the grouped GEMMs' own narrow-dimension term at each expert's
                                     rows (a CPU host: its experts' weights stay warm in the cache
                                     where the dense linears' are cold); 0: half_dim */
    double grouped_bwd_eff[2];    /* backward-data, backward-weight: their own factor vs dense
                                     where a host measured them apart (a CPU host: reducing over
                                     an expert's few rows runs near the peak); 0: grouped_eff and
                                     grouped_half_dim, as the forward */
    double grouped_bwd_half_dim[2]; /* their narrow-dimension terms (where the factor is set, 0:
                                       no term; where it is 0, a term > 0 goes with the forward's
                                       factor, 0: the forward's term) */
    double grouped_tile_m;          /* rows per tile: each expert's token count is padded to it */
    /* The experts' GEMMs small enough for the host's unpacked small-matrix kernels (a CPU host:
     * OpenBLAS runs GEMMs of M x N x K <= 10^6 without packing their operands, at rates no curve
     * of the larger shapes gives): an expert's GEMM of rows x n x k <= small_mnk takes these
     * factors and terms (forward, backward-data, backward-weight) in place of the grouped ones
     * above. small_mnk 0: no such regime (every GPU file). */
    double small_mnk;
    double small_eff[3];
    double small_half_dim[3];
    double recipe_eff[MOE_CLUSTER_NUM_RECIPES]; /* per recipe (enum moe_recipe order): factor on
                                     max_eff for its scaling mode's GEMM kernels (BF16 = 1) */
};

struct moe_gpu {
    char name[MOE_NAME_LEN];
    double hbm_gib;                   /* usable device memory per GPU */
    double hbm_tbps;                  /* HBM bandwidth, 10^12 B/s */
    double peak_tflops[MOE_NUM_MATH]; /* dense peak per math precision; 0 = unsupported */
    bool has_fp8;                     /* FP8 tensorwise/delayed/blockwise recipes */
    bool has_mx;                      /* MXFP8 / NVFP4 block-scaled formats (Blackwell) */
    int num_sms;                      /* streaming multiprocessors (GEMMs lose what comm takes) */
    struct moe_gemm_eff gemm;         /* GEMM efficiency curve */
    double attn_fwd_eff;              /* fused (flash) attention forward, fraction of BF16 peak */
    double attn_bwd_eff;              /* fused attention backward, fraction of BF16 peak */
    double attn_fwd_half_dim;         /* attention's narrow-head term: eff x d / (d + this) at head
                                         dim d (the softmax's work per score against the products'
                                         4 d FLOPs); 0: gemm.half_dim (the GPU files: no term) */
    double attn_bwd_half_dim;         /* the same for the backward */
    double attn_rect;                 /* 1: each attention call multiplies its queries by every key
                                         up to its last query's (masked scores computed, then
                                         zeroed: the CPU reference, one sgemm per sequence or CP
                                         chunk); 0: masked blocks skipped (fused GPU kernels) */
    double attn_tile_us[2];           /* forward, backward: microseconds per query tile beyond
                                         one per head and call, where a sliding window shorter
                                         than the keys makes a kernel take the queries in tiles
                                         of `window` rows, each its own GEMM pair (the CPU
                                         reference; moefold calibrate fits it on windowed bench
                                         rows); 0: none (fused GPU kernels tile inside one call) */
    double bias_pass;                 /* 1: routed experts' linear biases added in a pass of their
                                         own over each expert's rows (forward: rows read and
                                         written; backward: rows read for the bias gradient), at
                                         elem_eff: the CPU engine's per-expert bias ops; 0: not
                                         priced (GPU files: fc1's in the grouped GEMM, fc2's a
                                         per-expert loop of host calls, bytes negligible) */
    double hbm_eff;                   /* achieved fraction of HBM bandwidth, memory-bound kernels */
    double elem_eff;                  /* elementwise kernels' achieved fraction of HBM bandwidth */
    double act_eff;                   /* the MLP activation's (SwiGLU / GELU: an exp or tanh per
                                         element) fraction where it differs; 0 = elem_eff */
    double act_bwd_eff;               /* its backward's fraction (of the bytes it moves: input and
                                         output gradient read, input gradient written); 0 = the
                                         forward's work again + the gradient at elem_eff */
    double bias_eff;                  /* bias_pass's forward fraction (rows read and written; a CPU
                                         host measures it apart: calibrate); 0 = elem_eff */
    double bias_bwd_eff;              /* its backward's (rows read); 0 = elem_eff */
    double optimizer_eff;             /* the optimizer pass's (norm, Adam, weight copy) fraction */
    double kernel_launch_us;          /* host time per Python-level call of the framework
                                         (a Transformer Engine module, autograd Function,
                                         compiled fusion or collective; no CUDA graph) */
    double host_cpp_op_us;            /* host time per kernel launched from C++ inside such a
                                         call (per-expert cuBLASLt GEMMs, FP8 quantisation) */
    double host_param_us;             /* host time per parameter tensor per backward pass (the
                                         data-parallel wrapper's Python gradient hook, TE's
                                         per-weight work); 0 = none */
    double quant_bytes_per_elem;      /* extra HBM bytes per element to quantise for FP8/FP4 */
};

/* The collectives a per-size bus-bandwidth table covers, in moefold-bench's order. */
enum moe_busbw_coll {
    MOE_BUSBW_ALLREDUCE = 0,
    MOE_BUSBW_ALLGATHER,
    MOE_BUSBW_REDUCESCATTER,
    MOE_BUSBW_ALLTOALL,
    MOE_BUSBW_SENDRECV,
    MOE_BUSBW_NUM_KINDS
};

enum { MOE_BUSBW_MAX_SIZES = 16 };

/*
 * Bus bandwidth measured per message size inside one domain (moefold calibrate on a host whose
 * collectives slow down past its caches: the bench's nccl-tests-style sweep, kept as measured).
 * Per collective: num_sizes points, bytes ascending (nccl-tests' size: the all-gather's output,
 * the reduce-scatter's input, the all-reduce's buffer, each rank's all-to-all buffer) with the
 * busbw measured there. num_sizes 0 = not measured (every GPU cluster file): latency + bytes /
 * busbw as fitted.
 */
struct moe_busbw_table {
    int num_sizes[MOE_BUSBW_NUM_KINDS];
    double bytes[MOE_BUSBW_NUM_KINDS][MOE_BUSBW_MAX_SIZES]; /* message size, bytes */
    double gbps[MOE_BUSBW_NUM_KINDS][MOE_BUSBW_MAX_SIZES];  /* busbw there, GB/s (> 0) */
};

struct moe_nvlink {
    int domain_gpus;        /* GPUs sharing one NVSwitch fabric (8, or 72 for NVL72) */
    double gbps;            /* per GPU per direction, line rate */
    double eff;             /* achieved bus-bandwidth fraction for ring/a2a collectives */
    double latency_us;      /* per collective step */
    bool has_nvls;          /* NVLink SHARP in-switch reduction for all-reduce/reduce-scatter */
    double nvls_busbw_gbps; /* achieved all-reduce bus bandwidth with NVLS; 0 = none */
    /* Achieved bus bandwidth of the reducing collectives where it differs from the all-gather's
     * (gbps x eff): a CPU host adds the sums in its cores between the copies; 0 = as gbps x eff
     * (NCCL's rings reduce at the bus bandwidth). */
    double allreduce_gbps;
    double reducescatter_gbps;
    struct moe_busbw_table busbw_by_size; /* optional per-size measurements (calibrate) */
};

struct moe_scaleout {
    double nic_gbps;   /* per GPU per direction, line rate (400G CX7 = 50) */
    double eff;        /* achieved fraction for ring / send-recv */
    double a2a_eff;    /* achieved fraction for NCCL all-to-all (cannot aggregate NICs) */
    double latency_us; /* per message / collective step across the fabric */
};

struct moe_host {
    double mem_gib_per_gpu; /* host DRAM usable per GPU for offload */
    double link_gbps;       /* GPU<->host per GPU per direction (PCIe or C2C share) */
    double link_eff;        /* achieved fraction of link_gbps for offload copies */
    double optimizer_gbps;  /* the host's optimizer step (AdamW over master, moments, gradient)
                             * per GPU, bytes streamed per second, for an offloaded optimizer;
                             * 0: not measured, the host link bounds the step */
    double rank_spread;     /* the ranks' speed spread: the slowest rank's compute over the
                             * ranks' mean, minus 1 (moefold calibrate); every collective that
                             * joins ranks waits this share of the compute before it. 0: none */
    double probe_gemm_dim;  /* the cube GEMM moefold-train's host probe times (its m = n = k) */
    double probe_gemm_us;   /* the calibration bench's time of that GEMM (forward and both
                             * backward GEMMs in turn, mean over the ranks and the benches read):
                             * compare --host-speed's reference. 0: not measured */
};

/* Expert-parallel dispatcher kernels (DeepEP, HybridEP) achieved bandwidth and SM cost. */
struct moe_dispatch_hw {
    double deepep_intra_eff;   /* DeepEP NVLink fraction of nvlink.gbps */
    double deepep_inter_eff;   /* DeepEP RDMA fraction of nic_gbps */
    double hybridep_intra_eff; /* HybridEP NVLink fraction */
    double hybridep_inter_eff; /* HybridEP RDMA fraction */
    int deepep_sms;            /* SMs DeepEP occupies while it runs */
    int hybridep_sms;          /* SMs HybridEP occupies */
    double permute_bytes_eff;  /* HBM fraction achieved by permute/unpermute (alltoall path) */
};

/* Software overheads not tied to one kernel (per layer host work, per step fixed costs). */
struct moe_overheads {
    double moe_host_sync_us;   /* host sync per MoE layer pass for dropless token counts */
    double step_fixed_ms;      /* per step: data loading, logging, GC, optimizer launch */
    double overlap_eff;        /* fraction of overlappable comm actually hidden */
    double a2a_overlap_loss;   /* compute slowdown fraction while EP comm overlaps (SMs) */
    double ep_overlap_eff;     /* fraction of pairable EP comm the 1F1B A2A overlap hides */
    double context_gib;        /* per GPU: CUDA context, cuBLAS/NCCL workspaces and buffers */
    double alloc_reserve_frac; /* allocator fragmentation reserve, fraction of dynamic memory */
    double flex_buffer_gib;    /* DeepEP / HybridEP communication buffers per GPU */
};

struct moe_cluster {
    char name[MOE_NAME_LEN];
    char description[160];
    char generation[MOE_NAME_LEN]; /* GPU generation whose software figures are fitted together
                                      ("hopper", "blackwell", "cpu") */
    char software[MOE_NAME_LEN];   /* software release whose fitted figures are applied; "" = the
                                      generation's shared figures */
    int gpus_per_node;             /* GPUs per node or tray: --gpus must be a multiple */
    int max_gpus;                  /* largest --gpus accepted */
    struct moe_gpu gpu;
    struct moe_nvlink nvlink;
    struct moe_scaleout net;
    struct moe_host host;
    struct moe_dispatch_hw dispatch;
    struct moe_overheads overheads;
};

/* Check ranges (positive bandwidths, fractions in (0,1.5], domain divides nodes, ...). */
MOE_NODISCARD enum moe_status moe_cluster_validate(const struct moe_cluster *cl,
                                                   struct moe_diag *diag);

/* Check a GPU count against the cluster: positive, multiple of gpus_per_node, <= max_gpus. */
MOE_NODISCARD enum moe_status
moe_cluster_check_gpus(const struct moe_cluster *cl, int num_gpus, struct moe_diag *diag);

#ifdef __cplusplus
}
#endif

#endif /* MOE_MODEL_CLUSTER_H */
