/*
 * Memory model (model/memory.h). Sources:
 * - Bytes per parameter: Megatron-LM mixed precision keeps BF16 weights, FP32 main gradients, and
 *   FP32 master weights + two Adam moments (18 B/param); the distributed optimizer shards the 12 B
 *   of optimizer state over the data-parallel group (DP x CP for dense, EDP for experts) --
 *   Megatron-LM docs, distributed optimizer; DESIGN.md "Megatron's own estimator".
 * - Transformer Engine FP8/MX training caches quantised copies of each GEMM weight (row- and
 *   column-wise) between micro-batches; FP8 parameter gather stores the weights themselves in FP8.
 * - Activations: Korthikanti et al. 2022 (arXiv:2205.05198), with sequence parallelism sharding the
 *   norm/residual tensors over TP; FlashAttention keeps q, k, v, output and the log-sum-exp;
 *   GEMM inputs are saved in the recipe's storage precision; MoE tensors scale with the tokens the
 *   busiest EP rank receives (tokens x top-k x ETP x load factor).
 * - Micro-batches in flight: Megatron's schedules.py warm-up counts: 1F1B holds pp - p
 * micro-batches on stage p; interleaved holds (pp - p - 1) * 2 + (vpp - 1) * pp + 1
 * chunk-micro-batches. Not modelled: activation memory of the embedding and dropout masks (MoE
 * recipes train without dropout), NCCL's lazily grown buffers beyond the cluster's context figure.
 */
#include "model/memory.h"

#include <math.h>

#define GIB 1073741824.0

double moe_dtype_bytes(enum moe_dtype d)
{
    switch (d) {
    case MOE_DTYPE_FP32:
        return 4.0;
    case MOE_DTYPE_BF16:
    case MOE_DTYPE_FP16:
        return 2.0;
    case MOE_DTYPE_FP8:
        return 1.0;
    }
    return 4.0;
}

void moe_mem_chunk_kinds(const struct moe_model_cfg *cfg,
                         const struct moe_pp_chunk *ch,
                         struct moe_chunk_kinds *out)
{
    int moe = 0;
    int win = 0;
    int both = 0;
    int end = ch->first_layer + ch->num_layers;
    if (end > MOE_MAX_LAYERS) {
        end = MOE_MAX_LAYERS;
    }
    for (int i = ch->first_layer; i < end; i++) {
        unsigned fl = cfg->layer_flags[i];
        moe += (fl & MOE_LAYER_MOE) != 0;
        win += (fl & MOE_LAYER_WINDOWED) != 0;
        both += (fl & (MOE_LAYER_MOE | MOE_LAYER_WINDOWED)) == (MOE_LAYER_MOE | MOE_LAYER_WINDOWED);
    }
    int total = end > ch->first_layer ? end - ch->first_layer : 0;
    out->n[1][1] = both;
    out->n[1][0] = moe - both;
    out->n[0][1] = win - both;
    out->n[0][0] = total - moe - win + both;
}

void moe_mem_stage_contents_from(const struct moe_model_cfg *cfg,
                                 const struct moe_layout *lay,
                                 int stage,
                                 const struct moe_chunk_kinds *kinds,
                                 struct moe_stage_contents *out)
{
    int moe = 0;
    int dense = 0;
    int windowed = 0;
    int mtp = 0;
    int chunks = 0;
    int max_layers = 0;
    bool emb = false;
    bool loss = false;
    for (int c = stage; c < lay->num_chunks; c += lay->pp) {
        const struct moe_pp_chunk *ch = &lay->chunks[c];
        const int(*n)[2] = kinds[c].n;
        moe += n[1][0] + n[1][1];
        dense += n[0][0] + n[0][1];
        windowed += n[0][1] + n[1][1];
        mtp += ch->num_mtp;
        emb |= ch->has_embedding != 0;
        loss |= ch->has_loss != 0;
        chunks++;
        int layers = ch->num_layers + ch->num_mtp;
        max_layers = layers > max_layers ? layers : max_layers;
    }
    out->num_dense = dense;
    out->num_moe = moe;
    out->num_windowed = windowed;
    out->num_mtp = mtp;
    out->has_embedding = emb;
    out->has_loss = loss;
    out->num_chunks = chunks;
    out->max_chunk_layers = max_layers;
    /* Output weight: untied models own one; tied models keep a copy on the last stage when the
     * embedding lives elsewhere (Megatron's shared-embedding group); MTP reuses it there. */
    out->has_output_weight = loss && (cfg->is_untied_embeddings || !emb);
}

void moe_mem_stage_contents(const struct moe_model_cfg *cfg,
                            const struct moe_layout *lay,
                            int stage,
                            struct moe_stage_contents *out)
{
    struct moe_chunk_kinds kinds[MOE_MAX_PP_CHUNKS];
    for (int v = 0; v < lay->vpp; v++) {
        int c = v * lay->pp + stage;
        if (c < lay->num_chunks && c < MOE_MAX_PP_CHUNKS) {
            moe_mem_chunk_kinds(cfg, &lay->chunks[c], &kinds[c]);
        }
    }
    moe_mem_stage_contents_from(cfg, lay, stage, kinds, out);
}

static double mlp_mats(const struct moe_model_cfg *cfg)
{
    return cfg->is_swiglu ? 3.0 : 2.0;
}

