/*
 * nccl-tests and DeepEP outputs (cli/nccl_tests.h).
 *
 * nccl-tests: one pass over the lines, each first stripped of launcher prefixes
 * (cli/log_text.h). "# nThread" opens a table; "#  Rank" lines add ranks and hosts; a line of
 * whitespace-separated fields starting with size, count, type, redop, root is a row; "# Avg bus
 * bandwidth" closes the table. Every other line is other output -- except a `<name>_perf` word,
 * which names the next table's collective when it prints no "Collective test starting" line.
 * DeepEP: the "[tuning] Best ..." lines, anywhere.
 */
#include "cli/nccl_tests.h"

#include "cli/calibrate.h"
#include "cli/log_text.h"
#include "topologies/json_util.h"

#include <ctype.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FIELDS       48
#define MAX_TABLES       256
#define BW_REGIME_FACTOR 64.0    /* bandwidth fit: sizes from max/64 up */
#define LATENCY_MAX_B    65536.0 /* latency: sizes up to 64 KiB */

static const char *const coll_names[] = {"all_reduce", "all_gather", "reduce_scatter", "alltoall",
                                         "sendrecv"};
static const char *const other_names[] = {"broadcast", "reduce",    "gather",
                                          "scatter",   "hypercube", "alltoallv"};

const char *moe_nt_coll_name(enum moe_nt_coll c)
{
    return (int)c >= 0 && c < MOE_NT_OTHER ? coll_names[c] : c == MOE_NT_OTHER ? "other" : "?";
}

/* A collective name -> its kind; "" or a name nccl-tests does not have: MOE_NT_UNKNOWN. */
static enum moe_nt_coll coll_of(const char *name)
{
    for (size_t i = 0; i < sizeof(coll_names) / sizeof(coll_names[0]); i++) {
        if (strcmp(name, coll_names[i]) == 0) {
            return (enum moe_nt_coll)i;
        }
    }
    for (size_t i = 0; i < sizeof(other_names) / sizeof(other_names[0]); i++) {
        if (strcmp(name, other_names[i]) == 0) {
            return MOE_NT_OTHER;
        }
    }
    return MOE_NT_UNKNOWN;
}

/* The first `<name>_perf` word of s[n] with a name nccl-tests has, into out[len]. */
static bool perf_word(const char *s, size_t n, char *out, size_t len)
{
    const char *p = s;
    size_t left = n;
    while ((p = moe_log_find(p, left, "_perf")) != NULL) {
        const char *start = p;
        while (start > s && (isalnum((unsigned char)start[-1]) || start[-1] == '_')) {
            start--;
        }
        size_t m = (size_t)(p - start);
        if (m > 0 && m < len) {
            memcpy(out, start, m);
            out[m] = '\0';
            if (coll_of(out) != MOE_NT_UNKNOWN) {
                return true;
            }
        }
        left = n - (size_t)(p - s) - 5;
        p += 5;
    }
    return false;
}

/* Whitespace-separated fields of s[n] into f[max] (pointers and lengths). */
static int split(const char *s, size_t n, const char **f, size_t *fl, int max)
{
    int k = 0;
    size_t i = 0;
    while (i < n && k < max) {
        while (i < n && isspace((unsigned char)s[i])) {
            i++;
        }
        if (i >= n) {
            break;
        }
        f[k] = s + i;
        while (i < n && !isspace((unsigned char)s[i])) {
            i++;
        }
        fl[k] = (size_t)(s + i - f[k]);
        k++;
    }
    return k;
}

static bool field_double(const char *f, size_t n, double *v)
{
    char buf[64];
    if (n == 0 || n >= sizeof(buf)) {
        return false;
    }
    memcpy(buf, f, n);
    buf[n] = '\0';
    char *end = NULL;
    *v = strtod(buf, &end);
    return end == buf + n && isfinite(*v);
}

static bool field_int(const char *f, size_t n, double *v)
{
    if (!field_double(f, n, v) || *v != floor(*v)) {
        return false;
    }
    return true;
}

static bool field_word(const char *f, size_t n)
{
    if (n == 0) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (!isalnum((unsigned char)f[i]) && f[i] != '_') {
            return false;
        }
    }
    return isalpha((unsigned char)f[0]);
}

