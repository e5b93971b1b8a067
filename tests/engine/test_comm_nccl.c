/*
 * The NCCL backend of the communicator interface against the MPI backend (moe-test-np: 1 2): every
 * collective, in-place form, v-variant, point-to-point and non-blocking call runs on both, the
 * NCCL one on device copies of the same rank-dependent inputs, and the results must be equal bit
 * for bit (small-integer values, so sums are exact in any order); bytes-sent accounting must match
 * too. Splits and NCCL twins of MPI groups (what the engine builds) are checked the same way, and
 * so is the "local" backend one-rank twins get.
 *
 * NCCL needs one GPU per rank: without the NCCL build, without a device, or with more ranks on a
 * node than GPUs, the NCCL tests skip (cmocka skip, every rank alike). The host half of the
 * engine's device runtime (engine/device.h with dev == NULL) is tested everywhere.
 */
#include "engine/comm_mpi.h"
#include "engine/comm_nccl.h"
#include "engine/device.h"

#include <math.h>
#include <mpi.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
/* cmocka.h needs setjmp.h, stdarg.h, stddef.h and stdint.h first. */
#include <cmocka.h>

/* moe-test-np: 1 2 */

enum {
    MAXN = 64,           /* elements per rank of the largest test buffer */
    DEV_BYTES = 1 << 20, /* device scratch of the tests */
};

/* What every NCCL test shares (NULL fixture: the NCCL tests skip). */
struct fixture {
    moe_eng_dev_t *dev;
    moe_comm_t *nccl; /* world on NCCL */
    moe_comm_t *mpi;  /* world on MPI */
    char *scratch;    /* [DEV_BYTES] device */
    size_t used;
    int rank, size;
};

/* A device copy of host[bytes] from the scratch (reset per test). */
static void *dev_copy(struct fixture *f, const void *host, size_t bytes)
{
    size_t b = (bytes + 255) / 256 * 256;
    assert_true(f->used + b <= DEV_BYTES);
    void *d = f->scratch + f->used;
    f->used += b;
    moe_eng_copy_from_host(f->dev, d, host, bytes);
    return d;
}

static void *dev_zero(struct fixture *f, size_t bytes)
{
    size_t b = (bytes + 255) / 256 * 256;
    assert_true(f->used + b <= DEV_BYTES);
    void *d = f->scratch + f->used;
    f->used += b;
    moe_eng_memzero(f->dev, d, bytes);
    return d;
}

/* Device result equals the MPI result on the host, bit for bit. */
static void expect_same(struct fixture *f, const void *dev, const void *want, size_t bytes)
{
    unsigned char got[MAXN * 8 * 4];
    assert_true(bytes <= sizeof(got));
    moe_eng_copy_to_host(f->dev, got, dev, bytes);
    assert_memory_equal(got, want, bytes);
}

/* Small integers as floats/ints/doubles, different per rank and salt. */
static void fill(float *x, int *iv, double *dv, int n, int rank, int salt)
{
    for (int i = 0; i < n; i++) {
        int v = (i * 7 + rank * 13 + salt * 5) % 23 - 11;
        x[i] = (float)v;
        iv[i] = v * 3;
        dv[i] = 0.5 * v;
    }
}

static struct fixture *fx(void **state)
{
    struct fixture *f = *state;
    if (f == NULL) {
        printf("# skipped: no usable CUDA device or NCCL\n");
        skip();
    }
    f->used = 0;
    return f;
}

