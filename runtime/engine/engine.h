// The compute process: runs each training step layer by layer over all micro-batches
// (layer-major), streaming weights in and gradients out while it computes.
#ifndef MT_ENGINE_H
#define MT_ENGINE_H

#include "runtime/job/job.h"

typedef struct engine engine;

// Compute rank, before the shared regions exist: picks the backend (cuda when there is a GPU,
// unless the config says cpu) and sets job->device_groups, the groups it will update itself
// (optimizer.device_groups, "auto" resolved against the device's free memory). The optimizer
// ranks learn that number before the regions are laid out: those groups get no slots there.
engine *engine_new(mt_job *job);
// The training loop; frees e.
void engine_run(engine *e);

#endif
