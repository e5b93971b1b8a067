/*
 * Status names and diagnostics formatting. Pure string work: model/ does no I/O, so a broken
 * invariant aborts without printing (the expression and location stay on the stack for a debugger).
 */
#include "model/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *moe_status_str(enum moe_status status)
{
    switch (status) {
    case MOE_OK:
        return "ok";
    case MOE_ERR_INVALID:
        return "invalid value";
    case MOE_ERR_PARSE:
        return "parse error";
    case MOE_ERR_IO:
        return "I/O error";
    case MOE_ERR_NOMEM:
        return "out of memory";
    case MOE_ERR_INFEASIBLE:
        return "infeasible";
    case MOE_ERR_UNSUPPORTED:
        return "unsupported";
    case MOE_ERR_NOT_FOUND:
        return "not found";
    case MOE_ERR_RUNTIME:
        return "runtime error";
    }
    return "unknown status";
}

enum moe_status
moe_diag_vset(struct moe_diag *diag, enum moe_status status, const char *fmt, va_list args)
{
    if (diag != NULL && status != MOE_OK) {
        (void)vsnprintf(diag->message, sizeof(diag->message), fmt, args);
    }
    return status;
}

enum moe_status moe_diag_set(struct moe_diag *diag, enum moe_status status, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    enum moe_status ret = moe_diag_vset(diag, status, fmt, args);
    va_end(args);
    return ret;
}

void moe_diag_source(struct moe_diag *diag, const char *source)
{
    if (diag == NULL || source == NULL) {
        return;
    }
    (void)snprintf(diag->source, sizeof(diag->source), "%s", source);
}

void moe_assert_fail(const char *expr, const char *file, int line)
{
    /* Kept live for a debugger or core dump; model/ must not print. */
    volatile const char *keep_expr = expr;
    volatile const char *keep_file = file;
    volatile int keep_line = line;
    (void)keep_expr;
    (void)keep_file;
    (void)keep_line;
    abort();
}
