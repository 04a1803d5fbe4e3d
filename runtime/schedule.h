#ifndef MT_SCHEDULE_H
#define MT_SCHEDULE_H

#include "runtime/config.h"

// Learning rate for 0-based step s: linear warmup to lr, then cosine decay to min_lr.
double lr_at_step(const mt_config *c, int s);

#endif
