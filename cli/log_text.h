/*
 * Reading program output as it lands in log files: lines of a text that may end in '\n', "\r\n" or
 * a lone '\r' (progress bars), spans that are not NUL-terminated, and the prefixes launchers and
 * collectors put in front of every line a program prints:
 *
 *   [default0]:  [rank3]:            torchrun --tee / --local-ranks-filter
 *    0:  12:                         srun --label (task number, right-aligned)
 *   [1,0]<stdout>:                   mpirun --tag-output
 *   2026-03-02T10:11:12.345678Z      kubectl logs --timestamps, log collectors (RFC 3339)
 *   [NeMo I 2025-05-20 11:02:03 nemo_logging:393]   NeMo's logger
 *
 * Used by the Megatron-LM log reader and the nccl-tests / DeepEP readers. No I/O, no allocation.
 */
#ifndef MOE_CLI_LOG_TEXT_H
#define MOE_CLI_LOG_TEXT_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One line of a text: s[n] without its line end; line = 1-based number ('\n' count). */
struct moe_log_span {
    const char *s;
    size_t n;
    int line;
};

/* Next line of text[len] from *pos (advanced); *line_no counts '\n'. False at the end. */
bool moe_log_next_line(
    const char *text, size_t len, size_t *pos, int *line_no, struct moe_log_span *out);

/* Characters of launcher/collector prefixes at the start of s[n] (up to four, see above). */
size_t moe_log_skip_prefixes(const char *s, size_t n);

/* First occurrence of needle in s[n], or NULL. */
const char *moe_log_find(const char *s, size_t n, const char *needle);

/* s[n] starts with p. */
bool moe_log_starts_with(const char *s, size_t n, const char *p);

/* The number after `key` in s[n] (leading spaces skipped); false when absent or not a number. */
bool moe_log_field_number(const char *s, size_t n, const char *key, double *v);

/* A number at s[n] after leading spaces; *used (may be NULL) gets the characters read. */
bool moe_log_number(const char *s, size_t n, double *v, size_t *used);

/* First index at or after i in s[n] that is not a digit. */
size_t moe_log_skip_digits(const char *s, size_t n, size_t i);

/* A non-negative integer at s[n] after leading spaces (at most 10^9). */
bool moe_log_long(const char *s, size_t n, long *v, size_t *used);

#ifdef __cplusplus
}
#endif

#endif /* MOE_CLI_LOG_TEXT_H */
