/*
 * CLI reliability: build/bin/moefold (from $MOEFOLD_BIN) run on bad and absurd inputs. Each case
 * must end with a non-zero exit status (never a signal), print a message that names the problem
 * (a substring check), finish within CLI_TIME_LIMIT_S and stay under CLI_RSS_LIMIT_KB of peak
 * resident memory (getrusage of the child through wait4). Output from a sanitizer (ASan, LSan,
 * UBSan) fails the case, so under `make san` this also checks the error paths for leaks.
 *
 * Inputs that need files (malformed JSON, a binary, an empty file, a file over the size limit, a
 * directory, /dev/null) are made in a fresh temporary folder. One valid run is the control that
 * shows the harness can see success. Issue 7: "every rejection is a message naming the file, field
 * and problem, and a non-zero exit"; "absurd inputs (a million GPUs, a million experts, seq 10^9)
 * are refused or searched in bounded time and memory".
 */
/* wait4 (the child's own rusage) is a BSD/GNU extension. */
#define _DEFAULT_SOURCE 1

#include "tests/reliability/proc_util.h"
#include "tests/test_util.h"

#include <fcntl.h>
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

#define CLI_TIME_LIMIT_S 10.0
/* Peak resident memory allowed (KiB): ASan builds included; a plain build stays under 150 MB. */
#define CLI_RSS_LIMIT_KB (512L * 1024)
#define CLI_MAX_ARGS     48

struct cli_result {
    int exit_code;   /* exit status, or -1 when killed by a signal */
    int signal;      /* terminating signal, 0 if none */
    bool timed_out;  /* killed after CLI_TIME_LIMIT_S */
    double wall_s;   /* wall-clock seconds */
    long maxrss_kb;  /* peak resident set of the child */
    const char *out; /* stdout + stderr (points into proc) */
    struct rel_proc proc;
};

/* Run moefold with args (NULL-terminated, without the program name); fills r. */
static void run_moefold(const char *const *args, struct cli_result *r)
{
    char bin[4096];
    moe_test_bin_path("moefold", bin, sizeof(bin));
    const char *argv[CLI_MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = bin;
    while (args[argc - 1] != NULL && argc <= CLI_MAX_ARGS) {
        argv[argc] = args[argc - 1];
        argc++;
    }
    argv[argc] = NULL;
    assert_true(rel_spawn(argv, &r->proc));
    r->timed_out = !rel_wait(&r->proc, CLI_TIME_LIMIT_S);
    r->exit_code = r->proc.exit_code;
    r->signal = r->timed_out ? 0 : r->proc.signal;
    r->wall_s = r->proc.end_s - r->proc.start_s;
    r->maxrss_kb = r->proc.maxrss_kb;
    r->out = r->proc.out;
}

static void print_args(const char *const *args)
{
    fprintf(stderr, "  moefold");
    for (int i = 0; args[i] != NULL; i++) {
        fprintf(stderr, " %s", args[i]);
    }
    fprintf(stderr, "\n");
}

/* The properties every run keeps: no signal, no hang, bounded memory, no sanitizer report. */
static bool check_bounded(const char *const *args, const struct cli_result *r)
{
    const char *san[] = {"AddressSanitizer", "LeakSanitizer",
                         "runtime error:", "UndefinedBehaviorSanitizer"};
    bool ok = !r->timed_out && r->signal == 0 && r->maxrss_kb <= CLI_RSS_LIMIT_KB;
    for (size_t i = 0; i < sizeof(san) / sizeof(san[0]); i++) {
        ok = ok && strstr(r->out, san[i]) == NULL;
    }
    if (!ok) {
        print_args(args);
        fprintf(stderr, "  -> exit %d, signal %d, %s, %.2f s, %ld KB peak\n%s\n", r->exit_code,
                r->signal, r->timed_out ? "TIMED OUT" : "finished", r->wall_s, r->maxrss_kb,
                r->out);
    }
    return ok;
}

/* A rejected input: non-zero exit (1 or 2) and every `want` substring in the output. */
static void expect_refused(const char *const *args, const char *const *want)
{
    struct cli_result *r = malloc(sizeof(*r));
    assert_non_null(r);
    run_moefold(args, r);
    bool ok = check_bounded(args, r) && r->exit_code >= 1 && r->exit_code <= 2;
    for (int i = 0; ok && want[i] != NULL; i++) {
        ok = strstr(r->out, want[i]) != NULL;
        if (!ok) {
            print_args(args);
            fprintf(stderr, "  -> message lacks \"%s\":\n%s\n", want[i], r->out);
        }
    }
    if (!ok && r->exit_code == 0) {
        print_args(args);
        fprintf(stderr, "  -> accepted (exit 0):\n%.2000s\n", r->out);
    }
    free(r);
    assert_true(ok);
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define WANT(...) ((const char *const[]){__VA_ARGS__, NULL})
#define PREDICT   "predict"
#define DSV3      "--model", "deepseek-v3"
#define H100(n)   "--cluster", "dgx-h100", "--gpus", n

/* Scratch files for the file cases. */
struct scratch {
    char dir[256];
    char malformed[320];
    char truncated[320];
    char binary[320];
    char text_garbage[320];
    char empty[320];
    char huge[320];
    char unknown_key[320];
    char hf_missing[320];
    char hf_million_experts[320];
    char deep[320];
    char bad_cluster[320];
};

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void write_str(const char *path, const char *s)
{
    write_file(path, s, strlen(s));
}

static int setup(void **state)
{
    struct scratch *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return -1;
    }
    const char *tmp = getenv("TMPDIR");
    (void)snprintf(s->dir, sizeof(s->dir), "%s/moefold-rel-cli-XXXXXX", tmp ? tmp : "/tmp");
    if (mkdtemp(s->dir) == NULL) {
        free(s);
        return -1;
    }
#define SCRATCH(field, name) (void)snprintf(s->field, sizeof(s->field), "%s/" name, s->dir)
    SCRATCH(malformed, "malformed.json");
    SCRATCH(truncated, "truncated.json");
    SCRATCH(binary, "binary.json");
    SCRATCH(text_garbage, "garbage.json");
    SCRATCH(empty, "empty.json");
    SCRATCH(huge, "huge.json");
    SCRATCH(unknown_key, "unknown_key.json");
    SCRATCH(hf_missing, "hf_missing.json");
    SCRATCH(hf_million_experts, "hf_million.json");
    SCRATCH(deep, "deep.json");
    SCRATCH(bad_cluster, "bad_cluster.json");
#undef SCRATCH
    *state = s;
    return 0;
}

static int teardown(void **state)
{
    struct scratch *s = *state;
    const char *files[] = {s->malformed,    s->truncated,  s->binary,
                           s->text_garbage, s->empty,      s->huge,
                           s->unknown_key,  s->hf_missing, s->hf_million_experts,
                           s->deep,         s->bad_cluster};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        (void)unlink(files[i]);
    }
    (void)rmdir(s->dir);
    free(s);
    return 0;
}

