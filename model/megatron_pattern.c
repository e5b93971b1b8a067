/*
 * Megatron's layer patterns (model/megatron_internal.h): the value of --moe-layer-freq and
 * --window-attn-skip-freq, an int N or a list expression, as a 0/1 entry per layer, and back.
 *
 * The grammar is the subset of Python Megatron evaluates (digits , [ ] ( ) + *): list literals,
 * concatenation with '+', repetition with '*N' (or 'N*'), parentheses:
 *   expr := term ('+' term)*      term := [INT '*'] factor ('*' INT)*
 *   factor := '(' expr ')' | '[' [0|1 (',' 0|1)*] ']'
 * An int N means every Nth layer is MoE (i % N == 0), or, for the window pattern, one
 * full-attention layer after N - 1 windowed ones ((i + 1) % N != 0).
 */
#include "model/megatron_internal.h"

#include <stdio.h>
#include <string.h>

/* ---- Reading: "([0]*3+[1]*58)", "[1,0]*4", 2 ---------------------------------------------- */

struct lexpr {
    const char *s;
    int pos, len;
    uint8_t *out;
    int n, cap;
    struct moe_mf_parse *x;
};

static enum moe_status lex_error(struct lexpr *e, const char *what)
{
    return moe_mf_error(e->x, e->x->flag, e->x->at, MOE_ERR_PARSE,
                        "%s: '%s' at character %d: %s (a pattern is an int or a list expression "
                        "such as \"([0]*3+[1]*58)\")",
                        e->x->flag, e->s, e->pos + 1, what);
}

static void lex_space(struct lexpr *e)
{
    while (e->pos < e->len && e->s[e->pos] == ' ') {
        e->pos++;
    }
}

static bool lex_int(struct lexpr *e, long *v)
{
    lex_space(e);
    int start = e->pos;
    *v = 0;
    while (e->pos < e->len && e->s[e->pos] >= '0' && e->s[e->pos] <= '9' && *v < 100000) {
        *v = *v * 10 + (e->s[e->pos++] - '0');
    }
    return e->pos > start;
}

static bool lex_eat(struct lexpr *e, char c)
{
    lex_space(e);
    if (e->pos < e->len && e->s[e->pos] == c) {
        e->pos++;
        return true;
    }
    return false;
}

/* Repeat out[start, n) so it appears k times in all. */
static enum moe_status lex_repeat(struct lexpr *e, int start, long k)
{
    long seg = e->n - start;
    if (k == 0) {
        e->n = start;
        return MOE_OK;
    }
    if (start + seg * k > e->cap) {
        return lex_error(e, "the pattern is longer than the 512 layers moefold supports");
    }
    for (long r = 1; r < k; r++) {
        memcpy(e->out + start + r * seg, e->out + start, (size_t)seg);
    }
    e->n = (int)(start + seg * k);
    return MOE_OK;
}

static enum moe_status lex_expr(struct lexpr *e, int depth);

static enum moe_status lex_factor(struct lexpr *e, int depth)
{
    if (depth > 16) {
        return lex_error(e, "nested too deeply");
    }
    if (lex_eat(e, '(')) {
        MOE_TRY(lex_expr(e, depth + 1));
        return lex_eat(e, ')') ? MOE_OK : lex_error(e, "expected ')'");
    }
    if (!lex_eat(e, '[')) {
        return lex_error(e, "expected '[' or '('");
    }
    if (lex_eat(e, ']')) {
        return MOE_OK;
    }
    do {
        long v = 0;
        if (!lex_int(e, &v)) {
            return lex_error(e, "expected 0 or 1");
        }
        if (v > 1) {
            return lex_error(e, "entries must be 0 or 1");
        }
        if (e->n >= e->cap) {
            return lex_error(e, "the pattern is longer than the 512 layers moefold supports");
        }
        e->out[e->n++] = (uint8_t)v;
    } while (lex_eat(e, ','));
    return lex_eat(e, ']') ? MOE_OK : lex_error(e, "expected ',' or ']'");
}

/* term := [INT '*'] factor ('*' INT)* */
static enum moe_status lex_term(struct lexpr *e, int depth)
{
    int start = e->n;
    long k = 1;
    lex_space(e);
    if (e->pos < e->len && e->s[e->pos] >= '0' && e->s[e->pos] <= '9') {
        (void)lex_int(e, &k);
        if (!lex_eat(e, '*')) {
            return lex_error(e, "expected '*' after a count");
        }
    }
    MOE_TRY(lex_factor(e, depth));
    MOE_TRY(lex_repeat(e, start, k));
    while (lex_eat(e, '*')) {
        if (!lex_int(e, &k)) {
            return lex_error(e, "expected a count after '*'");
        }
        MOE_TRY(lex_repeat(e, start, k));
    }
    return MOE_OK;
}

