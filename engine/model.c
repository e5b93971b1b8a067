/*
 * Model construction: per-rank dimensions from the model and the folded layout, the parameter
 * registry grouped into reduction buckets, and layout-independent initialisation.
 *
 * Sharding (Megatron-Core's): QKV and FC1 are column-parallel over TP (each rank holds whole heads
 * and a slice of the FFN; FC1 keeps Megatron's fused [gate; up] order per rank), the attention
 * projection and FC2 are row-parallel; embedding and output layer are vocab-parallel; norms and the
 * router are replicated. Routed experts live on EP ranks (E/EP each) and their FFN is split over
 * ETP like FC1/FC2. Buckets per layer: replicated (norms, router), dense (TP-sharded linears,
 * shared expert) and expert weights; each bucket is padded to a multiple of 16 x its reduction
 * group so the distributed optimizer can shard it evenly (Megatron pads buckets likewise).
 *
 * Initialisation: every element of a global tensor gets N(0, std) drawn from (seed, tensor id,
 * global index) by a counter-based generator, so each rank computes exactly its shard and any
 * layout starts from the same model. std = 0.02 (Megatron's --init-method-std default), output
 * projections 0.02/sqrt(2L) (Megatron's scaled init), norms 1, expert bias 0.
 */
#include "engine/internal.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define INIT_STD 0.02 /* Megatron-LM --init-method-std default */

/* Tensor codes for initialisation streams. */
enum {
    CODE_ATTN_NORM = 1,
    CODE_WQ,
    CODE_WK,
    CODE_WV,
    CODE_WO,
    CODE_MLP_NORM,
    CODE_FC1_GATE,
    CODE_FC1_UP,
    CODE_FC2,
    CODE_ROUTER,
    CODE_E1_GATE,
    CODE_E1_UP,
    CODE_E2,
    CODE_S1_GATE,
    CODE_S1_UP,
    CODE_S2,
    CODE_EMBED,
    CODE_FINAL_NORM,
    CODE_OUTPUT,
    CODE_Q_DOWN,
    CODE_Q_UP,
    CODE_KV_DOWN,
    CODE_KV_UP,
    CODE_EH_PROJ,
};

static uint64_t uid_of(int layer, int code, int expert)
{
    return ((uint64_t)(layer + 2) << 32) | ((uint64_t)code << 16) | (uint64_t)expert;
}

/* ---- Dimensions ------------------------------------------------------------------------------ */

/* An architecture feature whose op the backend's table lacks (optional ops, kernels/kernels.h),
 * or NULL when the backend has every op the model needs. */
static const char *missing_feature(const struct moe_model_cfg *m, const struct moe_k_ops *k)
{
    if (m->window_size > 0 && k->attention_window_sink_fwd == NULL) {
        return "sliding-window attention";
    }
    if (m->has_attention_sinks && k->attention_window_sink_fwd == NULL) {
        return "attention sinks";
    }
    if (m->has_linear_bias && k->bias_fwd == NULL) {
        return "linear biases";
    }
    return NULL;
}

static enum moe_status check_supported(const struct moe_eng *e, struct moe_diag *diag)
{
    const struct moe_model_cfg *m = &e->plan.model;
    const char *missing = missing_feature(m, e->k);
    if (missing != NULL) {
        return moe_diag_set(diag, MOE_ERR_UNSUPPORTED,
                            "model %s uses %s, which the %s backend has no kernels for; use "
                            "--backend cpu",
                            m->name, missing, e->k->name);
    }
    return MOE_OK;
}

static enum moe_status
divides(int a, int b, const char *what_a, const char *what_b, struct moe_diag *diag)
{
    if (b <= 0 || a % b != 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s=%d is not divisible by %s=%d", what_a, a,
                            what_b, b);
    }
    return MOE_OK;
}

/* Rows a rank's experts may receive per MoE layer and micro-batch (buffer bound). */
static void expert_row_bounds(struct moe_eng *e)
{
    struct moe_eng_dims *d = &e->d;
    d->rows_send = d->tokens_sp * d->topk;
    if (d->experts == 0) {
        d->rows_recv = d->rows_exp = 0;
        return;
    }
    long per_src = (long)d->tokens_sp * (d->topk < d->experts_l ? d->topk : d->experts_l);
    if (d->capacity > 0 && (long)d->experts_l * d->capacity < per_src) {
        per_src = (long)d->experts_l * d->capacity;
    }
    long worst = per_src * d->ep;
    if (e->opts.moe_buffer_factor > 0.0) {
        long mean = (long)d->tokens_sp * d->topk;
        long capped = (long)ceil(e->opts.moe_buffer_factor * (double)mean);
        if (capped < worst) {
            worst = capped;
        }
    }
    d->rows_recv = (int)worst;
    d->rows_exp = (int)(worst * d->etp);
}

