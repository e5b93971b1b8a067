/*
 * Per-layer compute and communication times (model/compute.h).
 *
 * Compute: each GEMM is a roofline of 2mnk FLOPs at the precision's dense peak times the
 * shape-dependent efficiency eff(F) = max_eff * (1 - exp(-F / half_flops)) (cluster file, fitted
 * to square-GEMM sweeps) times d / (d + half_dim) for its narrowest dimension d (partly filled
 * tiles; model/cluster.h), against its bytes at achieved HBM bandwidth. The efficiency curve is in
 * time, so half_flops scales with the precision's peak. Grouped expert GEMMs run as one kernel over
 * all local experts, each expert's rows padded to the kernel's tile; without --moe-grouped-gemm
 * each expert is its own GEMM. FP8/FP4 recipes add a quantisation pass over every GEMM input
 * (forward) and output gradient (backward). Elementwise work (norms, residuals, RoPE, activations,
 * permutes, router) is bytes over achieved HBM bandwidth.
 *
 * Communication per layer: sequence-parallel all-gather + reduce-scatter around attention, dense
 * MLP and shared experts (Korthikanti et al. 2022); ETP all-gather/reduce-scatter of expert tokens;
 * CP ring exchange of K/V (forward once, backward twice for dK/dV); EP dispatch and combine in both
 * passes. Host (CPU) work per module is counted from Megatron-Core's layer with Transformer Engine
 * in eager mode (host_ops below): Python-level calls, each costing gpu.kernel_launch_us, and
 * kernels launched from C++ loops inside one call, each costing gpu.host_cpp_op_us (both fitted).
 *
 * A decoder layer is costed in two steps: moe_compute_layer_base, everything recompute and
 * activation offload leave alone (the GEMMs, collectives and host call counts of a pass), then
 * moe_compute_layer_finish, what they change (the re-run work, the offload copy, the host times).
 * moe_compute_layer runs both; model/cost.c keeps bases across option sets.
 */
#include "model/compute.h"

#include "model/comm_cost.h"
#include "model/memory.h"

#include <math.h>

#define TFLOPS 1e12
#define TBPS   1e12
#define GIBPS  1e9

/*
 * Host work per forward pass of each module, Megatron-Core core_v0.15.0 with Transformer Engine
 * v2.9 in eager mode, counted from the forward code paths (megatron/core/transformer/
 * transformer_layer.py, attention.py, multi_latent_attention.py, moe/{router,token_dispatcher,
 * experts,shared_experts,moe_utils}.py, extensions/transformer_engine.py; TE pytorch/module/
 * {linear,layernorm_linear,grouped_linear}.py, csrc/extensions/cast.cpp, common/gemm/
 * cublaslt_gemm.cu). `py` counts Python-level calls: Transformer Engine module calls, other
 * autograd Functions (fused RoPE, router, permute, sort, all-to-all), torch.compile'd fusions and
 * collective calls, with a plain launching torch op as a quarter of one. Kernels that one call
 * launches from C++ loops are counted apart (host_cpp_op_us each): TE's grouped linear runs one
 * cuBLASLt matmul per local expert (multi_stream_cublas_gemm), so a grouped expert MLP is 2 per
 * expert forward, 4 backward; FP8 quantisation adds launches per GEMM input (fp8_quant_ops).
 */
struct host_ops {
    double attn;       /* norm+QKV, RoPE x2, core attention, proj, bias-dropout-add, a reshape */
    double qk_norm;    /* q/k RMSNorm (Qwen3) */
    double mla;        /* MLA: norm, q/kv down, q/kv up with norms, RoPE, core, proj, BDA */
    double tp_sp;      /* per TP block with sequence parallelism: its all-gather + reduce-scatter */
    double dense_mlp;  /* fc1 (with norm), activation, fc2, BDA */
    double router;     /* fused router: gating GEMM, score + top-k, aux-loss scores and tracker */
    double forced;     /* --moe-router-force-load-balancing: the random-logit path (RandomSTE) */
    double pre_a2a;    /* alltoall preprocess: 7 ops + 4 device-to-host copies (as 1/4 each),
                          the count exchange */
    double exp_a2a;    /* alltoall: permute, all-to-all, chunk sort, grouped fc1, act, fc2, sort
                          back, all-to-all, unpermute */
    double exp_flex;   /* DeepEP / HybridEP: fused dispatch with permute, grouped MLP, combine */
    double shared;     /* shared expert fc1, activation, fc2, the add */
    double seq_expert; /* without --moe-grouped-gemm: per local expert, fc1, activation, fc2 */
    double sched_f;    /* per model-chunk forward of one micro-batch, outside the layers */
    double sched_b;    /* per model-chunk backward, outside the layers */
    double sched_p2p;  /* per pipeline transfer the chunk receives or sends */
    double plain_op;   /* a plain launching torch op, as a share of one call */
    double quick_geglu; /* GPT-OSS's clamped quick-GeGLU beyond a SwiGLU's fused call: chunk, two
                           clamps, cat, and the offset tensor made on the device (a host sync,
                           counted in host_layer's syncs) */
    double rc_wrap;     /* selective recompute: the checkpoint wrapper of one module in forward */
    double rc_norm;     /* re-run of one separate norm module (TENorm) and its output's restore */
    double rc_act;      /* re-run of the fused MLP activation and its output's restore */
    double rc_up_proj;  /* re-run of MLA's q/kv up projections and their RoPE */
    double rc_core;     /* re-run of the core attention call */
};
/* The schedule's own work per chunk pass (megatron/core/pipeline_parallel/schedules.py
 * forward_step / backward_step, p2p_communication.py): forward, the MoE auxiliary-loss scale (a
 * ones tensor and its division), the token counter and the output's deallocation (4 plain ops);
 * backward, the C++ autograd entry (custom_backward) and retain_grad on the input; each pipeline
 * transfer, its receive buffer and its send or receive in the batched p2p call. GPT-OSS's expert
 * path (experts.py _apply_bias, fusions/fused_bias_geglu.py weighted_bias_quick_geglu_impl, MCore
 * 2edffadb as Megatron-Bridge 26.04 runs it) and selective recompute (tensor_parallel.
 * CheckpointWithoutOutput: the forward wraps the module in one autograd Function, the backward
 * re-runs the module's calls and copies the output back into its freed storage, one plain op;
 * transformer_layer.py recomputes only norms that are modules of their own: the MoE layer's
 * pre-MLP norm and MLA's input norm, not the norms fused into a linear). */
static const struct host_ops host_ops = {.attn = 6.25,
                                         .qk_norm = 2.0,
                                         .mla = 10.0,
                                         .tp_sp = 2.0,
                                         .dense_mlp = 5.0,
                                         .router = 7.0,
                                         .forced = 1.0,
                                         .pre_a2a = 4.75,
                                         .exp_a2a = 11.0,
                                         .exp_flex = 9.0,
                                         .shared = 4.0,
                                         .seq_expert = 3.0,
                                         .sched_f = 1.0,
                                         .sched_b = 1.25,
                                         .sched_p2p = 1.25,
                                         .plain_op = 0.25,
                                         .quick_geglu = 1.0,
                                         .rc_wrap = 1.0,
                                         .rc_norm = 1.25,
                                         .rc_act = 1.25,
                                         .rc_up_proj = 4.25,
                                         .rc_core = 1.0};

/* Kernels one FP8 quantisation of a GEMM input launches from C++ (TE v2.9 quantizer.cpp,
 * normalization.cpp, cast.cpp): current scaling zeroes the amax, reduces it, computes the scale
 * and casts (3 with the norm fused); delayed scaling casts once (none after a fused norm, one
 * multi-tensor cast for all experts); blockwise and MXFP8 cast once per input (per expert for
 * grouped inputs), MXFP8 also swizzles both GEMM operands' scales. */
struct fp8_quant_ops {
    double linear, ln_linear, grouped_per_expert, grouped_fixed, per_gemm;
};
static const struct fp8_quant_ops fp8_quant_ops[MOE_NUM_RECIPES] = {
    [MOE_RECIPE_BF16] = {0.0, 0.0, 0.0, 0.0, 0.0},
    [MOE_RECIPE_FP8_TENSORWISE] = {4.0, 3.0, 4.0, 0.0, 0.0},
    [MOE_RECIPE_FP8_DELAYED] = {1.0, 0.0, 0.0, 1.0, 0.0},
    [MOE_RECIPE_FP8_BLOCKWISE] = {1.0, 1.0, 1.0, 0.0, 0.0},
    [MOE_RECIPE_MXFP8] = {1.0, 1.0, 1.0, 0.0, 2.0},
    [MOE_RECIPE_NVFP4] = {1.0, 1.0, 1.0, 0.0, 2.0},
};

