/*
 * libFuzzer target: Megatron-LM training logs (cli/megatron_log.h), then the flags the reader
 * rebuilds from the arguments dump through moe_cli_parse_problem (what `moefold compare
 * --megatron-log` does, without a cluster file so each input stays fast).
 *
 * Properties: every rejection has a message naming the log ("f.log") and a known status; an
 * accepted log has a world size of at least 1, a finite positive steady-state step time within
 * the range of the lines it came from, at least one iteration used, and every rebuilt flag word
 * points at a NUL-terminated string with the log line it came from inside the text; the parser
 * takes or rejects those words with a message, never a crash.
 *
 * Seeds: tests/fuzz/seeds/megatron_log/ (shortened logs of the three versions in
 * tests/data/megatron_logs/). Dictionary: tests/fuzz/megatron_log.dict.
 */
#include "cli/common.h"
#include "cli/megatron_log.h"
#include "tests/fuzz/fuzz_util.h"

#include <math.h>

static int count_lines(const uint8_t *data, size_t size)
{
    int n = 1;
    for (size_t i = 0; i < size; i++) {
        n += data[i] == '\n';
    }
    return n;
}

static void check_accepted(const struct moe_megatron_log *log, int lines)
{
    if (log->world_size < 1) {
        fuzz_fail("accepted a log with world size %d", log->world_size);
    }
    if (!(log->step_time_s > 0.0) || !isfinite(log->step_time_s) ||
        log->step_time_s < log->step_time_min_s || log->step_time_s > log->step_time_max_s) {
        fuzz_fail("step time %g outside its lines' range [%g, %g]", log->step_time_s,
                  log->step_time_min_s, log->step_time_max_s);
    }
    if (log->iteration_lines_used < 1 || log->iterations_used < log->iteration_lines_used) {
        fuzz_fail("accepted with %d lines / %d iterations used", log->iteration_lines_used,
                  log->iterations_used);
    }
    for (int i = 0; i < log->num_words; i++) {
        if (log->words[i] == NULL || log->word_line[i] < 1 || log->word_line[i] > lines) {
            fuzz_fail("word %d has no text or line %d outside 1..%d", i, log->word_line[i], lines);
        }
        (void)strlen(log->words[i]);
    }
}

/* The words as `compare --megatron-log` hands them to the predict parser. */
static void parse_words(const struct moe_megatron_log *log)
{
    char **argv = malloc(((size_t)log->num_words + 4) * sizeof(*argv));
    struct moe_cli_problem *p = malloc(sizeof(*p));
    if (argv == NULL || p == NULL) {
        fuzz_fail("out of memory");
    }
    char gpus[32];
    (void)snprintf(gpus, sizeof(gpus), "%d", log->world_size);
    int argc = 0;
    argv[argc++] = (char *)"compare";
    argv[argc++] = (char *)"--gpus";
    argv[argc++] = gpus;
    for (int i = 0; i < log->num_words; i++) {
        argv[argc++] = log->words[i];
    }
    struct moe_diag diag = {0};
    enum moe_status st = moe_cli_parse_problem(argc, argv, NULL, NULL, p, NULL, &diag);
    (void)fuzz_check_status("moe_cli_parse_problem", st, &diag, NULL);
    free(p);
    free(argv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct moe_megatron_log log;
    struct moe_diag diag = {0};
    moe_mlog_init(&log);
    enum moe_status st = moe_mlog_parse((const char *)data, size, "f.log", &log, &diag);
    if (fuzz_check_status("moe_mlog_parse", st, &diag, "f.log")) {
        check_accepted(&log, count_lines(data, size));
        parse_words(&log);
    }
    moe_mlog_fini(&log);
    return 0;
}