enum moe_status moe_eng_dims_init(struct moe_eng *e, struct moe_diag *diag)
{
    MOE_TRY(check_supported(e, diag));
    const struct moe_model_cfg *m = &e->plan.model;
    const struct moe_layout *lay = &e->plan.layout;
    const struct moe_rank_coords *c = &e->groups.me;
    struct moe_eng_dims *d = &e->d;
    memset(d, 0, sizeof(*d));
    d->tp = lay->tp;
    d->cp = lay->cp;
    d->ep = lay->ep;
    d->etp = lay->etp;
    d->sp = lay->tp > 1 && lay->sequence_parallel;
    d->num_layers = m->num_layers;
    d->num_mtp = m->mtp_num_layers;
    d->num_layers_all = m->num_layers + m->mtp_num_layers;
    d->hidden = m->hidden_size;
    d->vocab = moe_cfg_padded_vocab(m, lay->tp);
    d->heads = m->num_attention_heads;
    d->kv_heads = m->num_query_groups;
    d->head_dim = m->kv_channels;
    d->qk_dim = d->v_dim = d->head_dim;
    d->glu = m->is_swiglu ? 2 : 1;
    d->is_mla = m->is_mla;
    d->has_qk_norm = m->has_qk_layernorm && !m->is_mla;
    d->has_bias = m->has_linear_bias;
    d->has_sinks = m->has_attention_sinks;
    d->window = m->window_size;
    if (d->is_mla) {
        d->kv_heads = d->heads; /* MLA has no grouped queries */
        d->q_lora = m->q_lora_rank;
        d->kv_lora = m->kv_lora_rank;
        d->qk_nope = m->qk_head_dim;
        d->qk_rope = m->qk_pos_emb_head_dim;
        d->qk_dim = d->qk_nope + d->qk_rope;
        d->v_dim = m->v_head_dim;
        d->head_dim = d->qk_dim;
        MOE_TRY(divides(d->qk_rope, 2, "qk_pos_emb_head_dim (RoPE pairs)", "2", diag));
    }
    d->ffn = m->ffn_hidden_size;
    d->shared_ffn = m->moe_shared_expert_intermediate_size;
    d->experts = moe_cfg_is_moe(m) ? m->num_experts : 0;
    d->expert_ffn = m->moe_ffn_hidden_size;
    d->topk = m->moe_router_topk;
    MOE_TRY(divides(d->vocab, lay->tp, "padded vocab", "tp", diag));
    MOE_TRY(divides(d->heads, lay->tp, "num_attention_heads", "tp", diag));
    MOE_TRY(divides(d->kv_heads, lay->tp, "num_query_groups", "tp", diag));
    if (!d->is_mla) {
        MOE_TRY(divides(d->head_dim, 2, "kv_channels (RoPE pairs)", "2", diag));
    }
    if (d->num_mtp > 0) {
        MOE_TRY(
            divides(d->hidden, lay->tp, "hidden_size (MTP's column-parallel eh_proj)", "tp", diag));
    }
    d->vocab_l = d->vocab / lay->tp;
    d->vocab0 = c->tp * d->vocab_l;
    d->heads_l = d->heads / lay->tp;
    d->kv_heads_l = d->kv_heads / lay->tp;
    d->qkv_cols = (d->heads_l + 2 * d->kv_heads_l) * d->head_dim;
    bool has_dense = moe_cfg_num_moe_layers(m) < m->num_layers;
    if (has_dense) {
        MOE_TRY(divides(d->ffn, lay->tp, "ffn_hidden_size", "tp", diag));
        d->ffn_l = d->ffn / lay->tp;
    }
    if (d->experts > 0) {
        MOE_TRY(divides(d->experts, lay->ep, "num_experts", "ep", diag));
        MOE_TRY(divides(d->expert_ffn, lay->etp, "moe_ffn_hidden_size", "etp", diag));
        if (d->shared_ffn > 0) {
            MOE_TRY(divides(d->shared_ffn, lay->tp, "shared expert size", "tp", diag));
            d->shared_ffn_l = d->shared_ffn / lay->tp;
        }
        if (m->moe_router_num_groups > 1) {
            MOE_TRY(divides(d->experts, m->moe_router_num_groups, "num_experts",
                            "moe_router_num_groups", diag));
        }
        d->experts_l = d->experts / lay->ep;
        d->expert0 = c->ep * d->experts_l;
        d->expert_ffn_l = d->expert_ffn / lay->etp;
    }
    d->mbs = lay->mbs;
    d->seq = lay->seq_length;
    if (lay->cp > 1) {
        /* The load-balanced causal split cuts a sequence into 2 CP chunks (Megatron requires
         * seq_length % (2 cp) == 0 for the same reason). */
        MOE_TRY(divides(d->seq, 2 * lay->cp, "seq_length", "2*cp", diag));
        d->num_cp_chunks = 2;
        d->cp_chunk_len = d->seq / (2 * lay->cp);
        d->cp_chunk_pos[0] = c->cp * d->cp_chunk_len;
        d->cp_chunk_pos[1] = (2 * lay->cp - 1 - c->cp) * d->cp_chunk_len;
    } else {
        d->num_cp_chunks = 1;
        d->cp_chunk_len = d->seq;
        d->cp_chunk_pos[0] = 0;
        d->cp_chunk_pos[1] = 0;
    }
    d->seq_l = d->seq / lay->cp;
    d->tokens = d->mbs * d->seq_l;
    if (d->sp) {
        MOE_TRY(divides(d->tokens, lay->tp, "tokens per micro-batch and CP rank", "tp", diag));
    }
    d->tokens_sp = d->sp ? d->tokens / lay->tp : d->tokens;
    if (d->experts > 0) {
        d->capacity = moe_k_expert_capacity(d->tokens_sp, d->topk, d->experts,
                                            e->plan.options.capacity_factor);
    }
    expert_row_bounds(e);
    return MOE_OK;
}

/* ---- Registry -------------------------------------------------------------------------------- */