static void test_allreduce_allgather(void **state)
{
    struct fixture *f = fx(state);
    int n = f->size;
    float x[MAXN], y[MAXN];
    int iv[MAXN], iy[MAXN];
    double dv[MAXN], dy[MAXN];
    fill(x, iv, dv, MAXN, f->rank, 1);
    /* all-reduce: sum and max in three types, out of place and in place */
    for (int op = 0; op < 2; op++) {
        enum moe_comm_redop r = op == 0 ? MOE_COMM_SUM : MOE_COMM_MAX;
        float *dx = dev_copy(f, x, sizeof(x));
        float *dyy = dev_zero(f, sizeof(y));
        moe_comm_allreduce(f->mpi, x, y, MAXN, MOE_COMM_F32, r);
        moe_comm_allreduce(f->nccl, dx, dyy, MAXN, MOE_COMM_F32, r);
        expect_same(f, dyy, y, sizeof(y));
        moe_comm_allreduce(f->nccl, dx, dx, MAXN, MOE_COMM_F32, r); /* in place */
        expect_same(f, dx, y, sizeof(y));
        int *di = dev_copy(f, iv, sizeof(iv));
        moe_comm_allreduce(f->mpi, iv, iy, MAXN, MOE_COMM_I32, r);
        moe_comm_allreduce(f->nccl, di, di, MAXN, MOE_COMM_I32, r);
        expect_same(f, di, iy, sizeof(iy));
        double *dd = dev_copy(f, dv, sizeof(dv));
        moe_comm_allreduce(f->mpi, dv, dy, MAXN, MOE_COMM_F64, r);
        moe_comm_allreduce(f->nccl, dd, dd, MAXN, MOE_COMM_F64, r);
        expect_same(f, dd, dy, sizeof(dy));
    }
    /* all-gather: 5 per rank, out of place and in place */
    float g[5 * 8];
    assert_true(n <= 8);
    moe_comm_allgather(f->mpi, x, g, 5, MOE_COMM_F32);
    float *dx = dev_copy(f, x, sizeof(x));
    float *dg = dev_zero(f, sizeof(g));
    moe_comm_allgather(f->nccl, dx, dg, 5, MOE_COMM_F32);
    expect_same(f, dg, g, (size_t)(5 * n) * sizeof(float));
    float *dgi = dev_zero(f, sizeof(g));
    moe_eng_copy(f->dev, dgi + 5 * f->rank, dx, 5 * sizeof(float));
    moe_comm_allgather(f->nccl, dgi + 5 * f->rank, dgi, 5, MOE_COMM_F32);
    expect_same(f, dgi, g, (size_t)(5 * n) * sizeof(float));
    /* all-gather-v: rank r gives r + 2 values */
    int counts[8], displs[8], off = 0;
    for (int r = 0; r < n; r++) {
        counts[r] = r + 2;
        displs[r] = off;
        off += r + 2;
    }
    float gv[64];
    moe_comm_allgatherv(f->mpi, x, f->rank + 2, gv, counts, displs, MOE_COMM_F32);
    float *dgv = dev_zero(f, sizeof(gv));
    moe_comm_allgatherv(f->nccl, dx, f->rank + 2, dgv, counts, displs, MOE_COMM_F32);
    expect_same(f, dgv, gv, (size_t)off * sizeof(float));
}

