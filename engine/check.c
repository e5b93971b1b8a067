/*
 * Fatal-error reporting for library calls (engine/check.h): names the rank and host so a failure in
 * a 64-rank job can be found, then aborts the whole job through MPI when MPI is running.
 */
#include "engine/check.h"

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void moe_eng_mpi_errstr(int code, char *buf, size_t len)
{
    char msg[MPI_MAX_ERROR_STRING];
    int msg_len = 0;
    int initialised = 0;
    int finalised = 0;
    (void)MPI_Initialized(&initialised);
    (void)MPI_Finalized(&finalised);
    if (initialised && !finalised && MPI_Error_string(code, msg, &msg_len) == MPI_SUCCESS) {
        (void)snprintf(buf, len, "%.*s", msg_len, msg);
    } else {
        (void)snprintf(buf, len, "MPI error %d", code);
    }
}

/* "rank R on HOST" prefix; rank -1 when MPI is not running. */
static void where(char *buf, size_t len, int *mpi_up)
{
    int initialised = 0;
    int finalised = 0;
    (void)MPI_Initialized(&initialised);
    (void)MPI_Finalized(&finalised);
    *mpi_up = initialised && !finalised;
    int rank = -1;
    if (*mpi_up) {
        (void)MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    }
    char host[256] = "?";
    (void)gethostname(host, sizeof(host) - 1);
    (void)snprintf(buf, len, "rank %d on %s", rank, host);
}

_Noreturn static void stop(int mpi_up)
{
    (void)fflush(stdout);
    (void)fflush(stderr);
    if (mpi_up) {
        (void)MPI_Abort(MPI_COMM_WORLD, 1);
    }
    abort();
}

void moe_eng_check_fail(const char *call, int code, const char *message, const char *file, int line)
{
    char who[320];
    int mpi_up = 0;
    where(who, sizeof(who), &mpi_up);
    (void)fprintf(stderr, "moefold: %s: %s:%d: %s failed: %s (code %d)\n", who, file, line, call,
                  message, code);
    stop(mpi_up);
}

void moe_eng_fatal(const char *file, int line, const char *fmt, ...)
{
    char who[320];
    int mpi_up = 0;
    where(who, sizeof(who), &mpi_up);
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap); /* NOLINT(clang-analyzer-valist.Uninitialized):
                                                   ap is va_start'ed above */
    va_end(ap);
    (void)fprintf(stderr, "moefold: %s: %s:%d: %s\n", who, file, line, msg);
    stop(mpi_up);
}
