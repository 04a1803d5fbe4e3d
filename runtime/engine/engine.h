// The compute process: runs each training step layer by layer over all micro-batches
// (layer-major), streaming weights in and gradients out while it computes.
#ifndef MT_ENGINE_H
#define MT_ENGINE_H

#include "runtime/job/job.h"

typedef struct engine engine;

// Compute rank, before the shared regions exist: picks the backend (cuda when there is a GPU,
// unless the config says cpu), resolves the "auto" settings against the device's free memory
// with the plan's rule (plan_choose) and sets job->device_groups, the groups it will update
// itself: the optimizer ranks learn that number before the regions are laid out, as those
// groups get no slots there. NULL, with the plan's one-line message in err, when its buffers
// would not fit the device.
engine *engine_new(mt_job *job, char *err, size_t errlen);
// The training loop; frees e.
void engine_run(engine *e);

#endif