/* 1 - exp(-x), x >= 0. Past x = 40 the exponential is below 2^-57, so the difference rounds to
 * exactly 1.0 in double: skipping exp() there changes no result (the search's hot path calls this
 * for every GEMM shape, and large GEMMs sit far past the knee). */
static inline double saturation(double x)
{
    return x > 40.0 ? 1.0 : 1.0 - exp(-x);
}

/* Roofline of one GEMM-shaped op: flops of an m x n x k product against `bytes` of HBM traffic. */
static double gemm_roofline(const struct moe_gpu *gpu,
                            enum moe_math math,
                            double eff_scale,
                            double m,
                            double n,
                            double k,
                            double bytes)
{
    if (m <= 0.0 || n <= 0.0 || k <= 0.0) {
        return 0.0;
    }
    double peak = gpu->peak_tflops[math] * TFLOPS;
    double bf16 = gpu->peak_tflops[MOE_MATH_BF16] * TFLOPS;
    double flops = 2.0 * m * n * k;
    double half = gpu->gemm.half_flops * (bf16 > 0.0 ? peak / bf16 : 1.0);
    double d = fmin(m, fmin(n, k));
    double eff = gpu->gemm.max_eff[math] * eff_scale * saturation(flops / half) * d /
                 (d + gpu->gemm.half_dim);
    double t_math = flops / (peak * eff);
    double t_mem = bytes / (gpu->hbm_tbps * TBPS * gpu->hbm_eff);
    return t_math > t_mem ? t_math : t_mem;
}

double moe_compute_gemm_s(const struct moe_gpu *gpu,
                          enum moe_math math,
                          double eff_scale,
                          double m,
                          double n,
                          double k,
                          double in_bytes)
{
    return gemm_roofline(gpu, math, eff_scale, m, n, k,
                         (m * k + k * n) * in_bytes + m * n * in_bytes);
}

/* The rate terms of one GEMM shape's forward, backward-data and backward-weight: a divisor on
 * the curve's rate (1 / the grouped factor) and the narrow-dimension term; is_uniform: the three
 * are one (dense linears, and every GPU file), priced once (the planner's hot path). */
enum { GEMM_FWD, GEMM_DGRAD, GEMM_WGRAD, GEMM_DIRS };
struct gemm_dirs {
    double div[GEMM_DIRS];
    double half[GEMM_DIRS];
    bool is_uniform;
};

/* Shared per-call context. */
struct cctx {
    const struct moe_gpu *gpu;
    const struct moe_cluster *cl;
    enum moe_math math;
    double in_bytes;        /* bytes per GEMM input element at the recipe's precision */
    double quant_s;         /* seconds per element quantised (0 for BF16) */
    bool emulated_quant;    /* FP32 training emulating the recipe: no quantised copies are cached */
    double eff_scale;       /* the recipe's GEMM kernel factor on max_eff */
    double grad_bytes;      /* main-gradient element: wgrad reads and writes it (FP32 accumulate) */
    double ab;              /* bytes of one activation element: BF16 2, FP32 training 4 */
    double hbm;             /* achieved bytes/s */
    double inv_hbm;         /* 1 / hbm */
    double elem_bw;         /* bytes/s elementwise kernels achieve */
    double act_bw;          /* bytes/s the MLP activation achieves (SwiGLU / GELU) */
    double inv_peak;        /* 1 / (peak x max_eff x eff_scale) at the recipe's math */
    double inv_half;        /* 1 / half_flops at the recipe's math */
    double half_dim;        /* narrowest-dimension term of the efficiency (0: none) */
    struct gemm_dirs dense; /* the dense linears': no factor, half_dim in all three */
    struct gemm_dirs experts;       /* the experts' grouped GEMMs' per direction */
    struct gemm_dirs experts_small; /* theirs at or below small_mnk (gpu.gemm.grouped_small) */
    double small_mnk;               /* an expert's rows x n x k at or below which; 0: none */
};

static void cctx_init(struct cctx *c, const struct moe_cluster *cl, const struct moe_options *opt)
{
    c->gpu = &cl->gpu;
    c->cl = cl;
    c->ab = opt->is_fp32_training ? 4.0 : 2.0;
    c->math = moe_recipe_math(opt->recipe);
    if (cl->gpu.peak_tflops[c->math] <= 0.0) {
        c->math = MOE_MATH_BF16;
    }
    c->in_bytes = c->math == MOE_MATH_FP8 ? 1.0 : (c->math == MOE_MATH_FP4 ? 0.5 : c->ab);
    c->hbm = cl->gpu.hbm_tbps * TBPS * cl->gpu.hbm_eff;
    c->eff_scale = c->math == MOE_MATH_BF16 ? 1.0 : cl->gpu.gemm.recipe_eff[opt->recipe];
    c->grad_bytes = opt->main_grads_dtype == MOE_DTYPE_FP32 ? 4.0 : 2.0;
    c->quant_s = opt->recipe == MOE_RECIPE_BF16 ? 0.0 : cl->gpu.quant_bytes_per_elem / c->hbm;
    c->inv_hbm = 1.0 / c->hbm;
    c->emulated_quant = opt->is_fp32_training && opt->recipe != MOE_RECIPE_BF16;
    c->elem_bw = cl->gpu.hbm_tbps * TBPS * cl->gpu.elem_eff;
    c->act_bw = cl->gpu.act_eff > 0.0 ? cl->gpu.hbm_tbps * TBPS * cl->gpu.act_eff : c->elem_bw;
    double peak = cl->gpu.peak_tflops[c->math] * TFLOPS;
    double bf16 = cl->gpu.peak_tflops[MOE_MATH_BF16] * TFLOPS;
    c->inv_peak = 1.0 / (peak * cl->gpu.gemm.max_eff[c->math] * c->eff_scale);
    c->inv_half = 1.0 / (cl->gpu.gemm.half_flops * (bf16 > 0.0 ? peak / bf16 : 1.0));
    c->half_dim = cl->gpu.gemm.half_dim;
    const struct moe_gemm_eff *ge = &cl->gpu.gemm;
    double g_div = ge->grouped_eff > 0.0 ? 1.0 / ge->grouped_eff : 1.0;
    double g_half = ge->grouped_half_dim > 0.0 ? ge->grouped_half_dim : c->half_dim;
    for (int d = 0; d < GEMM_DIRS; d++) {
        c->dense.div[d] = 1.0;
        c->dense.half[d] = c->half_dim;
        c->experts.div[d] = g_div;
        c->experts.half[d] = g_half;
    }
    c->dense.is_uniform = true;
    c->experts.is_uniform = true;
    for (int d = GEMM_DGRAD; d <= GEMM_WGRAD; d++) {
        double eff = ge->grouped_bwd_eff[d - GEMM_DGRAD];
        double half = ge->grouped_bwd_half_dim[d - GEMM_DGRAD];
        if (eff > 0.0) {
            c->experts.div[d] = 1.0 / eff;
            c->experts.half[d] = half;
            c->experts.is_uniform = false;
        } else if (half > 0.0) {
            /* The forward's factor with a term of its own (the GPU files: backward-weight
             * reduces over each expert's rows and loses more at few rows than the forward). */
            c->experts.half[d] = half;
            c->experts.is_uniform = false;
        }
    }
    c->small_mnk = ge->small_mnk;
    for (int d = 0; d < GEMM_DIRS; d++) {
        c->experts_small.div[d] = ge->small_eff[d] > 0.0 ? 1.0 / ge->small_eff[d] : 1.0;
        c->experts_small.half[d] = ge->small_half_dim[d];
    }
    c->experts_small.is_uniform = false;
}

/* The figures of an expert's GEMM of `rows` x n x k: the small-matrix kernels' at or below their
 * size, else the grouped GEMMs'. */
static const struct gemm_dirs *expert_dirs(const struct cctx *c, double rows, double n, double k)
{
    return c->small_mnk > 0.0 && rows * n * k <= c->small_mnk ? &c->experts_small : &c->experts;
}

/* Forward and backward time of one GEMM shape. */
struct fb {
    double f; /* forward incl. quantising its activation input */
    double b; /* dgrad + wgrad incl. quantising the output gradient */
};

/* One direction's math time: the curve's time t_base over its factor, with its narrow term. */
static inline double gemm_dir_s(double t_base, const struct gemm_dirs *dir, int d, double narrow)
{
    double t = t_base * dir->div[d];
    return dir->half[d] > 0.0 ? t * (1.0 + dir->half[d] / narrow) : t;
}