static int bucket_open(struct moe_eng *e, enum moe_eng_pkind kind, int layer)
{
    MOE_ASSERT(e->num_buckets < e->cap_buckets);
    int b = e->num_buckets++;
    struct moe_eng_bucket *bk = &e->buckets[b];
    memset(bk, 0, sizeof(*bk));
    bk->kind = kind;
    bk->layer = layer;
    bk->first_param = e->num_params;
    bool repl = kind == MOE_ENG_PK_REPL || kind == MOE_ENG_PK_REPL_TP;
    bk->group = kind == MOE_ENG_PK_EXPERT ? e->groups.edp : e->groups.dpcp;
    bk->tp_partial =
        (kind == MOE_ENG_PK_REPL && e->d.sp) || (kind == MOE_ENG_PK_REPL_TP && e->d.tp > 1);
    bk->is_norm_owner = !repl || e->groups.me.tp == 0;
    bk->no_decay = repl;
    return b;
}

/* Add a parameter of numel elements to bucket b; its views are set by bucket_close. */
static struct moe_eng_tensor
param_add(struct moe_eng *e, int b, int layer, const char *name, size_t numel, bool no_decay)
{
    MOE_ASSERT(e->num_params < e->cap_params);
    int p = e->num_params++;
    struct moe_eng_param *pr = &e->params[p];
    memset(pr, 0, sizeof(*pr));
    if (layer >= 0) {
        (void)snprintf(pr->name, sizeof(pr->name), "layer%d.%s", layer, name);
    } else {
        (void)snprintf(pr->name, sizeof(pr->name), "%s", name);
    }
    pr->numel = numel;
    pr->layer = layer;
    pr->bucket = b;
    pr->no_decay = no_decay;
    e->buckets[b].num_params++;
    e->buckets[b].numel += numel;
    return (struct moe_eng_tensor){.w = NULL, .g = NULL, .numel = numel, .param = p};
}

static void bucket_close(struct moe_eng *e, int b)
{
    struct moe_eng_bucket *bk = &e->buckets[b];
    if (bk->num_params == 0) {
        e->num_buckets--; /* nothing registered: drop it */
        return;
    }
    int gsize = moe_comm_size(bk->group);
    size_t unit = (size_t)gsize * 16;
    bk->padded = (bk->numel + unit - 1) / unit * unit;
    bool dist = e->plan.options.use_distributed_optimizer;
    bk->shard = dist ? bk->padded / (size_t)gsize : bk->padded;
    bk->shard_off = dist ? (size_t)moe_comm_rank(bk->group) * bk->shard : 0;
    bk->w = moe_eng_arena_floats(&e->mem[MOE_ENG_MEM_WEIGHTS].arena, bk->padded);
    bk->g = moe_eng_arena_floats(&e->mem[MOE_ENG_MEM_GRADS].arena, bk->padded);
    /* --optimizer-cpu-offload: the master shard and the moments live in the host pool, with a
     * host copy of the gradient shard for AdamW there (engine/optimizer.c). */
    bool offload = e->plan.options.optimizer_cpu_offload;
    struct moe_eng_arena *opt = &e->mem[offload ? MOE_ENG_MEM_HOST : MOE_ENG_MEM_OPTIMIZER].arena;
    /* AdamW streams the master, both moments and the gradient shard in step: each at the
     * gradient shard's offset within a 4 KiB page (moe_eng_arena_floats_like; the slack is
     * reported among the buffers, moe_eng_opt_page_slack). The reduced shard sits at the start
     * of the bucket's gradients on every rank (the reduce-scatter is in place). */
    const float *gs = bk->g;
    bk->master = moe_eng_arena_floats_like(opt, bk->shard, gs);
    bk->m = moe_eng_arena_floats_like(opt, bk->shard, gs);
    bk->v = moe_eng_arena_floats_like(opt, bk->shard, gs);
    bk->g_host = offload ? moe_eng_arena_floats_like(opt, bk->shard, gs) : NULL;
    size_t off = 0;
    for (int i = 0; i < bk->num_params; i++) {
        struct moe_eng_param *p = &e->params[bk->first_param + i];
        p->w = bk->w != NULL ? bk->w + off : NULL;
        p->g = bk->g != NULL ? bk->g + off : NULL;
        off += p->numel;
    }
}

size_t moe_eng_opt_page_slack(const struct moe_eng *e)
{
    if (e->plan.options.optimizer_cpu_offload) {
        return 0;
    }
    return (size_t)e->num_buckets * 3 /* master, m, v */ * MOE_ENG_PAGE_BYTES;
}

static void tensor_bind(const struct moe_eng *e, struct moe_eng_tensor *t)
{
    if (t->param >= 0 && t->numel > 0) {
        t->w = e->params[t->param].w;
        t->g = e->params[t->param].g;
    }
}

static struct moe_eng_tensor none_tensor(void)
{
    return (struct moe_eng_tensor){.w = NULL, .g = NULL, .numel = 0, .param = -1};
}

int moe_eng_layer_tensors(struct moe_eng_layer_w *w, struct moe_eng_tensor **out)
{
    struct moe_eng_tensor *ts[] = {
        &w->attn_norm,   &w->qkv,         &w->proj,       &w->mlp_norm,   &w->fc1,
        &w->fc2,         &w->router,      &w->e_fc1,      &w->e_fc2,      &w->s_fc1,
        &w->s_fc2,       &w->q_norm,      &w->k_norm,     &w->sinks,      &w->qkv_bias,
        &w->proj_bias,   &w->fc1_bias,    &w->fc2_bias,   &w->s_fc1_bias, &w->s_fc2_bias,
        &w->router_bias, &w->e_fc1_bias,  &w->e_fc2_bias, &w->q_down,     &w->q_lnorm,
        &w->q_up,        &w->kv_down,     &w->kv_lnorm,   &w->kv_up,      &w->mtp_enorm,
        &w->mtp_hnorm,   &w->mtp_eh_proj, &w->mtp_norm,
    };
    MOE_ASSERT(MOE_ARRAY_LEN(ts) <= MOE_ENG_LAYER_TENSORS);
    for (size_t i = 0; i < MOE_ARRAY_LEN(ts); i++) {
        out[i] = ts[i];
    }
    return (int)MOE_ARRAY_LEN(ts);
}

