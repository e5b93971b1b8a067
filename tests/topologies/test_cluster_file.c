/*
 * Tests for topologies/cluster_file.c: every shipped cluster file loads and validates, published
 * figures arrive where they belong (H100 989.4 / 1978.9 dense TFLOPS, NVL72's 72-GPU domain),
 * JSON round trips give the identical struct, and broken files (unknown key, figure without a
 * source, negative bandwidth, malformed JSON, missing file, unknown name) fail with a message that
 * names the problem. Broken files are written into a fresh folder under /tmp. "extends": a file
 * stating only what differs loads as its base with those figures replaced, inherits every other
 * key (sections the reader does not know yet included, as the merged tree shows), replaces a
 * figure whole (no note of the base's left behind), chains, and keeps the loader's guarantees
 * (unknown keys, sources, a cycle, a missing base, no name of its own: errors naming the files).
 */
#include <cjson/cJSON.h>
#include <limits.h>
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
/* cmocka.h needs setjmp.h, stdarg.h, stddef.h and stdint.h first. */
#include "tests/test_util.h"
#include "topologies/cluster_costs.h"
#include "topologies/cluster_file.h"
#include "topologies/json_util.h"

#include <cmocka.h>

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

/* The clusters the issue asks for; the folder may hold more (e.g. a calibrated local.json). */
static const char *const shipped[] = {
    "dgx-b200", "dgx-h100", "dgx-h200", "gb200-nvl72", "gb300-nvl72", "h800", "hgx-b300",
};

struct fixture {
    char topo_dir[PATH_MAX]; /* the source tree's topologies/ */
    char tmp_dir[64];        /* scratch folder for broken files */
};

/* True when a and b name the same existing directory. */
static bool same_dir(const char *a, const char *b)
{
    struct stat sa;
    struct stat sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && S_ISDIR(sa.st_mode) &&
           sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof(*fx));
    char rel[PATH_MAX];
    char cwd[PATH_MAX];
    if (fx == NULL || moe_test_root_path("topologies", rel, sizeof(rel)) == NULL ||
        getcwd(cwd, sizeof(cwd)) == NULL) {
        free(fx);
        return -1;
    }
    /* Run from elsewhere than the repository root: find the folder from the executable. */
    struct stat st;
    if (stat(rel, &st) != 0 || !S_ISDIR(st.st_mode)) {
        (void)unsetenv("MOEFOLD_TOPOLOGIES");
        if (moe_cluster_dir(rel, sizeof(rel)) == NULL) {
            free(fx);
            return -1;
        }
    }
    /* Absolute, so that a test may change the working directory. */
    if (rel[0] == '/') {
        (void)snprintf(fx->topo_dir, sizeof(fx->topo_dir), "%s", rel);
    } else {
        (void)snprintf(fx->topo_dir, sizeof(fx->topo_dir), "%.2000s/%.2000s", cwd, rel);
    }
    (void)snprintf(fx->tmp_dir, sizeof(fx->tmp_dir), "/tmp/moefold-cluster-test-XXXXXX");
    /* Name lookup goes through the source tree unless a test says otherwise. */
    if (mkdtemp(fx->tmp_dir) == NULL || setenv("MOEFOLD_TOPOLOGIES", fx->topo_dir, 1) != 0) {
        free(fx);
        return -1;
    }
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    char cmd[PATH_MAX];
    (void)snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx->tmp_dir);
    int rc = system(cmd);
    free(fx);
    return rc == 0 ? 0 : -1;
}

/* |got - want| <= tol, with both values printed on failure. */
static void assert_near(double got, double want, double tol)
{
    if (!(fabs(got - want) <= tol)) {
        print_error("got %.17g, want %.17g (tolerance %g)\n", got, want, tol);
    }
    assert_true(fabs(got - want) <= tol);
}

static void load_ok(const char *name, struct moe_cluster *cl)
{
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    enum moe_status st = moe_cluster_load(name, cl, &diag);
    if (st != MOE_OK) {
        print_error("%s: %s\n", name, diag.message);
    }
    assert_int_equal(st, MOE_OK);
}

