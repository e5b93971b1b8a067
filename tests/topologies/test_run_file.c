/*
 * Tests for topologies/run_file.c, the run-file reader `moefold compare` uses: a minimal run file
 * written here by hand reads back into struct moe_run (GiB to bytes); the optional keys the engine
 * adds -- buffers_detail_gib (the buffers category's parts) and expert_rows_factor -- arrive in
 * their fields and are 0 / absent when missing; an unknown or missing key inside
 * buffers_detail_gib, a negative part and an unknown top-level key are errors naming them. Files
 * are written into a fresh folder under /tmp.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* cmocka.h needs setjmp.h, stdarg.h, stddef.h and stdint.h first. */
#include "topologies/run_file.h"

#include <cmocka.h>

#define GIB 1073741824.0

/* The keys every run file has (engine/report.c), with round values; EXTRA is spliced in. */
#define RUN_HEAD                                                                                   \
    "{\"format\": \"moefold-run\", \"version\": 1, \"model\": \"tiny-moe\", \"cluster\": "         \
    "\"local\","                                                                                   \
    " \"backend\": \"cpu+mpi\", \"num_ranks\": 4, \"steps\": 3, \"measured_steps\": 2,"            \
    " \"tokens_per_step\": 512, \"step_time_s\": 0.5, \"tokens_per_s\": 1024,"                     \
    " \"time_s\": {\"compute\": 0.25, \"expert_gemm\": 0.125, \"dispatch\": 0.0625,"               \
    " \"combine\": 0.0625, \"tp_comm\": 0, \"cp_comm\": 0, \"ep_comm\": 0.125, \"pp_comm\": 0,"    \
    " \"dp_comm\": 0, \"pp_bubble\": 0, \"optimizer\": 0, \"host_overhead\": 0,"                   \
    " \"exposed_comm\": 0.125},"                                                                   \
    " \"per_step\": [{\"step\": 1, \"loss\": 5.5, \"step_time_s\": 0.6},"                          \
    " {\"step\": 2, \"loss\": 5.0, \"step_time_s\": 0.5}],"                                        \
    " \"memory_gib\": {\"weights\": 1, \"grads\": 1, \"optimizer\": 3, \"activations\": 2,"        \
    " \"buffers\": 1.5, \"total\": 8.5, \"host_offload\": 0}"

struct fixture {
    char dir[64]; /* scratch folder */
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    if (f == NULL) {
        return -1;
    }
    (void)snprintf(f->dir, sizeof(f->dir), "/tmp/moefold-runfile-XXXXXX");
    *state = f;
    return mkdtemp(f->dir) != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    char cmd[128];
    (void)snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
    int rc = system(cmd) == 0 ? 0 : -1;
    free(f);
    return rc;
}

/* Write RUN_HEAD + extra + "}" to f->dir/name and read it; *diag gets the reader's message. */
static enum moe_status read_text(const struct fixture *f,
                                 const char *name,
                                 const char *extra,
                                 struct moe_run *run,
                                 struct moe_diag *diag)
{
    char path[128];
    (void)snprintf(path, sizeof(path), "%s/%s", f->dir, name);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    assert_true(fprintf(fp, "%s%s}\n", RUN_HEAD, extra) > 0);
    assert_int_equal(fclose(fp), 0);
    memset(diag, 0, sizeof(*diag));
    return moe_run_read(path, run, diag);
}

static void test_without_the_optional_keys(void **state)
{
    const struct fixture *f = *state;
    struct moe_run r;
    struct moe_diag diag;
    assert_int_equal(read_text(f, "plain.json", "", &r, &diag), MOE_OK);
    assert_int_equal(r.num_ranks, 4);
    assert_true(r.mem.buffers == 1.5 * GIB);
    assert_true(r.first_loss == 5.5 && r.final_loss == 5.0);
    assert_false(r.has_buffers_detail);
    assert_true(r.expert_rows_factor == 0.0);
    assert_true(r.expert_active_fraction == 0.0);
    assert_true(r.buffers_detail.dispatch == 0.0 && r.buffers_detail.other == 0.0);
    moe_run_fini(&r);
}