static void test_reducescatter_alltoall_bcast(void **state)
{
    struct fixture *f = fx(state);
    int n = f->size;
    float x[MAXN], y[MAXN];
    int iv[MAXN];
    double dv[MAXN];
    fill(x, iv, dv, MAXN, f->rank, 2);
    /* reduce-scatter: 3 per rank; in place lands at the start */
    moe_comm_reducescatter(f->mpi, x, y, 3, MOE_COMM_F32, MOE_COMM_SUM);
    float *dx = dev_copy(f, x, (size_t)(3 * n) * sizeof(float));
    float *dy = dev_zero(f, 3 * sizeof(float));
    moe_comm_reducescatter(f->nccl, dx, dy, 3, MOE_COMM_F32, MOE_COMM_SUM);
    expect_same(f, dy, y, 3 * sizeof(float));
    moe_comm_reducescatter(f->nccl, dx, dx, 3, MOE_COMM_F32, MOE_COMM_SUM);
    expect_same(f, dx, y, 3 * sizeof(float));
    /* reduce-scatter-v: rank r gets 2r + 1 (in place too) */
    int counts[8], total = 0;
    assert_true(n <= 8);
    for (int r = 0; r < n; r++) {
        counts[r] = 2 * r + 1;
        total += counts[r];
    }
    float *dv2 = dev_copy(f, x, (size_t)total * sizeof(float));
    float *dr = dev_zero(f, (size_t)counts[f->rank] * sizeof(float));
    moe_comm_reducescatterv(f->mpi, x, y, counts, MOE_COMM_F32, MOE_COMM_SUM);
    moe_comm_reducescatterv(f->nccl, dv2, dr, counts, MOE_COMM_F32, MOE_COMM_SUM);
    expect_same(f, dr, y, (size_t)counts[f->rank] * sizeof(float));
    moe_comm_reducescatterv(f->nccl, dv2, dv2, counts, MOE_COMM_F32, MOE_COMM_SUM);
    expect_same(f, dv2, y, (size_t)counts[f->rank] * sizeof(float));
    /* all-to-all: 4 ints per peer */
    int a2a[MAXN];
    moe_comm_alltoall(f->mpi, iv, a2a, 4, MOE_COMM_I32);
    int *di = dev_copy(f, iv, (size_t)(4 * n) * sizeof(int));
    int *da = dev_zero(f, (size_t)(4 * n) * sizeof(int));
    moe_comm_alltoall(f->nccl, di, da, 4, MOE_COMM_I32);
    expect_same(f, da, a2a, (size_t)(4 * n) * sizeof(int));
    /* all-to-all-v: rank r sends (r + p) % 3 values to p (zeros included) */
    int sc[8], sd[8], rc[8], rd[8], so = 0, ro = 0;
    for (int p = 0; p < n; p++) {
        sc[p] = (f->rank + p) % 3;
        sd[p] = so;
        so += sc[p];
        rc[p] = (p + f->rank) % 3;
        rd[p] = ro;
        ro += rc[p];
    }
    float v[MAXN];
    moe_comm_alltoallv(f->mpi, x, sc, sd, v, rc, rd, MOE_COMM_F32);
    float *dsv = dev_copy(f, x, (size_t)(so > 0 ? so : 1) * sizeof(float));
    float *drv = dev_zero(f, (size_t)(ro > 0 ? ro : 1) * sizeof(float));
    moe_comm_alltoallv(f->nccl, dsv, sc, sd, drv, rc, rd, MOE_COMM_F32);
    expect_same(f, drv, v, (size_t)ro * sizeof(float));
    /* broadcast from the last rank, doubles */
    double b[7];
    for (int i = 0; i < 7; i++) {
        b[i] = dv[i];
    }
    double *db = dev_copy(f, b, sizeof(b));
    moe_comm_bcast(f->mpi, b, 7, MOE_COMM_F64, n - 1);
    moe_comm_bcast(f->nccl, db, 7, MOE_COMM_F64, n - 1);
    expect_same(f, db, b, sizeof(b));
}

