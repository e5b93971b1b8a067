/*
 * Engine faults (issue 7), each through `mpirun -n 2 moefold-train` on the tiny-moe preset with a
 * synthetic corpus and expert parallelism over both ranks, started from this (single-process)
 * test:
 *
 *   lost rank     SIGKILL rank 1 (then, separately, rank 0) mid-training: every other rank must be
 *                 gone within FAULT_EXIT_S seconds, the job must end non-zero, and the output must
 *                 name the lost rank ("rank 1"). Today the naming comes from mpirun's
 *                 process monitor ("mpirun noticed that process rank 1 ... exited on signal 9");
 *                 the engine itself installs no handler for a lost peer.
 *   non-finite    a checkpoint whose rank-1 file is overwritten with NaNs past its header (what a
 *                 diverged run leaves), its checksum recomputed so that it loads, is resumed with
 *                 a checkpoint every step: the first step must stop the run with exit status 1 and
 *                 an error naming the step, the layer and the tensor, and the checkpoint it resumed
 *                 from (the last one) must stay byte for byte. (A learning rate of 10 is not used:
 *                 large but finite values train on, and whether they turn non-finite, and when,
 *                 depends on the build.)
 *   corrupt       one flipped bit in rank 1's checkpoint file, then (separately) the file cut
 *                 short: resuming must stop with exit status 1 and an error naming the file and
 *                 saying "checksum mismatch (corrupt or truncated)", overwriting nothing.
 *   resume        a run killed (SIGKILL, rank 1) after its first checkpoint and resumed from it
 *                 must reproduce, bit for bit, the losses of an uninterrupted run from the same
 *                 seed (run.json "per_step" losses compared as exact doubles).
 *   checkpointing CKPT_KILLS kills at random moments of a run that checkpoints every step (each
 *                 later run resuming the killed one): the checkpoint `latest` names must resume
 *                 each time (never torn or half-renamed); and three fresh runs into one --save
 *                 folder must all succeed.
 *
 * Runs only where moefold-train was built (MPI found) and mpirun is on PATH; skips otherwise.
 */
#define _DEFAULT_SOURCE 1 /* wait4 */

#include "tests/reliability/proc_util.h"
#include "tests/test_util.h"
#include "topologies/json_util.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#define FAULT_EXIT_S  10.0  /* issue 7: survivors exit within 10 s */
#define START_LIMIT_S 120.0 /* generous for ASan builds on 2 cores */
#define RUN_LIMIT_S   300.0
#define RESUME_STEPS  8 /* the uninterrupted reference run */
#define SAVE_EVERY    3
#define CKPT_KILLS    4 /* kills while checkpointing every step */
#define NAN_FROM_STEP 2 /* checkpoint step whose weights are poisoned */
#define POISON_FROM                                                                                \
    4096 /* bytes of each checkpoint file left intact (header and a little more)                   \
          */

struct fixture {
    char train[4096]; /* moefold-train */
    char dir[256];    /* scratch folder */
};

static bool is_executable(const char *path)
{
    return access(path, X_OK) == 0;
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    if (f == NULL) {
        return -1;
    }
    moe_test_bin_path("moefold-train", f->train, sizeof(f->train));
    const char *tmp = getenv("TMPDIR");
    (void)snprintf(f->dir, sizeof(f->dir), "%s/moefold-rel-engine-XXXXXX", tmp ? tmp : "/tmp");
    if (mkdtemp(f->dir) == NULL) {
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    char cmd[512];
    (void)snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "could not remove %s\n", f->dir);
    }
    free(f);
    return 0;
}

/* Skip unless the engine binary and mpirun exist. */
static void need_engine(const struct fixture *f)
{
    if (!is_executable(f->train) || system("command -v mpirun >/dev/null 2>&1") != 0) {
        printf("# skipped: %s or mpirun not found (engine built only with MPI)\n", f->train);
        skip();
    }
}

