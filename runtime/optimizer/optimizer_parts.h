// The optimizer process's parts, private to runtime/optimizer: its state, and what update.c
// (AdamW over a rank's part of a group, and announcing the result) and receive.c (a step's
// gradients arriving, and with the gradient ring the updates they start) give optimizer.c.
#ifndef MT_OPTIMIZER_PARTS_H
#define MT_OPTIMIZER_PARTS_H

#include "kernels/adamw.h"
#include "runtime/job/job.h"
#include "runtime/optimizer/storage.h"
#include <stdint.h>

typedef struct {
    mt_job *job;
    int shard;
    group_state *state; // [n_groups]
    double *sumsq;      // [n_groups]: this step's squared gradient norm of each group
    int64_t *grads_step;
    int slow_ms;  // for tests (MT_FAULT_SLOW_ADAMW_MS): extra time per group update
    int ring_bad; // the ring: a group of this step had a non-finite norm
    // the ring's updates go by urgency, a piece at a time (receive.c), not whole in arrival
    // order; left[g]: the elements of group g's part still to update this step
    int reorder;
    uint64_t piece, *left;
    // [n_groups]: the part of each group's shard slice whose moments this rank keeps and
    // updates (job_moment_part: all of it unless the state is split across nodes)
    uint64_t *part_lo, *part_n;
    storage *tier; // storage.*: gradients and/or moments on disk (NULL: all in memory)
    // the groups this rank updates, in the order it updates them: forward, or the backward's
    // with the gradient ring
    int order[SHM_MAX_GROUPS], n_order;
    int arrival[SHM_MAX_GROUPS]; // every group, in the order their gradients are announced
    int64_t ring_next;           // storage.master: the weight ring's entries written so far
} optimizer;

// update.c. The master in the shard's region is at `version`: the compute rank may stream it.
void opt_publish_weights(optimizer *o, int g, int version);
// Piece k of group g at `version`, fresh, into the next entry of the region's weight ring.
void opt_ring_put(optimizer *o, int g, int k, int64_t version, const float *src, uint64_t n);
// Group g's whole AdamW step on this rank's part, then announced (opt_finish_group).
void opt_update_group(optimizer *o, int g, int step, const adamw_params *hp);
// Elements [at, at + n) of this rank's part of group g (state in memory, no tier).
void opt_update_span(optimizer *o, int g, uint64_t at, uint64_t n, int step,
                     const adamw_params *hp);
// Every element of group g's part updated: its master gathered, on disk where the tier keeps
// it, the trace's "adamw" span from t0 (< 0: none) ended, and announced at step + 1.
void opt_finish_group(optimizer *o, int g, int step, double t0);

// receive.c: the step's gradients, each group's with its squared norm; with the ring, each
// group updated as they land.
void opt_receive_step(optimizer *o, int step);

#endif
