/*
 * Parallel layout (parallel folding) and training options: defaults, names, resolution and every
 * validity rule Megatron-LM enforces for them, the pipeline layout string, and the rank mapping.
 *
 * moe_layout_resolve derives dp, edp and the micro-batch count, places decoder/MTP layers,
 * embedding and loss on the pp*vpp chunks exactly as Megatron-Core does, and refuses any
 * combination Megatron would refuse, with a message saying what to change. The rules follow
 * Megatron-LM main (2025-26):
 *   [A] megatron/training/arguments.py, validate_args
 *   [T] megatron/core/transformer/transformer_config.py, TransformerConfig.__post_init__
 *   [O] megatron/core/optimizer/optimizer_config.py, OptimizerConfig.__post_init__
 *   [S] megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving
 *   [P] megatron/core/transformer/pipeline_parallel_layer_layout.py
 *   [Y] megatron/training/yaml_arguments.py (MoE with TP needs sequence parallelism)
 * Each check below names its source. Hardware rules (FP8, MXFP8/NVFP4) apply only when a cluster
 * is given. This module does not check the model architecture alone (moe_cfg_validate does) nor
 * the GPU count against the cluster (moe_cluster_check_gpus does).
 *
 * Chunk c = v*pp + p lives on pipeline rank p (Megatron's interleaved order); decoder layers are
 * numbered consecutively in chunk order (Megatron's get_transformer_layer_offset).
 */
#include "model/layout.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Defaults and names                                                                          */

void moe_options_init(struct moe_options *opt)
{
    memset(opt, 0, sizeof(*opt));
    opt->recipe = MOE_RECIPE_BF16;
    opt->optimizer_offload_fraction = 1.0; /* [A] --optimizer-offload-fraction default */
    opt->main_grads_dtype = MOE_DTYPE_FP32;
    opt->exp_avg_dtype = MOE_DTYPE_FP32;
    opt->exp_avg_sq_dtype = MOE_DTYPE_FP32;
    opt->dispatcher = MOE_DISPATCH_ALLTOALL;
    opt->recompute = MOE_RECOMPUTE_NONE;
    opt->recompute_method = MOE_RECOMPUTE_UNIFORM;
    opt->cuda_graph_impl = MOE_CG_NONE;
    opt->moe_imbalance = 1.0;
}

void moe_layout_init(struct moe_layout *lay)
{
    memset(lay, 0, sizeof(*lay));
    lay->tp = 1;
    lay->cp = 1;
    lay->dp = 1;
    lay->pp = 1;
    lay->vpp = 1;
    lay->ep = 1;
    lay->etp = 1;
    lay->edp = 1;
    lay->mbs = 1;
}

static const char *const recipe_names[MOE_NUM_RECIPES] = {
    "bf16", "fp8-tensorwise", "fp8-delayed", "fp8-blockwise", "mxfp8", "nvfp4",
};
static const char *const dispatcher_names[MOE_NUM_DISPATCHERS] = {
    "alltoall",
    "allgather",
    "deepep",
    "hybridep",
};
static const char *const recompute_names[] = {"none", "selective", "full"};
static const char *const recompute_method_names[] = {"uniform", "block"};
static const char *const dtype_names[] = {"fp32", "bf16", "fp16", "fp8"};
static const char *const cuda_graph_impl_names[] = {"none", "local", "transformer_engine"};

/* Module names in bit order (bit i has name [i]), as Megatron's flags spell them. */
static const char *const rc_module_names[] = {
    "core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts",
};
static const char *const off_module_names[] = {
    "attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act",
};
static const char *const cgm_module_names[] = {
    "attn", "mlp", "moe", "moe_router", "moe_preprocess", "full_iteration",
};

static const char *name_at(const char *const *names, size_t n, int idx)
{
    if (idx < 0 || (size_t)idx >= n) {
        return "unknown";
    }
    return names[idx];
}

/* Find s in names[n]; on a miss fill diag with the accepted names. */
static enum moe_status lookup_name(const char *s,
                                   const char *const *names,
                                   size_t n,
                                   const char *what,
                                   int *out,
                                   struct moe_diag *diag)
{
    for (size_t i = 0; s != NULL && i < n; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = (int)i;
            return MOE_OK;
        }
    }
    char list[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < n && used < sizeof(list); i++) {
        int w = snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "", names[i]);
        used += (w > 0) ? (size_t)w : 0;
    }
    return moe_diag_set(diag, MOE_ERR_PARSE, "unknown %s '%s'; accepted: %s", what,
                        s != NULL ? s : "(null)", list);
}

const char *moe_recipe_name(enum moe_recipe r)
{
    return name_at(recipe_names, MOE_ARRAY_LEN(recipe_names), (int)r);
}

const char *moe_dispatcher_name(enum moe_dispatcher d)
{
    return name_at(dispatcher_names, MOE_ARRAY_LEN(dispatcher_names), (int)d);
}

const char *moe_recompute_name(enum moe_recompute_granularity g)
{
    return name_at(recompute_names, MOE_ARRAY_LEN(recompute_names), (int)g);
}

const char *moe_recompute_method_name(enum moe_recompute_method m)
{
    return name_at(recompute_method_names, MOE_ARRAY_LEN(recompute_method_names), (int)m);
}

const char *moe_dtype_name(enum moe_dtype d)
{
    return name_at(dtype_names, MOE_ARRAY_LEN(dtype_names), (int)d);
}

const char *moe_cuda_graph_impl_name(enum moe_cuda_graph_impl impl)
{
    return name_at(cuda_graph_impl_names, MOE_ARRAY_LEN(cuda_graph_impl_names), (int)impl);
}

enum moe_status moe_recipe_parse(const char *s, enum moe_recipe *out, struct moe_diag *diag)
{
    /* Megatron's --fp8-recipe spellings are accepted too. */
    static const char *const megatron_fp8[] = {"tensorwise", "delayed", "blockwise"};
    for (size_t i = 0; s != NULL && i < MOE_ARRAY_LEN(megatron_fp8); i++) {
        if (strcmp(s, megatron_fp8[i]) == 0) {
            *out = (enum moe_recipe)(MOE_RECIPE_FP8_TENSORWISE + (int)i);
            return MOE_OK;
        }
    }
    int idx = 0;
    MOE_TRY(
        lookup_name(s, recipe_names, MOE_ARRAY_LEN(recipe_names), "precision recipe", &idx, diag));
    *out = (enum moe_recipe)idx;
    return MOE_OK;
}

enum moe_status moe_dispatcher_parse(const char *s, enum moe_dispatcher *out, struct moe_diag *diag)
{
    int idx = 0;
    MOE_TRY(lookup_name(s, dispatcher_names, MOE_ARRAY_LEN(dispatcher_names), "dispatcher", &idx,
                        diag));
    *out = (enum moe_dispatcher)idx;
    return MOE_OK;
}

enum moe_status
moe_recompute_parse(const char *s, enum moe_recompute_granularity *out, struct moe_diag *diag)
{
    int idx = 0;
    MOE_TRY(lookup_name(s, recompute_names, MOE_ARRAY_LEN(recompute_names), "recompute granularity",
                        &idx, diag));
    *out = (enum moe_recompute_granularity)idx;
    return MOE_OK;
}

enum moe_status
moe_recompute_method_parse(const char *s, enum moe_recompute_method *out, struct moe_diag *diag)
{
    int idx = 0;
    MOE_TRY(lookup_name(s, recompute_method_names, MOE_ARRAY_LEN(recompute_method_names),
                        "recompute method", &idx, diag));
    *out = (enum moe_recompute_method)idx;
    return MOE_OK;
}

enum moe_status moe_dtype_parse(const char *s, enum moe_dtype *out, struct moe_diag *diag)
{
    int idx = 0;
    MOE_TRY(lookup_name(s, dtype_names, MOE_ARRAY_LEN(dtype_names), "dtype", &idx, diag));
    *out = (enum moe_dtype)idx;
    return MOE_OK;
}