/* Attention block parameters on one GPU: gemm part (TP-split or duplicated) and the rest. */
static void attn_params(const struct moe_model_cfg *cfg, int tp, double *gemm, double *other)
{
    double h = cfg->hidden_size;
    double a = cfg->num_attention_heads;
    double t = tp;
    if (cfg->is_mla) {
        double qk = cfg->qk_head_dim + cfg->qk_pos_emb_head_dim;
        double q;
        if (cfg->q_lora_rank > 0) {
            /* Down projections are duplicated over TP (Megatron MLA parallel_mode="duplicated"). */
            q = h * cfg->q_lora_rank + cfg->q_lora_rank * a * qk / t;
            *other = cfg->q_lora_rank;
        } else {
            q = h * a * qk / t;
            *other = 0.0;
        }
        double kv = h * (cfg->kv_lora_rank + cfg->qk_pos_emb_head_dim) +
                    cfg->kv_lora_rank * a * (cfg->qk_head_dim + cfg->v_head_dim) / t;
        double o = a * cfg->v_head_dim * h / t;
        *gemm = q + kv + o;
        *other += cfg->kv_lora_rank + h;
        return;
    }
    double d = cfg->kv_channels;
    double g = cfg->num_query_groups;
    *gemm = (h * a * d + 2.0 * h * g * d + a * d * h) / t;
    *other = h + (cfg->has_qk_layernorm ? 2.0 * d : 0.0);
    if (cfg->has_linear_bias) {
        *other += (a * d + 2.0 * g * d) / t + h;
    }
}

void moe_mem_param_units(const struct moe_model_cfg *cfg,
                         const struct moe_layout *lay,
                         struct moe_param_units *u)
{
    double h = cfg->hidden_size;
    double tp = lay->tp;
    attn_params(cfg, lay->tp, &u->attn_gemm, &u->attn_other);
    u->attn_other += h; /* pre-attention norm */
    double bias = cfg->has_linear_bias ? 1.0 : 0.0;
    u->dense_mlp = h * cfg->ffn_hidden_size * mlp_mats(cfg) / tp;
    u->dense_other = bias * h;
    u->shared = h * cfg->moe_shared_expert_intermediate_size * mlp_mats(cfg) / tp;
    u->moe_other =
        (double)cfg->num_experts * h + (cfg->has_router_expert_bias ? cfg->num_experts : 0);
    double local_experts = lay->ep > 0 ? (double)cfg->num_experts / lay->ep : 0.0;
    double expert_one = h * cfg->moe_ffn_hidden_size * mlp_mats(cfg) / lay->etp;
    double expert_bias = bias * (cfg->moe_ffn_hidden_size * (mlp_mats(cfg) - 1.0) / lay->etp + h);
    u->experts_gemm = local_experts * expert_one;
    u->experts_all = local_experts * (expert_one + expert_bias);
    u->embed = (double)moe_cfg_padded_vocab(cfg, lay->tp) * h / tp;
    u->mtp_gemm = 2.0 * h * h / tp;
    u->mtp_other = 3.0 * h;
    u->final_norm = h;
    u->last_is_moe =
        cfg->num_layers > 0 && (cfg->layer_flags[cfg->num_layers - 1] & MOE_LAYER_MOE) != 0;
    u->is_tied = !cfg->is_untied_embeddings;
}

void moe_mem_gpu_params_from(const struct moe_param_units *u,
                             const struct moe_stage_contents *sc,
                             struct moe_gpu_params *out)
{
    /* MTP layers are layers of the last decoder layer's kind plus eh_proj and three norms. */
    double n_moe = sc->num_moe + (u->last_is_moe ? sc->num_mtp : 0);
    double n_dense = sc->num_dense + (u->last_is_moe ? 0 : sc->num_mtp);
    double n_layers = n_moe + n_dense;
    double gemm_dense = n_layers * u->attn_gemm + n_dense * u->dense_mlp + n_moe * u->shared +
                        sc->num_mtp * u->mtp_gemm;
    double other = n_layers * u->attn_other + n_dense * u->dense_other + n_moe * u->moe_other +
                   sc->num_mtp * u->mtp_other + (sc->has_loss ? u->final_norm : 0.0);
    double embed = (sc->has_embedding ? u->embed : 0.0) + (sc->has_output_weight ? u->embed : 0.0);
    /* MTP embeds the shifted tokens on its stage: an untied model keeps a copy of the embedding
     * there when the embedding lives on another stage (a tied one uses its output copy). */
    if (sc->num_mtp > 0 && !sc->has_embedding && !u->is_tied) {
        embed += u->embed;
    }
    out->expert = n_moe * u->experts_all;
    out->dense = gemm_dense + other + embed;
    out->gemm = gemm_dense + n_moe * u->experts_gemm;
}

void moe_mem_gpu_params(const struct moe_model_cfg *cfg,
                        const struct moe_layout *lay,
                        const struct moe_stage_contents *sc,
                        struct moe_gpu_params *out)
{
    struct moe_param_units u;
    moe_mem_param_units(cfg, lay, &u);
    moe_mem_gpu_params_from(&u, sc, out);
}

