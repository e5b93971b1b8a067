/*
 * The communicator interface on the MPI backend (moe-test-np: 4): every collective and
 * point-to-point call against values computed by hand (rank-dependent inputs), in-place forms,
 * the non-blocking forms with wait/test, the bytes-sent accounting (nccl-tests algorithm factors:
 * all-reduce 2(n-1)/n S, all-gather and reduce-scatter (n-1)/n of the full buffer, all-to-all the
 * bytes addressed to others), and the groups built from the folding rank mapping (DESIGN.md):
 * every group's members have the expected world ranks, and a rank's index in a group equals its
 * coordinate; emulated nodes split the EP group into node-local and cross-node subgroups.
 */
#include "engine/comm_mpi.h"
#include "engine/groups.h"

#include <math.h>
#include <mpi.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* cmocka.h needs setjmp.h, stdarg.h, stddef.h and stdint.h first. */
#include <cmocka.h>

/* moe-test-np: 4 */

enum { N = 4 };

static moe_comm_t *world_group(void)
{
    moe_comm_t *w = NULL;
    assert_int_equal(moe_comm_mpi_create(MPI_COMM_WORLD, "world", &w), MOE_OK);
    assert_int_equal(moe_comm_size(w), N);
    return w;
}

static void test_allreduce_allgather(void **state)
{
    (void)state;
    moe_comm_t *w = world_group();
    int r = moe_comm_rank(w);
    float x[3] = {(float)r, 1.0f, (float)(r * r)};
    float y[3];
    moe_comm_allreduce(w, x, y, 3, MOE_COMM_F32, MOE_COMM_SUM);
    assert_true(y[0] == 6.0f && y[1] == 4.0f && y[2] == 14.0f); /* 0+1+2+3, 4, 0+1+4+9 */
    moe_comm_allreduce(w, x, x, 3, MOE_COMM_F32, MOE_COMM_MAX); /* in place */
    assert_true(x[0] == 3.0f && x[1] == 1.0f && x[2] == 9.0f);
    int iv = r + 1;
    int isum = 0;
    moe_comm_allreduce(w, &iv, &isum, 1, MOE_COMM_I32, MOE_COMM_SUM);
    assert_int_equal(isum, 10);
    double dv = 0.5 * r;
    moe_comm_allreduce(w, &dv, &dv, 1, MOE_COMM_F64, MOE_COMM_SUM);
    assert_true(dv == 3.0);
    /* Bytes: all-reduce 2 (n-1)/n x S. */
    assert_true(moe_comm_bytes_sent(w, MOE_COLL_ALLREDUCE) ==
                2.0 * 0.75 * (12.0 + 12.0 + 4.0 + 8.0));
    float g[2 * N];
    float mine[2] = {(float)r, (float)(10 + r)};
    moe_comm_allgather(w, mine, g, 2, MOE_COMM_F32);
    for (int i = 0; i < N; i++) {
        assert_true(g[2 * i] == (float)i && g[2 * i + 1] == (float)(10 + i));
    }
    float gi[N];
    gi[r] = (float)(100 + r);
    moe_comm_allgather(w, gi + r, gi, 1, MOE_COMM_F32); /* in place */
    for (int i = 0; i < N; i++) {
        assert_true(gi[i] == (float)(100 + i));
    }
    assert_true(moe_comm_bytes_sent(w, MOE_COLL_ALLGATHER) == 0.75 * (32.0 + 16.0));
    /* allgatherv: rank i contributes i+1 values equal to i. */
    int counts[N], displs[N], off = 0;
    for (int i = 0; i < N; i++) {
        counts[i] = i + 1;
        displs[i] = off;
        off += i + 1;
    }
    float src[N];
    for (int i = 0; i <= r; i++) {
        src[i] = (float)r;
    }
    float dst[10];
    moe_comm_allgatherv(w, src, r + 1, dst, counts, displs, MOE_COMM_F32);
    const float want[10] = {0, 1, 1, 2, 2, 2, 3, 3, 3, 3};
    assert_memory_equal(dst, want, sizeof(want));
    moe_comm_destroy(w);
}