/*
 * y[m,n] = x[m,k] W[k,n] with `groups` weight matrices sharing the m rows (grouped expert GEMM;
 * 1 for a plain GEMM); dir holds each of the three GEMMs' rate divisor (the grouped kernels'
 * factor) and narrow-dimension term (c->dense, or c->experts with the grouped figures, whose
 * backward GEMMs a host may have measured apart). The saturation is evaluated once for the
 * three GEMMs of one shape. Backward is dgrad dx = dy W^T plus wgrad dW += x^T dy, which
 * accumulates into the main-gradient buffer every micro-batch (Megatron/TE fuse the
 * accumulation: the weight-shaped output is read and written).
 */
static struct fb gemm_fb(
    const struct cctx *c, double m, double n, double k, double groups, const struct gemm_dirs *dir)
{
    struct fb r = {0.0, 0.0};
    if (m <= 0.0 || n <= 0.0 || k <= 0.0) {
        return r;
    }
    double flops = 2.0 * m * n * k;
    double t_base = flops * c->inv_peak / saturation(flops * c->inv_half);
    double narrow = fmin(m / groups, fmin(n, k)); /* each group's own rows */
    double t_fwd = gemm_dir_s(t_base, dir, GEMM_FWD, narrow);
    double t_dgrad = dir->is_uniform ? t_fwd : gemm_dir_s(t_base, dir, GEMM_DGRAD, narrow);
    double t_wgrad = dir->is_uniform ? t_fwd : gemm_dir_s(t_base, dir, GEMM_WGRAD, narrow);
    double in = c->in_bytes;
    double w = groups * n * k;
    double t_f = (m * k * in + w * in + m * n * c->ab) * c->inv_hbm;
    double t_d = (m * n * in + w * in + m * k * c->ab) * c->inv_hbm;
    double t_w = (m * k * in + m * n * in + w * 2.0 * c->grad_bytes) * c->inv_hbm;
    r.f = (t_fwd > t_f ? t_fwd : t_f) + m * k * c->quant_s;
    r.b = (t_dgrad > t_d ? t_dgrad : t_d) + (t_wgrad > t_w ? t_wgrad : t_w) + m * n * c->quant_s;
    if (c->emulated_quant) {
        /* Emulation re-quantises every operand of every call: the weights in forward and dgrad,
         * the input again for wgrad (nothing is cached between micro-batches). */
        r.f += w * c->quant_s;
        r.b += (w + m * k) * c->quant_s;
    }
    return r;
}

/* Accumulate one GEMM's forward and backward time. */
static void add_gemm(const struct cctx *c, double m, double n, double k, double *f, double *b)
{
    struct fb r = gemm_fb(c, m, n, k, 1.0, &c->dense);
    *f += r.f;
    *b += r.b;
}

static double elem(const struct cctx *c, double bytes)
{
    return bytes / c->elem_bw;
}

/* The MLP activation: an exp (SwiGLU) or tanh (GELU) per element, which a CPU host's cores run
 * well below its streaming rate (calibrate measures it apart); GPUs stream it like the rest. */
static double act(const struct cctx *c, double bytes)
{
    return bytes / c->act_bw;
}

/* Its backward, given the forward's bytes (mats + 1 per element: gate [and up] read, output
 * written): at its own calibrated rate over the bytes it moves (2 mats + 1: input and output
 * gradient read, input gradient written) where a host measured it (gpu.act_bwd_eff: a CPU's
 * SwiGLU backward runs one exp per element, like its forward, and took 1.05-1.6 x the forward's
 * time here depending on the row width); else the activation's work once more and the gradient's
 * bytes at the streaming rate: twice the forward where the two rates are one (GPUs). */
static double act_bwd(const struct cctx *c, double bytes, double mats)
{
    if (c->gpu->act_bwd_eff > 0.0) {
        double bwd_bytes = bytes * (2.0 * mats + 1.0) / (mats + 1.0);
        return bwd_bytes / (c->gpu->hbm_tbps * TBPS * c->gpu->act_bwd_eff);
    }
    return act(c, bytes) + elem(c, bytes);
}

/* Collective groups of the folding (DESIGN.md rank order). */
static void
place_tp(const struct moe_cluster *cl, const struct moe_layout *lay, struct moe_group_place *g)
{
    moe_comm_group_place(lay->tp, 1, cl->nvlink.domain_gpus, g);
}

static double graph_keep(const struct moe_options *opt, unsigned module)
{
    if (opt->cuda_graph_impl == MOE_CG_NONE) {
        return 1.0;
    }
    if (opt->cuda_graph_modules & (MOE_CGM_FULL_ITERATION | module)) {
        return 0.0;
    }
    return 1.0;
}

/*
 * Products of a kernel that computes whole rectangles (gpu.attn_rect = 1, the CPU reference:
 * each call multiplies its queries by every key up to its last query's, then zeroes the masked
 * scores), relative to the calibration's. The bench runs whole causal sequences: s^2 products for
 * s (s + 1) / 2 visible pairs, twice the causal FLOPs this file counts, and its efficiency absorbs
 * that factor. Under context parallelism each rank holds chunks c and 2 CP - 1 - c of length
 * L = s / (2 CP) (Megatron's load-balanced split) and runs one call per chunk against keys
 * [0, end of chunk): L^2 (2 CP + 1) products for 2 CP L^2 visible pairs, so (2 CP + 1) / (4 CP) of
 * the bench's products per visible pair (5/8 at CP 2). 1 where the kernel skips masked blocks,
 * without CP, or where a window shorter than the sequence cuts rows (the kernel tiles those).
 */
static double attn_rect_scale(const struct cctx *c, const struct moe_layout *lay, bool windowed)
{
    if (!(c->gpu->attn_rect > 0.0) || lay->cp <= 1 || windowed) {
        return 1.0;
    }
    double cp = lay->cp;
    return (2.0 * cp + 1.0) / (4.0 * cp);
}

struct attn_parts {
    double gemm_f, gemm_b, up_f, core_f, core_b, elem_bytes, ag_bytes, cp_kv_bytes;
};