/*
 * A layer's parameters by bucket (a bucket's parameters are registered together, in this order):
 * replicated (norms; the row-parallel biases, added after the reduction; router), TP-partial
 * replicated (q/k norms, MLA's down projections and latent norms), TP-sharded (projections,
 * sinks, column-parallel biases, the dense MLP or shared expert), experts.
 */
static void repl_register(struct moe_eng *e, struct moe_eng_layer_w *w, int b)
{
    const struct moe_eng_dims *d = &e->d;
    int l = w->idx;
    size_t C = (size_t)d->hidden;
    w->attn_norm = param_add(e, b, l, "attn_norm", C, true);
    w->mlp_norm = param_add(e, b, l, "mlp_norm", C, true);
    if (l >= d->num_layers) {
        w->mtp_enorm = param_add(e, b, l, "mtp_enorm", C, true);
        w->mtp_hnorm = param_add(e, b, l, "mtp_hnorm", C, true);
        w->mtp_norm = param_add(e, b, l, "mtp_norm", C, true);
    }
    if (w->is_moe) {
        w->router = param_add(e, b, l, "router", (size_t)d->experts * C, false);
    }
    if (!d->has_bias) {
        return;
    }
    w->proj_bias = param_add(e, b, l, "proj_bias", C, true);
    if (w->is_moe) {
        w->router_bias = param_add(e, b, l, "router_bias", (size_t)d->experts, true);
        if (d->shared_ffn_l > 0) {
            w->s_fc2_bias = param_add(e, b, l, "shared_fc2_bias", C, true);
        }
    } else {
        w->fc2_bias = param_add(e, b, l, "fc2_bias", C, true);
    }
}

static void tp_partial_register(struct moe_eng *e, struct moe_eng_layer_w *w, int b)
{
    const struct moe_eng_dims *d = &e->d;
    int l = w->idx;
    size_t C = (size_t)d->hidden;
    if (d->has_qk_norm) {
        w->q_norm = param_add(e, b, l, "q_norm", (size_t)d->head_dim, true);
        w->k_norm = param_add(e, b, l, "k_norm", (size_t)d->head_dim, true);
    }
    if (d->is_mla) {
        if (d->q_lora > 0) {
            w->q_down = param_add(e, b, l, "q_down", (size_t)d->q_lora * C, false);
            w->q_lnorm = param_add(e, b, l, "q_lnorm", (size_t)d->q_lora, true);
        }
        size_t kvd = (size_t)d->kv_lora + (size_t)d->qk_rope;
        w->kv_down = param_add(e, b, l, "kv_down", kvd * C, false);
        w->kv_lnorm = param_add(e, b, l, "kv_lnorm", (size_t)d->kv_lora, true);
    }
}

/* A dense MLP's fc1/fc2 and fc1 bias (column-parallel). */
static void
mlp_register(struct moe_eng *e, struct moe_eng_layer_w *w, int b, bool shared, int ffn_l)
{
    const struct moe_eng_dims *d = &e->d;
    int l = w->idx;
    size_t C = (size_t)d->hidden;
    size_t g = (size_t)d->glu;
    struct moe_eng_tensor *fc1 = shared ? &w->s_fc1 : &w->fc1;
    struct moe_eng_tensor *fc2 = shared ? &w->s_fc2 : &w->fc2;
    *fc1 = param_add(e, b, l, shared ? "shared_fc1" : "w_fc1", g * (size_t)ffn_l * C, false);
    *fc2 = param_add(e, b, l, shared ? "shared_fc2" : "w_fc2", C * (size_t)ffn_l, false);
    if (d->has_bias) {
        struct moe_eng_tensor *b1 = shared ? &w->s_fc1_bias : &w->fc1_bias;
        *b1 = param_add(e, b, l, shared ? "shared_fc1_bias" : "fc1_bias", g * (size_t)ffn_l, true);
    }
}

static void dense_register(struct moe_eng *e, struct moe_eng_layer_w *w, int b)
{
    const struct moe_eng_dims *d = &e->d;
    int l = w->idx;
    size_t C = (size_t)d->hidden;
    size_t hl = (size_t)d->heads_l;
    if (d->is_mla) {
        size_t in = d->q_lora > 0 ? (size_t)d->q_lora : C;
        w->q_up = param_add(e, b, l, d->q_lora > 0 ? "q_up" : "q_proj", hl * (size_t)d->qk_dim * in,
                            false);
        size_t kvw = (size_t)d->qk_nope + (size_t)d->v_dim;
        w->kv_up = param_add(e, b, l, "kv_up", hl * kvw * (size_t)d->kv_lora, false);
    } else {
        w->qkv = param_add(e, b, l, "w_qkv", (size_t)d->qkv_cols * C, false);
        if (d->has_bias) {
            w->qkv_bias = param_add(e, b, l, "qkv_bias", (size_t)d->qkv_cols, true);
        }
    }
    w->proj = param_add(e, b, l, "w_proj", C * hl * (size_t)d->v_dim, false);
    if (l >= d->num_layers) {
        w->mtp_eh_proj = param_add(e, b, l, "mtp_eh_proj", C / (size_t)d->tp * 2 * C, false);
    }
    if (d->has_sinks) {
        w->sinks = param_add(e, b, l, "sinks", hl, true);
    }
    if (!w->is_moe) {
        mlp_register(e, w, b, false, d->ffn_l);
    } else if (d->shared_ffn_l > 0) {
        mlp_register(e, w, b, true, d->shared_ffn_l);
    }
}