static void test_every_shipped_cluster_loads(void **state)
{
    (void)state;
    for (size_t i = 0; i < MOE_ARRAY_LEN(shipped); i++) {
        struct moe_cluster cl;
        load_ok(shipped[i], &cl);
        assert_string_equal(cl.name, shipped[i]); /* "name" matches the file name */
        struct moe_diag diag;
        memset(&diag, 0, sizeof(diag));
        assert_int_equal(moe_cluster_validate(&cl, &diag), MOE_OK);
        assert_true(cl.description[0] != '\0');
        assert_int_equal(cl.max_gpus, 65536);
    }
}

static void test_published_figures(void **state)
{
    (void)state;
    struct moe_cluster cl;
    load_ok("dgx-h100", &cl);
    /* NVIDIA H100 SXM5 dense peaks (hardware.md section 2). */
    assert_near(cl.gpu.peak_tflops[MOE_MATH_BF16], 989.4, 1e-9);
    assert_near(cl.gpu.peak_tflops[MOE_MATH_FP8], 1978.9, 1e-9);
    assert_near(cl.gpu.peak_tflops[MOE_MATH_FP4], 0.0, 0.0);
    assert_true(cl.gpu.has_fp8);
    assert_false(cl.gpu.has_mx);
    assert_int_equal(cl.gpu.num_sms, 132);
    assert_int_equal(cl.gpus_per_node, 8);
    assert_int_equal(cl.nvlink.domain_gpus, 8);
    assert_near(cl.nvlink.gbps, 450.0, 0.0);
    assert_near(cl.net.nic_gbps, 50.0, 0.0); /* 400 Gb/s CX7 */

    load_ok("h800", &cl); /* same die as H100, NVLink 200 GB/s per direction */
    assert_near(cl.gpu.peak_tflops[MOE_MATH_BF16], 989.4, 1e-9);
    assert_near(cl.gpu.peak_tflops[MOE_MATH_FP8], 1978.9, 1e-9);
    assert_near(cl.nvlink.gbps, 200.0, 0.0);
    assert_int_equal(cl.gpus_per_node, 8);

    load_ok("gb200-nvl72", &cl);
    assert_int_equal(cl.nvlink.domain_gpus, 72);
    assert_int_equal(cl.gpus_per_node, 4);
    assert_true(cl.gpu.has_mx);
    assert_near(cl.gpu.peak_tflops[MOE_MATH_BF16], 2500.0, 0.0);
    assert_near(cl.nvlink.gbps, 900.0, 0.0);

    load_ok("gb300-nvl72", &cl);
    assert_int_equal(cl.nvlink.domain_gpus, 72);
    assert_near(cl.net.nic_gbps, 100.0, 0.0); /* 800 Gb/s CX8 */

    load_ok("dgx-b200", &cl);
    assert_near(cl.gpu.peak_tflops[MOE_MATH_FP4], 9000.0, 0.0);
    assert_int_equal(cl.gpu.num_sms, 148);
}

/* load -> to_json -> from_json gives the same struct; so does a print/parse of the text. */
static void test_round_trip(void **state)
{
    (void)state;
    for (size_t i = 0; i < MOE_ARRAY_LEN(shipped); i++) {
        struct moe_cluster a;
        struct moe_cluster b;
        struct moe_cluster c;
        struct moe_diag diag;
        memset(&diag, 0, sizeof(diag));
        load_ok(shipped[i], &a);
        cJSON *json = moe_cluster_to_json(&a, "round-trip test");
        assert_non_null(json);
        assert_int_equal(moe_cluster_from_json(json, "round trip", &b, &diag), MOE_OK);
        assert_memory_equal(&a, &b, sizeof(a));
        char *text = cJSON_Print(json);
        assert_non_null(text);
        cJSON *reparsed = NULL;
        assert_int_equal(moe_json_parse(text, strlen(text), "printed", &reparsed, &diag), MOE_OK);
        assert_int_equal(moe_cluster_from_json(reparsed, "printed", &c, &diag), MOE_OK);
        assert_memory_equal(&a, &c, sizeof(a));
        /* Every figure carries the given source. */
        const cJSON *nv = cJSON_GetObjectItemCaseSensitive(json, "nvlink");
        const cJSON *gbps = cJSON_GetObjectItemCaseSensitive(nv, "gbps");
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(gbps, "source");
        assert_true(cJSON_IsString(src));
        assert_string_equal(src->valuestring, "round-trip test");
        free(text);
        cJSON_Delete(reparsed);
        cJSON_Delete(json);
    }
}