static void test_p2p_and_nonblocking(void **state)
{
    struct fixture *f = fx(state);
    int n = f->size;
    int next = (f->rank + 1) % n, prev = (f->rank + n - 1) % n;
    float x[MAXN], y[MAXN];
    int iv[MAXN];
    double dv[MAXN];
    fill(x, iv, dv, MAXN, f->rank, 3);
    /* A ring of non-blocking sends and receives. NCCL runs a rank's non-blocking calls in issue
     * order on one stream, so even ranks send first and odd ranks receive first (an even ring;
     * NCCL has no point-to-point with oneself outside a group). */
    float *ds = dev_copy(f, x, 8 * sizeof(float));
    if (n % 2 == 0) {
        float *dr = dev_zero(f, 8 * sizeof(float));
        struct moe_comm_req rs = {0}, rr = {0};
        if (f->rank % 2 == 0) {
            moe_comm_isend(f->nccl, ds, 8, MOE_COMM_F32, next, 5, &rs);
            moe_comm_irecv(f->nccl, dr, 8, MOE_COMM_F32, prev, 5, &rr);
        } else {
            moe_comm_irecv(f->nccl, dr, 8, MOE_COMM_F32, prev, 5, &rr);
            moe_comm_isend(f->nccl, ds, 8, MOE_COMM_F32, next, 5, &rs);
        }
        while (!moe_comm_test(f->nccl, &rr)) {
        }
        assert_false(rr.is_active);
        moe_comm_wait(f->nccl, &rs);
        float want[8];
        struct moe_comm_req ms = {0}, mr = {0};
        moe_comm_irecv(f->mpi, want, 8, MOE_COMM_F32, prev, 5, &mr);
        moe_comm_isend(f->mpi, x, 8, MOE_COMM_F32, next, 5, &ms);
        moe_comm_wait(f->mpi, &mr);
        moe_comm_wait(f->mpi, &ms);
        expect_same(f, dr, want, sizeof(want));
    }
    /* Blocking send/recv between pairs (even -> odd). */
    if (n > 1 && f->rank % 2 == 0 && f->rank + 1 < n) {
        moe_comm_send(f->nccl, ds, 8, MOE_COMM_F32, f->rank + 1, 1);
    } else if (n > 1 && f->rank % 2 == 1) {
        float *db = dev_zero(f, 8 * sizeof(float));
        moe_comm_recv(f->nccl, db, 8, MOE_COMM_F32, f->rank - 1, 1);
        float other[8];
        fill(other, iv, dv, 8, f->rank - 1, 3);
        expect_same(f, db, other, sizeof(other));
    }
    /* Non-blocking collectives against the blocking MPI results. */
    struct moe_comm_req q1 = {0}, q2 = {0}, q3 = {0}, q4 = {0};
    float *da = dev_copy(f, x, 16 * sizeof(float));
    moe_comm_iallreduce(f->nccl, da, da, 16, MOE_COMM_F32, MOE_COMM_SUM, &q1);
    moe_comm_allreduce(f->mpi, x, y, 16, MOE_COMM_F32, MOE_COMM_SUM);
    moe_comm_wait(f->nccl, &q1);
    expect_same(f, da, y, 16 * sizeof(float));
    float g[4 * 8];
    float *dg = dev_zero(f, sizeof(g));
    moe_comm_iallgather(f->nccl, ds, dg, 4, MOE_COMM_F32, &q2);
    moe_comm_allgather(f->mpi, x, g, 4, MOE_COMM_F32);
    moe_comm_wait(f->nccl, &q2);
    expect_same(f, dg, g, (size_t)(4 * n) * sizeof(float));
    float *drs = dev_copy(f, x, (size_t)(2 * n) * sizeof(float));
    moe_comm_ireducescatter(f->nccl, drs, drs, 2, MOE_COMM_F32, MOE_COMM_SUM, &q3);
    moe_comm_reducescatter(f->mpi, x, y, 2, MOE_COMM_F32, MOE_COMM_SUM);
    moe_comm_wait(f->nccl, &q3);
    expect_same(f, drs, y, 2 * sizeof(float));
    int c[8], d[8];
    for (int p = 0; p < n; p++) {
        c[p] = 2;
        d[p] = 2 * p;
    }
    float *dt = dev_zero(f, (size_t)(2 * n) * sizeof(float));
    moe_comm_ialltoallv(f->nccl, ds, c, d, dt, c, d, MOE_COMM_F32, &q4);
    moe_comm_alltoallv(f->mpi, x, c, d, y, c, d, MOE_COMM_F32);
    while (!moe_comm_test(f->nccl, &q4)) {
    }
    expect_same(f, dt, y, (size_t)(2 * n) * sizeof(float));
    assert_true(moe_comm_tag_limit(f->nccl) >= 32767);
    moe_comm_barrier(f->nccl);
}