static void expert_register(struct moe_eng *e, struct moe_eng_layer_w *w, int b)
{
    const struct moe_eng_dims *d = &e->d;
    int l = w->idx;
    size_t C = (size_t)d->hidden;
    size_t el = (size_t)d->experts_l;
    size_t fel = (size_t)d->expert_ffn_l;
    size_t g = (size_t)d->glu;
    w->e_fc1 = param_add(e, b, l, "expert_fc1", el * g * fel * C, false);
    w->e_fc2 = param_add(e, b, l, "expert_fc2", el * C * fel, false);
    if (d->has_bias) {
        w->e_fc1_bias = param_add(e, b, l, "expert_fc1_bias", el * g * fel, true);
        w->e_fc2_bias = param_add(e, b, l, "expert_fc2_bias", el * C, true);
    }
}

static void layer_register(struct moe_eng *e, int l)
{
    const struct moe_eng_dims *d = &e->d;
    struct moe_eng_layer_w *w = &e->layers[l];
    memset(w, 0, sizeof(*w));
    struct moe_eng_tensor *ts[MOE_ENG_LAYER_TENSORS];
    int nt = moe_eng_layer_tensors(w, ts);
    for (int i = 0; i < nt; i++) {
        *ts[i] = none_tensor();
    }
    w->idx = l;
    /* An MTP layer (l >= L) is shaped like the last decoder layer (Megatron's MTP block spec). */
    unsigned flags = e->plan.model.layer_flags[l < d->num_layers ? l : d->num_layers - 1];
    w->is_moe = d->experts > 0 && (flags & MOE_LAYER_MOE);
    w->is_windowed = d->window > 0 && (flags & MOE_LAYER_WINDOWED);
    int b = bucket_open(e, MOE_ENG_PK_REPL, l);
    repl_register(e, w, b);
    bucket_close(e, b);
    b = bucket_open(e, MOE_ENG_PK_REPL_TP, l);
    tp_partial_register(e, w, b);
    bucket_close(e, b); /* dropped when empty */
    b = bucket_open(e, MOE_ENG_PK_DENSE, l);
    dense_register(e, w, b);
    bucket_close(e, b);
    w->expert_bias = NULL;
    if (w->is_moe) {
        b = bucket_open(e, MOE_ENG_PK_EXPERT, l);
        expert_register(e, w, b);
        bucket_close(e, b);
        if (e->plan.model.has_router_expert_bias) {
            w->expert_bias =
                moe_eng_arena_floats(&e->mem[MOE_ENG_MEM_WEIGHTS].arena, (size_t)d->experts);
        }
    }
}

void moe_eng_params_carve(struct moe_eng *e)
{
    const struct moe_eng_dims *d = &e->d;
    e->num_params = 0;
    e->num_buckets = 0;
    size_t vc = (size_t)d->vocab_l * (size_t)d->hidden;
    struct moe_eng_tensor none = none_tensor();
    e->embedding = e->final_norm = e->output = e->mtp_embedding = none;
    e->has_tied_copy = false;
    int num_mtp = 0;
    for (int v = 0; v < e->num_chunks_local; v++) {
        num_mtp += e->chunks[v].num_mtp;
    }
    bool has_embed = false;
    bool has_loss = false;
    for (int v = 0; v < e->num_chunks_local; v++) {
        has_embed = has_embed || e->chunks[v].has_embedding;
        has_loss = has_loss || e->chunks[v].has_loss;
    }
    if (has_embed) {
        int b = bucket_open(e, MOE_ENG_PK_DENSE, MOE_ENG_TAG_EMBED);
        e->embedding = param_add(e, b, -1, "embedding", vc, false);
        bucket_close(e, b);
    }
    /* Layers in backward-completion order does not matter for correctness; keep layer order. */
    for (int v = 0; v < e->num_chunks_local; v++) {
        const struct moe_eng_chunk *ch = &e->chunks[v];
        for (int i = 0; i < ch->num_layers; i++) {
            layer_register(e, ch->first_layer + i);
        }
    }
    for (int j = 0; j < num_mtp; j++) {
        layer_register(e, d->num_layers + j);
    }
    if (has_loss) {
        int br = bucket_open(e, MOE_ENG_PK_REPL, MOE_ENG_TAG_HEAD);
        e->final_norm = param_add(e, br, -1, "final_norm", (size_t)d->hidden, true);
        bucket_close(e, br);
        bool tied = !e->plan.model.is_untied_embeddings;
        if (tied && has_embed) {
            e->output = e->embedding; /* same tensor: both uses accumulate into one gradient */
        } else {
            int bd = bucket_open(e, MOE_ENG_PK_DENSE, MOE_ENG_TAG_HEAD);
            e->output = param_add(e, bd, -1, tied ? "output(tied)" : "output", vc, false);
            bucket_close(e, bd);
            if (tied) {
                e->has_tied_copy = true;
                e->buckets[bd].is_tied_copy = true;
                e->buckets[bd].is_norm_owner = false;
            }
        }
    }
    if (num_mtp > 0) {
        /* MTP embeds the shifted tokens on the loss stage: with the embedding itself when it is
         * here, the tied output copy, or an embedding copy (Megatron keeps one on the MTP stage)
         * whose gradient is summed with the embedding's over the embedding group. */
        if (has_embed) {
            e->mtp_embedding = e->embedding;
        } else if (!e->plan.model.is_untied_embeddings) {
            e->mtp_embedding = e->output;
        } else {
            int bc = bucket_open(e, MOE_ENG_PK_DENSE, MOE_ENG_TAG_HEAD);
            e->mtp_embedding = param_add(e, bc, -1, "embedding(mtp copy)", vc, false);
            bucket_close(e, bc);
            e->buckets[bc].is_tied_copy = true;
            e->buckets[bc].is_norm_owner = false;
        }
    }
    tensor_bind(e, &e->embedding);
    tensor_bind(e, &e->final_norm);
    tensor_bind(e, &e->output);
    tensor_bind(e, &e->mtp_embedding);
    for (int v = 0; v < e->num_chunks_local; v++) {
        const struct moe_eng_chunk *ch = &e->chunks[v];
        for (int i = 0; i < ch->num_layers; i++) {
            struct moe_eng_layer_w *w = &e->layers[ch->first_layer + i];
            struct moe_eng_tensor *ts[MOE_ENG_LAYER_TENSORS];
            int nt = moe_eng_layer_tensors(w, ts);
            for (int t = 0; t < nt; t++) {
                tensor_bind(e, ts[t]);
            }
        }
    }
    for (int j = 0; j < num_mtp; j++) {
        struct moe_eng_tensor *ts[MOE_ENG_LAYER_TENSORS];
        int nt = moe_eng_layer_tensors(&e->layers[d->num_layers + j], ts);
        for (int t = 0; t < nt; t++) {
            tensor_bind(e, ts[t]);
        }
    }
}

