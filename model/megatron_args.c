/*
 * Megatron-LM command lines -> moefold structs (model/megatron_args.h), driven by the flag table
 * (megatron_flags.c): each word is looked up, its values gathered as argparse would (store_true:
 * none; one value; nargs='*'/'+': the words up to the next flag), checked by the row's kind (int in
 * range, one of the choices, module names) and stored where the row says, or kept in a slot for
 * the rules (megatron_rules.c), which run once all flags are read. Unknown flags are errors that
 * name the closest known one; flags without effect are listed back with the reason. Also splits a
 * pasted command line into words as a shell would.
 */
#include "model/megatron_internal.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Lookup ---------------------------------------------------------------------------------- */

static const struct moe_mf_flag *find_flag(const char *name)
{
    for (size_t i = 0; i < moe_mf_num_flags; i++) {
        if (strcmp(moe_mf_flags[i].name, name) == 0) {
            return &moe_mf_flags[i];
        }
    }
    return NULL;
}

/* "--no-*-fusion" / "--*-fusion" kernel-fusion switches and the prefix families. */
static bool is_ignored_family(const char *name)
{
    size_t n = strlen(name);
    if (n > 9 && strcmp(name + n - 7, "-fusion") == 0) {
        return true;
    }
    for (size_t i = 0; i < moe_mf_num_ignored_prefixes; i++) {
        const char *p = moe_mf_ignored_prefixes[i];
        if (strncmp(name, p, strlen(p)) == 0) {
            return true;
        }
    }
    return false;
}

bool moe_megatron_flag_known(const char *name, int *arity)
{
    const struct moe_mf_flag *d = (name != NULL) ? find_flag(name) : NULL;
    if (d != NULL) {
        if (arity != NULL) {
            *arity = d->arity;
        }
        return true;
    }
    if (name != NULL && is_ignored_family(name)) {
        if (arity != NULL) {
            *arity = AN;
        }
        return true;
    }
    return false;
}

bool moe_megatron_flag_priced(const char *name)
{
    const struct moe_mf_flag *d = (name != NULL) ? find_flag(name) : NULL;
    return d != NULL && d->kind != K_IGNORE;
}

bool moe_megatron_is_set(const struct moe_megatron_result *res, enum moe_megatron_field f)
{
    if (res == NULL || (int)f < 0 || f >= MOE_MF_COUNT) {
        return false;
    }
    return (res->set[f / 64] >> (f % 64)) & 1u;
}

/* Levenshtein distance of two short strings (flag names). */
static int edit_distance(const char *a, const char *b)
{
    enum { MAXN = 80 };
    int row[MAXN + 1];
    int la = (int)strnlen(a, MAXN), lb = (int)strnlen(b, MAXN);
    for (int j = 0; j <= lb; j++) {
        row[j] = j;
    }
    for (int i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) {
                best = up + 1;
            }
            if (row[j - 1] + 1 < best) {
                best = row[j - 1] + 1;
            }
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static const char *closest_flag(const char *name)
{
    const char *best = NULL;
    int best_d = 1 << 30;
    for (size_t i = 0; i < moe_mf_num_flags; i++) {
        int d = edit_distance(name, moe_mf_flags[i].name);
        if (d < best_d) {
            best_d = d;
            best = moe_mf_flags[i].name;
        }
    }
    int limit = (int)strlen(name) / 3;
    return (best_d <= (limit > 2 ? limit : 2)) ? best : NULL;
}

/* ---- Values ---------------------------------------------------------------------------------- */

void moe_mf_mark(struct moe_mf_parse *x, enum moe_megatron_field f)
{
    x->res->set[f / 64] |= (uint64_t)1 << (f % 64);
}

bool moe_mf_was_set(const struct moe_mf_parse *x, enum moe_megatron_field f)
{
    return moe_megatron_is_set(x->res, f);
}

enum moe_status moe_mf_error(
    struct moe_mf_parse *x, const char *flag, int at, enum moe_status st, const char *fmt, ...)
{
    moe_diag_source(x->diag, flag);
    if (x->diag != NULL) {
        x->diag->column = at + 1;
    }
    va_list args;
    va_start(args, fmt);
    (void)moe_diag_vset(x->diag, st, fmt, args);
    va_end(args);
    return st;
}

void moe_mf_add_ignored(struct moe_mf_parse *x, const char *arg, int len, int at, int why)
{
    if (len < 0) {
        len = (int)strcspn(arg, "=");
    }
    struct moe_megatron_result *r = x->res;
    if (r->num_ignored >= MOE_MEGATRON_MAX_IGNORED) {
        r->num_ignored_dropped++;
        return;
    }
    struct moe_megatron_ignored *e = &r->ignored[r->num_ignored++];
    e->flag = arg;
    e->flag_len = len;
    e->argv_idx = at;
    e->reason = moe_mf_why_text[why];
}

enum moe_status moe_mf_parse_int(struct moe_mf_parse *x, const char *s, long lo, long hi, int *out)
{
    char *end = NULL;
    errno = 0;
    long v = (s != NULL && *s != '\0') ? strtol(s, &end, 10) : 0;
    if (s == NULL || *s == '\0' || end == NULL || *end != '\0' || errno != 0) {
        return moe_mf_error(x, x->flag, x->at, MOE_ERR_INVALID, "%s: '%s' is not an integer",
                            x->flag, s != NULL ? s : "");
    }
    if (v < lo || v > hi) {
        return moe_mf_error(x, x->flag, x->at, MOE_ERR_INVALID,
                            "%s: %ld is out of range [%ld, %ld]", x->flag, v, lo, hi);
    }
    *out = (int)v;
    return MOE_OK;
}

enum moe_status moe_mf_parse_double(struct moe_mf_parse *x, const char *s, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = (s != NULL && *s != '\0') ? strtod(s, &end) : 0.0;
    if (s == NULL || *s == '\0' || end == NULL || *end != '\0' || errno != 0 || !isfinite(v)) {
        return moe_mf_error(x, x->flag, x->at, MOE_ERR_INVALID, "%s: '%s' is not a number", x->flag,
                            s != NULL ? s : "");
    }
    *out = v;
    return MOE_OK;
}

enum moe_status moe_mf_parse_choice(
    struct moe_mf_parse *x, const char *s, const char *const *choices, size_t n, int *out)
{
    char list[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(s, choices[i]) == 0) {
            *out = (int)i;
            return MOE_OK;
        }
        int w = snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "", choices[i]);
        used += (w > 0 && (size_t)w < sizeof(list) - used) ? (size_t)w : 0;
    }
    return moe_mf_error(x, x->flag, x->at, MOE_ERR_INVALID, "%s: '%s' is not one of: %s", x->flag,
                        s, list);
}