static enum moe_status lex_expr(struct lexpr *e, int depth)
{
    MOE_TRY(lex_term(e, depth));
    while (lex_eat(e, '+')) {
        MOE_TRY(lex_term(e, depth));
    }
    return MOE_OK;
}

/*
 * Evaluate a Megatron frequency value into out[L] (1 = set). An int N gives
 * out[i] = (i % N == 0) for the MoE pattern, or out[i] = ((i+1) % N != 0) for the window skip
 * pattern (Megatron: one full-attention layer after N-1 windowed ones).
 */
enum moe_status moe_mf_eval_pattern(
    struct moe_mf_parse *x, const char *s, bool window_rule, int num_layers, uint8_t *out)
{
    char buf[2048];
    size_t n = strnlen(s, sizeof(buf) - 1);
    memcpy(buf, s, n);
    buf[n] = '\0';
    /* A pattern pasted from a shell script may keep one pair of quotes. */
    if (n >= 2 && (buf[0] == '\'' || buf[0] == '"') && buf[n - 1] == buf[0]) {
        buf[n - 1] = '\0';
        memmove(buf, buf + 1, n - 1);
    }
    if (strpbrk(buf, "[(") == NULL) {
        int freq = 1;
        MOE_TRY(moe_mf_parse_int(x, buf, 1, MOE_MAX_LAYERS, &freq));
        for (int i = 0; i < num_layers; i++) {
            out[i] = window_rule ? (uint8_t)((i + 1) % freq != 0) : (uint8_t)(i % freq == 0);
        }
        return MOE_OK;
    }
    struct lexpr e = {.s = buf, .len = (int)strlen(buf), .out = out, .cap = MOE_MAX_LAYERS, .x = x};
    MOE_TRY(lex_expr(&e, 0));
    lex_space(&e);
    if (e.pos != e.len) {
        return lex_error(&e, "unexpected character");
    }
    if (e.n != num_layers) {
        return moe_mf_error(x, x->flag, x->at, MOE_ERR_INVALID,
                            "%s: the pattern has %d entries but the model has %d layers "
                            "(--num-layers); they must match",
                            x->flag, e.n, num_layers);
    }
    return MOE_OK;
}

/* ---- Writing --------------------------------------------------------------------------------- */

/* Append "[v]*n" runs of bits[from, from+count) joined by '+' to out. */
static void pattern_runs(const uint8_t *bits, int count, char *out, size_t len)
{
    size_t used = strlen(out);
    for (int i = 0; i < count;) {
        int j = i;
        while (j < count && bits[j] == bits[i]) {
            j++;
        }
        int w = (j - i == 1)
                    ? snprintf(out + used, len - used, "%s[%d]", i ? "+" : "", bits[i])
                    : snprintf(out + used, len - used, "%s[%d]*%d", i ? "+" : "", bits[i], j - i);
        used += (w > 0 && (size_t)w < len - used) ? (size_t)w : 0;
        i = j;
    }
}

/*
 * Text for a layer pattern bits[n]: an int N when the int rule reproduces it (MoE: i % N == 0;
 * window: (i+1) % N != 0), else the shortest periodic list expression.
 */
void moe_mf_pattern_text(const uint8_t *bits, int n, bool window_rule, char *out, size_t len)
{
    for (int f = 1; f <= n; f++) {
        bool ok = true;
        for (int i = 0; i < n && ok; i++) {
            uint8_t want = window_rule ? (uint8_t)((i + 1) % f != 0) : (uint8_t)(i % f == 0);
            ok = bits[i] == want;
        }
        if (ok) {
            (void)snprintf(out, len, "%d", f);
            return;
        }
    }
    int period = n;
    for (int p = 1; p < n; p++) {
        bool ok = n % p == 0;
        for (int i = p; i < n && ok; i++) {
            ok = bits[i] == bits[i % p];
        }
        if (ok) {
            period = p;
            break;
        }
    }
    (void)snprintf(out, len, "(");
    pattern_runs(bits, period, out, len);
    size_t used = strlen(out);
    if (n / period > 1) {
        (void)snprintf(out + used, len - used, ")*%d", n / period);
    } else {
        (void)snprintf(out + used, len - used, ")");
    }
}