/* ---- Initialisation -------------------------------------------------------------------------- */

/* dst[rows, cols] = std * N(0,1) at global (row0 + r, col0 + c) of a tensor with gcols columns. */
/* A block of a global tensor to fill: rows [r_begin, r_end) of dst. */
struct init_job {
    float *dst;
    int r_begin, r_end, cols;
    uint64_t seed, uid;
    long row0, col0, gcols;
    double std;
};

static void init_rows(const struct init_job *j)
{
    for (int r = j->r_begin; r < j->r_end; r++) {
        for (int c = 0; c < j->cols; c++) {
            uint64_t idx = (uint64_t)((j->row0 + r) * j->gcols + j->col0 + c);
            j->dst[(size_t)r * (size_t)j->cols + (size_t)c] =
                (float)(j->std * moe_eng_normal_at(j->seed, j->uid, idx));
        }
    }
}

static void *init_rows_thread(void *arg)
{
    init_rows(arg);
    return NULL;
}

/* Blocks of at least this many elements are filled by several threads (creation time only:
 * a billion-parameter model on one GPU would otherwise spend minutes in the normal draws). */
#define INIT_PARALLEL_MIN (1L << 20)
#define INIT_MAX_THREADS  32

/* dst[rows, cols] = std * N(0,1) at global (row0 + r, col0 + c) of a tensor with gcols columns.
 * Every element depends only on (seed, uid, its global index), so the split over threads does
 * not change a bit. */
static void init_block(float *dst,
                       int rows,
                       int cols,
                       uint64_t seed,
                       uint64_t uid,
                       long row0,
                       long col0,
                       long gcols,
                       double std)
{
    struct init_job all = {dst, 0, rows, cols, seed, uid, row0, col0, gcols, std};
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int n = cpus > INIT_MAX_THREADS ? INIT_MAX_THREADS : (int)(cpus > 1 ? cpus : 1);
    if ((long)rows * cols < INIT_PARALLEL_MIN || n < 2 || rows < n) {
        init_rows(&all);
        return;
    }
    struct init_job jobs[INIT_MAX_THREADS];
    pthread_t threads[INIT_MAX_THREADS];
    int started = 0;
    for (int t = 0; t < n; t++) {
        jobs[t] = all;
        jobs[t].r_begin = (int)((long)rows * t / n);
        jobs[t].r_end = (int)((long)rows * (t + 1) / n);
        if (t > 0 && pthread_create(&threads[t], NULL, init_rows_thread, &jobs[t]) == 0) {
            started |= 1 << t;
        } else if (t > 0) {
            init_rows(&jobs[t]); /* no thread: fill it here */
        }
    }
    init_rows(&jobs[0]);
    for (int t = 1; t < n; t++) {
        if (started & (1 << t)) {
            (void)pthread_join(threads[t], NULL);
        }
    }
}

static void init_ones(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        x[i] = 1.0f;
    }
}

/* Column-parallel fused [gate; up] weight: local [2 fl, C] from two global [f, C] tensors. */
static void init_gate_up(float *w,
                         int fl,
                         int part,
                         int C,
                         uint64_t seed,
                         uint64_t uid_gate,
                         uint64_t uid_up,
                         double std)
{
    init_block(w, fl, C, seed, uid_gate, (long)part * fl, 0, C, std);
    init_block(w + (size_t)fl * (size_t)C, fl, C, seed, uid_up, (long)part * fl, 0, C, std);
}

