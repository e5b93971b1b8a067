/*
 * moefold structs -> a Megatron-LM command line (moe_megatron_format_args), driven by the flag
 * table (megatron_flags.c): the rows are written in table order, each by its write rule (its
 * member as an int, when positive, as a bare flag when true, a choice's name, a module list) when
 * its condition holds; a row whose flags depend on each other (precision, dispatcher, recompute,
 * CUDA graphs, pipeline layout, layer patterns) has a writer here that writes them together, the
 * inverse of its rule in megatron_rules.c. Every field the parser reads is written (booleans only
 * when true), so the text parses back to the same structs (megatron_args.h states the exceptions).
 * Values with shell characters are single-quoted.
 */
#include "model/megatron_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Words ----------------------------------------------------------------------------------- */

static void w_raw(struct moe_mf_writer *w, const char *s)
{
    size_t n = strlen(s);
    if (w->used < w->cap) {
        size_t room = w->cap - w->used - 1;
        size_t k = n < room ? n : room;
        memcpy(w->buf + w->used, s, k);
        w->buf[w->used + k] = '\0';
    }
    w->used += n;
}

void moe_mf_w_flag(struct moe_mf_writer *w, const char *name)
{
    if (w->used > 0) {
        w_raw(w, w->multiline ? " \\\n    " : " ");
    }
    w_raw(w, name);
}

/* A value, single-quoted when the shell would treat a character specially. */
static void w_val(struct moe_mf_writer *w, const char *v)
{
    w_raw(w, " ");
    bool plain = *v != '\0';
    for (const char *p = v; *p != '\0'; p++) {
        if (strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,+-:/=@%",
                   *p) == NULL) {
            plain = false;
        }
    }
    if (plain) {
        w_raw(w, v);
        return;
    }
    w_raw(w, "'");
    w_raw(w, v); /* the values written here never contain a quote */
    w_raw(w, "'");
}

void moe_mf_w_int(struct moe_mf_writer *w, const char *name, long v)
{
    char num[32];
    (void)snprintf(num, sizeof(num), "%ld", v);
    moe_mf_w_flag(w, name);
    w_val(w, num);
}

/* Shortest text that reads back as exactly v. */
static void w_num(struct moe_mf_writer *w, double v)
{
    char num[40];
    for (int prec = 6; prec <= 17; prec++) {
        (void)snprintf(num, sizeof(num), "%.*g", prec, v);
        if (strtod(num, NULL) == v) {
            break;
        }
    }
    w_val(w, num);
}

void moe_mf_w_double(struct moe_mf_writer *w, const char *name, double v)
{
    moe_mf_w_flag(w, name);
    w_num(w, v);
}

void moe_mf_w_str(struct moe_mf_writer *w, const char *name, const char *v)
{
    moe_mf_w_flag(w, name);
    w_val(w, v);
}

void moe_mf_w_bool(struct moe_mf_writer *w, const char *name, bool on)
{
    if (on) {
        moe_mf_w_flag(w, name);
    }
}

void moe_mf_w_modules(struct moe_mf_writer *w,
                      const char *name,
                      enum moe_module_set set,
                      unsigned bits)
{
    moe_mf_w_flag(w, name);
    for (unsigned b = 0; b < 16; b++) {
        const char *m = (bits & (1u << b)) ? moe_module_name(set, 1u << b) : NULL;
        if (m != NULL) {
            w_val(w, m);
        }
    }
}

/* ---- Rows ------------------------------------------------------------------------------------ */

static const char *member(const struct moe_mf_writer *w, const struct moe_mf_flag *f)
{
    switch (f->target) {
    case T_CFG:
        return (const char *)w->cfg + f->off;
    case T_LAY:
        return (const char *)w->lay + f->off;
    case T_OPT:
        return (const char *)w->opt + f->off;
    default:
        return NULL;
    }
}