static void test_buffers_detail_and_rows_factor(void **state)
{
    const struct fixture *f = *state;
    struct moe_run r;
    struct moe_diag diag;
    const char *extra = ", \"expert_rows_factor\": 8, \"expert_active_fraction\": 0.375,"
                        " \"buffers_detail_gib\": {\"dispatch\": 0.5, \"temporaries\": 0.25,"
                        " \"recompute_scratch\": 0.125, \"offload_staging\": 0.0625,"
                        " \"pipeline\": 0.5, \"other\": 0.0625}";
    enum moe_status st = read_text(f, "detail.json", extra, &r, &diag);
    if (st != MOE_OK) {
        print_error("%s\n", diag.message);
    }
    assert_int_equal(st, MOE_OK);
    assert_true(r.has_buffers_detail);
    assert_true(r.expert_rows_factor == 8.0);
    assert_true(r.expert_active_fraction == 0.375);
    const struct moe_run_buffers_detail *b = &r.buffers_detail;
    assert_true(b->dispatch == 0.5 * GIB);
    assert_true(b->temporaries == 0.25 * GIB);
    assert_true(b->recompute_scratch == 0.125 * GIB);
    assert_true(b->offload_staging == 0.0625 * GIB);
    assert_true(b->pipeline == 0.5 * GIB);
    assert_true(b->other == 0.0625 * GIB);
    /* The parts written here add up to memory_gib.buffers (1.5 GiB), as the engine's do. */
    double sum = b->dispatch + b->temporaries + b->recompute_scratch + b->offload_staging +
                 b->pipeline + b->other;
    assert_true(sum == r.mem.buffers);
    moe_run_fini(&r);
}

static void
expect_error(const struct fixture *f, const char *name, const char *extra, const char *needle)
{
    struct moe_run r;
    struct moe_diag diag;
    assert_int_equal(read_text(f, name, extra, &r, &diag), MOE_ERR_INVALID);
    if (strstr(diag.message, needle) == NULL) {
        fail_msg("message \"%s\" does not name \"%s\"", diag.message, needle);
    }
    moe_run_fini(&r);
}

static void test_bad_optional_keys(void **state)
{
    const struct fixture *f = *state;
    const char *all = "\"dispatch\": 0.5, \"temporaries\": 0.25, \"recompute_scratch\": 0,"
                      " \"offload_staging\": 0, \"pipeline\": 0.5, \"other\": 0.25";
    char extra[512];
    (void)snprintf(extra, sizeof(extra), ", \"buffers_detail_gib\": {%s, \"scratch\": 1}", all);
    expect_error(f, "unknown_part.json", extra, "scratch");
    expect_error(f, "missing_part.json",
                 ", \"buffers_detail_gib\": {\"dispatch\": 0.5, \"temporaries\": 0.25,"
                 " \"recompute_scratch\": 0, \"offload_staging\": 0, \"pipeline\": 0.75}",
                 "other");
    expect_error(f, "negative_part.json",
                 ", \"buffers_detail_gib\": {\"dispatch\": -0.5, \"temporaries\": 0.25,"
                 " \"recompute_scratch\": 0, \"offload_staging\": 0, \"pipeline\": 0.5,"
                 " \"other\": 0.25}",
                 "dispatch");
    expect_error(f, "negative_factor.json", ", \"expert_rows_factor\": -1", "expert_rows_factor");
    expect_error(f, "string_factor.json", ", \"expert_rows_factor\": \"ep\"", "expert_rows_factor");
    expect_error(f, "active_over_one.json", ", \"expert_active_fraction\": 1.5",
                 "expert_active_fraction");
    expect_error(f, "active_negative.json", ", \"expert_active_fraction\": -0.25",
                 "expert_active_fraction");
    expect_error(f, "unknown_key.json", ", \"expert_row_factor\": 2", "expert_row_factor");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_without_the_optional_keys),
        cmocka_unit_test(test_buffers_detail_and_rows_factor),
        cmocka_unit_test(test_bad_optional_keys),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
