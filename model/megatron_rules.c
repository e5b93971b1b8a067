/*
 * Megatron-LM's rules over its flags (model/megatron_internal.h), as megatron/training/arguments.py
 * applies them after parsing: values read by a handler (K_CALL rows: a flag that sets two fields,
 * a tuple, a double with its own range, a refused value), then, once all flags are read, the
 * cross-flag semantics (finalize): defaults that depend on other values (kv_channels =
 * hidden/heads, ffn = 4h or the SwiGLU rule, expert ffn = ffn, etp = tp when only tp is given, the
 * table's constant defaults), the layer patterns, the three ways to give VPP and the layout
 * string, the FP8/FP4 recipe (only with --fp8-format / --fp4-format), the dispatcher and its flex
 * backend, recompute granularity and modules, CUDA graphs, and the combinations Megatron refuses.
 * A flag whose meaning depends on others is kept in a slot by its row and read here: adding one is
 * a row plus, here, a rule.
 *
 * The combination's validity against a layout and cluster is moe_layout_resolve's job, not this
 * file's.
 */
#include "model/megatron_internal.h"

#include <stdio.h>
#include <string.h>

/* ---- Handlers of K_CALL rows ----------------------------------------------------------------- */

/* --seq-length sets the model's and the layout's sequence length. */
enum moe_status moe_mf_read_seq_length(struct moe_mf_parse *x,
                                       const struct moe_mf_flag *f,
                                       const char *val,
                                       const struct moe_mf_values *v)
{
    (void)f;
    (void)v;
    int n = 0;
    MOE_TRY(moe_mf_parse_int(x, val, 1, 1 << 24, &n));
    x->cfg->seq_length = n;
    x->lay->seq_length = n;
    moe_mf_mark(x, MOE_MF_SEQ_LENGTH);
    return MOE_OK;
}

/* Megatron's tuple_type: "(left,right)" or "left,right"; -1 means unlimited. */
enum moe_status moe_mf_read_window_size(struct moe_mf_parse *x,
                                        const struct moe_mf_flag *f,
                                        const char *val,
                                        const struct moe_mf_values *v)
{
    (void)f;
    (void)v;
    char buf[64];
    (void)snprintf(buf, sizeof(buf), "%s", val);
    char *p = buf + strspn(buf, "( ");
    p[strcspn(p, ",)")] = '\0';
    int n = 0;
    MOE_TRY(moe_mf_parse_int(x, p, -1, 1 << 24, &n));
    x->cfg->window_size = n < 0 ? 0 : n;
    moe_mf_slot_set(x, S_WINDOW_SIZE, val, n, 0u);
    moe_mf_mark(x, MOE_MF_WINDOW);
    return MOE_OK;
}

/* --fp8-recipe / --fp4-recipe: a named recipe, kept for finalize_recipe; 'custom' is refused. */
enum moe_status moe_mf_read_quant_recipe(struct moe_mf_parse *x,
                                         const struct moe_mf_flag *f,
                                         const char *val,
                                         const struct moe_mf_values *v)
{
    (void)v;
    if (strcmp(val, "custom") == 0) {
        return moe_mf_error(x, x->flag, x->at, MOE_ERR_UNSUPPORTED,
                            "%s custom: a custom quantizer cannot be priced; use a named recipe",
                            x->flag);
    }
    int i = 0;
    MOE_TRY(moe_mf_parse_choice(x, val, f->choices, (size_t)f->num_choices, &i));
    moe_mf_slot_set(x, (enum moe_mf_slot)f->slot, val, i, 0u);
    return MOE_OK;
}

/* Megatron: a negative capacity factor is None, dropless. */
enum moe_status moe_mf_read_capacity(struct moe_mf_parse *x,
                                     const struct moe_mf_flag *f,
                                     const char *val,
                                     const struct moe_mf_values *v)
{
    (void)f;
    (void)v;
    double d = 0.0;
    MOE_TRY(moe_mf_parse_double(x, val, &d));
    x->opt->capacity_factor = d < 0.0 ? 0.0 : d;
    moe_mf_mark(x, MOE_MF_CAPACITY_FACTOR);
    return MOE_OK;
}

/* Megatron's --moe-router-load-balancing-type choices, its default first; the first three are the
 * losses of struct moe_options, in its order. */
enum { LB_AUX, LB_SEQ_AUX, LB_GLOBAL_AUX, LB_SINKHORN, LB_QUANTILE, LB_NONE };
const char *const moe_mf_balance_types[] = {"aux_loss", "seq_aux_loss",       "global_aux_loss",
                                            "sinkhorn", "quantile_balancing", "none"};