/* Row f by its write rule (members are read as megatron_args.c stored them). */
static void write_row(struct moe_mf_writer *w, const struct moe_mf_flag *f)
{
    if (f->write == W_NONE ||
        !moe_mf_holds((enum moe_mf_when)f->when, w->cfg, w->lay, w->opt, w->flags)) {
        return;
    }
    if (f->write == W_CALL) {
        f->write_fn(w, f);
        return;
    }
    const char *m = member(w, f);
    int i = 0;
    bool on = false;
    unsigned bits = 0;
    double d = 0.0;
    switch (f->write) {
    case W_INT:
    case W_POS:
        memcpy(&i, m, sizeof(i));
        if (f->write == W_INT || i > 0) {
            moe_mf_w_int(w, f->name, i);
        }
        break;
    case W_TRUE:
        memcpy(&on, m, sizeof(on));
        moe_mf_w_bool(w, f->name, on);
        break;
    case W_CHOICE:
        memcpy(&i, m, sizeof(i));
        moe_mf_w_str(w, f->name, f->choices[i >= 0 && i < f->num_choices ? i : 0]);
        break;
    case W_DTYPE:
        memcpy(&i, m, sizeof(i));
        if (i != MOE_DTYPE_FP32) {
            moe_mf_w_str(w, f->name, moe_dtype_name((enum moe_dtype)i));
        }
        break;
    case W_MODULES:
        memcpy(&bits, m, sizeof(bits));
        moe_mf_w_modules(w, f->name, (enum moe_module_set)f->modset, bits);
        break;
    case W_POS_DBL:
        memcpy(&d, m, sizeof(d));
        if (d > 0.0) {
            moe_mf_w_double(w, f->name, d);
        }
        break;
    default:
        break;
    }
}

enum moe_status moe_megatron_format_args(const struct moe_model_cfg *cfg,
                                         const struct moe_layout *lay,
                                         const struct moe_options *opt,
                                         unsigned flags,
                                         char *buf,
                                         size_t len,
                                         size_t *needed,
                                         struct moe_diag *diag)
{
    struct moe_mf_writer w = {.buf = buf,
                              .cap = len,
                              .multiline = (flags & MOE_MEGATRON_FMT_MULTILINE) != 0,
                              .flags = flags,
                              .cfg = cfg,
                              .lay = lay,
                              .opt = opt};
    if (buf != NULL && len > 0) {
        buf[0] = '\0';
    } else {
        w.cap = 0;
    }
    for (size_t i = 0; i < moe_mf_num_flags; i++) {
        write_row(&w, &moe_mf_flags[i]);
    }
    if (needed != NULL) {
        *needed = w.used;
    }
    if (w.used >= len) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "Megatron command line needs %zu bytes, buffer has %zu", w.used + 1,
                            len);
    }
    return MOE_OK;
}

/* ---- Writers of rows that stand for several flags -------------------------------------------- */

/* --group-query-attention --num-query-groups G, when the groups are not one per head. */
void moe_mf_write_gqa(struct moe_mf_writer *w, const struct moe_mf_flag *f)
{
    const struct moe_model_cfg *c = w->cfg;
    if (c->num_query_groups > 0 && c->num_query_groups != c->num_attention_heads) {
        moe_mf_w_flag(w, f->name);
        moe_mf_w_int(w, "--num-query-groups", c->num_query_groups);
    }
}

/* --swiglu for a gated MLP, unless its gate is quick-GELU: Megatron refuses both flags together
 * (arguments.py asserts not args.swiglu under --quick-geglu, which makes the MLP gated itself). */
void moe_mf_write_swiglu(struct moe_mf_writer *w, const struct moe_mf_flag *f)
{
    moe_mf_w_bool(w, f->name, w->cfg->is_swiglu && !w->cfg->is_quick_geglu);
}

/* The layout's sequence length, else the model's. */
void moe_mf_write_seq_length(struct moe_mf_writer *w, const struct moe_mf_flag *f)
{
    moe_mf_w_int(w, f->name, w->lay->seq_length > 0 ? w->lay->seq_length : w->cfg->seq_length);
}

