/*
 * Chrome trace-event files (topologies/trace_file.h): a writer that appends events to a text
 * buffer and writes it atomically, the conversion of a model timeline into processes and threads,
 * and a reader that checks and summarises a trace (the tests' and users' check of what a viewer
 * shows). Times are printed with 3 decimals of a microsecond (nanoseconds).
 */
#include "topologies/trace_file.h"

#include "topologies/json_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void moe_trace_init(struct moe_trace_writer *w)
{
    memset(w, 0, sizeof(*w));
}

void moe_trace_fini(struct moe_trace_writer *w)
{
    free(w->buf);
    memset(w, 0, sizeof(*w));
}

static void put(struct moe_trace_writer *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void put(struct moe_trace_writer *w, const char *fmt, ...)
{
    if (w->has_failed) {
        return;
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = w->cap - w->len;
        int n = vsnprintf(w->buf != NULL ? w->buf + w->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            w->has_failed = true;
            return;
        }
        if ((size_t)n < room) {
            w->len += (size_t)n;
            return;
        }
        size_t cap = w->cap > 0 ? w->cap : 1u << 16;
        while (cap - w->len <= (size_t)n) {
            cap *= 2;
        }
        char *b = realloc(w->buf, cap);
        if (b == NULL) {
            w->has_failed = true;
            return;
        }
        w->buf = b;
        w->cap = cap;
    }
}

/* Names here are moefold's own (phases, stage and rank labels): no character needs escaping
 * except what a caller-given label might hold, which is reduced to printable ASCII without quotes
 * or backslashes. */
static void put_name(struct moe_trace_writer *w, const char *s)
{
    char clean[128];
    size_t n = 0;
    for (; s[0] != '\0' && n + 1 < sizeof(clean); s++) {
        unsigned char ch = (unsigned char)s[0];
        clean[n++] = (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\') ? (char)ch : '_';
    }
    clean[n] = '\0';
    put(w, "\"%s\"", clean);
}

static void begin_event(struct moe_trace_writer *w)
{
    put(w, "%s\n", w->num_events == 0 ? "{\"traceEvents\": [" : ",");
    w->num_events++;
}

void moe_trace_process(struct moe_trace_writer *w, int pid, const char *name, int sort_index)
{
    begin_event(w);
    put(w,
        "{\"name\":\"process_name\",\"ph\":\"M\",\"ts\":0,\"dur\":0,\"pid\":%d,\"tid\":0,"
        "\"args\":{\"name\":",
        pid);
    put_name(w, name);
    put(w, "}}");
    begin_event(w);
    put(w,
        "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"ts\":0,\"dur\":0,\"pid\":%d,\"tid\":0,"
        "\"args\":{\"sort_index\":%d}}",
        pid, sort_index);
}

void moe_trace_thread(struct moe_trace_writer *w, int pid, int tid, const char *name)
{
    begin_event(w);
    put(w,
        "{\"name\":\"thread_name\",\"ph\":\"M\",\"ts\":0,\"dur\":0,\"pid\":%d,\"tid\":%d,"
        "\"args\":{\"name\":",
        pid, tid);
    put_name(w, name);
    put(w, "}}");
}

void moe_trace_event(struct moe_trace_writer *w,
                     int pid,
                     int tid,
                     const char *name,
                     const char *cat,
                     double ts_us,
                     double dur_us,
                     int mb,
                     int vstage)
{
    begin_event(w);
    put(w, "{\"name\":");
    put_name(w, name);
    put(w, ",\"cat\":");
    put_name(w, cat);
    put(w, ",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d", ts_us, dur_us, pid, tid);
    if (mb >= 0) {
        put(w, ",\"args\":{\"mb\":%d,\"v\":%d}", mb, vstage);
    }
    put(w, "}");
}

enum moe_status
moe_trace_write_file(struct moe_trace_writer *w, const char *path, struct moe_diag *diag)
{
    if (w->num_events == 0) {
        put(w, "{\"traceEvents\": [");
    }
    put(w, "\n],\n\"displayTimeUnit\": \"ms\"}\n");
    if (w->has_failed) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory writing the trace %s", path);
    }
    return moe_file_write_atomic(path, w->buf, w->len, diag);
}

void moe_trace_timeline(struct moe_trace_writer *w,
                        const struct moe_tl_event *ev,
                        size_t num,
                        int pp,
                        int pid_base,
                        const char *label,
                        double shift_us)
{
    for (int p = 0; p < pp; p++) {
        char name[96];
        (void)snprintf(name, sizeof(name), "%s stage %d", label, p);
        moe_trace_process(w, pid_base + p, name, pid_base + p);
        for (int t = 0; t < MOE_TL_NUM_TRACKS; t++) {
            moe_trace_thread(w, pid_base + p, t, moe_tl_track_name((enum moe_tl_track)t));
        }
    }
    for (size_t i = 0; i < num; i++) {
        const struct moe_tl_event *e = &ev[i];
        const char *phase = moe_phase_name((enum moe_phase)e->phase);
        char name[96];
        if (e->mb >= 0) {
            (void)snprintf(name, sizeof(name), "%s%s %c mb%d v%d", phase, e->is_wait ? " wait" : "",
                           e->is_bwd ? 'B' : 'F', e->mb, e->vstage);
        } else {
            (void)snprintf(name, sizeof(name), "%s%s", phase, e->is_wait ? " wait" : "");
        }
        moe_trace_event(w, pid_base + e->stage, e->track, name, phase, e->start_s * 1e6 + shift_us,
                        e->dur_s * 1e6, e->mb, e->vstage);
    }
}

void moe_trace_records(struct moe_trace_writer *w,
                       int pid,
                       const char *name,
                       const double *rec,
                       int num,
                       double shift_us)
{
    moe_trace_process(w, pid, name, pid);
    for (int t = 0; t < MOE_TL_NUM_TRACKS; t++) {
        moe_trace_thread(w, pid, t, moe_tl_track_name((enum moe_tl_track)t));
    }
    for (int i = 0; i < num; i++) {
        const double *o = rec + (size_t)i * MOE_TRACE_RECORD_FIELDS;
        int slot = (int)o[2];
        int tag = (int)o[3];
        bool is_wait = o[4] != 0.0;
        bool is_phase = slot >= 0 && slot < MOE_NUM_PHASES;
        const char *phase = is_phase ? moe_phase_name((enum moe_phase)slot) : "unattributed";
        int tid = is_phase ? (int)moe_tl_track_of((enum moe_phase)slot) : (int)MOE_TL_COMPUTE;
        char ev[96];
        int mb = -1;
        int v = -1;
        if (tag != MOE_TRACE_NO_OP) {
            mb = tag & 0xfffff;
            v = (tag >> 20) & 0x3ff;
            (void)snprintf(ev, sizeof(ev), "%s%s %c mb%d v%d", phase, is_wait ? " wait" : "",
                           (tag >> 30) & 1 ? 'B' : 'F', mb, v);
        } else {
            (void)snprintf(ev, sizeof(ev), "%s%s", phase, is_wait ? " wait" : "");
        }
        moe_trace_event(w, pid, tid, ev, phase, o[0] * 1e6 + shift_us, (o[1] - o[0]) * 1e6, mb, v);
    }
}

/* ---- Reading --------------------------------------------------------------------------------- */

static int phase_of(const char *cat)
{
    for (int p = 0; p < MOE_NUM_PHASES; p++) {
        if (strcmp(cat, moe_phase_name((enum moe_phase)p)) == 0) {
            return p;
        }
    }
    return -1;
}

/* A complete event's thread key, start and end, for the overlap check. */
struct span {
    int pid, tid;
    double t0, t1;
};

static int span_cmp(const void *a, const void *b)
{
    const struct span *x = a;
    const struct span *y = b;
    if (x->pid != y->pid) {
        return x->pid < y->pid ? -1 : 1;
    }
    if (x->tid != y->tid) {
        return x->tid < y->tid ? -1 : 1;
    }
    return x->t0 < y->t0 ? -1 : (x->t0 > y->t0 ? 1 : 0);
}

static struct moe_trace_proc *proc_of(struct moe_trace_summary *s, int pid)
{
    for (int i = 0; i < s->num_procs; i++) {
        if (s->procs[i].pid == pid) {
            return &s->procs[i];
        }
    }
    if (s->num_procs == MOE_TRACE_MAX_PIDS) {
        return NULL;
    }
    struct moe_trace_proc *p = &s->procs[s->num_procs++];
    memset(p, 0, sizeof(*p));
    p->pid = pid;
    p->first_us = INFINITY;
    p->last_us = -INFINITY;
    return p;
}

static enum moe_status summarize(const cJSON *events,
                                 const char *path,
                                 struct span *spans,
                                 struct moe_trace_summary *out,
                                 struct moe_diag *diag)
{
    int i = 0;
    const cJSON *e = NULL;
    cJSON_ArrayForEach(e, events)
    {
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "ph");
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(e, "ts");
        const cJSON *dur = cJSON_GetObjectItemCaseSensitive(e, "dur");
        const cJSON *pid = cJSON_GetObjectItemCaseSensitive(e, "pid");
        const cJSON *tid = cJSON_GetObjectItemCaseSensitive(e, "tid");
        if (!cJSON_IsString(ph) || !cJSON_IsNumber(ts) || !cJSON_IsNumber(dur) ||
            !cJSON_IsNumber(pid) || !cJSON_IsNumber(tid) || dur->valuedouble < 0.0) {
            moe_diag_source(diag, path);
            return moe_diag_set(diag, MOE_ERR_PARSE,
                                "trace event %d lacks one of ph, ts, dur, pid, tid (or has a "
                                "negative dur)",
                                i);
        }
        i++;
        if (strcmp(ph->valuestring, "X") != 0) {
            out->num_metadata++;
            continue;
        }
        struct moe_trace_proc *p = proc_of(out, pid->valueint);
        if (p == NULL) {
            return moe_diag_set(diag, MOE_ERR_UNSUPPORTED, "%s has more than %d processes", path,
                                MOE_TRACE_MAX_PIDS);
        }
        double t0 = ts->valuedouble;
        double t1 = t0 + dur->valuedouble;
        p->first_us = fmin(p->first_us, t0);
        p->last_us = fmax(p->last_us, t1);
        p->num_events++;
        const cJSON *cat = cJSON_GetObjectItemCaseSensitive(e, "cat");
        int k = cJSON_IsString(cat) ? phase_of(cat->valuestring) : -1;
        if (k >= 0) {
            p->phase_us[k] += dur->valuedouble;
        } else {
            p->other_us += dur->valuedouble;
        }
        spans[out->num_events++] = (struct span){pid->valueint, tid->valueint, t0, t1};
    }
    qsort(spans, (size_t)out->num_events, sizeof(*spans), span_cmp);
    for (int k = 1; k < out->num_events; k++) {
        const struct span *a = &spans[k - 1];
        const struct span *b = &spans[k];
        if (a->pid == b->pid && a->tid == b->tid) {
            out->worst_overlap_us = fmax(out->worst_overlap_us, a->t1 - b->t0);
        }
    }
    return MOE_OK;
}

enum moe_status
moe_trace_summarize(const char *path, struct moe_trace_summary *out, struct moe_diag *diag)
{
    memset(out, 0, sizeof(*out));
    cJSON *root = NULL;
    MOE_TRY(moe_json_read_file(path, &root, diag));
    const cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    if (!cJSON_IsArray(events)) {
        cJSON_Delete(root);
        moe_diag_source(diag, path);
        return moe_diag_set(diag, MOE_ERR_PARSE, "no traceEvents array");
    }
    int n = cJSON_GetArraySize(events);
    struct span *spans = malloc((size_t)(n > 0 ? n : 1) * sizeof(*spans));
    if (spans == NULL) {
        cJSON_Delete(root);
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory reading %s", path);
    }
    enum moe_status st = summarize(events, path, spans, out, diag);
    free(spans);
    cJSON_Delete(root);
    return st;
}
