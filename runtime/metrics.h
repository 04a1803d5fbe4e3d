// What a run tells its user: progress on stdout and a JSONL record per step (and per eval) in
// <checkpoint dir>/metrics.jsonl.
//
// On a terminal the progress is one live line, redrawn in place every step; eval results and
// the sample print on their own lines above it. Otherwise (a log file, a pipe) every step is
// one plain "step ..." line. Under mpirun rank 0's stdout is always a pipe, so mtrun says
// whether its own stdout is a terminal: MT_TTY=1 (or 0) and MT_TTY_COLUMNS.
#ifndef MT_METRICS_H
#define MT_METRICS_H

#include "runtime/job.h"
#include "runtime/transfer.h"
#include <stdio.h>

typedef struct {
    mt_job *job;
    FILE *jsonl;
    double run_start, step_start, opt_wait_start, flops_per_token;
    int64_t steps_done;
    double peak_flops; // MFU is measured against this (see metrics_open)
    int tty, columns;  // draw a live line no wider than columns - 1
    int live_shown;    // the live line is on the screen (and the cursor at its end)
    char live[512];    // its text, to redraw it after a line printed above it
    int device_groups; // groups the compute rank updates itself (for the advice)
    double stall_seconds, stall_step_seconds; // GPU idle on the optimizers, over steady steps
    int stall_steps, advised;
} metrics;

// device_groups: how many groups the compute rank updates itself (optimizer.device_groups).
void metrics_open(metrics *mx, mt_job *job, const char *backend, int device_groups);
// Once the compute rank's memory is all allocated: GPU bytes in use (0 on the CPU) and how many
// of the layer x micro-batch passes keep their internals.
void metrics_memory(metrics *mx, size_t device_bytes, int kept, int passes);
void metrics_step_begin(metrics *mx, transfer *t);
void metrics_step_end(metrics *mx, int64_t step, double loss, transfer *t);
void metrics_eval(metrics *mx, int64_t step, double loss);
void metrics_sample(metrics *mx, const char *text);
void metrics_close(metrics *mx);

#endif