/* Read dgx-h100.json as a tree to mutate. */
static cJSON *h100_tree(const struct fixture *fx)
{
    char path[PATH_MAX + 32];
    (void)snprintf(path, sizeof(path), "%s/dgx-h100.json", fx->topo_dir);
    cJSON *root = NULL;
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_json_read_file(path, &root, &diag), MOE_OK);
    return root;
}

/* Write root to tmp_dir/file, load it by path, expect status and every needle in the message. */
static void expect_load_fails(const struct fixture *fx,
                              const cJSON *root,
                              const char *file,
                              enum moe_status want,
                              const char *needle1,
                              const char *needle2)
{
    char path[128];
    (void)snprintf(path, sizeof(path), "%s/%s", fx->tmp_dir, file);
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_json_write_file(path, root, &diag), MOE_OK);
    struct moe_cluster cl;
    enum moe_status st = moe_cluster_load(path, &cl, &diag);
    if (st != want || strstr(diag.message, needle1) == NULL ||
        (needle2 != NULL && strstr(diag.message, needle2) == NULL)) {
        print_error("%s: got %d \"%s\"\n", file, (int)st, diag.message);
    }
    assert_int_equal(st, want);
    assert_non_null(strstr(diag.message, needle1));
    if (needle2 != NULL) {
        assert_non_null(strstr(diag.message, needle2));
    }
    assert_non_null(strstr(diag.message, file)); /* the file is named */
}

static void test_unknown_keys(void **state)
{
    const struct fixture *fx = *state;
    cJSON *root = h100_tree(fx);
    cJSON *gpu = cJSON_GetObjectItemCaseSensitive(root, "gpu");
    cJSON_AddItemToObject(gpu, "xyz", cJSON_CreateNumber(1));
    expect_load_fails(fx, root, "unknown-gpu-key.json", MOE_ERR_INVALID, "cluster.gpu.xyz",
                      "unknown key");
    cJSON_Delete(root);

    root = h100_tree(fx); /* nested two levels down */
    cJSON *peaks = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "gpu"),
                                                    "peak_tflops");
    cJSON_AddItemToObject(peaks, "int8", cJSON_CreateNumber(1979));
    expect_load_fails(fx, root, "unknown-peak-key.json", MOE_ERR_INVALID,
                      "cluster.gpu.peak_tflops.int8", NULL);
    cJSON_Delete(root);

    root = h100_tree(fx); /* a typo at the top level */
    cJSON_AddItemToObject(root, "gpus_per_nod", cJSON_CreateNumber(8));
    expect_load_fails(fx, root, "unknown-top-key.json", MOE_ERR_INVALID, "cluster.gpus_per_nod",
                      NULL);
    cJSON_Delete(root);

    root = h100_tree(fx); /* a required key missing */
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "scaleout"),
                                            "a2a_eff");
    expect_load_fails(fx, root, "missing-key.json", MOE_ERR_INVALID, "cluster.scaleout",
                      "\"a2a_eff\"");
    cJSON_Delete(root);
}

/* The optional nvlink.busbw_by_size (calibrate on a CPU host): written only when measured, read
 * back exactly; a typo inside it, unequal arrays or falling sizes fail the load. */
static void test_busbw_by_size(void **state)
{
    const struct fixture *fx = *state;
    struct moe_cluster a;
    struct moe_cluster b;
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    load_ok("dgx-h100", &a);
    cJSON *json = moe_cluster_to_json(&a, "test");
    assert_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(json, "nvlink"),
                                                 "busbw_by_size"));
    cJSON_Delete(json);
    struct moe_busbw_table *t = &a.nvlink.busbw_by_size;
    t->num_sizes[MOE_BUSBW_REDUCESCATTER] = 3;
    for (int i = 0; i < 3; i++) {
        t->bytes[MOE_BUSBW_REDUCESCATTER][i] = 8192.0 * (1 << (2 * i));
        t->gbps[MOE_BUSBW_REDUCESCATTER][i] = 1.5 + i;
    }
    json = moe_cluster_to_json(&a, "test");
    assert_int_equal(moe_cluster_from_json(json, "round trip", &b, &diag), MOE_OK);
    assert_memory_equal(&a, &b, sizeof(a));
    cJSON *tab = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(json, "nvlink"),
                                                  "busbw_by_size");
    cJSON *row = cJSON_GetObjectItemCaseSensitive(tab, "reducescatter");
    cJSON_AddItemToObject(row, "latency", cJSON_CreateNumber(1));
    expect_load_fails(fx, json, "busbw-typo.json", MOE_ERR_INVALID, "latency", NULL);
    cJSON_DeleteItemFromObjectCaseSensitive(row, "latency");
    cJSON_DeleteItemFromArray(cJSON_GetObjectItemCaseSensitive(row, "bytes"), 2);
    expect_load_fails(fx, json, "busbw-short.json", MOE_ERR_INVALID, "equal length", NULL);
    double falling[3] = {8192.0, 4096.0, 65536.0};
    cJSON_ReplaceItemInObjectCaseSensitive(row, "bytes", cJSON_CreateDoubleArray(falling, 3));
    expect_load_fails(fx, json, "busbw-falling.json", MOE_ERR_INVALID, "sizes must rise", NULL);
    cJSON_Delete(json);
}