static void attention(const struct cctx *c,
                      const struct moe_model_cfg *cfg,
                      const struct moe_layout *lay,
                      bool windowed,
                      double t,
                      double t_sp,
                      struct attn_parts *p)
{
    *p = (struct attn_parts){0};
    double h = cfg->hidden_size;
    double tp = lay->tp;
    double a_loc = cfg->num_attention_heads / tp;
    double d_qk;
    double d_v;
    if (cfg->is_mla) {
        double rope = cfg->qk_pos_emb_head_dim;
        double qk = cfg->qk_head_dim + rope;
        double ql = cfg->q_lora_rank;
        double kvl = cfg->kv_lora_rank;
        double up_b = 0.0;
        if (ql > 0.0) {
            add_gemm(c, t_sp, ql, h, &p->gemm_f, &p->gemm_b);
            add_gemm(c, t, a_loc * qk, ql, &p->up_f, &up_b);
        } else {
            add_gemm(c, t, a_loc * qk, h, &p->gemm_f, &p->gemm_b);
        }
        add_gemm(c, t_sp, kvl + rope, h, &p->gemm_f, &p->gemm_b);
        add_gemm(c, t, a_loc * (cfg->qk_head_dim + cfg->v_head_dim), kvl, &p->up_f, &up_b);
        add_gemm(c, t, h, a_loc * cfg->v_head_dim, &p->gemm_f, &p->gemm_b);
        p->gemm_f += p->up_f;
        p->gemm_b += up_b;
        d_qk = qk;
        d_v = cfg->v_head_dim;
        p->ag_bytes =
            t * (ql + kvl + rope) * c->ab; /* latents gathered after the duplicated down proj */
        p->elem_bytes += t * (ql + kvl) * c->ab * 2.0 + t * a_loc * rope * c->ab * 2.0 * 2.0 +
                         t * a_loc * (qk + d_v) * c->ab * 2.0; /* latent norms, RoPE, q/k concat */
        p->cp_kv_bytes = t * a_loc * (qk + d_v) * c->ab;
    } else {
        double d = cfg->kv_channels;
        double g_loc = cfg->num_query_groups / tp;
        add_gemm(c, t, (a_loc + 2.0 * g_loc) * d, h, &p->gemm_f, &p->gemm_b);
        add_gemm(c, t, h, a_loc * d, &p->gemm_f, &p->gemm_b);
        d_qk = d;
        d_v = d;
        p->ag_bytes = t * h * c->in_bytes;
        p->elem_bytes +=
            t * (a_loc + g_loc) * d * c->ab * 2.0 * (cfg->has_qk_layernorm ? 2.0 : 1.0);
        p->cp_kv_bytes = t * 2.0 * g_loc * d * c->ab;
    }
    double s = lay->seq_length;
    double kv_avg = s / 2.0; /* causal: a query sees half the keys on average */
    if (windowed && cfg->window_size > 0 && cfg->window_size < kv_avg) {
        kv_avg = cfg->window_size;
    }
    double flops = 2.0 * t * kv_avg * a_loc * (d_qk + d_v);
    double peak = c->gpu->peak_tflops[MOE_MATH_BF16] * TFLOPS;
    /* Narrow heads: the softmax's work per score (exp, scale, mask) weighs against the products'
     * 4 d FLOPs per score, as eff x d / (d + half_dim) at the head dimension d, each direction
     * with its own term (calibrate fits them; 0: the GEMMs' tile term, 1 where that is 0); with
     * rect != 1 the products' share alone scales: flops / (peak eff) x (rect + half_dim / d).
     * The term is work per score, so d is the mean of the query-key and value dimensions (the
     * products' 2 (d_qk + d_v) FLOPs per score): MLA's 24 + 16 at the narrowest (16) priced the
     * miniature's per-score work 25% high (validate dsv3-mla-rc: compute +14%). */
    double dn = fmin(0.5 * (d_qk + d_v), s);
    double hf = c->gpu->attn_fwd_half_dim > 0.0 ? c->gpu->attn_fwd_half_dim : c->half_dim;
    double hb = c->gpu->attn_bwd_half_dim > 0.0 ? c->gpu->attn_bwd_half_dim : c->half_dim;
    double rect = attn_rect_scale(c, lay, windowed && cfg->window_size > 0 && cfg->window_size < s);
    if (rect == 1.0) {
        p->core_f = flops / (peak * c->gpu->attn_fwd_eff * dn / (dn + hf));
        p->core_b = 2.5 * flops / (peak * c->gpu->attn_bwd_eff * dn / (dn + hb));
    } else {
        p->core_f = flops / (peak * c->gpu->attn_fwd_eff) * (rect + hf / dn);
        p->core_b = 2.5 * flops / (peak * c->gpu->attn_bwd_eff) * (rect + hb / dn);
    }
    /* A window shorter than a call's keys makes a tiling kernel take the queries in tiles of
     * `window` rows, each its own GEMM pair: the tiles beyond one per head and call at their
     * calibrated cost (gpu.attn_tile_us; the calls: each sequence of the micro-batch, or its two
     * chunks under CP, of s / (2 CP) queries). */
    if (windowed && cfg->window_size > 0 && cfg->window_size < s &&
        (c->gpu->attn_tile_us[0] > 0.0 || c->gpu->attn_tile_us[1] > 0.0)) {
        double calls = lay->mbs * (lay->cp > 1 ? 2.0 : 1.0);
        double q_call = lay->cp > 1 ? s / (2.0 * lay->cp) : s;
        double extra = a_loc * calls * (ceil(q_call / cfg->window_size) - 1.0);
        p->core_f += extra * c->gpu->attn_tile_us[0] * 1e-6;
        p->core_b += extra * c->gpu->attn_tile_us[1] * 1e-6;
    }
    p->elem_bytes += t_sp * h * 2.0 * 5.0; /* RMSNorm read+write, residual add */
}

struct mlp_parts {
    double f, b, act_f, elem_bytes, tp_f, tp_b;
};

static void dense_mlp(const struct cctx *c,
                      const struct moe_model_cfg *cfg,
                      const struct moe_layout *lay,
                      double ffn,
                      double t,
                      struct mlp_parts *p)
{
    double h = cfg->hidden_size;
    double mats = cfg->is_swiglu ? 2.0 : 1.0;
    double f_loc = ffn / lay->tp;
    p->f = 0.0;
    p->b = 0.0;
    add_gemm(c, t, f_loc * mats, h, &p->f, &p->b);
    add_gemm(c, t, h, f_loc, &p->f, &p->b);
    double act_bytes = t * f_loc * (mats + 1.0) * c->ab;
    p->act_f = act(c, act_bytes);
    p->f += p->act_f;
    p->b += act_bwd(c, act_bytes, mats);
}

/* Sequence-parallel AG + RS (or all-reduce without SP) of t x h around one TP block. */
static double tp_block_comm(const struct moe_cluster *cl,
                            const struct moe_layout *lay,
                            double ag_bytes,
                            double rs_bytes,
                            double *bytes)
{
    if (lay->tp <= 1) {
        return 0.0;
    }
    struct moe_group_place g;
    place_tp(cl, lay, &g);
    double n = lay->tp;
    if (lay->sequence_parallel) {
        *bytes += (ag_bytes + rs_bytes) * (n - 1.0) / n;
        return moe_comm_allgather_s(cl, &g, ag_bytes) + moe_comm_reducescatter_s(cl, &g, rs_bytes);
    }
    *bytes += rs_bytes * 2.0 * (n - 1.0) / n;
    return moe_comm_allreduce_s(cl, &g, rs_bytes);
}

/*
 * Routed experts of one rank processing `rows` token rows (after the ETP gather): fc1, activation
 * and fc2 forward and backward; *act_f gets the activation's forward time. One grouped kernel over
 * the local experts with each expert's rows padded to the kernel's tile; without
 * --moe-grouped-gemm each expert is its own GEMM. grouped_eff is the expert GEMMs' efficiency
 * relative to a dense GEMM of the same size (the MoE-layer microbenchmark measures it through
 * Megatron's expert path); without the grouped kernel each expert is its own, smaller GEMM (and its
 * own Python-level calls, counted in host_layer), so the sequential path is never faster.
 */
static struct fb routed_experts(const struct cctx *c,
                                const struct moe_model_cfg *cfg,
                                const struct moe_layout *lay,
                                const struct moe_options *opt,
                                double rows,
                                double *act_f)
{
    double h = cfg->hidden_size;
    double mats = cfg->is_swiglu ? 2.0 : 1.0;
    double e_loc = (double)cfg->num_experts / lay->ep;
    double fe_loc = (double)cfg->moe_ffn_hidden_size / lay->etp;
    /* The experts holding rows: all at balanced routing; a measured share of them otherwise (an
     * expert without rows runs no GEMM, so the others' rows are wider by as much). */
    double frac = opt->moe_active_expert_frac;
    double e_act = frac > 0.0 && frac < 1.0 ? fmax(1.0, e_loc * frac) : e_loc;
    double m_e = rows / e_act;
    double tile = c->gpu->gemm.grouped_tile_m > 0.0 ? c->gpu->gemm.grouped_tile_m : 1.0;
    struct fb fc1;
    struct fb fc2;
    if (opt->moe_grouped_gemm) {
        double m_pad = ceil(m_e / tile) * tile;
        double padded = m_pad * e_act;
        fc1 = gemm_fb(c, padded, fe_loc * mats, h, e_act, expert_dirs(c, m_pad, fe_loc * mats, h));
        fc2 = gemm_fb(c, padded, h, fe_loc, e_act, expert_dirs(c, m_pad, h, fe_loc));
    } else {
        fc1 = gemm_fb(c, m_e, fe_loc * mats, h, 1.0, expert_dirs(c, m_e, fe_loc * mats, h));
        fc2 = gemm_fb(c, m_e, h, fe_loc, 1.0, expert_dirs(c, m_e, h, fe_loc));
        fc1.f *= e_act;
        fc1.b *= e_act;
        fc2.f *= e_act;
        fc2.b *= e_act;
    }
    if (c->emulated_quant && e_act < e_loc) {
        /* Emulation re-quantises every local expert's weights, rows or none (engine/experts.c). */
        double idle_w = (e_loc - e_act) * fe_loc * h * (mats + 1.0) * c->quant_s;
        fc1.f += idle_w;
        fc1.b += idle_w;
    }
    double act_bytes = rows * fe_loc * (mats + 1.0) * c->ab;
    *act_f = act(c, act_bytes);
    struct fb r = {fc1.f + fc2.f + *act_f, fc1.b + fc2.b + act_bwd(c, act_bytes, mats)};
    if (cfg->has_linear_bias && c->gpu->bias_pass > 0.0) {
        /* fc1's and fc2's biases in their own pass: the outputs read and written forward, the
         * output gradients read for the bias gradients backward, at their own rates where a host
         * measured them (a CPU's per-expert calls run on cache-resident rows). */
        double out_bytes = rows * (fe_loc * mats + h) * c->ab;
        double hbm = c->gpu->hbm_tbps * TBPS;
        r.f += c->gpu->bias_eff > 0.0 ? 2.0 * out_bytes / (hbm * c->gpu->bias_eff)
                                      : elem(c, 2.0 * out_bytes);
        r.b += c->gpu->bias_bwd_eff > 0.0 ? out_bytes / (hbm * c->gpu->bias_bwd_eff)
                                          : elem(c, out_bytes);
    }
    return r;
}

