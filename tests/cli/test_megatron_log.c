/*
 * The Megatron-LM log reader (cli/megatron_log.h) and `moefold compare --megatron-log`.
 *
 * The logs under tests/data/megatron_logs/ follow the printing code of three Megatron-LM versions
 * (23.06, core_v0.12.0, main of 2026; gen_logs.py says what each carries). The steady-state
 * medians below are the generator's own, computed from the lines it knows are warm-up, skipped
 * or ramp-up (not by the reader's rules), and the layouts are the runs' flags: the reader must
 * give the step time within 1% and the layout exactly. Bad input -- no dump, a dump cut short,
 * two runs in one file, a value Megatron would not print, no iteration line, no steady line, a
 * layout that does not parse -- must be an error naming the line and the problem, and exit 1
 * from the command.
 */
#include "cli/common.h"
#include "cli/megatron_log.h"
#include "tests/test_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define OUT_LEN (1 << 17)

struct expect {
    const char *file;
    double median_s; /* the generator's steady-state median */
    int lines_used;
    int world;
    int tp, cp, pp, vpp, ep, etp, dp, mbs, gbs;
    bool sp;
    bool has_tflops;
    const char *device;
    double max_reserved_mib;
};

static const struct expect logs[] = {
    {"megatron-23.06-dense.log", 2.3684, 35, 16, 2, 1, 2, 1, 1, 2, 4, 1, 64, true, false,
     "NVIDIA H100 80GB HBM3", 28302.0},
    {"megatron-core_v0.12.0-mixtral.log", 3.6520, 17, 64, 2, 1, 4, 2, 8, 2, 8, 1, 256, true, true,
     "NVIDIA H100 80GB HBM3", 44410.0},
    {"megatron-main-2026-qwen3.log", 7.5603, 51, 16, 1, 1, 2, 2, 8, 1, 8, 1, 256, false, true,
     "NVIDIA B200", 64712.0},
};

static const char *log_path(const char *name, char *buf, size_t len)
{
    char rel[256];
    (void)snprintf(rel, sizeof(rel), "tests/data/megatron_logs/%s", name);
    return moe_test_root_path(rel, buf, len);
}

static int run_cli(const char *args, char *out)
{
    char bin[1024];
    char cmd[8192];
    moe_test_bin_path("moefold", bin, sizeof(bin));
    (void)snprintf(cmd, sizeof(cmd), "%s %s", bin, args);
    return moe_test_run_capture(cmd, out, OUT_LEN);
}

/* The reader's words through the predict parser, as `compare --megatron-log` does. */
static void
rebuild(const struct moe_megatron_log *log, const char *cluster, struct moe_cli_problem *p)
{
    char **argv = malloc(((size_t)log->num_words + 8) * sizeof(*argv));
    assert_non_null(argv);
    int argc = 0;
    char gpus[32];
    char cl[64];
    (void)snprintf(gpus, sizeof(gpus), "%d", log->world_size);
    (void)snprintf(cl, sizeof(cl), "%s", cluster);
    argv[argc++] = (char *)"test";
    argv[argc++] = (char *)"--gpus";
    argv[argc++] = gpus;
    for (int i = 0; i < log->num_words; i++) {
        argv[argc++] = log->words[i];
    }
    argv[argc++] = (char *)"--cluster";
    argv[argc++] = cl;
    struct moe_diag diag = {0};
    enum moe_status st = moe_cli_parse_problem(argc, argv, NULL, NULL, p, NULL, &diag);
    if (st == MOE_OK) {
        st = moe_cli_resolve(p, &diag);
    }
    if (st != MOE_OK) {
        print_error("%s\n", diag.message);
    }
    assert_int_equal(st, MOE_OK);
    free(argv);
}