double moe_mem_recipe_elem_bytes(enum moe_recipe r)
{
    switch (r) {
    case MOE_RECIPE_BF16:
        return 2.0;
    case MOE_RECIPE_FP8_TENSORWISE:
    case MOE_RECIPE_FP8_DELAYED:
        return 1.0;
    case MOE_RECIPE_FP8_BLOCKWISE:
        return 1.0 + 4.0 / 128.0; /* FP32 scale per 1x128 block */
    case MOE_RECIPE_MXFP8:
        return 1.0 + 1.0 / 32.0; /* E8M0 scale per 32 elements */
    case MOE_RECIPE_NVFP4:
        return 0.5 + 1.0 / 16.0; /* E2M1 + E4M3 scale per 16 elements */
    case MOE_NUM_RECIPES:
        break;
    }
    return 2.0;
}

/* Extra bytes per GEMM weight for the quantised copies Transformer Engine caches. */
static double weight_cache_bytes(const struct moe_options *opt)
{
    if (opt->recipe == MOE_RECIPE_BF16 || opt->is_fp32_training) {
        return 0.0; /* FP32 training emulates quantisation on the fly: no cached copies */
    }
    double one = moe_mem_recipe_elem_bytes(opt->recipe);
    /* Row-wise and column-wise (transposed) copies; with FP8 parameters the row-wise copy is the
     * parameter itself. */
    return opt->fp8_param_gather ? one : 2.0 * one;
}

void moe_mem_layer_activations(const struct moe_model_cfg *cfg,
                               const struct moe_layout *lay,
                               const struct moe_options *opt,
                               bool is_moe,
                               double load_factor,
                               unsigned apply,
                               struct moe_act_bytes *out)
{
    *out = (struct moe_act_bytes){0};
    /* BF16 activations and GEMM inputs in the recipe's storage format; FP32 training (the CPU
     * engine) keeps everything in FP32, quantising GEMM inputs on the fly. */
    const double b = opt->is_fp32_training ? 4.0 : 2.0;
    double bq = opt->is_fp32_training ? 4.0 : moe_mem_recipe_elem_bytes(opt->recipe);
    bool fp8 = opt->recipe != MOE_RECIPE_BF16 && !opt->is_fp32_training;
    double h = cfg->hidden_size;
    double tp = lay->tp;
    double t = (double)lay->mbs * lay->seq_length / lay->cp; /* tokens per CP rank */
    double t_sp = (lay->sequence_parallel || lay->tp == 1) ? t / tp : t;
    double a_loc = cfg->num_attention_heads / tp;
    unsigned rc = (apply & MOE_MEM_APPLY_RECOMPUTE) && opt->recompute == MOE_RECOMPUTE_SELECTIVE
                      ? opt->recompute_modules
                      : 0u;

    out->attn_norm = t_sp * h * b;
    out->qkv = (rc & MOE_RC_LAYERNORM) ? 0.0 : t_sp * h * bq;
    double lse = t * a_loc * 4.0;
    double o_elems;
    if (cfg->is_mla) {
        double qk = cfg->qk_head_dim + cfg->qk_pos_emb_head_dim;
        double latents = 0.0;
        if (cfg->q_lora_rank > 0) {
            latents += t * cfg->q_lora_rank * (b + bq);
        }
        latents += t * cfg->kv_lora_rank * (b + bq) + t * cfg->qk_pos_emb_head_dim * b;
        double qkv_heads = t * a_loc * (2.0 * qk + cfg->v_head_dim) * b;
        out->qkv += latents + ((rc & MOE_RC_MLA_UP_PROJ) ? 0.0 : qkv_heads);
        o_elems = t * a_loc * cfg->v_head_dim;
    } else {
        double d = cfg->kv_channels;
        double g_loc = cfg->num_query_groups / tp;
        out->qkv += t * (a_loc + 2.0 * g_loc) * d * b;
        if (cfg->has_qk_layernorm) {
            /* Qwen3's q/k RMSNorm per head keeps its inputs (q and k before the norm) */
            out->qkv += t * (a_loc + g_loc) * d * b;
        }
        o_elems = t * a_loc * d;
    }
    out->core_attn = (rc & MOE_RC_CORE_ATTN) ? 0.0 : o_elems * b + lse;
    out->attn_proj = fp8 ? o_elems * bq : ((rc & MOE_RC_CORE_ATTN) ? o_elems * b : 0.0);
    out->mlp_norm = t_sp * h * b;