static void moe_block(const struct cctx *c,
                      const struct moe_model_cfg *cfg,
                      const struct moe_layout *lay,
                      const struct moe_options *opt,
                      double t,
                      double t_sp,
                      double load,
                      struct moe_layer_cost *out,
                      double *expert_act_f,
                      double *shared_f_out,
                      double *moe_tp_f)
{
    const struct moe_cluster *cl = c->cl;
    double h = cfg->hidden_size;
    double e = cfg->num_experts;
    double k = cfg->moe_router_topk;
    double r1 = t_sp * k * lay->etp; /* rows a rank's experts process at the mean load */
    double r = r1 * load;            /* the busiest rank's rows */
    bool flex = opt->dispatcher == MOE_DISPATCH_DEEPEP || opt->dispatcher == MOE_DISPATCH_HYBRIDEP;

    /* Router (BF16 GEMM to E logits) and its elementwise score / top-k work. */
    double router_f = moe_compute_gemm_s(c->gpu, MOE_MATH_BF16, 1.0, t_sp, e, h, c->ab) +
                      elem(c, t_sp * e * 4.0 * 6.0);
    /* Experts at the mean rows; the busiest rank's extra time is the exchange's wait. */
    struct fb mean = routed_experts(c, cfg, lay, opt, r1, expert_act_f);
    if (load > 1.0 && lay->ep > 1) {
        double act_busy = 0.0;
        struct fb busy = routed_experts(c, cfg, lay, opt, r, &act_busy);
        out->fwd_combine_wait += busy.f - mean.f;
        out->bwd_dispatch_wait += busy.b - mean.b;
    } else if (load > 1.0) {
        mean = routed_experts(c, cfg, lay, opt, r, expert_act_f); /* one EP rank: no peer to wait */
    }
    double exp_f = mean.f;
    double exp_b = mean.b;

    double shared_f = 0.0;
    double shared_b = 0.0;
    double shared_tp = 0.0;
    double fs = cfg->moe_shared_expert_intermediate_size;
    if (fs > 0.0) {
        struct mlp_parts sp = {0};
        dense_mlp(c, cfg, lay, fs, t, &sp);
        shared_f = sp.f;
        shared_b = sp.b;
        shared_tp = tp_block_comm(cl, lay, t * h * c->in_bytes, t * h * c->ab, &out->tp_bytes);
    }
    *shared_f_out = shared_f;
    out->fwd_expert += exp_f + shared_f;
    out->bwd_expert += exp_b + shared_b;
    out->fwd_compute += router_f + elem(c, t_sp * h * c->ab * 5.0);
    out->bwd_compute += 2.0 * router_f + elem(c, t_sp * h * c->ab * 5.0 * 2.0);

    /* ETP: gather expert tokens inside the ETP group, reduce-scatter the outputs. */
    double etp_comm = 0.0;
    if (lay->etp > 1) {
        struct moe_group_place g;
        moe_comm_group_place(lay->etp, 1, cl->nvlink.domain_gpus, &g);
        etp_comm = moe_comm_allgather_s(cl, &g, r * h * c->ab) +
                   moe_comm_reducescatter_s(cl, &g, r * h * c->ab);
        out->tp_bytes += 2.0 * 2.0 * r * h * c->ab * (lay->etp - 1.0) / lay->etp;
    }
    out->fwd_tp += shared_tp + etp_comm;
    out->bwd_tp += shared_tp + etp_comm;

    /* EP dispatch / combine. */
    struct moe_group_place g;
    moe_comm_group_place(lay->ep, lay->etp, cl->nvlink.domain_gpus, &g);
    double permute_f = 0.0;
    double unpermute_f = 0.0;
    double pass_bw = c->gpu->hbm_tbps * TBPS *
                     (cl->dispatch.permute_bytes_eff > 0.0 ? cl->dispatch.permute_bytes_eff : 1.0);
    bool unfused = flex && opt->is_unfused_dispatch && lay->ep > 1;
    if (!flex || unfused) {
        permute_f = (t_sp * k * h * c->ab * 2.0) / pass_bw;
        unpermute_f = (r * h * c->ab * 2.0 + t_sp * h * c->ab) / pass_bw;
    }
    /* Every exchange carries the activations' precision (BF16): Megatron-Core hands the
     * dispatcher the unquantised hidden states and Transformer Engine quantises after it, in the
     * expert GEMM (fused_a2a.py sizes DeepEP's buffer for >= 2 bytes per element; the GB200
     * DeepSeek-V3 guide: MXFP8 "EP Dispatch ... not yet supported"). DeepSeek's own framework
     * dispatches FP8; Megatron-Core does not. */
    double disp_bytes = c->ab;
    double d_f = 0.0;
    double comb = 0.0;
    double d_b = 0.0;
    double reach = 1.0; /* EP domains a token reaches (all-to-all and flex dispatchers) */
    if (lay->ep > 1) {
        struct moe_ep_traffic tr_disp = {0};
        struct moe_ep_traffic tr_comb = {0};
        if (opt->dispatcher == MOE_DISPATCH_ALLGATHER) {
            double gathered = t_sp * h * c->ab * lay->ep;
            d_f = moe_comm_allgather_s(cl, &g, gathered);
            comb = moe_comm_reducescatter_s(cl, &g, gathered);
            tr_disp.inter_bytes = gathered * (g.size - g.local) / g.size;
            tr_disp.intra_bytes = gathered * (g.local - 1.0) / g.size;
            tr_comb = tr_disp;
        } else {
            reach =
                moe_comm_expected_domains(cfg->num_experts, cfg->moe_router_topk, g.num_domains,
                                          cfg->moe_router_num_groups, cfg->moe_router_group_topk);
            double ie = cl->nvlink.eff;
            double xe = cl->net.a2a_eff;
            if (opt->dispatcher == MOE_DISPATCH_DEEPEP) {
                ie = cl->dispatch.deepep_intra_eff;
                xe = cl->dispatch.deepep_inter_eff;
            } else if (opt->dispatcher == MOE_DISPATCH_HYBRIDEP) {
                ie = cl->dispatch.hybridep_intra_eff;
                xe = cl->dispatch.hybridep_inter_eff;
            }
            double gpus =
                moe_comm_expected_domains(cfg->num_experts, cfg->moe_router_topk, lay->ep, 0, 0);
            moe_comm_ep_traffic(cl, &g, t_sp, h * disp_bytes, cfg->moe_router_topk, gpus, reach,
                                flex, ie, xe, &tr_disp);
            moe_comm_ep_traffic(cl, &g, t_sp, h * c->ab, cfg->moe_router_topk, gpus, reach, flex,
                                ie, xe, &tr_comb);
            d_f = tr_disp.time_s;
            comb = tr_comb.time_s;
            /* Backward dispatch carries BF16 gradients. */
            d_b = tr_comb.time_s;
        }
        if (d_b == 0.0) {
            d_b = d_f;
        }
        /* The busiest rank receives load x the mean. */
        d_f *= load;
        comb *= load;
        d_b *= load;
        double bytes = tr_disp.intra_bytes + tr_disp.inter_bytes +
                       3.0 * (tr_comb.intra_bytes + tr_comb.inter_bytes);
        out->ep_bytes += bytes;
        out->ep_inter_bytes += tr_disp.inter_bytes + 3.0 * tr_comb.inter_bytes;
    }
    double hier_fd = 0.0, hier_fc = 0.0, hier_bc = 0.0, hier_bd = 0.0;
    if (unfused) {
        /* The hierarchical path run as separate passes (engine/hier.c). The sender gathers one
         * copy of each token per node reached (dispatch; the output gradients in the combine's
         * backward) and the token's owner adds the nodes' partial sums back (combine, into a
         * cleared buffer; the input gradients in the dispatch's backward). Both exchanges copy
         * the part that stays on the rank: its own node's copies in the cross-node step, and in
         * the forwarding step the rows kept for the proxy's own experts (1 / ranks per node of
         * them; the rest crosses NVLink, priced above). A proxy's rows are its experts' load: the
         * busiest rank's extra forwarding and permuting is the next exchange's wait, as its extra
         * expert time is. */
        double d = (double)g.num_domains;
        double copies = t_sp * reach;
        double row = h * c->ab / pass_bw;
        double gather = copies * row * 2.0;
        double sum_back = copies * row * 3.0;
        double clear = t_sp * row;
        double fwd_copy = r1 / g.local * row * 2.0;
        double stays = copies / d * row * 2.0 + fwd_copy;
        hier_fd = gather + stays;
        hier_fc = sum_back + clear + stays;
        hier_bc = gather + stays;
        hier_bd = sum_back + stays;
        if (load > 1.0) {
            double extra = (load - 1.0) * (2.0 * fwd_copy + permute_f);
            out->fwd_combine_wait += extra;
            out->bwd_dispatch_wait += extra;
        }
    }
    /* The load-balancing losses sum the token counts per expert over their group before the
     * dispatch, one all-reduce per loss and forward (Megatron's
     * get_tokens_per_expert_and_token_count: routing_map.sum(0), int64): aux_loss and
     * seq_aux_loss over TP x CP, global_aux_loss over TP x DP x CP (rank order TP, CP, DP). The
     * engine times it with the dispatch. A one-rank group costs nothing. */
    double counts = cfg->num_experts * 8.0;
    struct moe_group_place lbg;
    moe_comm_group_place(lay->tp * lay->cp, 1, cl->nvlink.domain_gpus, &lbg);
    double lb = ((opt->aux_loss_coeff > 0.0) + (opt->seq_aux_loss_coeff > 0.0)) *
                moe_comm_allreduce_s(cl, &lbg, counts);
    if (opt->global_aux_loss_coeff > 0.0) {
        moe_comm_group_place(lay->tp * lay->cp * lay->dp, 1, cl->nvlink.domain_gpus, &lbg);
        lb += moe_comm_allreduce_s(cl, &lbg, counts);
    }
    /* A phase is named by the forward operation: backward, the gradient of combine (the output
     * gradients to the experts: dispatch-like bytes, the unpermute's gradient) is combine and the
     * gradient of dispatch (back to the tokens, after the expert GEMMs) is dispatch, as the engine
     * times them. */
    out->fwd_dispatch += lb + d_f + permute_f + hier_fd;
    out->fwd_combine += comb + unpermute_f + hier_fc;
    out->bwd_combine += d_b + unpermute_f + hier_bc;
    out->bwd_dispatch += comb + permute_f + hier_bd;
    *moe_tp_f = etp_comm + shared_tp; /* the block's TP-group collectives, forward */
}

