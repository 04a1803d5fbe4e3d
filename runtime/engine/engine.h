// The compute process: runs each training step layer by layer over all micro-batches
// (layer-major), streaming weights in and gradients out while it computes.
#ifndef MT_ENGINE_H
#define MT_ENGINE_H

#include "runtime/job/job.h"

void engine_run(mt_job *job);

#endif
