// Checkpoints: a folder step_NNNNNN/ per save under the checkpoint dir, holding state.bin
// (fp32 master, m and v of every group, in group order, independent of the sharding, so a
// checkpoint written with one -np resumes with another) and manifest.json. The optimizer ranks
// write their slices in parallel into a hidden temporary folder; it is fsynced and renamed into
// place, and only then does LATEST point at it. A crash mid-save leaves the last one intact.
// manifest.json (version 2) records the model shape, the data position and an XXH64 checksum
// of every 64 MiB block of state.bin, so that resume refuses a damaged or mismatched checkpoint.
// See docs/checkpoints.md.
#ifndef MT_CHECKPOINT_H
#define MT_CHECKPOINT_H

#include "runtime/job.h"
#include <stddef.h>
#include <stdint.h>

// 0 and out = "<dir>/step_NNNNNN" when dir/LATEST names a checkpoint; -1 otherwise.
int checkpoint_find_latest(const char *dir, char *out, size_t cap);
// dir is a checkpoint folder (with manifest.json) or a checkpoint dir (with LATEST).
int checkpoint_resolve(const char *dir, char *out, size_t cap, char *err, size_t errlen);
int checkpoint_read_step(const char *step_dir, int *step, char *err, size_t errlen);
// Checks that manifest.json (version, model shape, checksum list) and state.bin's header and
// size match the job's config. Local: every rank reaches the same verdict.
int checkpoint_check_state(const char *step_dir, const mt_job *job, char *err, size_t errlen);
// Collective over comm, after checkpoint_check_state passed: each member hashes every
// size-th block of state.bin and all learn the first mismatching block, if any (0 or -1).
int checkpoint_verify_state(const char *step_dir, const mt_job *job, MPI_Comm comm, char *err,
                            size_t errlen);
// checkpoint.keep: removes the oldest step_NNNNNN folders of dir beyond the keep newest (by
// step), never latest_name, nothing else. keep <= 0 keeps all. Returns how many went.
int checkpoint_prune(const char *dir, int keep, const char *latest_name);
uint64_t checkpoint_xxh64(const void *data, size_t len); // XXH64 with seed 0

// Whether the step that makes weights `version` ends with a save (checkpoint.interval, and
// always at the job's last step), and whether the job ends with an export to export_dir (only a
// run that reaches its last step exports; --stop-at is a pause, not the end).
int checkpoint_due(const mt_job *job, int version);
int checkpoint_export_due(const mt_job *job);

// Collective over the optimizer ranks: state[g] holds this rank's slices of master, m and v.
typedef struct {
    float *master, *m, *v;
} group_state;
void checkpoint_save(mt_job *job, int step, group_state *state);
void checkpoint_load(mt_job *job, group_state *state);

#endif