static void test_figure_needs_source(void **state)
{
    const struct fixture *fx = *state;
    cJSON *root = h100_tree(fx);
    cJSON *hbm =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "gpu"), "hbm_gib");
    cJSON_DeleteItemFromObjectCaseSensitive(hbm, "source");
    expect_load_fails(fx, root, "no-source.json", MOE_ERR_INVALID, "cluster.gpu.hbm_gib", "source");
    cJSON_Delete(root);

    root = h100_tree(fx); /* a bare number instead of a figure */
    cJSON *nv = cJSON_GetObjectItemCaseSensitive(root, "nvlink");
    cJSON_ReplaceItemInObjectCaseSensitive(nv, "gbps", cJSON_CreateNumber(450));
    expect_load_fails(fx, root, "bare-number.json", MOE_ERR_INVALID, "cluster.nvlink.gbps",
                      "\"source\"");
    cJSON_Delete(root);
}

static void set_value(cJSON *root, const char *section, const char *key, double v)
{
    cJSON *fig =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, section), key);
    assert_non_null(fig);
    cJSON_ReplaceItemInObjectCaseSensitive(fig, "value", cJSON_CreateNumber(v));
}

static void test_bad_values(void **state)
{
    const struct fixture *fx = *state;
    cJSON *root = h100_tree(fx);
    set_value(root, "nvlink", "gbps", -450);
    expect_load_fails(fx, root, "negative-bw.json", MOE_ERR_INVALID, "cluster.nvlink.gbps", "-450");
    cJSON_Delete(root);

    root = h100_tree(fx); /* passes the loose range, fails validation */
    set_value(root, "scaleout", "nic_gbps", 0);
    expect_load_fails(fx, root, "zero-nic.json", MOE_ERR_INVALID, "scaleout.nic_gbps = 0",
                      "must be in (0");
    cJSON_Delete(root);

    root = h100_tree(fx);
    set_value(root, "nvlink", "domain_gpus", 8.5);
    expect_load_fails(fx, root, "fractional-int.json", MOE_ERR_INVALID,
                      "cluster.nvlink.domain_gpus", "whole number");
    cJSON_Delete(root);

    root = h100_tree(fx);
    set_value(root, "nvlink", "domain_gpus", 6);
    expect_load_fails(fx, root, "bad-domain.json", MOE_ERR_INVALID, "nvlink.domain_gpus = 6",
                      "one must divide the other");
    cJSON_Delete(root);

    root = h100_tree(fx);
    cJSON_ReplaceItemInObjectCaseSensitive(root, "version", cJSON_CreateNumber(2));
    expect_load_fails(fx, root, "newer.json", MOE_ERR_UNSUPPORTED, "version 2", "upgrade");
    cJSON_Delete(root);

    root = h100_tree(fx);
    cJSON_ReplaceItemInObjectCaseSensitive(root, "format", cJSON_CreateString("moefold-model"));
    expect_load_fails(fx, root, "wrong-format.json", MOE_ERR_INVALID, "moefold-cluster", NULL);
    cJSON_Delete(root);
}