/* ------------------------------------------------------------------------------------------ */

struct nt_reader {
    const char *source;
    struct moe_nt_file *out;
    struct moe_nt_table *cur; /* the open table, NULL between tables */
    char next_name[32];       /* collective named since the last table */
    bool per_iter;            /* the header has per-iteration columns */
    char pending[512];        /* the first half of a wrapped row */
    size_t pending_n;
    int rank_seen[1024];
    int num_rank_seen;
    char hosts[64][64];
    int num_hosts;
    bool dup_rank;
};

static void unusable(struct moe_nt_table *t, const char *fmt, ...) MOE_PRINTF(2, 3);
static void unusable(struct moe_nt_table *t, const char *fmt, ...)
{
    if (!t->usable) {
        return; /* keep the first reason */
    }
    t->usable = false;
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(t->why, sizeof(t->why), fmt, ap);
    va_end(ap);
}

/* "# nThread 1 nGpus 8 minBytes ..." */
static enum moe_status open_table(struct nt_reader *r, const char *s, size_t n, int line)
{
    struct moe_nt_file *f = r->out;
    if (f->num_tables >= MAX_TABLES) {
        return MOE_OK;
    }
    struct moe_nt_table *v = realloc(f->tables, (size_t)(f->num_tables + 1) * sizeof(*v));
    if (v == NULL) {
        return MOE_ERR_NOMEM;
    }
    f->tables = v;
    struct moe_nt_table *t = &f->tables[f->num_tables++];
    memset(t, 0, sizeof(*t));
    t->usable = true;
    t->header_line = line;
    t->coll = MOE_NT_UNKNOWN;
    if (r->next_name[0] != '\0') {
        (void)snprintf(t->collective, sizeof(t->collective), "%s", r->next_name);
        t->coll = coll_of(t->collective);
    }
    double th = 0.0;
    double gp = 0.0;
    if (moe_log_field_number(s, n, "nThread", &th) && moe_log_field_number(s, n, "nGpus", &gp) &&
        th >= 1 && gp >= 1 && th * gp < 1e6) {
        t->ranks = (int)(th * gp);
    }
    t->nodes = 1;
    r->cur = t;
    r->per_iter = false;
    r->pending_n = 0;
    r->num_rank_seen = 0;
    r->num_hosts = 0;
    r->dup_rank = false;
    return MOE_OK;
}

/* "#  Rank  3 Group  0 Pid  12345 on   node-001 device  3 [0000:5d:00] NVIDIA H100 80GB HBM3" */
static void rank_line(struct nt_reader *r, const char *s, size_t n)
{
    const char *f[MAX_FIELDS];
    size_t fl[MAX_FIELDS];
    int k = split(s, n, f, fl, MAX_FIELDS);
    double rank = 0.0;
    if (k < 10 || fl[1] != 4 || memcmp(f[1], "Rank", 4) != 0 || !field_int(f[2], fl[2], &rank) ||
        fl[7] != 2 || memcmp(f[7], "on", 2) != 0) {
        return;
    }
    struct moe_nt_table *t = r->cur;
    for (int i = 0; i < r->num_rank_seen; i++) {
        if (r->rank_seen[i] == (int)rank) {
            r->dup_rank = true;
        }
    }
    if (r->num_rank_seen < (int)(sizeof(r->rank_seen) / sizeof(r->rank_seen[0]))) {
        r->rank_seen[r->num_rank_seen++] = (int)rank;
    }
    bool known = false;
    size_t hl = fl[8] < sizeof(r->hosts[0]) ? fl[8] : sizeof(r->hosts[0]) - 1;
    for (int i = 0; i < r->num_hosts && !known; i++) {
        known = strlen(r->hosts[i]) == hl && memcmp(r->hosts[i], f[8], hl) == 0;
    }
    if (!known && r->num_hosts < (int)(sizeof(r->hosts) / sizeof(r->hosts[0]))) {
        memcpy(r->hosts[r->num_hosts], f[8], hl);
        r->hosts[r->num_hosts][hl] = '\0';
        r->num_hosts++;
    }
    t->ranks = r->num_rank_seen;
    t->nodes = r->num_hosts > 0 ? r->num_hosts : 1;
    if (t->device[0] == '\0' && k > 12) { /* the name after "[bus id]" */
        const char *name = f[12];
        size_t m = (size_t)(s + n - name);
        while (m > 0 && isspace((unsigned char)name[m - 1])) {
            m--;
        }
        (void)snprintf(t->device, sizeof(t->device), "%.*s", (int)m, name);
    }
}

