/*
 * Private to the Megatron-LM flags module (model/megatron_*.c): the flag table's row, the parse
 * state the rules read, the writer, and the functions the files share. Public API:
 * model/megatron_args.h.
 *
 * The module's files, and where a new flag goes:
 *   megatron_flags.c    the table: one row per flag moefold accepts (name, values, how the value
 *                       is read and where it goes, the field it sets, Megatron's default, how it
 *                       is written back, what it means), then the families of ignored flags;
 *   megatron_args.c     parsing driven by the table (lookup, values, generic stores, the public
 *                       entry points) and splitting a pasted command line;
 *   megatron_write.c    writing driven by the table: each row's write rule, rows in table order;
 *   megatron_rules.c    Megatron's rules that involve more than one flag or an odd value: the
 *                       handlers of K_CALL rows and the pass after the last flag (defaults,
 *                       derived values, refused combinations);
 *   megatron_pattern.c  the list expressions of --moe-layer-freq and --window-attn-skip-freq.
 * A flag that sets one struct field is one row. A flag whose meaning depends on other flags is
 * one row with target T_RULE (its value kept in a slot) plus one rule that reads the slot.
 */
#ifndef MOE_MODEL_MEGATRON_INTERNAL_H
#define MOE_MODEL_MEGATRON_INTERNAL_H

#include "model/config.h"
#include "model/layout.h"
#include "model/megatron_args.h"
#include "model/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- The table ------------------------------------------------------------------------------- */

enum { A0 = 0, A1 = 1, AN = -1 }; /* values a flag takes: none (store_true), one, a list */

/* How a flag's value is read. */
enum moe_mf_kind {
    K_INT,     /* an integer in [lo, hi] */
    K_BOOL,    /* store_true: the flag alone means true */
    K_CHOICE,  /* one of choices[] (stored as its index) */
    K_MODULES, /* a module list of set modset (stored as bits) */
    K_TEXT,    /* kept as written, for a rule (patterns, layout strings) */
    K_CALL,    /* read by the row's handler `read` (megatron_rules.c) */
    K_IGNORE,  /* accepted without effect, for the reason `why` */
    K_REFUSE,  /* refused: moefold cannot price it */
};

/* Where a value goes: a member of the model, layout or options struct (at `off`), or a slot the
 * rules read after the last flag (T_RULE, slot `slot`). */
enum moe_mf_target { T_NONE, T_CFG, T_LAY, T_OPT, T_RULE };

/* How a row is written back (moe_megatron_format_args), when its condition `when` holds. */
enum moe_mf_write {
    W_NONE,    /* not written, or written by another row's writer */
    W_INT,     /* the int member */
    W_POS,     /* the int member, when > 0 */
    W_TRUE,    /* the flag alone, when the bool member is true */
    W_CHOICE,  /* choices[member] (choice 0 when out of range) */
    W_DTYPE,   /* the dtype member's name, when not fp32 (Megatron's default) */
    W_MODULES, /* the modules of the bits member */
    W_POS_DBL, /* the double member, when > 0 */
    W_CALL,    /* the row's writer `write` (megatron_write.c) */
};

/* Conditions of writing (and of applying `def`). */
enum moe_mf_when {
    C_ALWAYS,
    C_MOE,          /* the model has experts */
    C_MLA,          /* multi-latent attention */
    C_EVEN_PP,      /* no custom pipeline layout string */
    C_FINE_OFFLOAD, /* fine-grained activation offloading on */
    C_MOEFOLD,      /* MOE_MEGATRON_FMT_MOEFOLD: moefold's own flags asked for */
};

/* Why an accepted flag has no effect (K_IGNORE rows, and flags a rule drops). */
enum moe_mf_why {
    WHY_NONE,
    WHY_PERF,
    WHY_NOT_MODELLED,
    WHY_FP16,
    WHY_NO_FP8_FORMAT,
    WHY_NO_FP4_FORMAT,
    WHY_NO_FLEX,
    WHY_NO_SELECTIVE,
    WHY_NOOP,
    WHY_COUNT,
};

/* Values kept for the rules (T_RULE rows): one slot per meaning; two flags may share one. */
enum moe_mf_slot {
    S_NONE = 0,
    S_GQA,
    S_QUERY_GROUPS,
    S_MOE_LAYER_FREQ,
    S_WINDOW_SIZE,
    S_WINDOW_SKIP,
    S_PP_LAYOUT,
    S_VPP_LAYERS,
    S_VPP_STAGES,
    S_FP8_FORMAT,
    S_FP8_RECIPE,
    S_FP4_FORMAT,
    S_FP4_RECIPE,
    S_FP8_PG,
    S_FP4_PG,
    S_DISPATCHER,
    S_FLEX_BACKEND,
    S_ENABLE_DEEPEP,
    S_RC_GRAN,
    S_RC_MODULES,
    S_RC_ACTIVATIONS,
    S_MOE_LAYER_RC,
    S_CG_IMPL,
    S_CG_MODULES, /* --cuda-graph-modules and its older name --cuda-graph-scope */
    S_ENABLE_CG,
    S_EXTERNAL_CG,
    S_COUNT,
};