/* The same calls on both backends count the same bytes (the front end's accounting). */
static void test_bytes_match(void **state)
{
    struct fixture *f = fx(state);
    int n = f->size;
    moe_comm_reset_stats(f->nccl);
    moe_comm_reset_stats(f->mpi);
    float x[MAXN], y[MAXN];
    int iv[MAXN];
    double dv[MAXN];
    fill(x, iv, dv, MAXN, f->rank, 6);
    float *dx = dev_copy(f, x, sizeof(x));
    float *dy = dev_zero(f, sizeof(y));
    int c[8], d[8];
    for (int p = 0; p < n; p++) {
        c[p] = 3;
        d[p] = 3 * p;
    }
    moe_comm_allreduce(f->mpi, x, y, 10, MOE_COMM_F32, MOE_COMM_SUM);
    moe_comm_allreduce(f->nccl, dx, dy, 10, MOE_COMM_F32, MOE_COMM_SUM);
    moe_comm_allgather(f->mpi, x, y, 2, MOE_COMM_F32);
    moe_comm_allgather(f->nccl, dx, dy, 2, MOE_COMM_F32);
    moe_comm_reducescatter(f->mpi, x, y, 2, MOE_COMM_F32, MOE_COMM_SUM);
    moe_comm_reducescatter(f->nccl, dx, dy, 2, MOE_COMM_F32, MOE_COMM_SUM);
    moe_comm_alltoallv(f->mpi, x, c, d, y, c, d, MOE_COMM_F32);
    moe_comm_alltoallv(f->nccl, dx, c, d, dy, c, d, MOE_COMM_F32);
    moe_comm_bcast(f->mpi, x, 4, MOE_COMM_F32, 0);
    moe_comm_bcast(f->nccl, dx, 4, MOE_COMM_F32, 0);
    moe_eng_dev_sync(f->dev);
    for (int k = 0; k < MOE_NUM_COLLS; k++) {
        assert_true(moe_comm_bytes_sent(f->nccl, (enum moe_comm_coll)k) ==
                    moe_comm_bytes_sent(f->mpi, (enum moe_comm_coll)k));
    }
}

/* Splits of the NCCL world and NCCL twins of MPI splits agree with the MPI splits. */
static void test_splits_and_twins(void **state)
{
    struct fixture *f = fx(state);
    int color = f->rank % 2;
    moe_comm_t *ns = NULL, *ms = NULL, *twin = NULL;
    assert_int_equal(moe_comm_split(f->nccl, color, f->rank, "half", &ns), MOE_OK);
    assert_int_equal(moe_comm_split(f->mpi, color, f->rank, "half", &ms), MOE_OK);
    assert_int_equal(moe_comm_nccl_from_mpi(ms, moe_eng_dev_stream(f->dev),
                                            moe_eng_dev_comm_stream(f->dev), &twin),
                     MOE_OK);
    assert_int_equal(moe_comm_size(ns), moe_comm_size(ms));
    assert_int_equal(moe_comm_rank(ns), moe_comm_rank(ms));
    assert_int_equal(moe_comm_rank(twin), moe_comm_rank(ms));
    assert_string_equal(moe_comm_name(twin), "half");
    /* One-rank groups need no NCCL communicator: the "local" backend copies on the stream. */
    assert_string_equal(moe_comm_get_backend(twin)->name, moe_comm_size(ms) > 1 ? "nccl" : "local");
    assert_true(moe_comm_get_backend(twin)->mem == MOE_COMM_MEM_DEVICE);
    float x[MAXN], y[MAXN];
    int iv[MAXN];
    double dv[MAXN];
    fill(x, iv, dv, MAXN, f->rank, 4);
    moe_comm_allreduce(ms, x, y, 9, MOE_COMM_F32, MOE_COMM_SUM);
    float *d1 = dev_copy(f, x, 9 * sizeof(float));
    float *d2 = dev_copy(f, x, 9 * sizeof(float));
    moe_comm_allreduce(ns, d1, d1, 9, MOE_COMM_F32, MOE_COMM_SUM);
    moe_comm_allreduce(twin, d2, d2, 9, MOE_COMM_F32, MOE_COMM_SUM);
    expect_same(f, d1, y, 9 * sizeof(float));
    expect_same(f, d2, y, 9 * sizeof(float));
    moe_comm_t *none = NULL;
    assert_int_equal(moe_comm_split(f->nccl, f->rank == 0 ? 0 : -1, 0, "r0", &none), MOE_OK);
    assert_true((f->rank == 0) == (none != NULL));
    moe_comm_destroy(none);
    moe_comm_destroy(twin);
    moe_comm_destroy(ns);
    moe_comm_destroy(ms);
}

/* One-rank twins (the engine's groups on one GPU) get the "local" backend: every collective of it
 * against MPI on MPI_COMM_SELF, bit for bit. */