static void test_reducescatter_alltoall(void **state)
{
    (void)state;
    moe_comm_t *w = world_group();
    int r = moe_comm_rank(w);
    /* Each rank sends x[i] = r + i over 8 elements; rank q receives elements 2q, 2q+1 summed. */
    float x[8];
    for (int i = 0; i < 8; i++) {
        x[i] = (float)(r + i);
    }
    float y[2];
    moe_comm_reducescatter(w, x, y, 2, MOE_COMM_F32, MOE_COMM_SUM);
    assert_true(y[0] == (float)(6 + 4 * (2 * r)) && y[1] == (float)(6 + 4 * (2 * r + 1)));
    moe_comm_reducescatter(w, x, x, 2, MOE_COMM_F32, MOE_COMM_SUM); /* in place: at the start */
    assert_true(x[0] == y[0] && x[1] == y[1]);
    assert_true(moe_comm_bytes_sent(w, MOE_COLL_REDUCESCATTER) == 2 * 0.75 * 32.0);
    /* reducescatterv: rank q gets q+1 elements. */
    int counts[N] = {1, 2, 3, 4};
    float v[10];
    for (int i = 0; i < 10; i++) {
        v[i] = 1.0f;
    }
    float out[4] = {0};
    moe_comm_reducescatterv(w, v, out, counts, MOE_COMM_F32, MOE_COMM_SUM);
    for (int i = 0; i <= r; i++) {
        assert_true(out[i] == 4.0f);
    }
    /* Blocks over several exchange chunks, one empty, out of place and in place (the sum then
     * lands at the start): element j of block q is (rank + 1) * (j % 7 + q) on each rank. */
    int big[N] = {70000, 0, 140000, 3};
    size_t total = 70000 + 140000 + 3;
    float *vb = malloc(total * sizeof(float));
    float *ob = malloc(140000 * sizeof(float));
    assert_non_null(vb);
    assert_non_null(ob);
    for (int pass = 0; pass < 2; pass++) {
        size_t at = 0;
        for (int q = 0; q < N; q++) {
            for (int j = 0; j < big[q]; j++) {
                vb[at + (size_t)j] = (float)((r + 1) * (j % 7 + q));
            }
            at += (size_t)big[q];
        }
        float *res = pass == 0 ? ob : vb;
        moe_comm_reducescatterv(w, vb, res, big, MOE_COMM_F32, MOE_COMM_SUM);
        for (int j = 0; j < big[r]; j++) {
            assert_true(res[j] == (float)(10 * (j % 7 + r))); /* 1 + 2 + 3 + 4 = 10 */
        }
    }
    free(vb);
    free(ob);
    /* alltoall: element j of rank r goes to rank j as element r. */
    int a[N], b[N];
    for (int j = 0; j < N; j++) {
        a[j] = 10 * r + j;
    }
    moe_comm_alltoall(w, a, b, 1, MOE_COMM_I32);
    for (int j = 0; j < N; j++) {
        assert_int_equal(b[j], 10 * j + r);
    }
    /* alltoallv: rank r sends j+1 copies of (r, j) to rank j. */
    int sc[N], sd[N], rc[N], rd[N], so = 0, ro = 0;
    float s[10], t[16];
    for (int j = 0; j < N; j++) {
        sc[j] = j + 1;
        sd[j] = so;
        for (int k = 0; k <= j; k++) {
            s[so + k] = (float)(10 * r + j);
        }
        so += j + 1;
        rc[j] = r + 1;
        rd[j] = ro;
        ro += r + 1;
    }
    moe_comm_alltoallv(w, s, sc, sd, t, rc, rd, MOE_COMM_F32);
    for (int j = 0; j < N; j++) {
        for (int k = 0; k <= r; k++) {
            assert_true(t[rd[j] + k] == (float)(10 * j + r));
        }
    }
    /* Bytes: 4 ints to 3 others, then (10 - (r+1)) floats to others. */
    assert_true(moe_comm_bytes_sent(w, MOE_COLL_ALLTOALL) == 12.0 + 4.0 * (10 - (r + 1)));
    moe_comm_reset_stats(w);
    assert_true(moe_comm_bytes_sent(w, MOE_COLL_ALLTOALL) == 0.0);
    moe_comm_destroy(w);
}

