/*
 * libFuzzer target: the published-runs file (tests/data/published_runs.json,
 * "format": "moefold-published-runs") through moe_accuracy_run, which reads the file and, for each
 * run, splits its Megatron flags, builds the problem as `moefold predict` does
 * (moe_cli_parse_problem: preset, cluster by name, GPU count), resolves and predicts with the
 * event-simulated schedule. The input is written to a scratch file in $TMPDIR for each run.
 *
 * Properties: a rejection of the file has a message naming it; every row is either predicted
 * (ok) or carries a non-empty error; the row count is within bounds.
 *
 * Seeds: tests/data/published_runs.json and one file per run of it (tests/fuzz/gen_seeds.c).
 * Dictionary: tests/fuzz/published_runs.dict (JSON keys and Megatron flags).
 */
#include "cli/accuracy.h"
#include "tests/fuzz/fuzz_util.h"

#define MAX_ROWS 16 /* fewer than the file allows: keeps each run short; more is an error */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[4096];
    if (!fuzz_write_scratch("runs", data, size, path, sizeof(path))) {
        fuzz_fail("cannot write the scratch file %s", path);
    }
    struct moe_accuracy_row *rows = calloc(MAX_ROWS, sizeof(*rows));
    if (rows == NULL) {
        fuzz_fail("out of memory");
    }
    struct moe_diag diag = {0};
    int n = -1;
    enum moe_status st = moe_accuracy_run(path, rows, MAX_ROWS, &n, &diag);
    (void)unlink(path);
    (void)fuzz_check_status("moe_accuracy_run", st, &diag, path);
    if (n < 0 || n > MAX_ROWS) {
        fuzz_fail("moe_accuracy_run returned %d rows (max %d)", n, MAX_ROWS);
    }
    for (int i = 0; i < n; i++) {
        if (!rows[i].ok && rows[i].error[0] == '\0') {
            fuzz_fail("run %d (%s) failed without an error message", i, rows[i].id);
        }
    }
    free(rows);
    return 0;
}