struct moe_mf_parse;
struct moe_mf_writer;
struct moe_mf_values;

struct moe_mf_flag {
    const char *name;           /* "--flag" as Megatron spells it */
    signed char arity;          /* A0, A1, AN */
    unsigned char kind;         /* enum moe_mf_kind */
    unsigned char target;       /* enum moe_mf_target */
    unsigned char slot;         /* enum moe_mf_slot (T_RULE) */
    unsigned char field;        /* enum moe_megatron_field marked when read; MOE_MF_COUNT: none
                                   (a rule marks what it sets) */
    unsigned char write;        /* enum moe_mf_write */
    unsigned char when;         /* enum moe_mf_when */
    unsigned char why;          /* enum moe_mf_why (K_IGNORE) */
    unsigned char modset;       /* enum moe_module_set (K_MODULES, W_MODULES) */
    unsigned short off;         /* offset of the member in its struct */
    int lo, hi;                 /* K_INT range */
    int def;                    /* Megatron's default, set after the last flag when the member is
                                   still 0 and `when` holds (0: none) */
    const char *const *choices; /* K_CHOICE / W_CHOICE, num_choices of them; choice 0 is
                                   Megatron's default */
    int num_choices;
    enum moe_status (*read)(struct moe_mf_parse *x,
                            const struct moe_mf_flag *f,
                            const char *val,
                            const struct moe_mf_values *v);                 /* K_CALL */
    void (*write_fn)(struct moe_mf_writer *w, const struct moe_mf_flag *f); /* W_CALL */
    const char *doc; /* what the flag means to moefold */
};

extern const struct moe_mf_flag moe_mf_flags[];
extern const size_t moe_mf_num_flags;
/* Families of flags that never affect performance (any number of values). */
extern const char *const moe_mf_ignored_prefixes[];
extern const size_t moe_mf_num_ignored_prefixes;
extern const char *const moe_mf_why_text[WHY_COUNT];

/* ---- Parsing --------------------------------------------------------------------------------- */

/* A flag's values: "--flag=value" (eq) or the words after it. */
struct moe_mf_values {
    const char *eq;          /* value after '=' (one word), or NULL */
    const char *const *argv; /* following words when eq is NULL */
    int count;
};

/* A T_RULE flag's value, as read: the last occurrence wins. */
struct moe_mf_slot_val {
    bool given;
    int at;           /* argv index */
    const char *text; /* the value as written (points into argv) */
    int num;          /* K_INT value, K_CHOICE index */
    unsigned bits;    /* K_MODULES */
};

/* --moe-router-load-balancing-type and --moe-aux-loss-coeff: two lists Megatron pairs by position,
 * kept as read (the last occurrence of each wins) and paired after the last flag. */
#define MOE_MF_MAX_BALANCE 6
struct moe_mf_balance {
    bool has_types, has_coeffs;
    int at_types, at_coeffs; /* argv index of each flag */
    int num_types, num_coeffs;
    int types[MOE_MF_MAX_BALANCE]; /* index into moe_mf_balance_types */
    double coeffs[MOE_MF_MAX_BALANCE];
};
extern const char *const moe_mf_balance_types[];
extern const int moe_mf_num_balance_types;

struct moe_mf_parse {
    struct moe_model_cfg *cfg;
    struct moe_layout *lay;
    struct moe_options *opt;
    struct moe_megatron_result *res;
    struct moe_diag *diag;
    const char *const *argv;
    const char *flag; /* flag being handled, for messages */
    int at;           /* its argv index */
    /* the model before any flag, to tell derived defaults from given values */
    int old_layers, old_hidden, old_heads, old_groups, old_kv;
    struct moe_mf_slot_val slot[S_COUNT];
    struct moe_mf_balance balance;
};

void moe_mf_mark(struct moe_mf_parse *x, enum moe_megatron_field f);
bool moe_mf_was_set(const struct moe_mf_parse *x, enum moe_megatron_field f);
/* An error about flag (argv index at); returns st. */
enum moe_status moe_mf_error(
    struct moe_mf_parse *x, const char *flag, int at, enum moe_status st, const char *fmt, ...)
    MOE_PRINTF(5, 6);
/* Record arg (its name: len characters, -1 up to '=') as accepted without effect. */
void moe_mf_add_ignored(struct moe_mf_parse *x, const char *arg, int len, int at, int why);
/* Values of the flag being handled (x->flag); errors name it. */
MOE_NODISCARD enum moe_status
moe_mf_parse_int(struct moe_mf_parse *x, const char *s, long lo, long hi, int *out);
MOE_NODISCARD enum moe_status
moe_mf_parse_double(struct moe_mf_parse *x, const char *s, double *out);
/* The index of s in choices[n]; an error listing them otherwise. */
MOE_NODISCARD enum moe_status moe_mf_parse_choice(
    struct moe_mf_parse *x, const char *s, const char *const *choices, size_t n, int *out);
/* Keep a T_RULE value in slot s (given, at the current flag). */
void moe_mf_slot_set(
    struct moe_mf_parse *x, enum moe_mf_slot s, const char *text, int num, unsigned bits);