enum moe_status
moe_cuda_graph_impl_parse(const char *s, enum moe_cuda_graph_impl *out, struct moe_diag *diag)
{
    int idx = 0;
    MOE_TRY(lookup_name(s, cuda_graph_impl_names, MOE_ARRAY_LEN(cuda_graph_impl_names),
                        "CUDA graph implementation", &idx, diag));
    *out = (enum moe_cuda_graph_impl)idx;
    return MOE_OK;
}

static const char *const *module_names(enum moe_module_set set, size_t *n, const char **what)
{
    switch (set) {
    case MOE_MODSET_RECOMPUTE:
        *n = MOE_ARRAY_LEN(rc_module_names);
        *what = "recompute module";
        return rc_module_names;
    case MOE_MODSET_OFFLOAD:
        *n = MOE_ARRAY_LEN(off_module_names);
        *what = "offload module";
        return off_module_names;
    case MOE_MODSET_CUDA_GRAPH:
        *n = MOE_ARRAY_LEN(cgm_module_names);
        *what = "CUDA graph module";
        return cgm_module_names;
    }
    *n = 0;
    *what = "module";
    return NULL;
}

const char *moe_module_name(enum moe_module_set set, unsigned bit)
{
    size_t n = 0;
    const char *what = NULL;
    const char *const *names = module_names(set, &n, &what);
    for (size_t i = 0; i < n; i++) {
        if (bit == (1u << i)) {
            return names[i];
        }
    }
    return NULL;
}

enum moe_status
moe_module_parse(enum moe_module_set set, const char *name, unsigned *bit, struct moe_diag *diag)
{
    size_t n = 0;
    const char *what = NULL;
    const char *const *names = module_names(set, &n, &what);
    int idx = 0;
    MOE_TRY(lookup_name(name, names, n, what, &idx, diag));
    *bit = 1u << idx;
    return MOE_OK;
}

enum moe_math moe_recipe_math(enum moe_recipe r)
{
    switch (r) {
    case MOE_RECIPE_FP8_TENSORWISE:
    case MOE_RECIPE_FP8_DELAYED:
    case MOE_RECIPE_FP8_BLOCKWISE:
    case MOE_RECIPE_MXFP8:
        return MOE_MATH_FP8;
    case MOE_RECIPE_NVFP4:
        return MOE_MATH_FP4;
    case MOE_RECIPE_BF16:
    case MOE_NUM_RECIPES:
        break;
    }
    return MOE_MATH_BF16;
}

/* ------------------------------------------------------------------------------------------ */
/* Model predicates (kept local so this file needs nothing but the config struct)               */

static int cfg_layers(const struct moe_model_cfg *cfg)
{
    int n = cfg->num_layers;
    return n < 0 ? 0 : (n > MOE_MAX_LAYERS ? MOE_MAX_LAYERS : n);
}

/* Routed experts on at least one decoder layer. */
static bool cfg_has_moe(const struct moe_model_cfg *cfg)
{
    if (cfg->num_experts <= 0) {
        return false;
    }
    for (int i = 0; i < cfg_layers(cfg); i++) {
        if (cfg->layer_flags[i] & MOE_LAYER_MOE) {
            return true;
        }
    }
    return false;
}

/* At least one decoder layer with a dense MLP (or an MTP layer, which copies the last layer). */
static bool cfg_has_dense(const struct moe_model_cfg *cfg)
{
    if (!cfg_has_moe(cfg)) {
        return cfg->num_layers > 0;
    }
    for (int i = 0; i < cfg_layers(cfg); i++) {
        if (!(cfg->layer_flags[i] & MOE_LAYER_MOE)) {
            return true;
        }
    }
    return false;
}

static bool recipe_is_fp8(enum moe_recipe r)
{
    return r == MOE_RECIPE_FP8_TENSORWISE || r == MOE_RECIPE_FP8_DELAYED ||
           r == MOE_RECIPE_FP8_BLOCKWISE;
}

/* ------------------------------------------------------------------------------------------ */
/* Pipeline layout strings [P]                                                                  */

/* Items one layout string may expand to: bounds the work "(((t)*999)*999)*999" could cause. */
#define PP_MAX_ITEMS  (4L * (MOE_MAX_LAYERS + MOE_MAX_PP_CHUNKS))
#define PP_MAX_DEPTH  8
#define PP_MAX_REPEAT 100000
/* Parser steps (characters visited, group repetitions) one string may cost: bounds the time of
 * nested repeats that emit nothing, e.g. "((()*99999)*99999)*3" (found by tests/fuzz). Real
 * layouts take a few hundred; a string at the 65536-character cap read twice (the dry pass that
 * finds each ')' and the real one) takes 131072. */
#define PP_MAX_STEPS (1L << 18)

struct pp_builder {
    const char *src;
    int len;
    struct moe_pp_chunk *chunks; /* [MOE_MAX_PP_CHUNKS] or NULL to only count */
    int num_chunks;              /* chunks opened so far (>= 1 once parsing starts) */
    int num_t, num_m;            /* decoder and MTP layers seen */
    int mtp_chunk;               /* chunk holding the MTP layers, -1 if none yet */
    bool seen_e, seen_l;
    int dry; /* > 0: only find the end of a parenthesised group */
    long items;
    long steps; /* work done so far, <= PP_MAX_STEPS */
    struct moe_diag *diag;
};

static enum moe_status pp_error(struct pp_builder *b, int pos, const char *msg)
{
    if (b->diag != NULL) {
        b->diag->column = pos + 1;
    }
    return moe_diag_set(b->diag, MOE_ERR_PARSE, "column %d: %s", pos + 1, msg);
}

/* Count one unit of parser work; an error past PP_MAX_STEPS. */
static enum moe_status pp_step(struct pp_builder *b, int pos)
{
    if (++b->steps > PP_MAX_STEPS) {
        return pp_error(b, pos, "the layout expands to too many items (nested repeats)");
    }
    return MOE_OK;
}

static enum moe_status pp_emit_layer(struct pp_builder *b, struct moe_pp_chunk *ch, char c, int pos)
{
    switch (c) {
    case 'E':
        if (b->seen_e) {
            return pp_error(b, pos, "E (embedding) appears twice");
        }
        b->seen_e = true;
        if (ch) {
            ch->has_embedding = 1;
        }
        return MOE_OK;
    case 't':
        if (b->num_m > 0) {
            return pp_error(b, pos, "decoder layers (t) must come before MTP layers (m)");
        }
        if (++b->num_t > MOE_MAX_LAYERS) {
            return pp_error(b, pos, "more decoder layers than MOE_MAX_LAYERS (512)");
        }
        if (ch) {
            ch->num_layers++;
        }
        return MOE_OK;
    case 'm':
        if (b->mtp_chunk >= 0 && b->mtp_chunk != b->num_chunks - 1) {
            return pp_error(b, pos, "all MTP layers (m) must be in one chunk");
        }
        b->mtp_chunk = b->num_chunks - 1;
        if (++b->num_m > MOE_MAX_MTP) {
            return pp_error(b, pos, "more MTP layers than MOE_MAX_MTP (8)");
        }
        if (ch) {
            ch->num_mtp++;
        }
        return MOE_OK;
    default: /* 'L' */
        b->seen_l = true;
        if (ch) {
            ch->has_loss = 1;
        }
        return MOE_OK;
    }
}

static enum moe_status pp_emit(struct pp_builder *b, char c, int pos)
{
    if (b->dry > 0) {
        return MOE_OK;
    }
    if (++b->items > PP_MAX_ITEMS) {
        return pp_error(b, pos, "the layout expands to too many items");
    }
    if (b->seen_l) {
        return pp_error(b, pos, "nothing may follow L (the loss ends the last chunk)");
    }
    if (!b->seen_e && c != 'E') {
        return pp_error(b, pos, "the layout must start with E (embedding)");
    }
    if (c != '|') {
        struct moe_pp_chunk *ch = b->chunks ? &b->chunks[b->num_chunks - 1] : NULL;
        return pp_emit_layer(b, ch, c, pos);
    }
    if (b->num_chunks >= MOE_MAX_PP_CHUNKS) {
        return pp_error(b, pos, "more chunks than MOE_MAX_PP_CHUNKS (512)");
    }
    b->num_chunks++;
    if (b->chunks) {
        memset(&b->chunks[b->num_chunks - 1], 0, sizeof(b->chunks[0]));
    }
    return MOE_OK;
}