/* Layer pattern bits (flag `bit`) of the model's layers. */
static int layer_bits(const struct moe_model_cfg *c, unsigned bit, uint8_t *bits)
{
    int n = c->num_layers < MOE_MAX_LAYERS ? c->num_layers : MOE_MAX_LAYERS;
    for (int i = 0; i < n; i++) {
        bits[i] = (c->layer_flags[i] & bit) != 0;
    }
    return n;
}

/* --window-size "(W,0)" and, unless every layer is windowed, --window-attn-skip-freq. */
void moe_mf_write_window(struct moe_mf_writer *w, const struct moe_mf_flag *f)
{
    const struct moe_model_cfg *c = w->cfg;
    uint8_t bits[MOE_MAX_LAYERS];
    int n = layer_bits(c, MOE_LAYER_WINDOWED, bits);
    int num_windowed = 0;
    for (int i = 0; i < n; i++) {
        num_windowed += bits[i];
    }
    if (c->window_size > 0 && num_windowed > 0) {
        char ws[40];
        (void)snprintf(ws, sizeof(ws), "(%d,0)", c->window_size);
        moe_mf_w_str(w, f->name, ws);
        if (num_windowed < n) { /* without a skip pattern every layer is windowed */
            char text[2048];
            moe_mf_pattern_text(bits, n, true, text, sizeof(text));
            moe_mf_w_str(w, "--window-attn-skip-freq", text);
        }
    }
}

/* --moe-layer-freq: which layers are MoE. */
void moe_mf_write_layer_freq(struct moe_mf_writer *w, const struct moe_mf_flag *f)
{
    uint8_t bits[MOE_MAX_LAYERS];
    char text[2048];
    int n = layer_bits(w->cfg, MOE_LAYER_MOE, bits);
    moe_mf_pattern_text(bits, n, false, text, sizeof(text));
    moe_mf_w_str(w, f->name, text);
}

/* A custom pipeline layout as its string (the uneven stages and vpp are then not written). */
void moe_mf_write_pp_layout(struct moe_mf_writer *w, const struct moe_mf_flag *f)
{
    const struct moe_layout *l = w->lay;
    if (l->has_custom_pp_layout && l->num_chunks > 0) {
        char text[MOE_MAX_PP_CHUNKS * 24];
        moe_layout_format_pp_string(l, text, (int)sizeof(text));
        moe_mf_w_str(w, f->name, text);
    }
}

/* Virtual stages, when more than one and no layout string gives them. */
void moe_mf_write_vpp(struct moe_mf_writer *w, const struct moe_mf_flag *f)
{
    if (moe_mf_holds(C_EVEN_PP, w->cfg, w->lay, w->opt, w->flags) && w->lay->vpp > 1) {
        moe_mf_w_int(w, f->name, w->lay->vpp);
    }
}

/* --bf16, then the FP4 or FP8 format, recipe and parameter gather of the recipe. */
void moe_mf_write_precision(struct moe_mf_writer *w, const struct moe_mf_flag *f)
{
    static const char *const fp8_recipes[] = {"", "tensorwise", "delayed", "blockwise", "mxfp8"};
    const struct moe_options *o = w->opt;
    moe_mf_w_flag(w, "--bf16");
    if (o->recipe == MOE_RECIPE_NVFP4) {
        moe_mf_w_str(w, "--fp4-format", "e2m1");
        moe_mf_w_str(w, "--fp4-recipe", "nvfp4");
        moe_mf_w_bool(w, "--fp4-param-gather", o->fp8_param_gather);
    } else if (o->recipe > MOE_RECIPE_BF16 && o->recipe <= MOE_RECIPE_MXFP8) {
        moe_mf_w_str(w, f->name, "e4m3");
        moe_mf_w_str(w, "--fp8-recipe", fp8_recipes[o->recipe]);
        moe_mf_w_bool(w, "--fp8-param-gather", o->fp8_param_gather);
    } else {
        moe_mf_w_bool(w, "--fp8-param-gather",
                      o->fp8_param_gather); /* invalid, kept for fidelity */
    }
}

