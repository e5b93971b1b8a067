/*
 * Child-process helpers of the reliability tests: start a program with its stdout and stderr
 * captured through a non-blocking pipe, pump its output while waiting with a deadline, kill it,
 * and read its exit status, terminating signal and peak resident memory (wait4's rusage of that
 * child alone). Also finds the rank processes an `mpirun` started (its children whose environment
 * holds OMPI_COMM_WORLD_RANK), for the engine fault tests.
 *
 * Header-only (static functions) because each test binary is one translation unit; the includer
 * defines _DEFAULT_SOURCE (wait4) before any system header.
 */
#ifndef MOE_TESTS_RELIABILITY_PROC_UTIL_H
#define MOE_TESTS_RELIABILITY_PROC_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REL_MAX_ARGS  64
#define REL_OUT_BYTES (256 * 1024)
#define REL_ENV_BYTES (1 << 20) /* largest /proc/<pid>/environ read */

struct rel_proc {
    pid_t pid;
    int fd;                  /* read end of the output pipe, -1 once at end of file */
    bool done;               /* reaped */
    int exit_code;           /* exit status, -1 when killed by a signal */
    int signal;              /* terminating signal, 0 if none */
    long maxrss_kb;          /* peak resident set of the child */
    double start_s;          /* monotonic clock at start */
    double end_s;            /* monotonic clock when reaped */
    size_t used;             /* bytes in out */
    char out[REL_OUT_BYTES]; /* stdout + stderr, NUL-terminated, truncated */
};

static inline double rel_now_s(void)
{
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline void rel_sleep_ms(long ms)
{
    const struct timespec pause = {ms / 1000, (ms % 1000) * 1000000L};
    (void)nanosleep(&pause, NULL);
}

/* Start argv[0] (a path, or a name looked up in PATH) with argv; false when fork fails. */
static inline bool rel_spawn(const char *const *argv, struct rel_proc *p)
{
    memset(p, 0, sizeof(*p));
    p->fd = -1;
    int fds[2];
    if (pipe(fds) != 0) {
        return false;
    }
    p->start_s = rel_now_s();
    p->pid = fork();
    if (p->pid < 0) {
        (void)close(fds[0]);
        (void)close(fds[1]);
        return false;
    }
    if (p->pid == 0) {
        (void)setpgid(0, 0); /* own process group: a kill of the group reaches mpirun's ranks */
        (void)dup2(fds[1], STDOUT_FILENO);
        (void)dup2(fds[1], STDERR_FILENO);
        (void)close(fds[0]);
        (void)close(fds[1]);
        char *exec_argv[REL_MAX_ARGS + 1]; /* execvp's type; the strings are not written */
        size_t n = 0;
        while (n < REL_MAX_ARGS && argv[n] != NULL) {
            n++;
        }
        memcpy(exec_argv, argv, n * sizeof(argv[0]));
        exec_argv[n] = NULL;
        execvp(argv[0], exec_argv);
        fprintf(stderr, "exec %s failed: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    (void)close(fds[1]);
    (void)fcntl(fds[0], F_SETFL, O_NONBLOCK);
    p->fd = fds[0];
    return true;
}

/* Read whatever output is available. */
static inline void rel_pump(struct rel_proc *p)
{
    char buf[4096];
    while (p->fd >= 0) {
        ssize_t n = read(p->fd, buf, sizeof(buf));
        if (n > 0) {
            size_t room = sizeof(p->out) - 1 - p->used;
            size_t take = (size_t)n < room ? (size_t)n : room;
            memcpy(p->out + p->used, buf, take);
            p->used += take;
            p->out[p->used] = '\0';
            continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            (void)close(p->fd);
            p->fd = -1;
        }
        return;
    }
}

/* Reap the child if it has exited (non-blocking); true once reaped. */
static inline bool rel_poll(struct rel_proc *p)
{
    rel_pump(p);
    if (p->done) {
        return true;
    }
    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof(ru));
    if (wait4(p->pid, &status, WNOHANG, &ru) != p->pid) {
        return false;
    }
    p->done = true;
    p->end_s = rel_now_s();
    p->maxrss_kb = ru.ru_maxrss;
    p->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    p->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    for (int i = 0; i < 100 && p->fd >= 0; i++) { /* output still in the pipe */
        rel_pump(p);
        if (p->fd >= 0) {
            rel_sleep_ms(1);
        }
    }
    return true;
}

/* Wait until the child exits or timeout_s passes (then SIGKILL its group); true if it exited. */
static inline bool rel_wait(struct rel_proc *p, double timeout_s)
{
    double t0 = rel_now_s();
    while (!rel_poll(p)) {
        if (rel_now_s() - t0 > timeout_s) {
            (void)kill(-p->pid, SIGKILL);
            (void)kill(p->pid, SIGKILL);
            while (!rel_poll(p)) {
                rel_sleep_ms(2);
            }
            return false;
        }
        rel_sleep_ms(2);
    }
    return true;
}

/* Wait until the output contains `text` at least `count` times; false at timeout or exit. */
static inline bool
rel_wait_output(struct rel_proc *p, const char *text, int count, double timeout_s)
{
    double t0 = rel_now_s();
    for (;;) {
        bool exited = rel_poll(p);
        int seen = 0;
        for (const char *s = strstr(p->out, text); s != NULL; s = strstr(s + 1, text)) {
            seen++;
        }
        if (seen >= count) {
            return true;
        }
        if (exited || rel_now_s() - t0 > timeout_s) {
            return false;
        }
        rel_sleep_ms(5);
    }
}

/* Parent pid of process pid from /proc (-1 if gone). */
static inline pid_t rel_parent_of(pid_t pid)
{
    char path[64];
    (void)snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return -1;
    }
    char buf[1024];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    (void)fclose(f);
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')'); /* the command name may hold spaces */
    char state = 0;
    long ppid = -1;
    if (rp == NULL || sscanf(rp + 1, " %c %ld", &state, &ppid) != 2) {
        return -1;
    }
    return (pid_t)ppid;
}