const int moe_mf_num_balance_types = (int)MOE_ARRAY_LEN(moe_mf_balance_types);

/*
 * The values of --moe-router-load-balancing-type (types: each a choice, none twice) or
 * --moe-aux-loss-coeff (coefficients in [0, 1000]), a list (nargs='+'; "--flag=value" is one
 * value), kept for the pairing after the last flag: the last occurrence of each flag wins.
 */
static enum moe_status
read_balance_list(struct moe_mf_parse *x, const struct moe_mf_values *v, bool is_types)
{
    struct moe_mf_balance *b = &x->balance;
    int n = v->eq != NULL ? 1 : v->count;
    if (n == 0) {
        return moe_mf_error(x, x->flag, x->at, MOE_ERR_INVALID, "%s needs a value", x->flag);
    }
    if (n > MOE_MF_MAX_BALANCE) {
        return moe_mf_error(x, x->flag, x->at, MOE_ERR_INVALID, "%s: %d values (at most %d)",
                            x->flag, n, MOE_MF_MAX_BALANCE);
    }
    for (int i = 0; i < n; i++) {
        const char *word = v->eq != NULL ? v->eq : v->argv[i];
        if (!is_types) {
            MOE_TRY(moe_mf_parse_double(x, word, &b->coeffs[i]));
            if (!(b->coeffs[i] >= 0.0 && b->coeffs[i] <= 1e3)) {
                return moe_mf_error(x, x->flag, x->at, MOE_ERR_INVALID,
                                    "%s: %s is not a loss coefficient in [0, 1000]", x->flag, word);
            }
            continue;
        }
        MOE_TRY(moe_mf_parse_choice(x, word, moe_mf_balance_types, (size_t)moe_mf_num_balance_types,
                                    &b->types[i]));
        for (int j = 0; j < i; j++) {
            if (b->types[j] == b->types[i]) {
                return moe_mf_error(x, x->flag, x->at, MOE_ERR_INVALID, "%s: %s is listed twice",
                                    x->flag, word);
            }
        }
    }
    *(is_types ? &b->has_types : &b->has_coeffs) = true;
    *(is_types ? &b->at_types : &b->at_coeffs) = x->at;
    *(is_types ? &b->num_types : &b->num_coeffs) = n;
    return MOE_OK;
}

enum moe_status moe_mf_read_balance_types(struct moe_mf_parse *x,
                                          const struct moe_mf_flag *f,
                                          const char *val,
                                          const struct moe_mf_values *v)
{
    (void)f;
    (void)val;
    return read_balance_list(x, v, true);
}

enum moe_status moe_mf_read_aux_coeffs(struct moe_mf_parse *x,
                                       const struct moe_mf_flag *f,
                                       const char *val,
                                       const struct moe_mf_values *v)
{
    (void)f;
    (void)val;
    return read_balance_list(x, v, false);
}

/* moefold's --moe-imbalance: auto (0) or a max/mean load factor in [1, 1000]. */
enum moe_status moe_mf_read_imbalance(struct moe_mf_parse *x,
                                      const struct moe_mf_flag *f,
                                      const char *val,
                                      const struct moe_mf_values *v)
{
    (void)f;
    (void)v;
    if (strcmp(val, "auto") == 0) {
        x->opt->moe_imbalance = 0.0;
    } else {
        double d = 0.0;
        MOE_TRY(moe_mf_parse_double(x, val, &d));
        if (d < 1.0 || d > 1000.0) {
            return moe_mf_error(x, x->flag, x->at, MOE_ERR_INVALID,
                                "%s: %g is not a max/mean load factor in [1, 1000] (or auto)",
                                x->flag, d);
        }
        x->opt->moe_imbalance = d;
    }
    moe_mf_mark(x, MOE_MF_MOE_IMBALANCE);
    return MOE_OK;
}

enum moe_status moe_mf_read_offload_fraction(struct moe_mf_parse *x,
                                             const struct moe_mf_flag *f,
                                             const char *val,
                                             const struct moe_mf_values *v)
{
    (void)f;
    (void)v;
    double d = 0.0;
    MOE_TRY(moe_mf_parse_double(x, val, &d));
    if (d < 0.0 || d > 1.0) {
        return moe_mf_error(x, x->flag, x->at, MOE_ERR_INVALID, "%s: %g is not in [0, 1]", x->flag,
                            d);
    }
    x->opt->optimizer_offload_fraction = d;
    moe_mf_mark(x, MOE_MF_OPTIMIZER_OFFLOAD_FRACTION);
    return MOE_OK;
}