/* Start `mpirun -n 2 moefold-train --model tiny-moe --synthetic <extra...> -- EP flags`. */
static struct rel_proc *start_train(const struct fixture *f, const char *const *extra)
{
    const char *argv[REL_MAX_ARGS + 1];
    int n = 0;
    const char *head[] = {"mpirun", "-n",      "2",        "--oversubscribe", "--bind-to", "none",
                          f->train, "--model", "tiny-moe", "--synthetic",     "--seed",    "4242"};
    for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++) {
        argv[n++] = head[i];
    }
    for (int i = 0; extra[i] != NULL && n < REL_MAX_ARGS - 4; i++) {
        argv[n++] = extra[i];
    }
    argv[n++] = "--";
    argv[n++] = "--expert-model-parallel-size";
    argv[n++] = "2";
    argv[n] = NULL;
    struct rel_proc *p = malloc(sizeof(*p));
    assert_non_null(p);
    assert_true(rel_spawn(argv, p));
    return p;
}

#define EXTRA(...) ((const char *const[]){__VA_ARGS__, NULL})

static void dump(const char *what, const struct rel_proc *p)
{
    fprintf(stderr, "%s: exit %d, signal %d, %.2f s; output:\n%.6000s\n", what, p->exit_code,
            p->signal, p->end_s - p->start_s, p->out);
}

/* Kill one rank mid-training; the job must end, naming it, within FAULT_EXIT_S. */
static void kill_rank_case(const struct fixture *f, int victim)
{
    struct rel_proc *p = start_train(f, EXTRA("--steps", "1000000", "--out", "-"));
    if (!rel_wait_output(p, "\nstep ", 3, START_LIMIT_S)) {
        (void)rel_wait(p, 1.0);
        dump("training did not start", p);
        fail();
    }
    pid_t ranks[2] = {rel_find_rank(p->pid, 0), rel_find_rank(p->pid, 1)};
    assert_true(ranks[0] > 0 && ranks[1] > 0);
    double t0 = rel_now_s();
    assert_int_equal(kill(ranks[victim], SIGKILL), 0);
    bool ended = rel_wait(p, FAULT_EXIT_S);
    double waited = rel_now_s() - t0;
    pid_t survivor = ranks[1 - victim];
    for (int i = 0; i < 100 && rel_alive(survivor); i++) { /* reparented zombies: let init reap */
        rel_sleep_ms(10);
    }
    char named[32];
    (void)snprintf(named, sizeof(named), "rank %d", victim);
    bool ok = ended && waited <= FAULT_EXIT_S && !rel_alive(survivor) && p->exit_code != 0 &&
              strstr(p->out, named) != NULL;
    printf("killed rank %d: job ended after %.2f s (exit %d), survivor %s, output names \"%s\": "
           "%s\n",
           victim, waited, p->exit_code, rel_alive(survivor) ? "STILL RUNNING" : "gone", named,
           strstr(p->out, named) != NULL ? "yes" : "no");
    if (rel_alive(survivor)) {
        (void)kill(survivor, SIGKILL);
    }
    if (!ok) {
        dump("lost-rank case", p);
    }
    free(p);
    assert_true(ok);
}

static void test_lost_rank_1(void **state)
{
    struct fixture *f = *state;
    need_engine(f);
    kill_rank_case(f, 1);
}

static void test_lost_rank_0(void **state)
{
    struct fixture *f = *state;
    need_engine(f);
    kill_rank_case(f, 0);
}

/* The checkpoint step that dir/latest names, or -1. */
static int latest_step(const char *dir)
{
    char path[512];
    (void)snprintf(path, sizeof(path), "%s/latest", dir);
    FILE *fp = fopen(path, "r");
    if (fp == NULL) {
        return -1;
    }
    int step = -1;
    if (fscanf(fp, "step_%d", &step) != 1) {
        step = -1;
    }
    (void)fclose(fp);
    return step;
}

/*
 * The checkpoint checksum as engine/checkpoint.c documents it, written here independently: FNV-1a
 * 64 over every byte of the file except the 8-byte checksum field at byte CKPT_SUM_AT of the
 * CKPT_HEADER-byte header.
 */
#define CKPT_SUM_AT 88
#define CKPT_HEADER 96

static uint64_t ckpt_checksum(const unsigned char *file, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < len; i++) {
        if (i < CKPT_SUM_AT || i >= CKPT_HEADER) {
            h = (h ^ file[i]) * 0x100000001b3ULL;
        }
    }
    return h;
}