/* Parse "*N" at *pos (N >= 0); *n = 1 when no '*' follows and required is false. */
static enum moe_status pp_repeat(struct pp_builder *b, int *pos, bool required, long *n)
{
    *n = 1;
    if (*pos >= b->len || b->src[*pos] != '*') {
        if (required) {
            return pp_error(b, *pos, "expected '*N' after ')'");
        }
        return MOE_OK;
    }
    int star = (*pos)++;
    long v = 0;
    int digits = 0;
    while (*pos < b->len && b->src[*pos] >= '0' && b->src[*pos] <= '9') {
        v = v * 10 + (b->src[*pos] - '0');
        (*pos)++;
        if (++digits > 6 || v > PP_MAX_REPEAT) {
            return pp_error(b, star, "repeat count too large");
        }
    }
    if (digits == 0) {
        return pp_error(b, star, "'*' must be followed by a count");
    }
    *n = v;
    return MOE_OK;
}

static enum moe_status pp_parse_seq(struct pp_builder *b, int *pos, int depth);

/* "(...)*N": a dry pass finds the closing parenthesis, then the body is parsed N times. */
static enum moe_status pp_parse_group(struct pp_builder *b, int *pos, int depth)
{
    int open = (*pos)++;
    if (depth >= PP_MAX_DEPTH) {
        return pp_error(b, open, "parentheses nested too deeply");
    }
    int body = *pos;
    b->dry++;
    enum moe_status st = pp_parse_seq(b, pos, depth + 1);
    b->dry--;
    MOE_TRY(st);
    if (*pos >= b->len) {
        return pp_error(b, open, "'(' is never closed");
    }
    (*pos)++; /* ')' */
    long n = 1;
    MOE_TRY(pp_repeat(b, pos, true, &n));
    if (b->dry > 0) {
        return MOE_OK;
    }
    for (long k = 0; k < n; k++) {
        int p = body;
        MOE_TRY(pp_step(b, open));
        MOE_TRY(pp_parse_seq(b, &p, depth + 1));
    }
    return MOE_OK;
}

/* Parse items until the end or a ')' (left at *pos for the caller). */
static enum moe_status pp_parse_seq(struct pp_builder *b, int *pos, int depth)
{
    while (*pos < b->len) {
        MOE_TRY(pp_step(b, *pos));
        char c = b->src[*pos];
        if (c == ')') {
            if (depth == 0) {
                return pp_error(b, *pos, "')' without a matching '('");
            }
            return MOE_OK;
        }
        if (c == ',') { /* cosmetic, as in Megatron */
            (*pos)++;
            continue;
        }
        if (c == '(') {
            MOE_TRY(pp_parse_group(b, pos, depth));
            continue;
        }
        if (c != 'E' && c != 't' && c != 'm' && c != 'L' && c != '|') {
            char msg[160];
            (void)snprintf(msg, sizeof(msg),
                           "invalid character '%c'; a layout uses E (embedding), t (decoder "
                           "layer), m (MTP layer), L (loss), '|', '(...)*N' and ','",
                           c);
            return pp_error(b, *pos, msg);
        }
        int at = (*pos)++;
        long n = 1;
        MOE_TRY(pp_repeat(b, pos, false, &n));
        for (long k = 0; k < n && b->dry == 0; k++) { /* a dry pass emits nothing */
            MOE_TRY(pp_emit(b, c, at));
        }
    }
    return MOE_OK;
}

/* Parse s; chunks (may be NULL) receives the chunks in order. */
static enum moe_status
pp_run(struct pp_builder *b, const char *s, struct moe_pp_chunk *chunks, struct moe_diag *diag)
{
    memset(b, 0, sizeof(*b));
    b->src = s;
    b->len = (s != NULL) ? (int)strnlen(s, 65536) : 0;
    b->chunks = chunks;
    b->num_chunks = 1;
    b->mtp_chunk = -1;
    b->diag = diag;
    if (chunks != NULL) {
        memset(&chunks[0], 0, sizeof(chunks[0]));
    }
    moe_diag_source(diag, "--pipeline-model-parallel-layout");
    if (b->len == 0) {
        return moe_diag_set(diag, MOE_ERR_PARSE, "the pipeline layout string is empty");
    }
    int pos = 0;
    MOE_TRY(pp_parse_seq(b, &pos, 0));
    if (!b->seen_l) {
        return pp_error(b, b->len, "the layout must end with L (loss)");
    }
    return MOE_OK;
}

enum moe_status moe_layout_count_pp_chunks(const char *s, int *num_chunks, struct moe_diag *diag)
{
    struct pp_builder b;
    MOE_TRY(pp_run(&b, s, NULL, diag));
    *num_chunks = b.num_chunks;
    return MOE_OK;
}

/* Number decoder layers consecutively in chunk order. */
static void number_chunks(struct moe_layout *lay)
{
    int next = 0;
    for (int c = 0; c < lay->num_chunks; c++) {
        lay->chunks[c].first_layer = (uint16_t)next;
        next += lay->chunks[c].num_layers;
    }
}

/* Checks shared by a parsed string and a caller-filled custom layout [P]. */
static enum moe_status check_custom_chunks(const struct moe_model_cfg *cfg,
                                           const struct moe_layout *lay,
                                           int end_col,
                                           struct moe_diag *diag)
{
    int want = lay->pp * lay->vpp;
    if (diag != NULL) {
        diag->column = end_col;
    }
    if (lay->num_chunks != want) {
        if (lay->num_chunks % lay->pp == 0) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "the layout has %d chunks but pp*vpp = %d*%d = %d; with pp=%d it "
                                "describes vpp=%d (--num-virtual-stages-per-pipeline-rank %d)",
                                lay->num_chunks, lay->pp, lay->vpp, want, lay->pp,
                                lay->num_chunks / lay->pp, lay->num_chunks / lay->pp);
        }
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "the layout has %d chunks, not a multiple of pp=%d; it needs pp*vpp "
                            "= %d chunks separated by '|'",
                            lay->num_chunks, lay->pp, want);
    }
    int t = 0, m = 0, e = 0, l = 0, mtp_chunk = -1;
    for (int c = 0; c < lay->num_chunks; c++) {
        t += lay->chunks[c].num_layers;
        m += lay->chunks[c].num_mtp;
        e += lay->chunks[c].has_embedding ? 1 : 0;
        l += lay->chunks[c].has_loss ? 1 : 0;
        if (lay->chunks[c].num_mtp > 0) {
            if (mtp_chunk >= 0) {
                return moe_diag_set(diag, MOE_ERR_INVALID,
                                    "all MTP layers must be in one chunk (chunks %d and %d have "
                                    "some)",
                                    mtp_chunk, c);
            }
            mtp_chunk = c;
        }
    }
    if (t != cfg->num_layers) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "the layout places %d decoder layers (t) but the model has "
                            "num_layers=%d",
                            t, cfg->num_layers);
    }
    if (m != cfg->mtp_num_layers) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "the layout places %d MTP layers (m) but the model has "
                            "mtp_num_layers=%d",
                            m, cfg->mtp_num_layers);
    }
    if (e != 1 || !lay->chunks[0].has_embedding) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "the embedding (E) must be in chunk 0, once");
    }
    if (l != 1 || !lay->chunks[lay->num_chunks - 1].has_loss) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "the loss (L) must be in the last chunk, once");
    }
    if (mtp_chunk >= 0 && mtp_chunk / lay->pp != lay->vpp - 1) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "MTP layers must be in the last virtual stage of their pipeline "
                            "rank (Megatron's restriction); chunk %d is virtual stage %d of %d",
                            mtp_chunk, mtp_chunk / lay->pp, lay->vpp);
    }
    return MOE_OK;
}