/*
 * Host work of one layer's forward pass (struct moe_host_counts, compute.h): Python-level calls
 * (py) and kernels launched from C++ inside those calls (cpp), from host_ops and fp8_quant_ops;
 * modules a CUDA graph captures launch nothing from the host. syncs: host synchronisations (the
 * dropless token counts; GPT-OSS's activation); py_post, cpp_post: the part launched after the
 * token counts' synchronisation (the routed experts and their exchanges), moe_py, moe_cpp: the MoE
 * block's part (router onwards), both included in py and cpp.
 */
static void host_layer(const struct moe_model_cfg *cfg,
                       const struct moe_layout *lay,
                       const struct moe_options *opt,
                       struct moe_layer_kind kind,
                       struct moe_host_counts *hc)
{
    const struct host_ops *h = &host_ops;
    const struct fp8_quant_ops *q = &fp8_quant_ops[opt->recipe];
    double tp_blocks = lay->tp > 1 ? h->tp_sp : 0.0; /* collective calls per TP block */
    double a_py = cfg->is_mla ? h->mla + 2.0 * tp_blocks : h->attn + tp_blocks;
    a_py += cfg->has_qk_layernorm ? h->qk_norm : 0.0;
    /* MLA quantises q/kv down (twice the same input), q/kv up (norm fused) and proj inputs. */
    double a_cpp = cfg->is_mla ? 3.0 * q->linear + 2.0 * q->ln_linear + 5.0 * q->per_gemm
                               : q->linear + q->ln_linear + 2.0 * q->per_gemm;
    double keep = graph_keep(opt, MOE_CGM_ATTN);
    *hc = (struct moe_host_counts){.py = a_py * keep, .cpp = a_cpp * keep};
    if (!kind.is_moe) {
        keep = graph_keep(opt, MOE_CGM_MLP);
        hc->py += (h->dense_mlp + tp_blocks) * keep;
        hc->cpp += (q->linear + q->ln_linear + 2.0 * q->per_gemm) * keep;
        return;
    }
    double n = (double)cfg->num_experts / lay->ep; /* local experts */
    bool flex = opt->dispatcher == MOE_DISPATCH_DEEPEP || opt->dispatcher == MOE_DISPATCH_HYBRIDEP;
    double router = h->router + (opt->force_load_balancing ? h->forced : 0.0);
    double py_attn = hc->py;
    double cpp_attn = hc->cpp;
    hc->py += router * graph_keep(opt, MOE_CGM_MOE_ROUTER | MOE_CGM_MOE);
    hc->py += (flex ? 0.0 : h->pre_a2a) * graph_keep(opt, MOE_CGM_MOE_PREPROCESS | MOE_CGM_MOE);
    keep = graph_keep(opt, MOE_CGM_MOE);
    double e_py = flex ? h->exp_flex : h->exp_a2a;
    double e_cpp = 2.0 * (n * q->grouped_per_expert + q->grouped_fixed + q->per_gemm);
    if (opt->moe_grouped_gemm) {
        e_cpp += 2.0 * n; /* one cuBLASLt matmul per local expert, fc1 and fc2 */
        /* With linear biases the grouped fc2 skips its bias and TEGroupedMLP._apply_bias adds it
         * in a Python loop: per local expert t + b * p (two launching ops), then torch.cat. */
        e_py += cfg->has_linear_bias ? (2.0 * n + 1.0) * h->plain_op : 0.0;
    } else {
        e_py += h->seq_expert * n;
    }
    e_py += cfg->is_quick_geglu ? h->quick_geglu : 0.0;
    hc->py += e_py * keep;
    hc->cpp += e_cpp * keep;
    hc->py_post = e_py * keep;
    hc->cpp_post = e_cpp * keep;
    if (cfg->moe_shared_expert_intermediate_size > 0) {
        /* The router's CUDA-graph scope captures the shared expert too. */
        double ks = graph_keep(opt, MOE_CGM_MOE_ROUTER | MOE_CGM_MOE);
        hc->py += (h->shared + tp_blocks) * ks;
        hc->cpp += (2.0 * q->linear + 2.0 * q->per_gemm) * ks;
    }
    /* Every dropless dispatcher copies its token counts to the host once per forward (EP=1
     * included); a capacity factor pads instead, and a full-iteration graph keeps them on the
     * device (paged stash). */
    bool full_graph =
        opt->cuda_graph_impl != MOE_CG_NONE && (opt->cuda_graph_modules & MOE_CGM_FULL_ITERATION);
    hc->syncs = opt->capacity_factor <= 0.0 && !full_graph ? 1.0 : 0.0;
    hc->syncs += cfg->is_quick_geglu ? keep : 0.0;
    hc->moe_py = hc->py - py_attn;
    hc->moe_cpp = hc->cpp - cpp_attn;
}

/*
 * Host work selective recompute adds to one layer (--recompute-granularity selective): *fwd_py,
 * the checkpoint wrappers' calls in the forward (each an autograd Function, so a backward node
 * too); *rc_py, *rc_cpp and *rc_syncs, the recomputed modules' calls, C++ launches and host
 * synchronisations, run again inside the backward. A module a CUDA graph captures re-runs inside
 * its graph. Full recompute re-runs the whole forward (moe_compute_layer).
 */
static void host_recompute(const struct moe_model_cfg *cfg,
                           const struct moe_layout *lay,
                           const struct moe_options *opt,
                           struct moe_layer_kind kind,
                           const struct moe_host_counts *hc,
                           double *fwd_py,
                           double *rc_py,
                           double *rc_cpp,
                           double *rc_syncs)
{
    const struct host_ops *h = &host_ops;
    const struct fp8_quant_ops *q = &fp8_quant_ops[opt->recipe];
    unsigned rc = opt->recompute == MOE_RECOMPUTE_SELECTIVE ? opt->recompute_modules : 0u;
    *fwd_py = 0.0;
    *rc_py = 0.0;
    *rc_cpp = 0.0;
    *rc_syncs = 0.0;
    double wraps = 0.0;
    double ka = graph_keep(opt, MOE_CGM_ATTN);
    if (rc & MOE_RC_CORE_ATTN) {
        wraps += ka;
        *rc_py += h->rc_core * ka;
    }
    if ((rc & MOE_RC_MLA_UP_PROJ) && cfg->is_mla) {
        wraps += ka;
        *rc_py += h->rc_up_proj * ka;
        *rc_cpp += 2.0 * (q->linear + q->per_gemm) * ka;
    }
    if ((rc & MOE_RC_LAYERNORM) && cfg->is_mla) {
        wraps += ka;
        *rc_py += h->rc_norm * ka;
    }
    if (!kind.is_moe) {
        double km = graph_keep(opt, MOE_CGM_MLP);
        if (rc & MOE_RC_MLP) {
            double tp_blocks = lay->tp > 1 ? h->tp_sp : 0.0;
            wraps += km;
            *rc_py += (h->dense_mlp + tp_blocks) * km;
            *rc_cpp += (q->linear + q->ln_linear + 2.0 * q->per_gemm) * km;
        }
    } else {
        double kr = graph_keep(opt, MOE_CGM_MOE_ROUTER | MOE_CGM_MOE);
        double ke = graph_keep(opt, MOE_CGM_MOE);
        if (rc & MOE_RC_LAYERNORM) {
            wraps += kr;
            *rc_py += h->rc_norm * kr;
        }
        if (rc & MOE_RC_MOE) {
            /* The whole MoE block again, its token-count synchronisations included; its own
             * modules are not checkpointed inside it. */
            wraps += ke;
            *rc_py += hc->moe_py;
            *rc_cpp += hc->moe_cpp;
            *rc_syncs += hc->syncs;
        } else {
            if (rc & MOE_RC_MOE_ACT) {
                wraps += ke;
                *rc_py += (h->rc_act + (cfg->is_quick_geglu ? h->quick_geglu : 0.0)) * ke;
                *rc_syncs += cfg->is_quick_geglu ? ke : 0.0;
            }
            if ((rc & MOE_RC_SHARED_EXPERTS) && cfg->moe_shared_expert_intermediate_size > 0) {
                wraps += kr;
                *rc_py += h->shared * kr;
                *rc_cpp += (2.0 * q->linear + 2.0 * q->per_gemm) * kr;
            }
        }
    }
    *fwd_py = wraps * h->rc_wrap;
}

