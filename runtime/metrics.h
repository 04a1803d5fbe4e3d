// What a run tells its user: a progress line per step on stdout and a JSONL record per step
// (and per eval) in <checkpoint dir>/metrics.jsonl.
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
} metrics;

void metrics_open(metrics *mx, mt_job *job, const char *backend);
void metrics_step_begin(metrics *mx, transfer *t);
void metrics_step_end(metrics *mx, int64_t step, double loss, transfer *t);
void metrics_eval(metrics *mx, int64_t step, double loss);
void metrics_sample(metrics *mx, const char *text);
void metrics_close(metrics *mx);

#endif
