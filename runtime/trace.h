// A Chrome/Perfetto trace of chosen steps (trace_steps in train.cfg). Every rank records spans
// into an array allocated at the start (no I/O and no allocation while training); at the end
// the optimizer ranks write part files and rank 0 merges them, with its own spans, into
// <checkpoint dir>/trace.json. All times are CLOCK_MONOTONIC microseconds: one clock for
// every process of a node, so the tracks of different ranks line up.
#ifndef MT_TRACE_H
#define MT_TRACE_H

#include "runtime/config.h"
#include <stdint.h>

// Tracks (thread ids in the trace). Rank 0: the compute stream, the copy streams and the host
// thread (its waits and the step spans); an optimizer rank has one track.
enum { TRACE_COMPUTE = 1, TRACE_H2D, TRACE_D2H, TRACE_HOST, TRACE_OPTIMIZER };

// How a span's number is written after its name.
enum { TRACE_ARG_NONE, TRACE_ARG_LAYER, TRACE_ARG_GROUP, TRACE_ARG_STEP };

// What a span is called and the step it belongs to, fixed when the work is issued (a copy
// may run, and a GPU span is converted, later). name == NULL: nothing to record.
typedef struct {
    const char *name; // a string literal: "fwd", "h2d", "adamw", ...
    int32_t arg;      // layer (" L3"), group (" embed", " L3", " head") or 1-based step
    int32_t arg_kind;
    int64_t step; // 0-based
} trace_tag;

// Every rank, before its first step. Tracing is on when the job's steps meet trace_steps.
void trace_open(const mt_config *c, int rank, int world, int start_step, int end_step);
// The step now running (0-based); spans are recorded only while it is a traced one.
void trace_set_step(int64_t step);
int trace_active(void);
// The tag of a span of the current step, or an empty one when the step is not traced.
trace_tag trace_tag_of(const char *name, int arg_kind, int arg);
double trace_now_us(void);
// Thread-safe; spans past the array's capacity are counted and dropped.
void trace_record(int track, trace_tag tag, double begin_us, double end_us);
// Collective over MPI_COMM_WORLD when the job traces (every rank calls it, or none).
void trace_finish(void);

#endif