static void test_malformed_and_missing(void **state)
{
    const struct fixture *fx = *state;
    char path[128];
    (void)snprintf(path, sizeof(path), "%s/malformed.json", fx->tmp_dir);
    const char *text = "{\n  \"format\": \"moefold-cluster\",\n  \"version\": 1,\n  \"name\": \n";
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_file_write_atomic(path, text, strlen(text), &diag), MOE_OK);
    struct moe_cluster cl;
    assert_int_equal(moe_cluster_load(path, &cl, &diag), MOE_ERR_PARSE);
    assert_non_null(strstr(diag.message, "malformed JSON"));
    assert_non_null(strstr(diag.message, "malformed.json"));
    assert_true(diag.line >= 4);

    memset(&diag, 0, sizeof(diag));
    (void)snprintf(path, sizeof(path), "%s/no-such-file.json", fx->tmp_dir);
    assert_int_equal(moe_cluster_load(path, &cl, &diag), MOE_ERR_IO);
    assert_non_null(strstr(diag.message, "no-such-file.json"));
    assert_non_null(strstr(diag.message, "cannot open"));

    /* An unknown name lists the known ones. */
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_cluster_load("dgx-h1000", &cl, &diag), MOE_ERR_NOT_FOUND);
    assert_non_null(strstr(diag.message, "unknown cluster \"dgx-h1000\""));
    assert_non_null(strstr(diag.message, "dgx-h100, dgx-h200"));
    assert_string_equal(diag.source, "--cluster");

    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_cluster_load("", &cl, &diag), MOE_ERR_INVALID);
    assert_int_equal(moe_cluster_load("..", &cl, &diag), MOE_ERR_NOT_FOUND);
}

static void test_list_and_dir(void **state)
{
    const struct fixture *fx = *state;
    char names[32][MOE_NAME_LEN];
    size_t n = 0;
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_cluster_list(names, 32, &n, &diag), MOE_OK);
    assert_true(n >= MOE_ARRAY_LEN(shipped));
    for (size_t i = 1; i < n; i++) {
        assert_true(strcmp(names[i - 1], names[i]) < 0); /* sorted */
    }
    for (size_t i = 0; i < MOE_ARRAY_LEN(shipped); i++) {
        bool found = false;
        for (size_t j = 0; j < n && !found; j++) {
            found = strcmp(names[j], shipped[i]) == 0;
        }
        assert_true(found);
    }
    char first[2][MOE_NAME_LEN];
    memcpy(first, names, sizeof(first));
    assert_int_equal(moe_cluster_list(names, 2, &n, &diag), MOE_OK); /* capped, first in order */
    assert_int_equal(n, 2);
    assert_string_equal(names[0], first[0]);
    assert_string_equal(names[1], first[1]);

    /* $MOEFOLD_TOPOLOGIES: a folder with one copied cluster and a file that is not JSON. */
    char dir[128];
    (void)snprintf(dir, sizeof(dir), "%s/alt", fx->tmp_dir);
    char cmd[PATH_MAX * 2];
    (void)snprintf(cmd, sizeof(cmd),
                   "mkdir -p '%s' && cp '%s/h800.json' '%s/mine.json' && "
                   "touch '%s/README.md'",
                   dir, fx->topo_dir, dir, dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(setenv("MOEFOLD_TOPOLOGIES", dir, 1), 0);
    char got[PATH_MAX];
    assert_string_equal(moe_cluster_dir(got, sizeof(got)), dir);
    assert_int_equal(moe_cluster_list(names, 32, &n, &diag), MOE_OK);
    assert_int_equal(n, 1);
    assert_string_equal(names[0], "mine");
    struct moe_cluster cl;
    load_ok("mine", &cl);
    assert_string_equal(cl.name, "h800"); /* the file's own name stays */

    /* Without the variable the folder is found from the executable, whatever the cwd. */
    assert_int_equal(unsetenv("MOEFOLD_TOPOLOGIES"), 0);
    char cwd[PATH_MAX];
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_int_equal(chdir("/"), 0);
    const char *found = moe_cluster_dir(got, sizeof(got));
    load_ok("dgx-h100", &cl);
    assert_int_equal(chdir(cwd), 0);
    assert_int_equal(setenv("MOEFOLD_TOPOLOGIES", fx->topo_dir, 1), 0);
    assert_non_null(found);
    assert_true(found[0] == '/'); /* from /proc/self/exe, not the "./topologies" fallback */
    assert_true(same_dir(found, fx->topo_dir));
}

/* The cloud systems: each extends the reference system with its GPU, keeps the GPU and every
 * software figure of it, and states the provider's NIC bandwidth per GPU. */