enum moe_status moe_layout_parse_pp_string(const char *s,
                                           const struct moe_model_cfg *cfg,
                                           struct moe_layout *lay,
                                           struct moe_diag *diag)
{
    lay->has_custom_pp_layout = false;
    lay->num_chunks = 0;
    if (lay->pp < 1 || lay->vpp < 1 || lay->pp * lay->vpp > MOE_MAX_PP_CHUNKS) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "pp=%d and vpp=%d must be set (>= 1) first",
                            lay->pp, lay->vpp);
    }
    struct pp_builder b;
    MOE_TRY(pp_run(&b, s, lay->chunks, diag));
    lay->num_chunks = b.num_chunks;
    enum moe_status st = check_custom_chunks(cfg, lay, b.len + 1, diag);
    if (st != MOE_OK) {
        lay->num_chunks = 0;
        return st;
    }
    number_chunks(lay);
    lay->has_custom_pp_layout = true;
    return MOE_OK;
}

/* One chunk as layout text: E, t run, m run, L. */
static int chunk_text(const struct moe_pp_chunk *ch, char *out, size_t len)
{
    size_t used = 0;
    int w = 0;
    if (ch->has_embedding) {
        w = snprintf(out + used, len - used, "E");
        used += (size_t)w;
    }
    if (ch->num_layers > 3) {
        w = snprintf(out + used, len - used, "t*%u", (unsigned)ch->num_layers);
    } else {
        w = snprintf(out + used, len - used, "%.*s", (int)ch->num_layers, "ttt");
    }
    used += (size_t)w;
    if (ch->num_mtp > 3) {
        w = snprintf(out + used, len - used, "m*%u", (unsigned)ch->num_mtp);
    } else {
        w = snprintf(out + used, len - used, "%.*s", (int)ch->num_mtp, "mmm");
    }
    used += (size_t)w;
    if (ch->has_loss) {
        w = snprintf(out + used, len - used, "L");
        used += (size_t)w;
    }
    return (int)used;
}

static bool chunks_equal(const struct moe_pp_chunk *a, const struct moe_pp_chunk *b)
{
    return a->num_layers == b->num_layers && a->num_mtp == b->num_mtp &&
           a->has_embedding == b->has_embedding && a->has_loss == b->has_loss;
}

static int num_digits(long v)
{
    int d = 1;
    while (v >= 10) {
        v /= 10;
        d++;
    }
    return d;
}

/* Append to buf[cap] at *used; stops (truncates) at the end of the buffer. */
static void append(char *buf, size_t cap, size_t *used, const char *text, int times)
{
    for (int k = 0; k < times && *used + 1 < cap; k++) {
        int w = snprintf(buf + *used, cap - *used, "%s", text);
        size_t room = cap - *used - 1;
        *used += (w > 0 && (size_t)w <= room) ? (size_t)w : room;
    }
}

void moe_layout_format_pp_string(const struct moe_layout *lay, char *buf, int len)
{
    if (buf == NULL || len <= 0) {
        return;
    }
    buf[0] = '\0';
    size_t cap = (size_t)len;
    size_t used = 0;
    int n = lay->num_chunks;
    for (int i = 0; i < n;) {
        int j = i + 1;
        while (j < n && chunks_equal(&lay->chunks[i], &lay->chunks[j])) {
            j++;
        }
        char text[32];
        char item[64];
        int tl = chunk_text(&lay->chunks[i], text, sizeof(text));
        int reps = (j == n) ? j - i - 1 : j - i; /* chunks written with a trailing '|' */
        long literal = (long)reps * (tl + 1);
        long packed = tl + 4 + num_digits(reps);
        if (reps >= 2 && packed < literal) {
            (void)snprintf(item, sizeof(item), "(%s|)*%d", text, reps);
            append(buf, cap, &used, item, 1);
        } else {
            (void)snprintf(item, sizeof(item), "%s|", text);
            append(buf, cap, &used, item, reps);
        }
        if (j == n) {
            append(buf, cap, &used, text, 1);
        }
        i = j;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Default placement and the balanced-layout suggestion                                         */

static void mark_ends(const struct moe_model_cfg *cfg, struct moe_layout *lay)
{
    lay->chunks[0].has_embedding = 1;
    lay->chunks[lay->num_chunks - 1].has_loss = 1;
    /* Megatron's default: MTP layers follow the decoder on the last stage, with the loss. */
    lay->chunks[lay->num_chunks - 1].num_mtp = (uint8_t)cfg->mtp_num_layers;
}

/* Balanced chunks when the layers do not divide (model/layout.h). */
void moe_layout_balanced_chunks(const struct moe_model_cfg *cfg, struct moe_layout *lay)
{
    int c_n = lay->num_chunks;
    int mtp = cfg->mtp_num_layers;
    int target = (cfg->num_layers + mtp + c_n - 1) / c_n;
    long total = 0;
    for (int c = 0; c < c_n; c++) {
        memset(&lay->chunks[c], 0, sizeof(lay->chunks[c]));
        int cap = (c == c_n - 1) ? target - mtp : target;
        lay->chunks[c].num_layers = (uint16_t)(cap > 0 ? cap : 0);
        total += lay->chunks[c].num_layers;
    }
    long excess = total - cfg->num_layers;
    while (excess > 0) {
        bool took = false;
        for (int k = 0; k < c_n && excess > 0; k++) {
            /* order: first, last, then C-2, C-3, ..., 1 */
            int c = (k == 0) ? 0 : (k == 1 ? c_n - 1 : c_n - k);
            if (c_n == 1) {
                c = 0;
            }
            if (lay->chunks[c].num_layers > 0) {
                lay->chunks[c].num_layers--;
                excess--;
                took = true;
            }
        }
        MOE_ASSERT(took);
    }
    mark_ends(cfg, lay);
    number_chunks(lay);
}

static enum moe_status
suggest_layout(const struct moe_model_cfg *cfg, struct moe_layout *lay, struct moe_diag *diag)
{
    moe_layout_balanced_chunks(cfg, lay);
    char text[256];
    moe_layout_format_pp_string(lay, text, (int)sizeof(text));
    lay->num_chunks = 0;
    moe_diag_source(diag, "--pipeline-model-parallel-layout");
    return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                        "num_layers=%d does not divide over pp*vpp = %d*%d = %d chunks; give "
                        "--decoder-first/last-pipeline-num-layers or a layout such as "
                        "--pipeline-model-parallel-layout '%s'",
                        cfg->num_layers, lay->pp, lay->vpp, lay->pp * lay->vpp, text);
}

/* --decoder-first/last-pipeline-num-layers with the rest even [T]. */
static enum moe_status
uneven_chunks(const struct moe_model_cfg *cfg, struct moe_layout *lay, struct moe_diag *diag)
{
    int pp = lay->pp, vpp = lay->vpp;
    int first = lay->first_stage_layers, last = lay->last_stage_layers;
    moe_diag_source(diag, first > 0 ? "--decoder-first-pipeline-num-layers"
                                    : "--decoder-last-pipeline-num-layers");
    if (first % vpp != 0 || last % vpp != 0) {
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "first/last stage layers (%d/%d) must be multiples of vpp=%d", first,
                            last, vpp);
    }
    int middle_stages = pp - (first > 0) - (last > 0);
    int middle_layers = cfg->num_layers - first - last;
    if (middle_layers < 0 || (middle_layers > 0) != (middle_stages > 0)) {
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "first/last stage layers (%d + %d) leave %d layers for %d middle "
                            "stages of a %d-layer model; each middle stage needs layers",
                            first, last, middle_layers, middle_stages, cfg->num_layers);
    }
    if (middle_stages > 0 && middle_layers % (middle_stages * vpp) != 0) {
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "the %d middle layers do not divide over %d middle stages x vpp=%d; "
                            "adjust the first/last stage layer counts",
                            middle_layers, middle_stages, vpp);
    }
    int per_mid = middle_stages > 0 ? middle_layers / (middle_stages * vpp) : 0;
    for (int c = 0; c < lay->num_chunks; c++) {
        int p = c % pp;
        int n = per_mid;
        if (p == 0 && first > 0) {
            n = first / vpp;
        } else if (p == pp - 1 && last > 0) {
            n = last / vpp;
        }
        memset(&lay->chunks[c], 0, sizeof(lay->chunks[c]));
        lay->chunks[c].num_layers = (uint16_t)n;
    }
    mark_ends(cfg, lay);
    number_chunks(lay);
    return MOE_OK;
}

