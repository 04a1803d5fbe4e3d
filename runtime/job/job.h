// What every rank of a job shares: the config, its role, the shard layouts, the shared
// regions and the control plane. A job runs on one or more nodes (data parallel), each the
// same: on its node, rank 0 is the compute process and rank k >= 1 the optimizer process that
// owns shard k-1 of every parameter group. rank, world and comm are the node's; node, nodes and
// dp_comm join the ranks of one role across nodes.
#ifndef MT_JOB_H
#define MT_JOB_H

#include "kernels/bf16.h"
#include "runtime/job/control.h"
#include "runtime/model/model.h"
#include "shm/shm.h"
#include <mpi.h>
#include <stdint.h>

// ---- the job ----

typedef struct {
    const char *config_path, *resume_dir, *out_dir;
    int stop_at; // end the job (with a checkpoint) after this many steps; 0: run them all
    const char *grad_dtype; // "fp32" or "bf16": mtrun's resolution of grad_dtype "auto", or NULL
    const char *const *overrides; // key=value settings over the config file, in order
    int n_overrides;
} job_args;

typedef struct {
    mt_config cfg;
    job_args args;
    int rank, world, n_shards; // on this node; n_shards = world - 1
    MPI_Comm comm;             // this node's ranks: all that shares memory and the control plane
    // Data parallel: this node's index among `nodes`, and the ranks with this rank's place on
    // every node, in node order (the compute ranks reduce their gradients over it). The node's
    // micro-batches are cfg.micro_batches (the config's divided by nodes), the first of them the
    // global batch's micro-batch `first_micro`. world_rank: the rank in MPI_COMM_WORLD.
    int node, nodes, first_micro, world_rank;
    int gpu; // the GPU of this node's compute rank: the node's place on its host (mtrun --gpus)
    MPI_Comm dp_comm;
    MPI_Comm opt_world; // every node's optimizer ranks (MPI_COMM_NULL on compute ranks)
    MPI_Comm opt_comm;  // the optimizer ranks; MPI_COMM_NULL on the compute rank
    int numa_node, threads;
    int node_peers,
        node_index; // optimizer ranks on this host's NUMA node, and our place among them
    int n_groups;
    uint64_t group_numel[SHM_MAX_GROUPS];
    // Groups 0 .. device_groups - 1 are updated on the compute rank's device; the others by
    // the optimizer ranks, from gradient slots of grad_bytes a parameter (4: fp32, 2: bf16).
    // Both are known before the layouts are made (job_make_layouts).
    int device_groups, grad_bytes;
    // The gradient slots: one per group (0), or a ring this deep (model_grad_ring_depth), whose
    // groups are updated as their gradients land (the layouts' ring_prev says who waits on whom).
    int ring_depth;
    shard_layout *layouts; // [n_shards]
    shm_region *regions;   // [n_shards]; an optimizer rank maps only its own
    mt_control *ctl;
    int start_step; // 0, or the step a resumed checkpoint holds
    // Steps skipped for a non-finite gradient norm: in all (checkpointed, for Adam's bias
    // correction) and in a row; every rank counts the same (step_is_bad). stopped_bad: 1 when
    // max_bad_steps ended the job (with a save), 2 when a bad step ended a ring job, whose
    // groups before the bad one were already updated (no save: the step cannot be undone).
    int skipped_steps, bad_in_a_row, stopped_bad;
    int stopped_on_request;        // the step a stop request ended the job after (-1: none)
    char (*hosts)[64];             // [world]: each rank's host name, for the watchdog
    int *pids;                     // [world]: each rank's process id on its host
    double longest_step;           // seconds; the watchdog waits 3 of these when longer
    int end_step;                  // steps, or --stop-at
    char resume_path[MT_PATH_MAX]; // the checkpoint folder to resume from ("" when fresh)
    // The run folder (cfg.checkpoint_dir), held open for the job's life: "/proc/self/fd/N", the
    // path every file of the run is written through (job_hold_run_folder). cfg.checkpoint_dir
    // stays the name the user gave, for messages.
    char run_at[MT_PATH_MAX];
    char job_id[80];
    struct hf_index *hf; // model_dir's weights, checked at setup (optimizer ranks; else NULL)
} mt_job;

// Setting a job up is collective over MPI_COMM_WORLD, in three steps, so that what reads files
// (the config, a checkpoint to resume, model_dir's weights: io/) can run between them, from
// the rank program, before any shared memory exists:
//  1. job_init: the node (split_nodes in job.c: a host, or one GPU of it with mtrun --gpus;
//     MT_TEST_NODES makes virtual hosts for tests), the rank and world size on it;
//  2. job_make_layouts, once cfg, device_groups and grad_bytes are set: the parameter groups
//     and their shard layouts;
//  3. job_start: threads, the job id, the optimizers' communicator, the shared regions and the
//     control plane.
void job_init(mt_job *job, const job_args *args);
void job_make_layouts(mt_job *job);
void job_start(mt_job *job);
void job_teardown(mt_job *job);
// Bad input: every rank sees the same and reaches the same verdict; rank 0 alone says msg,
// and every rank exits with 2.
void job_fail_input(const mt_job *job, const char *msg) __attribute__((noreturn));