/* ---- After all flags: Megatron's cross-flag rules and defaults ------------------------------- */

static const struct moe_mf_slot_val *slot(const struct moe_mf_parse *x, enum moe_mf_slot s)
{
    return &x->slot[s];
}

static void set_layer_bits(struct moe_model_cfg *cfg, const uint8_t *on, unsigned bit)
{
    for (int i = 0; i < MOE_MAX_LAYERS; i++) {
        bool v = i < cfg->num_layers && on[i];
        cfg->layer_flags[i] =
            (uint8_t)(v ? (cfg->layer_flags[i] | bit) : (cfg->layer_flags[i] & ~bit));
    }
}

static enum moe_status finalize_layers(struct moe_mf_parse *x)
{
    struct moe_model_cfg *cfg = x->cfg;
    int n = cfg->num_layers;
    uint8_t on[MOE_MAX_LAYERS];
    if (slot(x, S_MOE_LAYER_FREQ)->text != NULL) {
        x->flag = "--moe-layer-freq";
        x->at = slot(x, S_MOE_LAYER_FREQ)->at;
        MOE_TRY(moe_mf_eval_pattern(x, slot(x, S_MOE_LAYER_FREQ)->text, false, n, on));
        set_layer_bits(cfg, on, MOE_LAYER_MOE);
    } else if (n != x->old_layers) {
        /* New layers continue the last layer's kind (a "first k dense" pattern stays so). */
        for (int i = x->old_layers; i < n; i++) {
            cfg->layer_flags[i] =
                (x->old_layers > 0) ? cfg->layer_flags[x->old_layers - 1] : (uint8_t)MOE_LAYER_MOE;
        }
        for (int i = n; i < MOE_MAX_LAYERS; i++) {
            cfg->layer_flags[i] = 0;
        }
    }
    bool any_moe = false;
    for (int i = 0; i < n; i++) {
        any_moe = any_moe || (cfg->layer_flags[i] & MOE_LAYER_MOE);
    }
    if (cfg->num_experts == 0) {
        memset(on, 0, sizeof(on));
        set_layer_bits(cfg, on, MOE_LAYER_MOE);
    } else if (!any_moe && slot(x, S_MOE_LAYER_FREQ)->text == NULL) {
        memset(on, 1, sizeof(on)); /* Megatron's default --moe-layer-freq 1 */
        set_layer_bits(cfg, on, MOE_LAYER_MOE);
    }
    if (slot(x, S_WINDOW_SKIP)->text != NULL) {
        x->flag = "--window-attn-skip-freq";
        x->at = slot(x, S_WINDOW_SKIP)->at;
        if (cfg->window_size <= 0) {
            return moe_mf_error(x, x->flag, x->at, MOE_ERR_INVALID,
                                "--window-attn-skip-freq needs --window-size");
        }
        MOE_TRY(moe_mf_eval_pattern(x, slot(x, S_WINDOW_SKIP)->text, true, n, on));
        set_layer_bits(cfg, on, MOE_LAYER_WINDOWED);
    } else if (slot(x, S_WINDOW_SIZE)->given) {
        memset(on, cfg->window_size > 0 ? 1 : 0, sizeof(on)); /* no skip: every layer windowed */
        set_layer_bits(cfg, on, MOE_LAYER_WINDOWED);
    }
    return MOE_OK;
}

/* The table's constant defaults (a row's `def`): set when the member is still 0 and the row's
 * condition holds. */
static void apply_defaults(struct moe_mf_parse *x)
{
    for (size_t i = 0; i < moe_mf_num_flags; i++) {
        const struct moe_mf_flag *f = &moe_mf_flags[i];
        if (f->def == 0 || f->kind != K_INT || f->target != T_CFG ||
            !moe_mf_holds((enum moe_mf_when)f->when, x->cfg, x->lay, x->opt, 0u)) {
            continue;
        }
        int v = 0;
        memcpy(&v, (char *)x->cfg + f->off, sizeof(v));
        if (v == 0) {
            memcpy((char *)x->cfg + f->off, &f->def, sizeof(f->def));
        }
    }
}