/* A row's fields: size count type redop root, then time algbw busbw #wrong (out-of-place). */
static bool
parse_row(const char **f, const size_t *fl, int k, bool per_iter, struct moe_nt_row *row)
{
    double size = 0.0;
    double count = 0.0;
    double root = 0.0;
    if (k < 9 || !field_int(f[0], fl[0], &size) || !field_int(f[1], fl[1], &count) ||
        !field_word(f[2], fl[2]) || !field_word(f[3], fl[3]) || !field_int(f[4], fl[4], &root) ||
        size < 0.0) {
        return false;
    }
    row->bytes = size;
    if (!field_double(f[5], fl[5], &row->time_us) || !field_double(f[6], fl[6], &row->algbw) ||
        !field_double(f[7], fl[7], &row->busbw)) {
        return false;
    }
    double w = 0.0;
    if (fl[8] == 3 && memcmp(f[8], "N/A", 3) == 0) {
        row->wrong = -1;
    } else if (field_double(f[8], fl[8], &w) && w >= 0.0) {
        row->wrong = w > 1e12 ? (long)1e12 : (long)w;
    } else {
        return false;
    }
    (void)per_iter; /* per-iteration columns follow #wrong; the first four are read */
    return true;
}

/* Whether s[n] starts like a row (size, count, type, redop, root). */
static bool row_start(const char **f, const size_t *fl, int k)
{
    double v = 0.0;
    return k >= 5 && field_int(f[0], fl[0], &v) && field_int(f[1], fl[1], &v) &&
           field_word(f[2], fl[2]) && field_word(f[3], fl[3]) && field_int(f[4], fl[4], &v);
}

static void add_row(struct moe_nt_table *t, const struct moe_nt_row *row)
{
    if (t->num_rows < MOE_NT_MAX_ROWS) {
        t->rows[t->num_rows++] = *row;
    }
    if (row->wrong > 0) {
        unusable(t,
                 "#wrong = %ld at %.0f bytes: the test found corrupted data, so its timings are "
                 "not used",
                 row->wrong, row->bytes);
    }
}

static void data_line(struct nt_reader *r, const char *s, size_t n)
{
    const char *f[MAX_FIELDS];
    size_t fl[MAX_FIELDS];
    struct moe_nt_row row;
    memset(&row, 0, sizeof(row));
    if (r->pending_n > 0) { /* the second half of a wrapped row? */
        char joined[1024];
        size_t m = n < sizeof(joined) - r->pending_n - 2 ? n : sizeof(joined) - r->pending_n - 2;
        memcpy(joined, r->pending, r->pending_n);
        joined[r->pending_n] = ' ';
        memcpy(joined + r->pending_n + 1, s, m);
        int k = split(joined, r->pending_n + 1 + m, f, fl, MAX_FIELDS);
        r->pending_n = 0;
        if (parse_row(f, fl, k, r->per_iter, &row)) {
            r->cur->num_wrapped++;
            add_row(r->cur, &row);
            return;
        }
    }
    int k = split(s, n, f, fl, MAX_FIELDS);
    if (parse_row(f, fl, k, r->per_iter, &row)) {
        add_row(r->cur, &row);
    } else if (row_start(f, fl, k) && k < 9 && n < sizeof(r->pending)) {
        memcpy(r->pending, s, n); /* wrapped, or the last line of a run cut short */
        r->pending_n = n;
    }
}