/* Control: a valid prediction exits 0 in bounded time, so the harness can see success. */
static void test_valid_control(void **state)
{
    (void)state;
    const char *const *args = ARGS(
        PREDICT, DSV3, H100("1024"), "--tensor-model-parallel-size", "2", "--sequence-parallel",
        "--pipeline-model-parallel-size", "8", "--pipeline-model-parallel-layout", "Et|(tt|)*30mL",
        "--expert-model-parallel-size", "64", "--global-batch-size", "8192");
    struct cli_result *r = malloc(sizeof(*r));
    assert_non_null(r);
    run_moefold(args, r);
    bool ok = check_bounded(args, r) && r->exit_code == 0 && strstr(r->out, "step") != NULL;
    if (!ok) {
        fprintf(stderr, "control failed (exit %d):\n%s\n", r->exit_code, r->out);
    }
    free(r);
    assert_true(ok);
}

/* Malformed, binary, empty, oversized, deeply nested and wrong-schema model files. */
static void test_bad_model_files(void **state)
{
    struct scratch *s = *state;
    write_str(s->malformed, "{\n  \"format\": \"moefold-model\",\n  \"num_layers\": 61,,\n}\n");
    write_str(s->truncated, "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"hidden_size\": 71");
    const unsigned char bin[] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0xff, 0xfe, '{', 0};
    write_file(s->binary, bin, sizeof(bin));
    write_str(s->text_garbage, "\xef\xbb\xbf model: deepseek-v3\nlayers = 61\n");
    write_str(s->empty, "");
    int fd = open(s->huge, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 65L * 1024 * 1024), 0); /* sparse: over the 64 MiB limit */
    assert_int_equal(close(fd), 0);
    write_str(s->unknown_key, "{\"format\": \"moefold-model\", \"version\": 1, \"num_layerz\": 4}");
    write_str(s->hf_missing, "{\"architectures\": [\"MixtralForCausalLM\"], \"num_hidden_layers\": "
                             "32, \"num_local_experts\": 8}");
    write_str(s->hf_million_experts,
              "{\"architectures\": [\"MixtralForCausalLM\"], \"hidden_size\": 4096, "
              "\"intermediate_size\": 14336, \"num_hidden_layers\": 32, \"num_attention_heads\": "
              "32, \"num_key_value_heads\": 8, \"vocab_size\": 32000, \"num_local_experts\": "
              "1000000, \"num_experts_per_tok\": 2}");
    size_t depth = 200000;
    char *deep = malloc(depth + 1);
    assert_non_null(deep);
    memset(deep, '[', depth);
    deep[depth] = '\0';
    write_str(s->deep, deep);
    free(deep);

    struct {
        const char *path;
        const char *want;
    } cases[] = {
        {s->malformed, "malformed JSON"},
        {s->truncated, "malformed JSON"},
        {s->binary, "NUL byte"},
        {s->text_garbage, "malformed JSON"},
        {s->empty, "empty"},
        {s->huge, "limit"},
        {s->unknown_key, "num_layerz"},
        {s->hf_missing, "hidden_size"},
        {s->hf_million_experts, "num_experts"},
        {s->deep, "malformed JSON"},
        {"/nonexistent/dir/config.json", "cannot open"},
        {"/dev/null", "not a regular file"},
        {s->dir, "not a regular file"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        /* Every message names the file it is about. */
        expect_refused(ARGS(PREDICT, "--model-config", cases[i].path, H100("8")),
                       WANT(cases[i].want, cases[i].path));
    }
}