/* Done-when: step time within 1% of the log's steady-state median, the layout exactly. */
static void test_logs_recovered(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(logs) / sizeof(logs[0]); i++) {
        const struct expect *e = &logs[i];
        char path[1024];
        struct moe_megatron_log log;
        struct moe_diag diag = {0};
        moe_mlog_init(&log);
        enum moe_status st = moe_mlog_read_file(log_path(e->file, path, sizeof(path)), &log, &diag);
        if (st != MOE_OK) {
            print_error("%s: %s\n", e->file, diag.message);
        }
        assert_int_equal(st, MOE_OK);
        double rel = fabs(log.step_time_s / e->median_s - 1.0);
        print_message("%-36s step %.4f s (median %.4f, %.3f%%), %d lines used\n", e->file,
                      log.step_time_s, e->median_s, 100.0 * rel, log.iteration_lines_used);
        assert_true(rel < 0.01);
        assert_int_equal(log.iteration_lines_used, e->lines_used);
        assert_int_equal(log.world_size, e->world);
        assert_int_equal(log.has_megatron_tflops, e->has_tflops);
        assert_string_equal(log.device_name, e->device);
        assert_true(log.has_memory);
        assert_true(fabs(log.max_reserved_bytes / 1048576.0 - e->max_reserved_mib) < 1e-6);
        struct moe_cli_problem *p = calloc(1, sizeof(*p));
        assert_non_null(p);
        char cluster[64];
        assert_true(
            moe_mlog_cluster_for_device(log.device_name, cluster, sizeof(cluster), NULL, 0));
        rebuild(&log, cluster, p);
        const struct moe_layout *l = &p->lay;
        int got[] = {l->tp, l->cp, l->pp, l->vpp, l->ep, l->etp, l->dp, l->mbs, l->gbs};
        int want[] = {e->tp, e->cp, e->pp, e->vpp, e->ep, e->etp, e->dp, e->mbs, e->gbs};
        for (size_t k = 0; k < sizeof(got) / sizeof(got[0]); k++) {
            assert_int_equal(got[k], want[k]);
        }
        assert_int_equal(l->sequence_parallel, e->sp);
        assert_int_equal(l->num_gpus, e->world);
        free(p);
        moe_mlog_fini(&log);
    }
}

/* What each version's noise must do to the counts. */
static void test_noise_counts(void **state)
{
    (void)state;
    char path[1024];
    struct moe_megatron_log log;
    struct moe_diag diag = {0};
    moe_mlog_init(&log);
    /* 23.06: iterations 1-3 warm-up, iteration 17 skipped, iteration 40 cut short mid-line. */
    assert_int_equal(moe_mlog_read_file(log_path(logs[0].file, path, sizeof(path)), &log, &diag),
                     MOE_OK);
    assert_int_equal(log.num_warmup, 3);
    assert_int_equal(log.num_skipped, 1);
    assert_int_equal(log.num_cut_short, 1);
    assert_int_equal(log.num_memory_ranks, 4);
    assert_true(log.vocab_from_line > 0);
    /* core_v0.12.0: the first line (iterations 1-10) warm-up, two lines of the batch ramp-up. */
    assert_int_equal(moe_mlog_read_file(log_path(logs[1].file, path, sizeof(path)), &log, &diag),
                     MOE_OK);
    assert_int_equal(log.log_interval, 10);
    assert_int_equal(log.num_warmup, 1);
    assert_int_equal(log.num_rampup, 2);
    assert_int_equal(log.iterations_used, 170);
    assert_int_equal(log.dump_vpp, 2);
    /* main: resumed (a second, identical dump): 3 warm-up lines per start, one NaN iteration, the
     * invented argument listed. */
    assert_int_equal(moe_mlog_read_file(log_path(logs[2].file, path, sizeof(path)), &log, &diag),
                     MOE_OK);
    assert_int_equal(log.num_starts, 2);
    assert_int_equal(log.num_warmup, 6);
    assert_int_equal(log.num_skipped, 1);
    assert_int_equal(log.num_unknown, 1);
    assert_string_equal(log.unknown[0].name, "moe_router_fusion_alpha");
    assert_true(log.has_theoretical);
    moe_mlog_fini(&log);
}

/* A minimal log around the given dump lines and iteration lines. */
static enum moe_status parse_text(const char *text, struct moe_diag *diag)
{
    struct moe_megatron_log log;
    moe_mlog_init(&log);
    memset(diag, 0, sizeof(*diag));
    enum moe_status st = moe_mlog_parse(text, strlen(text), "t.log", &log, diag);
    moe_mlog_fini(&log);
    return st;
}

