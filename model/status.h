/*
 * Status codes, diagnostics and the few control macros every module shares.
 *
 * Anything a caller can act on (bad config, infeasible plan, parse error, missing file) returns an
 * enum moe_status; results leave through pointers. Parsers and validators fill a caller-owned
 * struct moe_diag with a message naming the file, field and problem (and a line/column when the
 * input is text). There is no global "last error". This header does no I/O and allocates nothing.
 */
#ifndef MOE_MODEL_STATUS_H
#define MOE_MODEL_STATUS_H

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define MOE_NODISCARD                __attribute__((warn_unused_result))
#define MOE_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#else
#define MOE_NODISCARD
#define MOE_PRINTF(fmt_idx, arg_idx)
#endif

enum moe_status {
    MOE_OK = 0,
    MOE_ERR_INVALID = -1,     /* a value is out of range or inconsistent with another */
    MOE_ERR_PARSE = -2,       /* malformed text: JSON, flag value, layout string */
    MOE_ERR_IO = -3,          /* a file could not be read or written */
    MOE_ERR_NOMEM = -4,       /* an allocation failed */
    MOE_ERR_INFEASIBLE = -5,  /* well-formed but impossible: layout does not divide, does not fit */
    MOE_ERR_UNSUPPORTED = -6, /* valid in general, not on this cluster/backend/build */
    MOE_ERR_NOT_FOUND = -7,   /* a named preset, cluster or key does not exist */
    MOE_ERR_RUNTIME = -8,     /* a run failed: lost rank, NaN, communication error */
};

/* Diagnostics filled by parsers and validators; caller-owned, zero-initialise before use. */
struct moe_diag {
    char source[128];  /* file name or "--flag" the message is about; "" if none */
    int line;          /* 1-based line in source, 0 if not applicable */
    int column;        /* 1-based column in source, 0 if not applicable */
    char message[512]; /* human-readable: what is wrong and, when known, what to change */
};

/* Short stable name of a status ("invalid", "parse error", ...); never NULL. */
const char *moe_status_str(enum moe_status status);

/*
 * Record a message in diag (if diag is non-NULL) and return status, so a validator can write
 * `return moe_diag_set(diag, MOE_ERR_INVALID, "tp=%d does not divide heads=%d", tp, heads);`.
 * Keeps the first message when called twice only if the second is MOE_OK (a no-op).
 */
enum moe_status moe_diag_set(struct moe_diag *diag, enum moe_status status, const char *fmt, ...)
    MOE_PRINTF(3, 4);
enum moe_status
moe_diag_vset(struct moe_diag *diag, enum moe_status status, const char *fmt, va_list args)
    MOE_PRINTF(3, 0);

/* Set diag->source (truncating) without touching the message. NULL diag is a no-op. */
void moe_diag_source(struct moe_diag *diag, const char *source);

/* Propagate a non-OK status to the caller. Use only where nothing needs cleanup. */
#define MOE_TRY(expr)                                                                              \
    do {                                                                                           \
        enum moe_status moe_try_status_ = (expr);                                                  \
        if (moe_try_status_ != MOE_OK) {                                                           \
            return moe_try_status_;                                                                \
        }                                                                                          \
    } while (0)

/* Broken-invariant check, on in release builds; never for bad input. */
void moe_assert_fail(const char *expr, const char *file, int line);
#define MOE_ASSERT(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            moe_assert_fail(#cond, __FILE__, __LINE__);                                            \
        }                                                                                          \
    } while (0)

#define MOE_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#ifdef __cplusplus
}
#endif

#endif /* MOE_MODEL_STATUS_H */