/* The offloaded share, with the offload or when not Megatron's default 1. */
void moe_mf_write_offload_fraction(struct moe_mf_writer *w, const struct moe_mf_flag *f)
{
    const struct moe_options *o = w->opt;
    if (o->optimizer_cpu_offload || o->optimizer_offload_fraction != 1.0) {
        moe_mf_w_double(w, f->name, o->optimizer_offload_fraction);
    }
}

/* The dispatcher type, and the flex backend for DeepEP and HybridEP. */
void moe_mf_write_dispatcher(struct moe_mf_writer *w, const struct moe_mf_flag *f)
{
    const struct moe_options *o = w->opt;
    if (w->cfg->num_experts > 0 || o->dispatcher != MOE_DISPATCH_ALLTOALL) {
        static const char *const types[] = {"alltoall", "allgather", "flex", "flex"};
        moe_mf_w_str(w, f->name, types[o->dispatcher & 3]);
        if (o->dispatcher == MOE_DISPATCH_DEEPEP || o->dispatcher == MOE_DISPATCH_HYBRIDEP) {
            moe_mf_w_str(w, "--moe-flex-dispatcher-backend", moe_dispatcher_name(o->dispatcher));
        }
    }
}

/* Selective: the granularity and modules; full: the granularity, method and layer count. */
void moe_mf_write_recompute(struct moe_mf_writer *w, const struct moe_mf_flag *f)
{
    const struct moe_options *o = w->opt;
    if (o->recompute == MOE_RECOMPUTE_SELECTIVE) {
        moe_mf_w_str(w, f->name, "selective");
        moe_mf_w_modules(w, "--recompute-modules", MOE_MODSET_RECOMPUTE, o->recompute_modules);
    } else if (o->recompute == MOE_RECOMPUTE_FULL) {
        moe_mf_w_str(w, f->name, "full");
        moe_mf_w_str(w, "--recompute-method", moe_recompute_method_name(o->recompute_method));
        moe_mf_w_int(w, "--recompute-num-layers", o->recompute_num_layers);
    }
}

/* full_iteration, or the implementation and its modules. */
void moe_mf_write_cuda_graph(struct moe_mf_writer *w, const struct moe_mf_flag *f)
{
    const struct moe_options *o = w->opt;
    if (o->cuda_graph_modules & MOE_CGM_FULL_ITERATION) {
        moe_mf_w_str(w, f->name, "full_iteration");
    } else if (o->cuda_graph_impl != MOE_CG_NONE) {
        moe_mf_w_str(w, f->name, moe_cuda_graph_impl_name(o->cuda_graph_impl));
        if (o->cuda_graph_modules != 0) {
            moe_mf_w_modules(w, "--cuda-graph-modules", MOE_MODSET_CUDA_GRAPH,
                             o->cuda_graph_modules);
        }
    }
}

/* The load-balancing losses that are on: their types, then their coefficients, in one order. */
void moe_mf_write_balance(struct moe_mf_writer *w, const struct moe_mf_flag *f)
{
    const struct moe_options *o = w->opt;
    const double c[3] = {o->aux_loss_coeff, o->seq_aux_loss_coeff, o->global_aux_loss_coeff};
    if (!(c[0] > 0.0 || c[1] > 0.0 || c[2] > 0.0)) {
        return; /* Megatron's default: aux_loss at 0 */
    }
    moe_mf_w_flag(w, f->name);
    for (int i = 0; i < 3; i++) {
        if (c[i] > 0.0) {
            w_val(w, moe_mf_balance_types[i]);
        }
    }
    moe_mf_w_flag(w, "--moe-aux-loss-coeff");
    for (int i = 0; i < 3; i++) {
        if (c[i] > 0.0) {
            w_num(w, c[i]);
        }
    }
}

/* moefold's --moe-imbalance: auto, or a factor other than 1. */
void moe_mf_write_imbalance(struct moe_mf_writer *w, const struct moe_mf_flag *f)
{
    double v = w->opt->moe_imbalance;
    if (v == 0.0) {
        moe_mf_w_str(w, f->name, "auto");
    } else if (v != 1.0) {
        moe_mf_w_double(w, f->name, v);
    }
}