    double mats_act = cfg->is_swiglu ? 2.0 : 1.0; /* fc1 output width in units of ffn */
    if (!is_moe) {
        double f = cfg->ffn_hidden_size / tp;
        double fc1_in = (rc & MOE_RC_LAYERNORM) ? 0.0 : t_sp * h * bq;
        double inner = t * f * (mats_act * b + bq);
        out->dense_mlp = (rc & MOE_RC_MLP) ? fc1_in : fc1_in + inner;
    } else {
        double e = cfg->num_experts;
        double k = cfg->moe_router_topk;
        double fe = (double)cfg->moe_ffn_hidden_size / lay->etp;
        double r = t_sp * k * lay->etp * load_factor; /* tokens this rank's experts process */
        out->router = ((rc & MOE_RC_LAYERNORM) ? 0.0 : t_sp * h * b) + t_sp * e * 9.0;
        /* routing map and probabilities. Megatron-Core (since merge request !2668, core 0.13)
         * applies the probabilities in the expert activation (weighted SwiGLU), whose saved
         * fc1 output already serves their gradient, and unpermutes without them. moefold's engine
         * (FP32 training) weights the rows in the combine, as Megatron-Core did before, and keeps
         * the expert outputs back at their tokens for the probabilities' gradient. */
        out->dispatch = t_sp * k * 8.0 + (opt->is_fp32_training ? t_sp * k * h * b : 0.0);
        out->expert_fc1 = r * h * bq;
        out->moe_act = r * fe * mats_act * b;
        out->expert_fc2 = (rc & MOE_RC_MOE_ACT) ? 0.0 : r * fe * bq;
        if (cfg->moe_shared_expert_intermediate_size > 0) {
            double fs = cfg->moe_shared_expert_intermediate_size / tp;
            out->shared =
                (rc & MOE_RC_SHARED_EXPERTS) ? 0.0 : t_sp * h * bq + t * fs * (mats_act * b + bq);
        }
        if (rc & MOE_RC_MOE) {
            out->router = 0.0;
            out->dispatch = 0.0;
            out->expert_fc1 = 0.0;
            out->moe_act = 0.0;
            out->expert_fc2 = 0.0;
            out->shared = 0.0;
        }
    }
    if ((apply & MOE_MEM_APPLY_OFFLOAD) && opt->fine_grained_offload) {
        unsigned off = opt->offload_modules;
        out->attn_norm *= (off & MOE_OFF_ATTN_NORM) ? 0.0 : 1.0;
        out->qkv *= (off & MOE_OFF_QKV_LINEAR) ? 0.0 : 1.0;
        out->core_attn *= (off & MOE_OFF_CORE_ATTN) ? 0.0 : 1.0;
        out->attn_proj *= (off & MOE_OFF_ATTN_PROJ) ? 0.0 : 1.0;
        out->mlp_norm *= (off & MOE_OFF_MLP_NORM) ? 0.0 : 1.0;
        out->expert_fc1 *= (off & MOE_OFF_EXPERT_FC1) ? 0.0 : 1.0;
        out->moe_act *= (off & MOE_OFF_MOE_ACT) ? 0.0 : 1.0;
    }
    out->total = out->attn_norm + out->qkv + out->core_attn + out->attn_proj + out->mlp_norm +
                 out->router + out->dispatch + out->expert_fc1 + out->moe_act + out->expert_fc2 +
                 out->shared + out->dense_mlp;
}

int moe_mem_inflight(const struct moe_layout *lay, int stage)
{
    int m = lay->num_microbatches;
    if (lay->vpp <= 1) {
        int n = lay->pp - stage;
        return n < m ? n : m;
    }
    int warmup = (lay->pp - stage - 1) * 2 + (lay->vpp - 1) * lay->pp;
    int total = m * lay->vpp;
    return warmup + 1 < total ? warmup + 1 : total;
}

/*
 * The gradients one layer's backward holds at once, beyond what the layer saved: at an MLP's
 * activation, the gradients of the fc1 output and of the activation output; at fc1's dgrad, the
 * fc1-output gradient and the input gradient; at the attention, the gradients of the QKV projection
 * output and of the core-attention output. The peak of the two MLP points and the attention, in the
 * activation type, for a dense and for a MoE layer (expert rows at the load factor).
 */
static void layer_bwd_working(const struct moe_model_cfg *cfg,
                              const struct moe_layout *lay,
                              const struct moe_options *opt,
                              double load_factor,
                              double out[2])
{
    const double b = opt->is_fp32_training ? 4.0 : 2.0;
    double h = cfg->hidden_size;
    double tp = lay->tp;
    double t = (double)lay->mbs * lay->seq_length / lay->cp;
    double t_sp = (lay->sequence_parallel || lay->tp == 1) ? t / tp : t;
    double mats = cfg->is_swiglu ? 2.0 : 1.0;
    double a_loc = cfg->num_attention_heads / tp;
    double attn;
    if (cfg->is_mla) {
        double qk = cfg->qk_head_dim + cfg->qk_pos_emb_head_dim;
        attn = t * a_loc * (2.0 * qk + 2.0 * cfg->v_head_dim);
    } else {
        double d = cfg->kv_channels;
        attn = t * (2.0 * a_loc + 2.0 * cfg->num_query_groups / tp) * d;
    }
    if (opt->is_fp32_training) {
        /* moefold's CPU attention materialises one sequence's scores and probabilities per call
         * (2 q_len T floats; q_len = T / (2 CP) with CP), two such workspaces in backward (the
         * core_attn recompute's and the backward's) */
        double seq = lay->seq_length;
        double q_len = lay->cp > 1 ? seq / (2.0 * lay->cp) : seq;
        attn += 4.0 * q_len * seq;
    }
    double f = cfg->ffn_hidden_size / tp;
    double dense = t * fmax((mats + 1.0) * f, mats * f + h);
    out[0] = b * fmax(attn, dense);
    double fe = (double)cfg->moe_ffn_hidden_size / lay->etp;
    double r = t_sp * cfg->moe_router_topk * lay->etp * load_factor;
    double experts = r * fmax((mats + 1.0) * fe, mats * fe + h);
    out[1] = cfg->num_experts > 0 ? b * fmax(attn, experts) : out[0]; /* used for MoE layers only */
}

