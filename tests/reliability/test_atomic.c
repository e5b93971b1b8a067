/*
 * Atomic outputs (issue 7): moe_file_write_atomic, moe_json_write_file and moe_plan_write must
 * return MOE_ERR_IO with a message naming the file and the cause when the write cannot happen,
 * keep the previous file byte for byte, and leave no temporary behind; a writer killed with
 * SIGKILL at any point must leave the destination either the complete old or the complete new
 * file, never a torn one.
 *
 * Failure modes, each run in a forked child (the writers see a fresh process state):
 *   missing folder      the destination's folder does not exist (ENOENT);
 *   read-only folder    chmod 0555, and when running as root (CI) the child drops to uid/gid
 *                       65534 first, since root ignores folder permissions (EACCES);
 *   full disk, emulated the temporary's name is a symlink to /dev/full, so every write fails with
 *                       ENOSPC (works unprivileged);
 *   full disk, real     a 64 KiB tmpfs, filled, in a private mount namespace (needs
 *                       CAP_SYS_ADMIN: skipped with a note where unshare/mount are refused);
 *   read-only fs, real  the same tmpfs remounted read-only (EROFS; same privilege).
 * The kill test writes KILL_FILE_BYTES through moe_file_write_atomic in a child and SIGKILLs it
 * when the temporary reaches a chosen size (0% to 95% of the file), then after random delays
 * spread over 1.2 times one whole write (so some kills land after the rename).
 */
#define _GNU_SOURCE 1 /* unshare, mount namespaces */

#include "model/config.h"
#include "model/layout.h"
#include "tests/test_util.h"
#include "topologies/json_util.h"
#include "topologies/plan_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#define OLD_TEXT        "{\"previous\": \"file\", \"must\": \"survive\"}\n"
#define PAYLOAD_BYTES   (256 * 1024) /* more than the 64 KiB tmpfs holds */
#define TMPFS_OPTS      "size=64k,mode=0755"
#define NOBODY_ID       65534 /* Debian's nobody/nogroup */
#define KILL_FILE_BYTES (16L * 1024 * 1024)
#define KILL_STEPS      20 /* kill at 0%, 5%, ..., 95% of the temporary */
#define KILL_RANDOM     10 /* then after random delays (see above) */
#define CHILD_SKIP      3  /* child exit status: environment not available */

enum writer {
    WRITE_RAW,  /* moe_file_write_atomic */
    WRITE_JSON, /* moe_json_write_file */
    WRITE_PLAN, /* moe_plan_write */
    NUM_WRITERS,
};
static const char *const writer_names[NUM_WRITERS] = {"moe_file_write_atomic",
                                                      "moe_json_write_file", "moe_plan_write"};

enum failure {
    FAIL_MISSING_DIR,
    FAIL_READONLY_DIR,
    FAIL_FULL_DEVFULL,
    FAIL_FULL_TMPFS,
    FAIL_READONLY_FS,
};

/* What the child reports back through a pipe. */
struct outcome {
    int status;        /* the writer's enum moe_status */
    bool kept;         /* the previous file is byte-identical (or, missing folder: still absent) */
    bool no_litter;    /* no "*.tmp.*" file left in the folder */
    char message[512]; /* diag.message */
    char expect[64];   /* strerror text the message should contain */
};