static enum moe_status finalize_model(struct moe_mf_parse *x)
{
    struct moe_model_cfg *cfg = x->cfg;
    int h = cfg->hidden_size, a = cfg->num_attention_heads;
    /* kv_channels defaults to hidden/heads [arguments.py]; keep a value that was not derived. */
    bool kv_derived =
        x->old_kv == 0 || (x->old_heads > 0 && x->old_kv * x->old_heads == x->old_hidden);
    if (!moe_mf_was_set(x, MOE_MF_KV_CHANNELS) && kv_derived && h > 0 && a > 0 &&
        (cfg->kv_channels == 0 || moe_mf_was_set(x, MOE_MF_HIDDEN_SIZE) ||
         moe_mf_was_set(x, MOE_MF_NUM_ATTENTION_HEADS))) {
        if (h % a != 0) {
            return moe_mf_error(x, "--kv-channels", 0, MOE_ERR_INVALID,
                                "hidden size %d is not divisible by %d heads; give --kv-channels",
                                h, a);
        }
        cfg->kv_channels = h / a;
    }
    /* Query groups: --num-query-groups, else Megatron's default 1 under --group-query-attention,
     * else one group per head. */
    if (slot(x, S_QUERY_GROUPS)->num > 0) {
        cfg->num_query_groups = slot(x, S_QUERY_GROUPS)->num;
    } else if (slot(x, S_GQA)->given && (x->old_groups == 0 || x->old_groups == x->old_heads)) {
        cfg->num_query_groups = 1;
    } else if (!slot(x, S_GQA)->given && x->old_groups == x->old_heads) {
        cfg->num_query_groups = a;
    }
    if (cfg->num_query_groups == 0) {
        cfg->num_query_groups = a;
    }
    if (slot(x, S_QUERY_GROUPS)->num > 0 || slot(x, S_GQA)->given) {
        moe_mf_mark(x, MOE_MF_NUM_QUERY_GROUPS);
    }
    /* ffn default: 4h, or int(4h*2/3/64)*64 with SwiGLU [arguments.py]. */
    if (cfg->ffn_hidden_size == 0 && h > 0) {
        cfg->ffn_hidden_size = cfg->is_swiglu ? (int)((8L * h / 3) / 64 * 64) : 4 * h;
    }
    /* --quick-geglu makes the MLP gated (arguments.py: gated_linear_unit), after the ffn default,
     * which follows --swiglu alone. */
    if (cfg->is_quick_geglu) {
        cfg->is_swiglu = true;
    }
    if (cfg->num_experts > 0) {
        if (cfg->moe_ffn_hidden_size == 0) {
            cfg->moe_ffn_hidden_size = cfg->ffn_hidden_size;
        }
    }
    apply_defaults(x); /* the table's: --moe-router-topk, the MLA dims */
    return finalize_layers(x);
}

static enum moe_status finalize_vpp(struct moe_mf_parse *x)
{
    struct moe_layout *lay = x->lay;
    int given = (slot(x, S_VPP_LAYERS)->num > 0) + (slot(x, S_VPP_STAGES)->num > 0) +
                (slot(x, S_PP_LAYOUT)->text != NULL);
    if (given > 1) {
        int at = slot(x, S_PP_LAYOUT)->text ? slot(x, S_PP_LAYOUT)->at : slot(x, S_VPP_STAGES)->at;
        return moe_mf_error(x, "--num-virtual-stages-per-pipeline-rank", at, MOE_ERR_INVALID,
                            "give only one of --num-layers-per-virtual-pipeline-stage, "
                            "--num-virtual-stages-per-pipeline-rank and "
                            "--pipeline-model-parallel-layout");
    }
    if (slot(x, S_VPP_STAGES)->num > 0) {
        lay->vpp = slot(x, S_VPP_STAGES)->num;
        moe_mf_mark(x, MOE_MF_VPP);
    }
    if (slot(x, S_VPP_LAYERS)->num > 0) {
        const char *f = "--num-layers-per-virtual-pipeline-stage";
        int l = x->cfg->num_layers;
        if (lay->first_stage_layers > 0 || lay->last_stage_layers > 0) {
            return moe_mf_error(x, f, slot(x, S_VPP_LAYERS)->at, MOE_ERR_INVALID,
                                "with uneven first/last stages give the virtual stages with "
                                "--num-virtual-stages-per-pipeline-rank (Megatron's rule)");
        }
        if (l % lay->pp != 0 || (l / lay->pp) % slot(x, S_VPP_LAYERS)->num != 0) {
            return moe_mf_error(
                x, f, slot(x, S_VPP_LAYERS)->at, MOE_ERR_INVALID,
                "%d layers over pp=%d do not split into virtual stages of %d layers", l, lay->pp,
                slot(x, S_VPP_LAYERS)->num);
        }
        lay->vpp = l / lay->pp / slot(x, S_VPP_LAYERS)->num;
        moe_mf_mark(x, MOE_MF_VPP);
    }
    return MOE_OK;
}

