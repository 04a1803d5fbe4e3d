// Checkpoints: a folder step_NNNNNN/ per save under the checkpoint dir, holding state.bin
// (fp32 master, m and v of every group, in group order, independent of the sharding, so a
// checkpoint written with one -np resumes with another) and manifest.json. The optimizer ranks
// write their slices in parallel into a hidden temporary folder; it is fsynced and renamed into
// place, and only then does LATEST point at it. A crash mid-save leaves the last one intact.
#ifndef MT_CHECKPOINT_H
#define MT_CHECKPOINT_H

#include "runtime/job.h"
#include <stddef.h>

// 0 and out = "<dir>/step_NNNNNN" when dir/LATEST names a checkpoint; -1 otherwise.
int checkpoint_find_latest(const char *dir, char *out, size_t cap);
// dir is a checkpoint folder (with manifest.json) or a checkpoint dir (with LATEST).
int checkpoint_resolve(const char *dir, char *out, size_t cap, char *err, size_t errlen);
int checkpoint_read_step(const char *step_dir, int *step, char *err, size_t errlen);
// Checks that state.bin matches the job's model (group count and sizes, file size).
int checkpoint_check_state(const char *step_dir, const mt_job *job, char *err, size_t errlen);

// Collective over the optimizer ranks: state[g] holds this rank's slices of master, m and v.
typedef struct {
    float *master, *m, *v;
} group_state;
void checkpoint_save(mt_job *job, int step, group_state *state);
void checkpoint_load(mt_job *job, group_state *state);

#endif