/* A resolved plan (DeepSeek-V3 on 1024 GPUs, the planner's B5 layout) with a bulky prediction. */
static enum moe_status write_plan(const char *path, struct moe_diag *diag)
{
    struct moe_plan *p = malloc(sizeof(*p));
    if (p == NULL) {
        return MOE_ERR_NOMEM;
    }
    moe_plan_init(p);
    enum moe_status st = moe_cfg_preset("deepseek-v3", &p->model, diag);
    (void)snprintf(p->cluster, sizeof(p->cluster), "dgx-h100");
    p->layout.num_gpus = 1024;
    p->layout.pp = 16;
    p->layout.vpp = 2;
    p->layout.ep = 64;
    p->layout.gbs = 8192;
    if (st == MOE_OK) {
        st = moe_layout_parse_pp_string("Et|(tt|)*30mL", &p->model, &p->layout, diag);
    }
    if (st == MOE_OK) {
        st = moe_layout_resolve(&p->model, NULL, &p->options, &p->layout, diag);
    }
    cJSON *pred = cJSON_CreateObject();
    char *bulk = malloc(PAYLOAD_BYTES + 1);
    if (st == MOE_OK && (pred == NULL || bulk == NULL)) {
        st = MOE_ERR_NOMEM;
    }
    if (st == MOE_OK) {
        memset(bulk, 'p', PAYLOAD_BYTES);
        bulk[PAYLOAD_BYTES] = '\0';
        (void)cJSON_AddStringToObject(pred, "note", bulk);
        st = moe_plan_write(path, p, pred, diag);
    }
    free(bulk);
    cJSON_Delete(pred);
    free(p);
    return st;
}

static enum moe_status run_writer(enum writer w, const char *path, struct moe_diag *diag)
{
    char *bulk = malloc(PAYLOAD_BYTES + 1);
    if (bulk == NULL) {
        return MOE_ERR_NOMEM;
    }
    memset(bulk, 'n', PAYLOAD_BYTES);
    bulk[PAYLOAD_BYTES] = '\0';
    enum moe_status st = MOE_ERR_INVALID;
    if (w == WRITE_RAW) {
        st = moe_file_write_atomic(path, bulk, PAYLOAD_BYTES, diag);
    } else if (w == WRITE_JSON) {
        cJSON *o = cJSON_CreateObject();
        st = o != NULL && cJSON_AddStringToObject(o, "new", bulk) != NULL
                 ? moe_json_write_file(path, o, diag)
                 : MOE_ERR_NOMEM;
        cJSON_Delete(o);
    } else {
        st = write_plan(path, diag);
    }
    free(bulk);
    return st;
}

static bool file_equals(const char *path, const char *text)
{
    char buf[256];
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return false;
    }
    size_t n = fread(buf, 1, sizeof(buf), f);
    (void)fclose(f);
    return n == strlen(text) && memcmp(buf, text, n) == 0;
}

static bool dir_has_litter(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        return false;
    }
    bool litter = false;
    for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
        litter = litter || strstr(e->d_name, ".tmp.") != NULL;
    }
    (void)closedir(d);
    return litter;
}

static bool put_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        return false;
    }
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

/* Private mount namespace with a 64 KiB tmpfs on dir; false when not permitted. */
static bool mount_small_tmpfs(const char *dir)
{
    return unshare(CLONE_NEWNS) == 0 && mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
           mount("moefold-test", dir, "tmpfs", 0, TMPFS_OPTS) == 0;
}

/* Fill the file system holding dir (a filler file written until ENOSPC). */
static void fill_up(const char *dir)
{
    char path[512];
    (void)snprintf(path, sizeof(path), "%s/filler", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        return;
    }
    char block[4096];
    memset(block, 'f', sizeof(block));
    while (write(fd, block, sizeof(block)) > 0) {
    }
    (void)close(fd);
}

