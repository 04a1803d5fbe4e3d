// A copy stream for the CPU backend: a worker thread that runs queued jobs in order, so the
// engine can overlap "H2D" weight fetches and "D2H" gradient offloads with compute exactly as
// it does with CUDA streams. A ticket is to a stream what a recorded event is to CUDA's.
#ifndef MT_STREAM_H
#define MT_STREAM_H

#include "runtime/observe/observe.h"
#include <stdint.h>

typedef struct copy_stream copy_stream;
typedef void (*stream_job_fn)(void *arg);

// trace_track: where the trace records this stream's jobs (TRACE_H2D, ...).
copy_stream *stream_new(const char *name, int trace_track);
// Queues fn(arg); returns the job's ticket (1, 2, ...). arg must live until the job has run.
uint64_t stream_submit(copy_stream *s, stream_job_fn fn, void *arg);
// The same, and the job's run time becomes a trace span named by tag (none if tag.name is NULL).
uint64_t stream_submit_tagged(copy_stream *s, stream_job_fn fn, void *arg, trace_tag tag);
int stream_done(copy_stream *s, uint64_t ticket);
void stream_wait(copy_stream *s, uint64_t ticket);
// Seconds the worker spent running jobs since the last call (for busy fractions).
double stream_take_busy_seconds(copy_stream *s);
void stream_free(copy_stream *s);

#endif