/*
 * Parameter tensors of one layer on a rank, each of which runs host work in every backward pass:
 * Megatron-Core's DistributedDataParallel registers a Python hook on every parameter's gradient
 * accumulator (distributed/distributed_data_parallel.py, _make_backward_post_hook: every
 * micro-batch, it checks the gradient, clears param.grad and counts the parameter ready for its
 * bucket), and Transformer Engine's GroupedLinear keeps one weight (and bias) per local expert,
 * handled one by one in its backward. Counted per module: the attention's norm-fused QKV and
 * output projection (MLA: the down and up projections and their norms), q/k norms, the MLP's
 * norm-fused fc1 and fc2 (a MoE layer: its norm, the router and two GEMMs per local expert, the
 * shared expert's two), biases where the model has them. Modules a CUDA graph captures are
 * counted as none, as their launches are (an assumption: their weight gradients come out of the
 * graphed backward; no profile of a graphed layer's hooks was found).
 */
static double layer_param_tensors(const struct moe_model_cfg *cfg,
                                  const struct moe_layout *lay,
                                  const struct moe_options *opt,
                                  struct moe_layer_kind kind)
{
    double bias = cfg->has_linear_bias ? 1.0 : 0.0;
    double attn = cfg->is_mla ? 8.0 : 3.0 + 2.0 * bias;
    attn += cfg->has_qk_layernorm ? 2.0 : 0.0;
    double n = attn * graph_keep(opt, MOE_CGM_ATTN);
    if (!kind.is_moe) {
        return n + (3.0 + 2.0 * bias) * graph_keep(opt, MOE_CGM_MLP);
    }
    double keep = graph_keep(opt, MOE_CGM_MOE);
    double e_loc = (double)cfg->num_experts / lay->ep;
    n += 1.0 * keep + 1.0 * graph_keep(opt, MOE_CGM_MOE_ROUTER | MOE_CGM_MOE);
    n += 2.0 * e_loc * (1.0 + bias) * keep;
    if (cfg->moe_shared_expert_intermediate_size > 0) {
        n += 2.0 * graph_keep(opt, MOE_CGM_MOE_ROUTER | MOE_CGM_MOE);
    }
    return n;
}

/* Tokens a rank's layer processes per micro-batch (mbs x seq / CP), and *t_sp those its
 * sequence-parallel regions hold (divided by TP under SP, or with TP 1). */
static double layer_tokens(const struct moe_layout *lay, double *t_sp)
{
    double t = (double)lay->mbs * lay->seq_length / lay->cp;
    *t_sp = (lay->sequence_parallel || lay->tp == 1) ? t / lay->tp : t;
    return t;
}

void moe_compute_layer_attn(const struct moe_model_cfg *cfg,
                            const struct moe_cluster *cl,
                            const struct moe_layout *lay,
                            const struct moe_options *opt,
                            struct moe_layer_kind kind,
                            struct moe_layer_base *base)
{
    *base = (struct moe_layer_base){0};
    struct moe_layer_cost *out = &base->lc;
    struct cctx c;
    cctx_init(&c, cl, opt);
    double h = cfg->hidden_size;
    double t_sp = 0.0;
    double t = layer_tokens(lay, &t_sp);

    struct attn_parts at;
    attention(&c, cfg, lay, kind.is_windowed, t, t_sp, &at);
    double attn_tp = tp_block_comm(cl, lay, at.ag_bytes, t * h * c.ab, &out->tp_bytes);
    double attn_elem = elem(&c, at.elem_bytes);
    out->fwd_compute = at.gemm_f + at.core_f + attn_elem;
    out->bwd_compute = at.gemm_b + at.core_b + 2.0 * attn_elem;
    out->attn_core_fwd = at.core_f;
    out->attn_core_bwd = at.core_b;
    out->fwd_tp = attn_tp;
    out->bwd_tp = attn_tp;
    base->core_f = at.core_f;
    base->up_f = at.up_f;

    /* Context parallel: ring exchange of K/V, (cp-1) steps; backward also returns dK/dV. */
    if (lay->cp > 1) {
        struct moe_group_place g;
        moe_comm_group_place(lay->cp, lay->tp, cl->nvlink.domain_gpus, &g);
        double step = moe_comm_p2p_s(cl, g.num_domains == 1, at.cp_kv_bytes);
        out->fwd_cp = step * (lay->cp - 1.0);
        out->bwd_cp = 2.0 * step * (lay->cp - 1.0);
        out->cp_bytes = 3.0 * at.cp_kv_bytes * (lay->cp - 1.0);
    }

    base->norm_f = elem(&c, t_sp * h * c.ab * 2.0) + t_sp * h * c.quant_s;
}

void moe_compute_layer_block(const struct moe_model_cfg *cfg,
                             const struct moe_cluster *cl,
                             const struct moe_layout *lay,
                             const struct moe_options *opt,
                             struct moe_layer_kind kind,
                             double load_factor,
                             struct moe_layer_base *base)
{
    struct moe_layer_cost *out = &base->lc;
    struct cctx c;
    cctx_init(&c, cl, opt);
    double h = cfg->hidden_size;
    double t_sp = 0.0;
    double t = layer_tokens(lay, &t_sp);
    if (kind.is_moe) {
        double fwd_before = out->fwd_compute;
        moe_block(&c, cfg, lay, opt, t, t_sp, load_factor, out, &base->expert_act_f,
                  &base->shared_f, &base->moe_tp_f);
        base->moe_compute_f = out->fwd_compute - fwd_before;
    } else {
        struct mlp_parts mp = {0};
        dense_mlp(&c, cfg, lay, cfg->ffn_hidden_size, t, &mp);
        double mlp_tp = tp_block_comm(cl, lay, t * h * c.in_bytes, t * h * c.ab, &out->tp_bytes);
        double mlp_elem = elem(&c, t_sp * h * c.ab * 5.0);
        out->fwd_compute += mp.f + mlp_elem;
        out->bwd_compute += mp.b + 2.0 * mlp_elem;
        out->fwd_tp += mlp_tp;
        out->bwd_tp += mlp_tp;
        base->mlp_f = mp.f;
        base->mlp_tp = mlp_tp;
    }
    out->tp_bytes *= 2.0; /* forward and backward move the same volume */
    out->fwd_shared = base->shared_f;

    /* Host: the forward's calls and C++ launches (moe_compute_layer_finish prices them). */
    host_layer(cfg, lay, opt, kind, &base->hc);
    base->param_tensors = layer_param_tensors(cfg, lay, opt, kind);
}

void moe_compute_layer_base(const struct moe_model_cfg *cfg,
                            const struct moe_cluster *cl,
                            const struct moe_layout *lay,
                            const struct moe_options *opt,
                            struct moe_layer_kind kind,
                            double load_factor,
                            struct moe_layer_base *base)
{
    moe_compute_layer_attn(cfg, cl, lay, opt, kind, base);
    moe_compute_layer_block(cfg, cl, lay, opt, kind, load_factor, base);
}