static void test_p2p_and_nonblocking(void **state)
{
    (void)state;
    moe_comm_t *w = world_group();
    int r = moe_comm_rank(w);
    int next = (r + 1) % N, prev = (r + N - 1) % N;
    float out = (float)r, in = -1.0f;
    struct moe_comm_req rs = {0}, rr = {0};
    moe_comm_irecv(w, &in, 1, MOE_COMM_F32, prev, 7, &rr);
    moe_comm_isend(w, &out, 1, MOE_COMM_F32, next, 7, &rs);
    while (!moe_comm_test(w, &rr)) {
    }
    moe_comm_wait(w, &rs);
    assert_false(rr.is_active);
    assert_true(in == (float)prev);
    if (r % 2 == 0) {
        moe_comm_send(w, &out, 1, MOE_COMM_F32, r + 1, 3);
    } else {
        moe_comm_recv(w, &in, 1, MOE_COMM_F32, r - 1, 3);
        assert_true(in == (float)(r - 1));
    }
    float x[4] = {1, 2, 3, 4}, g[8];
    struct moe_comm_req q1 = {0}, q2 = {0}, q3 = {0}, q4 = {0};
    moe_comm_iallreduce(w, x, x, 4, MOE_COMM_F32, MOE_COMM_SUM, &q1);
    moe_comm_wait(w, &q1);
    assert_true(x[0] == 4.0f && x[3] == 16.0f);
    float mine[2] = {(float)r, (float)r};
    moe_comm_iallgather(w, mine, g, 2, MOE_COMM_F32, &q2);
    moe_comm_wait(w, &q2);
    assert_true(g[6] == 3.0f);
    float rs_in[8] = {1, 1, 1, 1, 1, 1, 1, 1}, rs_out[2];
    moe_comm_ireducescatter(w, rs_in, rs_out, 2, MOE_COMM_F32, MOE_COMM_SUM, &q3);
    moe_comm_wait(w, &q3);
    assert_true(rs_out[0] == 4.0f && rs_out[1] == 4.0f);
    /* Two reduce-scatters in flight at once, one in place (completed by polling), one not: each
     * the blocking call's result bit for bit (the same order of sums over float values whose sum
     * depends on it), the in-place one at the start of its buffer. */
    enum { RSN = 3001 };
    float *a = malloc(N * RSN * sizeof(float)), *b = malloc(N * RSN * sizeof(float));
    float *ref_a = malloc(N * RSN * sizeof(float)), *ref_b = malloc(RSN * sizeof(float));
    float *out_b = malloc(RSN * sizeof(float));
    assert_true(a != NULL && b != NULL && ref_a != NULL && ref_b != NULL && out_b != NULL);
    for (int i = 0; i < N * RSN; i++) {
        a[i] = (float)sin(0.37 * i + 1.3 * r) * (float)(1 + (i % 7) * 1000);
        b[i] = (float)cos(0.11 * i - 0.7 * r) / (float)(1 + i % 13);
    }
    memcpy(ref_a, a, N * RSN * sizeof(float));
    moe_comm_reducescatter(w, ref_a, ref_a, RSN, MOE_COMM_F32, MOE_COMM_SUM);
    moe_comm_reducescatter(w, b, ref_b, RSN, MOE_COMM_F32, MOE_COMM_SUM);
    struct moe_comm_req qa = {0}, qb = {0};
    moe_comm_ireducescatter(w, a, a, RSN, MOE_COMM_F32, MOE_COMM_SUM, &qa);
    moe_comm_ireducescatter(w, b, out_b, RSN, MOE_COMM_F32, MOE_COMM_SUM, &qb);
    while (!moe_comm_test(w, &qa)) {
    }
    moe_comm_wait(w, &qb);
    assert_false(qa.is_active || qb.is_active);
    assert_memory_equal(a, ref_a, RSN * sizeof(float));
    assert_memory_equal(out_b, ref_b, RSN * sizeof(float));
    free(a);
    free(b);
    free(ref_a);
    free(ref_b);
    free(out_b);
    int c[N] = {1, 1, 1, 1}, d[N] = {0, 1, 2, 3};
    float a2a_in[N] = {(float)r, (float)r, (float)r, (float)r}, a2a_out[N];
    moe_comm_ialltoallv(w, a2a_in, c, d, a2a_out, c, d, MOE_COMM_F32, &q4);
    moe_comm_wait(w, &q4);
    for (int j = 0; j < N; j++) {
        assert_true(a2a_out[j] == (float)j);
    }
    assert_true(moe_comm_tag_limit(w) >= 32767);
    moe_comm_barrier(w);
    moe_comm_destroy(w);
}

/* World ranks of g's members, in group order, gathered over world. */
static void members(moe_comm_t *world, moe_comm_t *g, int *out, int *size)
{
    int me = moe_comm_rank(world);
    *size = moe_comm_size(g);
    moe_comm_allgather(g, &me, out, 1, MOE_COMM_I32);
}

static void expect_group(moe_comm_t *world, moe_comm_t *g, const int *want, int n)
{
    int got[N], size = 0;
    members(world, g, got, &size);
    assert_int_equal(size, n);
    assert_memory_equal(got, want, (size_t)n * sizeof(int));
}