#define HDR "------------------------ arguments ------------------------\n"
#define END "-------------------- end of arguments ---------------------\n"
#define ARGS                                                                                       \
    "  hidden_size ..................................... 1024\n"                                   \
    "  num_layers ...................................... 4\n"                                      \
    "  world_size ...................................... 8\n"
#define STEADY ITER(1, 90.0) ITER(2, 50.0) ITER(3, 40.0) ITER(4, 10.0) ITER(5, 11.0)
#define ITER(n, ms)                                                                                \
    " iteration " #n "/      10 | consumed samples: 64 | elapsed time per iteration (ms): " #ms    \
    " | global batch size:    8 | lm loss: 1.0E+00 | loss scale: 1.0 | number of skipped "         \
    "iterations:   0 | number of nan iterations:   0 |\n"

static void test_bad_input(void **state)
{
    (void)state;
    struct moe_diag d;
    const char *iters = ITER(1, 90.0) ITER(2, 50.0) ITER(3, 40.0) ITER(4, 10.0) ITER(5, 11.0);
    char text[4096];
    /* A good one first: the steady lines are 4 and 5. */
    (void)snprintf(text, sizeof(text), "%s%s%s%s", HDR, ARGS, END, iters);
    assert_int_equal(parse_text(text, &d), MOE_OK);
    /* An empty value (its trailing space trimmed) is still an argument. */
    (void)snprintf(text, sizeof(text), "%s%s%s%s%s", HDR, ARGS,
                   "  wandb_exp_name ..................................\n", END, iters);
    struct moe_megatron_log log;
    moe_mlog_init(&log);
    assert_int_equal(moe_mlog_parse(text, strlen(text), "t.log", &log, &d), MOE_OK);
    assert_int_equal(log.num_args, 4);
    assert_int_equal(log.num_noise_in_dump, 0);
    moe_mlog_fini(&log);
    /* No dump. */
    assert_int_equal(parse_text(iters, &d), MOE_ERR_NOT_FOUND);
    assert_non_null(strstr(d.message, "arguments dump"));
    /* A dump without its end line: names the header's line. */
    (void)snprintf(text, sizeof(text), "x\n%s%s", HDR, ARGS);
    assert_int_equal(parse_text(text, &d), MOE_ERR_PARSE);
    assert_int_equal(d.line, 2);
    assert_non_null(strstr(d.message, "t.log:2:"));
    /* Two runs in one file. */
    (void)snprintf(text, sizeof(text), "%s%s%s%s%s%s", HDR, ARGS, END, HDR,
                   "  hidden_size ..................................... 2048\n", END);
    assert_int_equal(parse_text(text, &d), MOE_ERR_INVALID);
    assert_non_null(strstr(d.message, "two runs"));
    assert_int_equal(d.line, 7);
    /* A switch Megatron prints as True/False with another value: the line of the argument. */
    (void)snprintf(text, sizeof(text), "%s%s%s%s%s", HDR, ARGS,
                   "  sequence_parallel ............................... maybe\n", END, iters);
    assert_int_equal(parse_text(text, &d), MOE_ERR_PARSE);
    assert_int_equal(d.line, 5);
    assert_non_null(strstr(d.message, "sequence_parallel"));
    /* No world size. */
    (void)snprintf(text, sizeof(text), "%s%s%s%s", HDR,
                   "  hidden_size ..................................... 1024\n", END, iters);
    assert_int_equal(parse_text(text, &d), MOE_ERR_INVALID);
    assert_non_null(strstr(d.message, "world_size"));
    /* No iteration line; only warm-up lines. */
    (void)snprintf(text, sizeof(text), "%s%s%s", HDR, ARGS, END);
    assert_int_equal(parse_text(text, &d), MOE_ERR_NOT_FOUND);
    assert_non_null(strstr(d.message, "iteration"));
    (void)snprintf(text, sizeof(text), "%s%s%s%s", HDR, ARGS, END, ITER(1, 90.0) ITER(2, 50.0));
    assert_int_equal(parse_text(text, &d), MOE_ERR_INVALID);
    assert_non_null(strstr(d.message, "steady state"));
    /* Binary garbage and an empty text. */
    assert_int_equal(parse_text("\x01\x02\xff\n\r\r\n", &d), MOE_ERR_NOT_FOUND);
    assert_int_equal(parse_text("", &d), MOE_ERR_NOT_FOUND);
}