static enum moe_status
place_chunks(const struct moe_model_cfg *cfg, struct moe_layout *lay, struct moe_diag *diag)
{
    if (lay->has_custom_pp_layout) {
        if (lay->first_stage_layers > 0 || lay->last_stage_layers > 0) {
            moe_diag_source(diag, "--pipeline-model-parallel-layout");
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "a pipeline layout string cannot be combined with "
                                "--decoder-first/last-pipeline-num-layers (Megatron refuses "
                                "both); drop one");
        }
        MOE_TRY(check_custom_chunks(cfg, lay, 0, diag));
        number_chunks(lay);
        return MOE_OK;
    }
    lay->num_chunks = lay->pp * lay->vpp;
    if (lay->first_stage_layers > 0 || lay->last_stage_layers > 0) {
        return uneven_chunks(cfg, lay, diag);
    }
    if (cfg->num_layers % lay->num_chunks != 0) {
        return suggest_layout(cfg, lay, diag);
    }
    for (int c = 0; c < lay->num_chunks; c++) {
        memset(&lay->chunks[c], 0, sizeof(lay->chunks[c]));
        lay->chunks[c].num_layers = (uint16_t)(cfg->num_layers / lay->num_chunks);
    }
    mark_ends(cfg, lay);
    number_chunks(lay);
    return MOE_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Parallel sizes, batch, sequence                                                              */

static enum moe_status check_degrees(const struct moe_layout *lay, struct moe_diag *diag)
{
    const struct {
        const char *flag;
        int value;
    } sizes[] = {
        {"--tensor-model-parallel-size", lay->tp},
        {"--context-parallel-size", lay->cp},
        {"--pipeline-model-parallel-size", lay->pp},
        {"--num-virtual-stages-per-pipeline-rank", lay->vpp},
        {"--expert-model-parallel-size", lay->ep},
        {"--expert-tensor-parallel-size", lay->etp},
        {"--micro-batch-size", lay->mbs},
    };
    if (lay->num_gpus < 1) {
        moe_diag_source(diag, "--gpus");
        return moe_diag_set(diag, MOE_ERR_INVALID, "num_gpus=%d: give the GPU count (--gpus N)",
                            lay->num_gpus);
    }
    for (size_t i = 0; i < MOE_ARRAY_LEN(sizes); i++) {
        if (sizes[i].value < 1) {
            moe_diag_source(diag, sizes[i].flag);
            return moe_diag_set(diag, MOE_ERR_INVALID, "%s %d: must be at least 1", sizes[i].flag,
                                sizes[i].value);
        }
    }
    if ((long)lay->pp * lay->vpp > MOE_MAX_PP_CHUNKS) {
        moe_diag_source(diag, "--num-virtual-stages-per-pipeline-rank");
        return moe_diag_set(diag, MOE_ERR_INVALID, "pp*vpp = %d*%d exceeds %d chunks", lay->pp,
                            lay->vpp, MOE_MAX_PP_CHUNKS);
    }
    if (lay->gbs < 0 || lay->seq_length < 0 || lay->first_stage_layers < 0 ||
        lay->last_stage_layers < 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "gbs, seq_length and first/last stage layers must not be negative");
    }
    return MOE_OK;
}

/* dp from the world size [A]; edp from parallel folding (DESIGN.md). */
static enum moe_status derive_groups(struct moe_layout *lay, struct moe_diag *diag)
{
    long model = (long)lay->tp * lay->cp * lay->pp;
    if (lay->num_gpus % model != 0) {
        moe_diag_source(diag, "--gpus");
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "num_gpus=%d is not divisible by tp*cp*pp = %d*%d*%d = %ld; use a "
                            "multiple of %ld GPUs or change tp/cp/pp",
                            lay->num_gpus, lay->tp, lay->cp, lay->pp, model, model);
    }
    lay->dp = (int)(lay->num_gpus / model);
    long attn = (long)lay->tp * lay->cp * lay->dp;
    long expert = (long)lay->etp * lay->ep;
    if (attn % expert != 0) {
        moe_diag_source(diag, "--expert-model-parallel-size");
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "parallel folding needs tp*cp*dp = %ld divisible by etp*ep = %d*%d = "
                            "%ld; pick ep and etp whose product divides %ld",
                            attn, lay->etp, lay->ep, expert, attn);
    }
    lay->edp = (int)(attn / expert);
    return MOE_OK;
}

/* TP/EP splits of the weights [T], [A]. */
static enum moe_status check_model_split(const struct moe_model_cfg *cfg,
                                         const struct moe_layout *lay,
                                         struct moe_diag *diag)
{
    int tp = lay->tp;
    moe_diag_source(diag, "--tensor-model-parallel-size");
    if (cfg->num_attention_heads <= 0 || cfg->num_attention_heads % tp != 0) {
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "num_attention_heads=%d is not divisible by tp=%d; choose tp from "
                            "the divisors of %d",
                            cfg->num_attention_heads, tp, cfg->num_attention_heads);
    }
    int g = cfg->num_query_groups;
    if (!cfg->is_mla && (g <= 0 || (g % tp != 0 && tp % g != 0))) {
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "num_query_groups=%d must be a multiple or a divisor of tp=%d", g, tp);
    }
    if (cfg_has_dense(cfg) && (cfg->ffn_hidden_size <= 0 || cfg->ffn_hidden_size % tp != 0)) {
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "ffn_hidden_size=%d (dense MLP) is not divisible by tp=%d",
                            cfg->ffn_hidden_size, tp);
    }
    bool moe = cfg_has_moe(cfg);
    if (!moe) {
        if (lay->ep > 1) {
            moe_diag_source(diag, "--expert-model-parallel-size");
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "ep=%d needs a model with experts (this model has none); use "
                                "ep=1",
                                lay->ep);
        }
        return MOE_OK;
    }
    if (cfg->moe_shared_expert_intermediate_size % tp != 0) {
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "moe_shared_expert_intermediate_size=%d (TP-split like a dense MLP) "
                            "is not divisible by tp=%d",
                            cfg->moe_shared_expert_intermediate_size, tp);
    }
    moe_diag_source(diag, "--expert-model-parallel-size");
    if (cfg->num_experts % lay->ep != 0) {
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "num_experts=%d is not divisible by ep=%d; choose ep from the "
                            "divisors of %d",
                            cfg->num_experts, lay->ep, cfg->num_experts);
    }
    moe_diag_source(diag, "--expert-tensor-parallel-size");
    if (cfg->moe_ffn_hidden_size <= 0 || cfg->moe_ffn_hidden_size % lay->etp != 0) {
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "moe_ffn_hidden_size=%d is not divisible by etp=%d",
                            cfg->moe_ffn_hidden_size, lay->etp);
    }
    /* [T] "Bias in Moe is only supported when ETP==1". */
    if (cfg->has_linear_bias && lay->etp > 1) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "experts with linear biases (this model has them) need etp=1; got "
                            "etp=%d",
                            lay->etp);
    }
    return MOE_OK;
}

static enum moe_status
check_sequence(const struct moe_model_cfg *cfg, struct moe_layout *lay, struct moe_diag *diag)
{
    if (lay->seq_length == 0) {
        lay->seq_length = cfg->seq_length;
    }
    int seq = lay->seq_length;
    moe_diag_source(diag, "--seq-length");
    if (seq <= 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "seq_length is not set; give --seq-length");
    }
    /* [A] seq-length should be a multiple of 2 * context-parallel-size if cp > 1. */
    if (lay->cp > 1 && seq % (2 * lay->cp) != 0) {
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "seq_length=%d must be a multiple of 2*cp = %d when cp > 1 (each "
                            "sequence is cut into 2*cp load-balanced pieces)",
                            seq, 2 * lay->cp);
    }
    /* [A] sequence parallelism is switched off when tp == 1. */
    if (lay->tp == 1) {
        lay->sequence_parallel = false;
    }
    moe_diag_source(diag, "--sequence-parallel");
    /* [Y] "When using MoE and tensor parallelism, sequence parallelism must be used." */
    if (cfg_has_moe(cfg) && lay->tp > 1 && !lay->sequence_parallel) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "a MoE model with tp=%d needs --sequence-parallel (Megatron asserts "
                            "it); add the flag or use tp=1",
                            lay->tp);
    }
    if (lay->sequence_parallel && (seq / lay->cp) % lay->tp != 0) {
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "with --sequence-parallel the %d tokens per CP rank must divide over "
                            "tp=%d; change --seq-length",
                            seq / lay->cp, lay->tp);
    }
    return MOE_OK;
}