static void test_groups_from_rank_mapping(void **state)
{
    (void)state;
    moe_comm_t *w = world_group();
    int r = moe_comm_rank(w);
    /* 4 ranks: TP2 x DP2 on the attention side, EP2 x EDP2... no: ETP1 EP2 EDP2 (folded),
     * ranks per node 2 (emulated). tp = r % 2, dp = r / 2; ep = r % 2, edp = r / 2. */
    struct moe_layout lay;
    moe_layout_init(&lay);
    lay.num_gpus = 4;
    lay.tp = 2;
    lay.dp = 2;
    lay.ep = 2;
    lay.edp = 2;
    struct moe_eng_groups gr;
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_eng_groups_create(w, &lay, 2, &gr, &diag), MOE_OK);
    assert_int_equal(gr.me.tp, r % 2);
    assert_int_equal(gr.me.dp, r / 2);
    assert_int_equal(moe_comm_rank(gr.tp), gr.me.tp);
    assert_int_equal(moe_comm_rank(gr.dp), gr.me.dp);
    assert_int_equal(moe_comm_rank(gr.ep), gr.me.ep);
    const int tp_of[N][2] = {{0, 1}, {0, 1}, {2, 3}, {2, 3}};
    const int dp_of[N][2] = {{0, 2}, {1, 3}, {0, 2}, {1, 3}};
    expect_group(w, gr.tp, tp_of[r], 2);
    expect_group(w, gr.dp, dp_of[r], 2);
    expect_group(w, gr.dpcp, dp_of[r], 2); /* CP = 1 */
    expect_group(w, gr.ep, tp_of[r], 2);   /* folded: EP spans what TP spans here */
    expect_group(w, gr.edp, dp_of[r], 2);
    const int all[N] = {0, 1, 2, 3};
    expect_group(w, gr.stage, all, 4);
    int one[1] = {r};
    expect_group(w, gr.pp, one, 1);
    expect_group(w, gr.etp, one, 1);
    assert_null(gr.embed); /* pp = 1 */
    /* Nodes {0,1} and {2,3}: the EP group {0,1} lies in one node. */
    assert_int_equal(gr.node_id, r / 2 * 2);
    assert_int_equal(gr.ep_num_nodes, 1);
    expect_group(w, gr.ep_node, tp_of[r], 2);
    moe_eng_groups_destroy(&gr);
    /* EP4 with emulated nodes of 2: node-local {0,1}/{2,3}, cross-node {0,2}/{1,3}. */
    moe_layout_init(&lay);
    lay.num_gpus = 4;
    lay.dp = 4;
    lay.ep = 4;
    assert_int_equal(moe_eng_groups_create(w, &lay, 2, &gr, &diag), MOE_OK);
    assert_int_equal(gr.ep_num_nodes, 2);
    assert_int_equal(gr.ep_node_idx, r / 2);
    assert_true(gr.is_ep_uniform);
    expect_group(w, gr.ep_node, tp_of[r], 2);
    expect_group(w, gr.ep_cross, dp_of[r], 2);
    moe_eng_groups_destroy(&gr);
    /* A layout for another world size is refused with the mpirun hint. */
    lay.num_gpus = 8;
    assert_int_equal(moe_eng_groups_create(w, &lay, 0, &gr, &diag), MOE_ERR_INVALID);
    assert_non_null(strstr(diag.message, "mpirun -np 8"));
    moe_comm_destroy(w);
}

/* A float-sum reduce-scatter larger than the pairwise exchange's chunk and not a multiple of it,
 * in place and out of place, with integer-valued sums (exact in any order). */
static void test_reducescatter_large(void **state)
{
    (void)state;
    moe_comm_t *w = world_group();
    int r = moe_comm_rank(w);
    const size_t count = 3 * 64 * 1024 + 5; /* per rank */
    size_t total = count * N;
    float *x = malloc(total * sizeof(float));
    float *y = malloc(count * sizeof(float));
    assert_non_null(x);
    assert_non_null(y);
    for (size_t i = 0; i < total; i++) {
        x[i] = (float)((size_t)(r + 1) * (i % 1000));
    }
    moe_comm_reducescatter(w, x, y, count, MOE_COMM_F32, MOE_COMM_SUM);
    const float ranks_sum = (float)(N * (N + 1) / 2);
    for (size_t i = 0; i < count; i++) {
        size_t g = (size_t)r * count + i;
        if (y[i] != ranks_sum * (float)(g % 1000)) {
            fail_msg("out of place: element %zu of rank %d is %g", i, r, (double)y[i]);
        }
    }
    moe_comm_reducescatter(w, x, x, count, MOE_COMM_F32, MOE_COMM_SUM);
    assert_memory_equal(x, y, count * sizeof(float));
    free(x);
    free(y);
    moe_comm_destroy(w);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != N) {
        if (rank == 0) {
            fprintf(stderr, "test_comm needs mpirun -n %d (moe-test-np)\n", N);
        }
        MPI_Finalize();
        return 1;
    }
    if (rank != 0 && freopen("/dev/null", "w", stdout) == NULL) {
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allreduce_allgather),
        cmocka_unit_test(test_reducescatter_alltoall),
        cmocka_unit_test(test_reducescatter_large),
        cmocka_unit_test(test_p2p_and_nonblocking),
        cmocka_unit_test(test_groups_from_rank_mapping),
    };
    int fails = cmocka_run_group_tests(tests, NULL, NULL);
    int total = 0;
    MPI_Allreduce(&fails, &total, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return total;
}