/* Child side: set up the failure, run the writer, inspect, report. Never returns. */
static void child_run(enum writer w, enum failure f, const char *dir, int report_fd)
{
    struct outcome out;
    memset(&out, 0, sizeof(out));
    char path[512];
    (void)snprintf(path, sizeof(path), "%s/out.json", dir);
    int err = 0;
    switch (f) {
    case FAIL_MISSING_DIR:
        (void)snprintf(path, sizeof(path), "%s/no/such/folder/out.json", dir);
        err = ENOENT;
        break;
    case FAIL_READONLY_DIR:
        if (chmod(dir, 0555) != 0 ||
            (geteuid() == 0 &&
             (setgroups(0, NULL) != 0 || setgid(NOBODY_ID) != 0 || setuid(NOBODY_ID) != 0))) {
            _exit(CHILD_SKIP);
        }
        err = EACCES;
        break;
    case FAIL_FULL_DEVFULL: {
        char tmp[600];
        (void)snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
        if (symlink("/dev/full", tmp) != 0) {
            _exit(CHILD_SKIP);
        }
        err = ENOSPC;
        break;
    }
    case FAIL_FULL_TMPFS:
    case FAIL_READONLY_FS:
        if (!mount_small_tmpfs(dir) || !put_file(path, OLD_TEXT)) {
            _exit(CHILD_SKIP);
        }
        if (f == FAIL_FULL_TMPFS) {
            fill_up(dir);
            err = ENOSPC;
        } else {
            if (mount("moefold-test", dir, "tmpfs", MS_REMOUNT | MS_RDONLY, TMPFS_OPTS) != 0) {
                _exit(CHILD_SKIP);
            }
            err = EROFS;
        }
        break;
    }
    (void)snprintf(out.expect, sizeof(out.expect), "%s", strerror(err));
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    out.status = run_writer(w, path, &diag);
    (void)snprintf(out.message, sizeof(out.message), "%s", diag.message);
    out.kept = f == FAIL_MISSING_DIR ? access(path, F_OK) != 0 : file_equals(path, OLD_TEXT);
    out.no_litter = !dir_has_litter(dir);
    ssize_t put = write(report_fd, &out, sizeof(out));
    _exit(put == (ssize_t)sizeof(out) ? 0 : 1);
}

/* Make a fresh folder holding the previous file; returns false on failure. */
static bool fresh_dir(char *dir, size_t len)
{
    const char *tmp = getenv("TMPDIR");
    (void)snprintf(dir, len, "%s/moefold-rel-atomic-XXXXXX", tmp != NULL ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL || chmod(dir, 0755) != 0) {
        return false;
    }
    char path[512];
    (void)snprintf(path, sizeof(path), "%s/out.json", dir);
    return put_file(path, OLD_TEXT);
}

static void remove_dir(const char *dir)
{
    (void)chmod(dir, 0755);
    DIR *d = opendir(dir);
    if (d != NULL) {
        for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
                char p[600];
                (void)snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
                (void)unlink(p);
            }
        }
        (void)closedir(d);
    }
    (void)rmdir(dir);
}

/* Run one writer under one failure; returns false when the environment was not available. */
static bool check_failure(enum writer w, enum failure f)
{
    char dir[256];
    assert_true(fresh_dir(dir, sizeof(dir)));
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        (void)close(fds[0]);
        child_run(w, f, dir, fds[1]);
    }
    (void)close(fds[1]);
    struct outcome out;
    memset(&out, 0, sizeof(out));
    ssize_t got = read(fds[0], &out, sizeof(out));
    (void)close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    char path[512];
    (void)snprintf(path, sizeof(path), "%s/out.json", dir);
    /* Outside the child's mount namespace the original file is untouched in every case. */
    bool outside_kept = file_equals(path, OLD_TEXT);
    remove_dir(dir);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == CHILD_SKIP) {
        return false;
    }
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(got, (ssize_t)sizeof(out));
    if (out.status != MOE_ERR_IO || !out.kept || !out.no_litter || !outside_kept ||
        strstr(out.message, "out.json") == NULL || strstr(out.message, out.expect) == NULL) {
        fail_msg("%s, failure %d: status %d, previous kept %d, no litter %d, message \"%s\" "
                 "(expected it to name out.json and \"%s\")",
                 writer_names[w], (int)f, out.status, out.kept, out.no_litter, out.message,
                 out.expect);
    }
    return true;
}

static void test_missing_folder(void **state)
{
    (void)state;
    for (int w = 0; w < NUM_WRITERS; w++) {
        assert_true(check_failure((enum writer)w, FAIL_MISSING_DIR));
    }
}

static void test_readonly_folder(void **state)
{
    (void)state;
    for (int w = 0; w < NUM_WRITERS; w++) {
        assert_true(check_failure((enum writer)w, FAIL_READONLY_DIR));
    }
}

static void test_full_disk_devfull(void **state)
{
    (void)state;
    for (int w = 0; w < NUM_WRITERS; w++) {
        assert_true(check_failure((enum writer)w, FAIL_FULL_DEVFULL));
    }
}