static enum moe_status finalize_layout(struct moe_mf_parse *x)
{
    struct moe_layout *lay = x->lay;
    /* --expert-tensor-parallel-size defaults to --tensor-model-parallel-size [arguments.py]. */
    if (moe_mf_was_set(x, MOE_MF_TP) && !moe_mf_was_set(x, MOE_MF_ETP)) {
        lay->etp = lay->tp;
    }
    MOE_TRY(finalize_vpp(x));
    if (slot(x, S_PP_LAYOUT)->text == NULL) {
        if (moe_mf_was_set(x, MOE_MF_PP) || moe_mf_was_set(x, MOE_MF_VPP) ||
            moe_mf_was_set(x, MOE_MF_NUM_LAYERS) || moe_mf_was_set(x, MOE_MF_FIRST_STAGE_LAYERS) ||
            moe_mf_was_set(x, MOE_MF_LAST_STAGE_LAYERS)) {
            lay->has_custom_pp_layout = false; /* a previous custom layout no longer applies */
            lay->num_chunks = 0;
        }
        return MOE_OK;
    }
    const char *f = "--pipeline-model-parallel-layout";
    if (lay->first_stage_layers > 0 || lay->last_stage_layers > 0) {
        return moe_mf_error(x, f, slot(x, S_PP_LAYOUT)->at, MOE_ERR_INVALID,
                            "a layout string cannot be combined with "
                            "--decoder-first/last-pipeline-num-layers (Megatron refuses both)");
    }
    int chunks = 0;
    struct moe_diag sub;
    memset(&sub, 0, sizeof(sub));
    enum moe_status st = moe_layout_count_pp_chunks(slot(x, S_PP_LAYOUT)->text, &chunks, &sub);
    if (st == MOE_OK && chunks % lay->pp != 0) {
        return moe_mf_error(x, f, slot(x, S_PP_LAYOUT)->at, MOE_ERR_INVALID,
                            "%s: the layout has %d chunks, not a multiple of pp=%d", f, chunks,
                            lay->pp);
    }
    if (st == MOE_OK) {
        lay->vpp = chunks / lay->pp; /* Megatron derives vpp from the layout */
        st = moe_layout_parse_pp_string(slot(x, S_PP_LAYOUT)->text, x->cfg, lay, &sub);
    }
    if (st != MOE_OK) {
        return moe_mf_error(x, f, slot(x, S_PP_LAYOUT)->at, st, "%s '%s': %s", f,
                            slot(x, S_PP_LAYOUT)->text, sub.message);
    }
    moe_mf_mark(x, MOE_MF_PP_LAYOUT);
    moe_mf_mark(x, MOE_MF_VPP);
    return MOE_OK;
}

static bool recipe_is_fp8_family(enum moe_recipe r)
{
    return r != MOE_RECIPE_BF16 && r != MOE_RECIPE_NVFP4;
}

static enum moe_status finalize_recipe(struct moe_mf_parse *x)
{
    struct moe_options *opt = x->opt;
    if (slot(x, S_FP8_FORMAT)->text != NULL && slot(x, S_FP4_FORMAT)->text != NULL) {
        return moe_mf_error(x, "--fp4-format", slot(x, S_FP4_FORMAT)->at, MOE_ERR_INVALID,
                            "--fp4-format and --fp8-format cannot be used together; choose one");
    }
    if (slot(x, S_FP8_RECIPE)->text != NULL && slot(x, S_FP8_FORMAT)->text == NULL &&
        !recipe_is_fp8_family(opt->recipe)) {
        moe_mf_add_ignored(x, x->argv[slot(x, S_FP8_RECIPE)->at], -1, slot(x, S_FP8_RECIPE)->at,
                           WHY_NO_FP8_FORMAT);
    } else if (slot(x, S_FP8_FORMAT)->text != NULL || slot(x, S_FP8_RECIPE)->text != NULL) {
        enum moe_recipe r =
            recipe_is_fp8_family(opt->recipe) ? opt->recipe : MOE_RECIPE_FP8_DELAYED;
        if (slot(x, S_FP8_RECIPE)->text != NULL) {
            MOE_ASSERT(moe_recipe_parse(slot(x, S_FP8_RECIPE)->text, &r, NULL) == MOE_OK);
        }
        opt->recipe = r;
        moe_mf_mark(x, MOE_MF_RECIPE);
    }
    if (slot(x, S_FP4_RECIPE)->text != NULL && slot(x, S_FP4_FORMAT)->text == NULL &&
        opt->recipe != MOE_RECIPE_NVFP4) {
        moe_mf_add_ignored(x, x->argv[slot(x, S_FP4_RECIPE)->at], -1, slot(x, S_FP4_RECIPE)->at,
                           WHY_NO_FP4_FORMAT);
    } else if (slot(x, S_FP4_FORMAT)->text != NULL) {
        opt->recipe = MOE_RECIPE_NVFP4;
        moe_mf_mark(x, MOE_MF_RECIPE);
    }
    if (slot(x, S_FP8_PG)->given && opt->recipe == MOE_RECIPE_NVFP4) {
        return moe_mf_error(x, "--fp8-param-gather", slot(x, S_FP8_PG)->at, MOE_ERR_INVALID,
                            "with --fp4-format use --fp4-param-gather");
    }
    if (slot(x, S_FP4_PG)->given && opt->recipe != MOE_RECIPE_NVFP4) {
        return moe_mf_error(x, "--fp4-param-gather", slot(x, S_FP4_PG)->at, MOE_ERR_INVALID,
                            "--fp4-param-gather must be used together with --fp4-format");
    }
    if (slot(x, S_FP8_PG)->given || slot(x, S_FP4_PG)->given) {
        opt->fp8_param_gather = true;
        moe_mf_mark(x, MOE_MF_FP8_PARAM_GATHER);
    }
    return MOE_OK;
}