static void test_cloud_clusters(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        const char *base;
        double nic_gbps;
    } cloud[] = {
        {"aws-p5", "dgx-h100", 50},       {"aws-p5e", "dgx-h200", 50},
        {"aws-p6-b200", "dgx-b200", 50},  {"aws-p6-b300", "hgx-b300", 100},
        {"gcp-a3-mega", "dgx-h100", 25},  {"gcp-a3-ultra", "dgx-h200", 50},
        {"gcp-a4", "dgx-b200", 50},       {"azure-nd-h100-v5", "dgx-h100", 50},
        {"oci-gb200", "gb200-nvl72", 50}, {"oci-gb300", "gb300-nvl72", 100},
    };
    for (size_t i = 0; i < MOE_ARRAY_LEN(cloud); i++) {
        char base_name[64];
        struct moe_diag diag;
        memset(&diag, 0, sizeof(diag));
        assert_int_equal(moe_cluster_file_base(cloud[i].name, base_name, sizeof(base_name), &diag),
                         MOE_OK);
        assert_string_equal(base_name, cloud[i].base);
        struct moe_cluster cl;
        struct moe_cluster base;
        load_ok(cloud[i].name, &cl);
        load_ok(cloud[i].base, &base);
        assert_string_equal(cl.name, cloud[i].name);
        assert_near(cl.net.nic_gbps, cloud[i].nic_gbps, 0);
        assert_memory_equal(&cl.gpu, &base.gpu,
                            sizeof(cl.gpu)); /* GPU and GEMM figures inherited */
        assert_memory_equal(&cl.overheads, &base.overheads, sizeof(cl.overheads));
        assert_int_equal(cl.gpus_per_node, base.gpus_per_node);
        /* The board power is the base's; PUE and a dated price are the provider's. */
        struct moe_cluster_costs costs;
        struct moe_cluster_costs base_costs;
        assert_int_equal(moe_cluster_costs_load(cloud[i].name, &costs, &diag), MOE_OK);
        assert_int_equal(moe_cluster_costs_load(cloud[i].base, &base_costs, &diag), MOE_OK);
        assert_true(costs.has_gpu_tdp && costs.gpu_tdp_w == base_costs.gpu_tdp_w);
        assert_true(costs.has_pue && costs.has_price && costs.price_per_gpu_hour_usd > 0.0);
        assert_true(costs.price_date[0] != '\0' && costs.price_source[0] != '\0');
    }
}

/* A file extending `base` with the given sections (JSON text of the object's inside). */
static void write_child(const struct fixture *fx,
                        const char *file,
                        const char *name,
                        const char *base,
                        const char *body)
{
    char path[256];
    char text[4096];
    (void)snprintf(path, sizeof(path), "%s/%s", fx->tmp_dir, file);
    (void)snprintf(text, sizeof(text),
                   "{\"format\": \"moefold-cluster\", \"version\": 1, \"name\": \"%s\",\n"
                   " \"description\": \"test\", \"extends\": \"%s\"%s%s}\n",
                   name, base, body[0] ? ",\n " : "", body);
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_file_write_atomic(path, text, strlen(text), &diag), MOE_OK);
}

static enum moe_status
load_tmp(const struct fixture *fx, const char *file, struct moe_cluster *cl, struct moe_diag *diag)
{
    char path[256];
    (void)snprintf(path, sizeof(path), "%s/%s", fx->tmp_dir, file);
    memset(diag, 0, sizeof(*diag));
    return moe_cluster_load(path, cl, diag);
}