/*
 * Next item of a list value: words split further at commas. *word and *off keep the position.
 * Returns false when no item is left; the item is copied into buf[len] (truncated items fail the
 * name lookups that follow, which report them).
 */
static bool next_item(const struct moe_mf_values *v, int *word, size_t *off, char *buf, size_t len)
{
    int nwords = (v->eq != NULL) ? 1 : v->count;
    while (*word < nwords) {
        const char *w = (v->eq != NULL) ? v->eq : v->argv[*word];
        const char *p = w + *off;
        while (*p == ',' || *p == ' ') {
            p++;
        }
        if (*p == '\0') {
            (*word)++;
            *off = 0;
            continue;
        }
        size_t n = strcspn(p, ", ");
        size_t k = n < len - 1 ? n : len - 1;
        memcpy(buf, p, k);
        buf[k] = '\0';
        *off = (size_t)(p - w) + n;
        return true;
    }
    return false;
}

static enum moe_status parse_modules(struct moe_mf_parse *x,
                                     const struct moe_mf_values *v,
                                     enum moe_module_set set,
                                     unsigned *out)
{
    unsigned bits = 0;
    int word = 0;
    size_t off = 0;
    char item[64];
    while (next_item(v, &word, &off, item, sizeof(item))) {
        unsigned bit = 0;
        if (set == MOE_MODSET_CUDA_GRAPH && strcmp(item, "full") == 0) {
            continue; /* deprecated "full" scope = the whole layer = no module list */
        }
        enum moe_status st = moe_module_parse(set, item, &bit, x->diag);
        if (st != MOE_OK) {
            char msg[sizeof(x->diag->message)];
            (void)snprintf(msg, sizeof(msg), "%s", x->diag != NULL ? x->diag->message : "");
            return moe_mf_error(x, x->flag, x->at, MOE_ERR_INVALID, "%s: %s", x->flag, msg);
        }
        bits |= bit;
    }
    *out = bits;
    return MOE_OK;
}

void moe_mf_slot_set(
    struct moe_mf_parse *x, enum moe_mf_slot s, const char *text, int num, unsigned bits)
{
    struct moe_mf_slot_val *v = &x->slot[s];
    v->given = true;
    v->at = x->at;
    v->text = text;
    v->num = num;
    v->bits = bits;
}