static void close_table(struct nt_reader *r)
{
    struct moe_nt_table *t = r->cur;
    if (t == NULL) {
        return;
    }
    if (r->dup_rank) {
        unusable(t, "the same rank is listed twice: several single-process tests ran side by side "
                    "(nccl-tests built without MPI=1 under mpirun?), so no collective spanned the "
                    "ranks");
    } else if (t->ranks < 2) {
        unusable(t, "%d rank: a one-rank test moves nothing between GPUs", t->ranks);
    }
    if (t->num_rows == 0) {
        unusable(t, "no result rows (the run stopped before the first size)");
    }
    if (t->coll == MOE_NT_UNKNOWN) {
        unusable(t, "cannot tell which collective this is: no 'Collective test starting' line, no "
                    "<name>_perf command before it, and the file name names none");
    } else if (t->coll == MOE_NT_OTHER) {
        unusable(t,
                 "%s_perf: moefold prices all_reduce, all_gather, reduce_scatter, alltoall "
                 "and sendrecv only",
                 t->collective);
    }
    r->cur = NULL;
    r->next_name[0] = '\0';
}

static void comment_line(struct nt_reader *r, const char *s, size_t n, int line)
{
    const char *p = moe_log_find(s, n, "Collective test starting:");
    char name[32];
    if (p != NULL) {
        size_t off = (size_t)(p - s) + 25;
        if (perf_word(s + off, n - off, name, sizeof(name))) {
            (void)snprintf(r->next_name, sizeof(r->next_name), "%s", name);
        }
        return;
    }
    if (moe_log_find(s, n, "nThread") != NULL && moe_log_find(s, n, "nGpus") != NULL) {
        close_table(r);
        if (open_table(r, s, n, line) != MOE_OK) {
            return;
        }
        return;
    }
    if (r->cur == NULL) {
        return;
    }
    if (moe_log_find(s, n, "Rank") != NULL && moe_log_find(s, n, " on ") != NULL) {
        rank_line(r, s, n);
    } else if (moe_log_find(s, n, "i_min") != NULL) {
        r->per_iter = true;
    } else if (moe_log_find(s, n, "Out of bounds values") != NULL &&
               moe_log_find(s, n, "FAILED") != NULL) {
        unusable(r->cur, "the test reports out-of-bounds values (FAILED)");
    } else if (moe_log_find(s, n, "Avg bus bandwidth") != NULL) {
        r->cur->has_footer = true;
        (void)moe_log_field_number(s, n, ":", &r->cur->avg_busbw);
        close_table(r);
    }
}

enum moe_status moe_nt_parse(const char *text,
                             size_t len,
                             const char *source,
                             struct moe_nt_file *out,
                             struct moe_diag *diag)
{
    moe_nt_file_fini(out);
    struct nt_reader *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory");
    }
    r->source = source != NULL ? source : "(nccl-tests)";
    r->out = out;
    /* The file name is the last hint for a collective. */
    char hint[32] = "";
    (void)perf_word(r->source, strlen(r->source), hint, sizeof(hint));
    if (hint[0] == '\0') {
        for (size_t i = 0; i < sizeof(coll_names) / sizeof(coll_names[0]) && hint[0] == '\0'; i++) {
            const char *base = strrchr(r->source, '/');
            base = base != NULL ? base + 1 : r->source;
            if (strstr(base, coll_names[i]) != NULL) {
                (void)snprintf(hint, sizeof(hint), "%s", coll_names[i]);
            }
        }
    }
    size_t pos = 0;
    int line_no = 1;
    struct moe_log_span sp;
    while (moe_log_next_line(text, len, &pos, &line_no, &sp)) {
        size_t k = moe_log_skip_prefixes(sp.s, sp.n);
        const char *s = sp.s + k;
        size_t n = sp.n - k;
        size_t lead = 0;
        while (lead < n && (s[lead] == ' ' || s[lead] == '\t')) {
            lead++;
        }
        char name[32];
        if (lead < n && s[lead] == '#') {
            comment_line(r, s + lead, n - lead, sp.line);
        } else if (r->cur != NULL && lead < n && isdigit((unsigned char)s[lead])) {
            data_line(r, s, n);
        } else if (perf_word(s, n, name, sizeof(name))) {
            close_table(r); /* a command line starts the next test */
            (void)snprintf(r->next_name, sizeof(r->next_name), "%s", name);
        }
    }
    close_table(r);
    for (int i = 0; i < out->num_tables; i++) {
        struct moe_nt_table *t = &out->tables[i];
        if (t->coll == MOE_NT_UNKNOWN && hint[0] != '\0' && t->usable == false &&
            strstr(t->why, "which collective") != NULL) {
            /* the file name: the test is usable when nothing else was wrong */
            (void)snprintf(t->collective, sizeof(t->collective), "%s", hint);
            t->coll = coll_of(hint);
            t->usable = true;
            t->why[0] = '\0';
            struct nt_reader tmp;
            memset(&tmp, 0, sizeof(tmp));
            tmp.cur = t;
            tmp.num_rank_seen = t->ranks;
            close_table(&tmp);
        }
    }
    free(r);
    if (out->num_tables == 0) {
        moe_diag_source(diag, source);
        return moe_diag_set(diag, MOE_ERR_NOT_FOUND,
                            "%s holds no nccl-tests table (no '# nThread ... nGpus ...' header)",
                            source != NULL ? source : "the text");
    }
    return MOE_OK;
}