/* Whether process pid's environment holds the string var ("NAME=value"). */
static inline bool rel_env_has(pid_t pid, const char *var)
{
    char path[64];
    (void)snprintf(path, sizeof(path), "/proc/%ld/environ", (long)pid);
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return false;
    }
    size_t cap = REL_ENV_BYTES;
    char *buf = malloc(cap);
    bool found = false;
    if (buf != NULL) {
        size_t n = fread(buf, 1, cap - 1, f);
        buf[n] = '\0';
        for (size_t i = 0; i < n && !found; i += strlen(buf + i) + 1) {
            found = strcmp(buf + i, var) == 0;
        }
        free(buf);
    }
    (void)fclose(f);
    return found;
}

/* The pid of MPI rank `rank` among the descendants of launcher (up to two levels), or -1. */
static inline pid_t rel_find_rank(pid_t launcher, int rank)
{
    char want[64];
    (void)snprintf(want, sizeof(want), "OMPI_COMM_WORLD_RANK=%d", rank);
    DIR *d = opendir("/proc");
    if (d == NULL) {
        return -1;
    }
    pid_t found = -1;
    for (struct dirent *e = readdir(d); e != NULL && found < 0; e = readdir(d)) {
        char *end = NULL;
        long pid = strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0') {
            continue;
        }
        pid_t parent = rel_parent_of((pid_t)pid);
        bool below = parent == launcher || (parent > 1 && rel_parent_of(parent) == launcher);
        if (below && rel_env_has((pid_t)pid, want)) {
            found = (pid_t)pid;
        }
    }
    (void)closedir(d);
    return found;
}

/* Whether pid still runs (a zombie counts as gone). */
static inline bool rel_alive(pid_t pid)
{
    char path[64];
    (void)snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return false;
    }
    char buf[512];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    (void)fclose(f);
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')');
    return rp != NULL && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
}

#endif /* MOE_TESTS_RELIABILITY_PROC_UTIL_H */