/* Where initial values of the weight at w are written: w itself on the CPU backend, its place in
 * the host image of the weights block on CUDA (copied to the device once, at the end). */
static float *init_at(const struct moe_eng *e, float *w)
{
    if (e->init_host == NULL || w == NULL) {
        return w;
    }
    const char *base = e->mem[MOE_ENG_MEM_WEIGHTS].block;
    return e->init_host + ((const char *)w - base) / (ptrdiff_t)sizeof(float);
}

/* Column-parallel fc1 of a gated (two global [f, C] tensors: gate, up) or GELU ([f, C]) FFN. */
static void init_fc1(const struct moe_eng *e,
                     float *w,
                     int fl,
                     int part,
                     uint64_t uid_gate,
                     uint64_t uid_up,
                     double std)
{
    int C = e->d.hidden;
    if (e->d.glu == 2) {
        init_gate_up(w, fl, part, C, e->opts.seed, uid_gate, uid_up, std);
    } else {
        init_block(w, fl, C, e->opts.seed, uid_up, (long)part * fl, 0, C, std);
    }
}

/* MLA projections: the replicated down projections whole, the up projections' rows of this TP
 * rank's heads. */
static void mla_init(struct moe_eng *e, const struct moe_eng_layer_w *w, double std)
{
    const struct moe_eng_dims *d = &e->d;
    uint64_t s = e->opts.seed;
    int l = w->idx;
    int C = d->hidden;
    long tp = e->groups.me.tp;
    int kvd = d->kv_lora + d->qk_rope;
    int qrows = d->heads_l * d->qk_dim;
    int kvrows = d->heads_l * (d->qk_nope + d->v_dim);
    if (d->q_lora > 0) {
        init_block(init_at(e, w->q_down.w), d->q_lora, C, s, uid_of(l, CODE_Q_DOWN, 0), 0, 0, C,
                   std);
        init_ones(init_at(e, w->q_lnorm.w), w->q_lnorm.numel);
        init_block(init_at(e, w->q_up.w), qrows, d->q_lora, s, uid_of(l, CODE_Q_UP, 0), tp * qrows,
                   0, d->q_lora, std);
    } else {
        init_block(init_at(e, w->q_up.w), qrows, C, s, uid_of(l, CODE_Q_UP, 0), tp * qrows, 0, C,
                   std);
    }
    init_block(init_at(e, w->kv_down.w), kvd, C, s, uid_of(l, CODE_KV_DOWN, 0), 0, 0, C, std);
    init_ones(init_at(e, w->kv_lnorm.w), w->kv_lnorm.numel);
    init_block(init_at(e, w->kv_up.w), kvrows, d->kv_lora, s, uid_of(l, CODE_KV_UP, 0), tp * kvrows,
               0, d->kv_lora, std);
}

static void layer_init(struct moe_eng *e, const struct moe_eng_layer_w *w)
{
    const struct moe_eng_dims *d = &e->d;
    uint64_t s = e->opts.seed;
    int l = w->idx;
    int C = d->hidden;
    int tp = e->groups.me.tp;
    double std = INIT_STD;
    double out_std = INIT_STD / sqrt(2.0 * (double)d->num_layers);
    int hd = d->head_dim;
    init_ones(init_at(e, w->attn_norm.w), w->attn_norm.numel);
    init_ones(init_at(e, w->mlp_norm.w), w->mlp_norm.numel);
    init_ones(init_at(e, w->q_norm.w), w->q_norm.numel);
    init_ones(init_at(e, w->k_norm.w), w->k_norm.numel);
    if (d->is_mla) {
        mla_init(e, w, std);
    } else {
        float *q = init_at(e, w->qkv.w);
        float *k = q + (size_t)d->heads_l * (size_t)hd * (size_t)C;
        float *v = k + (size_t)d->kv_heads_l * (size_t)hd * (size_t)C;
        init_block(q, d->heads_l * hd, C, s, uid_of(l, CODE_WQ, 0), (long)tp * d->heads_l * hd, 0,
                   C, std);
        init_block(k, d->kv_heads_l * hd, C, s, uid_of(l, CODE_WK, 0),
                   (long)tp * d->kv_heads_l * hd, 0, C, std);
        init_block(v, d->kv_heads_l * hd, C, s, uid_of(l, CODE_WV, 0),
                   (long)tp * d->kv_heads_l * hd, 0, C, std);
    }
    int vd = d->v_dim;
    init_block(init_at(e, w->proj.w), C, d->heads_l * vd, s, uid_of(l, CODE_WO, 0), 0,
               (long)tp * d->heads_l * vd, (long)d->heads * vd, out_std);
    if (!w->is_moe) {
        init_fc1(e, init_at(e, w->fc1.w), d->ffn_l, tp, uid_of(l, CODE_FC1_GATE, 0),
                 uid_of(l, CODE_FC1_UP, 0), std);
        init_block(init_at(e, w->fc2.w), C, d->ffn_l, s, uid_of(l, CODE_FC2, 0), 0,
                   (long)tp * d->ffn_l, d->ffn, out_std);
        return;
    }
    init_block(init_at(e, w->router.w), d->experts, C, s, uid_of(l, CODE_ROUTER, 0), 0, 0, C, std);
    if (w->expert_bias != NULL) {
        memset(init_at(e, w->expert_bias), 0, (size_t)d->experts * sizeof(float));
    }
    if (d->shared_ffn_l > 0) {
        init_fc1(e, init_at(e, w->s_fc1.w), d->shared_ffn_l, tp, uid_of(l, CODE_S1_GATE, 0),
                 uid_of(l, CODE_S1_UP, 0), std);
        init_block(init_at(e, w->s_fc2.w), C, d->shared_ffn_l, s, uid_of(l, CODE_S2, 0), 0,
                   (long)tp * d->shared_ffn_l, d->shared_ffn, out_std);
    }
    int fel = d->expert_ffn_l;
    int etp = e->groups.me.etp;
    for (int i = 0; i < d->experts_l; i++) {
        int ge = d->expert0 + i;
        float *w1 = init_at(e, w->e_fc1.w) + (size_t)i * (size_t)d->glu * (size_t)fel * (size_t)C;
        float *w2 = init_at(e, w->e_fc2.w) + (size_t)i * (size_t)C * (size_t)fel;
        init_fc1(e, w1, fel, etp, uid_of(l, CODE_E1_GATE, ge), uid_of(l, CODE_E1_UP, ge), std);
        init_block(w2, C, fel, s, uid_of(l, CODE_E2, ge), 0, (long)etp * fel, d->expert_ffn,
                   out_std);
    }
}