// Point-to-point float arrays of any length on the node's communicator, on one tag, so that
// messages between two ranks keep their order (the state of the groups the compute rank updates).
// They travel in messages of job_piece() floats (the last one shorter): a receiver may take a
// long array a piece at a time into a buffer of that size, if the sender's pieces start where
// its own do.
// MT_STATE_PIECE (model.h), or for tests MT_TEST_STATE_PIECE floats, so that a small model's
// state crosses piece boundaries too; every rank of a job reads the same.
size_t job_piece(void);
// The piece of a len-float array at `at`: for (at = 0; at < len; at += n) n = job_piece_len(..).
static inline size_t job_piece_len(uint64_t len, uint64_t at) {
    return len - at < job_piece() ? (size_t)(len - at) : job_piece();
}
float *job_piece_buffer(void); // malloc'd; ends the rank when memory is short
void job_send_floats(const float *x, size_t n, int dest);
void job_recv_floats(float *x, size_t n, int src);
// The same on any communicator and tag.
void job_send_floats_on(const float *x, size_t n, int dest, int tag, MPI_Comm comm);
void job_recv_floats_on(float *x, size_t n, int src, int tag, MPI_Comm comm);
void job_bcast_floats_on(float *x, size_t n, int root, MPI_Comm comm);

// tree_sum.c: x becomes the sum of every rank's x over comm, the same bits on every rank, summed
// in one binary tree fixed by the ranks alone: level by level, rank r (a multiple of 2s) adds
// rank r + s's partial (s = 1, 2, 4, ...; a partial without a partner moves up unchanged).
// MPI_Allreduce promises no order, and may change it with the rank count or message size;
// this one is what data-parallel gradients need to be bitwise reproducible across transports.
// scratch: n floats.
void job_allreduce_tree(float *x, size_t n, float *scratch, MPI_Comm comm);
// The same tree within one process: x[0] becomes the sum of x[0 .. count-1] as if x[i] were
// rank i's (the others are overwritten). Micro-batch gradients summed this way give the bits
// that nodes each holding a power of two of them would get from job_allreduce_tree.
void job_sum_tree(float *const *x, int count, size_t n);
// optimizer.shard_across_nodes over several nodes: this node's part of shard-relative range
// [0, len) of group g, whose Adam moments it keeps and updates (the groups the compute rank
// updates are not split). Without it, the whole range.
static inline int job_moments_split(const mt_job *j) {
    return j->cfg.shard_across_nodes && j->nodes > 1;
}
static inline void job_moment_part(const mt_job *j, int g, uint64_t len, int node, uint64_t *lo,
                                   uint64_t *n) {
    uint64_t hi = len;
    *lo = 0;
    if (job_moments_split(j) && g >= j->device_groups) shard_range(len, node, j->nodes, lo, &hi);
    *n = hi - *lo;
}
// The job's leader node writes what a run leaves (metrics, checkpoints, exports, traces).
static inline int job_writes(const mt_job *j) {
    return j->node == 0;
}

// SIGUSR1 (mtrun sends it on a first Ctrl-C or SIGTERM; mpirun passes it on to every rank), or
// the file /dev/shm/mtc-<job>-stop that mtrun makes at the same time, asks the job to stop after
// the step under way, with a checkpoint. job_start installs the handler; the compute rank
// polls, decides the step and tells the others (CONTROL_STOP).
int job_stop_requested(void);
// The job ends after `step` (it saves there): the compute rank's decision, or what it told.
// Opens the run folder (made when missing) and keeps it open: checkpoints, LATEST, pruning,
// metrics and TensorBoard go through job->run_at, so a run folder moved, or swapped for a link
// to another run, mid-job still gets this job's files, never the other run. Under mtrun it must
// be the folder mtrun locked (MT_RUN_FOLDER); else one line and exit 2.
void job_hold_run_folder(mt_job *job);
// p with job->run_at shown as the folder's name (cfg.checkpoint_dir), for messages.
const char *job_run_shown(const mt_job *job, const char *p);
void job_stop_after(mt_job *job, int step);

// The watchdog: the next control message, or, when none comes within watchdog_s (or 3 times
// the longest step so far), the job ends with a message naming what this rank waited for
// (`what`, e.g. "gradients of step 12") and the rank(s) it waited on (`from`: -1 for any).
// what = NULL waits without a limit: the start, where loading a large model's state or a
// checkpoint shows no progress for minutes, is not watched.
int job_recv(mt_job *job, control_msg *msg, const char *what, int from);

// After step `step`'s norms are known: counts a bad step, and when optimizer.max_bad_steps
// have come in a row ends the job after this step (end_step, so that it saves: the last good
// state, as bad steps change nothing). Returns whether the step is bad. With the gradient ring,
// a bad step ends the job at once, without a save (stopped_bad 2).
int job_note_step(mt_job *job, int step, int bad);

static inline int job_is_compute(const mt_job *j) {
    return j->rank == 0;
}
static inline int job_shard_of_rank(int rank) {
    return rank - 1;
}

static inline shm_control_block *job_control_block(mt_job *j, int k) {
    return (shm_control_block *)j->regions[k].base;
}
// Shard k's slice of group g's fp32 master weights, and of its gradient slot (bf16 or fp32 by
// grad_bytes); only groups g >= device_groups have them.
static inline float *job_master(mt_job *j, int k, int g) {
    return (float *)((char *)j->regions[k].base + j->layouts[k].master_offset[g]);
}
// Where [a, b) of group g meets shard k's slice: returns the elements they share, *at the first
// (0: none).
static inline uint64_t job_slice_overlap(const mt_job *j, int k, int g, uint64_t a, uint64_t b,
                                         uint64_t *at) {
    uint64_t lo = j->layouts[k].lo[g], hi = lo + j->layouts[k].len[g];
    *at = a > lo ? a : lo;
    uint64_t end = b < hi ? b : hi;
    return end > *at ? end - *at : 0;
}
static inline void *job_grad_slot(mt_job *j, int k, int g) {
    return (char *)j->regions[k].base + j->layouts[k].grad_offset[g];
}

#endif