/* [A] global batch defaults to mbs*dp and must be a multiple of it. */
static enum moe_status derive_batch(struct moe_layout *lay, struct moe_diag *diag)
{
    long step = (long)lay->mbs * lay->dp;
    if (step > INT_MAX) {
        moe_diag_source(diag, "--micro-batch-size");
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "micro-batch %d x dp %d = %ld sequences per step is over %d; lower "
                            "--micro-batch-size or the GPU count",
                            lay->mbs, lay->dp, step, INT_MAX);
    }
    if (lay->gbs == 0) {
        lay->gbs = (int)step;
    }
    if (lay->gbs % step != 0) {
        moe_diag_source(diag, "--global-batch-size");
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "global batch %d is not divisible by micro-batch %d x dp %d = %ld; "
                            "use a global batch that is a multiple of %ld",
                            lay->gbs, lay->mbs, lay->dp, step, step);
    }
    lay->num_microbatches = (int)(lay->gbs / step);
    return MOE_OK;
}

static enum moe_status check_pipeline(struct moe_layout *lay, struct moe_diag *diag)
{
    moe_diag_source(diag, "--num-virtual-stages-per-pipeline-rank");
    /* [A] interleaving needs pp > 1 (pp > 2 without p2p overlap, which is on by default). */
    if (lay->vpp > 1 && lay->pp == 1) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "vpp=%d needs pp > 1 (virtual stages interleave pipeline ranks); "
                            "use vpp=1 or raise pp",
                            lay->vpp);
    }
    /*
     * [S] The interleaved schedule groups microbatch_group_size_per_vp_stage (default pp)
     * micro-batches per virtual stage and refuses a remainder between 0 and pp: M % pp == 0.
     */
    if (lay->vpp > 1 && lay->num_microbatches % lay->pp != 0) {
        long step = (long)lay->mbs * lay->dp * lay->pp;
        moe_diag_source(diag, "--global-batch-size");
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "the interleaved schedule (vpp=%d) needs num_microbatches=%d to be a "
                            "multiple of pp=%d; use a global batch that is a multiple of %ld",
                            lay->vpp, lay->num_microbatches, lay->pp, step);
    }
    if ((lay->first_stage_layers > 0 || lay->last_stage_layers > 0) && lay->pp == 1) {
        moe_diag_source(diag, "--decoder-first-pipeline-num-layers");
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "first/last pipeline stage layer counts need pp > 1");
    }
    return MOE_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Options                                                                                      */

static enum moe_status check_precision(const struct moe_options *opt, struct moe_diag *diag)
{
    if ((int)opt->recipe < 0 || opt->recipe >= MOE_NUM_RECIPES) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "unknown precision recipe %d", (int)opt->recipe);
    }
    moe_diag_source(diag, "--fp8-param-gather");
    /* [T] fp8_param must be used together with fp8 mode. */
    if (opt->fp8_param_gather && opt->recipe == MOE_RECIPE_BF16) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--fp8-param-gather needs an FP8/FP4 recipe (--fp8-format with "
                            "--fp8-recipe, or --fp4-format)");
    }
    /* [A] --fp8-param-gather only supported with distributed optimizer. */
    if (opt->fp8_param_gather && !opt->use_distributed_optimizer) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--fp8-param-gather needs --use-distributed-optimizer");
    }
    const enum moe_dtype dts[3] = {opt->main_grads_dtype, opt->exp_avg_dtype,
                                   opt->exp_avg_sq_dtype};
    const char *flags[3] = {"--main-grads-dtype", "--exp-avg-dtype", "--exp-avg-sq-dtype"};
    for (int i = 0; i < 3; i++) {
        moe_diag_source(diag, flags[i]);
        if ((int)dts[i] < 0 || dts[i] > MOE_DTYPE_FP8) {
            return moe_diag_set(diag, MOE_ERR_INVALID, "%s: unknown dtype %d", flags[i],
                                (int)dts[i]);
        }
        /* [O] non-fp32 optimizer dtypes only with the precision-aware optimizer. */
        if (dts[i] != MOE_DTYPE_FP32 && !opt->precision_aware_optimizer) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "%s %s needs --use-precision-aware-optimizer (else it must be "
                                "fp32)",
                                flags[i], moe_dtype_name(dts[i]));
        }
    }
    /* [A] --main-grads-dtype choices are fp32 and bf16. */
    if (opt->main_grads_dtype != MOE_DTYPE_FP32 && opt->main_grads_dtype != MOE_DTYPE_BF16) {
        moe_diag_source(diag, "--main-grads-dtype");
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--main-grads-dtype must be fp32 or bf16, not %s",
                            moe_dtype_name(opt->main_grads_dtype));
    }
    return MOE_OK;
}

static enum moe_status check_optimizer(const struct moe_options *opt, struct moe_diag *diag)
{
    moe_diag_source(diag, "--use-precision-aware-optimizer");
    /* [O] precision-aware optimizer only with the distributed optimizer. */
    if (opt->precision_aware_optimizer && !opt->use_distributed_optimizer) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--use-precision-aware-optimizer needs --use-distributed-optimizer");
    }
    moe_diag_source(diag, "--optimizer-cpu-offload");
    /* [A] optimizer CPU offload reuses the precision-aware optimizer's code path. */
    if (opt->optimizer_cpu_offload && !opt->precision_aware_optimizer) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--optimizer-cpu-offload needs --use-precision-aware-optimizer");
    }
    /* [A] with --fp8-param-gather, optimizer CPU offload needs --fp8-recipe delayed. */
    if (opt->optimizer_cpu_offload && opt->fp8_param_gather &&
        opt->recipe != MOE_RECIPE_FP8_DELAYED) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--optimizer-cpu-offload with --fp8-param-gather needs --fp8-recipe "
                            "delayed");
    }
    double f = opt->optimizer_offload_fraction;
    if (!isfinite(f) || f < 0.0 || f > 1.0 || (opt->optimizer_cpu_offload && f <= 0.0)) {
        moe_diag_source(diag, "--optimizer-offload-fraction");
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--optimizer-offload-fraction %g must be in (0, 1] when offloading", f);
    }
    moe_diag_source(diag, "--overlap-param-gather");
    /* [A] --overlap-param-gather needs the distributed optimizer and --overlap-grad-reduce. */
    if (opt->overlap_param_gather && !opt->use_distributed_optimizer) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--overlap-param-gather needs --use-distributed-optimizer");
    }
    if (opt->overlap_param_gather && !opt->overlap_grad_reduce) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--overlap-param-gather needs --overlap-grad-reduce");
    }
    return MOE_OK;
}

/* [T] EP all-to-all overlap (1F1B batch-level overlap) and its companion delay-wgrad. */
static enum moe_status check_ep_overlap(const struct moe_model_cfg *cfg,
                                        const struct moe_layout *lay,
                                        const struct moe_options *opt,
                                        struct moe_diag *diag)
{
    moe_diag_source(diag, "--delay-wgrad-compute");
    if (opt->delay_wgrad_compute && !opt->overlap_moe_ep_comm) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--delay-wgrad-compute needs --overlap-moe-expert-parallel-comm");
    }
    if (!opt->overlap_moe_ep_comm) {
        return MOE_OK;
    }
    moe_diag_source(diag, "--overlap-moe-expert-parallel-comm");
    if (!cfg_has_moe(cfg) || lay->ep <= 1) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--overlap-moe-expert-parallel-comm needs a MoE model with ep > 1");
    }
    if (opt->dispatcher == MOE_DISPATCH_ALLGATHER) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--overlap-moe-expert-parallel-comm needs the alltoall or flex "
                            "dispatcher, not allgather");
    }
    if (lay->pp > 1 && lay->vpp == 1) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--overlap-moe-expert-parallel-comm with pp=%d needs virtual "
                            "pipeline stages (vpp > 1)",
                            lay->pp);
    }
    /* Megatron runs full recompute under EP overlap only without a recompute method, which a
     * plan cannot express; selective recompute without "moe" is the supported combination. */
    if (opt->recompute == MOE_RECOMPUTE_FULL) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--overlap-moe-expert-parallel-comm cannot be planned with full "
                            "recompute and a recompute method; use selective recompute");
    }
    if (opt->recompute == MOE_RECOMPUTE_SELECTIVE && (opt->recompute_modules & MOE_RC_MOE)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--overlap-moe-expert-parallel-comm cannot recompute 'moe'; drop it "
                            "from --recompute-modules");
    }
    if (cfg->mtp_num_layers > 1) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--overlap-moe-expert-parallel-comm supports at most 1 MTP layer "
                            "(model has %d)",
                            cfg->mtp_num_layers);
    }
    return MOE_OK;
}