static void test_real_tmpfs(void **state)
{
    (void)state;
    int ran = 0;
    for (int w = 0; w < NUM_WRITERS; w++) {
        ran += check_failure((enum writer)w, FAIL_FULL_TMPFS);
        ran += check_failure((enum writer)w, FAIL_READONLY_FS);
    }
    if (ran == 0) {
        printf("# skipped: no CAP_SYS_ADMIN to mount a tmpfs (the emulated cases above ran)\n");
        skip();
    }
    assert_int_equal(ran, 2 * NUM_WRITERS);
}

/* Byte i of the new file: a pattern that a torn or shifted copy cannot match. */
static char new_byte(long i)
{
    return (char)('a' + (i * 7 + i / 4096) % 26);
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* The destination is exactly the old file or exactly the new one. */
static int dest_state(const char *path)
{
    if (file_equals(path, OLD_TEXT)) {
        return 0;
    }
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return -1;
    }
    long i = 0;
    int c;
    bool same = true;
    while ((c = fgetc(f)) != EOF && same) {
        same = (char)c == new_byte(i++);
    }
    (void)fclose(f);
    return same && i == KILL_FILE_BYTES ? 1 : -1;
}

static void test_killed_writer(void **state)
{
    (void)state;
    char dir[256];
    assert_true(fresh_dir(dir, sizeof(dir)));
    char path[512];
    (void)snprintf(path, sizeof(path), "%s/out.json", dir);
    char *data = malloc(KILL_FILE_BYTES);
    assert_non_null(data);
    for (long i = 0; i < KILL_FILE_BYTES; i++) {
        data[i] = new_byte(i);
    }
    /* How long one whole write takes here (fsync included), to spread the random kills over. */
    struct timespec t0;
    struct timespec t1;
    (void)clock_gettime(CLOCK_MONOTONIC, &t0);
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_file_write_atomic(path, data, KILL_FILE_BYTES, &diag), MOE_OK);
    (void)clock_gettime(CLOCK_MONOTONIC, &t1);
    long whole_us = (t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000;
    int seen[2] = {0, 0};
    unsigned seed = 7;
    for (int k = 0; k < KILL_STEPS + KILL_RANDOM; k++) {
        assert_true(put_file(path, OLD_TEXT));
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            struct moe_diag child_diag;
            memset(&child_diag, 0, sizeof(child_diag));
            _exit(moe_file_write_atomic(path, data, KILL_FILE_BYTES, &child_diag) == MOE_OK ? 0
                                                                                            : 1);
        }
        char tmp[600];
        (void)snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)pid);
        if (k < KILL_STEPS) {
            long target = KILL_FILE_BYTES / KILL_STEPS * k;
            int status = 0;
            /* Wait until the temporary holds `target` bytes (or the writer is done). */
            while (file_size(tmp) < target && waitpid(pid, &status, WNOHANG) == 0) {
            }
        } else {
            seed = seed * 1103515245u + 12345u;
            long us = (long)(seed % 1000u) * (whole_us * 12 / 10 + 1) / 1000; /* [0, 1.2 T) */
            const struct timespec pause = {us / 1000000, us % 1000000 * 1000};
            (void)nanosleep(&pause, NULL);
        }
        (void)kill(pid, SIGKILL);
        (void)waitpid(pid, NULL, 0);
        int st = dest_state(path);
        if (st < 0) {
            fail_msg("kill %d left a torn destination (%ld bytes)", k, file_size(path));
        }
        seen[st]++;
        (void)unlink(tmp); /* a killed writer may leave its temporary; never the destination */
    }
    free(data);
    remove_dir(dir);
    printf("killed writer: %d kills left the old file, %d the complete new one, 0 torn\n", seen[0],
           seen[1]);
    assert_true(seen[0] > 0); /* the kills did land mid-write */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_missing_folder),    cmocka_unit_test(test_readonly_folder),
        cmocka_unit_test(test_full_disk_devfull), cmocka_unit_test(test_real_tmpfs),
        cmocka_unit_test(test_killed_writer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