bool moe_mf_holds(enum moe_mf_when c,
                  const struct moe_model_cfg *cfg,
                  const struct moe_layout *lay,
                  const struct moe_options *opt,
                  unsigned flags)
{
    switch (c) {
    case C_MOE:
        return cfg->num_experts > 0;
    case C_MLA:
        return cfg->is_mla;
    case C_EVEN_PP:
        return !(lay->has_custom_pp_layout && lay->num_chunks > 0);
    case C_FINE_OFFLOAD:
        return opt->fine_grained_offload;
    case C_MOEFOLD:
        return (flags & MOE_MEGATRON_FMT_MOEFOLD) != 0;
    default:
        return true;
    }
}

/* ---- One flag -------------------------------------------------------------------------------- */

static char *member(struct moe_mf_parse *x, const struct moe_mf_flag *f)
{
    switch (f->target) {
    case T_CFG:
        return (char *)x->cfg + f->off;
    case T_LAY:
        return (char *)x->lay + f->off;
    case T_OPT:
        return (char *)x->opt + f->off;
    default:
        return NULL;
    }
}

/* Read a flag's value by its row's kind and store it where the row says. */
static enum moe_status read_value(struct moe_mf_parse *x,
                                  const struct moe_mf_flag *f,
                                  const char *val,
                                  const struct moe_mf_values *v)
{
    int num = 0;
    unsigned bits = 0;
    switch (f->kind) {
    case K_INT:
        MOE_TRY(moe_mf_parse_int(x, val, f->lo, f->hi, &num));
        break;
    case K_BOOL:
        num = 1;
        break;
    case K_CHOICE:
        MOE_TRY(moe_mf_parse_choice(x, val, f->choices, (size_t)f->num_choices, &num));
        break;
    case K_MODULES:
        MOE_TRY(parse_modules(x, v, (enum moe_module_set)f->modset, &bits));
        break;
    default: /* K_TEXT: kept as written */
        break;
    }
    char *m = member(x, f);
    if (f->target == T_RULE) {
        moe_mf_slot_set(x, (enum moe_mf_slot)f->slot, val, num, bits);
    } else if (m != NULL && f->kind == K_BOOL) {
        bool on = true;
        memcpy(m, &on, sizeof(on));
    } else if (m != NULL && f->kind == K_MODULES) {
        memcpy(m, &bits, sizeof(bits));
    } else if (m != NULL) {
        memcpy(m, &num, sizeof(num)); /* an int, or an enum's index (megatron_flags.c) */
    }
    if (f->field != MOE_MF_COUNT) {
        moe_mf_mark(x, (enum moe_megatron_field)f->field);
    }
    return MOE_OK;
}

static bool is_flag_word(const char *s)
{
    return s[0] == '-' && s[1] == '-';
}

/* Gather a flag's values; *used gets the words consumed after argv[i]. */
static enum moe_status gather_values(struct moe_mf_parse *x,
                                     int argc,
                                     const char *const *argv,
                                     int i,
                                     int arity,
                                     const char *eq,
                                     struct moe_mf_values *v,
                                     int *used)
{
    memset(v, 0, sizeof(*v));
    *used = 0;
    if (arity == A0) {
        if (eq != NULL) {
            return moe_mf_error(x, x->flag, i, MOE_ERR_INVALID, "%s takes no value (got '%s')",
                                x->flag, eq + 1);
        }
        if (i + 1 < argc && !is_flag_word(argv[i + 1])) {
            return moe_mf_error(x, x->flag, i, MOE_ERR_INVALID,
                                "%s takes no value; unexpected '%s' after it", x->flag,
                                argv[i + 1]);
        }
        return MOE_OK;
    }
    if (eq != NULL) {
        v->eq = eq + 1;
        return MOE_OK;
    }
    v->argv = argv + i + 1;
    while (i + 1 + v->count < argc && !is_flag_word(argv[i + 1 + v->count])) {
        v->count++;
        if (arity == A1) {
            break;
        }
    }
    if (arity == A1 && v->count == 0) {
        return moe_mf_error(x, x->flag, i, MOE_ERR_INVALID, "%s needs a value", x->flag);
    }
    *used = v->count;
    return MOE_OK;
}

static enum moe_status handle_flag(struct moe_mf_parse *x,
                                   const struct moe_mf_flag *def,
                                   const char *arg,
                                   int name_len,
                                   const struct moe_mf_values *v)
{
    const char *val = (v->eq != NULL) ? v->eq : (v->count > 0 ? v->argv[0] : "");
    switch (def->kind) {
    case K_IGNORE:
        moe_mf_add_ignored(x, arg, name_len, x->at, def->why);
        return MOE_OK;
    case K_REFUSE:
        return moe_mf_error(x, x->flag, x->at, MOE_ERR_UNSUPPORTED,
                            "%s is not supported: describe the placement with "
                            "--pipeline-model-parallel-layout instead",
                            x->flag);
    case K_CALL:
        return def->read(x, def, val, v);
    default:
        return read_value(x, def, val, v);
    }
}

