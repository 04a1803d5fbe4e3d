// What a run shows its user: progress on stdout, metrics.jsonl, and a Chrome/Perfetto trace.
#ifndef MT_OBSERVE_H
#define MT_OBSERVE_H

#include "runtime/job/job.h"
#include <stdint.h>
#include <stdio.h>

// ---- the trace ----

// A Chrome/Perfetto trace of chosen steps (trace_steps in train.cfg). Every rank records spans
// into an array allocated at the start (no I/O and no allocation while training); at the end
// the optimizer ranks write part files and rank 0 merges them, with its own spans, into
// <checkpoint dir>/trace.json. All times are CLOCK_MONOTONIC microseconds: one clock for
// every process of a node, so the tracks of different ranks line up.

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

// Every rank, before its first step. Tracing is on when the job's steps meet trace_steps, on
// the leader node (job_writes): the trace is one node's.
void trace_open(const mt_config *c, const mt_job *job, int start_step, int end_step);
// The step now running (0-based); spans are recorded only while it is a traced one.
void trace_set_step(int64_t step);
int trace_active(void);
// The tag of a span of the current step, or an empty one when the step is not traced.
trace_tag trace_tag_of(const char *name, int arg_kind, int arg);
double trace_now_us(void);
// Thread-safe; spans past the array's capacity are counted and dropped.
void trace_record(int track, trace_tag tag, double begin_us, double end_us);
// Collective over the node's ranks when the job traces (every rank calls it, or none).
void trace_finish(void);

// ---- TensorBoard ----

// Event files of scalars in the run folder, for `tensorboard --logdir runs/` (tensorboard.c has
// the format). NULL when the file cannot be made (said on stderr); every call takes NULL.
typedef struct tb_writer tb_writer;
tb_writer *tb_open(const char *dir, const char *shown_dir); // dir: where; shown_dir: its name
// One event per step: tb_begin, any number of tb_scalar (non-finite values are left out; tags
// under 128 bytes), then tb_end writes and flushes it.
void tb_begin(tb_writer *w, int64_t step);
void tb_scalar(tb_writer *w, const char *tag, double value);
void tb_end(tb_writer *w);
void tb_close(tb_writer *w);

// ---- metrics ----

// What a run tells its user: progress on stdout and a JSONL record per step (and per eval) in
// <checkpoint dir>/metrics.jsonl, and the same scalars in TensorBoard event files beside it.
//
// On a terminal the progress is one live line, redrawn in place every step; eval results and
// the sample print on their own lines above it. Otherwise (a log file, a pipe) every step is
// one plain "step ..." line. Under mpirun rank 0's stdout is always a pipe, so mtrun says
// whether its own stdout is a terminal: MT_TTY=1 (or 0) and MT_TTY_COLUMNS.

// What the copy engines and the compute stream did since the last call (CUDA backend; on the
// CPU backend only the copy times are known; compute_busy_seconds and opt_stall_seconds are
// negative).
typedef struct {
    double h2d_seconds, h2d_bytes, d2h_seconds, d2h_bytes;
    double compute_busy_seconds, compute_span_seconds;
    double opt_stall_seconds; // compute-stream idle while the host waited on the optimizers
    // the NVMe tier: bytes read from and written to storage.dir by every rank of the node since
    // the last call (< 0: no tier)
    double disk_read_bytes, disk_write_bytes;
} transfer_stats;

// What a step cost besides its time, as the engine measured it.
typedef struct {
    transfer_stats transfers;
    double opt_wait_seconds; // the host's wait on the optimizer ranks' weights
    double grad_sumsq;       // every group's squared gradient norm, summed: the clip's norm
    int64_t targets;         // the global batch's target tokens: the loss is their mean
    // MoE: the load-balancing loss and each MoE layer's tokens per expert (NULL: dense)
    double aux_loss;
    const int64_t *moe_load;
} step_costs;

typedef struct {
    mt_job *job;
    // metrics.jsonl: each record is formatted into jsonl (a memory stream) and goes out to fd
    // in one write, whole or not at all (metrics_line_out); lost: records that could not be
    // written (said once)
    FILE *jsonl;
    char *line;
    size_t line_size;
    int fd, lost;
    tb_writer *tb; // the same scalars for TensorBoard
    double run_start, step_start, step_stop, flops_per_token;
    long tokens_per_step; // every node's: the global batch
    int64_t steps_done;
    double peak_flops; // MFU is measured against this (see metrics_open)
    int tty, columns;  // draw a live line no wider than columns - 1
    int live_shown;    // the live line is on the screen (and the cursor at its end)
    char live[512];    // its text, to redraw it after a line printed above it
    int device_groups; // groups the compute rank updates itself (for the advice)
    double stall_seconds, stall_step_seconds; // GPU idle on the optimizers, over steady steps
    int stall_steps, advised;
    double progress_every, progress_last, last_step_s; // metrics_progress
} metrics;

// device_groups: how many groups the compute rank updates itself (optimizer.device_groups).
void metrics_open(metrics *mx, mt_job *job, const char *backend, int device_groups);
// Once the compute rank's memory is all allocated: GPU bytes in use (0 on the CPU) and how many
// of the layer x micro-batch passes keep their internals.
void metrics_memory(metrics *mx, size_t device_bytes, int kept, int passes);
// A step's wall time runs from begin to stop; end reports it with what else it cost.
void metrics_step_begin(metrics *mx);
void metrics_step_stop(metrics *mx);
void metrics_step_end(metrics *mx, int64_t step, double loss, const step_costs *costs);
// A long step (minutes at long context) says how far it is: `done` of `total` passes of
// `phase` ("forward", "backward"), the time in and the last step's length. From
// MT_PROGRESS_S seconds (default 30) into the step, every as many; on a terminal, the live line.
void metrics_progress(metrics *mx, int64_t step, const char *phase, int done, int total);
void metrics_eval(metrics *mx, int64_t step, double loss);
void metrics_sample(metrics *mx, const char *text);
void metrics_close(metrics *mx);

// moe_load.c: a MoE step's routing from its tokens per expert (load[moe layer * E + e]): the
// largest max/mean over the layers and the idle experts in all; and the JSON fields aux_loss
// and expert_load (per MoE layer, in order: max_over_mean and idle).
void moe_load_summary(const mt_model *m, const int64_t *load, double *worst, int *idle);
void moe_load_json(FILE *f, const mt_model *m, double aux, const int64_t *load);

#endif