static enum moe_status check_moe_options(const struct moe_model_cfg *cfg,
                                         const struct moe_layout *lay,
                                         const struct moe_options *opt,
                                         struct moe_diag *diag)
{
    bool moe = cfg_has_moe(cfg);
    moe_diag_source(diag, "--moe-token-dispatcher-type");
    if ((int)opt->dispatcher < 0 || opt->dispatcher >= MOE_NUM_DISPATCHERS) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "unknown dispatcher %d", (int)opt->dispatcher);
    }
    if (!moe &&
        (opt->dispatcher == MOE_DISPATCH_DEEPEP || opt->dispatcher == MOE_DISPATCH_HYBRIDEP)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "the %s dispatcher needs a MoE model; this model has no experts",
                            moe_dispatcher_name(opt->dispatcher));
    }
    moe_diag_source(diag, "--moe-expert-capacity-factor");
    if (!isfinite(opt->capacity_factor) || opt->capacity_factor < 0.0) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "capacity factor %g must be >= 0 (0 = dropless)",
                            opt->capacity_factor);
    }
    moe_diag_source(diag, "--moe-imbalance");
    if (!isfinite(opt->moe_imbalance) || (opt->moe_imbalance != 0.0 && opt->moe_imbalance < 1.0)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--moe-imbalance %g: give a max/mean load factor >= 1, or auto",
                            opt->moe_imbalance);
    }
    /*
     * Hot-expert replicas (ECHO): each clone of a hot expert lives on another EP rank, so it
     * needs experts and ep > 1; at most E/ep clones (one extra expert set per rank, i.e. at most
     * doubling expert memory) are planned.
     */
    moe_diag_source(diag, "--moe-hot-expert-replicas");
    int reps = opt->moe_hot_expert_replicas;
    if (reps < 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "--moe-hot-expert-replicas %d must be >= 0",
                            reps);
    }
    if (reps > 0 && (!moe || lay->ep <= 1)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--moe-hot-expert-replicas needs a MoE model with ep > 1 (clones go "
                            "to other EP ranks)");
    }
    if (reps > 0 && reps > cfg->num_experts / lay->ep) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--moe-hot-expert-replicas %d exceeds experts per EP rank (%d/%d = "
                            "%d)",
                            reps, cfg->num_experts, lay->ep, cfg->num_experts / lay->ep);
    }
    return check_ep_overlap(cfg, lay, opt, diag);
}

/* [T] recompute_granularity / method / num_layers / modules. */
static enum moe_status check_selective(const struct moe_model_cfg *cfg,
                                       const struct moe_options *opt,
                                       struct moe_diag *diag)
{
    unsigned mods = opt->recompute_modules;
    moe_diag_source(diag, "--recompute-modules");
    if (mods == 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "selective recompute needs --recompute-modules (Megatron's default "
                            "is core_attn)");
    }
    if (mods & ~(unsigned)MOE_RC_ALL) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "unknown recompute module bits 0x%x",
                            mods & ~(unsigned)MOE_RC_ALL);
    }
    if (opt->recompute_num_layers != 0) {
        moe_diag_source(diag, "--recompute-num-layers");
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--recompute-num-layers applies only to full recompute; drop it for "
                            "selective");
    }
    if ((mods & MOE_RC_MLA_UP_PROJ) && !cfg->is_mla) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "recompute module mla_up_proj needs multi-latent attention");
    }
    if ((mods & (MOE_RC_MOE_ACT | MOE_RC_MOE | MOE_RC_SHARED_EXPERTS)) && !cfg_has_moe(cfg)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "recompute modules moe_act, moe and shared_experts need a MoE model");
    }
    if ((mods & MOE_RC_SHARED_EXPERTS) && cfg->moe_shared_expert_intermediate_size <= 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "recompute module shared_experts needs shared experts "
                            "(moe_shared_expert_intermediate_size > 0)");
    }
    if ((mods & MOE_RC_MOE_ACT) && !opt->moe_grouped_gemm) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "recompute module moe_act needs --moe-grouped-gemm");
    }
    if ((mods & (MOE_RC_MOE_ACT | MOE_RC_LAYERNORM)) && opt->recipe == MOE_RECIPE_FP8_DELAYED) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "FP8 delayed scaling cannot recompute moe_act or layernorm; use "
                            "another --fp8-recipe or drop those modules");
    }
    return MOE_OK;
}

static enum moe_status check_recompute(const struct moe_model_cfg *cfg,
                                       const struct moe_layout *lay,
                                       const struct moe_options *opt,
                                       struct moe_diag *diag)
{
    moe_diag_source(diag, "--recompute-granularity");
    if ((int)opt->recompute < 0 || opt->recompute > MOE_RECOMPUTE_FULL ||
        (int)opt->recompute_method < 0 || opt->recompute_method > MOE_RECOMPUTE_BLOCK) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "unknown recompute granularity or method");
    }
    switch (opt->recompute) {
    case MOE_RECOMPUTE_NONE:
        if (opt->recompute_num_layers != 0 || opt->recompute_modules != 0) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "recompute layers/modules are set but recompute is off; give "
                                "--recompute-granularity or drop them");
        }
        return MOE_OK;
    case MOE_RECOMPUTE_SELECTIVE:
        return check_selective(cfg, opt, diag);
    case MOE_RECOMPUTE_FULL:
        break;
    }
    int per_rank = cfg->num_layers / lay->pp;
    moe_diag_source(diag, "--recompute-num-layers");
    if (opt->recompute_num_layers < 1 || opt->recompute_num_layers > per_rank) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "full recompute needs --recompute-method and --recompute-num-layers "
                            "between 1 and num_layers/pp = %d (got %d)",
                            per_rank, opt->recompute_num_layers);
    }
    if (opt->recompute_modules != 0) {
        moe_diag_source(diag, "--recompute-modules");
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--recompute-modules applies to selective recompute only");
    }
    return MOE_OK;
}

/* [T] cpu_offloading and fine_grained_activation_offloading. */
static enum moe_status check_offload(const struct moe_model_cfg *cfg,
                                     const struct moe_layout *lay,
                                     const struct moe_options *opt,
                                     struct moe_diag *diag)
{
    int n = opt->cpu_offloading_num_layers;
    moe_diag_source(diag, "--cpu-offloading-num-layers");
    if (n < 0 || (n > 0 && n >= cfg->num_layers)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--cpu-offloading-num-layers %d must be below num_layers=%d", n,
                            cfg->num_layers);
    }
    if (n > 0 && lay->pp > 1) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "CPU offloading does not support pipeline parallelism (pp=%d)",
                            lay->pp);
    }
    if (n > 0 && opt->recompute != MOE_RECOMPUTE_NONE) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "CPU offloading does not work with activation recompute");
    }
    unsigned mods = opt->offload_modules;
    moe_diag_source(diag, "--offload-modules");
    if (!opt->fine_grained_offload) {
        if (mods != 0) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "--offload-modules needs --fine-grained-activation-offloading");
        }
        return MOE_OK;
    }
    if (n > 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--fine-grained-activation-offloading cannot be combined with "
                            "--cpu-offloading-num-layers");
    }
    if (mods == 0 || (mods & ~(unsigned)MOE_OFF_ALL)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--fine-grained-activation-offloading needs --offload-modules");
    }
    if ((mods & MOE_OFF_ATTN_PROJ) && !(mods & MOE_OFF_CORE_ATTN)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "offload module attn_proj needs core_attn too (its input is "
                            "core_attn's output)");
    }
    if (opt->recompute == MOE_RECOMPUTE_SELECTIVE && (opt->recompute_modules & MOE_RC_MOE) &&
        (mods & (MOE_OFF_MOE_ACT | MOE_OFF_EXPERT_FC1))) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "cannot offload moe_act/expert_fc1 while recomputing the whole MoE "
                            "layer; drop one");
    }
    return MOE_OK;
}

