/*
 * Line reading and launcher-prefix stripping for program output (cli/log_text.h).
 */
#include "cli/log_text.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *moe_log_find(const char *s, size_t n, const char *needle)
{
    size_t m = strlen(needle);
    if (m == 0 || m > n) {
        return NULL;
    }
    for (size_t i = 0; i + m <= n; i++) {
        if (s[i] == needle[0] && memcmp(s + i, needle, m) == 0) {
            return s + i;
        }
    }
    return NULL;
}

bool moe_log_starts_with(const char *s, size_t n, const char *p)
{
    size_t m = strlen(p);
    return n >= m && memcmp(s, p, m) == 0;
}

/* Number at s (at most n characters, leading spaces skipped); *used gets the characters read. */
bool moe_log_number(const char *s, size_t n, double *v, size_t *used)
{
    size_t i = 0;
    while (i < n && s[i] == ' ') {
        i++;
    }
    char buf[64];
    size_t k = 0;
    while (i + k < n && k + 1 < sizeof(buf) &&
           (isdigit((unsigned char)s[i + k]) || strchr("+-.eEnaif", s[i + k]) != NULL)) {
        buf[k] = s[i + k];
        k++;
    }
    buf[k] = '\0';
    if (k == 0) {
        return false;
    }
    char *end = NULL;
    *v = strtod(buf, &end);
    if (end == buf) {
        return false;
    }
    if (used != NULL) {
        *used = i + (size_t)(end - buf);
    }
    return true;
}

/* Value after `key` in s[n]: the number following it. */
bool moe_log_field_number(const char *s, size_t n, const char *key, double *v)
{
    const char *p = moe_log_find(s, n, key);
    if (p == NULL) {
        return false;
    }
    size_t off = (size_t)(p - s) + strlen(key);
    return moe_log_number(s + off, n - off, v, NULL);
}

bool moe_log_long(const char *s, size_t n, long *v, size_t *used)
{
    size_t i = 0;
    while (i < n && s[i] == ' ') {
        i++;
    }
    size_t start = i;
    long x = 0;
    while (i < n && isdigit((unsigned char)s[i]) && x < 1000000000L) {
        x = x * 10 + (s[i] - '0');
        i++;
    }
    if (i == start) {
        return false;
    }
    *v = x;
    if (used != NULL) {
        *used = i;
    }
    return true;
}

size_t moe_log_skip_digits(const char *s, size_t n, size_t i)
{
    while (i < n && isdigit((unsigned char)s[i])) {
        i++;
    }
    return i;
}

/* "YYYY-MM-DD[T ]HH:MM:SS[.frac][Z|+hh:mm] " at s: its length with the trailing space, or 0. */
static size_t iso_stamp(const char *s, size_t n)
{
    static const char shape[] = "dddd-dd-dd?dd:dd:dd";
    size_t m = sizeof(shape) - 1;
    if (n < m + 1) {
        return 0;
    }
    for (size_t i = 0; i < m; i++) {
        bool ok = shape[i] == 'd'   ? isdigit((unsigned char)s[i])
                  : shape[i] == '?' ? (s[i] == 'T' || s[i] == ' ')
                                    : s[i] == shape[i];
        if (!ok) {
            return 0;
        }
    }
    size_t i = m;
    if (i < n && (s[i] == '.' || s[i] == ',')) {
        i = moe_log_skip_digits(s, n, i + 1);
    }
    if (i < n && s[i] == 'Z') {
        i++;
    } else if (i < n && (s[i] == '+' || s[i] == '-') && i + 1 < n &&
               isdigit((unsigned char)s[i + 1])) {
        i = moe_log_skip_digits(s, n, i + 1);
        if (i < n && s[i] == ':') {
            i = moe_log_skip_digits(s, n, i + 1);
        }
    }
    return i < n && s[i] == ' ' ? i + 1 : 0;
}

/* One known prefix at s: its length, or 0. */
static size_t one_prefix(const char *s, size_t n)
{
    size_t i = 0;
    if (moe_log_starts_with(s, n, "[default") ||
        moe_log_starts_with(s, n, "[rank")) { /* torchrun --tee */
        i = moe_log_starts_with(s, n, "[default") ? 8 : 5;
        size_t j = moe_log_skip_digits(s, n, i);
        return j > i && j + 1 < n && s[j] == ']' && s[j + 1] == ':' ? j + 2 : 0;
    }
    if (n > 0 && s[0] == '[' && n > 1 && isdigit((unsigned char)s[1])) { /* mpirun --tag-output */
        size_t j = moe_log_skip_digits(s, n, 1);
        if (j < n && s[j] == ',') {
            size_t k = moe_log_skip_digits(s, n, j + 1);
            if (moe_log_starts_with(s + k, n - k, "]<stdout>:") ||
                moe_log_starts_with(s + k, n - k, "]<stderr>:")) {
                return k + 10;
            }
        }
    }
    if (moe_log_starts_with(s, n,
                            "[NeMo ")) { /* NeMo's logger: [NeMo I 2025-05-20 11:02:03 file:123] */
        const char *close = memchr(s, ']', n);
        if (close != NULL) {
            size_t k = (size_t)(close - s) + 1;
            return k < n && s[k] == ' ' ? k + 1 : k;
        }
    }
    size_t stamp = iso_stamp(s, n); /* kubectl logs --timestamps, collectors */
    if (stamp > 0) {
        return stamp;
    }
    while (i < n && s[i] == ' ') { /* srun --label: "  0: " */
        i++;
    }
    size_t j = moe_log_skip_digits(s, n, i);
    if (j > i && j + 1 < n && s[j] == ':' && s[j + 1] == ' ') {
        return j + 2;
    }
    return 0;
}

size_t moe_log_skip_prefixes(const char *s, size_t n)
{
    size_t off = 0;
    for (int k = 0; k < 4; k++) {
        size_t p = one_prefix(s + off, n - off);
        if (p == 0) {
            break;
        }
        off += p;
    }
    return off;
}

/* Next line of text[len] from *pos ('\n', "\r\n" and a lone '\r' end a line). */
bool moe_log_next_line(
    const char *text, size_t len, size_t *pos, int *line_no, struct moe_log_span *out)
{
    if (*pos >= len) {
        return false;
    }
    size_t start = *pos;
    size_t i = start;
    while (i < len && text[i] != '\n' && text[i] != '\r') {
        i++;
    }
    out->s = text + start;
    out->n = i - start;
    out->line = *line_no;
    if (i < len && text[i] == '\r') {
        i++;
        if (i < len && text[i] == '\n') {
            i++;
            (*line_no)++;
        }
    } else if (i < len) {
        i++;
        (*line_no)++;
    }
    *pos = i;
    return true;
}