static enum moe_status finalize_dispatcher(struct moe_mf_parse *x)
{
    struct moe_options *opt = x->opt;
    bool was_flex =
        opt->dispatcher == MOE_DISPATCH_DEEPEP || opt->dispatcher == MOE_DISPATCH_HYBRIDEP;
    if (slot(x, S_ENABLE_DEEPEP)->given && slot(x, S_DISPATCHER)->text != NULL &&
        strcmp(slot(x, S_DISPATCHER)->text, "flex") != 0) {
        return moe_mf_error(x, "--moe-enable-deepep", slot(x, S_ENABLE_DEEPEP)->at, MOE_ERR_INVALID,
                            "DeepEP needs --moe-token-dispatcher-type flex");
    }
    if (slot(x, S_DISPATCHER)->text == NULL) {
        if (slot(x, S_ENABLE_DEEPEP)->given) {
            opt->dispatcher = MOE_DISPATCH_DEEPEP;
            moe_mf_mark(x, MOE_MF_DISPATCHER);
        } else if (slot(x, S_FLEX_BACKEND)->text != NULL && was_flex) {
            opt->dispatcher = strcmp(slot(x, S_FLEX_BACKEND)->text, "hybridep") == 0
                                  ? MOE_DISPATCH_HYBRIDEP
                                  : MOE_DISPATCH_DEEPEP;
            moe_mf_mark(x, MOE_MF_DISPATCHER);
        } else if (slot(x, S_FLEX_BACKEND)->text != NULL) {
            moe_mf_add_ignored(x, x->argv[slot(x, S_FLEX_BACKEND)->at], -1,
                               slot(x, S_FLEX_BACKEND)->at, WHY_NO_FLEX);
        }
        return MOE_OK;
    }
    moe_mf_mark(x, MOE_MF_DISPATCHER);
    if (strcmp(slot(x, S_DISPATCHER)->text, "alltoall") == 0) {
        opt->dispatcher = MOE_DISPATCH_ALLTOALL;
    } else if (strcmp(slot(x, S_DISPATCHER)->text, "allgather") == 0) {
        opt->dispatcher = MOE_DISPATCH_ALLGATHER;
    } else if (slot(x, S_FLEX_BACKEND)->text != NULL) {
        opt->dispatcher = strcmp(slot(x, S_FLEX_BACKEND)->text, "hybridep") == 0
                              ? MOE_DISPATCH_HYBRIDEP
                              : MOE_DISPATCH_DEEPEP;
    } else if (!was_flex) {
        opt->dispatcher = MOE_DISPATCH_DEEPEP; /* --moe-flex-dispatcher-backend default */
    }
    if (slot(x, S_FLEX_BACKEND)->text != NULL && strcmp(slot(x, S_DISPATCHER)->text, "flex") != 0) {
        moe_mf_add_ignored(x, x->argv[slot(x, S_FLEX_BACKEND)->at], -1, slot(x, S_FLEX_BACKEND)->at,
                           WHY_NO_FLEX);
    }
    return MOE_OK;
}