/* [T], [A] CUDA graphs. */
static enum moe_status check_cuda_graphs(const struct moe_model_cfg *cfg,
                                         const struct moe_options *opt,
                                         struct moe_diag *diag)
{
    unsigned m = opt->cuda_graph_modules;
    moe_diag_source(diag, "--cuda-graph-modules");
    if ((int)opt->cuda_graph_impl < 0 || opt->cuda_graph_impl > MOE_CG_TE) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "unknown CUDA graph implementation %d",
                            (int)opt->cuda_graph_impl);
    }
    if (opt->cuda_graph_impl == MOE_CG_NONE) {
        if (m != 0) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "--cuda-graph-modules needs --cuda-graph-impl local or "
                                "transformer_engine");
        }
        return MOE_OK;
    }
    bool full_iter = (m & MOE_CGM_FULL_ITERATION) != 0;
    if (full_iter && (opt->cuda_graph_impl != MOE_CG_LOCAL || m != MOE_CGM_FULL_ITERATION)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "full_iteration graphs are local graphs of the whole step; use "
                            "--cuda-graph-impl full_iteration with no other modules");
    }
    if (opt->recompute == MOE_RECOMPUTE_FULL && !full_iter) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "full recompute is not supported with per-layer CUDA graphs; use "
                            "selective recompute or full_iteration graphs");
    }
    if (opt->cpu_offloading_num_layers > 0 && !full_iter) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "CUDA graphs do not support CPU offloading");
    }
    if ((m & MOE_CGM_MOE) && (m & MOE_CGM_MOE_ROUTER)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "CUDA graph modules moe and moe_router are exclusive");
    }
    if ((m & MOE_CGM_MOE_PREPROCESS) && !(m & MOE_CGM_MOE_ROUTER)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "CUDA graph module moe_preprocess needs moe_router");
    }
    if ((m & (MOE_CGM_MOE | MOE_CGM_MOE_ROUTER)) && !cfg_has_moe(cfg)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "moe CUDA graphs need a MoE model");
    }
    if ((m & MOE_CGM_MLP) && !cfg_has_dense(cfg)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "the mlp CUDA graph needs dense layers; this model has none");
    }
    if ((m & MOE_CGM_MOE) && opt->capacity_factor <= 0.0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "the moe CUDA graph needs drop-and-pad routing "
                            "(--moe-expert-capacity-factor); dropless token counts vary");
    }
    if ((m & MOE_CGM_MOE_PREPROCESS) && opt->dispatcher == MOE_DISPATCH_ALLTOALL &&
        opt->capacity_factor > 0.0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "moe_preprocess graphs cannot capture the alltoall dispatcher's "
                            "host sync with a capacity factor");
    }
    if (opt->fine_grained_offload) {
        unsigned local_ok = MOE_OFF_EXPERT_FC1 | MOE_OFF_MOE_ACT;
        if (m & MOE_CGM_MOE) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "activation offloading does not support the moe CUDA graph");
        }
        if (opt->cuda_graph_impl == MOE_CG_LOCAL && !full_iter &&
            ((opt->offload_modules & ~local_ok) != 0 || m == 0)) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "local CUDA graphs support offloading only expert_fc1/moe_act "
                                "with per-module graphs; use --cuda-graph-impl "
                                "transformer_engine");
        }
    }
    if (opt->overlap_moe_ep_comm && opt->cuda_graph_impl == MOE_CG_TE &&
        (m & (MOE_CGM_MOE | MOE_CGM_MLP))) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "moe and mlp CUDA graphs are not supported with "
                            "--overlap-moe-expert-parallel-comm");
    }
    return MOE_OK;
}

static enum moe_status check_options(const struct moe_model_cfg *cfg,
                                     const struct moe_layout *lay,
                                     const struct moe_options *opt,
                                     struct moe_diag *diag)
{
    MOE_TRY(check_precision(opt, diag));
    MOE_TRY(check_optimizer(opt, diag));
    moe_diag_source(diag, "--tp-comm-overlap");
    /* [A] TP communication overlap needs sequence parallelism (off when tp == 1). */
    if (opt->tp_comm_overlap && !lay->sequence_parallel) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--tp-comm-overlap needs --sequence-parallel with tp > 1");
    }
    MOE_TRY(check_moe_options(cfg, lay, opt, diag));
    MOE_TRY(check_recompute(cfg, lay, opt, diag));
    MOE_TRY(check_offload(cfg, lay, opt, diag));
    return check_cuda_graphs(cfg, opt, diag);
}

static enum moe_status
check_hardware(const struct moe_cluster *cl, const struct moe_options *opt, struct moe_diag *diag)
{
    moe_diag_source(diag, "--fp8-recipe");
    if ((recipe_is_fp8(opt->recipe) || opt->recipe == MOE_RECIPE_MXFP8) && !cl->gpu.has_fp8) {
        return moe_diag_set(diag, MOE_ERR_UNSUPPORTED,
                            "recipe %s needs FP8 tensor cores, which %s (%s) does not have; use "
                            "bf16",
                            moe_recipe_name(opt->recipe), cl->name, cl->gpu.name);
    }
    if ((opt->recipe == MOE_RECIPE_MXFP8 || opt->recipe == MOE_RECIPE_NVFP4) && !cl->gpu.has_mx) {
        return moe_diag_set(diag, MOE_ERR_UNSUPPORTED,
                            "recipe %s needs block-scaled MX/NV formats (Blackwell); %s (%s) "
                            "lacks them, use --fp8-recipe blockwise or tensorwise",
                            moe_recipe_name(opt->recipe), cl->name, cl->gpu.name);
    }
    return MOE_OK;
}

/* ------------------------------------------------------------------------------------------ */

enum moe_status moe_layout_resolve(const struct moe_model_cfg *cfg,
                                   const struct moe_cluster *cl,
                                   const struct moe_options *opt,
                                   struct moe_layout *lay,
                                   struct moe_diag *diag)
{
    if (cfg->num_layers < 1 || cfg->num_layers > MOE_MAX_LAYERS || cfg->mtp_num_layers < 0 ||
        cfg->mtp_num_layers > MOE_MAX_MTP) {
        moe_diag_source(diag, "--num-layers");
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "model num_layers=%d / mtp_num_layers=%d out of range", cfg->num_layers,
                            cfg->mtp_num_layers);
    }
    MOE_TRY(check_degrees(lay, diag));
    MOE_TRY(derive_groups(lay, diag));
    MOE_TRY(check_model_split(cfg, lay, diag));
    MOE_TRY(check_sequence(cfg, lay, diag));
    MOE_TRY(derive_batch(lay, diag));
    MOE_TRY(check_pipeline(lay, diag));
    MOE_TRY(place_chunks(cfg, lay, diag));
    if (opt != NULL) {
        MOE_TRY(check_options(cfg, lay, opt, diag));
        if (cl != NULL) {
            MOE_TRY(check_hardware(cl, opt, diag));
        }
    }
    if (diag != NULL) {
        diag->source[0] = '\0';
        diag->column = 0;
    }
    return MOE_OK;
}

void moe_layout_rank_coords(const struct moe_layout *lay, int rank, struct moe_rank_coords *out)
{
    int s = lay->tp * lay->cp * lay->dp;
    int l = rank % s;
    out->stage = rank / s;
    out->tp = l % lay->tp;
    out->cp = (l / lay->tp) % lay->cp;
    out->dp = l / (lay->tp * lay->cp);
    out->etp = l % lay->etp;
    out->ep = (l / lay->etp) % lay->ep;
    out->edp = l / (lay->etp * lay->ep);
}