static void test_extends(void **state)
{
    const struct fixture *fx = *state;
    struct moe_cluster base;
    struct moe_cluster cl;
    struct moe_diag diag;
    load_ok("dgx-h100", &base);
    /* Only the network differs: everything else is the base's, bit for bit. */
    write_child(fx, "net.json", "net", "dgx-h100",
                "\"scaleout\": {\"nic_gbps\": {\"value\": 25, \"source\": \"test sheet\"},\n"
                " \"latency_us\": {\"value\": 20, \"source\": \"test\"}}");
    assert_int_equal(load_tmp(fx, "net.json", &cl, &diag), MOE_OK);
    assert_string_equal(cl.name, "net");
    assert_near(cl.net.nic_gbps, 25, 0);
    assert_near(cl.net.latency_us, 20, 0);
    assert_near(cl.net.eff, base.net.eff, 0); /* a sibling in the same section is inherited */
    struct moe_cluster expect = base;
    memset(expect.name, 0, sizeof(expect.name));
    memset(expect.description, 0, sizeof(expect.description));
    (void)snprintf(expect.name, sizeof(expect.name), "net");
    (void)snprintf(expect.description, sizeof(expect.description), "test");
    expect.net.nic_gbps = 25;
    expect.net.latency_us = 20;
    assert_memory_equal(&cl, &expect, sizeof(cl));
    /* A chain: a file extending the one above by path. */
    write_child(fx, "chain.json", "chain", "net.json",
                "\"gpu\": {\"hbm_gib\": {\"value\": 70, \"source\": \"test\"}}");
    assert_int_equal(load_tmp(fx, "chain.json", &cl, &diag), MOE_OK);
    assert_near(cl.net.nic_gbps, 25, 0);
    assert_near(cl.gpu.hbm_gib, 70, 0);
    assert_near(cl.gpu.peak_tflops[MOE_MATH_BF16], base.gpu.peak_tflops[MOE_MATH_BF16], 0);
    /* Extending nothing new is the base under another name. */
    write_child(fx, "same.json", "same", "dgx-h100", "");
    assert_int_equal(load_tmp(fx, "same.json", &cl, &diag), MOE_OK);
    memset(cl.name, 0, sizeof(cl.name));
    memset(cl.description, 0, sizeof(cl.description));
    (void)snprintf(cl.name, sizeof(cl.name), "dgx-h100");
    (void)snprintf(cl.description, sizeof(cl.description), "%s", base.description);
    assert_memory_equal(&cl, &base, sizeof(cl));
}

/* The merge itself: sections the reader does not know are inherited (a base written by a newer
 * moefold), a figure replaces the base's whole. */
static void test_extends_merge_tree(void **state)
{
    const struct fixture *fx = *state;
    cJSON *base = h100_tree(fx);
    cJSON_DeleteItemFromObjectCaseSensitive(base, "uncertainty");
    cJSON *extra = cJSON_AddObjectToObject(base, "uncertainty");
    cJSON_AddNumberToObject(extra, "level", 0.8);
    char path[256];
    (void)snprintf(path, sizeof(path), "%s/newer-base.json", fx->tmp_dir);
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_json_write_file(path, base, &diag), MOE_OK);
    cJSON_Delete(base);
    const char *text = "{\"format\": \"moefold-cluster\", \"version\": 1, \"name\": \"x\","
                       " \"description\": \"d\", \"extends\": \"newer-base.json\","
                       " \"scaleout\": {\"a2a_eff\": {\"value\": 0.5, \"source\": \"s\"}}}";
    cJSON *child = cJSON_Parse(text);
    assert_non_null(child);
    char src[256];
    (void)snprintf(src, sizeof(src), "%s/child.json", fx->tmp_dir);
    cJSON *merged = NULL;
    assert_int_equal(moe_cluster_resolve_json(child, src, &merged, &diag), MOE_OK);
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(merged, "uncertainty");
    assert_non_null(u);
    assert_near(cJSON_GetObjectItemCaseSensitive(u, "level")->valuedouble, 0.8, 0);
    assert_null(cJSON_GetObjectItemCaseSensitive(merged, "extends"));
    const cJSON *a2a = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(merged, "scaleout"), "a2a_eff");
    assert_null(cJSON_GetObjectItemCaseSensitive(a2a, "note")); /* the base's note is gone */
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(a2a, "source")->valuestring, "s");
    assert_non_null(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(merged, "scaleout"), "nic_gbps"));
    cJSON_Delete(merged);
    /* "uncertainty" is a section the loader knows (cli/uncertainty.c reads it): the child loads
     * with it inherited; a section nobody knows is still the usual unknown-key error. */
    struct moe_cluster cl;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_cluster_from_json(child, src, &cl, &diag), MOE_OK);
    cJSON_AddObjectToObject(child, "uncertainy");
    assert_int_equal(moe_cluster_from_json(child, src, &cl, &diag), MOE_ERR_INVALID);
    assert_non_null(strstr(diag.message, "cluster.uncertainy"));
    cJSON_Delete(child);
}