/* Unknown, misspelt, valueless and malformed flags; unknown names. */
static void test_bad_flags_and_names(void **state)
{
    (void)state;
    expect_refused(ARGS(PREDICT, DSV3, H100("1024"), "--bogus-flag", "3"), WANT("--bogus-flag"));
    expect_refused(ARGS(PREDICT, DSV3, H100("1024"), "--tensor-model-paralel-size", "2"),
                   WANT("--tensor-model-paralel-size", "--tensor-model-parallel-size"));
    expect_refused(ARGS(PREDICT, DSV3, "--cluster"), WANT("--cluster", "needs a value"));
    expect_refused(ARGS(PREDICT, DSV3, H100("abc")), WANT("--gpus", "abc"));
    expect_refused(ARGS(PREDICT, DSV3, H100("-8")), WANT("--gpus", "-8"));
    expect_refused(ARGS(PREDICT, DSV3, H100("8"), "--moe-imbalance-cv", "nan"),
                   WANT("--moe-imbalance-cv"));
    expect_refused(ARGS(PREDICT, DSV3, H100("8"), "--micro-batch-size", "1x"),
                   WANT("--micro-batch-size"));
    expect_refused(ARGS(PREDICT, DSV3, H100("8"), "--recompute-modules", "everything"),
                   WANT("everything"));
    expect_refused(
        ARGS(PREDICT, DSV3, H100("1024"), "--pipeline-model-parallel-layout", "Et|(tt|*30mL"),
        WANT("--pipeline-model-parallel-layout"));
    expect_refused(ARGS(PREDICT, "--model", "deepseek-v4", H100("8")),
                   WANT("deepseek-v4", "deepseek-v3"));
    expect_refused(ARGS(PREDICT, DSV3, "--cluster", "dgx-h1000", "--gpus", "8"),
                   WANT("dgx-h1000", "dgx-h100"));
    expect_refused(ARGS(PREDICT, DSV3, "--cluster", "../../etc/passwd", "--gpus", "8"),
                   WANT("../../etc/passwd"));
    expect_refused(ARGS(PREDICT, DSV3, "--model-config", "/dev/null", H100("8")),
                   WANT("give either --model or --model-config"));
    expect_refused(ARGS(PREDICT), WANT("no model"));
    expect_refused(ARGS(PREDICT, DSV3, "--gpus", "8"), WANT("no cluster"));
    expect_refused(ARGS("frobnicate"), WANT("unknown command", "frobnicate"));
    expect_refused(ARGS("accuracy", "--runs", "/nonexistent/runs.json"), WANT("cannot open"));
}

/* A cluster file that is not one: named with the file and the problem. */
static void test_bad_cluster_file(void **state)
{
    struct scratch *s = *state;
    write_str(s->bad_cluster, "{\"format\": \"moefold-model\", \"version\": 1}");
    expect_refused(ARGS(PREDICT, DSV3, "--cluster", s->bad_cluster, "--gpus", "8"),
                   WANT(s->bad_cluster, "moefold-cluster"));
    write_str(s->bad_cluster, "{\"format\": \"moefold-cluster\", \"version\": 99}");
    expect_refused(ARGS(PREDICT, DSV3, "--cluster", s->bad_cluster, "--gpus", "8"),
                   WANT(s->bad_cluster, "version 99"));
}

