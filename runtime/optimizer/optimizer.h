// The optimizer process: owns one shard of every parameter group (fp32 master in its shared
// region, Adam m and v private, all NUMA-local), waits for each step's gradients in shared
// memory, updates the master in place and announces it, group by group in forward order.
#ifndef MT_OPTIMIZER_H
#define MT_OPTIMIZER_H

#include "runtime/job/job.h"

void optimizer_run(mt_job *job);

#endif