void moe_mem_layer_set_init(const struct moe_model_cfg *cfg,
                            const struct moe_layout *lay,
                            const struct moe_options *opt,
                            double load_factor,
                            struct moe_mem_layer_set *set)
{
    const unsigned all = MOE_MEM_APPLY_RECOMPUTE | MOE_MEM_APPLY_OFFLOAD;
    const unsigned apply[3] = {0u, MOE_MEM_APPLY_RECOMPUTE, all};
    bool has_rc = opt->recompute == MOE_RECOMPUTE_SELECTIVE;
    bool has_off = opt->fine_grained_offload;
    for (int i = 0; i < 3; i++) {
        /* Without selective recompute or fine-grained offload the three views coincide. */
        if (i > 0 && !(i == 1 ? has_rc : (has_rc || has_off))) {
            set->dense[i] = set->dense[i - 1];
            set->moe[i] = set->moe[i - 1];
            continue;
        }
        moe_mem_layer_activations(cfg, lay, opt, false, load_factor, apply[i], &set->dense[i]);
        moe_mem_layer_activations(cfg, lay, opt, true, load_factor, apply[i], &set->moe[i]);
    }
    set->load_factor = load_factor;
    layer_bwd_working(cfg, lay, opt, load_factor, set->bwd_working);
    /* MTP (Megatron's MultiTokenPredictionLayer): per depth the embedding of the shifted tokens
     * (enorm's input), the concatenation [enorm(emb), hnorm(h)] (eh_proj's input, in the GEMM
     * format), the transformer layer's output (the final norm's input) and the normed output (the
     * shared output layer's input); the first depth also keeps the decoder's normed output
     * (hnorm's input). moefold's engine (FP32 training) runs each head forward and backward at
     * once and keeps the head's gradient of h instead of its logits. */
    const double b = opt->is_fp32_training ? 4.0 : 2.0;
    double bq = opt->is_fp32_training ? 4.0 : moe_mem_recipe_elem_bytes(opt->recipe);
    double t = (double)lay->mbs * lay->seq_length / lay->cp;
    double t_sp = (lay->sequence_parallel || lay->tp == 1) ? t / lay->tp : t;
    double h = cfg->hidden_size;
    set->mtp_extra = t_sp * h * (3.0 * b + 2.0 * bq + (opt->is_fp32_training ? b : 0.0));
    set->mtp_input = t_sp * h * b;
}

/* Activation bytes of all layers of the stage for one micro-batch, and the offloaded share. */
static void stage_activations(const struct moe_model_cfg *cfg,
                              const struct moe_options *opt,
                              const struct moe_stage_contents *sc,
                              const struct moe_mem_layer_set *set,
                              double *gpu_bytes,
                              double *host_bytes,
                              double *transient)
{
    const struct moe_act_bytes *dense_full = &set->dense[0];
    const struct moe_act_bytes *moe_full = &set->moe[0];
    const struct moe_act_bytes *dense_rc = &set->dense[1];
    const struct moe_act_bytes *moe_rc = &set->moe[1];
    const struct moe_act_bytes *dense_opt = &set->dense[2];
    const struct moe_act_bytes *moe_opt = &set->moe[2];

    int last_moe = cfg->num_layers > 0 && (cfg->layer_flags[cfg->num_layers - 1] & MOE_LAYER_MOE);
    double n_moe = sc->num_moe + (last_moe ? sc->num_mtp : 0);
    double n_dense = sc->num_dense + (last_moe ? 0 : sc->num_mtp);
    double n_layers = n_moe + n_dense;
    double per_layer_opt =
        n_layers > 0 ? (n_moe * moe_opt->total + n_dense * dense_opt->total) / n_layers : 0.0;
    double per_layer_full =
        n_layers > 0 ? (n_moe * moe_full->total + n_dense * dense_full->total) / n_layers : 0.0;
    double layer_input = dense_full->attn_norm; /* checkpointed input of a recomputed layer */
    double chunks = sc->num_chunks > 0 ? sc->num_chunks : 1;
    double layers_per_chunk = n_layers / chunks;

    double saved;
    double max_layer = moe_full->total > dense_full->total ? moe_full->total : dense_full->total;
    *transient = 0.0;
    if (opt->recompute == MOE_RECOMPUTE_FULL) {
        double n_rc = opt->recompute_num_layers > 0 ? opt->recompute_num_layers : 1;
        if (opt->recompute_method == MOE_RECOMPUTE_UNIFORM) {
            double units = ceil(layers_per_chunk / n_rc) * chunks;
            saved = units * layer_input;
            *transient = (n_rc < layers_per_chunk ? n_rc : layers_per_chunk) * per_layer_full;
        } else {
            double rc_layers = (n_rc < layers_per_chunk ? n_rc : layers_per_chunk) * chunks;
            saved = rc_layers * layer_input + (n_layers - rc_layers) * per_layer_opt;
            *transient = max_layer;
        }
    } else {
        saved = n_layers * per_layer_opt;
        if (opt->recompute == MOE_RECOMPUTE_SELECTIVE) {
            /* the tensors one layer recomputes, live during its backward: the largest of a
             * layer kind's dropped share (was: the larger kind's full size less the smaller
             * kind's kept size, which counted a dense-vs-MoE difference as recomputed) */
            double drop_moe = n_moe > 0 ? moe_full->total - moe_opt->total : 0.0;
            double drop_dense = n_dense > 0 ? dense_full->total - dense_opt->total : 0.0;
            *transient = fmax(drop_moe, drop_dense);
        }
    }
    /* Whole-layer CPU offloading moves that many layers per chunk to host memory. */
    double host = 0.0;
    if (opt->cpu_offloading_num_layers > 0 && n_layers > 0) {
        double off_layers = opt->cpu_offloading_num_layers * chunks;
        if (off_layers > n_layers) {
            off_layers = n_layers;
        }
        host = saved * off_layers / n_layers;
        saved -= host;
    }
    if (opt->fine_grained_offload && opt->recompute != MOE_RECOMPUTE_FULL) {
        host += n_moe * (moe_rc->total - moe_opt->total) +
                n_dense * (dense_rc->total - dense_opt->total);
    }
    if (sc->num_mtp > 0) {
        saved += sc->num_mtp * set->mtp_extra + set->mtp_input;
    }
    *gpu_bytes = saved;
    *host_bytes = host;
}

