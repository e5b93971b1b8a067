/*
 * Shared checks of the libFuzzer targets (tests/fuzz/fuzz_*.c, built and run by scripts/fuzz.sh).
 *
 * Every parser must keep three properties on any input, and a target abort()s (so libFuzzer saves
 * the input as a crash) when one breaks: a rejection is a known negative enum moe_status with a
 * non-empty message, and the message (or diag.source) names the file or flag it is about; an
 * acceptance survives a write and a read back unchanged (each target's round trip). Crashes,
 * leaks, undefined behaviour and hangs are caught by ASan, LSan, UBSan and libFuzzer's -timeout.
 *
 * Header-only (static functions) because each target is one translation unit. Not part of any
 * library; never included by project code.
 */
#ifndef MOE_TESTS_FUZZ_FUZZ_UTIL_H
#define MOE_TESTS_FUZZ_FUZZ_UTIL_H

#include "model/status.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* libFuzzer's entry points (defined by each target). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Report a broken property and abort, so libFuzzer keeps the input. */
static inline void fuzz_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static inline void fuzz_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    (void)fputs("fuzz property broken: ", stderr);
    (void)vfprintf(stderr, fmt, ap);
    (void)fputc('\n', stderr);
    va_end(ap);
    abort();
}

/*
 * Check a parser's status. Returns true for MOE_OK. For a rejection, checks that the status is a
 * known error code, that diag carries a message, and (when name is non-NULL) that the message or
 * diag->source contains name; then returns false.
 */
static inline bool fuzz_check_status(const char *what,
                                     enum moe_status st,
                                     const struct moe_diag *diag,
                                     const char *name)
{
    if (st == MOE_OK) {
        return true;
    }
    if (st < MOE_ERR_RUNTIME || st > MOE_ERR_INVALID) {
        fuzz_fail("%s returned unknown status %d", what, (int)st);
    }
    if (diag->message[0] == '\0') {
        fuzz_fail("%s rejected the input (%s) without a message", what, moe_status_str(st));
    }
    if (memchr(diag->message, '\0', sizeof(diag->message)) == NULL ||
        memchr(diag->source, '\0', sizeof(diag->source)) == NULL) {
        fuzz_fail("%s left an unterminated diag string", what);
    }
    if (name != NULL && strstr(diag->message, name) == NULL && strstr(diag->source, name) == NULL) {
        fuzz_fail("%s: message does not name \"%s\": source \"%s\", message \"%s\"", what, name,
                  diag->source, diag->message);
    }
    return false;
}

/* A NUL-terminated malloc'd copy of the input (NULL only when out of memory). */
static inline char *fuzz_text(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s != NULL) {
        if (size > 0) {
            memcpy(s, data, size);
        }
        s[size] = '\0';
    }
    return s;
}

/*
 * Write the input to a per-process scratch file (for the readers that take a path) in $TMPDIR or
 * /tmp; path receives its name. Returns false when the file cannot be written.
 */
static inline bool
fuzz_write_scratch(const char *tag, const uint8_t *data, size_t size, char *path, size_t len)
{
    const char *dir = getenv("TMPDIR");
    (void)snprintf(path, len, "%s/moefold-fuzz-%s-%ld.json", dir != NULL ? dir : "/tmp", tag,
                   (long)getpid());
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        return false;
    }
    size_t put = size > 0 ? fwrite(data, 1, size, f) : 0;
    bool ok = fclose(f) == 0 && put == size;
    return ok;
}

#endif /* MOE_TESTS_FUZZ_FUZZ_UTIL_H */
