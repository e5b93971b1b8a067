/*
 * libFuzzer target: run files ("format": "moefold-run", what moefold-train measured) through
 * moe_run_read, as `moefold compare` reads them. The input is written to a scratch file in $TMPDIR
 * for each run.
 *
 * Properties: a rejection has a message naming the file (in the message or diag.source); an
 * accepted file has at most MOE_RUN_MAX_MOE_LAYERS load entries and its trees are released by
 * moe_run_fini (LeakSanitizer checks).
 *
 * Seeds: one run file per published run (tests/fuzz/gen_seeds.c: the closed-form prediction laid
 * out as a measurement, with losses, expert loads and the plan), since no measured file is
 * committed yet. Dictionary: tests/fuzz/run_file.dict.
 */
#include "tests/fuzz/fuzz_util.h"
#include "topologies/run_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[4096];
    if (!fuzz_write_scratch("run", data, size, path, sizeof(path))) {
        fuzz_fail("cannot write the scratch file %s", path);
    }
    struct moe_run *run = malloc(sizeof(*run));
    if (run == NULL) {
        fuzz_fail("out of memory");
    }
    struct moe_diag diag = {0};
    enum moe_status st = moe_run_read(path, run, &diag);
    (void)unlink(path);
    if (fuzz_check_status("moe_run_read", st, &diag, path)) {
        if (run->num_moe_layers < 0 || run->num_moe_layers > MOE_RUN_MAX_MOE_LAYERS) {
            fuzz_fail("moe_run_read accepted %d MoE layers", run->num_moe_layers);
        }
    } else if (run->plan != NULL || run->tokens_per_expert != NULL) {
        fuzz_fail("moe_run_read failed but handed out trees");
    }
    moe_run_fini(run);
    free(run);
    return 0;
}