/* Whether condition c holds for these structs and format flags (flags: 0 when parsing). */
bool moe_mf_holds(enum moe_mf_when c,
                  const struct moe_model_cfg *cfg,
                  const struct moe_layout *lay,
                  const struct moe_options *opt,
                  unsigned flags);

/* megatron_rules.c: K_CALL handlers and the pass after the last flag. */
enum moe_status moe_mf_read_seq_length(struct moe_mf_parse *x,
                                       const struct moe_mf_flag *f,
                                       const char *val,
                                       const struct moe_mf_values *v);
enum moe_status moe_mf_read_window_size(struct moe_mf_parse *x,
                                        const struct moe_mf_flag *f,
                                        const char *val,
                                        const struct moe_mf_values *v);
enum moe_status moe_mf_read_quant_recipe(struct moe_mf_parse *x,
                                         const struct moe_mf_flag *f,
                                         const char *val,
                                         const struct moe_mf_values *v);
enum moe_status moe_mf_read_capacity(struct moe_mf_parse *x,
                                     const struct moe_mf_flag *f,
                                     const char *val,
                                     const struct moe_mf_values *v);
enum moe_status moe_mf_read_imbalance(struct moe_mf_parse *x,
                                      const struct moe_mf_flag *f,
                                      const char *val,
                                      const struct moe_mf_values *v);
enum moe_status moe_mf_read_offload_fraction(struct moe_mf_parse *x,
                                             const struct moe_mf_flag *f,
                                             const char *val,
                                             const struct moe_mf_values *v);
enum moe_status moe_mf_read_balance_types(struct moe_mf_parse *x,
                                          const struct moe_mf_flag *f,
                                          const char *val,
                                          const struct moe_mf_values *v);
enum moe_status moe_mf_read_aux_coeffs(struct moe_mf_parse *x,
                                       const struct moe_mf_flag *f,
                                       const char *val,
                                       const struct moe_mf_values *v);
MOE_NODISCARD enum moe_status moe_mf_finalize(struct moe_mf_parse *x);

/* megatron_pattern.c: a frequency value (an int N or a list expression) into out[num_layers]
 * (1 = set): the MoE rule out[i] = (i % N == 0), or the window rule ((i + 1) % N != 0); and back
 * (the int when its rule reproduces bits[n], else the shortest periodic list expression). */
MOE_NODISCARD enum moe_status moe_mf_eval_pattern(
    struct moe_mf_parse *x, const char *s, bool window_rule, int num_layers, uint8_t *out);
void moe_mf_pattern_text(const uint8_t *bits, int n, bool window_rule, char *out, size_t len);

/* ---- Writing --------------------------------------------------------------------------------- */

struct moe_mf_writer {
    char *buf;
    size_t cap, used; /* used counts every character, written or not */
    bool multiline;
    unsigned flags; /* MOE_MEGATRON_FMT_* */
    const struct moe_model_cfg *cfg;
    const struct moe_layout *lay;
    const struct moe_options *opt;
};

void moe_mf_w_flag(struct moe_mf_writer *w, const char *name);
void moe_mf_w_int(struct moe_mf_writer *w, const char *name, long v);
void moe_mf_w_double(struct moe_mf_writer *w, const char *name, double v);
void moe_mf_w_str(struct moe_mf_writer *w, const char *name, const char *v);
void moe_mf_w_bool(struct moe_mf_writer *w, const char *name, bool on);
void moe_mf_w_modules(struct moe_mf_writer *w,
                      const char *name,
                      enum moe_module_set set,
                      unsigned bits);

/* W_CALL writers (megatron_write.c): each writes its row and the rows it stands for. */
void moe_mf_write_gqa(struct moe_mf_writer *w, const struct moe_mf_flag *f);
void moe_mf_write_swiglu(struct moe_mf_writer *w, const struct moe_mf_flag *f);
void moe_mf_write_seq_length(struct moe_mf_writer *w, const struct moe_mf_flag *f);
void moe_mf_write_window(struct moe_mf_writer *w, const struct moe_mf_flag *f);
void moe_mf_write_layer_freq(struct moe_mf_writer *w, const struct moe_mf_flag *f);
void moe_mf_write_pp_layout(struct moe_mf_writer *w, const struct moe_mf_flag *f);
void moe_mf_write_vpp(struct moe_mf_writer *w, const struct moe_mf_flag *f);
void moe_mf_write_precision(struct moe_mf_writer *w, const struct moe_mf_flag *f);
void moe_mf_write_offload_fraction(struct moe_mf_writer *w, const struct moe_mf_flag *f);
void moe_mf_write_dispatcher(struct moe_mf_writer *w, const struct moe_mf_flag *f);
void moe_mf_write_recompute(struct moe_mf_writer *w, const struct moe_mf_flag *f);
void moe_mf_write_cuda_graph(struct moe_mf_writer *w, const struct moe_mf_flag *f);
void moe_mf_write_imbalance(struct moe_mf_writer *w, const struct moe_mf_flag *f);
void moe_mf_write_balance(struct moe_mf_writer *w, const struct moe_mf_flag *f);

#endif /* MOE_MODEL_MEGATRON_INTERNAL_H */