void moe_compute_layer_finish(const struct moe_model_cfg *cfg,
                              const struct moe_cluster *cl,
                              const struct moe_layout *lay,
                              const struct moe_options *opt,
                              struct moe_layer_kind kind,
                              const struct moe_layer_base *base,
                              double offload_bytes,
                              struct moe_layer_cost *out)
{
    *out = base->lc;
    unsigned rc = opt->recompute == MOE_RECOMPUTE_SELECTIVE ? opt->recompute_modules : 0u;
    bool full = opt->recompute == MOE_RECOMPUTE_FULL;
    if (kind.is_moe) {
        if (rc & MOE_RC_MOE) {
            /* The whole MoE block again: router and permutes, the experts (the busiest rank's:
             * the wait comes back with them), and its collectives. */
            out->rc_compute += base->moe_compute_f;
            out->rc_expert += out->fwd_expert;
            out->rc_combine_wait += out->fwd_combine_wait;
            out->rc_dispatch += out->fwd_dispatch;
            out->rc_combine += out->fwd_combine;
            out->rc_tp += base->moe_tp_f;
        } else {
            out->rc_expert += (rc & MOE_RC_MOE_ACT) ? base->expert_act_f : 0.0;
            out->rc_expert += (rc & MOE_RC_SHARED_EXPERTS) ? base->shared_f : 0.0;
        }
    } else if (rc & MOE_RC_MLP) {
        out->rc_compute += base->mlp_f;
        out->rc_tp += base->mlp_tp / 2.0; /* the input all-gather again */
    }

    if (full) {
        /* The layer's whole forward, each part in its own phase (Megatron's checkpointed
         * TransformerLayer re-runs attention, router, dispatch, experts and combine). */
        out->rc_compute = out->fwd_compute;
        out->rc_expert = out->fwd_expert;
        out->rc_combine_wait = out->fwd_combine_wait;
        out->rc_tp = out->fwd_tp;
        out->rc_cp = out->fwd_cp;
        out->rc_dispatch = out->fwd_dispatch;
        out->rc_combine = out->fwd_combine;
    } else {
        out->rc_compute += (rc & MOE_RC_CORE_ATTN) ? base->core_f : 0.0;
        out->rc_compute += (rc & MOE_RC_LAYERNORM) ? 2.0 * base->norm_f : 0.0;
        out->rc_compute += (rc & MOE_RC_MLA_UP_PROJ) ? base->up_f : 0.0;
    }
    out->recompute = out->rc_compute + out->rc_expert + out->rc_combine_wait;

    if (offload_bytes > 0.0) {
        out->offload_copy = moe_compute_offload_copy_s(cl, offload_bytes);
    }

    /* Host: the forward's calls and C++ launches; backward runs one Python backward node per
     * forward call and twice the C++ launches (dgrad and wgrad GEMMs per expert, the gradients'
     * quantisation). Full recompute launches the forward again inside the backward. */
    const struct moe_host_counts *hc = &base->hc;
    double rc_wrap_py = 0.0;
    double rc_py = 0.0;
    double rc_cpp = 0.0;
    double rc_syncs = 0.0;
    host_recompute(cfg, lay, opt, kind, hc, &rc_wrap_py, &rc_py, &rc_cpp, &rc_syncs);
    double py = hc->py + rc_wrap_py; /* 0 unless selective recompute */
    double cpp = hc->cpp;
    double t_py = cl->gpu.kernel_launch_us * 1e-6;
    double t_cpp = cl->gpu.host_cpp_op_us * 1e-6;
    double t_sync = cl->overheads.moe_host_sync_us * 1e-6;
    out->host_fwd = py * t_py + cpp * t_cpp;
    out->host_bwd =
        py * t_py + 2.0 * cpp * t_cpp + base->param_tensors * cl->gpu.host_param_us * 1e-6;
    out->host_sync = hc->syncs * t_sync;
    out->rc_host = full ? out->host_fwd : rc_py * t_py + rc_cpp * t_cpp;
    out->rc_host_sync = full ? out->host_sync : rc_syncs * t_sync;
    out->host_fwd_post = hc->syncs > 0.0 ? hc->py_post * t_py + hc->cpp_post * t_cpp : 0.0;
}

void moe_compute_layer(const struct moe_model_cfg *cfg,
                       const struct moe_cluster *cl,
                       const struct moe_layout *lay,
                       const struct moe_options *opt,
                       struct moe_layer_kind kind,
                       double load_factor,
                       double offload_bytes,
                       struct moe_layer_cost *out)
{
    struct moe_layer_base base;
    moe_compute_layer_base(cfg, cl, lay, opt, kind, load_factor, &base);
    moe_compute_layer_finish(cfg, cl, lay, opt, kind, &base, offload_bytes, out);
}

double moe_compute_offload_copy_s(const struct moe_cluster *cl, double bytes)
{
    double link = cl->host.link_gbps * GIBPS * (cl->host.link_eff > 0.0 ? cl->host.link_eff : 1.0);
    return bytes / link;
}

double moe_compute_sched_host_s(const struct moe_cluster *cl,
                                const struct moe_options *opt,
                                int chunks,
                                int transfers,
                                bool backward)
{
    const struct host_ops *h = &host_ops;
    double calls = chunks * (backward ? h->sched_b : h->sched_f) + transfers * h->sched_p2p;
    /* A full-iteration CUDA graph replays the schedule too. */
    return calls * cl->gpu.kernel_launch_us * 1e-6 * graph_keep(opt, MOE_CGM_FULL_ITERATION);
}

void moe_compute_loss(const struct moe_model_cfg *cfg,
                      const struct moe_cluster *cl,
                      const struct moe_layout *lay,
                      const struct moe_options *opt,
                      struct moe_layer_cost *out)
{
    *out = (struct moe_layer_cost){0};
    struct cctx c;
    cctx_init(&c, cl, opt);
    double t = (double)lay->mbs * lay->seq_length / lay->cp;
    double v_loc = (double)moe_cfg_padded_vocab(cfg, lay->tp) / lay->tp;
    double h = cfg->hidden_size;
    /* The output layer runs in BF16 (Megatron keeps the LM head out of FP8). */
    double g = moe_compute_gemm_s(c.gpu, MOE_MATH_BF16, 1.0, t, v_loc, h, c.ab);
    double ce = elem(&c, t * v_loc * (2.0 + 4.0 + 4.0)); /* logits read, FP32 softmax, grad write */
    out->fwd_compute = g + ce + elem(&c, t * h * c.ab * 2.0);
    out->bwd_compute = 2.0 * g + ce;
    double dummy = 0.0;
    out->fwd_tp = tp_block_comm(cl, lay, t * h * c.ab, 0.0, &dummy);
    out->bwd_tp = out->fwd_tp;
    out->tp_bytes = 2.0 * dummy;
    out->host_fwd = 8.0 * cl->gpu.kernel_launch_us * 1e-6;
    out->host_bwd = out->host_fwd;
}

void moe_compute_mtp_extra(const struct moe_model_cfg *cfg,
                           const struct moe_cluster *cl,
                           const struct moe_layout *lay,
                           const struct moe_options *opt,
                           struct moe_layer_cost *out)
{
    *out = (struct moe_layer_cost){0};
    struct cctx c;
    cctx_init(&c, cl, opt);
    double t = (double)lay->mbs * lay->seq_length / lay->cp;
    double h = cfg->hidden_size;
    /* eh_proj: [embedding ; hidden] (2h) -> h, column-parallel over TP; two norms and an embedding.
     */
    out->fwd_compute =
        moe_compute_gemm_s(c.gpu, MOE_MATH_BF16, 1.0, t, h / lay->tp, 2.0 * h, c.ab) +
        elem(&c, t * h * c.ab * 6.0);
    out->bwd_compute = 2.0 * out->fwd_compute;
    out->host_fwd = 6.0 * cl->gpu.kernel_launch_us * 1e-6;
    out->host_bwd = out->host_fwd;
}

void moe_compute_embedding(const struct moe_model_cfg *cfg,
                           const struct moe_cluster *cl,
                           const struct moe_layout *lay,
                           const struct moe_options *opt,
                           struct moe_layer_cost *out)
{
    *out = (struct moe_layer_cost){0};
    double t = (double)lay->mbs * lay->seq_length / lay->cp;
    double hbm = cl->gpu.hbm_tbps * TBPS * cl->gpu.hbm_eff;
    double ab = opt->is_fp32_training ? 4.0 : 2.0;
    out->fwd_compute = t * cfg->hidden_size * ab * 2.0 / hbm;
    out->bwd_compute = 2.0 * out->fwd_compute;
    if (lay->tp > 1) {
        /* Vocab-parallel embedding: partial rows reduced (reduce-scatter with SP) over TP. */
        struct moe_group_place g;
        moe_comm_group_place(lay->tp, 1, cl->nvlink.domain_gpus, &g);
        out->fwd_tp = moe_comm_reducescatter_s(cl, &g, t * cfg->hidden_size * ab);
        out->bwd_tp = out->fwd_tp;
    }
}
