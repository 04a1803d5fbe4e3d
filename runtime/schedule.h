#ifndef MT_SCHEDULE_H
#define MT_SCHEDULE_H

#include "kernels/adamw.h"
#include "runtime/config.h"

// Learning rate for 0-based step s: linear warmup to lr, then cosine decay to min_lr.
double lr_at_step(const mt_config *c, int s);

// AdamW's hyperparameters for 0-based step s, with the step's clip coefficient: the optimizer
// ranks and the compute rank (for the groups it updates itself) use the very same values.
adamw_params adamw_params_at_step(const mt_config *c, int s, float grad_scale);

#endif