static void test_prefixes_and_wrapping(void **state)
{
    (void)state;
    /* Every line behind srun's and torchrun's prefixes, a dump line behind another stamp width,
     * an iteration line wrapped by a collector after "consumed samples". */
    /* clang-format off */
    const char *text =
        "[default0]: 3: " HDR
        "[default0]: 3:   hidden_size ............................... 1024\n"
        "[default0]: 3:   num_layers ................................ 4\n"
        "node1:77:88 [2] NCCL INFO Connected all rings\n"
        "[default0]: 3:   world_size ................................ 8\n"
        "[default0]: 3: " END
        "2026-01-01T00:00:00Z [default7]:" ITER(1, 90.0)
        "2026-01-01T00:00:00Z [default7]:" ITER(2, 50.0)
        "2026-01-01T00:00:00Z [default7]:" ITER(3, 30.0)
        "2026-01-01T00:00:00Z [default7]:" ITER(4, 20.0)
        "2026-01-01T00:00:01Z [default7]: iteration        5/      10 | consumed samples: 64 |\n"
        "2026-01-01T00:00:01Z [default7]: elapsed time per iteration (ms): 22.0 | global batch "
        "size:    8 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
        "2026-01-01T00:00:02Z [default7]:" ITER(6, 24.0);
    /* clang-format on */
    struct moe_megatron_log log;
    struct moe_diag d = {0};
    moe_mlog_init(&log);
    assert_int_equal(moe_mlog_parse(text, strlen(text), "p.log", &log, &d), MOE_OK);
    assert_int_equal(log.num_args, 3);
    assert_int_equal(log.world_size, 8);
    /* 1-3 warm-up; 4, 5 (joined with its continuation) and 6 used */
    assert_int_equal(log.iteration_lines_used, 3);
    assert_true(fabs(log.step_time_s - 0.022) < 1e-12);
    moe_mlog_fini(&log);
}

static void test_cli(void **state)
{
    (void)state;
    char *out = malloc(OUT_LEN);
    assert_non_null(out);
    char path[1024];
    char args[2048];
    log_path(logs[1].file, path, sizeof(path));
    (void)snprintf(args, sizeof(args), "compare --megatron-log %s", path);
    assert_int_equal(run_cli(args, out), 0);
    assert_non_null(strstr(out, "step time (s)"));
    assert_non_null(strstr(out, "TFLOPS/GPU (Megatron's)"));
    assert_non_null(strstr(out, "peak memory (GiB)"));
    assert_non_null(
        strstr(out, "# layout: TP2 CP1 PP4 VPP2 EP8 ETP2 EDP1 DP8 MBS1 GBS256 (m=32) SP"));
    (void)snprintf(args, sizeof(args), "compare --megatron-log %s --json 2>/dev/null", path);
    assert_int_equal(run_cli(args, out), 0);
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    const char *keys[] = {"measured_step_time_s",
                          "predicted_step_time_s",
                          "measured_tflops_per_gpu",
                          "predicted_tflops_per_gpu",
                          "iterations_used",
                          "memory",
                          "megatron_args"};
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
        assert_non_null(cJSON_GetObjectItemCaseSensitive(j, keys[k]));
    }
    double meas = cJSON_GetObjectItemCaseSensitive(j, "measured_step_time_s")->valuedouble;
    assert_true(fabs(meas / logs[1].median_s - 1.0) < 0.01);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(j, "iterations_used")->valueint, 170);
    assert_true(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "megatron_args")) > 20);
    cJSON_Delete(j);
    /* --strict refuses the main log's unknown MoE argument, naming it and its line. */
    log_path(logs[2].file, path, sizeof(path));
    (void)snprintf(args, sizeof(args), "compare --megatron-log %s --strict", path);
    assert_int_equal(run_cli(args, out), 1);
    /* the argument's own line in the log */
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[4096];
    int no = 0;
    int at = 0;
    while (at == 0 && fgets(line, sizeof(line), f) != NULL) {
        no++;
        at = strstr(line, "moe_router_fusion_alpha") != NULL ? no : 0;
    }
    fclose(f);
    char where[64];
    (void)snprintf(where, sizeof(where), ".log:%d: moe_router_fusion_alpha = 0.5", at);
    assert_non_null(strstr(out, where));
    free(out);
}