static void params_init_values(struct moe_eng *e)
{
    const struct moe_eng_dims *d = &e->d;
    uint64_t s = e->opts.seed;
    for (int b = 0; b < e->num_buckets; b++) {
        memset(init_at(e, e->buckets[b].w), 0, e->buckets[b].padded * sizeof(float));
    }
    if (e->embedding.w != NULL) {
        init_block(init_at(e, e->embedding.w), d->vocab_l, d->hidden, s, uid_of(-1, CODE_EMBED, 0),
                   d->vocab0, 0, d->hidden, INIT_STD);
    }
    if (e->final_norm.w != NULL) {
        init_ones(init_at(e, e->final_norm.w), e->final_norm.numel);
    }
    if (e->output.w != NULL && e->output.param != e->embedding.param) {
        int code = e->plan.model.is_untied_embeddings ? CODE_OUTPUT : CODE_EMBED;
        init_block(init_at(e, e->output.w), d->vocab_l, d->hidden, s, uid_of(-1, code, 0),
                   d->vocab0, 0, d->hidden, INIT_STD);
    }
    if (e->mtp_embedding.w != NULL && e->mtp_embedding.param != e->embedding.param &&
        e->mtp_embedding.param != e->output.param) {
        init_block(init_at(e, e->mtp_embedding.w), d->vocab_l, d->hidden, s,
                   uid_of(-1, CODE_EMBED, 0), d->vocab0, 0, d->hidden, INIT_STD);
    }
    for (int v = 0; v < e->num_chunks_local; v++) {
        const struct moe_eng_chunk *ch = &e->chunks[v];
        for (int i = 0; i < ch->num_layers; i++) {
            layer_init(e, &e->layers[ch->first_layer + i]);
        }
        for (int j = 0; j < ch->num_mtp; j++) {
            const struct moe_eng_layer_w *w = &e->layers[d->num_layers + j];
            layer_init(e, w);
            init_ones(init_at(e, w->mtp_enorm.w), w->mtp_enorm.numel);
            init_ones(init_at(e, w->mtp_hnorm.w), w->mtp_hnorm.numel);
            init_ones(init_at(e, w->mtp_norm.w), w->mtp_norm.numel);
            int cl = d->hidden / d->tp;
            init_block(init_at(e, w->mtp_eh_proj.w), cl, 2 * d->hidden, s,
                       uid_of(w->idx, CODE_EH_PROJ, 0), (long)e->groups.me.tp * cl, 0,
                       2L * d->hidden, INIT_STD);
        }
    }
}

enum moe_status moe_eng_params_init(struct moe_eng *e, struct moe_diag *diag)
{
    size_t wbytes = e->mem[MOE_ENG_MEM_WEIGHTS].bytes;
    if (e->is_device && wbytes > 0) {
        /* The values are computed on the host (layout-independent, counter-based) into an image
         * of the weights block, then copied to the device in one piece. */
        e->init_host = moe_eng_heap_alloc(&e->ctx.heap, wbytes);
        if (e->init_host == NULL) {
            return moe_diag_set(diag, MOE_ERR_NOMEM,
                                "out of host memory for the %zu-byte initial weights", wbytes);
        }
    }
    params_init_values(e);
    if (e->init_host != NULL) {
        moe_eng_copy_from_host(e->ctx.dev, e->mem[MOE_ENG_MEM_WEIGHTS].block, e->init_host, wbytes);
        moe_eng_dev_sync(e->ctx.dev);
        moe_eng_heap_free(&e->ctx.heap, e->init_host, wbytes);
        e->init_host = NULL;
    }
    for (int b = 0; b < e->num_buckets; b++) {
        struct moe_eng_bucket *bk = &e->buckets[b];
        size_t bytes = bk->shard * sizeof(float);
        if (bk->g_host != NULL) { /* the offloaded optimizer's state is host memory */
            moe_eng_copy_to_host(e->ctx.dev, bk->master, bk->w + bk->shard_off, bytes);
            memset(bk->m, 0, bytes);
            memset(bk->v, 0, bytes);
        } else {
            moe_eng_copy(e->ctx.dev, bk->master, bk->w + bk->shard_off, bytes);
            moe_eng_memzero(e->ctx.dev, bk->m, bytes);
            moe_eng_memzero(e->ctx.dev, bk->v, bytes);
        }
    }
    return MOE_OK;
}
