/*
 * Timelines as Chrome trace-event JSON (the "JSON Object Format" of Google's Trace Event Format
 * document, which chrome://tracing and ui.perfetto.dev open): {"traceEvents": [...]} with one
 * complete event ("ph": "X", "ts" and "dur" in microseconds, "pid", "tid") per interval and
 * metadata events ("ph": "M", "process_name" / "thread_name" / "process_sort_index") naming the
 * processes and threads. moefold writes three kinds: `moefold predict --trace` (one process per
 * pipeline stage), `moefold-train --trace` (one per rank) and `moefold compare --trace` (both, the
 * prediction's processes first). Every event, metadata included, carries ph, ts, dur, pid and tid,
 * so a reader need not special-case any. An event's "cat" is its phase name (model/cost.h); its
 * "args" hold the micro-batch and virtual stage when it belongs to one.
 *
 * The writer builds the file in memory and writes it atomically (json_util.h). The summary reads a
 * trace back and checks what the tests and users rely on: valid JSON, the five keys on every event,
 * no two complete events of one thread overlapping, and per process the span and the time per
 * category.
 */
#ifndef MOE_TOPOLOGIES_TRACE_FILE_H
#define MOE_TOPOLOGIES_TRACE_FILE_H

#include "model/cost.h"
#include "model/status.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A trace being written: the text so far (heap) and whether an allocation failed. */
struct moe_trace_writer {
    char *buf;
    size_t len, cap;
    bool has_failed; /* out of memory: moe_trace_write_file reports it */
    int num_events;
};

void moe_trace_init(struct moe_trace_writer *w);
void moe_trace_fini(struct moe_trace_writer *w);
/* Name process pid (sort_index orders processes in the viewer) and its thread tid. */
void moe_trace_process(struct moe_trace_writer *w, int pid, const char *name, int sort_index);
void moe_trace_thread(struct moe_trace_writer *w, int pid, int tid, const char *name);
/*
 * A complete event: name, category (a phase name), start and duration in microseconds, and the
 * micro-batch and virtual stage it belongs to (-1: none, then no args).
 */
void moe_trace_event(struct moe_trace_writer *w,
                     int pid,
                     int tid,
                     const char *name,
                     const char *cat,
                     double ts_us,
                     double dur_us,
                     int mb,
                     int vstage);
/* Finish the JSON and write it atomically to path. MOE_ERR_NOMEM, MOE_ERR_IO. */
MOE_NODISCARD enum moe_status
moe_trace_write_file(struct moe_trace_writer *w, const char *path, struct moe_diag *diag);

/*
 * The events of a timeline (model/cost.h) as processes pid_base + stage, named "<label> stage p",
 * one thread per track, shifted by shift_us. Event names: "<phase>[ wait] F|B mb<k> v<v>" for a
 * chunk's pass, "<phase>[ wait]" for per-step work.
 */
void moe_trace_timeline(struct moe_trace_writer *w,
                        const struct moe_tl_event *ev,
                        size_t num,
                        int pp,
                        int pid_base,
                        const char *label,
                        double shift_us);

/* A measured interval's op: micro-batch, virtual stage and pass packed in one int (the engine's
 * records and run.json's "timeline"), or MOE_TRACE_NO_OP for per-step work. */
#define MOE_TRACE_NO_OP (-1)
static inline int moe_trace_op_tag(int mb, int vstage, bool is_bwd)
{
    return (mb & 0xfffff) | ((vstage & 0x3ff) << 20) | ((is_bwd ? 1 : 0) << 30);
}

/* Fields of a measured record: t0 and t1 (seconds from the step's start), slot (enum moe_phase, or
 * MOE_NUM_PHASES for time no phase claimed), op tag, is_wait (1: waiting for the slowest member of
 * a collective). */
enum { MOE_TRACE_RECORD_FIELDS = 5 };

/*
 * Measured records rec[num * MOE_TRACE_RECORD_FIELDS] as process pid named name: the tracks of
 * moe_trace_timeline (unattributed time on the compute track), events named like the timeline's.
 */
void moe_trace_records(struct moe_trace_writer *w,
                       int pid,
                       const char *name,
                       const double *rec,
                       int num,
                       double shift_us);

/* ---- Reading a trace back -------------------------------------------------------------------- */

enum { MOE_TRACE_MAX_PIDS = 64 };

/* Per process: span of its complete events and time per phase (by "cat"). */
struct moe_trace_proc {
    int pid;
    double first_us, last_us;        /* earliest start, latest end */
    double phase_us[MOE_NUM_PHASES]; /* summed durations by category */
    double other_us;                 /* categories that are not phases */
    int num_events;
};

struct moe_trace_summary {
    int num_events;   /* complete events */
    int num_metadata; /* "M" events */
    int num_procs;
    struct moe_trace_proc procs[MOE_TRACE_MAX_PIDS];
    double worst_overlap_us; /* largest overlap of two complete events of one (pid, tid) */
};

/*
 * Read a trace file and summarise it. MOE_ERR_PARSE (not JSON, no traceEvents array, an event
 * without ph/ts/dur/pid/tid or with a negative duration: diag names the event's index), MOE_ERR_IO,
 * MOE_ERR_UNSUPPORTED (more than MOE_TRACE_MAX_PIDS processes), MOE_ERR_NOMEM.
 */
MOE_NODISCARD enum moe_status
moe_trace_summarize(const char *path, struct moe_trace_summary *out, struct moe_diag *diag);

#ifdef __cplusplus
}
#endif

#endif /* MOE_TOPOLOGIES_TRACE_FILE_H */