/*
 * The load-balancing losses: Megatron pairs the two lists by position (a list of types needs as
 * many coefficients; one type, one coefficient; the type defaults to aux_loss, the coefficient to
 * 0). Given either flag, the three coefficients are set from the pair and nothing else. Sinkhorn
 * and quantile balancing take no coefficient (Megatron asserts it is 0) and their own routing
 * cost is not modelled.
 */
static enum moe_status finalize_balance(struct moe_mf_parse *x)
{
    const struct moe_mf_balance *b = &x->balance;
    if (!b->has_types && !b->has_coeffs) {
        return MOE_OK;
    }
    int types[MOE_MF_MAX_BALANCE] = {LB_AUX};
    double coeffs[MOE_MF_MAX_BALANCE] = {0.0};
    int n = b->has_types ? b->num_types : 1;
    int nc = b->has_coeffs ? b->num_coeffs : 1;
    if (b->has_types) {
        memcpy(types, b->types, sizeof(types));
    }
    if (b->has_coeffs) {
        memcpy(coeffs, b->coeffs, sizeof(coeffs));
    }
    int at = b->has_coeffs ? b->at_coeffs : b->at_types;
    if (nc != n && (n > 1 || b->has_coeffs)) {
        return moe_mf_error(x, "--moe-aux-loss-coeff", at, MOE_ERR_INVALID,
                            "--moe-aux-loss-coeff has %d value(s) but "
                            "--moe-router-load-balancing-type %d: Megatron pairs them by position",
                            nc, n);
    }
    struct moe_options *opt = x->opt;
    opt->aux_loss_coeff = 0.0;
    opt->seq_aux_loss_coeff = 0.0;
    opt->global_aux_loss_coeff = 0.0;
    double *to[3] = {&opt->aux_loss_coeff, &opt->seq_aux_loss_coeff, &opt->global_aux_loss_coeff};
    bool unpriced = false;
    for (int i = 0; i < n; i++) {
        if (types[i] <= LB_GLOBAL_AUX) {
            *to[types[i]] = coeffs[i];
        } else if (types[i] == LB_NONE) {
            continue; /* priced: nothing runs */
        } else if (coeffs[i] > 0.0) {
            return moe_mf_error(x, "--moe-aux-loss-coeff", at, MOE_ERR_INVALID,
                                "%s takes no loss coefficient (Megatron asserts it is 0; got %g)",
                                moe_mf_balance_types[types[i]], coeffs[i]);
        } else {
            unpriced = true; /* sinkhorn, quantile balancing: their routing cost */
        }
    }
    if (unpriced) {
        moe_mf_add_ignored(x, x->argv[b->at_types], -1, b->at_types, WHY_NOT_MODELLED);
    }
    moe_mf_mark(x, MOE_MF_LOAD_BALANCING);
    return MOE_OK;
}

static enum moe_status finalize_recompute(struct moe_mf_parse *x)
{
    struct moe_options *opt = x->opt;
    if (slot(x, S_RC_GRAN)->text != NULL) {
        opt->recompute = strcmp(slot(x, S_RC_GRAN)->text, "full") == 0 ? MOE_RECOMPUTE_FULL
                                                                       : MOE_RECOMPUTE_SELECTIVE;
    } else if (slot(x, S_RC_ACTIVATIONS)->given || slot(x, S_MOE_LAYER_RC)->given) {
        opt->recompute = MOE_RECOMPUTE_SELECTIVE; /* [arguments.py] --recompute-activations */
    }
    if (slot(x, S_MOE_LAYER_RC)->given && opt->recompute == MOE_RECOMPUTE_FULL) {
        return moe_mf_error(x, "--moe-layer-recompute", slot(x, S_MOE_LAYER_RC)->at,
                            MOE_ERR_INVALID,
                            "--moe-layer-recompute cannot be combined with full recompute");
    }
    bool gran_given = slot(x, S_RC_GRAN)->text != NULL || slot(x, S_RC_ACTIVATIONS)->given ||
                      slot(x, S_MOE_LAYER_RC)->given;
    if (gran_given) {
        moe_mf_mark(x, MOE_MF_RECOMPUTE);
    }
    if (opt->recompute == MOE_RECOMPUTE_SELECTIVE) {
        if (slot(x, S_RC_MODULES)->given) {
            opt->recompute_modules = slot(x, S_RC_MODULES)->bits;
        } else if (opt->recompute_modules == 0) {
            opt->recompute_modules = MOE_RC_CORE_ATTN; /* Megatron's default module list */
        }
        if (slot(x, S_MOE_LAYER_RC)->given) {
            opt->recompute_modules |= MOE_RC_MOE;
        }
        if (gran_given && !moe_mf_was_set(x, MOE_MF_RECOMPUTE_NUM_LAYERS)) {
            opt->recompute_num_layers = 0; /* a full-recompute count no longer applies */
        }
    } else {
        if (slot(x, S_RC_MODULES)->given) {
            moe_mf_add_ignored(x, x->argv[slot(x, S_RC_MODULES)->at], -1, slot(x, S_RC_MODULES)->at,
                               WHY_NO_SELECTIVE);
        }
        if (gran_given) {
            opt->recompute_modules = 0; /* full recompute takes no module list */
        }
    }
    if (slot(x, S_RC_MODULES)->given || slot(x, S_MOE_LAYER_RC)->given) {
        moe_mf_mark(x, MOE_MF_RECOMPUTE_MODULES);
    }
    return MOE_OK;
}