/* Recompute and store a checkpoint file's checksum (after an edit made on purpose). */
static bool reseal(const char *path)
{
    FILE *fp = fopen(path, "r+b");
    if (fp == NULL) {
        return false;
    }
    bool ok = fseek(fp, 0, SEEK_END) == 0;
    long size = ok ? ftell(fp) : -1;
    unsigned char *buf = size > CKPT_HEADER ? malloc((size_t)size) : NULL;
    ok = buf != NULL && fseek(fp, 0, SEEK_SET) == 0 &&
         fread(buf, 1, (size_t)size, fp) == (size_t)size;
    if (ok) {
        uint64_t sum = ckpt_checksum(buf, (size_t)size);
        ok = fseek(fp, CKPT_SUM_AT, SEEK_SET) == 0 && fwrite(&sum, sizeof(sum), 1, fp) == 1;
    }
    free(buf);
    return fclose(fp) == 0 && ok;
}

/* Overwrite a checkpoint file with float NaNs from byte POISON_FROM on (the header stays valid),
 * then reseal it, so that it loads and the NaNs reach the step. */
static bool poison(const char *path)
{
    FILE *fp = fopen(path, "r+b");
    if (fp == NULL || fseek(fp, 0, SEEK_END) != 0) {
        if (fp != NULL) {
            (void)fclose(fp);
        }
        return false;
    }
    long size = ftell(fp);
    const unsigned char nan_le[4] = {0x00, 0x00, 0xc0, 0x7f}; /* quiet NaN, little-endian */
    bool ok = size > POISON_FROM && fseek(fp, POISON_FROM, SEEK_SET) == 0;
    for (long at = POISON_FROM; ok && at + 4 <= size; at += 4) {
        ok = fwrite(nan_le, 1, 4, fp) == 4;
    }
    return fclose(fp) == 0 && ok && reseal(path);
}

/* A file's bytes (malloc'd; *len its size), or NULL. */
static char *slurp(const char *path, size_t *len)
{
    char *buf = NULL;
    struct moe_diag d;
    memset(&d, 0, sizeof(d));
    if (moe_file_read_all(path, &buf, len, &d) != MOE_OK) {
        return NULL;
    }
    return buf;
}

static void test_nonfinite_stops(void **state)
{
    struct fixture *f = *state;
    need_engine(f);
    char ckpt[512];
    char rank1[600];
    char latest[600];
    (void)snprintf(ckpt, sizeof(ckpt), "%s/nan_ckpt", f->dir);
    (void)snprintf(rank1, sizeof(rank1), "%s/step_%06d/rank_00001.ckpt", ckpt, NAN_FROM_STEP);
    (void)snprintf(latest, sizeof(latest), "%s/latest", ckpt);
    char steps[16];
    (void)snprintf(steps, sizeof(steps), "%d", NAN_FROM_STEP);
    struct rel_proc *p = start_train(f, EXTRA("--steps", steps, "--out", "-", "--save", ckpt));
    bool ok = rel_wait(p, RUN_LIMIT_S) && p->exit_code == 0 && latest_step(ckpt) == NAN_FROM_STEP;
    if (!ok) {
        dump("checkpointed run", p);
    }
    free(p);
    assert_true(ok);
    /* NaN weights on rank 1 (a bit flip would do the same): the next step must stop. */
    assert_true(poison(rank1));
    size_t kept_len = 0;
    char *kept = slurp(rank1, &kept_len);
    assert_non_null(kept);
    p = start_train(f, EXTRA("--steps", "5", "--out", "-", "--load", ckpt, "--save", ckpt,
                             "--save-every", "1"));
    bool ended = rel_wait(p, RUN_LIMIT_S);
    char step_text[32];
    (void)snprintf(step_text, sizeof(step_text), "step %d", NAN_FROM_STEP + 1);
    const char *err = strstr(p->out, "moefold-train: error:");
    char line[1024] = "";
    if (err != NULL) {
        (void)sscanf(err, "%1023[^\n]", line);
    }
    bool names_step = strstr(line, step_text) != NULL;
    bool names_layer = strstr(line, "layer") != NULL && strstr(line, " in ") != NULL;
    bool says_finite = strstr(line, "finite") != NULL;
    size_t now_len = 0;
    char *now = slurp(rank1, &now_len);
    bool checkpoint_kept = latest_step(ckpt) == NAN_FROM_STEP && now != NULL &&
                           now_len == kept_len && memcmp(now, kept, kept_len) == 0;
    int err_len = 0;
    while (err != NULL && err[err_len] != '\0' && err[err_len] != '\n') {
        err_len++;
    }
    printf("non-finite run: exit %d; \"%.*s\"; names %s: %s, a layer and tensor: %s; checkpoint "
           "of step %d kept: %s\n",
           p->exit_code, err_len, err != NULL ? err : "", step_text, names_step ? "yes" : "no",
           names_layer ? "yes" : "no", NAN_FROM_STEP, checkpoint_kept ? "yes" : "no");
    free(now);
    free(kept);
    if (!(ended && p->exit_code == 1 && names_step && names_layer && says_finite &&
          checkpoint_kept)) {
        dump("non-finite case", p);
        free(p);
        fail_msg("the run must stop with exit 1 naming the step, layer and tensor, and keep the "
                 "last checkpoint");
    }
    free(p);
}