enum moe_status moe_megatron_parse_args(int argc,
                                        const char *const *argv,
                                        struct moe_model_cfg *cfg,
                                        struct moe_layout *lay,
                                        struct moe_options *opt,
                                        struct moe_megatron_result *res,
                                        struct moe_diag *diag)
{
    memset(res, 0, sizeof(*res));
    struct moe_mf_parse x;
    memset(&x, 0, sizeof(x));
    x.cfg = cfg;
    x.lay = lay;
    x.opt = opt;
    x.res = res;
    x.diag = diag;
    x.argv = argv;
    x.old_layers = cfg->num_layers;
    x.old_hidden = cfg->hidden_size;
    x.old_heads = cfg->num_attention_heads;
    x.old_groups = cfg->num_query_groups;
    x.old_kv = cfg->kv_channels;
    for (int i = 0; i < argc;) {
        const char *arg = argv[i];
        x.at = i;
        if (arg == NULL || !is_flag_word(arg) || arg[2] == '\0') {
            return moe_mf_error(&x, arg ? arg : "", i, MOE_ERR_INVALID,
                                "unexpected argument '%s': Megatron flags start with --",
                                arg ? arg : "(null)");
        }
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        char name[96];
        (void)snprintf(name, sizeof(name), "%.*s", (int)name_len, arg);
        x.flag = name;
        const struct moe_mf_flag *def = find_flag(name);
        int arity = def ? def->arity : AN;
        if (def == NULL && !is_ignored_family(name)) {
            const char *near = closest_flag(name);
            if (near != NULL) {
                return moe_mf_error(&x, name, i, MOE_ERR_INVALID,
                                    "unknown flag %s; did you mean %s?", name, near);
            }
            return moe_mf_error(&x, name, i, MOE_ERR_INVALID,
                                "unknown flag %s (not a Megatron-LM flag moefold knows)", name);
        }
        struct moe_mf_values v;
        int used = 0;
        MOE_TRY(gather_values(&x, argc, argv, i, arity, eq, &v, &used));
        if (def == NULL) {
            moe_mf_add_ignored(&x, arg, (int)name_len, i, WHY_PERF);
        } else {
            MOE_TRY(handle_flag(&x, def, arg, (int)name_len, &v));
        }
        i += 1 + used;
    }
    MOE_TRY(moe_mf_finalize(&x));
    if (diag != NULL) {
        diag->column = 0;
    }
    return MOE_OK;
}

/* ---- Splitting a pasted command line --------------------------------------------------------- */

enum moe_status moe_megatron_split_line(
    char *line, const char **argv, int max_argv, int *argc, struct moe_diag *diag)
{
    int n = 0;
    char *r = line, *wp = line;
    *argc = 0;
    while (*r != '\0') {
        while (*r == ' ' || *r == '\t' || *r == '\n' || *r == '\r' ||
               (r[0] == '\\' && r[1] == '\n')) {
            r += (r[0] == '\\') ? 2 : 1;
        }
        if (*r == '\0') {
            break;
        }
        if (n >= max_argv) {
            return moe_diag_set(diag, MOE_ERR_INVALID, "more than %d words on the command line",
                                max_argv);
        }
        argv[n++] = wp;
        while (*r != '\0' && *r != ' ' && *r != '\t' && *r != '\n' && *r != '\r') {
            if (*r == '\'') {
                char *close = strchr(r + 1, '\'');
                if (close == NULL) {
                    return moe_diag_set(diag, MOE_ERR_PARSE, "unterminated ' quote");
                }
                size_t k = (size_t)(close - r - 1);
                memmove(wp, r + 1, k);
                wp += k;
                r = close + 1;
            } else if (*r == '"') {
                r++;
                while (*r != '"') {
                    if (*r == '\0') {
                        return moe_diag_set(diag, MOE_ERR_PARSE, "unterminated \" quote");
                    }
                    if (r[0] == '\\' && r[1] != '\0' && strchr("\"\\$`", r[1]) != NULL) {
                        r++;
                    }
                    *wp++ = *r++;
                }
                r++;
            } else if (r[0] == '\\' && r[1] == '\n') {
                r += 2;
            } else if (r[0] == '\\' && r[1] != '\0') {
                *wp++ = r[1];
                r += 2;
            } else {
                *wp++ = *r++;
            }
        }
        bool at_end = (*r == '\0');
        *wp++ = '\0'; /* never overtakes r: quotes and escapes only shrink the text */
        if (!at_end) {
            r++;
        }
    }
    *argc = n;
    return MOE_OK;
}