/* The argv index of the last of --enable-cuda-graph / --external-cuda-graph. */
static int cg_legacy_at(const struct moe_mf_parse *x)
{
    int a = slot(x, S_ENABLE_CG)->given ? slot(x, S_ENABLE_CG)->at : 0;
    int b = slot(x, S_EXTERNAL_CG)->given ? slot(x, S_EXTERNAL_CG)->at : 0;
    return a > b ? a : b;
}

static enum moe_status finalize_cuda_graphs(struct moe_mf_parse *x)
{
    struct moe_options *opt = x->opt;
    if ((slot(x, S_ENABLE_CG)->given || slot(x, S_EXTERNAL_CG)->given) &&
        slot(x, S_CG_IMPL)->text != NULL) {
        return moe_mf_error(x, "--cuda-graph-impl", slot(x, S_CG_IMPL)->at, MOE_ERR_INVALID,
                            "do not combine --enable-cuda-graph / --external-cuda-graph with "
                            "--cuda-graph-impl (Megatron refuses it)");
    }
    if (slot(x, S_ENABLE_CG)->given && slot(x, S_EXTERNAL_CG)->given) {
        return moe_mf_error(x, "--external-cuda-graph", cg_legacy_at(x), MOE_ERR_INVALID,
                            "--enable-cuda-graph and --external-cuda-graph are exclusive");
    }
    bool full_iter = false;
    if (slot(x, S_CG_IMPL)->text != NULL) {
        full_iter = strcmp(slot(x, S_CG_IMPL)->text, "full_iteration") == 0;
        if (full_iter || strcmp(slot(x, S_CG_IMPL)->text, "local") == 0) {
            opt->cuda_graph_impl = MOE_CG_LOCAL;
        } else if (strcmp(slot(x, S_CG_IMPL)->text, "transformer_engine") == 0) {
            opt->cuda_graph_impl = MOE_CG_TE;
        } else {
            opt->cuda_graph_impl = MOE_CG_NONE;
            opt->cuda_graph_modules = 0;
        }
    } else if (slot(x, S_ENABLE_CG)->given || slot(x, S_EXTERNAL_CG)->given) {
        opt->cuda_graph_impl = slot(x, S_ENABLE_CG)->given ? MOE_CG_LOCAL : MOE_CG_TE;
    }
    if (slot(x, S_CG_IMPL)->text != NULL || slot(x, S_ENABLE_CG)->given ||
        slot(x, S_EXTERNAL_CG)->given) {
        moe_mf_mark(x, MOE_MF_CUDA_GRAPH_IMPL);
    }
    if (slot(x, S_CG_MODULES)->given) {
        opt->cuda_graph_modules = slot(x, S_CG_MODULES)->bits;
        moe_mf_mark(x, MOE_MF_CUDA_GRAPH_MODULES);
    } else if (slot(x, S_CG_IMPL)->text != NULL) {
        opt->cuda_graph_modules &= ~(unsigned)MOE_CGM_FULL_ITERATION;
    }
    if (full_iter) {
        opt->cuda_graph_modules |= MOE_CGM_FULL_ITERATION;
    }
    return MOE_OK;
}

enum moe_status moe_mf_finalize(struct moe_mf_parse *x)
{
    MOE_TRY(finalize_model(x));
    MOE_TRY(finalize_layout(x));
    MOE_TRY(finalize_recipe(x));
    MOE_TRY(finalize_dispatcher(x));
    MOE_TRY(finalize_balance(x));
    MOE_TRY(finalize_recompute(x));
    return finalize_cuda_graphs(x);
}