/* Write len bytes of buf to path (replacing it). */
static bool put_file(const char *path, const char *buf, size_t len)
{
    FILE *fp = fopen(path, "wb");
    if (fp == NULL) {
        return false;
    }
    bool ok = fwrite(buf, 1, len, fp) == len;
    return fclose(fp) == 0 && ok;
}

/* Resume from ckpt (saving into it every step) with rank 1's file replaced by bad[bad_len]: the run
 * must stop with exit 1 naming the file and the checksum, and leave the folder as it was. */
static void corrupt_case(const struct fixture *f,
                         const char *ckpt,
                         const char *rank1,
                         const char *what,
                         const char *bad,
                         size_t bad_len)
{
    assert_true(put_file(rank1, bad, bad_len));
    struct rel_proc *p = start_train(f, EXTRA("--steps", "3", "--out", "-", "--load", ckpt,
                                              "--save", ckpt, "--save-every", "1"));
    bool ended = rel_wait(p, RUN_LIMIT_S);
    const char *err = strstr(p->out, "moefold-train: error:");
    char line[1024] = "";
    if (err != NULL) {
        (void)sscanf(err, "%1023[^\n]", line);
    }
    size_t now_len = 0;
    char *now = slurp(rank1, &now_len);
    bool kept = latest_step(ckpt) == NAN_FROM_STEP && now != NULL && now_len == bad_len &&
                memcmp(now, bad, bad_len) == 0;
    bool says = strstr(line, "checksum mismatch (corrupt or truncated)") != NULL &&
                strstr(line, "rank_00001.ckpt") != NULL;
    printf("%s checkpoint: exit %d; \"%s\"; folder untouched: %s\n", what, p->exit_code, line,
           kept ? "yes" : "no");
    free(now);
    if (!(ended && p->exit_code == 1 && says && kept)) {
        dump("corrupt checkpoint", p);
        free(p);
        fail_msg("a %s checkpoint must be refused (exit 1, the file named, 'checksum mismatch "
                 "(corrupt or truncated)') and nothing overwritten",
                 what);
    }
    free(p);
}

static void test_corrupt_checkpoint_refused(void **state)
{
    struct fixture *f = *state;
    need_engine(f);
    char ckpt[512];
    char rank1[600];
    (void)snprintf(ckpt, sizeof(ckpt), "%s/corrupt_ckpt", f->dir);
    (void)snprintf(rank1, sizeof(rank1), "%s/step_%06d/rank_00001.ckpt", ckpt, NAN_FROM_STEP);
    char steps[16];
    (void)snprintf(steps, sizeof(steps), "%d", NAN_FROM_STEP);
    struct rel_proc *p = start_train(f, EXTRA("--steps", steps, "--out", "-", "--save", ckpt));
    bool ok = rel_wait(p, RUN_LIMIT_S) && p->exit_code == 0 && latest_step(ckpt) == NAN_FROM_STEP;
    if (!ok) {
        dump("checkpointed run", p);
    }
    free(p);
    assert_true(ok);
    size_t len = 0;
    char *orig = slurp(rank1, &len);
    assert_non_null(orig);
    assert_true(len > POISON_FROM);
    char *bad = malloc(len);
    assert_non_null(bad);
    memcpy(bad, orig, len);
    bad[len / 2] = (char)(bad[len / 2] ^ 0x04); /* one bit of a weight */
    corrupt_case(f, ckpt, rank1, "bit-flipped", bad, len);
    corrupt_case(f, ckpt, rank1, "truncated", orig, len - 1000);
    free(bad);
    free(orig);
}

