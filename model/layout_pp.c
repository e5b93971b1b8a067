/*
 * The pipeline layout string [P] (Megatron-Core's PipelineParallelLayerLayout: 'E' embedding, 't'
 * decoder layer, 'm' MTP layer, 'L' loss, '|' between chunks, '(...)*n' and 'x*n' repeats):
 * parsing with bounded work (items, depth, repeat counts and parser steps), counting chunks, and
 * formatting a layout back as the shortest string this file writes; and the placement of decoder
 * and MTP layers, embedding and loss on the pp*vpp chunks when no string is given (Megatron's even
 * split, the first/last-stage counts, or a suggested balanced string when the layers do not
 * divide).
 *
 * Chunk c = v*pp + p lives on pipeline rank p (Megatron's interleaved order); decoder layers are
 * numbered consecutively in chunk order (Megatron's get_transformer_layer_offset).
 */
#include "model/layout.h"
#include "model/layout_internal.h"

#include <stdio.h>
#include <string.h>

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

enum moe_status moe_layout_place_chunks(const struct moe_model_cfg *cfg,
                                        struct moe_layout *lay,
                                        struct moe_diag *diag)
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