static void test_extends_errors(void **state)
{
    const struct fixture *fx = *state;
    struct moe_cluster cl;
    struct moe_diag diag;
    /* An unknown key in the extending file. */
    write_child(fx, "typo.json", "typo", "dgx-h100",
                "\"scaleout\": {\"nic_gbs\": {\"value\": 25, \"source\": \"x\"}}");
    assert_int_equal(load_tmp(fx, "typo.json", &cl, &diag), MOE_ERR_INVALID);
    assert_non_null(strstr(diag.message, "cluster.scaleout.nic_gbs"));
    assert_non_null(strstr(diag.message, "typo.json"));
    /* A figure without its source. */
    write_child(fx, "nosrc.json", "nosrc", "dgx-h100",
                "\"scaleout\": {\"nic_gbps\": {\"value\": 25}}");
    assert_int_equal(load_tmp(fx, "nosrc.json", &cl, &diag), MOE_ERR_INVALID);
    assert_non_null(strstr(diag.message, "cluster.scaleout.nic_gbps"));
    assert_non_null(strstr(diag.message, "source"));
    /* A missing base. */
    write_child(fx, "orphan.json", "orphan", "dgx-h1000", "");
    assert_int_equal(load_tmp(fx, "orphan.json", &cl, &diag), MOE_ERR_NOT_FOUND);
    assert_non_null(strstr(diag.message, "dgx-h1000"));
    assert_non_null(strstr(diag.message, "orphan.json"));
    /* A cycle: a extends b extends a. */
    write_child(fx, "cyc-a.json", "a", "cyc-b.json", "");
    write_child(fx, "cyc-b.json", "b", "cyc-a.json", "");
    assert_int_equal(load_tmp(fx, "cyc-a.json", &cl, &diag), MOE_ERR_INVALID);
    assert_non_null(strstr(diag.message, "cycle"));
    /* Itself. */
    write_child(fx, "self.json", "self", "self.json", "");
    assert_int_equal(load_tmp(fx, "self.json", &cl, &diag), MOE_ERR_INVALID);
    assert_non_null(strstr(diag.message, "cycle"));
    /* No name or description of its own; extends not a string. */
    char path[256];
    const char *noname =
        "{\"format\": \"moefold-cluster\", \"version\": 1, \"extends\": \"dgx-h100\"}";
    (void)snprintf(path, sizeof(path), "%s/noname.json", fx->tmp_dir);
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_file_write_atomic(path, noname, strlen(noname), &diag), MOE_OK);
    assert_int_equal(load_tmp(fx, "noname.json", &cl, &diag), MOE_ERR_INVALID);
    assert_non_null(strstr(diag.message, "name"));
    const char *num = "{\"format\": \"moefold-cluster\", \"version\": 1, \"name\": \"n\", "
                      "\"description\": \"d\", \"extends\": 7}";
    (void)snprintf(path, sizeof(path), "%s/num.json", fx->tmp_dir);
    assert_int_equal(moe_file_write_atomic(path, num, strlen(num), &diag), MOE_OK);
    assert_int_equal(load_tmp(fx, "num.json", &cl, &diag), MOE_ERR_INVALID);
    assert_non_null(strstr(diag.message, "extends"));
    /* A base that is not a cluster file. */
    write_child(fx, "wrongfmt.json", "w", "/dev/null", "");
    assert_int_not_equal(load_tmp(fx, "wrongfmt.json", &cl, &diag), MOE_OK);
    assert_non_null(strstr(diag.message, "/dev/null"));
    /* moe_cluster_file_base */
    char base[64];
    (void)snprintf(path, sizeof(path), "%s/net.json", fx->tmp_dir);
    write_child(fx, "net.json", "net", "dgx-h100", "");
    assert_int_equal(moe_cluster_file_base(path, base, sizeof(base), &diag), MOE_OK);
    assert_string_equal(base, "dgx-h100");
    assert_int_equal(moe_cluster_file_base("dgx-h100", base, sizeof(base), &diag), MOE_OK);
    assert_string_equal(base, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_shipped_cluster_loads),
        cmocka_unit_test(test_published_figures),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_unknown_keys),
        cmocka_unit_test(test_busbw_by_size),
        cmocka_unit_test(test_figure_needs_source),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_malformed_and_missing),
        cmocka_unit_test(test_list_and_dir),
        cmocka_unit_test(test_cloud_clusters),
        cmocka_unit_test(test_extends),
        cmocka_unit_test(test_extends_merge_tree),
        cmocka_unit_test(test_extends_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