static void test_local_groups(void **state)
{
    struct fixture *f = fx(state);
    moe_comm_t *ms = NULL, *lg = NULL;
    assert_int_equal(moe_comm_mpi_create(MPI_COMM_SELF, "self", &ms), MOE_OK);
    assert_int_equal(moe_comm_nccl_from_mpi(ms, moe_eng_dev_stream(f->dev),
                                            moe_eng_dev_comm_stream(f->dev), &lg),
                     MOE_OK);
    assert_string_equal(moe_comm_get_backend(lg)->name, "local");
    assert_int_equal(moe_comm_size(lg), 1);
    float x[MAXN], y[MAXN];
    int iv[MAXN];
    double dv[MAXN];
    fill(x, iv, dv, MAXN, f->rank, 7);
    float *dx = dev_copy(f, x, sizeof(x));
    float *dy = dev_zero(f, sizeof(y));
    moe_comm_allreduce(ms, x, y, 11, MOE_COMM_F32, MOE_COMM_SUM);
    moe_comm_allreduce(lg, dx, dy, 11, MOE_COMM_F32, MOE_COMM_SUM);
    expect_same(f, dy, y, 11 * sizeof(float));
    moe_comm_allgather(lg, dx, dy, 5, MOE_COMM_F32);
    expect_same(f, dy, x, 5 * sizeof(float));
    int one[1] = {6}, zero[1] = {0};
    moe_comm_allgatherv(lg, dx, 6, dy, one, zero, MOE_COMM_F32);
    expect_same(f, dy, x, 6 * sizeof(float));
    moe_comm_reducescatter(lg, dx, dy, 4, MOE_COMM_F32, MOE_COMM_SUM);
    expect_same(f, dy, x, 4 * sizeof(float));
    moe_comm_reducescatterv(lg, dx, dy, one, MOE_COMM_F32, MOE_COMM_SUM);
    expect_same(f, dy, x, 6 * sizeof(float));
    int *di = dev_copy(f, iv, sizeof(iv));
    int *dj = dev_zero(f, sizeof(iv));
    moe_comm_alltoall(lg, di, dj, 3, MOE_COMM_I32);
    expect_same(f, dj, iv, 3 * sizeof(int));
    int c[1] = {5}, d[1] = {2};
    float *dz = dev_zero(f, sizeof(y));
    moe_comm_alltoallv(lg, dx, c, zero, dz, c, d, MOE_COMM_F32);
    float want[7] = {0, 0, x[0], x[1], x[2], x[3], x[4]};
    expect_same(f, dz, want, sizeof(want));
    moe_comm_bcast(lg, dx, 4, MOE_COMM_F32, 0);
    expect_same(f, dx, x, 4 * sizeof(float));
    struct moe_comm_req q = {0};
    float *dw = dev_zero(f, sizeof(y));
    moe_comm_iallreduce(lg, dx, dw, 9, MOE_COMM_F32, MOE_COMM_MAX, &q);
    moe_comm_wait(lg, &q);
    assert_false(q.is_active);
    expect_same(f, dw, x, 9 * sizeof(float));
    moe_comm_barrier(lg);
    moe_comm_destroy(lg);
    moe_comm_destroy(ms);
}

/* engine/device.h without a device: host memcpy/memset and the scans (runs everywhere). */
static void test_device_host_half(void **state)
{
    (void)state;
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {0};
    moe_eng_copy(NULL, b, a, sizeof(a));
    assert_memory_equal(a, b, sizeof(a));
    moe_eng_copy_to_host(NULL, b, a, 2 * sizeof(float));
    moe_eng_copy_from_host(NULL, b + 3, a, 2 * sizeof(float));
    assert_true(b[3] == 1.0f && b[4] == 2.0f);
    moe_eng_memzero(NULL, b, sizeof(b));
    assert_true(b[0] == 0.0f && b[4] == 0.0f);
    assert_true(moe_eng_sumsq_double(NULL, a, 5) == 55.0); /* 1 + 4 + 9 + 16 + 25 */
    float v = 0.0f;
    assert_int_equal(moe_eng_first_nonfinite(NULL, a, 5, &v), 5);
    a[3] = INFINITY;
    assert_int_equal(moe_eng_first_nonfinite(NULL, a, 5, &v), 3);
    assert_true(isinf(v));
    assert_false(moe_eng_is_finite(NULL, a, 5));
    size_t fr = 1, tot = 1;
    moe_eng_dev_mem_info(NULL, &fr, &tot);
    assert_true(fr == 0 && tot == 0);
    assert_null(moe_eng_dev_stream(NULL));
    if (moe_eng_dev_count() == 0) {
        moe_eng_dev_t *d = NULL;
        struct moe_diag diag;
        memset(&diag, 0, sizeof(diag));
        assert_int_equal(moe_eng_dev_create(0, &d, &diag), MOE_ERR_UNSUPPORTED);
        assert_null(d);
        assert_true(diag.message[0] != '\0');
    }
    assert_true(moe_comm_nccl_is_built() == (moe_comm_nccl_backend() != NULL));
}

