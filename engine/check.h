/*
 * Library-call checks for the engine (STYLE.md §4): one generic macro that compares a call's return
 * code with the library's success value and, on failure, prints the rank, host, file:line, the
 * call's text and the library's own message, then stops the job (MPI_Abort when MPI is up, so peers
 * do not hang; abort() otherwise). MOE_CHECK_MPI is the MPI instance; the engine's CUDA side adds
 * MOE_CHECK_CUDA / MOE_CHECK_NCCL with their error-string functions the same way (cuBLAS calls
 * live in kernels/cuda/, which has its own checks).
 *
 * These are for failures nobody can act on (a lost rank, a broken communicator). Anything a caller
 * can act on returns enum moe_status instead.
 */
#ifndef MOE_ENGINE_CHECK_H
#define MOE_ENGINE_CHECK_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
#define MOE_NORETURN [[noreturn]]
#else
#define MOE_NORETURN _Noreturn
#endif

/* Writes a library's message for code into buf[len] (always NUL-terminated). */
typedef void (*moe_eng_errstr_fn)(int code, char *buf, size_t len);

/* MPI_Error_string as a moe_eng_errstr_fn. */
void moe_eng_mpi_errstr(int code, char *buf, size_t len);

/*
 * Print "moefold: rank R on HOST: FILE:LINE: CALL failed: MESSAGE (code N)" to stderr and stop the
 * job: MPI_Abort(MPI_COMM_WORLD, 1) when MPI is initialised and not finalised, else abort().
 */
MOE_NORETURN void
moe_eng_check_fail(const char *call, int code, const char *message, const char *file, int line);

/* Stop the job with a formatted message (same prefix as moe_eng_check_fail). */
MOE_NORETURN void moe_eng_fatal(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Generic check: evaluates call once, compares with ok, reports through errstr. */
#define MOE_CHECK_LIB(call, ok, errstr)                                                            \
    do {                                                                                           \
        int moe_check_rc_ = (int)(call);                                                           \
        if (moe_check_rc_ != (int)(ok)) {                                                          \
            char moe_check_msg_[512];                                                              \
            (errstr)(moe_check_rc_, moe_check_msg_, sizeof(moe_check_msg_));                       \
            moe_eng_check_fail(#call, moe_check_rc_, moe_check_msg_, __FILE__, __LINE__);          \
        }                                                                                          \
    } while (0)

/* MPI calls return MPI_SUCCESS (0) on success. */
#define MOE_CHECK_MPI(call) MOE_CHECK_LIB(call, 0, moe_eng_mpi_errstr)

/*
 * CUDA runtime and NCCL calls of the engine (engine/device.c, engine/comm_nccl.c; only built with
 * the CUDA backend): cudaSuccess and ncclSuccess are 0. The message functions are defined where
 * those libraries are linked (cudaGetErrorString, ncclGetErrorString plus ncclGetLastError).
 */
void moe_eng_cuda_errstr(int code, char *buf, size_t len);
void moe_eng_nccl_errstr(int code, char *buf, size_t len);
#define MOE_CHECK_CUDA(call) MOE_CHECK_LIB(call, 0, moe_eng_cuda_errstr)
#define MOE_CHECK_NCCL(call) MOE_CHECK_LIB(call, 0, moe_eng_nccl_errstr)

#ifdef __cplusplus
}
#endif

#endif /* MOE_ENGINE_CHECK_H */
