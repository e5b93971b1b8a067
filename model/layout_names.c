/*
 * Names of the layout module's option enums (recipes, dispatchers, recompute granularity and
 * method, dtypes, CUDA graph implementations) and module sets (recompute, offload, CUDA graph
 * modules), spelt as Megatron-LM's flags spell them, and their parsing: an unknown name is an
 * error that lists the accepted ones. No rules here (model/layout_options.c).
 */
#include "model/layout.h"
#include "model/layout_internal.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Names                                                                                       */

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