/* Layouts and GPU counts that cannot work. */
static void test_impossible_layouts(void **state)
{
    (void)state;
    expect_refused(ARGS(PREDICT, DSV3, H100("12")), WANT("--gpus", "multiple of 8"));
    expect_refused(ARGS(PREDICT, DSV3, H100("1024"), "--tensor-model-parallel-size", "3"),
                   WANT("divisible"));
    expect_refused(ARGS(PREDICT, DSV3, H100("1024"), "--expert-model-parallel-size", "512"),
                   WANT("ep"));
    expect_refused(ARGS(PREDICT, DSV3, H100("56"), "--pipeline-model-parallel-size", "7"),
                   WANT("61"));
    expect_refused(ARGS(PREDICT, DSV3, H100("1024"), "--global-batch-size", "1000"),
                   WANT("global batch"));
}

/* Absurd sizes: refused (or computed) in bounded time and memory, never a hang or an OOM. */
static void test_absurd_sizes(void **state)
{
    (void)state;
    expect_refused(ARGS(PREDICT, DSV3, H100("1000000")), WANT("--gpus", "65536"));
    expect_refused(ARGS(PREDICT, DSV3, "--cluster", "gb200-nvl72", "--gpus", "1000000000"),
                   WANT("--gpus"));
    expect_refused(ARGS(PREDICT, DSV3, H100("1024"), "--num-experts", "1000000"),
                   WANT("--num-experts", "4096"));
    expect_refused(ARGS(PREDICT, DSV3, H100("1024"), "--seq-length", "1000000000"),
                   WANT("--seq-length"));
    expect_refused(ARGS(PREDICT, DSV3, H100("1024"), "--num-layers", "1000000"),
                   WANT("--num-layers"));
    expect_refused(ARGS(PREDICT, DSV3, H100("1024"), "--hidden-size", "1048576"),
                   WANT("hidden_size", "deepseek-v3"));
    expect_refused(ARGS(PREDICT, DSV3, H100("65536"), "--expert-model-parallel-size", "256",
                        "--micro-batch-size", "65536"),
                   WANT("--micro-batch-size"));
    /* 2^26 sequences in one step: 64M micro-batches through an 8-stage pipeline. */
    expect_refused(ARGS(PREDICT, "--model", "qwen3-30b-a3b", H100("8"),
                        "--pipeline-model-parallel-size", "8", "--num-layers", "48",
                        "--global-batch-size", "67108864"),
                   WANT("--global-batch-size", "GiB"));
    expect_refused(
        ARGS(PREDICT, DSV3, H100("8"), "--moe-imbalance", "auto", "--moe-imbalance-cv", "1e308"),
        WANT("--moe-imbalance-cv"));
    /* The planner refuses the same absurd sizes before searching. */
    expect_refused(
        ARGS("plan", "--model", "kimi-k2", H100("1000000"), "--global-batch-size", "8192"),
        WANT("--gpus", "65536"));
    expect_refused(
        ARGS("plan", DSV3, H100("1024"), "--global-batch-size", "8192", "--num-experts", "1000000"),
        WANT("--num-experts"));
}

/* Many arguments: more than the Megatron parser's table holds is refused, not overrun. */
static void test_many_arguments(void **state)
{
    (void)state;
    const char *args[CLI_MAX_ARGS + 1];
    int n = 0;
    args[n++] = PREDICT;
    args[n++] = "--model";
    args[n++] = "deepseek-v3";
    while (n + 2 <= CLI_MAX_ARGS) {
        args[n++] = "--lr";
        args[n++] = "1e-4";
    }
    args[n] = NULL;
    /* Accepted with notes (the flag does not affect performance), but must not crash. */
    struct cli_result *r = malloc(sizeof(*r));
    assert_non_null(r);
    run_moefold(args, r);
    bool ok = check_bounded(args, r) && r->exit_code != 0 && strstr(r->out, "no cluster") != NULL;
    free(r);
    assert_true(ok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_control),       cmocka_unit_test(test_bad_model_files),
        cmocka_unit_test(test_bad_flags_and_names), cmocka_unit_test(test_bad_cluster_file),
        cmocka_unit_test(test_impossible_layouts),  cmocka_unit_test(test_absurd_sizes),
        cmocka_unit_test(test_many_arguments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