/* One GPU per rank of this node, or a reason to skip (the same answer on every rank). */
static bool can_run(int *local_rank, char *why, size_t len)
{
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int local = 0, local_size = 1;
    MPI_Comm_rank(node, &local);
    MPI_Comm_size(node, &local_size);
    MPI_Comm_free(&node);
    int devices = moe_eng_dev_count();
    int bad = 0;
    if (!moe_comm_nccl_is_built()) {
        (void)snprintf(why, len, "NCCL backend not built (no nvcc/nccl.h, or NO_CUDA=1)");
        bad = 1;
    } else if (devices == 0) {
        (void)snprintf(why, len, "no CUDA device");
        bad = 1;
    } else if (local_size > devices) {
        (void)snprintf(why, len, "%d ranks on this node but %d GPU(s): NCCL needs one per rank",
                       local_size, devices);
        bad = 1;
    }
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any && !bad) {
        (void)snprintf(why, len, "another rank cannot run NCCL");
    }
    *local_rank = local;
    return any == 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank != 0 && freopen("/dev/null", "w", stdout) == NULL) {
        return 1;
    }
    char why[160] = "";
    int local = 0;
    struct fixture fixture;
    memset(&fixture, 0, sizeof(fixture));
    struct fixture *f = NULL;
    if (size <= 8 && can_run(&local, why, sizeof(why))) {
        struct moe_diag diag;
        memset(&diag, 0, sizeof(diag));
        f = &fixture;
        f->rank = rank;
        f->size = size;
        if (moe_eng_dev_create(local, &f->dev, &diag) != MOE_OK ||
            moe_eng_dev_alloc(f->dev, (void **)&f->scratch, DEV_BYTES) != MOE_OK ||
            moe_comm_nccl_create(MPI_COMM_WORLD, moe_eng_dev_stream(f->dev),
                                 moe_eng_dev_comm_stream(f->dev), "world", &f->nccl) != MOE_OK ||
            moe_comm_mpi_create(MPI_COMM_WORLD, "world", &f->mpi) != MOE_OK) {
            fprintf(stderr, "test_comm_nccl: set-up failed: %s\n", diag.message);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        printf("# NCCL backend on %s (device %d), %d rank(s)\n", moe_eng_dev_name(f->dev), local,
               size);
    } else {
        printf("# skipping the NCCL tests: %s\n", why[0] != '\0' ? why : "more than 8 ranks");
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_host_half),
        cmocka_unit_test_prestate(test_allreduce_allgather, f),
        cmocka_unit_test_prestate(test_reducescatter_alltoall_bcast, f),
        cmocka_unit_test_prestate(test_p2p_and_nonblocking, f),
        cmocka_unit_test_prestate(test_bytes_match, f),
        cmocka_unit_test_prestate(test_splits_and_twins, f),
        cmocka_unit_test_prestate(test_local_groups, f),
    };
    int fails = cmocka_run_group_tests(tests, NULL, NULL);
    if (f != NULL) {
        moe_comm_destroy(f->nccl);
        moe_comm_destroy(f->mpi);
        moe_eng_dev_free(f->dev, f->scratch);
        moe_eng_dev_destroy(f->dev);
    }
    int total = 0;
    MPI_Allreduce(&fails, &total, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return total;
}