/* Losses of run.json's per_step entries, keyed by global step, into loss[1..max]. */
static int read_losses(const char *path, double *loss, int max)
{
    cJSON *root = NULL;
    struct moe_diag d;
    memset(&d, 0, sizeof(d));
    if (moe_json_read_file(path, &root, &d) != MOE_OK) {
        fprintf(stderr, "%s\n", d.message);
        return 0;
    }
    int n = 0;
    const cJSON *it = NULL;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(root, "per_step"))
    {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(it, "step");
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(it, "loss");
        if (cJSON_IsNumber(s) && cJSON_IsNumber(l) && s->valueint >= 1 && s->valueint <= max) {
            loss[s->valueint] = l->valuedouble;
            n++;
        }
    }
    cJSON_Delete(root);
    return n;
}

static void test_resume_after_kill_bit_identical(void **state)
{
    struct fixture *f = *state;
    need_engine(f);
    char ref_json[512];
    char res_json[512];
    char ckpt[512];
    char steps[16];
    (void)snprintf(ref_json, sizeof(ref_json), "%s/ref.json", f->dir);
    (void)snprintf(res_json, sizeof(res_json), "%s/resumed.json", f->dir);
    (void)snprintf(ckpt, sizeof(ckpt), "%s/kill_ckpt", f->dir);
    (void)snprintf(steps, sizeof(steps), "%d", RESUME_STEPS);
    /* Uninterrupted reference. */
    struct rel_proc *p = start_train(f, EXTRA("--steps", steps, "--out", ref_json));
    bool ok = rel_wait(p, RUN_LIMIT_S) && p->exit_code == 0;
    if (!ok) {
        dump("reference run", p);
    }
    free(p);
    assert_true(ok);
    /* Killed run: wait for the first checkpoint, then SIGKILL rank 1. */
    char every[16];
    (void)snprintf(every, sizeof(every), "%d", SAVE_EVERY);
    p = start_train(
        f, EXTRA("--steps", "1000000", "--out", "-", "--save", ckpt, "--save-every", every));
    double t0 = rel_now_s();
    while (latest_step(ckpt) < 0 && !rel_poll(p) && rel_now_s() - t0 < START_LIMIT_S) {
        rel_sleep_ms(2);
    }
    pid_t victim = rel_find_rank(p->pid, 1);
    assert_true(victim > 0);
    assert_int_equal(kill(victim, SIGKILL), 0);
    (void)rel_wait(p, FAULT_EXIT_S);
    free(p);
    int from = latest_step(ckpt);
    if (from < 1 || from >= RESUME_STEPS) {
        fail_msg("the killed run's last checkpoint is step %d; need 1..%d", from, RESUME_STEPS - 1);
    }
    /* Resume to the reference's last step. */
    char more[16];
    (void)snprintf(more, sizeof(more), "%d", RESUME_STEPS - from);
    p = start_train(f, EXTRA("--steps", more, "--out", res_json, "--load", ckpt));
    ok = rel_wait(p, RUN_LIMIT_S) && p->exit_code == 0;
    if (!ok) {
        dump("resumed run", p);
    }
    free(p);
    assert_true(ok);
    double ref[RESUME_STEPS + 1];
    double res[RESUME_STEPS + 1];
    for (int i = 0; i <= RESUME_STEPS; i++) {
        ref[i] = NAN;
        res[i] = NAN;
    }
    assert_int_equal(read_losses(ref_json, ref, RESUME_STEPS), RESUME_STEPS);
    assert_int_equal(read_losses(res_json, res, RESUME_STEPS), RESUME_STEPS - from);
    int same = 0;
    for (int s = from + 1; s <= RESUME_STEPS; s++) {
        if (memcmp(&ref[s], &res[s], sizeof(double)) != 0) {
            fail_msg("step %d: resumed loss %.17g differs from the uninterrupted %.17g", s, res[s],
                     ref[s]);
        }
        same++;
    }
    printf("killed after checkpoint step %d, resumed: steps %d..%d bit-identical (%d losses)\n",
           from, from + 1, RESUME_STEPS, same);
}

