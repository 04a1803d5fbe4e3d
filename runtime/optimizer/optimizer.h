// The optimizer process: owns one shard of every parameter group (fp32 master, Adam m and v in
// its NUMA-local memory), waits for each step's gradients in shared memory, and writes the
// updated bf16 wire weights back, group by group in forward order.
#ifndef MT_OPTIMIZER_H
#define MT_OPTIMIZER_H

#include "runtime/job/job.h"

void optimizer_run(mt_job *job);

#endif