/*
 * FP32 training that emulates a low-precision recipe (moefold's engine, --emulate-precision)
 * quantises and dequantises every GEMM operand into per-call copies; the engine reserves, on top of
 * the deepest caller's temporaries, two row operands at the widest GEMM dimension and the largest
 * weight tensor of the rank (engine/activations.c qdq_reserve). The same bound here, in FP32.
 * Megatron on a GPU caches quantised copies instead (weight_cache_bytes): 0 there.
 */
static double emulation_qdq_bytes(const struct moe_model_cfg *cfg,
                                  const struct moe_layout *lay,
                                  const struct moe_options *opt,
                                  const struct moe_stage_contents *sc,
                                  double load_factor)
{
    if (!opt->is_fp32_training || opt->recipe == MOE_RECIPE_BF16) {
        return 0.0;
    }
    double h = cfg->hidden_size;
    double tp = lay->tp;
    double g = cfg->is_swiglu ? 2.0 : 1.0;
    double hl = cfg->num_attention_heads / tp;
    double t = (double)lay->mbs * lay->seq_length / lay->cp;
    double t_sp = (lay->sequence_parallel || lay->tp == 1) ? t / tp : t;
    bool is_moe = cfg->num_experts > 0 && moe_cfg_num_moe_layers(cfg) > 0;
    /* Widest operand dimension and row count: the engine's (model-wide) dimensions. */
    double head = cfg->kv_channels;
    double kv_heads = cfg->num_query_groups / tp;
    double qk = head;
    double v_dim = head;
    if (cfg->is_mla) {
        qk = cfg->qk_head_dim + cfg->qk_pos_emb_head_dim;
        head = qk;
        kv_heads = hl;
        v_dim = cfg->v_head_dim;
    }
    double ffn_l = moe_cfg_num_moe_layers(cfg) < cfg->num_layers ? cfg->ffn_hidden_size / tp : 0.0;
    double fe_l = is_moe ? (double)cfg->moe_ffn_hidden_size / lay->etp : 0.0;
    double sh_l = is_moe ? cfg->moe_shared_expert_intermediate_size / tp : 0.0;
    double dim = fmax(h, (hl + 2.0 * kv_heads) * head);
    dim = fmax(dim, g * fmax(ffn_l, fmax(fe_l, sh_l)));
    if (cfg->is_mla) {
        dim = fmax(dim, fmax(hl * qk, hl * (cfg->qk_head_dim + v_dim)));
        dim = fmax(dim, fmax(cfg->kv_lora_rank + cfg->qk_pos_emb_head_dim, cfg->q_lora_rank));
    }
    double rows = t;
    double e_loc = 1.0;
    if (is_moe) {
        rows = fmax(rows, t_sp * cfg->moe_router_topk * lay->etp * load_factor);
        e_loc = (double)cfg->num_experts / lay->ep;
    }
    /* Largest weight tensor this rank holds. */
    double wmax = h * hl * v_dim; /* the attention output projection */
    if (cfg->is_mla) {
        double q_in = cfg->q_lora_rank > 0 ? cfg->q_lora_rank : h;
        wmax = fmax(wmax,
                    fmax(cfg->q_lora_rank * h, (cfg->kv_lora_rank + cfg->qk_pos_emb_head_dim) * h));
        wmax =
            fmax(wmax, fmax(hl * qk * q_in, hl * (cfg->qk_head_dim + v_dim) * cfg->kv_lora_rank));
    } else {
        wmax = fmax(wmax, (hl + 2.0 * kv_heads) * head * h);
    }
    if (sc->num_dense > 0) {
        wmax = fmax(wmax, g * ffn_l * h);
    }
    if (sc->num_moe > 0 || (sc->num_mtp > 0 && is_moe)) {
        wmax = fmax(wmax, fmax(e_loc * g * fe_l * h, (double)cfg->num_experts * h));
        wmax = fmax(wmax, g * sh_l * h);
    }
    if (sc->has_embedding || sc->has_output_weight) {
        wmax = fmax(wmax, moe_cfg_padded_vocab(cfg, lay->tp) / tp * h);
    }
    if (sc->num_mtp > 0) {
        wmax = fmax(wmax, h / tp * 2.0 * h);
    }
    return 4.0 * (e_loc + 2.0 * rows * dim + wmax);
}