/* Kill a rank at random moments while checkpoints are written every step: each time the
 * checkpoint `latest` names must load and train on. */
static void test_checkpoint_survives_kills(void **state)
{
    struct fixture *f = *state;
    need_engine(f);
    char ckpt[512];
    (void)snprintf(ckpt, sizeof(ckpt), "%s/kill_loop_ckpt", f->dir);
    unsigned seed = 99;
    int resumed_ok = 0;
    for (int k = 0; k < CKPT_KILLS; k++) {
        /* The first run starts fresh; each later one resumes the killed one (a crash loop). */
        struct rel_proc *p =
            k == 0 ? start_train(f, EXTRA("--steps", "1000000", "--out", "-", "--save", ckpt,
                                          "--save-every", "1"))
                   : start_train(f, EXTRA("--steps", "1000000", "--out", "-", "--load", ckpt,
                                          "--save", ckpt, "--save-every", "1"));
        int before = latest_step(ckpt);
        double t0 = rel_now_s();
        while (latest_step(ckpt) <= before && !rel_poll(p) && rel_now_s() - t0 < START_LIMIT_S) {
            rel_sleep_ms(1);
        }
        seed = seed * 1103515245u + 12345u;
        rel_sleep_ms((long)(seed % 200u)); /* anywhere in the next few saves */
        pid_t victim = rel_find_rank(p->pid, k % 2);
        if (victim <= 0) {
            (void)rel_wait(p, FAULT_EXIT_S);
            dump("run to kill during checkpointing", p);
            free(p);
            fail_msg("kill %d: rank %d not found (the run ended early?)", k, k % 2);
        }
        assert_int_equal(kill(victim, SIGKILL), 0);
        (void)rel_wait(p, FAULT_EXIT_S);
        free(p);
        int from = latest_step(ckpt);
        p = start_train(f, EXTRA("--steps", "1", "--out", "-", "--load", ckpt));
        bool ok = from >= 1 && rel_wait(p, RUN_LIMIT_S) && p->exit_code == 0;
        if (!ok) {
            dump("resume after a kill during checkpointing", p);
            free(p);
            fail_msg("kill %d: the checkpoint latest names (step %d) does not resume", k, from);
        }
        free(p);
        resumed_ok++;
    }
    printf("checkpoint every step, %d kills at random moments: latest resumed every time (%d)\n",
           CKPT_KILLS, resumed_ok);
}

/* Training again into the same --save folder (fresh runs, no --load) must keep working. */
static void test_rerun_into_same_save_dir(void **state)
{
    struct fixture *f = *state;
    need_engine(f);
    char ckpt[512];
    (void)snprintf(ckpt, sizeof(ckpt), "%s/rerun_ckpt", f->dir);
    for (int run = 1; run <= 3; run++) {
        struct rel_proc *p = start_train(
            f, EXTRA("--steps", "2", "--out", "-", "--save", ckpt, "--save-every", "1"));
        bool ok = rel_wait(p, RUN_LIMIT_S) && p->exit_code == 0 && latest_step(ckpt) == 2;
        if (!ok) {
            dump("run into a used --save folder", p);
            free(p);
            fail_msg("run %d of 3 into the same --save folder failed", run);
        }
        free(p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lost_rank_1),
        cmocka_unit_test(test_lost_rank_0),
        cmocka_unit_test(test_nonfinite_stops),
        cmocka_unit_test(test_corrupt_checkpoint_refused),
        cmocka_unit_test(test_resume_after_kill_bit_identical),
        cmocka_unit_test(test_checkpoint_survives_kills),
        cmocka_unit_test(test_rerun_into_same_save_dir),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