enum moe_status moe_nt_read_file(const char *path, struct moe_nt_file *out, struct moe_diag *diag)
{
    char *text = NULL;
    size_t len = 0;
    MOE_TRY(moe_file_read_all(path, &text, &len, diag));
    enum moe_status st = moe_nt_parse(text, len, path, out, diag);
    free(text);
    return st;
}

void moe_nt_file_init(struct moe_nt_file *f)
{
    memset(f, 0, sizeof(*f));
}

void moe_nt_file_fini(struct moe_nt_file *f)
{
    if (f != NULL) {
        free(f->tables);
        memset(f, 0, sizeof(*f));
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Fit                                                                                          */

enum moe_status
moe_nt_fit_table(const struct moe_nt_table *t, struct moe_nt_fit *fit, struct moe_diag *diag)
{
    memset(fit, 0, sizeof(*fit));
    double x[MOE_NT_MAX_ROWS];
    double y[MOE_NT_MAX_ROWS];
    double max_b = 0.0;
    for (int i = 0; i < t->num_rows; i++) {
        const struct moe_nt_row *r = &t->rows[i];
        if (r->bytes >= max_b && r->time_us > 0.0) {
            max_b = r->bytes;
            fit->busbw_at_max = r->busbw;
        }
    }
    fit->max_bytes = max_b;
    /* Bandwidth regime: the largest sizes, at least three rows. */
    double from = max_b / BW_REGIME_FACTOR;
    size_t n = 0;
    for (int pass = 0; pass < 2 && n < 3; pass++) {
        n = 0;
        for (int i = 0; i < t->num_rows; i++) {
            const struct moe_nt_row *r = &t->rows[i];
            if (r->bytes >= from && r->bytes > 0.0 && r->time_us > 0.0 && r->busbw > 0.0) {
                x[n] = r->busbw * 1e9 * r->time_us * 1e-6; /* bus bytes */
                y[n] = r->time_us;
                n++;
            }
        }
        from = 0.0;
    }
    if (n < 3) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "%s table at line %d has %zu sizes with a bandwidth; need 3 or more",
                            t->collective, t->header_line, n);
    }
    struct moe_calib_line line;
    moe_calib_fit_line(x, y, n, &line);
    fit->busbw_gbps = line.busbw_gbps;
    fit->points = (int)n;
    fit->rms_rel_resid = line.rms_rel_resid;
    /* Latency: what the small sizes take beyond the bandwidth term. */
    double lat[MOE_NT_MAX_ROWS];
    size_t nl = 0;
    for (int i = 0; i < t->num_rows; i++) {
        const struct moe_nt_row *r = &t->rows[i];
        if (r->bytes > 0.0 && r->bytes <= LATENCY_MAX_B && r->time_us > 0.0) {
            double bus = r->busbw * 1e9 * r->time_us * 1e-6;
            lat[nl++] = r->time_us - bus / (fit->busbw_gbps * 1e9) * 1e6;
        }
    }
    if (nl > 0) {
        gsl_sort(lat, 1, nl);
        fit->latency_us = fmax(0.0, gsl_stats_median_from_sorted_data(lat, 1, nl));
    } else {
        fit->latency_us = line.latency_us;
    }
    return MOE_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* DeepEP                                                                                       */

/* The number before " GB/s (<tag>)" in s[n]; false when absent. */
static bool gbps_before(const char *s, size_t n, const char *tag, double *v)
{
    char pat[32];
    (void)snprintf(pat, sizeof(pat), " GB/s (%s)", tag);
    const char *p = moe_log_find(s, n, pat);
    if (p == NULL) {
        return false;
    }
    const char *b = p;
    while (b > s && (isdigit((unsigned char)b[-1]) || b[-1] == '.')) {
        b--;
    }
    return b < p && field_double(b, (size_t)(p - b), v) && *v > 0.0;
}

static double median_of(double *v, size_t n)
{
    if (n == 0) {
        return 0.0;
    }
    gsl_sort(v, 1, n);
    return gsl_stats_median_from_sorted_data(v, 1, n);
}

enum moe_status moe_deepep_parse(const char *text,
                                 size_t len,
                                 const char *source,
                                 struct moe_deepep_run *out,
                                 struct moe_diag *diag)
{
    memset(out, 0, sizeof(*out));
    enum { CAP = 256 };
    double d_nvl[CAP];
    double d_rdma[CAP];
    double c_nvl[CAP];
    double c_rdma[CAP];
    size_t nd = 0;
    size_t nc = 0;
    size_t ndr = 0;
    size_t ncr = 0;
    size_t pos = 0;
    int line_no = 1;
    struct moe_log_span sp;
    while (moe_log_next_line(text, len, &pos, &line_no, &sp)) {
        const char *s = sp.s;
        size_t n = sp.n;
        double v = 0.0;
        if (moe_log_find(s, n, "[config] num_tokens=") != NULL) {
            if (moe_log_field_number(s, n, "num_tokens=", &v)) {
                out->num_tokens = (int)fmin(v, 1e9);
            }
            if (moe_log_field_number(s, n, "hidden=", &v)) {
                out->hidden = (int)fmin(v, 1e9);
            }
            if (moe_log_field_number(s, n, "num_topk_groups=", &v)) {
                out->num_topk_groups = (int)fmin(v, 1e9);
            }
            if (moe_log_field_number(s, n, "num_topk=", &v)) {
                out->num_topk = (int)fmin(v, 1e9);
            }
            continue;
        }
        bool dispatch = moe_log_find(s, n, "[tuning] Best dispatch (BF16)") != NULL;
        bool combine = moe_log_find(s, n, "[tuning] Best combine") != NULL;
        if (!dispatch && !combine) {
            continue;
        }
        if (out->first_line == 0) {
            out->first_line = sp.line;
        }
        double nvl = 0.0;
        double rdma = 0.0;
        bool has_nvl = gbps_before(s, n, "NVL", &nvl);
        bool has_rdma = gbps_before(s, n, "RDMA", &rdma);
        out->internode = out->internode || has_rdma;
        if (dispatch && has_nvl && nd < CAP) {
            d_nvl[nd++] = nvl;
            if (has_rdma && ndr < CAP) {
                d_rdma[ndr++] = rdma;
            }
        } else if (combine && has_nvl && nc < CAP) {
            c_nvl[nc++] = nvl;
            if (has_rdma && ncr < CAP) {
                c_rdma[ncr++] = rdma;
            }
        }
    }
    out->num_dispatch = (int)nd;
    out->num_combine = (int)nc;
    if (nd == 0 || nc == 0) {
        moe_diag_source(diag, source);
        return moe_diag_set(diag, MOE_ERR_NOT_FOUND,
                            "%s has no DeepEP '[tuning] Best dispatch (BF16): ... GB/s (NVL)' and "
                            "'[tuning] Best combine: ...' lines (%zu and %zu found)",
                            source != NULL ? source : "the text", nd, nc);
    }
    out->dispatch_nvl_gbps = median_of(d_nvl, nd);
    out->combine_nvl_gbps = median_of(c_nvl, nc);
    out->dispatch_rdma_gbps = median_of(d_rdma, ndr);
    out->combine_rdma_gbps = median_of(c_rdma, ncr);
    return MOE_OK;
}