/* DeepEP/HybridEP preallocate a fixed pool (the cluster's figure); a cluster without one (0:
 * moefold's own engine on a CPU host) dispatches into per-call row buffers as the all-to-all path
 * does. */
static bool flex_pool(const struct moe_cluster *cl, const struct moe_options *opt)
{
    bool flex = opt->dispatcher == MOE_DISPATCH_DEEPEP || opt->dispatcher == MOE_DISPATCH_HYBRIDEP;
    return flex && cl->overheads.flex_buffer_gib > 0.0;
}

void moe_mem_opt_key(const struct moe_cluster *cl,
                     const struct moe_options *opt,
                     struct moe_mem_opt_key *key)
{
    bool selective = opt->recompute == MOE_RECOMPUTE_SELECTIVE;
    bool full = opt->recompute == MOE_RECOMPUTE_FULL;
    bool fine = opt->fine_grained_offload;
    uint64_t a = 0;
    a = a << 8 | (uint64_t)opt->recipe;
    a = a << 4 | (uint64_t)opt->recompute;
    a = a << 4 | (uint64_t)(full ? opt->recompute_method : 0);
    a = a << 16 | (uint64_t)(selective ? opt->recompute_modules & 0xffffu : 0u);
    a = a << 16 | (uint64_t)(fine ? opt->offload_modules & 0xffffu : 0u);
    a = a << 4 | (uint64_t)opt->main_grads_dtype;
    a = a << 4 | (uint64_t)opt->exp_avg_dtype;
    a = a << 4 | (uint64_t)opt->exp_avg_sq_dtype;
    uint64_t b = 0;
    b = b << 16 | (uint64_t)(full ? (uint16_t)opt->recompute_num_layers : 0u);
    b = b << 16 | (uint64_t)(uint16_t)opt->cpu_offloading_num_layers;
    b = b << 16 | (uint64_t)(uint16_t)opt->moe_hot_expert_replicas;
    b = b << 1 | (uint64_t)opt->is_fp32_training;
    b = b << 1 | (uint64_t)fine;
    b = b << 1 | (uint64_t)opt->fp8_param_gather;
    b = b << 1 | (uint64_t)opt->use_distributed_optimizer;
    b = b << 1 | (uint64_t)opt->optimizer_cpu_offload;
    b = b << 1 | (uint64_t)flex_pool(cl, opt);
    key->bits[0] = a;
    key->bits[1] = b;
    key->optimizer_offload_fraction =
        opt->optimizer_cpu_offload ? opt->optimizer_offload_fraction : 0.0;
}

void moe_mem_stage_terms_init(const struct moe_model_cfg *cfg,
                              const struct moe_cluster *cl,
                              const struct moe_layout *lay,
                              const struct moe_options *opt,
                              const struct moe_mem_layer_set *set,
                              struct moe_mem_stage_terms *t)
{
    t->ab = opt->is_fp32_training ? 4.0 : 2.0; /* BF16 (or FP32) weights */
    double w_bytes = opt->fp8_param_gather ? 1.0 : t->ab;
    t->gemm_weight_bytes = w_bytes + weight_cache_bytes(opt);
    t->grad_bytes = moe_dtype_bytes(opt->main_grads_dtype);
    t->per_param_opt =
        4.0 + moe_dtype_bytes(opt->exp_avg_dtype) + moe_dtype_bytes(opt->exp_avg_sq_dtype);
    t->dense_shard = opt->use_distributed_optimizer ? (double)lay->dp * lay->cp : 1.0;
    t->expert_shard = opt->use_distributed_optimizer ? (double)lay->edp : 1.0;
    t->offload_frac = 0.0;
    if (opt->optimizer_cpu_offload) {
        t->offload_frac =
            opt->optimizer_offload_fraction > 0.0 ? opt->optimizer_offload_fraction : 1.0;
    }
    t->chunk_share = lay->vpp > 1 ? 1.0 / lay->vpp : 1.0; /* chunk-micro-batches hold 1/vpp */
    double tok = (double)lay->mbs * lay->seq_length / lay->cp;
    double vp = moe_cfg_padded_vocab(cfg, lay->tp);
    t->logits = tok * vp / lay->tp;
    /* EP buffers of a stage with MoE layers: a pool, or the dispatched rows (with ETP and no EP,
     * the permuted local rows and their all-gather); 0 without either. */
    t->ep_buffers = 0.0;
    if (lay->ep > 1) {
        if (flex_pool(cl, opt)) {
            t->ep_buffers = cl->overheads.flex_buffer_gib * GIB;
        } else {
            double t_sp = tok / lay->tp;
            t->ep_buffers = 2.0 * t_sp * cfg->moe_router_topk * lay->etp * set->load_factor *
                            cfg->hidden_size * t->ab;
        }
    } else if (lay->etp > 1) {
        /* No all-to-all, but the permuted local rows and their all-gather over the ETP group
         * (Megatron's alltoall dispatcher: gather_from_sequence_parallel_region at EP 1; the
         * engine's etp_gather), each live while the expert GEMMs' neighbours run. */
        double t_sp = tok / lay->tp;
        t->ep_buffers = t_sp * cfg->moe_router_topk * (1.0 + lay->etp) * set->load_factor *
                        cfg->hidden_size * t->ab;
    }
}