static void write_text(const char *p, const char *text)
{
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

static void test_cli_errors(void **state)
{
    (void)state;
    char *out = malloc(OUT_LEN);
    assert_non_null(out);
    char dir[] = "/tmp/moefold_mlog_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char p[512];
    char args[2048];
    /* No GPU name in the log and no --cluster: says what it needs. */
    (void)snprintf(p, sizeof(p), "%s/nogpu.log", dir);
    write_text(p, HDR ARGS "  num_attention_heads ............................. 8\n"
                           "  seq_length ...................................... 512\n"
                           "  vocab_size ...................................... 1000\n" END STEADY);
    (void)snprintf(args, sizeof(args), "compare --megatron-log %s", p);
    assert_int_equal(run_cli(args, out), 1);
    assert_non_null(strstr(out, "--cluster"));
    (void)snprintf(args, sizeof(args), "compare --megatron-log %s --cluster dgx-h100", p);
    assert_int_equal(run_cli(args, out), 0);
    /* No vocabulary in the log: says how to give it; an empty value is an argument. */
    (void)snprintf(p, sizeof(p), "%s/novocab.log", dir);
    write_text(p, HDR ARGS "  num_attention_heads ............................. 8\n"
                           "  seq_length ...................................... 512\n"
                           "  vocab_size ...................................... None\n"
                           "  wandb_exp_name ..................................\n" END STEADY);
    (void)snprintf(args, sizeof(args), "compare --megatron-log %s --cluster dgx-h100", p);
    assert_int_equal(run_cli(args, out), 1);
    assert_non_null(strstr(out, "-- --vocab-size"));
    (void)snprintf(args, sizeof(args),
                   "compare --megatron-log %s --cluster dgx-h100 --json -- --vocab-size 32000", p);
    assert_int_equal(run_cli(args, out), 0);
    assert_non_null(strstr(out, "\"measured_step_time_s\""));
    /* A pipeline layout that does not parse: the argument's line. */
    (void)snprintf(p, sizeof(p), "%s/layout.log", dir);
    write_text(p, HDR ARGS "  num_attention_heads ............................. 8\n"
                           "  pipeline_model_parallel_layout .................. Et|tt|bogus\n"
                           "  pipeline_model_parallel_size .................... 2\n"
                           "  seq_length ...................................... 512\n"
                           "  vocab_size ...................................... 1000\n" END STEADY);
    (void)snprintf(args, sizeof(args), "compare --megatron-log %s --cluster dgx-h100", p);
    assert_int_equal(run_cli(args, out), 1);
    assert_non_null(strstr(out, "layout.log:6:"));
    assert_non_null(strstr(out, "--pipeline-model-parallel-layout"));
    /* Missing file, a directory, usage errors. */
    (void)snprintf(args, sizeof(args), "compare --megatron-log %s/none.log --cluster dgx-h100",
                   dir);
    assert_int_equal(run_cli(args, out), 1);
    (void)snprintf(args, sizeof(args), "compare --megatron-log %s --cluster dgx-h100", dir);
    assert_int_equal(run_cli(args, out), 1);
    assert_int_equal(run_cli("compare --megatron-log", out), 2);
    (void)snprintf(args, sizeof(args), "compare --megatron-log %s stray", p);
    assert_int_equal(run_cli(args, out), 2);
    (void)snprintf(args, sizeof(args), "rm -rf %s", dir);
    assert_int_equal(system(args), 0);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logs_recovered),
        cmocka_unit_test(test_noise_counts),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_prefixes_and_wrapping),
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_cli_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