void moe_mem_stage_with_terms(const struct moe_model_cfg *cfg,
                              const struct moe_cluster *cl,
                              const struct moe_layout *lay,
                              const struct moe_options *opt,
                              int stage,
                              const struct moe_stage_contents *stage_contents,
                              const struct moe_gpu_params *params_gpu,
                              const struct moe_mem_layer_set *set,
                              const struct moe_mem_stage_terms *t,
                              struct moe_mem_bytes *out)
{
    *out = (struct moe_mem_bytes){0};
    const struct moe_stage_contents *sc = stage_contents;
    const struct moe_gpu_params *p = params_gpu;
    double load_factor = set->load_factor;

    /* Hot-expert clones: each EP rank hosts its share of the replicas (weights + grads). */
    double replica_params = 0.0;
    if (opt->moe_hot_expert_replicas > 0 && cfg->num_experts > 0 && sc->num_moe > 0) {
        double per_rank = ceil((double)opt->moe_hot_expert_replicas / lay->ep);
        double expert_one = (double)cfg->hidden_size * cfg->moe_ffn_hidden_size *
                            (cfg->is_swiglu ? 3.0 : 2.0) / lay->etp;
        replica_params = per_rank * expert_one * sc->num_moe;
    }

    double params = p->dense + p->expert + replica_params;
    double ab = t->ab;
    out->weights = (params - p->gemm) * ab + (p->gemm + replica_params) * t->gemm_weight_bytes;
    out->grads = params * t->grad_bytes;
    double opt_bytes = t->per_param_opt * (p->dense / t->dense_shard + p->expert / t->expert_shard);
    if (opt->optimizer_cpu_offload) {
        double frac = t->offload_frac;
        out->host_offload += opt_bytes * frac;
        opt_bytes *= 1.0 - frac;
    }
    out->optimizer = opt_bytes;

    double act_per_mb;
    double host_per_mb;
    double transient;
    stage_activations(cfg, opt, sc, set, &act_per_mb, &host_per_mb, &transient);
    double inflight = moe_mem_inflight(lay, stage);
    out->activations = act_per_mb * inflight * t->chunk_share;
    out->host_offload += host_per_mb * inflight * t->chunk_share;

    /* Buffers: logits (BF16 saved + FP32 loss workspace) on the loss stage, EP buffers, context. */
    /* The backward working set of the stage's largest layer rides on top of the saved tensors. */
    double working = 0.0;
    if (sc->num_dense + sc->num_mtp > 0) {
        working = set->bwd_working[0];
    }
    if (sc->num_moe > 0 && set->bwd_working[1] > working) {
        working = set->bwd_working[1];
    }
    double buffers = transient + working + emulation_qdq_bytes(cfg, lay, opt, sc, load_factor);
    if (sc->num_mtp > 0) {
        /* an MTP depth's backward holds the gradients of its hidden state (from its head and from
         * the next depth) while its transformer layer runs backward */
        buffers += 2.0 * set->mtp_input;
    }
    if (sc->has_loss) {
        /* Megatron keeps the MTP heads' logits too; moefold's engine (FP32 training) computes
         * each head's logits, loss and gradient at once, one head at a time. */
        double heads = opt->is_fp32_training ? 1.0 : 1.0 + sc->num_mtp;
        buffers += t->logits * (ab * heads + 4.0);
    }
    if (sc->num_moe > 0 && (lay->ep > 1 || lay->etp > 1)) {
        buffers += t->ep_buffers;
    }
    double dynamic = out->activations + buffers;
    buffers += dynamic * cl->overheads.alloc_reserve_frac + cl->overheads.context_gib * GIB;
    out->buffers = buffers;
    out->total = out->weights + out->grads + out->optimizer + out->activations + out->buffers;
    out->capacity = cl->gpu.hbm_gib * GIB;
}

void moe_mem_stage_with(const struct moe_model_cfg *cfg,
                        const struct moe_cluster *cl,
                        const struct moe_layout *lay,
                        const struct moe_options *opt,
                        int stage,
                        const struct moe_stage_contents *stage_contents,
                        const struct moe_gpu_params *params_gpu,
                        const struct moe_mem_layer_set *set,
                        struct moe_mem_bytes *out)
{
    struct moe_mem_stage_terms t;
    moe_mem_stage_terms_init(cfg, cl, lay, opt, set, &t);
    moe_mem_stage_with_terms(cfg, cl, lay, opt, stage, stage_contents, params_gpu, set, &t, out);
}

void moe_mem_stage(const struct moe_model_cfg *cfg,
                   const struct moe_cluster *cl,
                   const struct moe_layout *lay,
                   const struct moe_options *opt,
                   int stage,
                   double load_factor,
                   struct moe_mem_bytes *out)
{
    struct moe_stage_contents sc;
    moe_mem_stage_contents(cfg, lay, stage, &sc);
    struct moe_gpu_params p;
    moe_mem_gpu_params(cfg, lay, &sc, &p);
    struct moe_mem_layer_set set;
    moe_mem_layer_set_init(cfg, lay, opt, load_factor, &set);
    moe_mem_stage_with(cfg, cl, lay, opt, stage, &sc, &p, &set, out);
}
